//! Ryū, the shortest decimal that reads back as the same float, exactly as
//! PostgreSQL builds it (`src/common/d2s.c`, `f2s.c`).
//!
//! PostgreSQL compiles Ryū without `STRICTLY_SHORTEST`: the ends of a
//! value's rounding interval never count as inside it. Ryū libraries
//! (the `ryu` crate included) accept them for even mantissas and then print
//! `1e+23` where PostgreSQL prints `9.999999999999999e+22`, so this is a port
//! of PostgreSQL's variant: same steps, same tables, same rounding.
//!
//! The power-of-5 tables are computed once, on first use, from their
//! definitions (a few hundred big-integer divisions, well under a
//! millisecond) rather than pasted in as 1,300 opaque constants.

use std::sync::OnceLock;

/// The value `mantissa × 10^exponent`, mantissa without trailing zeros
/// (except from the loop's rounding, which PostgreSQL prints as is).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct FloatingDecimal {
    pub mantissa: u64,
    pub exponent: i32,
}

const DOUBLE_MANTISSA_BITS: u32 = 52;
const DOUBLE_EXPONENT_BITS: u32 = 11;
const DOUBLE_BIAS: i32 = 1023;
const DOUBLE_POW5_INV_BITCOUNT: i32 = 122;
const DOUBLE_POW5_BITCOUNT: i32 = 121;
const DOUBLE_POW5_INV_ENTRIES: usize = 292;
const DOUBLE_POW5_ENTRIES: usize = 326;

const FLOAT_MANTISSA_BITS: u32 = 23;
const FLOAT_EXPONENT_BITS: u32 = 8;
const FLOAT_BIAS: i32 = 127;
const FLOAT_POW5_INV_BITCOUNT: i32 = 59;
const FLOAT_POW5_BITCOUNT: i32 = 61;
const FLOAT_POW5_INV_ENTRIES: usize = 31;
const FLOAT_POW5_ENTRIES: usize = 47;

/// ⌈log₂ 5^e⌉ (1 for e = 0).
fn pow5bits(e: i32) -> i32 {
    (((e as u32) * 1_217_359) >> 19) as i32 + 1
}

/// ⌊log₁₀ 2^e⌋.
fn log10_pow2(e: i32) -> u32 {
    ((e as u32) * 78_913) >> 18
}

/// ⌊log₁₀ 5^e⌋.
fn log10_pow5(e: i32) -> u32 {
    ((e as u32) * 732_923) >> 20
}

fn multiple_of_power_of_5(mut value: u64, p: u32) -> bool {
    let mut count = 0;
    while value.is_multiple_of(5) && count < p {
        value /= 5;
        count += 1;
    }
    count >= p
}

fn multiple_of_power_of_2(value: u64, p: u32) -> bool {
    value & ((1u64 << p) - 1) == 0
}

