//! Auto-prepare decisions of one pool: for each query shape its clients sent
//! as a simple query, whether it runs as a prepared statement.
//!
//! This module owns the shape cache (bounded; the least recently used shape
//! goes first) and the queue of shapes waiting to be validated on a side
//! server connection. A shape is keyed by the lexer's shape hash, and the
//! rewritten text and declared parameter types are compared on every hit, so
//! a hash collision can only cost a cache entry, never run another statement.
//!
//! It is plain shard-local state: it never blocks, never locks and does no
//! I/O. The exchange looks shapes up and queues new ones; the validator
//! (`client::autoprep`) takes jobs from the queue and installs its verdicts.
//! Until a verdict is installed, a shape's queries pass through unchanged.

use std::cell::{Cell, RefCell};
use std::collections::{HashMap, VecDeque};
use std::rc::Rc;
use std::task::{Context, Poll, Waker};
use std::time::Instant;

use super::lexer::LexOptions;
use super::registry::Statement;
use super::shape::Reason;

/// What is known of a shape.
#[derive(Debug, Clone)]
pub enum Decision {
    /// Seen this many times, not yet queued (the policy waits for more).
    Seen(u32),
    /// Queued for validation, or being validated.
    Pending,
    /// Validated: run it as this statement.
    Rewrite(Rc<Statement>),
    /// Never rewritten (until DDL clears the cache).
    PassThrough(Reason),
    /// Validation could not run (no server connection, the original failed):
    /// queries pass through, and the first one after this instant queues it again.
    RetryAfter(Instant),
}

/// What the exchange does with a query of this shape.
#[derive(Debug)]
pub enum Lookup {
    Rewrite(Rc<Statement>),
    PassThrough,
    /// Unknown, or due for another try: pass it through, and queue it if
    /// [`Shapes::note`] says so.
    Miss,
}

/// A shape to validate: what the validator needs, owned.
#[derive(Debug, Clone)]
pub struct Job {
    pub hash: u64,
    /// The statement to prepare (the lexer's rewritten text).
    pub sql: Box<str>,
    pub param_types: Box<[u32]>,
    /// The query it came from, to Describe and to run the parser on.
    pub original: Box<str>,
    pub options: LexOptions,
    /// The cache generation it was queued in; stale after DDL.
    pub epoch: u64,
}

#[derive(Debug)]
struct Entry {
    sql: Box<str>,
    param_types: Box<[u32]>,
    decision: Decision,
    used: u64,
}

impl Entry {
    fn is(&self, sql: &str, param_types: &[u32]) -> bool {
        &*self.sql == sql && &*self.param_types == param_types
    }
}

pub struct Shapes {
    by_hash: RefCell<HashMap<u64, Vec<Entry>>>,
    len: Cell<usize>,
    capacity: usize,
    clock: Cell<u64>,
    queue: RefCell<VecDeque<Job>>,
    /// The validator waiting for a job.
    waker: RefCell<Option<Waker>>,
    /// A validator task runs for this pool.
    validator: Cell<bool>,
    /// Bumped when the cache is cleared, so that a verdict reached on the old
    /// schema is not installed.
    epoch: Cell<u64>,
}

impl Shapes {
    pub fn new(capacity: usize) -> Shapes {
        Shapes {
            by_hash: RefCell::default(),
            len: Cell::new(0),
            capacity: capacity.max(1),
            clock: Cell::new(0),
            queue: RefCell::default(),
            waker: RefCell::default(),
            validator: Cell::new(false),
            epoch: Cell::new(0),
        }
    }

    /// The hot path: what to do with a query whose shape hash, rewritten
    /// text and parameter types are these.
    pub fn lookup(&self, hash: u64, sql: &str, param_types: &[u32], now: impl FnOnce() -> Instant) -> Lookup {
        let clock = self.tick();
        let mut map = self.by_hash.borrow_mut();
        let Some(entry) = map.get_mut(&hash).and_then(|v| v.iter_mut().find(|e| e.is(sql, param_types))) else {
            return Lookup::Miss;
        };
        entry.used = clock;
        match &entry.decision {
            Decision::Rewrite(statement) => Lookup::Rewrite(statement.clone()),
            Decision::PassThrough(_) | Decision::Pending => Lookup::PassThrough,
            Decision::RetryAfter(at) if now() < *at => Lookup::PassThrough,
            Decision::RetryAfter(_) | Decision::Seen(_) => Lookup::Miss,
        }
    }

