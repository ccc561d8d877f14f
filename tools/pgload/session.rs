//! Running a script's statements on one connection in one protocol mode, and
//! reading what comes back.
//!
//! This module owns the protocol conversation per statement: which messages
//! the simple, extended (unnamed statement, like pgjdbc with
//! `prepareThreshold=0`) and prepared (named, parsed once per connection)
//! modes send, and how the replies are read up to ReadyForQuery. It checks
//! what it reads (row counts against command tags, binary widths against the
//! RowDescription) and reports SQLSTATEs, but it keeps no statistics and
//! never times anything: that is [`crate::worker`].

use std::ops::Range;

use pglane::protocol::backend::{self, TransactionStatus, FORMAT_BINARY};
use pglane::protocol::frontend::{self, Target};
use pglane::protocol::ProtocolError;
use thiserror::Error;

use crate::conn::{ConnError, Connection};
use crate::options::{Protocol, ResultFormat};
use crate::script::{Script, Statement};

/// Errors that end a connection's run (SQL errors do not: they are results).
#[derive(Debug, Error)]
pub enum SessionError {
    #[error(transparent)]
    Conn(#[from] ConnError),
    #[error("server ended the session: {0}")]
    Fatal(backend::ErrorFields),
    #[error("{0} is not supported in pgload scripts")]
    Unsupported(&'static str),
}

impl From<ProtocolError> for SessionError {
    fn from(e: ProtocolError) -> Self {
        SessionError::Conn(ConnError::Protocol(e))
    }
}

impl SessionError {
    /// A short, stable name for counting errors by kind in a report.
    pub fn kind(&self) -> String {
        match self {
            SessionError::Conn(e) => e.kind().to_owned(),
            SessionError::Fatal(e) => e.code.clone(),
            SessionError::Unsupported(_) => "unsupported".to_owned(),
        }
    }
}

/// Error key for a result that failed pgload's own checks.
pub const RESULT_CHECK: &str = "result check";

/// What one transaction (one run of the script) did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct TxOutcome {
    /// Rows returned or affected, as the command tags count them.
    pub rows: u64,
    pub statements: u64,
    /// SQLSTATE of the first error (or [`RESULT_CHECK`]); the transaction failed.
    pub error: Option<String>,
}

/// What the server answered to one statement.
#[derive(Debug)]
struct Reply {
    rows: u64,
    error: Option<String>,
    status: TransactionStatus,
}

pub struct Session {
    pub conn: Connection,
    protocol: Protocol,
    result_formats: &'static [i16],
    /// Per statement of the script: its name, and whether this connection has
    /// prepared it (prepared mode only).
    names: Vec<String>,
    prepared: Vec<bool>,
    /// Width of each column in the current result when it is binary and of
    /// fixed size, to check DataRows against.
    widths: Vec<Option<usize>>,
    // Reused per statement, so the steady state allocates nothing.
    sql: String,
    params: Vec<u8>,
    ranges: Vec<Range<usize>>,
}

impl Session {
    pub fn new(conn: Connection, protocol: Protocol, format: ResultFormat, script: &Script) -> Session {
        let n = script.statements.len();
        Session {
            conn,
            protocol,
            result_formats: match format {
                ResultFormat::Text => &[],
                ResultFormat::Binary => &[FORMAT_BINARY],
            },
            names: (0..n).map(|i| format!("pgload_{i}")).collect(),
            prepared: vec![false; n],
            widths: Vec::new(),
            sql: String::new(),
            params: Vec::new(),
            ranges: Vec::new(),
        }
    }

    /// Runs every statement of `script` with the variables in `values`. Stops
    /// at the first error, rolling back if it left a transaction open.
    pub async fn run(&mut self, script: &Script, values: &[i64]) -> Result<TxOutcome, SessionError> {
        let mut outcome = TxOutcome::default();
        for (i, stmt) in script.statements.iter().enumerate() {
            let reply = self.execute(i, stmt, values).await?;
            outcome.statements += 1;
            outcome.rows += reply.rows;
            if reply.error.is_some() {
                outcome.error = reply.error;
                if reply.status != TransactionStatus::Idle {
                    self.rollback().await?;
                }
                break;
            }
        }
        Ok(outcome)
    }

