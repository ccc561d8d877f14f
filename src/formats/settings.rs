//! The session settings that change how PostgreSQL prints values, as the
//! caller knows them.
//!
//! Each field is `None` while the setting is unknown, or known but not one
//! whose output this module reproduces exactly (a time zone with a history
//! of offsets, say). [`TextSettings::apply`] takes values exactly as
//! PostgreSQL reports them in ParameterStatus (DateStyle, IntervalStyle,
//! TimeZone, client_encoding, server_encoding, integer_datetimes) or as the
//! caller tracked them from SET / startup options (extra_float_digits and
//! bytea_output, which PostgreSQL does not report).

/// What the caller knows about a session's output settings.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TextSettings {
    /// DateStyle, e.g. `ISO, MDY`: dates and timestamps.
    pub date_style: Option<DateStyle>,
    /// IntervalStyle, e.g. `postgres`: intervals.
    pub interval_style: Option<IntervalStyle>,
    /// TimeZone, when it is a fixed offset from UTC: timestamptz.
    pub time_zone: Option<FixedZone>,
    /// client_encoding and server_encoding: text-like types are the identity
    /// only when they are known and equal (then the server converts nothing).
    pub client_encoding: Option<String>,
    pub server_encoding: Option<String>,
    /// integer_datetimes: the binary layout of time-based types (always on
    /// since PostgreSQL 10).
    pub integer_datetimes: Option<bool>,
    /// extra_float_digits (-15..=3): float4 and float8. Not reported by the
    /// server.
    pub extra_float_digits: Option<i32>,
    /// bytea_output: bytea. Not reported by the server.
    pub bytea_output: Option<ByteaOutput>,
}

impl TextSettings {
    /// Records setting `name` (case-insensitive, as in ParameterStatus or
    /// SET) having `value`. A value this module cannot reproduce output for
    /// makes the setting unknown. Returns whether `name` is a setting that
    /// matters here.
    pub fn apply(&mut self, name: &str, value: &str) -> bool {
        let is = |setting: &str| name.eq_ignore_ascii_case(setting);
        if is("DateStyle") {
            self.date_style = DateStyle::parse(value);
        } else if is("IntervalStyle") {
            self.interval_style = IntervalStyle::parse(value);
        } else if is("TimeZone") {
            self.time_zone = FixedZone::parse(value);
        } else if is("client_encoding") {
            self.client_encoding = Some(value.to_owned());
        } else if is("server_encoding") {
            self.server_encoding = Some(value.to_owned());
        } else if is("integer_datetimes") {
            self.integer_datetimes = parse_bool(value);
        } else if is("extra_float_digits") {
            self.extra_float_digits = parse_decimal(value).filter(|digits| (-15..=3).contains(digits));
        } else if is("bytea_output") {
            self.bytea_output = ByteaOutput::parse(value);
        } else {
            return false;
        }
        true
    }

    /// Whether text-like values (text, varchar, bpchar, name, json, jsonb)
    /// arrive in binary exactly as they would in text. Both formats are
    /// converted to the client encoding, but `array_out` decides its quoting
    /// before that conversion, so only equal encodings make arrays safe too.
    pub(super) fn text_is_identity(&self) -> bool {
        match (&self.client_encoding, &self.server_encoding) {
            (Some(client), Some(server)) => client.eq_ignore_ascii_case(server),
            _ => false,
        }
    }
}

/// An integer setting's value as PostgreSQL's `parse_int` reads it, when
/// that is certain: an optional sign and decimal digits without a leading
/// zero (`strtol` with base 0 reads `010` as octal and `0x10` as hex, and
/// `2.5` is rounded).
fn parse_decimal(value: &str) -> Option<i32> {
    let value = value.trim_matches(|c: char| c.is_ascii_whitespace());
    let digits = value.strip_prefix(['-', '+']).unwrap_or(value);
    let decimal = !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) && (digits == "0" || !digits.starts_with('0'));
    decimal.then(|| value.parse().ok()).flatten()
}

fn parse_bool(value: &str) -> Option<bool> {
    match value.trim() {
        v if v.eq_ignore_ascii_case("on") => Some(true),
        v if v.eq_ignore_ascii_case("off") => Some(false),
        _ => None,
    }
}

