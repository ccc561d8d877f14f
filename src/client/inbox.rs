//! Bytes read from one socket, handed out message by message.
//!
//! The buffer is a plain `Vec<u8>` window (`start..end`); reads land after
//! `end`. A message whose tag the caller must inspect is handed out whole
//! (the buffer grows for it, up to the maximum message size). Any other message
//! (DataRow, CopyData) is handed out in pieces as its bytes arrive, so a huge
//! row never has to fit in memory at once.
//!
//! An empty inbox can give its buffer up ([`Inbox::take_buffer`]) so that a
//! client that sends nothing costs no buffer; the next read takes one in
//! again ([`Inbox::give_buffer`], or a new one).

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use futures_lite::AsyncRead;

use crate::protocol::frame::{parse_header, HEADER_LEN};
use crate::protocol::ProtocolError;

/// Initial buffer size: what one read takes in at first.
pub const INITIAL: usize = 4 * 1024;

/// A read that fills the buffer doubles it, up to this, so that bulk
/// transfers (COPY, big results) take fewer reads while a client that sends
/// small queries keeps a small buffer (one per idle client adds up).
const READ_GROWTH_LIMIT: usize = 64 * 1024;

pub struct Inbox {
    buf: Vec<u8>,
    start: usize,
    end: usize,
    /// Bytes of a streamed message still to come.
    stream_left: usize,
    /// The largest size the buffer may grow to.
    limit: usize,
    max_body: usize,
    /// The socket reached end of stream.
    pub eof: bool,
}

