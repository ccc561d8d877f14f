//! The relay: one future that moves messages both ways between a client and
//! the server connection it holds, until the transaction (or session) is over.
//!
//! It is a single hand-written poll loop rather than two tasks, so that one
//! wakeup reads whatever both sockets have, runs it through the [`Exchange`],
//! and writes each direction's output in one `send`.
//!
//! Backpressure is PostgreSQL's own: a backend reads no more of a client's
//! messages while it cannot send their replies. So the relay reads a client
//! only while the client takes its replies (what waits for it is under
//! `relay_buffer_size`), while what goes to the server is under that buffer
//! too, and while fewer than [`MAX_IN_FLIGHT`] answers are due (see
//! [`Intake`]); and it reads the server only while the client takes what it
//! already has. A client that reads no replies therefore costs pglane its
//! buffers and no more, however much it sends. Nothing a direct connection
//! would carry can deadlock on this: PostgreSQL would have stopped reading
//! that client sooner (it buffers less), and a client stopped for
//! [`MAX_IN_FLIGHT`] gets its answers anyway (the relay asks the server to
//! flush what it holds).

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};

use bytes::{Buf, BytesMut};
use futures_lite::AsyncWrite;

use super::exchange::{client_needs_whole, server_needs_whole, Exchange, InFlight, Sources, Statements};
use super::inbox::{Inbox, Piece};
use crate::net::Stream;
use crate::pool::{Offer, Pool};
use crate::protocol::frame::HEADER_LEN;
use crate::protocol::{backend, frontend, ProtocolError};
use crate::runtime::ShutdownSignal;

/// Rounds of work one poll may do before yielding to other tasks.
const BUDGET: usize = 32;

/// Answers (of the server or pglane's own) a client may have due before
/// the relay stops taking its messages, until half of them have come. Each
/// is one entry of the exchange's queue of what is due (120 bytes), so this
/// keeps that queue under 240 KiB however deep a client pipelines, and the
/// exchange's scans of it short. A client stopped for it with no Sync or
/// Flush sent would wait for ever for answers the server keeps in its
/// output buffer: the relay sends a Flush (which has no answer and changes
/// nothing else) as it stops.
pub(super) const MAX_IN_FLIGHT: usize = 1024;

/// How much of one client's traffic a relay (or a follower) takes in before
/// it stops reading the client (see the module comment).
#[derive(Debug, Clone, Copy)]
pub struct Intake {
    /// `relay_buffer_size`: the most of the client's output on its way to the
    /// server, and of its replies waiting for it, before it is not read.
    pub buffer: usize,
    /// [`MAX_IN_FLIGHT`] was reached and not enough has been answered since.
    paused: bool,
    /// The Flush for this pause was sent.
    flushed: bool,
    /// Take one request only (up to its Query or Sync), then nothing until
    /// the relay ends: a read routed to a standby (see `crate::router`),
    /// whose next request may not be a read.
    one_request: bool,
    /// That request has been taken.
    request_taken: bool,
}

impl Intake {
    pub fn new(buffer: usize) -> Intake {
        Intake { buffer, paused: false, flushed: false, one_request: false, request_taken: false }
    }

    /// An intake that takes the client's next request and no more.
    pub fn one_request(buffer: usize) -> Intake {
        Intake { one_request: true, ..Intake::new(buffer) }
    }

    /// A message tagged `tag` was taken (or began to be).
    #[inline]
    fn took(&mut self, tag: u8) {
        if self.one_request && (tag == frontend::QUERY || tag == frontend::SYNC) {
            self.request_taken = true;
        }
    }

    /// Whether more of the client's messages may be taken now: `due`
    /// answers are due to it, `outgoing` bytes of its are on their way to the
    /// server (pglane's buffer, what the exchange holds back), `replies`
    /// bytes wait for it to read them.
    ///
    /// Asked before every message taken: the common case (not paused, far
    /// from the limit) is two compares and no store.
    #[inline]
    pub(super) fn open(&mut self, due: usize, outgoing: usize, replies: usize) -> bool {
        if self.request_taken {
            return false;
        }
        if self.paused {
            if due > MAX_IN_FLIGHT / 2 {
                return false;
            }
            self.paused = false;
            self.flushed = false;
        }
        if due >= MAX_IN_FLIGHT {
            self.paused = true;
            return false;
        }
        outgoing < self.buffer && replies < self.buffer
    }

