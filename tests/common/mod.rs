//! Shared harness for pglane's integration tests (`mod common;` in each `tests/*.rs`).
//!
//! This module owns everything a test needs from the outside world:
//!
//! * **A real PostgreSQL** — [`postgres()`] starts one server per test process
//!   (lazily, on first call) in a fresh temp dir, on a free 127.0.0.1 port, with
//!   these login roles (only `postgres` is a superuser):
//!
//!   | role        | password    | auth over TCP (pg_hba)   |
//!   |-------------|-------------|--------------------------|
//!   | `postgres`  | `secret`    | scram-sha-256 (superuser)|
//!   | `scramuser` | `scrampass` | scram-sha-256            |
//!   | `md5user`   | `md5pass`   | md5 (stored as md5 hash) |
//!   | `trustuser` | (none)      | trust                    |
//!
//!   Over the unix socket in [`Postgres::socket_dir`] everything is `trust`
//!   (replication too). [`Postgres::start_standby_of`] makes a streaming
//!   standby of a private server (`pg_basebackup -R`), [`Postgres::promote`]
//!   promotes it.
//!   Tests that stop/restart the server should use a private instance
//!   ([`Postgres::start_new`]) or live in their own `tests/*.rs` file, because
//!   tests in one file run in parallel against the shared server.
//! * **The pglane binary under test** — [`Pglane::start`] writes a config file,
//!   spawns `pglane --config <file>`, waits until it listens, and stops it on drop.
//!   [`Pglane::try_start_on`] starts one on a given port (a second pglane on
//!   the port of the first, for rolling restarts) with extra environment.
//! * **Client helpers** — [`connect`] / [`try_connect`] (tokio-postgres, NoTls),
//!   and [`Psql`] for psql runs.
//!
//! Cleanup: statics are never dropped, so every PostgreSQL (and every pglane
//! child) gets a detached watchdog shell that stops it and removes its temp dir
//! once the test process is gone, however it ended. Set `PGLANE_KEEP_TMP=1` to
//! keep temp dirs (data, logs) for post-mortem debugging.
//!
//! Environment knobs: `PG_BIN` (PostgreSQL bin dir), `PGLANE_TEST_TMP` (parent
//! of temp dirs; default `std::env::temp_dir()`; keep it short, unix socket
//! paths are limited to ~100 bytes), `PGLANE_KEEP_TMP`, `RUST_LOG` (passed to
//! pglane; default `info`), `PGLANE_BIN` (the binary under test; default
//! the one cargo built with the tests, so a copy can be looped on while the
//! tree is rebuilt).
//!
//! When the tests run as root, all PostgreSQL-side commands run as the `postgres`
//! OS user via `runuser`, and temp dirs are chowned to it.

#![allow(dead_code)]

use std::ffi::{CString, OsStr};
use std::fmt::Write as _;
use std::fs;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

pub mod certs;
mod psql;
pub mod writers;
#[allow(unused_imports)] // each test crate uses its own part
pub use psql::{Psql, PsqlOutput};

/// Unprivileged OS user that runs PostgreSQL when the tests run as root.
pub const PG_OS_USER: &str = "postgres";
/// Superuser role and its password (scram-sha-256 over TCP).
pub const SUPERUSER: &str = "postgres";
pub const SUPERUSER_PASSWORD: &str = "secret";

const PG_START_ATTEMPTS: u32 = 3;
const PGLANE_START_ATTEMPTS: u32 = 3;
const PGLANE_START_TIMEOUT: Duration = Duration::from_secs(15);
const PGLANE_STOP_TIMEOUT: Duration = Duration::from_secs(10);
const POLL_INTERVAL: Duration = Duration::from_millis(20);

/// Roles created in every test server (see the module docs).
const ROLES_SQL: &str = "\
SET password_encryption = 'md5';
CREATE ROLE md5user LOGIN PASSWORD 'md5pass';
RESET password_encryption;
CREATE ROLE trustuser LOGIN;
CREATE ROLE scramuser LOGIN PASSWORD 'scrampass';
GRANT CREATE ON SCHEMA public TO md5user, trustuser, scramuser;";

const PG_HBA: &str = "\
# written by tests/common/mod.rs
local all all                     trust
local replication all             trust
host  all md5user   127.0.0.1/32  md5
host  all trustuser 127.0.0.1/32  trust
host  all all       127.0.0.1/32  scram-sha-256
";

// ---------------------------------------------------------------------------
// PostgreSQL
// ---------------------------------------------------------------------------

/// A running PostgreSQL server owned by the harness.
pub struct Postgres {
    /// TCP port on 127.0.0.1.
    pub port: u16,
    /// Directory holding the unix socket (`.s.PGSQL.<port>`).
    pub socket_dir: PathBuf,
    pub data_dir: PathBuf,
    pub bin_dir: PathBuf,
    /// Temp dir holding data_dir, the socket and the server log.
    dir: PathBuf,
    log_file: PathBuf,
    /// postgresql.conf lines of [`Postgres::start_new_with`].
    more_conf: String,
}

static POSTGRES: OnceLock<Result<Postgres, String>> = OnceLock::new();

