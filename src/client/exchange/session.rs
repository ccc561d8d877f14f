//! The exchange's hooks of session state: the settings a client changes
//! are followed (`crate::settings`) and the server connection is aligned to
//! them; SQL that leaves state pglane cannot carry pins the client
//! (`super::super::pinning`); DDL seen is told to the registry.

use bytes::BytesMut;

use super::super::pinning::{self, SessionFeature};
use super::rewrite::mentions_search_path;
use super::{Due, Exchange, Request, Statements};
use crate::protocol::backend;
use crate::protocol::frontend;
use crate::settings::{self, Change, Settings, Value};

pub(super) fn changes_schema(tag: &[u8]) -> bool {
    [&b"CREATE "[..], b"ALTER ", b"DROP "].iter().any(|verb| tag.starts_with(verb))
}

/// A followed SET/RESET in a simple query sent outside a transaction block.
pub(super) fn follow_change(body: &[u8], status: backend::TransactionStatus) -> Option<Change> {
    let starts_like_set =
        body.len() > 4 && (body[..3].eq_ignore_ascii_case(b"set") || body[..5.min(body.len())].eq_ignore_ascii_case(b"reset"));
    if !starts_like_set || status != backend::TransactionStatus::Idle {
        return None;
    }
    settings::parse_change(frontend::decode_query(body).ok()?)
}

impl Exchange {
    /// Whether `sql`, a Parse's text just scanned, gave no scan anything to
    /// do: it did not pin the client (which is not pinned), names no output
    /// setting, RESET, DISCARD or set_config, and not search_path. Such a
    /// text is skipped when it comes again (see [`super::quiet`]).
    pub(super) fn is_quiet_text(&self, sql: &str) -> bool {
        self.pinned.is_none() && !settings::may_change_output_settings(sql) && !mentions_search_path(sql)
    }

    /// Pins the client if `sql`, a Parse's text, leaves session state behind
    /// that pglane does not carry.
    pub(super) fn watch_session_state(&mut self, sql: &str) {
        if self.pinned.is_none() {
            self.pin(pinning::session_feature(sql, settings::is_carried_name));
        }
    }

    /// The client used `feature` (if any): it keeps its server connection.
    pub(super) fn pin(&mut self, feature: Option<SessionFeature>) {
        if let Some(feature) = feature {
            self.pinned = Some(feature);
            tracing::info!("client pinned to its server connection until it disconnects: it used {}", feature.as_str());
        }
    }

    /// Makes the server connection's settings the client's, with a simple
    /// query whose replies the client never sees, ahead of its own messages.
    pub fn align_settings(&mut self, client: &Settings, server: &mut Settings, to_server: &mut BytesMut) {
        if let Some(sql) = client.sql_to_apply_over(server) {
            frontend::query(to_server, &sql);
            self.tracker.client_sent(frontend::QUERY);
            self.due.push_back(Due::Server { request: Request::Query { plain: false }, forward: false });
            server.take_values_of(client);
        }
    }

    /// A ParameterStatus: the server connection now has this value, and so
    /// does the client if it is told.
    /// A ParameterStatus: the server connection's value, and the client's if
    /// it is told. When a query that only resets changed a setting the
    /// client's startup packet gave, the server went back to *its* reset
    /// value, but on PostgreSQL the client's would be its startup value: the
    /// client keeps that, the server is aligned to it before the client's
    /// next message, and the returned (name, value) is what the client must
    /// be told instead.
    pub(super) fn reported(&mut self, body: &[u8], st: &mut Statements<'_>, client_told: bool) -> Option<(String, String)> {
        let Ok((name, value)) = backend::decode_parameter_status(body) else { return None };
        if !settings::is_carried(&name) {
            return None;
        }
        st.server_settings.set(&name, Value::Reported(value.clone()));
        if !client_told {
            return None;
        }
        if self.resetting {
            if let Some(Value::Reported(startup)) = st.client_settings.startup_value(&name) {
                if *startup != value {
                    let startup = startup.clone();
                    st.client_settings.set(&name, Value::Reported(startup.clone()));
                    self.realign = true;
                    return Some((name, startup));
                }
            }
        }
        st.client_settings.set(&name, Value::Reported(value));
        None
    }
}
