//! The read router: which server a client's transaction goes to when its
//! database has `read_routing = "standbys"`.
//!
//! This module owns, per shard and per (database, user) pool that routes:
//! the view of each host (primary or standby, and its WAL position, kept
//! fresh by a monitor task with a connection of its own per host), one
//! pool per host for the reads sent there, the choice of a standby for a
//! read, and the counters of what it decided. [`classify`] says what a
//! request is; [`lsn`] spells WAL positions.
//!
//! A client session asks it ([`Router::standby_for`]) and keeps its own
//! "min LSN" (the position its last write committed at, or what it set
//! as `pglane.min_lsn`); the router never reaches into a session, never
//! touches a client's traffic, and never blocks the shard.
//!
//! The rule for a read: a standby the monitor saw in recovery within
//! [`FRESH_FOR`], whose replay position is at or past the client's min LSN,
//! and no more than `read_routing_max_lag` bytes behind the primary's last
//! seen position. Positions only grow on a running standby, so a position
//! a few ms old that is far enough is still far enough when the read runs.

pub mod classify;
pub mod client;
pub mod lsn;

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::rc::{Rc, Weak};
use std::task::{Poll, Waker};
use std::time::{Duration, Instant};

use tracing::{debug, info};

use crate::config::ServerAddress;
use crate::pool::Pool;
use crate::server::{ServerConn, ServerTarget};
pub use classify::{Classifier, Kind};
pub use lsn::Lsn;

/// How often the monitor asks each host where it is.
pub const POLL_EVERY: Duration = Duration::from_millis(5);

/// A host not heard from for this long is not chosen for reads.
pub const FRESH_FOR: Duration = Duration::from_secs(1);

/// How long the monitor waits before reconnecting to a host it lost.
const RECONNECT_AFTER: Duration = Duration::from_millis(250);

/// The monitor's question: in recovery, and the position (a standby's
/// replay position; a primary's insert position, past every record of
/// every transaction that had committed when the question was asked).
pub const POSITION_QUERY: &str = "SELECT pg_catalog.pg_is_in_recovery()::pg_catalog.text, \
     (CASE WHEN pg_catalog.pg_is_in_recovery() THEN pg_catalog.pg_last_wal_replay_lsn() \
     ELSE pg_catalog.pg_current_wal_insert_lsn() END)::pg_catalog.text";

/// The session setting a client may carry a position in (startup packet or SET).
pub const MIN_LSN_SETTING: &str = "pglane.min_lsn";

/// What a host is, as the monitor last saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Role {
    #[default]
    Unknown,
    Primary,
    Standby,
}

impl Role {
    /// As the admin console and metrics spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Primary => "primary",
            Role::Standby => "standby",
            Role::Unknown => "unknown",
        }
    }
}

/// One host as the monitor last saw it.
#[derive(Debug, Clone, Copy, Default)]
pub struct HostView {
    pub role: Role,
    /// Replay position of a standby, insert position of a primary.
    pub position: Option<Lsn>,
    /// When it last answered.
    pub seen: Option<Instant>,
    /// When the question it last answered was asked: its position is at
    /// least what it was then.
    pub asked: Option<Instant>,
}

impl HostView {
    fn is_fresh(&self, now: Instant) -> bool {
        self.seen.is_some_and(|seen| now.saturating_duration_since(seen) <= FRESH_FOR)
    }
}

/// Reads the monitor's answer: `("t", "0/3000148")`.
pub fn read_position(pairs: &[(String, String)]) -> Option<(Role, Lsn)> {
    let (recovery, position) = pairs.first()?;
    let role = match recovery.as_str() {
        "true" | "t" => Role::Standby,
        "false" | "f" => Role::Primary,
        _ => return None,
    };
    Some((role, position.parse().ok()?))
}

