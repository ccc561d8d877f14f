//! pglane's configuration: the TOML model, its defaults and its validation.
//!
//! This module owns turning a file into a checked [`Config`]; it never opens
//! sockets and never holds runtime state. A `Config` that exists has passed
//! [`Config::validate`], so the rest of pglane reads it without re-checking.
//!
//! The smallest useful file is:
//!
//! ```toml
//! listen = "127.0.0.1:6432"
//! pool_mode = "transaction"
//! admin_users = ["postgres"]
//!
//! [databases.app]
//! host = "127.0.0.1"
//! port = 5432
//! dbname = "postgres"
//! pool_size = 8
//!
//! [users.postgres]
//! password = "secret"
//! ```

mod database;
pub mod pgbouncer_ini;

use database::server_address;
pub use database::{AuthLookup, Database, LoadBalanceHosts, ReadRouting, ServerAddress, TargetSessionAttrs, User};

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use thiserror::Error;

use crate::auth::secret::Secret;

#[derive(Debug, Error)]
pub enum ConfigError {
    #[error("cannot read {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("{0}")]
    Parse(#[from] toml::de::Error),
    #[error("invalid configuration: {0}")]
    Invalid(String),
}

/// The `[databases]` entry that serves database names not listed (PgBouncer's `*`).
pub const FALLBACK_DATABASE: &str = "*";

/// The longest timeout accepted: one year.
pub const MAX_TIMEOUT_SECS: f64 = 365.0 * 24.0 * 3600.0;

/// The longest `spin_before_park_us`: beyond a few milliseconds a shard
/// spinning is a shard busy-waiting.
pub const MAX_SPIN_BEFORE_PARK_US: u64 = 10_000;

fn invalid(msg: impl Into<String>) -> ConfigError {
    ConfigError::Invalid(msg.into())
}

/// When a server connection goes back to the pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum PoolMode {
    /// When the client disconnects.
    Session,
    /// At the end of each transaction (ReadyForQuery with status idle).
    #[default]
    Transaction,
}

/// How clients prove who they are to pglane.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
pub enum AuthType {
    #[serde(rename = "trust")]
    Trust,
    #[serde(rename = "md5")]
    Md5,
    #[default]
    #[serde(rename = "scram-sha-256")]
    ScramSha256,
    /// The first covering line of `auth_hba_file` picks the method.
    #[serde(rename = "hba")]
    Hba,
}

/// `listen`: the addresses pglane accepts clients on, written as one
/// string (`"127.0.0.1:6432"`) or a list of them. The first is the one a
/// single address stands for (the unix socket's port, SHOW CLIENTS'
/// local_addr), as PgBouncer's first `listen_addr`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(from = "OneOrMany")]
pub struct Listen(Vec<String>);

#[derive(Deserialize)]
#[serde(untagged)]
enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

impl From<OneOrMany> for Listen {
    fn from(value: OneOrMany) -> Listen {
        match value {
            OneOrMany::One(address) => Listen(vec![address]),
            OneOrMany::Many(addresses) => Listen(addresses),
        }
    }
}

impl Listen {
    /// Every address, the first first.
    pub fn addresses(&self) -> &[String] {
        &self.0
    }

    /// The first address ("" for an empty list, which validation refuses).
    pub fn first(&self) -> &str {
        self.0.first().map_or("", String::as_str)
    }
}

