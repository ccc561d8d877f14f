//! date (1082), time (1083), timetz (1266), timestamp (1114) and
//! timestamptz (1184), printed as `date_out`, `time_out`, `timetz_out`,
//! `timestamp_out` and `timestamptz_out` do (`EncodeDateOnly`,
//! `EncodeTimeOnly`, `EncodeDateTime` in PostgreSQL's `datetime.c`).
//!
//! Binary layouts (integer datetimes): date is i32 days since 2000-01-01;
//! time is i64 µs since midnight (up to 24:00:00); timetz adds an i32 zone
//! offset in seconds *west* of UTC; timestamp and timestamptz are i64 µs
//! since 2000-01-01 00:00 (UTC for timestamptz). i32/i64 MIN and MAX are
//! -infinity and infinity for date and the timestamps.
//!
//! Dates follow DateStyle: ISO `2024-02-29`, SQL `02/29/2024` (DMY:
//! `29/02/2024`), Postgres `02-29-2024` (timestamps: `Thu Feb 29 12:34:56
//! 2024`), German `29.02.2024`. Years are at least four digits, years ≤ 0
//! are printed as `1 - year` with ` BC` at the very end. Seconds lose their
//! trailing fraction zeros. timestamptz adds the zone: ISO prints the offset
//! (`+00`, `+05:30`), the other styles the zone abbreviation.

use bytes::BytesMut;

use super::{fixed, push_zero_padded, DateStyle, DateStyleFormat, FixedZone, TranscodeError};

const USECS_PER_SEC: i64 = 1_000_000;
const USECS_PER_MINUTE: i64 = 60 * USECS_PER_SEC;
const USECS_PER_HOUR: i64 = 60 * USECS_PER_MINUTE;
const USECS_PER_DAY: i64 = 24 * USECS_PER_HOUR;

/// Julian day number of 2000-01-01.
const POSTGRES_EPOCH_JDATE: i64 = 2_451_545;
/// Valid dates are Julian days 0 (4714-11-24 BC) up to, not including,
/// DATE_END_JULIAN (5874898-06-03).
const DATE_END_JULIAN: i64 = 2_147_483_494;
/// The first printable timestamp, 4714-11-24 00:00 BC (Julian day 0).
/// Valid timestamps end before END_TIMESTAMP, but a typmod's rounding can
/// reach it and `timestamp_out` prints anything up to infinity.
const MIN_TIMESTAMP: i64 = -211_813_488_000_000_000;
#[cfg(test)]
const END_TIMESTAMP: i64 = 9_223_371_331_200_000_000;
/// A timetz zone must be strictly within ±16 hours (TZDISP_LIMIT).
const TZDISP_LIMIT: i32 = 16 * 3600;

/// Longer than any timestamp text (`Thu Feb 29 12:34:56.123456 294277
/// ABCDEFGHIJ BC`), so one reservation covers each value.
const MAX_TIMESTAMP_TEXT: usize = 64;

const MONTHS: [&[u8; 3]; 12] = [b"Jan", b"Feb", b"Mar", b"Apr", b"May", b"Jun", b"Jul", b"Aug", b"Sep", b"Oct", b"Nov", b"Dec"];
const DAYS: [&[u8; 3]; 7] = [b"Sun", b"Mon", b"Tue", b"Wed", b"Thu", b"Fri", b"Sat"];

pub(super) fn write_date(binary: &[u8], style: DateStyle, out: &mut BytesMut) -> Result<(), TranscodeError> {
    let days = i32::from_be_bytes(fixed("date", binary)?);
    match days {
        i32::MIN => out.extend_from_slice(b"-infinity"),
        i32::MAX => out.extend_from_slice(b"infinity"),
        _ => {
            let julian = i64::from(days) + POSTGRES_EPOCH_JDATE;
            if !(0..DATE_END_JULIAN).contains(&julian) {
                return Err(TranscodeError::Invalid { ty: "date", reason: "out of range" });
            }
            let date = Date::from_days(i64::from(days));
            write_date_only(date, style, out);
        }
    }
    Ok(())
}

