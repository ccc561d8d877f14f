//! Runs one client's program on one connection and records everything the
//! client gets back: rows as text, row counts, errors (SQLSTATE and message)
//! and the notices PostgreSQL sent along.

use std::collections::HashMap;
use std::pin::pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::{StreamExt, TryStreamExt};
use tokio_postgres::types::Type;
use tokio_postgres::{AsyncMessage, Client, NoTls, Row, SimpleQueryMessage, Statement};

use super::program::{Program, Step, Stmt, Via};

/// How long a [`Step::Await`] waits for the other client before going on
/// anyway (when pglane rightly pins the other client to the only server
/// connection, the awaited step cannot run before this client lets go).
const AWAIT_LIMIT: Duration = Duration::from_secs(2);

/// How long cancel requests go for a [`Via::Cancelled`] statement (which
/// sleeps longer), and the pause between two.
const CANCEL_LIMIT: Duration = Duration::from_secs(10);
const CANCEL_AGAIN: Duration = Duration::from_millis(20);

/// What one statement gave the client.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Rows (text; NULL as None) and the row count of each command completed.
    Done { rows: Vec<Vec<Option<String>>>, counts: Vec<u64> },
    /// SQLSTATE (or `client` for an error tokio-postgres raised itself) and message.
    Failed { code: String, message: String },
    /// [`Via::Execute`] of a slot with no statement in it.
    NoStatement,
}

/// One statement of a transcript.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub step: usize,
    pub stmt: Stmt,
    pub outcome: Outcome,
    /// `SEVERITY SQLSTATE message`, in arrival order.
    pub notices: Vec<String>,
}

/// Steps finished per client, for [`Step::Await`].
pub struct Progress(Vec<AtomicUsize>);

impl Progress {
    pub fn new(clients: usize) -> Progress {
        Progress((0..clients).map(|_| AtomicUsize::new(0)).collect())
    }

    fn finished(&self, client: usize, steps: usize) {
        self.0[client].store(steps, Ordering::SeqCst);
    }

    async fn wait_for(&self, client: usize, steps: usize) {
        let deadline = Instant::now() + AWAIT_LIMIT;
        while self.0.get(client).is_some_and(|done| done.load(Ordering::SeqCst) < steps) && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }
}

/// A client connection that keeps the notices it receives and the
/// statements of its [`Via::Prepare`] slots.
pub struct Session {
    client: Client,
    notices: Arc<Mutex<Vec<String>>>,
    slots: HashMap<usize, Statement>,
}

impl Session {
    /// Connects as `user` (trusted: no password) to database `db` on 127.0.0.1:`port`.
    pub async fn connect(port: u16, user: &str, db: &str) -> Result<Session, tokio_postgres::Error> {
        let mut config = tokio_postgres::Config::new();
        config.host("127.0.0.1").port(port).user(user).dbname(db).connect_timeout(Duration::from_secs(10));
        let (client, mut connection) = config.connect(NoTls).await?;
        let notices = Arc::new(Mutex::new(Vec::new()));
        let sender = notices.clone();
        // A notice is handed over before the messages after it are read, so
        // it is in the channel by the time its statement's result is.
        tokio::spawn(async move {
            let mut messages = futures_util::stream::poll_fn(move |cx| connection.poll_message(cx));
            while let Some(Ok(message)) = messages.next().await {
                if let AsyncMessage::Notice(notice) = message {
                    let text = format!("{} {} {}", notice.severity(), notice.code().code(), notice.message());
                    sender.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).push(text);
                }
            }
        });
        Ok(Session { client, notices, slots: HashMap::new() })
    }

    /// Runs `program`, recording every statement; reports each finished step to `progress`.
    pub async fn run_program(&mut self, program: &Program, me: usize, progress: Option<&Progress>) -> Vec<Entry> {
        let mut transcript = Vec::new();
        for (i, step) in program.iter().enumerate() {
            match step {
                Step::Await { client, steps } => {
                    if let Some(progress) = progress {
                        progress.wait_for(*client, *steps).await;
                    }
                }
                Step::Run(stmts) => {
                    for stmt in stmts {
                        let outcome = self.run(stmt).await;
                        let notices = std::mem::take(&mut *self.notices.lock().unwrap_or_else(|poisoned| poisoned.into_inner()));
                        transcript.push(Entry { step: i, stmt: stmt.clone(), outcome, notices });
                    }
                }
            }
            if let Some(progress) = progress {
                progress.finished(me, i + 1);
            }
        }
        transcript
    }

    /// Runs a statement (or simple-protocol batch) without error handling of
    /// its own: for setup, where a failure is the harness's.
    pub async fn batch(&self, sql: &str) -> Result<(), tokio_postgres::Error> {
        self.client.batch_execute(sql).await
    }

    async fn run(&mut self, stmt: &Stmt) -> Outcome {
        let result = match &stmt.via {
            Via::Simple => self.client.simple_query(&stmt.sql).await.map(simple_outcome),
            Via::Extended => self.extended(stmt).await,
            Via::Unnamed => self.unnamed(stmt).await,
            Via::Prepare { slot, params } => {
                // The slot's previous statement is dropped (Close) whatever happens.
                self.slots.remove(slot);
                let types = vec![Type::TEXT; *params];
                self.client.prepare_typed(&stmt.sql, &types).await.map(|prepared| {
                    self.slots.insert(*slot, prepared);
                    Outcome::Done { rows: Vec::new(), counts: Vec::new() }
                })
            }
            Via::Execute { slot } => match self.slots.get(slot) {
                Some(prepared) => execute(&self.client, prepared, &stmt.params).await,
                None => return Outcome::NoStatement,
            },
            Via::Close { slot } => {
                self.slots.remove(slot);
                Ok(Outcome::Done { rows: Vec::new(), counts: Vec::new() })
            }
            Via::Cancelled { after_ms, extended } => self.cancelled(stmt, *after_ms, *extended).await,
        };
        result.unwrap_or_else(|e| failed(&e))
    }

    /// Runs `stmt` while cancel requests go for it, from `after_ms` on, one
    /// at a time (each returns once the server has signalled the backend)
    /// until it ends; the last one is done before the next statement is
    /// sent, so none can reach that one. A cancel that finds the backend
    /// between statements is ignored by PostgreSQL (and dropped by pglane).
    async fn cancelled(&self, stmt: &Stmt, after_ms: u64, extended: bool) -> Result<Outcome, tokio_postgres::Error> {
        let token = self.client.cancel_token();
        let ended = Arc::new(AtomicBool::new(false));
        let stop = ended.clone();
        let canceller = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(after_ms)).await;
            let deadline = Instant::now() + CANCEL_LIMIT;
            while !stop.load(Ordering::SeqCst) && Instant::now() < deadline {
                let _ = token.cancel_query(NoTls).await;
                tokio::time::sleep(CANCEL_AGAIN).await;
            }
        });
        let result =
            if extended { self.unnamed(stmt).await } else { self.client.simple_query(&stmt.sql).await.map(simple_outcome) };
        ended.store(true, Ordering::SeqCst);
        let _ = canceller.await;
        result
    }

    async fn extended(&self, stmt: &Stmt) -> Result<Outcome, tokio_postgres::Error> {
        let prepared = self.client.prepare_typed(&stmt.sql, &vec![Type::TEXT; stmt.params.len()]).await?;
        execute(&self.client, &prepared, &stmt.params).await
    }

    async fn unnamed(&self, stmt: &Stmt) -> Result<Outcome, tokio_postgres::Error> {
        let params = stmt.params.iter().map(|p| (p.as_str(), Type::TEXT));
        let stream = self.client.query_typed_raw(&stmt.sql, params).await?;
        collect(stream).await
    }
}

