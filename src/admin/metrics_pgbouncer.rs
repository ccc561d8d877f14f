//! pgbouncer_exporter's metric names over pglane's figures (`metrics_names =
//! "pgbouncer"` or `"both"`): the `pgbouncer_*` families that
//! prometheus-community/pgbouncer_exporter v0.12.1 makes of PgBouncer's
//! admin console, with its names, types, HELP texts, label sets and units,
//! so that dashboards and alerts written for PgBouncer read pglane as they
//! are.
//!
//! This module owns the translation from console tables to exposition text,
//! and nothing else. Every figure comes from the tables the admin console
//! answers with (`show::databases_table`, `stats_totals_table`,
//! `pools_table`, `lists_table`, `clients_table`, `version_table` and
//! `show_config::config_table`), read column by column as the exporter reads
//! them, so a metric and the console cannot disagree; it never computes a
//! figure of its own (it only counts SHOW CLIENTS rows, as the exporter
//! does). As with the exporter, a column the console does not have gives no
//! metric, and the console's other columns give none either.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use super::metrics::escape;
use super::show::{self, Table};
use super::show_config;
use crate::config::Config;
use crate::runtime::snapshot::ShardSnapshot;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Gauge,
    Counter,
}

impl Kind {
    fn as_str(self) -> &'static str {
        match self {
            Kind::Gauge => "gauge",
            Kind::Counter => "counter",
        }
    }
}

/// How a column's value becomes a sample's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Unit {
    AsIs,
    /// The console's microseconds as seconds, multiplied by 1e-6 as the
    /// exporter does (not divided by 1e6: the results can differ in the
    /// last bit).
    MicrosecondsToSeconds,
}

impl Unit {
    fn apply(self, value: f64) -> f64 {
        match self {
            Unit::AsIs => value,
            Unit::MicrosecondsToSeconds => value * 1e-6,
        }
    }
}

/// A metric the exporter makes of one column of a SHOW command.
struct ColumnMetric {
    column: &'static str,
    name: &'static str,
    kind: Kind,
    unit: Unit,
    help: &'static str,
}

const fn gauge(column: &'static str, name: &'static str, help: &'static str) -> ColumnMetric {
    ColumnMetric { column, name, kind: Kind::Gauge, unit: Unit::AsIs, help }
}

const fn counter(column: &'static str, name: &'static str, unit: Unit, help: &'static str) -> ColumnMetric {
    ColumnMetric { column, name, kind: Kind::Counter, unit, help }
}

/// A SHOW command the exporter turns into metrics column by column: its
/// label columns (every series of the command has all of them, in
/// client_golang's order, which is by name) and its metric columns.
struct Namespace {
    labels: &'static [&'static str],
    metrics: &'static [ColumnMetric],
}

const AS_IS: Unit = Unit::AsIs;
const SECONDS: Unit = Unit::MicrosecondsToSeconds;

/// SHOW DATABASES. Here `name` is the pooler's database name and
/// `database` the server's dbname, as in PgBouncer.
const DATABASES: Namespace = Namespace {
    labels: &["database", "force_user", "host", "name", "pool_mode", "port"],
    metrics: &[
        gauge("pool_size", "pgbouncer_databases_pool_size", "Maximum number of server connections"),
        // PgBouncer before 1.24 calls the column reserve_pool, later
        // reserve_pool_size; the exporter maps both to one name.
        gauge("reserve_pool", "pgbouncer_databases_reserve_pool", "Maximum number of additional connections for this database"),
        gauge(
            "reserve_pool_size",
            "pgbouncer_databases_reserve_pool",
            "Maximum number of additional connections for this database",
        ),
        gauge(
            "max_connections",
            "pgbouncer_databases_max_connections",
            "Maximum number of allowed connections for this database",
        ),
        gauge(
            "current_connections",
            "pgbouncer_databases_current_connections",
            "Current number of connections for this database",
        ),
        gauge("paused", "pgbouncer_databases_paused", "1 if this database is currently paused, else 0"),
        gauge("disabled", "pgbouncer_databases_disabled", "1 if this database is currently disabled, else 0"),
    ],
};

