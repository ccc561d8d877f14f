//! floor-relay: the cheapest relay this machine can run, to know the floor.
//!
//! A measuring instrument, not a pooler: every client gets its own server
//! connection (1:1, like a session pooler with no pool), bytes are moved
//! without looking at them, there is no auth, no TLS, no limits. What it
//! shows is what any user-space relay must pay per transaction on this
//! kernel, so that pglane's and PgBouncer's CPU per transaction can be read
//! against it (bench/pgbench-compare `--floor`).
//!
//! It is written against the io-uring crate directly, with the cheapest
//! shape io_uring offers: one thread, one ring set up with SINGLE_ISSUER and
//! DEFER_TASKRUN, a recv always posted on each socket, the bytes it got sent
//! to the peer as one send op, and one `io_uring_enter` (submit and wait) per
//! turn of the loop. No executor, no timers, no readiness polling.
//!
//! `--threads N` runs N such loops, each pinned to a core of its own with a
//! TCP listener of its own on the same port (SO_REUSEPORT, the kernel
//! spreading clients over them), as pglane's shards do: what a relay that
//! does nothing pays for being more than one thread. The unix socket, if
//! any, is the first thread's.
//!
//! Server connections are opened with a blocking connect right after the
//! accept: it stalls the loop for a moment per client, which a floor
//! measurement of steady traffic does not see.
//!
//! Usage: floor-relay --listen 6450 --server 127.0.0.1:5432 [--threads 1]
//!                    [--listen-unix /tmp/.s.PGSQL.6450 --server-unix /tmp/.s.PGSQL.5432]

use std::io;
use std::net::TcpStream;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::net::{UnixListener, UnixStream};

use clap::Parser;
use io_uring::{cqueue, opcode, types, IoUring};

#[derive(Parser)]
#[command(about = "The cheapest io_uring byte relay: a floor to read proxies' CPU per transaction against")]
struct Args {
    /// TCP port to accept clients on (127.0.0.1).
    #[arg(long)]
    listen: u16,
    /// Where TCP clients are relayed to (host:port).
    #[arg(long)]
    server: String,
    /// Also accept clients on this unix socket path...
    #[arg(long, requires = "server_unix")]
    listen_unix: Option<String>,
    /// ...and relay them to this unix socket path.
    #[arg(long)]
    server_unix: Option<String>,
    /// Relay loops, each on a thread pinned to a core of its own.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..))]
    threads: u16,
}

/// Bytes one direction reads at a time.
const BUFFER: usize = 16 * 1024;

/// One client and its server: fds[0] is the client, fds[1] the server;
/// direction d reads fds[d] into bufs[d] and sends it to fds[1 - d].
struct Pair {
    fds: [OwnedFd; 2],
    bufs: [Box<[u8; BUFFER]>; 2],
    /// Bytes in bufs[d] and how many of them were sent so far.
    filled: [usize; 2],
    sent: [usize; 2],
    /// Ops in the kernel that point into this pair's buffers; the slot is
    /// reused only when none are left.
    in_flight: u32,
    closing: bool,
}

/// What a completion is for, packed into user_data.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Op {
    Accept { listener: usize },
    Recv { pair: usize, dir: usize },
    Send { pair: usize, dir: usize },
}

impl Op {
    fn encode(self) -> u64 {
        match self {
            Op::Accept { listener } => (listener as u64) << 8,
            Op::Recv { pair, dir } => (pair as u64) << 8 | 1 << 4 | dir as u64,
            Op::Send { pair, dir } => (pair as u64) << 8 | 2 << 4 | dir as u64,
        }
    }

    fn decode(data: u64) -> Op {
        let index = (data >> 8) as usize;
        let dir = (data & 1) as usize;
        match (data >> 4) & 0xf {
            0 => Op::Accept { listener: index },
            1 => Op::Recv { pair: index, dir },
            _ => Op::Send { pair: index, dir },
        }
    }
}

/// A listener and where its clients go.
struct Route {
    listener: OwnedFd,
    server: Server,
}

