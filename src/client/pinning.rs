//! Which SQL leaves state in a server session that transaction pooling
//! cannot carry to another server connection. Pure: text in, answer out.
//!
//! In transaction mode a client's next transaction may run on another server
//! connection, and the one it leaves goes to another client. pglane follows
//! the settings it can re-apply (see [`super::settings`]); for everything
//! else that outlives a transaction the safe answer is to keep the client on
//! its server connection until it disconnects (it is *pinned*), and to reset
//! that connection before anyone else gets it. This module recognizes that
//! SQL:
//!
//! - `LISTEN` (notifications arrive on the session that listens), unless
//!   the caller follows it (`notify::follow`, in transaction mode:
//!   [`session_feature_beside_listen`]);
//! - session-level advisory locks (`pg_advisory_lock`, `pg_try_advisory_lock`
//!   and their `_shared` forms; the `_xact_` ones end with the transaction);
//! - temporary objects by any spelling: the keyword (`CREATE [LOCAL|GLOBAL]
//!   TEMP[ORARY] ...`, `SELECT ... INTO TEMP ...`, `CREATE OR REPLACE TEMP
//!   VIEW`), or the temporary schema by name, which makes an object
//!   temporary without the keyword (`CREATE TABLE pg_temp.t`, `"pg_temp".t`,
//!   `SELECT ... INTO pg_temp.t`, a `search_path` that names `pg_temp`, so
//!   that a plain `CREATE TABLE t` lands there): any text that names
//!   `pg_temp` anywhere, in a literal or a quoted identifier too, or that
//!   holds a Unicode escape that can spell it (a `U&"..."` identifier, a
//!   `U&'...'` string given to search_path) pins ([`names_temp_schema`]),
//!   even when it is a SET pglane follows;
//! - cursors declared `WITH HOLD`;
//! - SQL-level `PREPARE name AS ...` (protocol-level named statements are
//!   handled by the statement registry instead);
//! - `SET`/`RESET` of session state that pglane does not carry (the caller
//!   says which setting names it carries), incl. `SET ROLE` and
//!   `SET SESSION AUTHORIZATION`; `SET LOCAL`, `SET TRANSACTION` and
//!   `SET CONSTRAINTS` end with the transaction and do not pin;
//! - `set_config(...)`, unless the caller follows the text (a lone
//!   `SELECT set_config('name', 'value', false)`, `crate::settings`), and
//!   an UPDATE of `pg_settings`, whose rule calls it (a quoted identifier
//!   is read as the word it spells, so `"set_config"` is seen too);
//! - a `DO` block that names any of this (its body is not followed);
//! - `RESET ALL`
//!   does not pin either, wherever it appears: it leaves no state behind
//!   (asyncpg's pool sends it, after `CLOSE ALL; UNLISTEN *;`, each time a
//!   connection goes back to its pool; pinning there would hold a server
//!   connection per pooled client). See [`resets`].
//!
//! The scan is over words outside string literals, quoted identifiers and
//! comments, so it is an over-approximation on purpose: a column named
//! `listen` pins a client needlessly, which costs pooling, never correctness.
//! Dollar-quoted bodies are scanned too (a `DO` block can take a lock). What
//! it cannot see: session state changed inside functions the query calls
//! (e.g. a function that runs `set_config(..., false)` or takes a session
//! advisory lock under another name). Those need `pool_mode = "session"`
//! for that user or database.
//!
//! Most texts name none of this, and every simple query is scanned: a text
//! in which none of a few trigger words occurs anywhere ([`TRIGGERS`], found
//! with the text's [`Marks`]) is answered without the word-by-word scan.
//!
//! ## What a PostgreSQL session holds, and what pglane does with each
//!
//! PostgreSQL's own list of a session's state is what `DISCARD ALL` resets
//! (its reference page; `DiscardAll` in src/backend/commands/discard.c,
//! PostgreSQL 15), plus what it cannot reset. Each item, and where pglane
//! decides about it:
//!
//! | state (how PostgreSQL resets it) | made by | pglane |
//! |---|---|---|
//! | open portals, cursors (`CLOSE ALL`) | DECLARE, Bind | end with the transaction, but `WITH HOLD`: pins (here) |
//! | session authorization, role (`SET SESSION AUTHORIZATION DEFAULT`) | SET ROLE / SESSION AUTHORIZATION | pins (here, an unfollowed SET) |
//! | settings (`RESET ALL`) | SET, set_config, startup packet, functions | followed and carried (`crate::settings`), else pins (here); inside functions: unseen (documented remedy) |
//! | custom setting placeholders (nothing removes them) | any SET of `x.y` | not removable: documented (docs/compatibility.md) |
//! | prepared statements (`DEALLOCATE ALL`) | SQL PREPARE, Parse | SQL: pins (here); protocol: the client's names, mapped (`prepare`) |
//! | LISTEN registrations (`UNLISTEN *`) | LISTEN | the notification hub's (`notify`); in other SQL, followed (`notify::follow`) and the connection unlistened before reuse; inside a function: pins (here) |
//! | session advisory locks (`pg_advisory_unlock_all()`) | pg_advisory_lock & co. | pins (here); inside functions: unseen |
//! | cached plans (`DISCARD PLANS`) | any statement | change no result; shared statements are keyed by what changes parsing (`prepare::Context`) |
//! | temporary objects and schema (`DISCARD TEMP`; the schema itself stays) | TEMP, `pg_temp.x`, search_path | pins (here); a backend left with a temporary schema is closed, not reused (`ServerConn::has_temp_schema`) |
//! | sequence state: currval, lastval (`DISCARD SEQUENCES`) | nextval, also in defaults | discarded before a read of it on a connection another client used (`exchange`'s `sequences_may_be_foreign`) |
//! | the open transaction (not DISCARD's: COMMIT/ROLLBACK) | BEGIN | the connection is held until it ends; rolled back if the client leaves |
//! | loaded libraries (nothing unloads them) | LOAD, session_preload_libraries | not followed: a library loaded stays in that backend (its effect on results is the library's) |
//! | replication origin of the session | pg_replication_origin_session_setup | not followed (superuser only) |
//!
//! The differential oracle (tests/oracle.rs) checks this list the way
//! PostgreSQL defines it, by probing each kind of state, rather than by
//! the examples above.

