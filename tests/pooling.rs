//! The foundation, end to end: real clients (tokio-postgres, psql, pgbench)
//! talk to a real PostgreSQL through pglane.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::Duration;

use common::{connect, postgres, try_connect, Pglane, Psql, PsqlOutput};
use tokio_postgres::SimpleQueryMessage;

/// A pglane in front of the shared test PostgreSQL, two shards.
fn pglane(mode: &str, pool_size: usize, extra: &str) -> Pglane {
    pglane_with_cores(2, mode, pool_size, extra)
}

fn pglane_with_cores(cores: usize, mode: &str, pool_size: usize, extra: &str) -> Pglane {
    pglane_for_db(cores, mode, pool_size, extra, "postgres")
}

/// `app` on the given server database, so a test can count its own server connections.
fn pglane_for_db(cores: usize, mode: &str, pool_size: usize, extra: &str, dbname: &str) -> Pglane {
    Pglane::start_with_args(&config_for_db(mode, pool_size, extra, dbname), &["--cores", &cores.to_string()])
}

/// The config of [`pglane_for_db`].
fn config_for_db(mode: &str, pool_size: usize, extra: &str, dbname: &str) -> String {
    format!(
        r#"pool_mode = "{mode}"
{extra}
[databases.app]
host = "127.0.0.1"
port = {port}
dbname = "{dbname}"
pool_size = {pool_size}

[users.postgres]
password = "secret"

[users.scramuser]
password = "scrampass"

[users.md5user]
password = "md5pass"
"#,
        port = postgres().port
    )
}

fn sqlstate(e: &tokio_postgres::Error) -> String {
    e.as_db_error().map(|d| d.code().code().to_owned()).unwrap_or_else(|| format!("no SQLSTATE: {e}"))
}

fn rows(messages: &[SimpleQueryMessage]) -> Vec<Vec<String>> {
    messages
        .iter()
        .filter_map(|m| match m {
            SimpleQueryMessage::Row(r) => Some((0..r.len()).map(|i| r.get(i).unwrap_or("NULL").to_owned()).collect()),
            _ => None,
        })
        .collect()
}

fn psql(port: u16, sql: &str) -> PsqlOutput {
    Psql::tcp(port, "postgres", "secret", "app").command(sql).output()
}

#[tokio::test]
async fn simple_and_extended_queries() {
    let lane = pglane("transaction", 4, "");
    let c = connect(lane.port, "postgres", "secret", "app").await;
    let got = c.simple_query("select 1 as a, 'x' as b; select null::int").await.unwrap();
    assert_eq!(rows(&got), vec![vec!["1".to_string(), "x".into()], vec!["NULL".into()]]);
    // query_typed: one unnamed Parse/Bind/Execute/Sync round trip.
    let row = c
        .query_typed(
            "select $1::int4 + 1, $2::text",
            &[(&41i32, tokio_postgres::types::Type::INT4), (&"hé", tokio_postgres::types::Type::TEXT)],
        )
        .await
        .unwrap();
    assert_eq!(row[0].get::<_, i32>(0), 42);
    assert_eq!(row[0].get::<_, &str>(1), "hé");
    // A named prepared statement used inside one transaction stays on one server.
    c.batch_execute("begin").await.unwrap();
    let stmt = c.prepare("select $1::int8 * 2").await.unwrap();
    for i in 0..5i64 {
        assert_eq!(c.query_one(&stmt, &[&i]).await.unwrap().get::<_, i64>(0), i * 2);
    }
    c.batch_execute("commit").await.unwrap();
}

#[tokio::test]
async fn transactions_commit_roll_back_and_fail() {
    let lane = pglane("transaction", 2, "");
    let c = connect(lane.port, "postgres", "secret", "app").await;
    c.batch_execute("drop table if exists tx_t; create table tx_t(v int)").await.unwrap();
    c.batch_execute("begin; insert into tx_t values (1); rollback").await.unwrap();
    c.batch_execute("begin; insert into tx_t values (2); commit").await.unwrap();
    let n: i64 = c.query_one("select count(*) from tx_t where v = 2", &[]).await.unwrap().get(0);
    let rolled_back: i64 = c.query_one("select count(*) from tx_t where v = 1", &[]).await.unwrap().get(0);
    assert_eq!((n, rolled_back), (1, 0));

    // An error inside a transaction aborts it until ROLLBACK, as on a direct connection.
    c.batch_execute("begin").await.unwrap();
    let e = c.simple_query("select 1/0").await.unwrap_err();
    assert_eq!(sqlstate(&e), "22012");
    let e = c.simple_query("select 1").await.unwrap_err();
    assert_eq!(sqlstate(&e), "25P02");
    c.batch_execute("rollback").await.unwrap();
    assert_eq!(rows(&c.simple_query("select 7").await.unwrap()), vec![vec!["7".to_string()]]);

    // An error outside a transaction block does not poison the next query.
    let e = c.simple_query("select * from no_such_table").await.unwrap_err();
    assert_eq!(sqlstate(&e), "42P01");
    assert_eq!(rows(&c.simple_query("select 8").await.unwrap()), vec![vec!["8".to_string()]]);
}

