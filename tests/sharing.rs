//! Sharing never changes a result: the same scripts of wire messages, sent by
//! several clients with different session settings, get the same bytes back
//! from PostgreSQL directly and through pglane in transaction mode (see
//! `common/scenario.rs`), with pglane's defaults, with auto-prepare and
//! binary format negotiation on, and with both off.

mod common;
#[path = "common/raw.rs"]
mod raw;
#[path = "common/scenario.rs"]
mod scenario;

use bytes::BytesMut;
use common::{postgres, Pglane};
use pglane::protocol::backend;
use pglane::protocol::frontend::{self, Target};
use raw::{error_code, first_column, RawClient};
use scenario::{same_through_pglane, show, Scenario, ALL_FEATURES, USER};

/// psycopg's `pgconn.exec_params`: once the client mentioned search_path,
/// its unnamed statements passed through, but its Binds still ran the last
/// statement it had mapped (direct: first, first, SET, second, third).
#[test]
fn the_unnamed_statement_is_what_the_client_last_parsed() {
    let mut s = Scenario::new(&[&[]]);
    s.exec_params(0, "select 'first'", &[])
        .exec_params(0, "select 'first'", &[])
        .exec_params(0, "set search_path to public", &[])
        .exec_params(0, "select 'second'", &[])
        .exec_params(0, "select 'third' where true", &[])
        .exec_params(0, "select $1::text", &["fourth"]);
    same_through_pglane("sharing_unnamed", "", 1, &s);
}

/// A literal `'...'::timestamptz` is converted when the statement is
/// parsed, in the parsing session's TimeZone: clients in other zones must
/// not get the first client's instant.
#[test]
fn literals_are_read_in_each_clients_time_zone() {
    let zones: [&[(&str, &str)]; 4] =
        [&[("TimeZone", "Etc/GMT+2")], &[("TimeZone", "Etc/GMT-2")], &[("TimeZone", "UTC")], &[("TimeZone", "Asia/Kolkata")]];
    let mut s = Scenario::new(&zones);
    let texts = [
        "select '2000-01-02 03:00:00.456789'::timestamptz",
        "select '2000-01-02 03:00:00'::timestamptz = '2000-01-02 03:00:00+00'",
        "select '03:00:00'::timetz",
        "select extract(epoch from '2000-01-02 03:00:00'::timestamptz)",
    ];
    for client in 0..4 {
        for (i, sql) in texts.iter().enumerate() {
            s.exec_params(client, sql, &[]);
            s.prepare(client, &format!("tz_{i}"), sql);
            s.exec_prepared(client, &format!("tz_{i}"), &[]);
            // The same text again: auto-prepare's simple queries.
            s.query(client, sql);
        }
    }
    // And after a client changed its zone mid-session.
    s.query(0, "set timezone to 'America/New_York'");
    s.exec_params(0, texts[0], &[]);
    s.query(0, texts[0]);
    s.prepare(0, "tz_after", texts[0]).exec_prepared(0, "tz_after", &[]);
    same_through_pglane("sharing_tz", "", 2, &s);
}

/// DateStyle decides how `01/02/2000` is read, IntervalStyle how a
/// negative SQL-standard interval is.
#[test]
fn literals_are_read_in_each_clients_date_and_interval_style() {
    let clients: [&[(&str, &str)]; 4] = [
        &[("DateStyle", "ISO, MDY")],
        &[("DateStyle", "ISO, DMY")],
        &[("IntervalStyle", "sql_standard")],
        &[("IntervalStyle", "postgres")],
    ];
    let mut s = Scenario::new(&clients);
    for client in 0..4 {
        for (i, sql) in ["select '01/02/2000'::date", "select '-1 2:03:04'::interval"].iter().enumerate() {
            s.exec_params(client, sql, &[]);
            s.prepare(client, &format!("style_{i}"), sql).exec_prepared(client, &format!("style_{i}"), &[]);
            s.query(client, sql);
        }
    }
    same_through_pglane("sharing_style", "", 1, &s);
}

