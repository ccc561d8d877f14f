//! The shard's registry of its clients: who they are and what they are
//! doing, for cancel requests, the admin console and KILL.
//!
//! A session updates its own entry through `Cell`s (a state change is a store,
//! not a lookup); only the shard's own thread ever touches an entry.

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll, Waker};
use std::time::SystemTime;

use crate::server::CancelKey;

/// What a client is doing, as the admin console shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientState {
    /// Logged in, holding no server connection, nothing to run.
    Idle,
    /// Waiting for a server connection.
    Waiting,
    /// Holding a server connection.
    Active,
}

impl ClientState {
    pub fn as_str(self) -> &'static str {
        match self {
            ClientState::Idle => "idle",
            ClientState::Waiting => "waiting",
            ClientState::Active => "active",
        }
    }
}

/// A client's request that went to the server behind another client's
/// (server pipelining), as far as a cancel request for it goes.
///
/// Such a request starts the moment the one ahead ends, which is about when
/// a cancel request held until then is sent, and PostgreSQL ignores a cancel
/// that reaches a backend still reading its next command (about one in two
/// hundred, sent right at the hand-over, was lost). So a cancel sent for it
/// is checked a little later and sent once more if it still runs (see
/// `runtime::cancel::cancel_again_while_behind`); meanwhile no other
/// client's request goes to the server behind it, which a late cancel could
/// otherwise stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Behind {
    /// Not behind another's, answered, or another client's request is (or
    /// may be) behind it: a cancel is sent once.
    No,
    /// Handed over, unanswered, and no other client's request behind it.
    Alone,
    /// As `Alone`, with a cancel sent and not checked yet.
    Cancelled,
}

/// A number no other client or server connection of this process has had
/// (SHOW CLIENTS' and SERVERS' `id`, as PgBouncer's). Taken once per login
/// and per server connection opened, never on the query path.
pub fn next_connection_id() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// Who a client is, fixed at login.
#[derive(Debug, Clone)]
pub struct ClientInfo {
    pub user: String,
    pub database: String,
    /// Where it connected from; None over the unix socket.
    pub peer: Option<std::net::SocketAddr>,
    pub application_name: Box<str>,
    pub admin: bool,
    /// Protocol and cipher when the client came in over TLS (SHOW CLIENTS' tls).
    pub tls: Option<Box<str>>,
    /// A replication connection's kind; SHOW CLIENTS' `replication` (see
    /// [`ClientInfo::replication_str`]).
    pub replication: Option<crate::client::replication::Mode>,
    /// The client's process id over the unix socket, 0 over TCP (SHOW
    /// CLIENTS' `remote_pid`, as PgBouncer's).
    pub remote_pid: i32,
}

impl ClientInfo {
    /// A plain client of `user` on `database` over the unix socket (for tests).
    #[cfg(test)]
    pub fn over_the_socket(user: &str, database: &str) -> ClientInfo {
        ClientInfo {
            user: user.into(),
            database: database.into(),
            peer: None,
            application_name: Box::default(),
            admin: false,
            tls: None,
            replication: None,
            remote_pid: 0,
        }
    }

    /// SHOW CLIENTS' `replication`: "none", "physical" or "logical".
    pub fn replication_str(&self) -> &'static str {
        self.replication.map_or("none", crate::client::replication::Mode::as_str)
    }

    /// Its address as SHOW CLIENTS gives it (empty over the unix socket).
    pub fn addr(&self) -> String {
        self.peer.map(|p| p.ip().to_string()).unwrap_or_default()
    }

    /// Its port (0 over the unix socket).
    pub fn port(&self) -> u16 {
        self.peer.map(|p| p.port()).unwrap_or(0)
    }
}

pub struct ClientEntry {
    pub info: ClientInfo,
    pub secret_key: i32,
    pub connected_at: SystemTime,
    /// See [`next_connection_id`].
    pub id: u64,
    /// The named statements the client has prepared, as of its last
    /// transaction's end (SHOW CLIENTS' `prepared_statements`).
    pub prepared_statements: Cell<u32>,
    state: Cell<ClientState>,
    state_since: Cell<crate::rt::Stamp>,
    /// The server connection the client's request runs on: set once the
    /// request is written to it (in session mode: once it is lent), cleared
    /// when the connection goes back. A cancel request goes to this server.
    pub server: RefCell<Option<Rc<CancelKey>>>,
    /// The client's request waits in pglane, written to no server yet (for a
    /// server connection, or lent one and not yet written): a cancel request
    /// sets `cancelled` and wakes the session, which answers it itself
    /// (57014, as PostgreSQL would) or, if the write was under way, sends it
    /// to the server once the request is there.
    pub queued: Cell<bool>,
    cancelled: Cell<bool>,
    cancel_waker: Cell<Option<Waker>>,
    /// Cancel requests waiting for the one in `cancelled` to be settled
    /// (see [`ClientEntry::cancel_settled`]).
    settle_wakers: Cell<Vec<Waker>>,
    /// KILL: the session must end at its next chance.
    pub killed: Cell<bool>,
    /// Its request waits behind another client's on a server connection
    /// not yet handed over (server pipelining): a cancel request is held in
    /// `cancel_held` until it is, as sent now it would cancel the other's.
    pub following: Cell<bool>,
    pub cancel_held: Cell<bool>,
    /// Where its request stands for a cancel request sent again (see
    /// [`Behind`]).
    behind: Cell<Behind>,
    /// It has held a server connection at least once.
    served: Cell<bool>,
}

