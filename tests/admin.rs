//! The admin console (database `pgbouncer`), hot reload and the metrics
//! endpoint, driven with psql and tokio-postgres as operators would.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use common::{connect, free_port, postgres, try_connect, Pglane, Psql};

fn config(pool_size: usize, extra: &str) -> String {
    format!(
        "pool_mode = \"transaction\"\nadmin_users = [\"postgres\"]\nstats_users = [\"scramuser\"]\n{extra}\n[databases.app]\nhost = \"127.0.0.1\"\nport = {}\ndbname = \"postgres\"\npool_size = {pool_size}\n[users.postgres]\npassword = \"secret\"\n[users.scramuser]\npassword = \"scrampass\"\n[users.md5user]\npassword = \"md5pass\"\n",
        postgres().port
    )
}

fn start(cores: usize, pool_size: usize, extra: &str) -> Pglane {
    Pglane::start_with_args(&config(pool_size, extra), &["--cores", &cores.to_string()])
}

/// psql's unaligned output (header line first) of an admin command.
fn admin(port: u16, user: &str, password: &str, command: &str) -> Result<Vec<String>, String> {
    let out = Psql::tcp(port, user, password, "pgbouncer").with_header().command(command).run()?;
    Ok(out.lines().map(str::to_owned).collect())
}

fn column(lines: &[String], name: &str, row_filter: impl Fn(&[&str]) -> bool) -> Vec<String> {
    let header: Vec<&str> = lines[0].split('|').collect();
    let i = header.iter().position(|h| *h == name).unwrap_or_else(|| panic!("no column {name} in {header:?}"));
    lines[1..]
        .iter()
        .map(|l| l.split('|').collect::<Vec<_>>())
        .filter(|r| r.len() == header.len() && row_filter(r))
        .map(|r| r[i].to_owned())
        .collect()
}

