//! The sockets pglane listens on, and handing them to the next pglane.
//!
//! This module owns binding the client port (one SO_REUSEPORT socket per
//! shard: the kernel spreads connections over them), `metrics_listen`, and
//! the clients' unix socket (bound once, shared by the shards); the check
//! that no other process holds them; and the hand-over of a rolling
//! restart. It never serves a connection (the shard does).
//!
//! # Rolling restarts (`so_reuseport`)
//!
//! Without `so_reuseport`, a port another process listens on is refused, so
//! a second pglane started by mistake does not silently share the clients
//! of the first. With it, another *pglane* may hold the port (PgBouncer's
//! setting of the same name): the new one joins the kernel's SO_REUSEPORT
//! group, and takes over the unix socket by renaming its own over the old
//! one's path. Any other process holding the port or the socket is still
//! refused, named by pid and command (read from /proc: only a process of
//! the same user may share a SO_REUSEPORT port, and that process's /proc
//! entries are readable to it).
//!
//! SIGTERM to the old one then stops it accepting without losing a client
//! in its accept queue. Closing a listening socket resets the connections
//! queued on it, and the kernel keeps hashing new ones to it until it is
//! closed. So each shard first attaches a socket filter that drops new
//! connection requests (SYN without ACK) to its socket, keeps accepting what
//! is queued or mid-handshake for [`HAND_OVER_LINGER`], then closes it. A
//! client whose SYN was dropped sends it again a second later (TCP's first
//! retransmission) and reaches a socket of the new pglane. Linux's
//! `net.ipv4.tcp_migrate_req` would move queued connections by itself, but
//! it is off by default and a sysctl is not pglane's to set. The filter is
//! five classic-BPF instructions set with `SO_ATTACH_FILTER`: no eBPF, no
//! privilege, nothing to load.

use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::time::Duration;

use tracing::{info, warn};

use crate::net::TcpTuning;
use crate::rt;

/// How long a shard handing its port over keeps accepting the connections
/// already queued or mid-handshake on its socket (a round trip, generously).
pub const HAND_OVER_LINGER: Duration = Duration::from_millis(250);

/// The clients' unix socket: bound once for all shards (unix sockets have no
/// SO_REUSEPORT spreading), accepted on by every shard through its own copy
/// of the descriptor, and removed from the file system when pglane stops,
/// unless another pglane has taken the path over by then.
pub(super) struct UnixSocket {
    pub path: PathBuf,
    pub listener: std::os::unix::net::UnixListener,
    /// The (device, inode) of the socket file this process bound.
    file: (u64, u64),
}

impl UnixSocket {
    /// Binds `path` with permissions `mode`. A stale file (nobody answers)
    /// is replaced; a live one is refused, unless `take_over` and a pglane
    /// holds it: then this socket is bound beside it and renamed over it,
    /// so that new clients reach this process and the old one's clients
    /// stay connected.
    pub fn bind(path: PathBuf, mode: u32, take_over: bool) -> Result<UnixSocket, String> {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        let mut bind_at = path.clone();
        if path.exists() {
            // A socket file left by a process that died is in the way; one
            // that answers belongs to a running pooler or server.
            if std::os::unix::net::UnixStream::connect(&path).is_ok() {
                if !take_over {
                    return Err(format!("{} is in use by another process", path.display()));
                }
                check_holders(&path.display().to_string(), &unix_holders(&path))?;
                bind_at = PathBuf::from(format!("{}.new-{}", path.display(), std::process::id()));
                let _ = std::fs::remove_file(&bind_at);
            } else {
                std::fs::remove_file(&path).map_err(|e| format!("cannot remove the stale socket {}: {e}", path.display()))?;
            }
        }
        let listener = std::os::unix::net::UnixListener::bind(&bind_at)
            .map_err(|e| format!("cannot listen on the unix socket {}: {e}", bind_at.display()))?;
        // Non-blocking, as every shard's copy (see `adopt_unix_listener`).
        listener.set_nonblocking(true).map_err(|e| format!("{}: {e}", path.display()))?;
        std::fs::set_permissions(&bind_at, std::fs::Permissions::from_mode(mode))
            .map_err(|e| format!("cannot set the mode of {}: {e}", bind_at.display()))?;
        let meta = std::fs::metadata(&bind_at).map_err(|e| format!("{}: {e}", bind_at.display()))?;
        if bind_at != path {
            std::fs::rename(&bind_at, &path).map_err(|e| format!("cannot take over {}: {e}", path.display()))?;
            info!(unix_socket = %path.display(), "took the unix socket over from the running pglane");
        }
        Ok(UnixSocket { path, listener, file: (meta.dev(), meta.ino()) })
    }
}

