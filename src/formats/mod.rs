//! Binary → text transcoding of PostgreSQL result values.
//!
//! This module owns one thing: turning a value PostgreSQL sent in its binary
//! wire format into exactly the bytes PostgreSQL would have sent had the
//! client asked for that column as text. That lets pglane ask the server for
//! binary (cheap `*_send` functions instead of `*_out`, fewer bytes on the
//! wire) while the client still sees its text, byte for byte.
//!
//! What it must never do is guess. The text of some types depends on session
//! settings (DateStyle, IntervalStyle, TimeZone, extra_float_digits,
//! bytea_output, the encodings). [`transcoder_for`] hands out a
//! [`Transcoder`] only when every setting the type's text depends on is
//! known in [`TextSettings`] and is one whose output this module reproduces
//! exactly; otherwise it returns `None` and the column must stay text. A
//! malformed binary value is a [`TranscodeError`], never a panic and never
//! plausible-looking text.
//!
//! Every function here is pure: no I/O, no allocation besides growing the
//! caller's output buffer, no state but Ryū's power-of-5 tables (computed
//! once). The algorithms follow PostgreSQL 15's output functions
//! (`numeric_out`, `EncodeDateTime`, `EncodeInterval`, `array_out`,
//! `inet_net_ntop`, the Ryū-based `float8out`, ...), and `tests/transcode.rs`
//! checks them against a real server's text output.
//!
//! How the relay uses it: when a statement's RowDescription is known, call
//! [`transcoder_for`] per column the client wants as text; ask the server
//! for binary exactly where it returns `Some`. Then, per DataRow field in
//! such a column, reserve the 4-byte length, [`Transcoder::write_text`] the
//! value after it and patch the length in. NULLs (length -1) pass through.
//! Re-make the transcoders when a setting changes (ParameterStatus, or a
//! tracked SET of extra_float_digits / bytea_output).
//!
//! One file per type family: `boolean`, `int` (int2, int4, int8, oid),
//! `float` (with `shortest`, PostgreSQL's Ryū), `numeric`, `text` (text-like,
//! json, jsonb), `bytea`, `uuid`, `datetime` (date, time, timetz, timestamp,
//! timestamptz), `interval`, `network` (inet, cidr) and `array` (arrays of
//! all of these, any number of dimensions); `settings` reads the session
//! settings.

mod array;
mod boolean;
mod bytea;
mod datetime;
mod float;
mod int;
mod interval;
mod network;
mod numeric;
mod settings;
mod shortest;
mod text;
mod uuid;

use bytes::BytesMut;
use thiserror::Error;

pub use settings::{ByteaOutput, DateOrder, DateStyle, DateStyleFormat, FixedZone, IntervalStyle, TextSettings};

use float::FloatFormat;

/// Type OIDs of the types this module can transcode (`pg_type.oid`).
pub mod oid {
    pub const BOOL: u32 = 16;
    pub const BYTEA: u32 = 17;
    pub const NAME: u32 = 19;
    pub const INT8: u32 = 20;
    pub const INT2: u32 = 21;
    pub const INT4: u32 = 23;
    pub const TEXT: u32 = 25;
    pub const OID: u32 = 26;
    pub const JSON: u32 = 114;
    pub const CIDR: u32 = 650;
    pub const FLOAT4: u32 = 700;
    pub const FLOAT8: u32 = 701;
    pub const INET: u32 = 869;
    pub const BPCHAR: u32 = 1042;
    pub const VARCHAR: u32 = 1043;
    pub const DATE: u32 = 1082;
    pub const TIME: u32 = 1083;
    pub const TIMESTAMP: u32 = 1114;
    pub const TIMESTAMPTZ: u32 = 1184;
    pub const INTERVAL: u32 = 1186;
    pub const TIMETZ: u32 = 1266;
    pub const NUMERIC: u32 = 1700;
    pub const UUID: u32 = 2950;
    pub const JSONB: u32 = 3802;

