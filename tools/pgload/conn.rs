//! One connection to PostgreSQL (or to a pooler posing as it): the socket, the
//! login, and reading and writing whole protocol messages.
//!
//! This module owns the socket, its two buffers and the byte counters. It
//! speaks the protocol only through `pglane::protocol` and authenticates only
//! through `pglane::auth`. It knows nothing about statements, scenarios or
//! timing: [`crate::session`] decides what to send and what the replies mean.

use std::fmt;
use std::io;
use std::path::PathBuf;
use std::time::Duration;

use bytes::BytesMut;
use futures_lite::{AsyncReadExt, AsyncWriteExt};
use pglane::auth::{md5_password_hash, md5_salted_response, ScramClient, SCRAM_SHA_256};
use pglane::config::SslMode;
use pglane::net::tls::{self, ServerTls, TlsError};
use pglane::net::Stream;
use pglane::protocol::backend::{self, Authentication, ErrorFields};
use pglane::protocol::frame::{parse_header, HEADER_LEN};
use pglane::protocol::{frontend, startup, ProtocolError};
use pglane::rt::net::Socket;
use thiserror::Error;

/// Largest message pgload accepts from a server (a DataRow of a wide row).
const MAX_MESSAGE: usize = 256 << 20;
/// Initial size of the receive buffer; it grows only for larger messages.
const READ_CHUNK: usize = 64 << 10;

/// Where the server listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    Tcp {
        host: String,
        port: u16,
    },
    /// The socket file itself (`<dir>/.s.PGSQL.<port>`).
    Unix(PathBuf),
}

impl Endpoint {
    /// libpq's rule: a host starting with `/` is a unix-socket directory.
    pub fn new(host: &str, port: u16) -> Endpoint {
        if host.starts_with('/') {
            Endpoint::Unix(PathBuf::from(host).join(format!(".s.PGSQL.{port}")))
        } else {
            Endpoint::Tcp { host: host.to_owned(), port }
        }
    }
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Endpoint::Tcp { host, port } => write!(f, "{host}:{port}"),
            Endpoint::Unix(path) => write!(f, "{}", path.display()),
        }
    }
}

/// Everything needed to open and log in one connection.
#[derive(Debug, Clone)]
pub struct ConnectParams {
    pub endpoint: Endpoint,
    pub user: String,
    pub database: String,
    pub password: Option<String>,
    pub connect_timeout: Duration,
    /// TLS as libpq's sslmode and sslrootcert say (never on a unix socket,
    /// as libpq).
    pub sslmode: SslMode,
    pub sslrootcert: Option<PathBuf>,
}

