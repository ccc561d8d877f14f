//! What passes between one client and the server connection it holds, message
//! by message: which replies the server owes, which of them the client must
//! not see, and which pglane answers itself. Pure: bytes in, bytes out.
//!
//! This module matches replies to requests and owns the queue of what is
//! due. Replies are matched in order, so the requests pglane injects can be
//! dropped and its own answers slotted in where the client expects them;
//! after an ErrorResponse the server skips everything up to Sync, and the
//! bookkeeping of what it skipped is undone (a failed Parse prepared
//! nothing). What a request *means* is decided by the concerns around it,
//! each in its own file:
//!
//! - [`statements`]: the client's statement names and the Describe cache
//!   (named statements renamed to the shard's shared ones, the unnamed
//!   statement mapped or passed through);
//! - [`rewrite`]: auto-prepare, a simple query run as a validated shape's
//!   statement, and its errors mapped back to the client's text;
//! - [`session`]: the hooks of session state: settings followed and
//!   aligned, pinning, the context statements are keyed by, DDL seen;
//! - [`negotiation`]: binary format negotiation of a portal;
//! - [`pipelining`]: whether another client's request may go right behind
//!   this one's on the same server connection;
//! - [`replay`]: a request sent again when the statement its Parse was
//!   mapped onto turned out stale on the server.
//!
//! The queue itself is [`queue`]'s.

mod negotiation;
mod pipelining;
mod queue;
mod replay;
mod rewrite;
mod session;
mod statements;
#[cfg(test)]
mod tests;

use std::cell::RefCell;
use std::collections::VecDeque;
use std::rc::Rc;

use bytes::{Bytes, BytesMut};