impl ClientEntry {
    pub fn new(info: ClientInfo, secret_key: i32) -> ClientEntry {
        ClientEntry {
            info,
            secret_key,
            connected_at: SystemTime::now(),
            id: next_connection_id(),
            prepared_statements: Cell::new(0),
            state: Cell::new(ClientState::Idle),
            state_since: Cell::new(crate::rt::Stamp::read()),
            server: RefCell::new(None),
            queued: Cell::new(false),
            cancelled: Cell::new(false),
            cancel_waker: Cell::new(None),
            settle_wakers: Cell::new(Vec::new()),
            killed: Cell::new(false),
            following: Cell::new(false),
            cancel_held: Cell::new(false),
            behind: Cell::new(Behind::No),
            served: Cell::new(false),
        }
    }

    /// A cancel request came for the request that waits in pglane (see
    /// `queued`): the session is woken to answer it.
    pub fn cancel_queued(&self) {
        self.cancelled.set(true);
        if let Some(waker) = self.cancel_waker.take() {
            waker.wake();
        }
    }

    /// Takes a cancel request for the queued request, if one came.
    pub fn take_cancel(&self) -> bool {
        self.settled(self.cancelled.take())
    }

    /// The request is no longer queued: on the server, answered, or gone.
    /// A cancel that came for it meanwhile is returned (and forgotten).
    pub fn unqueue(&self) -> bool {
        self.queued.set(false);
        self.cancel_waker.take();
        self.settled(self.cancelled.take())
    }

    fn settled(&self, taken: bool) -> bool {
        if taken {
            for waker in self.settle_wakers.take() {
                waker.wake();
            }
        }
        taken
    }

    /// Ready once the cancel request of `cancelled` is taken: answered by
    /// the session, or sent on to the server (whose key, if so, the caller
    /// then waits on) as the request was written. The client's cancel
    /// connection closes only then, as PostgreSQL's closes once the signal
    /// is sent: a client that sends its next query then cannot have it hit.
    pub async fn cancel_settled(&self) {
        std::future::poll_fn(|cx| {
            if !self.cancelled.get() {
                return Poll::Ready(());
            }
            let mut wakers = self.settle_wakers.take();
            if !wakers.iter().any(|w| w.will_wake(cx.waker())) {
                wakers.push(cx.waker().clone());
            }
            self.settle_wakers.set(wakers);
            Poll::Pending
        })
        .await
    }

    /// Ready once a cancel request came for the queued request (not taken).
    pub fn poll_cancelled(&self, cx: &mut Context<'_>) -> Poll<()> {
        if self.cancelled.get() {
            return Poll::Ready(());
        }
        let waker = match self.cancel_waker.take() {
            Some(waker) if waker.will_wake(cx.waker()) => waker,
            _ => cx.waker().clone(),
        };
        self.cancel_waker.set(Some(waker));
        Poll::Pending
    }

    /// Its request went to the server behind another client's and was
    /// handed the connection: `alone` if no other client's is behind it.
    pub fn handed_over(&self, alone: bool) {
        self.behind.set(if alone { Behind::Alone } else { Behind::No });
    }

    /// Its request is answered (or the relay is over).
    pub fn answered(&self) {
        self.behind.set(Behind::No);
    }

    /// A cancel request goes to `key`'s backend for the request it runs: if
    /// that went behind another client's and is alone, its cancel is to be
    /// checked (true), and until then no other client's request goes behind.
    pub fn cancel_sent(&self, key: &Rc<CancelKey>) -> bool {
        let alone = self.behind.get() == Behind::Alone && self.holds(key);
        if alone {
            self.behind.set(Behind::Cancelled);
        }
        alone
    }

