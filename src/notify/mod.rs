//! The notification hub: LISTEN/NOTIFY for transaction-mode clients
//! without pinning them to a server connection.
//!
//! This module owns, per shard, every client's channel subscriptions and,
//! per (database, user) that has listeners, one *listening connection*: a
//! server connection of the hub's own (not in the pool, not counted against
//! pool_size, max_db_connections or max_user_connections) that LISTENs to
//! the union of its clients' channels. Each NotificationResponse it gets
//! is posted, bytes unchanged (the notifying backend's process id, the
//! channel, the payload), to the [`Mailbox`] of every client of the shard
//! subscribed to that channel, in the order the connection received them.
//!
//! The client session asks it ([`Hub::subscribe`], [`Subscription`]) and
//! writes what its mailbox holds to its own socket, between transactions;
//! the hub never touches a client's socket or session, never blocks and
//! takes no lock (all of it lives on the shard's thread).
//!
//! What it answers (see [`statement`], [`request`]): a request that is
//! exactly one `LISTEN name`, `UNLISTEN name` or `UNLISTEN *`, sent between
//! transactions, as a simple Query or as the extended protocol's requests
//! that pgjdbc and asyncpg send. The session answers it as PostgreSQL
//! would (CommandComplete, ReadyForQuery 'I') once the listening connection
//! has LISTENed (for LISTEN). A LISTEN, UNLISTEN or
//! DISCARD ALL (by either protocol) inside a transaction block or among
//! other statements goes to the server and is followed ([`follow`]): the
//! client is subscribed ahead, and its subscriptions start or end as its
//! transaction commits. Not handled yet, and so passed to the server, where
//! LISTEN pins the client as before: LISTEN inside a function, and a
//! prepared LISTEN run again in a later request.
//!
//! Bounds: a mailbox holds at most `notify_client_buffer` bytes; past that
//! it drops what it holds and says so ([`Mailbox::overflowed`]), and the
//! session ends the client with an error. A lost listening connection is
//! opened again and LISTENs again; its clients get a NOTICE that
//! notifications may have been missed. When no client of a (database,
//! user) listens any more, its listening connection is closed.

pub mod follow;
mod listener;
pub mod request;
pub mod statement;

use std::cell::{Cell, RefCell};
use std::collections::{HashMap, VecDeque};
use std::rc::{Rc, Weak};
use std::task::{Context, Poll, Waker};

use bytes::BytesMut;

use crate::protocol::backend::ErrorFields;
use crate::server::ServerTarget;

/// The application_name of a listening connection, as the server shows it.
pub const LISTENER_APPLICATION_NAME: &str = "pglane notification listener";

/// Counters of one shard's hub, for the admin console and metrics.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct HubStats {
    /// Notifications the listening connections received.
    pub received: u64,
    /// Notifications posted to a client's mailbox.
    pub delivered: u64,
    /// Notifications a full mailbox could not take (its client is ended).
    pub dropped: u64,
    /// Times a listening connection was lost.
    pub connections_lost: u64,
}

/// One shard's notification hub.
#[derive(Default)]
pub struct Hub {
    state: Rc<HubState>,
}

#[derive(Default)]
struct HubState {
    listenings: RefCell<HashMap<(String, String), Rc<Listening>>>,
    stats: Cell<HubStats>,
}

impl HubState {
    fn count(&self, f: impl FnOnce(&mut HubStats)) {
        let mut stats = self.stats.get();
        f(&mut stats);
        self.stats.set(stats);
    }
}

impl Hub {
    /// A new, empty subscription of a client of `(database, user)`, whose
    /// listening connection goes to `target`; its mailbox holds at most
    /// `limit` bytes.
    pub fn subscribe(&self, database: &str, user: &str, target: ServerTarget, limit: usize) -> Subscription {
        let key = (database.to_owned(), user.to_owned());
        let listening = self
            .state
            .listenings
            .borrow_mut()
            .entry(key.clone())
            .or_insert_with(|| Rc::new(Listening::new(key, target, Rc::downgrade(&self.state))))
            .clone();
        Subscription { listening, mailbox: Rc::new(Mailbox::new(limit)), channels: Vec::new() }
    }

