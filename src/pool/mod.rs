//! A shard's pool of server connections for one (database, user).
//!
//! This module owns the idle server connections and the count of open ones,
//! and decides who gets a connection when: the idle list first, then a new
//! connection while under the shard's share of `pool_size`, else a FIFO wait
//! queue bounded by `query_wait_timeout`. It lives inside one shard, so it is
//! plain `Rc`/`RefCell` state with no locks. It never reads or writes a
//! client's traffic.
//!
//! A lent connection is a [`Lease`]: hand it back with [`Lease::release`]
//! when the server is idle and clean, or drop it to close the connection. Either
//! way the pool's count stays right, whatever path a session takes out.
//!
//! With server pipelining on, a client that holds a connection may offer it
//! to the first waiter before it is free ([`Opening`], in `opening`): the
//! waiter's request then goes to the server right behind the holder's.
//!
//! Which of a database's hosts a new connection goes to, and when a host's
//! connections must go, is `hosts`'s. The limits that hold over all shards
//! (`pool_size`, `max_db_connections`, `max_user_connections`) are
//! `budget`'s: a pool takes a unit of each of its budgets per connection it
//! opens.

pub mod budget;
pub mod hosts;
pub mod opening;
pub use opening::{Handover, Offer, Opening, OpeningLost};

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::rc::{Rc, Weak};
use std::sync::Arc;
use std::task::{Poll, Waker};
use std::time::Duration;

use thiserror::Error;

use crate::prepare::Statement;
use crate::server::{ConnectionOutput, Goodbye, ServerConn, ServerError, ServerSession, ServerTarget};
pub use budget::{Budget, BudgetOf};

/// Values of reported settings a pool remembers the server's spelling of.
const REPORTED_SPELLINGS: usize = 1024;

/// How long a connection must have been idle before it is checked for
/// health as it is taken ([`ServerConn::is_healthy`], a `recv` each). One
/// back for less was answering with its ReadyForQuery moments ago: a backend
/// terminated since would usually not have said so yet, so a check would
/// find what the first write finds, at a syscall per transaction under load
/// (a connection handed straight to a waiter is not checked either).
const HEALTH_CHECK_AFTER_IDLE: Duration = Duration::from_millis(1);

/// Whether a connection idle since `idle_since` is worth a health check
/// `now` (see [`HEALTH_CHECK_AFTER_IDLE`]).
fn worth_a_health_check(idle_since: crate::rt::Stamp, now: crate::rt::Stamp) -> bool {
    now.saturating_since(idle_since) >= HEALTH_CHECK_AFTER_IDLE
}

#[derive(Debug, Error)]
pub enum PoolError {
    #[error("query_wait_timeout: no server connection became free in time")]
    WaitTimeout,
    #[error(transparent)]
    Server(#[from] ServerError),
    /// Of several hosts (or one with a target_session_attrs), none gave a
    /// connection that would do.
    #[error("no server would do for target_session_attrs={attrs}: {tried}")]
    NoServer { attrs: crate::config::TargetSessionAttrs, tried: String },
}

/// Per-pool counters, read by the admin console and metrics.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct PoolStats {
    pub checkouts: u64,
    pub waits: u64,
    pub wait_timeouts: u64,
    pub connects: u64,
    pub connect_failures: u64,
    pub unhealthy_closed: u64,
    /// Transactions (server connection lent and given back, in transaction
    /// mode; whole sessions in session mode).
    pub xact_count: u64,
    /// Requests answered with ReadyForQuery (simple queries and Syncs).
    pub query_count: u64,
    /// Bytes from clients to servers, and from servers to clients.
    pub bytes_received: u64,
    pub bytes_sent: u64,
    /// Bytes read from servers while relaying (differs from `bytes_sent`
    /// where pglane answers itself or transcodes binary results).
    pub bytes_from_server: u64,
    /// Microseconds clients held server connections, spent in queries, and
    /// waited for a server connection.
    pub xact_time_us: u64,
    pub query_time_us: u64,
    pub wait_time_us: u64,
    /// Requests sent to a server behind another client's (server pipelining).
    pub pipelined: u64,
    /// Connections closed for the same pool on another shard, whose
    /// clients waited (see `budget`).
    pub yielded: u64,
    /// Connections opened from the reserve (reserve_pool_size) for clients
    /// that waited reserve_pool_timeout.
    pub reserve_used: u64,
    /// Named statements: clients' Parses, pglane's Parses on servers, and
    /// clients' Binds (PgBouncer's client_parse_count, server_parse_count
    /// and bind_count; see `client::exchange::StatementCounts`).
    pub statements: crate::client::exchange::StatementCounts,
}

impl PoolStats {
    /// Adds another shard's counters.
    pub fn add(&mut self, o: &PoolStats) {
        self.checkouts += o.checkouts;
        self.waits += o.waits;
        self.wait_timeouts += o.wait_timeouts;
        self.connects += o.connects;
        self.connect_failures += o.connect_failures;
        self.unhealthy_closed += o.unhealthy_closed;
        self.xact_count += o.xact_count;
        self.query_count += o.query_count;
        self.bytes_received += o.bytes_received;
        self.bytes_sent += o.bytes_sent;
        self.bytes_from_server += o.bytes_from_server;
        self.xact_time_us += o.xact_time_us;
        self.query_time_us += o.query_time_us;
        self.wait_time_us += o.wait_time_us;
        self.pipelined += o.pipelined;
        self.yielded += o.yielded;
        self.reserve_used += o.reserve_used;
        self.statements.add(&o.statements);
    }
}

/// An idle server connection, as the admin console shows it.
#[derive(Debug, Clone)]
pub struct IdleServer {
    pub remote_pid: i32,
    pub address: String,
    pub local_addr: Option<std::net::SocketAddr>,
    pub connected_at: std::time::SystemTime,
    pub tls: Option<String>,
    /// The application_name the server connection has (its last client's).
    pub application_name: Option<String>,
    pub id: u64,
    /// Statements prepared on it.
    pub prepared_statements: usize,
}