/// The shared PostgreSQL of this test process, started on first call.
///
/// If startup fails, every caller panics with the same message (startup is
/// attempted only once).
pub fn postgres() -> &'static Postgres {
    let started = POSTGRES.get_or_init(|| std::panic::catch_unwind(Postgres::start_new).map_err(|p| panic_message(&*p)));
    match started {
        Ok(pg) => pg,
        Err(msg) => panic!("shared test PostgreSQL failed to start: {msg}"),
    }
}

impl Postgres {
    /// Starts a new, private PostgreSQL (initdb + start + roles).
    ///
    /// Most tests want the shared [`postgres()`]; use this for tests that
    /// stop or restart the server. Dropping it stops the server and removes
    /// its temp dir.
    pub fn start_new() -> Postgres {
        Postgres::start_new_with("", "")
    }

    /// Like [`Postgres::start_new`], with more postgresql.conf lines
    /// (`wal_level = logical`) and pg_hba.conf lines put first (`host
    /// replication all 127.0.0.1/32 scram-sha-256`).
    pub fn start_new_with(more_conf: &str, hba_first: &str) -> Postgres {
        let bin_dir = pg_bin_dir();
        let dir = make_temp_dir("pg");
        give_to_pg_user(&dir);
        spawn_pg_watchdog(&dir, &bin_dir);

        let data_dir = dir.join("data");
        let log_file = dir.join("postgres.log");
        initdb(&bin_dir, &dir, &data_dir);
        fs::write(data_dir.join("pg_hba.conf"), format!("{hba_first}\n{PG_HBA}")).expect("write pg_hba.conf");

        let mut pg =
            Postgres { port: 0, socket_dir: dir.clone(), data_dir, bin_dir, dir, log_file, more_conf: more_conf.to_owned() };
        pg.start_on_free_port();
        pg.psql(ROLES_SQL);
        pg
    }

    /// Starts a streaming standby of `primary`: `pg_basebackup -R` over the
    /// primary's unix socket, then a server of its own on a free port (the
    /// copied postgresql.conf is the primary's; the settings appended here
    /// come later and win). Dropping it stops it and removes its temp dir.
    pub fn start_standby_of(primary: &Postgres) -> Postgres {
        let bin_dir = primary.bin_dir.clone();
        let dir = make_temp_dir("pg");
        give_to_pg_user(&dir);
        spawn_pg_watchdog(&dir, &bin_dir);
        let data_dir = dir.join("data");
        let log_file = dir.join("postgres.log");
        let mut cmd = pg_user_command(bin_dir.join("pg_basebackup"), &dir);
        cmd.arg("-D").arg(&data_dir).arg("-h").arg(&primary.socket_dir);
        cmd.args(["-p", &primary.port.to_string(), "-U", SUPERUSER, "-R", "-X", "stream", "--no-sync", "-c", "fast"]);
        if let Err(err) = run(&mut cmd) {
            primary.fail(&format!("pg_basebackup failed: {err}"));
        }
        let mut standby =
            Postgres { port: 0, socket_dir: dir.clone(), data_dir, bin_dir, dir, log_file, more_conf: primary.more_conf.clone() };
        standby.start_on_free_port();
        standby
    }

    /// Is this server a standby (in recovery)?
    pub fn is_in_recovery(&self) -> bool {
        self.psql("select pg_is_in_recovery()") == "t"
    }

    /// `pg_ctl promote -w`: the standby becomes a primary; returns once it
    /// takes writes.
    pub fn promote(&self) {
        if let Err(err) = self.pg_ctl(&["-w", "-t", "60", "promote"]) {
            self.fail(&format!("pg_ctl promote failed: {err}"));
        }
    }

    /// Waits until the standby `standby` has replayed everything this
    /// primary has written so far.
    pub fn wait_for_standby(&self, standby: &Postgres, limit: Duration) {
        // The harness runs with synchronous_commit off, and the WAL writer
        // leaves a partial page unwritten until a commit needs it (a commit
        // that wrote nothing else is asynchronous whatever the setting): a
        // WAL switch flushes everything before it, so it is sent, and the
        // standby has all of it once it has replayed the switch.
        self.psql("select pg_switch_wal()");
        let lsn = self.psql("select pg_current_wal_flush_lsn()");
        let deadline = Instant::now() + limit;
        let caught_up = format!("select pg_last_wal_replay_lsn() >= '{lsn}'::pg_lsn");
        while standby.psql(&caught_up) != "t" {
            if Instant::now() > deadline {
                standby.fail(&format!("the standby has not replayed up to {lsn} after {limit:?}"));
            }
            std::thread::sleep(POLL_INTERVAL);
        }
    }

    /// Picks a free port, writes postgresql.conf and starts; retries on failure
    /// (the port may be grabbed by someone else between probe and bind).
    fn start_on_free_port(&mut self) {
        let conf_path = self.data_dir.join("postgresql.conf");
        let initdb_conf = fs::read_to_string(&conf_path).expect("read postgresql.conf");
        for attempt in 1..=PG_START_ATTEMPTS {
            self.port = free_port();
            fs::write(&conf_path, initdb_conf.clone() + &self.extra_conf()).expect("write postgresql.conf");
            match self.pg_ctl(&["-w", "-t", "60", "start"]) {
                Ok(_) => return,
                Err(err) if attempt < PG_START_ATTEMPTS => {
                    eprintln!("harness: PostgreSQL start attempt {attempt} failed, retrying: {err}");
                    let _ = self.pg_ctl(&["-m", "immediate", "stop"]);
                }
                Err(err) => self.fail(&format!("pg_ctl start failed {attempt} times: {err}")),
            }
        }
    }

