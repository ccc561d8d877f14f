//! The drivers our users run, through pglane in transaction mode with a
//! server pool of 2 on one shard, so that clients really move between server
//! connections: psycopg 3 (tests/drivers/psycopg_suite.py), asyncpg
//! (asyncpg_suite.py) and node-postgres (node_pg_suite.js). Each script
//! checks every result against its known value and prints a JSON summary
//! (`results`, `checksum`, `failed`) as its last line; each test runs its
//! script directly against PostgreSQL and through pglane, and asserts that
//! both succeed with the same results, that the psycopg clients did run on
//! both server connections, and that no client was pinned. The same scripts
//! run again with `auto_prepare` and `binary_negotiation` on, and SHOW
//! PREPARED must show that those features engaged.
//!
//! What the scripts cover is in their own headers. Needs Debian's
//! python3-psycopg and python3-asyncpg, node and npm (tools/test installs
//! them); node-postgres is installed with npm from tests/drivers/package.json
//! into cargo's target tmp dir on first use. A missing driver fails the
//! test with a message saying what to install.

mod common;

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use common::{postgres, Pglane, Psql, SUPERUSER, SUPERUSER_PASSWORD};

/// A script's own steps have timeouts well below this.
const SCRIPT_TIMEOUT: Duration = Duration::from_secs(900);
const NPM_TIMEOUT: Duration = Duration::from_secs(600);

fn script(name: &str) -> String {
    format!("{}/tests/drivers/{name}", env!("CARGO_MANIFEST_DIR"))
}

/// A python3 that can import `module`: Debian's (where python3-psycopg and
/// python3-asyncpg install) first, then the one on PATH.
fn python_with(module: &str, package: &str) -> PathBuf {
    for python in ["/usr/bin/python3", "python3"] {
        let ok = Command::new(python)
            .args(["-c", &format!("import {module}")])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if ok {
            return PathBuf::from(python);
        }
    }
    panic!("no python3 can import {module}: apt-get install {package} (tools/test does)");
}

/// node-postgres installed from tests/drivers/package.json, once per target
/// dir (and once per test process: the node tests run in parallel).
fn node_modules() -> PathBuf {
    static MODULES: OnceLock<PathBuf> = OnceLock::new();
    MODULES.get_or_init(install_node_postgres).clone()
}

fn install_node_postgres() -> PathBuf {
    let node = Command::new("node").arg("--version").output();
    assert!(node.is_ok_and(|o| o.status.success()), "node not found: apt-get install nodejs npm (tools/test does)");
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("drivers-node");
    let modules = dir.join("node_modules");
    if modules.join("pg/package.json").exists() {
        return modules;
    }
    std::fs::create_dir_all(&dir).expect("create the npm dir");
    std::fs::copy(script("package.json"), dir.join("package.json")).expect("copy package.json");
    let mut npm = Command::new("npm");
    npm.args(["install", "--no-audit", "--no-fund", "--no-package-lock"]).current_dir(&dir);
    let out = run_with_timeout(&mut npm, NPM_TIMEOUT)
        .unwrap_or_else(|e| panic!("npm install of node-postgres failed to run ({e}): apt-get install npm (tools/test does)"));
    assert!(
        out.success && modules.join("pg/package.json").exists(),
        "npm install of node-postgres failed (is the npm registry reachable?)\n{}\n{}",
        out.stdout,
        out.stderr
    );
    modules
}

struct Output {
    success: bool,
    stdout: String,
    stderr: String,
}

/// Runs `cmd`, killing it after `timeout`.
fn run_with_timeout(cmd: &mut Command, timeout: Duration) -> Result<Output, String> {
    run_watched(cmd, timeout, None)
}

/// A look at a running script's surroundings, taken once if it runs longer
/// than `after`: what pglane's admin console says while a client hangs is
/// what tells a lost wake-up from a client waiting in the pool.
struct Watch<'a> {
    after: Duration,
    look: &'a dyn Fn() -> String,
}

