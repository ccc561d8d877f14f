//! Auto-prepare's validator: checks each new query shape of a pool on a side
//! server connection, never on a client's, and installs the verdict.
//!
//! One task per pool, started by a session of the pool when auto-prepare is
//! on. It takes jobs from the pool's shape queue (`prepare::auto`), one at a
//! time, runs the parser checks (`prepare::shape::validate`: pg_query, 0.1 ms
//! to tens of ms for a big query) off the shard thread
//! ([`crate::runtime::off_shard`]) so that the shard's clients are served
//! meanwhile, then borrows an idle server
//! connection of the pool (never one a client holds), Parses and Describes
//! the original and the rewritten text there (Parse runs nothing), and gives
//! it back. A saturated pool hands connections from client to client without
//! their ever being idle: if none is idle within [`IDLE_WAIT`], the
//! validator takes its turn in the pool's queue like a client, which delays
//! the clients queued behind it by one short round trip, once per shape. A rewrite is cached only if the server prepares it with
//! the same result columns as the original (names, type OIDs, typmods, and
//! where they come from) and with the parameter types the shape declares,
//! and a write only in a database with no rule on writes
//! ([`has_rules_on_writes`]).
//! When no connection is free in time, the original itself fails (a missing
//! table), or the parser refuses how this query spells a literal, the shape
//! is tried again later with another of its queries; its queries pass
//! through meanwhile. The task holds its pool only while it works on a job, so a
//! dropped pool ends it.

use std::rc::{Rc, Weak};
use std::task::Poll;
use std::time::{Duration, Instant};

use bytes::BytesMut;

use crate::pool::{Lease, Pool};
use crate::prepare::auto::{Decision, Job};
use crate::prepare::lexer::Lexed;
use crate::prepare::shape::{self, Reason, Rewrite, Verdict};
use crate::protocol::frame::HEADER_LEN;
use crate::protocol::{frontend, names};
use crate::server::{Described, ServerError};

/// How often, and for how long, the validator looks for an idle server
/// connection before it queues for one.
const IDLE_POLL: Duration = Duration::from_millis(5);
const IDLE_WAIT: Duration = Duration::from_millis(50);

/// How long the validator waits in the pool's queue before it gives the
/// shape up for [`RETRY_AFTER`].
const CHECKOUT_WAIT: Duration = Duration::from_secs(1);

/// How long one side check may take before its connection is closed.
const CHECK_TIMEOUT: Duration = Duration::from_secs(5);

/// How long a shape passes through before it is tried again, when it could
/// not be checked.
const RETRY_AFTER: Duration = Duration::from_secs(1);

/// Starts `pool`'s validator unless it runs already.
pub fn start_validator(pool: &Rc<Pool>) {
    if pool.registry.shapes.claim_validator() {
        crate::rt::spawn_local(run(Rc::downgrade(pool))).detach();
    }
}

async fn run(pool: Weak<Pool>) {
    loop {
        let job = futures_lite::future::poll_fn(|cx| match pool.upgrade() {
            Some(pool) => pool.registry.shapes.poll_job(cx).map(Some),
            None => Poll::Ready(None),
        })
        .await;
        let (Some(job), Some(pool)) = (job, pool.upgrade()) else { return };
        let decision = validate(&pool, &job).await;
        tracing::debug!(sql = &*job.sql, ?decision, "auto-prepare shape validated");
        pool.registry.shapes.decide(&job, decision);
    }
}

/// The verdict for one shape.
async fn validate(pool: &Rc<Pool>, job: &Job) -> Decision {
    pool.registry.count(|c| c.validations += 1);
    let checked = {
        let _parsing = pool.registry.shapes.parsing();
        let owned = job.clone();
        crate::runtime::off_shard(move || parser_verdict(&owned)).await
    };
    let rewrite = match checked {
        Some(Ok(rewrite)) => rewrite,
        Some(Err(reason)) => return failed(pool, reason),
        // Not retried: it would panic again.
        None => {
            tracing::warn!(sql = &*job.sql, "the parser panicked on a query; its shape passes through");
            pool.registry.count(|c| c.validation_failures += 1);
            return Decision::PassThrough(Reason::Syntax);
        }
    };
    let Some(mut lease) = side_connection(pool).await else {
        return Decision::RetryAfter(Instant::now() + RETRY_AFTER);
    };
    let checked = crate::rt::with_timeout(CHECK_TIMEOUT, side_check(&mut lease, job, &rewrite)).await;
    match checked {
        Some(Ok(outcome)) => {
            lease.release();
            match outcome {
                Ok(()) => Decision::Rewrite(register(pool, job, &rewrite)),
                Err(Check::OriginalFailed) => Decision::RetryAfter(Instant::now() + RETRY_AFTER),
                Err(Check::Refused(reason)) => failed(pool, reason),
            }
        }
        // The connection is in an unknown state: dropping the lease closes it.
        Some(Err(_)) | None => Decision::RetryAfter(Instant::now() + RETRY_AFTER),
    }
}

