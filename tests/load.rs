//! Load: many idle clients, floods of connections, and hundreds of clients
//! running transactions on few server connections, with pglane's memory and
//! file descriptors watched from /proc.
//!
//! Sizes are chosen to finish in about a minute on a 2-core machine; the
//! `#[ignore]`d variants run longer and bigger (by hand:
//! `cargo test --test load -- --ignored --nocapture`), and the figures they
//! print are recorded in FUZZING.md. Environment knobs: `PGLANE_IDLE_CLIENTS`
//! (idle clients, default 10000), `PGLANE_LOAD_SECS` (seconds of the
//! transaction run, default 20).

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Command, Output};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::BytesMut;
use common::{postgres, Pglane};
use pglane::protocol::startup;

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// Raises this process's soft fd limit to the hard one (children inherit it);
/// returns the new soft limit.
fn raise_fd_limit() -> u64 {
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit/setrlimit write/read the struct we pass.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim), 0);
        lim.rlim_cur = lim.rlim_max;
        assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &lim), 0);
    }
    lim.rlim_cur
}

/// pglane's resident memory (VmRSS) in KiB and open fds.
fn usage(lane: &Pglane) -> (u64, usize) {
    let status = std::fs::read_to_string(format!("/proc/{}/status", lane.pid())).unwrap();
    let rss = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS");
    let fds = std::fs::read_dir(format!("/proc/{}/fd", lane.pid())).unwrap().count();
    (rss, fds)
}

fn pglane(dbname: &str, cores: usize, pool_size: usize, extra: &str) -> Pglane {
    Pglane::start_with_args(
        &format!(
            "pool_mode = \"transaction\"\nauth_type = \"trust\"\n{extra}\n\
             [databases.app]\nhost = \"127.0.0.1\"\nport = {}\ndbname = \"{dbname}\"\npool_size = {pool_size}\n\
             [users.postgres]\npassword = \"secret\"\n",
            postgres().port
        ),
        &["--cores", &cores.to_string()],
    )
}

fn startup_packet() -> BytesMut {
    let mut out = BytesMut::new();
    startup::encode_startup(&mut out, &[("user", "postgres"), ("database", "app")]);
    out
}

/// Reads until `needle` has arrived; Err if the connection ends first.
fn read_until(s: &mut TcpStream, needle: &[u8]) -> Result<Vec<u8>, String> {
    let mut got = Vec::new();
    let mut buf = [0u8; 2048];
    while !got.windows(needle.len()).any(|w| w == needle) {
        match s.read(&mut buf) {
            Ok(0) => return Err(format!("closed after {:?}", String::from_utf8_lossy(&got))),
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) => return Err(format!("{e} after {:?}", String::from_utf8_lossy(&got))),
        }
    }
    Ok(got)
}

const READY_IDLE: &[u8] = b"Z\0\0\0\x05I";

/// A trusted raw login, up to the first ReadyForQuery.
fn login(port: u16, packet: &[u8]) -> Result<TcpStream, String> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).map_err(|e| format!("connect: {e}"))?;
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    s.write_all(packet).map_err(|e| e.to_string())?;
    read_until(&mut s, READY_IDLE)?;
    Ok(s)
}

fn simple_query(s: &mut TcpStream, sql: &str) -> Result<Vec<u8>, String> {
    let mut out = BytesMut::new();
    pglane::protocol::frontend::query(&mut out, sql);
    s.write_all(&out).map_err(|e| e.to_string())?;
    let got = read_until(s, READY_IDLE)?;
    if got.first() == Some(&b'E') {
        return Err(String::from_utf8_lossy(&got).into_owned());
    }
    Ok(got)
}

