//! criterion micro-benchmarks of the codec and the relay's per-message work,
//! without sockets: what one pgbench -S transaction costs pglane in user space.
//!
//!     cargo bench --bench codec

use bytes::BytesMut;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use pglane::client::exchange::{Exchange, Statements};
use pglane::prepare::auto::{Decision, Job};
use pglane::prepare::lexer::{LexOptions, Lexed};
use pglane::prepare::{ClientStatements, Context, Registry, ServerStatements};
use pglane::protocol::backend::{self, FieldDescription, TransactionStatus};
use pglane::protocol::frame::HEADER_LEN;
use pglane::protocol::frame::{split_message, Scanner};
use pglane::protocol::frontend;
use pglane::protocol::names;
use pglane::settings::Settings;
use std::hint::black_box;
use std::task::{Poll, Waker};

const SELECT: &str = "SELECT abalance FROM pgbench_accounts WHERE aid = 12345;";

/// The server's reply to pgbench -S: RowDescription, one DataRow, CommandComplete, ReadyForQuery.
fn reply() -> BytesMut {
    let mut out = BytesMut::new();
    backend::row_description(
        &mut out,
        &[FieldDescription {
            name: "abalance".into(),
            table_oid: 16_400,
            column: 3,
            type_oid: 23,
            type_size: 4,
            type_modifier: -1,
            format: 0,
        }],
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
                negotiation: None,
            };
            exchange.from_client(b'Q', &query, &mut st, &mut to_server);
            exchange.client_messages_taken(&mut to_client);
            for (tag, m) in &messages {
                exchange.from_server(*tag, m, &mut st, &mut to_client);
            }
            assert!(exchange.is_releasable());
            to_server.clear();
            to_client.clear();
        })
    });

    // The same transaction with auto-prepare on and the shape validated: the
    // Query is lexed, looked up and sent as Bind/Describe/Execute/Sync; the
    // reply comes back with BindComplete, which the client never sees.
    let registry = Registry::new(0, 100);
    validate(&registry, SELECT);
    let mut exchange = Exchange::new(Some(1));
    let mut prepared_reply = BytesMut::new();
    backend::bind_complete(&mut prepared_reply);
    prepared_reply.extend_from_slice(&reply);
    let mut prepared_messages = Vec::new();
    let mut r = prepared_reply;
    while let Some(m) = split_message(&mut r, 1 << 20).unwrap() {
        let mut whole = vec![m.tag];
        whole.extend_from_slice(&((m.body.len() + 4) as i32).to_be_bytes());
        whole.extend_from_slice(&m.body);
        prepared_messages.push((m.tag, whole));
    }
    // A fresh server connection: the first run also sends the Parse, whose
    // ParseComplete is fed back once.
    server = ServerStatements::new(100);
    let mut first = true;
    g.bench_function("pgbench -S transaction (simple protocol, auto-prepared)", |b| {
        b.iter(|| {
            let mut st = Statements {
                registry: &registry,
                client: &mut client,
                server: &mut server,
                client_settings: &mut client_settings,
                server_settings: &mut server_settings,
                negotiation: None,
            };
            exchange.from_client(b'Q', &query, &mut st, &mut to_server);
            exchange.client_messages_taken(&mut to_client);
            if std::mem::take(&mut first) {
                let mut parse_complete = BytesMut::new();
                backend::parse_complete(&mut parse_complete);
                exchange.from_server(b'1', &parse_complete, &mut st, &mut to_client);
            }
            for (tag, m) in &prepared_messages {
                exchange.from_server(*tag, m, &mut st, &mut to_client);
            }
            assert!(exchange.is_releasable());
            to_server.clear();
            to_client.clear();
        })
    });
    assert!(registry.stats().rewrites > 0, "the benchmark ran rewritten queries");
    g.finish();
}

/// Marks `sql`'s shape validated in `registry`, as the validator would
/// (its hash keyed as the exchange keys its own).
fn validate(registry: &Registry, sql: &str) {
    let mut lexed = Lexed::for_this_shard();
    lexed.lex(sql, LexOptions::default()).unwrap();
    let rewritten = lexed.rewritten(sql);
    let (hash, types) = (lexed.shape_hash(), lexed.param_types());
    let job = |epoch| Job {
        context: Context::DEFAULT,
        settings: Settings::default(),
        hash,
        sql: rewritten.as_str().into(),
        param_types: types.into(),
        original: sql.into(),
        options: LexOptions::default(),
        epoch,
    };
    registry.shapes.note(Context::DEFAULT, job, hash, &rewritten, types, 1);
    let Poll::Ready(job) = registry.shapes.poll_job(&mut std::task::Context::from_waker(Waker::noop())) else { panic!("queued") };
    let mut parse = BytesMut::new();
    frontend::parse(&mut parse, "", &rewritten, types);
    let (_, key) = names::split_parse(&parse[HEADER_LEN..]).unwrap();
    let statement = registry.register(Context::DEFAULT, key);
    statement.validated.set(true);
    assert!(registry.shapes.decide(&job, Decision::Rewrite(statement)));
}

criterion_group!(benches, codec);
criterion_main!(benches);