    /// Whether a Flush should go to the server now: taking is paused for
    /// [`MAX_IN_FLIGHT`] and none was sent for this pause.
    fn flush_due(&mut self) -> bool {
        let due = self.paused && !self.flushed;
        self.flushed |= due;
        due
    }
}

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
    /// The server ended the session with a FATAL (or PANIC), which the
    /// client has been given whole, and closed: on PostgreSQL that message
    /// is the last the client gets, so pglane adds none of its own.
    ServerEnded,
    /// The client broke the protocol (oversized or unknown message).
    ClientError(ProtocolError),
    /// pglane is shutting down and the client is between transactions.
    Shutdown,
    /// The admin console said KILL.
    Killed,
    TimedOut(Deadline),
    /// A pinned client did not take its notifications (see `notifications`).
    NotificationsOverflow(crate::notify::Overflow),
}

/// The time limits a relay enforces (None: no limit).
#[derive(Debug, Clone, Copy, Default)]
pub struct Limits {
    pub query: Option<std::time::Duration>,
    pub idle_in_transaction: Option<std::time::Duration>,
}

/// Which limit a running timer enforces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Deadline {
    /// query_timeout: the server has been busy with the client's requests too long.
    Query,
    /// idle_transaction_timeout: the client holds a transaction open and says nothing.
    IdleInTransaction,
}

/// What a relay counts, moved into the pool's stats by the session.
#[derive(Debug, Default, Clone, Copy)]
pub struct Counters {
    pub bytes_to_server: u64,
    pub bytes_to_client: u64,
    pub bytes_from_server: u64,
    /// ReadyForQuery messages relayed.
    pub queries: u64,
    /// Time from sending a request to an idle server until it was quiet again.
    pub query_time_us: u64,
}

/// The two directions' buffers of one client session.
///
/// Only `from_client` belongs to the client for its whole session. The
/// other three are needed only while it holds a server connection, so in
/// between they go back to the shard ([`Buffers::park_server_side`]) and an
/// idle client costs one small inbox instead of four buffers.
pub struct Buffers {
    pub from_client: Inbox,
    pub to_server: BytesMut,
    pub from_server: Inbox,
    pub to_client: BytesMut,
    pub counters: Counters,
}

/// What a session needs only while it holds a server connection: three of
/// its buffers, and its exchange's [`InFlight`] part.
pub struct ServerSide {
    to_server: BytesMut,
    from_server: Inbox,
    to_client: BytesMut,
    exchange: InFlight,
}

/// A parked buffer that grew past this (a flood, a big result) is let go
/// rather than kept for the next client: the shard keeps many of them.
const SERVER_SIDE_KEPT: usize = 64 * 1024;

impl ServerSide {
    pub fn new() -> ServerSide {
        ServerSide {
            to_server: BytesMut::with_capacity(8 * 1024),
            // Server messages are not size-checked by pglane: PostgreSQL
            // enforces its own limits, and only small ones are seen whole.
            from_server: Inbox::new(i32::MAX as usize),
            to_client: BytesMut::with_capacity(16 * 1024),
            exchange: InFlight::default(),
        }
    }
}

/// Whether `buf`, emptied, holds an allocation of more than `kept` bytes.
/// Its `capacity()` alone does not say: once the relay has advanced past
/// what it wrote, it counts only the room left behind that, while the whole
/// allocation stays. So the room in front is taken back first, where the
/// buffer is the allocation's only user (which costs nothing: it is empty).
fn holds_more_than(buf: &mut BytesMut, kept: usize) -> bool {
    buf.capacity() > kept || buf.try_reclaim(kept + 1)
}

impl Default for ServerSide {
    fn default() -> Self {
        ServerSide::new()
    }
}

impl Buffers {
    /// A new session's buffers, the server side parked (see [`Buffers::attach_server_side`]).
    pub fn new(max_message: usize) -> Buffers {
        Buffers {
            from_client: Inbox::new(max_message),
            to_server: BytesMut::new(),
            from_server: Inbox::parked(),
            to_client: BytesMut::new(),
            counters: Counters::default(),
        }
    }

