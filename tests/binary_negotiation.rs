//! Binary format negotiation (issue 6) against the real PostgreSQL: with
//! `binary_negotiation = true`, pglane asks the server for binary where a
//! client wants text and turns it back into text; a client must not be able
//! to tell. Each test sends the same messages directly to PostgreSQL and
//! through pglane and compares every reply byte for byte, then checks in
//! SHOW PREPARED that the server really sent binary.

mod common;
#[path = "common/raw.rs"]
mod raw;

use std::path::Path;
use std::process::Command;
use std::sync::OnceLock;

use bytes::BytesMut;
use common::{connect, postgres, Pglane, Psql};
use pglane::protocol::frontend::{self, Target};
use raw::RawClient;

const DB: &str = "negotiate_db";

/// Every negotiable type with edge values, a row of NULLs and 2,000
/// random rows.
const TABLE_SQL: &str = r#"
create table types (id int4 primary key, b bool, i2 int2, i8 int8, o oid, n numeric, u uuid, d date,
    tm time, ttz timetz, ts timestamp, tstz timestamptz, iv interval, ip inet, nw cidr, f8 float8);
insert into types values
 (1, true, -32768, -9223372036854775808, 4294967295, 'NaN', '00000000-0000-0000-0000-000000000000', '4714-11-24 BC',
  '00:00:00', '00:00:00+14', '4713-01-01 00:00:00 BC', '4713-01-01 00:00:00+00 BC',
  '-178956970 years -8 mons -2147483648 days -2562047788:00:54.775807', '0.0.0.0/0', '0.0.0.0/0', 'NaN'),
 (2, false, 32767, 9223372036854775807, 0, 'Infinity', 'ffffffff-ffff-ffff-ffff-ffffffffffff', 'infinity',
  '24:00:00', '23:59:59.999999-15:59', 'infinity', 'infinity',
  '178956970 years 7 mons 2147483647 days 2562047788:00:54.775807', '::ffff:1.2.3.4', '2001:db8::/32', 'Infinity'),
 (3, null, null, null, null, null, null, null, null, null, null, null, null, null, null, null),
 (4, true, 0, 0, 1, '-Infinity', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '-infinity', '12:34:56.789', '12:34:56.5+05:30',
  '-infinity', '-infinity', '-1 days +02:00:00', '192.168.0.1/24', '10.0.0.0/8', '-Infinity'),
 (5, false, -1, -1, 2, '-0.000100', '123e4567-e89b-12d3-a456-426614174000', '2024-02-29', '23:59:59.999999', '00:00:00-00:00:01',
  '2024-02-29 12:34:56.123456', '2024-02-29 12:34:56.000001+00', '1 day -00:00:01', '2001:db8::1', '192.168.0.0/16', '-0'),
 (6, true, 1, 1, 3, '123456789012345678901234567890.123456789012345678901234567890', 'deadbeef-0000-4000-8000-00000000beef',
  '12345-06-07', '00:00:00.000001', '12:00:00+00', '12345-06-07 01:02:03', '1900-01-01 05:21:10+00', '-00:00:01.5',
  'fe80::1/64', '2001:db8:1::/48', '1e-308'),
 (7, false, 2, 2, 4, '0.000', '00000000-0000-0000-0000-000000000001', '0001-01-01', '01:02:03', '01:02:03-12', '0001-01-01 00:00:00 BC',
  '1999-12-31 23:59:59.5+00', '11 mons', '::', '::/0', '5e-324'),
 (8, true, 3, 3, 5, '-12345678901234567890', '00000000-0000-0000-0000-000000000002', '1970-01-01', '12:00:00', '12:00:00+03:07:04',
  '1970-01-01 00:00:00', '1970-01-01 00:00:00+00', '100000:00:00', '::1', '::ffff:0:0/96', '1.7976931348623157e308');
insert into types
select g,
       g % 3 = 0,
       (random() * 65535 - 32768)::int2,
       (random() * 1.8e19 - 9e18)::int8,
       (random() * 4294967295)::int8::oid,
       round(((random() - 0.5) * 10 ^ (g % 40))::numeric, g % 12),
       gen_random_uuid(),
       '2000-01-01'::date + (random() * 2000000 - 1000000)::int,
       '00:00'::time + random() * interval '24 hours',
       ('00:00'::time + random() * interval '24 hours')::timetz,
       '2000-01-01'::timestamp + random() * interval '2000000 days' - interval '1000000 days',
       '2000-01-01'::timestamptz + random() * interval '2000000 days' - interval '1000000 days',
       make_interval(months => (random() * 400 - 200)::int, days => (random() * 400 - 200)::int, secs => random() * 400000 - 200000),
       ('10.' || g % 256 || '.' || (g / 256) % 256 || '.1/' || (8 + g % 25))::inet,
       ('2001:db8:' || to_hex(g) || '::/' || (48 + g % 17))::cidr,
       (random() - 0.5) * 10 ^ (g % 30)
from generate_series(100, 2099) g;
grant select on types to public;
create table floats (id int4 primary key, f4 float4, f8 float8);
insert into floats values
 (1, 'NaN', 'NaN'), (2, 'Infinity', 'Infinity'), (3, '-Infinity', '-Infinity'), (4, '-0', '-0'), (5, 0, 0), (6, null, null),
 (7, 1e-45, 5e-324), (8, -1e-45, -5e-324), (9, 1e-40, 1e-310), (10, 1.17549435e-38, 2.2250738585072014e-308),
 (11, 1.1754942e-38, 2.225073858507201e-308), (12, 3.4028235e38, 1.7976931348623157e308), (13, -3.4028235e38, -1.7976931348623157e308),
 (14, 100000, 1e15), (15, 999999, 999999999999999), (16, 1e6, 1e16), (17, 1234567, 1.234567890123456e15), (18, 123456.7, 123456789012345.6),
 (19, 0.0001, 0.0001), (20, 1e-5, 1e-5), (21, 0.1, 0.1), (22, 16777217, 9007199254740993), (23, 1e10, 1e22), (24, 3.0 / 7, 1e23),
 (25, 99999.99, 9999999999999998), (26, 0.3, 1.0 / 3), (27, -2.5, 4.35e-5), (28, 1.5e-7, 123e-300);
insert into floats
select g, ((random() - 0.5) * 10 ^ (g % 50 - 25))::float4, (random() - 0.5) * 10 ^ (g % 600 - 300)
from generate_series(100, 1099) g;
grant select on floats to public;
create table t1 (u uuid);
insert into t1 select gen_random_uuid() from generate_series(1, 100000);
grant select on t1 to public;
create table blobs (id int4 primary key, u uuid, b bytea, t text, vc varchar(20), j json, jb jsonb,
    ia int4[], ta text[], na numeric[], tsa timestamp[], ba bytea[], ua uuid[]);
