//! The PostgreSQL v3 wire protocol, as small pure functions over `bytes`.
//!
//! This module owns the byte layout of every message pglane reads or writes and
//! nothing else: no sockets, no state machines, no policy. Decoders take a
//! complete message body and return a typed value or a [`ProtocolError`]; they
//! never panic on input from the network. Encoders append to a `BytesMut`, so a
//! caller can build several messages into one buffer and send them in one write.
//!
//! - [`frame`]: splitting a byte stream into messages without copying them.
//! - [`startup`]: the untagged first packet (StartupMessage, SSLRequest,
//!   GSSENCRequest, CancelRequest).
//! - [`backend`]: messages PostgreSQL (or pglane, posing as it) sends to a client.
//! - [`frontend`]: messages a client (or pglane, posing as one) sends to a server.

pub mod backend;
pub mod frame;
pub mod frontend;
pub mod names;
pub mod startup;

use thiserror::Error;

/// The protocol version number of v3.0 in a StartupMessage.
pub const PROTOCOL_VERSION_3: i32 = 196_608;

/// What went wrong while reading a message off the wire.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum ProtocolError {
    #[error("message length {len} exceeds the maximum of {max} bytes")]
    MessageTooLarge { len: usize, max: usize },
    #[error("invalid message length {0}")]
    InvalidLength(i64),
    #[error("malformed {0} message")]
    Malformed(&'static str),
    #[error("unexpected message type '{}'", char::from(*.0))]
    UnexpectedMessage(u8),
    #[error("unsupported protocol version {}.{}", .0 >> 16, .0 & 0xffff)]
    UnsupportedVersion(i32),
    #[error("connection closed in the middle of a message")]
    UnexpectedEof,
}

/// A cursor over a message body with the typed reads the protocol needs.
/// Every read checks bounds and reports `Malformed(what)` instead of panicking.
pub(crate) struct Reader<'a> {
    buf: &'a [u8],
    what: &'static str,
}

impl<'a> Reader<'a> {
    pub(crate) fn new(buf: &'a [u8], what: &'static str) -> Self {
        Reader { buf, what }
    }

    fn malformed(&self) -> ProtocolError {
        ProtocolError::Malformed(self.what)
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    pub(crate) fn u8(&mut self) -> Result<u8, ProtocolError> {
        let (&b, rest) = self.buf.split_first().ok_or(self.malformed())?;
        self.buf = rest;
        Ok(b)
    }

    pub(crate) fn u16(&mut self) -> Result<u16, ProtocolError> {
        let b = self.bytes(2)?;
        Ok(u16::from_be_bytes([b[0], b[1]]))
    }

    /// Bytes not read yet.
    pub(crate) fn remaining(&self) -> usize {
        self.buf.len()
    }

    pub(crate) fn i32(&mut self) -> Result<i32, ProtocolError> {
        let b = self.bytes(4)?;
        Ok(i32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    pub(crate) fn bytes(&mut self, n: usize) -> Result<&'a [u8], ProtocolError> {
        if self.buf.len() < n {
            return Err(self.malformed());
        }
        let (head, rest) = self.buf.split_at(n);
        self.buf = rest;
        Ok(head)
    }

    /// A NUL-terminated string, returned without its terminator. The empty
    /// one (the unnamed statement and portal, most names of the extended
    /// protocol) with no search and no UTF-8 check.
    pub(crate) fn cstr(&mut self) -> Result<&'a str, ProtocolError> {
        if let Some((0, rest)) = self.buf.split_first() {
            self.buf = rest;
            return Ok("");
        }
        let end = nul_at(self.buf).ok_or(self.malformed())?;
        let s = std::str::from_utf8(&self.buf[..end]).map_err(|_| self.malformed())?;
        self.buf = &self.buf[end + 1..];
        Ok(s)
    }

    /// Steps over a NUL-terminated string without looking at its bytes (a
    /// name pglane only forwards: its encoding is the client's business).
    pub(crate) fn skip_cstr(&mut self) -> Result<(), ProtocolError> {
        let end = nul_at(self.buf).ok_or(self.malformed())?;
        self.buf = &self.buf[end + 1..];
        Ok(())
    }

    pub(crate) fn rest(&mut self) -> &'a [u8] {
        std::mem::take(&mut self.buf)
    }
}

/// Where the first NUL byte of `bytes` is: found a word at a time (the
/// standard library's memchr), not a byte at a time, since query texts are
/// scanned for their terminator on every message; an empty string (the
/// unnamed statement and portal, most names of the extended protocol) with
/// no search at all. (The memchr crate's vector search cost more here:
/// 17,201 against 16,989 instructions per extended -S transaction, as
/// most strings are a few bytes long.)
#[inline]
pub(crate) fn nul_at(bytes: &[u8]) -> Option<usize> {
    if bytes.first() == Some(&0) {
        return Some(0);
    }
    std::ffi::CStr::from_bytes_until_nul(bytes).ok().map(|s| s.to_bytes().len())
}

/// Appends a NUL-terminated string.
pub(crate) fn put_cstr(buf: &mut bytes::BytesMut, s: &str) {
    buf.extend_from_slice(s.as_bytes());
    buf.extend_from_slice(&[0]);
}

/// Writes a tagged message: tag, length placeholder, body written by `body`,
/// then the length patched in. One allocation-free way to encode every message.
#[inline]
pub(crate) fn put_message(buf: &mut bytes::BytesMut, tag: u8, body: impl FnOnce(&mut bytes::BytesMut)) {
    buf.extend_from_slice(&[tag, 0, 0, 0, 0]);
    let len_at = buf.len() - 4;
    body(buf);
    let len = (buf.len() - len_at) as i32;
    buf[len_at..len_at + 4].copy_from_slice(&len.to_be_bytes());
}

#[cfg(test)]
mod nul_tests {
    use super::*;

    #[test]
    fn the_first_nul_is_found_at_any_offset() {
        for len in 0..40 {
            for at in 0..len {
                let mut bytes = vec![b'x'; len];
                bytes[at] = 0;
                if at + 1 < len {
                    bytes[len - 1] = 0;
                }
                assert_eq!(nul_at(&bytes), Some(at), "{len} {at}");
                let mut r = Reader::new(&bytes, "test");
                assert_eq!(r.cstr().map(str::len), Ok(at));
                assert_eq!(r.remaining(), len - at - 1);
            }
            assert_eq!(nul_at(&vec![b'x'; len]), None);
            assert!(Reader::new(&vec![b'x'; len], "test").skip_cstr().is_err());
        }
    }

    #[test]
    fn empty_strings_are_read_as_any_other() {
        let mut r = Reader::new(b"\0\0name\0\0", "test");
        assert_eq!(r.cstr(), Ok(""));
        assert_eq!(r.cstr(), Ok(""));
        assert_eq!(r.cstr(), Ok("name"));
        assert_eq!(r.cstr(), Ok(""));
        assert!(r.is_empty());
        assert!(r.cstr().is_err(), "no terminator left");
        assert!(Reader::new(b"\xff\0", "test").cstr().is_err(), "not UTF-8");
    }
}
