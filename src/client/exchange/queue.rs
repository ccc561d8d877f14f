//! The queue of what is due to one client: an entry per answer still to
//! come, the server's or pglane's own, in the order the client expects them
//! (see [`Due`]).
//!
//! It also keeps the one fact about entries that have left it that server
//! pipelining needs: whether, since the client's requests were last all
//! answered, one that may change the server session went in. An entry leaves
//! when its answer comes, but what its statement did stays: a BEGIN
//! answered before its request's Sync leaves a Bind of a plain SELECT and a
//! Sync due, which look harmless, on a session inside a transaction block
//! that the last ReadyForQuery knew nothing of (see
//! [`Exchange::may_be_followed`](super::Exchange::may_be_followed)).
//!
//! It owns no matching of replies: that is the exchange's.

use std::collections::VecDeque;

use super::Due;

#[derive(Debug, Default)]
pub(super) struct DueQueue {
    entries: VecDeque<Due>,
    /// Entries are judged for [`DueQueue::touched_session`] (server
    /// pipelining is on for the client); else that costs nothing.
    watching: bool,
    /// An entry that may change the server session ([`Due::may_change_session`])
    /// went in since the last ReadyForQuery that left nothing due.
    touched_session: bool,
}

impl DueQueue {
    /// Judges the entries from now on (see [`DueQueue::touched_session`]).
    pub fn watch_session(&mut self) {
        self.watching = true;
    }

    #[inline]
    pub fn push_back(&mut self, due: Due) {
        self.judge(&due);
        self.entries.push_back(due);
    }

    #[inline]
    pub fn push_front(&mut self, due: Due) {
        self.judge(&due);
        self.entries.push_front(due);
    }

    #[inline]
    fn judge(&mut self, due: &Due) {
        if self.watching {
            self.touched_session |= due.may_change_session();
        }
    }

    #[inline]
    pub fn pop_front(&mut self) -> Option<Due> {
        self.entries.pop_front()
    }

    #[inline]
    pub fn front(&self) -> Option<&Due> {
        self.entries.front()
    }

    #[inline]
    pub fn back(&self) -> Option<&Due> {
        self.entries.back()
    }

    pub fn remove(&mut self, at: usize) -> Option<Due> {
        self.entries.remove(at)
    }

    #[inline]
    pub fn iter(&self) -> std::collections::vec_deque::Iter<'_, Due> {
        self.entries.iter()
    }

    pub fn range_mut(&mut self, range: std::ops::RangeFrom<usize>) -> std::collections::vec_deque::IterMut<'_, Due> {
        self.entries.range_mut(range)
    }

    pub fn as_slices(&self) -> (&[Due], &[Due]) {
        self.entries.as_slices()
    }

    #[inline]
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    #[inline]
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Whether an entry that may change the server session went in since
    /// the client's requests were last all answered ([`DueQueue::all_answered`]).
    /// Only a watching queue knows.
    pub fn touched_session(&self) -> bool {
        debug_assert!(self.watching);
        self.touched_session
    }

    /// A ReadyForQuery came and nothing is due: it says where the session
    /// stands after everything this client sent, so what left the queue
    /// before it no longer counts.
    pub fn all_answered(&mut self) {
        debug_assert!(self.entries.is_empty());
        self.touched_session = false;
    }

    /// Forgets everything (the server connection goes); lets the room go if
    /// it grew past `kept` entries.
    pub fn clear(&mut self, kept: usize) {
        if self.entries.capacity() > kept {
            self.entries = VecDeque::new();
        }
        self.entries.clear();
        self.touched_session = false;
    }

    /// Takes in `room` (an empty queue's storage, lent) if this queue has none.
    pub fn take_room(&mut self, room: VecDeque<Due>) {
        if self.entries.capacity() == 0 {
            self.entries = room;
        }
    }

    /// The storage, to lend on, if nothing is due; else an empty one (what
    /// is due stays with this client).
    pub fn give_room(&mut self) -> VecDeque<Due> {
        if self.entries.is_empty() {
            std::mem::take(&mut self.entries)
        } else {
            VecDeque::new()
        }
    }
}