/// The standby a read may go to, trying hosts from `start` round: fresh,
/// in recovery, replayed to `need` (if any), at most `max_lag` bytes behind
/// the newest primary position seen (if any).
pub fn choose(view: &[HostView], need: Option<Lsn>, max_lag: u64, now: Instant, start: usize) -> Option<usize> {
    let primary = view.iter().filter(|h| h.role == Role::Primary && h.is_fresh(now)).filter_map(|h| h.position).max();
    let fits = |h: &HostView| {
        let Some(position) = h.position else { return false };
        h.role == Role::Standby
            && h.is_fresh(now)
            && need.is_none_or(|need| position >= need)
            && primary.is_none_or(|p| p.0.saturating_sub(position.0) <= max_lag)
    };
    let n = view.len();
    (0..n).map(|i| (start + i) % n).find(|&i| fits(&view[i]))
}

/// How far behind the newest fresh primary position each standby of `view`
/// is, in bytes (`None` for a host that is not a standby, or when no
/// primary position is known).
pub fn lags(view: &[HostView]) -> Vec<Option<u64>> {
    let now = crate::rt::now();
    let primary = view.iter().filter(|h| h.role == Role::Primary && h.is_fresh(now)).filter_map(|h| h.position).max();
    view.iter()
        .map(|h| match (h.role, h.position, primary) {
            (Role::Standby, Some(at), Some(p)) => Some(p.0.saturating_sub(at.0)),
            _ => None,
        })
        .collect()
}

/// What the router decided, per shard; summed over shards by the admin console.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct RouterStats {
    /// Transactions sent to a standby.
    pub reads_to_standbys: u64,
    /// Transactions sent to the primary (not reads, or no standby would do).
    pub to_primary: u64,
    /// Reads sent to the primary because no standby had replayed the
    /// client's last write (a stale read avoided).
    pub stale_reads_avoided: u64,
    /// Reads sent to the primary because no standby was up, in recovery
    /// and within the lag bound.
    pub no_standby: u64,
    /// Positions of clients after their transactions on the primary, taken
    /// from the monitor's next look at it (no question of their own).
    pub positions_learned: u64,
    /// Reads a standby refused as writes (25006) or could not answer (it
    /// went away) before anything of them reached the client, run again
    /// on the primary (see `client::routing`).
    pub retried_on_primary: u64,
}

impl RouterStats {
    pub fn add(&mut self, o: &RouterStats) {
        self.reads_to_standbys += o.reads_to_standbys;
        self.to_primary += o.to_primary;
        self.stale_reads_avoided += o.stale_reads_avoided;
        self.no_standby += o.no_standby;
        self.positions_learned += o.positions_learned;
        self.retried_on_primary += o.retried_on_primary;
    }
}

/// One shard's router for one (database, user) pool.
pub struct Router {
    view: RefCell<Vec<HostView>>,
    /// The pool of reads for each host (index: the host's in the list).
    pools: Vec<Rc<Pool>>,
    max_lag: u64,
    next: Cell<usize>,
    stats: Cell<RouterStats>,
    pub classifier: Rc<Classifier>,
    /// What it was made from: its hosts, in order, and its pools' size. A
    /// reload that changes either, or the lag bound, retires it
    /// ([`Router::retire`]).
    made_from: (Vec<ServerAddress>, usize),
    /// A reload changed its database: it routes nothing more, its monitors
    /// stop, and its sessions take the shard's new router (or none).
    retired: Cell<bool>,
    /// Per host: a client waits for the primary's position after its
    /// transaction, so the host's monitor looks now rather than at its next
    /// poll ([`Router::look_at_the_primary`]); and the monitor's waker.
    look_now: RefCell<Vec<(bool, Option<Waker>)>>,
}

impl Router {
    /// A router over `pools` (one per host of `target`'s list, in order,
    /// `size` connections each), with a monitor task per host, which ends
    /// when the router goes or is retired.
    pub fn start(
        target: &ServerTarget,
        pools: Vec<Rc<Pool>>,
        size: usize,
        max_lag: u64,
        classifier: Rc<Classifier>,
    ) -> Rc<Router> {
        let router = Rc::new(Router::new(pools, target.hosts.len(), (addresses(target), size), max_lag, classifier));
        for host in 0..target.hosts.len() {
            let one = host_target(target, host);
            crate::rt::spawn_local(monitor(Rc::downgrade(&router), one, host)).detach();
        }
        router
    }

