//! Running pglane from an existing PgBouncer configuration (`--pgbouncer-ini`).
//!
//! This module owns translating a pgbouncer.ini, the files it `%include`s and
//! its auth_file into the TOML document pglane would have read, and from there
//! into an ordinary [`Config`] that has passed [`Config::validate`]: nothing
//! downstream knows where a config came from. It is pure — files are read
//! through a loader the caller passes, except in [`load`], the file-system
//! entry point — and it returns what it reads differently from PgBouncer as
//! [`Warning`]s rather than logging them. It never starts anything and never prints a
//! secret.
//!
//! One format per submodule: [`ini`] (sections, comments, `%include`),
//! [`connstr`] (the `[databases]` and `[users]` strings), [`userlist`] (the
//! auth_file), and [`unsupported`] (what pglane does with the settings it
//! does not carry over: accept or refuse).
//!
//! # What carries over
//!
//! | PgBouncer | pglane |
//! |---|---|
//! | `listen_addr` (every address; `*` → `0.0.0.0`, `localhost` → `127.0.0.1`) + `listen_port` | `listen` |
//! | `pool_mode` (`statement` → `transaction`, with a warning) | `pool_mode` |
//! | `auth_type`, `auth_file` | `auth_type`, `[users.NAME] password` (see below) |
//! | `auth_type = hba`, `auth_hba_file` (relative to the ini file) | the same; see `crate::auth::hba` for the supported subset |
//! | `auth_user`, `auth_query`, `auth_dbname` | the same, globally and per `[databases]` entry |
//! | `admin_users`, `stats_users` | the same lists |
//! | `max_client_conn`, `server_reset_query`, `server_reset_query_always`, `application_name_add_host` | the same |
//! | `logfile`, `pidfile` (relative to the ini file) | the same |
//! | `log_connections`, `log_disconnections`, `log_pooler_errors` | the same: the client login, logout and refusal lines |
//! | `log_stats`, `stats_period` | the same: PgBouncer's stats line, over all shards |
//! | `verbose` (above 2: 2) | the same: 1 adds debug lines, 2 trace lines |
//! | `scram_iterations` | the same, for the SCRAM verifiers pglane derives from plaintext passwords |
//! | `query_wait_notify` (PgBouncer's default 5 when unset) | the same: PgBouncer's NOTICE to a client waiting that long for a server connection |
//! | `max_db_connections`, `max_user_connections` (global, per `[databases]` entry, per `[users]` entry) | the same, exact over all shards (`crate::pool::budget`) |
//! | `max_db_client_connections`, `max_user_client_connections` (global, per `[databases]` entry, per `[users]` entry) | the same, exact over all shards (`crate::runtime::Shared::count_client`) |
//! | `min_pool_size` (global, per `[databases]` entry) | the same, over all shards |
//! | `reserve_pool_size`, `reserve_pool_timeout` (and a database's `reserve_pool` / `reserve_pool_size`) | the same, over all shards |
//! | `query_wait_timeout`, `server_connect_timeout`, `client_login_timeout` | the same, at most a year; 0 (no limit) → a year |
//! | `max_packet_size` | `max_message_size` |
//! | `max_prepared_statements` (0, "off", is warned and not carried over) | the same |
//! | `default_pool_size` | the same: each database's `pool_size` unless it sets its own |
//! | `unix_socket_dir` (default `/tmp`; empty: none) | `unix_socket_dir`, and `host` of databases without `host=` |
//! | `unix_socket_mode` | the same |
//! | `[databases]` `host port dbname user password pool_size pool_mode` | `[databases.NAME]`; `*` → `[databases."*"]` |
//! | `[databases]` `client_encoding datestyle timezone application_name` | `[databases.NAME] default_settings`: each client's, unless its startup packet sets them |
//! | `[databases]` `host=a,b port=5432,5433` (libpq's lists), `target_session_attrs`, `load_balance_hosts` | the same, as TOML lists |
//! | `so_reuseport` | the same (rolling restarts; see `crate::runtime::listeners`) |
//! | `listen_backlog`, `tcp_defer_accept`, `tcp_keepalive`, `tcp_keepidle`, `tcp_keepintvl`, `tcp_keepcnt`, `tcp_user_timeout`, `tcp_socket_buffer` | the same, on the same sockets (`crate::net::TcpTuning`) |
//! | `server_tls_sslmode` (PgBouncer's default `prefer` when unset) and the other `client_tls_*` / `server_tls_*` modes and files | the same |
//! | `[users]` `pool_mode` | `[users.NAME] pool_mode` |
//! | `peer_id`, `[peers]` `host port` | `peer_id`, `[peers.ID] host port` (a `pool_size` is warned: pglane opens a connection per forwarded cancel) |
//!
//! Every other PgBouncer setting and parameter is either accepted, because
//! pglane already behaves as it asks (or it means nothing to pglane), or
//! refused at start, at any value pglane cannot honour, with an error naming
//! the file, line, setting and value, the reason and what to do instead:
//! [`unsupported`] says which. None is ignored. What is read differently
//! (`statement` pooling, an unknown `[section]`)
//! becomes one [`Warning`] naming the file, line and setting. `auth_type` =
//! `cert`, `pam`, `ldap`, `any` (anything but trust, md5, scram-sha-256, hba
//! and plain) and `disable_pqexec = 1` are errors too. The `client_tls_*` /
//! `server_tls_*` modes and certificate files map onto pglane's settings of
//! the same names.
//!
//! # Decisions
//!
//! - PgBouncer's defaults are written out where they differ from pglane's: a
//!   file without `pool_mode` pools per session, without `auth_type` uses md5,
//!   without `max_client_conn` admits 100 clients, and a database without
//!   `host=` uses the unix socket in `unix_socket_dir` (default `/tmp`), and
//!   one with a host list and no `load_balance_hosts` spreads its connections
//!   over the hosts (`round-robin`).
//!   PgBouncer's `max_packet_size` default (2 GiB) is not: pglane keeps its own
//!   limit unless the file sets one.
//! - The `*` fallback database is `[databases."*"]`, with pglane's bound on
//!   how many names it serves at once (`max_fallback_databases`, 100 by
//!   default); pglane drops a name's pools once nothing uses them, in place
//!   of `autodb_idle_timeout`.
//! - `auth_type = md5` checks users whose secret is a SCRAM secret with SCRAM,
//!   as PgBouncer and PostgreSQL do, so an auth_file may mix both kinds.
//!   `plain` becomes `md5` when the auth_file holds md5 secrets, else
//!   `scram-sha-256` (warned: pglane asks clients for a cleartext password only
//!   on `password` lines of an auth_hba_file). With `auth_type = trust`,
//!   PgBouncer still admits only users in the auth_file, pglane any user
//!   (warned).
//! - Relative `%include` and `auth_file` paths are taken relative to the file
//!   that names them (PgBouncer: relative to its working directory).
//! - `[databases]` strings are unquoted as PgBouncer does (`''` is a quote, a
//!   backslash is an ordinary character), not as libpq does.
//! - With a TOML file as well ([`Import::overlay`]), the TOML is laid over the
//!   translated document: tables merge key by key, other values replace.

