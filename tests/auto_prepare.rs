//! Auto-prepare end to end, against the real PostgreSQL: simple queries
//! through pglane with `auto_prepare = true` run as shared prepared
//! statements, and the client cannot tell: every message of every reply is
//! the same bytes a direct connection gets (errors: the same fields but the
//! server's source file, line and routine, which name where in PostgreSQL it
//! was raised).

mod common;
#[path = "common/corpus.rs"]
mod corpus;
#[path = "common/raw.rs"]
mod raw;

use std::collections::HashMap;
use std::fmt::Write as _;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use common::{postgres, Pglane};
use corpus::{Corpus, Expect, CORPUS};
use pglane::prepare::shape::Reason;
use pglane::protocol::backend;
use pglane::protocol::frame::Message;
use pglane::protocol::frontend::{self, Target};
use raw::{error_code, first_column, query, tags, RawClient};

const USER: &str = "trustuser";

/// pglane with auto-prepare on, one shard (so one shape cache), in front
/// of server database `dbname`, as database `app`.
fn pglane(pool_size: usize, dbname: &str) -> Pglane {
    pglane_with(pool_size, dbname, "")
}

/// [`pglane`] with more settings (e.g. `binary_negotiation = true`).
fn pglane_with(pool_size: usize, dbname: &str, extra: &str) -> Pglane {
    Pglane::trusting_on_one_shard(USER, &format!("auto_prepare = true\n{extra}"), dbname, pool_size)
}

fn run_ok(client: &mut RawClient, sql: &str) -> Vec<Message> {
    let reply = query(client, sql);
    assert_eq!(error_code(&reply), None, "{sql}: {reply:?}");
    reply
}

/// SHOW PREPARED's counters (summed over shards), by column name.
fn prepared_stats(port: u16) -> HashMap<String, u64> {
    let mut admin = RawClient::login(port, USER, "pgbouncer");
    let reply = run_ok(&mut admin, "SHOW PREPARED");
    let names: Vec<String> = reply
        .iter()
        .find(|m| m.tag == backend::ROW_DESCRIPTION)
        .map(|m| backend::decode_row_description(&m.body).unwrap().into_iter().map(|f| f.name).collect())
        .expect("a RowDescription");
    let mut stats = HashMap::new();
    for m in reply.iter().filter(|m| m.tag == backend::DATA_ROW) {
        let row = backend::decode_data_row(&m.body).unwrap();
        for (name, value) in names.iter().zip(row.iter()) {
            let value: u64 = std::str::from_utf8(value.unwrap_or(b"0")).unwrap().parse().unwrap_or(0);
            *stats.entry(name.clone()).or_default() += value;
        }
    }
    stats
}

/// Waits until the validator has been idle for a while: no shape queued or
/// being parsed, and its counter of validations stops moving.
fn wait_for_validations(port: u16) -> HashMap<String, u64> {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut last = prepared_stats(port);
    loop {
        std::thread::sleep(Duration::from_millis(300));
        let now = prepared_stats(port);
        let idle = now["shapes_queued"] == 0 && now["parses_in_flight"] == 0;
        if (idle && now["validations"] == last["validations"]) || Instant::now() > deadline {
            return now;
        }
        last = now;
    }
}

/// A message as the client compares it: errors and notices without the
/// fields that name PostgreSQL's source (F file, L line, R routine).
fn comparable(m: &Message) -> (u8, Vec<u8>) {
    if m.tag != backend::ERROR_RESPONSE && m.tag != backend::NOTICE_RESPONSE {
        return (m.tag, m.body.to_vec());
    }
    let mut kept = Vec::new();
    for field in m.body.split(|&b| b == 0).filter(|f| !f.is_empty()) {
        if !matches!(field[0], b'F' | b'L' | b'R') {
            kept.extend_from_slice(field);
            kept.push(0);
        }
    }
    (m.tag, kept)
}

fn describe(messages: &[Message]) -> String {
    messages.iter().map(|m| format!("{}{:?}", m.tag as char, String::from_utf8_lossy(&m.body))).collect::<Vec<_>>().join(" ")
}

/// Whether a corpus entry may run in this test: statements that change the
/// session or the schema (the corpus' utility entries) would change what
/// the entries after them mean, and have their own tests below.
/// Whether the corpus tests run `sql`: not utility statements, and not what
/// pins the client with state that changes what its texts mean (a
/// temporary table), after which none of its queries is auto-prepared.
fn runs_here(sql: &str, expect: &Expect) -> bool {
    !matches!(expect, Expect::Pass(reason) if ["utility", "not_one_statement", "select_into"].contains(&reason.as_str()))
        && !sql.to_ascii_lowercase().contains("search_path")
}

#[test]
fn the_corpus_answers_byte_for_byte_as_a_direct_connection() {
    corpus_byte_for_byte("autoprep_corpus", "", 1);
}

/// The same corpus with binary format negotiation on: rewritten queries
/// ask the server for binary where pglane can make the same text, and the
/// client still gets PostgreSQL's bytes. The first rewritten run of a
/// statement learns its description; the second is negotiated.
#[test]
fn the_corpus_answers_byte_for_byte_with_binary_negotiation_too() {
    let stats = corpus_byte_for_byte("autoprep_corpus_binary", "binary_negotiation = true", 2);
    assert!(stats["portals_negotiated"] >= 100, "{stats:?}");
    assert!(stats["values_transcoded"] >= 100, "{stats:?}");
}

