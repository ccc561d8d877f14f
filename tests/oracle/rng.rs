//! A seeded PRNG of our own (SplitMix64): the same seed gives the same
//! programs on every machine and every release of every crate.

/// SplitMix64 (Steele, Lea and Flood): one u64 of state, good enough to draw
/// grammar productions, and trivially reproducible.
pub struct Rng(u64);

impl Rng {
    /// The generator for `client`'s program of `seed`: clients of one seed
    /// draw independent streams, so shrinking one client's program never
    /// changes another's.
    pub fn for_client(seed: u64, client: usize) -> Rng {
        let mut rng = Rng(seed ^ (client as u64 + 1).wrapping_mul(0xD1B5_4A32_D192_ED03));
        rng.next_u64(); // decorrelate neighbouring seeds
        rng
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (`n > 0`; the modulo bias is irrelevant here).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }

    /// Uniform in `low..=high`.
    pub fn between(&mut self, low: usize, high: usize) -> usize {
        low + self.below(high - low + 1)
    }

    /// True with probability `percent`/100.
    pub fn chance(&mut self, percent: usize) -> bool {
        self.below(100) < percent
    }

    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}
