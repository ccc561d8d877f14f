//! The task that owns one listening connection: opens it, LISTENs and
//! UNLISTENs as its clients subscribe and leave, posts every notification
//! it receives to their mailboxes, opens it again when it is lost, and
//! closes it once nobody listens.
//!
//! It never writes to a client and never waits on one: a client that does
//! not read only fills its own mailbox.

use std::io;
use std::os::fd::AsRawFd;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::BytesMut;
use futures_lite::{AsyncRead, AsyncWriteExt};
use tracing::{debug, info, warn};

use super::{quoted, Command, HubRef, Listening, LISTENER_APPLICATION_NAME};
use crate::logging::Escaped;
use crate::protocol::backend::{self, ErrorFields};
use crate::protocol::frame::{split_message, Message};
use crate::protocol::{frontend, put_message};
use crate::server::{ServerConn, ServerError};

/// The largest message pglane takes from a listening connection (a
/// notification's payload is under 8000 bytes).
const MAX_MESSAGE: usize = 1 << 20;

/// How long it waits before trying to open a lost connection again, at
/// first and at most (doubling in between).
const RETRY_FIRST: Duration = Duration::from_millis(100);
const RETRY_MAX: Duration = Duration::from_secs(5);

/// Messages taken in one go before the task lets the shard's other tasks
/// run (the sessions that write what it posted): a burst of notifications
/// is fanned out and written in turns, not all taken in first.
const BUDGET: usize = 32;

/// How long a connection no longer needed may take to say goodbye.
const GOODBYE: Duration = Duration::from_secs(1);

/// The listening connection: the server's socket, and what was read of it.
struct Connection {
    server: Box<ServerConn>,
    read: BytesMut,
    /// Events taken since the task last let others run.
    taken: usize,
}

enum Event {
    Command(Command),
    Message(Message),
}

pub(super) async fn run(listening: Rc<Listening>, hub: HubRef) {
    let (database, user) = (Escaped(&listening.key.0), Escaped(&listening.key.1));
    let mut conn: Option<Connection> = None;
    // The connection was lost (its clients are told once it is back), and
    // whether they were told it is down.
    let mut lost = false;
    let mut told_down = false;
    let mut retry = RETRY_FIRST;
    while !listening.unwanted() {
        let Some(c) = conn.as_mut() else {
            match open(&listening, &hub).await {
                Ok(mut opened) => {
                    info!(%database, %user, "notification listener connected");
                    if lost {
                        listening.tell_everyone(&ErrorFields::notice(
                            "pglane's listening connection was lost and is back: notifications sent meanwhile may have been missed",
                        ));
                    }
                    (lost, told_down, retry) = (false, false, RETRY_FIRST);
                    // Its unread bytes are peeked at by the clients' tasks.
                    opened.server.stream.read_by_readiness();
                    listening.socket.set(Some(opened.server.stream.as_raw_fd()));
                    conn = Some(opened);
                }
                Err(e) => {
                    warn!(%database, %user, "notification listener cannot connect: {e}");
                    listening.fail_listens(&refusal(&e));
                    if lost && !told_down {
                        listening.tell_everyone(&ErrorFields::notice(format!(
                            "pglane's listening connection was lost and cannot be opened again ({e}): no notifications are delivered until it is"
                        )));
                        told_down = true;
                    }
                    crate::rt::sleep(retry).await;
                    retry = (retry * 2).min(RETRY_MAX);
                }
            }
            continue;
        };
        let outcome = match c.next_event(&listening).await {
            Ok(Event::Command(command)) => c.carry_out(&listening, &hub, command).await,
            Ok(Event::Message(m)) => c.take(&listening, &hub, m),
            Err(e) => Err(e),
        };
        if let Err(e) = outcome {
            warn!(%database, %user, "notification listener lost its connection: {e}");
            count(&hub, |s| s.connections_lost += 1);
            listening.listened.borrow_mut().clear();
            listening.socket.set(None);
            conn = None;
            lost = true;
        }
    }
    debug!(%database, %user, "notification listener closing: nobody listens");
    if let Some(hub) = hub.upgrade() {
        let mut listenings = hub.listenings.borrow_mut();
        if listenings.get(&listening.key).is_some_and(|l| Rc::ptr_eq(l, &listening)) {
            listenings.remove(&listening.key);
        }
    }
    listening.running.set(false);
    listening.socket.set(None);
    if let Some(c) = conn {
        c.server.end(crate::server::Goodbye::Terminate, GOODBYE).await;
    }
}

