//! Server pipelining end to end, against the real PostgreSQL: with
//! `server_pipelining = true`, a waiting client's request goes to the server
//! right behind the request of the client that holds the connection, and
//! the connection is handed over when that one is answered. Each client
//! must get exactly its own answers, whatever the client ahead of it does:
//! fail, hold a transaction open, leave halfway through its reply, or lose
//! its server.

mod common;
#[path = "common/raw.rs"]
mod raw;

use std::thread;
use std::time::Duration;

use bytes::BytesMut;
use common::{postgres, Pglane};
use pglane::protocol::backend;
use pglane::protocol::frame::Message;
use pglane::protocol::frontend;
use raw::{error_code, first_column, query, send_query, tags, RawClient};

const USER: &str = "trustuser";

/// With auto-prepare: simple queries run as prepared statements.
const AUTO_PREPARE: &str = "auto_prepare = true";
/// Without: simple queries and unnamed statements pass through as sent.
const AS_SENT: &str = "auto_prepare = false";

/// pglane in front of server database `dbname` (as database `app`), with
/// auto-prepare and server pipelining, one shard, `pool_size` connections.
fn pglane(pool_size: usize, dbname: &str) -> Pglane {
    pglane_with(AUTO_PREPARE, pool_size, dbname)
}

/// The same with auto-prepare set by `auto_prepare`.
fn pglane_with(auto_prepare: &str, pool_size: usize, dbname: &str) -> Pglane {
    Pglane::trusting_on_one_shard(USER, &format!("{auto_prepare}\nserver_pipelining = true"), dbname, pool_size)
}

/// The sum over its rows of an admin console table's numeric column.
fn admin_sum(port: u16, show: &str, column: &str) -> u64 {
    let mut admin = RawClient::login(port, USER, "pgbouncer");
    let reply = query(&mut admin, show);
    let names: Vec<String> = reply
        .iter()
        .find(|m| m.tag == backend::ROW_DESCRIPTION)
        .map(|m| backend::decode_row_description(&m.body).expect("valid").into_iter().map(|f| f.name).collect())
        .expect("a RowDescription");
    let at = names.iter().position(|n| n == column).unwrap_or_else(|| panic!("no {column} in {names:?}"));
    reply
        .iter()
        .filter(|m| m.tag == backend::DATA_ROW)
        .map(|m| {
            let row = backend::decode_data_row(&m.body).expect("valid row");
            let value = row.iter().nth(at).flatten().expect("a value");
            std::str::from_utf8(value).unwrap().parse::<u64>().unwrap()
        })
        .sum()
}

/// Requests that went to the server behind another client's.
fn pipelined(port: u16) -> u64 {
    admin_sum(port, "SHOW STATS_TOTALS", "pipelined")
}

/// Waits until the number of clients waiting for a server connection
/// (SHOW POOLS' cl_waiting) is `done`, so that the order of requests is known.
fn wait_for_waiting(port: u16, done: impl Fn(u64) -> bool) {
    for _ in 0..400 {
        if done(admin_sum(port, "SHOW POOLS", "cl_waiting")) {
            return;
        }
        thread::sleep(Duration::from_millis(25));
    }
    panic!("the clients waiting never came to what the test needs");
}

/// Runs `sql` until auto-prepare rewrites it (only a rewritten simple
/// query, a prepared statement, may have a request behind it).
fn warm(port: u16, client: &mut RawClient, sql: &str) {
    for _ in 0..400 {
        let before = admin_sum(port, "SHOW PREPARED", "rewrites");
        assert_eq!(error_code(&query(client, sql)), None, "{sql}");
        if admin_sum(port, "SHOW PREPARED", "rewrites") > before {
            return;
        }
        thread::sleep(Duration::from_millis(25));
    }
    panic!("{sql} was never rewritten");
}

/// How a client of [`own_answers`] sends its requests.
#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Simple,
    Named,
    Unnamed,
}

/// Eight clients on one server connection, one request in seven failing:
/// each gets its own rows and its own errors, and many requests went behind
/// another's. With auto-prepare, clients send simple queries (run as
/// registry statements), a named prepared statement and the unnamed
/// statement (also the registry's); without it, only what passes through as
/// sent: simple queries and the unnamed statement.
#[test]
fn clients_queued_behind_each_other_get_their_own_answers() {
    let runs = [
        (AUTO_PREPARE, "pipe_answers", &[Kind::Simple, Kind::Named, Kind::Unnamed][..]),
        (AS_SENT, "pipe_answers_as_sent", &[Kind::Simple, Kind::Unnamed][..]),
    ];
    for (auto_prepare, db, kinds) in runs {
        postgres().fresh_database(db, Some(USER));
        let lane = pglane_with(auto_prepare, 1, db);
        own_answers(lane.port, auto_prepare, kinds);
    }
}

