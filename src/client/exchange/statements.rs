//! The client's statement names, and the Describe cache.
//!
//! Clients name statements (`S_1`); servers know them by pglane's names
//! (`pglane_<shard>_<id>`), shared by every client of the pool that parsed
//! the same text with the same parameter types in the same context: the
//! values of the settings PostgreSQL reads when it parses a text
//! (search_path, TimeZone for a literal, ...; see `crate::settings`). A
//! client whose settings pglane does not know exactly (pinned, or changing
//! them right now) gets statements of its own. So:
//!
//! - a client's Parse of a statement this server connection has prepared
//!   is answered with ParseComplete right here; any other is forwarded
//!   under the statement's server name, and the server answers;
//! - Bind and Describe of a named statement are renamed, and preceded by a
//!   Parse (whose ParseComplete the client never sees) when this server
//!   connection has not prepared it yet. That Parse declares the parameter
//!   types the client was told, as PostgreSQL's plan cache keeps them;
//! - Describe of a statement this connection has prepared is answered from
//!   the cached ParameterDescription and RowDescription;
//! - whenever a statement whose description clients hold is prepared on
//!   another connection, pglane describes it there and holds the client's
//!   messages until the answer comes: a description that changed (DDL pglane
//!   did not see) makes the client's new Parse a new statement, and fails
//!   an old statement's Bind with PostgreSQL's 0A000, as a direct connection
//!   would;
//! - a statement parsed in settings the client no longer has, used on a
//!   connection that lacks it, is resolved again in the client's settings of
//!   now (as PostgreSQL re-analyses a statement whose search_path changed),
//!   never prepared there under the old statement's name;
//! - Close of a statement only drops the client's name, answered here;
//! - with auto-prepare, the client's unnamed statement (Parse "") is the
//!   registry's statement for its text, so a client that parses the same
//!   text again and again (pgjdbc with prepareThreshold=0) has it prepared
//!   once per server connection. Otherwise it passes through as sent, and
//!   pglane parses it again on the next server connection if the client
//!   binds it there. Either way it always means what the client last
//!   parsed under it.
//!
//! Portals and every byte of a message that is not renamed pass through
//! untouched.

use std::rc::Rc;

use bytes::{BufMut, Bytes, BytesMut};

use super::session::{statement_changes, Watched};
use super::{Check, Due, Exchange, Local, Parsed, Request, Statements};
use crate::prepare::Statement;
use crate::protocol::backend::{self, ErrorFields};
use crate::protocol::frame::HEADER_LEN;
use crate::protocol::frontend::{self, Target};
use crate::protocol::names;
use crate::settings::{Change, TextTraits};

/// A client's named statements, counted per pool as PgBouncer counts its
/// prepared statements (the admin console's client_parse_count,
/// server_parse_count and bind_count). Kept in the exchange and added to the
/// pool's figures when the transaction ends, so counting costs an increment,
/// not a pool's cell, per message.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct StatementCounts {
    /// Parses of a named statement by the client.
    pub client_parses: u64,
    /// Parses pglane sent a server for a statement it shares (a client's
    /// named statement, or an unnamed one auto-prepare maps), on the
    /// connection that lacked it.
    pub server_parses: u64,
    /// Binds of a named statement by the client.
    pub binds: u64,
}

impl StatementCounts {
    pub fn add(&mut self, other: &StatementCounts) {
        self.client_parses += other.client_parses;
        self.server_parses += other.server_parses;
        self.binds += other.binds;
    }
}

/// What the client's unnamed statement is.
#[derive(Debug, Clone, Default)]
pub(super) enum Unnamed {
    /// There is none: never parsed, or destroyed (a simple query, a failed
    /// Parse, a Close).
    #[default]
    None,
    /// The registry's statement for its text (auto-prepare's mapping).
    Shared(Rc<Statement>),
    /// Passed through as the client sent it: `body` is its Parse after the
    /// name. `here`: the server connection the client holds has it now.
    /// `plain`: its text leaves the session alone (worked out with
    /// pipelining only). `changes`: the settings it changes when run, if
    /// it is a SET pglane follows.
    Own { body: Bytes, here: bool, plain: bool, changes: Option<Rc<[Change]>> },
}

