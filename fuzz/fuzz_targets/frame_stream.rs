//! Splitting a byte stream into messages, three ways that must agree:
//!
//! - `frame::split_message`, used for login and reset (whole messages);
//! - `frame::Scanner`, the forwarding scanner;
//! - the session's own `Inbox` (src/client/inbox.rs, private to the client
//!   module), compiled into this target from its source file, fed through its
//!   real `poll_fill` by a reader that returns the stream in fuzzer-chosen
//!   chunks, and drained with `next` as the relay does (whole for the tags it
//!   inspects, streamed for DataRow/CopyData).
//!
//! Checked: no panic; all three see the same tags in the same order and stop
//! at the same error (the Inbox, which hands out a run of streamed messages
//! of one tag as one piece, may report a bad header behind such a run before
//! handing the run out); every byte handed out is the stream's own, in
//! order, with nothing lost or duplicated; headers are never split between
//! pieces; the Inbox never grows past its limit.
#![no_main]

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use arbitrary::Arbitrary;
use bytes::BytesMut;
use futures_lite::AsyncRead;
use libfuzzer_sys::fuzz_target;
use pglane::protocol::frame::{split_message, Flow, Scanner, HEADER_LEN};

/// `crate::protocol` as inbox.rs expects it.
mod protocol {
    pub use pglane::protocol::*;
}

#[allow(dead_code)]
#[path = "../../src/client/inbox.rs"]
mod inbox;

#[derive(Debug, Arbitrary)]
struct Input {
    /// Chunk sizes the socket hands out (cycled; 0 is read as 1).
    chunks: Vec<u16>,
    /// Bit i: tag class i (tag % 8) is "whole" for the Inbox.
    whole_mask: u8,
    /// Small maximum body, to hit MessageTooLarge too.
    max_body: u16,
    stream: Vec<u8>,
}

/// A socket that hands out `data` in the given chunk sizes, then EOF.
struct Chunked<'a> {
    data: &'a [u8],
    chunks: &'a [u16],
    i: usize,
}