pub use super::negotiate::Negotiation;
use super::negotiate::{self, NegotiateError, Negotiator, Plan, PlanMemo};
use super::pinning::SessionFeature;
use super::quiet::QuietTexts;
use super::tracker::Tracker;
use crate::prepare::{ClientStatements, Registry, ServerStatements, Statement};
use crate::protocol::backend::{self, ErrorFields};
use crate::protocol::frame::HEADER_LEN;
use crate::protocol::frontend::{self, Target};
use crate::protocol::names;
use crate::server::{ConnectionOutput, ServerSession};
use crate::settings::{Change, Settings};
use queue::DueQueue;
use replay::Replay;
use rewrite::{AutoPolicy, AutoPrepare};
use session::{changes_schema, Contexts};
pub use statements::StatementCounts;
use statements::{is_stale_statement, stale_result_error, ClientName, Unnamed};

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
    /// How the connection prints values: for negotiation, and for a client
    /// whose request goes behind this one's (`pool::Opening`).
    pub server_output: &'a Rc<ConnectionOutput>,
    /// The largest DataRow a negotiated portal may have held whole
    /// (max_message_size); `None` when binary negotiation does not apply.
    pub negotiate_rows_up_to: Option<usize>,
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
            negotiation: self.negotiate_rows_up_to.map(|max_row| Negotiation { output: self.server_output, max_row }),
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
    /// `parsed` is what to take back if the server skips or refuses it.
    /// `plain`: of the unnamed statement, passed through, with a text that
    /// [`pinning::leaves_session_alone`] (worked out with server pipelining
    /// only; see [`Exchange::may_be_followed`]).
    Parse {
        parsed: Parsed,
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
    /// the client's (in text, when `plan` negotiated it), its NoData is not,
    /// but is noted for the statement's copy `bound` (id, `prepared_at`) on
    /// this connection, whose portals are then not described again (see
    /// `rewrite`).
    QueryDescribe {
        plan: Option<Rc<Plan>>,
        bound: Option<(u64, u64)>,
    },
    /// `evicted` names a statement pglane closed to make room.
    Close {
        evicted: Option<Rc<str>>,
    },
    /// pglane's Describe of a statement it just prepared on this server
    /// connection, while clients hold its description `expected` (see
    /// `statements`).
    Check {
        statement: Rc<Statement>,
        expected: Bytes,
        check: Check,
    },
    /// An Execute of no portal, sent to make the server fail (and skip to
    /// Sync) where a changed result type fails on a direct connection; its
    /// error reaches the client as 0A000.
    StaleResult,
    /// `plan`: the portal was negotiated, its DataRows are transcoded.
    /// `rows_of`: the statement whose row record its rows update.
    /// `changes`: the settings the portal changes (a SET pglane follows),
    /// recorded when it completes.
    Execute {
        plan: Option<Rc<Plan>>,
        rows_of: Option<Rc<Statement>>,
        changes: Option<Rc<[Change]>>,
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
    /// A simple query pglane runs for itself, whose replies the client
    /// never sees.
    Hidden(Hidden),
}

/// What a query pglane runs for itself is, and what its failure means.
#[derive(Debug)]
enum Hidden {
    /// `DISCARD SEQUENCES`, or an alignment of settings no timeout the
    /// connection has could cancel: an error ends the session.
    Once,
    /// `SET statement_timeout = 0` ahead of an alignment the client's
    /// messages wait behind: if the old timeout cancels even this, the
    /// alignment behind it is run again if cancelled too.
    LiftTimeout,
    /// An alignment the client's messages wait behind (see
    /// [`Exchange::align_settings`]): run again, behind a
    /// [`Hidden::LiftTimeout`], if a cancel stops it.
    Alignment(Box<Again>),
}

/// An alignment to run again if it is cancelled, while tries are left.
#[derive(Debug)]
pub(super) struct Again {
    pub sql: String,
    pub tries_left: u8,
}

impl Due {
    /// The client's messages wait for its answer (`Exchange::holding`).
    fn holds_the_client(&self) -> bool {
        matches!(
            self,
            Due::Server { request: Request::Check { check: Check::Parse(_) | Check::Use, .. }, .. }
                | Due::Server { request: Request::Hidden(Hidden::LiftTimeout | Hidden::Alignment(_)), .. }
        )
    }

    /// The server answers it with a ReadyForQuery (a Sync, or a request of
    /// the simple protocol), which ends what the server skips after an error.
    fn ends_request(&self) -> bool {
        matches!(
            self,
            Due::Server {
                request: Request::Sync { .. }
                    | Request::Query { .. }
                    | Request::Hidden(_)
                    | Request::Deallocate { execute: false }
                    | Request::FunctionCall,
                ..
            }
        )
    }
}

/// Why pglane checks a statement's description on a server connection, and
/// what it does if the description changed (see `statements`).
#[derive(Debug, Clone, PartialEq, Eq)]
enum Check {
    /// The client parses it now under this name: the name becomes a fresh
    /// statement. The client's messages wait for the answer.
    Parse(ClientName),
    /// An old statement of the client's, for its Bind or Describe: its
    /// result must not have changed (else 0A000). The messages wait.
    Use,
    /// For a rewritten simple query, whose reply no description decides:
    /// nothing waits; a change only retires the statement.
    Verify,
}

/// What a Parse did to pglane's bookkeeping, taken back if the server
/// refuses or skips it.
#[derive(Debug)]
enum Parsed {
    /// A registry statement, now on this server connection. `name`: the
    /// client's name it was parsed under (None: pglane parses it for a Bind
    /// or Describe). `previous`: the client's unnamed statement before, when
    /// this is its Parse of the unnamed statement.
    Statement { statement: Rc<Statement>, name: Option<ClientName>, previous: Option<Unnamed> },
    /// The client's own unnamed statement, passed through; `previous` is
    /// what it was before.
    Unnamed { previous: Unnamed },
    /// pglane parses the client's own unnamed statement again here.
    Nothing,
}

#[derive(Debug)]
enum Local {
    /// The client's Parse of `statement` under `name`, which this server
    /// connection has already; `previous` as for [`Parsed::Statement`].
    ParseComplete {
        name: ClientName,
        statement: Rc<Statement>,
        previous: Option<Unnamed>,
    },
    CloseComplete {
        restore: Option<(String, Rc<Statement>)>,
    },
    Description(Bytes),
    Error(ErrorFields),
}

#[derive(Default)]
pub struct Exchange {
    pub tracker: Tracker,
    due: DueQueue,
    /// pglane raised an error itself: drop client messages until Sync, as
    /// PostgreSQL would.
    skip_to_sync: bool,
    /// The ParameterDescription of a statement Describe being cached or
    /// checked.
    describing: BytesMut,
    /// Followed changes of settings the client sent, recorded once they
    /// succeed outside a transaction block.
    pending_changes: Vec<Change>,
    /// The portals bound from statements that change settings pglane
    /// follows (a SET over the extended protocol), and their changes.
    portal_changes: Vec<(String, Rc<[Change]>)>,
    /// What the client's unnamed statement is.
    unnamed: Unnamed,
    /// The server's unnamed statement is an empty query standing for the
    /// client's `DEALLOCATE name`, and this portal (if any) was bound from it.
    deallocate_unnamed: bool,
    deallocate_portal: Option<String>,
    /// The client's messages, as it sent them, wait here while a
    /// [`Request::Check`] is unanswered (`holding`), and are translated
    /// once it is.
    held: BytesMut,
    holding: bool,
    /// The client used session state that cannot follow it to another
    /// server connection: it keeps this one until it leaves (see [`pinning`]).
    pub pinned: Option<SessionFeature>,
    /// A request that may change a setting is unanswered: the client's
    /// settings are not known exactly until its transaction ends.
    settings_in_flux: bool,
    /// The contexts the client's statements are keyed by, for its settings
    /// of now (worked out again when they change).
    contexts: Option<Contexts>,
    /// DDL ran since the last ReadyForQuery 'I'.
    ddl_pending: bool,
    /// Auto-prepare's policy for this client; None when it is off.
    auto: Option<AutoPolicy>,
    /// Its rewritten queries' working state, lent with the server-side
    /// buffers (see [`InFlight`]); made on first use if none was lent.
    rewriting: Option<Box<AutoPrepare>>,
    /// Negotiated plans made lately, lent the same way (see [`PlanMemo`]).
    plans: Option<Box<PlanMemo>>,
    /// The client's statements are its own on its server connection
    /// (session mode): its messages pass through as sent
    /// ([`Exchange::passing_through`]). Else they are the pool's, shared.
    passes_through: bool,
    /// Texts this client sent that no scan found anything in.
    quiet: QuietTexts<statements::TextFacts>,
    /// Messages for the server that a server message caused (a rewritten
    /// query run again as it was, held messages translated after a check);
    /// see [`Exchange::take_for_server`].
    for_server: BytesMut,
    /// Binary format negotiation of this client's portals.
    negotiator: Negotiator,
    /// Named statements parsed and bound since the pool last took them
    /// ([`Exchange::take_statement_counts`]).
    counts: StatementCounts,
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
    /// The client's last request, kept while it may have to be sent again
    /// (see [`replay`]).
    replay: Replay,
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
    /// A text of this client's read the session's sequence state (`lastval`,
    /// `currval`; see [`Exchange::sequences_may_be_foreign`]). Kept for the
    /// client's whole session.
    reads_sequences: bool,
    /// The server connection's sequence state may be another client's and
    /// nothing of this client's that could change it has run on it in this
    /// transaction yet: a text that reads it gets `DISCARD SEQUENCES` ahead
    /// of it.
    sequences_foreign: bool,
    /// A cancel stopped the hidden query being answered, which runs again at
    /// its ReadyForQuery (see [`Request::Hidden`]).
    hidden_cancelled: bool,
    /// The client listens through the notification hub: its texts' UNLISTENs
    /// are followed (set by the session before each transaction).
    pub follows_unlistens: bool,
    /// A LISTEN in the client's simple queries is followed, not pinned for
    /// (transaction mode: [`Exchange::new`]).
    follows_listens: bool,
    /// Those LISTENs and UNLISTENs, until their transaction ends
    /// (`notify::follow`).
    registrations: crate::notify::follow::Registrations,
    /// A text that LISTENs, translated, waits here until the session has
    /// subscribed to its channels ahead ([`Exchange::hub_listened`]); the
    /// client's messages after it are held (`holding`) meanwhile.
    hub_hold: Option<BytesMut>,
    /// A followed LISTEN went to this server connection: it runs `UNLISTEN
    /// *` before another client gets it.
    pub left_listening: bool,
    /// The channels of those LISTENs, which the hub delivers to the client:
    /// what the server connection sends of them is dropped.
    hub_channels: Vec<String>,
    /// The session keeps statements of the client's that the exchange does
    /// not know (`client::notifications`): Closes of names it does not know,
    /// and DISCARD ALL, are noted for it (set before each transaction).
    pub notes_foreign_closes: bool,
    foreign_closes: ForeignCloses,
}

/// Closes of statements the exchange did not know, noted for their owner
/// ([`Exchange::take_foreign_closes`]).
#[derive(Debug, Default)]
pub struct ForeignCloses {
    pub names: Vec<String>,
    /// Every statement was forgotten (DISCARD ALL, DEALLOCATE ALL).
    pub all: bool,
}

/// SQLSTATE of a statement cancelled by statement_timeout or a cancel request.
const QUERY_CANCELED: &str = "57014";

/// How often a hidden query a cancel stopped is run again before the
/// session ends (see [`Request::Hidden`]).
const HIDDEN_TRIES: u8 = 3;

/// The room kept in an exchange's queue of what is due from one transaction
/// to the next (a transaction's own requests fit several times over).
const DUE_KEPT: usize = 64;

/// What an exchange needs only while its client holds a server connection:
/// the room of its queue of what is due, and auto-prepare's working state.
/// Lent by the shard with the server-side buffers (`client::ServerSide`), so
/// that an idle client holds none of it and a busy one allocates none of it
/// per transaction.
#[derive(Default)]
pub struct InFlight {
    due: VecDeque<Due>,
    rewriting: Option<Box<AutoPrepare>>,
    plans: Option<Box<PlanMemo>>,
}

impl InFlight {
    /// The bytes its buffers hold (auto-prepare's lexer keeps a query's
    /// literal values, whatever their size, until the next query).
    pub fn retained_bytes(&self) -> usize {
        self.rewriting.as_ref().map_or(0, |r| r.retained_bytes()) + self.plans.as_ref().map_or(0, |p| p.retained_bytes())
    }
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
    /// of a new shape before it is validated), None to leave queries alone. It
    /// follows LISTENs (transaction mode: see `notify::follow`).
    pub fn new(auto_prepare: Option<u32>) -> Exchange {
        Exchange {
            auto: auto_prepare.map(|after| AutoPolicy { after, looked_at: 0 }),
            follows_listens: true,
            ..Exchange::default()
        }
    }

    /// Takes in the lent part of an exchange, with the server-side buffers
    /// of a transaction about to start (see [`InFlight`]).
    pub fn attach(&mut self, lent: InFlight) {
        self.due.take_room(lent.due);
        if self.rewriting.is_none() {
            self.rewriting = lent.rewriting;
        }
        if self.plans.is_none() {
            self.plans = lent.plans;
        }
    }

    /// Gives the lent part back when the server connection goes, unless
    /// something of the conversation is still in it (a connection closed
    /// mid-conversation): then it stays with the client, as it was.
    pub fn park(&mut self) -> InFlight {
        let due = self.due.give_room();
        let idle = self.rewriting.as_ref().is_some_and(|r| r.running.is_empty());
        InFlight { due, rewriting: if idle { self.rewriting.take() } else { None }, plans: self.plans.take() }
    }

    /// The client's unnamed statement is none pglane has (pglane answered
    /// its Parse itself, see `notify::request`).
    pub fn forget_unnamed(&mut self) {
        self.unnamed = Unnamed::None;
    }

    /// The Closes of statements it did not know since the last call, while
    /// [`Exchange::notes_foreign_closes`].
    pub fn take_foreign_closes(&mut self) -> ForeignCloses {
        std::mem::take(&mut self.foreign_closes)
    }

    /// What the client's LISTENs and UNLISTENs sent to a server came to,
    /// once their transactions ended (see `notify::follow`), if any since
    /// last asked.
    pub fn take_listen_outcomes(&mut self) -> Option<Vec<crate::notify::follow::Outcome>> {
        self.registrations.take_ended()
    }

    /// The channels of the LISTENs just sent, for the session to subscribe
    /// to ahead; the text waits for [`Exchange::hub_listened`].
    pub fn take_sent_listens(&mut self) -> Option<Vec<String>> {
        self.registrations.take_sent_listens()
    }

    /// The hub could not LISTEN to `channel`, which a text LISTENs to: the
    /// client keeps this server connection, which delivers its
    /// notifications of it.
    pub fn hub_refused(&mut self, channel: &str) {
        self.pin(Some(SessionFeature::Listen));
        self.hub_channels.retain(|c| c != channel);
    }

    /// The hub delivers this server notification (`body`) to the client.
    fn hub_delivers(&self, body: &[u8]) -> bool {
        !self.hub_channels.is_empty()
            && backend::decode_notification_channel(body).is_ok_and(|channel| self.hub_channels.iter().any(|c| c == channel))
    }

    /// A text that LISTENs waits for the hub ([`Exchange::hub_listened`]).
    #[inline]
    pub fn awaits_hub(&self) -> bool {
        self.hub_hold.is_some()
    }

    /// The hub listens to the channels of the text that waited: it goes
    /// to the server, and the client's messages held behind it are
    /// translated (into [`Exchange::take_for_server`]'s buffer).
    pub fn hub_listened(&mut self, st: &mut Statements<'_>) {
        let Some(text) = self.hub_hold.take() else { return };
        self.for_server.extend_from_slice(&text);
        self.release_held_if_free(st);
    }

    /// The named statements counted since the last call, for the pool's
    /// figures.
    pub fn take_statement_counts(&mut self) -> StatementCounts {
        std::mem::take(&mut self.counts)
    }

    /// Auto-prepare's working state, made if none was lent.
    fn rewriting(&mut self) -> &mut AutoPrepare {
        self.rewriting.get_or_insert_with(Default::default)
    }

    /// An exchange that renames, shares and rewrites nothing: every message
    /// goes to the server as the client sent it, for a client that keeps its
    /// server connection (session mode). Replies are still matched, for the
    /// relay to know where the conversation stands, and the settings the
    /// client changes are still followed (pglane applies its startup
    /// settings with SET, so a RESET must go back to them, as on PostgreSQL).
    pub fn passing_through() -> Exchange {
        Exchange { passes_through: true, ..Exchange::default() }
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
            pending_changes,
            portal_changes,
            unnamed,
            deallocate_unnamed,
            deallocate_portal,
            held,
            holding,
            pinned,
            settings_in_flux,
            contexts: _,
            ddl_pending,
            auto: _,
            rewriting,
            // Each plan is kept with everything it was made from, the
            // connection's text settings too: nothing of it is about this
            // server connection.
            plans: _,
            passes_through: _,
            quiet: _,
            for_server,
            negotiator,
            counts: _,
            failure,
            realign,
            resetting,
            followed,
            replay,
            pipelining: _,
            slow_at: _,
            reads_sequences: _,
            sequences_foreign,
            hidden_cancelled,
            follows_unlistens: _,
            follows_listens: _,
            registrations,
            hub_hold,
            left_listening,
            hub_channels,
            notes_foreign_closes: _,
            // Kept: the session's to take once its transaction is over.
            foreign_closes: _,
        } = self;
        *tracker = Tracker::default();
        due.clear(DUE_KEPT);
        *skip_to_sync = false;
        *describing = BytesMut::new();
        pending_changes.clear();
        portal_changes.clear();
        // The client's unnamed statement stays its own; this server
        // connection's copy is not its to use any more.
        unnamed.left_server();
        *deallocate_unnamed = false;
        *deallocate_portal = None;
        *held = BytesMut::new();
        *holding = false;
        *pinned = None;
        *settings_in_flux = false;
        *ddl_pending = false;
        if let Some(a) = rewriting.as_mut() {
            while !a.running.is_empty() {
                a.finished();
            }
        }
        *for_server = BytesMut::new();
        negotiator.clear();
        *failure = None;
        *realign = false;
        *resetting = false;
        *followed = false;
        replay.clear();
        *sequences_foreign = false;
        *hidden_cancelled = false;
        // A transaction left on that connection did not commit; what did
        // commit is still the session's to take.
        registrations.abort();
        if *left_listening {
            *hub_hold = None;
            *left_listening = false;
            hub_channels.clear();
        }
    }

    /// Bytes of the client's messages held back while a result type is
    /// checked: the relay stops reading from the client while they and its
    /// output to the server pass its high-water mark, so a client that
    /// pipelines during the check cannot grow them without bound.
    #[inline]
    pub fn held_len(&self) -> usize {
        self.held.len()
    }

    /// The client's messages wait behind a query of pglane's own (see
    /// [`Exchange::align_settings`]): none of its request is on the server.
    pub fn waits_behind_pglane(&self) -> bool {
        self.hub_hold.is_some()
            || self.holding
                && self.due.iter().any(|d| matches!(d, Due::Server { request: Request::Hidden(Hidden::Alignment(_)), .. }))
    }

    /// ReadyForQuery messages the server still owes for what was sent.
    pub fn ready_due(&self) -> usize {
        self.due.iter().filter(|d| d.ends_request()).count()
    }

    /// Answers still due, pglane's own included: each is an entry of the
    /// queue that the relay keeps short (`relay::MAX_IN_FLIGHT`).
    #[inline]
    pub fn due_len(&self) -> usize {
        self.due.len()
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
            self.held.extend_from_slice(message);
            return;
        }
        self.from_client_now(tag, message, st, to_server);
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
            if self.align_settings(st.client_settings, st.server_settings, self.pinned.is_some(), to_server) {
                self.held.extend_from_slice(message);
                return;
            }
        }
        let body = &message[HEADER_LEN..];
        self.replay.client_sent(tag, message);
        if tag == frontend::BIND {
            self.note_bind(body);
        }
        // psycopg's BEGIN, a SET: the connection's sequence state is as it
        // was (a simple query's text is looked at below).
        let mut sequences_kept = false;
        let start = to_server.len();
        let forwarded = match tag {
            frontend::BIND | frontend::DESCRIBE | frontend::CLOSE if self.passes_through => {
                self.pass_through(tag, message, to_server)
            }
            frontend::PARSE => {
                let forwarded = self.parse(message, body, st, to_server);
                if !forwarded {
                    self.may_replay(message);
                }
                forwarded
            }
            frontend::BIND => self.bind(message, body, st, to_server),
            frontend::DESCRIBE => match names::split_target(body) {
                Ok((Target::Statement, name)) => self.describe_statement(message, name, st, to_server),
                Ok((Target::Portal, name)) => {
                    let portal = self.negotiator.plan(name);
                    self.pass_request(message, to_server, Request::Describe { cache: None, portal })
                }
                Err(_) => self.pass_request(message, to_server, Request::Describe { cache: None, portal: None }),
            },
            frontend::CLOSE => match names::split_target(body) {
                Ok((Target::Statement, name)) => self.close_statement(message, name, st, to_server),
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
                    let (portal, changes) = match decoded {
                        Ok((portal, _)) => {
                            let changes = self.portal_changes.iter().find(|(p, _)| p == portal).map(|(_, c)| c.clone());
                            (self.negotiator.portal(portal), changes)
                        }
                        Err(_) => (Default::default(), None),
                    };
                    let request = Request::Execute { plan: portal.plan, rows_of: portal.rows_of, changes };
                    self.pass_request(message, to_server, request)
                }
            },
            frontend::SYNC => self.pass_request(message, to_server, Request::Sync { rewritten: false }),
            frontend::QUERY => {
                self.simple_query_sent();
                let mut plain = false;
                let sql = frontend::decode_query(body).ok();
                sequences_kept = self.sequences_foreign && sql.is_some_and(session::leaves_sequences_alone);
                if let Some(sql) = sql {
                    let watched = self.watch_text(sql, st);
                    if watched.reads_sequences {
                        self.forget_foreign_sequences(to_server);
                    }
                    plain = watched.plain;
                    self.resetting = watched.resets.only;
                    match watched.changes {
                        Some(changes) => self.pending_changes = changes,
                        // RESET ALL among other statements (asyncpg's pool reset):
                        // not pinning, and followed once the whole query succeeds.
                        None if self.tracker.status() == backend::TransactionStatus::Idle && watched.resets.all => {
                            self.pending_changes = vec![Change::ResetAll];
                        }
                        None => self.pending_changes.clear(),
                    }
                }
                if self.passes_through {
                    self.pass_query(message, plain, to_server)
                } else {
                    self.deallocate(body, st, to_server)
                        || sql.is_some_and(|sql| self.rewrite_query(sql, st, to_server))
                        || self.pass_query(message, plain, to_server)
                }
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
            self.sequences_foreign &= sequences_kept;
        }
        if self.registrations.sent_listens().is_some() && self.hub_hold.is_none() {
            self.hold_for_hub(to_server.split_off(start));
        }
    }

    /// A text that LISTENs (a simple query's, or a Parse's), translated into
    /// `text`, waits until the session has subscribed to its channels
    /// ahead: what commits after the client's transaction must reach the
    /// hub. The client's messages behind it wait too.
    #[cold]
    fn hold_for_hub(&mut self, text: BytesMut) {
        if let Some(channels) = self.registrations.sent_listens() {
            for channel in channels {
                if !self.hub_channels.contains(channel) {
                    self.hub_channels.push(channel.clone());
                }
            }
        }
        self.hub_hold = Some(text);
        self.holding = true;
        self.left_listening = true;
    }

    /// A check is answered: the client's messages held meanwhile are
    /// translated now, into [`Exchange::take_for_server`]'s buffer, until
    /// another check holds the rest. The tail of a message still being
    /// streamed (CopyData) goes on as it is.
    fn release_held(&mut self, st: &mut Statements<'_>) {
        self.holding = false;
        let mut held = std::mem::take(&mut self.held);
        let mut out = std::mem::take(&mut self.for_server);
        while !held.is_empty() {
            if self.holding {
                self.held.extend_from_slice(&held);
                break;
            }
            let header = crate::protocol::frame::parse_header(&held, usize::MAX).ok().flatten();
            let Some(len) = header.map(|h| HEADER_LEN + h.body_len) else {
                out.extend_from_slice(&held);
                break;
            };
            if held.len() < len {
                out.extend_from_slice(&held);
                break;
            }
            let message = held.split_to(len);
            if message[0] == frontend::COPY_DATA {
                self.from_client_stream(message[0], &message, &mut out);
            } else {
                self.from_client_now(message[0], &message, st, &mut out);
            }
        }
        self.for_server = out;
    }

    /// A hidden query's ReadyForQuery: one a cancel stopped runs again (see
    /// [`Exchange::align_settings`]); once none the client's messages wait
    /// behind is left, they go on.
    fn hidden_query_ended(&mut self, st: &mut Statements<'_>) {
        let Some(Due::Server { request: Request::Hidden(hidden), .. }) = self.due.pop_front() else { return };
        if std::mem::take(&mut self.hidden_cancelled) {
            if let Hidden::Alignment(mut again) = hidden {
                again.tries_left -= 1;
                tracing::info!("a statement_timeout cancelled the alignment of a server connection's settings; running it again");
                let mut out = std::mem::take(&mut self.for_server);
                self.send_alignment(again, &mut out);
                self.for_server = out;
            }
        }
        // Failed for good: the session ends, and nothing of the client's
        // may run under what the connection has.
        self.release_held_if_free(st);
    }

    /// The client's held messages go on once nothing holds them any more:
    /// no check or alignment they wait behind, no text waiting for the hub,
    /// and the session not failed.
    fn release_held_if_free(&mut self, st: &mut Statements<'_>) {
        if self.holding && self.hub_hold.is_none() && self.failure.is_none() && !self.due.iter().any(Due::holds_the_client) {
            self.release_held(st);
        }
    }

    /// A Parse pglane answered itself may start a request to send again if
    /// its statement is stale on the server (see [`replay`]): outside a
    /// transaction block, with nothing else of the client's in flight.
    fn may_replay(&mut self, message: &[u8]) {
        if self.due.len() != 1 || self.tracker.status() != backend::TransactionStatus::Idle {
            return;
        }
        if let Some(Due::Local(Local::ParseComplete { statement, .. })) = self.due.back() {
            self.replay.start(statement.id, message);
        }
    }

    /// The server refused the Bind of the client's request as stale, and
    /// nothing of the request ran: it goes again, its Parse prepared afresh
    /// (the stale statement was retired) and that Parse's answer dropped
    /// (the client has its ParseComplete). The messages after the Parse go
    /// on as held ones, behind a check the Parse may need.
    fn send_again(&mut self, st: &mut Statements<'_>) {
        let Some((parse, rest)) = self.replay.take() else { return };
        if let Ok((name, _)) = names::split_parse(&parse[HEADER_LEN..]) {
            // The name is free again: the statement it meant is retired.
            if !name.is_empty() {
                st.client.remove(name);
            }
        }
        let mark = self.due.len();
        let mut out = std::mem::take(&mut self.for_server);
        self.from_client_now(frontend::PARSE, &parse, st, &mut out);
        self.for_server = out;
        for due in self.due.range_mut(mark..) {
            if let Due::Server { request: Request::Parse { .. }, forward } = due {
                *forward = false;
                break;
            }
        }
        let mut held = rest;
        held.extend_from_slice(&self.held);
        self.held = held;
        self.holding = true;
        st.registry.count(|c| c.reruns += 1);
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

    /// Why the relay must end, if a negotiated DataRow could not be transcoded.
    pub fn take_failure(&mut self) -> Option<NegotiateError> {
        self.failure.take()
    }

    /// The first bytes of a streamed client message (CopyData).
    pub fn from_client_stream(&mut self, tag: u8, bytes: &[u8], to_server: &mut BytesMut) {
        if self.holding {
            self.held.extend_from_slice(bytes);
        } else if !self.skip_to_sync {
            self.tracker.client_sent(tag);
            to_server.extend_from_slice(bytes);
        }
    }

    /// More bytes of the streamed client message.
    pub fn from_client_stream_more(&mut self, bytes: &[u8], to_server: &mut BytesMut) {
        if self.holding {
            self.held.extend_from_slice(bytes);
        } else if !self.skip_to_sync {
            to_server.extend_from_slice(bytes);
        }
    }

    /// A Bind, Describe or Close of a client whose statements are its own
    /// ([`Exchange::passing_through`]), as it sent it.
    fn pass_through(&mut self, tag: u8, message: &[u8], to_server: &mut BytesMut) -> bool {
        let request = match tag {
            frontend::BIND => Request::Bind { statement: None, plain: false },
            frontend::DESCRIBE => Request::Describe { cache: None, portal: None },
            _ => Request::Close { evicted: None },
        };
        self.pass_request(message, to_server, request)
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
    /// if it leaves the session alone (`plain`: [`Watched::plain`] of its
    /// text) and changes no setting.
    fn pass_query(&mut self, message: &[u8], plain: bool, to_server: &mut BytesMut) -> bool {
        let plain = plain && self.pipelining && self.pinned.is_none() && self.pending_changes.is_empty();
        self.pass_request(message, to_server, Request::Query { plain })
    }

    fn expect(&mut self, request: Request) {
        self.due.push_back(Due::Server { request, forward: true });
    }

    /// pglane refuses a client message: an error in its place, then the
    /// client's messages are dropped up to its Sync, as PostgreSQL does. (The
    /// server is not told, so an open transaction block is not marked failed.)
    fn raise(&mut self, error: ErrorFields) {
        self.due.push_back(Due::Local(Local::Error(error)));
        self.skip_to_sync = true;
    }

    /// Writes the answers pglane owes that are next in line. Called before
    /// every server message and most client ones, and most often with
    /// nothing owed: that case is a look at the queue's front, inline.
    #[inline]
    fn answer_local(&mut self, to_client: &mut BytesMut) {
        if let Some(Due::Local(_)) = self.due.front() {
            self.write_local_answers(to_client);
        }
    }

    fn write_local_answers(&mut self, to_client: &mut BytesMut) {
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

    /// A whole server message on its way to the client. Returns whether the
    /// client gets it (replies to pglane's own requests are dropped).
    pub fn from_server(&mut self, tag: u8, message: &[u8], st: &mut Statements<'_>, to_client: &mut BytesMut) -> bool {
        self.answer_local(to_client);
        let body = &message[HEADER_LEN..];
        if self.replay.is_recorded() && !backend::is_asynchronous(tag) && tag != backend::ERROR_RESPONSE {
            self.replay.answered();
        }
        if let Some(Due::Server { request: Request::Hidden(hidden), .. }) = self.due.front() {
            // The reply to a hidden query: nothing of it reaches the client.
            let cancel_survived = match hidden {
                Hidden::Once => false,
                Hidden::LiftTimeout => true,
                Hidden::Alignment(again) => again.tries_left > 0,
            };
            match tag {
                backend::PARAMETER_STATUS => {
                    self.reported(body, st, false);
                }
                backend::ERROR_RESPONSE => {
                    let error = backend::decode_error_fields(body).ok();
                    let cancelled = error.as_ref().is_some_and(|e| e.code == QUERY_CANCELED);
                    if cancelled && cancel_survived {
                        // Nothing of the client's ran behind it.
                        self.hidden_cancelled = true;
                    } else {
                        // Values a server accepted before: the connection is
                        // not what pglane recorded (its SETs were rolled
                        // back), and the client's requests behind it must
                        // not run as if.
                        let error = error.map(|e| e.message).unwrap_or_default();
                        tracing::error!("a query pglane ran for the session failed: {error}; ending the session");
                        self.failure = Some(NegotiateError::Settings(error));
                    }
                }
                backend::READY_FOR_QUERY => {
                    self.tracker.server_sent(tag, body);
                    self.hidden_query_ended(st);
                    self.answer_local(to_client);
                    return false;
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
        let mut send_again = false;
        match tag {
            // A followed LISTEN's channel: the hub delivers it too.
            backend::NOTIFICATION_RESPONSE if self.hub_delivers(body) => {
                forward = false;
            }
            backend::PARAMETER_STATUS => {
                if let Some((name, startup)) = self.reported(body, st, true) {
                    // What PostgreSQL would report after this RESET.
                    forward = false;
                    backend::parameter_status(to_client, &name, &startup);
                }
            }
            backend::ERROR_RESPONSE => {
                if self.replay.is_recorded() {
                    let stale_bind = match self.due.front() {
                        Some(Due::Server { request: Request::Bind { statement: Some(s), .. }, .. })
                            if is_stale_statement(body) =>
                        {
                            Some(s.id)
                        }
                        _ => None,
                    };
                    match stale_bind {
                        // Held back: the request goes again at its ReadyForQuery.
                        Some(id) if self.replay.bind_failed_stale(id, message) => forward = false,
                        _ => self.replay.answered(),
                    }
                }
                self.pending_changes.clear();
                self.registrations.server_failed();
                if let Some(Due::Server { request: Request::StaleResult, .. }) = self.due.front() {
                    forward = false;
                    stale_result_error(to_client);
                }
                if self.answers_rewritten_query() {
                    let at_bind = matches!(self.due.front(), Some(Due::Server { request: Request::Bind { .. }, .. }));
                    if let Some(auto) = self.rewriting.as_deref_mut() {
                        let stale = at_bind && is_stale_statement(body);
                        match auto.running.front_mut() {
                            Some(running) if stale && running.may_rerun => running.stale = Some(body.to_vec()),
                            _ => auto.write_error(body, to_client),
                        }
                        forward = false;
                    }
                }
                if forward && self.write_error_in_clients_names(body, st, to_client) {
                    forward = false;
                }
                self.server_error(body, st)
            }
            backend::PARSE_COMPLETE => {
                if let Some(Due::Server { request: Request::Parse { parsed, .. }, forward: f }) = self.pop_server_reply() {
                    if let Parsed::Statement { statement, .. } = parsed {
                        statement.validated.set(true);
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
                if matches!(
                    self.due.front(),
                    Some(Due::Server { request: Request::Describe { cache: Some(_), .. } | Request::Check { .. }, .. })
                ) {
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
                if let Some(Due::Server { request: Request::Check { .. }, .. }) = self.due.front() {
                    forward = false;
                    if let Some(Due::Server { request: Request::Check { statement, expected, check }, .. }) = self.due.pop_front()
                    {
                        let mut answer = std::mem::take(&mut self.describing);
                        answer.extend_from_slice(message);
                        self.checked(&statement, &expected, check, answer.freeze(), st);
                    }
                } else if let Some(Due::Server { request: Request::QueryDescribe { plan, bound }, .. }) = self.due.front() {
                    // A rewritten simple query's RowDescription: the client's,
                    // all text, also where pglane asked binary of the server.
                    forward = tag == backend::ROW_DESCRIPTION;
                    if let (backend::NO_DATA, Some((id, prepared_at))) = (tag, *bound) {
                        st.server.note_no_rows(id, prepared_at);
                    }
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
                if self.registrations.command_completed(body) {
                    // A LISTEN pglane did not follow (a statement prepared
                    // in an earlier request, run again): this connection
                    // listens for the client, which keeps it.
                    self.pin(Some(SessionFeature::Listen));
                }
                if matches!(self.due.front(), Some(Due::Server { request: Request::Execute { .. }, .. })) {
                    self.rows_ended();
                    if let Some(Due::Server { request: Request::Execute { changes: Some(changes), .. }, .. }) =
                        self.due.pop_front()
                    {
                        self.pending_changes.extend(changes.iter().cloned());
                    }
                }
                if tag == backend::COMMAND_COMPLETE && matches!(body, b"DISCARD ALL\0" | b"DEALLOCATE ALL\0") {
                    // The server forgot every statement, and so did this client.
                    st.server.clear();
                    st.client.clear();
                    self.unnamed = Unnamed::None;
                    self.foreign_closes.all |= self.notes_foreign_closes;
                }
                if tag == backend::COMMAND_COMPLETE && body == b"DISCARD ALL\0" {
                    // And its settings went back to the server's defaults;
                    // the client's, as on PostgreSQL, to its startup values.
                    st.server_settings.apply(&Change::ResetAll);
                    st.client_settings.apply(&Change::ResetAll);
                    self.realign = !st.client_settings.same_values(st.server_settings);
                }
                if tag == backend::COMMAND_COMPLETE && changes_schema(body) {
                    st.registry.ddl_seen();
                    self.ddl_pending = true;
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
                let idle = body == b"I";
                if self.replay.is_stale() {
                    if idle && self.due.is_empty() && !self.followed {
                        forward = false;
                        send_again = true;
                    } else {
                        to_client.extend_from_slice(self.replay.give_up());
                    }
                }
                if idle {
                    self.negotiator.transaction_ended();
                }
                let due = &self.due;
                self.registrations.ready(body.first().copied().unwrap_or(0), || due.iter().any(Due::ends_request));
                if self.ddl_pending && idle {
                    // The DDL is committed (or rolled back): statements
                    // described and shapes validated while it was in flight
                    // saw the old schema.
                    self.ddl_pending = false;
                    st.registry.ddl_seen();
                }
                if self.due.is_empty() {
                    self.due.all_answered();
                }
                self.changes_answered(idle, st);
                if idle && !self.due.iter().any(Due::ends_request) {
                    self.settings_in_flux = false;
                }
            }
            _ => {}
        }
        if forward {
            to_client.extend_from_slice(message);
        }
        self.tracker.server_sent(tag, body);
        if send_again {
            self.send_again(st);
        }
        if self.holding && self.hub_hold.is_none() && !self.due.iter().any(Due::holds_the_client) {
            // Checked (or skipped after an error): the client's messages go on.
            self.release_held(st);
        }
        self.answer_local(to_client);
        forward
    }

    /// The Describe being answered is one pglane sent for itself.
    fn describe_is_pglanes(&self) -> bool {
        matches!(
            self.due.front(),
            Some(Due::Server { request: Request::Describe { .. } | Request::Check { .. }, forward: false })
        )
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
        let stale_plan = is_stale_statement(body);
        let mut first = true;
        while let Some(due) = self.due.front() {
            if matches!(due, Due::Server { request: Request::Sync { .. }, .. }) {
                break;
            }
            let Some(due) = self.due.pop_front() else { break };
            match due {
                Due::Server { request: Request::Parse { parsed, .. }, .. } => self.undo_parse(parsed, first, st),
                Due::Server { request: Request::Bind { statement: Some(s), .. }, .. } if first && stale_plan => {
                    // Prepared before DDL pglane did not see (0A000, or XX000
                    // for a dropped type): close it here, and let new Parses
                    // of the text prepare it afresh; every statement and
                    // shape too.
                    st.server.mark_stale(s.id);
                    st.registry.retire(&s);
                    st.registry.ddl_seen();
                }
                Due::Server { request: Request::Close { evicted: Some(name) }, .. } => {
                    // Skipped: the server still has it. Close it at the next chance.
                    st.server.push_stale(name);
                }
                Due::Local(Local::ParseComplete { name, statement, previous }) => {
                    let parsed = Parsed::Statement { statement, name: Some(name), previous };
                    self.undo_parse(parsed, false, st);
                }
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

    /// Takes back what a Parse the server refused (`refused`) or skipped
    /// did to the bookkeeping. A refused Parse of the unnamed statement
    /// leaves none (PostgreSQL drops the old one first); a skipped one
    /// leaves the one before.
    fn undo_parse(&mut self, parsed: Parsed, refused: bool, st: &mut Statements<'_>) {
        let unnamed_before = |previous: Option<Unnamed>| if refused { Unnamed::None } else { previous.unwrap_or_default() };
        match parsed {
            Parsed::Statement { statement, name, previous } => {
                st.server.remove(statement.id);
                match name {
                    Some(ClientName::Named(name)) => st.client.remove_if(&name, statement.id),
                    Some(ClientName::Unnamed) if matches!(&self.unnamed, Unnamed::Shared(s) if Rc::ptr_eq(s, &statement)) => {
                        self.unnamed = unnamed_before(previous);
                    }
                    _ => {}
                }
                st.registry.forget_failed(&statement);
            }
            Parsed::Unnamed { previous } => self.unnamed = unnamed_before(Some(previous)),
            Parsed::Nothing => self.unnamed.left_server(),
        }
    }

    /// The first bytes of a streamed server message (DataRow, CopyData).
    pub fn from_server_stream(&mut self, tag: u8, bytes: &[u8], registry: &Registry, to_client: &mut BytesMut) {
        self.answer_local(to_client);
        if tag == backend::DATA_ROW {
            self.rows_seen(|| negotiate::largest_data_row(bytes), registry);
        }
        self.tracker.server_sent(tag, &[]);
        debug_assert!(!matches!(self.due.front(), Some(Due::Server { request: Request::Hidden(_), .. })), "rows_need_whole");
        to_client.extend_from_slice(bytes);
    }
}
