//! One connection to a PostgreSQL server: opening it, logging in, and the
//! few things pglane does with it on its own (reset, rollback, health check).
//!
//! This module owns the server socket while no client is using it. It never
//! decides when a connection is lent or returned (that is `pool`), and never
//! relays a client's traffic (that is `client`).

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use futures_lite::AsyncWriteExt;
use thiserror::Error;
use tracing::debug;

use crate::auth::md5::{md5_password_hash, md5_salted_response};
use crate::auth::scram::{ClientKeys, SaltedPasswordCache, ScramClient, SCRAM_SHA_256};
use crate::auth::secret::Secret;
use crate::config::{LoadBalanceHosts, ServerAddress, SslMode, TargetSessionAttrs};
use crate::net::tls::ServerTls;
use crate::net::{read_message, ReadError, Stream};
use crate::prepare::ServerStatements;
use crate::protocol::backend::{self, Authentication, ErrorFields, TransactionStatus};
use crate::protocol::{frontend, startup};

mod output;
pub mod role;

pub use output::{server_text_settings, ConnectionOutput};
pub use role::{Fit, Role};

/// Largest message pglane reads whole from a server during login and reset.
const MAX_LOGIN_MESSAGE: usize = 1 << 20;

/// SaltedPasswords this shard's server logins have derived (one per
/// password, salt and iteration count), so opening the next connection to the
/// same server costs two HMACs instead of a PBKDF2 run. A thread is a shard,
/// so this is per-shard state without a lock.
const SALTED_PASSWORDS_PER_SHARD: usize = 256;
thread_local! {
    static SALTED_PASSWORDS: std::cell::RefCell<SaltedPasswordCache> =
        std::cell::RefCell::new(SaltedPasswordCache::new(SALTED_PASSWORDS_PER_SHARD));
}