#[tokio::test]
async fn copy_in_and_out() {
    use futures_util::{SinkExt, TryStreamExt};
    let lane = pglane("transaction", 2, "");
    let c = connect(lane.port, "postgres", "secret", "app").await;
    c.batch_execute("drop table if exists copy_t; create table copy_t(id int, name text)").await.unwrap();

    // Extended-protocol COPY (tokio-postgres), inside a transaction.
    c.batch_execute("begin").await.unwrap();
    let sink = c.copy_in("copy copy_t from stdin").await.unwrap();
    futures_util::pin_mut!(sink);
    let mut data = String::new();
    for i in 0..5000 {
        data.push_str(&format!("{i}\tname {i}\n"));
    }
    sink.send(bytes::Bytes::from(data)).await.unwrap();
    assert_eq!(sink.finish().await.unwrap(), 5000);
    c.batch_execute("commit").await.unwrap();

    // COPY TO STDOUT.
    let stream = c.copy_out("copy (select * from copy_t order by id) to stdout").await.unwrap();
    let chunks: Vec<bytes::Bytes> = stream.try_collect().await.unwrap();
    let text: Vec<u8> = chunks.concat();
    let text = String::from_utf8(text).unwrap();
    assert_eq!(text.lines().count(), 5000);
    assert_eq!(text.lines().last(), Some("4999\tname 4999"));

    // Simple-protocol COPY through psql's \copy.
    let file = lane.dir.join("rows.tsv");
    std::fs::write(&file, "9001\tfrom psql\n9002\tfrom psql\n").unwrap();
    let out = psql(lane.port, &format!("\\copy copy_t from '{}'", file.display()));
    assert!(out.success, "{}", out.stderr);
    let n: i64 = c.query_one("select count(*) from copy_t where name = 'from psql'", &[]).await.unwrap().get(0);
    assert_eq!(n, 2);

    // A COPY that fails midway leaves the connection usable.
    let e = c.simple_query("copy copy_t from program 'false'").await.unwrap_err();
    assert!(e.as_db_error().is_some(), "{e}");
    assert_eq!(rows(&c.simple_query("select 1").await.unwrap()), vec![vec!["1".to_string()]]);
}

#[test]
fn notices_reach_the_client() {
    let lane = pglane("transaction", 2, "");
    let out = psql(lane.port, "do $$ begin raise notice 'hello from plpgsql'; end $$");
    assert!(out.success, "{out:?}");
    assert!(out.stderr.contains("NOTICE:  hello from plpgsql"), "{out:?}");
}

