//! Criterion benchmarks of auto-prepare's hot path and, for scale, its miss
//! path and the full parse PgDog paid per query (seed 001).
//!
//! `cargo bench --bench lexer`; figures in bench/RESULTS.md. The lexer and
//! hit groups run twice: in wall-clock time, and as `cpu/…` in the thread's
//! CPU time, which other processes on a shared machine do not inflate.

use std::collections::HashMap;
use std::hint::black_box;

use bytes::BytesMut;
use criterion::measurement::{Measurement, ValueFormatter};
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use pglane::prepare::lexer::{LexOptions, Lexed};
use pglane::prepare::shape;
use pglane::protocol::frontend;

/// pgbench -S.
const SELECT_ONLY: &str = "SELECT abalance FROM pgbench_accounts WHERE aid = 12345;";

/// A parser-heavy query: a 5-way join with 8 literals.
const JOIN: &str = "SELECT a.aid, a.abalance, b.bbalance, t.tbalance, h.delta, c.name \
    FROM pgbench_accounts a \
    JOIN pgbench_branches b ON b.bid = a.bid \
    JOIN pgbench_tellers t ON t.bid = b.bid AND t.tid <= 100 \
    JOIN pgbench_history h ON h.aid = a.aid AND h.mtime > '2024-01-01 00:00:00' \
    LEFT JOIN customers c ON c.id = a.aid AND c.status = 'active' \
    WHERE a.aid BETWEEN 1000 AND 2000 AND b.bid = 1 AND a.abalance > -500 \
    ORDER BY h.mtime DESC, 1 LIMIT 50";

fn queries() -> [(&'static str, &'static str); 2] {
    [("select_only", SELECT_ONLY), ("join5_8_literals", JOIN)]
}

/// Lexing alone: shape hash, slots, values.
fn lex(c: &mut Criterion) {
    lex_in(c, "lex");
}

fn lex_in<M: Measurement>(c: &mut Criterion<M>, group_name: &str) {
    let mut group = c.benchmark_group(group_name);
    for (name, sql) in queries() {
        let mut lexed = Lexed::new();
        lexed.lex(sql, LexOptions::default()).expect("lexes");
        group.bench_function(name, |b| {
            b.iter(|| {
                lexed.lex(black_box(sql), LexOptions::default()).expect("lexes");
                black_box(lexed.shape_hash())
            })
        });
    }
    group.finish();
}

/// What a hit costs the relay: lex, find the shape, encode Bind + Execute.
fn hot_path(c: &mut Criterion) {
    hot_path_in(c, "hit");
}

fn hot_path_in<M: Measurement>(c: &mut Criterion<M>, group_name: &str) {
    let mut group = c.benchmark_group(group_name);
    for (name, sql) in queries() {
        let mut lexed = Lexed::new();
        lexed.lex(sql, LexOptions::default()).expect("lexes");
        // A shard's shape cache with a few hundred other shapes in it.
        let mut shapes: HashMap<u64, String> =
            (0..500u64).map(|i| (i.wrapping_mul(0x9e37_79b9_7f4a_7c15), format!("pglane_0_{i}"))).collect();
        shapes.insert(lexed.shape_hash(), "pglane_0_1000".to_owned());
        let mut out = BytesMut::with_capacity(1024);
        group.bench_function(name, |b| {
            b.iter(|| {
                out.clear();
                lexed.lex(black_box(sql), LexOptions::default()).expect("lexes");
                let statement = shapes.get(&lexed.shape_hash()).expect("a hit");
                frontend::bind(&mut out, "", statement, &[], lexed.params(), &[]);
                frontend::execute(&mut out, "", 0);
                frontend::sync(&mut out);
                black_box(out.len())
            })
        });
    }
    group.finish();
}

/// The miss path, once per shape per shard, and what a full parse per query
/// would cost instead.
fn miss_path(c: &mut Criterion) {
    let mut group = c.benchmark_group("miss");
    group.sample_size(30);
    for (name, sql) in queries() {
        let mut lexed = Lexed::new();
        lexed.lex(sql, LexOptions::default()).expect("lexes");
        group.bench_function(format!("validate/{name}"), |b| b.iter(|| black_box(shape::validate(black_box(sql), &lexed))));
        group.bench_function(format!("pg_query_parse/{name}"), |b| b.iter(|| black_box(pg_query::parse(black_box(sql)).is_ok())));
        group.bench_function(format!("pg_query_normalize/{name}"), |b| {
            b.iter(|| black_box(pg_query::normalize(black_box(sql)).is_ok()))
        });
    }
    group.finish();
}

/// The calling thread's CPU time (`CLOCK_THREAD_CPUTIME_ID`), in ns: time
/// the thread was not running (another process had the core) is not counted.
struct ThreadCpuTime;

fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes the timespec it is given.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

impl Measurement for ThreadCpuTime {
    type Intermediate = u64;
    type Value = u64;

    fn start(&self) -> u64 {
        thread_cpu_ns()
    }
    fn end(&self, started: u64) -> u64 {
        thread_cpu_ns().saturating_sub(started)
    }
    fn add(&self, a: &u64, b: &u64) -> u64 {
        a + b
    }
    fn zero(&self) -> u64 {
        0
    }
    fn to_f64(&self, value: &u64) -> f64 {
        *value as f64
    }
    fn formatter(&self) -> &dyn ValueFormatter {
        &Nanoseconds
    }
}

/// Formats CPU nanoseconds as criterion formats wall-clock ones.
struct Nanoseconds;

impl ValueFormatter for Nanoseconds {
    fn scale_values(&self, ns: f64, values: &mut [f64]) -> &'static str {
        let (factor, unit) = if ns < 1e3 {
            (1.0, "ns")
        } else if ns < 1e6 {
            (1e-3, "µs")
        } else {
            (1e-6, "ms")
        };
        values.iter_mut().for_each(|v| *v *= factor);
        unit
    }
    fn scale_throughputs(&self, _typical: f64, _throughput: &Throughput, _values: &mut [f64]) -> &'static str {
        "(n/a)"
    }
    fn scale_for_machines(&self, _values: &mut [f64]) -> &'static str {
        "ns"
    }
}

fn cpu_lex(c: &mut Criterion<ThreadCpuTime>) {
    lex_in(c, "cpu/lex");
}

fn cpu_hot_path(c: &mut Criterion<ThreadCpuTime>) {
    hot_path_in(c, "cpu/hit");
}

criterion_group!(benches, lex, hot_path, miss_path);
criterion_group! {
    name = cpu;
    config = Criterion::default().with_measurement(ThreadCpuTime);
    targets = cpu_lex, cpu_hot_path
}
criterion_main!(benches, cpu);
