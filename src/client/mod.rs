//! One client connection, from its startup packet to its last byte.
//!
//! This module owns the client's socket and the session state machine:
//! the login (`login`: startup, admission, authentication), then the
//! greeting and the relay loop that borrows a server connection from
//! the pool when the client starts talking and gives it back when the server
//! says the transaction is over (transaction mode) or when the client leaves
//! (session mode). It never opens server connections itself (`pool` does)
//! and never blocks its shard.
//!
//! A cancel request reaches the client's request where it is (see
//! `ClientEntry::queued`): on its server connection once written there, in
//! the session while it waits for one (answered here, 57014, never sent),
//! nowhere while the client is between requests.

mod auth;
pub(crate) mod auth_query;
mod autoprep;
pub mod deallocate;
pub mod exchange;
mod follow;
mod give_back;
mod idle;
mod inbox;
mod login;
pub mod negotiate;
mod notifications;
pub mod pinning;
mod quiet;
mod relay;
pub mod replication;
mod routing;
mod sole_access;
mod startup;

pub mod tracker;

use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use futures_lite::AsyncWriteExt;
use tracing::{debug, info, warn};

use crate::config::{Config, PoolMode};
use crate::logging::Escaped;
use crate::net::Stream;
use crate::pool::{Checkout, Handover, Lease, Offer, Opening, Pool, PoolError};
use crate::protocol::backend::{self, ErrorFields};
use crate::protocol::frame::{parse_header, HEADER_LEN};
use crate::protocol::startup::StartupParams;
use crate::protocol::ProtocolError;
use crate::rt::with_timeout;
use crate::runtime::{ClientEntry, ClientInfo, ClientState, Shard};
use crate::server::ServerError;
use crate::settings;

use crate::prepare::ClientStatements;
use exchange::Exchange;
use idle::Idle;
use login::{log_failed_login, login, refuse, Claimed, Target};
pub use relay::ServerSide;
use relay::{Buffers, Deadline, Intake, Limits, Relay, RelayEnd};

/// How long a departing client's server connection may take to roll back or
/// reset, or a departing client to take its error, before pglane gives up.
const CLEANUP_TIMEOUT: Duration = Duration::from_secs(5);

/// The next [`Session::serial`] (from 1: 0 is a connection's "no client yet").
static NEXT_SESSION_SERIAL: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

/// Serves one accepted client connection, counted as `shard`'s, until it
/// ends (and then counts it out).
///
/// Two futures, so that a logged-in client's task holds only its session:
/// the login, admission and the session's start (large, short-lived, and an
/// async fn keeps its arguments for its whole life) run boxed, and are
/// freed before the session runs.
pub fn serve(shard: &Rc<Shard>, stream: Stream, peer: Option<std::net::SocketAddr>) -> impl Future<Output = ()> {
    let admission = Box::pin(admit(shard.clone(), stream, peer));
    async move {
        // `let else`, not `if let`: the admission's answer must not outlive
        // the statement, or the task would hold the session twice.
        let Some(mut session) = admission.await else { return };
        let ended = session.run().await;
        Box::pin(session.finish(ended)).await;
    }
}

/// The login, then the session it admits to, started (the server's
/// parameters, the startup packet's settings, the greeting); `None` once a
/// client that gets no session is served (a refusal, a cancel request, the
/// admin console, a replication connection), or its session ended while
/// starting, and counted out.
async fn admit(shard: Rc<Shard>, stream: Stream, peer: Option<std::net::SocketAddr>) -> Option<Session> {
    let Some((mut session, params)) = admit_or_serve(&shard, stream, peer).await else {
        shard.client_gone();
        return None;
    };
    // Here, not in `Session::run`: run would keep the startup packet's
    // parameters, its argument, in the client's task for the session's life.
    match Box::pin(session.start(params)).await {
        Ok(()) => Some(session),
        Err(e) => {
            Box::pin(session.finish(Err(e))).await;
            None
        }
    }
}

