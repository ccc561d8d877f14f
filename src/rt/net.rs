//! Sockets on the reactor: a connected stream socket (TCP or unix) with
//! `AsyncRead`/`AsyncWrite`, a listener, and connecting.
//!
//! Reads are plain non-blocking `recv` calls while the kernel may have bytes
//! for them. Once a read found the socket drained (it returned less than
//! asked, or nothing), the next one waits in the ring instead: a receive
//! into a buffer the kernel picks when the bytes come (see
//! [`super::recv_buffers`]), which the socket reads from, then gives back.
//! A request/response exchange then costs no recv syscall at all: the
//! reply comes with its completion. Where the kernel has no buffer rings
//! (before 5.19), or they are all taken, the wait is a one-shot readiness
//! poll and a recv follows. Either checks the socket as it is armed, so
//! bytes that arrived in between are never missed.
//!
//! Writes up to [`SEND_QUEUE_LIMIT`] are not sent at once: they are copied
//! into a send the reactor queues for the end of the turn (see
//! [`super::reactor`] for why), and report success as they are queued. The
//! socket keeps at most one such send: a write while it is still queued joins
//! it, a write after it has gone out waits until the kernel took all of it,
//! so bytes leave in the order they were written. An error of a queued send
//! is the next write's (or close's) error; `poll_close` waits for the last
//! send before it shuts the socket, and a socket dropped with a send under
//! way keeps its descriptor open, in the reactor, until that send is done
//! (for [`super::reactor::SEND_LINGER`] at most). [`Socket::abandon`] drops
//! such a send instead and closes at once.
//!
//! A socket dropped while a poll is armed cancels it; its descriptor closes
//! at once, and the kernel lets go of the socket when the cancel completes.

use std::io;
use std::net::{SocketAddr, ToSocketAddrs};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::pin::Pin;
use std::task::{Context, Poll};

use futures_lite::{AsyncRead, AsyncWrite};

use super::executor::with_reactor;
use super::reactor::{ReadWait, Token, SEND_QUEUE_LIMIT};
use super::recv_buffers::Received;

/// A connected stream socket.
pub struct Socket {
    /// Taken only by `drop`, to hand to a send still under way.
    fd: std::mem::ManuallyDrop<OwnedFd>,
    /// Where the reading side is: idle, waiting in the ring, or holding
    /// bytes a receive put in a buffer of the ring.
    read: ReadState,
    write_wait: Option<Token>,
    /// The last queued send, until it is seen finished.
    send: Option<Token>,
    /// The last read did not show the socket drained: try recv first.
    maybe_readable: bool,
    /// Dropped with a send under way, the send goes on (else it is dropped).
    linger: bool,
    /// Reads wait for readiness, never in a receive (see
    /// [`Socket::read_by_readiness`]).
    by_readiness: bool,
}

/// The reading side of a [`Socket`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ReadState {
    Idle,
    /// A wait is in the ring ([`super::reactor::Reactor::wait_readable`]).
    Waiting(Token),
    /// A receive put these bytes in a buffer of the ring; this many of them
    /// were read. They are read before anything else.
    Filled(Received, u16),
}

/// Waits for `wait` if armed (`Ready` once it fired), else arms a poll for
/// `events` and waits for that.
fn poll_wait(wait: &mut Option<Token>, fd: RawFd, events: u32, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
    loop {
        match *wait {
            Some(token) => {
                let result = with_reactor(|r| r.poll_token(token, cx)).unwrap_or(Poll::Ready(-libc::ECANCELED));
                let Poll::Ready(result) = result else { return Poll::Pending };
                *wait = None;
                return Poll::Ready(match result {
                    r if r >= 0 => Ok(()),
                    r => Err(io::Error::from_raw_os_error(-r)),
                });
            }
            None => match with_reactor(|r| r.poll_fd(fd, events)) {
                Some(token) => *wait = Some(token),
                None => return Poll::Ready(Err(io::Error::other("socket used outside its rt executor"))),
            },
        }
    }
}

fn cancel(wait: &mut Option<Token>) {
    if let Some(token) = wait.take() {
        with_reactor(|r| r.cancel(token));
    }
}

impl Socket {
    /// Adopts a connected socket; it is made non-blocking.
    pub fn from_fd(fd: OwnedFd) -> io::Result<Socket> {
        set_nonblocking(fd.as_raw_fd())?;
        Ok(Socket {
            fd: std::mem::ManuallyDrop::new(fd),
            read: ReadState::Idle,
            write_wait: None,
            send: None,
            maybe_readable: true,
            linger: true,
            by_readiness: false,
        })
    }

