//! SHOW CONFIG as PgBouncer answers it: every PgBouncer setting, in its
//! order, with the value pglane runs with in PgBouncer's spelling
//! (`scram-sha-256`, `transaction`, seconds, `0`/`1`), PgBouncer's default,
//! and whether a reload may change it; then pglane's own settings. A setting
//! pglane does not honour itself (accepted because pglane already behaves
//! so, or only at PgBouncer's default: see the importer's catalogue) has no
//! value (NULL): pglane has no such knob. Scripts and pgbouncer_exporter
//! (which reads `max_client_conn` and `max_user_connections`) read the same
//! rows as from PgBouncer.
//!
//! This module only formats; the config is `crate::config`'s.

use crate::config::pgbouncer_ini::unsupported::{self, PGBOUNCER_SETTINGS};
use crate::config::{AuthType, Config, PoolMode};

use super::show::{Table, TEXT};

/// The value pglane runs with for PgBouncer setting `key`, as PgBouncer
/// would print it; None for a setting pglane does not honour itself.
fn pgbouncer_value(config: &Config, key: &str) -> Option<String> {
    if !unsupported::HONOURED.contains(&key) {
        return None;
    }
    let path = |p: &Option<std::path::PathBuf>| p.as_ref().map(|p| p.display().to_string()).unwrap_or_default();
    let flag = |b: bool| if b { "1" } else { "0" }.to_owned();
    let listen = config.listen_addr().ok();
    let ips =
        || config.listen.addresses().iter().map(|a| a.parse::<std::net::SocketAddr>().map_or(a.clone(), |a| a.ip().to_string()));
    Some(match key {
        "admin_users" => config.admin_users.join(","),
        "stats_users" => config.stats_users.join(","),
        "auth_dbname" => config.auth_dbname.clone().unwrap_or_default(),
        // The users pglane read from an auth_file are in its config; the
        // file itself is not kept.
        "auth_file" => String::new(),
        "auth_hba_file" => path(&config.auth_hba_file),
        "auth_query" => config.auth_query.clone(),
        "auth_type" => auth_type_name(config.auth_type).to_owned(),
        "auth_user" => config.auth_user.clone().unwrap_or_default(),
        "client_idle_timeout" => seconds(config.client_idle_timeout),
        "client_login_timeout" => seconds(config.client_login_timeout),
        "client_tls_ca_file" => path(&config.client_tls_ca_file),
        "client_tls_cert_file" => path(&config.client_tls_cert_file),
        "client_tls_key_file" => path(&config.client_tls_key_file),
        "client_tls_sslmode" => config.client_tls_sslmode.to_string(),
        "default_pool_size" => config.default_pool_size.to_string(),
        "disable_pqexec" => "0".into(),
        "idle_transaction_timeout" => seconds(config.idle_transaction_timeout),
        "listen_addr" => ips().collect::<Vec<_>>().join(","),
        "listen_port" => listen.map(|a| a.port().to_string()).unwrap_or_default(),
        "logfile" => path(&config.logfile),
        "max_client_conn" => config.max_client_conn.to_string(),
        "max_db_connections" => config.max_db_connections.to_string(),
        "max_packet_size" => config.max_message_size.to_string(),
        "max_prepared_statements" => config.max_prepared_statements.to_string(),
        "max_user_connections" => config.max_user_connections.to_string(),
        "max_db_client_connections" => config.max_db_client_connections.to_string(),
        "max_user_client_connections" => config.max_user_client_connections.to_string(),
        "min_pool_size" => config.min_pool_size.to_string(),
        "peer_id" => config.peer_id.to_string(),
        "pidfile" => path(&config.pidfile),
        "pool_mode" => pool_mode_name(config.pool_mode).to_owned(),
        "query_timeout" => seconds(config.query_timeout),
        "query_wait_timeout" => seconds(config.query_wait_timeout),
        "query_wait_notify" => seconds(config.query_wait_notify),
        "server_connect_timeout" => seconds(config.server_connect_timeout),
        "server_idle_timeout" => seconds(config.server_idle_timeout),
        "server_lifetime" => seconds(config.server_lifetime),
        "server_reset_query" => config.server_reset_query.clone(),
        "server_reset_query_always" => flag(config.server_reset_query_always),
        "application_name_add_host" => flag(config.application_name_add_host),
        "server_tls_ca_file" => path(&config.server_tls_ca_file),
        "server_tls_cert_file" => path(&config.server_tls_cert_file),
        "server_tls_key_file" => path(&config.server_tls_key_file),
        "server_tls_sslmode" => config.server_tls_sslmode.to_string(),
        "so_reuseport" => flag(config.so_reuseport),
        "log_connections" => flag(config.log_connections),
        "log_disconnections" => flag(config.log_disconnections),
        "log_pooler_errors" => flag(config.log_pooler_errors),
        "verbose" => config.verbose.to_string(),
        "log_stats" => flag(config.log_stats),
        "stats_period" => config.stats_period.to_string(),
        "scram_iterations" => config.scram_iterations.to_string(),
        "listen_backlog" => config.listen_backlog.to_string(),
        "tcp_defer_accept" => flag(config.tcp_defer_accept),
        "tcp_keepalive" => flag(config.tcp_keepalive),
        "tcp_keepidle" => config.tcp_keepidle.to_string(),
        "tcp_keepintvl" => config.tcp_keepintvl.to_string(),
        "tcp_keepcnt" => config.tcp_keepcnt.to_string(),
        "tcp_user_timeout" => config.tcp_user_timeout.to_string(),
        "tcp_socket_buffer" => config.tcp_socket_buffer.to_string(),
        "unix_socket_dir" => config.unix_socket_dir.clone().unwrap_or_default(),
        "unix_socket_mode" => format!("0{:o}", config.unix_socket_mode),
        _ => return None,
    })
}

