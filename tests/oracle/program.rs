//! What the oracle runs: a case is one program per client, a program is a
//! list of steps, a step is one statement or a short explicit transaction.

use std::fmt;

/// How a statement reaches PostgreSQL (through tokio-postgres).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Via {
    /// `simple_query`: the simple protocol; the text may hold several statements.
    Simple,
    /// `prepare_typed` + `query_raw`, then the statement is dropped (Close):
    /// a named protocol-level statement (`s<n>`) used once.
    Extended,
    /// `query_typed_raw`: the unnamed statement.
    Unnamed,
    /// `prepare_typed` with this many `text` parameters, kept in the client's
    /// slot for later [`Via::Execute`]s.
    Prepare { slot: usize, params: usize },
    /// Runs the statement kept in the slot (the statement's text is ignored).
    Execute { slot: usize },
    /// Drops the slot's statement (tokio-postgres sends Close).
    Close { slot: usize },
    /// A statement that runs until cancelled (it sleeps), over the simple
    /// protocol or the unnamed statement; cancel requests go from
    /// `after_ms` on until it ends, so it always ends in 57014, whether the
    /// cancel finds it running, waiting for a server connection, or behind
    /// pglane's own queries.
    Cancelled { after_ms: u64, extended: bool },
}

/// One statement and the `text` parameters it is bound with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stmt {
    pub via: Via,
    pub sql: String,
    pub params: Vec<String>,
}

impl Stmt {
    pub fn new(via: Via, sql: impl Into<String>) -> Stmt {
        Stmt { via, sql: sql.into(), params: Vec::new() }
    }

    pub fn simple(sql: impl Into<String>) -> Stmt {
        Stmt::new(Via::Simple, sql)
    }

    pub fn with_params(mut self, params: &[&str]) -> Stmt {
        self.params = params.iter().map(|p| p.to_string()).collect();
        self
    }
}

impl fmt::Display for Stmt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.via {
            Via::Simple => write!(f, "simple     {}", self.sql)?,
            Via::Extended => write!(f, "extended   {}", self.sql)?,
            Via::Unnamed => write!(f, "unnamed    {}", self.sql)?,
            Via::Prepare { slot, params } => write!(f, "prepare#{slot}  {} ({params} text params)", self.sql)?,
            Via::Execute { slot } => write!(f, "execute#{slot}")?,
            Via::Close { slot } => write!(f, "close#{slot}")?,
            Via::Cancelled { after_ms, extended } => {
                let via = if *extended { "unnamed" } else { "simple" };
                write!(f, "cancelled after {after_ms} ms ({via})  {}", self.sql)?
            }
        }
        if !self.params.is_empty() {
            write!(f, "  {:?}", self.params)?;
        }
        Ok(())
    }
}

/// One step of a client's program.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// Statements run one after the other (a single statement, or BEGIN ... COMMIT).
    Run(Vec<Stmt>),
    /// Through pglane only: wait (a bounded while) until `client` has finished
    /// `steps` steps. Hand-written regression programs use it to order the
    /// clients; alone on a direct connection it does nothing. Never recorded.
    Await { client: usize, steps: usize },
}

impl Step {
    pub fn one(stmt: Stmt) -> Step {
        Step::Run(vec![stmt])
    }

    pub fn statements(&self) -> &[Stmt] {
        match self {
            Step::Run(stmts) => stmts,
            Step::Await { .. } => &[],
        }
    }
}

pub type Program = Vec<Step>;

/// One program per client; client `i` owns the public objects suffixed `_i`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Case {
    pub programs: Vec<Program>,
}

impl Case {
    pub fn statements(&self) -> usize {
        self.programs.iter().flatten().map(|step| step.statements().len()).sum()
    }
}

impl fmt::Display for Case {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (client, program) in self.programs.iter().enumerate() {
            writeln!(f, "client {client}:")?;
            if program.is_empty() {
                writeln!(f, "    (nothing)")?;
            }
            for (i, step) in program.iter().enumerate() {
                match step {
                    Step::Await { client, steps } => writeln!(f, "  {i:3}: await client {client} step {steps}")?,
                    Step::Run(stmts) => {
                        for (j, stmt) in stmts.iter().enumerate() {
                            let head = if j == 0 { format!("{i:3}:") } else { "    ".to_string() };
                            writeln!(f, "  {head} {stmt}")?;
                        }
                    }
                }
            }
        }
        Ok(())
    }
}