impl Drop for UnixSocket {
    fn drop(&mut self) {
        use std::os::unix::fs::MetadataExt;
        // A pglane that took the path over owns the file there now.
        let ours = std::fs::symlink_metadata(&self.path).is_ok_and(|m| (m.dev(), m.ino()) == self.file);
        if ours {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// This shard's handle on the shared unix listening socket: its own copy
/// of the descriptor (`try_clone`, made before the shard starts), on its
/// own reactor. All copies share one open file, non-blocking for all.
pub(super) fn adopt_unix_listener(copy: std::io::Result<std::os::unix::net::UnixListener>) -> std::io::Result<rt::net::Listener> {
    rt::net::Listener::from_fd(copy?.into())
}

/// The sockets a shard accepts on.
pub(super) enum Listener {
    /// The client port, or metrics_listen.
    Tcp(rt::net::Listener),
    /// The unix socket, shared by all shards (see [`adopt_unix_listener`]).
    Unix(rt::net::Listener),
}

impl Listener {
    pub fn name(&self) -> &'static str {
        match self {
            Listener::Tcp(_) => "tcp",
            Listener::Unix(_) => "unix",
        }
    }

    /// The next connection, and its peer's address if it came over TCP,
    /// where it gets `tuning`'s options. It is not yet any executor's: the
    /// shard that serves it adopts it.
    pub async fn accept(&self, tuning: &TcpTuning) -> std::io::Result<(OwnedFd, Option<std::net::SocketAddr>)> {
        match self {
            Listener::Tcp(listener) => {
                let socket = std::net::TcpStream::from(listener.accept().await?);
                if let Err(e) = tuning.apply(&socket2::SockRef::from(&socket)) {
                    warn!("cannot set the TCP options of an accepted connection: {e}");
                }
                let peer = socket.peer_addr().ok();
                Ok((socket.into(), peer))
            }
            Listener::Unix(listener) => Ok((listener.accept().await?, None)),
        }
    }

    /// From now on the kernel drops new connection requests to this TCP
    /// socket (see the module comment): the ones it has queued or in
    /// handshake can still be accepted, new ones go to the other sockets of
    /// its SO_REUSEPORT group. A unix socket is left as it is (a pglane
    /// that took its path over has its own).
    pub fn stop_taking_new(&self) -> std::io::Result<()> {
        let Listener::Tcp(listener) = self else { return Ok(()) };
        // SAFETY: the descriptor stays open for as long as `listener`,
        // which outlives this borrow.
        let fd = unsafe { BorrowedFd::borrow_raw(listener.as_raw_fd()) };
        socket2::SockRef::from(&fd).attach_filter(&DROP_SYN)
    }
}

/// A classic BPF socket filter run on each packet a listening TCP socket
/// gets, the packet starting at its TCP header: drop it if its flags have
/// SYN without ACK (a new connection request), keep it otherwise (the ACK
/// that completes a handshake already under way).
const DROP_SYN: [libc::sock_filter; 5] = [
    // A = the flags byte, at offset 13 of the TCP header.
    libc::sock_filter { code: (libc::BPF_LD | libc::BPF_B | libc::BPF_ABS) as u16, jt: 0, jf: 0, k: 13 },
    libc::sock_filter { code: (libc::BPF_ALU | libc::BPF_AND | libc::BPF_K) as u16, jt: 0, jf: 0, k: 0x12 }, // SYN | ACK
    // SYN alone: fall through to "drop"; anything else: skip to "keep".
    libc::sock_filter { code: (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16, jt: 0, jf: 1, k: 0x02 },
    libc::sock_filter { code: (libc::BPF_RET | libc::BPF_K) as u16, jt: 0, jf: 0, k: 0 }, // drop
    libc::sock_filter { code: (libc::BPF_RET | libc::BPF_K) as u16, jt: 0, jf: 0, k: u32::MAX }, // keep
];

/// Refuses to start on a port another process listens on. The shards' own
/// sockets use SO_REUSEPORT, which would let them join the other process's
/// (the kernel would then split new connections between the two, say a
/// second pglane started by mistake). A plain bind, with SO_REUSEADDR so
/// that connections in TIME_WAIT from a previous run do not count, fails if
/// anything listens there. With `share_with_pglane` (so_reuseport), another
/// pglane may hold it, and nothing else.
pub(super) fn ensure_port_free(addr: &str, share_with_pglane: bool) -> Result<(), String> {
    match reusable_tcp_socket(addr).and_then(|(probe, at)| probe.bind(&at.into()).map(|()| at)) {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AddrInUse && share_with_pglane => {
            let port = addr.rsplit_once(':').and_then(|(_, p)| p.parse().ok()).unwrap_or(0);
            let holders = tcp_holders(port);
            check_holders(addr, &holders)?;
            let pids: Vec<u32> = holders.iter().map(|h| h.pid).collect();
            info!(listen = %addr, ?pids, "so_reuseport: sharing the port with the pglane already there");
            Ok(())
        }
        Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => Err(format!(
            "cannot listen on {addr}: it is in use by another process (another pglane? for a rolling restart, set so_reuseport)"
        )),
        Err(e) => Err(format!("cannot listen on {addr}: {e}")),
    }
}

/// A TCP socket for `addr` with SO_REUSEADDR (so a restart is not refused
/// while old connections sit in TIME_WAIT), not yet bound.
fn reusable_tcp_socket(addr: &str) -> std::io::Result<(socket2::Socket, std::net::SocketAddr)> {
    use socket2::{Domain, Protocol, Socket, Type};
    let addr: std::net::SocketAddr =
        addr.parse().map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidInput, format!("bad listen address {addr}")))?;
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    socket.set_reuse_address(true)?;
    Ok((socket, addr))
}

/// A listening socket with SO_REUSEPORT (one per shard, the kernel spreads
/// connections over them) and SO_REUSEADDR, queueing `backlog` connections,
/// with TCP_DEFER_ACCEPT if `defer_accept`.
pub(super) fn bind_listener(addr: &str, backlog: u32, defer_accept: bool) -> std::io::Result<rt::net::Listener> {
    let (socket, addr) = reusable_tcp_socket(addr)?;
    socket.set_reuse_port(true)?;
    socket.set_nonblocking(true)?;
    socket.bind(&addr.into())?;
    if defer_accept {
        crate::net::set_defer_accept(&socket, true)?;
    }
    // Validated to fit an int.
    socket.listen(backlog as i32)?;
    rt::net::Listener::from_fd(socket.into())
}

/// A process holding a listening socket.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Holder {
    pid: u32,
    /// Its command name (/proc/PID/comm).
    command: String,
}

