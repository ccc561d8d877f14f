//! pgload, the bundled load generator, end to end: its options, and short
//! runs of every scenario and protocol mode against the test PostgreSQL,
//! directly and through pglane, checking the counts its JSON report gives.
//!
//! Each test uses its own database, so the scenarios' setups (which drop and
//! create tables) never race each other.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::{postgres, Pglane, SUPERUSER, SUPERUSER_PASSWORD};
use serde_json::Value;

const PROTOCOLS: [&str; 3] = ["simple", "extended", "prepared"];

/// A fresh database for one test.
fn database(name: &str) -> String {
    let pg = postgres();
    pg.fresh_database(name, None);
    name.to_owned()
}

/// pglane in front of database `db`: `txn` in transaction mode, `sess` in
/// session mode.
fn pglane(db: &str) -> Pglane {
    Pglane::start_with_args(
        &format!(
            r#"pool_mode = "transaction"

[databases.txn]
host = "127.0.0.1"
port = {port}
dbname = "{db}"
pool_size = 4

[databases.sess]
host = "127.0.0.1"
port = {port}
dbname = "{db}"
pool_size = 4
pool_mode = "session"

[users.postgres]
password = "secret"
"#,
            port = postgres().port
        ),
        &["--cores", "2"],
    )
}

/// Where a run goes: host, port, user, database.
struct Target {
    name: &'static str,
    host: String,
    port: u16,
    user: &'static str,
    db: String,
}

impl Target {
    fn direct(db: &str) -> Target {
        Target { name: "direct", host: "127.0.0.1".into(), port: postgres().port, user: SUPERUSER, db: db.into() }
    }

    /// Through pglane in transaction mode.
    fn pglane(lane: &Pglane) -> Target {
        Target { name: "pglane", host: "127.0.0.1".into(), port: lane.port, user: SUPERUSER, db: "txn".into() }
    }

    /// Through pglane in session mode.
    fn pglane_session(lane: &Pglane) -> Target {
        Target { name: "pglane session", host: "127.0.0.1".into(), port: lane.port, user: SUPERUSER, db: "sess".into() }
    }
}

/// Runs pgload against `target` with `args`; returns its output and JSON report.
fn pgload(target: &Target, args: &[&str]) -> (Output, Option<Value>) {
    let json = json_path();
    let output = Command::new(env!("CARGO_BIN_EXE_pgload"))
        .args(["-h", &target.host, "-p", &target.port.to_string(), "-U", target.user, "-P", "0", "--json"])
        .arg(&json)
        .args(args)
        .arg(&target.db)
        .env("PGPASSWORD", SUPERUSER_PASSWORD)
        .env_remove("PGHOST")
        .env_remove("PGPORT")
        .output()
        .expect("pgload runs");
    let report = std::fs::read_to_string(&json).ok().map(|s| serde_json::from_str(&s).expect("pgload writes valid JSON"));
    let _ = std::fs::remove_file(&json);
    (output, report)
}

fn json_path() -> PathBuf {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static N: AtomicUsize = AtomicUsize::new(0);
    std::env::temp_dir().join(format!("pgload-test-{}-{}.json", std::process::id(), N.fetch_add(1, Ordering::Relaxed)))
}