/// How many of a pool's server connections are open, by the generation they
/// were opened in. Each connection carries a [`CensusToken`] that counts it
/// until it is dropped, however it closes, so WAIT_CLOSE can tell when the
/// connections a RECONNECT replaced are all gone.
#[derive(Default)]
struct Census {
    by_generation: RefCell<std::collections::BTreeMap<u64, usize>>,
}

/// Counts one server connection in its pool's [`Census`] while it lives.
pub struct CensusToken {
    census: Rc<Census>,
    generation: u64,
}

impl CensusToken {
    fn enlist(census: &Rc<Census>, generation: u64) -> CensusToken {
        *census.by_generation.borrow_mut().entry(generation).or_default() += 1;
        CensusToken { census: census.clone(), generation }
    }
}

impl Drop for CensusToken {
    fn drop(&mut self) {
        let mut counts = self.census.by_generation.borrow_mut();
        if let Some(n) = counts.get_mut(&self.generation) {
            *n -= 1;
            if *n == 0 {
                counts.remove(&self.generation);
            }
        }
    }
}

pub struct Pool {
    target: RefCell<ServerTarget>,
    max_size: Cell<usize>,
    /// Connections opened before the current generation are closed when they
    /// come back (RECONNECT, or a reload that changed the server).
    generation: Cell<u64>,
    /// Boxed, here and in a lease: a connection is moved at every checkout
    /// and checkin, and a box moves as a pointer.
    idle: RefCell<Vec<Box<ServerConn>>>,
    /// Connections open or being opened, lent or idle.
    open: Cell<usize>,
    waiters: RefCell<VecDeque<Rc<Waiter>>>,
    /// Openings behind requests whose holders wait on the server and had no
    /// one to offer them to (see [`Pool::post`]). Weak: a holder that moves
    /// on takes its opening back by dropping it.
    posted: RefCell<VecDeque<Weak<Opening>>>,
    /// ParameterStatus values of the first server connection, shown to
    /// clients at login; replaced by those of a connection to another host
    /// (after a failover, the new primary's).
    server_params: RefCell<Option<Rc<Vec<(String, String)>>>>,
    server_params_host: Cell<usize>,
    /// What the pool knows of its target's hosts (see `hosts`).
    hosts: hosts::HostBook,
    /// A `check_hosts` is under way.
    checking: Cell<bool>,
    /// Since when no host would do, if that is how the last attempt ended
    /// (see `hosts`: server_retry_timeout runs from there).
    no_host_since: Cell<Option<std::time::Instant>>,
    /// What the server reports for a reported setting a client's startup
    /// packet gave as a value: `(name, as given) → as reported` (`utf8` →
    /// `UTF8`), learned the first time a client gives it.
    reported_as: RefCell<std::collections::HashMap<(String, String), String>>,
    stats: Cell<PoolStats>,
    /// The prepared statements shared by this pool's clients (see
    /// `prepare`); shared with the pools a read router sends the same
    /// clients' reads to (see `router`).
    pub registry: Rc<crate::prepare::Registry>,
    census: Rc<Census>,
    /// The limits over all shards this pool opens connections under (see
    /// [`Pool::share_budgets`]); none for a pool of its own.
    budgets: RefCell<Rc<[Arc<Budget>]>>,
    /// Connections this shard's pool keeps while another shard's pool of
    /// the same (database, user) has clients waiting (`budget::share`).
    keep: Cell<usize>,
    /// The budget (by index) a client of it waits on, counted as wanted
    /// there; None while no client waits.
    wanting: Cell<Option<usize>>,
    /// The budget the last failed attempt to open found spent.
    blocked_on: Cell<usize>,
    /// A task opens connections for min_pool_size ([`Pool::keep_open`]).
    warming: Cell<bool>,
    /// Tells the other pools under its budgets, on any shard (see [`BudgetNews`]).
    budget_news: RefCell<Option<Box<dyn Fn(BudgetNews, &Rc<[Arc<Budget>]>)>>>,
    /// Connections closing whose backends have not gone yet
    /// ([`Pool::close`]); counted in `open` until then.
    closing: Cell<usize>,
    /// Itself, for the tasks that close connections.
    me: Weak<Pool>,
}

/// How long a closing connection may take to end before its units are
/// given back regardless (a server that does not answer).
const CLOSE_WAIT: Duration = Duration::from_secs(1);

/// What a pool tells the other pools under its budgets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BudgetNews {
    /// It gave units back while another pool wanted them: a waiting pool
    /// may open a connection now ([`Pool::budget_freed`]).
    Freed,
    /// A client of it waits on its budget `blocked` (an index into the
    /// budgets it was given): the pools under that budget give a
    /// connection up ([`Pool::yield_to_others`]).
    Wanted { blocked: usize },
}

/// What a waiting client is handed.
enum Grant {
    Conn(Box<ServerConn>),
    /// A slot under max_size freed up: open a new connection in it.
    Slot,
    /// A place right behind another client's request (server pipelining).
    Behind(Rc<Opening>),
}

/// What [`Pool::checkout_or_follow`] got for a client.
pub enum Checkout {
    Lease(Lease),
    /// The client's request goes behind another's on a connection that is
    /// handed over when that one is done.
    Behind(Rc<Opening>),
}

struct Waiter {
    /// It may take a place behind another client's request ([`Grant::Behind`]).
    may_follow: bool,
    grant: RefCell<Option<Grant>>,
    waker: RefCell<Option<Waker>>,
    /// query_wait_timeout: when [`Pool::expire_waiters`] gives up on it.
    deadline: std::time::Instant,
    /// When it began to wait (for reserve_pool_timeout).
    since: std::time::Instant,
    timed_out: Cell<bool>,
}

impl Pool {
    pub fn new(target: ServerTarget, max_size: usize, registry: crate::prepare::Registry) -> Rc<Pool> {
        Self::sharing(target, max_size, Rc::new(registry))
    }