    fn extra_conf(&self) -> String {
        format!(
            "\n# added by tests/common/mod.rs\n\
             listen_addresses = '127.0.0.1'\n\
             port = {port}\n\
             unix_socket_directories = '{socket_dir}'\n\
             max_connections = 300\n\
             shared_buffers = 128MB\n\
             fsync = off\n\
             synchronous_commit = off\n\
             full_page_writes = off\n\
             log_min_messages = warning\n\
             log_destination = 'stderr'\n\
             logging_collector = off\n\
             {more}\n",
            port = self.port,
            socket_dir = self.socket_dir.display(),
            more = self.more_conf,
        )
    }

    /// Runs SQL with `psql -X -A -t` over the unix socket as `postgres` in
    /// database `postgres`; returns stdout without the trailing newline.
    /// Panics with psql's stderr on failure.
    pub fn psql(&self, sql: &str) -> String {
        self.psql_db("postgres", sql)
    }

    /// Drops database `name` if it exists and creates it afresh, owned by
    /// `owner` (else by the superuser), for a test of its own.
    pub fn fresh_database(&self, name: &str, owner: Option<&str>) {
        self.psql(&format!("DROP DATABASE IF EXISTS {name}"));
        match owner {
            Some(owner) => self.psql(&format!("CREATE DATABASE {name} OWNER {owner}")),
            None => self.psql(&format!("CREATE DATABASE {name}")),
        };
    }

    /// Like [`Postgres::psql`] in another database.
    pub fn psql_db(&self, db: &str, sql: &str) -> String {
        self.try_psql(db, sql).unwrap_or_else(|err| panic!("psql failed on db {db:?}\nSQL: {sql}\n{err}"))
    }

    /// Like [`Postgres::psql_db`] but returns psql's stderr instead of panicking.
    pub fn try_psql(&self, db: &str, sql: &str) -> Result<String, String> {
        Psql::socket(&self.socket_dir, self.port, SUPERUSER, db).command(sql).run()
    }

    /// keyword=value connection string for TCP (e.g. for tokio_postgres::connect).
    pub fn conn_str(&self, user: &str, password: &str, db: &str) -> String {
        conn_str(self.port, user, password, db)
    }

    /// `postgres://user:password@127.0.0.1:port/db` (no escaping: test names only).
    pub fn tcp_url(&self, user: &str, password: &str, db: &str) -> String {
        tcp_url(self.port, user, password, db)
    }

    /// `pg_ctl -m fast restart` (same port). Disconnects every client.
    pub fn restart(&self) {
        if let Err(err) = self.pg_ctl(&["-m", "fast", "-w", "-t", "60", "restart"]) {
            self.fail(&format!("pg_ctl restart failed: {err}"));
        }
    }

    /// `pg_ctl -m fast stop`, for "server is down" tests; see [`Postgres::start_server`].
    pub fn stop_server(&self) {
        if let Err(err) = self.pg_ctl(&["-m", "fast", "-w", "-t", "60", "stop"]) {
            self.fail(&format!("pg_ctl stop failed: {err}"));
        }
    }

    /// Starts a server stopped by [`Postgres::stop_server`] (same port).
    pub fn start_server(&self) {
        if let Err(err) = self.pg_ctl(&["-w", "-t", "60", "start"]) {
            self.fail(&format!("pg_ctl start failed: {err}"));
        }
    }

    /// Terminates every backend of `user` (server-side disconnect); returns how many.
    pub fn terminate_backends(&self, user: &str) -> usize {
        let sql = format!(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity \
             WHERE usename = '{user}' AND pid <> pg_backend_pid()"
        );
        let out = self.psql(&sql);
        out.parse().unwrap_or_else(|_| panic!("unexpected count from psql: {out:?}"))
    }

    /// The postmaster's process id.
    pub fn postmaster_pid(&self) -> i32 {
        let text = fs::read_to_string(self.data_dir.join("postmaster.pid")).expect("postmaster.pid");
        text.lines().next().and_then(|pid| pid.trim().parse().ok()).expect("a pid in postmaster.pid")
    }

    /// The server log so far.
    pub fn log(&self) -> String {
        fs::read_to_string(&self.log_file).unwrap_or_else(|e| format!("<no log: {e}>"))
    }

    fn pg_ctl(&self, args: &[&str]) -> Result<String, String> {
        let mut cmd = pg_user_command(self.bin_dir.join("pg_ctl"), &self.dir);
        cmd.arg("-D").arg(&self.data_dir).arg("-l").arg(&self.log_file).args(args);
        run(&mut cmd)
    }

    fn fail(&self, what: &str) -> ! {
        panic!("{what}\n--- PostgreSQL log ({}) ---\n{}", self.log_file.display(), tail(&self.log(), 100))
    }
}

