//! The executor: runs one thread's tasks, and parks in the reactor when none
//! is ready.
//!
//! Tasks are async-task's: a task woken on its own thread goes to the back of
//! the local run queue (no lock, no atomic beyond async-task's own); a task
//! woken from another thread (the blocking thread finished, a peer shard sent
//! a message) goes into [`Remote`]'s queue, and the eventfd is written only if
//! the loop is parked, so a busy loop never pays a syscall for it.
//!
//! One turn of the loop runs up to [`BATCH`] ready tasks, then turns the
//! reactor once: without waiting if tasks are still ready, else waiting for
//! I/O, a timer or a remote wake-up. Nothing else runs per turn.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::future::Future;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_task::Runnable;

use super::reactor::Reactor;

pub use async_task::Task;

/// Tasks run between two turns of the reactor, so that a flood of ready
/// tasks cannot starve the sockets.
const BATCH: usize = 128;

/// What one executor thread owns. Lives on `block_on`'s stack; reachable
/// from its thread through [`CURRENT`] while `block_on` runs.
pub(super) struct Local {
    queue: RefCell<VecDeque<Runnable>>,
    pub(super) reactor: RefCell<Option<Reactor>>,
    remote: Arc<Remote>,
    /// The thread that runs [`super::spawn_blocking`]'s work, started on first use.
    pub(super) blocking: RefCell<Option<std::sync::mpsc::Sender<Runnable>>>,
    /// When the current turn's wait ended (see [`super::time::stamp`]).
    pub(super) now: Cell<super::time::Stamp>,
}

/// The part of an executor other threads may touch: wake-ups from them.
struct Remote {
    woken: Mutex<Vec<Runnable>>,
    /// Something is in `woken` (read without taking the lock).
    has_woken: AtomicBool,
    /// The loop is about to wait, or waiting, in the reactor: a wake-up from
    /// another thread must write `eventfd` to interrupt it.
    sleeping: AtomicBool,
    /// The executor has stopped: later wake-ups are dropped (leaked, as no
    /// other thread may drop a local task).
    closed: AtomicBool,
    eventfd: OwnedFd,
}

thread_local! {
    static CURRENT: Cell<*const Local> = const { Cell::new(std::ptr::null()) };
}

/// Runs `f` with this thread's executor, if it has one running.
pub(super) fn with_local<R>(f: impl FnOnce(&Local) -> R) -> Option<R> {
    let ptr = CURRENT.try_with(|c| c.get()).ok()?;
    // SAFETY: CURRENT is non-null only while `block_on` runs on this thread,
    // and points at the `Local` it owns for that whole time.
    (!ptr.is_null()).then(|| f(unsafe { &*ptr }))
}

/// Runs `f` with this thread's reactor. `None` outside an executor, or
/// while the executor is stopping (its sockets then just close).
pub(super) fn with_reactor<R>(f: impl FnOnce(&mut Reactor) -> R) -> Option<R> {
    with_local(|local| {
        let mut reactor = local.reactor.try_borrow_mut().ok()?;
        reactor.as_mut().map(f)
    })
    .flatten()
}

impl Remote {
    fn wake(&self, runnable: Runnable) {
        let mut woken = self.woken.lock().unwrap_or_else(|e| e.into_inner());
        if self.closed.load(Ordering::SeqCst) {
            drop(woken);
            // Its executor is gone and this is not its thread: dropping
            // it here would drop a local future on the wrong thread.
            std::mem::forget(runnable);
            return;
        }
        woken.push(runnable);
        drop(woken);
        self.has_woken.store(true, Ordering::SeqCst);
        if self.sleeping.swap(false, Ordering::SeqCst) {
            let one: u64 = 1;
            // SAFETY: writes 8 bytes from a valid u64 to our eventfd.
            unsafe { libc::write(self.eventfd.as_raw_fd(), (&one as *const u64).cast(), 8) };
        }
    }