/// The shortest decimal of a finite, non-zero double, as PostgreSQL's
/// `d2d` computes it (for the magnitude; the sign is the caller's).
pub(super) fn shortest_f64(value: f64) -> FloatingDecimal {
    let bits = value.to_bits();
    let ieee_mantissa = bits & ((1u64 << DOUBLE_MANTISSA_BITS) - 1);
    let ieee_exponent = ((bits >> DOUBLE_MANTISSA_BITS) & ((1u64 << DOUBLE_EXPONENT_BITS) - 1)) as u32;
    let tables = tables();

    // Step 1: m2 × 2^e2, with two extra bits for the interval bounds.
    let (e2, m2) = if ieee_exponent == 0 {
        (1 - DOUBLE_BIAS - DOUBLE_MANTISSA_BITS as i32 - 2, ieee_mantissa)
    } else {
        (ieee_exponent as i32 - DOUBLE_BIAS - DOUBLE_MANTISSA_BITS as i32 - 2, (1u64 << DOUBLE_MANTISSA_BITS) | ieee_mantissa)
    };
    // Step 2: the interval of valid decimals, (mm, mp) around mv, ends
    // excluded (PostgreSQL's acceptBounds is always false).
    let mv = 4 * m2;
    let mm_shift = u64::from(ieee_mantissa != 0 || ieee_exponent <= 1);
    let mul_shift_all = |mul: (u64, u64), j: i32| {
        let shift = |m: u64| {
            let b0 = u128::from(m) * u128::from(mul.0);
            let b2 = u128::from(m) * u128::from(mul.1);
            (((b0 >> 64) + b2) >> (j - 64)) as u64
        };
        (shift(4 * m2), shift(4 * m2 + 2), shift(4 * m2 - 1 - mm_shift))
    };

    // Step 3: to a decimal power base.
    let (e10, mut vr, mut vp, mut vm);
    let mut vr_is_trailing_zeros = false;
    if e2 >= 0 {
        let q = log10_pow2(e2) - u32::from(e2 > 3);
        e10 = q as i32;
        let k = DOUBLE_POW5_INV_BITCOUNT + pow5bits(q as i32) - 1;
        let i = -e2 + q as i32 + k;
        (vr, vp, vm) = mul_shift_all(tables.double_pow5_inv[q as usize], i);
        if q <= 21 {
            if mv % 5 == 0 {
                vr_is_trailing_zeros = multiple_of_power_of_5(mv, q);
            } else {
                vp -= u64::from(multiple_of_power_of_5(mv + 2, q));
            }
        }
    } else {
        let q = log10_pow5(-e2) - u32::from(-e2 > 1);
        e10 = q as i32 + e2;
        let i = -e2 - q as i32;
        let k = pow5bits(i) - DOUBLE_POW5_BITCOUNT;
        let j = q as i32 - k;
        (vr, vp, vm) = mul_shift_all(tables.double_pow5[i as usize], j);
        if q <= 1 {
            vr_is_trailing_zeros = true;
            vp -= 1;
        } else if q < 63 {
            vr_is_trailing_zeros = multiple_of_power_of_2(mv, q - 1);
        }
    }

    // Step 4: the shortest decimal in the interval.
    let mut removed = 0;
    let output = if vr_is_trailing_zeros {
        // General case (~0.7%): track whether the removed digits are 50…0.
        let mut last_removed_digit = 0;
        while vp / 10 > vm / 10 {
            vr_is_trailing_zeros &= last_removed_digit == 0;
            last_removed_digit = vr % 10;
            vr /= 10;
            vp /= 10;
            vm /= 10;
            removed += 1;
        }
        if vr_is_trailing_zeros && last_removed_digit == 5 && vr % 2 == 0 {
            last_removed_digit = 4; // round half to even
        }
        vr + u64::from(vr == vm || last_removed_digit >= 5)
    } else {
        let mut round_up = false;
        if vp / 100 > vm / 100 {
            round_up = vr % 100 >= 50;
            vr /= 100;
            vp /= 100;
            vm /= 100;
            removed += 2;
        }
        while vp / 10 > vm / 10 {
            round_up = vr % 10 >= 5;
            vr /= 10;
            vp /= 10;
            vm /= 10;
            removed += 1;
        }
        vr + u64::from(vr == vm || round_up)
    };
    FloatingDecimal { mantissa: output, exponent: e10 + removed }
}

