//! Why pglane ignores the PgBouncer settings it does not support, and which
//! names are PgBouncer's at all.
//!
//! This module owns the catalogue of `[pgbouncer]` settings and of
//! `[databases]` / `[users]` parameters that pglane ignores, each with the
//! reason a user reads in the warning, and the list of every `[pgbouncer]`
//! setting PgBouncer 1.25 has ([`PGBOUNCER_SETTINGS`]): a name that is none of
//! them is a typo, refused as PgBouncer refuses it. It decides nothing else:
//! settings pglane maps, and settings too dangerous to ignore (which are
//! errors), are handled by the parent module before anything reaches this
//! one. When pglane learns a setting, move it from here to the parent's
//! mapping.

const LOGGING: &str = "pglane logs to stderr; set the level with RUST_LOG";
const UNIX_GROUP: &str = "pglane does not change the unix socket's group; start it as a member of the right one";
const NO_TLS: &str = "pglane uses rustls' default protocol versions, cipher suites and curves";
const NOT_YET: &str = "not supported by pglane yet";
const NET_TUNING: &str = "pglane's socket settings are not configurable";
const CLIENT_LIMITS: &str = "max_client_conn is pglane's only limit on client connections";
const STARTUP_PARAMETERS: &str = "pglane does not set startup parameters on server connections; the server's default applies";
const RESOLVER: &str = "host names are resolved by the system resolver";

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
    "listen_port",
    "logfile",
    "max_client_conn",
    "max_db_connections",
    "max_packet_size",
    "max_prepared_statements",
    "max_user_connections",
    "min_pool_size",
    "peer_id",
    "pidfile",
    "pool_mode",
    "query_timeout",
    "query_wait_timeout",
    "reserve_pool_size",
    "reserve_pool_timeout",
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
    "stats_users",
    "unix_socket_dir",
    "unix_socket_mode",
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

/// Why a `[pgbouncer]` setting is ignored; None for a name that is no
/// PgBouncer setting, or one pglane honours ([`HONOURED`]).
pub fn pgbouncer_setting(key: &str) -> Option<&'static str> {
    Some(match key {
        "syslog" | "syslog_ident" | "syslog_facility" | "log_connections" | "log_disconnections"
        | "log_pooler_errors" | "log_stats" | "stats_period" | "verbose" => LOGGING,
        "user" => "pglane does not switch users; start it as the user it should run as",
        "unix_socket_group" => UNIX_GROUP,
        "max_db_client_connections" | "max_user_client_connections" => CLIENT_LIMITS,
        "scram_iterations" => "pglane derives SCRAM secrets for plaintext passwords with 4096 iterations",
        "auth_ident_file" => "pglane does not support ident maps",
        "auth_ldap_options" => "pglane does not support LDAP",
        "conffile" | "service_name" | "job_name" => "has no meaning for pglane",
        "autodb_idle_timeout" => {
            "pglane drops the pools of a database of the * entry once no client holds them and their server \
             connections have closed (server_idle_timeout)"
        }
        "dns_max_ttl" | "dns_nxdomain_ttl" | "dns_zone_check_period" | "resolv_conf" => RESOLVER,
        "client_tls_protocols" | "client_tls_ciphers" | "client_tls13_ciphers" | "client_tls_ecdhcurve"
        | "client_tls_dheparams" | "server_tls_protocols" | "server_tls_ciphers" | "server_tls13_ciphers" => NO_TLS,
        "pkt_buf" | "sbuf_loopcnt" | "listen_backlog" | "tcp_defer_accept" | "tcp_socket_buffer" | "tcp_keepalive"
        | "tcp_keepcnt" | "tcp_keepidle" | "tcp_keepintvl" | "tcp_user_timeout" => NET_TUNING,
        "suspend_timeout" => "pglane has no online restart",
        "ignore_startup_parameters" | "track_extra_parameters" => {
            "pglane carries every startup parameter (and the -c switches of options) to each server connection a client gets: none needs ignoring or tracking"
        }
        "server_round_robin"
        | "server_check_delay" | "server_check_query" | "server_fast_close" | "server_login_retry"
        | "pool_idle_timeout" | "query_wait_notify" | "login_notify_message" | "cancel_wait_timeout"
        | "transaction_timeout" => NOT_YET,
        _ => return None,
    })
}

/// Why a parameter of a `[databases]` connection string is ignored; None
/// for a name that is no PgBouncer connection parameter.
pub fn database_parameter(key: &str) -> Option<&'static str> {
    Some(match key {
        "client_encoding" | "datestyle" | "timezone" | "application_name" => STARTUP_PARAMETERS,
        "max_db_client_connections" => CLIENT_LIMITS,
        "query_wait_timeout" => "pglane has only the global query_wait_timeout",
        "connect_query" | "server_lifetime" => NOT_YET,
        _ => return None,
    })
}

/// Why a parameter of a `[users]` entry is ignored; None for a name that
/// is no PgBouncer user parameter.
pub fn user_parameter(key: &str) -> Option<&'static str> {
    Some(match key {
        "pool_size" => "pglane sets pool_size per database only",
        "reserve_pool_size" => "pglane has no reserve pool",
        "max_user_client_connections" => CLIENT_LIMITS,
        "query_wait_timeout" => "pglane has only the global query_wait_timeout",
        "query_timeout" | "idle_transaction_timeout" | "transaction_timeout" | "client_idle_timeout" => NOT_YET,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_settings_have_specific_reasons() {
        assert_eq!(pgbouncer_setting("syslog"), Some(LOGGING));
        assert_eq!(pgbouncer_setting("server_tls_ciphers"), Some(NO_TLS));
        assert_eq!(pgbouncer_setting("server_check_delay"), Some(NOT_YET));
        assert_eq!(database_parameter("client_encoding"), Some(STARTUP_PARAMETERS));
        assert_eq!(user_parameter("reserve_pool_size"), Some("pglane has no reserve pool"));
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

    /// Each PgBouncer setting is honoured or has the reason it is ignored,
    /// never both, never neither; and each reason is for a PgBouncer setting.
    #[test]
    fn every_pgbouncer_setting_is_honoured_or_ignored_with_a_reason() {
        for key in pgbouncer_setting_names() {
            assert_ne!(HONOURED.contains(&key), pgbouncer_setting(key).is_some(), "{key}");
        }
        for key in HONOURED {
            assert!(pgbouncer_setting_names().any(|name| name == *key), "{key}");
        }
    }

    #[test]
    fn the_catalogues_are_sorted_and_without_repeats() {
        let names: Vec<&str> = pgbouncer_setting_names().collect();
        for list in [&names[..], HONOURED, DATABASE_PARAMETERS, USER_PARAMETERS] {
            assert!(list.windows(2).all(|w| w[0] < w[1]), "{list:?}");
        }
    }

    #[test]
    fn every_parameter_with_a_reason_is_listed() {
        for key in DATABASE_PARAMETERS {
            let mapped = [
                "auth_dbname",
                "auth_query",
                "auth_user",
                "dbname",
                "host",
                "load_balance_hosts",
                "password",
                "max_db_connections",
                "min_pool_size",
                "reserve_pool",
                "reserve_pool_size",
            ];
            let mapped = mapped.contains(key) || ["pool_mode", "pool_size", "port", "target_session_attrs", "user"].contains(key);
            assert!(mapped || database_parameter(key).is_some(), "{key}");
        }
        for key in USER_PARAMETERS {
            assert!(["pool_mode", "max_user_connections"].contains(key) || user_parameter(key).is_some(), "{key}");
        }
    }
}
