//! Named prepared statements in transaction mode: each client's statement
//! names work on whichever server connection it gets next.

mod common;
#[path = "common/raw.rs"]
mod raw;

use bytes::BytesMut;
use common::{connect, postgres, Pglane};
use pglane::protocol::frontend::{self, Target};
use raw::{error_code, first_column, tags, RawClient};

fn pglane(cores: usize, pool_size: usize, dbname: &str, extra: &str) -> Pglane {
    let pg = postgres();
    Pglane::start_with_args(
        &format!(
            "pool_mode = \"transaction\"\nauth_type = \"trust\"\n{extra}\n[databases.app]\nhost = \"127.0.0.1\"\nport = {}\ndbname = \"{dbname}\"\npool_size = {pool_size}\n[users.postgres]\npassword = \"secret\"\n",
            pg.port
        ),
        &["--cores", &cores.to_string()],
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokio_postgres_statements_with_50_clients_on_4_server_connections() {
    postgres().fresh_database("prep_many", None);
    let lane = pglane(2, 4, "prep_many", "");
    let port = lane.port;
    let mut tasks = Vec::new();
    for client in 0..50i64 {
        tasks.push(tokio::spawn(async move {
            let c = connect(port, "postgres", "secret", "app").await;
            // Two statements, used alternately, each use its own transaction:
            // every use may land on another server connection.
            let add = c.prepare("select $1::int8 + $2::int8").await.unwrap();
            let label = c.prepare("select 'client ' || $1::int8::text").await.unwrap();
            for i in 0..20i64 {
                let sum: i64 = c.query_one(&add, &[&client, &i]).await.unwrap().get(0);
                assert_eq!(sum, client + i);
                let text: String = c.query_one(&label, &[&client]).await.unwrap().get(0);
                assert_eq!(text, format!("client {client}"));
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let servers: i64 = postgres().psql("select count(*) from pg_stat_activity where datname = 'prep_many'").parse().unwrap();
    assert!(servers <= 4, "{servers} server connections");
}

#[test]
fn pgbench_prepared_mode_has_no_failures() {
    let pg = postgres();
    postgres().fresh_database("prep_bench", None);
    common::pgbench(pg.port, "postgres", &["-i", "-q", "-s", "1", "prep_bench"]);
    let lane = pglane(2, 4, "prep_bench", "");
    let out = common::pgbench(lane.port, "postgres", &["-n", "-S", "-M", "prepared", "-c", "16", "-j", "2", "-T", "3", "app"]);
    assert!(out.contains("number of failed transactions: 0 (0.000%)"), "{out}");
    assert!(!out.contains("number of transactions actually processed: 0/"), "{out}");
}

fn parse(out: &mut BytesMut, name: &str, sql: &str) {
    frontend::parse(out, name, sql, &[]);
}

fn run_statement(out: &mut BytesMut, name: &str) {
    frontend::bind(out, "", name, &[], std::iter::empty(), &[]);
    frontend::execute(out, "", 0);
}

#[test]
fn the_same_name_means_different_sql_for_different_clients() {
    // One server connection: both clients' statements live on it together.
    let lane = pglane(1, 1, "postgres", "");
    let mut a = RawClient::login(lane.port, "postgres", "app");
    let mut b = RawClient::login(lane.port, "postgres", "app");
    let mut out = BytesMut::new();
    parse(&mut out, "S_1", "select 'from a'");
    frontend::sync(&mut out);
    a.send(&out);
    assert_eq!(tags(&a.until_ready()), "1Z");
    out.clear();
    parse(&mut out, "S_1", "select 'from b'");
    frontend::sync(&mut out);
    b.send(&out);
    assert_eq!(tags(&b.until_ready()), "1Z");
    for _ in 0..3 {
        for (client, want) in [(&mut a, "from a"), (&mut b, "from b")] {
            out.clear();
            run_statement(&mut out, "S_1");
            frontend::sync(&mut out);
            client.send(&out);
            assert_eq!(first_column(&client.until_ready()), vec![want.to_string()]);
        }
    }
}

#[test]
fn close_then_parse_the_same_name_again() {
    let lane = pglane(1, 2, "postgres", "");
    let mut c = RawClient::login(lane.port, "postgres", "app");
    let mut out = BytesMut::new();
    parse(&mut out, "S_1", "select 1");
    run_statement(&mut out, "S_1");
    frontend::close(&mut out, Target::Statement, "S_1");
    parse(&mut out, "S_1", "select 2");
    run_statement(&mut out, "S_1");
    frontend::sync(&mut out);
    c.send(&out);
    let got = c.until_ready();
    assert_eq!(tags(&got), "12DC312DCZ");
    assert_eq!(first_column(&got), vec!["1".to_string(), "2".into()]);
    // Closing a name that does not exist is fine, as in PostgreSQL.
    out.clear();
    frontend::close(&mut out, Target::Statement, "never_prepared");
    frontend::sync(&mut out);
    c.send(&out);
    assert_eq!(tags(&c.until_ready()), "3Z");
}

#[test]
fn reusing_a_name_without_close_is_an_error() {
    let lane = pglane(1, 2, "postgres", "");
    let mut c = RawClient::login(lane.port, "postgres", "app");
    let mut out = BytesMut::new();
    parse(&mut out, "S_1", "select 1");
    frontend::sync(&mut out);
    parse(&mut out, "S_1", "select 2");
    run_statement(&mut out, "S_1"); // skipped after the error, up to Sync
    frontend::sync(&mut out);
    run_statement(&mut out, "S_1"); // S_1 is still "select 1"
    frontend::sync(&mut out);
    c.send(&out);
    assert_eq!(tags(&c.until_ready()), "1Z");
    let failed = c.until_ready();
    assert_eq!((tags(&failed), error_code(&failed).as_deref()), ("EZ".into(), Some("42P05")));
    assert_eq!(first_column(&c.until_ready()), vec!["1".to_string()]);
}

#[test]
fn an_error_in_a_pipeline_skips_to_sync_and_prepares_nothing_after_it() {
    let lane = pglane(1, 2, "postgres", "");
    let mut c = RawClient::login(lane.port, "postgres", "app");
    let mut out = BytesMut::new();
    parse(&mut out, "ok", "select 'ok'");
    run_statement(&mut out, "ok");
    parse(&mut out, "bad", "select * from no_such_table");
    run_statement(&mut out, "bad");
    parse(&mut out, "after", "select 'after'");
    frontend::sync(&mut out);
    c.send(&out);
    let got = c.until_ready();
    assert_eq!(tags(&got), "12DCEZ");
    assert_eq!(error_code(&got).as_deref(), Some("42P01"));
    // "ok" exists; "bad" failed and "after" was skipped, so neither does.
    for (name, want) in [("ok", None), ("bad", Some("26000")), ("after", Some("26000"))] {
        out.clear();
        run_statement(&mut out, name);
        frontend::sync(&mut out);
        c.send(&out);
        assert_eq!(error_code(&c.until_ready()).as_deref(), want, "statement {name}");
    }
    // A failed Parse is not cached: once the table exists, the same text works.
    postgres().psql("create table if not exists later_t as select 42 as v");
    out.clear();
    parse(&mut out, "bad", "select v from later_t");
    run_statement(&mut out, "bad");
    frontend::sync(&mut out);
    c.send(&out);
    assert_eq!(first_column(&c.until_ready()), vec!["42".to_string()]);
}

#[test]
fn a_statement_is_re_prepared_after_ddl_changes_its_result_type() {
    postgres().fresh_database("prep_ddl", None);
    postgres().psql_db("prep_ddl", "create table t(a int); insert into t values (1)");
    let lane = pglane(1, 1, "prep_ddl", "");
    let mut c = RawClient::login(lane.port, "postgres", "app");
    let mut out = BytesMut::new();
    parse(&mut out, "q", "select * from t");
    run_statement(&mut out, "q");
    frontend::sync(&mut out);
    c.send(&out);
    assert_eq!(first_column(&c.until_ready()), vec!["1".to_string()]);

    postgres().psql_db("prep_ddl", "alter table t alter column a type text using a::text || '!'");
    // As on a direct connection, the next use fails once...
    out.clear();
    run_statement(&mut out, "q");
    frontend::sync(&mut out);
    c.send(&out);
    assert_eq!(error_code(&c.until_ready()).as_deref(), Some("0A000"));
    // ...and a client that prepares the text again gets the new plan, even
    // though the shard had the statement cached (a direct connection would too).
    out.clear();
    frontend::close(&mut out, Target::Statement, "q");
    parse(&mut out, "q2", "select * from t");
    run_statement(&mut out, "q2");
    frontend::sync(&mut out);
    c.send(&out);
    let got = c.until_ready();
    assert_eq!(first_column(&got), vec!["1!".to_string()], "{:?}", tags(&got));
}

#[test]
fn a_statement_evicted_from_a_server_is_prepared_again() {
    let lane = pglane(1, 1, "postgres", "max_prepared_statements = 2");
    let mut c = RawClient::login(lane.port, "postgres", "app");
    let mut out = BytesMut::new();
    for i in 0..5 {
        parse(&mut out, &format!("s{i}"), &format!("select {i}"));
    }
    frontend::sync(&mut out);
    c.send(&out);
    assert_eq!(tags(&c.until_ready()), "11111Z");
    for round in 0..2 {
        for i in 0..5 {
            out.clear();
            run_statement(&mut out, &format!("s{i}"));
            frontend::sync(&mut out);
            c.send(&out);
            assert_eq!(first_column(&c.until_ready()), vec![i.to_string()], "round {round}");
        }
    }
    // The server connection never held more than max_prepared_statements.
    out.clear();
    frontend::query(&mut out, "select count(*) from pg_prepared_statements");
    c.send(&out);
    assert_eq!(first_column(&c.until_ready()), vec!["2".to_string()]);
}

#[test]
fn too_many_statements_for_one_client_is_a_clear_error() {
    let lane = pglane(1, 1, "postgres", "max_client_prepared_statements = 3");
    let mut c = RawClient::login(lane.port, "postgres", "app");
    let mut out = BytesMut::new();
    for i in 0..4 {
        parse(&mut out, &format!("s{i}"), &format!("select {i}"));
        frontend::sync(&mut out);
    }
    c.send(&out);
    for _ in 0..3 {
        assert_eq!(tags(&c.until_ready()), "1Z");
    }
    let refused = c.until_ready();
    assert_eq!(error_code(&refused).as_deref(), Some("53400"));
}

#[test]
fn describe_is_answered_from_the_shards_cache() {
    let mut lane = pglane(1, 1, "postgres", "");
    let describe = |c: &mut RawClient, name: &str| {
        let mut out = BytesMut::new();
        parse(&mut out, name, "select $1::int4 as n, 'x'::text as t");
        frontend::describe(&mut out, Target::Statement, name);
        frontend::sync(&mut out);
        c.send(&out);
        c.until_ready()
    };
    let mut a = RawClient::login(lane.port, "postgres", "app");
    let mut b = RawClient::login(lane.port, "postgres", "app");
    let first = describe(&mut a, "s_a");
    let second = describe(&mut b, "s_b"); // same text: from the cache
    assert_eq!(tags(&first), "1tTZ");
    assert_eq!(first, second, "the cached description is the server's, byte for byte");
    // And the statement still runs with a parameter.
    let mut out = BytesMut::new();
    frontend::bind(&mut out, "", "s_b", &[], [Some(&b"7"[..])].into_iter(), &[]);
    frontend::execute(&mut out, "", 0);
    frontend::sync(&mut out);
    b.send(&out);
    assert_eq!(first_column(&b.until_ready()), vec!["7".to_string()]);
    drop((a, b));
    lane.stop();
    let log = lane.log();
    assert!(log.contains("describes_answered=1") && log.contains("parses_answered=1"), "{log}");
}

#[test]
fn discard_all_drops_only_that_clients_statements() {
    let lane = pglane(1, 1, "postgres", "");
    let mut a = RawClient::login(lane.port, "postgres", "app");
    let mut b = RawClient::login(lane.port, "postgres", "app");
    let mut out = BytesMut::new();
    for (c, sql) in [(&mut a, "select 'a'"), (&mut b, "select 'b'")] {
        out.clear();
        parse(&mut out, "S_1", sql);
        frontend::sync(&mut out);
        c.send(&out);
        assert_eq!(tags(&c.until_ready()), "1Z");
    }
    for reset in ["DISCARD ALL", "DEALLOCATE ALL"] {
        out.clear();
        frontend::query(&mut out, reset);
        a.send(&out);
        assert_eq!(error_code(&a.until_ready()), None, "{reset}");
        // a's statements are gone, as on a direct connection...
        out.clear();
        run_statement(&mut out, "S_1");
        frontend::sync(&mut out);
        a.send(&out);
        assert_eq!(error_code(&a.until_ready()).as_deref(), Some("26000"), "{reset}");
        // ...b's still work, though the server connection they share forgot them.
        b.send(&out);
        assert_eq!(first_column(&b.until_ready()), vec!["b".to_string()], "{reset}");
        out.clear();
        parse(&mut out, "S_1", "select 'a'");
        frontend::sync(&mut out);
        a.send(&out);
        assert_eq!(tags(&a.until_ready()), "1Z");
    }
}

/// Schema-per-tenant: the same statement text names a different table, with
/// a different result type, under each client's search_path. Clients must
/// not share a server statement then, or PostgreSQL re-plans it under the
/// other search_path and says "cached plan must not change result type".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_with_different_search_paths_do_not_share_statements() {
    postgres().fresh_database("prep_tenants", None);
    let pg = postgres();
    for sql in [
        "create schema tenant_a",
        "create schema tenant_b",
        "create table tenant_a.t (x int4)",
        "create table tenant_b.t (x text)",
        "insert into tenant_a.t values (7)",
        "insert into tenant_b.t values ('seven')",
    ] {
        pg.psql_db("prep_tenants", sql);
    }
    // One server connection: both clients' statements land on it.
    let lane = pglane(1, 1, "prep_tenants", "");
    let tenant = |schema: &'static str| {
        let port = lane.port;
        async move {
            let options = format!("-c search_path={schema}");
            common::try_connect_with_options(port, "postgres", "secret", "app", Some(&options)).await.expect("connects")
        }
    };
    let a = tenant("tenant_a").await;
    let b = tenant("tenant_b").await;
    let on_a = a.prepare("select x from t").await.unwrap();
    let on_b = b.prepare("select x from t").await.unwrap();
    for _ in 0..3 {
        let x: i32 = a.query_one(&on_a, &[]).await.unwrap().get(0);
        assert_eq!(x, 7);
        let x: String = b.query_one(&on_b, &[]).await.unwrap().get(0);
        assert_eq!(x, "seven");
    }
    // The same search_path still shares one server statement.
    let a2 = tenant("tenant_a").await;
    let again = a2.prepare("select x from t").await.unwrap();
    let x: i32 = a2.query_one(&again, &[]).await.unwrap().get(0);
    assert_eq!(x, 7);
    // On the one server connection: one statement per search_path, not per client.
    let prepared: i64 = a2
        .query_one("select count(*) from pg_prepared_statements where statement = 'select x from t'", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(prepared, 2);
}

/// `fut`'s output, or a panic naming `what` if it takes over 30 s.
async fn within<T>(what: String, fut: impl std::future::Future<Output = T>) -> T {
    let limit = std::time::Duration::from_secs(30);
    match tokio::time::timeout(limit, fut).await {
        Ok(r) => r,
        Err(_) => panic!("{what}: no answer within {limit:?}"),
    }
}

/// asyncpg's DDL step, over and over, with the timing left to chance: two
/// clients share a statement over two server connections, DDL changes its
/// result type, and each client must get 0A000 once, prepare again and go
/// on, never hang (seen once in CI: tests/drivers.rs's asyncpg DDL step).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ddl_under_a_shared_statement_fails_each_client_once_and_never_hangs() {
    postgres().fresh_database("prep_ddl_loop", None);
    let lane = pglane(1, 2, "prep_ddl_loop", "");
    let (a, b) = (connect(lane.port, "postgres", "secret", "app").await, connect(lane.port, "postgres", "secret", "app").await);
    for round in 0..40 {
        let table = format!("ddl_{round}");
        a.batch_execute(&format!(
            "create table {table} (id int primary key, v int); insert into {table} values (1, 10), (2, 20)"
        ))
        .await
        .unwrap();
        let q = format!("select v from {table} where id = $1");
        let (sa, sb) = (a.prepare(&q).await.unwrap(), b.prepare(&q).await.unwrap());
        let v: i32 = a.query_one(&sa, &[&1i32]).await.unwrap().get(0);
        assert_eq!(v, 10);
        let v: i32 = b.query_one(&sb, &[&2i32]).await.unwrap().get(0);
        assert_eq!(v, 20);
        a.batch_execute(&format!("alter table {table} alter column v type text")).await.unwrap();
        for (name, client, old, id, want) in [("a", &a, &sa, 1i32, "10"), ("b", &b, &sb, 2i32, "20")] {
            let err =
                within(format!("round {round}: {name}'s stale statement"), client.query_one(old, &[&id])).await.unwrap_err();
            assert_eq!(err.code().map(|c| c.code()), Some("0A000"), "round {round}: {name}: {err}");
            let fresh = within(format!("round {round}: {name} prepares again"), client.prepare(&q)).await.unwrap();
            let v: String = within(format!("round {round}: {name}'s fresh statement"), client.query_one(&fresh, &[&id]))
                .await
                .unwrap()
                .get(0);
            assert_eq!(v, want, "round {round}: {name}");
        }
    }
}
