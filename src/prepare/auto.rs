//! Auto-prepare decisions of one pool: for each query shape its clients sent
//! as a simple query, whether it runs as a prepared statement.
//!
//! This module owns the shape cache (bounded; when full, its least recently
//! used eighth goes, so a flood of new shapes scans it once per eighth), the queue of shapes waiting to be validated on a side
//! server connection (bounded too, in jobs and bytes: past it, a new shape's
//! queries pass through and it is queued by a later one), and the reasons a
//! query passes through ([`PassThrough`]). A shape is keyed by the lexer's shape hash, and the
//! rewritten text and declared parameter types are compared on every hit, so
//! a hash collision can only cost a cache entry, never run another statement.
//!
//! Texts that differ only in whitespace, comments and the case of unquoted
//! words have one shape hash; each such spelling gets its own entry (its
//! rewritten text is compared on every hit), and a spelling of a shape that
//! already has a verdict takes that verdict with no validation of its own
//! ([`Shapes::respelled`]), once the lexer found the two token for token the
//! same statement. A rewritten spelling then runs the statement prepared
//! from the first text: the server's error positions point into that text,
//! and the exchange maps them back through the spelling kept here.
//!
//! It is plain shard-local state: it never blocks, never locks and does no
//! I/O. The exchange looks shapes up and queues new ones; the validator
//! (`client::autoprep`) takes jobs from the queue and installs its verdicts.
//! Until a verdict is installed, a shape's queries pass through unchanged.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::rc::Rc;
use std::task::{Poll, Waker};
use std::time::Instant;

use super::id_hash::IdMap;
use super::lexer::{LexOptions, Unsupported};
use super::registry::{Context, Statement};
use super::shape::Reason;
use crate::settings::Settings;

/// Jobs a pool's validation queue holds at most: one new shape is parsed at
/// a time, so a flood of new shapes would otherwise queue without bound.
pub const MAX_QUEUED_JOBS: usize = 64;

/// Bytes of query text (original and rewritten) the queue holds at most.
pub const MAX_QUEUED_BYTES: usize = 4 << 20;

/// A query longer than this is never checked: its parse would take long,
/// for a statement that is rarely run twice.
pub const MAX_CHECKED_LEN: usize = 1 << 20;

/// Why a simple query passed through unchanged while auto-prepare was on:
/// one counter each ([`PassThrough::index`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PassThrough {
    /// pglane does not know the client's settings exactly (it is pinned, or
    /// changing them right now): its shapes would be its own.
    UnknownSettings,
    /// Its client encoding can hide a quote or backslash in a multibyte character.
    Encoding,
    /// Extended-protocol messages of the client's are not yet Synced.
    NotSynced,
    /// In a failed transaction block.
    FailedTransaction,
    /// The lexer does not take the text.
    Lexer(Unsupported),
    /// A new shape, seen fewer times than the policy's `after`.
    Policy,
    /// Its shape is queued or being validated.
    Validating,
    /// A new shape not queued: the validation queue is full.
    QueueFull,
    /// A new shape not queued: the query is longer than [`MAX_CHECKED_LEN`].
    TooLong,
    /// Its shape could not be checked lately (no server connection free, the
    /// original failed to prepare, a literal the parser spells differently):
    /// it is tried again later.
    RetryLater,
    /// Its shape was found not rewritable.
    Refused(Reason),
}

impl PassThrough {
    /// The reasons that are neither the lexer's nor the validator's.
    const OWN: [PassThrough; 9] = [
        PassThrough::UnknownSettings,
        PassThrough::Encoding,
        PassThrough::NotSynced,
        PassThrough::FailedTransaction,
        PassThrough::Policy,
        PassThrough::Validating,
        PassThrough::QueueFull,
        PassThrough::TooLong,
        PassThrough::RetryLater,
    ];

    /// How many reasons there are.
    pub const COUNT: usize = Self::OWN.len() + Unsupported::ALL.len() + Reason::ALL.len();

