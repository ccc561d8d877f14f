//! Proves the test harness in `tests/common/mod.rs` against a real PostgreSQL:
//! every fixture role can log in over TCP with its auth method, wrong
//! passwords are rejected with SQLSTATE 28P01, and the psql/restart helpers work.

mod common;

use tokio_postgres::error::SqlState;

async fn select_one(port: u16, user: &str, password: &str) {
    let client = common::connect(port, user, password, "postgres").await;
    let row = client.query_one("SELECT 1", &[]).await.expect("SELECT 1");
    assert_eq!(row.get::<_, i32>(0), 1, "SELECT 1 as {user}");
}

#[tokio::test]
async fn superuser_logs_in_with_scram() {
    select_one(common::postgres().port, "postgres", "secret").await;
}

#[tokio::test]
async fn md5user_logs_in_with_md5() {
    let pg = common::postgres();
    select_one(pg.port, "md5user", "md5pass").await;
    let stored = pg.psql("SELECT rolpassword LIKE 'md5%' FROM pg_authid WHERE rolname = 'md5user'");
    assert_eq!(stored, "t", "md5user's password must be stored as an md5 hash");
}

#[tokio::test]
async fn trustuser_logs_in_without_password() {
    select_one(common::postgres().port, "trustuser", "").await;
}

#[tokio::test]
async fn scramuser_logs_in_with_scram() {
    let pg = common::postgres();
    select_one(pg.port, "scramuser", "scrampass").await;
    let stored = pg.psql("SELECT rolpassword LIKE 'SCRAM-SHA-256$%' FROM pg_authid WHERE rolname = 'scramuser'");
    assert_eq!(stored, "t", "scramuser's password must be stored as a SCRAM verifier");
}

#[tokio::test]
async fn wrong_passwords_fail_with_28p01() {
    let port = common::postgres().port;
    for (user, wrong) in [("postgres", "nope"), ("scramuser", "nope"), ("md5user", "nope")] {
        let err = common::try_connect(port, user, wrong, "postgres")
            .await
            .err()
            .unwrap_or_else(|| panic!("{user} logged in with a wrong password"));
        assert_eq!(err.code(), Some(&SqlState::INVALID_PASSWORD), "{user}: {err}");
    }
}

#[test]
fn psql_runs_sql_over_the_unix_socket() {
    let pg = common::postgres();
    assert_eq!(pg.psql("SELECT 1"), "1");
    assert_eq!(pg.psql("SELECT 'a', 2 UNION ALL SELECT 'b', 3"), "a|2\nb|3");
    assert_eq!(pg.psql("SHOW max_connections"), "300");
    assert!(pg.socket_dir.join(format!(".s.PGSQL.{}", pg.port)).exists());
    assert!(pg.try_psql("postgres", "SELECT * FROM no_such_table").is_err());
}

#[test]
fn postgres_is_shared_per_process() {
    assert!(std::ptr::eq(common::postgres(), common::postgres()));
}

#[test]
fn free_port_is_bindable() {
    let port = common::free_port();
    std::net::TcpListener::bind(("127.0.0.1", port)).expect("free_port() returned a busy port");
}

/// Private instance, so restarting it does not disturb the tests above.
#[tokio::test]
async fn private_instance_restarts_and_terminates_backends() {
    let pg = common::Postgres::start_new();
    assert_ne!(pg.port, common::postgres().port);
    let client = common::connect(pg.port, "scramuser", "scrampass", "postgres").await;
    assert_eq!(pg.terminate_backends("scramuser"), 1);
    assert!(client.query_one("SELECT 1", &[]).await.is_err(), "terminated backend still answers");

    pg.restart();
    select_one(pg.port, "scramuser", "scrampass").await;

    pg.stop_server();
    assert!(common::try_connect(pg.port, "postgres", "secret", "postgres").await.is_err());
    pg.start_server();
    select_one(pg.port, "postgres", "secret").await;

    let data_dir = pg.data_dir.clone();
    drop(pg);
    assert!(!data_dir.exists(), "dropping a private instance removes its data dir");
}
