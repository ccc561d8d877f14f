//! Following the LISTENs and UNLISTENs a transaction-mode client sends to a
//! server inside other SQL (a LISTEN by either protocol), so that its hub subscriptions start and end
//! when PostgreSQL would start and end its registrations. Pure
//! bookkeeping: texts and server answers in, what each transaction's end
//! made of them out.
//!
//! The session answers a lone `LISTEN` or `UNLISTEN` itself
//! ([`super::statement`]); every other text goes to a server connection.
//! There, a LISTEN inside a transaction block or among other statements
//! registers that server backend (pglane then runs `UNLISTEN *` on it
//! before anyone else gets it, and drops what it sends the client: the hub
//! delivers), and an UNLISTEN or a `DISCARD ALL` changes nothing (the
//! connection LISTENs to nothing). Direct, the client's own registrations
//! would change once the transaction holding them commits. asyncpg's pool
//! sends `... CLOSE ALL; UNLISTEN *; RESET ALL;` each time a connection
//! goes back to it; psycopg in a transaction sends `LISTEN ch` between its
//! `BEGIN` and `COMMIT`, pgjdbc the same as Parse, Bind, Execute. So each
//! simple query or Parse in which a statement begins with LISTEN (or, for a
//! client that listens already, that may hold an
//! UNLISTEN or DISCARD ALL: its text marked `lis` or `dis`, see
//! `prepare::lexer::marks`) is parsed with `pg_query`
//! ([`registrations_in`]), and what it does waits here until the server
//! says how its transaction ended:
//!
//! - a statement runs when its command tag comes (`LISTEN`, `UNLISTEN`,
//!   `DISCARD ALL`, matched in order); one that has not when its text's
//!   ReadyForQuery comes never will;
//! - what ran applies at a `COMMIT` tag, or a ReadyForQuery `I` (the
//!   implicit transaction of a simple query, or an autocommitted
//!   statement, succeeded);
//! - after an ErrorResponse or a `ROLLBACK` tag (of ROLLBACK, of ROLLBACK
//!   TO SAVEPOINT, and of a COMMIT of a failed block), an UNLISTEN that
//!   ran is dropped at once; a LISTEN that ran is in doubt until a
//!   ReadyForQuery says whether the block lives on (`T`: kept) or ended
//!   (`I`: rolled back).
//!
//! A LISTEN's channel is subscribed to *ahead*, as its text goes to the
//! server (the session holds the text until the hub's listening connection
//! LISTENs: [`Registrations::take_sent_listens`]), so that no notification
//! committed after the client's transaction is missed. What the hub posts
//! meanwhile waits in the client's mailbox, delivered only between
//! transactions: what came before each later request of the transaction
//! is sent to the server committed before the LISTEN did, and is dropped
//! then (PostgreSQL delivers only what commits after it; what commits just
//! before a request, but reaches the hub after it is sent, is not told
//! apart and is delivered); all of it goes
//! with the subscription if the LISTEN is rolled back
//! ([`Outcome::RolledBack`]).
//!
//! Where this differs from PostgreSQL, it errs on the side of delivering a
//! notification the client would not have got, never of losing one: an
//! UNLISTEN before a savepoint that is rolled back to is dropped (direct,
//! it would apply at commit), and a LISTEN after a savepoint that is rolled
//! back to is kept (direct, it would not apply). A Parse's LISTEN is
//! followed as a simple query's is, for the run of it its own request
//! makes; a LISTEN tag nothing waited for (the statement run again in a
//! later request) pins the client ([`Registrations::command_completed`]).
//! Not followed: either run inside a function, and an UNLISTEN prepared in
//! an earlier request than the one that runs it (the client keeps that
//! subscription: more notifications, never fewer).

use super::statement::ListenStatement;

/// What a client's texts did to its registrations, once their transaction
/// ended, in the order they were sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The statement committed.
    Committed(ListenStatement),
    /// A LISTEN of this channel was rolled back (its subscription ahead, if
    /// it made one, ends).
    RolledBack(String),
}