#[derive(Debug, Error)]
pub enum ServerError {
    #[error("cannot connect to server {addr}: {source}")]
    Connect { addr: ServerAddress, source: std::io::Error },
    #[error("TLS with server {addr}: {source}")]
    Tls { addr: ServerAddress, source: crate::net::tls::TlsError },
    #[error("server {0}")]
    Refused(ErrorFields),
    #[error("server asks for {0}, which pglane cannot answer: {1}")]
    Auth(&'static str, String),
    #[error("server connection: {0}")]
    Read(#[from] ReadError),
    #[error("server connection: {0}")]
    Write(#[from] std::io::Error),
    #[error("server sent unexpected message '{}' during {during}", char::from(*.tag))]
    Unexpected { tag: u8, during: &'static str },
    #[error("server: {0}")]
    Protocol(#[from] crate::protocol::ProtocolError),
    #[error("server {addr}: {why}")]
    Unsuitable { addr: ServerAddress, why: &'static str },
    #[error("no server listed")]
    NoHost,
}

impl ServerError {
    /// The server cannot be reached, or is going away or not up yet: a
    /// reason to try another host, and to try again later, that says
    /// nothing of the config. A refusal that waiting does not cure (a wrong
    /// password, no such database, too many connections) is not.
    pub fn is_unreachable(&self) -> bool {
        match self {
            ServerError::Connect { .. } | ServerError::Read(ReadError::Io(_) | ReadError::Closed) | ServerError::Write(_) => true,
            // 57P01-57P03: shutting down, crash recovery, starting up or in
            // recovery; 08: connection exceptions.
            ServerError::Refused(e) => e.code.starts_with("57P") || e.code.starts_with("08"),
            _ => false,
        }
    }
}

/// What pglane needs to open a server connection for one pool.
#[derive(Debug, Clone)]
pub struct ServerTarget {
    /// The database's servers, in the order the config lists them.
    pub hosts: Vec<ServerHost>,
    /// Which of their sessions will do, and in which order to try them
    /// (see `crate::pool::hosts`).
    pub target_session_attrs: TargetSessionAttrs,
    pub load_balance_hosts: LoadBalanceHosts,
    /// How long a connection waits for a host that will do when none does
    /// (server_retry_timeout).
    pub retry_timeout: Duration,
    pub dbname: String,
    pub user: String,
    /// The secret to answer the server's password request with, if any.
    pub secret: Option<Secret>,
    /// For SCRAM without a plaintext password: the keys a client proved at
    /// login against the server's own verifier (auth_query users).
    pub scram_keys: Option<ClientKeys>,
    pub connect_timeout: Duration,
    /// The TCP options of its connections (tcp_keepalive and the others).
    pub tcp: crate::net::TcpTuning,
    /// Size of each connection's prepared-statement set.
    pub max_prepared_statements: usize,
    /// Highest SCRAM iteration count pglane computes for this server
    /// (server_scram_max_iterations).
    pub scram_max_iterations: u32,
    /// Ask each new connection for its values of the unreported output
    /// settings (binary_negotiation needs them).
    pub learn_output_settings: bool,
}

/// One server of a database.
#[derive(Debug, Clone)]
pub struct ServerHost {
    pub address: ServerAddress,
    /// TLS to this server (server_tls_sslmode); `None` for plaintext.
    pub tls: Option<crate::net::tls::ServerTls>,
}

/// Which backend a server connection is: where, which process, since when.
/// Also the key a client needs to cancel what it is running.
#[derive(Debug)]
pub struct CancelKey {
    pub address: ServerAddress,
    pub process_id: i32,
    pub secret_key: i32,
    pub connected_at: std::time::SystemTime,
    /// Protocol and cipher when the connection is TLS (SHOW SERVERS' tls).
    pub tls: Option<String>,
    /// pglane's end of a TCP connection (SHOW SERVERS' local_addr).
    pub local_addr: Option<std::net::SocketAddr>,
    /// SHOW SERVERS' `id` (see `runtime::next_connection_id`).
    pub id: u64,
    /// The connection's session, for SHOW SERVERS' `prepared_statements`
    /// while a client holds it.
    pub session: std::rc::Weak<RefCell<ServerSession>>,
    /// Cancel requests on their way to this backend. While there is one,
    /// the connection goes to no other client (see `pool::Lease::release`):
    /// a cancel that arrives after the query it was sent for ended must find
    /// the backend idle, which ignores it, never running another's query.
    cancels: Cell<u32>,
    cancels_done: RefCell<Vec<std::task::Waker>>,
}

impl CancelKey {
    pub fn new(address: ServerAddress, process_id: i32, secret_key: i32, tls: Option<String>) -> CancelKey {
        CancelKey {
            address,
            process_id,
            secret_key,
            connected_at: std::time::SystemTime::now(),
            tls,
            local_addr: None,
            id: crate::runtime::next_connection_id(),
            session: std::rc::Weak::new(),
            cancels: Cell::new(0),
            cancels_done: RefCell::new(Vec::new()),
        }
    }

    /// Counts a cancel request on its way to this backend until the
    /// returned guard is dropped.
    pub fn cancel_under_way(self: &Rc<Self>) -> CancelUnderWay {
        self.cancels.set(self.cancels.get() + 1);
        CancelUnderWay(self.clone())
    }

    pub fn has_cancels_under_way(&self) -> bool {
        self.cancels.get() > 0
    }

    /// Waits until no cancel request is on its way to this backend.
    pub async fn cancels_done(&self) {
        std::future::poll_fn(|cx| match self.cancels.get() {
            0 => std::task::Poll::Ready(()),
            _ => {
                let mut wakers = self.cancels_done.borrow_mut();
                if !wakers.iter().any(|w| w.will_wake(cx.waker())) {
                    wakers.push(cx.waker().clone());
                }
                std::task::Poll::Pending
            }
        })
        .await
    }
}

/// A cancel request on its way to a backend (see [`CancelKey::cancel_under_way`]).
pub struct CancelUnderWay(Rc<CancelKey>);

impl Drop for CancelUnderWay {
    fn drop(&mut self) {
        let key = &self.0;
        key.cancels.set(key.cancels.get() - 1);
        if key.cancels.get() == 0 {
            for waker in key.cancels_done.borrow_mut().drain(..) {
                waker.wake();
            }
        }
    }
}

/// The session state of one server connection that pglane tracks.
#[derive(Debug)]
pub struct ServerSession {
    /// The shard's statements this connection has prepared.
    pub statements: ServerStatements,
    /// Session settings clients changed on it (see `client::settings`).
    pub settings: crate::settings::Settings,
    /// The client session whose transactions last ran on it (its serial,
    /// unique for the life of the process; 0 for none yet): the one whose
    /// sequence state it may hold (`Exchange::sequences_may_be_foreign`).
    pub last_client: u64,
}

pub struct ServerConn {
    pub stream: Stream,
    /// Shared with the client that holds the connection, for cancel requests.
    pub cancel_key: Rc<CancelKey>,
    /// ParameterStatus values the server reported at login.
    pub params: Vec<(String, String)>,
    pub created: Instant,
    /// When it last went back to its pool.
    pub idle_since: crate::rt::Stamp,
    /// What clients left on its session that pglane keeps track of. Shared,
    /// so that the client whose request runs next on it can translate its
    /// messages while the holder still reads its replies (see
    /// `pool::Opening`); borrowed only for the span of one step.
    pub session: Rc<RefCell<ServerSession>>,
    /// The pool generation it was opened in (see `Pool::reconnect`).
    pub generation: u64,
    /// Which of its target's hosts it is connected to.
    pub host: usize,
    /// What its session is, when pglane needed to know (a target_session_attrs
    /// other than "any"); learnt at login (see [`role`]).
    pub role: Option<Role>,
    /// It passed a client a read-only error (25006): its pool asks its host
    /// what it is before it serves anyone else (see `pool::hosts`).
    pub refused_a_write: bool,
    /// Counts it among its pool's open connections while it lives.
    pub census: Option<crate::pool::CensusToken>,
    /// How it prints values, for binary negotiation: its login values and,
    /// when asked (`learn_output_settings`), its unreported output settings
    /// (extra_float_digits, bytea_output) right after login. What a client
    /// changes is in `session.settings`. Shared, as the session is, with a
    /// client whose request goes behind another's (`pool::Opening`).
    pub output: Rc<ConnectionOutput>,
}

impl Drop for ServerConn {
    /// Whatever the connection still had to send to the server belongs to a
    /// conversation nobody continues (a connection is dropped only when it
    /// is closed): it is dropped, and the socket closed at once. Left to
    /// linger, a server that does not read (blocked writing replies nobody
    /// reads) would keep its backend, uncounted, until the send gave up.
    fn drop(&mut self) {
        self.stream.abandon();
    }
}

impl ServerConn {
    /// Connects to host `host` of `target` and logs in; returns once the
    /// server says ReadyForQuery, and (when target_session_attrs is not
    /// "any") knows what the session is.
    pub async fn connect(target: &ServerTarget, host: usize, generation: u64) -> Result<ServerConn, ServerError> {
        Self::connect_with(target, host, generation, &[]).await
    }

    /// A connection of a client's own, never pooled: the first of the
    /// target's hosts, in the listed order, that logs in and is what
    /// target_session_attrs asks for (by what it reports at login), with
    /// more startup parameters (a replication connection's `replication`
    /// and the rest of its client's startup packet).
    pub async fn connect_for_client(target: &ServerTarget, startup: &[(String, String)]) -> Result<ServerConn, ServerError> {
        let target = ServerTarget { learn_output_settings: false, ..target.clone() };
        let mut last = None;
        let mut fallback = None;
        for host in 0..target.hosts.len() {
            match Self::connect_with(&target, host, 0, startup).await {
                Ok(conn) => match conn.role.map_or(role::Fit::Yes, |r| r.fit(target.target_session_attrs)) {
                    role::Fit::Yes => return Ok(conn),
                    role::Fit::Fallback => {
                        fallback.get_or_insert(conn);
                    }
                    role::Fit::No => {
                        let why = conn.role.map_or("", |r| r.refusal(target.target_session_attrs));
                        last = Some(ServerError::Unsuitable { addr: target.hosts[host].address.clone(), why });
                    }
                },
                Err(e) => last = Some(e),
            }
        }
        fallback.ok_or_else(|| last.unwrap_or(ServerError::NoHost))
    }

    async fn connect_with(
        target: &ServerTarget,
        host: usize,
        generation: u64,
        startup: &[(String, String)],
    ) -> Result<ServerConn, ServerError> {
        let server = &target.hosts[host];
        let address = &server.address;
        let opened = match &server.tls {
            // libpq's allow: plaintext first, TLS if the server refuses that.
            Some(tls) if tls.mode == SslMode::Allow => match open(target, address, None, startup).await {
                Err(ServerError::Refused(e)) => {
                    debug!(server = %address, "plaintext login refused ({}), trying TLS", e.message);
                    open(target, address, Some(tls), startup).await
                }
                other => other,
            },
            tls => open(target, address, tls.as_ref(), startup).await,
        };
        let mut conn = opened.map(|(stream, (process_id, secret_key, params))| {
            let session = Rc::new(RefCell::new(ServerSession {
                statements: ServerStatements::new(target.max_prepared_statements),
                settings: Default::default(),
                last_client: 0,
            }));
            ServerConn {
                cancel_key: Rc::new(CancelKey {
                    local_addr: stream.local_addr(),
                    session: Rc::downgrade(&session),
                    ..CancelKey::new(address.clone(), process_id, secret_key, stream.tls_description())
                }),
                stream,
                params,
                created: Instant::now(),
                idle_since: crate::rt::Stamp::read(),
                session,
                generation,
                host,
                role: None,
                refused_a_write: false,
                census: None,
                output: Rc::default(),
            }
        })?;
        if target.target_session_attrs != TargetSessionAttrs::Any {
            conn.role = match Role::from_params(&conn.params) {
                Some(role) => Some(role),
                None => Some(conn.ask_role(target.connect_timeout).await?),
            };
        }
        if target.learn_output_settings {
            let sql = format!(
                "SELECT name, setting FROM pg_catalog.pg_settings WHERE name IN ({})",
                crate::settings::OUTPUT.map(|n| format!("'{n}'")).join(", ")
            );
            let learn = conn.query_pairs(&sql);
            let output_defaults = match crate::rt::with_timeout(target.connect_timeout, learn).await {
                Some(Ok(Ok(pairs))) => pairs,
                Some(Ok(Err(e))) => {
                    debug!(server = %address, "cannot read the output settings ({}): binary floats stay off", e.message);
                    Vec::new()
                }
                Some(Err(e)) => return Err(e),
                None => return Err(timed_out(address, "timed out reading settings after login")),
            };
            conn.output = Rc::new(ConnectionOutput::new(&conn.params, &output_defaults));
        } else {
            conn.output = Rc::new(ConnectionOutput::new(&conn.params, &[]));
        }
        Ok(conn)
    }

    /// Asks the server what this session is (see [`role::ROLE_QUERY`]),
    /// within `timeout`: for servers that do not report it at login, and for
    /// the periodic check of an idle connection.
    pub async fn ask_role(&mut self, timeout: Duration) -> Result<Role, ServerError> {
        let asked = crate::rt::with_timeout(timeout, self.query_pairs(role::ROLE_QUERY)).await;
        match asked {
            Some(Ok(Ok(pairs))) => Role::from_answer(&pairs)
                .ok_or(ServerError::Unexpected { tag: backend::DATA_ROW, during: "the check of what the session is" }),
            Some(Ok(Err(refused))) => Err(ServerError::Refused(refused)),
            Some(Err(e)) => Err(e),
            None => Err(timed_out(&self.cancel_key.address, "timed out asking what the session is")),
        }
    }

    /// Whether the backend has a temporary schema (`pg_my_temp_schema()`):
    /// it made one for the first temporary object of its life, and keeps
    /// it when the objects are dropped or discarded. Such a session is not
    /// a fresh one to its next client: `pg_my_temp_schema()` answers it,
    /// and a statement it prepared is not analysed again when it makes its
    /// own first temporary object, as on a fresh session (the search path
    /// it resolved names in does not change). Outside a transaction block.
    pub async fn has_temp_schema(&mut self) -> Result<bool, ServerError> {
        let sql = "SELECT 'oid', pg_catalog.pg_my_temp_schema()::pg_catalog.int8::pg_catalog.text";
        Ok(self.query_value(sql).await?.is_some_and(|oid| oid != "0"))
    }

    /// Runs `sql`, a simple query of one (name, value) row as
    /// [`ServerConn::query_pairs`] reads them, and returns the first row's
    /// value (`None` if no row came); the server's error is `Refused`.
    pub async fn query_value(&mut self, sql: &str) -> Result<Option<String>, ServerError> {
        match self.query_pairs(sql).await? {
            Ok(pairs) => Ok(pairs.into_iter().next().map(|(_, value)| value)),
            Err(e) => Err(ServerError::Refused(e)),
        }
    }

    /// Runs `sql`, a simple query whose rows have two text columns, and
    /// returns them, or the server's error. Ok only if the server ends up idle.
    pub async fn query_pairs(&mut self, sql: &str) -> Result<Result<Vec<(String, String)>, ErrorFields>, ServerError> {
        let mut pairs = Vec::new();
        let outcome = self
            .run_with(sql, |m| {
                if m.tag == backend::DATA_ROW {
                    let row = backend::decode_data_row(&m.body)?;
                    let mut values = row.iter().map(|v| v.map(|v| String::from_utf8_lossy(v).into_owned()));
                    if let (Some(Some(a)), Some(Some(b))) = (values.next(), values.next()) {
                        pairs.push((a, b));
                    }
                }
                Ok(())
            })
            .await?;
        Ok(outcome.map(|()| pairs))
    }

    /// Runs `sql` as a simple query and waits for ReadyForQuery, discarding
    /// its results; the first ErrorResponse, if any, is the inner error.
    /// Ok only if the server ends up idle (not in a transaction).
    pub async fn run_checked(&mut self, sql: &str) -> Result<Result<(), ErrorFields>, ServerError> {
        self.run_with(sql, |_| Ok(())).await
    }

    /// `run_checked`, returning the ParameterStatus values the server
    /// reported while it ran (the SETs of reported settings it made). The
    /// NoticeResponses it sent (a SET's warning: an application_name
    /// truncated, say) are appended to `notices`, framed as they came, for
    /// the client the SETs were made for.
    pub async fn run_reporting(
        &mut self,
        sql: &str,
        notices: &mut BytesMut,
    ) -> Result<Result<Vec<(String, String)>, ErrorFields>, ServerError> {
        let mut reported = Vec::new();
        let outcome = self
            .run_with(sql, |m| {
                match m.tag {
                    backend::PARAMETER_STATUS => reported.push(backend::decode_parameter_status(&m.body)?),
                    backend::NOTICE_RESPONSE => crate::protocol::put_message(notices, m.tag, |b| b.extend_from_slice(&m.body)),
                    _ => {}
                }
                Ok(())
            })
            .await?;
        Ok(outcome.map(|()| reported))
    }

    /// The value the server last reported for `name` on this connection:
    /// since a client changed it, else at login.
    pub fn reported_value(&self, name: &str) -> Option<String> {
        match self.session.borrow().settings.get(name) {
            Some(crate::settings::Value::Reported(value)) => Some(value.clone()),
            _ => self.params.iter().find(|(n, _)| n == name).map(|(_, v)| v.clone()),
        }
    }

    /// `run_checked`, with each message but ErrorResponse and
    /// ReadyForQuery handed to `each`.
    async fn run_with(
        &mut self,
        sql: &str,
        mut each: impl FnMut(&crate::protocol::frame::Message) -> Result<(), crate::protocol::ProtocolError>,
    ) -> Result<Result<(), ErrorFields>, ServerError> {
        let mut out = BytesMut::new();
        frontend::query(&mut out, sql);
        self.stream.write_all(&out).await?;
        let mut buf = BytesMut::new();
        let mut error = None;
        loop {
            let m = read_message(&mut self.stream, &mut buf, MAX_LOGIN_MESSAGE).await?;
            match m.tag {
                backend::READY_FOR_QUERY => {
                    return match backend::decode_ready_for_query(&m.body)? {
                        TransactionStatus::Idle if buf.is_empty() => Ok(error.map_or(Ok(()), Err)),
                        _ => Err(ServerError::Unexpected { tag: m.tag, during: "a query of pglane's own" }),
                    };
                }
                backend::ERROR_RESPONSE => {
                    let e = backend::decode_error_fields(&m.body)?;
                    if e.severity == "FATAL" || e.severity == "PANIC" {
                        return Err(ServerError::Refused(e));
                    }
                    error.get_or_insert(e);
                }
                backend::COPY_IN_RESPONSE | backend::COPY_BOTH_RESPONSE => {
                    return Err(ServerError::Unexpected { tag: m.tag, during: "a query of pglane's own" });
                }
                _ => each(&m)?,
            }
        }
    }

    /// Runs `sql` as a simple query and waits for ReadyForQuery, discarding
    /// its results. Ok only if the server ends up idle (not in a transaction).
    pub async fn run_to_idle(&mut self, sql: &str) -> Result<(), ServerError> {
        self.run_checked(sql).await.map(|_| ())
    }

    /// Parses and describes each `(text, parameter types)` as the unnamed
    /// statement, in one round trip, running nothing (Parse executes no
    /// statement). An entry is the server's description, or its error for
    /// that text, after which it skips the rest: the list is then shorter.
    /// Ok only if the connection ends idle and in step.
    pub async fn describe(&mut self, statements: &[(&str, &[u32])]) -> Result<Vec<Result<Described, ErrorFields>>, ServerError> {
        let mut out = BytesMut::new();
        for (sql, types) in statements {
            frontend::parse(&mut out, "", sql, types);
            frontend::describe(&mut out, frontend::Target::Statement, "");
        }
        frontend::sync(&mut out);
        self.stream.write_all(&out).await?;
        let mut buf = BytesMut::new();
        let mut described = Vec::with_capacity(statements.len());
        let mut params = Vec::new();
        loop {
            let m = read_message(&mut self.stream, &mut buf, MAX_LOGIN_MESSAGE).await?;
            match m.tag {
                backend::PARSE_COMPLETE | backend::NOTICE_RESPONSE | backend::PARAMETER_STATUS => {}
                backend::PARAMETER_DESCRIPTION => params = backend::decode_parameter_description(&m.body)?,
                backend::ROW_DESCRIPTION => {
                    let row = Some(backend::decode_row_description(&m.body)?);
                    described.push(Ok(Described { params: std::mem::take(&mut params), row }));
                }
                backend::NO_DATA => described.push(Ok(Described { params: std::mem::take(&mut params), row: None })),
                backend::ERROR_RESPONSE => described.push(Err(backend::decode_error_fields(&m.body)?)),
                backend::READY_FOR_QUERY => {
                    return match backend::decode_ready_for_query(&m.body)? {
                        TransactionStatus::Idle if buf.is_empty() => Ok(described),
                        _ => Err(ServerError::Unexpected { tag: m.tag, during: "describe" }),
                    };
                }
                other => return Err(ServerError::Unexpected { tag: other, during: "describe" }),
            }
        }
    }

    /// Ends the session and returns once its backend has gone, or after
    /// `limit`: says `goodbye`, then reads to the end. PostgreSQL closes the
    /// socket last as its backend exits, after the backend has left
    /// pg_stat_activity and given its connection slot back; so a connection
    /// opened after this returns is never one over a limit to PostgreSQL.
    pub async fn end(mut self: Box<Self>, goodbye: Goodbye, limit: Duration) {
        let ended = async {
            match goodbye {
                Goodbye::Terminate => {
                    let mut out = BytesMut::new();
                    frontend::terminate(&mut out);
                    if self.stream.write_all(&out).await.is_err() {
                        return;
                    }
                }
                Goodbye::HangUp => {
                    if self.stream.shut_writing().is_err() {
                        return;
                    }
                }
            }
            let mut rest = [0u8; 256];
            // Whatever the server still says (a notice, the end of an
            // abandoned query's answer) is for nobody.
            while let Ok(n) = futures_lite::AsyncReadExt::read(&mut self.stream, &mut rest).await {
                if n == 0 {
                    break;
                }
            }
        };
        crate::rt::with_timeout(limit, ended).await;
    }

    /// A connection that has been idle may have been closed by the server
    /// (restart, pg_terminate_backend, idle timeout). Checked without blocking.
    pub fn is_healthy(&self) -> bool {
        self.stream.is_quiet_and_open()
    }
}

/// How pglane ends a server session ([`ServerConn::end`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Goodbye {
    /// The conversation is at rest: Terminate, as a client leaving.
    Terminate,
    /// The conversation was left halfway (a message may be half sent):
    /// the write side is shut, and the backend ends at the next read, as
    /// when a client's connection drops.
    HangUp,
}

/// Sends a CancelRequest for what `key`'s backend runs, and returns once
/// the server has closed the connection: PostgreSQL does once it has
/// signalled the backend, so a query sent after this returns is never the
/// one cancelled. All within `timeout`.
pub async fn send_cancel(key: &CancelKey, timeout: Duration) -> Result<(), ServerError> {
    send_cancel_request(&key.address, key.process_id, key.secret_key, timeout).await
}

/// Sends a CancelRequest for (`process_id`, `secret_key`) to `address` (a
/// server, or a peer pglane instance that forwards it) and waits for the
/// other side to close the connection, all within `timeout`.
pub async fn send_cancel_request(
    address: &ServerAddress,
    process_id: i32,
    secret_key: i32,
    timeout: Duration,
) -> Result<(), ServerError> {
    let mut packet = BytesMut::new();
    startup::encode_cancel(&mut packet, process_id, secret_key);
    send_request(address, &packet, timeout).await
}

/// Asks the peer pglane instance at `address` to close its idle server
/// connections to server database `dbname` (PeerCloseIdle) and waits for it
/// to close the connection, which it does once they are closing; all within
/// `timeout`.
pub async fn send_peer_close_idle(address: &ServerAddress, dbname: &str, timeout: Duration) -> Result<(), ServerError> {
    let mut packet = BytesMut::new();
    startup::encode_peer_close_idle(&mut packet, dbname);
    send_request(address, &packet, timeout).await
}

/// Sends `packet`, a request that is a connection's whole first packet, and
/// waits for the other side to close the connection: its answer that the
/// request was taken.
async fn send_request(address: &ServerAddress, packet: &[u8], timeout: Duration) -> Result<(), ServerError> {
    let deliver = async {
        // Lives for one round trip: keepalive and buffer sizes do not matter.
        let mut stream = Stream::connect(address, timeout, &crate::net::TcpTuning::default())
            .await
            .map_err(|source| ServerError::Connect { addr: address.clone(), source })?;
        stream.write_all(packet).await?;
        let mut rest = [0u8; 64];
        // Nothing is expected but the close; a reset is a close too.
        while let Ok(n) = futures_lite::AsyncReadExt::read(&mut stream, &mut rest).await {
            if n == 0 {
                break;
            }
        }
        Ok(())
    };
    crate::rt::with_timeout(timeout, deliver).await.unwrap_or_else(|| {
        Err(ServerError::Connect {
            addr: address.clone(),
            source: std::io::Error::new(std::io::ErrorKind::TimedOut, "timed out waiting for the request to be taken"),
        })
    })
}

type LoginResult = (i32, i32, Vec<(String, String)>);

/// A server's description of a statement it prepared.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Described {
    /// The parameter types it declared or inferred.
    pub params: Vec<u32>,
    /// The result columns; None when the statement returns no rows (NoData).
    pub row: Option<Vec<backend::FieldDescription>>,
}

/// Opens a connection to `address`, with TLS if `tls` says so, and logs in
/// with `startup`'s parameters, all within the connect timeout.
async fn open(
    target: &ServerTarget,
    address: &ServerAddress,
    tls: Option<&ServerTls>,
    startup: &[(String, String)],
) -> Result<(Stream, LoginResult), ServerError> {
    let mut stream = Stream::connect(address, target.connect_timeout, &target.tcp)
        .await
        .map_err(|source| ServerError::Connect { addr: address.clone(), source })?;
    let handshake = async {
        if let Some(tls) = tls {
            crate::net::tls::negotiate(&mut stream, tls)
                .await
                .map_err(|source| ServerError::Tls { addr: address.clone(), source })?;
        }
        login(&mut stream, target, startup).await
    };
    let logged_in = crate::rt::with_timeout(target.connect_timeout, handshake)
        .await
        .unwrap_or_else(|| Err(timed_out(address, "timed out logging in")))?;
    Ok((stream, logged_in))
}

fn timed_out(address: &ServerAddress, what: &str) -> ServerError {
    ServerError::Connect { addr: address.clone(), source: std::io::Error::new(std::io::ErrorKind::TimedOut, what.to_owned()) }
}

/// Logs in as `target` says, with `startup`'s parameters after user and database.
async fn login(stream: &mut Stream, target: &ServerTarget, startup: &[(String, String)]) -> Result<LoginResult, ServerError> {
    let mut out = BytesMut::new();
    let params: Vec<(&str, &str)> = [("user", target.user.as_str()), ("database", target.dbname.as_str())]
        .into_iter()
        .chain(startup.iter().map(|(name, value)| (name.as_str(), value.as_str())))
        .collect();
    startup::encode_startup(&mut out, &params);
    stream.write_all(&out).await?;
    let mut buf = BytesMut::new();
    authenticate(stream, &mut buf, target).await?;
    let mut key = (0, 0);
    let mut params = Vec::new();
    loop {
        let m = read_message(stream, &mut buf, MAX_LOGIN_MESSAGE).await?;
        match m.tag {
            backend::PARAMETER_STATUS => params.push(backend::decode_parameter_status(&m.body)?),
            backend::BACKEND_KEY_DATA => key = backend::decode_backend_key_data(&m.body)?,
            backend::READY_FOR_QUERY => return Ok((key.0, key.1, params)),
            backend::ERROR_RESPONSE => return Err(ServerError::Refused(backend::decode_error_fields(&m.body)?)),
            backend::NOTICE_RESPONSE => {}
            other => return Err(ServerError::Unexpected { tag: other, during: "login" }),
        }
    }
}

/// A server's NegotiateProtocolVersion: pglane asked for 3.0, which every
/// server since PostgreSQL 7.4 speaks, and no protocol options, so a server
/// may only confirm 3.0 (and list options it was not sent).
fn negotiated(target: &ServerTarget, body: &[u8]) -> Result<(), ServerError> {
    let offered = backend::decode_negotiate_protocol_version(body)?;
    let version = startup::accept_negotiation(crate::protocol::PROTOCOL_VERSION_3, &offered)?;
    debug!(database = %target.dbname, version, options = ?offered.unrecognized_options, "the server negotiated the protocol version");
    Ok(())
}

async fn authenticate(stream: &mut Stream, buf: &mut BytesMut, target: &ServerTarget) -> Result<(), ServerError> {
    let mut scram: Option<ScramClient> = None;
    loop {
        let m = read_message(stream, buf, MAX_LOGIN_MESSAGE).await?;
        match m.tag {
            backend::AUTHENTICATION => {}
            backend::ERROR_RESPONSE => return Err(ServerError::Refused(backend::decode_error_fields(&m.body)?)),
            // Before the authentication request, if at all.
            backend::NEGOTIATE_PROTOCOL_VERSION => {
                negotiated(target, &m.body)?;
                continue;
            }
            other => return Err(ServerError::Unexpected { tag: other, during: "authentication" }),
        }
        let mut out = BytesMut::new();
        match backend::decode_authentication(&m.body)? {
            Authentication::Ok => return Ok(()),
            Authentication::CleartextPassword => {
                frontend::password(&mut out, plaintext(target, "a cleartext password")?);
            }
            Authentication::Md5Password { salt } => {
                let hash = match &target.secret {
                    Some(Secret::Md5(hash)) => hash.clone(),
                    _ => md5_password_hash(&target.user, plaintext(target, "md5")?),
                };
                frontend::password(&mut out, &md5_salted_response(&hash, salt));
            }
            Authentication::Sasl { mechanisms } => {
                if !mechanisms.iter().any(|m| m == SCRAM_SHA_256) {
                    return Err(ServerError::Auth("SASL", format!("no supported mechanism in {mechanisms:?}")));
                }
                let client = match (&target.scram_keys, target.secret.as_ref().and_then(Secret::plaintext)) {
                    (Some(keys), None) => ScramClient::with_keys(keys),
                    _ => ScramClient::new(plaintext(target, "SCRAM-SHA-256")?).with_max_iterations(target.scram_max_iterations),
                };
                frontend::sasl_initial_response(&mut out, SCRAM_SHA_256, &client.client_first());
                scram = Some(client);
            }
            Authentication::SaslContinue(data) => {
                let client = scram.as_mut().ok_or(ServerError::Unexpected { tag: b'R', during: "SASL continue" })?;
                let reply = SALTED_PASSWORDS
                    .with_borrow_mut(|cache| client.handle_server_first_cached(&data, cache))
                    .map_err(|e| ServerError::Auth("SCRAM-SHA-256", e.to_string()))?;
                frontend::sasl_response(&mut out, &reply);
            }
            Authentication::SaslFinal(data) => {
                let client = scram.as_ref().ok_or(ServerError::Unexpected { tag: b'R', during: "SASL final" })?;
                client.verify_server_final(&data).map_err(|e| ServerError::Auth("SCRAM-SHA-256", e.to_string()))?;
                continue;
            }
            Authentication::Unsupported(code) => {
                return Err(ServerError::Auth("an authentication method", format!("code {code} is not supported")));
            }
        }
        stream.write_all(&out).await?;
    }
}

fn plaintext<'a>(target: &'a ServerTarget, method: &'static str) -> Result<&'a str, ServerError> {
    target.secret.as_ref().and_then(Secret::plaintext).ok_or_else(|| {
        ServerError::Auth(
            method,
            format!(
                "no plaintext password for user \"{}\" in the config (a hashed secret can check clients but cannot log in to a server)",
                target.user
            ),
        )
    })
}
