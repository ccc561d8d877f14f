//! One socket type for TCP and unix-domain connections.
//!
//! pglane talks to clients and servers over either; everything above this
//! module sees a [`Stream`] that implements `AsyncRead`/`AsyncWrite`. It owns
//! nothing but the socket, and adds no buffering of its own: the session keeps
//! its own buffers so it can forward bytes without copying them twice.
//!
//! A connection that negotiated TLS ([`tls`]) becomes [`Stream::Tls`], the
//! same type, so the session and the relay never know whether it did.

pub mod tls;

use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use crate::rt::net::{Peek, Socket};
use futures_lite::{AsyncRead, AsyncWrite};

use crate::config::ServerAddress;

/// The options pglane sets on every TCP connection it accepts from a client
/// or opens to a server, as PgBouncer does (its settings of the same names):
/// TCP_NODELAY always; SO_KEEPALIVE, and the keepalive timings that are not
/// 0 (0: the system's); TCP_USER_TIMEOUT and the socket buffer sizes if not 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TcpTuning {
    pub keepalive: bool,
    /// Seconds idle before the first probe (TCP_KEEPIDLE).
    pub keepidle: u32,
    /// Seconds between probes (TCP_KEEPINTVL).
    pub keepintvl: u32,
    /// Probes unanswered before the connection is dropped (TCP_KEEPCNT).
    pub keepcnt: u32,
    /// Milliseconds sent data may stay unacknowledged (TCP_USER_TIMEOUT).
    pub user_timeout_ms: u32,
    /// SO_SNDBUF and SO_RCVBUF, in bytes.
    pub socket_buffer: u32,
}

impl TcpTuning {
    /// Sets the options on a connected TCP socket.
    pub fn apply(&self, socket: &socket2::SockRef<'_>) -> io::Result<()> {
        socket.set_nodelay(true)?;
        if self.keepalive {
            let mut keepalive = socket2::TcpKeepalive::new();
            if self.keepidle > 0 {
                keepalive = keepalive.with_time(Duration::from_secs(self.keepidle.into()));
            }
            if self.keepintvl > 0 {
                keepalive = keepalive.with_interval(Duration::from_secs(self.keepintvl.into()));
            }
            if self.keepcnt > 0 {
                keepalive = keepalive.with_retries(self.keepcnt);
            }
            socket.set_tcp_keepalive(&keepalive)?;
        } else {
            socket.set_keepalive(false)?;
        }
        if self.user_timeout_ms > 0 {
            socket.set_tcp_user_timeout(Some(Duration::from_millis(self.user_timeout_ms.into())))?;
        }
        if self.socket_buffer > 0 {
            socket.set_send_buffer_size(self.socket_buffer as usize)?;
            socket.set_recv_buffer_size(self.socket_buffer as usize)?;
        }
        Ok(())
    }
}

