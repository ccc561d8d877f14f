//! Auto-prepare's differential test against the real PostgreSQL: for every
//! query of `tests/corpus/auto_prepare.sql` that the lexer and the validator
//! rewrite, the server must answer the rewritten Parse/Bind/Execute exactly as
//! it answers the original simple query: same RowDescription (names, table
//! columns, type OIDs, sizes, typmods), same DataRow bytes, same command tag,
//! same error (SQLSTATE, message, detail, hint).
//!
//! Before running a rewrite, the test does what the relay does for a new
//! shape on a side connection (protocol.md §1.7 step 4): Parse and Describe
//! the original and the rewritten text, and keep the rewrite only if it
//! parses, both RowDescriptions match and the server's parameter types pass
//! [`Rewrite::check_parameter_types`]. Each query runs in a transaction that is
//! rolled back, so every run sees the same data. The corpus marks which
//! queries must pass through, and why.

mod common;
#[path = "common/corpus.rs"]
mod corpus;
#[path = "common/raw.rs"]
mod raw;

use std::fmt::Write as _;

use bytes::BytesMut;
use common::postgres;
use corpus::{Corpus, Expect, CORPUS};
use pglane::prepare::lexer::{LexOptions, Lexed};
use pglane::prepare::shape::{self, Rewrite, Verdict};
use pglane::protocol::backend::{self, ErrorFields, FieldDescription};
use pglane::protocol::frame::Message;
use pglane::protocol::frontend::{self, Target};
use raw::RawClient;

const DATABASE: &str = "lexer_corpus";

/// A server's answer, reduced to what the client sees.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
struct Answer {
    fields: Option<Vec<FieldDescription>>,
    rows: Vec<Vec<u8>>,
    tag: Option<String>,
    error: Option<ErrorFields>,
    notices: Vec<ErrorFields>,
}

impl Answer {
    fn from_messages(messages: &[Message]) -> Answer {
        let mut answer = Answer::default();
        for m in messages {
            match m.tag {
                backend::ROW_DESCRIPTION => answer.fields = Some(backend::decode_row_description(&m.body).unwrap()),
                backend::DATA_ROW => answer.rows.push(m.body.to_vec()),
                backend::COMMAND_COMPLETE => answer.tag = Some(backend::decode_command_complete(&m.body).unwrap().to_owned()),
                backend::ERROR_RESPONSE => answer.error = Some(backend::decode_error_fields(&m.body).unwrap()),
                backend::NOTICE_RESPONSE => answer.notices.push(backend::decode_error_fields(&m.body).unwrap()),
                _ => {}
            }
        }
        answer
    }
}

fn simple_query(client: &mut RawClient, sql: &str) -> Vec<Message> {
    let mut out = BytesMut::new();
    frontend::query(&mut out, sql);
    client.send(&out);
    client.until_ready()
}

fn run_ok(client: &mut RawClient, sql: &str) {
    let answer = Answer::from_messages(&simple_query(client, sql));
    assert!(answer.error.is_none(), "{sql}: {:?}", answer.error);
}

/// The original, as a simple query, in a rolled-back transaction.
fn run_simple(client: &mut RawClient, sql: &str) -> Answer {
    run_ok(client, "BEGIN");
    let answer = Answer::from_messages(&simple_query(client, sql));
    run_ok(client, "ROLLBACK");
    answer
}

/// The rewrite, as Parse/Bind/Describe portal/Execute/Sync with text
/// parameters and text results, in a rolled-back transaction.
fn run_prepared(client: &mut RawClient, rewrite: &Rewrite, lexed: &Lexed) -> Answer {
    run_ok(client, "BEGIN");
    let mut out = BytesMut::new();
    frontend::parse(&mut out, "", &rewrite.sql, &rewrite.param_types);
    frontend::bind(&mut out, "", "", &[], lexed.params(), &[]);
    frontend::describe(&mut out, Target::Portal, "");
    frontend::execute(&mut out, "", 0);
    frontend::sync(&mut out);
    client.send(&out);
    let answer = Answer::from_messages(&client.until_ready());
    run_ok(client, "ROLLBACK");
    answer
}

/// Parse + Describe statement of `sql`: its parameter types and its
/// RowDescription (None for NoData), or the error.
fn describe(
    client: &mut RawClient,
    sql: &str,
    param_types: &[u32],
) -> Result<(Vec<u32>, Option<Vec<FieldDescription>>), ErrorFields> {
    let mut out = BytesMut::new();
    frontend::parse(&mut out, "", sql, param_types);
    frontend::describe(&mut out, Target::Statement, "");
    frontend::sync(&mut out);
    client.send(&out);
    let messages = client.until_ready();
    let mut params = Vec::new();
    let mut fields = None;
    for m in &messages {
        match m.tag {
            backend::ERROR_RESPONSE => return Err(backend::decode_error_fields(&m.body).unwrap()),
            backend::PARAMETER_DESCRIPTION => params = backend::decode_parameter_description(&m.body).unwrap(),
            backend::ROW_DESCRIPTION => fields = Some(backend::decode_row_description(&m.body).unwrap()),
            _ => {}
        }
    }
    Ok((params, fields))
}

/// What the relay's side-connection check says about a new shape.
enum Check {
    Accept,
    Refuse(String),
    /// The original itself fails to prepare (a bad value, a missing table):
    /// this query passes through and fails as it would.
    OriginalFails,
}