    /// What the admin console and metrics show of it.
    pub fn snapshot(&self) -> HubSnapshot {
        let listenings = self.state.listenings.borrow();
        HubSnapshot {
            listening_clients: listenings.values().map(|l| l.subscribers.get()).sum(),
            channels: listenings.values().map(|l| l.channels.borrow().len()).sum(),
            listening_connections: listenings.len(),
            stats: self.state.stats.get(),
        }
    }
}

/// One shard's hub as plain data (see `runtime::snapshot`).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct HubSnapshot {
    /// Clients subscribed to at least one channel.
    pub listening_clients: usize,
    /// Channels listened to, over the shard's listening connections.
    pub channels: usize,
    /// Listening connections, open or being opened.
    pub listening_connections: usize,
    pub stats: HubStats,
}

/// What one listening connection is for: the channels of one (database,
/// user) and who subscribed to each. Shared by its task (`listener`), the
/// hub and the subscriptions.
struct Listening {
    key: (String, String),
    target: ServerTarget,
    /// Channel (as the server names it) → the mailboxes subscribed to it.
    channels: RefCell<HashMap<String, Vec<Rc<Mailbox>>>>,
    /// Channels the connection has LISTENed to, as far as the hub knows
    /// (none while it is lost or being opened again).
    listened: RefCell<std::collections::HashSet<String>>,
    /// What the connection still has to be told, in order.
    commands: RefCell<VecDeque<Command>>,
    /// The task, waiting for a command or the server.
    task: RefCell<Option<Waker>>,
    /// Subscriptions with at least one channel.
    subscribers: Cell<usize>,
    /// The hub it is in (while it is).
    hub: HubRef,
    /// Its task runs: it ends once nobody listens, and a new subscriber
    /// starts another ([`Listening::start`]).
    running: Cell<bool>,
    /// The open connection's socket, for a look at whether the server
    /// sent something the task has not read yet ([`Subscription::catch_up_if_behind`]).
    socket: Cell<Option<std::os::fd::RawFd>>,
}

enum Command {
    Listen {
        channel: String,
        ack: Rc<Ack>,
    },
    Unlisten {
        channel: String,
    },
    /// A round trip, answered once every notification the server sent
    /// before it has been fanned out ([`Subscription::catch_up`]).
    CatchUp {
        ack: Rc<Ack>,
    },
}

/// The answer to one LISTEN a client waits for.
#[derive(Default)]
struct Ack {
    result: RefCell<Option<Result<(), ErrorFields>>>,
    waker: RefCell<Option<Waker>>,
}

impl Ack {
    fn answer(&self, result: Result<(), ErrorFields>) {
        *self.result.borrow_mut() = Some(result);
        if let Some(waker) = self.waker.borrow_mut().take() {
            waker.wake();
        }
    }

    /// The answer, once it came; until then the task is woken when it comes.
    fn poll(&self, cx: &Context<'_>) -> Poll<Result<(), ErrorFields>> {
        match self.result.borrow_mut().take() {
            Some(result) => Poll::Ready(result),
            None => {
                *self.waker.borrow_mut() = Some(cx.waker().clone());
                Poll::Pending
            }
        }
    }
}

impl Listening {
    fn new(key: (String, String), target: ServerTarget, hub: HubRef) -> Listening {
        Listening {
            hub,
            running: Cell::new(false),
            key,
            target,
            channels: RefCell::default(),
            listened: RefCell::default(),
            commands: RefCell::default(),
            task: RefCell::default(),
            subscribers: Cell::new(0),
            socket: Cell::new(None),
        }
    }

    /// The server has sent the listening connection bytes its task has not
    /// read yet (one peek, not waiting; the task's reads wait for
    /// readiness, so what it has not read is still in the socket).
    fn has_unread(&self) -> bool {
        // The task keeps the socket open while `socket` names it.
        self.socket.get().is_some_and(|fd| crate::rt::net::peek(fd) == crate::rt::net::Peek::Bytes)
    }