enum Server {
    Tcp(String),
    Unix(String),
}

impl Server {
    fn connect(&self) -> io::Result<OwnedFd> {
        Ok(match self {
            Server::Tcp(addr) => {
                let stream = TcpStream::connect(addr)?;
                stream.set_nodelay(true)?;
                stream.into()
            }
            Server::Unix(path) => UnixStream::connect(path)?.into(),
        })
    }
}

struct Relay {
    ring: IoUring,
    routes: Vec<Route>,
    pairs: Vec<Option<Pair>>,
}

impl Relay {
    fn push(&mut self, entry: io_uring::squeue::Entry) -> io::Result<()> {
        // SAFETY: every buffer an entry points into lives in a Pair that is
        // kept until its in_flight count is back to zero.
        while unsafe { self.ring.submission().push(&entry) }.is_err() {
            self.ring.submit()?;
        }
        Ok(())
    }

    fn post_recv(&mut self, index: usize, dir: usize) -> io::Result<()> {
        let Some(pair) = self.pairs[index].as_mut() else { return Ok(()) };
        let entry = opcode::Recv::new(types::Fd(pair.fds[dir].as_raw_fd()), pair.bufs[dir].as_mut_ptr(), BUFFER as u32)
            .build()
            .user_data(Op::Recv { pair: index, dir }.encode());
        pair.in_flight += 1;
        self.push(entry)
    }

    fn post_send(&mut self, index: usize, dir: usize) -> io::Result<()> {
        let Some(pair) = self.pairs[index].as_mut() else { return Ok(()) };
        let unsent = &pair.bufs[dir][pair.sent[dir]..pair.filled[dir]];
        let entry = opcode::Send::new(types::Fd(pair.fds[1 - dir].as_raw_fd()), unsent.as_ptr(), unsent.len() as u32)
            .build()
            .user_data(Op::Send { pair: index, dir }.encode());
        pair.in_flight += 1;
        self.push(entry)
    }

    fn post_accept(&mut self, listener: usize) -> io::Result<()> {
        let fd = self.routes[listener].listener.as_raw_fd();
        let entry = opcode::AcceptMulti::new(types::Fd(fd)).build().user_data(Op::Accept { listener }.encode());
        self.push(entry)
    }

    fn accepted(&mut self, listener: usize, client: RawFd) -> io::Result<()> {
        // SAFETY: the kernel just gave us this fd and nothing else owns it.
        let client = unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(client) };
        let _ = socket2::SockRef::from(&client).set_nodelay(true); // fails (harmlessly) on unix sockets
        let server = match self.routes[listener].server.connect() {
            Ok(server) => server,
            Err(e) => {
                eprintln!("floor-relay: connecting to the server: {e}");
                return Ok(()); // the client is closed by dropping it
            }
        };
        let pair = Pair {
            fds: [client, server],
            bufs: [Box::new([0; BUFFER]), Box::new([0; BUFFER])],
            filled: [0; 2],
            sent: [0; 2],
            in_flight: 0,
            closing: false,
        };
        let index = match self.pairs.iter().position(Option::is_none) {
            Some(free) => free,
            None => {
                self.pairs.push(None);
                self.pairs.len() - 1
            }
        };
        self.pairs[index] = Some(pair);
        self.post_recv(index, 0)?;
        self.post_recv(index, 1)
    }

    /// One side closed or failed: shut both sockets down (which completes
    /// the other direction's pending recv) and free the slot once the
    /// kernel holds no more of its buffers.
    fn close(&mut self, index: usize) {
        let Some(pair) = self.pairs[index].as_mut() else { return };
        if !pair.closing {
            pair.closing = true;
            for fd in &pair.fds {
                // SAFETY: shutdown on an fd this pair owns.
                unsafe { libc::shutdown(fd.as_raw_fd(), libc::SHUT_RDWR) };
            }
        }
        if pair.in_flight == 0 {
            self.pairs[index] = None;
        }
    }

    fn complete(&mut self, op: Op, result: i32, flags: u32) -> io::Result<()> {
        match op {
            Op::Accept { listener } => {
                if result >= 0 {
                    self.accepted(listener, result)?;
                } else {
                    eprintln!("floor-relay: accept: {}", io::Error::from_raw_os_error(-result));
                }
                if !cqueue::more(flags) {
                    self.post_accept(listener)?;
                }
            }
            Op::Recv { pair: index, dir } | Op::Send { pair: index, dir } => {
                let Some(pair) = self.pairs[index].as_mut() else { return Ok(()) };
                pair.in_flight -= 1;
                if pair.closing || result <= 0 {
                    self.close(index);
                    return Ok(());
                }
                match op {
                    Op::Recv { .. } => {
                        pair.filled[dir] = result as usize;
                        pair.sent[dir] = 0;
                        self.post_send(index, dir)?;
                    }
                    _ => {
                        pair.sent[dir] += result as usize;
                        if pair.sent[dir] < pair.filled[dir] {
                            self.post_send(index, dir)?;
                        } else {
                            self.post_recv(index, dir)?;
                        }
                    }
                }
            }
        }
        Ok(())
    }

    fn run(&mut self) -> io::Result<()> {
        for listener in 0..self.routes.len() {
            self.post_accept(listener)?;
        }
        let mut done = Vec::with_capacity(256);
        loop {
            match self.ring.submit_and_wait(1) {
                Ok(_) => {}
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
                Err(e) => return Err(e),
            }
            done.extend(self.ring.completion().map(|c| (c.user_data(), c.result(), c.flags())));
            for (data, result, flags) in done.drain(..) {
                self.complete(Op::decode(data), result, flags)?;
            }
        }
    }
}