fn side_check(side: &mut RawClient, original: &str, rewrite: &Rewrite) -> Check {
    let Ok((_, original_fields)) = describe(side, original, &[]) else {
        return Check::OriginalFails;
    };
    let (params, rewritten_fields) = match describe(side, &rewrite.sql, &rewrite.param_types) {
        Ok(described) => described,
        Err(e) => return Check::Refuse(format!("the rewrite does not prepare: {e}")),
    };
    if original_fields != rewritten_fields {
        return Check::Refuse(format!("RowDescriptions differ: {original_fields:?} vs {rewritten_fields:?}"));
    }
    match rewrite.check_parameter_types(&params) {
        Ok(()) => Check::Accept,
        Err(reason) => Check::Refuse(format!("parameter types {params:?}: {reason}")),
    }
}

#[test]
fn rewritten_queries_answer_like_the_originals() {
    let pg = postgres();
    pg.fresh_database(DATABASE, Some("trustuser"));
    let corpus = Corpus::parse(CORPUS);
    assert!(corpus.queries.len() >= 250, "{} queries", corpus.queries.len());

    let mut side = RawClient::login(pg.port, "trustuser", DATABASE);
    for sql in &corpus.setup {
        run_ok(&mut side, sql);
    }
    let mut client = RawClient::login(pg.port, "trustuser", DATABASE);

    let mut lexed = Lexed::new();
    let mut failures = String::new();
    let (mut rewritten, mut passed, mut server_passed, mut errors, mut failing) = (0, 0, 0, 0, 0);
    for (sql, expect) in &corpus.queries {
        let verdict = match lexed.lex(sql, LexOptions::default()) {
            Err(unsupported) => Err(unsupported.as_str()),
            Ok(()) => match shape::validate(sql, &lexed) {
                Verdict::PassThrough(reason) => Err(reason.as_str()),
                Verdict::Rewrite(rewrite) => Ok(rewrite),
            },
        };
        let rewrite = match (verdict, expect) {
            (Err(got), Expect::Pass(want)) if got == want => {
                passed += 1;
                continue;
            }
            (Err(got), _) => {
                let _ = writeln!(failures, "\n{sql}\n  expected {expect:?}, passes through: {got}");
                continue;
            }
            (Ok(rewrite), Expect::Pass(want)) => {
                let _ = writeln!(failures, "\n{sql}\n  expected to pass through ({want}), rewritten: {}", rewrite.sql);
                continue;
            }
            (Ok(rewrite), _) => rewrite,
        };
        match (side_check(&mut side, sql, &rewrite), expect) {
            (Check::Refuse(_), Expect::ServerPass) => {
                server_passed += 1;
                continue;
            }
            (Check::Refuse(why), _) => {
                let _ = writeln!(failures, "\n{sql}\n  rewritten {}\n  refused by the server check: {why}", rewrite.sql);
                continue;
            }
            (_, Expect::ServerPass) => {
                let _ = writeln!(failures, "\n{sql}\n  rewritten {}\n  expected the server check to refuse it", rewrite.sql);
                continue;
            }
            // This query passes through. Had its shape been checked with
            // other values, the rewrite would run: it must fail the same way
            // (at Bind rather than Parse, so without a cursor position).
            (Check::OriginalFails, _) => {
                failing += 1;
                if describe(&mut side, &rewrite.sql, &rewrite.param_types).is_err() {
                    continue;
                }
            }
            (Check::Accept, _) => {}
        }
        let original = run_simple(&mut client, sql);
        let mut prepared = run_prepared(&mut client, &rewrite, &lexed);
        // A simple query sends no RowDescription for a statement without
        // rows; Describe portal answers NoData.
        if original.fields.is_none() {
            prepared.fields = prepared.fields.filter(|f| !f.is_empty());
        }
        if original != prepared {
            let _ = writeln!(
                failures,
                "\n{sql}\n  rewritten {} {:?}\n  original {original:?}\n  prepared {prepared:?}",
                rewrite.sql, rewrite.param_types
            );
        }
        rewritten += 1;
        errors += usize::from(original.error.is_some());
    }
    println!(
        "{} queries: {rewritten} rewritten and identical ({errors} of them errors), {passed} passed through by the lexer or \
         validator, {server_passed} by the server check, {failing} whose original fails to prepare",
        corpus.queries.len()
    );
    assert!(failures.is_empty(), "corpus failures:{failures}");
}

#[test]
fn the_corpus_reads_as_written() {
    let corpus = Corpus::parse(CORPUS);
    assert!(corpus.setup.iter().any(|sql| sql.starts_with("CREATE TABLE accounts")));
    let continued = corpus.queries.iter().find(|(sql, _)| sql.starts_with("SELECT 'con'")).unwrap();
    assert_eq!(continued.0, "SELECT 'con'\n       'tinued', E'a'\n'\\n'");
    let comment = corpus.queries.iter().find(|(sql, _)| sql.starts_with("-- a comment first")).unwrap();
    assert_eq!(comment.0, "-- a comment first\nSELECT id FROM accounts WHERE id = 2");
    assert!(corpus.queries.contains(&("SELECT $1".to_owned(), Expect::Pass("has_parameters".to_owned()))));
    assert!(corpus.queries.contains(&("INSERT INTO ivh VALUES ('1')".to_owned(), Expect::ServerPass)));
}