pub mod connstr;
pub mod ini;
pub mod unsupported;
pub mod userlist;

use std::collections::BTreeMap;
use std::fmt;
use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};

use thiserror::Error;
use toml::{Table, Value};

use self::ini::{Item, MAX_INCLUDE_DEPTH};
use self::unsupported::Treatment;
use super::{Config, ConfigError};
use crate::auth::secret::Secret;

/// PgBouncer's defaults where they differ from pglane's (or pglane has no such setting).
const DEFAULT_LISTEN_PORT: u16 = 6432;
const DEFAULT_POOL_MODE: &str = "session";
const DEFAULT_MAX_CLIENT_CONN: i64 = 100;
const DEFAULT_POOL_SIZE: i64 = 20;
const DEFAULT_UNIX_SOCKET_DIR: &str = "/tmp";
const DEFAULT_SERVER_PORT: u16 = 5432;
const DEFAULT_QUERY_WAIT_NOTIFY: f64 = 5.0;
/// What a PgBouncer timeout of 0 ("no limit") becomes: pglane's timeouts are
/// always on, and the longest it accepts is a year.
pub const UNLIMITED_SECONDS: f64 = super::MAX_TIMEOUT_SECS;

/// A line of a file.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Location {
    pub file: PathBuf,
    /// Counted from 1.
    pub line: usize,
}

impl Location {
    pub fn new(file: &Path, line: usize) -> Location {
        Location { file: file.to_owned(), line }
    }
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.file.display(), self.line)
    }
}

/// Something in the PgBouncer config that pglane ignores or reads differently.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Warning {
    pub at: Location,
    /// The setting, parameter or `[section]` as written in the file.
    pub setting: String,
    pub message: String,
}

impl fmt::Display for Warning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}: {}", self.at, self.setting, self.message)
    }
}

/// Why a PgBouncer config cannot run pglane. Messages name file and line, and
/// never quote a password.
#[derive(Debug, Error)]
pub enum IniError {
    #[error("cannot read {}: {source}", path.display())]
    Read { path: PathBuf, source: io::Error },
    #[error("{at}: cannot read {}: {source}", path.display())]
    ReadIncluded { at: Location, path: PathBuf, source: io::Error },
    #[error("{at}: {message}")]
    Syntax { at: Location, message: String },
    #[error("{at}: %include nests more than {MAX_INCLUDE_DEPTH} files deep")]
    IncludeTooDeep { at: Location },
    #[error("{at}: %include of {} is a cycle: that file is already being read", path.display())]
    IncludeCycle { at: Location, path: PathBuf },
    #[error("{at}: {setting}: {message}")]
    Invalid { at: Location, setting: String, message: String },
    #[error(
        "{at}: {key}: PgBouncer has no such {what}{}; it would not start with it, nor does pglane",
        did_you_mean(suggestion)
    )]
    Unknown { at: Location, what: &'static str, key: String, suggestion: Option<&'static str> },
    #[error("{at}: {setting} = {value} is not supported: {reason}")]
    Unsupported { at: Location, setting: String, value: String, reason: String },
    #[error(
        "{}: listen_addr is not set, so PgBouncer would listen on its unix socket only, which pglane does not do; \
         set listen_addr, or listen in the --config file",
        ini.display()
    )]
    NoListen { ini: PathBuf },
    #[error("{}: [databases] lists no database pglane can serve", ini.display())]
    NoDatabases { ini: PathBuf },
    #[error("{}: {source}", path.display())]
    Overlay { path: PathBuf, source: toml::de::Error },
    #[error(transparent)]
    Config(#[from] ConfigError),
}

fn did_you_mean(suggestion: &Option<&'static str>) -> String {
    suggestion.map(|name| format!(" (did you mean {name}?)")).unwrap_or_default()
}

/// The error for `key` that is no `what` of PgBouncer's, with the nearest of `known`.
fn unknown(line: &Line, what: &'static str, key: &str, known: impl IntoIterator<Item = &'static str>) -> IniError {
    IniError::Unknown { at: line.at.clone(), what, key: key.to_owned(), suggestion: unsupported::nearest(key, known) }
}

/// A pgbouncer.ini translated into pglane's TOML document, and what did not carry over.
#[derive(Debug, Clone)]
pub struct Import {
    ini: PathBuf,
    document: Table,
    warnings: Vec<Warning>,
}

impl Import {
    /// The document, in the shape of config/pglane.toml.
    pub fn document(&self) -> &Table {
        &self.document
    }

    pub fn warnings(&self) -> &[Warning] {
        &self.warnings
    }

