//! Following the UNLISTENs a listening client sends to a server inside
//! other SQL, so that its hub subscriptions end when PostgreSQL would end
//! its registrations. Pure bookkeeping: texts and server answers in,
//! committed unsubscriptions out.
//!
//! The session answers a lone `UNLISTEN` itself ([`super::statement`]);
//! every other text goes to a server connection, where an `UNLISTEN` or a
//! `DISCARD ALL` among other statements changes nothing (that connection
//! LISTENs to nothing), while the client, direct, would stop getting the
//! channel's notifications once the transaction holding it commits.
//! asyncpg's pool sends `... CLOSE ALL; UNLISTEN *; RESET ALL;` each time a
//! connection goes back to it. So for a client that listens through the
//! hub, each simple query that may hold one (its text marked `lis` or
//! `dis`, see `prepare::lexer::marks`) is parsed with `pg_query`
//! ([`unlistens_in`]), and what it unlistens waits here until the server
//! says how its transaction ended:
//!
//! - a ReadyForQuery `I` (the transaction committed, or the implicit one of
//!   a simple query succeeded): it applies;
//! - an ErrorResponse, or a `ROLLBACK` (the tag of ROLLBACK, of ROLLBACK TO
//!   SAVEPOINT, and of a COMMIT of a failed block): it is dropped.
//!
//! Where this differs from PostgreSQL, it errs on the side of delivering a
//! notification the client would not have got, never of losing one: an
//! UNLISTEN before a savepoint that is rolled back to is dropped (direct, it
//! would apply at commit). Not followed: UNLISTEN over the extended
//! protocol among other messages (a lone one is answered by the hub), and
//! UNLISTEN run inside a function. LISTEN is not followed here: outside the
//! forms the hub answers, it pins the client (`client::pinning`).

use super::statement::ListenStatement;

/// The unsubscriptions of a client's texts whose transaction has not ended
/// yet, and those whose transaction committed.
#[derive(Debug, Default)]
pub struct Unlistens {
    pending: Vec<ListenStatement>,
    committed: Vec<ListenStatement>,
}

impl Unlistens {
    /// The client sent `sql`, a simple query's text marked as possibly
    /// holding an UNLISTEN or a DISCARD ALL.
    pub fn sent(&mut self, sql: &str) {
        if may_unlisten(sql) {
            self.pending.extend(unlistens_in(sql));
        }
    }

    /// The server sent an ErrorResponse: the transaction holding what is
    /// pending is aborted.
    pub fn server_failed(&mut self) {
        self.pending.clear();
    }

    /// The server completed a command with `tag` (CommandComplete's body).
    #[inline]
    pub fn command_completed(&mut self, tag: &[u8]) {
        if !self.pending.is_empty() && tag == b"ROLLBACK\0" {
            self.pending.clear();
        }
    }

    /// The server sent ReadyForQuery; `idle`: outside a transaction block.
    #[inline]
    pub fn ready(&mut self, idle: bool) {
        if idle && !self.pending.is_empty() {
            self.committed.append(&mut self.pending);
        }
    }

    /// What committed since last asked, in the order it was sent.
    pub fn take_committed(&mut self) -> Option<Vec<ListenStatement>> {
        (!self.committed.is_empty()).then(|| std::mem::take(&mut self.committed))
    }

    /// Forgets everything (the client's session is reset).
    pub fn clear(&mut self) {
        self.pending.clear();
        self.committed.clear();
    }
}

/// Whether `sql` holds the word UNLISTEN or DISCARD anywhere (ASCII case
/// ignored): what [`unlistens_in`] is worth a parse for.
fn may_unlisten(sql: &str) -> bool {
    let has = |word: &[u8]| sql.as_bytes().windows(word.len()).any(|w| w.eq_ignore_ascii_case(word));
    has(b"unlisten") || has(b"discard")
}

