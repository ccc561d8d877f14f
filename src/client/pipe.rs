//! One direction of a relayed connection: bytes read from one socket, scanned
//! message by message, written to the other socket from the same buffer.
//!
//! The buffer is a plain `Vec<u8>` window (`start..end`): reads land after
//! `end`, the scanned prefix `start..start+scanned` is what may be written out,
//! and nothing is copied except when the window is compacted to the front.
//! It grows only when one message that must be inspected whole is larger than
//! the buffer, up to the configured maximum message size.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use futures_lite::{AsyncRead, AsyncWrite};

use crate::protocol::frame::{Flow, Scanner, HEADER_LEN};
use crate::protocol::ProtocolError;

/// Initial buffer size per direction.
const INITIAL: usize = 16 * 1024;

pub struct Pipe {
    buf: Vec<u8>,
    start: usize,
    end: usize,
    /// Bytes after `start` already scanned, ready to write.
    scanned: usize,
    scanner: Scanner,
    /// The largest size the buffer may grow to.
    limit: usize,
    /// The reading side reached end of stream.
    pub eof: bool,
}

impl Pipe {
    pub fn new(max_message: usize) -> Pipe {
        Pipe {
            buf: vec![0; INITIAL],
            start: 0,
            end: 0,
            scanned: 0,
            scanner: Scanner::default(),
            limit: max_message.saturating_add(HEADER_LEN).max(INITIAL),
            eof: false,
        }
    }

    /// Bytes read but not yet scanned.
    pub fn unscanned(&self) -> &[u8] {
        &self.buf[self.start + self.scanned..self.end]
    }

    /// Bytes scanned and waiting to be written.
    pub fn has_output(&self) -> bool {
        self.scanned > 0
    }

    /// Between messages on the output side: an injected message would not
    /// land in the middle of a forwarded one.
    pub fn at_boundary(&self) -> bool {
        self.scanned == 0 && self.scanner.at_boundary()
    }

    /// Reads what the socket has into free space. `Ready(Ok(0))` means end of
    /// stream; `Pending` also when there is no room until output drains.
    pub fn poll_fill<S: AsyncRead + Unpin>(&mut self, cx: &mut Context<'_>, stream: &mut S) -> Poll<io::Result<usize>> {
        if !self.make_room() {
            return Poll::Pending;
        }
        let n = std::task::ready!(Pin::new(stream).poll_read(cx, &mut self.buf[self.end..]))?;
        self.end += n;
        if n == 0 {
            self.eof = true;
        }
        Poll::Ready(Ok(n))
    }

    fn make_room(&mut self) -> bool {
        if self.end < self.buf.len() {
            return true;
        }
        if self.start > 0 {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
            return true;
        }
        if self.scanned == 0 && self.buf.len() < self.limit {
            // Full of one message that must be seen whole: grow.
            let size = (self.buf.len() * 2).min(self.limit);
            self.buf.resize(size, 0);
            return true;
        }
        false
    }

    /// Scans newly read bytes; see [`Scanner::scan`].
    pub fn scan(
        &mut self,
        max_body: usize,
        needs_body: impl Fn(u8) -> bool,
        visit: impl FnMut(u8, &[u8]) -> Flow,
    ) -> Result<(), ProtocolError> {
        let from = self.start + self.scanned;
        let n = self.scanner.scan(&self.buf[from..self.end], max_body, needs_body, visit)?;
        self.scanned += n;
        Ok(())
    }

    /// Writes scanned bytes to `stream`. `Ready(Ok(true))` if it wrote something.
    pub fn poll_flush<S: AsyncWrite + Unpin>(&mut self, cx: &mut Context<'_>, stream: &mut S) -> Poll<io::Result<bool>> {
        if self.scanned == 0 {
            return Poll::Ready(Ok(false));
        }
        let n = std::task::ready!(Pin::new(stream).poll_write(cx, &self.buf[self.start..self.start + self.scanned]))?;
        if n == 0 {
            return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
        }
        self.start += n;
        self.scanned -= n;
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        }
        Poll::Ready(Ok(true))
    }

    /// Drops everything read but not yet scanned (a connection is being
    /// abandoned mid-message).
    pub fn discard_unscanned(&mut self) {
        self.end = self.start + self.scanned;
    }
}
