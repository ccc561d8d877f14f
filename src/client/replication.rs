//! Replication connections: `replication=true` (physical: pg_basebackup,
//! pg_receivewal, a standby) and `replication=database` (logical:
//! pg_recvlogical, Debezium, pgjdbc's replication API).
//!
//! A replication connection speaks the walsender's protocol (CopyBoth
//! streams, replication commands), has no transactions to pool by, and is
//! one server process per client on PostgreSQL too. So pglane authenticates
//! the client as any other, then opens a server connection of the client's
//! own, as the user its pool would log in as, with the client's startup
//! parameters (`replication` among them), greets the client with what the
//! server said at login, and from then on passes bytes both ways untouched
//! until either side closes. The connection is never pooled and counts
//! against no pool's size; it counts against max_client_conn.
//!
//! This module owns that pass-through. It never parses what flows through.

use std::cell::Cell;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::BytesMut;
use futures_lite::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tracing::info;

use crate::net::Stream;
use crate::protocol::backend::{self, ErrorFields, TransactionStatus};
use crate::protocol::startup::{StartupParams, PROTOCOL_OPTION_PREFIX};
use crate::runtime::{ClientEntry, ClientState};
use crate::server::{ServerConn, ServerTarget};

/// Serves a replication client: its own server connection, bytes passed
/// through both ways until either side closes.
pub(super) async fn serve(
    client: &mut Stream,
    startup: &StartupParams,
    target: &ServerTarget,
    pending: &[u8],
    process_id: i32,
    entry: &ClientEntry,
) {
    let mut server = match open(target, startup, client, process_id, entry.secret_key).await {
        Ok(server) => server,
        Err(e) => {
            info!("replication connection refused: {e}");
            if let Some(fields) = e.client_message() {
                super::send_error(client, &fields).await;
            }
            return;
        }
    };
    // A cancel request reaches it for as long as the session lasts.
    *entry.server.borrow_mut() = Some(server.cancel_key.clone());
    entry.set_state(ClientState::Active);
    match pass_through(client, &mut server.stream, pending, &entry.killed).await {
        Ok(()) => info!("replication connection ended"),
        Err(e) => info!("replication connection ended: {e}"),
    }
    *entry.server.borrow_mut() = None;
}

/// Which kind of replication a startup packet asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// `replication=true`: the whole cluster's WAL, no database.
    Physical,
    /// `replication=database`: logical decoding in the client's database.
    Logical,
}

impl Mode {
    /// As PgBouncer's SHOW CLIENTS spells it (`none` for no replication).
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Physical => "physical",
            Mode::Logical => "logical",
        }
    }
}

/// The `replication` startup parameter as PostgreSQL reads it: `database`
/// (so spelled), or a boolean (`true`, `on`, `yes`, `1` and their prefixes,
/// any case); `None` for false. Anything else is PostgreSQL's FATAL 22023.
pub fn mode(value: &str) -> Result<Option<Mode>, ErrorFields> {
    if value == "database" {
        return Ok(Some(Mode::Logical));
    }
    match parse_bool(value) {
        Some(true) => Ok(Some(Mode::Physical)),
        Some(false) => Ok(None),
        None => Err(ErrorFields {
            hint: Some("Valid values are: \"false\", 0, \"true\", 1, \"database\".".into()),
            ..ErrorFields::fatal("22023", format!("invalid value for parameter \"replication\": \"{value}\""))
        }),
    }
}

/// PostgreSQL's `parse_bool`: true, false, yes, no and prefixes of them, on,
/// off (at least "of"), 1, 0; case-insensitive.
fn parse_bool(value: &str) -> Option<bool> {
    let v = value.to_ascii_lowercase();
    let prefix_of = |word: &str| !v.is_empty() && word.starts_with(v.as_str());
    match v.as_str() {
        "1" | "on" => Some(true),
        "0" | "of" | "off" => Some(false),
        _ if prefix_of("true") || prefix_of("yes") => Some(true),
        _ if prefix_of("false") || prefix_of("no") => Some(false),
        _ => None,
    }
}

/// The client's startup parameters that go to the server as they are:
/// all but user and database (the pool's login decides those) and the
/// protocol options pglane negotiated away.
pub fn server_startup(startup: &StartupParams) -> Vec<(String, String)> {
    startup
        .params
        .iter()
        .filter(|(name, _)| name != "user" && name != "database" && !name.starts_with(PROTOCOL_OPTION_PREFIX))
        .cloned()
        .collect()
}

/// Opens the client's server connection and greets the client with the
/// server's ParameterStatus values, the client's key and ReadyForQuery.
pub async fn open(
    target: &ServerTarget,
    startup: &StartupParams,
    client: &mut Stream,
    process_id: i32,
    secret_key: i32,
) -> Result<ServerConn, super::SessionError> {
    let server = ServerConn::connect_for_client(target, &server_startup(startup)).await?;
    let mut out = BytesMut::new();
    for (name, value) in &server.params {
        backend::parameter_status(&mut out, name, value);
    }
    backend::backend_key_data(&mut out, process_id, secret_key);
    backend::ready_for_query(&mut out, TransactionStatus::Idle);
    client.write_all(&out).await?;
    Ok(server)
}

