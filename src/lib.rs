//! pglane: a thread-per-core PostgreSQL connection pooler.
//!
//! The binary (`src/main.rs`) parses the command line and hands a [`config::Config`]
//! to [`runtime::run`], which starts one shard per core. Each module owns one
//! concept; its top comment says what it owns and what it must never do.
//!
//! # Layout
//!
//! From the bottom up (docs/architecture.md draws the path of a query through them):
//!
//! - [`rt`]: the runtime under the shards: one single-threaded executor per core
//!   on an io_uring of its own, timers, sockets, a blocking thread; knows nothing
//!   of PostgreSQL.
//! - [`memory`]: large buffers a shard let go of, given back to the system.
//! - [`process_files`]: the pidfile and the logfile pglane keeps as a process.
//! - [`net`]: the socket a session sees, TCP or unix, plain or TLS (rustls).
//! - [`protocol`]: the wire protocol as small pure encode/decode functions, and
//!   the frame scanner; no sockets, no state.
//! - [`auth`]: md5 and SCRAM-SHA-256 on both sides, stored secrets, mock
//!   secrets for users who cannot log in, pg_hba.conf rules; pure.
//! - [`config`]: the TOML model, its defaults and validation, and the
//!   pgbouncer.ini import; never opens a socket.
//! - [`settings`]: session settings: what a client has set, what a server
//!   connection has, and the SETs that make the second the first.
//! - [`formats`]: binary → text transcoders with PostgreSQL's exact output.
//! - [`prepare`]: the shard's statement registry, the auto-prepare lexer, the
//!   pg_query shape validator and the shape cache; never blocks, never locks.
//! - [`server`]: one server connection: login, reset, rollback, cancel.
//! - [`pool`]: a shard's pool per (database, user): idle list, limits, wait
//!   queue, and server pipelining's hand-over of a lent connection.
//! - [`client`]: one client session: startup, login, the relay, the message
//!   exchange with the server connection it holds, pinning, binary
//!   negotiation, auto-prepare's validator.
//! - [`notify`]: the notification hub: transaction-mode clients' LISTEN
//!   subscriptions per shard, one listening server connection per (database,
//!   user), notifications fanned out to clients' mailboxes; never touches a
//!   client's socket.
//! - [`router`]: read routing: which server a transaction goes to (the
//!   primary or a standby that has replayed the client's last write), the
//!   replay positions per standby, and the request classification.
//! - [`admin`]: the admin console (PgBouncer's SHOW and commands) and the
//!   metrics endpoint; off the query path.
//! - [`runtime`]: the shards themselves: threads, listeners, client registry,
//!   messages between shards (cancels, admin questions, shutdown).

pub mod admin;
pub mod auth;
pub mod client;
pub mod config;
pub mod formats;
pub mod logging;
pub mod memory;
pub mod net;
pub mod notify;
pub mod pool;
pub mod prepare;
pub mod process_files;
pub mod protocol;
pub mod router;
pub mod rt;
pub mod runtime;
pub mod server;
pub mod settings;
