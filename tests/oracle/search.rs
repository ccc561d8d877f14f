//! Runs a case both ways, compares the transcripts, and shrinks a divergence
//! to the fewest steps that still show it.

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::grammar::Known;
use super::program::{Case, Program, Step};
use super::runner::{Entry, Progress, Session};
use crate::common::{postgres, Pglane};

/// The role the clients log in as (trusted, owner of the oracle's databases).
pub const USER: &str = "trustuser";

/// How often a shrinking candidate is run through pglane before it counts
/// as not reproducing (the interleaving differs from run to run).
const TRIES_PER_CANDIDATE: usize = 3;

/// pglane's features for a search.
#[derive(Clone, Copy, Debug)]
pub enum Features {
    /// The defaults: auto_prepare, binary_negotiation, server_pipelining on.
    Defaults,
    /// auto_prepare, binary_negotiation and server_pipelining off.
    Off,
}

impl Features {
    fn config(self) -> &'static str {
        match self {
            Features::Defaults => "",
            Features::Off => "auto_prepare = false\nbinary_negotiation = false\nserver_pipelining = false",
        }
    }
}

/// The size of a search, from the environment.
pub struct Budget {
    /// `PGLANE_ORACLE_SEED`: the first seed.
    pub first_seed: u64,
    /// `PGLANE_ORACLE_SEEDS`: how many seeds.
    pub seeds: u64,
    /// `PGLANE_ORACLE_STEPS`: steps per program, `low..=high` (`N` or `LOW-HIGH`).
    pub steps: (usize, usize),
    /// `PGLANE_ORACLE_ALL=1` (or `=<Kind>,<Kind>`): draw the
    /// [`KNOWN_DIVERGENCES`](super::KNOWN_DIVERGENCES) too (or those named).
    pub known: Known,
    /// `PGLANE_ORACLE_SHRINK_SECS`: time allowed to shrink a divergence.
    pub shrink_for: Duration,
}

impl Budget {
    pub fn from_env(default_seeds: u64) -> Budget {
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
        let number = |name: &str, default: u64| {
            var(name).map_or(default, |v| v.parse().unwrap_or_else(|_| panic!("{name}={v:?} is not a number")))
        };
        let steps = var("PGLANE_ORACLE_STEPS").map_or((20, 60), |v| {
            let (low, high) = v.split_once('-').unwrap_or((&v, &v));
            let parse = |n: &str| n.trim().parse().unwrap_or_else(|_| panic!("PGLANE_ORACLE_STEPS={v:?}: N or LOW-HIGH"));
            (parse(low), parse(high))
        });
        assert!(steps.0 <= steps.1, "PGLANE_ORACLE_STEPS: LOW-HIGH with LOW <= HIGH");
        Budget {
            first_seed: number("PGLANE_ORACLE_SEED", 1),
            seeds: number("PGLANE_ORACLE_SEEDS", default_seeds),
            steps,
            known: match var("PGLANE_ORACLE_ALL").as_deref() {
                None | Some("0") => Known::Left,
                Some("1") => Known::All,
                Some(names) => Known::Named(names.split(',').map(|n| n.trim().to_owned()).collect()),
            },
            shrink_for: Duration::from_secs(number("PGLANE_ORACLE_SHRINK_SECS", 120)),
        }
    }
}

/// Where two transcripts first differ.
#[derive(Debug)]
pub struct Divergence {
    pub client: usize,
    pub direct: Option<Entry>,
    pub through_pglane: Option<Entry>,
}

impl Divergence {
    fn describe(&self, out: &mut String) {
        let entry = self.direct.as_ref().or(self.through_pglane.as_ref());
        let step = entry.map_or("?".to_owned(), |e| e.step.to_string());
        let _ = writeln!(out, "client {}, step {step}: {}", self.client, entry.map_or(String::new(), |e| e.stmt.to_string()));
        for (side, entry) in [("direct", &self.direct), ("pglane", &self.through_pglane)] {
            match entry {
                Some(e) => {
                    let _ = writeln!(out, "  {side:6}: {:?}", e.outcome);
                    if !e.notices.is_empty() {
                        let _ = writeln!(out, "          notices {:?}", e.notices);
                    }
                }
                None => {
                    let _ = writeln!(out, "  {side:6}: (no such statement)");
                }
            }
        }
    }
}