    /// A pool whose clients' statements are another pool's: the pool of a
    /// standby that serves the reads of the clients of `registry`'s pool.
    pub fn sharing(target: ServerTarget, max_size: usize, registry: Rc<crate::prepare::Registry>) -> Rc<Pool> {
        Rc::new_cyclic(|me| Pool {
            hosts: hosts::HostBook::new(target.hosts.len()),
            checking: Cell::new(false),
            no_host_since: Cell::new(None),
            server_params_host: Cell::new(0),
            target: RefCell::new(target),
            max_size: Cell::new(max_size),
            generation: Cell::new(0),
            idle: RefCell::new(Vec::new()),
            open: Cell::new(0),
            waiters: RefCell::new(VecDeque::new()),
            posted: RefCell::new(VecDeque::new()),
            server_params: RefCell::new(None),
            reported_as: RefCell::default(),
            stats: Cell::new(PoolStats::default()),
            registry,
            census: Rc::default(),
            budgets: RefCell::new(Rc::new([])),
            keep: Cell::new(0),
            wanting: Cell::new(None),
            blocked_on: Cell::new(0),
            warming: Cell::new(false),
            budget_news: RefCell::new(None),
            closing: Cell::new(0),
            me: me.clone(),
        })
    }

    /// Puts the pool under limits shared with other pools, on this shard and
    /// others (its own pool_size budget first; see `budget`): it keeps
    /// `keep` connections when the same pool on another shard wants one,
    /// and `news` carries what the others must hear.
    pub fn share_budgets(&self, budgets: Vec<Arc<Budget>>, keep: usize, news: Box<dyn Fn(BudgetNews, &Rc<[Arc<Budget>]>)>) {
        *self.budgets.borrow_mut() = budgets.into();
        self.keep.set(keep);
        *self.budget_news.borrow_mut() = Some(news);
    }

    /// A reload changed this shard's share (see [`Pool::share_budgets`]).
    pub fn set_keep(&self, keep: usize) {
        self.keep.set(keep);
    }

    /// Whether the pool is under `budget`.
    pub fn is_under(&self, budget: &Arc<Budget>) -> bool {
        self.budgets.borrow().iter().any(|b| Arc::ptr_eq(b, budget))
    }

    fn tell(&self, news: BudgetNews) {
        let budgets = self.budgets.borrow().clone();
        if let Some(tell) = self.budget_news.borrow().as_ref() {
            tell(news, &budgets);
        }
    }

    /// A unit of each budget for a connection about to open, counted in
    /// `open`; else the index of the budget that is spent (0, the pool's
    /// own, also when its local limit is reached).
    fn take_slot(&self) -> Result<(), usize> {
        self.take_slot_with(false)
    }

    /// [`Pool::take_slot`], from the reserve if `reserve` (see `budget`).
    fn take_slot_with(&self, reserve: bool) -> Result<(), usize> {
        if self.open.get() >= self.max_size.get() {
            return Err(0);
        }
        budget::take_all(&self.budgets.borrow(), reserve)?;
        self.open.set(self.open.get() + 1);
        Ok(())
    }

    /// A connection closed and nothing takes its place: its units go back,
    /// and a pool that wants them hears of it.
    fn give_slot_back(&self) {
        self.open.set(self.open.get() - 1);
        let budgets = self.budgets.borrow().clone();
        budget::give_back_all(&budgets);
        let wanting = self.wanting.get();
        if budgets.iter().enumerate().any(|(i, b)| b.wanted_by_others(wanting == Some(i))) {
            self.tell(BudgetNews::Freed);
        }
    }

    /// More connections are open than a limit allows now (a reload lowered it).
    fn over_budget(&self) -> bool {
        self.open.get() > self.max_size.get() || self.budgets.borrow().iter().any(|b| b.is_over())
    }

    /// A connection that comes back closes instead, for another pool whose
    /// client waits: the same pool on another shard, while this one holds
    /// more than its share; or, when no client of this pool waits, a pool
    /// under the same max_db_connections or max_user_connections (as
    /// PgBouncer evicts). A few relaxed loads per checkin.
    fn owes_a_yield(&self) -> bool {
        let budgets = self.budgets.borrow();
        let Some(own) = budgets.first() else { return false };
        let wanting = self.wanting.get();
        (self.settled_open() > self.keep.get() && own.wanted_by_others(wanting == Some(0)))
            || (wanting.is_none() && budgets[1..].iter().any(|b| b.wanted_by_others(false)))
    }

    /// Whether clients wait changed: the budget they wait on counts the
    /// pool as wanting or no longer, and the pools under it hear of it
    /// ([`Pool::ask_for_a_connection`]).
    fn waiters_changed(&self) {
        let waiting = !self.waiters.borrow().is_empty() && !self.budgets.borrow().is_empty();
        let want = waiting.then(|| self.blocked_on.get());
        let was = self.wanting.get();
        if want == was {
            return;
        }
        self.wanting.set(want);
        let budgets = self.budgets.borrow().clone();
        if let Some(i) = was {
            budgets[i].unwant();
        }
        if let Some(i) = want {
            budgets[i].want();
            self.ask_for_a_connection();
        }
    }

    /// Tells the pools under the budget a client of this one waits on: the
    /// same pool on other shards, if this one holds less than its share or
    /// another holds a connection of the reserve (which may be idle there);
    /// the other pools under a max_db_connections or max_user_connections.
    fn ask_for_a_connection(&self) {
        let Some(blocked) = self.wanting.get() else { return };
        let reserve_in_use = || self.budgets.borrow().first().is_some_and(|own| own.open() > own.limit());
        if blocked != 0 || self.open.get() < self.keep.get().max(1) || reserve_in_use() {
            self.tell(BudgetNews::Wanted { blocked });
        }
    }

