//! One client's side of read routing: its min LSN (where its last write on
//! the primary ended) and the decision, per transaction, of where its next
//! request goes.
//!
//! A session holds one [`ClientRoute`] and asks it before each transaction;
//! it owns no socket and no server connection, and never waits.

use std::rc::Rc;
use std::time::Instant;

use super::{Kind, Lsn, Router};
use crate::pool::Pool;

/// Where a client's next transaction goes.
pub enum Destination {
    /// The primary, the client's own pool, as without read routing.
    /// `one_request`: a read (no standby would do), after which the
    /// client's next request is judged anew; the relay takes no more of its
    /// messages, so that nothing but the read runs there unseen.
    Primary { one_request: bool },
    /// A standby's pool. `one_request`: the request is an implicit
    /// transaction, and the client's next request is judged anew (the
    /// relay takes no more of its messages); else the transaction is a
    /// `BEGIN READ ONLY` block, which runs there to its end.
    Standby { pool: Rc<Pool>, host: usize, one_request: bool },
}

/// Why a standby's answer to a read sends the read to the primary: what
/// a standby refuses that the primary the client thinks it talks to would
/// have run ([`refusal`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// 25006: the read was a write after all (a function that writes),
    /// refused before it did anything.
    Write,
    /// 40001 or 40P01 from a lone read: cancelled by a conflict with the
    /// standby's recovery, which no primary has.
    RecoveryConflict,
    /// 0A000, "cannot use serializable mode in a hot standby": the
    /// client's (or its role's) default isolation is serializable, which
    /// only the primary runs; its reads stay there from now on.
    Serializable,
}

/// The [`Refusal`] in a standby's replies to a lone read (whole backend
/// messages, as held), from the first ErrorResponse's SQLSTATE; None if
/// there is none, or its error is one the primary could give too.
pub fn refusal(replies: &[u8]) -> Option<Refusal> {
    use crate::protocol::{backend, frame};
    let mut rest = replies;
    while let Ok(Some(header)) = frame::parse_header(rest, usize::MAX >> 1) {
        let body = rest.get(frame::HEADER_LEN..frame::HEADER_LEN + header.body_len)?;
        rest = &rest[frame::HEADER_LEN + header.body_len..];
        if header.tag != backend::ERROR_RESPONSE {
            continue;
        }
        let fields = backend::decode_error_fields(body).ok()?;
        return match fields.code.as_str() {
            "25006" => Some(Refusal::Write),
            "40001" | "40P01" => Some(Refusal::RecoveryConflict),
            "0A000" if fields.message.contains("hot standby") => Some(Refusal::Serializable),
            _ => None,
        };
    }
    None
}

/// A read held on a standby: the request as the client sent it, and the
/// statement names it Parses (new to the client), to forget before it runs
/// again (see `classify::repeatable_request`).
pub struct HeldRead {
    pub request: bytes::BytesMut,
    pub parsed: Vec<String>,
}

/// One client's routing state.
pub struct ClientRoute {
    router: Rc<Router>,
    /// The WAL position after the client's last transaction on the primary.
    written: Option<Lsn>,
    /// The transaction under way went to the primary and its end position
    /// is to be learned ([`ClientRoute::transaction_ended`]).
    on_primary: bool,
    /// When the client's last transaction on the primary ended, while the
    /// position after it is not known yet: the monitor's first look at the
    /// primary that began later tells it ([`Router::primary_position_after`]).
    /// Until then every read goes to the primary.
    ended_at: Option<Instant>,
    /// The read just routed to a standby, while it may still run again on
    /// the primary (the session keeps it here: see `client::routing`).
    pub held_read: Option<HeldRead>,
    /// The next request goes to the primary, whatever it is: the held read,
    /// run again ([`ClientRoute::retry_on_primary`]).
    retry_next: bool,
    /// A standby refused its reads for their isolation (serializable):
    /// they all go to the primary.
    reads_on_primary: bool,
}

