//! Fault injection: PostgreSQL restarting, crashing, freezing and refusing
//! connections under pglane, and clients that vanish at the worst moment.
//!
//! Server faults run against a private PostgreSQL each (`Postgres::start_new`)
//! with real clients (tokio-postgres workers, psql probes). Every wait is
//! bounded: a worker operation that takes longer than [`HANG`] counts as a
//! hang, and every test asserts there were none. What each test promises:
//!
//! - in-flight clients get an error (not a hang) when the server goes away;
//! - pglane serves new transactions within [`RECOVERY`] of the server being
//!   back, and nothing that starts after that fails;
//! - a frozen server (SIGSTOP) is detected by `server_connect_timeout` and
//!   `query_wait_timeout`; a query running on a frozen backend waits for it
//!   unless `query_timeout` is set, and then its client gets 57014 and the
//!   next client a fresh server connection;
//! - `max_connections` reached gives the client the server's 53300 at once.
//!
//! Client faults use the shared server, each test in its own database so
//! that it can count its server connections.

mod common;
#[path = "common/raw.rs"]
mod raw;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::BytesMut;
use common::writers::{Failure, Writers};
use common::{postgres, try_connect, Frozen, Pglane, Postgres, Psql};
use pglane::protocol::backend;
use pglane::protocol::frontend;
use raw::{error_code, tags, RawClient};

/// A worker operation slower than this is a hang.
const HANG: Duration = Duration::from_secs(15);
/// New transactions must succeed this soon after the server is back (the
/// goal is under a second; the bound is looser so a loaded CI machine does
/// not fail it, and the measured figure is printed and kept in FUZZING.md).
const RECOVERY: Duration = Duration::from_secs(5);

/// pglane in front of `port`, database `app` → server database `dbname`,
/// clients trusted (cheap logins), pglane logging in to the server as postgres.
fn pglane_for(port: u16, dbname: &str, cores: usize, pool_size: usize, extra: &str) -> Pglane {
    Pglane::start_with_args(
        &format!(
            "pool_mode = \"transaction\"\nauth_type = \"trust\"\n{extra}\n\
             [databases.app]\nhost = \"127.0.0.1\"\nport = {port}\ndbname = \"{dbname}\"\npool_size = {pool_size}\n\
             [users.postgres]\npassword = \"secret\"\n[users.scramuser]\npassword = \"scrampass\"\n"
        ),
        &["--cores", &cores.to_string()],
    )
}

/// The server's (or pglane's) error message, or the client-side error.
fn message(e: &tokio_postgres::Error) -> String {
    e.as_db_error().map(|d| d.message().to_owned()).unwrap_or_else(|| e.to_string())
}

fn sqlstate(e: &tokio_postgres::Error) -> String {
    e.as_db_error().map(|d| d.code().code().to_owned()).unwrap_or_else(|| format!("(no SQLSTATE: {e})"))
}

/// `psql -c sql` through pglane (trust auth, database app); Ok(stdout) or Err(stderr).
fn psql(port: u16, sql: &str) -> Result<String, String> {
    Psql::tcp(port, "postgres", "", "app").command(sql).run()
}

/// The first column of the first row of a simple query.
async fn simple_value(c: &tokio_postgres::Client, sql: &str) -> String {
    c.simple_query(sql)
        .await
        .unwrap()
        .into_iter()
        .find_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(r) => Some(r.get(0).unwrap_or("NULL").to_owned()),
            _ => None,
        })
        .expect("a row")
}

fn signal(pid: i32, sig: libc::c_int) {
    // SAFETY: kill(2) has no memory-safety preconditions; `pid` is a
    // PostgreSQL process this test started.
    let rc = unsafe { libc::kill(pid, sig) };
    assert_eq!(rc, 0, "kill({pid}, {sig}): {}", std::io::Error::last_os_error());
}

fn alive(pid: i32) -> bool {
    // SAFETY: as above; signal 0 only checks existence.
    unsafe { libc::kill(pid, 0) == 0 }
}

