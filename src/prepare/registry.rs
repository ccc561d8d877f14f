//! The shard's statement registry, a client's statement names, and a server
//! connection's prepared set.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;

use bytes::Bytes;

use super::auto::{PassThroughCounts, Shapes};

/// One distinct statement of the shard.
#[derive(Debug)]
pub struct Statement {
    pub id: u64,
    /// The name pglane gives it on servers: `pglane_<shard>_<id>`.
    pub server_name: Rc<str>,
    /// The Parse body after the name (query text, parameter types): what
    /// makes two statements the same, and what pglane sends to prepare it on
    /// another server connection.
    pub key: Bytes,
    /// Its key in the registry: `key`, prefixed with the search_path it was
    /// registered under, if any (see [`Registry::register_under`]).
    map_key: Bytes,
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
    /// When a run of it with another client's request behind it last took
    /// long (`pool::opening::SLOW`): for a while, no request goes behind it.
    pub slow_at: Cell<Option<std::time::Instant>>,
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
    /// Rewritten queries whose plan went stale (DDL pglane did not see), run
    /// again as plain queries without the client seeing the error.
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

/// One pool's statements, keyed by Parse body.
pub struct Registry {
    shard: usize,
    by_key: RefCell<HashMap<Bytes, Rc<Statement>>>,
    next_id: Cell<u64>,
    /// Above this many statements, those no client refers to are dropped.
    capacity: usize,
    stats: RefCell<PrepareStats>,
    /// Auto-prepare's shape decisions for this pool.
    pub shapes: Shapes,
}

impl Registry {
    pub fn new(shard: usize, capacity: usize) -> Registry {
        Registry {
            shard,
            by_key: RefCell::default(),
            next_id: Cell::new(1),
            capacity: capacity.max(1),
            stats: RefCell::default(),
            shapes: Shapes::new(capacity),
        }
    }

    /// The statement for this Parse body, registered if new, for clients on
    /// the server's default search_path.
    pub fn register(&self, key: &[u8]) -> Rc<Statement> {
        self.register_under(None, key)
    }

    /// The statement for this Parse body under a client's own search_path
    /// (`None`: the server's default), registered if new.
    ///
    /// The same text is a different statement under another search_path
    /// (schema-per-tenant: `select x from t` is another table, maybe with
    /// another result type), so clients share a server statement only when
    /// both match. Sharing it anyway would make PostgreSQL re-plan it under
    /// the other search_path on each switch, or refuse with "cached plan
    /// must not change result type".
    pub fn register_under(&self, search_path: Option<&str>, body: &[u8]) -> Rc<Statement> {
        let map_key = Self::map_key(search_path, body);
        if let Some(s) = self.by_key.borrow().get(map_key.as_ref()) {
            return s.clone();
        }
        self.trim();
        let id = self.next_id.get();
        self.next_id.set(id + 1);
        let map_key = Bytes::copy_from_slice(&map_key);
        let statement = Rc::new(Statement {
            id,
            server_name: format!("pglane_{}_{}", self.shard, id).into(),
            key: map_key.slice(map_key.len() - body.len()..),
            map_key: map_key.clone(),
            validated: Cell::new(false),
            description: RefCell::new(None),
            described: RefCell::new(None),
            rows: Cell::new(RowRecord::default()),
            leaves_session_alone: std::cell::OnceCell::new(),
            slow_at: Cell::new(None),
        });
        self.by_key.borrow_mut().insert(map_key, statement.clone());
        statement
    }

    /// The registry's key: the Parse body itself on the default search_path,
    /// else NUL, the search_path, NUL, the body. A Parse body starts with
    /// its query text, a C string, so it never starts with NUL, and no
    /// setting value contains one: the two kinds of key never collide.
    fn map_key<'a>(search_path: Option<&str>, body: &'a [u8]) -> std::borrow::Cow<'a, [u8]> {
        match search_path {
            None => std::borrow::Cow::Borrowed(body),
            Some(path) => {
                let mut key = Vec::with_capacity(path.len() + body.len() + 2);
                key.push(0);
                key.extend_from_slice(path.as_bytes());
                key.push(0);
                key.extend_from_slice(body);
                std::borrow::Cow::Owned(key)
            }
        }
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
        if map.get(&statement.map_key).is_some_and(|s| Rc::ptr_eq(s, statement)) {
            map.remove(&statement.map_key);
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
        let mut map = self.by_key.borrow_mut();
        if map.len() >= self.capacity {
            map.retain(|_, s| Rc::strong_count(s) > 1);
        }
    }

