//! Memory a shard let go of, given back to the system.
//!
//! pglane's allocator is mimalloc (`main.rs`). It returns freed pages to the
//! system ("purges" them) only a little after they are freed, and only when
//! the thread that freed them allocates or frees again. A shard that let go
//! of a large buffer (a client's 60 MiB query held whole, or its literal
//! values lexed by auto-prepare) and then went quiet kept those pages for
//! as long as it stayed quiet: the process's RSS stayed hundreds of MB above
//! where it was before that client came (issue 43). So whoever lets go of a
//! large buffer says so ([`let_go_of_a_large_buffer`]), and the shard's
//! housekeeping, a few times a second, asks mimalloc to purge what this
//! thread freed ([`give_back_if_let_go`]). Per thread: a shard is one.
//!
//! Not on the query path: a session lets go of a large buffer when its
//! transaction or its life ends, and the purge runs on the next tick. Harmless
//! where mimalloc is not the global allocator (the library's tests): its own
//! heap is then empty. Written here because mimalloc's safe wrapper does not
//! expose `mi_collect`; the call is its sys crate's.

use std::cell::Cell;

/// A buffer larger than this, let go, is worth giving back.
pub const LARGE_BUFFER: usize = 1 << 20;

thread_local! {
    static LET_GO: Cell<bool> = const { Cell::new(false) };
}

/// This thread let go of a buffer of `bytes` (counted if it is large).
pub fn let_go_of_a_buffer(bytes: usize) {
    if bytes > LARGE_BUFFER {
        let_go_of_a_large_buffer();
    }
}

/// This thread let go of a large buffer: its pages go back at the next
/// [`give_back_if_let_go`].
pub fn let_go_of_a_large_buffer() {
    LET_GO.with(|l| l.set(true));
}

/// Gives back to the system what this thread's allocator keeps of the
/// memory it freed, if it let go of a large buffer since the last call.
pub fn give_back_if_let_go() {
    if LET_GO.with(|l| l.replace(false)) {
        // SAFETY: mi_collect has no preconditions; `force` makes it purge
        // the freed pages now rather than after mimalloc's delay.
        unsafe { libmimalloc_sys::mi_collect(true) };
    }
}