/// A statement whose transaction has not ended yet.
#[derive(Debug)]
struct Pending {
    statement: ListenStatement,
    /// The server ran it (its command tag came).
    ran: bool,
    /// It ran, then an error or a ROLLBACK came (a LISTEN only: see the
    /// module comment).
    doubtful: bool,
}

/// The registrations of a client's texts whose transaction has not ended
/// yet, and the outcomes of those whose transaction ended.
///
/// Statements are matched to the server's answers by their command tags,
/// in order: a `LISTEN` tag is the first LISTEN sent and not run yet, and
/// so on. A ROLLBACK or an error concerns only what ran before it; what had
/// not run when its text's ReadyForQuery came never will.
#[derive(Debug, Default)]
pub struct Registrations {
    pending: Vec<Pending>,
    ended: Vec<Outcome>,
    /// Channels of LISTENs just sent, for the session to subscribe to ahead.
    sent_listens: Vec<String>,
}

impl Registrations {
    /// The client sent a text holding `statements` (see [`registrations_in`]).
    pub fn sent(&mut self, statements: Vec<ListenStatement>) {
        for statement in statements {
            if let ListenStatement::Listen(channel) = &statement {
                self.sent_listens.push(channel.clone());
            }
            self.pending.push(Pending { statement, ran: false, doubtful: false });
        }
    }

    /// The client sent `sql`, a text (a simple query's or a Parse's)
    /// marked as possibly holding an UNLISTEN or a DISCARD ALL; whether it
    /// holds one.
    pub fn sent_text(&mut self, sql: &str) -> bool {
        if !may_unlisten(sql) {
            return false;
        }
        let statements = registrations_in(sql).unwrap_or_default();
        let any = !statements.is_empty();
        self.sent(statements);
        any
    }

    /// The channels of LISTENs sent since last asked, if any.
    pub fn take_sent_listens(&mut self) -> Option<Vec<String>> {
        (!self.sent_listens.is_empty()).then(|| std::mem::take(&mut self.sent_listens))
    }

    /// The channels of LISTENs sent that the session has not subscribed to
    /// ahead yet, if any.
    #[inline]
    pub fn sent_listens(&self) -> Option<&[String]> {
        (!self.sent_listens.is_empty()).then_some(&self.sent_listens[..])
    }

    /// The server sent an ErrorResponse: the transaction holding what ran
    /// is aborted, or a savepoint will be rolled back to.
    pub fn server_failed(&mut self) {
        if !self.pending.is_empty() {
            self.doubt();
        }
    }

    /// The server completed a command with `tag` (CommandComplete's body).
    /// True for a LISTEN that ran unfollowed: none sent was waiting for it.
    #[inline]
    pub fn command_completed(&mut self, tag: &[u8]) -> bool {
        let ran = |kind: fn(&ListenStatement) -> bool, pending: &mut Vec<Pending>| match pending
            .iter_mut()
            .find(|p| !p.ran && kind(&p.statement))
        {
            Some(p) => {
                p.ran = true;
                true
            }
            None => false,
        };
        match tag {
            b"LISTEN\0" => return !ran(|s| matches!(s, ListenStatement::Listen(_)), &mut self.pending),
            _ if self.pending.is_empty() => {}
            b"UNLISTEN\0" | b"DISCARD ALL\0" => {
                ran(|s| !matches!(s, ListenStatement::Listen(_)), &mut self.pending);
            }
            b"ROLLBACK\0" => self.doubt(),
            b"COMMIT\0" => self.end_ran(true),
            _ => {}
        }
        false
    }

