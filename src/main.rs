//! The `pglane` command: read the config, start the shards, stop on a signal.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use clap::{ArgGroup, Parser};
use pglane::runtime::{self, ConfigSource, Shared};
use tracing::{error, info, warn};

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// A thread-per-core PostgreSQL connection pooler.
///
/// Clients connect to pglane as if it were PostgreSQL; pglane lends them
/// server connections from per-core pools, per transaction or per session.
#[derive(Parser, Debug)]
#[command(version, about, long_about = None)]
#[command(group(ArgGroup::new("source").required(true).multiple(true).args(["config", "pgbouncer_ini"])))]
struct Cli {
    /// The TOML config file (see config/pglane.toml for a commented example).
    /// With --pgbouncer-ini as well, its settings are laid over the imported
    /// ones: tables merge key by key, other values replace.
    #[arg(short, long, value_name = "FILE")]
    config: Option<PathBuf>,

    /// Run from an existing pgbouncer.ini, with its %include files and its
    /// auth_file. Each setting pglane ignores is logged as a warning; settings
    /// it cannot safely ignore (auth_type = cert or ldap, disable_pqexec = 1,
    /// ...) are errors. See docs/migrating-from-pgbouncer.md.
    #[arg(long, value_name = "FILE")]
    pgbouncer_ini: Option<PathBuf>,

    /// Number of shards, one pinned thread per core [default: all online cores].
    #[arg(long, value_name = "N", conflicts_with = "cpus")]
    cores: Option<usize>,

    /// Run one shard on each of these CPUs, e.g. `2-5` or `0,2,4-6`, to keep
    /// pglane off the cores PostgreSQL runs on [default: all online cores].
    #[arg(long, value_name = "LIST")]
    cpus: Option<String>,

    /// Log lines as human-readable text or as one JSON object per line.
    /// Levels come from RUST_LOG (default: info; e.g. RUST_LOG=debug).
    #[arg(long, value_enum, default_value = "text")]
    log_format: LogFormat,

    /// Check the config and exit: 0 if it is valid (printing any warnings), 1 with the reason if not.
    #[arg(long)]
    check: bool,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging(cli.log_format);

    let (mut config, warnings) = match pglane::config::load(cli.config.as_deref(), cli.pgbouncer_ini.as_deref()) {
        Ok(loaded) => loaded,
        Err(e) => {
            eprintln!("pglane: {e}");
            return ExitCode::FAILURE;
        }
    };
    for warning in &warnings {
        if cli.check {
            eprintln!("pglane: warning: {warning}");
        } else {
            warn!("{warning}");
        }
    }
    if cli.cores == Some(0) {
        eprintln!("pglane: --cores must be at least 1");
        return ExitCode::FAILURE;
    }
    if cli.cores.is_some() {
        config.cores = cli.cores;
        config.cpus = None;
    }
    if cli.cpus.is_some() {
        config.cpus = cli.cpus.clone();
        config.cores = None;
    }
    let cpus = match runtime::cpu_plan(config.cores, config.cpus.as_deref()) {
        Ok(cpus) => cpus,
        Err(e) => {
            eprintln!("pglane: {e}");
            return ExitCode::FAILURE;
        }
    };
    if cli.check {
        let files: Vec<String> =
            [&cli.pgbouncer_ini, &cli.config].into_iter().flatten().map(|file| file.display().to_string()).collect();
        println!("{}: ok", files.join(" + "));
        return ExitCode::SUCCESS;
    }

    let source = ConfigSource {
        toml: cli.config.clone(),
        pgbouncer_ini: cli.pgbouncer_ini.clone(),
        cores: cli.cores,
        cpus: cli.cpus.clone(),
    };
    let shared = Arc::new(Shared::new(config, source));
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

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

fn init_logging(format: LogFormat) {
    let filter =
        tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_target(false);
    match format {
        LogFormat::Text => builder.with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr())).init(),
        LogFormat::Json => builder.json().with_current_span(false).init(),
    }
}

/// SIGINT/SIGTERM: stop accepting, let transactions in flight finish (up to
/// shutdown_timeout), then exit; a second one exits at once. SIGHUP: read the
/// config again and apply it if it is valid (the old one stays if not).
fn spawn_signal_thread(shared: Arc<Shared>) {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
    let mut signals = match signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGHUP]) {
        Ok(s) => s,
        Err(e) => {
            error!("cannot install signal handlers: {e}");
            return;
        }
    };
    std::thread::spawn(move || {
        for signal in signals.forever() {
            if signal == SIGHUP {
                match shared.reload() {
                    Ok(warnings) => {
                        warnings.iter().for_each(|w| warn!("{w}"));
                        info!("SIGHUP: config reloaded");
                    }
                    Err(e) => error!("SIGHUP: config not reloaded, keeping the old one: {e}"),
                }
                continue;
            }
            if shared.begin_shutdown() {
                error!("second signal {signal}: exiting now");
                std::process::exit(1);
            }
            info!("signal {signal}: shutting down gracefully");
        }
    });
}
