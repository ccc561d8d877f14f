//! A shard's state as plain data that can cross threads: what the admin
//! console and the metrics endpoint read. Built on request, never kept.

use std::time::{Duration, SystemTime};

use super::{ClientInfo, ClientState, Shard};
use crate::config::PoolMode;
use crate::pool::{IdleServer, PoolStats};
use crate::prepare::PrepareStats;

#[derive(Debug, Clone, Default)]
pub struct ShardSnapshot {
    pub shard: usize,
    pub pools: Vec<PoolSnapshot>,
    pub clients: Vec<ClientSnapshot>,
    pub servers: Vec<ServerSnapshot>,
    pub prepare: PrepareStats,
    pub statements: usize,
    /// Databases DISABLEd on this shard.
    pub disabled: Vec<String>,
    /// PAUSE without a database name is in force on this shard.
    pub paused_all: bool,
    /// The notification hub's clients, channels and counters.
    pub notify: crate::notify::HubSnapshot,
    /// The read routers (see `crate::router`).
    pub routing: Vec<RoutingSnapshot>,
}

/// One read router: its hosts as its monitor last saw them, and its counters.
#[derive(Debug, Clone)]
pub struct RoutingSnapshot {
    pub database: String,
    pub user: String,
    pub hosts: Vec<RoutedHost>,
    pub stats: crate::router::RouterStats,
}

/// One host of a read router.
#[derive(Debug, Clone)]
pub struct RoutedHost {
    pub address: String,
    pub view: crate::router::HostView,
    /// Bytes behind the newest primary position seen, for a standby.
    pub lag: Option<u64>,
    /// Transactions its pool of reads served.
    pub reads: u64,
}

#[derive(Debug, Clone)]
pub struct PoolSnapshot {
    pub database: String,
    pub user: String,
    pub mode: PoolMode,
    pub max_size: usize,
    pub open: usize,
    pub idle: usize,
    pub active_clients: usize,
    pub waiting_clients: usize,
    /// How long the longest-waiting client has waited.
    pub max_wait: Duration,
    pub paused: bool,
    pub stats: PoolStats,
}

#[derive(Debug, Clone)]
pub struct ClientSnapshot {
    pub process_id: i32,
    pub info: ClientInfo,
    pub state: ClientState,
    pub connected_at: SystemTime,
    /// Time in the current state.
    pub state_for: Duration,
    pub server_pid: Option<i32>,
    /// See `runtime::next_connection_id`.
    pub id: u64,
    pub prepared_statements: u32,
}

#[derive(Debug, Clone)]
pub struct ServerSnapshot {
    pub database: String,
    pub user: String,
    pub active: bool,
    pub address: String,
    pub remote_pid: i32,
    pub connected_at: SystemTime,
    /// The client holding it.
    pub client_pid: Option<i32>,
    pub tls: Option<String>,
    pub local_addr: Option<std::net::SocketAddr>,
    /// Its application_name: its client's, or its last client's when idle.
    pub application_name: Option<String>,
    /// See `runtime::next_connection_id`.
    pub id: u64,
    /// Statements prepared on it (None: its session was being changed).
    pub prepared_statements: Option<usize>,
}

impl Shard {
    pub fn snapshot(&self) -> ShardSnapshot {
        let config = self.shared.config.load();
        let clients: Vec<ClientSnapshot> = self
            .clients()
            .iter()
            .map(|(&pid, c)| ClientSnapshot {
                process_id: pid,
                info: c.info.clone(),
                state: c.state(),
                connected_at: c.connected_at,
                state_for: c.state_since().elapsed(),
                server_pid: c.server.borrow().as_ref().map(|k| k.process_id),
                id: c.id,
                prepared_statements: c.prepared_statements.get(),
            })
            .collect();
        let mut servers: Vec<ServerSnapshot> = self
            .clients()
            .iter()
            .filter_map(|(&pid, c)| {
                let key = c.server.borrow().clone()?;
                Some(ServerSnapshot {
                    database: c.info.database.clone(),
                    user: c.info.user.clone(),
                    active: true,
                    address: key.address.to_string(),
                    remote_pid: key.process_id,
                    connected_at: key.connected_at,
                    client_pid: Some(pid),
                    tls: key.tls.clone(),
                    local_addr: key.local_addr,
                    application_name: Some(c.info.application_name.to_string()),
                    id: key.id,
                    prepared_statements: key.session.upgrade().and_then(|s| s.try_borrow().ok().map(|s| s.statements.len())),
                })
            })
            .collect();
        let mut pools = Vec::new();
        for ((database, user), pool) in self.pools().iter() {
            let mine = |c: &&ClientSnapshot| &c.info.database == database && &c.info.user == user;
            let waiting: Vec<&ClientSnapshot> = clients.iter().filter(mine).filter(|c| c.state == ClientState::Waiting).collect();
            servers.extend(pool.idle_servers().into_iter().map(
                |IdleServer { remote_pid, address, local_addr, connected_at, tls, application_name, id, prepared_statements }| {
                    ServerSnapshot {
                        database: database.clone(),
                        user: user.clone(),
                        active: false,
                        address,
                        remote_pid,
                        connected_at,
                        client_pid: None,
                        tls,
                        local_addr,
                        application_name,
                        id,
                        prepared_statements: Some(prepared_statements),
                    }
                },
            ));
            pools.push(PoolSnapshot {
                database: database.clone(),
                user: user.clone(),
                mode: config.pool_mode_for(database, user),
                max_size: pool.max_size(),
                open: pool.open_count(),
                idle: pool.idle_count(),
                active_clients: clients.iter().filter(mine).count() - waiting.len(),
                waiting_clients: waiting.len(),
                max_wait: waiting.iter().map(|c| c.state_for).max().unwrap_or_default(),
                paused: self.is_paused(database),
                stats: pool.stats(),
            });
        }
        let (prepare, statements) = self.prepare_totals();
        ShardSnapshot {
            shard: self.id,
            pools,
            clients,
            servers,
            prepare,
            statements,
            disabled: self.disabled_databases(),
            paused_all: self.is_paused_all(),
            notify: self.notify_hub.snapshot(),
            routing: self.routing_snapshot(),
        }
    }

    fn routing_snapshot(&self) -> Vec<RoutingSnapshot> {
        self.routers()
            .into_iter()
            .map(|((database, user), router)| {
                let view = router.view();
                let lags = crate::router::lags(&view);
                let hosts = router
                    .pools()
                    .iter()
                    .zip(view)
                    .zip(lags)
                    .map(|((pool, view), lag)| RoutedHost {
                        address: pool.target().hosts.first().map(|h| h.address.to_string()).unwrap_or_default(),
                        view,
                        lag,
                        reads: pool.stats().xact_count,
                    })
                    .collect();
                RoutingSnapshot { database, user, hosts, stats: router.stats() }
            })
            .collect()
    }
}