    /// Takes in server-side buffers for the server connection just borrowed;
    /// returns the exchange's part, for the exchange.
    pub fn attach_server_side(&mut self, side: ServerSide) -> InFlight {
        self.to_server = side.to_server;
        self.from_server = side.from_server;
        self.to_client = side.to_client;
        side.exchange
    }

    /// Gives the server-side buffers up, emptied, when the server connection
    /// goes back (what they still held belonged to that conversation), with
    /// the exchange's part.
    pub fn park_server_side(&mut self, exchange: InFlight) -> ServerSide {
        let mut side = ServerSide {
            to_server: std::mem::take(&mut self.to_server),
            from_server: std::mem::replace(&mut self.from_server, Inbox::parked()),
            to_client: std::mem::take(&mut self.to_client),
            exchange,
        };
        side.to_server.clear();
        side.from_server.clear();
        side.to_client.clear();
        if holds_more_than(&mut side.to_server, SERVER_SIDE_KEPT)
            || holds_more_than(&mut side.to_client, SERVER_SIDE_KEPT)
            || side.from_server.buffer_len() > SERVER_SIDE_KEPT
            || side.exchange.retained_bytes() > SERVER_SIDE_KEPT
        {
            // A client's 60 MiB query stayed in the shard's spares, kept
            // for the next client (issue 43): let go, and fresh ones made.
            side = ServerSide::new();
            crate::memory::let_go_of_a_large_buffer();
        }
        side
    }
}

pub struct Relay<'a> {
    pub intake: Intake,
    pub client: &'a mut Stream,
    pub server: &'a mut Stream,
    pub buffers: &'a mut Buffers,
    pub exchange: &'a mut Exchange,
    /// The statement and settings state the exchange reads and updates.
    pub sources: Sources<'a>,
    pub release_when_idle: bool,
    pub shutdown: &'a ShutdownSignal,
    /// The client's registry entry: KILL, and a cancel to send again (see
    /// `ClientEntry::behind_unanswered`).
    pub entry: &'a crate::runtime::ClientEntry,
    pub waker_id: u64,
    /// The shutdown signal has this task's waker (see `poll_fired_once`).
    pub waker_left: &'a mut bool,
    /// A ReadyForQuery has come back in this relay: before that, an idle
    /// exchange only means nothing was sent yet.
    pub saw_ready: bool,
    /// When the server was last given work while quiet (for query time).
    pub busy_since: Option<crate::rt::Stamp>,
    pub limits: Limits,
    /// The running timer, if a limit applies right now.
    pub deadline: Option<(crate::rt::Timer, Deadline)>,
    /// Server pipelining is on for this client: its pool, to offer the
    /// connection to a waiter behind a request that allows it.
    pub pipelining: Option<&'a Rc<Pool>>,
    /// The connection offered behind this client's request, if it was.
    pub offer: &'a mut Option<Offer>,
    /// The opening this relay posted when it parked with its whole request
    /// in flight and no one waiting (see `Pool::post`). It lives only while
    /// the relay is parked: the next poll takes it up if a client claimed it,
    /// else drops it, which withdraws it.
    pub posted: Option<Offer>,
    /// At the end of the last step: nothing is offered, the whole request is
    /// sent, and the exchange may be followed.
    pub followable: bool,
    /// ReadyForQuery messages still owed to the client ahead, whose replies
    /// are dropped (see `pool::Handover::skip_ready`).
    pub skip_ready: &'a mut usize,
    /// The server sent the client a FATAL: what follows is its going away.
    pub server_said_fatal: bool,
    /// Writing to the server failed; the relay reads on, for the FATAL a
    /// server that went away may have left, before it ends.
    pub server_write_failed: Option<io::Error>,
    /// The client's request is not on the server yet (transaction mode):
    /// once it is written, cancel requests go to the server.
    pub unsent: Option<Unsent<'a>>,
    /// The client's LISTENs through the notification hub, if it has any:
    /// a client pinned after it LISTENed gets its notifications here, when
    /// it is between transactions, since it never waits outside a relay.
    pub notifications: &'a mut Option<Box<super::notifications::Notifications>>,
    /// Where a LISTEN the client sends to the server is subscribed to
    /// ahead (transaction mode; see `notify::follow`).
    pub hub: Option<super::notifications::HubDoor<'a>>,
    /// The server's replies stay in `to_client` while this is true: a read
    /// on a standby that may yet run again on the primary (see
    /// `client::routing`). The relay sets it false as it lets them go, once
    /// they fill its buffer; the relay may end with them held.
    pub holding: &'a mut bool,
}

