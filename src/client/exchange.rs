//! What passes between one client and the server connection it holds, message
//! by message: which replies the server owes, which of them the client must
//! not see, and which pglane answers itself. Pure: bytes in, bytes out.
//!
//! Named prepared statements are why this exists. Clients name statements
//! (`S_1`); servers know them by pglane's names (`pglane_<shard>_<id>`), shared
//! by every client of the shard that prepared the same text. So:
//!
//! - a client's Parse of a statement the shard already validated is answered
//!   with ParseComplete right here, and a new one is forwarded under the
//!   shard's name;
//! - Bind and Describe of a named statement are renamed, and preceded by a
//!   Parse (whose ParseComplete the client never sees) when this server
//!   connection has not prepared it yet;
//! - Describe of a statement the shard has described before is answered from
//!   the cached ParameterDescription and RowDescription;
//! - Close of a statement only drops the client's name, answered here;
//! - replies are matched to requests in order, so the injected ones can be
//!   dropped and pglane's own answers slotted in where the client expects them;
//! - after an ErrorResponse the server skips everything up to Sync, and the
//!   bookkeeping of what it skipped is undone (a failed Parse prepared nothing).
//!
//! Unnamed statements and portals pass through untouched, as does every byte
//! of a message that is not renamed, unless auto-prepare is on:
//!
//! - a simple query whose shape the pool validated (`prepare::auto`) runs as
//!   that shape's named statement: Parse (only if this server connection
//!   lacks it), Bind with the literals as text parameters, Describe portal,
//!   Execute, Sync. The client sees a simple query's reply: ParseComplete
//!   and BindComplete are dropped, NoData too, and an error's cursor
//!   position is mapped back to the client's text. Only at a Sync boundary
//!   and outside a failed transaction; other queries pass through, and a
//!   new shape is queued for validation on a side connection (never
//!   speculatively here: a failed Parse would abort the client's transaction);
//! - the unnamed statement (Parse "") is the registry's named statement for
//!   its text and parameter types, so a client that parses the same text
//!   again and again (pgjdbc with prepareThreshold=0) has it prepared once
//!   per server connection;
//! - DDL (a CREATE, ALTER or DROP command tag, again when its transaction
//!   ends) and a stale plan make every shape validate again and every
//!   statement prepare afresh. A rewritten query whose Bind finds its plan
//!   stale outside a transaction block ran nothing: its error is dropped and
//!   the plain query is sent instead ([`Exchange::take_for_server`]).
//!
//! A client that mentions search_path in a query, or sent one in its
//! startup packet, gets no auto-prepare from then on: its names may resolve
//! differently from the shapes validated under the default search_path.
//!
//! Binary format negotiation (`negotiate`, when on) plans a portal: its Bind
//! asks for binary, its DataRows are transcoded back and its portal
//! RowDescription shows the client's formats.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::rc::Rc;
use std::time::Instant;

use bytes::{Bytes, BytesMut};

pub use super::negotiate::Negotiation;
use super::negotiate::{self, NegotiateError, Negotiator, Plan};
use super::pinning::{self, SessionFeature};
use super::quiet::QuietTexts;
use super::tracker::Tracker;
use crate::prepare::auto::{Job, Lookup, PassThrough, Spelling};
use crate::prepare::lexer::{self, LexOptions, Lexed};
use crate::prepare::{ClientStatements, Registry, ServerStatements, Statement};
use crate::protocol::backend::{self, ErrorFields};
use crate::protocol::frame::HEADER_LEN;
use crate::protocol::frontend::{self, Target};
use crate::protocol::names;
use crate::server::ServerSession;
use crate::settings::{self, Change, Settings, Value};

/// The statement and settings state the exchange reads and changes.
pub struct Statements<'a> {
    pub registry: &'a Registry,
    pub client: &'a mut ClientStatements,
    pub server: &'a mut ServerStatements,
    pub client_settings: &'a mut Settings,
    pub server_settings: &'a mut Settings,
    /// `None` when binary_negotiation is off.
    pub negotiation: Option<Negotiation<'a>>,
}

/// Where a [`Statements`] comes from, for as long as a client talks to one
/// server connection: the client's own state, and the connection's session,
/// which is borrowed only while a batch of messages is translated (another
/// client may translate for the same connection in between; see
/// `pool::Opening`).
pub struct Sources<'a> {
    pub registry: &'a Registry,
    pub client: &'a mut ClientStatements,
    pub client_settings: &'a mut Settings,
    pub server: &'a Rc<RefCell<ServerSession>>,
    /// `None` when binary_negotiation is off.
    pub negotiation: Option<Negotiation<'a>>,
}

impl Sources<'_> {
    /// The statements and settings, with the server's from `session`
    /// (borrowed from [`Sources::server`] by the caller).
    pub fn statements<'b>(&'b mut self, session: &'b mut ServerSession) -> Statements<'b> {
        Statements {
            registry: self.registry,
            client: &mut *self.client,
            server: &mut session.statements,
            client_settings: &mut *self.client_settings,
            server_settings: &mut session.settings,
            negotiation: self.negotiation,
        }
    }
}

/// One request whose answer is still due, in the order the client expects answers.
#[derive(Debug)]
enum Due {
    /// The server will answer; `forward` says whether the client sees it.
    Server { request: Request, forward: bool },
    /// pglane answers, when every earlier answer has gone out.
    Local(Local),
}

#[derive(Debug)]
enum Request {
    /// `undo` is what to take back if the server skips or refuses it.
    /// `plain`: of the unnamed statement, passed through, with a text that
    /// [`pinning::leaves_session_alone`] (worked out with server pipelining
    /// only; see [`Exchange::may_be_followed`]).
    Parse {
        undo: Option<Prepared>,
        plain: bool,
    },
    /// `plain`: of the unnamed statement passed through, whose text was
    /// plain (as for Parse).
    Bind {
        statement: Option<Rc<Statement>>,
        plain: bool,
    },
    /// `cache` is the statement whose description to remember from the
    /// answer; `portal` the plan of a negotiated portal described.
    Describe {
        cache: Option<Rc<Statement>>,
        portal: Option<Rc<Plan>>,
    },
    /// Describe of a rewritten simple query's portal: its RowDescription is
    /// the client's (in text, when `plan` negotiated it), its NoData is not.
    QueryDescribe {
        plan: Option<Rc<Plan>>,
    },
    /// `evicted` names a statement pglane closed to make room.
    Close {
        evicted: Option<Rc<str>>,
    },
    /// pglane's Describe of a statement it just prepared on this server
    /// connection for a client's Bind, while clients hold its cached
    /// description `expected`: the result type must be the same.
    CheckResult {
        statement: Rc<Statement>,
        expected: Bytes,
    },
    /// An Execute of no portal, sent to make the server fail (and skip to
    /// Sync) where a changed result type fails on a direct connection; its
    /// error reaches the client as 0A000.
    StaleResult,
    /// `plan`: the portal was negotiated, its DataRows are transcoded.
    /// `rows_of`: the statement whose row record its rows update.
    Execute {
        plan: Option<Rc<Plan>>,
        rows_of: Option<Rc<Statement>>,
    },
    /// `rewritten`: the Sync ending a rewritten simple query.
    Sync {
        rewritten: bool,
    },
    /// `plain`: passed through, and its text leaves the session alone (as
    /// for Parse).
    Query {
        plain: bool,
    },
    /// An empty query in place of the client's `DEALLOCATE name`: its
    /// EmptyQueryResponse becomes the client's CommandComplete. `execute`:
    /// the Execute of a portal of it, else a simple query.
    Deallocate {
        execute: bool,
    },
    FunctionCall,
}

impl Due {
    /// The server answers it with a ReadyForQuery (a Sync, or a request of
    /// the simple protocol), which ends what the server skips after an error.
    fn ends_request(&self) -> bool {
        matches!(
            self,
            Due::Server {
                request: Request::Sync { .. }
                    | Request::Query { .. }
                    | Request::Deallocate { execute: false }
                    | Request::FunctionCall,
                ..
            }
        )
    }
}

#[derive(Debug)]
struct Prepared {
    statement: Rc<Statement>,
    /// The client's name for it, if this Parse was the client's own.
    client_name: Option<String>,
}

#[derive(Debug)]
enum Local {
    ParseComplete { client_name: String, statement: u64 },
    CloseComplete { restore: Option<(String, Rc<Statement>)> },
    Description(Bytes),
    Error(ErrorFields),
}

#[derive(Default)]
pub struct Exchange {
    pub tracker: Tracker,
    due: VecDeque<Due>,
    /// pglane raised an error itself: drop client messages until Sync, as
    /// PostgreSQL would.
    skip_to_sync: bool,
    /// The ParameterDescription of a statement Describe being cached.
    describing: BytesMut,
    /// A followed SET/RESET the client sent, recorded once it succeeds
    /// outside a transaction block.
    pending_change: Option<Change>,
    /// This client Parsed the unnamed statement on the server connection it
    /// holds (what another client left there is not its to use).
    unnamed_parsed: bool,
    /// The text of the unnamed statement it Parsed last, passed through,
    /// leaves the session alone (see [`Request::Parse`]).
    unnamed_plain: bool,
    /// The server's unnamed statement is an empty query standing for the
    /// client's `DEALLOCATE name`, and this portal (if any) was bound from it.
    deallocate_unnamed: bool,
    deallocate_portal: Option<String>,
    /// The client's messages wait here while a [`Request::CheckResult`] is
    /// unanswered (`holding`); `hold_from` is where they start in this
    /// call's `to_server`.
    held: BytesMut,
    holding: bool,
    hold_from: Option<usize>,
    /// The client used session state that cannot follow it to another
    /// server connection: it keeps this one until it leaves (see [`pinning`]).
    pub pinned: Option<SessionFeature>,
    /// Auto-prepare's state for this client; None when it is off.
    auto: Option<AutoPrepare>,
    /// Texts this client sent that no scan found anything in.
    quiet: QuietTexts,
    /// The registry statement this client's unnamed statement is (auto-prepare).
    unnamed: Option<Rc<Statement>>,
    /// Messages for the server that a server message caused (a rewritten
    /// query run again as it was); see [`Exchange::take_for_server`].
    for_server: BytesMut,
    /// Binary format negotiation of this client's portals.
    negotiator: Negotiator,
    /// A negotiated DataRow could not be transcoded: the relay must end.
    failure: Option<NegotiateError>,
    /// A followed change left the server connection's settings unlike the
    /// client's (a RESET of a startup value goes back to the server's
    /// default there): align them before the client's next message.
    realign: bool,
    /// Another client's request went to the server behind this client's
    /// (see [`Exchange::may_be_followed`]): nothing of this one's may be
    /// sent any more, a stale plan's rerun included.
    pub followed: bool,
    /// Server pipelining may apply to this client: what passes through is
    /// scanned for whether it leaves the session alone (see
    /// [`Exchange::may_be_followed`]). Without it nothing is scanned for that.
    pipelining: bool,
    /// When a request of this client's last ran longer than
    /// `pool::opening::SLOW` with another behind it: its passed-through
    /// requests (which have no registry statement to carry the mark) are not
    /// followed for a while after.
    slow_at: Option<std::time::Instant>,
    /// The client's simple query being answered only resets settings
    /// (`pinning::Resets::only`): a reported setting it changes goes back to
    /// the client's startup value. Cleared when that query's ReadyForQuery
    /// comes.
    resetting: bool,
}

/// The room kept in an exchange's queue of what is due from one transaction
/// to the next (a transaction's own requests fit several times over).
const DUE_KEPT: usize = 64;

/// One simple query in this many is timed for the rewrite-time stats (a
/// client's first one included).
const TIMING_SAMPLE: u32 = 16;

/// A rewritten simple query the server has not finished.
#[derive(Debug)]
struct Running {
    sql: String,
    options: LexOptions,
    /// Its statement was prepared from this other spelling (error
    /// positions point into it).
    spelling: Option<Rc<Spelling>>,
    /// It started outside a transaction block: if its Bind finds the plan
    /// stale (DDL pglane did not see), nothing has run and the client has
    /// seen nothing, so it can run again as the plain query.
    may_rerun: bool,
    /// Its Bind found the plan stale: the ErrorResponse, held back. At its
    /// ReadyForQuery, if nothing else of the client's is in flight, both are
    /// dropped and the plain query is sent instead; else the error goes out.
    stale: Option<Vec<u8>>,
}

/// One client's auto-prepare state, kept from one transaction to the next.
#[derive(Debug)]
struct AutoPrepare {
    /// Executions of a new shape before it is validated.
    after: u32,
    lexed: Lexed,
    /// The rewritten text of the query being looked up, and how it was lexed.
    rewritten: String,
    options: LexOptions,
    /// The query's statement was prepared from this other spelling.
    spelling: Option<Rc<Spelling>>,
    /// The rewritten queries still running, oldest first (to map error
    /// positions back, or run again), and spare buffers for the next ones.
    running: VecDeque<Running>,
    spare: Vec<String>,
    /// Simple queries looked at; every [`TIMING_SAMPLE`]th is timed.
    looked_at: u32,
    /// The client mentioned search_path: no more auto-prepare for it.
    off: bool,
    /// DDL ran since the last ReadyForQuery 'I'.
    ddl_pending: bool,
}

impl AutoPrepare {
    fn new(after: u32) -> AutoPrepare {
        AutoPrepare {
            after,
            lexed: Lexed::new(),
            rewritten: String::new(),
            options: LexOptions::default(),
            spelling: None,
            running: VecDeque::new(),
            spare: Vec::new(),
            looked_at: 0,
            off: false,
            ddl_pending: false,
        }
    }

    /// The validated statement to run the simple query `sql` as, or why it
    /// passes through. A miss queues the shape for validation (per the policy).
    fn statement_for(
        &mut self,
        sql: &str,
        ready: Ready,
        settings: &Settings,
        registry: &Registry,
    ) -> Result<Rc<Statement>, PassThrough> {
        if self.notice_search_path(sql) {
            return Err(PassThrough::SearchPath);
        }
        match ready {
            Ready::Yes => {}
            Ready::NotSynced => return Err(PassThrough::NotSynced),
            Ready::Failed => return Err(PassThrough::FailedTransaction),
        }
        let options = lex_options(settings)?;
        self.options = options;
        self.lexed.lex(sql, options).map_err(PassThrough::Lexer)?;
        self.rewritten.clear();
        self.lexed.write_rewritten(sql, &mut self.rewritten);
        let (hash, types, rewritten) = (self.lexed.shape_hash(), self.lexed.param_types(), &self.rewritten);
        let mut lookup = registry.shapes.lookup(hash, rewritten, types, Instant::now);
        if matches!(lookup, Lookup::Miss) {
            let same = |first: &Spelling| lexer::same_statement(&first.sql, first.options, sql, options);
            if let Some(respelled) = registry.shapes.respelled(hash, rewritten, types, same) {
                registry.count(|c| c.respellings += 1);
                lookup = respelled;
            }
        }
        match lookup {
            Lookup::Rewrite(statement, spelling) => {
                self.spelling = spelling;
                Ok(statement)
            }
            Lookup::PassThrough(why) => Err(why),
            Lookup::Miss => {
                let job = |epoch| Job {
                    hash,
                    sql: rewritten.as_str().into(),
                    param_types: types.into(),
                    original: sql.into(),
                    options,
                    epoch,
                };
                Err(registry.shapes.note(job, hash, rewritten, types, self.after))
            }
        }
    }

    /// Turns auto-prepare off for good if `sql` may change search_path.
    /// Returns whether it is off.
    fn notice_search_path(&mut self, sql: &str) -> bool {
        self.off = self.off || mentions_search_path(sql);
        self.off
    }

