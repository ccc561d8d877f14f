//! interval (1186): `i64 µs, i32 days, i32 months` (`interval_send`); text
//! as `interval_out` prints it under IntervalStyle (`interval2itm` and
//! `EncodeInterval` in PostgreSQL's `timestamp.c` / `datetime.c`), sign
//! rules and all:
//!
//! - postgres: `1 year 2 mons -3 days +04:05:06.7`, `-00:00:01.5`, zero is
//!   `00:00:00`;
//! - postgres_verbose: `@ 1 year 2 mons 3 days 4 hours 5 mins 6.7 secs ago`;
//! - sql_standard: `1-2`, `3 4:05:06.7`, mixed signs as `+1-2 -3 +4:05:06`;
//! - iso_8601: `P1Y2M3DT4H5M6.7S`, zero is `PT0S`.

use bytes::BytesMut;

use super::datetime::write_fraction;
use super::{fixed, push_int, push_zero_padded, IntervalStyle, TranscodeError};

const USECS_PER_SEC: i64 = 1_000_000;
const USECS_PER_MINUTE: i64 = 60 * USECS_PER_SEC;
const USECS_PER_HOUR: i64 = 60 * USECS_PER_MINUTE;

/// An interval broken into fields (`struct pg_itm`): each field has the
/// sign of its source (months, days or µs), C's truncating division.
#[derive(Debug, Clone, Copy)]
struct Fields {
    year: i32,
    mon: i32,
    mday: i64,
    hour: i64,
    min: i32,
    sec: i32,
    usec: i32,
}

impl Fields {
    /// `interval2itm`.
    fn new(micros: i64, days: i32, months: i32) -> Fields {
        Fields {
            year: months / 12,
            mon: months % 12,
            mday: i64::from(days),
            hour: micros / USECS_PER_HOUR,
            min: (micros % USECS_PER_HOUR / USECS_PER_MINUTE) as i32,
            sec: (micros % USECS_PER_MINUTE / USECS_PER_SEC) as i32,
            usec: (micros % USECS_PER_SEC) as i32,
        }
    }

    fn has_time(&self) -> bool {
        self.hour != 0 || self.min != 0 || self.sec != 0 || self.usec != 0
    }
}

pub(super) fn write_interval(binary: &[u8], style: IntervalStyle, out: &mut BytesMut) -> Result<(), TranscodeError> {
    let bytes: [u8; 16] = fixed("interval", binary)?;
    let micros = i64::from_be_bytes(bytes[..8].try_into().expect("8 bytes"));
    let days = i32::from_be_bytes(bytes[8..12].try_into().expect("4 bytes"));
    let months = i32::from_be_bytes(bytes[12..].try_into().expect("4 bytes"));
    let fields = Fields::new(micros, days, months);
    match style {
        IntervalStyle::Postgres => write_postgres(fields, out),
        IntervalStyle::PostgresVerbose => write_postgres_verbose(fields, out),
        IntervalStyle::SqlStandard => write_sql_standard(fields, out),
        IntervalStyle::Iso8601 => write_iso_8601(fields, out),
    }
    Ok(())
}

/// Seconds and the trimmed fraction, signs dropped (`AppendSeconds`).
fn write_seconds(sec: i32, usec: i32, zero_pad: bool, out: &mut BytesMut) {
    push_zero_padded(out, u64::from(sec.unsigned_abs()), if zero_pad { 2 } else { 1 });
    write_fraction(usec.unsigned_abs(), out);
}

fn write_postgres(f: Fields, out: &mut BytesMut) {
    let mut is_zero = true;
    let mut is_before = false;
    // AddPostgresIntPart: each nonzero field sets is_before for the next.
    let mut part = |value: i64, unit: &[u8], out: &mut BytesMut| {
        if value == 0 {
            return;
        }
        if !is_zero {
            out.extend_from_slice(b" ");
        }
        if is_before && value > 0 {
            out.extend_from_slice(b"+");
        }
        push_int(out, value);
        out.extend_from_slice(b" ");
        out.extend_from_slice(unit);
        if value != 1 {
            out.extend_from_slice(b"s");
        }
        is_before = value < 0;
        is_zero = false;
    };
    part(i64::from(f.year), b"year", out);
    part(i64::from(f.mon), b"mon", out);
    part(f.mday, b"day", out);
    if is_zero || f.has_time() {
        let minus = f.hour < 0 || f.min < 0 || f.sec < 0 || f.usec < 0;
        if !is_zero {
            out.extend_from_slice(b" ");
        }
        if minus {
            out.extend_from_slice(b"-");
        } else if is_before {
            out.extend_from_slice(b"+");
        }
        push_zero_padded(out, f.hour.unsigned_abs(), 2);
        out.extend_from_slice(b":");
        push_zero_padded(out, u64::from(f.min.unsigned_abs()), 2);
        out.extend_from_slice(b":");
        write_seconds(f.sec, f.usec, true, out);
    }
}

