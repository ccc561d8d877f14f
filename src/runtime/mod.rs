//! Shards: one executor (`crate::rt`) pinned to each core, each with its own
//! SO_REUSEPORT listener, pools and client registry.
//!
//! This module owns the threads, the listeners, the shard-local registries and
//! the messages shards send each other (cancel requests, admin questions,
//! shutdown). A shard's state is `Rc`/`RefCell`, touched only by its own
//! thread; what shards share is read-mostly ([`Shared`]: the config behind
//! arc-swap) or a count (each shard's clients, read at accept time). Nothing
//! here is on the per-query path except the lookups a session does once per
//! login.

mod cancel;
pub use cancel::cancel_again_while_behind;
mod clients;
mod control;
pub mod keys;
pub mod listeners;
mod notify;
mod nudge;
mod peers;
mod routing;
mod shared;
mod shutdown;
pub mod snapshot;

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tracing::{debug, error, info, warn};

use crate::auth::secret::ScramSecret;
use crate::client;
use crate::config::Config;
use crate::net::Stream;
use crate::pool::{Budget, BudgetNews, BudgetOf, Pool};
use crate::prepare::Registry;
use crate::rt;
use crate::rt::net::Socket;
use crate::server::{ServerHost, ServerTarget};

pub use clients::{next_connection_id, ClientEntry, ClientInfo, ClientState};
use listeners::{adopt_unix_listener, bind_listener, ensure_port_free, Listener, UnixSocket};
pub use peers::{Answer, Control, Question, ShardMessage};
pub use shared::{ConfigSource, CountedClient, Shared};
pub use shutdown::ShutdownSignal;

/// Statements a pool's registry keeps before it drops those no client uses.
const REGISTRY_CAPACITY: usize = 10_000;

/// Server-side relay buffer sets a shard keeps for reuse (each ≈ 40 KB).
const SPARE_BUFFERS: usize = 256;

/// Client inbox buffers a shard keeps for reuse (each 4 KiB): about as many
/// as clients speak at once.
const SPARE_INBOXES: usize = 64;

/// The nice value of a shard's blocking thread: when the shard's own thread
/// and a long computation compete for the core, the shard gets most of it.
const BLOCKING_NICE: libc::c_int = 10;

/// Runs `f` on the shard's blocking thread and waits for it without
/// stalling the shard's other tasks: for CPU-heavy work of a miss path
/// (pg_query parses a new query shape), never for the query path, since each
/// call crosses threads (to the shard's blocking thread, pinned to the
/// shard's core, see `rt::blocking`). The thread runs at a lower
/// priority ([`BLOCKING_NICE`]). `None` if `f` panicked.
pub async fn off_shard<F, R>(f: F) -> Option<R>
where
    F: FnOnce() -> R + Send + 'static,
    R: Send + 'static,
{
    rt::spawn_blocking(move || {
        lower_priority_once();
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).ok()
    })
    .await
}

/// Lowers the calling thread's priority to [`BLOCKING_NICE`], once per thread.
fn lower_priority_once() {
    thread_local! {
        static LOWERED: Cell<bool> = const { Cell::new(false) };
    }
    if !LOWERED.with(|lowered| lowered.replace(true)) {
        // SAFETY: plain syscalls on the calling thread. On Linux a thread id
        // as PRIO_PROCESS's `who` changes that thread only; an unprivileged
        // thread may raise its own nice value. Failing leaves it as it was.
        unsafe {
            let tid = libc::gettid();
            libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, BLOCKING_NICE);
        }
    }
}

/// The state one core owns.
pub struct Shard {
    /// This shard's index, also encoded in the cancel keys it hands out.
    pub id: usize,
    /// Itself, for the hooks its pools call back with.
    me: std::rc::Weak<Shard>,
    pub shards: usize,
    /// How this instance's cancel keys name their shard (and instance).
    keys: keys::KeyPlan,
    pub shared: Arc<Shared>,
    /// Fired once the shard no longer accepts connections: sessions end
    /// (see `client`).
    pub shutdown: ShutdownSignal,
    /// Fired when pglane begins to shut down: the listeners stop.
    stop_accepting: ShutdownSignal,
    pools: RefCell<HashMap<(String, String), Rc<Pool>>>,
    clients: RefCell<HashMap<i32, Rc<ClientEntry>>>,
    next_client: Cell<u32>,
    peers: peers::Peers,
    gatherings: RefCell<HashMap<u64, Rc<peers::Gathering>>>,
    next_request: Cell<u64>,
    /// PAUSE / RESUME state and the clients waiting on it.
    pause: control::PauseState,
    /// The config generation this shard last applied.
    applied_generation: Cell<u64>,
    /// SCRAM secrets derived from plaintext passwords in the config, by
    /// (user, password, scram_iterations), so the key derivation runs once
    /// per password, not once per login.
    scram_secrets: RefCell<HashMap<(String, String, u32), ScramSecret>>,
    /// Server-side relay buffers of clients that hold no server connection
    /// right now, ready for the next checkout.
    spare_buffers: RefCell<Vec<client::ServerSide>>,
    /// The pools of databases the `*` entry serves (see
    /// [`Shard::drop_unused_fallback_pools`]).
    fallback_pools: RefCell<std::collections::HashSet<(String, String)>>,
    /// The read routers of pools whose database has read_routing (see
    /// `crate::router`), with their pools of reads per host, and the
    /// verdicts on statement texts all of them share.
    routers: RefCell<HashMap<(String, String), Rc<crate::router::Router>>>,
    classifier: Rc<crate::router::Classifier>,
    /// Inbox buffers given up by clients that went quiet, for the next
    /// client that speaks.
    spare_inboxes: RefCell<Vec<Vec<u8>>>,
    /// How many more lines about failed logins each address may cause.
    pub login_log: RefCell<crate::logging::PerAddress>,
    /// Recent auth_query answers (see `client::auth_query`).
    pub auth_query_cache: crate::client::auth_query::SecretCache,
    /// How to log in to the server as an auth_query user, by (database,
    /// user): learned from that user's last successful client login.
    learned_logins: RefCell<HashMap<(String, String), crate::client::auth_query::ServerLogin>>,
    /// When the pools last checked their hosts (host_check_interval).
    hosts_checked: Cell<std::time::Instant>,
    /// Transaction-mode clients' LISTENs and their listening connections.
    pub notify_hub: crate::notify::Hub,
}

