//! The reactor: one io_uring per executor thread, and the timers.
//!
//! It does only what the executor cannot do without the kernel: bring a
//! socket that had nothing for it its next bytes (a receive into a buffer
//! of [`super::recv_buffers`], or where the kernel has no buffer rings a
//! one-shot readiness poll), tell it when a full socket has room, and wait
//! for that, a timer, or a wake-up from another thread (a read op on the
//! executor's eventfd), all in one `io_uring_enter`.
//!
//! The ring is set up SINGLE_ISSUER and DEFER_TASKRUN where the kernel has
//! them (6.1+): completions are then processed only inside our own enter, in
//! our own time, never by interrupting the thread. Timers live in a map
//! here, by [`Stamp`] (the clock as a number, read once per turn); the nearest one is armed on the ring as an absolute timeout op,
//! which stays there across the waits it does not end (a wait given a
//! relative timeout instead needs the clock read, and the distance to the
//! deadline worked out, on every turn that sleeps: 110 instructions, and
//! a pgbench -S transaction has two such turns). A timer set nearer than the one armed arms its own
//! (the old one is removed); one removed or set further away leaves the
//! armed op to end a wait early, once, after which the nearest is armed.
//!
//! Before a wait that would put the thread to sleep, the reactor may first
//! spin for a while: checking the ring for completions, yielding the CPU
//! between checks. A sleep and its wake-up cost a proxy more than the work
//! of a short transaction when clients are few; spinning trades CPU time
//! for them, when and for as long as [`super::spin::SpinPolicy`] says it
//! pays (short waits, no other thread wanting the CPU).
//!
//! Writes are queued here rather than sent at once ([`Reactor::queue_send`]):
//! the turn's sends ride the enter that ends the turn, each a non-blocking
//! `IORING_OP_SEND` of a copy the reactor owns. A send wakes its peer, and a
//! peer woken by a `send(2)` in the middle of a turn preempted the shard
//! before it had done the rest of its ready work (an involuntary context
//! switch per transaction, measured at 0.42, on top of the park that came
//! after anyway). Sent from inside the enter that parks, the peers wake as
//! the shard goes to sleep. A send the socket has no room for completes
//! `EAGAIN` (never waits in the kernel), and the reactor finishes it itself:
//! a poll for room, then the rest, so the writer never has to come back.
//! Every send op so completes within its own enter, with exactly one
//! completion: the wait asks for one more completion than the enter's sends
//! that no writer waits for, so the turn's own sends never end it.
//!
//! A socket dropped with a send still under way leaves it to the reactor,
//! which keeps the descriptor open until the send is done, so that a last
//! message (an error before the close) is not lost: but for at most
//! [`SEND_LINGER`], as the kernel's own SO_LINGER would, because a peer that
//! reads nothing would otherwise hold the descriptor, and the connection
//! with it, for ever ([`Reactor::release_send`]). A socket whose unsent bytes
//! nobody wants (a server connection abandoned mid-conversation) drops them
//! and closes at once instead ([`Reactor::abandon_send`]).
//!
//! Every op's user_data names a slot of [`Reactor::slots`] (index and
//! generation); a slot outlives the future that armed it when that future is
//! dropped early (the op is cancelled, and the slot freed when its last
//! completion arrives), so a late completion can never wake the wrong task.

use std::collections::BTreeMap;
use std::io;
use std::os::fd::{OwnedFd, RawFd};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use super::time::Stamp;

use io_uring::{opcode, squeue, types, IoUring};

use super::recv_buffers::{Received, RecvBuffers};
use super::spin::{RunQueue, SpinPolicy};

/// user_data of the eventfd read that interrupts a wait.
const WAKE_UP: u64 = u64::MAX;
/// user_data of cancel ops, whose own completions say nothing we need.
const CANCEL: u64 = u64::MAX - 1;
/// user_data of the timeout op armed for the nearest timer.
const TIMER: u64 = u64::MAX - 2;

/// Submission queue entries; more ops than this in one turn are submitted
/// in several enters.
const RING_ENTRIES: u32 = 256;
/// Completion queue entries: room for every socket's read and write wait
/// of a busy shard before the kernel has to hold completions back.
const COMPLETION_ENTRIES: u32 = 4096;