impl Unnamed {
    /// The client's transaction left the server connection (or pglane's
    /// own simple query replaced its unnamed statement there): its own
    /// unnamed statement must be parsed again before it is used.
    pub(super) fn left_server(&mut self) {
        if let Unnamed::Own { here, .. } = self {
            *here = false;
        }
    }
}

/// Which of the client's names a statement was parsed under.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum ClientName {
    Named(String),
    Unnamed,
}

/// Is this error, answering a Bind, PostgreSQL saying the statement was
/// prepared before DDL that pglane did not see? Two forms:
/// - "cached plan must not change result type": SQLSTATE 0A000 raised by
///   the plan cache's revalidation (pgjdbc's test, `willHealViaReparse`);
/// - "cache lookup failed for type N": XX000, when a type the statement's
///   parameters or result were resolved to was dropped (and perhaps created
///   again under a new OID: an extension or an enum recreated). The plan
///   cache keeps the parameter types of the Parse, so this never heals.
pub(super) fn is_stale_statement(body: &[u8]) -> bool {
    let Ok(fields) = backend::error_field_list(body) else { return false };
    let field = |code| fields.iter().find(|(c, _)| *c == code).map(|(_, v)| *v);
    match field(b'C') {
        Some(b"0A000") => matches!(field(b'R'), Some(b"RevalidateCachedQuery" | b"RevalidateCachedPlan")),
        Some(b"XX000") => field(b'M').is_some_and(|m| m.starts_with(b"cache lookup failed for type ")),
        _ => false,
    }
}

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

/// The Parse body (after the name) that prepares `s` as the clients that
/// hold its description know it: its text, with every parameter's type
/// declared as that description gives it (PostgreSQL's plan cache keeps a
/// statement's parameter types when it analyses it again after DDL). Its
/// own body when no description is known.
fn prepare_body(s: &Statement) -> Bytes {
    let described = s.described.borrow();
    let types = described.as_deref().and_then(|d| {
        let len = usize::try_from(i32::from_be_bytes(d.get(1..HEADER_LEN)?.try_into().ok()?)).ok()?;
        match d.first() {
            Some(&backend::PARAMETER_DESCRIPTION) => backend::decode_parameter_description(d.get(HEADER_LEN..1 + len)?).ok(),
            _ => None,
        }
    });
    let Some(types) = types else { return s.key.clone() };
    let text = names::query_bytes(&s.key);
    let mut body = BytesMut::with_capacity(text.len() + 3 + 4 * types.len());
    body.extend_from_slice(text);
    body.put_u8(0);
    body.put_u16(types.len() as u16);
    for oid in types {
        body.put_u32(oid);
    }
    body.freeze()
}

/// PostgreSQL's error for a prepared statement whose result type changed,
/// with its routine: asyncpg and pgjdbc prepare the statement again when
/// they see `RevalidateCachedQuery`.
pub(super) fn stale_result_error(to_client: &mut BytesMut) {
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

/// What pglane works out of a Parse's text alone, kept with a quiet text
/// (see `quiet`) so that a repeat is not looked at again.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct TextFacts {
    /// It leaves the session alone (see [`Watched::plain`]).
    plain: bool,
    /// What its literals make it depend on.
    traits: TextTraits,
    /// It is worth mapping onto a shared statement ([`is_plannable`]).
    plannable: bool,
}

impl TextFacts {
    /// The facts of `text` but `plain`, which watching it tells.
    fn of(text: &[u8]) -> TextFacts {
        TextFacts { plain: false, traits: TextTraits::of(text), plannable: is_plannable(text) }
    }
}

