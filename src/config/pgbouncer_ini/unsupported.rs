//! What pglane does with the PgBouncer settings it does not carry over, and
//! which names are PgBouncer's at all.
//!
//! This module owns the catalogue: the list of every `[pgbouncer]` setting
//! PgBouncer 1.25 has ([`PGBOUNCER_SETTINGS`]; a name that is none of them
//! is a typo, refused as PgBouncer refuses it), the ones the parent module
//! honours ([`HONOURED`]), and for each other one its [`Treatment`]: accepted
//! because pglane already behaves so (or the setting means nothing to it),
//! or accepted only at the values pglane behaves as and refused at start
//! otherwise, with the reason and what to do instead. Likewise for the
//! parameters of `[databases]` and `[users]` entries. No setting is ignored. The migration guide's table of settings is generated
//! from this catalogue (tests/docs.rs). It decides nothing else: when pglane
//! learns a setting, move it from here to the parent's mapping.

/// Every `[pgbouncer]` setting of PgBouncer 1.25, in the order its SHOW CONFIG
/// lists them, with its default and whether a reload may change it.
pub const PGBOUNCER_SETTINGS: &[PgBouncerSetting] = &[
    PgBouncerSetting { name: "admin_users", default: "", reloadable: true },
    PgBouncerSetting { name: "application_name_add_host", default: "0", reloadable: true },
    PgBouncerSetting { name: "auth_dbname", default: "", reloadable: true },
    PgBouncerSetting { name: "auth_file", default: "", reloadable: true },
    PgBouncerSetting { name: "auth_hba_file", default: "", reloadable: true },
    PgBouncerSetting { name: "auth_ident_file", default: "", reloadable: true },
    PgBouncerSetting { name: "auth_ldap_options", default: "", reloadable: true },
    PgBouncerSetting { name: "auth_query", default: "SELECT rolname, CASE WHEN rolvaliduntil < now() THEN NULL ELSE rolpassword END FROM pg_authid WHERE rolname=$1 AND rolcanlogin", reloadable: true },
    PgBouncerSetting { name: "auth_type", default: "md5", reloadable: true },
    PgBouncerSetting { name: "auth_user", default: "", reloadable: true },
    PgBouncerSetting { name: "autodb_idle_timeout", default: "3600", reloadable: true },
    PgBouncerSetting { name: "cancel_wait_timeout", default: "10", reloadable: true },
    PgBouncerSetting { name: "client_idle_timeout", default: "0", reloadable: true },
    PgBouncerSetting { name: "client_login_timeout", default: "60", reloadable: true },
    PgBouncerSetting { name: "client_tls13_ciphers", default: "", reloadable: true },
    PgBouncerSetting { name: "client_tls_ca_file", default: "", reloadable: true },
    PgBouncerSetting { name: "client_tls_cert_file", default: "", reloadable: true },
    PgBouncerSetting { name: "client_tls_ciphers", default: "default", reloadable: true },
    PgBouncerSetting { name: "client_tls_dheparams", default: "auto", reloadable: true },
    PgBouncerSetting { name: "client_tls_ecdhcurve", default: "auto", reloadable: true },
    PgBouncerSetting { name: "client_tls_key_file", default: "", reloadable: true },
    PgBouncerSetting { name: "client_tls_protocols", default: "secure", reloadable: true },
    PgBouncerSetting { name: "client_tls_sslmode", default: "disable", reloadable: true },
    PgBouncerSetting { name: "conffile", default: "", reloadable: true },
    PgBouncerSetting { name: "default_pool_size", default: "20", reloadable: true },
    PgBouncerSetting { name: "disable_pqexec", default: "0", reloadable: false },
    PgBouncerSetting { name: "dns_max_ttl", default: "15", reloadable: true },
    PgBouncerSetting { name: "dns_nxdomain_ttl", default: "15", reloadable: true },
    PgBouncerSetting { name: "dns_zone_check_period", default: "0", reloadable: true },
    PgBouncerSetting { name: "idle_transaction_timeout", default: "0", reloadable: true },
    PgBouncerSetting { name: "ignore_startup_parameters", default: "", reloadable: true },
    PgBouncerSetting { name: "job_name", default: "pgbouncer", reloadable: false },
    PgBouncerSetting { name: "listen_addr", default: "", reloadable: false },
    PgBouncerSetting { name: "listen_backlog", default: "128", reloadable: false },
    PgBouncerSetting { name: "listen_port", default: "6432", reloadable: false },
    PgBouncerSetting { name: "log_connections", default: "1", reloadable: true },
    PgBouncerSetting { name: "log_disconnections", default: "1", reloadable: true },
    PgBouncerSetting { name: "log_pooler_errors", default: "1", reloadable: true },
    PgBouncerSetting { name: "log_stats", default: "1", reloadable: true },
    PgBouncerSetting { name: "logfile", default: "", reloadable: true },
    PgBouncerSetting { name: "max_client_conn", default: "100", reloadable: true },
    PgBouncerSetting { name: "max_db_client_connections", default: "0", reloadable: true },
    PgBouncerSetting { name: "max_db_connections", default: "0", reloadable: true },
    PgBouncerSetting { name: "max_packet_size", default: "2147483647", reloadable: true },
    PgBouncerSetting { name: "max_prepared_statements", default: "200", reloadable: true },
    PgBouncerSetting { name: "max_user_client_connections", default: "0", reloadable: true },
    PgBouncerSetting { name: "max_user_connections", default: "0", reloadable: true },
    PgBouncerSetting { name: "min_pool_size", default: "0", reloadable: true },
    PgBouncerSetting { name: "peer_id", default: "0", reloadable: true },
    PgBouncerSetting { name: "pidfile", default: "", reloadable: false },
    PgBouncerSetting { name: "pkt_buf", default: "4096", reloadable: false },
    PgBouncerSetting { name: "pool_mode", default: "session", reloadable: true },
    PgBouncerSetting { name: "query_timeout", default: "0", reloadable: true },
    PgBouncerSetting { name: "query_wait_notify", default: "5", reloadable: true },
    PgBouncerSetting { name: "query_wait_timeout", default: "120", reloadable: true },
    PgBouncerSetting { name: "reserve_pool_size", default: "0", reloadable: true },
    PgBouncerSetting { name: "reserve_pool_timeout", default: "5", reloadable: true },
    PgBouncerSetting { name: "resolv_conf", default: "", reloadable: false },
    PgBouncerSetting { name: "sbuf_loopcnt", default: "5", reloadable: true },
    PgBouncerSetting { name: "scram_iterations", default: "4096", reloadable: true },
    PgBouncerSetting { name: "server_check_delay", default: "30", reloadable: true },
    PgBouncerSetting { name: "server_check_query", default: "", reloadable: true },
    PgBouncerSetting { name: "server_connect_timeout", default: "15", reloadable: true },
    PgBouncerSetting { name: "server_fast_close", default: "0", reloadable: true },
    PgBouncerSetting { name: "server_idle_timeout", default: "600", reloadable: true },
    PgBouncerSetting { name: "server_lifetime", default: "3600", reloadable: true },
    PgBouncerSetting { name: "server_login_retry", default: "15", reloadable: true },
    PgBouncerSetting { name: "server_reset_query", default: "DISCARD ALL", reloadable: true },
    PgBouncerSetting { name: "server_reset_query_always", default: "0", reloadable: true },
    PgBouncerSetting { name: "server_round_robin", default: "0", reloadable: true },
    PgBouncerSetting { name: "server_tls13_ciphers", default: "", reloadable: true },
    PgBouncerSetting { name: "server_tls_ca_file", default: "", reloadable: true },
    PgBouncerSetting { name: "server_tls_cert_file", default: "", reloadable: true },
    PgBouncerSetting { name: "server_tls_ciphers", default: "default", reloadable: true },
    PgBouncerSetting { name: "server_tls_key_file", default: "", reloadable: true },
    PgBouncerSetting { name: "server_tls_protocols", default: "secure", reloadable: true },
    PgBouncerSetting { name: "server_tls_sslmode", default: "prefer", reloadable: true },
    PgBouncerSetting { name: "service_name", default: "", reloadable: false },
    PgBouncerSetting { name: "so_reuseport", default: "0", reloadable: false },
    PgBouncerSetting { name: "stats_period", default: "60", reloadable: true },
    PgBouncerSetting { name: "stats_users", default: "", reloadable: true },
    PgBouncerSetting { name: "suspend_timeout", default: "10", reloadable: true },
    PgBouncerSetting { name: "syslog", default: "0", reloadable: true },
    PgBouncerSetting { name: "syslog_facility", default: "daemon", reloadable: true },
    PgBouncerSetting { name: "syslog_ident", default: "pgbouncer", reloadable: true },
    PgBouncerSetting { name: "tcp_defer_accept", default: "1", reloadable: true },
    PgBouncerSetting { name: "tcp_keepalive", default: "1", reloadable: true },
    PgBouncerSetting { name: "tcp_keepcnt", default: "0", reloadable: true },
    PgBouncerSetting { name: "tcp_keepidle", default: "0", reloadable: true },
    PgBouncerSetting { name: "tcp_keepintvl", default: "0", reloadable: true },
    PgBouncerSetting { name: "tcp_socket_buffer", default: "0", reloadable: true },
    PgBouncerSetting { name: "tcp_user_timeout", default: "0", reloadable: true },
    PgBouncerSetting { name: "track_extra_parameters", default: "IntervalStyle", reloadable: false },
    PgBouncerSetting { name: "transaction_timeout", default: "0", reloadable: true },
    PgBouncerSetting { name: "unix_socket_dir", default: "/tmp", reloadable: false },
    PgBouncerSetting { name: "unix_socket_group", default: "", reloadable: false },
    PgBouncerSetting { name: "unix_socket_mode", default: "0777", reloadable: false },
    PgBouncerSetting { name: "user", default: "", reloadable: false },
    PgBouncerSetting { name: "verbose", default: "0", reloadable: true },
];

