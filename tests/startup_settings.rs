//! Settings in a client's startup packet, as parameters (`search_path=...`,
//! as pgjdbc's currentSchema sends it) or in `options` (`-c name=value`, as
//! libpq and tokio-postgres send it), through pglane in transaction mode:
//! every server connection the client gets has them, no other client ever
//! sees them, RESET goes back to them, and a value the server refuses ends
//! that client's session with the server's error while the pool carries on.

mod common;
#[path = "common/raw.rs"]
mod raw;

use bytes::BytesMut;
use common::{connect, postgres, Pglane};
use pglane::protocol::{backend, frontend};
use raw::{first_column, RawClient};

const DB: &str = "startup_db";

fn start(mode: &str) -> Pglane {
    let pg = postgres();
    static READY: std::sync::OnceLock<()> = std::sync::OnceLock::new();
    READY.get_or_init(|| {
        pg.fresh_database(DB, None);
        pg.psql_db(
            DB,
            "create schema app_schema; create table app_schema.marker (v text); insert into app_schema.marker values ('app');
             create table public.marker (v text); insert into public.marker values ('public');
             grant usage on schema app_schema to public; grant select on all tables in schema app_schema, public to public;",
        );
    });
    Pglane::start_with_args(
        &format!(
            "pool_mode = \"{mode}\"\nauth_type = \"trust\"\n[databases.app]\nhost = \"127.0.0.1\"\nport = {}\ndbname = \"{DB}\"\npool_size = 2\n[users.postgres]\npassword = \"secret\"\n",
            pg.port
        ),
        &["--cores", "1"],
    )
}

async fn connect_with_options(port: u16, db: &str, options: &str) -> tokio_postgres::Client {
    common::try_connect_with_options(port, "postgres", "secret", db, Some(options)).await.expect("connect with options")
}

async fn show(c: &tokio_postgres::Client, setting: &str) -> String {
    c.query_one(&format!("show {setting}"), &[]).await.unwrap().get(0)
}

async fn backend_pid(c: &tokio_postgres::Client) -> i32 {
    c.query_one("select pg_backend_pid()", &[]).await.unwrap().get(0)
}

/// tokio-postgres sends `options`; pglane used to drop it.
#[tokio::test]
async fn options_follow_their_client_across_server_connections_and_nowhere_else() {
    let lane = start("transaction");
    let options = r"-c search_path=app_schema,public -c statement_timeout=7s --lock-timeout=3s -c application_name=with\ space";
    let direct = connect_with_options(postgres().port, DB, options).await;
    let a = connect_with_options(lane.port, "app", options).await;
    let b = connect(lane.port, "postgres", "secret", "app").await;
    let c = connect(lane.port, "postgres", "secret", "app").await;
    let mut servers_seen = std::collections::HashSet::new();
    for _ in 0..4 {
        // a's last server connection is held by another client in a
        // transaction, so a runs on the other one: a is seen on both.
        let last = backend_pid(&a).await;
        servers_seen.insert(last);
        b.batch_execute("begin").await.unwrap();
        let holder = if backend_pid(&b).await == last {
            &b
        } else {
            c.batch_execute("begin").await.unwrap();
            assert_eq!(backend_pid(&c).await, last, "two server connections, b holds one, c must get the other");
            b.batch_execute("commit").await.unwrap();
            &c
        };
        assert_ne!(backend_pid(&a).await, last);
        servers_seen.insert(backend_pid(&a).await);
        for setting in ["search_path", "statement_timeout", "lock_timeout", "application_name"] {
            assert_eq!(show(&a, setting).await, show(&direct, setting).await, "{setting}");
        }
        assert_eq!(show(&a, "lock_timeout").await, "3s");
        let v: String = a.query_one("select v from marker", &[]).await.unwrap().get(0);
        assert_eq!(v, "app");
        let simple = a.simple_query("select v from marker").await.unwrap();
        assert!(matches!(&simple[1], tokio_postgres::SimpleQueryMessage::Row(r) if r.get(0) == Some("app")));
        holder.batch_execute("commit").await.unwrap();
        for other in [&b, &c] {
            assert_eq!(show(other, "search_path").await, "\"$user\", public");
            assert_eq!(show(other, "statement_timeout").await, "0");
            assert_eq!(show(other, "lock_timeout").await, "0");
            let v: String = other.query_one("select v from marker", &[]).await.unwrap().get(0);
            assert_eq!(v, "public");
        }
    }
    assert_eq!(servers_seen.len(), 2, "a should have run on both server connections");

    // RESET goes back to the startup value, as it does on PostgreSQL, and a
    // SET in between is carried as any other.
    a.simple_query("SET search_path = public").await.unwrap();
    assert_eq!(show(&a, "search_path").await, "public");
    a.simple_query("RESET search_path").await.unwrap();
    for _ in 0..3 {
        b.batch_execute("begin; select 1").await.unwrap();
        assert_eq!(show(&a, "search_path").await, "app_schema,public");
        b.batch_execute("commit").await.unwrap();
        assert_eq!(show(&a, "search_path").await, "app_schema,public");
    }
}

