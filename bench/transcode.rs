//! Binary → text transcoding cost per value (`src/formats`), the CPU pglane
//! spends so that PostgreSQL can skip its output functions.
//!
//! `cargo bench --bench transcode`; figures in bench/RESULTS.md. Each
//! iteration transcodes 1,000 realistic values of one type into a reused
//! buffer, so criterion's time per iteration / 1,000 is the cost per value.

use std::hint::black_box;

use bytes::BytesMut;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use pglane::formats::{oid, transcoder_for, TextSettings};

const VALUES: usize = 1000;

/// xorshift64*: deterministic values without a dependency.
struct Random(u64);

impl Random {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// numeric_send's layout for `digits` (decimal, no sign) with `scale`
/// fraction digits.
fn numeric_binary(negative: bool, digits: &str, scale: usize) -> Vec<u8> {
    let (int, frac) = digits.split_at(digits.len() - scale);
    // Pad both parts to whole base-10000 groups around the point.
    let int = format!("{}{int}", "0".repeat((4 - int.len() % 4) % 4));
    let frac = format!("{frac}{}", "0".repeat((4 - frac.len() % 4) % 4));
    let groups: Vec<u16> =
        format!("{int}{frac}").as_bytes().chunks(4).map(|g| std::str::from_utf8(g).unwrap().parse().unwrap()).collect();
    let weight = (int.len() / 4) as i16 - 1;
    // Strip leading and trailing zero groups, as PostgreSQL stores them.
    let first = groups.iter().position(|&g| g != 0).unwrap_or(groups.len());
    let last = groups.iter().rposition(|&g| g != 0).map_or(first, |l| l + 1);
    let mut b = Vec::new();
    for field in [(last - first) as u16, (weight - first as i16) as u16, if negative { 0x4000 } else { 0 }, scale as u16] {
        b.extend_from_slice(&field.to_be_bytes());
    }
    for g in &groups[first..last] {
        b.extend_from_slice(&g.to_be_bytes());
    }
    b
}

fn cases() -> Vec<(&'static str, u32, Vec<Vec<u8>>)> {
    let mut r = Random(0x9e37_79b9_7f4a_7c15);
    let uuid = (0..VALUES).map(|_| [r.next().to_be_bytes(), r.next().to_be_bytes()].concat()).collect();
    // Ids and counters: mostly 1..10^9, some full-width.
    let int8 = (0..VALUES)
        .map(|_| {
            let v = if r.below(10) == 0 { r.next() as i64 } else { r.below(1_000_000_000) as i64 };
            v.to_be_bytes().to_vec()
        })
        .collect();
    // Prices and quantities: numeric(12,2)-like, some numeric(20,6).
    let numeric = (0..VALUES)
        .map(|_| {
            let (digits, scale): (String, usize) =
                if r.below(4) == 0 { (r.below(10u64.pow(18)).to_string(), 6) } else { (r.below(10_000_000).to_string(), 2) };
            let digits = format!("{}{digits}", "0".repeat((scale + 1).saturating_sub(digits.len())));
            numeric_binary(r.below(10) == 0, &digits, scale)
        })
        .collect();
    // 1970..2040 with microseconds.
    let timestamp = (0..VALUES)
        .map(|_| {
            let micros = -946_684_800_000_000 + r.below(70 * 365 * 86_400_000_000) as i64;
            micros.to_be_bytes().to_vec()
        })
        .collect();
    let float8 = (0..VALUES).map(|_| ((r.below(2_000_000) as f64 - 1e6) / 1000.0).to_be_bytes().to_vec()).collect();
    // The floor: a 36-byte text value, copied as is.
    let text = (0..VALUES).map(|_| vec![b'x'; 36]).collect();
    vec![
        ("text (36 bytes, copy)", oid::TEXT, text),
        ("uuid", oid::UUID, uuid),
        ("int8", oid::INT8, int8),
        ("numeric", oid::NUMERIC, numeric),
        ("timestamp", oid::TIMESTAMP, timestamp),
        ("timestamptz", oid::TIMESTAMPTZ, (0..VALUES).map(|i| (i as i64 * 987_654_321_123).to_be_bytes().to_vec()).collect()),
        ("float8", oid::FLOAT8, float8),
    ]
}

fn transcode(c: &mut Criterion) {
    let mut settings = TextSettings::default();
    for (name, value) in [
        ("DateStyle", "ISO, MDY"),
        ("TimeZone", "UTC"),
        ("integer_datetimes", "on"),
        ("extra_float_digits", "1"),
        ("client_encoding", "UTF8"),
        ("server_encoding", "UTF8"),
    ] {
        settings.apply(name, value);
    }
    let mut group = c.benchmark_group("transcode");
    group.throughput(Throughput::Elements(VALUES as u64));
    for (name, type_oid, values) in cases() {
        let transcoder = transcoder_for(type_oid, &settings).expect("transcodable");
        let mut out = BytesMut::with_capacity(64 * VALUES);
        group.bench_function(name, |b| {
            b.iter(|| {
                out.clear();
                for value in &values {
                    transcoder.write_text(black_box(value), &mut out).expect("valid value");
                }
                black_box(out.len())
            })
        });
    }
    group.finish();
}

criterion_group!(benches, transcode);
criterion_main!(benches);