fn own_answers(port: u16, auto_prepare: &str, kinds: &[Kind]) {
    const SQL: &str = "SELECT $1::int * 1000 + $2::int / $3::int";
    let clients: Vec<_> = (0..8)
        .map(|c: u32| {
            let kind = kinds[c as usize % kinds.len()];
            thread::spawn(move || {
                let mut client = RawClient::login(port, USER, "app");
                if kind == Kind::Named {
                    let mut p = BytesMut::new();
                    frontend::parse(&mut p, "s", SQL, &[]);
                    frontend::sync(&mut p);
                    client.send(&p);
                    assert_eq!(error_code(&client.until_ready()), None);
                }
                for n in 0..300u32 {
                    let fails = n % 7 == 3;
                    let divisor = if fails { 0 } else { 1 };
                    let reply = if kind == Kind::Simple {
                        query(&mut client, &format!("SELECT {c} * 1000 + {n} / {divisor}"))
                    } else {
                        let mut p = BytesMut::new();
                        let statement = if kind == Kind::Named { "s" } else { "" };
                        if kind == Kind::Unnamed {
                            frontend::parse(&mut p, "", SQL, &[]);
                        }
                        let (a, b, d) = (c.to_string(), n.to_string(), divisor.to_string());
                        let params = [Some(a.as_bytes()), Some(b.as_bytes()), Some(d.as_bytes())];
                        frontend::bind(&mut p, "", statement, &[], params.into_iter(), &[]);
                        frontend::execute(&mut p, "", 0);
                        frontend::sync(&mut p);
                        client.send(&p);
                        client.until_ready()
                    };
                    if fails {
                        assert_eq!(error_code(&reply).as_deref(), Some("22012"), "client {c}, request {n}");
                    } else {
                        assert_eq!(error_code(&reply), None, "client {c}, request {n}: {reply:?}");
                        assert_eq!(first_column(&reply), vec![(c * 1000 + n).to_string()], "client {c}, request {n}");
                    }
                }
            })
        })
        .collect();
    for c in clients {
        c.join().expect("a client failed");
    }
    let behind = pipelined(port);
    assert!(behind > 100, "{auto_prepare}: only {behind} of 2,400 requests went behind another client's");
}

/// A client inside a transaction block is never followed: the request
/// waiting for its connection must not run inside its transaction.
#[test]
fn a_request_waits_out_the_transaction_block_ahead_of_it() {
    postgres().fresh_database("pipe_blocks", Some(USER));
    postgres().psql_db("pipe_blocks", &format!("CREATE TABLE t (x int); ALTER TABLE t OWNER TO {USER}"));
    let lane = pglane(1, "pipe_blocks");
    let port = lane.port;
    let mut holder = RawClient::login(port, USER, "app");
    // Auto-prepared, so followable were it not in a block.
    warm(port, &mut holder, "SELECT count(*) FROM t WHERE x > 0");
    assert_eq!(error_code(&query(&mut holder, "BEGIN")), None);
    assert_eq!(error_code(&query(&mut holder, "INSERT INTO t VALUES (1)")), None);
    let waiter = thread::spawn(move || {
        let mut client = RawClient::login(port, USER, "app");
        first_column(&query(&mut client, "SELECT count(*) FROM t WHERE x > 0"))
    });
    wait_for_waiting(port, |n| n >= 1);
    // A plain SELECT in the block, with a client waiting.
    assert_eq!(first_column(&query(&mut holder, "SELECT count(*) FROM t WHERE x > 0")), vec!["1"]);
    assert_eq!(error_code(&query(&mut holder, "ROLLBACK")), None);
    assert_eq!(waiter.join().unwrap(), vec!["0"], "the waiting request ran inside the other client's transaction");
}

/// A request that opens a transaction block before its Sync (pgjdbc's
/// BEGIN before the first statement of a transaction, here with a Flush in
/// between so that the BEGIN is answered first): what is left of it after
/// that answer leaves the session alone, but the block is open, so no other
/// client's request may go behind it. Named statements (registry Binds) and
/// the unnamed statement passed through as sent.
#[test]
fn a_request_that_opened_a_block_is_not_followed() {
    postgres().fresh_database("pipe_own_block", Some(USER));
    postgres().psql_db("pipe_own_block", &format!("CREATE TABLE t (x int); ALTER TABLE t OWNER TO {USER}"));
    for named in [true, false] {
        let lane = pglane_with(if named { AUTO_PREPARE } else { AS_SENT }, 1, "pipe_own_block");
        let port = lane.port;
        let mut holder = RawClient::login(port, USER, "app");
        // One extended-protocol step: the named statement `name` (prepared
        // first) or the unnamed one, ending with a Flush or a Sync.
        let step = |holder: &mut RawClient, name: &str, sql: &str, end: fn(&mut BytesMut)| {
            let mut out = BytesMut::new();
            if !named {
                frontend::parse(&mut out, "", sql, &[]);
            }
            frontend::bind(&mut out, "", if named { name } else { "" }, &[], std::iter::empty(), &[]);
            frontend::execute(&mut out, "", 0);
            end(&mut out);
            holder.send(&out);
        };
        if named {
            let mut prepare = BytesMut::new();
            frontend::parse(&mut prepare, "begin", "BEGIN", &[]);
            frontend::parse(&mut prepare, "insert", "INSERT INTO t VALUES (1)", &[]);
            frontend::sync(&mut prepare);
            holder.send(&prepare);
            assert_eq!(tags(&holder.until_ready()), "11Z");
            // Once through, rolled back: pglane describes a statement at its
            // first Bind, and that Describe may have nothing behind it.
            step(&mut holder, "begin", "BEGIN", frontend::flush);
            step(&mut holder, "insert", "INSERT INTO t VALUES (1)", frontend::sync);
            assert_eq!(tags(&holder.until_ready()), "2C2CZ");
            assert_eq!(error_code(&query(&mut holder, "ROLLBACK")), None);
        }
        step(&mut holder, "begin", "BEGIN", frontend::flush);
        let begun: Vec<u8> = (0..if named { 2 } else { 3 }).map(|_| holder.recv().tag).collect();
        assert_eq!(begun.last(), Some(&backend::COMMAND_COMPLETE), "named: {named}");
        let waiter = thread::spawn(move || {
            let mut client = RawClient::login(port, USER, "app");
            first_column(&query(&mut client, "SELECT count(*) FROM t"))
        });
        wait_for_waiting(port, |n| n >= 1);
        step(&mut holder, "insert", "INSERT INTO t VALUES (1)", frontend::sync);
        let inserted = holder.until_ready();
        assert_eq!(tags(&inserted), if named { "2CZ" } else { "12CZ" }, "named: {named}");
        assert_eq!(inserted.last().unwrap().body[..], b"T"[..], "named: {named}");
        let rolled_back = query(&mut holder, "ROLLBACK");
        assert_eq!(tags(&rolled_back), "CZ", "named: {named}: another client's answer came to this one");
        assert_eq!(waiter.join().unwrap(), vec!["0"], "named: {named}: the request behind ran inside the block");
    }
}

