//! The `[databases.*]` and `[users.*]` tables: what a client may connect
//! to and where it lives (hosts, ports, TLS to the server, the host choice,
//! read routing), and a user's own settings. Owns their shape and their
//! per-entry checks; the checks across the whole file stay in
//! [`Config::validate`](super::Config::validate).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::{defaults, invalid, ConfigError, PoolMode};

/// A database clients may connect to, and the servers it lives on.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Database {
    /// Host names or IP addresses, or directories holding PostgreSQL's unix
    /// socket (`/var/run/postgresql`), as libpq spells them: one (`host =
    /// "db1"`) or a list (`host = ["db1", "db2"]`), tried as
    /// `target_session_attrs` and `load_balance_hosts` say (see
    /// `crate::pool::hosts`).
    #[serde(default = "defaults::hosts", deserialize_with = "one_or_many")]
    pub host: Vec<String>,
    /// One port for every host, or one per host, as libpq's `port` list.
    #[serde(default = "defaults::ports", deserialize_with = "one_or_many")]
    pub port: Vec<u16>,
    /// Which hosts' sessions this database's server connections may use, as
    /// libpq's setting of the same name.
    #[serde(default)]
    pub target_session_attrs: TargetSessionAttrs,
    /// In which order a new server connection tries the hosts.
    #[serde(default)]
    pub load_balance_hosts: LoadBalanceHosts,
    /// Whether transactions that only read go to the standbys among the
    /// hosts (see `crate::router`).
    #[serde(default)]
    pub read_routing: ReadRouting,
    /// With read_routing: bytes of WAL a standby may be behind the primary
    /// and still serve reads.
    #[serde(default = "defaults::read_routing_max_lag")]
    pub read_routing_max_lag: u64,
    /// The database's name on the server; defaults to the name clients use.
    pub dbname: Option<String>,
    /// Server connections for this database and one user, **over all
    /// shards** (see `crate::pool::budget`); the global
    /// `default_pool_size` if unset ([`Config::pool_size`]).
    pub pool_size: Option<usize>,
    /// Server connections to this database, all users together, over all
    /// shards (the global `max_db_connections` if unset; 0: no limit).
    pub max_db_connections: Option<usize>,
    /// Client connections to this database, over all shards (the global
    /// `max_db_client_connections` if unset; 0: no limit).
    pub max_db_client_connections: Option<usize>,
    /// Server connections each pool of this database keeps open (the
    /// global `min_pool_size` if unset).
    pub min_pool_size: Option<usize>,
    /// Its pools' reserve (the global `reserve_pool_size` if unset).
    pub reserve_pool_size: Option<usize>,
    /// Settings each client of this database gets unless its startup packet
    /// sets them itself (`{ client_encoding = "UTF8", TimeZone = "UTC" }`),
    /// carried to its server connections as its own: PgBouncer's
    /// client_encoding, datestyle, timezone and application_name.
    #[serde(default)]
    pub default_settings: BTreeMap<String, String>,
    /// Log in to the server as this user instead of the client's.
    pub user: Option<String>,
    /// Password for `user` (or the client's user) on the server.
    pub password: Option<String>,
    /// Overrides the global pool_mode for this database.
    pub pool_mode: Option<PoolMode>,
    /// Override the global auth_user / auth_query / auth_dbname for clients
    /// of this database.
    pub auth_user: Option<String>,
    pub auth_query: Option<String>,
    pub auth_dbname: Option<String>,
}

/// How the secret of a user not in `[users]` is looked up for one database:
/// run `query` as `user` on a server connection of `database`'s pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AuthLookup<'a> {
    pub user: &'a str,
    pub query: &'a str,
    pub database: &'a str,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct User {
    /// A plaintext password, an md5 hash (`md5...`) or a SCRAM-SHA-256 secret
    /// as PostgreSQL stores it. Used to check clients and, when plaintext, to
    /// log in to servers.
    pub password: Option<String>,
    pub pool_mode: Option<PoolMode>,
    /// Server connections of this user, all databases together, over all
    /// shards (the global `max_user_connections` if unset; 0: no limit).
    pub max_user_connections: Option<usize>,
    /// Client connections of this user, over all shards (the global
    /// `max_user_client_connections` if unset; 0: no limit).
    pub max_user_client_connections: Option<usize>,
}

/// Where a server lives.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ServerAddress {
    Tcp {
        host: String,
        port: u16,
    },
    /// Path of the socket file (`<dir>/.s.PGSQL.<port>`).
    Unix(PathBuf),
}

impl std::fmt::Display for ServerAddress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ServerAddress::Tcp { host, port } => write!(f, "{host}:{port}"),
            ServerAddress::Unix(path) => write!(f, "{}", path.display()),
        }
    }
}

impl Database {
    /// The servers, in the order the config lists them: each host with its
    /// port (the one port, when one is given for all).
    pub fn addresses(&self) -> Vec<ServerAddress> {
        self.host
            .iter()
            .enumerate()
            .map(|(i, host)| server_address(host, self.port.get(i).or(self.port.first()).copied().unwrap_or(5432)))
            .collect()
    }

