//! [`Memo`]: the few entries auto-prepare's hot path keeps per shard so that
//! a statement seen lately costs a comparison, not a scan: the lexer's
//! templates (`lexer::relex`), the texts it looked for marks in
//! (`lexer::marks`) and the traits of rewritten texts
//! (`client::exchange::rewrite`).
//!
//! It owns only which entry holds which key and which one goes next; what
//! an entry holds, whether a found entry really fits (its text compared),
//! and the bytes entries retain are each caller's. Written here rather than
//! taken from an LRU crate: an LRU hashes its keys and keeps recency links,
//! where for eight entries a compare of 64-bit keys in turn is less work,
//! and refilling in turn is all these memos need (a transaction's few
//! statements each keep theirs). Nothing here allocates once the entries
//! exist.

/// Up to `N` entries, one per 64-bit key: the entry found (or filled) last
/// is looked at first, as a hot statement comes again and again; a new key
/// takes a free entry, else the entries in turn (a transaction's few
/// statements, run in rotation, each keep theirs).
#[derive(Debug, Clone)]
pub struct Memo<T, const N: usize> {
    kept: Vec<(u64, T)>,
    /// The entry filled last once all `N` were taken.
    next: usize,
    /// The entry found or filled last.
    last: usize,
}

impl<T, const N: usize> Default for Memo<T, N> {
    fn default() -> Self {
        Memo { kept: Vec::new(), next: 0, last: 0 }
    }
}

impl<T: Default, const N: usize> Memo<T, N> {
    /// The entry of `key`, if one is kept.
    #[inline]
    pub fn find(&mut self, key: u64) -> Option<usize> {
        let i = match self.kept.get(self.last) {
            Some((k, _)) if *k == key => self.last,
            _ => self.kept.iter().position(|(k, _)| *k == key)?,
        };
        self.last = i;
        Some(i)
    }

    /// Entry `i`, as [`Memo::find`] or [`Memo::place`] gave it.
    pub fn get(&self, i: usize) -> &T {
        &self.kept[i].1
    }

    /// Entry `i`, to change in place.
    pub fn get_mut(&mut self, i: usize) -> &mut T {
        &mut self.kept[i].1
    }

    /// The entry to keep `key`'s in: `found` (its own, from [`Memo::find`]),
    /// else a new one while fewer than `N` are kept, else the next in turn.
    /// It comes as it was, for the caller to refill. (Out of line: the
    /// hot path finds what it looks for.)
    #[inline(never)]
    pub fn place(&mut self, key: u64, found: Option<usize>) -> (usize, &mut T) {
        let i = match found {
            Some(i) => i,
            None if self.kept.len() < N => {
                self.kept.push((key, T::default()));
                self.kept.len() - 1
            }
            None => {
                self.next = (self.next + 1) % N;
                self.next
            }
        };
        self.last = i;
        let (k, entry) = &mut self.kept[i];
        *k = key;
        (i, entry)
    }

    /// The entries kept, in no particular order.
    pub fn entries(&self) -> impl Iterator<Item = &T> {
        self.kept.iter().map(|(_, entry)| entry)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Keeps `key`'s entry as `value`, as a caller would after a miss.
    fn keep(memo: &mut Memo<u32, 3>, key: u64, value: u32) -> usize {
        let found = memo.find(key);
        let (i, entry) = memo.place(key, found);
        *entry = value;
        i
    }

    #[test]
    fn a_kept_key_is_found_with_its_entry() {
        let mut memo = Memo::<u32, 3>::default();
        assert_eq!(memo.find(1), None);
        let i = keep(&mut memo, 1, 10);
        keep(&mut memo, 2, 20);
        assert_eq!(memo.find(1), Some(i));
        assert_eq!(*memo.get(i), 10);
        assert_eq!(memo.find(3), None);
    }

    #[test]
    fn a_key_kept_again_keeps_its_one_entry() {
        let mut memo = Memo::<u32, 3>::default();
        let i = keep(&mut memo, 1, 10);
        assert_eq!(keep(&mut memo, 1, 11), i);
        assert_eq!(memo.entries().count(), 1);
        assert_eq!(*memo.get(i), 11);
    }

    #[test]
    fn once_full_the_entries_are_refilled_in_turn_whatever_was_found_last() {
        let mut memo = Memo::<u32, 3>::default();
        for key in 1..=3 {
            keep(&mut memo, key, key as u32);
        }
        // Found over and over, key 2 still goes in its turn: a rotation of
        // more statements than entries evicts each in order, not the hot one
        // by chance.
        for _ in 0..5 {
            assert!(memo.find(2).is_some());
        }
        keep(&mut memo, 4, 4);
        assert_eq!(memo.find(2), None, "the entry after the first is refilled first");
        assert!(memo.find(1).is_some() && memo.find(3).is_some() && memo.find(4).is_some());
        keep(&mut memo, 5, 5);
        keep(&mut memo, 6, 6);
        assert_eq!(memo.find(1), None);
        assert_eq!(memo.find(3), None);
        let mut values: Vec<u32> = memo.entries().copied().collect();
        values.sort();
        assert_eq!(values, [4, 5, 6]);
    }

    #[test]
    fn a_rotation_that_fits_never_misses_once_kept() {
        let mut memo = Memo::<u32, 3>::default();
        for round in 0..4 {
            for key in [7, 8, 9] {
                let found = memo.find(key);
                assert_eq!(found.is_some(), round > 0, "round {round}, key {key}");
                if found.is_none() {
                    keep(&mut memo, key, 0);
                }
            }
        }
    }
}
