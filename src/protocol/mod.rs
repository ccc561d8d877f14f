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
    /// protocol) with no search and no UTF-8 check; an ASCII one (most
    /// texts) checked in the same pass as its terminator is found
    /// ([`cstr_end`]).
    pub(crate) fn cstr(&mut self) -> Result<&'a str, ProtocolError> {
        if let Some((0, rest)) = self.buf.split_first() {
            self.buf = rest;
            return Ok("");
        }
        let (end, ascii) = cstr_end(self.buf).ok_or(self.malformed())?;
        let text = &self.buf[..end];
        let s = match ascii {
            // SAFETY: every byte is below 0x80, and ASCII is UTF-8.
            true => unsafe { std::str::from_utf8_unchecked(text) },
            false => std::str::from_utf8(text).map_err(|_| self.malformed())?,
        };
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

/// Where the first NUL byte of `bytes` is (see [`cstr_end`]).
#[inline]
pub(crate) fn nul_at(bytes: &[u8]) -> Option<usize> {
    cstr_end(bytes).map(|(end, _)| end)
}

/// Where the first NUL byte of `bytes` is, and whether every byte before it
/// is ASCII: one pass, eight bytes at a time, for what every message's
/// strings need (a query text's terminator and its UTF-8 check cost 260
/// instructions per pgbench -S text as a memchr and a `from_utf8`). An
/// empty string (the unnamed statement and portal) is told by its first
/// byte. Written here, not taken from a crate: the memchr crate's vector
/// search cost more than the standard library's for these strings, most
/// of them a few bytes long (17,201 against 16,989 instructions per
/// extended -S transaction), and no crate fuses the two questions.
#[inline]
pub(crate) fn cstr_end(bytes: &[u8]) -> Option<(usize, bool)> {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    if bytes.first() == Some(&0) {
        return Some((0, true));
    }
    let mut high = 0;
    let mut words = bytes.chunks_exact(8);
    for (i, word) in words.by_ref().enumerate() {
        let w = u64::from_le_bytes(word.try_into().expect("8 bytes"));
        // The lowest byte flagged is the first NUL (a flag above it may be
        // a borrow's, never one below).
        let nul = w.wrapping_sub(ONES) & !w & HIGH;
        if nul != 0 {
            let at = nul.trailing_zeros() as usize / 8;
            let before = (1u64 << (at * 8)) - 1;
            return Some((i * 8 + at, (high | (w & before)) & HIGH == 0));
        }
        high |= w;
    }
    let done = bytes.len() - words.remainder().len();
    let mut ascii = high & HIGH == 0;
    for (at, &b) in words.remainder().iter().enumerate() {
        if b == 0 {
            return Some((done + at, ascii));
        }
        ascii &= b.is_ascii();
    }
    None
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

    /// What [`cstr_end`] must say, a byte at a time.
    fn cstr_end_bytewise(bytes: &[u8]) -> Option<(usize, bool)> {
        let end = bytes.iter().position(|&b| b == 0)?;
        Some((end, bytes[..end].is_ascii()))
    }

    #[test]
    fn the_terminator_and_the_ascii_check_agree_with_a_byte_at_a_time() {
        // Every length around the word size, a NUL and a non-ASCII byte at
        // every place (before, at and after each other), and bytes that
        // borrow in the word arithmetic (0x01 after a NUL, 0x80, 0xff).
        for len in 0..26 {
            for nul in (0..len).map(Some).chain([None]) {
                for high in (0..len).map(Some).chain([None]) {
                    for &(filler, odd) in &[(b'x', 0x80u8), (0x01, 0xff), (b'a', 0xc3)] {
                        let mut bytes = vec![filler; len];
                        if let Some(h) = high {
                            bytes[h] = odd;
                        }
                        if let Some(n) = nul {
                            bytes[n] = 0;
                        }
                        assert_eq!(cstr_end(&bytes), cstr_end_bytewise(&bytes), "{bytes:?}");
                    }
                }
            }
        }
    }

    proptest::proptest! {
        #[test]
        fn the_terminator_and_the_ascii_check_hold_for_any_bytes(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..64)) {
            proptest::prop_assert_eq!(cstr_end(&bytes), cstr_end_bytewise(&bytes));
        }

        #[test]
        fn any_utf8_text_is_read_whole(text in "\\PC{0,30}", tail in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..8)) {
            let mut bytes = text.as_bytes().to_vec();
            bytes.push(0);
            bytes.extend_from_slice(&tail);
            let mut r = Reader::new(&bytes, "test");
            // (`\PC`: no control characters, so no NUL in the text.)
            proptest::prop_assert_eq!(r.cstr(), Ok(text.as_str()));
            proptest::prop_assert_eq!(r.remaining(), tail.len());
        }
    }

    #[test]
    fn a_string_that_is_not_utf8_is_refused_wherever_its_bad_byte_is() {
        for at in 0..20 {
            let mut bytes = vec![b'q'; 20];
            bytes[at] = 0xff;
            bytes.push(0);
            assert!(Reader::new(&bytes, "test").cstr().is_err(), "{at}");
            bytes[at] = 0xc3;
            bytes.insert(at + 1, 0xa9); // é
            assert_eq!(Reader::new(&bytes, "test").cstr().map(|s| s.chars().count()), Ok(20), "{at}");
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
