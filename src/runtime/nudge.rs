//! Waking shards from plain threads, so that no shard keeps a timer armed.
//!
//! Shards have chores that do not come from their own sockets: a signal set
//! the shutdown flag or stored a new config, server connections outlived
//! `server_idle_timeout`, a client waited longer than `query_wait_timeout`.
//! The obvious way, a glommio timer per chore, is expensive here: every time
//! an executor with a timer pending parks, glommio arms an io_uring timeout
//! for it and cancels it on waking. Measured with pgbench -S (8 clients, one
//! shard): a 250 ms polling timer alone raised io_uring_enter calls from 3.7
//! to 5.7 per transaction and pglane's CPU from 28 to 35 µs per transaction.
//!
//! So each shard waits for I/O instead: its end of a socket pair becomes
//! readable when a plain thread writes a byte to the other end. The signal
//! handler thread writes at once (shutdown, reload); a ticker thread writes
//! every [`TICK`] for the periodic chores. The bytes carry no meaning: a
//! shard woken for any reason looks at everything.
//!
//! This module owns the socket pairs and the ticker; what a shard does when
//! nudged is [`super::Shard::housekeeping`].

use std::io::{self, Write};
use std::os::unix::net::UnixStream;
use std::sync::{Mutex, Weak};
use std::time::Duration;

/// How often the ticker nudges every shard: the precision of
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

/// Starts the ticker thread: nudges all shards every [`TICK`] until `stop`
/// says so or `nudges` is dropped.
pub fn start_ticker(nudges: Weak<Nudges>, stop: impl Fn() -> bool + Send + 'static) -> io::Result<()> {
    std::thread::Builder::new().name("pglane-ticker".into()).spawn(move || loop {
        std::thread::sleep(TICK);
        let Some(nudges) = nudges.upgrade() else { return };
        nudges.nudge_all();
        if stop() {
            return;
        }
    })?;
    Ok(())
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