/// Ok if every holder of `what` is a pglane (and there is one).
fn check_holders(what: &str, holders: &[Holder]) -> Result<(), String> {
    let me = command_of("self");
    let others: Vec<String> =
        holders.iter().filter(|h| Some(&h.command) != me.as_ref()).map(|h| format!("pid {} ({})", h.pid, h.command)).collect();
    if holders.is_empty() {
        return Err(format!(
            "cannot listen on {what}: a process pglane cannot identify holds it (so_reuseport shares it with another pglane only)"
        ));
    }
    if !others.is_empty() {
        return Err(format!(
            "cannot listen on {what}: it is in use by {}, which is not a pglane (so_reuseport shares it with another pglane only)",
            others.join(", ")
        ));
    }
    Ok(())
}

fn command_of(pid: &str) -> Option<String> {
    std::fs::read_to_string(format!("/proc/{pid}/comm")).ok().map(|c| c.trim_end().to_owned())
}

/// The processes with a TCP socket listening on `port` (any address).
fn tcp_holders(port: u16) -> Vec<Holder> {
    let mut inodes = Vec::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(text) = std::fs::read_to_string(table) else { continue };
        inodes.extend(listening_tcp_inodes(&text, port));
    }
    holders_of(&inodes)
}

/// The inodes of the sockets in a /proc/net/tcp{,6} table that listen on `port`.
fn listening_tcp_inodes(table: &str, port: u16) -> Vec<u64> {
    const LISTEN: &str = "0A";
    table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let local_port = u16::from_str_radix(fields.get(1)?.rsplit_once(':')?.1, 16).ok()?;
            (local_port == port && *fields.get(3)? == LISTEN).then(|| fields.get(9)?.parse().ok())?
        })
        .collect()
}

/// The processes with a unix socket listening at `path`.
fn unix_holders(path: &Path) -> Vec<Holder> {
    let text = std::fs::read_to_string("/proc/net/unix").unwrap_or_default();
    holders_of(&listening_unix_inodes(&text, &path.to_string_lossy()))
}

/// The inodes of the sockets in /proc/net/unix that listen at `path`.
fn listening_unix_inodes(table: &str, path: &str) -> Vec<u64> {
    const ACCEPTING: u32 = 0x0001_0000; // __SO_ACCEPTCON
    table
        .lines()
        .skip(1)
        .filter_map(|line| {
            // Num RefCount Protocol Flags Type St Inode Path
            let fields: Vec<&str> = line.split_whitespace().collect();
            let flags = u32::from_str_radix(fields.get(3)?, 16).ok()?;
            (flags & ACCEPTING != 0 && *fields.get(7)? == path).then(|| fields.get(6)?.parse().ok())?
        })
        .collect()
}

