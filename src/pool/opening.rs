//! Server pipelining: a lent server connection that takes one more client's
//! request before it is free.
//!
//! A busy pool makes its waiters wait for a whole round trip per
//! transaction: the holder's reply has to come back, and the connection
//! be given to the next client, before that client's request is sent, and
//! meanwhile the backend sleeps. When the holder has sent a whole request
//! that leaves the server session as it found it
//! (`client::exchange::Exchange::may_be_followed`), the holder's relay
//! offers an [`Opening`] to the pool, which gives it to the first waiter
//! that may follow (`Pool::offer`). Then:
//!
//! - the follower translates its messages against the connection's session
//!   state (shared, [`ServerSession`]) and leaves them in the outbox
//!   ([`Opening::write`]); the holder's relay sends them behind its own
//!   ([`Opening::move_outbox`]) and takes nothing more from its own client;
//! - at the holder's last ReadyForQuery the lease goes to the follower with
//!   what the holder read past that ReadyForQuery (the start of the
//!   follower's reply) and the follower's bytes not sent yet
//!   ([`Opening::hand_over`]);
//! - if the holder's client leaves first, the follower gets the lease at
//!   once and drops the holder's replies itself ([`Handover::skip_ready`]);
//! - if the connection is lost, so is the follower's request: it gets an
//!   error, as a client of a dead backend would ([`Opening::lose`]);
//! - if the follower leaves first, what it wrote makes the connection's
//!   state unknown, so the holder closes it ([`Opening::follower_wrote`]).
//!
//! A statement whose run, with a request behind it, took longer than
//! [`SLOW`] is marked (`prepare::Statement::slow_at`) and has none behind
//! it for [`SLOW_KEPT`]; so is the client for what it sends as it is (a
//! simple query or unnamed statement passed through has no registry
//! statement to mark; `client::exchange::Exchange::ran_slowly`). What waits
//! behind a long query waits for all of it, even if another connection
//! frees up first, so that happens at most once per statement (or client)
//! in that time. The mark wears off so that one stall of the machine does
//! not end pipelining of a hot statement for good.
//!
//! A holder that finds no one waiting when its whole request is in flight
//! posts its opening instead (`Pool::post`), withdrawn as soon as its relay
//! runs again: a client that comes while the server works on the request
//! claims it ([`Opening::claim`]) and goes behind it, and the holder's relay,
//! woken by the follower's first write, takes it up as if it had offered it.
//!
//! One follower per opening, but followers chain: a follower whose whole
//! request is written offers (or posts) an opening of its own, and what its
//! follower writes goes out through its opening ([`Opening::write_outbox_of`]),
//! so every waiting client's request is queued on the server. The offer
//! stays with that follower and is handed on when the lease comes to it.
//!
//! What it cannot make transparent, and why it is off by default (issue
//! 43): the request behind is on the server before the request ahead ends,
//! so a cancel request for the holder that reaches the backend after the
//! holder's query ended cancels the follower's, and a connection that dies
//! fails the follower's request with the holder's. pglane cannot tell
//! either from the follower's own trouble, nor take back what it sent.
//!
//! A cancel request for a follower is held until the hand-over, and then
//! checked and sent once more if need be (`runtime::ClientEntry::cancel_sent`):
//! meanwhile the follower's relay moves no other client's messages out of
//! its offer's outbox.
//!
//! This module only keeps the hand-over's state; what a relay does with it
//! is the client's (`client::relay`, `client::follow`).

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

use bytes::BytesMut;

use super::Lease;
use crate::prepare::Statement;
use crate::server::{ConnectionOutput, ServerSession};

/// How long the holder's request may take, from the offer to its last
/// ReadyForQuery, before its statements are not followed for a while. Well
/// above what a busy 2-core machine's scheduling adds to a short query (at
/// 10 ms, stalls marked pgbench's one statement often enough to cut the
/// share of requests sent behind another from 95% to 89%).
pub const SLOW: std::time::Duration = std::time::Duration::from_millis(100);

/// How long a statement that ran slowly is not followed.
pub const SLOW_KEPT: std::time::Duration = std::time::Duration::from_secs(1);

/// Whether what ran slowly at `slow_at` (a statement, or a client's
/// passed-through requests) may have a request behind it now (see [`SLOW`]).
pub fn may_follow(slow_at: Option<std::time::Instant>) -> bool {
    slow_at.is_none_or(|at| crate::rt::now().saturating_duration_since(at) >= SLOW_KEPT)
}

