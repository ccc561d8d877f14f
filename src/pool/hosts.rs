//! Which of a database's hosts a pool's next server connection goes to, and
//! what the pool has learnt about each host.
//!
//! A database may list several hosts (a primary and its standbys) and ask
//! for a kind of session (`target_session_attrs`, as libpq defines it). This
//! module owns the pool's [`HostBook`]: for each host, what its last
//! connection attempt or check showed ([`Seen`]). From it comes the order a
//! new connection tries the hosts in ([`HostBook::order`]): the order
//! `load_balance_hosts` asks for, then hosts known to be unsuitable after
//! the others, and hosts that could not be reached recently last. It also
//! owns the pool's actions on hosts:
//!
//! - [`Pool::open_on_some_host`]: a new connection tries the hosts in that
//!   order, like one libpq connection attempt, and takes the first whose
//!   session target_session_attrs accepts (for prefer-standby, a primary
//!   only when no host is a standby). When none does and waiting may cure
//!   it (hosts unreachable, shutting down or not what is asked for: a
//!   failover in progress), it tries again every [`RETRY_PAUSE`] until
//!   `server_retry_timeout`, holding its client as a busy pool would;
//! - a host found unsuitable, or unreachable while there is another to go
//!   to, has its idle connections closed at once, and lent ones when they
//!   come back ([`Pool::keeps_host`]);
//! - [`Pool::check_hosts`], run by the shard every `host_check_interval`,
//!   asks one idle connection per host what its session is now (a standby
//!   is promoted under its sessions; a primary fenced with
//!   `default_transaction_read_only` tells its sessions at their next
//!   query), and [`Pool::recheck`] asks a connection that passed a client
//!   a read-only error (25006) on a read-write pool.
//!
//! It never relays anything and never decides who gets a connection.

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::time::{Duration, Instant};

use rand::seq::SliceRandom;
use tracing::{info, warn};

use super::{Pool, PoolError};
use crate::config::{LoadBalanceHosts, TargetSessionAttrs};
use crate::server::{Fit, ServerConn, ServerError, ServerTarget};

/// How long a host that could not be reached, or refused a login, is tried
/// after the others.
pub const DOWN_FOR: Duration = Duration::from_secs(5);

/// The pause between two rounds over the hosts when none would do.
pub const RETRY_PAUSE: Duration = Duration::from_millis(250);

/// What a host's last connection attempt or check showed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Seen {
    /// Nothing yet.
    Unknown,
    /// A session target_session_attrs accepts.
    Fits,
    /// A session it takes only if no host fits (a primary, for prefer-standby).
    Fallback,
    /// A session it does not accept: its connections are closed.
    Misfit,
    /// It could not be reached, or was going away or not up yet: its
    /// connections are closed, and it is tried last until `until`.
    Down { until: Instant },
    /// It refused a login for a reason waiting does not cure (a wrong
    /// password, too many connections): tried last until `until`; the
    /// connections it has stay.
    Refused { until: Instant },
}

/// What a pool knows of its hosts (indexes into its target's `hosts`).
#[derive(Debug)]
pub struct HostBook {
    seen: RefCell<Vec<Seen>>,
    /// `load_balance_hosts = disable`: the host the last suitable connection
    /// came from, tried first.
    preferred: Cell<usize>,
    /// `round-robin`: the host the next connection starts with.
    next: Cell<usize>,
}

impl HostBook {
    pub fn new(hosts: usize) -> HostBook {
        HostBook { seen: RefCell::new(vec![Seen::Unknown; hosts.max(1)]), preferred: Cell::new(0), next: Cell::new(0) }
    }

    /// How many hosts.
    pub fn count(&self) -> usize {
        self.seen.borrow().len()
    }

    /// The host the next `round-robin` connection starts with: the one
    /// after `turn` connections.
    pub fn set_turn(&self, turn: usize) {
        self.next.set(turn % self.count());
    }

    /// Forgets everything: the hosts changed (a reload).
    pub fn reset(&self, hosts: usize) {
        *self.seen.borrow_mut() = vec![Seen::Unknown; hosts.max(1)];
        self.preferred.set(0);
        self.next.set(0);
    }

    pub fn seen(&self, host: usize) -> Seen {
        self.seen.borrow().get(host).copied().unwrap_or(Seen::Unknown)
    }

    pub fn saw(&self, host: usize, seen: Seen) {
        if let Some(slot) = self.seen.borrow_mut().get_mut(host) {
            *slot = seen;
        }
        if seen == Seen::Fits {
            self.preferred.set(host);
        }
    }