insert into blobs values
 (1, 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '', 'héllo wörld ✓ 日本語', 'naïve café',
  '{"a": [1, 2.5e10, {"b": null}], "c": "\u00e9\ud83d\ude00", "n": -0.0E+2}',
  '{"a": [1, 2.5e10, -1.0E-5, {"b": null}], "c": "\u00e9\ud83d\ude00\n\"", "d": 1e40, "e": {"zz": 1, "a": [true, false, 1.50]}}',
  '{1,NULL,3,-2147483648}', '{"a b","",NULL,"NULL","null","q\"x","back\\slash","é{",plain,"x,y","}"}',
  '{1.50,NaN,-0.001,Infinity,-Infinity,NULL}', '{"2024-02-29 12:34:56.5",infinity,NULL,"0001-01-01 00:00:00 BC"}',
  '{"\\x00ff",NULL,"\\x"}', '{a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11,NULL}'),
 (2, null, null, null, null, null, null, null, null, null, null, null, null),
 (3, '00000000-0000-0000-0000-000000000000', (select decode(string_agg(lpad(to_hex(g), 2, '0'), ''), 'hex') from generate_series(0, 255) g),
  '', '', '[]', '{}', '{}', '{}', '{}', '{}', '{}', '{}'),
 (4, 'ffffffff-ffff-ffff-ffff-ffffffffffff', '\x5c27225c5c', 'quote'' and \ backslash', 'trailing  ',
  '"str"', '123.456e-7', '[0:1]={1,2}', '[2:3]={x,y}', '{{1.5,2},{3,4}}', '[-1:-1]={"2000-01-01 00:00:00"}',
  '[0:0]={"\\x01"}', '{}'),
 (5, '123e4567-e89b-12d3-a456-426614174000', decode(substr(repeat(md5('near the cap'), 7600), 1, 240000), 'hex'),
  null, null, null, null, null, null, null, null, null, null);
grant select on blobs to public;
create table grow (id int4 primary key, u uuid, b bytea);
insert into grow select g, gen_random_uuid(), decode(md5(g::text), 'hex') from generate_series(1, 20) g;
grant select on grow to public;
"#;

const QUERY: &str = "select * from types order by id";
const COLUMNS: usize = 16;

fn database() {
    static READY: OnceLock<()> = OnceLock::new();
    READY.get_or_init(|| {
        let pg = postgres();
        pg.fresh_database(DB, None);
        pg.psql_db(DB, TABLE_SQL);
    });
}

fn pglane(negotiation: bool) -> Pglane {
    pglane_with_pool(negotiation, 2)
}

fn pglane_with_pool(negotiation: bool, pool_size: usize) -> Pglane {
    database();
    pglane_for(DB, negotiation, false, pool_size)
}

/// pglane in transaction mode, one shard, in front of database `db` as `app`.
fn pglane_for(db: &str, negotiation: bool, auto_prepare: bool, pool_size: usize) -> Pglane {
    Pglane::start_with_args(
        &format!(
            "pool_mode = \"transaction\"\nauth_type = \"trust\"\nadmin_users = [\"postgres\"]\nbinary_negotiation = {negotiation}\nauto_prepare = {auto_prepare}\n[databases.app]\nhost = \"127.0.0.1\"\nport = {}\ndbname = \"{db}\"\npool_size = {pool_size}\n[users.postgres]\npassword = \"secret\"\n",
            postgres().port
        ),
        &["--cores", "1"],
    )
}

/// The pair of clients a test drives in step: PostgreSQL itself, and pglane.
fn clients(lane: &Pglane) -> (RawClient, RawClient) {
    (RawClient::login(postgres().port, "trustuser", DB), RawClient::login(lane.port, "postgres", "app"))
}

/// Sends `messages` (ending with Sync or a Query) to both and asserts that
/// every reply up to ReadyForQuery is the same, byte for byte.
fn same_replies(direct: &mut RawClient, through: &mut RawClient, messages: &[u8], what: &str) -> Vec<(u8, Vec<u8>)> {
    direct.send(messages);
    through.send(messages);
    let expected: Vec<(u8, Vec<u8>)> = direct.until_ready().into_iter().map(|m| (m.tag, m.body.to_vec())).collect();
    let got: Vec<(u8, Vec<u8>)> = through.until_ready().into_iter().map(|m| (m.tag, m.body.to_vec())).collect();
    assert!(expected.iter().all(|(tag, _)| *tag != b'E'), "{what}: PostgreSQL refused it: {expected:?}");
    assert_eq!(got.len(), expected.len(), "{what}: message count");
    for (i, (g, e)) in got.iter().zip(&expected).enumerate() {
        assert_eq!(g, e, "{what}: message {i} ({}) differs:\n pglane: {}\n direct: {}", e.0 as char, show(&g.1), show(&e.1));
    }
    expected
}

fn show(body: &[u8]) -> String {
    String::from_utf8_lossy(body).into_owned()
}

fn simple(sql: &str) -> BytesMut {
    let mut out = BytesMut::new();
    frontend::query(&mut out, sql);
    out
}

/// Parse + Describe statement + Sync: after this pglane has the
/// statement's RowDescription cached.
fn prepare(name: &str, sql: &str) -> BytesMut {
    let mut out = BytesMut::new();
    frontend::parse(&mut out, name, sql, &[]);
    frontend::describe(&mut out, Target::Statement, name);
    frontend::sync(&mut out);
    out
}

/// Bind (with these result formats) + Describe portal + Execute + Sync.
fn run(statement: &str, result_formats: &[i16]) -> BytesMut {
    let mut out = BytesMut::new();
    frontend::bind(&mut out, "", statement, &[], std::iter::empty(), result_formats);
    frontend::describe(&mut out, Target::Portal, "");
    frontend::execute(&mut out, "", 0);
    frontend::sync(&mut out);
    out
}

/// A SHOW PREPARED figure, summed over shards.
fn prepared_stat(lane: &Pglane, column: &str) -> i64 {
    admin_stat(lane, "SHOW PREPARED", column)
}

/// A figure of an admin SHOW command, summed over its rows.
fn admin_stat(lane: &Pglane, show: &str, column: &str) -> i64 {
    let text = Psql::tcp(lane.port, "postgres", "secret", "pgbouncer")
        .with_header()
        .command(show)
        .run()
        .unwrap_or_else(|err| panic!("{show}: {err}"));
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().expect("header").split('|').collect();
    let i = header.iter().position(|h| *h == column).unwrap_or_else(|| panic!("no {column} in {header:?}"));
    lines
        .map(|l| l.split('|').collect::<Vec<_>>())
        .filter(|r| r.len() == header.len())
        .map(|r| r[i].parse::<i64>().unwrap())
        .sum()
}

fn data_rows(replies: &[(u8, Vec<u8>)]) -> usize {
    replies.iter().filter(|(tag, _)| *tag == b'D').count()
}

/// The DateStyle / IntervalStyle / TimeZone combinations the tests run under.
const STYLES: [&str; 6] = [
    "SET TimeZone = 'UTC'; SET DateStyle = 'ISO, MDY'; SET IntervalStyle = 'postgres'",
    "SET TimeZone = 'Etc/GMT-14'; SET DateStyle = 'German, DMY'; SET IntervalStyle = 'postgres_verbose'",
    "SET TIME ZONE INTERVAL '-03:30' HOUR TO MINUTE; SET DateStyle = 'SQL, DMY'; SET IntervalStyle = 'sql_standard'",
    "SET TimeZone = 'Etc/GMT+5'; SET DateStyle = 'Postgres, MDY'; SET IntervalStyle = 'iso_8601'",
    "SET TIME ZONE 2; SET DateStyle = 'SQL, MDY'; SET IntervalStyle = 'postgres'",
    // A zone with history: timestamptz stays text, the rest is negotiated.
    "SET TimeZone = 'Europe/Berlin'; SET DateStyle = 'ISO, DMY'; SET IntervalStyle = 'postgres'",
];