#[tokio::test]
async fn large_result_sets_arrive_whole() {
    let lane = pglane("transaction", 2, "");
    let c = connect(lane.port, "postgres", "secret", "app").await;
    let sql = "select g, repeat('x', 200) || g from generate_series(1, 100000) g";
    let rows = c.query(sql, &[]).await.unwrap();
    assert_eq!(rows.len(), 100_000);
    assert_eq!(rows[99_999].get::<_, i32>(0), 100_000);
    assert_eq!(rows[99_999].get::<_, &str>(1), format!("{}100000", "x".repeat(200)));
    // Same through the simple protocol.
    let got = c.simple_query(sql).await.unwrap();
    assert_eq!(got.iter().filter(|m| matches!(m, SimpleQueryMessage::Row(_))).count(), 100_000);
    // One value larger than pglane's buffers.
    let big: String = c.query_one("select repeat('y', 3000000)", &[]).await.unwrap().get(0);
    assert_eq!(big.len(), 3_000_000);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_clients_share_few_server_connections() {
    let pg = postgres();
    pg.fresh_database("many_db", None);
    let lane = pglane_for_db(2, "transaction", 4, "", "many_db");
    let setup = connect(lane.port, "postgres", "secret", "app").await;
    setup.batch_execute("drop table if exists many_t; create table many_t(client int, n int)").await.unwrap();
    let port = lane.port;
    let mut tasks = Vec::new();
    for client in 0..200 {
        tasks.push(tokio::spawn(async move {
            let c = connect(port, "postgres", "secret", "app").await;
            for n in 0..10 {
                c.batch_execute(&format!("begin; insert into many_t values ({client}, {n}); commit")).await.unwrap();
                let r = c
                    .query_typed("select count(*) from many_t where client = $1", &[(&client, tokio_postgres::types::Type::INT4)])
                    .await
                    .unwrap();
                assert_eq!(r[0].get::<_, i64>(0), n + 1);
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let total: i64 = setup.query_one("select count(*) from many_t", &[]).await.unwrap().get(0);
    assert_eq!(total, 2000);
    // pglane never held more than pool_size server connections to the database.
    let servers: i64 = pg.psql("select count(*) from pg_stat_activity where datname = 'many_db'").parse().unwrap();
    assert!(servers <= 4, "{servers} server connections for pool_size 4");
}

#[tokio::test]
async fn session_mode_keeps_the_server_and_resets_it_after() {
    // One shard: on two, pool_size 1 moves its one connection between the
    // shards by closing and opening it (see `pool::budget`).
    let lane = pglane_with_cores(1, "session", 1, "");
    let c = connect(lane.port, "postgres", "secret", "app").await;
    c.batch_execute("set search_path = pg_catalog, public").await.unwrap();
    let pid: i32 = c.query_one("select pg_backend_pid()", &[]).await.unwrap().get(0);
    let path: String = c.query_one("show search_path", &[]).await.unwrap().get(0);
    assert_eq!(path, "pg_catalog, public");
    drop(c);
    // The next client gets the same (only) server connection, reset by DISCARD ALL.
    let mut waited = 0;
    let c = loop {
        let c = connect(lane.port, "postgres", "secret", "app").await;
        let pid2: i32 = c.query_one("select pg_backend_pid()", &[]).await.unwrap().get(0);
        if pid2 == pid || waited > 50 {
            assert_eq!(pid2, pid, "pool_size 1 should reuse the server connection");
            break c;
        }
        waited += 1;
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let path: String = c.query_one("show search_path", &[]).await.unwrap().get(0);
    assert_eq!(path, "\"$user\", public");
}

#[tokio::test]
async fn cancel_reaches_a_query_from_any_shard() {
    let config = config_for_db("transaction", 4, "", "postgres");
    let lane = Pglane::start_with_env(&config, &["--cores", "2"], &[common::LOG_CANCEL_ROUTING]);
    // SO_REUSEPORT spreads connections over the two shards by hash, so a cancel
    // request lands on the client's own shard or the other one. Repeat until
    // one has crossed shards (each try has even odds), checking every cancel works.
    for attempt in 0..40 {
        let c = connect(lane.port, "postgres", "secret", "app").await;
        let token = c.cancel_token();
        let sleeper = tokio::spawn(async move { c.simple_query("select pg_sleep(30)").await.map(|_| ()) });
        tokio::time::sleep(Duration::from_millis(300)).await;
        token.cancel_query(tokio_postgres::NoTls).await.unwrap();
        let result = tokio::time::timeout(Duration::from_secs(10), sleeper).await.expect("cancel took effect").unwrap();
        assert_eq!(sqlstate(&result.unwrap_err()), "57014", "attempt {attempt}");
        if lane.log().contains("passing a cancel request to the shard that owns the client") {
            return;
        }
    }
    panic!("no cancel request crossed shards in 40 tries:\n{}", lane.log());
}

#[tokio::test]
async fn wrong_passwords_and_unknown_names_are_refused() {
    let lane = pglane("transaction", 2, "");
    let e = try_connect(lane.port, "postgres", "wrong", "app").await.expect_err("refused");
    assert_eq!(sqlstate(&e), "28P01");
    let e = try_connect(lane.port, "nobody", "x", "app").await.expect_err("refused");
    assert_eq!(sqlstate(&e), "28P01");
    let e = try_connect(lane.port, "postgres", "secret", "nodb").await.expect_err("refused");
    assert_eq!(sqlstate(&e), "3D000");
    // Other users log in with SCRAM against their own passwords.
    let c = connect(lane.port, "scramuser", "scrampass", "app").await;
    let who: String = c.query_one("select current_user::text", &[]).await.unwrap().get(0);
    assert_eq!(who, "scramuser");
}

#[tokio::test]
async fn md5_clients_and_md5_servers() {
    // Clients prove their password to pglane with md5; pglane logs in to
    // PostgreSQL as md5user, whose pg_hba entry demands md5.
    let lane = pglane("transaction", 2, r#"auth_type = "md5""#);
    let c = connect(lane.port, "md5user", "md5pass", "app").await;
    let who: String = c.query_one("select current_user::text", &[]).await.unwrap().get(0);
    assert_eq!(who, "md5user");
    let e = try_connect(lane.port, "md5user", "nope", "app").await.expect_err("refused");
    assert_eq!(sqlstate(&e), "28P01");
}

/// Reads whatever the peer sends until it closes (or 5 s pass).
fn read_to_close(s: &mut TcpStream) -> Vec<u8> {
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    out
}

fn startup_packet(user: &str, db: &str) -> Vec<u8> {
    let mut body = 196608i32.to_be_bytes().to_vec();
    for (k, v) in [("user", user), ("database", db)] {
        body.extend_from_slice(k.as_bytes());
        body.push(0);
        body.extend_from_slice(v.as_bytes());
        body.push(0);
    }
    body.push(0);
    let mut p = ((body.len() + 4) as i32).to_be_bytes().to_vec();
    p.extend(body);
    p
}

/// Logs in over a raw socket (trust auth) and reads up to ReadyForQuery.
fn raw_login(port: u16) -> TcpStream {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.write_all(&startup_packet("postgres", "app")).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while !got.windows(6).any(|w| w == b"Z\0\0\0\x05I") {
        let n = s.read(&mut buf).unwrap();
        assert!(n > 0, "closed during login: {got:?}");
        got.extend_from_slice(&buf[..n]);
    }
    s
}

fn error_text(reply: &[u8]) -> String {
    assert_eq!(reply.first(), Some(&b'E'), "expected an ErrorResponse, got {reply:?}");
    String::from_utf8_lossy(reply).into_owned()
}

#[test]
fn malformed_startup_packets_get_an_error_and_harm_no_one() {
    let lane = pglane("transaction", 2, r#"auth_type = "trust""#);
    // Declared length too small: closed without a word, as PostgreSQL
    // does ("invalid length of startup packet" goes to its log only).
    let mut s = TcpStream::connect(("127.0.0.1", lane.port)).unwrap();
    s.write_all(&[0, 0, 0, 3, 0, 0, 0, 0]).unwrap();
    assert_eq!(read_to_close(&mut s), b"");
    // Declared length far too large: the same, before anything is allocated.
    let mut s = TcpStream::connect(("127.0.0.1", lane.port)).unwrap();
    s.write_all(&[0x7f, 0xff, 0xff, 0xff]).unwrap();
    assert_eq!(read_to_close(&mut s), b"");
    // Unknown protocol version (protocol 4; for 1 and 2 see tests/wire.rs).
    let mut s = TcpStream::connect(("127.0.0.1", lane.port)).unwrap();
    s.write_all(&[0, 0, 0, 9, 0, 4, 0, 0, 0]).unwrap();
    assert!(error_text(&read_to_close(&mut s)).contains("unsupported frontend protocol 4.0: server supports 3.0 to 3.0"));
    // No user name.
    let mut s = TcpStream::connect(("127.0.0.1", lane.port)).unwrap();
    s.write_all(&startup_packet("", "app")).unwrap();
    assert!(error_text(&read_to_close(&mut s)).contains("no PostgreSQL user name"));
    // SSLRequest is answered 'N'; the client may go on in plaintext.
    let mut s = TcpStream::connect(("127.0.0.1", lane.port)).unwrap();
    s.write_all(&[0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f]).unwrap();
    let mut answer = [0u8; 1];
    s.read_exact(&mut answer).unwrap();
    assert_eq!(&answer, b"N");
    // Everyone else is fine.
    assert_eq!(psql(lane.port, "select 42").stdout, "42");
}

#[test]
fn oversized_and_unknown_messages_close_only_that_client() {
    let lane = pglane(
        "transaction",
        2,
        r#"auth_type = "trust"
max_message_size = 1048576"#,
    );
    let mut s = raw_login(lane.port);
    s.write_all(&[b'Q', 0x10, 0, 0, 0]).unwrap(); // 256 MiB Query
    let reply = read_to_close(&mut s);
    assert!(error_text(&reply).contains("exceeds the maximum of 1048576 bytes"), "{}", error_text(&reply));

    let mut s = raw_login(lane.port);
    s.write_all(&[b'?', 0, 0, 0, 4]).unwrap();
    assert!(error_text(&read_to_close(&mut s)).contains("unexpected message type '?'"));

    assert_eq!(psql(lane.port, "select 'still serving'").stdout, "still serving");
}

#[tokio::test]
async fn a_client_leaving_mid_transaction_leaves_a_clean_server() {
    // One shard with one server connection, so every client gets the same one.
    let lane = pglane_with_cores(1, "transaction", 1, "");
    let c = connect(lane.port, "postgres", "secret", "app").await;
    c.batch_execute("drop table if exists leave_t; create table leave_t(v int)").await.unwrap();
    c.batch_execute("begin; insert into leave_t values (1)").await.unwrap();
    let pid: i32 = c.query_one("select pg_backend_pid()", &[]).await.unwrap().get(0);
    drop(c); // Terminate mid-transaction

    // Left in a failed transaction, too.
    let c = connect(lane.port, "postgres", "secret", "app").await;
    c.batch_execute("begin; insert into leave_t values (2)").await.unwrap();
    assert_eq!(sqlstate(&c.simple_query("select 1/0").await.unwrap_err()), "22012");
    drop(c);

    // With pool_size 1 the next client must get the same server, rolled back and idle.
    let c = connect(lane.port, "postgres", "secret", "app").await;
    let pid2: i32 = c.query_one("select pg_backend_pid()", &[]).await.unwrap().get(0);
    assert_eq!(pid, pid2, "the server connection was reused, not replaced");
    let n: i64 = c.query_one("select count(*) from leave_t", &[]).await.unwrap().get(0);
    assert_eq!(n, 0, "the abandoned transactions were rolled back");
    let state = postgres().psql(&format!("select state from pg_stat_activity where pid = {pid}"));
    assert_eq!(state, "idle");
}

#[test]
fn a_socket_closed_mid_transaction_is_rolled_back() {
    let pg = postgres();
    pg.fresh_database("close_db", None);
    let lane = pglane_for_db(1, "transaction", 1, r#"auth_type = "trust""#, "close_db");
    let out = psql(lane.port, "drop table if exists close_t; create table close_t(v int)");
    assert!(out.success, "{out:?}");
    let mut s = raw_login(lane.port);
    let mut q = b"Q\0\0\0\0begin; insert into close_t values (1)\0".to_vec();
    let len = (q.len() - 1) as i32;
    q[1..5].copy_from_slice(&len.to_be_bytes());
    s.write_all(&q).unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 1024];
    while !got.windows(6).any(|w| w == b"Z\0\0\0\x05T") {
        let n = s.read(&mut buf).unwrap();
        assert!(n > 0);
        got.extend_from_slice(&buf[..n]);
    }
    drop(s); // no Terminate
    assert_eq!(psql(lane.port, "select count(*) from close_t").stdout, "0");
    let stuck = pg.psql("select count(*) from pg_stat_activity where datname = 'close_db' and state like 'idle in transaction%'");
    assert_eq!(stuck, "0");
}

#[test]
fn pgbench_select_only_through_pglane_has_no_failures() {
    let pg = postgres();
    pg.fresh_database("bench_pool", None);
    common::pgbench(pg.port, "postgres", &["-i", "-q", "-s", "1", "bench_pool"]);
    let lane = Pglane::start_with_args(
        &format!(
            "pool_mode = \"transaction\"\n[databases.bench_pool]\nhost = \"127.0.0.1\"\nport = {}\npool_size = 4\n[users.postgres]\npassword = \"secret\"\n",
            pg.port
        ),
        &["--cores", "2"],
    );
    for mode in ["simple", "extended"] {
        let out =
            common::pgbench(lane.port, "postgres", &["-n", "-S", "-M", mode, "-c", "16", "-j", "2", "-T", "3", "bench_pool"]);
        let processed: u64 = out
            .lines()
            .find_map(|l| l.strip_prefix("number of transactions actually processed: "))
            .and_then(|v| v.split('/').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no transaction count in:\n{out}"));
        assert!(processed > 0, "{out}");
        assert!(out.contains("number of failed transactions: 0 (0.000%)"), "{out}");
    }
}

#[test]
fn check_validates_config_files() {
    let bin = &common::pglane_bin();
    let ok = Command::new(bin)
        .args(["--check", "--config", concat!(env!("CARGO_MANIFEST_DIR"), "/config/pglane.toml")])
        .output()
        .unwrap();
    assert!(ok.status.success(), "{ok:?}");
    let dir = std::env::temp_dir().join(format!("pglane-check-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bad = dir.join("bad.toml");
    std::fs::write(&bad, "listen = \"127.0.0.1:6432\"\n[databases.app]\npool_size = 0\n").unwrap();
    let out = Command::new(bin).args(["--check", "--config", bad.to_str().unwrap()]).output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("databases.app.pool_size must be at least 1"), "{out:?}");
    std::fs::remove_dir_all(&dir).ok();

    // --cpus names the CPUs; it is checked against those this process may use.
    let example = concat!(env!("CARGO_MANIFEST_DIR"), "/config/pglane.toml");
    let on_cpu0 = Command::new(bin).args(["--check", "--cpus", "0", "--config", example]).output().unwrap();
    assert!(on_cpu0.status.success(), "{on_cpu0:?}");
    let far = Command::new(bin).args(["--check", "--cpus", "0-4095", "--config", example]).output().unwrap();
    assert!(String::from_utf8_lossy(&far.stderr).contains("is not one pglane may run on"), "{far:?}");
    let both = Command::new(bin).args(["--check", "--cpus", "0", "--cores", "1", "--config", example]).output().unwrap();
    assert!(!both.status.success() && String::from_utf8_lossy(&both.stderr).contains("cannot be used with"), "{both:?}");
}

#[tokio::test]
async fn shutdown_lets_the_open_transaction_finish() {
    // A generous shutdown_timeout, so a loaded machine cannot run it out
    // before the test's transaction is done.
    let mut lane = pglane("transaction", 2, "shutdown_timeout = 120");
    let c = connect(lane.port, "postgres", "secret", "app").await;
    c.batch_execute("begin").await.unwrap();
    lane.signal(libc::SIGTERM);
    // Both shards have closed their listeners (on a loaded machine this can
    // take a moment after the signal).
    for _ in 0..200 {
        if lane.log().matches("no longer accepting connections").count() == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(lane.log().matches("no longer accepting connections").count(), 2, "{}", lane.log());
    // New clients are turned away...
    assert!(try_connect(lane.port, "postgres", "secret", "app").await.is_err());
    // ...but the transaction in flight completes.
    let one: i32 = c.query_one("select 1", &[]).await.unwrap().get(0);
    assert_eq!(one, 1);
    c.batch_execute("commit").await.unwrap();
    // Between transactions the client is told pglane is going away.
    let e = c.simple_query("select 2").await.unwrap_err();
    match e.as_db_error() {
        Some(db) => {
            assert_eq!((db.code().code(), db.message()), ("57P01", "terminating connection because pglane is shutting down"))
        }
        None => assert!(e.is_closed(), "{e:?}"),
    }
    // With no client left, pglane exits by itself, successfully.
    for _ in 0..100 {
        if !lane.is_running() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(!lane.is_running(), "pglane still running 10 s after its last client left");
    let status = lane.stop().expect("exited");
    assert!(status.success(), "{status:?}\n{}", lane.log());
}

#[tokio::test]
async fn servers_reached_over_a_unix_socket() {
    let pg = postgres();
    let lane = Pglane::start_with_args(
        &format!(
            "pool_mode = \"transaction\"\n[databases.app]\nhost = \"{}\"\nport = {}\ndbname = \"postgres\"\npool_size = 2\n[users.postgres]\npassword = \"secret\"\n",
            pg.socket_dir.display(),
            pg.port
        ),
        &["--cores", "2"],
    );
    let c = connect(lane.port, "postgres", "secret", "app").await;
    // The server sees a unix-socket client: no client address.
    let addr: Option<String> =
        c.query_one("select client_addr::text from pg_stat_activity where pid = pg_backend_pid()", &[]).await.unwrap().get(0);
    assert_eq!(addr, None);
    let rows = c.query("select generate_series(1, 1000)", &[]).await.unwrap();
    assert_eq!(rows.len(), 1000);
}

#[tokio::test]
async fn clients_on_a_unix_socket() {
    let pg = postgres();
    let dir = std::env::temp_dir().join(format!("pglane-sockets-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut lane = Pglane::start_with_args(
        &format!(
            "unix_socket_dir = \"{}\"\npool_mode = \"transaction\"\n[databases.app]\nhost = \"127.0.0.1\"\nport = {}\ndbname = \"postgres\"\npool_size = 2\n[users.postgres]\npassword = \"secret\"\n",
            dir.display(),
            pg.port
        ),
        &["--cores", "2"],
    );
    let socket = dir.join(format!(".s.PGSQL.{}", lane.port));
    assert!(socket.exists(), "no {}", socket.display());

    // psql finds it the way it finds PostgreSQL's: -h <dir> -p <port>.
    let out = Psql::socket(&dir, lane.port, "postgres", "app").conninfo("password=secret").command("select 40 + 2").output();
    assert_eq!(out.stdout, "42", "{}", out.stderr);

    // Many clients at once (spread over both shards), each with its own work.
    let mut tasks = Vec::new();
    for i in 0..20i64 {
        let dir = dir.clone();
        let port = lane.port;
        tasks.push(tokio::spawn(async move {
            let (client, connection) = tokio_postgres::Config::new()
                .host_path(&dir)
                .port(port)
                .user("postgres")
                .password("secret")
                .dbname("app")
                .connect(tokio_postgres::NoTls)
                .await
                .unwrap();
            tokio::spawn(connection);
            let mut sum = 0;
            for j in 0..20i64 {
                let row = client.query_one("select $1::int8 * 1000 + $2::int8", &[&i, &j]).await.unwrap();
                sum += row.get::<_, i64>(0);
            }
            assert_eq!(sum, i * 20_000 + 190);
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    lane.stop();
    assert!(!socket.exists(), "the socket file outlived pglane");
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn max_client_conn_turns_away_the_client_over_the_limit() {
    let lane = pglane("transaction", 2, "max_client_conn = 2");
    let _a = connect(lane.port, "postgres", "secret", "app").await;
    let _b = connect(lane.port, "postgres", "secret", "app").await;
    let e = try_connect(lane.port, "postgres", "secret", "app").await.expect_err("refused");
    assert_eq!(sqlstate(&e), "53300");
    // PostgreSQL's own words at max_connections (PgBouncer's differ).
    let db = e.as_db_error().expect("an ErrorResponse");
    assert_eq!((db.severity(), db.message()), ("FATAL", "sorry, too many clients already"));
    assert!(lane.log().contains("max_client_conn reached"), "{}", lane.log());
    drop(_a);
    // A slot frees up when a client leaves.
    let mut admitted = false;
    for _ in 0..50 {
        if try_connect(lane.port, "postgres", "secret", "app").await.is_ok() {
            admitted = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(admitted);
}

#[tokio::test]
async fn query_wait_timeout_when_no_server_connection_frees_up() {
    let lane = pglane_with_cores(1, "transaction", 1, "query_wait_timeout = 1");
    let holder = connect(lane.port, "postgres", "secret", "app").await;
    holder.batch_execute("begin; select 1").await.unwrap(); // holds the only server connection
    let waiter = connect(lane.port, "postgres", "secret", "app").await;
    let started = std::time::Instant::now();
    let e = waiter.simple_query("select 1").await.unwrap_err();
    assert!(started.elapsed() >= Duration::from_millis(900), "gave up after {:?}", started.elapsed());
    assert!(sqlstate(&e) == "08P01" || e.is_closed(), "{e:?}");
    if let Some(db) = e.as_db_error() {
        assert_eq!(db.message(), "query_wait_timeout");
    }
    // The holder is unaffected.
    holder.batch_execute("commit").await.unwrap();
}

/// DROP DATABASE, ALTER DATABASE ... RENAME and CREATE DATABASE ...
/// TEMPLATE need the database free of other sessions; pglane's idle pooled
/// connections to it are such sessions, though no client uses them, and
/// made the statement fail (55006) where it succeeds direct. pglane closes
/// them, on every shard, before the statement runs; over either protocol.
/// A connection a client is using stays, and the statement fails as it
/// would direct with that client connected.
#[tokio::test]
async fn drop_database_works_with_idle_pooled_connections_to_it() {
    let pg = postgres();
    let lane = Pglane::start_with_args(
        &format!(
            "pool_mode = \"transaction\"\n\
             [databases.doomed]\nhost = \"127.0.0.1\"\nport = {p}\ndbname = \"doomed_db\"\npool_size = 4\n\
             [databases.renamed]\nhost = \"127.0.0.1\"\nport = {p}\ndbname = \"renamed_db\"\npool_size = 4\n\
             [databases.admin]\nhost = \"127.0.0.1\"\nport = {p}\ndbname = \"postgres\"\npool_size = 2\n\
             [users.postgres]\npassword = \"secret\"\n",
            p = pg.port
        ),
        &["--cores", "2"],
    );
    let backends_of = |db: &str| -> usize {
        pg.psql(&format!("select count(*) from pg_stat_activity where datname = '{db}'")).trim().parse().unwrap()
    };
    // Idle server connections to `db`, left by clients that came and went
    // (landing on both shards, as the kernel spreads them).
    let leave_idle_connections_to = |name: &'static str, db: &'static str| async move {
        let clients: Vec<_> =
            futures_util::future::join_all((0..6).map(|_| connect(lane.port, "postgres", "secret", name))).await;
        futures_util::future::join_all(clients.iter().map(|c| c.batch_execute("begin; select pg_sleep(0.05); commit"))).await;
        drop(clients);
        assert!(backends_of(db) > 0, "pglane keeps idle connections to {db}");
    };
    let admin = connect(lane.port, "postgres", "secret", "admin").await;
    for extended in [false, true] {
        let run = |sql: &'static str| {
            let admin = &admin;
            async move {
                if extended {
                    admin.execute(sql, &[]).await.map(|_| ())
                } else {
                    admin.batch_execute(sql).await
                }
            }
        };
        let _ = run("drop database if exists copy_db").await;
        pg.psql("create database doomed_db");
        leave_idle_connections_to("doomed", "doomed_db").await;
        run("create database copy_db template doomed_db").await.expect("CREATE DATABASE ... TEMPLATE");
        leave_idle_connections_to("doomed", "doomed_db").await;
        run("alter database doomed_db rename to renamed_db").await.expect("ALTER DATABASE ... RENAME");
        leave_idle_connections_to("renamed", "renamed_db").await;
        run("DROP DATABASE renamed_db").await.expect("DROP DATABASE");
        assert_eq!(backends_of("renamed_db"), 0);
        run("drop database copy_db").await.unwrap();
    }

    // A client in a transaction on the database keeps it, as direct.
    pg.psql("create database doomed_db");
    let user = connect(lane.port, "postgres", "secret", "doomed").await;
    user.batch_execute("begin; select 1").await.unwrap();
    let e = admin.batch_execute("drop database doomed_db").await.expect_err("in use");
    assert_eq!(e.as_db_error().map(|d| d.code().code()), Some("55006"), "{e}");
    user.batch_execute("commit").await.unwrap();
    drop(user);
    admin.batch_execute("drop database doomed_db").await.expect("once the client is done");
    assert!(lane.log().contains("closed idle server connections"), "{}", lane.log());
}

/// Instances peered as PgBouncer's (`peer_id`, `[peers]`) share the
/// server: a DROP DATABASE through one instance asks the others to close
/// their idle connections to that database too, before the statement
/// runs, so it succeeds as it would direct. Without the ask, the other
/// instance's idle connections make it fail with 55006.
#[tokio::test]
async fn drop_database_through_one_peer_closes_the_other_peers_idle_connections() {
    let pg = postgres();
    let ports = [common::free_port(), common::free_port()];
    let body = |id: u16| {
        format!(
            "pool_mode = \"transaction\"\npeer_id = {id}\n\
             [peers.1]\nhost = \"127.0.0.1\"\nport = {one}\n[peers.2]\nhost = \"127.0.0.1\"\nport = {two}\n\
             [databases.doomed]\nhost = \"127.0.0.1\"\nport = {p}\ndbname = \"peered_db\"\npool_size = 4\n\
             [databases.admin]\nhost = \"127.0.0.1\"\nport = {p}\ndbname = \"postgres\"\npool_size = 2\n\
             [users.postgres]\npassword = \"secret\"\n",
            one = ports[0],
            two = ports[1],
            p = pg.port
        )
    };
    let start = |port: u16, id: u16| {
        Pglane::try_start_on(port, &body(id), &["--cores", "2"], &[])
            .unwrap_or_else(|(why, log)| panic!("pglane {id} did not start: {why}\n{log}"))
    };
    let (one, two) = (start(ports[0], 1), start(ports[1], 2));
    let backends =
        || -> usize { pg.psql("select count(*) from pg_stat_activity where datname = 'peered_db'").trim().parse().unwrap() };
    let admin = connect(one.port, "postgres", "secret", "admin").await;
    for round in 0..3 {
        pg.psql("create database peered_db");
        // Idle connections to it on both instances, on whichever shards
        // the kernel gave their clients.
        for lane in [&one, &two] {
            let clients =
                futures_util::future::join_all((0..6).map(|_| connect(lane.port, "postgres", "secret", "doomed"))).await;
            futures_util::future::join_all(clients.iter().map(|c| c.batch_execute("begin; select pg_sleep(0.05); commit"))).await;
        }
        assert!(backends() > 0, "round {round}: the instances keep idle connections");
        admin.batch_execute("drop database peered_db").await.unwrap_or_else(|e| panic!("round {round}: DROP DATABASE: {e}"));
        assert_eq!(backends(), 0, "round {round}");
    }
    assert!(two.log().contains("closed idle server connections"), "{}", two.log());
}