/// Why [`Shard::pool`] has no pool for a client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoPool {
    /// No `[databases]` entry serves the name.
    NotConfigured,
    /// Only the `*` entry would, and it serves `max` others already.
    FallbackFull { max: usize },
}

/// How many shards, and on which CPUs: one on each CPU of `cpus` (a list
/// like `2-5`, each of which must be one this process may run on), else
/// `cores` of them over the allowed CPUs in turn, else one per allowed CPU.
pub fn cpu_plan(cores: Option<usize>, cpus: Option<&str>) -> Result<Vec<usize>, String> {
    let online: Vec<usize> = core_affinity::get_core_ids()
        .map(|ids| ids.into_iter().map(|c| c.id).collect())
        .filter(|ids: &Vec<usize>| !ids.is_empty())
        .unwrap_or_else(|| vec![0]);
    if let Some(list) = cpus {
        let wanted = crate::config::parse_cpu_list(list).map_err(|e| format!("--cpus: {e}"))?;
        if let Some(cpu) = wanted.iter().find(|c| !online.contains(c)) {
            return Err(format!("--cpus: CPU {cpu} is not one pglane may run on (allowed: {online:?})"));
        }
        return Ok(wanted);
    }
    let n = cores.unwrap_or(online.len()).max(1);
    Ok((0..n).map(|i| online[i % online.len()]).collect())
}

/// Starts one shard per entry of `cpus` and blocks until all have stopped
/// (after `shared.shutting_down` is set). Returns an error if any shard could
/// not start (e.g. the listen address is taken).
pub fn run(shared: Arc<Shared>, cpus: &[usize]) -> Result<(), String> {
    if cpus.len() > keys::MAX_SHARDS {
        return Err(format!("{} shards asked for; pglane runs at most {}", cpus.len(), keys::MAX_SHARDS));
    }
    let key_plan = keys::KeyPlan::new(shared.config.load().peer_id, cpus.len());
    let unix_socket = {
        let config = shared.config.load();
        for address in config.listen.addresses() {
            ensure_port_free(address, config.so_reuseport)?;
        }
        if let Some(metrics) = &config.metrics_listen {
            ensure_port_free(metrics, config.so_reuseport)?;
        }
        match config.unix_socket_path() {
            Some(path) => Some(UnixSocket::bind(path, config.unix_socket_mode, config.so_reuseport)?),
            None => None,
        }
    };
    let mut nudge_readers = Vec::new();
    for _ in cpus {
        nudge_readers.push(shared.nudges.add().map_err(|e| format!("cannot create the shards' wake-up sockets: {e}"))?);
    }
    let (peers, inboxes) = peers::Peers::mesh(cpus.len());
    let (ready_tx, ready_rx) = std::sync::mpsc::channel::<Result<(), String>>();
    let mut handles = Vec::new();
    for (((id, &cpu), nudged), inbox) in cpus.iter().enumerate().zip(nudge_readers).zip(inboxes) {
        let shared = shared.clone();
        let peers = peers.clone();
        let unix = unix_socket.as_ref().map(|u| u.listener.try_clone());
        let shards = cpus.len();
        let ready = ready_tx.clone();
        let handle = rt::start_pinned(&format!("pglane-{id}"), Some(cpu), move || async move {
            let _guard = PanicGuard { shared: shared.clone(), shard: id };
            let (addresses, backlog, defer_accept) = {
                let config = shared.config.load();
                (config.listen.addresses().to_vec(), config.listen_backlog, config.tcp_defer_accept)
            };
            let bound = addresses.iter().map(|a| bind_listener(a, backlog, defer_accept).map_err(|e| (a, e)));
            let listeners = match bound.collect::<Result<Vec<_>, _>>() {
                Ok(l) => l,
                Err((addr, e)) => {
                    let _ = ready.send(Err(format!("cannot listen on {addr}: {e}")));
                    return;
                }
            };
            let unix = match unix.map(adopt_unix_listener).transpose() {
                Ok(u) => u,
                Err(e) => {
                    let _ = ready.send(Err(format!("shard {id}: cannot share the unix socket listener: {e}")));
                    return;
                }
            };
            let metrics = match shared
                .config
                .load()
                .metrics_listen
                .clone()
                .map(|a| bind_listener(&a, backlog, false).map_err(|e| (a, e)))
                .transpose()
            {
                Ok(m) => m,
                Err((a, e)) => {
                    let _ = ready.send(Err(format!("cannot listen for metrics on {a}: {e}")));
                    return;
                }
            };
            let shard = Rc::new_cyclic(|me| Shard {
                id,
                me: me.clone(),
                shards,
                keys: key_plan,
                shared,
                shutdown: ShutdownSignal::default(),
                stop_accepting: ShutdownSignal::default(),
                pools: RefCell::default(),
                clients: RefCell::default(),
                next_client: Cell::new(1),
                peers,
                gatherings: RefCell::default(),
                next_request: Cell::new(1),
                pause: control::PauseState::default(),
                applied_generation: Cell::new(0),
                scram_secrets: RefCell::default(),
                spare_buffers: RefCell::default(),
                spare_inboxes: RefCell::default(),
                login_log: RefCell::default(),
                auth_query_cache: Default::default(),
                learned_logins: RefCell::default(),
                hosts_checked: Cell::new(std::time::Instant::now()),
                fallback_pools: RefCell::default(),
                routers: RefCell::default(),
                classifier: Rc::default(),
                notify_hub: Default::default(),
            });
            peers::serve_peers(&shard, inbox);
            if let Some(metrics) = metrics {
                rt::spawn_local(shard.clone().accept_until_stopped(Listener::Tcp(metrics), admit_scraper)).detach();
            }
            // One shard writes the log_stats lines, for all of them.
            if id == 0 {
                rt::spawn_local(shard.clone().log_stats()).detach();
            }
            let _ = ready.send(Ok(()));
            shard.run(listeners, unix, nudged).await;
        })
        .map_err(|e| format!("cannot start shard {id} on cpu {cpu}: {e}"))?;
        handles.push(handle);
    }
    drop(ready_tx);
    let mut failure = None;
    for _ in 0..cpus.len() {
        match ready_rx.recv() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => failure = Some(e),
            Err(_) => failure = Some(why_a_shard_stopped_early(&mut handles)),
        }
        if failure.is_some() {
            break;
        }
    }
    if let Some(e) = failure {
        shared.begin_shutdown();
        return Err(e);
    }
    match &unix_socket {
        Some(u) => {
            info!(shards = cpus.len(), listen = %shared.config.load().listen, unix_socket = %u.path.display(), "pglane is ready")
        }
        None => info!(shards = cpus.len(), listen = %shared.config.load().listen, "pglane is ready"),
    }
    notify::ready(&format!("serving on {} with {} shards", shared.config.load().listen, cpus.len()));
    let mut panicked = Vec::new();
    for (id, h) in handles.into_iter().enumerate() {
        match h.join() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => error!(shard = id, "shard executor failed: {e}"),
            Err(_) => panicked.push(id.to_string()),
        }
    }
    match panicked.is_empty() {
        true => Ok(()),
        false => Err(format!("shard {} panicked (a bug: please report it with the log); pglane stopped", panicked.join(", "))),
    }
}

