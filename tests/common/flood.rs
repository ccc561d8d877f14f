//! Hostile clients for the tests of issue 25 and the soak tool: a client
//! that logs in and then floods requests without ever reading a reply,
//! through a small receive buffer, as fast as the socket takes them.
// Each crate that includes it uses a different part of it.
#![allow(dead_code)]

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use bytes::BytesMut;
use pglane::protocol::frontend;
use pglane::protocol::startup;

/// What a flooding client sends over and over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flood {
    /// Sync alone: 5 bytes, answered by a 6-byte ReadyForQuery.
    Syncs,
    /// `select 1` as a simple query.
    SimpleQueries,
    /// Parse/Bind/Execute/Sync of the unnamed statement `select 1`.
    Extended,
    /// A 40-byte simple query answered by a 256 KiB row: the server soon
    /// blocks writing, stops reading, and the client's next queries fill
    /// the connection to the server too.
    WideRows,
}

impl Flood {
    pub const ALL: [Flood; 4] = [Flood::Syncs, Flood::SimpleQueries, Flood::Extended, Flood::WideRows];

    /// One round of the flood's messages, repeated to about 16 KiB.
    pub fn chunk(self) -> Vec<u8> {
        let mut one = BytesMut::new();
        match self {
            Flood::Syncs => frontend::sync(&mut one),
            Flood::SimpleQueries => frontend::query(&mut one, "select 1"),
            Flood::Extended => {
                frontend::parse(&mut one, "", "select 1", &[]);
                frontend::bind(&mut one, "", "", &[], std::iter::empty(), &[]);
                frontend::execute(&mut one, "", 0);
                frontend::sync(&mut one);
            }
            Flood::WideRows => frontend::query(&mut one, "select repeat('x', 262144)"),
        }
        one.iter().copied().cycle().take(one.len() * (16 * 1024 / one.len())).collect()
    }
}

/// A TCP connection whose receive buffer is `rcvbuf` bytes (set before the
/// handshake, so the window stays that small).
pub fn connect_small(addr: SocketAddr, rcvbuf: usize) -> std::io::Result<TcpStream> {
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, Some(socket2::Protocol::TCP))?;
    socket.set_recv_buffer_size(rcvbuf)?;
    socket.connect_timeout(&addr.into(), Duration::from_secs(10))?;
    Ok(socket.into())
}

/// Logs in as `user` to `database` (trust), reading up to the first
/// ReadyForQuery.
pub fn login(stream: &mut TcpStream, user: &str, database: &str) -> Result<(), String> {
    let mut out = BytesMut::new();
    startup::encode_startup(&mut out, &[("user", user), ("database", database)]);
    stream.set_read_timeout(Some(Duration::from_secs(30))).map_err(|e| e.to_string())?;
    stream.write_all(&out).map_err(|e| format!("startup: {e}"))?;
    let mut got = Vec::new();
    let mut buf = [0u8; 1024];
    while !got.windows(6).any(|w| w == b"Z\0\0\0\x05I") {
        match stream.read(&mut buf) {
            Ok(0) => return Err(format!("closed during login after {:?}", String::from_utf8_lossy(&got))),
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) => return Err(format!("login: {e}")),
        }
        if got.first() == Some(&b'E') {
            return Err(format!("login refused: {:?}", String::from_utf8_lossy(&got)));
        }
    }
    Ok(())
}

/// Writes `flood` as fast as `stream` takes it for `how_long`, reading
/// nothing, but no more than 16 KiB per millisecond (so that pglane reads
/// it in small pieces, as it would a client on a real network); returns the
/// bytes written. The socket is left open.
pub fn flood_for(stream: &mut TcpStream, flood: Flood, how_long: Duration) -> u64 {
    let chunk = flood.chunk();
    stream.set_nonblocking(true).expect("non-blocking");
    let started = Instant::now();
    let mut written = 0u64;
    let mut at = 0;
    while started.elapsed() < how_long {
        match stream.write(&chunk[at..]) {
            Ok(n) => {
                written += n as u64;
                at += n;
                if at == chunk.len() {
                    at = 0;
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => std::thread::sleep(Duration::from_millis(1)),
            Err(_) => break,
        }
    }
    written
}