    /// Lays a TOML config over the translation: tables merge key by key,
    /// other values replace what the pgbouncer.ini gave.
    pub fn overlay(&mut self, toml_text: &str) -> Result<(), toml::de::Error> {
        merge(&mut self.document, toml::from_str(toml_text)?);
        Ok(())
    }

    /// The validated config, and the warnings to show.
    pub fn into_config(self) -> Result<(Config, Vec<Warning>), IniError> {
        if !self.document.contains_key("listen") {
            return Err(IniError::NoListen { ini: self.ini });
        }
        if self.document.get("databases").and_then(Value::as_table).is_none_or(Table::is_empty) {
            return Err(IniError::NoDatabases { ini: self.ini });
        }
        let config: Config = Value::Table(self.document).try_into().map_err(ConfigError::Parse)?;
        config.validate()?;
        Ok((config, self.warnings))
    }
}

/// Reads pgbouncer.ini `text`, found at `path`, and the files it names
/// (`%include`, auth_file) through `files`.
pub fn import(path: &Path, text: &str, files: &dyn Fn(&Path) -> io::Result<String>) -> Result<Import, IniError> {
    let mut translation = Translation { files, document: Table::new(), warnings: Vec::new() };
    let sections = translation.sections(ini::read(path, text, files)?);
    translation.translate(sections)?;
    let Translation { document, mut warnings, .. } = translation;
    warnings.sort_by(|a, b| a.at.cmp(&b.at));
    Ok(Import { ini: path.to_owned(), document, warnings })
}

/// [`import`] straight to a validated config.
pub fn parse(path: &Path, text: &str, files: &dyn Fn(&Path) -> io::Result<String>) -> Result<(Config, Vec<Warning>), IniError> {
    import(path, text, files)?.into_config()
}

/// Reads `ini` and its files from the file system, with `sets` (the admin
/// console's SETs) as `[pgbouncer]` lines after its own, and, if given,
/// lays the TOML config `overlay` over it.
pub fn load(ini: &Path, overlay: Option<&Path>, sets: &[(String, String)]) -> Result<(Config, Vec<Warning>), IniError> {
    let read = |path: &Path| std::fs::read_to_string(path);
    let mut text = read(ini).map_err(|source| IniError::Read { path: ini.to_owned(), source })?;
    text.push_str(&console_sets(sets));
    let mut import = import(ini, &text, &read)?;
    if let Some(path) = overlay {
        let text = read(path).map_err(|source| IniError::Read { path: path.to_owned(), source })?;
        import.overlay(&text).map_err(|source| IniError::Overlay { path: path.to_owned(), source })?;
    }
    import.into_config()
}

/// The admin console's SETs as a `[pgbouncer]` section to append to the
/// file's text (a later line for a key replaces an earlier one).
fn console_sets(sets: &[(String, String)]) -> String {
    if sets.is_empty() {
        return String::new();
    }
    let mut section = String::from("\n[pgbouncer]\n");
    for (key, value) in sets {
        section.push_str(&format!("{key} = {value}\n"));
    }
    section
}

fn merge(base: &mut Table, top: Table) {
    for (key, value) in top {
        match (base.get_mut(&key), value) {
            (Some(Value::Table(below)), Value::Table(above)) => merge(below, above),
            (_, value) => {
                base.insert(key, value);
            }
        }
    }
}

/// One `key = value` line.
#[derive(Debug, Clone)]
struct Line {
    value: String,
    at: Location,
}

/// The settings of the three sections pglane reads; a later line for the
/// same key replaces an earlier one, as in PgBouncer.
#[derive(Debug, Default)]
struct Sections {
    pgbouncer: BTreeMap<String, Line>,
    databases: BTreeMap<String, Line>,
    users: BTreeMap<String, Line>,
    peers: BTreeMap<String, Line>,
}

/// What the other sections and the auth_file need from `[pgbouncer]`.
struct Globals {
    unix_socket_dir: String,
    auth_type: Option<Line>,
    auth_file: Option<Line>,
    auth_hba_file: Option<Line>,
}

struct Translation<'a> {
    files: &'a dyn Fn(&Path) -> io::Result<String>,
    document: Table,
    warnings: Vec<Warning>,
}