    /// The hosts in the order a new connection tries them at `now`.
    pub fn order(&self, balance: LoadBalanceHosts, now: Instant) -> Vec<usize> {
        let n = self.count();
        let mut order: Vec<usize> = match balance {
            LoadBalanceHosts::Disable => {
                let first = self.preferred.get().min(n - 1);
                std::iter::once(first).chain((0..n).filter(|&h| h != first)).collect()
            }
            LoadBalanceHosts::RoundRobin => {
                let first = self.next.get() % n;
                self.next.set((first + 1) % n);
                (0..n).map(|i| (first + i) % n).collect()
            }
            LoadBalanceHosts::Random => {
                let mut hosts: Vec<usize> = (0..n).collect();
                hosts.shuffle(&mut rand::thread_rng());
                hosts
            }
        };
        let seen = self.seen.borrow();
        // Stable: within a rank, the order above.
        order.sort_by_key(|&h| match seen[h] {
            Seen::Unknown | Seen::Fits => 0,
            Seen::Down { until } | Seen::Refused { until } if until <= now => 0,
            Seen::Fallback | Seen::Misfit => 1,
            Seen::Down { .. } | Seen::Refused { .. } => 2,
        });
        order
    }

    /// May a connection to `host` go on serving clients? Not if the host
    /// is unsuitable, nor, when there is another host to go to, if it
    /// could not be reached (a connection that looks fine may hang). The
    /// one host of a database keeps its connections through a failed
    /// connection attempt: closing them would help nothing.
    pub fn keeps(&self, host: usize) -> bool {
        match self.seen(host) {
            Seen::Misfit => false,
            Seen::Down { .. } => self.count() == 1,
            _ => true,
        }
    }
}

/// Why one host did not give a connection, for the error a client sees.
struct Miss {
    host: String,
    why: String,
    /// Waiting may cure it (see `ServerError::is_unreachable`), or the host
    /// is up but not what is asked for (a failover may be under way).
    curable: bool,
    error: Option<ServerError>,
}

/// Frees a pool slot unless the connection opened in it is kept.
struct SlotGuard<'a> {
    pool: &'a Pool,
    armed: bool,
}

impl Drop for SlotGuard<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.pool.slot_freed();
        }
    }
}

impl Pool {
    /// Opens a connection in a slot already counted in `open`, on the first
    /// host that will do, trying again while none does and waiting may cure
    /// that, until `server_retry_timeout` has passed since the pool found no
    /// host, or `wait` (the client's query_wait_timeout left), whichever is
    /// first. The slot is freed if this fails or is dropped.
    pub(super) async fn open_on_some_host(&self, wait: Duration) -> Result<ServerConn, PoolError> {
        let mut slot = SlotGuard { pool: self, armed: true };
        let target = self.target.borrow().clone();
        let waited_enough = crate::rt::now() + wait;
        loop {
            match self.open_round(&target).await {
                Ok(conn) => {
                    slot.armed = false;
                    self.no_host_since.set(None);
                    return Ok(conn);
                }
                Err(misses) => {
                    let curable = misses.iter().any(|m| m.curable);
                    let now = crate::rt::now();
                    // Counted from when the pool first found no host, not
                    // from when this client began: the clients queued
                    // behind this one do not each wait the whole time again.
                    let since = self.no_host_since.get().unwrap_or(now);
                    self.no_host_since.set(Some(since));
                    let deadline = waited_enough.min(since + target.retry_timeout);
                    if !curable || now + RETRY_PAUSE > deadline {
                        self.bump(|s| s.connect_failures += 1);
                        return Err(no_server(&target, misses));
                    }
                    crate::rt::sleep(RETRY_PAUSE).await;
                }
            }
        }
    }