/// `set_config(..., false)` changes the session: the next client of that
/// server connection must not inherit it.
#[test]
fn set_config_stays_with_its_client() {
    let mut s = Scenario::new(&[&[], &[]]);
    s.query(0, "select set_config('statement_timeout', '1234', false)")
        .query(1, "show statement_timeout")
        .query(0, "show statement_timeout")
        .exec_params(0, "select pg_catalog.set_config('lock_timeout', '4321', false)", &[])
        .exec_params(1, "show lock_timeout", &[])
        .exec_params(0, "show lock_timeout", &[])
        .query(0, "select set_config('default_transaction_read_only', 'on', false)")
        .query(1, "create table t_ro (a int); drop table t_ro")
        .query(0, "show default_transaction_read_only")
        .query(0, "create table t_ro (a int)");
    same_through_pglane("sharing_set_config", "", 1, &s);
}

/// An UPDATE of `pg_settings` sets what it names (the view's rule calls
/// set_config), and so does a quoted `"set_config"`: the next client of
/// that server connection must not inherit either (it did, search_path
/// included, before pglane looked for them).
#[test]
fn settings_changed_through_pg_settings_stay_with_their_client() {
    let mut s = Scenario::new(&[&[], &[]]);
    s.query(0, "UPDATE pg_settings SET setting = '4321' WHERE name = 'statement_timeout'")
        .query(1, "show statement_timeout")
        .query(0, "show statement_timeout")
        .query(0, "update pg_catalog.\"pg_settings\" set setting = 'pg_catalog' where name = 'search_path'")
        .query(1, "show search_path")
        .exec_params(0, "select \"set_config\"('lock_timeout', '1234', false)", &[])
        .query(1, "show lock_timeout")
        .query(0, "show lock_timeout")
        .query(1, "select setting from pg_settings where name = 'statement_timeout'");
    // Two server connections: the client that changed a setting keeps one
    // (it is pinned), the other client gets the other; without the pin it
    // got the first one back, setting and all.
    same_through_pglane("sharing_pg_settings", "", 2, &s);
}

/// pgjdbc sends `SET extra_float_digits = 3` over the extended protocol on
/// every connection: carried like a simple-query SET, to every server
/// connection the client gets, and to no other client.
#[test]
fn a_set_over_the_extended_protocol_is_carried() {
    let mut s = Scenario::new(&[&[], &[]]);
    s.exec_params(0, "SET extra_float_digits = 3", &[])
        .exec_params(1, "SET application_name = 'b'", &[])
        .query(1, "show extra_float_digits")
        .query(0, "show extra_float_digits")
        .exec_params(0, "select 0.1::float8", &[])
        .exec_params(1, "select 0.1::float8", &[])
        .exec_params(0, "RESET extra_float_digits", &[])
        .query(0, "show extra_float_digits")
        .query(1, "show application_name");
    same_through_pglane("sharing_extended_set", "", 1, &s);
}