async fn execute(client: &Client, prepared: &Statement, params: &[String]) -> Result<Outcome, tokio_postgres::Error> {
    let stream = client.query_raw(prepared, params.iter().map(String::as_str)).await?;
    collect(stream).await
}

async fn collect(stream: tokio_postgres::RowStream) -> Result<Outcome, tokio_postgres::Error> {
    let mut stream = pin!(stream);
    let mut rows = Vec::new();
    while let Some(row) = stream.try_next().await? {
        rows.push((0..row.len()).map(|i| render(&row, i)).collect());
    }
    Ok(Outcome::Done { rows, counts: stream.rows_affected().into_iter().collect() })
}

fn simple_outcome(messages: Vec<SimpleQueryMessage>) -> Outcome {
    let mut rows = Vec::new();
    let mut counts = Vec::new();
    for message in messages {
        match message {
            SimpleQueryMessage::Row(row) => rows.push((0..row.len()).map(|i| row.get(i).map(str::to_owned)).collect()),
            SimpleQueryMessage::CommandComplete(n) => counts.push(n),
            _ => {}
        }
    }
    Outcome::Done { rows, counts }
}

/// A binary value as text: the types the grammar's statements return; any
/// other type is recorded by name (the same on both sides).
fn render(row: &Row, i: usize) -> Option<String> {
    fn get<'a, T: tokio_postgres::types::FromSql<'a> + ToString>(row: &'a Row, i: usize) -> Option<String> {
        match row.try_get::<_, Option<T>>(i) {
            Ok(value) => value.map(|v| v.to_string()),
            Err(e) => Some(format!("<{e}>")),
        }
    }
    let ty = row.columns()[i].type_();
    match *ty {
        Type::BOOL => get::<bool>(row, i),
        Type::INT2 => get::<i16>(row, i),
        Type::INT4 => get::<i32>(row, i),
        Type::INT8 => get::<i64>(row, i),
        Type::OID => get::<u32>(row, i),
        Type::FLOAT4 => get::<f32>(row, i),
        Type::FLOAT8 => get::<f64>(row, i),
        Type::TEXT | Type::VARCHAR | Type::NAME | Type::BPCHAR | Type::UNKNOWN => get::<String>(row, i),
        _ => Some(format!("<{ty}>")),
    }
}

fn failed(e: &tokio_postgres::Error) -> Outcome {
    match e.as_db_error() {
        Some(db) => Outcome::Failed { code: db.code().code().to_owned(), message: normalize(db.message()) },
        None => Outcome::Failed { code: "client".to_owned(), message: normalize(&e.to_string()) },
    }
}

/// tokio-postgres names its statements `s<n>` from a process-wide counter,
/// so the same program gets other names on each run: `"s17"` reads `"s?"`.
fn normalize(message: &str) -> String {
    let mut out = String::with_capacity(message.len());
    let mut rest = message;
    while let Some(at) = rest.find("\"s") {
        let digits = rest[at + 2..].bytes().take_while(u8::is_ascii_digit).count();
        let closed = digits > 0 && rest[at + 2 + digits..].starts_with('"');
        let end = if closed { at + 2 + digits } else { at + 2 };
        out.push_str(&rest[..at + 2]);
        if closed {
            out.push('?');
        }
        rest = &rest[end..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn statement_names_are_normalized() {
        assert_eq!(super::normalize(r#"prepared statement "s12" does not exist"#), r#"prepared statement "s?" does not exist"#);
        assert_eq!(super::normalize(r#"relation "seq_1" and "s" and "s1x""#), r#"relation "seq_1" and "s" and "s1x""#);
    }
}