/// TCP_DEFER_ACCEPT on a listening socket (PgBouncer's tcp_defer_accept):
/// a connection is handed to accept only once the client has sent something,
/// as every PostgreSQL client speaks first.
pub fn set_defer_accept(listener: &socket2::Socket, on: bool) -> io::Result<()> {
    // PgBouncer's value: the kernel takes it as seconds to wait for data.
    let seconds: libc::c_int = on.into();
    // SAFETY: setsockopt reads an int of the given size from a valid
    // pointer, on a descriptor `listener` keeps open.
    let done = unsafe {
        libc::setsockopt(
            listener.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_DEFER_ACCEPT,
            (&seconds as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if done < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

pub enum Stream {
    /// A TCP or unix-domain socket, as it is.
    Plain(Socket),
    /// TLS over a TCP stream, either way round: pglane as the server of a
    /// client, or as the client of a PostgreSQL server (see [`tls`]).
    Tls(Box<futures_rustls::TlsStream<Stream>>),
    /// No socket: only while a stream is being upgraded to TLS, and after
    /// that upgrade failed. Reads and writes fail.
    Detached,
}

impl Stream {
    /// Connects to a server within `timeout`; a TCP connection gets `tuning`.
    pub async fn connect(addr: &ServerAddress, timeout: Duration, tuning: &TcpTuning) -> io::Result<Stream> {
        let connect = async {
            match addr {
                ServerAddress::Tcp { host, port } => {
                    let socket = Socket::connect_tcp((host.as_str(), *port)).await?;
                    tuning.apply(&socket2::SockRef::from(&socket))?;
                    Ok(Stream::Plain(socket))
                }
                // A local unix-socket connect completes (or fails) at once.
                ServerAddress::Unix(path) => Ok(Stream::Plain(Socket::connect_unix(path)?)),
            }
        };
        crate::rt::with_timeout(timeout, connect)
            .await
            .unwrap_or_else(|| Err(io::Error::new(io::ErrorKind::TimedOut, format!("timed out connecting to {addr}"))))
    }

    /// Without blocking: is the peer still there and silent? A server
    /// connection resting in a pool must have nothing to say; if it has sent
    /// something (a FATAL before its backend exited) or closed, it is unusable.
    pub fn is_quiet_and_open(&self) -> bool {
        self.socket().is_some_and(|s| s.unread() == Peek::Nothing)
    }

    /// Without blocking: has the peer sent bytes nobody has read yet? Used
    /// right after an SSLRequest or its answer, when a well-behaved peer is
    /// waiting for us and anything already there was sent unencrypted to be
    /// read as if it came through TLS (CVE-2021-23214, CVE-2021-23222).
    pub fn has_unread_bytes(&self) -> bool {
        self.socket().is_some_and(|s| s.unread() == Peek::Bytes)
    }

    /// The socket under the stream (under its TLS, if it has some).
    fn socket(&self) -> Option<&Socket> {
        match self {
            Stream::Plain(socket) => Some(socket),
            Stream::Tls(tls) => tls.get_ref().0.socket(),
            Stream::Detached => None,
        }
    }

    /// Reads wait for readiness, never in a receive of the ring (see
    /// [`Socket::read_by_readiness`]).
    pub fn read_by_readiness(&mut self) {
        match self {
            Stream::Plain(socket) => socket.read_by_readiness(),
            Stream::Tls(tls) => tls.get_mut().0.read_by_readiness(),
            Stream::Detached => {}
        }
    }

    /// Waits until a read would not wait (see [`Socket::poll_readable`]). A
    /// TLS stream may hold decrypted bytes already: it is always ready.
    pub fn poll_readable(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self {
            Stream::Plain(socket) => socket.poll_readable(cx),
            Stream::Tls(_) | Stream::Detached => Poll::Ready(Ok(())),
        }
    }

    /// Closes the connection at once, dropping whatever was written and not
    /// sent yet (see [`Socket::abandon`]); the stream is detached after.
    pub fn abandon(&mut self) {
        match std::mem::replace(self, Stream::Detached) {
            Stream::Plain(socket) => socket.abandon(),
            Stream::Tls(mut tls) => tls.get_mut().0.abandon(),
            Stream::Detached => {}
        }
    }

    pub fn is_tls(&self) -> bool {
        matches!(self, Stream::Tls(_))
    }

    /// The process id of the peer of a unix-domain socket (SO_PEERCRED),
    /// as PgBouncer's SHOW CLIENTS gives it in `remote_pid`; 0 for a TCP
    /// peer, or if the socket cannot say.
    pub fn unix_peer_pid(&self) -> i32 {
        let mut cred = libc::ucred { pid: 0, uid: 0, gid: 0 };
        let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
        // SAFETY: getsockopt writes at most `len` bytes into `cred`, ours on
        // the stack, from the socket this stream owns; on a TCP socket it
        // fails and writes nothing.
        let rc = unsafe {
            libc::getsockopt(
                self.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_PEERCRED,
                (&mut cred as *mut libc::ucred).cast(),
                &mut len,
            )
        };
        if rc == 0 {
            cred.pid.max(0)
        } else {
            0
        }
    }

    /// Says no more will be written (the TCP or unix socket's write side
    /// shut, under TLS too), so the peer reads the end of the stream while
    /// this side can still read what it says before it closes.
    pub fn shut_writing(&self) -> io::Result<()> {
        // SAFETY: shutdown on the socket this stream owns, open while it lives.
        match unsafe { libc::shutdown(self.as_raw_fd(), libc::SHUT_WR) } {
            0 => Ok(()),
            _ => Err(io::Error::last_os_error()),
        }
    }

    /// This end's TCP address (SHOW SERVERS' local_addr); None over a unix
    /// socket.
    pub fn local_addr(&self) -> Option<std::net::SocketAddr> {
        match self {
            Stream::Plain(socket) => socket.local_addr().ok(),
            Stream::Tls(tls) => tls.get_ref().0.local_addr(),
            Stream::Detached => None,
        }
    }

    /// What SHOW CLIENTS / SHOW SERVERS put in their `tls` column, in
    /// PgBouncer's spirit ("TLSv1.3/TLS13_AES_256_GCM_SHA384"): the protocol
    /// version and cipher suite negotiated; `None` for a plaintext socket.
    pub fn tls_description(&self) -> Option<String> {
        let Stream::Tls(tls) = self else { return None };
        let (version, suite) = match &**tls {
            futures_rustls::TlsStream::Server(s) => {
                let c = s.get_ref().1;
                (c.protocol_version(), c.negotiated_cipher_suite())
            }
            futures_rustls::TlsStream::Client(s) => {
                let c = s.get_ref().1;
                (c.protocol_version(), c.negotiated_cipher_suite())
            }
        };
        let version = match version? {
            rustls::ProtocolVersion::TLSv1_3 => "TLSv1.3".to_owned(),
            rustls::ProtocolVersion::TLSv1_2 => "TLSv1.2".to_owned(),
            other => format!("{other:?}"),
        };
        Some(match suite {
            Some(suite) => format!("{version}/{:?}", suite.suite()),
            None => version,
        })
    }
}

fn detached() -> io::Error {
    io::Error::new(io::ErrorKind::NotConnected, "connection lost during a TLS upgrade")
}

impl AsRawFd for Stream {
    fn as_raw_fd(&self) -> RawFd {
        match self {
            Stream::Plain(s) => s.as_raw_fd(),
            Stream::Tls(s) => s.get_ref().0.as_raw_fd(),
            Stream::Detached => -1,
        }
    }
}

impl AsyncRead for Stream {
    #[inline]
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut [u8]) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Stream::Tls(s) => {
                // A write may have left encrypted bytes in rustls when the
                // socket was full, and the relay never flushes: they go out
                // while it waits to read, which it always does next.
                if let Poll::Ready(Err(e)) = Pin::new(&mut **s).poll_flush(cx) {
                    return Poll::Ready(Err(e));
                }
                Pin::new(&mut **s).poll_read(cx, buf)
            }
            Stream::Detached => Poll::Ready(Err(detached())),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Stream::Tls(s) => Pin::new(&mut **s).poll_write(cx, buf),
            Stream::Detached => Poll::Ready(Err(detached())),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_flush(cx),
            Stream::Tls(s) => Pin::new(&mut **s).poll_flush(cx),
            Stream::Detached => Poll::Ready(Err(detached())),
        }
    }

    fn poll_close(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_close(cx),
            Stream::Tls(s) => Pin::new(&mut **s).poll_close(cx),
            Stream::Detached => Poll::Ready(Ok(())),
        }
    }
}