/// Runs the corpus through pglane (with `extra` settings) until its shapes
/// are validated, then `compare_rounds` times through pglane and directly,
/// comparing every reply byte for byte. Returns SHOW PREPARED's figures.
fn corpus_byte_for_byte(db: &str, extra: &str, compare_rounds: usize) -> HashMap<String, u64> {
    postgres().fresh_database(db, Some(USER));
    let pg = postgres();
    let corpus = Corpus::parse(CORPUS);
    let mut direct = RawClient::login(pg.port, USER, db);
    for sql in &corpus.setup {
        run_ok(&mut direct, sql);
    }
    let entries: Vec<&(String, Expect)> = corpus.queries.iter().filter(|(sql, expect)| runs_here(sql, expect)).collect();
    assert!(entries.len() >= 280, "{} entries", entries.len());

    let lane = pglane_with(2, db, extra);
    let mut client = RawClient::login(lane.port, USER, "app");
    // Each entry runs in a transaction that is rolled back, so every run
    // sees the same data. First through pglane alone: new shapes pass
    // through and are queued for validation.
    let run = |c: &mut RawClient, sql: &str| {
        run_ok(c, "BEGIN");
        let reply = query(c, sql);
        run_ok(c, "ROLLBACK");
        reply
    };
    // In chunks the validation queue holds (64 shapes): past it, new shapes
    // pass through unqueued until a later query of theirs.
    for chunk in entries.chunks(48) {
        for (sql, _) in chunk {
            run(&mut client, sql);
        }
        wait_for_validations(lane.port);
    }
    let validated = wait_for_validations(lane.port);
    assert_eq!(pass_throughs(lane.port)["queue_full"], 0, "{validated:?}");
    assert!(validated["shapes"] >= 250, "{validated:?}");

    let literal_reasons: Vec<&str> = Reason::ALL.iter().filter(|r| r.is_about_the_literals()).map(|r| r.as_str()).collect();
    let mut failures = String::new();
    let (mut rewritten, mut errors) = (0, 0);
    let mut not_rewritten = Vec::new();
    for round in 0..compare_rounds {
        // The last round's counts are the ones checked below.
        (rewritten, errors) = (0, 0);
        not_rewritten.clear();
        for (sql, expect) in &entries {
            let before = prepared_stats(lane.port)["rewrites"];
            let through = run(&mut client, sql);
            let was_rewritten = prepared_stats(lane.port)["rewrites"] > before;
            let want = run(&mut direct, sql);
            if want.iter().map(comparable).ne(through.iter().map(comparable)) {
                let _ = writeln!(
                    failures,
                    "\n{sql}\n  rewritten: {was_rewritten}\n  direct {}\n  pglane {}",
                    describe(&want),
                    describe(&through)
                );
            }
            match (expect, was_rewritten) {
                // Refused for how it spells a literal: another query of its shape
                // may have been validated, and then it runs as that shape (its
                // answer is still compared above).
                (Expect::Pass(reason), true) if literal_reasons.contains(&reason.as_str()) => {}
                (Expect::Pass(reason), true) => {
                    let _ = writeln!(failures, "\n{sql}\n  expected to pass through ({reason}), was rewritten");
                }
                (Expect::Rewrite, false) => not_rewritten.push(sql.as_str()),
                _ => {}
            }
            rewritten += usize::from(was_rewritten);
            errors += usize::from(was_rewritten && error_code(&through).is_some());
        }
        println!("compare round {} done", round + 1);
    }
    println!(
        "{} entries: {rewritten} rewritten ({errors} of them errors), all answered as directly; {} expected rewrites passed \
         through (their shape was not validated: the original fails to prepare, or a query of the shape was refused for \
         how it spells a literal and the shape was not tried again yet): {not_rewritten:#?}",
        entries.len(),
        not_rewritten.len()
    );
    assert!(failures.is_empty(), "differences:{failures}");
    // The lexer corpus finds 9 entries whose original fails to prepare.
    assert!(rewritten >= 240 && not_rewritten.len() <= 12, "{rewritten} rewritten, {} not", not_rewritten.len());
    let stats = prepared_stats(lane.port);
    assert!(stats["validations"] >= 250 && stats["validation_failures"] >= 10, "{stats:?}");
    stats
}

/// Runs `sql` through pglane once, waits for its shape's verdict, and runs it again.
fn warm(lane: &Pglane, client: &mut RawClient, sql: &str) -> Vec<Message> {
    run_ok(client, sql);
    wait_for_validations(lane.port);
    run_ok(client, sql)
}

#[test]
fn a_rewritten_query_is_a_prepared_statement_on_the_server() {
    let db = "autoprep_server";
    postgres().fresh_database(db, Some(USER));
    let pg = postgres();
    pg.psql_db(
        db,
        &format!("CREATE TABLE t (a int, b text); INSERT INTO t VALUES (1, 'one'), (2, 'two'); ALTER TABLE t OWNER TO {USER}"),
    );
    // One server connection: the statements this client's queries use are
    // the ones pg_prepared_statements shows it.
    let lane = pglane(1, db);
    let mut client = RawClient::login(lane.port, USER, "app");
    let before = prepared_stats(lane.port);
    let reply = warm(&lane, &mut client, "SELECT b, a * 10 FROM t WHERE a = 2 AND b <> 'x'");
    assert_eq!(first_column(&reply), ["two"]);
    assert_eq!(tags(&reply), "TDCZ", "a simple query's reply");
    let after = prepared_stats(lane.port);
    assert_eq!(after["rewrites"], before["rewrites"] + 1, "{after:?}");
    let reply = run_ok(&mut client, "SELECT b, a * 10 FROM t WHERE a = 1 AND b <> 'y'");
    assert_eq!(first_column(&reply), ["one"]);
    assert_eq!(prepared_stats(lane.port)["rewrites"], before["rewrites"] + 2, "same shape, other values");

    let statements = run_ok(
        &mut client,
        "SELECT statement || ' ' || parameter_types::text FROM pg_prepared_statements WHERE name LIKE 'pglane%' ORDER BY prepare_time",
    );
    assert!(
        first_column(&statements).contains(&"SELECT b, a * $1 FROM t WHERE a = $2 AND b <> $3 {integer,integer,text}".to_owned()),
        "{:?}",
        first_column(&statements)
    );
}