use std::cell::Cell;

use crate::prepare::lexer::{contains_ignore_ascii_case, Mark, Marks};

/// A statement text with what the scans here share of it: its [`Marks`],
/// and whether it is one statement and with which word it begins
/// ([`lone_statement`]), worked out once, when a scan first asks (it was
/// worked out up to three times per text: 2% of pgbench's tpcb-like
/// instructions).
pub struct MarkedText<'a> {
    sql: &'a str,
    marks: Marks,
    lone: Cell<Option<Option<&'a str>>>,
}

impl<'a> MarkedText<'a> {
    /// `sql`, whose marks are `marks`.
    pub fn new(sql: &'a str, marks: Marks) -> MarkedText<'a> {
        MarkedText { sql, marks, lone: Cell::new(None) }
    }

    /// `sql` with its marks worked out here.
    pub fn of(sql: &'a str) -> MarkedText<'a> {
        MarkedText::new(sql, Marks::of(sql.as_bytes()))
    }

    /// See [`lone_statement`].
    fn lone_statement(&self) -> Option<&'a str> {
        if let Some(known) = self.lone.get() {
            return known;
        }
        let lone = lone_statement(self.sql);
        self.lone.set(Some(lone));
        lone
    }
}

/// Session state a statement leaves behind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionFeature {
    Listen,
    AdvisoryLock,
    TempObject,
    HoldCursor,
    SqlPrepare,
    UnfollowedSet,
    SetConfig,
    DoBlock,
}

impl SessionFeature {
    /// Whether what it leaves behind changes what the client's statement
    /// texts mean, unseen: a setting pglane does not know, or a temporary
    /// object whose name shadows others. Then the client's statements can no
    /// longer be shared with anyone's.
    pub fn hides_meaning(self) -> bool {
        matches!(
            self,
            SessionFeature::TempObject | SessionFeature::UnfollowedSet | SessionFeature::SetConfig | SessionFeature::DoBlock
        )
    }

    pub fn as_str(self) -> &'static str {
        match self {
            SessionFeature::Listen => "LISTEN",
            SessionFeature::AdvisoryLock => "a session-level advisory lock",
            SessionFeature::TempObject => "a temporary object",
            SessionFeature::HoldCursor => "a WITH HOLD cursor",
            SessionFeature::SqlPrepare => "SQL PREPARE",
            SessionFeature::UnfollowedSet => "a SET that pglane does not carry between server connections",
            SessionFeature::SetConfig => "a set_config call that pglane does not carry between server connections",
            SessionFeature::DoBlock => "a DO block that may change session state",
        }
    }
}

/// Every answer but the empty one needs a word equal to, or beginning with,
/// one of these (ASCII case ignored): `listen`, `prepare`, `set` (also in
/// `reset` and `set_config`, and a SET or RESET is what names a setting),
/// `advisory_lock` (in both lock functions' names), `temp` (also in
/// `temporary` and `pg_temp`), `hold` and `discard`, or a Unicode escape
/// (`u&`, which may spell any of them). A text in which none of them occurs
/// anywhere, inside literals or not, gets the empty answer from every scan.
/// Each is looked for by its first three letters ([`Marks`]): a text that
/// has one of those is scanned in full, which only costs time.
pub const TRIGGERS: [Mark; 8] =
    [Mark::Lis, Mark::Pre, Mark::Set, Mark::Adv, Mark::Tem, Mark::Hol, Mark::Dis, Mark::UnicodeEscape];

/// The first session feature `sql` uses, if any. `carried(name)`: pglane
/// carries this setting between server connections, so `SET name ...` (or
/// `RESET name`) does not pin; `name` is the word after SET [SESSION] or
/// RESET as written (e.g. `TimeZone`, `time` of SET TIME ZONE, `all`).
pub fn session_feature(sql: &str, carried: impl Fn(&str) -> bool) -> Option<SessionFeature> {
    marked_session_feature(&MarkedText::of(sql), carried)
}

/// [`session_feature`] of a marked text.
fn marked_session_feature(text: &MarkedText<'_>, carried: impl Fn(&str) -> bool) -> Option<SessionFeature> {
    if nothing_to_find(text) {
        return None;
    }
    if names_temp_schema(text.sql) {
        return Some(SessionFeature::TempObject);
    }
    let mut features = FeatureScan::default();
    for item in Words::new(text.sql) {
        features.feed(item, &carried);
        if features.found.is_some() {
            break;
        }
    }
    features.found
}

