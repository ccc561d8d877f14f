//! `pglane --pgbouncer-ini`: real clients log in through pglane run from a
//! pgbouncer.ini and its userlist.txt, with plaintext, md5 and SCRAM secrets
//! copied from the test PostgreSQL's pg_authid, as operators do.

mod common;

use std::fs;
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{connect, free_port, postgres, try_connect, Pglane};

/// A fresh directory for one test's ini files, removed when dropped.
struct Dir(PathBuf);

impl Dir {
    fn new(name: &str) -> Dir {
        let dir = std::env::temp_dir().join(format!("pglane-ini-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).expect("create test dir");
        Dir(dir)
    }

    fn write(&self, name: &str, text: &str) -> PathBuf {
        let path = self.0.join(name);
        fs::write(&path, text).expect("write test file");
        path
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// The secret PostgreSQL keeps for `role`.
fn rolpassword(role: &str) -> String {
    postgres().psql(&format!("SELECT rolpassword FROM pg_authid WHERE rolname = '{role}'"))
}

/// The warning pglane logs for line 13 of [`ini_text`]'s file, which it
/// reads differently from PgBouncer (PgBouncer pools per statement).
const READ_DIFFERENTLY: &str = "13: pool_mode: statement pooling is not supported";

/// A pgbouncer.ini in front of the test PostgreSQL; `extra` goes into [pgbouncer].
fn ini_text(auth_type: &str, listen_port: u16, extra: &str) -> String {
    format!(
        "; written by tests/pgbouncer_ini.rs
[databases]
app = host=127.0.0.1 port={port} dbname=postgres pool_size=2
; Clients of scram_app share the server login of scramuser.
scram_app = host=127.0.0.1 port={port} dbname=postgres user=scramuser password=scrampass

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {listen_port}
auth_type = {auth_type}
auth_file = userlist.txt
pool_mode = transaction
pool_mode = statement
{extra}
",
        port = postgres().port
    )
}

async fn current_user(port: u16, user: &str, password: &str, db: &str) -> String {
    let client = connect(port, user, password, db).await;
    client.query_one("SELECT current_user::text", &[]).await.expect("query").get(0)
}

#[tokio::test]
async fn plaintext_and_md5_users_log_in_through_an_imported_ini() {
    let dir = Dir::new("md5");
    let md5 = rolpassword("md5user");
    assert!(md5.starts_with("md5"), "{md5}");
    let scram = rolpassword("scramuser");
    dir.write("userlist.txt", &format!("\"postgres\" \"secret\"\n\"md5user\" \"{md5}\"\n\"scramuser\" \"{scram}\"\n"));
    let ini = dir.write("pgbouncer.ini", &ini_text("md5", 6432, ""));
    // The harness's TOML, laid over the ini, only moves `listen` to a free port.
    let lane = Pglane::start_with_args("", &["--pgbouncer-ini", ini.to_str().unwrap(), "--cores", "1"]);

    assert_eq!(current_user(lane.port, "postgres", "secret", "app").await, "postgres");
    // pglane checks md5user's md5 response, then logs in to the md5 server with the secret.
    assert_eq!(current_user(lane.port, "md5user", "md5pass", "app").await, "md5user");
    let wrong = try_connect(lane.port, "md5user", "nope", "app").await.expect_err("a wrong password fails");
    assert_eq!(wrong.as_db_error().map(|e| e.code().code()), Some("28P01"), "{wrong}");
    // Under md5, a user with a SCRAM secret is checked with SCRAM (as by
    // PgBouncer); the server login then uses scram_app's user= and password=.
    assert_eq!(current_user(lane.port, "scramuser", "scrampass", "scram_app").await, "scramuser");
    let wrong = try_connect(lane.port, "scramuser", "nope", "scram_app").await.expect_err("a wrong password fails");
    assert_eq!(wrong.as_db_error().map(|e| e.code().code()), Some("28P01"), "{wrong}");
    // What pglane reads differently is in the log, with file and line.
    lane.wait_for_log(&format!("{}:{READ_DIFFERENTLY}", ini.display()), Duration::from_secs(5));
}

#[tokio::test]
async fn scram_users_log_in_through_an_imported_ini() {
    let dir = Dir::new("scram");
    let scram = rolpassword("scramuser");
    assert!(scram.starts_with("SCRAM-SHA-256$"), "{scram}");
    dir.write("userlist.txt", &format!("; from pg_authid\n\"postgres\" \"secret\"\n\"scramuser\" \"{scram}\"\n"));
    let ini = dir.write("pgbouncer.ini", &ini_text("scram-sha-256", 6432, ""));
    let lane = Pglane::start_with_args("", &["--pgbouncer-ini", ini.to_str().unwrap(), "--cores", "1"]);

    assert_eq!(current_user(lane.port, "postgres", "secret", "app").await, "postgres");
    // The client proves scrampass against the SCRAM secret; the server login uses
    // the database's user= and password=.
    assert_eq!(current_user(lane.port, "scramuser", "scrampass", "scram_app").await, "scramuser");
    assert!(try_connect(lane.port, "scramuser", "wrong", "scram_app").await.is_err());
    // In a database without user= and password=, pglane logs in to the SCRAM
    // server as scramuser with the ClientKey the client's proof revealed, as
    // PgBouncer does: the userlist's verifier alone answers no server.
    for _ in 0..2 {
        assert_eq!(current_user(lane.port, "scramuser", "scrampass", "app").await, "scramuser");
    }
    let wrong = try_connect(lane.port, "scramuser", "wrong", "app").await.expect_err("a wrong password fails");
    assert_eq!(wrong.as_db_error().map(|e| e.code().code()), Some("28P01"), "{wrong}");
    // Not in the userlist: refused.
    assert!(try_connect(lane.port, "md5user", "md5pass", "app").await.is_err());
}

/// `auth_type = hba` with an auth_hba_file, and auth_user + auth_query for the
/// users the userlist does not hold, as a PgBouncer setup has them.
#[tokio::test]
async fn hba_rules_and_auth_query_carry_over_from_an_ini() {
    let dir = Dir::new("hba");
    dir.write("userlist.txt", "\"postgres\" \"secret\"\n");
    dir.write(
        "pgb_hba.conf",
        "host app      scramuser  127.0.0.1/32  reject\n\
         host app      all        127.0.0.1/32  md5\n",
    );
    let extra = "auth_hba_file = pgb_hba.conf\nauth_user = postgres\n\
                 auth_query = SELECT usename, passwd FROM pg_shadow WHERE usename=$1\n";
    let ini = dir.write("pgbouncer.ini", &ini_text("hba", 6432, extra));
    let lane = Pglane::start_with_args("", &["--pgbouncer-ini", ini.to_str().unwrap(), "--cores", "1"]);

    // md5user is not in the userlist: its md5 hash comes from pg_shadow.
    assert_eq!(current_user(lane.port, "md5user", "md5pass", "app").await, "md5user");
    let wrong = try_connect(lane.port, "md5user", "nope", "app").await.expect_err("a wrong password fails");
    assert_eq!(wrong.as_db_error().map(|e| e.code().code()), Some("28P01"), "{wrong}");
    // The hba file rejects scramuser in app, and covers no other database.
    let rejected = try_connect(lane.port, "scramuser", "scrampass", "app").await.expect_err("rejected");
    let e = rejected.as_db_error().expect("an ErrorResponse");
    assert_eq!(
        (e.code().code(), e.message()),
        ("28000", "pg_hba.conf rejects connection for host \"127.0.0.1\", user \"scramuser\", database \"app\", no encryption")
    );
    let uncovered = try_connect(lane.port, "postgres", "secret", "scram_app").await.expect_err("no line");
    assert!(uncovered.as_db_error().is_some_and(|e| e.message().starts_with("no pg_hba.conf entry")), "{uncovered:?}");
}

/// The value SHOW CONFIG gives for `key`.
async fn show_config(client: &tokio_postgres::Client, key: &str) -> Option<String> {
    let rows = client.simple_query("SHOW CONFIG").await.expect("SHOW CONFIG");
    rows.iter().find_map(|message| match message {
        tokio_postgres::SimpleQueryMessage::Row(row) if row.get(0) == Some(key) => row.get(1).map(str::to_owned),
        _ => None,
    })
}

/// PgBouncer's TCP settings are set on pglane's sockets (the options
/// themselves are `net`'s unit test): pglane starts with them, serves, and
/// SHOW CONFIG says what it runs with.
#[tokio::test]
async fn tcp_settings_from_an_ini_are_honoured() {
    let dir = Dir::new("tcp");
    dir.write("userlist.txt", "\"postgres\" \"secret\"\n");
    let extra = "admin_users = postgres\ntcp_keepalive = 1\ntcp_keepidle = 30\ntcp_keepintvl = 5\ntcp_keepcnt = 3\n\
                 tcp_user_timeout = 20000\ntcp_socket_buffer = 262144\nlisten_backlog = 64\ntcp_defer_accept = 1\n";
    let ini = dir.write("pgbouncer.ini", &ini_text("md5", 6432, extra));
    let lane = Pglane::start_with_args("", &["--pgbouncer-ini", ini.to_str().unwrap(), "--cores", "1"]);
    assert_eq!(current_user(lane.port, "postgres", "secret", "app").await, "postgres");
    let console = connect(lane.port, "postgres", "secret", "pgbouncer").await;
    for (key, value) in [
        ("tcp_keepalive", "1"),
        ("tcp_keepidle", "30"),
        ("tcp_keepintvl", "5"),
        ("tcp_keepcnt", "3"),
        ("tcp_user_timeout", "20000"),
        ("tcp_socket_buffer", "262144"),
        ("listen_backlog", "64"),
        ("tcp_defer_accept", "1"),
    ] {
        assert_eq!(show_config(&console, key).await.as_deref(), Some(value), "{key}");
    }
}

/// log_connections and log_disconnections off: no line for a client that
/// comes and goes; log_pooler_errors on: a refused login still has its line;
/// log_stats on, a stats line every stats_period.
#[tokio::test]
async fn log_connections_off_leaves_logins_out_of_the_log() {
    /// Waits for `needle` in the log, letting the runtime close the
    /// clients dropped meanwhile (their connection tasks run on it).
    async fn logged(lane: &Pglane, needle: &str) -> String {
        for _ in 0..100 {
            let log = lane.log();
            if log.contains(needle) {
                return log;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("no {needle:?} in the log: {}", lane.log());
    }
    let dir = Dir::new("logs");
    dir.write("userlist.txt", "\"postgres\" \"secret\"\n");
    let ini = dir.write(
        "pgbouncer.ini",
        &ini_text("md5", 6432, "log_connections = 0\nlog_disconnections = 0\nlog_stats = 0\nstats_period = 1"),
    );
    let lane = Pglane::start_with_args("", &["--pgbouncer-ini", ini.to_str().unwrap(), "--cores", "1"]);
    assert_eq!(current_user(lane.port, "postgres", "secret", "app").await, "postgres");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(try_connect(lane.port, "postgres", "wrong", "app").await.is_err());
    // The refusal comes after the first client's logout: once it is in the
    // log, a line for that client would be too.
    let log = logged(&lane, "login failed").await;
    assert!(!log.contains("client logged in") && !log.contains("client closed the connection"), "{log}");
    tokio::time::sleep(Duration::from_millis(1200)).await;
    assert!(!lane.log().contains("stats: "), "log_stats = 0: {}", lane.log());
    drop(lane);

    // On (PgBouncer's default): both lines.
    let ini = dir.write("on.ini", &ini_text("md5", 6432, "stats_period = 1"));
    let lane = Pglane::start_with_args("", &["--pgbouncer-ini", ini.to_str().unwrap(), "--cores", "1"]);
    assert_eq!(current_user(lane.port, "postgres", "secret", "app").await, "postgres");
    logged(&lane, "client logged in").await;
    logged(&lane, "client closed the connection").await;
    // log_stats, every stats_period (1 s here): PgBouncer's line.
    let log = logged(&lane, " xacts/s, ").await;
    assert!(log.contains(" queries/s, in ") && log.contains(" us, wait "), "{log}");
}

/// max_user_client_connections and a database's max_db_client_connections:
/// over all shards, the client past the limit gets PgBouncer's error, and
/// one that leaves makes room.
#[tokio::test]
async fn client_limits_per_user_and_database_refuse_the_next_client() {
    let dir = Dir::new("client-limits");
    dir.write("userlist.txt", &format!("\"postgres\" \"secret\"\n\"md5user\" \"{}\"\n", rolpassword("md5user")));
    let text = ini_text("md5", 6432, "max_user_client_connections = 2").replace(
        "scram_app = host",
        &format!(
            "limited = host=127.0.0.1 port={} dbname=postgres max_db_client_connections=1\nscram_app = host",
            postgres().port
        ),
    );
    let ini = dir.write("pgbouncer.ini", &text);
    let lane = Pglane::start_with_args("", &["--pgbouncer-ini", ini.to_str().unwrap(), "--cores", "2"]);
    let refused = |e: tokio_postgres::Error, limit: &str| {
        let e = e.as_db_error().cloned().unwrap_or_else(|| panic!("an ErrorResponse: {e}"));
        assert_eq!((e.code().code(), e.message()), ("08P01", format!("client connections exceeded ({limit})").as_str()));
    };
    let first = connect(lane.port, "postgres", "secret", "app").await;
    let second = connect(lane.port, "postgres", "secret", "app").await;
    refused(try_connect(lane.port, "postgres", "secret", "app").await.expect_err("a third"), "max_user_client_connections");
    // Another user is not counted against postgres's limit.
    let other = connect(lane.port, "md5user", "md5pass", "app").await;
    first.simple_query("SELECT 1").await.unwrap();
    drop(first);
    // Its connection task runs on this runtime: give it time to say goodbye.
    let mut third = None;
    for _ in 0..50 {
        tokio::time::sleep(Duration::from_millis(50)).await;
        if let Ok(client) = try_connect(lane.port, "postgres", "secret", "app").await {
            third = Some(client);
            break;
        }
    }
    third.expect("room after a client left").simple_query("SELECT 1").await.unwrap();
    second.simple_query("SELECT 1").await.unwrap();
    // The database's own limit: one client, whoever it is.
    let _limited = connect(lane.port, "md5user", "md5pass", "limited").await;
    drop(other);
    refused(try_connect(lane.port, "md5user", "md5pass", "limited").await.expect_err("a second"), "max_db_client_connections");
}

/// query_wait_notify: a client waiting that long for a server connection
/// gets PgBouncer's NOTICE, and its query then runs as usual.
#[tokio::test]
async fn a_client_waiting_for_a_server_connection_is_told_so() {
    use futures_util::StreamExt;
    let dir = Dir::new("wait-notify");
    dir.write("userlist.txt", "\"postgres\" \"secret\"\n");
    let text = ini_text("md5", 6432, "query_wait_notify = 1").replace(
        "scram_app = host",
        &format!("tiny = host=127.0.0.1 port={} dbname=postgres pool_size=1\nscram_app = host", postgres().port),
    );
    let ini = dir.write("pgbouncer.ini", &text);
    let lane = Pglane::start_with_args("", &["--pgbouncer-ini", ini.to_str().unwrap(), "--cores", "1"]);
    let holder = connect(lane.port, "postgres", "secret", "tiny").await;
    holder.simple_query("BEGIN").await.unwrap();

    let mut config = tokio_postgres::Config::new();
    config.host("127.0.0.1").port(lane.port).user("postgres").password("secret").dbname("tiny");
    let (waiter, mut connection) = config.connect(tokio_postgres::NoTls).await.expect("connect");
    let (notices, mut noticed) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut messages = futures_util::stream::poll_fn(move |cx| connection.poll_message(cx));
        while let Some(Ok(message)) = messages.next().await {
            if let tokio_postgres::AsyncMessage::Notice(notice) = message {
                let _ = notices.send(format!("{} {} {}", notice.severity(), notice.code().code(), notice.message()));
            }
        }
    });
    let query = tokio::spawn(async move { waiter.simple_query("SELECT 1").await.map(|_| ()) });
    let notice = tokio::time::timeout(Duration::from_secs(5), noticed.recv()).await.expect("a notice within 5 s");
    assert_eq!(notice.as_deref(), Some("NOTICE 00000 No server connection available in postgres backend, client being queued"));
    assert!(!query.is_finished(), "still waiting");
    holder.simple_query("COMMIT").await.unwrap();
    query.await.unwrap().expect("the query runs once the connection is free");
    assert!(noticed.try_recv().is_err(), "told once");
}

/// A database's timezone= is each client's TimeZone unless the client sets
/// its own, as PgBouncer sets it on the server connection.
#[tokio::test]
async fn a_databases_timezone_is_its_clients_default() {
    let dir = Dir::new("timezone");
    dir.write("userlist.txt", "\"postgres\" \"secret\"\n");
    let text = ini_text("md5", 6432, "").replace(
        "scram_app = host",
        &format!("zoned = host=127.0.0.1 port={} dbname=postgres timezone=Asia/Tokyo\nscram_app = host", postgres().port),
    );
    let ini = dir.write("pgbouncer.ini", &text);
    let lane = Pglane::start_with_args("", &["--pgbouncer-ini", ini.to_str().unwrap(), "--cores", "1"]);
    let show = |client: tokio_postgres::Client| async move {
        client.query_one("SHOW TimeZone", &[]).await.expect("SHOW").get::<_, String>(0)
    };
    assert_eq!(show(connect(lane.port, "postgres", "secret", "zoned").await).await, "Asia/Tokyo");
    let own = common::try_connect_with_options(lane.port, "postgres", "secret", "zoned", Some("-c TimeZone=Europe/Paris"))
        .await
        .expect("connect");
    assert_eq!(show(own).await, "Europe/Paris", "the client's own wins");
    assert_ne!(show(connect(lane.port, "postgres", "secret", "app").await).await, "Asia/Tokyo", "other databases");
}

/// A pglane child run with nothing but `--pgbouncer-ini`, killed when dropped.
struct Alone {
    child: Child,
    log: PathBuf,
}

impl Alone {
    fn start(ini: &Path, log: PathBuf, port: u16) -> Alone {
        let log_file = fs::File::create(&log).expect("create log");
        // PgBouncer's own command line: the ini as the one argument.
        let child = Command::new(common::pglane_bin())
            .arg(ini)
            .args(["--cores", "1"])
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(log_file.try_clone().expect("clone log fd"))
            .stderr(log_file)
            .spawn()
            .expect("spawn pglane");
        let mut alone = Alone { child, log };
        let deadline = Instant::now() + Duration::from_secs(15);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            let exited = alone.child.try_wait().ok().flatten();
            assert!(exited.is_none() && Instant::now() < deadline, "pglane did not listen ({exited:?}):\n{}", alone.log());
            std::thread::sleep(Duration::from_millis(20));
        }
        alone
    }

    fn log(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Alone {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test]
async fn the_ini_alone_is_enough() {
    let dir = Dir::new("alone");
    dir.write("userlist.txt", "\"postgres\" \"secret\"\n");
    let port = free_port();
    let ini = dir.write("pgbouncer.ini", &ini_text("md5", port, ""));
    let lane = Alone::start(&ini, dir.0.join("pglane.log"), port);
    assert_eq!(current_user(port, "postgres", "secret", "app").await, "postgres");
    assert!(lane.log().contains(READ_DIFFERENTLY), "{}", lane.log());
}

/// Every address of `listen_addr` is listened on, as by PgBouncer.
#[tokio::test]
async fn every_listen_addr_is_listened_on() {
    let dir = Dir::new("addresses");
    dir.write("userlist.txt", "\"postgres\" \"secret\"\n");
    let port = free_port();
    let ini = ini_text("md5", port, "").replace("listen_addr = 127.0.0.1\n", "listen_addr = 127.0.0.1, 127.0.0.2\n");
    let ini = dir.write("pgbouncer.ini", &ini);
    let _lane = Alone::start(&ini, dir.0.join("pglane.log"), port);
    for host in ["127.0.0.1", "127.0.0.2"] {
        let (client, connection) = tokio_postgres::connect(
            &format!("host={host} port={port} user=postgres password=secret dbname=app"),
            tokio_postgres::NoTls,
        )
        .await
        .unwrap_or_else(|e| panic!("connect to {host}:{port}: {e}"));
        tokio::spawn(connection);
        let row = client.query_one("SELECT 1", &[]).await.expect("query");
        assert_eq!(row.get::<_, i32>(0), 1, "through {host}");
    }
}

/// PgBouncer's logfile and pidfile: the pidfile names the running pglane
/// and stops a second one, the logfile gets the log and is opened again
/// on SIGHUP (logrotate), and the pidfile goes at exit.
#[tokio::test]
async fn logfile_and_pidfile_as_pgbouncer_keeps_them() {
    let dir = Dir::new("files");
    dir.write("userlist.txt", "\"postgres\" \"secret\"\n");
    let port = free_port();
    let ini = dir.write("pgbouncer.ini", &ini_text("md5", port, "logfile = pglane.log\npidfile = pglane.pid"));
    let (logfile, pidfile) = (dir.0.join("pglane.log"), dir.0.join("pglane.pid"));
    let mut lane = Alone::start(&ini, dir.0.join("stderr.log"), port);
    let pid = lane.child.id();
    assert_eq!(fs::read_to_string(&pidfile).unwrap(), format!("{pid}\n"));
    assert_eq!(current_user(port, "postgres", "secret", "app").await, "postgres");
    let logged = fs::read_to_string(&logfile).unwrap();
    assert!(logged.contains("starting") && logged.contains(READ_DIFFERENTLY), "{logged}");

    // A second pglane with the same pidfile does not start.
    let second = Command::new(common::pglane_bin()).arg(&ini).output().unwrap();
    assert_eq!(second.status.code(), Some(1), "{second:?}");
    assert!(text(&second.stderr).contains(&format!("names process {pid}, which is running")), "{second:?}");

    // logrotate: the file is moved, SIGHUP, and lines go to a new one.
    fs::rename(&logfile, dir.0.join("pglane.log.1")).unwrap();
    unsafe { libc::kill(pid as i32, libc::SIGHUP) };
    let deadline = Instant::now() + Duration::from_secs(10);
    while !fs::read_to_string(&logfile).unwrap_or_default().contains("config reloaded") {
        assert!(Instant::now() < deadline, "no new logfile after SIGHUP: {}", lane.log());
        std::thread::sleep(Duration::from_millis(20));
    }
    // The ini's warnings were logged at start, not again at the reload.
    let reloaded = fs::read_to_string(&logfile).unwrap();
    assert!(!reloaded.contains(READ_DIFFERENTLY), "{reloaded}");

    unsafe { libc::kill(pid as i32, libc::SIGTERM) };
    let status = lane.child.wait().unwrap();
    assert!(status.success(), "{status:?}");
    assert!(!pidfile.exists(), "the pidfile outlived pglane");
}

fn check(args: &[&Path]) -> Output {
    let mut command = Command::new(common::pglane_bin());
    command.arg("--check");
    for pair in args.chunks(2) {
        command.arg(pair[0]).arg(pair[1]);
    }
    command.output().expect("run pglane --check")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn check_validates_an_ini_and_prints_its_warnings() {
    let dir = Dir::new("check");
    dir.write("userlist.txt", &format!("\"postgres\" \"secret\"\n\"md5user\" \"{}\"\n", rolpassword("md5user")));
    let ini = dir.write("pgbouncer.ini", &ini_text("md5", 6432, "syslog = 0\npkt_buf = 8192"));
    let flag = Path::new("--pgbouncer-ini");
    let out = check(&[flag, &ini]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(text(&out.stdout), format!("{}: ok\n", ini.display()));
    let stderr = text(&out.stderr);
    assert!(stderr.contains(&format!("warning: {}:{READ_DIFFERENTLY}", ini.display())), "{stderr}");
    // What pglane already does is accepted without a word.
    assert!(!stderr.contains("syslog") && !stderr.contains("pkt_buf"), "{stderr}");

    // PgBouncer's command line: the ini alone, as its argument.
    let out = Command::new(common::pglane_bin()).arg("--check").arg(&ini).output().unwrap();
    assert!(out.status.success(), "{out:?}");
    assert_eq!(text(&out.stdout), format!("{}: ok\n", ini.display()));
    // PgBouncer's -d, -R and -u are refused with the reason.
    for flag in ["-d", "-R", "-u"] {
        let mut command = Command::new(common::pglane_bin());
        command.arg(flag);
        if flag == "-u" {
            command.arg("nobody");
        }
        let out = command.arg(&ini).output().unwrap();
        assert_eq!(out.status.code(), Some(1), "{flag}: {out:?}");
        assert!(text(&out.stderr).starts_with(&format!("pglane: {flag} (")), "{flag}: {}", text(&out.stderr));
    }

    // With a TOML file too: both named, the TOML wins.
    let toml = dir.write("extra.toml", "listen = \"127.0.0.1:7777\"\n");
    let out = check(&[flag, &ini, Path::new("--config"), &toml]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(text(&out.stdout), format!("{} + {}: ok\n", ini.display(), toml.display()));

    // Mistakes: exit 1, with file and line.
    let bad = dir.write("bad.ini", &ini_text("cert", 6432, ""));
    let out = check(&[flag, &bad]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(text(&out.stderr).contains(&format!("{}:10: auth_type = cert is not supported", bad.display())), "{out:?}");
    // A setting pglane cannot honour: refused, not ignored.
    let syslog = dir.write("syslog.ini", &ini_text("md5", 6432, "syslog = 1"));
    let out = check(&[flag, &syslog]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(text(&out.stderr).contains(&format!("{}:14: syslog = 1 is not supported: ", syslog.display())), "{out:?}");
    dir.write("userlist.txt", "\"postgres\" \"secret\"\nmd5user md5pass\n");
    let out = check(&[flag, &ini]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let userlist = dir.0.join("userlist.txt");
    assert!(text(&out.stderr).contains(&format!("{}:2: expected \"user\" \"password\"", userlist.display())), "{out:?}");
    let out = check(&[flag, &dir.0.join("missing.ini")]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(text(&out.stderr).contains("cannot read"), "{out:?}");
}

#[test]
fn the_shipped_example_checks() {
    let example = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/config/pgbouncer.ini"));
    let out = check(&[Path::new("--pgbouncer-ini"), example]);
    assert!(out.status.success(), "{out:?}");
    assert!(text(&out.stderr).contains("userlist.txt:") && text(&out.stderr).contains("user legacy: md5 secret"), "{out:?}");
}
