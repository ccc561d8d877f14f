//! Prepared statements shared by all clients of a shard.
//!
//! This module owns the bookkeeping that lets named prepared statements work
//! behind a transaction pooler: one server-side statement per distinct
//! (query text, parameter types) in each of a shard's pools (a pool serves
//! one database and user: the same text can mean something else in another
//! database or to another user), each client's own names for
//! them, which statements each server connection has, and auto-prepare's
//! pieces: the SQL lexer (`lexer`, the hot path), the pg_query checks of a
//! new shape (`shape`, the miss path), the pool's shape decisions
//! (`auto`) and the small memos the hot path keeps (`memo`). It is plain shard-local state: it never blocks, never locks and
//! does no I/O (the relay and the validator in `client` act on what it says).

pub mod auto;
mod id_hash;
pub mod lexer;
pub mod memo;
mod registry;
pub mod shape;

pub use registry::{
    ClientStatements, Context, PrepareStats, PreparedCopy, RecentStatements, Registry, RowRecord, ServerStatements, Statement,
    StatementLimit,
};
