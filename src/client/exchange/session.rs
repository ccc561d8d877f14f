//! The exchange's hooks of session state: the settings a client changes
//! are followed (`crate::settings`) and the server connection is aligned to
//! them; SQL that leaves state pglane cannot carry pins the client
//! (`super::super::pinning`); the context a client's statements are keyed
//! by is worked out from its settings (`prepare::Context`); DDL seen is told
//! to the registry.

use bytes::BytesMut;

use super::super::pinning::{self, SessionFeature};
use super::{Due, Exchange, Hidden, Request, Statements};
use std::rc::Rc;

use crate::prepare::lexer::{Mark, Marks};
use crate::prepare::{Context, Statement};
use crate::protocol::backend;
use crate::protocol::frontend;
use crate::protocol::names;
use crate::settings::{self, Change, Settings, TextTraits, Value};

/// A command tag of a statement that may change what a prepared statement
/// means: CREATE, ALTER or DROP of anything, IMPORT FOREIGN SCHEMA.
pub(super) fn changes_schema(tag: &[u8]) -> bool {
    [&b"CREATE "[..], b"ALTER ", b"DROP ", b"IMPORT FOREIGN SCHEMA"].iter().any(|verb| tag.starts_with(verb))
}

/// What [`Exchange::watch_text`] found in a statement text.
#[derive(Debug, Default)]
pub(super) struct Watched {
    /// The changes of settings it makes, if it is nothing but a SET, RESET
    /// or `set_config` pglane follows (and was sent outside a transaction
    /// block).
    pub changes: Option<Vec<Change>>,
    /// What its statements reset (see `pinning::Resets`).
    pub resets: pinning::Resets,
    /// It leaves the session alone (worked out with pipelining only).
    pub plain: bool,
    /// The text's marks (see `prepare::lexer::Marks`).
    pub marks: Marks,
    /// It reads the session's sequence state (`lastval`, `currval`).
    pub reads_sequences: bool,
    /// Its LISTENs, UNLISTENs and DISCARD ALLs are followed
    /// (`notify::follow`), not pinned for.
    pub listens_followed: bool,
}

/// The client's contexts for the settings it has now.
#[derive(Debug, Clone, Copy)]
pub(super) struct Contexts {
    /// The `Settings::version` they were worked out at.
    version: u64,
    /// For texts without string literals, and for texts with them.
    plain: Context,
    literals: Context,
}

impl Exchange {
    /// Looks at a statement text the client sends (a simple query's, or a
    /// Parse's) for what it does to session state, before it goes to the
    /// server: it pins the client if it leaves state pglane cannot carry;
    /// until it is answered, the client's statements are not keyed by its
    /// settings if it may change one; output settings it may change are no
    /// longer known on the server connection. Its LISTENs are followed
    /// rather than pinned for ([`Exchange::follows_listens`]).
    pub(super) fn watch_text(&mut self, sql: &str, st: &mut Statements<'_>) -> Watched {
        // One pass over the text tells which of the scans below can find
        // anything in it: most texts get none of them.
        let marks = match self.rewriting.as_deref_mut() {
            Some(auto) => auto.marks.of(sql.as_bytes()),
            None => Marks::of(sql.as_bytes()),
        };
        let text = pinning::MarkedText::new(sql, marks);
        let idle = self.tracker.status() == backend::TransactionStatus::Idle;
        let changes = idle.then(|| follow_changes(sql, marks)).flatten();
        let followed = changes.is_some();
        let carried = |name: &str| followed || settings::is_carried_name(name);
        // A client pinned for what does not hide its texts' meaning (LISTEN,
        // a lock) is still looked at for what does (a temporary object).
        let (feature, resets) = match self.pinned {
            Some(pinned) if pinned.hides_meaning() => (None, pinning::resets(&text)),
            _ => pinning::session_feature_and_resets(&text, carried),
        };
        let mut listens_followed = false;
        let feature = match feature {
            Some(SessionFeature::Listen) if self.follows_listens && self.pinned.is_none() => {
                match crate::notify::follow::registrations_in(sql) {
                    Some(statements) => {
                        self.registrations.sent(statements);
                        listens_followed = true;
                        pinning::session_feature_beside_listen(&text, carried)
                    }
                    None => feature,
                }
            }
            feature => feature,
        };
        // A client that listens: its UNLISTENs and DISCARD ALLs end
        // subscriptions when they commit.
        if !listens_followed && (self.follows_unlistens || !self.hub_channels.is_empty()) && marks.any(&[Mark::Lis, Mark::Dis]) {
            listens_followed = self.registrations.sent_text(sql);
        }
        // A followed SET or set_config is carried, not pinned for; what it
        // makes of search_path (naming pg_temp) still pins.
        self.pin(feature.filter(|f| !followed || *f == SessionFeature::TempObject));
        if resets.touches {
            self.settings_in_flux = true;
        }
        if st.negotiation.is_some() {
            st.server_settings.forget_output_settings_named_in(sql, marks, followed);
        }
        if first_word_is(sql, "create") {
            // CREATE TABLE ... AS answers with a SELECT tag.
            self.ddl_pending = true;
        }
        // What lastval and currval read must be this client's own, which a
        // request sent behind another client's cannot know it is.
        let reads_sequences = marks.any(&[Mark::Lastval, Mark::Currval]);
        self.reads_sequences |= reads_sequences;
        let plain =
            self.pipelining && self.pinned.is_none() && !followed && !reads_sequences && pinning::leaves_session_alone(&text);
        Watched { changes, resets, plain, marks, reads_sequences, listens_followed }
    }

