//! The Prometheus / OpenMetrics text endpoint (`metrics_listen`): the same
//! figures as the admin console, over plain HTTP, in pglane's own names
//! (here) or pgbouncer_exporter's (`metrics_pgbouncer`), as
//! `metrics_names` says.
//!
//! A tiny HTTP/1.1 responder written by hand: it answers `GET /metrics` (and
//! nothing else) once per connection, which is all a scraper needs; a web
//! framework would be most of the binary for that.

use std::fmt::Write as _;
use std::rc::Rc;
use std::time::Duration;

use futures_lite::{AsyncReadExt, AsyncWriteExt};

use crate::config::Config;
use crate::net::Stream;
use crate::rt::with_timeout;
use crate::runtime::snapshot::ShardSnapshot;
use crate::runtime::{ClientState, Shard};

/// Largest request head read.
const MAX_REQUEST: usize = 8192;

/// Serves one scrape connection.
pub async fn serve(shard: &Rc<Shard>, mut stream: Stream) {
    let mut request = Vec::with_capacity(1024);
    let head = async {
        let mut chunk = [0u8; 1024];
        while !request.windows(4).any(|w| w == b"\r\n\r\n") && request.len() < MAX_REQUEST {
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => return false,
                Ok(n) => request.extend_from_slice(&chunk[..n]),
            }
        }
        true
    };
    if with_timeout(Duration::from_secs(5), head).await != Some(true) {
        return;
    }
    let line = request.split(|&b| b == b'\r').next().unwrap_or_default();
    let response = match line.split(|&b| b == b' ').collect::<Vec<_>>().as_slice() {
        [b"GET", path, ..] if path.split(|&b| b == b'?').next() == Some(b"/metrics") => {
            let snapshots = super::snapshots(shard).await;
            let complete = snapshots.len() == shard.shards;
            let body = exposition(&snapshots, shard.client_count(), &shard.shared.config.load(), complete);
            format!("HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len())
        }
        _ => "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".to_owned(),
    };
    let _ = stream.write_all(response.as_bytes()).await;
    let _ = stream.close().await;
}

/// The exposition text for these snapshots, in the names `metrics_names`
/// asks for. `complete`: every shard answered.
pub fn exposition(snapshots: &[ShardSnapshot], clients: usize, config: &Config, complete: bool) -> String {
    let mut text = String::new();
    if config.metrics_names.serves_pglane_names() {
        text.push_str(&render(snapshots, clients));
    }
    if config.metrics_names.serves_pgbouncer_names() {
        text.push_str(&super::metrics_pgbouncer::render(snapshots, config, complete));
    }
    text
}