/// Runs `cmd`, killing it after `timeout`; a slow run's `watch` output is
/// added to its stderr.
fn run_watched(cmd: &mut Command, timeout: Duration, watch: Option<Watch<'_>>) -> Result<Output, String> {
    let mut child = cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().map_err(|e| e.to_string())?;
    let mut stdout = child.stdout.take().ok_or("no stdout")?;
    let mut stderr = child.stderr.take().ok_or("no stderr")?;
    let out = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stdout.read_to_string(&mut s);
        s
    });
    let err = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s);
        s
    });
    let started = Instant::now();
    let deadline = started + timeout;
    let mut watch = watch;
    let mut looked = String::new();
    let status = loop {
        if let Some(status) = child.try_wait().map_err(|e| e.to_string())? {
            break Some(status);
        }
        if let Some(w) = watch.take_if(|w| started.elapsed() > w.after) {
            looked = format!("\n--- after {:?} ---\n{}", w.after, (w.look)());
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let stdout = out.join().unwrap_or_default();
    let mut stderr = err.join().unwrap_or_default();
    if status.is_none() {
        stderr.push_str(&format!("\n(killed after {timeout:?})"));
    }
    stderr.push_str(&looked);
    Ok(Output { success: status.is_some_and(|s| s.success()), stdout, stderr })
}

/// The script's summary (its last stdout line); panics with its output
/// unless it exited 0 with an empty `failed` list.
fn run_suite(what: &str, cmd: Command) -> serde_json::Value {
    run_suite_watched(what, cmd, None)
}

/// [`run_suite`] through `lane`: a script still running after a minute gets
/// pglane's SHOW CLIENTS, SERVERS and POOLS added to its failure output.
fn run_suite_through(lane: &Pglane, what: &str, cmd: Command) -> serde_json::Value {
    let look = || ["SHOW CLIENTS", "SHOW SERVERS", "SHOW POOLS"].map(|show| admin(lane, show)).join("\n");
    run_suite_watched(what, cmd, Some(Watch { after: Duration::from_secs(60), look: &look }))
}

fn run_suite_watched(what: &str, mut cmd: Command, watch: Option<Watch<'_>>) -> serde_json::Value {
    let out = run_watched(&mut cmd, SCRIPT_TIMEOUT, watch).unwrap_or_else(|e| panic!("{what}: cannot run: {e}"));
    let summary = out.stdout.lines().last().and_then(|line| serde_json::from_str::<serde_json::Value>(line).ok());
    match summary {
        Some(summary) if out.success && summary["failed"].as_array().is_some_and(|f| f.is_empty()) => summary,
        _ => panic!("{what} failed\n--- stdout ---\n{}\n--- stderr ---\n{}", out.stdout, out.stderr),
    }
}

/// Which pglane the scripts run through.
#[derive(Clone, Copy)]
enum Features {
    Plain,
    AutoPrepareAndNegotiation,
}

fn start_pglane(db: &str, features: Features) -> Pglane {
    let extra = match features {
        Features::Plain => "",
        Features::AutoPrepareAndNegotiation => "auto_prepare = true\nbinary_negotiation = true\n",
    };
    let pg = postgres();
    Pglane::start_with_args(
        &format!(
            "pool_mode = \"transaction\"\nadmin_users = [\"{SUPERUSER}\"]\nquery_wait_timeout = 120\n{extra}\
             [databases.app]\nhost = \"127.0.0.1\"\nport = {port}\ndbname = \"{db}\"\npool_size = 2\n\
             [users.{SUPERUSER}]\npassword = \"{SUPERUSER_PASSWORD}\"\n",
            port = pg.port
        ),
        &["--cores", "1"],
    )
}

/// What pglane's admin console answers to `show`, as psql's unaligned rows
/// (a header line first), or psql's error.
fn admin(lane: &Pglane, show: &str) -> String {
    Psql::tcp(lane.port, SUPERUSER, SUPERUSER_PASSWORD, "pgbouncer")
        .with_header()
        .command(show)
        .run()
        .unwrap_or_else(|err| format!("{show}: {err}"))
}

/// SHOW PREPARED's first row, by column name.
fn show_prepared(lane: &Pglane) -> std::collections::HashMap<String, i64> {
    let text = admin(lane, "SHOW PREPARED");
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap_or_default().split('|').collect();
    let row: Vec<&str> = lines.next().unwrap_or_default().split('|').collect();
    assert!(row.len() == header.len(), "SHOW PREPARED: {text}");
    header.into_iter().zip(row).filter_map(|(h, v)| Some((h.to_owned(), v.parse().ok()?))).collect()
}

/// Runs a driver script directly and through pglane (`features`), and
/// compares. `command(dsn_port, dbname)` builds the script's command line.
fn direct_then_pglane(db: &str, features: Features, command: impl Fn(u16, &str) -> Command) -> (serde_json::Value, Pglane) {
    postgres().fresh_database(db, None);
    let pg = postgres();
    let direct = run_suite("the script against PostgreSQL directly", command(pg.port, db));
    let lane = start_pglane(db, features);
    let through = run_suite_through(&lane, "the script through pglane", command(lane.port, "app"));
    assert_eq!(direct["results"], through["results"], "results differ between PostgreSQL and pglane");
    assert_eq!(direct["checksum"], through["checksum"]);
    assert!(direct["results"].as_object().is_some_and(|r| r.len() >= 40), "the script checked too little: {direct}");
    let log = lane.log();
    assert!(!log.contains("client pinned"), "a client was pinned:\n{log}");
    if let Features::AutoPrepareAndNegotiation = features {
        let stats = show_prepared(&lane);
        // asyncpg sends no unnamed statement, only its simple queries are looked at.
        let seen = stats.get("unnamed_mapped").copied().unwrap_or(0) + stats.get("validations").copied().unwrap_or(0);
        assert!(seen > 0, "auto_prepare saw nothing: {stats:?}");
    }
    (through, lane)
}

fn psycopg_command(port: u16, db: &str) -> Command {
    let mut cmd = Command::new(python_with("psycopg", "python3-psycopg"));
    cmd.arg(script("psycopg_suite.py"))
        .arg(format!("host=127.0.0.1 port={port} user={SUPERUSER} password={SUPERUSER_PASSWORD} dbname={db}"));
    cmd
}

fn asyncpg_command(port: u16, db: &str) -> Command {
    asyncpg_script("asyncpg_suite.py")(port, db)
}

fn asyncpg_script(script_name: &str) -> impl Fn(u16, &str) -> Command + '_ {
    move |port, db| {
        let mut cmd = Command::new(python_with("asyncpg", "python3-asyncpg"));
        cmd.arg(script(script_name)).arg(format!("postgresql://{SUPERUSER}:{SUPERUSER_PASSWORD}@127.0.0.1:{port}/{db}"));
        cmd
    }
}