    /// Whether `sql`, a Parse's text just watched, gave no scan anything to
    /// do: it did not pin the client (which is not pinned), may change no
    /// setting, and is not DDL. Such a text is skipped when it comes again
    /// (see [`super::super::quiet`]).
    pub(super) fn is_quiet_text(&self, sql: &str, watched: &Watched) -> bool {
        self.pinned.is_none()
            && !watched.listens_followed
            && watched.changes.is_none()
            && !watched.resets.touches
            && !watched.reads_sequences
            && !settings::may_change_output_settings(sql, watched.marks)
            && !first_word_is(sql, "create")
    }

    /// The context a statement of a text with `text`'s traits is keyed by for this client
    /// now (see `prepare::Context`): that of its settings as pglane knows
    /// them; or, when it does not know what its texts mean (see
    /// [`Exchange::settings_known`]: a request that may change a setting is
    /// unanswered, say), the text names the moment it is parsed, or what it
    /// returns is the session's (a FETCH), a new private one, so that the
    /// statement is the client's own and parsed and described for it by the
    /// server.
    pub(super) fn context_for(&mut self, text: TextTraits, st: &Statements<'_>) -> Context {
        if !self.settings_known() || text.moment || text.session_shaped {
            return st.registry.private_context();
        }
        let version = st.client_settings.version();
        let contexts = match self.contexts {
            Some(c) if c.version == version => c,
            _ => {
                let c = Contexts {
                    version,
                    plain: st.registry.context(&st.client_settings.parse_context(false)),
                    literals: st.registry.context(&st.client_settings.parse_context(true)),
                };
                self.contexts = Some(c);
                c
            }
        };
        if text.literals {
            contexts.literals
        } else {
            contexts.plain
        }
    }

    /// Whether pglane knows what the client's statement texts mean (its
    /// settings exactly, and no temporary object of its own shadows a
    /// name), so that its statements may be shared (see
    /// [`Exchange::context_for`]).
    pub(super) fn settings_known(&self) -> bool {
        !self.pinned.is_some_and(SessionFeature::hides_meaning) && !self.settings_in_flux
    }

    /// The client used `feature` (if any): it keeps its server connection
    /// (as a session-mode client does anyway). A client pinned already keeps
    /// the first feature it used, unless this one hides what its texts mean
    /// and that one did not ([`SessionFeature::hides_meaning`]).
    pub fn pin(&mut self, feature: Option<SessionFeature>) {
        let Some(feature) = feature.filter(|_| !self.passes_through) else { return };
        match self.pinned {
            None => {
                self.pinned = Some(feature);
                tracing::info!("client pinned to its server connection until it disconnects: it used {}", feature.as_str());
            }
            Some(pinned) if !pinned.hides_meaning() && feature.hides_meaning() => self.pinned = Some(feature),
            Some(_) => {}
        }
    }

