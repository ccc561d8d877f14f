//! The exchange, message by message, against statements and settings held
//! in memory (no server).

use super::*;
use crate::prepare::auto::Decision;
use crate::prepare::auto::{Job, Lookup, PassThrough};
use crate::prepare::lexer::{LexOptions, Lexed};
use crate::prepare::Context;
use crate::protocol::frame::split_message;
use crate::settings::Value;
use rewrite::{bound_parameter, original_error_fields};
use std::time::Instant;

mod auto_prepare;

/// The state one client and its server connection share, for tests.
struct Sides {
    registry: Registry,
    client: ClientStatements,
    server: ServerStatements,
    client_settings: Settings,
    server_settings: Settings,
}

impl Sides {
    fn new() -> Sides {
        Sides {
            registry: Registry::new(0, 100),
            client: ClientStatements::new(100),
            server: ServerStatements::new(100),
            client_settings: Settings::default(),
            server_settings: Settings::default(),
        }
    }

    fn st(&mut self) -> Statements<'_> {
        Statements {
            registry: &self.registry,
            client: &mut self.client,
            server: &mut self.server,
            client_settings: &mut self.client_settings,
            server_settings: &mut self.server_settings,
            negotiation: None,
        }
    }

    /// Makes `sql`'s shape validated, as the validator would (its hash
    /// keyed as this thread's relays key theirs).
    fn validate(&self, sql: &str) -> Rc<Statement> {
        let mut lexed = Lexed::for_this_shard();
        lexed.lex(sql, LexOptions::default()).unwrap();
        let rewritten = lexed.rewritten(sql);
        let (hash, types) = (lexed.shape_hash(), lexed.param_types());
        let job = |epoch| Job {
            context: Context::DEFAULT,
            settings: Settings::default(),
            hash,
            sql: rewritten.as_str().into(),
            param_types: types.into(),
            original: sql.into(),
            options: LexOptions::default(),
            epoch,
        };
        if matches!(self.registry.shapes.lookup(Context::DEFAULT, hash, &rewritten, types, Instant::now), Lookup::Miss) {
            assert_eq!(self.registry.shapes.note(Context::DEFAULT, job, hash, &rewritten, types, 1), PassThrough::Validating);
        }
        let waker = std::task::Waker::noop();
        let queued = loop {
            match self.registry.shapes.poll_job(&mut std::task::Context::from_waker(waker)) {
                std::task::Poll::Ready(job) if *job.sql == *rewritten => break job,
                std::task::Poll::Ready(_) => {}
                std::task::Poll::Pending => panic!("{sql}: not queued"),
            }
        };
        let mut parse = BytesMut::new();
        frontend::parse(&mut parse, "", &rewritten, types);
        let (_, key) = names::split_parse(&parse[HEADER_LEN..]).unwrap();
        let statement = self.registry.register(Context::DEFAULT, key);
        statement.validated.set(true);
        assert!(self.registry.shapes.decide(&queued, Decision::Rewrite(statement.clone())));
        statement
    }
}

fn messages(mut bytes: BytesMut) -> Vec<(u8, Vec<u8>)> {
    let mut out = Vec::new();
    while let Some(m) = split_message(&mut bytes, 1 << 20).unwrap() {
        out.push((m.tag, m.body.to_vec()));
    }
    out
}

fn tags(messages: &[(u8, Vec<u8>)]) -> String {
    messages.iter().map(|(t, _)| *t as char).collect()
}

fn whole(tag: u8, body: &[u8]) -> Vec<u8> {
    let mut m = vec![tag];
    m.extend_from_slice(&((body.len() + 4) as i32).to_be_bytes());
    m.extend_from_slice(body);
    m
}

/// Sends the client's simple query; returns what went to the server.
fn query(ex: &mut Exchange, sides: &mut Sides, sql: &str) -> Vec<(u8, Vec<u8>)> {
    let mut q = BytesMut::new();
    frontend::query(&mut q, sql);
    let (mut to_server, mut to_client) = (BytesMut::new(), BytesMut::new());
    ex.from_client(frontend::QUERY, &q, &mut sides.st(), &mut to_server);
    ex.client_messages_taken(&mut to_client);
    assert!(to_client.is_empty());
    messages(to_server)
}

/// Server messages handed over whole (as the relay does while
/// `rows_need_whole` says so); returns what the client got.
fn reply_whole(ex: &mut Exchange, sides: &mut Sides, replies: &[(u8, &[u8])]) -> Vec<(u8, Vec<u8>)> {
    let mut to_client = BytesMut::new();
    for (tag, body) in replies {
        ex.from_server(*tag, &whole(*tag, body), &mut sides.st(), &mut to_client);
    }
    messages(to_client)
}

fn query_text(message: &(u8, Vec<u8>)) -> String {
    assert_eq!(message.0, frontend::QUERY);
    frontend::decode_query(&message.1).unwrap().to_owned()
}

#[test]
fn startup_settings_align_hidden_and_reset_realigns_before_the_next_message() {
    let mut sides = Sides::new();
    sides.client_settings = Settings::from_startup_values(&[("search_path".into(), "app, public".into())]);
    let mut ex = Exchange::default();
    let mut to_server = BytesMut::new();
    ex.align_settings(&sides.client_settings, &mut sides.server_settings, false, &mut to_server);
    let sent = messages(to_server);
    assert_eq!(query_text(&sent[0]), "SELECT pg_catalog.set_config('search_path', 'app, public', false);");
    assert!(ex.rows_need_whole(), "set_config's row must not stream to the client");
    let row_description = [0u8, 1, b's', 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 25, 255, 255, 255, 255, 255, 255, 0, 0];
    let got = reply_whole(
        &mut ex,
        &mut sides,
        &[(b'T', &row_description), (b'D', b"\0\x01\0\0\0\x03app"), (b'C', b"SELECT 1\0"), (b'Z', b"I")],
    );
    assert!(got.is_empty(), "{got:?}");
    assert!(!ex.rows_need_whole());

    // RESET goes back to the startup value: the server's default there,
    // so pglane sets it again ahead of the client's next message.
    assert_eq!(tags(&query(&mut ex, &mut sides, "RESET search_path")), "Q");
    assert_eq!(tags(&reply_whole(&mut ex, &mut sides, &[(b'C', b"RESET\0"), (b'Z', b"I")])), "CZ");
    assert_eq!(sides.client_settings.get("search_path"), Some(&Value::Plain("app, public".into())));
    let sent = query(&mut ex, &mut sides, "select 1");
    assert_eq!(tags(&sent), "QQ");
    assert!(query_text(&sent[0]).contains("set_config('search_path'"));
    assert_eq!(query_text(&sent[1]), "select 1");
    assert!(sides.server_settings.same_values(&sides.client_settings));
}