    pub fn len(&self) -> usize {
        self.by_key.borrow().len()
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

    /// The schema may have changed (DDL, a stale plan): every shape is
    /// validated again before it is rewritten, and statements are prepared
    /// afresh, under new names, for the next Parse of their text.
    pub fn schema_changed(&self) {
        for statement in self.shapes.clear() {
            self.retire(&statement);
        }
        let all: Vec<Rc<Statement>> = self.by_key.borrow().values().cloned().collect();
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
    /// id → (last use, server name)
    entries: HashMap<u64, (u64, Rc<str>)>,
    clock: u64,
    capacity: usize,
    /// Server-side names to Close before anything else is prepared (stale plans).
    to_close: Vec<Rc<str>>,
}

impl ServerStatements {
    pub fn new(capacity: usize) -> Self {
        ServerStatements { entries: HashMap::new(), clock: 0, capacity: capacity.max(1), to_close: Vec::new() }
    }

    /// Has this connection prepared `id`? Counts as a use.
    pub fn has(&mut self, id: u64) -> bool {
        self.clock += 1;
        match self.entries.get_mut(&id) {
            Some(entry) => {
                entry.0 = self.clock;
                true
            }
            None => false,
        }
    }

    /// Records `statement` as prepared here; returns the server name of the
    /// statement evicted to make room, which the caller must Close.
    pub fn add(&mut self, statement: &Statement) -> Option<Rc<str>> {
        self.clock += 1;
        let evicted = if self.entries.len() >= self.capacity && !self.entries.contains_key(&statement.id) {
            let oldest = self.entries.iter().min_by_key(|(_, (used, _))| *used).map(|(id, _)| *id);
            oldest.and_then(|id| self.entries.remove(&id)).map(|(_, name)| name)
        } else {
            None
        };
        self.entries.insert(statement.id, (self.clock, statement.server_name.clone()));
        evicted
    }

    pub fn remove(&mut self, id: u64) {
        self.entries.remove(&id);
    }

    /// The server's plan for `id` is stale: Close it at the next chance.
    pub fn mark_stale(&mut self, id: u64) {
        if let Some((_, name)) = self.entries.remove(&id) {
            self.to_close.push(name);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_statement_per_key_with_a_shard_unique_name() {
        let r = Registry::new(3, 100);
        let a = r.register(b"select 1\0\0\0");
        let b = r.register(b"select 1\0\0\0");
        let c = r.register(b"select 2\0\0\0");
        assert!(Rc::ptr_eq(&a, &b));
        assert_ne!(a.id, c.id);
        assert_eq!(&*a.server_name, format!("pglane_3_{}", a.id));
        assert_eq!(r.len(), 2);
    }

    #[test]
    fn the_same_text_under_another_search_path_is_another_statement() {
        let r = Registry::new(0, 100);
        let default = r.register(b"select x from t\0\0\0");
        let a = r.register_under(Some("tenant_a"), b"select x from t\0\0\0");
        let b = r.register_under(Some("tenant_b"), b"select x from t\0\0\0");
        assert_ne!(default.id, a.id);
        assert_ne!(a.id, b.id);
        assert!(Rc::ptr_eq(&a, &r.register_under(Some("tenant_a"), b"select x from t\0\0\0")));
        assert!(Rc::ptr_eq(&default, &r.register_under(None, b"select x from t\0\0\0")));
        // Each is prepared with the client's own Parse body.
        assert_eq!(&b.key[..], b"select x from t\0\0\0");
        // Retiring one leaves the others.
        r.retire(&a);
        assert!(!Rc::ptr_eq(&a, &r.register_under(Some("tenant_a"), b"select x from t\0\0\0")));
        assert!(Rc::ptr_eq(&b, &r.register_under(Some("tenant_b"), b"select x from t\0\0\0")));
    }

    #[test]
    fn unreferenced_statements_are_trimmed_at_capacity() {
        let r = Registry::new(0, 2);
        let kept = r.register(b"a");
        drop(r.register(b"b"));
        let _c = r.register(b"c"); // at capacity: "b" (unreferenced) goes
        assert_eq!(r.len(), 2);
        assert!(Rc::ptr_eq(&kept, &r.register(b"a")));
    }

    #[test]
    fn failed_parses_are_forgotten_unless_validated() {
        let r = Registry::new(0, 10);
        let s = r.register(b"bad");
        r.forget_failed(&s);
        assert_eq!(r.len(), 0);
        let s = r.register(b"good");
        s.validated.set(true);
        r.forget_failed(&s);
        assert_eq!(r.len(), 1);
    }

    #[test]
    fn a_retired_statement_is_replaced_on_the_next_register() {
        let r = Registry::new(0, 10);
        let old = r.register(b"select * from t");
        r.retire(&old);
        let new = r.register(b"select * from t");
        assert_ne!(old.id, new.id);
        r.retire(&old); // retiring again does not touch the new one
        assert!(Rc::ptr_eq(&new, &r.register(b"select * from t")));
    }

    #[test]
    fn a_failed_parse_of_a_retired_statement_leaves_its_successor() {
        let r = Registry::new(0, 10);
        let old = r.register(b"select * from t");
        r.schema_changed();
        let new = r.register(b"select * from t");
        r.forget_failed(&old);
        assert!(Rc::ptr_eq(&new, &r.register(b"select * from t")));
    }

    #[test]
    fn client_names_are_capped_and_undone_by_id() {
        let r = Registry::new(0, 10);
        let mut c = ClientStatements::new(1);
        let s = r.register(b"x");
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
        let (a, b, c) = (r.register(b"a"), r.register(b"b"), r.register(b"c"));
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
}
