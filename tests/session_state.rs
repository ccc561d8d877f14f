//! Session settings in transaction mode: what a client SETs follows it to
//! every server connection it gets, and never leaks to another client.

mod common;

use common::{connect, postgres, Pglane};

fn start(dbname: &str) -> Pglane {
    let pg = postgres();
    pg.fresh_database(dbname, None);
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

    async fn backend(c: &tokio_postgres::Client) -> i32 {
        c.query_one("select pg_backend_pid()", &[]).await.unwrap().get(0)
    }
    let c = connect(lane.port, "postgres", "secret", "app").await;
    let mut servers_seen = std::collections::HashSet::new();
    for _ in 0..5 {
        // a's last server connection is held by another client in a
        // transaction (b if the pool gave it b, else c), so a runs on the
        // other one: each round, a is seen on both.
        let last = backend(&a).await;
        servers_seen.insert(last);
        b.batch_execute("begin").await.unwrap();
        let holder = if backend(&b).await == last {
            &b
        } else {
            // b got the other connection: c takes a's, then b lets its go.
            c.batch_execute("begin").await.unwrap();
            assert_eq!(backend(&c).await, last, "two server connections, b holds one, c must get the other");
            b.batch_execute("commit").await.unwrap();
            &c
        };
        let other = backend(&a).await;
        assert_ne!(other, last, "a ran on the connection another client holds");
        servers_seen.insert(other);
        assert_eq!(show(&a, "search_path").await, "app_schema, public");
        assert_eq!(show(&a, "TimeZone").await, "Asia/Tokyo");
        assert_eq!(show(&a, "statement_timeout").await, "7s");
        holder.batch_execute("commit").await.unwrap();
        assert_eq!(show(&a, "search_path").await, "app_schema, public");
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

/// PostgreSQL times a query with the statement_timeout in force as it
/// starts, so one that a client leaves on a server connection also times
/// pglane's alignment of the next client's settings there. Cancelled, the
/// alignment is rolled back, and the next client's request must not run
/// under the other's settings: here b's 16 MB setting takes any query that
/// sets it far past a's 1 ms, yet b's request runs, under b's settings.
#[tokio::test]
async fn another_clients_statement_timeout_cannot_cancel_an_alignment() {
    let pg = postgres();
    pg.fresh_database("state_timeout", None);
    let lane = Pglane::start_with_args(
        &format!(
            "pool_mode = \"transaction\"\n[databases.app]\nhost = \"127.0.0.1\"\nport = {}\ndbname = \"state_timeout\"\npool_size = 1\n[users.postgres]\npassword = \"secret\"\n",
            pg.port
        ),
        &["--cores", "1"],
    );
    let a = connect(lane.port, "postgres", "secret", "app").await;
    let b = connect(lane.port, "postgres", "secret", "app").await;
    const BIG: usize = 16 << 20;
    a.simple_query("SET statement_timeout = 1").await.unwrap();
    b.simple_query(&format!("SET b.big = '{}'", "x".repeat(BIG))).await.unwrap();
    for _ in 0..3 {
        // a's settings on the one server connection, then b's over them.
        assert_eq!(show(&a, "statement_timeout").await, "1ms");
        let row = b.query_one("select length(current_setting('b.big')), current_setting('statement_timeout')", &[]).await;
        let row = row.expect("b's request runs under b's settings");
        assert_eq!((row.get::<_, i32>(0) as usize, row.get::<_, String>(1)), (BIG, "0".to_owned()));
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
    let name: String = c
        .query_one("select application_name::text from pg_stat_activity where pid = pg_backend_pid()", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(name, "reporting");
}

/// A client whose notifications arrive on `notes`.
async fn connect_listening(
    port: u16,
) -> (tokio_postgres::Client, tokio::sync::mpsc::UnboundedReceiver<tokio_postgres::Notification>) {
    use futures_util::StreamExt;
    let (client, mut connection) = tokio_postgres::Config::new()
        .host("127.0.0.1")
        .port(port)
        .user("postgres")
        .password("secret")
        .dbname("app")
        .connect(tokio_postgres::NoTls)
        .await
        .unwrap();
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let messages = futures_util::stream::poll_fn(move |cx| connection.poll_message(cx));
    tokio::spawn(messages.for_each(move |m| {
        if let Ok(tokio_postgres::AsyncMessage::Notification(n)) = m {
            let _ = tx.send(n);
        }
        async {}
    }));
    (client, rx)
}

/// LISTEN and session advisory locks live in one server session: the client
/// that uses them keeps its server connection (is pinned) in transaction
/// mode, so notifications reach it and its locks stay its own. (A LISTEN
/// pglane sees, by the simple protocol or in asyncpg's and pgjdbc's forms,
/// goes to the notification hub instead, tests/notify.rs; one run inside a
/// function, as here, pins.)
#[tokio::test]
async fn listen_and_advisory_locks_pin_their_client() {
    let lane = start("state_listen");
    let (a, mut notes) = connect_listening(lane.port).await;
    a.batch_execute("DO $$ BEGIN EXECUTE 'LISTEN pglane_jobs'; END $$").await.unwrap();
    let a_pid: i32 = a.query_one("select pg_backend_pid()", &[]).await.unwrap().get(0);

    // Another client, with the pool's other connection, notifies.
    let b = connect(lane.port, "postgres", "secret", "app").await;
    for i in 0..5 {
        b.batch_execute(&format!("NOTIFY pglane_jobs, 'job {i}'")).await.unwrap();
        let b_pid: i32 = b.query_one("select pg_backend_pid()", &[]).await.unwrap().get(0);
        assert_ne!(b_pid, a_pid, "b was given the connection a listens on");
    }
    for i in 0..5 {
        let n = tokio::time::timeout(std::time::Duration::from_secs(10), notes.recv())
            .await
            .expect("notification within 10 s")
            .expect("connection open");
        assert_eq!((n.channel(), n.payload()), ("pglane_jobs", format!("job {i}").as_str()));
        assert_eq!(n.process_id(), b.query_one("select pg_backend_pid()", &[]).await.unwrap().get::<_, i32>(0));
    }

    // A session lock taken in one transaction is still a's in the next.
    a.batch_execute("select pg_advisory_lock(77)").await.unwrap();
    let b_got_it: bool = b.query_one("select pg_try_advisory_lock(77)", &[]).await.unwrap().get(0);
    assert!(!b_got_it, "a's session lock was not held");
    let a_pid_again: i32 = a.query_one("select pg_backend_pid()", &[]).await.unwrap().get(0);
    assert_eq!(a_pid_again, a_pid);
    let unlocked: bool = a.query_one("select pg_advisory_unlock(77)", &[]).await.unwrap().get(0);
    assert!(unlocked, "a could not release its own lock: not on its session");

    // When a leaves, its connection is reset: nobody inherits its LISTEN.
    drop(a);
    let c = connect(lane.port, "postgres", "secret", "app").await;
    for client in [&b, &c] {
        let listening: i64 = client.query_one("select count(*) from pg_listening_channels()", &[]).await.unwrap().get(0);
        assert_eq!(listening, 0, "a's LISTEN outlived a");
    }
}
