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
//! of a message that is not renamed, except where binary format negotiation
//! (`negotiate`, when on) plans a portal: its Bind asks for binary, its
//! DataRows are transcoded back and its portal RowDescription shows the
//! client's formats.

use std::collections::VecDeque;
use std::rc::Rc;

use bytes::{Bytes, BytesMut};

use super::negotiate::{self, NegotiateError, Negotiator, Plan};
pub use super::negotiate::Negotiation;
use super::pinning::{self, SessionFeature};
use super::settings::{self, Change, Settings, Value};
use super::tracker::Tracker;
use crate::prepare::{ClientStatements, Registry, ServerStatements, Statement};
use crate::protocol::backend::{self, ErrorFields};
use crate::protocol::frame::HEADER_LEN;
use crate::protocol::frontend::{self, Target};
use crate::protocol::names;

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
    Parse { undo: Option<Prepared> },
    Bind { statement: Option<Rc<Statement>> },
    /// `cache` is the statement whose description to remember from the
    /// answer; `portal` the plan of a negotiated portal described.
    Describe { cache: Option<Rc<Statement>>, portal: Option<Rc<Plan>> },
    /// `evicted` names a statement pglane closed to make room.
    Close { evicted: Option<Rc<str>> },
    /// `plan`: the portal was negotiated, its DataRows are transcoded.
    Execute { plan: Option<Rc<Plan>> },
    Sync,
    Query,
    FunctionCall,
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
    /// The client used session state that cannot follow it to another
    /// server connection: it keeps this one until it leaves (see [`pinning`]).
    pub pinned: Option<SessionFeature>,
    /// Binary format negotiation of this client's portals.
    negotiator: Negotiator,
    /// A negotiated DataRow could not be transcoded: the relay must end.
    failure: Option<NegotiateError>,
}