    /// A rewritten query was sent: keep its text until its ReadyForQuery.
    fn running(&mut self, sql: &str, may_rerun: bool) {
        let mut text = self.spare.pop().unwrap_or_default();
        text.clear();
        text.push_str(sql);
        let spelling = self.spelling.take();
        self.running.push_back(Running { sql: text, options: self.options, spelling, may_rerun, stale: None });
    }

    /// The oldest rewritten query got its ReadyForQuery.
    fn finished(&mut self) {
        if let Some(running) = self.running.pop_front() {
            self.spare.push(running.sql);
        }
    }

    /// Writes the server's ErrorResponse `body` for the oldest running
    /// rewritten query as the client's simple query would have got it (see
    /// [`original_error_fields`]), or unchanged if nothing in it points at
    /// the rewritten text.
    fn write_error(&mut self, body: &[u8], to_client: &mut BytesMut) {
        let mapped = self.running.front().and_then(|Running { sql, options, spelling, .. }| {
            let fields = backend::error_field_list(body).ok()?;
            self.lexed.lex(sql, *options).ok()?;
            let position = |p| match spelling {
                None => Some(self.lexed.original_position(sql, p)),
                Some(first) => lexer::respelled_position(&first.sql, first.options, sql, *options, p),
            };
            original_error_fields(&fields, &self.lexed, sql, position)
        });
        match mapped {
            Some(mapped) => {
                let mapped: Vec<(u8, &[u8])> = mapped.iter().map(|(code, value)| (*code, value.as_slice())).collect();
                backend::put_error_field_list(to_client, backend::ERROR_RESPONSE, &mapped);
            }
            None => crate::protocol::put_message(to_client, backend::ERROR_RESPONSE, |b| b.extend_from_slice(body)),
        }
    }
}

/// The fields of an error a rewritten query got, as the original simple
/// query gets them: a cursor position (`P`) in the rewritten text is mapped
/// back to the client's text, and a parameter's input error, which the
/// server reports with the context `unnamed portal parameter $n = '...'`
/// and no position, gets the position of the literal that became `$n`
/// instead, as the original's error has. None when nothing changes.
/// `position` maps a position in the statement's text to `sql`.
fn original_error_fields(
    fields: &[(u8, &[u8])],
    lexed: &Lexed,
    sql: &str,
    position: impl Fn(usize) -> Option<usize>,
) -> Option<Vec<(u8, Vec<u8>)>> {
    let mut changed = false;
    let mapped = fields
        .iter()
        .map(|&(code, value)| {
            let position = match code {
                b'P' => std::str::from_utf8(value).ok().and_then(|p| p.parse().ok()).and_then(&position),
                b'W' => bound_parameter(value)
                    .and_then(|n| lexed.slots().get(n.checked_sub(1)?))
                    .and_then(|slot| sql.get(..slot.start as usize))
                    .map(|before| before.chars().count() + 1),
                _ => None,
            };
            match position {
                Some(p) => {
                    changed = true;
                    (b'P', p.to_string().into_bytes())
                }
                None => (code, value.to_vec()),
            }
        })
        .collect();
    changed.then_some(mapped)
}

/// See [`pinning::leaves_session_alone`]; worked out once per statement.
fn leaves_session_alone(s: &Statement) -> bool {
    *s.leaves_session_alone.get_or_init(|| {
        let text = s.key.split(|&b| b == 0).next().unwrap_or_default();
        std::str::from_utf8(text).is_ok_and(pinning::leaves_session_alone)
    })
}

/// "cached plan must not change result type": SQLSTATE 0A000 raised by the
/// plan cache's revalidation (pgjdbc's test, `willHealViaReparse`).
fn is_stale_plan(body: &[u8]) -> bool {
    let Ok(fields) = backend::error_field_list(body) else { return false };
    let field = |code| fields.iter().find(|(c, _)| *c == code).map(|(_, v)| *v);
    field(b'C') == Some(b"0A000") && matches!(field(b'R'), Some(b"RevalidateCachedQuery" | b"RevalidateCachedPlan"))
}

/// `n` if an error's context is exactly PostgreSQL's line for an input error
/// of parameter `$n` of an unnamed portal.
fn bound_parameter(context: &[u8]) -> Option<usize> {
    let rest = context.strip_prefix(b"unnamed portal parameter $")?;
    let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
    if digits == 0 || !rest[digits..].starts_with(b" = ") || rest.contains(&b'\n') {
        return None;
    }
    std::str::from_utf8(&rest[..digits]).ok()?.parse().ok()
}

/// Whether a simple query may run as a prepared statement where the client's
/// stream is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ready {
    Yes,
    /// The client's extended-protocol messages are not yet Synced.
    NotSynced,
    /// In a failed transaction block.
    Failed,
}

/// How this client's queries are lexed, or why they must not be: a
/// client encoding in which a multibyte character can hide a quote or
/// backslash, or a search_path of its own.
fn lex_options(settings: &Settings) -> Result<LexOptions, PassThrough> {
    const UNSAFE_ENCODINGS: [&str; 7] = ["SJIS", "SHIFT_JIS_2004", "BIG5", "GBK", "UHC", "GB18030", "JOHAB"];
    let value = |name| match settings.get(name) {
        Some(Value::Reported(v) | Value::Sql(v) | Value::Startup(v)) => Some(v.as_str()),
        Some(Value::Unknown) | None => None,
    };
    if settings.get("search_path").is_some() {
        return Err(PassThrough::SearchPath);
    }
    if value("client_encoding").is_some_and(|e| UNSAFE_ENCODINGS.iter().any(|u| u.eq_ignore_ascii_case(e.trim_matches('\'')))) {
        return Err(PassThrough::Encoding);
    }
    let off = value("standard_conforming_strings").is_some_and(|v| v.trim_matches('\'').eq_ignore_ascii_case("off"));
    Ok(LexOptions { standard_conforming_strings: !off })
}

/// Whether `sql` names search_path anywhere (SET, set_config, a function).
fn mentions_search_path(sql: &str) -> bool {
    crate::prepare::lexer::contains_ignore_ascii_case(sql.as_bytes(), b"search_path")
}

/// A command tag of a statement that may change what a prepared statement
/// means: CREATE, ALTER or DROP of anything.
/// Does a statement Describe's answer (`tag`, `body`: RowDescription or
/// NoData) show the result columns of `expected` (a cached
/// ParameterDescription followed by a RowDescription or NoData, whole):
/// same names, types and type modifiers, as PostgreSQL compares a cached
/// plan's result? Undecodable answers count as the same.
fn same_result(expected: &[u8], tag: u8, body: &[u8]) -> bool {
    let Some(len) = expected.get(1..HEADER_LEN).and_then(|b| <[u8; 4]>::try_from(b).ok()) else { return true };
    let Ok(len) = usize::try_from(i32::from_be_bytes(len)) else { return true };
    let Some(old) = expected.get(1 + len..) else { return true };
    let (Some(&old_tag), Some(old_body)) = (old.first(), old.get(HEADER_LEN..)) else { return true };
    if old_tag != tag {
        return false;
    }
    if tag != backend::ROW_DESCRIPTION {
        return true;
    }
    match (backend::decode_row_description(old_body), backend::decode_row_description(body)) {
        (Ok(old), Ok(new)) => {
            old.len() == new.len()
                && old
                    .iter()
                    .zip(&new)
                    .all(|(a, b)| a.name == b.name && a.type_oid == b.type_oid && a.type_modifier == b.type_modifier)
        }
        _ => true,
    }
}

/// PostgreSQL's error for a prepared statement whose result type changed,
/// with its routine: asyncpg and pgjdbc prepare the statement again when
/// they see `RevalidateCachedQuery`.
fn stale_result_error(to_client: &mut BytesMut) {
    use bytes::BufMut;
    let mut body = Vec::with_capacity(96);
    for (field, value) in [
        (b'S', "ERROR"),
        (b'V', "ERROR"),
        (b'C', "0A000"),
        (b'M', "cached plan must not change result type"),
        (b'F', "plancache.c"),
        (b'R', "RevalidateCachedQuery"),
    ] {
        body.push(field);
        body.extend_from_slice(value.as_bytes());
        body.push(0);
    }
    body.push(0);
    to_client.put_u8(backend::ERROR_RESPONSE);
    to_client.put_i32(body.len() as i32 + 4);
    to_client.extend_from_slice(&body);
}

fn changes_schema(tag: &[u8]) -> bool {
    [&b"CREATE "[..], b"ALTER ", b"DROP "].iter().any(|verb| tag.starts_with(verb))
}

/// A followed SET/RESET in a simple query sent outside a transaction block.
fn follow_change(body: &[u8], status: backend::TransactionStatus) -> Option<Change> {
    let starts_like_set =
        body.len() > 4 && (body[..3].eq_ignore_ascii_case(b"set") || body[..5.min(body.len())].eq_ignore_ascii_case(b"reset"));
    if !starts_like_set || status != backend::TransactionStatus::Idle {
        return None;
    }
    settings::parse_change(frontend::decode_query(body).ok()?)
}

/// Client messages pglane must see whole; CopyData streams through.
pub fn client_needs_whole(tag: u8) -> bool {
    tag != frontend::COPY_DATA
}

/// Server messages pglane must see whole; DataRow and CopyData stream through.
pub fn server_needs_whole(tag: u8) -> bool {
    tag != backend::DATA_ROW && tag != frontend::COPY_DATA
}

impl Exchange {
    /// An exchange for a new client; `auto_prepare` is the policy (executions
    /// of a new shape before it is validated), None to leave queries alone.
    pub fn new(auto_prepare: Option<u32>) -> Exchange {
        Exchange { auto: auto_prepare.map(AutoPrepare::new), ..Exchange::default() }
    }

    /// Server pipelining may apply to this client (see [`Exchange::may_be_followed`]).
    pub fn with_pipelining(self) -> Exchange {
        Exchange { pipelining: true, ..self }
    }

    pub fn pipelining(&self) -> bool {
        self.pipelining
    }

    /// A request of this client's ran longer than `pool::opening::SLOW` with
    /// another client's behind it.
    pub fn ran_slowly(&mut self) {
        self.slow_at = Some(crate::rt::now());
    }

    /// The client's transaction is over and its server connection goes back:
    /// what was about that connection is forgotten, the client's own state
    /// (auto-prepare, its unnamed statement) is kept.
    ///
    /// In place, every field named (a new one must say what a reset does to
    /// it). The queue of what is due keeps its room, as every transaction
    /// needs one, unless a long pipeline made it large; the rarely used
    /// buffers are let go.
    pub fn reset(&mut self) {
        let Exchange {
            tracker,
            due,
            skip_to_sync,
            describing,
            pending_change,
            unnamed_parsed,
            unnamed_plain,
            deallocate_unnamed,
            deallocate_portal,
            held,
            holding,
            hold_from,
            pinned,
            auto,
            quiet: _,
            unnamed: _,
            for_server,
            negotiator,
            failure,
            realign,
            resetting,
            followed,
            pipelining: _,
            slow_at: _,
        } = self;
        *tracker = Tracker::default();
        if due.capacity() > DUE_KEPT {
            *due = VecDeque::new();
        }
        due.clear();
        *skip_to_sync = false;
        *describing = BytesMut::new();
        *pending_change = None;
        *unnamed_parsed = false;
        *unnamed_plain = false;
        *deallocate_unnamed = false;
        *deallocate_portal = None;
        *held = BytesMut::new();
        *holding = false;
        *hold_from = None;
        *pinned = None;
        if let Some(a) = auto.as_mut() {
            while !a.running.is_empty() {
                a.finished();
            }
            a.ddl_pending = false;
        }
        *for_server = BytesMut::new();
        negotiator.clear();
        *failure = None;
        *realign = false;
        *resetting = false;
        *followed = false;
    }

    /// No auto-prepare for this client (it has a search_path of its own).
    pub fn no_auto_prepare(&mut self) {
        if let Some(auto) = self.auto.as_mut() {
            auto.off = true;
        }
    }

    /// Whether the unnamed statement is the registry's (auto-prepare is on for this client).
    fn maps_unnamed(&self) -> bool {
        self.auto.as_ref().is_some_and(|a| !a.off)
    }

    /// Bytes of the client's messages held back while a result type is
    /// checked: the relay stops reading from the client while they and its
    /// output to the server pass its high-water mark, so a client that
    /// pipelines during the check cannot grow them without bound.
    pub fn held_len(&self) -> usize {
        self.held.len()
    }

    /// Whether the server connection may take another client's request
    /// right behind what this one has sent: everything sent is a whole
    /// request that leaves the session as it found it, whatever the server
    /// answers. That is: outside a transaction block, nothing held back or
    /// waiting to go, no setting being followed, and due only
    /// - Binds of registry statements that [`pinning::leaves_session_alone`]
    ///   and have not run slowly with a request behind them lately
    ///   (`pool::opening::SLOW`);
    /// - with pipelining on for this client, simple queries and unnamed
    ///   statements' Parses and Binds passed through whose text leaves the
    ///   session alone, unless this client's requests ran slowly lately
    ///   ([`Exchange::ran_slowly`]);
    /// - their Describes and Executes, pglane's own answers;
    ///
    /// and last what ends a request (a Sync or a simple query). Its replies
    /// then touch neither the connection's statements nor its settings (a
    /// failed Parse of the unnamed statement or Bind only skips to Sync), so
    /// the other client may translate its messages against them now.
    /// Negotiated portals are not followed.
    pub fn may_be_followed(&self) -> bool {
        let passed_may_follow = crate::pool::opening::may_follow(self.slow_at);
        let plain = |d: &Due| match d {
            Due::Server { request: Request::Bind { statement: Some(s), .. }, .. } => {
                crate::pool::opening::may_follow(s.slow_at.get()) && leaves_session_alone(s)
            }
            Due::Server {
                request:
                    Request::Query { plain: true }
                    | Request::Parse { undo: None, plain: true }
                    | Request::Bind { statement: None, plain: true },
                ..
            } => passed_may_follow,
            Due::Server {
                request:
                    Request::Execute { plan: None, .. }
                    | Request::QueryDescribe { plan: None }
                    | Request::Describe { cache: None, portal: None }
                    | Request::Sync { .. },
                ..
            } => true,
            Due::Local(Local::ParseComplete { .. } | Local::Description(_)) => true,
            _ => false,
        };
        self.tracker.status() == backend::TransactionStatus::Idle
            && self.tracker.is_synced()
            && !self.followed
            && !self.holding
            && !self.skip_to_sync
            && !self.realign
            && !self.resetting
            && self.pending_change.is_none()
            && self.pinned.is_none()
            && self.failure.is_none()
            && self.for_server.is_empty()
            && self.due.back().is_some_and(Due::ends_request)
            && self.due.iter().all(plain)
    }

    /// The statements the requests in flight run (to mark them slow; see
    /// `pool::Opening::holder_done`).
    pub fn statements_in_flight(&self) -> Vec<Rc<Statement>> {
        self.due
            .iter()
            .filter_map(|d| match d {
                Due::Server { request: Request::Bind { statement: Some(s), .. }, .. } => Some(s.clone()),
                _ => None,
            })
            .collect()
    }

    /// ReadyForQuery messages the server still owes for what was sent.
    pub fn ready_due(&self) -> usize {
        self.due.iter().filter(|d| d.ends_request()).count()
    }

    /// Nothing due in either direction.
    pub fn is_quiet(&self) -> bool {
        self.due.is_empty() && self.tracker.is_quiet()
    }

    /// Quiet and idle: the server connection may go back to the pool.
    pub fn is_releasable(&self) -> bool {
        self.due.is_empty() && self.tracker.is_releasable()
    }

