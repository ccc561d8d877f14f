//! The shard's statement registry, a client's statement names, and a server
//! connection's prepared set.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::{Rc, Weak};

use bytes::Bytes;

use super::auto::{PassThroughCounts, Shapes};
use super::id_hash::IdMap;
use crate::settings::Change;

/// One distinct statement of the shard.
#[derive(Debug)]
pub struct Statement {
    pub id: u64,
    /// The name pglane gives it on servers: `pglane_<shard>_<id>`.
    pub server_name: Rc<str>,
    /// The Parse body after the name (query text, parameter types): what
    /// makes two statements the same, with `context`, and what pglane sends
    /// to prepare it on another server connection.
    pub key: Bytes,
    /// The settings its text was resolved in (see [`Context`]).
    pub context: Context,
    /// A server has accepted this Parse, so later Parses of it can be answered
    /// without asking one.
    pub validated: Cell<bool>,
    /// A server's answer to Describe of this statement (ParameterDescription
    /// and RowDescription or NoData, as sent), to answer later Describes with.
    pub description: RefCell<Option<Bytes>>,
    /// The last such answer clients were given, kept when the statement is
    /// retired: what its result columns must still be when it is prepared
    /// on another server connection.
    pub described: RefCell<Option<Bytes>>,
    /// What pglane has seen of its result rows: binary format negotiation
    /// reads a negotiated portal's rows whole, so columns of unbounded size
    /// are negotiated only for statements that have shown small rows
    /// (`client::negotiate::small_rows`).
    pub rows: Cell<RowRecord>,
    /// Whether running it leaves a server session as it found it (the
    /// client's exchange works it out from the text when it first asks).
    pub leaves_session_alone: std::cell::OnceCell<bool>,
    /// It is the registry's statement for its key: false once retired or
    /// forgotten (a later Parse of the text gets another statement).
    pub registered: Cell<bool>,
    /// When a run of it with another client's request behind it last took
    /// long (`pool::opening::SLOW`): for a while, no request goes behind it.
    pub slow_at: Cell<Option<std::time::Instant>>,
    /// The settings running it changes, if its text is a SET pglane follows
    /// (the client's exchange works it out from the text when it first asks).
    pub changes: std::cell::OnceCell<Option<Rc<[Change]>>>,
}

/// The sizes of one statement's DataRows, as seen by the relay. Plain data:
/// the policy is `client::negotiate`'s.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct RowRecord {
    /// Executions (Execute messages answered) whose every row was seen.
    pub executions: u32,
    /// The largest DataRow body seen, in bytes.
    pub largest_row: usize,
    /// A row went over the small-row cap: its columns of unbounded size are
    /// never negotiated again.
    pub too_big: bool,
}