/// The exposition text for these snapshots, in pglane's names.
pub fn render(snapshots: &[ShardSnapshot], clients: usize) -> String {
    let mut out = String::new();
    let mut family = |name: &str, kind: &str, help: &str, samples: Vec<(String, u64)>| {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
        for (labels, value) in samples {
            let _ = writeln!(out, "{name}{labels} {value}");
        }
    };
    family("pglane_clients", "gauge", "Client connections open.", vec![(String::new(), clients as u64)]);
    family("pglane_shards", "gauge", "Shards (pinned cores).", vec![(String::new(), snapshots.len() as u64)]);

    let pools: Vec<_> = snapshots.iter().flat_map(|s| s.pools.iter().map(move |p| (s.shard, p))).collect();
    let labels = |shard: usize, db: &str, user: &str| {
        format!("{{shard=\"{shard}\",database=\"{}\",user=\"{}\"}}", escape(db), escape(user))
    };
    let per_pool = |f: &dyn Fn(&crate::runtime::snapshot::PoolSnapshot) -> u64| {
        pools.iter().map(|(shard, p)| (labels(*shard, &p.database, &p.user), f(p))).collect::<Vec<_>>()
    };
    family("pglane_pool_clients_active", "gauge", "Clients not waiting for a server.", per_pool(&|p| p.active_clients as u64));
    family(
        "pglane_pool_clients_waiting",
        "gauge",
        "Clients waiting for a server connection.",
        per_pool(&|p| p.waiting_clients as u64),
    );
    family(
        "pglane_pool_servers_open",
        "gauge",
        "Server connections open (lent, idle or logging in).",
        per_pool(&|p| p.open as u64),
    );
    family("pglane_pool_servers_idle", "gauge", "Idle server connections.", per_pool(&|p| p.idle as u64));
    family("pglane_pool_size", "gauge", "pool_size, over all shards (each shard reports it).", per_pool(&|p| p.max_size as u64));
    family(
        "pglane_pool_max_wait_microseconds",
        "gauge",
        "Longest current wait for a server connection.",
        per_pool(&|p| p.max_wait.as_micros() as u64),
    );
    family("pglane_pool_transactions_total", "counter", "Transactions served.", per_pool(&|p| p.stats.xact_count));
    family("pglane_pool_queries_total", "counter", "Queries and Syncs answered.", per_pool(&|p| p.stats.query_count));
    family(
        "pglane_pool_received_bytes_total",
        "counter",
        "Bytes from clients to servers.",
        per_pool(&|p| p.stats.bytes_received),
    );
    family("pglane_pool_sent_bytes_total", "counter", "Bytes from servers to clients.", per_pool(&|p| p.stats.bytes_sent));
    family(
        "pglane_pool_server_received_bytes_total",
        "counter",
        "Bytes read from servers.",
        per_pool(&|p| p.stats.bytes_from_server),
    );
    family(
        "pglane_pool_transaction_microseconds_total",
        "counter",
        "Time clients held server connections.",
        per_pool(&|p| p.stats.xact_time_us),
    );
    family("pglane_pool_query_microseconds_total", "counter", "Time in queries.", per_pool(&|p| p.stats.query_time_us));
    family(
        "pglane_pool_wait_microseconds_total",
        "counter",
        "Time clients waited for server connections.",
        per_pool(&|p| p.stats.wait_time_us),
    );
    family(
        "pglane_pool_pipelined_total",
        "counter",
        "Requests sent to a server behind another client's (server_pipelining).",
        per_pool(&|p| p.stats.pipelined),
    );
    family(
        "pglane_pool_wait_timeouts_total",
        "counter",
        "Clients that gave up waiting (query_wait_timeout).",
        per_pool(&|p| p.stats.wait_timeouts),
    );
    family("pglane_pool_server_connects_total", "counter", "Server connections opened.", per_pool(&|p| p.stats.connects));
    family(
        "pglane_pool_server_connect_failures_total",
        "counter",
        "Server connections that failed to open.",
        per_pool(&|p| p.stats.connect_failures),
    );

    let shard_label = |s: &ShardSnapshot| format!("{{shard=\"{}\"}}", s.shard);
    let per_shard = |f: &dyn Fn(&ShardSnapshot) -> u64| snapshots.iter().map(|s| (shard_label(s), f(s))).collect::<Vec<_>>();
    family("pglane_shard_clients", "gauge", "Clients per shard.", per_shard(&|s| s.clients.len() as u64));
    family(
        "pglane_shard_clients_waiting",
        "gauge",
        "Waiting clients per shard.",
        per_shard(&|s| s.clients.iter().filter(|c| c.state == ClientState::Waiting).count() as u64),
    );
    family(
        "pglane_notify_listening_clients",
        "gauge",
        "Clients listening through the notification hub.",
        per_shard(&|s| s.notify.listening_clients as u64),
    );
    family(
        "pglane_notify_channels",
        "gauge",
        "Channels the notification hub listens to.",
        per_shard(&|s| s.notify.channels as u64),
    );
    family(
        "pglane_notify_listening_connections",
        "gauge",
        "The notification hub's listening server connections.",
        per_shard(&|s| s.notify.listening_connections as u64),
    );
    family(
        "pglane_notify_received_total",
        "counter",
        "Notifications the listening connections received.",
        per_shard(&|s| s.notify.stats.received),
    );
    family(
        "pglane_notify_delivered_total",
        "counter",
        "Notifications passed to a listening client.",
        per_shard(&|s| s.notify.stats.delivered),
    );
    family(
        "pglane_notify_dropped_total",
        "counter",
        "Notifications dropped for a client over notify_client_buffer.",
        per_shard(&|s| s.notify.stats.dropped),
    );
    family(
        "pglane_notify_connections_lost_total",
        "counter",
        "Listening connections lost (and opened again).",
        per_shard(&|s| s.notify.stats.connections_lost),
    );
    let routers: Vec<_> = snapshots.iter().flat_map(|s| s.routing.iter().map(move |r| (s.shard, r))).collect();
    let per_router = |f: &dyn Fn(&crate::router::RouterStats) -> u64| {
        routers.iter().map(|(shard, r)| (labels(*shard, &r.database, &r.user), f(&r.stats))).collect::<Vec<_>>()
    };
    family(
        "pglane_routing_reads_to_standbys_total",
        "counter",
        "Transactions read routing sent to a standby.",
        per_router(&|r| r.reads_to_standbys),
    );
    family(
        "pglane_routing_to_primary_total",
        "counter",
        "Transactions of a routed database sent to the primary.",
        per_router(&|r| r.to_primary),
    );
    family(
        "pglane_routing_stale_reads_avoided_total",
        "counter",
        "Reads sent to the primary because no standby had replayed the client's last write.",
        per_router(&|r| r.stale_reads_avoided),
    );
    family(
        "pglane_routing_no_standby_total",
        "counter",
        "Reads sent to the primary because no standby was up, in recovery and within the lag bound.",
        per_router(&|r| r.no_standby),
    );
    family(
        "pglane_routing_positions_learned_total",
        "counter",
        "Clients' positions after their transactions on the primary, learned from the monitor's next look at it.",
        per_router(&|r| r.positions_learned),
    );
    family(
        "pglane_routing_retried_on_primary_total",
        "counter",
        "Reads a standby refused as writes or could not answer, run again on the primary before anything reached the client.",
        per_router(&|r| r.retried_on_primary),
    );
    let hosts: Vec<_> = routers.iter().flat_map(|(shard, r)| r.hosts.iter().map(move |h| (*shard, *r, h))).collect();
    let host_labels = |shard: usize, r: &crate::runtime::snapshot::RoutingSnapshot, h: &crate::runtime::snapshot::RoutedHost| {
        format!(
            "{{shard=\"{shard}\",database=\"{}\",user=\"{}\",host=\"{}\",role=\"{}\"}}",
            escape(&r.database),
            escape(&r.user),
            escape(&h.address),
            h.view.role.as_str()
        )
    };
    family(
        "pglane_routing_host_reads_total",
        "counter",
        "Transactions a host's pool of reads served.",
        hosts.iter().map(|(shard, r, h)| (host_labels(*shard, r, h), h.reads)).collect(),
    );
    family(
        "pglane_routing_host_lag_bytes",
        "gauge",
        "A standby's replay position behind the newest primary position seen.",
        hosts.iter().filter_map(|(shard, r, h)| Some((host_labels(*shard, r, h), h.lag?))).collect(),
    );
    family("pglane_prepared_statements", "gauge", "Statements in the shard's registry.", per_shard(&|s| s.statements as u64));
    family(
        "pglane_prepared_client_parses_total",
        "counter",
        "Named Parse messages from clients.",
        per_shard(&|s| s.prepare.client_parses),
    );
    family(
        "pglane_prepared_server_parses_total",
        "counter",
        "Parse messages sent to servers.",
        per_shard(&|s| s.prepare.server_parses),
    );
    family(
        "pglane_prepared_parses_answered_total",
        "counter",
        "Client Parses answered without a server.",
        per_shard(&|s| s.prepare.parses_answered),
    );
    family(
        "pglane_prepared_describes_answered_total",
        "counter",
        "Describes answered from the cache.",
        per_shard(&|s| s.prepare.describes_answered),
    );
    family(
        "pglane_prepared_evictions_total",
        "counter",
        "Statements closed on servers to make room.",
        per_shard(&|s| s.prepare.evictions),
    );
    family("pglane_auto_prepare_shapes", "gauge", "Query shapes in the auto-prepare cache.", per_shard(&|s| s.prepare.shapes));
    family(
        "pglane_auto_prepare_rewrites_total",
        "counter",
        "Simple queries run as a prepared statement.",
        per_shard(&|s| s.prepare.rewrites),
    );
    family(
        "pglane_auto_prepare_pass_throughs_total",
        "counter",
        "Simple queries passed through unchanged with auto-prepare on.",
        per_shard(&|s| s.prepare.pass_throughs),
    );
    let reasons = snapshots
        .iter()
        .flat_map(|s| {
            s.prepare
                .pass_through_reasons
                .iter()
                .map(move |(reason, n)| (format!("{{shard=\"{}\",reason=\"{}\"}}", s.shard, reason.label()), n))
        })
        .collect();
    family(
        "pglane_auto_prepare_pass_throughs_by_reason_total",
        "counter",
        "Simple queries passed through unchanged with auto-prepare on, by reason.",
        reasons,
    );
    family(
        "pglane_auto_prepare_rewrite_timed_nanoseconds_total",
        "counter",
        "Time spent lexing, looking up and rewriting the timed queries run as a prepared statement (one query in 16 is timed).",
        per_shard(&|s| s.prepare.rewrite_ns),
    );
    family(
        "pglane_auto_prepare_rewrites_timed_total",
        "counter",
        "Rewritten queries timed.",
        per_shard(&|s| s.prepare.rewrites_timed),
    );
    family(
        "pglane_auto_prepare_pass_through_timed_nanoseconds_total",
        "counter",
        "Time spent lexing and looking up the timed queries passed through.",
        per_shard(&|s| s.prepare.pass_through_ns),
    );
    family(
        "pglane_auto_prepare_pass_throughs_timed_total",
        "counter",
        "Passed-through queries timed.",
        per_shard(&|s| s.prepare.pass_through_timed),
    );
    family(
        "pglane_auto_prepare_shapes_queued",
        "gauge",
        "Query shapes waiting for validation.",
        per_shard(&|s| s.prepare.shapes_queued),
    );
    family(
        "pglane_auto_prepare_parses_in_flight",
        "gauge",
        "Query shapes being parsed off the shard thread.",
        per_shard(&|s| s.prepare.parses_in_flight),
    );
    family(
        "pglane_auto_prepare_respellings_total",
        "counter",
        "Spellings of a query shape that took another spelling's verdict.",
        per_shard(&|s| s.prepare.respellings),
    );
    family(
        "pglane_auto_prepare_validations_total",
        "counter",
        "Query shapes checked on a side connection.",
        per_shard(&|s| s.prepare.validations),
    );
    family(
        "pglane_auto_prepare_validation_failures_total",
        "counter",
        "Query shapes found not rewritable.",
        per_shard(&|s| s.prepare.validation_failures),
    );
    family(
        "pglane_auto_prepare_reruns_total",
        "counter",
        "Requests run again because their statement was stale on the server (DDL pglane did not see).",
        per_shard(&|s| s.prepare.reruns),
    );
    family(
        "pglane_auto_prepare_unnamed_mapped_total",
        "counter",
        "Unnamed statements run as a shared named statement.",
        per_shard(&|s| s.prepare.unnamed_mapped),
    );
    family(
        "pglane_negotiated_portals_total",
        "counter",
        "Binds that asked the server for binary on a text client's behalf.",
        per_shard(&|s| s.prepare.portals_negotiated),
    );
    family(
        "pglane_transcoded_values_total",
        "counter",
        "Values transcoded from binary to the client's text.",
        per_shard(&|s| s.prepare.values_transcoded),
    );
    family(
        "pglane_negotiated_big_rows_total",
        "counter",
        "Negotiated DataRows over the small-row cap, transcoded whole.",
        per_shard(&|s| s.prepare.big_rows),
    );
    family(
        "pglane_negotiation_big_row_statements_total",
        "counter",
        "Statements whose columns of unbounded size are no longer negotiated: a row went over the small-row cap.",
        per_shard(&|s| s.prepare.big_row_statements),
    );
    out
}