    /// A whole client message (header included) on its way to the server.
    /// Writes what the server must get to `to_server`; what pglane answers
    /// itself waits for [`Exchange::client_messages_taken`].
    pub fn from_client(&mut self, tag: u8, message: &[u8], st: &mut Statements<'_>, to_server: &mut BytesMut) {
        if self.holding {
            let mut later = BytesMut::new();
            self.from_client_now(tag, message, st, &mut later);
            self.held.extend_from_slice(&later);
            return;
        }
        self.from_client_now(tag, message, st, to_server);
        if let Some(at) = self.hold_from.take() {
            let later = to_server.split_off(at);
            self.held.extend_from_slice(&later);
        }
    }

    fn from_client_now(&mut self, tag: u8, message: &[u8], st: &mut Statements<'_>, to_server: &mut BytesMut) {
        if self.skip_to_sync {
            if tag != frontend::SYNC {
                return;
            }
            self.skip_to_sync = false;
        }
        if self.realign && self.is_releasable() {
            self.realign = false;
            self.align_settings(st.client_settings, st.server_settings, to_server);
        }
        let body = &message[HEADER_LEN..];
        if tag == frontend::BIND {
            self.note_bind(body);
        }
        let forwarded = match tag {
            frontend::PARSE => self.parse(message, body, st, to_server),
            frontend::BIND => match names::split_bind(body) {
                Ok((portal, name, rest)) if !name.is_empty() => match st.client.get(name).cloned() {
                    Some(s) => self.bind(&s, portal, rest, st, to_server),
                    None => self.refuse_unknown_statement(name),
                },
                Ok((portal, "", rest)) if self.unnamed.is_some() => match self.unnamed.clone() {
                    Some(s) => self.bind(&s, portal, rest, st, to_server),
                    None => self.refuse_unknown_statement(""),
                },
                Ok((_, "", _)) if !self.unnamed_parsed => self.refuse_unknown_statement(""),
                bind => {
                    if let Ok((portal, _, _)) = bind {
                        self.negotiator.bound(portal, None, None);
                    }
                    let plain = self.unnamed_plain && matches!(bind, Ok((_, "", _)));
                    self.pass_request(message, to_server, Request::Bind { statement: None, plain })
                }
            },
            frontend::DESCRIBE => match names::split_target(body) {
                Ok((Target::Statement, name)) if !name.is_empty() => match st.client.get(name).cloned() {
                    Some(s) => self.describe_statement(s, st, to_server),
                    None => self.refuse_unknown_statement(name),
                },
                Ok((Target::Statement, "")) if self.unnamed.is_some() => match self.unnamed.clone() {
                    Some(s) => self.describe_statement(s, st, to_server),
                    None => self.refuse_unknown_statement(""),
                },
                Ok((Target::Statement, "")) if !self.unnamed_parsed => self.refuse_unknown_statement(""),
                Ok((Target::Portal, name)) => {
                    let portal = self.negotiator.plan(name);
                    self.pass_request(message, to_server, Request::Describe { cache: None, portal })
                }
                _ => self.pass_request(message, to_server, Request::Describe { cache: None, portal: None }),
            },
            frontend::CLOSE => match names::split_target(body) {
                Ok((Target::Statement, name)) if !name.is_empty() => {
                    // The server copy stays (other clients share it); closing
                    // an unknown name is not an error in PostgreSQL either.
                    let restore = st.client.remove(name).map(|s| (name.to_owned(), s));
                    self.due.push_back(Due::Local(Local::CloseComplete { restore }));
                    false
                }
                Ok((Target::Statement, "")) if self.maps_unnamed() => {
                    // The client's unnamed statement is a shared one: only the name goes.
                    self.unnamed = None;
                    self.due.push_back(Due::Local(Local::CloseComplete { restore: None }));
                    false
                }
                target => {
                    if let Ok((Target::Portal, name)) = target {
                        self.negotiator.closed(name);
                    }
                    self.pass(message, to_server, Request::Close { evicted: None });
                    true
                }
            },
            frontend::EXECUTE => match frontend::decode_execute(body) {
                Ok((portal, _)) if self.deallocate_portal.as_deref() == Some(portal) => {
                    self.pass_request(message, to_server, Request::Deallocate { execute: true })
                }
                decoded => {
                    let portal = decoded.map(|(portal, _)| self.negotiator.portal(portal)).unwrap_or_default();
                    self.pass_request(message, to_server, Request::Execute { plan: portal.plan, rows_of: portal.rows_of })
                }
            },
            frontend::SYNC => self.pass_request(message, to_server, Request::Sync { rewritten: false }),
            frontend::QUERY => {
                // A simple query replaces the unnamed statement and portal.
                self.unnamed_parsed = false;
                self.unnamed_plain = false;
                self.unnamed = None;
                self.deallocate_unnamed = false;
                if self.deallocate_portal.as_deref() == Some("") {
                    self.deallocate_portal = None;
                }
                self.pending_change = follow_change(body, self.tracker.status());
                if let Ok(sql) = frontend::decode_query(body) {
                    let followed = self.pending_change.is_some();
                    let carried = |name: &str| followed || settings::is_carried_name(name);
                    let resets = match self.pinned {
                        None => {
                            let (feature, resets) = pinning::session_feature_and_resets(sql, carried);
                            self.pin(feature);
                            resets
                        }
                        Some(_) => pinning::resets(sql),
                    };
                    if st.negotiation.is_some() {
                        st.server_settings.forget_output_settings_named_in(sql, followed);
                    }
                    self.resetting = resets.only;
                    if self.pending_change.is_none() && self.tracker.status() == backend::TransactionStatus::Idle && resets.all {
                        // RESET ALL among other statements (asyncpg's pool reset):
                        // not pinning, and followed once the whole query succeeds.
                        self.pending_change = Some(Change::ResetAll);
                    }
                }
                self.deallocate(body, st, to_server)
                    || self.rewrite_query(body, st, to_server)
                    || self.pass_query(message, body, to_server)
            }
            frontend::FUNCTION_CALL => self.pass_request(message, to_server, Request::FunctionCall),
            frontend::COPY_DONE | frontend::COPY_FAIL => {
                // Syncs sent while the server was in COPY FROM STDIN are ignored by it.
                for _ in 0..self.tracker.syncs_ignored_by_copy() {
                    if let Some(i) = self.due.iter().rposition(|d| matches!(d, Due::Server { request: Request::Sync { .. }, .. }))
                    {
                        self.due.remove(i);
                    }
                }
                to_server.extend_from_slice(message);
                true
            }
            _ => {
                to_server.extend_from_slice(message);
                true
            }
        };
        if forwarded {
            self.tracker.client_sent(tag);
            self.negotiator.client_sent(tag);
        }
    }

    /// The client's messages at hand have all been taken: what pglane
    /// answers itself goes out now, unless the next answer due after it is
    /// the server's. Then it waits and goes out with that reply
    /// ([`Exchange::from_server`] writes what is due first, first), in the
    /// same send to the client: a Parse answered here and a Bind for the
    /// server cost the client one wake-up, not two, as on a direct
    /// connection, where PostgreSQL sends nothing before Sync or Flush. A
    /// client waiting for an answer has sent one of those, which pglane
    /// forwards and the server answers.
    pub fn client_messages_taken(&mut self, to_client: &mut BytesMut) {
        let server_answers_next = matches!(self.due.iter().find(|d| !matches!(d, Due::Local(_))), Some(Due::Server { .. }));
        if !server_answers_next {
            self.answer_local(to_client);
        }
    }

    /// With negotiation on, a statement bound before its description is
    /// known (clients that never send Describe statement, like pgjdbc for
    /// statements without parameters of unknown type) gets a Describe of
    /// pglane's own ahead of the Bind, whose answer is cached and not
    /// forwarded: later Binds of it can be negotiated.
    fn learn_description(&mut self, s: &Rc<Statement>, st: &Statements<'_>, to_server: &mut BytesMut) {
        let being_learned =
            |d: &Due| matches!(d, Due::Server { request: Request::Describe { cache: Some(c), .. }, .. } if Rc::ptr_eq(c, s));
        if st.negotiation.is_none() || s.description.borrow().is_some() || self.due.iter().any(being_learned) {
            return;
        }
        frontend::describe(to_server, Target::Statement, &s.server_name);
        self.due.push_back(Due::Server { request: Request::Describe { cache: Some(s.clone()), portal: None }, forward: false });
    }