/// The shortest decimal of a finite, non-zero float, as PostgreSQL's `f2d`
/// computes it.
pub(super) fn shortest_f32(value: f32) -> FloatingDecimal {
    let bits = value.to_bits();
    let ieee_mantissa = bits & ((1u32 << FLOAT_MANTISSA_BITS) - 1);
    let ieee_exponent = (bits >> FLOAT_MANTISSA_BITS) & ((1u32 << FLOAT_EXPONENT_BITS) - 1);
    let tables = tables();

    let (e2, m2) = if ieee_exponent == 0 {
        (1 - FLOAT_BIAS - FLOAT_MANTISSA_BITS as i32 - 2, ieee_mantissa)
    } else {
        (ieee_exponent as i32 - FLOAT_BIAS - FLOAT_MANTISSA_BITS as i32 - 2, (1u32 << FLOAT_MANTISSA_BITS) | ieee_mantissa)
    };
    let mv = 4 * m2;
    let mp = 4 * m2 + 2;
    let mm_shift = u32::from(ieee_mantissa != 0 || ieee_exponent <= 1);
    let mm = 4 * m2 - 1 - mm_shift;
    let mul_shift = |m: u32, factor: u64, shift: i32| -> u32 {
        let bits0 = u64::from(m) * (factor & 0xffff_ffff);
        let bits1 = u64::from(m) * (factor >> 32);
        (((bits0 >> 32) + bits1) >> (shift - 32)) as u32
    };

    let (e10, mut vr, mut vp, mut vm);
    let mut vr_is_trailing_zeros = false;
    let mut last_removed_digit = 0;
    if e2 >= 0 {
        let q = log10_pow2(e2);
        e10 = q as i32;
        let k = FLOAT_POW5_INV_BITCOUNT + pow5bits(q as i32) - 1;
        let i = -e2 + q as i32 + k;
        let factor = tables.float_pow5_inv[q as usize];
        (vr, vp, vm) = (mul_shift(mv, factor, i), mul_shift(mp, factor, i), mul_shift(mm, factor, i));
        if q != 0 && (vp - 1) / 10 <= vm / 10 {
            // One removed digit is needed even if the loop below removes none.
            let l = FLOAT_POW5_INV_BITCOUNT + pow5bits(q as i32 - 1) - 1;
            let factor = tables.float_pow5_inv[q as usize - 1];
            last_removed_digit = mul_shift(mv, factor, -e2 + q as i32 - 1 + l) % 10;
        }
        if q <= 9 {
            if mv % 5 == 0 {
                vr_is_trailing_zeros = multiple_of_power_of_5(u64::from(mv), q);
            } else {
                vp -= u32::from(multiple_of_power_of_5(u64::from(mp), q));
            }
        }
    } else {
        let q = log10_pow5(-e2);
        e10 = q as i32 + e2;
        let i = -e2 - q as i32;
        let k = pow5bits(i) - FLOAT_POW5_BITCOUNT;
        let j = q as i32 - k;
        let factor = tables.float_pow5[i as usize];
        (vr, vp, vm) = (mul_shift(mv, factor, j), mul_shift(mp, factor, j), mul_shift(mm, factor, j));
        if q != 0 && (vp - 1) / 10 <= vm / 10 {
            let j = q as i32 - 1 - (pow5bits(i + 1) - FLOAT_POW5_BITCOUNT);
            last_removed_digit = mul_shift(mv, tables.float_pow5[i as usize + 1], j) % 10;
        }
        if q <= 1 {
            vr_is_trailing_zeros = true;
            vp -= 1;
        } else if q < 31 {
            vr_is_trailing_zeros = multiple_of_power_of_2(u64::from(mv), q - 1);
        }
    }

    let mut removed = 0;
    let output = if vr_is_trailing_zeros {
        while vp / 10 > vm / 10 {
            vr_is_trailing_zeros &= last_removed_digit == 0;
            last_removed_digit = vr % 10;
            vr /= 10;
            vp /= 10;
            vm /= 10;
            removed += 1;
        }
        if vr_is_trailing_zeros && last_removed_digit == 5 && vr % 2 == 0 {
            last_removed_digit = 4;
        }
        vr + u32::from(vr == vm || last_removed_digit >= 5)
    } else {
        while vp / 10 > vm / 10 {
            last_removed_digit = vr % 10;
            vr /= 10;
            vp /= 10;
            vm /= 10;
            removed += 1;
        }
        vr + u32::from(vr == vm || last_removed_digit >= 5)
    };
    FloatingDecimal { mantissa: u64::from(output), exponent: e10 + removed }
}

