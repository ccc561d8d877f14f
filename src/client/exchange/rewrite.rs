//! Auto-prepare in the exchange: a simple query whose shape the pool
//! validated (`prepare::auto`) runs as that shape's named statement.
//!
//! Parse (only if this server connection lacks it), Bind with the literals
//! as text parameters, Describe portal, Execute, Sync. The client sees a
//! simple query's reply: ParseComplete and BindComplete are dropped, NoData
//! too, and an error's cursor position is mapped back to the client's text.
//! Once a connection's copy of the statement answered NoData (an UPDATE,
//! an INSERT), its portals are not described again: PostgreSQL fixes a
//! prepared statement's result type, and fails the Bind that would change
//! it (`ServerStatements::note_no_rows`). tpcb-like's four writes send
//! four Describes and four NoDatas fewer a transaction.
//! Only at a Sync boundary and outside a failed transaction; other queries
//! pass through, and a new shape is queued for validation on a side
//! connection (never speculatively here: a failed Parse would abort the
//! client's transaction).
//!
//! DDL (a CREATE, ALTER or DROP command tag, again when its transaction
//! ends) and a stale plan make every shape validate again and every
//! statement prepare afresh. A rewritten query whose Bind finds its plan
//! stale outside a transaction block ran nothing: its error is dropped and
//! the plain query is sent instead ([`Exchange::take_for_server`]).
//!
//! Shapes are keyed by the context of the client's settings, as statements
//! are (`statements`): a client with a search_path of its own gets the
//! shapes validated under that search_path. A client whose settings pglane
//! does not know exactly (pinned, or changing them right now) gets none.

use std::collections::VecDeque;
use std::rc::Rc;
use std::time::Instant;

use bytes::BytesMut;

use super::{Check, Due, Exchange, Request, Statements};
use crate::prepare::auto::{Job, Lookup, PassThrough, Spelling};
use crate::prepare::lexer::{self, LexOptions, Lexed, MarksMemo};
use crate::prepare::memo::Memo;
use crate::prepare::{Context, RecentStatements, Registry, Statement};
use crate::protocol::backend;
use crate::protocol::frontend::{self, Target};
use crate::protocol::names;
use crate::settings::{Settings, TextTraits, Value};

/// One simple query in this many is timed for the rewrite-time stats (a
/// client's first one included).
pub(super) const TIMING_SAMPLE: u32 = 16;

/// A rewritten simple query the server has not finished.
#[derive(Debug)]
pub(super) struct Running {
    pub(super) sql: String,
    pub(super) options: LexOptions,
    /// Its statement was prepared from this other spelling (error
    /// positions point into it).
    pub(super) spelling: Option<Rc<Spelling>>,
    /// It started outside a transaction block: if its Bind finds the plan
    /// stale (DDL pglane did not see), nothing has run and the client has
    /// seen nothing, so it can run again as the plain query.
    pub(super) may_rerun: bool,
    /// Its Bind found the plan stale: the ErrorResponse, held back. At its
    /// ReadyForQuery, if nothing else of the client's is in flight, both are
    /// dropped and the plain query is sent instead; else the error goes out.
    pub(super) stale: Option<Vec<u8>>,
}

/// One client's auto-prepare policy, kept for its whole session. What its
/// rewritten queries need while they run is an [`AutoPrepare`], held only
/// while the client holds a server connection (see `exchange::InFlight`).
#[derive(Debug, Clone, Copy)]
pub(super) struct AutoPolicy {
    /// Executions of a new shape before it is validated.
    pub(super) after: u32,
    /// Simple queries looked at; every [`TIMING_SAMPLE`]th is timed.
    pub(super) looked_at: u32,
}

/// The working state of a client's rewritten queries: the query being
/// looked up, and those still running. Lent with the server-side buffers
/// (`exchange::InFlight`), so that the Vecs inside keep their room from one
/// transaction to the next without an idle client holding them.
#[derive(Debug)]
pub(super) struct AutoPrepare {
    /// The query being looked up, lexed (its rewritten text is the
    /// lexer's, [`Lexed::rewritten_of_last`]), and how it was lexed.
    pub(super) lexed: Lexed,
    pub(super) options: LexOptions,
    /// The query's statement was prepared from this other spelling.
    pub(super) spelling: Option<Rc<Spelling>>,
    /// The rewritten queries still running, oldest first (to map error
    /// positions back, or run again), and spare buffers for the next ones.
    pub(super) running: VecDeque<Running>,
    pub(super) spare: Vec<String>,
    /// The traits of the rewritten texts seen lately.
    pub(super) traits: TraitsMemo,
    /// Where a negotiated rewritten query's Bind is written before it is
    /// negotiated: kept, so that writing it allocates nothing.
    pub(super) bind: BytesMut,
    /// The marks of the texts watched lately (`Exchange::watch_text`): a
    /// hot query's next values are not passed over again. Here, lent with
    /// the rest, rather than in every client's exchange: an idle client's
    /// task is sized to an allocator class with little room.
    pub(super) marks: MarksMemo,
    /// The statements unnamed Parses were mapped to lately (see
    /// `Registry::register_again`), lent the same way.
    pub(super) recent_unnamed: RecentStatements,
}