    /// Units may have come free: waiting clients get slots while every
    /// budget has one (called on the shard's news, and on its tick in case
    /// news was missed).
    pub fn budget_freed(&self) {
        while !self.waiters.borrow().is_empty() {
            if let Err(blocked) = self.take_slot() {
                self.blocked_on.set(blocked);
                self.waiters_changed();
                return;
            }
            match self.next_waiter() {
                Some(waiter) => waiter.grant(Grant::Slot),
                None => self.give_slot_back(),
            }
        }
    }

    /// The shard's tick: units given back are looked for, a client that
    /// has waited `reserve_after` (reserve_pool_timeout) gets a connection
    /// from the reserve, and a pool whose clients still wait asks again
    /// (news may have found nothing idle).
    pub fn tick(&self, now: std::time::Instant, reserve_after: Option<Duration>) {
        self.budget_freed();
        if let Some(after) = reserve_after {
            let waited_long = || self.waiters.borrow().front().is_some_and(|w| now.saturating_duration_since(w.since) >= after);
            while waited_long() && self.take_slot_with(true).is_ok() {
                self.bump(|s| s.reserve_used += 1);
                match self.next_waiter() {
                    Some(waiter) => waiter.grant(Grant::Slot),
                    None => self.give_slot_back(),
                }
            }
        }
        self.ask_for_a_connection();
    }

    /// Another pool under `budget` has a client waiting: an idle connection
    /// here closes for it, if this is the same pool on another shard and
    /// holds more than its share, or if `budget` is a max_db_connections or
    /// max_user_connections (a lent one closes when it comes back,
    /// [`Pool::owes_a_yield`]).
    pub fn yield_to_others(&self, budget: &Arc<Budget>) {
        let Some(i) = self.budgets.borrow().iter().position(|b| Arc::ptr_eq(b, budget)) else { return };
        let gives = match i {
            0 => self.settled_open() > self.keep.get() && budget.wanted_by_others(self.wanting.get() == Some(0)),
            // One connection at a time: the next yields once that one's
            // units are back, if they are still wanted.
            _ => self.closing.get() == 0 && budget.wanted_by_others(self.wanting.get() == Some(i)),
        };
        if !gives {
            return;
        }
        let conn = self.idle.borrow_mut().pop();
        if let Some(conn) = conn {
            self.retire_for_another(conn);
        }
    }

    /// Connections open and not closing.
    fn settled_open(&self) -> usize {
        self.open.get() - self.closing.get()
    }

    /// Closes `conn` so that its units go to another pool ([`Pool::close`]).
    fn retire_for_another(&self, conn: Box<ServerConn>) {
        self.bump(|s| s.yielded += 1);
        self.close(conn, Goodbye::Terminate, Pool::give_slot_back);
    }

    /// Closes `conn`, then frees its slot with `free` (to a waiter,
    /// [`Pool::slot_freed`], or to the budgets, [`Pool::give_slot_back`])
    /// once the server has ended its backend ([`ServerConn::end`]), not
    /// before: or PostgreSQL would for a moment see the old backend and the
    /// one opened in its slot, one over the limit they share. It costs a
    /// waiter the server's goodbye (well under a millisecond on a LAN),
    /// only when a connection closes.
    fn close(&self, conn: Box<ServerConn>, goodbye: Goodbye, free: fn(&Pool)) {
        let Some(pool) = self.me.upgrade() else {
            drop(conn);
            free(self);
            return;
        };
        self.closing.set(self.closing.get() + 1);
        crate::rt::spawn_local(async move {
            conn.end(goodbye, CLOSE_WAIT).await;
            pool.closing.set(pool.closing.get() - 1);
            free(&pool);
        })
        .detach();
    }

    /// Server connections still open that were opened before the last
    /// RECONNECT (they close as they come back).
    pub fn stale_open(&self) -> usize {
        self.census.by_generation.borrow().range(..self.generation.get()).map(|(_, n)| n).sum()
    }

    /// Where and how its connections are opened (for a connection of
    /// another's, such as the notification hub's listening connection).
    pub fn target(&self) -> ServerTarget {
        self.target.borrow().clone()
    }

    pub fn stats(&self) -> PoolStats {
        self.stats.get()
    }

    pub fn open_count(&self) -> usize {
        self.open.get()
    }

    pub fn idle_count(&self) -> usize {
        self.idle.borrow().len()
    }

    pub fn waiting_count(&self) -> usize {
        self.waiters.borrow().len()
    }

    pub fn max_size(&self) -> usize {
        self.max_size.get()
    }

    /// Server connections lent out right now.
    pub fn active_count(&self) -> usize {
        self.open.get() - self.idle.borrow().len()
    }

    pub fn idle_servers(&self) -> Vec<IdleServer> {
        self.idle
            .borrow()
            .iter()
            .map(|c| {
                let session = c.session.borrow();
                IdleServer {
                    remote_pid: c.cancel_key.process_id,
                    address: c.cancel_key.address.to_string(),
                    local_addr: c.cancel_key.local_addr,
                    connected_at: c.cancel_key.connected_at,
                    tls: c.cancel_key.tls.clone(),
                    application_name: session.settings.get("application_name").and_then(|v| v.plain()).map(str::to_owned),
                    id: c.cancel_key.id,
                    prepared_statements: session.statements.len(),
                }
            })
            .collect()
    }

    /// A reload changed this pool's server or size: later connections use
    /// `target`; if the server changed, existing ones are replaced as they
    /// come back.
    pub fn reconfigure(&self, target: ServerTarget, max_size: usize) {
        let moved = {
            let old = self.target.borrow();
            let addresses = |t: &ServerTarget| t.hosts.iter().map(|h| h.address.clone()).collect::<Vec<_>>();
            // Connections opened under other target_session_attrs were not
            // checked for these.
            addresses(&old) != addresses(&target)
                || old.target_session_attrs != target.target_session_attrs
                || old.dbname != target.dbname
                || old.user != target.user
        };
        if moved {
            self.hosts.reset(target.hosts.len());
        }
        *self.target.borrow_mut() = target;
        self.max_size.set(max_size);
        if moved {
            self.reconnect();
        }
        self.trim_idle();
    }

