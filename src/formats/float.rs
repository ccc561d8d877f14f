//! float4 (700) and float8 (701): big-endian IEEE 754; text depends on
//! extra_float_digits (`float4out`, `float8out`).
//!
//! - extra_float_digits > 0 (the default is 1; pgjdbc sets 3): the shortest
//!   decimal that reads back as the same value, from Ryū (`d2s.c`, `f2s.c`),
//!   printed in fixed notation when the decimal exponent is in -4..15
//!   (float4: -4..6) and as `d.ddde±XX` otherwise.
//! - extra_float_digits <= 0: C's `%.*g` with DBL_DIG (15) or FLT_DIG (6)
//!   plus extra_float_digits significant digits, at least 1.
//!
//! Either way `NaN`, `Infinity`, `-Infinity`, `0` and `-0` are spelled out.
//! The digits come from PostgreSQL's own Ryū variant (`shortest`) or from
//! Rust's exact formatting (correctly rounded, ties to even, like glibc's
//! printf), then get PostgreSQL's layout.

use std::io::Write as _;

use bytes::BytesMut;

use super::shortest::{shortest_f32, shortest_f64, FloatingDecimal};
use super::{fixed, push_int, TranscodeError};

/// How floats are printed, resolved from extra_float_digits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum FloatFormat {
    /// Shortest round-trip text (extra_float_digits > 0).
    Shortest,
    /// `%.Ng` with this many significant digits (extra_float_digits <= 0).
    Significant(u8),
}

/// DBL_DIG and FLT_DIG.
const FLOAT8_DIGITS: i32 = 15;
const FLOAT4_DIGITS: i32 = 6;

impl FloatFormat {
    pub(super) fn float8(extra_float_digits: i32) -> FloatFormat {
        FloatFormat::new(FLOAT8_DIGITS, extra_float_digits)
    }

    pub(super) fn float4(extra_float_digits: i32) -> FloatFormat {
        FloatFormat::new(FLOAT4_DIGITS, extra_float_digits)
    }

    fn new(type_digits: i32, extra_float_digits: i32) -> FloatFormat {
        if extra_float_digits > 0 {
            FloatFormat::Shortest
        } else {
            // pg_strfromd clamps the precision to 1..=32.
            let digits = type_digits.saturating_add(extra_float_digits).clamp(1, 32);
            FloatFormat::Significant(digits as u8)
        }
    }
}

pub(super) fn write_float8(binary: &[u8], format: FloatFormat, out: &mut BytesMut) -> Result<(), TranscodeError> {
    let value = f64::from_be_bytes(fixed("float8", binary)?);
    if !write_special(value, out) {
        match format {
            FloatFormat::Shortest => Decimal::from(shortest_f64(value.abs())).write(value < 0.0, FLOAT8_DIGITS, out),
            FloatFormat::Significant(digits) => write_significant(value, digits, out),
        }
    }
    Ok(())
}

pub(super) fn write_float4(binary: &[u8], format: FloatFormat, out: &mut BytesMut) -> Result<(), TranscodeError> {
    let value = f32::from_be_bytes(fixed("float4", binary)?);
    if !write_special(f64::from(value), out) {
        match format {
            FloatFormat::Shortest => Decimal::from(shortest_f32(value.abs())).write(value < 0.0, FLOAT4_DIGITS, out),
            // float4out hands the value to pg_strfromd as a double.
            FloatFormat::Significant(digits) => write_significant(f64::from(value), digits, out),
        }
    }
    Ok(())
}

/// Writes NaN, the infinities and the zeros; false for any other value.
fn write_special(value: f64, out: &mut BytesMut) -> bool {
    let text: &[u8] = if value.is_nan() {
        b"NaN"
    } else if value == f64::INFINITY {
        b"Infinity"
    } else if value == f64::NEG_INFINITY {
        b"-Infinity"
    } else if value == 0.0 {
        if value.is_sign_negative() {
            b"-0"
        } else {
            b"0"
        }
    } else {
        return false;
    };
    out.extend_from_slice(text);
    true
}

