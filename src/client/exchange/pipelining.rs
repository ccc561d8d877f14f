//! Server pipelining in the exchange: whether another client's request may
//! go to the server connection right behind what this client has sent
//! (`pool::Opening`).

use std::rc::Rc;

use super::super::pinning;
use super::{Due, Exchange, Local, Parsed, Request};
use crate::prepare::Statement;
use crate::protocol::backend;

/// See [`pinning::leaves_session_alone`]; worked out once per statement.
pub(super) fn leaves_session_alone(s: &Statement) -> bool {
    *s.leaves_session_alone.get_or_init(|| {
        std::str::from_utf8(crate::protocol::names::query_bytes(&s.key))
            .is_ok_and(|sql| pinning::leaves_session_alone(&pinning::MarkedText::of(sql)))
    })
}

impl Exchange {
    /// Server pipelining may apply to this client (see [`Exchange::may_be_followed`]).
    pub fn with_pipelining(self) -> Exchange {
        let mut exchange = Exchange { pipelining: true, ..self };
        exchange.due.watch_session();
        exchange
    }

    pub fn pipelining(&self) -> bool {
        self.pipelining
    }

    /// A request of this client's ran longer than `pool::opening::SLOW` with
    /// another client's behind it.
    pub fn ran_slowly(&mut self) {
        self.slow_at = Some(crate::rt::now());
    }

    /// Whether the server connection may take another client's request
    /// right behind what this one has sent (never without pipelining on for
    /// this client): everything sent is a whole
    /// request that leaves the session as it found it, whatever the server
    /// answers. That is: outside a transaction block, nothing held back or
    /// waiting to go, no setting being followed, nothing sent since the
    /// client's requests were last all answered that may change the session
    /// (answered already or not: a BEGIN before the Sync, answered, leaves
    /// a plain statement due on a session in a block the last
    /// ReadyForQuery did not know of; see `queue`), and due only
    /// - Binds of registry statements that [`pinning::leaves_session_alone`]
    ///   and have not run slowly with a request behind them lately
    ///   (`pool::opening::SLOW`);
    /// - simple queries and unnamed
    ///   statements' Parses and Binds passed through whose text leaves the
    ///   session alone, unless this client's requests ran slowly lately
    ///   ([`Exchange::ran_slowly`]);
    /// - their Describes (a portal's too, negotiated or not) and Executes,
    ///   pglane's own answers;
    ///
    /// and last what ends a request (a Sync or a simple query). Its replies
    /// then touch neither the connection's statements nor its settings (a
    /// failed Parse of the unnamed statement or Bind only skips to Sync), so
    /// the other client may translate its messages against them now.
    /// Negotiated portals are followed too: their rows are turned back into
    /// text by their own client's relay.
    pub fn may_be_followed(&self) -> bool {
        let settled = self.pipelining
            && self.tracker.status() == backend::TransactionStatus::Idle
            && self.tracker.is_synced()
            && !self.followed
            && !self.holding
            && !self.skip_to_sync
            && !self.realign
            && !self.resetting
            && self.pending_changes.is_empty()
            && !self.due.touched_session()
            && self.pinned.is_none()
            && !self.left_listening
            && self.failure.is_none()
            && self.for_server.is_empty()
            && self.due.back().is_some_and(Due::ends_request);
        if !settled {
            return false;
        }
        // A loop over the queue's two halves: the relay asks after every
        // step, and through `Iterator::all` the check of each entry was a
        // call of its own (callgrind: ~750 instructions a transaction).
        let passed_may_follow = crate::pool::opening::may_follow(self.slow_at);
        let (front, back) = self.due.as_slices();
        for due in front.iter().chain(back) {
            if !may_have_a_request_behind(due, passed_may_follow) {
                return false;
            }
        }
        true
    }

    /// Everything sent is answered, and the session is in a transaction
    /// block (or a failed one): no request of another client's may have
    /// been behind it.
    pub fn left_a_block_open(&self) -> bool {
        self.due.is_empty() && self.tracker.status() != backend::TransactionStatus::Idle
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
}

impl Due {
    /// Whether what this entry stands for may change the server session when
    /// it runs: a statement run (a Bind, a simple query, a function call)
    /// that is not known to leave the session alone. The rest runs nothing
    /// of the client's (Parse, Describe, Close, Execute of a portal whose
    /// Bind is judged, Sync, pglane's own requests and answers) or changes
    /// only what pglane records as it sends it (statements prepared and
    /// closed, settings aligned).
    #[inline]
    pub(super) fn may_change_session(&self) -> bool {
        match self {
            Due::Server { request: Request::Bind { statement: Some(s), .. }, .. } => !leaves_session_alone(s),
            Due::Server { request: Request::Bind { statement: None, plain }, .. } => !plain,
            Due::Server { request: Request::Query { plain }, .. } => !plain,
            Due::Server { request: Request::FunctionCall, .. } => true,
            _ => false,
        }
    }
}

/// Whether `due` is one of the entries [`Exchange::may_be_followed`]
/// allows; `passed_may_follow`: this client's passed-through requests have
/// not run slowly lately. Whether a registry statement's text leaves the
/// session alone was judged as its Bind went in the queue
/// ([`Due::may_change_session`]), which `may_be_followed` asks first.
#[inline(always)]
fn may_have_a_request_behind(due: &Due, passed_may_follow: bool) -> bool {
    match due {
        Due::Server { request: Request::Bind { statement: Some(s), .. }, .. } => {
            crate::pool::opening::may_follow(s.slow_at.get())
        }
        Due::Server {
            request:
                Request::Query { plain: true }
                | Request::Parse { parsed: Parsed::Unnamed { .. }, plain: true }
                | Request::Bind { statement: None, plain: true },
            ..
        } => passed_may_follow,
        Due::Server {
            request:
                // Negotiated or not: a portal's rows and its description
                // are turned back into text by its own client's relay.
                Request::Execute { .. }
                | Request::QueryDescribe { .. }
                | Request::Describe { cache: None, .. }
                | Request::Sync { .. },
            ..
        } => true,
        Due::Local(Local::ParseComplete { .. } | Local::Description(_)) => true,
        _ => false,
    }
}
