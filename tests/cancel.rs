//! Cancel requests through pglane: the keys clients get (process ids out
//! of the kernel's range, naming their shard and instance), when the cancel
//! connection closes (once PostgreSQL has the request, as PostgreSQL's own
//! does), what a cancel may reach (the query it was sent for, never another
//! client's, nor the client's next one), how pglane answers a cancel for a
//! query still waiting in it (57014, the query never sent), cancels under
//! concurrency (none lost, none misdirected; `PGLANE_CANCEL_ROUNDS` for a
//! longer run), and cancels that land on another pglane instance of a peered
//! group (`peer_id`, `[peers]`). The drivers' own cancel loops are in
//! tests/drivers.rs and tests/jdbc.rs.

mod common;
#[path = "common/raw.rs"]
mod raw;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::{postgres, Frozen, Pglane, Postgres, SUPERUSER, SUPERUSER_PASSWORD};
use pglane::protocol::backend;
use raw::{error_code, first_column, query, send_query, tags, RawClient};

/// Linux's highest possible pid_max (PID_MAX_LIMIT on 64-bit kernels).
const PID_MAX_LIMIT: i32 = 4_194_304;

/// pglane in `mode` trusting its clients, serving `dbname` on the server at
/// `port` as `app`, with `settings` and `cores` shards.
fn pglane(port: u16, dbname: &str, mode: &str, cores: usize, pool_size: usize, settings: &str) -> Pglane {
    pglane_with_env(port, dbname, mode, cores, pool_size, settings, &[])
}

/// [`pglane`] with `env` set for it.
fn pglane_with_env(
    port: u16,
    dbname: &str,
    mode: &str,
    cores: usize,
    pool_size: usize,
    settings: &str,
    env: &[(&str, &str)],
) -> Pglane {
    Pglane::start_with_env(
        &format!(
            "pool_mode = \"{mode}\"\nauth_type = \"trust\"\n{settings}\n\
             [databases.app]\nhost = \"127.0.0.1\"\nport = {port}\ndbname = \"{dbname}\"\npool_size = {pool_size}\n\
             [users.{SUPERUSER}]\npassword = \"{SUPERUSER_PASSWORD}\"\n"
        ),
        &["--cores", &cores.to_string()],
        env,
    )
}

/// Logs in and returns the client and its BackendKeyData.
fn login(port: u16) -> (RawClient, (i32, i32)) {
    let (client, messages) = RawClient::start(port, &[("user", SUPERUSER), ("database", "app")]);
    let key = messages.iter().find(|m| m.tag == backend::BACKEND_KEY_DATA).expect("BackendKeyData");
    (client, backend::decode_backend_key_data(&key.body).unwrap())
}

/// Sends a CancelRequest for `key` to `port`; returns the connection it
/// went on, for the caller to watch it close.
fn send_cancel(port: u16, (process_id, secret_key): (i32, i32)) -> TcpStream {
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    let mut out = bytes::BytesMut::new();
    pglane::protocol::startup::encode_cancel(&mut out, process_id, secret_key);
    s.write_all(&out).expect("send the cancel request");
    s
}

/// Whether the other side closes `s` within `limit` (sending nothing).
fn closes_within(s: &mut TcpStream, limit: Duration) -> bool {
    s.set_read_timeout(Some(limit)).unwrap();
    let mut byte = [0u8; 1];
    match s.read(&mut byte) {
        Ok(0) => true,
        Ok(_) => panic!("a cancel connection is answered with nothing"),
        Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => false,
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => true,
        Err(e) => panic!("reading the cancel connection: {e}"),
    }
}

/// The ErrorResponse or rows a query sent earlier ends with.
fn outcome(client: &mut RawClient) -> Result<Vec<String>, String> {
    let messages = client.until_ready();
    match error_code(&messages) {
        Some(code) => Err(code),
        None => Ok(first_column(&messages)),
    }
}