impl std::fmt::Display for Listen {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0.join(", "))
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Addresses clients connect to (one, or a list); every shard listens on
    /// each (SO_REUSEPORT).
    pub listen: Listen,
    #[serde(default)]
    pub pool_mode: PoolMode,
    #[serde(default)]
    pub auth_type: AuthType,
    /// Rules in pg_hba.conf format for `auth_type = "hba"` (see
    /// `crate::auth::hba` for what is supported); read and checked by
    /// `validate`, so a reload re-reads it.
    pub auth_hba_file: Option<PathBuf>,
    /// auth_query: users not in `[users]` are looked up on the server by
    /// running `auth_query` as this user (who must be in `[users]`, with a
    /// password pglane can log in with) in the database the client asked for,
    /// or in `auth_dbname`'s. Databases may override all three.
    pub auth_user: Option<String>,
    /// The `[databases]` entry whose server runs auth_query, instead of the
    /// one the client asked for (PgBouncer's `auth_dbname`).
    pub auth_dbname: Option<String>,
    /// Returns (user name, secret) for `$1`; the secret may be an md5 hash or
    /// a SCRAM verifier, as in pg_authid. PgBouncer's default.
    #[serde(default = "defaults::auth_query")]
    pub auth_query: String,
    /// The parsed `auth_hba_file`, set by `validate`.
    #[serde(skip)]
    pub hba: std::sync::OnceLock<crate::auth::hba::Hba>,
    /// Users allowed every admin console command (database `pgbouncer` or `pglane`).
    #[serde(default)]
    pub admin_users: Vec<String>,
    /// Users allowed the admin console's SHOW commands.
    #[serde(default)]
    pub stats_users: Vec<String>,
    /// Also accept clients on the unix socket `<dir>/.s.PGSQL.<port>`, the
    /// port being `listen`'s (PgBouncer's naming: `psql -h <dir> -p <port>`).
    pub unix_socket_dir: Option<String>,
    /// Permissions of that socket file.
    #[serde(default = "defaults::unix_socket_mode")]
    pub unix_socket_mode: u32,
    /// A file that gets every log line stderr gets, appended; opened again
    /// on SIGHUP (log rotation). Fixed until restart.
    pub logfile: Option<PathBuf>,
    /// A file holding pglane's process id while it runs. Fixed until restart.
    pub pidfile: Option<PathBuf>,
    /// A log line for each client login (PgBouncer's log_connections).
    #[serde(default = "defaults::on")]
    pub log_connections: bool,
    /// A log line for each client that leaves, saying why
    /// (PgBouncer's log_disconnections).
    #[serde(default = "defaults::on")]
    pub log_disconnections: bool,
    /// A log line for each client refused at login, saying why (PgBouncer's
    /// log_pooler_errors).
    #[serde(default = "defaults::on")]
    pub log_pooler_errors: bool,
    /// More in the log: 1 adds debug lines, 2 trace lines (PgBouncer's
    /// verbose); RUST_LOG and the command line's -q win, and of -v and this
    /// the higher counts. Fixed until restart.
    #[serde(default)]
    pub verbose: u8,
    /// Every `stats_period` seconds, a log line of what all clients did in
    /// it (PgBouncer's log_stats and its line).
    #[serde(default = "defaults::on")]
    pub log_stats: bool,
    #[serde(default = "defaults::stats_period")]
    pub stats_period: u32,
    /// Address of the Prometheus/OpenMetrics endpoint (`GET /metrics`); off if absent.
    pub metrics_listen: Option<String>,
    /// The metric names that endpoint serves: pglane's own, pgbouncer_exporter's
    /// (so dashboards and alerts written for PgBouncer keep working), or both.
    #[serde(default)]
    pub metrics_names: MetricsNames,
    /// Number of shards (one per core); the command line's `--cores` wins.
    pub cores: Option<usize>,
    /// The CPUs to run shards on, one shard each, as a list like `2-5,7`
    /// (keeps pglane off the cores PostgreSQL uses); instead of `cores`.
    /// The command line's `--cpus` wins.
    pub cpus: Option<String>,
    /// Client connections allowed at once, over all shards.
    #[serde(default = "defaults::max_client_conn")]
    pub max_client_conn: usize,
    /// The `pool_size` of a database that sets none.
    #[serde(default = "defaults::pool_size")]
    pub default_pool_size: usize,
    /// Server connections to one database (all its users' pools), over all
    /// shards, unless the database sets its own; 0: no limit but pool_size.
    #[serde(default)]
    pub max_db_connections: usize,
    /// Server connections each (database, user) pool keeps open, over all
    /// shards, while a client of it is connected (or the database forces a
    /// user), so that load coming back after a quiet spell finds them;
    /// unless the database sets its own. Never more than pool_size.
    #[serde(default)]
    pub min_pool_size: usize,
    /// Server connections a pool may open past pool_size (over all shards)
    /// for a client that waited `reserve_pool_timeout`, unless the database
    /// sets its own; 0: none. PgBouncer's reserve pool.
    #[serde(default)]
    pub reserve_pool_size: usize,
    /// Seconds a client waits before the reserve opens for it.
    #[serde(default = "defaults::reserve_pool_timeout")]
    pub reserve_pool_timeout: f64,
    /// Server connections of one user (all its databases' pools), over all
    /// shards, unless `[users.NAME]` sets its own; 0: no limit but pool_size.
    #[serde(default)]
    pub max_user_connections: usize,
    /// Client connections to one database, over all shards, unless the
    /// database sets its own; 0: no limit but max_client_conn (PgBouncer's
    /// max_db_client_connections).
    #[serde(default)]
    pub max_db_client_connections: usize,
    /// Client connections of one user, over all shards, unless `[users.NAME]`
    /// sets its own; 0: no limit but max_client_conn (PgBouncer's
    /// max_user_client_connections).
    #[serde(default)]
    pub max_user_client_connections: usize,
    /// Seconds a client waits for a server connection before it gets an error.
    #[serde(default = "defaults::query_wait_timeout")]
    pub query_wait_timeout: f64,
    /// Seconds a client waits for a server connection before it gets a
    /// NOTICE saying it is queued (PgBouncer's query_wait_notify, whose
    /// default is 5); 0: never, as a direct connection would not.
    #[serde(default)]
    pub query_wait_notify: f64,
    /// Seconds allowed to open and log in a server connection.
    #[serde(default = "defaults::server_connect_timeout")]
    pub server_connect_timeout: f64,
    /// Seconds a client has to finish startup and authentication.
    #[serde(default = "defaults::client_login_timeout")]
    pub client_login_timeout: f64,
    /// Seconds a shutdown waits for transactions in flight before closing them.
    #[serde(default = "defaults::shutdown_timeout")]
    pub shutdown_timeout: f64,
    /// Let another pglane listen on `listen` (and `metrics_listen`) too, for
    /// a rolling restart: start the new one, then SIGTERM the old one, which
    /// hands the port over (see `runtime::listeners`). Only a pglane may share
    /// the port; any other process holding it is still refused.
    #[serde(default)]
    pub so_reuseport: bool,
    /// Connections the kernel queues on each shard's listening socket until
    /// pglane accepts them (listen(2)'s backlog). Fixed until restart.
    #[serde(default = "defaults::listen_backlog")]
    pub listen_backlog: u32,
    /// TCP_DEFER_ACCEPT on the listening sockets: a client connection is
    /// accepted once it has sent its first packet. Fixed until restart.
    #[serde(default)]
    pub tcp_defer_accept: bool,
    /// TCP keepalive (SO_KEEPALIVE) on client and server connections, so
    /// that a peer that vanished without a word is noticed.
    #[serde(default = "defaults::on")]
    pub tcp_keepalive: bool,
    /// Seconds a connection is idle before the first keepalive probe; 0: the
    /// system's (net.ipv4.tcp_keepalive_time).
    #[serde(default)]
    pub tcp_keepidle: u32,
    /// Seconds between keepalive probes; 0: the system's.
    #[serde(default)]
    pub tcp_keepintvl: u32,
    /// Keepalive probes unanswered before the connection is dropped; 0: the
    /// system's.
    #[serde(default)]
    pub tcp_keepcnt: u32,
    /// Milliseconds data sent on a connection may stay unacknowledged before
    /// the connection is dropped (TCP_USER_TIMEOUT); 0: the system's.
    #[serde(default)]
    pub tcp_user_timeout: u32,
    /// Bytes of kernel send and receive buffer of each TCP connection
    /// (SO_SNDBUF, SO_RCVBUF); 0: the system's.
    #[serde(default)]
    pub tcp_socket_buffer: u32,
    /// Seconds a client that needs a new server connection keeps waiting
    /// while no host of its database can serve it (refused, down, shutting
    /// down, or not what target_session_attrs asks for: a failover in
    /// progress), pglane trying the hosts again every quarter second; then it
    /// gets the error. Counted from when the pool first found no host, so
    /// that once an outage has lasted that long clients get the error at
    /// once. 0: at once. Errors that waiting cannot cure (a wrong password,
    /// a missing database, too many connections) come at once.
    #[serde(default = "defaults::server_retry_timeout")]
    pub server_retry_timeout: f64,
    /// Seconds between checks, on one idle server connection per host, that
    /// the hosts of a database with a target_session_attrs other than "any"
    /// still are what it asks for (a standby promoted, a primary made
    /// read-only); the idle connections of a host that is not are closed,
    /// lent ones when they come back. 0: never.
    #[serde(default = "defaults::host_check_interval")]
    pub host_check_interval: f64,
    /// Seconds a server connection may sit idle in its pool before it is
    /// closed; 0: never.
    #[serde(default = "defaults::server_idle_timeout")]
    pub server_idle_timeout: f64,
    /// Seconds after which a server connection is closed once it is idle; 0:
    /// never (PgBouncer's 0 means "use once"; pglane does not do that).
    #[serde(default = "defaults::server_lifetime")]
    pub server_lifetime: f64,
    /// Seconds a client may hold no server and send nothing before it is
    /// disconnected; 0: never.
    #[serde(default)]
    pub client_idle_timeout: f64,
    /// Seconds a client may sit idle inside a transaction, holding its server
    /// connection, before its transaction is rolled back and it is
    /// disconnected (the server connection is kept); 0: never.
    #[serde(default)]
    pub idle_transaction_timeout: f64,
    /// Seconds a query may run before it is cancelled and its client
    /// disconnected; 0: never.
    #[serde(default)]
    pub query_timeout: f64,
    /// Largest message body accepted from a client, in bytes.
    #[serde(default = "defaults::max_message_size")]
    pub max_message_size: usize,
    /// Bytes pglane keeps of one client's conversation in each direction
    /// (its messages on their way to the server, the replies it has not read
    /// yet) before it stops reading the side that sends, as PostgreSQL stops
    /// reading a client whose replies it cannot send. With
    /// `max_message_size` this bounds pglane's memory per client (see
    /// `client::relay`; FUZZING.md has the figures).
    #[serde(default = "defaults::relay_buffer_size")]
    pub relay_buffer_size: usize,
    /// Bytes of notifications (LISTEN/NOTIFY, transaction mode) pglane
    /// keeps for one client that has not taken them yet; past it the client
    /// is disconnected (see `notify`).
    #[serde(default = "defaults::notify_client_buffer")]
    pub notify_client_buffer: usize,
    /// Microseconds a shard spins, yielding the CPU between checks, before
    /// its thread sleeps waiting for I/O; 0 (the default): never. Fewer
    /// sleeps and wake-ups mean less latency when clients are few, paid in
    /// CPU time: for shards on cores of their own (`--cpus`).
    #[serde(default)]
    pub spin_before_park_us: u64,
    /// Run on a server connection when a session-mode client leaves it.
    #[serde(default = "defaults::server_reset_query")]
    pub server_reset_query: String,
    /// Also run the reset query in transaction mode.
    #[serde(default)]
    pub server_reset_query_always: bool,
    /// Append ` - host:port` of a TCP client to the application_name its
    /// startup packet gives (PgBouncer's setting): what the server and the
    /// client then see.
    #[serde(default)]
    pub application_name_add_host: bool,
    /// Prepared statements each server connection keeps (least recently used
    /// closed first), as PgBouncer's setting of the same name.
    #[serde(default = "defaults::max_prepared_statements")]
    pub max_prepared_statements: usize,
    /// Binary format negotiation: for prepared statements whose result
    /// columns pglane knows, ask the server for binary where the client wants
    /// text and the type can be turned back into PostgreSQL's exact text
    /// (see `client::negotiate` for which types and when). On by default.
    #[serde(default = "defaults::on")]
    pub binary_negotiation: bool,
    /// Server pipelining (transaction mode): when a client's request in
    /// flight leaves the server session as it found it (plain SELECT,
    /// INSERT, UPDATE, DELETE, as simple queries or statements, outside a
    /// transaction block), the next waiting client's request (or, if none
    /// waits, the next to come before the reply) is sent right behind it,
    /// the next behind that one, and so on, and the connection is handed
    /// down the line as each is answered, so a busy server never waits for
    /// the pooler between transactions. The cost: a request queued behind a long one waits for
    /// it even if another connection frees up first. See `pool::Opening`.
    /// Off by default (issue 43): a cancel request for the request ahead
    /// that reaches the server after it ended cancels the request behind
    /// it, another client's, and a backend that dies fails that one too;
    /// neither can be told from the client's own trouble, so neither can be
    /// undone. It wins at 8 and 64 clients (bench/RESULTS.md §9).
    #[serde(default)]
    pub server_pipelining: bool,
    /// Named prepared statements one client may hold at once.
    #[serde(default = "defaults::max_client_prepared_statements")]
    pub max_client_prepared_statements: usize,
    /// Auto-prepare: run simple queries of a validated shape, and unnamed
    /// statements, as shared named server-side statements (see `prepare`).
    /// On by default.
    #[serde(default = "defaults::on")]
    pub auto_prepare: bool,
    /// Simple queries of a new shape before it is validated (1: the first).
    #[serde(default = "defaults::auto_prepare_after")]
    pub auto_prepare_after: u32,
    /// TLS with clients, as PgBouncer: disable (answer SSLRequest "N"),
    /// allow/prefer (TLS if the client asks), require (refuse plaintext),
    /// verify-ca/verify-full (require, and a client certificate signed by
    /// `client_tls_ca_file`).
    #[serde(default)]
    pub client_tls_sslmode: SslMode,
    /// pglane's certificate chain and private key for clients (PEM).
    pub client_tls_cert_file: Option<PathBuf>,
    pub client_tls_key_file: Option<PathBuf>,
    /// The CA that signs client certificates (PEM), for verify-ca/verify-full.
    pub client_tls_ca_file: Option<PathBuf>,
    /// TLS with servers, as libpq's sslmode: disable, allow (plaintext, TLS
    /// if the server refuses that), prefer (TLS if the server offers it),
    /// require (TLS or fail; the chain is checked if `server_tls_ca_file` is
    /// set), verify-ca (chain checked), verify-full (chain and host name).
    /// Unix-socket servers never use TLS.
    #[serde(default)]
    pub server_tls_sslmode: SslMode,
    /// The CA that signs the servers' certificates (PEM).
    pub server_tls_ca_file: Option<PathBuf>,
    /// A client certificate and key for servers that ask for one (PEM).
    pub server_tls_cert_file: Option<PathBuf>,
    pub server_tls_key_file: Option<PathBuf>,
    /// Highest SCRAM-SHA-256 iteration count pglane computes when a server
    /// asks for one at login; above it the login fails with a clear error.
    /// PBKDF2 runs on the shard's thread, so a huge count would stall every
    /// client of the shard. (The result is cached per shard, so this is paid
    /// once per server role, not per connection.)
    #[serde(default = "defaults::server_scram_max_iterations")]
    pub server_scram_max_iterations: u32,
    /// The SCRAM-SHA-256 iteration count of the verifiers pglane derives from
    /// plaintext passwords to check clients with (and shows for users that
    /// cannot log in, so that the two look alike), as PgBouncer's
    /// scram_iterations. Derived once per password and shard.
    #[serde(default = "defaults::scram_iterations")]
    pub scram_iterations: u32,
    /// The TLS settings above, read and checked by `validate` (once per
    /// config load, never per connection); see `crate::net::tls`.
    #[serde(skip)]
    pub tls: std::sync::OnceLock<crate::net::tls::Contexts>,
    /// The databases clients may connect to, by the name they use. An entry
    /// named `*` ([`FALLBACK_DATABASE`]) serves every name not listed, as
    /// PgBouncer's: pools for it are made when a client first asks, its
    /// `dbname` (unless the entry sets one) being the name asked for.
    #[serde(default)]
    pub databases: BTreeMap<String, Database>,
    /// How many database names the `*` entry may serve at once, over all
    /// shards; a client asking for another is refused (53400). A name
    /// counts while a pool of it has a client or a server connection.
    #[serde(default = "defaults::max_fallback_databases")]
    pub max_fallback_databases: usize,
    #[serde(default)]
    pub users: BTreeMap<String, User>,
    /// This instance's id among pglane (or PgBouncer) instances behind one
    /// address, as PgBouncer's peer_id: 1 to 16383, unique in the group; 0
    /// (the default): no peering. The cancel keys clients get then name the
    /// instance, and a CancelRequest for another instance's client goes to
    /// that instance, as listed in `[peers]`. Fixed until restart.
    #[serde(default)]
    pub peer_id: u16,
    /// The instances of the group, by peer id (`[peers.2] host = "10.0.0.2"`),
    /// as PgBouncer's [peers]; an entry for this instance itself is ignored.
    #[serde(default)]
    pub peers: BTreeMap<String, Peer>,
}

