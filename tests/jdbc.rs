//! pgjdbc through pglane in transaction mode with server-prepared statements
//! from the first execution (prepareThreshold=1): the setting that breaks
//! behind a transaction pooler without statement tracking. Needs a JDK and
//! Debian's libpostgresql-jdbc-java, which tools/test installs.

mod common;

use std::path::Path;
use std::process::Command;

use common::{postgres, Pglane};

const DRIVER: &str = "/usr/share/java/postgresql.jar";

#[test]
fn jdbc_prepared_statements_20_threads_on_4_server_connections() {
    prepared_load("jdbc_db", "server_pipelining = false\n");
}

/// The same with server pipelining: requests of autocommit statements have
/// other clients' requests (transactions among them) sent right behind them.
#[test]
fn jdbc_prepared_statements_20_threads_on_4_server_connections_pipelined() {
    prepared_load("jdbc_db_pipelined", "server_pipelining = true\n");
}

/// pgjdbc's PreparedLoad (20 threads, every fifth iteration in a
/// transaction) on a pool of 4 configured with `features`.
fn prepared_load(database: &str, features: &str) {
    assert!(Path::new(DRIVER).exists(), "{DRIVER} missing: apt-get install libpostgresql-jdbc-java (tools/test does)");
    let pg = postgres();
    pg.fresh_database(database, None);
    let lane = Pglane::start_with_args(
        &format!(
            "pool_mode = \"transaction\"\n{features}[databases.app]\nhost = \"127.0.0.1\"\nport = {}\ndbname = \"{database}\"\npool_size = 4\n[users.postgres]\npassword = \"secret\"\n",
            pg.port
        ),
        &["--cores", "2"],
    );
    let classes = lane.dir.join("classes");
    std::fs::create_dir_all(&classes).unwrap();
    let source = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/jdbc/PreparedLoad.java");
    let javac = Command::new("javac").args(["-cp", DRIVER, "-d"]).arg(&classes).arg(source).output().expect("javac runs");
    assert!(javac.status.success(), "{}", String::from_utf8_lossy(&javac.stderr));

    let url = format!("jdbc:postgresql://127.0.0.1:{}/app", lane.port);
    let classpath = format!("{}:{}", classes.display(), DRIVER);
    let run = Command::new("java")
        .args(["-cp", &classpath, "PreparedLoad", &url, "postgres", "secret", "20", "100"])
        .output()
        .expect("java runs");
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(run.status.success(), "{stdout}\n{}\n{}", String::from_utf8_lossy(&run.stderr), lane.log());
    assert_eq!(stdout.trim(), "ok 4000");
    let servers: i64 = pg.psql(&format!("select count(*) from pg_stat_activity where datname = '{database}'")).parse().unwrap();
    assert!(servers <= 4, "{servers} server connections");
}

/// Compiles `tests/jdbc/<class>.java` into `dir` and runs it with `args`;
/// returns its stdout, asserting it succeeded.
fn run_java(dir: &Path, class: &str, args: &[&str], log: impl Fn() -> String) -> String {
    let classes = dir.join("classes");
    std::fs::create_dir_all(&classes).unwrap();
    let source = format!("{}/tests/jdbc/{class}.java", env!("CARGO_MANIFEST_DIR"));
    let javac = Command::new("javac").args(["-cp", DRIVER, "-d"]).arg(&classes).arg(&source).output().expect("javac runs");
    assert!(javac.status.success(), "{}", String::from_utf8_lossy(&javac.stderr));
    let classpath = format!("{}:{}", classes.display(), DRIVER);
    let run = Command::new("java").args(["-cp", &classpath, class]).args(args).output().expect("java runs");
    let stdout = String::from_utf8_lossy(&run.stdout).into_owned();
    assert!(run.status.success(), "{stdout}\n{}\n{}", String::from_utf8_lossy(&run.stderr), log());
    stdout
}