pub(super) fn write_time(binary: &[u8], out: &mut BytesMut) -> Result<(), TranscodeError> {
    let micros = i64::from_be_bytes(fixed("time", binary)?);
    if !(0..=USECS_PER_DAY).contains(&micros) {
        return Err(TranscodeError::Invalid { ty: "time", reason: "out of range" });
    }
    write_time_of_day(micros, out);
    Ok(())
}

pub(super) fn write_timetz(binary: &[u8], out: &mut BytesMut) -> Result<(), TranscodeError> {
    let bytes: [u8; 12] = fixed("timetz", binary)?;
    let (time, zone) = bytes.split_at(8);
    let micros = i64::from_be_bytes(time.try_into().expect("8 bytes"));
    let west = i32::from_be_bytes(zone.try_into().expect("4 bytes"));
    if !(0..=USECS_PER_DAY).contains(&micros) {
        return Err(TranscodeError::Invalid { ty: "timetz", reason: "time out of range" });
    }
    if west <= -TZDISP_LIMIT || west >= TZDISP_LIMIT {
        return Err(TranscodeError::Invalid { ty: "timetz", reason: "zone out of range" });
    }
    write_time_of_day(micros, out);
    write_offset(-west, out);
    Ok(())
}

pub(super) fn write_timestamp(binary: &[u8], style: DateStyle, out: &mut BytesMut) -> Result<(), TranscodeError> {
    let micros = i64::from_be_bytes(fixed("timestamp", binary)?);
    if !write_infinity(micros, out) {
        check_timestamp("timestamp", micros)?;
        let (days, time) = (micros.div_euclid(USECS_PER_DAY), micros.rem_euclid(USECS_PER_DAY));
        write_date_time(days, time, style, None, out);
    }
    Ok(())
}

pub(super) fn write_timestamptz(
    binary: &[u8],
    style: DateStyle,
    zone: &FixedZone,
    out: &mut BytesMut,
) -> Result<(), TranscodeError> {
    let micros = i64::from_be_bytes(fixed("timestamptz", binary)?);
    if !write_infinity(micros, out) {
        check_timestamp("timestamptz", micros)?;
        // Split first, then shift by the offset (less than a week): adding
        // it to `micros` could overflow near infinity.
        let (days, time) = (micros.div_euclid(USECS_PER_DAY), micros.rem_euclid(USECS_PER_DAY));
        let time = time + i64::from(zone.utc_offset()) * USECS_PER_SEC;
        let (days, time) = (days + time.div_euclid(USECS_PER_DAY), time.rem_euclid(USECS_PER_DAY));
        write_date_time(days, time, style, Some(zone), out);
    }
    Ok(())
}

/// `timestamp2tm` fails (and the server with it) only before Julian day 0.
fn check_timestamp(ty: &'static str, micros: i64) -> Result<(), TranscodeError> {
    if micros >= MIN_TIMESTAMP {
        Ok(())
    } else {
        Err(TranscodeError::Invalid { ty, reason: "out of range" })
    }
}

/// Writes `infinity` or `-infinity` for the two reserved timestamps.
fn write_infinity(micros: i64, out: &mut BytesMut) -> bool {
    match micros {
        i64::MIN => out.extend_from_slice(b"-infinity"),
        i64::MAX => out.extend_from_slice(b"infinity"),
        _ => return false,
    }
    true
}

/// A proleptic Gregorian calendar date; `year` ≤ 0 is BC (0 is 1 BC).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Date {
    year: i64,
    month: u32,
    day: u32,
}