/// The error of a shard thread that ended before saying it was ready: its
/// executor could not start (no io_uring: an old kernel, or a sandbox that
/// forbids it), or it panicked.
fn why_a_shard_stopped_early(handles: &mut Vec<std::thread::JoinHandle<std::io::Result<()>>>) -> String {
    let Some(at) = handles.iter().position(|h| h.is_finished()) else {
        return "a shard stopped before it was ready".into();
    };
    match handles.remove(at).join() {
        Ok(Err(e)) => format!("a shard could not start its executor (io_uring): {e}"),
        _ => "a shard stopped before it was ready".into(),
    }
}

/// Lives on a shard's thread for as long as the shard runs. If the shard
/// panics (a bug), the guard is dropped while its thread unwinds and makes
/// the other shards drain and stop: a pglane with a dead shard would still
/// route cancel requests and admin commands to it that nobody answers. So
/// the process exits, non-zero, and restarting it is left to its supervisor
/// (systemd, Kubernetes), as with PgBouncer after a fatal error. The other
/// shards' clients get shutdown_timeout to finish their transactions.
struct PanicGuard {
    shared: Arc<Shared>,
    shard: usize,
}

impl Drop for PanicGuard {
    fn drop(&mut self) {
        if std::thread::panicking() {
            error!(shard = self.shard, "shard panicked; stopping pglane");
            self.shared.begin_shutdown();
        }
    }
}

impl Shard {
    async fn run(
        self: Rc<Self>,
        listeners: Vec<rt::net::Listener>,
        unix: Option<rt::net::Listener>,
        nudged: std::os::unix::net::UnixStream,
    ) {
        rt::spin_before_park(Duration::from_micros(self.shared.config.load().spin_before_park_us));
        let watcher = rt::spawn_local(self.clone().housekeeping(nudged));
        let accepting: Vec<_> = listeners
            .into_iter()
            .map(Listener::Tcp)
            .chain(unix.map(Listener::Unix))
            .map(|l| rt::spawn_local(self.clone().accept_until_stopped(l, Shard::admit)))
            .collect();
        for listener in accepting {
            listener.await;
        }
        info!(shard = self.id, "no longer accepting connections");
        // Only now are the sessions told: every client accepted so far has
        // its session, and ends it as `client` says a shutdown ends one.
        self.shutdown.fire();
        watcher.await;
        self.drain().await;
    }

