//! Cancel requests between shards.
//!
//! A CancelRequest arrives on a fresh connection, which SO_REUSEPORT may hand to
//! any shard; the process id pglane gave the client says which shard owns it.
//! The receiving shard sends a [`CancelMessage`] over the glommio channel mesh,
//! and the owner checks the secret and cancels the server backend the client
//! is using. No shard ever reads another's client registry.

use std::cell::RefCell;
use std::rc::Rc;

use glommio::channels::channel_mesh::Receivers;

use super::Shard;
use crate::server::CancelKey;

/// A cancel request passed to the shard that owns the client.
#[derive(Debug, Clone, Copy)]
pub struct CancelMessage {
    pub process_id: i32,
    pub secret_key: i32,
}

/// What a shard knows about one of its clients for cancelling.
pub struct ClientEntry {
    pub secret_key: i32,
    /// The server connection the client holds right now, if any.
    pub server: RefCell<Option<Rc<CancelKey>>>,
}

/// Serves cancel messages from every other shard.
pub(super) fn serve_peers(shard: &Rc<Shard>, mut receivers: Receivers<CancelMessage>) {
    for (_, receiver) in receivers.streams() {
        let shard = shard.clone();
        glommio::spawn_local(async move {
            while let Some(message) = receiver.recv().await {
                shard.cancel_local(message).await;
            }
        })
        .detach();
    }
}