fn node_command<'a>(modules: &'a Path, script_name: &'a str) -> impl Fn(u16, &str) -> Command + 'a {
    move |port, db| {
        let mut cmd = Command::new("node");
        cmd.env("NODE_PATH", modules)
            .arg(script(script_name))
            .arg(format!("postgres://{SUPERUSER}:{SUPERUSER_PASSWORD}@127.0.0.1:{port}/{db}"));
        cmd
    }
}

/// Every psycopg client that the script moved between server connections
/// ran on both of them (direct: one backend each).
fn assert_psycopg_moved(summary: &serde_json::Value) {
    let seen = summary["backends_seen"].as_object().expect("backends_seen");
    assert!(seen.len() >= 5, "{summary}");
    for (client, n) in seen {
        assert_eq!(n.as_i64(), Some(2), "psycopg client {client} did not move between the 2 server connections");
    }
}

/// psycopg's notify handler gets the same notifications, in the same order,
/// directly and through pglane, whose notification hub answers the LISTENs
/// (no client is pinned).
#[test]
fn psycopg3_listen_notify_through_the_notification_hub() {
    listen_notify_as_direct("drivers_psycopg_notify", |port, db| {
        let mut cmd = Command::new(python_with("psycopg", "python3-psycopg"));
        cmd.arg(script("psycopg_notify.py"))
            .arg(format!("host=127.0.0.1 port={port} user={SUPERUSER} password={SUPERUSER_PASSWORD} dbname={db}"));
        cmd
    });
}

/// node-postgres' `on('notification')`, as psycopg's above.
#[test]
fn node_postgres_listen_notify_through_the_notification_hub() {
    let modules = node_modules();
    listen_notify_as_direct("drivers_node_notify", node_command(&modules, "node_pg_notify.js"));
}

/// asyncpg's `add_listener`, which prepares its LISTEN and runs it later,
/// with and without asyncpg's statement cache, as psycopg's above.
#[test]
fn asyncpg_listen_notify_through_the_notification_hub() {
    listen_notify_as_direct("drivers_asyncpg_notify", asyncpg_script("asyncpg_notify.py"));
}