/// A type dropped and created again has a new OID: a Describe through
/// pglane must answer with the new one, as PostgreSQL does, for a client
/// that prepares the text after the DDL (asyncpg: "could not resolve query
/// result and/or argument types"), whether the DDL came through pglane
/// (from a client of another server connection) or not.
#[test]
fn descriptions_follow_ddl() {
    let pg = postgres();
    let db = "sharing_ddl";
    for features in ALL_FEATURES {
        pg.fresh_database(db, Some(USER));
        pg.psql_db(db, &format!("set role {USER}; create type mood as enum ('happy'); create extension hstore"));
        let lane = Pglane::trusting_on_one_shard(USER, features.config(), db, 2);
        let login = || RawClient::login_with(lane.port, &[("user", USER), ("database", "app")]);
        let (mut a, mut b) = (login(), login());
        let oid = |name: &str| -> u32 { pg.psql_db(db, &format!("select '{name}'::regtype::oid")).parse().unwrap() };
        let described = |client: &mut RawClient, name: &str, sql: &str| -> (u32, u32) {
            let mut out = BytesMut::new();
            frontend::parse(&mut out, name, sql, &[]);
            frontend::describe(&mut out, Target::Statement, name);
            frontend::sync(&mut out);
            client.send(&out);
            let got = client.until_ready();
            let param = got.iter().find(|m| m.tag == backend::PARAMETER_DESCRIPTION).expect("ParameterDescription");
            let row = got.iter().find(|m| m.tag == backend::ROW_DESCRIPTION).expect("RowDescription");
            let param = backend::decode_parameter_description(&param.body).unwrap()[0];
            let row = backend::decode_row_description(&row.body).unwrap()[0].type_oid;
            (param, row)
        };
        let mood = oid("mood");
        assert_eq!(described(&mut a, "d1", "select $1::mood"), (mood, mood));
        assert_eq!(described(&mut b, "d1", "select $1::mood"), (mood, mood));
        // Through pglane, by a client on another server connection.
        let mut out = BytesMut::new();
        frontend::query(&mut out, "begin; select 1");
        a.send(&out);
        a.until_ready();
        out.clear();
        frontend::query(&mut out, "drop type mood; create type mood as enum ('sad', 'happy')");
        b.send(&out);
        assert_eq!(error_code(&b.until_ready()), None);
        out.clear();
        frontend::query(&mut out, "commit");
        a.send(&out);
        a.until_ready();
        let mood = oid("mood");
        assert_eq!(described(&mut a, "d2", "select $1::mood"), (mood, mood), "{features:?}: DDL through pglane");
        assert_eq!(described(&mut b, "d2", "select $1::mood"), (mood, mood), "{features:?}: DDL through pglane");
        // Elsewhere: pglane did not see it.
        let hstore = oid("hstore");
        assert_eq!(described(&mut a, "h1", "select $1::hstore"), (hstore, hstore));
        pg.psql_db(db, &format!("set role {USER}; drop extension hstore; create extension hstore"));
        let hstore = oid("hstore");
        // a holds its server connection (which prepared h1 before the DDL):
        // the others run on the other one, which prepares the text anew.
        let mut out = BytesMut::new();
        frontend::query(&mut out, "begin");
        a.send(&out);
        a.until_ready();
        for round in 0..3 {
            let c = &mut login();
            let got = described(c, &format!("h{}", round + 2), "select $1::hstore");
            assert_eq!(got, (hstore, hstore), "{features:?}: DDL elsewhere, round {round}");
        }
        out.clear();
        frontend::query(&mut out, "commit");
        a.send(&out);
        a.until_ready();
        // And then on a's connection too: the change retired what it had.
        assert_eq!(described(&mut a, "h9", "select $1::hstore"), (hstore, hstore), "{features:?}: DDL elsewhere, then");
    }
}

/// A Parse with 32,768 parameter types or more, and a Bind with as many
/// values: PostgreSQL takes up to 65,535 (the counts are unsigned).
#[test]
fn up_to_65535_parameters() {
    for n in [32_767usize, 32_768, 65_535] {
        let list: Vec<String> = (1..=n).map(|i| format!("${i}")).collect();
        let sql = format!("select cardinality(array[{}])", list.join(","));
        let values: Vec<String> = (1..=n).map(|_| "1".to_owned()).collect();
        let pg = postgres();
        pg.fresh_database("sharing_params", None);
        for features in ALL_FEATURES {
            let lane = Pglane::trusting_on_one_shard(USER, features.config(), "sharing_params", 1);
            let mut client = RawClient::login_with(lane.port, &[("user", USER), ("database", "app")]);
            let mut out = BytesMut::new();
            let types = vec![23u32; n];
            frontend::parse(&mut out, "big", &sql, &types);
            frontend::bind(&mut out, "", "big", &[], values.iter().map(|v| Some(v.as_bytes())), &[]);
            frontend::execute(&mut out, "", 0);
            frontend::sync(&mut out);
            client.send(&out);
            let got = client.until_ready();
            assert_eq!(error_code(&got), None, "{n} parameters with {features:?}: {}", show(&got));
            assert_eq!(first_column(&got), vec![n.to_string()], "{n} parameters with {features:?}");
        }
    }
}

