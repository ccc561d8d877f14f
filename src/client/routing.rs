//! A session's side of read routing (see `crate::router`): where its next
//! request goes, and which router it asks after a reload. The decisions are
//! the router's; this file only hands them the session's bytes and
//! settings, and never blocks.

use std::rc::Rc;
use std::time::Duration;

use tracing::debug;

use super::{until_cancelled, Session};
use crate::pool::{Checkout, Pool};
use crate::runtime::ClientState;

impl Session {
    /// A connection from the standby's pool a read was routed to, if any
    /// ([`Session::routed`]); if that pool gives none (the host went down
    /// since the monitor last saw it), `Some(None)` and the read goes to the
    /// primary: nothing of it has gone anywhere. `None` if a cancel request
    /// came for it meanwhile (the client is idle again).
    pub(super) async fn checkout_read(&mut self, wait: Duration) -> Option<Option<Checkout>> {
        let Some(pool) = self.routed.clone() else { return Some(None) };
        match until_cancelled(&self.entry, pool.checkout(wait)).await {
            None => {
                self.entry.set_state(ClientState::Idle);
                None
            }
            Some(Ok(lease)) => Some(Some(Checkout::Lease(lease))),
            Some(Err(e)) => {
                debug!("read routing: no connection from the standby's pool ({e}); the read goes to the primary");
                self.routed = None;
                Some(None)
            }
        }
    }

    /// The pool of the server connection the client holds or last held:
    /// its own, or a standby's for a routed read (whose counts are its own).
    pub(super) fn serving_pool(&self) -> &Rc<Pool> {
        self.routed.as_ref().unwrap_or(&self.pool)
    }

    /// Read routing: where the client's next request goes (see
    /// `crate::router`). Sets [`Session::routed`] to a standby's pool for a
    /// read; true for a read, wherever it goes: only that one request may
    /// go there (the relay takes no more of the client's messages until it
    /// ends).
    pub(super) fn route_request(&mut self) -> bool {
        self.routed = None;
        if self.route.as_ref().is_some_and(|r| r.is_retired()) {
            self.take_new_router();
        }
        let Some(route) = self.route.as_deref_mut() else { return false };
        // Only a request that starts outside a transaction block, on a
        // client whose session state is not pinned to one connection.
        if self.exchange.pinned.is_some() || !self.buffers.to_server.is_empty() || !self.exchange.is_quiet() {
            return false;
        }
        let carried = self.settings.get(crate::router::MIN_LSN_SETTING).and_then(|v| v.plain());
        let statements = &self.statements;
        let prepared = |name: &[u8]| {
            let statement = statements.get(std::str::from_utf8(name).ok()?)?;
            Some(crate::protocol::names::query_bytes(&statement.key))
        };
        match route.decide(self.buffers.from_client.pending(), self.config.max_message_size, carried, prepared) {
            crate::router::client::Destination::Primary { one_request } => one_request,
            crate::router::client::Destination::Standby { pool, one_request, .. } => {
                self.routed = Some(pool);
                one_request
            }
        }
    }

    /// A reload retired the session's router: the shard's router for its
    /// database as the config now has it, keeping the client's min LSN, or
    /// none if the database no longer routes reads.
    fn take_new_router(&mut self) {
        let config = self.shard.shared.config.load_full();
        let info = &self.entry.info;
        match self.shard.router(&config, &info.database, &info.user, &self.pool) {
            Some(router) => {
                if let Some(route) = self.route.as_deref_mut() {
                    route.rebind(router);
                }
            }
            None => self.route = None,
        }
    }
}