/// Why reading a whole message failed.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error(transparent)]
    Io(#[from] io::Error),
    #[error(transparent)]
    Protocol(#[from] crate::protocol::ProtocolError),
    #[error("connection closed")]
    Closed,
}

/// Reads one whole tagged message, buffering in `buf` (which may hold bytes
/// read earlier and keeps what follows the message). For the login phases;
/// the relay forwards without reading whole messages.
pub async fn read_message(
    stream: &mut Stream,
    buf: &mut bytes::BytesMut,
    max_body: usize,
) -> Result<crate::protocol::frame::Message, ReadError> {
    use futures_lite::AsyncReadExt;
    loop {
        if let Some(m) = crate::protocol::frame::split_message(buf, max_body)? {
            return Ok(m);
        }
        let mut chunk = [0u8; 4096];
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return Err(ReadError::Closed);
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The options as the kernel then reports them on a real connection.
    #[test]
    fn tcp_tuning_sets_what_pgbouncers_settings_ask_for() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let socket = socket2::SockRef::from(&client);
        let tuning = TcpTuning {
            keepalive: true,
            keepidle: 61,
            keepintvl: 7,
            keepcnt: 4,
            user_timeout_ms: 12_000,
            socket_buffer: 131_072,
        };
        tuning.apply(&socket).unwrap();
        assert!(socket.nodelay().unwrap() && socket.keepalive().unwrap());
        assert_eq!(socket.keepalive_time().unwrap(), Duration::from_secs(61));
        assert_eq!(socket.keepalive_interval().unwrap(), Duration::from_secs(7));
        assert_eq!(socket.keepalive_retries().unwrap(), 4);
        assert_eq!(socket.tcp_user_timeout().unwrap(), Some(Duration::from_millis(12_000)));
        // Linux doubles what it is asked for, for its bookkeeping.
        assert!(socket.send_buffer_size().unwrap() >= 131_072 && socket.recv_buffer_size().unwrap() >= 131_072);
        // 0 leaves the system's value; keepalive off turns it off.
        let system_idle = socket2::SockRef::from(&std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap())
            .keepalive_time()
            .unwrap();
        TcpTuning { keepalive: true, ..TcpTuning::default() }.apply(&socket).unwrap();
        assert_eq!(socket.keepalive_time().unwrap(), Duration::from_secs(61), "0 changes nothing");
        TcpTuning::default().apply(&socket).unwrap();
        assert!(!socket.keepalive().unwrap());
        assert!(system_idle > Duration::ZERO);
        let deferred = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
        set_defer_accept(&deferred, true).unwrap();
    }
}
