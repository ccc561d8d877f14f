//! The `pglane` command: read the config, start the shards, stop on a signal.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use clap::{ArgGroup, Parser};
use pglane::process_files;
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
#[command(group(ArgGroup::new("source").required(true).multiple(true).args(["config", "pgbouncer_ini", "file"])))]
struct Cli {
    /// A config file, as PgBouncer's command line takes it (`pglane
    /// /etc/pgbouncer/pgbouncer.ini`): a `.toml` file is pglane's config
    /// (as --config), any other a pgbouncer.ini (as --pgbouncer-ini, and
    /// --config may still lay TOML settings over it).
    #[arg(value_name = "CONFIG_FILE", conflicts_with = "pgbouncer_ini")]
    file: Option<PathBuf>,

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

    /// PgBouncer's: log only warnings and errors (RUST_LOG wins).
    #[arg(short, long, conflicts_with = "verbose")]
    quiet: bool,

    /// PgBouncer's: log more; once for debug, twice for trace (RUST_LOG wins).
    #[arg(short, long, action = clap::ArgAction::Count)]
    verbose: u8,

    /// PgBouncer's -d, -R and -u, refused with the reason (pglane does not
    /// daemonize, restart online or switch users: see docs/deploy.md).
    #[arg(short = 'd', long = "daemon", hide = true)]
    daemon: bool,
    #[arg(short = 'R', long = "reboot", hide = true)]
    reboot: bool,
    #[arg(short = 'u', long = "user", value_name = "USERNAME", hide = true)]
    user: Option<String>,
}

impl Cli {
    /// The TOML file and the pgbouncer.ini, from the flags or the one
    /// positional file.
    fn files(&self) -> Result<(Option<PathBuf>, Option<PathBuf>), String> {
        match &self.file {
            Some(file) if file.extension().is_some_and(|e| e == "toml") => match self.config {
                Some(_) => Err(format!("{} and --config are both TOML configs; give one", file.display())),
                None => Ok((Some(file.clone()), None)),
            },
            Some(file) => Ok((self.config.clone(), Some(file.clone()))),
            None => Ok((self.config.clone(), self.pgbouncer_ini.clone())),
        }
    }

    /// Why a PgBouncer flag pglane does not take is refused, if one was given.
    fn refused_flag(&self) -> Option<&'static str> {
        if self.daemon {
            Some("-d (daemonize): pglane runs in the foreground; run it under a service manager (deploy/pglane.service)")
        } else if self.reboot {
            Some("-R (online restart): start the new pglane with so_reuseport = true and stop the old one (docs/deploy.md)")
        } else if self.user.is_some() {
            Some("-u (switch user): start pglane as the user it should run as (User= in its systemd unit)")
        } else {
            None
        }
    }

    /// The default log level the PgBouncer flags ask for, or else the
    /// config's `verbose` (PgBouncer's setting).
    fn log_level(&self, config_verbose: u8) -> &'static str {
        match (self.quiet, self.verbose.max(config_verbose)) {
            (true, _) => "warn",
            (false, 0) => "info",
            (false, 1) => "debug",
            (false, _) => "trace",
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Some(reason) = cli.refused_flag() {
        eprintln!("pglane: {reason}");
        return ExitCode::FAILURE;
    }
    let (toml, ini) = match cli.files() {
        Ok(files) => files,
        Err(e) => {
            eprintln!("pglane: {e}");
            return ExitCode::FAILURE;
        }
    };

    let (mut config, warnings) = match pglane::config::load(toml.as_deref(), ini.as_deref()) {
        Ok(loaded) => loaded,
        Err(e) => {
            eprintln!("pglane: {e}");
            return ExitCode::FAILURE;
        }
    };
    if let Some(path) = config.logfile.as_deref().filter(|_| !cli.check) {
        if let Err(e) = process_files::open_logfile(path) {
            eprintln!("pglane: cannot open logfile {}: {e}", path.display());
            return ExitCode::FAILURE;
        }
    }
    init_logging(cli.log_format, cli.log_level(config.verbose));
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
        let files: Vec<String> = [&ini, &toml].into_iter().flatten().map(|file| file.display().to_string()).collect();
        println!("{}: ok", files.join(" + "));
        return ExitCode::SUCCESS;
    }

    let source = ConfigSource { toml, pgbouncer_ini: ini, cores: cli.cores, cpus: cli.cpus.clone() };
    if let Some(path) = config.pidfile.as_deref() {
        if let Err(e) = process_files::take_pidfile(path, config.so_reuseport) {
            error!("{e}");
            return ExitCode::FAILURE;
        }
    }
    let shared = Arc::new(Shared::new(config, source));
    shared.remember_warnings(warnings.iter().map(|w| w.to_string()));
    spawn_signal_thread(shared.clone());
    info!(shards = cpus.len(), ?cpus, "starting");
    let ended = match runtime::run(shared, &cpus) {
        Ok(()) => {
            info!("stopped");
            ExitCode::SUCCESS
        }
        Err(e) => {
            error!("{e}");
            ExitCode::FAILURE
        }
    };
    process_files::remove_pidfile();
    ended
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

fn init_logging(format: LogFormat, level: &str) {
    let filter =
        tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(level));
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_target(false).with_writer(process_files::LogSink);
    match format {
        // No colours when a logfile gets the lines too.
        LogFormat::Text => {
            builder.with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()) && !process_files::has_logfile()).init()
        }
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
                if let Err(e) = process_files::reopen_logfile() {
                    error!("SIGHUP: cannot open the logfile again; lines go on to the file it had: {e}");
                }
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