/// A label value as the text format wants it.
pub(super) fn escape(v: &str) -> String {
    v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_process_still_describes_itself() {
        let text = render(&[], 3);
        assert!(text.contains("# TYPE pglane_clients gauge\npglane_clients 3\n"));
        assert!(text.contains("# TYPE pglane_pool_transactions_total counter\n"));
    }

    #[test]
    fn pass_throughs_are_labelled_by_reason() {
        use crate::prepare::auto::PassThrough;
        let mut shard = ShardSnapshot { shard: 2, ..ShardSnapshot::default() };
        shard.prepare.pass_through_reasons.count(PassThrough::QueueFull);
        shard.prepare.rewrite_ns = 5_500;
        let text = render(&[shard], 0);
        assert!(
            text.contains("pglane_auto_prepare_pass_throughs_by_reason_total{shard=\"2\",reason=\"queue_full\"} 1\n"),
            "{text}"
        );
        assert!(text
            .contains("pglane_auto_prepare_pass_throughs_by_reason_total{shard=\"2\",reason=\"lexer_multiple_statements\"} 0\n"));
        assert!(text.contains("pglane_auto_prepare_rewrite_timed_nanoseconds_total{shard=\"2\"} 5500\n"));
    }

    #[test]
    fn read_routing_is_counted_per_router_and_host() {
        use crate::router::{HostView, Role, RouterStats};
        use crate::runtime::snapshot::{RoutedHost, RoutingSnapshot};
        let host = |address: &str, role, lag, reads| RoutedHost {
            address: address.into(),
            view: HostView { role, ..HostView::default() },
            lag,
            reads,
        };
        let shard = ShardSnapshot {
            shard: 1,
            routing: vec![RoutingSnapshot {
                database: "app".into(),
                user: "u".into(),
                hosts: vec![host("10.0.0.1:5432", Role::Primary, None, 0), host("10.0.0.2:5432", Role::Standby, Some(4096), 70)],
                stats: RouterStats {
                    reads_to_standbys: 70,
                    to_primary: 30,
                    stale_reads_avoided: 12,
                    no_standby: 1,
                    positions_learned: 17,
                    retried_on_primary: 2,
                },
            }],
            ..ShardSnapshot::default()
        };
        let text = render(&[shard], 0);
        let router = "{shard=\"1\",database=\"app\",user=\"u\"}";
        for (family, value) in [
            ("reads_to_standbys_total", 70),
            ("to_primary_total", 30),
            ("stale_reads_avoided_total", 12),
            ("no_standby_total", 1),
            ("positions_learned_total", 17),
            ("retried_on_primary_total", 2),
        ] {
            assert!(text.contains(&format!("pglane_routing_{family}{router} {value}\n")), "{family}:\n{text}");
        }
        let standby = "{shard=\"1\",database=\"app\",user=\"u\",host=\"10.0.0.2:5432\",role=\"standby\"}";
        assert!(text.contains(&format!("pglane_routing_host_reads_total{standby} 70\n")), "{text}");
        assert!(text.contains(&format!("pglane_routing_host_lag_bytes{standby} 4096\n")), "{text}");
        assert!(
            !text.contains("pglane_routing_host_lag_bytes{shard=\"1\",database=\"app\",user=\"u\",host=\"10.0.0.1"),
            "no lag for the primary"
        );
    }

    #[test]
    fn metrics_names_picks_the_families() {
        let config = |names: &str| {
            Config::parse(&format!("listen = \"127.0.0.1:6432\"\nmetrics_names = \"{names}\"\n[databases.app]\n")).unwrap()
        };
        let families = |names: &str| {
            let text = exposition(&[], 0, &config(names), true);
            let has = |prefix: &str| text.lines().any(|l| l.starts_with(&format!("# TYPE {prefix}")));
            (has("pglane_"), has("pgbouncer_"))
        };
        assert_eq!(families("pglane"), (true, false));
        assert_eq!(families("pgbouncer"), (false, true));
        assert_eq!(families("both"), (true, true));
    }

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(escape("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }
}
