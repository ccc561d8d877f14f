//! Replication connections through pglane (`replication=true`, physical;
//! `replication=database`, logical): authenticated by pglane as any client,
//! then passed through to a server connection of their own, never pooled.
//! Shown with PostgreSQL's own tools: pg_basebackup (checked with
//! pg_verifybackup) and pg_recvlogical, against a private PostgreSQL with
//! wal_level = logical and a pg_hba.conf `replication` line.

mod common;

use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use common::{pg_bin_dir, Pglane, Postgres, Psql, SUPERUSER, SUPERUSER_PASSWORD};

fn replication_postgres() -> Postgres {
    Postgres::start_new_with(
        "wal_level = logical\nmax_wal_senders = 10\nmax_replication_slots = 10\n",
        "host replication postgres 127.0.0.1/32 scram-sha-256",
    )
}

/// pglane on two shards, checking passwords itself, serving the server's
/// `postgres` database as `app`, and the server as `replication`: the
/// database name pg_basebackup (any physical replication client) sends, as
/// PgBouncer reads it too.
fn pglane(pg: &Postgres, mode: &str) -> Pglane {
    Pglane::start_with_args(
        &format!(
            "pool_mode = \"{mode}\"\n\
             [databases.app]\nhost = \"127.0.0.1\"\nport = {port}\ndbname = \"postgres\"\npool_size = 2\n\
             [databases.replication]\nhost = \"127.0.0.1\"\nport = {port}\npool_size = 1\n\
             [users.{SUPERUSER}]\npassword = \"{SUPERUSER_PASSWORD}\"\n",
            port = pg.port
        ),
        &["--cores", "2"],
    )
}

/// One of PostgreSQL's client programs, with `password` and none of the
/// caller's PG* variables (the connection strings name all it needs).
fn command(program: &str, password: &str) -> Command {
    let mut cmd = Command::new(pg_bin_dir().join(program));
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("PG") {
            cmd.env_remove(key);
        }
    }
    cmd.env("PGPASSWORD", password).env("PGCONNECT_TIMEOUT", "10");
    cmd
}

/// Runs [`command`] with `args` to its end.
fn run(program: &str, password: &str, args: &[&str]) -> Output {
    command(program, password).args(args).output().unwrap_or_else(|e| panic!("cannot run {program}: {e}"))
}

fn ok(what: &str, out: &Output) -> String {
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{what} failed:\n{text}");
    text
}

fn conninfo(port: u16, db: &str) -> String {
    format!("host=127.0.0.1 port={port} user={SUPERUSER} dbname={db}")
}

/// pg_basebackup through pglane: two physical replication connections
/// (the base backup and its WAL stream); the backup verifies with
/// pg_verifybackup (manifest checksums and the WAL it needs). pglane refused
/// replication connections with FATAL 08P01.
#[test]
fn pg_basebackup_through_pglane_makes_a_backup_that_verifies() {
    let pg = replication_postgres();
    pg.psql("create table base_t (id int); insert into base_t select generate_series(1, 1000)");
    let lane = pglane(&pg, "transaction");
    let target = lane.dir.join("backup");
    let backup = run(
        "pg_basebackup",
        SUPERUSER_PASSWORD,
        &[
            "-d",
            &conninfo(lane.port, "replication"),
            "-D",
            &target.display().to_string(),
            "-X",
            "stream",
            "-c",
            "fast",
            "--no-sync",
        ],
    );
    ok("pg_basebackup through pglane", &backup);
    assert!(Path::new(&target).join("PG_VERSION").exists());
    let verify = run("pg_verifybackup", "", &[&target.display().to_string()]);
    let said = ok("pg_verifybackup", &verify);
    assert!(said.contains("successfully verified"), "{said}");
    // A wrong password is refused by pglane, as PostgreSQL would refuse it.
    let refused =
        run("pg_basebackup", "wrong", &["-d", &conninfo(lane.port, "app"), "-D", &lane.dir.join("no").display().to_string()]);
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("password authentication failed"), "{refused:?}");
    // Nothing was pooled: no walsender is left, and the pools opened nothing.
    assert_eq!(pg.psql("select count(*) from pg_stat_replication"), "0");
    assert_eq!(pg.psql("select count(*) from pg_stat_activity where backend_type = 'client backend' and datname = 'postgres' and pid <> pg_backend_pid()"), "0");
}

