//! What pgload prints: the progress line, the final report for people and the
//! same report as JSON for machines.
//!
//! This module owns the wording and the JSON field names (bench/compare and
//! tests read them: change them only together). It computes nothing but
//! ratios of what [`Stats`] holds, and prints nothing itself.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use clap::ValueEnum;
use serde::Serialize;

use crate::options::{Plan, Protocol, ResultFormat, Stop, Workload};
use crate::stats::Stats;

#[derive(Debug, Serialize)]
pub struct Latency {
    pub mean: f64,
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    #[serde(rename = "p99.9")]
    pub p99_9: f64,
    pub max: f64,
}

/// The final report; serialized as is for `--json`.
#[derive(Debug, Serialize)]
pub struct Report {
    pub pgload_version: &'static str,
    pub server: String,
    pub database: String,
    pub user: String,
    /// A built-in scenario's name, or the script file's path.
    pub scenario: String,
    pub scale: u32,
    pub protocol: Protocol,
    pub result_format: ResultFormat,
    pub connections: usize,
    /// Connections that negotiated TLS (--sslmode).
    pub tls_connections: u64,
    pub cores: usize,
    /// Target rate of an open-loop run (transactions per second), else null.
    pub rate: Option<f64>,
    pub duration_s: f64,
    pub transactions: u64,
    pub failed: u64,
    pub tps: f64,
    pub statements: u64,
    pub rows: u64,
    /// Of successful transactions, in milliseconds.
    pub latency_ms: Latency,
    /// Failed transactions and lost connections by SQLSTATE or kind.
    pub errors: BTreeMap<String, u64>,
    pub bytes_sent: u64,
    pub bytes_received: u64,
}

impl Report {
    pub fn new(plan: &Plan, scale: u32, stats: &Stats) -> Report {
        let secs = stats.elapsed().as_secs_f64();
        Report {
            pgload_version: env!("CARGO_PKG_VERSION"),
            server: plan.connect.endpoint.to_string(),
            database: plan.connect.database.clone(),
            user: plan.connect.user.clone(),
            scenario: match &plan.workload {
                Workload::Builtin(b) => value_name(*b),
                Workload::File(path) => path.display().to_string(),
            },
            scale,
            protocol: plan.protocol,
            result_format: plan.result_format,
            connections: plan.connections,
            tls_connections: stats.tls_connections,
            cores: plan.cpus.len(),
            rate: plan.rate,
            duration_s: secs,
            transactions: stats.transactions,
            failed: stats.failed,
            tps: per_second(stats.transactions, secs),
            statements: stats.statements,
            rows: stats.rows,
            latency_ms: Latency {
                mean: if stats.latency.is_empty() { 0.0 } else { stats.latency.mean() / 1000.0 },
                p50: stats.latency_ms(0.5),
                p90: stats.latency_ms(0.9),
                p99: stats.latency_ms(0.99),
                p99_9: stats.latency_ms(0.999),
                max: stats.latency_ms(1.0),
            },
            errors: stats.errors.clone(),
            bytes_sent: stats.bytes_sent,
            bytes_received: stats.bytes_received,
        }
    }

    /// The report for people, several lines.
    pub fn text(&self, stop: Stop) -> String {
        let mut s = String::new();
        let run = match stop {
            Stop::After(d) => format!("for {}", seconds(d)),
            Stop::Transactions(n) => format!("{n} transactions each"),
        };
        let pace = match self.rate {
            Some(r) => format!("open loop at {r} tx/s"),
            None => "closed loop".to_owned(),
        };
        let _ = writeln!(
            s,
            "scenario: {} (scale {}), protocol {}, results {}",
            self.scenario,
            self.scale,
            value_name(self.protocol),
            value_name(self.result_format)
        );
        let _ = writeln!(s, "server: {} database {} user {}", self.server, self.database, self.user);
        let _ = writeln!(s, "load: {} connections on {} cores, {run}, {pace}", self.connections, self.cores);
        let _ = writeln!(s, "tls: {} of {} connections", self.tls_connections, self.connections);
        let _ = writeln!(s, "duration: {:.3} s", self.duration_s);
        let _ = writeln!(s, "transactions: {} ok, {} failed", self.transactions, self.failed);
        let _ = writeln!(s, "tps: {:.1}", self.tps);
        let _ = writeln!(s, "statements: {}, rows: {}", self.statements, self.rows);
        let l = &self.latency_ms;
        let _ = writeln!(
            s,
            "latency ms: mean {:.3}  p50 {:.3}  p90 {:.3}  p99 {:.3}  p99.9 {:.3}  max {:.3}",
            l.mean, l.p50, l.p90, l.p99, l.p99_9, l.max
        );
        if self.errors.is_empty() {
            let _ = writeln!(s, "errors: none");
        } else {
            let list: Vec<_> = self.errors.iter().map(|(k, n)| format!("{k}: {n}")).collect();
            let _ = writeln!(s, "errors: {}", list.join(", "));
        }
        let per_tx = |bytes: u64| bytes.checked_div(self.transactions + self.failed).unwrap_or(0);
        let _ = writeln!(
            s,
            "bytes: sent {} ({} B/tx), received {} ({} B/tx)",
            human_bytes(self.bytes_sent),
            per_tx(self.bytes_sent),
            human_bytes(self.bytes_received),
            per_tx(self.bytes_received)
        );
        s
    }
}

/// One progress line: the interval that ended `at` after the start.
pub fn progress_line(at: Duration, interval: Duration, stats: &Stats) -> String {
    let mut line = format!(
        "progress: {:>5} s, {:>9.1} tps, lat p50 {:.3} ms p99 {:.3} ms, {} failed",
        at.as_secs(),
        per_second(stats.transactions, interval.as_secs_f64()),
        stats.latency_ms(0.5),
        stats.latency_ms(0.99),
        stats.failed
    );
    if let Some((code, _)) = stats.errors.iter().max_by_key(|(_, n)| **n) {
        let _ = write!(line, " (mostly {code})");
    }
    line
}

/// How the command line spells an option's value (`select-only`, `prepared`).
fn value_name(v: impl ValueEnum) -> String {
    v.to_possible_value().map(|p| p.get_name().to_owned()).unwrap_or_default()
}

fn per_second(count: u64, secs: f64) -> f64 {
    if secs > 0.0 {
        count as f64 / secs
    } else {
        0.0
    }
}

fn seconds(d: Duration) -> String {
    format!("{} s", d.as_secs_f64())
}

fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = n as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{n} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_read_well() {
        assert_eq!(human_bytes(0), "0 B");
        assert_eq!(human_bytes(1023), "1023 B");
        assert_eq!(human_bytes(1536), "1.5 KiB");
        assert_eq!(human_bytes(5 << 30), "5.0 GiB");
    }

    #[test]
    fn progress_names_the_commonest_error() {
        let mut s = Stats::default();
        for _ in 0..10 {
            s.record_success(Duration::from_micros(250));
        }
        s.failed = 3;
        s.record_error("40001");
        s.record_error("57014");
        s.record_error("57014");
        let line = progress_line(Duration::from_secs(3), Duration::from_millis(500), &s);
        assert_eq!(line, "progress:     3 s,      20.0 tps, lat p50 0.250 ms p99 0.250 ms, 3 failed (mostly 57014)");
    }
}