impl Drop for Postgres {
    /// Only private instances are ever dropped (the shared one is a static).
    fn drop(&mut self) {
        let _ = self.pg_ctl(&["-m", "immediate", "stop"]);
        remove_temp_dir(&self.dir);
    }
}

fn initdb(bin_dir: &Path, dir: &Path, data_dir: &Path) {
    let pwfile = dir.join("pwfile");
    fs::write(&pwfile, format!("{SUPERUSER_PASSWORD}\n")).expect("write pwfile");
    give_to_pg_user(&pwfile);
    let mut cmd = pg_user_command(bin_dir.join("initdb"), dir);
    cmd.arg("-D")
        .arg(data_dir)
        .args(["-U", SUPERUSER, "--auth-local=trust", "--auth-host=scram-sha-256"])
        .arg(format!("--pwfile={}", pwfile.display()))
        .args(["--locale=C", "--encoding=UTF8", "--no-sync"]);
    if let Err(err) = run(&mut cmd) {
        panic!("initdb failed: {err}");
    }
}

/// Stops the server and removes `dir` once this test process is gone.
fn spawn_pg_watchdog(dir: &Path, bin_dir: &Path) {
    const SCRIPT: &str = r#"
        test_pid=$1 dir=$2 pg_ctl=$3 pg_user=$4 keep=$5
        while kill -0 "$test_pid" 2>/dev/null; do sleep 1; done
        if [ "$(id -u)" = 0 ]; then
            runuser -u "$pg_user" -- "$pg_ctl" -D "$dir/data" -m immediate stop
        else
            "$pg_ctl" -D "$dir/data" -m immediate stop
        fi >/dev/null 2>&1
        [ "$keep" = 1 ] || rm -rf "$dir"
    "#;
    let keep = if keep_tmp() { "1" } else { "0" };
    spawn_watchdog(
        SCRIPT,
        &[
            OsStr::new(&std::process::id().to_string()),
            dir.as_os_str(),
            bin_dir.join("pg_ctl").as_os_str(),
            OsStr::new(PG_OS_USER),
            OsStr::new(keep),
        ],
    );
}

/// PostgreSQL's bin dir: $PG_BIN, else the newest /usr/lib/postgresql/*/bin
/// with initdb, else `pg_config --bindir`.
pub fn pg_bin_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("PG_BIN") {
        return PathBuf::from(dir);
    }
    let newest_debian = fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter(|entry| entry.path().join("bin/initdb").exists())
        .filter_map(|entry| {
            let version: u32 = entry.file_name().to_str()?.split('.').next()?.parse().ok()?;
            Some((version, entry.path().join("bin")))
        })
        .max();
    if let Some((_, dir)) = newest_debian {
        return dir;
    }
    match Command::new("pg_config").arg("--bindir").output() {
        Ok(out) if out.status.success() => PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()),
        _ => panic!(
            "cannot find PostgreSQL server binaries: set PG_BIN, install the \
             `postgresql` package, or put pg_config on PATH (tools/test does this)"
        ),
    }
}

/// A process of PostgreSQL's stopped with SIGSTOP until this is dropped
/// (SIGCONT), so a failing test never leaves a frozen server behind. A
/// frozen postmaster accepts no connection (they wait in its listen queue)
/// while its backends run on; a frozen backend answers nothing.
pub struct Frozen(i32);

impl Frozen {
    pub fn stop(pid: i32) -> Frozen {
        // SAFETY: kill(2) has no memory-safety preconditions; `pid` is a
        // PostgreSQL process the test started.
        let rc = unsafe { libc::kill(pid, libc::SIGSTOP) };
        assert_eq!(rc, 0, "kill({pid}, SIGSTOP): {}", std::io::Error::last_os_error());
        Frozen(pid)
    }
}

impl Drop for Frozen {
    fn drop(&mut self) {
        // SAFETY: as in `stop`.
        unsafe { libc::kill(self.0, libc::SIGCONT) };
    }
}

// ---------------------------------------------------------------------------
// pglane
// ---------------------------------------------------------------------------

/// A running pglane binary (`CARGO_BIN_EXE_pglane`). Stopped on drop.
pub struct Pglane {
    /// Port pglane listens on (127.0.0.1).
    pub port: u16,
    /// Temp dir holding `pglane.toml` and `pglane.log`; also the child's cwd.
    pub dir: PathBuf,
    child: Option<Child>,
}

/// pglane's log filter for a test that looks for where a CancelRequest went:
/// those lines are DEBUG, since anyone can send cancels as fast as they like.
pub const LOG_CANCEL_ROUTING: (&str, &str) = ("RUST_LOG", "info,pglane::runtime=debug");

impl Pglane {
    /// Starts pglane with `listen = "127.0.0.1:<free port>"` followed by
    /// `config_body` verbatim. Panics (with pglane's log) if it exits or does
    /// not accept TCP connections within 15 s.
    pub fn start(config_body: &str) -> Pglane {
        Pglane::start_with_args(config_body, &[])
    }