/// Another instance of a peered group (see `Config::peer_id`).
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Peer {
    /// A host name or IP address, or the directory of the instance's unix
    /// socket, as for a database.
    pub host: String,
    #[serde(default = "defaults::peer_port")]
    pub port: u16,
}

impl Peer {
    pub fn address(&self) -> ServerAddress {
        server_address(&self.host, self.port)
    }
}

mod defaults {
    pub fn on() -> bool {
        true
    }
    pub fn unix_socket_mode() -> u32 {
        0o777
    }
    pub fn stats_period() -> u32 {
        60
    }
    pub fn listen_backlog() -> u32 {
        1024
    }
    pub fn max_client_conn() -> usize {
        10_000
    }
    pub fn query_wait_timeout() -> f64 {
        120.0
    }
    pub fn server_connect_timeout() -> f64 {
        15.0
    }
    pub fn client_login_timeout() -> f64 {
        60.0
    }
    pub fn server_idle_timeout() -> f64 {
        600.0
    }
    pub fn server_lifetime() -> f64 {
        3600.0
    }
    pub fn shutdown_timeout() -> f64 {
        10.0
    }
    pub fn max_message_size() -> usize {
        64 << 20
    }
    pub fn relay_buffer_size() -> usize {
        64 << 10
    }
    pub fn notify_client_buffer() -> usize {
        1 << 20
    }
    pub fn server_reset_query() -> String {
        "DISCARD ALL".into()
    }
    pub fn max_prepared_statements() -> usize {
        200
    }
    pub fn auto_prepare_after() -> u32 {
        1
    }
    pub fn max_client_prepared_statements() -> usize {
        1000
    }
    pub fn auth_query() -> String {
        "SELECT usename, passwd FROM pg_shadow WHERE usename=$1".into()
    }
    pub fn scram_iterations() -> u32 {
        crate::auth::secret::DEFAULT_SCRAM_ITERATIONS
    }
    pub fn server_scram_max_iterations() -> u32 {
        crate::auth::scram::DEFAULT_MAX_ITERATIONS
    }
    pub fn hosts() -> Vec<String> {
        vec!["127.0.0.1".into()]
    }
    pub fn read_routing_max_lag() -> u64 {
        16 * 1024 * 1024
    }
    pub fn ports() -> Vec<u16> {
        vec![5432]
    }
    pub fn server_retry_timeout() -> f64 {
        5.0
    }
    pub fn host_check_interval() -> f64 {
        5.0
    }
    pub fn pool_size() -> usize {
        20
    }
    pub fn reserve_pool_timeout() -> f64 {
        5.0
    }
    pub fn peer_port() -> u16 {
        6432
    }
    pub fn max_fallback_databases() -> usize {
        100
    }
}

