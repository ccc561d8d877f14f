//! Limits on server connections that hold over every shard at once.
//!
//! A shard's pools are its own (`Rc`, no locks), but `pool_size`,
//! `max_db_connections` and `max_user_connections` are promises to the
//! database about all of pglane. Each such limit is a [`Budget`] shared by
//! the pools it covers on every shard: a pool takes one unit of each of its
//! budgets before it opens a server connection and gives it back when the
//! connection closes. That is an atomic per open and close, never per
//! transaction; a connection handed from one client to the next keeps its
//! units.
//!
//! A pool that cannot open because a budget is spent marks the budget
//! wanted ([`Budget::want`]); a pool of another shard that gives a unit back
//! while it is wanted, or that holds more than its share of a pool budget
//! while another shard's pool is below its own, lets its shard say so
//! (`runtime`'s budget messages). Reading whether a budget is wanted is a
//! relaxed load, which a pool does when a connection comes back.
//!
//! This module owns the counts and the rules; it does no I/O and knows no
//! shard.

use std::sync::atomic::{AtomicUsize, Ordering};

/// One limit on open server connections, over all shards.
#[derive(Debug)]
pub struct Budget {
    /// What the limit is of, for logs and the admin console.
    pub what: BudgetOf,
    limit: AtomicUsize,
    /// More connections a pool budget allows for a client that has waited
    /// reserve_pool_timeout ([`Budget::try_take_reserve`]).
    reserve: AtomicUsize,
    open: AtomicUsize,
    /// Pools (on any shard) with a client waiting that this budget keeps
    /// from opening a connection.
    wanting: AtomicUsize,
    /// Connections opened under it so far, for taking a host list in turn
    /// over all shards ([`Budget::next_turn`]).
    turn: AtomicUsize,
}

/// What a [`Budget`] limits.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum BudgetOf {
    /// `pool_size`: one (database, user) pool, all shards.
    Pool { database: String, user: String },
    /// `max_db_connections`: every user's pool of a database.
    Database(String),
    /// `max_user_connections`: every database's pool of a user.
    User(String),
}

impl Budget {
    pub fn new(what: BudgetOf, limit: usize) -> Budget {
        Budget {
            what,
            limit: AtomicUsize::new(limit),
            reserve: AtomicUsize::new(0),
            open: AtomicUsize::new(0),
            wanting: AtomicUsize::new(0),
            turn: AtomicUsize::new(0),
        }
    }

    /// The turn of the next connection opened under this budget: the
    /// pools of one (database, user) on every shard take a database's
    /// hosts in turn from it (`load_balance_hosts = round-robin`), as one
    /// PgBouncer pool does. An atomic per connection opened.
    pub fn next_turn(&self) -> usize {
        self.turn.fetch_add(1, Ordering::Relaxed)
    }

    pub fn limit(&self) -> usize {
        self.limit.load(Ordering::Relaxed)
    }

    /// A reload changed the limit: connections over it close as they come back.
    pub fn set_limit(&self, limit: usize) {
        self.limit.store(limit, Ordering::Relaxed);
    }

    /// reserve_pool_size: connections past the limit for clients that waited.
    pub fn set_reserve(&self, reserve: usize) {
        self.reserve.store(reserve, Ordering::Relaxed);
    }

    /// Connections open under it, over all shards.
    pub fn open(&self) -> usize {
        self.open.load(Ordering::Relaxed)
    }

    /// Takes a unit for a connection about to open; false if none is left.
    pub fn try_take(&self) -> bool {
        self.open.fetch_update(Ordering::AcqRel, Ordering::Acquire, |open| (open < self.limit()).then_some(open + 1)).is_ok()
    }

    /// Takes a unit of the reserve, past the limit, for a client that
    /// waited reserve_pool_timeout; false if the reserve is spent too.
    pub fn try_take_reserve(&self) -> bool {
        let most = self.limit().saturating_add(self.reserve.load(Ordering::Relaxed));
        self.open.fetch_update(Ordering::AcqRel, Ordering::Acquire, |open| (open < most).then_some(open + 1)).is_ok()
    }

    /// A connection under it closed.
    pub fn give_back(&self) {
        let before = self.open.fetch_sub(1, Ordering::AcqRel);
        debug_assert!(before > 0, "a unit given back that was never taken");
    }

    /// More connections are open than the limit and the reserve allow now
    /// (a reload lowered them).
    pub fn is_over(&self) -> bool {
        self.open() > self.limit().saturating_add(self.reserve.load(Ordering::Relaxed))
    }

    /// A pool has a client waiting that this budget keeps out.
    pub fn want(&self) {
        self.wanting.fetch_add(1, Ordering::AcqRel);
    }