    /// Accepts on `listener` until the shard stops accepting, handing each
    /// connection to `admit`. A failed accept (out of descriptors, say) is
    /// logged and retried a moment later; the listener closes when this
    /// returns. With so_reuseport, the port is handed over first (see
    /// `listeners`): new connection requests go to the other pglane, and
    /// those already queued here are still accepted.
    async fn accept_until_stopped(
        self: Rc<Self>,
        listener: Listener,
        admit: fn(&Rc<Shard>, OwnedFd, Option<std::net::SocketAddr>),
    ) {
        loop {
            let accepted = futures_lite::future::or(async { Some(self.accept_one(&listener, admit).await) }, async {
                self.stop_accepting.wait().await;
                None
            })
            .await;
            if accepted.is_none() {
                break;
            }
        }
        if !self.shared.config.load().so_reuseport {
            return;
        }
        if let Err(e) = listener.stop_taking_new() {
            warn!(
                shard = self.id,
                listener = listener.name(),
                "cannot hand the port over (clients queued on it may be reset): {e}"
            );
        }
        let linger = async {
            loop {
                self.accept_one(&listener, admit).await;
            }
        };
        rt::with_timeout(listeners::HAND_OVER_LINGER, linger).await;
    }

    async fn accept_one(self: &Rc<Self>, listener: &Listener, admit: fn(&Rc<Shard>, OwnedFd, Option<std::net::SocketAddr>)) {
        let tuning = self.shared.config.load().tcp_tuning();
        match listener.accept(&tuning).await {
            Ok((socket, peer)) => admit(self, socket, peer),
            Err(e) => {
                warn!(shard = self.id, listener = listener.name(), "accept failed: {e}");
                rt::sleep(Duration::from_millis(10)).await;
            }
        }
    }

    /// A new client: served here, or by the shard that serves fewest
    /// clients if that one serves fewer than this (see
    /// [`peers::Peers::place_client`]).
    fn admit(self: &Rc<Self>, socket: OwnedFd, peer: Option<std::net::SocketAddr>) {
        let shard = self.peers.place_client(self.id);
        if shard == self.id {
            return self.serve_client(socket, peer);
        }
        if let Err(ShardMessage::Adopt { socket, peer }) = self.peers.try_send_to(shard, ShardMessage::Adopt { socket, peer }) {
            // That shard's inbox is full or it has stopped: serve it here.
            self.peers.client_left(shard);
            self.peers.client_joined(self.id);
            self.serve_client(socket, peer);
        }
    }

    /// A client this shard served is gone: it no longer counts as its.
    pub(crate) fn client_gone(&self) {
        self.peers.client_left(self.id);
    }

    /// Client connections open, over all shards (for max_client_conn and
    /// the metrics), a handed-over one counted from the moment it was placed.
    pub fn client_count(&self) -> usize {
        self.peers.total_clients()
    }

    /// Serves a client, already counted as this shard's, with its own task
    /// until it leaves.
    fn serve_client(self: &Rc<Self>, socket: OwnedFd, peer: Option<std::net::SocketAddr>) {
        let stream = match Socket::from_fd(socket) {
            Ok(socket) => Stream::Plain(socket),
            Err(e) => {
                warn!(shard = self.id, "cannot serve an accepted connection: {e}");
                self.peers.client_left(self.id);
                return;
            }
        };
        // Spawned as it is: awaited inside another future, it would be
        // stored twice (the captured future and the one awaited).
        rt::spawn_local(client::serve(self, stream, peer)).detach();
    }

    /// After the listener closed: wait (bounded by shutdown_timeout) for clients
    /// to finish their transactions, then close idle server connections.
    async fn drain(&self) {
        let limit = Config::secs(self.shared.config.load().shutdown_timeout);
        let all_gone = async {
            while !self.clients.borrow().is_empty() {
                rt::sleep(Duration::from_millis(20)).await;
            }
        };
        if rt::with_timeout(limit, all_gone).await.is_none() {
            warn!(
                shard = self.id,
                clients = self.clients.borrow().len(),
                "shutdown_timeout passed; closing clients in transactions"
            );
        }
        for pool in self.pools.borrow().values() {
            pool.close_idle();
        }
        for pool in self.read_pools() {
            pool.close_idle();
        }
        let (p, statements) = self.prepare_totals();
        info!(
            shard = self.id,
            statements,
            client_parses = p.client_parses,
            server_parses = p.server_parses,
            parses_answered = p.parses_answered,
            describes_answered = p.describes_answered,
            evictions = p.evictions,
            "prepared statements"
        );
    }

    /// This shard's pool for (database, user), created on first use; for a
    /// database the `*` entry serves, within max_fallback_databases.
    pub fn pool(&self, config: &Config, database: &str, user: &str) -> Result<Rc<Pool>, NoPool> {
        let key = (database.to_owned(), user.to_owned());
        if let Some(pool) = self.pools.borrow().get(&key) {
            return Ok(pool.clone());
        }
        let (target, size) = self.pool_settings(config, database, user).ok_or(NoPool::NotConfigured)?;
        let fallback = config.is_fallback(database);
        if fallback && !self.has_pool_of(database) && !self.shared.claim_fallback(database, config.max_fallback_databases) {
            warn!(shard = self.id, %database, max = config.max_fallback_databases, "max_fallback_databases reached");
            return Err(NoPool::FallbackFull { max: config.max_fallback_databases });
        }
        // Statements are shared by the clients of one pool only: the same text
        // can mean something else in another database or to another user.
        let pool = Pool::new(target, size + config.reserve_pool_size(database), Registry::new(self.id, REGISTRY_CAPACITY));
        let me = self.me.clone();
        let news = move |news: BudgetNews, budgets: &Rc<[Arc<Budget>]>| {
            if let Some(shard) = me.upgrade() {
                shard.budget_news(news, budgets);
            }
        };
        pool.share_budgets(self.budgets_for(config, database, user), self.keep(size), Box::new(news));
        if fallback {
            self.fallback_pools.borrow_mut().insert(key.clone());
        }
        let (me, database, user) = (self.me.clone(), database.to_owned(), user.to_owned());
        pool.registry.set_ddl_hook(Box::new(move || {
            if let Some(shard) = me.upgrade() {
                shard.schema_changed(&database, Some(&user));
            }
        }));
        self.pools.borrow_mut().insert(key, pool.clone());
        Ok(pool)
    }

