//! PgBouncer and pglane run from the same production-like pgbouncer.ini and
//! userlist (plaintext, md5 and SCRAM secrets copied from pg_authid, a pool
//! and max_db_connections), on the same PostgreSQL, and are compared: who
//! logs in and with what error, how many server connections each opens
//! under the same load, and the admin console's columns, lists and config
//! keys. The PgBouncer is the one the machine has (1.18 on Debian 12); what
//! it shows, pglane must show too, in the same order (pglane's own columns
//! may follow or sit between), and the columns pgbouncer_exporter makes
//! metrics of read as numbers.

mod common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{connect, free_port, postgres, try_connect, Pgbouncer, Pglane};
use tokio_postgres::SimpleQueryMessage;

const DB: &str = "parity_db";

fn rolpassword(role: &str) -> String {
    postgres().psql(&format!("SELECT rolpassword FROM pg_authid WHERE rolname = '{role}'"))
}

/// The [databases] line both run from.
fn databases() -> String {
    format!("app = host=127.0.0.1 port={} dbname={DB} pool_size=2 max_db_connections=3", postgres().port)
}

/// The [pgbouncer] settings both run from (each adds where it listens).
const SETTINGS: &str = "auth_type = md5\npool_mode = transaction\nadmin_users = postgres\nstats_users = postgres\n\
                        max_client_conn = 100\nquery_wait_timeout = 30\nserver_check_delay = 30";

fn userlist() -> String {
    format!(
        "\"postgres\" \"secret\"\n\"scramuser\" \"{}\"\n\"md5user\" \"{}\"\n",
        rolpassword("scramuser"),
        rolpassword("md5user")
    )
}