/// A parameter of the startup packet itself (pgjdbc's currentSchema and
/// extra_float_digits), in session mode as well: the pool's connections
/// are shared between sessions too.
#[test]
fn startup_parameters_are_carried_in_both_modes() {
    for mode in ["transaction", "session"] {
        let lane = start(mode);
        let params =
            [("user", "postgres"), ("database", "app"), ("search_path", "app_schema, public"), ("extra_float_digits", "-4")];
        let mut a = RawClient::login_with(lane.port, &params);
        let mut b = RawClient::login(lane.port, "postgres", "app");
        for _ in 0..2 {
            let mut out = BytesMut::new();
            frontend::query(
                &mut out,
                "select v || ' ' || current_setting('extra_float_digits') || ' ' || 0.1::float8 / 3 from marker",
            );
            a.send(&out);
            assert_eq!(first_column(&a.until_ready()), ["app -4 0.033333333333"], "{mode}");
            b.send(&out);
            assert_eq!(first_column(&b.until_ready()), ["public 1 0.03333333333333333"], "{mode}");
        }
        // RESET inside the same session (no new server connection in
        // session mode) still goes back to the startup value.
        let mut out = BytesMut::new();
        frontend::query(&mut out, "RESET extra_float_digits");
        a.send(&out);
        a.until_ready();
        let mut out = BytesMut::new();
        frontend::query(&mut out, "show extra_float_digits");
        a.send(&out);
        assert_eq!(first_column(&a.until_ready()), ["-4"], "{mode}");
        // DISCARD ALL too, as PostgreSQL does.
        let mut direct = RawClient::login_with(postgres().port, &[("user", "trustuser"), ("database", DB), params[2], params[3]]);
        for client in [&mut direct, &mut a] {
            for sql in ["SET extra_float_digits = 2", "SET search_path = public", "DISCARD ALL"] {
                let mut out = BytesMut::new();
                frontend::query(&mut out, sql);
                client.send(&out);
                client.until_ready();
            }
        }
        let mut out = BytesMut::new();
        frontend::query(
            &mut out,
            "select current_setting('extra_float_digits') || ' ' || current_setting('search_path') || ' ' || v from marker",
        );
        direct.send(&out);
        a.send(&out);
        assert_eq!(first_column(&a.until_ready()), first_column(&direct.until_ready()), "{mode}");
    }
}

/// A value the server refuses: PostgreSQL would refuse the login; pglane
/// (which applies startup settings on the client's first transaction)
/// ends that client's session with the server's error before anything of
/// it runs, and the pool goes on serving others.
#[test]
fn a_refused_startup_value_ends_that_session_only() {
    let lane = start("transaction");
    let direct_params = [("user", "trustuser"), ("database", DB), ("statement_timeout", "soon")];
    let (_, direct) = RawClient::start(postgres().port, &direct_params);
    let direct_error =
        direct.iter().find(|m| m.tag == backend::ERROR_RESPONSE).map(|m| backend::decode_error_fields(&m.body).unwrap());
    let direct_error = direct_error.expect("PostgreSQL refuses the value");

    for _ in 0..3 {
        let mut bad =
            RawClient::login_with(lane.port, &[("user", "postgres"), ("database", "app"), ("statement_timeout", "soon")]);
        let mut out = BytesMut::new();
        frontend::query(&mut out, "create table must_not_exist (a int)");
        bad.send(&out);
        let m = bad.recv();
        assert_eq!(m.tag, backend::ERROR_RESPONSE);
        let e = backend::decode_error_fields(&m.body).unwrap();
        assert_eq!(
            (e.severity.as_str(), e.code.as_str(), e.message.as_str()),
            ("FATAL", direct_error.code.as_str(), direct_error.message.as_str())
        );
        let mut good =
            RawClient::login_with(lane.port, &[("user", "postgres"), ("database", "app"), ("search_path", "app_schema")]);
        let mut out = BytesMut::new();
        frontend::query(&mut out, "select v from marker");
        good.send(&out);
        assert_eq!(first_column(&good.until_ready()), ["app"]);
    }
    assert_eq!(postgres().psql_db(DB, "select count(*) from pg_tables where tablename = 'must_not_exist'"), "0");
    assert!(lane.log().contains("refused by the server"), "{}", lane.log());

    // Switches of `options` pglane cannot carry are refused at login.
    let (_, login) = RawClient::start(lane.port, &[("user", "postgres"), ("database", "app"), ("options", "-B 100")]);
    let e = login.iter().find(|m| m.tag == backend::ERROR_RESPONSE).map(|m| backend::decode_error_fields(&m.body).unwrap());
    let e = e.expect("refused");
    assert_eq!((e.severity.as_str(), e.code.as_str()), ("FATAL", "42601"), "{}", e.message);
}