    /// The budgets a pool of (database, user) opens connections under, its
    /// own pool_size first, with the limits of `config` (see `pool::budget`).
    fn budgets_for(&self, config: &Config, database: &str, user: &str) -> Vec<Arc<Budget>> {
        let pool_size = config.pool_size(database);
        let pool = BudgetOf::Pool { database: database.to_owned(), user: user.to_owned() };
        let own = self.shared.budget(pool, pool_size);
        own.set_reserve(config.reserve_pool_size(database));
        vec![
            own,
            self.shared.budget(BudgetOf::Database(database.to_owned()), config.max_db_connections(database)),
            self.shared.budget(BudgetOf::User(user.to_owned()), config.max_user_connections(user)),
        ]
    }

    /// The connections of a pool_size this shard keeps when another wants one.
    fn keep(&self, pool_size: usize) -> usize {
        crate::pool::budget::share(pool_size, self.shards, self.id)
    }

    /// What a pool of this shard has to tell the pools under `budgets`: on
    /// this shard (from a task of its own, not inside the pool's call) and
    /// on the others.
    fn budget_news(&self, news: BudgetNews, budgets: &Rc<[Arc<Budget>]>) {
        match news {
            BudgetNews::Freed => {
                let budgets: Vec<Arc<Budget>> = budgets.to_vec();
                let me = self.me.clone();
                let here = budgets.clone();
                rt::spawn_local(async move {
                    if let Some(shard) = me.upgrade() {
                        shard.budget_freed(&here);
                    }
                })
                .detach();
                self.tell_other_shards(|| ShardMessage::BudgetFreed { budgets: budgets.clone() });
            }
            BudgetNews::Wanted { blocked } => {
                let Some(budget) = budgets.get(blocked).cloned() else { return };
                if blocked != 0 {
                    // Other users' or databases' pools on this shard too.
                    let (me, here) = (self.me.clone(), budget.clone());
                    rt::spawn_local(async move {
                        if let Some(shard) = me.upgrade() {
                            shard.budget_wanted(&here);
                        }
                    })
                    .detach();
                }
                self.tell_other_shards(|| ShardMessage::BudgetWanted { budget: budget.clone() });
            }
        }
    }

    /// Units of `budgets` came free: this shard's pools under any of them
    /// with clients waiting open connections for them.
    pub(super) fn budget_freed(&self, budgets: &[Arc<Budget>]) {
        for pool in self.pools().values() {
            if budgets.iter().any(|b| pool.is_under(b)) {
                pool.budget_freed();
            }
        }
    }

    /// A pool under `budget` (the same pool on another shard, or another
    /// user's or database's under a shared limit) wants a connection.
    pub(super) fn budget_wanted(&self, budget: &Arc<Budget>) {
        for pool in self.pools().values() {
            pool.yield_to_others(budget);
        }
    }

    fn has_pool_of(&self, database: &str) -> bool {
        self.pools.borrow().keys().any(|(name, _)| name == database)
    }

    /// Drops the pools of `*` databases that serve no one (no client holds
    /// them, no server connection is open), so that the names they count
    /// against max_fallback_databases come free: a name clients stopped using
    /// once its connections expired (server_idle_timeout), or one the server
    /// does not have.
    fn drop_unused_fallback_pools(&self) {
        let unused: Vec<(String, String)> = {
            let pools = self.pools.borrow();
            self.fallback_pools
                .borrow()
                .iter()
                .filter(|key| pools.get(*key).is_some_and(|pool| Rc::strong_count(pool) == 1 && pool.open_count() == 0))
                .cloned()
                .collect()
        };
        for key in unused {
            self.pools.borrow_mut().remove(&key);
            self.fallback_pools.borrow_mut().remove(&key);
            if !self.has_pool_of(&key.0) {
                self.shared.release_fallback(&key.0);
                debug!(shard = self.id, database = %key.0, "dropped the unused pools of a database of the * entry");
            }
        }
    }

    /// DDL ran in `database`: the statements and shapes of this shard's
    /// pools of it are resolved again, but for the pool of `seen_by` (the
    /// user whose pool saw it, and did so itself), and the other shards are
    /// told. Off the query path: DDL is rare.
    pub fn schema_changed(&self, database: &str, seen_by: Option<&str>) {
        for ((db, user), pool) in self.pools.borrow().iter() {
            if db == database && seen_by != Some(user.as_str()) {
                pool.registry.schema_changed();
            }
        }
        if seen_by.is_none() {
            return;
        }
        self.tell_other_shards(|| ShardMessage::SchemaChanged { database: database.to_owned() });
    }

    /// Sends each other shard the message `message` makes: at once where
    /// its inbox has room, else from a task of its own, so that the caller
    /// never waits for a busy shard.
    fn tell_other_shards(&self, message: impl Fn() -> ShardMessage) {
        for peer in (0..self.shards).filter(|&s| s != self.id) {
            if let Err(message) = self.peers.try_send_to(peer, message()) {
                let peers = self.peers.clone();
                rt::spawn_local(async move {
                    let _ = peers.send_to(peer, message).await;
                })
                .detach();
            }
        }
    }