/// Counters of the registry, for the admin console and metrics.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct PrepareStats {
    /// Parse messages with a name received from clients.
    pub client_parses: u64,
    /// Parse messages pglane sent to servers (forwarded or injected).
    pub server_parses: u64,
    /// Client Parses answered without a server round trip.
    pub parses_answered: u64,
    /// Close messages sent to servers to evict statements.
    pub evictions: u64,
    /// Describe (statement) messages answered from the cache.
    pub describes_answered: u64,
    /// Auto-prepare: shapes cached now (a gauge, filled in by `Registry::stats`).
    pub shapes: u64,
    /// Simple queries run as a prepared statement.
    pub rewrites: u64,
    /// Simple queries passed through unchanged while auto-prepare is on
    /// (not lexed, not preparable, or not validated yet).
    pub pass_throughs: u64,
    /// The same, by reason (they add up to `pass_throughs`).
    pub pass_through_reasons: PassThroughCounts,
    /// Nanoseconds pglane spent on the timed simple queries it rewrote
    /// (lexing, the shape lookup, building Parse/Bind/Execute), and on the
    /// timed ones it passed through (lexing, the lookup, queueing a new
    /// shape); one query in 16 is timed, so the averages are
    /// `rewrite_ns / rewrites_timed` and `pass_through_ns / pass_through_timed`.
    pub rewrite_ns: u64,
    pub rewrites_timed: u64,
    pub pass_through_ns: u64,
    pub pass_through_timed: u64,
    /// Shapes queued for validation now, and whose parser check runs now
    /// (gauges, filled in by `Registry::stats`).
    pub shapes_queued: u64,
    pub parses_in_flight: u64,
    /// Spellings of a shape (other whitespace, comments, case of unquoted
    /// words) that took the verdict of one validated before.
    pub respellings: u64,
    /// Shapes validated on a side connection, and those found not to be rewritable.
    pub validations: u64,
    pub validation_failures: u64,
    /// Unnamed statements (Parse "") run as a named statement of the registry.
    pub unnamed_mapped: u64,
    /// Requests run again, without the client seeing the error, because
    /// their statement was stale on the server (DDL pglane did not see):
    /// rewritten queries as plain queries, and a Parse pglane answered with
    /// its Bind and Execute sent again, prepared afresh (`exchange::replay`).
    pub reruns: u64,
    /// Binds forwarded asking binary for columns the client wants as text
    /// (binary format negotiation).
    pub portals_negotiated: u64,
    /// Non-NULL values pglane turned from binary into the client's text.
    pub values_transcoded: u64,
    /// Text bytes the client got minus binary bytes the server sent for
    /// those values: what the server did not have to send (negative where
    /// text is shorter, as for small integers).
    pub transcode_bytes_saved: i64,
    /// DataRows of negotiated portals over the small-row cap (read whole and
    /// transcoded all the same).
    pub big_rows: u64,
    /// Statements marked never to negotiate columns of unbounded size again,
    /// because one of their rows went over the small-row cap.
    pub big_row_statements: u64,
}

impl PrepareStats {
    pub fn add(&mut self, o: &PrepareStats) {
        self.client_parses += o.client_parses;
        self.server_parses += o.server_parses;
        self.parses_answered += o.parses_answered;
        self.evictions += o.evictions;
        self.describes_answered += o.describes_answered;
        self.shapes += o.shapes;
        self.rewrites += o.rewrites;
        self.pass_throughs += o.pass_throughs;
        self.pass_through_reasons.add(&o.pass_through_reasons);
        self.rewrite_ns += o.rewrite_ns;
        self.rewrites_timed += o.rewrites_timed;
        self.pass_through_ns += o.pass_through_ns;
        self.pass_through_timed += o.pass_through_timed;
        self.shapes_queued += o.shapes_queued;
        self.parses_in_flight += o.parses_in_flight;
        self.respellings += o.respellings;
        self.validations += o.validations;
        self.validation_failures += o.validation_failures;
        self.unnamed_mapped += o.unnamed_mapped;
        self.reruns += o.reruns;
        self.portals_negotiated += o.portals_negotiated;
        self.values_transcoded += o.values_transcoded;
        self.transcode_bytes_saved += o.transcode_bytes_saved;
        self.big_rows += o.big_rows;
        self.big_row_statements += o.big_row_statements;
    }
}

/// The settings a statement's text was resolved in, as far as they change
/// what PostgreSQL makes of it at Parse (`crate::settings::Settings::parse_context`):
/// an interned id of their values, or a client's private one. Two clients
/// share a server statement only when its text, parameter types and
/// context are the same.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Context(u32);

impl Context {
    /// Every setting at the server's default.
    pub const DEFAULT: Context = Context(0);

    /// A context no other client has (see [`Registry::private_context`]).
    pub fn is_private(self) -> bool {
        self.0 & PRIVATE != 0
    }
}

/// The bit of a private [`Context`].
const PRIVATE: u32 = 1 << 31;

/// Contexts interned before the table starts over (a client that sets its
/// TimeZone to thousands of values must not grow it without bound; the
/// statements of forgotten contexts are only not shared any more).
const CONTEXTS_KEPT: usize = 4096;