async fn admit_or_serve(
    shard: &Rc<Shard>,
    mut stream: Stream,
    peer: Option<std::net::SocketAddr>,
) -> Option<(Session, StartupParams)> {
    let config = shard.shared.config.load_full();
    // Boxed, like the other rarely-running large futures below (the admin
    // console, opening a server connection, refusing and ending): an async
    // fn's future is as big as its biggest state.
    // What the client sent beyond what the login read (a pipelined first
    // query, node-postgres' Terminate): the session's first messages.
    let mut pending = BytesMut::new();
    let (mut params, target) = {
        // Who the client said it was, as far as it got: for the log line
        // of a login that fails.
        let mut claimed = Claimed::default();
        let login = Box::pin(login(shard, &config, &mut stream, peer, &mut pending, &mut claimed));
        let refusal = match with_timeout(Config::secs(config.client_login_timeout), login).await {
            Some(Ok(Some(ok))) => Ok(ok),
            Some(Ok(None)) => return None, // SSL refused and closed, or a cancel request served
            Some(Err(e)) => {
                log_failed_login(shard, &config, peer, &claimed, Some(&e));
                Err(e)
            }
            None => {
                log_failed_login(shard, &config, peer, &claimed, None);
                Err(SessionError::Refused(ErrorFields::fatal("08P01", "client_login_timeout: login took too long")))
            }
        };
        match refusal {
            Ok(ok) => ok,
            Err(e) => {
                Box::pin(refuse(&mut stream, e)).await;
                return None;
            }
        }
    };
    let info = ClientInfo {
        user: params.user().unwrap_or_default().to_owned(),
        database: params.database().unwrap_or_default().to_owned(),
        peer,
        application_name: params.get("application_name").unwrap_or_default().into(),
        admin: matches!(target, Target::Admin { .. }),
        tls: stream.tls_description().map(String::into_boxed_str),
        replication: params.get("replication").and_then(|v| replication::mode(v).ok().flatten()),
        remote_pid: if peer.is_none() { stream.unix_peer_pid() } else { 0 },
    };
    if !matches!(target, Target::Admin { .. }) && shard.is_disabled(&info.database) {
        // DISABLE in the admin console; PgBouncer's words.
        let refusal = ErrorFields::fatal("08P01", format!("database does not allow connections: {}", info.database));
        Box::pin(refuse(&mut stream, SessionError::Refused(refusal))).await;
        return None;
    }
    let Some((process_id, entry)) = shard.register_client(info) else {
        // Peered, each shard has a few thousand keys to give (see `runtime::keys`).
        warn!(?peer, "client refused: every cancel key of this shard is in use");
        let refusal = ErrorFields::fatal("53300", "sorry, too many clients already");
        Box::pin(refuse(&mut stream, SessionError::Refused(refusal))).await;
        return None;
    };
    let (user, database) = (Escaped(&entry.info.user), Escaped(&entry.info.database));
    // log_connections, as PgBouncer's: a line per login.
    let log_connections = config.log_connections;
    if log_connections {
        info!(?peer, %user, %database, process_id, "client logged in");
    }
    let pool = match target {
        Target::Pool(pool) => pool,
        Target::Admin { may_control } => {
            if log_connections {
                info!(?peer, %user, "admin console login");
            }
            Box::pin(crate::admin::serve(shard, &mut stream, pending, process_id, entry.secret_key, may_control)).await;
            shard.unregister_client(process_id);
            return None;
        }
        Target::Replication(server) => {
            info!(?peer, %user, %database, "replication connection, passed through to a server connection of its own");
            Box::pin(replication::serve(&mut stream, &params, &server, &pending, process_id, &entry)).await;
            shard.unregister_client(process_id);
            return None;
        }
    };
    if let Some(db) = config.database(&entry.info.database) {
        add_default_settings(&mut params, &db.default_settings);
    }
    let counted = match shard.shared.count_client(&config, &entry.info.database, &entry.info.user) {
        Ok(counted) => counted,
        Err(limit) => {
            // PgBouncer's words and code.
            let message = format!("client connections exceeded ({limit})");
            if config.log_pooler_errors {
                warn!(?peer, %user, %database, "client refused: {message}");
            }
            let refusal = ErrorFields::fatal("08P01", message);
            Box::pin(refuse(&mut stream, SessionError::Refused(refusal))).await;
            shard.unregister_client(process_id);
            return None;
        }
    };
    let mode = config.pool_mode_for(&entry.info.database, &entry.info.user);
    let auto_prepare = config.auto_prepare_policy();
    // Read routing, for transaction-mode clients of a database that has it
    // (a session-mode client keeps its one server connection: the primary).
    let route = match mode {
        PoolMode::Transaction => shard
            .router(&config, &entry.info.database, &entry.info.user, &pool)
            .map(|router| Box::new(crate::router::client::ClientRoute::new(router))),
        PoolMode::Session => None,
    };
    let exchange = match mode {
        // The client keeps its server connection: nothing to share or rename.
        PoolMode::Session => Exchange::passing_through(),
        // Server pipelining hands a connection over with a request behind
        // it: not for a client whose connections come from several pools.
        PoolMode::Transaction if config.server_pipelining && route.is_none() => Exchange::new(auto_prepare).with_pipelining(),
        PoolMode::Transaction => Exchange::new(auto_prepare),
    };
    let mut session = Session {
        shard: shard.clone(),
        buffers: Buffers::new(config.max_message_size),
        statements: ClientStatements::new(config.max_client_prepared_statements),
        config,
        client: stream,
        pool,
        mode,
        process_id,
        entry,
        exchange,
        lease_started: crate::rt::Stamp::read(),
        settings: settings::Settings::default(),
        startup_applied: false,
        unlearned: Box::default(),
        owed_notices: BytesMut::new(),
        waker_left: false,
        offer: None,
        skip_ready: 0,
        notifications: None,
        route,
        routed: None,
        serial: NEXT_SESSION_SERIAL.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
        _counted: counted,
    };
    session.buffers.from_client.preload(&pending);
    Some((session, params))
}

/// The database's `default_settings` that the client's startup packet
/// (parameters, or `-c` switches of its options) does not set, added to it
/// as if the client had sent them.
fn add_default_settings(params: &mut StartupParams, defaults: &std::collections::BTreeMap<String, String>) {
    if defaults.is_empty() {
        return;
    }
    let given: Vec<String> =
        settings::from_startup(params).map(|given| given.into_iter().map(|(name, _)| name).collect()).unwrap_or_default();
    for (name, value) in defaults {
        if !given.contains(&settings::canonical_name(name)) {
            params.params.push((name.clone(), value.clone()));
        }
    }
}