/// The longest write a socket hands over in one queued send: longer ones
/// are sent at once (a bulk transfer is not a request/response exchange, and
/// the copy would cost more than the context switch it saves).
pub const SEND_QUEUE_LIMIT: usize = 64 * 1024;

/// Send buffers up to this size are kept for the next sends, up to
/// [`SPARE_SEND_BUFFERS`] of them (not in their slots: a slot that waits for
/// an idle client to speak must not hold one).
const SEND_BUFFER_KEPT: usize = 16 * 1024;
const SPARE_SEND_BUFFERS: usize = 64;

/// How long a dropped socket's last send may wait for its peer to take it
/// before the reactor gives up on it and closes the descriptor.
pub const SEND_LINGER: Duration = Duration::from_secs(5);

/// What a wait for a socket's bytes came to (see [`Reactor::wait_readable`]).
#[derive(Debug)]
pub enum ReadWait {
    /// These bytes, in a buffer of the ring: read them, then give it back.
    Bytes(Received),
    /// Something to read (bytes, the end, or an error): `recv` says what.
    Readable,
    Failed(io::Error),
}

/// One op in flight, as its future sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Token {
    index: u32,
    generation: u32,
}

impl Token {
    fn user_data(self) -> u64 {
        (u64::from(self.generation) << 32) | u64::from(self.index)
    }
}

enum Slot {
    Free,
    /// In the kernel; wake this when it completes.
    Waiting(Option<Waker>),
    /// Completed with this result (a byte count, poll mask, or -errno);
    /// its future has not looked yet.
    Done(i32),
    /// A receive completed with these bytes, in a buffer of the ring that
    /// its future has not looked at yet (see [`Reactor::wait_readable`]).
    Received(Received),
    /// Its future is gone and the op was cancelled; free it on completion.
    Abandoned,
}

/// Where a queued send is (see [`Reactor::queue_send`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SendPhase {
    /// Not a send, or finished.
    None,
    /// Waiting for the end of the turn: more writes may join it.
    Queued,
    /// Its send op is in the ring.
    Sending,
    /// The socket was full: a poll for room is in the ring.
    AwaitingRoom,
    /// Given up on (see [`Reactor::discard`]): its op in the ring (a send
    /// or a poll being cancelled) only has to complete for it to end.
    Discarded,
}

/// The bytes of a queued send, owned here until the kernel has them all.
struct Outgoing {
    phase: SendPhase,
    fd: RawFd,
    data: Vec<u8>,
    sent: usize,
    /// The socket was dropped with bytes still to send: its descriptor
    /// stays open until they are sent (or fail, or are given up on), then
    /// closes. Never closed while an op naming it may still reach the
    /// kernel: the descriptor's number could be another socket's by then.
    owned_fd: Option<OwnedFd>,
}

impl Outgoing {
    fn new() -> Outgoing {
        Outgoing { phase: SendPhase::None, fd: -1, data: Vec::new(), sent: 0, owned_fd: None }
    }
}

/// A send whose socket was dropped, given up on at `deadline` if not done.
#[derive(Clone, Copy)]
struct Lingering {
    token: Token,
    deadline: Stamp,
}