    /// Replace every server connection: idle ones now, lent ones when they
    /// come back.
    pub fn reconnect(&self) {
        self.generation.set(self.generation.get() + 1);
        self.close_idle();
    }

    /// Closes idle connections above max_size or a budget's limit.
    fn trim_idle(&self) {
        while self.over_budget() {
            if self.idle.borrow_mut().pop().is_none() {
                break;
            }
            self.slot_freed();
        }
    }

    pub fn count(&self, f: impl FnOnce(&mut PoolStats)) {
        self.bump(f);
    }

    fn bump(&self, f: impl FnOnce(&mut PoolStats)) {
        let mut s = self.stats.get();
        f(&mut s);
        self.stats.set(s);
    }

    /// Lends a server connection, waiting up to `wait` for one.
    pub async fn checkout(self: &Rc<Self>, wait: Duration) -> Result<Lease, PoolError> {
        match self.checkout_or_follow(wait, false).await? {
            Checkout::Lease(lease) => Ok(lease),
            // Only waiters that may follow are offered a place behind.
            Checkout::Behind(_) => unreachable!("a place behind another request for a client that may not follow"),
        }
    }

    /// Lends a server connection, waiting up to `wait` for one; a client
    /// that `may_follow` may get a place behind another client's request
    /// instead, if one is offered while it waits.
    pub async fn checkout_or_follow(self: &Rc<Self>, wait: Duration, may_follow: bool) -> Result<Checkout, PoolError> {
        self.bump(|s| s.checkouts += 1);
        if let Some(conn) = self.take_idle() {
            return Ok(Checkout::Lease(self.lease(conn)));
        }
        match self.take_slot() {
            Ok(()) => {
                // Boxed here and below: opening a connection is rare and its
                // future large (~860 bytes); inline, every transaction's
                // future would carry it (see `client::Session::transaction`).
                return Box::pin(self.open_in_slot(wait)).await.map(Checkout::Lease);
            }
            Err(blocked) => self.blocked_on.set(blocked),
        }
        if may_follow {
            if let Some(opening) = self.claim_posted() {
                self.bump(|s| s.pipelined += 1);
                return Ok(Checkout::Behind(opening));
            }
        }
        self.bump(|s| s.waits += 1);
        // No timer per waiter: the shard's periodic housekeeping expires
        // waiters past their deadline, to its tick's precision (250 ms, for a
        // timeout given in seconds). Written when a pending timer cost every
        // park on glommio; on rt one would be cheap, this is simply enough.
        let waiter = Rc::new(Waiter {
            may_follow,
            grant: RefCell::new(None),
            waker: RefCell::new(None),
            deadline: std::time::Instant::now() + wait,
            since: std::time::Instant::now(),
            timed_out: Cell::new(false),
        });
        self.waiters.borrow_mut().push_back(waiter.clone());
        self.waiters_changed();
        let guard = WaitGuard { pool: self, waiter: &waiter };
        let grant = futures_lite::future::poll_fn(|cx| match guard.waiter.grant.borrow_mut().take() {
            Some(g) => Poll::Ready(Some(g)),
            None if guard.waiter.timed_out.get() => Poll::Ready(None),
            None => {
                *guard.waiter.waker.borrow_mut() = Some(cx.waker().clone());
                Poll::Pending
            }
        })
        .await;
        drop(guard);
        match grant {
            Some(Grant::Conn(conn)) => Ok(Checkout::Lease(self.lease(conn))),
            Some(Grant::Slot) => {
                let left = waiter.deadline.saturating_duration_since(std::time::Instant::now());
                Box::pin(self.open_in_slot(left)).await.map(Checkout::Lease)
            }
            Some(Grant::Behind(opening)) => {
                self.bump(|s| s.pipelined += 1);
                Ok(Checkout::Behind(opening))
            }
            None => {
                self.bump(|s| s.wait_timeouts += 1);
                Err(PoolError::WaitTimeout)
            }
        }
    }

    /// A client waits that may take a place behind another's request.
    fn has_follower(&self) -> bool {
        self.waiters.borrow().iter().any(|w| w.may_follow)
    }

    /// Offers the connection of `connection` (its session and how it
    /// prints values) behind a whole request (running `statements`) to the
    /// first waiter that may follow; `None` if no such client waits.
    /// `holder` is woken when the follower writes.
    pub fn offer_behind(
        &self,
        connection: (&Rc<RefCell<ServerSession>>, &Rc<ConnectionOutput>),
        holder: &Waker,
        statements: impl FnOnce() -> Vec<Rc<Statement>>,
    ) -> Option<Offer> {
        if !self.has_follower() {
            return None;
        }
        let opening = Opening::new(connection, holder.clone(), statements());
        self.offer(&opening).then(|| Offer(opening))
    }

    /// Posts the connection of `connection` behind a whole request for a
    /// client that comes before its reply does (see [`Pool::post`]), if
    /// every connection is lent; the posting lasts as long as the returned
    /// offer.
    pub fn post_behind(
        &self,
        connection: (&Rc<RefCell<ServerSession>>, &Rc<ConnectionOutput>),
        holder: &Waker,
        statements: impl FnOnce() -> Vec<Rc<Statement>>,
    ) -> Option<Offer> {
        if !self.is_exhausted() {
            return None;
        }
        let opening = Opening::new(connection, holder.clone(), statements());
        self.post(&opening);
        Some(Offer(opening))
    }

    /// Gives `opening` to the first waiter that may follow; false if none waits.
    fn offer(&self, opening: &Rc<Opening>) -> bool {
        let waiter = {
            let mut waiters = self.waiters.borrow_mut();
            waiters.iter().position(|w| w.may_follow).and_then(|at| waiters.remove(at))
        };
        let Some(waiter) = waiter else { return false };
        waiter.grant(Grant::Behind(opening.clone()));
        true
    }

    /// Every connection is lent and no other can be opened: a client that
    /// came now would wait.
    pub fn is_exhausted(&self) -> bool {
        self.idle.borrow().is_empty()
            && (self.open.get() >= self.max_size.get() || self.budgets.borrow().iter().any(|b| b.open() >= b.limit()))
    }