/// A TCP listener on 127.0.0.1:`port` that other threads' listeners share
/// (SO_REUSEPORT).
fn shared_tcp_listener(port: u16) -> io::Result<OwnedFd> {
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)?;
    socket.set_reuse_address(true)?;
    socket.set_reuse_port(true)?;
    socket.bind(&std::net::SocketAddr::from(([127, 0, 0, 1], port)).into())?;
    socket.listen(1024)?;
    Ok(socket.into())
}

fn main() -> io::Result<()> {
    let args = Args::parse();
    // Every listener is bound before any loop runs, so a client never finds
    // the port half-open.
    let mut per_thread: Vec<Vec<Route>> = Vec::new();
    for _ in 0..args.threads {
        per_thread.push(vec![Route { listener: shared_tcp_listener(args.listen)?, server: Server::Tcp(args.server.clone()) }]);
    }
    if let (Some(path), Some(server)) = (args.listen_unix, args.server_unix) {
        let _ = std::fs::remove_file(&path);
        let listener = UnixListener::bind(&path)?;
        per_thread[0].push(Route { listener: listener.into(), server: Server::Unix(server) });
    }
    let cores = core_affinity::get_core_ids().unwrap_or_default();
    let threads: Vec<_> = per_thread
        .into_iter()
        .enumerate()
        .map(|(i, routes)| {
            let core = if args.threads > 1 { cores.get(i % cores.len().max(1)).copied() } else { None };
            std::thread::spawn(move || {
                if let Some(core) = core {
                    core_affinity::set_for_current(core);
                }
                let ring = IoUring::builder().setup_single_issuer().setup_defer_taskrun().setup_coop_taskrun().build(1024)?;
                Relay { ring, routes, pairs: Vec::new() }.run()
            })
        })
        .collect();
    for thread in threads {
        thread.join().map_err(|_| io::Error::other("a relay thread panicked"))??;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::Op;

    #[test]
    fn ops_survive_user_data() {
        for op in [
            Op::Accept { listener: 1 },
            Op::Recv { pair: 0, dir: 1 },
            Op::Send { pair: 70_000, dir: 0 },
            Op::Recv { pair: 12, dir: 0 },
        ] {
            assert_eq!(Op::decode(op.encode()), op);
        }
    }
}