/// A client that comes while the request ahead of it is on the server,
/// sent when no one was waiting, still goes behind it (the holder posted its
/// connection as it parked) instead of waiting for the whole round trip.
#[test]
fn a_client_that_comes_while_the_server_works_goes_behind() {
    let db = "pipe_late";
    postgres().fresh_database(db, Some(USER));
    let lane = pglane(1, db);
    let port = lane.port;
    let mut ahead = RawClient::login(port, USER, "app");
    let mut behind = RawClient::login(port, USER, "app");
    warm(port, &mut ahead, "SELECT pg_sleep(0.001)");
    warm(port, &mut behind, "SELECT 1");
    let sleeping =
        || postgres().psql(&format!("SELECT count(*) FROM pg_stat_activity WHERE datname = '{db}' AND wait_event = 'PgSleep'"));
    for round in 0..2 {
        if round == 1 {
            // Past the slow mark the first round's 0.5 s earned.
            thread::sleep(Duration::from_millis(1100));
        }
        let before = pipelined(port);
        send_query(&mut ahead, "SELECT pg_sleep(0.5)");
        for _ in 0..400 {
            if sleeping() == "1" {
                break;
            }
            thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(sleeping(), "1", "round {round}: the request ahead is not running");
        assert_eq!(first_column(&query(&mut behind, "SELECT 42")), vec!["42"], "round {round}");
        assert_eq!(error_code(&ahead.until_ready()), None, "round {round}");
        assert_eq!(pipelined(port) - before, 1, "round {round}: the late request did not go behind");
    }
    // And with the connection back in the pool, nothing is left posted.
    assert_eq!(first_column(&query(&mut behind, "SELECT 43")), vec!["43"]);
    assert_eq!(admin_sum(port, "SHOW POOLS", "cl_waiting"), 0);
}

/// Lines two clients up behind a transaction block `blocker` holds on the
/// pool's one connection: a new client sends `ahead_sql`, then another (on
/// its own thread) runs `behind`, given its login's messages too; the block
/// ends, the connection goes to the one ahead, and the one behind may go
/// behind it.
fn line_up<T: Send + 'static>(
    port: u16,
    blocker: &mut RawClient,
    ahead_sql: &str,
    behind: impl FnOnce(RawClient, Vec<Message>) -> T + Send + 'static,
) -> (RawClient, thread::JoinHandle<T>) {
    let mut ahead = RawClient::login(port, USER, "app");
    let behind = line_up_behind(port, blocker, &mut ahead, ahead_sql, behind);
    (ahead, behind)
}

/// [`line_up`] with a client `ahead` already logged in.
fn line_up_behind<T: Send + 'static>(
    port: u16,
    blocker: &mut RawClient,
    ahead: &mut RawClient,
    ahead_sql: &str,
    behind: impl FnOnce(RawClient, Vec<Message>) -> T + Send + 'static,
) -> thread::JoinHandle<T> {
    assert_eq!(error_code(&query(blocker, "BEGIN")), None);
    send_query(ahead, ahead_sql);
    wait_for_waiting(port, |n| n >= 1);
    let behind = thread::spawn(move || {
        let (client, login) = RawClient::start(port, &[("user", USER), ("database", "app")]);
        behind(client, login)
    });
    wait_for_waiting(port, |n| n >= 2);
    assert_eq!(error_code(&query(blocker, "COMMIT")), None);
    behind
}

/// The client ahead closes its socket while its (large) reply streams: the
/// client behind still gets its answer, and the pool goes on.
#[test]
fn the_client_behind_gets_its_answer_when_the_client_ahead_leaves() {
    postgres().fresh_database("pipe_leaves", Some(USER));
    let lane = pglane(1, "pipe_leaves");
    let port = lane.port;
    let big = "SELECT repeat('x', 1000) FROM generate_series(1, 20000)";
    warm(port, &mut RawClient::login(port, USER, "app"), "SELECT repeat('x', 1) FROM generate_series(1, 2)");
    warm(port, &mut RawClient::login(port, USER, "app"), "SELECT 1");
    for round in 0..3 {
        let before = pipelined(port);
        let mut blocker = RawClient::login(port, USER, "app");
        let (mut ahead, behind) = line_up(port, &mut blocker, big, |mut client, _| query(&mut client, "SELECT 42"));
        if round > 0 {
            // Once its reply has started (round 0: at once).
            ahead.recv();
        }
        drop(ahead);
        let reply = behind.join().unwrap();
        assert_eq!(error_code(&reply), None, "round {round}: {reply:?}");
        assert_eq!(first_column(&reply), vec!["42"], "round {round}");
        assert_eq!(pipelined(port), before + 1, "round {round}: the request went behind");
        let mut next = RawClient::login(port, USER, "app");
        assert_eq!(first_column(&query(&mut next, "SELECT 7")), vec!["7"], "round {round}");
    }
}

