//! Differential tests of `pglane::formats` against a real PostgreSQL.
//!
//! For every transcodable type, many edge and random values are fetched
//! twice from the server, once as text and once as binary, and the binary
//! value put through pglane's transcoder must equal the server's text byte
//! for byte, under every DateStyle / IntervalStyle / TimeZone /
//! extra_float_digits / bytea_output value the module claims to support.
//! The settings come from the server's own ParameterStatus messages (and,
//! for the two settings PostgreSQL does not report, from the SET we sent),
//! the transcoder from the statement's RowDescription, as in the relay.
//!
//! Values are random from a fixed seed; set `PGLANE_TRANSCODE_SEED` to try
//! another (every failure message names the seed), and
//! `PGLANE_TRANSCODE_SCALE=N` for N times as many random values.

mod common;
#[path = "common/raw.rs"]
mod raw;

use std::fmt::Write as _;

use bytes::BytesMut;
use common::postgres;
use pglane::formats::{oid, transcoder_for, TextSettings};
use pglane::protocol::backend::{self, FORMAT_BINARY, FORMAT_TEXT};
use pglane::protocol::frame::Message;
use pglane::protocol::frontend::{self, Target};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use raw::RawClient;

// ---------------------------------------------------------------------------
// Harness
// ---------------------------------------------------------------------------