/// asyncpg prepares again after 0A000 with Parse, Describe and Flush (no
/// Sync). When the statement is known, pglane answers both itself; if the
/// server connection it got needed its settings aligned first, those
/// answers wait behind the alignment's replies and must go out with its
/// ReadyForQuery, or the client, which sends nothing more until answered,
/// waits forever.
#[test]
fn answers_queued_behind_an_alignment_go_out_with_its_ready_for_query() {
    let mut sides = Sides::new();
    let mut ex = Exchange::new(None);
    prepare_and_describe_s1(&mut ex, &mut sides);

    // The next transaction's server connection has other settings.
    ex.reset();
    sides.client_settings.set("TimeZone", Value::Reported("UTC".into()));
    let mut to_server = BytesMut::new();
    ex.align_settings(&sides.client_settings, &mut sides.server_settings, false, &mut to_server);
    assert_eq!(tags(&messages(to_server)), "Q");
    let mut p = BytesMut::new();
    frontend::parse(&mut p, "s2", "SELECT v FROM t WHERE id = $1", &[23]);
    frontend::describe(&mut p, Target::Statement, "s2");
    frontend::flush(&mut p);
    let (sent, answered) = send(&mut ex, &mut sides, p);
    assert!(answered.is_empty(), "not ahead of the alignment's replies: {answered:?}");
    assert_eq!(tags(&sent), "H", "both answered by pglane");
    let got = reply_whole(&mut ex, &mut sides, &[(b'C', b"SET\0"), (b'Z', b"I")]);
    assert_eq!(tags(&got), "1tT", "ParseComplete and the description, and nothing of the alignment");
    assert!(ex.is_quiet());
}

/// Parse texts found quiet are not scanned again, and nothing the scans
/// act on is ever taken for quiet: each of these, parsed after a quiet
/// one and twice, acts every time as on its first.
#[test]
fn the_quiet_text_cache_never_hides_session_state() {
    let parse = |ex: &mut Exchange, sides: &mut Sides, sql: &str| {
        let mut p = BytesMut::new();
        frontend::parse(&mut p, "", sql, &[]);
        frontend::sync(&mut p);
        send(ex, sides, p);
        reply(ex, sides, &[(b'1', b""), (b'Z', b"I")]);
    };
    let mut sides = Sides::new();
    let mut ex = Exchange::new(None);
    for _ in 0..3 {
        parse(&mut ex, &mut sides, "select 1");
    }
    assert!(ex.quiet.contains(b"select 1"));
    let acts = [
        ("select set_config('DateStyle', 'ISO', false)", "names an output setting"),
        ("create table t (a int)", "is DDL"),
        ("select pg_advisory_lock(1)", "pins"),
        ("reset all", "resets"),
    ];
    for (sql, what) in acts {
        let mut ex = Exchange::new(Some(0));
        parse(&mut ex, &mut sides, "select 1");
        for round in 0..2 {
            parse(&mut ex, &mut sides, sql);
            assert!(!ex.quiet.contains(sql.as_bytes()), "{sql} ({what}) taken for quiet, round {round}");
            match what {
                "pins" => assert_eq!(ex.pinned, Some(SessionFeature::AdvisoryLock)),
                _ => {}
            }
        }
    }
}

#[test]
fn a_failed_alignment_ends_the_session() {
    let mut sides = Sides::new();
    sides.client_settings.set("TimeZone", Value::Reported("Mars/Olympus".into()));
    let mut ex = Exchange::default();
    let mut to_server = BytesMut::new();
    ex.align_settings(&sides.client_settings, &mut sides.server_settings, false, &mut to_server);
    let mut error = BytesMut::new();
    backend::error_response(&mut error, &ErrorFields::error("22023", "invalid value for parameter \"TimeZone\""));
    let got = reply_whole(&mut ex, &mut sides, &[(b'E', &error[HEADER_LEN..])]);
    assert!(got.is_empty());
    assert!(matches!(ex.take_failure(), Some(NegotiateError::Settings(m)) if m.contains("TimeZone")));
}

/// A statement_timeout another client left on the server connection
/// could cancel the alignment: the client's messages wait for its answer,
/// it runs behind a lift of the timeout and sets the client's timeout last,
/// and a cancelled one runs again (and ends the session after its tries).
#[test]
fn an_alignment_a_timeout_could_cancel_holds_the_client_and_runs_again() {
    let mut sides = Sides::new();
    sides.server_settings.set("statement_timeout", Value::Sql("1".into()));
    sides.client_settings.set("TimeZone", Value::Reported("UTC".into()));
    let mut ex = Exchange::default();
    let mut to_server = BytesMut::new();
    assert!(ex.align_settings(&sides.client_settings, &mut sides.server_settings, false, &mut to_server));
    let sent = messages(to_server);
    assert_eq!(query_text(&sent[0]), "SET statement_timeout = 0");
    assert_eq!(query_text(&sent[1]), "SET \"TimeZone\" = 'UTC';RESET \"statement_timeout\";");
    assert!(query(&mut ex, &mut sides, "select 1").is_empty(), "the client's query waits");
    assert!(ex.waits_behind_pglane());

    let mut cancelled = BytesMut::new();
    backend::error_response(&mut cancelled, &ErrorFields::error("57014", "canceling statement due to statement timeout"));
    let cancelled = &cancelled[HEADER_LEN..];
    let again = |ex: &mut Exchange, sides: &mut Sides| {
        let got = reply_whole(ex, sides, &[(b'E', cancelled), (b'Z', b"I"), (b'E', cancelled), (b'Z', b"I")]);
        assert!(got.is_empty(), "{got:?}");
        let mut to_server = BytesMut::new();
        ex.take_for_server(&mut to_server);
        messages(to_server)
    };
    for _ in 0..HIDDEN_TRIES {
        let sent = again(&mut ex, &mut sides);
        assert_eq!(
            sent.iter().map(query_text).collect::<Vec<_>>(),
            ["SET statement_timeout = 0", "SET \"TimeZone\" = 'UTC';RESET \"statement_timeout\";"]
        );
        assert!(ex.waits_behind_pglane(), "still held");
        assert!(ex.take_failure().is_none());
    }
    // Answered at last: the client's query goes on.
    let got = reply_whole(&mut ex, &mut sides, &[(b'C', b"SET\0"), (b'Z', b"I"), (b'C', b"SET\0"), (b'Z', b"I")]);
    assert!(got.is_empty());
    let mut to_server = BytesMut::new();
    ex.take_for_server(&mut to_server);
    assert_eq!(messages(to_server).iter().map(query_text).collect::<Vec<_>>(), ["select 1"]);
    assert!(!ex.waits_behind_pglane());

    // Out of tries: the session ends, nothing of the client's sent.
    let mut ex = Exchange::default();
    sides.server_settings.set("statement_timeout", Value::Sql("1".into()));
    assert!(ex.align_settings(&sides.client_settings, &mut sides.server_settings, false, &mut BytesMut::new()));
    assert!(query(&mut ex, &mut sides, "select 1").is_empty());
    for _ in 0..HIDDEN_TRIES {
        again(&mut ex, &mut sides);
    }
    assert!(again(&mut ex, &mut sides).is_empty());
    assert!(matches!(ex.take_failure(), Some(NegotiateError::Settings(m)) if m.contains("statement timeout")));

    // A timeout of a second or more, or none, is not waited for.
    let mut ex = Exchange::default();
    sides.server_settings = Settings::default();
    sides.server_settings.set("statement_timeout", Value::Sql("'5s'".into()));
    let mut to_server = BytesMut::new();
    assert!(!ex.align_settings(&sides.client_settings, &mut sides.server_settings, false, &mut to_server));
    assert_eq!(tags(&messages(to_server)), "Q");
    assert_eq!(tags(&query(&mut ex, &mut sides, "select 1")), "Q");
}