    /// Whether it still fits its database as the config now has it: the
    /// same hosts, in order, the same pools' size and lag bound.
    pub fn fits(&self, target: &ServerTarget, size: usize, max_lag: u64) -> bool {
        self.made_from == (addresses(target), size) && self.max_lag == max_lag
    }

    /// A reload changed its database: no more reads go through it, its
    /// read pools close their connections as they come back, and its
    /// monitors stop at their next poll.
    pub fn retire(&self) {
        self.retired.set(true);
        for pool in &self.pools {
            pool.reconnect();
        }
    }

    pub fn is_retired(&self) -> bool {
        self.retired.get()
    }

    /// A router over `hosts` hosts (its pools, if any, one per host), before
    /// any monitor looks at them.
    fn new(
        pools: Vec<Rc<Pool>>,
        hosts: usize,
        made_from: (Vec<ServerAddress>, usize),
        max_lag: u64,
        classifier: Rc<Classifier>,
    ) -> Router {
        Router {
            view: RefCell::new(vec![HostView::default(); hosts]),
            pools,
            max_lag,
            next: Cell::new(0),
            stats: Cell::new(RouterStats::default()),
            classifier,
            made_from,
            retired: Cell::new(false),
            look_now: RefCell::new(vec![(false, None); hosts]),
        }
    }

    /// A router over `hosts` hosts with no pools and no monitor, whose view
    /// a test sets with `saw`.
    #[cfg(test)]
    pub(crate) fn for_tests(hosts: usize) -> Rc<Router> {
        Rc::new(Router::new(Vec::new(), hosts, (Vec::new(), 0), u64::MAX, Rc::new(Classifier::default())))
    }

    /// The pool of a standby that may serve a read of a client whose
    /// writes reached `need`, or `None`: the read goes to the primary
    /// (counted as a stale read avoided if only `need` stood in the way).
    pub fn standby_for(&self, need: Option<Lsn>) -> Option<(usize, Rc<Pool>)> {
        let now = crate::rt::now();
        let view = self.view.borrow();
        let start = self.next.get();
        let chosen = choose(&view, need, self.max_lag, now, start);
        let mut stats = self.stats.get();
        match chosen {
            Some(host) => {
                self.next.set(host + 1);
                stats.reads_to_standbys += 1;
            }
            None => {
                stats.to_primary += 1;
                if need.is_some() && choose(&view, None, self.max_lag, now, start).is_some() {
                    stats.stale_reads_avoided += 1;
                } else {
                    stats.no_standby += 1;
                }
            }
        }
        self.stats.set(stats);
        chosen.and_then(|host| Some((host, self.pools.get(host)?.clone())))
    }

    /// A transaction that was not a read went to the primary.
    pub fn count_primary(&self) {
        self.count(|s| s.to_primary += 1);
    }

    /// A client's transaction on the primary ended: the primary's monitor
    /// looks at once (one question for every client waiting, never one of
    /// the client's own), so that its next read may find a standby.
    pub fn look_at_the_primary(&self) {
        let view = self.view.borrow();
        let mut look_now = self.look_now.borrow_mut();
        for (host, slot) in look_now.iter_mut().enumerate() {
            if view.get(host).is_some_and(|h| h.role == Role::Primary) {
                slot.0 = true;
                if let Some(waker) = slot.1.take() {
                    waker.wake();
                }
            }
        }
    }

