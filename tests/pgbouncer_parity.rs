//! PgBouncer and pglane run from the same production-like pgbouncer.ini and
//! userlist, on the same PostgreSQL, and are compared key by key. The
//! PgBouncers are the one on PATH (1.18 on Debian 12) and, one after the
//! other, 1.24.1, which tools/test builds from Debian's source (no 1.25 is
//! packaged) and names in `PGLANE_NEWER_PGBOUNCER`. What each shows, pglane
//! must show too, and where they differ the test says how and why.
//!
//! - [`pglane_does_what_pgbouncer_does_from_the_same_ini`]: plaintext, md5
//!   and SCRAM secrets copied from pg_authid, a pool and
//!   max_db_connections: who logs in and with what error, how many server
//!   connections each opens under the same load, and the admin console's
//!   columns, lists and config keys, in PgBouncer's order (pglane's own
//!   columns may follow or sit between), the columns pgbouncer_exporter
//!   makes metrics of reading as numbers.
//! - [`tls_auth_query_and_the_star_database_as_pgbouncer_does`]: TLS both
//!   ways (client_tls_sslmode = require with the ini's certificate;
//!   server_tls_sslmode = verify-ca to a PostgreSQL that refuses TCP logins
//!   without TLS), auth_query through a database's own auth_user, the `*`
//!   entry, per-database pool_size and max_db_connections, and a host list:
//!   which logins succeed (as whom, where) or fail (with which SQLSTATE or
//!   FATAL line) over the unix socket, over TCP without TLS and with it;
//!   whether libpq's client connection is TLS (`\conninfo`) and the server
//!   connection (pg_stat_ssl); which hosts two clients get; the most server
//!   connections under load; and SHOW DATABASES, POOLS and USERS row by row.
//!
//! The differences allowed are those docs/migrating-from-pgbouncer.md
//! lists: PostgreSQL's SQLSTATEs and words for refused logins (PgBouncer
//! 1.18: 08P01), no rows for PgBouncer's own `pgbouncer` console database,
//! and an idle server connection per shard where PgBouncer's one pool
//! keeps one.

mod common;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{certs, connect, free_port, give_to_pg_user, postgres, try_connect, Pgbouncer, Pglane, Postgres, Psql};
use rcgen::ExtendedKeyUsagePurpose;
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

/// Where a pooler (or PostgreSQL) takes clients: TCP on 127.0.0.1, or the
/// unix socket in a directory (a `host` that starts with `/`), plaintext.
#[derive(Clone, Debug)]
struct At {
    host: String,
    port: u16,
}

impl At {
    fn tcp(port: u16) -> At {
        At { host: "127.0.0.1".into(), port }
    }

    fn socket(dir: &std::path::Path, port: u16) -> At {
        At { host: dir.to_str().expect("a UTF-8 path").to_owned(), port }
    }

    async fn try_connect(&self, user: &str, password: &str, db: &str) -> Result<tokio_postgres::Client, tokio_postgres::Error> {
        if self.host == "127.0.0.1" {
            return try_connect(self.port, user, password, db).await;
        }
        let mut config = tokio_postgres::Config::new();
        config.host(&self.host).port(self.port).user(user).password(password).dbname(db);
        config.connect_timeout(Duration::from_secs(10));
        let (client, connection) = config.connect(tokio_postgres::NoTls).await?;
        tokio::spawn(async move {
            let _ = connection.await;
        });
        Ok(client)
    }

    async fn connect(&self, user: &str, password: &str, db: &str) -> tokio_postgres::Client {
        self.try_connect(user, password, db)
            .await
            .unwrap_or_else(|e| panic!("connect to {self:?} as {user} db {db}: {}", refusal(&e)))
    }
}

/// A login's or query's error: its SQLSTATE and message, or what else it is.
fn refusal(e: &tokio_postgres::Error) -> String {
    e.as_db_error().map(|d| format!("{} {}", d.code().code(), d.message())).unwrap_or_else(|| e.to_string())
}

/// Server connections to database `db` now, as PostgreSQL counts them.
async fn backends(monitor: &tokio_postgres::Client, db: &str) -> usize {
    let row = monitor
        .query_one("select count(*) from pg_stat_activity where datname = $1 and backend_type = 'client backend'", &[&db])
        .await
        .unwrap();
    row.get::<_, i64>(0) as usize
}

/// The most server connections to the database at once while two users'
/// three clients each run transactions that hold their connection a moment.
async fn most_backends_under_load(port: u16) -> usize {
    let pg = postgres();
    most_backends_at(&At::tcp(port), &At::tcp(pg.port), DB, ("scramuser", "scrampass")).await
}

