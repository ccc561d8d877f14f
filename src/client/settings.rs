//! Session settings a client changed, carried to whichever server connection
//! it gets next in transaction mode.
//!
//! Two sources, both exact about what the server really has:
//! - ParameterStatus messages, which PostgreSQL sends whenever a reported
//!   setting changes (TimeZone, DateStyle, application_name, ...), including
//!   when a rollback undoes a SET;
//! - `SET name = value` / `RESET name` sent as a single simple query outside a
//!   transaction block, for a few settings PostgreSQL 15 does not report
//!   (search_path, statement_timeout, ...). A SET inside BEGIN ... COMMIT of
//!   these is not carried over (documented in the README).
//!
//! Before a client's transaction runs on a server connection whose settings
//! differ from the client's, pglane sends the SETs and RESETs that make them
//! equal. Pure functions; the exchange applies them.

use std::collections::BTreeMap;

/// Reported settings pglane carries between server connections.
pub const REPORTED: [&str; 6] = ["application_name", "client_encoding", "DateStyle", "IntervalStyle", "TimeZone", "standard_conforming_strings"];

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

/// A setting's value: as ParameterStatus reported it (a plain string, quoted
/// when sent back), or as the client wrote it in SQL (sent back verbatim).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    Reported(String),
    Sql(String),
}

/// The settings one side (a client, or a server connection) has changed from
/// the server's defaults.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Settings(BTreeMap<String, Value>);

/// A SET or RESET of a followed setting, from a client's simple query.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    Set(String, String),
    Reset(String),
    ResetAll,
}

impl Settings {
    pub fn set(&mut self, name: &str, value: Value) {
        self.0.insert(name.to_owned(), value);
    }

    pub fn get(&self, name: &str) -> Option<&Value> {
        self.0.get(name)
    }

    pub fn remove(&mut self, name: &str) {
        self.0.remove(name);
    }

    pub fn apply(&mut self, change: &Change) {
        match change {
            Change::Set(name, value) => self.set(name, Value::Sql(value.clone())),
            Change::Reset(name) => self.remove(name),
            Change::ResetAll => self.0.retain(|name, _| REPORTED.contains(&name.as_str())),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The values ParameterStatus reported, by name.
    pub fn reported(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.iter().filter_map(|(name, value)| match value {
            Value::Reported(v) => Some((name.as_str(), v.as_str())),
            Value::Sql(_) => None,
        })
    }

    /// The SQL that turns a server connection with `server` settings into one
    /// with `self`'s, or None if they already agree.
    pub fn sql_to_apply_over(&self, server: &Settings) -> Option<String> {
        let mut sql = String::new();
        for (name, value) in &self.0 {
            if server.0.get(name) != Some(value) {
                let value = match value {
                    Value::Reported(v) => format!("'{}'", v.replace('\'', "''")),
                    Value::Sql(v) => v.clone(),
                };
                sql.push_str(&format!("SET \"{name}\" = {value};"));
            }
        }
        for name in server.0.keys().filter(|n| !self.0.contains_key(*n)) {
            sql.push_str(&format!("RESET \"{name}\";"));
        }
        (!sql.is_empty()).then_some(sql)
    }
}

/// Is this reported setting one pglane carries?
pub fn is_carried(name: &str) -> bool {
    REPORTED.contains(&name)
}

/// Does `SET <name> ...` (as a client spells it) change a setting carried
/// through ParameterStatus? Includes SET TIME ZONE and SET NAMES.
pub fn is_carried_name(name: &str) -> bool {
    REPORTED.iter().any(|r| r.eq_ignore_ascii_case(name)) || name.eq_ignore_ascii_case("time") || name.eq_ignore_ascii_case("names")
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
        assert_eq!(parse_change("set session search_path to \"$user\", public;"), Some(Change::Set("search_path".into(), "\"$user\", public".into())));
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
}
