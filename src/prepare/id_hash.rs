//! The hasher of the statement maps keyed by numbers pglane makes: statement
//! ids, interned contexts, shape hashes.
//!
//! `HashMap`'s default, SipHash-1-3 with a random key, is there for keys an
//! attacker chooses; it costs ~60 instructions for a `u64`, ~140 a lookup
//! with the table's work, several lookups a transaction. None of these keys
//! is a client's choice: ids and contexts are counted up from 1, and shape
//! hashes are already keyed with a random seed per shard
//! (`prepare::lexer::shard_seed`). A multiply by an odd constant is enough
//! for them. Maps keyed by what a client sends (query texts, statement and
//! portal names, settings) keep SipHash.
//!
//! Written here rather than taken from a crate: the whole of it is one
//! multiply, and the crates that have it (rustc-hash, foldhash) bring a
//! string hash this module must not be used for.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// A map keyed by ids pglane made (see the module comment).
pub type IdMap<K, V> = HashMap<K, V, BuildHasherDefault<IdHasher>>;

/// Maps consecutive ids to distinct low bits (the table's buckets) and
/// spreads them over the high ones (its tags).
#[derive(Default)]
pub struct IdHasher(u64);

const ODD: u64 = 0x9E37_79B9_7F4A_7C15;

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write_u64(&mut self, id: u64) {
        self.0 = (self.0 ^ id).wrapping_mul(ODD);
    }

    fn write_u32(&mut self, id: u32) {
        self.write_u64(u64::from(id));
    }

    /// Not used by the keys above (integers, and structs of them); any other
    /// key still hashes, if slowly.
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(self.0.rotate_left(8) ^ u64::from(b));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hash(id: u64) -> u64 {
        let mut h = IdHasher::default();
        h.write_u64(id);
        h.finish()
    }

    #[test]
    fn consecutive_ids_hash_to_distinct_buckets_and_varied_tags() {
        let low: std::collections::HashSet<u64> = (1..=4096).map(|id| hash(id) & 4095).collect();
        assert_eq!(low.len(), 4096, "4,096 consecutive ids fill 4,096 buckets");
        let tags: std::collections::HashSet<u64> = (1..=4096).map(|id| hash(id) >> 57).collect();
        assert_eq!(tags.len(), 128, "every 7-bit tag is used");
    }

    #[test]
    fn a_u32_hashes_as_the_same_u64() {
        let mut h = IdHasher::default();
        h.write_u32(7);
        assert_eq!(h.finish(), hash(7));
    }

    #[test]
    fn maps_keyed_by_ids_work_as_maps() {
        let mut map: IdMap<u64, u64> = IdMap::default();
        for id in 0..10_000 {
            map.insert(id, id * 2);
        }
        assert!((0..10_000).all(|id| map.get(&id) == Some(&(id * 2))));
        assert_eq!(map.get(&10_000), None);
    }
}
