//! Read routing (`read_routing = "standbys"`, issue 41) against a real
//! primary and two real streaming standbys made with `pg_basebackup -R`,
//! one of them replaying with `recovery_min_apply_delay`. What each shows:
//!
//! - many clients each writing a row and reading it back at once never read
//!   a stale count (read-your-writes), while the reads of clients that never
//!   wrote are served by the standbys, both of them;
//! - what is not provably a read (`select nextval(...)`) runs on the
//!   primary, and a `BEGIN READ ONLY` transaction on a standby; named
//!   statements are judged by their text, whichever request binds them;
//! - a position carried in `pglane.min_lsn` keeps a client off a standby
//!   that has not replayed it;
//! - a RELOAD that removes a standby from the host list, or turns routing
//!   off, is followed by clients connected before it and after;
//! - a request taken for a read that writes, refused by the standby
//!   (25006), runs again on the primary, and the client gets only that; so
//!   does a read under serializable isolation, which no standby runs;
//! - readers go on when a standby stops and another is promoted, with no
//!   error (a read in flight on the stopped one runs again on the
//!   primary), and their last reads are on the primary.
//!
//! The primary runs with `synchronous_commit = on` here (the harness's
//! default is off), so that a commit's WAL reaches the standbys promptly.

mod common;
#[path = "common/raw.rs"]
mod raw;

use std::time::{Duration, Instant};

use common::{Pglane, Postgres};

/// The standbys' apply delay.
const DELAY: &str = "300ms";

/// A primary with table `kv` and sequence `seq`, a standby, and a standby
/// replaying `DELAY` behind.
fn cluster() -> (Postgres, Postgres, Postgres) {
    let primary = Postgres::start_new_with("synchronous_commit = on\nwal_writer_delay = 10ms", "");
    primary.psql("create table kv(client int, n int); create sequence seq; grant all on kv, seq to public");
    let fast = Postgres::start_standby_of(&primary);
    let slow = Postgres::start_standby_of(&primary);
    slow.psql(&format!("alter system set recovery_min_apply_delay = '{DELAY}'"));
    slow.psql("select pg_reload_conf()");
    primary.wait_for_standby(&fast, Duration::from_secs(60));
    primary.wait_for_standby(&slow, Duration::from_secs(60));
    assert!(fast.is_in_recovery() && slow.is_in_recovery() && !primary.is_in_recovery());
    (primary, fast, slow)
}

/// pglane on two shards routing the reads of database `app` (on `ports`,
/// the primary first) to its standbys.
fn pglane(ports: &[u16]) -> Pglane {
    Pglane::start_with_args(&config(ports, "standbys"), &["--cores", "2"])
}

/// The config of [`pglane`], with `read_routing` set to `routing`.
fn config(ports: &[u16], routing: &str) -> String {
    let hosts = vec!["\"127.0.0.1\""; ports.len()].join(", ");
    let ports = ports.iter().map(u16::to_string).collect::<Vec<_>>().join(", ");
    format!(
        "pool_mode = \"transaction\"\nauth_type = \"trust\"\nadmin_users = [\"postgres\"]\n\
         [databases.app]\nhost = [{hosts}]\nport = [{ports}]\ndbname = \"postgres\"\nuser = \"trustuser\"\n\
         pool_size = 8\ntarget_session_attrs = \"read-write\"\nread_routing = \"{routing}\"\n\
         [users.postgres]\n"
    )
}

/// SHOW ROUTING's `*` rows (one per shard whose clients routed), summed,
/// and the reads each host's pool served, summed over shards.
async fn show_routing(lane: &Pglane) -> (std::collections::HashMap<String, u64>, std::collections::HashMap<String, u64>) {
    show_routing_of(lane, None).await
}

async fn client(lane: &Pglane) -> tokio_postgres::Client {
    common::connect(lane.port, "postgres", "", "app").await
}

