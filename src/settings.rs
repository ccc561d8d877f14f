//! Session settings: what a client has set, what a server connection has,
//! and how to make the second the first. `client` follows a client's
//! settings and carries them to whichever server connection it gets next in
//! transaction mode; `server` records what each connection has. This module
//! owns the values and the rules; it does no I/O.
//!
//! Three sources, all exact about what the server really has:
//! - the client's StartupMessage: every parameter but user, database,
//!   replication and protocol options (`_pq_.*`), and the `-c name=value` /
//!   `--name=value` switches of `options` ([`from_startup`]). PostgreSQL
//!   would apply them at login; pglane applies them to each server
//!   connection the client gets, with `set_config(name, value, false)`,
//!   which reads a value exactly as the startup packet does (a `SET` of a
//!   quoted string would make `search_path=a, b` one schema named `a, b`).
//!   They are also what RESET goes back to, as on PostgreSQL;
//! - ParameterStatus messages, which PostgreSQL sends whenever a reported
//!   setting changes (TimeZone, DateStyle, application_name, ...), including
//!   when a rollback undoes a SET;
//! - `SET name = value` / `RESET name` sent as a single simple query outside a
//!   transaction block, for a few settings PostgreSQL 15 does not report
//!   (search_path, statement_timeout, ...). A SET inside BEGIN ... COMMIT of
//!   these is not carried over (documented in the README).
//!
//! A server connection's value can also become [`Value::Unknown`]: SQL that
//! names one of the output settings pglane negotiates on (extra_float_digits,
//! bytea_output) or calls `set_config` may have changed it unseen
//! ([`Settings::forget_output_settings_named_in`]).
//!
//! Before a client's transaction runs on a server connection whose settings
//! differ from the client's, pglane sends the SETs and RESETs that make them
//! equal. Pure functions; the exchange applies them.

use std::collections::BTreeMap;

use thiserror::Error;

use crate::prepare::lexer::contains_ignore_ascii_case;
use crate::protocol::startup::StartupParams;

/// Reported settings pglane carries between server connections.
pub const REPORTED: [&str; 6] =
    ["application_name", "client_encoding", "DateStyle", "IntervalStyle", "TimeZone", "standard_conforming_strings"];

/// Unreported settings pglane follows from the client's SQL.
pub const FOLLOWED: [&str; 8] = [
    "search_path",
    "statement_timeout",
    "lock_timeout",
    "idle_in_transaction_session_timeout",
    "extra_float_digits",
    "bytea_output",
    "work_mem",
    "default_transaction_isolation",
];

/// Unreported settings that change how values are printed, which binary
/// format negotiation needs to know.
pub const OUTPUT: [&str; 2] = ["extra_float_digits", "bytea_output"];

/// A setting's value: as ParameterStatus reported it (a plain string, quoted
/// when sent back), as the client wrote it in SQL (sent back verbatim), as
/// the client's startup packet gave it (a plain string, applied with
/// `set_config`), or, on a server connection only, not known.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    Reported(String),
    Sql(String),
    Startup(String),
    Unknown,
}

impl Value {
    /// The value as the server would read it from a startup packet or
    /// `set_config`, if pglane knows it exactly: reported and startup values
    /// as they are, an SQL value if it is a plain word, number or string
    /// literal (`3`, `-15`, `'hex'`, `hex`).
    pub fn plain(&self) -> Option<&str> {
        match self {
            Value::Reported(v) | Value::Startup(v) => Some(v),
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
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Settings {
    values: BTreeMap<String, Value>,
    /// The client's startup values (not reported ones): RESET, RESET ALL
    /// and DISCARD ALL go back to these. Empty for a server connection.
    baseline: BTreeMap<String, Value>,
}

/// A SET or RESET of a followed setting, from a client's simple query.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    Set(String, String),
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
            if is_carried(name) {
                settings.set(name, Value::Reported(value.clone()));
                settings.baseline.insert(name.clone(), Value::Reported(value.clone()));
            } else {
                settings.set(name, Value::Startup(value.clone()));
                settings.baseline.insert(name.clone(), Value::Startup(value.clone()));
            }
        }
        settings
    }