/// A client whose own statement_timeout is short, back on a connection
/// that already has its settings: nothing to align, nothing held (each
/// transaction paid a lift and an alignment round trip before).
#[test]
fn a_short_timeout_of_the_clients_own_is_not_aligned_again() {
    let mut sides = Sides::new();
    sides.client_settings.set("statement_timeout", Value::Sql("100".into()));
    sides.server_settings.take_values_of(&sides.client_settings, false);
    let mut ex = Exchange::default();
    let mut to_server = BytesMut::new();
    assert!(!ex.align_settings(&sides.client_settings, &mut sides.server_settings, false, &mut to_server));
    assert!(to_server.is_empty(), "{:?}", messages(to_server));
    // The same values under another version: the same.
    let mut twin = Settings::default();
    twin.set("statement_timeout", Value::Sql("100".into()));
    assert!(!ex.align_settings(&twin, &mut sides.server_settings, false, &mut to_server));
    assert!(to_server.is_empty(), "{:?}", messages(to_server));
    assert_eq!(tags(&query(&mut ex, &mut sides, "select 1")), "Q");
}

/// The server's replies, whole; returns what the client got.
fn reply(ex: &mut Exchange, sides: &mut Sides, replies: &[(u8, &[u8])]) -> Vec<(u8, Vec<u8>)> {
    let mut to_client = BytesMut::new();
    for (tag, body) in replies {
        if *tag == backend::DATA_ROW {
            ex.from_server_stream(*tag, &whole(*tag, body), &sides.registry, &mut to_client);
        } else {
            ex.from_server(*tag, &whole(*tag, body), &mut sides.st(), &mut to_client);
        }
    }
    messages(to_client)
}

#[test]
fn the_unnamed_statement_is_the_registrys() {
    let mut sides = Sides::new();
    let mut ex = Exchange::new(Some(1));
    let parse = |ex: &mut Exchange, sides: &mut Sides| {
        let mut p = BytesMut::new();
        frontend::parse(&mut p, "", "SELECT $1::int", &[]);
        frontend::bind(&mut p, "", "", &[], [Some(&b"1"[..])].into_iter(), &[]);
        frontend::execute(&mut p, "", 0);
        frontend::sync(&mut p);
        let (mut to_server, mut to_client) = (BytesMut::new(), BytesMut::new());
        let mut rest = p;
        while let Some(m) = split_message(&mut rest, 1 << 20).unwrap() {
            ex.from_client(m.tag, &whole(m.tag, &m.body), &mut sides.st(), &mut to_server);
        }
        ex.client_messages_taken(&mut to_client);
        (messages(to_server), messages(to_client))
    };
    let (sent, answered) = parse(&mut ex, &mut sides);
    assert_eq!(tags(&sent), "PBES");
    assert!(answered.is_empty());
    let name = names::split_parse(&sent[0].1).unwrap().0.to_owned();
    assert!(name.starts_with("pglane_0_"), "{name}");
    assert_eq!(names::split_bind(&sent[1].1).unwrap().1, name);
    let got = reply(
        &mut ex,
        &mut sides,
        &[(b'1', b""), (b'2', b""), (b'D', b"\0\x01\0\0\0\x011"), (b'C', b"SELECT 1\0"), (b'Z', b"I")],
    );
    assert_eq!(tags(&got), "12DCZ");
    // Again, on another server connection: Parse answered here, prepared there on the way.
    ex.reset();
    sides.server = ServerStatements::new(100);
    let (sent, answered) = parse(&mut ex, &mut sides);
    assert!(answered.is_empty(), "the ParseComplete pglane gives waits for the server's reply: {answered:?}");
    assert_eq!(tags(&sent), "PBES", "the injected Parse of the shared statement");
    let got = reply(
        &mut ex,
        &mut sides,
        &[(b'1', b""), (b'2', b""), (b'D', b"\0\x01\0\0\0\x011"), (b'C', b"SELECT 1\0"), (b'Z', b"I")],
    );
    assert_eq!(tags(&got), "12DCZ", "pglane's ParseComplete, then the server's replies but its injected Parse's");
    assert_eq!(sides.registry.stats().unnamed_mapped, 2);
}

/// PostgreSQL's answer to a Bind of a statement whose parameter's type was
/// dropped and created again.
const TYPE_GONE: &[u8] =
    b"SERROR\0VERROR\0CXX000\0Mcache lookup failed for type 16565\0Wunnamed portal parameter $1\0RgetTypeInputInfo\0\0";

/// psycopg's Parse, Bind, Execute and Sync of the unnamed statement.
fn unnamed_request(sql: &str) -> BytesMut {
    let mut p = BytesMut::new();
    frontend::parse(&mut p, "", sql, &[]);
    frontend::bind(&mut p, "", "", &[], [Some(&b"sad"[..])].into_iter(), &[]);
    frontend::execute(&mut p, "", 0);
    frontend::sync(&mut p);
    p
}

