//! A client's startup settings: taken from its startup packet, applied on
//! a server connection with SETs of pglane's own (at login, to learn how
//! the server spells a reported value or to refuse what it refuses, else
//! before the client's first transaction), the warnings the server gives
//! for them passed on, a connection that breaks under them replaced, and
//! the greeting that ends the login. What PostgreSQL does at login, in
//! InitPostgres, done by pglane on whichever connection the client gets.

use futures_lite::AsyncWriteExt;
use tracing::{info, warn};

use super::{pinning, Session, SessionError, CLEANUP_TIMEOUT};
use crate::logging::Escaped;
use crate::pool::Lease;
use crate::protocol::backend::{self, ErrorFields, TransactionStatus};
use crate::protocol::startup::StartupParams;
use crate::rt::with_timeout;
use crate::settings;

/// Server connections tried for applying a client's startup settings
/// before its session ends with [`startup_connection_failed`]: one that
/// breaks under pglane's own SETs (its backend terminated while pooled)
/// had nothing of the client's, and is replaced unseen.
pub(super) const STARTUP_ATTEMPTS: usize = 3;

/// The error that ends a session whose startup settings found no server
/// connection that stayed up (see [`STARTUP_ATTEMPTS`]).
fn startup_connection_failed() -> SessionError {
    SessionError::Refused(ErrorFields::fatal("08006", "server connection failed while applying startup settings"))
}

impl Session {
    /// The settings of the startup packet become the client's own, carried
    /// to every server connection it gets (`settings`); a packet pglane
    /// cannot carry is refused. The reported ones are kept as the server
    /// reports them (`client_encoding=utf-8` is `UTF8`), which is what the
    /// client is told at login and after a RESET, as on PostgreSQL. A pool
    /// knows the spellings its clients gave before; for one it does not, the
    /// settings are applied now on a connection to be had without waiting,
    /// which says how the server reports them and refuses at login, as
    /// PostgreSQL would, a value it does not take. With none free, the
    /// client keeps its own spelling and the pool learns it at the client's
    /// first transaction, for the next clients.
    pub(super) async fn take_startup_settings(&mut self, startup: &StartupParams) -> Result<(), SessionError> {
        let asked =
            settings::from_startup(startup).map_err(|e| SessionError::Refused(ErrorFields::fatal("42601", e.to_string())))?;
        // With pg_temp in its search_path, a client's plain CREATE TABLE
        // makes a temporary one: its session is its own from the start.
        if asked.iter().any(|(name, value)| name == "search_path" && pinning::names_temp_schema(value)) {
            self.exchange.pin(Some(pinning::SessionFeature::TempObject));
        }
        let mut unlearned = Vec::new();
        let values: Vec<(String, String)> = asked
            .iter()
            .map(|(name, value)| match (settings::is_reported(name), self.pool.reported_as(name, value)) {
                (true, Some(reported)) => (name.clone(), reported),
                (true, None) => {
                    unlearned.push((name.clone(), value.clone()));
                    (name.clone(), value.clone())
                }
                (false, _) => (name.clone(), value.clone()),
            })
            .collect();
        self.settings = settings::Settings::from_startup_values(&values);
        // Nothing of the client's own to check with a server first.
        self.startup_applied = self.settings.is_empty();
        self.unlearned = unlearned.into_boxed_slice();
        if self.unlearned.is_empty() {
            return Ok(());
        }
        let mut broken = 0;
        let (spelled, lease) = loop {
            let Some(lease) = self.pool.checkout_now().await else { return Ok(()) };
            let mut lease = lease?;
            match self.apply_startup_settings(&mut lease).await {
                Ok(spelled) => break (spelled, lease),
                // The connection broke under pglane's own SETs (a backend
                // terminated while pooled), before anything of the client's
                // reached it: dropped, which closes it, and another tried.
                Err(None) if broken + 1 < STARTUP_ATTEMPTS => broken += 1,
                Err(refused) => {
                    // Refused: the connection is as it was, and goes back.
                    if refused.is_some() {
                        lease.release();
                    }
                    return Err(refused.unwrap_or_else(startup_connection_failed));
                }
            }
        };
        self.learn_spellings(&spelled);
        let values: Vec<(String, String)> = values
            .into_iter()
            .map(|(name, value)| match spelled.iter().find(|(n, _)| *n == name) {
                Some((_, as_reported)) => (name, as_reported.clone()),
                None => (name, value),
            })
            .collect();
        self.settings = settings::Settings::from_startup_values(&values);
        lease.session.borrow_mut().settings.take_values_of(&self.settings, false);
        lease.release();
        Ok(())
    }

