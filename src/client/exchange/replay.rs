//! A request sent again because the statement pglane mapped its Parse onto
//! turned out stale on the server.
//!
//! pglane answers a client's Parse itself when the server connection has
//! the text prepared already (see `statements`). DDL pglane did not see
//! (run on the server directly, or through another pooler) can leave that
//! statement stale: a type it was resolved to dropped and created again
//! (an enum, an extension's type: PostgreSQL answers every Bind of it with
//! XX000 "cache lookup failed for type N"), or its result type changed
//! (0A000). A direct connection never gives either to a statement parsed
//! after the DDL, and the client's was, as far as it can tell.
//!
//! When the client's request is that Parse with its Bind, Describe of the
//! portal, Execute and Sync, sent outside a transaction block with nothing
//! else of the client's in flight, nothing of it ran when the Bind failed:
//! pglane drops the error and its ReadyForQuery and sends the request again,
//! its Parse prepared afresh (the client has its ParseComplete already).
//! Any other shape of request (a Describe of the statement, which pglane
//! answered from a description that may be stale, a second statement, a
//! Flush, a transaction block) gets the server's error, as a long-lived
//! connection's own statement would.
//!
//! This owns the copy of the request kept for that and the state of the
//! attempt; the exchange decides when to start, and what the server's
//! answers mean.

use bytes::BytesMut;

use crate::protocol::frame::HEADER_LEN;
use crate::protocol::frontend;

/// The largest request kept: a larger one gets the server's error (its
/// copy would cost more than the rare second try is worth).
const KEPT_AT_MOST: usize = 16 * 1024;

/// Boxed, and only once a client sends a request that may go again: an
/// idle client's exchange stays as small as it was.
#[derive(Debug, Default)]
pub(super) struct Replay(Option<Box<Kept>>);

#[derive(Debug, Default)]
struct Kept {
    state: State,
    /// The registry id of the statement the Parse was mapped onto.
    statement: u64,
    /// The client's messages, as it sent them, from its Parse on; once the
    /// Bind failed, the server's error (whole) after them.
    messages: BytesMut,
    /// Where the request ends in `messages` (and the error begins).
    request_len: usize,
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum State {
    #[default]
    Off,
    /// The Parse is kept; the request's other messages are being added.
    Recording,
    /// The request is whole (its Sync is kept) and unanswered.
    Recorded,
    /// Its Bind failed stale: send it again at its ReadyForQuery.
    Stale,
}

impl Kept {
    /// The client's Parse (`message`, whole) of statement `statement`,
    /// answered by pglane, starts a request that may be sent again.
    pub fn start(&mut self, statement: u64, message: &[u8]) {
        if message.len() > KEPT_AT_MOST {
            self.state = State::Off;
            return;
        }
        self.messages.clear();
        self.messages.extend_from_slice(message);
        self.statement = statement;
        self.state = State::Recording;
    }

    /// A client message (`tag`, `message` whole). One after the Sync, or
    /// one a plain request does not have, ends the attempt.
    #[inline]
    pub fn client_sent(&mut self, tag: u8, message: &[u8]) {
        match self.state {
            State::Off => {}
            State::Recording if may_follow_the_parse(tag, message) && self.messages.len() + message.len() <= KEPT_AT_MOST => {
                self.messages.extend_from_slice(message);
                if tag == frontend::SYNC {
                    self.state = State::Recorded;
                }
            }
            _ => self.state = State::Off,
        }
    }

    /// A server message answering the request (anything but the stale
    /// error) came: something of it ran, or went to the client.
    #[inline]
    pub fn answered(&mut self) {
        if self.state != State::Stale {
            self.state = State::Off;
        }
    }

    /// Whether the request is whole and nothing of it has been answered.
    #[inline]
    pub fn is_recorded(&self) -> bool {
        self.state == State::Recorded
    }