    /// Starts its task if it does not run.
    fn start(self: &Rc<Self>) {
        if self.running.replace(true) {
            return;
        }
        if let Some(hub) = self.hub.upgrade() {
            hub.listenings.borrow_mut().entry(self.key.clone()).or_insert_with(|| self.clone());
        }
        crate::rt::spawn_local(listener::run(self.clone(), self.hub.clone())).detach();
    }

    fn command(&self, command: Command) {
        self.commands.borrow_mut().push_back(command);
        if let Some(task) = self.task.borrow_mut().take() {
            task.wake();
        }
    }

    /// `mailbox` no longer listens on `channel`; the connection UNLISTENs
    /// once nobody does.
    fn remove(&self, channel: &str, mailbox: &Rc<Mailbox>) {
        let mut channels = self.channels.borrow_mut();
        let Some(boxes) = channels.get_mut(channel) else { return };
        // Which client gets a notification first does not matter: no shift.
        if let Some(at) = boxes.iter().position(|b| Rc::ptr_eq(b, mailbox)) {
            boxes.swap_remove(at);
        }
        if boxes.is_empty() {
            channels.remove(channel);
            drop(channels);
            self.listened.borrow_mut().remove(channel);
            self.command(Command::Unlisten { channel: channel.to_owned() });
        }
    }

    /// Nobody listens and nothing is left to do: the connection can go.
    fn unwanted(&self) -> bool {
        self.channels.borrow().is_empty() && self.commands.borrow().is_empty()
    }

    /// Posts a whole message (a NotificationResponse) to every mailbox
    /// subscribed to `channel`; `(delivered, dropped)`.
    fn fan_out(&self, channel: &str, message: &[u8]) -> (u64, u64) {
        let channels = self.channels.borrow();
        let Some(boxes) = channels.get(channel) else { return (0, 0) };
        let mut counts = (0, 0);
        for mailbox in boxes {
            match mailbox.post(message) {
                true => counts.0 += 1,
                false => counts.1 += 1,
            }
        }
        counts
    }

    /// Posts a NOTICE to every subscribed client (once each).
    fn tell_everyone(&self, notice: &ErrorFields) {
        let mut message = BytesMut::new();
        crate::protocol::backend::notice_response(&mut message, notice);
        let channels = self.channels.borrow();
        let mut told = std::collections::HashSet::new();
        for mailbox in channels.values().flatten() {
            if told.insert(Rc::as_ptr(mailbox)) {
                mailbox.post(&message);
            }
        }
    }
}

/// What the hub has for one client and the client has not been sent yet:
/// whole messages (NotificationResponse, NoticeResponse), at most `limit`
/// bytes of them.
pub struct Mailbox {
    pending: RefCell<BytesMut>,
    limit: usize,
    overflowed: Cell<bool>,
    /// The session, waiting for its client or for this.
    waker: RefCell<Option<Waker>>,
}

impl Mailbox {
    fn new(limit: usize) -> Mailbox {
        Mailbox { pending: RefCell::default(), limit, overflowed: Cell::new(false), waker: RefCell::default() }
    }

    /// Takes `message` in, and wakes the session; false if it does not fit
    /// (then it drops all it holds, for good: see [`Mailbox::overflowed`]).
    fn post(&self, message: &[u8]) -> bool {
        if self.overflowed.get() {
            return false;
        }
        let mut pending = self.pending.borrow_mut();
        if pending.len() + message.len() > self.limit {
            *pending = BytesMut::new();
            self.overflowed.set(true);
        } else {
            pending.extend_from_slice(message);
        }
        drop(pending);
        if let Some(waker) = self.waker.borrow_mut().take() {
            waker.wake();
        }
        !self.overflowed.get()
    }

    /// More came than it may hold: what it held is gone, and nothing more
    /// is taken in.
    pub fn overflowed(&self) -> bool {
        self.overflowed.get()
    }

    pub fn limit(&self) -> usize {
        self.limit
    }
}

/// Why a subscription's client must be ended.
#[derive(Debug, thiserror::Error)]
#[error("more notifications waited for this client than notify_client_buffer allows ({limit} bytes)")]
pub struct Overflow {
    pub limit: usize,
}

