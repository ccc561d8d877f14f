//! pglane: a thread-per-core PostgreSQL connection pooler.
//!
//! The binary (`src/main.rs`) parses the command line and hands a [`config::Config`]
//! to [`runtime::run`], which starts one shard per core. Each module owns one
//! concept; its top comment says what it owns and what it must never do.

pub mod admin;
pub mod auth;
pub mod client;
pub mod config;
pub mod formats;
pub mod net;
pub mod pool;
pub mod prepare;
pub mod protocol;
pub mod rt;
pub mod runtime;
pub mod server;
pub mod settings;