    /// The server refused the Bind of `statement` as stale (`error`, the
    /// whole ErrorResponse): returns whether the error is held back for a
    /// second try (the Bind was of the statement the Parse was mapped onto).
    pub fn bind_failed_stale(&mut self, statement: u64, error: &[u8]) -> bool {
        if self.state != State::Recorded || statement != self.statement {
            self.state = State::Off;
            return false;
        }
        self.request_len = self.messages.len();
        self.messages.extend_from_slice(error);
        self.state = State::Stale;
        true
    }

    pub fn is_stale(&self) -> bool {
        self.state == State::Stale
    }

    /// The held-back error, for a request that cannot be sent again after
    /// all; the attempt ends.
    pub fn give_up(&mut self) -> &[u8] {
        self.state = State::Off;
        &self.messages[self.request_len.min(self.messages.len())..]
    }

    /// Forgets the request (the server connection goes); lets a large
    /// buffer go.
    pub fn clear(&mut self) {
        self.state = State::Off;
        if self.messages.capacity() > KEPT_AT_MOST {
            self.messages = BytesMut::new();
        }
        self.messages.clear();
    }

    /// The request to send again: its Parse and the messages after it. The
    /// attempt ends (a request sent again is not tried a third time).
    pub fn take(&mut self) -> Option<(BytesMut, BytesMut)> {
        if std::mem::take(&mut self.state) != State::Stale {
            return None;
        }
        let len = parse_len(&self.messages)?;
        let mut messages = std::mem::take(&mut self.messages);
        messages.truncate(self.request_len);
        let parse = messages.split_to(len);
        Some((parse, messages))
    }
}

impl Replay {
    pub fn start(&mut self, statement: u64, message: &[u8]) {
        self.0.get_or_insert_with(Default::default).start(statement, message);
    }

    #[inline]
    pub fn client_sent(&mut self, tag: u8, message: &[u8]) {
        if let Some(kept) = self.0.as_deref_mut() {
            kept.client_sent(tag, message);
        }
    }

    #[inline]
    pub fn answered(&mut self) {
        if let Some(kept) = self.0.as_deref_mut() {
            kept.answered();
        }
    }

    #[inline]
    pub fn is_recorded(&self) -> bool {
        self.0.as_deref().is_some_and(Kept::is_recorded)
    }

    pub fn bind_failed_stale(&mut self, statement: u64, error: &[u8]) -> bool {
        self.0.as_deref_mut().is_some_and(|k| k.bind_failed_stale(statement, error))
    }

    pub fn is_stale(&self) -> bool {
        self.0.as_deref().is_some_and(Kept::is_stale)
    }

    pub fn give_up(&mut self) -> &[u8] {
        match self.0.as_deref_mut() {
            Some(kept) => kept.give_up(),
            None => &[],
        }
    }

    pub fn clear(&mut self) {
        if let Some(kept) = self.0.as_deref_mut() {
            kept.clear();
        }
    }