/// First words of the statements that [`leaves_session_alone`] lets through.
const PLAIN_STATEMENTS: [&str; 7] = ["select", "insert", "update", "delete", "values", "with", "table"];

/// Whether running `sql` outside a transaction block leaves the server
/// session as it found it, as far as the text shows: every statement in it
/// a SELECT (not SELECT INTO), INSERT, UPDATE, DELETE, VALUES, WITH or
/// TABLE, using no session feature and calling no `set_config`. The server
/// may then get another client's request right behind it (server
/// pipelining, `pool::Opening`): nothing this one does changes how that one
/// runs. What the functions it calls do inside is not seen, as for pinning.
pub fn leaves_session_alone(text: &MarkedText<'_>) -> bool {
    let (sql, marks) = (text.sql, text.marks);
    if let Some(first) = text.lone_statement() {
        if !PLAIN_STATEMENTS.iter().any(|k| first.eq_ignore_ascii_case(k)) {
            return false;
        }
        let selects = first.eq_ignore_ascii_case("select") || first.eq_ignore_ascii_case("with");
        if !marks.any(&ANYWHERE) && !(selects && marks.has(Mark::Int)) {
            return true;
        }
    }
    let mut starts = true;
    let mut selects = false;
    let mut any = false;
    for item in Words::new(sql) {
        match item {
            Item::Semicolon => starts = true,
            Item::Word(w) if starts => {
                if !PLAIN_STATEMENTS.iter().any(|k| w.eq_ignore_ascii_case(k)) {
                    return false;
                }
                selects = w.eq_ignore_ascii_case("select") || w.eq_ignore_ascii_case("with");
                starts = false;
                any = true;
            }
            Item::Word(w) if (selects && w.eq_ignore_ascii_case("into")) || w.eq_ignore_ascii_case("set_config") => return false,
            Item::Word(_) => {}
        }
    }
    any && marked_session_feature(text, |_| false).is_none()
}

/// The marks of what a scan here finds wherever it is in a statement:
/// `set_config`, the advisory lock functions, a temporary object (`temp`
/// after `create`, `into` and the like, or `pg_temp` by name, perhaps
/// Unicode-escaped), a WITH HOLD cursor. The rest is
/// found only at a statement's start (LISTEN, DO, PREPARE, SET, RESET,
/// DISCARD), so a lone statement that begins with another word holds none
/// of it.
const ANYWHERE: [Mark; 6] = [Mark::SetConfig, Mark::Adv, Mark::Tem, Mark::Hol, Mark::UnicodeEscape, Mark::PgSe];

/// First words of statements that only read `pg_settings` when they name
/// it (an UPDATE of it sets what it names: the view's rule calls
/// `set_config`; PostgreSQL refuses that UPDATE inside a WITH).
const READS: [&str; 5] = ["select", "show", "table", "values", "with"];

/// Whether `word`, in a statement beginning with `first`, calls
/// `set_config`: the function by name, or `pg_settings` in a statement that
/// may write it.
fn calls_set_config(first: &str, word: &str) -> bool {
    word.eq_ignore_ascii_case("set_config")
        || (word.eq_ignore_ascii_case("pg_settings") && !READS.iter().any(|r| first.eq_ignore_ascii_case(r)))
}

/// Words a statement begins with for a scan here to find something at its
/// start (see [`ANYWHERE`]).
const STARTING: [&str; 6] = ["listen", "do", "prepare", "set", "reset", "discard"];

/// The first word of `sql` if it is one statement that begins with a word:
/// no `;` but a last one, and nothing before the word but whitespace (so
/// that it is the first word [`Words`] sees). None: it takes a scan to tell.
fn lone_statement(sql: &str) -> Option<&str> {
    let text = sql.trim_ascii();
    let body = text.strip_suffix(';').unwrap_or(text);
    if body.as_bytes().contains(&b';') || !body.bytes().next().is_some_and(is_word_byte) {
        return None;
    }
    let end = body.bytes().position(|b| !is_word_byte(b)).unwrap_or(body.len());
    // Word bytes are ASCII or whole UTF-8 sequences: `end` is a char boundary.
    Some(&body[..end])
}

/// Whether no scan here can find anything in `text`, from its marks and,
/// for a lone statement, its first word alone.
fn nothing_to_find(text: &MarkedText<'_>) -> bool {
    if !text.marks.any(&TRIGGERS) {
        return true;
    }
    text.lone_statement()
        .is_some_and(|first| !STARTING.iter().any(|w| first.eq_ignore_ascii_case(w)) && !text.marks.any(&ANYWHERE))
}

/// [`session_feature`] and [`resets`] in one pass over the words: a simple
/// query needs both, and the pass is most of what they cost.
pub fn session_feature_and_resets(text: &MarkedText<'_>, carried: impl Fn(&str) -> bool) -> (Option<SessionFeature>, Resets) {
    if nothing_to_find(text) {
        return (None, Resets::default());
    }
    scan_features_and_resets(text.sql, carried)
}