/// Under each DateStyle / IntervalStyle / TimeZone combination, text,
/// per-column and binary result formats: the same bytes as PostgreSQL's.
#[test]
fn rows_are_byte_identical_under_every_style_and_zone() {
    let lane = pglane(true);
    let (mut direct, mut through) = clients(&lane);
    let settings = STYLES;
    let mixed: Vec<i16> = (0..COLUMNS as i16).map(|i| i % 2).collect();
    let mut rows = 0;
    for (i, set) in settings.iter().enumerate() {
        same_replies(&mut direct, &mut through, &simple(set), set);
        let name = format!("s{i}");
        same_replies(&mut direct, &mut through, &prepare(&name, QUERY), "Parse + Describe");
        let before = prepared_stat(&lane, "values_transcoded");
        let replies = same_replies(&mut direct, &mut through, &run(&name, &[]), &format!("all text under {set}"));
        rows += data_rows(&replies);
        // Every non-NULL value of the 16 negotiable columns (row 3 is NULL but
        // for its id; float8 with the extra_float_digits pglane read from the
        // server connection after login); timestamptz only under a
        // fixed-offset zone.
        let columns = if set.contains("Berlin") { 15 } else { 16 };
        let expected = (2008 * columns - (columns - 1)) as i64;
        assert_eq!(prepared_stat(&lane, "values_transcoded") - before, expected, "values transcoded under {set}");
        same_replies(&mut direct, &mut through, &run(&name, &[0]), &format!("one text code under {set}"));
        same_replies(&mut direct, &mut through, &run(&name, &mixed), &format!("per-column formats under {set}"));
        same_replies(&mut direct, &mut through, &run(&name, &[1]), &format!("all binary under {set}"));
    }
    assert_eq!(rows, settings.len() * 2008);
    assert!(prepared_stat(&lane, "portals_negotiated") >= 3 * settings.len() as i64);
}

const BLOBS: &str = "select * from blobs order by id";
const BLOB_COLUMNS: usize = 13;

/// Non-NULL values of the columns negotiated in `BLOBS` once its rows have
/// shown small: id, uuid, bytea and the arrays (text, varchar, json and
/// jsonb stay text).
fn blob_values() -> i64 {
    let sql = "select count(id) + count(u) + count(b) + count(ia) + count(ta) + count(na) + count(tsa) + count(ba) + count(ua) from blobs";
    postgres().psql_db(DB, sql).parse().unwrap()
}

/// Columns of unbounded size: bytea (empty, NULL, every byte value, a value
/// whose text row is near the small-row cap), non-ASCII text, json and
/// jsonb (nested, unicode escapes, exponents), arrays (NULL elements,
/// quoting, empty, bounds other than 1, two dimensions). The statement is
/// watched over its first executions, un-negotiated; from then on
/// negotiated under every style and zone and under both bytea_output
/// values, byte-identical to PostgreSQL's text in every result format.
#[test]
fn unbounded_columns_are_byte_identical_once_rows_have_shown_small() {
    let lane = pglane(true);
    let (mut direct, mut through) = clients(&lane);
    let values = blob_values();
    let transcoded = || prepared_stat(&lane, "values_transcoded");
    same_replies(&mut direct, &mut through, &prepare("w", BLOBS), "prepare");
    for round in 0..3 {
        let before = transcoded();
        same_replies(&mut direct, &mut through, &run("w", &[]), &format!("watched run {round}"));
        assert_eq!(transcoded() - before, 0, "run {round}: rows not shown small yet, nothing negotiated");
    }
    let mixed: Vec<i16> = (0..BLOB_COLUMNS as i16).map(|i| i % 2).collect();
    let mut settings: Vec<&str> = STYLES.to_vec();
    settings.extend(["SET bytea_output = 'escape'", "SET DateStyle = 'German, DMY'", "SET bytea_output = 'hex'"]);
    for (i, set) in settings.iter().enumerate() {
        same_replies(&mut direct, &mut through, &simple(set), set);
        let name = format!("b{i}");
        same_replies(&mut direct, &mut through, &prepare(&name, BLOBS), "Parse + Describe");
        let before = transcoded();
        let replies = same_replies(&mut direct, &mut through, &run(&name, &[]), &format!("all text under {set}"));
        assert_eq!(data_rows(&replies), 5);
        assert_eq!(transcoded() - before, values, "values transcoded under {set}");
        same_replies(&mut direct, &mut through, &run(&name, &[0]), &format!("one text code under {set}"));
        same_replies(&mut direct, &mut through, &run(&name, &mixed), &format!("per-column formats under {set}"));
        same_replies(&mut direct, &mut through, &run(&name, &[1]), &format!("all binary under {set}"));
    }
    assert_eq!(prepared_stat(&lane, "big_rows"), 0);
    assert_eq!(prepared_stat(&lane, "big_row_statements"), 0);
}

/// A statement whose rows grow: negotiated once it has shown small rows,
/// still with a row just under the cap; a row over the cap still comes out
/// exactly, and marks the statement, which is never negotiated again, even
/// when its rows are small again. A statement that shows a big row while
/// watched is never negotiated at all.
#[test]
fn a_statement_whose_rows_grow_past_the_cap_is_negotiated_no_more() {
    let lane = pglane(true);
    let pg = postgres();
    let (mut direct, mut through) = clients(&lane);
    let transcoded = || prepared_stat(&lane, "values_transcoded");
    let query = "select id, u, b from grow order by id";
    same_replies(&mut direct, &mut through, &prepare("g", query), "prepare");
    let mut round = |what: &str| {
        let before = transcoded();
        let replies = same_replies(&mut direct, &mut through, &run("g", &[]), what);
        assert_eq!(data_rows(&replies), 20, "{what}");
        transcoded() - before
    };
    for i in 0..3 {
        assert_eq!(round(&format!("watched {i}")), 0);
    }
    assert_eq!(round("shown small"), 60, "20 ids, 20 uuids and 20 byteas");
    // 250 KiB of binary: under the cap (its text, twice that, is not).
    pg.psql_db(DB, "update grow set b = decode(repeat('5c', 250 * 1024), 'hex') where id = 7");
    assert_eq!(round("a row near the cap"), 60);
    assert_eq!((prepared_stat(&lane, "big_rows"), prepared_stat(&lane, "big_row_statements")), (0, 0));
    pg.psql_db(DB, "update grow set b = decode(repeat('00ff', 150 * 1024), 'hex') where id = 7");
    assert_eq!(round("a row over the cap"), 60, "this run was negotiated: transcoded whole");
    assert_eq!((prepared_stat(&lane, "big_rows"), prepared_stat(&lane, "big_row_statements")), (1, 1));
    assert_eq!(round("after the big row"), 0);
    pg.psql_db(DB, "update grow set b = '\\x01' where id = 7");
    for i in 0..4 {
        assert_eq!(round(&format!("small again {i}")), 0, "never again");
    }
    // A big row while watched: never negotiated, and not a negotiated big row.
    pg.psql_db(DB, "update grow set b = decode(repeat('ab', 200 * 1024), 'hex') where id = 3");
    same_replies(&mut direct, &mut through, &prepare("h", "select u, b, id from grow order by id"), "prepare");
    for i in 0..5 {
        let before = transcoded();
        same_replies(&mut direct, &mut through, &run("h", &[]), &format!("big while watched {i}"));
        assert_eq!(transcoded() - before, 0);
    }
    assert_eq!((prepared_stat(&lane, "big_rows"), prepared_stat(&lane, "big_row_statements")), (1, 2));
    pg.psql_db(DB, "update grow set b = decode(md5(id::text), 'hex') where id in (3, 7)");
}