    /// Connects over TCP to the first of `addr`'s addresses that answers.
    /// Name resolution, if `addr` needs it, blocks the thread.
    pub async fn connect_tcp(addr: impl ToSocketAddrs) -> io::Result<Socket> {
        let mut last = io::Error::new(io::ErrorKind::InvalidInput, "no address to connect to");
        for addr in addr.to_socket_addrs()? {
            match Socket::connect_one(addr).await {
                Ok(socket) => return Ok(socket),
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    async fn connect_one(addr: SocketAddr) -> io::Result<Socket> {
        let socket = socket2::Socket::new(
            socket2::Domain::for_address(addr),
            socket2::Type::STREAM.nonblocking().cloexec(),
            Some(socket2::Protocol::TCP),
        )?;
        let in_progress = match socket.connect(&addr.into()) {
            Ok(()) => false,
            Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => true,
            Err(e) => return Err(e),
        };
        let mut stream = Socket::from_fd(socket.into())?;
        if in_progress {
            let fd = stream.as_raw_fd();
            futures_lite::future::poll_fn(|cx| poll_wait(&mut stream.write_wait, fd, libc::POLLOUT as u32, cx)).await?;
            if let Some(e) = socket2::SockRef::from(&*stream.fd).take_error()? {
                return Err(e);
            }
        }
        Ok(stream)
    }

    /// Connects to a unix socket. A local connect completes or fails at
    /// once, so this does not wait.
    pub fn connect_unix(path: &std::path::Path) -> io::Result<Socket> {
        let std = std::os::unix::net::UnixStream::connect(path)?;
        Socket::from_fd(std.into())
    }

    /// Closes the socket at once, dropping what was written and not sent
    /// yet: for a connection whose peer must not get it (a server connection
    /// left mid-conversation, whose queued requests nobody will read the
    /// answers to), or may never read it.
    pub fn abandon(mut self) {
        self.linger = false;
    }

    /// Reads on this socket wait for readiness and then `recv`, never in a
    /// receive of the ring: for a socket whose unread bytes are checked
    /// from outside by peeking at its descriptor alone ([`peek`]), where
    /// bytes received into the ring would not show.
    pub fn read_by_readiness(&mut self) {
        self.by_readiness = true;
    }

    /// Without blocking: what the peer sent that nobody has read yet,
    /// counting what a receive took off the socket already, which a peek at
    /// the descriptor would not see.
    pub fn unread(&self) -> Peek {
        let received = match self.read {
            ReadState::Idle => false,
            ReadState::Waiting(token) => with_reactor(|r| r.has_received(token)).unwrap_or(false),
            ReadState::Filled(..) => true,
        };
        if received {
            Peek::Bytes
        } else {
            peek(self.fd.as_raw_fd())
        }
    }

    pub fn set_nodelay(&self, on: bool) -> io::Result<()> {
        socket2::SockRef::from(&*self.fd).set_nodelay(on)
    }

    /// This end's address, for TCP sockets.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        socket2::SockRef::from(&*self.fd)
            .local_addr()?
            .as_socket()
            .ok_or_else(|| io::Error::new(io::ErrorKind::Unsupported, "not an internet socket"))
    }

    /// The peer's address, for TCP sockets.
    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        socket2::SockRef::from(&*self.fd)
            .peer_addr()?
            .as_socket()
            .ok_or_else(|| io::Error::new(io::ErrorKind::Unsupported, "not an internet socket"))
    }
}

impl AsRawFd for Socket {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

impl std::os::fd::AsFd for Socket {
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl Socket {
    /// Waits until the last queued send is finished; its error if it failed.
    fn poll_sent(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let Some(token) = self.send else { return Poll::Ready(Ok(())) };
        let result = with_reactor(|r| r.poll_token(token, cx)).unwrap_or(Poll::Ready(-libc::ECANCELED));
        let Poll::Ready(result) = result else { return Poll::Pending };
        self.send = None;
        Poll::Ready(if result < 0 { Err(io::Error::from_raw_os_error(-result)) } else { Ok(()) })
    }

    /// Writes `buf` now, with `send(2)`, as much as the socket takes.
    fn poll_send_now(&mut self, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let fd = self.fd.as_raw_fd();
        loop {
            if self.write_wait.is_some() {
                std::task::ready!(poll_wait(&mut self.write_wait, fd, libc::POLLOUT as u32, cx))?;
            }
            // SAFETY: send from `buf`, valid for its length, on our socket.
            let n = unsafe { libc::send(fd, buf.as_ptr().cast(), buf.len(), libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL) };
            if n >= 0 {
                return Poll::Ready(Ok(n as usize));
            }
            let e = io::Error::last_os_error();
            match e.kind() {
                io::ErrorKind::WouldBlock => {
                    std::task::ready!(poll_wait(&mut self.write_wait, fd, libc::POLLOUT as u32, cx))?;
                }
                io::ErrorKind::Interrupted => {}
                _ => return Poll::Ready(Err(e)),
            }
        }
    }
}

impl Drop for Socket {
    fn drop(&mut self) {
        match std::mem::replace(&mut self.read, ReadState::Idle) {
            ReadState::Idle => {}
            ReadState::Waiting(token) => {
                with_reactor(|r| r.cancel(token));
            }
            ReadState::Filled(received, _) => {
                with_reactor(|r| r.give_back(received));
            }
        }
        cancel(&mut self.write_wait);
        // SAFETY: `fd` is not used again after this.
        let fd = unsafe { std::mem::ManuallyDrop::take(&mut self.fd) };
        if let Some(token) = self.send.take() {
            // Bytes still to send: the reactor keeps the descriptor open for
            // them, or until it has dropped them (off an rt thread there is
            // no reactor, and it closes here).
            match self.linger {
                true => with_reactor(|r| r.release_send(token, fd)),
                false => with_reactor(|r| r.abandon_send(token, fd)),
            };
        }
    }
}

impl Socket {
    /// Waits until a read would find bytes (or the end of the stream),
    /// without reading: a caller that needs a buffer to read into takes one
    /// only then.
    pub fn poll_readable(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if matches!(self.read, ReadState::Filled(..)) || (self.maybe_readable && self.read == ReadState::Idle) {
            return Poll::Ready(Ok(()));
        }
        self.wait_for_bytes(cx)
    }