/// A connection of the pool: an idle one if one is free within
/// [`IDLE_WAIT`], else the next one the pool's queue gives out.
async fn side_connection(pool: &Rc<Pool>) -> Option<Lease> {
    let started = Instant::now();
    while started.elapsed() < IDLE_WAIT {
        if let Some(lease) = pool.try_idle() {
            return Some(lease);
        }
        crate::rt::sleep(IDLE_POLL).await;
    }
    pool.checkout(CHECKOUT_WAIT).await.ok()
}

/// A shape refused: for good, unless the reason is in this query's literals
/// (then another query of the shape is checked after [`RETRY_AFTER`]).
fn failed(pool: &Pool, reason: Reason) -> Decision {
    pool.registry.count(|c| c.validation_failures += 1);
    if reason.is_about_the_literals() {
        return Decision::RetryAfter(Instant::now() + RETRY_AFTER);
    }
    Decision::PassThrough(reason)
}

/// The parser's verdict on the job's query, which must agree with the
/// rewritten text and types the exchange looked up.
fn parser_verdict(job: &Job) -> Result<Rewrite, Reason> {
    let mut lexed = Lexed::new();
    lexed.lex(&job.original, job.options).map_err(|_| Reason::ConstantMismatch)?;
    match shape::validate(&job.original, &lexed) {
        Verdict::Rewrite(r) if *r.sql == *job.sql && *r.param_types == *job.param_types => Ok(r),
        Verdict::Rewrite(_) => Err(Reason::RewriteInvalid),
        Verdict::PassThrough(reason) => Err(reason),
    }
}

/// Why a side check did not approve a rewrite.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Check {
    /// The server refused the original too: nothing is known of the shape.
    OriginalFailed,
    Refused(Reason),
}

/// Parse + Describe of the original and the rewritten text on a connection
/// with the settings of the shape's context (search_path above all) and no
/// other client's.
async fn side_check(lease: &mut Lease, job: &Job, rewrite: &Rewrite) -> Result<Result<(), Check>, ServerError> {
    let align = job.settings.sql_to_apply_over(&lease.session.borrow().settings, false);
    if let Some(align) = align {
        lease.run_to_idle(&align).await?;
        lease.session.borrow_mut().settings.take_values_of(&job.settings, false);
    }
    if rewrite.kind.writes() && has_rules_on_writes(lease).await? {
        return Ok(Err(Check::Refused(Reason::Rules)));
    }
    let described = lease.describe(&[(&job.original, &[]), (&rewrite.sql, &rewrite.param_types)]).await?;
    Ok(match described.as_slice() {
        [Ok(original), Ok(rewritten)] => compare(original, rewritten, rewrite).map_err(Check::Refused),
        [Ok(_), Err(_)] => Err(Check::Refused(Reason::RewriteInvalid)),
        _ => Err(Check::OriginalFailed),
    })
}

/// Whether the side connection's database has a rule on an INSERT, UPDATE
/// or DELETE of any relation. A write such a rule expands runs as several
/// queries, and a SELECT among them (DO ALSO or DO INSTEAD SELECT) returns
/// its rows to a simple query but not to a prepared statement's portal,
/// whose Execute PostgreSQL runs with its rows discarded (`PortalRunMulti`:
/// "the results will be discarded unless you use simple Query protocol").
/// Asked of the whole database's own relations, not of the statement's
/// tables: rules on writes are rare, and a write then simply passes
/// through. The system's own (`pg_settings` has two, in every database)
/// are left out: a write to a system view is not what auto-prepare is
/// for, and counting them would refuse every write. A rule made after the
/// shape was validated, behind pglane's back, is not seen (one made
/// through pglane is DDL, which validates every shape again).
async fn has_rules_on_writes(lease: &mut Lease) -> Result<bool, ServerError> {
    let sql = "SELECT 'rules', EXISTS (SELECT 1 FROM pg_catalog.pg_rewrite r JOIN pg_catalog.pg_class c ON c.oid = r.ev_class \
               WHERE r.ev_type <> '1' AND c.relnamespace <> 'pg_catalog'::pg_catalog.regnamespace)::pg_catalog.text";
    Ok(lease.query_value(sql).await?.is_none_or(|exists| exists != "false"))
}