fn show(output: &Output) -> String {
    format!(
        "status {}\n--- stdout ---\n{}\n--- stderr ---\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// Runs and checks a clean run: exit 0, `connections * per_connection`
/// transactions, no failures, `rows_per_tx` rows each.
fn run_clean(target: &Target, args: &[&str], connections: u64, per_connection: u64, rows_per_tx: u64) -> Value {
    let c = connections.to_string();
    let t = per_connection.to_string();
    let all: Vec<&str> = ["-c", &c, "-j", "2", "-t", &t].into_iter().chain(args.iter().copied()).collect();
    let (output, report) = pgload(target, &all);
    let what = format!("pgload {} to {} ({})", all.join(" "), target.name, target.db);
    assert!(output.status.success(), "{what}: {}", show(&output));
    let r = report.unwrap_or_else(|| panic!("{what}: no JSON report\n{}", show(&output)));
    let tx = connections * per_connection;
    assert_eq!(r["transactions"], tx, "{what}: {r:#}");
    assert_eq!(r["failed"], 0, "{what}: {r:#}");
    assert_eq!(r["errors"], serde_json::json!({}), "{what}: {r:#}");
    assert_eq!(r["statements"], tx, "{what}: {r:#}");
    assert_eq!(r["rows"], tx * rows_per_tx, "{what}: {r:#}");
    assert_eq!(r["connections"], connections, "{what}");
    assert!(r["tps"].as_f64().unwrap() > 0.0, "{what}: {r:#}");
    assert!(r["bytes_sent"].as_u64().unwrap() > 0 && r["bytes_received"].as_u64().unwrap() > 0, "{what}: {r:#}");
    let l = &r["latency_ms"];
    for (lower, upper) in [("p50", "p90"), ("p90", "p99"), ("p99", "p99.9"), ("p99.9", "max")] {
        assert!(l[lower].as_f64() <= l[upper].as_f64(), "{what}: latency {l}");
    }
    r
}

/// Every protocol (and, where it applies, binary results), directly and
/// through pglane, each with a clean run.
fn every_protocol(db: &str, scenario_args: &[&str], per_connection: u64, rows_per_tx: u64) {
    let lane = pglane(db);
    for protocol in PROTOCOLS {
        let mut formats = vec!["text"];
        if protocol != "simple" {
            formats.push("binary");
        }
        for format in formats {
            for target in [Target::direct(db), Target::pglane(&lane), Target::pglane_session(&lane)] {
                let args: Vec<&str> = scenario_args.iter().copied().chain(["-M", protocol, "--result-format", format]).collect();
                let r = run_clean(&target, &args, 4, per_connection, rows_per_tx);
                assert_eq!((r["protocol"].as_str(), r["result_format"].as_str()), (Some(protocol), Some(format)));
            }
        }
    }
}

#[test]
fn select_only_every_protocol() {
    let db = database("pgload_select");
    // Setup on first use creates the pgbench tables at scale 1.
    let r = run_clean(&Target::direct(&db), &["-b", "select-only"], 2, 5, 1);
    assert_eq!((r["scenario"].as_str(), r["scale"].as_u64()), (Some("select-only"), Some(1)));
    assert_eq!(postgres().psql_db(&db, "SELECT count(*) FROM pgbench_accounts"), "100000");
    every_protocol(&db, &["-b", "select-only"], 25, 1);
}

#[test]
fn parser_heavy_every_protocol() {
    let db = database("pgload_parser");
    every_protocol(&db, &["-b", "parser-heavy", "-s", "1"], 10, 4);
}

#[test]
fn uuid_fetch_every_protocol_and_format() {
    let db = database("pgload_uuid");
    every_protocol(&db, &["-b", "uuid-fetch", "--rows", "2000"], 2, 2000);
    // Binary uuids are 16 bytes, text ones 36: the wire shows it.
    let bytes = |format: &str| {
        let r = run_clean(
            &Target::direct(&db),
            &["-b", "uuid-fetch", "--rows", "2000", "-M", "extended", "--result-format", format],
            1,
            1,
            2000,
        );
        r["bytes_received"].as_u64().unwrap()
    };
    let (text, binary) = (bytes("text"), bytes("binary"));
    assert!(text > binary + 2000 * 19, "text {text} B vs binary {binary} B");
}

#[test]
fn insert_every_protocol_counts_its_rows() {
    let db = database("pgload_insert");
    let lane = pglane(&db);
    for protocol in PROTOCOLS {
        for target in [Target::direct(&db), Target::pglane(&lane), Target::pglane_session(&lane)] {
            // Setup empties pgload_inserts at the start of each run.
            run_clean(&target, &["-b", "insert", "-M", protocol], 4, 20, 1);
            assert_eq!(postgres().psql_db(&db, "SELECT count(*) FROM pgload_inserts"), "80", "{protocol} to {}", target.name);
        }
    }
}

#[test]
fn custom_script_with_variables() {
    let db = database("pgload_custom");
    let dir = std::env::temp_dir();
    let script = write_script(
        &dir,
        "custom",
        "-- two statements in one transaction, with casts and a repeated variable\n\
         \\set n random(1, 5)\n\
         \\set m :n * 10 + :client_id\n\
         BEGIN;\n\
         SELECT :n::int4 AS n, :m::int8 AS m, repeat('x', :n::int4) AS xs\n  FROM generate_series(1, :n::int4);\n\
         SELECT ':not_a_variable', 'a;b'::text;\n\
         COMMIT;\n",
    );
    let lane = pglane(&db);
    for protocol in PROTOCOLS {
        for target in [Target::direct(&db), Target::pglane(&lane), Target::pglane_session(&lane)] {
            let (output, report) =
                pgload(&target, &["-f", script.to_str().unwrap(), "-M", protocol, "-c", "3", "-t", "10", "--seed", "42"]);
            assert!(output.status.success(), "{}", show(&output));
            let r = report.expect("JSON report");
            assert_eq!(
                (r["transactions"].as_u64(), r["failed"].as_u64(), r["statements"].as_u64()),
                (Some(30), Some(0), Some(120)),
                "{r:#}"
            );
            // 1..=5 rows from the first SELECT, 1 from the second, per transaction.
            let rows = r["rows"].as_u64().unwrap();
            assert!((60..=180).contains(&rows), "{rows} rows: {r:#}");
        }
    }
    let _ = std::fs::remove_file(script);
}

#[test]
fn sql_errors_are_counted_by_sqlstate() {
    let db = database("pgload_errors");
    let script = write_script(&std::env::temp_dir(), "errors", "\\set d random(0, 1)\nSELECT 1 / :d::int4;\n");
    for protocol in PROTOCOLS {
        let (output, report) =
            pgload(&Target::direct(&db), &["-f", script.to_str().unwrap(), "-M", protocol, "-c", "2", "-t", "50", "--seed", "7"]);
        assert_eq!(output.status.code(), Some(2), "failures exit 2: {}", show(&output));
        let r = report.expect("a report even when transactions failed");
        let failed = r["failed"].as_u64().unwrap();
        assert!(failed > 0 && failed < 100, "{r:#}");
        assert_eq!(r["transactions"].as_u64().unwrap() + failed, 100, "{r:#}");
        assert_eq!(r["errors"], serde_json::json!({ "22012": failed }), "{r:#}");
        assert!(String::from_utf8_lossy(&output.stdout).contains("errors: 22012: "));
    }
    let _ = std::fs::remove_file(script);
}

#[test]
fn every_login_method_and_the_unix_socket() {
    let pg = postgres();
    let script = write_script(&std::env::temp_dir(), "login", "SELECT 1;\n");
    let file = script.to_str().unwrap();
    for (user, password) in [("scramuser", "scrampass"), ("md5user", "md5pass"), ("trustuser", "")] {
        let target = Target { name: "direct", host: "127.0.0.1".into(), port: pg.port, user, db: "postgres".into() };
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_pgload"));
        cmd.args(["-h", &target.host, "-p", &pg.port.to_string(), "-U", user, "-P", "0", "-f", file, "-t", "3", "postgres"]);
        if password.is_empty() {
            cmd.env_remove("PGPASSWORD");
        } else {
            cmd.env("PGPASSWORD", password);
        }
        let output = cmd.output().expect("pgload runs");
        assert!(output.status.success(), "{user}: {}", show(&output));
        assert!(String::from_utf8_lossy(&output.stdout).contains("transactions: 3 ok, 0 failed"), "{user}: {}", show(&output));
    }
    let unix =
        Target { name: "unix", host: pg.socket_dir.display().to_string(), port: pg.port, user: SUPERUSER, db: "postgres".into() };
    let r = run_clean(&unix, &["-f", file], 2, 5, 1);
    assert!(r["server"].as_str().unwrap().ends_with(&format!(".s.PGSQL.{}", pg.port)), "{r:#}");

    // A wrong password fails before any load, with exit status 1.
    let mut wrong = Target::direct("postgres");
    wrong.user = "scramuser";
    let (output, _) = pgload(&wrong, &["-f", file, "-t", "1"]);
    assert_eq!(output.status.code(), Some(1), "{}", show(&output));
    assert!(String::from_utf8_lossy(&output.stderr).contains("28P01"), "{}", show(&output));
    let _ = std::fs::remove_file(script);
}

#[test]
fn open_loop_rate_and_duration() {
    let db = database("pgload_rate");
    let script = write_script(&std::env::temp_dir(), "rate", "SELECT 1;\n");
    let (output, report) =
        pgload(&Target::direct(&db), &["-f", script.to_str().unwrap(), "-c", "2", "-R", "200", "-T", "1500ms"]);
    assert!(output.status.success(), "{}", show(&output));
    let r = report.unwrap();
    let tx = r["transactions"].as_u64().unwrap();
    // Poisson arrivals at 200/s for 1.5 s: 300 expected; 5 sigma is about 87.
    assert!((200..=400).contains(&tx), "{tx} transactions: {r:#}");
    assert_eq!(r["rate"].as_f64(), Some(200.0));
    let secs = r["duration_s"].as_f64().unwrap();
    assert!((1.0..3.0).contains(&secs), "{secs} s");
    let _ = std::fs::remove_file(script);
}

#[test]
fn option_mistakes_exit_1_with_a_reason() {
    let target = Target::direct("postgres");
    for (args, reason) in [
        (&["-M", "simple", "--result-format", "binary"][..], "needs --protocol extended or prepared"),
        (&["-c", "0"][..], "--connections must be at least 1"),
        (&["-b", "nope"][..], "invalid value 'nope'"),
        (&["-f", "/nonexistent.sql"][..], "cannot read /nonexistent.sql"),
    ] {
        let (output, report) = pgload(&target, args);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success() && output.status.code() != Some(2), "{args:?}: {}", show(&output));
        assert!(stderr.contains(reason), "{args:?} should say {reason:?}: {stderr}");
        assert!(report.is_none());
    }
    let help = Command::new(env!("CARGO_BIN_EXE_pgload")).arg("--help").output().unwrap();
    assert!(help.status.success());
    let help = String::from_utf8_lossy(&help.stdout);
    for needle in ["-h, --host", "-U, --username", "PGPASSWORD", "--result-format", "Examples:"] {
        assert!(help.contains(needle), "--help lacks {needle}");
    }
}

fn write_script(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(format!("pgload-{name}-{}.sql", std::process::id()));
    std::fs::write(&path, text).expect("write script");
    path
}