/// The first session feature of `text` but LISTEN, for a text whose
/// LISTENs are followed (`notify::follow`) and which
/// [`session_feature_and_resets`] found one in.
pub fn session_feature_beside_listen(text: &MarkedText<'_>, carried: impl Fn(&str) -> bool) -> Option<SessionFeature> {
    if names_temp_schema(text.sql) {
        return Some(SessionFeature::TempObject);
    }
    let mut features = FeatureScan { skips_listen: true, ..FeatureScan::default() };
    for item in Words::new(text.sql) {
        features.feed(item, &carried);
        if features.found.is_some() {
            break;
        }
    }
    features.found
}

/// [`session_feature_and_resets`] word by word, whatever the text.
fn scan_features_and_resets(sql: &str, carried: impl Fn(&str) -> bool) -> (Option<SessionFeature>, Resets) {
    let (mut features, mut resets) = (FeatureScan::default(), ResetScan::default());
    for item in Words::new(sql) {
        features.feed(item, &carried);
        resets.feed(item);
    }
    let temp_schema = names_temp_schema(sql).then_some(SessionFeature::TempObject);
    (temp_schema.or(features.found), resets.result())
}

/// Whether `sql` may name the session's temporary schema, which makes what
/// is created in it temporary without the TEMP keyword (PostgreSQL's
/// `RangeVarAdjustRelationPersistence`, and `search_path`'s `pg_temp`,
/// namespace.c): `pg_temp` anywhere, ASCII case ignored (an unquoted name
/// is folded; a quoted one, or a string literal a SET or `set_config`
/// gives `search_path`, spells it as is), `pg_temp_N` included; or a
/// Unicode escape that can spell it with no letter of it showing: a
/// `U&"..."` identifier anywhere, or a `U&'...'` string in a text that
/// names `search_path` (a string is a value, and names a schema only as
/// search_path's). Over-approximates on purpose: a comment or a literal
/// that mentions it also pins, which costs pooling only.
pub fn names_temp_schema(sql: &str) -> bool {
    let sql = sql.as_bytes();
    contains_ignore_ascii_case(sql, b"pg_temp")
        || has_unicode_escape(sql, b'"')
        || (has_unicode_escape(sql, b'\'') && contains_ignore_ascii_case(sql, b"search_path"))
}

/// Whether `sql` holds `U&` (either case) and then `quote`, not glued to a
/// word before it: the start of a Unicode-escaped identifier (`"`) or
/// string (`'`).
fn has_unicode_escape(sql: &[u8], quote: u8) -> bool {
    sql.windows(3)
        .enumerate()
        .any(|(i, w)| w[0].eq_ignore_ascii_case(&b'u') && w[1] == b'&' && w[2] == quote && !(i > 0 && is_word_byte(sql[i - 1])))
}

/// [`session_feature`]'s state over the words seen so far.
#[derive(Default)]
struct FeatureScan<'a> {
    /// The statement's first two words and the word before this one.
    first: &'a str,
    second: &'a str,
    previous: &'a str,
    index: usize,
    found: Option<SessionFeature>,
    /// LISTEN is not looked for (it is followed).
    skips_listen: bool,
}

impl<'a> FeatureScan<'a> {
    fn feed(&mut self, item: Item<'a>, carried: &impl Fn(&str) -> bool) {
        let word = match item {
            Item::Semicolon => {
                (self.first, self.second, self.previous, self.index) = ("", "", "", 0);
                return;
            }
            Item::Word(word) => word,
        };
        match self.index {
            0 => self.first = word,
            1 => self.second = word,
            _ => {}
        }
        if self.found.is_none() {
            self.found = self.feature_at(word, carried);
        }
        self.previous = word;
        self.index += 1;
    }

    /// The session feature `word`, at `self.index` in its statement, shows.
    fn feature_at(&self, word: &str, carried: &impl Fn(&str) -> bool) -> Option<SessionFeature> {
        let is = |w: &str| word.eq_ignore_ascii_case(w);
        if self.index == 0 && !self.skips_listen && is("listen") {
            return Some(SessionFeature::Listen);
        }
        // Its body may do anything below, unseen (a string it EXECUTEs).
        if self.index == 0 && is("do") {
            return Some(SessionFeature::DoBlock);
        }
        if calls_set_config(self.first, word) {
            return Some(SessionFeature::SetConfig);
        }
        // PREPARE name ..., but not PREPARE TRANSACTION (two-phase commit).
        if self.index == 1 && self.first.eq_ignore_ascii_case("prepare") && !is("transaction") {
            return Some(SessionFeature::SqlPrepare);
        }
        if self.names_unfollowed_setting(word, carried) {
            return Some(SessionFeature::UnfollowedSet);
        }
        let starts_with = |prefix: &str| word.len() >= prefix.len() && word[..prefix.len()].eq_ignore_ascii_case(prefix);
        if (starts_with("pg_advisory_lock") || starts_with("pg_try_advisory_lock"))
            && !contains_ignore_ascii_case(word.as_bytes(), b"_xact_")
        {
            return Some(SessionFeature::AdvisoryLock);
        }
        if (is("temp") || is("temporary"))
            && ["create", "global", "local", "into", "replace"].iter().any(|w| self.previous.eq_ignore_ascii_case(w))
        {
            return Some(SessionFeature::TempObject);
        }
        if is("hold") && self.previous.eq_ignore_ascii_case("with") {
            return Some(SessionFeature::HoldCursor);
        }
        None
    }