/// One pool's statements, keyed by context and Parse body.
pub struct Registry {
    shard: usize,
    by_key: RefCell<IdMap<Context, HashMap<Bytes, Rc<Statement>>>>,
    /// Interned contexts: [`Settings::parse_context`] bytes to their id.
    ///
    /// [`Settings::parse_context`]: crate::settings::Settings::parse_context
    contexts: RefCell<HashMap<Vec<u8>, Context>>,
    next_context: Cell<u32>,
    next_id: Cell<u64>,
    /// Above this many statements, those no client refers to are dropped.
    capacity: usize,
    len: Cell<usize>,
    stats: RefCell<PrepareStats>,
    /// Auto-prepare's shape decisions for this pool.
    pub shapes: Shapes,
    /// Called by [`Registry::ddl_seen`].
    on_ddl: RefCell<Option<Box<dyn Fn()>>>,
}

impl Registry {
    pub fn new(shard: usize, capacity: usize) -> Registry {
        Registry {
            shard,
            by_key: RefCell::default(),
            contexts: RefCell::default(),
            next_context: Cell::new(1),
            next_id: Cell::new(1),
            capacity: capacity.max(1),
            len: Cell::new(0),
            stats: RefCell::default(),
            shapes: Shapes::new(capacity),
            on_ddl: RefCell::default(),
        }
    }

    /// The context of these settings' values (`parse_context` bytes): the
    /// same id for the same bytes, [`Context::DEFAULT`] for none.
    pub fn context(&self, values: &[u8]) -> Context {
        if values.is_empty() {
            return Context::DEFAULT;
        }
        let mut contexts = self.contexts.borrow_mut();
        if let Some(&context) = contexts.get(values) {
            return context;
        }
        if contexts.len() >= CONTEXTS_KEPT {
            contexts.clear();
        }
        let context = Context(self.next_context());
        contexts.insert(values.to_vec(), context);
        context
    }

    /// A context of one client's own, shared with no one: for statements
    /// it parses while pglane does not know its settings exactly.
    pub fn private_context(&self) -> Context {
        Context(self.next_context() | PRIVATE)
    }

    fn next_context(&self) -> u32 {
        let n = self.next_context.get();
        self.next_context.set(if n + 1 >= PRIVATE { 1 } else { n + 1 });
        n
    }

    /// The statement for this Parse body in `context`, registered if new.
    ///
    /// The same text is a different statement in another context
    /// (schema-per-tenant: `select x from t` is another table, maybe with
    /// another result type; `'...'::timestamptz` another instant in another
    /// TimeZone), so clients share a server statement only when both match.
    pub fn register(&self, context: Context, body: &[u8]) -> Rc<Statement> {
        if let Some(s) = self.by_key.borrow().get(&context).and_then(|m| m.get(body)) {
            return s.clone();
        }
        self.trim();
        let id = self.next_id.get();
        self.next_id.set(id + 1);
        let key = Bytes::copy_from_slice(body);
        let statement = Rc::new(Statement {
            id,
            server_name: format!("pglane_{}_{}", self.shard, id).into(),
            key: key.clone(),
            context,
            validated: Cell::new(false),
            description: RefCell::new(None),
            described: RefCell::new(None),
            rows: Cell::new(RowRecord::default()),
            leaves_session_alone: std::cell::OnceCell::new(),
            registered: Cell::new(true),
            slow_at: Cell::new(None),
            changes: std::cell::OnceCell::new(),
        });
        self.by_key.borrow_mut().entry(context).or_default().insert(key, statement.clone());
        self.len.set(self.len.get() + 1);
        statement
    }

    /// [`Registry::register`] for a client whose last Parse of the same
    /// kind (its unnamed statement) gave it `last`, with `recent` the
    /// statements such Parses gave lately: one of those again without a
    /// lookup if it is the one `register` would return (same context, same
    /// body, still registered). Drivers that send the unnamed statement's
    /// Parse before every Bind send the same text over and over, or a
    /// transaction's few texts in turn (the lookup hashes the whole text).
    pub fn register_again(
        &self,
        last: Option<&Rc<Statement>>,
        recent: &mut RecentStatements,
        context: Context,
        body: &[u8],
    ) -> Rc<Statement> {
        let current = |s: &Statement| s.registered.get() && s.context == context && s.key[..] == *body;
        if let Some(s) = last.filter(|s| current(s)) {
            return s.clone();
        }
        if let Some(s) = recent.find(current) {
            return s;
        }
        let statement = self.register(context, body);
        recent.note(&statement);
        statement
    }