/// DDL seen through one shard reaches the statements of every shard: a
/// client of another shard that prepares the text again gets the new type.
#[test]
fn ddl_through_one_shard_is_seen_by_the_others() {
    let pg = postgres();
    let db = "sharing_ddl_shards";
    pg.fresh_database(db, Some(USER));
    pg.psql_db(db, &format!("set role {USER}; create type mood as enum ('happy')"));
    let lane = Pglane::start_with_args(
        &format!(
            "pool_mode = \"transaction\"\nauth_type = \"trust\"\n[databases.app]\nhost = \"127.0.0.1\"\nport = {}\n\
             dbname = \"{db}\"\npool_size = 2\n[users.{USER}]\n",
            pg.port
        ),
        &["--cores", "2"],
    );
    let oid = || -> u32 { pg.psql_db(db, "select 'mood'::regtype::oid").parse().unwrap() };
    // Clients that log in one after another are spread over the shards.
    let mut clients: Vec<RawClient> =
        (0..4).map(|_| RawClient::login_with(lane.port, &[("user", USER), ("database", "app")])).collect();
    let describe = |client: &mut RawClient, name: &str| -> u32 {
        let mut out = BytesMut::new();
        frontend::parse(&mut out, name, "select $1::mood", &[]);
        frontend::describe(&mut out, Target::Statement, name);
        frontend::sync(&mut out);
        client.send(&out);
        let got = client.until_ready();
        let param = got.iter().find(|m| m.tag == backend::PARAMETER_DESCRIPTION).expect("ParameterDescription");
        backend::decode_parameter_description(&param.body).unwrap()[0]
    };
    let before = oid();
    for client in &mut clients {
        assert_eq!(describe(client, "m1"), before);
    }
    let mut out = BytesMut::new();
    frontend::query(&mut out, "drop type mood; create type mood as enum ('sad')");
    clients[0].send(&out);
    assert_eq!(error_code(&clients[0].until_ready()), None);
    let after = oid();
    assert_ne!(before, after);
    for (i, client) in clients.iter_mut().enumerate() {
        assert_eq!(describe(client, "m2"), after, "client {i}");
    }
}

/// The client's names mean what it last parsed under them through every
/// transition: a failed Parse of the unnamed statement (PostgreSQL drops the
/// old one first), another client's unnamed statement on the same server
/// connection meanwhile, DISCARD ALL, a name parsed again after it, and the
/// client pinned to its connection by LISTEN. pglane answers a Bind of a
/// name the client has not (or no longer) parsed itself, without
/// PostgreSQL's source-location fields.
#[test]
fn the_clients_names_survive_every_transition() {
    let bind_unnamed = |b: &mut BytesMut| scenario::bind_exec(b, "", &[]);
    let failed_parse = |b: &mut BytesMut| {
        frontend::parse(b, "", "select no_such_column_anywhere", &[]);
        frontend::sync(b);
    };
    let mut s = Scenario::new(&[&[], &[]]);
    s.prepare(0, "s1", "select 'one'")
        .exec_prepared(0, "s1", &[])
        .exec_params(0, "select 'unnamed a'", &[])
        .step(0, failed_parse)
        .exec_params(1, "select 'the other client''s'", &[])
        .step(0, bind_unnamed)
        .exec_prepared(0, "s1", &[])
        .query(0, "discard all")
        .exec_prepared(0, "s1", &[])
        .step(0, bind_unnamed)
        .prepare(0, "s1", "select 'two'")
        .exec_prepared(0, "s1", &[])
        .query(0, "listen sharing_transitions")
        .exec_params(1, "select 'the other client again'", &[])
        .exec_params(0, "select 'pinned'", &[])
        .exec_prepared(0, "s1", &[])
        .prepare(0, "s2", "select 'three'")
        .exec_prepared(0, "s2", &[]);
    // Pool 2: one connection shared until LISTEN pins client 0 to it, then
    // the other for client 1.
    s.error_locations_may_differ = true;
    same_through_pglane("sharing_transitions", "", 2, &s);
}