/// DateStyle: the output format and the field order of dates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DateStyle {
    pub format: DateStyleFormat,
    /// Used by the SQL and Postgres formats (German is always day first,
    /// ISO always year first).
    pub order: DateOrder,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DateStyleFormat {
    /// `2024-02-29 12:34:56+00`
    Iso,
    /// `02/29/2024 12:34:56 UTC`
    Sql,
    /// `Thu Feb 29 12:34:56 2024 UTC`
    Postgres,
    /// `29.02.2024 12:34:56 UTC`
    German,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DateOrder {
    Mdy,
    Dmy,
    Ymd,
}

impl DateStyle {
    pub const ISO_MDY: DateStyle = DateStyle { format: DateStyleFormat::Iso, order: DateOrder::Mdy };

    /// Parses DateStyle as the server reports it: `ISO, MDY`, `SQL, DMY`,
    /// `Postgres, MDY`, `German, DMY`, ...
    pub fn parse(value: &str) -> Option<DateStyle> {
        let (format, order) = value.split_once(',')?;
        let format = match format.trim() {
            f if f.eq_ignore_ascii_case("ISO") => DateStyleFormat::Iso,
            f if f.eq_ignore_ascii_case("SQL") => DateStyleFormat::Sql,
            f if f.eq_ignore_ascii_case("Postgres") => DateStyleFormat::Postgres,
            f if f.eq_ignore_ascii_case("German") => DateStyleFormat::German,
            _ => return None,
        };
        let order = match order.trim() {
            o if o.eq_ignore_ascii_case("MDY") => DateOrder::Mdy,
            o if o.eq_ignore_ascii_case("DMY") => DateOrder::Dmy,
            o if o.eq_ignore_ascii_case("YMD") => DateOrder::Ymd,
            _ => return None,
        };
        Some(DateStyle { format, order })
    }

    /// Whether SQL and Postgres formats put the day before the month.
    pub(super) fn day_first(self) -> bool {
        self.order == DateOrder::Dmy
    }
}

/// IntervalStyle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IntervalStyle {
    /// `1 year 2 mons 3 days 04:05:06`
    Postgres,
    /// `@ 1 year 2 mons 3 days 4 hours 5 mins 6 secs`
    PostgresVerbose,
    /// `+1-2 +3 +4:05:06`
    SqlStandard,
    /// `P1Y2M3DT4H5M6S`
    Iso8601,
}

impl IntervalStyle {
    pub fn parse(value: &str) -> Option<IntervalStyle> {
        match value.trim() {
            v if v.eq_ignore_ascii_case("postgres") => Some(IntervalStyle::Postgres),
            v if v.eq_ignore_ascii_case("postgres_verbose") => Some(IntervalStyle::PostgresVerbose),
            v if v.eq_ignore_ascii_case("sql_standard") => Some(IntervalStyle::SqlStandard),
            v if v.eq_ignore_ascii_case("iso_8601") => Some(IntervalStyle::Iso8601),
            _ => None,
        }
    }
}

/// bytea_output.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ByteaOutput {
    /// `\x0102ff`
    Hex,
    /// `\001\002\377`, printable ASCII as is, `\\` for a backslash.
    Escape,
}

impl ByteaOutput {
    pub fn parse(value: &str) -> Option<ByteaOutput> {
        match value.trim() {
            v if v.eq_ignore_ascii_case("hex") => Some(ByteaOutput::Hex),
            v if v.eq_ignore_ascii_case("escape") => Some(ByteaOutput::Escape),
            _ => None,
        }
    }
}

/// The longest zone abbreviation PostgreSQL prints (`MAXTZLEN`); longer
/// ones are cut.
const MAX_ABBREV: usize = 10;

/// A TimeZone whose offset from UTC never changes, so that local time and
/// the printed zone follow from the UTC instant alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FixedZone {
    /// Seconds east of UTC (`+05:30` is 19800).
    utc_offset: i32,
    /// The abbreviation SQL, Postgres and German DateStyles print, cut to
    /// MAXTZLEN bytes.
    abbrev: [u8; MAX_ABBREV],
    abbrev_len: u8,
}

/// Hours PostgreSQL's POSIX zone parser accepts in an offset (`getsecs`).
const MAX_POSIX_HOURS: u32 = 24 * 7 - 1;

impl FixedZone {
    pub const UTC: FixedZone = FixedZone::new(0, b"UTC");

    const fn new(utc_offset: i32, abbrev: &[u8]) -> FixedZone {
        let mut bytes = [0u8; MAX_ABBREV];
        let mut i = 0;
        while i < abbrev.len() && i < MAX_ABBREV {
            bytes[i] = abbrev[i];
            i += 1;
        }
        FixedZone { utc_offset, abbrev: bytes, abbrev_len: i as u8 }
    }