    fn take_woken(&self) -> Vec<Runnable> {
        if !self.has_woken.swap(false, Ordering::SeqCst) {
            return Vec::new();
        }
        std::mem::take(&mut *self.woken.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

/// Spawns `future` on this thread's executor. The task runs until it
/// finishes, or until its [`Task`] is dropped (then it is cancelled) unless
/// it was detached. Panics outside an executor thread (a bug).
pub fn spawn_local<F>(future: F) -> Task<F::Output>
where
    F: Future + 'static,
    F::Output: 'static,
{
    let remote = with_local(|local| local.remote.clone()).expect("rt::spawn_local outside an rt executor");
    let schedule = move |runnable: Runnable| {
        let mut runnable = Some(runnable);
        with_local(|local| {
            if Arc::ptr_eq(&local.remote, &remote) {
                local.queue.borrow_mut().push_back(runnable.take().expect("once"));
            }
        });
        if let Some(runnable) = runnable {
            remote.wake(runnable);
        }
    };
    let (runnable, task) = async_task::spawn_local(future, schedule);
    runnable.schedule();
    task
}

/// Runs `future` on this thread, with an executor for the tasks it spawns,
/// until it completes; tasks still pending then are dropped. Fails only if
/// the ring or the eventfd cannot be created.
pub fn block_on<F>(future: F) -> io::Result<F::Output>
where
    F: Future + 'static,
    F::Output: 'static,
{
    if with_local(|_| ()).is_some() {
        return Err(io::Error::other("rt::block_on inside an rt executor"));
    }
    // SAFETY: eventfd returns a new descriptor we own, or -1.
    let eventfd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
    if eventfd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a fresh descriptor, owned from here on.
    let eventfd = unsafe { OwnedFd::from_raw_fd(eventfd) };
    let reactor = Reactor::new(eventfd.as_raw_fd())?;
    let local = Local {
        queue: RefCell::default(),
        reactor: RefCell::new(Some(reactor)),
        remote: Arc::new(Remote {
            woken: Mutex::default(),
            has_woken: AtomicBool::new(false),
            sleeping: AtomicBool::new(false),
            closed: AtomicBool::new(false),
            eventfd,
        }),
        blocking: RefCell::default(),
        now: Cell::new(super::time::Stamp::read()),
    };
    CURRENT.with(|c| c.set(&local));
    let _current = ResetCurrent { local: &local };
    let main = spawn_local(future);
    while !main.is_finished() {
        let ran = local.run_ready();
        if main.is_finished() {
            break;
        }
        local.turn(ran);
    }
    let output = futures_lite::future::block_on(main);
    Ok(output)
}

impl Local {
    /// Runs up to [`BATCH`] ready tasks. Returns whether there were any.
    fn run_ready(&self) -> bool {
        for runnable in self.remote.take_woken() {
            self.queue.borrow_mut().push_back(runnable);
        }
        for ran in 0..BATCH {
            let Some(runnable) = self.queue.borrow_mut().pop_front() else { return ran > 0 };
            runnable.run();
        }
        true
    }

    /// Turns the reactor once: waiting only if no task is ready, and
    /// spinning first (if asked to) only if tasks just ran: an executor with
    /// nothing to do parks at once.
    fn turn(&self, ran_tasks: bool) {
        let mut may_wait = self.queue.borrow().is_empty();
        if may_wait {
            self.remote.sleeping.store(true, Ordering::SeqCst);
            if self.remote.has_woken.load(Ordering::SeqCst) {
                may_wait = false;
            }
        }
        if let Some(reactor) = self.reactor.borrow_mut().as_mut() {
            self.now.set(reactor.turn(may_wait, ran_tasks));
        }
        self.remote.sleeping.store(false, Ordering::SeqCst);
    }

    /// Drops every task still pending, on this thread, and stops taking
    /// wake-ups from others.
    fn stop(&self) {
        {
            let mut woken = self.remote.woken.lock().unwrap_or_else(|e| e.into_inner());
            self.remote.closed.store(true, Ordering::SeqCst);
            self.queue.borrow_mut().extend(woken.drain(..));
        }
        self.drop_queued();
        // Dropping the reactor drops the wakers of tasks waiting on I/O or
        // timers; async-task then schedules each once more, to be dropped.
        let reactor = self.reactor.borrow_mut().take();
        drop(reactor);
        self.drop_queued();
        self.blocking.borrow_mut().take();
    }

    fn drop_queued(&self) {
        loop {
            let Some(runnable) = self.queue.borrow_mut().pop_front() else { return };
            drop(runnable);
        }
    }
}

/// Stops the executor and forgets it when `block_on` returns or unwinds.
struct ResetCurrent<'a> {
    local: &'a Local,
}

impl Drop for ResetCurrent<'_> {
    fn drop(&mut self) {
        self.local.stop();
        CURRENT.with(|c| c.set(std::ptr::null()));
    }
}

/// Makes this thread's executor spin for up to `spin` before a wait that
/// would put the thread to sleep, when spinning pays (see
/// [`super::spin`]); zero turns it off. Outside an executor it does nothing.
pub fn spin_before_park(spin: Duration) {
    with_reactor(|r| r.spin.set_budget(spin));
}

/// Starts a thread named `name`, pinned to `cpu` if given, that runs
/// `make()`'s future with [`block_on`]. The handle's `join` gives the
/// future's output, or the error that kept the executor from starting, or
/// `Err` if the thread panicked.
pub fn start_pinned<F, Fut>(
    name: &str,
    cpu: Option<usize>,
    make: F,
) -> io::Result<std::thread::JoinHandle<io::Result<Fut::Output>>>
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: Future + 'static,
    Fut::Output: Send + 'static,
{
    std::thread::Builder::new().name(name.to_string()).spawn(move || {
        if let Some(cpu) = cpu {
            if !core_affinity::set_for_current(core_affinity::CoreId { id: cpu }) {
                return Err(io::Error::other(format!("cannot pin the thread to cpu {cpu}")));
            }
        }
        block_on(make())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::rc::Rc;
    use std::time::{Duration, Instant};

    #[test]
    fn tasks_run_and_their_results_come_back() {
        let total = block_on(async {
            let tasks: Vec<_> = (0..10u64).map(|i| spawn_local(async move { i * 2 })).collect();
            let mut total = 0;
            for t in tasks {
                total += t.await;
            }
            total
        })
        .unwrap();
        assert_eq!(total, 90);
    }

    #[test]
    fn a_dropped_task_is_cancelled_and_a_detached_one_runs_on() {
        let ran = Rc::new(Cell::new(0));
        let (r1, r2) = (ran.clone(), ran.clone());
        block_on(async move {
            let cancelled = spawn_local(async move {
                crate::rt::sleep(Duration::from_millis(20)).await;
                r1.set(r1.get() + 1);
            });
            drop(cancelled);
            spawn_local(async move {
                crate::rt::sleep(Duration::from_millis(20)).await;
                r2.set(r2.get() + 10);
            })
            .detach();
            crate::rt::sleep(Duration::from_millis(60)).await;
        })
        .unwrap();
        assert_eq!(ran.get(), 10);
    }

    #[test]
    fn a_wake_up_from_another_thread_reaches_a_parked_executor() {
        let started = Instant::now();
        let got = block_on(async {
            let (tx, rx) = flume::bounded::<u32>(1);
            let sender = std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(50));
                tx.send(7).unwrap();
            });
            let got = rx.recv_async().await.unwrap();
            sender.join().unwrap();
            got
        })
        .unwrap();
        assert_eq!(got, 7);
        assert!(started.elapsed() < Duration::from_secs(30), "woken by the message, not by luck");
    }

    #[test]
    fn pending_tasks_are_dropped_on_their_own_thread_when_the_executor_stops() {
        struct Noisy(Rc<Cell<bool>>);
        impl Drop for Noisy {
            fn drop(&mut self) {
                self.0.set(true);
            }
        }
        let dropped = Rc::new(Cell::new(false));
        let d = dropped.clone();
        block_on(async move {
            spawn_local(async move {
                let _noisy = Noisy(d);
                crate::rt::sleep(Duration::from_secs(3600)).await;
            })
            .detach();
            crate::rt::sleep(Duration::from_millis(5)).await;
        })
        .unwrap();
        assert!(dropped.get());
    }

    #[test]
    fn start_pinned_runs_on_the_given_cpu() {
        let cpu = core_affinity::get_core_ids().unwrap()[0].id;
        let handle = start_pinned("rt-test", Some(cpu), move || async move {
            // SAFETY: sched_getcpu has no preconditions.
            unsafe { libc::sched_getcpu() }
        })
        .unwrap();
        assert_eq!(handle.join().unwrap().unwrap() as usize, cpu);
    }
}