/// One of PgBouncer's `[pgbouncer]` settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PgBouncerSetting {
    pub name: &'static str,
    /// Its default, as PgBouncer's SHOW CONFIG prints it ("" for none).
    pub default: &'static str,
    pub reloadable: bool,
}

/// The names of [`PGBOUNCER_SETTINGS`].
pub fn pgbouncer_setting_names() -> impl Iterator<Item = &'static str> + Clone {
    PGBOUNCER_SETTINGS.iter().map(|setting| setting.name)
}

/// The `[pgbouncer]` settings the parent module carries over with
/// PgBouncer's meaning (see its table); every other setting of
/// [`PGBOUNCER_SETTINGS`] has a reason in [`pgbouncer_setting`].
/// (`auth_type` and `disable_pqexec` refuse the values pglane cannot honour.)
pub const HONOURED: &[&str] = &[
    "admin_users",
    "application_name_add_host",
    "auth_dbname",
    "auth_file",
    "auth_hba_file",
    "auth_query",
    "auth_type",
    "auth_user",
    "client_idle_timeout",
    "client_login_timeout",
    "client_tls_ca_file",
    "client_tls_cert_file",
    "client_tls_key_file",
    "client_tls_sslmode",
    "default_pool_size",
    "disable_pqexec",
    "idle_transaction_timeout",
    "listen_addr",
    "listen_backlog",
    "listen_port",
    "log_connections",
    "log_disconnections",
    "log_pooler_errors",
    "log_stats",
    "logfile",
    "max_client_conn",
    "max_db_client_connections",
    "max_db_connections",
    "max_packet_size",
    "max_prepared_statements",
    "max_user_client_connections",
    "max_user_connections",
    "min_pool_size",
    "peer_id",
    "pidfile",
    "pool_mode",
    "query_timeout",
    "query_wait_notify",
    "query_wait_timeout",
    "reserve_pool_size",
    "reserve_pool_timeout",
    "scram_iterations",
    "server_connect_timeout",
    "server_idle_timeout",
    "server_lifetime",
    "server_reset_query",
    "server_reset_query_always",
    "server_tls_ca_file",
    "server_tls_cert_file",
    "server_tls_key_file",
    "server_tls_sslmode",
    "so_reuseport",
    "stats_period",
    "stats_users",
    "tcp_defer_accept",
    "tcp_keepalive",
    "tcp_keepcnt",
    "tcp_keepidle",
    "tcp_keepintvl",
    "tcp_socket_buffer",
    "tcp_user_timeout",
    "unix_socket_dir",
    "unix_socket_mode",
    "verbose",
];

