//! Why pglane ignores the PgBouncer settings it does not support.
//!
//! This module owns the catalogue of `[pgbouncer]` settings and of
//! `[databases]` / `[users]` parameters that pglane ignores, each with the
//! reason a user reads in the warning. It decides nothing else: settings pglane
//! maps, and settings too dangerous to ignore (which are errors), are handled
//! by the parent module before anything reaches this one. When pglane learns a
//! setting, move it from here to the parent's mapping.

const LOGGING: &str = "pglane logs to stderr; set the level with RUST_LOG";
const UNIX_GROUP: &str = "pglane does not change the unix socket's group; start it as a member of the right one";
const NO_TLS: &str = "pglane uses rustls' default protocol versions, cipher suites and curves";
const NOT_YET: &str = "not supported by pglane yet";
const NET_TUNING: &str = "pglane's socket settings are not configurable";
const POOL_LIMITS: &str = "pool_size per database and user is pglane's only limit on server connections";
const CLIENT_LIMITS: &str = "max_client_conn is pglane's only limit on client connections";
const STARTUP_PARAMETERS: &str = "pglane does not set startup parameters on server connections; the server's default applies";
const RESOLVER: &str = "host names are resolved by the system resolver";

/// Why a `[pgbouncer]` setting is ignored.
pub fn pgbouncer_setting(key: &str) -> &'static str {
    match key {
        "logfile" | "syslog" | "syslog_ident" | "syslog_facility" | "log_connections" | "log_disconnections"
        | "log_pooler_errors" | "log_stats" | "stats_period" | "verbose" => LOGGING,
        "pidfile" => "pglane does not daemonize; run it under a service manager",
        "user" => "pglane does not switch users; start it as the user it should run as",
        "unix_socket_group" => UNIX_GROUP,
        "min_pool_size" => "pglane opens server connections on demand only",
        "reserve_pool_size" | "reserve_pool_timeout" => "pglane has no reserve pool",
        "max_db_connections" | "max_user_connections" => POOL_LIMITS,
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
        _ => "not a PgBouncer setting pglane knows of",
    }
}

/// Why a parameter of a `[databases]` connection string is ignored.
pub fn database_parameter(key: &str) -> &'static str {
    match key {
        "client_encoding" | "datestyle" | "timezone" | "application_name" => STARTUP_PARAMETERS,
        "min_pool_size" => "pglane opens server connections on demand only",
        "reserve_pool" | "reserve_pool_size" => "pglane has no reserve pool",
        "max_db_connections" => POOL_LIMITS,
        "max_db_client_connections" => CLIENT_LIMITS,
        "query_wait_timeout" => "pglane has only the global query_wait_timeout",
        "connect_query" | "server_lifetime" => NOT_YET,
        _ => "not a PgBouncer connection parameter pglane knows of",
    }
}

/// Why a parameter of a `[users]` entry is ignored.
pub fn user_parameter(key: &str) -> &'static str {
    match key {
        "pool_size" => "pglane sets pool_size per database only",
        "reserve_pool_size" => "pglane has no reserve pool",
        "max_user_connections" => POOL_LIMITS,
        "max_user_client_connections" => CLIENT_LIMITS,
        "query_wait_timeout" => "pglane has only the global query_wait_timeout",
        "query_timeout" | "idle_transaction_timeout" | "transaction_timeout" | "client_idle_timeout" => NOT_YET,
        _ => "not a PgBouncer user parameter pglane knows of",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_settings_have_specific_reasons() {
        assert_eq!(pgbouncer_setting("logfile"), LOGGING);
        assert_eq!(pgbouncer_setting("server_tls_ciphers"), NO_TLS);
        assert_eq!(pgbouncer_setting("server_check_delay"), NOT_YET);
        assert_eq!(database_parameter("client_encoding"), STARTUP_PARAMETERS);
        assert_eq!(user_parameter("max_user_connections"), POOL_LIMITS);
    }

    #[test]
    fn unknown_ones_say_so() {
        assert!(pgbouncer_setting("lisen_port").starts_with("not a PgBouncer setting"));
        assert!(database_parameter("hots").starts_with("not a PgBouncer connection parameter"));
        assert!(user_parameter("pool_mod").starts_with("not a PgBouncer user parameter"));
    }
}