    /// A query of a shape [`Shapes::lookup`] missed ran as it was: counts it,
    /// and queues the shape for validation once it has been seen `after`
    /// times. Returns whether it was queued.
    pub fn note(&self, job: impl FnOnce(u64) -> Job, hash: u64, sql: &str, param_types: &[u32], after: u32) -> bool {
        let clock = self.tick();
        let seen = {
            let mut map = self.by_hash.borrow_mut();
            match map.get_mut(&hash).and_then(|v| v.iter_mut().find(|e| e.is(sql, param_types))) {
                Some(entry) => {
                    entry.used = clock;
                    match entry.decision {
                        Decision::Seen(n) => n + 1,
                        _ => after.max(1),
                    }
                }
                None => 1,
            }
        };
        let decision = if seen >= after { Decision::Pending } else { Decision::Seen(seen) };
        let queued = matches!(decision, Decision::Pending);
        self.put(hash, sql, param_types, decision, clock);
        if queued {
            self.queue.borrow_mut().push_back(job(self.epoch.get()));
            if let Some(waker) = self.waker.borrow_mut().take() {
                waker.wake();
            }
        }
        queued
    }

    /// Installs the validator's verdict for `job`'s shape, unless the cache
    /// was cleared since it was queued. Returns whether it was installed.
    pub fn decide(&self, job: &Job, decision: Decision) -> bool {
        if job.epoch != self.epoch.get() {
            return false;
        }
        let mut map = self.by_hash.borrow_mut();
        match map.get_mut(&job.hash).and_then(|v| v.iter_mut().find(|e| e.is(&job.sql, &job.param_types))) {
            Some(entry) if matches!(entry.decision, Decision::Pending) => {
                entry.decision = decision;
                true
            }
            _ => false,
        }
    }

    /// The verdict for a shape, if it is cached (for tests and the admin console).
    pub fn decision(&self, hash: u64, sql: &str, param_types: &[u32]) -> Option<Decision> {
        let map = self.by_hash.borrow();
        map.get(&hash)?.iter().find(|e| e.is(sql, param_types)).map(|e| e.decision.clone())
    }

    /// Forgets every shape and queued job (after DDL or a stale plan); returns
    /// the statements the shapes ran as.
    pub fn clear(&self) -> Vec<Rc<Statement>> {
        self.epoch.set(self.epoch.get() + 1);
        self.queue.borrow_mut().clear();
        self.len.set(0);
        let map = std::mem::take(&mut *self.by_hash.borrow_mut());
        map.into_values()
            .flatten()
            .filter_map(|e| match e.decision {
                Decision::Rewrite(s) => Some(s),
                _ => None,
            })
            .collect()
    }

    /// The next job, for the validator (which is woken when one arrives).
    pub fn poll_job(&self, cx: &mut Context<'_>) -> Poll<Job> {
        match self.queue.borrow_mut().pop_front() {
            Some(job) => Poll::Ready(job),
            None => {
                *self.waker.borrow_mut() = Some(cx.waker().clone());
                Poll::Pending
            }
        }
    }

    /// True once: the caller starts this pool's validator.
    pub fn claim_validator(&self) -> bool {
        !self.validator.replace(true)
    }