/// A SET executed earlier in the same Sync group is not reported until
/// ReadyForQuery: the timestamps of the second portal must not be
/// transcoded with the zone pglane saw before it.
#[test]
fn a_setting_changed_in_the_same_sync_group_is_not_guessed() {
    let lane = pglane(true);
    let (mut direct, mut through) = clients(&lane);
    same_replies(&mut direct, &mut through, &simple("SET TimeZone = 'UTC'; SET DateStyle = 'ISO, MDY'"), "settings");
    same_replies(&mut direct, &mut through, &prepare("q", "select id, tstz, ts, u from types order by id"), "prepare");
    for (zone, style) in [("Etc/GMT-3", "German, DMY"), ("UTC", "ISO, MDY"), ("Etc/GMT+7", "SQL, DMY")] {
        let mut out = BytesMut::new();
        frontend::parse(&mut out, "", &format!("set timezone = '{zone}'"), &[]);
        frontend::bind(&mut out, "", "", &[], std::iter::empty(), &[]);
        frontend::execute(&mut out, "", 0);
        frontend::parse(&mut out, "", &format!("set datestyle = '{style}'"), &[]);
        frontend::bind(&mut out, "", "", &[], std::iter::empty(), &[]);
        frontend::execute(&mut out, "", 0);
        frontend::bind(&mut out, "", "q", &[], std::iter::empty(), &[]);
        frontend::execute(&mut out, "", 0);
        frontend::sync(&mut out);
        same_replies(&mut direct, &mut through, &out, &format!("SET then select in one group ({zone})"));
        // The next group runs with the reported settings: negotiated again.
        let before = prepared_stat(&lane, "values_transcoded");
        same_replies(&mut direct, &mut through, &run("q", &[]), &format!("next group ({zone})"));
        assert!(prepared_stat(&lane, "values_transcoded") > before);
    }
}

/// A portal read a few rows at a time inside a transaction (as pgjdbc's
/// fetchSize does), and Close of a negotiated portal.
#[test]
fn suspended_portals_keep_their_plan_until_closed() {
    let lane = pglane(true);
    let (mut direct, mut through) = clients(&lane);
    same_replies(&mut direct, &mut through, &prepare("q", QUERY), "prepare");
    same_replies(&mut direct, &mut through, &simple("BEGIN"), "begin");
    let mut out = BytesMut::new();
    frontend::bind(&mut out, "c", "q", &[], std::iter::empty(), &[]);
    frontend::execute(&mut out, "c", 3);
    frontend::execute(&mut out, "c", 3);
    frontend::sync(&mut out);
    let replies = same_replies(&mut direct, &mut through, &out, "two batches");
    assert_eq!(data_rows(&replies), 6);
    let mut out = BytesMut::new();
    frontend::describe(&mut out, Target::Portal, "c");
    frontend::execute(&mut out, "c", 1000);
    frontend::close(&mut out, Target::Portal, "c");
    frontend::bind(&mut out, "c", "q", &[], std::iter::empty(), &[1]);
    frontend::execute(&mut out, "c", 2);
    frontend::sync(&mut out);
    let replies = same_replies(&mut direct, &mut through, &out, "rest, then the name rebound as binary");
    assert_eq!(data_rows(&replies), 1002);
    same_replies(&mut direct, &mut through, &simple("COMMIT"), "commit");
    assert!(prepared_stat(&lane, "values_transcoded") > 0);
}

/// float4 and float8 under extra_float_digits -15 .. 3, as the server's
/// default (pglane reads it after login), from the startup packet (pgjdbc
/// sends 3) and from a SET: negotiated, and the same bytes as PostgreSQL's.
/// Two clients with different values take turns on the two server
/// connections. After a `set_config` pglane cannot follow, floats stay text.
#[test]
fn floats_are_byte_identical_under_every_extra_float_digits() {
    let lane = pglane(true);
    let pg = postgres();
    let counts = pg.psql_db(DB, "select count(*) + count(f4) + count(f8) from floats");
    let values: i64 = counts.parse().unwrap();
    let float_values: i64 = pg.psql_db(DB, "select count(f4) + count(f8) from floats").parse().unwrap();
    let query = "select * from floats order by id";
    let (mut direct_default, mut through_default) = clients(&lane);
    same_replies(&mut direct_default, &mut through_default, &prepare("q", query), "prepare");
    let mut rounds = 0;
    for efd in ["-15", "-4", "0", "1", "2", "3"] {
        let (mut direct_set, mut through_set) = clients(&lane);
        let startup = |user, db| [("user", user), ("database", db), ("extra_float_digits", efd)];
        let mut direct_startup = RawClient::login_with(pg.port, &startup("trustuser", DB));
        let mut through_startup = RawClient::login_with(lane.port, &startup("postgres", "app"));
        let set = format!("SET extra_float_digits = {efd}");
        same_replies(&mut direct_set, &mut through_set, &simple(&set), &set);
        for (direct, through) in [(&mut direct_startup, &mut through_startup), (&mut direct_set, &mut through_set)] {
            same_replies(direct, through, &prepare("q", query), "prepare");
        }
        for round in 0..2 {
            for (how, direct, through) in [
                ("startup", &mut direct_startup, &mut through_startup),
                ("SET", &mut direct_set, &mut through_set),
                ("server default", &mut direct_default, &mut through_default),
            ] {
                let before = prepared_stat(&lane, "values_transcoded");
                let replies = same_replies(direct, through, &run("q", &[]), &format!("efd {efd} by {how}, round {round}"));
                assert_eq!(data_rows(&replies), 1028);
                assert_eq!(
                    prepared_stat(&lane, "values_transcoded") - before,
                    values,
                    "efd {efd} by {how}: every value transcoded"
                );
                rounds += 1;
            }
        }
    }
    assert_eq!(rounds, 36);
    // SET LOCAL and set_config inside a transaction block are not followed:
    // inside it the floats of that connection stay text (the id column is
    // still transcoded). After SET LOCAL pglane aligns the connection again
    // before its next use; set_config pins the client (pglane cannot know
    // the transaction undid it), and its floats stay text.
    for change in ["SET LOCAL extra_float_digits = -2", "select pg_catalog.set_config('extra_float_digits', '-3', false)"] {
        same_replies(&mut direct_default, &mut through_default, &simple("BEGIN"), "begin");
        same_replies(&mut direct_default, &mut through_default, &simple(change), change);
        let before = prepared_stat(&lane, "values_transcoded");
        same_replies(&mut direct_default, &mut through_default, &run("q", &[]), change);
        assert_eq!(prepared_stat(&lane, "values_transcoded") - before, values - float_values, "floats stay text after {change}");
        same_replies(&mut direct_default, &mut through_default, &simple("ROLLBACK"), "rollback");
        let before = prepared_stat(&lane, "values_transcoded");
        same_replies(&mut direct_default, &mut through_default, &run("q", &[]), "after the rollback");
        let transcoded = prepared_stat(&lane, "values_transcoded") - before;
        if change.starts_with("SET LOCAL") {
            assert_eq!(transcoded, values, "known again after {change}");
        } else {
            assert_eq!(transcoded, values - float_values, "pinned, not known, after {change}");
        }
    }
}

