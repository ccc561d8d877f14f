//! numeric (1700): `i16 ndigits, i16 weight, u16 sign, u16 dscale`, then
//! `ndigits` base-10000 digits (`numeric_send`); text as `numeric_out`
//! (`get_str_from_var`) prints it.
//!
//! The value is Σ digitᵢ·10000^(weight−i). The text is a `-` for negative
//! values, the integer part (`0` when weight < 0; else groups 0..=weight,
//! the first without leading zeros, missing groups 0000), then, for a
//! positive dscale, a point and exactly dscale fraction digits (missing
//! groups are zeros, extra digits are cut). NaN and the infinities ignore
//! everything else. lc_numeric does not matter.

use bytes::BytesMut;

use super::TranscodeError;

const TY: &str = "numeric";

const POSITIVE: u16 = 0x0000;
const NEGATIVE: u16 = 0x4000;
const NAN: u16 = 0xC000;
const PLUS_INFINITY: u16 = 0xD000;
const MINUS_INFINITY: u16 = 0xF000;

/// NBASE: each digit holds four decimal digits.
const NBASE: u16 = 10_000;
/// NUMERIC_DSCALE_MAX.
const MAX_DSCALE: u16 = 0x3FFF;

/// "00" to "99", two bytes each.
const PAIRS: [[u8; 2]; 100] = {
    let mut table = [[0u8; 2]; 100];
    let mut i = 0;
    while i < 100 {
        table[i] = [b'0' + (i / 10) as u8, b'0' + (i % 10) as u8];
        i += 1;
    }
    table
};

/// The four decimal digits of a base-10000 digit.
fn group(digit: usize) -> [u8; 4] {
    let [a, b] = PAIRS[digit / 100];
    let [c, d] = PAIRS[digit % 100];
    [a, b, c, d]
}

pub(super) fn write_numeric(binary: &[u8], out: &mut BytesMut) -> Result<(), TranscodeError> {
    let (header, digits) = binary.split_first_chunk::<8>().ok_or(TranscodeError::Truncated { ty: TY })?;
    let field = |i: usize| u16::from_be_bytes([header[i], header[i + 1]]);
    let ndigits = field(0) as i16;
    let weight = i32::from(field(2) as i16);
    let sign = field(4);
    let dscale = field(6);

    match sign {
        NAN => return special(b"NaN", out),
        PLUS_INFINITY => return special(b"Infinity", out),
        MINUS_INFINITY => return special(b"-Infinity", out),
        POSITIVE | NEGATIVE => {}
        _ => return Err(TranscodeError::Invalid { ty: TY, reason: "unknown sign" }),
    }
    let ndigits = usize::try_from(ndigits).map_err(|_| TranscodeError::Invalid { ty: TY, reason: "negative digit count" })?;
    if digits.len() != 2 * ndigits {
        return Err(TranscodeError::Length { ty: TY, expected: 8 + 2 * ndigits, actual: binary.len() });
    }
    if dscale > MAX_DSCALE {
        return Err(TranscodeError::Invalid { ty: TY, reason: "display scale out of range" });
    }
    let digit = |i: i32| -> usize {
        match usize::try_from(i) {
            Ok(i) if i < ndigits => usize::from(u16::from_be_bytes([digits[2 * i], digits[2 * i + 1]])),
            _ => 0,
        }
    };
    if digits.chunks_exact(2).any(|d| u16::from_be_bytes([d[0], d[1]]) >= NBASE) {
        return Err(TranscodeError::Invalid { ty: TY, reason: "digit out of range" });
    }

    let dscale = usize::from(dscale);
    out.reserve(2 + 4 * (weight.max(0) as usize + 1) + dscale + 4);
    if sign == NEGATIVE {
        out.extend_from_slice(b"-");
    }

    // Integer part: group 0 without leading zeros, the rest zero-padded.
    if weight < 0 {
        out.extend_from_slice(b"0");
    } else {
        let first = group(digit(0));
        let skip = first[..3].iter().take_while(|&&c| c == b'0').count();
        out.extend_from_slice(&first[skip..]);
        for i in 1..=weight {
            out.extend_from_slice(&group(digit(i)));
        }
    }

    // Fraction: the groups after the integer part, cut to dscale digits.
    if dscale > 0 {
        out.extend_from_slice(b".");
        let mut i = weight + 1;
        let mut left = dscale;
        while left > 0 {
            let take = left.min(4);
            out.extend_from_slice(&group(digit(i))[..take]);
            left -= take;
            i += 1;
        }
    }
    Ok(())
}