/// Runs cases directly and through pglane in database `db`.
pub struct Oracle {
    db: String,
    features: Features,
    runtime: tokio::runtime::Runtime,
    /// Client statements run through pglane and compared.
    pub compared: usize,
}

impl Oracle {
    /// An oracle on a fresh database `db` owned by [`USER`].
    pub fn new(db: &str, features: Features) -> Oracle {
        postgres().fresh_database(db, Some(USER));
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a tokio runtime");
        Oracle { db: db.to_owned(), features, runtime, compared: 0 }
    }

    /// The first divergence of `case` on a pool of `pool_size` (a fresh pglane).
    pub fn divergence(&mut self, case: &Case, pool_size: usize) -> Option<Divergence> {
        let direct = self.runtime.block_on(self.run_direct(case));
        let lane = Pglane::trusting_on_one_shard(USER, self.features.config(), &self.db, pool_size);
        let through = self.runtime.block_on(self.run_through(case, lane.port));
        drop(lane);
        self.compared += through.iter().map(Vec::len).sum::<usize>();
        first_difference(&direct, &through)
    }

    /// Runs `case` until it diverges, at most `tries` times.
    fn diverges(&mut self, case: &Case, pool_size: usize, tries: usize) -> Option<Divergence> {
        (0..tries).find_map(|_| self.divergence(case, pool_size))
    }

    /// Each program alone on a fresh direct connection, one after the other.
    async fn run_direct(&self, case: &Case) -> Vec<Vec<Entry>> {
        let mut transcripts = Vec::new();
        for (client, program) in case.programs.iter().enumerate() {
            self.set_up(&[client]).await;
            transcripts.push(run_client(postgres().port, self.db.clone(), program.clone(), client, None).await);
        }
        transcripts
    }

    /// All programs at once, one task per client, through pglane.
    async fn run_through(&self, case: &Case, port: u16) -> Vec<Vec<Entry>> {
        self.set_up(&(0..case.programs.len()).collect::<Vec<_>>()).await;
        let progress = Arc::new(Progress::new(case.programs.len()));
        let tasks: Vec<_> = case
            .programs
            .iter()
            .enumerate()
            .map(|(client, program)| {
                let (program, progress) = (program.clone(), progress.clone());
                tokio::spawn(async move { run_client(port, "app".to_owned(), program, client, Some(&progress)).await })
            })
            .collect();
        let mut transcripts = Vec::new();
        for task in tasks {
            transcripts.push(task.await.expect("a client task does not panic"));
        }
        transcripts
    }

    /// (Re)creates the public objects of `clients`: table `items_<i>`, sequence `seq_<i>`.
    async fn set_up(&self, clients: &[usize]) {
        let admin = Session::connect(postgres().port, USER, &self.db).await.expect("the oracle's admin connection");
        for client in clients {
            let sql = format!(
                "drop table if exists items_{client}; create table items_{client} (v int); \
                 drop sequence if exists seq_{client}; create sequence seq_{client}"
            );
            admin.batch(&sql).await.unwrap_or_else(|e| panic!("setting up client {client}: {e}"));
        }
    }

    /// Drops the objects of [`Oracle::set_up`].
    pub fn tear_down(&self, clients: usize) {
        let sql: String =
            (0..clients).map(|c| format!("drop table if exists items_{c}; drop sequence if exists seq_{c};")).collect();
        postgres().psql_db(&self.db, &sql);
    }

