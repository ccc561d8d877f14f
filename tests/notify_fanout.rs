//! The notification hub at scale (issue 40): thousands of transaction-mode
//! clients LISTENing through one pglane shard with a pool of 2, each
//! getting every notification, against the same number of direct
//! listening connections to PostgreSQL.
//!
//! A benchmark, `#[ignore]`d: bench/notify-fanout runs it and
//! bench/RESULTS.md records its table. Each listener is a raw socket
//! speaking the protocol with pglane's own codec; the time a notification
//! reached a client is the kernel's receive timestamp of its socket
//! (SO_TIMESTAMPNS), so the benchmark's own reading of the sockets in turn
//! does not count (a read without a stamp takes the time it was read
//! instead; the run says how many reads were stamped); the time it was
//! sent is taken just before the NOTIFY leaves a direct connection, and
//! travels in its payload (`<seq>:<ns since the epoch>`).
//! One notification at a time: the next is sent once every listener got
//! the last.
//!
//! Knobs: PGLANE_FANOUT_CLIENTS (listeners through pglane, default 10000),
//! PGLANE_FANOUT_NOTIFICATIONS (per group, default 20),
//! PGLANE_FANOUT_COMPARE (listeners of the side-by-side groups, through
//! pglane and direct, default 1000; 0 skips them), PGLANE_FANOUT_ROUNDS
//! (side-by-side rounds, their order alternating, default 2).

mod common;

use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::BytesMut;
use common::{Pglane, Postgres};
use futures_util::StreamExt;
use pglane::protocol::backend;
use pglane::protocol::frame::{split_message, Message};
use tokio::io::{AsyncWriteExt, Interest};
use tokio::net::TcpStream;

const DATABASE: &str = "fanout";
/// Trusted by the harness's pg_hba.conf on 127.0.0.1, and by pglane here.
const USER: &str = "trustuser";
const CHANNEL: &str = "bench";
const LISTENER_APP: &str = "pglane notification listener";

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn now_ns() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_nanos() as i64
}

/// Raises this process's soft fd limit to `wanted` if the hard limit
/// allows (pglane, its child, inherits it); the soft limit it has then.
fn raise_fd_limit(wanted: u64) -> u64 {
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit/setrlimit read and write the struct passed.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim), 0);
        if lim.rlim_cur < wanted {
            lim.rlim_cur = wanted.min(lim.rlim_max);
            assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &lim), 0);
        }
    }
    lim.rlim_cur
}

/// A field of /proc/<pid>/<file> in KiB ("VmRSS:", "Pss:").
fn proc_kib(pid: u32, file: &str, field: &str) -> u64 {
    let text = std::fs::read_to_string(format!("/proc/{pid}/{file}")).unwrap_or_default();
    text.lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// PostgreSQL's memory: the proportional set size (shared pages divided
/// among the processes that map them) of the postmaster and its children,
/// in KiB.
fn postgres_pss_kib(pg: &Postgres) -> u64 {
    let postmaster = pg.postmaster_pid() as u32;
    let mut total = proc_kib(postmaster, "smaps_rollup", "Pss:");
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else { continue };
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        // pid (comm) state ppid ...: comm may hold spaces, so after its ')'.
        let ppid = stat.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().nth(1)).and_then(|p| p.parse().ok());
        if ppid == Some(postmaster) {
            total += proc_kib(pid, "smaps_rollup", "Pss:");
        }
    }
    total
}

/// Reads stamped by the kernel (the others by this process as it read).
static KERNEL_STAMPS: AtomicUsize = AtomicUsize::new(0);

/// One listening client: a socket stamped by the kernel as data arrives,
/// if it does.
struct Client {
    stream: TcpStream,
    buf: BytesMut,
    /// The receive time of the last bytes read (ns since the epoch).
    stamp: Option<i64>,
}

/// recvmsg(2) into `buf`, with the SO_TIMESTAMPNS stamp if one came.
fn recv_stamped(fd: RawFd, buf: &mut [u8]) -> io::Result<(usize, Option<i64>)> {
    let mut iov = libc::iovec { iov_base: buf.as_mut_ptr().cast(), iov_len: buf.len() };
    let mut control = [0u64; 16];
    // SAFETY: a zeroed msghdr is valid; it points at `iov` and `control`,
    // which outlive the call, and cmsgs are read within msg_controllen.
    unsafe {
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = std::mem::size_of_val(&control) as _;
        let n = libc::recvmsg(fd, &mut msg, 0);
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        let mut stamp = None;
        let mut cmsg = libc::CMSG_FIRSTHDR(&msg);
        while !cmsg.is_null() {
            if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_TIMESTAMPNS {
                let ts: libc::timespec = std::ptr::read_unaligned(libc::CMSG_DATA(cmsg).cast());
                stamp = Some(ts.tv_sec * 1_000_000_000 + ts.tv_nsec);
            }
            cmsg = libc::CMSG_NXTHDR(&msg, cmsg);
        }
        Ok((n as usize, stamp))
    }
}