    /// One shard in transaction mode, trusting `user` (also its admin), with
    /// `settings` (config lines), serving server database `dbname` as
    /// database `app` with `pool_size` connections.
    pub fn trusting_on_one_shard(user: &str, settings: &str, dbname: &str, pool_size: usize) -> Pglane {
        Pglane::start_with_args(
            &format!(
                r#"pool_mode = "transaction"
auth_type = "trust"
admin_users = ["{user}"]
{settings}
[databases.app]
host = "127.0.0.1"
port = {port}
dbname = "{dbname}"
pool_size = {pool_size}
[users.{user}]
"#,
                port = postgres().port
            ),
            &["--cores", "1"],
        )
    }

    /// Like [`Pglane::start`], with extra command-line arguments after
    /// `--config <file>`.
    pub fn start_with_args(config_body: &str, extra_args: &[&str]) -> Pglane {
        Pglane::start_with_env(config_body, extra_args, &[])
    }

    /// Like [`Pglane::start_with_args`], with `env` set for pglane (e.g.
    /// [`LOG_CANCEL_ROUTING`]).
    pub fn start_with_env(config_body: &str, extra_args: &[&str], env: &[(&str, &str)]) -> Pglane {
        for attempt in 1.. {
            let port = free_port();
            match Pglane::try_start_on(port, config_body, extra_args, env) {
                Ok(pglane) => return pglane,
                Err((why, log)) if attempt < PGLANE_START_ATTEMPTS && log.contains("in use") => {
                    eprintln!("harness: pglane port {port} was taken ({why}), retrying");
                }
                Err((why, log)) => panic!("pglane did not start: {why}\n--- pglane log ---\n{}", tail(&log, 200)),
            }
        }
        unreachable!()
    }

    /// Starts pglane on `port`, which another pglane may hold (a rolling
    /// restart, `so_reuseport`), with `env` set for it (e.g. NOTIFY_SOCKET).
    /// Err(why, log) if it exits or does not listen within 15 s.
    pub fn try_start_on(
        port: u16,
        config_body: &str,
        extra_args: &[&str],
        env: &[(&str, &str)],
    ) -> Result<Pglane, (String, String)> {
        let mut pglane = Pglane { port, dir: make_temp_dir("pglane"), child: None };
        pglane.write_config(config_body);
        pglane.spawn(extra_args, env);
        let Err(why) = pglane.wait_until_listening() else {
            return Ok(pglane);
        };
        pglane.stop();
        let config = fs::read_to_string(pglane.config_path()).unwrap_or_default();
        let log = format!("--- config ---\n{config}\n--- log ---\n{}", pglane.log());
        drop(pglane); // not panicking yet: removes the temp dir quietly
        Err((why, log))
    }

    pub fn config_path(&self) -> PathBuf {
        self.dir.join("pglane.toml")
    }

    /// Rewrites the config file (keeping the `listen` line), e.g. before a
    /// reload via `signal(libc::SIGHUP)`.
    pub fn write_config(&self, config_body: &str) {
        let text = format!("listen = \"127.0.0.1:{}\"\n{config_body}", self.port);
        fs::write(self.config_path(), text).expect("write pglane config");
    }

    fn log_path(&self) -> PathBuf {
        self.dir.join("pglane.log")
    }

    fn spawn(&mut self, extra_args: &[&str], env: &[(&str, &str)]) {
        let log = fs::File::create(self.log_path()).expect("create pglane.log");
        let mut cmd = Command::new(pglane_bin());
        cmd.arg("--config")
            .arg(self.config_path())
            .args(extra_args)
            .current_dir(&self.dir)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("clone log fd"))
            .stderr(log);
        if std::env::var_os("RUST_LOG").is_none() {
            cmd.env("RUST_LOG", "info");
        }
        cmd.envs(env.iter().copied());
        let child = cmd.spawn().expect("spawn pglane binary");
        spawn_child_watchdog(child.id(), &self.dir);
        self.child = Some(child);
    }

    fn wait_until_listening(&mut self) -> Result<(), String> {
        let addr = SocketAddr::from(([127, 0, 0, 1], self.port));
        let deadline = Instant::now() + PGLANE_START_TIMEOUT;
        loop {
            if let Some(status) = self.child.as_mut().and_then(|c| c.try_wait().ok().flatten()) {
                return Err(format!("pglane exited with {status}"));
            }
            // Every shard is up once the log says so: the first shard may
            // accept before the others have their listeners.
            if self.log().contains("pglane is ready") && TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(format!("not listening on {addr} after {PGLANE_START_TIMEOUT:?}"));
            }
            std::thread::sleep(POLL_INTERVAL);
        }
    }

    /// pglane's stdout+stderr so far.
    pub fn log(&self) -> String {
        fs::read_to_string(self.log_path()).unwrap_or_else(|e| format!("<no log: {e}>"))
    }

    /// Polls the log until it contains `needle`; panics with the log on timeout.
    pub fn wait_for_log(&self, needle: &str, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        while !self.log().contains(needle) {
            if Instant::now() > deadline {
                panic!("pglane log lacks {needle:?} after {timeout:?}\n--- pglane log ---\n{}", tail(&self.log(), 200));
            }
            std::thread::sleep(POLL_INTERVAL);
        }
    }

    /// OS pid of the running child (panics if already stopped).
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("pglane already stopped").id()
    }

    /// Sends `sig` (e.g. `libc::SIGHUP`) to the child.
    pub fn signal(&self, sig: libc::c_int) {
        // SAFETY: kill(2) has no memory-safety preconditions.
        let rc = unsafe { libc::kill(self.pid() as libc::pid_t, sig) };
        assert_eq!(rc, 0, "kill({}, {sig}): {}", self.pid(), std::io::Error::last_os_error());
    }

    /// True while the child has not exited.
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.as_mut().map(|c| c.try_wait()), Some(Ok(None)))
    }

    /// SIGTERM, wait up to 10 s, then SIGKILL. Returns the exit status
    /// (None if already stopped). Idempotent; also run by Drop.
    pub fn stop(&mut self) -> Option<ExitStatus> {
        let mut child = self.child.take()?;
        if let Ok(Some(status)) = child.try_wait() {
            return Some(status);
        }
        // SAFETY: kill(2) has no memory-safety preconditions.
        unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
        let deadline = Instant::now() + PGLANE_STOP_TIMEOUT;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = child.try_wait() {
                return Some(status);
            }
            std::thread::sleep(POLL_INTERVAL);
        }
        eprintln!("harness: pglane pid {} ignored SIGTERM for {PGLANE_STOP_TIMEOUT:?}; SIGKILL", child.id());
        let _ = child.kill();
        child.wait().ok()
    }

    /// keyword=value connection string to pglane.
    pub fn conn_str(&self, user: &str, password: &str, db: &str) -> String {
        conn_str(self.port, user, password, db)
    }
}

