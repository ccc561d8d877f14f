//! A transaction-mode session's side of LISTEN/NOTIFY (the hub is
//! `crate::notify`): the LISTEN and UNLISTEN it answers between
//! transactions instead of sending them to a server (which would pin the
//! client), and the delivery of what the hub posted for the client to its
//! socket, only between its transactions.
//!
//! It owns the session's [`Subscription`] and the notification bytes taken
//! from the mailbox and not yet written. The session holds them boxed, and
//! only once the client LISTENs through the hub: a client that never does
//! pays a pointer and one branch per wait.
//! What is not written whole yet is written before anything else goes to
//! the client, so that a message is never cut by another.

use std::task::{Context, Poll};

use bytes::BytesMut;
use futures_lite::AsyncWriteExt;

use super::{Session, SessionError};
use crate::net::Stream;
use crate::notify::statement::{self, ListenStatement};
use crate::notify::Subscription;
use crate::protocol::backend::{self, TransactionStatus};
use crate::protocol::frame::{parse_header, HEADER_LEN};
use crate::protocol::frontend;

/// What the session keeps for the hub.
#[derive(Default)]
pub(super) struct Notifications {
    /// Its channels and mailbox; `None` while it listens to none.
    pub subscription: Option<Subscription>,
    /// Taken from the mailbox and not written to the client yet (the
    /// front of it may be written already: it is written before anything else).
    pub unsent: BytesMut,
}

impl Notifications {
    /// Writes what the hub has for the client, as far as its socket takes
    /// it without waiting; the task is woken when more comes or the socket
    /// takes more. An error once the mailbox overflowed.
    pub fn poll_deliver(&mut self, cx: &mut Context<'_>, client: &mut Stream) -> Result<(), SessionError> {
        loop {
            if let Some(subscription) = &self.subscription {
                // What comes while the last is being written stays in the
                // mailbox, counted against its limit.
                if self.unsent.is_empty() {
                    subscription.take(&mut self.unsent)?;
                }
                // Woken when more comes, or when it overflows.
                subscription.watch(cx)?;
            }
            let mut written = 0;
            match super::relay::poll_send(cx, client, &mut self.unsent, &mut written) {
                Poll::Ready(Ok(true)) => {}
                Poll::Ready(Ok(false)) | Poll::Pending => return Ok(()),
                Poll::Ready(Err(e)) => return Err(SessionError::ClientIo(e)),
            }
        }
    }

    /// For a relay (a client pinned after it LISTENed, which never waits
    /// outside one): while `between_transactions` and nothing else waits
    /// for the client, what the hub has goes to `to_client`; either way the
    /// task is woken when more comes. An error once the mailbox overflowed.
    pub fn relay_between_transactions(
        &mut self,
        cx: &Context<'_>,
        between_transactions: bool,
        to_client: &mut BytesMut,
    ) -> Result<(), crate::notify::Overflow> {
        let Some(subscription) = &self.subscription else { return Ok(()) };
        if between_transactions && to_client.is_empty() {
            subscription.take(to_client)?;
        }
        subscription.watch(cx)
    }

    /// Ends the subscriptions that UNLISTENs the client sent to a server
    /// ended, once their transaction committed (`notify::follow`).
    pub fn unlisten(&mut self, unlistens: Vec<ListenStatement>) {
        let Some(subscription) = self.subscription.as_mut() else { return };
        for unlisten in unlistens {
            match unlisten {
                ListenStatement::Unlisten(channel) => subscription.unlisten(&channel),
                ListenStatement::UnlistenAll => subscription.unlisten_all(),
                ListenStatement::Listen(_) => {}
            }
        }
    }

    /// Writes everything the hub has for the client, waiting for the
    /// socket: before the client's next request goes anywhere.
    pub async fn deliver_all(&mut self, client: &mut Stream) -> Result<(), SessionError> {
        if let Some(subscription) = &self.subscription {
            subscription.take(&mut self.unsent)?;
        }
        if !self.unsent.is_empty() {
            client.write_all(&self.unsent).await?;
            client.flush().await?;
            self.unsent.clear();
        }
        Ok(())
    }
}