    /// The request a cancel was sent for (see [`ClientEntry::cancel_sent`])
    /// still runs, unanswered, on `key`'s backend.
    pub fn may_cancel_again(&self, key: &Rc<CancelKey>) -> bool {
        self.behind.get() == Behind::Cancelled && self.holds(key)
    }

    /// The cancel sent is checked: other clients' requests may go behind.
    pub fn cancel_checked(&self) {
        if self.behind.get() == Behind::Cancelled {
            self.behind.set(Behind::Alone);
        }
    }

    /// Another client's request is to go to the server behind this one's:
    /// not while a cancel for this one is unchecked (false); from then on,
    /// no cancel is sent again.
    pub fn may_queue_behind(&self) -> bool {
        match self.behind.get() {
            Behind::Cancelled => false,
            _ => {
                self.behind.set(Behind::No);
                true
            }
        }
    }

    fn holds(&self, key: &Rc<CancelKey>) -> bool {
        self.server.borrow().as_ref().is_some_and(|held| Rc::ptr_eq(held, key))
    }

    /// Has it held a server connection since it logged in? A client that
    /// has not has its first request on the way (it just logged in): a
    /// rolling restart lets it run that (see `runtime::listeners`).
    pub fn has_been_served(&self) -> bool {
        self.served.get()
    }

    pub fn state(&self) -> ClientState {
        self.state.get()
    }

    /// Since when the client is in its state.
    pub fn state_since(&self) -> crate::rt::Stamp {
        self.state_since.get()
    }

    pub fn set_state(&self, state: ClientState) {
        self.served.set(self.served.get() || state == ClientState::Active);
        if self.state.get() != state {
            self.state.set(state);
            self.state_since.set(crate::rt::stamp());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ServerAddress;

    /// Every client's entry is shared (`Rc`): with the Rc's two counts, up
    /// to 240 bytes fit mimalloc's 256-byte class. At 280 bytes it was in
    /// the 320-byte class: 64 bytes more per client.
    #[test]
    fn an_entry_stays_in_the_256_byte_class() {
        let size = std::mem::size_of::<ClientEntry>();
        assert!(size <= 240, "ClientEntry is {size} bytes");
    }

    fn client() -> ClientEntry {
        ClientEntry::new(ClientInfo::over_the_socket("u", "d"), 7)
    }

    fn server_key() -> Rc<CancelKey> {
        Rc::new(CancelKey::new(ServerAddress::Tcp { host: "localhost".into(), port: 5432 }, 1, 2, None))
    }

    /// Holding `key`, handed over with `alone`.
    fn handed_over(alone: bool) -> (ClientEntry, Rc<CancelKey>) {
        let (entry, key) = (client(), server_key());
        *entry.server.borrow_mut() = Some(key.clone());
        entry.handed_over(alone);
        (entry, key)
    }

    #[test]
    fn a_cancel_for_a_request_alone_behind_is_checked_and_holds_others_back_until_then() {
        let (entry, key) = handed_over(true);
        assert!(entry.cancel_sent(&key));
        assert!(entry.may_cancel_again(&key));
        assert!(!entry.may_queue_behind(), "another client's request went behind an unchecked cancel");
        entry.cancel_checked();
        assert!(!entry.may_cancel_again(&key));
        // Still alone: a second cancel is checked too.
        assert!(entry.cancel_sent(&key));
        entry.cancel_checked();
        // Once another client's request goes behind, a cancel is sent once.
        assert!(entry.may_queue_behind());
        assert!(!entry.cancel_sent(&key));
        assert!(!entry.may_cancel_again(&key));
    }

    #[test]
    fn a_cancel_is_sent_once_for_a_request_not_alone_behind_or_answered() {
        let (entry, key) = handed_over(false);
        assert!(!entry.cancel_sent(&key), "another client's request is behind it");
        assert!(entry.may_queue_behind());

        let (entry, key) = handed_over(true);
        assert!(entry.cancel_sent(&key));
        entry.answered();
        assert!(!entry.may_cancel_again(&key), "answered");
        assert!(entry.may_queue_behind());

        // Never behind another's.
        let (entry, key) = (client(), server_key());
        *entry.server.borrow_mut() = Some(key.clone());
        assert!(!entry.cancel_sent(&key));
    }

    #[test]
    fn a_cancel_is_not_sent_again_once_the_connection_went_back() {
        let (entry, key) = handed_over(true);
        assert!(entry.cancel_sent(&key));
        *entry.server.borrow_mut() = None;
        assert!(!entry.may_cancel_again(&key));
        // Nor to another backend the client holds by then.
        *entry.server.borrow_mut() = Some(server_key());
        assert!(!entry.may_cancel_again(&key));
    }
}
