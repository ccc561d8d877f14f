//! Session mode passes statements through: a client that keeps its server
//! connection sees its own statement names on the server, in
//! `pg_prepared_statements`, in `EXECUTE` and `DEALLOCATE`, and every
//! Describe is the server's own answer. The same scripts run directly and
//! through pglane in session mode and get the same bytes back
//! (`common/scenario.rs`); and in transaction mode, where statements are
//! shared, an error about one names it as the client did.

mod common;
#[path = "common/raw.rs"]
mod raw;
#[path = "common/scenario.rs"]
mod scenario;

use scenario::{same_through_pglane, same_through_pglane_in, Scenario};

#[test]
fn session_mode_passes_statements_through() {
    let mut s = Scenario::new(&[&[], &[]]);
    s.prepare(0, "mine", "select $1::int * 2")
        .exec_prepared(0, "mine", &["21"])
        .query(0, "EXECUTE mine(5)")
        .query(0, "select name, statement from pg_prepared_statements order by name")
        .query(0, "DEALLOCATE mine")
        .query(0, "select count(*) from pg_prepared_statements")
        .exec_prepared(0, "mine", &["1"])
        // Another client's same text is its own statement.
        .prepare(1, "mine", "select $1::int * 2")
        .query(1, "select name from pg_prepared_statements")
        // A search_path set inside a transaction: the statement is the
        // client's own, analysed again by its server as PostgreSQL does.
        .prepare(0, "t", "select * from t")
        .query(0, "begin; set search_path = other, public")
        .exec_prepared(0, "t", &[])
        .query(0, "commit")
        .exec_prepared(0, "t", &[])
        .prepare(0, "t2", "select * from t")
        .query(0, "select name, statement from pg_prepared_statements order by name");
    let setup = "create schema other; create table other.t (a text); create table t (a int)";
    same_through_pglane_in("session_passthrough", setup, 2, "session", &s);
}

/// `bind message supplies 1 parameters, but prepared statement "S_1"
/// requires 2`: the server knows the statement by pglane's name; the client
/// is told its own, as PostgreSQL would have told it.
#[test]
fn errors_name_the_clients_statements() {
    let mut s = Scenario::new(&[&[]]);
    s.prepare(0, "S_1", "select $1::int + $2::int")
        .exec_prepared(0, "S_1", &["1"])
        .exec_params(0, "select $1::int + $2::int", &["1"])
        .exec_prepared(0, "S_1", &["1", "2"]);
    same_through_pglane("session_error_names", "", 1, &s);
}