/// The processes that have one of the sockets `inodes` open.
fn holders_of(inodes: &[u64]) -> Vec<Holder> {
    if inodes.is_empty() {
        return Vec::new();
    }
    let wanted: Vec<String> = inodes.iter().map(|i| format!("socket:[{i}]")).collect();
    let mut holders = Vec::new();
    let Ok(processes) = std::fs::read_dir("/proc") else { return holders };
    for process in processes.flatten() {
        let Ok(pid) = process.file_name().to_string_lossy().parse::<u32>() else { continue };
        let Ok(fds) = std::fs::read_dir(process.path().join("fd")) else { continue };
        let holds = fds.flatten().any(|fd| std::fs::read_link(fd.path()).is_ok_and(|l| wanted.iter().any(|w| l == Path::new(w))));
        if holds {
            holders.push(Holder { pid, command: command_of(&pid.to_string()).unwrap_or_else(|| "?".into()) });
        }
    }
    holders
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stale_unix_socket_is_replaced_and_a_live_one_refused() {
        let dir = std::env::temp_dir().join(format!("pglane-unix-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(".s.PGSQL.6432");
        // A crashed process leaves its socket file behind.
        drop(std::os::unix::net::UnixListener::bind(&path).unwrap());
        assert!(path.exists());
        let live = UnixSocket::bind(path.clone(), 0o700, false).unwrap();
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o700);
        // Another pglane must not steal it.
        let err = UnixSocket::bind(path.clone(), 0o777, false).err().unwrap();
        assert!(err.contains("in use"), "{err}");
        drop(live);
        assert!(!path.exists(), "removed when pglane stops");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_pglane_takes_a_unix_socket_over_and_the_old_one_leaves_it_be() {
        let dir = std::env::temp_dir().join(format!("pglane-unix-over-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(".s.PGSQL.6432");
        // This test process is "the pglane" holding it (same command name).
        let old = UnixSocket::bind(path.clone(), 0o700, false).unwrap();
        let new = UnixSocket::bind(path.clone(), 0o770, true).unwrap();
        // New clients reach the new socket; the old one still has its own.
        let client = std::os::unix::net::UnixStream::connect(&path).unwrap();
        new.listener.set_nonblocking(false).unwrap();
        new.listener.accept().expect("the new socket has the client");
        drop(client);
        drop(old);
        assert!(path.exists(), "the old pglane leaves the path to the new one");
        drop(new);
        assert!(!path.exists());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_port_another_process_listens_on_is_refused() {
        let other = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = other.local_addr().unwrap().to_string();
        let err = ensure_port_free(&addr, false).unwrap_err();
        assert!(err.contains("in use by another process"), "{err}");
        drop(other);
        ensure_port_free(&addr, false).unwrap();
    }

    #[test]
    fn the_processes_holding_a_port_are_found_in_proc() {
        let held = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = held.local_addr().unwrap().port();
        let holders = tcp_holders(port);
        assert_eq!(holders.len(), 1, "{holders:?}");
        assert_eq!(holders[0].pid, std::process::id());
        assert_eq!(Some(&holders[0].command), command_of("self").as_ref());
        // This process shares a port with itself, and with nothing else.
        assert!(check_holders("x", &holders).is_ok());
        let stranger = Holder { pid: 1, command: "pgbouncer".into() };
        let err = check_holders("127.0.0.1:6432", &[holders[0].clone(), stranger]).unwrap_err();
        assert!(err.contains("in use by pid 1 (pgbouncer), which is not a pglane"), "{err}");
        assert!(check_holders("x", &[]).unwrap_err().contains("cannot identify"));
    }

    #[test]
    fn proc_tables_as_linux_prints_them() {
        let tcp = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:1920 00000000:0000 0A 00000000:00000000 00:00000000 00000000   999        0 41 1 0 100 0 0 10 0
   1: 0100007F:1920 0100007F:C350 01 00000000:00000000 00:00000000 00000000   999        0 42 1 0 20 4 30 10 -1
   2: 00000000:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 43 1 0 100 0 0 10 0
";
        assert_eq!(listening_tcp_inodes(tcp, 0x1920), [41], "listening only, not the established connection");
        assert_eq!(listening_tcp_inodes(tcp, 8080), [43]);
        assert!(listening_tcp_inodes(tcp, 5432).is_empty());
        let unix = "Num       RefCount Protocol Flags    Type St Inode Path
0000000000000000: 00000002 00000000 00010000 0001 01 51 /tmp/.s.PGSQL.6432
0000000000000000: 00000003 00000000 00000000 0001 03 52 /tmp/.s.PGSQL.6432
0000000000000000: 00000002 00000000 00010000 0001 01 53 /tmp/.s.PGSQL.5432
";
        assert_eq!(listening_unix_inodes(unix, "/tmp/.s.PGSQL.6432"), [51]);
    }
}