    async fn execute(&mut self, i: usize, stmt: &Statement, values: &[i64]) -> Result<Reply, SessionError> {
        let out = &mut self.conn.out;
        let mut parsing = None;
        match self.protocol {
            Protocol::Simple => {
                stmt.render(values, &mut self.sql);
                frontend::query(out, &self.sql);
            }
            Protocol::Extended | Protocol::Prepared => {
                let name = match self.protocol {
                    Protocol::Prepared => self.names[i].as_str(),
                    _ => "",
                };
                if name.is_empty() || !self.prepared[i] {
                    frontend::parse(out, name, &stmt.parameterized, &[]);
                    parsing = (!name.is_empty()).then_some(i);
                }
                stmt.params(values, &mut self.params, &mut self.ranges);
                let params = self.ranges.iter().map(|r| Some(&self.params[r.clone()]));
                frontend::bind(out, "", name, &[], params, self.result_formats);
                // libpq (so pgbench, psycopg) and pgjdbc describe the portal each time.
                frontend::describe(out, Target::Portal, "");
                frontend::execute(out, "", 0);
                frontend::sync(out);
            }
        }
        self.conn.flush().await?;
        self.read_reply(parsing).await
    }

    async fn rollback(&mut self) -> Result<(), SessionError> {
        frontend::query(&mut self.conn.out, "ROLLBACK");
        self.conn.flush().await?;
        self.read_reply(None).await.map(drop)
    }

    /// Reads up to ReadyForQuery. `parsing` is the statement whose named Parse
    /// is in flight: it counts as prepared once ParseComplete arrives.
    async fn read_reply(&mut self, parsing: Option<usize>) -> Result<Reply, SessionError> {
        let mut rows = 0;
        let mut data_rows = 0u64;
        let mut error = None;
        let mut fail = |code: &str| {
            error.get_or_insert_with(|| code.to_owned());
        };
        self.widths.clear();
        loop {
            let (tag, body) = self.conn.recv().await?;
            match tag {
                backend::DATA_ROW => {
                    data_rows += 1;
                    let row = backend::decode_data_row(body)?;
                    if !self.widths.is_empty() && !row_fits(row, &self.widths) {
                        fail(RESULT_CHECK);
                    }
                }
                // Only binary results have widths to check.
                backend::ROW_DESCRIPTION if !self.result_formats.is_empty() => {
                    let fields = backend::decode_row_description(body)?;
                    self.widths.clear();
                    let fixed = |f: &backend::FieldDescription| {
                        (f.format == FORMAT_BINARY && f.type_size > 0).then_some(f.type_size as usize)
                    };
                    if fields.iter().any(|f| fixed(f).is_some()) {
                        self.widths.extend(fields.iter().map(fixed));
                    }
                }
                backend::COMMAND_COMPLETE => {
                    let tag = backend::decode_command_complete(body)?;
                    let counted = backend::command_tag_rows(tag);
                    if tag.starts_with("SELECT ") && counted != Some(data_rows) {
                        fail(RESULT_CHECK);
                    }
                    rows += counted.unwrap_or(0);
                    data_rows = 0;
                    self.widths.clear();
                }
                backend::PARSE_COMPLETE => {
                    if let Some(i) = parsing {
                        self.prepared[i] = true;
                    }
                }
                backend::ERROR_RESPONSE => {
                    let e = backend::decode_error_fields(body)?;
                    if e.severity == "FATAL" || e.severity == "PANIC" {
                        return Err(SessionError::Fatal(e));
                    }
                    fail(&e.code);
                }
                backend::READY_FOR_QUERY => {
                    let status = backend::decode_ready_for_query(body)?;
                    return Ok(Reply { rows, error, status });
                }
                backend::COPY_IN_RESPONSE | backend::COPY_OUT_RESPONSE | backend::COPY_BOTH_RESPONSE => {
                    return Err(SessionError::Unsupported("COPY"));
                }
                // BindComplete, NoData, EmptyQueryResponse, CloseComplete,
                // ParameterDescription, PortalSuspended, notices, notifications
                // and ParameterStatus carry nothing pgload counts.
                _ => {}
            }
        }
    }

    pub async fn close(self) {
        self.conn.close().await;
    }
}

/// Does every binary fixed-width value have the width its type says?
fn row_fits(row: backend::DataRow<'_>, widths: &[Option<usize>]) -> bool {
    row.len() == widths.len()
        && row.iter().zip(widths).all(|(value, width)| match (value, width) {
            (Some(v), Some(w)) => v.len() == *w,
            _ => true,
        })
}