/// `%.{precision}g` of a finite, non-zero `value`, as glibc prints it.
fn write_significant(value: f64, precision: u8, out: &mut BytesMut) {
    // Rust's `{:.*e}` rounds exactly (ties to even), as glibc does; `%g`
    // then only changes the layout.
    let mut buf = [0u8; 64];
    let mut cursor = &mut buf[..];
    let precision = usize::from(precision.max(1));
    // 33 digits, a point, 'e', a sign and 3 exponent digits fit in 64 bytes.
    write!(cursor, "{:.*e}", precision - 1, value.abs()).expect("fits the buffer");
    let written = 64 - cursor.len();
    let digits = Decimal::parse(&buf[..written]);
    // %g picks %e when the exponent is < -4 or >= the precision.
    digits.write(value < 0.0, precision as i32, out);
}

/// A positive decimal `0.d₁d₂…dₙ × 10^point`, with no leading or trailing
/// zero digits.
struct Decimal {
    digits: [u8; MAX_DIGITS],
    len: usize,
    point: i32,
}

/// Ryū gives at most 17 significant digits, `%.32g` 32.
const MAX_DIGITS: usize = 32;

impl From<FloatingDecimal> for Decimal {
    fn from(value: FloatingDecimal) -> Decimal {
        let mut decimal = Decimal { digits: [0; MAX_DIGITS], len: 0, point: 0 };
        let mut itoa = itoa::Buffer::new();
        let text = itoa.format(value.mantissa).as_bytes();
        decimal.digits[..text.len()].copy_from_slice(text);
        decimal.len = text.len();
        decimal.point = text.len() as i32 + value.exponent;
        decimal.trim_trailing_zeros();
        decimal
    }
}

impl Decimal {
    /// Reads a finite, non-zero number as `{:e}` prints it (`1.500e-7`).
    fn parse(text: &[u8]) -> Decimal {
        let mut decimal = Decimal { digits: [0; MAX_DIGITS], len: 0, point: 0 };
        let mut after_point = false;
        let mut bytes = text.iter();
        for &c in bytes.by_ref() {
            match c {
                b'0'..=b'9' => {
                    if decimal.len == 0 && c == b'0' {
                        // A leading zero only moves the point.
                        if after_point {
                            decimal.point -= 1;
                        }
                    } else if decimal.len < MAX_DIGITS {
                        decimal.digits[decimal.len] = c;
                        decimal.len += 1;
                        if !after_point {
                            decimal.point += 1;
                        }
                    }
                }
                b'.' => after_point = true,
                b'e' | b'E' => break,
                _ => {} // the sign
            }
        }
        let exponent = std::str::from_utf8(bytes.as_slice()).ok().and_then(|e| e.parse::<i32>().ok()).unwrap_or(0);
        decimal.point += exponent;
        decimal.trim_trailing_zeros();
        decimal
    }

    fn trim_trailing_zeros(&mut self) {
        while self.len > 1 && self.digits[self.len - 1] == b'0' {
            self.len -= 1;
        }
    }

    /// Writes the number PostgreSQL's way: fixed notation when the decimal
    /// exponent is in `-4..max_fixed_exponent`, else `d.ddde±XX`.
    fn write(&self, negative: bool, max_fixed_exponent: i32, out: &mut BytesMut) {
        let digits = &self.digits[..self.len];
        let exponent = self.point - 1;
        if negative {
            out.extend_from_slice(b"-");
        }
        if (-4..max_fixed_exponent).contains(&exponent) {
            if self.point <= 0 {
                out.extend_from_slice(b"0.");
                push_zeros(out, -self.point);
                out.extend_from_slice(digits);
            } else if self.point as usize >= digits.len() {
                out.extend_from_slice(digits);
                push_zeros(out, self.point - digits.len() as i32);
            } else {
                let (int, frac) = digits.split_at(self.point as usize);
                out.extend_from_slice(int);
                out.extend_from_slice(b".");
                out.extend_from_slice(frac);
            }
        } else {
            out.extend_from_slice(&digits[..1]);
            if digits.len() > 1 {
                out.extend_from_slice(b".");
                out.extend_from_slice(&digits[1..]);
            }
            out.extend_from_slice(if exponent < 0 { b"e-" } else { b"e+" });
            let magnitude = exponent.unsigned_abs();
            if magnitude < 10 {
                out.extend_from_slice(b"0");
            }
            push_int(out, magnitude);
        }
    }
}