impl Translation<'_> {
    fn sections(&mut self, items: Vec<Item>) -> Sections {
        let mut sections = Sections::default();
        for item in items {
            match item {
                Item::Section { name, at } => {
                    let reason = match name.as_str() {
                        "pgbouncer" | "databases" | "users" | "peers" => continue,
                        _ => "ignored: not a PgBouncer section pglane knows of",
                    };
                    self.warn(&at, &format!("[{name}]"), reason);
                }
                Item::Setting { section, key, value, at } => {
                    let line = Line { value, at };
                    match section.as_str() {
                        "pgbouncer" => sections.pgbouncer.insert(key, line),
                        "databases" => sections.databases.insert(key, line),
                        "users" => sections.users.insert(key, line),
                        "peers" => sections.peers.insert(key, line),
                        _ => None, // covered by the section's warning
                    };
                }
            }
        }
        sections
    }

    fn translate(&mut self, sections: Sections) -> Result<(), IniError> {
        let globals = self.pgbouncer(sections.pgbouncer)?;
        let mut databases = Table::new();
        for (name, line) in sections.databases {
            if let Some(database) = self.database(&name, &line, &globals)? {
                databases.insert(name, Value::Table(database));
            }
        }
        self.set("databases", databases);
        let mut peers = Table::new();
        for (id, line) in sections.peers {
            peers.insert(id.clone(), Value::Table(self.peer(&id, &line)?));
        }
        if !peers.is_empty() {
            self.set("peers", peers);
        }

        let auth_file = self.auth_file(globals.auth_file.as_ref())?;
        let auth_type = self.auth_type(globals.auth_type.as_ref(), &auth_file)?;
        self.set("auth_type", auth_type);
        self.auth_hba_file(globals.auth_hba_file.as_ref(), auth_type)?;
        let mut users = Table::new();
        for entry in auth_file {
            let mut user = Table::new();
            if let Some(secret) = entry.secret {
                user.insert("password".into(), secret.into());
            }
            users.insert(entry.user, Value::Table(user));
        }
        for (name, line) in sections.users {
            let settings = self.user(&name, &line)?;
            if let Some(Value::Table(user)) = users.get_mut(&name) {
                merge(user, settings);
            } else {
                users.insert(name, Value::Table(settings));
            }
        }
        self.set("users", users);
        Ok(())
    }

    /// Maps the `[pgbouncer]` settings pglane has; accepts or refuses the rest
    /// as the catalogue says.
    fn pgbouncer(&mut self, mut settings: BTreeMap<String, Line>) -> Result<Globals, IniError> {
        let port = match settings.remove("listen_port") {
            Some(line) => parse_port(&line.value).ok_or_else(|| invalid(&line, "listen_port", PORT_EXPECTED))?,
            None => DEFAULT_LISTEN_PORT,
        };
        if let Some(line) = settings.remove("listen_addr") {
            if let Some(listen) = self.listen(&line, port)? {
                self.set("listen", listen);
            }
        }
        // As in PgBouncer: clients are also accepted there, and databases
        // without host= are reached there.
        let unix_socket_dir = match settings.remove("unix_socket_dir") {
            Some(line) => line.value,
            None => DEFAULT_UNIX_SOCKET_DIR.into(),
        };
        if !unix_socket_dir.is_empty() {
            self.set("unix_socket_dir", unix_socket_dir.clone());
        }
        if let Some(line) = settings.remove("unix_socket_mode") {
            self.set("unix_socket_mode", count(&line, "unix_socket_mode", 0)?);
        }
        let pool_mode = match settings.remove("pool_mode") {
            Some(line) => self.pool_mode(&line.value, &line.at, "pool_mode")?,
            None => DEFAULT_POOL_MODE,
        };
        self.set("pool_mode", pool_mode);
        let max_client_conn = match settings.remove("max_client_conn") {
            Some(line) => count(&line, "max_client_conn", 0)?,
            None => DEFAULT_MAX_CLIENT_CONN,
        };
        self.set("max_client_conn", max_client_conn);
        let default_pool_size = match settings.remove("default_pool_size") {
            Some(line) => count(&line, "default_pool_size", 1)?,
            None => DEFAULT_POOL_SIZE,
        };
        self.set("default_pool_size", default_pool_size);
        for list in ["admin_users", "stats_users"] {
            if let Some(line) = settings.remove(list) {
                let names: Vec<&str> = line.value.split(',').map(str::trim).filter(|name| !name.is_empty()).collect();
                self.set(list, names);
            }
        }
        for timeout in ["query_wait_timeout", "server_connect_timeout", "client_login_timeout"] {
            if let Some(line) = settings.remove(timeout) {
                self.set(timeout, seconds(&line, timeout)?);
            }
        }
        // 0 means "off" in both, except that PgBouncer's server_lifetime = 0
        // means "use each server connection once", which pglane does not do.
        for timeout in
            ["server_idle_timeout", "server_lifetime", "client_idle_timeout", "idle_transaction_timeout", "query_timeout"]
        {
            if let Some(line) = settings.remove(timeout) {
                let value = seconds(&line, timeout)?;
                let value = if value == UNLIMITED_SECONDS { 0.0 } else { value };
                if timeout == "server_lifetime" && value == 0.0 {
                    self.warn(&line.at, timeout, "0 means no limit in pglane, not a new server connection each time");
                }
                self.set(timeout, value);
            }
        }
        if let Some(line) = settings.remove("server_reset_query") {
            self.set("server_reset_query", line.value);
        }
        for flag in [
            "server_reset_query_always",
            "application_name_add_host",
            "log_connections",
            "log_disconnections",
            "log_pooler_errors",
            "log_stats",
        ] {
            if let Some(line) = settings.remove(flag) {
                self.set(flag, boolean(&line, flag)?);
            }
        }
        if let Some(line) = settings.remove("max_packet_size") {
            self.set("max_message_size", count(&line, "max_packet_size", 0)?);
        }
        if let Some(line) = settings.remove("max_prepared_statements") {
            match count(&line, "max_prepared_statements", 0)? {
                0 => {
                    let reason = "0 (off) is not supported: pglane always keeps named prepared statements across \
                                  transactions, here with its default limit";
                    self.warn(&line.at, "max_prepared_statements", reason);
                }
                limit => self.set("max_prepared_statements", limit),
            }
        }
        for key in ["auth_user", "auth_query", "auth_dbname"] {
            if let Some(line) = settings.remove(key) {
                self.set(key, line.value);
            }
        }
        for file in ["logfile", "pidfile"] {
            if let Some(line) = settings.remove(file).filter(|line| !line.value.is_empty()) {
                self.set(file, ini::resolve(&line.at.file, &line.value).to_string_lossy().into_owned());
            }
        }
        // PgBouncer tells a waiting client by default; pglane, by default, not.
        let query_wait_notify = match settings.remove("query_wait_notify") {
            Some(line) => count(&line, "query_wait_notify", 0)? as f64,
            None => DEFAULT_QUERY_WAIT_NOTIFY,
        };
        self.set("query_wait_notify", query_wait_notify);
        if let Some(line) = settings.remove("reserve_pool_timeout") {
            self.set("reserve_pool_timeout", seconds(&line, "reserve_pool_timeout")?);
        }
        for limit in [
            "max_db_connections",
            "max_user_connections",
            "max_db_client_connections",
            "max_user_client_connections",
            "min_pool_size",
            "reserve_pool_size",
        ] {
            if let Some(line) = settings.remove(limit) {
                self.set(limit, count(&line, limit, 0)?);
            }
        }
        for flag in ["so_reuseport", "tcp_keepalive", "tcp_defer_accept"] {
            if let Some(line) = settings.remove(flag) {
                self.set(flag, boolean(&line, flag)?);
            }
        }
        // 0 is the system's value in both.
        for number in ["tcp_keepidle", "tcp_keepintvl", "tcp_keepcnt", "tcp_user_timeout", "tcp_socket_buffer"] {
            if let Some(line) = settings.remove(number) {
                self.set(number, count(&line, number, 0)?);
            }
        }
        if let Some(line) = settings.remove("stats_period") {
            self.set("stats_period", count(&line, "stats_period", 1)?);
        }
        if let Some(line) = settings.remove("scram_iterations") {
            self.set("scram_iterations", count(&line, "scram_iterations", 1)?);
        }
        if let Some(line) = settings.remove("verbose") {
            // PgBouncer has more levels of noise than pglane: the most is trace.
            self.set("verbose", count(&line, "verbose", 0)?.min(2));
        }
        if let Some(line) = settings.remove("listen_backlog") {
            self.set("listen_backlog", count(&line, "listen_backlog", 1)?);
        }
        if let Some(line) = settings.remove("peer_id") {
            self.set("peer_id", count(&line, "peer_id", 0)?);
        }
        // PgBouncer switches to `user`, which only root can do; a process
        // that already runs as that user has nothing to switch.
        if settings.get("user").is_some_and(|line| running_as().as_deref() == Some(line.value.as_str())) {
            settings.remove("user");
        }
        self.tls_and_security(&mut settings)?;
        let globals = Globals {
            unix_socket_dir,
            auth_type: settings.remove("auth_type"),
            auth_file: settings.remove("auth_file"),
            auth_hba_file: settings.remove("auth_hba_file"),
        };
        for (key, line) in settings {
            let Some(treatment) = unsupported::pgbouncer_setting(&key) else {
                return Err(unknown(&line, "setting", &key, unsupported::pgbouncer_setting_names()));
            };
            match treatment {
                Treatment::Accepted(_) => {}
                Treatment::AcceptedAt { reason, .. } if !treatment.accepts(&line.value) => {
                    return Err(unsupported_value(&line, &key, reason));
                }
                Treatment::AcceptedAt { .. } => {}
            }
        }
        Ok(globals)
    }

    /// `listen`, from `listen_addr` (a comma-separated list) and the port:
    /// every address, each once.
    fn listen(&mut self, line: &Line, port: u16) -> Result<Option<Vec<String>>, IniError> {
        let mut listen = Vec::new();
        for address in line.value.split(',').map(str::trim).filter(|address| !address.is_empty()) {
            let ip: IpAddr = match address {
                "*" => Ipv4Addr::UNSPECIFIED.into(),
                "localhost" => Ipv4Addr::LOCALHOST.into(),
                address => address.parse().map_err(|_| IniError::Unsupported {
                    at: line.at.clone(),
                    setting: "listen_addr".into(),
                    value: address.into(),
                    reason: "pglane listens on IP addresses; write the address, or * for all IPv4 addresses".into(),
                })?,
            };
            let address = SocketAddr::new(ip, port).to_string();
            if !listen.contains(&address) {
                listen.push(address);
            }
        }
        Ok((!listen.is_empty()).then_some(listen))
    }

    /// `session` or `transaction`; PgBouncer's `statement` becomes `transaction`.
    fn pool_mode(&mut self, value: &str, at: &Location, setting: &str) -> Result<&'static str, IniError> {
        match value.to_ascii_lowercase().as_str() {
            "session" => Ok("session"),
            "transaction" => Ok("transaction"),
            "statement" => {
                let reason = "statement pooling is not supported; pglane pools per transaction, which also allows \
                              multi-statement transactions";
                self.warn(at, setting, reason);
                Ok("transaction")
            }
            _ => Err(IniError::Invalid {
                at: at.clone(),
                setting: setting.into(),
                message: format!("expected session, transaction or statement, not {value:?}"),
            }),
        }
    }

    /// The TLS settings, which map 1:1 onto pglane's, and the errors for the
    /// settings whose loss would leave pglane less safe than PgBouncer.
    fn tls_and_security(&mut self, settings: &mut BTreeMap<String, Line>) -> Result<(), IniError> {
        const MODES: &str = "disable, allow, prefer, require, verify-ca or verify-full";
        // PgBouncer's default since 1.20, as libpq's: TLS with a server that
        // offers it (pglane's own default is disable).
        self.set("server_tls_sslmode", "prefer");
        for key in ["client_tls_sslmode", "server_tls_sslmode"] {
            let Some(line) = settings.remove(key) else { continue };
            let mode = line.value.to_ascii_lowercase();
            match mode.as_str() {
                "disable" | "allow" | "prefer" | "require" | "verify-ca" | "verify-full" => self.set(key, mode),
                _ => return Err(invalid(&line, key, &format!("expected {MODES}"))),
            }
        }
        for key in [
            "client_tls_cert_file",
            "client_tls_key_file",
            "client_tls_ca_file",
            "server_tls_ca_file",
            "server_tls_cert_file",
            "server_tls_key_file",
        ] {
            if let Some(line) = settings.remove(key) {
                self.set(key, line.value);
            }
        }
        if let Some(line) = settings.remove("disable_pqexec") {
            if boolean(&line, "disable_pqexec")? {
                return Err(unsupported_value(&line, "disable_pqexec", "pglane does not refuse the simple query protocol"));
            }
        }
        Ok(())
    }

    /// One `[databases]` entry (`*`, the fallback, like any other).
    fn database(&mut self, name: &str, line: &Line, globals: &Globals) -> Result<Option<Table>, IniError> {
        if name == "pgbouncer" {
            return Err(invalid(line, "[databases] pgbouncer", "the name pgbouncer is reserved for the admin console"));
        }
        let pairs = connstr::parse(&line.value).map_err(|e| invalid(line, &format!("[databases] {name}"), &e.to_string()))?;
        let mut database = Table::new();
        let mut hosts = None;
        let mut ports = vec![DEFAULT_SERVER_PORT];
        let mut load_balance_hosts = None;
        let mut pool_size = None;
        let mut default_settings = Table::new();
        for (key, value) in pairs {
            let setting = format!("{key} of database {name}");
            match key.as_str() {
                "dbname" | "user" | "auth_user" | "auth_query" | "auth_dbname" => {
                    database.insert(key, value.into());
                }
                "host" => hosts = Some(server_hosts(&value, &line.at, name)?),
                "port" => {
                    ports = list(&value)
                        .map(parse_port)
                        .collect::<Option<Vec<u16>>>()
                        .ok_or_else(|| invalid(line, &setting, PORT_EXPECTED))?;
                }
                "target_session_attrs" => {
                    let value = value.to_ascii_lowercase();
                    if !["any", "read-write", "read-only", "primary", "standby", "prefer-standby"].contains(&value.as_str()) {
                        let message = "expected any, read-write, read-only, primary, standby or prefer-standby";
                        return Err(invalid(line, &setting, message));
                    }
                    database.insert(key, value.into());
                }
                "load_balance_hosts" => {
                    let value = match value.to_ascii_lowercase().as_str() {
                        "round-robin" => "round-robin",
                        "disable" => "disable",
                        "random" => "random",
                        _ => return Err(invalid(line, &setting, "expected round-robin, disable or random")),
                    };
                    load_balance_hosts = Some(value);
                }
                "password" => {
                    plaintext_password(&value).map_err(|message| invalid(line, &setting, &message))?;
                    database.insert(key, value.into());
                }
                "pool_size" => {
                    pool_size = Some(value.parse().ok().filter(|&size: &i64| size >= 1).ok_or_else(|| {
                        invalid(line, &setting, &format!("expected a whole number of at least 1, not {value:?}"))
                    })?);
                }
                "pool_mode" => {
                    let mode = self.pool_mode(&value, &line.at, &setting)?;
                    database.insert(key, mode.into());
                }
                // Set on server connections by PgBouncer, where the client
                // has not set them: each client's own, unless it sets them.
                "client_encoding" | "datestyle" | "timezone" | "application_name" => {
                    let name = match key.as_str() {
                        "datestyle" => "DateStyle",
                        "timezone" => "TimeZone",
                        other => other,
                    };
                    default_settings.insert(name.to_owned(), value.into());
                }
                "max_db_connections" | "max_db_client_connections" | "min_pool_size" | "reserve_pool" | "reserve_pool_size" => {
                    let limit: i64 =
                        value.parse().ok().filter(|&n: &i64| n >= 0).ok_or_else(|| invalid(line, &setting, WHOLE_NUMBER))?;
                    // reserve_pool is PgBouncer's older name for it.
                    let key = if key == "reserve_pool" { "reserve_pool_size".to_owned() } else { key };
                    database.insert(key, limit.into());
                }
                _ => {
                    let Some(reason) = unsupported::database_parameter(&key) else {
                        return Err(unknown(
                            line,
                            "connection parameter",
                            &key,
                            unsupported::DATABASE_PARAMETERS.iter().copied(),
                        ));
                    };
                    return Err(unsupported_parameter(line, &setting, &value, reason));
                }
            }
        }
        let hosts = match hosts {
            Some(hosts) => hosts,
            None if !globals.unix_socket_dir.is_empty() => vec![globals.unix_socket_dir.clone()],
            None => {
                return Err(invalid(line, &format!("[databases] {name}"), "no host=, and unix_socket_dir is empty"));
            }
        };
        // PgBouncer spreads new connections over a host list unless told
        // not to; pglane's own default (and libpq's) is the listed order.
        if hosts.len() > 1 {
            database.insert("load_balance_hosts".into(), load_balance_hosts.unwrap_or("round-robin").into());
        } else if let Some(order) = load_balance_hosts {
            database.insert("load_balance_hosts".into(), order.into());
        }
        database.insert("host".into(), one_or_list(hosts));
        database.insert("port".into(), one_or_list(ports.into_iter().map(i64::from).collect()));
        if let Some(size) = pool_size {
            database.insert("pool_size".into(), size.into());
        }
        if !default_settings.is_empty() {
            database.insert("default_settings".into(), Value::Table(default_settings));
        }
        Ok(Some(database))
    }

    /// One `[peers]` entry: `ID = host=... port=...`.
    fn peer(&mut self, id: &str, line: &Line) -> Result<Table, IniError> {
        let setting = format!("[peers] {id}");
        let pairs = connstr::parse(&line.value).map_err(|e| invalid(line, &setting, &e.to_string()))?;
        let mut peer = Table::new();
        for (key, value) in pairs {
            match key.as_str() {
                "host" if value.starts_with('@') => {
                    return Err(unsupported_value(line, &setting, "pglane does not connect to abstract unix sockets"));
                }
                "host" => {
                    peer.insert(key, value.into());
                }
                "port" => {
                    let port = parse_port(&value).ok_or_else(|| invalid(line, &format!("port of peer {id}"), PORT_EXPECTED))?;
                    peer.insert(key, i64::from(port).into());
                }
                "pool_size" => self.warn(
                    &line.at,
                    "pool_size",
                    &format!("ignored for peer {id}: pglane opens a connection for each cancel request it forwards"),
                ),
                _ => return Err(invalid(line, &setting, &format!("unrecognized connection parameter: {key}"))),
            }
        }
        if !peer.contains_key("host") {
            return Err(invalid(line, &setting, "host was not provided"));
        }
        Ok(peer)
    }

    /// One `[users]` entry's settings.
    fn user(&mut self, name: &str, line: &Line) -> Result<Table, IniError> {
        let pairs = connstr::parse(&line.value).map_err(|e| invalid(line, &format!("[users] {name}"), &e.to_string()))?;
        let mut user = Table::new();
        for (key, value) in pairs {
            if key == "pool_mode" {
                let mode = self.pool_mode(&value, &line.at, &format!("pool_mode of user {name}"))?;
                user.insert(key, mode.into());
            } else if key == "max_user_connections" || key == "max_user_client_connections" {
                let setting = format!("{key} of user {name}");
                let limit: i64 =
                    value.parse().ok().filter(|&n: &i64| n >= 0).ok_or_else(|| invalid(line, &setting, WHOLE_NUMBER))?;
                user.insert(key, limit.into());
            } else {
                let Some(reason) = unsupported::user_parameter(&key) else {
                    return Err(unknown(line, "user parameter", &key, unsupported::USER_PARAMETERS.iter().copied()));
                };
                return Err(unsupported_parameter(line, &format!("{key} of user {name}"), &value, reason));
            }
        }
        Ok(user)
    }

    fn auth_file(&mut self, line: Option<&Line>) -> Result<Vec<userlist::Entry>, IniError> {
        let Some(line) = line.filter(|line| !line.value.is_empty()) else {
            return Ok(Vec::new());
        };
        if line.value.starts_with('~') {
            return Err(unsupported_value(line, "auth_file", "write the path without ~"));
        }
        let path = ini::resolve(&line.at.file, &line.value);
        let text =
            (self.files)(&path).map_err(|source| IniError::ReadIncluded { at: line.at.clone(), path: path.clone(), source })?;
        userlist::parse(&path, &text)
    }

    /// `auth_hba_file`, taken relative to the file that names it; PgBouncer
    /// reads it only under `auth_type = hba`, and so does pglane.
    fn auth_hba_file(&mut self, line: Option<&Line>, auth_type: &str) -> Result<(), IniError> {
        let Some(line) = line.filter(|line| !line.value.is_empty()) else {
            return Ok(());
        };
        if auth_type != "hba" {
            self.warn(&line.at, "auth_hba_file", "ignored: only read with auth_type = hba");
            return Ok(());
        }
        if line.value.starts_with('~') {
            return Err(unsupported_value(line, "auth_hba_file", "write the path without ~"));
        }
        let path = ini::resolve(&line.at.file, &line.value);
        self.set("auth_hba_file", path.to_string_lossy().into_owned());
        Ok(())
    }

    /// The method pglane checks clients with (see the module docs).
    fn auth_type(&mut self, line: Option<&Line>, users: &[userlist::Entry]) -> Result<&'static str, IniError> {
        let md5_users: Vec<&userlist::Entry> =
            users.iter().filter(|user| matches!(user.secret.as_deref().map(Secret::parse), Some(Ok(Secret::Md5(_))))).collect();
        match (requested_auth_type(line)?, md5_users.first()) {
            // Each line names its method; md5 lines check SCRAM secrets with SCRAM.
            (Requested::Hba, _) => Ok("hba"),
            (Requested::Scram, _) => {
                for user in md5_users {
                    let message = "md5 secret cannot check SCRAM-SHA-256 logins: clients cannot log in as this user \
                                   (nor through PgBouncer); it still logs in to md5 servers as a database's user=";
                    self.warn(&user.at, &format!("user {}", user.user), message);
                }
                Ok("scram-sha-256")
            }
            (Requested::Md5, _) => Ok("md5"),
            (Requested::Plain, md5_user) => {
                let method = if md5_user.is_some() { "md5" } else { "scram-sha-256" };
                if let Some(line) = line {
                    let message = format!("checked as {method}: pglane never asks clients for cleartext passwords");
                    self.warn(&line.at, "auth_type", &message);
                }
                Ok(method)
            }
            (Requested::Trust, _) => {
                if let Some(line) = line {
                    let message = "PgBouncer admits only the users in auth_file; pglane admits any user name and \
                                   leaves the password check to the server";
                    self.warn(&line.at, "auth_type", message);
                }
                Ok("trust")
            }
        }
    }

    fn set(&mut self, key: &str, value: impl Into<Value>) {
        self.document.insert(key.to_owned(), value.into());
    }

    fn warn(&mut self, at: &Location, setting: &str, message: &str) {
        self.warnings.push(Warning { at: at.clone(), setting: setting.to_owned(), message: message.to_owned() });
    }
}