/// [`most_backends_under_load`] through the pooler `at`, to database `app`
/// as postgres and `other`, PostgreSQL watched as postgres through
/// `monitor_at`, counting its connections to `db`.
async fn most_backends_at(at: &At, monitor_at: &At, db: &'static str, other: (&'static str, &'static str)) -> usize {
    let monitor = monitor_at.connect("postgres", "secret", "postgres").await;
    let done = Arc::new(AtomicBool::new(false));
    let most = Arc::new(AtomicUsize::new(0));
    let watcher = {
        let (done, most) = (done.clone(), most.clone());
        tokio::spawn(async move {
            while !done.load(Ordering::SeqCst) {
                most.fetch_max(backends(&monitor, db).await, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        })
    };
    let mut tasks = Vec::new();
    for i in 0..6 {
        let (user, password) = if i % 2 == 0 { ("postgres", "secret") } else { other };
        let at = at.clone();
        tasks.push(tokio::spawn(async move {
            let c = at.connect(user, password, "app").await;
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

/// Whether PgBouncer's most server connections at once, as PostgreSQL
/// counts them, is its `limit`, or one more for a moment: under
/// max_db_connections PgBouncer closes one user's idle connection and opens
/// another's at once, and PostgreSQL lists the closed backend until it has
/// exited. pglane frees the slot only once the old backend has ended
/// (`Pool::close`), so its most is the limit exactly.
fn within_a_closing_backend(most: usize, limit: usize) -> bool {
    (limit..=limit + 1).contains(&most)
}

/// A console command's column names and rows.
async fn console(port: u16, command: &str) -> Table {
    let c = connect(port, "postgres", "secret", "pgbouncer").await;
    ask_console(&c, command).await
}

/// The console's answers to `commands`, over one connection, once every
/// other client has gone: a client the test dropped a moment before may
/// still be counted (each pooler handles the close when it gets to it), and
/// its count in SHOW USERS or POOLS would then be a matter of timing.
async fn console_when_quiet(at: &At, commands: &[&'static str]) -> Vec<(&'static str, Table)> {
    let c = at.connect("postgres", "secret", "pgbouncer").await;
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (_, clients) = ask_console(&c, "SHOW CLIENTS").await;
        if clients.len() == 1 {
            break;
        }
        assert!(Instant::now() < deadline, "{at:?}: clients still connected besides the console: {clients:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut answers = Vec::new();
    for &command in commands {
        answers.push((command, ask_console(&c, command).await));
    }
    answers
}

/// A console command's columns and rows: what [`console`] returns.
type Table = (Vec<String>, Vec<Vec<Option<String>>>);

async fn ask_console(c: &tokio_postgres::Client, command: &str) -> Table {
    let mut columns = Vec::new();
    let mut rows = Vec::new();
    for message in c.simple_query(command).await.unwrap_or_else(|e| panic!("{command}: {e}")) {
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
    while backends(&monitor, DB).await > 0 {
        assert!(Instant::now() < deadline, "PgBouncer's server connections outlived it");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn pglane_does_what_pgbouncer_does_from_the_same_ini() {
    for program in pgbouncers() {
        Box::pin(same_ini_as(&program)).await;
    }
}

/// The PgBouncers pglane is compared with, one after the other: the one on
/// PATH (Debian 12's 1.18 in CI) and the one `PGLANE_NEWER_PGBOUNCER` names
/// (tools/test builds 1.24.1 from Debian's source and sets it).
fn pgbouncers() -> Vec<String> {
    let mut all = vec!["pgbouncer".to_owned()];
    all.extend(std::env::var("PGLANE_NEWER_PGBOUNCER").ok().filter(|p| !p.is_empty()));
    for program in &all {
        match std::process::Command::new(program).arg("--version").output() {
            Ok(out) => eprintln!("comparing with {}", String::from_utf8_lossy(&out.stdout).lines().next().unwrap_or(program)),
            Err(e) => panic!("cannot run {program} ({e}): tools/test installs PgBouncer and builds the newer one"),
        }
    }
    all
}

/// What [`same_ini_as`] asks each console, in PgBouncer's order.
const CONSOLE_COMMANDS: &[&str] = &[
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
];

async fn same_ini_as(program: &str) {
    // The last run's pglane may still be closing its connections.
    wait_for_no_backends().await;
    postgres().fresh_database(DB, None);

    let bouncer = Pgbouncer::start_program(program, free_port(), &databases(), SETTINGS, &userlist());
    let bouncer_logins = logins(bouncer.port).await;
    let bouncer_most = most_backends_under_load(bouncer.port).await;
    let bouncer_console = console_when_quiet(&At::tcp(bouncer.port), CONSOLE_COMMANDS).await;
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
    assert_eq!(lane_most, 3, "max_db_connections = 3");
    assert!(within_a_closing_backend(bouncer_most, 3), "PgBouncer's most server connections at once: {bouncer_most}");

    let lane_console = console_when_quiet(&At::tcp(lane.port), CONSOLE_COMMANDS).await;
    for ((command, (bouncer_columns, bouncer_rows)), (_, (lane_columns, lane_rows))) in bouncer_console.iter().zip(&lane_console)
    {
        assert!(!bouncer_columns.is_empty(), "PgBouncer's {command} has columns");
        if *command == "SHOW VERSION" {
            assert_eq!(lane_columns, bouncer_columns, "{command}");
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
            for row in lane_rows {
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
            if let Err(unknown) = in_order(&first(lane_rows), &first(bouncer_rows)) {
                panic!("SHOW MEM: pglane's row {unknown} is not one of PgBouncer's, in its order");
            }
        }
        if matches!(*command, "SHOW LISTS" | "SHOW TOTALS") {
            let first = |rows: &[Vec<Option<String>>]| rows.iter().filter_map(|r| r[0].clone()).collect::<Vec<String>>();
            if let Err(missing) = in_order(&first(bouncer_rows), &first(lane_rows)) {
                panic!("{command}: PgBouncer's row {missing} is not in pglane's, in PgBouncer's order");
            }
        }
        // pglane lists SHOW CONFIG's keys in PgBouncer 1.25's order (by
        // name); 1.24 put a few elsewhere. Every one of PgBouncer's is there.
        if *command == "SHOW CONFIG" {
            let first = |rows: &[Vec<Option<String>>]| rows.iter().filter_map(|r| r[0].clone()).collect::<Vec<String>>();
            let lane_keys = first(lane_rows);
            if let Some(missing) = first(bouncer_rows).into_iter().find(|k| !lane_keys.contains(k)) {
                panic!("SHOW CONFIG: PgBouncer's key {missing} is not in pglane's");
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

// ---------------------------------------------------------------------------
// TLS both ways, auth_query, the `*` database, per-database overrides and a
// host list, from one ini
// ---------------------------------------------------------------------------

const TLS_DB: &str = "parity_tls";
/// A database no `[databases]` line names: the `*` entry serves it.
const STAR_DB: &str = "parity_star";

/// A private PostgreSQL with `ssl = on` that listens on 127.0.0.1 and
/// 127.0.0.2 and refuses every TCP login without TLS, the certificates
/// (a CA; PostgreSQL's for localhost, 127.0.0.1 and 127.0.0.2; the
/// poolers' own for localhost and 127.0.0.1) in `certs`, readable by the
/// PgBouncer, and `aq_user`, a role no userlist names.
struct TlsServer {
    pg: Postgres,
    certs: PathBuf,
}

impl TlsServer {
    fn start() -> TlsServer {
        let hba = "hostnossl all all 127.0.0.0/8 reject\n\
                   host all md5user 127.0.0.2/32 md5\n\
                   host all all 127.0.0.2/32 scram-sha-256";
        let pg = Postgres::start_new_with("listen_addresses = '127.0.0.1,127.0.0.2'", hba);
        let certs = pg.data_dir.parent().unwrap().join("certs");
        std::fs::create_dir_all(&certs).unwrap();
        let (ca, ca_pem) = certs::ca("pglane parity CA");
        let (server_cert, server_key) =
            certs::leaf(&ca, &["localhost", "127.0.0.1", "127.0.0.2"], ExtendedKeyUsagePurpose::ServerAuth);
        let (pooler_cert, pooler_key) = certs::leaf(&ca, &["localhost", "127.0.0.1"], ExtendedKeyUsagePurpose::ServerAuth);
        let write = |path: PathBuf, text: &str| {
            std::fs::write(&path, text).unwrap();
            std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
            give_to_pg_user(&path);
        };
        write(pg.data_dir.join("server.crt"), &server_cert);
        write(pg.data_dir.join("server.key"), &server_key);
        write(certs.join("ca.crt"), &ca_pem);
        write(certs.join("pooler.crt"), &pooler_cert);
        write(certs.join("pooler.key"), &pooler_key);
        give_to_pg_user(&certs);
        pg.psql("ALTER SYSTEM SET ssl = on");
        pg.psql("SELECT pg_reload_conf()");
        let deadline = Instant::now() + Duration::from_secs(10);
        while pg.psql("SHOW ssl") != "on" {
            assert!(Instant::now() < deadline, "PostgreSQL did not turn ssl on");
            std::thread::sleep(Duration::from_millis(20));
        }
        pg.psql(&format!("CREATE DATABASE {TLS_DB}"));
        pg.psql(&format!("CREATE DATABASE {STAR_DB}"));
        pg.psql("CREATE ROLE aq_user LOGIN PASSWORD 'aqpass'");
        TlsServer { pg, certs }
    }

    fn rolpassword(&self, role: &str) -> String {
        self.pg.psql(&format!("SELECT rolpassword FROM pg_authid WHERE rolname = '{role}'"))
    }

    /// The [databases] lines: a host list with a pool size of its own and
    /// max_db_connections; an entry with an auth_user of its own, on the
    /// second address; and `*`, at the default pool size.
    fn databases(&self) -> String {
        let port = self.pg.port;
        format!(
            "app = host=127.0.0.1,127.0.0.2 port={port} dbname={TLS_DB} pool_size=2 max_db_connections=3\n\
             authq = host=127.0.0.2 port={port} dbname={TLS_DB} auth_user=postgres pool_size=1\n\
             * = host=127.0.0.1 port={port}"
        )
    }

    /// The [pgbouncer] settings (each pooler adds where it listens).
    /// verify-ca, not verify-full: PgBouncer 1.18 checks the certificate of
    /// a host list's host against the whole list as one name
    /// ("127.0.0.1,127.0.0.2 not present in server certificate"), and never
    /// connects.
    fn settings(&self) -> String {
        let c = self.certs.display();
        format!(
            "auth_type = md5\npool_mode = transaction\nadmin_users = postgres\nstats_users = postgres\n\
             default_pool_size = 3\nmax_client_conn = 100\nquery_wait_timeout = 30\n\
             auth_query = SELECT usename, passwd FROM pg_shadow WHERE usename=$1\n\
             client_tls_sslmode = require\nclient_tls_key_file = {c}/pooler.key\nclient_tls_cert_file = {c}/pooler.crt\n\
             server_tls_sslmode = verify-ca\nserver_tls_ca_file = {c}/ca.crt"
        )
    }

    fn userlist(&self) -> String {
        format!(
            "\"postgres\" \"secret\"\n\"scramuser\" \"{}\"\n\"md5user\" \"{}\"\n",
            self.rolpassword("scramuser"),
            self.rolpassword("md5user")
        )
    }

    /// PostgreSQL's own unix socket, trusted.
    fn monitor(&self) -> At {
        At::socket(&self.pg.socket_dir, self.pg.port)
    }
}

/// pglane from the same ini, on its own unix socket directory `dir` too.
fn start_pglane_from(server: &TlsServer, dir: &std::path::Path) -> Pglane {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join("userlist.txt"), server.userlist()).unwrap();
    let ini = dir.join("pgbouncer.ini");
    let text = format!(
        "[databases]\n{}\n[pgbouncer]\nlisten_addr = 127.0.0.1\nunix_socket_dir = {}\nauth_file = userlist.txt\n{}\n",
        server.databases(),
        dir.display(),
        server.settings()
    );
    std::fs::write(&ini, text).unwrap();
    Pglane::start_with_args("", &[ini.to_str().unwrap(), "--cores", "2"])
}

/// What one login did: the user, database and whether pg_stat_ssl says
/// the server connection is TLS, or the SQLSTATE.
type Answer = Result<(String, String, bool), String>;

const WHO: &str = "select current_user::text, current_database()::text, \
                   (select ssl from pg_stat_ssl where pid = pg_backend_pid())";

/// The logins on the unix socket (plaintext, which client_tls_sslmode =
/// require leaves in, as libpq never uses TLS there) and one over TCP
/// without TLS: each one's [`Answer`].
async fn logins_at(socket: &At, port: u16) -> Vec<(String, Answer)> {
    let tries = [
        ("postgres", "secret", "app"),
        ("scramuser", "scrampass", "app"),
        ("md5user", "md5pass", "app"),
        ("scramuser", "wrong", "app"),
        // Not in the userlist: found by auth_query where the database has an auth_user.
        ("aq_user", "aqpass", "authq"),
        ("aq_user", "wrong", "authq"),
        ("aq_user", "aqpass", "app"),
        ("postgres", "secret", STAR_DB),
        ("scramuser", "scrampass", STAR_DB),
        ("nobody", "x", STAR_DB),
    ];
    let mut out = Vec::new();
    for (user, password, db) in tries {
        let answer = match socket.try_connect(user, password, db).await {
            Ok(c) => c
                .query_one(WHO, &[])
                .await
                .map(|r| (r.get(0), r.get(1), r.get(2)))
                .map_err(|e| e.code().map(|c| c.code().to_owned()).unwrap_or_default()),
            Err(e) => Err(e.code().map(|c| c.code().to_owned()).unwrap_or_else(|| e.to_string())),
        };
        out.push((format!("socket {user}/{password}@{db}"), answer));
    }
    let plaintext = match try_connect(port, "postgres", "secret", "app").await {
        Ok(_) => Ok(("postgres".into(), "app".into(), false)),
        Err(e) => Err(e.code().map(|c| c.code().to_owned()).unwrap_or_else(|| e.to_string())),
    };
    out.push(("tcp without TLS postgres/secret@app".into(), plaintext));
    out
}

/// psql (libpq) over TCP with `sslmode`: what `\conninfo` says of the
/// client connection's TLS, and what [`WHO`] says, or the FATAL line.
fn psql_login(port: u16, sslmode: &str, user: &str, password: &str, db: &str) -> Result<(bool, String), String> {
    let run = Psql::tcp(port, user, password, db).conninfo(&format!("sslmode={sslmode}")).command("\\conninfo").command(WHO);
    match run.run() {
        Ok(out) => {
            let client_tls = out.contains("SSL connection (protocol: TLSv1.");
            Ok((client_tls, out.lines().last().unwrap_or_default().to_owned()))
        }
        Err(e) => Err(e.lines().find(|l| l.contains("FATAL")).map(|l| l[l.find("FATAL").unwrap()..].to_owned()).unwrap_or(e)),
    }
}

/// The logins over TCP through libpq: with TLS (the ini's sslmode =
/// require lets them in), and one without (refused), each [`psql_login`]'s
/// answer.
fn tls_logins(port: u16) -> Vec<(String, Result<(bool, String), String>)> {
    [
        ("require", "postgres", "secret", "app"),
        ("require", "md5user", "md5pass", "app"),
        ("require", "aq_user", "aqpass", "authq"),
        ("require", "aq_user", "wrong", "authq"),
        ("require", "scramuser", "scrampass", STAR_DB),
        ("disable", "postgres", "secret", "app"),
    ]
    .into_iter()
    .map(|(mode, user, password, db)| {
        (format!("sslmode={mode} {user}/{password}@{db}"), psql_login(port, mode, user, password, db))
    })
    .collect()
}

/// The server addresses (of the `app` host list) two clients of md5user
/// get at once, each holding its transaction.
async fn hosts_used(socket: &At) -> Vec<String> {
    let a = socket.connect("md5user", "md5pass", "app").await;
    let b = socket.connect("md5user", "md5pass", "app").await;
    let mut seen = Vec::new();
    for c in [&a, &b] {
        c.batch_execute("begin").await.unwrap();
        seen.push(c.query_one("select host(inet_server_addr())", &[]).await.unwrap().get::<_, String>(0));
    }
    for c in [&a, &b] {
        c.batch_execute("commit").await.unwrap();
    }
    seen.sort();
    seen
}

/// What one pooler does from the ini: its logins, its TLS, the hosts it
/// uses, its backends under load and its console.
#[derive(Debug)]
struct Seen {
    logins: Vec<(String, Answer)>,
    tls_logins: Vec<(String, Result<(bool, String), String>)>,
    hosts: Vec<String>,
    most: usize,
    console: Vec<(&'static str, Table)>,
    /// The port it listens on.
    port: u16,
}

async fn seen(server: &TlsServer, socket: &At, port: u16) -> Seen {
    // First, while no pool has a server connection yet.
    let hosts = hosts_used(socket).await;
    let logins = logins_at(socket, port).await;
    let tls_logins = tokio::task::block_in_place(|| tls_logins(port));
    let most = most_backends_at(socket, &server.monitor(), TLS_DB, ("md5user", "md5pass")).await;
    let console =
        console_when_quiet(socket, &["SHOW DATABASES", "SHOW POOLS", "SHOW USERS", "SHOW SERVERS", "SHOW CLIENTS"]).await;
    Seen { logins, tls_logins, hosts, most, console, port }
}

async fn wait_for_no_backends_on(server: &TlsServer) {
    let monitor = server.monitor().connect("postgres", "", "postgres").await;
    let deadline = Instant::now() + Duration::from_secs(20);
    while backends(&monitor, TLS_DB).await + backends(&monitor, STAR_DB).await > 0 {
        assert!(Instant::now() < deadline, "PgBouncer's server connections outlived it");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A console's rows as maps from column name to value, keyed by the
/// values of `key` columns.
fn by_name(
    (columns, rows): &(Vec<String>, Vec<Vec<Option<String>>>),
    key: &[&str],
) -> BTreeMap<Vec<String>, BTreeMap<String, Option<String>>> {
    let index = |name: &str| columns.iter().position(|c| c == name).unwrap_or_else(|| panic!("no {name} in {columns:?}"));
    rows.iter()
        .map(|row| {
            let k = key.iter().map(|name| row[index(name)].clone().unwrap_or_default()).collect();
            (k, columns.iter().cloned().zip(row.iter().cloned()).collect())
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn tls_auth_query_and_the_star_database_as_pgbouncer_does() {
    for program in pgbouncers() {
        Box::pin(tls_as(&program)).await;
    }
}

async fn tls_as(program: &str) {
    let started = Instant::now();
    let server = TlsServer::start();

    let bouncer = Pgbouncer::start_program(program, free_port(), &server.databases(), &server.settings(), &server.userlist());
    let bouncer_seen = seen(&server, &At::socket(bouncer.socket_dir(), bouncer.port), bouncer.port).await;
    drop(bouncer);
    wait_for_no_backends_on(&server).await;

    let dir = std::env::temp_dir().join(format!("pglane-parity-tls-{}", std::process::id()));
    let lane = start_pglane_from(&server, &dir);
    let lane_seen = seen(&server, &At::socket(&dir, lane.port), lane.port).await;
    compare(&bouncer_seen, &lane_seen);
    drop(lane);
    let _ = std::fs::remove_dir_all(&dir);
    eprintln!("took {:?}", started.elapsed());
}

/// The rows of PgBouncer's own admin database, `pgbouncer`, which
/// PgBouncer lists in SHOW DATABASES, POOLS and USERS as if it were one of
/// the ini's: pglane's console is no database of the ini, and it lists the
/// ini's only.
fn admin_row(key: &[String]) -> bool {
    key.first().is_some_and(|name| name == "pgbouncer")
}

fn number(value: &Option<String>) -> i64 {
    value.as_deref().unwrap_or("0").parse().unwrap_or_else(|_| panic!("not a number: {value:?}"))
}

/// Whether pglane's count of server connections to `database` left open
/// is like PgBouncer's. For app, which the load ran on, anything from one
/// to its max_db_connections (3) in each: under that limit each pooler
/// closes an idle connection of one user's pool for another's and opens
/// one, and when the load ends that may or may not have happened. For the
/// others, PgBouncer's count, or more by at most one per pool and shard:
/// PgBouncer's pool hands its one idle connection to the next client,
/// where pglane's pool on the other of its two shards opens one of its own
/// (within pool_size, exact over all shards; docs/migrating-from-pgbouncer.md
/// says so). Sequential logins of one user leave one connection in
/// PgBouncer, one or two in pglane.
fn open_alike(database: &str, lane: i64, bouncer: i64) -> bool {
    if database == "app" {
        return (1..=3).contains(&lane) && (1..=3).contains(&bouncer);
    }
    (bouncer..=2 * bouncer).contains(&lane)
}

/// What PgBouncer did against what pglane did, key by key.
fn compare(bouncer: &Seen, lane: &Seen) {
    // The same logins succeed, as the same user in the same database, over
    // TLS to the server; the same fail.
    let outcome = |logins: &[(String, Answer)]| {
        logins.iter().map(|(what, a)| (what.clone(), a.clone().map_err(|_| ()))).collect::<Vec<_>>()
    };
    assert_eq!(outcome(&lane.logins), outcome(&bouncer.logins), "logins: pglane (left) and PgBouncer (right)");
    assert!(lane.logins.iter().filter_map(|(_, a)| a.as_ref().ok()).all(|(_, _, ssl)| *ssl), "server TLS: {:?}", lane.logins);
    // pglane answers a failed login with PostgreSQL's SQLSTATE: 28P01 for
    // a password (or a user) it cannot check, 28000 for a client without
    // the TLS client_tls_sslmode = require asks for. PgBouncer 1.18 says
    // 08P01 for every one (later PgBouncers say 28P01 too).
    for ((what, lane_answer), (_, bouncer_answer)) in lane.logins.iter().zip(&bouncer.logins) {
        let (Err(lane_code), Err(bouncer_code)) = (lane_answer, bouncer_answer) else { continue };
        let expected = if what.starts_with("tcp without TLS") { "28000" } else { "28P01" };
        assert_eq!(lane_code, expected, "{what}");
        assert!(bouncer_code == "08P01" || bouncer_code == lane_code, "{what}: PgBouncer says {bouncer_code}");
    }

    // Over TCP, with TLS: libpq's \conninfo says the client connection is
    // TLS, pg_stat_ssl that the server connection is; without: refused alike.
    let tls_outcome = |logins: &[(String, Result<(bool, String), String>)]| {
        logins.iter().map(|(what, a)| (what.clone(), a.clone().map_err(|_| ()))).collect::<Vec<_>>()
    };
    assert_eq!(tls_outcome(&lane.tls_logins), tls_outcome(&bouncer.tls_logins), "TLS logins: pglane (left), PgBouncer (right)");
    assert!(lane
        .tls_logins
        .iter()
        .filter_map(|(_, a)| a.as_ref().ok())
        .all(|(client_tls, who)| *client_tls && who.ends_with("|t")));
    for ((what, lane_answer), (_, bouncer_answer)) in lane.tls_logins.iter().zip(&bouncer.tls_logins) {
        let (Err(lane_error), Err(bouncer_error)) = (lane_answer, bouncer_answer) else { continue };
        if what.starts_with("sslmode=disable") {
            assert_eq!(lane_error, bouncer_error, "{what}");
            assert_eq!(lane_error, "FATAL:  SSL required");
        } else {
            // A wrong SCRAM password: pglane says what PostgreSQL says,
            // PgBouncer 1.18 "SASL authentication failed".
            assert_eq!(lane_error, "FATAL:  password authentication failed for user \"aq_user\"", "{what}");
            assert!(bouncer_error == lane_error || bouncer_error == "FATAL:  SASL authentication failed", "{bouncer_error}");
        }
    }

    // Both spread app's connections over its two hosts (round-robin, the
    // default with a host list), and keep to the same limits: app's
    // max_db_connections = 3 under load, and authq's two connections
    // (aq_user's, and auth_user's for the lookup) left idle beside them.
    assert_eq!(lane.hosts, bouncer.hosts, "the hosts of two clients at once: pglane (left), PgBouncer (right)");
    assert_eq!(lane.hosts, ["127.0.0.1", "127.0.0.2"]);
    assert_eq!(lane.most, 3 + 2, "the most server connections to {TLS_DB} at once");
    assert!(within_a_closing_backend(bouncer.most, 3 + 2), "PgBouncer's most server connections at once: {}", bouncer.most);

    let console = |seen: &Seen, command: &str| seen.console.iter().find(|(c, _)| *c == command).map(|(_, t)| t.clone()).unwrap();
    for (command, key) in [("SHOW DATABASES", &["name"][..]), ("SHOW POOLS", &["database", "user"]), ("SHOW USERS", &["name"])] {
        let (bouncer_table, lane_table) = (console(bouncer, command), console(lane, command));
        if let Err(missing) = in_order(&bouncer_table.0, &lane_table.0) {
            panic!("{command}: PgBouncer's column {missing} is not in pglane's, in its order");
        }
        let mut bouncer_rows = by_name(&bouncer_table, key);
        let mut lane_rows = by_name(&lane_table, key);
        let admin: Vec<_> = bouncer_rows.keys().filter(|k| admin_row(k)).cloned().collect();
        assert_eq!(admin.len(), 1, "{command}: PgBouncer's own pgbouncer row");
        bouncer_rows.retain(|k, _| !admin_row(k));
        // aq_user, whom auth_query found, is a user of its own in PgBouncer
        // 1.24's SHOW USERS and in pglane's; 1.18 does not list it.
        let found = vec!["aq_user".to_owned()];
        if command == "SHOW USERS" && !bouncer_rows.contains_key(&found) {
            assert!(lane_rows.remove(&found).is_some(), "SHOW USERS: pglane does not list aq_user");
        }
        // The same rows: the `*` entry's database made for parity_star
        // among them, and not the `*` entry itself.
        assert_eq!(lane_rows.keys().collect::<Vec<_>>(), bouncer_rows.keys().collect::<Vec<_>>(), "{command}: pglane, PgBouncer");
        for (k, bouncer_row) in &bouncer_rows {
            let lane_row = &lane_rows[k];
            for (column, bouncer_value) in bouncer_row {
                // Which of app's users holds its connections when the load
                // ends is a matter of timing, in each; the sums per
                // database are compared below.
                if command == "SHOW POOLS" && column.starts_with("sv_") {
                    continue;
                }
                if command == "SHOW USERS" && column == "current_connections" {
                    // A user's over all its databases, app's among them,
                    // where which user's pool keeps the connections is a
                    // matter of timing (up to 3 each: see open_alike).
                    let (lane_open, bouncer_open) = (number(&lane_row[column]), number(bouncer_value));
                    assert!(
                        (bouncer_open - 3..=2 * bouncer_open + 3).contains(&lane_open),
                        "{command} {k:?} {column}: pglane {lane_open}, PgBouncer {bouncer_open}"
                    );
                    continue;
                }
                if column == "current_connections" {
                    let (lane_open, bouncer_open) = (number(&lane_row[column]), number(bouncer_value));
                    assert!(
                        open_alike(&k[0], lane_open, bouncer_open),
                        "{command} {k:?} {column}: pglane {lane_open}, PgBouncer {bouncer_open}"
                    );
                    continue;
                }
                assert_eq!(&lane_row[column], bouncer_value, "{command} {k:?} {column}: pglane, PgBouncer");
            }
        }
        if command == "SHOW POOLS" {
            let servers = |rows: &BTreeMap<Vec<String>, BTreeMap<String, Option<String>>>| {
                let mut per_database = BTreeMap::<String, i64>::new();
                for (k, row) in rows {
                    let open: i64 =
                        ["sv_active", "sv_idle", "sv_used", "sv_tested", "sv_login"].iter().map(|c| number(&row[*c])).sum();
                    *per_database.entry(k[0].clone()).or_default() += open;
                }
                per_database
            };
            let (lane_servers, bouncer_servers) = (servers(&lane_rows), servers(&bouncer_rows));
            assert_eq!(lane_servers.keys().collect::<Vec<_>>(), bouncer_servers.keys().collect::<Vec<_>>());
            for (database, open) in &lane_servers {
                let theirs = bouncer_servers[database];
                assert!(
                    open_alike(database, *open, theirs),
                    "server connections of {database}: pglane {open}, PgBouncer {theirs}"
                );
            }
        }
    }
    // SHOW SERVERS: each server connection, to the same databases, is TLS
    // (its tls column names the protocol; each pooler spells the cipher
    // as its TLS library does).
    let servers = |seen: &Seen| {
        let (columns, rows) = console(seen, "SHOW SERVERS");
        let at = |name: &str| columns.iter().position(|c| c == name).unwrap_or_else(|| panic!("no {name} in {columns:?}"));
        let (database, tls) = (at("database"), at("tls"));
        let mut seen = std::collections::BTreeSet::new();
        for row in &rows {
            let protocol = row[tls].as_deref().unwrap_or("");
            assert!(protocol.starts_with("TLSv1."), "a server connection without TLS: {row:?}");
            seen.insert(row[database].clone().unwrap_or_default());
        }
        seen
    };
    assert_eq!(servers(lane), servers(bouncer), "SHOW SERVERS' databases: pglane, PgBouncer");
    assert_eq!(servers(lane).into_iter().collect::<Vec<_>>(), ["app", "authq", STAR_DB]);

    let databases = by_name(&console(lane, "SHOW DATABASES"), &["name"]);
    assert!(databases.contains_key(&vec![STAR_DB.to_owned()]), "the `*` entry's {STAR_DB}: {databases:?}");

    // SHOW CLIENTS lists the console alone (see `console_when_quiet`),
    // which came over the unix socket: `active`, at `unix` and the port
    // each listens on, its remote_pid this process's (a TCP client's is 0).
    let own_row = |seen: &Seen| {
        let (columns, rows) = console(seen, "SHOW CLIENTS");
        assert_eq!(rows.len(), 1, "{rows:?}");
        let value = |name: &str| {
            let value = rows[0][columns.iter().position(|c| c == name).unwrap()].clone().unwrap_or_default();
            if value == seen.port.to_string() {
                "its port".to_owned()
            } else {
                value
            }
        };
        ["type", "user", "database", "state", "addr", "port", "local_addr", "local_port", "remote_pid"].map(value)
    };
    assert_eq!(own_row(lane), own_row(bouncer), "the console's row in SHOW CLIENTS: pglane, PgBouncer");
    assert_eq!(own_row(lane)[8], std::process::id().to_string());
}