fn count(hub: &HubRef, f: impl FnOnce(&mut super::HubStats)) {
    if let Some(hub) = hub.upgrade() {
        hub.count(f);
    }
}

/// What a client whose LISTEN could not be carried out is answered.
fn refusal(e: &ServerError) -> ErrorFields {
    match e {
        ServerError::Refused(fields) => ErrorFields { severity: "ERROR".into(), ..fields.clone() },
        e => ErrorFields::error("08006", format!("pglane cannot open its listening connection: {e}")),
    }
}

/// Opens the connection and LISTENs to every channel someone listens on.
async fn open(listening: &Listening, hub: &HubRef) -> Result<Connection, ServerError> {
    let startup = [("application_name".to_owned(), LISTENER_APPLICATION_NAME.to_owned())];
    let limit = listening.target.connect_timeout * 2;
    let server = match crate::rt::with_timeout(limit, ServerConn::connect_for_client(&listening.target, &startup)).await {
        Some(server) => server?,
        None => return Err(ServerError::Write(io::Error::new(io::ErrorKind::TimedOut, "timed out opening it"))),
    };
    let mut c = Connection { server: Box::new(server), read: BytesMut::new(), taken: 0 };
    let channels: Vec<String> = listening.channels.borrow().keys().cloned().collect();
    if !channels.is_empty() {
        let sql: Vec<String> = channels.iter().map(|c| format!("LISTEN {}", quoted(c))).collect();
        if let Err(refused) = c.run(listening, hub, &sql.join("; ")).await? {
            return Err(ServerError::Refused(refused));
        }
        listening.listened.borrow_mut().extend(channels);
    }
    Ok(c)
}

impl Listening {
    /// Answers every LISTEN waiting in the queue with `error`.
    fn fail_listens(&self, error: &ErrorFields) {
        let waiting: Vec<Command> = self.commands.borrow_mut().drain(..).collect();
        for command in waiting {
            match command {
                Command::Listen { ack, .. } => ack.answer(Err(error.clone())),
                // Nothing more comes until it is open again.
                Command::CatchUp { ack } => ack.answer(Ok(())),
                // The connection is to be opened again: it will LISTEN to
                // what is wanted then.
                Command::Unlisten { .. } => {}
            }
        }
    }
}

impl Connection {
    /// The next command for the connection, or message from it.
    async fn next_event(&mut self, listening: &Listening) -> Result<Event, ServerError> {
        std::future::poll_fn(|cx| {
            self.taken += 1;
            if self.taken > BUDGET {
                self.taken = 0;
                cx.waker().wake_by_ref();
                return Poll::Pending;
            }
            if let Some(command) = listening.commands.borrow_mut().pop_front() {
                return Poll::Ready(Ok(Event::Command(command)));
            }
            match self.poll_message(cx) {
                Poll::Ready(m) => Poll::Ready(m.map(Event::Message)),
                Poll::Pending => {
                    *listening.task.borrow_mut() = Some(cx.waker().clone());
                    Poll::Pending
                }
            }
        })
        .await
    }