/// A larger scratch Bind (a query with large literals) is let go.
const BIND_KEPT_MAX: usize = 8 * 1024;

/// Slots of a [`TraitsMemo`]: a transaction's statements fit (pgbench's
/// tpcb-like runs seven).
const TRAITS_SLOTS: usize = 8;
/// Longer rewritten texts are scanned each time: the memo must not keep a
/// large query's text alive after its client is gone.
const TRAITS_TEXT_MAX: usize = 1024;

/// The [`TextTraits`] of rewritten texts seen lately, by shape hash and
/// checked against the text itself: a hot statement's traits cost a
/// comparison of its bytes, not a scan of them.
#[derive(Debug, Default)]
pub(super) struct TraitsMemo {
    kept: Memo<(TextTraits, String), TRAITS_SLOTS>,
    /// What [`TraitsMemo::retained_bytes`] says, counted as texts are kept:
    /// it is asked at every transaction's end.
    bytes: usize,
}

impl TraitsMemo {
    /// The traits of `text`, the rewritten text of shape `hash`.
    pub(super) fn of(&mut self, hash: u64, text: &str) -> TextTraits {
        if text.len() > TRAITS_TEXT_MAX {
            return TextTraits::of(text.as_bytes());
        }
        let found = self.kept.find(hash);
        if let Some(i) = found {
            let (traits, seen) = self.kept.get(i);
            if seen == text {
                return *traits;
            }
        }
        let traits = TextTraits::of(text.as_bytes());
        let (_, (kept, seen)) = self.kept.place(hash, found);
        self.bytes -= seen.capacity();
        seen.clear();
        seen.push_str(text);
        self.bytes += seen.capacity();
        *kept = traits;
        traits
    }

    fn retained_bytes(&self) -> usize {
        self.bytes
    }
}

impl Default for AutoPrepare {
    fn default() -> AutoPrepare {
        AutoPrepare {
            lexed: Lexed::for_this_shard(),
            options: LexOptions::default(),
            spelling: None,
            running: VecDeque::new(),
            spare: Vec::new(),
            traits: TraitsMemo::default(),
            bind: BytesMut::new(),
            marks: MarksMemo::default(),
            recent_unnamed: RecentStatements::default(),
        }
    }
}

impl AutoPrepare {
    /// The bytes its buffers hold, for whoever keeps it between clients
    /// (see `relay::Buffers::park_server_side`).
    pub(super) fn retained_bytes(&self) -> usize {
        self.lexed.retained_bytes()
            + self.spare.iter().map(String::capacity).sum::<usize>()
            + self.traits.retained_bytes()
            + self.bind.capacity()
            + self.marks.retained_bytes()
    }

    /// Lexes the simple query `sql` into its shape (the rewritten text,
    /// [`Lexed::rewritten_of_last`]), or says why it passes through.
    pub(super) fn lex(&mut self, sql: &str, ready: Ready, settings: &Settings) -> Result<(), PassThrough> {
        match ready {
            Ready::Yes => {}
            Ready::NotSynced => return Err(PassThrough::NotSynced),
            Ready::Failed => return Err(PassThrough::FailedTransaction),
        }
        let options = lex_options(settings)?;
        self.options = options;
        self.lexed.lex(sql, options).map_err(PassThrough::Lexer)?;
        debug_assert_eq!(self.lexed.rewritten_of_last(), self.lexed.rewritten(sql));
        Ok(())
    }