    /// Makes the server connection's settings the client's, with a simple
    /// query whose replies the client never sees, ahead of its own messages.
    /// But for a pinned client's (`keep_unknown`, see
    /// `Settings::sql_to_apply_over`) at a realignment mid-session: what it
    /// changed unseen on its own connection is left as it is.
    ///
    /// PostgreSQL times each query with the statement_timeout in force as
    /// it starts, and that may be another client's: a cancelled alignment
    /// is rolled back, and the client's request behind it would run under
    /// the other client's settings. Where that timeout could cancel it
    /// ([`settings::timeout_may_cancel`]), the client's messages wait for
    /// the alignment's answer (one round trip), which runs behind a
    /// `SET statement_timeout = 0` of its own and sets the client's timeout
    /// last, and runs again if cancelled all the same. A pinned client's
    /// connection has its own timeout. Returns whether the client's
    /// messages wait.
    pub fn align_settings(
        &mut self,
        client: &Settings,
        server: &mut Settings,
        keep_unknown: bool,
        to_server: &mut BytesMut,
    ) -> bool {
        if client.agrees_with(server) {
            return false;
        }
        let holds = !keep_unknown && settings::timeout_may_cancel(server);
        let sql = if holds {
            // Whatever the lift leaves, the alignment sets the client's.
            let mut lifted = server.clone();
            lifted.set("statement_timeout", Value::Unknown);
            client.sql_to_apply_over(&lifted, false)
        } else {
            client.sql_to_apply_over(server, keep_unknown)
        };
        let Some(sql) = sql else { return false };
        if holds {
            self.send_alignment(Box::new(super::Again { sql, tries_left: super::HIDDEN_TRIES }), to_server);
            self.holding = true;
        } else {
            self.send_hidden(&sql, Hidden::Once, to_server);
        }
        server.take_values_of(client, keep_unknown);
        self.unnamed.left_server();
        holds
    }

    /// An alignment the client's messages wait behind, and the lift of the
    /// connection's statement_timeout ahead of it.
    pub(super) fn send_alignment(&mut self, again: Box<super::Again>, to_server: &mut BytesMut) {
        self.send_hidden("SET statement_timeout = 0", Hidden::LiftTimeout, to_server);
        frontend::query(to_server, &again.sql);
        self.tracker.client_sent(frontend::QUERY);
        self.due.push_back(Due::Server { request: Request::Hidden(Hidden::Alignment(again)), forward: false });
    }

    /// A simple query of pglane's own, its replies unseen by the client.
    fn send_hidden(&mut self, sql: &str, hidden: Hidden, to_server: &mut BytesMut) {
        frontend::query(to_server, sql);
        self.tracker.client_sent(frontend::QUERY);
        self.due.push_back(Due::Server { request: Request::Hidden(hidden), forward: false });
    }

    /// The client is about to get a server connection another client used
    /// since it last had it (`foreign`), before anything of its own is sent
    /// (session mode aside, whose connections are reset between clients).
    /// Its sequence state (what `currval` and `lastval` read, which
    /// `nextval` sets, also unseen in a serial column's default) is that
    /// client's: a client that reads it gets `DISCARD SEQUENCES` first, so
    /// that it reads its own state or PostgreSQL's 55000, never another
    /// client's value. One that has not read it yet gets it ahead of its
    /// first text that does, if nothing that could change the state ran
    /// before it on the connection (see
    /// [`Exchange::forget_foreign_sequences`]). What is left: a client's
    /// first read, after a statement of its own that could have set
    /// sequence state but did not set that sequence's, on a connection
    /// another client used, reads what that client left.
    pub fn sequences_may_be_foreign(&mut self, foreign: bool, to_server: &mut BytesMut) {
        if !foreign || self.passes_through {
            return;
        }
        if self.reads_sequences {
            // Nothing of the client's is on the connection yet: the discard
            // goes first (behind the alignment, if any).
            self.discard_sequences(to_server);
        } else {
            self.sequences_foreign = true;
        }
    }

