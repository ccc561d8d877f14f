//! When a shard spins before it sleeps: the adaptive policy.
//!
//! A shard that is about to sleep may first spin (check its ring, yield
//! the CPU between checks) for up to a budget. A sleep and its wake-up cost
//! a proxy more than a short transaction's work when clients are few, so a
//! spin that ends in a completion saves latency; a spin that ends in a
//! sleep anyway only burned CPU time. And CPU time is not free on the hosts
//! pglane runs on: PostgreSQL and the clients share the cores, and a shard
//! that spins while their threads are runnable takes its share of a core
//! away from them (on 2 cores at 8 clients, a fixed 50 µs spin cost 5-30%
//! of the throughput: bench/results/pgbench-spin.md).
//!
//! So a shard spins only while both say it pays:
//!
//! - its recent waits were short: a moving average of how long the waits
//!   after work lasted (spun or slept) is within the budget. A shard whose
//!   waits are longer (slow queries, clients that think between
//!   statements) sleeps at once, and starts spinning again when its waits
//!   get short, since every wait is measured, spun or slept;
//! - the machine has a CPU nobody waits for: no more threads runnable than
//!   there are CPUs (the kernel's count in /proc/loadavg, read at most every
//!   [`PROBE_INTERVAL`]; a spinning thread counts, so a spin never keeps a
//!   runnable backend from a CPU the scheduler would have given it);
//! - nobody on this CPU wanted it: a step of the spin that took longer than
//!   [`CONTENDED_STEP`] (its yield ran another thread, or the thread was
//!   preempted) ends the spin, and the shard does not spin again for
//!   [`CONTENDED_BACKOFF`].
//!
//! This module only decides; the reactor spins and sleeps and reads
//! /proc/loadavg ([`RunQueue`]). The policy owns no clock: the reactor
//! passes the time in, which keeps it a pure function of what it was told
//! (and its tests exact).

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::time::{Duration, Instant};

/// A spin step (one check of the ring and one `sched_yield`) takes well
/// under a microsecond when no other thread wants the CPU (0.3 µs here,
/// over 99.9% of 200,000 steps under 2 µs); one this long ran someone
/// else (a switch there and back alone costs about this much).
pub const CONTENDED_STEP: Duration = Duration::from_micros(3);

/// How long a shard does not spin after it saw another thread wanting its
/// CPU: long enough that a busy machine sees few spins (each ends at its
/// first contended step), short enough that a machine gone quiet gets them
/// back within a few milliseconds.
pub const CONTENDED_BACKOFF: Duration = Duration::from_millis(1);

/// How long a reading of the machine's runnable threads is trusted. A read
/// costs under a microsecond; at most one per this interval per shard.
pub const PROBE_INTERVAL: Duration = Duration::from_micros(100);

/// The weight of the newest wait in the moving average, as a divisor.
const AVERAGE_WEIGHT: u32 = 8;

#[derive(Debug)]
pub struct SpinPolicy {
    budget: Duration,
    /// The moving average of the waits after work, each counted as at most
    /// twice the budget (a single long wait must not stop spinning for
    /// longer than a few short ones take to bring it back).
    average_wait: Duration,
    /// No spin before this: another thread wanted the CPU during the last.
    backoff_until: Option<Instant>,
    /// When the machine's runnable threads were last counted, and whether
    /// they were more than its CPUs then.
    probed: Option<(Instant, bool)>,
}

impl SpinPolicy {
    /// A policy that never spins.
    pub fn off() -> SpinPolicy {
        SpinPolicy { budget: Duration::ZERO, average_wait: Duration::ZERO, backoff_until: None, probed: None }
    }

    /// Spins for at most `budget` from now on; zero: never.
    pub fn set_budget(&mut self, budget: Duration) {
        self.budget = budget;
        self.average_wait = Duration::ZERO;
        self.backoff_until = None;
        self.probed = None;
    }

    /// Whether waits are measured at all: only when spinning is on.
    pub fn is_on(&self) -> bool {
        !self.budget.is_zero()
    }

    /// Until when to spin before a wait that starts `now`, if at all.
    /// Asks `crowded` (whether more threads are runnable than the machine
    /// has CPUs) when its last answer is older than [`PROBE_INTERVAL`].
    pub fn spin_until(&mut self, now: Instant, crowded: impl FnOnce() -> bool) -> Option<Instant> {
        if !self.is_on() || self.average_wait > self.budget {
            return None;
        }
        if self.backoff_until.is_some_and(|until| now < until) {
            return None;
        }
        let crowded = match self.probed {
            Some((at, crowded)) if now.saturating_duration_since(at) < PROBE_INTERVAL => crowded,
            _ => {
                let crowded = crowded();
                self.probed = Some((now, crowded));
                crowded
            }
        };
        (!crowded).then_some(now + self.budget)
    }

    /// A wait after work lasted `wait`, spun or slept.
    pub fn waited(&mut self, wait: Duration) {
        let sample = wait.min(self.budget * 2);
        self.average_wait = (self.average_wait * (AVERAGE_WEIGHT - 1) + sample) / AVERAGE_WEIGHT;
    }

    /// A spin step ended at `now` after `step`: whether it says another
    /// thread wanted the CPU (and the spin should end), which the policy
    /// then remembers.
    pub fn step_took(&mut self, step: Duration, now: Instant) -> bool {
        if step < CONTENDED_STEP {
            return false;
        }
        self.backoff_until = Some(now + CONTENDED_BACKOFF);
        true
    }
}

/// The machine's run queue, as /proc/loadavg counts it: threads running or
/// ready to run, against the CPUs online.
#[derive(Debug)]
pub struct RunQueue {
    loadavg: Option<File>,
    cpus: u32,
}