    /// Shapes cached.
    pub fn len(&self) -> usize {
        self.len.get()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn tick(&self) -> u64 {
        let t = self.clock.get() + 1;
        self.clock.set(t);
        t
    }

    fn put(&self, hash: u64, sql: &str, param_types: &[u32], decision: Decision, clock: u64) {
        let mut map = self.by_hash.borrow_mut();
        if let Some(entry) = map.get_mut(&hash).and_then(|v| v.iter_mut().find(|e| e.is(sql, param_types))) {
            entry.decision = decision;
            return;
        }
        if self.len.get() >= self.capacity {
            evict_oldest(&mut map);
            self.len.set(self.len.get() - 1);
        }
        let entry = Entry { sql: sql.into(), param_types: param_types.into(), decision, used: clock };
        map.entry(hash).or_default().push(entry);
        self.len.set(self.len.get() + 1);
    }
}

/// Removes the least recently used entry (the miss path only: a scan).
fn evict_oldest(map: &mut HashMap<u64, Vec<Entry>>) {
    let oldest = map
        .iter()
        .flat_map(|(hash, v)| v.iter().enumerate().map(move |(i, e)| (e.used, *hash, i)))
        .min_by_key(|(used, _, _)| *used);
    if let Some((_, hash, i)) = oldest {
        if let Some(v) = map.get_mut(&hash) {
            v.swap_remove(i);
            if v.is_empty() {
                map.remove(&hash);
            }
        }
    }
}

impl Drop for Shapes {
    /// The pool is gone: its validator wakes up to find out and ends.
    fn drop(&mut self) {
        if let Some(waker) = self.waker.get_mut().take() {
            waker.wake();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prepare::Registry;

    fn job(hash: u64, sql: &str) -> impl FnOnce(u64) -> Job + '_ {
        move |epoch| Job {
            hash,
            sql: sql.into(),
            param_types: Box::new([23]),
            original: "select 1".into(),
            options: LexOptions::default(),
            epoch,
        }
    }

    fn lookup(shapes: &Shapes, hash: u64, sql: &str) -> Lookup {
        shapes.lookup(hash, sql, &[23], Instant::now)
    }

    fn take(shapes: &Shapes) -> Option<Job> {
        let waker = futures_lite::future::block_on(futures_lite::future::poll_fn(|cx| Poll::Ready(cx.waker().clone())));
        match shapes.poll_job(&mut Context::from_waker(&waker)) {
            Poll::Ready(job) => Some(job),
            Poll::Pending => None,
        }
    }

    #[test]
    fn a_shape_passes_through_until_its_verdict_is_installed() {
        let shapes = Shapes::new(10);
        let registry = Registry::new(0, 10);
        assert!(matches!(lookup(&shapes, 7, "select $1"), Lookup::Miss));
        assert!(shapes.note(job(7, "select $1"), 7, "select $1", &[23], 1));
        assert!(matches!(lookup(&shapes, 7, "select $1"), Lookup::PassThrough));
        let queued = take(&shapes).expect("queued");
        assert!(take(&shapes).is_none(), "queued once");
        let statement = registry.register(b"select $1\0\0\x01\0\0\0\x17");
        assert!(shapes.decide(&queued, Decision::Rewrite(statement.clone())));
        match lookup(&shapes, 7, "select $1") {
            Lookup::Rewrite(s) => assert!(Rc::ptr_eq(&s, &statement)),
            other => panic!("{other:?}"),
        }
        // The same hash with another text or other types is another shape.
        assert!(matches!(lookup(&shapes, 7, "select  $1"), Lookup::Miss));
        assert!(matches!(shapes.lookup(7, "select $1", &[20], Instant::now), Lookup::Miss));
    }

    #[test]
    fn the_policy_can_wait_for_several_executions() {
        let shapes = Shapes::new(10);
        assert!(!shapes.note(job(1, "a"), 1, "a", &[23], 3));
        assert!(matches!(lookup(&shapes, 1, "a"), Lookup::Miss));
        assert!(!shapes.note(job(1, "a"), 1, "a", &[23], 3));
        assert!(shapes.note(job(1, "a"), 1, "a", &[23], 3));
        assert!(take(&shapes).is_some());
    }

    #[test]
    fn a_verdict_reached_before_a_clear_is_dropped() {
        let shapes = Shapes::new(10);
        let registry = Registry::new(0, 10);
        shapes.note(job(1, "a"), 1, "a", &[23], 1);
        let queued = take(&shapes).expect("queued");
        shapes.note(job(2, "b"), 2, "b", &[23], 1);
        let statement = registry.register(b"b");
        assert!(shapes.decide(&take(&shapes).expect("queued"), Decision::Rewrite(statement.clone())));
        let dropped = shapes.clear();
        assert_eq!(dropped.len(), 1);
        assert!(Rc::ptr_eq(&dropped[0], &statement));
        assert!(!shapes.decide(&queued, Decision::PassThrough(Reason::Utility)));
        assert!(shapes.is_empty());
        assert!(matches!(lookup(&shapes, 1, "a"), Lookup::Miss));
    }

    #[test]
    fn retry_after_lets_the_first_query_past_the_instant_queue_it_again() {
        let shapes = Shapes::new(10);
        shapes.note(job(1, "a"), 1, "a", &[23], 1);
        let queued = take(&shapes).expect("queued");
        let later = Instant::now() + std::time::Duration::from_secs(60);
        shapes.decide(&queued, Decision::RetryAfter(later));
        assert!(matches!(lookup(&shapes, 1, "a"), Lookup::PassThrough));
        assert!(matches!(shapes.lookup(1, "a", &[23], || later), Lookup::Miss));
        assert!(shapes.note(job(1, "a"), 1, "a", &[23], 1));
    }

    #[test]
    fn the_least_recently_used_shape_is_evicted() {
        let shapes = Shapes::new(2);
        shapes.note(job(1, "a"), 1, "a", &[23], 5);
        shapes.note(job(2, "b"), 2, "b", &[23], 5);
        lookup(&shapes, 1, "a");
        shapes.note(job(3, "c"), 3, "c", &[23], 5);
        assert_eq!(shapes.len(), 2);
        assert!(shapes.decision(1, "a", &[23]).is_some());
        assert!(shapes.decision(2, "b", &[23]).is_none());
        assert!(shapes.decision(3, "c", &[23]).is_some());
    }
}
