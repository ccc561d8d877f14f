//! Time on the loop: [`Stamp`], the clock as the loop reads it, and
//! timers, futures that complete at a point in time.
//!
//! A [`Stamp`] is a reading of `CLOCK_MONOTONIC` in nanoseconds. It is what
//! the loop reads once per turn, and what the per-transaction timestamps
//! (a query's start, a lease's, a connection's idle time) are: two subtract
//! in one instruction, where two [`Instant`]s take about 55 (a timespec's
//! borrow and a `Duration`'s checks), and a tpcb-like transaction takes
//! eighteen such differences. [`Instant`] stays the type deadlines are given
//! in from outside; [`Stamp::of`] and [`Stamp::instant`] convert.
//!
//! Timers are kept by the reactor in user space (a sorted map by
//! [`Stamp`]); the nearest one is armed on the ring as an absolute timeout
//! op (see [`super::reactor`]).

use std::future::Future;
use std::pin::Pin;
use std::sync::OnceLock;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use super::executor::{with_local, with_reactor};

/// A reading of `CLOCK_MONOTONIC`, in nanoseconds: the clock [`Instant`]
/// reads on Linux, as a number (see the module comment).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Stamp(u64);

impl Stamp {
    /// The clock now.
    pub fn read() -> Stamp {
        let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
        // SAFETY: writes the clock's reading into a timespec we own.
        unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
        Stamp((ts.tv_sec as u64).saturating_mul(1_000_000_000).saturating_add(ts.tv_nsec as u64))
    }

    /// The reading at `instant`: a few nanoseconds late, never early, so a
    /// deadline converted never fires before the `Instant` it names.
    pub fn of(instant: Instant) -> Stamp {
        let pair = ClockPair::get();
        match instant.checked_duration_since(pair.instant) {
            Some(after) => pair.reading.saturating_add(after),
            None => Stamp(pair.reading.0.saturating_sub(nanos(pair.instant - instant))),
        }
    }

    /// The `Instant` of this reading (a few nanoseconds early): for the
    /// callers that keep `Instant`s.
    pub fn instant(self) -> Instant {
        let pair = ClockPair::get();
        match self.0.checked_sub(pair.reading.0) {
            Some(after) => pair.instant + Duration::from_nanos(after),
            None => pair.instant.checked_sub(Duration::from_nanos(pair.reading.0 - self.0)).unwrap_or(pair.instant),
        }
    }

    /// The time from `earlier` to this reading; zero if `earlier` is later.
    pub fn saturating_since(self, earlier: Stamp) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0))
    }

    /// [`Stamp::saturating_since`] in whole microseconds, as statistics count.
    pub fn micros_since(self, earlier: Stamp) -> u64 {
        self.0.saturating_sub(earlier.0) / 1_000
    }

    /// The time since this reading, by the clock read now.
    pub fn elapsed(self) -> Duration {
        Stamp::read().saturating_since(self)
    }

    /// `after` later; the end of time if that does not fit.
    pub fn saturating_add(self, after: Duration) -> Stamp {
        Stamp(self.0.saturating_add(nanos(after)))
    }

    /// As the absolute time a timeout op of the ring takes.
    pub fn timespec(self) -> io_uring::types::Timespec {
        io_uring::types::Timespec::from(Duration::from_nanos(self.0))
    }
}

/// `d` in nanoseconds, `u64::MAX` if more (585 years).
fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// An instant and the clock's reading just after it, taken once per
/// process: what converts between the two.
struct ClockPair {
    instant: Instant,
    reading: Stamp,
}

impl ClockPair {
    fn get() -> &'static ClockPair {
        static PAIR: OnceLock<ClockPair> = OnceLock::new();
        PAIR.get_or_init(|| {
            let instant = Instant::now();
            ClockPair { instant, reading: Stamp::read() }
        })
    }
}

/// The time this thread's executor last came back from waiting, read once
/// per turn of its loop; the clock itself outside an executor. It lags the
/// clock by what the turn's tasks have run so far (microseconds), so it is
/// for the timestamps taken on every transaction (statistics, idle times),
/// which would otherwise read the clock a dozen times each; deadlines use
/// the clock itself.
pub fn stamp() -> Stamp {
    with_local(|local| local.now.get()).unwrap_or_else(Stamp::read)
}

/// [`stamp`] as an `Instant`, for what keeps `Instant`s (a conversion:
/// what runs per transaction takes a [`Stamp`]).
pub fn now() -> Instant {
    stamp().instant()
}

/// Completes at its deadline. Dropping it disarms it.
pub struct Timer {
    deadline: Stamp,
    /// The reactor's id for it once armed; 0 before.
    id: u64,
}

impl Timer {
    /// A timer that fires `after` from now.
    pub fn new(after: Duration) -> Timer {
        Timer { deadline: Stamp::read().saturating_add(after), id: 0 }
    }

    pub fn at(deadline: Instant) -> Timer {
        Timer { deadline: Stamp::of(deadline), id: 0 }
    }
}

impl Future for Timer {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = self.get_mut();
        if Stamp::read() >= this.deadline {
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

    fn monotonic_now() -> Duration {
        let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
        // SAFETY: writes the clock's reading into a timespec we own.
        unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
        Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
    }

    fn as_duration(stamp: Stamp) -> Duration {
        Duration::from_nanos(stamp.0)
    }

    #[test]
    fn an_instant_becomes_the_monotonic_time_it_names_never_earlier() {
        let before = monotonic_now();
        let at = as_duration(Stamp::of(Instant::now() + Duration::from_millis(50)));
        let after = monotonic_now();
        assert!(at >= before + Duration::from_millis(50), "{at:?} is before {before:?} + 50 ms");
        assert!(at <= after + Duration::from_millis(51), "{at:?} is after {after:?} + 50 ms");
        // An instant already past is a time already past (its op fires at once),
        // also one from before the clock pair was taken.
        let past = Instant::now().checked_sub(Duration::from_secs(1)).expect("the machine is up for a second");
        assert!(as_duration(Stamp::of(past)) + Duration::from_millis(999) <= monotonic_now());
    }

    #[test]
    fn a_stamp_and_its_instant_name_the_same_time() {
        let instant = Instant::now();
        let stamp = Stamp::of(instant);
        let back = stamp.instant();
        let apart = back.max(instant) - back.min(instant);
        assert!(apart < Duration::from_micros(100), "{apart:?}");
        let earlier = Stamp::of(instant - Duration::from_millis(5));
        assert!(earlier.instant() < instant);
        assert_eq!(stamp.saturating_since(earlier).as_millis(), 5);
        assert_eq!(stamp.micros_since(earlier), 5_000);
        assert_eq!(earlier.saturating_since(stamp), Duration::ZERO);
        assert_eq!(earlier.micros_since(stamp), 0);
        assert_eq!(Stamp(7).saturating_add(Duration::MAX), Stamp(u64::MAX));
    }

    #[test]
    fn a_stamp_is_the_timespec_a_timeout_op_takes() {
        let t = Stamp(12 * 1_000_000_000 + 345).timespec();
        let expected = io_uring::types::Timespec::new().sec(12).nsec(345);
        assert_eq!(format!("{t:?}"), format!("{expected:?}"));
    }

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