/// Every parameter of a PgBouncer `[databases]` connection string (pglane's
/// `target_session_attrs` among them).
pub const DATABASE_PARAMETERS: &[&str] = &[
    "application_name",
    "auth_dbname",
    "auth_query",
    "auth_user",
    "client_encoding",
    "connect_query",
    "datestyle",
    "dbname",
    "host",
    "load_balance_hosts",
    "max_db_client_connections",
    "max_db_connections",
    "min_pool_size",
    "password",
    "pool_mode",
    "pool_size",
    "port",
    "query_wait_timeout",
    "reserve_pool",
    "reserve_pool_size",
    "server_lifetime",
    "target_session_attrs",
    "timezone",
    "user",
];

/// Every parameter of a PgBouncer `[users]` entry.
pub const USER_PARAMETERS: &[&str] = &[
    "client_idle_timeout",
    "idle_transaction_timeout",
    "max_user_client_connections",
    "max_user_connections",
    "pool_mode",
    "pool_size",
    "query_timeout",
    "query_wait_timeout",
    "reserve_pool_size",
    "transaction_timeout",
];

/// The known name closest to `key`, if one is a likely typo of it (at most
/// two edits away, and fewer than half its length): for the error that
/// refuses an unknown name.
pub fn nearest<'a>(key: &str, known: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let limit = 2.min(key.chars().count().saturating_sub(1) / 2);
    known.into_iter().map(|name| (edit_distance(key, name), name)).filter(|(d, _)| *d <= limit).min().map(|(_, name)| name)
}