impl Drop for Pglane {
    fn drop(&mut self) {
        self.stop();
        if std::thread::panicking() {
            // Shown with the failing test's output.
            eprintln!("--- pglane log ({}) ---\n{}", self.log_path().display(), tail(&self.log(), 200));
        } else {
            remove_temp_dir(&self.dir);
        }
    }
}

/// If this test process dies while the child still runs: SIGKILL the child
/// and remove its temp dir.
fn spawn_child_watchdog(child_pid: u32, dir: &Path) {
    const SCRIPT: &str = r#"
        test_pid=$1 child_pid=$2 dir=$3 keep=$4
        while kill -0 "$test_pid" 2>/dev/null && kill -0 "$child_pid" 2>/dev/null; do sleep 1; done
        kill -0 "$test_pid" 2>/dev/null && exit 0
        kill -KILL "$child_pid" 2>/dev/null
        [ "$keep" = 1 ] || rm -rf "$dir"
    "#;
    spawn_watchdog(
        SCRIPT,
        &[
            OsStr::new(&std::process::id().to_string()),
            OsStr::new(&child_pid.to_string()),
            dir.as_os_str(),
            OsStr::new(if keep_tmp() { "1" } else { "0" }),
        ],
    );
}

// ---------------------------------------------------------------------------
// PgBouncer, for comparisons
// ---------------------------------------------------------------------------

/// A PgBouncer (the one on PATH) run as the PostgreSQL OS user when root,
/// for the `#[ignore]`d runs that measure what it does in pglane's place.
/// Trusts user `postgres`; stopped (SIGINT, then SIGKILL) on drop.
pub struct Pgbouncer {
    pub port: u16,
    dir: PathBuf,
    child: Option<Child>,
}

impl Pgbouncer {
    /// Starts PgBouncer on `port` with `[databases]` lines `databases` and
    /// more `[pgbouncer]` settings `settings`.
    pub fn start_on(port: u16, databases: &str, settings: &str) -> Pgbouncer {
        Pgbouncer::start_with_users(port, databases, settings, "\"postgres\" \"\"\n\"trustuser\" \"\"\n")
    }

    /// [`Pgbouncer::start_on`] with `users` as its auth_file; `settings`
    /// come after the harness's own (`auth_type = trust` among them), so a
    /// setting given there wins, as in PgBouncer.
    pub fn start_with_users(port: u16, databases: &str, settings: &str, users: &str) -> Pgbouncer {
        Pgbouncer::start_program("pgbouncer", port, databases, settings, users)
    }

