//! A shard-local shutdown signal that any number of tasks can wait on.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::task::{Poll, Waker};

#[derive(Default)]
pub struct ShutdownSignal {
    fired: Cell<bool>,
    next_id: Cell<u64>,
    waiters: RefCell<HashMap<u64, Waker>>,
}

impl ShutdownSignal {
    pub fn is_fired(&self) -> bool {
        self.fired.get()
    }

    pub fn fire(&self) {
        self.fired.set(true);
        for (_, w) in self.waiters.borrow_mut().drain() {
            w.wake();
        }
    }

    /// Resolves once the signal fires.
    pub async fn wait(&self) {
        // Ids with the top bit set, so they never meet the ids sessions pass
        // to `poll_fired` (their process ids).
        let id = self.next_id.get() | (1 << 63);
        self.next_id.set(self.next_id.get() + 1);
        let guard = Unregister { signal: self, id };
        futures_lite::future::poll_fn(|cx| {
            if guard.signal.fired.get() {
                Poll::Ready(())
            } else {
                guard.signal.waiters.borrow_mut().insert(guard.id, cx.waker().clone());
                Poll::Pending
            }
        })
        .await
    }
}

struct Unregister<'a> {
    signal: &'a ShutdownSignal,
    id: u64,
}

impl Drop for Unregister<'_> {
    fn drop(&mut self) {
        self.signal.waiters.borrow_mut().remove(&self.id);
    }
}

impl ShutdownSignal {
    /// Poll-style wait for code that drives its own `poll` loop: true once
    /// fired; otherwise remembers `cx`'s waker under `id` (one entry per id).
    pub fn poll_fired(&self, id: u64, cx: &std::task::Context<'_>) -> bool {
        if self.fired.get() {
            return true;
        }
        let mut waiters = self.waiters.borrow_mut();
        match waiters.get(&id) {
            Some(w) if w.will_wake(cx.waker()) => {}
            _ => {
                waiters.insert(id, cx.waker().clone());
            }
        }
        false
    }

    /// [`Self::poll_fired`] for a task that asks on every turn (a session:
    /// once per transaction and per idle relay step). A task's waker never
    /// changes, so it is left here on the first call only; `left` remembers
    /// that for the caller. It stays until [`Self::forget`] (KILL wakes
    /// through it too) or until the signal fires.
    pub fn poll_fired_once(&self, id: u64, cx: &std::task::Context<'_>, left: &mut bool) -> bool {
        if *left {
            return self.fired.get();
        }
        *left = true;
        self.poll_fired(id, cx)
    }

    /// Drops the waker remembered under `id`.
    pub fn forget(&self, id: u64) {
        self.waiters.borrow_mut().remove(&id);
    }
}

impl ShutdownSignal {
    /// Wakes the one task remembered under `id` (KILL uses this to make a
    /// session look at its `killed` flag).
    pub fn wake(&self, id: u64) {
        if let Some(w) = self.waiters.borrow().get(&id) {
            w.wake_by_ref();
        }
    }
}
