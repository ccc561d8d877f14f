//! The command line, spelled as pgbench spells it where pgbench has the same
//! option, and its checks.
//!
//! This module owns turning arguments and the libpq environment variables
//! (PGHOST, PGPORT, PGUSER, PGDATABASE, PGPASSWORD) into a checked [`Plan`].
//! Every mistake is reported here, before a connection is opened; nothing
//! after this module has to validate an option again.

use std::path::PathBuf;
use std::time::Duration;

use clap::{ArgAction, Parser, ValueEnum};
use pglane::config::SslMode;
use thiserror::Error;

use crate::conn::{ConnectParams, Endpoint};
use crate::scenario::{Builtin, DEFAULT_UUID_ROWS};
use crate::script::{Script, ScriptError};

const EXAMPLES: &str = "\
Examples:
  pgload -i -s 10 bench                      create pgbench tables at scale 10, then stop
  pgload -c 8 -T 10 bench                    pgbench -S equivalent: 8 connections for 10 s
  pgload -M prepared -c 64 -j 2 -T 30 bench  named prepared statements, 64 connections, 2 cores
  pgload -b uuid-fetch --result-format binary -c 2 -t 5 bench
  pgload -f my.sql -R 5000 -T 60 -p 6432 app  a custom script, open loop at 5000 tx/s

Connection defaults follow libpq: -h from PGHOST (else /var/run/postgresql),
-p from PGPORT (else 5432), -U from PGUSER (else the OS user), the database from
PGDATABASE (else the user name), --sslmode from PGSSLMODE (else prefer: TLS if
the server offers it; never on a unix socket), --sslrootcert from PGSSLROOTCERT.
The password comes only from PGPASSWORD.

Exit status: 0 all transactions succeeded, 1 pgload could not run (bad options,
no connection, setup failed), 2 the run finished but some transactions failed.";

/// pgload: a thread-per-core PostgreSQL load generator.
///
/// Opens --connections connections spread over --cores pinned threads, runs a
/// scenario's script on each in a loop (or at --rate transactions per second),
/// prints a progress line each second on a terminal and a final report with
/// throughput, latency percentiles, errors by SQLSTATE and bytes on the wire.
#[derive(Debug, Parser)]
#[command(name = "pgload", version, disable_help_flag = true, after_help = EXAMPLES)]
pub struct Options {
    /// Database server host, or a unix-socket directory if it starts with '/'
    #[arg(short = 'h', long, value_name = "HOST", help_heading = "Connection")]
    pub host: Option<String>,

    /// Database server port
    #[arg(short = 'p', long, value_name = "PORT", help_heading = "Connection")]
    pub port: Option<u16>,

    /// User name to connect as
    #[arg(short = 'U', long = "username", value_name = "USER", help_heading = "Connection")]
    pub user: Option<String>,

    /// Seconds to wait for each connection to open and log in
    #[arg(long, value_name = "SECS", default_value_t = 10.0, help_heading = "Connection")]
    pub connect_timeout: f64,

    /// TLS as libpq's sslmode: disable, allow, prefer, require, verify-ca or
    /// verify-full [default: PGSSLMODE, else prefer]
    #[arg(long, value_name = "MODE", value_parser = parse_sslmode, help_heading = "Connection")]
    pub sslmode: Option<SslMode>,

    /// CA certificate file that verify-ca and verify-full check the server's
    /// certificate against [default: PGSSLROOTCERT, else ~/.postgresql/root.crt if it exists]
    #[arg(long, value_name = "FILE", help_heading = "Connection")]
    pub sslrootcert: Option<PathBuf>,

    /// Database to connect to
    #[arg(value_name = "DBNAME")]
    pub dbname: Option<String>,

    /// Built-in scenario to run
    #[arg(short = 'b', long, value_enum, default_value = "select-only", help_heading = "Workload")]
    pub scenario: Builtin,

    /// Run this script instead of a built-in scenario (\set lines and SQL with :variables)
    #[arg(short = 'f', long, value_name = "FILE", conflicts_with = "scenario", help_heading = "Workload")]
    pub file: Option<PathBuf>,

