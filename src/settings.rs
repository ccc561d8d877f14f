//! Session settings: what a client has set, what a server connection has,
//! and how to make the second the first. `client` follows a client's
//! settings and carries them to whichever server connection it gets next in
//! transaction mode; `server` records what each connection has. This module
//! owns the values and the rules; it does no I/O.
//!
//! Four sources, all exact about what the server really has:
//! - the client's StartupMessage: every parameter but user, database,
//!   replication and protocol options (`_pq_.*`), and the `-c name=value` /
//!   `--name=value` switches of `options` ([`from_startup`]). PostgreSQL
//!   would apply them at login; pglane applies them to each server
//!   connection the client gets, with `set_config(name, value, false)`,
//!   which reads a value exactly as the startup packet does (a `SET` of a
//!   quoted string would make `search_path=a, b` one schema named `a, b`).
//!   They are also what RESET goes back to, as on PostgreSQL;
//! - ParameterStatus messages, which PostgreSQL sends whenever a reported
//!   setting changes (TimeZone, DateStyle, application_name,
//!   default_transaction_read_only, ...), including when a rollback undoes a
//!   SET: every reported setting but the server's own ([`SERVER_OWNED`]) is
//!   carried;
//! - `SET [SESSION] name = value` / `RESET name` / `RESET ALL` as the whole
//!   of a statement text ([`parse_change`]), over the simple or the extended
//!   protocol, sent outside a transaction block, of any setting the server
//!   does not report (search_path, statement_timeout, work_mem, a custom
//!   `app.tenant`, ...);
//! - `SELECT set_config('name', 'value', false)` with literal arguments, as
//!   the whole of a statement text ([`parse_set_config`]).
//!
//! What the client's SQL changes in any other way (a SET inside a
//! transaction block, `set_config` with computed arguments, a DO block) is
//! not followed: the exchange pins the client to its server connection
//! instead (`client::pinning`), which is reset before anyone else gets it.
//!
//! A server connection's value can also become [`Value::Unknown`]: SQL that
//! names one of the output settings pglane negotiates on (extra_float_digits,
//! bytea_output) or calls `set_config` may have changed it unseen
//! ([`Settings::forget_output_settings_named_in`]).
//!
//! Before a client's transaction runs on a server connection whose settings
//! differ from the client's, pglane sends the SETs and RESETs that make them
//! equal. Pure functions; the exchange applies them.
//!
//! ## Settings that change what a statement means
//!
//! PostgreSQL resolves a statement's text once, at Parse (parse analysis and
//! rewrite), in the parsing session's settings, and a prepared statement
//! keeps what it resolved. So a statement pglane shares between clients is
//! keyed by the values of every setting that parse analysis reads
//! ([`Settings::parse_context`]). Read off PostgreSQL 15's sources:
//!
//! | setting | read at Parse by | what changes |
//! |---|---|---|
//! | search_path | namespace.c (every name lookup), regclass/regtype/... input | which table, type, function, operator a name is |
//! | client_encoding | pq_getmsgstring (the text is converted to the server encoding on receipt) | the text itself, for non-ASCII bytes |
//! | transform_null_equals | parse_expr.c `transformAExprOp` | `x = NULL` read as `x IS NULL` |
//! | session_replication_role | rewriteHandler.c (which rules fire) | the rewritten query |
//! | standard_conforming_strings, backslash_quote, escape_string_warning | scan.l | what a `'...'` literal contains, whether it is an error or a warning |
//! | TimeZone | timestamptz_in, timetz_in, date_in (`'today'`), via `coerce_type` on a literal | the instant a literal stands for |
//! | DateStyle | date/timestamp input (field order, `01/02/2000`) | the date a literal stands for |
//! | IntervalStyle | interval_in (`sql_standard` signs) | the interval a literal stands for |
//! | timezone_abbreviations | datetime input (`EST`) | the instant |
//! | array_nulls | array_in | whether `{NULL}` holds a NULL |
//! | xmloption | xml_in | whether a literal parses as DOCUMENT or CONTENT |
//! | lc_monetary | cash_in | the amount a money literal stands for |
//!
//! The first four can change what any text means ([`PARSE_ANY`]); the rest
//! only matter to a text with a string literal in it ([`PARSE_LITERALS`]),
//! since only the literals of a text are converted at Parse (parameters are
//! converted at Bind, in the settings of the moment). Planner settings
//! (`enable_*`, `plan_cache_mode`, `work_mem`) change plans, not results;
//! `row_security` and the role are checked by PostgreSQL's plan cache
//! itself. Literals that name the moment of parsing (`'now'`, `'today'`,
//! `'tomorrow'`, `'yesterday'`) make a text mean something else each time it
//! is parsed: such a text is never shared ([`names_the_moment`]).

use std::cell::Cell;
use std::collections::BTreeMap;

use thiserror::Error;

use crate::prepare::lexer::{contains_ignore_ascii_case, Mark, Marks};
use crate::protocol::startup::StartupParams;

/// Settings PostgreSQL 15–18 report with ParameterStatus (the ones a
/// session may change, spelled as the server reports them): a SET of one is
/// followed through its report, not its SQL.
pub const REPORTED: [&str; 8] = [
    "application_name",
    "client_encoding",
    "DateStyle",
    "default_transaction_read_only",
    "IntervalStyle",
    "scram_iterations",
    "standard_conforming_strings",
    "TimeZone",
];

/// Reported settings that belong to the server, not to the session (or
/// change only with the role, which pins the client): never carried.
pub const SERVER_OWNED: [&str; 6] =
    ["server_version", "server_encoding", "integer_datetimes", "in_hot_standby", "is_superuser", "session_authorization"];

/// Settings parse analysis reads for any text (see the module docs).
pub const PARSE_ANY: [&str; 4] = ["search_path", "client_encoding", "transform_null_equals", "session_replication_role"];

/// Settings parse analysis reads for the string literals of a text.
pub const PARSE_LITERALS: [&str; 10] = [
    "TimeZone",
    "DateStyle",
    "IntervalStyle",
    "timezone_abbreviations",
    "standard_conforming_strings",
    "backslash_quote",
    "escape_string_warning",
    "array_nulls",
    "xmloption",
    "lc_monetary",
];

/// Unreported settings that change how values are printed, which binary
/// format negotiation needs to know.
pub const OUTPUT: [&str; 2] = ["extra_float_digits", "bytea_output"];

/// A setting's value: as ParameterStatus reported it (a plain string, quoted
/// when sent back), as the client wrote it in SQL (sent back verbatim), as a
/// plain string applied with `set_config` (from the client's startup packet
/// or its own `set_config` call), or, on a server connection only, not known.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    Reported(String),
    Sql(String),
    Plain(String),
    Unknown,
}

impl Value {
    /// The value as the server would read it from a startup packet or
    /// `set_config`, if pglane knows it exactly: reported and plain values
    /// as they are, an SQL value if it is a plain word, number or string
    /// literal (`3`, `-15`, `'hex'`, `hex`).
    pub fn plain(&self) -> Option<&str> {
        match self {
            Value::Reported(v) | Value::Plain(v) => Some(v),
            Value::Sql(v) => plain_sql_literal(v),
            Value::Unknown => None,
        }
    }
}