fn push_zeros(out: &mut BytesMut, count: i32) {
    for _ in 0..count {
        out.extend_from_slice(b"0");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn float8(value: f64, extra_float_digits: i32) -> String {
        let mut out = BytesMut::new();
        let format = FloatFormat::float8(extra_float_digits);
        write_float8(&value.to_be_bytes(), format, &mut out).unwrap();
        String::from_utf8(out.to_vec()).unwrap()
    }

    fn float4(value: f32, extra_float_digits: i32) -> String {
        let mut out = BytesMut::new();
        let format = FloatFormat::float4(extra_float_digits);
        write_float4(&value.to_be_bytes(), format, &mut out).unwrap();
        String::from_utf8(out.to_vec()).unwrap()
    }

    #[test]
    fn shortest_float8_as_postgresql_prints_it() {
        // From protocol.md §3.2 and PostgreSQL 15 with extra_float_digits = 1.
        for (value, text) in [
            (999999999999999.0, "999999999999999"),
            (1234567890123456.0, "1.234567890123456e+15"),
            (1e15, "1e+15"),
            (0.0001, "0.0001"),
            (0.00001, "1e-05"),
            (5e-324, "5e-324"),
            (1.7976931348623157e308, "1.7976931348623157e+308"),
            (-1.5, "-1.5"),
            (0.1, "0.1"),
            (1.0 / 3.0, "0.3333333333333333"),
            (100.0, "100"),
            (123456.789, "123456.789"),
            (1e100, "1e+100"),
            (1.5e-7, "1.5e-07"),
            // PostgreSQL's Ryū excludes the rounding interval's ends, so not
            // "1e+23", which lies exactly on this value's boundary.
            (1e23, "9.999999999999999e+22"),
            (9007199254740992.0, "9.007199254740992e+15"),
        ] {
            assert_eq!(float8(value, 1), text, "{value:e}");
            assert_eq!(float8(value, 3), text, "{value:e}");
        }
    }

    #[test]
    fn shortest_float4() {
        assert_eq!(float4(100000.0, 1), "100000");
        assert_eq!(float4(1e6, 1), "1e+06");
        assert_eq!(float4(0.1, 1), "0.1");
        assert_eq!(float4(f32::MAX, 1), "3.4028235e+38");
        assert_eq!(float4(1e-45, 1), "1e-45");
        assert_eq!(float4(123456.7, 1), "123456.7");
        assert_eq!(float4(-0.00012, 3), "-0.00012");
    }

    #[test]
    fn specials() {
        for efd in [-15, 0, 1, 3] {
            assert_eq!(float8(f64::NAN, efd), "NaN");
            assert_eq!(float8(f64::INFINITY, efd), "Infinity");
            assert_eq!(float8(f64::NEG_INFINITY, efd), "-Infinity");
            assert_eq!(float8(0.0, efd), "0");
            assert_eq!(float8(-0.0, efd), "-0");
            assert_eq!(float4(-f32::NAN, efd), "NaN");
            assert_eq!(float4(-0.0, efd), "-0");
            assert_eq!(float4(f32::NEG_INFINITY, efd), "-Infinity");
        }
    }

    #[test]
    fn printf_g_below_one_extra_digit() {
        // protocol.md §3.2: efd <= 0 is %.{15+efd}g.
        assert_eq!(float8(1.0 / 3.0, 0), "0.333333333333333");
        assert_eq!(float4(123456.7, 0), "123457");
        assert_eq!(float8(0.3, -15), "0.3");
        assert_eq!(float8(123456.0, -15), "1e+05");
        assert_eq!(float8(1e15, 0), "1e+15");
        assert_eq!(float8(1e14, 0), "100000000000000");
        assert_eq!(float8(0.0001, 0), "0.0001");
        assert_eq!(float8(0.00001, 0), "1e-05");
        assert_eq!(float8(-2.5, -14), "-2");
        assert_eq!(float8(0.125, -13), "0.12");
        assert_eq!(float8(1e-310, 0), "9.99999999999997e-311");
        assert_eq!(float4(f32::MAX, -5), "3e+38");
    }
}