fn write_postgres_verbose(f: Fields, out: &mut BytesMut) {
    let mut is_zero = true;
    let mut is_before = false;
    out.extend_from_slice(b"@");
    // AddVerboseIntPart: the first nonzero field decides "ago".
    let mut part = |mut value: i64, unit: &[u8], out: &mut BytesMut| {
        if value == 0 {
            return;
        }
        if is_zero {
            is_before = value < 0;
            value = value.abs();
        } else if is_before {
            value = -value;
        }
        out.extend_from_slice(b" ");
        push_int(out, value);
        out.extend_from_slice(b" ");
        out.extend_from_slice(unit);
        if value != 1 {
            out.extend_from_slice(b"s");
        }
        is_zero = false;
    };
    part(i64::from(f.year), b"year", out);
    part(i64::from(f.mon), b"mon", out);
    part(f.mday, b"day", out);
    part(f.hour, b"hour", out);
    part(i64::from(f.min), b"min", out);
    if f.sec != 0 || f.usec != 0 {
        out.extend_from_slice(b" ");
        if f.sec < 0 || (f.sec == 0 && f.usec < 0) {
            if is_zero {
                is_before = true;
            } else if !is_before {
                out.extend_from_slice(b"-");
            }
        } else if is_before {
            out.extend_from_slice(b"-");
        }
        write_seconds(f.sec, f.usec, false, out);
        out.extend_from_slice(b" sec");
        if f.sec.unsigned_abs() != 1 || f.usec != 0 {
            out.extend_from_slice(b"s");
        }
        is_zero = false;
    }
    if is_zero {
        out.extend_from_slice(b" 0");
    }
    if is_before {
        out.extend_from_slice(b" ago");
    }
}

fn write_sql_standard(mut f: Fields, out: &mut BytesMut) {
    let has_negative = f.year < 0 || f.mon < 0 || f.mday < 0 || f.hour < 0 || f.min < 0 || f.sec < 0 || f.usec < 0;
    let has_positive = f.year > 0 || f.mon > 0 || f.mday > 0 || f.hour > 0 || f.min > 0 || f.sec > 0 || f.usec > 0;
    let has_year_month = f.year != 0 || f.mon != 0;
    let has_day_time = f.mday != 0 || f.has_time();
    let mixed_signs = has_negative && has_positive;
    let sql_standard_value = !(mixed_signs || has_year_month && has_day_time);

    // One sign in front of the whole value, when the value allows it.
    if has_negative && sql_standard_value {
        out.extend_from_slice(b"-");
        f = Fields { year: -f.year, mon: -f.mon, mday: -f.mday, hour: -f.hour, min: -f.min, sec: -f.sec, usec: -f.usec };
    }

    let hours_minutes = |hour: u64, min: u32, out: &mut BytesMut| {
        push_int(out, hour);
        out.extend_from_slice(b":");
        push_zero_padded(out, u64::from(min), 2);
        out.extend_from_slice(b":");
    };
    if !has_negative && !has_positive {
        out.extend_from_slice(b"0");
    } else if !sql_standard_value {
        // Mixed signs: every part carries its own.
        let sign = |negative: bool| if negative { b"-" } else { b"+" };
        out.extend_from_slice(sign(f.year < 0 || f.mon < 0));
        push_int(out, f.year.unsigned_abs());
        out.extend_from_slice(b"-");
        push_int(out, f.mon.unsigned_abs());
        out.extend_from_slice(b" ");
        out.extend_from_slice(sign(f.mday < 0));
        push_int(out, f.mday.unsigned_abs());
        out.extend_from_slice(b" ");
        out.extend_from_slice(sign(f.hour < 0 || f.min < 0 || f.sec < 0 || f.usec < 0));
        hours_minutes(f.hour.unsigned_abs(), f.min.unsigned_abs(), out);
        write_seconds(f.sec, f.usec, true, out);
    } else if has_year_month {
        push_int(out, f.year);
        out.extend_from_slice(b"-");
        push_int(out, f.mon);
    } else if f.mday != 0 {
        push_int(out, f.mday);
        out.extend_from_slice(b" ");
        hours_minutes(f.hour.unsigned_abs(), f.min.unsigned_abs(), out);
        write_seconds(f.sec, f.usec, true, out);
    } else {
        hours_minutes(f.hour.unsigned_abs(), f.min.unsigned_abs(), out);
        write_seconds(f.sec, f.usec, true, out);
    }
}