/// One client's channels, and its mailbox. Dropped, it unsubscribes from
/// all of them.
pub struct Subscription {
    listening: Rc<Listening>,
    mailbox: Rc<Mailbox>,
    /// This client's channels, as the server names them.
    channels: Vec<String>,
}

impl Subscription {
    /// Subscribes to `channel`, and waits until the listening connection
    /// has LISTENed to it; its error (or the server's refusal to open it)
    /// otherwise, and then the client is not subscribed.
    pub async fn listen(&mut self, channel: &str) -> Result<(), ErrorFields> {
        let Some(wait) = self.listen_ahead(channel) else { return Ok(()) };
        let result = std::future::poll_fn(|cx| wait.poll(cx)).await;
        if result.is_err() {
            self.unlisten(channel);
        }
        result
    }

    /// Subscribes to `channel` at once: what the hub receives on it from
    /// now on is posted to the mailbox. What to wait for until the
    /// listening connection has LISTENed to it, unless it has already (on
    /// an error, the caller unsubscribes).
    pub fn listen_ahead(&mut self, channel: &str) -> Option<ListenWait> {
        if !self.listens_to(channel) {
            if self.channels.is_empty() {
                self.listening.subscribers.set(self.listening.subscribers.get() + 1);
            }
            self.channels.push(channel.to_owned());
            self.listening.channels.borrow_mut().entry(channel.to_owned()).or_default().push(self.mailbox.clone());
        }
        if self.listening.listened.borrow().contains(channel) {
            return None;
        }
        let ack = Rc::new(Ack::default());
        self.listening.start();
        self.listening.command(Command::Listen { channel: channel.to_owned(), ack: ack.clone() });
        Some(ListenWait { channel: channel.to_owned(), ack })
    }

    /// Waits until the listening connection has received, and posted to
    /// the mailbox, every notification committed before now: one round
    /// trip on it. PostgreSQL's own backend sends an idle client what was
    /// committed before it reads the client's next command, so an UNLISTEN
    /// the hub answers waits for this, or a notification committed before
    /// it and not read from the listening connection yet would be lost.
    /// Nothing to wait for while it listens to nothing; a lost connection
    /// answers at once (its clients are told notifications may be missed).
    pub async fn catch_up(&self) {
        if self.channels.is_empty() {
            return;
        }
        let ack = Rc::new(Ack::default());
        self.listening.command(Command::CatchUp { ack: ack.clone() });
        let _ = std::future::poll_fn(|cx| ack.poll(cx)).await;
    }

    /// [`Subscription::catch_up`], if the listening connection has bytes
    /// its task has not read yet: notifications committed before the
    /// client's next request, which PostgreSQL would send an idle client
    /// before it reads that request, wait in the listening connection's
    /// socket while the shard is busy. One peek when none do.
    pub async fn catch_up_if_behind(&self) {
        if self.listening.has_unread() {
            self.catch_up().await;
        }
    }

    /// Drops what the mailbox holds for `channel`.
    pub fn drop_pending(&self, channel: &str) {
        drop_notifications_of(&mut self.mailbox.pending.borrow_mut(), channel);
    }

    /// It is subscribed to `channel`.
    pub fn listens_to(&self, channel: &str) -> bool {
        self.channels.iter().any(|c| c == channel)
    }

    /// Unsubscribes from `channel` (nothing if it was not subscribed). What
    /// the mailbox holds for it goes too: PostgreSQL checks, as it delivers
    /// a notification, that the session still listens to its channel.
    pub fn unlisten(&mut self, channel: &str) {
        let Some(at) = self.channels.iter().position(|c| c == channel) else { return };
        self.channels.swap_remove(at);
        drop_notifications_of(&mut self.mailbox.pending.borrow_mut(), channel);
        self.listening.remove(channel, &self.mailbox);
        if self.channels.is_empty() {
            self.listening.subscribers.set(self.listening.subscribers.get() - 1);
        }
    }

    /// Unsubscribes from every channel.
    pub fn unlisten_all(&mut self) {
        while let Some(channel) = self.channels.last().cloned() {
            self.unlisten(&channel);
        }
    }

    /// It is subscribed to no channel.
    pub fn is_empty(&self) -> bool {
        self.channels.is_empty()
    }

