//! What all shards share: the config behind arc-swap (and where it came
//! from, for RELOAD, SIGHUP and the console's SET), the shutdown flag, and
//! the counts that must hold over all shards (connection budgets, client
//! counts, the `*` entry's database names). Read-mostly; locked only at a
//! login, a logout, a pool's first or last use and a reload, never per query.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use arc_swap::ArcSwap;

use super::{notify, nudge};
use crate::config::Config;

/// Where the config came from, so RELOAD and SIGHUP can read it again.
#[derive(Debug, Clone, Default)]
pub struct ConfigSource {
    pub toml: Option<std::path::PathBuf>,
    pub pgbouncer_ini: Option<std::path::PathBuf>,
    /// `--cores` and `--cpus` from the command line (kept across reloads).
    pub cores: Option<usize>,
    pub cpus: Option<String>,
}

/// What all shards share. Read-mostly; never touched per query.
pub struct Shared {
    pub config: ArcSwap<Config>,
    pub source: ConfigSource,
    /// Bumped each time a new config is stored; shards apply it when they see
    /// the number change.
    pub config_generation: AtomicU64,
    shutting_down: AtomicBool,
    pub started: std::time::Instant,
    /// Wakes the shards when something above changes (see [`nudge`]).
    pub(super) nudges: Arc<nudge::Nudges>,
    /// The database names the `*` entry serves now: each name, with how
    /// many shards have a pool of it. Touched only when a shard makes its
    /// first pool of such a name or drops its last, never per query.
    fallback_databases: std::sync::Mutex<HashMap<String, usize>>,
    /// The connection limits that hold over all shards (see
    /// `pool::budget`), made when a shard makes its first pool under one.
    /// Locked only then and at reloads, never per query.
    budgets: std::sync::Mutex<HashMap<crate::pool::BudgetOf, Arc<crate::pool::Budget>>>,
    /// Client connections of each database and of each user, over all
    /// shards, for max_db_client_connections and max_user_client_connections
    /// (see [`Shared::count_client`]). Locked at a login and a logout, never
    /// per query.
    client_counts: std::sync::Mutex<ClientCounts>,
    /// The warnings the config files gave when last read: a reload logs
    /// only the ones that are new, not the same list every time.
    warned: std::sync::Mutex<std::collections::BTreeSet<String>>,
    /// The admin console's `SET key = value`s, in order, laid over the
    /// files at each load until a RELOAD (see [`Shared::set`]).
    console_sets: std::sync::Mutex<Vec<(String, String)>>,
}

/// Client connections by database and by user (see [`Shared::count_client`]).
#[derive(Default)]
struct ClientCounts {
    databases: HashMap<Arc<str>, usize>,
    users: HashMap<Arc<str>, usize>,
}

impl ClientCounts {
    /// Counts one more client of `name` in `map`; the name as the map keeps
    /// it, shared, so that a counted client costs no allocation of its own.
    fn count(map: &mut HashMap<Arc<str>, usize>, name: &str) -> Arc<str> {
        let key = match map.get_key_value(name) {
            Some((key, _)) => key.clone(),
            None => Arc::from(name),
        };
        *map.entry(key.clone()).or_default() += 1;
        key
    }
}

/// A client counted against max_db_client_connections and
/// max_user_client_connections until this drops. Held by every session:
/// its names are the counts' own keys, not copies.
pub struct CountedClient {
    shared: Arc<Shared>,
    database: Arc<str>,
    user: Arc<str>,
}

impl Drop for CountedClient {
    fn drop(&mut self) {
        let mut counts = self.shared.client_counts.lock().unwrap_or_else(|e| e.into_inner());
        let ClientCounts { databases, users } = &mut *counts;
        for (map, name) in [(databases, &self.database), (users, &self.user)] {
            if let Some(count) = map.get_mut(&**name) {
                *count -= 1;
                if *count == 0 {
                    map.remove(name);
                }
            }
        }
    }
}

impl Shared {
    pub fn new(config: Config, source: ConfigSource) -> Shared {
        Shared {
            config: ArcSwap::from_pointee(config),
            source,
            config_generation: AtomicU64::new(0),
            shutting_down: AtomicBool::new(false),
            started: std::time::Instant::now(),
            nudges: Arc::default(),
            fallback_databases: Default::default(),
            budgets: Default::default(),
            client_counts: Default::default(),
            warned: Default::default(),
            console_sets: Default::default(),
        }
    }

    /// The config's warnings at start (logged by the caller), so that a
    /// reload repeats none of them.
    pub fn remember_warnings(&self, warnings: impl IntoIterator<Item = String>) {
        *self.warned.lock().unwrap_or_else(|e| e.into_inner()) = warnings.into_iter().collect();
    }

    /// The budget of `what`, made if new, with `limit` (0: none) as of now.
    pub(super) fn budget(&self, what: crate::pool::BudgetOf, limit: usize) -> Arc<crate::pool::Budget> {
        let limit = if limit == 0 { usize::MAX } else { limit };
        let mut budgets = self.budgets.lock().unwrap_or_else(|e| e.into_inner());
        let budget = budgets.entry(what.clone()).or_insert_with(|| Arc::new(crate::pool::Budget::new(what, limit)));
        budget.set_limit(limit);
        budget.clone()
    }