    /// `DISCARD SEQUENCES` ahead of the client's next message, its reply
    /// unseen by the client, if the connection's sequence state may be
    /// another client's: nothing of the client's that could change it has
    /// run on it in this transaction (only statements such as psycopg's
    /// BEGIN, [`leaves_sequences_alone`]; see
    /// [`Exchange::sequences_may_be_foreign`]). And only where the discard
    /// cannot fail: nothing of the client's in flight (a SET ahead of it may
    /// yet fail and abort the block), the block not failed; a failed discard
    /// would end the session (see [`Exchange::from_server`]), and in a
    /// failed block the client's read fails anyway, as it would direct.
    pub(super) fn forget_foreign_sequences(&mut self, to_server: &mut BytesMut) {
        if std::mem::take(&mut self.sequences_foreign)
            && self.tracker.is_quiet()
            && self.tracker.status() != backend::TransactionStatus::Failed
        {
            self.discard_sequences(to_server);
        }
    }

    /// Sends `DISCARD SEQUENCES`, its reply unseen by the client.
    fn discard_sequences(&mut self, to_server: &mut BytesMut) {
        self.sequences_foreign = false;
        self.send_hidden("DISCARD SEQUENCES", Hidden::Once, to_server);
    }

    /// A ParameterStatus: the server connection's value, and the client's if
    /// it is told. When a query that only resets changed a setting the
    /// client's startup packet gave, the server went back to *its* reset
    /// value, but on PostgreSQL the client's would be its startup value: the
    /// client keeps that, the server is aligned to it before the client's
    /// next message, and the returned (name, value) is what the client must
    /// be told instead.
    pub(super) fn reported(&mut self, body: &[u8], st: &mut Statements<'_>, client_told: bool) -> Option<(String, String)> {
        let Ok((name, value)) = backend::decode_parameter_status(body) else { return None };
        if !settings::is_carried(&name) {
            return None;
        }
        st.server_settings.set(&name, Value::Reported(value.clone()));
        if !client_told {
            return None;
        }
        if self.resetting {
            if let Some(Value::Reported(startup)) = st.client_settings.startup_value(&name) {
                if *startup != value {
                    let startup = startup.clone();
                    st.client_settings.set(&name, Value::Reported(startup.clone()));
                    self.realign = true;
                    return Some((name, startup));
                }
            }
        }
        st.client_settings.set(&name, Value::Reported(value));
        None
    }

    /// A ReadyForQuery: what the client changed in settings, if followed,
    /// is now its own and the server connection's once its transaction is
    /// over (`idle`). A followed change left inside a transaction block
    /// (a SET over the extended protocol after a BEGIN in the same group)
    /// would outlive it unseen: the client is pinned.
    pub(super) fn changes_answered(&mut self, idle: bool, st: &mut Statements<'_>) {
        let changes = std::mem::take(&mut self.pending_changes);
        if changes.is_empty() {
            return;
        }
        if !idle {
            self.pin(Some(SessionFeature::UnfollowedSet));
            return;
        }
        for change in &changes {
            st.client_settings.apply(change);
            st.server_settings.apply(change);
        }
        self.realign = !st.client_settings.same_values(st.server_settings);
    }
}

/// The settings `sql` changes if it is nothing but a SET, RESET or
/// `set_config` pglane follows.
pub(super) fn follow_changes(sql: &str, marks: Marks) -> Option<Vec<Change>> {
    // SET and RESET hold `set`.
    if !marks.has(Mark::Set) {
        return None;
    }
    let word = first_word(sql);
    if word.eq_ignore_ascii_case(b"set") || word.eq_ignore_ascii_case(b"reset") {
        settings::parse_change(sql).map(|c| vec![c])
    } else if word.eq_ignore_ascii_case(b"select") && marks.has(Mark::SetConfig) {
        settings::parse_set_config(sql)
    } else {
        None
    }
}

/// Whether running `sql` cannot change the session's sequence state: one
/// statement of transaction control, SET, SHOW or RESET (which call no
/// function, so no nextval). Worth asking only about a text sent while the
/// state may be another client's (psycopg sends BEGIN on its own first).
pub(super) fn leaves_sequences_alone(sql: &str) -> bool {
    // The first word first: most texts are told by it alone, most of
    // them by its length and first letter.
    let word = first_word(sql);
    let candidates: &[&[u8]] = match (word.len(), word.first().map(u8::to_ascii_lowercase)) {
        (3, Some(b'e' | b's')) => &[b"end", b"set"],
        (4, Some(b's')) => &[b"show"],
        (5, Some(b'b' | b's' | b'a' | b'r')) => &[b"begin", b"start", b"abort", b"reset"],
        (6, Some(b'c')) => &[b"commit"],
        (7, Some(b'r')) => &[b"release"],
        (8, Some(b'r')) => &[b"rollback"],
        (9, Some(b's')) => &[b"savepoint"],
        _ => return false,
    };
    if !candidates.iter().any(|w| word.eq_ignore_ascii_case(w)) {
        return false;
    }
    let body = sql.trim_ascii_end();
    let body = body.strip_suffix(';').unwrap_or(body);
    !body.contains(';')
}

