//! Restarting pglane without clients noticing: a rolling restart on one
//! port (`so_reuseport`) under `pgbench -S -C`, the check that only a pglane
//! may share the port, and the systemd notifications (`Type=notify`).
//!
//! What each shows:
//!
//! - a new pglane starts on the port the running one holds, SIGTERM hands
//!   the port over, and pgbench, connecting for each transaction, sees no
//!   failed transaction across two restarts (a SIGTERM without the hand-over
//!   would reset the connections in the old one's accept queue, and turn
//!   away those it had accepted but not yet logged in);
//! - without so_reuseport the port is refused, and with it a process that
//!   is not a pglane still is, named by pid;
//! - systemd hears READY=1 when pglane listens, RELOADING=1 and READY=1
//!   around a reload (with the reason when a reload is refused), STOPPING=1
//!   on SIGTERM.
//!
//! `pgbouncer_rolling_restart` (ignored: by hand with `--ignored
//! --nocapture`) runs PgBouncer 1.18 with its so_reuseport through the same
//! restart, for the comparison in docs/deploy.md.

mod common;
#[path = "common/raw.rs"]
mod raw;

use std::os::unix::net::UnixDatagram;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{free_port, postgres, Pgbouncer, Pglane};
use pglane::protocol::backend;
use raw::{error_code, first_column, query, RawClient};

const DB: &str = "rolling";

/// The pgbench database, once per test process.
fn pgbench_database() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        postgres().fresh_database(DB, Some("trustuser"));
        common::pgbench(postgres().port, "trustuser", &["-i", "-q", "-s", "1", DB]);
    });
}

/// pglane's config: so_reuseport, trusting its clients, logging in to the
/// server as trustuser.
fn config(settings: &str) -> String {
    format!(
        "pool_mode = \"transaction\"\nauth_type = \"trust\"\nso_reuseport = true\n{settings}\n\
         [databases.{DB}]\nhost = \"127.0.0.1\"\nport = {}\nuser = \"trustuser\"\npool_size = 4\n[users.trustuser]\n",
        postgres().port
    )
}

fn start_on(port: u16, settings: &str) -> Pglane {
    Pglane::try_start_on(port, &config(settings), &["--cores", "2"], &[]).unwrap_or_else(|(why, log)| panic!("{why}\n{log}"))
}

/// `pgbench -S -C` (a new connection for each transaction) on `port` for
/// `seconds`, in the background.
fn pgbench_connecting_each_time(port: u16, seconds: u32) -> Child {
    Command::new("pgbench")
        .args(["-n", "-S", "-C", "-c", "4", "-j", "2", "-T", &seconds.to_string(), "-h", "127.0.0.1", "-p", &port.to_string()])
        .args(["-U", "trustuser", DB])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("pgbench runs")
}