    /// Leaves `opening` for the next client that would have to wait and may
    /// follow, for as long as the holder keeps it (it holds the only strong
    /// reference, and drops it to withdraw). A holder whose whole request is
    /// in flight when no one waits posts one, so that a client that comes
    /// while the server works on that request goes behind it rather than
    /// waiting for the whole round trip.
    fn post(&self, opening: &Rc<Opening>) {
        let mut posted = self.posted.borrow_mut();
        posted.retain(|o| o.strong_count() > 0);
        posted.push_back(Rc::downgrade(opening));
    }

    /// The oldest opening still posted, claimed for the caller.
    fn claim_posted(&self) -> Option<Rc<Opening>> {
        let mut posted = self.posted.borrow_mut();
        while let Some(opening) = posted.pop_front() {
            if let Some(opening) = opening.upgrade().filter(|o| o.claim()) {
                return Some(opening);
            }
        }
        None
    }

    /// Wakes the waiters whose query_wait_timeout has passed by `now`, to
    /// give up. Called by the shard's housekeeping at every tick.
    pub fn expire_waiters(&self, now: std::time::Instant) {
        for waiter in self.waiters.borrow().iter() {
            if waiter.deadline <= now && !waiter.timed_out.get() {
                waiter.timed_out.set(true);
                if let Some(waker) = waiter.waker.borrow_mut().take() {
                    waker.wake();
                }
            }
        }
    }

    /// A server connection to be had without waiting for another client:
    /// an idle one, or one opened in a free slot; None if every connection
    /// is lent and no more may be opened (the caller goes without).
    pub async fn checkout_now(self: &Rc<Self>) -> Option<Result<Lease, PoolError>> {
        if let Some(conn) = self.take_idle() {
            return Some(Ok(self.lease(conn)));
        }
        if self.take_slot().is_ok() {
            // No time to wait: one round over the hosts, no retry.
            return Some(self.open_in_slot(Duration::ZERO).await);
        }
        None
    }

    /// An idle server connection, if one is free right now: for pglane's own
    /// work (auto-prepare's validator), which must never make a client wait
    /// or open a connection a client may need.
    pub fn try_idle(self: &Rc<Self>) -> Option<Lease> {
        self.take_idle().map(|conn| self.lease(conn))
    }

    /// The login parameters to show clients, from a server connection of this
    /// pool (opening one if none was ever opened).
    pub async fn server_params(self: &Rc<Self>, wait: Duration) -> Result<Rc<Vec<(String, String)>>, PoolError> {
        if let Some(p) = self.server_params.borrow().clone() {
            return Ok(p);
        }
        let lease = self.checkout(wait).await?;
        let params = self.server_params.borrow().clone().unwrap_or_else(|| Rc::new(lease.params.clone()));
        lease.release();
        Ok(params)
    }

    /// What the server reports when reported setting `name` is set to
    /// `value` as a startup packet gave it, if a login taught the pool.
    pub fn reported_as(&self, name: &str, value: &str) -> Option<String> {
        self.reported_as.borrow().get(&(name.to_owned(), value.to_owned())).cloned()
    }

    /// Remembers what the server reported for `name` given as `value`
    /// (up to [`REPORTED_SPELLINGS`] of them; past that, each login with a
    /// new one asks a server again).
    pub fn learn_reported(&self, name: &str, value: &str, reported: &str) {
        let mut known = self.reported_as.borrow_mut();
        if known.len() < REPORTED_SPELLINGS {
            known.insert((name.to_owned(), value.to_owned()), reported.to_owned());
        }
    }

    /// Connections of this (database, user) open on all shards (its
    /// pool_size budget's count; this shard's alone if it has none).
    pub fn open_over_shards(&self) -> usize {
        self.budgets.borrow().first().map_or(self.open.get(), |own| own.open())
    }

    /// Closes idle connections that sat idle longer than `idle_timeout` (but
    /// for the `keep_open` the pool keeps over all shards, min_pool_size)
    /// or live longer than `lifetime`; returns how many.
    pub fn close_expired(&self, idle_timeout: Duration, lifetime: Duration, keep_open: usize) -> usize {
        let spare = std::cell::Cell::new(self.open_over_shards().saturating_sub(keep_open));
        self.close_idle_where(|c| {
            let idled_out = c.idle_since.elapsed() >= idle_timeout && spare.get() > 0;
            let expired = c.created.elapsed() >= lifetime;
            if idled_out || expired {
                spare.set(spare.get().saturating_sub(1));
            }
            idled_out || expired
        })
    }

    /// Opens connections, one at a time on a task of its own, until
    /// `keep_open` are open over all shards (min_pool_size), while the
    /// pool's limits allow; each goes to the idle list, or to a client that
    /// waits. The shards whose clients use the pool fill it.
    pub fn keep_open(self: &Rc<Self>, keep_open: usize) {
        if self.warming.get() || self.open_over_shards() >= keep_open {
            return;
        }
        self.warming.set(true);
        let pool = self.clone();
        crate::rt::spawn_local(async move {
            while pool.open_over_shards() < keep_open && pool.take_slot().is_ok() {
                match pool.open_in_slot(Duration::ZERO).await {
                    Ok(lease) => lease.release(),
                    Err(e) => {
                        tracing::debug!("min_pool_size: could not open a server connection: {e}");
                        break;
                    }
                }
            }
            pool.warming.set(false);
        })
        .detach();
    }

    /// Closes idle connections (for shutdown, reloads, and a DROP DATABASE
    /// they would stand in the way of); returns how many.
    pub fn close_idle(&self) -> usize {
        self.close_idle_where(|_| true)
    }

    /// Whether this pool's connections are to server database `dbname`.
    pub fn serves_dbname(&self, dbname: &str) -> bool {
        self.target.borrow().dbname == dbname
    }