/// Ryū's multipliers: 5^i and 2^k / 5^q, cut to a fixed number of bits.
struct Tables {
    /// (low, high) halves of ⌊2^(pow5bits(q) − 1 + 122) / 5^q⌋ + 1.
    double_pow5_inv: [(u64, u64); DOUBLE_POW5_INV_ENTRIES],
    /// (low, high) halves of 5^i's top 121 bits.
    double_pow5: [(u64, u64); DOUBLE_POW5_ENTRIES],
    /// ⌊2^(pow5bits(q) − 1 + 59) / 5^q⌋ + 1.
    float_pow5_inv: [u64; FLOAT_POW5_INV_ENTRIES],
    /// 5^i's top 61 bits.
    float_pow5: [u64; FLOAT_POW5_ENTRIES],
}

fn tables() -> &'static Tables {
    static TABLES: OnceLock<Tables> = OnceLock::new();
    TABLES.get_or_init(|| {
        let mut tables = Tables {
            double_pow5_inv: [(0, 0); DOUBLE_POW5_INV_ENTRIES],
            double_pow5: [(0, 0); DOUBLE_POW5_ENTRIES],
            float_pow5_inv: [0; FLOAT_POW5_INV_ENTRIES],
            float_pow5: [0; FLOAT_POW5_ENTRIES],
        };
        let split = |x: u128| (x as u64, (x >> 64) as u64);
        let mut pow5 = Big::one();
        for i in 0..DOUBLE_POW5_INV_ENTRIES.max(DOUBLE_POW5_ENTRIES) {
            let bits = pow5bits(i as i32);
            if i < DOUBLE_POW5_ENTRIES {
                tables.double_pow5[i] = split(pow5.top_bits(bits, DOUBLE_POW5_BITCOUNT));
            }
            if i < DOUBLE_POW5_INV_ENTRIES {
                let quotient = Big::div_power_of_two(bits - 1 + DOUBLE_POW5_INV_BITCOUNT, &pow5);
                tables.double_pow5_inv[i] = split(quotient + 1);
            }
            if i < FLOAT_POW5_ENTRIES {
                tables.float_pow5[i] = pow5.top_bits(bits, FLOAT_POW5_BITCOUNT) as u64;
            }
            if i < FLOAT_POW5_INV_ENTRIES {
                let quotient = Big::div_power_of_two(bits - 1 + FLOAT_POW5_INV_BITCOUNT, &pow5);
                tables.float_pow5_inv[i] = (quotient + 1) as u64;
            }
            pow5.mul_small(5);
        }
        tables
    })
}

/// Just enough of an unsigned big integer for the tables: 5^325 has 755
/// bits, 2^914 is the largest dividend.
#[derive(Clone, Copy)]
struct Big {
    /// Little-endian 64-bit limbs.
    limbs: [u64; Big::LIMBS],
}

impl Big {
    const LIMBS: usize = 16;

    fn one() -> Big {
        let mut limbs = [0; Big::LIMBS];
        limbs[0] = 1;
        Big { limbs }
    }

    fn mul_small(&mut self, factor: u64) {
        let mut carry = 0u128;
        for limb in &mut self.limbs {
            let product = u128::from(*limb) * u128::from(factor) + carry;
            *limb = product as u64;
            carry = product >> 64;
        }
        debug_assert_eq!(carry, 0, "table value overflows Big");
    }

    fn bit(&self, n: i32) -> bool {
        let n = n as usize;
        n < 64 * Big::LIMBS && self.limbs[n / 64] >> (n % 64) & 1 == 1
    }