/// An SQL SET value that is one literal without escapes, as its text.
fn plain_sql_literal(sql: &str) -> Option<&str> {
    let sql = sql.trim();
    let inner = match sql.strip_prefix('\'').and_then(|s| s.strip_suffix('\'')) {
        Some(quoted) => quoted,
        None => sql,
    };
    let simple = |b: u8| b.is_ascii_alphanumeric() || b == b'_' || b == b'-' || b == b'+' || b == b'.';
    (!inner.is_empty() && inner.bytes().all(simple)).then_some(inner)
}

/// The settings one side (a client, or a server connection) has changed from
/// the server's defaults, and, for a client, what RESET returns them to (its
/// startup values).
#[derive(Debug, Clone, Default)]
pub struct Settings {
    values: BTreeMap<String, Value>,
    /// The client's startup values (not reported ones): RESET, RESET ALL
    /// and DISCARD ALL go back to these. Empty for a server connection.
    baseline: BTreeMap<String, Value>,
    /// See [`Settings::version`]. A cell, so that two sides found to hold
    /// the same values take one version ([`Settings::sql_to_apply_over`]).
    version: Cell<u64>,
}

thread_local! {
    /// The last version any `Settings` of this thread took.
    static LAST_VERSION: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// A version no `Settings` of this thread has had yet.
fn next_version() -> u64 {
    LAST_VERSION.with(|last| {
        last.set(last.get() + 1);
        last.get()
    })
}

impl PartialEq for Settings {
    fn eq(&self, other: &Settings) -> bool {
        self.values == other.values && self.baseline == other.baseline
    }
}

impl Eq for Settings {}

/// A change of a setting a client made in SQL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// `SET name = value`: the value as written, sent back verbatim.
    Set(String, String),
    /// `set_config('name', 'value', false)`: a plain string.
    SetPlain(String, String),
    Reset(String),
    ResetAll,
}

impl Settings {
    /// A client's settings from its startup packet's parameters (as
    /// [`from_startup`] gives them): reported ones as if reported, the rest
    /// as startup values, which are also what RESET goes back to.
    pub fn from_startup_values(values: &[(String, String)]) -> Settings {
        let mut settings = Settings::default();
        for (name, value) in values {
            if REPORTED.contains(&name.as_str()) {
                settings.set(name, Value::Reported(value.clone()));
                settings.baseline.insert(name.clone(), Value::Reported(value.clone()));
            } else {
                settings.set(name, Value::Plain(value.clone()));
                settings.baseline.insert(name.clone(), Value::Plain(value.clone()));
            }
        }
        settings
    }

    pub fn set(&mut self, name: &str, value: Value) {
        self.version.set(next_version());
        self.values.insert(name.to_owned(), value);
    }

    /// Two `Settings` of one thread with the same version have the same
    /// values: every change takes a version no other has had (a new one,
    /// empty, is 0), so that what is worked out from the values
    /// ([`Settings::parse_context`], a server connection's output settings)
    /// can be kept with the version, whichever `Settings` it came from.
    pub fn version(&self) -> u64 {
        self.version.get()
    }

    pub fn get(&self, name: &str) -> Option<&Value> {
        self.values.get(name)
    }

    pub fn remove(&mut self, name: &str) {
        self.version.set(next_version());
        self.values.remove(name);
    }

    /// What RESET returns `name` to for this client, if its startup packet
    /// gave it (`None`: the server's default).
    pub fn startup_value(&self, name: &str) -> Option<&Value> {
        self.baseline.get(name)
    }

    pub fn apply(&mut self, change: &Change) {
        match change {
            Change::Set(name, value) => self.set(name, Value::Sql(value.clone())),
            Change::SetPlain(name, value) => self.set(name, Value::Plain(value.clone())),
            Change::Reset(name) => match self.baseline.get(name) {
                Some(startup) => {
                    let startup = startup.clone();
                    self.set(name, startup);
                }
                None => self.remove(name),
            },
            Change::ResetAll => {
                // Reported values come back with the server's reports.
                self.version.set(next_version());
                self.values.retain(|_, value| matches!(value, Value::Reported(_)));
                self.values.extend(self.baseline.iter().map(|(n, v)| (n.clone(), v.clone())));
            }
        }
    }

    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// Whether both sides have the same values (baselines aside).
    pub fn same_values(&self, other: &Settings) -> bool {
        self.values == other.values
    }

    /// Takes `client`'s values (not its baseline): what a server connection
    /// has once [`Settings::sql_to_apply_over`] ran, with the same
    /// `keep_unknown`.
    pub fn take_values_of(&mut self, client: &Settings, keep_unknown: bool) {
        let unknown: Vec<String> = match keep_unknown {
            true => self.values.iter().filter(|(_, v)| **v == Value::Unknown).map(|(n, _)| n.clone()).collect(),
            false => Vec::new(),
        };
        self.values.clone_from(&client.values);
        if unknown.is_empty() {
            // The same values: the same version (see `version`).
            self.version.set(client.version.get());
            return;
        }
        for name in unknown {
            self.values.insert(name, Value::Unknown);
        }
        self.version.set(next_version());
    }

    /// This side's values of the settings parse analysis reads (what a
    /// side connection takes before it checks a client's query shape).
    pub fn parse_settings(&self) -> Settings {
        let mut settings = Settings::default();
        for name in PARSE_ANY.iter().chain(&PARSE_LITERALS) {
            if let Some(value) = self.values.get(*name) {
                settings.set(name, value.clone());
            }
        }
        settings
    }

    /// The values of the settings parse analysis reads ([`PARSE_ANY`], and
    /// [`PARSE_LITERALS`] too for a text with string literals), as bytes
    /// that are equal exactly when those values are: what a shared
    /// statement is keyed by besides its text. Empty when all are the
    /// server's defaults.
    pub fn parse_context(&self, literals: bool) -> Vec<u8> {
        let names = PARSE_ANY.iter().chain(if literals { &PARSE_LITERALS[..] } else { &[] });
        let mut key = Vec::new();
        for name in names {
            let Some(value) = self.values.get(*name) else { continue };
            let (kind, text) = match value {
                Value::Reported(v) => (b'r', v.as_str()),
                Value::Sql(v) => (b's', v.as_str()),
                Value::Plain(v) => (b'p', v.as_str()),
                Value::Unknown => (b'?', ""),
            };
            key.extend_from_slice(name.as_bytes());
            key.push(0);
            key.push(kind);
            key.extend_from_slice(text.as_bytes());
            key.push(0);
        }
        key
    }

    /// The values ParameterStatus reported, by name.
    pub fn reported(&self) -> impl Iterator<Item = (&str, &str)> {
        self.values.iter().filter_map(|(name, value)| match value {
            Value::Reported(v) => Some((name.as_str(), v.as_str())),
            _ => None,
        })
    }

