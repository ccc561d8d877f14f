//! No client takes more than its share (issue 25): server connections stay
//! accounted for whatever way a client leaves, a client that does not read
//! its replies costs pglane a bounded amount of memory, and the admin
//! console gets in when max_client_conn is reached.
//!
//! Each test has a database of its own, so that it can count its backends
//! in pg_stat_activity.

mod common;
#[path = "common/flood.rs"]
mod flood;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::{postgres, Pglane, Psql};
use flood::Flood;

/// How long each hostile client floods before it leaves: the WideRows one
/// has filled both connections by then (the others take 10 s or so).
const FLOOD: Duration = Duration::from_secs(4);

/// pglane on one shard in front of server database `dbname` (as `app`),
/// trusting trustuser, who is also its admin and its login to the server.
fn pglane(dbname: &str, pool_size: usize, extra: &str) -> Pglane {
    pglane_via("127.0.0.1", dbname, pool_size, extra)
}

/// [`pglane`], reaching the server at `host` (an address or a socket directory).
fn pglane_via(host: &str, dbname: &str, pool_size: usize, extra: &str) -> Pglane {
    Pglane::start_with_args(
        &format!(
            "pool_mode = \"transaction\"\nauth_type = \"trust\"\nadmin_users = [\"trustuser\"]\n{extra}\n\
             [databases.app]\nhost = \"{host}\"\nport = {}\ndbname = \"{dbname}\"\npool_size = {pool_size}\n\
             [users.trustuser]\n",
            postgres().port
        ),
        &["--cores", "1"],
    )
}

fn addr(lane: &Pglane) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], lane.port))
}

/// The backends of `dbname` PostgreSQL has, and how many of them wait to
/// write to their client.
fn backends(dbname: &str) -> (usize, usize) {
    let out = postgres().psql(&format!(
        "select count(*), count(*) filter (where wait_event = 'ClientWrite') from pg_stat_activity where datname = '{dbname}'"
    ));
    let (all, writing) = out.trim().split_once('|').expect("two counts");
    (all.parse().unwrap(), writing.parse().unwrap())
}

/// The server connections SHOW SERVERS lists for `app`.
fn listed_servers(lane: &Pglane) -> usize {
    let out = Psql::tcp(lane.port, "trustuser", "", "pgbouncer").command("SHOW SERVERS").run().expect("SHOW SERVERS");
    out.lines().filter(|l| l.split('|').nth(2) == Some("app")).count()
}

/// Waits up to 20 s for PostgreSQL's count of `dbname`'s backends to be
/// pglane's; returns the last (backends, ClientWrite, listed) seen.
fn settle(lane: &Pglane, dbname: &str) -> (usize, usize, usize) {
    let started = Instant::now();
    loop {
        let (all, writing) = backends(dbname);
        let listed = listed_servers(lane);
        if (all == listed && writing == 0) || started.elapsed() > Duration::from_secs(20) {
            return (all, writing, listed);
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Four clients at once, one per kind of flood, each writing as fast as its
/// socket takes it through a 4 KiB receive buffer and reading nothing, then
/// closing (if pglane did not close first): returns the bytes each wrote.
/// `meanwhile` runs on this thread while they flood for `how_long`.
fn floods_then_leave(lane: &Pglane, how_long: Duration, meanwhile: impl FnOnce()) -> Vec<(Flood, u64)> {
    let addr = addr(lane);
    std::thread::scope(|scope| {
        let floods: Vec<_> = Flood::ALL
            .into_iter()
            .map(|kind| {
                scope.spawn(move || {
                    let mut s = flood::connect_small(addr, 4096).expect("connect");
                    flood::login(&mut s, "trustuser", "app").expect("login");
                    (kind, flood::flood_for(&mut s, kind, how_long))
                })
            })
            .collect();
        meanwhile();
        floods.into_iter().map(|f| f.join().unwrap()).collect()
    })
}

/// The floods of `round` are over: PostgreSQL's backends of `dbname` must
/// be the ones pglane lists, none left writing to nobody.
fn assert_nothing_leaked(lane: &Pglane, dbname: &str, pool_size: usize, round: &str, wrote: &[(Flood, u64)]) {
    let (all, writing, listed) = settle(lane, dbname);
    eprintln!(
        "{round}: floods wrote {wrote:?}; then PostgreSQL has {all} backends ({writing} in ClientWrite), SHOW SERVERS lists {listed}"
    );
    assert_eq!(writing, 0, "backends left waiting to write to pglane after the floods ({round})");
    assert_eq!(all, listed, "PostgreSQL's backends and SHOW SERVERS disagree after the floods ({round})");
    assert!(all <= pool_size, "{all} backends for a pool of {pool_size}");
}

#[test]
fn flooding_clients_that_leave_leak_no_server_connection() {
    let db = "bounded_leak";
    postgres().fresh_database(db, Some("trustuser"));
    let pool_size = 4;
    let lane = pglane(db, pool_size, "");
    for round in 1..=2 {
        let wrote = floods_then_leave(&lane, FLOOD, || {});
        assert_nothing_leaked(&lane, db, pool_size, &format!("round {round}"), &wrote);
    }
    // And the pool still serves.
    let out = Psql::tcp(lane.port, "trustuser", "", "app").command("select 40 + 2").run().expect("a query after the floods");
    assert_eq!(out.trim(), "42");
}

#[test]
fn flooding_clients_ended_by_kill_or_query_timeout_leak_no_server_connection() {
    let db = "bounded_kill";
    postgres().fresh_database(db, Some("trustuser"));
    let pool_size = 4;
    let lane = pglane(db, pool_size, "query_timeout = 5");
    // KILL, after FLOOD (the clients' writes then fail).
    let wrote = floods_then_leave(&lane, FLOOD + Duration::from_secs(2), || {
        std::thread::sleep(FLOOD);
        Psql::tcp(lane.port, "trustuser", "", "pgbouncer").command("KILL app").run().expect("KILL");
    });
    assert_nothing_leaked(&lane, db, pool_size, "KILL", &wrote);
    // query_timeout: each flood keeps its server busy until pglane gives up.
    let wrote = floods_then_leave(&lane, Duration::from_secs(7), || {});
    assert_nothing_leaked(&lane, db, pool_size, "query_timeout", &wrote);
    let log = lane.log();
    assert!(log.contains("query_timeout"), "no session ended by query_timeout:\n{}", &log[log.len().saturating_sub(4000)..]);
}