/// pg_recvlogical through pglane (`replication=database`): create a slot,
/// stream what inserts and a delete made of it, drop the slot.
/// Its startup parameters reach the server (application_name), and the
/// server's answers to replication commands are what a direct connection
/// gets (IDENTIFY_SYSTEM).
#[test]
fn pg_recvlogical_through_pglane_streams_logical_decoding() {
    let pg = replication_postgres();
    pg.psql("create table logical_t (id int primary key, v text)");
    for mode in ["session", "transaction"] {
        let lane = pglane(&pg, mode);
        let slot = format!("pglane_{mode}");
        let through = conninfo(lane.port, "app");
        ok(
            "create the slot",
            &run(
                "pg_recvlogical",
                SUPERUSER_PASSWORD,
                &["-d", &through, "--slot", &slot, "--create-slot", "-P", "test_decoding"],
            ),
        );
        pg.psql(&format!("insert into logical_t values (1, 'one {mode}'), (2, 'two {mode}'); delete from logical_t"));
        // Streamed until the changes are in the file (an --endpos may be
        // passed by a keepalive before they come, pg_recvlogical's own race).
        let file = lane.dir.join("changes.txt");
        let mut stream = command("pg_recvlogical", SUPERUSER_PASSWORD)
            .args(["-d", &through, "--slot", &slot, "--start", "--no-loop", "-f", &file.display().to_string()])
            // At SIGINT it says "unexpected termination of replication stream", directly too.
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("run pg_recvlogical");
        let wanted = [
            format!("table public.logical_t: INSERT: id[integer]:1 v[text]:'one {mode}'"),
            format!("table public.logical_t: INSERT: id[integer]:2 v[text]:'two {mode}'"),
            "table public.logical_t: DELETE: id[integer]:1".to_owned(),
        ];
        let deadline = Instant::now() + Duration::from_secs(30);
        let changes = loop {
            let changes = std::fs::read_to_string(&file).unwrap_or_default();
            if wanted.iter().all(|change| changes.contains(change)) || Instant::now() > deadline {
                break changes;
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        // The client's own startup parameters reached the server.
        let walsender =
            pg.psql("select usename || ' ' || application_name from pg_stat_activity where backend_type = 'walsender'");
        assert_eq!(walsender, "postgres pg_recvlogical", "{mode}");
        // SIGINT: pg_recvlogical confirms what it wrote and exits.
        // SAFETY: kill(2) on the child this test started.
        unsafe { libc::kill(stream.id() as libc::pid_t, libc::SIGINT) };
        let status = stream.wait().expect("pg_recvlogical ends");
        for change in &wanted {
            assert!(changes.contains(change), "{mode}: {change} is not in\n{changes}");
        }
        assert!(status.success(), "{mode}: pg_recvlogical ended with {status}");
        ok("drop the slot", &run("pg_recvlogical", SUPERUSER_PASSWORD, &["-d", &through, "--slot", &slot, "--drop-slot"]));
        assert_eq!(pg.psql("select count(*) from pg_replication_slots"), "0");

        let identify = |port: u16, db: &str| {
            Psql::tcp(port, SUPERUSER, SUPERUSER_PASSWORD, db)
                .conninfo("replication=database application_name=pglane_replication_test")
                .command("IDENTIFY_SYSTEM")
                .run()
                .unwrap_or_else(|e| panic!("IDENTIFY_SYSTEM on {port}: {e}"))
        };
        let direct = identify(pg.port, "postgres");
        let passed = identify(lane.port, "app");
        // systemid|timeline|xlogpos|dbname: all but the WAL position.
        let fields =
            |line: &str| line.split('|').enumerate().filter(|(i, _)| *i != 2).map(|(_, f)| f.to_owned()).collect::<Vec<_>>();
        assert_eq!(fields(&passed), fields(&direct), "{mode}");
        assert!(lane.log().contains("replication connection"), "{}", lane.log());
    }
}
