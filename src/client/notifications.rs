//! A transaction-mode session's side of LISTEN/NOTIFY (the hub is
//! `crate::notify`): the LISTEN and UNLISTEN it answers between
//! transactions instead of sending them to a server (which would pin the
//! client), and the delivery of what the hub posted for the client to its
//! socket, only between its transactions.
//!
//! It owns the session's [`Subscription`], the notification bytes taken
//! from the mailbox and not yet written, the LISTEN statements the
//! client prepared that no server has ([`KeptStatements`]), and the
//! channels subscribed to ahead of a LISTEN the client sent to a server
//! (`notify::follow`) until its transaction ends. The session
//! holds them boxed, and only once the client LISTENs through the hub: a
//! client that never does pays a pointer and one branch per wait.
//!
//! A kept statement is the client's until it closes it, prepares the name
//! again on a server, or a DISCARD ALL or DEALLOCATE ALL forgets every
//! statement; the unnamed one until the client's next request that goes
//! to a server. What this does not do yet: a kept statement bound, described
//! or closed among other messages, or inside a transaction block, goes to
//! the server, which does not have it (26000), where PostgreSQL would run it.
//! What is not written whole yet is written before anything else goes to
//! the client, so that a message is never cut by another.

use std::task::{Context, Poll};

use bytes::BytesMut;
use futures_lite::AsyncWriteExt;

use super::{Session, SessionError};
use crate::net::Stream;
use crate::notify::follow::Outcome;
use crate::notify::request::{self, KeptStatements, ListenRequest};
use crate::notify::statement::ListenStatement;
use crate::notify::{ListenWait, Subscription};
use crate::protocol::backend::ErrorFields;
use crate::protocol::backend::TransactionStatus;
use crate::protocol::frontend;

/// What the session keeps for the hub.
#[derive(Default)]
pub(super) struct Notifications {
    /// Its channels and mailbox; `None` while it listens to none.
    pub subscription: Option<Subscription>,
    /// Taken from the mailbox and not written to the client yet (the
    /// front of it may be written already: it is written before anything else).
    pub unsent: BytesMut,
    /// The LISTEN statements the client prepared here.
    pub kept: KeptStatements,
    /// The last request answered here ended with a Flush: PostgreSQL's
    /// implicit transaction is open, and nothing is delivered until the
    /// client's next request.
    pub held: bool,
    /// Channels subscribed to ahead of a LISTEN the client sent to a server
    /// (`notify::follow`), whose transaction has not ended yet.
    ahead: Vec<String>,
    /// The hub's LISTENs of those channels not answered yet: the text that
    /// LISTENs waits for them (`Exchange::hub_listened`).
    waits: Vec<ListenWait>,
    /// Those the hub could not LISTEN to, not told yet.
    refused: Vec<(String, ErrorFields)>,
    /// Channels the client's own (pinned) server connection delivers, as
    /// the hub could not LISTEN to them.
    server_delivers: Vec<String>,
}

/// How a relay subscribes its client to the hub.
pub(super) struct HubDoor<'a> {
    pub hub: &'a crate::notify::Hub,
    pub database: &'a str,
    pub user: &'a str,
    pub pool: &'a crate::pool::Pool,
    /// notify_client_buffer.
    pub limit: usize,
}

impl HubDoor<'_> {
    pub fn subscribe(&self) -> Subscription {
        self.hub.subscribe(self.database, self.user, self.pool.target(), self.limit)
    }
}