    /// Closes the idle connections `which` picks; returns how many.
    fn close_idle_where(&self, which: impl Fn(&ServerConn) -> bool) -> usize {
        let closed: Vec<Box<ServerConn>> = {
            let mut idle = self.idle.borrow_mut();
            let (closed, kept) = std::mem::take(&mut *idle).into_iter().partition(|c| which(c));
            *idle = kept;
            closed
        };
        let n = closed.len();
        for conn in closed {
            self.close(conn, Goodbye::Terminate, Pool::slot_freed);
        }
        n
    }

    fn take_idle(&self) -> Option<Box<ServerConn>> {
        self.take_idle_where(|_| true)
    }

    /// The most recently idle healthy connection `which` picks, if any;
    /// the unhealthy ones met on the way are closed (a connection idle for
    /// under [`HEALTH_CHECK_AFTER_IDLE`] is taken as healthy).
    fn take_idle_where(&self, which: impl Fn(&ServerConn) -> bool) -> Option<Box<ServerConn>> {
        loop {
            let conn = {
                let mut idle = self.idle.borrow_mut();
                let at = idle.iter().rposition(|c| which(c))?;
                idle.remove(at)
            };
            if !worth_a_health_check(conn.idle_since, crate::rt::stamp()) || conn.is_healthy() {
                return Some(conn);
            }
            self.bump(|s| s.unhealthy_closed += 1);
            self.give_slot_back();
        }
    }

    /// Opens a connection in a slot already counted in `open` (freed if that fails).
    async fn open_in_slot(self: &Rc<Self>, wait: Duration) -> Result<Lease, PoolError> {
        let mut conn = Box::new(self.open_on_some_host(wait).await?);
        conn.census = Some(CensusToken::enlist(&self.census, conn.generation));
        self.bump(|s| s.connects += 1);
        if self.server_params.borrow().is_none() || self.server_params_host.get() != conn.host {
            *self.server_params.borrow_mut() = Some(Rc::new(conn.params.clone()));
            self.server_params_host.set(conn.host);
        }
        Ok(self.lease(conn))
    }

    fn lease(self: &Rc<Self>, conn: Box<ServerConn>) -> Lease {
        Lease { conn: Some(conn), pool: self.clone() }
    }

    fn next_waiter(&self) -> Option<Rc<Waiter>> {
        let waiter = self.waiters.borrow_mut().pop_front();
        if waiter.is_some() {
            self.waiters_changed();
        }
        waiter
    }

    /// A connection comes back idle and clean.
    fn checkin(&self, mut conn: Box<ServerConn>) {
        if conn.generation < self.generation.get() || self.over_budget() || !self.keeps_host(&conn) {
            self.close(conn, Goodbye::Terminate, Pool::slot_freed);
            return;
        }
        if self.owes_a_yield() {
            self.retire_for_another(conn);
            return;
        }
        if let Some(waiter) = self.next_waiter() {
            waiter.grant(Grant::Conn(conn));
            return;
        }
        conn.idle_since = crate::rt::stamp();
        self.idle.borrow_mut().push(conn);
    }

    /// A connection was closed: its slot goes to the next waiter, if any.
    fn slot_freed(&self) {
        // Over a limit (lowered by a reload): the slot goes away rather than
        // to a waiter, or the pool would never shrink under load; so it
        // does for another shard's pool that wants it.
        if self.over_budget() || self.owes_a_yield() {
            self.give_slot_back();
            return;
        }
        match self.next_waiter() {
            Some(waiter) => waiter.grant(Grant::Slot),
            None => self.give_slot_back(),
        }
    }
}

impl Waiter {
    fn grant(&self, grant: Grant) {
        *self.grant.borrow_mut() = Some(grant);
        if let Some(w) = self.waker.borrow_mut().take() {
            w.wake();
        }
    }
}

/// Leaves the wait queue when a wait ends for any reason; a grant that arrived
/// too late (timeout, or the waiting client went away) is passed on.
struct WaitGuard<'a> {
    pool: &'a Pool,
    waiter: &'a Rc<Waiter>,
}

impl Drop for WaitGuard<'_> {
    fn drop(&mut self) {
        self.pool.waiters.borrow_mut().retain(|w| !Rc::ptr_eq(w, self.waiter));
        self.pool.waiters_changed();
        match self.waiter.grant.borrow_mut().take() {
            Some(Grant::Conn(conn)) => self.pool.checkin(conn),
            Some(Grant::Slot) => self.pool.slot_freed(),
            Some(Grant::Behind(opening)) => opening.follower_left(),
            None => {}
        }
    }
}

/// A server connection lent to one client.
pub struct Lease {
    conn: Option<Box<ServerConn>>,
    pool: Rc<Pool>,
}

impl Lease {
    /// Gives the connection back for reuse. Only call this when the server is
    /// idle (ReadyForQuery 'I') with nothing in flight.
    pub fn release(mut self) {
        let Some(mut conn) = self.conn.take() else { return };
        if conn.cancel_key.has_cancels_under_way() {
            // A cancel request for the query that just ended is still on its
            // way: the connection serves no one else until the server has
            // taken it (and found its backend idle).
            let (pool, key) = (self.pool.clone(), conn.cancel_key.clone());
            crate::rt::spawn_local(async move {
                key.cancels_done().await;
                Lease { conn: Some(conn), pool }.release();
            })
            .detach();
            return;
        }
        let read_write = self.pool.target.borrow().target_session_attrs == crate::config::TargetSessionAttrs::ReadWrite;
        match std::mem::take(&mut conn.refused_a_write) && read_write {
            true => self.pool.recheck(conn),
            false => self.pool.checkin(conn),
        }
    }
}

impl std::ops::Deref for Lease {
    type Target = ServerConn;
    fn deref(&self) -> &ServerConn {
        self.conn.as_deref().expect("lease holds a connection until released")
    }
}

impl std::ops::DerefMut for Lease {
    fn deref_mut(&mut self) -> &mut ServerConn {
        self.conn.as_deref_mut().expect("lease holds a connection until released")
    }
}

