//! A database on several hosts: a primary and a streaming standby (made with
//! `pg_basebackup -R`, promoted with `pg_ctl promote`), and pglane choosing
//! between them as `target_session_attrs` and `load_balance_hosts` say.
//!
//! Each test starts its own primary and standby, so that it may promote,
//! stop and fence them. What each shows:
//!
//! - every target_session_attrs lands on the host libpq would pick, whatever
//!   the order of the list;
//! - an unreachable host is skipped (and tried last for a while), and with
//!   no host left the client gets an error naming each one, promptly;
//! - a standby pool leaves a standby promoted under it (the periodic check
//!   of idle connections), instead of reading from a primary;
//! - a read-only error (25006) on a read-write pool makes it leave a host
//!   fenced with `default_transaction_read_only`, with no periodic check.

mod common;

use std::time::{Duration, Instant};

use common::{free_port, Pglane, Postgres, Psql};

/// A primary and its streaming standby.
fn primary_and_standby() -> (Postgres, Postgres) {
    let primary = Postgres::start_new();
    primary.psql("create table t(n int); grant all on t to public");
    let standby = Postgres::start_standby_of(&primary);
    primary.wait_for_standby(&standby, Duration::from_secs(60));
    assert!(standby.is_in_recovery() && !primary.is_in_recovery());
    (primary, standby)
}

/// A `[databases.NAME]` table on `ports` (127.0.0.1), logging in as
/// trustuser, with `extra` lines.
fn database(name: &str, ports: &[u16], extra: &str) -> String {
    let hosts = vec!["\"127.0.0.1\""; ports.len()].join(", ");
    let ports = ports.iter().map(u16::to_string).collect::<Vec<_>>().join(", ");
    format!(
        "[databases.{name}]\nhost = [{hosts}]\nport = [{ports}]\ndbname = \"postgres\"\nuser = \"trustuser\"\npool_size = 4\n{extra}\n"
    )
}

/// pglane on one shard, trusting its clients, with `settings` and `databases`.
fn pglane(settings: &str, databases: &str) -> Pglane {
    Pglane::start_with_args(
        &format!("pool_mode = \"transaction\"\nauth_type = \"trust\"\n{settings}\n{databases}\n[users.postgres]\n"),
        &["--cores", "1"],
    )
}

/// Runs `sql` through pglane in database `db`: Ok(output) or Err(stderr).
fn through(lane: &Pglane, db: &str, sql: &str) -> Result<String, String> {
    Psql::tcp(lane.port, "postgres", "", db).command(sql).run()
}

/// The port of the server that answers through `db`, and whether it is in recovery.
fn served_by(lane: &Pglane, db: &str) -> (u16, bool) {
    let out = through(lane, db, "select inet_server_port(), pg_is_in_recovery()").unwrap_or_else(|e| panic!("{db}: {e}"));
    let (port, recovery) = out.split_once('|').unwrap_or_else(|| panic!("{db}: {out}"));
    (port.parse().unwrap(), recovery == "t")
}