    /// Counts a client of `database` and `user` until the returned guard
    /// drops, unless that would make more than their limits
    /// (max_db_client_connections, max_user_client_connections; 0: none):
    /// then nothing is counted, and the error names the limit.
    pub fn count_client(self: &Arc<Self>, config: &Config, database: &str, user: &str) -> Result<CountedClient, &'static str> {
        let mut counts = self.client_counts.lock().unwrap_or_else(|e| e.into_inner());
        let full = |count: Option<&usize>, max: usize| max > 0 && count.copied().unwrap_or(0) >= max;
        if full(counts.databases.get(database), config.max_db_client_connections(database)) {
            return Err("max_db_client_connections");
        }
        if full(counts.users.get(user), config.max_user_client_connections(user)) {
            return Err("max_user_client_connections");
        }
        let database = ClientCounts::count(&mut counts.databases, database);
        let user = ClientCounts::count(&mut counts.users, user);
        Ok(CountedClient { shared: self.clone(), database, user })
    }

    /// A shard makes its first pool of `name`, served by the `*` entry:
    /// false, and nothing counted, if that would make more than `max` names.
    pub(super) fn claim_fallback(&self, name: &str, max: usize) -> bool {
        let mut names = self.fallback_databases.lock().unwrap_or_else(|e| e.into_inner());
        if !names.contains_key(name) && names.len() >= max {
            return false;
        }
        *names.entry(name.to_owned()).or_default() += 1;
        true
    }

    /// A shard dropped its last pool of `name` (see [`Shared::claim_fallback`]).
    pub(super) fn release_fallback(&self, name: &str) {
        let mut names = self.fallback_databases.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(shards) = names.get_mut(name) {
            *shards -= 1;
            if *shards == 0 {
                names.remove(name);
            }
        }
    }

    /// Asks every shard to stop accepting and drain. Returns whether a
    /// shutdown had already begun.
    pub fn begin_shutdown(&self) -> bool {
        let already = self.shutting_down.swap(true, Ordering::SeqCst);
        if !already {
            notify::stopping();
        }
        self.nudges.nudge_all();
        already
    }

    pub fn is_shutting_down(&self) -> bool {
        self.shutting_down.load(Ordering::SeqCst)
    }

    /// Reads the config files again, without the console's SETs; stores the
    /// new config if it is valid and keeps the old one (returning why) if
    /// not. Returns the warnings not given before.
    pub fn reload(&self) -> Result<Vec<String>, String> {
        notify::reloading();
        let mut sets = self.console_sets.lock().unwrap_or_else(|e| e.into_inner());
        let reloaded = self.load_again(&[]);
        if reloaded.is_ok() {
            sets.clear();
        }
        drop(sets);
        match &reloaded {
            Ok(_) => notify::ready("serving; config reloaded"),
            Err(e) => notify::ready(&format!("serving; config not reloaded, the old one stays: {e}")),
        }
        reloaded
    }

    /// The admin console's `SET key = value`: the files read again with it
    /// and the earlier SETs laid over them, applied as a reload is. Kept
    /// until a RELOAD; refused, and forgotten, if the config it makes is
    /// not valid or needs a restart. Returns the warnings not given before.
    pub fn set(&self, key: &str, value: &str) -> Result<Vec<String>, String> {
        let mut sets = self.console_sets.lock().unwrap_or_else(|e| e.into_inner());
        let before = sets.clone();
        sets.retain(|(k, _)| k != key);
        sets.push((key.to_owned(), value.to_owned()));
        let applied = self.load_again(&sets);
        if applied.is_err() {
            *sets = before;
        }
        applied
    }

    fn load_again(&self, sets: &[(String, String)]) -> Result<Vec<String>, String> {
        let (mut config, warnings) =
            crate::config::load_with_sets(self.source.toml.as_deref(), self.source.pgbouncer_ini.as_deref(), sets)?;
        let old = self.config.load();
        if self.source.cores.is_some() || self.source.cpus.is_some() {
            config.cores = self.source.cores;
            config.cpus = self.source.cpus.clone();
        }
        if config.listen != old.listen {
            return Err(format!("listen cannot change without a restart ({} → {})", old.listen, config.listen));
        }
        if config.unix_socket_path() != old.unix_socket_path() {
            return Err("unix_socket_dir cannot change without a restart".into());
        }
        if config.logfile != old.logfile || config.pidfile != old.pidfile {
            return Err("logfile and pidfile cannot change without a restart".into());
        }
        if config.peer_id != old.peer_id {
            // The cancel keys of the clients connected now name the old one.
            return Err(format!("peer_id cannot change without a restart ({} → {})", old.peer_id, config.peer_id));
        }
        self.config.store(Arc::new(config));
        self.config_generation.fetch_add(1, Ordering::SeqCst);
        self.nudges.nudge_all();
        let now: std::collections::BTreeSet<String> = warnings.iter().map(|w| w.to_string()).collect();
        let mut warned = self.warned.lock().unwrap_or_else(|e| e.into_inner());
        let new = now.iter().filter(|w| !warned.contains(*w)).cloned().collect();
        *warned = now;
        Ok(new)
    }
}