    /// A client is about to run a statement that needs server database
    /// `dbname` free of other sessions (DROP DATABASE, see
    /// `client::sole_access`): the idle connections to it of this shard's
    /// pools close, and, if `tell_others`, the other shards' too (by
    /// message: the server waits a few seconds for sessions to leave).
    /// Pools of another server with a database of that name lose theirs
    /// too, which costs them a reconnect only. Other pglane instances are
    /// told by [`Shard::ask_peers_to_close_idle`].
    pub fn close_idle_connections_to(&self, dbname: &str, tell_others: bool) {
        let closed: usize =
            self.pools.borrow().values().filter(|pool| pool.serves_dbname(dbname)).map(|pool| pool.close_idle()).sum();
        if closed > 0 {
            info!(shard = self.id, dbname = %crate::logging::Escaped(dbname), closed, "closed idle server connections a client's DROP or ALTER DATABASE needs gone");
        }
        if tell_others {
            self.tell_other_shards(|| ShardMessage::CloseIdleTo { dbname: dbname.to_owned() });
        }
    }

    /// Asks every other instance of the group (`[peers]`, with `peer_id`) to
    /// close its idle server connections to `dbname`, as this one did its
    /// own ([`Shard::close_idle_connections_to`]), and returns once each
    /// has taken the request or `server_connect_timeout` has passed. A peer
    /// that does not take it (down, or a PgBouncer, which does not know the
    /// request) keeps its connections; that is logged, and the client's
    /// statement runs regardless, as it would have.
    pub async fn ask_peers_to_close_idle(&self, dbname: &str) {
        let config = self.shared.config.load();
        let timeout = Config::secs(config.server_connect_timeout);
        let asks: Vec<_> = config
            .other_peers()
            .map(|peer| {
                let (address, dbname, shard) = (peer.address(), dbname.to_owned(), self.id);
                rt::spawn_local(async move {
                    if let Err(e) = crate::server::send_peer_close_idle(&address, &dbname, timeout).await {
                        warn!(shard, peer = %address, "asking a peer to close its idle connections to a database a client needs alone failed: {e}");
                    }
                })
            })
            .collect();
        for ask in asks {
            ask.await;
        }
    }

    /// Remembers how to log in to the server as a user whose password
    /// pglane does not hold (an auth_query user, or one whose secret is a
    /// SCRAM verifier): what its client just proved. Points its pool, if
    /// open, at it.
    pub fn learn_login(&self, config: &Config, database: &str, user: &str, login: crate::client::auth_query::ServerLogin) {
        let key = (database.to_owned(), user.to_owned());
        if self.learned_logins.borrow().get(&key) == Some(&login) {
            return;
        }
        self.learned_logins.borrow_mut().insert(key.clone(), login);
        let pool = self.pools.borrow().get(&key).cloned();
        if let (Some(pool), Some((target, size))) = (pool, self.pool_settings(config, database, user)) {
            pool.reconfigure(target, size);
        }
    }

    /// How to log in to the server for (database, user), as the pool would:
    /// for a client's connection of its own (replication).
    pub fn server_target(&self, config: &Config, database: &str, user: &str) -> Option<ServerTarget> {
        self.pool_settings(config, database, user).map(|(target, _)| target)
    }

    /// The server and the pool size (over all shards) for (database, user) under `config`.
    fn pool_settings(&self, config: &Config, database: &str, user: &str) -> Option<(ServerTarget, usize)> {
        let db = config.database(database)?;
        let server_user = db.user.clone().unwrap_or_else(|| user.to_owned());
        let secret = match &db.password {
            Some(p) => Some(crate::auth::secret::Secret::Plain(p.clone())),
            None => config
                .users
                .get(&server_user)
                .and_then(|u| u.password.as_deref())
                .and_then(|p| crate::auth::secret::Secret::parse(p).ok()),
        };
        // A SCRAM verifier answers no server: what a client of this user
        // revealed at login does (see `learn_login`).
        let learned = match secret {
            None | Some(crate::auth::secret::Secret::Scram(_)) => {
                self.learned_logins.borrow().get(&(database.to_owned(), server_user.clone())).cloned()
            }
            Some(_) => None,
        };
        let (secret, scram_keys) = match learned {
            Some(login) => (login.secret, login.scram_keys),
            None => (secret, None),
        };
        let hosts = db
            .addresses()
            .into_iter()
            .map(|address| ServerHost { tls: crate::net::tls::server_tls(config, &address), address })
            .collect();
        let target = ServerTarget {
            hosts,
            target_session_attrs: db.target_session_attrs,
            load_balance_hosts: db.load_balance_hosts,
            retry_timeout: Config::secs(config.server_retry_timeout),
            dbname: db.dbname.clone().unwrap_or_else(|| database.to_owned()),
            user: server_user,
            secret,
            scram_keys,
            connect_timeout: Config::secs(config.server_connect_timeout),
            tcp: config.tcp_tuning(),
            max_prepared_statements: config.max_prepared_statements,
            scram_max_iterations: config.server_scram_max_iterations,
            learn_output_settings: config.binary_negotiation,
        };
        Some((target, config.pool_size(database)))
    }

    /// Turns what plain threads change process-wide (the shutdown flag, a new
    /// config) and the passing of time into this shard's own actions, each
    /// time it is nudged (see [`nudge`]): at once after a signal, and every
    /// [`nudge::TICK`] otherwise. Stops the shard's listeners when it is time.
    /// Every stats_period, while log_stats is on, PgBouncer's stats line:
    /// what all shards did in the period.
    async fn log_stats(self: Rc<Self>) {
        let mut before = crate::pool::PoolStats::default();
        loop {
            let period = Duration::from_secs(self.shared.config.load().stats_period.into());
            rt::sleep(period).await;
            let now = crate::admin::total_stats(&crate::admin::snapshots(&self).await);
            if self.shared.config.load().log_stats {
                info!("{}", crate::admin::stats_line(&now, &before, period));
            }
            before = now;
        }
    }