/// A statement that ran long with a request behind it has none behind it
/// for a while (a second): what waits behind it would wait for all of it.
#[test]
fn a_statement_that_ran_long_is_not_followed_for_a_while() {
    postgres().fresh_database("pipe_slow", Some(USER));
    let lane = pglane(1, "pipe_slow");
    let port = lane.port;
    let mut blocker = RawClient::login(port, USER, "app");
    // The same shape as the 0.2 s sleeps below (a numeric literal).
    warm(port, &mut blocker, "SELECT pg_sleep(0.001)");
    warm(port, &mut blocker, "SELECT 1");
    for (round, went_behind) in [(0, 1), (1, 0), (2, 1)] {
        if round == 2 {
            thread::sleep(Duration::from_millis(1100));
        }
        let before = pipelined(port);
        let (mut ahead, behind) =
            line_up(port, &mut blocker, "SELECT pg_sleep(0.2)", |mut client, _| query(&mut client, "SELECT 42"));
        assert_eq!(error_code(&ahead.until_ready()), None, "round {round}");
        assert_eq!(first_column(&behind.join().unwrap()), vec!["42"], "round {round}");
        assert_eq!(pipelined(port) - before, went_behind, "round {round}");
    }
}

/// A query passed through as sent has no statement to mark: the client
/// whose query ran long with a request behind it has none behind its
/// queries for a while; another client's are followed.
#[test]
fn a_client_whose_query_ran_long_is_not_followed_for_a_while() {
    postgres().fresh_database("pipe_slow_as_sent", Some(USER));
    let lane = pglane_with(AS_SENT, 1, "pipe_slow_as_sent");
    let port = lane.port;
    let mut blocker = RawClient::login(port, USER, "app");
    let mut ahead = RawClient::login(port, USER, "app");
    for (round, went_behind) in [(0, 1), (1, 0), (2, 1)] {
        if round == 2 {
            thread::sleep(Duration::from_millis(1100));
        }
        let before = pipelined(port);
        let behind = line_up_behind(port, &mut blocker, &mut ahead, "SELECT pg_sleep(0.2)", |mut client, _| {
            query(&mut client, "SELECT 42")
        });
        assert_eq!(error_code(&ahead.until_ready()), None, "round {round}");
        assert_eq!(first_column(&behind.join().unwrap()), vec!["42"], "round {round}");
        assert_eq!(pipelined(port) - before, went_behind, "round {round}");
        if round == 1 {
            // Another client's query, straight after, is followed.
            let (mut other, behind) =
                line_up(port, &mut blocker, "SELECT pg_sleep(0.01)", |mut client, _| query(&mut client, "SELECT 43"));
            assert_eq!(error_code(&other.until_ready()), None);
            assert_eq!(first_column(&behind.join().unwrap()), vec!["43"]);
            assert_eq!(pipelined(port) - before, 1, "another client's query was not followed");
        }
    }
}

/// What [`cancel_behind`] saw.
struct CancelledBehind {
    ahead: Vec<Message>,
    behind: Vec<Message>,
    /// From the request behind to its reply.
    took: Duration,
    /// The reply to the query the client behind ran next, straight on.
    next: Vec<Message>,
}

/// Lines up `behind_sql` behind another client's `SELECT pg_sleep(0.5)`
/// (see [`line_up`]) and sends a cancel request for it while it waits
/// there, not yet handed over. Straight after its reply, the client behind
/// runs `SELECT pg_sleep(0.3)` on the same backend (one connection), past
/// when a cancel would be sent again had its request still run.
fn cancel_behind(port: u16, blocker: &mut RawClient, behind_sql: &'static str) -> CancelledBehind {
    let (keys, key) = std::sync::mpsc::channel();
    let (mut ahead, behind) = line_up(port, blocker, "SELECT pg_sleep(0.5)", move |mut client, login| {
        let k = login.iter().find(|m| m.tag == backend::BACKEND_KEY_DATA).expect("BackendKeyData");
        let pid = i32::from_be_bytes(k.body[..4].try_into().unwrap());
        let secret = i32::from_be_bytes(k.body[4..8].try_into().unwrap());
        send_query(&mut client, behind_sql);
        keys.send((pid, secret)).unwrap();
        let started = std::time::Instant::now();
        let reply = client.until_ready();
        let took = started.elapsed();
        (reply, took, query(&mut client, "SELECT pg_sleep(0.3)"))
    });
    let (pid, secret) = key.recv().unwrap();
    // Behind the other client's sleep, not yet handed over.
    wait_for_waiting(port, |n| n == 0);
    let mut cancel = BytesMut::new();
    pglane::protocol::startup::encode_cancel(&mut cancel, pid, secret);
    std::io::Write::write_all(&mut std::net::TcpStream::connect(("127.0.0.1", port)).unwrap(), &cancel).unwrap();
    let ahead = ahead.until_ready();
    let (behind, took, next) = behind.join().unwrap();
    CancelledBehind { ahead, behind, took, next }
}

