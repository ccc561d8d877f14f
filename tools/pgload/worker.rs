//! One core's share of the load: an executor (pglane::rt) pinned to a CPU, running
//! its connections as tasks, each in a closed loop (next transaction as soon
//! as the last one ends) or an open loop (transactions at scheduled times).
//!
//! This module owns the threads, the timing of transactions and the per-core
//! [`Stats`]. Cores share nothing while they run: each records into its own
//! `Rc<RefCell<Stats>>`; the main thread hears from them only by message (a
//! [`Tick`] per progress interval, the final `Stats` when the core is done).
//! All connections open before any load starts (a barrier over the cores).

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Sender;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::conn::{ConnError, Connection};
use crate::options::{Plan, Stop};
use crate::session::Session;
use crate::stats::Stats;

/// One progress interval's numbers from one core.
pub struct Tick {
    pub seq: u64,
    pub stats: Stats,
}

/// What a core hands back when it is done.
pub struct CoreResult {
    pub stats: Stats,
    /// Why connections failed to open (then no core ran any load).
    pub connect_errors: Vec<ConnError>,
}

/// What the cores share to start together.
pub struct Start {
    pub barrier: Barrier,
    /// Set by a core whose connections did not all open: then nobody runs.
    pub abort: AtomicBool,
}

impl Start {
    pub fn new(cores: usize) -> Arc<Start> {
        Arc::new(Start { barrier: Barrier::new(cores), abort: AtomicBool::new(false) })
    }
}

/// Starts core `core` of `plan` on its own pinned thread.
pub fn spawn(
    plan: Arc<Plan>,
    core: usize,
    start: Arc<Start>,
    scale: u32,
    ticks: Option<Sender<Tick>>,
) -> std::io::Result<std::thread::JoinHandle<std::io::Result<CoreResult>>> {
    let cpu = plan.cpus[core];
    pglane::rt::start_pinned(&format!("pgload-{core}"), Some(cpu), move || async move {
        run_core(plan, core, start, scale, ticks).await
    })
}

/// The connections this core runs: every `cores`-th one, from `core` on.
fn connection_ids(plan: &Plan, core: usize) -> impl Iterator<Item = usize> {
    (core..plan.connections).step_by(plan.cpus.len())
}

async fn run_core(plan: Arc<Plan>, core: usize, start: Arc<Start>, scale: u32, ticks: Option<Sender<Tick>>) -> CoreResult {
    let opening: Vec<_> = connection_ids(&plan, core)
        .map(|id| {
            let plan = plan.clone();
            pglane::rt::spawn_local(async move { (id, Connection::open(&plan.connect).await) })
        })
        .collect();
    let mut sessions = Vec::new();
    let mut connect_errors = Vec::new();
    let mut tls_connections = 0;
    for task in opening {
        match task.await {
            (id, Ok(conn)) => {
                tls_connections += u64::from(conn.is_tls());
                sessions.push((id, Session::new(conn, plan.protocol, plan.result_format, &plan.script)));
            }
            (_, Err(e)) => connect_errors.push(e),
        }
    }
    if !connect_errors.is_empty() {
        start.abort.store(true, Ordering::SeqCst);
    }
    // Blocking is fine here: this thread has nothing else to do until all
    // cores are connected.
    start.barrier.wait();
    if start.abort.load(Ordering::SeqCst) {
        for (_, s) in sessions {
            s.close().await;
        }
        return CoreResult { stats: Stats::default(), connect_errors };
    }

    let began = Instant::now();
    let stats = Rc::new(RefCell::new(Stats { tls_connections, ..Stats::default() }));
    let interval = Rc::new(RefCell::new(Stats::default()));
    let ticker = match (plan.progress, ticks) {
        (Some(every), Some(tx)) => Some(pglane::rt::spawn_local(tick(began, every, interval.clone(), tx))),
        _ => None,
    };
    let loops: Vec<_> = sessions
        .into_iter()
        .map(|(id, session)| {
            let driver = Driver { plan: plan.clone(), id, scale, began, stats: stats.clone(), interval: interval.clone() };
            pglane::rt::spawn_local(driver.run(session))
        })
        .collect();
    for l in loops {
        l.await;
    }
    drop(ticker);
    let stats = stats.borrow().clone();
    CoreResult { stats, connect_errors }
}