    /// Scale of the data (x 100,000 accounts); default: what the database has, else 1
    #[arg(short = 's', long, value_name = "N", help_heading = "Workload")]
    pub scale: Option<u32>,

    /// Rows in the uuid-fetch table (each uuid-fetch transaction fetches all of them)
    #[arg(long, value_name = "N", help_heading = "Workload")]
    pub rows: Option<u64>,

    /// Only create the scenario's data, then exit
    #[arg(short = 'i', long, help_heading = "Workload")]
    pub initialize: bool,

    /// Do not check or create the scenario's data before running
    #[arg(long, conflicts_with = "initialize", help_heading = "Workload")]
    pub no_setup: bool,

    /// How statements are sent: simple (Query), extended (unnamed Parse/Bind/Execute
    /// each time, like pgjdbc with prepareThreshold=0) or prepared (named, parsed once
    /// per connection)
    #[arg(short = 'M', long, value_enum, default_value = "simple", help_heading = "Protocol")]
    pub protocol: Protocol,

    /// Format the server sends result columns in (binary needs extended or prepared)
    #[arg(long, value_enum, default_value = "text", help_heading = "Protocol")]
    pub result_format: ResultFormat,

    /// Number of connections (pgbench's clients)
    #[arg(short = 'c', long, value_name = "N", default_value_t = 1, help_heading = "Load")]
    pub connections: usize,

    /// Threads, one pinned per core, that share the connections [default: all cores, at most one per connection]
    #[arg(short = 'j', long, value_name = "N", help_heading = "Load")]
    pub cores: Option<usize>,

    /// Run for this long (10, 10s, 500ms, 2m) [default: 10s]
    #[arg(short = 'T', long, value_name = "TIME", value_parser = parse_duration, help_heading = "Load")]
    pub duration: Option<Duration>,

    /// Run this many transactions per connection, instead of a duration
    #[arg(short = 't', long, value_name = "N", conflicts_with = "duration", help_heading = "Load")]
    pub transactions: Option<u64>,

    /// Open loop: start transactions at this total rate (per second, Poisson
    /// arrivals); latency then counts from the scheduled start
    #[arg(short = 'R', long, value_name = "TPS", help_heading = "Load")]
    pub rate: Option<f64>,

    /// Seed for the random variables, for repeatable runs
    #[arg(long, value_name = "N", help_heading = "Load")]
    pub seed: Option<u64>,

    /// Print a progress line every SECS seconds (0: never) [default: 1 on a terminal, else 0]
    #[arg(short = 'P', long, value_name = "SECS", help_heading = "Output")]
    pub progress: Option<u64>,

    /// Also write the final report as JSON to FILE
    #[arg(long, value_name = "FILE", help_heading = "Output")]
    pub json: Option<PathBuf>,

    /// Print help
    #[arg(long, action = ArgAction::Help, help_heading = "Output")]
    help: Option<bool>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Protocol {
    Simple,
    Extended,
    Prepared,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ResultFormat {
    Text,
    Binary,
}

/// What each connection runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Workload {
    Builtin(Builtin),
    File(PathBuf),
}

/// When a connection stops.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Stop {
    After(Duration),
    Transactions(u64),
}

/// A checked, complete description of a run.
#[derive(Debug, Clone)]
pub struct Plan {
    pub connect: ConnectParams,
    pub workload: Workload,
    pub script: Script,
    pub scale: Option<u32>,
    pub uuid_rows: u64,
    /// Check and create the scenario's data before running.
    pub setup: bool,
    /// Stop after setup.
    pub setup_only: bool,
    pub protocol: Protocol,
    pub result_format: ResultFormat,
    pub connections: usize,
    /// The CPU each core's thread is pinned to.
    pub cpus: Vec<usize>,
    pub stop: Stop,
    pub rate: Option<f64>,
    pub seed: Option<u64>,
    pub progress: Option<Duration>,
    pub json: Option<PathBuf>,
}