/// A cancel request for a query waiting behind another client's is held
/// until the connection is handed over, and then cancels that query, not
/// the one that was ahead of it, nor the client's next one.
#[test]
fn a_cancel_for_a_request_behind_another_waits_for_the_hand_over() {
    postgres().fresh_database("pipe_cancel", Some(USER));
    let lane = pglane(1, "pipe_cancel");
    let port = lane.port;
    let mut blocker = RawClient::login(port, USER, "app");
    warm(port, &mut blocker, "SELECT pg_sleep(0.001)");
    warm(port, &mut blocker, "SELECT 1");
    let seen = cancel_behind(port, &mut blocker, "SELECT pg_sleep(10)");
    assert_eq!(error_code(&seen.ahead), None, "the query ahead was cancelled");
    let (reply, took) = (&seen.behind, seen.took);
    assert_eq!(error_code(reply).as_deref(), Some("57014"), "not cancelled after {took:?}: {reply:?}");
    assert!(took < Duration::from_secs(8), "cancelled only after {took:?}");
    assert_eq!(error_code(&seen.next), None, "the client's next query was cancelled too");
}

/// PostgreSQL ignores a cancel that reaches a backend while it reads its
/// next command, and a request that waited behind another's is read right
/// as that one ends, which is when its held cancel is sent: about one in two
/// hundred was lost so (once in CI, in the test above). So the cancel is
/// sent once more if the request is still unanswered 100 ms on. A lost
/// cancel cannot be had on demand; a function that catches the first one
/// and sleeps on stands in for it, and the second cancel stops it.
#[test]
fn a_held_cancel_is_sent_again_if_the_request_behind_still_runs() {
    let db = "pipe_cancel_again";
    postgres().fresh_database(db, Some(USER));
    postgres().psql_db(
        db,
        "CREATE FUNCTION stubborn(seconds float8) RETURNS int LANGUAGE plpgsql AS $$ \
         BEGIN \
           BEGIN PERFORM pg_sleep(seconds); EXCEPTION WHEN query_canceled THEN NULL; END; \
           PERFORM pg_sleep(seconds); \
           RETURN 1; \
         END $$",
    );
    let lane = pglane(1, db);
    let port = lane.port;
    let mut blocker = RawClient::login(port, USER, "app");
    warm(port, &mut blocker, "SELECT pg_sleep(0.001)");
    warm(port, &mut blocker, "SELECT stubborn(0.001)");
    let seen = cancel_behind(port, &mut blocker, "SELECT stubborn(10)");
    assert_eq!(error_code(&seen.ahead), None, "the query ahead was cancelled");
    let (reply, took) = (&seen.behind, seen.took);
    assert_eq!(error_code(reply).as_deref(), Some("57014"), "not cancelled again after {took:?}: {reply:?}");
    assert!(took < Duration::from_secs(5), "cancelled again only after {took:?}");
    assert_eq!(error_code(&seen.next), None, "the client's next query was cancelled too");
}

/// The server connection dies while a request waits behind another
/// client's: both clients get an error (the one behind a clear one), and
/// the next client gets a new connection.
#[test]
fn the_client_behind_gets_an_error_when_the_connection_dies() {
    postgres().fresh_database("pipe_dies", Some(USER));
    let lane = pglane(1, "pipe_dies");
    let port = lane.port;
    let mut blocker = RawClient::login(port, USER, "app");
    warm(port, &mut blocker, "SELECT pg_sleep(0)");
    warm(port, &mut blocker, "SELECT 1");
    let (mut ahead, behind) = line_up(port, &mut blocker, "SELECT pg_sleep(30)", |mut client, _| {
        send_query(&mut client, "SELECT 42");
        client.recv()
    });
    // The sleep is running once nobody waits any more.
    wait_for_waiting(port, |n| n == 0);
    let killed = postgres().psql("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE datname = 'pipe_dies'");
    assert_eq!(killed, "1");
    // Its RowDescription may have come first.
    let ahead_got = std::iter::repeat_with(|| ahead.recv()).find(|m| m.tag != backend::ROW_DESCRIPTION).unwrap();
    assert_eq!(ahead_got.tag, backend::ERROR_RESPONSE);
    let behind_got = behind.join().unwrap();
    assert_eq!(behind_got.tag, backend::ERROR_RESPONSE);
    let fields = backend::decode_error_fields(&behind_got.body).unwrap();
    assert_eq!(fields.code, "08006", "{fields:?}");
    assert!(fields.message.contains("behind another client"), "{fields:?}");
    let mut next = RawClient::login(port, USER, "app");
    assert_eq!(first_column(&query(&mut next, "SELECT 7")), vec!["7"]);
}