#[derive(Debug, Error)]
pub enum ConnError {
    #[error("cannot connect to {endpoint}: {source}")]
    Connect { endpoint: Endpoint, source: io::Error },
    #[error("timed out connecting to {0}")]
    ConnectTimeout(Endpoint),
    #[error("TLS with {endpoint}: {reason}")]
    Tls { endpoint: Endpoint, reason: String },
    #[error("server refused the login: {0}")]
    Refused(ErrorFields),
    #[error("authentication failed: {0}")]
    Auth(String),
    #[error("server closed the connection")]
    Closed,
    #[error("connection lost: {0}")]
    Io(#[from] io::Error),
    #[error("protocol error: {0}")]
    Protocol(#[from] ProtocolError),
    #[error("server sent unexpected message '{}' during {during}", char::from(*.tag))]
    Unexpected { tag: u8, during: &'static str },
}

/// libpq's words for a server that will not do TLS.
fn tls_reason(e: TlsError) -> String {
    match e {
        TlsError::NotOffered(mode) => format!("server does not support SSL, but SSL was required (sslmode = {mode})"),
        other => other.to_string(),
    }
}

impl ConnError {
    /// A short, stable name for counting errors by kind in a report.
    pub fn kind(&self) -> &'static str {
        match self {
            ConnError::Connect { .. } | ConnError::ConnectTimeout(_) | ConnError::Tls { .. } => "connect",
            ConnError::Refused(_) | ConnError::Auth(_) => "login",
            ConnError::Closed | ConnError::Io(_) => "connection lost",
            ConnError::Protocol(_) | ConnError::Unexpected { .. } => "protocol",
        }
    }
}

/// A logged-in connection with its buffers.
pub struct Connection {
    socket: Stream,
    /// Received bytes; `rbuf[rstart..rend]` is not yet consumed.
    rbuf: Vec<u8>,
    rstart: usize,
    rend: usize,
    /// Messages built by the caller, sent by [`Connection::flush`].
    pub out: BytesMut,
    pub bytes_sent: u64,
    pub bytes_received: u64,
}

impl Connection {
    /// Connects, asks for TLS as `sslmode` says, logs in (trust, cleartext,
    /// md5 or SCRAM-SHA-256) and waits for the first ReadyForQuery. As libpq,
    /// `allow` tries without TLS first and again with it if the login is
    /// refused.
    pub async fn open(params: &ConnectParams) -> Result<Connection, ConnError> {
        let timeout = params.connect_timeout;
        let open = async {
            let tls = match &params.endpoint {
                Endpoint::Tcp { host, .. } => tls::libpq_client(params.sslmode, params.sslrootcert.as_deref(), host)
                    .map_err(|reason| ConnError::Tls { endpoint: params.endpoint.clone(), reason })?,
                Endpoint::Unix(_) => None,
            };
            let first_without_tls = params.sslmode == SslMode::Allow;
            let mut conn = Connection::connect(&params.endpoint, tls.as_ref().filter(|_| !first_without_tls)).await?;
            match conn.login(params).await {
                Err(ConnError::Refused(_)) if first_without_tls && tls.is_some() => {
                    let mut conn = Connection::connect(&params.endpoint, tls.as_ref()).await?;
                    conn.login(params).await?;
                    Ok(conn)
                }
                done => done.map(|()| conn),
            }
        };
        pglane::rt::with_timeout(timeout, open).await.unwrap_or_else(|| Err(ConnError::ConnectTimeout(params.endpoint.clone())))
    }

    /// Whether the connection is encrypted.
    pub fn is_tls(&self) -> bool {
        self.socket.is_tls()
    }

    async fn connect(endpoint: &Endpoint, tls: Option<&ServerTls>) -> Result<Connection, ConnError> {
        let failed = |source: io::Error| ConnError::Connect { endpoint: endpoint.clone(), source };
        let mut socket = match endpoint {
            Endpoint::Tcp { host, port } => {
                let socket = Socket::connect_tcp((host.as_str(), *port)).await.map_err(failed)?;
                socket.set_nodelay(true).map_err(failed)?;
                Stream::Plain(socket)
            }
            Endpoint::Unix(path) => Stream::Plain(Socket::connect_unix(path).map_err(failed)?),
        };
        if let Some(tls) = tls {
            tls::negotiate(&mut socket, tls)
                .await
                .map_err(|e| ConnError::Tls { endpoint: endpoint.clone(), reason: tls_reason(e) })?;
        }
        Ok(Connection {
            socket,
            rbuf: vec![0; READ_CHUNK],
            rstart: 0,
            rend: 0,
            out: BytesMut::with_capacity(4096),
            bytes_sent: 0,
            bytes_received: 0,
        })
    }

    async fn login(&mut self, params: &ConnectParams) -> Result<(), ConnError> {
        let mut packet = BytesMut::new();
        startup::encode_startup(
            &mut packet,
            &[("user", &params.user), ("database", &params.database), ("application_name", "pgload")],
        );
        self.out.extend_from_slice(&packet);
        self.flush().await?;
        self.authenticate(params).await?;
        loop {
            let (tag, body) = self.recv().await?;
            match tag {
                backend::READY_FOR_QUERY => return Ok(()),
                backend::ERROR_RESPONSE => return Err(ConnError::Refused(backend::decode_error_fields(body)?)),
                backend::PARAMETER_STATUS
                | backend::BACKEND_KEY_DATA
                | backend::NOTICE_RESPONSE
                | backend::NEGOTIATE_PROTOCOL_VERSION => {}
                other => return Err(ConnError::Unexpected { tag: other, during: "login" }),
            }
        }
    }

    async fn authenticate(&mut self, params: &ConnectParams) -> Result<(), ConnError> {
        let password =
            || params.password.as_deref().ok_or_else(|| ConnError::Auth("the server asks for a password; set PGPASSWORD".into()));
        let mut scram: Option<ScramClient> = None;
        loop {
            let (tag, body) = self.recv().await?;
            let request = match tag {
                backend::AUTHENTICATION => backend::decode_authentication(body)?,
                backend::ERROR_RESPONSE => return Err(ConnError::Refused(backend::decode_error_fields(body)?)),
                other => return Err(ConnError::Unexpected { tag: other, during: "authentication" }),
            };
            match request {
                Authentication::Ok => return Ok(()),
                Authentication::CleartextPassword => frontend::password(&mut self.out, password()?),
                Authentication::Md5Password { salt } => {
                    let hash = md5_password_hash(&params.user, password()?);
                    frontend::password(&mut self.out, &md5_salted_response(&hash, salt));
                }
                Authentication::Sasl { mechanisms } => {
                    if !mechanisms.iter().any(|m| m == SCRAM_SHA_256) {
                        return Err(ConnError::Auth(format!("no supported SASL mechanism in {mechanisms:?}")));
                    }
                    let client = ScramClient::new(password()?);
                    frontend::sasl_initial_response(&mut self.out, SCRAM_SHA_256, &client.client_first());
                    scram = Some(client);
                }
                Authentication::SaslContinue(data) => {
                    let client = scram.as_mut().ok_or(ConnError::Unexpected { tag, during: "SASL continue" })?;
                    let reply = client.handle_server_first(&data).map_err(|e| ConnError::Auth(e.to_string()))?;
                    frontend::sasl_response(&mut self.out, &reply);
                }
                Authentication::SaslFinal(data) => {
                    let client = scram.as_ref().ok_or(ConnError::Unexpected { tag, during: "SASL final" })?;
                    client.verify_server_final(&data).map_err(|e| ConnError::Auth(e.to_string()))?;
                    continue;
                }
                Authentication::Unsupported(code) => {
                    return Err(ConnError::Auth(format!("authentication method {code} is not supported")));
                }
            }
            self.flush().await?;
        }
    }

    /// Sends everything in [`Connection::out`] in one write.
    pub async fn flush(&mut self) -> Result<(), ConnError> {
        if self.out.is_empty() {
            return Ok(());
        }
        self.socket.write_all(&self.out).await?;
        self.bytes_sent += self.out.len() as u64;
        self.out.clear();
        Ok(())
    }

    /// The next whole message: its tag and body. The body borrows the receive
    /// buffer and is valid until the next call.
    pub async fn recv(&mut self) -> Result<(u8, &[u8]), ConnError> {
        loop {
            let pending = &self.rbuf[self.rstart..self.rend];
            if let Some(header) = parse_header(pending, MAX_MESSAGE)? {
                let total = HEADER_LEN + header.body_len;
                if pending.len() >= total {
                    let body = self.rstart + HEADER_LEN..self.rstart + total;
                    self.rstart += total;
                    return Ok((header.tag, &self.rbuf[body]));
                }
                self.make_room(total);
            } else {
                self.make_room(HEADER_LEN);
            }
            self.fill().await?;
        }
    }

    /// Ensures the buffer can hold `need` bytes from `rstart` on, moving the
    /// unconsumed bytes to the front (and growing only for large messages).
    fn make_room(&mut self, need: usize) {
        if self.rstart + need <= self.rbuf.len() {
            return;
        }
        self.rbuf.copy_within(self.rstart..self.rend, 0);
        self.rend -= self.rstart;
        self.rstart = 0;
        if need > self.rbuf.len() {
            self.rbuf.resize(need.next_power_of_two(), 0);
        }
    }

    async fn fill(&mut self) -> Result<(), ConnError> {
        if self.rstart == self.rend {
            // Everything consumed: read to the front, which keeps copies rare.
            self.rstart = 0;
            self.rend = 0;
        }
        let free = &mut self.rbuf[self.rend..];
        let n = self.socket.read(free).await?;
        if n == 0 {
            return Err(ConnError::Closed);
        }
        self.rend += n;
        self.bytes_received += n as u64;
        Ok(())
    }

    /// Says goodbye (Terminate) and closes the socket; errors are irrelevant here.
    pub async fn close(mut self) {
        frontend::terminate(&mut self.out);
        let _ = self.flush().await;
        let _ = self.socket.close().await;
    }
}