impl ClientRoute {
    pub fn new(router: Rc<Router>) -> ClientRoute {
        ClientRoute {
            router,
            written: None,
            on_primary: false,
            ended_at: None,
            held_read: None,
            retry_next: false,
            reads_on_primary: false,
        }
    }

    /// Whether a reload retired its router (see [`Router::retire`]).
    pub fn is_retired(&self) -> bool {
        self.router.is_retired()
    }

    /// Routes through `router` from now on (the shard's new one for the
    /// database), keeping what the client wrote.
    pub fn rebind(&mut self, router: Rc<Router>) {
        self.router = router;
    }

    /// What the standby must have replayed for this client: the later of
    /// its last write and the position it carries itself (`carried`, its
    /// `pglane.min_lsn` setting; a value that is not a position is ignored).
    /// A position still to be learned after its last transaction on the
    /// primary is taken from the router if the monitor has it (else no
    /// standby will do).
    pub fn need(&mut self, carried: Option<&str>) -> Option<Lsn> {
        if let Some(ended) = self.ended_at {
            let Some(position) = self.router.primary_position_after(ended) else { return Some(Lsn(u64::MAX)) };
            self.written = self.written.max(Some(position));
            self.ended_at = None;
            self.router.count_position_learned();
        }
        let carried = carried.and_then(|c| c.parse::<Lsn>().ok());
        self.written.max(carried)
    }