/// What the statements of `sql` unlisten, in order: `UNLISTEN name`,
/// `UNLISTEN *`, and `DISCARD ALL` (which unlistens all). Names as the
/// server reads them (unquoted folded, quoted as written). Nothing for a
/// text the parser refuses: the server would refuse it too.
pub fn unlistens_in(sql: &str) -> Vec<ListenStatement> {
    use pg_query::protobuf::DiscardMode;
    use pg_query::NodeEnum;
    let Ok(parsed) = pg_query::parse(sql) else { return Vec::new() };
    parsed
        .protobuf
        .stmts
        .iter()
        .filter_map(|statement| match statement.stmt.as_ref()?.node.as_ref()? {
            NodeEnum::UnlistenStmt(u) if u.conditionname.is_empty() => Some(ListenStatement::UnlistenAll),
            NodeEnum::UnlistenStmt(u) => Some(ListenStatement::Unlisten(u.conditionname.clone())),
            NodeEnum::DiscardStmt(d) if d.target() == DiscardMode::DiscardAll => Some(ListenStatement::UnlistenAll),
            _ => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::ListenStatement::*;
    use super::*;

    #[test]
    fn unlistens_are_read_as_the_server_reads_them() {
        assert_eq!(
            unlistens_in("SELECT pg_advisory_unlock_all();\nCLOSE ALL;\nUNLISTEN *;\nRESET ALL;"),
            vec![UnlistenAll],
            "asyncpg's pool reset"
        );
        assert_eq!(unlistens_in("discard all"), vec![UnlistenAll]);
        assert_eq!(unlistens_in("DISCARD TEMP; DISCARD PLANS; DISCARD SEQUENCES"), vec![]);
        assert_eq!(
            unlistens_in("begin; unlisten Jobs; UNLISTEN \"Mixed Case\"; commit"),
            vec![Unlisten("jobs".into()), Unlisten("Mixed Case".into())]
        );
        assert_eq!(unlistens_in("select 'unlisten a'; /* unlisten b */ select 1 -- unlisten c"), vec![]);
        assert_eq!(unlistens_in("do $$ begin execute 'unlisten a'; end $$"), vec![], "inside a function: not seen");
        assert_eq!(unlistens_in("unlisten a; selec 1"), vec![], "the server refuses the whole text");
    }

    #[test]
    fn the_quick_check_passes_every_text_that_may_unlisten() {
        for sql in ["UNLISTEN *", "x; unListen a", "Discard All", "select 1;DISCARD ALL"] {
            assert!(may_unlisten(sql), "{sql}");
        }
        for sql in ["LISTEN a", "select distinct 1", "unlist", ""] {
            assert!(!may_unlisten(sql), "{sql}");
        }
    }

    fn follow(steps: &[&str]) -> Vec<ListenStatement> {
        let mut u = Unlistens::default();
        for step in steps {
            match *step {
                "error" => u.server_failed(),
                "ROLLBACK" | "COMMIT" | "SELECT 1" => u.command_completed(format!("{step}\0").as_bytes()),
                "I" | "T" | "E" => u.ready(*step == "I"),
                sql => u.sent(sql),
            }
        }
        u.take_committed().unwrap_or_default()
    }

    #[test]
    fn an_unlisten_applies_once_its_transaction_commits() {
        let all = || vec![UnlistenAll];
        assert_eq!(follow(&["CLOSE ALL; UNLISTEN *; RESET ALL;", "I"]), all(), "an implicit transaction");
        assert_eq!(follow(&["begin", "T", "unlisten *", "T"]), vec![], "not committed yet");
        assert_eq!(follow(&["begin", "T", "unlisten *", "T", "commit", "COMMIT", "I"]), all());
        assert_eq!(follow(&["unlisten *; select 1/0", "error", "I"]), vec![], "the implicit transaction failed");
        assert_eq!(follow(&["begin", "T", "unlisten *", "T", "rollback", "ROLLBACK", "I"]), vec![]);
        assert_eq!(
            follow(&["begin", "T", "unlisten *", "T", "select 1/0", "error", "E", "commit", "ROLLBACK", "I"]),
            vec![],
            "a failed block's COMMIT"
        );
        assert_eq!(follow(&["unlisten a", "I", "unlisten b; select 1/0", "error", "I"]), vec![Unlisten("a".into())]);
        let mut u = Unlistens::default();
        u.sent("discard all");
        u.ready(true);
        assert_eq!(u.take_committed(), Some(all()));
        assert_eq!(u.take_committed(), None, "taken once");
    }
}