/// With negotiation off nothing is transcoded, and the bytes are the same.
#[test]
fn off_means_untouched() {
    let lane = pglane(false);
    let (mut direct, mut through) = clients(&lane);
    same_replies(&mut direct, &mut through, &prepare("q", QUERY), "prepare");
    same_replies(&mut direct, &mut through, &run("q", &[]), "text");
    assert_eq!(prepared_stat(&lane, "values_transcoded"), 0);
    assert_eq!(prepared_stat(&lane, "portals_negotiated"), 0);
}

/// tokio-postgres asks for binary itself: its values pass untouched, and
/// its simple (text) queries are unaffected.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokio_postgres_gets_the_same_values() {
    let lane = pglane(true);
    let through = connect(lane.port, "postgres", "secret", "app").await;
    let direct = connect(postgres().port, "postgres", "secret", DB).await;
    let sql = "select id, b, i2, i8, n::text, u::text, d::text, ts::text, iv::text from types order by id";
    for _ in 0..3 {
        let statement = through.prepare(sql).await.unwrap();
        let got = through.query(&statement, &[]).await.unwrap();
        let expected = direct.query(sql, &[]).await.unwrap();
        assert_eq!(got.len(), expected.len());
        for (g, e) in got.iter().zip(&expected) {
            for i in 0..g.len() {
                match i {
                    0 => assert_eq!(g.get::<_, i32>(i), e.get::<_, i32>(i)),
                    1 => assert_eq!(g.get::<_, Option<bool>>(i), e.get::<_, Option<bool>>(i)),
                    2 => assert_eq!(g.get::<_, Option<i16>>(i), e.get::<_, Option<i16>>(i)),
                    3 => assert_eq!(g.get::<_, Option<i64>>(i), e.get::<_, Option<i64>>(i)),
                    _ => assert_eq!(g.get::<_, Option<String>>(i), e.get::<_, Option<String>>(i)),
                }
            }
        }
    }
    let got = through.simple_query("select u, ts, n from types order by id").await.unwrap();
    let expected = direct.simple_query("select u, ts, n from types order by id").await.unwrap();
    let text = |messages: &[tokio_postgres::SimpleQueryMessage]| -> Vec<Vec<Option<String>>> {
        messages
            .iter()
            .filter_map(|m| match m {
                tokio_postgres::SimpleQueryMessage::Row(r) => Some((0..r.len()).map(|i| r.get(i).map(str::to_owned)).collect()),
                _ => None,
            })
            .collect()
    };
    assert_eq!(text(&got), text(&expected));
    assert_eq!(prepared_stat(&lane, "values_transcoded"), 0, "binary clients and simple queries need nothing");
}

const DRIVER: &str = "/usr/share/java/postgresql.jar";

/// utime + stime of a process, in clock ticks (1/100 s).
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("/proc/pid/stat");
    let fields: Vec<&str> = stat[stat.rfind(')').expect("comm") + 2..].split(' ').collect();
    fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap()
}

/// UuidFetch's lines: (rows, checksum, ms, server CPU ticks), with pgjdbc's
/// prepareThreshold `threshold`.
fn uuid_fetch(java_classes: &Path, url: &str, runs: usize, threshold: u32) -> Vec<(u64, String, u64, u64)> {
    let classpath = format!("{}:{}", java_classes.display(), DRIVER);
    let out = Command::new("java")
        .args(["-cp", &classpath, "UuidFetch", url, "postgres", "secret", &runs.to_string(), &threshold.to_string()])
        .output()
        .expect("java runs");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    stdout
        .lines()
        .map(|line| {
            let w: Vec<&str> = line.split(' ').collect();
            (w[3].parse().unwrap(), w[5].to_owned(), w[7].parse().unwrap(), w[9].parse().unwrap())
        })
        .collect()
}

/// pgjdbc with a named statement and text results (binaryTransfer=false):
/// `select u from t1` directly, through pglane with negotiation off and on:
/// the same values (checksum over every value's text). Rows in t1: 100,000,
/// or PGLANE_UUID_ROWS (bench/RESULTS.md uses 1,000,000 with a release build).
#[test]
fn jdbc_uuid_fetch_same_values_direct_and_through_pglane() {
    assert!(Path::new(DRIVER).exists(), "{DRIVER} missing: apt-get install libpostgresql-jdbc-java (tools/test does)");
    database();
    let pg = postgres();
    if let Some(rows) = std::env::var("PGLANE_UUID_ROWS").ok().and_then(|r| r.parse::<u64>().ok()) {
        pg.psql_db(DB, &format!("truncate t1; insert into t1 select gen_random_uuid() from generate_series(1, {rows})"));
        pg.psql_db(DB, "vacuum analyze t1");
    }
    let rows: u64 = pg.psql_db(DB, "select count(*) from t1").parse().unwrap();
    // One server connection each, so that UuidFetch reads the CPU time of
    // the backend that serves it.
    let lanes = [("off", pglane_with_pool(false, 1)), ("on", pglane_with_pool(true, 1))];
    let classes = compile_uuid_fetch(&lanes[0].1.dir);

    let runs = 4;
    let direct = uuid_fetch(&classes, &format!("jdbc:postgresql://127.0.0.1:{}/{DB}", pg.port), runs, 1);
    let checksum = direct[0].1.clone();
    assert!(direct.iter().all(|r| r.0 == rows && r.1 == checksum), "{direct:?}");
    println!("direct: {direct:?}");
    let mut server_bytes = Vec::new();
    for (name, lane) in &lanes {
        let pglane_cpu = cpu_ticks(lane.pid());
        let through = uuid_fetch(&classes, &format!("jdbc:postgresql://127.0.0.1:{}/app", lane.port), runs, 1);
        let pglane_cpu = cpu_ticks(lane.pid()) - pglane_cpu;
        assert!(through.iter().all(|r| r.0 == rows && r.1 == checksum), "negotiation {name}: {through:?} vs {direct:?}");
        let transcoded = prepared_stat(lane, "values_transcoded");
        let saved = prepared_stat(lane, "transcode_bytes_saved");
        let from_server = admin_stat(lane, "SHOW STATS_TOTALS", "server_bytes_received");
        let to_client = admin_stat(lane, "SHOW STATS_TOTALS", "bytes_sent");
        println!(
            "negotiation {name}: {through:?}, values transcoded {transcoded}, bytes saved {saved}, bytes from server {from_server}, to client {to_client}, pglane CPU ticks over all runs {pglane_cpu}"
        );
        // What the client got is what the server sent, plus the text's extra
        // bytes (20 per uuid), give or take the few messages pglane answers itself.
        assert!((to_client - saved - from_server).abs() < 64 * 1024, "{to_client} - {saved} vs {from_server}");
        match *name {
            // The first run Parses and Describes; later runs are negotiated.
            "on" => assert!(transcoded >= (runs as i64 - 2) * rows as i64, "{transcoded} values transcoded"),
            _ => assert_eq!(transcoded, 0),
        }
        server_bytes.push(from_server);
    }
    assert!(
        server_bytes[1] < server_bytes[0] - 20 * (runs as i64 - 2) * rows as i64,
        "bytes from server, off/on: {server_bytes:?}"
    );
}

