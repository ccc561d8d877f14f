//! A client request that is LISTEN or UNLISTEN work and nothing else, over
//! either protocol: recognising it among the bytes a client sent, and
//! PostgreSQL's answer to it, message for message. Pure: bytes in, bytes out.
//!
//! The simple protocol's is a Query whose text [`statement::parse`]
//! recognises. The extended protocol's are what drivers send for a LISTEN
//! without parameters, all of it already received:
//! - pgjdbc's one-shot: Parse of the unnamed statement (no parameter
//!   types), Bind of the unnamed portal to it, an optional Describe,
//!   Execute, Sync.
//! - asyncpg's two steps: Parse of a named (or the unnamed) statement with
//!   an optional Describe of it, ended by a Flush or a Sync (it "prepares");
//!   later a Bind of that statement, an optional Describe, Execute, Sync.
//!   The session keeps what was prepared ([`KeptStatements`]), and a
//!   Describe or a Close of it is answered too.
//!
//! Anything else (a Parse with parameter types, a Bind with parameters, two
//! Executes, a name the session does not keep, a Parse of a name it keeps,
//! which PostgreSQL refuses) is not recognised, and goes to the server.
//! Messages after the Sync or Flush are fine: they are the next request.

use bytes::BytesMut;

use super::statement::{self, ListenStatement};
use crate::protocol::backend::{self, ErrorFields, TransactionStatus};
use crate::protocol::frame::{parse_header, HEADER_LEN};
use crate::protocol::frontend::{self, Target};
use crate::protocol::names;

/// The LISTEN and UNLISTEN statements a client prepared that the session
/// answered instead of a server, by the client's name (`""`: the unnamed
/// statement). Few: a driver prepares one per channel it listens to.
#[derive(Debug, Default)]
pub struct KeptStatements {
    statements: Vec<(String, ListenStatement)>,
}

/// How many statements a client may keep this way; a Parse past it goes to
/// the server (which pins the client, as before the hub kept any).
pub const MAX_KEPT: usize = 64;

impl KeptStatements {
    pub fn get(&self, name: &str) -> Option<&ListenStatement> {
        self.statements.iter().find(|(n, _)| n == name).map(|(_, s)| s)
    }

    pub fn is_empty(&self) -> bool {
        self.statements.is_empty()
    }

    fn is_full(&self) -> bool {
        self.statements.len() >= MAX_KEPT
    }

    /// Keeps `statement` as `name`, replacing what was kept as it.
    pub fn keep(&mut self, name: &str, statement: ListenStatement) {
        self.forget(name);
        self.statements.push((name.to_owned(), statement));
    }

    pub fn forget(&mut self, name: &str) {
        self.statements.retain(|(n, _)| n != name);
    }

    /// Forgets the names `known` says another owner has now.
    pub fn forget_if(&mut self, mut known: impl FnMut(&str) -> bool) {
        self.statements.retain(|(n, _)| !known(n));
    }
}

/// A recognised request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListenRequest {
    /// The statement it runs (an Execute, or the Query), if it runs one.
    pub runs: Option<ListenStatement>,
    /// The statement it prepares, and the client's name for it.
    pub prepares: Option<(String, ListenStatement)>,
    /// The kept statement it closes.
    pub closes: Option<String>,
    /// It ends with a Flush: PostgreSQL's implicit transaction is still
    /// open, and sends no notification until a Sync ends it.
    pub flushed: bool,
    /// Its messages' answers, one per message.
    replies: Vec<Reply>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reply {
    Query,
    ParseComplete,
    BindComplete,
    DescribeStatement,
    DescribePortal,
    Execute,
    CloseComplete,
    Sync,
    Flush,
}

/// The most messages a recognised request has (Parse, Bind, two Describes,
/// Execute, Sync): a request longer than this is not looked at further.
const MOST_MESSAGES: usize = 6;

