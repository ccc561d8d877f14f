//! The relay's per-message state machine (`client::exchange::Exchange`, with
//! its `Tracker`) driven by an arbitrary interleaving of client and server
//! messages: structured ones (Parse/Bind/Describe/Close of a few statement
//! names, Execute, Sync, Query, COPY, and the server's answers including
//! errors, stale-plan 0A000, DISCARD ALL and ReadyForQuery in every state)
//! and raw ones with arbitrary tags and bodies.
//!
//! Checked: no panic (no index out of range, no overflow, no "cannot happen"
//! branch reached); everything written toward the server and the client is a
//! well-framed message stream; a well-formed named Parse never reaches the
//! server under the client's own name (it is always renamed to pglane's);
//! a Bind or statement Describe reaches the server only for the client's own
//! statements (pglane's name for one it prepared, or the unnamed statement
//! after it Parsed one), never for a name it merely guessed;
//! small limits (2 statements per server connection, 3 names per client)
//! exercise eviction and the per-client cap; the SETs pglane sends to carry
//! a client's settings never let a reported value out of its quotes.
#![no_main]

use arbitrary::Arbitrary;
use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use pglane::client::exchange::{client_needs_whole, server_needs_whole, Exchange, Negotiation, Statements};
use pglane::client::settings::Settings;
use pglane::prepare::{ClientStatements, Registry, ServerStatements};
use pglane::protocol::backend::{self, ErrorFields, FieldDescription, TransactionStatus};
use pglane::protocol::frame::split_message;
use pglane::protocol::frontend::{self, Target};
use pglane::protocol::names;

/// "pglane_7_0" looks like a server-side name but is never one (ids start at 1).
const NAMES: [&str; 5] = ["", "S_1", "S_2", "pglane_7_0", "S_3"];
const SQL: [&str; 4] = ["select 1", "select $1::int", "insert into t values (1)", "copy t from stdin"];
const QUERIES: [&str; 9] = [
    "select 1",
    "begin",
    "commit",
    "DISCARD ALL",
    "DEALLOCATE ALL",
    "SET search_path = app, public",
    "set statement_timeout to '5s';",
    "RESET ALL",
    "reset search_path",
];
const TAGS: [&str; 5] = ["SELECT 1", "BEGIN", "COMMIT", "DISCARD ALL", "DEALLOCATE ALL"];
const CODES: [&str; 4] = ["42601", "0A000", "26000", "25P02"];

#[derive(Debug, Arbitrary)]
enum Op {
    Parse { name: u8, sql: u8, types: u8 },
    Bind { portal: u8, statement: u8 },
    Describe { statement: bool, name: u8 },
    Close { statement: bool, name: u8 },
    Execute,
    Sync,
    Flush,
    Query(u8),
    CopyData(Vec<u8>),
    CopyDone,
    CopyFail,
    ClientRaw { tag: u8, body: Vec<u8> },
    ParseComplete,
    BindComplete,
    CloseComplete,
    NoData,
    ParameterDescription(u8),
    RowDescription(u8),
    DataRow(Vec<u8>),
    CommandComplete(u8),
    EmptyQuery,
    PortalSuspended,
    Error(u8),
    Notice,
    ParameterStatus { name: u8, value: u8 },
    /// Before a transaction: make the server's settings the client's.
    Align,
    Ready(u8),
    CopyIn,
    CopyOut,
    ServerRaw { tag: u8, body: Vec<u8> },
    /// The client leaves and the exchange is reset, as give_back does.
    Reset,
}

fn pick<'a>(list: &[&'a str], i: u8) -> &'a str {
    list[i as usize % list.len()]
}

fn raw(tag: u8, body: &[u8]) -> BytesMut {
    let mut m = BytesMut::new();
    m.extend_from_slice(&[tag]);
    m.extend_from_slice(&((body.len() + 4) as i32).to_be_bytes());
    m.extend_from_slice(body);
    m
}

/// Splits SQL at semicolons outside quotes ('' and "" escapes included).
fn split_statements(sql: &str) -> Vec<&str> {
    let (mut out, mut start, mut quote) = (Vec::new(), 0, None);
    for (i, c) in sql.char_indices() {
        match (quote, c) {
            (None, '\'' | '"') => quote = Some(c),
            (Some(q), c) if c == q => quote = None, // a doubled quote reopens at once
            (None, ';') => {
                out.push(sql[start..i].trim());
                start = i + 1;
            }
            _ => {}
        }
    }
    assert!(quote.is_none(), "unterminated quote in {sql:?}");
    if !sql[start..].trim().is_empty() {
        out.push(sql[start..].trim());
    }
    out
}