    /// One round over the hosts, in the book's order.
    async fn open_round(&self, target: &ServerTarget) -> Result<ServerConn, Vec<Miss>> {
        let attrs = target.target_session_attrs;
        let mut misses = Vec::new();
        let mut fallback = None;
        if target.load_balance_hosts == LoadBalanceHosts::RoundRobin {
            // In turn over every shard's pool of this (database, user), not
            // each shard from the first host: its own budget is theirs too.
            if let Some(own) = self.budgets.borrow().first() {
                self.hosts.set_turn(own.next_turn());
            }
        }
        for host in self.hosts.order(target.load_balance_hosts, crate::rt::now()) {
            let address = target.hosts[host].address.to_string();
            // Boxed: connecting (TLS included) is a large future, and
            // checkout is part of every client task's state.
            let conn = match Box::pin(ServerConn::connect(target, host, self.generation.get())).await {
                Ok(conn) => conn,
                Err(e) => {
                    let curable = e.is_unreachable();
                    let until = crate::rt::now() + DOWN_FOR;
                    if curable {
                        self.lost_host(host, Seen::Down { until }, &format!("{e}"));
                    } else {
                        self.hosts.saw(host, Seen::Refused { until });
                    }
                    misses.push(Miss { host: address, why: e.to_string(), curable, error: Some(e) });
                    continue;
                }
            };
            let Some(role) = conn.role.filter(|_| attrs != TargetSessionAttrs::Any) else {
                self.hosts.saw(host, Seen::Fits);
                return Ok(conn);
            };
            match role.fit(attrs) {
                Fit::Yes => {
                    self.hosts.saw(host, Seen::Fits);
                    return Ok(conn);
                }
                Fit::Fallback => {
                    self.hosts.saw(host, Seen::Fallback);
                    fallback.get_or_insert(conn);
                }
                Fit::No => {
                    self.lost_host(host, Seen::Misfit, role.refusal(attrs));
                    misses.push(Miss { host: address, why: role.refusal(attrs).into(), curable: true, error: None });
                }
            }
        }
        fallback.ok_or(misses)
    }

    /// `host` is not to be used (unreachable, or not what the pool asks
    /// for): noted, and its idle connections closed; lent ones close when
    /// they come back.
    fn lost_host(&self, host: usize, seen: Seen, why: &str) {
        let was = self.hosts.seen(host);
        self.hosts.saw(host, seen);
        let closed = match self.hosts.keeps(host) {
            true => 0,
            false => self.close_idle_where(|conn| conn.host == host),
        };
        if !matches!(was, Seen::Misfit | Seen::Down { .. }) || closed > 0 {
            let target = self.target.borrow();
            let address = target.hosts.get(host).map(|h| h.address.to_string()).unwrap_or_default();
            info!(server = %address, dbname = %target.dbname, closed_idle = closed, "leaving a host: {why}");
        }
    }

    /// May `conn` go back to the idle list? Not if its host was found
    /// unreachable or unsuitable since it was opened.
    pub(super) fn keeps_host(&self, conn: &ServerConn) -> bool {
        self.hosts.keeps(conn.host)
    }

    /// Does target_session_attrs ask anything of the hosts?
    pub fn checks_hosts(&self) -> bool {
        self.target.borrow().target_session_attrs != TargetSessionAttrs::Any
    }

    /// Asks one idle connection per host what its session is now, and
    /// leaves the hosts that no longer do (see the module comment). For
    /// pools whose target_session_attrs is not "any"; never makes a client
    /// wait: a connection being checked is simply not idle for a moment.
    pub async fn check_hosts(self: Rc<Self>, timeout: Duration) {
        if !self.checks_hosts() || self.checking.replace(true) {
            return;
        }
        for host in 0..self.hosts.count() {
            let Some(conn) = self.take_idle_where(|c| c.host == host) else { continue };
            self.recheck_now(conn, timeout).await;
        }
        self.checking.set(false);
    }

    /// A connection that passed a client a read-only error (25006) comes
    /// back to a read-write pool: its host is asked whether it still takes
    /// writes before the connection serves anyone else.
    pub(super) fn recheck(self: &Rc<Self>, conn: Box<ServerConn>) {
        let pool = self.clone();
        let timeout = self.target.borrow().connect_timeout;
        crate::rt::spawn_local(async move { pool.recheck_now(conn, timeout).await }).detach();
    }

    /// Asks `conn` (out of the idle list, still counted open) what its
    /// session is, and keeps it or leaves its host accordingly.
    async fn recheck_now(self: &Rc<Self>, conn: Box<ServerConn>, timeout: Duration) {
        let attrs = self.target.borrow().target_session_attrs;
        let host = conn.host;
        let mut lease = self.lease(conn);
        match lease.ask_role(timeout).await {
            Ok(role) => {
                lease.role = Some(role);
                match role.fit(attrs) {
                    Fit::Yes => {
                        self.hosts.saw(host, Seen::Fits);
                        lease.release();
                    }
                    Fit::Fallback => {
                        self.hosts.saw(host, Seen::Fallback);
                        lease.release();
                    }
                    Fit::No => {
                        self.lost_host(host, Seen::Misfit, role.refusal(attrs));
                        drop(lease);
                    }
                }
            }
            Err(e) if e.is_unreachable() => {
                self.lost_host(host, Seen::Down { until: crate::rt::now() + DOWN_FOR }, &format!("check failed: {e}"));
                drop(lease);
            }
            Err(e) => {
                warn!(server = %lease.cancel_key.address, "closing a server connection: checking what its session is failed: {e}");
                drop(lease);
            }
        }
    }
}

