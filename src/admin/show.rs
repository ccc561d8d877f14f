//! The SHOW tables, as pure functions of the shards' snapshots and the
//! config, with PgBouncer's column names and types, in its order, so
//! existing dashboards and exporters read them. Checked against PgBouncer
//! 1.18 (Debian 12's, in CI) and 1.24.1 (built from Debian's source: no
//! 1.25 is packaged) by tests/pgbouncer_parity.rs; where the two differ,
//! both columns are given (1.18's `reserve_pool` after 1.24's
//! `reserve_pool_size`).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::show_config::{load_balance_hosts_name, pool_mode_name};
use crate::config::Config;
use crate::pool::PoolStats;
use crate::runtime::snapshot::ShardSnapshot;

pub const TEXT: u32 = 25;
pub const INT4: u32 = 23;
pub const INT8: u32 = 20;
pub const NUMERIC: u32 = 1700;

/// A result set: column names with type OIDs, and rows of text values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Table {
    pub columns: Vec<(&'static str, u32)>,
    pub rows: Vec<Vec<Option<String>>>,
}

impl Table {
    pub(super) fn new(columns: &[(&'static str, u32)]) -> Table {
        Table { columns: columns.to_vec(), rows: Vec::new() }
    }

    pub(super) fn push(&mut self, row: Vec<Option<String>>) {
        debug_assert_eq!(row.len(), self.columns.len());
        self.rows.push(row);
    }
}

fn s(v: impl ToString) -> Option<String> {
    Some(v.to_string())
}

/// `2026-11-29 23:01:02 UTC`, PgBouncer's timestamp format.
pub fn format_time(t: SystemTime) -> String {
    let secs = t.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs() as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Howard Hinnant's days-to-civil.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02} UTC", rem / 3600, rem % 3600 / 60, rem % 60)
}

/// Pools merged over shards, keyed by (database, user), in name order.
fn pools(snapshots: &[ShardSnapshot]) -> Vec<crate::runtime::snapshot::PoolSnapshot> {
    let mut merged: std::collections::BTreeMap<(String, String), crate::runtime::snapshot::PoolSnapshot> = Default::default();
    for p in snapshots.iter().flat_map(|s| &s.pools) {
        merged
            .entry((p.database.clone(), p.user.clone()))
            .and_modify(|m| {
                // Every shard reports the whole pool_size.
                m.max_size = m.max_size.max(p.max_size);
                m.open += p.open;
                m.idle += p.idle;
                m.active_clients += p.active_clients;
                m.waiting_clients += p.waiting_clients;
                m.max_wait = m.max_wait.max(p.max_wait);
                m.paused |= p.paused;
                m.stats.add(&p.stats);
            })
            .or_insert_with(|| p.clone());
    }
    merged.into_values().collect()
}

/// A database's `load_balance_hosts`, as PgBouncer shows it: NULL for a
/// database of one host.
fn load_balance_hosts_of(config: &Config, database: &str) -> Option<String> {
    let db = config.database(database)?;
    (db.host.len() > 1).then(|| load_balance_hosts_name(db.load_balance_hosts).to_owned())
}

pub fn pools_table(snapshots: &[ShardSnapshot], config: &Config) -> Table {
    let mut t = Table::new(&[
        ("database", TEXT),
        ("user", TEXT),
        ("cl_active", INT4),
        ("cl_waiting", INT4),
        ("cl_active_cancel_req", INT4),
        ("cl_waiting_cancel_req", INT4),
        ("sv_active", INT4),
        ("sv_active_cancel", INT4),
        ("sv_being_canceled", INT4),
        ("sv_idle", INT4),
        ("sv_used", INT4),
        ("sv_tested", INT4),
        ("sv_login", INT4),
        ("maxwait", INT4),
        ("maxwait_us", INT4),
        ("pool_mode", TEXT),
        ("load_balance_hosts", TEXT),
    ]);
    for p in pools(snapshots) {
        let active_servers = snapshots
            .iter()
            .flat_map(|s| &s.servers)
            .filter(|v| v.active && v.database == p.database && v.user == p.user)
            .count();
        let login = p.open.saturating_sub(p.idle + active_servers);
        t.push(vec![
            s(&p.database),
            s(&p.user),
            s(p.active_clients),
            s(p.waiting_clients),
            s(0),
            s(0),
            s(active_servers),
            s(0),
            s(0),
            s(p.idle),
            s(0),
            s(0),
            s(login),
            s(p.max_wait.as_secs()),
            s(p.max_wait.subsec_micros()),
            s(pool_mode_name(p.mode)),
            load_balance_hosts_of(config, &p.database),
        ]);
    }
    t
}

/// Totals per database over all users and shards.
fn stats_by_database(snapshots: &[ShardSnapshot]) -> Vec<(String, PoolStats)> {
    let mut by_db: std::collections::BTreeMap<String, PoolStats> = Default::default();
    for p in snapshots.iter().flat_map(|s| &s.pools) {
        by_db.entry(p.database.clone()).or_default().add(&p.stats);
    }
    by_db.into_iter().collect()
}

/// The figures SHOW STATS, STATS_TOTALS, STATS_AVERAGES and TOTALS give
/// for a database, in PgBouncer's (1.23 to 1.25) order, each with its name in
/// SHOW STATS_TOTALS. pglane's server_assignment_count is its checkouts.
const PER_DATABASE_FIGURES: [&str; 11] = [
    "server_assignment_count",
    "xact_count",
    "query_count",
    "bytes_received",
    "bytes_sent",
    "xact_time",
    "query_time",
    "wait_time",
    "client_parse_count",
    "server_parse_count",
    "bind_count",
];

/// A database's [`PER_DATABASE_FIGURES`] as totals.
fn totals(st: &PoolStats) -> [u64; 11] {
    [
        st.checkouts,
        st.xact_count,
        st.query_count,
        st.bytes_received,
        st.bytes_sent,
        st.xact_time_us,
        st.query_time_us,
        st.wait_time_us,
        st.statements.client_parses,
        st.statements.server_parses,
        st.statements.binds,
    ]
}

/// A database's [`PER_DATABASE_FIGURES`] as averages, over pglane's uptime
/// (PgBouncer uses its last stats_period): counts and bytes per second,
/// µs per transaction and per query, and µs waited per server assignment.
fn averages(st: &PoolStats, uptime: Duration) -> [u64; 11] {
    let secs = uptime.as_secs().max(1);
    let per = |v: u64, n: u64| v.checked_div(n).unwrap_or(0);
    [
        st.checkouts / secs,
        st.xact_count / secs,
        st.query_count / secs,
        st.bytes_received / secs,
        st.bytes_sent / secs,
        per(st.xact_time_us, st.xact_count),
        per(st.query_time_us, st.query_count),
        per(st.wait_time_us, st.checkouts),
        st.statements.client_parses / secs,
        st.statements.server_parses / secs,
        st.statements.binds / secs,
    ]
}

/// SHOW STATS: per database, every figure's total then its average, named as
/// PgBouncer names them here.
pub fn stats_table(snapshots: &[ShardSnapshot], uptime: Duration) -> Table {
    const NAMES: [&str; 22] = [
        "total_server_assignment_count",
        "total_xact_count",
        "total_query_count",
        "total_received",
        "total_sent",
        "total_xact_time",
        "total_query_time",
        "total_wait_time",
        "total_client_parse_count",
        "total_server_parse_count",
        "total_bind_count",
        "avg_server_assignment_count",
        "avg_xact_count",
        "avg_query_count",
        "avg_recv",
        "avg_sent",
        "avg_xact_time",
        "avg_query_time",
        "avg_wait_time",
        "avg_client_parse_count",
        "avg_server_parse_count",
        "avg_bind_count",
    ];
    let mut t = Table::new(&figure_columns(&NAMES));
    for (db, st) in stats_by_database(snapshots) {
        t.push(figure_row(db, totals(&st).into_iter().chain(averages(&st, uptime))));
    }
    t
}

/// SHOW STATS_AVERAGES: SHOW STATS's averages under SHOW STATS_TOTALS'
/// names, but for PgBouncer's `avg_` on the statement counts.
pub fn stats_averages_table(snapshots: &[ShardSnapshot], uptime: Duration) -> Table {
    let mut names = PER_DATABASE_FIGURES;
    names[8..].copy_from_slice(&["avg_client_parse_count", "avg_server_parse_count", "avg_bind_count"]);
    let mut t = Table::new(&figure_columns(&names));
    for (db, st) in stats_by_database(snapshots) {
        t.push(figure_row(db, averages(&st, uptime).into_iter()));
    }
    t
}

/// SHOW STATS_TOTALS: the totals, then pglane's own columns.
pub fn stats_totals_table(snapshots: &[ShardSnapshot]) -> Table {
    let mut columns = figure_columns(&PER_DATABASE_FIGURES);
    columns.extend([("server_bytes_received", NUMERIC), ("pipelined", NUMERIC)]);
    let mut t = Table::new(&columns);
    for (db, st) in stats_by_database(snapshots) {
        t.push(figure_row(db, totals(&st).into_iter().chain([st.bytes_from_server, st.pipelined])));
    }
    t
}

/// SHOW TOTALS: every database together, as name/value rows, named as
/// PgBouncer names its counters. As in PgBouncer, client bytes are those
/// received from clients and server bytes those received from servers.
pub fn totals_table(snapshots: &[ShardSnapshot], uptime: Duration) -> Table {
    let mut t = Table::new(&[("name", TEXT), ("value", INT8)]);
    let mut all = PoolStats::default();
    stats_by_database(snapshots).iter().for_each(|(_, st)| all.add(st));
    let all = PoolStats { bytes_sent: all.bytes_from_server, ..all };
    let names = PER_DATABASE_FIGURES.map(|name| match name {
        "bytes_received" => "client_bytes",
        "bytes_sent" => "server_bytes",
        "client_parse_count" => "ps_client_parse_count",
        "server_parse_count" => "ps_server_parse_count",
        "bind_count" => "ps_bind_count",
        _ => name,
    });
    let rows = names.iter().map(|n| format!("total_{n}")).zip(totals(&all));
    let averages = names.iter().map(|n| format!("avg_{n}")).zip(averages(&all, uptime));
    for (name, value) in rows.chain(averages) {
        t.push(vec![s(name), s(value)]);
    }
    t
}

/// A database column, then one NUMERIC column per name.
fn figure_columns(names: &[&'static str]) -> Vec<(&'static str, u32)> {
    std::iter::once(("database", TEXT)).chain(names.iter().map(|&n| (n, NUMERIC))).collect()
}

/// A database's row of figures.
fn figure_row(db: String, figures: impl Iterator<Item = u64>) -> Vec<Option<String>> {
    std::iter::once(s(db)).chain(figures.map(s)).collect()
}

const CONNECTION_COLUMNS: [(&str, u32); 21] = [
    ("type", TEXT),
    ("user", TEXT),
    ("database", TEXT),
    ("replication", TEXT),
    ("state", TEXT),
    ("addr", TEXT),
    ("port", INT4),
    ("local_addr", TEXT),
    ("local_port", INT4),
    ("connect_time", TEXT),
    ("request_time", TEXT),
    ("wait", INT4),
    ("wait_us", INT4),
    ("close_needed", INT4),
    ("ptr", TEXT),
    ("link", TEXT),
    ("remote_pid", INT4),
    ("tls", TEXT),
    ("application_name", TEXT),
    ("prepared_statements", INT4),
    ("id", INT8),
];

/// Where SHOW CLIENTS' state and link are in [`CONNECTION_COLUMNS`].
const STATE_COLUMN: usize = 4;
const LINK_COLUMN: usize = 15;

pub fn clients_table(snapshots: &[ShardSnapshot], listen: &str) -> Table {
    let mut t = Table::new(&CONNECTION_COLUMNS);
    let (local_addr, local_port) = split_addr(listen);
    let now = SystemTime::now();
    for c in snapshots.iter().flat_map(|s| &s.clients) {
        let waiting = c.state == crate::runtime::ClientState::Waiting;
        let wait = if waiting { c.state_for } else { Duration::ZERO };
        // PgBouncer's spellings: a logged-in client is `active` whether or
        // not it holds a server (`link` says), and one on the unix socket
        // is at `unix`, the port it listens on.
        let state = if waiting { "waiting" } else { "active" };
        let (addr, port) = match c.info.peer {
            Some(_) => (c.info.addr(), c.info.port()),
            None => ("unix".to_owned(), local_port),
        };
        t.push(vec![
            s("C"),
            s(&c.info.user),
            s(&c.info.database),
            s(c.info.replication_str()),
            s(state),
            s(addr),
            s(port),
            s(if c.info.peer.is_some() { local_addr.as_str() } else { "unix" }),
            s(local_port),
            s(format_time(c.connected_at)),
            s(format_time(now - c.state_for)),
            s(wait.as_secs()),
            s(wait.subsec_micros()),
            s(0),
            s(format!("c{:x}", c.process_id)),
            c.server_pid.map(|p| format!("s{p:x}")),
            s(c.info.remote_pid),
            s(c.info.tls.as_deref().unwrap_or("")),
            s(&c.info.application_name),
            s(c.prepared_statements),
            s(c.id),
        ]);
    }
    t
}

pub fn servers_table(snapshots: &[ShardSnapshot]) -> Table {
    let mut t = Table::new(&CONNECTION_COLUMNS);
    for v in snapshots.iter().flat_map(|s| &s.servers) {
        let (addr, port) = split_addr(&v.address);
        t.push(vec![
            s("S"),
            s(&v.user),
            s(&v.database),
            s("none"),
            s(if v.active { "active" } else { "idle" }),
            s(addr),
            s(port),
            v.local_addr.map(|a| a.ip().to_string()),
            s(v.local_addr.map_or(0, |a| a.port())),
            s(format_time(v.connected_at)),
            s(format_time(v.connected_at)),
            s(0),
            s(0),
            s(0),
            s(format!("s{:x}", v.remote_pid)),
            v.client_pid.map(|p| format!("c{p:x}")),
            s(v.remote_pid),
            s(v.tls.as_deref().unwrap_or("")),
            s(v.application_name.as_deref().unwrap_or("")),
            v.prepared_statements.map(|n| n.to_string()),
            s(v.id),
        ]);
    }
    t
}

/// PgBouncer's buffer columns of SHOW SOCKETS. pglane's relay buffers are
/// not positions in one socket buffer, so they are NULL.
const BUFFER_COLUMNS: [(&str, u32); 7] = [
    ("recv_pos", INT4),
    ("pkt_pos", INT4),
    ("pkt_remain", INT4),
    ("send_pos", INT4),
    ("send_remain", INT4),
    ("pkt_avail", INT4),
    ("send_avail", INT4),
];

/// SHOW SOCKETS (every client and server connection) or ACTIVE_SOCKETS
/// (those with a request in flight: clients holding or waiting for a
/// server connection, and the servers they hold), with SHOW CLIENTS'
/// columns, states named as PgBouncer's lists (`cl_active`, `sv_idle`).
pub fn sockets_table(snapshots: &[ShardSnapshot], listen: &str, active_only: bool) -> Table {
    let mut columns = CONNECTION_COLUMNS.to_vec();
    columns.extend(BUFFER_COLUMNS);
    let mut t = Table::new(&columns);
    let (clients, servers) = (clients_table(snapshots, listen), servers_table(snapshots));
    let in_flight = |row: &[Option<String>]| match row[STATE_COLUMN].as_deref() {
        Some("waiting") => true,
        Some("active") => row[0].as_deref() == Some("S") || row[LINK_COLUMN].is_some(),
        _ => false,
    };
    for mut row in clients.rows.into_iter().chain(servers.rows) {
        if active_only && !in_flight(&row) {
            continue;
        }
        let prefix = if row[0].as_deref() == Some("C") { "cl_" } else { "sv_" };
        row[STATE_COLUMN] = row[STATE_COLUMN].take().map(|state| format!("{prefix}{state}"));
        row.extend([None, None, None, None, None, None, None]);
        t.push(row);
    }
    t
}

fn split_addr(addr: &str) -> (String, u16) {
    match addr.rsplit_once(':') {
        Some((host, port)) => (host.trim_matches(['[', ']']).to_owned(), port.parse().unwrap_or(0)),
        None => (addr.to_owned(), 0),
    }
}

pub fn databases_table(snapshots: &[ShardSnapshot], config: &Config) -> Table {
    let mut t = Table::new(&[
        ("name", TEXT),
        ("host", TEXT),
        ("port", INT4),
        ("database", TEXT),
        ("force_user", TEXT),
        ("pool_size", INT4),
        ("min_pool_size", INT4),
        ("reserve_pool_size", INT4),
        // PgBouncer 1.18's name for it, which pgbouncer_exporter reads.
        ("reserve_pool", INT4),
        ("server_lifetime", INT4),
        ("pool_mode", TEXT),
        ("load_balance_hosts", TEXT),
        ("max_connections", INT4),
        ("current_connections", INT4),
        ("max_client_connections", INT4),
        ("current_client_connections", INT4),
        ("paused", INT4),
        ("disabled", INT4),
    ]);
    let all = pools(snapshots);
    // The names the `*` entry serves now are databases of their own, as
    // PgBouncer lists the ones it made from its `*`; the `*` entry itself is
    // no database, and PgBouncer never lists it.
    let served: std::collections::BTreeSet<&String> =
        all.iter().map(|p| &p.database).filter(|name| config.is_fallback(name)).collect();
    let entries = config
        .databases
        .iter()
        .filter(|(name, _)| name.as_str() != crate::config::FALLBACK_DATABASE)
        .chain(served.into_iter().filter_map(|name| config.database(name).map(|db| (name, db))));
    for (name, db) in entries {
        let mine = all.iter().filter(|p| &p.database == name);
        let current: usize = mine.clone().map(|p| p.open).sum();
        let paused = mine.clone().any(|p| p.paused);
        let disabled = snapshots.iter().any(|s| s.disabled.contains(name));
        let clients = snapshots.iter().flat_map(|s| &s.clients).filter(|c| !c.info.admin && &c.info.database == name).count();
        t.push(vec![
            s(name),
            // PgBouncer's columns: the host list, and one port; hosts on
            // ports of their own are listed as host:port.
            s(match db.port.len() {
                1 => db.host.join(","),
                _ => db.host.iter().zip(&db.port).map(|(h, p)| format!("{h}:{p}")).collect::<Vec<_>>().join(","),
            }),
            s(db.port[0]),
            s(db.dbname.as_deref().unwrap_or(name)),
            db.user.clone(),
            s(config.pool_size(name)),
            s(config.min_pool_size(name)),
            s(config.reserve_pool_size(name)),
            s(config.reserve_pool_size(name)),
            // pglane has only the global server_lifetime (whole seconds).
            s(config.server_lifetime as i64),
            db.pool_mode.map(pool_mode_name).map(str::to_owned),
            load_balance_hosts_of(config, name),
            s(config.max_db_connections(name)),
            s(current),
            s(config.max_db_client_connections(name)),
            s(clients),
            s(i32::from(paused)),
            s(i32::from(disabled)),
        ]);
    }
    t
}

/// The users SHOW USERS lists: those the config names, and those logged in
/// through auth_query that have a pool (PgBouncer 1.24 lists them too), by
/// name.
fn user_names(snapshots: &[ShardSnapshot], config: &Config) -> std::collections::BTreeSet<String> {
    let pooled = snapshots.iter().flat_map(|s| &s.pools).map(|p| &p.user);
    config.users.keys().chain(pooled).cloned().collect()
}

/// SHOW USERS, PgBouncer 1.24's columns. pglane has no pool_size or
/// reserve_pool_size per user: those are empty, as PgBouncer leaves a
/// user's that is not set.
pub fn users_table(snapshots: &[ShardSnapshot], config: &Config) -> Table {
    let mut t = Table::new(&[
        ("name", TEXT),
        ("pool_size", TEXT),
        ("reserve_pool_size", TEXT),
        ("pool_mode", TEXT),
        ("max_user_connections", INT4),
        ("current_connections", INT4),
        ("max_user_client_connections", INT4),
        ("current_client_connections", INT4),
    ]);
    let all = pools(snapshots);
    for name in user_names(snapshots, config) {
        let servers: usize = all.iter().filter(|p| p.user == name).map(|p| p.open).sum();
        let clients = snapshots.iter().flat_map(|s| &s.clients).filter(|c| c.info.user == name).count();
        let user = config.users.get(&name);
        t.push(vec![
            s(&name),
            s(""),
            s(""),
            user.and_then(|u| u.pool_mode).map(pool_mode_name).map(str::to_owned),
            s(config.max_user_connections(&name)),
            s(servers),
            s(config.max_user_client_connections(&name)),
            s(clients),
        ]);
    }
    t
}

pub fn version_table() -> Table {
    let mut t = Table::new(&[("version", TEXT)]);
    t.push(vec![s(format!("pglane {}", env!("CARGO_PKG_VERSION")))]);
    t
}

pub fn lists_table(snapshots: &[ShardSnapshot], config: &Config) -> Table {
    let mut t = Table::new(&[("list", TEXT), ("items", INT4)]);
    let clients = snapshots.iter().map(|s| s.clients.len()).sum::<usize>();
    let servers = snapshots.iter().map(|s| s.servers.len()).sum::<usize>();
    let idle = snapshots.iter().flat_map(|s| &s.servers).filter(|v| !v.active).count();
    for (name, n) in [
        ("databases", config.databases.len()),
        ("users", user_names(snapshots, config).len()),
        ("peers", super::show_process::peer_count(config)),
        ("pools", pools(snapshots).len()),
        ("peer_pools", super::show_process::peer_count(config)),
        ("free_clients", 0),
        ("used_clients", clients),
        ("login_clients", 0),
        ("free_servers", idle),
        ("used_servers", servers - idle),
        ("dns_names", 0),
        ("dns_zones", 0),
        ("dns_queries", 0),
        ("dns_pending", 0),
    ] {
        t.push(vec![s(name), s(n)]);
    }
    t
}

/// SHOW SHARDS: how the load spreads over the cores.
pub fn shards_table(snapshots: &[ShardSnapshot]) -> Table {
    let mut t = Table::new(&[
        ("shard", INT4),
        ("clients", INT4),
        ("active_clients", INT4),
        ("waiting_clients", INT4),
        ("servers", INT4),
        ("idle_servers", INT4),
        ("xact_count", NUMERIC),
        ("query_count", NUMERIC),
        ("statements", INT4),
    ]);
    let mut sorted: Vec<&ShardSnapshot> = snapshots.iter().collect();
    sorted.sort_by_key(|s| s.shard);
    for sh in sorted {
        let mut totals = PoolStats::default();
        sh.pools.iter().for_each(|p| totals.add(&p.stats));
        let active = sh.clients.iter().filter(|c| c.state == crate::runtime::ClientState::Active).count();
        let waiting = sh.clients.iter().filter(|c| c.state == crate::runtime::ClientState::Waiting).count();
        let idle = sh.servers.iter().filter(|v| !v.active).count();
        t.push(vec![
            s(sh.shard),
            s(sh.clients.len()),
            s(active),
            s(waiting),
            s(sh.servers.len()),
            s(idle),
            s(totals.xact_count),
            s(totals.query_count),
            s(sh.statements),
        ]);
    }
    t
}

/// SHOW NOTIFY: the notification hubs (LISTEN/NOTIFY in transaction mode).
pub fn notify_table(snapshots: &[ShardSnapshot]) -> Table {
    let mut t = Table::new(&[
        ("shard", INT4),
        ("listening_clients", INT4),
        ("channels", INT4),
        ("listening_connections", INT4),
        ("received", NUMERIC),
        ("delivered", NUMERIC),
        ("dropped", NUMERIC),
        ("connections_lost", NUMERIC),
    ]);
    let mut sorted: Vec<&ShardSnapshot> = snapshots.iter().collect();
    sorted.sort_by_key(|s| s.shard);
    for sh in sorted {
        let n = sh.notify;
        t.push(vec![
            s(sh.shard),
            s(n.listening_clients),
            s(n.channels),
            s(n.listening_connections),
            s(n.stats.received),
            s(n.stats.delivered),
            s(n.stats.dropped),
            s(n.stats.connections_lost),
        ]);
    }
    t
}

/// SHOW ROUTING: read routing (see `crate::router`). A row per shard,
/// database, user and host (role and position as the monitor last saw
/// them, lag behind the primary, transactions served from its pool of
/// reads), then a row per router with host `*`: reads sent to standbys,
/// transactions sent to the primary, of those the reads that went there
/// because no standby had replayed the client's last write (stale reads
/// avoided) or because no standby would do, the clients' positions learned
/// from the primary's monitor after their transactions there, and the reads
/// run again on the primary after a standby refused or lost them.
pub fn routing_table(snapshots: &[ShardSnapshot]) -> Table {
    let mut t = Table::new(&[
        ("shard", INT4),
        ("database", TEXT),
        ("user", TEXT),
        ("host", TEXT),
        ("role", TEXT),
        ("position", TEXT),
        ("lag_bytes", NUMERIC),
        ("reads", NUMERIC),
        ("to_primary", NUMERIC),
        ("stale_reads_avoided", NUMERIC),
        ("no_standby", NUMERIC),
        ("positions_learned", NUMERIC),
        ("retried_on_primary", NUMERIC),
    ]);
    let mut sorted: Vec<&ShardSnapshot> = snapshots.iter().collect();
    sorted.sort_by_key(|s| s.shard);
    for sh in sorted {
        let mut routers: Vec<&crate::runtime::snapshot::RoutingSnapshot> = sh.routing.iter().collect();
        routers.sort_by(|a, b| (&a.database, &a.user).cmp(&(&b.database, &b.user)));
        for r in routers {
            for h in &r.hosts {
                let role = h.view.role.as_str();
                t.push(vec![
                    s(sh.shard),
                    s(&r.database),
                    s(&r.user),
                    s(&h.address),
                    s(role),
                    h.view.position.map(|p| p.to_string()),
                    h.lag.map(|l| l.to_string()),
                    s(h.reads),
                    None,
                    None,
                    None,
                    None,
                    None,
                ]);
            }
            t.push(vec![
                s(sh.shard),
                s(&r.database),
                s(&r.user),
                s("*"),
                s("router"),
                None,
                None,
                s(r.stats.reads_to_standbys),
                s(r.stats.to_primary),
                s(r.stats.stale_reads_avoided),
                s(r.stats.no_standby),
                s(r.stats.positions_learned),
                s(r.stats.retried_on_primary),
            ]);
        }
    }
    t
}

/// SHOW PREPARED: the statement registries.
pub fn prepared_table(snapshots: &[ShardSnapshot]) -> Table {
    let mut t = Table::new(&[
        ("shard", INT4),
        ("statements", INT4),
        ("client_parses", NUMERIC),
        ("server_parses", NUMERIC),
        ("parses_answered", NUMERIC),
        ("describes_answered", NUMERIC),
        ("evictions", NUMERIC),
        ("shapes", INT4),
        ("rewrites", NUMERIC),
        ("pass_throughs", NUMERIC),
        ("validations", NUMERIC),
        ("validation_failures", NUMERIC),
        ("unnamed_mapped", NUMERIC),
        ("reruns", NUMERIC),
        ("portals_negotiated", NUMERIC),
        ("values_transcoded", NUMERIC),
        ("transcode_bytes_saved", NUMERIC),
        ("shapes_queued", INT4),
        ("parses_in_flight", INT4),
        ("avg_rewrite_ns", NUMERIC),
        ("avg_pass_through_ns", NUMERIC),
        ("respellings", NUMERIC),
        ("big_rows", NUMERIC),
        ("big_row_statements", NUMERIC),
    ]);
    let mut sorted: Vec<&ShardSnapshot> = snapshots.iter().collect();
    sorted.sort_by_key(|s| s.shard);
    for sh in sorted {
        let p = sh.prepare;
        t.push(vec![
            s(sh.shard),
            s(sh.statements),
            s(p.client_parses),
            s(p.server_parses),
            s(p.parses_answered),
            s(p.describes_answered),
            s(p.evictions),
            s(p.shapes),
            s(p.rewrites),
            s(p.pass_throughs),
            s(p.validations),
            s(p.validation_failures),
            s(p.unnamed_mapped),
            s(p.reruns),
            s(p.portals_negotiated),
            s(p.values_transcoded),
            s(p.transcode_bytes_saved),
            s(p.shapes_queued),
            s(p.parses_in_flight),
            s(average(p.rewrite_ns, p.rewrites_timed)),
            s(average(p.pass_through_ns, p.pass_through_timed)),
            s(p.respellings),
            s(p.big_rows),
            s(p.big_row_statements),
        ]);
    }
    t
}

/// `total / count`, 0 when nothing was counted.
fn average(total: u64, count: u64) -> u64 {
    total.checked_div(count).unwrap_or(0)
}

/// SHOW PASS_THROUGHS: why simple queries ran unchanged with auto-prepare
/// on, one row per shard and reason (every reason, so the rows are the same
/// from one call to the next), like SHOW LISTS' name/value rows.
pub fn pass_throughs_table(snapshots: &[ShardSnapshot]) -> Table {
    let mut t = Table::new(&[("shard", INT4), ("reason", TEXT), ("queries", NUMERIC), ("description", TEXT)]);
    let mut sorted: Vec<&ShardSnapshot> = snapshots.iter().collect();
    sorted.sort_by_key(|s| s.shard);
    for sh in sorted {
        for (reason, queries) in sh.prepare.pass_through_reasons.iter() {
            t.push(vec![s(sh.shard), Some(reason.label()), s(queries), Some(reason.description())]);
        }
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::PoolMode;
    use crate::runtime::snapshot::{ClientSnapshot, PoolSnapshot};

    fn pool(db: &str, open: usize, stats: PoolStats) -> PoolSnapshot {
        PoolSnapshot {
            database: db.into(),
            user: "u".into(),
            mode: PoolMode::Transaction,
            max_size: 4,
            open,
            idle: open,
            active_clients: 1,
            waiting_clients: 0,
            max_wait: Duration::ZERO,
            paused: false,
            stats,
        }
    }

    fn shard(id: usize, pools: Vec<PoolSnapshot>) -> ShardSnapshot {
        ShardSnapshot { shard: id, pools, ..ShardSnapshot::default() }
    }

    #[test]
    fn pools_are_merged_over_shards() {
        let st = PoolStats { xact_count: 5, query_count: 7, ..Default::default() };
        let snaps = [shard(0, vec![pool("app", 2, st)]), shard(1, vec![pool("app", 3, st), pool("b", 1, st)])];
        let t = pools_table(&snaps, &Config::parse("listen = \"127.0.0.1:6432\"\n[databases.app]\n").unwrap());
        assert_eq!(t.rows.len(), 2);
        assert_eq!(t.rows[0][0].as_deref(), Some("app"));
        assert_eq!(t.rows[0][2].as_deref(), Some("2"), "cl_active summed");
        assert_eq!(t.rows[0][9].as_deref(), Some("5"), "sv_idle summed");
        let t = stats_totals_table(&snaps);
        assert_eq!(t.rows[0][2].as_deref(), Some("10"));
        assert_eq!(t.rows[0][3].as_deref(), Some("14"));
    }

    fn names(t: &Table) -> Vec<&'static str> {
        t.columns.iter().map(|(name, _)| *name).collect()
    }

    /// PgBouncer 1.24.1's columns, as it answered (built from Debian's
    /// source); pglane's own follow or sit between, and 1.18's are a
    /// subsequence of them (tests/pgbouncer_parity.rs runs the machine's).
    #[test]
    fn column_layouts_are_pgbouncer_1_24s() {
        let config = Config::parse("listen = \"127.0.0.1:6432\"\n[databases.app]\n").unwrap();
        let connection = [
            "type",
            "user",
            "database",
            "replication",
            "state",
            "addr",
            "port",
            "local_addr",
            "local_port",
            "connect_time",
            "request_time",
            "wait",
            "wait_us",
            "close_needed",
            "ptr",
            "link",
            "remote_pid",
            "tls",
            "application_name",
            "prepared_statements",
            "id",
        ];
        assert_eq!(names(&clients_table(&[], "127.0.0.1:6432")), connection);
        assert_eq!(names(&servers_table(&[])), connection);
        assert_eq!(names(&sockets_table(&[], "127.0.0.1:6432", false))[..connection.len()], connection);
        assert_eq!(
            names(&pools_table(&[], &config)),
            [
                "database",
                "user",
                "cl_active",
                "cl_waiting",
                "cl_active_cancel_req",
                "cl_waiting_cancel_req",
                "sv_active",
                "sv_active_cancel",
                "sv_being_canceled",
                "sv_idle",
                "sv_used",
                "sv_tested",
                "sv_login",
                "maxwait",
                "maxwait_us",
                "pool_mode",
                "load_balance_hosts",
            ]
        );
        let databases: Vec<_> = names(&databases_table(&[], &config)).into_iter().filter(|&n| n != "reserve_pool").collect();
        assert_eq!(
            databases,
            [
                "name",
                "host",
                "port",
                "database",
                "force_user",
                "pool_size",
                "min_pool_size",
                "reserve_pool_size",
                "server_lifetime",
                "pool_mode",
                "load_balance_hosts",
                "max_connections",
                "current_connections",
                "max_client_connections",
                "current_client_connections",
                "paused",
                "disabled",
            ]
        );
        assert_eq!(
            names(&users_table(&[], &config)),
            [
                "name",
                "pool_size",
                "reserve_pool_size",
                "pool_mode",
                "max_user_connections",
                "current_connections",
                "max_user_client_connections",
                "current_client_connections",
            ]
        );
        assert_eq!(stats_table(&[], Duration::from_secs(1)).columns.len(), 23);
    }

    fn client(user: &str, database: &str, prepared_statements: u32, id: u64) -> ClientSnapshot {
        ClientSnapshot {
            process_id: id as i32,
            info: crate::runtime::ClientInfo::over_the_socket(user, database),
            state: crate::runtime::ClientState::Idle,
            connected_at: SystemTime::now(),
            state_for: Duration::ZERO,
            server_pid: None,
            id,
            prepared_statements,
        }
    }

    fn column<'t>(t: &'t Table, row: usize, name: &str) -> Option<&'t str> {
        let i = t.columns.iter().position(|(n, _)| *n == name).unwrap_or_else(|| panic!("no column {name}"));
        t.rows[row][i].as_deref()
    }

    #[test]
    fn databases_users_and_clients_show_what_pgbouncer_1_24_added() {
        let config = Config::parse(
            "listen = \"127.0.0.1:6432\"\nserver_lifetime = 600\nmax_user_client_connections = 5\n\
             [databases.one]\nhost = \"db\"\nreserve_pool_size = 2\nmax_db_client_connections = 9\n\
             [databases.many]\nhost = [\"a\", \"b\"]\nload_balance_hosts = \"round-robin\"\n\
             [users.alice]\nmax_user_connections = 3\n",
        )
        .unwrap();
        let mut one = shard(0, vec![PoolSnapshot { user: "alice".into(), ..pool("one", 2, PoolStats::default()) }]);
        one.clients = vec![client("alice", "one", 4, 7), client("alice", "one", 0, 8), client("bob", "many", 0, 9)];
        let snaps = [one];
        let t = databases_table(&snaps, &config);
        let row = |name: &str| t.rows.iter().position(|r| r[0].as_deref() == Some(name)).unwrap();
        let (r1, rm) = (row("one"), row("many"));
        assert_eq!(column(&t, r1, "reserve_pool_size"), Some("2"));
        assert_eq!(column(&t, r1, "reserve_pool"), Some("2"), "1.18's name, for the exporter");
        assert_eq!(column(&t, r1, "server_lifetime"), Some("600"));
        assert_eq!(column(&t, r1, "load_balance_hosts"), None, "one host: NULL, as PgBouncer");
        assert_eq!(column(&t, rm, "load_balance_hosts"), Some("round-robin"));
        assert_eq!(column(&t, r1, "max_client_connections"), Some("9"));
        assert_eq!(column(&t, r1, "current_client_connections"), Some("2"));
        assert_eq!(column(&t, rm, "current_client_connections"), Some("1"));
        let t = users_table(&snaps, &config);
        assert_eq!(t.rows.len(), 1);
        assert_eq!(column(&t, 0, "pool_size"), Some(""), "unset, as PgBouncer leaves it");
        assert_eq!(column(&t, 0, "max_user_connections"), Some("3"));
        assert_eq!(column(&t, 0, "current_connections"), Some("2"));
        assert_eq!(column(&t, 0, "max_user_client_connections"), Some("5"));
        assert_eq!(column(&t, 0, "current_client_connections"), Some("2"));
        let t = clients_table(&snaps, "127.0.0.1:6432");
        assert_eq!(column(&t, 0, "replication"), Some("none"));
        assert_eq!(column(&t, 0, "prepared_statements"), Some("4"));
        assert_eq!(column(&t, 0, "id"), Some("7"));
        // An idle client on the unix socket, in PgBouncer's words.
        assert_eq!(column(&t, 0, "state"), Some("active"));
        assert_eq!((column(&t, 0, "addr"), column(&t, 0, "port")), (Some("unix"), Some("6432")));
        // ACTIVE_SOCKETS finds the state and link where they moved to.
        let t = sockets_table(&snaps, "127.0.0.1:6432", false);
        assert_eq!(column(&t, 0, "state"), Some("cl_active"));
        assert!(sockets_table(&snaps, "127.0.0.1:6432", true).rows.is_empty());
    }

    #[test]
    fn pass_throughs_are_listed_by_reason_for_every_shard() {
        use crate::prepare::auto::PassThrough;
        use crate::prepare::shape::Reason;
        let mut one = shard(1, vec![]);
        one.prepare.pass_through_reasons.count(PassThrough::Refused(Reason::Utility));
        one.prepare.pass_through_reasons.count(PassThrough::Refused(Reason::Utility));
        let t = pass_throughs_table(&[one, shard(0, vec![])]);
        assert_eq!(t.rows.len(), 2 * PassThrough::COUNT);
        assert_eq!(t.rows[0][0].as_deref(), Some("0"), "shards in order");
        let row = t.rows.iter().find(|r| r[0].as_deref() == Some("1") && r[1].as_deref() == Some("refused_utility")).unwrap();
        assert_eq!(row[2].as_deref(), Some("2"));
        assert_eq!(average(10, 0), 0);
        assert_eq!(average(10, 4), 2);
    }

    #[test]
    fn times_are_formatted_like_pgbouncer() {
        assert_eq!(format_time(UNIX_EPOCH), "1970-01-01 00:00:00 UTC");
        assert_eq!(format_time(UNIX_EPOCH + Duration::from_secs(1_709_210_096)), "2024-02-29 12:34:56 UTC");
    }
}
