//! The files pglane keeps as a process on its host, as PgBouncer does: its
//! `pidfile` and its `logfile`.
//!
//! The pidfile holds pglane's process id while it runs: taken at start (a
//! file naming another live process stops the start, unless that process is
//! the pglane a rolling restart replaces, `so_reuseport`), removed at exit
//! if it still names this process. The logfile gets every log line that
//! stderr gets, appended, and is opened again on SIGHUP so that logrotate's
//! move-and-signal works.
//!
//! Written by hand: tracing-appender (the crate for log files) rotates by
//! time itself and does not reopen on a signal, which is what operators of
//! PgBouncer's logfile expect. This module never touches a client.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

/// The pidfile this process wrote, removed by [`remove_pidfile`].
static PIDFILE: OnceLock<PathBuf> = OnceLock::new();

/// Why the pidfile could not be taken.
#[derive(Debug, thiserror::Error)]
pub enum PidfileError {
    #[error("pidfile {path} names process {pid}, which is running: another pglane or PgBouncer? Stop it, or remove the file if it is not")]
    Taken { path: String, pid: i32 },
    #[error("cannot write pidfile {path}: {source}")]
    Write { path: String, source: io::Error },
}

/// Writes this process's id to `path`. A file that names a live process
/// stops the start, unless `replacing` (so_reuseport) and that process is a
/// pglane: the new one takes the file over, and the old one leaves it be.
pub fn take_pidfile(path: &Path, replacing: bool) -> Result<(), PidfileError> {
    let shown = path.display().to_string();
    if let Some(pid) = std::fs::read_to_string(path).ok().and_then(|text| text.trim().parse::<i32>().ok()) {
        if pid != std::process::id() as i32 && is_running(pid) && !(replacing && is_pglane(pid)) {
            return Err(PidfileError::Taken { path: shown, pid });
        }
    }
    let write = || -> io::Result<()> {
        let temporary = path.with_extension("pid.new");
        std::fs::write(&temporary, format!("{}\n", std::process::id()))?;
        std::fs::rename(&temporary, path)
    };
    write().map_err(|source| PidfileError::Write { path: shown, source })?;
    let _ = PIDFILE.set(path.to_owned());
    Ok(())
}

/// Removes the pidfile at exit, if it still names this process (a rolling
/// restart's new pglane may have taken it over).
pub fn remove_pidfile() {
    let Some(path) = PIDFILE.get() else { return };
    let ours = std::fs::read_to_string(path).ok().and_then(|t| t.trim().parse::<u32>().ok()) == Some(std::process::id());
    if ours {
        let _ = std::fs::remove_file(path);
    }
}

fn is_running(pid: i32) -> bool {
    // Signal 0 checks existence; EPERM means it exists as another user's.
    pid > 0 && (unsafe { libc::kill(pid, 0) } == 0 || io::Error::last_os_error().raw_os_error() == Some(libc::EPERM))
}

fn is_pglane(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|comm| comm.trim() == "pglane")
}

/// The logfile, once opened ([`open_logfile`]).
static LOGFILE: OnceLock<(PathBuf, Mutex<File>)> = OnceLock::new();

fn append(path: &Path) -> io::Result<File> {
    OpenOptions::new().create(true).append(true).open(path)
}

/// Opens `path` for appending; from now on [`LogSink`] writes there too.
pub fn open_logfile(path: &Path) -> io::Result<()> {
    let file = append(path)?;
    let _ = LOGFILE.set((path.to_owned(), Mutex::new(file)));
    Ok(())
}

/// Whether log lines also go to a logfile.
pub fn has_logfile() -> bool {
    LOGFILE.get().is_some()
}

/// Opens the logfile again by its name (SIGHUP): after logrotate moved it,
/// lines go to the new file.
pub fn reopen_logfile() -> io::Result<()> {
    let Some((path, file)) = LOGFILE.get() else { return Ok(()) };
    let reopened = append(path)?;
    *file.lock().unwrap_or_else(|e| e.into_inner()) = reopened;
    Ok(())
}

/// Where log lines go: stderr, and the logfile if one is open. Each line is
/// written whole to each (tracing formats a line, then writes it).
#[derive(Clone, Copy, Default)]
pub struct LogSink;

pub struct LogLine;

impl Write for LogLine {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        if let Some((_, file)) = LOGFILE.get() {
            // A full disk must not stop pglane: the line still reaches stderr.
            let _ = file.lock().unwrap_or_else(|e| e.into_inner()).write_all(bytes);
        }
        io::stderr().write_all(bytes)?;
        Ok(bytes.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        io::stderr().flush()
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for LogSink {
    type Writer = LogLine;

    fn make_writer(&'a self) -> LogLine {
        LogLine
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("pglane-process-files-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir.join(name)
    }

    #[test]
    fn a_pidfile_naming_a_live_process_stops_the_start_and_a_stale_one_does_not() {
        let path = scratch("pglane.pid");
        // PID 1 is always running (and is no pglane).
        std::fs::write(&path, "1\n").unwrap();
        assert!(matches!(take_pidfile(&path, false), Err(PidfileError::Taken { pid: 1, .. })));
        assert!(matches!(take_pidfile(&path, true), Err(PidfileError::Taken { pid: 1, .. })), "init is no pglane");
        // A process id no process has: stale, taken over.
        std::fs::write(&path, format!("{}\n", i32::MAX)).unwrap();
        take_pidfile(&path, false).unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), format!("{}\n", std::process::id()));
        // Our own id (a restart of the same process) is no obstacle.
        take_pidfile(&path, false).unwrap();
        remove_pidfile();
        assert!(!path.exists());
    }
}