pub fn auth_type_name(auth_type: AuthType) -> &'static str {
    match auth_type {
        AuthType::Trust => "trust",
        AuthType::Md5 => "md5",
        AuthType::ScramSha256 => "scram-sha-256",
        AuthType::Hba => "hba",
    }
}

pub fn pool_mode_name(mode: PoolMode) -> &'static str {
    match mode {
        PoolMode::Session => "session",
        PoolMode::Transaction => "transaction",
    }
}

/// A database's `load_balance_hosts` as PgBouncer spells it.
pub fn load_balance_hosts_name(order: crate::config::LoadBalanceHosts) -> &'static str {
    match order {
        crate::config::LoadBalanceHosts::Disable => "disable",
        crate::config::LoadBalanceHosts::Random => "random",
        crate::config::LoadBalanceHosts::RoundRobin => "round-robin",
    }
}

/// Seconds as PgBouncer prints a time setting: whole ones without a fraction.
fn seconds(value: f64) -> String {
    if value.fract() == 0.0 {
        format!("{value:.0}")
    } else {
        value.to_string()
    }
}

/// The config of a file that sets nothing it need not: pglane's defaults.
fn pglane_defaults() -> Config {
    Config::parse("listen = \"127.0.0.1:6432\"\n[databases.d]\n").expect("the minimal config parses")
}

/// pglane's own settings, after PgBouncer's: (key, value, default, changeable).
fn own_rows(config: &Config, d: &Config) -> Vec<(&'static str, String, String, bool)> {
    vec![
        ("listen", config.listen.to_string(), String::new(), false),
        ("shutdown_timeout", seconds(config.shutdown_timeout), seconds(d.shutdown_timeout), true),
        ("max_message_size", config.max_message_size.to_string(), d.max_message_size.to_string(), true),
        ("spin_before_park_us", config.spin_before_park_us.to_string(), d.spin_before_park_us.to_string(), true),
        (
            "max_client_prepared_statements",
            config.max_client_prepared_statements.to_string(),
            d.max_client_prepared_statements.to_string(),
            true,
        ),
        ("auto_prepare", config.auto_prepare.to_string(), d.auto_prepare.to_string(), true),
        ("auto_prepare_after", config.auto_prepare_after.to_string(), d.auto_prepare_after.to_string(), true),
        ("binary_negotiation", config.binary_negotiation.to_string(), d.binary_negotiation.to_string(), true),
        ("server_retry_timeout", seconds(config.server_retry_timeout), seconds(d.server_retry_timeout), true),
        ("host_check_interval", seconds(config.host_check_interval), seconds(d.host_check_interval), true),
        ("metrics_names", config.metrics_names.to_string(), d.metrics_names.to_string(), true),
        ("cores", config.cores.map(|c| c.to_string()).unwrap_or_default(), String::new(), false),
        ("cpus", config.cpus.clone().unwrap_or_default(), String::new(), false),
    ]
}