/// Every byte is part of a complete message; returns them.
fn frames(mut out: BytesMut) -> Vec<(u8, bytes::Bytes)> {
    let mut v = Vec::new();
    while !out.is_empty() {
        let m = split_message(&mut out, usize::MAX >> 1).expect("valid header").expect("complete message");
        v.push((m.tag, m.body));
    }
    v
}

fuzz_target!(|ops: Vec<Op>| {
    let registry = Registry::new(7, 8);
    let mut client = ClientStatements::new(3);
    let mut server = ServerStatements::new(2);
    let mut client_settings = Settings::default();
    let mut server_settings = Settings::default();
    let mut ex = Exchange::default();
    // Binary format negotiation on, with settings that make every type on
    // its list negotiable.
    let login: Vec<(String, String)> = [("DateStyle", "ISO, MDY"), ("IntervalStyle", "postgres"), ("TimeZone", "UTC"), ("integer_datetimes", "on")]
        .iter()
        .map(|(n, v)| (n.to_string(), v.to_string()))
        .collect();
    let mut to_server = BytesMut::new();
    let mut to_client = BytesMut::new();
    // Has this client (since the last Reset) sent anything that may have
    // Parsed the unnamed statement? Only then may a Bind of it reach the server.
    let mut unnamed_parsed = false;
    for op in ops.into_iter().take(200) {
        match &op {
            Op::Parse { name, .. } if pick(&NAMES, *name).is_empty() => unnamed_parsed = true,
            Op::ClientRaw { tag: b'P', body } if names::split_parse(body).map_or(true, |(n, _)| n.is_empty()) => {
                unnamed_parsed = true
            }
            _ => {}
        }
        let written = to_server.len();
        let mut st = Statements {
            registry: &registry,
            client: &mut client,
            server: &mut server,
            client_settings: &mut client_settings,
            server_settings: &mut server_settings,
            negotiation: Some(Negotiation { server_params: &login, output_defaults: &[], max_row: 1 << 20 }),
        };
        let mut c = BytesMut::new();
        let mut s = BytesMut::new();
        match op {
            Op::Parse { name, sql, types } => {
                let oids: Vec<u32> = (0..types % 3).map(|i| [0, 23, 25][i as usize]).collect();
                frontend::parse(&mut c, pick(&NAMES, name), pick(&SQL, sql), &oids);
            }
            Op::Bind { portal, statement } => {
                let params: [Option<&[u8]>; 1] = [Some(b"1")];
                frontend::bind(&mut c, pick(&["", "p1"], portal), pick(&NAMES, statement), &[], params.into_iter(), &[]);
            }
            Op::Describe { statement, name } => {
                let t = if statement { Target::Statement } else { Target::Portal };
                frontend::describe(&mut c, t, pick(&NAMES, name));
            }
            Op::Close { statement, name } => {
                let t = if statement { Target::Statement } else { Target::Portal };
                frontend::close(&mut c, t, pick(&NAMES, name));
            }
            Op::Execute => frontend::execute(&mut c, "", 0),
            Op::Sync => frontend::sync(&mut c),
            Op::Flush => frontend::flush(&mut c),
            Op::Query(i) => frontend::query(&mut c, pick(&QUERIES, i)),
            Op::CopyData(d) => c = raw(frontend::COPY_DATA, &d),
            Op::CopyDone => c = raw(frontend::COPY_DONE, b""),
            Op::CopyFail => c = raw(frontend::COPY_FAIL, b"no\0"),
            Op::ClientRaw { tag, body } => c = raw(tag, &body),
            Op::ParseComplete => backend::parse_complete(&mut s),
            Op::BindComplete => backend::bind_complete(&mut s),
            Op::CloseComplete => backend::close_complete(&mut s),
            Op::NoData => backend::no_data(&mut s),
            Op::ParameterDescription(n) => backend::parameter_description(&mut s, &vec![23; n as usize % 4]),
            Op::RowDescription(n) => {
                let f = FieldDescription { name: "a".into(), table_oid: 0, column: 0, type_oid: 23, type_size: 4, type_modifier: -1, format: 0 };
                backend::row_description(&mut s, &vec![f; n as usize % 3]);
            }
            Op::DataRow(d) => s = raw(backend::DATA_ROW, &d),
            Op::CommandComplete(i) => backend::command_complete(&mut s, pick(&TAGS, i)),
            Op::EmptyQuery => backend::empty_query_response(&mut s),
            Op::PortalSuspended => s = raw(backend::PORTAL_SUSPENDED, b""),
            Op::Error(i) => backend::error_response(&mut s, &ErrorFields::error(pick(&CODES, i), "x")),
            Op::Notice => backend::notice_response(&mut s, &ErrorFields::error("01000", "n")),
            Op::ParameterStatus { name, value } => backend::parameter_status(
                &mut s,
                pick(&["TimeZone", "application_name", "DateStyle", "server_version", "search_path"], name),
                pick(&["UTC", "it's", "", "ISO, MDY", "x'; drop table t; --"], value),
            ),
            Op::Align => {
                let (c, sv) = (st.client_settings.clone(), &mut *st.server_settings);
                ex.align_settings(&c, sv, &mut to_server);
                continue;
            }
            Op::Ready(i) => {
                let status = [TransactionStatus::Idle, TransactionStatus::InTransaction, TransactionStatus::Failed][i as usize % 3];
                backend::ready_for_query(&mut s, status);
            }
            Op::CopyIn => s = raw(backend::COPY_IN_RESPONSE, b"\0\0\0"),
            Op::CopyOut => s = raw(backend::COPY_OUT_RESPONSE, b"\0\0\0"),
            Op::ServerRaw { tag, body } => s = raw(tag, &body),
            Op::Reset => {
                ex = Exchange::default();
                client.clear();
                unnamed_parsed = false;
                continue;
            }
        }
        if !c.is_empty() {
            let tag = c[0];
            if client_needs_whole(tag) {
                ex.from_client(tag, &c, &mut st, &mut to_server);
                ex.client_messages_taken(&mut to_client);
            } else {
                // Streamed as the relay does: a first piece, then the rest.
                let cut = 5.min(c.len());
                ex.from_client_stream(tag, &c[..cut], &mut to_server);
                ex.from_client_stream_more(&c[cut..], &mut to_server);
            }
        }
        if !s.is_empty() {
            let tag = s[0];
            if server_needs_whole(tag) || (tag == b'D' && ex.rows_need_whole()) {
                let _forwarded: bool = ex.from_server(tag, &s, &mut st, &mut to_client);
                let _ = ex.take_failure();
            } else {
                ex.from_server_stream(tag, &s, &mut to_client);
            }
        }
        let _ = (ex.is_quiet(), ex.is_releasable(), ex.tracker.status(), ex.tracker.syncs_ignored_by_copy());
        // What this step sent the server names only statements that are this
        // client's: pglane's names for them, or the unnamed one it Parsed.
        for (tag, body) in frames(BytesMut::from(&to_server[written..])) {
            let named = match tag {
                frontend::BIND => names::split_bind(&body).ok().map(|(_, n, _)| n),
                frontend::DESCRIBE => names::split_target(&body).ok().filter(|(t, _)| *t == Target::Statement).map(|(_, n)| n),
                _ => None,
            };
            if let Some(name) = named {
                let ok = if name.is_empty() { unnamed_parsed } else { name.starts_with("pglane_7_") && name != "pglane_7_0" };
                assert!(ok, "{} of statement {name:?} reached the server", tag as char);
            }
        }
    }
    for (tag, body) in frames(to_server) {
        if tag == frontend::PARSE {
            if let Ok((name, _)) = names::split_parse(&body) {
                assert!(name.is_empty() || (name.starts_with("pglane_7_") && name != "pglane_7_0"), "Parse reached the server as {name:?}");
            }
        }
        // pglane's own SET/RESET: one statement per setting, values that
        // came from a ParameterStatus quoted so they cannot end the statement.
        if tag == frontend::QUERY {
            // (A client's malformed Query passes through; the server refuses it.)
            let Ok(sql) = frontend::decode_query(&body) else { continue };
            if sql.starts_with("SET \"") || sql.starts_with("RESET \"") {
                for statement in split_statements(sql) {
                    assert!(statement.starts_with("SET \"") || statement.starts_with("RESET \""), "{statement:?} in {sql:?}");
                }
            }
        }
    }
    frames(to_client);
});