/// BackendKeyData process ids were 1, 2, 3, ... (shard 0) in the range of
/// real process ids, so a client passing its pid to pg_terminate_backend
/// could kill an unrelated backend. Now each is above the kernel's pid_max
/// (and any pid_max it can have), distinct, with a random secret, and a
/// CancelRequest for it cancels its client's query whichever of the two
/// shards the kernel hands the request to.
#[test]
fn process_ids_are_out_of_the_kernels_range_and_still_cancel_their_query() {
    let pg = postgres();
    let lane = pglane(pg.port, "postgres", "transaction", 2, 8, "");
    let pid_max: i32 = std::fs::read_to_string("/proc/sys/kernel/pid_max").unwrap().trim().parse().unwrap();
    assert!(pid_max <= PID_MAX_LIMIT);
    let mut clients: Vec<(RawClient, (i32, i32))> = (0..40).map(|_| login(lane.port)).collect();
    let pids: std::collections::HashSet<i32> = clients.iter().map(|(_, (pid, _))| *pid).collect();
    let secrets: std::collections::HashSet<i32> = clients.iter().map(|(_, (_, secret))| *secret).collect();
    assert_eq!((pids.len(), secrets.len()), (40, 40), "{pids:?} {secrets:?}");
    assert!(pids.iter().all(|&pid| pid > PID_MAX_LIMIT), "{pids:?}");
    for (client, key) in clients.iter_mut() {
        // What a client does with its pid reaches no process.
        let terminate = query(client, &format!("select pg_terminate_backend({})", key.0));
        assert_eq!(first_column(&terminate), ["f"], "pid {}", key.0);
        assert!(terminate.iter().any(|m| m.tag == backend::NOTICE_RESPONSE), "PostgreSQL warns: not a backend");
        send_query(client, "select pg_sleep(30) -- ids");
        // The server has the query once it says it is running.
        wait_until(|| running(pg, "ids"));
        let started = Instant::now();
        let mut cancel = send_cancel(lane.port, *key);
        assert_eq!(outcome(client), Err("57014".to_owned()));
        assert!(started.elapsed() < Duration::from_secs(10));
        assert!(closes_within(&mut cancel, Duration::from_secs(10)));
    }
    // A key pglane never gave out cancels nothing.
    let (mut victim, key) = login(lane.port);
    send_query(&mut victim, "select pg_sleep(0.5), 'not cancelled'");
    for wrong in [(key.0, key.1 ^ 1), (key.0 ^ 0x10, key.1), (7, key.1)] {
        let mut cancel = send_cancel(lane.port, wrong);
        assert!(closes_within(&mut cancel, Duration::from_secs(10)));
    }
    assert_eq!(outcome(&mut victim).map(|rows| rows.len()), Ok(1));
}

/// Whether the server runs a query ending in `-- marker` now (as sent, or
/// as auto-prepare rewrote it: `pg_sleep($1)`).
fn running(pg: &Postgres, marker: &str) -> bool {
    pg.psql(&format!("select count(*) from pg_stat_activity where query like '%-- {marker}' and state = 'active'")) == "1"
}

