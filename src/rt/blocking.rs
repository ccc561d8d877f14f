//! Work that would stall the loop, run on a thread beside it.
//!
//! Each executor gets one such thread, started on first use and pinned to
//! the same CPUs as the executor's: the work competes with its own shard
//! only, never with other cores' shards. Its result comes back as a wake-up
//! from another thread (see [`super::executor`]).

use std::sync::mpsc;

use async_task::Runnable;

use super::executor::{with_local, Task};

/// Runs `f` on this executor's blocking thread; the task completes with its
/// result. Panics outside an executor thread, or if the thread cannot be
/// started (out of resources: nothing sensible to do but stop).
pub fn spawn_blocking<F, R>(f: F) -> Task<R>
where
    F: FnOnce() -> R + Send + 'static,
    R: Send + 'static,
{
    let sender = with_local(|local| local.blocking.borrow_mut().get_or_insert_with(start_thread).clone())
        .expect("rt::spawn_blocking outside an rt executor");
    // A panic in `f` is caught and raised again where the task is awaited,
    // so it never ends the blocking thread.
    let (runnable, task) = async_task::Builder::new().propagate_panic(true).spawn(
        move |_| async move { f() },
        move |runnable| {
            // The thread lives as long as any sender: this cannot fail.
            let _ = sender.send(runnable);
        },
    );
    runnable.schedule();
    task
}

fn start_thread() -> mpsc::Sender<Runnable> {
    let (sender, receiver) = mpsc::channel::<Runnable>();
    let cpus = current_cpus();
    let name = format!("{}-blocking", std::thread::current().name().unwrap_or("rt"));
    std::thread::Builder::new()
        .name(name)
        .spawn(move || {
            if let Some(cpus) = cpus {
                // SAFETY: sets this thread's own affinity from a valid set.
                unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &cpus) };
            }
            for runnable in receiver {
                runnable.run();
            }
        })
        .expect("cannot start a blocking thread");
    sender
}

/// The calling thread's CPU affinity.
fn current_cpus() -> Option<libc::cpu_set_t> {
    // SAFETY: an all-zero cpu_set_t is a valid empty set; sched_getaffinity
    // fills it for the calling thread.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        (libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) == 0).then_some(set)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rt::block_on;

    #[test]
    fn work_runs_off_the_loop_and_a_panic_comes_back_to_the_awaiter() {
        block_on(async {
            let loop_thread = std::thread::current().id();
            let other = spawn_blocking(|| std::thread::current().id()).await;
            assert_ne!(other, loop_thread);
            use futures_lite::FutureExt;
            let panicked =
                std::panic::AssertUnwindSafe(spawn_blocking(|| -> u32 { panic!("a test panic") })).catch_unwind().await;
            assert!(panicked.is_err(), "the panic reaches the awaiter");
            // The blocking thread survived the panic and serves the next call.
            assert_eq!(spawn_blocking(|| 7).await, 7);
        })
        .unwrap();
    }
}