    /// `(array type, element type)` for every array type this module knows.
    pub const ARRAYS: [(u32, u32); 24] = [
        (1000, BOOL),
        (1001, BYTEA),
        (1003, NAME),
        (1016, INT8),
        (1005, INT2),
        (1007, INT4),
        (1009, TEXT),
        (1028, OID),
        (199, JSON),
        (651, CIDR),
        (1021, FLOAT4),
        (1022, FLOAT8),
        (1041, INET),
        (1014, BPCHAR),
        (1015, VARCHAR),
        (1182, DATE),
        (1183, TIME),
        (1115, TIMESTAMP),
        (1185, TIMESTAMPTZ),
        (1187, INTERVAL),
        (1270, TIMETZ),
        (1231, NUMERIC),
        (2951, UUID),
        (3807, JSONB),
    ];

    /// The element type of array type `array_oid`, if it is one of [`ARRAYS`].
    pub fn array_element(array_oid: u32) -> Option<u32> {
        ARRAYS.iter().find(|&&(array, _)| array == array_oid).map(|&(_, element)| element)
    }
}

/// A binary value that is not what its type's send function produces.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum TranscodeError {
    #[error("binary {ty} value has {actual} bytes, expected {expected}")]
    Length { ty: &'static str, expected: usize, actual: usize },
    #[error("binary {ty} value is truncated")]
    Truncated { ty: &'static str },
    #[error("invalid binary {ty} value: {reason}")]
    Invalid { ty: &'static str, reason: &'static str },
}

/// Turns the binary values of one column type into PostgreSQL's text for
/// them, under the session settings it was made for. Small and `Copy`: make
/// one per column when the RowDescription is known, then call
/// [`Transcoder::write_text`] per value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transcoder {
    scalar: Scalar,
    /// `Some(element type OID)` when the column is an array of `scalar`.
    array_of: Option<u32>,
}

/// The transcoder for a column of type `type_oid` under `settings`, or `None`
/// when that column must stay text: the type is not one this module knows,
/// or its text depends on a setting that is unknown or not reproducible.
pub fn transcoder_for(type_oid: u32, settings: &TextSettings) -> Option<Transcoder> {
    match oid::array_element(type_oid) {
        Some(element) => Some(Transcoder { scalar: Scalar::for_type(element, settings)?, array_of: Some(element) }),
        None => Some(Transcoder { scalar: Scalar::for_type(type_oid, settings)?, array_of: None }),
    }
}

impl Transcoder {
    /// Appends to `out` the text PostgreSQL would have sent for `binary`, a
    /// non-NULL value in this column's binary format. On error `out` is left
    /// as it was.
    pub fn write_text(&self, binary: &[u8], out: &mut BytesMut) -> Result<(), TranscodeError> {
        let start = out.len();
        let written = match self.array_of {
            None => self.scalar.write(binary, out),
            Some(element_oid) => array::write(self.scalar, element_oid, binary, out),
        };
        if written.is_err() {
            out.truncate(start);
        }
        written
    }

    /// Whether values of this column are arrays.
    pub fn is_array(&self) -> bool {
        self.array_of.is_some()
    }
}

/// How to print one (non-array) type, with the settings its text depends on
/// already resolved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scalar {
    Bool,
    Int2,
    Int4,
    Int8,
    Oid,
    Float4(FloatFormat),
    Float8(FloatFormat),
    Numeric,
    /// text, varchar, bpchar, name, json: the binary form is the text.
    Identity,
    Jsonb,
    Bytea(ByteaOutput),
    Uuid,
    Date(DateStyle),
    Time,
    TimeTz,
    Timestamp(DateStyle),
    TimestampTz(DateStyle, FixedZone),
    Interval(IntervalStyle),
    Inet,
    Cidr,
}