/// Whether a text is worth mapping onto a shared statement: a statement
/// PostgreSQL plans (what it saves is planning), not a utility command.
fn is_plannable(text: &[u8]) -> bool {
    let start = text.iter().position(|b| !b.is_ascii_whitespace() && *b != b'(').unwrap_or(text.len());
    let word: &[u8] = &text[start..];
    let end = word.iter().position(|b| !b.is_ascii_alphabetic()).unwrap_or(word.len());
    let word = &word[..end];
    [&b"select"[..], b"insert", b"update", b"delete", b"values", b"with", b"table", b"merge"]
        .iter()
        .any(|k| word.eq_ignore_ascii_case(k))
}

impl Exchange {
    /// A client's Parse (see the module docs). Returns whether anything was
    /// forwarded.
    pub(super) fn parse(&mut self, message: &[u8], body: &[u8], st: &mut Statements<'_>, to_server: &mut BytesMut) -> bool {
        let Ok((name, rest, text)) = names::split_parse_text(body) else {
            // Malformed: the server refuses it, and the unnamed statement
            // is gone either way.
            self.unnamed = Unnamed::None;
            let previous = Unnamed::None;
            self.pass(message, to_server, Request::Parse { parsed: Parsed::Unnamed { previous }, plain: false });
            return true;
        };
        let text = text.as_bytes();
        let known = self.quiet.get(text);
        if self.passes_through {
            // Nothing is shared: the text's traits are not needed.
            self.watch_parse_text(rest, known, known.unwrap_or_default(), st, to_server);
            self.pass(message, to_server, Request::Parse { parsed: Parsed::Nothing, plain: false });
            return true;
        }
        let facts = known.unwrap_or_else(|| TextFacts::of(text));
        // The context is that of the settings before this text runs; an
        // unnamed statement needs one only if auto-prepare may map it.
        if name.is_empty() {
            let context = (self.auto.is_some() && facts.plannable).then(|| self.context_for(facts.traits, st));
            let watched = self.watch_parse_text(rest, known, facts, st, to_server);
            if self.deallocate_parsed(text, st, to_server) {
                return true;
            }
            return self.parse_unnamed(message, rest, context, watched, st, to_server);
        }
        let context = self.context_for(facts.traits, st);
        self.watch_parse_text(rest, known, facts, st, to_server);
        st.registry.count(|s| s.client_parses += 1);
        self.counts.client_parses += 1;
        if st.client.get(name).is_some() {
            self.raise(ErrorFields::error("42P05", format!("prepared statement \"{name}\" already exists")));
            return false;
        }
        let statement = st.registry.register(context, rest);
        if let Err(limit) = st.client.insert(name, statement.clone()) {
            self.raise(ErrorFields::error(
                "53400",
                format!("too many prepared statements: this client already has {} (max_client_prepared_statements)", limit.0),
            ));
            return false;
        }
        self.parse_shared(statement, ClientName::Named(name.to_owned()), None, st, to_server)
    }

    /// [`Exchange::watch_text`] of a Parse's text (`rest`: the Parse after
    /// its name), skipped for a text found quiet before (`known`: its facts
    /// then), and remembered with its `facts` if it is quiet. A text that
    /// reads sequence state may need `DISCARD SEQUENCES` ahead of it, in
    /// `to_server` ([`Exchange::forget_foreign_sequences`]).
    fn watch_parse_text(
        &mut self,
        rest: &[u8],
        known: Option<TextFacts>,
        facts: TextFacts,
        st: &mut Statements<'_>,
        to_server: &mut BytesMut,
    ) -> Watched {
        if let Some(known) = known {
            return Watched { plain: known.plain, ..Watched::default() };
        }
        let sql = names::parse_query(rest);
        let watched = self.watch_text(sql, st);
        if watched.reads_sequences {
            self.forget_foreign_sequences(to_server);
        }
        if self.is_quiet_text(sql, &watched) {
            self.quiet.remember(names::query_bytes(rest), TextFacts { plain: watched.plain, ..facts });
        }
        watched
    }