/// pgbench through pipelined connections, in every query mode, with and
/// without auto-prepare: its read-only script, its TPC-B-like one
/// (transaction blocks, never followed), and autocommit writes (followed).
/// No transaction fails, and every write ran exactly once: the accounts'
/// balances add up to the history's deltas.
#[test]
fn pgbench_writes_through_pipelined_connections_add_up() {
    let db = "pipe_bench";
    postgres().fresh_database(db, Some(USER));
    let pg = postgres();
    common::pgbench(pg.port, USER, &["-i", "-q", "-s", "1", db]);
    let script = std::env::temp_dir().join(format!("pglane-pipe-writes-{}.sql", std::process::id()));
    std::fs::write(
        &script,
        "\\set aid random(1, 100000)\n\\set delta random(-5000, 5000)\n\
         UPDATE pgbench_accounts SET abalance = abalance + :delta WHERE aid = :aid;\n\
         INSERT INTO pgbench_history (tid, bid, aid, delta, mtime) VALUES (1, 1, :aid, :delta, CURRENT_TIMESTAMP);\n",
    )
    .unwrap();
    for auto_prepare in [AUTO_PREPARE, AS_SENT] {
        let lane = pglane_with(auto_prepare, 2, db);
        if auto_prepare == AUTO_PREPARE {
            let mut warmer = RawClient::login(lane.port, USER, "app");
            warm(lane.port, &mut warmer, "SELECT abalance FROM pgbench_accounts WHERE aid = 1");
        }
        let before = pipelined(lane.port);
        for mode in ["simple", "extended", "prepared"] {
            for script_args in [vec!["-S"], vec![], vec!["-f", script.to_str().unwrap()]] {
                // A thread per client: in prepared mode pgbench prepares with a
                // blocking call, which would stall a thread's other clients, one
                // of them holding a connection in a transaction block.
                let mut args = vec!["-n", "-M", mode, "-c", "8", "-j", "8", "-T", "2"];
                args.extend(script_args.iter().copied());
                args.push("app");
                let out = common::pgbench(lane.port, USER, &args);
                assert!(out.contains("number of failed transactions: 0 (0.000%)"), "{auto_prepare}, {args:?}: {out}");
            }
        }
        assert!(pipelined(lane.port) > before, "{auto_prepare}: nothing went behind another client's request");
    }
    let _ = std::fs::remove_file(&script);
    let sums = pg.psql_db(
        db,
        "SELECT (SELECT sum(abalance) FROM pgbench_accounts) = (SELECT sum(delta) FROM pgbench_history) \
         AND (SELECT count(*) FROM pgbench_history) > 0",
    );
    assert_eq!(sums, "t", "the balances do not add up to the history");
}

/// Lines `behind.len()` clients up behind `ahead_sql` (as [`line_up`] does
/// for one): each, on its own thread, logs in and runs its closure, once
/// the one before it waits. When the block ends they form a chain: the
/// first goes behind the client ahead, each next one behind the one before.
fn line_up_chain<T: Send + 'static>(
    port: u16,
    blocker: &mut RawClient,
    ahead_sql: &str,
    behind: Vec<Behind<T>>,
) -> (RawClient, Vec<thread::JoinHandle<T>>) {
    let mut ahead = RawClient::login(port, USER, "app");
    assert_eq!(error_code(&query(blocker, "BEGIN")), None);
    send_query(&mut ahead, ahead_sql);
    wait_for_waiting(port, |n| n >= 1);
    let mut threads = Vec::new();
    for (at, run) in behind.into_iter().enumerate() {
        threads.push(thread::spawn(move || run(RawClient::login(port, USER, "app"))));
        wait_for_waiting(port, |n| n >= at as u64 + 2);
    }
    assert_eq!(error_code(&query(blocker, "COMMIT")), None);
    (ahead, threads)
}

/// What a client lined up by [`line_up_chain`] does, on its own thread.
type Behind<T> = Box<dyn FnOnce(RawClient) -> T + Send>;

/// `n` clients, the k-th of which asks for `SELECT 40+k` and returns the reply.
fn selects_behind(n: usize) -> Vec<Behind<Vec<Message>>> {
    (0..n)
        .map(|at| Box::new(move |mut client: RawClient| query(&mut client, &format!("SELECT {}", 40 + at))) as Behind<_>)
        .collect()
}

/// Each client of [`selects_behind`] got its own answer.
fn assert_own_answers(behind: Vec<thread::JoinHandle<Vec<Message>>>) {
    for (at, reply) in behind.into_iter().enumerate() {
        let reply = reply.join().unwrap();
        assert_eq!(error_code(&reply), None, "client {at} behind: {reply:?}");
        assert_eq!(first_column(&reply), vec![format!("{}", 40 + at)], "client {at} behind");
    }
}

