//! The `pglane` command: read the config, start the shards, stop on a signal.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use arc_swap::ArcSwap;
use clap::Parser;
use pglane::config::Config;
use pglane::runtime::{self, Shared};
use tracing::{error, info};

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// A thread-per-core PostgreSQL connection pooler.
///
/// Clients connect to pglane as if it were PostgreSQL; pglane lends them
/// server connections from per-core pools, per transaction or per session.
#[derive(Parser, Debug)]
#[command(version, about, long_about = None)]
struct Cli {
    /// The TOML config file (see config/pglane.toml for a commented example).
    #[arg(short, long, value_name = "FILE")]
    config: PathBuf,

    /// Number of shards, one pinned thread per core [default: all online cores].
    #[arg(long, value_name = "N")]
    cores: Option<usize>,

    /// Check the config file and exit: 0 if it is valid, 1 with the reason if not.
    #[arg(long)]
    check: bool,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_target(false)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();

    let mut config = match Config::load(&cli.config) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("pglane: {}: {e}", cli.config.display());
            return ExitCode::FAILURE;
        }
    };
    if cli.cores == Some(0) {
        eprintln!("pglane: --cores must be at least 1");
        return ExitCode::FAILURE;
    }
    if cli.cores.is_some() {
        config.cores = cli.cores;
    }
    if cli.check {
        println!("{}: ok", cli.config.display());
        return ExitCode::SUCCESS;
    }

    let cpus = runtime::cpu_plan(config.cores);
    let shared = Arc::new(Shared {
        config: ArcSwap::from_pointee(config),
        clients: AtomicUsize::new(0),
        shutting_down: AtomicBool::new(false),
    });
    spawn_signal_thread(shared.clone());
    info!(shards = cpus.len(), ?cpus, "starting");
    match runtime::run(shared, &cpus) {
        Ok(()) => {
            info!("stopped");
            ExitCode::SUCCESS
        }
        Err(e) => {
            error!("{e}");
            ExitCode::FAILURE
        }
    }
}

/// SIGINT/SIGTERM: stop accepting, let transactions in flight finish (up to
/// shutdown_timeout), then exit. A second signal exits at once.
fn spawn_signal_thread(shared: Arc<Shared>) {
    use signal_hook::consts::{SIGINT, SIGTERM};
    let mut signals = match signal_hook::iterator::Signals::new([SIGINT, SIGTERM]) {
        Ok(s) => s,
        Err(e) => {
            error!("cannot install signal handlers: {e}");
            return;
        }
    };
    std::thread::spawn(move || {
        for signal in signals.forever() {
            if shared.shutting_down.swap(true, Ordering::SeqCst) {
                error!("second signal {signal}: exiting now");
                std::process::exit(1);
            }
            info!("signal {signal}: shutting down gracefully");
        }
    });
}
