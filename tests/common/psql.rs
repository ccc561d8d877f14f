//! `psql` as a test client: the one way the integration tests run it.
//!
//! Tests use psql where a real client's own behaviour is the point (its
//! `\copy`, `\conninfo`, TLS modes, notices on stderr, the admin console the
//! way an operator reads it) and for setup through PostgreSQL's unix socket.
//! Every run is the same: no `~/.psqlrc` (`-X`), unaligned output (`-A`),
//! quiet (`-q`), `ON_ERROR_STOP`, none of the caller's `PG*` variables,
//! `connect_timeout=10`, and the whole run bounded by [`PSQL_TIME_LIMIT`],
//! so a test that waits on a hung pooler fails instead of hanging CI.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

/// How long one psql run may take before the test calls it hung.
pub const PSQL_TIME_LIMIT: Duration = Duration::from_secs(60);

/// One psql invocation, built up and then [`Psql::run`] (or [`Psql::output`]).
#[must_use]
pub struct Psql {
    conninfo: String,
    commands: Vec<String>,
    with_header: bool,
}

/// What a finished psql printed, and whether it succeeded.
#[derive(Debug)]
pub struct PsqlOutput {
    pub success: bool,
    /// stdout without trailing newlines.
    pub stdout: String,
    /// stderr (notices, errors) without trailing newlines.
    pub stderr: String,
}

impl Psql {
    /// psql over TCP to 127.0.0.1:`port`; an empty `password` sends none
    /// (trust auth).
    pub fn tcp(port: u16, user: &str, password: &str, db: &str) -> Psql {
        let mut conninfo = format!("host=127.0.0.1 port={port} user={user} dbname={db} connect_timeout=10");
        if !password.is_empty() {
            conninfo.push_str(&format!(" password={password}"));
        }
        Psql { conninfo, commands: Vec::new(), with_header: false }
    }

    /// psql over the unix socket `<dir>/.s.PGSQL.<port>`, as `psql -h DIR -p PORT` finds it.
    pub fn socket(dir: &Path, port: u16, user: &str, db: &str) -> Psql {
        let conninfo = format!("host={} port={port} user={user} dbname={db} connect_timeout=10", dir.display());
        Psql { conninfo, commands: Vec::new(), with_header: false }
    }

    /// More `key=value` connection parameters (`sslmode=require ...`); a key
    /// given again overrides the earlier one, as in libpq.
    pub fn conninfo(mut self, extra: &str) -> Psql {
        self.conninfo.push(' ');
        self.conninfo.push_str(extra);
        self
    }

    /// A `-c` command; several run in order, each as its own Query.
    pub fn command(mut self, sql: &str) -> Psql {
        self.commands.push(sql.to_owned());
        self
    }

    /// Prints the column names as the first line and separates fields with
    /// `|`, as an operator reads `SHOW POOLS`; otherwise only rows are printed.
    pub fn with_header(mut self) -> Psql {
        self.with_header = true;
        self
    }

    /// Runs psql: Ok(stdout) if it succeeded, else Err(stderr, or why it did not finish).
    pub fn run(self) -> Result<String, String> {
        let out = self.output();
        if out.success {
            Ok(out.stdout)
        } else {
            Err(out.stderr)
        }
    }

    /// Runs psql and returns everything it printed, for tests that read its stderr too.
    pub fn output(self) -> PsqlOutput {
        let psql = super::pg_bin_dir().join("psql");
        let psql = if psql.exists() { psql.into_os_string() } else { "psql".into() };
        let mut cmd = Command::new("timeout");
        super::clear_pg_env(&mut cmd);
        cmd.args(["-k", "5", &PSQL_TIME_LIMIT.as_secs().to_string()]).arg(psql);
        cmd.args(["-X", "-A", "-q", "-v", "ON_ERROR_STOP=1"]);
        if self.with_header {
            cmd.args(["-F", "|"]);
        } else {
            cmd.arg("-t");
        }
        for sql in &self.commands {
            cmd.args(["-c", sql]);
        }
        cmd.arg(&self.conninfo);
        let out = cmd.stdin(Stdio::null()).output().unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
        let stdout = String::from_utf8_lossy(&out.stdout).trim_end_matches('\n').to_owned();
        let mut stderr = String::from_utf8_lossy(&out.stderr).trim_end_matches('\n').to_owned();
        // timeout(1) exits with 124 when it had to stop psql.
        if out.status.code() == Some(124) {
            stderr = format!("psql did not finish within {PSQL_TIME_LIMIT:?} ({}): {stderr}", self.conninfo);
        } else if !out.status.success() && stderr.is_empty() {
            stderr = format!("psql exited with {} ({})", out.status, self.conninfo);
        }
        PsqlOutput { success: out.status.success(), stdout, stderr }
    }
}