    /// Whether host `host`'s monitor is asked to look now (and forgets it);
    /// else keeps `waker` to be woken when it is.
    fn asked_to_look(&self, host: usize, waker: &Waker) -> bool {
        let mut look_now = self.look_now.borrow_mut();
        let Some(slot) = look_now.get_mut(host) else { return false };
        if std::mem::take(&mut slot.0) {
            return true;
        }
        slot.1 = Some(waker.clone());
        false
    }

    /// A read a standby did not answer runs again on the primary.
    pub fn count_retry(&self) {
        self.count(|s| s.retried_on_primary += 1);
    }

    /// A client's position after its transaction on the primary was learned.
    pub fn count_position_learned(&self) {
        self.count(|s| s.positions_learned += 1);
    }

    /// The primary's position as the monitor saw it in a look asked after
    /// `after` (so past everything committed by then), if it has looked
    /// since. Both instants are read from the clock itself.
    pub fn primary_position_after(&self, after: Instant) -> Option<Lsn> {
        self.view
            .borrow()
            .iter()
            .filter(|h| h.role == Role::Primary && h.asked.is_some_and(|asked| asked > after))
            .filter_map(|h| h.position)
            .max()
    }

    fn count(&self, f: impl FnOnce(&mut RouterStats)) {
        let mut stats = self.stats.get();
        f(&mut stats);
        self.stats.set(stats);
    }

    pub fn stats(&self) -> RouterStats {
        self.stats.get()
    }

    /// The hosts as last seen.
    pub fn view(&self) -> Vec<HostView> {
        self.view.borrow().clone()
    }

    pub fn pools(&self) -> &[Rc<Pool>] {
        &self.pools
    }

    fn saw(&self, host: usize, seen: HostView) {
        if let Some(slot) = self.view.borrow_mut().get_mut(host) {
            if slot.role != seen.role && seen.role != Role::Unknown {
                info!(host, role = ?seen.role, "read routing: host seen as {:?}", seen.role);
            }
            *slot = seen;
        }
    }
}

/// The addresses of `target`'s hosts, in order.
fn addresses(target: &ServerTarget) -> Vec<ServerAddress> {
    target.hosts.iter().map(|h| h.address.clone()).collect()
}

/// `target` narrowed to its host `host`, any session, no output settings
/// learned, no waiting for a host that will not do: what the monitor and a
/// host's read pool connect with.
pub fn host_target(target: &ServerTarget, host: usize) -> ServerTarget {
    ServerTarget {
        hosts: target.hosts.get(host).cloned().into_iter().collect(),
        target_session_attrs: crate::config::TargetSessionAttrs::Any,
        retry_timeout: Duration::ZERO,
        ..target.clone()
    }
}

/// Asks host `host` where it is every [`POLL_EVERY`] on a connection of its
/// own, and tells the router, until the router is gone. A host that cannot
/// be reached is seen as such at once (no role, no position).
async fn monitor(router: Weak<Router>, target: ServerTarget, host: usize) {
    let mut conn: Option<ServerConn> = None;
    let timeout = target.connect_timeout;
    loop {
        if router.upgrade().is_none_or(|r| r.is_retired()) {
            return;
        }
        let current = match conn.as_mut() {
            Some(c) => c,
            None => match crate::rt::with_timeout(timeout, ServerConn::connect(&target, 0, 0)).await {
                Some(Ok(c)) => conn.insert(c),
                failed => {
                    debug!(host, ok = failed.is_some(), "read routing: monitor cannot connect");
                    if let Some(router) = router.upgrade() {
                        router.saw(host, HostView::default());
                    }
                    crate::rt::sleep(RECONNECT_AFTER).await;
                    continue;
                }
            },
        };
        // The clock itself, not the runtime's once-a-turn reading: a look
        // counts for a client only if it was asked after the client's
        // transaction was seen to end (`primary_position_after`).
        let asked = Instant::now();
        let answer = crate::rt::with_timeout(timeout, current.query_pairs(POSITION_QUERY)).await;
        let Some(strong) = router.upgrade() else { return };
        match answer {
            Some(Ok(Ok(pairs))) => {
                let now = crate::rt::now();
                let seen = match read_position(&pairs) {
                    Some((role, position)) => HostView { role, position: Some(position), seen: Some(now), asked: Some(asked) },
                    // A standby that has replayed nothing yet.
                    None => HostView { role: Role::Unknown, position: None, seen: Some(now), asked: Some(asked) },
                };
                strong.saw(host, seen);
                drop(strong);
                next_look(&router, host).await;
            }
            _ => {
                strong.saw(host, HostView::default());
                drop(strong);
                conn = None;
                crate::rt::sleep(RECONNECT_AFTER).await;
            }
        }
    }
}

