//! Splitting a byte stream into protocol messages without copying them.
//!
//! After startup every message is `tag: u8, length: i32 (includes itself), body`.
//! Two ways to walk such a stream live here:
//!
//! - [`split_message`] takes one complete message off the front of a buffer, for
//!   the phases where pglane reads whole messages (authentication, server login).
//! - [`Scanner`] walks a stream that is being *forwarded*: it reports each
//!   message's tag (and its body, for the tags the caller must inspect) while the
//!   bytes themselves stay in the buffer and go out in one write. A message the
//!   caller does not inspect may be forwarded before it has fully arrived, so a
//!   1 GiB DataRow never sits in pglane's memory.
//!
//! The declared length is checked against a maximum before anything is
//! allocated for it.

use bytes::{Bytes, BytesMut};

use super::ProtocolError;

/// Length of a tagged message header: tag byte plus the i32 length.
pub const HEADER_LEN: usize = 5;

/// A message header: its tag and the length of its body (not counting the
/// four length bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub tag: u8,
    pub body_len: usize,
}

/// Reads a header from the front of `buf`; `Ok(None)` if fewer than five bytes
/// are there. Rejects lengths below 4 and bodies larger than `max_body`.
pub fn parse_header(buf: &[u8], max_body: usize) -> Result<Option<Header>, ProtocolError> {
    if buf.len() < HEADER_LEN {
        return Ok(None);
    }
    let len = i32::from_be_bytes([buf[1], buf[2], buf[3], buf[4]]);
    if len < 4 {
        return Err(ProtocolError::InvalidLength(len.into()));
    }
    let body_len = len as usize - 4;
    if body_len > max_body {
        return Err(ProtocolError::MessageTooLarge { len: body_len, max: max_body });
    }
    Ok(Some(Header { tag: buf[0], body_len }))
}

/// One complete message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    pub tag: u8,
    pub body: Bytes,
}

/// Takes one complete message off the front of `buf`, or `Ok(None)` when the
/// buffer does not hold a whole one yet (reserving room for the rest).
pub fn split_message(buf: &mut BytesMut, max_body: usize) -> Result<Option<Message>, ProtocolError> {
    let Some(header) = parse_header(buf, max_body)? else {
        return Ok(None);
    };
    let total = HEADER_LEN + header.body_len;
    if buf.len() < total {
        buf.reserve(total - buf.len());
        return Ok(None);
    }
    let mut frame = buf.split_to(total);
    let body = frame.split_off(HEADER_LEN).freeze();
    Ok(Some(Message { tag: header.tag, body }))
}

/// What the visitor of a [`Scanner`] wants done with the message it was shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    /// Forward it and go on.
    Continue,
    /// Stop in front of it: it is not counted as scanned and stays in the buffer.
    Stop,
}

/// Walks a forwarded stream message by message; see the module docs.
///
/// The caller owns the buffer and keeps an offset of how much has been scanned;
/// it calls [`Scanner::scan`] on the unscanned part each time more bytes arrive.
#[derive(Debug, Default)]
pub struct Scanner {
    /// Bytes of the current message's body that are not yet scanned.
    body_left: usize,
}

impl Scanner {
    /// Is the scanner between messages (not inside a body)?
    pub fn at_boundary(&self) -> bool {
        self.body_left == 0
    }

