//! Where a server connection stands in its conversation with one client, from
//! the tags of the messages relayed each way. Pure: no I/O, no buffers.
//!
//! The pooler needs one answer from it: may this server connection go back to
//! the pool now? Only when the server is idle (ReadyForQuery 'I') *and* has
//! nothing of the client's left to answer: every Query, FunctionCall and Sync
//! sent has had its ReadyForQuery, and no extended-protocol message was sent
//! after the last Sync. Pipelined clients (several Syncs in flight) keep their
//! server until the last one is answered.
//!
//! COPY FROM STDIN started by an extended-protocol Execute is the one twist:
//! the server ignores Sync messages that arrive while it is in copy-in mode
//! (libpq sends one right after the Execute, before it knows the command is a
//! COPY, and another after CopyDone), so those Syncs get no ReadyForQuery.

use crate::protocol::backend::{self, TransactionStatus};
use crate::protocol::frontend;

#[derive(Debug, Clone)]
pub struct Tracker {
    /// ReadyForQuery messages the server still owes.
    awaiting_ready: u32,
    /// An extended-protocol message was sent after the last Sync.
    unsynced: bool,
    /// Syncs sent since the last Execute (ignored if that Execute starts a COPY FROM STDIN).
    syncs_since_execute: u32,
    /// The last command-running message was an Execute (not a Query).
    last_run_was_execute: bool,
    /// The server is in copy-in mode.
    copy_in: bool,
    copy_in_from_execute: bool,
    status: TransactionStatus,
    /// The server answered a write with "cannot execute ... in a read-only
    /// transaction" (25006): on a read-write pool its host may have become
    /// read-only (see `pool::hosts`).
    read_only_error: bool,
}

impl Default for Tracker {
    fn default() -> Self {
        Tracker {
            awaiting_ready: 0,
            unsynced: false,
            syncs_since_execute: 0,
            last_run_was_execute: false,
            copy_in: false,
            copy_in_from_execute: false,
            status: TransactionStatus::Idle,
            read_only_error: false,
        }
    }
}

impl Tracker {
    /// A client message with this tag is being forwarded to the server.
    pub fn client_sent(&mut self, tag: u8) {
        match tag {
            frontend::QUERY | frontend::FUNCTION_CALL => {
                self.awaiting_ready += 1;
                self.unsynced = false;
                self.last_run_was_execute = false;
            }
            frontend::SYNC => {
                self.awaiting_ready += 1;
                self.unsynced = false;
                self.syncs_since_execute += 1;
            }
            frontend::EXECUTE => {
                self.unsynced = true;
                self.syncs_since_execute = 0;
                self.last_run_was_execute = true;
            }
            frontend::COPY_DONE | frontend::COPY_FAIL if self.copy_in => {
                if self.copy_in_from_execute {
                    self.awaiting_ready = self.awaiting_ready.saturating_sub(self.syncs_since_execute);
                    self.syncs_since_execute = 0;
                }
                self.copy_in = false;
            }
            frontend::PARSE | frontend::BIND | frontend::DESCRIBE | frontend::CLOSE => self.unsynced = true,
            _ => {}
        }
    }

    /// A server message with this tag (and, for ReadyForQuery, its status) is
    /// being forwarded to the client.
    pub fn server_sent(&mut self, tag: u8, body: &[u8]) {
        match tag {
            backend::READY_FOR_QUERY => {
                self.awaiting_ready = self.awaiting_ready.saturating_sub(1);
                if let Ok(status) = backend::decode_ready_for_query(body) {
                    self.status = status;
                }
                self.copy_in = false;
            }
            backend::COPY_IN_RESPONSE => {
                self.copy_in = true;
                self.copy_in_from_execute = self.last_run_was_execute;
            }
            backend::ERROR_RESPONSE if is_read_only_error(body) => self.read_only_error = true,
            _ => {}
        }
    }

    /// Has the server refused a write as read-only since the last call?
    pub fn take_read_only_error(&mut self) -> bool {
        std::mem::take(&mut self.read_only_error)
    }

    /// How many Syncs the server ignores when the client ends the COPY FROM
    /// STDIN it is in (those sent since the Execute that started it).
    pub fn syncs_ignored_by_copy(&self) -> u32 {
        if self.copy_in && self.copy_in_from_execute {
            self.syncs_since_execute
        } else {
            0
        }
    }

    /// The client's stream is at a Sync boundary: no extended-protocol
    /// message since the last Sync, and no COPY in progress. Messages
    /// pglane adds here cannot join a group of the client's.
    pub fn is_synced(&self) -> bool {
        !self.unsynced && !self.copy_in
    }