#[test]
fn ddl_makes_every_shape_validate_again() {
    let db = "autoprep_ddl";
    postgres().fresh_database(db, Some(USER));
    postgres().psql_db(db, &format!("CREATE TABLE d (a int); INSERT INTO d VALUES (1); ALTER TABLE d OWNER TO {USER}"));
    let lane = pglane(2, db);
    let mut client = RawClient::login(lane.port, USER, "app");
    let sql = "SELECT * FROM d WHERE a = 1";
    let before = prepared_stats(lane.port)["rewrites"];
    warm(&lane, &mut client, sql);
    assert_eq!(prepared_stats(lane.port)["rewrites"], before + 1);

    // The result type of the statement changes: a direct connection just
    // gets the new column; so must this client, with no 0A000.
    run_ok(&mut client, "ALTER TABLE d ADD COLUMN b text DEFAULT 'new'");
    let validations = prepared_stats(lane.port)["validations"];
    assert_eq!(prepared_stats(lane.port)["shapes"], 0, "DDL clears the shapes");
    let reply = run_ok(&mut client, sql);
    let fields =
        reply.iter().find(|m| m.tag == backend::ROW_DESCRIPTION).map(|m| backend::decode_row_description(&m.body).unwrap());
    assert_eq!(fields.map(|f| f.len()), Some(2));
    assert_eq!(prepared_stats(lane.port)["rewrites"], before + 1, "passed through until validated again");
    wait_for_validations(lane.port);
    let reply = run_ok(&mut client, sql);
    let stats = prepared_stats(lane.port);
    assert!(stats["validations"] > validations, "validated again: {stats:?}");
    assert_eq!(stats["rewrites"], before + 2, "rewritten again once validated: {stats:?}");
    let row = reply.iter().find(|m| m.tag == backend::DATA_ROW).expect("a row");
    let values: Vec<_> = backend::decode_data_row(&row.body).unwrap().iter().map(|v| v.map(<[u8]>::to_vec)).collect();
    assert_eq!(values, [Some(b"1".to_vec()), Some(b"new".to_vec())]);

    // DDL inside a transaction block: shapes validated meanwhile are
    // dropped again when it ends.
    run_ok(&mut client, "BEGIN");
    run_ok(&mut client, "ALTER TABLE d DROP COLUMN b");
    run_ok(&mut client, "COMMIT");
    let reply = run_ok(&mut client, sql);
    assert_eq!(reply.iter().filter(|m| m.tag == backend::ROW_DESCRIPTION).count(), 1);
    let row = reply.iter().find(|m| m.tag == backend::DATA_ROW).expect("a row");
    assert_eq!(backend::decode_data_row(&row.body).unwrap().len(), 1);
}

#[test]
fn an_error_position_points_into_the_clients_text() {
    let db = "autoprep_position";
    postgres().fresh_database(db, Some(USER));
    let pg = postgres();
    pg.psql_db(db, &format!("CREATE TABLE p (a int); INSERT INTO p VALUES (42); ALTER TABLE p OWNER TO {USER}"));
    let lane = pglane(2, db);
    let mut client = RawClient::login(lane.port, USER, "app");
    // Validated (and its shape cached) while column a exists, ...
    let sql = "SELECT 'é-x' || a, a + 1 FROM p WHERE a = 42";
    let warmed = prepared_stats(lane.port)["validations"];
    run_ok(&mut client, sql);
    wait_for_validations(lane.port);
    assert!(prepared_stats(lane.port)["validations"] > warmed);
    // ... then renamed behind pglane's back: the rewritten statement fails
    // to prepare on the client's connection, at a position in "$1 || a".
    pg.psql_db(db, "ALTER TABLE p RENAME COLUMN a TO z");
    let rewrites = prepared_stats(lane.port)["rewrites"];
    let through = query(&mut client, sql);
    assert_eq!(prepared_stats(lane.port)["rewrites"], rewrites + 1, "this one was rewritten");
    let mut direct = RawClient::login(pg.port, USER, db);
    let want = query(&mut direct, sql);
    assert_eq!(error_code(&want).as_deref(), Some("42703"));
    let position = |messages: &[Message]| {
        let error = messages.iter().find(|m| m.tag == backend::ERROR_RESPONSE).expect("an error");
        error.body.split(|&b| b == 0).find(|f| f.first() == Some(&b'P')).map(|f| String::from_utf8_lossy(&f[1..]).into_owned())
    };
    assert_eq!(position(&want).as_deref(), Some("17"), "the first `a`, in characters");
    assert_eq!(position(&through), position(&want));
    assert_eq!(through.iter().map(comparable).collect::<Vec<_>>(), want.iter().map(comparable).collect::<Vec<_>>());
}

/// Parse "" / Bind "" / Execute / Sync, as pgjdbc with prepareThreshold=0 sends them.
fn unnamed_round(client: &mut RawClient, sql: &str, value: &str) -> Vec<Message> {
    let mut out = BytesMut::new();
    frontend::parse(&mut out, "", sql, &[]);
    frontend::bind(&mut out, "", "", &[], [Some(value.as_bytes())].into_iter(), &[]);
    frontend::describe(&mut out, Target::Portal, "");
    frontend::execute(&mut out, "", 0);
    frontend::sync(&mut out);
    client.send(&out);
    client.until_ready()
}

