//! A client request that is one LISTEN or UNLISTEN and nothing else, over
//! either protocol: recognising it among the bytes a client sent, and
//! PostgreSQL's answer to it. Pure: bytes in, bytes out.
//!
//! The simple protocol's is a Query whose text [`statement::parse`]
//! recognises. The extended protocol's is what pgjdbc sends for
//! `Statement.execute("LISTEN x")`, and most drivers for a query without
//! parameters: Parse of the unnamed statement (no parameter types), Bind of
//! the unnamed portal to it (no parameters, at most one result format),
//! an optional Describe of either, Execute, Sync; all of it already
//! received. Anything else (a named statement, a Flush, messages after the
//! Sync are fine: they are the next request) is not recognised, and goes
//! to the server.

use bytes::BytesMut;

use super::statement::{self, ListenStatement};
use crate::protocol::backend::{self, ErrorFields, TransactionStatus};
use crate::protocol::frame::{parse_header, HEADER_LEN};
use crate::protocol::frontend::{self, Target};
use crate::protocol::names;

/// A recognised request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListenRequest {
    pub statement: ListenStatement,
    /// How many of the client's messages it is.
    pub messages: usize,
    pub protocol: Protocol,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    Simple,
    /// `describe`: what the request's Describe named, if it had one.
    Extended {
        describe: Option<Target>,
    },
}

/// The request at the front of `pending` (a client's unread bytes, from a
/// message boundary), if it is one LISTEN or UNLISTEN ([`statement::parse`])
/// and nothing else. A few compares for anything else.
pub fn listen_request(pending: &[u8], max_body: usize) -> Option<ListenRequest> {
    let mut messages = Messages { rest: pending, max_body };
    let (tag, body) = messages.next()?;
    match tag {
        frontend::QUERY => {
            let text = names::query_bytes(body);
            if !statement::may_be_listen(text) {
                return None;
            }
            let statement = statement::parse(frontend::decode_query(body).ok()?)?;
            Some(ListenRequest { statement, messages: 1, protocol: Protocol::Simple })
        }
        frontend::PARSE => {
            // The unnamed statement: an empty name, then the text.
            if body.first() != Some(&0) || !statement::may_be_listen(&body[1..]) {
                return None;
            }
            let (_, rest) = names::split_parse(body).ok()?;
            let sql = names::parse_query(rest);
            // No parameter types: the text, its NUL, a count of 0.
            if rest.len() != sql.len() + 3 {
                return None;
            }
            let statement = statement::parse(sql)?;
            let (tag, body) = messages.next()?;
            let (portal, bound, rest) = names::split_bind(body).ok().filter(|_| tag == frontend::BIND)?;
            let (params, formats) = frontend::split_bind_results(rest).ok()?;
            if !portal.is_empty() || !bound.is_empty() || params != [0, 0, 0, 0] || formats.len() > 1 {
                return None;
            }
            let (mut tag, mut body) = messages.next()?;
            let mut describe = None;
            if tag == frontend::DESCRIBE {
                let (target, name) = names::split_target(body).ok()?;
                if !name.is_empty() {
                    return None;
                }
                describe = Some(target);
                (tag, body) = messages.next()?;
            }
            let (portal, _max_rows) = frontend::decode_execute(body).ok().filter(|_| tag == frontend::EXECUTE)?;
            let (tag, body) = messages.next()?;
            if !portal.is_empty() || tag != frontend::SYNC || !body.is_empty() {
                return None;
            }
            let messages = if describe.is_some() { 5 } else { 4 };
            Some(ListenRequest { statement, messages, protocol: Protocol::Extended { describe } })
        }
        _ => None,
    }
}

impl ListenRequest {
    /// What PostgreSQL answers the request with, outside a transaction
    /// block: its CommandComplete, or `refused` where the statement failed.
    pub fn answer(&self, out: &mut BytesMut, refused: Option<&ErrorFields>) {
        if let Protocol::Extended { describe } = self.protocol {
            backend::parse_complete(out);
            backend::bind_complete(out);
            if describe == Some(Target::Statement) {
                backend::parameter_description(out, &[]);
            }
            if describe.is_some() {
                backend::no_data(out);
            }
        }
        match refused {
            Some(e) => backend::error_response(out, e),
            None => backend::command_complete(out, self.statement.command_tag()),
        }
        backend::ready_for_query(out, TransactionStatus::Idle);
    }
}

/// Whole messages from the front of a buffer, as (tag, body).
struct Messages<'a> {
    rest: &'a [u8],
    max_body: usize,
}