    /// The output settings ([`OUTPUT`]) set on this side: `Some(value)` when
    /// known exactly, `None` when not.
    pub fn output(&self) -> impl Iterator<Item = (&'static str, Option<&str>)> {
        OUTPUT.into_iter().filter_map(|name| self.values.get(name).map(|v| (name, v.plain())))
    }

    /// After `sql` ran on this server connection: an output setting it
    /// names, or any setting if it calls `set_config` or may `RESET ALL` /
    /// `DISCARD ALL` in a way pglane does not follow (it follows a lone
    /// `RESET ALL` and a DISCARD ALL's command tag), may have changed, so its
    /// value is no longer known. `followed`: `sql` is a SET/RESET pglane
    /// follows exactly.
    /// `marks`: `sql`'s.
    pub fn forget_output_settings_named_in(&mut self, sql: &str, marks: Marks, followed: bool) {
        if followed || !marks.any(&OUTPUT_MARKS) {
            return;
        }
        let any = resets_or_calls_set_config(sql);
        for name in OUTPUT {
            if any || contains_ignore_ascii_case(sql.as_bytes(), name.as_bytes()) {
                self.set(name, Value::Unknown);
            }
        }
    }

    /// Whether `server` has this side's values.
    pub fn agrees_with(&self, server: &Settings) -> bool {
        if self.version == server.version {
            // Nothing changed since the server took these values (the
            // common case: a client back on the connection it had).
            return true;
        }
        if self.values != server.values {
            return false;
        }
        // The same values under another version (clients with the same
        // settings taking turns on a connection): one ordered walk of both
        // maps. Both take the older version, so that the next turn is told
        // by it alone.
        let version = self.version.get().min(server.version.get());
        self.version.set(version);
        server.version.set(version);
        true
    }

    /// The SQL that turns a server connection with `server` settings into one
    /// with `self`'s, or None if they already agree. `keep_unknown`: a
    /// setting whose value on the server is unknown is left as it is, for
    /// a client pinned to the connection, whose own SQL changed it unseen
    /// (a SET inside a block, `set_config` with a parameter): the value
    /// there is the client's, and RESETting it would lose it.
    pub fn sql_to_apply_over(&self, server: &Settings, keep_unknown: bool) -> Option<String> {
        if self.agrees_with(server) {
            return None;
        }
        let kept = |name: &String| keep_unknown && server.values.get(name) == Some(&Value::Unknown);
        // statement_timeout last: PostgreSQL times each statement of a
        // query with the value in force as it starts, so the SETs before it
        // run under the connection's value, never under a shorter one of
        // the client's (see `Exchange::align_settings`).
        let (mut sql, mut timeout) = (String::new(), String::new());
        for (name, value) in &self.values {
            if server.values.get(name) != Some(value) && !kept(name) {
                let out = if name == "statement_timeout" { &mut timeout } else { &mut sql };
                match value {
                    Value::Reported(v) => out.push_str(&format!("SET \"{name}\" = {};", quote(v))),
                    Value::Sql(v) => out.push_str(&format!("SET \"{name}\" = {v};")),
                    Value::Plain(v) => {
                        out.push_str(&format!("SELECT pg_catalog.set_config({}, {}, false);", quote(name), quote(v)))
                    }
                    // Only a server's value is ever unknown.
                    Value::Unknown => out.push_str(&format!("RESET \"{name}\";")),
                }
            }
        }
        for name in server.values.keys().filter(|n| !self.values.contains_key(*n) && !kept(n)) {
            let out = if name == "statement_timeout" { &mut timeout } else { &mut sql };
            out.push_str(&format!("RESET \"{name}\";"));
        }
        sql.push_str(&timeout);
        (!sql.is_empty()).then_some(sql)
    }
}

/// Below this, a statement_timeout a server connection carries from another
/// client may cancel pglane's alignment of its settings: PostgreSQL starts
/// the timer at a query's start with the value in force then, so the SETs
/// that change it run under it. A second is four orders of magnitude more
/// than the SETs take; a timeout that short is what a stalled backend or
/// host would meet anywhere.
pub const TIMEOUT_FELT_BELOW_MS: f64 = 1000.0;

/// Whether a query run now on a server connection with `server`'s settings
/// may be cancelled by its statement_timeout before it is done: one is set
/// and, as far as pglane can read it, is under [`TIMEOUT_FELT_BELOW_MS`]
/// (unknown or unreadable values count as short). A timeout that role or
/// database defaults set applies to every client of the pool alike and is
/// not seen here.
pub fn timeout_may_cancel(server: &Settings) -> bool {
    match server.get("statement_timeout") {
        None => false,
        Some(value) => value.plain().and_then(duration_ms).is_none_or(|ms| ms > 0.0 && ms < TIMEOUT_FELT_BELOW_MS),
    }
}

/// A time setting's value in milliseconds, read as PostgreSQL reads one
/// whose unit is milliseconds (statement_timeout, lock_timeout): a number,
/// optionally with a fraction, and optionally one of its units. `None` for
/// anything else.
pub fn duration_ms(value: &str) -> Option<f64> {
    let value = value.trim();
    let split = value.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(value.len());
    let (number, unit) = value.split_at(split);
    let number: f64 = number.parse().ok()?;
    let scale = match unit.trim_start() {
        "" | "ms" => 1.0,
        "us" => 0.001,
        "s" => 1000.0,
        "min" => 60_000.0,
        "h" => 3_600_000.0,
        "d" => 86_400_000.0,
        _ => return None,
    };
    Some(number * scale)
}

/// Whether `sql` mentions RESET, DISCARD or set_config, which may change
/// any setting.
fn resets_or_calls_set_config(sql: &str) -> bool {
    [&b"set_config"[..], b"reset", b"discard"].iter().any(|word| contains_ignore_ascii_case(sql.as_bytes(), word))
}

/// Whether `sql` may change a setting that shapes text output: it names one,
/// or mentions RESET, DISCARD or set_config. (What
/// [`Settings::forget_output_settings_named_in`] acts on.) `marks`: `sql`'s.
pub fn may_change_output_settings(sql: &str, marks: Marks) -> bool {
    marks.any(&OUTPUT_MARKS)
        && (resets_or_calls_set_config(sql)
            || OUTPUT.iter().any(|name| contains_ignore_ascii_case(sql.as_bytes(), name.as_bytes())))
}

/// The marks a text that names an [`OUTPUT`] setting, RESET, DISCARD or
/// set_config has (the first letters of each; a test checks them): a text
/// without them names none.
const OUTPUT_MARKS: [Mark; 5] = [Mark::SetConfig, Mark::Res, Mark::Dis, Mark::Ext, Mark::Byt];

/// A string literal of `value`.
fn quote(value: &str) -> String {
    format!("'{}'", value.replace('\'', "''"))
}

/// A startup packet pglane cannot carry to server connections.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum StartupError {
    #[error("pglane carries only \"-c name=value\" and \"--name=value\" in the options startup parameter, not \"{0}\"")]
    Switch(String),
    #[error("-c {0} requires a value")]
    NoValue(String),
}

/// Startup parameters that are not settings.
const NOT_SETTINGS: [&str; 4] = ["user", "database", "options", "replication"];