    /// The validated statement to run the query just lexed (`sql`) as, in
    /// `context`, or why it passes through. A miss queues the shape for
    /// validation (per the policy), with the client's `settings`.
    pub(super) fn statement_for(
        &mut self,
        sql: &str,
        context: Context,
        settings: &Settings,
        registry: &Registry,
        after: u32,
    ) -> Result<Rc<Statement>, PassThrough> {
        if context.is_private() {
            return Err(PassThrough::UnknownSettings);
        }
        let options = self.options;
        let (hash, types, rewritten) = (self.lexed.shape_hash(), self.lexed.param_types(), self.lexed.rewritten_of_last());
        let mut lookup = registry.shapes.lookup(context, hash, rewritten, types, Instant::now);
        if matches!(lookup, Lookup::Miss) {
            let same = |first: &Spelling| lexer::same_statement(&first.sql, first.options, sql, options);
            if let Some(respelled) = registry.shapes.respelled(context, hash, rewritten, types, same) {
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
                    context,
                    settings: settings.parse_settings(),
                    hash,
                    sql: rewritten.into(),
                    param_types: types.into(),
                    original: sql.into(),
                    options,
                    epoch,
                };
                Err(registry.shapes.note(context, job, hash, rewritten, types, after))
            }
        }
    }

    /// A rewritten query was sent: keep its text until its ReadyForQuery.
    pub(super) fn running(&mut self, sql: &str, may_rerun: bool) {
        let mut text = self.spare.pop().unwrap_or_default();
        text.clear();
        text.push_str(sql);
        let spelling = self.spelling.take();
        self.running.push_back(Running { sql: text, options: self.options, spelling, may_rerun, stale: None });
    }

    /// The oldest rewritten query got its ReadyForQuery.
    pub(super) fn finished(&mut self) {
        if let Some(running) = self.running.pop_front() {
            self.spare.push(running.sql);
        }
    }

    /// Writes the server's ErrorResponse `body` for the oldest running
    /// rewritten query as the client's simple query would have got it (see
    /// [`original_error_fields`]), or unchanged if nothing in it points at
    /// the rewritten text.
    pub(super) fn write_error(&mut self, body: &[u8], to_client: &mut BytesMut) {
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
pub(super) fn original_error_fields(
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

/// `n` if an error's context is exactly PostgreSQL's line for an input error
/// of parameter `$n` of an unnamed portal.
pub(super) fn bound_parameter(context: &[u8]) -> Option<usize> {
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
pub(super) enum Ready {
    Yes,
    /// The client's extended-protocol messages are not yet Synced.
    NotSynced,
    /// In a failed transaction block.
    Failed,
}

/// How this client's queries are lexed, or why they must not be: a
/// client encoding in which a multibyte character can hide a quote or
/// backslash.
pub(super) fn lex_options(settings: &Settings) -> Result<LexOptions, PassThrough> {
    const UNSAFE_ENCODINGS: [&str; 7] = ["SJIS", "SHIFT_JIS_2004", "BIG5", "GBK", "UHC", "GB18030", "JOHAB"];
    let value = |name| match settings.get(name) {
        Some(Value::Reported(v) | Value::Sql(v) | Value::Plain(v)) => Some(v.as_str()),
        Some(Value::Unknown) | None => None,
    };
    if value("client_encoding").is_some_and(|e| UNSAFE_ENCODINGS.iter().any(|u| u.eq_ignore_ascii_case(e.trim_matches('\'')))) {
        return Err(PassThrough::Encoding);
    }
    let off = value("standard_conforming_strings").is_some_and(|v| v.trim_matches('\'').eq_ignore_ascii_case("off"));
    Ok(LexOptions { standard_conforming_strings: !off })
}

impl Exchange {
    /// Runs a simple query (its text `sql`) as its shape's validated
    /// statement (see the module doc). Returns false, having sent nothing, if
    /// it must pass through.
    pub(super) fn rewrite_query(&mut self, sql: &str, st: &mut Statements<'_>, to_server: &mut BytesMut) -> bool {
        let Some(policy) = self.auto.as_mut() else { return false };
        // One query in TIMING_SAMPLE is timed: two clock reads would cost
        // this path more than the counters they feed are worth.
        policy.looked_at = policy.looked_at.wrapping_add(1);
        let started = (policy.looked_at % TIMING_SAMPLE == 1).then(Instant::now);
        let after = policy.after;
        let ready = match (self.tracker.is_synced(), self.tracker.status()) {
            (false, _) => Ready::NotSynced,
            (true, backend::TransactionStatus::Failed) => Ready::Failed,
            (true, _) => Ready::Yes,
        };
        let auto = self.rewriting();
        let looked_up = match auto.lex(sql, ready, st.client_settings) {
            Ok(()) => {
                let traits = auto.traits.of(auto.lexed.shape_hash(), auto.lexed.rewritten_of_last());
                let context = self.context_for(traits, st);
                self.rewriting().statement_for(sql, context, st.client_settings, st.registry, after)
            }
            Err(why) => Err(why),
        };
        let statement = match looked_up {
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
        // Its reply is a simple query's, which no description of the
        // statement decides: checked, but not waited for.
        self.prepare_here(&statement, Check::Verify, st, to_server);
        // A simple query sends a RowDescription only for rows, so its
        // portal is described; not where this connection's copy of the
        // statement already answered NoData, as it always will
        // (`ServerStatements::note_no_rows`): an UPDATE's or INSERT's.
        let copy = st.server.copy_of(statement.id);
        let describe = !copy.is_some_and(|c| c.no_rows);
        let bound = copy.map(|c| (statement.id, c.prepared_at));
        let auto = self.rewriting();
        let (plan, rows_of) = if st.negotiation.is_some() {
            // Negotiated like a client's Bind that asks for all text, as
            // the simple protocol returns it.
            let mut bind = std::mem::take(&mut auto.bind);
            bind.clear();
            frontend::bind(&mut bind, "", &statement.server_name, &[], auto.lexed.params(), &[]);
            let rest = &bind[names::bind_rest_at("", &statement.server_name)..];
            let sent = self.send_bind(&statement, "", rest, st, to_server);
            if bind.capacity() <= BIND_KEPT_MAX {
                self.rewriting().bind = bind;
            }
            sent
        } else {
            frontend::bind(to_server, "", &statement.server_name, &[], auto.lexed.params(), &[]);
            (None, None)
        };
        if describe {
            frontend::describe(to_server, Target::Portal, "");
        }
        frontend::execute(to_server, "", 0);
        frontend::sync(to_server);
        let outside_a_block = self.tracker.status() == backend::TransactionStatus::Idle;
        self.rewriting().running(sql, outside_a_block);
        let spent = started.map(|t| t.elapsed().as_nanos() as u64);
        st.registry.count(|c| {
            c.rewrites += 1;
            if let Some(ns) = spent {
                c.rewrites_timed += 1;
                c.rewrite_ns += ns;
            }
        });
        self.due.push_back(Due::Server { request: Request::Bind { statement: Some(statement), plain: false }, forward: false });
        if describe {
            self.expect(Request::QueryDescribe { plan: plan.clone(), bound });
        }
        self.expect(Request::Execute { plan, rows_of, changes: None });
        self.expect(Request::Sync { rewritten: true });
        true
    }

    /// The ReadyForQuery of the oldest rewritten query arrived. Returns
    /// whether the client gets it: not when its plan was stale and it runs
    /// again as the plain query.
    pub(super) fn rewritten_query_ended(&mut self, st: &mut Statements<'_>, to_client: &mut BytesMut) -> bool {
        let Some(auto) = self.rewriting.as_deref_mut() else { return true };
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
    pub(super) fn answers_rewritten_query(&self) -> bool {
        let end = self.due.iter().find(|d| d.ends_request());
        matches!(end, Some(Due::Server { request: Request::Sync { rewritten: true }, .. }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_traits_memo_answers_what_a_scan_would() {
        let mut memo = TraitsMemo::default();
        let texts = [
            "SELECT abalance FROM pgbench_accounts WHERE aid = $1",
            "SELECT now() = '2020-01-01'::timestamptz",
            "FETCH 10 FROM c",
            "SELECT 'x' || $1",
        ];
        // Twice over, and all under one hash (the text decides, not the hash).
        for _ in 0..2 {
            for (i, text) in texts.iter().enumerate() {
                assert_eq!(memo.of(i as u64, text), TextTraits::of(text.as_bytes()), "{text}");
                assert_eq!(memo.of(7, text), TextTraits::of(text.as_bytes()), "{text}");
            }
        }
        assert!(texts.iter().map(|t| TextTraits::of(t.as_bytes())).any(|t| t.literals));
        assert!(texts.iter().map(|t| TextTraits::of(t.as_bytes())).any(|t| t.session_shaped));
        // A long text is scanned, not kept.
        let long = format!("SELECT '{}'", "x".repeat(TRAITS_TEXT_MAX));
        let kept = memo.retained_bytes();
        assert_eq!(memo.of(1, &long), TextTraits::of(long.as_bytes()));
        assert_eq!(memo.retained_bytes(), kept);
        assert_eq!(kept, memo.kept.entries().map(|(_, seen)| seen.capacity()).sum::<usize>(), "counted as kept");
        assert!(kept <= TRAITS_SLOTS * TRAITS_TEXT_MAX);
        // Shapes whose hashes share their low bits are both kept.
        let mut memo = TraitsMemo::default();
        memo.of(1, texts[0]);
        memo.of(1 + TRAITS_SLOTS as u64, texts[2]);
        assert!(memo.kept.find(1).is_some() && memo.kept.find(1 + TRAITS_SLOTS as u64).is_some());
    }
}