/// The first row of a simple query's answer, as text.
async fn row(c: &tokio_postgres::Client, sql: &str) -> Result<Vec<String>, tokio_postgres::Error> {
    for message in c.simple_query(sql).await? {
        if let tokio_postgres::SimpleQueryMessage::Row(r) = message {
            return Ok((0..r.len()).map(|i| r.get(i).unwrap_or("").to_owned()).collect());
        }
    }
    panic!("no row for {sql}");
}

/// A new client, once its reads (it never wrote) go to a standby: its
/// shard's monitor has seen the standbys (up to 20 s).
async fn reader_on_a_standby(lane: &Pglane) -> tokio_postgres::Client {
    let c = client(lane).await;
    let deadline = Instant::now() + Duration::from_secs(20);
    while row(&c, "select pg_is_in_recovery()").await.unwrap()[0] != "t" {
        assert!(Instant::now() < deadline, "no read of a new client reached a standby in 20 s\n{}", lane.log());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    c
}

/// Waits (up to 20 s) until a client that never wrote reads from a
/// standby: the monitor has seen the standbys.
async fn until_standbys_serve(lane: &Pglane) {
    reader_on_a_standby(lane).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writers_read_their_writes_and_readers_use_the_standbys() {
    let (primary, fast, slow) = cluster();
    let lane = pglane(&[primary.port, fast.port, slow.port]);
    until_standbys_serve(&lane).await;

    const WRITERS: i32 = 12;
    const PAIRS: i32 = 100;
    const READERS: usize = 4;
    const READS: usize = 150;
    let port = lane.port;
    let writers = (0..WRITERS).map(|w| {
        tokio::spawn(async move {
            let c = common::connect(port, "postgres", "", "app").await;
            let (mut stale, mut on_standby) = (0, 0);
            for i in 1..=PAIRS {
                c.simple_query(&format!("insert into kv values ({w}, {i})")).await.unwrap();
                let r = row(&c, &format!("select count(*), pg_is_in_recovery() from kv where client = {w}")).await.unwrap();
                if r[0] != i.to_string() {
                    stale += 1;
                }
                on_standby += usize::from(r[1] == "t");
            }
            (stale, on_standby)
        })
    });
    let readers = (0..READERS).map(|_| {
        tokio::spawn(async move {
            let c = common::connect(port, "postgres", "", "app").await;
            let mut ports = Vec::new();
            for _ in 0..READS {
                let r = row(&c, "select inet_server_port(), pg_is_in_recovery()").await.unwrap();
                ports.push((r[0].parse::<u16>().unwrap(), r[1] == "t"));
            }
            ports
        })
    });
    let readers: Vec<_> = readers.collect();
    let (mut stale, mut writer_reads_on_standbys) = (0, 0);
    for w in writers {
        let (s, on) = w.await.unwrap();
        stale += s;
        writer_reads_on_standbys += on;
    }
    let mut served = Vec::new();
    for r in readers {
        served.extend(r.await.unwrap());
    }
    let on_standbys = served.iter().filter(|(_, recovery)| *recovery).count();
    let on_fast = served.iter().filter(|(p, _)| *p == fast.port).count();
    let on_slow = served.iter().filter(|(p, _)| *p == slow.port).count();
    eprintln!(
        "{} write-then-read pairs: {stale} stale, {writer_reads_on_standbys} reads on standbys; \
         readers: {on_standbys} of {} reads on standbys ({on_fast} fast, {on_slow} delayed)",
        WRITERS * PAIRS,
        served.len()
    );
    assert_eq!(stale, 0, "a client read a count older than its own write");
    assert_eq!(primary.psql("select count(*) from kv"), (WRITERS * PAIRS).to_string());
    // Clients that never wrote read from the standbys, both of them (the
    // primary only if the monitor lost sight of both for a moment).
    assert!(on_standbys * 100 >= served.len() * 95, "{on_standbys} of {} reads on standbys", served.len());
    assert!(on_fast > 0 && on_slow > 0, "fast {on_fast}, delayed {on_slow}");
    // The console counts what the router did: the readers' reads and some
    // of the writers' on standbys, stale reads avoided for the writers, the
    // inserts on the primary.
    let (totals, reads) = show_routing(&lane).await;
    eprintln!("SHOW ROUTING: {totals:?}, reads per host: {reads:?}");
    assert!(totals["reads"] >= (on_standbys + writer_reads_on_standbys) as u64, "{totals:?}");
    assert!(totals["stale_reads_avoided"] > 0, "{totals:?}");
    assert!(totals["to_primary"] >= (WRITERS * PAIRS) as u64, "{totals:?}");
    assert!(reads[&format!("127.0.0.1:{}", fast.port)] > 0 && reads[&format!("127.0.0.1:{}", slow.port)] > 0, "{reads:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_is_not_a_read_runs_on_the_primary() {
    let (primary, fast, slow) = cluster();
    let lane = pglane(&[primary.port, fast.port, slow.port]);
    until_standbys_serve(&lane).await;
    let c = client(&lane).await;
    // Looks like a read, writes: never sent to a standby, where it would fail.
    for want in 1..=5 {
        let r = row(&c, "select nextval('seq'), pg_is_in_recovery()").await.unwrap();
        assert_eq!(r, [want.to_string(), "f".to_owned()]);
    }
    // A client that never wrote: a fresh one (once its shard's monitor has
    // seen the standbys). Its read-only transaction runs on a standby, and
    // a write in it fails as it would on the primary.
    let c = reader_on_a_standby(&lane).await;
    c.simple_query("begin read only").await.unwrap();
    assert_eq!(row(&c, "select pg_is_in_recovery()").await.unwrap(), ["t"]);
    let e = c.simple_query("insert into kv values (0, 0)").await.unwrap_err();
    assert_eq!(e.code(), Some(&tokio_postgres::error::SqlState::READ_ONLY_SQL_TRANSACTION), "{e}");
    c.simple_query("rollback").await.unwrap();
    // A plain BEGIN, and what follows it, goes to the primary.
    c.simple_query("begin").await.unwrap();
    assert_eq!(row(&c, "select pg_is_in_recovery()").await.unwrap(), ["f"]);
    c.simple_query("commit").await.unwrap();
    // Its unnamed extended-protocol reads go to a standby too.
    let c = reader_on_a_standby(&lane).await;
    let rows = c.query_typed("select pg_is_in_recovery()", &[]).await.unwrap();
    assert!(rows[0].get::<_, bool>(0), "an unnamed-statement read went to the primary");

    // Named statements (tokio-postgres prepares every query so, as asyncpg
    // and pgjdbc do after a few runs) are judged by their text: prepared in
    // one request, bound in later ones, reads on a standby and the rest on
    // the primary.
    let c = reader_on_a_standby(&lane).await;
    let recovery = c.prepare("select pg_is_in_recovery()").await.unwrap();
    for _ in 0..5 {
        assert!(c.query_one(&recovery, &[]).await.unwrap().get::<_, bool>(0), "a named read went to the primary");
    }
    // (Not a read: the client's reads go to the primary until the monitor
    // has looked at it again, a few ms; see the test of min LSNs below.)
    let next = c.prepare("select nextval('seq')::int, pg_is_in_recovery()").await.unwrap();
    for _ in 0..5 {
        assert!(!c.query_one(&next, &[]).await.unwrap().get::<_, bool>(1), "nextval went to a standby");
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(c.query_one(&recovery, &[]).await.unwrap().get::<_, bool>(0), "a named read went to the primary");
    // And a client's named reads see its named writes.
    let insert = c.prepare("insert into kv values ($1, $2)").await.unwrap();
    let count = c.prepare("select count(*)::int from kv where client = $1").await.unwrap();
    let mut on_standby = 0;
    for i in 1..=30 {
        c.execute(&insert, &[&-3i32, &i]).await.unwrap();
        let row = c.query_one(&count, &[&-3i32]).await.unwrap();
        assert_eq!(row.get::<_, i32>(0), i, "a named read missed the client's own write");
        on_standby += i32::from(c.query_one(&recovery, &[]).await.unwrap().get::<_, bool>(0));
    }
    eprintln!("named statements: {on_standby} of 30 reads after a write on a standby");
}

/// A request pglane takes for a read but that writes (here a user's
/// `lower` for a type of its own, which inserts: `lower` is on the list of
/// built-ins that never write) fails on the standby with 25006 before it
/// does anything; pglane runs it again on the primary before anything of it
/// reached the client, which gets the primary's answer, once. By simple
/// query, the unnamed statement, a statement named in an earlier request,
/// and one named, bound and run in one request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_a_standby_refuses_as_a_write_runs_again_on_the_primary() {
    let (primary, fast, slow) = cluster();
    primary.psql(
        "create type mood as enum ('ok'); \
         create function lower(mood) returns text language sql as $$ insert into kv values (-9, 1) returning 'wrote' $$",
    );
    primary.wait_for_standby(&fast, Duration::from_secs(60));
    primary.wait_for_standby(&slow, Duration::from_secs(60));
    let lane = pglane(&[primary.port, fast.port, slow.port]);
    // Fresh clients, which never wrote, each once its reads go to a
    // standby (its shard's monitor has seen them).
    let c = reader_on_a_standby(&lane).await;
    assert_eq!(row(&c, "select lower('ok'::mood), pg_is_in_recovery()").await.unwrap(), ["wrote", "f"]);
    let c = reader_on_a_standby(&lane).await;
    let rows = c.query_typed("select lower('ok'::mood), pg_is_in_recovery()", &[]).await.unwrap();
    assert_eq!((rows[0].get::<_, String>(0).as_str(), rows[0].get::<_, bool>(1)), ("wrote", false));
    let c = reader_on_a_standby(&lane).await;
    let named = c.prepare("select lower('ok'::mood), pg_is_in_recovery()").await.unwrap();
    let r = c.query_one(&named, &[]).await.unwrap();
    assert_eq!((r.get::<_, String>(0).as_str(), r.get::<_, bool>(1)), ("wrote", false));
    // A request that Parses a name and runs it at once (pgjdbc's and
    // pgbench -M prepared's first run), then a Bind of that name: the name
    // the first run gave the client is forgotten before the second.
    let messages = tokio::task::block_in_place(|| {
        let mut raw = raw::RawClient::login(lane.port, "postgres", "app");
        let deadline = Instant::now() + Duration::from_secs(20);
        while raw::first_column(&raw::query(&mut raw, "select pg_is_in_recovery()")) != ["t"] {
            assert!(Instant::now() < deadline, "the raw client's reads never reached a standby");
            std::thread::sleep(Duration::from_millis(20));
        }
        let mut out = bytes::BytesMut::new();
        pglane::protocol::frontend::parse(&mut out, "s1", "select lower('ok'::mood), pg_is_in_recovery()", &[]);
        pglane::protocol::frontend::bind(&mut out, "", "s1", &[], std::iter::empty(), &[]);
        pglane::protocol::frontend::execute(&mut out, "", 0);
        pglane::protocol::frontend::sync(&mut out);
        raw.send(&out);
        let first = raw.until_ready();
        out.clear();
        pglane::protocol::frontend::bind(&mut out, "", "s1", &[], std::iter::empty(), &[]);
        pglane::protocol::frontend::execute(&mut out, "", 0);
        pglane::protocol::frontend::sync(&mut out);
        raw.send(&out);
        [first, raw.until_ready()]
    });
    for answer in &messages {
        assert_eq!((raw::error_code(answer), raw::first_column(answer)), (None, vec!["wrote".to_owned()]), "{answer:?}");
    }
    // Each ran once, on the primary: the raw client's first run after a
    // retry there, the second too if its position after it is not learned
    // yet (read-your-writes), else after one.
    assert_eq!(primary.psql("select count(*) from kv where client = -9"), "5");
    let (routers, _) = show_routing(&lane).await;
    let retried = routers["retried_on_primary"];
    assert!(retried == 4 || retried == 5, "{routers:?}");

    // A standby runs no serializable transaction (0A000, "cannot use
    // serializable mode in a hot standby"), which the primary would: the
    // first read of a client whose default isolation is serializable runs
    // again on the primary, and its later reads go there at once.
    let c = reader_on_a_standby(&lane).await;
    c.simple_query("set default_transaction_isolation = serializable").await.unwrap();
    let isolated_read = "select pg_is_in_recovery(), current_setting('transaction_isolation')";
    // Its reads go to the primary until the position after its SET is
    // learned (read-your-writes), then one to a standby, and back.
    let deadline = Instant::now() + Duration::from_secs(20);
    while show_routing(&lane).await.0["retried_on_primary"] == retried {
        assert_eq!(row(&c, isolated_read).await.unwrap(), ["f", "serializable"]);
        assert!(Instant::now() < deadline, "no read of the serializable client reached a standby");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    for _ in 0..5 {
        assert_eq!(row(&c, isolated_read).await.unwrap(), ["f", "serializable"]);
    }
    let (routers, _) = show_routing(&lane).await;
    assert_eq!(routers["retried_on_primary"], retried + 1, "once: {routers:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_carried_position_keeps_a_client_off_a_standby_behind_it() {
    let (primary, _fast, slow) = cluster();
    // Only the delayed standby: a read right after a write elsewhere finds
    // it behind.
    let lane = pglane(&[primary.port, slow.port]);
    until_standbys_serve(&lane).await;
    for i in 1..=5 {
        let writer = client(&lane).await;
        writer.simple_query(&format!("insert into kv values (-1, {i})")).await.unwrap();
        let lsn = row(&writer, "select pg_current_wal_insert_lsn()").await.unwrap().remove(0);
        // Another client, told where the write ended.
        let reader = client(&lane).await;
        reader.simple_query(&format!("set pglane.min_lsn = '{lsn}'")).await.unwrap();
        let r = row(&reader, "select count(*) from kv where client = -1").await.unwrap();
        assert_eq!(r[0], i.to_string(), "a read with pglane.min_lsn = {lsn} missed the write");
    }
    // Without it, such a client reads from the standby (which is behind by
    // its delay: the count it sees may be old, which is what min_lsn is for).
    let reader = reader_on_a_standby(&lane).await;
    // Reads that go to the primary (no standby is that far) wrote nothing:
    // no position is learned after them. (The SET went to the primary: its
    // position is learned at the first read after the monitor's next look.)
    reader.simple_query("set pglane.min_lsn = 'FFFFFFFF/FFFFFFFF'").await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(row(&reader, "select pg_is_in_recovery()").await.unwrap(), ["f"]);
    let (before, _) = show_routing(&lane).await;
    for _ in 0..20 {
        assert_eq!(row(&reader, "select pg_is_in_recovery()").await.unwrap(), ["f"]);
    }
    let (after, _) = show_routing(&lane).await;
    assert_eq!(after["to_primary"] - before["to_primary"], 20, "{before:?} {after:?}");
    assert_eq!(after["positions_learned"], before["positions_learned"], "learned after a read: {before:?} {after:?}");
    // After a write, the next read learns the position from the monitor:
    // no question of its own to the primary.
    reader.simple_query("insert into kv values (-2, 0)").await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(row(&reader, "select pg_is_in_recovery()").await.unwrap(), ["f"]);
    let (written, _) = show_routing(&lane).await;
    assert_eq!(written["positions_learned"], after["positions_learned"] + 1, "not learned after a write");
}

/// The ports of the servers `n` reads of `c` ran on.
async fn read_ports(c: &tokio_postgres::Client, n: usize) -> Vec<u16> {
    let mut ports = Vec::new();
    for _ in 0..n {
        ports.push(row(c, "select inet_server_port()").await.unwrap()[0].parse().unwrap());
    }
    ports
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_changes_where_reads_go() {
    let (primary, fast, slow) = cluster();
    let lane = pglane(&[primary.port, fast.port, slow.port]);
    until_standbys_serve(&lane).await;
    let before = client(&lane).await;
    let ports = read_ports(&before, 40).await;
    assert!(ports.contains(&slow.port) && ports.contains(&fast.port), "both standbys serve reads: {ports:?}");

    // The delayed standby leaves the host list: no read goes there, from a
    // client that connected before the reload or after it.
    lane.write_config(&config(&[primary.port, fast.port], "standbys"));
    let console = common::connect(lane.port, "postgres", "", "pgbouncer").await;
    console.simple_query("RELOAD").await.unwrap();
    let after = client(&lane).await;
    // A new router finds the standby again within a few of its monitor's polls.
    tokio::time::sleep(Duration::from_millis(300)).await;
    for c in [&before, &after] {
        let ports = read_ports(c, 40).await;
        assert!(!ports.contains(&slow.port), "a read went to the host the reload removed: {ports:?}");
        assert!(ports.contains(&fast.port), "no read on the standby left: {ports:?}");
    }
    // Read routing turned off: every read goes to the primary.
    lane.write_config(&config(&[primary.port, fast.port], "off"));
    console.simple_query("RELOAD").await.unwrap();
    for c in [&before, &after] {
        assert!(read_ports(c, 20).await.iter().all(|&p| p == primary.port), "a read left the primary with routing off");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_go_on_when_a_standby_stops_and_another_is_promoted() {
    let (primary, fast, slow) = cluster();
    let lane = pglane(&[primary.port, fast.port, slow.port]);
    until_standbys_serve(&lane).await;
    const READERS: usize = 4;
    let port = lane.port;
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let readers: Vec<_> = (0..READERS)
        .map(|_| {
            let stop = stop.clone();
            tokio::spawn(async move {
                // Reads (bounded), reconnecting after an error as
                // applications do; what served each, and the errors.
                let mut c = common::connect(port, "postgres", "", "app").await;
                let (mut served, mut errors) = (Vec::new(), Vec::new());
                for _ in 0..20_000 {
                    if stop.load(std::sync::atomic::Ordering::SeqCst) {
                        break;
                    }
                    match row(&c, "select inet_server_port()").await {
                        Ok(r) => served.push(r[0].parse::<u16>().unwrap()),
                        Err(e) => {
                            errors.push(e.code().map_or_else(|| e.to_string(), |c| c.code().to_owned()));
                            c = common::connect(port, "postgres", "", "app").await;
                        }
                    }
                }
                (served, errors)
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let at_stop = Instant::now();
    tokio::task::block_in_place(|| slow.stop_server());
    tokio::time::sleep(Duration::from_millis(500)).await;
    tokio::task::block_in_place(|| fast.promote());
    let promoted = Instant::now();
    tokio::time::sleep(Duration::from_millis(1000)).await;
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let (mut served, mut errors) = (Vec::new(), Vec::new());
    for r in readers {
        let (s, e) = r.await.unwrap();
        served.push(s);
        errors.extend(e);
    }
    let total: usize = served.iter().map(Vec::len).sum();
    let count = |port: u16| served.iter().flatten().filter(|p| **p == port).count();
    eprintln!(
        "{total} reads: primary {}, standby promoted {}, standby stopped {}; {} errors: {errors:?} \
         (stop to promote {:?})",
        count(primary.port),
        count(fast.port),
        count(slow.port),
        errors.len(),
        promoted - at_stop
    );
    // Reads went on, and ended on the primary: the promoted standby is a
    // primary now (not a standby of it), the stopped one is gone.
    for s in &served {
        let last = &s[s.len().saturating_sub(20)..];
        assert!(last.len() == 20 && last.iter().all(|p| *p == primary.port), "last reads served by {last:?}");
    }
    assert!(count(fast.port) > 0 && count(slow.port) > 0, "the standbys served no reads before the events");
    // A read in flight on the stopped standby, or sent on one of its
    // connections before pglane saw it close, runs again on the primary:
    // nothing of it had reached the client.
    assert!(errors.is_empty(), "{errors:?}");
    let (routers, _) = show_routing(&lane).await;
    eprintln!("reads run again on the primary: {}", routers["retried_on_primary"]);
}

/// Issue 41's benchmark (`bench/read-routing`; ignored, run on purpose):
/// pgbench through one pglane, to a database served by the primary alone
/// and to the same database with `read_routing = "standbys"` over the
/// primary and the two standbys of [`cluster`] (one replaying 300 ms
/// behind), select-only (simple and named statements) and a mixed script
/// (a write, a read of it, three other reads), in interleaved rounds; tps of each, their ratio, and
/// where the routed transactions ran (SHOW ROUTING). Prints a markdown
/// table.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore]
async fn bench_read_routing() {
    let seconds = std::env::var("PGLANE_ROUTING_SECONDS").unwrap_or_else(|_| "8".into());
    let rounds: usize = std::env::var("PGLANE_ROUTING_ROUNDS").ok().and_then(|r| r.parse().ok()).unwrap_or(3);
    let clients = std::env::var("PGLANE_ROUTING_CLIENTS").unwrap_or_else(|_| "8".into());
    let (primary, fast, slow) = cluster();
    primary.psql("create database bench");
    common::pgbench(primary.port, common::SUPERUSER, &["-i", "-q", "-s", "4", "bench"]);
    primary.psql_db("bench", "grant all on all tables in schema public to public");
    primary.wait_for_standby(&fast, Duration::from_secs(60));
    primary.wait_for_standby(&slow, Duration::from_secs(60));
    let ports = [primary.port, fast.port, slow.port].map(|p| p.to_string()).join(", ");
    let lane = Pglane::start_with_args(
        &format!(
            "pool_mode = \"transaction\"\nauth_type = \"trust\"\nadmin_users = [\"postgres\"]\n\
             [databases.routed]\nhost = [\"127.0.0.1\", \"127.0.0.1\", \"127.0.0.1\"]\nport = [{ports}]\n\
             dbname = \"bench\"\nuser = \"trustuser\"\npool_size = 8\ntarget_session_attrs = \"read-write\"\n\
             read_routing = \"standbys\"\n\
             [databases.primary]\nhost = \"127.0.0.1\"\nport = {}\ndbname = \"bench\"\nuser = \"trustuser\"\npool_size = 8\n\
             [users.postgres]\n",
            primary.port
        ),
        &["--cores", "2"],
    );
    let mixed = std::env::temp_dir().join(format!("pglane-routing-mixed-{}.sql", std::process::id()));
    std::fs::write(
        &mixed,
        "\\set aid random(1, 100000 * :scale)\n\\set delta random(-5000, 5000)\n\
         UPDATE pgbench_accounts SET abalance = abalance + :delta WHERE aid = :aid;\n\
         SELECT abalance FROM pgbench_accounts WHERE aid = :aid;\n\
         \\set a2 random(1, 100000 * :scale)\nSELECT abalance FROM pgbench_accounts WHERE aid = :a2;\n\
         \\set a3 random(1, 100000 * :scale)\nSELECT abalance FROM pgbench_accounts WHERE aid = :a3;\n\
         \\set a4 random(1, 100000 * :scale)\nSELECT abalance FROM pgbench_accounts WHERE aid = :a4;\n",
    )
    .unwrap();
    let mixed_arg = format!("--file={}", mixed.display());
    // (name, pgbench -M, arguments): -M prepared is server-side named
    // statements, as most drivers use them.
    let scripts: [(&str, &str, Vec<&str>); 3] = [
        ("select-only (-S)", "simple", vec!["-S"]),
        ("select-only (-S), -M prepared", "prepared", vec!["-S"]),
        ("mixed: 1 write, its read, 3 reads", "simple", vec![&mixed_arg]),
    ];
    let tps = |out: &str| -> f64 {
        let line = out.lines().find(|l| l.starts_with("tps = ")).unwrap_or_else(|| panic!("no tps in {out}"));
        line["tps = ".len()..].split_whitespace().next().unwrap().parse().unwrap()
    };
    let mut table = String::from(
        "| script | primary only, tps | primary + 2 standbys, tps | ratio | routed transactions: standby / delayed standby / primary | stale reads avoided |\n|---|---|---|---|---|---|\n",
    );
    for (name, mode, args) in &scripts {
        let (mut alone, mut routed) = (Vec::new(), Vec::new());
        let (before, before_hosts) = show_routing_of(&lane, Some("routed")).await;
        for round in 0..rounds {
            // Interleaved, the order turned each round.
            for target in if round % 2 == 0 { ["primary", "routed"] } else { ["routed", "primary"] } {
                let mut all = vec!["-n", "-M", mode, "-c", &clients, "-j", "2", "-T", &seconds];
                all.extend(args.iter().copied());
                all.push(target);
                let out = tokio::task::block_in_place(|| common::pgbench(lane.port, "postgres", &all));
                if target == "primary" { &mut alone } else { &mut routed }.push(tps(&out));
            }
        }
        let (after, after_hosts) = show_routing_of(&lane, Some("routed")).await;
        let delta = |name: &str| after.get(name).copied().unwrap_or(0) - before.get(name).copied().unwrap_or(0);
        let served_by = |port: u16| -> u64 {
            after_hosts
                .iter()
                .filter(|(host, _)| host.ends_with(&format!(":{port}")))
                .map(|(host, n)| n - before_hosts.get(host).copied().unwrap_or(0))
                .sum()
        };
        let (on_fast, on_slow) = (served_by(fast.port), served_by(slow.port));
        let median = |v: &mut Vec<f64>| {
            v.sort_by(|a, b| a.partial_cmp(b).unwrap());
            v[v.len() / 2]
        };
        let (a, r) = (median(&mut alone), median(&mut routed));
        let to_primary = delta("to_primary");
        let share = |n: u64| 100.0 * n as f64 / (on_fast + on_slow + to_primary).max(1) as f64;
        table.push_str(&format!(
            "| {name} | {a:.0} | {r:.0} | {:.2}x | {:.0}% / {:.0}% / {:.0}% | {} |\n",
            r / a,
            share(on_fast),
            share(on_slow),
            share(to_primary),
            delta("stale_reads_avoided"),
        ));
    }
    let _ = std::fs::remove_file(&mixed);
    println!(
        "\npgbench -c {clients} -j 2 -T {seconds}, scale 4, {rounds} interleaved rounds (medians), one pglane on two shards, pool_size 8 per host:\n\n{table}"
    );
}

/// [`show_routing`] of database `database` only, or of every database.
async fn show_routing_of(
    lane: &Pglane,
    database: Option<&str>,
) -> (std::collections::HashMap<String, u64>, std::collections::HashMap<String, u64>) {
    let console = common::connect(lane.port, "postgres", "", "pgbouncer").await;
    let (mut totals, mut reads) = (std::collections::HashMap::new(), std::collections::HashMap::new());
    for message in console.simple_query("SHOW ROUTING").await.unwrap() {
        let tokio_postgres::SimpleQueryMessage::Row(r) = message else { continue };
        let get = |name: &str| r.get(name).unwrap_or("").to_owned();
        if database.is_some_and(|d| get("database") != d) {
            continue;
        }
        if get("host") == "*" {
            for name in ["reads", "to_primary", "stale_reads_avoided", "no_standby", "positions_learned", "retried_on_primary"] {
                *totals.entry(name.to_owned()).or_insert(0) += get(name).parse::<u64>().unwrap();
            }
        } else {
            *reads.entry(get("host")).or_insert(0) += get("reads").parse::<u64>().unwrap();
        }
    }
    (totals, reads)
}