/// Runs a driver's LISTEN/NOTIFY script (`command(port, dbname)`) directly
/// and through pglane: the same notifications in the same order, the hub
/// listened, and no client was pinned.
fn listen_notify_as_direct(db: &str, command: impl Fn(u16, &str) -> Command) {
    postgres().fresh_database(db, None);
    let direct = run_suite("the script against PostgreSQL directly", command(postgres().port, db));
    let lane = start_pglane(db, Features::Plain);
    let through = run_suite_through(&lane, "the script through pglane", command(lane.port, "app"));
    assert_eq!(direct["results"], through["results"], "notifications differ between PostgreSQL and pglane");
    let log = lane.log();
    assert!(!log.contains("client pinned"), "a client was pinned:\n{log}");
    assert!(log.contains("notification listener connected"), "the hub did not listen:\n{log}");
}

#[test]
fn psycopg3_through_transaction_pooling() {
    let (summary, _lane) = direct_then_pglane("drivers_psycopg", Features::Plain, psycopg_command);
    assert_psycopg_moved(&summary);
}

#[test]
fn psycopg3_with_auto_prepare_and_binary_negotiation() {
    let (summary, lane) = direct_then_pglane("drivers_psycopg_auto", Features::AutoPrepareAndNegotiation, psycopg_command);
    assert_psycopg_moved(&summary);
    let stats = show_prepared(&lane);
    assert!(stats.get("portals_negotiated").is_some_and(|&n| n > 0), "{stats:?}");
}

#[test]
fn asyncpg_through_transaction_pooling() {
    direct_then_pglane("drivers_asyncpg", Features::Plain, asyncpg_command);
}

#[test]
fn asyncpg_with_auto_prepare_and_binary_negotiation() {
    direct_then_pglane("drivers_asyncpg_auto", Features::AutoPrepareAndNegotiation, asyncpg_command);
}

#[test]
fn node_postgres_through_transaction_pooling() {
    let modules = node_modules();
    direct_then_pglane("drivers_node", Features::Plain, node_command(&modules, "node_pg_suite.js"));
}

#[test]
fn node_postgres_with_auto_prepare_and_binary_negotiation() {
    let modules = node_modules();
    let (_, lane) =
        direct_then_pglane("drivers_node_auto", Features::AutoPrepareAndNegotiation, node_command(&modules, "node_pg_suite.js"));
    let stats = show_prepared(&lane);
    assert!(stats.get("portals_negotiated").is_some_and(|&n| n > 0), "{stats:?}");
}

/// DDL changes the result type of a statement two asyncpg connections
/// prepared and described (asyncpg caches the RowDescription and asks for
/// binary). On a direct connection each backend holding the statement
/// answers the next Bind with 0A000 "cached plan must not change result
/// type" (routine RevalidateCachedQuery), and asyncpg prepares it again.
/// Through pglane the client's statement was prepared lazily on whichever
/// server connection it got; on one that did not have it yet, that Parse
/// simply succeeded with the new type, the Bind asked binary for a column
/// asyncpg still believed int4, and asyncpg failed to decode the text
/// ("insufficient data in buffer"; same-size types would decode wrongly).
#[test]
fn asyncpg_ddl_changing_a_cached_result_type() {
    for (db, features) in
        [("drivers_asyncpg_ddl", Features::Plain), ("drivers_asyncpg_ddl_auto", Features::AutoPrepareAndNegotiation)]
    {
        postgres().fresh_database(db, None);
        let pg = postgres();
        let step = |port: u16, db: &str| {
            let mut cmd = asyncpg_command(port, db);
            cmd.arg("ddl");
            cmd
        };
        let direct = run_suite("the ddl step against PostgreSQL directly", step(pg.port, db));
        let lane = start_pglane(db, features);
        let through = run_suite_through(&lane, "the ddl step through pglane", step(lane.port, "app"));
        assert_eq!(direct["results"], through["results"]);
        assert!(direct["results"].as_object().is_some_and(|r| r.len() == 8), "{direct}");
    }
}

/// node-postgres clients ending while they connect write Terminate ahead
/// of their StartupMessage: PostgreSQL closes without a word and the client
/// reports nothing; pglane answered with a FATAL ("message length
/// 1476395008 exceeds the maximum": `X\0\0\0` read as a length), which
/// node-postgres reported as an error. The script fails on any error.
#[test]
fn node_postgres_ending_while_connecting_reports_nothing() {
    let modules = node_modules();
    let db = "drivers_node_end";
    postgres().fresh_database(db, None);
    let command = node_command(&modules, "node_end_while_connecting.js");
    let direct = run_suite("ending while connecting, directly", command(postgres().port, db));
    let lane = start_pglane(db, Features::Plain);
    let through = run_suite_through(&lane, "ending while connecting, through pglane", command(lane.port, "app"));
    assert_eq!(direct["results"], through["results"]);
}