/// The same setting in `options` and as a parameter of the packet: the
/// value PostgreSQL keeps is the one pglane carries.
#[test]
fn a_setting_given_twice_resolves_as_on_postgresql() {
    let lane = start("transaction");
    let both = |user, db| [("user", user), ("database", db), ("options", "-c extra_float_digits=0"), ("extra_float_digits", "2")];
    let mut direct = RawClient::login_with(postgres().port, &both("trustuser", DB));
    let mut through = RawClient::login_with(lane.port, &both("postgres", "app"));
    let mut out = BytesMut::new();
    frontend::query(&mut out, "show extra_float_digits");
    direct.send(&out);
    through.send(&out);
    let expected = first_column(&direct.until_ready());
    assert_eq!(first_column(&through.until_ready()), expected);
}

/// A *reported* setting from the startup packet (TimeZone here): RESET,
/// RESET ALL (alone, and in asyncpg's pool reset) and DISCARD ALL go back to
/// it, as on PostgreSQL, not to the server connection's own default.
#[tokio::test]
async fn resets_return_reported_settings_to_the_startup_value() {
    let pg = postgres();
    let lane = start("transaction");
    for reset in
        ["RESET TimeZone", "RESET ALL", "SELECT pg_advisory_unlock_all(); CLOSE ALL; UNLISTEN *; RESET ALL;", "DISCARD ALL"]
    {
        for (port, db) in [(pg.port, DB), (lane.port, "app")] {
            let c = connect_with_options(port, db, "-c TimeZone=Asia/Tokyo").await;
            assert_eq!(show(&c, "TimeZone").await, "Asia/Tokyo");
            c.batch_execute("SET TimeZone = 'America/Lima'").await.unwrap();
            assert_eq!(show(&c, "TimeZone").await, "America/Lima");
            c.batch_execute(reset).await.unwrap();
            for _ in 0..3 {
                let direct = if port == pg.port { "directly" } else { "through pglane" };
                assert_eq!(show(&c, "TimeZone").await, "Asia/Tokyo", "after {reset}, {direct}");
            }
        }
    }
}

/// A client whose messages pglane answers itself (Parse and Describe of a
/// statement the pool knows, then Flush, as asyncpg prepares again after
/// 0A000) on a server connection that another client left with other
/// settings: the answers wait for the alignment's replies and then go out.
/// They used to stay queued, and the client, which sends nothing more
/// until answered, hung (recv's timeout fails this test).
#[test]
fn answers_pglane_gives_itself_follow_a_settings_alignment() {
    let lane = start("transaction");
    let mut utc = RawClient::login_with(lane.port, &[("user", "postgres"), ("database", "app"), ("TimeZone", "UTC")]);
    let mut tokyo = RawClient::login_with(lane.port, &[("user", "postgres"), ("database", "app"), ("TimeZone", "Asia/Tokyo")]);
    let sql = "select v, current_setting('TimeZone') from marker";
    for round in 0..3 {
        for (client, statement) in [(&mut utc, format!("u{round}")), (&mut tokyo, format!("t{round}"))] {
            // One at a time, so both share the pool's most recently used connection.
            let mut out = BytesMut::new();
            frontend::parse(&mut out, &statement, sql, &[]);
            frontend::describe(&mut out, frontend::Target::Statement, &statement);
            frontend::flush(&mut out);
            client.send(&out);
            let answers: String = (0..3).map(|_| client.recv().tag as char).collect();
            assert_eq!(answers, "1tT", "round {round}, statement {statement}");
            let mut out = BytesMut::new();
            frontend::bind(&mut out, "", &statement, &[], std::iter::empty(), &[]);
            frontend::execute(&mut out, "", 0);
            frontend::sync(&mut out);
            client.send(&out);
            let zone = if statement.starts_with('u') { "UTC" } else { "Asia/Tokyo" };
            let got = client.until_ready();
            assert_eq!(raw::tags(&got), "2DCZ", "round {round}");
            let row = backend::decode_data_row(&got[1].body).unwrap();
            assert_eq!(row.iter().nth(1).flatten(), Some(zone.as_bytes()), "round {round}");
        }
    }
}