    /// Nothing in flight: every request answered, no unsynced extended messages.
    pub fn is_quiet(&self) -> bool {
        self.awaiting_ready == 0 && !self.unsynced && !self.copy_in
    }

    /// Quiet and outside a transaction block: the connection may be reused.
    pub fn is_releasable(&self) -> bool {
        self.is_quiet() && self.status == TransactionStatus::Idle
    }

    pub fn status(&self) -> TransactionStatus {
        self.status
    }
}

/// An ErrorResponse body whose SQLSTATE is 25006 (read_only_sql_transaction).
fn is_read_only_error(body: &[u8]) -> bool {
    backend::error_field_list(body).is_ok_and(|fields| fields.iter().any(|&(field, value)| field == b'C' && value == b"25006"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_read_only_error_is_noticed_once() {
        let error = |code: &str| {
            let mut out = bytes::BytesMut::new();
            backend::error_response(
                &mut out,
                &backend::ErrorFields::error(code, "cannot execute INSERT in a read-only transaction"),
            );
            out[5..].to_vec()
        };
        let mut t = Tracker::default();
        t.server_sent(backend::ERROR_RESPONSE, &error("42P01"));
        assert!(!t.take_read_only_error());
        t.server_sent(backend::ERROR_RESPONSE, &error("25006"));
        t.server_sent(b'Z', b"I");
        assert!(t.take_read_only_error());
        assert!(!t.take_read_only_error(), "taken");
        t.server_sent(backend::ERROR_RESPONSE, b"");
        assert!(!t.take_read_only_error(), "a malformed body is no such error");
    }

    fn run(t: &mut Tracker, client: &[u8]) {
        for &tag in client {
            t.client_sent(tag);
        }
    }

    #[test]
    fn simple_query_round_trip() {
        let mut t = Tracker::default();
        run(&mut t, b"Q");
        assert!(!t.is_releasable());
        t.server_sent(b'T', b"");
        t.server_sent(b'C', b"");
        t.server_sent(b'Z', b"I");
        assert!(t.is_releasable());
    }

    #[test]
    fn a_transaction_block_holds_the_connection() {
        let mut t = Tracker::default();
        run(&mut t, b"Q");
        t.server_sent(b'Z', b"T");
        assert!(t.is_quiet() && !t.is_releasable());
        run(&mut t, b"Q");
        t.server_sent(b'Z', b"E");
        assert!(!t.is_releasable());
        run(&mut t, b"Q");
        t.server_sent(b'Z', b"I");
        assert!(t.is_releasable());
    }

    #[test]
    fn pipelined_syncs_wait_for_the_last_ready_for_query() {
        let mut t = Tracker::default();
        run(&mut t, b"PBES");
        run(&mut t, b"PBES");
        t.server_sent(b'Z', b"I");
        assert!(!t.is_releasable(), "one Sync still unanswered");
        t.server_sent(b'Z', b"I");
        assert!(t.is_releasable());
    }

    #[test]
    fn extended_messages_without_sync_hold_the_connection() {
        let mut t = Tracker::default();
        run(&mut t, b"PBEH");
        assert!(!t.is_quiet());
        run(&mut t, b"S");
        t.server_sent(b'Z', b"I");
        assert!(t.is_releasable());
    }

    #[test]
    fn simple_copy_in() {
        let mut t = Tracker::default();
        run(&mut t, b"Q");
        t.server_sent(b'G', b"");
        run(&mut t, b"ddc");
        assert!(!t.is_releasable());
        t.server_sent(b'C', b"");
        t.server_sent(b'Z', b"I");
        assert!(t.is_releasable());
    }

    #[test]
    fn extended_copy_in_ignores_syncs_sent_during_copy() {
        // libpq: Parse Bind Describe Execute Sync, then CopyData.. CopyDone Sync.
        let mut t = Tracker::default();
        run(&mut t, b"PBDES");
        t.server_sent(b'G', b"");
        run(&mut t, b"ddc");
        run(&mut t, b"S");
        t.server_sent(b'C', b"");
        t.server_sent(b'Z', b"I");
        assert!(t.is_releasable());
    }

    #[test]
    fn copy_fail_in_simple_mode() {
        let mut t = Tracker::default();
        run(&mut t, b"Q");
        t.server_sent(b'G', b"");
        run(&mut t, b"df");
        t.server_sent(b'E', b"");
        t.server_sent(b'Z', b"I");
        assert!(t.is_releasable());
    }
}