/// Passes bytes between the client and its server connection until either
/// closes, or `killed` (admin KILL). `pending`: what the client sent after
/// its login, which goes first.
pub async fn pass_through(client: &mut Stream, server: &mut Stream, pending: &[u8], killed: &Cell<bool>) -> io::Result<()> {
    let mut up = Direction::with(pending);
    let mut down = Direction::with(&[]);
    std::future::poll_fn(|cx| {
        for _ in 0..ROUNDS {
            if killed.get() {
                return Poll::Ready(Ok(()));
            }
            let moved_up = up.step(cx, client, server)?;
            let moved_down = down.step(cx, server, client)?;
            if up.done() || down.done() {
                return Poll::Ready(Ok(()));
            }
            if !moved_up && !moved_down {
                return Poll::Pending;
            }
        }
        // Others' turn on this shard.
        cx.waker().wake_by_ref();
        Poll::Pending
    })
    .await
}

/// Rounds of moving bytes before the pass-through lets other tasks run.
const ROUNDS: usize = 16;

/// Bytes read from one side and not yet written to the other.
struct Direction {
    buf: Vec<u8>,
    start: usize,
    end: usize,
    eof: bool,
}

impl Direction {
    /// What one read takes in at most (a WAL stream is a stream of 8 KiB pages).
    const SIZE: usize = 64 * 1024;

    fn with(first: &[u8]) -> Direction {
        let mut buf = vec![0; Self::SIZE.max(first.len())];
        buf[..first.len()].copy_from_slice(first);
        Direction { buf, start: 0, end: first.len(), eof: false }
    }

    /// The reading side closed and all it sent was passed on.
    fn done(&self) -> bool {
        self.eof && self.start == self.end
    }

    /// Writes what is buffered to `to`, then reads more from `from`;
    /// whether any byte moved.
    fn step(&mut self, cx: &mut Context<'_>, from: &mut Stream, to: &mut Stream) -> io::Result<bool> {
        let mut moved = false;
        while self.start < self.end {
            match Pin::new(&mut *to).poll_write(cx, &self.buf[self.start..self.end]) {
                Poll::Ready(Ok(0)) => return Err(io::ErrorKind::WriteZero.into()),
                Poll::Ready(Ok(n)) => {
                    self.start += n;
                    moved = true;
                }
                Poll::Ready(Err(e)) => return Err(e),
                Poll::Pending => return Ok(moved),
            }
        }
        if let Poll::Ready(Err(e)) = Pin::new(&mut *to).poll_flush(cx) {
            return Err(e);
        }
        self.start = 0;
        self.end = 0;
        if self.eof {
            return Ok(moved);
        }
        match Pin::new(from).poll_read(cx, &mut self.buf) {
            Poll::Ready(Ok(0)) => self.eof = true,
            Poll::Ready(Ok(n)) => self.end = n,
            Poll::Ready(Err(e)) if e.kind() == io::ErrorKind::ConnectionReset => self.eof = true,
            Poll::Ready(Err(e)) => return Err(e),
            Poll::Pending => return Ok(moved),
        }
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_replication_parameter_as_postgresql_reads_it() {
        for physical in ["true", "TRUE", "t", "tr", "on", "yes", "y", "1"] {
            assert_eq!(mode(physical), Ok(Some(Mode::Physical)), "{physical}");
        }
        for off in ["false", "f", "off", "of", "no", "n", "0", "False"] {
            assert_eq!(mode(off), Ok(None), "{off}");
        }
        assert_eq!(mode("database"), Ok(Some(Mode::Logical)));
        for bad in ["", "o", "2", "db", "truest", "database1", "DataBase"] {
            let e = mode(bad).unwrap_err();
            assert_eq!((e.severity.as_str(), e.code.as_str()), ("FATAL", "22023"), "{bad}");
            assert_eq!(e.message, format!("invalid value for parameter \"replication\": \"{bad}\""));
        }
    }

    #[test]
    fn the_clients_parameters_go_to_the_server_but_user_database_and_protocol_options() {
        let startup = StartupParams {
            params: [("user", "u"), ("database", "d"), ("replication", "database"), ("application_name", "x"), ("_pq_.a", "1")]
                .iter()
                .map(|(n, v)| (n.to_string(), v.to_string()))
                .collect(),
            ..StartupParams::default()
        };
        assert_eq!(
            server_startup(&startup),
            [("replication".to_owned(), "database".to_owned()), ("application_name".to_owned(), "x".to_owned())]
        );
    }
}