/// The tags of a login's messages before its first ParameterStatus, and the
/// NoticeResponses among all of them as (severity, SQLSTATE, message).
fn login_notices(login: &[pglane::protocol::frame::Message]) -> (String, Vec<(String, String, String)>) {
    let before_parameters = login.iter().take_while(|m| m.tag != backend::PARAMETER_STATUS).map(|m| m.tag as char).collect();
    (before_parameters, notices(login))
}

fn notices(messages: &[pglane::protocol::frame::Message]) -> Vec<(String, String, String)> {
    messages
        .iter()
        .filter(|m| m.tag == backend::NOTICE_RESPONSE)
        .map(|m| backend::decode_error_fields(&m.body).unwrap())
        .map(|n| (n.severity, n.code, n.message))
        .collect()
}

/// A warning PostgreSQL gives at login (an application_name longer than an
/// identifier is truncated: 42622) reaches the client through pglane where
/// PostgreSQL sends it, after AuthenticationOk and before the first
/// ParameterStatus; for every client with that value, not only the first,
/// whose SETs taught the pool how the server spells it; and, when the
/// settings wait for the client's first transaction (no server connection
/// free at login), ahead of that transaction's reply. pglane used to drop
/// it.
#[test]
fn login_notices_reach_the_client_where_postgresql_sends_them() {
    let lane = start("transaction");
    let long = "a".repeat(70);
    let (_, direct) = RawClient::start(postgres().port, &[("user", "trustuser"), ("database", DB), ("application_name", &long)]);
    let (direct_order, direct_notices) = login_notices(&direct);
    assert_eq!(direct_order, "RN", "PostgreSQL's own order");
    assert_eq!(direct_notices.len(), 1);
    assert_eq!(direct_notices[0].1, "42622");
    let params = [("user", "postgres"), ("database", "app"), ("application_name", long.as_str())];
    for client in 0..3 {
        let (_, login) = RawClient::start(lane.port, &params);
        assert_eq!(login_notices(&login), (direct_order.clone(), direct_notices.clone()), "client {client}");
    }

    // Both server connections busy: the settings wait for the first query.
    let mut holders: Vec<RawClient> = (0..2).map(|_| RawClient::login(lane.port, "postgres", "app")).collect();
    for holder in &mut holders {
        raw::query(holder, "begin; select 1");
    }
    let (mut late, login) = RawClient::start(lane.port, &params);
    assert_eq!(login_notices(&login), ("R".to_owned(), vec![]), "applied later, not at login");
    raw::query(&mut holders[0], "commit");
    let reply = raw::query(&mut late, "select current_setting('application_name')");
    assert_eq!(reply.first().map(|m| m.tag), Some(backend::NOTICE_RESPONSE), "the warning comes first");
    assert_eq!(notices(&reply), direct_notices);
    assert_eq!(first_column(&reply), ["a".repeat(63)]);
}

