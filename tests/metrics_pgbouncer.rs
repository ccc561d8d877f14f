//! `metrics_names = "pgbouncer"`: `/metrics` serves pgbouncer_exporter
//! v0.12.1's families (names and label sets as /work/exporter-research.md
//! lists them) with the admin console's figures, against a real PostgreSQL;
//! `"both"` serves both sets, the default only pglane's; and the Grafana
//! dashboard in deploy/grafana uses only names pglane serves.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use common::{connect, free_port, postgres, Pglane, Psql};

const DATABASES_LABELS: &[&str] = &["database", "force_user", "host", "name", "pool_mode", "port"];
const POOLS_LABELS: &[&str] = &["database", "user"];
const STATS_LABELS: &[&str] = &["database"];
const NO_LABELS: &[&str] = &[];

/// pgbouncer_exporter's families with their label names, less
/// `pgbouncer_stats_totals_queries_total` (the exporter never emits it: no
/// PgBouncer since 1.8 has its column).
const EXPECTED: &[(&str, &[&str])] = &[
    ("pgbouncer_databases_pool_size", DATABASES_LABELS),
    ("pgbouncer_databases_reserve_pool", DATABASES_LABELS),
    ("pgbouncer_databases_max_connections", DATABASES_LABELS),
    ("pgbouncer_databases_current_connections", DATABASES_LABELS),
    ("pgbouncer_databases_paused", DATABASES_LABELS),
    ("pgbouncer_databases_disabled", DATABASES_LABELS),
    ("pgbouncer_stats_totals_queries_pooled_total", STATS_LABELS),
    ("pgbouncer_stats_totals_queries_duration_seconds_total", STATS_LABELS),
    ("pgbouncer_stats_totals_received_bytes_total", STATS_LABELS),
    ("pgbouncer_stats_totals_sent_bytes_total", STATS_LABELS),
    ("pgbouncer_stats_totals_client_wait_seconds_total", STATS_LABELS),
    ("pgbouncer_stats_totals_sql_transactions_pooled_total", STATS_LABELS),
    ("pgbouncer_stats_totals_server_in_transaction_seconds_total", STATS_LABELS),
    ("pgbouncer_stats_totals_client_parses_total", STATS_LABELS),
    ("pgbouncer_stats_totals_server_parses_total", STATS_LABELS),
    ("pgbouncer_stats_totals_binds_total", STATS_LABELS),
    ("pgbouncer_stats_totals_server_assignments_total", STATS_LABELS),
    ("pgbouncer_pools_client_active_connections", POOLS_LABELS),
    ("pgbouncer_pools_client_active_cancel_connections", POOLS_LABELS),
    ("pgbouncer_pools_client_waiting_connections", POOLS_LABELS),
    ("pgbouncer_pools_client_waiting_cancel_connections", POOLS_LABELS),
    ("pgbouncer_pools_server_active_connections", POOLS_LABELS),
    ("pgbouncer_pools_server_active_cancel_connections", POOLS_LABELS),
    ("pgbouncer_pools_server_being_canceled_connections", POOLS_LABELS),
    ("pgbouncer_pools_server_idle_connections", POOLS_LABELS),
    ("pgbouncer_pools_server_used_connections", POOLS_LABELS),
    ("pgbouncer_pools_server_testing_connections", POOLS_LABELS),
    ("pgbouncer_pools_server_login_connections", POOLS_LABELS),
    ("pgbouncer_pools_client_maxwait_seconds", POOLS_LABELS),
    ("pgbouncer_up", NO_LABELS),
    ("pgbouncer_version_info", &["version"]),
    ("pgbouncer_config_max_client_connections", NO_LABELS),
    ("pgbouncer_config_max_user_connections", NO_LABELS),
    ("pgbouncer_databases", NO_LABELS),
    ("pgbouncer_users", NO_LABELS),
    ("pgbouncer_pools", NO_LABELS),
    ("pgbouncer_free_clients", NO_LABELS),
    ("pgbouncer_used_clients", NO_LABELS),
    ("pgbouncer_login_clients", NO_LABELS),
    ("pgbouncer_free_servers", NO_LABELS),
    ("pgbouncer_used_servers", NO_LABELS),
    ("pgbouncer_cached_dns_names", NO_LABELS),
    ("pgbouncer_cached_dns_zones", NO_LABELS),
    ("pgbouncer_in_flight_dns_queries", NO_LABELS),
    ("pgbouncer_client_connections", &["application_name", "database", "state", "user"]),
];