#[test]
fn a_request_whose_mapped_statement_is_stale_goes_again_with_a_fresh_parse() {
    let mut sides = Sides::new();
    let mut ex = Exchange::new(Some(1));
    let sql = "SELECT $1::mood";
    let (sent, _) = send(&mut ex, &mut sides, unnamed_request(sql));
    assert_eq!(tags(&sent), "PBES");
    let old = names::split_parse(&sent[0].1).unwrap().0.to_owned();
    let rows: &[(u8, &[u8])] = &[(b'2', b""), (b'D', b"\0\x01\0\0\0\x03sad"), (b'C', b"SELECT 1\0"), (b'Z', b"I")];
    reply(&mut ex, &mut sides, &[&[(b'1', &b""[..])][..], rows].concat());
    // The type was dropped and created again on the server directly.
    let (sent, answered) = send(&mut ex, &mut sides, unnamed_request(sql));
    assert_eq!(tags(&sent), "BES", "the Parse answered by pglane");
    assert!(answered.is_empty());
    let got = reply(&mut ex, &mut sides, &[(b'E', TYPE_GONE), (b'Z', b"I")]);
    assert_eq!(tags(&got), "1", "pglane's ParseComplete; the error and its ReadyForQuery held back");
    assert!(!ex.is_quiet(), "the request is owed again");
    let mut again = BytesMut::new();
    ex.take_for_server(&mut again);
    let again = messages(again);
    assert_eq!(tags(&again), "CPBES", "the stale statement closed, the text prepared afresh, the rest as sent");
    let fresh = names::split_parse(&again[1].1).unwrap().0.to_owned();
    assert_ne!(fresh, old);
    assert_eq!(names::split_bind(&again[2].1).unwrap().1, fresh);
    let got = reply(&mut ex, &mut sides, &[&[(b'3', &b""[..]), (b'1', b"")][..], rows].concat());
    assert_eq!(tags(&got), "2DCZ", "no second ParseComplete");
    assert!(ex.is_releasable());
    assert_eq!(sides.registry.stats().reruns, 1);
    // The same stale error again is the client's: a request goes again once.
    let (sent, _) = send(&mut ex, &mut sides, unnamed_request(sql));
    assert_eq!(tags(&sent), "BES");
    let got = reply(&mut ex, &mut sides, &[(b'E', TYPE_GONE), (b'Z', b"I")]);
    assert_eq!(tags(&got), "1", "held back once more: each request may go again once");
    let mut again = BytesMut::new();
    ex.take_for_server(&mut again);
    assert_eq!(tags(&messages(again)), "CPBES");
    let got = reply(&mut ex, &mut sides, &[(b'3', b""), (b'1', b""), (b'E', TYPE_GONE), (b'Z', b"I")]);
    assert_eq!(tags(&got), "EZ", "the second try's error is the client's");
}

#[test]
fn a_stale_statement_in_a_transaction_block_is_the_clients_error() {
    let mut sides = Sides::new();
    let mut ex = Exchange::new(Some(1));
    let sql = "SELECT $1::mood";
    send(&mut ex, &mut sides, unnamed_request(sql));
    reply(&mut ex, &mut sides, &[(b'1', b""), (b'2', b""), (b'C', b"SELECT 0\0"), (b'Z', b"I")]);
    query(&mut ex, &mut sides, "BEGIN");
    reply(&mut ex, &mut sides, &[(b'C', b"BEGIN\0"), (b'Z', b"T")]);
    let (sent, _) = send(&mut ex, &mut sides, unnamed_request(sql));
    assert_eq!(tags(&sent), "BES");
    let got = reply(&mut ex, &mut sides, &[(b'E', TYPE_GONE), (b'Z', b"E")]);
    assert_eq!(tags(&got), "1EZ", "the block failed: nothing can go again");
    let mut again = BytesMut::new();
    ex.take_for_server(&mut again);
    assert!(again.is_empty());
    // The statement is retired: the next Parse prepares the text afresh.
    query(&mut ex, &mut sides, "ROLLBACK");
    reply(&mut ex, &mut sides, &[(b'C', b"ROLLBACK\0"), (b'Z', b"I")]);
    let (sent, _) = send(&mut ex, &mut sides, unnamed_request(sql));
    assert_eq!(tags(&sent), "CPBES");
}

/// Sends the client's messages; returns what went to the server and what
/// the client got at once.
fn send(ex: &mut Exchange, sides: &mut Sides, mut messages_in: BytesMut) -> (Vec<(u8, Vec<u8>)>, Vec<(u8, Vec<u8>)>) {
    let (mut to_server, mut to_client) = (BytesMut::new(), BytesMut::new());
    while let Some(m) = split_message(&mut messages_in, 1 << 20).unwrap() {
        ex.from_client(m.tag, &whole(m.tag, &m.body), &mut sides.st(), &mut to_server);
    }
    ex.client_messages_taken(&mut to_client);
    (messages(to_server), messages(to_client))
}

/// A named Parse and Sync that the server answers: the client knows `name` after.
fn prepare_named(ex: &mut Exchange, sides: &mut Sides, name: &str, sql: &str) {
    let mut p = BytesMut::new();
    frontend::parse(&mut p, name, sql, &[]);
    frontend::sync(&mut p);
    let (sent, _) = send(ex, sides, p);
    assert_eq!(tags(&sent), "PS");
    assert_eq!(tags(&reply(ex, sides, &[(b'1', b""), (b'Z', b"I")])), "1Z");
    assert!(sides.client.get(name).is_some());
}

