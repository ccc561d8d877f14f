//! Waking shards from plain threads.
//!
//! Shards have chores that do not come from their own sockets: a signal set
//! the shutdown flag or stored a new config (the signal thread's doing), and
//! periodic ones: server connections outlived `server_idle_timeout`, a client
//! waited longer than `query_wait_timeout`. The periodic ones are a timer of
//! the shard's own, every [`TICK`] (on `crate::rt` a timer adds no syscall: it
//! is the timeout of a wait the loop does anyway). For the others, each shard
//! also waits on its end of a socket pair, which becomes readable when a
//! plain thread writes a byte to the other end. The bytes carry no meaning:
//! a shard woken for any reason looks at everything.
//!
//! (On glommio a pending timer made every park arm and cancel an io_uring
//! timeout, so a ticker thread nudged the shards instead; measured then, a
//! 250 ms timer cost 7 µs of CPU per transaction at 8 clients.)
//!
//! This module owns the socket pairs; what a shard does when nudged is
//! [`super::Shard::housekeeping`].

use std::io::{self, Write};
use std::os::unix::net::UnixStream;
use std::sync::Mutex;
use std::time::Duration;

/// How often a shard does its periodic chores: the precision of
/// `query_wait_timeout`, `server_idle_timeout` and `server_lifetime`.
pub const TICK: Duration = Duration::from_millis(250);

/// The writing ends, one per shard.
#[derive(Default)]
pub struct Nudges {
    writers: Mutex<Vec<UnixStream>>,
}

impl Nudges {
    /// A new pair: the writer is kept here, the reader goes to a shard.
    pub fn add(&self) -> io::Result<UnixStream> {
        let (reader, writer) = UnixStream::pair()?;
        reader.set_nonblocking(true)?;
        // A full buffer means the shard has nudges it has not read yet:
        // another one would add nothing, so never block for it.
        writer.set_nonblocking(true)?;
        self.writers.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).push(writer);
        Ok(reader)
    }

    /// Wakes every shard.
    pub fn nudge_all(&self) {
        let mut writers = self.writers.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        for writer in writers.iter_mut() {
            // WouldBlock: already nudged. Other errors: that shard is gone.
            let _ = writer.write(&[1]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    #[test]
    fn a_nudge_makes_the_reader_readable_and_never_blocks_the_writer() {
        let nudges = Nudges::default();
        let mut reader = nudges.add().unwrap();
        let mut buf = [0u8; 16];
        assert_eq!(reader.read(&mut buf).unwrap_err().kind(), io::ErrorKind::WouldBlock);
        nudges.nudge_all();
        assert_eq!(reader.read(&mut buf).unwrap(), 1);
        // Far more nudges than the socket buffer holds: none blocks.
        for _ in 0..10_000 {
            nudges.nudge_all();
        }
        assert!(reader.read(&mut buf).unwrap() > 0);
    }
}
