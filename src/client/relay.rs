//! The relay: one future that moves bytes both ways between a client and the
//! server connection it holds, until the transaction (or session) is over.
//!
//! It is a single hand-written poll loop rather than two tasks, so that one
//! wakeup reads whatever both sockets have, scans it, and writes each
//! direction's bytes in one `send` from the buffer they were read into. Both
//! directions always make progress independently, so a pipelining client and
//! a chatty server can never deadlock each other through full socket buffers.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use super::pipe::Pipe;
use super::tracker::Tracker;
use crate::net::Stream;
use crate::protocol::frame::Flow;
use crate::protocol::{backend, frontend, ProtocolError};
use crate::runtime::ShutdownSignal;

/// Rounds of work one poll may do before yielding to other tasks.
const BUDGET: usize = 32;

/// Why the relay stopped.
pub enum RelayEnd {
    /// Transaction mode: the server is idle with nothing in flight, and all it
    /// said has reached the client. The connection can go back to the pool.
    Released,
    /// The client sent Terminate or closed its socket.
    ClientLeft,
    /// The server closed its socket.
    ServerClosed,
    ServerError(io::Error),
    /// The client broke the protocol (oversized or unknown message).
    ClientError(ProtocolError),
    /// pglane is shutting down and the client is between transactions.
    Shutdown,
}

pub struct Relay<'a> {
    pub client: &'a mut Stream,
    pub server: &'a mut Stream,
    pub c2s: &'a mut Pipe,
    pub s2c: &'a mut Pipe,
    pub tracker: &'a mut Tracker,
    pub release_when_idle: bool,
    pub max_message: usize,
    pub shutdown: &'a ShutdownSignal,
    pub waker_id: u64,
    /// A ReadyForQuery has come back in this relay: before that, an idle
    /// tracker only means nothing was sent yet.
    pub saw_ready: bool,
}

/// Server messages are not size-checked: PostgreSQL enforces its own limits,
/// and only ReadyForQuery (one byte) is ever inspected whole.
const SERVER_MAX_BODY: usize = i32::MAX as usize;

impl Future for Relay<'_> {
    type Output = RelayEnd;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<RelayEnd> {
        let this = self.get_mut();
        for _ in 0..BUDGET {
            match this.step(cx) {
                Step::Progress => {}
                Step::Idle => return Poll::Pending,
                Step::Done(end) => return Poll::Ready(end),
            }
        }
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

enum Step {
    Progress,
    Idle,
    Done(RelayEnd),
}

impl Relay<'_> {
    /// One round: read, scan and write each direction once.
    fn step(&mut self, cx: &mut Context<'_>) -> Step {
        let mut progress = false;

        // Client → server. Once a release is pending, nothing more of the
        // client's is forwarded: it waits for the next server connection.
        let release_pending = self.release_when_idle && self.tracker.is_releasable() && self.saw_ready;
        let mut client_leaving = false;
        let mut bad_tag = None;
        if !release_pending {
            if !self.c2s.eof {
                match self.c2s.poll_fill(cx, self.client) {
                    Poll::Ready(Ok(_)) => progress = true,
                    Poll::Ready(Err(_)) => return Step::Done(RelayEnd::ClientLeft),
                    Poll::Pending => {}
                }
            }
            let tracker = &mut *self.tracker;
            let scanned = self.c2s.scan(self.max_message, |_| false, |tag, _| {
                if tag == frontend::TERMINATE {
                    client_leaving = true;
                    return Flow::Stop;
                }
                if !frontend::is_known_tag(tag) {
                    bad_tag = Some(tag);
                    return Flow::Stop;
                }
                tracker.client_sent(tag);
                Flow::Continue
            });
            if let Err(e) = scanned {
                return Step::Done(RelayEnd::ClientError(e));
            }
        }
        match self.c2s.poll_flush(cx, self.server) {
            Poll::Ready(Ok(wrote)) => progress |= wrote,
            Poll::Ready(Err(e)) => return Step::Done(RelayEnd::ServerError(e)),
            Poll::Pending => {}
        }

        // Server → client.
        if !self.s2c.eof {
            match self.s2c.poll_fill(cx, self.server) {
                Poll::Ready(Ok(_)) => progress = true,
                Poll::Ready(Err(e)) => return Step::Done(RelayEnd::ServerError(e)),
                Poll::Pending => {}
            }
        }
        let (tracker, release_when_idle, saw_ready) = (&mut *self.tracker, self.release_when_idle, &mut self.saw_ready);
        let scanned = self.s2c.scan(SERVER_MAX_BODY, |tag| tag == backend::READY_FOR_QUERY, |tag, body| {
            if release_when_idle && *saw_ready && tracker.is_releasable() {
                return Flow::Stop; // bytes after the final ReadyForQuery stay behind
            }
            tracker.server_sent(tag, body);
            if tag == backend::READY_FOR_QUERY {
                *saw_ready = true;
            }
            Flow::Continue
        });
        if let Err(e) = scanned {
            return Step::Done(RelayEnd::ServerError(io::Error::new(io::ErrorKind::InvalidData, e)));
        }
        match self.s2c.poll_flush(cx, self.client) {
            Poll::Ready(Ok(wrote)) => progress |= wrote,
            Poll::Ready(Err(_)) => return Step::Done(RelayEnd::ClientLeft),
            Poll::Pending => {}
        }

        // Is this relay over?
        if self.release_when_idle && self.saw_ready && self.tracker.is_releasable() && !self.s2c.has_output() {
            return Step::Done(RelayEnd::Released);
        }
        if self.s2c.eof && !self.s2c.has_output() {
            return Step::Done(RelayEnd::ServerClosed);
        }
        if !self.c2s.has_output() {
            if client_leaving || (self.c2s.eof && self.c2s.unscanned().is_empty()) {
                return Step::Done(RelayEnd::ClientLeft);
            }
            if self.c2s.eof {
                return Step::Done(RelayEnd::ClientLeft); // gone mid-message
            }
            if let Some(tag) = bad_tag {
                return Step::Done(RelayEnd::ClientError(ProtocolError::UnexpectedMessage(tag)));
            }
        }
        if progress {
            return Step::Progress;
        }
        let between_transactions = self.tracker.is_releasable() && self.c2s.unscanned().is_empty() && !self.s2c.has_output();
        if self.shutdown.poll_fired(self.waker_id, cx) && between_transactions {
            return Step::Done(RelayEnd::Shutdown);
        }
        Step::Idle
    }
}