/// psycopg's pipeline with an error in the middle, as it reached pglane
/// in tests/drivers (psycopg_suite.py, "errors"): the server's error came
/// while the client was still writing the pipeline. The Parse before it
/// was skipped by the server, so the Bind after it must be too, not
/// answered with pglane's own "does not exist": the client gets the one
/// error, then ReadyForQuery, as from PostgreSQL.
#[test]
fn what_a_client_sends_after_the_servers_error_and_before_its_sync_is_skipped() {
    let mut sides = Sides::new();
    let mut ex = Exchange::new(None);
    let mut first = BytesMut::new();
    frontend::parse(&mut first, "_pg3_1", "select 1 / $1::int", &[]);
    frontend::bind(&mut first, "", "_pg3_1", &[], [Some(&b"0"[..])].into_iter(), &[]);
    frontend::execute(&mut first, "", 0);
    frontend::parse(&mut first, "_pg3_2", "select $1::int + 200", &[]);
    let (sent, answered) = send(&mut ex, &mut sides, first);
    assert_eq!(tags(&sent), "PBEP");
    assert!(answered.is_empty());
    let got = reply(&mut ex, &mut sides, &[(b'1', b""), (b'2', b""), (b'E', b"SERROR\0VERROR\0C22012\0Mdivision by zero\0\0")]);
    assert_eq!(tags(&got), "12E");
    assert!(sides.client.get("_pg3_2").is_none(), "the server skipped its Parse");
    let mut rest = BytesMut::new();
    frontend::bind(&mut rest, "", "_pg3_2", &[], [Some(&b"1"[..])].into_iter(), &[]);
    frontend::describe(&mut rest, Target::Portal, "");
    frontend::execute(&mut rest, "", 0);
    frontend::sync(&mut rest);
    let (sent, answered) = send(&mut ex, &mut sides, rest);
    assert_eq!(tags(&sent), "S", "the server skips all but the Sync anyway");
    assert!(answered.is_empty(), "no answer of pglane's own: {}", tags(&answered));
    assert_eq!(tags(&reply(&mut ex, &mut sides, &[(b'Z', b"I")])), "Z");
    assert!(ex.is_releasable());
    // The next request is served as usual.
    prepare_named(&mut ex, &mut sides, "_pg3_3", "select $1::int + 200");
}

/// psycopg's `DEALLOCATE _pg3_N`, as a simple query and as an unnamed
/// statement, must not reach the server (which knows the statement by
/// pglane's shared name, so it failed with 26000): only the client's
/// name goes, and the client sees the DEALLOCATE's own replies.
#[test]
fn sql_deallocate_of_a_clients_statement_drops_only_its_name() {
    for extended in [false, true] {
        let mut sides = Sides::new();
        let mut ex = Exchange::new(None);
        prepare_named(&mut ex, &mut sides, "_pg3_0", "SELECT $1::int");

        let mut d = BytesMut::new();
        if extended {
            frontend::parse(&mut d, "", "DEALLOCATE _pg3_0", &[]);
            frontend::bind(&mut d, "", "", &[], std::iter::empty(), &[]);
            frontend::describe(&mut d, Target::Portal, "");
            frontend::execute(&mut d, "", 0);
            frontend::sync(&mut d);
        } else {
            frontend::query(&mut d, "DEALLOCATE _pg3_0");
        }
        let (sent, answered) = send(&mut ex, &mut sides, d);
        assert!(answered.is_empty());
        assert!(sides.client.get("_pg3_0").is_none(), "the client's name is gone");
        let got = if extended {
            assert_eq!(tags(&sent), "PBDES");
            assert_eq!(names::parse_query(names::split_parse(&sent[0].1).unwrap().1), "", "an empty statement instead");
            reply(&mut ex, &mut sides, &[(b'1', b""), (b'2', b""), (b'n', b""), (b'I', b""), (b'Z', b"T")])
        } else {
            assert_eq!(tags(&sent), "Q");
            assert_eq!(sent[0].1, b"\0", "an empty query instead");
            reply(&mut ex, &mut sides, &[(b'I', b""), (b'Z', b"T")])
        };
        let expected = if extended { "12nCZ" } else { "CZ" };
        assert_eq!(tags(&got), expected, "extended: {extended}");
        let complete = got.iter().find(|(t, _)| *t == b'C').unwrap();
        assert_eq!(complete.1, b"DEALLOCATE\0");
        assert_eq!(got.last().unwrap().1, b"T", "the server's transaction status");
        assert!(ex.is_quiet());

        // A name the client does not have passes through, to fail as on a direct connection.
        let mut d = BytesMut::new();
        frontend::query(&mut d, "DEALLOCATE _pg3_0");
        let (sent, _) = send(&mut ex, &mut sides, d);
        assert_eq!(sent[0].1, b"DEALLOCATE _pg3_0\0");
    }
}

/// Binds and runs `s1` (prepared by `prepare_and_describe_s1`) with a Sync.
fn bind_execute_s1(ex: &mut Exchange, sides: &mut Sides) {
    let mut p = BytesMut::new();
    frontend::bind(&mut p, "", "s1", &[], [Some(&b"1"[..])].into_iter(), &[]);
    frontend::execute(&mut p, "", 0);
    frontend::sync(&mut p);
    send(ex, sides, p);
}

/// Server pipelining's rule: another client's request may go behind
/// this one's only when what is in flight is whole, outside a
/// transaction block, and leaves the session as it found it.
#[test]
fn only_a_whole_plain_request_outside_a_transaction_may_be_followed() {
    let mut sides = Sides::new();
    let mut ex = Exchange::new(None).with_pipelining();
    assert!(!ex.may_be_followed(), "nothing in flight");
    prepare_and_describe_s1(&mut ex, &mut sides);
    bind_execute_s1(&mut ex, &mut sides);
    assert!(ex.may_be_followed(), "Bind, Execute, Sync of a plain SELECT");
    assert_eq!(ex.ready_due(), 1);
    let s1 = sides.client.get("s1").unwrap().clone();
    assert_eq!(ex.statements_in_flight().len(), 1);
    s1.slow_at.set(Some(crate::rt::now()));
    assert!(!ex.may_be_followed(), "it ran slowly with a request behind it just now");
    s1.slow_at.set(Some(crate::rt::now() - crate::pool::opening::SLOW_KEPT));
    assert!(ex.may_be_followed(), "the mark wore off");
    reply(&mut ex, &mut sides, &[(b'2', b""), (b'D', b"\0\x01\0\0\0\x01x"), (b'C', b"SELECT 1\0"), (b'Z', b"I")]);
    assert!(!ex.may_be_followed() && ex.is_releasable());

    // Not before the Sync.
    let mut p = BytesMut::new();
    frontend::bind(&mut p, "", "s1", &[], [Some(&b"1"[..])].into_iter(), &[]);
    frontend::execute(&mut p, "", 0);
    send(&mut ex, &mut sides, p);
    assert!(!ex.may_be_followed(), "no Sync yet");
    let mut p = BytesMut::new();
    frontend::sync(&mut p);
    send(&mut ex, &mut sides, p);
    assert!(ex.may_be_followed());
    reply(&mut ex, &mut sides, &[(b'2', b""), (b'C', b"SELECT 0\0"), (b'Z', b"I")]);

    // Not while a Parse is unanswered: its failure would change the
    // connection's statements.
    let mut p = BytesMut::new();
    frontend::parse(&mut p, "s2", "SELECT 2", &[]);
    frontend::sync(&mut p);
    send(&mut ex, &mut sides, p);
    assert!(!ex.may_be_followed(), "a Parse in flight");
    reply(&mut ex, &mut sides, &[(b'1', b""), (b'Z', b"I")]);

    // Not inside a transaction block.
    assert_eq!(tags(&query(&mut ex, &mut sides, "BEGIN")), "Q");
    assert!(!ex.may_be_followed(), "a simple query passed through");
    reply(&mut ex, &mut sides, &[(b'C', b"BEGIN\0"), (b'Z', b"T")]);
    bind_execute_s1(&mut ex, &mut sides);
    assert!(!ex.may_be_followed(), "in a transaction block");
    reply(&mut ex, &mut sides, &[(b'2', b""), (b'C', b"SELECT 0\0"), (b'Z', b"T")]);
    query(&mut ex, &mut sides, "COMMIT");
    reply(&mut ex, &mut sides, &[(b'C', b"COMMIT\0"), (b'Z', b"I")]);

    // Not a statement that may change the session.
    let mut p = BytesMut::new();
    frontend::parse(&mut p, "s3", "SELECT set_config('a.b', $1, false)", &[25]);
    frontend::sync(&mut p);
    send(&mut ex, &mut sides, p);
    reply(&mut ex, &mut sides, &[(b'1', b""), (b'Z', b"I")]);
    let mut p = BytesMut::new();
    frontend::bind(&mut p, "", "s3", &[], [Some(&b"x"[..])].into_iter(), &[]);
    frontend::execute(&mut p, "", 0);
    frontend::sync(&mut p);
    send(&mut ex, &mut sides, p);
    assert!(!ex.may_be_followed(), "set_config");
}