#[derive(Debug, Error)]
pub enum OptionsError {
    #[error("--result-format binary needs --protocol extended or prepared (the simple protocol returns text only)")]
    BinaryNeedsExtended,
    #[error("--{0} must be at least 1")]
    Zero(&'static str),
    #[error("--rate must be a positive number of transactions per second")]
    Rate,
    #[error("--connect-timeout must be a positive number of seconds")]
    ConnectTimeout,
    #[error("--rows applies to --scenario uuid-fetch only")]
    RowsWithoutUuidFetch,
    #[error("--initialize creates a built-in scenario's data; a --file script has none")]
    InitializeFile,
    #[error("cannot read {path}: {source}")]
    ReadFile { path: PathBuf, source: std::io::Error },
    #[error("{path}: {source}")]
    Script { path: String, source: ScriptError },
    #[error("PGSSLMODE: {0}")]
    SslMode(String),
}

impl Options {
    /// Checks the options and fills in defaults; `env` looks up environment
    /// variables (a parameter, so tests can pass their own).
    pub fn into_plan(self, env: impl Fn(&str) -> Option<String>, online_cpus: &[usize]) -> Result<Plan, OptionsError> {
        if self.result_format == ResultFormat::Binary && self.protocol == Protocol::Simple {
            return Err(OptionsError::BinaryNeedsExtended);
        }
        if self.connections == 0 {
            return Err(OptionsError::Zero("connections"));
        }
        if self.cores == Some(0) {
            return Err(OptionsError::Zero("cores"));
        }
        if self.transactions == Some(0) {
            return Err(OptionsError::Zero("transactions"));
        }
        if self.scale == Some(0) {
            return Err(OptionsError::Zero("scale"));
        }
        if self.rows == Some(0) {
            return Err(OptionsError::Zero("rows"));
        }
        if self.rate.is_some_and(|r| !(r.is_finite() && r > 0.0)) {
            return Err(OptionsError::Rate);
        }
        if !(self.connect_timeout.is_finite() && self.connect_timeout > 0.0) {
            return Err(OptionsError::ConnectTimeout);
        }
        let workload = match self.file {
            Some(path) => Workload::File(path),
            None => Workload::Builtin(self.scenario),
        };
        if self.rows.is_some() && workload != Workload::Builtin(Builtin::UuidFetch) {
            return Err(OptionsError::RowsWithoutUuidFetch);
        }
        let script = match &workload {
            Workload::Builtin(b) => {
                Script::parse(b.script()).map_err(|source| OptionsError::Script { path: format!("built-in {b:?}"), source })?
            }
            Workload::File(path) => {
                if self.initialize {
                    return Err(OptionsError::InitializeFile);
                }
                let text =
                    std::fs::read_to_string(path).map_err(|source| OptionsError::ReadFile { path: path.clone(), source })?;
                Script::parse(&text).map_err(|source| OptionsError::Script { path: path.display().to_string(), source })?
            }
        };

        let host = self.host.or_else(|| env("PGHOST")).unwrap_or_else(|| "/var/run/postgresql".to_owned());
        let port = self.port.or_else(|| env("PGPORT").and_then(|p| p.parse().ok())).unwrap_or(5432);
        let user = self.user.or_else(|| env("PGUSER")).or_else(|| env("USER")).unwrap_or_else(|| "postgres".to_owned());
        let database = self.dbname.or_else(|| env("PGDATABASE")).unwrap_or_else(|| user.clone());
        let sslmode = match self.sslmode {
            Some(mode) => mode,
            None => {
                env("PGSSLMODE").map(|m| parse_sslmode(&m)).transpose().map_err(OptionsError::SslMode)?.unwrap_or(SslMode::Prefer)
            }
        };
        let sslrootcert = self.sslrootcert.or_else(|| env("PGSSLROOTCERT").map(PathBuf::from)).or_else(|| {
            let default = PathBuf::from(env("HOME")?).join(".postgresql/root.crt");
            default.exists().then_some(default)
        });

        let cores = self.cores.unwrap_or(online_cpus.len().max(1)).min(self.connections);
        let online = if online_cpus.is_empty() { &[0][..] } else { online_cpus };
        let cpus = (0..cores).map(|i| online[i % online.len()]).collect();

        let progress_secs = self.progress.unwrap_or_else(|| u64::from(std::io::IsTerminal::is_terminal(&std::io::stderr())));
        Ok(Plan {
            connect: ConnectParams {
                endpoint: Endpoint::new(&host, port),
                user,
                database,
                password: env("PGPASSWORD"),
                connect_timeout: Duration::from_secs_f64(self.connect_timeout),
                sslmode,
                sslrootcert,
            },
            setup: !self.no_setup && matches!(workload, Workload::Builtin(_)),
            setup_only: self.initialize,
            workload,
            script,
            scale: self.scale,
            uuid_rows: self.rows.unwrap_or(DEFAULT_UUID_ROWS),
            protocol: self.protocol,
            result_format: self.result_format,
            connections: self.connections,
            cpus,
            stop: match self.transactions {
                Some(n) => Stop::Transactions(n),
                None => Stop::After(self.duration.unwrap_or(Duration::from_secs(10))),
            },
            rate: self.rate,
            seed: self.seed,
            progress: (progress_secs > 0).then(|| Duration::from_secs(progress_secs)),
            json: self.json,
        })
    }
}

/// libpq's sslmode names.
fn parse_sslmode(s: &str) -> Result<SslMode, String> {
    Ok(match s {
        "disable" => SslMode::Disable,
        "allow" => SslMode::Allow,
        "prefer" => SslMode::Prefer,
        "require" => SslMode::Require,
        "verify-ca" => SslMode::VerifyCa,
        "verify-full" => SslMode::VerifyFull,
        other => return Err(format!("invalid sslmode {other:?}: disable, allow, prefer, require, verify-ca or verify-full")),
    })
}

/// `10`, `10s`, `1.5s`, `500ms`, `2m`: a bare number is seconds, as in pgbench -T.
fn parse_duration(s: &str) -> Result<Duration, String> {
    let (number, unit) = match s.find(|c: char| !(c.is_ascii_digit() || c == '.')) {
        Some(i) => s.split_at(i),
        None => (s, "s"),
    };
    let n: f64 = number.parse().map_err(|_| format!("'{s}' is not a duration (try 10, 10s, 500ms or 2m)"))?;
    let secs = match unit {
        "ms" => n / 1000.0,
        "s" => n,
        "m" | "min" => n * 60.0,
        _ => return Err(format!("unknown unit '{unit}' in '{s}' (use ms, s or m)")),
    };
    if !(secs.is_finite() && secs > 0.0) {
        return Err(format!("duration '{s}' must be positive"));
    }
    Ok(Duration::from_secs_f64(secs))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn plan(args: &[&str]) -> Result<Plan, String> {
        plan_env(args, &[])
    }

    fn plan_env(args: &[&str], vars: &[(&str, &str)]) -> Result<Plan, String> {
        let options =
            Options::try_parse_from(std::iter::once("pgload").chain(args.iter().copied())).map_err(|e| e.to_string())?;
        let env = |k: &str| vars.iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string());
        options.into_plan(env, &[0, 1]).map_err(|e| e.to_string())
    }