/// Whether the server described the rewrite as it did the original: the
/// same result columns, and the parameter types the shape declares.
fn compare(original: &Described, rewritten: &Described, rewrite: &Rewrite) -> Result<(), Reason> {
    if original.row != rewritten.row {
        return Err(Reason::ResultMismatch);
    }
    rewrite.check_parameter_types(&rewritten.params)
}

/// The registry's statement for the rewrite, known good (a server accepted it).
fn register(pool: &Pool, job: &Job, rewrite: &Rewrite) -> Rc<crate::prepare::Statement> {
    let mut parse = BytesMut::new();
    frontend::parse(&mut parse, "", &rewrite.sql, &rewrite.param_types);
    // Our own encoding always splits; the key is the Parse body after the name.
    let key = names::split_parse(&parse[HEADER_LEN..]).map(|(_, rest)| rest).unwrap_or_default();
    let statement = pool.registry.register(job.context, key);
    statement.validated.set(true);
    statement
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prepare::lexer::LexOptions;
    use crate::protocol::backend::FieldDescription;

    fn column(name: &str, type_oid: u32, type_modifier: i32) -> FieldDescription {
        FieldDescription { name: name.into(), table_oid: 0, column: 0, type_oid, type_size: -1, type_modifier, format: 0 }
    }

    fn rewrite_of(sql: &str) -> Rewrite {
        let mut lexed = Lexed::new();
        lexed.lex(sql, LexOptions::default()).unwrap();
        match shape::validate(sql, &lexed) {
            Verdict::Rewrite(r) => r,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_rewrite_must_describe_like_the_original() {
        let r = rewrite_of("SELECT 42, 'a'");
        let original = Described { params: vec![], row: Some(vec![column("?column?", 23, -1), column("?column?", 25, -1)]) };
        let same = Described { params: vec![23, 25], row: original.row.clone() };
        assert_eq!(compare(&original, &same, &r), Ok(()));
        let renamed = Described { params: vec![23, 25], row: Some(vec![column("int4", 23, -1), column("?column?", 25, -1)]) };
        assert_eq!(compare(&original, &renamed, &r), Err(Reason::ResultMismatch));
        let retyped = Described { params: vec![23, 25], row: Some(vec![column("?column?", 20, -1), column("?column?", 25, -1)]) };
        assert_eq!(compare(&original, &retyped, &r), Err(Reason::ResultMismatch));
        let typmod = Described { params: vec![23, 25], row: Some(vec![column("?column?", 23, 6), column("?column?", 25, -1)]) };
        assert_eq!(compare(&original, &typmod, &r), Err(Reason::ResultMismatch));
        // The server may not change a declared parameter type.
        let redeclared = Described { params: vec![20, 25], row: original.row.clone() };
        assert_eq!(compare(&original, &redeclared, &r), Err(Reason::RewriteInvalid));
    }

    #[test]
    fn no_rows_on_both_sides_is_the_same_description() {
        let r = rewrite_of("INSERT INTO t VALUES (1)");
        let none = Described { params: vec![23], row: None };
        assert_eq!(compare(&Described { params: vec![], row: None }, &none, &r), Ok(()));
        let some = Described { params: vec![], row: Some(vec![column("a", 23, -1)]) };
        assert_eq!(compare(&some, &none, &r), Err(Reason::ResultMismatch));
    }

    #[test]
    fn the_parser_verdict_must_match_what_was_looked_up() {
        let job = |sql: &str, original: &str| Job {
            context: crate::prepare::Context::DEFAULT,
            settings: crate::settings::Settings::default(),
            hash: 0,
            sql: sql.into(),
            param_types: Box::new([23]),
            original: original.into(),
            options: LexOptions::default(),
            epoch: 0,
        };
        assert!(parser_verdict(&job("SELECT $1", "SELECT 1")).is_ok());
        assert_eq!(parser_verdict(&job("SELECT $1 ", "SELECT 1")), Err(Reason::RewriteInvalid));
        assert_eq!(parser_verdict(&job("SHOW $1", "SHOW 1")).err().map(|_| ()), Some(()));
    }
}