    /// Has the task woken when more comes; an error once the mailbox overflowed.
    pub fn watch(&self, cx: &Context<'_>) -> Result<(), Overflow> {
        if self.mailbox.overflowed() {
            return Err(Overflow { limit: self.mailbox.limit() });
        }
        *self.mailbox.waker.borrow_mut() = Some(cx.waker().clone());
        Ok(())
    }

    /// Moves what the mailbox holds to the end of `out`, waiting for nothing.
    pub fn take(&self, out: &mut BytesMut) -> Result<(), Overflow> {
        if self.mailbox.overflowed() {
            return Err(Overflow { limit: self.mailbox.limit() });
        }
        let mut pending = self.mailbox.pending.borrow_mut();
        if out.is_empty() {
            std::mem::swap(out, &mut pending);
        } else {
            out.extend_from_slice(&pending);
            pending.clear();
        }
        Ok(())
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        self.unlisten_all();
    }
}

/// Removes from `pending` (whole NotificationResponses, as posted) those
/// for `channel`, keeping the others in order.
fn drop_notifications_of(pending: &mut BytesMut, channel: &str) {
    use crate::protocol::frame::HEADER_LEN;
    let mut kept = BytesMut::new();
    let mut rest = &pending[..];
    while rest.len() >= HEADER_LEN {
        let len = 1 + u32::from_be_bytes([rest[1], rest[2], rest[3], rest[4]]) as usize;
        let Some(message) = rest.get(..len) else { break };
        if crate::protocol::backend::decode_notification_channel(&message[HEADER_LEN..]).ok() != Some(channel) {
            kept.extend_from_slice(message);
        }
        rest = &rest[len..];
    }
    *pending = kept;
}

/// A LISTEN of a listening connection that a subscription waits for
/// ([`Subscription::listen_ahead`]).
pub struct ListenWait {
    channel: String,
    ack: Rc<Ack>,
}

impl ListenWait {
    /// The channel it is for.
    pub fn channel(&self) -> &str {
        &self.channel
    }

    /// The listening connection's answer, once it came; until then the
    /// task is woken when it comes.
    pub fn poll(&self, cx: &Context<'_>) -> Poll<Result<(), ErrorFields>> {
        self.ack.poll(cx)
    }
}

/// Quotes `channel` as an identifier for a LISTEN or UNLISTEN pglane sends.
fn quoted(channel: &str) -> String {
    format!("\"{}\"", channel.replace('"', "\"\""))
}

/// The hub a listening connection's task reports to, while it exists.
type HubRef = Weak<HubState>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn channels_are_quoted_as_identifiers() {
        assert_eq!(quoted("jobs"), "\"jobs\"");
        assert_eq!(quoted("say \"hi\""), "\"say \"\"hi\"\"\"");
    }

    #[test]
    fn an_unlistened_channels_notifications_leave_the_mailbox() {
        let mut pending = BytesMut::new();
        for (pid, channel, payload) in [(1, "a", "1"), (2, "b", "2"), (3, "a", "3"), (4, "c", "4")] {
            crate::protocol::backend::notification_response(&mut pending, pid, channel, payload);
        }
        let mut expected = BytesMut::new();
        crate::protocol::backend::notification_response(&mut expected, 2, "b", "2");
        crate::protocol::backend::notification_response(&mut expected, 4, "c", "4");
        drop_notifications_of(&mut pending, "a");
        assert_eq!(pending, expected);
        drop_notifications_of(&mut pending, "z");
        assert_eq!(pending, expected, "nothing of another channel");
    }

    #[test]
    fn a_mailbox_takes_whole_messages_up_to_its_limit_then_nothing() {
        let mailbox = Mailbox::new(10);
        assert!(mailbox.post(b"12345"));
        assert!(mailbox.post(b"67890"));
        assert!(!mailbox.overflowed());
        assert!(!mailbox.post(b"x"));
        assert!(mailbox.overflowed());
        assert!(mailbox.pending.borrow().is_empty(), "what it held is let go");
        assert!(!mailbox.post(b""), "and it takes nothing more");
    }
}