/// What [`Inbox::next`] hands out.
pub enum Piece<'a> {
    /// A whole message (header included).
    Whole(u8, &'a [u8]),
    /// The start of a streamed message: its tag and its first bytes (header
    /// included), possibly followed by more whole messages of the same tag.
    Start(u8, &'a [u8]),
    /// More bytes of the streamed message.
    More(&'a [u8]),
}

impl Inbox {
    /// An inbox for messages of up to `max_body` bytes. Its buffer is
    /// allocated by the first read, not before: a session waits for its
    /// client's first message holding none (see `take_buffer`).
    pub fn new(max_body: usize) -> Inbox {
        Inbox {
            buf: Vec::new(),
            start: 0,
            end: 0,
            stream_left: 0,
            limit: max_body.saturating_add(HEADER_LEN).max(INITIAL),
            max_body,
            eof: false,
        }
    }

    /// An inbox with no buffer at all, standing in for one lent elsewhere
    /// (see `relay::Buffers::park_server_side`). It must not be read into.
    pub fn parked() -> Inbox {
        Inbox { buf: Vec::new(), start: 0, end: 0, stream_left: 0, limit: 0, max_body: 0, eof: false }
    }

    /// Gives up the buffer if nothing is in it (nothing read and not handed
    /// out, no message half handed out); a later read takes one in again.
    pub fn take_buffer(&mut self) -> Option<Vec<u8>> {
        if self.start != self.end || self.stream_left != 0 || self.buf.is_empty() {
            return None;
        }
        self.start = 0;
        self.end = 0;
        Some(std::mem::take(&mut self.buf))
    }

    /// Takes in an empty buffer (one [`Inbox::take_buffer`] gave up, of any
    /// size) if it has none.
    pub fn give_buffer(&mut self, buf: Vec<u8>) {
        if self.buf.is_empty() && self.limit > 0 {
            self.buf = buf;
            self.buf.truncate(self.limit);
        }
    }

    /// The size of the buffer it holds (what it grew to for the largest
    /// message it held whole).
    pub fn buffer_len(&self) -> usize {
        self.buf.len()
    }

    /// It holds a buffer to read into.
    #[cfg(test)]
    pub fn has_buffer(&self) -> bool {
        !self.buf.is_empty()
    }

    /// Bytes read and not yet handed out.
    pub fn pending(&self) -> &[u8] {
        &self.buf[self.start..self.end]
    }

    /// Between messages: nothing is half handed out.
    pub fn at_boundary(&self) -> bool {
        self.stream_left == 0
    }

    /// Forgets everything read, end of stream included (the connection it
    /// came from is being abandoned, or the buffer will serve another).
    pub fn clear(&mut self) {
        self.start = 0;
        self.end = 0;
        self.stream_left = 0;
        self.eof = false;
    }

    /// Takes over where another inbox reading the same socket stopped (a
    /// server connection handed over): the bytes it read and did not hand
    /// out, and its [`Inbox::stream_left`].
    pub fn take_over(&mut self, bytes: &[u8], stream_left: usize) {
        self.stream_left = stream_left;
        self.preload(bytes);
    }

    /// What of the message being streamed is still to be handed out, read
    /// or not (0 between messages), for [`Inbox::take_over`].
    pub fn stream_left(&self) -> usize {
        self.stream_left
    }

    /// Appends bytes as if read from the socket.
    pub fn preload(&mut self, bytes: &[u8]) {
        if bytes.is_empty() {
            return;
        }
        self.make_room();
        if self.buf.len() - self.end < bytes.len() {
            self.buf.resize(self.end + bytes.len(), 0);
        }
        self.buf[self.end..self.end + bytes.len()].copy_from_slice(bytes);
        self.end += bytes.len();
    }

    /// Puts `bytes` back in front of what is pending, as if never handed
    /// out: a request that runs again on another server (see
    /// `client::routing`). Between messages only.
    pub fn unread(&mut self, bytes: &[u8]) {
        debug_assert!(self.at_boundary());
        let mut buf = Vec::with_capacity(self.buf.len().max(bytes.len() + self.end - self.start));
        buf.extend_from_slice(bytes);
        buf.extend_from_slice(self.pending());
        let end = buf.len();
        buf.resize(buf.capacity(), 0);
        (self.buf, self.start, self.end) = (buf, 0, end);
    }

    /// Reads what the socket has into free space. `Ready(Ok(0))` at end of stream.
    pub fn poll_fill<S: AsyncRead + Unpin>(&mut self, cx: &mut Context<'_>, stream: &mut S) -> Poll<io::Result<usize>> {
        self.make_room();
        debug_assert!(self.end < self.buf.len(), "reading into a parked inbox");
        let n = std::task::ready!(Pin::new(stream).poll_read(cx, &mut self.buf[self.end..]))?;
        self.end += n;
        if n == 0 {
            self.eof = true;
        }
        if self.end == self.buf.len() && self.buf.len() < READ_GROWTH_LIMIT.min(self.limit) {
            self.buf.resize((self.buf.len() * 2).min(READ_GROWTH_LIMIT).min(self.limit), 0);
        }
        Poll::Ready(Ok(n))
    }

    /// Room to read into. Inlined for its common case, a buffer of the
    /// usual size with room left (every read, several a transaction); the
    /// rest is [`Inbox::make_room_slowly`].
    #[inline]
    fn make_room(&mut self) {
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        }
        if self.end < self.buf.len() && self.buf.len() <= READ_GROWTH_LIMIT {
            return;
        }
        self.make_room_slowly();
    }

    #[inline(never)]
    fn make_room_slowly(&mut self) {
        if self.buf.is_empty() && self.limit > 0 {
            self.buf = vec![0; INITIAL.min(self.limit)];
        }
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
            // A message seen whole (a big negotiated DataRow) grew the
            // buffer past what reads need: give that memory back.
            if self.buf.len() > READ_GROWTH_LIMIT {
                self.buf.truncate(READ_GROWTH_LIMIT);
                self.buf.shrink_to_fit();
            }
        }
        if self.end < self.buf.len() {
            return;
        }
        if self.start > 0 {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        } else if self.buf.len() < self.limit {
            // Full of one message that must be seen whole: grow.
            let size = (self.buf.len() * 2).min(self.limit);
            self.buf.resize(size, 0);
        }
    }

    /// The next piece, or `None` until more bytes arrive. Messages with
    /// `whole(tag)` true come whole; others are streamed. Inlined: it runs
    /// for every message, and out of line it cost callgrind-counted ~400
    /// instructions per extended-protocol transaction more.
    #[inline]
    pub fn next(&mut self, whole: impl Fn(u8) -> bool) -> Result<Option<Piece<'_>>, ProtocolError> {
        let available = self.end - self.start;
        if self.stream_left > 0 {
            let n = self.stream_left.min(available);
            if n == 0 {
                return Ok(None);
            }
            self.stream_left -= n;
            let from = self.start;
            self.start += n;
            return Ok(Some(Piece::More(&self.buf[from..from + n])));
        }
        let Some(header) = parse_header(&self.buf[self.start..self.end], self.max_body)? else {
            return Ok(None);
        };
        let len = HEADER_LEN + header.body_len;
        let from = self.start;
        if whole(header.tag) {
            if available < len {
                return Ok(None);
            }
            self.start += len;
            return Ok(Some(Piece::Whole(header.tag, &self.buf[from..from + len])));
        }
        // A streamed message, and every following one of the same tag already
        // here (a run of DataRows), go out as one piece.
        let mut end = from + len.min(available);
        self.stream_left = len - (end - from);
        while self.stream_left == 0 {
            match parse_header(&self.buf[end..self.end], self.max_body)? {
                Some(next) if next.tag == header.tag => {
                    let next_len = HEADER_LEN + next.body_len;
                    let take = next_len.min(self.end - end);
                    self.stream_left = next_len - take;
                    end += take;
                }
                _ => break,
            }
        }
        self.start = end;
        Ok(Some(Piece::Start(header.tag, &self.buf[from..end])))
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

    fn feed(inbox: &mut Inbox, bytes: &[u8]) {
        inbox.preload(bytes);
    }

    #[test]
    fn preloaded_bytes_follow_what_was_left_unread() {
        let mut inbox = Inbox::new(1 << 20);
        feed(&mut inbox, &msg(b'Z', b"I"));
        let big = msg(b'D', &[1; 10_000]);
        inbox.preload(&big);
        assert!(matches!(inbox.next(|_| true).unwrap(), Some(Piece::Whole(b'Z', _))));
        assert!(matches!(inbox.next(|_| true).unwrap(), Some(Piece::Whole(b'D', m)) if m == &big[..]));
        assert!(inbox.next(|_| true).unwrap().is_none());
    }

    #[test]
    fn unread_bytes_come_out_again_before_what_was_pending() {
        let (first, second) = (msg(b'Q', b"select 1\0"), msg(b'Q', b"select 2\0"));
        let mut inbox = Inbox::new(1 << 20);
        feed(&mut inbox, &[&first[..], &second[..]].concat());
        assert!(matches!(inbox.next(|_| true).unwrap(), Some(Piece::Whole(b'Q', m)) if m == &first[..]));
        inbox.unread(&first);
        assert_eq!(inbox.pending(), &[&first[..], &second[..]].concat()[..]);
        assert!(matches!(inbox.next(|_| true).unwrap(), Some(Piece::Whole(b'Q', m)) if m == &first[..]));
        assert!(matches!(inbox.next(|_| true).unwrap(), Some(Piece::Whole(b'Q', m)) if m == &second[..]));
        assert!(inbox.next(|_| true).unwrap().is_none());
        // Into an empty inbox, and read on behind it.
        inbox.unread(&second);
        feed(&mut inbox, &first);
        assert_eq!(inbox.pending(), &[&second[..], &first[..]].concat()[..]);
    }

    #[test]
    fn an_inbox_taken_over_mid_message_hands_out_the_rest_of_it() {
        let mut stream = msg(b'D', &[7; 100]);
        stream.extend(msg(b'Z', b"I"));
        let mut first = Inbox::new(1000);
        feed(&mut first, &stream[..30]);
        assert!(matches!(first.next(|t| t == b'Z').unwrap(), Some(Piece::Start(b'D', m)) if m.len() == 30));
        feed(&mut first, &stream[30..50]);
        let mut second = Inbox::new(1000);
        second.take_over(first.pending(), first.stream_left());
        feed(&mut second, &stream[50..]);
        assert!(matches!(second.next(|t| t == b'Z').unwrap(), Some(Piece::More(m)) if m.len() == stream.len() - 6 - 30));
        assert!(matches!(second.next(|t| t == b'Z').unwrap(), Some(Piece::Whole(b'Z', _))));
    }

    #[test]
    fn whole_and_streamed_messages_in_any_chunking() {
        let mut stream = msg(b'D', &[7; 40]);
        stream.extend(msg(b'Z', b"I"));
        for chunk in 1..stream.len() {
            let mut inbox = Inbox::new(1000);
            let mut got: Vec<(char, usize)> = Vec::new();
            for part in stream.chunks(chunk) {
                feed(&mut inbox, part);
                while let Some(piece) = inbox.next(|t| t == b'Z').unwrap() {
                    match piece {
                        Piece::Whole(t, m) => got.push((t as char, m.len())),
                        Piece::Start(t, m) => got.push((t as char, m.len())),
                        Piece::More(m) => got.last_mut().unwrap().1 += m.len(),
                    }
                }
            }
            assert_eq!(got, vec![('D', 45), ('Z', 6)], "chunk {chunk}");
            assert!(inbox.at_boundary() && inbox.pending().is_empty());
        }
    }

    #[test]
    fn a_run_of_rows_comes_as_one_piece() {
        let mut stream = Vec::new();
        for _ in 0..3 {
            stream.extend(msg(b'D', &[1; 10]));
        }
        stream.extend(msg(b'C', b"SELECT 3\0"));
        let mut inbox = Inbox::new(1000);
        feed(&mut inbox, &stream[..40]); // three rows (45 bytes) cut short
        match inbox.next(|t| t != b'D').unwrap() {
            Some(Piece::Start(b'D', bytes)) => assert_eq!(bytes.len(), 40),
            _ => panic!("expected the rows"),
        }
        assert!(!inbox.at_boundary());
        feed(&mut inbox, &stream[40..]);
        match inbox.next(|t| t != b'D').unwrap() {
            Some(Piece::More(bytes)) => assert_eq!(bytes.len(), 5),
            _ => panic!("expected the rest of the last row"),
        }
        assert!(matches!(inbox.next(|t| t != b'D').unwrap(), Some(Piece::Whole(b'C', _))));
    }

    #[test]
    fn an_empty_inbox_gives_its_buffer_up_and_takes_one_in_to_read() {
        let mut inbox = Inbox::new(1000);
        feed(&mut inbox, &msg(b'Z', b"I")[..3]);
        assert!(inbox.take_buffer().is_none(), "half a message is in it");
        feed(&mut inbox, &msg(b'Z', b"I")[3..]);
        assert!(matches!(inbox.next(|_| true).unwrap(), Some(Piece::Whole(b'Z', _))));
        let buf = inbox.take_buffer().expect("empty now");
        assert_eq!(buf.len(), INITIAL);
        assert!(!inbox.has_buffer() && inbox.take_buffer().is_none());
        // Read into again: with the buffer given back, or a new one.
        inbox.give_buffer(buf);
        assert!(inbox.has_buffer());
        let mut bare = Inbox::new(1000);
        bare.take_buffer();
        feed(&mut bare, &msg(b'Q', b"select 1\0"));
        assert!(matches!(bare.next(|_| true).unwrap(), Some(Piece::Whole(b'Q', _))));
    }

    #[test]
    fn oversized_messages_are_refused() {
        let mut inbox = Inbox::new(10);
        feed(&mut inbox, &msg(b'Q', &[0; 20]));
        assert!(matches!(inbox.next(|_| true), Err(ProtocolError::MessageTooLarge { len: 20, max: 10 })));
    }

    /// Feeds `message` in reads of the inbox's initial size; the length of
    /// the whole message it hands out.
    fn whole_in_chunks(inbox: &mut Inbox, message: &[u8]) -> Option<usize> {
        let mut handed = None;
        for part in message.chunks(INITIAL) {
            feed(inbox, part);
            if let Some(Piece::Whole(_, m)) = inbox.next(|_| true).unwrap() {
                handed = Some(m.len());
            }
        }
        handed
    }

    #[test]
    fn the_buffer_grows_for_a_large_whole_message() {
        let big = msg(b'Q', &[1; 40_000]);
        let mut inbox = Inbox::new(1 << 20);
        assert_eq!(whole_in_chunks(&mut inbox, &big), Some(big.len()));
    }

    #[test]
    fn the_buffer_shrinks_back_once_a_huge_whole_message_is_handed_out() {
        let big = msg(b'D', &[1; 300_000]);
        let mut inbox = Inbox::new(1 << 20);
        assert_eq!(whole_in_chunks(&mut inbox, &big), Some(big.len()));
        assert!(inbox.buf.len() > READ_GROWTH_LIMIT);
        feed(&mut inbox, &msg(b'Z', b"I"));
        assert_eq!(inbox.buf.len(), READ_GROWTH_LIMIT);
        assert!(matches!(inbox.next(|_| true).unwrap(), Some(Piece::Whole(b'Z', _))));
    }
}