    /// Runs `seed`'s case, and on a divergence shrinks it and returns the report.
    pub fn check_seed(&mut self, case: &Case, seed: u64, pool_size: usize, budget: &Budget) -> Result<(), String> {
        let Some(found) = self.divergence(case, pool_size) else { return Ok(()) };
        let mut report = format!("seed {seed}, pool_size {pool_size}, features {:?}: pglane diverges\n", self.features);
        found.describe(&mut report);
        let started = Instant::now();
        let (small, last) = self.shrink(case, pool_size, budget.shrink_for);
        let _ = writeln!(report, "\nshrunk in {:.1?} to ({} statements):\n{small}", started.elapsed(), small.statements());
        match last {
            Some(last) => {
                let _ = writeln!(report, "which diverges at:");
                last.describe(&mut report);
            }
            None => report.push_str("(the divergence did not reproduce while shrinking: the programs above are the seed's)\n"),
        }
        let _ = writeln!(report, "reproduce: PGLANE_ORACLE_SEED={seed} PGLANE_ORACLE_SEEDS=1");
        Err(report)
    }

    /// Removes chunks of steps, halving the chunk size, from each client's
    /// program (and whole clients' programs) while the case still diverges.
    fn shrink(&mut self, case: &Case, pool_size: usize, budget: Duration) -> (Case, Option<Divergence>) {
        let deadline = Instant::now() + budget;
        let mut best = case.clone();
        let mut last = self.diverges(&best, pool_size, TRIES_PER_CANDIDATE);
        if last.is_none() {
            return (best, None);
        }
        let mut progress = true;
        while progress && Instant::now() < deadline {
            progress = false;
            for client in 0..best.programs.len() {
                let mut chunk = best.programs[client].len().max(1);
                while chunk >= 1 && Instant::now() < deadline {
                    let mut start = 0;
                    while start < best.programs[client].len() && Instant::now() < deadline {
                        let candidate = without(&best, client, start, chunk);
                        match self.diverges(&candidate, pool_size, TRIES_PER_CANDIDATE) {
                            Some(divergence) => {
                                (best, last, progress) = (candidate, Some(divergence), true);
                            }
                            None => start += chunk,
                        }
                    }
                    chunk /= 2;
                }
            }
        }
        (best, last)
    }
}

/// `case` without steps `start..start + len` of `client`'s program.
fn without(case: &Case, client: usize, start: usize, len: usize) -> Case {
    let mut smaller = case.clone();
    let program: &mut Program = &mut smaller.programs[client];
    let end = (start + len).min(program.len());
    program.drain(start..end);
    smaller
}

async fn run_client(port: u16, db: String, program: Program, client: usize, progress: Option<&Progress>) -> Vec<Entry> {
    match Session::connect(port, USER, &db).await {
        Ok(mut session) => session.run_program(&program, client, progress).await,
        Err(e) => vec![Entry {
            step: 0,
            stmt: super::program::Stmt::simple("(connect)"),
            outcome: super::runner::Outcome::Failed { code: "connect".to_owned(), message: e.to_string() },
            notices: Vec::new(),
        }],
    }
}

fn first_difference(direct: &[Vec<Entry>], through: &[Vec<Entry>]) -> Option<Divergence> {
    direct.iter().zip(through).enumerate().find_map(|(client, (direct, through))| {
        let at = (0..direct.len().max(through.len())).find(|&i| direct.get(i) != through.get(i))?;
        Some(Divergence { client, direct: direct.get(at).cloned(), through_pglane: through.get(at).cloned() })
    })
}

/// A hand-written case must give the same transcripts through pglane as
/// directly, `runs` times over.
pub fn assert_transparent(db: &str, features: Features, pool_size: usize, programs: Vec<Program>, runs: usize) {
    let case = Case { programs };
    assert!(case.statements() > 0, "a case runs statements");
    let mut oracle = Oracle::new(db, features);
    for _ in 0..runs {
        if let Some(divergence) = oracle.divergence(&case, pool_size) {
            let mut report = format!("pool_size {pool_size}, features {features:?}: pglane diverges\n");
            divergence.describe(&mut report);
            panic!("{report}\nprograms:\n{case}");
        }
    }
    oracle.tear_down(case.programs.len());
}

/// Steps that only order clients through pglane: `client` waits for `other` to finish `steps` steps.
pub fn after(other: usize, steps: usize) -> Step {
    Step::Await { client: other, steps }
}