impl Date {
    /// The date `days` after 2000-01-01 (Howard Hinnant's `civil_from_days`,
    /// exact for every i64 input that fits; PostgreSQL's `j2date` agrees
    /// with it on all valid dates).
    fn from_days(days: i64) -> Date {
        // Shift to days since 0000-03-01, the start of a 400-year era.
        let z = days + 10_957 + 719_468;
        let era = z.div_euclid(146_097);
        let doe = z.rem_euclid(146_097);
        let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
        let mp = (5 * doy + 2) / 153;
        let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
        let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
        let year = yoe + era * 400 + i64::from(month <= 2);
        Date { year, month, day }
    }

    /// The year as printed: 1 BC is 1, 2 BC is 2, ...
    fn display_year(self) -> u64 {
        if self.year > 0 {
            self.year as u64
        } else {
            (1 - self.year) as u64
        }
    }

    fn is_bc(self) -> bool {
        self.year <= 0
    }
}

/// Day of the week (0 = Sunday) of the date `days` after 2000-01-01
/// (`j2day`).
fn weekday(days: i64) -> usize {
    (days + POSTGRES_EPOCH_JDATE + 1).rem_euclid(7) as usize
}

/// `EncodeDateOnly`.
fn write_date_only(date: Date, style: DateStyle, out: &mut BytesMut) {
    let (d, m, y) = (u64::from(date.day), u64::from(date.month), date.display_year());
    match style.format {
        DateStyleFormat::Iso => write_iso_date(date, out),
        DateStyleFormat::Sql if style.day_first() => write_fields(out, [(d, 2), (m, 2), (y, 4)], b'/'),
        DateStyleFormat::Sql => write_fields(out, [(m, 2), (d, 2), (y, 4)], b'/'),
        DateStyleFormat::German => write_fields(out, [(d, 2), (m, 2), (y, 4)], b'.'),
        DateStyleFormat::Postgres if style.day_first() => write_fields(out, [(d, 2), (m, 2), (y, 4)], b'-'),
        DateStyleFormat::Postgres => write_fields(out, [(m, 2), (d, 2), (y, 4)], b'-'),
    }
    if date.is_bc() {
        out.extend_from_slice(b" BC");
    }
}

/// `YYYY-MM-DD`, years ≤ 0 as `1 - year` (the caller adds ` BC`).
fn write_iso_date(date: Date, out: &mut BytesMut) {
    let year = date.display_year();
    if year <= 9999 {
        // The common case in one copy.
        let year = year as u32;
        let mut text = [b'-'; 10];
        text[..2].copy_from_slice(&two_digits(year / 100));
        text[2..4].copy_from_slice(&two_digits(year % 100));
        text[5..7].copy_from_slice(&two_digits(date.month));
        text[8..].copy_from_slice(&two_digits(date.day));
        out.extend_from_slice(&text);
    } else {
        write_fields(out, [(year, 4), (u64::from(date.month), 2), (u64::from(date.day), 2)], b'-');
    }
}

/// Zero-padded fields with a separator between them.
fn write_fields<const N: usize>(out: &mut BytesMut, fields: [(u64, usize); N], separator: u8) {
    for (i, (value, width)) in fields.into_iter().enumerate() {
        if i > 0 {
            out.extend_from_slice(&[separator]);
        }
        push_zero_padded(out, value, width);
    }
}