/// Compiles tests/jdbc/UuidFetch.java into `dir`/classes.
fn compile_uuid_fetch(dir: &Path) -> std::path::PathBuf {
    assert!(Path::new(DRIVER).exists(), "{DRIVER} missing: apt-get install libpostgresql-jdbc-java (tools/test does)");
    let classes = dir.join("classes");
    std::fs::create_dir_all(&classes).unwrap();
    let source = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/jdbc/UuidFetch.java");
    let javac = Command::new("javac").args(["-cp", DRIVER, "-d"]).arg(&classes).arg(source).output().expect("javac runs");
    assert!(javac.status.success(), "{}", String::from_utf8_lossy(&javac.stderr));
    classes
}

const UUID_DB: &str = "uuid_fetch_db";

/// Database UUID_DB with table t1 of `rows` random uuids (made once per
/// test process, again if its size differs).
fn uuid_database(rows: u64) {
    static READY: OnceLock<u64> = OnceLock::new();
    let made = *READY.get_or_init(|| {
        let pg = postgres();
        let exists = pg.psql(&format!("select count(*) from pg_database where datname = '{UUID_DB}'")) == "1";
        if !exists {
            pg.psql(&format!("create database {UUID_DB}"));
            pg.psql_db(UUID_DB, "create table t1 (u uuid); grant select on t1 to public");
        }
        if pg.psql_db(UUID_DB, "select count(*) from t1").parse::<u64>().unwrap() != rows {
            pg.psql_db(UUID_DB, &format!("truncate t1; insert into t1 select gen_random_uuid() from generate_series(1, {rows})"));
            pg.psql_db(UUID_DB, "vacuum analyze t1");
        }
        rows
    });
    assert_eq!(made, rows);
}

/// Rows of the pgjdbc prepareThreshold=0 test and bench: PGLANE_UUID_ROWS or 1,000,000.
fn uuid_rows() -> u64 {
    std::env::var("PGLANE_UUID_ROWS").ok().and_then(|r| r.parse().ok()).unwrap_or(1_000_000)
}

/// pgjdbc with prepareThreshold=0, the setting behind a transaction
/// pooler: every execution is Parse of the unnamed statement, Bind, Describe
/// portal, Execute (in fetchSize batches). With auto_prepare, pglane maps the
/// unnamed statement to a named one of its own, describes it once, and from
/// then on each Bind (Exchange::bind) asks the server for binary, which
/// pglane turns back into text. `select u from t1` over 1,000,000 uuids,
/// directly and through pglane: the same values (checksum over every
/// value's text), and the server really sent binary.
#[test]
fn jdbc_prepare_threshold_0_through_auto_prepare_and_negotiation() {
    let rows = uuid_rows();
    uuid_database(rows);
    let pg = postgres();
    let lane = pglane_for(UUID_DB, true, true, 1);
    let classes = compile_uuid_fetch(&lane.dir);
    let runs = 3;
    let direct = uuid_fetch(&classes, &format!("jdbc:postgresql://127.0.0.1:{}/{UUID_DB}", pg.port), runs, 0);
    let checksum = direct[0].1.clone();
    assert!(direct.iter().all(|r| r.0 == rows && r.1 == checksum), "{direct:?}");
    let through = uuid_fetch(&classes, &format!("jdbc:postgresql://127.0.0.1:{}/app", lane.port), runs, 0);
    assert!(through.iter().all(|r| r.0 == rows && r.1 == checksum), "through pglane: {through:?} vs direct {direct:?}");
    let transcoded = prepared_stat(&lane, "values_transcoded");
    let mapped = prepared_stat(&lane, "unnamed_mapped");
    let from_server = admin_stat(&lane, "SHOW STATS_TOTALS", "server_bytes_received");
    let to_client = admin_stat(&lane, "SHOW STATS_TOTALS", "bytes_sent");
    println!("direct {direct:?}\nthrough {through:?}\ntranscoded {transcoded}, unnamed mapped {mapped}, from server {from_server}, to client {to_client}");
    assert!(mapped >= runs as i64, "{mapped} unnamed statements mapped");
    // The first run's statement is described by pglane ahead of its first
    // Bind, which goes as the client sent it; every later run is binary.
    assert!(transcoded >= (runs as i64 - 1) * rows as i64, "{transcoded} values transcoded");
    // A uuid is 16 bytes in binary, 36 as text (give or take the few
    // replies to pglane's own messages, which the client does not get).
    assert!(
        to_client - from_server > 20 * (runs as i64 - 1) * rows as i64 - 64 * 1024,
        "from server {from_server}, to client {to_client}"
    );
}