    fn poll_message(&mut self, cx: &mut Context<'_>) -> Poll<Result<Message, ServerError>> {
        loop {
            if let Some(m) = split_message(&mut self.read, MAX_MESSAGE)? {
                return Poll::Ready(Ok(m));
            }
            let mut chunk = [0u8; 8192];
            match std::task::ready!(Pin::new(&mut self.server.stream).poll_read(cx, &mut chunk)) {
                Ok(0) => return Poll::Ready(Err(ServerError::Read(crate::net::ReadError::Closed))),
                Ok(n) => self.read.extend_from_slice(&chunk[..n]),
                Err(e) => return Poll::Ready(Err(ServerError::Read(e.into()))),
            }
        }
    }

    async fn next_message(&mut self) -> Result<Message, ServerError> {
        std::future::poll_fn(|cx| self.poll_message(cx)).await
    }

    /// A message the server sent unasked: a notification is fanned out; a
    /// FATAL ends the connection; anything else (a notice, a reported
    /// setting) is for nobody.
    fn take(&mut self, listening: &Listening, hub: &HubRef, m: Message) -> Result<(), ServerError> {
        match m.tag {
            backend::NOTIFICATION_RESPONSE => {
                let channel = backend::decode_notification_channel(&m.body)?;
                let mut whole = BytesMut::with_capacity(m.body.len() + 5);
                put_message(&mut whole, m.tag, |b| b.extend_from_slice(&m.body));
                let (delivered, dropped) = listening.fan_out(channel, &whole);
                count(hub, |s| {
                    s.received += 1;
                    s.delivered += delivered;
                    s.dropped += dropped;
                });
                Ok(())
            }
            backend::ERROR_RESPONSE => {
                let e = backend::decode_error_fields(&m.body)?;
                Err(ServerError::Refused(e))
            }
            _ => Ok(()),
        }
    }

    /// Tells the server what the command says; an error of the connection
    /// puts the command back, to be carried out once it is open again.
    async fn carry_out(&mut self, listening: &Listening, hub: &HubRef, command: Command) -> Result<(), ServerError> {
        let sql = match &command {
            Command::Listen { channel, .. } => format!("LISTEN {}", quoted(channel)),
            // Someone subscribed again meanwhile: their LISTEN follows.
            Command::Unlisten { channel } if listening.channels.borrow().contains_key(channel) => return Ok(()),
            Command::Unlisten { channel } => format!("UNLISTEN {}", quoted(channel)),
            // An empty query: EmptyQueryResponse and ReadyForQuery, after
            // whatever the server sent before.
            Command::CatchUp { .. } => String::new(),
        };
        let answer = match self.run(listening, hub, &sql).await {
            Ok(answer) => answer,
            Err(e) => {
                listening.commands.borrow_mut().push_front(command);
                return Err(e);
            }
        };
        match command {
            Command::Listen { channel, ack } => {
                if answer.is_ok() && listening.channels.borrow().contains_key(&channel) {
                    listening.listened.borrow_mut().insert(channel);
                }
                ack.answer(answer);
            }
            Command::CatchUp { ack } => ack.answer(Ok(())),
            Command::Unlisten { .. } => {}
        }
        Ok(())
    }

    /// Runs `sql` to ReadyForQuery; the server's error, if it had one.
    /// Notifications that come meanwhile are fanned out (counted if `hub`).
    async fn run(&mut self, listening: &Listening, hub: &HubRef, sql: &str) -> Result<Result<(), ErrorFields>, ServerError> {
        let mut out = BytesMut::new();
        frontend::query(&mut out, sql);
        self.server.stream.write_all(&out).await.map_err(ServerError::Write)?;
        let mut error = None;
        loop {
            let m = self.next_message().await?;
            match m.tag {
                backend::READY_FOR_QUERY => return Ok(error.map_or(Ok(()), Err)),
                backend::ERROR_RESPONSE => {
                    let e = backend::decode_error_fields(&m.body)?;
                    if e.ends_session() {
                        return Err(ServerError::Refused(e));
                    }
                    error.get_or_insert(e);
                }
                backend::NOTIFICATION_RESPONSE => self.take(listening, hub, m)?,
                _ => {}
            }
        }
    }
}