fn config(metrics_port: u16, names: Option<&str>) -> String {
    let names = names.map(|n| format!("metrics_names = \"{n}\"\n")).unwrap_or_default();
    format!(
        "pool_mode = \"transaction\"\nadmin_users = [\"postgres\"]\nmetrics_listen = \"127.0.0.1:{metrics_port}\"\n{names}\
         [databases.app]\nhost = \"127.0.0.1\"\nport = {}\ndbname = \"postgres\"\npool_size = 4\n\
         [users.postgres]\npassword = \"secret\"\n",
        postgres().port
    )
}

fn start(names: Option<&str>) -> (Pglane, u16) {
    let metrics_port = free_port();
    (Pglane::start_with_args(&config(metrics_port, names), &["--cores", "2"]), metrics_port)
}

/// The body of `GET /metrics`, which must answer 200.
fn scrape(metrics_port: u16) -> String {
    let mut s = TcpStream::connect(("127.0.0.1", metrics_port)).expect("connect to metrics_listen");
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(s, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let mut response = String::new();
    s.read_to_string(&mut response).unwrap();
    assert!(response.starts_with("HTTP/1.1 200 OK"), "{response}");
    let (_, body) = response.split_once("\r\n\r\n").expect("a head and a body");
    body.to_owned()
}

/// One sample line: name, labels, value.
#[derive(Debug)]
struct Sample {
    name: String,
    labels: BTreeMap<String, String>,
    value: f64,
}

/// `name{a="x",b="y"} value` or `name value`, label values unescaped.
fn parse_sample(line: &str) -> Sample {
    let (series, value) = line.rsplit_once(' ').unwrap_or_else(|| panic!("no value: {line}"));
    let value = value.parse::<f64>().unwrap_or_else(|_| panic!("no number: {line}"));
    let Some((name, rest)) = series.split_once('{') else {
        return Sample { name: series.to_owned(), labels: BTreeMap::new(), value };
    };
    let mut labels = BTreeMap::new();
    let mut chars = rest.strip_suffix('}').unwrap_or_else(|| panic!("unclosed labels: {line}")).chars().peekable();
    while chars.peek().is_some() {
        let label: String = chars.by_ref().take_while(|&c| c != '=').collect();
        assert_eq!(chars.next(), Some('"'), "{line}");
        let mut text = String::new();
        while let Some(c) = chars.next() {
            match c {
                '"' => break,
                '\\' => match chars.next() {
                    Some('n') => text.push('\n'),
                    Some(other) => text.push(other),
                    None => panic!("dangling escape: {line}"),
                },
                c => text.push(c),
            }
        }
        labels.insert(label, text);
        if chars.peek() == Some(&',') {
            chars.next();
        }
    }
    Sample { name: name.to_owned(), labels, value }
}

fn samples(body: &str) -> Vec<Sample> {
    body.lines().filter(|l| !l.is_empty() && !l.starts_with('#')).map(parse_sample).collect()
}

/// The families a body declares (`# TYPE` lines).
fn families(body: &str) -> BTreeSet<String> {
    body.lines().filter_map(|l| l.strip_prefix("# TYPE ")).filter_map(|l| l.split(' ').next()).map(str::to_owned).collect()
}

/// The value of the one sample of `name` with these labels.
fn value(all: &[Sample], name: &str, labels: &[(&str, &str)]) -> f64 {
    let found: Vec<&Sample> = all
        .iter()
        .filter(|s| s.name == name && labels.iter().all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v)))
        .collect();
    assert_eq!(found.len(), 1, "{name}{labels:?}: {found:?}");
    found[0].value
}