fn invalid(line: &Line, setting: &str, message: &str) -> IniError {
    IniError::Invalid { at: line.at.clone(), setting: setting.to_owned(), message: message.to_owned() }
}

/// For settings whose values are not secret.
fn unsupported_value(line: &Line, setting: &str, reason: &str) -> IniError {
    IniError::Unsupported {
        at: line.at.clone(),
        setting: setting.to_owned(),
        value: line.value.clone(),
        reason: reason.to_owned(),
    }
}

/// The name of the user this process runs as (its effective uid's).
fn running_as() -> Option<String> {
    // SAFETY: passwd is a C struct of pointers and integers, for which all
    // zeroes is a valid value.
    let mut entry: libc::passwd = unsafe { std::mem::zeroed() };
    let mut text = vec![0 as libc::c_char; 4096];
    let mut found: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: getpwuid_r writes the entry and its strings into `entry` and
    // `text`, both ours and of the sizes given, and sets `found` to
    // `&entry` or null; the name is read only while `text` lives.
    let failed = unsafe { libc::getpwuid_r(libc::geteuid(), &mut entry, text.as_mut_ptr(), text.len(), &mut found) };
    if failed != 0 || found.is_null() || entry.pw_name.is_null() {
        return None;
    }
    // SAFETY: a NUL-terminated string inside `text`, as getpwuid_r wrote it.
    let name = unsafe { std::ffi::CStr::from_ptr(entry.pw_name) };
    Some(name.to_string_lossy().into_owned())
}