    /// The server sent ReadyForQuery with `status` (`I`, `T` or `E`);
    /// `more_due`: more of the client's requests wait for their answers
    /// (what has not run may be theirs).
    #[inline]
    pub fn ready(&mut self, status: u8, more_due: impl FnOnce() -> bool) {
        if self.pending.is_empty() {
            return;
        }
        match status {
            b'I' => {
                self.end_ran(false);
                if !more_due() {
                    self.drop_unran();
                }
            }
            // The block lives on: what was in doubt was in a savepoint
            // rolled back to (or before it, kept: see the module comment).
            b'T' => self.pending.iter_mut().for_each(|p| p.doubtful = false),
            _ => {}
        }
    }

    /// The server connection's transaction ends without an answer (the
    /// connection was lost, or is rolled back as it goes back).
    #[inline]
    pub fn abort(&mut self) {
        if !self.pending.is_empty() || !self.sent_listens.is_empty() {
            self.abort_pending();
        }
    }

    #[cold]
    fn abort_pending(&mut self) {
        self.doubt();
        self.end_ran(false);
        self.drop_unran();
        self.sent_listens.clear();
    }

    /// What ended since last asked, in order.
    pub fn take_ended(&mut self) -> Option<Vec<Outcome>> {
        (!self.ended.is_empty()).then(|| std::mem::take(&mut self.ended))
    }

    /// An error or ROLLBACK: the UNLISTENs that ran go, the LISTENs that
    /// ran are in doubt.
    fn doubt(&mut self) {
        self.pending.retain_mut(|p| match p.statement {
            _ if !p.ran => true,
            ListenStatement::Listen(_) => {
                p.doubtful = true;
                true
            }
            _ => false,
        });
    }

    /// The transaction of what ran ended: committed (a COMMIT tag), or as
    /// its LISTENs' doubt says.
    fn end_ran(&mut self, committed: bool) {
        let ended = &mut self.ended;
        self.pending.retain_mut(|p| {
            if !p.ran {
                return true;
            }
            let statement = std::mem::replace(&mut p.statement, ListenStatement::UnlistenAll);
            ended.push(match statement {
                ListenStatement::Listen(channel) if p.doubtful && !committed => Outcome::RolledBack(channel),
                statement => Outcome::Committed(statement),
            });
            false
        });
    }

    /// What never ran: a LISTEN's subscription ahead ends.
    fn drop_unran(&mut self) {
        for p in self.pending.drain(..) {
            if let ListenStatement::Listen(channel) = p.statement {
                self.ended.push(Outcome::RolledBack(channel));
            }
        }
    }
}

/// Whether `sql` holds the word UNLISTEN or DISCARD anywhere (ASCII case
/// ignored): what [`registrations_in`] is worth a parse for in a text that
/// begins no statement with LISTEN.
fn may_unlisten(sql: &str) -> bool {
    let has = |word: &[u8]| sql.as_bytes().windows(word.len()).any(|w| w.eq_ignore_ascii_case(word));
    has(b"unlisten") || has(b"discard")
}

/// What the statements of `sql` do to the session's registrations, in
/// order: `LISTEN name`, `UNLISTEN name`, `UNLISTEN *`, and `DISCARD ALL`
/// (which unlistens all). Names as the server reads them (unquoted folded,
/// quoted as written, cut to 63 bytes by PostgreSQL's own scanner). `None`
/// for a text the parser refuses (the server would refuse it too): then it
/// is not followed (a LISTEN in it pins the client).
pub fn registrations_in(sql: &str) -> Option<Vec<ListenStatement>> {
    use pg_query::protobuf::DiscardMode;
    use pg_query::NodeEnum;
    let parsed = pg_query::parse(sql).ok()?;
    let mut statements = Vec::new();
    for statement in &parsed.protobuf.stmts {
        let Some(node) = statement.stmt.as_ref().and_then(|s| s.node.as_ref()) else { continue };
        statements.push(match node {
            NodeEnum::ListenStmt(l) => ListenStatement::Listen(l.conditionname.clone()),
            NodeEnum::UnlistenStmt(u) if u.conditionname.is_empty() => ListenStatement::UnlistenAll,
            NodeEnum::UnlistenStmt(u) => ListenStatement::Unlisten(u.conditionname.clone()),
            NodeEnum::DiscardStmt(d) if d.target() == DiscardMode::DiscardAll => ListenStatement::UnlistenAll,
            _ => continue,
        });
    }
    Some(statements)
}