    /// Scans `buf` (the bytes not yet scanned) and returns how many of them may
    /// be forwarded. `visit(tag, body)` is called once per message as its
    /// header is reached; for tags where `needs_body(tag)` is true the scan waits
    /// until the whole body is in `buf` and `body` is all of it, otherwise
    /// `body` is empty. Stops at the end of `buf` or when `visit` says `Stop`.
    pub fn scan(
        &mut self,
        buf: &[u8],
        max_body: usize,
        needs_body: impl Fn(u8) -> bool,
        mut visit: impl FnMut(u8, &[u8]) -> Flow,
    ) -> Result<usize, ProtocolError> {
        let mut pos = 0;
        loop {
            if self.body_left > 0 {
                let n = self.body_left.min(buf.len() - pos);
                pos += n;
                self.body_left -= n;
                if self.body_left > 0 {
                    return Ok(pos);
                }
            }
            let Some(header) = parse_header(&buf[pos..], max_body)? else {
                return Ok(pos);
            };
            let body_start = pos + HEADER_LEN;
            let body = if needs_body(header.tag) {
                if buf.len() - body_start < header.body_len {
                    return Ok(pos);
                }
                &buf[body_start..body_start + header.body_len]
            } else {
                &[]
            };
            if visit(header.tag, body) == Flow::Stop {
                return Ok(pos);
            }
            pos = body_start;
            self.body_left = header.body_len;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(tag: u8, body: &[u8]) -> Vec<u8> {
        let mut v = vec![tag];
        v.extend_from_slice(&((body.len() + 4) as i32).to_be_bytes());
        v.extend_from_slice(body);
        v
    }

    #[test]
    fn header_needs_five_bytes() {
        assert_eq!(parse_header(b"Q\0\0\0", 100), Ok(None));
        assert_eq!(parse_header(&msg(b'Q', b"abc"), 100), Ok(Some(Header { tag: b'Q', body_len: 3 })));
    }

    #[test]
    fn header_rejects_bad_lengths() {
        assert_eq!(parse_header(b"Q\0\0\0\x03", 100), Err(ProtocolError::InvalidLength(3)));
        assert_eq!(parse_header(b"Q\xff\xff\xff\xff", 100), Err(ProtocolError::InvalidLength(-1)));
        assert_eq!(
            parse_header(b"Q\x7f\xff\xff\xff", 1 << 20),
            Err(ProtocolError::MessageTooLarge { len: 0x7fff_fffb, max: 1 << 20 })
        );
    }

    #[test]
    fn split_message_waits_for_the_whole_body() {
        let whole = msg(b'Q', b"select 1\0");
        let mut buf = BytesMut::from(&whole[..7]);
        assert_eq!(split_message(&mut buf, 100), Ok(None));
        buf.extend_from_slice(&whole[7..]);
        buf.extend_from_slice(&msg(b'S', b""));
        let m = split_message(&mut buf, 100).unwrap().unwrap();
        assert_eq!((m.tag, &m.body[..]), (b'Q', &b"select 1\0"[..]));
        let m = split_message(&mut buf, 100).unwrap().unwrap();
        assert_eq!((m.tag, m.body.len()), (b'S', 0));
        assert!(buf.is_empty());
    }

    #[test]
    fn scanner_sees_every_tag_across_arbitrary_splits() {
        let mut stream = Vec::new();
        stream.extend(msg(b'D', &[7; 300]));
        stream.extend(msg(b'C', b"SELECT 1\0"));
        stream.extend(msg(b'Z', b"I"));
        for chunk in 1..stream.len() {
            let mut scanner = Scanner::default();
            let mut seen = Vec::new();
            let mut scanned = 0;
            let mut end = 0;
            while scanned < stream.len() {
                end = (end + chunk).min(stream.len());
                let n = scanner
                    .scan(
                        &stream[scanned..end],
                        1000,
                        |t| t == b'Z',
                        |t, body| {
                            seen.push((t, body.to_vec()));
                            Flow::Continue
                        },
                    )
                    .unwrap();
                scanned += n;
            }
            assert_eq!(seen, vec![(b'D', vec![]), (b'C', vec![]), (b'Z', b"I".to_vec())], "chunk size {chunk}");
            assert!(scanner.at_boundary());
        }
    }

    #[test]
    fn scanner_forwards_uninspected_bodies_early_but_holds_inspected_ones() {
        let big = msg(b'D', &[1; 100]);
        let mut s = Scanner::default();
        assert_eq!(s.scan(&big[..50], 1000, |_| false, |_, _| Flow::Continue), Ok(50));
        assert!(!s.at_boundary());
        let z = msg(b'Z', b"I");
        let mut s = Scanner::default();
        assert_eq!(s.scan(&z[..5], 1000, |t| t == b'Z', |_, _| Flow::Continue), Ok(0));
    }

    #[test]
    fn scanner_stops_in_front_of_a_message_when_asked() {
        let mut stream = msg(b'Q', b"x\0");
        stream.extend(msg(b'X', b""));
        let mut s = Scanner::default();
        let n = s.scan(&stream, 100, |_| false, |t, _| if t == b'X' { Flow::Stop } else { Flow::Continue }).unwrap();
        assert_eq!(n, 7);
    }

    #[test]
    fn scanner_rejects_oversized_messages() {
        let mut s = Scanner::default();
        let err = s.scan(&msg(b'Q', &[0; 20]), 10, |_| false, |_, _| Flow::Continue);
        assert_eq!(err, Err(ProtocolError::MessageTooLarge { len: 20, max: 10 }));
    }
}
