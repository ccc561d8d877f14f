//! Session settings in transaction mode: what a client SETs follows it to
//! every server connection it gets, and never leaks to another client.

mod common;

use common::{connect, postgres, Pglane};

fn start(dbname: &str) -> Pglane {
    let pg = postgres();
    pg.psql(&format!("drop database if exists {dbname}"));
    pg.psql(&format!("create database {dbname}"));
    Pglane::start_with_args(
        &format!(
            "pool_mode = \"transaction\"\n[databases.app]\nhost = \"127.0.0.1\"\nport = {}\ndbname = \"{dbname}\"\npool_size = 2\n[users.postgres]\npassword = \"secret\"\n",
            pg.port
        ),
        &["--cores", "1"],
    )
}

async fn show(c: &tokio_postgres::Client, setting: &str) -> String {
    c.query_one(&format!("show {setting}"), &[]).await.unwrap().get(0)
}

#[tokio::test]
async fn settings_follow_their_client_across_server_connections() {
    let lane = start("state_db");
    let a = connect(lane.port, "postgres", "secret", "app").await;
    let b = connect(lane.port, "postgres", "secret", "app").await;
    a.batch_execute("create schema if not exists app_schema").await.unwrap();
    a.simple_query("SET search_path = app_schema, public").await.unwrap();
    a.simple_query("SET TimeZone = 'Asia/Tokyo'").await.unwrap();
    a.simple_query("SET statement_timeout TO '7s'").await.unwrap();

    let mut servers_seen = std::collections::HashSet::new();
    for i in 0..10 {
        // b holds one of the two server connections in a transaction, so a
        // runs on the other one half of the time.
        if i % 2 == 0 {
            b.batch_execute("begin; select 1").await.unwrap();
        }
        let pid: i32 = a.query_one("select pg_backend_pid()", &[]).await.unwrap().get(0);
        servers_seen.insert(pid);
        assert_eq!(show(&a, "search_path").await, "app_schema, public");
        assert_eq!(show(&a, "TimeZone").await, "Asia/Tokyo");
        assert_eq!(show(&a, "statement_timeout").await, "7s");
        if i % 2 == 0 {
            b.batch_execute("commit").await.unwrap();
        }
        // ...and b never sees a's settings, whichever connection it gets.
        assert_eq!(show(&b, "search_path").await, "\"$user\", public");
        assert_eq!(show(&b, "TimeZone").await, postgres().psql("show TimeZone"));
        assert_eq!(show(&b, "statement_timeout").await, "0");
    }
    assert_eq!(servers_seen.len(), 2, "a should have run on both server connections");

    // RESET goes back to the default everywhere.
    a.simple_query("RESET search_path").await.unwrap();
    for _ in 0..4 {
        b.batch_execute("begin; select 1").await.unwrap();
        assert_eq!(show(&a, "search_path").await, "\"$user\", public");
        b.batch_execute("commit").await.unwrap();
        assert_eq!(show(&a, "search_path").await, "\"$user\", public");
    }
}

#[tokio::test]
async fn a_set_rolled_back_is_not_carried() {
    let lane = start("state_rollback");
    let a = connect(lane.port, "postgres", "secret", "app").await;
    let b = connect(lane.port, "postgres", "secret", "app").await;
    a.batch_execute("begin; set TimeZone = 'Europe/Paris'; rollback").await.unwrap();
    for _ in 0..4 {
        b.batch_execute("begin; select 1").await.unwrap();
        assert_eq!(show(&a, "TimeZone").await, postgres().psql("show TimeZone"));
        b.batch_execute("commit").await.unwrap();
    }
}

#[tokio::test]
async fn startup_application_name_reaches_the_server() {
    let lane = start("state_appname");
    let (c, conn) = tokio_postgres::connect(
        &format!("host=127.0.0.1 port={} user=postgres password=secret dbname=app application_name=reporting", lane.port),
        tokio_postgres::NoTls,
    )
    .await
    .unwrap();
    tokio::spawn(conn);
    let name: String = c.query_one("select application_name::text from pg_stat_activity where pid = pg_backend_pid()", &[]).await.unwrap().get(0);
    assert_eq!(name, "reporting");
}