/// An admin console command's rows as (column → value) maps.
fn console(port: u16, command: &str) -> Vec<BTreeMap<String, String>> {
    let out = Psql::tcp(port, "postgres", "secret", "pgbouncer").with_header().command(command).run().expect("console");
    let mut lines = out.lines();
    let header: Vec<String> = lines.next().expect("a header").split('|').map(str::to_owned).collect();
    lines
        .map(|l| l.split('|').map(str::to_owned).collect::<Vec<_>>())
        .filter(|cells| cells.len() == header.len())
        .map(|cells| header.iter().cloned().zip(cells).collect())
        .collect()
}

fn stats_totals_of_app(port: u16) -> BTreeMap<String, String> {
    console(port, "SHOW STATS_TOTALS").into_iter().find(|r| r["database"] == "app").expect("a row for app")
}

/// `n` transactions of two statements, `n` single queries, and `n`
/// executions of one named prepared statement (tokio-postgres' `s0`...).
async fn run_transactions(c: &tokio_postgres::Client, n: usize) {
    let named = c.prepare("select $1::int + 1").await.unwrap();
    for i in 0..n {
        c.batch_execute(&format!("begin; select {i}; select pg_sleep(0.001); commit")).await.unwrap();
        c.simple_query("select 1").await.unwrap();
        c.query_one(&named, &[&(i as i32)]).await.unwrap();
    }
}