/// Processes whose parent is `parent` (the postmaster's children).
fn children_of(parent: i32) -> Vec<i32> {
    let mut kids = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else { continue };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { continue };
        // pid (comm) state ppid ...; comm may contain spaces, so split after ')'.
        let ppid = stat.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().nth(1)).and_then(|p| p.parse::<i32>().ok());
        if ppid == Some(parent) {
            kids.push(pid);
        }
    }
    kids
}

/// The server-side pids of client backends in `db`.
fn backends(pg: &Postgres, db: &str) -> Vec<i32> {
    pg.psql(&format!(
        "select pid from pg_stat_activity where datname = '{db}' and backend_type = 'client backend' and pid <> pg_backend_pid()"
    ))
    .lines()
    .filter_map(|l| l.trim().parse().ok())
    .collect()
}

/// Waits until PostgreSQL answers over its unix socket; returns when it did.
fn wait_until_server_answers(pg: &Postgres, limit: Duration) -> Instant {
    let deadline = Instant::now() + limit;
    loop {
        if pg.try_psql("postgres", "select 1").is_ok() {
            return Instant::now();
        }
        assert!(Instant::now() < deadline, "PostgreSQL not back after {limit:?}:\n{}", pg.log());
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Probes pglane with a fresh psql (connect + transaction) until one
/// succeeds; returns how long that took from `since`.
fn first_success_through_pglane(port: u16, since: Instant, limit: Duration) -> Duration {
    let deadline = since + limit;
    loop {
        if psql(port, "begin; select 1; commit").is_ok() {
            return since.elapsed();
        }
        assert!(Instant::now() < deadline, "pglane served nothing for {limit:?} after the server was back");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// What the load workers saw.
#[derive(Default)]
struct Tally {
    ok: AtomicU64,
    hangs: AtomicU64,
    /// (start, end, error) of every failed operation.
    errors: Mutex<Vec<(Instant, Instant, String)>>,
    /// End times of successful operations.
    ok_at: Mutex<Vec<Instant>>,
}

impl Tally {
    fn fail(&self, start: Instant, end: Instant, what: String) {
        self.errors.lock().unwrap().push((start, end, what));
    }

    fn errors_started_after(&self, t: Instant) -> Vec<String> {
        self.errors.lock().unwrap().iter().filter(|(s, _, _)| *s > t).map(|(_, _, e)| e.clone()).collect()
    }

    fn errors_in_flight_at(&self, t: Instant) -> usize {
        self.errors.lock().unwrap().iter().filter(|(s, e, _)| *s <= t && *e >= t).count()
    }

    fn ok_after(&self, t: Instant) -> usize {
        self.ok_at.lock().unwrap().iter().filter(|&&e| e > t).count()
    }
}

/// `workers` clients, each reconnecting as needed, running short write
/// transactions through pglane until `stop`.
fn start_load(
    rt: &tokio::runtime::Runtime,
    port: u16,
    workers: usize,
    stop: Arc<AtomicBool>,
    tally: Arc<Tally>,
) -> Vec<tokio::task::JoinHandle<()>> {
    let writers = Writers {
        port,
        user: "postgres",
        password: "secret",
        db: "app",
        count: workers,
        hang: HANG,
        sql: |w, n| format!("begin; insert into fault_t values ({w}, {n}); select count(*) from fault_t where w = {w}; commit"),
    };
    writers.spawn(rt, stop, move |op| match op.failure {
        None => {
            tally.ok.fetch_add(1, Ordering::Relaxed);
            tally.ok_at.lock().unwrap().push(op.ended);
        }
        Some(Failure::Connect(e)) => tally.fail(op.started, op.ended, format!("connect: {}", sqlstate(&e))),
        Some(Failure::Statement(e)) => tally.fail(op.started, op.ended, sqlstate(&e)),
        Some(Failure::Hang) => {
            tally.hangs.fetch_add(1, Ordering::Relaxed);
        }
    })
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap()
}

/// A private server with table fault_t, pglane in front, 16 workers loading it.
struct LoadedServer {
    pg: Postgres,
    lane: Pglane,
    rt: tokio::runtime::Runtime,
    stop: Arc<AtomicBool>,
    tally: Arc<Tally>,
    workers: Vec<tokio::task::JoinHandle<()>>,
}

impl LoadedServer {
    fn start() -> LoadedServer {
        let pg = Postgres::start_new();
        // The harness runs PostgreSQL with synchronous_commit = off, which
        // may lose acknowledged commits in a crash; these tests count them.
        pg.psql("alter system set synchronous_commit = on");
        pg.psql("select pg_reload_conf()");
        pg.psql("create table fault_t(w int, n bigint); grant all on fault_t to public");
        // pglane logs in to the server as trustuser (trust in pg_hba), so
        // that reconnecting measures pglane, not the SCRAM key derivation of
        // a debug build (~0.2 s of CPU per server connection). With
        // server_retry_timeout = 0 a client that needs a server connection
        // while the server is down gets the error at once, as these tests
        // count (by default it would wait for the server; tests/failover.rs
        // shows that).
        let lane = Pglane::start_with_args(
            &format!(
                "pool_mode = \"transaction\"\nauth_type = \"trust\"\nserver_connect_timeout = 2\nquery_wait_timeout = 10\n\
                 server_retry_timeout = 0\n\
                 [databases.app]\nhost = \"127.0.0.1\"\nport = {}\ndbname = \"postgres\"\nuser = \"trustuser\"\npool_size = 8\n\
                 [users.postgres]\npassword = \"secret\"\n",
                pg.port
            ),
            &["--cores", "2"],
        );
        let rt = runtime();
        let stop = Arc::new(AtomicBool::new(false));
        let tally = Arc::new(Tally::default());
        let workers = start_load(&rt, lane.port, 16, stop.clone(), tally.clone());
        // Load is flowing before the fault.
        let deadline = Instant::now() + Duration::from_secs(20);
        while tally.ok.load(Ordering::Relaxed) < 200 {
            assert!(Instant::now() < deadline, "load did not start: {:?}", tally.errors.lock().unwrap());
            std::thread::sleep(Duration::from_millis(20));
        }
        LoadedServer { pg, lane, rt, stop, tally, workers }
    }

    /// After the server is back at `back`: pglane serves a fresh client within
    /// RECOVERY, the workers go on, and nothing started later fails.
    fn check_recovery(self, fault: Instant, back: Instant, what: &str) -> Duration {
        let recovered = first_success_through_pglane(self.lane.port, back, Duration::from_secs(30));
        assert!(recovered <= RECOVERY, "{what}: first transaction through pglane {recovered:?} after the server was back");
        let settled = back + RECOVERY;
        std::thread::sleep((settled + Duration::from_secs(3)).saturating_duration_since(Instant::now()));
        self.stop.store(true, Ordering::Relaxed);
        for w in self.workers {
            self.rt.block_on(async { tokio::time::timeout(HANG * 2, w).await.expect("a worker hung").unwrap() });
        }
        let t = &self.tally;
        assert_eq!(t.hangs.load(Ordering::Relaxed), 0, "{what}: operations hung");
        let errors = t.errors.lock().unwrap().len();
        assert!(errors > 0, "{what}: no client noticed the fault; the test did not test anything");
        assert!(t.errors_in_flight_at(fault) + t.errors_started_after(fault).len() > 0);
        let late = t.errors_started_after(settled);
        assert!(late.is_empty(), "{what}: operations started {RECOVERY:?} after recovery failed: {late:?}");
        assert!(t.ok_after(settled) > 50, "{what}: the workers did not resume ({} ok after recovery)", t.ok_after(settled));
        // Every committed insert is there; failed ones are not half there.
        let rows: u64 = self.pg.psql("select count(*) from fault_t").parse().unwrap();
        assert!(rows >= t.ok.load(Ordering::Relaxed), "{what}: {rows} rows for {} commits", t.ok.load(Ordering::Relaxed));
        let slowest_error = t.errors.lock().unwrap().iter().map(|(s, e, _)| *e - *s).max().unwrap_or_default();
        eprintln!(
            "{what}: {} transactions ok, {errors} errors (in flight at the fault: {}, slowest error after {slowest_error:?}), \
             0 hangs; pglane served again {recovered:?} after the server was back",
            t.ok.load(Ordering::Relaxed),
            t.errors_in_flight_at(fault)
        );
        recovered
    }
}

#[test]
fn server_restarted_under_load() {
    let s = LoadedServer::start();
    let fault = Instant::now();
    s.pg.restart(); // pg_ctl restart -m fast -w: returns once the new server accepts
    let back = wait_until_server_answers(&s.pg, Duration::from_secs(30));
    s.check_recovery(fault, back, "pg_ctl restart -m fast");
}

#[test]
fn backend_killed_under_load() {
    let s = LoadedServer::start();
    let victims = backends(&s.pg, "postgres");
    assert!(!victims.is_empty());
    let fault = Instant::now();
    // SIGKILL of one backend makes the postmaster reset every backend and
    // run crash recovery: all of pglane's server connections die.
    signal(victims[0], libc::SIGKILL);
    std::thread::sleep(Duration::from_millis(200));
    let back = wait_until_server_answers(&s.pg, Duration::from_secs(60));
    s.check_recovery(fault, back, "kill -9 of a backend");
}

#[test]
fn postmaster_killed_under_load_then_started_again() {
    let s = LoadedServer::start();
    let postmaster = s.pg.postmaster_pid();
    let orphans = children_of(postmaster);
    assert!(!orphans.is_empty(), "the postmaster has no children?");
    let fault = Instant::now();
    signal(postmaster, libc::SIGKILL);
    // The backends notice their postmaster is gone and exit; the server can
    // only start again once they have (they hold its shared memory).
    let deadline = Instant::now() + Duration::from_secs(20);
    while orphans.iter().any(|&p| alive(p)) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    for &p in orphans.iter().filter(|&&p| alive(p)) {
        eprintln!("backend {p} outlived its postmaster by 20 s; killing it");
        let _ = unsafe { libc::kill(p, libc::SIGKILL) };
    }
    // While the server is down, clients get errors, quickly.
    let started = Instant::now();
    let err = psql(s.lane.port, "select 1").expect_err("the server is down");
    assert!(started.elapsed() < Duration::from_secs(10), "the refusal took {:?}", started.elapsed());
    assert!(err.contains("cannot connect to server") || err.contains("server closed"), "{err}");
    s.pg.start_server();
    let back = wait_until_server_answers(&s.pg, Duration::from_secs(30));
    s.check_recovery(fault, back, "kill -9 of the postmaster, then pg_ctl start");
}

#[test]
fn a_frozen_server_is_detected_by_the_timeouts_that_exist() {
    let pg = Postgres::start_new();
    let lane = pglane_for(pg.port, "postgres", 1, 1, "server_connect_timeout = 1\nquery_wait_timeout = 2");
    let rt = runtime();
    rt.block_on(async {
        let a = try_connect(lane.port, "postgres", "secret", "app").await.unwrap();
        a.batch_execute("select 1").await.unwrap();

        // 1. The postmaster freezes: connected backends still work, new
        //    server connections time out after server_connect_timeout.
        let frozen = Frozen::stop(pg.postmaster_pid());
        let one: i32 = tokio::time::timeout(HANG, a.query_one("select 1", &[])).await.expect("hang").unwrap().get(0);
        assert_eq!(one, 1, "a pooled connection works while the postmaster is frozen");
        // scramuser has no pool yet: logging in needs a new server connection.
        let started = Instant::now();
        let e = tokio::time::timeout(HANG, try_connect(lane.port, "scramuser", "scrampass", "app"))
            .await
            .expect("login hung on a frozen server")
            .expect_err("no server connection can be opened");
        let took = started.elapsed();
        assert!(
            took >= Duration::from_millis(900) && took < Duration::from_secs(8),
            "server_connect_timeout = 1 s fired after {took:?}"
        );
        eprintln!(
            "frozen postmaster: a login needing a new server connection failed after {took:?} (server_connect_timeout = 1 s)"
        );
        assert_eq!(sqlstate(&e), "08006", "{}", message(&e));
        assert!(message(&e).contains("timed out"), "{}", message(&e));
        drop(frozen);
        let b = tokio::time::timeout(HANG, try_connect(lane.port, "scramuser", "scrampass", "app")).await.expect("hang").unwrap();
        b.batch_execute("select 1").await.unwrap();

        // 2. A backend freezes in the middle of a client's transaction.
        a.batch_execute("begin").await.unwrap();
        let pid: i32 = a.query_one("select pg_backend_pid()", &[]).await.unwrap().get(0);
        let frozen = Frozen::stop(pid);
        let a = Arc::new(a);
        let stuck = {
            let a = a.clone();
            tokio::spawn(async move { a.query_one("select 42", &[]).await.map(|r| r.get::<_, i32>(0)) })
        };
        // No query_timeout: the query waits as long as the backend is frozen.
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert!(!stuck.is_finished(), "a query on a frozen backend returned");
        // Another client of the same (full) pool gets query_wait_timeout.
        let c = try_connect(lane.port, "postgres", "secret", "app").await.unwrap();
        let started = Instant::now();
        let e = tokio::time::timeout(HANG, c.batch_execute("select 1")).await.expect("hang").unwrap_err();
        let took = started.elapsed();
        assert!(
            took >= Duration::from_millis(1800) && took < Duration::from_secs(10),
            "query_wait_timeout = 2 s fired after {took:?}"
        );
        eprintln!("frozen backend: another client of the full pool got query_wait_timeout after {took:?} (2 s)");
        assert!(message(&e).contains("query_wait_timeout"), "{}", message(&e));
        // Thawed, the stuck query completes and everything goes on.
        drop(frozen);
        let v = tokio::time::timeout(HANG, stuck).await.expect("still stuck after SIGCONT").unwrap().unwrap();
        assert_eq!(v, 42);
        a.batch_execute("commit").await.unwrap();
        let d = try_connect(lane.port, "postgres", "secret", "app").await.unwrap();
        d.batch_execute("select 1").await.unwrap();
    });

    // 3. With query_timeout, a query on a frozen backend is given up: the
    //    client gets 57014, the connection is dropped, and the next client
    //    gets a fresh server connection while the old backend is still frozen.
    let lane = pglane_for(
        pg.port,
        "postgres",
        1,
        1,
        // auto_prepare off: its validator may borrow the idle connection
        // for the first query's shape and be the one the freeze catches,
        // and then the query below runs on a new backend.
        "query_timeout = 1
query_wait_timeout = 10
auto_prepare = false",
    );
    rt.block_on(async {
        let a = try_connect(lane.port, "postgres", "secret", "app").await.unwrap();
        // Simple queries only: a dropped tokio-postgres Statement sends a
        // Close that would take the FATAL meant for the query below.
        let pid: i32 = simple_value(&a, "select pg_backend_pid()").await.parse().unwrap();
        let _frozen = Frozen::stop(pid);
        let started = Instant::now();
        let e = tokio::time::timeout(HANG, a.simple_query("select 42")).await.expect("query_timeout did not fire").unwrap_err();
        let took = started.elapsed();
        assert!(took >= Duration::from_millis(900) && took < Duration::from_secs(8), "query_timeout = 1 s fired after {took:?}");
        eprintln!("frozen backend: query_timeout cancelled the query after {took:?} (1 s)");
        assert_eq!(sqlstate(&e), "57014", "{}", message(&e));
        let b = try_connect(lane.port, "postgres", "secret", "app").await.unwrap();
        let started = Instant::now();
        let other: i32 =
            tokio::time::timeout(HANG, b.query_one("select pg_backend_pid()", &[])).await.expect("hang").unwrap().get(0);
        assert_ne!(other, pid);
        assert!(started.elapsed() < Duration::from_secs(15), "the next client waited {:?}", started.elapsed());
    });
}

#[test]
fn max_connections_reached_gives_the_servers_error_at_once() {
    let pg = Postgres::start_new();
    pg.psql("alter system set max_connections = 4");
    pg.psql("alter system set superuser_reserved_connections = 0");
    pg.restart();
    let lane = pglane_for(pg.port, "postgres", 1, 4, "server_connect_timeout = 5");
    let rt = runtime();
    rt.block_on(async {
        // Fill every slot with direct connections.
        let mut direct = Vec::new();
        for _ in 0..4 {
            direct.push(try_connect(pg.port, "postgres", "secret", "postgres").await.expect("a free slot"));
        }
        for attempt in 0..3 {
            let started = Instant::now();
            let e = tokio::time::timeout(HANG, try_connect(lane.port, "postgres", "secret", "app"))
                .await
                .expect("hang")
                .expect_err("no slot left on the server");
            assert_eq!(sqlstate(&e), "53300", "attempt {attempt}: {}", message(&e));
            assert!(message(&e).contains("too many clients"), "{}", message(&e));
            assert!(started.elapsed() < Duration::from_secs(15), "took {:?}", started.elapsed());
        }
        drop(direct.pop());
        tokio::time::sleep(Duration::from_millis(300)).await;
        let c = try_connect(lane.port, "postgres", "secret", "app").await.expect("a slot is free again");
        c.batch_execute("select 1").await.unwrap();
    });
}

// ---------------------------------------------------------------------------
// Client faults
// ---------------------------------------------------------------------------

/// Backends in `db` that are running something (not idle), besides ours.
fn busy_backends(db: &str) -> String {
    postgres().psql(&format!(
        "select string_agg(state || ': ' || left(query, 40), '; ') from pg_stat_activity \
         where datname = '{db}' and backend_type = 'client backend' and state <> 'idle' and pid <> pg_backend_pid()"
    ))
}

/// Waits until no backend of `db` is busy.
fn wait_until_quiet(db: &str, limit: Duration) {
    let deadline = Instant::now() + limit;
    loop {
        let busy = busy_backends(db);
        if busy.is_empty() {
            return;
        }
        assert!(Instant::now() < deadline, "backends still busy after {limit:?}: {busy}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A transaction through pglane completes within a few seconds (the pool's
/// slot was not lost: with pool_size 1 a leaked slot makes this time out).
fn still_serving(lane: &Pglane, sql: &str, want: &str) {
    let started = Instant::now();
    let out = psql(lane.port, sql).unwrap_or_else(|e| panic!("{e}\n{}", lane.log()));
    assert_eq!(out, want);
    assert!(started.elapsed() < Duration::from_secs(15), "took {:?}", started.elapsed());
}

fn query(sql: &str) -> BytesMut {
    let mut out = BytesMut::new();
    frontend::query(&mut out, sql);
    out
}

fn copy_data(row: &str) -> Vec<u8> {
    let mut v = vec![b'd'];
    v.extend_from_slice(&((row.len() + 4) as i32).to_be_bytes());
    v.extend_from_slice(row.as_bytes());
    v
}

#[test]
fn clients_vanishing_mid_query_mid_copy_and_mid_pipeline_leave_nothing_behind() {
    postgres().fresh_database("fault_vanish", None);
    postgres().psql_db("fault_vanish", "create table t(id int primary key, v text)");
    // One shard, one server connection: a lost slot or a dirty connection
    // shows at once.
    let lane = pglane_for(postgres().port, "fault_vanish", 1, 1, "query_wait_timeout = 10");

    for round in 0..2 {
        // Mid-query: a 60 s query, the client closes its socket.
        let mut c = RawClient::login(lane.port, "postgres", "app");
        c.send(&query("select pg_sleep(60)"));
        std::thread::sleep(Duration::from_millis(300));
        assert!(busy_backends("fault_vanish").contains("pg_sleep"), "round {round}: the query is not running");
        drop(c);
        wait_until_quiet("fault_vanish", Duration::from_secs(10)); // cancelled, not run for 60 s
        still_serving(&lane, "select 'after mid-query'", "after mid-query");

        // Mid-COPY FROM STDIN: rows sent, no CopyDone.
        let mut c = RawClient::login(lane.port, "postgres", "app");
        c.send(&query("copy t from stdin"));
        assert_eq!(c.recv().tag, backend::COPY_IN_RESPONSE);
        for i in 0..100 {
            c.send(&copy_data(&format!("{i}\tpartial\n")));
        }
        drop(c);
        wait_until_quiet("fault_vanish", Duration::from_secs(10));
        still_serving(&lane, "select count(*) from t", "0");

        // Mid-COPY TO STDOUT: a large copy the client stops reading.
        let mut c = RawClient::login(lane.port, "postgres", "app");
        c.send(&query("copy (select g, repeat('x', 200) from generate_series(1, 5000000) g) to stdout"));
        assert_eq!(c.recv().tag, backend::COPY_OUT_RESPONSE);
        drop(c);
        wait_until_quiet("fault_vanish", Duration::from_secs(15));
        still_serving(&lane, "select 'after copy out'", "after copy out");

        // Mid-pipeline: named and unnamed statements, several Syncs, nothing read.
        let mut c = RawClient::login(lane.port, "postgres", "app");
        let mut out = BytesMut::new();
        for i in 0..50 {
            let name = format!("S_{i}");
            frontend::parse(&mut out, &name, &format!("select pg_sleep(0.01), {i} as n_{round}"), &[]);
            frontend::bind(&mut out, "", &name, &[], std::iter::empty(), &[]);
            frontend::execute(&mut out, "", 0);
            if i % 10 == 9 {
                frontend::sync(&mut out);
            }
        }
        frontend::parse(&mut out, "", "select 'unsynced'", &[]); // and no final Sync
        c.send(&out);
        drop(c);
        wait_until_quiet("fault_vanish", Duration::from_secs(10));
        // The statements whose Parse may or may not have reached the server
        // work for the next client under its own names.
        let mut d = RawClient::login(lane.port, "postgres", "app");
        out.clear();
        frontend::parse(&mut out, "mine", &format!("select pg_sleep(0.01), 7 as n_{round}"), &[]);
        frontend::bind(&mut out, "", "mine", &[], std::iter::empty(), &[]);
        frontend::execute(&mut out, "", 0);
        frontend::sync(&mut out);
        d.send(&out);
        let got = d.until_ready();
        assert_eq!(error_code(&got), None, "round {round}: {}", tags(&got));
        assert_eq!(got.iter().filter(|m| m.tag == backend::DATA_ROW).count(), 1);
        drop(d);
        still_serving(&lane, "select 'after pipeline'", "after pipeline");
    }
    // Never more than the one server connection (backends of closed ones
    // may take a moment to exit).
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let n: i64 = postgres()
            .psql("select count(*) from pg_stat_activity where datname = 'fault_vanish' and backend_type = 'client backend'")
            .parse()
            .unwrap();
        if n <= 1 {
            break;
        }
        assert!(Instant::now() < deadline, "{n} server connections for pool_size 1");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Logs in over a raw socket (trust) and reads up to the first ReadyForQuery.
fn raw_login(port: u16) -> TcpStream {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let mut out = BytesMut::new();
    pglane::protocol::startup::encode_startup(&mut out, &[("user", "postgres"), ("database", "app")]);
    s.write_all(&out).unwrap();
    wait_for_ready(&mut s, b'I');
    s
}

/// Reads until a ReadyForQuery with this status (bounded by the read timeout).
fn wait_for_ready(s: &mut TcpStream, status: u8) {
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let want = [b'Z', 0, 0, 0, 5, status];
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while !got.windows(6).any(|w| w == want) {
        let n = s.read(&mut buf).unwrap();
        assert!(n > 0, "closed: {:?}", String::from_utf8_lossy(&got));
        got.extend_from_slice(&buf[..n]);
    }
}

#[test]
fn a_client_vanishing_in_a_transaction_releases_its_locks() {
    postgres().fresh_database("fault_locks", None);
    postgres().psql_db("fault_locks", "create table t(id int primary key, v int); insert into t values (1, 0)");
    let lane = pglane_for(postgres().port, "fault_locks", 1, 2, "");
    for (round, how) in ["close", "terminate", "reset"].into_iter().enumerate() {
        let mut s = raw_login(lane.port);
        s.write_all(&query("begin; update t set v = v + 100 where id = 1")).unwrap();
        wait_for_ready(&mut s, b'T');
        match how {
            "close" => drop(s),
            "terminate" => {
                let mut out = BytesMut::new();
                frontend::terminate(&mut out);
                s.write_all(&out).unwrap();
                drop(s);
            }
            _ => {
                // Abortive close: RST instead of FIN.
                socket2::SockRef::from(&s).set_linger(Some(Duration::ZERO)).unwrap();
                drop(s);
            }
        }
        // Another client updates the same row: the lock must be gone at once
        // (lock_timeout turns a leftover lock into an error, not a wait).
        still_serving(
            &lane,
            "set lock_timeout = '4s'; update t set v = v + 1 where id = 1 returning v",
            &(round + 1).to_string(),
        );
    }
    let v = postgres().psql_db("fault_locks", "select v from t");
    assert_eq!(v, "3", "a vanished client's update was committed");
}

/// Reads until the peer closes (bounded); returns the bytes and how long it took.
fn read_until_closed(s: &mut TcpStream, limit: Duration) -> (Vec<u8>, Duration) {
    let started = Instant::now();
    s.set_read_timeout(Some(limit)).unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 1024];
    loop {
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {
                panic!("pglane kept a login open for {limit:?}: {got:?}")
            }
            Err(_) => break, // reset
        }
    }
    (got, started.elapsed())
}

#[test]
fn slowloris_logins_are_cut_off_by_client_login_timeout() {
    let lane = Pglane::start_with_args(
        &format!(
            "pool_mode = \"transaction\"\nclient_login_timeout = 1\n\
             [databases.app]\nhost = \"127.0.0.1\"\nport = {}\ndbname = \"postgres\"\npool_size = 2\n\
             [users.postgres]\npassword = \"secret\"\n",
            postgres().port
        ),
        &["--cores", "2"],
    );
    let startup = {
        let mut out = BytesMut::new();
        pglane::protocol::startup::encode_startup(&mut out, &[("user", "postgres"), ("database", "app")]);
        out
    };
    let fds = || std::fs::read_dir(format!("/proc/{}/fd", lane.pid())).unwrap().count();
    let baseline = fds();
    let mut conns: Vec<(&str, TcpStream)> = Vec::new();
    for i in 0..60 {
        let mut s = TcpStream::connect(("127.0.0.1", lane.port)).unwrap();
        let kind = match i % 4 {
            0 => "nothing at all",
            1 => {
                s.write_all(&startup[..3]).unwrap();
                "3 bytes of a startup packet"
            }
            2 => {
                s.write_all(&startup[..startup.len() - 1]).unwrap();
                "all but the last byte"
            }
            _ => {
                s.write_all(&startup).unwrap(); // then never answers the SASL request
                "a startup packet, then silence at the password"
            }
        };
        conns.push((kind, s));
    }
    // One that trickles a byte every 500 ms (20 s for the whole packet): the timeout bounds the whole login.
    let mut trickler = TcpStream::connect(("127.0.0.1", lane.port)).unwrap();
    let trickle_start = Instant::now();
    let trickle = std::thread::spawn({
        let startup = startup.clone();
        let mut s = trickler.try_clone().unwrap();
        move || {
            for b in startup.iter() {
                if s.write_all(&[*b]).is_err() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(500));
            }
        }
    });

    // Meanwhile an ordinary client logs in at once.
    let started = Instant::now();
    let rt = runtime();
    rt.block_on(async {
        let c = try_connect(lane.port, "postgres", "secret", "app").await.unwrap();
        c.batch_execute("select 1").await.unwrap();
    });
    assert!(started.elapsed() < Duration::from_secs(15));

    for (kind, mut s) in conns {
        let (got, _) = read_until_closed(&mut s, Duration::from_secs(10));
        if kind.starts_with("a startup packet") {
            // AuthenticationSASL, then the timeout's FATAL.
            assert_eq!(got.first(), Some(&b'R'), "{kind}: {got:?}");
        }
        let text = String::from_utf8_lossy(&got);
        assert!(text.contains("client_login_timeout"), "{kind}: {text}");
    }
    let (got, _) = read_until_closed(&mut trickler, Duration::from_secs(10));
    let took = trickle_start.elapsed();
    assert!(took < Duration::from_secs(12), "the trickling login lasted {took:?}");
    assert!(String::from_utf8_lossy(&got).contains("client_login_timeout"));
    trickle.join().unwrap();
    // pglane holds none of them any more (the ordinary client's server
    // connection may still be pooled).
    let now = fds();
    assert!(now <= baseline + 2, "pglane has {now} fds open, {baseline} before the slow logins");
}