/// A followed SET/RESET in a simple query sent outside a transaction block.
fn follow_change(body: &[u8], status: backend::TransactionStatus) -> Option<Change> {
    let starts_like_set = body.len() > 4 && (body[..3].eq_ignore_ascii_case(b"set") || body[..5.min(body.len())].eq_ignore_ascii_case(b"reset"));
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
    /// Nothing due in either direction.
    pub fn is_quiet(&self) -> bool {
        self.due.is_empty() && self.tracker.is_quiet()
    }

    /// Quiet and idle: the server connection may go back to the pool.
    pub fn is_releasable(&self) -> bool {
        self.due.is_empty() && self.tracker.is_releasable()
    }

    /// A whole client message (header included) on its way to the server.
    /// Writes what the server must get to `to_server`, and any answers due
    /// right away to `to_client`.
    pub fn from_client(&mut self, tag: u8, message: &[u8], st: &mut Statements<'_>, to_server: &mut BytesMut, to_client: &mut BytesMut) {
        if self.skip_to_sync {
            if tag != frontend::SYNC {
                return;
            }
            self.skip_to_sync = false;
        }
        let body = &message[HEADER_LEN..];
        let forwarded = match tag {
            frontend::PARSE => self.parse(message, body, st, to_server),
            frontend::BIND => match names::split_bind(body) {
                Ok((portal, name, rest)) if !name.is_empty() => match st.client.get(name).cloned() {
                    Some(s) => {
                        self.ensure_prepared(&s, st, to_server);
                        self.learn_description(&s, st, to_server);
                        let plan = self.negotiate_bind(&s, portal, rest, st);
                        match &plan {
                            Some((plan, params)) => {
                                names::put_bind_with_result_formats(to_server, portal, &s.server_name, params, plan.server_formats())
                            }
                            None => names::put_bind(to_server, portal, &s.server_name, rest),
                        }
                        self.negotiator.bound(portal, plan.map(|(plan, _)| plan));
                        self.expect(Request::Bind { statement: Some(s) });
                        true
                    }
                    None => self.refuse_unknown_statement(name),
                },
                Ok((_, "", _)) if !self.unnamed_parsed => self.refuse_unknown_statement(""),
                bind => {
                    if let Ok((portal, _, _)) = bind {
                        self.negotiator.bound(portal, None);
                    }
                    self.pass_request(message, to_server, Request::Bind { statement: None })
                }
            },
            frontend::DESCRIBE => match names::split_target(body) {
                Ok((Target::Statement, name)) if !name.is_empty() => match st.client.get(name).cloned() {
                    Some(s) => {
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
                    None => self.refuse_unknown_statement(name),
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
                target => {
                    if let Ok((Target::Portal, name)) = target {
                        self.negotiator.closed(name);
                    }
                    self.pass(message, to_server, Request::Close { evicted: None });
                    true
                }
            },
            frontend::EXECUTE => {
                let plan = frontend::decode_execute(body).ok().and_then(|(portal, _)| self.negotiator.plan(portal));
                self.pass_request(message, to_server, Request::Execute { plan })
            }
            frontend::SYNC => self.pass_request(message, to_server, Request::Sync),
            frontend::QUERY => {
                // A simple query replaces the unnamed statement.
                self.unnamed_parsed = false;
                self.pending_change = follow_change(body, self.tracker.status());
                if let Ok(sql) = frontend::decode_query(body) {
                    self.watch_session_state(sql, self.pending_change.is_some());
                }
                self.pass_request(message, to_server, Request::Query)
            }
            frontend::FUNCTION_CALL => self.pass_request(message, to_server, Request::FunctionCall),
            frontend::COPY_DONE | frontend::COPY_FAIL => {
                // Syncs sent while the server was in COPY FROM STDIN are ignored by it.
                for _ in 0..self.tracker.syncs_ignored_by_copy() {
                    if let Some(i) = self.due.iter().rposition(|d| matches!(d, Due::Server { request: Request::Sync, .. })) {
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
        self.answer_local(to_client);
    }

    /// With negotiation on, a statement bound before its description is
    /// known (clients that never send Describe statement, like pgjdbc for
    /// statements without parameters of unknown type) gets a Describe of
    /// pglane's own ahead of the Bind, whose answer is cached and not
    /// forwarded: later Binds of it can be negotiated.
    fn learn_description(&mut self, s: &Rc<Statement>, st: &Statements<'_>, to_server: &mut BytesMut) {
        let being_learned = |d: &Due| matches!(d, Due::Server { request: Request::Describe { cache: Some(c), .. }, .. } if Rc::ptr_eq(c, s));
        if st.negotiation.is_none() || s.description.borrow().is_some() || self.due.iter().any(being_learned) {
            return;
        }
        frontend::describe(to_server, Target::Statement, &s.server_name);
        self.due.push_back(Due::Server { request: Request::Describe { cache: Some(s.clone()), portal: None }, forward: false });
    }

    /// The plan for a Bind of `s` as `portal`, and the Bind's parameter part,
    /// if negotiation is on and finds columns to ask binary for.
    fn negotiate_bind<'r>(&self, s: &Statement, portal: &str, rest: &'r [u8], st: &Statements<'_>) -> Option<(Plan, &'r [u8])> {
        let negotiation = st.negotiation?;
        let description = s.description.borrow();
        let description = description.as_deref()?;
        // Settings-dependent types only when the reported settings are the
        // ones this portal will run with (see `negotiate`).
        let settings = if self.settings_settled() {
            negotiate::server_text_settings(negotiation.server_params, st.server_settings)
        } else {
            Default::default()
        };
        let planned = negotiate::plan_bind(description, rest, &settings, negotiation.max_row)?;
        tracing::trace!(portal, statement = %s.server_name, columns = planned.0.transcoded_columns(), "negotiated binary results");
        st.registry.count(|c| c.portals_negotiated += 1);
        Some(planned)
    }

    /// No request that may change a setting is in flight: no earlier Sync
    /// group, simple query or function call is unanswered, and the client
    /// has sent no Execute in its current group.
    fn settings_settled(&self) -> bool {
        self.negotiator.group_is_clean()
            && !self.due.iter().any(|d| matches!(d, Due::Server { request: Request::Sync | Request::Query | Request::FunctionCall, .. }))
    }

    /// The next DataRows belong to a negotiated portal: the relay must hand
    /// them over whole instead of streaming them.
    pub fn rows_need_whole(&self) -> bool {
        let next_server_reply = self.due.iter().find(|d| matches!(d, Due::Server { .. }));
        matches!(next_server_reply, Some(Due::Server { request: Request::Execute { plan: Some(_) }, .. }))
    }

    /// Why the relay must end, if a negotiated DataRow could not be transcoded.
    pub fn take_failure(&mut self) -> Option<NegotiateError> {
        self.failure.take()
    }

    /// The first bytes of a streamed client message (CopyData).
    pub fn from_client_stream(&mut self, tag: u8, bytes: &[u8], to_server: &mut BytesMut) {
        if !self.skip_to_sync {
            self.tracker.client_sent(tag);
            to_server.extend_from_slice(bytes);
        }
    }

    /// More bytes of the streamed client message.
    pub fn from_client_stream_more(&mut self, bytes: &[u8], to_server: &mut BytesMut) {
        if !self.skip_to_sync {
            to_server.extend_from_slice(bytes);
        }
    }

    /// Pins the client if `sql` leaves session state behind that pglane does
    /// not carry. `followed`: `sql` is one SET/RESET pglane follows.
    fn watch_session_state(&mut self, sql: &str, followed: bool) {
        if self.pinned.is_none() {
            self.pinned = pinning::session_feature(sql, |name| followed || settings::is_carried_name(name));
            if let Some(feature) = self.pinned {
                tracing::info!("client pinned to its server connection until it disconnects: it used {}", feature.as_str());
            }
        }
    }

    fn parse(&mut self, message: &[u8], body: &[u8], st: &mut Statements<'_>, to_server: &mut BytesMut) -> bool {
        if let Ok((_, rest)) = names::split_parse(body) {
            self.watch_session_state(names::parse_query(rest), false);
        }
        let (name, rest) = match names::split_parse(body) {
            Ok((name, rest)) if !name.is_empty() => (name, rest),
            _ => {
                self.unnamed_parsed = true;
                self.pass(message, to_server, Request::Parse { undo: None });
                return true;
            }
        };
        st.registry.count(|s| s.client_parses += 1);
        if st.client.get(name).is_some() {
            self.raise(ErrorFields::error("42P05", format!("prepared statement \"{name}\" already exists")));
            return false;
        }
        let statement = st.registry.register(rest);
        if let Err(limit) = st.client.insert(name, statement.clone()) {
            self.raise(ErrorFields::error(
                "53400",
                format!("too many prepared statements: this client already has {} (max_client_prepared_statements)", limit.0),
            ));
            return false;
        }
        if statement.validated.get() {
            // Known good: prepared on this server connection when first used.
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
        self.due.push_back(Due::Server { request: Request::Parse { undo }, forward: true });
        true
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
        self.due.push_back(Due::Server { request: Request::Parse { undo }, forward: false });
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
            self.due.push_back(Due::Server { request: Request::Query, forward: false });
            *server = client.clone();
        }
    }

    /// A whole server message on its way to the client. Returns whether the
    /// client gets it (replies to pglane's own requests are dropped).
    pub fn from_server(&mut self, tag: u8, message: &[u8], st: &mut Statements<'_>, to_client: &mut BytesMut) -> bool {
        self.answer_local(to_client);
        let body = &message[HEADER_LEN..];
        if let Some(Due::Server { request: Request::Query, forward: false }) = self.due.front() {
            // The reply to align_settings: nothing of it reaches the client.
            match tag {
                backend::PARAMETER_STATUS => self.reported(body, st, false),
                backend::READY_FOR_QUERY => {
                    self.due.pop_front();
                }
                _ => {}
            }
            self.tracker.server_sent(tag, body);
            return false;
        }
        let mut forward = true;
        match tag {
            backend::PARAMETER_STATUS => self.reported(body, st, true),
            backend::ERROR_RESPONSE => {
                self.pending_change = None;
                self.server_error(body, st)
            }
            backend::PARSE_COMPLETE => {
                if let Some(Due::Server { request: Request::Parse { undo }, forward: f }) = self.pop_server_reply() {
                    if let Some(p) = undo {
                        p.statement.validated.set(true);
                    }
                    forward = f;
                }
            }
            backend::BIND_COMPLETE | backend::PORTAL_SUSPENDED => {
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
                if let Some(Due::Server { request: Request::Execute { plan: Some(plan) }, .. }) = self.due.front() {
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
                            *s.description.borrow_mut() = Some(description.freeze());
                        }
                    }
                    self.due.pop_front();
                }
            }
            backend::COMMAND_COMPLETE | backend::EMPTY_QUERY_RESPONSE => {
                if matches!(self.due.front(), Some(Due::Server { request: Request::Execute { .. }, .. })) {
                    self.due.pop_front();
                }
                if tag == backend::COMMAND_COMPLETE && matches!(body, b"DISCARD ALL\0" | b"DEALLOCATE ALL\0") {
                    // The server forgot every statement, and so did this client.
                    st.server.clear();
                    st.client.clear();
                }
            }
            backend::READY_FOR_QUERY => {
                while let Some(due) = self.due.pop_front() {
                    if matches!(due, Due::Server { request: Request::Sync | Request::Query | Request::FunctionCall, .. }) {
                        break;
                    }
                }
                if body == b"I" {
                    self.negotiator.transaction_ended();
                }
                if let Some(change) = self.pending_change.take() {
                    if body == b"I" {
                        st.client_settings.apply(&change);
                        st.server_settings.apply(&change);
                    }
                }
            }
            _ => {}
        }
        if forward {
            to_client.extend_from_slice(message);
        }
        self.tracker.server_sent(tag, body);
        self.answer_local(to_client);
        forward
    }

    /// The Describe being answered is one pglane sent for itself.
    fn describe_is_pglanes(&self) -> bool {
        matches!(self.due.front(), Some(Due::Server { request: Request::Describe { .. }, forward: false }))
    }

    /// A ParameterStatus: the server connection now has this value, and so
    /// does the client if it is told.
    fn reported(&mut self, body: &[u8], st: &mut Statements<'_>, client_told: bool) {
        let Ok((name, value)) = backend::decode_parameter_status(body) else { return };
        if settings::is_carried(&name) {
            st.server_settings.set(&name, Value::Reported(value.clone()));
            if client_told {
                st.client_settings.set(&name, Value::Reported(value));
            }
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
    /// Sync, so what pglane recorded for those requests is undone.
    fn server_error(&mut self, body: &[u8], st: &mut Statements<'_>) {
        if matches!(self.due.front(), Some(Due::Server { request: Request::Query | Request::Sync, .. }) | None) {
            return;
        }
        let stale_plan = backend::decode_error_fields(body).is_ok_and(|e| e.code == "0A000");
        let mut first = true;
        while let Some(due) = self.due.front() {
            if matches!(due, Due::Server { request: Request::Sync, .. }) {
                break;
            }
            let Some(due) = self.due.pop_front() else { break };
            match due {
                Due::Server { request: Request::Parse { undo: Some(p) }, .. } => {
                    st.server.remove(p.statement.id);
                    if let Some(name) = &p.client_name {
                        st.client.remove_if(name, p.statement.id);
                    }
                    st.registry.forget_failed(&p.statement);
                }
                Due::Server { request: Request::Bind { statement: Some(s) }, .. } if first && stale_plan => {
                    // "cached plan must not change result type": close it here,
                    // and let new Parses of the text prepare it afresh.
                    st.server.mark_stale(s.id);
                    st.registry.retire(&s);
                }
                Due::Server { request: Request::Close { evicted: Some(name) }, .. } => {
                    // Skipped: the server still has it. Close it at the next chance.
                    st.server.push_stale(name);
                }
                Due::Local(Local::ParseComplete { client_name, statement }) => st.client.remove_if(&client_name, statement),
                Due::Local(Local::CloseComplete { restore: Some((name, s)) }) => {
                    let _ = st.client.insert(&name, s);
                }
                _ => {}
            }
            first = false;
        }
    }

    /// The first bytes of a streamed server message (DataRow, CopyData).
    pub fn from_server_stream(&mut self, tag: u8, bytes: &[u8], to_client: &mut BytesMut) {
        self.answer_local(to_client);
        self.tracker.server_sent(tag, &[]);
        to_client.extend_from_slice(bytes);
    }
}