    /// Every reason, in [`PassThrough::index`] order.
    pub fn all() -> impl Iterator<Item = PassThrough> {
        Self::OWN
            .into_iter()
            .chain(Unsupported::ALL.into_iter().map(PassThrough::Lexer))
            .chain(Reason::ALL.into_iter().map(PassThrough::Refused))
    }

    /// A dense index below [`PassThrough::COUNT`], for a counter array.
    pub fn index(self) -> usize {
        let own = Self::OWN.len();
        match self {
            PassThrough::Lexer(u) => own + Unsupported::ALL.iter().position(|&x| x == u).unwrap_or(0),
            PassThrough::Refused(r) => own + Unsupported::ALL.len() + Reason::ALL.iter().position(|&x| x == r).unwrap_or(0),
            own_reason => Self::OWN.iter().position(|&x| x == own_reason).unwrap_or(0),
        }
    }

    /// A stable label for stats and metrics: the lexer's reasons start with
    /// `lexer_`, the validator's with `refused_`.
    pub fn label(self) -> String {
        match self {
            PassThrough::UnknownSettings => "unknown_settings".into(),
            PassThrough::Encoding => "client_encoding".into(),
            PassThrough::NotSynced => "not_synced".into(),
            PassThrough::FailedTransaction => "failed_transaction".into(),
            PassThrough::Lexer(u) => format!("lexer_{}", u.as_str()),
            PassThrough::Policy => "policy".into(),
            PassThrough::Validating => "validating".into(),
            PassThrough::QueueFull => "queue_full".into(),
            PassThrough::TooLong => "too_long".into(),
            PassThrough::RetryLater => "retry_later".into(),
            PassThrough::Refused(r) => format!("refused_{}", r.as_str()),
        }
    }

    /// What it means, for people.
    pub fn description(self) -> String {
        match self {
            PassThrough::UnknownSettings => "the client's settings are not known exactly (pinned, or changing)".into(),
            PassThrough::Encoding => "a client encoding the lexer cannot read safely".into(),
            PassThrough::NotSynced => "sent before the client's extended-protocol messages were synced".into(),
            PassThrough::FailedTransaction => "in a failed transaction block".into(),
            PassThrough::Lexer(u) => format!("lexer: {u}"),
            PassThrough::Policy => "a new shape, not yet run auto_prepare_after times".into(),
            PassThrough::Validating => "its shape is queued for validation or being validated".into(),
            PassThrough::QueueFull => "a new shape, not queued: the validation queue is full".into(),
            PassThrough::TooLong => "a new shape, not queued: the query is too long to check".into(),
            PassThrough::RetryLater => "its shape could not be checked lately; it is tried again later".into(),
            PassThrough::Refused(r) => format!("refused: {r}"),
        }
    }
}

/// Queries passed through, per [`PassThrough`] reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PassThroughCounts([u64; PassThrough::COUNT]);

impl Default for PassThroughCounts {
    fn default() -> Self {
        PassThroughCounts([0; PassThrough::COUNT])
    }
}

impl PassThroughCounts {
    pub fn count(&mut self, reason: PassThrough) {
        self.0[reason.index()] += 1;
    }

    pub fn get(&self, reason: PassThrough) -> u64 {
        self.0[reason.index()]
    }

    pub fn add(&mut self, other: &PassThroughCounts) {
        for (a, b) in self.0.iter_mut().zip(other.0.iter()) {
            *a += b;
        }
    }

    /// Every reason with its count.
    pub fn iter(&self) -> impl Iterator<Item = (PassThrough, u64)> + '_ {
        PassThrough::all().map(|reason| (reason, self.get(reason)))
    }

    pub fn total(&self) -> u64 {
        self.0.iter().sum()
    }
}

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

