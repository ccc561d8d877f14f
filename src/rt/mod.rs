//! pglane's runtime: one single-threaded executor per core, driven by an
//! io_uring of its own.
//!
//! Why hand-written. pglane started on glommio, and its CPU per transaction
//! was twice PgBouncer's. The profile (bench/history/2026-11-30.md, "Hot I/O path") put
//! that in glommio 0.9's executor, not in pglane: each turn of its loop
//! re-arms preemption timers (several `io_uring_enter` calls), each park does
//! a membarrier and links two rings, and every read is a readiness poll plus
//! a recv. glommio has no hook to drive the sockets from another ring on the
//! same thread, since its executor owns the thread's only blocking point. A
//! byte relay on monoio, measured in the same run, cost 1.5x the floor at 8
//! clients. So pglane owns the loop; everything it needs fits here:
//!
//! - [`executor`]: tasks (async-task), a local run queue, and a queue other
//!   threads push wake-ups into, with an eventfd to interrupt a parked loop;
//! - [`reactor`]: the ring (SINGLE_ISSUER, DEFER_TASKRUN), receives and
//!   readiness polls, sends queued for the end of the turn, timers kept in
//!   user space (the nearest armed on the ring), and one `io_uring_enter`
//!   per turn that both submits and waits;
//! - [`time`]: the clock as the loop reads it once per turn ([`Stamp`]), and
//!   timers;
//! - [`recv_buffers`]: the buffer ring receives put their bytes in;
//! - [`spin`]: whether a loop about to sleep spins first, and for how long;
//! - [`net`]: a socket that reads with plain non-blocking syscalls while
//!   the kernel has bytes for it, then waits in the ring for the next ones
//!   to come with a receive's completion;
//! - [`blocking`]: a thread per executor for CPU-heavy work off the loop.
//!
//! What this module must not do: know anything about PostgreSQL or pglane's
//! shards. It is a small, general runtime; `crate::runtime` builds the
//! shards on it.

pub mod blocking;
pub mod executor;
pub mod net;
pub mod reactor;
pub mod recv_buffers;
pub mod spin;
pub mod time;

pub use blocking::spawn_blocking;
pub use executor::{block_on, spawn_local, spin_before_park, start_pinned, Task};
pub use time::{now, sleep, stamp, with_timeout, Stamp, Timer};
