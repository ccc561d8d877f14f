//! One client's side of read routing: its min LSN (where its last write on
//! the primary ended) and the decision, per transaction, of where its next
//! request goes.
//!
//! A session holds one [`ClientRoute`] and asks it before each transaction;
//! it owns no socket and no server connection, and never waits.

use std::rc::Rc;

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

/// One client's routing state.
pub struct ClientRoute {
    router: Rc<Router>,
    /// The WAL position after the client's last transaction on the primary.
    written: Option<Lsn>,
    /// The transaction under way went to the primary and its end position
    /// is to be learned ([`ClientRoute::learn`]).
    on_primary: bool,
    /// The position after a transaction on the primary could not be
    /// learned: every read goes to the primary until one is.
    lost: bool,
}

impl ClientRoute {
    pub fn new(router: Rc<Router>) -> ClientRoute {
        ClientRoute { router, written: None, on_primary: false, lost: false }
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
    pub fn need(&self, carried: Option<&str>) -> Option<Lsn> {
        if self.lost {
            return Some(Lsn(u64::MAX));
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
        let kind = self.router.classifier.request(pending, max_body, prepared);
        let destination = match kind {
            Kind::Other => {
                self.router.count_primary();
                None
            }
            Kind::Read | Kind::ReadOnlyBlock => self.router.standby_for(self.need(carried)),
        };
        match destination {
            Some((host, pool)) => {
                self.on_primary = false;
                Destination::Standby { pool, host, one_request: kind == Kind::Read }
            }
            // A proven read writes nothing: the primary's position after
            // it is not asked (a round trip saved), and only the read
            // itself may run there.
            None => {
                self.on_primary = kind == Kind::Other;
                Destination::Primary { one_request: kind == Kind::Read }
            }
        }
    }

    /// Whether the transaction that just ended went to the primary (and
    /// its position should be learned); asked once per transaction.
    pub fn take_primary_transaction(&mut self) -> bool {
        std::mem::take(&mut self.on_primary)
    }

    /// The primary was asked where its WAL ends (counted).
    pub fn asked_position(&self) {
        self.router.count_position_asked();
    }

    /// The primary said where its WAL ended after the client's transaction.
    pub fn learn(&mut self, position: Lsn) {
        self.written = self.written.max(Some(position));
        self.lost = false;
    }

    /// The position after a transaction on the primary is not known.
    pub fn forget_position(&mut self) {
        self.lost = true;
    }

    pub fn written(&self) -> Option<Lsn> {
        self.written
    }
}

/// Reads the answer to [`super::COMMIT_POSITION_QUERY`].
pub fn read_commit_position(pairs: &[(String, String)]) -> Option<Lsn> {
    pairs.first().and_then(|(_, lsn)| lsn.parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_commit_position_is_read() {
        assert_eq!(read_commit_position(&[("lsn".into(), "0/3000060".into())]), Some(Lsn(0x300_0060)));
        assert_eq!(read_commit_position(&[("lsn".into(), "x".into())]), None);
        assert_eq!(read_commit_position(&[]), None);
    }
}