fn write_iso_8601(f: Fields, out: &mut BytesMut) {
    if f.year == 0 && f.mon == 0 && f.mday == 0 && !f.has_time() {
        out.extend_from_slice(b"PT0S");
        return;
    }
    let part = |value: i64, unit: u8, out: &mut BytesMut| {
        if value != 0 {
            push_int(out, value);
            out.extend_from_slice(&[unit]);
        }
    };
    out.extend_from_slice(b"P");
    part(i64::from(f.year), b'Y', out);
    part(i64::from(f.mon), b'M', out);
    part(f.mday, b'D', out);
    if f.has_time() {
        out.extend_from_slice(b"T");
    }
    part(f.hour, b'H', out);
    part(i64::from(f.min), b'M', out);
    if f.sec != 0 || f.usec != 0 {
        if f.sec < 0 || f.usec < 0 {
            out.extend_from_slice(b"-");
        }
        write_seconds(f.sec, f.usec, false, out);
        out.extend_from_slice(b"S");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(micros: i64, days: i32, months: i32, style: IntervalStyle) -> String {
        let mut binary = micros.to_be_bytes().to_vec();
        binary.extend_from_slice(&days.to_be_bytes());
        binary.extend_from_slice(&months.to_be_bytes());
        let mut out = BytesMut::new();
        write_interval(&binary, style, &mut out).expect("valid");
        String::from_utf8(out.to_vec()).unwrap()
    }

    const H: i64 = USECS_PER_HOUR;
    const M: i64 = USECS_PER_MINUTE;
    const S: i64 = USECS_PER_SEC;

    #[test]
    fn postgres_style() {
        // protocol.md §3.2, checked on PostgreSQL 15.
        let p = IntervalStyle::Postgres;
        assert_eq!(text(4 * H + 5 * M + 6 * S + 700_000, 3, 14, p), "1 year 2 mons 3 days 04:05:06.7");
        assert_eq!(text(2 * H, -1, 0, p), "-1 days +02:00:00");
        assert_eq!(text(-S, 1, 0, p), "1 day -00:00:01");
        assert_eq!(text(0, 0, -1, p), "-1 mons");
        assert_eq!(text(0, 0, 11, p), "11 mons");
        assert_eq!(text(100_000 * H, 0, 0, p), "100000:00:00");
        assert_eq!(text(-1_500_000, 0, 0, p), "-00:00:01.5");
        assert_eq!(text(0, 0, 0, p), "00:00:00");
        assert_eq!(text(0, 5, -13, p), "-1 years -1 mons +5 days");
    }

    #[test]
    fn other_styles() {
        // protocol.md §3.2.
        let all = (4 * H + 5 * M + 6 * S + 700_000, 3, 14);
        assert_eq!(text(all.0, all.1, all.2, IntervalStyle::SqlStandard), "+1-2 +3 +4:05:06.7");
        assert_eq!(text(all.0, all.1, all.2, IntervalStyle::Iso8601), "P1Y2M3DT4H5M6.7S");
        assert_eq!(text(-2 * H, 1, 0, IntervalStyle::PostgresVerbose), "@ 1 day -2 hours");
        assert_eq!(text(-2 * H, -1, 0, IntervalStyle::PostgresVerbose), "@ 1 day 2 hours ago");
        assert_eq!(text(0, 0, 0, IntervalStyle::PostgresVerbose), "@ 0");
        assert_eq!(text(S, 0, 0, IntervalStyle::PostgresVerbose), "@ 1 sec");
        assert_eq!(text(-1_500_000, 0, 0, IntervalStyle::PostgresVerbose), "@ 1.5 secs ago");
        assert_eq!(text(0, 0, 0, IntervalStyle::SqlStandard), "0");
        assert_eq!(text(0, 0, -14, IntervalStyle::SqlStandard), "-1-2");
        assert_eq!(text(-(4 * H + 5 * M), -3, 0, IntervalStyle::SqlStandard), "-3 4:05:00");
        assert_eq!(text(-S / 2, 0, 0, IntervalStyle::SqlStandard), "-0:00:00.5");
        assert_eq!(text(0, 0, 0, IntervalStyle::Iso8601), "PT0S");
        assert_eq!(text(-S / 2, 0, 0, IntervalStyle::Iso8601), "PT-0.5S");
        assert_eq!(text(-H - S, -1, -1, IntervalStyle::Iso8601), "P-1M-1DT-1H-1S");
    }

    #[test]
    fn extremes_do_not_overflow() {
        for style in [IntervalStyle::Postgres, IntervalStyle::PostgresVerbose, IntervalStyle::SqlStandard, IntervalStyle::Iso8601]
        {
            text(i64::MIN, i32::MIN, i32::MIN, style);
            text(i64::MAX, i32::MAX, i32::MAX, style);
        }
        assert_eq!(
            text(i64::MIN, i32::MIN, i32::MIN, IntervalStyle::Postgres),
            "-178956970 years -8 mons -2147483648 days -2562047788:00:54.775808"
        );
    }
}