/// Waits [`POLL_EVERY`], or less if a client asks for a look at the
/// primary ([`Router::look_at_the_primary`]) meanwhile.
async fn next_look(router: &Weak<Router>, host: usize) {
    let mut timer = std::pin::pin!(crate::rt::sleep(POLL_EVERY));
    std::future::poll_fn(|cx| {
        if timer.as_mut().poll(cx).is_ready() {
            return Poll::Ready(());
        }
        match router.upgrade() {
            Some(router) if !router.asked_to_look(host, cx.waker()) => Poll::Pending,
            _ => Poll::Ready(()),
        }
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(role: Role, position: u64, seen: Instant) -> HostView {
        HostView { role, position: Some(Lsn(position)), seen: Some(seen), asked: Some(seen) }
    }

    #[test]
    fn a_read_goes_to_a_fresh_standby_that_has_replayed_far_enough() {
        let now = Instant::now();
        let view = [at(Role::Primary, 1000, now), at(Role::Standby, 900, now), at(Role::Standby, 500, now)];
        assert_eq!(choose(&view, None, 1 << 20, now, 0), Some(1));
        assert_eq!(choose(&view, None, 1 << 20, now, 2), Some(2));
        // Round: from host 2, wrapping past the primary.
        assert_eq!(choose(&view, Some(Lsn(600)), 1 << 20, now, 2), Some(1));
        assert_eq!(choose(&view, Some(Lsn(900)), 1 << 20, now, 0), Some(1));
        assert_eq!(choose(&view, Some(Lsn(901)), 1 << 20, now, 0), None);
        // Lag past the bound.
        assert_eq!(choose(&view, None, 99, now, 0), None);
        assert_eq!(choose(&view, None, 100, now, 2), Some(1));
    }

    #[test]
    fn stale_unknown_and_promoted_hosts_serve_no_reads() {
        let now = Instant::now() + FRESH_FOR * 3;
        let old = now - FRESH_FOR * 2;
        assert_eq!(choose(&[at(Role::Standby, 900, old)], None, u64::MAX, now, 0), None);
        assert_eq!(choose(&[HostView::default()], None, u64::MAX, now, 0), None);
        assert_eq!(choose(&[at(Role::Primary, 900, now)], None, u64::MAX, now, 0), None);
        let no_position = HostView { role: Role::Standby, position: None, seen: Some(now), asked: Some(now) };
        assert_eq!(choose(&[no_position], None, u64::MAX, now, 0), None);
        // No primary seen (down, or failing over): the lag cannot be known, reads go on.
        assert_eq!(choose(&[HostView::default(), at(Role::Standby, 5, now)], None, 1, now, 0), Some(1));
        assert_eq!(choose(&[], None, 1, now, 0), None);
    }

    #[test]
    fn the_monitor_answer_is_read() {
        let pair = |a: &str, b: &str| vec![(a.to_owned(), b.to_owned())];
        assert_eq!(read_position(&pair("true", "0/3000148")), Some((Role::Standby, Lsn(0x300_0148))));
        assert_eq!(read_position(&pair("false", "1/0")), Some((Role::Primary, Lsn(1 << 32))));
        assert_eq!(read_position(&pair("maybe", "1/0")), None);
        assert_eq!(read_position(&pair("true", "nope")), None);
        assert_eq!(read_position(&[]), None);
    }
}