/// pgbench's output; with whether it exited successfully.
fn finish(pgbench: Child) -> (bool, String) {
    let out = pgbench.wait_with_output().unwrap();
    (out.status.success(), format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
}

/// The number after `label` in pgbench's report.
fn figure(report: &str, label: &str) -> Option<f64> {
    let line = report.lines().find(|l| l.starts_with(label))?;
    line[label.len()..].split_whitespace().next()?.parse().ok()
}

/// SIGTERM, and the time until the process has exited (bounded).
fn stop_and_time(mut lane: Pglane) -> Duration {
    let started = Instant::now();
    let status = lane.stop().expect("it was running");
    assert!(status.success(), "{status:?}\n{}", lane.log());
    started.elapsed()
}

#[test]
fn a_rolling_restart_under_pgbench_loses_no_transaction() {
    pgbench_database();
    let port = free_port();
    let first = start_on(port, "");
    let pgbench = pgbench_connecting_each_time(port, 15);
    std::thread::sleep(Duration::from_secs(4));
    // Restart 1: a second pglane joins the port, then the first leaves.
    let second = start_on(port, "");
    let first_logins = |log: &str| log.matches("client logged in").count();
    let logins_before = first_logins(&first.log());
    let took_first = stop_and_time(first);
    std::thread::sleep(Duration::from_secs(4));
    // Restart 2.
    let third = start_on(port, "");
    let second_logins = second.log().matches("client logged in").count();
    let took_second = stop_and_time(second);
    let (ok, report) = finish(pgbench);
    assert!(ok, "pgbench failed:\n{report}");
    assert_eq!(figure(&report, "number of failed transactions:"), Some(0.0), "{report}");
    assert!(!report.contains("aborted"), "{report}");
    let done = figure(&report, "number of transactions actually processed:").unwrap_or(0.0);
    assert!(done > 100.0, "{report}");
    // Each pglane served its share: the hand-over happened.
    let third_logins = third.log().matches("client logged in").count();
    assert!(logins_before > 0 && second_logins > 0 && third_logins > 0, "{logins_before} {second_logins} {third_logins}");
    eprintln!(
        "rolling restart under pgbench -S -C -c 4, 15 s, two restarts: {done} transactions, 0 failed; \
         the old pglanes exited {took_first:?} and {took_second:?} after SIGTERM; {}",
        report
            .lines()
            .filter(|l| l.starts_with("tps") || l.contains("latency average") || l.contains("connection time"))
            .collect::<Vec<_>>()
            .join("; ")
    );
}

#[test]
fn a_pglane_handing_its_port_over_serves_the_clients_it_accepted() {
    pgbench_database();
    let lane = Pglane::try_start_on(free_port(), &config("shutdown_timeout = 60"), &["--cores", "1"], &[])
        .unwrap_or_else(|(why, log)| panic!("{why}\n{log}"));
    let login = [("user", "trustuser"), ("database", DB)];
    let mut served = RawClient::login_with(lane.port, &login);
    assert_eq!(first_column(&query(&mut served, "select 1")), ["1"]);
    // Logged in, its first query not sent yet (on its way, say).
    let mut fresh = RawClient::login_with(lane.port, &login);
    // Accepted, its startup packet not sent yet.
    let mut late = RawClient::connect(lane.port);
    lane.wait_for_log("client logged in peer=Some(127.0.0.1:", Duration::from_secs(5));
    std::thread::sleep(Duration::from_millis(200)); // the late one is accepted
    lane.signal(libc::SIGTERM);
    lane.wait_for_log("no longer accepting connections", Duration::from_secs(10));
    // A client that had its transaction and sits idle is told at once.
    let told = served.recv();
    assert_eq!((told.tag, error_code(std::slice::from_ref(&told)).as_deref()), (backend::ERROR_RESPONSE, Some("57P01")));
    // The one that just logged in runs its first request, and is told after it.
    let answer = query(&mut fresh, "select 2");
    assert_eq!(first_column(&answer), ["2"], "{answer:?}");
    assert_eq!(error_code(&[fresh.recv()]).as_deref(), Some("57P01"));
    // The one accepted before the listener closed logs in, and is served.
    let login_answer = late.startup(&login);
    assert!(error_code(&login_answer).is_none(), "{login_answer:?}");
    assert_eq!(first_column(&query(&mut late, "select 3")), ["3"]);
    assert_eq!(error_code(&[late.recv()]).as_deref(), Some("57P01"));
}

#[test]
fn only_a_pglane_may_share_the_port() {
    pgbench_database();
    // Without so_reuseport, a second pglane on the port is refused.
    let port = free_port();
    let plain = config("").replace("so_reuseport = true", "so_reuseport = false");
    let first = Pglane::try_start_on(port, &plain, &["--cores", "1"], &[]).unwrap_or_else(|(why, log)| panic!("{why}\n{log}"));
    let (_, log) = Pglane::try_start_on(port, &plain, &["--cores", "1"], &[]).err().expect("a second pglane is refused");
    assert!(log.contains("in use by another process (another pglane? for a rolling restart, set so_reuseport)"), "{log}");
    drop(first);
    // With it, a program that is not a pglane, even one that set
    // SO_REUSEPORT as a pglane does (the kernel would let them share), is
    // still refused: this test process holds the port.
    let stranger = {
        let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
        socket.set_reuse_port(true).unwrap();
        socket.bind(&std::net::SocketAddr::from(([127, 0, 0, 1], port)).into()).unwrap();
        socket.listen(8).unwrap();
        socket
    };
    let (_, log) = Pglane::try_start_on(port, &config(""), &["--cores", "1"], &[]).err().expect("a stranger's port is refused");
    let me = format!("in use by pid {} (", std::process::id());
    assert!(log.contains(&me) && log.contains("which is not a pglane"), "{log}");
    drop(stranger);
}

/// Waits up to 10 s for the next datagram on `socket`.
fn next_notification(socket: &UnixDatagram) -> String {
    socket.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut buf = [0u8; 4096];
    let n = socket.recv(&mut buf).expect("a notification within 10 s");
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

#[test]
fn systemd_hears_ready_reloading_and_stopping() {
    pgbench_database();
    let dir = std::env::temp_dir().join(format!("pglane-notify-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("notify.sock");
    let _ = std::fs::remove_file(&path);
    let socket = UnixDatagram::bind(&path).unwrap();
    let env = [("NOTIFY_SOCKET", path.to_str().unwrap())];
    let mut lane =
        Pglane::try_start_on(free_port(), &config(""), &["--cores", "2"], &env).unwrap_or_else(|(w, l)| panic!("{w}\n{l}"));
    let ready = next_notification(&socket);
    assert!(ready.starts_with("READY=1\nSTATUS=serving on 127.0.0.1:"), "{ready:?}");
    // READY=1 comes once every shard listens: a client gets in.
    common::Psql::tcp(lane.port, "trustuser", "", DB).command("select 1").run().unwrap();

    lane.signal(libc::SIGHUP);
    let reloading = next_notification(&socket);
    assert!(reloading.starts_with("RELOADING=1\nMONOTONIC_USEC="), "{reloading:?}");
    assert!(reloading.rsplit('=').next().unwrap().parse::<u64>().is_ok(), "{reloading:?}");
    assert_eq!(next_notification(&socket), "READY=1\nSTATUS=serving; config reloaded");
    // A config that does not load: READY=1 with the reason; the old one stays.
    lane.write_config("pool_mode = \"nonsense\"\n");
    lane.signal(libc::SIGHUP);
    assert!(next_notification(&socket).starts_with("RELOADING=1"));
    let refused = next_notification(&socket);
    assert!(refused.starts_with("READY=1\nSTATUS=serving; config not reloaded, the old one stays: "), "{refused:?}");
    assert!(refused.contains("pool_mode"), "{refused:?}");
    common::Psql::tcp(lane.port, "trustuser", "", DB).command("select 1").run().unwrap();

    lane.signal(libc::SIGTERM);
    assert!(next_notification(&socket).starts_with("STOPPING=1"));
    let deadline = Instant::now() + Duration::from_secs(20);
    while lane.is_running() {
        assert!(Instant::now() < deadline, "pglane still runs 20 s after SIGTERM");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(lane.stop().unwrap().success(), "{}", lane.log());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
#[ignore = "a comparison, run by hand (--ignored --nocapture): the figures are in docs/deploy.md"]
fn pgbouncer_rolling_restart() {
    pgbench_database();
    let databases = format!("{DB} = host=127.0.0.1 port={} dbname={DB} user=trustuser", postgres().port);
    let settings = "pool_mode = transaction\ndefault_pool_size = 4\nso_reuseport = 1\nauth_type = trust";
    // PgBouncer 1.18: SIGINT is its safe shutdown (PAUSE, then SHUTDOWN),
    // SIGTERM its immediate one; 1.23 made SIGTERM wait for clients.
    for (name, signal) in [("SIGINT", libc::SIGINT), ("SIGTERM", libc::SIGTERM)] {
        let port = free_port();
        let mut first = Pgbouncer::start_on(port, &databases, settings);
        let pgbench = pgbench_connecting_each_time(port, 10);
        std::thread::sleep(Duration::from_secs(3));
        let second = Pgbouncer::start_on(port, &databases, settings);
        let signalled = Instant::now();
        first.signal(signal);
        let exited = first.wait_exit(Duration::from_secs(30));
        let took = signalled.elapsed();
        let (ok, report) = finish(pgbench);
        let failed = figure(&report, "number of failed transactions:");
        let done = figure(&report, "number of transactions actually processed:");
        let aborted = report.lines().filter(|l| l.contains("aborted")).count();
        eprintln!(
            "PgBouncer 1.18, so_reuseport, {name} to the old one: pgbench {} ({done:?} transactions, failed {failed:?}, \
             {aborted} lines about aborted clients); the old one exited: {exited} after {took:?}\n{}",
            if ok { "succeeded" } else { "failed" },
            report.lines().filter(|l| l.contains("abort") || l.contains("error")).take(5).collect::<Vec<_>>().join("\n")
        );
        drop(second);
    }
}
