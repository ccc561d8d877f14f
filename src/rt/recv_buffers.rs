//! Receive buffers the kernel picks from: one io_uring buffer ring per
//! reactor (provided buffers, Linux 5.19+).
//!
//! A socket that waits for bytes posts a receive in the ring rather than a
//! readiness poll followed by a `recv(2)`: when the bytes come, the kernel
//! copies them into a buffer it takes from this ring, and the completion
//! names it. The socket copies them out into its reader's buffer and gives
//! the buffer back. A receive holds no buffer while it waits, so a shard's
//! thousand idle clients cost it nothing here; only bytes received and not
//! yet read do. When every buffer is taken the receive completes
//! `ENOBUFS`, which says only that bytes are there: the socket then reads
//! them with a plain `recv(2)`, as before.
//!
//! Why by hand: io-uring has the register call and the entry type, not the
//! ring's bookkeeping (the tail the kernel reads, the entries it wraps
//! over), and tokio-uring's and glommio's buffer rings belong to their
//! runtimes. It is an array, a tail, and one release store.
//!
//! What it must not do: hand a buffer to two readers. A buffer is either in
//! the ring, or in exactly one completion, or in exactly one socket's
//! [`Received`], until that socket gives it back.

use std::io;
use std::sync::atomic::{AtomicU16, Ordering};

use io_uring::types::BufRingEntry;
use io_uring::IoUring;

/// Buffers in the ring (a power of two). A buffer is out of the ring only
/// from its receive's completion until its socket's task reads it, in the
/// same turn as a rule: more than this many at once and the rest read with
/// `recv`.
pub(super) const COUNT: u16 = 64;
/// Bytes in each: a request or a reply of a transaction usually fits one,
/// and so does the client inbox's first buffer (`client::inbox::INITIAL`);
/// a longer one is read on with `recv` after the first buffer, full, said
/// that more may be there. The kernel fills the buffers in turn, so all of
/// them are soon resident: 256 KiB a shard. (A length in one fits a u16.)
pub const SIZE: usize = 4 * 1024;
const _: () = assert!(SIZE <= u16::MAX as usize);
/// The ring's buffer group id.
pub const GROUP: u16 = 0;

/// Bytes the kernel received into one of the ring's buffers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Received {
    pub buffer: u16,
    /// At most [`SIZE`].
    pub len: u16,
}

pub struct RecvBuffers {
    /// The ring the kernel takes buffers from: COUNT entries, page-aligned.
    entries: *mut BufRingEntry,
    /// COUNT buffers of SIZE bytes, one block.
    memory: *mut u8,
    /// Where the next given-back buffer goes (the kernel reads it).
    tail: u16,
}

impl RecvBuffers {
    /// Maps the ring and its buffers and registers them with `ring`; an
    /// error if the kernel has no buffer rings (before 5.19).
    ///
    /// The memory is never unmapped: a receive still in the kernel when the
    /// ring is torn down may yet write to it (as the eventfd buffer, see
    /// `Reactor`). Pages no receive touched stay unbacked.
    pub fn register(ring: &IoUring) -> io::Result<RecvBuffers> {
        let ring_bytes = usize::from(COUNT) * std::mem::size_of::<BufRingEntry>();
        let entries = map(ring_bytes)?.cast::<BufRingEntry>();
        let memory = map(usize::from(COUNT) * SIZE)?;
        // SAFETY: `entries` is COUNT zeroed, page-aligned entries that are
        // never unmapped.
        unsafe { ring.submitter().register_buf_ring_with_flags(entries as u64, COUNT, GROUP, 0)? };
        let mut buffers = RecvBuffers { entries, memory, tail: 0 };
        for buffer in 0..COUNT {
            buffers.put(buffer);
        }
        buffers.publish();
        Ok(buffers)
    }

    /// The bytes of `received`.
    pub fn bytes(&self, received: Received) -> &[u8] {
        let len = (received.len as usize).min(SIZE);
        // SAFETY: the buffer is ours (out of the ring) until given back, and
        // the kernel wrote `len` bytes into it.
        unsafe { std::slice::from_raw_parts(self.memory.add(usize::from(received.buffer) * SIZE), len) }
    }

    /// Puts a buffer back in the ring for the kernel to take again.
    pub fn give_back(&mut self, buffer: u16) {
        self.put(buffer);
        self.publish();
    }

    fn put(&mut self, buffer: u16) {
        debug_assert!(buffer < COUNT);
        let index = usize::from(self.tail & (COUNT - 1));
        // SAFETY: `index` < COUNT; the kernel reads entries only below the
        // published tail, and this one is past it.
        let entry = unsafe { &mut *self.entries.add(index) };
        // SAFETY: `buffer` < COUNT, inside `memory`.
        entry.set_addr(unsafe { self.memory.add(usize::from(buffer) * SIZE) } as u64);
        entry.set_len(SIZE as u32);
        entry.set_bid(buffer);
        self.tail = self.tail.wrapping_add(1);
    }

    /// Lets the kernel see the entries put so far.
    fn publish(&self) {
        // SAFETY: the tail field of the ring's first entry, 2-byte aligned,
        // written by us and read by the kernel.
        let tail = unsafe { &*BufRingEntry::tail(self.entries).cast::<AtomicU16>() };
        tail.store(self.tail, Ordering::Release);
    }
}

/// Anonymous, zeroed, page-aligned memory of `len` bytes.
fn map(len: usize) -> io::Result<*mut u8> {
    // SAFETY: a new private anonymous mapping; no existing memory is touched.
    let p = unsafe {
        libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1, 0)
    };
    if p == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    Ok(p.cast())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_buffer_starts_in_the_ring_and_goes_back_where_the_tail_is() {
        let ring = IoUring::new(8).unwrap();
        let mut buffers = RecvBuffers::register(&ring).unwrap();
        assert_eq!(buffers.tail, COUNT);
        // SAFETY: reading entries we wrote.
        let entry = |i: usize| unsafe { &*buffers.entries.add(i) };
        for i in 0..usize::from(COUNT) {
            assert_eq!(entry(i).bid(), i as u16);
            assert_eq!(entry(i).len(), SIZE as u32);
        }
        buffers.give_back(5);
        assert_eq!(buffers.tail, COUNT + 1);
        // SAFETY: as above.
        let first = unsafe { &*buffers.entries };
        assert_eq!(first.bid(), 5, "the ring wraps: the first entry holds the buffer given back");
        assert_eq!(buffers.bytes(Received { buffer: 1, len: 3 }), &[0, 0, 0]);
    }
}