impl Notifications {
    /// Writes what the hub has for the client, as far as its socket takes
    /// it without waiting; the task is woken when more comes or the socket
    /// takes more. An error once the mailbox overflowed.
    pub fn poll_deliver(&mut self, cx: &mut Context<'_>, client: &mut Stream) -> Result<(), SessionError> {
        if self.held {
            return Ok(());
        }
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

    /// Subscribes ahead to `channels`, LISTENed to by a text the client
    /// sends to a server (see `notify::follow`), with the subscription
    /// `subscribe` makes if it has none; the text waits for
    /// [`Notifications::poll_listened`].
    pub fn listen_ahead(&mut self, channels: Vec<String>, subscribe: impl FnOnce() -> Subscription) {
        let subscription = self.subscription.get_or_insert_with(subscribe);
        for channel in channels {
            if subscription.listens_to(&channel) {
                continue;
            }
            if let Some(wait) = subscription.listen_ahead(&channel) {
                self.waits.push(wait);
            }
            self.ahead.push(channel);
        }
    }

    /// More of the client's transaction goes to the server: what the hub
    /// posted until now for the channels subscribed to ahead was committed
    /// before the client's LISTEN is (in this request or a later one), and
    /// PostgreSQL delivers a session only what commits after its LISTEN.
    #[inline]
    pub fn forget_before_commit(&mut self) {
        if let (false, Some(subscription)) = (self.ahead.is_empty(), &self.subscription) {
            for channel in &self.ahead {
                subscription.drop_pending(channel);
            }
        }
    }

    /// Ready once the hub has answered every LISTEN subscribed ahead, with
    /// the channels it could not LISTEN to (their subscriptions ended: the
    /// client's own server connection is to deliver them).
    pub fn poll_listened(&mut self, cx: &Context<'_>) -> Poll<Vec<(String, ErrorFields)>> {
        let mut i = 0;
        while let Some(wait) = self.waits.get(i) {
            match wait.poll(cx) {
                Poll::Pending => i += 1,
                Poll::Ready(result) => {
                    let wait = self.waits.swap_remove(i);
                    if let Err(e) = result {
                        self.refused.push((wait.channel().to_owned(), e));
                    }
                }
            }
        }
        if !self.waits.is_empty() {
            return Poll::Pending;
        }
        let refused = std::mem::take(&mut self.refused);
        for (channel, _) in &refused {
            self.ahead.retain(|c| c != channel);
            self.server_delivers.push(channel.clone());
            if let Some(subscription) = self.subscription.as_mut() {
                subscription.unlisten(channel);
            }
        }
        Poll::Ready(refused)
    }

    /// Makes the subscriptions what the client's LISTENs and UNLISTENs
    /// sent to a server made of its registrations, once their transactions
    /// ended (`notify::follow`): in order, a committed LISTEN keeps its
    /// subscription ahead, a rolled back one ends it (unless a later one of
    /// the same channel committed), an UNLISTEN ends one.
    pub fn apply(&mut self, outcomes: Vec<Outcome>) {
        for (i, outcome) in outcomes.iter().enumerate() {
            match outcome {
                Outcome::Committed(ListenStatement::Listen(channel)) => {
                    if let Some(at) = self.ahead.iter().position(|c| c == channel) {
                        self.ahead.swap_remove(at);
                    }
                    // An UNLISTEN before it in the same transaction ended
                    // the subscription ahead.
                    let subscription = self.subscription.as_mut().filter(|_| !self.server_delivers.contains(channel));
                    if let Some(subscription) = subscription.filter(|s| !s.listens_to(channel)) {
                        // Not waited for: the hub listened to it a moment ago.
                        drop(subscription.listen_ahead(channel));
                    }
                }
                Outcome::RolledBack(channel) => {
                    let Some(at) = self.ahead.iter().position(|c| c == channel) else { continue };
                    self.ahead.swap_remove(at);
                    self.waits.retain(|w| w.channel() != channel);
                    let committed_later = outcomes[i + 1..]
                        .iter()
                        .any(|o| matches!(o, Outcome::Committed(ListenStatement::Listen(c)) if c == channel));
                    if let Some(subscription) = self.subscription.as_mut().filter(|_| !committed_later) {
                        subscription.unlisten(channel);
                    }
                }
                Outcome::Committed(ListenStatement::Unlisten(channel)) => {
                    if let Some(subscription) = self.subscription.as_mut() {
                        subscription.unlisten(channel);
                    }
                }
                Outcome::Committed(ListenStatement::UnlistenAll) => {
                    if let Some(subscription) = self.subscription.as_mut() {
                        subscription.unlisten_all();
                    }
                }
            }
        }
    }

    /// Writes everything the hub has for the client, waiting for the
    /// socket: before the client's next request goes anywhere, with what
    /// the listening connection received and its task has not read yet
    /// (`Subscription::catch_up_if_behind`).
    pub async fn deliver_all(&mut self, client: &mut Stream) -> Result<(), SessionError> {
        if self.held {
            return Ok(());
        }
        if let Some(subscription) = &self.subscription {
            subscription.catch_up_if_behind().await;
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

/// What the client is to get before the answer to its UNLISTEN: everything
/// committed before it came ([`Subscription::catch_up`]), as PostgreSQL
/// would have sent it while the client was idle; nothing if the request
/// ended with a Flush (PostgreSQL's implicit transaction is open, and it
/// delivers nothing until it ends, by when the UNLISTEN holds).
async fn catch_up(subscription: &Subscription, flushed: bool) -> Result<BytesMut, SessionError> {
    let mut taken = BytesMut::new();
    if !flushed {
        subscription.catch_up().await;
        subscription.take(&mut taken)?;
    }
    Ok(taken)
}

impl From<crate::notify::Overflow> for SessionError {
    fn from(e: crate::notify::Overflow) -> SessionError {
        SessionError::NotificationsOverflow(e)
    }
}

impl Session {
    /// The LISTEN or UNLISTEN work the client's next request is, if it is
    /// that and nothing else (see `notify::request`: a simple Query, or the
    /// extended protocol's Parse, Bind, Describe, Execute, Close of a LISTEN)
    /// and the client is between transactions: the session answers it here,
    /// with the hub ([`Session::answer_listen`]). For any other message, a
    /// few compares and no allocation.
    #[inline]
    pub(super) fn listen_request_ahead(&self) -> Option<ListenRequest> {
        let pending = self.buffers.from_client.pending();
        let kept = self.notifications.as_ref().map(|n| &n.kept).filter(|kept| !kept.is_empty());
        let looked_at = match pending.first() {
            Some(&frontend::QUERY | &frontend::PARSE) => true,
            Some(&frontend::BIND | &frontend::DESCRIBE | &frontend::CLOSE) => kept.is_some(),
            _ => false,
        };
        if !looked_at
            || self.mode != crate::config::PoolMode::Transaction
            || self.exchange.tracker.status() != TransactionStatus::Idle
        {
            return None;
        }
        let none = KeptStatements::default();
        let request = request::listen_request(pending, self.config.max_message_size, kept.unwrap_or(&none))?;
        // A name the client prepared on a server: PostgreSQL's 42P05 comes
        // from there.
        match &request.prepares {
            Some((name, _)) if !name.is_empty() && self.statements.get(name).is_some() => None,
            _ => Some(request),
        }
    }

    /// Answers `request`, the client's next (see
    /// [`Session::listen_request_ahead`]), as PostgreSQL would: once the
    /// hub's listening connection LISTENs to the channel, for a LISTEN.
    pub(super) async fn answer_listen(&mut self, request: ListenRequest) -> Result<(), SessionError> {
        // Its messages are taken: they are answered here.
        for _ in 0..request.messages() {
            let _ = self.buffers.from_client.next(|_| true);
        }
        let notifications = self.notifications.get_or_insert_with(Box::default);
        if let Some((name, statement)) = &request.prepares {
            if name.is_empty() {
                // PostgreSQL's unnamed statement is now the LISTEN, which no
                // server has: a Bind to it must not reach one.
                self.exchange.forget_unnamed();
            }
            notifications.kept.keep(name, statement.clone());
        }
        if let Some(name) = &request.closes {
            notifications.kept.forget(name);
        }
        notifications.held = request.flushed;
        let mut refused = None;
        match &request.runs {
            None => {}
            Some(ListenStatement::Listen(channel)) => {
                let door = HubDoor {
                    hub: &self.shard.notify_hub,
                    database: &self.entry.info.database,
                    user: &self.entry.info.user,
                    pool: &self.pool,
                    limit: self.config.notify_client_buffer,
                };
                let subscription = notifications.subscription.get_or_insert_with(|| door.subscribe());
                refused = subscription.listen(channel).await.err();
            }
            Some(ListenStatement::Unlisten(channel)) => {
                if let Some(subscription) = notifications.subscription.as_mut().filter(|s| s.listens_to(channel)) {
                    notifications.unsent = catch_up(subscription, request.flushed).await?;
                    subscription.unlisten(channel);
                }
            }
            Some(ListenStatement::UnlistenAll) => {
                if let Some(subscription) = notifications.subscription.as_mut().filter(|s| !s.is_empty()) {
                    notifications.unsent = catch_up(subscription, request.flushed).await?;
                    subscription.unlisten_all();
                }
            }
        }
        let mut out = match self.notifications.as_deref_mut() {
            Some(notifications) => std::mem::take(&mut notifications.unsent),
            None => BytesMut::new(),
        };
        self.forget_ended_subscription();
        request.answer(&mut out, refused.as_ref());
        // What was committed before an UNLISTEN goes before its answer;
        // what the hub posted while a LISTEN was carried out goes after it
        // (what came before it went before: `Session::run`), once the
        // client waits again.
        self.client.write_all(&out).await?;
        self.client.flush().await?;
        Ok(())
    }

    /// Lets go of the client's subscription once it listens to nothing,
    /// and of the session's notification state once nothing of it is left
    /// to write or keep.
    pub(super) fn forget_ended_subscription(&mut self) {
        let Some(notifications) = self.notifications.as_deref_mut() else { return };
        if notifications.subscription.as_ref().is_some_and(Subscription::is_empty) {
            notifications.subscription = None;
        }
        if notifications.subscription.is_none()
            && notifications.unsent.is_empty()
            && notifications.kept.is_empty()
            && !notifications.held
            && notifications.ahead.is_empty()
            && notifications.waits.is_empty()
        {
            self.notifications = None;
        }
    }

    /// The client's next request goes to a server: PostgreSQL's implicit
    /// transaction a Flush left open ends with it, and its unnamed
    /// statement is no longer known to be a kept one.
    pub(super) fn notifications_before_server(&mut self) {
        let Some(notifications) = self.notifications.as_deref_mut() else { return };
        notifications.held = false;
        notifications.kept.forget("");
    }

    /// After a transaction: the kept statements the client closed on the
    /// server, or prepared there again, or forgot with every statement; and
    /// what its LISTENs and UNLISTENs came to, if the relay did not take it.
    pub(super) fn notifications_after_server(&mut self) {
        let Some(notifications) = self.notifications.as_deref_mut() else { return };
        if let Some(outcomes) = self.exchange.take_listen_outcomes() {
            notifications.apply(outcomes);
        }
        let closed = self.exchange.take_foreign_closes();
        if closed.all {
            notifications.kept = KeptStatements::default();
        }
        for name in &closed.names {
            notifications.kept.forget(name);
        }
        let statements = &self.statements;
        notifications.kept.forget_if(|name| statements.get(name).is_some());
        self.forget_ended_subscription();
    }
}