#[cfg(test)]
mod tests {
    use super::ListenStatement::*;
    use super::Outcome::*;
    use super::*;

    fn unlistens_in(sql: &str) -> Vec<ListenStatement> {
        registrations_in(sql).unwrap_or_default()
    }

    #[test]
    fn registrations_are_read_as_the_server_reads_them() {
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
        assert_eq!(
            registrations_in("BEGIN; LISTEN Jobs; listen \"Q\"\"s\"; unlisten *; Listen x; COMMIT"),
            Some(vec![Listen("jobs".into()), Listen("Q\"s".into()), UnlistenAll, Listen("x".into())])
        );
        assert_eq!(unlistens_in("select 'unlisten a'; /* unlisten b */ select 1 -- unlisten c"), vec![]);
        assert_eq!(unlistens_in("do $$ begin execute 'listen a'; end $$"), vec![], "inside a function: not seen");
        assert_eq!(registrations_in("listen a; selec 1"), None, "the server refuses the whole text");
        assert_eq!(registrations_in(&format!("listen {}", "n".repeat(63))), Some(vec![Listen("n".repeat(63))]));
        assert_eq!(
            registrations_in(&format!("listen {}", "n".repeat(70))),
            Some(vec![Listen("n".repeat(63))]),
            "cut as the server cuts it"
        );
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

    /// Feeds `steps` (a text sent, a tag, an error, a ReadyForQuery status)
    /// and returns what ended.
    fn follow(steps: &[&str]) -> Vec<Outcome> {
        let mut r = Registrations::default();
        for step in steps {
            match *step {
                "error" => r.server_failed(),
                "ROLLBACK" | "COMMIT" | "SELECT 1" | "LISTEN" | "UNLISTEN" | "DISCARD ALL" => {
                    assert!(!r.command_completed(format!("{step}\0").as_bytes()), "{step}: unfollowed");
                }
                "I" | "T" | "E" => r.ready(step.as_bytes()[0], || false),
                "I, more due" => r.ready(b'I', || true),
                "abort" => r.abort(),
                sql => r.sent(registrations_in(sql).expect("parses")),
            }
        }
        r.take_ended().unwrap_or_default()
    }

    #[test]
    fn an_unlisten_applies_once_its_transaction_commits() {
        let all = || vec![Committed(UnlistenAll)];
        assert_eq!(follow(&["CLOSE ALL; UNLISTEN *; RESET ALL;", "UNLISTEN", "I"]), all(), "an implicit transaction");
        assert_eq!(follow(&["begin", "T", "unlisten *", "UNLISTEN", "T"]), vec![], "not committed yet");
        assert_eq!(follow(&["begin", "T", "unlisten *", "UNLISTEN", "T", "commit", "COMMIT", "I"]), all());
        assert_eq!(follow(&["unlisten *; select 1/0", "UNLISTEN", "error", "I"]), vec![], "the implicit transaction failed");
        assert_eq!(follow(&["select 1/0; unlisten *", "error", "I"]), vec![], "it never ran");
        assert_eq!(follow(&["begin", "T", "unlisten *", "UNLISTEN", "T", "rollback", "ROLLBACK", "I"]), vec![]);
        assert_eq!(
            follow(&["begin", "T", "unlisten *", "UNLISTEN", "T", "select 1/0", "error", "E", "commit", "ROLLBACK", "I"]),
            vec![],
            "a failed block's COMMIT"
        );
        assert_eq!(
            follow(&["unlisten a", "UNLISTEN", "I", "unlisten b; select 1/0", "UNLISTEN", "error", "I"]),
            vec![Committed(Unlisten("a".into()))]
        );
        assert_eq!(
            follow(&["begin; unlisten a; commit; select 1/0", "UNLISTEN", "COMMIT", "error", "I"]),
            vec![Committed(Unlisten("a".into()))],
            "committed before the error"
        );
        assert_eq!(follow(&["discard all", "DISCARD ALL", "I"]), all());
        let mut r = Registrations::default();
        r.sent_text("discard all");
        assert!(!r.command_completed(b"DISCARD ALL\0"));
        r.ready(b'I', || false);
        assert_eq!(r.take_ended(), Some(all()));
        assert_eq!(r.take_ended(), None, "taken once");
    }

    #[test]
    fn a_listen_applies_at_commit_and_is_rolled_back_with_its_transaction() {
        let a = || "a".to_owned();
        assert_eq!(follow(&["begin", "T", "listen a", "LISTEN", "T"]), vec![], "not committed yet");
        assert_eq!(follow(&["begin", "T", "listen a", "LISTEN", "T", "commit", "COMMIT", "I"]), vec![Committed(Listen(a()))]);
        assert_eq!(follow(&["listen a; select 1", "LISTEN", "SELECT 1", "I"]), vec![Committed(Listen(a()))], "implicit");
        assert_eq!(follow(&["begin", "T", "listen a", "LISTEN", "T", "rollback", "ROLLBACK", "I"]), vec![RolledBack(a())]);
        assert_eq!(follow(&["listen a; select 1/0", "LISTEN", "error", "I"]), vec![RolledBack(a())], "implicit, failed");
        assert_eq!(follow(&["select 1/0; listen a", "error", "I"]), vec![RolledBack(a())], "it never ran");
        assert_eq!(follow(&["select 1/0; listen a", "error", "I, more due"]), vec![], "it may be a later text's");
        assert_eq!(
            follow(&["begin", "T", "listen a", "LISTEN", "T", "select 1/0", "error", "E", "commit", "ROLLBACK", "I"]),
            vec![RolledBack(a())],
            "a failed block's COMMIT"
        );
        let rescued =
            ["begin", "T", "listen a", "LISTEN", "T", "savepoint s; select 1/0", "error", "E", "rollback to s", "ROLLBACK", "T"];
        assert_eq!(follow(&rescued), vec![], "rescued by a savepoint: still pending");
        assert_eq!(
            follow(&[&rescued[..], &["commit", "COMMIT", "I"]].concat()),
            vec![Committed(Listen(a()))],
            "and committed with the block"
        );
        assert_eq!(
            follow(&["begin; listen a; rollback; listen a", "LISTEN", "ROLLBACK", "LISTEN", "I"]),
            vec![RolledBack(a()), Committed(Listen(a()))],
            "a ROLLBACK concerns only what ran before it"
        );
        assert_eq!(
            follow(&["begin; unlisten *; listen a; commit", "UNLISTEN", "LISTEN", "COMMIT", "I"]),
            vec![Committed(UnlistenAll), Committed(Listen(a()))],
            "in the order sent"
        );
        assert_eq!(follow(&["begin", "T", "listen a", "LISTEN", "T", "abort"]), vec![RolledBack(a())], "the connection lost");
        assert_eq!(follow(&["listen a", "abort"]), vec![RolledBack(a())], "lost before it ran");
    }

    #[test]
    fn the_listens_sent_are_taken_once() {
        let mut r = Registrations::default();
        assert_eq!(r.sent_listens(), None);
        r.sent(registrations_in("listen a; unlisten b; listen c").unwrap());
        assert_eq!(r.sent_listens(), Some(&["a".to_owned(), "c".to_owned()][..]));
        assert_eq!(r.take_sent_listens(), Some(vec!["a".to_owned(), "c".to_owned()]));
        assert_eq!(r.take_sent_listens(), None);
        assert!(!r.command_completed(b"LISTEN\0"), "a");
        assert!(!r.command_completed(b"LISTEN\0"), "c");
        assert!(r.command_completed(b"LISTEN\0"), "none left: a LISTEN run unfollowed");
    }
}