    /// Several hosts, or a condition on the one: a server connection is
    /// checked when it opens, and the pool keeps track of its hosts.
    pub fn has_host_choice(&self) -> bool {
        self.host.len() > 1 || self.target_session_attrs != TargetSessionAttrs::Any
    }

    pub(super) fn validate(&self, name: &str) -> Result<(), ConfigError> {
        // The startup packet's fields that are not settings.
        if let Some(key) = self
            .default_settings
            .keys()
            .find(|key| ["user", "database", "options", "replication"].contains(&key.as_str()) || key.starts_with("_pq_."))
        {
            return Err(invalid(format!("databases.{name}.default_settings: {key} is not a setting")));
        }
        if self.pool_size == Some(0) {
            return Err(invalid(format!("databases.{name}.pool_size must be at least 1")));
        }
        if self.host.is_empty() || self.host.iter().any(String::is_empty) {
            return Err(invalid(format!("databases.{name}.host is empty")));
        }
        if self.port.contains(&0) || self.port.is_empty() {
            return Err(invalid(format!("databases.{name}.port must be a port number (1-65535)")));
        }
        if self.read_routing == ReadRouting::Standbys {
            if self.host.len() < 2 {
                return Err(invalid(format!(
                    "databases.{name}.read_routing = \"standbys\" needs a host list: a primary and its standbys"
                )));
            }
            if !matches!(self.target_session_attrs, TargetSessionAttrs::ReadWrite | TargetSessionAttrs::Primary) {
                return Err(invalid(format!(
                    "databases.{name}.read_routing = \"standbys\" needs target_session_attrs = \"read-write\" or \"primary\": what is not a read goes to the primary"
                )));
            }
        }
        if self.port.len() != 1 && self.port.len() != self.host.len() {
            return Err(invalid(format!(
                "databases.{name}.port lists {} ports for {} hosts: give one port for all hosts, or one per host",
                self.port.len(),
                self.host.len()
            )));
        }
        Ok(())
    }
}

/// A host as libpq spells it (a directory for a unix socket) and a port.
pub(super) fn server_address(host: &str, port: u16) -> ServerAddress {
    if host.starts_with('/') {
        ServerAddress::Unix(Path::new(host).join(format!(".s.PGSQL.{port}")))
    } else {
        ServerAddress::Tcp { host: host.to_owned(), port }
    }
}

/// `target_session_attrs`: which sessions a server connection may be, as
/// libpq defines them. PostgreSQL 14 and later report `in_hot_standby` and
/// `default_transaction_read_only` at login; older servers are asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum TargetSessionAttrs {
    /// Any server will do (no check).
    #[default]
    Any,
    /// A session that accepts writes by default: not in hot standby, and
    /// `default_transaction_read_only` off.
    ReadWrite,
    /// The converse: in hot standby, or `default_transaction_read_only` on.
    ReadOnly,
    /// Not in hot standby.
    Primary,
    /// In hot standby.
    Standby,
    /// A standby if any host is one, else any server.
    PreferStandby,
}

impl std::fmt::Display for TargetSessionAttrs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            TargetSessionAttrs::Any => "any",
            TargetSessionAttrs::ReadWrite => "read-write",
            TargetSessionAttrs::ReadOnly => "read-only",
            TargetSessionAttrs::Primary => "primary",
            TargetSessionAttrs::Standby => "standby",
            TargetSessionAttrs::PreferStandby => "prefer-standby",
        })
    }
}

/// `read_routing`: where a database's transactions go.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum ReadRouting {
    /// Every transaction to the server target_session_attrs picks.
    #[default]
    Off,
    /// Transactions proven read-only to a standby that has replayed the
    /// client's last write, the others to the primary (see `crate::router`).
    Standbys,
}

/// `load_balance_hosts`: the order in which a new server connection tries a
/// database's hosts (hosts known to be down or unsuitable are tried last).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum LoadBalanceHosts {
    /// In the listed order, starting with the host the pool last got a
    /// suitable connection from (libpq's default; PgBouncer's `disable`).
    #[default]
    Disable,
    /// In a random order for each connection (libpq's `random`).
    Random,
    /// Each connection starts with the host after the previous one's
    /// (PgBouncer's default for a host list).
    RoundRobin,
}

/// A TOML value that is one `T` or a list of them (libpq's comma lists).
fn one_or_many<'de, D, T>(deserializer: D) -> Result<Vec<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: serde::de::DeserializeOwned,
{
    use serde::de::Error;
    match toml::Value::deserialize(deserializer)? {
        toml::Value::Array(items) => items.into_iter().map(|item| T::deserialize(item).map_err(D::Error::custom)).collect(),
        one => T::deserialize(one).map(|v| vec![v]).map_err(D::Error::custom),
    }
}