    /// A Parse of the unnamed statement: the registry's statement for its
    /// text when auto-prepare maps it, else passed through as sent.
    fn parse_unnamed(
        &mut self,
        message: &[u8],
        rest: &[u8],
        context: Option<crate::prepare::Context>,
        watched: Watched,
        st: &mut Statements<'_>,
        to_server: &mut BytesMut,
    ) -> bool {
        let previous = std::mem::take(&mut self.unnamed);
        // A context was worked out only if auto-prepare may map the text.
        let shared = context.filter(|c| !c.is_private() && watched.changes.is_none());
        if let Some(context) = shared {
            st.registry.count(|c| c.unnamed_mapped += 1);
            let last = match &previous {
                Unnamed::Shared(s) => Some(s),
                _ => None,
            };
            let statement = st.registry.register_again(last, &mut self.rewriting().recent_unnamed, context, rest);
            self.unnamed = Unnamed::Shared(statement.clone());
            return self.parse_shared(statement, ClientName::Unnamed, Some(previous), st, to_server);
        }
        let changes = watched.changes.map(Rc::from);
        // The same text as the last Parse (a driver that parses before every
        // Bind): its body is shared, not copied.
        let body = match &previous {
            Unnamed::Own { body, .. } if body[..] == *rest => body.clone(),
            _ => Bytes::copy_from_slice(rest),
        };
        self.unnamed = Unnamed::Own { body, here: true, plain: watched.plain, changes };
        self.pass(message, to_server, Request::Parse { parsed: Parsed::Unnamed { previous }, plain: watched.plain });
        true
    }

    /// The client Parsed `statement` under `name`: answered here if this
    /// connection has it, else forwarded under its server name; and if
    /// clients hold a description of it, checked against what the server
    /// says now before anything else of the client's goes on.
    /// `previous`: the client's unnamed statement before, if this is its Parse of
    /// the unnamed statement.
    fn parse_shared(
        &mut self,
        statement: Rc<Statement>,
        name: ClientName,
        previous: Option<Unnamed>,
        st: &mut Statements<'_>,
        to_server: &mut BytesMut,
    ) -> bool {
        if st.server.has(statement.id) {
            // Prepared here before, or on its way here already (the same text
            // under two names in one pipeline: a second Parse under the
            // server name would fail; if the first fails, the server skips
            // this answer's place up to Sync, and so does pglane).
            st.registry.count(|s| s.parses_answered += 1);
            self.due.push_back(Due::Local(Local::ParseComplete { name, statement, previous }));
            return false;
        }
        self.close_stale(st, to_server);
        self.make_room(&statement, st, to_server);
        names::put_parse(to_server, &statement.server_name, &statement.key);
        st.registry.count(|s| s.server_parses += 1);
        self.counts.server_parses += 1;
        let expected = statement.described.borrow().clone();
        let parsed = Parsed::Statement { statement: statement.clone(), name: Some(name.clone()), previous };
        self.due.push_back(Due::Server { request: Request::Parse { parsed, plain: false }, forward: true });
        if let Some(expected) = expected {
            self.check(statement, expected, Check::Parse(name), to_server);
        }
        true
    }

    /// The statement a Bind or Describe of the client's `name` uses: the
    /// one it parsed, unless that one is not on this connection and was
    /// parsed in settings the client no longer has. Then it is resolved
    /// again in the client's settings of now, and the client's name means
    /// that one from here on.
    fn statement_for_use(&mut self, s: Rc<Statement>, name: &ClientName, st: &mut Statements<'_>) -> Rc<Statement> {
        if st.server.has(s.id) {
            return s;
        }
        let context = self.context_for(TextTraits::of(names::query_bytes(&s.key)), st);
        if context == s.context {
            return s;
        }
        let again = st.registry.register(context, &s.key);
        if again.described.borrow().is_none() {
            // What the client was told is what the new one must still give.
            again.described.replace(s.described.borrow().clone());
        }
        match name {
            ClientName::Named(name) => {
                st.client.remove(name);
                let _ = st.client.insert(name, again.clone());
            }
            ClientName::Unnamed => self.unnamed = Unnamed::Shared(again.clone()),
        }
        again
    }

