//! Giving a server connection back when the client is done with it: to
//! the pool as it is when it is clean, after a ROLLBACK, an `UNLISTEN *`, a
//! temporary-schema check and server_reset_query when it is not, closed when it was left
//! mid-conversation or cleaning fails. It owns that decision and nothing
//! else: the session's buffers and counters stay with `Session`.

use tracing::{debug, warn};

use super::{Session, CLEANUP_TIMEOUT};
use crate::config::PoolMode;
use crate::pool::Lease;
use crate::protocol::backend::TransactionStatus;
use crate::rt::with_timeout;
use crate::settings;

impl Session {
    /// Returns a server connection the client is done with: reused if it can
    /// be made clean (rolled back, reset in session mode), closed otherwise.
    /// Its relay buffers go back to the shard either way.
    pub(super) async fn give_back(&mut self, server: Lease) {
        if let Some((server, cleanup)) = self.release_if_clean(server) {
            // Boxed: rolling back and resetting is rare and its future large
            // (the common case above allocates nothing).
            Box::pin(self.clean_and_release(server, cleanup)).await;
        }
        self.park_server_side();
    }

    /// Releases the connection, or closes it (by dropping the lease) if it
    /// was left mid-conversation; returns it with what must run on it first
    /// if it needs cleaning.
    fn release_if_clean(&mut self, mut server: Lease) -> Option<(Lease, Cleanup)> {
        self.end_transaction();
        server.refused_a_write |= self.exchange.tracker.take_read_only_error();
        // Replies owed to the client ahead still to come (server pipelining).
        let owed = std::mem::take(&mut self.skip_ready) > 0;
        let b = &mut self.buffers;
        let stray_bytes = !b.from_server.pending().is_empty() || !b.from_server.at_boundary();
        if owed || stray_bytes || !self.exchange.is_quiet() || !b.from_client.at_boundary() || !b.to_server.is_empty() {
            debug!("closing a server connection left mid-conversation");
            self.close_mid_conversation(server);
            return None;
        }
        let rollback = self.exchange.tracker.status() != TransactionStatus::Idle;
        // A pinned client's session state must not reach the next client:
        // reset the connection, or close it if there is no reset query.
        let pinned = self.exchange.pinned.is_some();
        if pinned && self.config.server_reset_query.is_empty() {
            debug!("closing the server connection of a pinned client: server_reset_query is empty");
            return None;
        }
        let reset = (self.mode == PoolMode::Session || self.config.server_reset_query_always || pinned)
            && !self.config.server_reset_query.is_empty();
        // A client that had the connection to itself may have left it a
        // temporary schema, which no reset removes.
        let temp_schema_check = pinned || self.mode == PoolMode::Session;
        // A LISTEN of the client's ran there (`notify::follow`).
        let unlisten = self.exchange.left_listening;
        if rollback || reset || unlisten {
            return Some((server, Cleanup { rollback, temp_schema_check, reset, unlisten }));
        }
        self.exchange.reset();
        server.release();
        None
    }

    /// Runs the cleanup on the server, then releases it (or closes it if that
    /// fails or takes too long).
    async fn clean_and_release(&mut self, mut server: Lease, cleanup: Cleanup) {
        if cleanup.rollback && !run_cleanup(&mut server, "ROLLBACK").await {
            return;
        }
        if cleanup.unlisten && !run_cleanup(&mut server, "UNLISTEN *").await {
            return;
        }
        if cleanup.temp_schema_check {
            match with_timeout(CLEANUP_TIMEOUT, server.has_temp_schema()).await {
                Some(Ok(false)) => {}
                Some(Ok(true)) => return debug!("closing a server connection whose backend has a temporary schema"),
                Some(Err(e)) => return warn!("closing a server connection: asking for its temporary schema failed: {e}"),
                None => return warn!("closing a server connection: asking for its temporary schema timed out"),
            }
        }
        if cleanup.reset && !run_cleanup(&mut server, &self.config.server_reset_query).await {
            return;
        }
        self.exchange.reset();
        server.release();
    }
}

/// Runs one cleanup statement on `server`; false (the connection to be
/// closed) if it failed or took too long.
async fn run_cleanup(server: &mut Lease, sql: &str) -> bool {
    match with_timeout(CLEANUP_TIMEOUT, server.run_to_idle(sql)).await {
        Some(Ok(())) => {
            if forgets_statements(sql) {
                let mut session = server.session.borrow_mut();
                session.statements.clear();
                session.settings = settings::Settings::default();
            }
            true
        }
        Some(Err(e)) => {
            warn!("closing a server connection: {sql} failed: {e}");
            false
        }
        None => {
            warn!("closing a server connection: {sql} timed out");
            false
        }
    }
}

/// What a returned server connection needs before the next client may have it.
struct Cleanup {
    /// It is inside a transaction block.
    rollback: bool,
    /// It is closed if its backend has a temporary schema
    /// (`ServerConn::has_temp_schema`).
    temp_schema_check: bool,
    /// server_reset_query runs (session mode, a pinned client, or _always).
    reset: bool,
    /// It LISTENs for the client, whose notifications the hub delivers.
    unlisten: bool,
}

/// Does this reset query drop the server's prepared statements?
fn forgets_statements(sql: &str) -> bool {
    let sql = sql.to_ascii_uppercase();
    sql.contains("DISCARD ALL") || sql.contains("DEALLOCATE ALL")
}