/// The measurement behind bench/RESULTS.md (run it with bench/uuid-fetch):
/// pgjdbc, prepareThreshold=0, `select u from t1` over PGLANE_UUID_ROWS
/// uuids (1,000,000), side by side in interleaved rounds (the order rotates
/// each round): PostgreSQL directly; pglane relaying (auto_prepare and
/// binary_negotiation off: the server sends what it sends directly, byte for
/// byte); pglane with auto_prepare only; pglane with both. Per run: the
/// backend's CPU (utime+stime from /proc, read by UuidFetch), bytes from the
/// server (pglane's server_bytes_received; direct = the relaying pglane's),
/// pglane's CPU, wall time. PGLANE_UUID_ROUNDS rounds (5) of
/// PGLANE_UUID_RUNS runs (2) per target, after one warm-up run each.
#[test]
#[ignore = "a benchmark: bench/uuid-fetch runs it"]
fn bench_uuid_fetch_prepare_threshold_0() {
    let env = |name: &str, default: u64| std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default);
    let rows = uuid_rows();
    let (rounds, runs) = (env("PGLANE_UUID_ROUNDS", 5) as usize, env("PGLANE_UUID_RUNS", 2) as usize);
    uuid_database(rows);
    let pg = postgres();
    let targets: Vec<(&str, Option<Pglane>)> = vec![
        ("direct", None),
        ("pglane relay", Some(pglane_for(UUID_DB, false, false, 1))),
        ("pglane auto_prepare", Some(pglane_for(UUID_DB, false, true, 1))),
        ("pglane auto_prepare + negotiation", Some(pglane_for(UUID_DB, true, true, 1))),
    ];
    let classes = compile_uuid_fetch(&targets[1].1.as_ref().expect("a pglane").dir);
    let url = |lane: &Option<Pglane>| match lane {
        None => format!("jdbc:postgresql://127.0.0.1:{}/{UUID_DB}", pg.port),
        Some(lane) => format!("jdbc:postgresql://127.0.0.1:{}/app", lane.port),
    };
    let checksum = uuid_fetch(&classes, &url(&None), 1, 0)[0].1.clone();
    for (_, lane) in &targets[1..] {
        uuid_fetch(&classes, &url(lane), 1, 0); // warm-up: pglane learns the statement
    }
    // Per target: wall ms, server CPU ticks, bytes from server, pglane CPU ticks; one entry per run.
    let mut samples: Vec<Vec<(f64, f64, f64, f64)>> = vec![Vec::new(); targets.len()];
    for round in 0..rounds {
        for k in 0..targets.len() {
            let i = (round + k) % targets.len();
            let lane = &targets[i].1;
            let before = lane.as_ref().map(|l| (admin_stat(l, "SHOW STATS_TOTALS", "server_bytes_received"), cpu_ticks(l.pid())));
            let got = uuid_fetch(&classes, &url(lane), runs, 0);
            assert!(got.iter().all(|r| r.0 == rows && r.1 == checksum), "{}: {got:?}", targets[i].0);
            let (bytes, lane_cpu) = match (lane, before) {
                (Some(l), Some((bytes, cpu))) => {
                    let bytes = admin_stat(l, "SHOW STATS_TOTALS", "server_bytes_received") - bytes;
                    (bytes as f64 / runs as f64, (cpu_ticks(l.pid()) - cpu) as f64 / runs as f64)
                }
                _ => (f64::NAN, f64::NAN),
            };
            samples[i].extend(got.iter().map(|r| (r.2 as f64, r.3 as f64, bytes, lane_cpu)));
        }
    }
    let median = |mut v: Vec<f64>| {
        v.sort_by(|a, b| a.total_cmp(b));
        v[v.len() / 2]
    };
    let column = |i: usize, f: fn(&(f64, f64, f64, f64)) -> f64| median(samples[i].iter().map(f).collect());
    // Direct, the server sends what the relaying pglane relays, byte for byte.
    let direct_bytes = column(1, |s| s.2);
    let direct = (column(0, |s| s.0), column(0, |s| s.1));
    println!("| target | wall ms per run | server CPU s per run | bytes from server per run | pglane CPU s per run | wall vs direct | server CPU vs direct | bytes vs direct |");
    println!("|---|---|---|---|---|---|---|---|");
    for (i, (name, _)) in targets.iter().enumerate() {
        let (wall, cpu) = (column(i, |s| s.0), column(i, |s| s.1));
        let bytes = if i == 0 { direct_bytes } else { column(i, |s| s.2) };
        let lane_cpu = if i == 0 { "—".to_owned() } else { format!("{:.2}", column(i, |s| s.3) / 100.0) };
        println!(
            "| {name} | {wall:.0} | {:.2} | {bytes:.0} | {lane_cpu} | {:.2}x | {:.2}x | {:.3}x |",
            cpu / 100.0,
            wall / direct.0,
            cpu / direct.1,
            bytes / direct_bytes
        );
    }
    for (i, (name, _)) in targets.iter().enumerate() {
        println!("raw {name}: {:?}", samples[i]);
    }
}

/// The measurement behind bench/RESULTS.md's bytea figure: a named
/// statement fetching PGLANE_BYTEA_ROWS (10,000) rows of an int4 and a
/// PGLANE_BYTEA_SIZE-byte (8,192) random bytea as text, over one raw
/// protocol client each: PostgreSQL directly, pglane relaying
/// (binary_negotiation off) and pglane negotiating (after 4 warm-up runs,
/// in which it watches the statement's first 3 executions), in
/// PGLANE_BYTEA_ROUNDS (5) interleaved rounds of 2 runs. Per run: wall
/// time, the backend's CPU (utime+stime, from /proc, via pg_backend_pid)
/// and bytes from the server (pglane's server_bytes_received; direct = the
/// relaying pglane's, byte for byte). Every run's replies are checked equal
/// to PostgreSQL's.
#[test]
#[ignore = "a benchmark: see bench/RESULTS.md"]
fn bench_bytea_fetch() {
    let env = |name: &str, default: u64| std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default);
    let (rows, size, rounds) = (env("PGLANE_BYTEA_ROWS", 10_000), env("PGLANE_BYTEA_SIZE", 8192), env("PGLANE_BYTEA_ROUNDS", 5));
    database();
    let pg = postgres();
    pg.psql_db(
        DB,
        &format!(
            "drop table if exists bytea_bench; create table bytea_bench (id int4, b bytea); alter table bytea_bench alter b set storage external;
             insert into bytea_bench select g, (select decode(string_agg(md5(random()::text || g || i), ''), 'hex') from generate_series(1, {size} / 16) i) from generate_series(1, {rows}) g;
             grant select on bytea_bench to public"
        ),
    );
    pg.psql_db(DB, "vacuum analyze bytea_bench");
    let query = "select id, b from bytea_bench order by id";
    let lanes = [pglane_with_pool(false, 1), pglane_with_pool(true, 1)];
    let names = ["direct", "pglane relaying", "pglane negotiating"];
    let mut targets: Vec<(RawClient, Option<&Pglane>)> = vec![(RawClient::login(pg.port, "trustuser", DB), None)];
    for lane in &lanes {
        targets.push((RawClient::login(lane.port, "postgres", "app"), Some(lane)));
    }
    let mut pids = Vec::new();
    for (client, _) in targets.iter_mut() {
        client.send(&simple("select pg_backend_pid()"));
        pids.push(raw::first_column(&client.until_ready())[0].parse::<u32>().unwrap());
        client.send(&prepare("q", query));
        client.until_ready();
    }
    let fetch = |client: &mut RawClient| -> Vec<(u8, Vec<u8>)> {
        client.send(&run("q", &[]));
        client.until_ready().into_iter().map(|m| (m.tag, m.body.to_vec())).collect()
    };
    let expected = fetch(&mut targets[0].0);
    for (client, _) in targets.iter_mut().skip(1) {
        for _ in 0..4 {
            assert!(fetch(client) == expected, "warm-up");
        }
    }
    let transcoded = prepared_stat(&lanes[1], "values_transcoded");
    // Per target: (wall ms, server CPU ticks, bytes from server) per run.
    let mut samples: Vec<Vec<(f64, f64, f64)>> = vec![Vec::new(); targets.len()];
    for round in 0..rounds as usize {
        for k in 0..targets.len() {
            let i = (round + k) % targets.len();
            for _ in 0..2 {
                let (client, lane) = &mut targets[i];
                let bytes = lane.map(|l| admin_stat(l, "SHOW STATS_TOTALS", "server_bytes_received"));
                let cpu = cpu_ticks(pids[i]);
                let start = std::time::Instant::now();
                let got = fetch(client);
                let wall = start.elapsed().as_secs_f64() * 1000.0;
                let cpu = (cpu_ticks(pids[i]) - cpu) as f64;
                assert!(got == expected, "{}: replies differ from PostgreSQL's", names[i]);
                let bytes = match (lane, bytes) {
                    (Some(l), Some(b)) => (admin_stat(l, "SHOW STATS_TOTALS", "server_bytes_received") - b) as f64,
                    _ => f64::NAN,
                };
                samples[i].push((wall, cpu, bytes));
            }
        }
    }
    assert!(prepared_stat(&lanes[1], "values_transcoded") - transcoded >= (rounds as i64 * 2) * 2 * rows as i64);
    assert_eq!(prepared_stat(&lanes[1], "big_rows"), 0);
    let median = |mut v: Vec<f64>| {
        v.sort_by(|a, b| a.total_cmp(b));
        v[v.len() / 2]
    };
    let column = |i: usize, f: fn(&(f64, f64, f64)) -> f64| median(samples[i].iter().map(f).collect());
    let direct = (column(0, |s| s.0), column(0, |s| s.1), column(1, |s| s.2));
    println!("rows {rows}, bytea size {size}, {rounds} rounds x 2 runs");
    println!("| target | wall ms per run | server CPU s per run | bytes from server per run | server CPU vs direct | bytes vs direct |");
    println!("|---|---|---|---|---|---|");
    for (i, name) in names.iter().enumerate() {
        let (wall, cpu) = (column(i, |s| s.0), column(i, |s| s.1));
        let bytes = if i == 0 { direct.2 } else { column(i, |s| s.2) };
        println!("| {name} | {wall:.0} | {:.2} | {bytes:.0} | {:.2}x | {:.3}x |", cpu / 100.0, cpu / direct.1, bytes / direct.2);
    }
    for (i, name) in names.iter().enumerate() {
        println!("raw {name}: {:?}", samples[i]);
    }
    pg.psql_db(DB, "drop table bytea_bench");
}