/// The word `sql` begins with, after whitespace: letters, digits and `_`
/// (empty if it begins with anything else).
fn first_word(sql: &str) -> &[u8] {
    let sql = sql.as_bytes().trim_ascii_start();
    &sql[..sql.iter().position(|b| !(b.is_ascii_alphanumeric() || *b == b'_')).unwrap_or(sql.len())]
}

/// The settings running `s` changes, if its text is a SET pglane follows;
/// worked out once per statement.
pub(super) fn statement_changes(s: &Statement) -> Option<Rc<[Change]>> {
    s.changes
        .get_or_init(|| {
            let sql = names::parse_query(&s.key);
            follow_changes(sql, Marks::of(sql.as_bytes())).map(Rc::from)
        })
        .clone()
}

/// Whether `sql` begins (after whitespace) with `word`, in any case.
fn first_word_is(sql: &str, word: &str) -> bool {
    let sql = sql.as_bytes().trim_ascii_start();
    sql.len() >= word.len()
        && sql[..word.len()].eq_ignore_ascii_case(word.as_bytes())
        && !sql.get(word.len()).is_some_and(|b| b.is_ascii_alphanumeric() || *b == b'_')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn follow_changes(sql: &str) -> Option<Vec<Change>> {
        super::follow_changes(sql, Marks::of(sql.as_bytes()))
    }

    #[test]
    fn followed_texts() {
        assert_eq!(
            follow_changes("SET extra_float_digits = 3"),
            Some(vec![Change::Set("extra_float_digits".into(), "3".into())])
        );
        assert_eq!(follow_changes("  reset work_mem;"), Some(vec![Change::Reset("work_mem".into())]));
        assert_eq!(
            follow_changes("select set_config('statement_timeout', '1234', false)"),
            Some(vec![Change::SetPlain("statement_timeout".into(), "1234".into())])
        );
        assert_eq!(follow_changes("select set_config('statement_timeout', '1', true)"), Some(vec![]));
        assert_eq!(follow_changes("selected"), None);
        assert_eq!(follow_changes("select 1"), None);
        assert_eq!(follow_changes("settle"), None);
        assert_eq!(follow_changes("set_config('a.b', 'c', false)"), None);
    }

    #[test]
    fn statements_that_leave_sequences_alone() {
        for sql in
            ["BEGIN", "begin isolation level serializable;", "  SET TimeZone = 'UTC'", "show work_mem", "savepoint a", "COMMIT"]
                .into_iter()
                .chain(["END", "Start transaction", "abort", "RESET ALL", "release a", "ROLLBACK;", "rollback to a", "sHoW all"])
        {
            assert!(leaves_sequences_alone(sql), "{sql}");
        }
        for sql in [
            "select lastval()",
            "begin; select nextval('s')",
            "insert into t default values",
            "settle",
            "",
            "values (1)",
            "ends",
            "resets",
            "commits",
            "shows",
        ] {
            assert!(!leaves_sequences_alone(sql), "{sql}");
        }
    }

    #[test]
    fn ddl_tags() {
        for tag in ["CREATE TABLE", "DROP EXTENSION", "ALTER TYPE", "CREATE DOMAIN", "IMPORT FOREIGN SCHEMA"] {
            assert!(changes_schema(tag.as_bytes()), "{tag}");
        }
        for tag in ["SELECT 1", "INSERT 0 1", "SET", "COMMENT"] {
            assert!(!changes_schema(tag.as_bytes()), "{tag}");
        }
        assert!(first_word_is(" Create table t as select 1", "create"));
        assert!(!first_word_is("created", "create"));
    }
}