    /// Parses TimeZone as the server reports it, accepting only zones whose
    /// offset and abbreviation are certain whatever the server's tz database:
    ///
    /// - `UTC`, `Etc/UTC` (abbreviation `UTC`) and `GMT`, `Etc/GMT` (`GMT`);
    /// - `Etc/GMT+5` .. (UTC−5, abbreviation `-05`; the sign is POSIX's);
    /// - POSIX zones with no daylight-saving part, which is what PostgreSQL
    ///   reports after `SET TIME ZONE 2` (`<+02>-02`) or
    ///   `SET TIME ZONE INTERVAL '-03:30' HOUR TO MINUTE` (`<-03:30>+03:30`),
    ///   and unbracketed ones such as `UTC+5` or `+02:00` (UTC−2, empty
    ///   abbreviation) whose name has letters only, so that no tz database
    ///   file can shadow them.
    ///
    /// Everything else (`Europe/Berlin`, `EST`, `EST5EDT`, ...) depends on
    /// the tz database's history and gives `None`.
    pub fn parse(name: &str) -> Option<FixedZone> {
        let bytes = name.as_bytes();
        if name.trim().parse::<f64>().is_ok() {
            // A bare number is hours east for SET, which the server then
            // reports as `<+05>-05`; never take it for a POSIX offset.
            return None;
        }
        if ["UTC", "Etc/UTC"].iter().any(|z| name.eq_ignore_ascii_case(z)) {
            return Some(FixedZone::UTC);
        }
        if ["GMT", "Etc/GMT"].iter().any(|z| name.eq_ignore_ascii_case(z)) {
            return Some(FixedZone::new(0, b"GMT"));
        }
        if bytes.len() > 7 && bytes[..7].eq_ignore_ascii_case(b"Etc/GMT") {
            return FixedZone::etc_gmt(&bytes[7..]);
        }
        // A POSIX TZ string: standard-time name, then its offset (hours west).
        let (abbrev, offset) = match bytes.first() {
            Some(b'<') => {
                let close = bytes.iter().position(|&b| b == b'>')?;
                (&bytes[1..close], &bytes[close + 1..])
            }
            _ => {
                let end = bytes.iter().position(|b| b.is_ascii_digit() || matches!(b, b',' | b'-' | b'+'))?;
                let abbrev = &bytes[..end];
                if !abbrev.iter().all(u8::is_ascii_alphabetic) {
                    return None;
                }
                (abbrev, &bytes[end..])
            }
        };
        // PostgreSQL upper-cases POSIX names, so the reported name already
        // holds the abbreviation it prints.
        let west = posix_offset(offset)?;
        Some(FixedZone::new(-west, abbrev))
    }

    /// `Etc/GMT+N` (UTC−N) and `Etc/GMT-N` (UTC+N) from the tz database,
    /// whose abbreviations are `-NN` and `+NN`.
    fn etc_gmt(rest: &[u8]) -> Option<FixedZone> {
        let (&sign, digits) = rest.split_first()?;
        if digits.is_empty() || digits.len() > 2 || !digits.iter().all(u8::is_ascii_digit) {
            return None;
        }
        let hours: i32 = std::str::from_utf8(digits).ok()?.parse().ok()?;
        let (east, printed_sign) = match sign {
            b'+' if (1..=12).contains(&hours) => (-hours, b'-'),
            b'-' if (1..=14).contains(&hours) => (hours, b'+'),
            _ => return None,
        };
        let abbrev = [printed_sign, b'0' + (hours / 10) as u8, b'0' + (hours % 10) as u8];
        Some(FixedZone::new(east * 3600, &abbrev))
    }

    /// Seconds east of UTC.
    pub fn utc_offset(&self) -> i32 {
        self.utc_offset
    }

    /// The abbreviation as PostgreSQL prints it (at most MAXTZLEN bytes).
    pub fn abbrev(&self) -> &[u8] {
        &self.abbrev[..usize::from(self.abbrev_len)]
    }
}

/// A POSIX TZ offset (`[+-]hh[:mm[:ss]]`, positive west of UTC) that must
/// end the string, as PostgreSQL's `getoffset` reads it; in seconds west.
fn posix_offset(text: &[u8]) -> Option<i32> {
    let (negative, rest) = match text.split_first()? {
        (b'-', rest) => (true, rest),
        (b'+', rest) => (false, rest),
        _ => (false, text),
    };
    let mut fields = rest.split(|&b| b == b':');
    let mut seconds = number(fields.next()?, MAX_POSIX_HOURS)? * 3600;
    if let Some(minutes) = fields.next() {
        seconds += number(minutes, 59)? * 60;
    }
    if let Some(secs) = fields.next() {
        seconds += number(secs, 60)?;
    }
    if fields.next().is_some() {
        return None;
    }
    let seconds = i32::try_from(seconds).ok()?;
    Some(if negative { -seconds } else { seconds })
}