/// Who to tell once the client's request is on the server (see
/// `ClientEntry::queued`).
pub struct Unsent<'a> {
    pub entry: &'a crate::runtime::ClientEntry,
    pub key: &'a Rc<crate::server::CancelKey>,
    /// server_connect_timeout, for a cancel request sent then.
    pub timeout: std::time::Duration,
}

impl Unsent<'_> {
    /// The request is written: a cancel request for it now goes to the
    /// server, and one that came while it was being written goes now.
    fn written(self) {
        *self.entry.server.borrow_mut() = Some(self.key.clone());
        if self.entry.unqueue() {
            super::spawn_cancel(self.key, self.timeout, async |_| {});
        }
    }
}

/// Why [`take_client_messages`] stopped.
pub(super) enum ClientStop {
    /// Nothing whole is left to take.
    Drained,
    /// The intake is full (see [`Intake::open`]): more may be there.
    Full,
    /// The client said Terminate.
    Terminate,
    /// A message of a type the protocol does not have.
    BadTag(u8),
}

/// Reads of one socket a round of the relay (or one [`take_and_read`]) may
/// make: the second finds, in the common case, that the peer has nothing
/// more and posts the wait for its next bytes, which spares the relay a
/// round that would do only that. More would let a client whose messages
/// pglane answers itself keep one round going.
const READS_PER_ROUND: usize = 2;

/// How [`take_and_read`] left the client's side.
pub(super) struct Taken {
    pub stop: Result<ClientStop, ProtocolError>,
    /// All the client sent was taken and its socket had nothing more: its
    /// next bytes (or its going away) wake the task.
    pub waiting: bool,
}

/// The client's messages into the exchange: what was read is taken first,
/// and the client is read (and that taken) only once all of it was and the
/// intake is open, so the inbox grows only for a message too big for it,
/// never for messages left behind. `elsewhere`: the client's bytes already
/// on their way to the server by another route (a follower's outbox).
/// `None`: the client's socket failed. Sets `progress` if it read.
/// Inlined: it runs at every turn of the relay.
#[inline(always)]
pub(super) fn take_and_read(
    cx: &mut Context<'_>,
    client: &mut Stream,
    b: &mut Buffers,
    exchange: &mut Exchange,
    st: &mut Statements<'_>,
    intake: &mut Intake,
    elsewhere: usize,
    progress: &mut bool,
) -> Option<Taken> {
    let mut reads = 0;
    loop {
        let stop = take_client_messages(&mut b.from_client, exchange, st, &mut b.to_server, &mut b.to_client, intake, elsewhere);
        let outgoing = elsewhere + b.to_server.len() + exchange.held_len();
        if reads == READS_PER_ROUND
            || !matches!(stop, Ok(ClientStop::Drained))
            || b.from_client.eof
            || !intake.open(exchange.due_len(), outgoing, b.to_client.len())
        {
            return Some(Taken { stop, waiting: false });
        }
        match b.from_client.poll_fill(cx, client) {
            Poll::Ready(Ok(_)) => {
                *progress = true;
                reads += 1;
            }
            Poll::Ready(Err(_)) => return None,
            Poll::Pending => return Some(Taken { stop, waiting: true }),
        }
    }
}

/// Runs the client's buffered messages through the exchange, as many as
/// `intake` lets in: what goes to the server is appended to `to_server`
/// (behind `elsewhere` bytes of the client's not sent yet), what pglane
/// answers to `to_client`.
pub(super) fn take_client_messages(
    from_client: &mut Inbox,
    exchange: &mut Exchange,
    st: &mut Statements<'_>,
    to_server: &mut BytesMut,
    to_client: &mut BytesMut,
    intake: &mut Intake,
    elsewhere: usize,
) -> Result<ClientStop, ProtocolError> {
    let stop = loop {
        if from_client.pending().is_empty() {
            break ClientStop::Drained;
        }
        // Not in the middle of a streamed message: its bytes are on their way.
        if from_client.at_boundary()
            && !intake.open(exchange.due_len(), elsewhere + to_server.len() + exchange.held_len(), to_client.len())
        {
            break ClientStop::Full;
        }
        let piece = match from_client.next(client_needs_whole)? {
            Some(piece) => piece,
            None => break ClientStop::Drained,
        };
        match piece {
            Piece::Whole(frontend::TERMINATE, _) => break ClientStop::Terminate,
            Piece::Whole(tag, _) | Piece::Start(tag, _) if !frontend::is_known_tag(tag) => break ClientStop::BadTag(tag),
            Piece::Whole(tag, message) => {
                intake.took(tag);
                exchange.from_client(tag, message, st, to_server)
            }
            Piece::Start(tag, bytes) => {
                intake.took(tag);
                exchange.from_client_stream(tag, bytes, to_server)
            }
            Piece::More(bytes) => exchange.from_client_stream_more(bytes, to_server),
        }
    };
    exchange.client_messages_taken(to_client);
    Ok(stop)
}

