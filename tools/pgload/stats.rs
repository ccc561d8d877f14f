//! What a run measured: counts, a latency histogram, errors by kind, bytes.
//!
//! This module owns the numbers and how two sets of them add up. One [`Stats`]
//! belongs to one core and is touched only by that core's tasks; cores send
//! theirs to the main thread when asked (a progress tick) or when done, and
//! only there are they merged. Nothing here is shared or locked.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;

/// Latencies are recorded in microseconds, from 1 µs to one hour, 3 digits.
const LATENCY_MAX_US: u64 = 3_600_000_000;

#[derive(Debug, Clone)]
pub struct Stats {
    /// Latency of each successful transaction, in µs.
    pub latency: Histogram<u64>,
    pub transactions: u64,
    pub failed: u64,
    pub statements: u64,
    pub rows: u64,
    /// Failed transactions and lost connections, by SQLSTATE or error kind.
    pub errors: BTreeMap<String, u64>,
    pub bytes_sent: u64,
    pub bytes_received: u64,
    /// Connections that negotiated TLS.
    pub tls_connections: u64,
    /// When the first transaction began and the last one ended.
    pub first_start: Option<Instant>,
    pub last_end: Option<Instant>,
}

impl Default for Stats {
    fn default() -> Self {
        Stats {
            latency: Histogram::new_with_bounds(1, LATENCY_MAX_US, 3).expect("valid histogram bounds"),
            transactions: 0,
            failed: 0,
            statements: 0,
            rows: 0,
            errors: BTreeMap::new(),
            bytes_sent: 0,
            bytes_received: 0,
            tls_connections: 0,
            first_start: None,
            last_end: None,
        }
    }
}

impl Stats {
    pub fn record_success(&mut self, latency: Duration) {
        self.transactions += 1;
        let us = u64::try_from(latency.as_micros()).unwrap_or(u64::MAX).max(1);
        self.latency.saturating_record(us);
    }

    pub fn record_error(&mut self, kind: &str) {
        match self.errors.get_mut(kind) {
            Some(n) => *n += 1,
            None => {
                self.errors.insert(kind.to_owned(), 1);
            }
        }
    }

    pub fn merge(&mut self, other: &Stats) {
        // Same bounds on both sides, so adding cannot fail.
        let _ = self.latency.add(&other.latency);
        self.transactions += other.transactions;
        self.failed += other.failed;
        self.statements += other.statements;
        self.rows += other.rows;
        for (kind, n) in &other.errors {
            *self.errors.entry(kind.clone()).or_default() += n;
        }
        self.bytes_sent += other.bytes_sent;
        self.bytes_received += other.bytes_received;
        self.tls_connections += other.tls_connections;
        self.first_start = earliest(self.first_start, other.first_start);
        self.last_end = latest(self.last_end, other.last_end);
    }

    /// From the first transaction's start to the last one's end.
    pub fn elapsed(&self) -> Duration {
        match (self.first_start, self.last_end) {
            (Some(start), Some(end)) => end.saturating_duration_since(start),
            _ => Duration::ZERO,
        }
    }

    pub fn error_count(&self) -> u64 {
        self.errors.values().sum()
    }

    /// The latency at `quantile` (0..=1), in milliseconds.
    pub fn latency_ms(&self, quantile: f64) -> f64 {
        if self.latency.is_empty() {
            return 0.0;
        }
        self.latency.value_at_quantile(quantile) as f64 / 1000.0
    }
}

fn earliest(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

fn latest(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merging_adds_everything_up() {
        let t0 = Instant::now();
        let mut a = Stats::default();
        a.record_success(Duration::from_micros(100));
        a.record_error("40001");
        a.bytes_sent = 10;
        a.first_start = Some(t0 + Duration::from_millis(5));
        a.last_end = Some(t0 + Duration::from_millis(50));
        let mut b = Stats::default();
        for _ in 0..3 {
            b.record_success(Duration::from_micros(300));
        }
        b.record_error("40001");
        b.record_error("connection lost");
        b.failed = 2;
        b.first_start = Some(t0);
        b.last_end = Some(t0 + Duration::from_millis(20));
        a.merge(&b);
        assert_eq!((a.transactions, a.failed, a.bytes_sent), (4, 2, 10));
        assert_eq!(a.errors["40001"], 2);
        assert_eq!(a.error_count(), 3);
        assert_eq!(a.elapsed(), Duration::from_millis(50));
        assert!((a.latency_ms(0.5) - 0.3).abs() < 0.001);
        assert!((a.latency_ms(0.0) - 0.1).abs() < 0.001);
    }

    #[test]
    fn empty_stats_report_zeroes() {
        let s = Stats::default();
        assert_eq!(s.latency_ms(0.99), 0.0);
        assert_eq!(s.elapsed(), Duration::ZERO);
        let mut s = Stats::default();
        s.record_success(Duration::ZERO);
        s.record_success(Duration::from_secs(10 * 3600));
        assert_eq!(s.transactions, 2);
    }
}