#[test]
fn target_session_attrs_choose_the_host_libpq_would() {
    let (primary, standby) = primary_and_standby();
    let (p, s) = (primary.port, standby.port);
    let databases = [
        database("rw", &[s, p], "target_session_attrs = \"read-write\""),
        database("ro", &[p, s], "target_session_attrs = \"read-only\""),
        database("prim", &[s, p], "target_session_attrs = \"primary\""),
        database("stby", &[p, s], "target_session_attrs = \"standby\""),
        database("prefer", &[p, s], "target_session_attrs = \"prefer-standby\""),
        database("first", &[s, p], ""),
        // With no standby in the list, prefer-standby takes the primary.
        database("prefer_alone", &[p], "target_session_attrs = \"prefer-standby\""),
    ]
    .concat();
    let lane = pglane("", &databases);
    for (db, want) in [
        ("rw", (p, false)),
        ("ro", (s, true)),
        ("prim", (p, false)),
        ("stby", (s, true)),
        ("prefer", (s, true)),
        ("first", (s, true)),
        ("prefer_alone", (p, false)),
    ] {
        assert_eq!(served_by(&lane, db), want, "database {db}");
    }
    // Writes go through the read-write one; the standby's replay shows them.
    through(&lane, "rw", "insert into t values (1)").unwrap();
    primary.wait_for_standby(&standby, Duration::from_secs(60));
    assert_eq!(through(&lane, "ro", "select count(*) from t").unwrap(), "1");
    // A write on the standby is PostgreSQL's error, passed through as is.
    let e = through(&lane, "stby", "insert into t values (2)").unwrap_err();
    assert!(e.contains("cannot execute INSERT in a read-only transaction"), "{e}");
    // A standby cannot be a primary: no host of this list will do.
    let lane = pglane("server_retry_timeout = 0", &database("rw_on_standby", &[s], "target_session_attrs = \"read-write\""));
    let e = through(&lane, "rw_on_standby", "select 1").unwrap_err();
    assert!(
        e.contains(&format!(
            "no server would do for target_session_attrs=read-write: 127.0.0.1:{s}: server is in hot standby mode"
        )),
        "{e}"
    );
}