impl RunQueue {
    /// Opens /proc/loadavg; without it (no procfs), the machine never
    /// counts as crowded and only the spin's own steps tell.
    pub fn open() -> RunQueue {
        // SAFETY: sysconf has no preconditions.
        let cpus = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
        RunQueue { loadavg: File::open("/proc/loadavg").ok(), cpus: u32::try_from(cpus).unwrap_or(1).max(1) }
    }

    /// Whether more threads are runnable (the caller among them) than there
    /// are CPUs.
    pub fn crowded(&self) -> bool {
        let Some(file) = &self.loadavg else { return false };
        let mut text = [0u8; 128];
        match file.read_at(&mut text, 0) {
            Ok(read) => runnable_threads(&text[..read]).is_some_and(|runnable| runnable > self.cpus),
            Err(_) => false,
        }
    }
}

/// The runnable threads in /proc/loadavg's text (`0.20 1.00 1.76 2/345
/// 12345`: the number before the slash).
pub fn runnable_threads(loadavg: &[u8]) -> Option<u32> {
    let fourth = loadavg.split(|&b| b == b' ').nth(3)?;
    let runnable = fourth.split(|&b| b == b'/').next()?;
    std::str::from_utf8(runnable).ok()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    const BUDGET: Duration = Duration::from_micros(50);

    fn on() -> SpinPolicy {
        let mut policy = SpinPolicy::off();
        policy.set_budget(BUDGET);
        policy
    }

    #[test]
    fn off_never_spins() {
        let mut policy = SpinPolicy::off();
        assert!(!policy.is_on());
        assert_eq!(policy.spin_until(Instant::now(), || false), None);
    }

    #[test]
    fn a_fresh_policy_spins_for_its_budget() {
        let now = Instant::now();
        assert_eq!(on().spin_until(now, || false), Some(now + BUDGET));
    }

    #[test]
    fn short_waits_keep_it_spinning() {
        let mut policy = on();
        for _ in 0..100 {
            policy.waited(Duration::from_micros(20));
        }
        assert!(policy.spin_until(Instant::now(), || false).is_some());
    }

    #[test]
    fn long_waits_stop_it_and_short_ones_bring_it_back() {
        let mut policy = on();
        let mut long_waits = 0;
        while policy.spin_until(Instant::now(), || false).is_some() {
            policy.waited(Duration::from_secs(1));
            long_waits += 1;
        }
        // Each long wait counts as twice the budget: a few of them stop it.
        assert!((2..=8).contains(&long_waits), "{long_waits}");
        let mut short_waits = 0;
        while policy.spin_until(Instant::now(), || false).is_none() {
            policy.waited(Duration::from_micros(5));
            short_waits += 1;
        }
        assert!((1..=8).contains(&short_waits), "{short_waits}");
    }

    #[test]
    fn one_long_wait_among_short_ones_does_not_stop_it() {
        let mut policy = on();
        for i in 0..100 {
            policy.waited(if i % 10 == 0 { Duration::from_secs(1) } else { Duration::from_micros(10) });
            assert!(policy.spin_until(Instant::now(), || false).is_some(), "stopped at wait {i}");
        }
    }

    #[test]
    fn a_contended_step_backs_off_for_a_while() {
        let mut policy = on();
        let now = Instant::now();
        assert!(!policy.step_took(Duration::from_micros(1), now));
        assert!(policy.spin_until(now, || false).is_some());
        assert!(policy.step_took(Duration::from_micros(30), now));
        assert_eq!(policy.spin_until(now, || false), None);
        assert_eq!(policy.spin_until(now + CONTENDED_BACKOFF / 2, || false), None);
        assert!(policy.spin_until(now + CONTENDED_BACKOFF, || false).is_some());
    }

    #[test]
    fn a_new_budget_starts_afresh() {
        let mut policy = on();
        let now = Instant::now();
        policy.step_took(Duration::from_millis(1), now);
        for _ in 0..20 {
            policy.waited(Duration::from_secs(1));
        }
        assert_eq!(policy.spin_until(now, || false), None);
        policy.set_budget(Duration::from_micros(20));
        assert_eq!(policy.spin_until(now, || false), Some(now + Duration::from_micros(20)));
        policy.set_budget(Duration::ZERO);
        assert_eq!(policy.spin_until(now, || false), None);
    }

    #[test]
    fn a_crowded_machine_stops_it_until_a_probe_says_otherwise() {
        let mut policy = on();
        let now = Instant::now();
        assert_eq!(policy.spin_until(now, || true), None);
        // Within the interval the last answer stands, unasked.
        assert_eq!(policy.spin_until(now + PROBE_INTERVAL / 2, || unreachable!()), None);
        let later = now + PROBE_INTERVAL;
        assert_eq!(policy.spin_until(later, || false), Some(later + BUDGET));
        assert!(policy.spin_until(later + PROBE_INTERVAL / 2, || unreachable!()).is_some());
    }

    #[test]
    fn runnable_threads_are_read_from_loadavg() {
        assert_eq!(runnable_threads(b"0.20 1.00 1.76 2/345 12345\n"), Some(2));
        assert_eq!(runnable_threads(b"4.27 4.45 3.14 13/95 18172"), Some(13));
        assert_eq!(runnable_threads(b""), None);
        assert_eq!(runnable_threads(b"0.20 1.00 1.76"), None);
        assert_eq!(runnable_threads(b"0.20 1.00 1.76 x/345 1"), None);
    }

    #[test]
    fn this_machine_has_a_run_queue_to_read() {
        let text = std::fs::read("/proc/loadavg").unwrap();
        assert!(runnable_threads(&text).is_some_and(|n| n >= 1), "{}", String::from_utf8_lossy(&text));
        // The probe itself works; whether the machine is crowded now is the
        // machine's business.
        let _ = RunQueue::open().crowded();
    }
}