impl Scalar {
    fn for_type(type_oid: u32, s: &TextSettings) -> Option<Scalar> {
        let datetimes = s.integer_datetimes == Some(true);
        let scalar = match type_oid {
            oid::BOOL => Scalar::Bool,
            oid::INT2 => Scalar::Int2,
            oid::INT4 => Scalar::Int4,
            oid::INT8 => Scalar::Int8,
            oid::OID => Scalar::Oid,
            oid::FLOAT4 => Scalar::Float4(FloatFormat::float4(s.extra_float_digits?)),
            oid::FLOAT8 => Scalar::Float8(FloatFormat::float8(s.extra_float_digits?)),
            oid::NUMERIC => Scalar::Numeric,
            oid::TEXT | oid::VARCHAR | oid::BPCHAR | oid::NAME | oid::JSON if s.text_is_identity() => Scalar::Identity,
            oid::JSONB if s.text_is_identity() => Scalar::Jsonb,
            oid::BYTEA => Scalar::Bytea(s.bytea_output?),
            oid::UUID => Scalar::Uuid,
            oid::DATE => Scalar::Date(s.date_style?),
            oid::TIME if datetimes => Scalar::Time,
            oid::TIMETZ if datetimes => Scalar::TimeTz,
            oid::TIMESTAMP if datetimes => Scalar::Timestamp(s.date_style?),
            oid::TIMESTAMPTZ if datetimes => Scalar::TimestampTz(s.date_style?, s.time_zone?),
            oid::INTERVAL if datetimes => Scalar::Interval(s.interval_style?),
            oid::INET => Scalar::Inet,
            oid::CIDR => Scalar::Cidr,
            _ => return None,
        };
        Some(scalar)
    }

    fn write(self, binary: &[u8], out: &mut BytesMut) -> Result<(), TranscodeError> {
        match self {
            Scalar::Bool => boolean::write_bool(binary, out),
            Scalar::Int2 => int::write_int2(binary, out),
            Scalar::Int4 => int::write_int4(binary, out),
            Scalar::Int8 => int::write_int8(binary, out),
            Scalar::Oid => int::write_oid(binary, out),
            Scalar::Float4(format) => float::write_float4(binary, format, out),
            Scalar::Float8(format) => float::write_float8(binary, format, out),
            Scalar::Numeric => numeric::write_numeric(binary, out),
            Scalar::Identity => {
                text::write_identity(binary, out);
                Ok(())
            }
            Scalar::Jsonb => text::write_jsonb(binary, out),
            Scalar::Bytea(style) => {
                bytea::write_bytea(binary, style, out);
                Ok(())
            }
            Scalar::Uuid => uuid::write_uuid(binary, out),
            Scalar::Date(style) => datetime::write_date(binary, style, out),
            Scalar::Time => datetime::write_time(binary, out),
            Scalar::TimeTz => datetime::write_timetz(binary, out),
            Scalar::Timestamp(style) => datetime::write_timestamp(binary, style, out),
            Scalar::TimestampTz(style, zone) => datetime::write_timestamptz(binary, style, &zone, out),
            Scalar::Interval(style) => interval::write_interval(binary, style, out),
            Scalar::Inet => network::write_inet(binary, out),
            Scalar::Cidr => network::write_cidr(binary, out),
        }
    }
}

/// `binary` as a fixed-size array, or a length error naming `ty`.
fn fixed<const N: usize>(ty: &'static str, binary: &[u8]) -> Result<[u8; N], TranscodeError> {
    binary.try_into().map_err(|_| TranscodeError::Length { ty, expected: N, actual: binary.len() })
}

/// Appends `value` in decimal, zero-padded to at least `width` digits
/// (PostgreSQL's `pg_ultostr_zeropad`).
fn push_zero_padded(out: &mut BytesMut, value: u64, width: usize) {
    let mut buf = itoa::Buffer::new();
    let digits = buf.format(value).as_bytes();
    for _ in digits.len()..width {
        out.extend_from_slice(b"0");
    }
    out.extend_from_slice(digits);
}