/// For a parameter of a `[databases]` or `[users]` entry (never a password).
fn unsupported_parameter(line: &Line, setting: &str, value: &str, reason: &str) -> IniError {
    IniError::Unsupported { at: line.at.clone(), setting: setting.to_owned(), value: value.to_owned(), reason: reason.to_owned() }
}

/// The client authentication a pgbouncer.ini asks for, among those pglane can give.
enum Requested {
    Hba,
    Md5,
    Plain,
    Scram,
    Trust,
}

fn requested_auth_type(line: Option<&Line>) -> Result<Requested, IniError> {
    let Some(line) = line else {
        return Ok(Requested::Md5); // PgBouncer's default
    };
    match line.value.to_ascii_lowercase().as_str() {
        "md5" => Ok(Requested::Md5),
        "plain" => Ok(Requested::Plain),
        "scram-sha-256" => Ok(Requested::Scram),
        "trust" => Ok(Requested::Trust),
        "hba" => Ok(Requested::Hba),
        "any" | "cert" | "pam" | "ldap" | "peer" | "gss" | "sspi" => Err(unsupported_value(
            line,
            "auth_type",
            "pglane supports md5, scram-sha-256, trust, hba and plain (checked as md5 or SCRAM)",
        )),
        _ => Err(invalid(line, "auth_type", "expected md5, scram-sha-256, trust, hba or plain")),
    }
}