impl Drop for Lease {
    /// Dropped without `release`: the connection's state is unknown, so it is
    /// closed (hung up on) and its slot freed once its backend has gone.
    fn drop(&mut self) {
        if let Some(conn) = self.conn.take() {
            self.pool.close(conn, Goodbye::HangUp, Pool::slot_freed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ServerAddress;
    use crate::prepare::Registry;
    use futures_lite::future::{block_on, poll_once};

    #[test]
    fn only_a_connection_idle_for_a_while_is_worth_a_health_check() {
        let back = crate::rt::Stamp::read();
        assert!(!worth_a_health_check(back, back));
        assert!(!worth_a_health_check(back, back.saturating_add(Duration::from_micros(999))));
        assert!(worth_a_health_check(back, back.saturating_add(HEALTH_CHECK_AFTER_IDLE)));
        assert!(worth_a_health_check(back, back.saturating_add(Duration::from_secs(30))));
        // A clock read before the connection came back: not idle at all.
        assert!(!worth_a_health_check(back.saturating_add(Duration::from_secs(1)), back));
    }

    /// A server no test reaches.
    fn target() -> ServerTarget {
        ServerTarget {
            hosts: vec![crate::server::ServerHost {
                address: ServerAddress::Tcp { host: "127.0.0.1".into(), port: 1 },
                tls: None,
            }],
            target_session_attrs: Default::default(),
            load_balance_hosts: Default::default(),
            retry_timeout: Duration::ZERO,
            dbname: "app".into(),
            user: "app".into(),
            secret: None,
            scram_keys: None,
            connect_timeout: Duration::from_secs(1),
            tcp: crate::net::TcpTuning::default(),
            max_prepared_statements: 8,
            scram_max_iterations: 4096,
            learn_output_settings: false,
        }
    }

    /// A pool whose every connection is lent.
    fn exhausted_pool() -> Rc<Pool> {
        let pool = Pool::new(target(), 0, Registry::new(0, 8));
        assert!(pool.is_exhausted());
        pool
    }

    fn opening() -> Rc<Opening> {
        opening::tests::opening(Waker::noop().clone())
    }

    /// A client checking out now: what it got, or None if it would wait.
    fn arrives(pool: &Rc<Pool>, may_follow: bool) -> Option<Checkout> {
        block_on(poll_once(pool.checkout_or_follow(Duration::from_secs(60), may_follow))).map(|got| got.expect("no error"))
    }

    #[test]
    fn a_posted_opening_goes_to_the_next_client_that_may_follow_and_to_it_alone() {
        let pool = exhausted_pool();
        let posted = opening();
        pool.post(&posted);
        assert!(arrives(&pool, false).is_none(), "a client that may not follow waits");
        assert!(!posted.is_claimed());
        match arrives(&pool, true) {
            Some(Checkout::Behind(got)) => assert!(Rc::ptr_eq(&got, &posted)),
            _ => panic!("the client that may follow did not go behind"),
        }
        assert!(posted.is_claimed());
        assert!(arrives(&pool, true).is_none(), "one follower per opening");
        assert_eq!(pool.stats().pipelined, 1);
        assert_eq!(pool.waiting_count(), 0, "the clients that waited left the queue");
    }

    #[test]
    fn a_place_behind_is_offered_only_to_a_waiting_client_that_may_follow() {
        let pool = exhausted_pool();
        let session = opening().session.clone();
        let waker = Waker::noop().clone();
        assert!(pool.offer_behind((&session, &Rc::default()), &waker, Vec::new).is_none(), "no one waits");
        let mut stays = Box::pin(pool.checkout_or_follow(Duration::from_secs(60), false));
        assert!(block_on(poll_once(&mut stays)).is_none());
        assert!(pool.offer_behind((&session, &Rc::default()), &waker, Vec::new).is_none(), "the one waiting may not follow");
        let mut follows = Box::pin(pool.checkout_or_follow(Duration::from_secs(60), true));
        assert!(block_on(poll_once(&mut follows)).is_none());
        let offer =
            pool.offer_behind((&session, &Rc::default()), &waker, Vec::new).expect("offered to the client that may follow");
        match block_on(poll_once(&mut follows)) {
            Some(Ok(Checkout::Behind(got))) => assert!(Rc::ptr_eq(&got, &offer.0)),
            _ => panic!("the client that may follow did not go behind"),
        }
        assert_eq!(pool.waiting_count(), 1, "the other still waits");
    }

    #[test]
    fn a_place_behind_is_posted_only_when_every_connection_is_lent() {
        let session = opening().session.clone();
        let waker = Waker::noop().clone();
        let roomy = Pool::new(target(), 1, Registry::new(0, 8));
        assert!(
            roomy.post_behind((&session, &Rc::default()), &waker, Vec::new).is_none(),
            "a client that came would get a connection"
        );
        let pool = exhausted_pool();
        let posted = pool.post_behind((&session, &Rc::default()), &waker, Vec::new).expect("posted");
        assert!(matches!(arrives(&pool, true), Some(Checkout::Behind(got)) if Rc::ptr_eq(&got, &posted.0)));
    }

    #[test]
    fn a_withdrawn_or_finished_opening_is_not_taken() {
        let pool = exhausted_pool();
        // The holder's relay ran again: it dropped its opening.
        pool.post(&opening());
        assert!(arrives(&pool, true).is_none());
        // The holder let go of it in another way (its connection was lost).
        let lost = opening();
        pool.post(&lost);
        lost.lose();
        assert!(arrives(&pool, true).is_none());
        // The oldest one still there is taken.
        let (first, second) = (opening(), opening());
        pool.post(&first);
        pool.post(&second);
        assert!(matches!(arrives(&pool, true), Some(Checkout::Behind(got)) if Rc::ptr_eq(&got, &first)));
        assert!(matches!(arrives(&pool, true), Some(Checkout::Behind(got)) if Rc::ptr_eq(&got, &second)));
    }
}