    /// [`Pgbouncer::start_with_users`] with the PgBouncer at `program` (a
    /// path, or a name on PATH).
    pub fn start_program(program: &str, port: u16, databases: &str, settings: &str, users: &str) -> Pgbouncer {
        let dir = make_temp_dir("pgbouncer");
        give_to_pg_user(&dir);
        let mut bouncer = Pgbouncer { port, dir, child: None };
        bouncer.write_config(databases, settings);
        fs::write(bouncer.dir.join("users.txt"), users).unwrap();
        give_to_pg_user(&bouncer.dir.join("users.txt"));
        let mut cmd = pg_user_command(program, &bouncer.dir);
        cmd.arg(bouncer.dir.join("pgbouncer.ini")).stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null());
        bouncer.child = Some(cmd.spawn().expect("spawn pgbouncer"));
        // Its own log says so: another PgBouncer may answer on the port.
        let deadline = Instant::now() + PGLANE_START_TIMEOUT;
        while !bouncer.log().contains("process up") || TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "pgbouncer did not start on {port}:\n{}", bouncer.log());
            std::thread::sleep(POLL_INTERVAL);
        }
        bouncer
    }

    /// The directory of its unix socket (`.s.PGSQL.<port>`), its ini and its log.
    pub fn socket_dir(&self) -> &Path {
        &self.dir
    }

    /// Rewrites pgbouncer.ini (then `signal(SIGHUP)` reloads it).
    pub fn write_config(&self, databases: &str, settings: &str) {
        let dir = self.dir.display();
        let text = format!(
            "[databases]\n{databases}\n[pgbouncer]\nlisten_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir = {dir}\n\
             auth_type = trust\nauth_file = {dir}/users.txt\nadmin_users = postgres\nlogfile = {dir}/pgbouncer.log\n\
             pidfile = {dir}/pgbouncer.pid\n{settings}\n",
            port = self.port
        );
        let path = self.dir.join("pgbouncer.ini");
        fs::write(&path, text).unwrap();
        give_to_pg_user(&path);
    }

    /// The pid of the PgBouncer process (runuser's child when root).
    pub fn pid(&self) -> i32 {
        let text = fs::read_to_string(self.dir.join("pgbouncer.pid")).unwrap_or_default();
        text.trim().parse().unwrap_or_else(|_| panic!("no pgbouncer.pid:\n{}", self.log()))
    }

    pub fn signal(&self, sig: libc::c_int) {
        // SAFETY: kill(2) has no memory-safety preconditions.
        unsafe { libc::kill(self.pid(), sig) };
    }

    fn running_pid(&self) -> Option<i32> {
        fs::read_to_string(self.dir.join("pgbouncer.pid")).ok()?.trim().parse().ok()
    }

    pub fn log(&self) -> String {
        fs::read_to_string(self.dir.join("pgbouncer.log")).unwrap_or_default()
    }

    /// Waits up to `limit` for it to exit by itself; true if it did.
    pub fn wait_exit(&mut self, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        while let Some(child) = self.child.as_mut() {
            if let Ok(Some(_)) = child.try_wait() {
                self.child = None;
                return true;
            }
            if Instant::now() > deadline {
                return false;
            }
            std::thread::sleep(POLL_INTERVAL);
        }
        true
    }
}

impl Drop for Pgbouncer {
    fn drop(&mut self) {
        if let (Some(_), Some(pid)) = (&self.child, self.running_pid()) {
            // SAFETY: kill(2) has no memory-safety preconditions.
            unsafe { libc::kill(pid, libc::SIGINT) };
            if !self.wait_exit(Duration::from_secs(5)) {
                unsafe { libc::kill(pid, libc::SIGKILL) };
                self.wait_exit(Duration::from_secs(5));
            }
        }
        remove_temp_dir(&self.dir);
    }
}

// ---------------------------------------------------------------------------
// Clients
// ---------------------------------------------------------------------------

/// Connects with tokio-postgres (NoTls) to 127.0.0.1:`port` and spawns the
/// connection task onto the current tokio runtime. Panics on failure.
pub async fn connect(port: u16, user: &str, password: &str, db: &str) -> tokio_postgres::Client {
    try_connect(port, user, password, db)
        .await
        .unwrap_or_else(|e| panic!("connect to 127.0.0.1:{port} as {user} db {db} failed: {e}"))
}

/// An admin console SHOW whose one row is all numbers (SHOW NOTIFY on one
/// shard), by column name.
pub async fn show_numbers(port: u16, user: &str, password: &str, show: &str) -> std::collections::HashMap<String, u64> {
    let console = connect(port, user, password, "pgbouncer").await;
    let rows = console.simple_query(show).await.unwrap();
    let row = rows
        .iter()
        .find_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(r) => Some(r),
            _ => None,
        })
        .expect("a row");
    row.columns().iter().enumerate().map(|(i, c)| (c.name().to_owned(), row.get(i).unwrap().parse().unwrap())).collect()
}

/// Like [`connect`] but returns the error (e.g. to check its SQLSTATE).
pub async fn try_connect(
    port: u16,
    user: &str,
    password: &str,
    db: &str,
) -> Result<tokio_postgres::Client, tokio_postgres::Error> {
    try_connect_with_options(port, user, password, db, None).await
}

/// Like [`try_connect`], with an `options` startup parameter (`-c name=value ...`).
pub async fn try_connect_with_options(
    port: u16,
    user: &str,
    password: &str,
    db: &str,
    options: Option<&str>,
) -> Result<tokio_postgres::Client, tokio_postgres::Error> {
    let mut config = tokio_postgres::Config::new();
    config.host("127.0.0.1").port(port).user(user).password(password).dbname(db).connect_timeout(Duration::from_secs(10));
    if let Some(options) = options {
        config.options(options);
    }
    let (client, connection) = config.connect(tokio_postgres::NoTls).await?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok(client)
}

/// keyword=value TCP connection string.
pub fn conn_str(port: u16, user: &str, password: &str, db: &str) -> String {
    format!("host=127.0.0.1 port={port} user={user} password={password} dbname={db}")
}

