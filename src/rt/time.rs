//! Timers: futures that complete at a point in time.
//!
//! They are kept by the reactor in user space (a sorted map), never as ops
//! in the ring: arming, moving and dropping one is a map operation, and the
//! loop pays for time only when it waits, as the wait's timeout.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use super::executor::{with_local, with_reactor};

/// The time this thread's executor last came back from waiting, read once
/// per turn of its loop; `Instant::now()` outside an executor. It lags the
/// clock by what the turn's tasks have run so far (microseconds), so it is
/// for the timestamps taken on every transaction (statistics, idle times),
/// which would otherwise read the clock a dozen times each; deadlines use
/// the clock itself.
pub fn now() -> Instant {
    with_local(|local| local.now.get()).unwrap_or_else(Instant::now)
}

/// Completes at its deadline. Dropping it disarms it.
pub struct Timer {
    deadline: Instant,
    /// The reactor's id for it once armed; 0 before.
    id: u64,
}

impl Timer {
    /// A timer that fires `after` from now.
    pub fn new(after: Duration) -> Timer {
        Timer::at(Instant::now().checked_add(after).unwrap_or_else(far_future))
    }

    pub fn at(deadline: Instant) -> Timer {
        Timer { deadline, id: 0 }
    }

    pub fn deadline(&self) -> Instant {
        self.deadline
    }
}

/// A deadline that never comes in practice, for durations too long to add.
fn far_future() -> Instant {
    Instant::now() + Duration::from_secs(100 * 365 * 24 * 3600)
}

impl Future for Timer {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = self.get_mut();
        if Instant::now() >= this.deadline {
            if this.id != 0 {
                with_reactor(|r| r.remove_timer(this.deadline, this.id));
                this.id = 0;
            }
            return Poll::Ready(());
        }
        match with_reactor(|r| r.set_timer(this.deadline, this.id, cx.waker())) {
            Some(id) => this.id = id,
            None => panic!("rt::Timer polled outside an rt executor"),
        }
        Poll::Pending
    }
}

impl Drop for Timer {
    fn drop(&mut self) {
        if self.id != 0 {
            with_reactor(|r| r.remove_timer(self.deadline, self.id));
        }
    }
}

/// Waits for `duration`.
pub async fn sleep(duration: Duration) {
    Timer::new(duration).await
}

/// Runs `fut` for at most `limit`; `None` if time ran out first.
pub fn with_timeout<F: Future>(limit: Duration, fut: F) -> Timeout<F> {
    Timeout { fut, timer: Timer::new(limit) }
}

/// [`with_timeout`]'s future: no bigger than the future it bounds and a
/// timer (an async fn here stored its arguments twice, and a session waits
/// in one of these for as long as it is idle).
pub struct Timeout<F> {
    fut: F,
    timer: Timer,
}

impl<F: Future> Future for Timeout<F> {
    type Output = Option<F::Output>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<F::Output>> {
        // SAFETY: `fut` is pinned with the Timeout (it is never moved out of
        // it, and Timeout has no Drop of its own); `timer` is Unpin.
        let this = unsafe { self.get_unchecked_mut() };
        let fut = unsafe { Pin::new_unchecked(&mut this.fut) };
        if let Poll::Ready(value) = fut.poll(cx) {
            return Poll::Ready(Some(value));
        }
        Pin::new(&mut this.timer).poll(cx).map(|()| None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rt::{block_on, spawn_local};
    use std::cell::RefCell;
    use std::rc::Rc;

    #[test]
    fn timers_fire_in_deadline_order_and_not_before() {
        let order = Rc::new(RefCell::new(Vec::new()));
        let o = order.clone();
        let started = Instant::now();
        block_on(async move {
            let tasks: Vec<_> = [30u64, 10, 20]
                .into_iter()
                .map(|ms| {
                    let o = o.clone();
                    spawn_local(async move {
                        sleep(Duration::from_millis(ms)).await;
                        o.borrow_mut().push(ms);
                    })
                })
                .collect();
            for t in tasks {
                t.await;
            }
        })
        .unwrap();
        assert!(started.elapsed() >= Duration::from_millis(30));
        assert_eq!(*order.borrow(), vec![10, 20, 30]);
    }

    /// Pending until a thread of its own wakes it, `after` its first poll.
    async fn woken_from_another_thread(after: Duration) {
        let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let mut asked = false;
        std::future::poll_fn(|cx| {
            if done.load(std::sync::atomic::Ordering::SeqCst) {
                return Poll::Ready(());
            }
            if !asked {
                asked = true;
                let (waker, done) = (cx.waker().clone(), done.clone());
                std::thread::spawn(move || {
                    std::thread::sleep(after);
                    done.store(true, std::sync::atomic::Ordering::SeqCst);
                    waker.wake();
                });
            }
            Poll::Pending
        })
        .await
    }

    #[test]
    fn a_timer_nearer_than_the_armed_one_fires_on_time() {
        // The loop sleeps with a 2 s timer armed on the ring; woken from
        // another thread, it sets a 10 ms one, which must not wait for it.
        let waited = block_on(async {
            let far = spawn_local(sleep(Duration::from_secs(2)));
            woken_from_another_thread(Duration::from_millis(20)).await;
            let started = Instant::now();
            sleep(Duration::from_millis(10)).await;
            drop(far);
            started.elapsed()
        })
        .unwrap();
        assert!(waited >= Duration::from_millis(10));
        assert!(waited < Duration::from_secs(1), "the nearer timer waited for the armed one: {waited:?}");
    }

    #[test]
    fn a_timer_after_one_removed_while_armed_fires_on_time() {
        // A 20 ms timeout armed, then removed when its future is done at
        // 5 ms: its op still ends a wait, after which the 100 ms one is armed.
        let waited = block_on(async {
            let done = with_timeout(Duration::from_millis(20), woken_from_another_thread(Duration::from_millis(5))).await;
            assert!(done.is_some());
            let started = Instant::now();
            sleep(Duration::from_millis(100)).await;
            started.elapsed()
        })
        .unwrap();
        assert!(waited >= Duration::from_millis(100));
        assert!(waited < Duration::from_secs(1), "{waited:?}");
    }

    #[test]
    fn a_dropped_timer_does_not_keep_the_loop_waiting() {
        let started = Instant::now();
        block_on(async {
            let long = Timer::new(Duration::from_secs(3600));
            let short = sleep(Duration::from_millis(5));
            futures_lite::future::or(
                async {
                    long.await;
                    1
                },
                async {
                    short.await;
                    2
                },
            )
            .await
        })
        .map(|winner| assert_eq!(winner, 2))
        .unwrap();
        assert!(started.elapsed() < Duration::from_secs(60));
    }
}