    async fn housekeeping(self: Rc<Self>, nudged: std::os::unix::net::UnixStream) {
        use futures_lite::AsyncReadExt;
        let mut nudged = match Socket::from_fd(nudged.into()) {
            Ok(socket) => Some(socket),
            Err(e) => {
                warn!(shard = self.id, "cannot watch the wake-up socket ({e}); polling instead");
                None
            }
        };
        let mut bytes = [0u8; 256];
        while !self.shared.is_shutting_down() {
            if self.shared.config_generation.load(Ordering::SeqCst) != self.applied_generation.get() {
                self.apply_config();
            }
            self.close_expired_servers();
            self.check_hosts_when_due();
            self.drop_unused_fallback_pools();
            crate::memory::give_back_if_let_go();
            let now = std::time::Instant::now();
            let config = self.shared.config.load();
            for ((database, _), pool) in self.pools().iter() {
                pool.expire_waiters(now);
                let reserve_after = (config.reserve_pool_size(database) > 0).then(|| Config::secs(config.reserve_pool_timeout));
                pool.tick(now, reserve_after);
            }
            for pool in self.read_pools() {
                pool.expire_waiters(now);
                pool.tick(now, None);
            }
            let tick = async {
                rt::sleep(nudge::TICK).await;
                true
            };
            let nudge = async {
                match nudged.as_mut() {
                    Some(socket) => matches!(socket.read(&mut bytes).await, Ok(n) if n > 0),
                    None => std::future::pending().await,
                }
            };
            if !futures_lite::future::or(tick, nudge).await {
                // The writers live as long as the process: this is not
                // expected, but the tick keeps the shard correct if it happens.
                warn!(shard = self.id, "lost the wake-up socket; shutdown and reloads wait for the next tick");
                nudged = None;
            }
        }
        self.stop_accepting.fire();
    }

    /// server_idle_timeout and server_lifetime, checked at each tick.
    fn close_expired_servers(&self) {
        let config = self.shared.config.load();
        let never = Duration::MAX;
        let idle = Config::optional_secs(config.server_idle_timeout).unwrap_or(never);
        let lifetime = Config::optional_secs(config.server_lifetime).unwrap_or(never);
        for ((database, user), pool) in self.pools().iter() {
            // min_pool_size, over all shards: kept by the shards where a
            // client holds the pool (a session keeps an Rc of it), or any
            // that has the pool of a database that forces a user.
            let forced = config.database(database).is_some_and(|db| db.user.is_some());
            let in_use = Rc::strong_count(pool) > 1 || forced;
            let keep_open = if in_use { config.min_pool_size(database) } else { 0 };
            let n = pool.close_expired(idle, lifetime, keep_open);
            pool.keep_open(keep_open);
            if n > 0 {
                let (database, user) = (crate::logging::Escaped(database), crate::logging::Escaped(user));
                tracing::debug!(shard = self.id, %database, %user, closed = n, "closed expired idle server connections");
            }
        }
        for pool in self.read_pools() {
            pool.close_expired(idle, lifetime, 0);
        }
    }

    /// Every host_check_interval: each pool asks its hosts, on idle
    /// connections, whether they still are what target_session_attrs asks
    /// for (see `pool::hosts`), each pool on a task of its own.
    fn check_hosts_when_due(&self) {
        let config = self.shared.config.load();
        let Some(every) = Config::optional_secs(config.host_check_interval) else { return };
        let now = std::time::Instant::now();
        if now.saturating_duration_since(self.hosts_checked.get()) < every {
            return;
        }
        self.hosts_checked.set(now);
        let timeout = Config::secs(config.server_connect_timeout);
        for pool in self.pools().values().filter(|pool| pool.checks_hosts()) {
            rt::spawn_local(pool.clone().check_hosts(timeout)).detach();
        }
    }

    /// The statement counters and statement count summed over this shard's pools.
    pub fn prepare_totals(&self) -> (crate::prepare::PrepareStats, usize) {
        let mut total = crate::prepare::PrepareStats::default();
        let mut statements = 0;
        for pool in self.pools().values() {
            total.add(&pool.registry.stats());
            statements += pool.registry.len();
        }
        (total, statements)
    }

    /// Relay buffers for a client that just borrowed a server connection.
    pub fn take_buffers(&self) -> client::ServerSide {
        self.spare_buffers.borrow_mut().pop().unwrap_or_default()
    }

    /// Relay buffers a client no longer needs, kept for the next one (up to
    /// [`SPARE_BUFFERS`]; there are rarely more clients in transactions).
    pub fn return_buffers(&self, side: client::ServerSide) {
        let mut spare = self.spare_buffers.borrow_mut();
        if spare.len() < SPARE_BUFFERS {
            spare.push(side);
        }
    }

    /// An inbox buffer for a client that has something to say (empty if
    /// none is spare: the inbox then makes its own).
    pub fn take_inbox_buffer(&self) -> Vec<u8> {
        self.spare_inboxes.borrow_mut().pop().unwrap_or_default()
    }

    /// The inbox buffer of a client that went quiet, kept for the next one
    /// (up to [`SPARE_INBOXES`]).
    pub fn return_inbox_buffer(&self, buf: Vec<u8>) {
        let mut spare = self.spare_inboxes.borrow_mut();
        if spare.len() < SPARE_INBOXES {
            spare.push(buf);
        }
    }