impl<'a> Messages<'a> {
    fn next(&mut self) -> Option<(u8, &'a [u8])> {
        let header = parse_header(self.rest, self.max_body).ok()??;
        let body = self.rest.get(HEADER_LEN..HEADER_LEN + header.body_len)?;
        self.rest = &self.rest[HEADER_LEN + header.body_len..];
        Some((header.tag, body))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAX: usize = 1 << 20;

    /// pgjdbc's request for `execute("LISTEN jobs")`.
    fn extended(sql: &str, describe: Option<Target>) -> BytesMut {
        let mut out = BytesMut::new();
        frontend::parse(&mut out, "", sql, &[]);
        frontend::bind(&mut out, "", "", &[], std::iter::empty(), &[]);
        if let Some(target) = describe {
            frontend::describe(&mut out, target, "");
        }
        frontend::execute(&mut out, "", 0);
        frontend::sync(&mut out);
        out
    }

    #[test]
    fn a_lone_simple_query() {
        let mut q = BytesMut::new();
        frontend::query(&mut q, "LISTEN jobs");
        let request = listen_request(&q, MAX).unwrap();
        assert_eq!((request.statement, request.messages), (ListenStatement::Listen("jobs".into()), 1));
        frontend::query(&mut q, "SELECT 1");
        assert!(listen_request(&q, MAX).is_some(), "the next request is its own");
        let mut q = BytesMut::new();
        frontend::query(&mut q, "LISTEN jobs; SELECT 1");
        assert_eq!(listen_request(&q, MAX), None);
    }

    #[test]
    fn a_lone_extended_request_with_or_without_describe() {
        for describe in [None, Some(Target::Portal), Some(Target::Statement)] {
            let request = listen_request(&extended("UNLISTEN \"A b\"", describe), MAX).unwrap();
            assert_eq!(request.statement, ListenStatement::Unlisten("A b".into()));
            assert_eq!(request.protocol, Protocol::Extended { describe });
            assert_eq!(request.messages, 4 + usize::from(describe.is_some()));
        }
    }

    #[test]
    fn anything_more_or_less_goes_to_the_server() {
        let whole = extended("LISTEN jobs", Some(Target::Portal));
        for cut in 0..whole.len() {
            assert_eq!(listen_request(&whole[..cut], MAX), None, "not all received: {cut} bytes");
        }
        let mut named = BytesMut::new();
        frontend::parse(&mut named, "s1", "LISTEN jobs", &[]);
        assert_eq!(listen_request(&named, MAX), None);
        let mut typed = BytesMut::new();
        frontend::parse(&mut typed, "", "LISTEN jobs", &[23]);
        assert_eq!(listen_request(&typed, MAX), None, "parameter types");
        let mut with_params = BytesMut::new();
        frontend::parse(&mut with_params, "", "LISTEN jobs", &[]);
        frontend::bind(&mut with_params, "", "", &[], [Some(&b"1"[..])].into_iter(), &[]);
        frontend::execute(&mut with_params, "", 0);
        frontend::sync(&mut with_params);
        assert_eq!(listen_request(&with_params, MAX), None);
        let mut flushed = BytesMut::new();
        frontend::parse(&mut flushed, "", "LISTEN jobs", &[]);
        frontend::flush(&mut flushed);
        assert_eq!(listen_request(&flushed, MAX), None);
        let mut two = BytesMut::new();
        frontend::parse(&mut two, "", "LISTEN jobs", &[]);
        frontend::bind(&mut two, "", "", &[], std::iter::empty(), &[]);
        frontend::execute(&mut two, "", 0);
        frontend::execute(&mut two, "", 0);
        frontend::sync(&mut two);
        assert_eq!(listen_request(&two, MAX), None);
        assert_eq!(listen_request(&extended("SELECT 1", None), MAX), None);
    }

    #[test]
    fn the_answer_is_postgresqls() {
        let request = listen_request(&extended("LISTEN jobs", Some(Target::Statement)), MAX).unwrap();
        let mut out = BytesMut::new();
        request.answer(&mut out, None);
        let mut expected = BytesMut::new();
        backend::parse_complete(&mut expected);
        backend::bind_complete(&mut expected);
        backend::parameter_description(&mut expected, &[]);
        backend::no_data(&mut expected);
        backend::command_complete(&mut expected, "LISTEN");
        backend::ready_for_query(&mut expected, TransactionStatus::Idle);
        assert_eq!(out, expected);
        let mut q = BytesMut::new();
        frontend::query(&mut q, "UNLISTEN *");
        let refused = ErrorFields::error("08006", "no");
        let mut out = BytesMut::new();
        listen_request(&q, MAX).unwrap().answer(&mut out, Some(&refused));
        let mut expected = BytesMut::new();
        backend::error_response(&mut expected, &refused);
        backend::ready_for_query(&mut expected, TransactionStatus::Idle);
        assert_eq!(out, expected);
    }
}