/// SHOW STATS_TOTALS. The exporter also maps a column `requests` to
/// `pgbouncer_stats_totals_queries_total`, but no PgBouncer since 1.8 has
/// that column, so the exporter never emits it; neither does pglane.
const STATS_TOTALS: Namespace = Namespace {
    labels: &["database"],
    metrics: &[
        counter("query_count", "pgbouncer_stats_totals_queries_pooled_total", AS_IS, "Total number of SQL queries pooled"),
        counter(
            "query_time",
            "pgbouncer_stats_totals_queries_duration_seconds_total",
            SECONDS,
            "Total number of seconds spent by pgbouncer when actively connected to PostgreSQL, executing queries",
        ),
        counter(
            "bytes_received",
            "pgbouncer_stats_totals_received_bytes_total",
            AS_IS,
            "Total volume in bytes of network traffic received by pgbouncer, shown as bytes",
        ),
        counter(
            "bytes_sent",
            "pgbouncer_stats_totals_sent_bytes_total",
            AS_IS,
            "Total volume in bytes of network traffic sent by pgbouncer, shown as bytes",
        ),
        counter(
            "wait_time",
            "pgbouncer_stats_totals_client_wait_seconds_total",
            SECONDS,
            "Time spent by clients waiting for a server in seconds",
        ),
        counter("xact_count", "pgbouncer_stats_totals_sql_transactions_pooled_total", AS_IS, "Total number of SQL transactions pooled"),
        counter(
            "xact_time",
            "pgbouncer_stats_totals_server_in_transaction_seconds_total",
            SECONDS,
            "Total number of seconds spent by pgbouncer when connected to PostgreSQL in a transaction, either idle in transaction or executing queries",
        ),
        // PgBouncer 1.21+ columns pglane's console does not have (yet): like
        // the exporter before such a PgBouncer, no metric comes of them.
        counter(
            "client_parse_count",
            "pgbouncer_stats_totals_client_parses_total",
            AS_IS,
            "Total number of prepared statement Parse messages received from clients",
        ),
        counter(
            "server_parse_count",
            "pgbouncer_stats_totals_server_parses_total",
            AS_IS,
            "Total number of prepared statement Parse messages sent by pgbouncer to PostgreSQL",
        ),
        counter(
            "bind_count",
            "pgbouncer_stats_totals_binds_total",
            AS_IS,
            "Total number of prepared statements readied for execution with a Bind message",
        ),
        counter(
            "server_assignment_count",
            "pgbouncer_stats_totals_server_assignments_total",
            AS_IS,
            "Total number of client connections which have been served since process start",
        ),
    ],
};

/// SHOW POOLS.
const POOLS: Namespace = Namespace {
    labels: &["database", "user"],
    metrics: &[
        gauge(
            "cl_active",
            "pgbouncer_pools_client_active_connections",
            "Client connections linked to server connection and able to process queries, shown as connection",
        ),
        gauge(
            "cl_active_cancel_req",
            "pgbouncer_pools_client_active_cancel_connections",
            "Client connections that have forwarded query cancellations to the server and are waiting for the server response",
        ),
        gauge(
            "cl_waiting",
            "pgbouncer_pools_client_waiting_connections",
            "Client connections waiting on a server connection, shown as connection",
        ),
        gauge(
            "cl_waiting_cancel_req",
            "pgbouncer_pools_client_waiting_cancel_connections",
            "Client connections that have not forwarded query cancellations to the server yet",
        ),
        gauge(
            "sv_active",
            "pgbouncer_pools_server_active_connections",
            "Server connections linked to a client connection, shown as connection",
        ),
        gauge(
            "sv_active_cancel",
            "pgbouncer_pools_server_active_cancel_connections",
            "Server connections that are currently forwarding a cancel request.",
        ),
        gauge(
            "sv_being_canceled",
            "pgbouncer_pools_server_being_canceled_connections",
            "Servers that normally could become idle but are waiting to do so until all in-flight cancel requests have completed that were sent to cancel a query on this server.",
        ),
        gauge(
            "sv_idle",
            "pgbouncer_pools_server_idle_connections",
            "Server connections idle and ready for a client query, shown as connection",
        ),
        gauge(
            "sv_used",
            "pgbouncer_pools_server_used_connections",
            "Server connections idle more than server_check_delay, needing server_check_query, shown as connection",
        ),
        gauge(
            "sv_tested",
            "pgbouncer_pools_server_testing_connections",
            "Server connections currently running either server_reset_query or server_check_query, shown as connection",
        ),
        gauge(
            "sv_login",
            "pgbouncer_pools_server_login_connections",
            "Server connections currently in the process of logging in, shown as connection",
        ),
        // Whole seconds: the exporter does not read maxwait_us.
        gauge("maxwait", "pgbouncer_pools_client_maxwait_seconds", "Age of oldest unserved client connection, shown as second"),
    ],
};