/// `password=` in `[databases]` is what pglane logs in to the server with, so
/// it must be the password itself.
fn plaintext_password(value: &str) -> Result<(), String> {
    match Secret::parse(value) {
        Ok(Secret::Plain(_)) => Ok(()),
        Ok(secret) => Err(format!(
            "pglane logs in to servers with this password, so it must be the plaintext password, not an {} secret",
            secret.kind()
        )),
        Err(e) => Err(e.to_string()),
    }
}

/// The hosts of a `host=` list, as libpq and PgBouncer write it (`a,b`).
fn server_hosts(value: &str, at: &Location, database: &str) -> Result<Vec<String>, IniError> {
    let hosts: Vec<String> = list(value).map(str::to_owned).collect();
    let setting = || format!("host of database {database}");
    if hosts.is_empty() {
        return Err(IniError::Invalid { at: at.clone(), setting: setting(), message: "no host name".into() });
    }
    if let Some(abstract_socket) = hosts.iter().find(|host| host.starts_with('@')) {
        return Err(IniError::Unsupported {
            at: at.clone(),
            setting: setting(),
            value: abstract_socket.clone(),
            reason: "pglane does not connect to abstract unix sockets".into(),
        });
    }
    Ok(hosts)
}

/// The items of a comma-separated list, blanks around them removed.
fn list(value: &str) -> impl Iterator<Item = &str> {
    value.split(',').map(str::trim).filter(|item| !item.is_empty())
}