/// Levenshtein distance, with a swap of two neighbours counting as one edit.
fn edit_distance(a: &str, b: &str) -> usize {
    let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    let mut rows = vec![(0..=b.len()).collect::<Vec<usize>>(); a.len() + 1];
    for (i, row) in rows.iter_mut().enumerate() {
        row[0] = i;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let substitution = rows[i - 1][j - 1] + usize::from(a[i - 1] != b[j - 1]);
            let mut best = substitution.min(rows[i - 1][j] + 1).min(rows[i][j - 1] + 1);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                best = best.min(rows[i - 2][j - 2] + 1);
            }
            rows[i][j] = best;
        }
    }
    rows[a.len()][b.len()]
}

/// What pglane does with a PgBouncer setting it does not carry over into
/// its own config.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Treatment {
    /// Any value is accepted without a word: pglane already behaves as the
    /// setting asks, or the setting has no meaning for it; the reason says
    /// which.
    Accepted(&'static str),
    /// Accepted at these values (PgBouncer's default among them); any other
    /// value stops pglane at start with the reason, which says what to do
    /// instead.
    AcceptedAt { values: &'static [&'static str], reason: &'static str },
}

impl Treatment {
    /// Whether `value` is one pglane accepts. Values compare without case
    /// and blanks, and numbers by value (`00` is `0`).
    pub fn accepts(&self, value: &str) -> bool {
        let normal = |text: &str| -> String {
            let text: String = text.chars().filter(|c| !c.is_whitespace()).collect::<String>().to_ascii_lowercase();
            text.parse::<i64>().map(|n| n.to_string()).unwrap_or(text)
        };
        match self {
            Treatment::Accepted(_) => true,
            Treatment::AcceptedAt { values, .. } => values.iter().any(|accepted| normal(accepted) == normal(value)),
        }
    }
}