/// Sends this core's interval numbers every `every`, until dropped.
async fn tick(began: Instant, every: Duration, interval: Rc<RefCell<Stats>>, tx: Sender<Tick>) {
    for seq in 1.. {
        let due = began + every * seq as u32;
        pglane::rt::sleep(due.saturating_duration_since(Instant::now())).await;
        let stats = std::mem::take(&mut *interval.borrow_mut());
        if tx.send(Tick { seq, stats }).is_err() {
            return;
        }
    }
}

/// Runs one connection's transactions.
struct Driver {
    plan: Arc<Plan>,
    id: usize,
    scale: u32,
    began: Instant,
    stats: Rc<RefCell<Stats>>,
    interval: Rc<RefCell<Stats>>,
}

impl Driver {
    async fn run(self, mut session: Session) {
        let plan = &*self.plan;
        let mut rng = match plan.seed {
            Some(seed) => StdRng::seed_from_u64(seed.wrapping_add(self.id as u64)),
            None => StdRng::from_entropy(),
        };
        let mut values = plan.script.new_values(i64::from(self.scale), self.id as i64);
        let deadline = match plan.stop {
            Stop::After(d) => Some(self.began + d),
            Stop::Transactions(_) => None,
        };
        let limit = match plan.stop {
            Stop::Transactions(n) => n,
            Stop::After(_) => u64::MAX,
        };
        // Open loop: this connection's share of the rate, as Poisson arrivals.
        let per_conn_rate = plan.rate.map(|r| r / plan.connections as f64);
        let mut scheduled = self.began;
        let (mut sent, mut received) = (0, 0);
        let mut done = 0;
        while done < limit {
            let start = match per_conn_rate {
                Some(rate) => {
                    let gap = -(1.0 - rng.gen::<f64>()).ln() / rate;
                    scheduled += Duration::from_secs_f64(gap);
                    if deadline.is_some_and(|d| scheduled >= d) {
                        break;
                    }
                    let now = Instant::now();
                    if scheduled > now {
                        pglane::rt::sleep(scheduled - now).await;
                    }
                    scheduled
                }
                None => {
                    let now = Instant::now();
                    if deadline.is_some_and(|d| now >= d) {
                        break;
                    }
                    now
                }
            };
            done += 1;
            if let Err(e) = plan.script.draw(&mut values, &mut rng) {
                self.record(
                    |s| {
                        s.failed += 1;
                        s.record_error(&e.to_string());
                    },
                    start,
                );
                continue;
            }
            let outcome = session.run(&plan.script, &values).await;
            let end = Instant::now();
            let (now_sent, now_received) = (session.conn.bytes_sent, session.conn.bytes_received);
            let (ds, dr) = (now_sent - sent, now_received - received);
            (sent, received) = (now_sent, now_received);
            match outcome {
                Ok(o) => self.record(
                    |s| {
                        s.statements += o.statements;
                        s.rows += o.rows;
                        s.bytes_sent += ds;
                        s.bytes_received += dr;
                        match &o.error {
                            None => s.record_success(end - start),
                            Some(code) => {
                                s.failed += 1;
                                s.record_error(code);
                            }
                        }
                        s.last_end = Some(end);
                    },
                    start,
                ),
                Err(e) => {
                    // The connection is gone; this transaction failed with it.
                    self.record(
                        |s| {
                            s.failed += 1;
                            s.record_error(&e.kind());
                            s.last_end = Some(end);
                        },
                        start,
                    );
                    eprintln!("pgload: connection {} stopped: {e}", self.id);
                    return;
                }
            }
        }
        session.close().await;
    }

    /// Applies `update` to the run's and the interval's stats.
    fn record(&self, update: impl Fn(&mut Stats), start: Instant) {
        let interval = self.plan.progress.map(|_| &self.interval);
        for stats in std::iter::once(&self.stats).chain(interval) {
            let mut s = stats.borrow_mut();
            if s.first_start.is_none() {
                s.first_start = Some(start);
            }
            update(&mut s);
        }
    }
}