impl Future for Relay<'_> {
    type Output = RelayEnd;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<RelayEnd> {
        let this = self.get_mut();
        if let Some(posted) = this.posted.take() {
            if posted.is_claimed() {
                this.exchange.followed = true;
                *this.offer = Some(posted);
            }
        }
        for _ in 0..BUDGET {
            match this.step(cx) {
                Step::Progress => {}
                Step::Idle => {
                    this.post_opening(cx);
                    return Poll::Pending;
                }
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

/// Writes as much of `out` as the socket takes, counting it. `Ready(Ok(true))` if it wrote.
pub(super) fn poll_send(
    cx: &mut Context<'_>,
    stream: &mut Stream,
    out: &mut BytesMut,
    count: &mut u64,
) -> Poll<io::Result<bool>> {
    if out.is_empty() {
        return Poll::Ready(Ok(false));
    }
    let n = std::task::ready!(Pin::new(&mut *stream).poll_write(cx, out))?;
    if n == 0 {
        return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
    }
    out.advance(n);
    *count += n as u64;
    if out.is_empty() {
        // Plain sockets have nothing to flush; TLS pushes out its last record
        // now instead of at the next read.
        if let Poll::Ready(Err(e)) = Pin::new(stream).poll_flush(cx) {
            return Poll::Ready(Err(e));
        }
    }
    Poll::Ready(Ok(true))
}

/// Keeps the one timer that applies now running, and says if it fired.
fn poll_deadline(
    cx: &mut Context<'_>,
    exchange: &Exchange,
    limits: Limits,
    deadline: &mut Option<(crate::rt::Timer, Deadline)>,
) -> Option<Deadline> {
    let want = if !exchange.is_quiet() {
        limits.query.map(|d| (Deadline::Query, d))
    } else if exchange.tracker.status() != crate::protocol::backend::TransactionStatus::Idle {
        limits.idle_in_transaction.map(|d| (Deadline::IdleInTransaction, d))
    } else {
        None
    };
    match (want, &*deadline) {
        (None, _) => *deadline = None,
        (Some((kind, _)), Some((_, running))) if kind == *running => {}
        (Some((kind, limit)), _) => *deadline = Some((crate::rt::Timer::new(limit), kind)),
    }
    let (timer, kind) = deadline.as_mut()?;
    Pin::new(timer).poll(cx).is_ready().then_some(*kind)
}

impl Relay<'_> {
    /// How the relay ends when the server's side is gone (closed, or
    /// `read_error`): quietly if the server said FATAL to the client first.
    fn server_gone(&mut self, read_error: Option<io::Error>) -> RelayEnd {
        if self.server_said_fatal {
            return RelayEnd::ServerEnded;
        }
        match self.server_write_failed.take().or(read_error) {
            Some(e) => RelayEnd::ServerError(e),
            None => RelayEnd::ServerClosed,
        }
    }

    /// Parking with the whole request in flight and every connection lent:
    /// posts an opening for a client that comes before the reply does.
    fn post_opening(&mut self, cx: &Context<'_>) {
        let Some(pool) = self.pipelining else { return };
        if !self.followable || self.offer.is_some() {
            return;
        }
        self.posted = pool
            .post_behind((self.sources.server, self.sources.server_output), cx.waker(), || self.exchange.statements_in_flight());
    }

    fn releasable(release_when_idle: bool, saw_ready: bool, exchange: &Exchange) -> bool {
        release_when_idle && saw_ready && exchange.pinned.is_none() && exchange.is_releasable()
    }

    /// One round: read, process and write each direction once.
    fn step(&mut self, cx: &mut Context<'_>) -> Step {
        if self.entry.killed.get() {
            return Step::Done(RelayEnd::Killed);
        }
        let mut progress = false;
        let b = &mut *self.buffers;
        let server_session = self.sources.server;
        let server_output = self.sources.server_output;
        let mut session = server_session.borrow_mut();
        let st = &mut self.sources.statements(&mut session);

        // Client → server. Once the server can be released, nothing more of
        // the client's is taken: it waits for the next server connection.
        // Nor once another client's request is behind this one's.
        let mut client_leaving = false;
        let mut bad_tag = None;
        let mut client_drained = true;
        let mut client_waiting = false;
        if !Self::releasable(self.release_when_idle, self.saw_ready, self.exchange) && self.offer.is_none() {
            let Some(taken) = take_and_read(cx, self.client, b, self.exchange, st, &mut self.intake, 0, &mut progress) else {
                return Step::Done(RelayEnd::ClientLeft);
            };
            client_waiting = taken.waiting;
            match taken.stop {
                Ok(ClientStop::Drained) => {}
                Ok(ClientStop::Full) => client_drained = false,
                Ok(ClientStop::Terminate) => client_leaving = true,
                Ok(ClientStop::BadTag(tag)) => bad_tag = Some(tag),
                Err(e) => return Step::Done(RelayEnd::ClientError(e)),
            }
            if self.intake.flush_due() && b.from_client.at_boundary() {
                frontend::flush(&mut b.to_server);
            }
        }
        if self.exchange.awaits_hub() {
            // A text that LISTENs waits until the hub listens too.
            let notifications = self.notifications.get_or_insert_with(Box::default);
            if let (Some(channels), Some(hub)) = (self.exchange.take_sent_listens(), &self.hub) {
                notifications.listen_ahead(channels, || hub.subscribe());
            }
            if let Poll::Ready(refused) = notifications.poll_listened(cx) {
                for (channel, e) in refused {
                    // Its own server connection delivers them, as before the hub.
                    tracing::warn!("the notification hub cannot LISTEN to {:?} ({}): the client is pinned", channel, e.message);
                    self.exchange.hub_refused(&channel);
                }
                self.exchange.hub_listened(st);
                self.exchange.take_for_server(&mut b.to_server);
                progress = true;
            }
        }
        if let Some(offer) = self.offer.as_ref() {
            // (Held back while a cancel sent for this client's request is
            // unchecked; its check wakes this relay.)
            if b.to_server.len() < self.intake.buffer && offer.has_outbox() && self.entry.may_queue_behind() {
                offer.move_outbox(&mut b.to_server);
            }
        }
        if self.busy_since.is_none() && !b.to_server.is_empty() {
            self.busy_since = Some(crate::rt::stamp());
        }
        if self.server_write_failed.is_some() {
            b.to_server.clear();
        }
        if let (false, Some(notifications)) = (b.to_server.is_empty(), self.notifications.as_deref_mut()) {
            notifications.forget_before_commit();
        }
        match poll_send(cx, self.server, &mut b.to_server, &mut b.counters.bytes_to_server) {
            Poll::Ready(Ok(wrote)) => {
                progress |= wrote;
                // All the client sent is on the server (none of it held
                // back for a check or an alignment pglane sent first).
                if wrote
                    && self.unsent.is_some()
                    && b.to_server.is_empty()
                    && self.exchange.held_len() == 0
                    && !self.exchange.waits_behind_pglane()
                {
                    if let Some(unsent) = self.unsent.take() {
                        unsent.written();
                    }
                }
            }
            Poll::Ready(Err(e)) => {
                // A server that went away may have said why (a FATAL before
                // it closed), and that goes to the client: read on first.
                b.to_server.clear();
                self.server_write_failed = Some(e);
                progress = true;
            }
            Poll::Pending => {}
        }
        if let Some(pool) = self.pipelining {
            let all_sent = b.to_server.is_empty() && b.from_client.pending().is_empty() && !client_leaving && bad_tag.is_none();
            self.followable = self.offer.is_none() && all_sent && self.exchange.may_be_followed();
            if self.followable {
                if let Some(offer) =
                    pool.offer_behind((server_session, server_output), cx.waker(), || self.exchange.statements_in_flight())
                {
                    self.exchange.followed = true;
                    *self.offer = Some(offer);
                    self.followable = false;
                }
            }
        }

        // Server → client. A read that brought bytes is followed by a
        // second look (see [`READS_PER_ROUND`]), unless the connection is
        // done with: mid-transaction, that posts the wait for the next
        // reply in this round instead of one more.
        let mut server_waiting = false;
        for look in 0..READS_PER_ROUND {
            let mut read = false;
            if !b.from_server.eof && b.to_client.len() < self.intake.buffer {
                match b.from_server.poll_fill(cx, self.server) {
                    Poll::Ready(Ok(n)) => {
                        b.counters.bytes_from_server += n as u64;
                        progress = true;
                        read = true;
                    }
                    Poll::Ready(Err(e)) => return Step::Done(self.server_gone(Some(e))),
                    Poll::Pending => server_waiting = true,
                }
            }
            if look > 0 && !read {
                break;
            }
            // Bytes after the final ReadyForQuery stay behind (and make the
            // connection unfit for reuse).
            // The replies of the client ahead, whose client left.
            while *self.skip_ready > 0 {
                match b.from_server.next(server_needs_whole) {
                    Ok(Some(Piece::Whole(backend::READY_FOR_QUERY, _))) => *self.skip_ready -= 1,
                    Ok(Some(_)) => {}
                    Ok(None) => break,
                    Err(e) => return Step::Done(RelayEnd::ServerError(io::Error::new(io::ErrorKind::InvalidData, e))),
                }
            }
            while *self.skip_ready == 0 && !Self::releasable(self.release_when_idle, self.saw_ready, self.exchange) {
                // A negotiated portal's DataRows are transcoded, so whole.
                let rows_whole = self.exchange.rows_need_whole();
                let piece = match b.from_server.next(|tag| server_needs_whole(tag) || (rows_whole && tag == backend::DATA_ROW)) {
                    Ok(Some(piece)) => piece,
                    Ok(None) => break,
                    Err(e) => return Step::Done(RelayEnd::ServerError(io::Error::new(io::ErrorKind::InvalidData, e))),
                };
                match piece {
                    Piece::Whole(tag, message) => {
                        let forwarded = self.exchange.from_server(tag, message, st, &mut b.to_client);
                        // Passed on as it came, or as the client's own query
                        // would have had it (auto-prepare): the client has it.
                        // (One pglane kept, from aligning settings, fails the
                        // exchange just below.)
                        if tag == backend::ERROR_RESPONSE && backend::error_ends_session(&message[HEADER_LEN..]) {
                            self.server_said_fatal = true;
                        }
                        if let Some(e) = self.exchange.take_failure() {
                            return Step::Done(RelayEnd::ServerError(io::Error::new(io::ErrorKind::InvalidData, e)));
                        }
                        if tag == backend::READY_FOR_QUERY && self.offer.is_some() && self.exchange.left_a_block_open() {
                            // Another client's request is behind this one's
                            // and would run in this client's block, its
                            // replies coming here. `may_be_followed` rules
                            // that out; should it ever let one through, both
                            // clients lose the connection rather than get
                            // each other's replies.
                            return Step::Done(RelayEnd::ServerError(io::Error::other(
                                "a request with another client's behind it left a transaction block open",
                            )));
                        }
                        if forwarded && tag == backend::READY_FOR_QUERY {
                            self.saw_ready = true;
                            self.entry.answered();
                            b.counters.queries += 1;
                            if self.exchange.is_quiet() {
                                if let Some(since) = self.busy_since.take() {
                                    b.counters.query_time_us += crate::rt::stamp().micros_since(since);
                                }
                            }
                        }
                    }
                    Piece::Start(tag, bytes) => self.exchange.from_server_stream(tag, bytes, st.registry, &mut b.to_client),
                    Piece::More(bytes) => b.to_client.extend_from_slice(bytes),
                }
            }
            // What the server's messages made pglane send back (auto-prepare
            // running a query again, messages held for a check); sent at
            // the next step, which this is progress for: the messages may
            // have come without a read here (a hand-over's unread bytes),
            // and then nothing else would wake the relay to send them.
            let queued = b.to_server.len();
            self.exchange.take_for_server(&mut b.to_server);
            progress |= b.to_server.len() > queued;
            if !read || Self::releasable(self.release_when_idle, self.saw_ready, self.exchange) {
                break;
            }
        }
        if let Some(notifications) = self.notifications.as_deref_mut().filter(|n| n.subscription.is_some()) {
            if let Some(outcomes) = self.exchange.take_listen_outcomes() {
                notifications.apply(outcomes);
            }
            let between_transactions = self.exchange.pinned.is_some()
                && self.saw_ready
                && self.exchange.is_releasable()
                && b.from_server.at_boundary()
                && b.from_server.pending().is_empty();
            if let Err(overflow) = notifications.relay_between_transactions(cx, between_transactions, &mut b.to_client) {
                return Step::Done(RelayEnd::NotificationsOverflow(overflow));
            }
        }
        // Held replies go once they fill the buffer: the server is read
        // only while they are under it.
        *self.holding &= b.to_client.len() < self.intake.buffer;
        if !*self.holding {
            match poll_send(cx, self.client, &mut b.to_client, &mut b.counters.bytes_to_client) {
                Poll::Ready(Ok(wrote)) => progress |= wrote,
                Poll::Ready(Err(_)) => return Step::Done(RelayEnd::ClientLeft),
                Poll::Pending => {}
            }
        }

        // Is this relay over? (With what it holds, if it holds any.)
        let delivered = b.to_client.is_empty() || *self.holding;
        if Self::releasable(self.release_when_idle, self.saw_ready, self.exchange) && delivered {
            return Step::Done(RelayEnd::Released);
        }
        if b.from_server.eof && delivered {
            return Step::Done(self.server_gone(None));
        }
        if b.to_server.is_empty() {
            if client_leaving || (b.from_client.eof && client_drained) {
                return Step::Done(RelayEnd::ClientLeft);
            }
            if let Some(tag) = bad_tag {
                return Step::Done(RelayEnd::ClientError(ProtocolError::UnexpectedMessage(tag)));
            }
        }
        if let Some(kind) = poll_deadline(cx, self.exchange, self.limits, &mut self.deadline) {
            return Step::Done(RelayEnd::TimedOut(kind));
        }
        // Another round would find what this one left: both sockets
        // waited on, both directions' output gone. Only what wakes the task
        // can change that (this is the case after most rounds that sent a
        // request or a reply; the round saved was a twentieth of a -S
        // transaction's instructions).
        let settled = client_waiting
            && server_waiting
            && b.to_server.is_empty()
            && b.to_client.is_empty()
            && self.server_write_failed.is_none()
            && self.notifications.is_none()
            && !self.exchange.awaits_hub();
        if progress && !settled {
            return Step::Progress;
        }
        // Only between transactions does a shutdown end the relay.
        let between_transactions = self.exchange.is_releasable() && b.from_client.pending().is_empty() && b.to_client.is_empty();
        if self.shutdown.poll_fired_once(self.waker_id, cx, self.waker_left) && between_transactions {
            return Step::Done(RelayEnd::Shutdown);
        }
        Step::Idle
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_intake_closes_on_a_full_buffer_either_way_and_on_too_many_answers_due() {
        let mut intake = Intake::new(1000);
        assert!(intake.open(0, 0, 0));
        assert!(!intake.open(0, 1000, 0), "what goes to the server fills the buffer");
        assert!(!intake.open(0, 0, 1000), "the client does not read its replies");
        assert!(intake.open(MAX_IN_FLIGHT - 1, 999, 999));
        assert!(!intake.flush_due(), "no Flush while it is open");
    }

    #[test]
    fn too_many_answers_due_pause_it_until_half_have_come_with_one_flush() {
        let mut intake = Intake::new(1000);
        assert!(!intake.open(MAX_IN_FLIGHT, 0, 0));
        assert!(intake.flush_due(), "a Flush as it stops");
        assert!(!intake.flush_due(), "one per pause");
        assert!(!intake.open(MAX_IN_FLIGHT / 2 + 1, 0, 0), "still paused above half");
        assert!(!intake.flush_due());
        assert!(intake.open(MAX_IN_FLIGHT / 2, 0, 0), "open again at half");
        assert!(!intake.open(MAX_IN_FLIGHT, 0, 0));
        assert!(intake.flush_due(), "the next pause has its own Flush");
    }
}