const SYSTEM_RESOLVER: &str = "pglane asks the system resolver for a server's address each time it opens a connection, \
                               and keeps no DNS cache of its own";
const TLS_SUITES: &str = "pglane offers rustls' cipher suites (TLS 1.3 and TLS 1.2 ECDHE with AES-GCM or \
                          ChaCha20-Poly1305) and no others; remove the setting";
const TLS_PROTOCOLS: &str = "pglane speaks TLS 1.2 and 1.3 (rustls) and no other version; remove the setting, or write secure";
const TLS_CURVES: &str = "pglane offers rustls' key exchange groups (X25519, P-256, P-384); remove the setting";
const TLS_DHE: &str = "pglane offers no finite-field DHE (rustls has none; ECDHE is used); remove the setting";
const CLIENT_STARTUP: &str = "pglane carries every startup parameter a client sends (and the -c switches of options) \
                              to each server connection it gets: none needs ignoring or tracking";

/// What pglane does with a `[pgbouncer]` setting of PgBouncer's that it
/// does not honour itself; None for a name that is no PgBouncer setting, or
/// one pglane honours ([`HONOURED`]).
pub fn pgbouncer_setting(key: &str) -> Option<Treatment> {
    use Treatment::{Accepted, AcceptedAt};
    Some(match key {
        "auth_ident_file" => AcceptedAt {
            values: &[""],
            reason: "pglane does not support ident maps (nor the peer and cert methods that use them); remove the setting",
        },
        "auth_ldap_options" => AcceptedAt { values: &[""], reason: "pglane does not support LDAP; remove the setting" },
        "autodb_idle_timeout" => Accepted(
            "pglane drops the pools of a database of the * entry once no client holds them and their server \
             connections have closed (server_idle_timeout)",
        ),
        "cancel_wait_timeout" => Accepted(
            "pglane never queues a cancel request: it opens a connection to the server for each one at once \
             (within server_connect_timeout)",
        ),
        "client_tls_ciphers" | "server_tls_ciphers" => {
            AcceptedAt { values: &["default", "secure", "fast", "normal", ""], reason: TLS_SUITES }
        }
        "client_tls13_ciphers" | "server_tls13_ciphers" => AcceptedAt { values: &[""], reason: TLS_SUITES },
        "client_tls_protocols" | "server_tls_protocols" => {
            AcceptedAt { values: &["secure", "default", "", "tlsv1.2,tlsv1.3", "tlsv1.3,tlsv1.2"], reason: TLS_PROTOCOLS }
        }
        "client_tls_ecdhcurve" => AcceptedAt { values: &["auto", ""], reason: TLS_CURVES },
        "client_tls_dheparams" => AcceptedAt { values: &["auto", "none", ""], reason: TLS_DHE },
        "conffile" => Accepted("the path of the file itself, which pglane knows from its command line"),
        "job_name" | "service_name" => Accepted("names the Windows service; no meaning on Linux"),
        "dns_max_ttl" | "dns_nxdomain_ttl" | "dns_zone_check_period" => Accepted(SYSTEM_RESOLVER),
        "resolv_conf" => AcceptedAt {
            values: &[""],
            reason: "pglane resolves host names with the system resolver (/etc/resolv.conf); remove the setting",
        },
        "ignore_startup_parameters" | "track_extra_parameters" => Accepted(CLIENT_STARTUP),
        "pkt_buf" | "sbuf_loopcnt" => {
            Accepted("pglane sizes its buffers itself (relay_buffer_size) and lets no client starve the others of a shard")
        }
        "suspend_timeout" => Accepted("pglane refuses SUSPEND (it has no online restart), so there is no suspend to time out"),
        "syslog" => AcceptedAt {
            values: &["0"],
            reason: "pglane logs to stderr (and logfile), not to syslog; run it under systemd, whose journal takes \
                     stderr, or set logfile",
        },
        "syslog_ident" | "syslog_facility" => Accepted("only used with syslog = 1, which pglane refuses"),
        "user" => AcceptedAt {
            values: &[""],
            reason: "pglane does not switch users (the user it already runs as is accepted); start it as the user \
                     it should run as (User= in its systemd unit)",
        },
        "unix_socket_group" => AcceptedAt {
            values: &[""],
            reason: "pglane does not change the unix socket's group; start it with that group (Group= in its systemd unit)",
        },
        "server_round_robin" => AcceptedAt {
            values: &["0"],
            reason: "pglane reuses the server connection that came back last (PgBouncer's 0), to keep the others idle \
                     long enough to close; remove the setting",
        },
        "server_check_delay" => Accepted(
            "pglane checks that an idle server connection's socket is still open, without a round trip, every time \
             before it lends it",
        ),
        "server_check_query" => AcceptedAt {
            values: &["", "select 1", "select 1;"],
            reason: "pglane checks an idle server connection's socket, and runs no query to check it; remove the setting",
        },
        "server_fast_close" => AcceptedAt {
            values: &["0"],
            reason: "pglane closes a session-mode server connection when its client leaves, not earlier; remove the setting",
        },
        "server_login_retry" => Accepted(
            "pglane retries a failed server connection every quarter second while clients wait, for \
             server_retry_timeout (a pglane setting); a wrong password or a missing database fails at once",
        ),
        "transaction_timeout" => AcceptedAt {
            values: &["0"],
            reason: "not supported by pglane yet; use PostgreSQL's own transaction_timeout (PostgreSQL 17), or \
                     idle_transaction_timeout",
        },
        _ => return None,
    })
}

