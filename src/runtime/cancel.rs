//! A CancelRequest's way to what it cancels: this shard's client, another
//! shard's (by message), or a peer instance's (forwarded). Where a key
//! points is `keys`'; what a cancel does to a client's request is decided
//! here, by the shard that owns the client, exactly as PostgreSQL would.

use std::rc::Rc;
use std::time::Duration;

use tracing::{debug, warn};

use super::{keys, ClientEntry, Shard, ShardMessage};
use crate::config::Config;
use crate::rt;
use crate::server::CancelKey;

impl Shard {
    /// A CancelRequest arrived on this shard: handled here, by the shard
    /// that owns the client, or by the peer instance that does. Returns once
    /// the server (or the peer) has taken it, so that the client's cancel
    /// connection closes only then, as PostgreSQL's does.
    pub async fn route_cancel(self: &Rc<Self>, process_id: i32, secret_key: i32) {
        match self.keys.route(process_id, secret_key) {
            keys::Route::Shard { shard, secret } if shard == self.id => self.cancel_local(process_id, secret).await,
            keys::Route::Shard { shard, secret } if shard < self.shards => {
                // Not INFO: anyone can send these, as fast as they like.
                debug!(shard = self.id, owner = shard, "passing a cancel request to the shard that owns the client");
                let (done, taken) = flume::bounded(1);
                let cancel = ShardMessage::Cancel { process_id, secret_key: secret, done };
                if self.peers.send_to(shard, cancel).await.is_err() {
                    return warn!(shard = self.id, owner = shard, "could not pass a cancel request to its shard");
                }
                // Answered (or dropped, if that shard stopped) once it is done.
                let _ = taken.recv_async().await;
            }
            keys::Route::Peer { peer_id, secret } => self.forward_cancel(peer_id, process_id, secret).await,
            _ => debug!(shard = self.id, process_id, "a cancel request with a key pglane did not hand out"),
        }
    }

    /// Passes a CancelRequest for a client of peer instance `peer_id` on.
    async fn forward_cancel(&self, peer_id: u16, process_id: i32, secret_key: i32) {
        let config = self.shared.config.load();
        let Some(peer) = config.peer_by_id(peer_id) else {
            return debug!(shard = self.id, peer_id, "a cancel request for a peer that [peers] does not list");
        };
        let address = peer.address();
        // Not INFO: anyone can send these, as fast as they like.
        debug!(shard = self.id, peer_id, peer = %address, "forwarding a cancel request to the peer that owns the client");
        let timeout = Config::secs(config.server_connect_timeout);
        if let Err(e) = crate::server::send_cancel_request(&address, process_id, secret_key, timeout).await {
            warn!(shard = self.id, peer_id, "forwarding a cancel request to peer {address} failed: {e}");
        }
    }

    /// Cancels what the client with this key runs now, exactly as
    /// PostgreSQL would: a request on a server is cancelled there; a request
    /// still waiting in pglane is answered by its session (see
    /// `ClientEntry::queued`); a client between requests has nothing to
    /// cancel (and the connection it last held may serve another client by
    /// now), so the cancel is dropped, never kept for its next request.
    pub(super) async fn cancel_local(self: &Rc<Self>, process_id: i32, secret_key: i32) {
        let (key, queued): (Option<Rc<CancelKey>>, Option<Rc<ClientEntry>>) = {
            let clients = self.clients.borrow();
            let Some(client) = clients.get(&process_id).filter(|c| c.secret_key == secret_key) else { return };
            let key = client.server.borrow().clone();
            let mut queued = None;
            if key.is_none() && client.following.get() {
                // Sent when the connection is handed over (see `ClientEntry::following`).
                client.cancel_held.set(true);
            } else if key.is_none() && client.queued.get() {
                client.cancel_queued();
                queued = Some(client.clone());
            }
            (key, queued)
        };
        let timeout = Config::secs(self.shared.config.load().server_connect_timeout);
        if let Some(client) = queued {
            // Answered by the session, or sent to the server as the request
            // is written: the cancel connection closes once that is done.
            let settled = async {
                client.cancel_settled().await;
                let sent = client.server.borrow().clone();
                if let Some(key) = sent {
                    key.cancels_done().await;
                }
            };
            let _ = rt::with_timeout(timeout, settled).await;
            return;
        }
        let Some(key) = key else { return };
        let behind = self.clients.borrow().get(&process_id).filter(|c| c.cancel_sent(&key)).cloned();
        let sent = send_to_backend(&key, timeout).await;
        if let Some(client) = behind {
            let shard = self.clone();
            let wake = move || shard.shutdown.wake(u64::from(process_id as u32));
            rt::spawn_local(cancel_again_while_behind(client, key, sent, timeout, wake)).detach();
        }
    }
}

/// How long a request that went to the server behind another client's may
/// run after a cancel request for it was sent before the cancel is sent
/// once more (see [`cancel_again_while_behind`]). By then its backend has
/// long read the request, so a cancel that arrives finds it running.
const CANCEL_AGAIN_AFTER: Duration = Duration::from_millis(100);

/// Sends a cancel request to `key`'s backend; whether the server took it.
/// Until it has, the connection goes to no other client.
async fn send_to_backend(key: &Rc<CancelKey>, timeout: Duration) -> bool {
    let _under_way = key.cancel_under_way();
    match crate::server::send_cancel(key, timeout).await {
        Ok(()) => true,
        Err(e) => {
            warn!("cancel request to {} failed: {e}", key.address);
            false
        }
    }
}

/// After a cancel request was sent for `client`'s request, which went to
/// the server behind another client's (`ClientEntry::cancel_sent`): if the
/// server took it (`sent`), sends it once more if that request is still
/// unanswered a little later; then lets other clients' requests go behind
/// it again (`wake` wakes its relay, which may be holding one back).
///
/// PostgreSQL ignores a cancel that reaches a backend while it reads its
/// next command, and such a request is read right as the one ahead ends,
/// about when its cancel, held until then, is sent. Sent again, the cancel
/// reaches the same request or, if that just ended, a backend with nothing
/// of another client's queued, which ignores it. What this changes against
/// a direct connection: a query that catches `query_canceled` and runs on
/// is cancelled a second time.
pub async fn cancel_again_while_behind(
    client: Rc<ClientEntry>,
    key: Rc<CancelKey>,
    sent: bool,
    timeout: Duration,
    wake: impl FnOnce(),
) {
    if sent {
        rt::sleep(CANCEL_AGAIN_AFTER).await;
    }
    if sent && client.may_cancel_again(&key) {
        debug!(process_id = key.process_id, "a request that went behind another still runs: its cancel is sent again");
        send_to_backend(&key, timeout).await;
    }
    client.cancel_checked();
    wake();
}