    /// `word` (at `self.index`) is the setting a SET / SET SESSION / RESET
    /// names, and one pglane does not carry.
    fn names_unfollowed_setting(&self, word: &str, carried: &impl Fn(&str) -> bool) -> bool {
        let is = |w: &str| word.eq_ignore_ascii_case(w);
        let first_is = |w: &str| self.first.eq_ignore_ascii_case(w);
        let names_setting = (self.index == 1 && first_is("reset"))
            || (self.index == 1 && first_is("set") && !is("session"))
            || (self.index == 2 && first_is("set") && self.second.eq_ignore_ascii_case("session"));
        let ends_with_transaction = is("local") || is("transaction") || is("constraints");
        let reset_all = self.index == 1 && first_is("reset") && is("all");
        names_setting && !ends_with_transaction && !reset_all && !carried(word)
    }
}

/// What a simple query's statements reset, found in one pass over its
/// words (see [`resets`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Resets {
    /// One of the statements begins `RESET ALL`. (The caller resets the
    /// client's followed settings once the query succeeds.)
    pub all: bool,
    /// The query goes back to defaults (a statement beginning `RESET` or
    /// `DISCARD`) without setting anything (no statement beginning `SET`, no
    /// `set_config` anywhere): a reported setting that changes while it runs
    /// went back to its reset value. (The caller makes that the client's
    /// startup value, as PostgreSQL would.)
    pub only: bool,
    /// The query may change a setting: a statement beginning `SET`,
    /// `RESET`, `DISCARD` or `DO`, or `set_config` anywhere. (The caller
    /// does not key statements by its settings until it is answered.)
    pub touches: bool,
}

/// What `text` resets: [`Resets`].
pub fn resets(text: &MarkedText<'_>) -> Resets {
    if nothing_to_find(text) {
        return Resets::default();
    }
    let mut resets = ResetScan::default();
    for item in Words::new(text.sql) {
        resets.feed(item);
    }
    resets.result()
}

/// [`resets`]'s state over the words seen so far.
#[derive(Default)]
struct ResetScan<'a> {
    /// The current statement's first word, once seen; `None` before it.
    first: Option<&'a str>,
    words_in_statement: usize,
    all: bool,
    any_reset: bool,
    sets: bool,
    does: bool,
}

impl<'a> ResetScan<'a> {
    fn feed(&mut self, item: Item<'a>) {
        match item {
            Item::Semicolon => {
                self.first = None;
                self.words_in_statement = 0;
            }
            Item::Word(word) => {
                self.words_in_statement += 1;
                self.sets |= calls_set_config(self.first.unwrap_or(word), word);
                match self.first {
                    None => {
                        self.sets |= word.eq_ignore_ascii_case("set");
                        self.any_reset |= word.eq_ignore_ascii_case("reset") || word.eq_ignore_ascii_case("discard");
                        self.does |= word.eq_ignore_ascii_case("do");
                        self.first = Some(word);
                    }
                    Some(f) => {
                        self.all |=
                            self.words_in_statement == 2 && f.eq_ignore_ascii_case("reset") && word.eq_ignore_ascii_case("all");
                    }
                }
            }
        }
    }

    fn result(&self) -> Resets {
        Resets { all: self.all, only: self.any_reset && !self.sets, touches: self.any_reset || self.sets || self.does }
    }
}

#[derive(Clone, Copy)]
enum Item<'a> {
    Word(&'a str),
    Semicolon,
}

/// Words (identifier characters) and semicolons of SQL text, skipping
/// string literals, quoted identifiers and comments.
struct Words<'a> {
    sql: &'a str,
    at: usize,
}

impl<'a> Words<'a> {
    fn new(sql: &'a str) -> Self {
        Words { sql, at: 0 }
    }

    /// Skips to just past the next `close` byte (or the end); returns
    /// where that byte is, if there is one.
    fn skip_past(&mut self, close: u8) -> Option<usize> {
        let bytes = self.sql.as_bytes();
        match bytes[self.at..].iter().position(|&b| b == close) {
            Some(i) => {
                self.at += i + 1;
                Some(self.at - 1)
            }
            None => {
                self.at = bytes.len();
                None
            }
        }
    }
}

fn is_word_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b >= 0x80
}

impl<'a> Iterator for Words<'a> {
    type Item = Item<'a>;