    pub fn set(&mut self, name: &str, value: Value) {
        self.values.insert(name.to_owned(), value);
    }

    pub fn get(&self, name: &str) -> Option<&Value> {
        self.values.get(name)
    }

    /// A client's own search_path, as it gave it (`None`: the server's
    /// default), for keeping its prepared statements apart from those of
    /// clients on another one. Two spellings of one path are two keys,
    /// which costs a Parse, never a wrong result.
    pub fn search_path_key(&self) -> Option<String> {
        self.values.get("search_path").map(|value| match value {
            Value::Reported(v) | Value::Startup(v) => format!("v{v}"),
            Value::Sql(v) => format!("s{v}"),
            Value::Unknown => "?".to_owned(),
        })
    }

    pub fn remove(&mut self, name: &str) {
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
            Change::Reset(name) => match self.baseline.get(name) {
                Some(startup) => {
                    let startup = startup.clone();
                    self.set(name, startup);
                }
                None => self.remove(name),
            },
            Change::ResetAll => {
                self.values.retain(|name, _| REPORTED.contains(&name.as_str()));
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
    /// has once [`Settings::sql_to_apply_over`] ran.
    pub fn take_values_of(&mut self, client: &Settings) {
        self.values.clone_from(&client.values);
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
    pub fn forget_output_settings_named_in(&mut self, sql: &str, followed: bool) {
        if followed {
            return;
        }
        let any = resets_or_calls_set_config(sql);
        for name in OUTPUT {
            if any || contains_ignore_ascii_case(sql.as_bytes(), name.as_bytes()) {
                self.values.insert(name.to_owned(), Value::Unknown);
            }
        }
    }

    /// The SQL that turns a server connection with `server` settings into one
    /// with `self`'s, or None if they already agree.
    pub fn sql_to_apply_over(&self, server: &Settings) -> Option<String> {
        let mut sql = String::new();
        for (name, value) in &self.values {
            if server.values.get(name) != Some(value) {
                match value {
                    Value::Reported(v) => sql.push_str(&format!("SET \"{name}\" = {};", quote(v))),
                    Value::Sql(v) => sql.push_str(&format!("SET \"{name}\" = {v};")),
                    Value::Startup(v) => {
                        sql.push_str(&format!("SELECT pg_catalog.set_config({}, {}, false);", quote(name), quote(v)))
                    }
                    // Only a server's value is ever unknown.
                    Value::Unknown => sql.push_str(&format!("RESET \"{name}\";")),
                }
            }
        }
        for name in server.values.keys().filter(|n| !self.values.contains_key(*n)) {
            sql.push_str(&format!("RESET \"{name}\";"));
        }
        (!sql.is_empty()).then_some(sql)
    }
}

/// Whether `sql` mentions RESET, DISCARD or set_config, which may change
/// any setting.
fn resets_or_calls_set_config(sql: &str) -> bool {
    [&b"set_config"[..], b"reset", b"discard"].iter().any(|word| contains_ignore_ascii_case(sql.as_bytes(), word))
}

/// Whether `sql` may change a setting that shapes text output: it names one,
/// or mentions RESET, DISCARD or set_config. (What
/// [`Settings::forget_output_settings_named_in`] acts on.)
pub fn may_change_output_settings(sql: &str) -> bool {
    resets_or_calls_set_config(sql) || OUTPUT.iter().any(|name| contains_ignore_ascii_case(sql.as_bytes(), name.as_bytes()))
}

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
/// [`FOLLOWED`] for those (PostgreSQL's names are case-insensitive), lower
/// case for any other.
pub fn canonical_name(name: &str) -> String {
    REPORTED
        .iter()
        .chain(FOLLOWED.iter())
        .find(|known| known.eq_ignore_ascii_case(name))
        .map(|known| (*known).to_owned())
        .unwrap_or_else(|| name.to_ascii_lowercase())
}

/// Is this reported setting one pglane carries?
pub fn is_carried(name: &str) -> bool {
    REPORTED.contains(&name)
}

/// Does `SET <name> ...` (as a client spells it) change a setting carried
/// through ParameterStatus? Includes SET TIME ZONE and SET NAMES.
pub fn is_carried_name(name: &str) -> bool {
    REPORTED.iter().any(|r| r.eq_ignore_ascii_case(name))
        || name.eq_ignore_ascii_case("time")
        || name.eq_ignore_ascii_case("names")
}

/// Recognizes `SET [SESSION] name {TO|=} value` and `RESET name|ALL` of a
/// followed setting as the whole of a simple query. Anything else (other
/// settings, SET LOCAL, several statements, comments) is None.
pub fn parse_change(sql: &str) -> Option<Change> {
    let sql = sql.trim().strip_suffix(';').unwrap_or(sql.trim()).trim();
    if sql.contains(';') || sql.contains("--") || sql.contains("/*") {
        return None;
    }
    let mut words = sql.splitn(2, char::is_whitespace);
    let verb = words.next()?.to_ascii_uppercase();
    let rest = words.next().unwrap_or("").trim_start();
    let followed = |name: &str| FOLLOWED.iter().find(|f| f.eq_ignore_ascii_case(name)).map(|f| f.to_string());
    match verb.as_str() {
        "RESET" => {
            if rest.eq_ignore_ascii_case("all") {
                Some(Change::ResetAll)
            } else {
                followed(rest).map(Change::Reset)
            }
        }
        "SET" => {
            let rest = match rest.split_once(char::is_whitespace) {
                Some((w, r)) if w.eq_ignore_ascii_case("session") => r.trim_start(),
                _ => rest,
            };
            let (name, value) = match rest.split_once('=') {
                Some((n, v)) if !n.trim().contains(char::is_whitespace) => (n.trim(), v.trim()),
                _ => {
                    let (n, v) = rest.split_once(char::is_whitespace)?;
                    let v = v.trim_start();
                    let v = v.get(..2).filter(|t| t.eq_ignore_ascii_case("to")).map(|_| v[2..].trim())?;
                    (n, v)
                }
            };
            let name = followed(name)?;
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

#[cfg(test)]
mod tests {
    use super::*;

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
    }

    #[test]
    fn anything_else_is_not_followed() {
        for sql in [
            "SET LOCAL search_path = x",
            "SET search_path = a; select 1",
            "SET enable_seqscan = off",
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
            client.sql_to_apply_over(&server).as_deref(),
            Some("SET \"TimeZone\" = 'Europe/Paris';RESET \"statement_timeout\";")
        );
        assert_eq!(client.sql_to_apply_over(&client.clone()), None);
        let mut quoted = Settings::default();
        quoted.set("application_name", Value::Reported("it's".into()));
        assert_eq!(quoted.sql_to_apply_over(&Settings::default()).as_deref(), Some("SET \"application_name\" = 'it''s';"));
    }

    #[test]
    fn reset_all_keeps_reported_settings() {
        let mut s = Settings::default();
        s.set("TimeZone", Value::Reported("UTC".into()));
        s.apply(&Change::Set("search_path".into(), "x".into()));
        s.apply(&Change::ResetAll);
        assert_eq!(s.sql_to_apply_over(&Settings::default()).as_deref(), Some("SET \"TimeZone\" = 'UTC';"));
    }

    fn startup(params: &[(&str, &str)]) -> StartupParams {
        StartupParams { params: params.iter().map(|(n, v)| (n.to_string(), v.to_string())).collect() }
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
        assert_eq!(s.get("extra_float_digits"), Some(&Value::Startup("2".into())));
        assert_eq!(parse_options("  "), Ok(vec![]));
        assert_eq!(parse_options("-c"), Err(StartupError::Switch("-c".into())));
        assert_eq!(parse_options("-c work_mem"), Err(StartupError::NoValue("work_mem".into())));
        assert_eq!(parse_options("-B 100"), Err(StartupError::Switch("-B".into())));
        assert_eq!(parse_options("geqo=off"), Err(StartupError::Switch("geqo=off".into())));
    }

    #[test]
    fn startup_values_are_applied_with_set_config_and_are_what_reset_restores() {
        let values = vec![("search_path".to_string(), "app, public".to_string()), ("TimeZone".to_string(), "UTC".to_string())];
        let mut client = Settings::from_startup_values(&values);
        let server = Settings::default();
        assert_eq!(
            client.sql_to_apply_over(&server).as_deref(),
            Some("SET \"TimeZone\" = 'UTC';SELECT pg_catalog.set_config('search_path', 'app, public', false);")
        );
        let mut server = Settings::default();
        server.take_values_of(&client);
        assert!(server.same_values(&client));
        client.apply(&Change::Set("search_path".into(), "x".into()));
        server.apply(&Change::Set("search_path".into(), "x".into()));
        client.apply(&Change::Reset("search_path".into()));
        server.apply(&Change::Reset("search_path".into()));
        // The server went back to its default, the client to its startup value.
        assert_eq!(client.get("search_path"), Some(&Value::Startup("app, public".into())));
        assert_eq!(server.get("search_path"), None);
        assert!(!server.same_values(&client));
        client.apply(&Change::Set("search_path".into(), "x".into()));
        client.apply(&Change::ResetAll);
        assert_eq!(client.get("search_path"), Some(&Value::Startup("app, public".into())));
        assert_eq!(client.get("TimeZone"), Some(&Value::Reported("UTC".into())));
        assert_eq!(canonical_name("timezone"), "TimeZone");
        assert_eq!(canonical_name("My.Setting"), "my.setting");
    }

    #[test]
    fn output_settings_known_and_forgotten() {
        let mut s = Settings::default();
        s.set("extra_float_digits", Value::Sql("'-15'".into()));
        s.set("bytea_output", Value::Sql("E'hex'".into()));
        s.set("search_path", Value::Startup("x".into()));
        let output: Vec<_> = s.output().collect();
        assert_eq!(output, [("extra_float_digits", Some("-15")), ("bytea_output", None)]);
        assert_eq!(Value::Sql("3".into()).plain(), Some("3"));
        assert_eq!(Value::Sql("'a''b'".into()).plain(), None);
        s.set("bytea_output", Value::Startup("hex".into()));
        s.forget_output_settings_named_in("SET extra_float_digits = 2", true);
        assert_eq!(s.output().filter(|(_, v)| v.is_none()).count(), 0, "a followed SET is known");
        s.forget_output_settings_named_in("SET LOCAL extra_float_digits = 2", false);
        assert_eq!(s.get("extra_float_digits"), Some(&Value::Unknown));
        assert_eq!(s.get("bytea_output"), Some(&Value::Startup("hex".into())));
        s.forget_output_settings_named_in("select pg_catalog.set_config($1, $2, false)", false);
        assert_eq!(s.get("bytea_output"), Some(&Value::Unknown));
        // An unknown value is made known again by a RESET.
        assert_eq!(
            Settings::default().sql_to_apply_over(&s).as_deref(),
            Some("RESET \"bytea_output\";RESET \"extra_float_digits\";RESET \"search_path\";")
        );
        s.forget_output_settings_named_in("select 1", false);
        let mut s = Settings::default();
        s.forget_output_settings_named_in("select 1; reset all", false);
        assert_eq!(s.output().filter(|(_, v)| v.is_none()).count(), 2);
    }
}