/// The query a shape's verdict was reached on: other spellings are compared
/// with it, and a rewritten one maps error positions through it.
#[derive(Debug)]
pub struct Spelling {
    pub sql: Box<str>,
    pub options: LexOptions,
}

/// What the exchange does with a query of this shape.
#[derive(Debug)]
pub enum Lookup {
    /// Run it as this statement; with the spelling the statement was
    /// prepared from when that is not this query's.
    Rewrite(Rc<Statement>, Option<Rc<Spelling>>),
    PassThrough(PassThrough),
    /// Unknown, or due for another try: pass it through, and queue it if
    /// [`Shapes::note`] says so.
    Miss,
}

/// A shape to validate: what the validator needs, owned.
#[derive(Debug, Clone)]
pub struct Job {
    /// The settings context of the shape, and the client's settings in it,
    /// which the side connection takes before it checks the shape.
    pub context: Context,
    pub settings: Settings,
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

impl Job {
    /// The bytes it holds, counted against [`MAX_QUEUED_BYTES`].
    fn bytes(&self) -> usize {
        self.sql.len() + self.original.len()
    }
}

#[derive(Debug)]
struct Entry {
    context: Context,
    sql: Box<str>,
    param_types: Box<[u32]>,
    decision: Decision,
    used: u64,
    /// The query the verdict was reached on (once there is one).
    spelling: Option<Rc<Spelling>>,
    /// The verdict is another spelling's ([`Shapes::respelled`]).
    respelled: bool,
}

impl Entry {
    fn is(&self, context: Context, sql: &str, param_types: &[u32]) -> bool {
        self.context == context && &*self.sql == sql && &*self.param_types == param_types
    }
}

pub struct Shapes {
    by_hash: RefCell<IdMap<u64, Vec<Entry>>>,
    len: Cell<usize>,
    capacity: usize,
    clock: Cell<u64>,
    queue: RefCell<VecDeque<Job>>,
    /// The bytes of the queued jobs.
    queued_bytes: Cell<usize>,
    /// Shapes whose parser check runs now, off the shard thread.
    parsing: Cell<u64>,
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
            queued_bytes: Cell::new(0),
            parsing: Cell::new(0),
            waker: RefCell::default(),
            validator: Cell::new(false),
            epoch: Cell::new(0),
        }
    }

    /// The hot path: what to do with a query whose shape hash, rewritten
    /// text and parameter types are these.
    pub fn lookup(&self, context: Context, hash: u64, sql: &str, param_types: &[u32], now: impl FnOnce() -> Instant) -> Lookup {
        let clock = self.tick();
        let mut map = self.by_hash.borrow_mut();
        let Some(entry) = map.get_mut(&hash).and_then(|v| v.iter_mut().find(|e| e.is(context, sql, param_types))) else {
            return Lookup::Miss;
        };
        entry.used = clock;
        match &entry.decision {
            Decision::Rewrite(statement) => {
                Lookup::Rewrite(statement.clone(), if entry.respelled { entry.spelling.clone() } else { None })
            }
            Decision::PassThrough(reason) => Lookup::PassThrough(PassThrough::Refused(*reason)),
            Decision::Pending => Lookup::PassThrough(PassThrough::Validating),
            Decision::RetryAfter(at) if now() < *at => Lookup::PassThrough(PassThrough::RetryLater),
            Decision::RetryAfter(_) | Decision::Seen(_) => Lookup::Miss,
        }
    }

    /// A query of a shape [`Shapes::lookup`] missed ran as it was: counts it,
    /// and queues the shape for validation once it has been seen `after`
    /// times, if the queue has room. Returns why the query passed through:
    /// [`PassThrough::Validating`] if the shape was queued.
    pub fn note(
        &self,
        context: Context,
        job: impl FnOnce(u64) -> Job,
        hash: u64,
        sql: &str,
        param_types: &[u32],
        after: u32,
    ) -> PassThrough {
        let clock = self.tick();
        let seen = {
            let mut map = self.by_hash.borrow_mut();
            match map.get_mut(&hash).and_then(|v| v.iter_mut().find(|e| e.is(context, sql, param_types))) {
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
        if seen < after {
            self.put(context, hash, sql, param_types, Decision::Seen(seen), clock);
            return PassThrough::Policy;
        }
        // (The rewritten text is about as long as the original.)
        if sql.len() > MAX_CHECKED_LEN {
            // Remembered as seen: the next query of the shape is looked at again.
            self.put(context, hash, sql, param_types, Decision::Seen(seen), clock);
            return PassThrough::TooLong;
        }
        let job = job(self.epoch.get());
        let bytes = self.queued_bytes.get() + job.bytes();
        if self.queue.borrow().len() >= MAX_QUEUED_JOBS || bytes > MAX_QUEUED_BYTES {
            self.put(context, hash, sql, param_types, Decision::Seen(seen), clock);
            return PassThrough::QueueFull;
        }
        self.put(context, hash, sql, param_types, Decision::Pending, clock);
        self.queued_bytes.set(bytes);
        self.queue.borrow_mut().push_back(job);
        if let Some(waker) = self.waker.borrow_mut().take() {
            waker.wake();
        }
        PassThrough::Validating
    }

    /// Installs the validator's verdict for `job`'s shape, unless the cache
    /// was cleared since it was queued. Returns whether it was installed.
    pub fn decide(&self, job: &Job, decision: Decision) -> bool {
        if job.epoch != self.epoch.get() {
            return false;
        }
        let mut map = self.by_hash.borrow_mut();
        match map.get_mut(&job.hash).and_then(|v| v.iter_mut().find(|e| e.is(job.context, &job.sql, &job.param_types))) {
            Some(entry) if matches!(entry.decision, Decision::Pending) => {
                if matches!(decision, Decision::Rewrite(_) | Decision::PassThrough(_)) {
                    entry.spelling = Some(Rc::new(Spelling { sql: job.original.clone(), options: job.options }));
                }
                entry.decision = decision;
                true
            }
            _ => false,
        }
    }

    /// A query [`Shapes::lookup`] missed may be another spelling of a shape
    /// with a verdict (the same hash and parameter types): if `same` finds
    /// it the same statement as the query that verdict was reached on, this
    /// spelling is cached with that verdict, and its lookup is returned.
    pub fn respelled(
        &self,
        context: Context,
        hash: u64,
        sql: &str,
        param_types: &[u32],
        mut same: impl FnMut(&Spelling) -> bool,
    ) -> Option<Lookup> {
        let candidates: Vec<(Rc<Spelling>, Decision)> = {
            let map = self.by_hash.borrow();
            map.get(&hash)?
                .iter()
                .filter(|e| !e.respelled && e.context == context && &*e.param_types == param_types)
                .filter_map(|e| Some((e.spelling.clone()?, e.decision.clone())))
                .collect()
        };
        let (spelling, decision) = candidates.into_iter().find(|(spelling, _)| same(spelling))?;
        let clock = self.tick();
        self.put(context, hash, sql, param_types, decision, clock);
        let mut map = self.by_hash.borrow_mut();
        let entry = map.get_mut(&hash).and_then(|v| v.iter_mut().find(|e| e.is(context, sql, param_types)))?;
        entry.spelling = Some(spelling.clone());
        entry.respelled = true;
        Some(match &entry.decision {
            Decision::Rewrite(statement) => Lookup::Rewrite(statement.clone(), Some(spelling)),
            Decision::PassThrough(reason) => Lookup::PassThrough(PassThrough::Refused(*reason)),
            _ => Lookup::Miss,
        })
    }

    /// The verdict for a shape, if it is cached (for tests and the admin console).
    pub fn decision(&self, context: Context, hash: u64, sql: &str, param_types: &[u32]) -> Option<Decision> {
        let map = self.by_hash.borrow();
        map.get(&hash)?.iter().find(|e| e.is(context, sql, param_types)).map(|e| e.decision.clone())
    }

    /// Forgets every shape and queued job (after DDL or a stale plan); returns
    /// the statements the shapes ran as.
    pub fn clear(&self) -> Vec<Rc<Statement>> {
        self.epoch.set(self.epoch.get() + 1);
        self.queue.borrow_mut().clear();
        self.queued_bytes.set(0);
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
    pub fn poll_job(&self, cx: &mut std::task::Context<'_>) -> Poll<Job> {
        match self.queue.borrow_mut().pop_front() {
            Some(job) => {
                self.queued_bytes.set(self.queued_bytes.get().saturating_sub(job.bytes()));
                Poll::Ready(job)
            }
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

    /// Shapes queued for validation now.
    pub fn queued(&self) -> usize {
        self.queue.borrow().len()
    }

    /// Counts a parser check that runs off the shard thread until the
    /// returned guard is dropped.
    pub fn parsing(&self) -> impl Drop + '_ {
        struct Parsing<'a>(&'a Cell<u64>);
        impl Drop for Parsing<'_> {
            fn drop(&mut self) {
                self.0.set(self.0.get() - 1);
            }
        }
        self.parsing.set(self.parsing.get() + 1);
        Parsing(&self.parsing)
    }

    /// Parser checks running now.
    pub fn parses_in_flight(&self) -> u64 {
        self.parsing.get()
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

    fn put(&self, context: Context, hash: u64, sql: &str, param_types: &[u32], decision: Decision, clock: u64) {
        let mut map = self.by_hash.borrow_mut();
        if let Some(entry) = map.get_mut(&hash).and_then(|v| v.iter_mut().find(|e| e.is(context, sql, param_types))) {
            entry.decision = decision;
            return;
        }
        if self.len.get() >= self.capacity {
            let evicted = evict_oldest(&mut map, (self.capacity / EVICT_FRACTION).max(1));
            self.len.set(self.len.get() - evicted);
        }
        let entry = Entry {
            context,
            sql: sql.into(),
            param_types: param_types.into(),
            decision,
            used: clock,
            spelling: None,
            respelled: false,
        };
        map.entry(hash).or_default().push(entry);
        self.len.set(self.len.get() + 1);
    }
}

/// A full cache drops this fraction of its shapes at once, so that a flood
/// of new shapes costs one scan of the cache per `capacity / EVICT_FRACTION`
/// new shapes, not one per shape.
const EVICT_FRACTION: usize = 8;

/// Removes the `count` least recently used entries (the miss path only: a
/// scan); returns how many it removed. Every entry's `used` tick is its own.
fn evict_oldest(map: &mut IdMap<u64, Vec<Entry>>, count: usize) -> usize {
    let mut ticks: Vec<u64> = map.values().flatten().map(|e| e.used).collect();
    if ticks.is_empty() || count == 0 {
        return 0;
    }
    let nth = count.min(ticks.len()) - 1;
    let (_, &mut newest_evicted, _) = ticks.select_nth_unstable(nth);
    let mut evicted = 0;
    map.retain(|_, v| {
        let before = v.len();
        v.retain(|e| e.used > newest_evicted);
        evicted += before - v.len();
        !v.is_empty()
    });
    evicted
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
            context: Context::DEFAULT,
            settings: Settings::default(),
            hash,
            sql: sql.into(),
            param_types: Box::new([23]),
            original: "select 1".into(),
            options: LexOptions::default(),
            epoch,
        }
    }

    fn lookup(shapes: &Shapes, hash: u64, sql: &str) -> Lookup {
        shapes.lookup(Context::DEFAULT, hash, sql, &[23], Instant::now)
    }

    fn take(shapes: &Shapes) -> Option<Job> {
        let waker = futures_lite::future::block_on(futures_lite::future::poll_fn(|cx| Poll::Ready(cx.waker().clone())));
        match shapes.poll_job(&mut std::task::Context::from_waker(&waker)) {
            Poll::Ready(job) => Some(job),
            Poll::Pending => None,
        }
    }

    #[test]
    fn a_shape_passes_through_until_its_verdict_is_installed() {
        let shapes = Shapes::new(10);
        let registry = Registry::new(0, 10);
        assert!(matches!(lookup(&shapes, 7, "select $1"), Lookup::Miss));
        assert_eq!(shapes.note(Context::DEFAULT, job(7, "select $1"), 7, "select $1", &[23], 1), PassThrough::Validating);
        assert!(matches!(lookup(&shapes, 7, "select $1"), Lookup::PassThrough(PassThrough::Validating)));
        let queued = take(&shapes).expect("queued");
        assert!(take(&shapes).is_none(), "queued once");
        let statement = registry.register(Context::DEFAULT, b"select $1\0\0\x01\0\0\0\x17");
        assert!(shapes.decide(&queued, Decision::Rewrite(statement.clone())));
        match lookup(&shapes, 7, "select $1") {
            Lookup::Rewrite(s, None) => assert!(Rc::ptr_eq(&s, &statement)),
            other => panic!("{other:?}"),
        }
        // The same hash with another text or other types is another shape.
        assert!(matches!(lookup(&shapes, 7, "select  $1"), Lookup::Miss));
        assert!(matches!(shapes.lookup(Context::DEFAULT, 7, "select $1", &[20], Instant::now), Lookup::Miss));
    }

    #[test]
    fn the_policy_can_wait_for_several_executions() {
        let shapes = Shapes::new(10);
        assert_eq!(shapes.note(Context::DEFAULT, job(1, "a"), 1, "a", &[23], 3), PassThrough::Policy);
        assert!(matches!(lookup(&shapes, 1, "a"), Lookup::Miss));
        assert_eq!(shapes.note(Context::DEFAULT, job(1, "a"), 1, "a", &[23], 3), PassThrough::Policy);
        assert_eq!(shapes.note(Context::DEFAULT, job(1, "a"), 1, "a", &[23], 3), PassThrough::Validating);
        assert!(take(&shapes).is_some());
    }

    #[test]
    fn a_verdict_reached_before_a_clear_is_dropped() {
        let shapes = Shapes::new(10);
        let registry = Registry::new(0, 10);
        shapes.note(Context::DEFAULT, job(1, "a"), 1, "a", &[23], 1);
        let queued = take(&shapes).expect("queued");
        shapes.note(Context::DEFAULT, job(2, "b"), 2, "b", &[23], 1);
        let statement = registry.register(Context::DEFAULT, b"b");
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
        shapes.note(Context::DEFAULT, job(1, "a"), 1, "a", &[23], 1);
        let queued = take(&shapes).expect("queued");
        let later = Instant::now() + std::time::Duration::from_secs(60);
        shapes.decide(&queued, Decision::RetryAfter(later));
        assert!(matches!(lookup(&shapes, 1, "a"), Lookup::PassThrough(PassThrough::RetryLater)));
        assert!(matches!(shapes.lookup(Context::DEFAULT, 1, "a", &[23], || later), Lookup::Miss));
        assert_eq!(shapes.note(Context::DEFAULT, job(1, "a"), 1, "a", &[23], 1), PassThrough::Validating);
    }

    #[test]
    fn another_spelling_takes_a_verdict_once_found_the_same_statement() {
        let shapes = Shapes::new(10);
        let registry = Registry::new(0, 10);
        shapes.note(Context::DEFAULT, job(7, "select $1"), 7, "select $1", &[23], 1);
        assert!(shapes.respelled(Context::DEFAULT, 7, "SELECT $1", &[23], |_| true).is_none(), "no verdict yet");
        let queued = take(&shapes).expect("queued");
        let statement = registry.register(Context::DEFAULT, b"select $1\0\0\x01\0\0\0\x17");
        assert!(shapes.decide(&queued, Decision::Rewrite(statement.clone())));
        assert!(shapes.respelled(Context::DEFAULT, 7, "SELECT $1", &[23], |_| false).is_none(), "not the same statement");
        assert!(shapes.respelled(Context::DEFAULT, 7, "SELECT $1", &[20], |_| panic!("other types")).is_none());
        let mut compared = Vec::new();
        match shapes.respelled(Context::DEFAULT, 7, "SELECT $1", &[23], |first| {
            compared.push(first.sql.to_string());
            true
        }) {
            Some(Lookup::Rewrite(s, Some(first))) => {
                assert!(Rc::ptr_eq(&s, &statement));
                assert_eq!(&*first.sql, "select 1");
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(compared, ["select 1"], "compared with the query the verdict was reached on");
        // Cached: a hit from now on, which names the first spelling.
        assert!(matches!(lookup(&shapes, 7, "SELECT $1"), Lookup::Rewrite(_, Some(_))));
        assert!(matches!(lookup(&shapes, 7, "select $1"), Lookup::Rewrite(_, None)));
        assert_eq!(shapes.len(), 2);
        // A refusal is taken the same way.
        shapes.note(Context::DEFAULT, job(8, "show $1"), 8, "show $1", &[23], 1);
        let queued = take(&shapes).expect("queued");
        assert!(shapes.decide(&queued, Decision::PassThrough(Reason::Utility)));
        assert!(matches!(
            shapes.respelled(Context::DEFAULT, 8, "SHOW $1", &[23], |_| true),
            Some(Lookup::PassThrough(PassThrough::Refused(Reason::Utility)))
        ));
        assert!(shapes.clear().iter().all(|s| Rc::ptr_eq(s, &statement)), "one statement, however many spellings");
    }

    #[test]
    fn a_refused_shape_passes_through_with_its_reason() {
        let shapes = Shapes::new(10);
        shapes.note(Context::DEFAULT, job(1, "a"), 1, "a", &[23], 1);
        let queued = take(&shapes).expect("queued");
        assert!(shapes.decide(&queued, Decision::PassThrough(Reason::Utility)));
        assert!(matches!(lookup(&shapes, 1, "a"), Lookup::PassThrough(PassThrough::Refused(Reason::Utility))));
    }

    #[test]
    fn the_queue_is_bounded_and_a_shape_left_out_is_queued_by_a_later_query() {
        let shapes = Shapes::new(1000);
        let texts: Vec<String> = (0..=MAX_QUEUED_JOBS).map(|i| format!("select {i}")).collect();
        for (i, text) in texts.iter().enumerate() {
            let want = if i < MAX_QUEUED_JOBS { PassThrough::Validating } else { PassThrough::QueueFull };
            assert_eq!(shapes.note(Context::DEFAULT, job(i as u64, text), i as u64, text, &[23], 1), want, "{text}");
        }
        assert_eq!(shapes.queued(), MAX_QUEUED_JOBS);
        let last = texts.last().expect("texts");
        let hash = MAX_QUEUED_JOBS as u64;
        // Left out: not pending, so its next query tries again.
        assert!(matches!(lookup(&shapes, hash, last), Lookup::Miss));
        assert_eq!(shapes.note(Context::DEFAULT, job(hash, last), hash, last, &[23], 1), PassThrough::QueueFull);
        take(&shapes).expect("a job");
        assert_eq!(shapes.note(Context::DEFAULT, job(hash, last), hash, last, &[23], 1), PassThrough::Validating);
        assert!(matches!(lookup(&shapes, hash, last), Lookup::PassThrough(PassThrough::Validating)));
    }

    #[test]
    fn the_queue_is_bounded_in_bytes() {
        let shapes = Shapes::new(1000);
        let big = "x".repeat(MAX_CHECKED_LEN / 4);
        let big_job = |hash: u64, sql: &str| {
            let sql: Box<str> = sql.into();
            move |epoch| Job {
                context: Context::DEFAULT,
                settings: Settings::default(),
                hash,
                sql: sql.clone(),
                param_types: Box::new([23]),
                original: sql,
                options: LexOptions::default(),
                epoch,
            }
        };
        // Each job holds its text twice (as original and as statement).
        let fits = MAX_QUEUED_BYTES / (2 * (big.len() + 1));
        assert!(fits < MAX_QUEUED_JOBS);
        for i in 0..fits {
            let text = format!("{big}{i}");
            assert_eq!(
                shapes.note(Context::DEFAULT, big_job(i as u64, &text), i as u64, &text, &[23], 1),
                PassThrough::Validating
            );
        }
        let text = format!("{big}x");
        assert_eq!(shapes.note(Context::DEFAULT, big_job(99, &text), 99, &text, &[23], 1), PassThrough::QueueFull);
        take(&shapes).expect("a job");
        assert_eq!(shapes.note(Context::DEFAULT, big_job(99, &text), 99, &text, &[23], 1), PassThrough::Validating);
        // Too long to check at all.
        let huge = "y".repeat(MAX_CHECKED_LEN + 1);
        assert_eq!(shapes.note(Context::DEFAULT, big_job(100, &huge), 100, &huge, &[23], 1), PassThrough::TooLong);
        shapes.clear();
        assert_eq!(shapes.queued(), 0);
        assert_eq!(shapes.note(Context::DEFAULT, big_job(101, &big), 101, &big, &[23], 1), PassThrough::Validating);
    }

    #[test]
    fn pass_through_reasons_have_dense_indexes_and_distinct_labels() {
        let all: Vec<PassThrough> = PassThrough::all().collect();
        assert_eq!(all.len(), PassThrough::COUNT);
        for (i, reason) in all.iter().enumerate() {
            assert_eq!(reason.index(), i, "{reason:?}");
        }
        let labels: std::collections::HashSet<String> = all.iter().map(|r| r.label()).collect();
        assert_eq!(labels.len(), PassThrough::COUNT);
    }

    #[test]
    fn a_full_cache_drops_its_oldest_eighth_at_once() {
        let shapes = Shapes::new(16);
        let texts: Vec<String> = (0..17).map(|i| format!("s{i}")).collect();
        for (i, t) in texts.iter().enumerate().take(16) {
            shapes.note(Context::DEFAULT, job(i as u64, t), i as u64, t, &[23], 5);
        }
        // s0 is used again: s1 and s2 are the oldest now.
        lookup(&shapes, 0, "s0");
        shapes.note(Context::DEFAULT, job(16, &texts[16]), 16, &texts[16], &[23], 5);
        assert_eq!(shapes.len(), 15);
        for (i, t) in texts.iter().enumerate() {
            assert_eq!(shapes.decision(Context::DEFAULT, i as u64, t, &[23]).is_some(), !matches!(i, 1 | 2), "{t}");
        }
    }

    #[test]
    fn the_least_recently_used_shape_is_evicted() {
        let shapes = Shapes::new(2);
        shapes.note(Context::DEFAULT, job(1, "a"), 1, "a", &[23], 5);
        shapes.note(Context::DEFAULT, job(2, "b"), 2, "b", &[23], 5);
        lookup(&shapes, 1, "a");
        shapes.note(Context::DEFAULT, job(3, "c"), 3, "c", &[23], 5);
        assert_eq!(shapes.len(), 2);
        assert!(shapes.decision(Context::DEFAULT, 1, "a", &[23]).is_some());
        assert!(shapes.decision(Context::DEFAULT, 2, "b", &[23]).is_none());
        assert!(shapes.decision(Context::DEFAULT, 3, "c", &[23]).is_some());
    }
}