fn seed() -> u64 {
    std::env::var("PGLANE_TRANSCODE_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(0x5eed_2026)
}

/// `count` random values, times PGLANE_TRANSCODE_SCALE.
fn n(count: usize) -> usize {
    let scale = std::env::var("PGLANE_TRANSCODE_SCALE").ok().and_then(|s| s.parse().ok()).unwrap_or(1);
    count * scale
}

fn rng(salt: u64) -> StdRng {
    StdRng::seed_from_u64(seed() ^ salt)
}

/// A parameter value sent with the query: NULL, text or binary format.
#[derive(Debug, Clone)]
enum Param {
    Null,
    Text(String),
    Binary(Vec<u8>),
}

impl Param {
    fn format(&self) -> i16 {
        match self {
            Param::Binary(_) => FORMAT_BINARY,
            _ => FORMAT_TEXT,
        }
    }

    fn bytes(&self) -> Option<&[u8]> {
        match self {
            Param::Null => None,
            Param::Text(text) => Some(text.as_bytes()),
            Param::Binary(bytes) => Some(bytes),
        }
    }
}

/// One value's result as (text, binary); `None` is NULL.
type Fetched = (Option<Vec<u8>>, Option<Vec<u8>>);

/// One server session and what pglane would know about its settings.
struct Session {
    client: RawClient,
    settings: TextSettings,
}

impl Session {
    fn new() -> Session {
        let pg = postgres();
        let mut session =
            Session { client: RawClient::login(pg.port, "trustuser", "postgres"), settings: TextSettings::default() };
        for set in [
            "SET client_encoding TO 'UTF8'",
            "SET DateStyle TO 'ISO, MDY'",
            "SET IntervalStyle TO postgres",
            "SET TimeZone TO 'UTC'",
        ] {
            session.simple(set);
        }
        // The startup ParameterStatus messages went to RawClient::login, and
        // a SET that changes nothing reports nothing: read the starting
        // values back instead. Every later change arrives as ParameterStatus.
        for name in ["server_encoding", "integer_datetimes", "client_encoding", "DateStyle", "IntervalStyle", "TimeZone"] {
            let value = session.show(name);
            session.settings.apply(name, &value);
        }
        session
    }

    /// Runs one simple query; tracks every ParameterStatus it brings.
    fn simple(&mut self, sql: &str) -> Vec<Message> {
        let mut buf = BytesMut::new();
        frontend::query(&mut buf, sql);
        self.client.send(&buf);
        let reply = self.client.until_ready();
        self.track(&reply);
        if let Some(code) = raw::error_code(&reply) {
            panic!("{sql}: error {code}");
        }
        reply
    }

    fn show(&mut self, name: &str) -> String {
        let reply = self.simple(&format!("SHOW {name}"));
        raw::first_column(&reply).pop().expect("SHOW returns a row")
    }

    /// SET a reported setting: the server's ParameterStatus updates `settings`.
    fn set_reported(&mut self, name: &str, value_sql: &str) {
        self.simple(&format!("SET {name} TO {value_sql}"));
    }

    /// SET a setting PostgreSQL does not report: pglane tracks it from the SQL.
    fn set_unreported(&mut self, name: &str, value: &str) {
        self.simple(&format!("SET {name} TO '{value}'"));
        assert!(self.settings.apply(name, value));
    }

    fn track(&mut self, messages: &[Message]) {
        for m in messages.iter().filter(|m| m.tag == backend::PARAMETER_STATUS) {
            let (name, value) = backend::decode_parameter_status(&m.body).expect("valid ParameterStatus");
            self.settings.apply(&name, &value);
        }
    }

    /// Prepares `sql` (one parameter, of type `param_oid`) and returns the
    /// type of its one result column.
    fn prepare(&mut self, sql: &str, param_oid: u32) -> u32 {
        let mut buf = BytesMut::new();
        frontend::parse(&mut buf, "t", sql, &[param_oid]);
        frontend::describe(&mut buf, Target::Statement, "t");
        frontend::sync(&mut buf);
        self.client.send(&buf);
        let reply = self.client.until_ready();
        if let Some(code) = raw::error_code(&reply) {
            panic!("{sql}: error {code}");
        }
        let description = reply.iter().find(|m| m.tag == backend::ROW_DESCRIPTION).expect("RowDescription");
        let fields = backend::decode_row_description(&description.body).expect("valid RowDescription");
        assert_eq!(fields.len(), 1);
        fields[0].type_oid
    }

    fn close(&mut self) {
        let mut buf = BytesMut::new();
        frontend::close(&mut buf, Target::Statement, "t");
        frontend::sync(&mut buf);
        self.client.send(&buf);
        self.client.until_ready();
    }

    /// Each value's result as (text, binary), executing statement "t".
    fn fetch(&mut self, values: &[Param]) -> Vec<Fetched> {
        let mut results = Vec::with_capacity(values.len());
        // Batches keep both directions' socket buffers from filling up.
        for batch in values.chunks(100) {
            let mut buf = BytesMut::new();
            for value in batch {
                for result_format in [FORMAT_TEXT, FORMAT_BINARY] {
                    frontend::bind(&mut buf, "", "t", &[value.format()], [value.bytes()].into_iter(), &[result_format]);
                    frontend::execute(&mut buf, "", 0);
                }
            }
            frontend::sync(&mut buf);
            self.client.send(&buf);
            let reply = self.client.until_ready();
            if let Some(code) = raw::error_code(&reply) {
                let fields =
                    reply.iter().find(|m| m.tag == backend::ERROR_RESPONSE).map(|m| backend::decode_error_fields(&m.body));
                panic!("executing a batch failed with {code}: {fields:?}\nbatch: {batch:?}");
            }
            let rows: Vec<Option<Vec<u8>>> = reply
                .iter()
                .filter(|m| m.tag == backend::DATA_ROW)
                .map(|m| {
                    let row = backend::decode_data_row(&m.body).expect("valid DataRow");
                    row.iter().next().expect("one column").map(<[u8]>::to_vec)
                })
                .collect();
            assert_eq!(rows.len(), 2 * batch.len());
            for pair in rows.chunks(2) {
                results.push((pair[0].clone(), pair[1].clone()));
            }
        }
        results
    }

    /// Checks every value of `sql`'s result, text against transcoded binary,
    /// under the current settings. Returns how many non-NULL values matched.
    fn check(&mut self, what: &str, sql: &str, param_oid: u32, values: &[Param]) -> usize {
        let type_oid = self.prepare(sql, param_oid);
        let transcoder = transcoder_for(type_oid, &self.settings)
            .unwrap_or_else(|| panic!("{what}: type {type_oid} is not transcodable under {:?}", self.settings));
        let results = self.fetch(values);
        self.close();
        let mut failures = String::new();
        let mut failed = 0;
        let mut compared = 0;
        for (value, (text, binary)) in values.iter().zip(results) {
            let (text, binary) = match (text, binary) {
                (None, None) => continue,
                (Some(text), Some(binary)) => (text, binary),
                other => panic!("{what}: NULL in one format only: {other:?}"),
            };
            compared += 1;
            let mut out = BytesMut::new();
            let got = transcoder.write_text(&binary, &mut out).map(|()| out.to_vec());
            if got.as_deref() != Ok(&text[..]) {
                failed += 1;
                if failed <= 20 {
                    let _ = writeln!(
                        failures,
                        "  input {value:?}\n    binary   {binary:02x?}\n    server   {:?}\n    pglane   {:?}",
                        String::from_utf8_lossy(&text),
                        got.map(|g| String::from_utf8_lossy(&g).into_owned()),
                    );
                }
            }
        }
        assert!(
            failed == 0,
            "{what}: {failed} of {compared} values differ (seed {}; settings {:?}):\n{failures}",
            seed(),
            self.settings
        );
        compared
    }
}

// ---------------------------------------------------------------------------
// Binary encoders and value generators
// ---------------------------------------------------------------------------

fn binary_array(element_oid: u32, dims: &[(i32, i32)], elements: &[Option<Vec<u8>>]) -> Vec<u8> {
    let mut b = Vec::new();
    let has_nulls = elements.iter().any(Option::is_none);
    for word in [dims.len() as i32, i32::from(has_nulls), element_oid as i32] {
        b.extend_from_slice(&word.to_be_bytes());
    }
    for &(length, lower) in dims {
        b.extend_from_slice(&length.to_be_bytes());
        b.extend_from_slice(&lower.to_be_bytes());
    }
    for element in elements {
        match element {
            None => b.extend_from_slice(&(-1i32).to_be_bytes()),
            Some(value) => {
                b.extend_from_slice(&(value.len() as i32).to_be_bytes());
                b.extend_from_slice(value);
            }
        }
    }
    b
}

/// Random arrays (mostly one-dimensional, some empty, some with other lower
/// bounds or more dimensions) of elements drawn from `element`.
fn arrays(rng: &mut StdRng, element_oid: u32, count: usize, mut element: impl FnMut(&mut StdRng) -> Vec<u8>) -> Vec<Param> {
    let mut values = vec![Param::Binary(binary_array(element_oid, &[], &[])), Param::Null];
    for _ in 0..count {
        let dims: Vec<(i32, i32)> = match rng.gen_range(0..10) {
            0 => vec![(rng.gen_range(1..4), 1), (rng.gen_range(1..4), rng.gen_range(-2..3))],
            1 => vec![(rng.gen_range(1..3), 1), (rng.gen_range(1..3), 1), (rng.gen_range(1..3), 1)],
            2 => vec![(rng.gen_range(1..6), rng.gen_range(-5..6))],
            _ => vec![(rng.gen_range(1..8), 1)],
        };
        let items: i32 = dims.iter().map(|d| d.0).product();
        let elements: Vec<Option<Vec<u8>>> =
            (0..items).map(|_| if rng.gen_ratio(1, 8) { None } else { Some(element(rng)) }).collect();
        values.push(Param::Binary(binary_array(element_oid, &dims, &elements)));
    }
    values
}

fn binary_params<T>(values: impl IntoIterator<Item = T>, encode: impl Fn(T) -> Vec<u8>) -> Vec<Param> {
    let mut params: Vec<Param> = values.into_iter().map(|v| Param::Binary(encode(v))).collect();
    params.push(Param::Null);
    params
}

const USECS_PER_DAY: i64 = 86_400_000_000;
/// Julian day of 2000-01-01, and the first and past-the-last valid Julian days.
const POSTGRES_EPOCH_JDATE: i64 = 2_451_545;
const DATE_END_JULIAN: i64 = 2_147_483_494;
const MIN_TIMESTAMP: i64 = -211_813_488_000_000_000;
const END_TIMESTAMP: i64 = 9_223_371_331_200_000_000;

/// Days since 2000-01-01 of a proleptic Gregorian date (year 0 is 1 BC).
fn days(year: i64, month: i64, day: i64) -> i64 {
    let (y, m) = if month > 2 { (year + 4800, month + 1) } else { (year + 4799, month + 13) };
    let century = y / 100;
    y * 365 - 32_167 + y / 4 - century + century / 4 + 7834 * m / 256 + day - POSTGRES_EPOCH_JDATE
}

/// Edge and random dates, as days since 2000-01-01.
fn dates(rng: &mut StdRng, count: usize) -> Vec<i32> {
    let first = -POSTGRES_EPOCH_JDATE;
    let last = DATE_END_JULIAN - POSTGRES_EPOCH_JDATE - 1;
    let mut values: Vec<i64> = vec![
        0,
        first,
        first + 1,
        last,
        days(2000, 2, 29),
        days(2024, 2, 29),
        days(1900, 2, 28),
        days(1900, 3, 1),
        days(1, 1, 1),
        days(0, 12, 31),
        days(0, 2, 29),
        days(-43, 3, 15),
        days(9999, 12, 31),
        days(10000, 1, 1),
        days(1970, 1, 1),
        days(1582, 10, 10),
    ];
    for _ in 0..count {
        values.push(match rng.gen_range(0..4) {
            0 => rng.gen_range(first..=last),
            1 => rng.gen_range(days(-4713, 1, 1).max(first)..days(1, 1, 1)),
            _ => rng.gen_range(days(1800, 1, 1)..days(2200, 1, 1)),
        });
    }
    let mut values: Vec<i32> = values.into_iter().map(|d| d as i32).collect();
    values.extend([i32::MAX, i32::MIN]);
    values
}

/// A microsecond count with a random number of trailing zero digits.
fn fraction(rng: &mut StdRng) -> i64 {
    let micros = rng.gen_range(0..1_000_000);
    let zeros = rng.gen_range(0..=6);
    micros / 10i64.pow(zeros) * 10i64.pow(zeros)
}

/// Edge and random timestamps, as µs since 2000-01-01.
fn timestamps(rng: &mut StdRng, count: usize) -> Vec<i64> {
    let mut values = vec![
        0,
        MIN_TIMESTAMP,
        MIN_TIMESTAMP + 1,
        END_TIMESTAMP - 1,
        END_TIMESTAMP - USECS_PER_DAY,
        days(2024, 2, 29) * USECS_PER_DAY + 43_200_000_000,
        days(0, 12, 31) * USECS_PER_DAY + USECS_PER_DAY - 1,
        days(1, 1, 1) * USECS_PER_DAY,
        -1,
        1,
        i64::MAX,
        i64::MIN,
    ];
    for _ in 0..count {
        let day = match rng.gen_range(0..3) {
            0 => rng.gen_range(MIN_TIMESTAMP / USECS_PER_DAY..END_TIMESTAMP / USECS_PER_DAY),
            1 => rng.gen_range(days(-4713, 11, 25)..days(1, 1, 1)),
            _ => rng.gen_range(days(1900, 1, 1)..days(2100, 1, 1)),
        };
        let seconds = rng.gen_range(0..86_400);
        values.push(day * USECS_PER_DAY + seconds * 1_000_000 + fraction(rng));
    }
    values
}

fn times(rng: &mut StdRng, count: usize) -> Vec<i64> {
    let mut values = vec![0, 1, USECS_PER_DAY, USECS_PER_DAY - 1, 43_200_000_000, 500_000];
    for _ in 0..count {
        values.push((rng.gen_range(0..86_400) * 1_000_000 + fraction(rng)).min(USECS_PER_DAY));
    }
    values
}

fn zone_offsets(rng: &mut StdRng) -> i32 {
    match rng.gen_range(0..4) {
        0 => rng.gen_range(-15..=15) * 3600,
        1 => rng.gen_range(-63..=63) * 900,
        _ => rng.gen_range(-57_599..=57_599),
    }
}

fn intervals(rng: &mut StdRng, count: usize) -> Vec<(i64, i32, i32)> {
    let mut values = vec![
        (0, 0, 0),
        (i64::MAX, i32::MAX, i32::MAX),
        (i64::MIN, i32::MIN, i32::MIN),
        (-1, 0, 0),
        (1, 0, 0),
        (-1_500_000, 0, 0),
        (7_200_000_000, -1, 0),
        (-1_000_000, 1, 0),
        (0, 0, -1),
        (0, 0, 11),
        (0, 0, 12),
        (0, 0, -13),
        (0, 1, 0),
        (1_000_000, 0, 0),
        (-1_000_000, 0, 0),
        (360_000_000_000_000, 0, 0),
        (14_706_700_000, 3, 14),
        (-14_706_700_000, -3, -14),
        (14_706_700_000, -3, 14),
        (500_000, 0, 0),
        (-500_000, 0, 0),
        (60_000_000, 0, 0),
    ];
    for _ in 0..count {
        let sign = |rng: &mut StdRng| if rng.gen_bool(0.5) { 1 } else { -1 };
        let micros = match rng.gen_range(0..4) {
            0 => 0,
            1 => rng.gen::<i64>(),
            2 => sign(rng) * (rng.gen_range(0..100_000) * 1_000_000),
            _ => sign(rng) * (rng.gen_range(0..86_400i64) * 1_000_000 + fraction(rng)),
        };
        let days = match rng.gen_range(0..3) {
            0 => 0,
            1 => rng.gen::<i32>(),
            _ => rng.gen_range(-40..40),
        };
        let months = match rng.gen_range(0..3) {
            0 => 0,
            1 => rng.gen::<i32>(),
            _ => rng.gen_range(-30..30),
        };
        values.push((micros, days, months));
    }
    values
}

fn interval_binary((micros, days, months): (i64, i32, i32)) -> Vec<u8> {
    let mut b = micros.to_be_bytes().to_vec();
    b.extend_from_slice(&days.to_be_bytes());
    b.extend_from_slice(&months.to_be_bytes());
    b
}

/// Edge doubles, neighbours of powers of ten, random bit patterns and
/// random short decimals.
fn doubles(rng: &mut StdRng, count: usize) -> Vec<f64> {
    let mut values = vec![
        0.0,
        -0.0,
        f64::NAN,
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::MIN_POSITIVE,
        5e-324,
        -5e-324,
        f64::MAX,
        f64::MIN,
        f64::EPSILON,
        1e23,
        0.1,
        0.3,
        1.0 / 3.0,
        2.5,
        0.125,
        9007199254740992.0,
        9007199254740993.0,
        4503599627370497.0,
        123456.789,
        // Subnormals (the largest, one in the middle), and the fixed /
        // exponent notation boundary at 1e15 and 1e16.
        2.225073858507201e-308,
        1e-310,
        -1e-320,
        999999999999999.0,
        999999999999999.9,
        1e15 - 0.5,
        1.234567890123456e15,
        9999999999999998.0,
        1e16 + 2.0,
        123456789012345.6,
        4.35e-5,
        1e-4 - 1e-20,
    ];
    for exponent in -30..=30 {
        let x = 10f64.powi(exponent);
        values.extend([x, -x, f64::from_bits(x.to_bits() + 1), f64::from_bits(x.to_bits() - 1)]);
        values.extend([x * 1.5, x * 9.999999999999999, x * 123456789012345.0]);
    }
    for _ in 0..count {
        values.push(match rng.gen_range(0..4) {
            0 => f64::from_bits(rng.gen()),
            1 => rng.gen_range(-1e6..1e6),
            2 => rng.gen_range(-100_000i64..100_000) as f64 / 10f64.powi(rng.gen_range(0..8)),
            _ => rng.gen_range(-1i64 << 53..1i64 << 53) as f64 * 2f64.powi(rng.gen_range(-60..60)),
        });
    }
    values
}

fn floats(rng: &mut StdRng, count: usize) -> Vec<f32> {
    let mut values = vec![
        0.0,
        -0.0,
        f32::NAN,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::MIN_POSITIVE,
        1e-45,
        f32::MAX,
        f32::MIN,
        0.1,
        1e6,
        100_000.0,
        123_456.7,
        16_777_216.0,
        16_777_217.0,
        // Subnormals, and float4's notation boundary at 1e6.
        1e-40,
        1.1754942e-38,
        999_999.0,
        999_999.94,
        1_000_001.0,
        1e-4,
        9.9999e-5,
    ];
    for exponent in -20..=20 {
        let x = 10f32.powi(exponent);
        values.extend([x, -x, f32::from_bits(x.to_bits() + 1), f32::from_bits(x.to_bits() - 1)]);
    }
    for _ in 0..count {
        values.push(match rng.gen_range(0..3) {
            0 => f32::from_bits(rng.gen()),
            1 => rng.gen_range(-1e6..1e6),
            _ => rng.gen_range(-100_000i32..100_000) as f32 / 10f32.powi(rng.gen_range(0..6)),
        });
    }
    values
}

/// Numeric values as SQL text: edges, many digits and scales.
fn numerics(rng: &mut StdRng, count: usize) -> Vec<String> {
    let mut values: Vec<String> = [
        "0",
        "0.000",
        "-0.0",
        "NaN",
        "Infinity",
        "-Infinity",
        "1",
        "-1",
        "0.0001",
        "0.000100",
        "12345.6789",
        "10000",
        "9999",
        "99999999",
        "100000000",
        "0.00000001",
        "1e-20",
        "1.5e300",
        "-1e-1000",
        "1e1000",
        "123456789012345678901234567890.123456789012345678901234567890",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let digits = |rng: &mut StdRng, n: usize| -> String { (0..n).map(|_| char::from(b'0' + rng.gen_range(0..10))).collect() };
    for _ in 0..count {
        let sign = if rng.gen_bool(0.3) { "-" } else { "" };
        let int_len = match rng.gen_range(0..4) {
            0 => 0,
            1 => rng.gen_range(1..5),
            2 => rng.gen_range(1..40),
            _ => rng.gen_range(1..400),
        };
        let frac_len = match rng.gen_range(0..4) {
            0 => 0,
            1 => rng.gen_range(1..5),
            2 => rng.gen_range(1..40),
            _ => rng.gen_range(1..400),
        };
        let mut value = format!("{sign}{}", if int_len == 0 { "0".to_string() } else { digits(rng, int_len) });
        if frac_len > 0 {
            let mut frac = digits(rng, frac_len);
            if rng.gen_bool(0.3) {
                // Leading fraction zeros: groups before the first digit.
                frac = format!("{}{frac}", "0".repeat(rng.gen_range(1..12)));
            }
            if rng.gen_bool(0.3) {
                frac.push_str(&"0".repeat(rng.gen_range(1..9)));
            }
            value = format!("{value}.{frac}");
        }
        if rng.gen_bool(0.1) {
            value = format!("{value}e{}", rng.gen_range(-40..40));
        }
        values.push(value);
    }
    values
}

/// Strings with quoting hazards and non-ASCII text.
fn strings(rng: &mut StdRng, count: usize) -> Vec<String> {
    const PIECES: &[&str] = &[
        "a", "Z", "0", " ", "  ", "\t", "\n", "\r", "\u{b}", "\u{c}", "\"", "\\", "{", "}", ",", "'", "NULL", "null", "é", "ß",
        "日本", "🦀", "\u{200b}", "x y", "[1:2]", "=", ";", "(", ")",
    ];
    let mut values: Vec<String> = ["", "NULL", "null", "NuLl", " ", "a b", "a,b", "{x}", "\"", "\\", "é", "🦀🦀", "plain"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    for _ in 0..count {
        let n = rng.gen_range(0..12);
        values.push((0..n).map(|_| PIECES[rng.gen_range(0..PIECES.len())]).collect());
    }
    values
}

/// JSON documents in free-form spacing.
fn json_documents(rng: &mut StdRng, count: usize) -> Vec<String> {
    fn value(rng: &mut StdRng, depth: u32) -> String {
        let space = |rng: &mut StdRng| [" ", "", "  ", "\n"][rng.gen_range(0..4)];
        match rng.gen_range(0..if depth > 2 { 5 } else { 7 }) {
            0 => "null".into(),
            1 => ["true", "false"][rng.gen_range(0..2)].into(),
            2 => format!("{}", rng.gen_range(-1000..1000)),
            3 => format!("{}.{}e{}", rng.gen_range(-99..99), rng.gen_range(0..1000), rng.gen_range(-5..5)),
            4 => format!("\"{}\"", ["a", "é", "q\\\"x", "\\u00e9", "🦀", "", "b c"][rng.gen_range(0..7)]),
            5 => {
                let items: Vec<String> = (0..rng.gen_range(0..4)).map(|_| value(rng, depth + 1)).collect();
                format!("[{}{}]", space(rng), items.join(&format!(",{}", space(rng))))
            }
            _ => {
                let items: Vec<String> =
                    (0..rng.gen_range(0..4)).map(|i| format!("\"k{}\"{}:{}", i % 2, space(rng), value(rng, depth + 1))).collect();
                format!("{{{}}}", items.join(", "))
            }
        }
    }
    (0..count).map(|_| value(rng, 0)).collect()
}

fn inets(rng: &mut StdRng, count: usize, cidr: bool) -> Vec<Vec<u8>> {
    let mut values = Vec::new();
    let v6 = |words: [u16; 8]| -> Vec<u8> { words.iter().flat_map(|w| w.to_be_bytes()).collect() };
    let fixed: Vec<(u8, Vec<u8>)> = vec![
        (32, vec![192, 168, 0, 1]),
        (0, vec![0, 0, 0, 0]),
        (128, v6([0; 8])),
        (128, v6([0, 0, 0, 0, 0, 0, 0, 1])),
        (128, v6([0, 0, 0, 0, 0, 0, 0, 2])),
        (128, v6([0, 0, 0, 0, 0, 0xffff, 0x0102, 0x0304])),
        (128, v6([0, 0, 0, 0, 0, 0, 0x0102, 0x0304])),
        (128, v6([0, 0, 0, 0, 0xffff, 0, 0x0102, 0x0304])),
        (128, v6([0x2001, 0xdb8, 0, 0, 0, 0, 0, 1])),
        (64, v6([1, 0, 0, 1, 0, 0, 1, 1])),
        (128, v6([1, 0, 1, 0, 0, 1, 0, 0])),
        (128, v6([0xfe80, 0, 0, 0, 0, 0, 0, 0])),
    ];
    let mut all = fixed;
    for _ in 0..count {
        if rng.gen_bool(0.4) {
            let addr: Vec<u8> = (0..4).map(|_| rng.gen()).collect();
            all.push((rng.gen_range(0..=32), addr));
        } else {
            let words: [u16; 8] = std::array::from_fn(|_| match rng.gen_range(0..3) {
                0 => rng.gen(),
                1 => rng.gen_range(0..16),
                _ => 0,
            });
            all.push((rng.gen_range(0..=128), v6(words)));
        }
    }
    for (bits, mut addr) in all {
        let family = if addr.len() == 4 { 2 } else { 3 };
        if cidr {
            // cidr values have no bits set past the netmask.
            for (i, byte) in addr.iter_mut().enumerate() {
                let keep = (bits as usize).saturating_sub(8 * i).min(8);
                *byte &= if keep == 0 { 0 } else { 0xffu8 << (8 - keep) };
            }
        }
        let mut b = vec![family, bits, u8::from(cidr), addr.len() as u8];
        b.extend_from_slice(&addr);
        values.push(b);
    }
    values
}

// ---------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------

#[test]
fn bool_integers_oid_uuid() {
    let mut s = Session::new();
    let mut rng = rng(1);
    s.check("bool", "SELECT $1", oid::BOOL, &binary_params([true, false], |b| vec![u8::from(b)]));
    let mut ints: Vec<i64> =
        vec![0, 1, -1, i64::MIN, i64::MAX, i32::MIN.into(), i32::MAX.into(), i16::MIN.into(), i16::MAX.into()];
    ints.extend((0..n(300)).map(|_| rng.gen::<i64>() >> rng.gen_range(0..64)));
    s.check("int8", "SELECT $1", oid::INT8, &binary_params(ints.clone(), |v| v.to_be_bytes().to_vec()));
    s.check("int4", "SELECT $1", oid::INT4, &binary_params(ints.clone(), |v| (v as i32).to_be_bytes().to_vec()));
    s.check("int2", "SELECT $1", oid::INT2, &binary_params(ints.clone(), |v| (v as i16).to_be_bytes().to_vec()));
    s.check("oid", "SELECT $1", oid::OID, &binary_params(ints.clone(), |v| (v as u32).to_be_bytes().to_vec()));
    let mut uuids: Vec<[u8; 16]> = vec![[0; 16], [0xff; 16]];
    uuids.extend((0..n(300)).map(|_| rng.gen::<[u8; 16]>()));
    s.check("uuid", "SELECT $1", oid::UUID, &binary_params(uuids.clone(), |u| u.to_vec()));

    s.check("bool[]", "SELECT $1", 1000, &arrays(&mut rng, oid::BOOL, n(50), |r| vec![u8::from(r.gen::<bool>())]));
    s.check("int8[]", "SELECT $1", 1016, &arrays(&mut rng, oid::INT8, n(100), |r| r.gen::<i64>().to_be_bytes().to_vec()));
    s.check("int4[]", "SELECT $1", 1007, &arrays(&mut rng, oid::INT4, n(100), |r| r.gen::<i32>().to_be_bytes().to_vec()));
    s.check("int2[]", "SELECT $1", 1005, &arrays(&mut rng, oid::INT2, n(50), |r| r.gen::<i16>().to_be_bytes().to_vec()));
    s.check("oid[]", "SELECT $1", 1028, &arrays(&mut rng, oid::OID, n(50), |r| r.gen::<u32>().to_be_bytes().to_vec()));
    s.check("uuid[]", "SELECT $1", 2951, &arrays(&mut rng, oid::UUID, n(50), |r| r.gen::<[u8; 16]>().to_vec()));
}

#[test]
fn numeric_all_of_it() {
    let mut s = Session::new();
    let mut rng = rng(2);
    let values: Vec<Param> = numerics(&mut rng, n(1500)).into_iter().map(Param::Text).chain([Param::Null]).collect();
    let compared = s.check("numeric", "SELECT $1", oid::NUMERIC, &values);
    assert!(compared > 1500);
    // Typmods make the server round and pad to the declared scale.
    let scaled: Vec<Param> = numerics(&mut rng, n(300))
        .into_iter()
        .filter(|v| v.split('.').next().is_some_and(|int| int.len() < 20) && !v.contains(['e', 'N', 'I']))
        .map(Param::Text)
        .collect();
    s.check("numeric(30,7)", "SELECT $1::numeric(30,7)", oid::NUMERIC, &scaled);
    let elements: Vec<String> = numerics(&mut rng, n(400));
    let mut pick = rng.clone();
    let arrays: Vec<Param> = (0..n(150))
        .map(|_| {
            let items: Vec<String> = (0..pick.gen_range(0..6))
                .map(|_| if pick.gen_ratio(1, 6) { "NULL".into() } else { elements[pick.gen_range(0..elements.len())].clone() })
                .collect();
            Param::Text(format!("{{{}}}", items.join(",")))
        })
        .collect();
    s.check("numeric[]", "SELECT $1", 1231, &arrays);
}

#[test]
fn floats_under_every_extra_float_digits() {
    let mut s = Session::new();
    let mut rng = rng(3);
    let f8 = binary_params(doubles(&mut rng, n(2000)), |v| v.to_be_bytes().to_vec());
    let f4 = binary_params(floats(&mut rng, n(1000)), |v| v.to_be_bytes().to_vec());
    let f8_arrays = arrays(&mut rng, oid::FLOAT8, n(60), |r| f64::from_bits(r.gen()).to_be_bytes().to_vec());
    let f4_arrays = arrays(&mut rng, oid::FLOAT4, n(60), |r| r.gen_range(-1e7f32..1e7).to_be_bytes().to_vec());
    assert!(transcoder_for(oid::FLOAT8, &s.settings).is_none(), "extra_float_digits unknown");
    for efd in -15..=3 {
        s.set_unreported("extra_float_digits", &efd.to_string());
        s.check(&format!("float8, efd {efd}"), "SELECT $1", oid::FLOAT8, &f8);
        s.check(&format!("float4, efd {efd}"), "SELECT $1", oid::FLOAT4, &f4);
        s.check(&format!("float8[], efd {efd}"), "SELECT $1", 1022, &f8_arrays);
        s.check(&format!("float4[], efd {efd}"), "SELECT $1", 1021, &f4_arrays);
    }
}

#[test]
fn text_like_and_json() {
    let mut s = Session::new();
    let mut rng = rng(4);
    let texts: Vec<Param> = strings(&mut rng, n(400)).into_iter().map(Param::Text).chain([Param::Null]).collect();
    s.check("text", "SELECT $1", oid::TEXT, &texts);
    s.check("varchar", "SELECT $1", oid::VARCHAR, &texts);
    s.check("bpchar", "SELECT $1", oid::BPCHAR, &texts);
    s.check("char(12)", "SELECT $1::char(12)", oid::TEXT, &texts);
    s.check("name", "SELECT $1", oid::NAME, &texts);
    let array_of = |rng: &mut StdRng, element_oid: u32| {
        let pool = strings(rng, 200);
        arrays(rng, element_oid, 150, move |r| pool[r.gen_range(0..pool.len())].clone().into_bytes())
    };
    let text_arrays = array_of(&mut rng, oid::TEXT);
    s.check("text[]", "SELECT $1", 1009, &text_arrays);
    s.check("varchar[]", "SELECT $1", 1015, &array_of(&mut rng, oid::VARCHAR));
    s.check("name[]", "SELECT $1", 1003, &array_of(&mut rng, oid::NAME));
    s.check("bpchar[]", "SELECT $1", 1014, &array_of(&mut rng, oid::BPCHAR));
    s.check("char(3)[]", "SELECT $1::char(3)[]", 1009, &text_arrays);

    let docs: Vec<Param> = json_documents(&mut rng, n(400)).into_iter().map(Param::Text).chain([Param::Null]).collect();
    s.check("json", "SELECT $1", oid::JSON, &docs);
    s.check("jsonb", "SELECT $1", oid::JSONB, &docs);
    let pool = json_documents(&mut rng, n(100));
    let json_arrays = arrays(&mut rng, oid::JSON, n(100), |r| pool[r.gen_range(0..pool.len())].clone().into_bytes());
    s.check("json[]", "SELECT $1", 199, &json_arrays);
    s.check("jsonb[]", "SELECT $1::jsonb[]", 199, &json_arrays);

    // A client encoding other than the server's: text stays text.
    s.set_reported("client_encoding", "'LATIN1'");
    assert!(transcoder_for(oid::TEXT, &s.settings).is_none());
    assert!(transcoder_for(1009, &s.settings).is_none());
    assert!(transcoder_for(oid::JSONB, &s.settings).is_none());
    assert!(transcoder_for(oid::INT4, &s.settings).is_some());
}

#[test]
fn bytea_hex_and_escape() {
    let mut s = Session::new();
    let mut rng = rng(5);
    let mut blobs: Vec<Vec<u8>> = vec![vec![], vec![0], vec![b'\\'], (0..=255).collect()];
    blobs.extend((0..n(300)).map(|_| (0..rng.gen_range(0..80)).map(|_| rng.gen()).collect()));
    let values = binary_params(blobs, |b| b);
    let bytea_arrays = arrays(&mut rng, oid::BYTEA, n(80), |r| (0..r.gen_range(0..10)).map(|_| r.gen()).collect());
    assert!(transcoder_for(oid::BYTEA, &s.settings).is_none(), "bytea_output unknown");
    for style in ["hex", "escape"] {
        s.set_unreported("bytea_output", style);
        s.check(&format!("bytea, {style}"), "SELECT $1", oid::BYTEA, &values);
        s.check(&format!("bytea[], {style}"), "SELECT $1", 1001, &bytea_arrays);
    }
}

const DATE_STYLES: [&str; 12] = [
    "ISO, MDY",
    "ISO, DMY",
    "ISO, YMD",
    "SQL, MDY",
    "SQL, DMY",
    "SQL, YMD",
    "Postgres, MDY",
    "Postgres, DMY",
    "Postgres, YMD",
    "German, MDY",
    "German, DMY",
    "German, YMD",
];

#[test]
fn dates_times_and_timestamps_under_every_date_style() {
    let mut s = Session::new();
    let mut rng = rng(6);
    let date_values = binary_params(dates(&mut rng, n(500)), |d| d.to_be_bytes().to_vec());
    let ts_values = binary_params(timestamps(&mut rng, n(800)), |t| t.to_be_bytes().to_vec());
    let time_values = binary_params(times(&mut rng, n(400)), |t| t.to_be_bytes().to_vec());
    let mut timetz_values: Vec<Param> = times(&mut rng, n(400))
        .into_iter()
        .map(|t| {
            let mut b = t.to_be_bytes().to_vec();
            b.extend_from_slice(&zone_offsets(&mut rng).to_be_bytes());
            Param::Binary(b)
        })
        .collect();
    timetz_values.push(Param::Null);
    let pool = dates(&mut rng, n(100));
    let date_arrays = arrays(&mut rng, oid::DATE, n(60), |r| pool[r.gen_range(0..pool.len())].to_be_bytes().to_vec());
    let pool = timestamps(&mut rng, n(100));
    let ts_arrays = arrays(&mut rng, oid::TIMESTAMP, n(60), |r| pool[r.gen_range(0..pool.len())].to_be_bytes().to_vec());
    let time_arrays = arrays(&mut rng, oid::TIME, n(40), |r| r.gen_range(0..=USECS_PER_DAY).to_be_bytes().to_vec());
    for style in DATE_STYLES {
        s.set_reported("DateStyle", &format!("'{style}'"));
        s.check(&format!("date, {style}"), "SELECT $1", oid::DATE, &date_values);
        s.check(&format!("timestamp, {style}"), "SELECT $1", oid::TIMESTAMP, &ts_values);
        s.check(&format!("time, {style}"), "SELECT $1", oid::TIME, &time_values);
        s.check(&format!("timetz, {style}"), "SELECT $1", oid::TIMETZ, &timetz_values);
        s.check(&format!("date[], {style}"), "SELECT $1", 1182, &date_arrays);
        s.check(&format!("timestamp[], {style}"), "SELECT $1", 1115, &ts_arrays);
        s.check(&format!("time[], {style}"), "SELECT $1", 1183, &time_arrays);
    }
    // Typmods round the fraction on the server.
    s.check("timestamp(2)", "SELECT $1::timestamp(2)", oid::TIMESTAMP, &ts_values);
    s.check("time(3)", "SELECT $1::time(3)", oid::TIME, &time_values);
}

/// Every TimeZone form `FixedZone` accepts, as SET syntax.
const FIXED_ZONES: [&str; 13] = [
    "'UTC'",
    "'Etc/UTC'",
    "'GMT'",
    "'Etc/GMT+5'",
    "'Etc/GMT-14'",
    "2",
    "-3.5",
    "INTERVAL '+05:45' HOUR TO MINUTE",
    "'+02:00'",
    "'UTC+5'",
    "'<ABCDEFGHIJKL>3'",
    "'<+0530>-05:30'",
    "'<>-1'",
];

#[test]
fn timestamptz_in_fixed_zones_under_every_date_style() {
    let mut s = Session::new();
    let mut rng = rng(7);
    let values = binary_params(timestamps(&mut rng, n(250)), |t| t.to_be_bytes().to_vec());
    let pool = timestamps(&mut rng, n(50));
    let tz_arrays = arrays(&mut rng, oid::TIMESTAMPTZ, n(20), |r| pool[r.gen_range(0..pool.len())].to_be_bytes().to_vec());
    for zone in FIXED_ZONES {
        s.simple(&format!("SET TIME ZONE {zone}"));
        for style in DATE_STYLES {
            s.set_reported("DateStyle", &format!("'{style}'"));
            s.check(&format!("timestamptz, {zone}, {style}"), "SELECT $1", oid::TIMESTAMPTZ, &values);
            s.check(&format!("timestamptz[], {zone}, {style}"), "SELECT $1", 1185, &tz_arrays);
        }
        s.check(&format!("timestamptz(1), {zone}"), "SELECT $1::timestamptz(1)", oid::TIMESTAMPTZ, &values);
    }
    // Zones with a history of offsets (or DST) are never transcoded.
    for zone in ["'Europe/Berlin'", "'America/New_York'", "'EST'", "'EST5EDT'", "'Asia/Kolkata'"] {
        s.simple(&format!("SET TIME ZONE {zone}"));
        assert!(transcoder_for(oid::TIMESTAMPTZ, &s.settings).is_none(), "{zone}");
        assert!(transcoder_for(1185, &s.settings).is_none(), "{zone}");
        assert!(transcoder_for(oid::TIMESTAMP, &s.settings).is_some(), "{zone}");
    }
}

#[test]
fn intervals_under_every_interval_style() {
    let mut s = Session::new();
    let mut rng = rng(8);
    let values = binary_params(intervals(&mut rng, n(1000)), interval_binary);
    let pool = intervals(&mut rng, n(100));
    let interval_arrays = arrays(&mut rng, oid::INTERVAL, n(60), |r| interval_binary(pool[r.gen_range(0..pool.len())]));
    for style in ["postgres", "postgres_verbose", "sql_standard", "iso_8601"] {
        s.set_reported("IntervalStyle", style);
        s.check(&format!("interval, {style}"), "SELECT $1", oid::INTERVAL, &values);
        s.check(&format!("interval[], {style}"), "SELECT $1", 1187, &interval_arrays);
    }
}

#[test]
fn inet_and_cidr() {
    let mut s = Session::new();
    let mut rng = rng(9);
    s.check("inet", "SELECT $1", oid::INET, &binary_params(inets(&mut rng, n(600), false), |b| b));
    s.check("cidr", "SELECT $1", oid::CIDR, &binary_params(inets(&mut rng, n(600), true), |b| b));
    let pool = inets(&mut rng, n(50), false);
    s.check("inet[]", "SELECT $1", 1041, &arrays(&mut rng, oid::INET, n(50), |r| pool[r.gen_range(0..pool.len())].clone()));
    let pool = inets(&mut rng, n(50), true);
    s.check("cidr[]", "SELECT $1", 651, &arrays(&mut rng, oid::CIDR, n(50), |r| pool[r.gen_range(0..pool.len())].clone()));
}
