//! The differential transparency oracle (issue 43; DESIGN.md, "Transparency:
//! the rules"): several simulated clients, each running a random program of
//! statements that create, change or read session state, run concurrently
//! through pglane in transaction mode on a pool of one or two server
//! connections, so server connections change hands all the time. Each
//! program is also run alone on a direct connection to PostgreSQL; every
//! statement's result (rows as text, row counts, SQLSTATE and message,
//! notices) must be the same both ways. A divergence is shrunk to the
//! fewest steps that still show it.
//!
//! This module owns the grammar ([`grammar`], with [`KNOWN_DIVERGENCES`]:
//! the productions left out, and why), the seeded generator ([`rng`]), the
//! runner that records transcripts ([`runner`]), and the comparison and
//! shrinking ([`search`]). The tests are in tests/oracle.rs.
//!
//! Run it long with, e.g.:
//!
//! ```text
//! PGLANE_ORACLE_SEEDS=500 cargo test --release --test oracle -- --nocapture
//! ```
//!
//! Knobs: `PGLANE_ORACLE_SEEDS` (how many seeds), `PGLANE_ORACLE_SEED` (the
//! first: with `PGLANE_ORACLE_SEEDS=1`, reproduces one), `PGLANE_ORACLE_STEPS`
//! (`N` or `LOW-HIGH` steps per program; default 20-60),
//! `PGLANE_ORACLE_ALL=1` (draw the known divergences too, to see whether
//! they are fixed; or `=<Kind>,<Kind>` for some of them), `PGLANE_ORACLE_SHRINK_SECS` (shrinking budget, 120).

pub mod grammar;
pub mod program;
pub mod rng;
pub mod runner;
pub mod search;

#[allow(unused_imports)]
pub use grammar::KNOWN_DIVERGENCES;