/// PgBouncer settings a reload changes in PgBouncer but not in pglane.
const FIXED_UNTIL_RESTART: &[&str] = &["logfile", "tcp_defer_accept", "verbose"];

/// SHOW CONFIG.
pub fn config_table(config: &Config) -> Table {
    let mut t = Table::new(&[("key", TEXT), ("value", TEXT), ("default", TEXT), ("changeable", TEXT)]);
    let yes_no = |b: bool| Some(if b { "yes" } else { "no" }.to_owned());
    let defaults = pglane_defaults();
    // service_name exists on Windows only.
    for setting in PGBOUNCER_SETTINGS.iter().filter(|s| s.name != "service_name") {
        let value = pgbouncer_value(config, setting.name);
        // What pglane has no knob for, no reload changes either; nor what it
        // sets up once at start where PgBouncer can change it later.
        let changeable = setting.reloadable && value.is_some() && !FIXED_UNTIL_RESTART.contains(&setting.name);
        t.push(vec![Some(setting.name.to_owned()), value, Some(setting.default.to_owned()), yes_no(changeable)]);
    }
    for (key, value, default, changeable) in own_rows(config, &defaults) {
        t.push(vec![Some(key.to_owned()), Some(value), Some(default), yes_no(changeable)]);
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    fn value(t: &Table, key: &str) -> Option<String> {
        t.rows.iter().find(|r| r[0].as_deref() == Some(key)).unwrap_or_else(|| panic!("no row {key}"))[1].clone()
    }

    #[test]
    fn pgbouncers_settings_come_first_in_its_spelling_then_pglanes() {
        let config = Config::parse(
            "listen = \"10.1.2.3:6543\"\npool_mode = \"transaction\"\nauth_type = \"scram-sha-256\"\nmax_user_connections = 7\n\
             query_wait_timeout = 2.5\nserver_reset_query_always = true\n[databases.d]\n",
        )
        .unwrap();
        let t = config_table(&config);
        let keys: Vec<&str> = t.rows.iter().filter_map(|r| r[0].as_deref()).collect();
        let pgbouncer: Vec<&str> = PGBOUNCER_SETTINGS.iter().map(|s| s.name).filter(|n| *n != "service_name").collect();
        assert_eq!(&keys[..pgbouncer.len()], &pgbouncer[..], "PgBouncer's keys, in its order, first");
        assert_eq!(keys.iter().filter(|k| **k == "listen").count(), 1);
        assert_eq!(keys.len(), keys.iter().collect::<std::collections::BTreeSet<_>>().len(), "no key twice");
        assert_eq!(value(&t, "listen_addr").as_deref(), Some("10.1.2.3"));
        assert_eq!(value(&t, "listen_port").as_deref(), Some("6543"));
        assert_eq!(value(&t, "pool_mode").as_deref(), Some("transaction"));
        assert_eq!(value(&t, "auth_type").as_deref(), Some("scram-sha-256"));
        assert_eq!(value(&t, "max_user_connections").as_deref(), Some("7"));
        assert_eq!(value(&t, "max_client_conn").as_deref(), Some("10000"));
        assert_eq!(value(&t, "query_wait_timeout").as_deref(), Some("2.5"));
        assert_eq!(value(&t, "server_connect_timeout").as_deref(), Some("15"));
        assert_eq!(value(&t, "server_reset_query_always").as_deref(), Some("1"));
        assert_eq!(value(&t, "unix_socket_mode").as_deref(), Some("0777"));
        assert_eq!(value(&t, "tcp_keepalive").as_deref(), Some("1"), "pglane's default, as PgBouncer's");
        assert_eq!(value(&t, "pkt_buf"), None, "not pglane's to set: no value");
        assert_eq!(value(&t, "auto_prepare").as_deref(), Some("true"));
        let default = |key: &str| t.rows.iter().find(|r| r[0].as_deref() == Some(key)).unwrap()[2].clone();
        assert_eq!(default("max_client_conn").as_deref(), Some("100"), "PgBouncer's default");
        assert_eq!(default("server_tls_sslmode").as_deref(), Some("prefer"));
    }
}