fn idle_clients(wanted: usize) {
    // Both this process and pglane hold one fd per client: stay under the
    // hard limit, and say so if that means fewer clients.
    let limit = raise_fd_limit() as usize;
    let n = wanted.min(limit.saturating_sub(500));
    if n < wanted {
        eprintln!("idle clients: the fd limit is {limit}, so {n} clients instead of {wanted}");
    }
    assert!(n >= 1000, "fd limit {limit} is too low for this test");
    postgres().fresh_database("load_idle", None);
    let lane = pglane("load_idle", 2, 4, &format!("max_client_conn = {}", n + 100));
    let packet = startup_packet();
    // Warm up: the pools' first server connection and login parameters.
    let mut warm = login(lane.port, &packet).unwrap();
    simple_query(&mut warm, "select 1").unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let (rss0, fds0) = usage(&lane);

    let open_all = || -> (Vec<TcpStream>, Duration) {
        let started = Instant::now();
        let threads = 4;
        let clients: Vec<TcpStream> = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..threads)
                .map(|t| {
                    let packet = &packet;
                    let port = lane.port;
                    scope.spawn(move || {
                        (t..n)
                            .step_by(threads)
                            .map(|i| login(port, packet).unwrap_or_else(|e| panic!("client {i}: {e}")))
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            handles.into_iter().flat_map(|h| h.join().unwrap()).collect()
        });
        assert_eq!(clients.len(), n);
        (clients, started.elapsed())
    };
    let wait_for_fds = |at_most: usize| {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let u = usage(&lane);
            if u.1 <= at_most || Instant::now() > deadline {
                return u;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    };

    let (mut clients, login_time) = open_all();
    std::thread::sleep(Duration::from_millis(500));
    let (rss1, fds1) = usage(&lane);
    assert!(fds1 >= fds0 + n, "pglane has {fds1} fds for {n} clients (baseline {fds0})");
    let per_client = (rss1.saturating_sub(rss0)) as f64 * 1024.0 / n as f64;

    // Every client is really there: a sample runs a query.
    for (i, c) in clients.iter_mut().enumerate().step_by((n / 200).max(1)) {
        let got = simple_query(c, "select 1").unwrap_or_else(|e| panic!("client {i}: {e}"));
        assert!(got.starts_with(b"T"), "client {i}");
    }
    let servers: i64 = postgres()
        .psql("select count(*) from pg_stat_activity where datname = 'load_idle' and backend_type = 'client backend'")
        .parse()
        .unwrap();
    assert!(servers <= 4, "{servers} server connections for {n} idle clients");

    // Gone: pglane lets go of every fd.
    drop(clients);
    // (The pool may have opened up to pool_size = 4 server connections.)
    let (rss2, fds2) = wait_for_fds(fds0 + 3);
    assert!(fds2 <= fds0 + 3, "pglane still holds {fds2} fds after all {n} clients left (baseline {fds0})");

    // A second crowd of the same size reuses what the first one freed: a
    // leak per client would show as RSS growing past the first peak.
    let (clients, login_time_2) = open_all();
    std::thread::sleep(Duration::from_millis(500));
    let (rss3, _) = usage(&lane);
    drop(clients);
    let (_, fds4) = wait_for_fds(fds0 + 3);
    assert!(fds4 <= fds0 + 3, "pglane still holds {fds4} fds after the second crowd left (baseline {fds0})");
    drop(warm);
    eprintln!(
        "idle clients: {n} logged in in {login_time:?} ({:.0}/s), again in {login_time_2:?}; pglane RSS {rss0} KiB -> {rss1} KiB \
         ({per_client:.0} bytes per idle client), {rss2} KiB after they left, {rss3} KiB with the second crowd; \
         fds {fds0} -> {fds1} -> {fds2}; {servers} server connections",
        n as f64 / login_time.as_secs_f64(),
    );
    assert!(rss3 <= rss1 + rss1 / 10, "RSS grew from {rss1} KiB to {rss3} KiB for a second crowd of {n}: a leak");
    // An idle client holds a 4 KiB read buffer, its ~3 KiB task and its
    // session state (≈ 8.5 KB measured, debug and release builds alike).
    // 32 KiB would mean something grew back.
    assert!(per_client < 32.0 * 1024.0, "{per_client:.0} bytes of RSS per idle client");
}

#[test]
fn ten_thousand_idle_clients() {
    idle_clients(env_or("PGLANE_IDLE_CLIENTS", 10_000) as usize);
}

#[test]
fn floods_of_connections() {
    raise_fd_limit();
    postgres().fresh_database("load_flood", None);
    let lane = pglane("load_flood", 2, 4, "max_client_conn = 2000");
    let packet = startup_packet();
    login(lane.port, &packet).and_then(|mut s| simple_query(&mut s, "select 1")).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let (rss0, fds0) = usage(&lane);

    // 1. Connections that are dropped at once, half of them with a reset,
    //    some after a partial startup packet.
    let started = Instant::now();
    std::thread::scope(|scope| {
        for t in 0..8 {
            let port = lane.port;
            let packet = &packet;
            scope.spawn(move || {
                for i in 0..250 {
                    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
                    if i % 3 == 1 {
                        let _ = s.write_all(&packet[..(i + t) % packet.len()]);
                    }
                    if i % 2 == 0 {
                        socket2::SockRef::from(&s).set_linger(Some(Duration::ZERO)).unwrap();
                    }
                }
            });
        }
    });
    let dropped = started.elapsed();

    // 2. Full logins, a query each, and a Terminate, 32 at a time.
    let failures = Mutex::new(Vec::new());
    let done = AtomicUsize::new(0);
    let started = Instant::now();
    std::thread::scope(|scope| {
        for _ in 0..32 {
            scope.spawn(|| {
                for _ in 0..50 {
                    let r = login(lane.port, &packet).and_then(|mut s| {
                        simple_query(&mut s, "select 1")?;
                        s.write_all(b"X\0\0\0\x04").map_err(|e| e.to_string())
                    });
                    match r {
                        Ok(()) => done.fetch_add(1, Ordering::Relaxed),
                        Err(e) => {
                            failures.lock().unwrap().push(e);
                            0
                        }
                    };
                }
            });
        }
    });
    let logins = started.elapsed();
    let failures = failures.into_inner().unwrap();
    assert!(failures.is_empty(), "{} of 1600 logins failed: {:?}", failures.len(), &failures[..failures.len().min(5)]);
    assert_eq!(done.load(Ordering::Relaxed), 1600);

    let deadline = Instant::now() + Duration::from_secs(20);
    let (rss1, fds1) = loop {
        let u = usage(&lane);
        if u.1 <= fds0 + 3 || Instant::now() > deadline {
            break u;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    // (Up to pool_size = 4 server connections, one of them open at the baseline.)
    assert!(fds1 <= fds0 + 3, "pglane holds {fds1} fds after the floods (baseline {fds0})");
    let servers: i64 = postgres()
        .psql("select count(*) from pg_stat_activity where datname = 'load_flood' and backend_type = 'client backend'")
        .parse()
        .unwrap();
    assert!(servers <= 4, "{servers} server connections");
    eprintln!(
        "floods: 2000 dropped connections in {dropped:?}; 1600 login+query+terminate in {logins:?} ({:.0}/s); \
         RSS {rss0} -> {rss1} KiB, fds {fds0} -> {fds1}",
        1600.0 / logins.as_secs_f64()
    );
}

#[test]
fn max_client_conn_turns_the_excess_away_clearly() {
    raise_fd_limit();
    let lane = pglane("postgres", 1, 2, "max_client_conn = 50");
    let packet = startup_packet();
    let mut admitted = Vec::new();
    let mut refused = 0;
    for _ in 0..80 {
        let mut s = TcpStream::connect(("127.0.0.1", lane.port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        s.write_all(&packet).unwrap();
        let mut got = Vec::new();
        let mut buf = [0u8; 2048];
        loop {
            if got.windows(6).any(|w| w == READY_IDLE) {
                admitted.push(s);
                break;
            }
            match s.read(&mut buf) {
                Ok(0) | Err(_) => {
                    let text = String::from_utf8_lossy(&got);
                    assert!(text.contains("53300") && text.contains("sorry, too many clients already"), "{text}");
                    refused += 1;
                    break;
                }
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
    }
    // The harness's readiness probe may still count for a moment.
    assert!((48..=50).contains(&admitted.len()), "{} admitted with max_client_conn = 50", admitted.len());
    assert_eq!(admitted.len() + refused, 80);
    // The admitted ones work; once some leave, newcomers are admitted again.
    for s in admitted.iter_mut().take(5) {
        simple_query(s, "select 1").unwrap();
    }
    admitted.truncate(40);
    std::thread::sleep(Duration::from_millis(300));
    for _ in 0..5 {
        let mut s = login(lane.port, &packet).expect("admitted again");
        simple_query(&mut s, "select 1").unwrap();
    }
}

fn pgbench(port: u16, args: &[&str]) -> Output {
    Command::new("pgbench")
        .args(args)
        .args(["-h", "127.0.0.1", "-p", &port.to_string(), "-U", "postgres"])
        .env("PGPASSWORD", "secret")
        .output()
        .expect("run pgbench")
}

fn text(out: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

fn processed(out: &str) -> u64 {
    out.lines()
        .find_map(|l| l.strip_prefix("number of transactions actually processed: "))
        .and_then(|v| v.split('/').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no transaction count in:\n{out}"))
}

/// One TPC-B-like transaction per loop with named prepared statements
/// (tokio-postgres), until `stop`; returns (committed, errors).
async fn tpcb_worker(port: u16, seed: u64, stop: Arc<AtomicBool>) -> (u64, Vec<String>) {
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut errors = Vec::new();
    let c = match common::try_connect(port, "postgres", "secret", "app").await {
        Ok(c) => c,
        Err(e) => return (0, vec![format!("connect: {e}")]),
    };
    let mut c = c;
    let mut done = 0;
    while !stop.load(Ordering::Relaxed) && errors.is_empty() {
        let (aid, tid, bid, delta) =
            (rng.gen_range(1..=400_000i32), rng.gen_range(1..=40i32), rng.gen_range(1..=4i32), rng.gen_range(-5000..=5000i32));
        let r: Result<(), tokio_postgres::Error> = async {
            let tx = c.transaction().await?;
            tx.execute("update pgbench_accounts set abalance = abalance + $1 where aid = $2", &[&delta, &aid]).await?;
            tx.query_one("select abalance from pgbench_accounts where aid = $1", &[&aid]).await?;
            tx.execute("update pgbench_tellers set tbalance = tbalance + $1 where tid = $2", &[&delta, &tid]).await?;
            tx.execute("update pgbench_branches set bbalance = bbalance + $1 where bid = $2", &[&delta, &bid]).await?;
            tx.execute(
                "insert into pgbench_history (tid, bid, aid, delta, mtime) values ($1, $2, $3, $4, current_timestamp)",
                &[&tid, &bid, &aid, &delta],
            )
            .await?;
            tx.commit().await
        }
        .await;
        match r {
            Ok(()) => done += 1,
            Err(e) => errors.push(format!("{e:?}")),
        }
    }
    (done, errors)
}

/// `clients` clients run TPC-B-like transactions through 20 server
/// connections for `secs`: a third pgbench with the simple protocol, a third
/// pgbench with the extended protocol (unnamed statements), a third
/// tokio-postgres with named prepared statements. (Not `pgbench -M prepared`:
/// PostgreSQL 15's pgbench prepares with the blocking PQprepare, which stalls
/// its whole thread when more of its clients than there are server
/// connections are inside transactions; see FUZZING.md.)
/// Checks: no failed or aborted transaction, every committed transaction
/// fully applied (balances equal the history), at most 20 server connections,
/// and pglane's fds and memory flat once the clients are connected.
fn transactions_on_20_server_connections(clients: u32, secs: u64) {
    raise_fd_limit();
    let db = "load_tx";
    postgres().fresh_database(db, None);
    let pg = postgres();
    let init = pgbench(pg.port, &["-i", "-q", "-s", "4", db]);
    assert!(init.status.success(), "{}", text(&init));
    let lane = pglane(db, 2, 20, &format!("max_client_conn = {}", clients + 100));
    let (rss0, fds0) = usage(&lane);

    let stop = Arc::new(AtomicBool::new(false));
    let samples = Arc::new(Mutex::new(Vec::new()));
    let sampler = {
        let (stop, samples) = (stop.clone(), samples.clone());
        let pid = lane.pid();
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
                let rss: u64 = status
                    .lines()
                    .find_map(|l| l.strip_prefix("VmRSS:"))
                    .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
                    .unwrap_or(0);
                let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).map(|d| d.count()).unwrap_or(0);
                let servers: i64 = postgres()
                    .psql("select count(*) from pg_stat_activity where datname = 'load_tx' and backend_type = 'client backend'")
                    .parse()
                    .unwrap_or(-1);
                samples.lock().unwrap().push((Instant::now(), rss, fds, servers));
                std::thread::sleep(Duration::from_millis(500));
            }
        })
    };
    let started = Instant::now();
    let third = (clients / 3).to_string();
    let t = secs.to_string();
    let runs: Vec<_> = ["simple", "extended"]
        .into_iter()
        .map(|mode| {
            let (third, t) = (third.clone(), t.clone());
            let port = lane.port;
            std::thread::spawn(move || pgbench(port, &["-n", "-M", mode, "-c", &third, "-j", "2", "-T", &t, "-P", "5", "app"]))
        })
        .collect();
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let tokio_stop = Arc::new(AtomicBool::new(false));
    let workers: Vec<_> = (0..clients / 3).map(|i| rt.spawn(tpcb_worker(lane.port, i as u64, tokio_stop.clone()))).collect();
    std::thread::sleep(Duration::from_secs(secs));
    tokio_stop.store(true, Ordering::Relaxed);
    let (mut tokio_done, mut tokio_errors) = (0, Vec::new());
    for w in workers {
        let (d, e) =
            rt.block_on(async { tokio::time::timeout(Duration::from_secs(60), w).await.expect("a tokio client hung").unwrap() });
        tokio_done += d;
        tokio_errors.extend(e);
    }
    let outs: Vec<String> = runs.into_iter().map(|r| text(&r.join().unwrap())).collect();
    let elapsed = started.elapsed();
    stop.store(true, Ordering::Relaxed);
    sampler.join().unwrap();

    assert!(
        tokio_errors.is_empty(),
        "{} tokio-postgres transactions failed: {:?}",
        tokio_errors.len(),
        &tokio_errors[..tokio_errors.len().min(3)]
    );
    assert!(tokio_done > 0);
    let mut total = tokio_done;
    for out in &outs {
        assert!(out.contains("number of failed transactions: 0 (0.000%)"), "{out}");
        assert!(!out.contains("aborted"), "{out}");
        let n = processed(out);
        assert!(n > 0, "{out}");
        total += n;
    }
    // Nothing lost or half done: every transaction's five statements landed.
    let sums = pg.psql_db(
        db,
        "select (select count(*) from pgbench_history) || ' ' || (select coalesce(sum(delta), 0) from pgbench_history) || ' ' || \
         (select sum(abalance) from pgbench_accounts) || ' ' || (select sum(tbalance) from pgbench_tellers) || ' ' || \
         (select sum(bbalance) from pgbench_branches)",
    );
    let v: Vec<i64> = sums.split(' ').map(|x| x.parse().unwrap()).collect();
    assert_eq!(v[0] as u64, total, "history rows vs committed transactions");
    assert!(v[1] == v[2] && v[2] == v[3] && v[3] == v[4], "balances disagree with the history: {sums}");

    let samples = samples.lock().unwrap().clone();
    let max_servers = samples.iter().map(|s| s.3).max().unwrap_or(0);
    assert!(max_servers <= 20, "{max_servers} server connections for pool_size 20");
    // Once every client is connected (after the first quarter), memory and
    // fds stay flat: no per-transaction leak.
    let steady: Vec<_> = samples
        .iter()
        .filter(|s| s.0 > started + Duration::from_secs(secs / 4 + 2) && s.0 < started + Duration::from_secs(secs))
        .collect();
    assert!(steady.len() >= 4, "too few samples: {samples:?}");
    let (first, last) = (steady[0], steady[steady.len() - 1]);
    let fd_range = steady.iter().map(|s| s.2).max().unwrap() - steady.iter().map(|s| s.2).min().unwrap();
    assert!(fd_range <= 8, "pglane's fd count moved by {fd_range} under steady load: {steady:?}");
    assert!(last.1 <= first.1 + 16 * 1024, "pglane's RSS grew from {} to {} KiB under steady load", first.1, last.1);
    // After the clients leave, only the pooled server connections remain.
    let deadline = Instant::now() + Duration::from_secs(20);
    let (rss2, fds2) = loop {
        let u = usage(&lane);
        if u.1 <= fds0 + 20 || Instant::now() > deadline {
            break u;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(fds2 <= fds0 + 20, "{fds2} fds after the run, {fds0} before");
    eprintln!(
        "{clients} clients on 20 server connections for {elapsed:?}: {total} transactions ({:.0}/s; {tokio_done} with named statements), 0 failed; \
         max {max_servers} server connections; RSS {rss0} -> {} (steady {}..{}) -> {rss2} KiB; fds {fds0} -> {}..{} -> {fds2}",
        total as f64 / elapsed.as_secs_f64(),
        last.1,
        first.1,
        last.1,
        steady.iter().map(|s| s.2).min().unwrap(),
        steady.iter().map(|s| s.2).max().unwrap(),
    );
}

#[test]
fn three_hundred_clients_on_20_server_connections() {
    transactions_on_20_server_connections(300, env_or("PGLANE_LOAD_SECS", 20));
}

#[test]
#[ignore = "long: 2,000 clients for 3 minutes; run by hand and record the figures in FUZZING.md"]
fn two_thousand_clients_on_20_server_connections_for_minutes() {
    transactions_on_20_server_connections(2000, env_or("PGLANE_LOAD_SECS", 180));
}