/// A request whose BEGIN is answered before its Sync (pgjdbc sends BEGIN
/// ahead of a transaction's first statement; a Flush, or a slow read, lets
/// its answer come first) leaves only a plain statement due, on a session
/// in a transaction block: it may not be followed, however the rest looks,
/// until a ReadyForQuery says where the session is.
#[test]
fn a_request_whose_begin_was_answered_is_not_followed() {
    let mut sides = Sides::new();
    let mut ex = Exchange::new(None).with_pipelining();
    prepare_and_describe_s1(&mut ex, &mut sides);
    let mut p = BytesMut::new();
    frontend::parse(&mut p, "begin", "BEGIN", &[]);
    frontend::sync(&mut p);
    send(&mut ex, &mut sides, p);
    reply(&mut ex, &mut sides, &[(b'1', b""), (b'Z', b"I")]);
    for flush in [true, false] {
        let mut p = BytesMut::new();
        frontend::bind(&mut p, "", "begin", &[], std::iter::empty(), &[]);
        frontend::execute(&mut p, "", 0);
        if flush {
            frontend::flush(&mut p);
        }
        send(&mut ex, &mut sides, p);
        reply(&mut ex, &mut sides, &[(b'2', b""), (b'C', b"BEGIN\0")]);
        bind_execute_s1(&mut ex, &mut sides);
        assert!(!ex.may_be_followed(), "flush: {flush}: the BEGIN ran");
        reply(&mut ex, &mut sides, &[(b'2', b""), (b'C', b"SELECT 0\0"), (b'Z', b"T")]);
        assert!(ex.left_a_block_open());
        query(&mut ex, &mut sides, "COMMIT");
        reply(&mut ex, &mut sides, &[(b'C', b"COMMIT\0"), (b'Z', b"I")]);
        assert!(!ex.left_a_block_open());
    }
    // The next request, a ReadyForQuery later, is judged on its own.
    bind_execute_s1(&mut ex, &mut sides);
    assert!(ex.may_be_followed());
}

/// With pipelining on, requests passed through as the client sent them
/// (simple queries, the unnamed statement without auto-prepare) may be
/// followed too when their text leaves the session alone.
#[test]
fn a_plain_request_passed_through_may_be_followed() {
    let mut sides = Sides::new();
    let mut ex = Exchange::new(None).with_pipelining();
    let answer = [(b'T', &b"\0\0"[..]), (b'C', b"SELECT 0\0"), (b'Z', b"I")];
    query(&mut ex, &mut sides, "SELECT abalance FROM pgbench_accounts WHERE aid = 7");
    assert!(ex.may_be_followed(), "a plain simple query");
    assert_eq!(ex.ready_due(), 1);
    reply(&mut ex, &mut sides, &answer);
    for sql in [
        "SELECT 1 INTO t",
        "CREATE TABLE t (a int)",
        "SELECT set_config('a.b', 'c', false)",
        "BEGIN; SELECT 1",
        "SET work_mem = '1MB'",
    ] {
        query(&mut ex, &mut sides, sql);
        assert!(!ex.may_be_followed(), "{sql}");
        reply(&mut ex, &mut sides, &[(b'C', b"SELECT 0\0"), (b'Z', b"I")]);
    }

    // The unnamed statement, as pgbench -M extended sends it.
    let unnamed = |sql: &str| {
        let mut p = BytesMut::new();
        frontend::parse(&mut p, "", sql, &[]);
        frontend::bind(&mut p, "", "", &[], [Some(&b"1"[..])].into_iter(), &[]);
        frontend::describe(&mut p, Target::Portal, "");
        frontend::execute(&mut p, "", 0);
        frontend::sync(&mut p);
        p
    };
    let answer = [(b'1', &b""[..]), (b'2', b""), (b'n', b""), (b'C', b"UPDATE 0\0"), (b'Z', b"I")];
    for round in 0..2 {
        // The second time its text is known quiet, and so is its answer.
        send(&mut ex, &mut sides, unnamed("UPDATE t SET a = a + 1 WHERE a = $1"));
        assert!(ex.may_be_followed(), "a plain unnamed statement, round {round}");
        reply(&mut ex, &mut sides, &answer);
        send(&mut ex, &mut sides, unnamed("CREATE TABLE t (a int)"));
        assert!(!ex.may_be_followed(), "DDL, round {round}");
        reply(&mut ex, &mut sides, &answer);
    }

    // A Bind of an unnamed statement Parsed earlier is as plain as that
    // statement was, whatever is Parsed after it.
    let mut p = BytesMut::new();
    frontend::bind(&mut p, "", "", &[], [Some(&b"1"[..])].into_iter(), &[]);
    frontend::execute(&mut p, "", 0);
    p.extend_from_slice(&unnamed("SELECT $1::int"));
    send(&mut ex, &mut sides, p);
    assert!(!ex.may_be_followed(), "the first Bind runs the CREATE TABLE");
    reply(&mut ex, &mut sides, &[(b'2', b""), (b'C', b"CREATE TABLE\0")]);
    reply(&mut ex, &mut sides, &answer);

    // A client whose request ran slowly with another behind it.
    ex.ran_slowly();
    query(&mut ex, &mut sides, "SELECT 1");
    assert!(!ex.may_be_followed(), "it ran slowly just now");
    ex.slow_at = Some(crate::rt::now() - crate::pool::opening::SLOW_KEPT);
    assert!(ex.may_be_followed(), "the mark wore off");
    reply(&mut ex, &mut sides, &[(b'C', b"SELECT 1\0"), (b'Z', b"I")]);

    // Without pipelining nothing is scanned for it.
    let mut ex = Exchange::new(None);
    query(&mut ex, &mut sides, "SELECT 1");
    assert!(!ex.may_be_followed());
}