    pub fn take(&mut self) -> Option<(BytesMut, BytesMut)> {
        self.0.as_deref_mut()?.take()
    }
}

/// The messages a plain request has after its Parse: Bind, Describe of a
/// portal, Execute and Sync.
fn may_follow_the_parse(tag: u8, message: &[u8]) -> bool {
    match tag {
        frontend::BIND | frontend::EXECUTE | frontend::SYNC => true,
        frontend::DESCRIBE => message.get(HEADER_LEN) == Some(&b'P'),
        _ => false,
    }
}

/// The length of the Parse at the front of `messages`.
fn parse_len(messages: &[u8]) -> Option<usize> {
    let header = crate::protocol::frame::parse_header(messages, usize::MAX).ok().flatten()?;
    let len = HEADER_LEN + header.body_len;
    (messages.first() == Some(&frontend::PARSE) && messages.len() >= len).then_some(len)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::frontend::Target;

    fn request(with: impl Fn(&mut BytesMut)) -> Vec<(u8, Vec<u8>)> {
        let mut out = BytesMut::new();
        with(&mut out);
        let mut messages = Vec::new();
        let mut rest = out;
        while let Some(m) = crate::protocol::frame::split_message(&mut rest, 1 << 20).unwrap() {
            let mut whole = vec![m.tag];
            whole.extend_from_slice(&((m.body.len() + 4) as i32).to_be_bytes());
            whole.extend_from_slice(&m.body);
            messages.push((m.tag, whole));
        }
        messages
    }

    fn plain(out: &mut BytesMut) {
        frontend::parse(out, "", "SELECT $1::mood", &[]);
        frontend::bind(out, "", "", &[], [Some(&b"sad"[..])].into_iter(), &[]);
        frontend::describe(out, Target::Portal, "");
        frontend::execute(out, "", 0);
        frontend::sync(out);
    }

    fn record(replay: &mut Replay, messages: &[(u8, Vec<u8>)]) {
        replay.start(7, &messages[0].1);
        for (tag, m) in &messages[1..] {
            replay.client_sent(*tag, m);
        }
    }

    #[test]
    fn a_plain_request_is_sent_again_whole_once() {
        let messages = request(plain);
        let mut replay = Replay::default();
        record(&mut replay, &messages);
        assert!(replay.is_recorded());
        assert!(replay.bind_failed_stale(7, b"E-error"));
        assert!(replay.is_stale());
        replay.answered();
        assert!(replay.is_stale(), "the error's own ReadyForQuery does not end it");
        let (parse, rest) = replay.take().expect("sent again");
        assert_eq!(&parse[..], &messages[0].1[..]);
        assert_eq!(rest.to_vec(), messages[1..].iter().flat_map(|(_, m)| m.clone()).collect::<Vec<_>>());
        assert!(replay.take().is_none(), "once");
    }

    #[test]
    fn anything_else_ends_the_attempt() {
        let whole = request(plain);
        // An answer came before the error: something ran.
        let mut replay = Replay::default();
        record(&mut replay, &whole);
        replay.answered();
        assert!(!replay.bind_failed_stale(7, b"E"));
        // The Bind of another statement failed.
        record(&mut replay, &whole);
        assert!(!replay.bind_failed_stale(8, b"E"));
        assert!(replay.take().is_none());
        // A message after the Sync: the client's next request is in flight.
        record(&mut replay, &whole);
        replay.client_sent(whole[0].0, &whole[0].1);
        assert!(!replay.is_recorded());
        // Not whole yet.
        replay.start(7, &whole[0].1);
        replay.client_sent(whole[1].0, &whole[1].1);
        assert!(!replay.bind_failed_stale(7, b"E"));
        // A Describe of the statement, a Flush, a second Parse.
        for odd in [
            request(|o| frontend::describe(o, Target::Statement, "")),
            request(frontend::flush),
            request(|o| frontend::parse(o, "", "SELECT 1", &[])),
        ] {
            replay.start(7, &whole[0].1);
            replay.client_sent(odd[0].0, &odd[0].1);
            for (tag, m) in &whole[1..] {
                replay.client_sent(*tag, m);
            }
            assert!(!replay.is_recorded(), "{odd:?}");
        }
    }

    #[test]
    fn a_large_request_is_not_kept() {
        let big = "x".repeat(KEPT_AT_MOST);
        let large = request(|o| frontend::parse(o, "", &format!("SELECT '{big}'"), &[]));
        let mut replay = Replay::default();
        replay.start(7, &large[0].1);
        let whole = request(plain);
        for (tag, m) in &whole[1..] {
            replay.client_sent(*tag, m);
        }
        assert!(!replay.is_recorded());
        // A large Bind (a parameter of 16 KiB) ends it too.
        let bind = request(|o| frontend::bind(o, "", "", &[], [Some(big.as_bytes())].into_iter(), &[]));
        replay.start(7, &whole[0].1);
        replay.client_sent(bind[0].0, &bind[0].1);
        assert!(!replay.is_recorded());
        replay.clear();
        assert!(replay.0.as_ref().unwrap().messages.capacity() <= KEPT_AT_MOST);
    }

    #[test]
    fn a_request_that_cannot_go_again_gets_the_error() {
        let mut replay = Replay::default();
        record(&mut replay, &request(plain));
        assert!(replay.bind_failed_stale(7, b"E-error"));
        assert_eq!(replay.give_up(), b"E-error");
        assert!(replay.take().is_none());
    }
}
