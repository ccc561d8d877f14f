//! Telling the service manager what pglane is doing (systemd's
//! `Type=notify` and `Type=notify-reload`): `READY=1` once every shard
//! listens, `RELOADING=1` then `READY=1` around a config reload, and
//! `STOPPING=1` when a shutdown begins, so that `systemctl start` returns
//! when clients can connect and, under `Type=notify-reload`, `systemctl
//! reload` when the new config is in force (or refused: the old one stays,
//! said in `STATUS=`).
//!
//! Written by hand: the protocol is one text datagram to the unix socket
//! that `$NOTIFY_SOCKET` names (a path, or `@name` in the abstract
//! namespace), which the standard library sends; the crates that do it
//! (sd-notify, libsystemd) are not among the dependencies pglane may take,
//! for a dozen lines. Without `$NOTIFY_SOCKET` (not started by systemd)
//! nothing is sent. A failed send is logged, never fatal: pglane serves
//! whether or not anyone listens.

use std::os::unix::net::{SocketAddr, UnixDatagram};

use tracing::warn;

/// Every shard listens.
pub fn ready(status: &str) {
    send(&format!("READY=1\nSTATUS={status}"));
}

/// A reload begins; `ready` says when it is done. systemd's notify-reload
/// wants the monotonic clock of the moment, in microseconds.
pub fn reloading() {
    send(&format!("RELOADING=1\nMONOTONIC_USEC={}", monotonic_usec()));
}

/// A shutdown begins: the listeners close, sessions drain.
pub fn stopping() {
    send("STOPPING=1\nSTATUS=draining: no new clients, transactions in flight finish");
}

fn send(message: &str) {
    let Some(target) = std::env::var_os("NOTIFY_SOCKET") else { return };
    let target = target.to_string_lossy();
    let sent = socket_address(&target).and_then(|addr| UnixDatagram::unbound()?.send_to_addr(message.as_bytes(), &addr));
    if let Err(e) = sent {
        warn!(notify_socket = %target, "cannot tell the service manager {:?}: {e}", message.lines().next().unwrap_or_default());
    }
}

/// `$NOTIFY_SOCKET` as an address: a path, or `@name` in the abstract namespace.
fn socket_address(target: &str) -> std::io::Result<SocketAddr> {
    match target.strip_prefix('@') {
        Some(name) => {
            use std::os::linux::net::SocketAddrExt;
            SocketAddr::from_abstract_name(name.as_bytes())
        }
        None if target.starts_with('/') => SocketAddr::from_pathname(target),
        None => Err(std::io::Error::new(std::io::ErrorKind::Unsupported, "not a unix socket path or @abstract name")),
    }
}

fn monotonic_usec() -> u64 {
    let mut now = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes the timespec we own; CLOCK_MONOTONIC exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now) };
    now.tv_sec as u64 * 1_000_000 + now.tv_nsec as u64 / 1_000
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_as_systemd_writes_them() {
        assert_eq!(
            socket_address("/run/systemd/notify").unwrap().as_pathname(),
            Some(std::path::Path::new("/run/systemd/notify"))
        );
        use std::os::linux::net::SocketAddrExt;
        assert_eq!(
            socket_address("@/org/freedesktop/systemd1/notify/1").unwrap().as_abstract_name(),
            Some(&b"/org/freedesktop/systemd1/notify/1"[..])
        );
        assert!(socket_address("vsock:2:1234").is_err());
    }

    #[test]
    fn the_monotonic_clock_moves_on() {
        let a = monotonic_usec();
        std::thread::sleep(std::time::Duration::from_millis(2));
        assert!(monotonic_usec() >= a + 1_000);
    }
}