/// What the follower gets when the holder is done.
pub struct Handover {
    pub lease: Lease,
    /// What the holder read from the server and did not hand out (past its
    /// last ReadyForQuery, or, if its client left, wherever it stopped), and
    /// how much of a message it was streaming is still to come
    /// (`client::inbox::Inbox::take_over`).
    pub unread: BytesMut,
    pub stream_left: usize,
    /// The follower's messages not sent to the server yet.
    pub unsent: BytesMut,
    /// ReadyForQuery messages the server still owes the holder, whose client
    /// left: the follower drops the server's messages through that many.
    pub skip_ready: usize,
}

/// The connection broke (or was closed) before it was handed over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpeningLost;

enum Phase {
    /// The follower is (or will be) writing behind the holder.
    Followed,
    HandedOver(Handover),
    /// The follower took the hand-over.
    Taken,
    Lost,
    /// The follower went away first.
    FollowerLeft,
}

pub struct Opening {
    /// The connection's session state, which the follower translates against.
    pub session: Rc<RefCell<ServerSession>>,
    /// How the connection prints values, which the follower negotiates against.
    pub output: Rc<ConnectionOutput>,
    /// The follower's translated messages, for the holder's relay to send.
    outbox: RefCell<BytesMut>,
    /// A posted opening was taken by a follower (see `Pool::post`).
    claimed: Cell<bool>,
    /// The follower wrote something: the connection's session state assumes it runs.
    wrote: Cell<bool>,
    phase: RefCell<Phase>,
    /// The holder's relay task, woken when the outbox gets bytes.
    holder: Waker,
    /// The follower's task, woken at the hand-over or loss.
    follower: RefCell<Option<Waker>>,
    /// When it was offered (or, behind a follower, when that follower got
    /// the lease), and the statements the holder's request runs (see
    /// [`Opening::holder_done`]).
    offered_at: Cell<std::time::Instant>,
    statements: Vec<Rc<Statement>>,
}

impl Opening {
    /// An opening behind a request that runs `statements`, offered now.
    pub fn new(
        (session, output): (&Rc<RefCell<ServerSession>>, &Rc<ConnectionOutput>),
        holder: Waker,
        statements: Vec<Rc<Statement>>,
    ) -> Rc<Opening> {
        Rc::new(Opening {
            output: output.clone(),
            offered_at: Cell::new(crate::rt::now()),
            statements,
            session: session.clone(),
            outbox: RefCell::new(BytesMut::new()),
            claimed: Cell::new(false),
            wrote: Cell::new(false),
            phase: RefCell::new(Phase::Followed),
            holder,
            follower: RefCell::new(None),
        })
    }

    // The follower's side.

    /// Takes a posted opening: false if another follower has it, or the
    /// holder is done with it.
    pub fn claim(&self) -> bool {
        if self.claimed.get() || !matches!(*self.phase.borrow(), Phase::Followed) {
            return false;
        }
        self.claimed.set(true);
        true
    }

    /// Queues the follower's translated messages for the server. Once the
    /// holder has handed the lease over (which can happen before a follower
    /// that was just granted the opening first runs: the holder's reply may
    /// already have been read), they join the hand-over's unsent bytes,
    /// which the follower sends first when it takes the lease; the outbox
    /// is nobody's any more.
    pub fn write(&self, bytes: &[u8]) {
        if bytes.is_empty() {
            return;
        }
        self.wrote.set(true);
        if let Phase::HandedOver(handover) = &mut *self.phase.borrow_mut() {
            handover.unsent.extend_from_slice(bytes);
            return;
        }
        self.outbox.borrow_mut().extend_from_slice(bytes);
        self.holder.wake_by_ref();
    }

    /// Queues what the follower behind this opening's follower wrote (see
    /// `client::follow`): a request in a chain goes out through the one
    /// ahead of it.
    pub fn write_outbox_of(&self, behind: &Opening) {
        let mut from = behind.outbox.borrow_mut();
        if !from.is_empty() {
            self.write(&from);
            from.clear();
        }
    }

    /// Bytes written and not yet taken by the holder.
    pub fn outbox_len(&self) -> usize {
        self.outbox.borrow().len()
    }

    /// The hand-over, once the holder is done; `Err` if the connection was lost.
    pub fn poll_handover(&self, cx: &mut Context<'_>) -> Poll<Result<Handover, OpeningLost>> {
        let mut phase = self.phase.borrow_mut();
        match std::mem::replace(&mut *phase, Phase::Taken) {
            Phase::HandedOver(handover) => Poll::Ready(Ok(handover)),
            Phase::Lost => {
                *phase = Phase::Lost;
                Poll::Ready(Err(OpeningLost))
            }
            other => {
                *phase = other;
                *self.follower.borrow_mut() = Some(cx.waker().clone());
                Poll::Pending
            }
        }
    }

