//! Each timeout firing, with the error its client gets.

mod common;

use std::time::{Duration, Instant};

use common::{connect, postgres, Pglane};

fn start(dbname: &str, extra: &str) -> Pglane {
    let pg = postgres();
    pg.fresh_database(dbname, None);
    Pglane::start_with_args(
        &format!(
            "pool_mode = \"transaction\"\n{extra}\n[databases.app]\nhost = \"127.0.0.1\"\nport = {}\ndbname = \"{dbname}\"\npool_size = 1\n[users.postgres]\npassword = \"secret\"\n",
            pg.port
        ),
        &["--cores", "1"],
    )
}

fn server_count(dbname: &str) -> i64 {
    postgres().psql(&format!("select count(*) from pg_stat_activity where datname = '{dbname}'")).parse().unwrap()
}

fn is_fatal(e: &tokio_postgres::Error, code: &str) -> bool {
    e.is_closed() || e.as_db_error().is_some_and(|d| d.code().code() == code)
}

#[tokio::test]
async fn client_idle_timeout_disconnects_a_silent_client() {
    let lane = start("to_client_idle", "client_idle_timeout = 1");
    let c = connect(lane.port, "postgres", "secret", "app").await;
    c.simple_query("select 1").await.unwrap();
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let e = c.simple_query("select 1").await.unwrap_err();
    assert!(is_fatal(&e, "57P05"), "{e:?}");
    assert!(lane.log().contains("client_idle_timeout"), "{}", lane.log());
}

#[tokio::test]
async fn idle_transaction_timeout_rolls_back_and_keeps_the_server() {
    let lane = start("to_idle_tx", "idle_transaction_timeout = 1");
    let c = connect(lane.port, "postgres", "secret", "app").await;
    c.batch_execute("create table t(v int)").await.unwrap();
    let pid: i32 = c.query_one("select pg_backend_pid()", &[]).await.unwrap().get(0);
    c.batch_execute("begin; insert into t values (1)").await.unwrap();
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let e = c.simple_query("commit").await.unwrap_err();
    assert!(is_fatal(&e, "25P03"), "{e:?}");
    let c = connect(lane.port, "postgres", "secret", "app").await;
    let n: i64 = c.query_one("select count(*) from t", &[]).await.unwrap().get(0);
    assert_eq!(n, 0, "the idle transaction was rolled back");
    let pid2: i32 = c.query_one("select pg_backend_pid()", &[]).await.unwrap().get(0);
    assert_eq!(pid, pid2, "the server connection was kept");
}

#[tokio::test]
async fn query_timeout_cancels_the_query() {
    let lane = start("to_query", "query_timeout = 1");
    let c = connect(lane.port, "postgres", "secret", "app").await;
    let started = Instant::now();
    let e = c.simple_query("select pg_sleep(30)").await.unwrap_err();
    assert!(is_fatal(&e, "57014"), "{e:?}");
    assert!(started.elapsed() < Duration::from_secs(20), "took {:?}", started.elapsed());
    // The backend is not left sleeping.
    let mut sleeping = 1;
    for _ in 0..50 {
        sleeping = postgres()
            .psql("select count(*) from pg_stat_activity where datname = 'to_query' and query like '%pg_sleep(30)%' and state = 'active'")
            .parse()
            .unwrap();
        if sleeping == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(sleeping, 0);
    // Quick queries are untouched.
    let c = connect(lane.port, "postgres", "secret", "app").await;
    c.simple_query("select pg_sleep(0.1)").await.unwrap();
}

#[tokio::test]
async fn server_idle_timeout_closes_idle_server_connections() {
    let lane = start("to_server_idle", "server_idle_timeout = 1");
    let c = connect(lane.port, "postgres", "secret", "app").await;
    c.simple_query("select 1").await.unwrap();
    assert_eq!(server_count("to_server_idle"), 1);
    let mut count = 1;
    for _ in 0..60 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        count = server_count("to_server_idle");
        if count == 0 {
            break;
        }
    }
    assert_eq!(count, 0, "idle server connection still open");
    c.simple_query("select 1").await.unwrap();
}

#[tokio::test]
async fn server_lifetime_replaces_old_server_connections() {
    let lane = start("to_lifetime", "server_lifetime = 1");
    let c = connect(lane.port, "postgres", "secret", "app").await;
    let first: i32 = c.query_one("select pg_backend_pid()", &[]).await.unwrap().get(0);
    let mut replaced = false;
    for _ in 0..40 {
        tokio::time::sleep(Duration::from_millis(150)).await;
        let pid: i32 = c.query_one("select pg_backend_pid()", &[]).await.unwrap().get(0);
        if pid != first {
            replaced = true;
            break;
        }
    }
    assert!(replaced, "the server connection outlived server_lifetime");
}