    /// Forgets a statement whose Parse failed, unless a client still holds it.
    pub fn forget_failed(&self, statement: &Rc<Statement>) {
        if !statement.validated.get() && Rc::strong_count(statement) <= 2 {
            self.remove_if_current(statement);
        }
    }

    /// Removes `statement` from the map unless another statement took its
    /// key since (it was retired, and its text registered again).
    fn remove_if_current(&self, statement: &Rc<Statement>) {
        let mut map = self.by_key.borrow_mut();
        let Some(statements) = map.get_mut(&statement.context) else { return };
        if statements.get(&statement.key).is_some_and(|s| Rc::ptr_eq(s, statement)) {
            statements.remove(&statement.key);
            statement.registered.set(false);
            self.len.set(self.len.get() - 1);
            if statements.is_empty() {
                map.remove(&statement.context);
            }
        }
    }

    /// The server's plan for this statement no longer fits its text (DDL
    /// changed a result type): later Parses of the text get a new statement,
    /// prepared afresh everywhere, as a direct connection's new PREPARE would.
    pub fn retire(&self, statement: &Rc<Statement>) {
        self.remove_if_current(statement);
        statement.description.borrow_mut().take();
    }

    /// Drops statements no client refers to while over capacity.
    fn trim(&self) {
        if self.len.get() < self.capacity {
            return;
        }
        let mut map = self.by_key.borrow_mut();
        for statements in map.values_mut() {
            statements.retain(|_, s| {
                let held = Rc::strong_count(s) > 1;
                s.registered.set(held);
                held
            });
        }
        map.retain(|_, statements| !statements.is_empty());
        self.len.set(map.values().map(HashMap::len).sum());
    }

    pub fn len(&self) -> usize {
        self.len.get()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn stats(&self) -> PrepareStats {
        PrepareStats {
            shapes: self.shapes.len() as u64,
            shapes_queued: self.shapes.queued() as u64,
            parses_in_flight: self.shapes.parses_in_flight(),
            ..*self.stats.borrow()
        }
    }

    /// DDL ran (through pglane, or found out from a description or plan
    /// that changed): every statement and shape of this pool is resolved
    /// again ([`Registry::schema_changed`]), and so are those of the other
    /// pools and shards of the database, through the hook the shard set.
    pub fn ddl_seen(&self) {
        self.schema_changed();
        if let Some(hook) = self.on_ddl.borrow().as_ref() {
            hook();
        }
    }

    /// What [`Registry::ddl_seen`] calls besides (the shard tells the
    /// database's other registries).
    pub fn set_ddl_hook(&self, hook: Box<dyn Fn()>) {
        *self.on_ddl.borrow_mut() = Some(hook);
    }

    /// The schema may have changed (DDL, a stale plan): every shape is
    /// validated again before it is rewritten, and statements are prepared
    /// afresh, under new names, for the next Parse of their text.
    pub fn schema_changed(&self) {
        for statement in self.shapes.clear() {
            self.retire(&statement);
        }
        let all: Vec<Rc<Statement>> = self.by_key.borrow().values().flat_map(|m| m.values().cloned()).collect();
        for statement in &all {
            self.retire(statement);
        }
    }

    /// Changes the counters in place (the struct is too big to copy in and
    /// out of a `Cell` on every query).
    pub fn count(&self, f: impl FnOnce(&mut PrepareStats)) {
        f(&mut self.stats.borrow_mut());
    }
}

/// A client went past its statement limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StatementLimit(pub usize);

/// One client's names for the shard's statements.
#[derive(Debug)]
pub struct ClientStatements {
    names: HashMap<String, Rc<Statement>>,
    limit: usize,
}

impl ClientStatements {
    pub fn new(limit: usize) -> Self {
        ClientStatements { names: HashMap::new(), limit }
    }

    pub fn get(&self, name: &str) -> Option<&Rc<Statement>> {
        self.names.get(name)
    }

    /// A name of the client's for `statement`, if it has one (for errors:
    /// a scan of its names).
    pub fn name_of(&self, statement: &Rc<Statement>) -> Option<&str> {
        self.names.iter().find(|(_, s)| Rc::ptr_eq(s, statement)).map(|(name, _)| name.as_str())
    }

