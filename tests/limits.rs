//! Limits on server connections are exact over all shards: pool_size,
//! max_db_connections and max_user_connections count what PostgreSQL sees,
//! whichever shard a client is on. Each test watches its own server
//! database in pg_stat_activity while clients on both shards run short
//! transactions through pglane, and checks that every client was served.

mod common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::{connect, postgres, Pglane};

/// Server connections to `dbname` (as `user`, if given) right now, read on a
/// direct connection (not counted: it is to another database).
async fn backends(monitor: &tokio_postgres::Client, dbname: &str, user: Option<&str>) -> usize {
    let row = monitor
        .query_one(
            "select count(*) from pg_stat_activity where datname = $1 and ($2::text is null or usename = $2::text) \
             and backend_type = 'client backend'",
            &[&dbname, &user],
        )
        .await
        .expect("count backends");
    row.get::<_, i64>(0) as usize
}

/// The most server connections seen at once, polling every 2 ms until `done`.
fn watch(dbname: &'static str, user: Option<&'static str>, done: Arc<AtomicBool>) -> tokio::task::JoinHandle<usize> {
    tokio::spawn(async move {
        let monitor = connect(postgres().port, "postgres", "secret", "postgres").await;
        let mut most = 0;
        while !done.load(Ordering::SeqCst) {
            most = most.max(backends(&monitor, dbname, user).await);
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        most
    })
}

/// `clients` clients of (user, database) each run `rounds` transactions
/// that hold the server connection a moment; returns how many finished.
async fn load(port: u16, logins: &[(&'static str, &'static str, &'static str)], clients: usize, rounds: usize) -> usize {
    let finished = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for i in 0..clients {
        let (user, password, db) = logins[i % logins.len()];
        let finished = finished.clone();
        tasks.push(tokio::spawn(async move {
            let client = connect(port, user, password, db).await;
            for _ in 0..rounds {
                client.batch_execute("begin; select pg_sleep(0.003); commit").await.expect("a transaction");
            }
            finished.fetch_add(1, Ordering::SeqCst);
        }));
    }
    for task in tasks {
        task.await.expect("client task");
    }
    finished.load(Ordering::SeqCst)
}

fn start(dbnames: &[&str], body: &str) -> Pglane {
    for db in dbnames {
        postgres().fresh_database(db, None);
    }
    Pglane::start_with_args(
        &format!(
            "pool_mode = \"transaction\"\nquery_wait_timeout = 60\n{body}\n\
             [users.postgres]\npassword = \"secret\"\n[users.scramuser]\npassword = \"scrampass\"\n"
        ),
        &["--cores", "2"],
    )
}

fn database(name: &str, dbname: &str, extra: &str) -> String {
    format!("[databases.{name}]\nhost = \"127.0.0.1\"\nport = {}\ndbname = \"{dbname}\"\n{extra}\n", postgres().port)
}

/// pool_size = 1 on two shards opens one server connection, not one per
/// shard: the shard whose client waits gets the other's connection when it
/// comes back.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn pool_size_is_exact_over_shards_even_below_one_per_shard() {
    let lane = start(&["limits_pool"], &database("app", "limits_pool", "pool_size = 1"));
    let done = Arc::new(AtomicBool::new(false));
    let most = watch("limits_pool", None, done.clone());
    let finished = load(lane.port, &[("postgres", "secret", "app")], 6, 25).await;
    done.store(true, Ordering::SeqCst);
    assert_eq!(finished, 6, "every client, on either shard, was served");
    assert_eq!(most.await.unwrap(), 1, "one server connection, over both shards");
}

/// pool_size = 3 on two shards: at most 3, and clients on both shards served.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_odd_pool_size_is_exact_over_shards() {
    let lane = start(&["limits_odd"], &database("app", "limits_odd", "pool_size = 3"));
    let done = Arc::new(AtomicBool::new(false));
    let most = watch("limits_odd", None, done.clone());
    let finished = load(lane.port, &[("postgres", "secret", "app")], 8, 25).await;
    done.store(true, Ordering::SeqCst);
    assert_eq!(finished, 8);
    let most = most.await.unwrap();
    assert!((1..=3).contains(&most), "{most} server connections for pool_size 3");
}

/// The case: pool_size 2, max_db_connections 3, two users with 3
/// clients each. PgBouncer opens 3 server connections; so must pglane.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn max_db_connections_caps_every_users_pools_together() {
    let lane = start(&["limits_db"], &database("app", "limits_db", "pool_size = 2\nmax_db_connections = 3"));
    let done = Arc::new(AtomicBool::new(false));
    let most = watch("limits_db", None, done.clone());
    let logins = [("postgres", "secret", "app"), ("scramuser", "scrampass", "app")];
    let finished = load(lane.port, &logins, 6, 25).await;
    done.store(true, Ordering::SeqCst);
    assert_eq!(finished, 6, "both users' clients were served");
    let most = most.await.unwrap();
    assert!((2..=3).contains(&most), "{most} server connections for max_db_connections 3");
}

/// max_user_connections caps a user's pools of every database together.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn max_user_connections_caps_a_users_pools_of_every_database() {
    let body = format!(
        "max_user_connections = 3\n{}{}",
        database("one", "limits_user", "pool_size = 2"),
        database("two", "limits_user", "pool_size = 2")
    );
    let lane = start(&["limits_user"], &body);
    let done = Arc::new(AtomicBool::new(false));
    let most = watch("limits_user", Some("postgres"), done.clone());
    let logins = [("postgres", "secret", "one"), ("postgres", "secret", "two")];
    let finished = load(lane.port, &logins, 6, 25).await;
    done.store(true, Ordering::SeqCst);
    assert_eq!(finished, 6);
    let most = most.await.unwrap();
    assert!((2..=3).contains(&most), "{most} server connections of postgres for max_user_connections 3");
}