/// `metrics_names`: whose metric names `/metrics` serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum MetricsNames {
    /// pglane's own `pglane_*` families (see `admin::metrics`).
    #[default]
    Pglane,
    /// Only pgbouncer_exporter's `pgbouncer_*` families, with its labels and
    /// units (see `admin::metrics_pgbouncer`).
    Pgbouncer,
    /// Both sets, one after the other.
    Both,
}

impl MetricsNames {
    pub fn serves_pglane_names(self) -> bool {
        self != MetricsNames::Pgbouncer
    }

    pub fn serves_pgbouncer_names(self) -> bool {
        self != MetricsNames::Pglane
    }
}

impl std::fmt::Display for MetricsNames {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            MetricsNames::Pglane => "pglane",
            MetricsNames::Pgbouncer => "pgbouncer",
            MetricsNames::Both => "both",
        })
    }
}

/// How one side uses TLS, with libpq's and PgBouncer's names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum SslMode {
    #[default]
    Disable,
    Allow,
    Prefer,
    Require,
    VerifyCa,
    VerifyFull,
}

impl SslMode {
    /// require, verify-ca, verify-full: never without TLS.
    pub fn requires_tls(self) -> bool {
        self >= SslMode::Require
    }

    /// verify-ca, verify-full: the peer's certificate must chain to a CA file.
    pub fn verifies(self) -> bool {
        self >= SslMode::VerifyCa
    }
}

impl std::fmt::Display for SslMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            SslMode::Disable => "disable",
            SslMode::Allow => "allow",
            SslMode::Prefer => "prefer",
            SslMode::Require => "require",
            SslMode::VerifyCa => "verify-ca",
            SslMode::VerifyFull => "verify-full",
        })
    }
}

/// Reads the config from a TOML file, a pgbouncer.ini, or both (the TOML
/// laid over the ini), with what the import had to say. Errors name their file.
pub fn load(toml: Option<&Path>, pgbouncer_ini: Option<&Path>) -> Result<(Config, Vec<pgbouncer_ini::Warning>), String> {
    load_with_sets(toml, pgbouncer_ini, &[])
}

/// [`load`], with the admin console's `SET key = value`s laid over the
/// files, later ones winning: `[pgbouncer]` settings by PgBouncer's names
/// when a pgbouncer.ini is read, else top-level keys of the TOML config.
pub fn load_with_sets(
    toml: Option<&Path>,
    pgbouncer_ini: Option<&Path>,
    sets: &[(String, String)],
) -> Result<(Config, Vec<pgbouncer_ini::Warning>), String> {
    match (pgbouncer_ini, toml) {
        (Some(ini), toml) => pgbouncer_ini::load(ini, toml, sets).map_err(|e| e.to_string()),
        (None, Some(path)) => {
            let read = || -> Result<Config, ConfigError> {
                let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read { path: path.to_owned(), source })?;
                if sets.is_empty() {
                    return Config::parse(&text);
                }
                let mut document: toml::Table = toml::from_str(&text)?;
                for (key, value) in sets {
                    document.insert(key.clone(), toml_value_of(value));
                }
                let config: Config = toml::Value::Table(document).try_into()?;
                config.validate()?;
                Ok(config)
            };
            read().map(|c| (c, Vec::new())).map_err(|e| format!("{}: {e}", path.display()))
        }
        (None, None) => Err("give --config FILE or --pgbouncer-ini FILE".into()),
    }
}

/// A console SET's value as TOML: a number or boolean if it reads as one,
/// else a string.
fn toml_value_of(value: &str) -> toml::Value {
    if let Ok(i) = value.parse::<i64>() {
        toml::Value::Integer(i)
    } else if let Some(f) = value.parse::<f64>().ok().filter(|f| f.is_finite()) {
        toml::Value::Float(f)
    } else if let Ok(b) = value.parse::<bool>() {
        toml::Value::Boolean(b)
    } else {
        toml::Value::String(value.to_owned())
    }
}

/// Parses a CPU list as Linux prints them (`0-3,8,10-11`): the CPUs in the
/// order given, each once.
pub fn parse_cpu_list(list: &str) -> Result<Vec<usize>, String> {
    let mut cpus = Vec::new();
    for part in list.split(',').map(str::trim) {
        let number = |s: &str| s.trim().parse::<usize>().map_err(|_| format!("{s:?} is not a CPU number in {list:?}"));
        let (first, last) = match part.split_once('-') {
            Some((a, b)) => (number(a)?, number(b)?),
            None => (number(part)?, number(part)?),
        };
        if first > last {
            return Err(format!("{part:?} counts down in {list:?}"));
        }
        for cpu in first..=last {
            if cpus.contains(&cpu) {
                return Err(format!("CPU {cpu} is listed twice in {list:?}"));
            }
            cpus.push(cpu);
        }
    }
    Ok(cpus)
}

impl Config {
    /// Auto-prepare's policy for a new session: executions of a new shape
    /// before it is validated, or None when auto-prepare is off.
    pub fn auto_prepare_policy(&self) -> Option<u32> {
        self.auto_prepare.then_some(self.auto_prepare_after.max(1))
    }

