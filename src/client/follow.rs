//! A client whose request goes to the server behind another client's
//! (server pipelining; see `pool::Opening` for the whole hand-over).
//!
//! [`Follow`] translates the client's messages with its own exchange,
//! against the session state of the connection it will get, and leaves them
//! in the opening's outbox for the holder's relay to send. What pglane
//! answers itself (a ParseComplete of a known statement) goes to the client
//! at once. It reads nothing from the server: it ends when the holder hands
//! the connection over, and the relay goes on from there.
//!
//! Followers form a chain: once its whole request is written, a follower
//! may itself offer (or post) a place behind it, as a holder does. The next
//! client's messages then go out through this follower's opening, right
//! behind its own, and the offer stays with this client when the connection
//! comes to it. So the server has every waiting client's request queued, not
//! just the next one's, and a busy shard hands work on in batches.
//!
//! A follower with another behind it reads nothing more from its client
//! (the next request would have to go behind the other's): so a client
//! that leaves then is seen only once the connection has come to it, as a
//! holder's would be, and the connection goes on to the one behind with
//! this one's replies to drop (`pool::Handover::skip_ready`). Only a KILL
//! ends a follower with another behind it, and that kills the whole
//! database's clients: the one behind gets the connection's loss.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};

use super::exchange::{Exchange, Sources};
use super::relay::{poll_send, take_and_read, Buffers, ClientStop, Intake};
use crate::net::Stream;
use crate::pool::{Handover, Offer, Opening, Pool};
use crate::protocol::ProtocolError;
use crate::server::{ConnectionOutput, ServerSession};

/// Rounds of work one poll may do before yielding to other tasks.
const BUDGET: usize = 32;

/// Why following stopped.
pub enum FollowEnd {
    /// The connection is this client's now.
    HandedOver(Handover),
    /// The connection was lost before it was handed over.
    Lost,
    /// The client sent Terminate or closed its socket.
    ClientLeft,
    ClientError(ProtocolError),
    /// The admin console said KILL.
    Killed,
}

pub struct Follow<'a> {
    /// How much of the client's traffic it takes in (as a relay does).
    pub intake: Intake,
    pub client: &'a mut Stream,
    pub buffers: &'a mut Buffers,
    pub exchange: &'a mut Exchange,
    /// The client's state, with the connection's session from the opening.
    pub sources: Sources<'a>,
    pub opening: &'a Opening,
    pub killed: &'a Cell<bool>,
    /// The hand-over was taken (else, dropped, the follower left).
    pub taken: bool,
    /// The client's pool, to offer a place behind this request in turn.
    pub pool: &'a Pool,
    /// The place offered behind this client's request, if one was: the
    /// next client's messages go through this one's opening, and the offer
    /// stays with the client when the connection comes.
    pub offer: &'a mut Option<Offer>,
    /// A place behind this request posted while parked (as the relay's).
    pub posted: Option<Offer>,
}

impl Future for Follow<'_> {
    type Output = FollowEnd;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<FollowEnd> {
        let this = self.get_mut();
        if let Some(posted) = this.posted.take() {
            if posted.is_claimed() {
                this.exchange.followed = true;
                *this.offer = Some(posted);
            }
        }
        for _ in 0..BUDGET {
            match this.step(cx) {
                Some(Poll::Ready(end)) => {
                    this.taken = matches!(end, FollowEnd::HandedOver(_));
                    return Poll::Ready(end);
                }
                Some(Poll::Pending) => {
                    this.post_opening(cx);
                    return Poll::Pending;
                }
                None => {}
            }
        }
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

impl Drop for Follow<'_> {
    fn drop(&mut self) {
        if !self.taken {
            self.opening.follower_left();
        }
    }
}

impl Follow<'_> {
    /// Parking with the whole request written and nothing offered behind
    /// it: posts a place behind it for a client that comes meanwhile.
    fn post_opening(&mut self, cx: &Context<'_>) {
        if self.offer.is_some() || !self.may_be_followed() {
            return;
        }
        self.posted = self.pool.post_behind(self.connection(), cx.waker(), || self.exchange.statements_in_flight());
    }

    /// The connection as a client behind this one sees it.
    fn connection(&self) -> (&Rc<RefCell<ServerSession>>, &Rc<ConnectionOutput>) {
        (self.sources.server, self.sources.server_output)
    }

    /// The client's whole request is written, and it allows another behind.
    fn may_be_followed(&self) -> bool {
        let from_client = &self.buffers.from_client;
        !from_client.eof && from_client.pending().is_empty() && self.exchange.may_be_followed()
    }

    /// One round; `None` if it made progress and should go on.
    fn step(&mut self, cx: &mut Context<'_>) -> Option<Poll<FollowEnd>> {
        if self.killed.get() {
            return Some(Poll::Ready(FollowEnd::Killed));
        }
        match self.opening.poll_handover(cx) {
            Poll::Ready(Ok(handover)) => return Some(Poll::Ready(FollowEnd::HandedOver(handover))),
            Poll::Ready(Err(_)) => return Some(Poll::Ready(FollowEnd::Lost)),
            Poll::Pending => {}
        }
        // The request behind this one's goes out through this one's opening,
        // and nothing more is taken from the client.
        if let Some(behind) = self.offer.as_ref() {
            if self.opening.outbox_len() < self.intake.buffer {
                self.opening.write_outbox_of(behind);
            }
            return Some(Poll::Pending);
        }
        let b = &mut *self.buffers;
        let mut progress = false;
        let stop = {
            let server = self.sources.server;
            let mut session = server.borrow_mut();
            let st = &mut self.sources.statements(&mut session);
            let sent = self.opening.outbox_len();
            match take_and_read(cx, self.client, b, self.exchange, st, &mut self.intake, sent, &mut progress) {
                Some(taken) => taken.stop,
                None => return Some(Poll::Ready(FollowEnd::ClientLeft)),
            }
        };
        self.opening.write(&b.to_server);
        b.to_server.clear();
        // pglane's own answers (those the client waits for before it says more).
        match poll_send(cx, self.client, &mut b.to_client, &mut b.counters.bytes_to_client) {
            Poll::Ready(Ok(wrote)) => progress |= wrote,
            Poll::Ready(Err(_)) => return Some(Poll::Ready(FollowEnd::ClientLeft)),
            Poll::Pending => {}
        }
        match stop {
            Ok(ClientStop::Drained) if b.from_client.eof => return Some(Poll::Ready(FollowEnd::ClientLeft)),
            Ok(ClientStop::Drained | ClientStop::Full) => {}
            Ok(ClientStop::Terminate) => return Some(Poll::Ready(FollowEnd::ClientLeft)),
            Ok(ClientStop::BadTag(tag)) => {
                return Some(Poll::Ready(FollowEnd::ClientError(ProtocolError::UnexpectedMessage(tag))))
            }
            Err(e) => return Some(Poll::Ready(FollowEnd::ClientError(e))),
        }
        if self.may_be_followed() {
            if let Some(offer) = self.pool.offer_behind(self.connection(), cx.waker(), || self.exchange.statements_in_flight()) {
                self.exchange.followed = true;
                *self.offer = Some(offer);
                progress = true;
            }
        }
        if progress {
            None
        } else {
            Some(Poll::Pending)
        }
    }
}
