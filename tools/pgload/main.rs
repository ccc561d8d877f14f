//! pgload: pglane's bundled PostgreSQL load generator.
//!
//! Thread-per-core like pglane itself: one executor (pglane::rt) pinned per core,
//! the connections spread over them, each speaking the wire protocol through
//! pglane's own codec (`pglane::protocol`) and logging in with `pglane::auth`.
//! Run `pgload --help` for the options.
//!
//! The modules, each one idea:
//! - [`options`]: the command line and environment, checked into a [`options::Plan`];
//! - [`script`]: the `\set` + SQL script language of a transaction;
//! - [`scenario`]: the built-in scenarios and the setup that creates their data;
//! - [`conn`]: one connection: socket, login, whole messages in and out;
//! - [`session`]: one statement in the simple, extended or prepared protocol;
//! - [`worker`]: one core's executor and the timing of transactions;
//! - [`stats`]: the numbers a run measures; [`report`]: how they are printed.
//!
//! This file only wires them together: setup, start the cores, print
//! progress as the cores report it, merge, report, exit status.

mod conn;
mod options;
mod report;
mod scenario;
mod script;
mod session;
mod stats;
mod worker;

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::sync::{mpsc, Arc};

use clap::Parser;

use crate::conn::Connection;
use crate::options::{Options, Plan, Workload};
use crate::report::Report;
use crate::stats::Stats;
use crate::worker::{CoreResult, Start, Tick};

/// Exit status when pgload could not run at all (bad options, no connection, setup).
const EXIT_CANNOT_RUN: u8 = 1;
/// Exit status when the run finished but some transactions failed.
const EXIT_FAILURES: u8 = 2;

fn main() -> ExitCode {
    let online: Vec<usize> = core_affinity::get_core_ids().map(|ids| ids.into_iter().map(|c| c.id).collect()).unwrap_or_default();
    let options = match Options::try_parse() {
        Ok(options) => options,
        // --help and --version "fail" to stdout; mistakes go to stderr.
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() { ExitCode::from(EXIT_CANNOT_RUN) } else { ExitCode::SUCCESS };
        }
    };
    let plan = match options.into_plan(|k| std::env::var(k).ok(), &online) {
        Ok(plan) => Arc::new(plan),
        Err(e) => return fail(&e),
    };
    let scale = match setup(&plan) {
        Ok(scale) => scale,
        Err(e) => return fail(&e),
    };
    if plan.setup_only {
        return ExitCode::SUCCESS;
    }
    let stats = match run(&plan, scale) {
        Ok(stats) => stats,
        Err(e) => return fail(&e),
    };
    let report = Report::new(&plan, scale, &stats);
    print!("{}", report.text(plan.stop));
    if let Some(path) = &plan.json {
        let written = serde_json::to_string_pretty(&report)
            .map_err(std::io::Error::from)
            .and_then(|json| std::fs::write(path, json + "\n"));
        if let Err(e) = written {
            return fail(&format!("cannot write {}: {e}", path.display()));
        }
    }
    if stats.failed > 0 || stats.error_count() > 0 {
        ExitCode::from(EXIT_FAILURES)
    } else {
        ExitCode::SUCCESS
    }
}

fn fail(e: &dyn std::fmt::Display) -> ExitCode {
    eprintln!("pgload: {e}");
    ExitCode::from(EXIT_CANNOT_RUN)
}

/// Runs the scenario's setup on one connection; returns the data's scale.
fn setup(plan: &Arc<Plan>) -> Result<u32, String> {
    let builtin = match plan.workload {
        Workload::Builtin(b) if plan.setup => b,
        _ => return Ok(plan.scale.unwrap_or(1)),
    };
    let plan = plan.clone();
    let job = pglane::rt::start_pinned("pgload-setup", None, move || async move {
        let mut conn = Connection::open(&plan.connect).await.map_err(|e| e.to_string())?;
        let log = |what: &str| eprintln!("pgload: setup: {what}");
        let done = scenario::setup(&mut conn, builtin, plan.scale, plan.uuid_rows, &log).await.map_err(|e| e.to_string());
        conn.close().await;
        done.map(|p| p.scale)
    });
    job.map_err(|e| e.to_string())?.join().map_err(|_| "the setup thread panicked".to_string())?.map_err(|e| e.to_string())?
}

/// Starts every core, prints progress as it comes, returns the merged stats.
fn run(plan: &Arc<Plan>, scale: u32) -> Result<Stats, String> {
    let cores = plan.cpus.len();
    let start = Start::new(cores);
    let (tx, rx) = mpsc::channel::<Tick>();
    let mut handles = Vec::with_capacity(cores);
    for core in 0..cores {
        let ticks = plan.progress.map(|_| tx.clone());
        handles.push(
            worker::spawn(plan.clone(), core, start.clone(), scale, ticks)
                .map_err(|e| format!("cannot start core {core}: {e}"))?,
        );
    }
    drop(tx);

    // A line per interval, once every core has reported it.
    let mut pending: BTreeMap<u64, (usize, Stats)> = BTreeMap::new();
    if let Some(every) = plan.progress {
        for tick in rx {
            let entry = pending.entry(tick.seq).or_insert_with(|| (0, Stats::default()));
            entry.0 += 1;
            entry.1.merge(&tick.stats);
            if entry.0 == cores {
                if let Some((_, stats)) = pending.remove(&tick.seq) {
                    eprintln!("{}", report::progress_line(every * tick.seq as u32, every, &stats));
                }
            }
        }
    }

    let mut total = Stats::default();
    let mut connect_errors = Vec::new();
    for (core, handle) in handles.into_iter().enumerate() {
        let CoreResult { stats, connect_errors: errors } =
            handle.join().map_err(|_| format!("core {core} panicked"))?.map_err(|e| format!("core {core} failed: {e}"))?;
        total.merge(&stats);
        connect_errors.extend(errors);
    }
    if let Some(first) = connect_errors.first() {
        return Err(format!("{} of {} connections could not open; first error: {first}", connect_errors.len(), plan.connections));
    }
    Ok(total)
}