/// SHOW LISTS rows the exporter knows: (list, metric, help). Other lists
/// (pglane's `dns_pending`, as PgBouncer's) give no metric.
const LISTS: &[(&str, &str, &str)] = &[
    ("databases", "pgbouncer_databases", "Count of databases"),
    ("users", "pgbouncer_users", "Count of users"),
    ("pools", "pgbouncer_pools", "Count of pools"),
    ("free_clients", "pgbouncer_free_clients", "Count of free clients"),
    ("used_clients", "pgbouncer_used_clients", "Count of used clients"),
    ("login_clients", "pgbouncer_login_clients", "Count of clients in login state"),
    ("free_servers", "pgbouncer_free_servers", "Count of free servers"),
    ("used_servers", "pgbouncer_used_servers", "Count of used servers"),
    ("dns_names", "pgbouncer_cached_dns_names", "Count of DNS names in the cache"),
    ("dns_zones", "pgbouncer_cached_dns_zones", "Count of DNS zones in the cache"),
    ("dns_queries", "pgbouncer_in_flight_dns_queries", "Count of in-flight DNS queries"),
];

/// SHOW CONFIG keys the exporter reads: (key, metric, help).
const CONFIG_KEYS: &[(&str, &str, &str)] = &[
    ("max_client_conn", "pgbouncer_config_max_client_connections", "Config maximum number of client connections"),
    ("max_user_connections", "pgbouncer_config_max_user_connections", "Config maximum number of server connections per user"),
];

/// SHOW CLIENTS columns the exporter groups clients by, and the label
/// names they become, in exposition order.
const CLIENT_LABELS: [&str; 4] = ["application_name", "database", "state", "user"];

/// The console's answers one scrape reads.
pub(super) struct ConsoleTables {
    pub databases: Table,
    pub stats_totals: Table,
    pub pools: Table,
    pub lists: Table,
    pub config: Table,
    pub version: Table,
    pub clients: Table,
}

impl ConsoleTables {
    /// The tables the admin console would answer with now.
    pub fn gather(snapshots: &[ShardSnapshot], config: &Config) -> ConsoleTables {
        ConsoleTables {
            databases: show::databases_table(snapshots, config),
            stats_totals: show::stats_totals_table(snapshots),
            pools: show::pools_table(snapshots, config),
            lists: show::lists_table(snapshots, config),
            config: show_config::config_table(config),
            version: show::version_table(),
            clients: show::clients_table(snapshots, config.listen.first()),
        }
    }
}

/// The pgbouncer_exporter families for these snapshots. `complete`: every
/// shard answered; if one did not, the figures are partial and
/// `pgbouncer_up` is 0, as the exporter reports a scrape that failed
/// part-way.
pub fn render(snapshots: &[ShardSnapshot], config: &Config, complete: bool) -> String {
    render_tables(&ConsoleTables::gather(snapshots, config), complete)
}