pub struct Reactor {
    ring: IoUring,
    slots: Vec<(u32, Slot)>,
    /// Parallel to `slots`: the send each slot carries, if it is one.
    outgoing: Vec<Outgoing>,
    /// Slots whose sends wait for the end of the turn.
    queued_sends: Vec<u32>,
    /// The slots of send ops pushed since the ring was last entered: each
    /// completes, once, within the next enter (see the module comment).
    sends_in_ring: Vec<u32>,
    /// Completions taken off the ring (user_data, result, flags), reused
    /// from one reap to the next.
    completed: Vec<(u64, i32, u32)>,
    /// Where receives put their bytes; `None` where the kernel has no
    /// buffer rings, and reads wait for readiness instead.
    recv_buffers: Option<RecvBuffers>,
    /// Emptied send buffers, for the next sends.
    spare_sends: Vec<Vec<u8>>,
    /// Sends of dropped sockets, oldest first (see [`SEND_LINGER`]).
    lingering: std::collections::VecDeque<Lingering>,
    free: Vec<u32>,
    timers: BTreeMap<(Stamp, u64), Waker>,
    next_timer: u64,
    /// The deadline of the timeout op on the ring, until it completes.
    armed: Option<Stamp>,
    /// Where the armed op's deadline is read from; boxed, so that its
    /// address holds until the kernel has read it.
    armed_at: Box<types::Timespec>,
    eventfd: RawFd,
    /// Where the eventfd read lands. Leaked: the kernel may still hold the
    /// op when the ring is torn down.
    eventfd_buffer: &'static mut u64,
    /// Whether and how long to spin before a wait that would sleep.
    pub(super) spin: SpinPolicy,
    run_queue: RunQueue,
}

