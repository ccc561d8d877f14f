//! A session's side of read routing (see `crate::router`): where its next
//! request goes, and which router it asks after a reload. The decisions are
//! the router's; this file only hands them the session's bytes and
//! settings, and never blocks.

use std::rc::Rc;
use std::time::Duration;

use bytes::BytesMut;
use tracing::debug;

use super::relay::RelayEnd;
use super::{until_cancelled, Session};
use crate::pool::{Checkout, Lease, Offer, Pool};
use crate::router::client::HeldRead;
use crate::runtime::ClientState;

/// What became of a read held on a standby ([`Session::after_held_read`]).
pub(super) enum Held {
    /// It runs again on the primary: the session's next transaction.
    Retry,
    /// As the relay ended, for the session to handle as any other.
    Go(RelayEnd, Lease, Option<Offer>),
    /// The client went away as the held replies were written.
    ClientGone,
}

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
        if let Some(route) = self.route.as_deref_mut() {
            route.held_read = None;
        }
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
        let pending = self.buffers.from_client.pending();
        match route.decide(pending, self.config.max_message_size, carried, prepared) {
            crate::router::client::Destination::Primary { one_request } => one_request,
            crate::router::client::Destination::Standby { pool, one_request, .. } => {
                self.routed = Some(pool);
                // One the relay takes whole in its first turn (under its
                // buffer), so that what it took is all of it, and that
                // Parses no name the client has (that fails, 42P05, and
                // would be forgotten).
                if one_request {
                    let statements = &self.statements;
                    let new_name = |name: &&[u8]| std::str::from_utf8(name).is_ok_and(|n| statements.get(n).is_none());
                    route.held_read = crate::router::classify::repeatable_request(pending, self.config.max_message_size)
                        .filter(|(len, parsed)| *len < self.config.relay_buffer_size && parsed.iter().all(new_name))
                        .map(|(len, parsed)| HeldRead {
                            request: BytesMut::from(&pending[..len]),
                            parsed: parsed.iter().map(|name| String::from_utf8_lossy(name).into_owned()).collect(),
                        });
                }
                one_request
            }
        }
    }

    /// Whether the relay holds the replies to the request routed now: a
    /// read on a standby that may run again on the primary (not one that
    /// went to the primary because the standby's pool gave no connection).
    pub(super) fn holds_read(&self) -> bool {
        self.routed.is_some() && self.route.as_ref().is_some_and(|r| r.held_read.is_some())
    }

    /// After the relay of a read held on a standby (`held`: its replies
    /// are all still in `to_client`): if the standby refused what the
    /// primary would run (`router::client::refusal`: a write, 25006, so
    /// nothing ran; a conflict with recovery; serializable isolation) or
    /// went away, the read runs again on the primary, as the client's next
    /// request, and the client sees only
    /// that (the standby's connection given back or closed): `Retry`. Else
    /// `Go` with the relay's end, handled as any other (the held replies go
    /// out first if it was released).
    ///
    /// Only a lone read routed to a standby is held (not a `BEGIN READ
    /// ONLY` block), only one that can run a second time and Parses no
    /// name the client has (`classify::repeatable_request`), and only
    /// until its replies fill the relay's buffer: past that they go to the
    /// client and the standby's error, if one comes, goes with them.
    pub(super) async fn after_held_read(&mut self, end: RelayEnd, lease: Lease, offer: Option<Offer>) -> Held {
        let held = self.route.as_deref_mut().and_then(|r| r.held_read.take());
        let Some(HeldRead { request, parsed }) = held else { return Held::Go(end, lease, offer) };
        // What the standby refused that the primary would run.
        let refused = match end {
            RelayEnd::Released => crate::router::client::refusal(&self.buffers.to_client),
            _ => None,
        };
        match end {
            RelayEnd::Released if refused.is_some() => {
                debug!("read routing: a standby refused a read ({refused:?}); it runs again on the primary");
                self.buffers.to_client.clear();
                self.pass_on(lease, offer, false).await;
            }
            RelayEnd::Released => {
                // Nothing else is in the way: the connection waited for this.
                if self.deliver_held().await.is_err() {
                    self.pass_on(lease, offer, true).await;
                    return Held::ClientGone;
                }
                return Held::Go(RelayEnd::Released, lease, offer);
            }
            RelayEnd::ServerClosed | RelayEnd::ServerError(_) | RelayEnd::ServerEnded => {
                debug!("read routing: a standby went away during a read; it runs again on the primary");
                self.buffers.to_client.clear();
                self.buffers.from_server.clear();
                self.buffers.to_server.clear();
                self.end_transaction();
                self.exchange.reset();
                drop(lease); // closes it
                self.park_server_side();
            }
            end => return Held::Go(end, lease, offer),
        }
        // Its Parses run again: the names they gave the client go first.
        for name in &parsed {
            self.statements.remove(name);
        }
        self.buffers.from_client.unread(&request);
        if let Some(route) = self.route.as_deref_mut() {
            route.retry_on_primary(refused);
        }
        Held::Retry
    }

    /// Writes the replies a held read left in `to_client`.
    async fn deliver_held(&mut self) -> std::io::Result<()> {
        use futures_lite::AsyncWriteExt;
        self.client.write_all(&self.buffers.to_client).await?;
        self.client.flush().await?;
        self.buffers.counters.bytes_to_client += self.buffers.to_client.len() as u64;
        self.buffers.to_client.clear();
        Ok(())
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