#[test]
fn round_robin_spreads_new_connections_over_the_hosts() {
    let (primary, standby) = primary_and_standby();
    let lane = pglane("", &database("spread", &[primary.port, standby.port], "load_balance_hosts = \"round-robin\""));
    // Two transactions open at once need two server connections. The second
    // starts once the first holds its connection (its pg_sleep shows on one
    // of the servers), and the first holds it for 3 s.
    //
    // What is asserted is the rotation itself, counted on the servers: the
    // pool may open more connections than the two transactions (a login
    // opens one to learn the server's settings, and a transaction arriving
    // before that one is idle opens another), and whichever transaction gets
    // which connection is timing. Round-robin means the hosts' counts of
    // pglane's connections differ by at most one, and both are in use.
    let open = |port: u16, sleep: u32| {
        let mut child = std::process::Command::new("psql")
            .args(["-X", "-q", "-A", "-t", "-h", "127.0.0.1", "-p", &port.to_string(), "-U", "postgres", "spread"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        use std::io::Write;
        let stdin = child.stdin.as_mut().unwrap();
        writeln!(stdin, "begin;\nselect inet_server_port();\nselect pg_sleep({sleep});\nselect inet_server_port();\ncommit;")
            .unwrap();
        child
    };
    let a = open(lane.port, 3);
    let sleeping = "select count(*) from pg_stat_activity where query = 'select pg_sleep(3);'";
    let deadline = Instant::now() + Duration::from_secs(30);
    while primary.psql(sleeping) == "0" && standby.psql(sleeping) == "0" {
        assert!(Instant::now() < deadline, "the first transaction never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    let b = open(lane.port, 0);
    let ports = |child: std::process::Child| {
        let out = String::from_utf8(child.wait_with_output().unwrap().stdout).unwrap();
        let lines: Vec<u16> = out.lines().filter_map(|l| l.trim().parse().ok()).collect();
        assert_eq!(lines.len(), 2, "{out}");
        assert_eq!(lines[0], lines[1], "one transaction, one server");
        lines[0]
    };
    let served = [ports(a), ports(b)];
    for port in served {
        assert!(port == primary.port || port == standby.port, "served by {port}");
    }
    let pooled = "select count(*) from pg_stat_activity where usename = 'trustuser' and backend_type = 'client backend'";
    let count = |server: &Postgres| -> i64 { server.psql(pooled).parse().unwrap() };
    let (on_primary, on_standby) = (count(&primary), count(&standby));
    eprintln!(
        "transactions served by {served:?}; pglane's connections: {on_primary} on the primary, {on_standby} on the standby"
    );
    assert!(on_primary + on_standby >= 2, "two transactions at once, {on_primary} + {on_standby} connections");
    assert!(on_primary >= 1 && on_standby >= 1, "both hosts take connections: {on_primary} and {on_standby}");
    assert!((on_primary - on_standby).abs() <= 1, "a rotation: {on_primary} and {on_standby}");
}

#[test]
fn an_unreachable_host_is_skipped_and_with_none_left_the_error_names_each() {
    let primary = Postgres::start_new();
    let dead = free_port(); // nothing listens there
    let lane = pglane(
        "server_retry_timeout = 1",
        &[
            database("app", &[dead, primary.port], "target_session_attrs = \"read-write\""),
            database("nowhere", &[dead, free_port()], ""),
        ]
        .concat(),
    );
    assert_eq!(served_by(&lane, "app"), (primary.port, false));
    lane.wait_for_log(&format!("leaving a host: cannot connect to server 127.0.0.1:{dead}"), Duration::from_secs(5));
    // No host at all: an error, once server_retry_timeout has passed.
    let started = Instant::now();
    let e = through(&lane, "nowhere", "select 1").unwrap_err();
    let took = started.elapsed();
    assert!(e.contains("no server would do for target_session_attrs=any"), "{e}");
    assert!(e.contains(&format!("127.0.0.1:{dead}: cannot connect to server")), "{e}");
    assert!(took < Duration::from_secs(20), "the error took {took:?}");
    eprintln!("no host reachable: the error came after {took:?} (server_retry_timeout = 1)");
}

#[test]
fn a_standby_pool_leaves_a_promoted_standby() {
    let (primary, standby) = primary_and_standby();
    let lane = pglane(
        "host_check_interval = 1\nserver_retry_timeout = 0",
        &database("reads", &[primary.port, standby.port], "target_session_attrs = \"standby\""),
    );
    assert_eq!(served_by(&lane, "reads"), (standby.port, true));
    // The pool keeps an idle connection on the standby. Promoted (the old
    // primary still runs: there are now two primaries), it is a standby no
    // more, and the idle connection must not serve reads meant for one.
    standby.promote();
    let promoted = Instant::now();
    let deadline = promoted + Duration::from_secs(30);
    let error = loop {
        match through(&lane, "reads", "select pg_is_in_recovery()") {
            Err(e) => break e,
            Ok(_) => assert!(Instant::now() < deadline, "the standby pool still reads from the promoted server after 30 s"),
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let noticed = promoted.elapsed();
    assert!(error.contains("no server would do for target_session_attrs=standby"), "{error}");
    assert!(error.contains("server is not in hot standby mode"), "{error}");
    // And it stays so.
    assert!(through(&lane, "reads", "select 1").is_err());
    lane.wait_for_log("leaving a host: server is not in hot standby mode", Duration::from_secs(5));
    eprintln!("a promoted standby: its standby pool left it {noticed:?} after pg_ctl promote returned (host_check_interval = 1)");
}

#[test]
fn a_read_only_error_makes_a_read_write_pool_leave_a_fenced_primary() {
    let (primary, standby) = primary_and_standby();
    // No periodic check: only the 25006 can tell pglane.
    let lane = pglane(
        "host_check_interval = 0",
        &database("rw", &[primary.port, standby.port], "target_session_attrs = \"read-write\""),
    );
    through(&lane, "rw", "insert into t values (1)").unwrap();
    // Fence the primary as an operator would before a switchover, and
    // promote the standby. The pool's idle connection is on the primary.
    primary.psql("alter system set default_transaction_read_only = on");
    primary.psql("select pg_reload_conf()");
    standby.promote();
    // The first write meets the fenced primary: PostgreSQL's error, as is.
    let e = through(&lane, "rw", "insert into t values (2)").unwrap_err();
    assert!(e.contains("cannot execute INSERT in a read-only transaction"), "{e}");
    // The next one goes to the new primary (without the check the 25006
    // set off, it would meet the fenced primary's idle connection again).
    let port = through(&lane, "rw", "insert into t values (3) returning inet_server_port()").unwrap();
    assert_eq!(port, standby.port.to_string());
    assert_eq!(standby.psql("select count(*) from t where n = 3"), "1");
    lane.wait_for_log("leaving a host: session is read-only", Duration::from_secs(5));
}