/// Why a login or session ended early.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    #[error("client protocol error: {0}")]
    ClientProtocol(#[from] ProtocolError),
    #[error("client connection: {0}")]
    ClientIo(#[from] std::io::Error),
    #[error("client closed the connection")]
    ClientClosed,
    /// A message for the client has been prepared; the session ends.
    #[error("{0}")]
    Refused(ErrorFields),
    /// A first packet PostgreSQL closes the connection on without a word
    /// (it only logs it): a length out of bounds, or cut short.
    #[error("invalid startup packet: {0}")]
    BadStartupPacket(ProtocolError),
    /// A startup packet of protocol 1 or 2, refused with an error in that
    /// protocol's format, as PostgreSQL does.
    #[error("{0}")]
    RefusedOldProtocol(ErrorFields),
    #[error("server: {0}")]
    Server(#[from] ServerError),
    /// The server ended the session with a FATAL, passed on to the client.
    #[error("the server ended the session with a FATAL, which the client got")]
    ServerEnded,
    #[error("{0}")]
    Pool(#[from] PoolError),
    /// The client did not take its notifications (see `crate::notify`).
    #[error("{0}")]
    NotificationsOverflow(crate::notify::Overflow),
}

impl SessionError {
    /// The ErrorResponse the client should see before the connection closes.
    fn client_message(&self) -> Option<ErrorFields> {
        match self {
            SessionError::ClientProtocol(e) => Some(ErrorFields::fatal("08P01", format!("protocol violation: {e}"))),
            SessionError::ClientIo(_)
            | SessionError::ClientClosed
            | SessionError::ServerEnded
            | SessionError::BadStartupPacket(_)
            | SessionError::RefusedOldProtocol(_) => None,
            SessionError::Refused(fields) => Some(fields.clone()),
            SessionError::Server(ServerError::Refused(fields)) => {
                Some(ErrorFields { severity: "FATAL".into(), ..fields.clone() })
            }
            SessionError::Server(e) => Some(ErrorFields::fatal("08006", e.to_string())),
            SessionError::Pool(PoolError::WaitTimeout) => Some(ErrorFields::fatal("08P01", "query_wait_timeout")),
            SessionError::Pool(PoolError::Server(ServerError::Refused(fields))) => {
                Some(ErrorFields { severity: "FATAL".into(), ..fields.clone() })
            }
            SessionError::Pool(e) => Some(ErrorFields::fatal("08006", e.to_string())),
            SessionError::NotificationsOverflow(e) => Some(ErrorFields::fatal(
                "54000",
                format!("terminating connection: {e}; the client does not read its notifications fast enough"),
            )),
        }
    }
}

async fn send_error(stream: &mut Stream, fields: &ErrorFields) {
    let mut out = BytesMut::new();
    backend::error_response(&mut out, fields);
    let _ = stream.write_all(&out).await;
    let _ = stream.close().await;
}

/// A logged-in client.
struct Session {
    shard: Rc<Shard>,
    config: Arc<Config>,
    client: Stream,
    pool: Rc<Pool>,
    mode: PoolMode,
    process_id: i32,
    entry: Rc<ClientEntry>,
    buffers: Buffers,
    exchange: Exchange,
    /// This client's names for the shard's prepared statements.
    statements: ClientStatements,
    /// When the current server connection was lent (for xact_time).
    lease_started: crate::rt::Stamp,
    /// Session settings this client changed (carried to each server it gets).
    settings: settings::Settings,
    /// A server accepted this client's startup settings.
    startup_applied: bool,
    /// Reported settings of the startup packet, as the client spelled them,
    /// whose spelling by the server the pool has yet to learn.
    unlearned: Box<[(String, String)]>,
    /// NoticeResponses the server sent while its startup settings were
    /// applied (a SET's warning), owed to the client: PostgreSQL sends them
    /// at login, after AuthenticationOk and before ParameterStatus, which is
    /// where they go if they came at login; else ahead of its first reply.
    owed_notices: BytesMut,
    /// The shard's shutdown signal has this task's waker
    /// (`ShutdownSignal::poll_fired_once`).
    waker_left: bool,
    /// The server connection held is offered behind this client's request
    /// (server pipelining, `pool::Opening`).
    offer: Option<Offer>,
    /// ReadyForQuery messages owed to the client ahead on a connection
    /// handed over (`pool::Handover::skip_ready`), for the next relay.
    skip_ready: usize,
    /// This session's number, never another's in this process (process ids
    /// are reused): what a server connection remembers of its last client.
    serial: u64,
    /// This client, counted against its database's and user's client limits
    /// while the session lasts.
    _counted: crate::runtime::CountedClient,
    /// Its LISTENs through the notification hub, and what the hub posted
    /// for it (transaction mode; see `notifications`). Boxed, and none
    /// until it first LISTENs so: a client that never does pays a pointer.
    notifications: Option<Box<notifications::Notifications>>,
    /// Its read routing (see `crate::router`), if its database has it.
    route: Option<Box<crate::router::client::ClientRoute>>,
    /// The standby's pool the current request goes to (read routing).
    routed: Option<Rc<Pool>>,
}

/// Sends a cancel request for what `key`'s backend runs, on its own task,
/// within `timeout`. The connection serves no other client until the server
/// has it. Then `and_then` runs, told whether the server took it.
fn spawn_cancel(key: &Rc<crate::server::CancelKey>, timeout: Duration, and_then: impl AsyncFnOnce(bool) + 'static) {
    let under_way = key.cancel_under_way();
    let key = key.clone();
    crate::rt::spawn_local(async move {
        let sent = crate::server::send_cancel(&key, timeout).await.is_ok();
        drop(under_way);
        and_then(sent).await;
    })
    .detach();
}

/// Whether a request starting with a message tagged `tag` runs something a
/// cancel request could stop (a lone Sync or Flush runs nothing).
fn runs_something(tag: Option<&u8>) -> bool {
    use crate::protocol::frontend::*;
    matches!(tag, Some(&(QUERY | PARSE | BIND | DESCRIBE | EXECUTE | CLOSE | FUNCTION_CALL)))
}

/// What `take_server` got for the client's request.
enum Taken {
    Lease(Lease),
    /// It left while waiting behind another client.
    ClientLeft,
    /// A cancel request came for it while it waited (`answer_cancelled`).
    Cancelled,
}

/// `wait`, unless a cancel request comes first for the client's queued
/// request (`ClientEntry::queued`): then `None`, and `wait` is dropped.
async fn until_cancelled<T>(entry: &ClientEntry, wait: impl Future<Output = T>) -> Option<T> {
    use std::task::Poll;
    let mut wait = std::pin::pin!(wait);
    let queued = entry.queued.get();
    // The wait first: a connection to be had at once costs no waker. One
    // that comes with a cancel is given back by the caller (`transaction`).
    std::future::poll_fn(|cx| match wait.as_mut().poll(cx) {
        Poll::Ready(got) => Poll::Ready(Some(got)),
        Poll::Pending if queued => entry.poll_cancelled(cx).map(|()| None),
        Poll::Pending => Poll::Pending,
    })
    .await
}

/// `make()`'s future, made in a box of its own. `Box::pin(make())` makes
/// it on the stack and copies all of it into the box, every byte of the
/// largest state it can be in, though a future not yet polled holds only
/// its arguments; with the box allocated first, the compiler writes those
/// few fields straight into it (bench/results/instructions-42-in-place.md:
/// ~110 fewer instructions a transaction).
#[inline(always)]
fn boxed_in_place<F: Future>(make: impl FnOnce() -> F) -> Pin<Box<F>> {
    Box::into_pin(Box::write(Box::new_uninit(), make()))
}

/// How a transaction ended for the session.
#[derive(PartialEq, Eq)]
enum Transaction {
    /// The server connection went back: wait for the client's next request.
    Over,
    /// The client left.
    SessionOver,
}

impl Session {
    /// The started session (see [`admit`]) until the client leaves, or an
    /// error ends it.
    async fn run(&mut self) -> Result<(), SessionError> {
        loop {
            if self.mode == PoolMode::Transaction {
                let idle = self.wait_for_client_limited().await?;
                match idle {
                    Idle::Message => {
                        if let Some(notifications) = self.notifications.as_deref_mut() {
                            // What came before the request goes before its answers.
                            notifications.deliver_all(&mut self.client).await?;
                        }
                        // Boxed with its request at once: a request held
                        // across the await would be kept in every client's task.
                        if let Some(answer) = self.listen_request_ahead().map(|request| Box::pin(self.answer_listen(request))) {
                            answer.await?;
                            continue;
                        }
                        // Its request waits in pglane until it is on a server.
                        self.entry.queued.set(runs_something(self.buffers.from_client.pending().first()))
                    }
                    Idle::Gone => return Ok(()),
                    Idle::Shutdown => return Err(shutting_down()),
                    Idle::Killed => return Err(killed()),
                    Idle::TimedOut => {
                        return Err(SessionError::Refused(ErrorFields::fatal(
                            "57P05",
                            "terminating connection due to client_idle_timeout",
                        )))
                    }
                }
            }
            if self.notifications.is_some() {
                self.notifications_before_server();
            }
            // Boxed: what only a transaction needs (its server connection,
            // the relay) is allocated while one runs. Inline, an idle
            // client's task would be as big as a busy one's. Written into
            // its box, not moved there: see `boxed_in_place`.
            if boxed_in_place(|| self.transaction()).await? == Transaction::SessionOver {
                return Ok(());
            }
            if self.notifications.is_some() {
                self.notifications_after_server();
            } else {
                // Nothing is subscribed (the hub refused its LISTEN, say):
                // what the client's LISTENs and UNLISTENs came to is moot.
                let _ = self.exchange.take_listen_outcomes();
            }
        }
    }

    /// The session's start: the client's startup settings taken, and the
    /// greeting sent.
    async fn start(&mut self, startup: StartupParams) -> Result<(), SessionError> {
        let wait = Config::secs(self.config.query_wait_timeout);
        let server_params = Box::pin(self.pool.server_params(wait)).await?;
        if self.config.auto_prepare {
            autoprep::start_validator(&self.pool);
        }
        // Boxed: it may query a server, a large future.
        Box::pin(self.take_startup_settings(&startup)).await?;
        self.greet(&server_params, self.process_id).await
    }

    /// One transaction (in session mode, the whole session): a server
    /// connection for it, the relay, and the connection given back.
    async fn transaction(&mut self) -> Result<Transaction, SessionError> {
        self.clear_the_way().await;
        let one_request = self.route_request();
        let mut broken = 0;
        let mut lease = loop {
            let mut lease = match self.mode {
                PoolMode::Session => self.checkout().await?,
                PoolMode::Transaction => match self.take_server().await? {
                    Taken::Lease(server) => server,
                    Taken::ClientLeft => return Ok(Transaction::SessionOver), // it left while waiting behind another client
                    Taken::Cancelled => return self.answer_cancelled().await,
                },
            };
            if self.startup_applied || !self.buffers.to_server.is_empty() || !self.exchange.is_quiet() {
                break lease;
            }
            // Boxed: a server query's future is large, and this runs once per client.
            match Box::pin(self.apply_startup_settings(&mut lease)).await {
                Ok(spelled) => {
                    self.learn_spellings(&spelled);
                    break lease;
                }
                // Nothing of the client's reached that connection: another is tried.
                Err(None) if broken + 1 < startup::STARTUP_ATTEMPTS => broken += 1,
                Err(refused) => return Err(self.startup_settings_failed(lease, refused).await),
            }
        };
        if !self.owed_notices.is_empty() {
            let notices = std::mem::take(&mut self.owed_notices);
            self.client.write_all(&notices).await?;
        }
        // Cancelled while the connection came: the request was sent to no
        // server, and never will be. (A cancel that comes once the relay
        // runs is sent to the server as soon as the request is written.)
        if self.entry.queued.get() && self.request_unsent() && self.entry.take_cancel() {
            self.give_back(lease).await;
            return self.answer_cancelled().await;
        }
        let release_when_idle = self.mode == PoolMode::Transaction;
        let pipelining = self.may_pipeline();
        // A request sent behind another client's started running when
        // that one's ended, about when the connection came.
        let busy_since = (!self.exchange.is_quiet()).then(crate::rt::stamp);
        let waker_id = self.waker_id();
        let server = &mut *lease;
        {
            let session = &mut server.session.borrow_mut();
            let foreign = std::mem::replace(&mut session.last_client, self.serial) != self.serial;
            if self.buffers.to_server.is_empty() && self.exchange.is_quiet() {
                self.exchange.align_settings(&self.settings, &mut session.settings, false, &mut self.buffers.to_server);
                self.exchange.sequences_may_be_foreign(foreign, &mut self.buffers.to_server);
            }
        }
        // (Not borrowed in the struct below: that would last the relay.)
        let unsent = self.entry.server.borrow().is_none();
        self.exchange.follows_unlistens = self.notifications.as_ref().is_some_and(|n| n.subscription.is_some());
        // Statements the exchange closes that it does not know may be kept
        // ones (set for every transaction: a flag left on would note them
        // with nobody to take them).
        self.exchange.notes_foreign_closes = self.notifications.as_ref().is_some_and(|n| !n.kept.is_empty());
        let mut holding = self.holds_read();
        let mut end = Relay {
            intake: if one_request {
                Intake::one_request(self.config.relay_buffer_size)
            } else {
                Intake::new(self.config.relay_buffer_size)
            },
            client: &mut self.client,
            server: &mut server.stream,
            buffers: &mut self.buffers,
            exchange: &mut self.exchange,
            sources: exchange::Sources {
                registry: &self.pool.registry,
                client: &mut self.statements,
                client_settings: &mut self.settings,
                server: &server.session,
                server_output: &server.output,
                negotiate_rows_up_to: (self.config.binary_negotiation && self.mode == PoolMode::Transaction)
                    .then_some(self.config.max_message_size),
            },
            release_when_idle,
            shutdown: &self.shard.shutdown,
            entry: &self.entry,
            waker_id,
            waker_left: &mut self.waker_left,
            saw_ready: false,
            busy_since,
            limits: Limits {
                query: Config::optional_secs(self.config.query_timeout),
                idle_in_transaction: Config::optional_secs(self.config.idle_transaction_timeout),
            },
            deadline: None,
            pipelining: pipelining.then_some(&self.pool),
            offer: &mut self.offer,
            posted: None,
            followable: false,
            skip_ready: &mut self.skip_ready,
            server_said_fatal: false,
            server_write_failed: None,
            notifications: &mut self.notifications,
            hub: (self.mode == PoolMode::Transaction).then_some(notifications::HubDoor {
                hub: &self.shard.notify_hub,
                database: &self.entry.info.database,
                user: &self.entry.info.user,
                pool: &self.pool,
                limit: self.config.notify_client_buffer,
            }),
            unsent: unsent.then_some(relay::Unsent {
                entry: &self.entry,
                key: &server.cancel_key,
                timeout: Config::secs(self.config.server_connect_timeout),
            }),
            holding: &mut holding,
        }
        .await;
        self.entry.unqueue();
        self.entry.answered();
        let mut offer = self.offer.take();
        self.flush_counters();
        self.forget_ended_subscription();
        if holding {
            // Boxed: only a read held on a standby comes this way.
            match Box::pin(self.after_held_read(end, lease, offer)).await {
                routing::Held::Go(held_end, held_lease, held_offer) => (end, lease, offer) = (held_end, held_lease, held_offer),
                routing::Held::Retry => return Ok(Transaction::Over),
                routing::Held::ClientGone => return Ok(Transaction::SessionOver),
            }
        }
        match end {
            RelayEnd::Released => {
                *self.entry.server.borrow_mut() = None;
                if let Some(route) = self.route.as_mut() {
                    // The clock itself: see `Router::primary_position_after`.
                    route.transaction_ended(std::time::Instant::now());
                }
                self.pass_on(lease, offer, false).await;
                Ok(Transaction::Over)
            }
            RelayEnd::ClientLeft => {
                self.pass_on(lease, offer, true).await;
                Ok(Transaction::SessionOver)
            }
            RelayEnd::Shutdown => {
                self.give_back(lease).await;
                Err(shutting_down())
            }
            RelayEnd::ServerClosed => {
                Err(SessionError::Refused(ErrorFields::fatal("08006", "server closed the connection unexpectedly")))
            }
            RelayEnd::ServerError(e) => Err(SessionError::Server(ServerError::Write(e))),
            RelayEnd::ServerEnded => {
                // The server's FATAL is the client's last message, as on PostgreSQL.
                let _ = self.client.write_all(&self.buffers.to_client).await;
                self.buffers.to_client.clear();
                Err(SessionError::ServerEnded)
            }
            RelayEnd::ClientError(e) => {
                self.pass_to_follower(lease, offer).await;
                Err(SessionError::ClientProtocol(e))
            }
            RelayEnd::Killed => {
                self.pass_to_follower(lease, offer).await;
                Err(killed())
            }
            RelayEnd::NotificationsOverflow(overflow) => {
                self.pass_to_follower(lease, offer).await;
                Err(SessionError::NotificationsOverflow(overflow))
            }
            RelayEnd::TimedOut(deadline) => {
                // A running query is cancelled and its connection closed; an
                // idle transaction is rolled back and its connection kept.
                self.give_back(lease).await;
                let (code, message) = match deadline {
                    Deadline::Query => ("57014", "canceling statement due to query_timeout; closing the connection"),
                    Deadline::IdleInTransaction => ("25P03", "terminating connection due to idle_transaction_timeout"),
                };
                Err(SessionError::Refused(ErrorFields::fatal(code, message)))
            }
        }
    }

    /// Ends the session (see [`Session::end`]) and counts the client out.
    async fn finish(&mut self, ended: Result<(), SessionError>) {
        Box::pin(self.end(ended)).await;
        crate::memory::let_go_of_a_buffer(self.buffers.from_client.buffer_len());
        self.shard.client_gone();
    }

    /// The session is over, as `ended` says: logged, the client told why if
    /// it can still be told, and the client forgotten by the shard.
    async fn end(&mut self, ended: Result<(), SessionError>) {
        let peer = self.entry.info.peer;
        let age = self.entry.connected_at.elapsed().unwrap_or_default();
        let (user, database) = (Escaped(&self.entry.info.user), Escaped(&self.entry.info.database));
        // log_disconnections, as PgBouncer's: a line per client that leaves, with why.
        let log = self.config.log_disconnections;
        match ended {
            Ok(()) if log => info!(?peer, %user, %database, ?age, "client closed the connection"),
            Ok(()) => {}
            Err(e) => {
                if log {
                    info!(?peer, %user, %database, ?age, "client session ended: {}", Escaped(&e.to_string()));
                }
                if let Some(fields) = e.client_message() {
                    if self.buffers.from_server.at_boundary()
                        && self.buffers.to_client.is_empty()
                        && self.notifications.as_ref().is_none_or(|n| n.unsent.is_empty())
                    {
                        if let SessionError::NotificationsOverflow(_) = e {
                            // A client that reads nothing may not read this either.
                            with_timeout(CLEANUP_TIMEOUT, send_error(&mut self.client, &fields)).await;
                        } else {
                            send_error(&mut self.client, &fields).await;
                        }
                    }
                }
            }
        }
        self.flush_counters();
        self.shard.shutdown.forget(self.waker_id());
        self.shard.unregister_client(self.process_id);
    }

    /// Server pipelining applies to this client now (see `pool::Opening`).
    fn may_pipeline(&self) -> bool {
        self.exchange.pipelining() && self.startup_applied
    }

    /// If the client's request begins with a statement that needs a
    /// database free of other sessions (DROP DATABASE, see `sole_access`),
    /// pglane's idle connections to it close on every shard and every peer
    /// instance first, as they would fail it where a direct connection's
    /// would not.
    async fn clear_the_way(&self) {
        let pending = self.buffers.from_client.pending();
        let Ok(Some(header)) = parse_header(pending, self.config.max_message_size) else { return };
        let Some(body) = pending.get(HEADER_LEN..HEADER_LEN + header.body_len) else { return };
        if let Some(dbname) = sole_access::database_needed_alone(header.tag, body) {
            self.shard.close_idle_connections_to(&dbname, true);
            self.shard.ask_peers_to_close_idle(&dbname).await;
        }
    }

    /// A server connection for the client's next request: one of its own,
    /// or, with server pipelining, one another client holds, behind whose
    /// request this client's goes. `None` if the client left meanwhile.
    async fn take_server(&mut self) -> Result<Taken, SessionError> {
        let may_follow = self.may_pipeline();
        match self.checkout_or_follow(may_follow).await? {
            None => Ok(Taken::Cancelled),
            Some(Checkout::Lease(lease)) => Ok(Taken::Lease(lease)),
            Some(Checkout::Behind(opening)) if self.request_unsent() && self.entry.take_cancel() => {
                // Cancelled as the place came: nothing was written behind.
                opening.follower_left();
                self.park_server_side();
                self.entry.set_state(ClientState::Idle);
                Ok(Taken::Cancelled)
            }
            Some(Checkout::Behind(opening)) => match self.follow(&opening).await? {
                Some(lease) => Ok(Taken::Lease(lease)),
                None => Ok(Taken::ClientLeft),
            },
        }
    }

    /// Nothing of the client's request has gone anywhere yet: it can be
    /// answered here (see `answer_cancelled`).
    fn request_unsent(&self) -> bool {
        self.buffers.to_server.is_empty() && self.exchange.is_quiet() && self.buffers.from_client.at_boundary()
    }

    /// A cancel request came for the client's request while it waited in
    /// pglane: it is answered as PostgreSQL answers a cancelled query, the
    /// request unsent. A simple query (or function call) gets ErrorResponse
    /// 57014 and ReadyForQuery; an extended-protocol request gets the error,
    /// then what follows up to its Sync is skipped (as PostgreSQL skips what
    /// follows an error) and the Sync answered with ReadyForQuery. Messages
    /// after that stay for the next request.
    async fn answer_cancelled(&mut self) -> Result<Transaction, SessionError> {
        use crate::protocol::frontend;
        use inbox::Piece;
        self.entry.unqueue();
        self.entry.set_state(ClientState::Idle);
        let mut out = BytesMut::new();
        backend::error_response(&mut out, &ErrorFields::error("57014", "canceling statement due to user request"));
        self.client.write_all(&out).await.map_err(SessionError::ClientIo)?;
        out.clear();
        let (inbox, client) = (&mut self.buffers.from_client, &mut self.client);
        // (It holds a buffer: the request is in it.)
        // The first message decides: a simple query is one message, an
        // extended one runs to its Sync.
        let mut simple = None;
        loop {
            let done = match inbox.next(exchange::client_needs_whole).map_err(SessionError::ClientProtocol)? {
                Some(Piece::Whole(tag, _)) => {
                    let simple = *simple.get_or_insert(matches!(tag, frontend::QUERY | frontend::FUNCTION_CALL));
                    if tag == frontend::TERMINATE {
                        return Ok(Transaction::SessionOver);
                    }
                    simple || tag == frontend::SYNC
                }
                Some(Piece::Start(..) | Piece::More(_)) => {
                    simple.get_or_insert(false);
                    false
                }
                None => {
                    if inbox.eof {
                        return Ok(Transaction::SessionOver);
                    }
                    std::future::poll_fn(|cx| inbox.poll_fill(cx, client)).await.map_err(SessionError::ClientIo)?;
                    false
                }
            };
            if done {
                break;
            }
        }
        backend::ready_for_query(&mut out, self.exchange.tracker.status());
        self.client.write_all(&out).await.map_err(SessionError::ClientIo)?;
        self.client.flush().await.map_err(SessionError::ClientIo)?;
        Ok(Transaction::Over)
    }

    /// Sends the client's request behind the holder's (see `follow`) and
    /// takes the connection when the holder is done with it.
    async fn follow(&mut self, opening: &Opening) -> Result<Option<Lease>, SessionError> {
        if self.buffers.to_server.is_empty() && self.exchange.is_quiet() {
            let session = &mut opening.session.borrow_mut();
            self.exchange.align_settings(&self.settings, &mut session.settings, false, &mut self.buffers.to_server);
            opening.write(&self.buffers.to_server);
            self.buffers.to_server.clear();
        }
        self.entry.following.set(true);
        let end = follow::Follow {
            intake: Intake::new(self.config.relay_buffer_size),
            client: &mut self.client,
            buffers: &mut self.buffers,
            exchange: &mut self.exchange,
            sources: exchange::Sources {
                registry: &self.pool.registry,
                client: &mut self.statements,
                client_settings: &mut self.settings,
                server: &opening.session,
                server_output: &opening.output,
                negotiate_rows_up_to: self.config.binary_negotiation.then_some(self.config.max_message_size),
            },
            opening,
            killed: &self.entry.killed,
            taken: false,
            pool: &self.pool,
            offer: &mut self.offer,
            posted: None,
        }
        .await;
        self.entry.following.set(false);
        let cancel_held = self.entry.cancel_held.take();
        self.flush_counters();
        match end {
            follow::FollowEnd::HandedOver(Handover { lease, unread, stream_left, unsent, skip_ready }) => {
                // Its whole messages are on the server, with no other client's
                // behind them (an offer that stayed with this client has one).
                let alone_on_server = unsent.is_empty() && self.buffers.from_client.at_boundary() && self.offer.is_none();
                self.buffers.to_server.extend_from_slice(&unsent);
                self.buffers.from_server.take_over(&unread, stream_left);
                self.skip_ready = skip_ready;
                if let Some(behind) = self.offer.as_ref() {
                    behind.holder_started();
                }
                *self.entry.server.borrow_mut() = Some(lease.cancel_key.clone());
                self.entry.handed_over(alone_on_server);
                if cancel_held {
                    // The holder's request is answered: what runs now is this client's.
                    self.cancel_held_request(&lease.cancel_key);
                }
                self.lease_started = crate::rt::stamp();
                Ok(Some(lease))
            }
            follow::FollowEnd::Lost => Err(SessionError::Refused(ErrorFields::fatal(
                "08006",
                "server connection lost while this request waited behind another client's",
            ))),
            follow::FollowEnd::ClientLeft => Ok(None),
            follow::FollowEnd::ClientError(e) => Err(SessionError::ClientProtocol(e)),
            follow::FollowEnd::Killed => Err(killed()),
        }
    }

    /// The relay is over with `server` (the client's requests answered, or
    /// the client gone if `holder_left`): it goes to the follower, if one
    /// was let behind, else back the usual way. A follower whose client
    /// left after it wrote makes the connection's state unknown: closed.
    async fn pass_on(&mut self, server: Lease, offer: Option<Offer>, holder_left: bool) {
        let Some(offer) = offer else { return self.give_back(server).await };
        if offer.holder_done() {
            self.exchange.ran_slowly();
            debug!(
                "a request with another behind it ran longer than {:?}: its statements are not followed again",
                crate::pool::opening::SLOW
            );
        }
        if offer.is_abandoned() {
            if offer.follower_wrote() {
                debug!("closing a server connection: the client behind left after it wrote");
                self.end_transaction();
                self.close_mid_conversation(server);
                self.park_server_side();
            } else {
                self.give_back(server).await;
            }
            return;
        }
        let b = &mut self.buffers;
        // What this client still owed the one ahead of it, and its own.
        let skip_ready = if holder_left { self.skip_ready + self.exchange.ready_due() } else { 0 };
        self.skip_ready = 0;
        let unread = BytesMut::from(b.from_server.pending());
        let stream_left = b.from_server.stream_left();
        let unsent = BytesMut::from(&b.to_server[..]);
        self.end_transaction();
        self.exchange.reset();
        offer.hand_over(Handover { lease: server, unread, stream_left, unsent, skip_ready });
        self.park_server_side();
    }

    /// The client is going with its server connection mid-conversation: if
    /// a follower waits behind it, the connection goes to the follower (see
    /// `pass_on`); else it is closed, by dropping it.
    async fn pass_to_follower(&mut self, server: Lease, offer: Option<Offer>) {
        if let Some(offer) = offer {
            self.pass_on(server, Some(offer), true).await;
        }
    }

    /// Moves the relay's byte and query counters into the pool's stats.
    fn flush_counters(&mut self) {
        self.entry.prepared_statements.set(u32::try_from(self.statements.len()).unwrap_or(u32::MAX));
        let c = std::mem::take(&mut self.buffers.counters);
        self.serving_pool().count(|s| {
            s.bytes_received += c.bytes_to_server;
            s.bytes_sent += c.bytes_to_client;
            s.bytes_from_server += c.bytes_from_server;
            s.query_count += c.queries;
            s.query_time_us += c.query_time_us;
        });
    }

    fn waker_id(&self) -> u64 {
        u64::from(self.process_id as u32)
    }

    /// Borrows a server connection (waiting while the database is paused),
    /// all within query_wait_timeout.
    async fn checkout(&mut self) -> Result<Lease, SessionError> {
        match self.checkout_or_follow(false).await? {
            Some(Checkout::Lease(lease)) => Ok(lease),
            Some(Checkout::Behind(_)) => unreachable!("a place behind another request for a client that may not follow"),
            None => unreachable!("a cancelled wait in session mode, where no request is queued"),
        }
    }

    /// `checkout`, or a place behind another client's request if `may_follow`.
    /// `None` if a cancel request came for the client's request meanwhile
    /// (only for a request waiting in pglane, `ClientEntry::queued`): it
    /// waits no more, and the client is idle again.
    async fn checkout_or_follow(&mut self, may_follow: bool) -> Result<Option<Checkout>, SessionError> {
        let wait = Config::secs(self.config.query_wait_timeout);
        self.entry.set_state(ClientState::Waiting);
        let started = crate::rt::stamp();
        let mut left = wait;
        // The waits only some transactions have are boxed: inline, they
        // would make every transaction's future larger than the
        // allocator's small sizes (1 KiB), and its allocation the slow one.
        if self.shard.is_paused(&self.entry.info.database) {
            let unpaused = with_timeout(wait, self.shard.wait_unpaused(&self.entry.info.database));
            match Box::pin(until_cancelled(&self.entry, unpaused)).await {
                None => return Ok(None),
                Some(None) => return Err(SessionError::Pool(PoolError::WaitTimeout)),
                Some(Some(_)) => {}
            }
            left = wait.saturating_sub(crate::rt::stamp().saturating_since(started));
        }
        // A read routed to a standby: that host's pool first (see `routing`).
        let read = match self.routed.is_some() {
            true => Box::pin(self.checkout_read(left)).await,
            false => Some(None),
        };
        let Some(read) = read else { return Ok(None) };
        let got = match read {
            Some(got) => got,
            None => {
                let mut checkout = std::pin::pin!(until_cancelled(&self.entry, self.pool.checkout_or_follow(left, may_follow)));
                // query_wait_notify: a client still waiting after it is told so
                // once, as PgBouncer tells it. The timer is set only for a checkout
                // that did not end at its first poll, which most do.
                let checked_out = match Config::optional_secs(self.config.query_wait_notify).filter(|notify| *notify < left) {
                    Some(notify) => match futures_lite::future::poll_once(checkout.as_mut()).await {
                        Some(done) => done,
                        None => match with_timeout(notify, checkout.as_mut()).await {
                            Some(done) => done,
                            None => {
                                // Only between whole messages to the client: with
                                // replies still on their way to it, the notice is left out.
                                if self.buffers.to_client.is_empty() {
                                    let mut notice = BytesMut::new();
                                    let text = "No server connection available in postgres backend, client being queued";
                                    backend::notice_response(&mut notice, &ErrorFields::notice(text));
                                    self.client.write_all(&notice).await?;
                                }
                                checkout.await
                            }
                        },
                    },
                    None => checkout.await,
                };
                let Some(got) = checked_out else {
                    self.entry.set_state(ClientState::Idle);
                    return Ok(None);
                };
                got?
            }
        };
        let lent = self.buffers.attach_server_side(self.shard.take_buffers());
        self.exchange.attach(lent);
        let now = crate::rt::stamp();
        self.pool.count(|s| s.wait_time_us += now.micros_since(started));
        // Behind another client's request, a cancel would reach that one's
        // query: the key is the client's only once the connection is. In
        // transaction mode, only once its request is written to it (see
        // `ClientEntry::queued`), which the relay says.
        if let Checkout::Lease(lease) = &got {
            if !self.entry.queued.get() {
                *self.entry.server.borrow_mut() = Some(lease.cancel_key.clone());
            }
        }
        self.entry.set_state(ClientState::Active);
        self.lease_started = now;
        Ok(Some(got))
    }

    /// The buffers and exchange state lent for a server connection go back
    /// to the shard (see `relay::ServerSide`).
    fn park_server_side(&mut self) {
        let lent = self.exchange.park();
        self.shard.return_buffers(self.buffers.park_server_side(lent));
    }

    /// The client no longer holds a server connection: counted, and shown so.
    fn end_transaction(&mut self) {
        *self.entry.server.borrow_mut() = None;
        self.entry.set_state(ClientState::Idle);
        let held = crate::rt::stamp().micros_since(self.lease_started);
        let statements = self.exchange.take_statement_counts();
        self.serving_pool().count(|s| {
            s.xact_count += 1;
            s.xact_time_us += held;
            s.statements.add(&statements);
        });
    }

    /// Sends the cancel request held while the request waited behind
    /// another client's, now that the request runs; once more if need be
    /// (see `runtime::cancel_again_while_behind`).
    fn cancel_held_request(&self, key: &Rc<crate::server::CancelKey>) {
        let timeout = Config::secs(self.config.server_connect_timeout);
        if !self.entry.cancel_sent(key) {
            return spawn_cancel(key, timeout, async |_| {});
        }
        let (entry, again, shard, id) = (self.entry.clone(), key.clone(), self.shard.clone(), self.waker_id());
        spawn_cancel(key, timeout, async move |sent| {
            let wake = move || shard.shutdown.wake(id);
            crate::runtime::cancel_again_while_behind(entry, again, sent, timeout, wake).await;
        });
    }

    /// Closes a server connection whose conversation was left halfway.
    fn close_mid_conversation(&mut self, server: Lease) {
        self.buffers.from_server.clear();
        self.buffers.to_server.clear();
        // A backend busy with an abandoned query would run it to the end
        // before noticing its socket closed: cancel it first.
        spawn_cancel(&server.cancel_key, Config::secs(self.config.server_connect_timeout), async |_| {});
        drop(server); // closes it
    }
}

fn killed() -> SessionError {
    SessionError::Refused(ErrorFields::fatal("57P01", "terminating connection due to administrator command (KILL)"))
}

fn shutting_down() -> SessionError {
    SessionError::Refused(ErrorFields::fatal("57P01", "terminating connection because pglane is shutting down"))
}

#[cfg(test)]
mod tests {
    /// A client's task, its session inline, is allocated in mimalloc's
    /// 1,536-byte class with no room left (1,536 bytes asked, measured
    /// with a counting allocator: the session, the idle wait's future or
    /// the session's answer, whichever is larger, and the task's header).
    /// 8 bytes more and it is in the 1,792-byte class: 256 bytes more RSS
    /// per idle client. Before, 48 bytes more in every client's exchange
    /// (fc84c54) moved it from 1,792 to the next class, and a second crowd
    /// of 10,000 no longer fit the first one's pages (tests/load.rs
    /// `ten_thousand_idle_clients`). State only some transactions need is
    /// lent with the server side (`exchange::InFlight`) instead; a field
    /// that must grow the session moves this bound, measured.
    #[test]
    fn a_session_stays_the_size_idle_clients_were_measured_at() {
        let size = std::mem::size_of::<super::Session>();
        assert!(size <= 1344, "Session is {size} bytes");
    }
}