    /// The follower goes away without taking the hand-over. A lease already
    /// handed over is dropped, which closes its connection: the follower's
    /// request may be on it.
    pub fn follower_left(&self) {
        let before = std::mem::replace(&mut *self.phase.borrow_mut(), Phase::FollowerLeft);
        if let Phase::HandedOver(handover) = before {
            drop(handover);
        }
        self.holder.wake_by_ref();
    }

    // The holder's side.

    /// A follower took this opening since it was posted.
    pub fn is_claimed(&self) -> bool {
        self.claimed.get()
    }

    /// The follower has messages waiting to go to the server.
    pub fn has_outbox(&self) -> bool {
        !self.outbox.borrow().is_empty()
    }

    /// Moves the follower's messages to the end of `to_server`.
    pub fn move_outbox(&self, to_server: &mut BytesMut) {
        let mut outbox = self.outbox.borrow_mut();
        if !outbox.is_empty() {
            to_server.extend_from_slice(&outbox);
            outbox.clear();
        }
    }

    /// The holder was a follower and got the lease just now: its request
    /// runs from here, not from when it went behind the one ahead.
    pub fn holder_started(&self) {
        self.offered_at.set(crate::rt::now());
    }

    /// The holder's request is answered (or abandoned): if that took longer
    /// than [`SLOW`] since the offer (or [`Opening::holder_started`]), its
    /// statements are marked slow, and true is returned.
    pub fn holder_done(&self) -> bool {
        let now = crate::rt::now();
        let slow = now.saturating_duration_since(self.offered_at.get()) >= SLOW;
        if slow {
            for s in &self.statements {
                s.slow_at.set(Some(now));
            }
        }
        slow
    }

    /// The follower went away (before the hand-over).
    pub fn is_abandoned(&self) -> bool {
        matches!(*self.phase.borrow(), Phase::FollowerLeft)
    }

    /// The follower wrote something, so the connection's session state
    /// counts on its request running: if the follower leaves, the connection
    /// must be closed rather than reused.
    pub fn follower_wrote(&self) -> bool {
        self.wrote.get()
    }

    /// The holder is done: the follower gets the connection. `unsent` is
    /// what of the follower's the holder did not send; what is still in the
    /// outbox goes after it. If the follower left meanwhile, the lease is
    /// dropped (closing the connection).
    pub fn hand_over(&self, mut handover: Handover) {
        self.move_outbox(&mut handover.unsent);
        self.settle(Phase::HandedOver(handover));
    }

    /// The connection broke or is being closed: the follower's request is lost.
    pub fn lose(&self) {
        self.settle(Phase::Lost);
    }

    /// Tells a follower that still waits how its wait ended (a follower
    /// that left, or took the hand-over already, is told nothing).
    fn settle(&self, end: Phase) {
        {
            let mut phase = self.phase.borrow_mut();
            if !matches!(*phase, Phase::Followed) {
                return;
            }
            *phase = end;
        }
        if let Some(waker) = self.follower.borrow_mut().take() {
            waker.wake();
        }
    }
}

/// The holder's end of an [`Opening`]. Dropped before [`Opening::hand_over`]
/// (the holder's session ended some other way), it loses the follower's
/// request, so that no follower waits for a hand-over that never comes.
pub struct Offer(pub Rc<Opening>);

impl std::ops::Deref for Offer {
    type Target = Opening;
    fn deref(&self) -> &Opening {
        &self.0
    }
}

impl Drop for Offer {
    fn drop(&mut self) {
        self.0.lose();
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::prepare::ServerStatements;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    /// A waker that counts its wakes.
    struct Count(AtomicUsize);

    impl std::task::Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// An opening on a fresh session, its holder woken through `holder`.
    pub(crate) fn opening(holder: Waker) -> Rc<Opening> {
        let session = ServerSession { statements: ServerStatements::new(8), settings: Default::default(), last_client: 0 };
        Opening::new((&Rc::new(RefCell::new(session)), &Rc::default()), holder, Vec::new())
    }

    #[test]
    fn a_request_behind_a_follower_goes_out_after_the_followers_own() {
        let woken = Arc::new(Count(AtomicUsize::new(0)));
        let first = opening(Waker::from(woken.clone()));
        let second = opening(Waker::noop().clone());
        first.write(b"first's");
        second.write(b" second's");
        let before = woken.0.load(Ordering::Relaxed);
        first.write_outbox_of(&second);
        assert_eq!(woken.0.load(Ordering::Relaxed), before + 1, "the holder is woken to send it");
        assert_eq!(second.outbox_len(), 0);
        first.write_outbox_of(&second);
        assert_eq!(woken.0.load(Ordering::Relaxed), before + 1, "nothing new: no wake");
        let mut to_server = BytesMut::new();
        first.move_outbox(&mut to_server);
        assert_eq!(&to_server[..], b"first's second's");
        assert!(first.follower_wrote());
    }
}