    fn next(&mut self) -> Option<Item<'a>> {
        let bytes = self.sql.as_bytes();
        while self.at < bytes.len() {
            let b = bytes[self.at];
            match b {
                b'"' => {
                    // A quoted identifier names what its unquoted spelling
                    // names when it is all word bytes (`"set_config"`,
                    // `pg_catalog."pg_settings"`): a word, compared ignoring
                    // case as the others are, which can only find more.
                    self.at += 1;
                    let start = self.at;
                    let Some(end) = self.skip_past(b) else { continue };
                    let inner = &self.sql[start..end];
                    // `""` inside escapes a quote: not a plain word.
                    if !inner.is_empty() && inner.bytes().all(is_word_byte) && bytes.get(self.at) != Some(&b'"') {
                        return Some(Item::Word(inner));
                    }
                }
                b'\'' => {
                    // '' inside is two literals back to back: same words.
                    self.at += 1;
                    self.skip_past(b);
                }
                b'-' if bytes.get(self.at + 1) == Some(&b'-') => {
                    self.skip_past(b'\n');
                }
                b'/' if bytes.get(self.at + 1) == Some(&b'*') => {
                    // Nested comments end at the first */ here: at worst more
                    // words are scanned, which only over-approximates.
                    match self.sql[self.at + 2..].find("*/") {
                        Some(i) => self.at += 2 + i + 2,
                        None => self.at = bytes.len(),
                    }
                }
                b';' => {
                    self.at += 1;
                    return Some(Item::Semicolon);
                }
                _ if is_word_byte(b) => {
                    let start = self.at;
                    while self.at < bytes.len() && is_word_byte(bytes[self.at]) {
                        self.at += 1;
                    }
                    // Word bytes are ASCII or whole UTF-8 sequences, so the
                    // slice is on char boundaries.
                    return Some(Item::Word(&self.sql[start..self.at]));
                }
                _ => self.at += 1,
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::SessionFeature::*;
    use super::*;
    use proptest::arbitrary::any;
    use proptest::prelude::{prop, Strategy};

    fn marks(sql: &str) -> Marks {
        Marks::of(sql.as_bytes())
    }

    /// Marks that hold every trigger: the full scan, whatever the text.
    fn scan_all() -> Marks {
        marks("lis pre set adv tem hol dis res ext byt int u&")
    }

    fn alone(sql: &str) -> bool {
        leaves_session_alone(&MarkedText::of(sql))
    }

    fn resets_of(sql: &str) -> Resets {
        resets(&MarkedText::of(sql))
    }

    #[test]
    fn plain_statements_leave_the_session_alone() {
        for sql in [
            "SELECT abalance FROM pgbench_accounts WHERE aid = $1",
            "  /* c */ insert into t values ($1) returning id",
            "update t set x = 1 where id = $1",
            "delete from t",
            "values (1), (2)",
            "with a as (select 1) select * from a",
            "table t",
            "select 1; select 2",
            "select 'set', \"prepare\" from t",
        ] {
            assert!(alone(sql), "{sql}");
        }
    }

    #[test]
    fn anything_else_may_change_the_session() {
        for sql in [
            "",
            "begin",
            "select 1; begin",
            "set x = 1",
            "select set_config('a.b', 'c', false)",
            "select pg_advisory_lock(1)",
            "select * into t2 from t",
            "with a as (select 1) select * into t2 from a",
            "create table t (x int)",
            "listen x",
            "select 1 from t for update; commit",
            "do $$ begin end $$",
        ] {
            assert!(!alone(sql), "{sql}");
        }
    }

    #[test]
    fn an_update_of_pg_settings_or_a_quoted_set_config_sets_what_it_names() {
        // The view's rule calls set_config: the setting changes for the
        // session, as a SET would, so it pins like an unfollowed set_config.
        for sql in [
            "UPDATE pg_settings SET setting = 'x' WHERE name = 'search_path'",
            "update pg_catalog.PG_SETTINGS set setting = '1s' where name = 'statement_timeout'",
            "UPDATE \"pg_settings\" SET setting = '1s' WHERE name = 'statement_timeout'",
            "update pg_catalog.\"pg_settings\" set setting = '1s' where name = 'statement_timeout'",
            "select 1; update pg_settings set setting = '1s' where name = 'statement_timeout'",
            "explain analyze update pg_settings set setting = '1s' where name = 'statement_timeout'",
            "select \"set_config\"('search_path', 'x', false)",
        ] {
            let text = MarkedText::of(sql);
            assert_eq!(session_feature_and_resets(&text, |_| false).0, Some(SetConfig), "{sql}");
            assert!(resets(&text).touches, "{sql}");
            assert!(!alone(sql), "{sql}");
        }
        // Reading it changes nothing.
        for sql in [
            "SELECT setting FROM pg_settings WHERE name = 'work_mem'",
            "with s as (select * from pg_catalog.pg_settings) select count(*) from s",
            "table pg_settings",
        ] {
            assert_eq!(session_feature_and_resets(&MarkedText::of(sql), |_| false).0, None, "{sql}");
            assert!(alone(sql), "{sql}");
        }
    }

    fn pins(sql: &str) -> Option<SessionFeature> {
        session_feature(sql, |name| name.eq_ignore_ascii_case("TimeZone"))
    }

    /// The one-pass form answers as the two functions do, on every text
    /// these tests use and on multi-statement mixes of them.
    #[test]
    fn one_pass_agrees_with_both_scans() {
        let texts = [
            "select 1",
            "LISTEN jobs",
            "set work_mem = '8MB'; select 1",
            "SET SESSION AUTHORIZATION bob",
            "set local work_mem = 1",
            "RESET ALL",
            "SELECT pg_advisory_unlock_all();\nCLOSE ALL;\nUNLISTEN *;\nRESET ALL;",
            "reset timezone; select set_config('a.b', 'c', false)",
            "discard all",
            "select 1; create temp table t(a int); reset work_mem",
            "PREPARE q(int) AS select $1; RESET TimeZone",
            "declare c cursor with hold for select 1",
            "select pg_advisory_xact_lock(1); set timezone = 'UTC'",
            "-- reset all\nselect 'set x'",
        ];
        let carried = |name: &str| name.eq_ignore_ascii_case("TimeZone");
        for sql in texts {
            assert_eq!(
                session_feature_and_resets(&MarkedText::of(sql), carried),
                (session_feature(sql, carried), resets_of(sql)),
                "{sql}"
            );
        }
    }

    #[test]
    fn what_pins() {
        assert_eq!(pins("LISTEN jobs"), Some(Listen));
        assert_eq!(pins("  listen \"Jobs\";"), Some(Listen));
        assert_eq!(pins("select pg_advisory_lock(42)"), Some(AdvisoryLock));
        assert_eq!(pins("SELECT PG_TRY_ADVISORY_LOCK_SHARED(1, 2)"), Some(AdvisoryLock));
        assert_eq!(pins("create temp table t(a int)"), Some(TempObject));
        assert_eq!(pins("CREATE GLOBAL TEMPORARY TABLE t(a int)"), Some(TempObject));
        assert_eq!(pins("create or replace temp view v as select 1"), Some(TempObject));
        assert_eq!(pins("select 1 as a into temp t"), Some(TempObject));
        assert_eq!(pins("declare c cursor with hold for select 1"), Some(HoldCursor));
        assert_eq!(pins("PREPARE q(int) AS select $1"), Some(SqlPrepare));
        assert_eq!(pins("set work_mem = '8MB'"), Some(UnfollowedSet));
        assert_eq!(pins("SET SESSION AUTHORIZATION bob"), Some(UnfollowedSet));
        assert_eq!(pins("set role bob"), Some(UnfollowedSet));
        assert_eq!(pins("reset work_mem"), Some(UnfollowedSet));
        assert_eq!(pins("select 1; set work_mem = '1MB'"), Some(UnfollowedSet));
        assert_eq!(pins("DO $$ begin perform pg_advisory_lock(1); end $$"), Some(DoBlock));
        assert_eq!(pins("DO $$ begin execute 'set search_path = x'; end $$"), Some(DoBlock));
        assert_eq!(pins("select set_config('a.b', x, false) from t"), Some(SetConfig));
    }

    /// An object made in the temporary schema by name is temporary, with or
    /// without the keyword: every spelling of the schema pins (issue 43).
    #[test]
    fn the_temporary_schema_by_any_spelling_pins() {
        for sql in [
            "CREATE TABLE pg_temp.t AS SELECT 'client 1 secret'::text AS v",
            "create table PG_TEMP.t (v text)",
            "create table \"pg_temp\".t (v text)",
            "create view pg_temp.v as select 1",
            "CREATE SEQUENCE pg_temp.s",
            "create type pg_temp.mood as enum ('a')",
            "create domain pg_temp.d as int",
            "create function pg_temp.f() returns int language sql as 'select 1'",
            "select 1 as v into pg_temp.t",
            "SET search_path = pg_temp, public",
            "set search_path to 'pg_temp', public",
            "select set_config('search_path', 'pg_temp,public', false)",
            "create table pg_temp_3.t (v int)",
            "create table U&\"pg\\005ftemp\".t (v int)",
            "create table u&\"\\0070\\0067\\005f\\0074\\0065\\006d\\0070\".t (v int)",
            "select 1; create table pg_temp.t (v int)",
        ] {
            assert_eq!(pins(sql), Some(TempObject), "{sql}");
            assert!(!alone(sql), "{sql}");
        }
        // A SET pglane follows still pins for what it makes of search_path.
        let carried_all = |_: &str| true;
        assert_eq!(session_feature("SET search_path = pg_temp, public", carried_all), Some(TempObject));
        assert_eq!(session_feature("SET search_path = app, public", carried_all), None);
    }

    #[test]
    fn unicode_escapes_are_told_from_an_ampersand() {
        assert!(!names_temp_schema("select U&'d\\0061t'"), "a string, not search_path's: names no schema");
        assert!(names_temp_schema("set search_path = U&'pg\\005ftemp', public"));
        assert!(names_temp_schema("select (u&\"x\")"), "an identifier may be the schema");
        assert!(!names_temp_schema("select flags_mu&1 from t"), "a bitwise and after a name");
        assert!(!names_temp_schema("select menu&'1' from t"), "glued to a word");
        assert!(!names_temp_schema("select u & 1"));
        assert!(!names_temp_schema("select temperature from temp_readings"));
    }

    #[test]
    fn what_does_not_pin() {
        for sql in [
            "SELECT abalance FROM pgbench_accounts WHERE aid = 42",
            "select pg_advisory_xact_lock(42)",
            "select pg_try_advisory_xact_lock_shared(42)",
            "select pg_advisory_unlock_all()",
            "create table temperature(temp int)",
            "select temp from t",
            "select 'listen', 'create temp table x' -- listen\n",
            "select \"listen\" from t /* pg_advisory_lock(1) */",
            "declare c cursor without hold for select 1",
            "set local work_mem = '8MB'",
            "SET TRANSACTION ISOLATION LEVEL SERIALIZABLE",
            "set constraints all deferred",
            "prepare transaction 'tx1'",
            "unlisten *",
            "RESET ALL",
            "SELECT pg_advisory_unlock_all();\nCLOSE ALL;\nUNLISTEN *;\nRESET ALL;",
            "insert into t values (';listen')",
            "",
        ] {
            assert_eq!(pins(sql), None, "{sql}");
        }
        // A SET of a setting pglane carries does not pin.
        assert_eq!(pins("SET TimeZone = 'UTC'"), None);
        assert_eq!(pins("set session timezone to 'UTC'; select 1"), None);
        assert_eq!(pins("set session work_mem to '1MB'"), Some(UnfollowedSet));
    }

    #[test]
    fn reset_all_anywhere_is_seen() {
        assert!(resets_of("RESET ALL").all);
        assert!(resets_of("SELECT pg_advisory_unlock_all();\nCLOSE ALL;\nUNLISTEN *;\nRESET ALL;").all);
        assert!(resets_of("reset /* c */ all").all);
        assert!(!resets_of("select 'reset all'").all);
        assert!(!resets_of("select reset all").all);
        assert!(!resets_of("reset work_mem").all);
        assert!(!resets_of("RESET").all);
    }

    #[test]
    fn queries_that_only_reset() {
        assert!(resets_of("RESET ALL").only);
        assert!(resets_of("reset TimeZone").only);
        assert!(resets_of("DISCARD ALL").only);
        assert!(resets_of("SELECT pg_advisory_unlock_all(); CLOSE ALL; UNLISTEN *; RESET ALL;").only);
        assert!(!resets_of("RESET ALL; SET TimeZone = 'UTC'").only, "a SET decides the value");
        assert!(resets_of("RESET ALL; SET TimeZone = 'UTC'").all, "the RESET ALL is still seen");
        assert!(!resets_of("reset all; select set_config('TimeZone', 'UTC', false)").only);
        assert!(!resets_of("select 'reset all'").only);
        assert!(!resets_of("select 1").only);
        assert!(!resets_of("update t set reset = 1").only, "not a statement's first word");
    }

    #[test]
    fn never_panics_on_odd_text() {
        for sql in ["'", "\"", "/*", "--", "set", "prepare", "é listen", "with", ";;;", "pg_advisory_lock", "temp"] {
            let _ = pins(sql);
        }
        assert_eq!(pins("pg_advisory_lock"), Some(AdvisoryLock));
    }

    /// Texts made of every word the scans act on (in any case, some glued
    /// to others), other words and the separators the scans see: the
    /// trigger-word check never turns an answer the full scan gives into
    /// the empty one.
    fn scanned_words() -> impl Strategy<Value = String> {
        let words = prop::sample::select(vec![
            "listen",
            "prepare",
            "transaction",
            "set",
            "session",
            "reset",
            "all",
            "local",
            "constraints",
            "pg_advisory_lock",
            "pg_try_advisory_lock_shared",
            "pg_advisory_xact_lock",
            "temp",
            "temporary",
            "create",
            "global",
            "into",
            "replace",
            "hold",
            "with",
            "discard",
            "set_config",
            "timezone",
            "work_mem",
            "select",
            "insert",
            "update",
            "delete",
            "values",
            "table",
            "begin",
            "offset",
            "attempt",
            "threshold",
            "x",
            "1",
            "pg_temp",
            "u&",
        ]);
        let gaps = prop::sample::select(vec![" ", ";", "; ", "(", "'", "\"", "--", "\n", "/*", "*/", "$$", "", "_", "."]);
        prop::collection::vec((words, gaps, any::<bool>()), 0..12).prop_map(|items| {
            items
                .into_iter()
                .map(|(word, gap, upper)| format!("{}{gap}", if upper { word.to_ascii_uppercase() } else { word.to_owned() }))
                .collect()
        })
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(4000))]

        #[test]
        fn texts_without_a_trigger_word_are_answered_as_the_full_scan_answers(sql in scanned_words()) {
            let carried = |name: &str| name.eq_ignore_ascii_case("TimeZone");
            let full = scan_features_and_resets(&sql, carried);
            proptest::prop_assert_eq!(session_feature_and_resets(&MarkedText::of(&sql), carried), full, "{:?}", sql);
            proptest::prop_assert_eq!(session_feature(&sql, carried), full.0, "{:?}", sql);
            proptest::prop_assert_eq!(resets_of(&sql), full.1, "{:?}", sql);
        }

        #[test]
        fn lone_plain_statements_are_answered_as_the_full_scan_answers(sql in scanned_words()) {
            proptest::prop_assert_eq!(alone(&sql), leaves_session_alone(&MarkedText::new(&sql, scan_all())), "{:?}", sql);
        }
    }