impl AsyncRead for Chunked<'_> {
    fn poll_read(mut self: Pin<&mut Self>, _cx: &mut Context<'_>, buf: &mut [u8]) -> Poll<io::Result<usize>> {
        let want = if self.chunks.is_empty() { 4096 } else { self.chunks[self.i % self.chunks.len()].max(1) as usize };
        self.i += 1;
        let n = want.min(buf.len()).min(self.data.len());
        buf[..n].copy_from_slice(&self.data[..n]);
        self.data = &self.data[n..];
        Poll::Ready(Ok(n))
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum End {
    /// Ran out of bytes (possibly mid-message).
    Eof,
    Error,
}

fuzz_target!(|input: Input| {
    let max_body = input.max_body as usize * 4;
    let stream = &input.stream[..];
    let whole = |tag: u8| input.whole_mask & (1 << (tag % 8)) != 0;

    // 1. split_message on the whole stream.
    let mut buf = BytesMut::from(stream);
    let mut split_tags = Vec::new();
    let split_end = loop {
        match split_message(&mut buf, max_body) {
            Ok(Some(m)) => split_tags.push((m.tag, m.body.len())),
            Ok(None) => break End::Eof,
            Err(_) => break End::Error,
        }
    };

    // 2. Scanner, fed chunk by chunk; bodies of "whole" tags must be complete.
    let mut scanner = Scanner::default();
    let mut scan_tags = Vec::new();
    let (mut scanned, mut end) = (0usize, 0usize);
    let mut ci = 0;
    let scan_end = loop {
        let step = if input.chunks.is_empty() { 4096 } else { input.chunks[ci % input.chunks.len()].max(1) as usize };
        ci += 1;
        end = (end + step).min(stream.len());
        let result = scanner.scan(&stream[scanned..end], max_body, &whole, |tag, body| {
            if whole(tag) {
                scan_tags.push((tag, body.len()));
            } else {
                assert!(body.is_empty());
                scan_tags.push((tag, usize::MAX));
            }
            Flow::Continue
        });
        match result {
            Ok(n) => {
                scanned += n;
                assert!(scanned <= end);
                if end == stream.len() {
                    // Nothing more will come: one more call makes no progress.
                    let again = scanner.scan(&stream[scanned..end], max_body, &whole, |_, _| Flow::Continue);
                    match again {
                        Ok(0) => break End::Eof,
                        Ok(_) => unreachable!("scanner left bytes it could forward"),
                        Err(_) => break End::Error,
                    }
                }
            }
            Err(_) => break End::Error,
        }
    };

    // 3. The session's Inbox, through poll_fill as the relay drives it. A
    //    streamed piece may hold a run of messages of one tag (whole ones,
    //    then possibly the start of one more, continued by More pieces);
    //    headers are never split between pieces.
    let mut ib = inbox::Inbox::new(max_body);
    let mut reader = Chunked { data: stream, chunks: &input.chunks, i: 0 };
    let mut cx = Context::from_waker(Waker::noop());
    let mut handed = Vec::new();
    let mut inbox_tags = Vec::new();
    // The tag of the streamed run being handed out, and the bytes of its
    // current message still to come.
    let mut run: Option<u8> = None;
    let mut left = 0usize;
    fn walk(bytes: &[u8], run_tag: u8, left: &mut usize, tags: &mut Vec<(u8, usize)>) {
        let mut pos = 0;
        while pos < bytes.len() {
            if *left == 0 {
                let h = &bytes[pos..];
                assert!(h.len() >= HEADER_LEN, "a header split between pieces");
                assert_eq!(h[0], run_tag, "a run mixes tags");
                tags.push((run_tag, usize::MAX));
                *left = HEADER_LEN + u32::from_be_bytes([h[1], h[2], h[3], h[4]]) as usize - 4;
            }
            let n = (*left).min(bytes.len() - pos);
            *left -= n;
            pos += n;
        }
    }
    let inbox_end = 'outer: loop {
        loop {
            match ib.next(&whole) {
                Ok(Some(inbox::Piece::Whole(tag, m))) => {
                    assert!(left == 0, "a whole message inside a streamed one");
                    run = None;
                    assert!(whole(tag) && m[0] == tag && m.len() >= HEADER_LEN);
                    handed.extend_from_slice(m);
                    inbox_tags.push((tag, m.len() - HEADER_LEN));
                }
                Ok(Some(inbox::Piece::Start(tag, m))) => {
                    assert!(left == 0 && !whole(tag) && !m.is_empty() && m[0] == tag);
                    handed.extend_from_slice(m);
                    run = Some(tag);
                    walk(m, tag, &mut left, &mut inbox_tags);
                }
                Ok(Some(inbox::Piece::More(m))) => {
                    let tag = run.expect("More only after Start");
                    assert!(left > 0 && !m.is_empty() && m.len() <= left, "More beyond the message");
                    handed.extend_from_slice(m);
                    walk(m, tag, &mut left, &mut inbox_tags);
                }
                Ok(None) => break,
                Err(_) => break 'outer End::Error,
            }
        }
        assert_eq!(ib.at_boundary(), left == 0);
        if ib.eof {
            break End::Eof;
        }
        match ib.poll_fill(&mut cx, &mut reader) {
            Poll::Ready(Ok(n)) => assert!(n > 0 || ib.eof),
            Poll::Ready(Err(e)) => panic!("reader never fails: {e}"),
            Poll::Pending => unreachable!(),
        }
        // A buffer full of one whole message it may not grow for would loop forever.
        if !ib.eof && ib.pending().len() > max_body + HEADER_LEN + 16 * 1024 {
            panic!("inbox holds {} bytes for max_body {max_body}", ib.pending().len());
        }
    };
    assert!(stream.starts_with(&handed), "inbox handed out bytes that are not the stream's");

    // Agreement. The scanner and inbox report streamed tags without length.
    let norm = |tags: &[(u8, usize)]| -> Vec<(u8, Option<usize>)> {
        tags.iter().map(|&(t, l)| (t, if whole(t) { Some(l) } else { None })).collect()
    };
    let split_norm = norm(&split_tags);
    let (scan_norm, inbox_norm) = (norm(&scan_tags), norm(&inbox_tags));
    assert_eq!(scan_end, split_end);
    assert_eq!(scan_end, inbox_end);
    if inbox_end == End::Eof {
        assert_eq!(scan_norm, inbox_norm);
        assert_eq!(handed.len(), scanned, "the inbox and the scanner forwarded different amounts");
    } else {
        // The inbox looks ahead along a run of streamed messages and reports
        // a bad header behind it at once, without handing out the run first.
        assert!(scan_norm.starts_with(&inbox_norm), "{scan_norm:?} vs {inbox_norm:?}");
        assert!(scan_norm[inbox_norm.len()..].iter().all(|&(t, l)| l.is_none() && Some(t) == scan_norm.last().map(|x| x.0)));
    }
    // split_message needs whole bodies; the forwarding scanners do not, so
    // they may have seen one more (streamed) message at the end.
    assert!(scan_norm.starts_with(&split_norm));
    assert!(scan_tags.len() <= split_tags.len() + 1);
});
