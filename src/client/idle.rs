//! A session between transactions: the wait, holding no server
//! connection, for the client's next message, a shutdown, a KILL or
//! client_idle_timeout. Every idle client's task holds this wait's future,
//! so it borrows the session whole, not field by field.

use crate::config::Config;
use crate::rt::with_timeout;
use crate::runtime::Shard;

use super::{inbox, Session, SessionError};

/// What the client did while it held no server connection.
pub(super) enum Idle {
    /// It sent (the start of) a message: it needs a server.
    Message,
    /// It said Terminate or closed its socket.
    Gone,
    Shutdown,
    /// KILL from the admin console.
    Killed,
    /// client_idle_timeout passed.
    TimedOut,
}

impl Session {
    /// `wait_for_client`, bounded by client_idle_timeout when one is set.
    pub(super) async fn wait_for_client_limited(&mut self) -> Result<Idle, SessionError> {
        match Config::optional_secs(self.config.client_idle_timeout) {
            Some(limit) => Ok(with_timeout(limit, self.wait_for_client()).await.transpose()?.unwrap_or(Idle::TimedOut)),
            None => self.wait_for_client().await,
        }
    }

    /// Waits, holding no server, until the client sends something. A
    /// shutdown ends the wait, except for a client that has not had a
    /// transaction yet while the port is handed over (so_reuseport): its
    /// first request is on the way, and it gets to run it. While nothing is
    /// in its inbox, the inbox holds no buffer: an idle client costs none
    /// (except over TLS, which keeps buffers of its own anyway).
    async fn wait_for_client(&mut self) -> Result<Idle, SessionError> {
        // The session alone, not each field it polls: every idle client's
        // task holds this future.
        futures_lite::future::poll_fn(|cx| self.poll_idle(cx)).await
    }

    /// [`Session::wait_for_client`]'s poll.
    fn poll_idle(&mut self, cx: &mut std::task::Context<'_>) -> std::task::Poll<Result<Idle, SessionError>> {
        use std::task::Poll;
        let id = self.waker_id();
        let spared = self.config.so_reuseport && !self.entry.has_been_served();
        let tls = self.client.is_tls();
        let (inbox, client, shutdown, killed, waker_left, shard, notifications) = (
            &mut self.buffers.from_client,
            &mut self.client,
            &self.shard.shutdown,
            &self.entry.killed,
            &mut self.waker_left,
            &self.shard,
            &mut self.notifications,
        );
        loop {
            if killed.get() {
                return Poll::Ready(Ok(Idle::Killed));
            }
            if let Some(notifications) = notifications.as_deref_mut() {
                if let Err(e) = notifications.poll_deliver(cx, client) {
                    return Poll::Ready(Err(e));
                }
            }
            match inbox.pending().first() {
                Some(&crate::protocol::frontend::TERMINATE) => return Poll::Ready(Ok(Idle::Gone)),
                Some(_) => return Poll::Ready(Ok(Idle::Message)),
                None if inbox.eof => return Poll::Ready(Ok(Idle::Gone)),
                None => {}
            }
            if !spared && shutdown.poll_fired_once(id, cx, waker_left) {
                return Poll::Ready(Ok(Idle::Shutdown));
            }
            // The inbox is empty: its buffer goes back while the socket has
            // nothing (one read fewer than trying it first: the socket says
            // when a read would find nothing).
            if !tls {
                give_back_inbox_buffer(inbox, shard);
                match client.poll_readable(cx) {
                    Poll::Ready(Ok(())) => inbox.give_buffer(shard.take_inbox_buffer()),
                    Poll::Ready(Err(e)) => return Poll::Ready(Err(SessionError::ClientIo(e))),
                    Poll::Pending => return Poll::Pending,
                }
            }
            match inbox.poll_fill(cx, client) {
                Poll::Ready(Ok(_)) => continue,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(SessionError::ClientIo(e))),
                Poll::Pending => {
                    // Readable, and nothing came after all.
                    if !tls {
                        give_back_inbox_buffer(inbox, shard);
                    }
                    return Poll::Pending;
                }
            }
        }
    }
}

/// An empty inbox's buffer back to the shard's spares (a grown one is let go).
fn give_back_inbox_buffer(inbox: &mut inbox::Inbox, shard: &Shard) {
    if let Some(buf) = inbox.take_buffer() {
        if buf.len() == inbox::INITIAL {
            shard.return_inbox_buffer(buf);
        } else {
            crate::memory::let_go_of_a_buffer(buf.len());
        }
    }
}