#[test]
fn unnamed_statements_become_shared_named_statements() {
    let db = "autoprep_unnamed";
    postgres().fresh_database(db, Some(USER));
    postgres().psql_db(
        db,
        &format!("CREATE TABLE u (a int, b text); INSERT INTO u VALUES (1, 'one'), (2, 'two'); ALTER TABLE u OWNER TO {USER}"),
    );
    let lane = pglane(1, db);
    let mut client = RawClient::login(lane.port, USER, "app");
    let sql = "SELECT b FROM u WHERE a = $1";
    let before = prepared_stats(lane.port);
    let first = unnamed_round(&mut client, sql, "1");
    assert_eq!(tags(&first), "12TDCZ");
    assert_eq!(first_column(&first), ["one"]);
    let second = unnamed_round(&mut client, sql, "2");
    assert_eq!(tags(&second), "12TDCZ", "ParseComplete answered by pglane");
    assert_eq!(first_column(&second), ["two"]);
    let after = prepared_stats(lane.port);
    assert_eq!(after["unnamed_mapped"], before["unnamed_mapped"] + 2, "{after:?}");
    assert_eq!(after["server_parses"], before["server_parses"] + 1, "prepared once: {after:?}");
    assert!(after["parses_answered"] > before["parses_answered"], "{after:?}");
    // Another client's unnamed Parse of the same text uses the same statement.
    let mut other = RawClient::login(lane.port, USER, "app");
    assert_eq!(first_column(&unnamed_round(&mut other, sql, "2")), ["two"]);
    assert_eq!(prepared_stats(lane.port)["server_parses"], before["server_parses"] + 1);
    let names = run_ok(&mut other, "SELECT statement FROM pg_prepared_statements WHERE name LIKE 'pglane%'");
    assert!(first_column(&names).contains(&sql.to_owned()), "{:?}", first_column(&names));

    // An unnamed statement that fails to prepare is the client's error, and
    // the next one works.
    let bad = unnamed_round(&mut client, "SELECT nosuch FROM u WHERE a = $1", "1");
    assert_eq!(error_code(&bad).as_deref(), Some("42703"));
    assert_eq!(first_column(&unnamed_round(&mut client, sql, "1")), ["one"]);
    // A simple query drops the unnamed statement: Bind "" alone is refused, as PostgreSQL does.
    run_ok(&mut client, "SELECT 1");
    let mut out = BytesMut::new();
    frontend::bind(&mut out, "", "", &[], [Some(&b"1"[..])].into_iter(), &[]);
    frontend::execute(&mut out, "", 0);
    frontend::sync(&mut out);
    client.send(&out);
    assert_eq!(error_code(&client.until_ready()).as_deref(), Some("26000"));
}