    /// The plan for a Bind of `s` as `portal`, and the Bind's parameter part,
    /// if negotiation is on and finds columns to ask binary for.
    fn negotiate_bind<'r>(
        &self,
        s: &Statement,
        portal: &str,
        rest: &'r [u8],
        small_rows: bool,
        st: &Statements<'_>,
    ) -> Option<(Plan, &'r [u8])> {
        let negotiation = st.negotiation?;
        let description = s.description.borrow();
        let description = description.as_deref()?;
        // Settings-dependent types only when the reported settings are the
        // ones this portal will run with (see `negotiate`).
        let settings = if self.settings_settled() {
            negotiate::server_text_settings(negotiation.server_params, negotiation.output_defaults, st.server_settings)
        } else {
            Default::default()
        };
        let planned = negotiate::plan_bind(description, rest, &settings, negotiation.max_row, small_rows)?;
        tracing::trace!(portal, statement = %s.server_name, columns = planned.0.transcoded_columns(), "negotiated binary results");
        st.registry.count(|c| c.portals_negotiated += 1);
        Some(planned)
    }

    /// No request that may change a setting unseen is in flight: no
    /// earlier Sync group, simple query or function call of the client's is
    /// unanswered, and the client has sent no Execute in its current group.
    /// pglane's own alignment query does not count: the server connection's
    /// settings are already recorded as what it sets, and if it fails the
    /// session ends before any row reaches the client.
    fn settings_settled(&self) -> bool {
        self.negotiator.group_is_clean()
            && !self.due.iter().any(|d| {
                matches!(
                    d,
                    Due::Server { request: Request::Sync { .. } | Request::FunctionCall | Request::Deallocate { .. }, .. }
                        | Due::Server { request: Request::Query { .. }, forward: true }
                )
            })
    }

    /// The next DataRows belong to a negotiated portal, or to pglane's own
    /// query that aligns settings (`set_config` returns a row) and must not
    /// reach the client: the relay must hand them over whole instead of
    /// streaming them.
    pub fn rows_need_whole(&self) -> bool {
        let next_server_reply = self.due.iter().find(|d| matches!(d, Due::Server { .. }));
        matches!(
            next_server_reply,
            Some(
                Due::Server { request: Request::Execute { plan: Some(_), .. }, .. }
                    | Due::Server { request: Request::Query { .. }, forward: false }
            )
        )
    }

    /// Why the relay must end, if a negotiated DataRow could not be transcoded.
    pub fn take_failure(&mut self) -> Option<NegotiateError> {
        self.failure.take()
    }

    /// The first bytes of a streamed client message (CopyData).
    pub fn from_client_stream(&mut self, tag: u8, bytes: &[u8], to_server: &mut BytesMut) {
        if !self.skip_to_sync {
            self.tracker.client_sent(tag);
            if self.holding { &mut self.held } else { to_server }.extend_from_slice(bytes);
        }
    }

    /// More bytes of the streamed client message.
    pub fn from_client_stream_more(&mut self, bytes: &[u8], to_server: &mut BytesMut) {
        if !self.skip_to_sync {
            if self.holding { &mut self.held } else { to_server }.extend_from_slice(bytes);
        }
    }

    /// Whether `sql`, a Parse's text just scanned, gave no scan anything to
    /// do: it did not pin the client (which is not pinned), names no output
    /// setting, RESET, DISCARD or set_config, and not search_path. Such a
    /// text is skipped when it comes again (see [`super::quiet`]).
    fn is_quiet_text(&self, sql: &str) -> bool {
        self.pinned.is_none() && !settings::may_change_output_settings(sql) && !mentions_search_path(sql)
    }

    /// Pins the client if `sql`, a Parse's text, leaves session state behind
    /// that pglane does not carry.
    fn watch_session_state(&mut self, sql: &str) {
        if self.pinned.is_none() {
            self.pin(pinning::session_feature(sql, settings::is_carried_name));
        }
    }

    /// The client used `feature` (if any): it keeps its server connection.
    fn pin(&mut self, feature: Option<SessionFeature>) {
        if let Some(feature) = feature {
            self.pinned = Some(feature);
            tracing::info!("client pinned to its server connection until it disconnects: it used {}", feature.as_str());
        }
    }

    fn parse(&mut self, message: &[u8], body: &[u8], st: &mut Statements<'_>, to_server: &mut BytesMut) -> bool {
        let parsed = names::split_parse(body);
        // The text leaves the session alone (scanned with pipelining only).
        let mut plain = false;
        if let Ok((_, rest)) = &parsed {
            let text = names::query_bytes(rest);
            if let Some(quiet_plain) = self.quiet.get(text) {
                plain = quiet_plain;
            } else {
                let sql = names::parse_query(rest);
                self.watch_session_state(sql);
                if st.negotiation.is_some() {
                    st.server_settings.forget_output_settings_named_in(sql, false);
                }
                if let Some(auto) = self.auto.as_mut() {
                    auto.notice_search_path(sql);
                }
                plain = self.pipelining && self.pinned.is_none() && pinning::leaves_session_alone(sql);
                if self.is_quiet_text(sql) {
                    self.quiet.remember(text, plain);
                }
            }
        }
        if let Ok(("", rest)) = parsed {
            if self.deallocate_parsed(rest, st, to_server) {
                return true;
            }
        }
        let (name, rest) = match parsed {
            Ok((name, rest)) if !name.is_empty() => (name, rest),
            Ok(("", rest)) if self.maps_unnamed() => return self.parse_unnamed(rest, st, to_server),
            _ => {
                let plain = plain && matches!(parsed, Ok(("", _)));
                self.unnamed_parsed = true;
                self.unnamed_plain = plain;
                self.pass(message, to_server, Request::Parse { undo: None, plain });
                return true;
            }
        };
        st.registry.count(|s| s.client_parses += 1);
        if st.client.get(name).is_some() {
            self.raise(ErrorFields::error("42P05", format!("prepared statement \"{name}\" already exists")));
            return false;
        }
        let statement = st.registry.register_under(st.client_settings.search_path_key().as_deref(), rest);
        if let Err(limit) = st.client.insert(name, statement.clone()) {
            self.raise(ErrorFields::error(
                "53400",
                format!("too many prepared statements: this client already has {} (max_client_prepared_statements)", limit.0),
            ));
            return false;
        }
        if statement.validated.get() || st.server.has(statement.id) {
            // Known good: prepared on this server connection when first used.
            // Or its Parse is on its way to this connection already (the
            // same text under two names in one pipeline): a second Parse
            // under the server name would fail, and if the first fails, the
            // server skips this answer's place up to Sync, and so does pglane.
            st.registry.count(|s| s.parses_answered += 1);
            self.due.push_back(Due::Local(Local::ParseComplete { client_name: name.to_owned(), statement: statement.id }));
            return false;
        }
        // New to the shard: the server checks it now and the client gets its answer.
        self.close_stale(st, to_server);
        self.make_room(&statement, st, to_server);
        names::put_parse(to_server, &statement.server_name, rest);
        st.registry.count(|s| s.server_parses += 1);
        let undo = Some(Prepared { statement, client_name: Some(name.to_owned()) });
        self.due.push_back(Due::Server { request: Request::Parse { undo, plain: false }, forward: true });
        true
    }

    /// A Parse of the unnamed statement, made the registry's statement for
    /// its text and types: answered here when a server already accepted it
    /// (or this connection has it), forwarded under its server name if not.
    fn parse_unnamed(&mut self, rest: &[u8], st: &mut Statements<'_>, to_server: &mut BytesMut) -> bool {
        st.registry.count(|c| c.unnamed_mapped += 1);
        let statement = st.registry.register_under(st.client_settings.search_path_key().as_deref(), rest);
        self.unnamed = Some(statement.clone());
        if statement.validated.get() || st.server.has(statement.id) {
            st.registry.count(|c| c.parses_answered += 1);
            self.due.push_back(Due::Local(Local::ParseComplete { client_name: String::new(), statement: statement.id }));
            return false;
        }
        self.close_stale(st, to_server);
        self.make_room(&statement, st, to_server);
        names::put_parse(to_server, &statement.server_name, rest);
        st.registry.count(|c| c.server_parses += 1);
        let undo = Some(Prepared { statement, client_name: None });
        self.due.push_back(Due::Server { request: Request::Parse { undo, plain: false }, forward: true });
        true
    }

    /// Bind of a statement the registry knows, renamed; with binary format
    /// negotiation, asking binary for the columns it can turn back into text.
    fn bind(&mut self, s: &Rc<Statement>, portal: &str, rest: &[u8], st: &mut Statements<'_>, to_server: &mut BytesMut) -> bool {
        let lazily = !st.server.has(s.id);
        self.ensure_prepared(s, st, to_server);
        if lazily {
            self.check_result(s, to_server);
        }
        let (plan, rows_of) = self.send_bind(s, portal, rest, st, to_server);
        self.negotiator.bound(portal, plan, rows_of);
        self.expect(Request::Bind { statement: Some(s.clone()), plain: false });
        true
    }

    /// Sends a Bind of `s` (`rest`: the Bind after its names), negotiated
    /// when binary_negotiation is on: the columns pglane can turn back into
    /// the text the client asked for are asked for in binary. Returns the
    /// portal's plan, and the statement whose row sizes to record: an
    /// un-negotiated portal's while the statement's record is being made, a
    /// negotiated one's while it relies on it (see `negotiate`).
    fn send_bind(
        &mut self,
        s: &Rc<Statement>,
        portal: &str,
        rest: &[u8],
        st: &mut Statements<'_>,
        to_server: &mut BytesMut,
    ) -> (Option<Plan>, Option<Rc<Statement>>) {
        self.learn_description(s, st, to_server);
        let record = s.rows.get();
        let plan = self.negotiate_bind(s, portal, rest, negotiate::small_rows(record), st);
        match &plan {
            Some((plan, params)) => {
                names::put_bind_with_result_formats(to_server, portal, &s.server_name, params, plan.server_formats())
            }
            None => names::put_bind(to_server, portal, &s.server_name, rest),
        }
        let watch = match &plan {
            Some((plan, _)) => plan.unbounded(),
            None => negotiate::still_watching(record),
        };
        let rows_of = (st.negotiation.is_some() && watch).then(|| s.clone());
        (plan.map(|(plan, _)| plan), rows_of)
    }

    /// Describe of a statement the registry knows: answered from its cached
    /// description, or asked of the server (and the answer cached).
    fn describe_statement(&mut self, s: Rc<Statement>, st: &mut Statements<'_>, to_server: &mut BytesMut) -> bool {
        let cached = s.description.borrow().clone();
        match cached {
            Some(description) => {
                st.registry.count(|c| c.describes_answered += 1);
                self.due.push_back(Due::Local(Local::Description(description)));
                false
            }
            None => {
                self.ensure_prepared(&s, st, to_server);
                frontend::describe(to_server, Target::Statement, &s.server_name);
                self.expect(Request::Describe { cache: Some(s), portal: None });
                true
            }
        }
    }

    /// `DEALLOCATE name` of a statement the client prepared (psycopg sends
    /// it for statements it evicts): the server knows it under the shard's
    /// shared name, which other clients may use, so only the client's name
    /// goes. An empty query stands in for it, so that the ReadyForQuery
    /// carries the server's transaction status. In a failed transaction it
    /// passes through and fails as it would on the server. Returns false,
    /// having sent nothing, if the query must pass through.
    fn deallocate(&mut self, body: &[u8], st: &mut Statements<'_>, to_server: &mut BytesMut) -> bool {
        if self.tracker.status() == backend::TransactionStatus::Failed {
            return false;
        }
        let Some(name) = super::deallocate::deallocated_name(names::query_bytes(body)) else { return false };
        // A malformed Query passes through, to fail at the server.
        if frontend::decode_query(body).is_err() || st.client.remove(&name).is_none() {
            return false;
        }
        frontend::query(to_server, "");
        self.expect(Request::Deallocate { execute: false });
        true
    }

    /// The same for `DEALLOCATE name` Parsed as the unnamed statement (as
    /// psycopg sends it): an empty unnamed statement instead, whose portal's
    /// Execute answers as the DEALLOCATE.
    fn deallocate_parsed(&mut self, rest: &[u8], st: &mut Statements<'_>, to_server: &mut BytesMut) -> bool {
        self.deallocate_unnamed = false;
        if self.tracker.status() == backend::TransactionStatus::Failed {
            return false;
        }
        let Some(name) = super::deallocate::deallocated_name(names::query_bytes(rest)) else { return false };
        if st.client.remove(&name).is_none() {
            return false;
        }
        frontend::parse(to_server, "", "", &[]);
        self.expect(Request::Parse { undo: None, plain: false });
        self.unnamed = None;
        self.unnamed_parsed = true;
        self.unnamed_plain = false;
        self.deallocate_unnamed = true;
        true
    }

    /// Follows which portal holds an empty statement standing for a DEALLOCATE.
    fn note_bind(&mut self, body: &[u8]) {
        if let Ok((portal, statement, _)) = names::split_bind(body) {
            if statement.is_empty() && self.deallocate_unnamed {
                self.deallocate_portal = Some(portal.to_owned());
            } else if self.deallocate_portal.as_deref() == Some(portal) {
                self.deallocate_portal = None;
            }
        }
    }

    /// Runs a simple query as its shape's validated statement (see the
    /// module doc). Returns false, having sent nothing, if it must pass through.
    fn rewrite_query(&mut self, body: &[u8], st: &mut Statements<'_>, to_server: &mut BytesMut) -> bool {
        let Some(auto) = self.auto.as_mut() else { return false };
        let Ok(sql) = frontend::decode_query(body) else { return false };
        // One query in TIMING_SAMPLE is timed: two clock reads would cost
        // this path more than the counters they feed are worth.
        auto.looked_at = auto.looked_at.wrapping_add(1);
        let started = (auto.looked_at % TIMING_SAMPLE == 1).then(Instant::now);
        let ready = match (self.tracker.is_synced(), self.tracker.status()) {
            (false, _) => Ready::NotSynced,
            (true, backend::TransactionStatus::Failed) => Ready::Failed,
            (true, _) => Ready::Yes,
        };
        let statement = match auto.statement_for(sql, ready, st.client_settings, st.registry) {
            Ok(statement) => statement,
            Err(why) => {
                let spent = started.map(|t| t.elapsed().as_nanos() as u64);
                st.registry.count(|c| {
                    c.pass_throughs += 1;
                    c.pass_through_reasons.count(why);
                    if let Some(ns) = spent {
                        c.pass_through_timed += 1;
                        c.pass_through_ns += ns;
                    }
                });
                return false;
            }
        };
        self.ensure_prepared(&statement, st, to_server);
        let Some(auto) = self.auto.as_mut() else { return false };
        let (plan, rows_of) = if st.negotiation.is_some() {
            // Negotiated like a client's Bind that asks for all text, as
            // the simple protocol returns it.
            let mut bind = BytesMut::new();
            frontend::bind(&mut bind, "", &statement.server_name, &[], auto.lexed.params(), &[]);
            match names::split_bind(&bind[HEADER_LEN..]) {
                Ok((_, _, rest)) => {
                    let (plan, rows_of) = self.send_bind(&statement, "", rest, st, to_server);
                    (plan.map(Rc::new), rows_of)
                }
                Err(_) => {
                    to_server.extend_from_slice(&bind);
                    (None, None)
                }
            }
        } else {
            frontend::bind(to_server, "", &statement.server_name, &[], auto.lexed.params(), &[]);
            (None, None)
        };
        let Some(auto) = self.auto.as_mut() else { return false };
        frontend::describe(to_server, Target::Portal, "");
        frontend::execute(to_server, "", 0);
        frontend::sync(to_server);
        auto.running(sql, self.tracker.status() == backend::TransactionStatus::Idle);
        let spent = started.map(|t| t.elapsed().as_nanos() as u64);
        st.registry.count(|c| {
            c.rewrites += 1;
            if let Some(ns) = spent {
                c.rewrites_timed += 1;
                c.rewrite_ns += ns;
            }
        });
        self.due.push_back(Due::Server { request: Request::Bind { statement: Some(statement), plain: false }, forward: false });
        self.expect(Request::QueryDescribe { plan: plan.clone() });
        self.expect(Request::Execute { plan, rows_of });
        self.expect(Request::Sync { rewritten: true });
        true
    }

    /// `s` was just prepared on this server connection for a Bind, and
    /// clients may have its description (asyncpg and pgjdbc decode results
    /// by it). On a direct connection a result type changed by DDL fails
    /// the Bind (0A000); here the fresh Parse would succeed with the new
    /// type. So pglane describes it and holds the client's messages until
    /// the answer shows the same result columns (one round trip, once per
    /// statement and server connection).
    fn check_result(&mut self, s: &Rc<Statement>, to_server: &mut BytesMut) {
        let Some(expected) = s.described.borrow().clone() else { return };
        if self.holding || self.hold_from.is_some() {
            return;
        }
        frontend::describe(to_server, Target::Statement, &s.server_name);
        frontend::flush(to_server);
        self.due.push_back(Due::Server { request: Request::CheckResult { statement: s.clone(), expected }, forward: false });
        self.hold_from = Some(to_server.len());
        self.holding = true;
    }

    /// The answer to [`Exchange::check_result`]. A changed result: the
    /// statement is retired (preparing its text again gives a fresh one)
    /// and the server is made to fail ahead of the held Bind, so the client
    /// gets 0A000 and the server skips to Sync, as on a direct connection.
    fn result_checked(&mut self, s: &Rc<Statement>, expected: &[u8], tag: u8, body: &[u8], st: &mut Statements<'_>) {
        if same_result(expected, tag, body) {
            return;
        }
        tracing::debug!(statement = %s.server_name, "the result type of a prepared statement changed");
        st.registry.retire(s);
        st.server.mark_stale(s.id);
        frontend::execute(&mut self.for_server, "pglane: result type changed", 0);
        self.due.push_front(Due::Server { request: Request::StaleResult, forward: true });
    }

    /// Makes sure this server connection has `s` before a Bind or Describe uses it.
    fn ensure_prepared(&mut self, s: &Rc<Statement>, st: &mut Statements<'_>, to_server: &mut BytesMut) {
        self.close_stale(st, to_server);
        if st.server.has(s.id) {
            return;
        }
        self.make_room(s, st, to_server);
        names::put_parse(to_server, &s.server_name, &s.key);
        st.registry.count(|c| c.server_parses += 1);
        let undo = Some(Prepared { statement: s.clone(), client_name: None });
        self.due.push_back(Due::Server { request: Request::Parse { undo, plain: false }, forward: false });
    }

    /// Records `s` on the server connection, closing the statement it evicts.
    fn make_room(&mut self, s: &Statement, st: &mut Statements<'_>, to_server: &mut BytesMut) {
        if let Some(evicted) = st.server.add(s) {
            frontend::close(to_server, Target::Statement, &evicted);
            st.registry.count(|c| c.evictions += 1);
            self.due.push_back(Due::Server { request: Request::Close { evicted: Some(evicted) }, forward: false });
        }
    }

    fn close_stale(&mut self, st: &mut Statements<'_>, to_server: &mut BytesMut) {
        for name in st.server.take_stale() {
            frontend::close(to_server, Target::Statement, &name);
            self.due.push_back(Due::Server { request: Request::Close { evicted: None }, forward: false });
        }
    }

    fn pass(&mut self, message: &[u8], to_server: &mut BytesMut, request: Request) {
        to_server.extend_from_slice(message);
        self.expect(request);
    }

    fn pass_request(&mut self, message: &[u8], to_server: &mut BytesMut, request: Request) -> bool {
        self.pass(message, to_server, request);
        true
    }

    /// A simple query as the client sent it; with pipelining, marked plain
    /// if it leaves the session alone.
    fn pass_query(&mut self, message: &[u8], body: &[u8], to_server: &mut BytesMut) -> bool {
        let plain = self.pipelining
            && self.pinned.is_none()
            && self.pending_change.is_none()
            && frontend::decode_query(body).is_ok_and(pinning::leaves_session_alone);
        self.pass_request(message, to_server, Request::Query { plain })
    }

    fn expect(&mut self, request: Request) {
        self.due.push_back(Due::Server { request, forward: true });
    }

    /// Bind or Describe of a statement this client has not prepared. Names
    /// are the client's own, so this one does not exist for it, whatever the
    /// server connection holds (another client's unnamed statement, or a
    /// statement under pglane's server name): PostgreSQL's error, raised here.
    fn refuse_unknown_statement(&mut self, name: &str) -> bool {
        let message = if name.is_empty() {
            "unnamed prepared statement does not exist".to_owned()
        } else {
            format!("prepared statement \"{name}\" does not exist")
        };
        self.raise(ErrorFields::error("26000", message));
        false
    }

    /// pglane refuses a client message: an error in its place, then the
    /// client's messages are dropped up to its Sync, as PostgreSQL does. (The
    /// server is not told, so an open transaction block is not marked failed.)
    fn raise(&mut self, error: ErrorFields) {
        self.due.push_back(Due::Local(Local::Error(error)));
        self.skip_to_sync = true;
    }

    /// Writes the answers pglane owes that are next in line.
    fn answer_local(&mut self, to_client: &mut BytesMut) {
        while let Some(Due::Local(_)) = self.due.front() {
            let Some(Due::Local(local)) = self.due.pop_front() else { break };
            match local {
                Local::ParseComplete { .. } => backend::parse_complete(to_client),
                Local::CloseComplete { .. } => backend::close_complete(to_client),
                Local::Description(bytes) => to_client.extend_from_slice(&bytes),
                Local::Error(e) => backend::error_response(to_client, &e),
            }
        }
    }

    /// Makes the server connection's settings the client's, with a simple
    /// query whose replies the client never sees, ahead of its own messages.
    pub fn align_settings(&mut self, client: &Settings, server: &mut Settings, to_server: &mut BytesMut) {
        if let Some(sql) = client.sql_to_apply_over(server) {
            frontend::query(to_server, &sql);
            self.tracker.client_sent(frontend::QUERY);
            self.due.push_back(Due::Server { request: Request::Query { plain: false }, forward: false });
            server.take_values_of(client);
        }
    }

    /// A whole server message on its way to the client. Returns whether the
    /// client gets it (replies to pglane's own requests are dropped).
    pub fn from_server(&mut self, tag: u8, message: &[u8], st: &mut Statements<'_>, to_client: &mut BytesMut) -> bool {
        self.answer_local(to_client);
        let body = &message[HEADER_LEN..];
        if let Some(Due::Server { request: Request::Query { .. }, forward: false }) = self.due.front() {
            // The reply to align_settings: nothing of it reaches the client.
            match tag {
                backend::PARAMETER_STATUS => {
                    self.reported(body, st, false);
                }
                backend::ERROR_RESPONSE => {
                    // Values a server accepted before: the connection is not
                    // what pglane recorded (its SETs were rolled back), and
                    // the client's requests behind it must not run as if.
                    let error = backend::decode_error_fields(body).map(|e| e.message).unwrap_or_default();
                    tracing::error!("aligning a server connection's settings failed: {error}; ending the session");
                    self.failure = Some(NegotiateError::Settings(error));
                }
                backend::READY_FOR_QUERY => {
                    self.due.pop_front();
                }
                _ => {}
            }
            self.tracker.server_sent(tag, body);
            // What pglane answers itself for the client's messages behind
            // the alignment goes out now: the client may send nothing more
            // until it has it (Parse, Describe, Flush).
            self.answer_local(to_client);
            return false;
        }
        let mut forward = true;
        match tag {
            backend::PARAMETER_STATUS => {
                if let Some((name, startup)) = self.reported(body, st, true) {
                    // What PostgreSQL would report after this RESET.
                    forward = false;
                    backend::parameter_status(to_client, &name, &startup);
                }
            }
            backend::ERROR_RESPONSE => {
                self.pending_change = None;
                if let Some(Due::Server { request: Request::StaleResult, .. }) = self.due.front() {
                    forward = false;
                    stale_result_error(to_client);
                }
                if self.answers_rewritten_query() {
                    let at_bind = matches!(self.due.front(), Some(Due::Server { request: Request::Bind { .. }, .. }));
                    if let Some(auto) = self.auto.as_mut() {
                        let stale = at_bind && is_stale_plan(body);
                        match auto.running.front_mut() {
                            Some(running) if stale && running.may_rerun => running.stale = Some(body.to_vec()),
                            _ => auto.write_error(body, to_client),
                        }
                        forward = false;
                    }
                }
                self.server_error(body, st)
            }
            backend::PARSE_COMPLETE => {
                if let Some(Due::Server { request: Request::Parse { undo, .. }, forward: f }) = self.pop_server_reply() {
                    if let Some(p) = undo {
                        p.statement.validated.set(true);
                    }
                    forward = f;
                }
            }
            backend::BIND_COMPLETE => {
                if let Some(Due::Server { forward: f, .. }) = self.pop_server_reply() {
                    forward = f;
                }
            }
            backend::PORTAL_SUSPENDED => {
                self.pop_server_reply();
            }
            backend::CLOSE_COMPLETE => {
                if let Some(Due::Server { forward: f, .. }) = self.pop_server_reply() {
                    forward = f;
                }
            }
            backend::PARAMETER_DESCRIPTION => {
                forward = !self.describe_is_pglanes();
                if matches!(self.due.front(), Some(Due::Server { request: Request::Describe { cache: Some(_), .. }, .. })) {
                    self.describing.clear();
                    self.describing.extend_from_slice(message);
                }
            }
            backend::DATA_ROW => {
                self.rows_seen(|| body.len(), st.registry);
                if let Some(Due::Server { request: Request::Execute { plan: Some(plan), .. }, .. }) = self.due.front() {
                    let plan = plan.clone();
                    forward = false;
                    match negotiate::transcode_row(body, &plan, to_client) {
                        Ok(row) => st.registry.count(|c| {
                            c.values_transcoded += row.values;
                            c.transcode_bytes_saved += row.bytes_saved;
                        }),
                        Err(e) => {
                            tracing::error!("binary format negotiation: {e}; ending the session");
                            self.failure = Some(e);
                        }
                    }
                }
            }
            backend::ROW_DESCRIPTION | backend::NO_DATA => {
                if let Some(Due::Server { request: Request::CheckResult { .. }, .. }) = self.due.front() {
                    forward = false;
                    if let Some(Due::Server { request: Request::CheckResult { statement, expected }, .. }) = self.due.pop_front()
                    {
                        self.result_checked(&statement, &expected, tag, body, st);
                    }
                } else if let Some(Due::Server { request: Request::QueryDescribe { plan }, .. }) = self.due.front() {
                    // A rewritten simple query's RowDescription: the client's,
                    // all text, also where pglane asked binary of the server.
                    forward = tag == backend::ROW_DESCRIPTION;
                    if let (true, Some(plan)) = (forward, plan.clone()) {
                        forward = false;
                        if let Err(e) = plan.client_row_description(body, to_client) {
                            tracing::error!(
                                "binary format negotiation: RowDescription of a rewritten query: {e}; ending the session"
                            );
                            self.failure = Some(e.into());
                        }
                    }
                    self.due.pop_front();
                } else {
                    forward = !self.describe_is_pglanes();
                    if let Some(Due::Server { request: Request::Describe { portal: Some(plan), .. }, .. }) = self.due.front() {
                        let plan = plan.clone();
                        if tag == backend::ROW_DESCRIPTION {
                            forward = false;
                            if let Err(e) = plan.client_row_description(body, to_client) {
                                tracing::error!("binary format negotiation: portal RowDescription: {e}; ending the session");
                                self.failure = Some(e.into());
                            }
                        }
                    }
                    if let Some(Due::Server { request: Request::Describe { cache, .. }, .. }) = self.due.front() {
                        if let Some(s) = cache {
                            if !self.describing.is_empty() {
                                let mut description = std::mem::take(&mut self.describing);
                                description.extend_from_slice(message);
                                let description = description.freeze();
                                *s.described.borrow_mut() = Some(description.clone());
                                *s.description.borrow_mut() = Some(description);
                            }
                        }
                        self.due.pop_front();
                    }
                }
            }
            backend::EMPTY_QUERY_RESPONSE
                if matches!(self.due.front(), Some(Due::Server { request: Request::Deallocate { .. }, .. })) =>
            {
                forward = false;
                backend::command_complete(to_client, "DEALLOCATE");
                if let Some(Due::Server { request: Request::Deallocate { execute: true }, .. }) = self.due.front() {
                    self.due.pop_front();
                }
            }
            backend::COMMAND_COMPLETE | backend::EMPTY_QUERY_RESPONSE => {
                if matches!(self.due.front(), Some(Due::Server { request: Request::Execute { .. }, .. })) {
                    self.rows_ended();
                    self.due.pop_front();
                }
                if tag == backend::COMMAND_COMPLETE && matches!(body, b"DISCARD ALL\0" | b"DEALLOCATE ALL\0") {
                    // The server forgot every statement, and so did this client.
                    st.server.clear();
                    st.client.clear();
                }
                if tag == backend::COMMAND_COMPLETE && body == b"DISCARD ALL\0" {
                    // And its settings went back to the server's defaults;
                    // the client's, as on PostgreSQL, to its startup values.
                    st.server_settings.apply(&Change::ResetAll);
                    st.client_settings.apply(&Change::ResetAll);
                    self.realign = !st.client_settings.same_values(st.server_settings);
                }
                if let Some(auto) = self.auto.as_mut().filter(|_| tag == backend::COMMAND_COMPLETE && changes_schema(body)) {
                    st.registry.schema_changed();
                    auto.ddl_pending = true;
                }
            }
            backend::READY_FOR_QUERY => {
                while let Some(due) = self.due.pop_front() {
                    match due {
                        Due::Server { request: Request::Sync { rewritten }, .. } => {
                            if rewritten {
                                forward = self.rewritten_query_ended(st, to_client);
                            }
                            break;
                        }
                        Due::Server { request: Request::Query { .. }, forward: true } => {
                            self.resetting = false;
                            break;
                        }
                        Due::Server {
                            request: Request::Query { .. } | Request::Deallocate { execute: false } | Request::FunctionCall,
                            ..
                        } => break,
                        _ => {}
                    }
                }
                if body == b"I" {
                    self.negotiator.transaction_ended();
                }
                if let Some(auto) = self.auto.as_mut().filter(|a| a.ddl_pending && body == b"I") {
                    // The DDL is committed (or rolled back): shapes validated
                    // while it was in flight saw the old schema.
                    auto.ddl_pending = false;
                    st.registry.schema_changed();
                }
                if let Some(change) = self.pending_change.take() {
                    if body == b"I" {
                        st.client_settings.apply(&change);
                        st.server_settings.apply(&change);
                        self.realign = !st.client_settings.same_values(st.server_settings);
                    }
                }
            }
            _ => {}
        }
        if forward {
            to_client.extend_from_slice(message);
        }
        self.tracker.server_sent(tag, body);
        if self.holding && !self.due.iter().any(|d| matches!(d, Due::Server { request: Request::CheckResult { .. }, .. })) {
            // Checked (or skipped after an error): the client's messages go on.
            self.holding = false;
            let held = std::mem::take(&mut self.held);
            self.for_server.extend_from_slice(&held);
        }
        self.answer_local(to_client);
        forward
    }

    /// DataRows came for the Execute being answered, the largest of `len()`
    /// body bytes: if its statement is watched, its row record is updated
    /// (`len` is not called otherwise). A row over the cap marks the
    /// statement for good, and counts.
    fn rows_seen(&self, len: impl FnOnce() -> usize, registry: &Registry) {
        let Some(Due::Server { request: Request::Execute { plan, rows_of: Some(s) }, .. }) = self.due.front() else { return };
        let len = len();
        let before = s.rows.get();
        let after = negotiate::row_seen(before, len);
        s.rows.set(after);
        let big = len > negotiate::SMALL_ROW_CAP;
        if big && plan.is_some() {
            registry.count(|c| c.big_rows += 1);
        }
        if after.too_big && !before.too_big {
            tracing::debug!(statement = %s.server_name, row = len, "a row over the small-row cap: the statement is not negotiated again");
            registry.count(|c| c.big_row_statements += 1);
        }
    }

    /// The Execute being answered ran its portal to completion: one more
    /// execution whose rows were all seen, for an un-negotiated portal (a
    /// portal read in batches counts once, at its last).
    fn rows_ended(&self) {
        if let Some(Due::Server { request: Request::Execute { plan: None, rows_of: Some(s) }, .. }) = self.due.front() {
            s.rows.set(negotiate::execution_seen(s.rows.get()));
        }
    }

    /// The Describe being answered is one pglane sent for itself.
    fn describe_is_pglanes(&self) -> bool {
        matches!(
            self.due.front(),
            Some(Due::Server { request: Request::Describe { .. } | Request::CheckResult { .. }, forward: false })
        )
    }

    /// A ParameterStatus: the server connection now has this value, and so
    /// does the client if it is told.
    /// A ParameterStatus: the server connection's value, and the client's if
    /// it is told. When a query that only resets changed a setting the
    /// client's startup packet gave, the server went back to *its* reset
    /// value, but on PostgreSQL the client's would be its startup value: the
    /// client keeps that, the server is aligned to it before the client's
    /// next message, and the returned (name, value) is what the client must
    /// be told instead.
    fn reported(&mut self, body: &[u8], st: &mut Statements<'_>, client_told: bool) -> Option<(String, String)> {
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

    /// Moves what a server message made pglane send back to the server (a
    /// rewritten query whose plan went stale, run again as it was) into
    /// `to_server`. The relay calls it after handing server messages to
    /// [`Exchange::from_server`]; until then the exchange is not quiet.
    pub fn take_for_server(&mut self, to_server: &mut BytesMut) {
        if !self.for_server.is_empty() {
            to_server.extend_from_slice(&self.for_server);
            self.for_server.clear();
        }
    }

    /// The ReadyForQuery of the oldest rewritten query arrived. Returns
    /// whether the client gets it: not when its plan was stale and it runs
    /// again as the plain query.
    fn rewritten_query_ended(&mut self, st: &mut Statements<'_>, to_client: &mut BytesMut) -> bool {
        let Some(auto) = self.auto.as_mut() else { return true };
        let stale = auto.running.front_mut().and_then(|r| r.stale.take());
        let forward = match stale {
            None => true,
            Some(_) if self.due.is_empty() && !self.followed => {
                if let Some(running) = auto.running.front() {
                    frontend::query(&mut self.for_server, &running.sql);
                }
                self.tracker.client_sent(frontend::QUERY);
                self.due.push_back(Due::Server { request: Request::Query { plain: false }, forward: true });
                st.registry.count(|c| c.reruns += 1);
                false
            }
            // Other requests followed it (this client's, or another's on
            // a pipelined connection): too late to run it again.
            Some(error) => {
                auto.write_error(&error, to_client);
                true
            }
        };
        auto.finished();
        forward
    }

    /// Whether the server's next reply belongs to a rewritten simple query.
    fn answers_rewritten_query(&self) -> bool {
        let end = self.due.iter().find(|d| d.ends_request());
        matches!(end, Some(Due::Server { request: Request::Sync { rewritten: true }, .. }))
    }

    fn pop_server_reply(&mut self) -> Option<Due> {
        match self.due.front() {
            Some(Due::Server { .. }) => self.due.pop_front(),
            _ => None,
        }
    }

    /// The request at the front failed; unless it is a simple Query (which
    /// goes on to its ReadyForQuery), the server now skips everything up to
    /// Sync, so what pglane recorded for those requests is undone. If the
    /// client has not sent that Sync yet (a pipeline still being written),
    /// the server skips what it sends until then too, and so does pglane:
    /// none of it may be answered here (a ParseComplete, or an error of
    /// pglane's own for a Bind of a statement the skipped Parse would have
    /// made, would be one answer more than the client's driver counts).
    fn server_error(&mut self, body: &[u8], st: &mut Statements<'_>) {
        if matches!(
            self.due.front(),
            Some(Due::Server {
                request: Request::Query { .. } | Request::Deallocate { execute: false } | Request::Sync { .. },
                ..
            }) | None
        ) {
            return;
        }
        let stale_plan = backend::decode_error_fields(body).is_ok_and(|e| e.code == "0A000");
        let mut first = true;
        while let Some(due) = self.due.front() {
            if matches!(due, Due::Server { request: Request::Sync { .. }, .. }) {
                break;
            }
            let Some(due) = self.due.pop_front() else { break };
            match due {
                Due::Server { request: Request::Parse { undo: Some(p), .. }, .. } => {
                    if self.unnamed.as_ref().is_some_and(|u| Rc::ptr_eq(u, &p.statement)) {
                        self.unnamed = None;
                    }
                    st.server.remove(p.statement.id);
                    if let Some(name) = &p.client_name {
                        st.client.remove_if(name, p.statement.id);
                    }
                    st.registry.forget_failed(&p.statement);
                }
                Due::Server { request: Request::Bind { statement: Some(s), .. }, .. } if first && stale_plan => {
                    // "cached plan must not change result type": close it here,
                    // and let new Parses of the text prepare it afresh.
                    st.server.mark_stale(s.id);
                    st.registry.retire(&s);
                    if self.auto.is_some() {
                        // DDL pglane did not see: every shape is checked again.
                        st.registry.schema_changed();
                    }
                }
                Due::Server { request: Request::Close { evicted: Some(name) }, .. } => {
                    // Skipped: the server still has it. Close it at the next chance.
                    st.server.push_stale(name);
                }
                Due::Local(Local::ParseComplete { client_name, statement })
                    if client_name.is_empty() && self.unnamed.as_ref().is_some_and(|u| u.id == statement) =>
                {
                    // A skipped Parse of the unnamed statement.
                    self.unnamed = None;
                }
                Due::Local(Local::ParseComplete { client_name, statement }) => st.client.remove_if(&client_name, statement),
                Due::Local(Local::CloseComplete { restore: Some((name, s)) }) => {
                    let _ = st.client.insert(&name, s);
                }
                _ => {}
            }
            first = false;
        }
        if self.due.is_empty() {
            self.skip_to_sync = true;
        }
    }

    /// The first bytes of a streamed server message (DataRow, CopyData).
    pub fn from_server_stream(&mut self, tag: u8, bytes: &[u8], registry: &Registry, to_client: &mut BytesMut) {
        self.answer_local(to_client);
        if tag == backend::DATA_ROW {
            self.rows_seen(|| negotiate::largest_data_row(bytes), registry);
        }
        self.tracker.server_sent(tag, &[]);
        debug_assert!(
            !matches!(self.due.front(), Some(Due::Server { request: Request::Query { .. }, forward: false })),
            "rows_need_whole"
        );
        to_client.extend_from_slice(bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prepare::auto::Decision;
    use crate::protocol::frame::split_message;

    /// The state one client and its server connection share, for tests.
    struct Sides {
        registry: Registry,
        client: ClientStatements,
        server: ServerStatements,
        client_settings: Settings,
        server_settings: Settings,
    }

    impl Sides {
        fn new() -> Sides {
            Sides {
                registry: Registry::new(0, 100),
                client: ClientStatements::new(100),
                server: ServerStatements::new(100),
                client_settings: Settings::default(),
                server_settings: Settings::default(),
            }
        }

        fn st(&mut self) -> Statements<'_> {
            Statements {
                registry: &self.registry,
                client: &mut self.client,
                server: &mut self.server,
                client_settings: &mut self.client_settings,
                server_settings: &mut self.server_settings,
                negotiation: None,
            }
        }

        /// Makes `sql`'s shape validated, as the validator would.
        fn validate(&self, sql: &str) -> Rc<Statement> {
            let mut lexed = Lexed::new();
            lexed.lex(sql, LexOptions::default()).unwrap();
            let rewritten = lexed.rewritten(sql);
            let (hash, types) = (lexed.shape_hash(), lexed.param_types());
            let job = |epoch| Job {
                hash,
                sql: rewritten.as_str().into(),
                param_types: types.into(),
                original: sql.into(),
                options: LexOptions::default(),
                epoch,
            };
            if matches!(self.registry.shapes.lookup(hash, &rewritten, types, Instant::now), Lookup::Miss) {
                assert_eq!(self.registry.shapes.note(job, hash, &rewritten, types, 1), PassThrough::Validating);
            }
            let waker = std::task::Waker::noop();
            let queued = loop {
                match self.registry.shapes.poll_job(&mut std::task::Context::from_waker(waker)) {
                    std::task::Poll::Ready(job) if *job.sql == *rewritten => break job,
                    std::task::Poll::Ready(_) => {}
                    std::task::Poll::Pending => panic!("{sql}: not queued"),
                }
            };
            let mut parse = BytesMut::new();
            frontend::parse(&mut parse, "", &rewritten, types);
            let (_, key) = names::split_parse(&parse[HEADER_LEN..]).unwrap();
            let statement = self.registry.register(key);
            statement.validated.set(true);
            assert!(self.registry.shapes.decide(&queued, Decision::Rewrite(statement.clone())));
            statement
        }
    }

    fn messages(mut bytes: BytesMut) -> Vec<(u8, Vec<u8>)> {
        let mut out = Vec::new();
        while let Some(m) = split_message(&mut bytes, 1 << 20).unwrap() {
            out.push((m.tag, m.body.to_vec()));
        }
        out
    }

    fn tags(messages: &[(u8, Vec<u8>)]) -> String {
        messages.iter().map(|(t, _)| *t as char).collect()
    }

    fn whole(tag: u8, body: &[u8]) -> Vec<u8> {
        let mut m = vec![tag];
        m.extend_from_slice(&((body.len() + 4) as i32).to_be_bytes());
        m.extend_from_slice(body);
        m
    }

    /// Sends the client's simple query; returns what went to the server.
    fn query(ex: &mut Exchange, sides: &mut Sides, sql: &str) -> Vec<(u8, Vec<u8>)> {
        let mut q = BytesMut::new();
        frontend::query(&mut q, sql);
        let (mut to_server, mut to_client) = (BytesMut::new(), BytesMut::new());
        ex.from_client(frontend::QUERY, &q, &mut sides.st(), &mut to_server);
        ex.client_messages_taken(&mut to_client);
        assert!(to_client.is_empty());
        messages(to_server)
    }

    /// Server messages handed over whole (as the relay does while
    /// `rows_need_whole` says so); returns what the client got.
    fn reply_whole(ex: &mut Exchange, sides: &mut Sides, replies: &[(u8, &[u8])]) -> Vec<(u8, Vec<u8>)> {
        let mut to_client = BytesMut::new();
        for (tag, body) in replies {
            ex.from_server(*tag, &whole(*tag, body), &mut sides.st(), &mut to_client);
        }
        messages(to_client)
    }

    fn query_text(message: &(u8, Vec<u8>)) -> String {
        assert_eq!(message.0, frontend::QUERY);
        frontend::decode_query(&message.1).unwrap().to_owned()
    }

    #[test]
    fn startup_settings_align_hidden_and_reset_realigns_before_the_next_message() {
        let mut sides = Sides::new();
        sides.client_settings = Settings::from_startup_values(&[("search_path".into(), "app, public".into())]);
        let mut ex = Exchange::default();
        let mut to_server = BytesMut::new();
        ex.align_settings(&sides.client_settings, &mut sides.server_settings, &mut to_server);
        let sent = messages(to_server);
        assert_eq!(query_text(&sent[0]), "SELECT pg_catalog.set_config('search_path', 'app, public', false);");
        assert!(ex.rows_need_whole(), "set_config's row must not stream to the client");
        let row_description = [0u8, 1, b's', 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 25, 255, 255, 255, 255, 255, 255, 0, 0];
        let got = reply_whole(
            &mut ex,
            &mut sides,
            &[(b'T', &row_description), (b'D', b"\0\x01\0\0\0\x03app"), (b'C', b"SELECT 1\0"), (b'Z', b"I")],
        );
        assert!(got.is_empty(), "{got:?}");
        assert!(!ex.rows_need_whole());

        // RESET goes back to the startup value: the server's default there,
        // so pglane sets it again ahead of the client's next message.
        assert_eq!(tags(&query(&mut ex, &mut sides, "RESET search_path")), "Q");
        assert_eq!(tags(&reply_whole(&mut ex, &mut sides, &[(b'C', b"RESET\0"), (b'Z', b"I")])), "CZ");
        assert_eq!(sides.client_settings.get("search_path"), Some(&Value::Startup("app, public".into())));
        let sent = query(&mut ex, &mut sides, "select 1");
        assert_eq!(tags(&sent), "QQ");
        assert!(query_text(&sent[0]).contains("set_config('search_path'"));
        assert_eq!(query_text(&sent[1]), "select 1");
        assert!(sides.server_settings.same_values(&sides.client_settings));
    }

    /// asyncpg prepares again after 0A000 with Parse, Describe and Flush (no
    /// Sync). When the statement is known, pglane answers both itself; if the
    /// server connection it got needed its settings aligned first, those
    /// answers wait behind the alignment's replies and must go out with its
    /// ReadyForQuery, or the client, which sends nothing more until answered,
    /// waits forever.
    #[test]
    fn answers_queued_behind_an_alignment_go_out_with_its_ready_for_query() {
        let mut sides = Sides::new();
        let mut ex = Exchange::new(None);
        prepare_and_describe_s1(&mut ex, &mut sides);

        // The next transaction's server connection has other settings.
        ex.reset();
        sides.client_settings.set("TimeZone", Value::Reported("UTC".into()));
        let mut to_server = BytesMut::new();
        ex.align_settings(&sides.client_settings, &mut sides.server_settings, &mut to_server);
        assert_eq!(tags(&messages(to_server)), "Q");
        let mut p = BytesMut::new();
        frontend::parse(&mut p, "s2", "SELECT v FROM t WHERE id = $1", &[23]);
        frontend::describe(&mut p, Target::Statement, "s2");
        frontend::flush(&mut p);
        let (sent, answered) = send(&mut ex, &mut sides, p);
        assert!(answered.is_empty(), "not ahead of the alignment's replies: {answered:?}");
        assert_eq!(tags(&sent), "H", "both answered by pglane");
        let got = reply_whole(&mut ex, &mut sides, &[(b'C', b"SET\0"), (b'Z', b"I")]);
        assert_eq!(tags(&got), "1tT", "ParseComplete and the description, and nothing of the alignment");
        assert!(ex.is_quiet());
    }

    /// Parse texts found quiet are not scanned again, and nothing the scans
    /// act on is ever taken for quiet: each of these, parsed after a quiet
    /// one and twice, acts every time as on its first.
    #[test]
    fn the_quiet_text_cache_never_hides_session_state() {
        let parse = |ex: &mut Exchange, sides: &mut Sides, sql: &str| {
            let mut p = BytesMut::new();
            frontend::parse(&mut p, "", sql, &[]);
            frontend::sync(&mut p);
            send(ex, sides, p);
            reply(ex, sides, &[(b'1', b""), (b'Z', b"I")]);
        };
        let mut sides = Sides::new();
        let mut ex = Exchange::new(None);
        for _ in 0..3 {
            parse(&mut ex, &mut sides, "select 1");
        }
        assert!(ex.quiet.contains(b"select 1"));
        let acts = [
            ("select set_config('DateStyle', 'ISO', false)", "names an output setting"),
            ("select current_setting('search_path')", "names search_path"),
            ("select pg_advisory_lock(1)", "pins"),
            ("reset all", "resets"),
        ];
        for (sql, what) in acts {
            let mut ex = Exchange::new(Some(0));
            parse(&mut ex, &mut sides, "select 1");
            for round in 0..2 {
                parse(&mut ex, &mut sides, sql);
                assert!(!ex.quiet.contains(sql.as_bytes()), "{sql} ({what}) taken for quiet, round {round}");
                match what {
                    "pins" => assert_eq!(ex.pinned, Some(SessionFeature::AdvisoryLock)),
                    "names search_path" => assert!(ex.auto.as_ref().is_some_and(|a| a.off)),
                    _ => {}
                }
            }
        }
    }

    #[test]
    fn a_failed_alignment_ends_the_session() {
        let mut sides = Sides::new();
        sides.client_settings.set("TimeZone", Value::Reported("Mars/Olympus".into()));
        let mut ex = Exchange::default();
        let mut to_server = BytesMut::new();
        ex.align_settings(&sides.client_settings, &mut sides.server_settings, &mut to_server);
        let mut error = BytesMut::new();
        backend::error_response(&mut error, &ErrorFields::error("22023", "invalid value for parameter \"TimeZone\""));
        let got = reply_whole(&mut ex, &mut sides, &[(b'E', &error[HEADER_LEN..])]);
        assert!(got.is_empty());
        assert!(matches!(ex.take_failure(), Some(NegotiateError::Settings(m)) if m.contains("TimeZone")));
    }

    /// The server's replies, whole; returns what the client got.
    fn reply(ex: &mut Exchange, sides: &mut Sides, replies: &[(u8, &[u8])]) -> Vec<(u8, Vec<u8>)> {
        let mut to_client = BytesMut::new();
        for (tag, body) in replies {
            if *tag == backend::DATA_ROW {
                ex.from_server_stream(*tag, &whole(*tag, body), &sides.registry, &mut to_client);
            } else {
                ex.from_server(*tag, &whole(*tag, body), &mut sides.st(), &mut to_client);
            }
        }
        messages(to_client)
    }

    const SELECT: &str = "SELECT name FROM t WHERE id = 42 AND note = 'it''s'";

    #[test]
    fn a_validated_shape_runs_prepared_and_answers_as_a_simple_query() {
        let mut sides = Sides::new();
        let statement = sides.validate(SELECT);
        let mut ex = Exchange::new(Some(1));
        let sent = query(&mut ex, &mut sides, SELECT);
        assert_eq!(tags(&sent), "PBDES");
        assert_eq!(names::split_parse(&sent[0].1).unwrap().0, &*statement.server_name);
        let (portal, name, _) = names::split_bind(&sent[1].1).unwrap();
        assert_eq!((portal, name), ("", &*statement.server_name));
        let mut bind = BytesMut::new();
        frontend::bind(&mut bind, "", &statement.server_name, &[], [Some(&b"42"[..]), Some(&b"it's"[..])].into_iter(), &[]);
        assert_eq!(sent[1].1, bind[HEADER_LEN..], "text parameters, text results");
        assert_eq!(sent[2].1, b"P\0");

        let got = reply(
            &mut ex,
            &mut sides,
            &[
                (b'1', b""),
                (b'2', b""),
                (b'T', b"\0\x01name\0\0\0\0\0\0\0\0\0\0\x19\xff\xff\xff\xff\xff\xff\0\0"),
                (b'D', b"\0\x01\0\0\0\x01x"),
                (b'N', b"SNOTICE\0Mhi\0\0"),
                (b'C', b"SELECT 1\0"),
                (b'Z', b"I"),
            ],
        );
        assert_eq!(tags(&got), "TDNCZ", "no ParseComplete, no BindComplete");
        assert!(ex.is_releasable());

        // The server connection has it now: no second Parse.
        assert_eq!(tags(&query(&mut ex, &mut sides, "SELECT name FROM t WHERE id = 7 AND note = ''")), "BDES");
        // The same statement spelled otherwise runs as the same statement, ...
        assert_eq!(tags(&query(&mut ex, &mut sides, "select NAME from t\nwhere id = 7 and note = '' ;")), "BDES");
        assert_eq!(sides.registry.stats().respellings, 1);
        // ... but a quoted identifier is not the unquoted word.
        assert_eq!(tags(&query(&mut ex, &mut sides, "SELECT \"name\" FROM t WHERE id = 7 AND note = ''")), "Q");
        let got = reply(&mut ex, &mut sides, &[(b'2', b""), (b'n', b""), (b'C', b"SELECT 0\0"), (b'Z', b"I")]);
        assert_eq!(tags(&got), "CZ", "NoData is not the client's");
        reply(&mut ex, &mut sides, &[(b'2', b""), (b'n', b""), (b'C', b"SELECT 0\0"), (b'Z', b"I")]);
        reply(&mut ex, &mut sides, &[(b'C', b"SELECT 0\0"), (b'Z', b"I")]);
        assert_eq!(sides.registry.stats().rewrites, 3);
    }

    #[test]
    fn new_shapes_pass_through_and_are_queued() {
        let mut sides = Sides::new();
        let mut ex = Exchange::new(Some(1));
        let sent = query(&mut ex, &mut sides, SELECT);
        assert_eq!(tags(&sent), "Q");
        assert_eq!(frontend::decode_query(&sent[0].1).unwrap(), SELECT);
        assert_eq!(sides.registry.shapes.len(), 1);
        assert_eq!(sides.registry.stats().pass_throughs, 1);
        // Multi-statement text, and anything once search_path is mentioned, stay as they are.
        assert_eq!(tags(&query(&mut ex, &mut sides, "SELECT 1; SELECT 2")), "Q");
        sides.validate("SELECT 1");
        assert_eq!(tags(&query(&mut ex, &mut sides, "SELECT 1")), "PBDES");
        reply(&mut ex, &mut sides, &[(b'1', b""), (b'2', b""), (b'n', b""), (b'C', b"SELECT 1\0"), (b'Z', b"I")]);
        assert_eq!(tags(&query(&mut ex, &mut sides, "SET search_path = x")), "Q");
        reply(&mut ex, &mut sides, &[(b'C', b"SET\0"), (b'Z', b"I")]);
        assert_eq!(tags(&query(&mut ex, &mut sides, "SELECT 1")), "Q", "auto-prepare is off for this client now");
    }

    #[test]
    fn nothing_is_rewritten_in_a_failed_transaction_or_after_an_unsynced_message() {
        let mut sides = Sides::new();
        sides.validate("SELECT 1");
        let mut ex = Exchange::new(Some(1));
        assert_eq!(tags(&query(&mut ex, &mut sides, "BEGIN")), "Q");
        reply(&mut ex, &mut sides, &[(b'C', b"BEGIN\0"), (b'Z', b"T")]);
        assert_eq!(tags(&query(&mut ex, &mut sides, "SELECT 1")), "PBDES", "inside a transaction block is fine");
        reply(&mut ex, &mut sides, &[(b'E', b"SERROR\0C57014\0Mcanceled\0\0"), (b'Z', b"E")]);
        assert_eq!(tags(&query(&mut ex, &mut sides, "SELECT 1")), "Q");
        let reasons = sides.registry.stats().pass_through_reasons;
        assert_eq!(reasons.get(PassThrough::FailedTransaction), 1);
        reply(&mut ex, &mut sides, &[(b'E', b"SERROR\0C25P02\0Maborted\0\0"), (b'Z', b"E")]);
        assert_eq!(tags(&query(&mut ex, &mut sides, "ROLLBACK")), "Q");
        reply(&mut ex, &mut sides, &[(b'C', b"ROLLBACK\0"), (b'Z', b"I")]);
        // A Parse the client has not Synced yet: the query waits its turn as it is.
        let mut parse = BytesMut::new();
        frontend::parse(&mut parse, "", "SELECT 2", &[]);
        let mut to_server = BytesMut::new();
        ex.from_client(frontend::PARSE, &parse, &mut sides.st(), &mut to_server);
        assert_eq!(tags(&query(&mut ex, &mut sides, "SELECT 1")), "Q");
        let reasons = sides.registry.stats().pass_through_reasons;
        assert_eq!(reasons.get(PassThrough::NotSynced), 1);
        assert_eq!(reasons.total(), sides.registry.stats().pass_throughs);
    }

    #[test]
    fn an_error_points_into_the_clients_text() {
        let mut sides = Sides::new();
        let statement = sides.validate(SELECT);
        let mut ex = Exchange::new(Some(1));
        query(&mut ex, &mut sides, SELECT);
        // "SELECT name FROM t WHERE id = $1 AND note = $2": `note` is at 38 there, 38 in the original too;
        // put it at the `$2` (45), which is the literal at 45 in the original.
        let got = reply(&mut ex, &mut sides, &[(b'E', b"SERROR\0VERROR\0C42703\0Mno\0P45\0Fx.c\0\0"), (b'Z', b"I")]);
        assert_eq!(tags(&got), "EZ");
        assert_eq!(got[0].1, b"SERROR\0VERROR\0C42703\0Mno\0P45\0Fx.c\0\0");
        assert!(!sides.server.has(statement.id), "the failed Parse is undone");
        // A Bind-time input error of $1 gets the literal's position instead of the context line.
        sides.validate("SELECT name FROM t WHERE id = 'x' AND note = 'y'");
        query(&mut ex, &mut sides, "SELECT name FROM t WHERE id = 'x' AND note = 'y'");
        let got = reply(
            &mut ex,
            &mut sides,
            &[(b'1', b""), (b'E', b"SERROR\0C22P02\0Mbad\0Wunnamed portal parameter $1 = '...'\0Rx\0\0"), (b'Z', b"I")],
        );
        assert_eq!(tags(&got), "EZ");
        assert_eq!(got[0].1, b"SERROR\0C22P02\0Mbad\0P31\0Rx\0\0");
        assert!(ex.is_releasable());
    }

    #[test]
    fn error_fields_are_mapped_only_where_they_point_at_the_rewrite() {
        let sql = "SELECT 'éé', 1 + x FROM t";
        let mut lexed = Lexed::new();
        lexed.lex(sql, LexOptions::default()).unwrap();
        assert_eq!(lexed.rewritten(sql), "SELECT $1, $2 + x FROM t");
        let fields = |list: &[(u8, &[u8])]| original_error_fields(list, &lexed, sql, |p| Some(lexed.original_position(sql, p)));
        // `x` is at 17 in the rewrite and at 18 in the original (`'éé'` is 4 characters, `$1` 2, `1` 1 and `$2` 2).
        assert_eq!(fields(&[(b'M', b"m"), (b'P', b"17")]), Some(vec![(b'M', b"m".to_vec()), (b'P', b"18".to_vec())]));
        assert_eq!(fields(&[(b'W', b"unnamed portal parameter $2 = '...'")]), Some(vec![(b'P', b"14".to_vec())]));
        assert_eq!(fields(&[(b'M', b"m"), (b'W', b"SQL function \"f\"")]), None);
        assert_eq!(fields(&[(b'W', b"unnamed portal parameter $9 = '...'")]), None, "no such slot");
        assert_eq!(bound_parameter(b"unnamed portal parameter $12 = '1'"), Some(12));
        assert_eq!(bound_parameter(b"unnamed portal parameter $1 = '1'\nPL/pgSQL function"), None);
    }

    #[test]
    fn ddl_clears_the_shapes_now_and_when_its_transaction_ends() {
        let mut sides = Sides::new();
        let old = sides.validate("SELECT 1");
        let mut ex = Exchange::new(Some(1));
        query(&mut ex, &mut sides, "BEGIN");
        reply(&mut ex, &mut sides, &[(b'C', b"BEGIN\0"), (b'Z', b"T")]);
        query(&mut ex, &mut sides, "ALTER TABLE t ADD COLUMN c int");
        reply(&mut ex, &mut sides, &[(b'C', b"ALTER TABLE\0"), (b'Z', b"T")]);
        assert!(sides.registry.shapes.is_empty());
        sides.validate("SELECT 1");
        query(&mut ex, &mut sides, "COMMIT");
        reply(&mut ex, &mut sides, &[(b'C', b"COMMIT\0"), (b'Z', b"I")]);
        assert!(sides.registry.shapes.is_empty(), "validated during the DDL's transaction: dropped");
        let new = sides.validate("SELECT 1");
        assert_ne!(old.server_name, new.server_name, "prepared afresh under a new name");
    }

    #[test]
    fn two_names_for_one_new_text_in_one_pipeline_prepare_it_once() {
        // Parse S_1 and S_2 of the same text before the server answered the
        // first: a second Parse under the same server name would fail (42P05).
        let mut sides = Sides::new();
        let mut ex = Exchange::default();
        let mut p = BytesMut::new();
        frontend::parse(&mut p, "S_1", "SELECT 1", &[]);
        frontend::parse(&mut p, "S_2", "SELECT 1", &[]);
        frontend::sync(&mut p);
        let mut to_server = BytesMut::new();
        let mut rest = p;
        while let Some(m) = split_message(&mut rest, 1 << 20).unwrap() {
            ex.from_client(m.tag, &whole(m.tag, &m.body), &mut sides.st(), &mut to_server);
        }
        assert_eq!(tags(&messages(to_server)), "PS");
        let got = reply(&mut ex, &mut sides, &[(b'1', b""), (b'Z', b"I")]);
        assert_eq!(tags(&got), "11Z", "both Parses answered, in order");
        assert!(sides.client.get("S_1").is_some() && sides.client.get("S_2").is_some());
    }

    const STALE: &[u8] = b"SERROR\0C0A000\0Mcached plan must not change result type\0RRevalidateCachedQuery\0\0";

    #[test]
    fn a_stale_plan_outside_a_transaction_runs_the_query_again_as_it_was() {
        let mut sides = Sides::new();
        sides.validate("SELECT * FROM t WHERE a = 1");
        let mut ex = Exchange::new(Some(1));
        assert_eq!(tags(&query(&mut ex, &mut sides, "SELECT * FROM t WHERE a = 1")), "PBDES");
        let got = reply(&mut ex, &mut sides, &[(b'1', b""), (b'E', STALE), (b'Z', b"I")]);
        assert!(got.is_empty(), "the client sees nothing of it: {got:?}");
        assert!(!ex.is_quiet(), "the plain query is owed");
        let mut resend = BytesMut::new();
        ex.take_for_server(&mut resend);
        let resend = messages(resend);
        assert_eq!(tags(&resend), "Q");
        assert_eq!(frontend::decode_query(&resend[0].1).unwrap(), "SELECT * FROM t WHERE a = 1");
        let got = reply(&mut ex, &mut sides, &[(b'T', b"\0\0"), (b'C', b"SELECT 0\0"), (b'Z', b"I")]);
        assert_eq!(tags(&got), "TCZ");
        assert!(ex.is_releasable());
        assert_eq!(sides.registry.stats().reruns, 1);
        assert!(sides.registry.shapes.is_empty(), "a stale plan clears the shapes");
    }

    #[test]
    fn a_stale_plan_in_a_transaction_block_is_the_clients_error() {
        let mut sides = Sides::new();
        sides.validate("SELECT * FROM t WHERE a = 1");
        let mut ex = Exchange::new(Some(1));
        query(&mut ex, &mut sides, "BEGIN");
        reply(&mut ex, &mut sides, &[(b'C', b"BEGIN\0"), (b'Z', b"T")]);
        query(&mut ex, &mut sides, "SELECT * FROM t WHERE a = 1");
        let got = reply(&mut ex, &mut sides, &[(b'1', b""), (b'E', STALE), (b'Z', b"E")]);
        assert_eq!(tags(&got), "EZ");
        let mut resend = BytesMut::new();
        ex.take_for_server(&mut resend);
        assert!(resend.is_empty());
    }

    #[test]
    fn the_unnamed_statement_is_the_registrys() {
        let mut sides = Sides::new();
        let mut ex = Exchange::new(Some(1));
        let parse = |ex: &mut Exchange, sides: &mut Sides| {
            let mut p = BytesMut::new();
            frontend::parse(&mut p, "", "SELECT $1::int", &[]);
            frontend::bind(&mut p, "", "", &[], [Some(&b"1"[..])].into_iter(), &[]);
            frontend::execute(&mut p, "", 0);
            frontend::sync(&mut p);
            let (mut to_server, mut to_client) = (BytesMut::new(), BytesMut::new());
            let mut rest = p;
            while let Some(m) = split_message(&mut rest, 1 << 20).unwrap() {
                ex.from_client(m.tag, &whole(m.tag, &m.body), &mut sides.st(), &mut to_server);
            }
            ex.client_messages_taken(&mut to_client);
            (messages(to_server), messages(to_client))
        };
        let (sent, answered) = parse(&mut ex, &mut sides);
        assert_eq!(tags(&sent), "PBES");
        assert!(answered.is_empty());
        let name = names::split_parse(&sent[0].1).unwrap().0.to_owned();
        assert!(name.starts_with("pglane_0_"), "{name}");
        assert_eq!(names::split_bind(&sent[1].1).unwrap().1, name);
        let got = reply(
            &mut ex,
            &mut sides,
            &[(b'1', b""), (b'2', b""), (b'D', b"\0\x01\0\0\0\x011"), (b'C', b"SELECT 1\0"), (b'Z', b"I")],
        );
        assert_eq!(tags(&got), "12DCZ");
        // Again, on another server connection: Parse answered here, prepared there on the way.
        ex.reset();
        sides.server = ServerStatements::new(100);
        let (sent, answered) = parse(&mut ex, &mut sides);
        assert!(answered.is_empty(), "the ParseComplete pglane gives waits for the server's reply: {answered:?}");
        assert_eq!(tags(&sent), "PBES", "the injected Parse of the shared statement");
        let got = reply(
            &mut ex,
            &mut sides,
            &[(b'1', b""), (b'2', b""), (b'D', b"\0\x01\0\0\0\x011"), (b'C', b"SELECT 1\0"), (b'Z', b"I")],
        );
        assert_eq!(tags(&got), "12DCZ", "pglane's ParseComplete, then the server's replies but its injected Parse's");
        assert_eq!(sides.registry.stats().unnamed_mapped, 2);
    }

    /// Sends the client's messages; returns what went to the server and what
    /// the client got at once.
    fn send(ex: &mut Exchange, sides: &mut Sides, mut messages_in: BytesMut) -> (Vec<(u8, Vec<u8>)>, Vec<(u8, Vec<u8>)>) {
        let (mut to_server, mut to_client) = (BytesMut::new(), BytesMut::new());
        while let Some(m) = split_message(&mut messages_in, 1 << 20).unwrap() {
            ex.from_client(m.tag, &whole(m.tag, &m.body), &mut sides.st(), &mut to_server);
        }
        ex.client_messages_taken(&mut to_client);
        (messages(to_server), messages(to_client))
    }

    /// A named Parse and Sync that the server answers: the client knows `name` after.
    fn prepare_named(ex: &mut Exchange, sides: &mut Sides, name: &str, sql: &str) {
        let mut p = BytesMut::new();
        frontend::parse(&mut p, name, sql, &[]);
        frontend::sync(&mut p);
        let (sent, _) = send(ex, sides, p);
        assert_eq!(tags(&sent), "PS");
        assert_eq!(tags(&reply(ex, sides, &[(b'1', b""), (b'Z', b"I")])), "1Z");
        assert!(sides.client.get(name).is_some());
    }

    /// psycopg's pipeline with an error in the middle, as it reached pglane
    /// in tests/drivers (psycopg_suite.py, "errors"): the server's error came
    /// while the client was still writing the pipeline. The Parse before it
    /// was skipped by the server, so the Bind after it must be too, not
    /// answered with pglane's own "does not exist": the client gets the one
    /// error, then ReadyForQuery, as from PostgreSQL.
    #[test]
    fn what_a_client_sends_after_the_servers_error_and_before_its_sync_is_skipped() {
        let mut sides = Sides::new();
        let mut ex = Exchange::new(None);
        let mut first = BytesMut::new();
        frontend::parse(&mut first, "_pg3_1", "select 1 / $1::int", &[]);
        frontend::bind(&mut first, "", "_pg3_1", &[], [Some(&b"0"[..])].into_iter(), &[]);
        frontend::execute(&mut first, "", 0);
        frontend::parse(&mut first, "_pg3_2", "select $1::int + 200", &[]);
        let (sent, answered) = send(&mut ex, &mut sides, first);
        assert_eq!(tags(&sent), "PBEP");
        assert!(answered.is_empty());
        let got =
            reply(&mut ex, &mut sides, &[(b'1', b""), (b'2', b""), (b'E', b"SERROR\0VERROR\0C22012\0Mdivision by zero\0\0")]);
        assert_eq!(tags(&got), "12E");
        assert!(sides.client.get("_pg3_2").is_none(), "the server skipped its Parse");
        let mut rest = BytesMut::new();
        frontend::bind(&mut rest, "", "_pg3_2", &[], [Some(&b"1"[..])].into_iter(), &[]);
        frontend::describe(&mut rest, Target::Portal, "");
        frontend::execute(&mut rest, "", 0);
        frontend::sync(&mut rest);
        let (sent, answered) = send(&mut ex, &mut sides, rest);
        assert_eq!(tags(&sent), "S", "the server skips all but the Sync anyway");
        assert!(answered.is_empty(), "no answer of pglane's own: {}", tags(&answered));
        assert_eq!(tags(&reply(&mut ex, &mut sides, &[(b'Z', b"I")])), "Z");
        assert!(ex.is_releasable());
        // The next request is served as usual.
        prepare_named(&mut ex, &mut sides, "_pg3_3", "select $1::int + 200");
    }

    /// psycopg's `DEALLOCATE _pg3_N`, as a simple query and as an unnamed
    /// statement, must not reach the server (which knows the statement by
    /// pglane's shared name, so it failed with 26000): only the client's
    /// name goes, and the client sees the DEALLOCATE's own replies.
    #[test]
    fn sql_deallocate_of_a_clients_statement_drops_only_its_name() {
        for extended in [false, true] {
            let mut sides = Sides::new();
            let mut ex = Exchange::new(None);
            prepare_named(&mut ex, &mut sides, "_pg3_0", "SELECT $1::int");

            let mut d = BytesMut::new();
            if extended {
                frontend::parse(&mut d, "", "DEALLOCATE _pg3_0", &[]);
                frontend::bind(&mut d, "", "", &[], std::iter::empty(), &[]);
                frontend::describe(&mut d, Target::Portal, "");
                frontend::execute(&mut d, "", 0);
                frontend::sync(&mut d);
            } else {
                frontend::query(&mut d, "DEALLOCATE _pg3_0");
            }
            let (sent, answered) = send(&mut ex, &mut sides, d);
            assert!(answered.is_empty());
            assert!(sides.client.get("_pg3_0").is_none(), "the client's name is gone");
            let got = if extended {
                assert_eq!(tags(&sent), "PBDES");
                assert_eq!(names::parse_query(names::split_parse(&sent[0].1).unwrap().1), "", "an empty statement instead");
                reply(&mut ex, &mut sides, &[(b'1', b""), (b'2', b""), (b'n', b""), (b'I', b""), (b'Z', b"T")])
            } else {
                assert_eq!(tags(&sent), "Q");
                assert_eq!(sent[0].1, b"\0", "an empty query instead");
                reply(&mut ex, &mut sides, &[(b'I', b""), (b'Z', b"T")])
            };
            let expected = if extended { "12nCZ" } else { "CZ" };
            assert_eq!(tags(&got), expected, "extended: {extended}");
            let complete = got.iter().find(|(t, _)| *t == b'C').unwrap();
            assert_eq!(complete.1, b"DEALLOCATE\0");
            assert_eq!(got.last().unwrap().1, b"T", "the server's transaction status");
            assert!(ex.is_quiet());

            // A name the client does not have passes through, to fail as on a direct connection.
            let mut d = BytesMut::new();
            frontend::query(&mut d, "DEALLOCATE _pg3_0");
            let (sent, _) = send(&mut ex, &mut sides, d);
            assert_eq!(sent[0].1, b"DEALLOCATE _pg3_0\0");
        }
    }

    /// Binds and runs `s1` (prepared by `prepare_and_describe_s1`) with a Sync.
    fn bind_execute_s1(ex: &mut Exchange, sides: &mut Sides) {
        let mut p = BytesMut::new();
        frontend::bind(&mut p, "", "s1", &[], [Some(&b"1"[..])].into_iter(), &[]);
        frontend::execute(&mut p, "", 0);
        frontend::sync(&mut p);
        send(ex, sides, p);
    }

    /// Server pipelining's rule: another client's request may go behind
    /// this one's only when what is in flight is whole, outside a
    /// transaction block, and leaves the session as it found it.
    #[test]
    fn only_a_whole_plain_request_outside_a_transaction_may_be_followed() {
        let mut sides = Sides::new();
        let mut ex = Exchange::new(None);
        assert!(!ex.may_be_followed(), "nothing in flight");
        prepare_and_describe_s1(&mut ex, &mut sides);
        bind_execute_s1(&mut ex, &mut sides);
        assert!(ex.may_be_followed(), "Bind, Execute, Sync of a plain SELECT");
        assert_eq!(ex.ready_due(), 1);
        let s1 = sides.client.get("s1").unwrap().clone();
        assert_eq!(ex.statements_in_flight().len(), 1);
        s1.slow_at.set(Some(crate::rt::now()));
        assert!(!ex.may_be_followed(), "it ran slowly with a request behind it just now");
        s1.slow_at.set(Some(crate::rt::now() - crate::pool::opening::SLOW_KEPT));
        assert!(ex.may_be_followed(), "the mark wore off");
        reply(&mut ex, &mut sides, &[(b'2', b""), (b'D', b"\0\x01\0\0\0\x01x"), (b'C', b"SELECT 1\0"), (b'Z', b"I")]);
        assert!(!ex.may_be_followed() && ex.is_releasable());

        // Not before the Sync.
        let mut p = BytesMut::new();
        frontend::bind(&mut p, "", "s1", &[], [Some(&b"1"[..])].into_iter(), &[]);
        frontend::execute(&mut p, "", 0);
        send(&mut ex, &mut sides, p);
        assert!(!ex.may_be_followed(), "no Sync yet");
        let mut p = BytesMut::new();
        frontend::sync(&mut p);
        send(&mut ex, &mut sides, p);
        assert!(ex.may_be_followed());
        reply(&mut ex, &mut sides, &[(b'2', b""), (b'C', b"SELECT 0\0"), (b'Z', b"I")]);

        // Not while a Parse is unanswered: its failure would change the
        // connection's statements.
        let mut p = BytesMut::new();
        frontend::parse(&mut p, "s2", "SELECT 2", &[]);
        frontend::sync(&mut p);
        send(&mut ex, &mut sides, p);
        assert!(!ex.may_be_followed(), "a Parse in flight");
        reply(&mut ex, &mut sides, &[(b'1', b""), (b'Z', b"I")]);

        // Not inside a transaction block.
        assert_eq!(tags(&query(&mut ex, &mut sides, "BEGIN")), "Q");
        assert!(!ex.may_be_followed(), "a simple query passed through");
        reply(&mut ex, &mut sides, &[(b'C', b"BEGIN\0"), (b'Z', b"T")]);
        bind_execute_s1(&mut ex, &mut sides);
        assert!(!ex.may_be_followed(), "in a transaction block");
        reply(&mut ex, &mut sides, &[(b'2', b""), (b'C', b"SELECT 0\0"), (b'Z', b"T")]);
        query(&mut ex, &mut sides, "COMMIT");
        reply(&mut ex, &mut sides, &[(b'C', b"COMMIT\0"), (b'Z', b"I")]);

        // Not a statement that may change the session.
        let mut p = BytesMut::new();
        frontend::parse(&mut p, "s3", "SELECT set_config('a.b', $1, false)", &[25]);
        frontend::sync(&mut p);
        send(&mut ex, &mut sides, p);
        reply(&mut ex, &mut sides, &[(b'1', b""), (b'Z', b"I")]);
        let mut p = BytesMut::new();
        frontend::bind(&mut p, "", "s3", &[], [Some(&b"x"[..])].into_iter(), &[]);
        frontend::execute(&mut p, "", 0);
        frontend::sync(&mut p);
        send(&mut ex, &mut sides, p);
        assert!(!ex.may_be_followed(), "set_config");
    }

    /// With pipelining on, requests passed through as the client sent them
    /// (simple queries, the unnamed statement without auto-prepare) may be
    /// followed too when their text leaves the session alone.
    #[test]
    fn a_plain_request_passed_through_may_be_followed() {
        let mut sides = Sides::new();
        let mut ex = Exchange::new(None).with_pipelining();
        let answer = [(b'T', &b"\0\0"[..]), (b'C', b"SELECT 0\0"), (b'Z', b"I")];
        query(&mut ex, &mut sides, "SELECT abalance FROM pgbench_accounts WHERE aid = 7");
        assert!(ex.may_be_followed(), "a plain simple query");
        assert_eq!(ex.ready_due(), 1);
        reply(&mut ex, &mut sides, &answer);
        for sql in [
            "SELECT 1 INTO t",
            "CREATE TABLE t (a int)",
            "SELECT set_config('a.b', 'c', false)",
            "BEGIN; SELECT 1",
            "SET work_mem = '1MB'",
        ] {
            query(&mut ex, &mut sides, sql);
            assert!(!ex.may_be_followed(), "{sql}");
            reply(&mut ex, &mut sides, &[(b'C', b"SELECT 0\0"), (b'Z', b"I")]);
        }

        // The unnamed statement, as pgbench -M extended sends it.
        let unnamed = |sql: &str| {
            let mut p = BytesMut::new();
            frontend::parse(&mut p, "", sql, &[]);
            frontend::bind(&mut p, "", "", &[], [Some(&b"1"[..])].into_iter(), &[]);
            frontend::describe(&mut p, Target::Portal, "");
            frontend::execute(&mut p, "", 0);
            frontend::sync(&mut p);
            p
        };
        let answer = [(b'1', &b""[..]), (b'2', b""), (b'n', b""), (b'C', b"UPDATE 0\0"), (b'Z', b"I")];
        for round in 0..2 {
            // The second time its text is known quiet, and so is its answer.
            send(&mut ex, &mut sides, unnamed("UPDATE t SET a = a + 1 WHERE a = $1"));
            assert!(ex.may_be_followed(), "a plain unnamed statement, round {round}");
            reply(&mut ex, &mut sides, &answer);
            send(&mut ex, &mut sides, unnamed("CREATE TABLE t (a int)"));
            assert!(!ex.may_be_followed(), "DDL, round {round}");
            reply(&mut ex, &mut sides, &answer);
        }

        // A Bind of an unnamed statement Parsed earlier is as plain as that
        // statement was, whatever is Parsed after it.
        let mut p = BytesMut::new();
        frontend::bind(&mut p, "", "", &[], [Some(&b"1"[..])].into_iter(), &[]);
        frontend::execute(&mut p, "", 0);
        p.extend_from_slice(&unnamed("SELECT $1::int"));
        send(&mut ex, &mut sides, p);
        assert!(!ex.may_be_followed(), "the first Bind runs the CREATE TABLE");
        reply(&mut ex, &mut sides, &[(b'2', b""), (b'C', b"CREATE TABLE\0")]);
        reply(&mut ex, &mut sides, &answer);

        // A client whose request ran slowly with another behind it.
        ex.ran_slowly();
        query(&mut ex, &mut sides, "SELECT 1");
        assert!(!ex.may_be_followed(), "it ran slowly just now");
        ex.slow_at = Some(crate::rt::now() - crate::pool::opening::SLOW_KEPT);
        assert!(ex.may_be_followed(), "the mark wore off");
        reply(&mut ex, &mut sides, &[(b'C', b"SELECT 1\0"), (b'Z', b"I")]);

        // Without pipelining nothing is scanned for it.
        let mut ex = Exchange::new(None);
        query(&mut ex, &mut sides, "SELECT 1");
        assert!(!ex.may_be_followed());
    }

    /// A rewritten simple query, once followed, is not run again after a
    /// stale plan (the request behind it is already on the server): the
    /// client gets the error, as a client that pipelined would.
    #[test]
    fn a_followed_rewritten_query_is_not_run_again() {
        let mut sides = Sides::new();
        let sql = "SELECT v FROM t WHERE id = 1";
        let mut ex = Exchange::new(Some(0));
        for followed in [false, true] {
            // The shape is validated (again: a stale plan retires it), and
            // a first run prepares it on the server connection.
            sides.validate(sql);
            let first = tags(&query(&mut ex, &mut sides, sql));
            assert!(!ex.may_be_followed(), "its Parse is in flight");
            let mut replies: Vec<(u8, &[u8])> = Vec::new();
            if first.starts_with('C') {
                replies.push((b'3', b"")); // the stale statement's close
            }
            replies.extend([(b'1', &b""[..]), (b'2', b""), (b'n', b""), (b'C', b"SELECT 0\0"), (b'Z', b"I")]);
            assert!(first.ends_with("PBDES"), "{first}");
            reply(&mut ex, &mut sides, &replies);

            assert_eq!(tags(&query(&mut ex, &mut sides, sql)), "BDES");
            assert!(ex.may_be_followed(), "a rewritten plain query");
            ex.followed = followed;
            let stale = b"SERROR\0C0A000\0Mcached plan must not change result type\0RRevalidateCachedQuery\0\0";
            let got = reply(&mut ex, &mut sides, &[(b'E', stale), (b'Z', b"I")]);
            let mut to_server = BytesMut::new();
            ex.take_for_server(&mut to_server);
            if followed {
                assert_eq!(tags(&got), "EZ");
                assert!(to_server.is_empty());
            } else {
                assert_eq!(tags(&got), "");
                assert_eq!(tags(&messages(to_server)), "Q");
                reply(&mut ex, &mut sides, &[(b'C', b"SELECT 0\0"), (b'Z', b"I")]);
            }
            ex.reset();
        }
    }

    /// The client prepares and describes `s1` (one int4 parameter, one int4
    /// column `v`) on its first server connection, which the server accepts.
    fn prepare_and_describe_s1(ex: &mut Exchange, sides: &mut Sides) {
        let mut p = BytesMut::new();
        frontend::parse(&mut p, "s1", "SELECT v FROM t WHERE id = $1", &[23]);
        frontend::describe(&mut p, Target::Statement, "s1");
        frontend::sync(&mut p);
        let (sent, _) = send(ex, sides, p);
        assert_eq!(tags(&sent), "PDS");
        let int4 = row_description_body(23);
        let got = reply(ex, sides, &[(b'1', b""), (b't', b"\0\x01\0\0\0\x17"), (b'T', &int4), (b'Z', b"I")]);
        assert_eq!(tags(&got), "1tTZ");
    }

    fn row_description_body(type_oid: u32) -> Vec<u8> {
        let mut rd = BytesMut::new();
        let field = backend::FieldDescription {
            name: "v".into(),
            table_oid: 16384,
            column: 2,
            type_oid,
            type_size: -1,
            type_modifier: -1,
            format: 0,
        };
        backend::row_description(&mut rd, &[field]);
        rd[HEADER_LEN..].to_vec()
    }

    /// A client's described statement, prepared lazily on another server
    /// connection after DDL changed its result type (int4 → text), must fail
    /// as PostgreSQL's cached plan does (0A000, RevalidateCachedQuery, which
    /// makes asyncpg and pgjdbc prepare it again), not run with a result the
    /// client decodes by the old description. The client's Bind waits for
    /// pglane's Describe; with an unchanged result it then goes on as sent.
    #[test]
    fn a_lazily_prepared_statement_must_keep_its_result_type() {
        for changed in [true, false] {
            let mut sides = Sides::new();
            let mut ex = Exchange::new(None);
            prepare_and_describe_s1(&mut ex, &mut sides);

            // Another server connection, after DDL.
            ex.reset();
            sides.server = ServerStatements::new(100);
            let mut b = BytesMut::new();
            frontend::bind(&mut b, "", "s1", &[], [Some(&b"1"[..])].into_iter(), &[1]);
            frontend::execute(&mut b, "", 0);
            frontend::sync(&mut b);
            let (sent, answered) = send(&mut ex, &mut sides, b);
            assert!(answered.is_empty());
            assert_eq!(tags(&sent), "PDH", "Parse, pglane's Describe and Flush; the Bind waits");
            assert!(ex.held_len() > 0, "the held Bind, Execute and Sync count against the relay's high-water mark");
            let new_type = row_description_body(if changed { 25 } else { 23 });
            let got = reply(&mut ex, &mut sides, &[(b'1', b""), (b't', b"\0\x01\0\0\0\x17"), (b'T', &new_type)]);
            let mut then = BytesMut::new();
            ex.take_for_server(&mut then);
            let then = messages(then);
            assert!(got.is_empty());
            assert_eq!(ex.held_len(), 0, "released");
            if changed {
                assert_eq!(tags(&then), "EBES", "a failing Execute ahead of the held messages");
                let got = reply(&mut ex, &mut sides, &[(b'E', b"SERROR\0C34000\0Mportal does not exist\0\0"), (b'Z', b"I")]);
                assert_eq!(tags(&got), "EZ");
                let e = backend::decode_error_fields(&got[0].1).unwrap();
                assert_eq!(
                    (e.code.as_str(), e.message.as_str()),
                    ("0A000", "cached plan must not change result type"),
                    "not the server's own error"
                );
                assert!(got[0].1.windows(22).any(|w| w == b"RRevalidateCachedQuery"));
                assert!(ex.is_quiet());
                // Preparing the text again gives a fresh statement.
                let mut p = BytesMut::new();
                frontend::parse(&mut p, "s2", "SELECT v FROM t WHERE id = $1", &[23]);
                let (sent, _) = send(&mut ex, &mut sides, p);
                assert_eq!(tags(&sent), "CP", "the stale server statement is closed");
                let (closed, parsed) = (names::split_target(&sent[0].1).unwrap().1, names::split_parse(&sent[1].1).unwrap().0);
                assert_ne!(closed, parsed);
            } else {
                assert_eq!(tags(&then), "BES", "the held messages, unchanged");
                let got = reply(&mut ex, &mut sides, &[(b'2', b""), (b'C', b"SELECT 0\0"), (b'Z', b"I")]);
                assert_eq!(tags(&got), "2CZ");
                assert!(ex.is_quiet());
            }
        }
    }
}