    /// That pool's clients no longer wait on it.
    pub fn unwant(&self) {
        let before = self.wanting.fetch_sub(1, Ordering::AcqRel);
        debug_assert!(before > 0, "unwanted more often than wanted");
    }

    /// Pools other than the asker wait on it (`asker_wants`: the asker is
    /// one of the wanting).
    pub fn wanted_by_others(&self, asker_wants: bool) -> bool {
        self.wanting.load(Ordering::Relaxed) > usize::from(asker_wants)
    }
}

/// Takes a unit of every budget in `budgets`, or of none: on the first that
/// is spent, those taken are given back and its index is returned. With
/// `reserve`, the first (a pool's own) may give one of its reserve.
pub fn take_all(budgets: &[std::sync::Arc<Budget>], reserve: bool) -> Result<(), usize> {
    for (i, budget) in budgets.iter().enumerate() {
        let taken = if reserve && i == 0 { budget.try_take_reserve() } else { budget.try_take() };
        if !taken {
            budgets[..i].iter().for_each(|b| b.give_back());
            return Err(i);
        }
    }
    Ok(())
}

/// Gives a unit of every budget back (a connection closed).
pub fn give_back_all(budgets: &[std::sync::Arc<Budget>]) {
    budgets.iter().for_each(|b| b.give_back());
}

/// The connections of a `pool_size` budget one shard keeps while another
/// shard's pool wants one: its equal share of `limit` (the first
/// `limit % shards` shards one more). Below one per shard no shard keeps
/// any, so that every shard's clients get their turn.
pub fn share(limit: usize, shards: usize, shard: usize) -> usize {
    if limit < shards {
        return 0;
    }
    limit / shards + usize::from(shard < limit % shards)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn budget(limit: usize) -> Arc<Budget> {
        Arc::new(Budget::new(BudgetOf::Database("app".into()), limit))
    }

    #[test]
    fn units_are_taken_up_to_the_limit_and_given_back() {
        let b = budget(2);
        assert!(b.try_take() && b.try_take());
        assert!(!b.try_take(), "the limit holds");
        assert_eq!(b.open(), 2);
        b.give_back();
        assert!(b.try_take());
        b.set_limit(1);
        assert!(b.is_over());
        b.give_back();
        assert!(!b.is_over());
        assert!(!b.try_take());
    }

    #[test]
    fn all_or_none_of_a_pools_budgets_are_taken() {
        let (pool, database, user) = (budget(3), budget(1), budget(5));
        let all = [pool.clone(), database.clone(), user.clone()];
        assert_eq!(take_all(&all, false), Ok(()));
        assert_eq!(take_all(&all, false), Err(1), "the database's budget is spent");
        assert_eq!((pool.open(), database.open(), user.open()), (1, 1, 1), "nothing kept of the failed take");
        give_back_all(&all);
        assert_eq!((pool.open(), database.open(), user.open()), (0, 0, 0));
    }

    #[test]
    fn the_reserve_gives_units_past_the_limit_only_when_asked() {
        let b = budget(1);
        b.set_reserve(2);
        assert!(b.try_take());
        assert!(!b.try_take(), "the limit holds for a client that has not waited");
        assert!(b.try_take_reserve() && b.try_take_reserve());
        assert!(!b.try_take_reserve(), "the reserve is spent too");
        assert!(!b.is_over());
        b.set_reserve(0);
        assert!(b.is_over(), "a reload took the reserve away");
    }

    #[test]
    fn a_budget_taken_from_many_threads_never_exceeds_its_limit() {
        let b = budget(7);
        let taken: usize = std::thread::scope(|s| {
            let handles: Vec<_> = (0..4).map(|_| s.spawn(|| (0..1000).filter(|_| b.try_take()).count())).collect();
            handles.into_iter().map(|h| h.join().unwrap()).sum()
        });
        assert_eq!((taken, b.open()), (7, 7));
    }

    #[test]
    fn wanting_is_counted_per_pool() {
        let b = budget(1);
        assert!(!b.wanted_by_others(false));
        b.want();
        assert!(b.wanted_by_others(false));
        assert!(!b.wanted_by_others(true), "only the asker wants it");
        b.want();
        assert!(b.wanted_by_others(true));
        b.unwant();
        b.unwant();
        assert!(!b.wanted_by_others(false));
    }

    #[test]
    fn shares_add_up_to_the_limit_and_none_is_kept_below_one_per_shard() {
        let shares = |limit, shards| (0..shards).map(|s| share(limit, shards, s)).collect::<Vec<_>>();
        assert_eq!(shares(20, 2), [10, 10]);
        assert_eq!(shares(5, 2), [3, 2]);
        assert_eq!(shares(2, 2), [1, 1]);
        assert_eq!(shares(1, 2), [0, 0]);
        assert_eq!(shares(3, 4), [0, 0, 0, 0]);
        assert_eq!(shares(7, 1), [7]);
    }
}