    /// Waits in the ring for what the socket has next: bytes in a buffer of
    /// the ring (`ReadState::Filled`), or word that a recv would find something
    /// (`maybe_readable`).
    fn wait_for_bytes(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let fd = self.fd.as_raw_fd();
        let polled = with_reactor(|r| {
            let token = match self.read {
                ReadState::Waiting(token) => token,
                _ => r.wait_readable(fd, self.by_readiness),
            };
            self.read = ReadState::Waiting(token);
            r.poll_readable(token, cx)
        });
        let Some(polled) = polled else {
            return Poll::Ready(Err(io::Error::other("socket used outside its rt executor")));
        };
        let Poll::Ready(outcome) = polled else { return Poll::Pending };
        self.read = ReadState::Idle;
        match outcome {
            ReadWait::Bytes(received) => self.read = ReadState::Filled(received, 0),
            ReadWait::Readable => self.maybe_readable = true,
            ReadWait::Failed(e) => return Poll::Ready(Err(e)),
        }
        Poll::Ready(Ok(()))
    }

    /// Reads what a receive left in a buffer of the ring into `buf`, and
    /// gives the buffer back once all of it was read.
    fn read_filled(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let ReadState::Filled(received, taken) = &mut self.read else { return Ok(0) };
        let copied = with_reactor(|r| {
            let rest = &r.received(*received)[usize::from(*taken)..];
            let n = rest.len().min(buf.len());
            buf[..n].copy_from_slice(&rest[..n]);
            let all = n == rest.len();
            if all {
                r.give_back(*received);
            }
            (n, all)
        });
        let Some((n, all)) = copied else {
            return Err(io::Error::other("socket used outside its rt executor"));
        };
        *taken += n as u16;
        if all {
            let received = *received;
            self.read = ReadState::Idle;
            // A full buffer: more may be waiting in the socket.
            self.maybe_readable = received.len as usize == super::recv_buffers::SIZE;
        }
        Ok(n)
    }
}

impl AsyncRead for Socket {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut [u8]) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let fd = this.fd.as_raw_fd();
        loop {
            if matches!(this.read, ReadState::Filled(..)) && !buf.is_empty() {
                return Poll::Ready(this.read_filled(buf));
            }
            if matches!(this.read, ReadState::Waiting(_)) || !this.maybe_readable {
                std::task::ready!(this.wait_for_bytes(cx))?;
                continue;
            }
            // SAFETY: recv into `buf`, valid for its length, on our socket.
            let n = unsafe { libc::recv(fd, buf.as_mut_ptr().cast(), buf.len(), libc::MSG_DONTWAIT) };
            if n >= 0 {
                let n = n as usize;
                this.maybe_readable = n == buf.len() && n > 0;
                return Poll::Ready(Ok(n));
            }
            let e = io::Error::last_os_error();
            match e.kind() {
                io::ErrorKind::WouldBlock => this.maybe_readable = false,
                io::ErrorKind::Interrupted => {}
                _ => return Poll::Ready(Err(e)),
            }
        }
    }
}

impl AsyncWrite for Socket {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if buf.is_empty() {
            return Poll::Ready(Ok(0));
        }
        if let Some(token) = this.send {
            if with_reactor(|r| r.append_send(token, buf)) == Some(true) {
                return Poll::Ready(Ok(buf.len()));
            }
            std::task::ready!(this.poll_sent(cx))?;
        }
        if buf.len() > SEND_QUEUE_LIMIT {
            return this.poll_send_now(cx, buf);
        }
        match with_reactor(|r| r.queue_send(this.fd.as_raw_fd(), buf)) {
            Some(token) => {
                this.send = Some(token);
                Poll::Ready(Ok(buf.len()))
            }
            // Not on an rt thread: there is no turn to wait for.
            None => this.poll_send_now(cx, buf),
        }
    }