#[tokio::test]
async fn pgbouncer_names_are_the_exporters_with_the_consoles_figures() {
    let (lane, metrics_port) = start(Some("pgbouncer"));
    let c = connect(lane.port, "postgres", "secret", "app").await;
    run_transactions(&c, 5).await;

    let body = scrape(metrics_port);
    let all = samples(&body);
    let declared = families(&body);
    for (name, labels) in EXPECTED {
        assert!(declared.contains(*name), "no family {name}:\n{body}");
        let mine: Vec<&Sample> = all.iter().filter(|s| s.name == *name).collect();
        assert!(!mine.is_empty(), "no sample of {name}:\n{body}");
        for s in mine {
            let names: Vec<&str> = s.labels.keys().map(String::as_str).collect();
            assert_eq!(&names, labels, "label names of {s:?}");
        }
    }
    let expected: BTreeSet<&str> = EXPECTED.iter().map(|(n, _)| *n).collect();
    let unexpected: Vec<&String> = declared.iter().filter(|n| !expected.contains(n.as_str())).collect();
    assert!(unexpected.is_empty(), "families pgbouncer_exporter does not have: {unexpected:?}");
    assert!(!body.contains("pgbouncer_stats_totals_queries_total"), "a family no PgBouncer since 1.8 gives");
    assert!(!body.contains("pglane_"), "pglane's names with metrics_names = \"pgbouncer\"");
    assert_eq!(value(&all, "pgbouncer_up", &[]), 1.0);
    assert_eq!(value(&all, "pgbouncer_version_info", &[("version", &format!("pglane {}", env!("CARGO_PKG_VERSION")))]), 1.0);
    assert_eq!(value(&all, "pgbouncer_config_max_client_connections", &[]), 10_000.0);
    let port = postgres().port.to_string();
    let app = [("name", "app"), ("database", "postgres"), ("host", "127.0.0.1"), ("port", port.as_str()), ("force_user", "")];
    assert_eq!(value(&all, "pgbouncer_databases_pool_size", &app), 4.0);
    assert_eq!(value(&all, "pgbouncer_pools_client_active_connections", &[("database", "app"), ("user", "postgres")]), 1.0);
    assert_eq!(
        value(&all, "pgbouncer_client_connections", &[("database", "app"), ("user", "postgres"), ("state", "active")]),
        1.0
    );

    // The seconds are the console's microseconds × 1e-6, bit for bit: read
    // while the figures stand still (console, scrape, console agree).
    let mut agreed = false;
    for _ in 0..20 {
        let before = stats_totals_of_app(lane.port);
        let now = samples(&scrape(metrics_port));
        if stats_totals_of_app(lane.port) != before {
            tokio::time::sleep(Duration::from_millis(200)).await;
            continue;
        }
        let micros = |column: &str| before[column].parse::<f64>().expect("a number");
        for (column, name) in [
            ("query_time", "pgbouncer_stats_totals_queries_duration_seconds_total"),
            ("xact_time", "pgbouncer_stats_totals_server_in_transaction_seconds_total"),
            ("wait_time", "pgbouncer_stats_totals_client_wait_seconds_total"),
        ] {
            assert_eq!(value(&now, name, &[("database", "app")]), micros(column) * 1e-6, "{name} vs {column} {}", before[column]);
        }
        assert!(micros("xact_time") > 0.0 && micros("query_time") > 0.0, "{before:?}");
        // One named statement parsed by the client (and Described: its
        // Parse reached a server once at least), bound 5 times; a server
        // connection assigned for each transaction at least.
        assert_eq!(micros("client_parse_count"), 1.0, "{before:?}");
        assert!(micros("server_parse_count") >= 1.0, "{before:?}");
        assert_eq!(micros("bind_count"), 5.0, "{before:?}");
        assert!(micros("server_assignment_count") >= micros("xact_count"), "{before:?}");
        for (column, name) in [
            ("xact_count", "pgbouncer_stats_totals_sql_transactions_pooled_total"),
            ("query_count", "pgbouncer_stats_totals_queries_pooled_total"),
            ("bytes_received", "pgbouncer_stats_totals_received_bytes_total"),
            ("bytes_sent", "pgbouncer_stats_totals_sent_bytes_total"),
            ("client_parse_count", "pgbouncer_stats_totals_client_parses_total"),
            ("server_parse_count", "pgbouncer_stats_totals_server_parses_total"),
            ("bind_count", "pgbouncer_stats_totals_binds_total"),
            ("server_assignment_count", "pgbouncer_stats_totals_server_assignments_total"),
        ] {
            assert_eq!(value(&now, name, &[("database", "app")]), micros(column), "{name} vs {column}");
        }
        agreed = true;
        break;
    }
    assert!(agreed, "SHOW STATS_TOTALS never stood still");

    // Counters grow with traffic.
    let counters = [
        "pgbouncer_stats_totals_sql_transactions_pooled_total",
        "pgbouncer_stats_totals_queries_pooled_total",
        "pgbouncer_stats_totals_received_bytes_total",
        "pgbouncer_stats_totals_sent_bytes_total",
        "pgbouncer_stats_totals_server_in_transaction_seconds_total",
        "pgbouncer_stats_totals_queries_duration_seconds_total",
        "pgbouncer_stats_totals_client_parses_total",
        "pgbouncer_stats_totals_binds_total",
        "pgbouncer_stats_totals_server_assignments_total",
    ];
    let first = samples(&scrape(metrics_port));
    run_transactions(&c, 5).await;
    let second = samples(&scrape(metrics_port));
    for name in counters {
        let (a, b) = (value(&first, name, &[("database", "app")]), value(&second, name, &[("database", "app")]));
        assert!(b > a, "{name} did not grow: {a} then {b}");
    }
    let xacts = |s: &[Sample]| value(s, "pgbouncer_stats_totals_sql_transactions_pooled_total", &[("database", "app")]);
    assert!(xacts(&second) - xacts(&first) >= 5.0, "5 transactions and 5 single queries");
}