/// A TOML value of one item, or a list of several.
fn one_or_list<T: Into<Value>>(mut items: Vec<T>) -> Value {
    match items.len() {
        1 => items.remove(0).into(),
        _ => Value::Array(items.into_iter().map(Into::into).collect()),
    }
}

const PORT_EXPECTED: &str = "expected a port number (1-65535)";
const WHOLE_NUMBER: &str = "expected a whole number (0: no limit)";

fn parse_port(text: &str) -> Option<u16> {
    text.parse().ok().filter(|&port| port != 0)
}

/// A whole number of at least `min`, written as C's `strtol(text, 0)` reads
/// it (as PgBouncer does): decimal, `0x` hexadecimal or `0` octal.
fn count(line: &Line, setting: &str, min: i64) -> Result<i64, IniError> {
    c_integer(&line.value)
        .filter(|&n| n >= min)
        .ok_or_else(|| invalid(line, setting, &format!("expected a whole number of at least {min}, not {:?}", line.value)))
}

fn c_integer(text: &str) -> Option<i64> {
    let (negative, unsigned) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text.strip_prefix('+').unwrap_or(text)),
    };
    let (radix, digits) = match unsigned.strip_prefix("0x").or_else(|| unsigned.strip_prefix("0X")) {
        Some(hex) => (16, hex),
        None if unsigned.len() > 1 && unsigned.starts_with('0') => (8, &unsigned[1..]),
        None => (10, unsigned),
    };
    if digits.is_empty() || !digits.chars().all(|c| c.is_digit(radix)) {
        return None;
    }
    let magnitude = i64::from_str_radix(digits, radix).ok()?;
    Some(if negative { -magnitude } else { magnitude })
}

/// Seconds, as a non-negative number; 0 (PgBouncer: no limit) and anything
/// longer than [`UNLIMITED_SECONDS`] become that.
fn seconds(line: &Line, setting: &str) -> Result<f64, IniError> {
    match line.value.parse::<f64>() {
        Ok(0.0) => Ok(UNLIMITED_SECONDS),
        Ok(seconds) if seconds.is_finite() && seconds > 0.0 => Ok(seconds.min(UNLIMITED_SECONDS)),
        _ => Err(invalid(line, setting, &format!("expected a number of seconds (0 for no limit), not {:?}", line.value))),
    }
}

/// PgBouncer's booleans are integers (0 is false); the usual words are accepted too.
fn boolean(line: &Line, setting: &str) -> Result<bool, IniError> {
    if let Some(n) = c_integer(&line.value) {
        return Ok(n != 0);
    }
    match line.value.to_ascii_lowercase().as_str() {
        "on" | "true" | "yes" => Ok(true),
        "off" | "false" | "no" => Ok(false),
        _ => Err(invalid(line, setting, &format!("expected 0 or 1, not {:?}", line.value))),
    }
}

/// Pseudo-random strings over `alphabet`, for the "garbage never panics" tests.
#[cfg(test)]
fn garbage(alphabet: &str, count: usize) -> Vec<String> {
    let alphabet: Vec<char> = alphabet.chars().collect();
    let mut state = 0x2545_f491_4f6c_dd1d_u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    (0..count)
        .map(|_| {
            let len = (next() % 80) as usize;
            (0..len).map(|_| alphabet[(next() % alphabet.len() as u64) as usize]).collect()
        })
        .collect()
}

#[cfg(test)]
mod tests;
