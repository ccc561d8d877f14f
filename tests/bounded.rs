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
#[path = "common/raw.rs"]
mod raw;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use common::{postgres, Pglane, Psql};
use flood::Flood;
use pglane::protocol::frontend;

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

/// pglane's resident memory (VmRSS), in KiB.
fn rss_kib(lane: &Pglane) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{}/status", lane.pid())).expect("pglane's status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS")
}

/// What one client that reads none of its replies may cost pglane at the
/// default relay_buffer_size (64 KiB), whatever it sends in messages of a
/// few bytes (see `client::relay`: its buffers, two inboxes, its queue of
/// what is due, each up to twice over for the allocator): FUZZING.md has
/// the figure measured, ≈ 0.6 MiB.
const FLOODING_CLIENT_BOUND_KIB: u64 = 1024;

/// RSS the allocator takes on for the first few floods whatever they cost
/// (its pages for each size of buffer), on top of the bound per client.
const ALLOCATOR_SLACK_KIB: u64 = 4096;

#[test]
fn an_unread_flood_costs_pglane_no_more_than_its_bound() {
    let db = "bounded_memory";
    postgres().fresh_database(db, Some("trustuser"));
    let lane = pglane(db, 8, "");
    let out = Psql::tcp(lane.port, "trustuser", "", "app").command("select 1").run().expect("warm-up");
    assert_eq!(out.trim(), "1");
    std::thread::sleep(Duration::from_millis(300));
    let before = rss_kib(&lane);
    let how_long = Duration::from_secs(6);
    let addr = addr(&lane);
    let kinds: Vec<Flood> = [Flood::Syncs, Flood::SimpleQueries, Flood::Extended].repeat(2);
    let (peak, wrote, served) = std::thread::scope(|scope| {
        let floods: Vec<_> = kinds
            .iter()
            .copied()
            .map(|kind| {
                scope.spawn(move || {
                    let mut s = flood::connect_small(addr, 4096).expect("connect");
                    flood::login(&mut s, "trustuser", "app").expect("login");
                    let n = flood::flood_for(&mut s, kind, how_long);
                    // Stay, unread, while the memory is looked at.
                    std::thread::sleep(Duration::from_secs(1));
                    (kind, n)
                })
            })
            .collect();
        // A well-behaved client meanwhile.
        let polite = scope.spawn(move || {
            let mut client = raw::RawClient::login(addr.port(), "trustuser", "app");
            let (mut answered, mut slowest) = (0, Duration::ZERO);
            let started = Instant::now();
            while started.elapsed() < how_long {
                let sent = Instant::now();
                let got = raw::query(&mut client, "select 1");
                assert_eq!(raw::first_column(&got), ["1"]);
                answered += 1;
                slowest = slowest.max(sent.elapsed());
                std::thread::sleep(Duration::from_millis(10));
            }
            (answered, slowest)
        });
        let mut peak = before;
        let started = Instant::now();
        while started.elapsed() < how_long + Duration::from_millis(500) {
            peak = peak.max(rss_kib(&lane));
            std::thread::sleep(Duration::from_millis(100));
        }
        let wrote: Vec<_> = floods.into_iter().map(|f| f.join().unwrap()).collect();
        (peak, wrote, polite.join().unwrap())
    });
    let growth = peak.saturating_sub(before);
    let n = kinds.len() as u64;
    eprintln!(
        "floods wrote {wrote:?}; pglane's RSS {before} KiB -> peak {peak} KiB: {growth} KiB for {n} flooding clients \
         ({} KiB each); meanwhile another client's select 1 was answered {} times, the slowest in {:?}",
        growth / n,
        served.0,
        served.1
    );
    assert!(
        growth <= n * FLOODING_CLIENT_BOUND_KIB + ALLOCATOR_SLACK_KIB,
        "pglane grew {growth} KiB for {n} clients that read nothing: more than {FLOODING_CLIENT_BOUND_KIB} KiB each"
    );
    assert!(served.0 > 0, "the well-behaved client was not served during the floods");
}

/// Writes `requests` on a thread of its own while this one reads the
/// answers up to the `readies`th ReadyForQuery; returns their tags.
fn pipeline(lane: &Pglane, setup: &[u8], requests: Vec<u8>, readies: usize) -> String {
    let mut client = raw::RawClient::login(lane.port, "trustuser", "app");
    if !setup.is_empty() {
        client.send(setup);
        client.until_ready();
    }
    let mut writer = client.try_clone();
    let sending = std::thread::spawn(move || writer.send(&requests));
    let mut tags = String::new();
    while tags.matches('Z').count() < readies {
        tags.push(client.recv().tag as char);
    }
    sending.join().unwrap();
    tags
}

#[test]
fn a_client_pipelining_past_the_in_flight_limit_gets_every_answer() {
    let db = "bounded_pipeline";
    postgres().fresh_database(db, Some("trustuser"));
    let lane = pglane(db, 2, "max_client_prepared_statements = 5000");
    // 5000 statements run with no Sync until the end: the server holds the
    // last of its answers until then (or until pglane asks it to flush).
    let n = 5000;
    let mut out = BytesMut::new();
    for _ in 0..n {
        frontend::parse(&mut out, "", "select 1", &[]);
        frontend::bind(&mut out, "", "", &[], std::iter::empty(), &[]);
        frontend::execute(&mut out, "", 0);
    }
    frontend::sync(&mut out);
    let tags = pipeline(&lane, &[], out.to_vec(), 1);
    for tag in ['1', '2', 'D', 'C'] {
        assert_eq!(tags.matches(tag).count(), n, "answers {tag}");
    }
    assert!(tags.ends_with('Z'));

    // pglane's own answers queued behind one the server holds back: a Bind
    // and Execute, then 1,500 Parses of a statement the pool knows, which
    // pglane answers itself once the server's answers are out.
    let mut setup = BytesMut::new();
    frontend::parse(&mut setup, "s0", "select 2", &[]);
    frontend::sync(&mut setup);
    let mut out = BytesMut::new();
    frontend::bind(&mut out, "", "s0", &[], std::iter::empty(), &[]);
    frontend::execute(&mut out, "", 0);
    let named = 1500;
    for i in 1..=named {
        frontend::parse(&mut out, &format!("s{i}"), "select 2", &[]);
    }
    frontend::sync(&mut out);
    let tags = pipeline(&lane, &setup, out.to_vec(), 1);
    assert_eq!(tags, format!("2DC{}Z", "1".repeat(named)));
}
