//! Prepared statements shared by all clients of a shard.
//!
//! This module owns the bookkeeping that lets named prepared statements work
//! behind a transaction pooler: one server-side statement per distinct
//! (query text, parameter types) in the shard, each client's own names for
//! them, and which statements each server connection has. It is plain
//! shard-local state: it never blocks, never locks and does no I/O (the relay
//! in `client` acts on what it says).

pub mod lexer;
mod registry;
pub mod shape;

pub use registry::{ClientStatements, PrepareStats, Registry, ServerStatements, Statement, StatementLimit};