/// Why a parameter of a `[databases]` connection string stops pglane; None
/// for a name that is no PgBouncer connection parameter, or one pglane
/// honours ([`HONOURED_DATABASE_PARAMETERS`]).
pub fn database_parameter(key: &str) -> Option<&'static str> {
    Some(match key {
        "query_wait_timeout" => "pglane has only the global query_wait_timeout; set that instead",
        "connect_query" => "pglane runs no query on a new server connection; use ALTER DATABASE ... SET or ALTER ROLE ... SET",
        "server_lifetime" => "pglane has only the global server_lifetime; set that instead",
        _ => return None,
    })
}

/// Why a parameter of a `[users]` entry stops pglane; None for a name that
/// is no PgBouncer user parameter, or one pglane honours
/// ([`HONOURED_USER_PARAMETERS`]).
pub fn user_parameter(key: &str) -> Option<&'static str> {
    Some(match key {
        "pool_size" => "pglane sets pool_size per database only; set it in [databases]",
        "reserve_pool_size" => "pglane sets reserve_pool_size globally or per database only; set it there",
        "query_wait_timeout" | "query_timeout" | "idle_transaction_timeout" | "client_idle_timeout" => {
            "pglane has only the global setting; set that instead"
        }
        "transaction_timeout" => "not supported by pglane yet; use PostgreSQL's own transaction_timeout (PostgreSQL 17)",
        _ => return None,
    })
}

/// The `[databases]` connection parameters the parent module carries over.
pub const HONOURED_DATABASE_PARAMETERS: &[&str] = &[
    "application_name",
    "auth_dbname",
    "auth_query",
    "auth_user",
    "client_encoding",
    "datestyle",
    "dbname",
    "host",
    "load_balance_hosts",
    "max_db_client_connections",
    "max_db_connections",
    "min_pool_size",
    "password",
    "pool_mode",
    "pool_size",
    "port",
    "reserve_pool",
    "reserve_pool_size",
    "target_session_attrs",
    "timezone",
    "user",
];