/// Appends `value` in decimal.
fn push_int(out: &mut BytesMut, value: impl itoa::Integer) {
    out.extend_from_slice(itoa::Buffer::new().format(value).as_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_types_and_unknown_settings_stay_text() {
        let unknown = TextSettings::default();
        assert!(transcoder_for(790, &unknown).is_none(), "money");
        assert!(transcoder_for(142, &unknown).is_none(), "xml");
        assert!(transcoder_for(22, &unknown).is_none(), "int2vector prints without braces");
        assert!(transcoder_for(30, &unknown).is_none(), "oidvector prints without braces");
        for oid in [
            oid::FLOAT4,
            oid::FLOAT8,
            oid::TEXT,
            oid::JSONB,
            oid::BYTEA,
            oid::DATE,
            oid::TIME,
            oid::TIMESTAMP,
            oid::TIMESTAMPTZ,
            oid::INTERVAL,
            1009,
            1022,
        ] {
            assert!(transcoder_for(oid, &unknown).is_none(), "type {oid} needs settings");
        }
        for oid in [oid::BOOL, oid::INT8, oid::NUMERIC, oid::UUID, oid::INET, 1016, 2951] {
            assert!(transcoder_for(oid, &unknown).is_some(), "type {oid} needs no settings");
        }
    }

    #[test]
    fn settings_gate_each_type() {
        let mut s = TextSettings::default();
        s.apply("integer_datetimes", "on");
        assert!(transcoder_for(oid::TIME, &s).is_some());
        assert!(transcoder_for(oid::TIMESTAMP, &s).is_none(), "no DateStyle yet");
        s.apply("DateStyle", "ISO, MDY");
        assert!(transcoder_for(oid::TIMESTAMP, &s).is_some());
        assert!(transcoder_for(oid::TIMESTAMPTZ, &s).is_none(), "no TimeZone yet");
        s.apply("TimeZone", "Europe/Berlin");
        assert!(transcoder_for(oid::TIMESTAMPTZ, &s).is_none(), "zone with history");
        s.apply("TimeZone", "Etc/UTC");
        assert!(transcoder_for(oid::TIMESTAMPTZ, &s).is_some());
        s.apply("integer_datetimes", "off");
        assert!(transcoder_for(oid::TIMESTAMPTZ, &s).is_none(), "float datetimes");

        s.apply("client_encoding", "UTF8");
        assert!(transcoder_for(oid::TEXT, &s).is_none(), "server encoding unknown");
        s.apply("server_encoding", "UTF8");
        assert!(transcoder_for(oid::TEXT, &s).is_some());
        s.apply("client_encoding", "LATIN1");
        assert!(transcoder_for(oid::TEXT, &s).is_none(), "server converts");
        assert!(transcoder_for(1009, &s).is_none(), "text[] too");

        s.apply("extra_float_digits", "3");
        assert!(transcoder_for(oid::FLOAT8, &s).is_some());
        s.apply("extra_float_digits", "bogus");
        assert!(transcoder_for(oid::FLOAT8, &s).is_none());
    }

    #[test]
    fn errors_leave_the_output_untouched() {
        let t = transcoder_for(1016, &TextSettings::default()).expect("int8[]");
        let mut out = BytesMut::from(&b"keep"[..]);
        // int8[] with two elements, the second truncated.
        let mut bad = Vec::new();
        for word in [1i32, 0, 20, 2, 1, 8] {
            bad.extend_from_slice(&word.to_be_bytes());
        }
        bad.extend_from_slice(&42i64.to_be_bytes());
        bad.extend_from_slice(&8i32.to_be_bytes());
        bad.extend_from_slice(&[0, 1, 2]);
        assert!(t.write_text(&bad, &mut out).is_err());
        assert_eq!(&out[..], b"keep");
    }

    #[test]
    fn push_zero_padded_is_a_minimum_width() {
        let mut out = BytesMut::new();
        push_zero_padded(&mut out, 7, 2);
        push_zero_padded(&mut out, 123, 2);
        push_zero_padded(&mut out, 5, 4);
        push_zero_padded(&mut out, 0, 0);
        assert_eq!(&out[..], b"0712300050");
    }
}