/// The error for a connection no host gave: the server's own error when
/// there was one host to try, else what each host said.
fn no_server(target: &ServerTarget, mut misses: Vec<Miss>) -> PoolError {
    if let [only] = misses.as_mut_slice() {
        if let Some(e) = only.error.take() {
            return PoolError::Server(e);
        }
    }
    let tried = misses.iter().map(|m| format!("{}: {}", m.host, m.why)).collect::<Vec<_>>().join("; ");
    PoolError::NoServer { attrs: target.target_session_attrs, tried }
}

#[cfg(test)]
mod tests {
    use super::*;
    use LoadBalanceHosts::*;

    fn book(hosts: usize) -> HostBook {
        HostBook::new(hosts)
    }

    #[test]
    fn disable_keeps_to_the_host_that_last_did() {
        let now = Instant::now();
        let b = book(3);
        assert_eq!(b.order(Disable, now), [0, 1, 2]);
        b.saw(1, Seen::Fits);
        assert_eq!(b.order(Disable, now), [1, 0, 2], "the last host that did comes first");
        // The first host is back: the pool stays where it is (no flapping
        // back to an old primary that came up again).
        b.saw(0, Seen::Unknown);
        assert_eq!(b.order(Disable, now), [1, 0, 2]);
    }

    #[test]
    fn round_robin_starts_with_the_next_host_each_time() {
        let now = Instant::now();
        let b = book(3);
        assert_eq!(b.order(RoundRobin, now), [0, 1, 2]);
        assert_eq!(b.order(RoundRobin, now), [1, 2, 0]);
        assert_eq!(b.order(RoundRobin, now), [2, 0, 1]);
        assert_eq!(b.order(RoundRobin, now), [0, 1, 2]);
    }

    #[test]
    fn random_tries_every_host_once_in_some_order() {
        let now = Instant::now();
        let b = book(4);
        let mut firsts = std::collections::HashSet::new();
        for _ in 0..200 {
            let mut order = b.order(Random, now);
            firsts.insert(order[0]);
            order.sort();
            assert_eq!(order, [0, 1, 2, 3]);
        }
        assert_eq!(firsts.len(), 4, "every host comes first some of the time");
    }

    #[test]
    fn unsuitable_hosts_come_after_the_others_and_unreachable_ones_last_for_a_while() {
        let now = Instant::now();
        let b = book(4);
        b.saw(0, Seen::Down { until: now + DOWN_FOR });
        b.saw(1, Seen::Misfit);
        b.saw(2, Seen::Refused { until: now + DOWN_FOR });
        assert_eq!(b.order(Disable, now), [3, 1, 0, 2]);
        assert_eq!(b.order(RoundRobin, now)[0], 3);
        assert_eq!(b.order(Random, now)[0], 3);
        // Once DOWN_FOR has passed they are tried in their turn again.
        let later = now + DOWN_FOR;
        assert_eq!(b.order(Disable, later), [0, 2, 3, 1]);
        // Still, nothing is ever left out: with no better host, the
        // unsuitable and the unreachable are tried (a failover in progress).
        let all_bad = book(2);
        all_bad.saw(0, Seen::Down { until: now + DOWN_FOR });
        all_bad.saw(1, Seen::Misfit);
        assert_eq!(all_bad.order(Disable, now), [1, 0]);
    }

    #[test]
    fn a_fallback_comes_after_the_hosts_that_may_fit() {
        let now = Instant::now();
        let b = book(3);
        b.saw(0, Seen::Fallback);
        assert_eq!(b.order(Disable, now), [1, 2, 0]);
        b.saw(2, Seen::Fits);
        assert_eq!(b.order(Disable, now), [2, 1, 0]);
    }

    #[test]
    fn connections_are_kept_unless_their_host_was_left() {
        let now = Instant::now();
        let b = book(5);
        b.saw(1, Seen::Fits);
        b.saw(2, Seen::Fallback);
        b.saw(3, Seen::Misfit);
        b.saw(4, Seen::Down { until: now });
        let kept: Vec<bool> = (0..5).map(|h| b.keeps(h)).collect();
        assert_eq!(kept, [true, true, true, false, false]);
        // A refused login (too many connections) leaves what is open alone.
        b.saw(1, Seen::Refused { until: now + DOWN_FOR });
        assert!(b.keeps(1));
        // With nowhere else to go, a failed attempt closes nothing; an
        // unsuitable host is left all the same.
        let one = book(1);
        one.saw(0, Seen::Down { until: now + DOWN_FOR });
        assert!(one.keeps(0));
        one.saw(0, Seen::Misfit);
        assert!(!one.keeps(0));
    }
}