impl From<crate::notify::Overflow> for SessionError {
    fn from(e: crate::notify::Overflow) -> SessionError {
        SessionError::NotificationsOverflow(e)
    }
}

impl Session {
    /// The LISTEN or UNLISTEN the client's next message is, if it is a
    /// simple query that is exactly one (see `notify::statement`) and the
    /// client is between transactions: the session answers it here, with
    /// the hub ([`Session::answer_listen`]). For any other message, a few
    /// compares and no allocation.
    #[inline]
    pub(super) fn listen_statement_ahead(&self) -> Option<ListenStatement> {
        let pending = self.buffers.from_client.pending();
        if pending.first() != Some(&frontend::QUERY) || self.mode != crate::config::PoolMode::Transaction {
            return None;
        }
        let header = parse_header(pending, self.config.max_message_size).ok()??;
        let body = pending.get(HEADER_LEN..HEADER_LEN + header.body_len)?;
        if !statement::may_be_listen(body) || self.exchange.tracker.status() != TransactionStatus::Idle {
            return None;
        }
        statement::parse(frontend::decode_query(body).ok()?)
    }

    /// Answers `statement`, the client's next message (see
    /// [`Session::listen_statement_ahead`]), as PostgreSQL would: once the
    /// hub's listening connection LISTENs to the channel, for a LISTEN.
    pub(super) async fn answer_listen(&mut self, statement: ListenStatement) -> Result<(), SessionError> {
        // The Query is taken: it is answered here.
        let _ = self.buffers.from_client.next(|_| true);
        let mut out = BytesMut::new();
        match &statement {
            ListenStatement::Listen(channel) => {
                let notifications = self.notifications.get_or_insert_with(Box::default);
                let subscription = notifications.subscription.get_or_insert_with(|| {
                    self.shard.notify_hub.subscribe(
                        &self.entry.info.database,
                        &self.entry.info.user,
                        self.pool.target(),
                        self.config.notify_client_buffer,
                    )
                });
                match subscription.listen(channel).await {
                    Ok(()) => backend::command_complete(&mut out, statement.command_tag()),
                    Err(refused) => backend::error_response(&mut out, &refused),
                }
            }
            ListenStatement::Unlisten(channel) => {
                if let Some(subscription) = self.notifications.as_mut().and_then(|n| n.subscription.as_mut()) {
                    subscription.unlisten(channel);
                }
                backend::command_complete(&mut out, statement.command_tag());
            }
            ListenStatement::UnlistenAll => {
                if let Some(subscription) = self.notifications.as_mut().and_then(|n| n.subscription.as_mut()) {
                    subscription.unlisten_all();
                }
                backend::command_complete(&mut out, statement.command_tag());
            }
        }
        // Run before this statement, `Session::run` wrote all it had to.
        debug_assert!(self.notifications.as_ref().is_none_or(|n| n.unsent.is_empty()));
        self.forget_ended_subscription();
        backend::ready_for_query(&mut out, TransactionStatus::Idle);
        // What the hub posted while the LISTEN was carried out goes after
        // its answer (what came before it went before: `Session::run`),
        // once the client waits again.
        self.client.write_all(&out).await?;
        self.client.flush().await?;
        Ok(())
    }

    /// Lets go of the client's subscription once it listens to nothing,
    /// and of the session's notification state once nothing of it is left
    /// to write.
    pub(super) fn forget_ended_subscription(&mut self) {
        let Some(notifications) = self.notifications.as_deref_mut() else { return };
        if notifications.subscription.as_ref().is_some_and(Subscription::is_empty) {
            notifications.subscription = None;
        }
        if notifications.subscription.is_none() && notifications.unsent.is_empty() {
            self.notifications = None;
        }
    }
}