/// Timed-out queries in a loop, as each driver cancels them.
const CANCEL_ITERATIONS: &str = "200";

/// pglane on two shards (so that cancel requests often land on the shard
/// that does not serve the client) in `mode`, with a pool of 2 per shard.
fn start_pglane_for_cancels(db: &str, mode: &str) -> Pglane {
    Pglane::start_with_args(
        &format!(
            "pool_mode = \"{mode}\"\nadmin_users = [\"{SUPERUSER}\"]\n\
             [databases.app]\nhost = \"127.0.0.1\"\nport = {port}\ndbname = \"{db}\"\npool_size = 4\n\
             [users.{SUPERUSER}]\npassword = \"{SUPERUSER_PASSWORD}\"\n",
            port = postgres().port
        ),
        &["--cores", "2"],
    )
}

/// Runs a cancel loop (`command(port, dbname)`) directly and through
/// pglane in session and in transaction mode, all three at once, and
/// checks that none saw a late cancel: the query after a cancelled one, or
/// another client's, cancelled instead. Through pglane a late cancel was
/// what a client got when its cancel connection closed before PostgreSQL
/// had the request, or when the request reached a server connection that by
/// then served another client.
fn cancel_loop_directly_and_in_both_modes(what: &str, command: impl Fn(u16, &str) -> Command + Sync) {
    let db = format!("drivers_cancel_{}", what.replace('-', "_"));
    postgres().fresh_database(&db, None);
    let session = start_pglane_for_cancels(&db, "session");
    let transaction = start_pglane_for_cancels(&db, "transaction");
    let targets = [
        ("directly", postgres().port, db.as_str()),
        ("session mode", session.port, "app"),
        ("transaction mode", transaction.port, "app"),
    ];
    let started = Instant::now();
    std::thread::scope(|scope| {
        let runs: Vec<_> = targets
            .iter()
            .map(|&(how, port, db)| {
                let command = &command;
                scope.spawn(move || run_suite(&format!("{what} cancel loop {how}"), command(port, db)))
            })
            .collect();
        let summaries: Vec<serde_json::Value> = runs.into_iter().map(|run| run.join().expect("the loop ran")).collect();
        for summary in &summaries[1..] {
            assert_eq!(summary["results"], summaries[0]["results"], "{what}");
        }
    });
    eprintln!("{what}: three cancel loops of {CANCEL_ITERATIONS} took {:?}", started.elapsed());
}

/// tests/drivers/cancel_loop.py for `driver` (its module and Debian package) at `dsn`.
fn python_cancel_loop(driver: &str, package: &str, dsn: String) -> Command {
    let mut cmd = Command::new(python_with(driver, package));
    cmd.arg(script("cancel_loop.py")).args([driver, &dsn, CANCEL_ITERATIONS]);
    cmd
}

#[test]
fn asyncpg_timeouts_cancel_nothing_later() {
    cancel_loop_directly_and_in_both_modes("asyncpg", |port, db| {
        python_cancel_loop(
            "asyncpg",
            "python3-asyncpg",
            format!("postgresql://{SUPERUSER}:{SUPERUSER_PASSWORD}@127.0.0.1:{port}/{db}"),
        )
    });
}

#[test]
fn psycopg_cancels_cancel_nothing_later() {
    cancel_loop_directly_and_in_both_modes("psycopg", |port, db| {
        let dsn = format!("host=127.0.0.1 port={port} user={SUPERUSER} password={SUPERUSER_PASSWORD} dbname={db}");
        python_cancel_loop("psycopg", "python3-psycopg", dsn)
    });
}

#[test]
fn node_postgres_cancels_cancel_nothing_later() {
    let modules = node_modules();
    let node = node_command(&modules, "cancel_loop.js");
    cancel_loop_directly_and_in_both_modes("node-postgres", |port, db| {
        let mut cmd = node(port, db);
        cmd.arg(CANCEL_ITERATIONS);
        cmd
    });
}