/// The `[users]` parameters the parent module carries over.
pub const HONOURED_USER_PARAMETERS: &[&str] = &["max_user_client_connections", "max_user_connections", "pool_mode"];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_setting_at_pgbouncers_default_is_accepted_and_another_value_refused() {
        let syslog = pgbouncer_setting("syslog").unwrap();
        assert!(syslog.accepts("0") && syslog.accepts(" 00 "));
        assert!(!syslog.accepts("1"));
        let protocols = pgbouncer_setting("client_tls_protocols").unwrap();
        assert!(protocols.accepts("secure") && protocols.accepts("TLSv1.3, TLSv1.2"));
        assert!(!protocols.accepts("tlsv1.1,tlsv1.2") && !protocols.accepts("all"));
        assert!(pgbouncer_setting("pkt_buf").unwrap().accepts("8192"), "accepted whatever its value");
        assert!(!pgbouncer_setting("user").unwrap().accepts("postgres"));
        assert!(pgbouncer_setting("user").unwrap().accepts(""));
        assert!(database_parameter("connect_query").is_some());
        assert!(user_parameter("reserve_pool_size").is_some());
    }

    #[test]
    fn unknown_ones_are_none() {
        assert_eq!(pgbouncer_setting("lisen_port"), None);
        assert_eq!(database_parameter("hots"), None);
        assert_eq!(user_parameter("pool_mod"), None);
    }

    #[test]
    fn a_typo_finds_the_setting_it_misspells() {
        let settings = pgbouncer_setting_names();
        assert_eq!(nearest("defualt_pool_size", settings.clone()), Some("default_pool_size"));
        assert_eq!(nearest("listen_prot", settings.clone()), Some("listen_port"));
        assert_eq!(nearest("max_client_con", settings.clone()), Some("max_client_conn"));
        assert_eq!(nearest("pool_mod", settings.clone()), Some("pool_mode"));
        assert_eq!(nearest("something_else_entirely", settings.clone()), None);
        assert_eq!(nearest("xyz", settings), None, "short names need a closer match");
        assert_eq!(edit_distance("abc", "acb"), 1);
        assert_eq!(edit_distance("", "ab"), 2);
    }

    /// Each PgBouncer setting is honoured or has a treatment, never both,
    /// never neither; each value a treatment accepts includes PgBouncer's
    /// default; and each honoured name is PgBouncer's.
    #[test]
    fn every_pgbouncer_setting_is_honoured_accepted_or_refused() {
        for setting in PGBOUNCER_SETTINGS {
            let key = setting.name;
            let treatment = pgbouncer_setting(key);
            assert_ne!(HONOURED.contains(&key), treatment.is_some(), "{key}");
            if let Some(treatment) = treatment {
                assert!(treatment.accepts(setting.default), "{key}: PgBouncer's default {:?} is refused", setting.default);
            }
        }
        for key in HONOURED {
            assert!(pgbouncer_setting_names().any(|name| name == *key), "{key}");
        }
    }

    #[test]
    fn the_catalogues_are_sorted_and_without_repeats() {
        let names: Vec<&str> = pgbouncer_setting_names().collect();
        for list in
            [&names[..], HONOURED, DATABASE_PARAMETERS, USER_PARAMETERS, HONOURED_DATABASE_PARAMETERS, HONOURED_USER_PARAMETERS]
        {
            assert!(list.windows(2).all(|w| w[0] < w[1]), "{list:?}");
        }
    }

    #[test]
    fn every_parameter_is_honoured_or_refused_with_a_reason() {
        for key in DATABASE_PARAMETERS {
            assert_ne!(HONOURED_DATABASE_PARAMETERS.contains(key), database_parameter(key).is_some(), "{key}");
        }
        for key in USER_PARAMETERS {
            assert_ne!(HONOURED_USER_PARAMETERS.contains(key), user_parameter(key).is_some(), "{key}");
        }
    }
}
