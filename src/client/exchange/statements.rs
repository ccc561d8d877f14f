//! The client's statement names, and the Describe cache.
//!
//! Clients name statements (`S_1`); servers know them by pglane's names
//! (`pglane_<shard>_<id>`), shared by every client of the shard that
//! prepared the same text. So:
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
//! - with auto-prepare, the unnamed statement (Parse "") is the registry's
//!   named statement for its text and parameter types, so a client that
//!   parses the same text again and again (pgjdbc with prepareThreshold=0)
//!   has it prepared once per server connection.
//!
//! Unnamed statements and portals otherwise pass through untouched, as does
//! every byte of a message that is not renamed.

use std::rc::Rc;

use bytes::BytesMut;

use super::super::pinning;
use super::{Due, Exchange, Local, Prepared, Request, Statements};
use crate::prepare::Statement;
use crate::protocol::backend::{self, ErrorFields};
use crate::protocol::frame::HEADER_LEN;
use crate::protocol::frontend::{self, Target};
use crate::protocol::names;

/// "cached plan must not change result type": SQLSTATE 0A000 raised by the
/// plan cache's revalidation (pgjdbc's test, `willHealViaReparse`).
pub(super) fn is_stale_plan(body: &[u8]) -> bool {
    let Ok(fields) = backend::error_field_list(body) else { return false };
    let field = |code| fields.iter().find(|(c, _)| *c == code).map(|(_, v)| *v);
    field(b'C') == Some(b"0A000") && matches!(field(b'R'), Some(b"RevalidateCachedQuery" | b"RevalidateCachedPlan"))
}

/// A command tag of a statement that may change what a prepared statement
/// means: CREATE, ALTER or DROP of anything.
/// Does a statement Describe's answer (`tag`, `body`: RowDescription or
/// NoData) show the result columns of `expected` (a cached
/// ParameterDescription followed by a RowDescription or NoData, whole):
/// same names, types and type modifiers, as PostgreSQL compares a cached
/// plan's result? Undecodable answers count as the same.
pub(super) fn same_result(expected: &[u8], tag: u8, body: &[u8]) -> bool {
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
pub(super) fn stale_result_error(to_client: &mut BytesMut) {
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

impl Exchange {
    /// Whether the unnamed statement is the registry's (auto-prepare is on for this client).
    pub(super) fn maps_unnamed(&self) -> bool {
        self.auto.as_ref().is_some_and(|a| !a.off)
    }

    pub(super) fn parse(&mut self, message: &[u8], body: &[u8], st: &mut Statements<'_>, to_server: &mut BytesMut) -> bool {
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
    pub(super) fn parse_unnamed(&mut self, rest: &[u8], st: &mut Statements<'_>, to_server: &mut BytesMut) -> bool {
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
    pub(super) fn bind(
        &mut self,
        s: &Rc<Statement>,
        portal: &str,
        rest: &[u8],
        st: &mut Statements<'_>,
        to_server: &mut BytesMut,
    ) -> bool {
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

    /// Describe of a statement the registry knows: answered from its cached
    /// description, or asked of the server (and the answer cached).
    pub(super) fn describe_statement(&mut self, s: Rc<Statement>, st: &mut Statements<'_>, to_server: &mut BytesMut) -> bool {
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
    pub(super) fn deallocate(&mut self, body: &[u8], st: &mut Statements<'_>, to_server: &mut BytesMut) -> bool {
        if self.tracker.status() == backend::TransactionStatus::Failed {
            return false;
        }
        let Some(name) = super::super::deallocate::deallocated_name(names::query_bytes(body)) else { return false };
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
    pub(super) fn deallocate_parsed(&mut self, rest: &[u8], st: &mut Statements<'_>, to_server: &mut BytesMut) -> bool {
        self.deallocate_unnamed = false;
        if self.tracker.status() == backend::TransactionStatus::Failed {
            return false;
        }
        let Some(name) = super::super::deallocate::deallocated_name(names::query_bytes(rest)) else { return false };
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
    pub(super) fn note_bind(&mut self, body: &[u8]) {
        if let Ok((portal, statement, _)) = names::split_bind(body) {
            if statement.is_empty() && self.deallocate_unnamed {
                self.deallocate_portal = Some(portal.to_owned());
            } else if self.deallocate_portal.as_deref() == Some(portal) {
                self.deallocate_portal = None;
            }
        }
    }

    /// `s` was just prepared on this server connection for a Bind, and
    /// clients may have its description (asyncpg and pgjdbc decode results
    /// by it). On a direct connection a result type changed by DDL fails
    /// the Bind (0A000); here the fresh Parse would succeed with the new
    /// type. So pglane describes it and holds the client's messages until
    /// the answer shows the same result columns (one round trip, once per
    /// statement and server connection).
    pub(super) fn check_result(&mut self, s: &Rc<Statement>, to_server: &mut BytesMut) {
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
    pub(super) fn result_checked(&mut self, s: &Rc<Statement>, expected: &[u8], tag: u8, body: &[u8], st: &mut Statements<'_>) {
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
    pub(super) fn ensure_prepared(&mut self, s: &Rc<Statement>, st: &mut Statements<'_>, to_server: &mut BytesMut) {
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
    pub(super) fn make_room(&mut self, s: &Statement, st: &mut Statements<'_>, to_server: &mut BytesMut) {
        if let Some(evicted) = st.server.add(s) {
            frontend::close(to_server, Target::Statement, &evicted);
            st.registry.count(|c| c.evictions += 1);
            self.due.push_back(Due::Server { request: Request::Close { evicted: Some(evicted) }, forward: false });
        }
    }

    pub(super) fn close_stale(&mut self, st: &mut Statements<'_>, to_server: &mut BytesMut) {
        for name in st.server.take_stale() {
            frontend::close(to_server, Target::Statement, &name);
            self.due.push_back(Due::Server { request: Request::Close { evicted: None }, forward: false });
        }
    }

    /// Bind or Describe of a statement this client has not prepared. Names
    /// are the client's own, so this one does not exist for it, whatever the
    /// server connection holds (another client's unnamed statement, or a
    /// statement under pglane's server name): PostgreSQL's error, raised here.
    pub(super) fn refuse_unknown_statement(&mut self, name: &str) -> bool {
        let message = if name.is_empty() {
            "unnamed prepared statement does not exist".to_owned()
        } else {
            format!("prepared statement \"{name}\" does not exist")
        };
        self.raise(ErrorFields::error("26000", message));
        false
    }
}