    /// A Bind. Returns whether it was forwarded (it is held, not forwarded,
    /// while the statement it binds is checked on this connection).
    pub(super) fn bind(&mut self, message: &[u8], body: &[u8], st: &mut Statements<'_>, to_server: &mut BytesMut) -> bool {
        let bind = names::split_bind(body);
        let shared = match &bind {
            // Not a clone of the whole: a clone of an Own's body allocates.
            Ok((_, "", _)) => match &self.unnamed {
                Unnamed::None if !self.deallocate_unnamed => return self.refuse_unknown_statement(""),
                Unnamed::Shared(s) => Some((s.clone(), ClientName::Unnamed)),
                _ => None,
            },
            Ok((_, name, _)) => match st.client.get(name).cloned() {
                Some(s) => Some((s, ClientName::Named((*name).to_owned()))),
                None => return self.refuse_unknown_statement(name),
            },
            Err(_) => None,
        };
        let Some((s, name)) = shared else {
            // The client's own unnamed statement (or a malformed Bind, for the server to refuse).
            let (plain, changes) = match &mut self.unnamed {
                Unnamed::Own { body, here, plain, changes } if bind.is_ok() => {
                    if !*here {
                        // Parsed on another server connection: again here.
                        names::put_parse(to_server, "", body);
                        self.due.push_back(Due::Server {
                            request: Request::Parse { parsed: Parsed::Nothing, plain: false },
                            forward: false,
                        });
                        *here = true;
                    }
                    (*plain, changes.clone())
                }
                _ => (false, None),
            };
            if let Ok((portal, _, _)) = bind {
                self.negotiator.bound(portal, None, None);
                self.bound_changes(portal, changes);
            }
            return self.pass_request(message, to_server, Request::Bind { statement: None, plain });
        };
        let Ok((portal, _, rest)) = bind else { return false };
        let s = self.statement_for_use(s, &name, st);
        if self.prepare_here(&s, Check::Use, st, to_server) {
            // Counted when it is let go, not twice.
            self.held.extend_from_slice(message);
            return false;
        }
        if matches!(name, ClientName::Named(_)) {
            self.counts.binds += 1;
        }
        self.bound_changes(portal, statement_changes(&s));
        let (plan, rows_of) = self.send_bind(&s, portal, rest, st, to_server);
        self.negotiator.bound(portal, plan, rows_of);
        self.expect(Request::Bind { statement: Some(s), plain: false });
        true
    }

    /// Remembers the settings a portal changes when it runs (a SET pglane
    /// follows), or forgets that it did.
    fn bound_changes(&mut self, portal: &str, changes: Option<Rc<[Change]>>) {
        self.portal_changes.retain(|(p, _)| p != portal);
        if let Some(changes) = changes {
            self.portal_changes.push((portal.to_owned(), changes));
        }
    }

    /// Describe of a statement (`target` is one): of the client's own
    /// unnamed statement, passed through (parsed here again first if need
    /// be); of a registry statement, answered from its cached description
    /// if this connection has prepared it, or asked of the server (and the
    /// answer cached). Returns whether anything was forwarded.
    pub(super) fn describe_statement(
        &mut self,
        message: &[u8],
        name: &str,
        st: &mut Statements<'_>,
        to_server: &mut BytesMut,
    ) -> bool {
        let (s, client_name) = if name.is_empty() {
            match &mut self.unnamed {
                Unnamed::Shared(s) => (s.clone(), ClientName::Unnamed),
                Unnamed::Own { body, here, .. } => {
                    if !*here {
                        names::put_parse(to_server, "", body);
                        *here = true;
                        self.due.push_back(Due::Server {
                            request: Request::Parse { parsed: Parsed::Nothing, plain: false },
                            forward: false,
                        });
                    }
                    return self.pass_request(message, to_server, Request::Describe { cache: None, portal: None });
                }
                Unnamed::None if self.deallocate_unnamed => {
                    return self.pass_request(message, to_server, Request::Describe { cache: None, portal: None })
                }
                Unnamed::None => return self.refuse_unknown_statement(""),
            }
        } else {
            match st.client.get(name).cloned() {
                Some(s) => (s, ClientName::Named(name.to_owned())),
                None => return self.refuse_unknown_statement(name),
            }
        };
        let s = self.statement_for_use(s, &client_name, st);
        if self.prepare_here(&s, Check::Use, st, to_server) {
            self.held.extend_from_slice(message);
            return false;
        }
        let cached = s.description.borrow().clone();
        match cached {
            Some(description) => {
                st.registry.count(|c| c.describes_answered += 1);
                self.due.push_back(Due::Local(Local::Description(description)));
                false
            }
            None => {
                frontend::describe(to_server, Target::Statement, &s.server_name);
                self.expect(Request::Describe { cache: Some(s), portal: None });
                true
            }
        }
    }