/// A rewritten simple query, once followed, is not run again after a
/// stale plan (the request behind it is already on the server): the
/// client gets the error, as a client that pipelined would.
#[test]
fn a_followed_rewritten_query_is_not_run_again() {
    let mut sides = Sides::new();
    let sql = "SELECT v FROM t WHERE id = 1";
    let mut ex = Exchange::new(Some(0)).with_pipelining();
    for followed in [false, true] {
        // The shape is validated (again: a stale plan retires it), and
        // a first run prepares it on the server connection.
        sides.validate(sql);
        let first = tags(&query(&mut ex, &mut sides, sql));
        assert!(!ex.may_be_followed(), "its Parse is in flight");
        let mut replies: Vec<(u8, &[u8])> = Vec::new();
        if first.starts_with('C') {
            replies.push((b'3', b"")); // the stale statement's close
        }
        replies.extend([(b'1', &b""[..]), (b'2', b""), (b'T', b"\0\0"), (b'C', b"SELECT 0\0"), (b'Z', b"I")]);
        assert!(first.ends_with("PBDES"), "{first}");
        reply(&mut ex, &mut sides, &replies);

        assert_eq!(tags(&query(&mut ex, &mut sides, sql)), "BDES");
        assert!(ex.may_be_followed(), "a rewritten plain query");
        ex.followed = followed;
        let stale = b"SERROR\0C0A000\0Mcached plan must not change result type\0RRevalidateCachedQuery\0\0";
        let got = reply(&mut ex, &mut sides, &[(b'E', stale), (b'Z', b"I")]);
        let mut to_server = BytesMut::new();
        ex.take_for_server(&mut to_server);
        if followed {
            assert_eq!(tags(&got), "EZ");
            assert!(to_server.is_empty());
        } else {
            assert_eq!(tags(&got), "");
            assert_eq!(tags(&messages(to_server)), "Q");
            reply(&mut ex, &mut sides, &[(b'C', b"SELECT 0\0"), (b'Z', b"I")]);
        }
        ex.reset();
    }
}

/// The client prepares and describes `s1` (one int4 parameter, one int4
/// column `v`) on its first server connection, which the server accepts.
fn prepare_and_describe_s1(ex: &mut Exchange, sides: &mut Sides) {
    let mut p = BytesMut::new();
    frontend::parse(&mut p, "s1", "SELECT v FROM t WHERE id = $1", &[23]);
    frontend::describe(&mut p, Target::Statement, "s1");
    frontend::sync(&mut p);
    let (sent, _) = send(ex, sides, p);
    assert_eq!(tags(&sent), "PDS");
    let int4 = row_description_body(23);
    let got = reply(ex, sides, &[(b'1', b""), (b't', b"\0\x01\0\0\0\x17"), (b'T', &int4), (b'Z', b"I")]);
    assert_eq!(tags(&got), "1tTZ");
}

fn row_description_body(type_oid: u32) -> Vec<u8> {
    let mut rd = BytesMut::new();
    let field = backend::FieldDescription {
        name: "v".into(),
        table_oid: 16384,
        column: 2,
        type_oid,
        type_size: -1,
        type_modifier: -1,
        format: 0,
    };
    backend::row_description(&mut rd, &[field]);
    rd[HEADER_LEN..].to_vec()
}

/// A client's described statement, prepared lazily on another server
/// connection after DDL changed its result type (int4 → text), must fail
/// as PostgreSQL's cached plan does (0A000, RevalidateCachedQuery, which
/// makes asyncpg and pgjdbc prepare it again), not run with a result the
/// client decodes by the old description. The client's Bind waits for
/// pglane's Describe; with an unchanged result it then goes on as sent.
#[test]
fn a_lazily_prepared_statement_must_keep_its_result_type() {
    for changed in [true, false] {
        let mut sides = Sides::new();
        let mut ex = Exchange::new(None);
        prepare_and_describe_s1(&mut ex, &mut sides);

        // Another server connection, after DDL.
        ex.reset();
        sides.server = ServerStatements::new(100);
        let mut b = BytesMut::new();
        frontend::bind(&mut b, "", "s1", &[], [Some(&b"1"[..])].into_iter(), &[1]);
        frontend::execute(&mut b, "", 0);
        frontend::sync(&mut b);
        let (sent, answered) = send(&mut ex, &mut sides, b);
        assert!(answered.is_empty());
        assert_eq!(tags(&sent), "PDH", "Parse, pglane's Describe and Flush; the Bind waits");
        assert!(ex.held_len() > 0, "the held Bind, Execute and Sync count against the relay's high-water mark");
        let new_type = row_description_body(if changed { 25 } else { 23 });
        let got = reply(&mut ex, &mut sides, &[(b'1', b""), (b't', b"\0\x01\0\0\0\x17"), (b'T', &new_type)]);
        let mut then = BytesMut::new();
        ex.take_for_server(&mut then);
        let then = messages(then);
        assert!(got.is_empty());
        assert_eq!(ex.held_len(), 0, "released");
        if changed {
            assert_eq!(
                tags(&then),
                "ES",
                "a failing Execute, then the held messages up to Sync, skipped as the server skips them"
            );
            let got = reply(&mut ex, &mut sides, &[(b'E', b"SERROR\0C34000\0Mportal does not exist\0\0"), (b'Z', b"I")]);
            assert_eq!(tags(&got), "EZ");
            let e = backend::decode_error_fields(&got[0].1).unwrap();
            assert_eq!(
                (e.code.as_str(), e.message.as_str()),
                ("0A000", "cached plan must not change result type"),
                "not the server's own error"
            );
            assert!(got[0].1.windows(22).any(|w| w == b"RRevalidateCachedQuery"));
            assert!(ex.is_quiet());
            // Preparing the text again gives a fresh statement.
            let mut p = BytesMut::new();
            frontend::parse(&mut p, "s2", "SELECT v FROM t WHERE id = $1", &[23]);
            let (sent, _) = send(&mut ex, &mut sides, p);
            assert_eq!(tags(&sent), "CP", "the stale server statement is closed");
            let (closed, parsed) = (names::split_target(&sent[0].1).unwrap().1, names::split_parse(&sent[1].1).unwrap().0);
            assert_ne!(closed, parsed);
        } else {
            assert_eq!(tags(&then), "BES", "the held messages, unchanged");
            let got = reply(&mut ex, &mut sides, &[(b'2', b""), (b'C', b"SELECT 0\0"), (b'Z', b"I")]);
            assert_eq!(tags(&got), "2CZ");
            assert!(ex.is_quiet());
            // SHOW STATS' bind_count: the held Bind once, not once more when let go.
            assert_eq!(ex.take_statement_counts().binds, 1);
        }
    }
}