fn start_pglane() -> (Pglane, std::path::PathBuf) {
    let dir = std::env::temp_dir().join(format!("pglane-parity-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("userlist.txt"), userlist()).unwrap();
    let ini = dir.join("pgbouncer.ini");
    let text = format!(
        "[databases]\n{}\n[pgbouncer]\nlisten_addr = 127.0.0.1\nunix_socket_dir =\nauth_file = userlist.txt\n{SETTINGS}\n",
        databases()
    );
    std::fs::write(&ini, text).unwrap();
    // PgBouncer's command line; the harness's TOML only moves `listen`.
    (Pglane::start_with_args("", &[ini.to_str().unwrap(), "--cores", "2"]), dir)
}

/// Each login's answer: the user PostgreSQL saw, or the SQLSTATE.
async fn logins(port: u16) -> Vec<(&'static str, &'static str, Result<String, String>)> {
    let tries = [
        ("postgres", "secret"),
        ("scramuser", "scrampass"),
        ("md5user", "md5pass"),
        ("postgres", "wrong"),
        ("scramuser", "wrong"),
        ("md5user", "wrong"),
        ("nobody", "x"),
    ];
    let mut out = Vec::new();
    for (user, password) in tries {
        let answer = match try_connect(port, user, password, "app").await {
            Ok(c) => c
                .query_one("select current_user::text", &[])
                .await
                .map(|r| r.get::<_, String>(0))
                .map_err(|e| e.code().map(|c| c.code().to_owned()).unwrap_or_default()),
            Err(e) => Err(e.code().map(|c| c.code().to_owned()).unwrap_or_else(|| e.to_string())),
        };
        out.push((user, password, answer));
    }
    out
}

async fn backends(monitor: &tokio_postgres::Client) -> usize {
    let row = monitor
        .query_one("select count(*) from pg_stat_activity where datname = $1 and backend_type = 'client backend'", &[&DB])
        .await
        .unwrap();
    row.get::<_, i64>(0) as usize
}

/// The most server connections to the database at once while two users'
/// three clients each run transactions that hold their connection a moment.
async fn most_backends_under_load(port: u16) -> usize {
    let monitor = connect(postgres().port, "postgres", "secret", "postgres").await;
    let done = Arc::new(AtomicBool::new(false));
    let most = Arc::new(AtomicUsize::new(0));
    let watcher = {
        let (done, most) = (done.clone(), most.clone());
        tokio::spawn(async move {
            while !done.load(Ordering::SeqCst) {
                most.fetch_max(backends(&monitor).await, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        })
    };
    let mut tasks = Vec::new();
    for i in 0..6 {
        let (user, password) = if i % 2 == 0 { ("postgres", "secret") } else { ("scramuser", "scrampass") };
        tasks.push(tokio::spawn(async move {
            let c = connect(port, user, password, "app").await;
            for _ in 0..20 {
                c.batch_execute("begin; select pg_sleep(0.01); commit").await.expect("a transaction");
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    done.store(true, Ordering::SeqCst);
    watcher.await.unwrap();
    most.load(Ordering::SeqCst)
}

/// A console command's column names and rows.
async fn console(port: u16, command: &str) -> (Vec<String>, Vec<Vec<Option<String>>>) {
    let c = connect(port, "postgres", "secret", "pgbouncer").await;
    let mut columns = Vec::new();
    let mut rows = Vec::new();
    for message in c.simple_query(command).await.unwrap_or_else(|e| panic!("{command} on {port}: {e}")) {
        match message {
            SimpleQueryMessage::RowDescription(cols) => columns = cols.iter().map(|c| c.name().to_owned()).collect(),
            SimpleQueryMessage::Row(row) => rows.push((0..row.len()).map(|i| row.get(i).map(str::to_owned)).collect()),
            _ => {}
        }
    }
    (columns, rows)
}

/// The columns pgbouncer_exporter turns into metrics, by command: each must
/// read as a number wherever PgBouncer has it.
const EXPORTED: &[(&str, &[&str])] = &[
    ("SHOW DATABASES", &["pool_size", "reserve_pool", "max_connections", "current_connections", "paused", "disabled"]),
    (
        "SHOW STATS_TOTALS",
        &[
            "query_count",
            "query_time",
            "bytes_received",
            "requests",
            "bytes_sent",
            "wait_time",
            "xact_count",
            "xact_time",
            "client_parse_count",
            "server_parse_count",
            "bind_count",
        ],
    ),
    (
        "SHOW POOLS",
        &[
            "cl_active",
            "cl_active_cancel_req",
            "cl_waiting",
            "cl_waiting_cancel_req",
            "sv_active",
            "sv_active_cancel",
            "sv_being_canceled",
            "sv_idle",
            "sv_used",
            "sv_tested",
            "sv_login",
            "maxwait",
        ],
    ),
    ("SHOW LISTS", &["items"]),
];

/// Whether `inner` appears in `outer` in the same order (not necessarily
/// side by side); the first of `inner` missing from it otherwise.
fn in_order<'a>(inner: &'a [String], outer: &[String]) -> Result<(), &'a str> {
    let mut rest = outer.iter();
    for name in inner {
        if !rest.any(|o| o == name) {
            return Err(name);
        }
    }
    Ok(())
}

async fn wait_for_no_backends() {
    let monitor = connect(postgres().port, "postgres", "secret", "postgres").await;
    let deadline = Instant::now() + Duration::from_secs(20);
    while backends(&monitor).await > 0 {
        assert!(Instant::now() < deadline, "PgBouncer's server connections outlived it");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn pglane_does_what_pgbouncer_does_from_the_same_ini() {
    if std::process::Command::new("pgbouncer").arg("--version").output().is_err() {
        panic!("pgbouncer is not installed: tools/test installs it");
    }
    postgres().fresh_database(DB, None);

    let bouncer = Pgbouncer::start_with_users(free_port(), &databases(), SETTINGS, &userlist());
    let bouncer_logins = logins(bouncer.port).await;
    let bouncer_most = most_backends_under_load(bouncer.port).await;
    let mut bouncer_console = Vec::new();
    for command in [
        "SHOW DATABASES",
        "SHOW POOLS",
        "SHOW STATS",
        "SHOW STATS_TOTALS",
        "SHOW CLIENTS",
        "SHOW SERVERS",
        "SHOW USERS",
        "SHOW LISTS",
        "SHOW VERSION",
        "SHOW CONFIG",
        "SHOW STATS_AVERAGES",
        "SHOW TOTALS",
        "SHOW SOCKETS",
        "SHOW ACTIVE_SOCKETS",
        "SHOW MEM",
        "SHOW DNS_HOSTS",
        "SHOW DNS_ZONES",
    ] {
        bouncer_console.push((command, console(bouncer.port, command).await));
    }
    let bouncer_set = set_and_show(bouncer.port).await;
    drop(bouncer);
    wait_for_no_backends().await;

    let (lane, dir) = start_pglane();
    let lane_logins = logins(lane.port).await;
    // The same logins succeed as the same users and the same fail; a failed
    // one gets PostgreSQL's own SQLSTATE from pglane, 28P01, where
    // PgBouncer 1.18 says 08P01.
    let outcome = |answers: &[(&str, &str, Result<String, String>)]| {
        answers.iter().map(|(u, p, a)| (u.to_string(), p.to_string(), a.clone().map_err(|_| ()))).collect::<Vec<_>>()
    };
    assert_eq!(outcome(&lane_logins), outcome(&bouncer_logins), "logins: pglane (left) and PgBouncer (right)");
    assert!(lane_logins.iter().all(|(_, _, a)| a.as_ref().err().is_none_or(|code| code == "28P01")), "{lane_logins:?}");
    let lane_most = most_backends_under_load(lane.port).await;
    assert_eq!(lane_most, bouncer_most, "the most server connections at once, pglane and PgBouncer");
    assert_eq!(lane_most, 3, "max_db_connections = 3");

    for (command, (bouncer_columns, bouncer_rows)) in &bouncer_console {
        assert!(!bouncer_columns.is_empty(), "PgBouncer's {command} has columns");
        let (lane_columns, lane_rows) = console(lane.port, command).await;
        if *command == "SHOW VERSION" {
            assert_eq!(&lane_columns, bouncer_columns, "{command}");
            continue;
        }
        if let Err(missing) = in_order(bouncer_columns, &lane_columns) {
            panic!("{command}: PgBouncer's column {missing} is not in pglane's, in PgBouncer's order\nPgBouncer: {bouncer_columns:?}\npglane: {lane_columns:?}");
        }
        for name in EXPORTED.iter().filter(|(c, _)| c == command).flat_map(|(_, names)| names.iter()) {
            if !bouncer_columns.iter().any(|c| c == name) {
                continue;
            }
            let i = lane_columns.iter().position(|c| c == name).expect("checked above");
            for row in &lane_rows {
                let value = row[i].as_deref().unwrap_or("");
                assert!(value.parse::<f64>().is_ok(), "{command}: {name} = {value:?} is no number for pgbouncer_exporter");
            }
        }
        // What pgbouncer_exporter reads from SHOW CONFIG, as numbers.
        if *command == "SHOW CONFIG" {
            for key in ["max_client_conn", "max_user_connections"] {
                let row = lane_rows.iter().find(|r| r[0].as_deref() == Some(key)).unwrap_or_else(|| panic!("no {key}"));
                assert!(row[1].as_deref().unwrap_or("").parse::<f64>().is_ok(), "{key}: {row:?}");
            }
        }
        if *command == "SHOW MEM" {
            // pglane has no slab caches of buffers or variable lists: each
            // cache it names is one of PgBouncer's, in its order.
            let first = |rows: &[Vec<Option<String>>]| rows.iter().filter_map(|r| r[0].clone()).collect::<Vec<String>>();
            if let Err(unknown) = in_order(&first(&lane_rows), &first(bouncer_rows)) {
                panic!("SHOW MEM: pglane's row {unknown} is not one of PgBouncer's, in its order");
            }
        }
        if matches!(*command, "SHOW LISTS" | "SHOW CONFIG" | "SHOW TOTALS") {
            let first = |rows: &[Vec<Option<String>>]| rows.iter().filter_map(|r| r[0].clone()).collect::<Vec<String>>();
            if let Err(missing) = in_order(&first(bouncer_rows), &first(&lane_rows)) {
                panic!("{command}: PgBouncer's row {missing} is not in pglane's, in PgBouncer's order");
            }
        }
    }
    assert_eq!(set_and_show(lane.port).await, bouncer_set, "SET by PgBouncer's names: pglane (left) and PgBouncer (right)");
    drop(lane);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The console's SET, by PgBouncer's names: what SHOW CONFIG and SHOW
/// DATABASES say after each, and whether a SET of a key that does not
/// exist fails.
async fn set_and_show(port: u16) -> Vec<(String, Option<String>)> {
    let c = connect(port, "postgres", "secret", "pgbouncer").await;
    let mut seen = Vec::new();
    for (set, key) in [("SET default_pool_size = 7", "default_pool_size"), ("SET query_wait_timeout = 45", "query_wait_timeout")]
    {
        c.simple_query(set).await.unwrap_or_else(|e| panic!("{set} on {port}: {e}"));
        let (_, rows) = console(port, "SHOW CONFIG").await;
        seen.push((key.to_owned(), rows.iter().find(|r| r[0].as_deref() == Some(key)).and_then(|r| r[1].clone())));
    }
    let (columns, rows) = console(port, "SHOW DATABASES").await;
    let pool_size = columns.iter().position(|c| c == "pool_size").expect("pool_size column");
    let sized = rows.iter().find(|r| r[0].as_deref() == Some("app")).and_then(|r| r[pool_size].clone());
    seen.push(("app pool_size (its own)".into(), sized));
    let refused = c.simple_query("SET no_such_setting = 1").await.is_err();
    seen.push(("SET no_such_setting refused".into(), Some(refused.to_string())));
    seen
}