/// The request at the front of `pending` (a client's unread bytes, from a
/// message boundary), if it is LISTEN or UNLISTEN work ([`statement::parse`])
/// and nothing else, with `kept` the statements the session answered
/// before. A few compares for anything else.
pub fn listen_request(pending: &[u8], max_body: usize, kept: &KeptStatements) -> Option<ListenRequest> {
    let mut messages = Messages { rest: pending, max_body };
    let (tag, body) = messages.next()?;
    if tag == frontend::QUERY {
        // The text's first word, read off the body (its NUL not searched
        // for: the exchange does that once for what is not LISTEN).
        if !statement::may_be_listen(body) {
            return None;
        }
        let statement = statement::parse(frontend::decode_query(body).ok()?)?;
        return Some(ListenRequest {
            runs: Some(statement),
            prepares: None,
            closes: None,
            flushed: false,
            replies: vec![Reply::Query],
        });
    }
    // Most requests looked at are a Parse of another text: told so before
    // anything is allocated.
    if tag == frontend::PARSE && !parse_may_listen(body) {
        return None;
    }
    let mut request = ListenRequest { runs: None, prepares: None, closes: None, flushed: false, replies: Vec::with_capacity(4) };
    // The statement the request's Bind bound, once it has.
    let mut bound: Option<ListenStatement> = None;
    let (mut tag, mut body) = (tag, body);
    loop {
        let first = request.replies.is_empty();
        let executed = request.replies.last() == Some(&Reply::Execute);
        let closed = request.closes.is_some();
        // After an Execute or a Close, only the end.
        if (executed || closed) && tag != frontend::SYNC && tag != frontend::FLUSH {
            return None;
        }
        let reply = match tag {
            frontend::PARSE if first => {
                let (name, statement) = parsed_listen(body)?;
                if !name.is_empty() && (kept.get(name).is_some() || kept.is_full()) {
                    return None;
                }
                request.prepares = Some((name.to_owned(), statement));
                Reply::ParseComplete
            }
            frontend::BIND if bound.is_none() => {
                let (portal, name, rest) = names::split_bind(body).ok()?;
                if !portal.is_empty() || !binds_no_parameters(rest)? {
                    return None;
                }
                bound = Some(request.statement(name, kept)?.clone());
                Reply::BindComplete
            }
            frontend::DESCRIBE => match names::split_target(body).ok()? {
                (Target::Statement, name) => {
                    request.statement(name, kept)?;
                    Reply::DescribeStatement
                }
                (Target::Portal, "") if bound.is_some() => Reply::DescribePortal,
                (Target::Portal, _) => return None,
            },
            frontend::EXECUTE if bound.is_some() => {
                let (portal, _max_rows) = frontend::decode_execute(body).ok()?;
                if !portal.is_empty() {
                    return None;
                }
                request.runs = bound.clone();
                Reply::Execute
            }
            frontend::CLOSE if first => match names::split_target(body).ok()? {
                (Target::Statement, name) if kept.get(name).is_some() => {
                    request.closes = Some(name.to_owned());
                    Reply::CloseComplete
                }
                _ => return None,
            },
            frontend::SYNC if !first && body.is_empty() => Reply::Sync,
            // An Execute's LISTEN takes effect at the Sync: not looked at.
            frontend::FLUSH if !first && bound.is_none() && body.is_empty() => Reply::Flush,
            _ => return None,
        };
        request.replies.push(reply);
        if matches!(reply, Reply::Sync | Reply::Flush) {
            request.flushed = reply == Reply::Flush;
            // A Bind is run by its Execute, or it is not looked at.
            if bound.is_some() && request.runs.is_none() {
                return None;
            }
            return Some(request);
        }
        if request.replies.len() == MOST_MESSAGES {
            return None;
        }
        (tag, body) = messages.next()?;
    }
}

/// A Parse's name and LISTEN or UNLISTEN statement, if it is one without
/// parameter types.
fn parsed_listen(body: &[u8]) -> Option<(&str, ListenStatement)> {
    if !parse_may_listen(body) {
        return None;
    }
    let (name, rest) = names::split_parse(body).ok()?;
    let sql = names::parse_query(rest);
    // No parameter types: the text, its NUL, a count of 0.
    if rest.len() != sql.len() + 3 || rest[sql.len() + 1..] != [0, 0] {
        return None;
    }
    Some((name, statement::parse(sql)?))
}

/// Whether the Parse `body`'s text may be LISTEN or UNLISTEN
/// ([`statement::may_be_listen`]): a few compares past its name.
fn parse_may_listen(body: &[u8]) -> bool {
    crate::protocol::nul_at(body).is_some_and(|at| statement::may_be_listen(&body[at + 1..]))
}