/// Which unbounded types are worth asking binary for: PostgreSQL's own CPU
/// (backend utime+stime) and bytes sent for the same fetch with text and
/// with binary results, directly (no pglane), per column type, in
/// PGLANE_FORMAT_ROUNDS (5) interleaved rounds (PGLANE_FORMAT_CASES: only
/// the cases whose name starts so). Behind negotiate.rs's
/// choice to negotiate bytea and arrays but not text-likes or jsonb.
#[test]
#[ignore = "a benchmark: see bench/RESULTS.md"]
fn bench_server_text_vs_binary_by_type() {
    let rounds = std::env::var("PGLANE_FORMAT_ROUNDS").ok().and_then(|v| v.parse().ok()).unwrap_or(5);
    database();
    let pg = postgres();
    let cases = [
        ("text, 1,000,000 x 30 bytes", "select md5(g::text) || 'abcd' from generate_series(1, 1000000) g"),
        ("text, 10,000 x 8 KiB", "select repeat(md5(g::text), 256) from generate_series(1, 10000) g"),
        ("jsonb, 200,000 small documents", "select jsonb_build_object('id', g, 'name', md5(g::text), 'tags', jsonb_build_array(1, 2.5e3, 'x'), 'n', null) from generate_series(1, 200000) g"),
        ("int4[], 200,000 x 20 elements", "select array_agg(g * 1000 + i) from generate_series(1, 200000) g, generate_series(1, 20) i group by g"),
        ("text[], 200,000 x 10 words", "select array_agg(md5((g * 100 + i)::text)) from generate_series(1, 200000) g, generate_series(1, 10) i group by g"),
        ("jsonb[], 100,000 x 3 documents", "select array_agg(jsonb_build_object('k', md5((g * 10 + i)::text), 'n', i)) from generate_series(1, 100000) g, generate_series(1, 3) i group by g"),
        ("bytea, 10,000 x 8 KiB", "select decode(repeat(md5(g::text), 512), 'hex') from generate_series(1, 10000) g"),
    ];
    println!("| column | server CPU s, text | server CPU s, binary | binary vs text | bytes, text | bytes, binary |");
    println!("|---|---|---|---|---|---|");
    let only = std::env::var("PGLANE_FORMAT_CASES").unwrap_or_default();
    for (i, (name, select)) in cases.iter().enumerate().filter(|(_, (name, _))| name.starts_with(only.as_str())) {
        let table = format!("fmt_{i}");
        pg.psql_db(
            DB,
            &format!("drop table if exists {table}; create table {table} as {select}; grant select on {table} to public"),
        );
        pg.psql_db(DB, &format!("vacuum analyze {table}"));
        let mut client = RawClient::login(pg.port, "trustuser", DB);
        client.send(&simple("select pg_backend_pid()"));
        let pid: u32 = raw::first_column(&client.until_ready())[0].parse().unwrap();
        client.send(&prepare("q", &format!("select * from {table}")));
        client.until_ready();
        // Per format: (CPU ticks, bytes received) per run.
        let mut samples: [Vec<(f64, f64)>; 2] = [Vec::new(), Vec::new()];
        for round in 0..rounds {
            for k in 0..2 {
                let format = (round + k) % 2;
                let cpu = cpu_ticks(pid);
                client.send(&run("q", &[format as i16]));
                let bytes: usize = client.until_ready().iter().map(|m| m.body.len() + 5).sum();
                samples[format].push(((cpu_ticks(pid) - cpu) as f64, bytes as f64));
            }
        }
        let median = |mut v: Vec<f64>| {
            v.sort_by(|a, b| a.total_cmp(b));
            v[v.len() / 2]
        };
        let cpu = |f: usize| median(samples[f].iter().map(|s| s.0).collect());
        let bytes = |f: usize| median(samples[f].iter().map(|s| s.1).collect());
        println!(
            "| {name} | {:.2} | {:.2} | {:.2}x | {:.0} | {:.0} |",
            cpu(0) / 100.0,
            cpu(1) / 100.0,
            cpu(1) / cpu(0),
            bytes(0),
            bytes(1)
        );
        println!("raw {name}: {:?}", samples);
        pg.psql_db(DB, &format!("drop table {table}"));
    }
}

/// text[] is negotiated only while client and server encodings are equal
/// (`array_out` decides its quoting before the server converts): a LATIN1
/// client gets its other columns negotiated, text[] as the server sent it.
#[test]
fn text_arrays_stay_text_when_the_encodings_differ() {
    let lane = pglane(true);
    let pg = postgres();
    let latin1 = |user, db| [("user", user), ("database", db), ("client_encoding", "LATIN1")];
    let mut direct = RawClient::login_with(pg.port, &latin1("trustuser", DB));
    let mut through = RawClient::login_with(lane.port, &latin1("postgres", "app"));
    let query = "select id, u, ta, ia from blobs where id in (2, 3, 4) order by id";
    same_replies(&mut direct, &mut through, &prepare("l", query), "prepare");
    for round in 0..3 {
        same_replies(&mut direct, &mut through, &run("l", &[]), &format!("watched {round}"));
    }
    let before = prepared_stat(&lane, "values_transcoded");
    same_replies(&mut direct, &mut through, &run("l", &[]), "negotiated");
    // ids 2, 3, 4; uuids of 3 and 4; int4[] of 3 and 4; not text[].
    assert_eq!(prepared_stat(&lane, "values_transcoded") - before, 7);
}
