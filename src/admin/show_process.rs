//! The SHOW tables about the process rather than its connections: MEM,
//! STATE, PEERS, PEER_POOLS, DNS_HOSTS and DNS_ZONES, with PgBouncer's
//! columns (checked against PgBouncer 1.18 and its admin.c).
//!
//! Where pglane has no such thing (a slab cache, a DNS cache, a peer pool),
//! the table says what pglane does have, and docs/operations.md says how it
//! differs; nothing here is made up to fill a column.

use std::mem::size_of;

use super::show::{Table, INT4, INT8, TEXT};
use crate::config::Config;
use crate::runtime::snapshot::ShardSnapshot;

fn s(v: impl ToString) -> Option<String> {
    Some(v.to_string())
}

/// SHOW MEM. PgBouncer lists its slab caches; pglane allocates each
/// object on its own and keeps none freed, so `free` is 0, `size` is the
/// object's own size (not the buffers or strings it owns) and `memtotal`
/// is size × used.
pub fn mem_table(snapshots: &[ShardSnapshot], config: &Config) -> Table {
    let mut t = Table::new(&[("name", TEXT), ("size", INT4), ("used", INT4), ("free", INT4), ("memtotal", INT4)]);
    let pools = snapshots.iter().map(|s| s.pools.len()).sum::<usize>();
    let servers = snapshots.iter().map(|s| s.servers.len()).sum::<usize>();
    let clients = snapshots.iter().map(|s| s.clients.len()).sum::<usize>();
    for (name, size, used) in [
        ("user_cache", size_of::<crate::config::User>(), config.users.len()),
        ("db_cache", size_of::<crate::config::Database>(), config.databases.len()),
        ("pool_cache", size_of::<crate::pool::Pool>(), pools),
        ("server_cache", size_of::<crate::server::ServerConn>(), servers),
        ("client_cache", size_of::<crate::runtime::ClientEntry>(), clients),
    ] {
        t.push(vec![s(name), s(size), s(used), s(0), s(size * used)]);
    }
    t
}

/// SHOW STATE: `paused` after a PAUSE of every database; pglane is never
/// suspended (SUSPEND is refused).
pub fn state_table(snapshots: &[ShardSnapshot]) -> Table {
    let mut t = Table::new(&[("key", TEXT), ("value", TEXT)]);
    let paused = !snapshots.is_empty() && snapshots.iter().all(|s| s.paused_all);
    let yes = |b: bool| s(if b { "yes" } else { "no" });
    t.push(vec![s("active"), yes(!paused)]);
    t.push(vec![s("paused"), yes(paused)]);
    t.push(vec![s("suspended"), yes(false)]);
    t
}

/// SHOW PEERS: the `[peers]` of this instance's group. pglane opens a
/// connection per forwarded cancel instead of a peer pool, so pool_size
/// is NULL.
pub fn peers_table(config: &Config) -> Table {
    let mut t = Table::new(&[("peer_id", INT4), ("host", TEXT), ("port", INT4), ("pool_size", INT4)]);
    for (id, peer) in peers(config) {
        t.push(vec![s(id), s(&peer.host), s(peer.port), None]);
    }
    t
}

/// SHOW PEER_POOLS: one row per peer; pglane keeps no per-peer pool or
/// count of cancels in flight to it, so the counts are NULL.
pub fn peer_pools_table(config: &Config) -> Table {
    let mut t = Table::new(&[
        ("peer_id", INT4),
        ("cl_active_cancel_req", INT4),
        ("cl_waiting_cancel_req", INT4),
        ("sv_active_cancel", INT4),
        ("sv_login", INT4),
    ]);
    for (id, _) in peers(config) {
        t.push(vec![s(id), None, None, None, None]);
    }
    t
}

/// How many other instances the group has (SHOW LISTS' peers and
/// peer_pools: one pool row per peer).
pub fn peer_count(config: &Config) -> usize {
    peers(config).len()
}

/// The other instances of the group, in peer-id order.
fn peers(config: &Config) -> Vec<(u16, &crate::config::Peer)> {
    let mut peers: Vec<(u16, &crate::config::Peer)> = config
        .peers
        .iter()
        .filter_map(|(id, peer)| id.parse::<u16>().ok().filter(|&id| id != config.peer_id).map(|id| (id, peer)))
        .collect();
    peers.sort_by_key(|&(id, _)| id);
    peers
}

/// SHOW DNS_HOSTS: empty. pglane resolves a host name at each connect with
/// the system resolver and caches nothing.
pub fn dns_hosts_table() -> Table {
    Table::new(&[("hostname", TEXT), ("ttl", INT8), ("addrs", TEXT)])
}

/// SHOW DNS_ZONES: empty, as DNS_HOSTS.
pub fn dns_zones_table() -> Table {
    Table::new(&[("zonename", TEXT), ("serial", INT8), ("count", INT4)])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(extra: &str) -> Config {
        Config::parse(&format!("listen = \"127.0.0.1:1\"\n{extra}\n[databases.app]\nhost = \"127.0.0.1\"\n")).unwrap()
    }

    #[test]
    fn peers_are_listed_by_id_without_this_instance() {
        let c = config("peer_id = 2\n[peers.10]\nhost = \"10.0.0.10\"\n[peers.2]\nhost = \"me\"\n[peers.3]\nhost = \"10.0.0.3\"\nport = 7432\n");
        let t = peers_table(&c);
        let rows: Vec<_> = t.rows.iter().map(|r| (r[0].clone().unwrap(), r[1].clone().unwrap(), r[2].clone().unwrap())).collect();
        assert_eq!(rows, [("3".into(), "10.0.0.3".into(), "7432".into()), ("10".into(), "10.0.0.10".into(), "6432".into())]);
        assert_eq!(peer_pools_table(&c).rows.len(), 2);
    }

    #[test]
    fn state_is_paused_only_when_every_shard_paused_everything() {
        let value = |t: &Table, key: &str| t.rows.iter().find(|r| r[0].as_deref() == Some(key)).unwrap()[1].clone().unwrap();
        assert_eq!(value(&state_table(&[]), "active"), "yes");
        assert_eq!(value(&state_table(&[]), "suspended"), "no");
    }

    #[test]
    fn mem_counts_the_configured_objects() {
        let t = mem_table(&[], &config(""));
        let db = t.rows.iter().find(|r| r[0].as_deref() == Some("db_cache")).unwrap();
        assert_eq!(db[2].as_deref(), Some("1"));
        let size: usize = db[1].as_deref().unwrap().parse().unwrap();
        assert_eq!(db[4].as_deref(), Some(size.to_string().as_str()), "memtotal = size × used");
        assert!(t.rows.iter().all(|r| r[3].as_deref() == Some("0")));
    }
}
