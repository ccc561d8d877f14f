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

/// Every `[pgbouncer]` setting of PgBouncer 1.25, as its SHOW CONFIG lists them.
pub const PGBOUNCER_SETTINGS: &[&str] = &[
    "admin_users",
    "application_name_add_host",
    "auth_dbname",
    "auth_file",
    "auth_hba_file",
    "auth_ident_file",
    "auth_ldap_options",
    "auth_query",
    "auth_type",
    "auth_user",
    "autodb_idle_timeout",
    "cancel_wait_timeout",
    "client_idle_timeout",
    "client_login_timeout",
    "client_tls13_ciphers",
    "client_tls_ca_file",
    "client_tls_cert_file",
    "client_tls_ciphers",
    "client_tls_dheparams",
    "client_tls_ecdhcurve",
    "client_tls_key_file",
    "client_tls_protocols",
    "client_tls_sslmode",
    "conffile",
    "default_pool_size",
    "disable_pqexec",
    "dns_max_ttl",
    "dns_nxdomain_ttl",
    "dns_zone_check_period",
    "idle_transaction_timeout",
    "ignore_startup_parameters",
    "job_name",
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
    "pkt_buf",
    "pool_mode",
    "query_timeout",
    "query_wait_notify",
    "query_wait_timeout",
    "reserve_pool_size",
    "reserve_pool_timeout",
    "resolv_conf",
    "sbuf_loopcnt",
    "scram_iterations",
    "server_check_delay",
    "server_check_query",
    "server_connect_timeout",
    "server_fast_close",
    "server_idle_timeout",
    "server_lifetime",
    "server_login_retry",
    "server_reset_query",
    "server_reset_query_always",
    "server_round_robin",
    "server_tls13_ciphers",
    "server_tls_ca_file",
    "server_tls_cert_file",
    "server_tls_ciphers",
    "server_tls_key_file",
    "server_tls_protocols",
    "server_tls_sslmode",
    "service_name",
    "so_reuseport",
    "stats_period",
    "stats_users",
    "suspend_timeout",
    "syslog",
    "syslog_facility",
    "syslog_ident",
    "tcp_defer_accept",
    "tcp_keepalive",
    "tcp_keepcnt",
    "tcp_keepidle",
    "tcp_keepintvl",
    "tcp_socket_buffer",
    "tcp_user_timeout",
    "track_extra_parameters",
    "transaction_timeout",
    "unix_socket_dir",
    "unix_socket_group",
    "unix_socket_mode",
    "user",
    "verbose",
];

/// The `[pgbouncer]` settings the parent module carries over with
/// PgBouncer's meaning (see its table); every other setting of
/// [`PGBOUNCER_SETTINGS`] has a reason in [`pgbouncer_setting`].
/// (`auth_type` and `disable_pqexec` refuse the values pglane cannot honour.)
pub const HONOURED: &[&str] = &[
    "admin_users",
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
        "reserve_pool_size" | "reserve_pool_timeout" => "pglane has no reserve pool",
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
        "server_round_robin" | "application_name_add_host"
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
        "reserve_pool" | "reserve_pool_size" => "pglane has no reserve pool",
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
        let settings = PGBOUNCER_SETTINGS.iter().copied();
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
        for key in PGBOUNCER_SETTINGS {
            assert_ne!(HONOURED.contains(key), pgbouncer_setting(key).is_some(), "{key}");
        }
        for key in HONOURED {
            assert!(PGBOUNCER_SETTINGS.contains(key), "{key}");
        }
    }

    #[test]
    fn the_catalogues_are_sorted_and_without_repeats() {
        for list in [PGBOUNCER_SETTINGS, HONOURED, DATABASE_PARAMETERS, USER_PARAMETERS] {
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
            ];
            let mapped = mapped.contains(key) || ["pool_mode", "pool_size", "port", "target_session_attrs", "user"].contains(key);
            assert!(mapped || database_parameter(key).is_some(), "{key}");
        }
        for key in USER_PARAMETERS {
            assert!(["pool_mode", "max_user_connections"].contains(key) || user_parameter(key).is_some(), "{key}");
        }
    }
}
