//! Binary format negotiation in the exchange (`super::super::negotiate`):
//! a portal's Bind asks for binary where pglane can turn the value back into
//! the client's text, its DataRows are transcoded back and its portal
//! RowDescription shows the client's formats.

use std::rc::Rc;

use bytes::BytesMut;

use super::super::negotiate::{self, Plan};
use super::{Due, Exchange, Request, Statements};
use crate::formats::TextSettings;
use crate::prepare::{Registry, Statement};
use crate::protocol::frontend::{self, Target};
use crate::protocol::names;

impl Exchange {
    /// With negotiation on, a statement bound before its description is
    /// known (clients that never send Describe statement, like pgjdbc for
    /// statements without parameters of unknown type) gets a Describe of
    /// pglane's own ahead of the Bind, whose answer is cached and not
    /// forwarded: later Binds of it can be negotiated.
    pub(super) fn learn_description(&mut self, s: &Rc<Statement>, st: &Statements<'_>, to_server: &mut BytesMut) {
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
    pub(super) fn negotiate_bind<'r>(
        &mut self,
        s: &Statement,
        portal: &str,
        rest: &'r [u8],
        small_rows: bool,
        st: &Statements<'_>,
    ) -> Option<(Rc<Plan>, &'r [u8])> {
        let negotiation = st.negotiation?;
        let description = s.description.borrow();
        let description = description.as_deref()?;
        // Settings-dependent types only when the reported settings are the
        // ones this portal will run with (see `negotiate`).
        let known;
        let unknown = TextSettings::default();
        let settings = if self.settings_settled() {
            known = negotiation.text_settings(st.server_settings);
            &*known
        } else {
            &unknown
        };
        let plans = self.plans.get_or_insert_with(Default::default);
        let key = s as *const Statement as usize / std::mem::align_of::<Statement>();
        let planned = plans.plan_bind(key, description, rest, settings, negotiation.max_row, small_rows)?;
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
    pub(super) fn settings_settled(&self) -> bool {
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
                    | Due::Server { request: Request::Hidden(_), .. }
            )
        )
    }

    /// Sends a Bind of `s` (`rest`: the Bind after its names), negotiated
    /// when binary_negotiation is on: the columns pglane can turn back into
    /// the text the client asked for are asked for in binary. Returns the
    /// portal's plan, and the statement whose row sizes to record: an
    /// un-negotiated portal's while the statement's record is being made, a
    /// negotiated one's while it relies on it (see `negotiate`).
    pub(super) fn send_bind(
        &mut self,
        s: &Rc<Statement>,
        portal: &str,
        rest: &[u8],
        st: &mut Statements<'_>,
        to_server: &mut BytesMut,
    ) -> (Option<Rc<Plan>>, Option<Rc<Statement>>) {
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

    /// DataRows came for the Execute being answered, the largest of `len()`
    /// body bytes: if its statement is watched, its row record is updated
    /// (`len` is not called otherwise). A row over the cap marks the
    /// statement for good, and counts.
    pub(super) fn rows_seen(&self, len: impl FnOnce() -> usize, registry: &Registry) {
        let Some(Due::Server { request: Request::Execute { plan, rows_of: Some(s), .. }, .. }) = self.due.front() else { return };
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
    pub(super) fn rows_ended(&self) {
        if let Some(Due::Server { request: Request::Execute { plan: None, rows_of: Some(s), .. }, .. }) = self.due.front() {
            s.rows.set(negotiate::execution_seen(s.rows.get()));
        }
    }
}