impl Reactor {
    pub(super) fn new(eventfd: RawFd) -> io::Result<Reactor> {
        let ring = IoUring::builder()
            .setup_single_issuer()
            .setup_defer_taskrun()
            .setup_taskrun_flag()
            .setup_cqsize(COMPLETION_ENTRIES)
            .build(RING_ENTRIES)
            .or_else(|_| IoUring::builder().setup_cqsize(COMPLETION_ENTRIES).build(RING_ENTRIES))?;
        // Never-dropped completions (NODROP) are what the loop is built on;
        // EXT_ARG marks the kernel pglane is documented and tested from
        // (5.11), though the loop no longer waits with a timeout argument.
        if !ring.params().is_feature_ext_arg() || !ring.params().is_feature_nodrop() {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "this kernel's io_uring lacks EXT_ARG or NODROP: pglane needs Linux 5.11 or later",
            ));
        }
        let recv_buffers = RecvBuffers::register(&ring).ok();
        let mut reactor = Reactor {
            recv_buffers,
            ring,
            slots: Vec::new(),
            outgoing: Vec::new(),
            queued_sends: Vec::new(),
            sends_in_ring: Vec::new(),
            completed: Vec::new(),
            spare_sends: Vec::new(),
            lingering: std::collections::VecDeque::new(),
            free: Vec::new(),
            timers: BTreeMap::new(),
            next_timer: 0,
            armed: None,
            armed_at: Box::new(types::Timespec::new()),
            eventfd,
            eventfd_buffer: Box::leak(Box::new(0)),
            spin: SpinPolicy::off(),
            run_queue: RunQueue::open(),
        };
        reactor.listen_for_wake_ups();
        Ok(reactor)
    }

    fn push(&mut self, entry: squeue::Entry) {
        loop {
            // SAFETY: every op we push points only at memory that outlives
            // it: none for polls and cancels, the leaked eventfd buffer.
            if unsafe { self.ring.submission().push(&entry) }.is_ok() {
                return;
            }
            // Full: hand what is queued to the kernel and try again.
            match self.ring.submit() {
                Ok(_) => self.sends_in_ring.clear(),
                Err(e) if e.raw_os_error() == Some(libc::EBUSY) || e.raw_os_error() == Some(libc::EINTR) => {}
                Err(e) => panic!("io_uring submit failed: {e}"),
            }
            self.reap();
        }
    }

    fn listen_for_wake_ups(&mut self) {
        let read =
            opcode::Read::new(types::Fd(self.eventfd), (self.eventfd_buffer as *mut u64).cast(), 8).build().user_data(WAKE_UP);
        self.push(read);
    }

    /// Asks to be told when `fd` has any of `events` (POLLIN, POLLOUT).
    pub fn poll_fd(&mut self, fd: RawFd, events: u32) -> Token {
        let token = self.slot();
        let poll = opcode::PollAdd::new(types::Fd(fd), events).build().user_data(token.user_data());
        self.push(poll);
        token
    }

    /// Asks to be told when `fd` has bytes to read (or its end, or an
    /// error): a receive into a buffer of the ring where the kernel has
    /// buffer rings, else a readiness poll. [`Reactor::poll_readable`] says
    /// what it came to.
    /// `by_readiness` asks for the poll anyway.
    pub fn wait_readable(&mut self, fd: RawFd, by_readiness: bool) -> Token {
        if by_readiness || self.recv_buffers.is_none() {
            return self.poll_fd(fd, (libc::POLLIN | libc::POLLRDHUP) as u32);
        }
        let token = self.slot();
        let recv = opcode::Recv::new(types::Fd(fd), std::ptr::null_mut(), super::recv_buffers::SIZE as u32)
            .buf_group(super::recv_buffers::GROUP)
            .build()
            .flags(squeue::Flags::BUFFER_SELECT)
            .user_data(token.user_data());
        self.push(recv);
        token
    }

    /// What a [`Reactor::wait_readable`] came to, once it did (the token is
    /// then spent).
    pub fn poll_readable(&mut self, token: Token, cx: &mut Context<'_>) -> Poll<ReadWait> {
        if let Slot::Received(received) = self.slots[token.index as usize].1 {
            self.free_slot(token.index);
            return Poll::Ready(ReadWait::Bytes(received));
        }
        self.poll_token(token, cx).map(|result| match result {
            // A poll's mask, or a receive that found the end of the stream
            // or no buffer left: a plain recv will say what is there.
            r if r >= 0 || r == -libc::ENOBUFS => ReadWait::Readable,
            r => ReadWait::Failed(io::Error::from_raw_os_error(-r)),
        })
    }

    /// Whether a receive completed with bytes its future has not read yet.
    pub fn has_received(&self, token: Token) -> bool {
        let (generation, slot) = &self.slots[token.index as usize];
        *generation == token.generation && matches!(slot, Slot::Received(_))
    }

    /// The bytes a receive put in a buffer of the ring.
    pub fn received(&self, received: Received) -> &[u8] {
        match &self.recv_buffers {
            Some(buffers) => buffers.bytes(received),
            None => &[],
        }
    }

    /// Gives a receive's buffer back to the ring, once its bytes are read.
    pub fn give_back(&mut self, received: Received) {
        if let Some(buffers) = &mut self.recv_buffers {
            buffers.give_back(received.buffer);
        }
    }

    /// Queues `data` for `fd`, to be sent at the end of this turn; its token
    /// completes (0, or -errno) once the kernel has every byte. The writer
    /// may add to it with [`Reactor::append_send`] until the turn ends.
    pub fn queue_send(&mut self, fd: RawFd, data: &[u8]) -> Token {
        let token = self.slot();
        let buffer = self.spare_sends.pop().unwrap_or_default();
        let out = &mut self.outgoing[token.index as usize];
        out.phase = SendPhase::Queued;
        out.fd = fd;
        out.sent = 0;
        out.data = buffer;
        out.data.extend_from_slice(data);
        self.queued_sends.push(token.index);
        token
    }

    /// Adds `data` to a queued send that has not gone out yet; false if it
    /// has (or is finished), or would grow past [`SEND_QUEUE_LIMIT`].
    pub fn append_send(&mut self, token: Token, data: &[u8]) -> bool {
        let (generation, _) = &self.slots[token.index as usize];
        let out = &mut self.outgoing[token.index as usize];
        if *generation != token.generation || out.phase != SendPhase::Queued || out.data.len() + data.len() > SEND_QUEUE_LIMIT {
            return false;
        }
        out.data.extend_from_slice(data);
        true
    }

    /// The socket that queued this send is gone: the send goes on, keeping
    /// `fd` open until it is finished, or for [`SEND_LINGER`] at most.
    pub fn release_send(&mut self, token: Token, fd: OwnedFd) {
        if self.adopt_send(token, fd) {
            let deadline = Stamp::read().saturating_add(SEND_LINGER);
            self.lingering.push_back(Lingering { token, deadline });
            // Only so that the wait ends by then; nothing is woken.
            self.set_timer(deadline, 0, Waker::noop());
        }
    }

    /// The socket that queued this send is gone, and what it had still to
    /// send is not wanted: the send stops, and `fd` closes as soon as no op
    /// in the ring names it (at once, or when the kernel confirms a cancel).
    pub fn abandon_send(&mut self, token: Token, fd: OwnedFd) {
        if self.adopt_send(token, fd) {
            self.discard(token.index);
        }
    }

    /// Takes `fd` over for a send whose socket is gone; false if the send
    /// was already finished (`fd` then closes here).
    fn adopt_send(&mut self, token: Token, fd: OwnedFd) -> bool {
        let (generation, slot) = &mut self.slots[token.index as usize];
        if *generation != token.generation {
            return false;
        }
        match slot {
            Slot::Waiting(_) => {
                *slot = Slot::Abandoned;
                self.outgoing[token.index as usize].owned_fd = Some(fd);
                true
            }
            Slot::Done(_) | Slot::Received(_) => {
                self.free_slot(token.index);
                false
            }
            Slot::Free | Slot::Abandoned => false,
        }
    }

    /// Gives up on a send: ended now if it is not in the ring yet, else
    /// when its op completes (a poll for room is cancelled).
    fn discard(&mut self, index: u32) {
        let generation = self.slots[index as usize].0;
        let out = &mut self.outgoing[index as usize];
        match out.phase {
            SendPhase::Queued => {
                self.finish_send(index, -libc::ECANCELED);
            }
            // A non-blocking send: it completes within the next enter.
            SendPhase::Sending => out.phase = SendPhase::Discarded,
            SendPhase::AwaitingRoom => {
                out.phase = SendPhase::Discarded;
                let cancel = opcode::AsyncCancel::new(Token { index, generation }.user_data()).build().user_data(CANCEL);
                self.push(cancel);
            }
            SendPhase::None | SendPhase::Discarded => {}
        }
    }

    /// Gives up on the sends of dropped sockets that lingered past their
    /// deadline, and forgets those that finished.
    fn expire_lingering(&mut self, now: Stamp) {
        while let Some(first) = self.lingering.front() {
            let Lingering { token, deadline } = *first;
            let (generation, slot) = &self.slots[token.index as usize];
            let live = *generation == token.generation && matches!(slot, Slot::Abandoned);
            if live && deadline > now {
                break;
            }
            self.lingering.pop_front();
            if live {
                self.discard(token.index);
            }
        }
    }

    /// Pushes the send ops of the turn's queued sends.
    fn push_queued_sends(&mut self) {
        // Taken out while pushing (a push may reap, which never queues).
        let mut queued = std::mem::take(&mut self.queued_sends);
        for &index in &queued {
            if self.outgoing[index as usize].phase == SendPhase::Queued {
                self.push_send(index);
            }
        }
        queued.clear();
        self.queued_sends = queued;
    }

    fn push_send(&mut self, index: u32) {
        let generation = self.slots[index as usize].0;
        let out = &mut self.outgoing[index as usize];
        out.phase = SendPhase::Sending;
        let rest = &out.data[out.sent..];
        // MSG_DONTWAIT: the op never waits in the kernel for room, so it
        // completes within the enter that submits it.
        let send = opcode::Send::new(types::Fd(out.fd), rest.as_ptr(), rest.len() as u32)
            .flags(libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL)
            .build()
            .user_data(Token { index, generation }.user_data());
        self.push(send);
        self.sends_in_ring.push(index);
    }

    /// The send ops about to be submitted whose completions no task waits
    /// for: they come within the enter, and must not end its wait.
    fn unawaited_sends(&self) -> usize {
        let unawaited = |&&index: &&u32| matches!(self.slots[index as usize].1, Slot::Waiting(None) | Slot::Abandoned);
        self.sends_in_ring.iter().filter(unawaited).count()
    }

    /// A completion for a send's slot: more to send, room to wait for, or
    /// done. Returns whether that woke a writer waiting for it.
    fn send_progress(&mut self, index: u32, result: i32) -> bool {
        let generation = self.slots[index as usize].0;
        let out = &mut self.outgoing[index as usize];
        match (out.phase, result) {
            // Nothing taken of a non-empty send: the socket is broken.
            (SendPhase::Sending, 0) => self.finish_send(index, -libc::EPIPE),
            (SendPhase::Sending, n) if n > 0 => {
                out.sent += n as usize;
                if out.sent < out.data.len() {
                    self.await_room(index, generation);
                    false
                } else {
                    self.finish_send(index, 0)
                }
            }
            (SendPhase::Sending, e) if e == -libc::EAGAIN || e == -libc::EINTR => {
                self.await_room(index, generation);
                false
            }
            // Room (or an error the send will report).
            (SendPhase::AwaitingRoom, mask) if mask >= 0 => {
                self.push_send(index);
                false
            }
            (SendPhase::Discarded, _) => self.finish_send(index, -libc::ECANCELED),
            (_, e) => self.finish_send(index, e.min(0)),
        }
    }

    fn await_room(&mut self, index: u32, generation: u32) {
        let out = &mut self.outgoing[index as usize];
        out.phase = SendPhase::AwaitingRoom;
        let poll = opcode::PollAdd::new(types::Fd(out.fd), libc::POLLOUT as u32)
            .build()
            .user_data(Token { index, generation }.user_data());
        self.push(poll);
    }

    /// Returns whether a writer waiting for the send was woken.
    fn finish_send(&mut self, index: u32, result: i32) -> bool {
        let out = &mut self.outgoing[index as usize];
        out.phase = SendPhase::None;
        let mut buffer = std::mem::take(&mut out.data);
        out.sent = 0;
        drop(out.owned_fd.take());
        if buffer.capacity() <= SEND_BUFFER_KEPT && self.spare_sends.len() < SPARE_SEND_BUFFERS {
            buffer.clear();
            self.spare_sends.push(buffer);
        }
        let slot = &mut self.slots[index as usize].1;
        match std::mem::replace(slot, Slot::Done(result)) {
            Slot::Waiting(Some(waker)) => {
                waker.wake();
                return true;
            }
            Slot::Waiting(None) | Slot::Done(_) | Slot::Received(_) => {}
            Slot::Abandoned | Slot::Free => {
                self.free_slot(index);
            }
        }
        false
    }

    /// A spent slot, free for the next op.
    fn free_slot(&mut self, index: u32) {
        self.slots[index as usize].1 = Slot::Free;
        self.free.push(index);
    }

    fn slot(&mut self) -> Token {
        let index = match self.free.pop() {
            Some(index) => index,
            None => {
                self.slots.push((0, Slot::Free));
                self.outgoing.push(Outgoing::new());
                (self.slots.len() - 1) as u32
            }
        };
        let (generation, slot) = &mut self.slots[index as usize];
        *generation = generation.wrapping_add(1);
        *slot = Slot::Waiting(None);
        Token { index, generation: *generation }
    }

    /// The op's result if it completed (the token is then spent), else
    /// `Pending` with the waker kept for its completion.
    pub fn poll_token(&mut self, token: Token, cx: &mut Context<'_>) -> Poll<i32> {
        let (generation, slot) = &mut self.slots[token.index as usize];
        debug_assert_eq!(*generation, token.generation, "a spent token");
        match slot {
            Slot::Done(result) => {
                let result = *result;
                self.free_slot(token.index);
                Poll::Ready(result)
            }
            // (Only `poll_readable` spends receives.)
            Slot::Received(received) => {
                let received = *received;
                self.free_slot(token.index);
                self.give_back(received);
                Poll::Ready(-libc::ECANCELED)
            }
            Slot::Waiting(waker) => {
                match waker {
                    Some(w) if w.will_wake(cx.waker()) => {}
                    _ => *waker = Some(cx.waker().clone()),
                }
                Poll::Pending
            }
            Slot::Free | Slot::Abandoned => Poll::Ready(-libc::ECANCELED),
        }
    }

    /// Gives up on an op: cancelled if still in the kernel.
    pub fn cancel(&mut self, token: Token) {
        let (generation, slot) = &mut self.slots[token.index as usize];
        if *generation != token.generation {
            return;
        }
        match slot {
            Slot::Waiting(_) => {
                *slot = Slot::Abandoned;
                let cancel = opcode::AsyncCancel::new(token.user_data()).build().user_data(CANCEL);
                self.push(cancel);
            }
            Slot::Done(_) => {
                self.free_slot(token.index);
            }
            Slot::Received(received) => {
                let received = *received;
                self.free_slot(token.index);
                self.give_back(received);
            }
            Slot::Free | Slot::Abandoned => {}
        }
    }

    /// Registers a timer firing at `deadline`; `id` 0 asks for a new one.
    pub fn set_timer(&mut self, deadline: Stamp, id: u64, waker: &Waker) -> u64 {
        let id = if id == 0 {
            self.next_timer += 1;
            self.next_timer
        } else {
            id
        };
        match self.timers.get_mut(&(deadline, id)) {
            Some(w) if w.will_wake(waker) => {}
            Some(w) => *w = waker.clone(),
            None => {
                self.timers.insert((deadline, id), waker.clone());
            }
        }
        id
    }

    pub fn remove_timer(&mut self, deadline: Stamp, id: u64) {
        self.timers.remove(&(deadline, id));
    }

    /// Submits what the turn's tasks queued, waits if `may_wait` (until a
    /// completion, a remote wake-up, or the nearest timer; spinning first if
    /// `may_spin` and the spin policy says so), then wakes the tasks whose
    /// ops completed or whose timers are due. Returns when the wait ended.
    pub(super) fn turn(&mut self, may_wait: bool, may_spin: bool) -> Stamp {
        self.push_queued_sends();
        // Waits after work are what the spin policy learns from.
        let measured_since = (may_wait && may_spin && self.spin.is_on()).then(Instant::now);
        let run_queue = &self.run_queue;
        let spin_until = measured_since.and_then(|now| self.spin.spin_until(now, || run_queue.crowded()));
        let spun_into_news = match spin_until {
            Some(until) => self.spin(until),
            None => false,
        };
        let may_wait = may_wait && !spun_into_news;
        let result = if may_wait {
            if let Some((&(deadline, _), _)) = self.timers.first_key_value() {
                self.arm(deadline);
            }
            // The turn's own sends complete in this enter: wait for one more.
            self.ring.submit_and_wait(1 + self.unawaited_sends())
        } else {
            let mut sq = self.ring.submission();
            sq.sync();
            let idle = sq.is_empty() && !sq.taskrun() && !sq.cq_overflow();
            drop(sq);
            if idle {
                Ok(0)
            } else {
                self.ring.submit()
            }
        };
        self.sends_in_ring.clear();
        if let Err(e) = result {
            match e.raw_os_error() {
                Some(libc::ETIME) | Some(libc::EINTR) | Some(libc::EBUSY) | Some(libc::EAGAIN) => {}
                _ => panic!("io_uring enter failed: {e}"),
            }
        }
        self.reap();
        let now = Stamp::read();
        if let Some(since) = measured_since {
            self.spin.waited(since.elapsed());
        }
        if !self.timers.is_empty() {
            self.fire_timers(now);
        }
        if !self.lingering.is_empty() {
            self.expire_lingering(now);
        }
        now
    }

    /// Makes sure a timeout op on the ring ends the coming wait by
    /// `deadline`: the one armed if it is due no later, else a new one (and
    /// the one it replaces removed).
    fn arm(&mut self, deadline: Stamp) {
        if self.armed.is_some_and(|armed| armed <= deadline) {
            return;
        }
        if self.armed.is_some() {
            self.push(opcode::TimeoutRemove::new(TIMER).build().user_data(CANCEL));
        }
        *self.armed_at = deadline.timespec();
        let timeout = opcode::Timeout::new(&*self.armed_at).flags(types::TimeoutFlags::ABS).build().user_data(TIMER);
        self.push(timeout);
        self.armed = Some(deadline);
    }

    /// Spins, until `until` or the nearest timer, until the kernel has a
    /// completion for this ring (or work that would make one: DEFER_TASKRUN's
    /// task work, flagged in the SQ ring), yielding the CPU to any other
    /// runnable thread between checks, and ending early when a step shows
    /// that another thread wanted the CPU. Returns whether something came;
    /// the caller then enters without waiting.
    fn spin(&mut self, mut until: Instant) -> bool {
        // The ops queued this turn must reach the kernel for anything to come.
        match self.ring.submit() {
            Ok(_) => self.sends_in_ring.clear(),
            Err(e) if matches!(e.raw_os_error(), Some(libc::EINTR) | Some(libc::EBUSY) | Some(libc::EAGAIN)) => {}
            Err(_) => return false,
        }
        // The sends just submitted have completed; only other news counts.
        if self.reap() {
            return true;
        }
        if let Some(((deadline, _), _)) = self.timers.first_key_value() {
            until = until.min(deadline.instant());
        }
        let mut step_started = Instant::now();
        loop {
            let mut sq = self.ring.submission();
            sq.sync();
            if sq.taskrun() || sq.cq_overflow() {
                return true;
            }
            drop(sq);
            if !self.ring.completion().is_empty() {
                return true;
            }
            let now = Instant::now();
            if now >= until || self.spin.step_took(now - step_started, now) {
                return false;
            }
            step_started = now;
            // SAFETY: a plain syscall with no arguments.
            unsafe { libc::sched_yield() };
        }
    }

    /// Takes every completion off the ring and wakes who waits for it.
    /// Returns whether any was news: more than the progress of sends no
    /// writer waits for.
    fn reap(&mut self) -> bool {
        let mut completed = std::mem::take(&mut self.completed);
        {
            let mut completion = self.ring.completion();
            completion.sync();
            completed.extend((&mut completion).map(|cqe| (cqe.user_data(), cqe.result(), cqe.flags())));
        }
        let mut news = false;
        let mut wake_up_read = false;
        for &(user_data, result, flags) in &completed {
            match user_data {
                WAKE_UP => wake_up_read = true,
                CANCEL => {}
                // Fired (or, removed, replaced by another armed since).
                TIMER => {
                    if result != -libc::ECANCELED {
                        self.armed = None;
                        news = true;
                    }
                }
                user_data => {
                    let index = (user_data & u64::from(u32::MAX)) as usize;
                    let generation = (user_data >> 32) as u32;
                    let Some((slot_generation, slot)) = self.slots.get_mut(index) else { continue };
                    if *slot_generation != generation {
                        continue;
                    }
                    if self.outgoing[index].phase != SendPhase::None {
                        // Only a send some writer waits for is news.
                        news |= self.send_progress(index as u32, result);
                        continue;
                    }
                    news = true;
                    let done = match io_uring::cqueue::buffer_select(flags) {
                        Some(buffer) => {
                            Slot::Received(Received { buffer, len: result.clamp(0, super::recv_buffers::SIZE as i32) as u16 })
                        }
                        None => Slot::Done(result),
                    };
                    match std::mem::replace(slot, done) {
                        Slot::Waiting(Some(waker)) => waker.wake(),
                        Slot::Waiting(None) | Slot::Done(_) | Slot::Received(_) => {}
                        // Its future is gone: nobody reads what came.
                        before @ (Slot::Abandoned | Slot::Free) => {
                            let done = std::mem::replace(slot, Slot::Free);
                            // A slot already spent is on the free list: a
                            // second completion must not put it there twice.
                            if matches!(before, Slot::Abandoned) {
                                self.free.push(index as u32);
                            }
                            if let Slot::Received(received) = done {
                                self.give_back(received);
                            }
                        }
                    }
                }
            }
        }
        completed.clear();
        self.completed = completed;
        if wake_up_read {
            self.listen_for_wake_ups();
        }
        news || wake_up_read
    }

    fn fire_timers(&mut self, now: Stamp) {
        while let Some(entry) = self.timers.first_entry() {
            if entry.key().0 > now {
                break;
            }
            entry.remove().wake();
        }
    }
}

impl Drop for Reactor {
    /// Sends what the last turn queued (a goodbye written just before the
    /// executor stopped), as far as the sockets take it without waiting.
    fn drop(&mut self) {
        self.push_queued_sends();
        let _ = self.ring.submit();
    }
}