    /// Teaches the pool how the server spells the reported startup settings
    /// it did not know (`spelled`: as [`Session::apply_startup_settings`]
    /// returns them).
    /// Not from SETs the server warned about (an application_name
    /// truncated): known, the spelling would spare the next client with
    /// that value the SET, and with it the warning PostgreSQL gives it.
    pub(super) fn learn_spellings(&mut self, spelled: &[(String, String)]) {
        let unlearned = std::mem::take(&mut self.unlearned);
        if !self.owed_notices.is_empty() {
            return;
        }
        for (name, value) in unlearned {
            if let Some((_, as_reported)) = spelled.iter().find(|(n, _)| *n == name) {
                self.pool.learn_reported(&name, &value, as_reported);
            }
        }
    }

    /// AuthenticationOk was sent by `auth`; now ParameterStatus, BackendKeyData
    /// and the first ReadyForQuery: the server's values, and the client's
    /// own for the reported settings it gave (as the server reports them).
    pub(super) async fn greet(&mut self, server_params: &[(String, String)], process_id: i32) -> Result<(), SessionError> {
        let mut out = std::mem::take(&mut self.owed_notices);
        for (name, value) in server_params {
            let own = match self.settings.get(name) {
                Some(settings::Value::Reported(own)) if settings::is_carried(name) => Some(own.as_str()),
                _ => None,
            };
            let value = match (name.as_str(), own) {
                (_, Some(own)) => own,
                ("application_name", None) => "",
                _ => value.as_str(),
            };
            backend::parameter_status(&mut out, name, value);
        }
        backend::backend_key_data(&mut out, process_id, self.entry.secret_key);
        backend::ready_for_query(&mut out, TransactionStatus::Idle);
        self.client.write_all(&out).await?;
        Ok(())
    }

    /// Makes `server`'s settings the client's startup ones and waits for
    /// the server's word (at login, or before the client's first
    /// transaction), so that a value the server refuses (as it would have at
    /// login) ends this client's session with the server's error, before any
    /// of its queries ran, and leaves the server connection as it was (the
    /// SETs ran in one implicit transaction). Later alignments send values
    /// the server already accepted. Returns how the server reports each
    /// reported setting of the client's now: as it reported it while the
    /// SETs ran, or, for one a SET left as it was (which reports nothing),
    /// as it had it. `Err(None)`: the server connection broke.
    pub(super) async fn apply_startup_settings(
        &mut self,
        server: &mut crate::server::ServerConn,
    ) -> Result<Vec<(String, String)>, Option<SessionError>> {
        let had: Vec<(String, Option<String>)> =
            self.settings.reported().map(|(name, _)| (name.to_owned(), server.reported_value(name))).collect();
        let spelled = |reported: &[(String, String)]| -> Vec<(String, String)> {
            had.iter()
                .filter_map(|(name, had)| {
                    let now = reported.iter().rev().find(|(n, _)| n == name).map(|(_, v)| v.clone()).or_else(|| had.clone());
                    now.map(|value| (name.clone(), value))
                })
                .collect()
        };
        let sql = self.settings.sql_to_apply_over(&server.session.borrow().settings, false);
        let Some(sql) = sql else {
            self.startup_applied = true;
            return Ok(spelled(&[]));
        };
        let notices_before = self.owed_notices.len();
        let outcome = with_timeout(CLEANUP_TIMEOUT, server.run_reporting(&sql, &mut self.owed_notices)).await;
        if !matches!(outcome, Some(Ok(Ok(_)))) {
            // Said again by the server that applies them, if any.
            self.owed_notices.truncate(notices_before);
        }
        match outcome {
            Some(Ok(Ok(reported))) => {
                server.session.borrow_mut().settings.take_values_of(&self.settings, false);
                self.startup_applied = true;
                Ok(spelled(&reported))
            }
            Some(Ok(Err(refused))) => {
                info!(code = %refused.code, "a startup setting was refused by the server: {}", Escaped(&refused.message));
                Err(Some(SessionError::Refused(ErrorFields { severity: "FATAL".into(), ..refused })))
            }
            Some(Err(e)) => {
                warn!("closing a server connection: applying startup settings failed: {e}");
                Err(None)
            }
            None => {
                warn!("closing a server connection: applying startup settings timed out");
                Err(None)
            }
        }
    }

    /// Applying the startup settings failed (`refused` by the server, or
    /// with `None` the connection broke): gives `server` back if it is as it
    /// was, else closes it, and returns the error that ends the session.
    pub(super) async fn startup_settings_failed(&mut self, server: Lease, refused: Option<SessionError>) -> SessionError {
        if refused.is_some() {
            self.give_back(server).await;
        } // else dropping the lease closes it
        refused.unwrap_or_else(startup_connection_failed)
    }
}