    /// Nothing to do: a queued send goes out at the end of the turn by
    /// itself. (Waiting here for it to finish would wake the writer once
    /// more per write, for nothing.)
    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    /// Shuts the writing half, after the last queued send: the peer reads
    /// what was written, then end-of-file.
    fn poll_close(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        std::task::ready!(this.poll_sent(cx))?;
        // SAFETY: shutdown on our own socket.
        let r = unsafe { libc::shutdown(this.fd.as_raw_fd(), libc::SHUT_WR) };
        if r < 0 {
            let e = io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::ENOTCONN) {
                return Poll::Ready(Err(e));
            }
        }
        Poll::Ready(Ok(()))
    }
}

/// A listening socket (TCP or unix: accept does not care).
pub struct Listener {
    fd: OwnedFd,
    wait: std::cell::Cell<Option<Token>>,
}

impl Listener {
    /// Adopts a bound, listening socket; it is made non-blocking.
    pub fn from_fd(fd: OwnedFd) -> io::Result<Listener> {
        set_nonblocking(fd.as_raw_fd())?;
        Ok(Listener { fd, wait: std::cell::Cell::new(None) })
    }

    /// The next connection: its descriptor (non-blocking, close-on-exec).
    pub async fn accept(&self) -> io::Result<OwnedFd> {
        let fd = self.fd.as_raw_fd();
        futures_lite::future::poll_fn(|cx| loop {
            if self.wait.get().is_some() {
                std::task::ready!(self.wait_readable(fd, cx))?;
            }
            // SAFETY: accept4 on our listening socket, not asking for the address.
            let conn = unsafe {
                libc::accept4(fd, std::ptr::null_mut(), std::ptr::null_mut(), libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC)
            };
            if conn >= 0 {
                // SAFETY: a new descriptor, ours from here on.
                return Poll::Ready(Ok(unsafe { OwnedFd::from_raw_fd(conn) }));
            }
            let e = io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::EAGAIN) => std::task::ready!(self.wait_readable(fd, cx))?,
                Some(libc::EINTR) | Some(libc::ECONNABORTED) => {}
                _ => return Poll::Ready(Err(e)),
            }
        })
        .await
    }
}

impl Listener {
    fn wait_readable(&self, fd: RawFd, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let mut wait = self.wait.take();
        let ready = poll_wait(&mut wait, fd, libc::POLLIN as u32, cx);
        self.wait.set(wait);
        ready
    }
}

impl AsRawFd for Listener {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        cancel(self.wait.get_mut());
    }
}

/// What a socket has that nobody has read, by one non-blocking peek.
#[derive(Debug, PartialEq, Eq)]
pub enum Peek {
    /// Nothing yet: it would block.
    Nothing,
    Bytes,
    /// The end of the stream, or an error.
    Closed,
}

/// Peeks at socket `fd` (which must be open), not waiting: what it has
/// that nobody has read. Bytes a [`Socket`]'s receive took already are
/// not seen ([`Socket::unread`] sees them).
pub fn peek(fd: RawFd) -> Peek {
    let mut byte = 0u8;
    // SAFETY: recv of one byte into our own stack, peeking, on an open socket.
    let n = unsafe { libc::recv(fd, (&mut byte as *mut u8).cast(), 1, libc::MSG_PEEK | libc::MSG_DONTWAIT) };
    match n {
        n if n > 0 => Peek::Bytes,
        0 => Peek::Closed,
        _ if io::Error::last_os_error().kind() == io::ErrorKind::WouldBlock => Peek::Nothing,
        _ => Peek::Closed,
    }
}