/// The exposition text of these console tables, in the exporter's order of
/// commands (VERSION, LISTS, CONFIG, CLIENTS, then the column commands),
/// `pgbouncer_up` last.
pub(super) fn render_tables(tables: &ConsoleTables, up: bool) -> String {
    let mut out = String::new();
    version_family(&mut out, &tables.version);
    lists_families(&mut out, &tables.lists);
    config_families(&mut out, &tables.config);
    client_connections_family(&mut out, &tables.clients);
    column_families(&mut out, &tables.databases, &DATABASES);
    column_families(&mut out, &tables.stats_totals, &STATS_TOTALS);
    column_families(&mut out, &tables.pools, &POOLS);
    write_header(&mut out, "pgbouncer_up", Kind::Gauge, "The pgbouncer scrape succeeded");
    write_sample(&mut out, "pgbouncer_up", "", f64::from(u8::from(up)));
    out
}

fn write_header(out: &mut String, name: &str, kind: Kind, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {}", kind.as_str());
}

fn write_sample(out: &mut String, name: &str, labels: &str, value: f64) {
    let _ = writeln!(out, "{name}{labels} {}", format_value(value));
}

/// A sample value as Prometheus reads it back bit for bit (Rust prints the
/// shortest decimal that parses to the same f64).
fn format_value(value: f64) -> String {
    match value {
        v if v.is_nan() => "NaN".to_owned(),
        v if v == f64::INFINITY => "+Inf".to_owned(),
        v if v == f64::NEG_INFINITY => "-Inf".to_owned(),
        v => v.to_string(),
    }
}

/// `{a="x",b="y"}` for these label names and values; "" for none.
fn label_set<'a>(pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> String {
    let inner: Vec<String> = pairs.into_iter().map(|(name, value)| format!("{name}=\"{}\"", escape(value))).collect();
    if inner.is_empty() {
        String::new()
    } else {
        format!("{{{}}}", inner.join(","))
    }
}

fn column_index(table: &Table, column: &str) -> Option<usize> {
    table.columns.iter().position(|(name, _)| *name == column)
}

/// A row's text in `column`: "" where the column is missing or the value
/// NULL, as the exporter labels both.
fn cell<'a>(table: &Table, row: &'a [Option<String>], column: &str) -> &'a str {
    column_index(table, column).and_then(|i| row.get(i)).and_then(Option::as_deref).unwrap_or("")
}

/// A metric's value from a console cell: NULL gives NaN (the exporter still
/// emits the sample); text that is no number gives no sample.
fn sample_value(cell: Option<&str>, unit: Unit) -> Option<f64> {
    match cell {
        None => Some(f64::NAN),
        Some(text) => text.trim().parse::<f64>().ok().map(|v| unit.apply(v)),
    }
}

/// The families of one column-mapped command: for each metric whose
/// column the table has, one sample per row, labelled with every label
/// column of the command. A name two columns map to is written once, from
/// the first column present.
fn column_families(out: &mut String, table: &Table, namespace: &Namespace) {
    let labels: Vec<String> =
        table.rows.iter().map(|row| label_set(namespace.labels.iter().map(|&label| (label, cell(table, row, label))))).collect();
    let mut written: Vec<&str> = Vec::new();
    for metric in namespace.metrics {
        let Some(i) = column_index(table, metric.column) else { continue };
        if written.contains(&metric.name) {
            continue;
        }
        written.push(metric.name);
        write_header(out, metric.name, metric.kind, metric.help);
        for (row, labels) in table.rows.iter().zip(&labels) {
            if let Some(value) = sample_value(row.get(i).and_then(Option::as_deref), metric.unit) {
                write_sample(out, metric.name, labels, value);
            }
        }
    }
}

/// `pgbouncer_version_info{version="pglane x.y.z"} 1`.
fn version_family(out: &mut String, version: &Table) {
    write_header(out, "pgbouncer_version_info", Kind::Gauge, "The pgbouncer version info");
    for row in &version.rows {
        write_sample(out, "pgbouncer_version_info", &label_set([("version", cell(version, row, "version"))]), 1.0);
    }
}