    #[test]
    fn a_text_without_trigger_words_skips_the_scan_and_one_with_them_does_not() {
        assert!(!marks("SELECT abalance FROM pgbench_accounts WHERE aid = 1").any(&TRIGGERS));
        assert!(marks("select 1 offset 5").any(&TRIGGERS), "offset holds set: scanned, and found quiet");
        assert_eq!(pins("select 1 offset 5"), None);
        assert!(marks("select 'x' /* LISTEN */").any(&TRIGGERS));
        assert_eq!(lone_statement("SELECT abalance FROM pgbench_accounts WHERE aid = 1; "), Some("SELECT"));
        assert_eq!(lone_statement("begin;"), Some("begin"));
        assert_eq!(lone_statement("select 1; select 2"), None, "two statements: scanned");
        assert_eq!(lone_statement("(select 1)"), None);
        let update = "UPDATE pgbench_tellers SET tbalance = tbalance + -1 WHERE tid = 3;";
        assert!(marks(update).any(&TRIGGERS) && nothing_to_find(&MarkedText::of(update)));
        assert!(alone(update));
        assert!(!nothing_to_find(&MarkedText::of("set x = 1")));
        let computed = "update t set x = set_config('a', 'b', false)";
        assert!(!nothing_to_find(&MarkedText::of(computed)));
    }
}