/// pgjdbc with its defaults, 8 connections open at once on a pool of 2:
/// its startup `SET extra_float_digits = 3` (extended protocol) is carried,
/// not pinned; statements of up to 65,535 parameters; schema changes and
/// search_path switches through unnamed and named statements. Direct and
/// through pglane (with and without auto-prepare) give the same results.
#[test]
fn jdbc_defaults_share_server_connections_and_statements() {
    assert!(Path::new(DRIVER).exists(), "{DRIVER} missing: apt-get install libpostgresql-jdbc-java (tools/test does)");
    let pg = postgres();
    pg.fresh_database("jdbc_sharing", None);
    let direct_url = format!("jdbc:postgresql://127.0.0.1:{}/jdbc_sharing", pg.port);
    let dir = std::env::temp_dir().join(format!("pglane-jdbc-sharing-{}", std::process::id()));
    let direct = run_java(&dir, "Sharing", &[&direct_url, "postgres", "secret", "8"], String::new);
    assert!(direct.ends_with("ok\n") && direct.lines().count() > 10, "{direct}");
    for features in ["auto_prepare = false\nbinary_negotiation = false\n", "auto_prepare = true\nbinary_negotiation = true\n"] {
        let lane = Pglane::start_with_args(
            &format!(
                "pool_mode = \"transaction\"\nquery_wait_timeout = 20\n{features}[databases.app]\nhost = \"127.0.0.1\"\n\
                 port = {}\ndbname = \"jdbc_sharing\"\npool_size = 2\n[users.postgres]\npassword = \"secret\"\n",
                pg.port
            ),
            &["--cores", "1"],
        );
        let url = format!("jdbc:postgresql://127.0.0.1:{}/app", lane.port);
        let through = run_java(&dir, "Sharing", &[&url, "postgres", "secret", "8"], || lane.log());
        assert_eq!(through, direct, "{features}");
        assert!(!lane.log().contains("client pinned"), "{}", lane.log());
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// pgjdbc's query timeout in a loop of 200 (see tests/jdbc/CancelLoop.java),
/// directly and through pglane in session and in transaction mode on two
/// shards, all three at once: no cancel may hit a later statement or
/// another connection's. Through pglane they did ("canceling statement due
/// to user request" on later statements): pglane closed the cancel
/// connection before PostgreSQL had the request, and in transaction mode
/// a late request could reach a connection that served another client.
#[test]
fn jdbc_query_timeouts_cancel_nothing_later() {
    assert!(Path::new(DRIVER).exists(), "{DRIVER} missing: apt-get install libpostgresql-jdbc-java (tools/test does)");
    let pg = postgres();
    pg.fresh_database("jdbc_cancel_db", None);
    let lane = |mode: &str| {
        Pglane::start_with_args(
            &format!(
                "pool_mode = \"{mode}\"\n[databases.app]\nhost = \"127.0.0.1\"\nport = {}\ndbname = \"jdbc_cancel_db\"\npool_size = 4\n[users.postgres]\npassword = \"secret\"\n",
                pg.port
            ),
            &["--cores", "2"],
        )
    };
    let (session, transaction) = (lane("session"), lane("transaction"));
    let targets = [
        ("directly", session.dir.join("direct"), format!("jdbc:postgresql://127.0.0.1:{}/jdbc_cancel_db", pg.port)),
        ("session mode", session.dir.clone(), format!("jdbc:postgresql://127.0.0.1:{}/app", session.port)),
        ("transaction mode", transaction.dir.clone(), format!("jdbc:postgresql://127.0.0.1:{}/app", transaction.port)),
    ];
    let started = std::time::Instant::now();
    std::thread::scope(|scope| {
        let runs: Vec<_> = targets
            .iter()
            .map(|(how, dir, url)| {
                scope.spawn(move || (how, run_java(dir, "CancelLoop", &[url, "postgres", "secret", "200"], String::new)))
            })
            .collect();
        for run in runs {
            let (how, stdout) = run.join().unwrap();
            let counts: std::collections::HashMap<&str, u32> =
                stdout.split_whitespace().filter_map(|kv| kv.split_once('=')).map(|(k, v)| (k, v.parse().unwrap())).collect();
            eprintln!("pgjdbc {how}: {}", stdout.trim());
            assert_eq!((counts["late"], counts["bystander_cancelled"]), (0, 0), "{how}: {stdout}");
            assert!(counts["timed_out"] >= 180, "{how}: {stdout}");
        }
    });
    eprintln!("pgjdbc: three loops of 200 timed-out statements took {:?}", started.elapsed());
}

/// pgjdbc's LISTEN/NOTIFY API (tests/jdbc/Notify.java: `execute("LISTEN
/// ...")` over the extended protocol, `getNotifications(timeout)`) in
/// transaction mode through the notification hub, on a pool of one server
/// connection: the listener is not pinned (the notifier runs on the same
/// pool), and it gets what it gets direct; also with autocommit off, where
/// the LISTEN runs inside a transaction block.
#[test]
fn jdbc_listen_notify_through_the_notification_hub() {
    assert!(Path::new(DRIVER).exists(), "{DRIVER} missing: apt-get install libpostgresql-jdbc-java (tools/test does)");
    let pg = postgres();
    pg.fresh_database("jdbc_notify", None);
    let dir = std::env::temp_dir().join(format!("pglane-jdbc-notify-{}", std::process::id()));
    let direct_url = format!("jdbc:postgresql://127.0.0.1:{}/jdbc_notify", pg.port);
    let direct = run_java(&dir, "Notify", &[&direct_url, "postgres", "secret"], String::new);
    assert!(direct.ends_with("ok\n") && direct.contains("4 notifications\n") && direct.contains("Mixed Case own"), "{direct}");
    assert!(direct.contains("1 notifications\ntxn_jobs after commit\n0 notifications\nok\n"), "{direct}");
    let lane = Pglane::start_with_args(
        &format!(
            "pool_mode = \"transaction\"\nquery_wait_timeout = 5\n[databases.app]\nhost = \"127.0.0.1\"\n\
             port = {}\ndbname = \"jdbc_notify\"\npool_size = 1\n[users.postgres]\npassword = \"secret\"\n",
            pg.port
        ),
        &["--cores", "1"],
    );
    let url = format!("jdbc:postgresql://127.0.0.1:{}/app", lane.port);
    let through = run_java(&dir, "Notify", &[&url, "postgres", "secret"], || lane.log());
    assert_eq!(through, direct);
    assert!(!lane.log().contains("client pinned"), "{}", lane.log());
    assert!(lane.log().contains("notification listener connected"), "the hub did not listen:\n{}", lane.log());
    let _ = std::fs::remove_dir_all(&dir);
}