    pub fn insert(&mut self, name: &str, statement: Rc<Statement>) -> Result<(), StatementLimit> {
        if self.names.len() >= self.limit {
            return Err(StatementLimit(self.limit));
        }
        self.names.insert(name.to_owned(), statement);
        Ok(())
    }

    pub fn remove(&mut self, name: &str) -> Option<Rc<Statement>> {
        self.names.remove(name)
    }

    /// Removes `name` only if it still means `id` (a failed Parse undone).
    pub fn remove_if(&mut self, name: &str, id: u64) {
        if self.names.get(name).is_some_and(|s| s.id == id) {
            self.names.remove(name);
        }
    }

    pub fn clear(&mut self) {
        self.names.clear();
    }

    pub fn len(&self) -> usize {
        self.names.len()
    }

    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }
}

/// The statements one server connection has prepared, least recently used
/// evicted first once `capacity` is reached.
#[derive(Debug)]
pub struct ServerStatements {
    entries: IdMap<u64, Prepared>,
    clock: u64,
    capacity: usize,
    /// Server-side names to Close before anything else is prepared (stale plans).
    to_close: Vec<Rc<str>>,
}

/// One statement as this server connection has it.
#[derive(Debug)]
struct Prepared {
    last_use: u64,
    server_name: Rc<str>,
    /// The clock when it was prepared: which copy this is ([`PreparedCopy`]).
    prepared_at: u64,
    /// A Describe of a portal of this copy answered NoData.
    no_rows: bool,
}

/// What one connection's copy of a statement is known to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PreparedCopy {
    /// Which copy: a statement closed and prepared again is another.
    pub prepared_at: u64,
    /// Its portals have no rows, here, for as long as this copy lives
    /// ([`ServerStatements::note_no_rows`]).
    pub no_rows: bool,
}

impl ServerStatements {
    pub fn new(capacity: usize) -> Self {
        ServerStatements { entries: IdMap::default(), clock: 0, capacity: capacity.max(1), to_close: Vec::new() }
    }

    /// Has this connection prepared `id`? Counts as a use.
    pub fn has(&mut self, id: u64) -> bool {
        self.clock += 1;
        match self.entries.get_mut(&id) {
            Some(entry) => {
                entry.last_use = self.clock;
                true
            }
            None => false,
        }
    }

    /// This connection's copy of `id`, if it has one (not counted as a use).
    pub fn copy_of(&self, id: u64) -> Option<PreparedCopy> {
        self.entries.get(&id).map(|p| PreparedCopy { prepared_at: p.prepared_at, no_rows: p.no_rows })
    }

    /// A Describe of a portal of `id`, bound to its copy prepared at
    /// `prepared_at`, answered NoData. That holds for every later portal of
    /// the copy: PostgreSQL fixes a protocol-level prepared statement's
    /// result type when it is prepared, and fails a Bind that would change
    /// it ("cached plan must not change result type", 0A000). A copy
    /// closed and prepared again (stale, evicted, DISCARD ALL) starts
    /// unknown.
    pub fn note_no_rows(&mut self, id: u64, prepared_at: u64) {
        if let Some(p) = self.entries.get_mut(&id).filter(|p| p.prepared_at == prepared_at) {
            p.no_rows = true;
        }
    }

    /// Records `statement` as prepared here; returns the server name of the
    /// statement evicted to make room, which the caller must Close.
    pub fn add(&mut self, statement: &Statement) -> Option<Rc<str>> {
        self.clock += 1;
        let evicted = if self.entries.len() >= self.capacity && !self.entries.contains_key(&statement.id) {
            let oldest = self.entries.iter().min_by_key(|(_, p)| p.last_use).map(|(id, _)| *id);
            oldest.and_then(|id| self.entries.remove(&id)).map(|p| p.server_name)
        } else {
            None
        };
        let prepared = Prepared {
            last_use: self.clock,
            server_name: statement.server_name.clone(),
            prepared_at: self.clock,
            no_rows: false,
        };
        self.entries.insert(statement.id, prepared);
        evicted
    }