/// Whether a Bind's parameters (what follows its names, as
/// [`frontend::split_bind_results`] splits it) are none, as a LISTEN takes,
/// with at most one parameter format and at most one result format (more
/// are PostgreSQL's errors for a statement of no parameters and no columns).
fn binds_no_parameters(rest: &[u8]) -> Option<bool> {
    let (params, results) = frontend::split_bind_results(rest).ok()?;
    let formats = params.get(..2)?;
    let none = match formats {
        [0, 0] => params.get(2..) == Some(&[0, 0][..]),
        [0, 1] => params.get(4..) == Some(&[0, 0][..]),
        _ => false,
    };
    Some(none && results.len() <= 1)
}

impl ListenRequest {
    /// How many of the client's messages it is.
    pub fn messages(&self) -> usize {
        self.replies.len()
    }

    /// The statement `name` stands for in this request: the one it parses,
    /// else the kept one.
    fn statement<'a>(&'a self, name: &str, kept: &'a KeptStatements) -> Option<&'a ListenStatement> {
        match &self.prepares {
            Some((parsed, statement)) if parsed == name => Some(statement),
            _ => kept.get(name),
        }
    }

    /// What PostgreSQL answers the request with, outside a transaction
    /// block: each message's answer, the statement's CommandComplete or
    /// `refused` where it failed.
    pub fn answer(&self, out: &mut BytesMut, refused: Option<&ErrorFields>) {
        let completed = |out: &mut BytesMut, statement: &Option<ListenStatement>| match (refused, statement) {
            (Some(e), _) => backend::error_response(out, e),
            (None, Some(statement)) => backend::command_complete(out, statement.command_tag()),
            (None, None) => {}
        };
        for reply in &self.replies {
            match reply {
                Reply::Query => {
                    completed(out, &self.runs);
                    backend::ready_for_query(out, TransactionStatus::Idle);
                }
                Reply::ParseComplete => backend::parse_complete(out),
                Reply::BindComplete => backend::bind_complete(out),
                Reply::DescribeStatement => {
                    backend::parameter_description(out, &[]);
                    backend::no_data(out);
                }
                Reply::DescribePortal => backend::no_data(out),
                Reply::Execute => completed(out, &self.runs),
                Reply::CloseComplete => backend::close_complete(out),
                Reply::Sync => backend::ready_for_query(out, TransactionStatus::Idle),
                Reply::Flush => {}
            }
        }
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

    fn none() -> KeptStatements {
        KeptStatements::default()
    }

    fn recognised(bytes: &[u8], kept: &KeptStatements) -> ListenRequest {
        listen_request(bytes, MAX, kept).expect("recognised")
    }

    /// pgjdbc's request for `execute("LISTEN jobs")`.
    fn one_shot(sql: &str, describe: Option<Target>) -> BytesMut {
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

    /// asyncpg's prepare: Parse, Describe of the statement, Flush.
    fn prepare(name: &str, sql: &str) -> BytesMut {
        let mut out = BytesMut::new();
        frontend::parse(&mut out, name, sql, &[]);
        frontend::describe(&mut out, Target::Statement, name);
        frontend::flush(&mut out);
        out
    }

    /// asyncpg's run of a prepared statement: a parameter format and a
    /// binary result format for no parameters and no columns.
    fn run(name: &str) -> BytesMut {
        let mut out = BytesMut::new();
        frontend::bind(&mut out, "", name, &[1], std::iter::empty(), &[1]);
        frontend::execute(&mut out, "", 0);
        frontend::sync(&mut out);
        out
    }

    fn kept(names: &[(&str, &str)]) -> KeptStatements {
        let mut kept = KeptStatements::default();
        for (name, sql) in names {
            kept.keep(name, statement::parse(sql).unwrap());
        }
        kept
    }

    #[test]
    fn a_lone_simple_query() {
        let mut q = BytesMut::new();
        frontend::query(&mut q, "LISTEN jobs");
        let request = recognised(&q, &none());
        assert_eq!((request.messages(), request.runs), (1, Some(ListenStatement::Listen("jobs".into()))));
        frontend::query(&mut q, "SELECT 1");
        assert!(listen_request(&q, MAX, &none()).is_some(), "the next request is its own");
        let mut q = BytesMut::new();
        frontend::query(&mut q, "LISTEN jobs; SELECT 1");
        assert_eq!(listen_request(&q, MAX, &none()), None);
        // The first word is read off the body, NUL and all.
        for (sql, listens) in [("LISTEN", false), ("LIST", false), ("", false), (" \tlisten x", true), ("unlisten *", true)] {
            let mut q = BytesMut::new();
            frontend::query(&mut q, sql);
            assert_eq!(listen_request(&q, MAX, &none()).is_some(), listens, "{sql:?}");
        }
    }

    #[test]
    fn a_one_shot_request_with_or_without_describe() {
        for describe in [None, Some(Target::Portal), Some(Target::Statement)] {
            let request = recognised(&one_shot("UNLISTEN \"A b\"", describe), &none());
            assert_eq!(request.runs, Some(ListenStatement::Unlisten("A b".into())));
            assert_eq!(request.prepares, Some((String::new(), ListenStatement::Unlisten("A b".into()))));
            assert_eq!(request.messages(), 4 + usize::from(describe.is_some()));
            assert!(!request.flushed);
        }
    }

    #[test]
    fn a_prepared_listen_then_its_runs() {
        for name in ["__asyncpg_stmt_1__", ""] {
            let request = recognised(&prepare(name, "LISTEN \"jobs\""), &none());
            assert_eq!(request.prepares, Some((name.to_owned(), ListenStatement::Listen("jobs".into()))));
            assert_eq!((request.messages(), request.runs, request.flushed), (3, None, true));
            let kept = kept(&[(name, "LISTEN \"jobs\"")]);
            let request = recognised(&run(name), &kept);
            assert_eq!(
                (request.messages(), request.runs, request.prepares),
                (3, Some(ListenStatement::Listen("jobs".into())), None)
            );
            assert!(!request.flushed);
            assert_eq!(listen_request(&run(name), MAX, &none()), None, "not kept: the server's error");
        }
        let mut synced = BytesMut::new();
        frontend::parse(&mut synced, "s", "UNLISTEN *", &[]);
        frontend::sync(&mut synced);
        let request = recognised(&synced, &none());
        assert_eq!((request.prepares, request.flushed), (Some(("s".to_owned(), ListenStatement::UnlistenAll)), false));
    }

    #[test]
    fn a_kept_statement_is_described_and_closed() {
        let kept = kept(&[("s", "LISTEN a")]);
        for end in [frontend::sync, frontend::flush] {
            let mut describe = BytesMut::new();
            frontend::describe(&mut describe, Target::Statement, "s");
            end(&mut describe);
            assert_eq!(recognised(&describe, &kept).messages(), 2);
            let mut close = BytesMut::new();
            frontend::close(&mut close, Target::Statement, "s");
            end(&mut close);
            assert_eq!(recognised(&close, &kept).closes.as_deref(), Some("s"));
            let mut other = BytesMut::new();
            frontend::close(&mut other, Target::Statement, "t");
            end(&mut other);
            assert_eq!(listen_request(&other, MAX, &kept), None, "not kept: the exchange's");
        }
    }

    #[test]
    fn anything_more_or_less_goes_to_the_server() {
        let kept = kept(&[("s", "LISTEN a")]);
        let whole = one_shot("LISTEN jobs", Some(Target::Portal));
        for cut in 0..whole.len() {
            assert_eq!(listen_request(&whole[..cut], MAX, &none()), None, "not all received: {cut} bytes");
        }
        let mut again = BytesMut::new();
        frontend::parse(&mut again, "s", "LISTEN b", &[]);
        frontend::sync(&mut again);
        assert_eq!(listen_request(&again, MAX, &kept), None, "a kept name parsed again: PostgreSQL's 42P05");
        let mut typed = BytesMut::new();
        frontend::parse(&mut typed, "", "LISTEN jobs", &[23]);
        frontend::sync(&mut typed);
        assert_eq!(listen_request(&typed, MAX, &none()), None, "parameter types");
        let mut with_params = BytesMut::new();
        frontend::parse(&mut with_params, "", "LISTEN jobs", &[]);
        frontend::bind(&mut with_params, "", "", &[], [Some(&b"1"[..])].into_iter(), &[]);
        frontend::execute(&mut with_params, "", 0);
        frontend::sync(&mut with_params);
        assert_eq!(listen_request(&with_params, MAX, &none()), None);
        let mut formats = BytesMut::new();
        frontend::bind(&mut formats, "", "s", &[0, 0], std::iter::empty(), &[]);
        frontend::execute(&mut formats, "", 0);
        frontend::sync(&mut formats);
        assert_eq!(listen_request(&formats, MAX, &kept), None, "two parameter formats: PostgreSQL's error");
        let mut results = BytesMut::new();
        frontend::bind(&mut results, "", "s", &[], std::iter::empty(), &[0, 1]);
        frontend::execute(&mut results, "", 0);
        frontend::sync(&mut results);
        assert_eq!(listen_request(&results, MAX, &kept), None, "two result formats: PostgreSQL's error");
        let mut flushed = BytesMut::new();
        frontend::bind(&mut flushed, "", "s", &[], std::iter::empty(), &[]);
        frontend::execute(&mut flushed, "", 0);
        frontend::flush(&mut flushed);
        assert_eq!(listen_request(&flushed, MAX, &kept), None, "run, not committed");
        let mut unrun = BytesMut::new();
        frontend::bind(&mut unrun, "", "s", &[], std::iter::empty(), &[]);
        frontend::sync(&mut unrun);
        assert_eq!(listen_request(&unrun, MAX, &kept), None, "bound, not run");
        let mut portal = BytesMut::new();
        frontend::bind(&mut portal, "p", "s", &[], std::iter::empty(), &[]);
        frontend::execute(&mut portal, "p", 0);
        frontend::sync(&mut portal);
        assert_eq!(listen_request(&portal, MAX, &kept), None, "a named portal");
        let mut two = BytesMut::new();
        frontend::parse(&mut two, "", "LISTEN jobs", &[]);
        frontend::bind(&mut two, "", "", &[], std::iter::empty(), &[]);
        frontend::execute(&mut two, "", 0);
        frontend::execute(&mut two, "", 0);
        frontend::sync(&mut two);
        assert_eq!(listen_request(&two, MAX, &none()), None);
        let mut lone = BytesMut::new();
        frontend::sync(&mut lone);
        assert_eq!(listen_request(&lone, MAX, &kept), None);
        assert_eq!(listen_request(&one_shot("SELECT 1", None), MAX, &none()), None);
        let mut full = KeptStatements::default();
        for i in 0..MAX_KEPT {
            full.keep(&format!("s{i}"), ListenStatement::UnlistenAll);
        }
        assert_eq!(listen_request(&prepare("t", "LISTEN a"), MAX, &full), None, "past MAX_KEPT");
        assert!(listen_request(&prepare("", "LISTEN a"), MAX, &full).is_some(), "the unnamed statement is replaced");
    }

    #[test]
    fn the_answer_is_postgresqls() {
        let request = recognised(&one_shot("LISTEN jobs", Some(Target::Statement)), &none());
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

        let mut out = BytesMut::new();
        recognised(&prepare("s", "LISTEN jobs"), &none()).answer(&mut out, None);
        let mut expected = BytesMut::new();
        backend::parse_complete(&mut expected);
        backend::parameter_description(&mut expected, &[]);
        backend::no_data(&mut expected);
        assert_eq!(out, expected, "nothing for the Flush");

        let refused = ErrorFields::error("08006", "no");
        let mut out = BytesMut::new();
        recognised(&run("s"), &kept(&[("s", "LISTEN jobs")])).answer(&mut out, Some(&refused));
        let mut expected = BytesMut::new();
        backend::bind_complete(&mut expected);
        backend::error_response(&mut expected, &refused);
        backend::ready_for_query(&mut expected, TransactionStatus::Idle);
        assert_eq!(out, expected);

        let mut close = BytesMut::new();
        frontend::close(&mut close, Target::Statement, "s");
        frontend::sync(&mut close);
        let mut out = BytesMut::new();
        recognised(&close, &kept(&[("s", "LISTEN jobs")])).answer(&mut out, None);
        let mut expected = BytesMut::new();
        backend::close_complete(&mut expected);
        backend::ready_for_query(&mut expected, TransactionStatus::Idle);
        assert_eq!(out, expected);

        let mut q = BytesMut::new();
        frontend::query(&mut q, "UNLISTEN *");
        let mut out = BytesMut::new();
        recognised(&q, &none()).answer(&mut out, Some(&refused));
        let mut expected = BytesMut::new();
        backend::error_response(&mut expected, &refused);
        backend::ready_for_query(&mut expected, TransactionStatus::Idle);
        assert_eq!(out, expected);
    }
}