/// Clients that wait for one busy connection queue up behind each other:
/// the second one's request goes behind the first one's while the request
/// ahead of both still runs, not when the first is handed the connection.
/// Each gets its own answer.
#[test]
fn waiting_clients_queue_up_behind_each_other_while_the_server_works() {
    postgres().fresh_database("pipe_chain", Some(USER));
    let lane = pglane(1, "pipe_chain");
    let port = lane.port;
    let mut blocker = RawClient::login(port, USER, "app");
    warm(port, &mut blocker, "SELECT pg_sleep(0.001)");
    warm(port, &mut blocker, "SELECT 1");
    let before = pipelined(port);
    let (mut ahead, behind) = line_up_chain(port, &mut blocker, "SELECT pg_sleep(1.5)", selects_behind(3));
    let sleeping =
        || postgres().psql("SELECT count(*) FROM pg_stat_activity WHERE datname = 'pipe_chain' AND wait_event = 'PgSleep'");
    for _ in 0..400 {
        if pipelined(port) - before == 3 {
            break;
        }
        thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(pipelined(port) - before, 3, "the three waiting requests did not all go behind");
    assert_eq!(sleeping(), "1", "the request ahead was over before the last went behind");
    assert_eq!(error_code(&ahead.until_ready()), None);
    assert_own_answers(behind);
    assert_eq!(admin_sum(port, "SHOW POOLS", "cl_waiting"), 0);
}

/// The client ahead of a chain closes its socket while its (large) reply
/// streams: each client behind still gets its own answer.
#[test]
fn a_chain_gets_its_answers_when_the_client_ahead_leaves() {
    postgres().fresh_database("pipe_chain_leaves", Some(USER));
    let lane = pglane(1, "pipe_chain_leaves");
    let port = lane.port;
    let mut blocker = RawClient::login(port, USER, "app");
    warm(port, &mut blocker, "SELECT repeat('x', 1) FROM generate_series(1, 2)");
    warm(port, &mut blocker, "SELECT 1");
    let before = pipelined(port);
    let big = "SELECT repeat('x', 1000) FROM generate_series(1, 20000)";
    let (mut ahead, behind) = line_up_chain(port, &mut blocker, big, selects_behind(2));
    ahead.recv();
    drop(ahead);
    assert_own_answers(behind);
    assert_eq!(pipelined(port) - before, 2);
    let mut next = RawClient::login(port, USER, "app");
    assert_eq!(first_column(&query(&mut next, "SELECT 7")), vec!["7"]);
}

/// The server connection dies under a chain: every client in it gets a
/// clear error, and the next client gets a new connection.
#[test]
fn every_client_of_a_chain_gets_an_error_when_the_connection_dies() {
    postgres().fresh_database("pipe_chain_dies", Some(USER));
    let lane = pglane(1, "pipe_chain_dies");
    let port = lane.port;
    let mut blocker = RawClient::login(port, USER, "app");
    warm(port, &mut blocker, "SELECT pg_sleep(0)");
    warm(port, &mut blocker, "SELECT 1");
    let behind: Vec<Behind<Message>> = (0..2)
        .map(|at| {
            Box::new(move |mut client: RawClient| {
                send_query(&mut client, &format!("SELECT {}", 40 + at));
                client.recv()
            }) as Behind<_>
        })
        .collect();
    let (mut ahead, behind) = line_up_chain(port, &mut blocker, "SELECT pg_sleep(30)", behind);
    wait_for_waiting(port, |n| n == 0);
    let killed =
        postgres().psql("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE datname = 'pipe_chain_dies'");
    assert_eq!(killed, "1");
    let ahead_got = std::iter::repeat_with(|| ahead.recv()).find(|m| m.tag != backend::ROW_DESCRIPTION).unwrap();
    assert_eq!(ahead_got.tag, backend::ERROR_RESPONSE);
    for (at, got) in behind.into_iter().enumerate() {
        let got = got.join().unwrap();
        assert_eq!(got.tag, backend::ERROR_RESPONSE, "client {at} behind");
        let fields = backend::decode_error_fields(&got.body).unwrap();
        assert_eq!(fields.code, "08006", "client {at} behind: {fields:?}");
    }
    let mut next = RawClient::login(port, USER, "app");
    assert_eq!(first_column(&query(&mut next, "SELECT 7")), vec!["7"]);
}

/// In a chain, a request's time counts from when the connection came to
/// its client, not from when it went behind: behind a request that ran
/// long, the quick statements after it are not marked slow.
#[test]
fn only_the_request_that_ran_long_in_a_chain_is_marked_slow() {
    postgres().fresh_database("pipe_chain_slow", Some(USER));
    let lane = pglane(1, "pipe_chain_slow");
    let port = lane.port;
    let mut blocker = RawClient::login(port, USER, "app");
    warm(port, &mut blocker, "SELECT pg_sleep(0.001)");
    warm(port, &mut blocker, "SELECT 1");
    let before = pipelined(port);
    let (mut ahead, behind) = line_up_chain(port, &mut blocker, "SELECT pg_sleep(0.3)", selects_behind(2));
    assert_eq!(error_code(&ahead.until_ready()), None);
    assert_own_answers(behind);
    assert_eq!(pipelined(port) - before, 2);
    // The sleep is marked; `SELECT $1`, which waited behind it, is not.
    let (mut ahead, behind) = line_up(port, &mut blocker, "SELECT 5", |mut client, _| query(&mut client, "SELECT 42"));
    assert_eq!(first_column(&ahead.until_ready()), vec!["5"]);
    assert_eq!(first_column(&behind.join().unwrap()), vec!["42"]);
    assert_eq!(pipelined(port) - before, 3, "the quick statement behind the sleep was marked slow");
}

/// A client in the middle of a chain closes its socket before its turn:
/// the client behind it still gets its own answer, and the pool goes on.
#[test]
fn a_chain_gets_its_answers_when_a_client_in_the_middle_leaves() {
    postgres().fresh_database("pipe_chain_middle", Some(USER));
    let lane = pglane(1, "pipe_chain_middle");
    let port = lane.port;
    let mut blocker = RawClient::login(port, USER, "app");
    warm(port, &mut blocker, "SELECT pg_sleep(0.001)");
    warm(port, &mut blocker, "SELECT 1");
    let before = pipelined(port);
    let (leave, left) = std::sync::mpsc::channel::<()>();
    let middle: Behind<Vec<Message>> = Box::new(move |mut client: RawClient| {
        send_query(&mut client, "SELECT 40");
        left.recv().unwrap();
        drop(client);
        Vec::new()
    });
    let last: Behind<Vec<Message>> = Box::new(|mut client: RawClient| query(&mut client, "SELECT 41"));
    let (mut ahead, mut behind) = line_up_chain(port, &mut blocker, "SELECT pg_sleep(1)", vec![middle, last]);
    for _ in 0..400 {
        if pipelined(port) - before == 2 {
            break;
        }
        thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(pipelined(port) - before, 2, "the chain did not form");
    leave.send(()).unwrap();
    assert_eq!(error_code(&ahead.until_ready()), None);
    let last = behind.pop().unwrap().join().unwrap();
    assert_eq!(error_code(&last), None, "{last:?}");
    assert_eq!(first_column(&last), vec!["41"]);
    behind.pop().unwrap().join().unwrap();
    let mut next = RawClient::login(port, USER, "app");
    assert_eq!(first_column(&query(&mut next, "SELECT 7")), vec!["7"]);
}

/// Binary negotiation behind another client's request: each of six clients,
/// each under its own TimeZone and DateStyle, runs a named statement on the
/// one server connection, often behind another client's request (and so
/// after the SET that aligns the connection to its settings, which must
/// reach the server even when the client ahead was done before the one
/// behind wrote it), each run Bind, Describe of the portal, Execute, Sync
/// as pgbench and libpq send them; every
/// reply is PostgreSQL's, byte for byte (the same messages sent directly),
/// and the server sent binary for most of the portals. Rounds go on (up to
/// ten) until a hundred requests went behind another's, so that a slow
/// machine, where fewer do, still shows it.
#[test]
fn own_settings_and_negotiated_rows_survive_going_behind_another_client() {
    const DB: &str = "pipe_negotiated";
    const SQL: &str =
        "SELECT $1::int8 * 1000 + $2::int8, '2026-12-02 10:00:00+00'::timestamptz + $2::int * interval '1 minute', \
        '2026-12-02'::date + $2::int, $2::numeric / 7, md5($2::text)::uuid, ('10.0.' || $1 || '.' || $2::int % 256)::inet, \
        make_interval(mins => $2::int), $2::int % 3 = 0";
    const STYLES: [(&str, &str); 6] = [
        ("UTC", "ISO, MDY"),
        ("Etc/GMT-14", "German, DMY"),
        ("Etc/GMT+5", "SQL, DMY"),
        ("UTC", "Postgres, MDY"),
        ("Etc/GMT-2", "SQL, MDY"),
        ("Etc/GMT+11", "ISO, DMY"),
    ];
    postgres().fresh_database(DB, Some(USER));
    let lane =
        Pglane::trusting_on_one_shard(USER, "auto_prepare = true\nbinary_negotiation = true\nserver_pipelining = true", DB, 1);
    let port = lane.port;
    let mut rounds: u64 = 0;
    while rounds < 10 && pipelined(port) < 100 {
        rounds += 1;
        run_negotiated_round(port, DB, SQL, &STYLES);
    }
    let behind = pipelined(port);
    assert!(behind >= 100, "only {behind} of {} requests went behind another client's", rounds * 1200);
    let negotiated = admin_sum(port, "SHOW PREPARED", "portals_negotiated");
    assert!(negotiated > rounds * 600, "only {negotiated} of {} portals were negotiated", rounds * 1200);
}

/// Each client of `styles` on its own thread: its settings, then 200 runs
/// of `sql` through pglane (`port`) and directly (`db`), compared.
fn run_negotiated_round(port: u16, db: &'static str, sql: &'static str, styles: &[(&'static str, &'static str)]) {
    let clients: Vec<_> = styles
        .iter()
        .copied()
        .into_iter()
        .enumerate()
        .map(|(c, (zone, date_style))| {
            thread::spawn(move || {
                let mut direct = RawClient::login(postgres().port, USER, db);
                let mut through = RawClient::login(port, USER, "app");
                let style = format!("SET TimeZone = '{zone}'; SET DateStyle = '{date_style}'");
                let mut prepare = BytesMut::new();
                frontend::parse(&mut prepare, "s", sql, &[]);
                frontend::describe(&mut prepare, frontend::Target::Statement, "s");
                frontend::sync(&mut prepare);
                for client in [&mut direct, &mut through] {
                    assert_eq!(error_code(&query(client, &style)), None);
                    client.send(&prepare);
                    assert_eq!(error_code(&client.until_ready()), None);
                }
                for n in 0..200u32 {
                    let mut run = BytesMut::new();
                    let (a, b) = (c.to_string(), n.to_string());
                    frontend::bind(&mut run, "", "s", &[], [Some(a.as_bytes()), Some(b.as_bytes())].into_iter(), &[]);
                    frontend::describe(&mut run, frontend::Target::Portal, "");
                    frontend::execute(&mut run, "", 0);
                    frontend::sync(&mut run);
                    direct.send(&run);
                    through.send(&run);
                    let replies = |client: &mut RawClient| -> Vec<(u8, Vec<u8>)> {
                        client.until_ready().into_iter().map(|m| (m.tag, m.body.to_vec())).collect()
                    };
                    let expected = replies(&mut direct);
                    assert!(expected.iter().all(|(tag, _)| *tag != b'E'), "PostgreSQL refused it: {expected:?}");
                    assert_eq!(replies(&mut through), expected, "client {c} ({zone}, {date_style}), request {n}");
                }
            })
        })
        .collect();
    for c in clients {
        c.join().expect("a client failed");
    }
}