    /// Close of a statement: of a registry statement, only the client's
    /// name goes (the server copy stays, other clients share it; closing an
    /// unknown name is not an error in PostgreSQL either), answered here;
    /// of the client's own unnamed statement, forwarded if this connection
    /// has it. Returns whether anything was forwarded.
    pub(super) fn close_statement(
        &mut self,
        message: &[u8],
        name: &str,
        st: &mut Statements<'_>,
        to_server: &mut BytesMut,
    ) -> bool {
        if !name.is_empty() {
            let restore = st.client.remove(name).map(|s| (name.to_owned(), s));
            if restore.is_none() && self.notes_foreign_closes {
                self.foreign_closes.names.push(name.to_owned());
            }
            self.due.push_back(Due::Local(Local::CloseComplete { restore }));
            return false;
        }
        match std::mem::take(&mut self.unnamed) {
            Unnamed::Own { here: true, .. } => {
                self.pass(message, to_server, Request::Close { evicted: None });
                true
            }
            _ => {
                self.due.push_back(Due::Local(Local::CloseComplete { restore: None }));
                false
            }
        }
    }

    /// A simple query destroys the unnamed statement (and the unnamed
    /// portal), on a direct connection too.
    pub(super) fn simple_query_sent(&mut self) {
        self.unnamed = Unnamed::None;
        self.deallocate_unnamed = false;
        if self.deallocate_portal.as_deref() == Some("") {
            self.deallocate_portal = None;
        }
        self.bound_changes("", None);
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
        // Nearly no query begins with the keyword: that is known before
        // the text's end is looked for.
        if !super::super::deallocate::begins_with_deallocate(body) {
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
    /// Execute answers as the DEALLOCATE. `text` is the Parse's query text,
    /// up to its NUL.
    pub(super) fn deallocate_parsed(&mut self, text: &[u8], st: &mut Statements<'_>, to_server: &mut BytesMut) -> bool {
        self.deallocate_unnamed = false;
        if self.tracker.status() == backend::TransactionStatus::Failed {
            return false;
        }
        let Some(name) = super::super::deallocate::deallocated_name(text) else { return false };
        if st.client.remove(&name).is_none() {
            return false;
        }
        frontend::parse(to_server, "", "", &[]);
        let previous = std::mem::take(&mut self.unnamed);
        self.expect(Request::Parse { parsed: Parsed::Unnamed { previous }, plain: false });
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

    /// Makes sure this server connection has `s` before a Bind or Describe
    /// (or a rewritten query) uses it: if it lacks it, pglane parses it (as
    /// [`prepare_body`] gives it) and, if clients hold its description,
    /// checks it (`check`). Returns whether the client's messages now wait
    /// for that check: the one that needed it, and what follows.
    pub(super) fn prepare_here(
        &mut self,
        s: &Rc<Statement>,
        check: Check,
        st: &mut Statements<'_>,
        to_server: &mut BytesMut,
    ) -> bool {
        self.close_stale(st, to_server);
        if st.server.has(s.id) {
            return false;
        }
        self.make_room(s, st, to_server);
        names::put_parse(to_server, &s.server_name, &prepare_body(s));
        st.registry.count(|c| c.server_parses += 1);
        self.counts.server_parses += 1;
        let parsed = Parsed::Statement { statement: s.clone(), name: None, previous: None };
        self.due.push_back(Due::Server { request: Request::Parse { parsed, plain: false }, forward: false });
        let Some(expected) = s.described.borrow().clone() else { return false };
        let waits = check != Check::Verify;
        self.check(s.clone(), expected, check, to_server);
        waits
    }

    /// Describes `s`, just parsed on this connection, to see whether it is
    /// still what clients were told (`expected`); unless the check is only
    /// [`Check::Verify`], the client's messages from here wait for the
    /// answer. One round trip, once per statement and server connection.
    fn check(&mut self, s: Rc<Statement>, expected: Bytes, check: Check, to_server: &mut BytesMut) {
        frontend::describe(to_server, Target::Statement, &s.server_name);
        if check != Check::Verify {
            frontend::flush(to_server);
            self.holding = true;
        }
        self.due.push_back(Due::Server { request: Request::Check { statement: s, expected, check }, forward: false });
    }

    /// The answer to [`Exchange::check`]: `answer` is the ParameterDescription
    /// and the RowDescription or NoData (whole) the server gave now.
    ///
    /// - Parsed by the client now, and different: its Parse made a new
    ///   statement on a direct connection. The old one is retired (so is
    ///   every other: DDL happened that pglane did not see), the client's
    ///   name is a fresh statement with the new description, and this
    ///   connection's copy is closed and parsed again under the fresh name.
    /// - An old statement whose result changed: the server is made to fail
    ///   ahead of the held messages, so the client gets 0A000 and the server
    ///   skips to Sync, as on a direct connection.
    pub(super) fn checked(&mut self, s: &Rc<Statement>, expected: &[u8], check: Check, answer: Bytes, st: &mut Statements<'_>) {
        match check {
            Check::Parse(name) if *expected != *answer => {
                tracing::debug!(statement = %s.server_name, "a statement's description changed outside pglane's view");
                st.registry.ddl_seen();
                let fresh = st.registry.register(s.context, &s.key);
                fresh.validated.set(true);
                fresh.description.replace(Some(answer.clone()));
                fresh.described.replace(Some(answer));
                match name {
                    ClientName::Named(name) => {
                        st.client.remove(&name);
                        let _ = st.client.insert(&name, fresh.clone());
                    }
                    ClientName::Unnamed => self.unnamed = Unnamed::Shared(fresh.clone()),
                }
                let mut out = std::mem::take(&mut self.for_server);
                frontend::close(&mut out, Target::Statement, &s.server_name);
                self.due.push_back(Due::Server { request: Request::Close { evicted: None }, forward: false });
                st.server.remove(s.id);
                self.make_room(&fresh, st, &mut out);
                names::put_parse(&mut out, &fresh.server_name, &fresh.key);
                let parsed = Parsed::Statement { statement: fresh, name: None, previous: None };
                self.due.push_back(Due::Server { request: Request::Parse { parsed, plain: false }, forward: false });
                self.for_server = out;
            }
            Check::Parse(_) => {}
            Check::Verify => {
                if *expected != *answer {
                    tracing::debug!(statement = %s.server_name, "a statement's description changed outside pglane's view");
                    st.registry.ddl_seen();
                    st.server.mark_stale(s.id);
                }
            }
            Check::Use => {
                let row = answer.get(1..HEADER_LEN).and_then(|b| <[u8; 4]>::try_from(b).ok()).map(i32::from_be_bytes);
                let row = row.and_then(|len| answer.get(1 + usize::try_from(len).ok()?..));
                let same = match row {
                    Some(row) if row.len() >= HEADER_LEN => same_result(expected, row[0], &row[HEADER_LEN..]),
                    _ => true,
                };
                if same {
                    return;
                }
                tracing::debug!(statement = %s.server_name, "the result type of a prepared statement changed");
                st.registry.retire(s);
                st.server.mark_stale(s.id);
                frontend::execute(&mut self.for_server, "pglane: result type changed", 0);
                self.due.push_front(Due::Server { request: Request::StaleResult, forward: true });
                // The server skips what follows up to Sync; so does pglane.
                self.skip_to_sync = true;
            }
        }
    }

    /// Writes an error the server sent for a request about a registry
    /// statement with pglane's name for it (`bind message supplies 1
    /// parameters, but prepared statement "pglane_0_7" requires 2`) put back
    /// as the client's own, as PostgreSQL would have named it to the client.
    /// Returns false, having written nothing, when the error names no
    /// statement of pglane's (nearly always).
    pub(super) fn write_error_in_clients_names(&self, body: &[u8], st: &Statements<'_>, to_client: &mut BytesMut) -> bool {
        self.error_in_clients_names(body, st, to_client).is_some()
    }

    fn error_in_clients_names(&self, body: &[u8], st: &Statements<'_>, to_client: &mut BytesMut) -> Option<()> {
        if !body.windows(7).any(|w| w == b"pglane_") {
            return None;
        }
        let statement = match self.due.front() {
            Some(Due::Server {
                request: Request::Bind { statement: Some(s), .. } | Request::Describe { cache: Some(s), .. },
                ..
            }) => s,
            Some(Due::Server { request: Request::Parse { parsed: Parsed::Statement { statement, .. }, .. }, .. }) => statement,
            _ => return None,
        };
        let name = match &self.unnamed {
            Unnamed::Shared(u) if Rc::ptr_eq(u, statement) => String::new(),
            _ => st.client.name_of(statement)?.to_owned(),
        };
        let (ours, theirs) = (format!("\"{}\"", statement.server_name), format!("\"{name}\""));
        let fields = backend::error_field_list(body).ok()?;
        let renamed: Vec<(u8, Vec<u8>)> = fields
            .iter()
            .map(|&(code, value)| match std::str::from_utf8(value) {
                Ok(text) if text.contains(&ours) => (code, text.replace(&ours, &theirs).into_bytes()),
                _ => (code, value.to_vec()),
            })
            .collect();
        let fields: Vec<(u8, &[u8])> = renamed.iter().map(|(c, v)| (*c, v.as_slice())).collect();
        backend::put_error_field_list(to_client, backend::ERROR_RESPONSE, &fields);
        Some(())
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stale_statements_are_told_by_code_and_routine_or_message() {
        let stale: [&[u8]; 3] = [
            b"SERROR\0C0A000\0Mcached plan must not change result type\0RRevalidateCachedQuery\0\0",
            b"SERROR\0C0A000\0Mcached plan must not change result type\0RRevalidateCachedPlan\0\0",
            // A parameter's type was dropped (the CONTEXT and routine PostgreSQL 15 sends).
            b"SERROR\0VERROR\0CXX000\0Mcache lookup failed for type 16565\0Wunnamed portal parameter $1\0RgetTypeInputInfo\0\0",
        ];
        for body in stale {
            assert!(is_stale_statement(body), "{:?}", String::from_utf8_lossy(body));
        }
        let not_stale: [&[u8]; 4] = [
            // 0A000 of another routine: a feature PostgreSQL does not have.
            b"SERROR\0C0A000\0Mcannot insert into view\0RrewriteTargetView\0\0",
            // XX000 of another kind: a bug, not a stale statement.
            b"SERROR\0CXX000\0Mcache lookup failed for relation 1\0\0",
            b"SERROR\0C22P02\0Minvalid input syntax for type integer\0\0",
            b"malformed",
        ];
        for body in not_stale {
            assert!(!is_stale_statement(body), "{:?}", String::from_utf8_lossy(body));
        }
    }

    #[test]
    fn plannable_texts() {
        for sql in ["select 1", "  (SELECT 1)", "insert into t values ($1)", "WITH a AS (select 1) select * from a", "table t"] {
            assert!(is_plannable(sql.as_bytes()), "{sql}");
        }
        for sql in ["set x = 1", "begin", "create table t (a int)", "show search_path", "", "selectx"] {
            assert!(!is_plannable(sql.as_bytes()), "{sql}");
        }
    }
}