    #[test]
    fn pgbench_spelling() {
        let p =
            plan(&["-h", "db.local", "-p", "6432", "-U", "alice", "-c", "8", "-j", "2", "-T", "30", "-M", "prepared", "bench"])
                .unwrap();
        assert_eq!(p.connect.endpoint, Endpoint::Tcp { host: "db.local".into(), port: 6432 });
        assert_eq!((p.connect.user.as_str(), p.connect.database.as_str()), ("alice", "bench"));
        assert_eq!((p.connections, p.cpus.len(), p.protocol), (8, 2, Protocol::Prepared));
        assert_eq!(p.stop, Stop::After(Duration::from_secs(30)));
        assert_eq!(p.workload, Workload::Builtin(Builtin::SelectOnly));
        assert!(p.setup && !p.setup_only);
    }

    #[test]
    fn libpq_environment_fills_the_gaps() {
        let p = plan_env(&["-t", "5"], &[("PGHOST", "/tmp/pg"), ("PGPORT", "5433"), ("PGUSER", "bob"), ("PGPASSWORD", "pw")])
            .unwrap();
        assert_eq!(p.connect.endpoint, Endpoint::Unix("/tmp/pg/.s.PGSQL.5433".into()));
        assert_eq!((p.connect.user.as_str(), p.connect.database.as_str()), ("bob", "bob"));
        assert_eq!(p.connect.password.as_deref(), Some("pw"));
        assert_eq!(p.stop, Stop::Transactions(5));
        let p = plan_env(&["-U", "carol"], &[("PGDATABASE", "shop"), ("PGUSER", "bob")]).unwrap();
        assert_eq!((p.connect.user.as_str(), p.connect.database.as_str()), ("carol", "shop"));
        assert_eq!(p.connect.endpoint, Endpoint::Unix("/var/run/postgresql/.s.PGSQL.5432".into()));
        assert_eq!(p.connect.password, None);
    }