/// `EncodeDateTime` for a (local) timestamp `days` after 2000-01-01 plus
/// `time` µs, with the zone for timestamptz.
fn write_date_time(days: i64, time: i64, style: DateStyle, zone: Option<&FixedZone>, out: &mut BytesMut) {
    out.reserve(MAX_TIMESTAMP_TEXT);
    let date = Date::from_days(days);
    let (d, m, y) = (u64::from(date.day), u64::from(date.month), date.display_year());
    match style.format {
        DateStyleFormat::Iso => {
            write_iso_date(date, out);
            out.extend_from_slice(b" ");
            write_time_of_day(time, out);
            if let Some(zone) = zone {
                write_offset(zone.utc_offset(), out);
            }
        }
        DateStyleFormat::Sql | DateStyleFormat::German => {
            match style.format {
                DateStyleFormat::German => write_fields(out, [(d, 2), (m, 2), (y, 4)], b'.'),
                _ if style.day_first() => write_fields(out, [(d, 2), (m, 2), (y, 4)], b'/'),
                _ => write_fields(out, [(m, 2), (d, 2), (y, 4)], b'/'),
            }
            out.extend_from_slice(b" ");
            write_time_of_day(time, out);
            write_abbrev(zone, out);
        }
        DateStyleFormat::Postgres => {
            out.extend_from_slice(DAYS[weekday(days)]);
            out.extend_from_slice(b" ");
            let month = MONTHS[date.month as usize - 1];
            if style.day_first() {
                push_zero_padded(out, d, 2);
                out.extend_from_slice(b" ");
                out.extend_from_slice(month);
            } else {
                out.extend_from_slice(month);
                out.extend_from_slice(b" ");
                push_zero_padded(out, d, 2);
            }
            out.extend_from_slice(b" ");
            write_time_of_day(time, out);
            out.extend_from_slice(b" ");
            push_zero_padded(out, y, 4);
            write_abbrev(zone, out);
        }
    }
    if date.is_bc() {
        out.extend_from_slice(b" BC");
    }
}

/// ` ABBR` after a SQL, German or Postgres style timestamptz.
fn write_abbrev(zone: Option<&FixedZone>, out: &mut BytesMut) {
    if let Some(zone) = zone {
        out.extend_from_slice(b" ");
        out.extend_from_slice(zone.abbrev());
    }
}

/// `HH:MM:SS[.ffffff]` with trailing fraction zeros trimmed
/// (`EncodeTimeOnly` / `AppendSeconds`); `micros` is 0..=24h.
fn write_time_of_day(micros: i64, out: &mut BytesMut) {
    let hour = micros / USECS_PER_HOUR;
    let minute = micros / USECS_PER_MINUTE % 60;
    let second = micros / USECS_PER_SEC % 60;
    let mut text = [b':'; 8];
    text[..2].copy_from_slice(&two_digits(hour as u32));
    text[3..5].copy_from_slice(&two_digits(minute as u32));
    text[6..].copy_from_slice(&two_digits(second as u32));
    out.extend_from_slice(&text);
    write_fraction((micros % USECS_PER_SEC) as u32, out);
}

/// `.ffffff` without trailing zeros, nothing for 0 (`AppendSeconds`).
pub(super) fn write_fraction(micros: u32, out: &mut BytesMut) {
    if micros == 0 {
        return;
    }
    let mut text = *b".000000";
    let mut rest = micros;
    for slot in text[1..].iter_mut().rev() {
        *slot = b'0' + (rest % 10) as u8;
        rest /= 10;
    }
    let mut len = text.len();
    while text[len - 1] == b'0' {
        len -= 1;
    }
    out.extend_from_slice(&text[..len]);
}

/// A UTC offset (seconds east) as `EncodeTimezone` prints it: `+HH`,
/// `+HH:MM` or `+HH:MM:SS`, `+` for zero.
pub(super) fn write_offset(east: i32, out: &mut BytesMut) {
    let magnitude = east.unsigned_abs();
    let (hours, minutes, seconds) = (magnitude / 3600, magnitude / 60 % 60, magnitude % 60);
    out.extend_from_slice(if east >= 0 { b"+" } else { b"-" });
    push_zero_padded(out, u64::from(hours), 2);
    if minutes != 0 || seconds != 0 {
        out.extend_from_slice(b":");
        out.extend_from_slice(&two_digits(minutes));
    }
    if seconds != 0 {
        out.extend_from_slice(b":");
        out.extend_from_slice(&two_digits(seconds));
    }
}