impl Client {
    /// Connects to `port` and logs in to `database` (trusted), up to ReadyForQuery.
    async fn login(port: u16, database: &str, application: &str) -> Client {
        let stream = TcpStream::connect(("127.0.0.1", port)).await.expect("connect");
        stream.set_nodelay(true).unwrap();
        let on: libc::c_int = 1;
        // SAFETY: setsockopt reads an int from a valid pointer.
        let rc = unsafe {
            libc::setsockopt(
                stream.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_TIMESTAMPNS,
                (&on as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        assert_eq!(rc, 0, "SO_TIMESTAMPNS: {}", io::Error::last_os_error());
        let mut client = Client { stream, buf: BytesMut::new(), stamp: None };
        let mut out = BytesMut::new();
        pglane::protocol::startup::encode_startup(
            &mut out,
            &[("user", USER), ("database", database), ("application_name", application)],
        );
        client.stream.write_all(&out).await.unwrap();
        client.until_ready().await;
        client
    }

    /// The next message.
    async fn recv(&mut self) -> Message {
        loop {
            if let Some(m) = split_message(&mut self.buf, 1 << 20).expect("a valid message") {
                return m;
            }
            self.stream.readable().await.expect("readable");
            let mut chunk = [0u8; 4096];
            let fd = self.stream.as_raw_fd();
            match self.stream.try_io(Interest::READABLE, || recv_stamped(fd, &mut chunk)) {
                Ok((0, _)) => panic!("the connection closed"),
                Ok((n, stamp)) => {
                    self.buf.extend_from_slice(&chunk[..n]);
                    if stamp.is_some() {
                        KERNEL_STAMPS.fetch_add(1, Ordering::Relaxed);
                    }
                    self.stamp = stamp.or_else(|| Some(now_ns()));
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => panic!("read: {e}"),
            }
        }
    }

    async fn until_ready(&mut self) {
        loop {
            let m = self.recv().await;
            assert_ne!(m.tag, backend::ERROR_RESPONSE, "{:?}", backend::decode_error_fields(&m.body));
            if m.tag == backend::READY_FOR_QUERY {
                return;
            }
        }
    }

    async fn query(&mut self, sql: &str) {
        let mut out = BytesMut::new();
        pglane::protocol::frontend::query(&mut out, sql);
        self.stream.write_all(&out).await.unwrap();
        self.until_ready().await;
    }

    /// Takes `k` notifications, which must be 0..k in order: for each, the
    /// ns from its send to this socket's receipt. Counts each in `got`.
    async fn take_notifications(mut self, k: usize, got: Arc<Vec<AtomicUsize>>) -> (Client, Vec<i64>) {
        let mut latencies = Vec::with_capacity(k);
        while latencies.len() < k {
            let m = self.recv().await;
            if m.tag != backend::NOTIFICATION_RESPONSE {
                continue;
            }
            let body = &m.body[4..];
            let channel_end = body.iter().position(|&b| b == 0).unwrap();
            assert_eq!(&body[..channel_end], CHANNEL.as_bytes());
            let payload = std::str::from_utf8(&body[channel_end + 1..body.len() - 1]).unwrap();
            let (seq, sent) = payload.split_once(':').unwrap();
            let (seq, sent): (usize, i64) = (seq.parse().unwrap(), sent.parse().unwrap());
            assert_eq!(seq, latencies.len(), "notifications out of order or missing");
            latencies.push(self.stamp.unwrap() - sent);
            got[seq].fetch_add(1, Ordering::SeqCst);
        }
        (self, latencies)
    }
}

/// What one group of listeners measured.
struct Group {
    name: String,
    clients: usize,
    notifications: usize,
    connect: Duration,
    listen: Duration,
    /// pglane's RSS (KiB): before the clients connected, once they had, once they LISTENed.
    pglane_rss: [u64; 3],
    /// PostgreSQL's PSS (KiB), at the same moments.
    postgres_pss: [u64; 3],
    /// Client backends of the database once they LISTENed (the sender's not counted).
    backends: usize,
    /// SHOW NOTIFY's listening_clients and listening_connections then.
    hub: (usize, usize),
    /// From their sockets' close until the hub had let all of them go.
    leave: Duration,
    /// Latency (ns) of every delivery, by notification then client.
    latencies: Vec<Vec<i64>>,
}

struct Bench {
    pg: Postgres,
    lane: Pglane,
    k: usize,
}

impl Bench {
    fn backends(&self) -> usize {
        self.pg
            .psql(&format!(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = '{DATABASE}' \
                 AND backend_type = 'client backend' AND application_name <> 'fanout sender'"
            ))
            .parse()
            .unwrap()
    }

    /// `n` clients log in to `port` (each running one `SELECT 1`), LISTEN,
    /// get `k` notifications, and leave.
    async fn group(&self, name: &str, port: u16, database: &str, n: usize) -> Group {
        let memory = || (proc_kib(self.lane.pid(), "status", "VmRSS:"), postgres_pss_kib(&self.pg));
        let before = memory();
        let started = Instant::now();
        let logins = futures_util::stream::iter(0..n).map(|_| async move {
            let mut c = Client::login(port, database, "fanout listener").await;
            c.query("SELECT 1").await;
            c
        });
        let mut clients: Vec<Client> = tokio::time::timeout(Duration::from_secs(180), logins.buffer_unordered(64).collect())
            .await
            .unwrap_or_else(|_| panic!("{name}: {n} logins took over 180 s"));
        let connect = started.elapsed();
        let connected = memory();
        let started = Instant::now();
        let listen_sql = format!("LISTEN {CHANNEL}");
        let listens = futures_util::stream::iter(clients.iter_mut()).for_each_concurrent(64, |c| c.query(&listen_sql));
        tokio::time::timeout(Duration::from_secs(120), listens)
            .await
            .unwrap_or_else(|_| panic!("{name}: LISTENs took over 120 s"));
        let listen = started.elapsed();
        let listened = memory();
        let backends = self.backends();
        let hub = if port == self.lane.port {
            let shown = self.show_notify().await;
            (shown["listening_clients"] as usize, shown["listening_connections"] as usize)
        } else {
            (0, 0)
        };

        let got: Arc<Vec<AtomicUsize>> = Arc::new((0..self.k).map(|_| AtomicUsize::new(0)).collect());
        let k = self.k;
        let tasks: Vec<_> = clients.into_iter().map(|c| tokio::spawn(c.take_notifications(k, got.clone()))).collect();
        let mut config = tokio_postgres::Config::new();
        config.host("127.0.0.1").port(self.pg.port).user(USER).dbname(DATABASE).application_name("fanout sender");
        let (sender, connection) = config.connect(tokio_postgres::NoTls).await.unwrap();
        tokio::spawn(connection);
        for seq in 0..k {
            sender.simple_query(&format!("NOTIFY {CHANNEL}, '{seq}:{}'", now_ns())).await.unwrap();
            let deadline = Instant::now() + Duration::from_secs(60);
            while got[seq].load(Ordering::SeqCst) < n {
                assert!(
                    Instant::now() < deadline,
                    "{name}: notification {seq} reached {} of {n} in 60 s",
                    got[seq].load(Ordering::SeqCst)
                );
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let mut latencies = vec![Vec::with_capacity(n); k];
        let mut clients = Vec::with_capacity(n);
        for task in tasks {
            let (client, of_client) = tokio::time::timeout(Duration::from_secs(30), task).await.expect("a listener").unwrap();
            for (seq, latency) in of_client.into_iter().enumerate() {
                latencies[seq].push(latency);
            }
            clients.push(client);
        }
        assert_eq!(latencies.iter().map(Vec::len).sum::<usize>(), n * k, "{name}: every client got every notification");
        drop(clients);
        let leaving = Instant::now();
        self.until_nobody_listens().await;
        let leave = leaving.elapsed();
        Group {
            name: name.to_owned(),
            clients: n,
            notifications: k,
            connect,
            listen,
            pglane_rss: [before.0, connected.0, listened.0],
            postgres_pss: [before.1, connected.1, listened.1],
            backends,
            hub,
            leave,
            latencies,
        }
    }

    /// SHOW NOTIFY's row (one shard), by column name.
    async fn show_notify(&self) -> std::collections::HashMap<String, u64> {
        common::show_numbers(self.lane.port, USER, "", "SHOW NOTIFY").await
    }

    /// Until nobody listens through pglane any more (the last group left).
    async fn until_nobody_listens(&self) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while self.show_notify().await["listening_clients"] > 0 {
            assert!(Instant::now() < deadline, "listeners still subscribed 60 s after they left");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

/// The `q` quantile of sorted `v`.
fn quantile(v: &[i64], q: f64) -> i64 {
    v[((v.len() - 1) as f64 * q).round() as usize]
}

fn ms(ns: i64) -> String {
    format!("{:.2}", ns as f64 / 1e6)
}

fn per_client_kib(delta: u64, n: usize) -> String {
    format!("{:.2}", delta as f64 / n as f64)
}

fn table(groups: &[Group]) -> String {
    let mut out = String::from(
        "| group | listeners × notifications | delivery p50 / p99 / max ms | last listener p50 / max ms | backends | pglane RSS per client: connected / LISTEN KiB | PostgreSQL PSS added MiB | logins / LISTENs s |\n\
         |---|---|---|---|---|---|---|---|\n",
    );
    for g in groups {
        let mut all: Vec<i64> = g.latencies.iter().flatten().copied().collect();
        all.sort_unstable();
        let mut last: Vec<i64> = g.latencies.iter().map(|l| *l.iter().max().unwrap()).collect();
        last.sort_unstable();
        let [rss0, rss1, rss2] = g.pglane_rss;
        let [pss0, _, pss2] = g.postgres_pss;
        out += &format!(
            "| {} | {} × {} | {} / {} / {} | {} / {} | {} | {} / {} | {:.1} | {:.1} / {:.1} |\n",
            g.name,
            g.clients,
            g.notifications,
            ms(quantile(&all, 0.5)),
            ms(quantile(&all, 0.99)),
            ms(*all.last().unwrap()),
            ms(quantile(&last, 0.5)),
            ms(*last.last().unwrap()),
            g.backends,
            if g.name == "direct" { "–".into() } else { per_client_kib(rss1.saturating_sub(rss0), g.clients) },
            if g.name == "direct" { "–".into() } else { per_client_kib(rss2.saturating_sub(rss1), g.clients) },
            (pss2 as f64 - pss0 as f64) / 1024.0,
            g.connect.as_secs_f64(),
            g.listen.as_secs_f64(),
        );
    }
    out
}

#[tokio::test]
#[ignore = "a benchmark: see bench/RESULTS.md (bench/notify-fanout)"]
async fn bench_ten_thousand_listeners() {
    let n = env_or("PGLANE_FANOUT_CLIENTS", 10_000);
    let k = env_or("PGLANE_FANOUT_NOTIFICATIONS", 20);
    let compare = env_or("PGLANE_FANOUT_COMPARE", 1000);
    let rounds = env_or("PGLANE_FANOUT_ROUNDS", 2);
    let fds = raise_fd_limit((n.max(compare) + 1000) as u64);
    assert!(fds as usize > n.max(compare) + 100, "RLIMIT_NOFILE is {fds}: too low for {n} clients (raise the hard limit)");
    let pg = Postgres::start_new_with(&format!("max_connections = {}", compare + 100), "");
    pg.fresh_database(DATABASE, None);
    let lane = Pglane::start_with_args(
        &format!(
            "pool_mode = \"transaction\"\nauth_type = \"trust\"\nadmin_users = [\"{USER}\"]\nmax_client_conn = {}\n\
             [databases.app]\nhost = \"127.0.0.1\"\nport = {}\ndbname = \"{DATABASE}\"\npool_size = 2\n[users.{USER}]\n",
            n.max(compare) + 100,
            pg.port
        ),
        &["--cores", "1"],
    );
    let bench = Bench { pg, lane, k };
    let mut groups = Vec::new();

    let big = bench.group("pglane", bench.lane.port, "app", n).await;
    let shown = bench.show_notify().await;
    eprintln!("SHOW NOTIFY after the {n} listeners left: {shown:?}");
    assert!(big.backends <= 3, "{} backends for {n} listeners: the pool's 2 and one listening connection at most", big.backends);
    assert_eq!(shown["delivered"], (n * k) as u64, "the hub delivered each notification to each listener once");
    assert_eq!(big.hub, (n, 1), "SHOW NOTIFY's listening_clients, listening_connections while they listened");
    eprintln!("the hub had unsubscribed all {n} listeners {:?} after they closed their sockets", big.leave);
    groups.push(big);

    for round in 0..if compare > 0 { rounds } else { 0 } {
        let (first, second) = if round % 2 == 0 { ("pglane", "direct") } else { ("direct", "pglane") };
        for which in [first, second] {
            let group = match which {
                "pglane" => bench.group("pglane", bench.lane.port, "app", compare).await,
                _ => bench.group("direct", bench.pg.port, DATABASE, compare).await,
            };
            if which == "direct" {
                assert!(group.backends >= compare, "each direct listener has a backend");
            }
            groups.push(group);
        }
    }
    let listeners: String = bench.pg.psql(&format!(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = '{DATABASE}' AND application_name = '{LISTENER_APP}'"
    ));
    eprintln!("listening connections left: {listeners}");
    println!(
        "\n{n} listeners through one pglane shard (pool_size 2); then {compare} through pglane and {compare} direct, \
         {rounds} rounds alternating; {k} notifications each, one at a time; latency from the NOTIFY's send to the \
         listener socket's receive stamp ({} of the reads stamped by the kernel)\n",
        KERNEL_STAMPS.load(Ordering::Relaxed)
    );
    println!("{}", table(&groups));
    // The admin consoles' connection tasks close their sockets once polled:
    // otherwise pglane waits shutdown_timeout for them at the end.
    tokio::time::sleep(Duration::from_millis(200)).await;
}
