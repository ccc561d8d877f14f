//! The shape hash: equal for texts that are one statement up to their
//! literal values. The scanner feeds it each token that is not a slot (and
//! a marker with its parameter type for each slot); it sees no text itself.

use super::chars::lowercase_word;

/// The shape hash: a folded-multiply hash (as in foldhash / rapidhash) over
/// tagged tokens, keyed by the seed.
pub(super) struct ShapeHasher {
    state: u64,
    key: u64,
}

pub(super) const TAG_WORD: u64 = 1;
pub(super) const TAG_QUOTED: u64 = 2;
pub(super) const TAG_OPERATOR: u64 = 3;
pub(super) const TAG_SLOT: u64 = 4;
pub(super) const TAG_KEPT: u64 = 5;

#[inline]
fn folded_multiply(a: u64, b: u64) -> u64 {
    let full = u128::from(a) * u128::from(b);
    (full as u64) ^ ((full >> 64) as u64)
}

/// 1 to 7 bytes as a word, without the memcpy and store-forwarding stall of
/// copying them into a buffer. Given the length (hashed before it), the word
/// determines the bytes: two overlapping 4-byte reads, or the first, middle
/// and last byte (as in wyhash).
#[inline]
fn load_short(bytes: &[u8]) -> u64 {
    let len = bytes.len();
    if len >= 4 {
        let first = u32::from_le_bytes(bytes[..4].try_into().expect("4 bytes"));
        let last = u32::from_le_bytes(bytes[len - 4..].try_into().expect("4 bytes"));
        u64::from(first) | u64::from(last) << 32
    } else {
        u64::from(bytes[0]) | u64::from(bytes[len / 2]) << 8 | u64::from(bytes[len - 1]) << 16
    }
}

impl ShapeHasher {
    const K0: u64 = 0x9e37_79b9_7f4a_7c15;
    const K1: u64 = 0xd6e8_feb8_6659_fd93;

    #[inline]
    pub(super) fn new(seed: u64) -> ShapeHasher {
        ShapeHasher { state: seed ^ Self::K0, key: (seed.rotate_left(32) ^ Self::K1) | 1 }
    }

    #[inline]
    pub(super) fn mix(&mut self, word: u64) {
        self.state = folded_multiply(self.state ^ word, self.key);
    }

    /// A token: its tag and length, then its bytes eight at a time.
    #[inline]
    pub(super) fn token(&mut self, tag: u64, bytes: &[u8], fold_case: bool) {
        let fold = |word: u64| if fold_case { lowercase_word(word) } else { word };
        self.mix(tag | (bytes.len() as u64) << 8);
        let mut chunks = bytes.chunks_exact(8);
        for chunk in &mut chunks {
            self.mix(fold(u64::from_le_bytes(chunk.try_into().expect("8 bytes"))));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            self.mix(fold(load_short(rest)));
        }
    }

    #[inline]
    pub(super) fn finish(&self, slots: usize) -> u64 {
        folded_multiply(self.state ^ slots as u64, Self::K1 ^ self.key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_loads_keep_every_byte() {
        for len in 1..8 {
            let bytes: Vec<u8> = (1..=len as u8).collect();
            let word = load_short(&bytes);
            for (i, &b) in bytes.iter().enumerate() {
                assert!(word.to_le_bytes().contains(&b), "byte {i} of {len}");
            }
        }
        assert_ne!(load_short(b"abc"), load_short(b"acb"));
        assert_ne!(load_short(b"abcde"), load_short(b"abdce"));
    }
}
