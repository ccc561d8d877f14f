//! Admin commands as each shard carries them out on its own pools and
//! clients: PAUSE, RESUME, KILL, RECONNECT, DISABLE, ENABLE, and applying a
//! reloaded config.

use std::cell::{Cell, RefCell};
use std::collections::{HashMap, HashSet};
use std::rc::Rc;
use std::task::{Poll, Waker};
use std::time::Duration;

use tracing::info;

use super::{Control, Shard};
use crate::pool::Pool;

/// Which databases are paused, and the clients waiting for a RESUME; which
/// are disabled (new clients refused).
#[derive(Default)]
pub(super) struct PauseState {
    all: Cell<bool>,
    databases: RefCell<HashSet<String>>,
    disabled: RefCell<HashSet<String>>,
    waiters: RefCell<HashMap<u64, Waker>>,
    next_waiter: Cell<u64>,
}

impl PauseState {
    fn is_paused(&self, database: &str) -> bool {
        self.all.get() || self.databases.borrow().contains(database)
    }

    fn wake_all(&self) {
        for (_, w) in self.waiters.borrow_mut().drain() {
            w.wake();
        }
    }
}

impl Shard {
    /// Is `database` paused on this shard?
    pub fn is_paused(&self, database: &str) -> bool {
        self.pause.is_paused(database)
    }

    /// Is `database` disabled (DISABLE) on this shard?
    pub fn is_disabled(&self, database: &str) -> bool {
        self.pause.disabled.borrow().contains(database)
    }

    /// The databases disabled on this shard.
    /// Is every database paused (PAUSE without a name) on this shard?
    pub fn is_paused_all(&self) -> bool {
        self.pause.all.get()
    }

    pub fn disabled_databases(&self) -> Vec<String> {
        self.pause.disabled.borrow().iter().cloned().collect()
    }

    /// Waits while `database` is paused.
    pub async fn wait_unpaused(&self, database: &str) {
        let id = self.pause.next_waiter.get();
        self.pause.next_waiter.set(id + 1);
        futures_lite::future::poll_fn(|cx| {
            if self.pause.is_paused(database) {
                self.pause.waiters.borrow_mut().insert(id, cx.waker().clone());
                Poll::Pending
            } else {
                self.pause.waiters.borrow_mut().remove(&id);
                Poll::Ready(())
            }
        })
        .await
    }

    fn pools_of(&self, database: Option<&str>) -> Vec<Rc<Pool>> {
        self.pools().iter().filter(|((db, _), _)| database.is_none_or(|d| d == db)).map(|(_, p)| p.clone()).collect()
    }

    pub(super) async fn control(&self, control: Control) {
        match control {
            Control::Pause(database) => {
                match &database {
                    Some(db) => {
                        self.pause.databases.borrow_mut().insert(db.clone());
                    }
                    None => self.pause.all.set(true),
                }
                // Wait for the transactions in flight, then let go of the servers.
                let pools = self.pools_of(database.as_deref());
                while pools.iter().any(|p| p.active_count() > 0) {
                    crate::rt::sleep(Duration::from_millis(20)).await;
                }
                for pool in &pools {
                    pool.close_idle();
                }
            }
            Control::Resume(database) => {
                match database {
                    Some(db) => {
                        self.pause.databases.borrow_mut().remove(&db);
                    }
                    None => {
                        self.pause.all.set(false);
                        self.pause.databases.borrow_mut().clear();
                    }
                }
                self.pause.wake_all();
            }
            Control::Kill(database) => {
                // As PgBouncer: the database stays paused until RESUME, so
                // that a runbook's KILL, change, RESUME lets no client in
                // before it is done.
                self.pause.databases.borrow_mut().insert(database.clone());
                for (&pid, client) in self.clients().iter() {
                    if client.info.database == database && !client.info.admin {
                        client.killed.set(true);
                        self.shutdown.wake(u64::from(pid as u32));
                    }
                }
                self.pools_of(Some(&database)).iter().for_each(|p| p.reconnect());
            }
            Control::Reconnect(database) => self.pools_of(database.as_deref()).iter().for_each(|p| p.reconnect()),
            Control::Disable(database) => {
                self.pause.disabled.borrow_mut().insert(database);
            }
            Control::Enable(database) => {
                self.pause.disabled.borrow_mut().remove(&database);
            }
            Control::WaitClose(database) => {
                while self.pools_of(database.as_deref()).iter().any(|p| p.stale_open() > 0) {
                    crate::rt::sleep(Duration::from_millis(20)).await;
                }
            }
            Control::Reload => self.apply_config(),
        }
    }

    /// Applies the config now in `Shared::config` to this shard's pools:
    /// changed servers are reconnected, sizes take effect as connections come
    /// and go, and pools of removed databases are emptied.
    pub(super) fn apply_config(&self) {
        let generation = self.shared.config_generation.load(std::sync::atomic::Ordering::SeqCst);
        let config = self.shared.config.load_full();
        crate::rt::spin_before_park(Duration::from_micros(config.spin_before_park_us));
        for ((database, user), pool) in self.pools().iter() {
            match self.pool_settings(&config, database, user) {
                Some((target, size)) => {
                    // The limits are set anew (the budgets are the same).
                    self.budgets_for(&config, database, user);
                    pool.set_keep(self.keep(size));
                    pool.reconfigure(target, size + config.reserve_pool_size(database));
                }
                None => pool.reconnect(),
            }
        }
        self.reload_routers(&config);
        self.applied_generation.set(generation);
        info!(shard = self.id, generation, "applied the reloaded config");
    }
}