/// A non-empty run of ASCII digits no greater than `max`.
fn number(digits: &[u8], max: u32) -> Option<u32> {
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let mut value: u32 = 0;
    for &d in digits {
        value = value.checked_mul(10)?.checked_add(u32::from(d - b'0'))?;
        if value > max {
            return None;
        }
    }
    Some(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn zone(name: &str) -> Option<(i32, String)> {
        FixedZone::parse(name).map(|z| (z.utc_offset(), String::from_utf8(z.abbrev().to_vec()).unwrap()))
    }

    #[test]
    fn fixed_zones_as_postgresql_reports_them() {
        // Offsets and abbreviations as PostgreSQL 15 printed them for
        // SET TIME ZONE ...; SELECT '2024-06-01 12:00+00'::timestamptz.
        assert_eq!(zone("UTC"), Some((0, "UTC".into())));
        assert_eq!(zone("Etc/UTC"), Some((0, "UTC".into())));
        assert_eq!(zone("GMT"), Some((0, "GMT".into())));
        assert_eq!(zone("Etc/GMT+5"), Some((-5 * 3600, "-05".into())));
        assert_eq!(zone("Etc/GMT-14"), Some((14 * 3600, "+14".into())));
        assert_eq!(zone("<+02>-02"), Some((2 * 3600, "+02".into())));
        assert_eq!(zone("<-03:30>+03:30"), Some((-(3 * 3600 + 1800), "-03:30".into())));
        assert_eq!(zone("<+0530>-05:30"), Some((5 * 3600 + 1800, "+0530".into())));
        assert_eq!(zone("UTC+5"), Some((-5 * 3600, "UTC".into())));
        assert_eq!(zone("UTC0"), Some((0, "UTC".into())));
        assert_eq!(zone("+02:00"), Some((-2 * 3600, "".into())));
        assert_eq!(zone("<+02:30:15>-02:30:15"), Some((9015, "+02:30:15".into())));
        // MAXTZLEN cuts long abbreviations.
        assert_eq!(zone("<ABCDEFGHIJKL>3"), Some((-3 * 3600, "ABCDEFGHIJ".into())));
    }

    #[test]
    fn zones_with_history_or_dst_are_not_fixed() {
        for name in [
            "Europe/Berlin",
            "America/New_York",
            "EST",
            "EST5EDT",
            "CET",
            "<+02>-02<+03>",
            "UTC+5DST",
            "Etc/GMT+13",
            "Etc/GMT-15",
            "Etc/GMT+0",
            "Etc/GMT+",
            "Zulu",
            "UCT",
            "<+02",
            "+168",
            "+1:60",
            "",
            "localtime",
            "5",
            "-3.5",
            " 5",
            "0x1A",
        ] {
            assert_eq!(zone(name), None, "{name}");
        }
    }

    #[test]
    fn date_style_as_reported() {
        assert_eq!(DateStyle::parse("ISO, MDY"), Some(DateStyle::ISO_MDY));
        assert_eq!(DateStyle::parse("German, DMY"), Some(DateStyle { format: DateStyleFormat::German, order: DateOrder::Dmy }));
        assert_eq!(
            DateStyle::parse("Postgres, YMD"),
            Some(DateStyle { format: DateStyleFormat::Postgres, order: DateOrder::Ymd })
        );
        assert_eq!(DateStyle::parse("ISO"), None);
        assert_eq!(DateStyle::parse("XSD, MDY"), None);
    }

    #[test]
    fn apply_tracks_what_matters() {
        let mut s = TextSettings::default();
        assert!(s.apply("IntervalStyle", "iso_8601"));
        assert_eq!(s.interval_style, Some(IntervalStyle::Iso8601));
        assert!(s.apply("extra_float_digits", "-15"));
        assert_eq!(s.extra_float_digits, Some(-15));
        assert!(s.apply("extra_float_digits", "4"));
        assert_eq!(s.extra_float_digits, None);
        for (text, digits) in [
            (" 3 ", Some(3)),
            ("+2", Some(2)),
            ("0", Some(0)),
            ("-0", Some(0)),
            ("-010", None),
            ("03", None),
            ("0x3", None),
            ("2.5", None),
            ("", None),
            ("-", None),
        ] {
            s.apply("extra_float_digits", text);
            assert_eq!(s.extra_float_digits, digits, "{text:?}");
        }
        assert!(s.apply("BYTEA_OUTPUT", "escape"));
        assert_eq!(s.bytea_output, Some(ByteaOutput::Escape));
        assert!(s.apply("integer_datetimes", "on"));
        assert_eq!(s.integer_datetimes, Some(true));
        assert!(!s.apply("application_name", "psql"));
    }
}