/// The same text is another table to a client with another search_path:
/// it gets shapes of its own, validated under its search_path, and each
/// client gets its own rows.
#[test]
fn a_client_with_its_own_search_path_gets_shapes_of_its_own() {
    let db = "autoprep_search_path";
    postgres().fresh_database(db, Some(USER));
    postgres().psql_db(
        db,
        &format!(
            "CREATE SCHEMA other AUTHORIZATION {USER}; CREATE TABLE s (a text); INSERT INTO s VALUES ('public'); \
             CREATE TABLE other.s (a text); INSERT INTO other.s VALUES ('other'); ALTER TABLE s OWNER TO {USER}; ALTER TABLE other.s OWNER TO {USER}"
        ),
    );
    let lane = pglane(2, db);
    let mut plain = RawClient::login(lane.port, USER, "app");
    let sql = "SELECT a FROM s WHERE a <> 'x'";
    assert_eq!(first_column(&warm(&lane, &mut plain, sql)), ["public"]);
    let mut other = RawClient::login(lane.port, USER, "app");
    run_ok(&mut other, "SET search_path = other");
    let rewrites = prepared_stats(lane.port)["rewrites"];
    assert_eq!(first_column(&run_ok(&mut other, sql)), ["other"]);
    assert_eq!(prepared_stats(lane.port)["rewrites"], rewrites, "a new shape in the other client's settings");
    assert_eq!(first_column(&warm(&lane, &mut other, sql)), ["other"]);
    let rewrites = prepared_stats(lane.port)["rewrites"];
    assert_eq!(first_column(&run_ok(&mut other, sql)), ["other"]);
    assert_eq!(first_column(&run_ok(&mut plain, sql)), ["public"]);
    assert_eq!(prepared_stats(lane.port)["rewrites"], rewrites + 2, "both rewritten, each as its own shape");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokio_postgres_query_typed_runs_on_shared_statements() {
    use tokio_postgres::types::Type;
    let db = "autoprep_typed";
    postgres().fresh_database(db, Some(USER));
    postgres().psql_db(db, &format!("CREATE TABLE q (a int, b text); INSERT INTO q SELECT i, 'row ' || i FROM generate_series(1, 100) i; ALTER TABLE q OWNER TO {USER}"));
    let lane = pglane(2, db);
    let port = lane.port;
    let before = prepared_stats(port);
    // query_typed sends Parse "" / Bind / Describe statement "" / Execute / Sync.
    let mut tasks = Vec::new();
    for client in 0..4i32 {
        tasks.push(tokio::spawn(async move {
            let c = common::connect(port, USER, "", "app").await;
            for i in 1..=25i32 {
                let a = client * 25 + i;
                let rows = c.query_typed("SELECT b, a FROM q WHERE a = $1", &[(&a, Type::INT4)]).await.unwrap();
                assert_eq!(rows.len(), 1);
                assert_eq!(rows[0].get::<_, String>(0), format!("row {a}"));
                assert_eq!(rows[0].get::<_, i32>(1), a);
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let after = prepared_stats(port);
    assert_eq!(after["unnamed_mapped"] - before["unnamed_mapped"], 100, "{after:?}");
    assert!(after["server_parses"] - before["server_parses"] <= 4, "once per server connection, at most: {after:?}");
    assert!(after["describes_answered"] > before["describes_answered"], "{after:?}");
}

#[test]
fn rewritten_statements_keep_their_transaction_blocks() {
    let db = "autoprep_tx";
    postgres().fresh_database(db, Some(USER));
    let pg = postgres();
    pg.psql_db(db, &format!("CREATE TABLE w (a int PRIMARY KEY, b text); ALTER TABLE w OWNER TO {USER}"));
    let lane = pglane(2, db);
    let mut client = RawClient::login(lane.port, USER, "app");
    let statements = ["INSERT INTO w VALUES (1, 'x')", "UPDATE w SET b = 'y' WHERE a = 1", "DELETE FROM w WHERE a = 1"];
    // Validate the three shapes (the rows they touch are gone again at the end).
    for sql in statements {
        run_ok(&mut client, sql);
    }
    wait_for_validations(lane.port);
    let rewrites = prepared_stats(lane.port)["rewrites"];

    // Committed: both rows stay; the Syncs of the rewrites do not end the block.
    run_ok(&mut client, "BEGIN");
    run_ok(&mut client, "INSERT INTO w VALUES (10, 'x')");
    run_ok(&mut client, "INSERT INTO w VALUES (11, 'x')");
    run_ok(&mut client, "UPDATE w SET b = 'z' WHERE a = 11");
    let in_block = query(&mut client, "INSERT INTO w VALUES (12, 'x')");
    assert_eq!(in_block.last().map(|m| m.body.to_vec()), Some(b"T".to_vec()), "still in the block");
    run_ok(&mut client, "COMMIT");
    // Failed: a unique violation in a rewritten INSERT aborts the block, as it would directly.
    run_ok(&mut client, "BEGIN");
    run_ok(&mut client, "DELETE FROM w WHERE a = 12");
    let violation = query(&mut client, "INSERT INTO w VALUES (10, 'dup')");
    assert_eq!(error_code(&violation).as_deref(), Some("23505"));
    assert_eq!(violation.last().map(|m| m.body.to_vec()), Some(b"E".to_vec()));
    let ignored = query(&mut client, "UPDATE w SET b = 'never' WHERE a = 10");
    assert_eq!(error_code(&ignored).as_deref(), Some("25P02"));
    run_ok(&mut client, "ROLLBACK");
    assert!(prepared_stats(lane.port)["rewrites"] >= rewrites + 6, "these ran rewritten");
    assert_eq!(pg.psql_db(db, "SELECT string_agg(a || b, ',' ORDER BY a) FROM w"), "10x,11z,12x");
}

#[test]
fn pgbench_simple_and_extended_run_rewritten_with_no_failures() {
    let db = "autoprep_bench";
    postgres().fresh_database(db, Some(USER));
    let pg = postgres();
    common::pgbench(pg.port, USER, &["-i", "-q", "-s", "1", db]);
    let lane = pglane(4, db);
    // The shapes are validated first: under pgbench's load the parser's
    // thread, which yields to the shard's, may take a while to get to them.
    common::pgbench(lane.port, USER, &["-n", "-S", "-M", "simple", "-c", "2", "-t", "10", "app"]);
    wait_for_validations(lane.port);
    for mode in ["simple", "extended"] {
        let before = prepared_stats(lane.port);
        let out = common::pgbench(lane.port, USER, &["-n", "-S", "-M", mode, "-c", "8", "-j", "2", "-T", "3", "app"]);
        assert!(out.contains("number of failed transactions: 0 (0.000%)"), "{out}");
        let processed: u64 = out
            .lines()
            .find_map(|l| l.strip_prefix("number of transactions actually processed: "))
            .and_then(|n| n.split('/').next()?.parse().ok())
            .unwrap_or_else(|| panic!("{out}"));
        let after = prepared_stats(lane.port);
        let (column, least) = match mode {
            "simple" => ("rewrites", processed),
            _ => ("unnamed_mapped", processed),
        };
        assert!(after[column] - before[column] >= least, "{mode}: {processed} transactions, {after:?}");
    }
}

#[test]
fn a_plan_made_stale_behind_pglanes_back_is_run_again_as_the_plain_query() {
    let db = "autoprep_stale";
    postgres().fresh_database(db, Some(USER));
    let pg = postgres();
    pg.psql_db(db, &format!("CREATE TABLE st (a int); INSERT INTO st VALUES (1); ALTER TABLE st OWNER TO {USER}"));
    // One server connection: the statement the client's queries run is
    // prepared on it, and stays there when the table changes.
    let lane = pglane(1, db);
    let mut client = RawClient::login(lane.port, USER, "app");
    let sql = "SELECT * FROM st WHERE a = 1";
    warm(&lane, &mut client, sql);
    // DDL pglane does not see: the statement's result type changes.
    pg.psql_db(db, "ALTER TABLE st ADD COLUMN b text DEFAULT 'b'");
    let before = prepared_stats(lane.port);
    let through = run_ok(&mut client, sql);
    let mut direct = RawClient::login(pg.port, USER, db);
    let want = run_ok(&mut direct, sql);
    assert_eq!(
        through.iter().map(comparable).collect::<Vec<_>>(),
        want.iter().map(comparable).collect::<Vec<_>>(),
        "no 0A000, the new column"
    );
    let after = prepared_stats(lane.port);
    assert_eq!(after["reruns"], before["reruns"] + 1, "{after:?}");
    assert_eq!(after["rewrites"], before["rewrites"] + 1, "{after:?}");
    assert_eq!(after["shapes"], 0, "the shapes are validated again: {after:?}");
}

#[test]
fn a_write_in_a_database_with_rules_on_writes_passes_through_with_the_rules_rows() {
    let db = "autoprep_rules";
    postgres().fresh_database(db, Some(USER));
    let pg = postgres();
    pg.psql_db(
        db,
        &format!(
            "CREATE TABLE nr (a int); INSERT INTO nr VALUES (1); ALTER TABLE nr OWNER TO {USER};
             CREATE RULE nr_rows AS ON UPDATE TO nr DO INSTEAD SELECT 42 AS x"
        ),
    );
    let lane = pglane(1, db);
    let mut client = RawClient::login(lane.port, USER, "app");
    let mut direct = RawClient::login(pg.port, USER, db);
    // The rule's SELECT returns its row to a simple query; a prepared
    // statement's portal would run it and discard the row.
    let write = "UPDATE nr SET a = a + 1 WHERE a > 0";
    let before = prepared_stats(lane.port);
    let through = warm(&lane, &mut client, write);
    let want = run_ok(&mut direct, write);
    assert_eq!(tags(&want), "TDCZ", "the rule's row");
    assert_eq!(through.iter().map(comparable).collect::<Vec<_>>(), want.iter().map(comparable).collect::<Vec<_>>());
    assert_eq!(prepared_stats(lane.port)["rewrites"], before["rewrites"], "the write passed through");
    assert!(pass_throughs(lane.port).get("refused_rules").is_some_and(|&n| n >= 1), "{:?}", pass_throughs(lane.port));
    // A read there is rewritten as anywhere.
    assert_eq!(first_column(&warm(&lane, &mut client, "SELECT a FROM nr WHERE a > 0")), ["1"]);
    assert_eq!(prepared_stats(lane.port)["rewrites"], before["rewrites"] + 1);
}

#[test]
fn a_literal_the_parser_refuses_does_not_condemn_its_shape() {
    let db = "autoprep_spelling";
    postgres().fresh_database(db, Some(USER));
    let lane = pglane(2, db);
    let mut client = RawClient::login(lane.port, USER, "app");
    // PostgreSQL 15 takes a comment between continued strings, pg_query does
    // not: this query passes through ...
    let odd = "SELECT 'con' -- a comment\n'tinued'";
    assert_eq!(first_column(&run_ok(&mut client, odd)), ["continued"]);
    let stats = wait_for_validations(lane.port);
    assert_eq!(stats["validation_failures"], 1, "{stats:?}");
    assert_eq!(first_column(&run_ok(&mut client, odd)), ["continued"]);
    // ... but "SELECT $1" is a fine shape: after a while another query of it is checked.
    std::thread::sleep(Duration::from_millis(1100));
    let plain = "SELECT 'plain'";
    let rewrites = prepared_stats(lane.port)["rewrites"];
    assert_eq!(first_column(&warm(&lane, &mut client, plain)), ["plain"]);
    assert_eq!(prepared_stats(lane.port)["rewrites"], rewrites + 1, "rewritten once validated");
    // The odd spelling is now that shape's too, with the lexer's value for its literal.
    assert_eq!(first_column(&run_ok(&mut client, odd)), ["continued"]);
    assert_eq!(prepared_stats(lane.port)["rewrites"], rewrites + 2);
}

/// SHOW PASS_THROUGHS (summed over shards): queries by reason.
fn pass_throughs(port: u16) -> HashMap<String, u64> {
    let mut admin = RawClient::login(port, USER, "pgbouncer");
    let mut counts = HashMap::new();
    for m in run_ok(&mut admin, "SHOW PASS_THROUGHS").iter().filter(|m| m.tag == backend::DATA_ROW) {
        let row: Vec<Option<&[u8]>> = backend::decode_data_row(&m.body).unwrap().iter().collect();
        let text = |i: usize| String::from_utf8_lossy(row[i].unwrap_or_default()).into_owned();
        *counts.entry(text(1)).or_default() += text(2).parse::<u64>().unwrap();
    }
    counts
}

/// How much each reason's count grew.
fn grown(before: &HashMap<String, u64>, after: &HashMap<String, u64>) -> HashMap<String, u64> {
    after
        .iter()
        .filter(|(k, v)| **v > before.get(*k).copied().unwrap_or(0))
        .map(|(k, v)| (k.clone(), v - before.get(k).copied().unwrap_or(0)))
        .collect()
}

#[test]
fn pass_throughs_are_counted_by_reason_and_rewrites_are_timed() {
    let db = "autoprep_reasons";
    postgres().fresh_database(db, Some(USER));
    let lane = pglane(2, db);
    let mut client = RawClient::login(lane.port, USER, "app");
    let all = pass_throughs(lane.port);
    assert!(all.len() >= 30 && all.values().all(|&n| n == 0), "every reason listed, none counted yet: {all:?}");
    let reasons_of = |client: &mut RawClient, sql: &str| {
        let before = pass_throughs(lane.port);
        query(client, sql);
        grown(&before, &pass_throughs(lane.port))
    };
    let one = |reason: &str| HashMap::from([(reason.to_owned(), 1)]);

    assert_eq!(reasons_of(&mut client, "SELECT 1; SELECT 2"), one("lexer_multiple_statements"));
    assert_eq!(reasons_of(&mut client, "SELECT $1"), one("lexer_has_parameters"), "the server's error for it");
    // A new shape passes through while it is validated, then for what the
    // validator found.
    assert_eq!(reasons_of(&mut client, "SHOW work_mem"), one("validating"));
    assert_eq!(reasons_of(&mut client, "SELECT 1 AS a ORDER BY 1"), one("validating"));
    wait_for_validations(lane.port);
    assert_eq!(reasons_of(&mut client, "SHOW work_mem"), one("refused_utility"));
    assert_eq!(reasons_of(&mut client, "SELECT 1 AS a ORDER BY 1"), HashMap::new(), "a kept literal: rewritten");
    // In a failed transaction block.
    run_ok(&mut client, "BEGIN");
    assert_eq!(error_code(&query(&mut client, "SELECT 1/0")).as_deref(), Some("22012"));
    assert_eq!(reasons_of(&mut client, "SELECT 1 AS a ORDER BY 1"), one("failed_transaction"));
    run_ok(&mut client, "ROLLBACK");
    // A client whose settings pglane cannot follow (set_config with a
    // computed value) is pinned, and gets no auto-prepare from then on.
    let mut other = RawClient::login(lane.port, USER, "app");
    let unfollowed = "SELECT set_config('search_path', current_setting('search_path'), false)";
    assert_eq!(reasons_of(&mut other, unfollowed), one("unknown_settings"));
    assert_eq!(reasons_of(&mut other, "SELECT 1 AS a ORDER BY 1"), one("unknown_settings"));

    // One query in 16 is timed, a client's first included.
    let mut timed = RawClient::login(lane.port, USER, "app");
    for _ in 0..20 {
        run_ok(&mut timed, "SELECT 1 AS a ORDER BY 1");
    }
    let stats = prepared_stats(lane.port);
    let counted: u64 = pass_throughs(lane.port).values().sum();
    assert_eq!(counted, stats["pass_throughs"], "the reasons add up: {stats:?}");
    assert!(stats["rewrites"] >= 20 && stats["avg_rewrite_ns"] > 0, "{stats:?}");
    assert!(stats["avg_pass_through_ns"] > 0, "{stats:?}");
}

#[test]
fn a_flood_of_new_shapes_is_bounded() {
    let db = "autoprep_flood";
    postgres().fresh_database(db, Some(USER));
    let lane = pglane(2, db);
    let mut client = RawClient::login(lane.port, USER, "app");
    let before = pass_throughs(lane.port);
    // 300 shapes never seen, sent in one write: pglane reads them faster
    // than one validator checks shapes on a server round trip each.
    let shapes = 300;
    let mut out = BytesMut::new();
    for i in 0..shapes {
        frontend::query(&mut out, &format!("SELECT 1 AS c{i}"));
    }
    client.send(&out);
    for _ in 0..shapes {
        let reply = client.until_ready();
        assert_eq!(error_code(&reply), None);
    }
    let grew = grown(&before, &pass_throughs(lane.port));
    assert_eq!(grew.values().sum::<u64>(), shapes, "{grew:?}");
    assert!(grew.get("queue_full").copied().unwrap_or(0) > 0, "the queue filled up: {grew:?}");
    assert!(grew["validating"] <= 64 + 20, "at most the queue's 64 and those validated meanwhile: {grew:?}");
    // What was left out is queued by a later query of its shape.
    let stats = wait_for_validations(lane.port);
    assert_eq!(stats["shapes_queued"], 0, "{stats:?}");
    let last = format!("SELECT 1 AS c{}", shapes - 1);
    run_ok(&mut client, &last);
    wait_for_validations(lane.port);
    let rewrites = prepared_stats(lane.port)["rewrites"];
    run_ok(&mut client, &last);
    assert_eq!(prepared_stats(lane.port)["rewrites"], rewrites + 1);
}

#[test]
fn a_big_new_shape_is_parsed_off_the_shard_while_queries_flow() {
    let db = "autoprep_big";
    postgres().fresh_database(db, Some(USER));
    let lane = pglane(2, db);
    let mut client = RawClient::login(lane.port, USER, "app");
    let mut other = RawClient::login(lane.port, USER, "app");
    let mut admin = RawClient::login(lane.port, USER, "pgbouncer");
    let in_flight = |admin: &mut RawClient| {
        let reply = run_ok(admin, "SHOW PREPARED");
        let names: Vec<String> = reply
            .iter()
            .find(|m| m.tag == backend::ROW_DESCRIPTION)
            .map(|m| backend::decode_row_description(&m.body).unwrap().into_iter().map(|f| f.name).collect())
            .unwrap();
        let column = names.iter().position(|n| n == "parses_in_flight").unwrap();
        let row = reply.iter().find(|m| m.tag == backend::DATA_ROW).unwrap();
        let values: Vec<Option<&[u8]>> = backend::decode_data_row(&row.body).unwrap().iter().collect();
        String::from_utf8_lossy(values[column].unwrap()).parse::<u64>().unwrap()
    };
    // pg_query takes long over a long IN list (hundreds of ms in a debug
    // build). While it parses one, the one shard answers the admin console
    // and runs another client's queries; were the parse on the shard's
    // thread, nothing could see it in flight. A faster machine may finish a
    // parse before it is seen: then a longer list is tried.
    let mut served_meanwhile = false;
    for n in [5_000usize, 20_000, 60_000] {
        let list: Vec<String> = (0..n).map(|i| (i + 100).to_string()).collect();
        let big = format!("SELECT count(*) FROM generate_series(1, 3) g WHERE g IN ({})", list.join(", "));
        let validations = prepared_stats(lane.port)["validations"];
        let reply = run_ok(&mut client, &big);
        assert_eq!(first_column(&reply), ["0"]);
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline && prepared_stats(lane.port)["validations"] == validations {
            std::thread::sleep(Duration::from_millis(1));
        }
        if in_flight(&mut admin) == 0 {
            continue;
        }
        assert_eq!(first_column(&run_ok(&mut other, "SELECT 'meanwhile'")), ["meanwhile"]);
        if in_flight(&mut admin) == 1 {
            served_meanwhile = true;
            break;
        }
    }
    assert!(served_meanwhile, "a query was answered while a parse was in flight");
    let stats = wait_for_validations(lane.port);
    assert_eq!(stats["parses_in_flight"], 0, "{stats:?}");
}

#[test]
fn spellings_of_one_statement_share_it_and_answer_as_directly() {
    let db = "autoprep_spellings";
    postgres().fresh_database(db, Some(USER));
    let pg = postgres();
    pg.psql_db(
        db,
        &format!(
            "CREATE TABLE sp (id int PRIMARY KEY, \"Name\" text, val numeric); \
             INSERT INTO sp VALUES (1, 'one', 1.5), (2, 'two', 2.5), (3, 'three', 3.5); ALTER TABLE sp OWNER TO {USER}"
        ),
    );
    let lane = pglane(2, db);
    let mut client = RawClient::login(lane.port, USER, "app");
    let mut direct = RawClient::login(pg.port, USER, db);
    let run = |c: &mut RawClient, sql: &str| {
        run_ok(c, "BEGIN");
        let reply = query(c, sql);
        run_ok(c, "ROLLBACK");
        reply
    };
    // Each first text is validated; the others differ in whitespace,
    // comments, the case of unquoted words and a trailing `;`, and in
    // their literals' values.
    let families: &[(&str, &[&str])] = &[
        (
            "SELECT id, \"Name\" AS n, val * 2 FROM sp WHERE id = 1",
            &[
                "select ID, \"Name\" as N, VAL*2 from SP where ID=2",
                "SELECT id,\n  \"Name\" AS n, /* c */ val * 2 FROM sp -- c\n WHERE id = 3;",
            ],
        ),
        (
            "SELECT count(*) AS Total, sum(val) FROM sp WHERE val > 1.5",
            &["select COUNT(*) as total, SUM(VAL) from sp where VAL > 2.5"],
        ),
        ("SELECT 'x' || id AS Label FROM sp ORDER BY 1 LIMIT 2", &["SELECT 'y'||ID as LABEL from sp order by 1 limit 1"]),
        (
            "INSERT INTO sp VALUES (10, 'a', 1) RETURNING id AS Inserted, val::TEXT",
            &["insert into SP values (11,'b',2) returning ID as inserted, VAL::text"],
        ),
        (
            "UPDATE sp SET val = val + 1 WHERE id = 1 RETURNING val, \"Name\"",
            &["Update SP Set VAL = VAL + 7 Where ID = 2 Returning VAL, \"Name\""],
        ),
        ("SELECT 1/0 AS Boom FROM sp WHERE id = 1", &["select 1/0 as boom from sp where id = 1"]),
        ("INSERT INTO sp VALUES (1, 'dup', 0)", &["insert into sp values (1, 'again', 0)"]),
    ];
    for (first, _) in families {
        run(&mut client, first);
    }
    wait_for_validations(lane.port);
    let before = prepared_stats(lane.port);
    let mut failures = String::new();
    let mut respelled = 0;
    for (first, others) in families {
        for sql in std::iter::once(first).chain(others.iter()) {
            let rewrites = prepared_stats(lane.port)["rewrites"];
            let through = run(&mut client, sql);
            let want = run(&mut direct, sql);
            if prepared_stats(lane.port)["rewrites"] != rewrites + 1 {
                let _ = writeln!(failures, "\n{sql}: not rewritten");
            }
            if want.iter().map(comparable).ne(through.iter().map(comparable)) {
                let _ = writeln!(failures, "\n{sql}\n  direct {}\n  pglane {}", describe(&want), describe(&through));
            }
            respelled += usize::from(sql != first);
        }
    }
    assert!(failures.is_empty(), "{failures}");
    let after = prepared_stats(lane.port);
    assert_eq!(after["validations"], before["validations"], "no spelling was validated again: {after:?}");
    assert_eq!(after["respellings"] - before["respellings"], respelled as u64, "{after:?}");
    // One server statement per family.
    let statements = run_ok(&mut client, "SELECT count(*) FROM pg_prepared_statements WHERE name LIKE 'pglane%'");
    assert!(first_column(&statements)[0].parse::<usize>().unwrap() <= families.len(), "{statements:?}");
}

#[test]
fn an_error_position_points_into_the_clients_spelling() {
    let db = "autoprep_respelled_position";
    postgres().fresh_database(db, Some(USER));
    let pg = postgres();
    pg.psql_db(db, &format!("CREATE TABLE p (a int); INSERT INTO p VALUES (42); ALTER TABLE p OWNER TO {USER}"));
    let lane = pglane(1, db);
    let mut client = RawClient::login(lane.port, USER, "app");
    let first = "SELECT 'é-x' || a, a + 1 FROM p WHERE a = 42";
    run_ok(&mut client, first);
    wait_for_validations(lane.port);
    assert_eq!(first_column(&run_ok(&mut client, first)), ["é-x42"]);
    // The column goes away behind pglane's back: the statement prepared
    // from the first text fails, at a position in that text.
    pg.psql_db(db, "ALTER TABLE p RENAME COLUMN a TO z");
    let other = "select  /* é */ 'é-x'||A,\n A + 7 from P where A = 1";
    let rewrites = prepared_stats(lane.port)["rewrites"];
    let through = query(&mut client, other);
    assert_eq!(prepared_stats(lane.port)["rewrites"], rewrites + 1, "this one ran as the first text's statement");
    let mut direct = RawClient::login(pg.port, USER, db);
    let want = query(&mut direct, other);
    assert_eq!(error_code(&want).as_deref(), Some("42703"));
    assert_eq!(through.iter().map(comparable).collect::<Vec<_>>(), want.iter().map(comparable).collect::<Vec<_>>());
}

/// Parse / Bind / Execute / Sync of a named statement, in one request (psycopg's `prepare=True`).
fn named_round(client: &mut RawClient, name: &str, sql: &str, value: &str) -> Vec<Message> {
    let mut out = BytesMut::new();
    frontend::parse(&mut out, name, sql, &[]);
    frontend::bind(&mut out, "", name, &[], [Some(value.as_bytes())].into_iter(), &[]);
    frontend::execute(&mut out, "", 0);
    frontend::sync(&mut out);
    client.send(&out);
    client.until_ready()
}

/// A type dropped and created again on the server directly (an enum, an
/// extension's type) gets a new OID; a statement prepared before keeps the
/// old one among its parameter types, and PostgreSQL answers every Bind of
/// it with XX000 "cache lookup failed for type N", for good. pglane mapped
/// later clients' Parses onto that statement, so every client failed on
/// that server connection until the statement was evicted, where directly
/// their fresh Parses succeed. Now the Bind's error retires the statement
/// and a request that is just the Parse, Bind, Execute and Sync (nothing
/// of it ran) is sent again, its Parse prepared afresh; a rewritten simple
/// query is run again as it was.
#[test]
fn a_type_recreated_behind_pglanes_back_is_not_the_clients_error() {
    let db = "autoprep_type_recreated";
    postgres().fresh_database(db, Some(USER));
    let pg = postgres();
    let recreate =
        format!("DROP TYPE IF EXISTS mood; CREATE TYPE mood AS ENUM ('sad', 'happy'); ALTER TYPE mood OWNER TO {USER}");
    pg.psql_db(db, &recreate);
    // One server connection: the statements stay prepared on it.
    let lane = pglane(1, db);
    let (unnamed, named, simple) = ("SELECT $1::mood::text", "SELECT $1::mood", "SELECT 'sad'::mood");
    let mut first = RawClient::login(lane.port, USER, "app");
    let same = |through: &[Message], direct: &[Message], what: &str| {
        assert_eq!(
            through.iter().map(comparable).collect::<Vec<_>>(),
            direct.iter().map(comparable).collect::<Vec<_>>(),
            "{what}"
        );
    };
    for round in 0..4 {
        if round > 0 {
            pg.psql_db(db, &recreate);
        }
        let before = prepared_stats(lane.port);
        // A new client each round: its Parses are answered from the
        // statements the server connection has. The first to run finds its
        // statement stale (and with it pglane forgets every statement and
        // shape, as for DDL it sees); each kind goes first once.
        let mut client = RawClient::login(lane.port, USER, "app");
        let mut direct = RawClient::login(pg.port, USER, db);
        for kind in (0..3).map(|k| (k + round) % 3) {
            match kind {
                0 => {
                    same(&unnamed_round(&mut client, unnamed, "happy"), &unnamed_round(&mut direct, unnamed, "happy"), "unnamed")
                }
                1 => same(&named_round(&mut client, "s1", named, "sad"), &named_round(&mut direct, "s1", named, "sad"), "named"),
                _ => same(&run_ok(&mut client, simple), &run_ok(&mut direct, simple), "rewritten"),
            }
        }
        warm(&lane, &mut first, simple);
        if round == 0 {
            continue;
        }
        let after = prepared_stats(lane.port);
        assert_eq!(after["reruns"], before["reruns"] + 1, "round {round}: sent again once: {after:?}");
    }
}