    /// Reads and validates a config file.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read { path: path.to_owned(), source })?;
        Self::parse(&text)
    }

    /// Parses and validates config text.
    /// How users not in `[users]` are looked up for clients of `database`, if
    /// they are: the database's own auth_user / auth_query / auth_dbname,
    /// else the global ones; without an auth_user anywhere, not at all.
    pub fn auth_lookup_for<'a>(&'a self, database: &'a str) -> Option<AuthLookup<'a>> {
        let db = self.database(database);
        let user = db.and_then(|d| d.auth_user.as_deref()).or(self.auth_user.as_deref())?;
        Some(AuthLookup {
            user,
            query: db.and_then(|d| d.auth_query.as_deref()).unwrap_or(&self.auth_query),
            database: db.and_then(|d| d.auth_dbname.as_deref()).or(self.auth_dbname.as_deref()).unwrap_or(database),
        })
    }

    pub fn parse(text: &str) -> Result<Config, ConfigError> {
        let config: Config = toml::from_str(text)?;
        config.validate()?;
        Ok(config)
    }

    /// The options each client and server TCP connection gets.
    pub fn tcp_tuning(&self) -> crate::net::TcpTuning {
        crate::net::TcpTuning {
            keepalive: self.tcp_keepalive,
            keepidle: self.tcp_keepidle,
            keepintvl: self.tcp_keepintvl,
            keepcnt: self.tcp_keepcnt,
            user_timeout_ms: self.tcp_user_timeout,
            socket_buffer: self.tcp_socket_buffer,
        }
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        self.listen_addr()?;
        self.metrics_addr()?;
        if self.default_pool_size == 0 {
            return Err(invalid("default_pool_size must be at least 1"));
        }
        if self.cores == Some(0) {
            return Err(invalid("cores must be at least 1"));
        }
        if let Some(list) = &self.cpus {
            if self.cores.is_some() {
                return Err(invalid("set cores or cpus, not both"));
            }
            parse_cpu_list(list).map_err(|e| invalid(format!("cpus: {e}")))?;
        }
        if self.databases.is_empty() {
            return Err(invalid("no [databases.<name>] section: clients would have nothing to connect to"));
        }
        if self.auto_prepare_after == 0 {
            return Err(invalid("auto_prepare_after must be at least 1"));
        }
        if self.max_prepared_statements == 0 || self.max_client_prepared_statements == 0 {
            return Err(invalid("max_prepared_statements and max_client_prepared_statements must be at least 1"));
        }
        if self.scram_iterations == 0 || self.scram_iterations > i32::MAX as u32 {
            return Err(invalid(format!("scram_iterations must be 1 to {}, as PostgreSQL's", i32::MAX)));
        }
        if self.server_scram_max_iterations == 0 {
            return Err(invalid("server_scram_max_iterations must be at least 1"));
        }
        if self.max_message_size < 1024 {
            return Err(invalid("max_message_size must be at least 1024 bytes"));
        }
        if self.notify_client_buffer < 16 * 1024 {
            // A notification takes up to about 8 KiB (its payload's limit).
            return Err(invalid("notify_client_buffer must be at least 16384 bytes"));
        }
        if self.relay_buffer_size < 8 * 1024 {
            return Err(invalid("relay_buffer_size must be at least 8192 bytes"));
        }
        // Linux's own bounds (MAX_TCP_KEEPIDLE, MAX_TCP_KEEPINTVL,
        // MAX_TCP_KEEPCNT): past them every connection would fail to open.
        for (name, value, max) in [
            ("tcp_keepidle", self.tcp_keepidle, 32767),
            ("tcp_keepintvl", self.tcp_keepintvl, 32767),
            ("tcp_keepcnt", self.tcp_keepcnt, 127),
            ("tcp_user_timeout", self.tcp_user_timeout, i32::MAX as u32),
            ("tcp_socket_buffer", self.tcp_socket_buffer, i32::MAX as u32),
            ("listen_backlog", self.listen_backlog, i32::MAX as u32),
        ] {
            if value > max {
                return Err(invalid(format!("{name} must be at most {max}")));
            }
        }
        if self.stats_period == 0 || self.stats_period > MAX_TIMEOUT_SECS as u32 {
            return Err(invalid("stats_period must be 1 second to a year"));
        }
        if self.verbose > 2 {
            return Err(invalid("verbose must be 0, 1 (debug) or 2 (trace)"));
        }
        if self.spin_before_park_us > MAX_SPIN_BEFORE_PARK_US {
            return Err(invalid(format!("spin_before_park_us must be at most {MAX_SPIN_BEFORE_PARK_US} (10 ms)")));
        }
        for (name, seconds) in [
            ("query_wait_timeout", self.query_wait_timeout),
            ("server_connect_timeout", self.server_connect_timeout),
            ("client_login_timeout", self.client_login_timeout),
            ("shutdown_timeout", self.shutdown_timeout),
        ] {
            // A year is "never" for a pooler; above that Duration would overflow.
            if !(seconds.is_finite() && seconds > 0.0 && seconds <= MAX_TIMEOUT_SECS) {
                return Err(invalid(format!("{name} must be a positive number of seconds up to a year, not {seconds}")));
            }
        }
        for (name, seconds) in [
            ("server_idle_timeout", self.server_idle_timeout),
            ("server_lifetime", self.server_lifetime),
            ("client_idle_timeout", self.client_idle_timeout),
            ("idle_transaction_timeout", self.idle_transaction_timeout),
            ("query_timeout", self.query_timeout),
            ("server_retry_timeout", self.server_retry_timeout),
            ("host_check_interval", self.host_check_interval),
            ("query_wait_notify", self.query_wait_notify),
        ] {
            if !(seconds.is_finite() && (0.0..=MAX_TIMEOUT_SECS).contains(&seconds)) {
                return Err(invalid(format!("{name} must be 0 (off) or a number of seconds up to a year, not {seconds}")));
            }
        }
        for (name, db) in &self.databases {
            db.validate(name)?;
        }
        if self.peer_id > crate::runtime::keys::MAX_PEER_ID {
            return Err(invalid(format!(
                "peer_id must be 0 (no peering) to {}, not {}",
                crate::runtime::keys::MAX_PEER_ID,
                self.peer_id
            )));
        }
        for (id, peer) in &self.peers {
            if !id.parse::<u16>().is_ok_and(|id| (1..=crate::runtime::keys::MAX_PEER_ID).contains(&id)) {
                return Err(invalid(format!(
                    "[peers.{id}]: peer ids are numbers from 1 to {}",
                    crate::runtime::keys::MAX_PEER_ID
                )));
            }
            if peer.host.is_empty() {
                return Err(invalid(format!("peers.{id}.host is empty")));
            }
        }
        self.load_hba()?;
        for (name, db) in &self.databases {
            let Some(lookup) = self.auth_lookup_for(name) else { continue };
            let whose = if db.auth_user.is_some() || db.auth_query.is_some() || db.auth_dbname.is_some() {
                format!(" (for database {name})")
            } else {
                String::new()
            };
            if !self.users.contains_key(lookup.user) {
                return Err(invalid(format!(
                    "auth_user \"{}\"{whose} must be in [users] (with the password pglane logs in to servers with)",
                    lookup.user
                )));
            }
            if !lookup.query.contains("$1") {
                return Err(invalid(format!("auth_query{whose} must take the user name as $1")));
            }
            if self.database(lookup.database).is_none() {
                return Err(invalid(format!("auth_dbname \"{}\"{whose} is not in [databases]", lookup.database)));
            }
        }
        // (Under md5, a SCRAM secret is checked with SCRAM, as PostgreSQL does.)
        for (name, user) in &self.users {
            let Some(password) = &user.password else { continue };
            Secret::parse(password).map_err(|e| invalid(format!("users.{name}.password: {e}")))?;
        }
        // Certificates and keys are read and parsed here, so --check finds a
        // bad file, and loaded once for all connections.
        let tls = crate::net::tls::Contexts::load(self).map_err(invalid)?;
        let _ = self.tls.set(tls);
        Ok(())
    }

    /// Reads and parses auth_hba_file, which auth_type = "hba" needs and
    /// nothing else may have.
    fn load_hba(&self) -> Result<(), ConfigError> {
        let path = match (&self.auth_type, &self.auth_hba_file) {
            (AuthType::Hba, Some(path)) => path,
            (AuthType::Hba, None) => return Err(invalid("auth_type = \"hba\" needs auth_hba_file")),
            (_, Some(_)) => return Err(invalid("auth_hba_file is read only with auth_type = \"hba\"")),
            (_, None) => return Ok(()),
        };
        let text = std::fs::read_to_string(path).map_err(|e| invalid(format!("auth_hba_file {}: {e}", path.display())))?;
        let hba = crate::auth::hba::Hba::parse(&text).map_err(|e| invalid(format!("auth_hba_file {}: {e}", path.display())))?;
        let _ = self.hba.set(hba);
        Ok(())
    }

    pub fn metrics_addr(&self) -> Result<Option<SocketAddr>, ConfigError> {
        self.metrics_listen
            .as_deref()
            .map(|a| a.parse().map_err(|_| invalid(format!("metrics_listen = {a:?} is not an address like \"127.0.0.1:9127\""))))
            .transpose()
    }

    /// The unix socket clients may connect to, if `unix_socket_dir` is set.
    pub fn unix_socket_path(&self) -> Option<PathBuf> {
        let dir = self.unix_socket_dir.as_deref().filter(|d| !d.is_empty())?;
        let port = self.listen_addr().ok()?.port();
        Some(Path::new(dir).join(format!(".s.PGSQL.{port}")))
    }

    /// The first `listen` address, every one checked.
    pub fn listen_addr(&self) -> Result<SocketAddr, ConfigError> {
        if self.listen.addresses().is_empty() {
            return Err(invalid("listen is an empty list: give at least one address like \"127.0.0.1:6432\""));
        }
        let mut parsed = Vec::new();
        for address in self.listen.addresses() {
            let addr: SocketAddr = address
                .parse()
                .map_err(|_| invalid(format!("listen = {address:?} is not an address like \"127.0.0.1:6432\"")))?;
            if parsed.contains(&addr) {
                return Err(invalid(format!("listen has {address} twice")));
            }
            parsed.push(addr);
        }
        Ok(parsed[0])
    }

    pub fn pool_mode_for(&self, database: &str, user: &str) -> PoolMode {
        self.users
            .get(user)
            .and_then(|u| u.pool_mode)
            .or_else(|| self.database(database).and_then(|d| d.pool_mode))
            .unwrap_or(self.pool_mode)
    }

    /// The `max_db_connections` of database entry `database` (0: none).
    pub fn max_db_connections(&self, database: &str) -> usize {
        self.database(database).and_then(|d| d.max_db_connections).unwrap_or(self.max_db_connections)
    }

    /// The `pool_size` of database entry `database` (0 if there is none).
    pub fn pool_size(&self, database: &str) -> usize {
        self.database(database).map_or(0, |db| db.pool_size.unwrap_or(self.default_pool_size))
    }

    /// The `min_pool_size` of database entry `database`, at most its pool_size.
    pub fn min_pool_size(&self, database: &str) -> usize {
        let Some(db) = self.database(database) else { return 0 };
        db.min_pool_size.unwrap_or(self.min_pool_size).min(self.pool_size(database))
    }

    /// The `reserve_pool_size` of database entry `database`.
    pub fn reserve_pool_size(&self, database: &str) -> usize {
        self.database(database).and_then(|d| d.reserve_pool_size).unwrap_or(self.reserve_pool_size)
    }

    /// The `max_user_connections` of `user` (0: none).
    pub fn max_user_connections(&self, user: &str) -> usize {
        self.users.get(user).and_then(|u| u.max_user_connections).unwrap_or(self.max_user_connections)
    }

    /// Client connections allowed to database `database` at once (0: no limit).
    pub fn max_db_client_connections(&self, database: &str) -> usize {
        self.database(database).and_then(|d| d.max_db_client_connections).unwrap_or(self.max_db_client_connections)
    }

    /// Client connections allowed to user `user` at once (0: no limit).
    pub fn max_user_client_connections(&self, user: &str) -> usize {
        self.users.get(user).and_then(|u| u.max_user_client_connections).unwrap_or(self.max_user_client_connections)
    }

    /// The entry that serves clients of database `name`: its own, else the
    /// `*` fallback, if there is one.
    pub fn database(&self, name: &str) -> Option<&Database> {
        self.databases.get(name).or_else(|| self.databases.get(FALLBACK_DATABASE))
    }

    /// Whether clients of `name` are served by the `*` entry.
    pub fn is_fallback(&self, name: &str) -> bool {
        !self.databases.contains_key(name) && self.databases.contains_key(FALLBACK_DATABASE)
    }

    /// The peer instance with this peer id, if `[peers]` lists it.
    pub fn peer_by_id(&self, id: u16) -> Option<&Peer> {
        self.peers.iter().find(|(name, _)| name.parse::<u16>().ok() == Some(id)).map(|(_, peer)| peer)
    }

    /// The other instances of the group (every `[peers]` entry but this
    /// instance's own); none without `peer_id`.
    pub fn other_peers(&self) -> impl Iterator<Item = &Peer> {
        let me = self.peer_id;
        self.peers.iter().filter(move |(name, _)| me != 0 && name.parse::<u16>().ok() != Some(me)).map(|(_, peer)| peer)
    }

    /// Whether a connection from `from` (None: the unix socket) may be a
    /// peer instance's: its address is one `[peers]` lists as an IP address
    /// (`localhost` standing for the loopback addresses), or it came over
    /// the unix socket and a peer is listed by its socket directory. Host
    /// names are not resolved for this: list peers by address.
    pub fn is_peer_address(&self, from: Option<std::net::IpAddr>) -> bool {
        self.other_peers().any(|peer| match (from, peer.address()) {
            (None, ServerAddress::Unix(_)) => true,
            (Some(ip), ServerAddress::Tcp { host, .. }) => {
                host.parse::<std::net::IpAddr>().is_ok_and(|listed| listed == ip) || (host == "localhost" && ip.is_loopback())
            }
            _ => false,
        })
    }

    /// Whole seconds (every default, and most settings) are converted
    /// without the float decomposition `from_secs_f64` does: a transaction
    /// converts a few of them.
    pub fn secs(seconds: f64) -> Duration {
        let whole = seconds as u64;
        if whole as f64 == seconds {
            Duration::from_secs(whole)
        } else {
            Duration::from_secs_f64(seconds)
        }
    }

    /// A timeout where 0 means "never".
    pub fn optional_secs(seconds: f64) -> Option<Duration> {
        (seconds > 0.0).then(|| Config::secs(seconds))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_convert_whole_or_fractional() {
        for seconds in [0.0, 0.25, 1.0, 1.5, 120.0, 3600.0, 0.001, 86400.5] {
            assert_eq!(Config::secs(seconds), Duration::from_secs_f64(seconds), "{seconds}");
        }
        assert_eq!(Config::optional_secs(0.0), None);
        assert_eq!(Config::optional_secs(2.0), Some(Duration::from_secs(2)));
    }

    const MINIMAL: &str = r#"
listen = "127.0.0.1:6432"
pool_mode = "transaction"      # or "session"
admin_users = ["postgres"]

[databases.app]                # the name clients connect to
host = "127.0.0.1"
port = 5432
dbname = "postgres"
pool_size = 8

[users.postgres]
password = "secret"
"#;

    #[test]
    fn a_console_sets_value_reads_as_a_number_or_boolean_if_it_is_one() {
        assert_eq!(toml_value_of("7"), toml::Value::Integer(7));
        assert_eq!(toml_value_of("2.5"), toml::Value::Float(2.5));
        assert_eq!(toml_value_of("true"), toml::Value::Boolean(true));
        assert_eq!(toml_value_of("DISCARD ALL"), toml::Value::String("DISCARD ALL".into()));
        assert_eq!(toml_value_of("inf"), toml::Value::String("inf".into()), "not a finite number");
    }

    #[test]
    fn the_minimal_file_from_the_readme_parses() {
        let c = Config::parse(MINIMAL).unwrap();
        assert_eq!(c.pool_mode, PoolMode::Transaction);
        assert_eq!(c.auth_type, AuthType::ScramSha256);
        assert_eq!(c.pool_size("app"), 8);
        assert_eq!(c.databases["app"].addresses(), vec![ServerAddress::Tcp { host: "127.0.0.1".into(), port: 5432 }]);
        assert_eq!(c.databases["app"].target_session_attrs, TargetSessionAttrs::Any);
        assert!(!c.databases["app"].has_host_choice());
        assert_eq!(c.max_message_size, 64 << 20);
        assert_eq!(c.pool_mode_for("app", "postgres"), PoolMode::Transaction);
    }

    #[test]
    fn the_shipped_example_parses() {
        let text = include_str!("../../config/pglane.toml");
        Config::parse(text).unwrap();
    }

    #[test]
    fn cpu_lists_as_linux_prints_them() {
        assert_eq!(parse_cpu_list("2-5").unwrap(), vec![2, 3, 4, 5]);
        assert_eq!(parse_cpu_list("0, 2,4-6").unwrap(), vec![0, 2, 4, 5, 6]);
        assert_eq!(parse_cpu_list("7").unwrap(), vec![7]);
        assert!(parse_cpu_list("5-2").unwrap_err().contains("counts down"));
        assert!(parse_cpu_list("1,1").unwrap_err().contains("twice"));
        assert!(parse_cpu_list("a-3").unwrap_err().contains("not a CPU number"));
        assert!(parse_cpu_list("").is_err());
        let bad = Config::parse(&MINIMAL.replace("pool_mode", "cores = 2\ncpus = \"0-1\"\npool_mode")).unwrap_err();
        assert!(bad.to_string().contains("not both"), "{bad}");
        assert_eq!(Config::parse(&MINIMAL.replace("pool_mode", "cpus = \"1\"\npool_mode")).unwrap().cpus.as_deref(), Some("1"));
    }

    #[test]
    fn unix_socket_hosts() {
        let c = Config::parse(&MINIMAL.replace("host = \"127.0.0.1\"", "host = \"/var/run/postgresql\"")).unwrap();
        assert_eq!(c.databases["app"].addresses(), vec![ServerAddress::Unix("/var/run/postgresql/.s.PGSQL.5432".into())]);
    }

    #[test]
    fn host_lists_as_libpq_has_them() {
        let with = |lines: &str| Config::parse(&MINIMAL.replace("host = \"127.0.0.1\"\nport = 5432", lines));
        let tcp = |host: &str, port| ServerAddress::Tcp { host: host.into(), port };
        // One port for all hosts.
        let c = with("host = [\"db1\", \"db2\"]\nport = 5433\ntarget_session_attrs = \"read-write\"").unwrap();
        let db = &c.databases["app"];
        assert_eq!(db.addresses(), vec![tcp("db1", 5433), tcp("db2", 5433)]);
        assert_eq!((db.target_session_attrs, db.load_balance_hosts), (TargetSessionAttrs::ReadWrite, LoadBalanceHosts::Disable));
        assert!(db.has_host_choice());
        // One port per host, a unix socket among them.
        let c = with("host = [\"db1\", \"/run/pg\"]\nport = [5432, 6543]\nload_balance_hosts = \"random\"").unwrap();
        let db = &c.databases["app"];
        assert_eq!(db.addresses(), vec![tcp("db1", 5432), ServerAddress::Unix("/run/pg/.s.PGSQL.6543".into())]);
        assert_eq!(db.load_balance_hosts, LoadBalanceHosts::Random);
        // A single host with a condition is a choice too: it is checked.
        assert!(with("target_session_attrs = \"primary\"").unwrap().databases["app"].has_host_choice());
        for (value, attrs) in [
            ("any", TargetSessionAttrs::Any),
            ("read-write", TargetSessionAttrs::ReadWrite),
            ("read-only", TargetSessionAttrs::ReadOnly),
            ("primary", TargetSessionAttrs::Primary),
            ("standby", TargetSessionAttrs::Standby),
            ("prefer-standby", TargetSessionAttrs::PreferStandby),
        ] {
            let c = with(&format!("target_session_attrs = \"{value}\"")).unwrap();
            assert_eq!(c.databases["app"].target_session_attrs, attrs);
            assert_eq!(attrs.to_string(), value);
        }
        let bad = |lines: &str| with(lines).unwrap_err().to_string();
        assert!(bad("host = [\"a\", \"b\", \"c\"]\nport = [1, 2]").contains("lists 2 ports for 3 hosts"));
        assert!(bad("host = []").contains("host is empty"));
        assert!(bad("host = [\"a\", \"\"]").contains("host is empty"));
        assert!(bad("port = 0").contains("port must be a port number"));
        assert!(bad("port = [5432, \"x\"]").contains("expected u16"), "{}", bad("port = [5432, \"x\"]"));
        assert!(bad("target_session_attrs = \"read_write\"").contains("read-write"));
        assert!(bad("load_balance_hosts = \"yes\"").contains("random"));
    }

    #[test]
    fn read_routing_needs_a_primary_and_standbys() {
        let with = |lines: &str| Config::parse(&MINIMAL.replace("host = \"127.0.0.1\"\nport = 5432", lines));
        let bad = |lines: &str| with(lines).unwrap_err().to_string();
        let c = with("host = [\"db1\", \"db2\"]\ntarget_session_attrs = \"read-write\"\nread_routing = \"standbys\"").unwrap();
        assert_eq!(c.databases["app"].read_routing, ReadRouting::Standbys);
        assert_eq!(c.databases["app"].read_routing_max_lag, 16 * 1024 * 1024);
        assert_eq!(with("host = [\"db1\", \"db2\"]").unwrap().databases["app"].read_routing, ReadRouting::Off);
        assert!(bad("read_routing = \"standbys\"\ntarget_session_attrs = \"read-write\"").contains("host list"));
        assert!(bad("host = [\"db1\", \"db2\"]\nread_routing = \"standbys\"").contains("read-write"));
        assert!(bad("host = [\"db1\", \"db2\"]\nread_routing = \"on\"").contains("standbys"));
    }

    #[test]
    fn listen_is_one_address_or_a_list() {
        let with = |value: &str| Config::parse(&MINIMAL.replace("listen = \"127.0.0.1:6432\"", &format!("listen = {value}")));
        assert_eq!(Config::parse(MINIMAL).unwrap().listen.addresses(), ["127.0.0.1:6432"]);
        let both = with(r#"["127.0.0.1:6432", "[::1]:6432"]"#).unwrap();
        assert_eq!(both.listen.addresses(), ["127.0.0.1:6432", "[::1]:6432"]);
        assert_eq!(both.listen.to_string(), "127.0.0.1:6432, [::1]:6432");
        assert_eq!(both.unix_socket_path(), None);
        assert_eq!(both.listen_addr().unwrap().to_string(), "127.0.0.1:6432", "the first");
        let bad = |value: &str| with(value).unwrap_err().to_string();
        assert!(bad("[]").contains("listen is an empty list"), "{}", bad("[]"));
        assert!(bad(r#"["127.0.0.1:6432", "x"]"#).contains(r#"listen = "x""#));
        assert!(bad(r#"["127.0.0.1:6432", "127.0.0.1:6432"]"#).contains("twice"));
    }

    #[test]
    fn metrics_names_takes_three_values_and_refuses_others() {
        let with = |value: &str| Config::parse(&MINIMAL.replace("admin_users", &format!("metrics_names = {value}\nadmin_users")));
        assert_eq!(Config::parse(MINIMAL).unwrap().metrics_names, MetricsNames::Pglane);
        assert_eq!(with("\"pgbouncer\"").unwrap().metrics_names, MetricsNames::Pgbouncer);
        assert_eq!(with("\"both\"").unwrap().metrics_names, MetricsNames::Both);
        let refused = with("\"prometheus\"").unwrap_err().to_string();
        assert!(refused.contains("metrics_names"), "{refused}");
        assert!(refused.contains("unknown variant `prometheus`, expected one of `pglane`, `pgbouncer`, `both`"), "{refused}");
    }

    #[test]
    fn mistakes_are_reported() {
        let bad = |from: &str, to: &str| Config::parse(&MINIMAL.replace(from, to)).unwrap_err().to_string();
        assert!(bad("127.0.0.1:6432", "localhost").contains("listen"));
        assert!(bad("pool_size = 8", "pool_size = 0").contains("pool_size"));
        assert!(bad("\"transaction\"", "\"statement\"").contains("pool_mode"));
        assert!(bad("pool_size = 8", "pool_sise = 8").contains("pool_sise"));
        assert!(bad("admin_users", "cores = 0\nadmin_users").contains("cores"));
        assert!(bad("admin_users", "query_wait_timeout = 1e300\nadmin_users").contains("query_wait_timeout"));
        assert!(bad("admin_users", "shutdown_timeout = 0\nadmin_users").contains("shutdown_timeout"));
        assert!(bad("admin_users", "query_timeout = -1\nadmin_users").contains("query_timeout"));
        assert!(
            Config::parse(&MINIMAL.replace("admin_users", "query_timeout = 0\nclient_idle_timeout = 30\nadmin_users")).is_ok()
        );
        assert!(bad("password = \"secret\"", "password = \"SCRAM-SHA-256$x\"").contains("users.postgres"));
        // Under md5 a SCRAM secret is fine: that user is checked with SCRAM.
        let md5_with_scram = MINIMAL.replace("pool_mode = \"transaction\"", "auth_type = \"md5\"").replace(
            "\"secret\"",
            "\"SCRAM-SHA-256$4096:c2FsdA==$Zm9vYmFyYmF6Zm9vYmFyYmF6Zm9vYmFyYmF6Zm9vYmE=:Zm9vYmFyYmF6Zm9vYmFyYmF6Zm9vYmFyYmF6Zm9vYmE=\"",
        );
        assert!(Config::parse(&md5_with_scram).is_ok());
    }

    #[test]
    fn auth_hba_file_goes_with_auth_type_hba() {
        let with = |settings: &str| Config::parse(&MINIMAL.replace("admin_users", &format!("{settings}\nadmin_users")));
        assert!(with("auth_type = \"hba\"").unwrap_err().to_string().contains("needs auth_hba_file"));
        assert!(with("auth_hba_file = \"/x\"").unwrap_err().to_string().contains("only with auth_type"));
        let missing = with("auth_type = \"hba\"\nauth_hba_file = \"/nonexistent/hba.conf\"").unwrap_err().to_string();
        assert!(missing.contains("/nonexistent/hba.conf"), "{missing}");
        let dir = std::env::temp_dir().join(format!("pglane-config-hba-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (good, bad) = (dir.join("good.conf"), dir.join("bad.conf"));
        std::fs::write(&good, "host all all 127.0.0.1/32 scram-sha-256\n").unwrap();
        std::fs::write(&bad, "host all all 127.0.0.1/32 scram-sha-256\nhost all all all ident\n").unwrap();
        let c = with(&format!("auth_type = \"hba\"\nauth_hba_file = {good:?}")).unwrap();
        assert_eq!(c.hba.get().map(|h| h.len()), Some(1));
        let e = with(&format!("auth_type = \"hba\"\nauth_hba_file = {bad:?}")).unwrap_err().to_string();
        assert!(e.contains("line 2") && e.contains("ident"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_fallback_database_serves_every_name_not_listed() {
        let c = Config::parse(&MINIMAL.replace("[users.postgres]", "[databases.\"*\"]\nhost = \"10.0.0.9\"\n[users.postgres]"))
            .unwrap();
        assert_eq!(c.max_fallback_databases, 100);
        assert_eq!(c.database("app").map(|d| d.dbname.as_deref()), Some(Some("postgres")));
        assert_eq!(c.database("other").map(|d| &d.host[..]), Some(&["10.0.0.9".to_owned()][..]));
        assert!(c.is_fallback("other") && !c.is_fallback("app"));
        // Without one, an unlisted name is served by nothing.
        let c = Config::parse(MINIMAL).unwrap();
        assert!(c.database("other").is_none() && !c.is_fallback("other"));
        // A fallback alone is a config (PgBouncer's `* = host=...`).
        let only = "listen = \"127.0.0.1:6432\"\nmax_fallback_databases = 3\n[databases.\"*\"]\nport = 5433\n";
        let c = Config::parse(only).unwrap();
        assert_eq!((c.max_fallback_databases, c.database("any").map(|d| d.port.clone())), (3, Some(vec![5433])));
    }

    #[test]
    fn peers_are_numbered_as_in_pgbouncer() {
        let with = |settings: &str| Config::parse(&MINIMAL.replace("admin_users", &format!("{settings}\nadmin_users")));
        let c = with("peer_id = 7").unwrap();
        assert_eq!((c.peer_id, c.peers.len()), (7, 0));
        assert_eq!(with("").unwrap().peer_id, 0, "no peering by default");
        let peered = "[peers.1]\nhost = \"10.0.0.1\"\n[peers.16383]\nhost = \"/run/pglane\"\nport = 7432\n";
        let c = Config::parse(&MINIMAL.replace("[databases.app]", &format!("{peered}[databases.app]"))).unwrap();
        assert_eq!(c.peer_by_id(1).unwrap().address(), ServerAddress::Tcp { host: "10.0.0.1".into(), port: 6432 });
        assert_eq!(c.peer_by_id(16383).unwrap().address(), ServerAddress::Unix("/run/pglane/.s.PGSQL.7432".into()));
        assert_eq!(c.peer_by_id(2), None);
        assert!(with("peer_id = 16384").unwrap_err().to_string().contains("peer_id must be"));
        for bad in ["0", "16384", "one"] {
            let text = MINIMAL.replace("[databases.app]", &format!("[peers.{bad}]\nhost = \"h\"\n[databases.app]"));
            assert!(Config::parse(&text).unwrap_err().to_string().contains("peer ids are numbers"), "{bad}");
        }
    }

    #[test]
    fn only_the_addresses_of_other_peers_are_peers() {
        let group = |me: u16, peers: &str| {
            let text = MINIMAL.replace("admin_users", &format!("peer_id = {me}\nadmin_users"));
            Config::parse(&text.replace("[databases.app]", &format!("{peers}[databases.app]"))).unwrap()
        };
        let ip = |s: &str| Some(s.parse::<std::net::IpAddr>().unwrap());
        let c = group(1, "[peers.1]\nhost = \"10.0.0.1\"\n[peers.2]\nhost = \"10.0.0.2\"\n[peers.3]\nhost = \"::1\"\n");
        let others: Vec<_> = c.other_peers().map(|p| p.address().to_string()).collect();
        assert_eq!(others.len(), 2, "{others:?}");
        assert!(c.is_peer_address(ip("10.0.0.2")) && c.is_peer_address(ip("::1")));
        assert!(!c.is_peer_address(ip("10.0.0.1")), "this instance itself is not another peer");
        assert!(!c.is_peer_address(ip("10.0.0.9")) && !c.is_peer_address(ip("127.0.0.1")));
        assert!(!c.is_peer_address(None), "no peer listed by socket directory");
        let c = group(
            1,
            "[peers.2]\nhost = \"localhost\"\n[peers.3]\nhost = \"db.example.com\"\n[peers.4]\nhost = \"/run/pglane\"\n",
        );
        assert!(c.is_peer_address(ip("127.0.0.1")) && c.is_peer_address(ip("::1")), "localhost is the loopback");
        assert!(c.is_peer_address(None), "a peer on this host's socket");
        assert!(!c.is_peer_address(ip("10.0.0.3")), "host names are not resolved");
        let unpeered = group(0, "[peers.2]\nhost = \"10.0.0.2\"\n");
        assert_eq!(unpeered.other_peers().count(), 0, "without peer_id there is no group");
        assert!(!unpeered.is_peer_address(ip("10.0.0.2")));
    }

    #[test]
    fn connection_limits_of_a_database_or_user_override_the_global_ones() {
        let text = MINIMAL.replace(
            "[databases.app]",
            "max_db_connections = 9\nmax_user_connections = 4\n[users.u]\nmax_user_connections = 2\n\
             [databases.other]\nmax_db_connections = 3\n[databases.app]",
        );
        let c = Config::parse(&text).unwrap();
        assert_eq!((c.max_db_connections("app"), c.max_db_connections("other")), (9, 3));
        assert_eq!((c.max_user_connections("u"), c.max_user_connections("v")), (2, 4));
        let c = Config::parse(MINIMAL).unwrap();
        assert_eq!((c.max_db_connections("app"), c.max_user_connections("u")), (0, 0), "no limit by default");
    }
}