/// `value` (< 100) as two digits.
fn two_digits(value: u32) -> [u8; 2] {
    [b'0' + (value / 10 % 10) as u8, b'0' + (value % 10) as u8]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::formats::DateOrder;

    const ISO: DateStyle = DateStyle::ISO_MDY;

    fn style(format: DateStyleFormat, order: DateOrder) -> DateStyle {
        DateStyle { format, order }
    }

    /// Days since 2000-01-01 of a proleptic Gregorian date (test oracle,
    /// PostgreSQL's `date2j` minus the epoch).
    fn days(year: i32, month: u32, day: u32) -> i32 {
        let (mut y, mut m) = (i64::from(year), i64::from(month));
        if m > 2 {
            m += 1;
            y += 4800;
        } else {
            m += 13;
            y += 4799;
        }
        let century = y / 100;
        (y * 365 - 32_167 + y / 4 - century + century / 4 + 7834 * m / 256 + i64::from(day) - POSTGRES_EPOCH_JDATE) as i32
    }

    fn date(days: i32, style: DateStyle) -> String {
        let mut out = BytesMut::new();
        write_date(&days.to_be_bytes(), style, &mut out).expect("valid");
        String::from_utf8(out.to_vec()).unwrap()
    }

    fn timestamp(micros: i64, style: DateStyle) -> String {
        let mut out = BytesMut::new();
        write_timestamp(&micros.to_be_bytes(), style, &mut out).expect("valid");
        String::from_utf8(out.to_vec()).unwrap()
    }

    fn timestamptz(micros: i64, style: DateStyle, zone: &str) -> String {
        let mut out = BytesMut::new();
        let zone = FixedZone::parse(zone).expect("fixed zone");
        write_timestamptz(&micros.to_be_bytes(), style, &zone, &mut out).expect("valid");
        String::from_utf8(out.to_vec()).unwrap()
    }

    fn at(year: i32, month: u32, day: u32, h: i64, m: i64, s: i64, us: i64) -> i64 {
        i64::from(days(year, month, day)) * USECS_PER_DAY + h * USECS_PER_HOUR + m * USECS_PER_MINUTE + s * USECS_PER_SEC + us
    }

    #[test]
    fn civil_from_days_matches_date2j_everywhere_valid() {
        assert_eq!(Date::from_days(0), Date { year: 2000, month: 1, day: 1 });
        let first = -(POSTGRES_EPOCH_JDATE as i32);
        assert_eq!(Date::from_days(i64::from(first)), Date { year: -4713, month: 11, day: 24 });
        for (y, m, d) in [(2024, 2, 29), (1900, 3, 1), (1, 1, 1), (0, 12, 31), (-4, 2, 29), (5874897, 12, 31)] {
            assert_eq!(Date::from_days(i64::from(days(y, m, d))), Date { year: i64::from(y), month: m, day: d });
        }
    }

    #[test]
    fn dates_in_every_style() {
        let leap = days(2024, 2, 29);
        assert_eq!(date(leap, ISO), "2024-02-29");
        assert_eq!(date(leap, style(DateStyleFormat::Sql, DateOrder::Mdy)), "02/29/2024");
        assert_eq!(date(leap, style(DateStyleFormat::Sql, DateOrder::Dmy)), "29/02/2024");
        assert_eq!(date(leap, style(DateStyleFormat::Postgres, DateOrder::Mdy)), "02-29-2024");
        assert_eq!(date(leap, style(DateStyleFormat::Postgres, DateOrder::Dmy)), "29-02-2024");
        assert_eq!(date(leap, style(DateStyleFormat::German, DateOrder::Mdy)), "29.02.2024");
        assert_eq!(date(-(POSTGRES_EPOCH_JDATE as i32), ISO), "4714-11-24 BC");
        assert_eq!(date(days(0, 1, 1), ISO), "0001-01-01 BC");
        assert_eq!(date(days(12345, 6, 7), ISO), "12345-06-07");
        assert_eq!(date(days(5874897, 12, 31), ISO), "5874897-12-31");
        assert_eq!(date(i32::MAX, ISO), "infinity");
        assert_eq!(date(i32::MIN, ISO), "-infinity");
    }

    #[test]
    fn dates_out_of_range_are_errors() {
        let mut out = BytesMut::new();
        let before = -(POSTGRES_EPOCH_JDATE as i32) - 1;
        assert!(write_date(&before.to_be_bytes(), ISO, &mut out).is_err());
        assert!(write_date(&(i32::MAX - 1).to_be_bytes(), ISO, &mut out).is_err());
        assert!(write_date(&[0; 3], ISO, &mut out).is_err());
    }

    #[test]
    fn timestamps() {
        // protocol.md §3.2.
        assert_eq!(timestamp(at(2024, 2, 29, 12, 34, 56, 123456), ISO), "2024-02-29 12:34:56.123456");
        assert_eq!(timestamp(at(2024, 2, 29, 0, 0, 0, 10), ISO), "2024-02-29 00:00:00.00001");
        assert_eq!(timestamp(at(12345, 6, 7, 1, 2, 3, 0), ISO), "12345-06-07 01:02:03");
        assert_eq!(timestamp(at(0, 1, 1, 0, 0, 0, 0), ISO), "0001-01-01 00:00:00 BC");
        let postgres = style(DateStyleFormat::Postgres, DateOrder::Mdy);
        assert_eq!(timestamp(at(2024, 2, 29, 12, 34, 56, 500000), postgres), "Thu Feb 29 12:34:56.5 2024");
        let postgres_dmy = style(DateStyleFormat::Postgres, DateOrder::Dmy);
        assert_eq!(timestamp(at(2024, 2, 29, 12, 34, 56, 0), postgres_dmy), "Thu 29 Feb 12:34:56 2024");
        assert_eq!(timestamp(at(-43, 3, 15, 0, 0, 0, 0), postgres), "Fri Mar 15 00:00:00 0044 BC");
        let sql = style(DateStyleFormat::Sql, DateOrder::Mdy);
        assert_eq!(timestamp(at(1999, 12, 31, 23, 59, 59, 999999), sql), "12/31/1999 23:59:59.999999");
        let german = style(DateStyleFormat::German, DateOrder::Dmy);
        assert_eq!(timestamp(at(1999, 12, 31, 23, 59, 59, 0), german), "31.12.1999 23:59:59");
        assert_eq!(timestamp(i64::MAX, ISO), "infinity");
        assert_eq!(timestamp(i64::MIN, ISO), "-infinity");
        assert_eq!(timestamp(MIN_TIMESTAMP, ISO), "4714-11-24 00:00:00 BC");
        assert_eq!(timestamp(END_TIMESTAMP - 1, ISO), "294276-12-31 23:59:59.999999");
        // '294276-12-31 23:59:59.999999'::timestamp(2) rounds to here.
        assert_eq!(timestamp(END_TIMESTAMP, german), "01.01.294277 00:00:00");
        let mut out = BytesMut::new();
        assert!(write_timestamp(&(MIN_TIMESTAMP - 1).to_be_bytes(), ISO, &mut out).is_err());
    }

    #[test]
    fn timestamptz_in_fixed_zones() {
        // As PostgreSQL 15 printed '2024-06-01 12:00:00+00' and '1800-01-01
        // 12:00:00.5+00' under each TimeZone.
        let noon = at(2024, 6, 1, 12, 0, 0, 0);
        let old = at(1800, 1, 1, 12, 0, 0, 500_000);
        assert_eq!(timestamptz(noon, ISO, "UTC"), "2024-06-01 12:00:00+00");
        assert_eq!(timestamptz(noon, ISO, "+02:00"), "2024-06-01 10:00:00-02");
        assert_eq!(timestamptz(old, ISO, "-03:30"), "1800-01-01 15:30:00.5+03:30");
        assert_eq!(timestamptz(noon, ISO, "<+0530>-05:30"), "2024-06-01 17:30:00+05:30");
        assert_eq!(timestamptz(noon, ISO, "<-03:30>+03:30"), "2024-06-01 08:30:00-03:30");
        let sql = style(DateStyleFormat::Sql, DateOrder::Mdy);
        assert_eq!(timestamptz(noon, sql, "+02:00"), "06/01/2024 10:00:00 ");
        assert_eq!(timestamptz(noon, sql, "UTC+5"), "06/01/2024 07:00:00 UTC");
        assert_eq!(timestamptz(noon, sql, "<+0530>-05:30"), "06/01/2024 17:30:00 +0530");
        assert_eq!(timestamptz(noon, sql, "Etc/GMT+5"), "06/01/2024 07:00:00 -05");
        let postgres = style(DateStyleFormat::Postgres, DateOrder::Mdy);
        assert_eq!(timestamptz(noon, postgres, "GMT"), "Sat Jun 01 12:00:00 2024 GMT");
        assert_eq!(timestamptz(noon, postgres, "<+02>-02"), "Sat Jun 01 14:00:00 2024 +02");
        let german = style(DateStyleFormat::German, DateOrder::Dmy);
        assert_eq!(timestamptz(noon, german, "Etc/UTC"), "01.06.2024 12:00:00 UTC");
        // Far out, still no overflow.
        timestamptz(i64::MAX - 1, ISO, "Etc/GMT-14");
        // The local date may fall before the first valid UTC date.
        assert_eq!(timestamptz(MIN_TIMESTAMP, ISO, "<-02>+02"), "4714-11-23 22:00:00-02 BC");
    }

    #[test]
    fn weekdays_before_the_first_julian_day() {
        // PostgreSQL 15 under TimeZone '<-50>+50' and DateStyle Postgres:
        // '4714-11-24 00:00:00+00 BC' is 'Fri Nov 21 22:00:00 4714 -50 BC'.
        let postgres = style(DateStyleFormat::Postgres, DateOrder::Mdy);
        assert_eq!(timestamptz(MIN_TIMESTAMP, postgres, "<-50>+50"), "Fri Nov 21 22:00:00 4714 -50 BC");
        assert_eq!(DAYS[weekday(0)], b"Sat");
        assert_eq!(DAYS[weekday(-POSTGRES_EPOCH_JDATE)], b"Mon");
    }

    #[test]
    fn times() {
        let mut out = BytesMut::new();
        let time = |micros: i64, out: &mut BytesMut| write_time(&micros.to_be_bytes(), out);
        time(0, &mut out).unwrap();
        out.extend_from_slice(b"|");
        time(USECS_PER_DAY, &mut out).unwrap();
        out.extend_from_slice(b"|");
        time(12 * USECS_PER_HOUR + 34 * USECS_PER_MINUTE + 56_789_000, &mut out).unwrap();
        assert_eq!(&out[..], b"00:00:00|24:00:00|12:34:56.789");
        assert!(time(USECS_PER_DAY + 1, &mut out).is_err());
        assert!(time(-1, &mut out).is_err());
    }

    #[test]
    fn timetz_offsets() {
        let timetz = |micros: i64, west: i32| {
            let mut binary = micros.to_be_bytes().to_vec();
            binary.extend_from_slice(&west.to_be_bytes());
            let mut out = BytesMut::new();
            write_timetz(&binary, &mut out).map(|()| String::from_utf8(out.to_vec()).unwrap())
        };
        let t = 12 * USECS_PER_HOUR + 34 * USECS_PER_MINUTE + 56_500_000;
        assert_eq!(timetz(t, -19800).unwrap(), "12:34:56.5+05:30");
        assert_eq!(timetz(t, 0).unwrap(), "12:34:56.5+00");
        assert_eq!(timetz(t, 3600).unwrap(), "12:34:56.5-01");
        assert_eq!(timetz(0, -(15 * 3600 + 59 * 60 + 59)).unwrap(), "00:00:00+15:59:59");
        assert_eq!(timetz(0, 5 * 60 + 7).unwrap(), "00:00:00-00:05:07");
        assert!(timetz(0, 16 * 3600).is_err());
        assert!(timetz(-1, 0).is_err());
    }
}