/// min_pool_size: once a client of the pool is connected, the pool opens
/// connections until it has that many, over both shards, without waiting
/// for load, and keeps them past server_idle_timeout; never more than
/// pool_size.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn min_pool_size_keeps_connections_open_while_a_client_is_connected() {
    let body = format!(
        "min_pool_size = 3\nserver_idle_timeout = 1\n{}{}",
        database("app", "limits_min", "pool_size = 5"),
        database("small", "limits_min_small", "pool_size = 2")
    );
    let lane = start(&["limits_min", "limits_min_small"], &body);
    let monitor = connect(postgres().port, "postgres", "secret", "postgres").await;
    assert_eq!(backends(&monitor, "limits_min", None).await, 0, "nothing opened before a client came");
    let client = connect(lane.port, "postgres", "secret", "app").await;
    client.batch_execute("select 1").await.unwrap();
    let small = connect(lane.port, "postgres", "secret", "small").await;
    small.batch_execute("select 1").await.unwrap();
    // Past server_idle_timeout twice over, the pools still hold their minimum.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        tokio::time::sleep(Duration::from_millis(2500)).await;
        let (app, capped) = (backends(&monitor, "limits_min", None).await, backends(&monitor, "limits_min_small", None).await);
        if (app, capped) == (3, 2) {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{app} backends for min_pool_size 3, {capped} for pool_size 2");
    }
}

/// reserve_pool_size: with pool_size 1 held by a client's open transaction,
/// another client waits reserve_pool_timeout, then gets a second server
/// connection from the reserve; not sooner, and not a third.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_reserve_serves_a_client_that_waited_reserve_pool_timeout() {
    let body =
        format!("reserve_pool_timeout = 0.5\n{}", database("app", "limits_reserve", "pool_size = 1\nreserve_pool_size = 1"));
    let lane = start(&["limits_reserve"], &body);
    let monitor = connect(postgres().port, "postgres", "secret", "postgres").await;
    let holder = connect(lane.port, "postgres", "secret", "app").await;
    holder.batch_execute("begin; select 1").await.unwrap();
    let mut waited = Vec::new();
    for _ in 0..2 {
        // (A login may need a server connection too: timed together.)
        let began = std::time::Instant::now();
        let served = tokio::time::timeout(Duration::from_secs(5), async {
            connect(lane.port, "postgres", "secret", "app").await.batch_execute("select 1").await
        })
        .await;
        assert!(matches!(served, Ok(Ok(()))), "a waiting client is served from the reserve: {served:?}");
        waited.push(began.elapsed());
    }
    assert!(waited[0] >= Duration::from_millis(450), "the reserve opened before reserve_pool_timeout: {:?}", waited[0]);
    // The reserve's connection serves the next client: at once on its own
    // shard; from another shard it closes there and reopens for the client
    // once that one too has waited reserve_pool_timeout (so, within 5 s
    // above, and never a third connection below).
    assert!(waited[1] < Duration::from_millis(2000), "the reserve's connection serves the next client: {:?}", waited[1]);
    assert_eq!(backends(&monitor, "limits_reserve", None).await, 2, "pool_size 1 + reserve 1");
    // With the reserve's connection held too, a third client waits for one
    // of the two: the reserve is spent.
    let second_holder = connect(lane.port, "postgres", "secret", "app").await;
    second_holder.batch_execute("begin; select 1").await.unwrap();
    let served = tokio::time::timeout(Duration::from_millis(1500), async {
        connect(lane.port, "postgres", "secret", "app").await.batch_execute("select 1").await
    })
    .await;
    assert!(served.is_err(), "a third connection was opened past pool_size + reserve");
    assert_eq!(backends(&monitor, "limits_reserve", None).await, 2);
    holder.batch_execute("commit").await.unwrap();
}

/// A connection that closes (RECONNECT replaces it when it comes back)
/// frees its slot for a waiting client only once its backend has gone:
/// PostgreSQL never sees pool_size + 1 backends, not even for the moment an
/// old backend takes to exit.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_closing_connection_frees_its_slot_only_once_its_backend_has_gone() {
    let lane =
        start(&["limits_close"], &format!("admin_users = [\"postgres\"]\n{}", database("app", "limits_close", "pool_size = 2")));
    let done = Arc::new(AtomicBool::new(false));
    let most = watch("limits_close", None, done.clone());
    let reconnecting = {
        let done = done.clone();
        let admin = connect(lane.port, "postgres", "secret", "pgbouncer").await;
        tokio::spawn(async move {
            let mut reconnects = 0;
            while !done.load(Ordering::SeqCst) {
                admin.simple_query("RECONNECT app").await.expect("RECONNECT");
                reconnects += 1;
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            reconnects
        })
    };
    let finished = load(lane.port, &[("postgres", "secret", "app")], 6, 60).await;
    done.store(true, Ordering::SeqCst);
    assert_eq!(finished, 6);
    assert!(reconnecting.await.unwrap() > 20, "connections were replaced all along");
    let most = most.await.unwrap();
    assert!((1..=2).contains(&most), "{most} server connections for pool_size 2");
}
