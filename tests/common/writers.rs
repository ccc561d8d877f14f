//! Clients writing through pglane in a loop, reconnecting when their
//! connection is gone, as applications do: the load of the fault and
//! failover tests. Each operation is reported as it ends; the caller keeps
//! its own tally.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Why an operation failed.
pub enum Failure {
    Connect(tokio_postgres::Error),
    Statement(tokio_postgres::Error),
    /// It took longer than [`Writers::hang`].
    Hang,
}

/// One operation of one writer: a connection when it had none, then its
/// statement `n` (counted from 1, per writer).
pub struct Op {
    pub writer: usize,
    pub n: u64,
    pub started: Instant,
    pub ended: Instant,
    pub failure: Option<Failure>,
}

/// Who writes what, where.
pub struct Writers {
    pub port: u16,
    pub user: &'static str,
    pub password: &'static str,
    pub db: &'static str,
    pub count: usize,
    /// An operation slower than this is a hang.
    pub hang: Duration,
    /// The simple-query text of statement `n` of writer `w`.
    pub sql: fn(usize, u64) -> String,
}

impl Writers {
    /// Starts the writers on `rt`; they stop once `stop` is set.
    pub fn spawn(
        self,
        rt: &tokio::runtime::Runtime,
        stop: Arc<AtomicBool>,
        report: impl Fn(Op) + Send + Sync + 'static,
    ) -> Vec<tokio::task::JoinHandle<()>> {
        let (spec, report) = (Arc::new(self), Arc::new(report));
        (0..spec.count)
            .map(|w| {
                let (spec, stop, report) = (spec.clone(), stop.clone(), report.clone());
                rt.spawn(async move {
                    let mut client: Option<tokio_postgres::Client> = None;
                    let mut n = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        let started = Instant::now();
                        let op = |n, failure| Op { writer: w, n, started, ended: Instant::now(), failure };
                        if client.as_ref().is_none_or(|c| c.is_closed()) {
                            let connect = super::try_connect(spec.port, spec.user, spec.password, spec.db);
                            match tokio::time::timeout(spec.hang, connect).await {
                                Ok(Ok(c)) => client = Some(c),
                                Ok(Err(e)) => {
                                    report(op(n, Some(Failure::Connect(e))));
                                    tokio::time::sleep(Duration::from_millis(20)).await;
                                    continue;
                                }
                                Err(_) => {
                                    report(op(n, Some(Failure::Hang)));
                                    continue;
                                }
                            }
                        }
                        n += 1;
                        let sql = (spec.sql)(w, n);
                        let run = client.as_ref().expect("connected above").batch_execute(&sql);
                        match tokio::time::timeout(spec.hang, run).await {
                            Ok(Ok(())) => report(op(n, None)),
                            Ok(Err(e)) => {
                                report(op(n, Some(Failure::Statement(e))));
                                client = None;
                                tokio::time::sleep(Duration::from_millis(10)).await;
                            }
                            Err(_) => {
                                report(op(n, Some(Failure::Hang)));
                                client = None;
                            }
                        }
                    }
                })
            })
            .collect()
    }
}