/// `postgres://user:password@127.0.0.1:port/db` (no escaping: test names only).
pub fn tcp_url(port: u16, user: &str, password: &str, db: &str) -> String {
    format!("postgres://{user}:{password}@127.0.0.1:{port}/{db}")
}

// ---------------------------------------------------------------------------
// Small utilities
// ---------------------------------------------------------------------------

/// A TCP port on 127.0.0.1 that was free a moment ago (bind to port 0).
/// The pglane binary under test: `PGLANE_BIN`, else cargo's.
pub fn pglane_bin() -> PathBuf {
    std::env::var_os("PGLANE_BIN").map_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_pglane")), PathBuf::from)
}

/// Runs pgbench against 127.0.0.1:`port` as `user` (the harness's
/// password for `postgres`; trusted roles ignore it) with `args`, and
/// returns what it printed; panics with that if it failed.
pub fn pgbench(port: u16, user: &str, args: &[&str]) -> String {
    let out = Command::new("pgbench")
        .args(args)
        .args(["-h", "127.0.0.1", "-p", &port.to_string(), "-U", user])
        .env("PGPASSWORD", "secret")
        .output()
        .expect("pgbench runs");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "pgbench {args:?} failed:\n{text}");
    text
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("bind 127.0.0.1:0").port()
}

fn is_root() -> bool {
    // SAFETY: geteuid(2) has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

fn keep_tmp() -> bool {
    std::env::var_os("PGLANE_KEEP_TMP").is_some_and(|v| !v.is_empty() && v != "0")
}

fn temp_root() -> PathBuf {
    std::env::var_os("PGLANE_TEST_TMP").map_or_else(std::env::temp_dir, PathBuf::from)
}

/// A fresh, empty `<temp root>/pglane-<kind>-<pid>-<n>`.
fn make_temp_dir(kind: &str) -> PathBuf {
    static COUNTER: AtomicUsize = AtomicUsize::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let dir = temp_root().join(format!("pglane-{kind}-{}-{n}", std::process::id()));
    let _ = fs::remove_dir_all(&dir); // stale leftover from a reused pid
    fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("create {}: {e}", dir.display()));
    dir
}

fn remove_temp_dir(dir: &Path) {
    if !keep_tmp() {
        let _ = fs::remove_dir_all(dir);
    }
}

/// When root, hands `path` to the PostgreSQL OS user so the server (or a
/// PgBouncer) can use it.
pub fn give_to_pg_user(path: &Path) {
    if !is_root() {
        return;
    }
    let (uid, gid) = pg_user_ids();
    std::os::unix::fs::chown(path, Some(uid), Some(gid))
        .unwrap_or_else(|e| panic!("chown {} to {PG_OS_USER}: {e}", path.display()));
}

fn pg_user_ids() -> (u32, u32) {
    let name = CString::new(PG_OS_USER).unwrap();
    // SAFETY: getpwnam returns NULL or a pointer to a static passwd entry that
    // we read immediately (tests never call getpwnam concurrently elsewhere).
    unsafe {
        let pw = libc::getpwnam(name.as_ptr());
        assert!(!pw.is_null(), "running as root but OS user {PG_OS_USER:?} does not exist (install the postgresql package)");
        ((*pw).pw_uid, (*pw).pw_gid)
    }
}

/// A command for a PostgreSQL server program: run as the PostgreSQL OS user
/// when we are root (PostgreSQL refuses root), with `cwd` as working dir (the
/// repo may be unreadable to that user) and no PG* variables leaking in.
fn pg_user_command(program: impl AsRef<OsStr>, cwd: &Path) -> Command {
    let mut cmd = if is_root() {
        let mut cmd = Command::new("runuser");
        cmd.args(["-u", PG_OS_USER, "--"]).arg(program);
        cmd
    } else {
        Command::new(program)
    };
    cmd.current_dir(cwd);
    clear_pg_env(&mut cmd);
    cmd
}

fn clear_pg_env(cmd: &mut Command) {
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("PG") {
            cmd.env_remove(key);
        }
    }
}

/// Runs to completion; Ok(stdout) on success, Err(command + status + output) otherwise.
fn run(cmd: &mut Command) -> Result<String, String> {
    let out = cmd.stdin(Stdio::null()).output().map_err(|e| format!("cannot run {cmd:?}: {e}"))?;
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    if out.status.success() {
        return Ok(stdout);
    }
    let mut msg = format!("{cmd:?} exited with {}", out.status);
    let _ = write!(msg, "\n--- stdout ---\n{stdout}");
    let _ = write!(msg, "\n--- stderr ---\n{}", String::from_utf8_lossy(&out.stderr));
    Err(msg)
}

/// Spawns `sh -c SCRIPT sh ARGS...` detached (own process group, so a Ctrl-C
/// aimed at the test run does not kill it) and never waits for it: it exits
/// only after this process, so it cannot become our zombie.
#[allow(clippy::zombie_processes)]
fn spawn_watchdog(script: &str, args: &[&OsStr]) {
    Command::new("sh")
        .arg("-c")
        .arg(script)
        .arg("sh")
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .expect("spawn watchdog shell");
}

fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "<non-string panic>".to_string())
}