    #[test]
    fn sslmode_as_libpq() {
        let p = plan(&[]).unwrap();
        assert_eq!((p.connect.sslmode, p.connect.sslrootcert), (SslMode::Prefer, None), "libpq's default");
        let p = plan_env(&[], &[("PGSSLMODE", "verify-full"), ("PGSSLROOTCERT", "/etc/ca.pem")]).unwrap();
        assert_eq!((p.connect.sslmode, p.connect.sslrootcert.as_deref()), (SslMode::VerifyFull, Some(Path::new("/etc/ca.pem"))));
        let p = plan_env(&["--sslmode", "disable", "--sslrootcert", "ca.pem"], &[("PGSSLMODE", "require")]).unwrap();
        assert_eq!((p.connect.sslmode, p.connect.sslrootcert.as_deref()), (SslMode::Disable, Some(Path::new("ca.pem"))));
        for mode in ["allow", "prefer", "require", "verify-ca"] {
            assert_eq!(plan(&["--sslmode", mode]).unwrap().connect.sslmode.to_string(), mode);
        }
        assert!(plan(&["--sslmode", "on"]).unwrap_err().contains("invalid sslmode \"on\""));
        assert!(plan_env(&[], &[("PGSSLMODE", "yes")]).unwrap_err().contains("PGSSLMODE: invalid sslmode"));
    }

    #[test]
    fn cores_never_exceed_connections() {
        assert_eq!(plan(&["-c", "1"]).unwrap().cpus, vec![0]);
        assert_eq!(plan(&["-c", "100"]).unwrap().cpus, vec![0, 1]);
        assert_eq!(plan(&["-c", "100", "-j", "3"]).unwrap().cpus, vec![0, 1, 0]);
    }

    #[test]
    fn durations() {
        for (text, want) in [("10", 10_000), ("10s", 10_000), ("1.5s", 1_500), ("500ms", 500), ("2m", 120_000)] {
            assert_eq!(parse_duration(text), Ok(Duration::from_millis(want)), "{text}");
        }
        for bad in ["", "0", "-1", "10h", "s", "1.2.3s"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn mistakes_are_explained() {
        let err = |args: &[&str]| plan(args).unwrap_err();
        assert!(err(&["-M", "simple", "--result-format", "binary"]).contains("needs --protocol extended or prepared"));
        assert!(err(&["-c", "0"]).contains("--connections must be at least 1"));
        assert!(err(&["-j", "0"]).contains("--cores"));
        assert!(err(&["-R", "0"]).contains("--rate"));
        assert!(err(&["-T", "5", "-t", "5"]).contains("cannot be used with"));
        assert!(err(&["--rows", "10"]).contains("uuid-fetch only"));
        assert!(err(&["-M", "fast"]).contains("invalid value 'fast'"));
        assert!(err(&["-f", "/nonexistent/x.sql"]).contains("cannot read /nonexistent/x.sql"));
        assert!(err(&["-b", "insert", "-f", "x.sql"]).contains("cannot be used with"));
        assert!(plan(&["-b", "uuid-fetch", "--rows", "10", "-M", "extended", "--result-format", "binary"]).is_ok());
    }

    #[test]
    fn help_reads_like_pgbench() {
        let help = Options::try_parse_from(["pgload", "--help"]).unwrap_err().to_string();
        for needle in
            ["-h, --host", "-p, --port", "-U, --username", "[DBNAME]", "PGPASSWORD", "--protocol", "select-only", "uuid-fetch"]
        {
            assert!(help.contains(needle), "--help lacks {needle:?}:\n{help}");
        }
    }
}