fn special(text: &[u8], out: &mut BytesMut) -> Result<(), TranscodeError> {
    out.extend_from_slice(text);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn binary(weight: i16, sign: u16, dscale: u16, digits: &[u16]) -> Vec<u8> {
        let mut b = Vec::new();
        for field in [digits.len() as u16, weight as u16, sign, dscale] {
            b.extend_from_slice(&field.to_be_bytes());
        }
        for digit in digits {
            b.extend_from_slice(&digit.to_be_bytes());
        }
        b
    }

    fn text(weight: i16, sign: u16, dscale: u16, digits: &[u16]) -> String {
        let mut out = BytesMut::new();
        write_numeric(&binary(weight, sign, dscale, digits), &mut out).expect("valid");
        String::from_utf8(out.to_vec()).unwrap()
    }

    #[test]
    fn examples_from_protocol_md() {
        assert_eq!(text(1, POSITIVE, 4, &[1, 2345, 6789]), "12345.6789");
        assert_eq!(text(-1, POSITIVE, 6, &[1]), "0.000100");
        assert_eq!(text(0, POSITIVE, 3, &[]), "0.000");
        assert_eq!(text(0, POSITIVE, 1, &[]), "0.0");
        assert_eq!(text(0, POSITIVE, 0, &[]), "0");
    }

    #[test]
    fn specials_ignore_the_rest() {
        assert_eq!(text(0, NAN, 0, &[]), "NaN");
        assert_eq!(text(0, PLUS_INFINITY, 0x20, &[]), "Infinity");
        assert_eq!(text(0, MINUS_INFINITY, 0, &[]), "-Infinity");
    }

    #[test]
    fn groups_padding_and_cutting() {
        // 1e20: one digit 1 with weight 5, groups 1..=5 missing.
        assert_eq!(text(5, POSITIVE, 0, &[1]), "100000000000000000000");
        assert_eq!(text(0, NEGATIVE, 2, &[12, 3400]), "-12.34");
        // Trailing zeros come from dscale alone.
        assert_eq!(text(0, POSITIVE, 10, &[7]), "7.0000000000");
        // -0.000001234 with dscale 9.
        assert_eq!(text(-2, NEGATIVE, 9, &[123, 4000]), "-0.000001234");
        // Digits beyond dscale are cut, not rounded.
        assert_eq!(text(0, POSITIVE, 1, &[1, 9999]), "1.9");
        assert_eq!(text(2, POSITIVE, 0, &[9999, 1, 20]), "999900010020");
    }

    #[test]
    fn malformed() {
        let mut out = BytesMut::new();
        assert!(write_numeric(&[0; 7], &mut out).is_err());
        assert!(write_numeric(&binary(0, 0x1234, 0, &[]), &mut out).is_err());
        assert!(write_numeric(&binary(0, POSITIVE, 0, &[10_000]), &mut out).is_err());
        assert!(write_numeric(&binary(0, POSITIVE, 0x4000, &[1]), &mut out).is_err());
        let mut short = binary(0, POSITIVE, 0, &[1, 2]);
        short.pop();
        assert!(write_numeric(&short, &mut out).is_err());
        let mut negative = binary(0, POSITIVE, 0, &[]);
        negative[0] = 0xff;
        assert!(write_numeric(&negative, &mut out).is_err());
    }
}