/// A LISTEN in a transaction block is followed, not pinned for: its text
/// waits until the hub listens, the client's messages behind it wait too,
/// the connection is marked to be unlistened, what it sends of the
/// channel's notifications is dropped (another channel's is not), and the
/// LISTEN is taken as committed with the block.
#[test]
fn a_listen_in_a_block_waits_for_the_hub_and_is_not_pinned_for() {
    let mut sides = Sides::new();
    let mut ex = Exchange::new(None).with_pipelining();
    assert_eq!(tags(&query(&mut ex, &mut sides, "begin")), "Q");
    reply_whole(&mut ex, &mut sides, &[(backend::COMMAND_COMPLETE, b"BEGIN\0"), (backend::READY_FOR_QUERY, b"T")]);

    assert!(query(&mut ex, &mut sides, "LISTEN jobs; SELECT 1").is_empty(), "the text waits for the hub");
    assert_eq!(ex.pinned, None);
    assert!(ex.awaits_hub() && ex.left_listening && ex.waits_behind_pglane());
    assert_eq!(ex.take_sent_listens(), Some(vec!["jobs".to_owned()]));
    assert!(query(&mut ex, &mut sides, "commit").is_empty(), "held behind it");
    ex.hub_listened(&mut sides.st());
    let mut to_server = BytesMut::new();
    ex.take_for_server(&mut to_server);
    let sent = messages(to_server);
    assert_eq!(sent.iter().map(query_text).collect::<Vec<_>>(), ["LISTEN jobs; SELECT 1", "commit"], "in order");

    let mut own = BytesMut::new();
    backend::notification_response(&mut own, 7, "jobs", "x");
    let mut other = BytesMut::new();
    backend::notification_response(&mut other, 7, "other", "y");
    let got = reply_whole(
        &mut ex,
        &mut sides,
        &[
            (backend::COMMAND_COMPLETE, b"LISTEN\0"),
            (backend::COMMAND_COMPLETE, b"SELECT 1\0"),
            (backend::READY_FOR_QUERY, b"T"),
            (backend::NOTIFICATION_RESPONSE, &own[HEADER_LEN..]),
            (backend::NOTIFICATION_RESPONSE, &other[HEADER_LEN..]),
            (backend::COMMAND_COMPLETE, b"COMMIT\0"),
            (backend::READY_FOR_QUERY, b"I"),
        ],
    );
    assert_eq!(tags(&got), "CCZACZ", "the followed channel's notification is the hub's to deliver");
    assert_eq!(got[3].1, other[HEADER_LEN..].to_vec());
    assert!(ex.is_releasable());
    assert!(!ex.may_be_followed(), "no other client's request may go behind: the connection must be unlistened");
    use crate::notify::{follow::Outcome, statement::ListenStatement};
    assert_eq!(ex.take_listen_outcomes(), Some(vec![Outcome::Committed(ListenStatement::Listen("jobs".into()))]));
    ex.reset();
    assert!(!ex.left_listening, "the connection was unlistened as it went back");
}

/// A Parse of a LISTEN is followed as a simple query's text is (pgjdbc in
/// a transaction); a LISTEN that runs with none sent waiting for it (a
/// statement prepared in an earlier request, run again) pins the client.
#[test]
fn a_listen_parsed_is_followed_and_one_run_unfollowed_pins() {
    let mut sides = Sides::new();
    let mut ex = Exchange::new(None);
    let mut parse = BytesMut::new();
    frontend::parse(&mut parse, "", "LISTEN jobs", &[]);
    let mut to_server = BytesMut::new();
    ex.from_client(frontend::PARSE, &parse, &mut sides.st(), &mut to_server);
    assert_eq!(ex.pinned, None);
    assert!(ex.awaits_hub() && to_server.is_empty());
    assert_eq!(ex.take_sent_listens(), Some(vec!["jobs".to_owned()]));
    ex.hub_listened(&mut sides.st());
    let mut to_server = BytesMut::new();
    ex.take_for_server(&mut to_server);
    assert_eq!(tags(&messages(to_server)), "P");
    reply_whole(&mut ex, &mut sides, &[(backend::PARSE_COMPLETE, b""), (backend::COMMAND_COMPLETE, b"LISTEN\0")]);
    assert_eq!(ex.pinned, None, "the LISTEN it waited for");
    reply_whole(&mut ex, &mut sides, &[(backend::COMMAND_COMPLETE, b"LISTEN\0")]);
    assert_eq!(ex.pinned, Some(SessionFeature::Listen), "one nothing waited for");
}

/// A listening client's UNLISTEN in a Parse (pgjdbc in a transaction) is
/// followed too: it ends the subscription once it ran and committed.
#[test]
fn an_unlisten_parsed_by_a_listening_client_applies_at_commit() {
    let mut sides = Sides::new();
    let mut ex = Exchange::new(None);
    ex.follows_unlistens = true;
    let mut parse = BytesMut::new();
    frontend::parse(&mut parse, "", "UNLISTEN *", &[]);
    let mut to_server = BytesMut::new();
    ex.from_client(frontend::PARSE, &parse, &mut sides.st(), &mut to_server);
    assert!(!ex.awaits_hub(), "nothing for the hub to listen to first");
    reply_whole(
        &mut ex,
        &mut sides,
        &[(backend::PARSE_COMPLETE, b""), (backend::COMMAND_COMPLETE, b"UNLISTEN\0"), (backend::COMMAND_COMPLETE, b"COMMIT\0")],
    );
    use crate::notify::{follow::Outcome, statement::ListenStatement};
    assert_eq!(ex.take_listen_outcomes(), Some(vec![Outcome::Committed(ListenStatement::UnlistenAll)]));
}