/// The settings a client's startup packet asks for, in the order
/// PostgreSQL applies them (a later one wins), names spelled as pglane
/// tracks them ([`canonical_name`]): the switches of `options`, then each
/// parameter but user, database, replication and protocol options (`_pq_.*`).
pub fn from_startup(params: &StartupParams) -> Result<Vec<(String, String)>, StartupError> {
    let mut settings = match params.get("options") {
        Some(options) => parse_options(options)?.into_iter().map(|(name, value)| (canonical_name(&name), value)).collect(),
        None => Vec::new(),
    };
    settings.extend(
        params
            .params
            .iter()
            .filter(|(name, _)| !NOT_SETTINGS.contains(&name.as_str()) && !name.starts_with("_pq_."))
            .map(|(name, value)| (canonical_name(name), value.clone())),
    );
    Ok(settings)
}

/// The `-c name=value`, `-cname=value` and `--name=value` switches of a
/// startup `options` string, split as PostgreSQL's `pg_split_opts` does (on
/// whitespace; a backslash takes the next character as is), with dashes in
/// names made underscores as `ParseLongOption` does. Other switches are an
/// error: PostgreSQL would apply them to the session, pglane cannot.
pub fn parse_options(options: &str) -> Result<Vec<(String, String)>, StartupError> {
    let mut words = Vec::new();
    let mut chars = options.chars().peekable();
    loop {
        while chars.next_if(|c| c.is_ascii_whitespace()).is_some() {}
        if chars.peek().is_none() {
            break;
        }
        let mut word = String::new();
        while let Some(c) = chars.next_if(|c| !c.is_ascii_whitespace()) {
            match c {
                '\\' => match chars.next() {
                    Some(escaped) => word.push(escaped),
                    None => break,
                },
                c => word.push(c),
            }
        }
        words.push(word);
    }
    let mut settings = Vec::new();
    let mut words = words.into_iter();
    while let Some(word) = words.next() {
        let assignment = if word == "-c" {
            words.next().ok_or_else(|| StartupError::Switch(word.clone()))?
        } else if let Some(rest) = word.strip_prefix("--").or_else(|| word.strip_prefix("-c")) {
            rest.to_owned()
        } else {
            return Err(StartupError::Switch(word));
        };
        let (name, value) = assignment.split_once('=').ok_or_else(|| StartupError::NoValue(assignment.clone()))?;
        settings.push((name.replace('-', "_"), value.to_owned()));
    }
    Ok(settings)
}

/// A setting's name as pglane tracks it: the spelling of [`REPORTED`] and
/// [`PARSE_LITERALS`] for those (PostgreSQL's names are case-insensitive),
/// lower case for any other.
pub fn canonical_name(name: &str) -> String {
    REPORTED
        .iter()
        .chain(PARSE_LITERALS.iter())
        .find(|known| known.eq_ignore_ascii_case(name))
        .map(|known| (*known).to_owned())
        .unwrap_or_else(|| name.to_ascii_lowercase())
}

/// Is this setting (as [`canonical_name`] spells it) one the server reports
/// with ParameterStatus?
pub fn is_reported(name: &str) -> bool {
    REPORTED.contains(&name)
}

/// Is this reported setting (a ParameterStatus name) one pglane carries?
/// Every one but the server's own.
pub fn is_carried(name: &str) -> bool {
    !SERVER_OWNED.contains(&name)
}

/// Does `SET <name> ...` (as a client spells it) change a setting carried
/// through ParameterStatus? Includes SET TIME ZONE and SET NAMES.
pub fn is_carried_name(name: &str) -> bool {
    REPORTED.iter().any(|r| r.eq_ignore_ascii_case(name))
        || name.eq_ignore_ascii_case("time")
        || name.eq_ignore_ascii_case("names")
}

/// Words after SET [SESSION] that are not a setting pglane follows from SQL:
/// the role and session authorization (they pin), transaction
/// characteristics and constraints (they end with the transaction), SET
/// LOCAL, and SET SEED (not a setting).
const NOT_FOLLOWED: [&str; 8] =
    ["role", "authorization", "characteristics", "transaction", "local", "constraints", "seed", "session"];

/// Recognizes `SET [SESSION] name {TO|=} value`, `SET SCHEMA 'x'`,
/// `SET XML OPTION x` and `RESET name|ALL` as the whole of a statement text,
/// for any setting the server does not report (those are followed through
/// their ParameterStatus). Anything else (SET LOCAL, the role, several
/// statements, comments) is None.
pub fn parse_change(sql: &str) -> Option<Change> {
    let sql = sql.trim().strip_suffix(';').unwrap_or(sql.trim()).trim();
    if sql.contains(';') || sql.contains("--") || sql.contains("/*") {
        return None;
    }
    let mut words = sql.splitn(2, char::is_whitespace);
    let verb = words.next()?.to_ascii_uppercase();
    let rest = words.next().unwrap_or("").trim_start();
    match verb.as_str() {
        "RESET" if rest.eq_ignore_ascii_case("all") => Some(Change::ResetAll),
        "RESET" => followed_name(rest).map(Change::Reset),
        "SET" => {
            let rest = match rest.split_once(char::is_whitespace) {
                Some((w, r)) if w.eq_ignore_ascii_case("session") => r.trim_start(),
                _ => rest,
            };
            let (name, value) = match rest.split_once(char::is_whitespace) {
                Some((w, v)) if w.eq_ignore_ascii_case("schema") => ("search_path".to_owned(), v.trim()),
                Some((w, v)) if w.eq_ignore_ascii_case("xml") => {
                    let (option, v) = v.trim_start().split_once(char::is_whitespace)?;
                    (option.eq_ignore_ascii_case("option").then(|| "xmloption".to_owned())?, v.trim())
                }
                _ => {
                    let (name, value) = match rest.split_once('=') {
                        Some((n, v)) if !n.trim().contains(char::is_whitespace) => (n.trim(), v.trim()),
                        _ => {
                            let (n, v) = rest.split_once(char::is_whitespace)?;
                            let v = v.trim_start();
                            let v = v.get(..2).filter(|t| t.eq_ignore_ascii_case("to")).map(|_| v[2..].trim())?;
                            (n, v)
                        }
                    };
                    (followed_name(name)?, value)
                }
            };
            if value.is_empty() {
                return None;
            }
            if value.eq_ignore_ascii_case("default") {
                return Some(Change::Reset(name));
            }
            Some(Change::Set(name, value.to_owned()))
        }
        _ => None,
    }
}

/// The canonical name of the setting `word` (as written after SET or
/// RESET: `work_mem`, `"Work_Mem"`, `app.tenant`) if pglane follows it from
/// SQL: not a reported one, not one of [`NOT_FOLLOWED`].
fn followed_name(word: &str) -> Option<String> {
    let name = word.strip_prefix('"').and_then(|w| w.strip_suffix('"')).unwrap_or(word);
    let valid = |part: &str| {
        part.bytes().next().is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
            && part.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'$')
    };
    if name.split('.').count() > 2 || !name.split('.').all(valid) {
        return None;
    }
    if is_carried_name(name) || NOT_FOLLOWED.iter().any(|n| n.eq_ignore_ascii_case(name)) {
        return None;
    }
    Some(canonical_name(name))
}

