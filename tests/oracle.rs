//! The differential transparency oracle (issue 43): random clients through
//! pglane on a tiny pool, each compared with itself alone on a direct
//! connection. The machinery, and how to run it long, is in
//! tests/oracle/mod.rs; the productions left out of the random search are
//! `oracle::KNOWN_DIVERGENCES`.
//!
//! Below the two searches, every divergence the oracle found is kept as a
//! hand-written minimal program; those not fixed yet are ignored, naming
//! issue 43 (`cargo test --test oracle -- --ignored` runs them).

mod common;
#[path = "oracle/mod.rs"]
mod oracle;

use std::time::Instant;

use oracle::grammar;
use oracle::program::{Program, Step, Stmt, Via};
use oracle::search::{after, assert_transparent, Budget, Features, Oracle};

/// Simulated clients per case.
const CLIENTS: usize = 4;

/// Seeds per search when `PGLANE_ORACLE_SEEDS` is not set: both searches
/// together stay well under 90 s on a 2-core box.
const DEFAULT_SEEDS: u64 = 50;

/// Random cases, seed after seed, alternating pools of one and two server
/// connections; panics with the shrunk programs on the first divergence.
fn search(db: &str, features: Features) {
    let budget = Budget::from_env(DEFAULT_SEEDS);
    let started = Instant::now();
    let mut oracle = Oracle::new(db, features);
    for seed in budget.first_seed..budget.first_seed + budget.seeds {
        let case = grammar::case(seed, CLIENTS, budget.steps, &budget.known);
        let pool_size = 1 + (seed % 2) as usize;
        if let Err(report) = oracle.check_seed(&case, seed, pool_size, &budget) {
            panic!("{report}");
        }
    }
    oracle.tear_down(CLIENTS);
    assert!(oracle.compared > 0 || budget.seeds == 0, "the search compared no statement");
    println!(
        "oracle ({features:?}): {} seeds from {}, {} client statements run through pglane and compared \
         with a direct connection, in {:.1?}",
        budget.seeds,
        budget.first_seed,
        oracle.compared,
        started.elapsed()
    );
}

#[test]
fn oracle_finds_no_divergence_at_the_defaults() {
    search("oracle_defaults", Features::Defaults);
}

#[test]
fn oracle_finds_no_divergence_with_every_feature_off() {
    search("oracle_off", Features::Off);
}

// ---------------------------------------------------------------------------
// Regression programs: each divergence the oracle found, by hand, minimal.
// ---------------------------------------------------------------------------

fn simple(sql: &str) -> Step {
    Step::one(Stmt::simple(sql))
}

/// Runs `programs` three times on a pool of one server connection, with
/// pglane's defaults and with every feature off.
fn transparent(db: &str, programs: Vec<Program>) {
    transparent_on(db, 1, programs);
}

/// [`transparent`] on a pool of `pool_size`.
fn transparent_on(db: &str, pool_size: usize, programs: Vec<Program>) {
    assert_transparent(&format!("{db}_defaults"), Features::Defaults, pool_size, programs.clone(), 3);
    assert_transparent(&format!("{db}_off"), Features::Off, pool_size, programs, 3);
}

/// A temporary table made by its qualified name is session state like one
/// made with TEMP: the next client on the server connection must not see it
/// (found by the oracle, fixed by "Pinning: a temporary object by any
/// spelling pins"). Client 1 waits for client 0's CREATE; client 0 stays
/// connected a while, so pglane has to pin it, not hand its server over.
#[test]
fn a_temp_table_named_pg_temp_dot_does_not_leak() {
    transparent(
        "oracle_pg_temp_dot",
        vec![vec![simple("create table pg_temp.t1 (v text)"), after(1, 2)], vec![after(0, 1), simple("select count(*) from t1")]],
    );
}

/// The same, with the schema quoted.
#[test]
fn a_temp_table_named_quoted_pg_temp_does_not_leak() {
    transparent(
        "oracle_pg_temp_quoted",
        vec![
            vec![simple("create table \"pg_temp\".t2 (v text)"), after(1, 2)],
            vec![after(0, 1), simple("select relname from pg_class where relnamespace = pg_my_temp_schema() order by 1")],
        ],
    );
}

/// A temporary table made by a plain CREATE TABLE under `search_path = pg_temp, ...`.
#[test]
fn a_temp_table_made_through_search_path_does_not_leak() {
    transparent(
        "oracle_pg_temp_path",
        vec![
            vec![simple("set search_path = pg_temp, public"), simple("create table t5 (v text)"), after(1, 2)],
            vec![after(0, 2), simple("select count(*) from t5")],
        ],
    );
}

/// A custom setting another client SET and RESET is NULL for this one, as
/// on a direct connection, not the '' of a placeholder left on the server.
#[test]
#[ignore = "issue 43: a reset custom setting leaves a placeholder: '' where direct is NULL (maybe unfixable)"]
fn a_custom_setting_another_client_reset_reads_null() {
    transparent(
        "oracle_placeholder",
        vec![
            vec![simple("set app.tenant = 'a'"), simple("reset app.tenant")],
            vec![after(0, 2), Step::one(Stmt::new(Via::Unnamed, "select current_setting('app.tenant', true)"))],
        ],
    );
}

fn stmt(via: Via, sql: &str) -> Stmt {
    Stmt::new(via, sql)
}