/// A pooled server connection that fails under the SETs pglane sends to
/// apply a client's startup settings (its backend frozen here, so that the
/// failure does not hang on a race with the pool's health check, as a
/// backend terminated while pooled does) had nothing of the client's on it:
/// pglane closes it and the client runs on another, unaware. Both where the
/// settings are applied at login (a reported setting the pool has not seen
/// spelled so) and at the client's first transaction (an unreported one).
/// The client used to get pglane's own FATAL 08006.
#[test]
fn a_server_connection_failing_under_the_startup_settings_is_replaced_unseen() {
    let pg = postgres();
    let db = "startup_frozen";
    pg.fresh_database(db, None);
    let lane = Pglane::start_with_args(
        &format!(
            "pool_mode = \"transaction\"\nauth_type = \"trust\"\n[databases.app]\nhost = \"127.0.0.1\"\nport = {}\ndbname = \"{db}\"\npool_size = 1\n[users.postgres]\npassword = \"secret\"\n",
            pg.port
        ),
        &["--cores", "1"],
    );
    // The one backend of the pool (a thawed one pglane closed may take a
    // moment to go).
    let pooled_backend = || -> i32 {
        let mut warm = RawClient::login(lane.port, "postgres", "app");
        raw::query(&mut warm, "select 1");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            let sql = format!("select pid from pg_stat_activity where datname = '{db}' and pid <> pg_backend_pid()");
            let pids = pg.psql_db(db, &sql);
            match pids.trim().parse() {
                Ok(pid) => return pid,
                Err(_) if std::time::Instant::now() < deadline => std::thread::sleep(std::time::Duration::from_millis(50)),
                Err(_) => panic!("one pooled backend: {pids:?}"),
            }
        }
    };
    for (setting, value) in [("application_name", "a_spelling_not_seen_yet"), ("statement_timeout", "7s")] {
        let frozen = common::Frozen::stop(pooled_backend());
        let (mut client, login) = RawClient::start(lane.port, &[("user", "postgres"), ("database", "app"), (setting, value)]);
        assert!(login.iter().all(|m| m.tag != backend::ERROR_RESPONSE), "{setting}: login failed: {login:?}");
        let reply = raw::query(&mut client, &format!("show {setting}"));
        assert_eq!(first_column(&reply), [value], "{setting}: {reply:?}");
        drop(frozen);
    }
    assert!(lane.log().contains("applying startup settings timed out"), "{}", lane.log());
}

/// application_name_add_host, PgBouncer's: the client's application_name
/// with ` - host:port` after it is what the server runs under, what the
/// client is told at login and what it reads back, on every server
/// connection it gets; off, the name is the client's own.
#[test]
fn application_name_add_host_puts_the_clients_address_after_its_name() {
    start("transaction"); // the database
    let body = |add_host: bool| {
        format!(
            "application_name_add_host = {add_host}\npool_mode = \"transaction\"\nauth_type = \"trust\"\n[databases.app]\nhost = \"127.0.0.1\"\nport = {}\ndbname = \"{DB}\"\npool_size = 2\n[users.postgres]\npassword = \"secret\"\n",
            postgres().port
        )
    };
    let lane = Pglane::start_with_args(&body(true), &["--cores", "1"]);
    let params = [("user", "postgres"), ("database", "app"), ("application_name", "reporting")];
    let (mut client, login) = RawClient::start(lane.port, &params);
    let expected = format!("reporting - {}", client.local_addr());
    let reported: Vec<String> = login
        .iter()
        .filter(|m| m.tag == backend::PARAMETER_STATUS)
        .map(|m| String::from_utf8_lossy(&m.body).replace('\0', "="))
        .filter(|p| p.starts_with("application_name="))
        .collect();
    assert_eq!(
        reported,
        [format!("application_name={expected}=")],
        "what the client is told at login: {:?}",
        login.iter().map(|m| (m.tag as char, String::from_utf8_lossy(&m.body).into_owned())).collect::<Vec<_>>()
    );
    let reply = raw::query(&mut client, "select current_setting('application_name')");
    assert_eq!(first_column(&reply), [expected.clone()]);
    // Another client holds a server connection in a transaction meanwhile:
    // whichever connection the first gets, it runs under the longer name.
    let (mut other, _) = RawClient::start(lane.port, &[("user", "postgres"), ("database", "app"), ("application_name", "other")]);
    raw::query(&mut other, "begin; select 1");
    let reply = raw::query(&mut client, "select application_name from pg_stat_activity where pid = pg_backend_pid()");
    assert_eq!(first_column(&reply), [expected]);
    raw::query(&mut other, "commit");
    drop(lane);

    let lane = Pglane::start_with_args(&body(false), &["--cores", "1"]);
    let (mut client, _) = RawClient::start(lane.port, &params);
    let reply = raw::query(&mut client, "select current_setting('application_name')");
    assert_eq!(first_column(&reply), ["reporting"]);
}