    /// The top `count` bits of a number that has `len` bits, as an integer
    /// (shifted left if it has fewer).
    fn top_bits(&self, len: i32, count: i32) -> u128 {
        (0..count).fold(0u128, |acc, k| {
            let n = len - 1 - k;
            (acc << 1) | u128::from(n >= 0 && self.bit(n))
        })
    }

    /// ⌊2^exponent / divisor⌋, which must fit in 127 bits.
    fn div_power_of_two(exponent: i32, divisor: &Big) -> u128 {
        let mut remainder = Big { limbs: [0; Big::LIMBS] };
        remainder.limbs[exponent as usize / 64] = 1 << (exponent % 64);
        let mut quotient = 0u128;
        for shift in (0..127).rev() {
            let shifted = divisor.shl(shift);
            if let Some(shifted) = shifted {
                if remainder.ge(&shifted) {
                    remainder.sub(&shifted);
                    quotient |= 1 << shift;
                }
            }
        }
        quotient
    }

    /// `self << n`, or None if it would not fit.
    fn shl(&self, n: usize) -> Option<Big> {
        let (words, bits) = (n / 64, n % 64);
        let mut limbs = [0u64; Big::LIMBS];
        for i in (0..Big::LIMBS).rev() {
            let value = self.limbs[i];
            if value == 0 {
                continue;
            }
            let low = i + words;
            if low >= Big::LIMBS || (bits > 0 && value >> (64 - bits) != 0 && low + 1 >= Big::LIMBS) {
                return None;
            }
            limbs[low] |= value << bits;
            if bits > 0 {
                limbs[low + 1] |= value >> (64 - bits);
            }
        }
        Some(Big { limbs })
    }

    fn ge(&self, other: &Big) -> bool {
        for i in (0..Big::LIMBS).rev() {
            if self.limbs[i] != other.limbs[i] {
                return self.limbs[i] > other.limbs[i];
            }
        }
        true
    }

    fn sub(&mut self, other: &Big) {
        let mut borrow = false;
        for (limb, &o) in self.limbs.iter_mut().zip(&other.limbs) {
            let (d, b1) = limb.overflowing_sub(o);
            let (d, b2) = d.overflowing_sub(u64::from(borrow));
            *limb = d;
            borrow = b1 || b2;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_match_postgresql_headers() {
        // Spot checks against d2s_full_table.h and f2s.c of PostgreSQL 15.
        let t = tables();
        assert_eq!(t.double_pow5_inv[0], (1, 288230376151711744));
        assert_eq!(t.double_pow5_inv[1], (3689348814741910324, 230584300921369395));
        assert_eq!(t.double_pow5_inv[291], (14258051472207991719, 179769313486231590));
        assert_eq!(t.double_pow5[0], (0, 72057594037927936));
        assert_eq!(t.double_pow5[1], (0, 90071992547409920));
        assert_eq!(t.double_pow5[325], (2850236603241744433, 111253692925360069));
        assert_eq!(t.float_pow5_inv[0], 576460752303423489);
        assert_eq!(t.float_pow5_inv[30], 365375409332725730);
        assert_eq!(t.float_pow5[0], 1152921504606846976);
        assert_eq!(t.float_pow5[46], 2019483917365790221);
    }

    fn digits(value: f64) -> (u64, i32) {
        let d = shortest_f64(value);
        (d.mantissa, d.exponent)
    }

    #[test]
    fn bounds_are_excluded() {
        // 1e23 lies exactly on this double's upper rounding boundary.
        assert_eq!(digits(1e23), (9999999999999999, 7));
        assert_eq!(digits(0.3), (3, -1));
        assert_eq!(digits(5e-324), (5, -324));
        assert_eq!(digits(f64::MAX), (17976931348623157, 292));
        let f = shortest_f32(3.4028235e38);
        assert_eq!((f.mantissa, f.exponent), (34028235, 31));
        let f = shortest_f32(1e-45);
        assert_eq!((f.mantissa, f.exponent), (1, -45));
    }
}