    /// The shard's clients, for snapshots and commands.
    pub(crate) fn clients(&self) -> std::cell::Ref<'_, HashMap<i32, Rc<ClientEntry>>> {
        self.clients.borrow()
    }

    pub(crate) fn pools(&self) -> std::cell::Ref<'_, HashMap<(String, String), Rc<Pool>>> {
        self.pools.borrow()
    }

    /// The SCRAM secret pglane checks a plaintext-password user's logins with
    /// (salted like a mock one, see `auth::mock`), derived with `iterations`.
    pub fn scram_secret(&self, user: &str, password: &str, iterations: u32) -> ScramSecret {
        self.scram_secrets
            .borrow_mut()
            .entry((user.to_owned(), password.to_owned(), iterations))
            .or_insert_with(|| crate::auth::mock::scram_secret_for_password(user, password, iterations))
            .clone()
    }

    /// Registers a client for cancel requests and the admin console; returns
    /// its BackendKeyData process id, which names the shard (and, peered,
    /// the instance: see `keys`), or None if every process id the shard may
    /// hand out is taken (only with peering: 2^14 per instance).
    pub fn register_client(&self, info: ClientInfo) -> Option<(i32, Rc<ClientEntry>)> {
        let secret_key = self.keys.secret(rand::random());
        let mut clients = self.clients.borrow_mut();
        let per_shard = self.keys.per_shard();
        let process_id = (0..per_shard).find_map(|_| {
            let n = self.next_client.get();
            self.next_client.set((n + 1) % per_shard);
            let pid = self.keys.process_id(self.id, n);
            (!clients.contains_key(&pid)).then_some(pid)
        })?;
        let entry = Rc::new(ClientEntry::new(info, secret_key));
        clients.insert(process_id, entry.clone());
        Some((process_id, entry))
    }

    pub fn unregister_client(&self, process_id: i32) {
        self.clients.borrow_mut().remove(&process_id);
    }
}

/// A scraper on `metrics_listen`: answered by its own task.
fn admit_scraper(shard: &Rc<Shard>, socket: OwnedFd, _peer: Option<std::net::SocketAddr>) {
    let stream = match Socket::from_fd(socket) {
        Ok(socket) => Stream::Plain(socket),
        Err(e) => return warn!(shard = shard.id, "cannot serve an accepted metrics connection: {e}"),
    };
    let shard = shard.clone();
    rt::spawn_local(async move { crate::admin::metrics::serve(&shard, stream).await }).detach();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panicking_shard_stops_the_others() {
        let config = || Config::parse("listen = \"127.0.0.1:6432\"\n[databases.app]\nport = 5432").expect("config");
        let shared = Arc::new(Shared::new(config(), ConfigSource::default()));
        let on_shard = shared.clone();
        let died = std::thread::spawn(move || {
            let _guard = PanicGuard { shared: on_shard, shard: 1 };
            panic!("a bug");
        })
        .join();
        assert!(died.is_err());
        assert!(shared.is_shutting_down(), "a shard's panic must begin the shutdown");

        let calm = Arc::new(Shared::new(config(), ConfigSource::default()));
        drop(PanicGuard { shared: calm.clone(), shard: 0 });
        assert!(!calm.is_shutting_down(), "a shard that stops normally changes nothing");
    }

    #[test]
    fn off_shard_work_runs_on_another_thread_while_the_shard_goes_on() {
        use std::sync::atomic::AtomicBool;
        use std::time::Instant;
        let cpu = cpu_plan(None, None).unwrap()[0];
        let shard = rt::start_pinned("off-shard-test", Some(cpu), || async move {
            let shard_thread = std::thread::current().id();
            let started = Arc::new(AtomicBool::new(false));
            let gate = Arc::new(AtomicBool::new(false));
            let (s, g) = (started.clone(), gate.clone());
            // The work waits for the shard to open a gate, which the
            // shard can only do if it is not the one running the work.
            let work = rt::spawn_local(off_shard(move || {
                s.store(true, Ordering::Release);
                let deadline = Instant::now() + Duration::from_secs(60);
                while !g.load(Ordering::Acquire) && Instant::now() < deadline {
                    std::thread::sleep(Duration::from_millis(1));
                }
                (std::thread::current().id(), g.load(Ordering::Acquire))
            }));
            while !started.load(Ordering::Acquire) {
                rt::sleep(Duration::from_millis(1)).await;
            }
            gate.store(true, Ordering::Release);
            let (thread, opened) = work.await.expect("no panic");
            assert_ne!(thread, shard_thread, "off the shard thread");
            assert!(opened, "the shard ran on while the work was pending");
            // A panic comes back as None, and the thread serves the next call.
            assert_eq!(off_shard(|| -> u32 { panic!("a test panic") }).await, None);
            assert_eq!(off_shard(|| 7).await, Some(7));
        })
        .unwrap();
        shard.join().unwrap().unwrap();
    }

    #[test]
    fn cpu_plans() {
        let online = cpu_plan(None, None).unwrap();
        assert!(!online.is_empty());
        assert_eq!(cpu_plan(Some(3), None).unwrap().len(), 3);
        assert_eq!(cpu_plan(None, Some(&online[0].to_string())).unwrap(), vec![online[0]]);
        assert!(cpu_plan(None, Some("4096")).unwrap_err().contains("not one pglane may run on"));
        assert!(cpu_plan(None, Some("x")).is_err());
    }
}
