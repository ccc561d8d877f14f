//! A shard's read routers (see `crate::router`): made for a pool whose
//! database has `read_routing = "standbys"`, each with a pool of reads per
//! host. The shard keeps them; what they decide is the router's.

use std::rc::Rc;
use std::sync::Arc;

use tracing::info;

use super::Shard;
use crate::config::Config;
use crate::pool::{Budget, BudgetNews, BudgetOf, Pool};

impl Shard {
    /// The read router of (database, user), whose clients' pool is `pool`,
    /// if its database has `read_routing = "standbys"`: made on first use,
    /// with a pool per host for the reads sent there (sharing `pool`'s
    /// statements; pool_size each, under a budget of their own) and the
    /// monitor of the hosts. Not for databases of the `*` entry.
    pub fn router(&self, config: &Config, database: &str, user: &str, pool: &Rc<Pool>) -> Option<Rc<crate::router::Router>> {
        let db = config.databases.get(database)?;
        if db.read_routing != crate::config::ReadRouting::Standbys {
            return None;
        }
        let key = (database.to_owned(), user.to_owned());
        if let Some(router) = self.routers.borrow().get(&key) {
            return Some(router.clone());
        }
        let target = pool.target();
        let size = config.pool_size(database);
        let pools = (0..target.hosts.len())
            .map(|host| {
                let read = Pool::sharing(crate::router::host_target(&target, host), size, pool.registry.clone());
                let what = BudgetOf::Pool { database: format!("{database} (reads on host {host})"), user: user.to_owned() };
                let me = self.me.clone();
                let news = move |news: BudgetNews, budgets: &Rc<[Arc<Budget>]>| {
                    if let Some(shard) = me.upgrade() {
                        shard.budget_news(news, budgets);
                    }
                };
                read.share_budgets(vec![self.shared.budget(what, size)], self.keep(size), Box::new(news));
                read
            })
            .collect();
        let router = crate::router::Router::start(&target, pools, size, db.read_routing_max_lag, self.classifier.clone());
        self.routers.borrow_mut().insert(key, router.clone());
        Some(router)
    }

    /// After a reload (the pools reconfigured already): retires the routers
    /// whose database no longer routes, or routes over other hosts or with
    /// another pool size or lag bound. Their sessions take the router
    /// [`Shard::router`] makes anew, on their next request.
    pub(super) fn reload_routers(&self, config: &Config) {
        let pools = self.pools();
        self.routers.borrow_mut().retain(|key, router| {
            let fits = config.databases.get(&key.0).is_some_and(|db| {
                db.read_routing == crate::config::ReadRouting::Standbys
                    && pools.get(key).is_some_and(|pool| {
                        router.fits(&pool.target(), config.pool_size(&key.0), db.read_routing_max_lag)
                    })
            });
            if !fits {
                info!(shard = self.id, database = %key.0, user = %key.1, "read routing: the reload changed the database; its router is made anew");
                router.retire();
            }
            fits
        });
    }

    /// The pools of reads of this shard's routers.
    pub(crate) fn read_pools(&self) -> Vec<Rc<Pool>> {
        self.routers.borrow().values().flat_map(|r| r.pools().iter().cloned()).collect()
    }

    /// The routers of this shard, by (database, user).
    pub(crate) fn routers(&self) -> Vec<((String, String), Rc<crate::router::Router>)> {
        self.routers.borrow().iter().map(|(k, r)| (k.clone(), r.clone())).collect()
    }
}
