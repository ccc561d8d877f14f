//! criterion micro-benchmarks of the codec and the relay's per-message work,
//! without sockets: what one pgbench -S transaction costs pglane in user space.
//!
//!     cargo bench --bench codec

use bytes::BytesMut;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use pglane::client::exchange::{Exchange, Statements};
use pglane::client::settings::Settings;
use pglane::prepare::{ClientStatements, Registry, ServerStatements};
use pglane::protocol::backend::{self, FieldDescription, TransactionStatus};
use pglane::protocol::frame::{split_message, Scanner};
use pglane::protocol::frontend;
use std::hint::black_box;

const SELECT: &str = "SELECT abalance FROM pgbench_accounts WHERE aid = 12345;";

/// The server's reply to pgbench -S: RowDescription, one DataRow, CommandComplete, ReadyForQuery.
fn reply() -> BytesMut {
    let mut out = BytesMut::new();
    backend::row_description(
        &mut out,
        &[FieldDescription { name: "abalance".into(), table_oid: 16_400, column: 3, type_oid: 23, type_size: 4, type_modifier: -1, format: 0 }],
    );
    backend::data_row(&mut out, &[Some(b"-4321")]);
    backend::command_complete(&mut out, "SELECT 1");
    backend::ready_for_query(&mut out, TransactionStatus::Idle);
    out
}

fn codec(c: &mut Criterion) {
    let mut query = BytesMut::new();
    frontend::query(&mut query, SELECT);
    let reply = reply();

    let mut g = c.benchmark_group("codec");
    g.throughput(Throughput::Elements(1));
    g.bench_function("split_message Query", |b| {
        b.iter(|| {
            let mut buf = query.clone();
            black_box(split_message(&mut buf, 1 << 20).unwrap())
        })
    });
    g.bench_function("scan pgbench -S reply", |b| {
        b.iter(|| {
            let mut scanner = Scanner::default();
            black_box(scanner.scan(&reply, 1 << 20, |t| t == b'Z', |_, _| pglane::protocol::frame::Flow::Continue).unwrap())
        })
    });
    g.finish();

    // One whole transaction through the exchange: the client's Query out, the
    // four reply messages back, as the relay does it (copying into output buffers).
    let registry = Registry::new(0, 100);
    let mut client = ClientStatements::new(100);
    let mut server = ServerStatements::new(100);
    let (mut client_settings, mut server_settings) = (Settings::default(), Settings::default());
    let mut exchange = Exchange::default();
    let (mut to_server, mut to_client) = (BytesMut::with_capacity(4096), BytesMut::with_capacity(4096));
    let mut messages = Vec::new();
    let mut r = reply.clone();
    while let Some(m) = split_message(&mut r, 1 << 20).unwrap() {
        let mut whole = vec![m.tag];
        whole.extend_from_slice(&((m.body.len() + 4) as i32).to_be_bytes());
        whole.extend_from_slice(&m.body);
        messages.push((m.tag, whole));
    }
    let mut g = c.benchmark_group("exchange");
    g.throughput(Throughput::Elements(1));
    g.bench_function("pgbench -S transaction (simple protocol)", |b| {
        b.iter(|| {
            let mut st = Statements {
                registry: &registry,
                client: &mut client,
                server: &mut server,
                client_settings: &mut client_settings,
                server_settings: &mut server_settings,
            };
            exchange.from_client(b'Q', &query, &mut st, &mut to_server, &mut to_client);
            for (tag, m) in &messages {
                exchange.from_server(*tag, m, &mut st, &mut to_client);
            }
            assert!(exchange.is_releasable());
            to_server.clear();
            to_client.clear();
        })
    });
    g.finish();
}

criterion_group!(benches, codec);
criterion_main!(benches);