    /// Where the request at the front of `pending` goes; `prepared` gives
    /// the text of a statement the client named in an earlier request.
    pub fn decide<'s>(
        &mut self,
        pending: &[u8],
        max_body: usize,
        carried: Option<&str>,
        prepared: impl Fn(&[u8]) -> Option<&'s [u8]>,
    ) -> Destination {
        if std::mem::take(&mut self.retry_next) {
            return Destination::Primary { one_request: true };
        }
        let kind = self.router.classifier.request(pending, max_body, prepared);
        let destination = match kind {
            Kind::Other => {
                self.router.count_primary();
                None
            }
            Kind::Read | Kind::ReadOnlyBlock if self.reads_on_primary => None,
            Kind::Read | Kind::ReadOnlyBlock => {
                let need = self.need(carried);
                self.router.standby_for(need)
            }
        };
        match destination {
            Some((host, pool)) => {
                self.on_primary = false;
                Destination::Standby { pool, host, one_request: kind == Kind::Read }
            }
            // A proven read writes nothing: the primary's position after
            // it is not needed, and only the read itself may run there.
            None => {
                self.on_primary = kind == Kind::Other;
                Destination::Primary { one_request: kind == Kind::Read }
            }
        }
    }

    /// The read just routed to a standby runs again on the primary, as
    /// the next request (`why`: the standby's refusal, None if it went
    /// away): it may have been a write the standby refused (25006), so its
    /// position is learned after it as after any transaction there.
    pub fn retry_on_primary(&mut self, why: Option<Refusal>) {
        self.reads_on_primary |= why == Some(Refusal::Serializable);
        self.retry_next = true;
        self.on_primary = true;
        self.router.count_retry();
    }

    /// The client's transaction ended (its server connection is given
    /// back) at `now`: if it went to the primary and may have written, the
    /// client's reads wait for the primary's position after `now`, which the
    /// primary's monitor is asked to look for at once.
    pub fn transaction_ended(&mut self, now: Instant) {
        if std::mem::take(&mut self.on_primary) {
            self.ended_at = Some(now);
            self.router.look_at_the_primary();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::router::{HostView, Role};
    use std::time::Duration;

    fn router() -> Rc<Router> {
        Router::for_tests(2)
    }

    #[test]
    fn after_a_transaction_on_the_primary_reads_wait_for_a_later_look_at_it() {
        let router = router();
        let mut route = ClientRoute::new(router.clone());
        let t0 = Instant::now();
        let seen = |position: u64, asked: Instant| HostView {
            role: Role::Primary,
            position: Some(Lsn(position)),
            seen: Some(asked),
            asked: Some(asked),
        };
        router.saw(0, seen(100, t0));
        assert_eq!(route.need(None), None, "a client that never wrote");
        route.on_primary = true;
        let ended = t0 + Duration::from_millis(1);
        route.transaction_ended(ended);
        // The monitor's last look began before the transaction ended: the
        // position is not known, and the read goes to the primary.
        assert_eq!(route.need(None), Some(Lsn(u64::MAX)));
        router.saw(0, seen(200, ended));
        assert_eq!(route.need(None), Some(Lsn(u64::MAX)), "a look begun in the same instant does not count");
        router.saw(0, seen(300, ended + Duration::from_millis(1)));
        assert_eq!(route.need(None), Some(Lsn(300)));
        assert_eq!(route.need(Some("0/500")), Some(Lsn(0x500)), "the later of the two");
        assert_eq!(router.stats().positions_learned, 1);
        // A transaction that was a read on the primary leaves nothing to learn.
        route.transaction_ended(ended + Duration::from_millis(5));
        assert_eq!(route.need(None), Some(Lsn(300)));
    }

    #[test]
    fn a_read_retried_goes_to_the_primary_once_and_counts_as_a_write() {
        let router = router();
        let mut route = ClientRoute::new(router.clone());
        route.retry_on_primary(Some(Refusal::Write));
        // Whatever the request is (this one is no message at all).
        assert!(matches!(route.decide(b"", 1 << 20, None, |_| None), Destination::Primary { one_request: true }));
        assert_eq!(router.stats().retried_on_primary, 1);
        // Its position after it is to be learned, as after a write.
        route.transaction_ended(Instant::now());
        assert_eq!(route.need(None), Some(Lsn(u64::MAX)));
        // Once: the next request is judged (no message at all is no read).
        assert!(matches!(route.decide(b"", 1 << 20, None, |_| None), Destination::Primary { one_request: false }));
    }

    fn error(code: &str, message: &str) -> bytes::BytesMut {
        let mut out = bytes::BytesMut::new();
        crate::protocol::backend::error_response(&mut out, &crate::protocol::backend::ErrorFields::error(code, message));
        out
    }

    #[test]
    fn what_a_standby_refuses_that_a_primary_would_run() {
        let mut replies = bytes::BytesMut::new();
        crate::protocol::backend::row_description(&mut replies, &[]);
        replies.extend_from_slice(&error("25006", "cannot execute INSERT in a read-only transaction"));
        assert_eq!(refusal(&replies), Some(Refusal::Write), "after a RowDescription");
        assert_eq!(
            refusal(&error("40001", "canceling statement due to conflict with recovery")),
            Some(Refusal::RecoveryConflict)
        );
        assert_eq!(
            refusal(&error("40P01", "canceling statement due to conflict with recovery")),
            Some(Refusal::RecoveryConflict)
        );
        assert_eq!(refusal(&error("0A000", "cannot use serializable mode in a hot standby")), Some(Refusal::Serializable));
        // What the primary would say as well.
        assert_eq!(refusal(&error("0A000", "cached plan must not change result type")), None);
        assert_eq!(refusal(&error("42P01", "relation \"t\" does not exist")), None);
        assert_eq!(refusal(b""), None);
    }

    #[test]
    fn a_client_whose_reads_a_standby_refuses_for_serializable_reads_on_the_primary() {
        let router = router();
        let mut route = ClientRoute::new(router.clone());
        route.retry_on_primary(Some(Refusal::Serializable));
        let _ = route.decide(b"", 1 << 20, None, |_| None);
        assert!(route.reads_on_primary);
        let mut read = bytes::BytesMut::new();
        crate::protocol::frontend::query(&mut read, "select 1");
        assert!(matches!(route.decide(&read, 1 << 20, None, |_| None), Destination::Primary { one_request: true }));
    }
}