fn wait_until(mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !done() {
        assert!(Instant::now() < deadline, "timed out");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// PostgreSQL closes a cancel connection once it has signalled the backend,
/// and drivers (libpq's PQcancel, pgjdbc, asyncpg) wait for that close before
/// they send their next query, so the cancel can never hit that one. pglane
/// closed the client's cancel connection before PostgreSQL had the request
/// (at once, for a request that landed on another shard). With the
/// postmaster frozen, the request waits unread in its listen queue: the
/// client's cancel connection must stay open until it is thawed.
#[test]
fn a_cancel_connection_closes_once_postgresql_has_the_request() {
    let pg = Postgres::start_new();
    for mode in ["session", "transaction"] {
        let lane = pglane(pg.port, "postgres", mode, 2, 4, "");
        for round in 0..4 {
            let (mut client, key) = login(lane.port);
            send_query(&mut client, "select pg_sleep(30) -- closes");
            wait_until(|| running(&pg, "closes"));
            let frozen = Frozen::stop(pg.postmaster_pid());
            // Several rounds, so that some requests land on the other shard.
            let mut cancel = send_cancel(lane.port, key);
            assert!(
                !closes_within(&mut cancel, Duration::from_millis(500)),
                "{mode}, round {round}: closed before the server had it"
            );
            drop(frozen);
            assert!(closes_within(&mut cancel, Duration::from_secs(10)), "{mode}, round {round}");
            assert_eq!(outcome(&mut client), Err("57014".to_owned()), "{mode}, round {round}");
        }
    }
}

/// A cancel request that reaches PostgreSQL after the query it was sent
/// for ended finds that backend idle, which ignores it, on PostgreSQL. In
/// transaction mode the backend's connection may serve another client by
/// then: pglane gave it to the next client at once, whose query the late
/// cancel then cancelled. Now a connection with a cancel on its way serves no
/// one until PostgreSQL has taken it. (With the postmaster frozen, the cancel
/// reaches the server only when the test says.)
#[test]
fn a_cancel_that_comes_after_its_query_ended_cancels_no_other_client() {
    let pg = Postgres::start_new();
    let lane = pglane(pg.port, "postgres", "transaction", 1, 1, "");
    for round in 0..3 {
        let (mut first, key) = login(lane.port);
        let (mut second, _) = login(lane.port);
        send_query(&mut first, "select pg_sleep(0.5), 'first' -- first");
        wait_until(|| running(&pg, "first"));
        let frozen = Frozen::stop(pg.postmaster_pid());
        let mut cancel = send_cancel(lane.port, key);
        // The first query ends on its own: the cancel has not reached the server.
        assert_eq!(outcome(&mut first).map(|rows| rows.len()), Ok(1), "round {round}");
        // The only server connection is the second client's next, once free.
        send_query(&mut second, "select 'second' from pg_sleep(1)");
        std::thread::sleep(Duration::from_millis(200));
        drop(frozen);
        assert!(closes_within(&mut cancel, Duration::from_secs(10)));
        assert_eq!(outcome(&mut second), Ok(vec!["second".to_owned()]), "round {round}: the late cancel hit another client");
    }
}

/// Two pglane instances in front of one PostgreSQL, peered as PgBouncer's
/// are (`peer_id`, `[peers]`): a CancelRequest that lands on the instance
/// the client is not connected to (a load balancer's choice) is forwarded
/// to the one it is, and cancels the query; its connection closes once the
/// server has it. Without peering the other instance could only drop it.
#[test]
fn a_cancel_sent_to_the_other_instance_of_a_peered_group_cancels_the_query() {
    let pg = postgres();
    let ports = [common::free_port(), common::free_port()];
    let peers =
        format!("[peers.1]\nhost = \"127.0.0.1\"\nport = {}\n[peers.2]\nhost = \"127.0.0.1\"\nport = {}\n", ports[0], ports[1]);
    let env = [common::LOG_CANCEL_ROUTING];
    let one = pglane_with_env(pg.port, "postgres", "transaction", 2, 4, &format!("peer_id = 1\n{peers}"), &env);
    let two = pglane_with_env(pg.port, "postgres", "transaction", 2, 4, &format!("peer_id = 2\n{peers}"), &env);
    // The harness picks the ports: point the peers at the real ones.
    let peers =
        format!("[peers.1]\nhost = \"127.0.0.1\"\nport = {}\n[peers.2]\nhost = \"127.0.0.1\"\nport = {}\n", one.port, two.port);
    for (lane, id) in [(&one, 1), (&two, 2)] {
        rewrite_config(lane, pg.port, &format!("peer_id = {id}\n{peers}"));
    }
    for (connected, other) in [(&one, &two), (&two, &one)] {
        for round in 0..4 {
            let (mut client, key) = login(connected.port);
            // PgBouncer's layout: the peer id in bytes 1 and 2.
            let id = if std::ptr::eq(connected, &one) { 1u8 } else { 2 };
            assert_eq!(key.0.to_be_bytes()[1..3], [id, 0]);
            send_query(&mut client, "select pg_sleep(30) -- peers");
            wait_until(|| running(pg, "peers"));
            let started = Instant::now();
            let mut cancel = send_cancel(other.port, key);
            assert_eq!(outcome(&mut client), Err("57014".to_owned()), "round {round}");
            assert!(started.elapsed() < Duration::from_secs(10));
            assert!(closes_within(&mut cancel, Duration::from_secs(10)));
        }
        assert!(other.log().contains("forwarding a cancel request to the peer"), "{}", other.log());
    }
}

/// Rewrites `lane`'s config (same body as [`pglane`], transaction mode) and
/// reloads it.
fn rewrite_config(lane: &Pglane, port: u16, settings: &str) {
    lane.write_config(&format!(
        "pool_mode = \"transaction\"\nauth_type = \"trust\"\n{settings}\n\
         [databases.app]\nhost = \"127.0.0.1\"\nport = {port}\ndbname = \"postgres\"\npool_size = 4\n\
         [users.{SUPERUSER}]\npassword = \"{SUPERUSER_PASSWORD}\"\n"
    ));
    lane.signal(libc::SIGHUP);
    lane.wait_for_log("SIGHUP: config reloaded", Duration::from_secs(10));
}

/// Sends `sql` as one extended-protocol request (Parse, Bind, Execute,
/// Sync of the unnamed statement), without waiting for its answer.
fn send_extended(client: &mut RawClient, sql: &str) {
    use pglane::protocol::frontend;
    let mut out = bytes::BytesMut::new();
    frontend::parse(&mut out, "", sql, &[]);
    frontend::bind(&mut out, "", "", &[], std::iter::empty(), &[]);
    frontend::execute(&mut out, "", 0);
    frontend::sync(&mut out);
    client.send(&out);
}

/// Sends `key`'s CancelRequest and waits until its connection closes (as
/// libpq's PQcancel and the drivers do before their next query).
fn cancel_and_wait(port: u16, key: (i32, i32)) {
    let mut cancel = send_cancel(port, key);
    assert!(closes_within(&mut cancel, Duration::from_secs(10)), "the cancel connection stayed open");
}

/// A query that waits for a server connection (every one busy) has not
/// started: PostgreSQL would answer its cancel with 57014 at once, and the
/// query would never run. pglane dropped the cancel request (the client held
/// no server connection), and the query ran in full once a connection came.
/// Now the session answers it, as PostgreSQL words it, without sending it:
/// a simple query, and an extended-protocol request (skipped up to its
/// Sync, the request after it served as usual). Neither insert ever runs.
#[test]
fn a_cancel_for_a_query_waiting_for_a_server_connection_answers_it_unsent() {
    let pg = postgres();
    pg.fresh_database("cancel_queued", None);
    pg.psql_db("cancel_queued", "create table marker (n int)");
    // At the defaults. (With server pipelining on, the query would go behind
    // the blocker's, on the server already: see tests/pipelining.rs.)
    {
        let lane = pglane(pg.port, "cancel_queued", "transaction", 1, 1, "");
        let (mut blocker, _) = login(lane.port);
        send_query(&mut blocker, "select pg_sleep(2) -- blocker");
        wait_until(|| {
            pg.psql_db(
                "cancel_queued",
                "select count(*) from pg_stat_activity where query like '%-- blocker' and state = 'active'",
            ) == "1"
        });
        let (mut waiting, key) = login(lane.port);
        send_query(&mut waiting, "select pg_sleep(2); insert into marker values (1)");
        std::thread::sleep(Duration::from_millis(200));
        let started = Instant::now();
        cancel_and_wait(lane.port, key);
        let answer = waiting.until_ready();
        assert!(started.elapsed() < Duration::from_secs(1), "answered after {:?}", started.elapsed());
        let error = answer.iter().find(|m| m.tag == backend::ERROR_RESPONSE).expect("an error");
        let fields = backend::decode_error_fields(&error.body).unwrap();
        assert_eq!((fields.severity.as_str(), fields.code.as_str()), ("ERROR", "57014"), "{fields:?}");
        assert_eq!(fields.message, "canceling statement due to user request");
        assert_eq!(&answer.last().unwrap().body[..], b"I");
        // The extended protocol: an error, the rest skipped to the Sync,
        // and what comes after the Sync is the next request.
        send_extended(&mut waiting, "insert into marker values (2)");
        send_query(&mut waiting, "select count(*) from marker");
        std::thread::sleep(Duration::from_millis(200));
        cancel_and_wait(lane.port, key);
        let answer = waiting.until_ready();
        assert_eq!(tags(&answer), "EZ", "{answer:?}");
        assert_eq!(error_code(&answer).as_deref(), Some("57014"));
        // After the blocker's sleep, on the only connection.
        assert_eq!(outcome(&mut waiting), Ok(vec!["0".to_owned()]), "a cancelled request ran");
        assert_eq!(outcome(&mut blocker).map(|rows| rows.len()), Ok(1));
        // A cancel for a client between queries cancels nothing later.
        cancel_and_wait(lane.port, key);
        send_query(&mut waiting, "select pg_sleep(0.3), 'next'");
        assert_eq!(outcome(&mut waiting).map(|rows| rows.len()), Ok(1), "a cancel for an idle client was kept");
    }
    assert_eq!(pg.psql_db("cancel_queued", "select count(*) from marker"), "0");
}

/// What one client of [`cancels_are_exact_under_concurrency`] saw.
#[derive(Default, Debug)]
struct Tally {
    cancels: usize,
    /// A cancelled query that ran to its end.
    lost: usize,
    /// A query its own client did not cancel that failed.
    misdirected: usize,
    uncancelled: usize,
}

/// A small xorshift, so that each client's choices are its own and the
/// test needs no crate for them.
struct Dice(u64);

impl Dice {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// Six clients on a pool of two, each running sleeps it cancels after a
/// random 0-300 ms (while they wait for a connection or run), short
/// queries it cancels too (which may end first), and short sleeps it never
/// cancels, by the simple and the extended protocol. A cancelled sleep
/// must fail with 57014 (none lost), and an uncancelled query must never
/// fail (none misdirected). The issue measured 24 of 120 cancels lost and 6
/// of 300 misdirected, at a pool of 4.
fn cancels_are_exact_under_concurrency(settings: &str) -> Tally {
    let pg = postgres();
    let lane = pglane(pg.port, "postgres", "transaction", 1, 2, settings);
    let port = lane.port;
    let rounds: usize = std::env::var("PGLANE_CANCEL_ROUNDS").ok().and_then(|r| r.parse().ok()).unwrap_or(40);
    let clients: Vec<_> = (0..6u64)
        .map(|n| {
            std::thread::spawn(move || {
                let (mut client, key) = login(port);
                let mut dice = Dice(0x9e37_79b9_7f4a_7c15 ^ (n + 1) * 0x1234_5678_9abc);
                let mut tally = Tally::default();
                for round in 0..rounds {
                    let (sql, cancel) = match dice.below(20) {
                        0..=10 => ("select pg_sleep(0.5)", true),
                        11..=14 => ("select pg_sleep(0.02)", false),
                        _ => ("select 1", true),
                    };
                    if dice.below(3) == 0 {
                        send_extended(&mut client, sql);
                    } else {
                        send_query(&mut client, sql);
                    }
                    let started = Instant::now();
                    if cancel {
                        std::thread::sleep(Duration::from_millis(dice.below(300)));
                        cancel_and_wait(port, key);
                        tally.cancels += 1;
                    } else {
                        tally.uncancelled += 1;
                    }
                    let result = outcome(&mut client);
                    let took = started.elapsed();
                    match (&result, cancel) {
                        (Ok(_), true) if sql.contains("0.5") => {
                            eprintln!("client {n}, round {round}: cancelled {sql:?} ran to its end ({took:?})");
                            tally.lost += 1;
                        }
                        (Err(code), false) => {
                            eprintln!("client {n}, round {round}: {sql:?}, not cancelled, failed with {code} ({took:?})");
                            tally.misdirected += 1;
                        }
                        (Err(code), true) => assert_eq!(code, "57014"),
                        _ => {}
                    }
                }
                tally
            })
        })
        .collect();
    let mut total = Tally::default();
    for client in clients {
        let t = client.join().unwrap();
        total.cancels += t.cancels;
        total.lost += t.lost;
        total.misdirected += t.misdirected;
        total.uncancelled += t.uncancelled;
    }
    eprintln!("{settings:?}: {total:?}");
    total
}

#[test]
fn cancels_are_exact_under_concurrency_without_server_pipelining() {
    let t = cancels_are_exact_under_concurrency("server_pipelining = false");
    assert_eq!((t.lost, t.misdirected), (0, 0), "{t:?}");
}

#[test]
fn cancels_are_exact_under_concurrency_at_the_defaults() {
    let t = cancels_are_exact_under_concurrency("");
    assert_eq!((t.lost, t.misdirected), (0, 0), "{t:?}");
}

/// Clients that never cancel (bystanders) next to clients that cancel
/// their short sleeps late (often after the sleep ended), three of each on
/// a pool of two, all of their requests plain autocommit queries. With
/// server pipelining on, a bystander's request went to the server behind a
/// canceller's, and a late cancel cancelled it (7-11 of the bystanders'
/// queries in the probe); now no bystander query may fail.
/// `PGLANE_CANCEL_ROUNDS` scales it (30 bystander queries a round, 40
/// rounds by default; 334 for the 10,000), and
/// `PGLANE_CANCEL_SETTINGS` adds config lines (e.g. `server_pipelining =
/// true`, to measure that).
#[test]
fn late_cancels_fail_no_bystanders_query() {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::sync::Arc;
    let pg = postgres();
    let settings = std::env::var("PGLANE_CANCEL_SETTINGS").unwrap_or_default();
    let lane = pglane(pg.port, "postgres", "transaction", 1, 2, &format!("admin_users = [\"{SUPERUSER}\"]\n{settings}"));
    let port = lane.port;
    let rounds: usize = std::env::var("PGLANE_CANCEL_ROUNDS").ok().and_then(|r| r.parse().ok()).unwrap_or(40);
    let per_bystander = rounds * 10;
    let done = Arc::new(AtomicBool::new(false));
    let cancels = Arc::new(AtomicUsize::new(0));
    let cancellers: Vec<_> = (0..3u64)
        .map(|n| {
            let (done, cancels) = (done.clone(), cancels.clone());
            std::thread::spawn(move || {
                let (mut client, key) = login(port);
                let mut dice = Dice(0x2545_f491_4f6c_dd1d ^ (n + 7) * 0x9876_5432_1);
                while !done.load(Ordering::Relaxed) {
                    // Under pipelining's 100 ms mark for slow statements.
                    send_query(&mut client, &format!("select pg_sleep(0.0{})", 1 + dice.below(6)));
                    std::thread::sleep(Duration::from_millis(dice.below(80)));
                    cancel_and_wait(port, key);
                    cancels.fetch_add(1, Ordering::Relaxed);
                    if let Err(code) = outcome(&mut client) {
                        assert_eq!(code, "57014");
                    }
                }
            })
        })
        .collect();
    let bystanders: Vec<_> = (0..3)
        .map(|n| {
            std::thread::spawn(move || {
                let mut client = RawClient::login(port, SUPERUSER, "app");
                let mut failed = 0;
                for i in 0..per_bystander {
                    let sql = if i % 2 == 0 { "select 1" } else { "select pg_sleep(0.002)" };
                    send_query(&mut client, sql);
                    if let Err(code) = outcome(&mut client) {
                        eprintln!("bystander {n}, query {i} ({sql}): {code}");
                        failed += 1;
                    }
                }
                failed
            })
        })
        .collect();
    let failed: usize = bystanders.into_iter().map(|b| b.join().unwrap()).sum();
    done.store(true, Ordering::Relaxed);
    for c in cancellers {
        c.join().unwrap();
    }
    let queries = 3 * per_bystander;
    eprintln!(
        "{settings:?}: {failed} of {queries} bystander queries failed, {} late cancels, {} pipelined",
        cancels.load(Ordering::Relaxed),
        pipelined(port)
    );
    assert_eq!(failed, 0, "{failed} of {queries} bystander queries failed");
}

/// Requests sent to a server behind another client's (SHOW STATS_TOTALS).
fn pipelined(port: u16) -> u64 {
    let mut admin = RawClient::login(port, SUPERUSER, "pgbouncer");
    let reply = query(&mut admin, "SHOW STATS_TOTALS");
    let description = reply.iter().find(|m| m.tag == backend::ROW_DESCRIPTION).expect("RowDescription");
    let fields = backend::decode_row_description(&description.body).unwrap();
    let column = fields.iter().position(|f| f.name == "pipelined").expect("a pipelined column");
    reply
        .iter()
        .filter(|m| m.tag == backend::DATA_ROW)
        .map(|m| {
            let row = backend::decode_data_row(&m.body).unwrap();
            let value = row.iter().nth(column).unwrap().unwrap_or(b"0");
            std::str::from_utf8(value).unwrap().parse::<u64>().unwrap_or(0)
        })
        .sum()
}

/// A query held by PAUSE (admin console) waits in pglane as one waiting
/// for a connection does: a cancel is answered at once with 57014, and the
/// query does not run after RESUME.
#[test]
fn a_cancel_for_a_query_held_by_pause_answers_it_unsent() {
    let pg = postgres();
    pg.fresh_database("cancel_paused", None);
    pg.psql_db("cancel_paused", "create table marker (n int)");
    let lane = pglane(pg.port, "cancel_paused", "transaction", 1, 2, &format!("admin_users = [\"{SUPERUSER}\"]"));
    let (mut client, key) = login(lane.port);
    let mut admin = RawClient::login(lane.port, SUPERUSER, "pgbouncer");
    assert_eq!(error_code(&query(&mut admin, "PAUSE app")), None);
    send_query(&mut client, "insert into marker values (1)");
    std::thread::sleep(Duration::from_millis(200));
    let started = Instant::now();
    cancel_and_wait(lane.port, key);
    let answer = client.until_ready();
    assert!(started.elapsed() < Duration::from_secs(1), "answered after {:?}", started.elapsed());
    assert_eq!(error_code(&answer).as_deref(), Some("57014"), "{answer:?}");
    assert_eq!(error_code(&query(&mut admin, "RESUME app")), None);
    send_query(&mut client, "select count(*) from marker");
    assert_eq!(outcome(&mut client), Ok(vec!["0".to_owned()]));
}
