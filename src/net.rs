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

use crate::rt::net::Socket;
use futures_lite::{AsyncRead, AsyncWrite};

use crate::config::ServerAddress;

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
    /// Connects to a server, TCP_NODELAY set, within `timeout`.
    pub async fn connect(addr: &ServerAddress, timeout: Duration) -> io::Result<Stream> {
        let connect = async {
            match addr {
                ServerAddress::Tcp { host, port } => {
                    let socket = Socket::connect_tcp((host.as_str(), *port)).await?;
                    socket.set_nodelay(true)?;
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
        let mut byte = 0u8;
        // SAFETY: recv into one valid byte of our own stack, on a socket we own.
        let n = unsafe { libc::recv(self.as_raw_fd(), (&mut byte as *mut u8).cast(), 1, libc::MSG_PEEK | libc::MSG_DONTWAIT) };
        n < 0 && io::Error::last_os_error().kind() == io::ErrorKind::WouldBlock
    }

    /// Without blocking: has the peer sent bytes nobody has read yet? Used
    /// right after an SSLRequest or its answer, when a well-behaved peer is
    /// waiting for us and anything already there was sent unencrypted to be
    /// read as if it came through TLS (CVE-2021-23214, CVE-2021-23222).
    pub fn has_unread_bytes(&self) -> bool {
        let mut byte = 0u8;
        // SAFETY: recv into one valid byte of our own stack, on a socket we own.
        let n = unsafe { libc::recv(self.as_raw_fd(), (&mut byte as *mut u8).cast(), 1, libc::MSG_PEEK | libc::MSG_DONTWAIT) };
        n > 0
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
