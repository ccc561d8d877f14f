//! What a client sees on the wire outside its queries' results (issue 24):
//! errors that end a session, login refusals, the startup packet and its
//! framing, reported settings, protocol negotiation. Each test compares
//! pglane, in both pool modes where the mode could matter, with what the
//! same client gets from PostgreSQL directly.

mod common;
#[path = "common/raw.rs"]
mod raw;

use common::{postgres, Pglane, Psql, SUPERUSER, SUPERUSER_PASSWORD};
use pglane::protocol::backend::{self, ErrorFields};
use pglane::protocol::frame::Message;
use raw::{query, RawClient};

const MODES: [&str; 2] = ["session", "transaction"];

/// pglane in `mode` on two shards, trusting its clients, serving the
/// server's `postgres` database as `app`, with `settings` (config lines).
fn start(mode: &str, settings: &str) -> Pglane {
    Pglane::start_with_args(
        &format!(
            "pool_mode = \"{mode}\"\nauth_type = \"trust\"\n{settings}\n\
             [databases.app]\nhost = \"127.0.0.1\"\nport = {port}\ndbname = \"postgres\"\npool_size = 4\n\
             [users.{SUPERUSER}]\npassword = \"{SUPERUSER_PASSWORD}\"\n",
            port = postgres().port
        ),
        &["--cores", "2"],
    )
}

/// The ErrorResponses among `messages`.
fn errors(messages: &[Message]) -> Vec<ErrorFields> {
    messages
        .iter()
        .filter(|m| m.tag == backend::ERROR_RESPONSE)
        .map(|m| backend::decode_error_fields(&m.body).expect("valid error"))
        .collect()
}

/// A backend terminated under its client sends FATAL 57P01 and closes:
/// that is all the client gets, directly and through pglane (which used to
/// add its own FATAL 08006 "server closed the connection unexpectedly").
#[test]
fn a_terminated_backend_is_one_fatal_in_both_modes() {
    let pg = postgres();
    let terminate = "select pg_terminate_backend(pg_backend_pid())";
    let expected = errors(&query_until_closed(&mut RawClient::login(pg.port, "trustuser", "postgres"), terminate));
    assert_eq!(expected.len(), 1, "{expected:?}");
    assert_eq!((expected[0].severity.as_str(), expected[0].code.as_str()), ("FATAL", "57P01"));
    let psql_direct = Psql::tcp(pg.port, SUPERUSER, SUPERUSER_PASSWORD, "postgres").command(terminate).output();
    assert!(!psql_direct.success);
    for mode in MODES {
        let lane = start(mode, "");
        for _ in 0..3 {
            let mut through = RawClient::login(lane.port, SUPERUSER, "app");
            let got = errors(&query_until_closed(&mut through, terminate));
            assert_eq!(got, expected, "{mode}");
        }
        // psql prints what it got: the same lines.
        let psql = Psql::tcp(lane.port, SUPERUSER, SUPERUSER_PASSWORD, "app").command(terminate).output();
        assert!(!psql.success, "{mode}");
        assert_eq!(psql.stderr, psql_direct.stderr, "{mode}");
        assert_eq!(psql.stderr.matches("FATAL").count(), 1, "{mode}: {}", psql.stderr);
        // A terminated idle backend of a session: its FATAL comes when
        // the client next speaks (session mode keeps the backend; in
        // transaction mode the pool drops it and the client sees nothing).
        let mut idle = RawClient::login(lane.port, SUPERUSER, "app");
        let pid = raw::first_column(&query(&mut idle, "select pg_backend_pid()"))[0].clone();
        pg.psql(&format!("select pg_terminate_backend({pid})"));
        let after = errors(&query_until_closed_or_ready(&mut idle, "select 1"));
        match mode {
            "session" => {
                assert_eq!(after.len(), 1, "{after:?}");
                assert_eq!(after[0].code, "57P01");
            }
            _ => assert!(after.is_empty(), "{after:?}"),
        }
    }
}

/// Sends `sql` and reads everything up to the connection's end.
fn query_until_closed(client: &mut RawClient, sql: &str) -> Vec<Message> {
    raw::send_query(client, sql);
    client.until_closed()
}

/// Sends `sql` and reads up to its ReadyForQuery or the connection's end.
fn query_until_closed_or_ready(client: &mut RawClient, sql: &str) -> Vec<Message> {
    raw::send_query(client, sql);
    client.until_closed_or_ready()
}