fn set_nonblocking(fd: RawFd) -> io::Result<()> {
    // SAFETY: fcntl on a descriptor the caller owns.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    if flags < 0 {
        return Err(io::Error::last_os_error());
    }
    if flags & libc::O_NONBLOCK == 0 {
        // SAFETY: as above.
        if unsafe { libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) } < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rt::{block_on, sleep, spawn_local};
    use futures_lite::{AsyncReadExt, AsyncWriteExt};
    use std::time::{Duration, Instant};

    fn tcp_listener() -> (Listener, SocketAddr) {
        let std = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = std.local_addr().unwrap();
        (Listener::from_fd(std.into()).unwrap(), addr)
    }

    #[test]
    fn an_echo_over_tcp_carries_every_byte_both_ways() {
        block_on(async {
            let (listener, addr) = tcp_listener();
            let server = spawn_local(async move {
                let mut conn = Socket::from_fd(listener.accept().await.unwrap()).unwrap();
                let mut buf = vec![0u8; 4096];
                loop {
                    let n = conn.read(&mut buf).await.unwrap();
                    if n == 0 {
                        return;
                    }
                    conn.write_all(&buf[..n]).await.unwrap();
                }
            });
            let mut client = Socket::connect_tcp(addr).await.unwrap();
            client.set_nodelay(true).unwrap();
            // More than the socket buffers hold, so writes must wait for room.
            let sent: Vec<u8> = (0..8 * 1024 * 1024u32).map(|i| (i % 251) as u8).collect();
            let mut reader_side = Socket::from_fd(client.fd.try_clone().unwrap()).unwrap();
            let expected = sent.clone();
            let reader = spawn_local(async move {
                let mut got = Vec::new();
                reader_side.read_to_end(&mut got).await.unwrap();
                got
            });
            client.write_all(&sent).await.unwrap();
            client.close().await.unwrap();
            let got = reader.await;
            server.await;
            assert_eq!(got.len(), expected.len());
            assert!(got == expected);
        })
        .unwrap();
    }

    /// `total` bytes written in `chunk`-byte writes (each queued, not sent
    /// at once) to a peer that starts reading only after `delay`, on another
    /// thread; returns what the peer read up to end-of-file.
    fn small_writes_to_a_late_reader(total: usize, chunk: usize, delay: Duration, close: bool) -> (Vec<u8>, Vec<u8>) {
        let (a, b) = std::os::unix::net::UnixStream::pair().unwrap();
        let reader = std::thread::spawn(move || {
            std::thread::sleep(delay);
            let mut got = Vec::new();
            std::io::Read::read_to_end(&mut &b, &mut got).unwrap();
            got
        });
        let sent: Vec<u8> = (0..total as u32).map(|i| (i % 251) as u8).collect();
        let to_send = sent.clone();
        block_on(async move {
            let mut a = Socket::from_fd(a.into()).unwrap();
            for piece in to_send.chunks(chunk) {
                a.write_all(piece).await.unwrap();
            }
            if close {
                a.close().await.unwrap();
            }
            // Dropped perhaps with its last send still queued or waiting for
            // room: the executor runs on until the reader saw end-of-file.
            drop(a);
            let started = Instant::now();
            while !reader.is_finished() && started.elapsed() < Duration::from_secs(30) {
                sleep(Duration::from_millis(1)).await;
            }
            reader
        })
        .unwrap()
        .join()
        .map(|got| (sent, got))
        .unwrap()
    }

    #[test]
    fn small_writes_arrive_whole_and_in_order_through_a_full_socket() {
        // Far more than the socket buffers hold: queued sends find the socket
        // full, wait for room in the reactor, and hold later writes back.
        let (sent, got) = small_writes_to_a_late_reader(4 << 20, 1000, Duration::from_millis(30), true);
        assert_eq!(got.len(), sent.len());
        assert!(got == sent, "bytes reordered or lost");
    }

    #[test]
    fn a_socket_dropped_with_a_send_under_way_still_delivers_it() {
        // No close: the socket goes while its last send waits for room; the
        // reactor keeps the descriptor open until that send is done.
        let (sent, got) = small_writes_to_a_late_reader(2 << 20, 60_000, Duration::from_millis(30), false);
        assert_eq!(got.len(), sent.len());
        assert!(got == sent, "bytes reordered or lost");
        // The common case: a short reply written and the socket dropped at once.
        let (sent, got) = small_writes_to_a_late_reader(5, 5, Duration::ZERO, false);
        assert_eq!(got, sent);
    }

    #[test]
    fn a_send_to_a_full_socket_never_holds_up_the_next_wait() {
        // The wait after a turn asks for one completion more than the sends
        // it carries that no writer waits for, trusting that each such send
        // completes within the enter (MSG_DONTWAIT). If one waited in the
        // kernel for room instead, the read below would not end the wait.
        let (a, b) = std::os::unix::net::UnixStream::pair().unwrap();
        let (c, d) = std::os::unix::net::UnixStream::pair().unwrap();
        let fd = a.as_raw_fd();
        let chunk = [7u8; 4096];
        // SAFETY: send from a valid buffer on a socket we own, until it is full.
        while unsafe { libc::send(fd, chunk.as_ptr().cast(), chunk.len(), libc::MSG_DONTWAIT) } > 0 {}
        let writer = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            std::io::Write::write_all(&mut &d, b"wake").unwrap();
            d
        });
        let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = done.clone();
        // b reads nothing unless the executor is stuck: then, after 5 s, it
        // drains the socket so that the stuck send completes and the test
        // fails instead of hanging.
        let watchdog = std::thread::spawn(move || {
            let started = Instant::now();
            while !flag.load(std::sync::atomic::Ordering::SeqCst) && started.elapsed() < Duration::from_secs(5) {
                std::thread::sleep(Duration::from_millis(5));
            }
            let in_time = flag.load(std::sync::atomic::Ordering::SeqCst);
            if !in_time {
                let mut sink = vec![0u8; 1 << 20];
                let _ = std::io::Read::read(&mut &b, &mut sink);
            }
            in_time
        });
        block_on(async move {
            let mut a = Socket::from_fd(a.into()).unwrap();
            let mut c = Socket::from_fd(c.into()).unwrap();
            // Queued, and handed over: nobody waits for this send.
            a.write_all(b"no room for this").await.unwrap();
            let mut buf = [0u8; 8];
            let n = c.read(&mut buf).await.unwrap();
            assert_eq!(&buf[..n], b"wake");
            done.store(true, std::sync::atomic::Ordering::SeqCst);
            drop(a);
        })
        .unwrap();
        assert!(watchdog.join().unwrap(), "the read was held up by a send waiting for room");
        drop(writer.join());
    }

    /// A unix socket pair whose first end's buffer is full: what is written
    /// to it next waits for room.
    fn full_pair() -> (std::os::unix::net::UnixStream, std::os::unix::net::UnixStream, usize) {
        let (a, b) = std::os::unix::net::UnixStream::pair().unwrap();
        let chunk = [7u8; 4096];
        let mut filled = 0;
        loop {
            // SAFETY: send from a valid buffer on a socket we own, until it is full.
            let n = unsafe { libc::send(a.as_raw_fd(), chunk.as_ptr().cast(), chunk.len(), libc::MSG_DONTWAIT) };
            if n <= 0 {
                return (a, b, filled);
            }
            filled += n as usize;
        }
    }

    /// Whether `peer`'s other end has closed (it may still hold unread bytes).
    fn peer_closed(peer: &std::os::unix::net::UnixStream) -> bool {
        let mut poll = libc::pollfd { fd: peer.as_raw_fd(), events: libc::POLLRDHUP, revents: 0 };
        // SAFETY: poll on one valid pollfd, without waiting.
        unsafe { libc::poll(&mut poll, 1, 0) };
        poll.revents & (libc::POLLRDHUP | libc::POLLHUP) != 0
    }

    /// Drops (or abandons) a socket whose last send waits for room its peer
    /// never makes; returns how long the peer waited to see it close (up to
    /// `limit`), and the bytes it then read before end-of-file.
    fn close_with_a_send_waiting_for_room(abandon: bool, limit: Duration) -> (Duration, usize, usize) {
        let (a, b, filled) = full_pair();
        let (waited, read) = block_on(async move {
            let mut a = Socket::from_fd(a.into()).unwrap();
            a.write_all(b"never taken").await.unwrap();
            // A turn: the send finds no room and waits for it in the ring.
            sleep(Duration::from_millis(20)).await;
            let started = Instant::now();
            match abandon {
                true => a.abandon(),
                false => drop(a),
            }
            while !peer_closed(&b) && started.elapsed() < limit {
                sleep(Duration::from_millis(5)).await;
            }
            let waited = started.elapsed();
            b.set_nonblocking(true).unwrap();
            let mut got = Vec::new();
            let _ = std::io::Read::read_to_end(&mut &b, &mut got);
            (waited, got.len())
        })
        .unwrap();
        (waited, read, filled)
    }

    #[test]
    fn a_socket_abandoned_with_a_send_waiting_for_room_closes_at_once_without_it() {
        let (waited, read, filled) = close_with_a_send_waiting_for_room(true, Duration::from_secs(30));
        assert!(waited < Duration::from_secs(1), "the peer saw the close after {waited:?}");
        assert_eq!(read, filled, "the abandoned bytes were not dropped");
    }

    #[test]
    fn a_socket_dropped_with_a_send_its_peer_never_takes_closes_after_the_linger() {
        let (waited, read, filled) = close_with_a_send_waiting_for_room(false, Duration::from_secs(30));
        let linger = super::super::reactor::SEND_LINGER;
        assert!(waited >= linger - Duration::from_millis(50), "closed before the linger was over: {waited:?}");
        assert!(waited < linger + Duration::from_secs(2), "the descriptor stayed open {waited:?}");
        assert_eq!(read, filled);
    }

    #[test]
    fn a_send_that_fails_is_a_later_writes_error() {
        block_on(async {
            let (a, b) = std::os::unix::net::UnixStream::pair().unwrap();
            let mut a = Socket::from_fd(a.into()).unwrap();
            drop(b);
            // The first write is only queued; its failure shows at the next.
            let mut error = None;
            for _ in 0..100 {
                if let Err(e) = a.write_all(b"anyone there?").await {
                    error = Some(e);
                    break;
                }
                sleep(Duration::from_millis(1)).await;
            }
            let e = error.expect("writes to a closed peer kept succeeding");
            assert!(matches!(e.kind(), io::ErrorKind::BrokenPipe | io::ErrorKind::ConnectionReset), "{e:?}");
        })
        .unwrap();
    }

    /// Two connected unix sockets on the reactor.
    fn socket_pair() -> (Socket, Socket) {
        let (a, b) = std::os::unix::net::UnixStream::pair().unwrap();
        (Socket::from_fd(a.into()).unwrap(), Socket::from_fd(b.into()).unwrap())
    }

    #[test]
    fn a_read_waits_for_bytes_that_come_later() {
        block_on(async {
            let (mut a, mut b) = socket_pair();
            let writer = spawn_local(async move {
                sleep(Duration::from_millis(20)).await;
                b.write_all(b"late").await.unwrap();
                b
            });
            let mut buf = [0u8; 16];
            let n = a.read(&mut buf).await.unwrap();
            assert_eq!(&buf[..n], b"late");
            drop(writer.await);
            assert_eq!(a.read(&mut buf).await.unwrap(), 0, "end of file once the peer is gone");
        })
        .unwrap();
    }

    #[test]
    fn a_spinning_executor_still_ends_its_spin_for_timers_io_and_other_threads() {
        // Each wait below is a few milliseconds; the spin allowed is 5 s. The
        // executor must notice each event while spinning, not after it.
        let limit = Duration::from_secs(2);
        block_on(async move {
            crate::rt::spin_before_park(Duration::from_secs(5));
            let started = Instant::now();
            sleep(Duration::from_millis(5)).await;
            assert!(started.elapsed() < limit, "a timer waited for the spin: {:?}", started.elapsed());

            let (a, b) = std::os::unix::net::UnixStream::pair().unwrap();
            let mut a = Socket::from_fd(a.into()).unwrap();
            let writer = std::thread::spawn(move || {
                let mut b = b;
                std::thread::sleep(Duration::from_millis(5));
                std::io::Write::write_all(&mut b, b"from another thread").unwrap();
                b
            });
            let started = Instant::now();
            let mut buf = [0u8; 32];
            let n = a.read(&mut buf).await.unwrap();
            assert_eq!(&buf[..n], b"from another thread");
            assert!(started.elapsed() < limit, "a read waited for the spin: {:?}", started.elapsed());
            drop(writer.join());

            let started = Instant::now();
            let answer = crate::rt::spawn_blocking(|| {
                std::thread::sleep(Duration::from_millis(5));
                42
            })
            .await;
            assert_eq!(answer, 42);
            assert!(started.elapsed() < limit, "a wake-up from another thread waited for the spin: {:?}", started.elapsed());
        })
        .unwrap();
    }

    #[test]
    fn a_spinning_executor_ends_its_spin_for_a_writer_its_send_woke() {
        // The second write waits for the first one's send; that send
        // completes inside the spin's own submit, and the writer it woke
        // must run then, not when a 5 s spin runs out.
        let (a, b) = std::os::unix::net::UnixStream::pair().unwrap();
        let reader = std::thread::spawn(move || {
            let mut got = Vec::new();
            std::io::Read::read_to_end(&mut &b, &mut got).unwrap();
            got.len()
        });
        let limit = Duration::from_secs(2);
        block_on(async move {
            crate::rt::spin_before_park(Duration::from_secs(5));
            // A timer, so that a writer left runnable through a wait ends
            // this test as a failure at 3 s instead of a hang.
            let _tick = spawn_local(sleep(Duration::from_secs(3)));
            let mut a = Socket::from_fd(a.into()).unwrap();
            let started = Instant::now();
            a.write_all(&[1u8; 60_000]).await.unwrap();
            a.write_all(&[2u8; 60_000]).await.unwrap();
            assert!(started.elapsed() < limit, "the second write waited for the spin: {:?}", started.elapsed());
            a.close().await.unwrap();
        })
        .unwrap();
        assert_eq!(reader.join().unwrap(), 120_000);
    }

    #[test]
    fn a_socket_dropped_while_waiting_closes_for_its_peer() {
        block_on(async {
            let (a, b) = std::os::unix::net::UnixStream::pair().unwrap();
            let mut b = Socket::from_fd(b.into()).unwrap();
            let waiting = spawn_local(async move {
                let mut a = Socket::from_fd(a.into()).unwrap();
                let mut buf = [0u8; 1];
                let _ = a.read(&mut buf).await;
            });
            sleep(Duration::from_millis(10)).await;
            drop(waiting); // cancels the read, drops the socket
            let mut buf = [0u8; 1];
            let n = crate::rt::with_timeout(Duration::from_secs(30), b.read(&mut buf)).await;
            assert!(matches!(n, Some(Ok(0))), "the peer sees the close, got {n:?}");
        })
        .unwrap();
    }

    #[test]
    fn connecting_to_a_closed_port_fails() {
        block_on(async {
            let (listener, addr) = tcp_listener();
            drop(listener);
            assert!(Socket::connect_tcp(addr).await.is_err());
        })
        .unwrap();
    }

    /// Waits, without reading, until `socket`'s wait in the ring came to
    /// something.
    async fn readable(socket: &mut Socket) {
        futures_lite::future::poll_fn(|cx| socket.poll_readable(cx)).await.unwrap();
    }

    #[test]
    fn a_reply_that_came_while_waiting_is_read_from_the_ring_in_order_in_any_piece_size() {
        block_on(async {
            let (mut a, mut b) = socket_pair();
            // Drained first, so that the next read waits in the ring.
            let mut buf = vec![0u8; 1000];
            b.write_all(b"x").await.unwrap();
            assert_eq!(a.read(&mut buf).await.unwrap(), 1);
            // More than one buffer of the ring, read 1000 bytes at a time.
            let sent: Vec<u8> = (0..super::super::recv_buffers::SIZE * 3 + 77).map(|i| (i % 251) as u8).collect();
            let expected = sent.clone();
            let writer = spawn_local(async move {
                sleep(Duration::from_millis(20)).await;
                b.write_all(&sent).await.unwrap();
                b
            });
            readable(&mut a).await;
            assert!(matches!(a.read, ReadState::Filled(..)), "the bytes came with the receive's completion");
            let mut got = Vec::new();
            while got.len() < expected.len() {
                let n = a.read(&mut buf).await.unwrap();
                assert!(n > 0);
                got.extend_from_slice(&buf[..n]);
            }
            assert!(got == expected, "every byte, in order");
            drop(writer.await);
            assert_eq!(a.read(&mut buf).await.unwrap(), 0, "end of file once the peer is gone");
        })
        .unwrap();
    }

    #[test]
    fn bytes_a_receive_took_off_the_socket_still_count_as_unread() {
        block_on(async {
            let (mut a, mut b) = socket_pair();
            let mut buf = [0u8; 1];
            b.write_all(b"Sx").await.unwrap();
            // The first read takes the socket's bytes; the second waits in the ring.
            let mut two = [0u8; 2];
            assert_eq!(a.read(&mut two).await.unwrap(), 2);
            assert_eq!(a.unread(), Peek::Nothing);
            let writer = spawn_local(async move {
                sleep(Duration::from_millis(20)).await;
                b.write_all(b"S+unencrypted").await.unwrap();
                b
            });
            readable(&mut a).await;
            assert_eq!(peek(a.as_raw_fd()), Peek::Nothing, "the receive emptied the socket");
            assert_eq!(a.unread(), Peek::Bytes);
            assert_eq!(a.read(&mut buf).await.unwrap(), 1);
            assert_eq!(a.unread(), Peek::Bytes, "what the 'S' came with is unread (CVE-2021-23222)");
            let mut rest = [0u8; 64];
            assert_eq!(a.read(&mut rest).await.unwrap(), 12);
            assert_eq!(a.unread(), Peek::Nothing);
            drop(writer.await);
            assert_eq!(a.unread(), Peek::Closed);
        })
        .unwrap();
    }

    #[test]
    fn a_socket_dropped_with_bytes_in_the_ring_gives_its_buffer_back() {
        block_on(async {
            // Three times as many sockets as the ring has buffers, each
            // dropped holding one: the last still receives into the ring.
            for _ in 0..3 * super::super::recv_buffers::COUNT {
                let (mut a, mut b) = socket_pair();
                a.maybe_readable = false;
                let writer = spawn_local(async move {
                    b.write_all(b"unread").await.unwrap();
                    b
                });
                readable(&mut a).await;
                assert!(matches!(a.read, ReadState::Filled(..)), "a buffer of the ring was free for these bytes");
                drop(a);
                drop(writer.await);
            }
        })
        .unwrap();
    }

    #[test]
    fn a_socket_read_by_readiness_leaves_its_bytes_in_the_socket_until_read() {
        block_on(async {
            let (mut a, mut b) = socket_pair();
            a.read_by_readiness();
            a.maybe_readable = false;
            let writer = spawn_local(async move {
                sleep(Duration::from_millis(20)).await;
                b.write_all(b"hello").await.unwrap();
                b
            });
            readable(&mut a).await;
            assert_eq!(peek(a.as_raw_fd()), Peek::Bytes, "a peek at the descriptor sees them");
            let mut buf = [0u8; 16];
            assert_eq!(a.read(&mut buf).await.unwrap(), 5);
            drop(writer.await);
        })
        .unwrap();
    }

    #[test]
    fn a_read_gets_its_bytes_by_recv_when_every_buffer_of_the_ring_is_taken() {
        block_on(async {
            let mut held = Vec::new();
            for i in 0..=super::super::recv_buffers::COUNT {
                let (mut a, mut b) = socket_pair();
                a.maybe_readable = false;
                b.write_all(format!("socket {i}").as_bytes()).await.unwrap();
                readable(&mut a).await;
                held.push((a, b));
            }
            let last = held.last_mut().unwrap();
            assert_eq!(last.0.read, ReadState::Idle, "no buffer was left: the wait said only that bytes are there");
            let mut buf = [0u8; 64];
            for (i, (a, _)) in held.iter_mut().enumerate() {
                let n = a.read(&mut buf).await.unwrap();
                assert_eq!(&buf[..n], format!("socket {i}").as_bytes());
            }
        })
        .unwrap();
    }
}