#[tokio::test]
async fn show_commands_have_pgbouncers_columns_and_real_figures() {
    let lane = start(2, 4, "");
    let c = connect(lane.port, "postgres", "secret", "app").await;
    for _ in 0..20 {
        c.simple_query("select 1").await.unwrap();
    }
    // A named statement of the client's, prepared on the server it runs on.
    let statement = c.prepare("select $1::int").await.unwrap();
    c.query(&statement, &[&1i32]).await.unwrap();
    let pools = admin(lane.port, "postgres", "secret", "SHOW POOLS").unwrap();
    assert_eq!(
        pools[0],
        "database|user|cl_active|cl_waiting|cl_active_cancel_req|cl_waiting_cancel_req|sv_active|sv_active_cancel|sv_being_canceled|sv_idle|sv_used|sv_tested|sv_login|maxwait|maxwait_us|pool_mode|load_balance_hosts"
    );
    assert_eq!(column(&pools, "pool_mode", |r| r[0] == "app"), vec!["transaction"]);
    assert_eq!(column(&pools, "cl_active", |r| r[0] == "app"), vec!["1"]);

    let stats = admin(lane.port, "postgres", "secret", "SHOW STATS").unwrap();
    assert!(
        stats[0].starts_with(
            "database|total_server_assignment_count|total_xact_count|total_query_count|total_received|total_sent|\
             total_xact_time|total_query_time|total_wait_time|total_client_parse_count|total_server_parse_count|total_bind_count|\
             avg_server_assignment_count|avg_xact_count"
        ),
        "PgBouncer 1.25's columns: {}",
        stats[0]
    );
    let xacts: u64 = column(&stats, "total_xact_count", |r| r[0] == "app")[0].parse().unwrap();
    let queries: u64 = column(&stats, "total_query_count", |r| r[0] == "app")[0].parse().unwrap();
    assert!(xacts >= 20 && queries >= 20, "{stats:?}");
    let sent: u64 = column(&stats, "total_sent", |r| r[0] == "app")[0].parse().unwrap();
    assert!(sent > 0);

    let clients = admin(lane.port, "postgres", "secret", "SHOW CLIENTS").unwrap();
    assert!(clients[0].starts_with(
        "type|user|database|replication|state|addr|port|local_addr|local_port|connect_time|request_time|wait|wait_us|\
         close_needed|ptr|link|remote_pid|tls|application_name|prepared_statements|id"
    ));
    // PgBouncer's word for a logged-in client holding no server.
    assert_eq!(column(&clients, "state", |r| r[2] == "app"), vec!["active"]);
    assert_eq!(column(&clients, "replication", |r| r[2] == "app"), vec!["none"]);
    assert_eq!(column(&clients, "remote_pid", |r| r[2] == "app"), vec!["0"], "a TCP client's, as PgBouncer's");
    assert_eq!(column(&clients, "prepared_statements", |r| r[2] == "app"), vec!["1"]);
    let ids = column(&clients, "id", |_| true);
    assert!(ids.iter().all(|id| id.parse::<u64>().is_ok_and(|id| id > 0)) && ids.len() == 2, "{clients:?}");
    assert_ne!(ids[0], ids[1]);

    let servers = admin(lane.port, "postgres", "secret", "SHOW SERVERS").unwrap();
    assert!(!column(&servers, "remote_pid", |r| r[2] == "app").is_empty());
    // The statement is prepared on one of app's connections.
    let prepared: u64 =
        column(&servers, "prepared_statements", |r| r[2] == "app").iter().map(|n| n.parse::<u64>().unwrap()).sum();
    assert!(prepared >= 1, "{servers:?}");
    let users = admin(lane.port, "postgres", "secret", "SHOW USERS").unwrap();
    assert_eq!(column(&users, "current_client_connections", |r| r[0] == "postgres"), vec!["2"], "app's and the console's");
    let backend_pids: Vec<String> = postgres()
        .psql("select pid from pg_stat_activity where backend_type = 'client backend'")
        .lines()
        .map(str::to_owned)
        .collect();
    for pid in column(&servers, "remote_pid", |r| r[2] == "app") {
        assert!(backend_pids.contains(&pid), "SHOW SERVERS names backend {pid}, which PostgreSQL does not know");
    }
    // pglane's end of each server connection, as PostgreSQL sees its client.
    let backend_ports: Vec<String> = postgres()
        .psql("select client_port from pg_stat_activity where backend_type = 'client backend' and client_port > 0")
        .lines()
        .map(str::to_owned)
        .collect();
    assert!(column(&servers, "local_addr", |r| r[2] == "app").iter().all(|a| a == "127.0.0.1"), "{servers:?}");
    for port in column(&servers, "local_port", |r| r[2] == "app") {
        assert!(backend_ports.contains(&port), "SHOW SERVERS' local_port {port} is no client_port PostgreSQL knows");
    }

    let databases = admin(lane.port, "postgres", "secret", "SHOW DATABASES").unwrap();
    assert_eq!(column(&databases, "pool_size", |r| r[0] == "app"), vec!["4"]);
    let lists = admin(lane.port, "postgres", "secret", "SHOW LISTS").unwrap();
    assert_eq!(column(&lists, "items", |r| r[0] == "databases"), vec!["1"]);
    let version = admin(lane.port, "postgres", "secret", "SHOW VERSION").unwrap();
    assert!(version[1].starts_with("pglane "));
    let shards = admin(lane.port, "postgres", "secret", "SHOW SHARDS").unwrap();
    assert_eq!(shards.len(), 1 + 2 + 1, "header, two shards, row count: {shards:?}");
    let config = admin(lane.port, "postgres", "secret", "SHOW CONFIG").unwrap();
    assert_eq!(column(&config, "value", |r| r[0] == "pool_mode"), vec!["transaction"]);
    // What pgbouncer_exporter reads, as numbers; PgBouncer's spellings.
    assert_eq!(column(&config, "value", |r| r[0] == "max_client_conn"), vec!["10000"]);
    assert_eq!(column(&config, "value", |r| r[0] == "max_user_connections"), vec!["0"]);
    assert_eq!(column(&config, "value", |r| r[0] == "auth_type"), vec!["scram-sha-256"]);
    assert_eq!(config[0], "key|value|default|changeable");
    assert_eq!(config.iter().filter(|row| row.starts_with("admin_users|")).count(), 1);
    for show in ["SHOW USERS", "SHOW PREPARED", "SHOW STATS_TOTALS", "SHOW HELP"] {
        admin(lane.port, "postgres", "secret", show).unwrap();
    }
    let e = admin(lane.port, "postgres", "secret", "SHOW NONSENSE").unwrap_err();
    assert!(e.contains("invalid command 'SHOW NONSENSE'"), "{e}");
    let e = admin(lane.port, "postgres", "secret", "select 1").unwrap_err();
    assert!(e.contains("invalid command"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_are_spread_evenly_over_the_shards() {
    // The kernel spreads TCP connections over the shards' SO_REUSEPORT
    // listeners by a hash, as if by coin tosses. pglane hands each new
    // client to the shard serving fewest, so clients that connect one after
    // another are even after every connection (a run of coin tosses stays
    // within one of even for ten tosses about once in thirty).
    let lane = start(2, 2, "");
    let console = connect(lane.port, "postgres", "secret", "pgbouncer").await;
    let clients_per_shard = || async {
        let rows = console.simple_query("SHOW SHARDS").await.unwrap();
        rows.iter()
            .filter_map(|m| match m {
                tokio_postgres::SimpleQueryMessage::Row(r) => r.get("clients").map(|n| n.parse::<usize>().unwrap()),
                _ => None,
            })
            .collect::<Vec<_>>()
    };
    let mut clients = Vec::new();
    for i in 1..=10 {
        let c = connect(lane.port, "postgres", "secret", "app").await;
        c.simple_query("select 1").await.unwrap();
        clients.push(c);
        let counts = clients_per_shard().await;
        // The console's own connection is one more client.
        assert_eq!(counts.iter().sum::<usize>(), i + 1, "{counts:?}");
        assert!(counts.iter().max().unwrap() - counts.iter().min().unwrap() <= 1, "uneven after {i} clients: {counts:?}");
    }
    let servers = admin(lane.port, "postgres", "secret", "SHOW SERVERS").unwrap();
    assert_eq!(column(&servers, "database", |r| r[2] == "app").len(), 2, "one server connection on each shard: {servers:?}");

    // A client another shard accepted is this shard's own: its queries run
    // and its cancel key reaches it.
    for (i, c) in clients.into_iter().enumerate() {
        let token = c.cancel_token();
        let sleeper = tokio::spawn(async move { c.simple_query("select pg_sleep(30)").await.map(|_| ()) });
        tokio::time::sleep(Duration::from_millis(200)).await;
        token.cancel_query(tokio_postgres::NoTls).await.unwrap();
        let result = tokio::time::timeout(Duration::from_secs(10), sleeper).await.expect("cancel took effect").unwrap();
        let e = result.unwrap_err();
        assert_eq!(e.as_db_error().map(|d| d.code().code()), Some("57014"), "client {i}: {e}");
    }
}

#[test]
fn stats_users_may_look_but_not_touch_and_others_may_not_enter() {
    let lane = start(1, 2, "");
    assert!(admin(lane.port, "scramuser", "scrampass", "SHOW POOLS").is_ok());
    let e = admin(lane.port, "scramuser", "scrampass", "PAUSE").unwrap_err();
    assert!(e.contains("admin access needed"), "{e}");
    let e = admin(lane.port, "md5user", "md5pass", "SHOW POOLS").unwrap_err();
    assert!(e.contains("not in admin_users or stats_users"), "{e}");
    let e = admin(lane.port, "postgres", "wrong", "SHOW POOLS").unwrap_err();
    assert!(e.contains("password authentication failed"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pause_holds_new_transactions_until_resume() {
    let lane = start(2, 2, "");
    let c = connect(lane.port, "postgres", "secret", "app").await;
    c.simple_query("select 1").await.unwrap();
    admin(lane.port, "postgres", "secret", "PAUSE app").unwrap();
    let pools = admin(lane.port, "postgres", "secret", "SHOW POOLS").unwrap();
    assert_eq!(column(&pools, "sv_idle", |r| r[0] == "app"), vec!["0"], "PAUSE let go of the servers");
    let query = tokio::spawn(async move { c.query_one("select 42", &[]).await.map(|r| r.get::<_, i32>(0)) });
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!query.is_finished(), "a query ran while the database was paused");
    let databases = admin(lane.port, "postgres", "secret", "SHOW DATABASES").unwrap();
    assert_eq!(column(&databases, "paused", |r| r[0] == "app"), vec!["1"]);
    admin(lane.port, "postgres", "secret", "RESUME app").unwrap();
    let answer = tokio::time::timeout(Duration::from_secs(10), query).await.expect("resumed").unwrap().unwrap();
    assert_eq!(answer, 42);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_closes_the_databases_clients_and_pauses_it_until_resume() {
    let lane = start(2, 2, "");
    let c = connect(lane.port, "postgres", "secret", "app").await;
    c.simple_query("select 1").await.unwrap();
    admin(lane.port, "postgres", "secret", "KILL app").unwrap();
    let e = c.simple_query("select 1").await.unwrap_err();
    let closed = e.is_closed() || e.as_db_error().is_some_and(|d| d.code().code() == "57P01");
    assert!(closed, "{e:?}");
    // As with PgBouncer, the database stays paused: a new client's query
    // waits until RESUME.
    let databases = admin(lane.port, "postgres", "secret", "SHOW DATABASES").unwrap();
    assert_eq!(column(&databases, "paused", |r| r[0] == "app"), vec!["1"]);
    let c = connect(lane.port, "postgres", "secret", "app").await;
    let query = tokio::spawn(async move { c.query_one("select 42", &[]).await.map(|r| r.get::<_, i32>(0)) });
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!query.is_finished(), "a query ran on a killed database before RESUME");
    admin(lane.port, "postgres", "secret", "RESUME app").unwrap();
    let answer = tokio::time::timeout(Duration::from_secs(10), query).await.expect("resumed").unwrap().unwrap();
    assert_eq!(answer, 42);
}

/// KILL reaches a client whose query is still running, in both modes: the
/// relay, waiting on its server, is woken to end the session at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_ends_a_client_in_the_middle_of_its_query() {
    for mode in ["session", "transaction"] {
        let config = config(2, "").replace("pool_mode = \"transaction\"", &format!("pool_mode = \"{mode}\""));
        let lane = Pglane::start_with_args(&config, &["--cores", "1"]);
        let c = connect(lane.port, "postgres", "secret", "app").await;
        let query = tokio::spawn(async move { c.simple_query("select pg_sleep(60)").await });
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert!(!query.is_finished(), "{mode}");
        admin(lane.port, "postgres", "secret", "KILL app").unwrap();
        let e = tokio::time::timeout(Duration::from_secs(20), query)
            .await
            .expect("KILL must not wait for the query")
            .unwrap()
            .unwrap_err();
        let closed = e.is_closed() || e.as_db_error().is_some_and(|d| d.code().code() == "57P01");
        assert!(closed, "{mode}: {e:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disable_refuses_new_clients_and_enable_admits_them_again() {
    let lane = start(2, 2, "");
    let connected = connect(lane.port, "postgres", "secret", "app").await;
    admin(lane.port, "postgres", "secret", "DISABLE app").unwrap();
    let databases = admin(lane.port, "postgres", "secret", "SHOW DATABASES").unwrap();
    assert_eq!(column(&databases, "disabled", |r| r[0] == "app"), vec!["1"]);
    // On every shard: several attempts land on both.
    for _ in 0..4 {
        let Err(e) = try_connect(lane.port, "postgres", "secret", "app").await else { panic!("a new client got in") };
        let db = e.as_db_error().expect("a server error");
        assert_eq!((db.code().code(), db.message()), ("08P01", "database does not allow connections: app"));
    }
    // Clients already in are not touched.
    connected.simple_query("select 1").await.unwrap();
    assert!(admin(lane.port, "postgres", "secret", "DISABLE nowhere").unwrap_err().contains("no such database: nowhere"));
    admin(lane.port, "postgres", "secret", "ENABLE app").unwrap();
    for _ in 0..4 {
        connect(lane.port, "postgres", "secret", "app").await.simple_query("select 1").await.unwrap();
    }
    let databases = admin(lane.port, "postgres", "secret", "SHOW DATABASES").unwrap();
    assert_eq!(column(&databases, "disabled", |r| r[0] == "app"), vec!["0"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_close_returns_once_the_replaced_connections_are_gone() {
    let lane = start(1, 2, "");
    let port = lane.port;
    let holder = connect(port, "postgres", "secret", "app").await;
    holder.simple_query("begin; select 1").await.unwrap();
    admin(port, "postgres", "secret", "RECONNECT app").unwrap();
    // The connection lent to the open transaction is the one left over.
    let wait = tokio::task::spawn_blocking(move || admin(port, "postgres", "secret", "WAIT_CLOSE app"));
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert!(!wait.is_finished(), "WAIT_CLOSE returned while an old connection was still lent");
    // New transactions meanwhile get new connections.
    connect(port, "postgres", "secret", "app").await.simple_query("select 1").await.unwrap();
    holder.simple_query("commit").await.unwrap();
    let done = tokio::time::timeout(Duration::from_secs(30), wait).await.expect("WAIT_CLOSE returned").unwrap();
    assert!(done.is_ok(), "{done:?}");
    // Nothing left to wait for: it returns at once.
    admin(port, "postgres", "secret", "WAIT_CLOSE").unwrap();
}

#[tokio::test]
async fn reconnect_replaces_server_connections() {
    let lane = start(1, 1, "");
    let c = connect(lane.port, "postgres", "secret", "app").await;
    let before: i32 = c.query_one("select pg_backend_pid()", &[]).await.unwrap().get(0);
    admin(lane.port, "postgres", "secret", "RECONNECT app").unwrap();
    let after: i32 = c.query_one("select pg_backend_pid()", &[]).await.unwrap().get(0);
    assert_ne!(before, after);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shards_that_spin_before_they_park_serve_as_before_and_reload_it() {
    let lane = start(2, 2, "spin_before_park_us = 200");
    let shown = admin(lane.port, "postgres", "secret", "SHOW CONFIG").unwrap();
    assert_eq!(column(&shown, "value", |r| r[0] == "spin_before_park_us"), vec!["200"]);
    let mut clients = Vec::new();
    for _ in 0..4 {
        clients.push(connect(lane.port, "postgres", "secret", "app").await);
    }
    for round in 0..50 {
        for (i, c) in clients.iter().enumerate() {
            let n: i32 = c.query_one("select $1::int + 1", &[&(round * 10 + i as i32)]).await.unwrap().get(0);
            assert_eq!(n, round * 10 + i as i32 + 1);
        }
    }
    lane.write_config(&config(2, "spin_before_park_us = 0"));
    admin(lane.port, "postgres", "secret", "RELOAD").unwrap();
    let shown = admin(lane.port, "postgres", "secret", "SHOW CONFIG").unwrap();
    assert_eq!(column(&shown, "value", |r| r[0] == "spin_before_park_us"), vec!["0"]);
    let n: i64 = clients[0].query_one("select count(*) from generate_series(1, 10)", &[]).await.unwrap().get(0);
    assert_eq!(n, 10);
    lane.write_config(&config(2, "spin_before_park_us = 20000"));
    let e = admin(lane.port, "postgres", "secret", "RELOAD").unwrap_err();
    assert!(e.contains("spin_before_park_us must be at most 10000"), "{e}");
}

#[tokio::test]
async fn reload_applies_a_new_config_and_keeps_the_old_one_if_invalid() {
    let lane = start(2, 4, "");
    let c = connect(lane.port, "postgres", "secret", "app").await;
    c.simple_query("select 1").await.unwrap();
    lane.write_config(&config(6, ""));
    admin(lane.port, "postgres", "secret", "RELOAD").unwrap();
    let databases = admin(lane.port, "postgres", "secret", "SHOW DATABASES").unwrap();
    assert_eq!(column(&databases, "pool_size", |r| r[0] == "app"), vec!["6"]);
    let pools = admin(lane.port, "postgres", "secret", "SHOW POOLS").unwrap();
    assert_eq!(column(&pools, "cl_active", |r| r[0] == "app"), vec!["1"], "clients stay connected");

    // SIGHUP with a broken file: the old config stays, and clients go on.
    lane.write_config(&config(6, "pool_mode = \"sometimes\""));
    lane.signal(libc::SIGHUP);
    lane.wait_for_log("config not reloaded, keeping the old one", Duration::from_secs(10));
    c.simple_query("select 2").await.unwrap();
    let e = admin(lane.port, "postgres", "secret", "RELOAD").unwrap_err();
    assert!(e.contains("pool_mode"), "{e}");

    // SIGHUP with a good file applies it.
    lane.write_config(&config(3, ""));
    lane.signal(libc::SIGHUP);
    lane.wait_for_log("SIGHUP: config reloaded", Duration::from_secs(10));
    let mut size = String::new();
    for _ in 0..50 {
        let databases = admin(lane.port, "postgres", "secret", "SHOW DATABASES").unwrap();
        size = column(&databases, "pool_size", |r| r[0] == "app")[0].clone();
        if size == "3" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(size, "3");
}

#[tokio::test]
async fn metrics_endpoint_serves_prometheus_text() {
    let metrics_port = free_port();
    let lane = start(2, 2, &format!("metrics_listen = \"127.0.0.1:{metrics_port}\""));
    let c = connect(lane.port, "postgres", "secret", "app").await;
    for _ in 0..5 {
        c.simple_query("select 1").await.unwrap();
    }
    let get = |path: &str| {
        let mut s = TcpStream::connect(("127.0.0.1", metrics_port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        write!(s, "GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        let mut body = String::new();
        s.read_to_string(&mut body).unwrap();
        body
    };
    let text = get("/metrics");
    assert!(text.starts_with("HTTP/1.1 200 OK"), "{text}");
    assert!(text.contains("# TYPE pglane_pool_transactions_total counter"));
    let total: u64 = text
        .lines()
        .filter(|l| l.starts_with("pglane_pool_transactions_total{") && l.contains("database=\"app\""))
        .map(|l| l.rsplit(' ').next().unwrap().parse::<u64>().unwrap())
        .sum();
    assert!(total >= 5, "{text}");
    assert!(text.contains("pglane_clients 1"), "{text}");
    assert!(get("/other").starts_with("HTTP/1.1 404"));
    // The admin console and ordinary clients still work.
    assert!(try_connect(lane.port, "postgres", "secret", "app").await.is_ok());
}

/// Pool sizes change under load, by RELOAD and by SIGHUP, without a single
/// failed query; the server sees the new limits.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn reload_under_load_changes_pool_sizes_without_failed_queries() {
    let pg = postgres();
    pg.fresh_database("admin_reload", None);
    let config_for = |pool_size: usize| config(pool_size, "").replace("dbname = \"postgres\"", "dbname = \"admin_reload\"");
    let lane = Pglane::start_with_args(&config_for(2), &["--cores", "1"]);
    let backends = || -> usize {
        pg.psql("select count(*) from pg_stat_activity where datname = 'admin_reload' and backend_type = 'client backend'")
            .trim()
            .parse()
            .unwrap()
    };

    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut workers = Vec::new();
    for i in 0..16 {
        let (port, stop) = (lane.port, stop.clone());
        workers.push(tokio::spawn(async move {
            let c = connect(port, "postgres", "secret", "app").await;
            let (mut ok, mut failed) = (0u64, Vec::new());
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                match c.batch_execute(&format!("begin; select pg_sleep(0.002), {i}; commit")).await {
                    Ok(()) => ok += 1,
                    Err(e) => failed.push(e.to_string()),
                }
            }
            (ok, failed)
        }));
    }
    // Watches the server side: the most backends seen for `d`.
    let most_backends_for = |d: Duration| async move {
        let until = std::time::Instant::now() + d;
        let mut most = 0;
        while std::time::Instant::now() < until {
            most = most.max(backends());
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        most
    };

    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(most_backends_for(Duration::from_secs(1)).await <= 2);

    lane.write_config(&config_for(6));
    admin(lane.port, "postgres", "secret", "RELOAD").unwrap();
    let grown = most_backends_for(Duration::from_secs(2)).await;
    assert!((3..=6).contains(&grown), "pool_size 6 under 16 busy clients: {grown} backends");

    lane.write_config(&config_for(1));
    lane.signal(libc::SIGHUP);
    lane.wait_for_log("SIGHUP: config reloaded", Duration::from_secs(10));
    // Connections over the new size close as they come back to the pool.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while backends() > 1 && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(most_backends_for(Duration::from_secs(1)).await <= 1, "pool_size 1 not applied");

    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut total = 0;
    for w in workers {
        let (ok, failed) = w.await.unwrap();
        assert!(failed.is_empty(), "queries failed during reloads: {failed:?}");
        assert!(ok > 0, "a client never got through");
        total += ok;
    }
    eprintln!("reload under load: {total} transactions, 0 failed, backends at pool_size 6: {grown}");
}

/// SET key = value changes a setting at once, as a reload would, until the
/// next RELOAD reads the files alone; what a reload refuses, SET refuses.
#[tokio::test]
async fn set_changes_a_setting_until_the_next_reload() {
    let lane = start(2, 4, "max_client_conn = 100");
    let value = |key: &str| {
        let shown = admin(lane.port, "postgres", "secret", "SHOW CONFIG").unwrap();
        column(&shown, "value", |r| r[0] == key).concat()
    };
    let out = Psql::tcp(lane.port, "postgres", "secret", "pgbouncer").command("SET max_client_conn = 3").output();
    assert!(out.success, "{}", out.stderr);
    assert_eq!(value("max_client_conn"), "3");
    // With three clients connected, a fourth is turned away now.
    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(connect(lane.port, "postgres", "secret", "app").await);
    }
    let e = try_connect(lane.port, "postgres", "secret", "app").await.err().map(|e| format!("{e:?}")).unwrap_or_default();
    assert!(e.contains("too many clients"), "SET max_client_conn = 3 did not hold: {e:?}");
    drop(held);
    tokio::time::sleep(Duration::from_millis(300)).await;

    for (set, why) in [
        ("SET listen = '127.0.0.1:1'", "listen cannot change without a restart"),
        ("SET no_such_setting = 1", "no_such_setting"),
        ("SET spin_before_park_us = 20000", "spin_before_park_us must be at most 10000"),
        ("SET max_client_conn = 'many'", "max_client_conn"),
    ] {
        let e = admin(lane.port, "postgres", "secret", set).unwrap_err();
        assert!(e.contains(why), "{set}: {e}");
    }
    assert_eq!(value("max_client_conn"), "3", "a refused SET leaves the ones before it");
    admin(lane.port, "postgres", "secret", "RELOAD").unwrap();
    assert_eq!(value("max_client_conn"), "100", "RELOAD reads the files alone");
    let e = admin(lane.port, "scramuser", "scrampass", "SET max_client_conn = 3").err().unwrap_or_default();
    assert!(e.contains("admin access needed"), "stats_users may not SET: {e}");
}

/// The SHOWs PgBouncer has beyond the pools and stats, with its columns;
/// SUSPEND and SHOW FDS (PgBouncer's online restart) refused with what
/// pglane does instead; SHOW HELP a NOTICE, as PgBouncer's.
#[tokio::test]
async fn the_rest_of_pgbouncers_console() {
    let lane = start(2, 4, "");
    let c = connect(lane.port, "postgres", "secret", "app").await;
    for _ in 0..10 {
        c.simple_query("select 1").await.unwrap();
    }
    let header = |command: &str| admin(lane.port, "postgres", "secret", command).unwrap()[0].clone();
    assert_eq!(
        header("SHOW STATS_AVERAGES"),
        "database|server_assignment_count|xact_count|query_count|bytes_received|bytes_sent|xact_time|query_time|wait_time|\
         avg_client_parse_count|avg_server_parse_count|avg_bind_count"
    );
    assert_eq!(header("SHOW MEM"), "name|size|used|free|memtotal");
    assert_eq!(header("SHOW PEERS"), "peer_id|host|port|pool_size");
    assert_eq!(header("SHOW PEER_POOLS"), "peer_id|cl_active_cancel_req|cl_waiting_cancel_req|sv_active_cancel|sv_login");
    assert_eq!(header("SHOW DNS_HOSTS"), "hostname|ttl|addrs");
    assert_eq!(header("SHOW DNS_ZONES"), "zonename|serial|count");
    let totals = admin(lane.port, "postgres", "secret", "SHOW TOTALS").unwrap();
    let xacts: u64 = column(&totals, "value", |r| r[0] == "total_xact_count").concat().parse().unwrap();
    assert!(xacts >= 10, "{totals:?}");
    assert_eq!(totals.iter().filter(|l| l.contains('|')).count(), 1 + 22, "{totals:?}");
    assert!(totals.iter().any(|l| l.starts_with("total_ps_bind_count|")), "{totals:?}");
    let sockets = admin(lane.port, "postgres", "secret", "SHOW SOCKETS").unwrap();
    assert!(sockets[0].ends_with("|recv_pos|pkt_pos|pkt_remain|send_pos|send_remain|pkt_avail|send_avail"), "{}", sockets[0]);
    assert!(column(&sockets, "type", |_| true).contains(&"C".to_owned()), "{sockets:?}");
    let active = admin(lane.port, "postgres", "secret", "SHOW ACTIVE_SOCKETS").unwrap();
    assert_eq!(active[0], sockets[0]);

    let state =
        |key: &str| column(&admin(lane.port, "postgres", "secret", "SHOW STATE").unwrap(), "value", |r| r[0] == key).concat();
    assert_eq!((state("active"), state("paused"), state("suspended")), ("yes".into(), "no".into(), "no".into()));
    admin(lane.port, "postgres", "secret", "PAUSE").unwrap();
    assert_eq!((state("active"), state("paused")), ("no".into(), "yes".into()));
    admin(lane.port, "postgres", "secret", "RESUME").unwrap();
    assert_eq!(state("paused"), "no");

    for refused in ["SUSPEND", "SHOW FDS"] {
        let e = admin(lane.port, "postgres", "secret", refused).unwrap_err();
        assert!(e.contains("online restart") && e.contains("SO_REUSEPORT"), "{refused}: {e}");
    }
    let help = Psql::tcp(lane.port, "postgres", "secret", "pgbouncer").command("SHOW HELP").output();
    assert!(help.success && help.stdout.is_empty(), "{help:?}");
    assert!(help.stderr.contains("NOTICE:  Console usage") && help.stderr.contains("SET key = arg"), "{}", help.stderr);
    // Commands in one query run in turn; a `;` inside a SET's quotes is
    // part of its value.
    let both = admin(lane.port, "postgres", "secret", "SET server_reset_query = 'DISCARD ALL; SELECT 1'; SHOW CONFIG").unwrap();
    assert_eq!(column(&both, "value", |r| r[0] == "server_reset_query"), vec!["DISCARD ALL; SELECT 1"]);
}