    pub fn remove(&mut self, id: u64) {
        self.entries.remove(&id);
    }

    /// The server's plan for `id` is stale: Close it at the next chance.
    pub fn mark_stale(&mut self, id: u64) {
        if let Some(p) = self.entries.remove(&id) {
            self.to_close.push(p.server_name);
        }
    }

    /// A server-side name to Close at the next chance.
    pub fn push_stale(&mut self, name: Rc<str>) {
        self.to_close.push(name);
    }

    pub fn take_stale(&mut self) -> Vec<Rc<str>> {
        std::mem::take(&mut self.to_close)
    }

    /// The server forgot everything (DISCARD ALL, DEALLOCATE ALL).
    pub fn clear(&mut self) {
        self.entries.clear();
        self.to_close.clear();
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// How many statements [`RecentStatements`] keeps: a transaction's texts
/// fit (pgbench's tpcb-like parses five).
const RECENT: usize = 8;

/// The statements unnamed Parses gave lately, oldest first from `next`:
/// held weakly, so that a statement no client holds is still trimmed.
#[derive(Debug, Default)]
pub struct RecentStatements {
    kept: Vec<Weak<Statement>>,
    next: usize,
}

impl RecentStatements {
    /// The first kept statement still alive for which `current` holds,
    /// looked for from the oldest: texts taken in turn come back oldest
    /// first.
    fn find(&self, current: impl Fn(&Statement) -> bool) -> Option<Rc<Statement>> {
        let (newer, older) = self.kept.split_at(self.next.min(self.kept.len()));
        older.iter().chain(newer).filter_map(Weak::upgrade).find(|s| current(s))
    }

    fn note(&mut self, statement: &Rc<Statement>) {
        if self.kept.len() < RECENT {
            self.kept.push(Rc::downgrade(statement));
            return;
        }
        self.kept[self.next] = Rc::downgrade(statement);
        self.next = (self.next + 1) % RECENT;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_statement_per_key_with_a_shard_unique_name() {
        let r = Registry::new(3, 100);
        let a = r.register(Context::DEFAULT, b"select 1\0\0\0");
        let b = r.register(Context::DEFAULT, b"select 1\0\0\0");
        let c = r.register(Context::DEFAULT, b"select 2\0\0\0");
        assert!(Rc::ptr_eq(&a, &b));
        assert_ne!(a.id, c.id);
        assert_eq!(&*a.server_name, format!("pglane_3_{}", a.id));
        assert_eq!(r.len(), 2);
    }

    #[test]
    fn the_same_text_in_another_context_is_another_statement() {
        let r = Registry::new(0, 100);
        let default = r.register(Context::DEFAULT, b"select x from t\0\0\0");
        let (tenant_a, tenant_b) = (r.context(b"search_path\0sa"), r.context(b"search_path\0sb"));
        assert_ne!(tenant_a, tenant_b);
        assert_eq!(r.context(b"search_path\0sa"), tenant_a, "interned");
        assert_eq!(r.context(b""), Context::DEFAULT);
        let a = r.register(tenant_a, b"select x from t\0\0\0");
        let b = r.register(tenant_b, b"select x from t\0\0\0");
        assert_ne!(default.id, a.id);
        assert_ne!(a.id, b.id);
        assert!(Rc::ptr_eq(&a, &r.register(tenant_a, b"select x from t\0\0\0")));
        assert!(Rc::ptr_eq(&default, &r.register(Context::DEFAULT, b"select x from t\0\0\0")));
        // Each is prepared with the client's own Parse body.
        assert_eq!(&b.key[..], b"select x from t\0\0\0");
        // Retiring one leaves the others.
        r.retire(&a);
        assert!(!Rc::ptr_eq(&a, &r.register(tenant_a, b"select x from t\0\0\0")));
        assert!(Rc::ptr_eq(&b, &r.register(tenant_b, b"select x from t\0\0\0")));
        // A private context is no one else's.
        let (p, q) = (r.private_context(), r.private_context());
        assert!(p.is_private() && q.is_private() && p != q && !tenant_a.is_private());
        assert!(!Rc::ptr_eq(&r.register(p, b"select 1\0\0\0"), &r.register(q, b"select 1\0\0\0")));
    }

    #[test]
    fn unreferenced_statements_are_trimmed_at_capacity() {
        let r = Registry::new(0, 2);
        let kept = r.register(Context::DEFAULT, b"a");
        drop(r.register(Context::DEFAULT, b"b"));
        let _c = r.register(Context::DEFAULT, b"c"); // at capacity: "b" (unreferenced) goes
        assert_eq!(r.len(), 2);
        assert!(Rc::ptr_eq(&kept, &r.register(Context::DEFAULT, b"a")));
    }

    #[test]
    fn failed_parses_are_forgotten_unless_validated() {
        let r = Registry::new(0, 10);
        let s = r.register(Context::DEFAULT, b"bad");
        r.forget_failed(&s);
        assert_eq!(r.len(), 0);
        let s = r.register(Context::DEFAULT, b"good");
        s.validated.set(true);
        r.forget_failed(&s);
        assert_eq!(r.len(), 1);
    }

    #[test]
    fn a_retired_statement_is_replaced_on_the_next_register() {
        let r = Registry::new(0, 10);
        let old = r.register(Context::DEFAULT, b"select * from t");
        r.retire(&old);
        let new = r.register(Context::DEFAULT, b"select * from t");
        assert_ne!(old.id, new.id);
        r.retire(&old); // retiring again does not touch the new one
        assert!(Rc::ptr_eq(&new, &r.register(Context::DEFAULT, b"select * from t")));
    }

    #[test]
    fn registering_again_gives_what_register_would() {
        let r = Registry::new(0, 10);
        let other = r.context(b"search_path=b");
        let last = r.register(Context::DEFAULT, b"select * from t");
        let again = |last: &Rc<Statement>, context, body: &[u8]| {
            r.register_again(Some(last), &mut RecentStatements::default(), context, body)
        };
        assert!(Rc::ptr_eq(&again(&last, Context::DEFAULT, b"select * from t"), &last), "the same text: the same statement");
        for (context, body) in [(Context::DEFAULT, &b"select * from u"[..]), (other, b"select * from t")] {
            let got = again(&last, context, body);
            assert!(!Rc::ptr_eq(&got, &last) && Rc::ptr_eq(&got, &r.register(context, body)), "{body:?} in {context:?}");
        }
        r.retire(&last);
        let successor = again(&last, Context::DEFAULT, b"select * from t");
        assert!(!Rc::ptr_eq(&successor, &last), "a retired statement is not given again");
        assert!(Rc::ptr_eq(&successor, &r.register(Context::DEFAULT, b"select * from t")));
        let failed = r.register(Context::DEFAULT, b"selec 1");
        r.forget_failed(&failed);
        assert!(!Rc::ptr_eq(&again(&failed, Context::DEFAULT, b"selec 1"), &failed), "nor a forgotten one");
        assert!(Rc::ptr_eq(
            &r.register_again(None, &mut RecentStatements::default(), Context::DEFAULT, b"select * from u"),
            &r.register(Context::DEFAULT, b"select * from u")
        ));
    }

    /// Texts parsed in turn are found among the recent ones, and only while
    /// each is what `register` would give.
    #[test]
    fn recent_statements_give_what_register_would() {
        let r = Registry::new(0, 100);
        let mut recent = RecentStatements::default();
        let texts: Vec<Vec<u8>> = (0..10).map(|i| format!("select {i} from t").into_bytes()).collect();
        let mut held = Vec::new();
        for round in 0..3 {
            for text in &texts[..5] {
                let got = r.register_again(None, &mut recent, Context::DEFAULT, text);
                assert!(Rc::ptr_eq(&got, &r.register(Context::DEFAULT, text)), "round {round}");
                held.push(got);
            }
        }
        assert_eq!(recent.kept.len(), 5, "noted once each, found after");
        // More texts than it keeps: the oldest make way.
        for text in &texts {
            held.push(r.register_again(None, &mut recent, Context::DEFAULT, text));
        }
        assert_eq!(recent.kept.len(), RECENT);
        // A retired statement is not found again; its successor is.
        let old = r.register(Context::DEFAULT, &texts[9]);
        r.retire(&old);
        let new = r.register_again(None, &mut recent, Context::DEFAULT, &texts[9]);
        assert!(!Rc::ptr_eq(&new, &old) && Rc::ptr_eq(&new, &r.register(Context::DEFAULT, &texts[9])));
        // Nor one of another context.
        let other = r.context(b"search_path=b");
        assert!(Rc::ptr_eq(&r.register_again(None, &mut recent, other, &texts[9]), &r.register(other, &texts[9])));
    }

    #[test]
    fn a_failed_parse_of_a_retired_statement_leaves_its_successor() {
        let r = Registry::new(0, 10);
        let old = r.register(Context::DEFAULT, b"select * from t");
        r.schema_changed();
        let new = r.register(Context::DEFAULT, b"select * from t");
        r.forget_failed(&old);
        assert!(Rc::ptr_eq(&new, &r.register(Context::DEFAULT, b"select * from t")));
    }

    #[test]
    fn client_names_are_capped_and_undone_by_id() {
        let r = Registry::new(0, 10);
        let mut c = ClientStatements::new(1);
        let s = r.register(Context::DEFAULT, b"x");
        c.insert("S_1", s.clone()).unwrap();
        assert_eq!(c.insert("S_2", s.clone()), Err(StatementLimit(1)));
        c.remove_if("S_1", s.id + 1);
        assert!(c.get("S_1").is_some());
        c.remove_if("S_1", s.id);
        assert!(c.is_empty());
    }

    #[test]
    fn server_sets_evict_the_least_recently_used() {
        let r = Registry::new(0, 10);
        let (a, b, c) =
            (r.register(Context::DEFAULT, b"a"), r.register(Context::DEFAULT, b"b"), r.register(Context::DEFAULT, b"c"));
        let mut s = ServerStatements::new(2);
        assert_eq!(s.add(&a), None);
        assert_eq!(s.add(&b), None);
        assert!(s.has(a.id)); // a is now more recent than b
        assert_eq!(s.add(&c).as_deref(), Some(&*b.server_name));
        assert!(s.has(a.id) && s.has(c.id) && !s.has(b.id));
        s.mark_stale(a.id);
        assert!(!s.has(a.id));
        assert_eq!(s.take_stale(), vec![a.server_name.clone()]);
    }

    #[test]
    fn no_rows_is_known_of_one_copy_only() {
        let r = Registry::new(0, 10);
        let (a, b) = (r.register(Context::DEFAULT, b"a"), r.register(Context::DEFAULT, b"b"));
        let mut s = ServerStatements::new(4);
        assert_eq!(s.copy_of(a.id), None);
        s.add(&a);
        s.add(&b);
        let first = s.copy_of(a.id).expect("prepared");
        assert!(!first.no_rows, "unknown until a portal is described");
        s.note_no_rows(a.id, first.prepared_at);
        assert!(s.copy_of(a.id).is_some_and(|c| c.no_rows));
        assert!(s.has(a.id) && s.copy_of(a.id).is_some_and(|c| c.no_rows), "a use keeps it");
        assert!(s.copy_of(b.id).is_some_and(|c| !c.no_rows), "only that statement's");
        // Closed (stale) and prepared again: another copy, unknown; what
        // was said of the old one does not reach it.
        s.mark_stale(a.id);
        assert_eq!(s.copy_of(a.id), None);
        s.add(&a);
        let second = s.copy_of(a.id).expect("prepared again");
        assert_ne!(second.prepared_at, first.prepared_at);
        assert!(!second.no_rows);
        s.note_no_rows(a.id, first.prepared_at);
        assert!(s.copy_of(a.id).is_some_and(|c| !c.no_rows), "an answer about the old copy");
        s.note_no_rows(a.id, second.prepared_at);
        assert!(s.copy_of(a.id).is_some_and(|c| c.no_rows));
        // DISCARD ALL: the server forgot it.
        s.clear();
        assert_eq!(s.copy_of(a.id), None);
        s.note_no_rows(a.id, second.prepared_at);
        assert_eq!(s.copy_of(a.id), None, "noting a copy that is gone makes none");
    }
}