#[tokio::test]
async fn both_serves_both_sets_and_the_default_only_pglanes() {
    let has = |body: &str, prefix: &str| families(body).iter().any(|f| f.starts_with(prefix));
    let (lane, metrics_port) = start(Some("both"));
    let c = connect(lane.port, "postgres", "secret", "app").await;
    run_transactions(&c, 2).await;
    let body = scrape(metrics_port);
    assert!(has(&body, "pglane_") && has(&body, "pgbouncer_"), "{body}");
    let all = samples(&body);
    let pglane_xacts: f64 =
        all.iter().filter(|s| s.name == "pglane_pool_transactions_total" && s.labels["database"] == "app").map(|s| s.value).sum();
    assert_eq!(value(&all, "pgbouncer_stats_totals_sql_transactions_pooled_total", &[("database", "app")]), pglane_xacts);

    let (lane, metrics_port) = start(None);
    let c = connect(lane.port, "postgres", "secret", "app").await;
    run_transactions(&c, 2).await;
    let body = scrape(metrics_port);
    assert!(has(&body, "pglane_"), "{body}");
    assert!(!body.contains("pgbouncer_"), "{body}");
}

/// The PromQL of a dashboard: panel targets' `expr`, and template
/// variables' `query` and `definition`, wherever they sit.
fn promql(value: &serde_json::Value, out: &mut Vec<String>) {
    match value {
        serde_json::Value::Array(items) => items.iter().for_each(|v| promql(v, out)),
        serde_json::Value::Object(map) => {
            for (key, v) in map {
                match (key.as_str(), v) {
                    ("expr" | "query" | "definition", serde_json::Value::String(text)) => out.push(text.clone()),
                    _ => promql(v, out),
                }
            }
        }
        _ => {}
    }
}

/// The `pgbouncer_[a-z_]+` names in a PromQL text.
fn metric_names(text: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find("pgbouncer_") {
        let starts_a_name = !rest[..at].ends_with(|c: char| c.is_ascii_alphanumeric() || c == '_');
        let tail = &rest[at..];
        let end = tail.find(|c: char| !(c.is_ascii_lowercase() || c == '_')).unwrap_or(tail.len());
        if starts_a_name {
            names.push(tail[..end].to_owned());
        }
        rest = &tail[end.max(1)..];
    }
    names
}

#[test]
fn the_grafana_dashboard_uses_only_names_pglane_serves() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/grafana/pglane-pgbouncer.json");
    let dashboard: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).expect("the dashboard")).expect("JSON");

    let config =
        pglane::config::Config::parse("listen = \"127.0.0.1:6432\"\nmetrics_names = \"pgbouncer\"\n[databases.app]\n").unwrap();
    let served = families(&pglane::admin::metrics::exposition(&[], 0, &config, true));
    let mut texts = Vec::new();
    promql(&dashboard, &mut texts);
    let used: BTreeSet<String> = texts.iter().flat_map(|t| metric_names(t)).collect();
    let stale: Vec<&String> = used.iter().filter(|name| !served.contains(*name)).collect();
    assert!(stale.is_empty(), "the dashboard uses names pglane does not serve: {stale:?}");
    assert!(used.len() >= 15, "only {used:?}");

    let variables: BTreeSet<&str> =
        dashboard["templating"]["list"].as_array().expect("variables").iter().filter_map(|v| v["name"].as_str()).collect();
    for name in ["datasource", "database", "user"] {
        assert!(variables.contains(name), "no ${name} variable: {variables:?}");
    }
    let panels = dashboard["panels"].as_array().expect("panels");
    for panel in panels.iter().filter(|p| p["type"] != "row") {
        let exprs: Vec<&str> = panel["targets"].as_array().into_iter().flatten().filter_map(|t| t["expr"].as_str()).collect();
        assert!(!exprs.is_empty(), "a panel without a query: {}", panel["title"]);
        assert_eq!(panel["datasource"]["uid"], "${datasource}", "{}", panel["title"]);
    }
    assert_eq!(
        metric_names("rate(pgbouncer_up[5m]) / xpgbouncer_no + pgbouncer_pools{x=\"pgbouncer\"}"),
        ["pgbouncer_up", "pgbouncer_pools"]
    );
}
