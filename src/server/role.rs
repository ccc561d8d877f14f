//! What a server session is, for `target_session_attrs`: a primary or a hot
//! standby, and whether its transactions are read-only by default; and
//! whether a setting of target_session_attrs accepts it, as libpq decides.
//!
//! This module owns that classification. It is pure: the values come from
//! the ParameterStatus messages of a login (PostgreSQL 14 and later report
//! `in_hot_standby` and `default_transaction_read_only`), or from the answer
//! to [`ROLE_QUERY`] (older servers, and pglane's periodic check of an idle
//! connection); asking is `ServerConn::ask_role`'s job.

use crate::config::TargetSessionAttrs;

/// Asks what a session is, in one round trip and two text columns: in
/// recovery, and the session's default for new transactions *before* any
/// `SET` (its reset value: a client's `SET default_transaction_read_only`
/// on a pooled connection says nothing about the server). On a fresh
/// session that is what libpq's `SHOW transaction_read_only` and
/// `SELECT pg_is_in_recovery()` tell.
pub const ROLE_QUERY: &str = "SELECT pg_catalog.pg_is_in_recovery()::text, \
     (SELECT reset_val FROM pg_catalog.pg_settings WHERE name = 'default_transaction_read_only')";

/// What a server session is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Role {
    /// The server is a hot standby (in recovery).
    pub hot_standby: bool,
    /// `default_transaction_read_only` is on.
    pub read_only_default: bool,
}

/// Whether target_session_attrs takes a session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fit {
    Yes,
    /// Only if no host is a better fit (a primary, for prefer-standby).
    Fallback,
    No,
}

impl Role {
    /// From the ParameterStatus values of a login; `None` if the server did
    /// not report both (before PostgreSQL 14).
    pub fn from_params(params: &[(String, String)]) -> Option<Role> {
        let value = |name: &str| params.iter().rev().find(|(n, _)| n == name).map(|(_, v)| v.as_str());
        Some(Role { hot_standby: on(value("in_hot_standby")?)?, read_only_default: on(value("default_transaction_read_only")?)? })
    }

    /// From the row [`ROLE_QUERY`] returns.
    pub fn from_answer(rows: &[(String, String)]) -> Option<Role> {
        let [(in_recovery, read_only)] = rows else { return None };
        Some(Role { hot_standby: on(in_recovery)?, read_only_default: on(read_only)? })
    }

    /// Accepts writes by default.
    pub fn is_read_write(self) -> bool {
        !self.hot_standby && !self.read_only_default
    }

    /// How `attrs` takes this session, as libpq's target_session_attrs does.
    pub fn fit(self, attrs: TargetSessionAttrs) -> Fit {
        let yes = |b: bool| if b { Fit::Yes } else { Fit::No };
        match attrs {
            TargetSessionAttrs::Any => Fit::Yes,
            TargetSessionAttrs::ReadWrite => yes(self.is_read_write()),
            TargetSessionAttrs::ReadOnly => yes(!self.is_read_write()),
            TargetSessionAttrs::Primary => yes(!self.hot_standby),
            TargetSessionAttrs::Standby => yes(self.hot_standby),
            TargetSessionAttrs::PreferStandby if self.hot_standby => Fit::Yes,
            TargetSessionAttrs::PreferStandby => Fit::Fallback,
        }
    }

    /// Why `attrs` does not take this session, in libpq's words.
    pub fn refusal(self, attrs: TargetSessionAttrs) -> &'static str {
        match attrs {
            TargetSessionAttrs::ReadWrite if self.hot_standby => "server is in hot standby mode",
            TargetSessionAttrs::ReadWrite => "session is read-only",
            TargetSessionAttrs::ReadOnly => "session is not read-only",
            TargetSessionAttrs::Primary => "server is in hot standby mode",
            TargetSessionAttrs::Standby | TargetSessionAttrs::PreferStandby => "server is not in hot standby mode",
            TargetSessionAttrs::Any => "",
        }
    }
}

/// A boolean as PostgreSQL prints it: a setting (`on`/`off`) or a value (`true`/`false`).
fn on(value: &str) -> Option<bool> {
    match value {
        "on" | "true" | "t" => Some(true),
        "off" | "false" | "f" => Some(false),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use TargetSessionAttrs::*;

    const PRIMARY: Role = Role { hot_standby: false, read_only_default: false };
    const STANDBY: Role = Role { hot_standby: true, read_only_default: false };
    /// A primary whose default_transaction_read_only is on (fenced).
    const READ_ONLY_PRIMARY: Role = Role { hot_standby: false, read_only_default: true };

    fn params(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs.iter().map(|(n, v)| (n.to_string(), v.to_string())).collect()
    }

    #[test]
    fn read_from_a_login_as_postgresql_14_and_later_report_it() {
        let login = params(&[("server_version", "15.4"), ("in_hot_standby", "on"), ("default_transaction_read_only", "off")]);
        assert_eq!(Role::from_params(&login), Some(STANDBY));
        let login = params(&[("in_hot_standby", "off"), ("default_transaction_read_only", "on")]);
        assert_eq!(Role::from_params(&login), Some(READ_ONLY_PRIMARY));
        // PostgreSQL 13 reports neither: it must be asked.
        assert_eq!(Role::from_params(&params(&[("server_version", "13.1"), ("default_transaction_read_only", "off")])), None);
        assert_eq!(Role::from_params(&params(&[("in_hot_standby", "maybe"), ("default_transaction_read_only", "off")])), None);
    }

    #[test]
    fn read_from_the_answer_to_the_query() {
        assert_eq!(Role::from_answer(&params(&[("false", "off")])), Some(PRIMARY));
        assert_eq!(Role::from_answer(&params(&[("true", "off")])), Some(STANDBY));
        assert_eq!(Role::from_answer(&params(&[("false", "on")])), Some(READ_ONLY_PRIMARY));
        assert_eq!(Role::from_answer(&[]), None);
        assert_eq!(Role::from_answer(&params(&[("false", "off"), ("true", "off")])), None);
    }

    #[test]
    fn target_session_attrs_as_libpq_defines_them() {
        use Fit::{Fallback, No, Yes};
        // (attrs, primary, standby, read-only primary)
        let table = [
            (Any, Yes, Yes, Yes),
            (ReadWrite, Yes, No, No),
            (ReadOnly, No, Yes, Yes),
            (Primary, Yes, No, Yes),
            (Standby, No, Yes, No),
            (PreferStandby, Fallback, Yes, Fallback),
        ];
        for (attrs, primary, standby, read_only_primary) in table {
            assert_eq!(PRIMARY.fit(attrs), primary, "{attrs} on a primary");
            assert_eq!(STANDBY.fit(attrs), standby, "{attrs} on a standby");
            assert_eq!(READ_ONLY_PRIMARY.fit(attrs), read_only_primary, "{attrs} on a read-only primary");
        }
        // A standby whose default is read-only too is a standby.
        assert_eq!(Role { hot_standby: true, read_only_default: true }.fit(ReadOnly), Yes);
        assert_eq!(STANDBY.refusal(ReadWrite), "server is in hot standby mode");
        assert_eq!(READ_ONLY_PRIMARY.refusal(ReadWrite), "session is read-only");
        assert_eq!(PRIMARY.refusal(Standby), "server is not in hot standby mode");
    }
}