/// Whether `sql` may be a SELECT of `set_config` calls, by its first bytes
/// alone: every SELECT a client sends is asked, and most are answered
/// without tokenizing. After SELECT comes `set_config` or `pg_catalog`;
/// anything else the tokens refuse too.
fn may_begin_with_set_config(sql: &str) -> bool {
    let sql = sql.trim_start().as_bytes();
    let Some(after) = sql.get(..6).filter(|w| w.eq_ignore_ascii_case(b"select")).map(|_| &sql[6..]) else {
        return false;
    };
    let after = after.trim_ascii_start();
    let starts = |word: &[u8]| after.get(..word.len()).is_some_and(|p| p.eq_ignore_ascii_case(word));
    match after.first().map(u8::to_ascii_lowercase) {
        Some(b's') => starts(b"set_config"),
        Some(b'p') => starts(b"pg_catalog"),
        _ => false,
    }
}

/// Recognizes `SELECT [pg_catalog.]set_config('name', 'value', is_local)`
/// (one call or several, comma-separated) with literal arguments as the
/// whole of a statement text: the session-level changes it makes (none for
/// `is_local = true`). None for anything else, including literals with a
/// backslash (whose meaning hangs on standard_conforming_strings) and names
/// pglane does not follow from SQL.
pub fn parse_set_config(sql: &str) -> Option<Vec<Change>> {
    if !may_begin_with_set_config(sql) {
        return None;
    }
    let mut t = Tokens { rest: sql.trim().strip_suffix(';').unwrap_or(sql.trim()) };
    if !t.word()?.eq_ignore_ascii_case("select") {
        return None;
    }
    let mut changes = Vec::new();
    loop {
        let mut function = t.word()?;
        if function.eq_ignore_ascii_case("pg_catalog") {
            t.punct('.')?;
            function = t.word()?;
        }
        if !function.eq_ignore_ascii_case("set_config") {
            return None;
        }
        t.punct('(')?;
        let name = t.string()?;
        t.punct(',')?;
        let value = t.string()?;
        t.punct(',')?;
        let is_local = t.word()?;
        t.punct(')')?;
        let name = if is_carried_name(&name) { canonical_name(&name) } else { followed_name(&name)? };
        if is_local.eq_ignore_ascii_case("false") {
            changes.push(Change::SetPlain(name, value));
        } else if !is_local.eq_ignore_ascii_case("true") {
            return None;
        }
        if t.punct(',').is_none() {
            break;
        }
    }
    t.rest.trim().is_empty().then_some(changes)
}

/// The tokens [`parse_set_config`] reads: words, punctuation, plain string
/// literals.
struct Tokens<'a> {
    rest: &'a str,
}

impl<'a> Tokens<'a> {
    fn word(&mut self) -> Option<&'a str> {
        self.rest = self.rest.trim_start();
        let end = self.rest.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(self.rest.len());
        let (word, rest) = self.rest.split_at(end);
        self.rest = rest;
        (!word.is_empty()).then_some(word)
    }

    fn punct(&mut self, c: char) -> Option<()> {
        self.rest = self.rest.trim_start().strip_prefix(c)?;
        Some(())
    }

    /// A `'...'` literal with `''` for a quote and no backslash.
    fn string(&mut self) -> Option<String> {
        let mut chars = self.rest.trim_start().strip_prefix('\'')?.char_indices();
        let body = self.rest.trim_start().strip_prefix('\'')?;
        let mut value = String::new();
        while let Some((i, c)) = chars.next() {
            match c {
                '\\' => return None,
                '\'' if body[i + 1..].starts_with('\'') => {
                    value.push('\'');
                    chars.next();
                }
                '\'' => {
                    self.rest = &body[i + 1..];
                    return Some(value);
                }
                c => value.push(c),
            }
        }
        None
    }
}

/// What a statement text's string literals make it depend on (see
/// [`TextTraits::of`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TextTraits {
    /// It may hold a string literal: parse analysis converts it in the
    /// settings of [`PARSE_LITERALS`].
    pub literals: bool,
    /// A literal of it may name the moment it is parsed
    /// ([`names_the_moment`]).
    pub moment: bool,
    /// What it returns is shaped by the session, not by its text
    /// ([`shaped_by_the_session`]).
    pub session_shaped: bool,
}

impl TextTraits {
    /// Looks at `sql` once; a text without a quote or a dollar quote (most
    /// statements with parameters) is answered at memchr's speed.
    pub fn of(sql: &[u8]) -> TextTraits {
        let literals = may_have_string_literal(sql);
        TextTraits { literals, moment: literals && names_the_moment(sql), session_shaped: shaped_by_the_session(sql) }
    }
}

/// Whether what `sql` returns, its columns and their types, is shaped by
/// state of the session rather than by the text: `FETCH` and `MOVE` return
/// the rows of whichever cursor of that name the session has open, `EXECUTE`
/// those of whichever SQL prepared statement. The same text means another
/// result from one moment to the next, so its description cannot be
/// cached or shared. Looks at the first word past whitespace, comments and
/// parentheses.
pub fn shaped_by_the_session(sql: &[u8]) -> bool {
    let mut rest = sql;
    loop {
        rest = rest.trim_ascii_start();
        if let Some(after) = rest.strip_prefix(b"--") {
            rest = after.iter().position(|&b| b == b'\n').map_or(&[][..], |i| &after[i..]);
        } else if let Some(after) = rest.strip_prefix(b"/*") {
            // Nested comments end at the first */ here: the word after it
            // is then not the first, and the answer is no, as for any text
            // this does not recognize.
            rest = after.windows(2).position(|w| w == b"*/").map_or(&[][..], |i| &after[i + 2..]);
        } else if let Some(after) = rest.strip_prefix(b"(") {
            rest = after;
        } else {
            break;
        }
    }
    let end = rest.iter().position(|b| !b.is_ascii_alphabetic()).unwrap_or(rest.len());
    [&b"fetch"[..], b"move", b"execute"].iter().any(|w| rest[..end].eq_ignore_ascii_case(w))
}

/// Whether `sql` may hold a string literal: a quote, or a dollar quote
/// (a `$` not followed by a digit). Parse analysis converts the literals
/// of a text in the settings of [`PARSE_LITERALS`].
pub fn may_have_string_literal(sql: &[u8]) -> bool {
    if sql.contains(&b'\'') {
        return true;
    }
    let mut rest = sql;
    while let Some(at) = rest.iter().position(|&b| b == b'$') {
        if !rest.get(at + 1).is_some_and(u8::is_ascii_digit) {
            return true;
        }
        rest = &rest[at + 1..];
    }
    false
}