/// extra_float_digits is not reported by the server: pglane follows it from
/// the SQL. Set by `set_config` with a parameter (which pins the client),
/// it must survive the client's next SET: pglane's realignment after that
/// SET used to RESET the value it could not see (found by the oracle, fixed
/// by "Settings: a pinned client's unseen changes survive a realignment").
#[test]
fn extra_float_digits_set_by_set_config_survives_the_next_set() {
    transparent(
        "oracle_efd_set_config",
        vec![vec![
            Step::one(stmt(Via::Extended, "select set_config('extra_float_digits', $1, false)").with_params(&["3"])),
            simple("set statement_timeout to 0"),
            simple("show extra_float_digits"),
        ]],
    );
}

/// The same, set in a simple query of several statements.
#[test]
fn extra_float_digits_set_in_a_multi_statement_query_survives_the_next_set() {
    transparent(
        "oracle_efd_multi",
        vec![vec![
            simple("set extra_float_digits = 3; select interval '1 day 02:03:04'"),
            Step::one(stmt(Via::Extended, "set app.tenant to 'b'")),
            simple("show extra_float_digits"),
        ]],
    );
}

/// The same, set inside a transaction block that commits.
#[test]
fn extra_float_digits_set_in_a_block_survives_the_next_set() {
    transparent(
        "oracle_efd_block",
        vec![vec![
            Step::Run(vec![
                stmt(Via::Extended, "begin isolation level repeatable read"),
                Stmt::simple("set extra_float_digits to 0"),
                stmt(Via::Extended, "commit"),
            ]),
            simple("set app.tenant to 'b'"),
            simple("select 1.5::float8::text, (1::float8 / 3)::text"),
        ]],
    );
}

/// A backend keeps its temporary schema when its temporary objects are
/// dropped or discarded, and a session that has one is not a fresh one:
/// `pg_my_temp_schema()` names it, and a statement prepared there is not
/// analysed again when the session makes its own first temporary object,
/// as on a fresh session (whose search path changes then). So client 1's
/// prepared timestamptz literal kept the zone of its Parse through pglane,
/// on the connection client 0's temporary table had been on, where direct
/// it takes the zone of the moment (found by the oracle, seed 28). pglane
/// closes a connection whose backend has a temporary schema instead of
/// handing it to another client.
#[test]
fn a_backend_that_had_a_temporary_schema_serves_no_other_client() {
    transparent(
        "oracle_temp_schema",
        vec![
            vec![simple("create temp table t2 (v text)")],
            vec![
                after(0, 1),
                simple("select pg_my_temp_schema() = 0"),
                Step::one(stmt(Via::Prepare { slot: 1, params: 0 }, "select '2020-01-01 12:00'::timestamptz::text")),
                simple("create sequence pg_temp.ts1"),
                Step::one(stmt(Via::Extended, "set time zone 'America/New_York'")),
                Step::one(stmt(Via::Execute { slot: 1 }, "")),
            ],
        ],
    );
}

/// What `FETCH` returns is the open cursor's, whatever the text: a second
/// cursor of the same name over other columns must be described as it is
/// (found by the oracle's long run, seed 1130, one client, every feature
/// off too: pglane answered the second Describe of `fetch 2 from c2` from
/// the first cursor's int4 column, and the client could not decode the
/// text it got).
#[test]
fn a_fetch_is_described_by_its_cursor_not_its_text() {
    let block = |query: &str| {
        Step::Run(vec![
            Stmt::simple("begin"),
            Stmt::simple(&format!("declare c2 cursor for {query}")),
            stmt(Via::Extended, "fetch 2 from c2"),
            stmt(Via::Extended, "commit"),
        ])
    };
    transparent(
        "oracle_fetch_described",
        vec![vec![block("select generate_series(1, 3)"), block("select '2020-01-01 12:00'::timestamptz::text")]],
    );
}

/// A statement a client prepared keeps the zone its literal was converted
/// in, even once a pinned client's DISCARD ALL dropped it from the only
/// server connection (found by the oracle's long run, seed 1036): pglane
/// prepares it again in the client's TimeZone of now.
#[test]
#[ignore = "issue 43: a statement prepared again on a connection that lost it is parsed in the client's settings of now"]
fn a_statement_dropped_by_another_clients_reset_keeps_the_zone_of_its_parse() {
    transparent(
        "oracle_zone_after_reset",
        vec![
            vec![
                Step::one(stmt(Via::Prepare { slot: 0, params: 0 }, "select '2020-01-01 12:00'::timestamptz::text")),
                after(1, 2),
                Step::one(stmt(Via::Unnamed, "set TimeZone to 'Asia/Tokyo'")),
                Step::one(stmt(Via::Execute { slot: 0 }, "")),
            ],
            vec![after(0, 1), Step::one(stmt(Via::Extended, "select pg_advisory_lock($1::bigint)").with_params(&["4331"]))],
        ],
    );
}

/// A literal `'...'::timestamptz` in a protocol-level statement is converted
/// when the client Parsed it: executing it after a change of TimeZone gives
/// the instant of the zone at Parse, as on a direct connection. (Found by
/// the oracle at features off on a pool of two, as shrunk here; most likely
/// another client's temporary schema on the connection, see
/// `a_backend_that_had_a_temporary_schema_serves_no_other_client`.)
#[test]
fn a_prepared_timestamptz_literal_keeps_the_zone_it_was_parsed_in() {
    // Two server connections: the execution may land on the one the
    // statement was never Parsed on.
    transparent_on(
        "oracle_zone_literal",
        2,
        vec![vec![
            Step::one(stmt(Via::Prepare { slot: 1, params: 0 }, "select '2020-01-01 12:00'::timestamptz::text")),
            simple("set IntervalStyle to sql_standard"),
            simple("set time zone 'Etc/GMT+3'"),
            Step::one(stmt(Via::Execute { slot: 1 }, "")),
        ]],
    );
}