/// One gauge per SHOW LISTS row the exporter knows.
fn lists_families(out: &mut String, lists: &Table) {
    for row in &lists.rows {
        let list = cell(lists, row, "list");
        let Some(&(_, name, help)) = LISTS.iter().find(|(known, _, _)| *known == list) else { continue };
        if let Some(value) = sample_value(Some(cell(lists, row, "items")), Unit::AsIs) {
            write_header(out, name, Kind::Gauge, help);
            write_sample(out, name, "", value);
        }
    }
}

/// max_client_conn and max_user_connections from SHOW CONFIG's `value`.
fn config_families(out: &mut String, config: &Table) {
    for &(key, name, help) in CONFIG_KEYS {
        let Some(row) = config.rows.iter().find(|row| cell(config, row, "key") == key) else { continue };
        if let Some(value) = sample_value(Some(cell(config, row, "value")), Unit::AsIs) {
            write_header(out, name, Kind::Gauge, help);
            write_sample(out, name, "", value);
        }
    }
}

/// SHOW CLIENTS rows counted by (database, user, application_name, state);
/// only groups that have clients get a series, as in the exporter.
fn client_connections_family(out: &mut String, clients: &Table) {
    let mut groups: BTreeMap<[&str; 4], u64> = BTreeMap::new();
    for row in &clients.rows {
        *groups.entry(CLIENT_LABELS.map(|label| cell(clients, row, label))).or_default() += 1;
    }
    let name = "pgbouncer_client_connections";
    write_header(out, name, Kind::Gauge, "Number of client connections grouped by database, user, application name, and state");
    for (values, count) in groups {
        write_sample(out, name, &label_set(CLIENT_LABELS.into_iter().zip(values)), count as f64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admin::show::{INT4, NUMERIC, TEXT};

    fn table(columns: &[(&'static str, u32)], rows: &[&[Option<&str>]]) -> Table {
        Table { columns: columns.to_vec(), rows: rows.iter().map(|r| r.iter().map(|c| c.map(str::to_owned)).collect()).collect() }
    }

    fn empty() -> Table {
        table(&[], &[])
    }

    fn tables() -> ConsoleTables {
        ConsoleTables {
            databases: empty(),
            stats_totals: empty(),
            pools: empty(),
            lists: empty(),
            config: empty(),
            version: empty(),
            clients: empty(),
        }
    }

    /// The sample lines of family `name`.
    fn samples<'a>(text: &'a str, name: &str) -> Vec<&'a str> {
        text.lines().filter(|l| l.strip_prefix(name).is_some_and(|rest| rest.starts_with(['{', ' ']))).collect()
    }

    #[test]
    fn label_values_are_escaped() {
        let mut t = tables();
        t.pools =
            table(&[("database", TEXT), ("user", TEXT), ("cl_active", INT4)], &[&[Some("a\"b\\c\nd"), Some("u"), Some("3")]]);
        let text = render_tables(&t, true);
        assert_eq!(
            samples(&text, "pgbouncer_pools_client_active_connections"),
            ["pgbouncer_pools_client_active_connections{database=\"a\\\"b\\\\c\\nd\",user=\"u\"} 3"]
        );
    }

    #[test]
    fn a_null_or_missing_label_column_is_an_empty_label() {
        let mut t = tables();
        t.databases = table(
            &[("name", TEXT), ("host", TEXT), ("port", INT4), ("database", TEXT), ("force_user", TEXT), ("pool_size", INT4)],
            &[&[Some("app"), Some("127.0.0.1"), Some("5432"), Some("postgres"), None, Some("8")]],
        );
        let text = render_tables(&t, true);
        assert_eq!(samples(&text, "pgbouncer_databases_pool_size"), [
            "pgbouncer_databases_pool_size{database=\"postgres\",force_user=\"\",host=\"127.0.0.1\",name=\"app\",pool_mode=\"\",port=\"5432\"} 8"
        ]);
    }

    #[test]
    fn microseconds_become_seconds_times_1e_minus_6() {
        let mut t = tables();
        t.stats_totals = table(
            &[
                ("database", TEXT),
                ("query_count", NUMERIC),
                ("query_time", NUMERIC),
                ("wait_time", NUMERIC),
                ("xact_time", NUMERIC),
            ],
            &[&[Some("app"), Some("8"), Some("8"), Some("1234567"), Some("3")]],
        );
        let text = render_tables(&t, true);
        let value = |name: &str| -> f64 { samples(&text, name)[0].rsplit(' ').next().unwrap().parse().unwrap() };
        assert_eq!(value("pgbouncer_stats_totals_queries_pooled_total"), 8.0, "counts stay counts");
        assert_eq!(value("pgbouncer_stats_totals_queries_duration_seconds_total"), 8e-6);
        assert_eq!(value("pgbouncer_stats_totals_client_wait_seconds_total"), 1_234_567.0 * 1e-6);
        assert_eq!(value("pgbouncer_stats_totals_server_in_transaction_seconds_total"), 3.0 * 1e-6);
        assert!(text.contains("# TYPE pgbouncer_stats_totals_queries_duration_seconds_total counter\n"));
    }

    #[test]
    fn each_row_is_one_sample_of_each_family() {
        let mut t = tables();
        t.pools = table(
            &[
                ("database", TEXT),
                ("user", TEXT),
                ("cl_waiting", INT4),
                ("sv_idle", INT4),
                ("maxwait", INT4),
                ("maxwait_us", INT4),
            ],
            &[
                &[Some("a"), Some("u"), Some("1"), Some("2"), Some("7"), Some("5")],
                &[Some("b"), Some("v"), Some("0"), Some("4"), Some("0"), Some("0")],
            ],
        );
        let text = render_tables(&t, true);
        for name in [
            "pgbouncer_pools_client_waiting_connections",
            "pgbouncer_pools_server_idle_connections",
            "pgbouncer_pools_client_maxwait_seconds",
        ] {
            assert_eq!(samples(&text, name).len(), 2, "{name}: {text}");
            assert_eq!(text.matches(&format!("# TYPE {name} gauge\n")).count(), 1);
        }
        assert!(text.contains("pgbouncer_pools_client_maxwait_seconds{database=\"a\",user=\"u\"} 7\n"), "whole seconds: {text}");
        assert!(!text.contains("maxwait_us"), "a column the exporter does not map gives nothing");
    }

    #[test]
    fn a_column_the_console_lacks_gives_no_family_and_null_gives_nan() {
        let mut t = tables();
        t.stats_totals = table(&[("database", TEXT), ("xact_count", NUMERIC)], &[&[Some("app"), None]]);
        let text = render_tables(&t, true);
        assert_eq!(
            samples(&text, "pgbouncer_stats_totals_sql_transactions_pooled_total"),
            ["pgbouncer_stats_totals_sql_transactions_pooled_total{database=\"app\"} NaN"]
        );
        assert!(!text.contains("pgbouncer_stats_totals_client_parses_total"));
        assert!(!text.contains("pgbouncer_stats_totals_queries_total"));
    }

    #[test]
    fn reserve_pool_and_reserve_pool_size_are_one_family() {
        let mut t = tables();
        t.databases = table(&[("name", TEXT), ("reserve_pool_size", INT4)], &[&[Some("app"), Some("2")]]);
        let text = render_tables(&t, true);
        assert_eq!(samples(&text, "pgbouncer_databases_reserve_pool").len(), 1, "{text}");
        t.databases = table(
            &[("name", TEXT), ("reserve_pool", INT4), ("reserve_pool_size", INT4)],
            &[&[Some("app"), Some("2"), Some("2")]],
        );
        let text = render_tables(&t, true);
        assert_eq!(samples(&text, "pgbouncer_databases_reserve_pool").len(), 1, "written once: {text}");
    }

    #[test]
    fn lists_config_version_clients_and_up() {
        let mut t = tables();
        t.lists = table(
            &[("list", TEXT), ("items", INT4)],
            &[&[Some("used_clients"), Some("3")], &[Some("dns_pending"), Some("0")], &[Some("dns_names"), Some("0")]],
        );
        t.config = table(
            &[("key", TEXT), ("value", TEXT), ("default", TEXT), ("changeable", TEXT)],
            &[
                &[Some("max_client_conn"), Some("100"), Some("100"), Some("yes")],
                &[Some("max_user_connections"), Some("0"), Some("0"), Some("yes")],
            ],
        );
        t.version = table(&[("version", TEXT)], &[&[Some("pglane 1.2.3")]]);
        t.clients = table(
            &[("user", TEXT), ("database", TEXT), ("state", TEXT), ("application_name", TEXT)],
            &[
                &[Some("u"), Some("app"), Some("waiting"), Some("psql")],
                &[Some("u"), Some("app"), Some("waiting"), Some("psql")],
                &[Some("u"), Some("app"), Some("active"), None],
            ],
        );
        let text = render_tables(&t, false);
        assert!(text.contains("\npgbouncer_used_clients 3\n"), "{text}");
        assert!(text.contains("\npgbouncer_cached_dns_names 0\n"));
        assert!(!text.contains("dns_pending"), "a list the exporter does not know");
        assert!(text.contains("\npgbouncer_config_max_client_connections 100\n"));
        assert!(text.contains("\npgbouncer_config_max_user_connections 0\n"));
        assert!(text.contains("\npgbouncer_version_info{version=\"pglane 1.2.3\"} 1\n"));
        assert_eq!(
            samples(&text, "pgbouncer_client_connections"),
            [
                "pgbouncer_client_connections{application_name=\"\",database=\"app\",state=\"active\",user=\"u\"} 1",
                "pgbouncer_client_connections{application_name=\"psql\",database=\"app\",state=\"waiting\",user=\"u\"} 2",
            ]
        );
        assert!(text.ends_with("# TYPE pgbouncer_up gauge\npgbouncer_up 0\n"), "up last, 0 when a shard did not answer");
    }

    #[test]
    fn values_print_as_prometheus_reads_them() {
        assert_eq!(format_value(8.0), "8");
        assert_eq!(format_value(8.0 * 1e-6).parse::<f64>().unwrap(), 8e-6);
        assert_eq!(format_value(f64::NAN), "NaN");
        assert_eq!(format_value(f64::INFINITY), "+Inf");
    }

    /// From pglane's real console tables: every family the exporter makes of
    /// SHOW DATABASES, STATS_TOTALS and POOLS.
    #[test]
    fn the_consoles_tables_give_every_family_they_have_columns_for() {
        let config = Config::parse("listen = \"127.0.0.1:6432\"\n[databases.app]\npool_size = 3\n").unwrap();
        let text = render(&[], &config, true);
        let families: Vec<&str> =
            text.lines().filter_map(|l| l.strip_prefix("# TYPE ")).filter_map(|l| l.split(' ').next()).collect();
        let missing: Vec<&&str> = DATABASES
            .metrics
            .iter()
            .chain(STATS_TOTALS.metrics)
            .chain(POOLS.metrics)
            .map(|m| &m.name)
            .filter(|name| !families.contains(name))
            .collect();
        assert!(missing.is_empty(), "families the console has no column for: {missing:?}");
        assert!(text.contains(
            "pgbouncer_databases_pool_size{database=\"app\",force_user=\"\",host=\"127.0.0.1\",name=\"app\",pool_mode=\"\",port=\"5432\"} 3\n"
        ));
        assert!(text.contains("\npgbouncer_config_max_client_connections 10000\n"));
        assert!(text.contains(&format!("pgbouncer_version_info{{version=\"pglane {}\"}} 1\n", env!("CARGO_PKG_VERSION"))));
        assert!(text.contains("\npgbouncer_databases 1\n"));
    }
}