/// Whether a string literal of `sql` may name the moment it is parsed
/// (`'now'`, `'today'`, `'tomorrow 13:00'`, `'yesterday'`), which is frozen
/// into a statement when it is prepared: such a text is parsed anew for each
/// client, as PostgreSQL would. Any literal holding one of those words
/// counts; a text pglane cannot split into literals counts too.
pub fn names_the_moment(sql: &[u8]) -> bool {
    const WORDS: [&[u8]; 4] = [b"now", b"today", b"tomorrow", b"yesterday"];
    let names = |literal: &[u8]| WORDS.iter().any(|w| contains_ignore_ascii_case(literal, w));
    let mut rest = sql;
    while let Some(start) = rest.iter().position(|&b| b == b'\'' || b == b'$') {
        let after = &rest[start + 1..];
        if rest[start] == b'\'' {
            // '' inside a literal ends one span and starts the next: the
            // words are found all the same.
            let Some(end) = after.iter().position(|&b| b == b'\'') else { return true };
            if names(&after[..end]) {
                return true;
            }
            rest = &after[end + 1..];
            continue;
        }
        if after.first().is_some_and(u8::is_ascii_digit) {
            rest = after;
            continue;
        }
        let Some(tag_end) = after.iter().position(|&b| b == b'$') else { return true };
        let tag = &rest[start..start + tag_end + 2];
        if !tag[1..tag.len() - 1].iter().all(|&b| b.is_ascii_alphanumeric() || b == b'_' || b >= 0x80) {
            rest = after;
            continue;
        }
        let body = &after[tag_end + 1..];
        let Some(end) = body.windows(tag.len()).position(|w| w == tag) else { return true };
        if names(&body[..end]) {
            return true;
        }
        rest = &body[end + tag.len()..];
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_values_are_read_in_milliseconds_as_postgresql_reads_them() {
        assert_eq!(duration_ms("0"), Some(0.0));
        assert_eq!(duration_ms("1"), Some(1.0));
        assert_eq!(duration_ms("250ms"), Some(250.0));
        assert_eq!(duration_ms("1.5s"), Some(1500.0));
        assert_eq!(duration_ms("2 min"), Some(120_000.0));
        assert_eq!(duration_ms("1h"), Some(3_600_000.0));
        assert_eq!(duration_ms("1d"), Some(86_400_000.0));
        assert_eq!(duration_ms("500us"), Some(0.5));
        assert_eq!(duration_ms("5 fortnights"), None);
        assert_eq!(duration_ms("-1"), None);
        assert_eq!(duration_ms(""), None);
    }

    #[test]
    fn an_alignment_sets_statement_timeout_last() {
        let mut client = Settings::default();
        client.set("statement_timeout", Value::Sql("1".into()));
        client.set("work_mem", Value::Sql("'64MB'".into()));
        client.set("application_name", Value::Reported("app".into()));
        let mut server = Settings::default();
        server.set("zz.custom", Value::Sql("1".into()));
        assert_eq!(
            client.sql_to_apply_over(&server, false).as_deref(),
            Some("SET \"application_name\" = 'app';SET \"work_mem\" = '64MB';RESET \"zz.custom\";SET \"statement_timeout\" = 1;")
        );
        let (mut client, mut server) = (Settings::default(), Settings::default());
        client.set("a.b", Value::Sql("1".into()));
        server.set("statement_timeout", Value::Sql("1".into()));
        server.set("zz.custom", Value::Sql("1".into()));
        assert_eq!(
            client.sql_to_apply_over(&server, false).as_deref(),
            Some("SET \"a.b\" = 1;RESET \"zz.custom\";RESET \"statement_timeout\";")
        );
    }

    #[test]
    fn a_short_or_unreadable_statement_timeout_may_cancel_an_alignment() {
        let with = |value: Value| {
            let mut server = Settings::default();
            server.set("statement_timeout", value);
            timeout_may_cancel(&server)
        };
        assert!(!timeout_may_cancel(&Settings::default()));
        assert!(with(Value::Sql("1".into())));
        assert!(with(Value::Sql("'999ms'".into())));
        assert!(with(Value::Plain("10".into())));
        assert!(with(Value::Unknown));
        assert!(with(Value::Sql("'1' || 's'".into())));
        assert!(!with(Value::Sql("0".into())));
        assert!(!with(Value::Sql("'1s'".into())));
        assert!(!with(Value::Plain("30000".into())));
    }

    #[test]
    fn set_and_reset_statements() {
        assert_eq!(parse_change("SET search_path = app, public"), Some(Change::Set("search_path".into(), "app, public".into())));
        assert_eq!(
            parse_change("set session search_path to \"$user\", public;"),
            Some(Change::Set("search_path".into(), "\"$user\", public".into()))
        );
        assert_eq!(parse_change("SET statement_timeout TO '5s'"), Some(Change::Set("statement_timeout".into(), "'5s'".into())));
        assert_eq!(parse_change("SET lock_timeout = DEFAULT"), Some(Change::Reset("lock_timeout".into())));
        assert_eq!(parse_change("reset search_path"), Some(Change::Reset("search_path".into())));
        assert_eq!(parse_change("RESET ALL"), Some(Change::ResetAll));
        // Any setting the server does not report, custom ones included.
        assert_eq!(parse_change("SET enable_seqscan = off"), Some(Change::Set("enable_seqscan".into(), "off".into())));
        assert_eq!(parse_change("set Work_Mem to '8MB'"), Some(Change::Set("work_mem".into(), "'8MB'".into())));
        assert_eq!(parse_change("SET app.Tenant = 42"), Some(Change::Set("app.tenant".into(), "42".into())));
        assert_eq!(parse_change("SET \"app.user\" = 'x'"), Some(Change::Set("app.user".into(), "'x'".into())));
        assert_eq!(parse_change("SET SCHEMA 'app'"), Some(Change::Set("search_path".into(), "'app'".into())));
        assert_eq!(parse_change("SET XML OPTION content"), Some(Change::Set("xmloption".into(), "content".into())));
        assert_eq!(parse_change("SET timezone_abbreviations TO DEFAULT"), Some(Change::Reset("timezone_abbreviations".into())));
    }

    #[test]
    fn reported_settings_role_and_transaction_scoped_ones_are_not_followed_from_sql() {
        for sql in [
            "SET TimeZone = 'UTC'",
            "SET application_name = 'x'",
            "SET TIME ZONE 'UTC'",
            "SET NAMES 'UTF8'",
            "SET ROLE bob",
            "RESET ROLE",
            "SET SESSION AUTHORIZATION bob",
            "SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY",
            "SET TRANSACTION READ ONLY",
            "SET LOCAL work_mem = '1MB'",
            "SET CONSTRAINTS ALL DEFERRED",
            "SET SEED TO 0.5",
            "SET a.b.c = 1",
            "SET 1x = 1",
            "SET default_transaction_read_only = on",
        ] {
            assert_eq!(parse_change(sql), None, "{sql}");
        }
    }

    #[test]
    fn set_config_with_literal_arguments() {
        assert_eq!(
            parse_set_config("select set_config('statement_timeout', '1234', false)"),
            Some(vec![Change::SetPlain("statement_timeout".into(), "1234".into())])
        );
        assert_eq!(
            parse_set_config("SELECT pg_catalog.set_config('search_path', 'a, b', false), set_config('lock_timeout','1s',true);"),
            Some(vec![Change::SetPlain("search_path".into(), "a, b".into())])
        );
        // Reported ones are followed too (ParameterStatus confirms them).
        assert_eq!(
            parse_set_config("select set_config('default_transaction_read_only', 'on', false)"),
            Some(vec![Change::SetPlain("default_transaction_read_only".into(), "on".into())])
        );
        assert_eq!(
            parse_set_config("select set_config('app.x', 'it''s', false)"),
            Some(vec![Change::SetPlain("app.x".into(), "it's".into())])
        );
        for sql in [
            "select set_config('a.b', x, false)",
            "select set_config('a.b', 'c', false) from t",
            "select set_config('a.b', 'c\\d', false)",
            "select set_config('role', 'bob', false)",
            "select set_config('a.b', 'c', maybe)",
            "select 1, set_config('a.b', 'c', false)",
            "select set_config('a.b', 'c')",
            "select now()",
        ] {
            assert_eq!(parse_set_config(sql), None, "{sql}");
        }
    }

    #[test]
    fn the_first_bytes_tell_most_selects_from_set_config_calls() {
        for sql in ["select set_config('a', 'b', false)", "  SELECT\n\tPG_CATALOG.set_config(", "selectset_config"] {
            assert!(may_begin_with_set_config(sql), "{sql}");
        }
        for sql in ["SELECT abalance FROM pgbench_accounts WHERE aid = 1", "select 1, set_config('a', 'b', false)", "sel", ""] {
            assert!(!may_begin_with_set_config(sql), "{sql}");
        }
    }

    #[test]
    fn parse_contexts_hold_what_parse_analysis_reads() {
        let mut a = Settings::default();
        assert!(a.parse_context(false).is_empty() && a.parse_context(true).is_empty());
        a.set("application_name", Value::Reported("a".into()));
        a.set("work_mem", Value::Sql("'8MB'".into()));
        assert!(a.parse_context(true).is_empty(), "neither changes what a text means");
        a.set("TimeZone", Value::Reported("UTC".into()));
        assert!(a.parse_context(false).is_empty(), "TimeZone matters to literals only");
        assert!(!a.parse_context(true).is_empty());
        let mut b = a.clone();
        assert_eq!(a.parse_context(true), b.parse_context(true));
        b.set("TimeZone", Value::Reported("Asia/Tokyo".into()));
        assert_ne!(a.parse_context(true), b.parse_context(true));
        b.set("search_path", Value::Sql("app".into()));
        assert!(!b.parse_context(false).is_empty());
        let version = b.version();
        b.remove("search_path");
        assert_ne!(b.version(), version, "every change is a new version");
        let mut c = Settings::default();
        c.set("TimeZone", Value::Reported("Asia/Tokyo".into()));
        assert_ne!(c.version(), b.version(), "another Settings' changes take other versions");
        let replaced = std::mem::take(&mut c);
        assert_eq!((c.version(), c.is_empty()), (0, true), "version 0 is always empty");
        assert_ne!(replaced.version(), 0);
        let mut server = Settings::default();
        server.take_values_of(&replaced, false);
        assert_eq!((server.version(), replaced.sql_to_apply_over(&server, false)), (replaced.version(), None));
        server.set("TimeZone", Value::Reported("UTC".into()));
        assert!(replaced.sql_to_apply_over(&server, false).is_some(), "a change on either side is a new version");
        // Equal values under two versions: found so once, then by the version.
        let mut twin = Settings::default();
        twin.set("TimeZone", Value::Reported("Asia/Tokyo".into()));
        assert_ne!(twin.version(), replaced.version());
        assert_eq!(twin.sql_to_apply_over(&replaced, false), None);
        assert_eq!(twin.version(), replaced.version(), "the same values take one version");
        assert_eq!(b.parse_settings().get("TimeZone"), Some(&Value::Reported("Asia/Tokyo".into())));
        assert_eq!(b.parse_settings().get("work_mem"), None);
    }

    #[test]
    fn literals_that_name_the_moment() {
        assert!(names_the_moment(b"select 'now'::timestamptz"));
        assert!(names_the_moment(b"select 'TODAY'::date, 1"));
        assert!(names_the_moment(b"select $$tomorrow 13:00$$::timestamp"));
        assert!(!names_the_moment(b"select now()"), "no literal");
        assert!(!names_the_moment(b"select now(), 'x', $a$y$a$, $1"), "not in a literal");
        assert!(names_the_moment(b"select 'it''s now'"));
        assert!(names_the_moment(b"select 'unterminated now"));
        assert!(!names_the_moment(b"select $1::timestamptz"));
        assert!(may_have_string_literal(b"select 'x'"));
        assert!(may_have_string_literal(b"select $tag$x$tag$"));
        assert!(!may_have_string_literal(b"select $1, $2"));
    }

    #[test]
    fn anything_else_is_not_followed() {
        for sql in [
            "SET LOCAL search_path = x",
            "SET search_path = a; select 1",
            "SET search_path",
            "select 1",
            "SET /* c */ search_path = x",
            "SET TIME ZONE 'UTC'",
            "",
        ] {
            assert_eq!(parse_change(sql), None, "{sql}");
        }
    }

    #[test]
    fn sql_to_make_a_server_match_a_client() {
        let mut client = Settings::default();
        client.set("TimeZone", Value::Reported("Europe/Paris".into()));
        client.set("search_path", Value::Sql("app, public".into()));
        let mut server = Settings::default();
        server.set("search_path", Value::Sql("app, public".into()));
        server.set("statement_timeout", Value::Sql("'1s'".into()));
        assert_eq!(
            client.sql_to_apply_over(&server, false).as_deref(),
            Some("SET \"TimeZone\" = 'Europe/Paris';RESET \"statement_timeout\";")
        );
        assert_eq!(client.sql_to_apply_over(&client.clone(), false), None);
        let mut quoted = Settings::default();
        quoted.set("application_name", Value::Reported("it's".into()));
        assert_eq!(quoted.sql_to_apply_over(&Settings::default(), false).as_deref(), Some("SET \"application_name\" = 'it''s';"));
    }

    #[test]
    fn reset_all_keeps_reported_settings() {
        let mut s = Settings::default();
        s.set("TimeZone", Value::Reported("UTC".into()));
        s.apply(&Change::Set("search_path".into(), "x".into()));
        s.apply(&Change::ResetAll);
        assert_eq!(s.sql_to_apply_over(&Settings::default(), false).as_deref(), Some("SET \"TimeZone\" = 'UTC';"));
    }

    fn startup(params: &[(&str, &str)]) -> StartupParams {
        StartupParams { params: params.iter().map(|(n, v)| (n.to_string(), v.to_string())).collect(), ..StartupParams::default() }
    }

    #[test]
    fn startup_parameters_and_options_become_settings() {
        let p = startup(&[
            ("user", "u"),
            ("database", "d"),
            ("SEARCH_PATH", "app, public"),
            ("extra_float_digits", "3"),
            ("_pq_.compression", "on"),
            ("replication", "false"),
            ("options", r"-c statement_timeout=5s --lock-timeout=1s -cmy.tag=a\ b\\c  -c TimeZone=UTC"),
        ]);
        let got = from_startup(&p).unwrap();
        let pairs: Vec<(&str, &str)> = got.iter().map(|(n, v)| (n.as_str(), v.as_str())).collect();
        assert_eq!(
            pairs,
            [
                ("statement_timeout", "5s"),
                ("lock_timeout", "1s"),
                ("my.tag", r"a b\c"),
                ("TimeZone", "UTC"),
                ("search_path", "app, public"),
                ("extra_float_digits", "3"),
            ]
        );
        // A parameter of the packet wins over the same setting in options.
        let p = startup(&[("options", "-c extra_float_digits=0"), ("extra_float_digits", "2")]);
        let s = Settings::from_startup_values(&from_startup(&p).unwrap());
        assert_eq!(s.get("extra_float_digits"), Some(&Value::Plain("2".into())));
        assert_eq!(parse_options("  "), Ok(vec![]));
        assert_eq!(parse_options("-c"), Err(StartupError::Switch("-c".into())));
        assert_eq!(parse_options("-c work_mem"), Err(StartupError::NoValue("work_mem".into())));
        assert_eq!(parse_options("-B 100"), Err(StartupError::Switch("-B".into())));
        assert_eq!(parse_options("geqo=off"), Err(StartupError::Switch("geqo=off".into())));
    }

    /// A pinned client's own connection: a value it changed unseen (unknown
    /// there) stays; what pglane knows is aligned as ever.
    #[test]
    fn what_a_cursor_or_an_sql_prepared_statement_returns_is_the_sessions() {
        for sql in [
            "fetch 2 from c2",
            "  FETCH ALL IN c",
            "move 1 in c",
            "EXECUTE p1(1)",
            "/* c */ fetch next from c",
            "-- c\nexecute p",
        ] {
            assert!(shaped_by_the_session(sql.as_bytes()), "{sql}");
        }
        for sql in
            ["select 1", "fetched", "select * from fetch", "", "/* unterminated", "prepare p as select 1", "explain execute p"]
        {
            assert!(!shaped_by_the_session(sql.as_bytes()), "{sql}");
        }
        assert!(TextTraits::of(b"fetch 1 from c").session_shaped);
    }

    #[test]
    fn a_pinned_clients_unseen_changes_are_kept() {
        let mut client = Settings::default();
        client.set("app.tenant", Value::Plain("b".into()));
        let mut server = Settings::default();
        server.set("extra_float_digits", Value::Unknown);
        let kept = client.sql_to_apply_over(&server, true);
        assert_eq!(kept.as_deref(), Some("SELECT pg_catalog.set_config('app.tenant', 'b', false);"));
        assert_eq!(
            client.sql_to_apply_over(&server, false).as_deref(),
            Some("SELECT pg_catalog.set_config('app.tenant', 'b', false);RESET \"extra_float_digits\";")
        );
        server.take_values_of(&client, true);
        assert_eq!(server.get("extra_float_digits"), Some(&Value::Unknown), "still unknown");
        assert_eq!(client.sql_to_apply_over(&server, true), None, "nothing more to do");
        server.take_values_of(&client, false);
        assert!(client.same_values(&server));
    }

    #[test]
    fn startup_values_are_applied_with_set_config_and_are_what_reset_restores() {
        let values = vec![("search_path".to_string(), "app, public".to_string()), ("TimeZone".to_string(), "UTC".to_string())];
        let mut client = Settings::from_startup_values(&values);
        let server = Settings::default();
        assert_eq!(
            client.sql_to_apply_over(&server, false).as_deref(),
            Some("SET \"TimeZone\" = 'UTC';SELECT pg_catalog.set_config('search_path', 'app, public', false);")
        );
        let mut server = Settings::default();
        server.take_values_of(&client, false);
        assert!(server.same_values(&client));
        client.apply(&Change::Set("search_path".into(), "x".into()));
        server.apply(&Change::Set("search_path".into(), "x".into()));
        client.apply(&Change::Reset("search_path".into()));
        server.apply(&Change::Reset("search_path".into()));
        // The server went back to its default, the client to its startup value.
        assert_eq!(client.get("search_path"), Some(&Value::Plain("app, public".into())));
        assert_eq!(server.get("search_path"), None);
        assert!(!server.same_values(&client));
        client.apply(&Change::Set("search_path".into(), "x".into()));
        client.apply(&Change::ResetAll);
        assert_eq!(client.get("search_path"), Some(&Value::Plain("app, public".into())));
        assert_eq!(client.get("TimeZone"), Some(&Value::Reported("UTC".into())));
        assert_eq!(canonical_name("timezone"), "TimeZone");
        assert_eq!(canonical_name("My.Setting"), "my.setting");
    }

    #[test]
    fn output_settings_known_and_forgotten() {
        let forget =
            |s: &mut Settings, sql: &str, followed| s.forget_output_settings_named_in(sql, Marks::of(sql.as_bytes()), followed);
        let mut s = Settings::default();
        s.set("extra_float_digits", Value::Sql("'-15'".into()));
        s.set("bytea_output", Value::Sql("E'hex'".into()));
        s.set("search_path", Value::Plain("x".into()));
        let output: Vec<_> = s.output().collect();
        assert_eq!(output, [("extra_float_digits", Some("-15")), ("bytea_output", None)]);
        assert_eq!(Value::Sql("3".into()).plain(), Some("3"));
        assert_eq!(Value::Sql("'a''b'".into()).plain(), None);
        s.set("bytea_output", Value::Plain("hex".into()));
        forget(&mut s, "SET extra_float_digits = 2", true);
        assert_eq!(s.output().filter(|(_, v)| v.is_none()).count(), 0, "a followed SET is known");
        forget(&mut s, "SET LOCAL extra_float_digits = 2", false);
        assert_eq!(s.get("extra_float_digits"), Some(&Value::Unknown));
        assert_eq!(s.get("bytea_output"), Some(&Value::Plain("hex".into())));
        forget(&mut s, "select pg_catalog.set_config($1, $2, false)", false);
        assert_eq!(s.get("bytea_output"), Some(&Value::Unknown));
        // An unknown value is made known again by a RESET.
        assert_eq!(
            Settings::default().sql_to_apply_over(&s, false).as_deref(),
            Some("RESET \"bytea_output\";RESET \"extra_float_digits\";RESET \"search_path\";")
        );
        forget(&mut s, "select 1", false);
        let mut s = Settings::default();
        forget(&mut s, "select 1; reset all", false);
        assert_eq!(s.output().filter(|(_, v)| v.is_none()).count(), 2);
    }

    #[test]
    fn the_words_that_may_change_output_settings_have_the_marks_looked_for() {
        for word in OUTPUT.iter().copied().chain(["set_config", "reset", "discard"]) {
            assert!(Marks::of(word.as_bytes()).any(&OUTPUT_MARKS), "{word}");
            assert!(may_change_output_settings(word, Marks::of(word.as_bytes())), "{word}");
        }
        let pgbench = "SELECT abalance FROM pgbench_accounts WHERE aid = 1;";
        assert!(!may_change_output_settings(pgbench, Marks::of(pgbench.as_bytes())));
    }
}
