//! Arrays of the transcodable types, any number of dimensions.
//!
//! Binary (`array_send`): `i32 ndim, i32 has_nulls, u32 element type`, then
//! `ndim × (i32 length, i32 lower bound)`, then each element as an i32
//! length (-1 for NULL) and its binary value. Text (`array_out`): `{}` when
//! empty; otherwise `[lo:hi]…=` when any lower bound is not 1, then the
//! elements in nested braces, separated by `,`. An element is double-quoted
//! when its text is empty, equals `NULL` in any case, or contains `"`, `\`,
//! `{`, `}`, `,` or ASCII whitespace; inside quotes `"` and `\` get a
//! backslash. NULL elements print as a bare `NULL`.

use bytes::BytesMut;

use super::{push_int, Scalar, TranscodeError};

const TY: &str = "array";
/// MAXDIM.
const MAX_DIMENSIONS: usize = 6;

pub(super) fn write(element: Scalar, element_oid: u32, binary: &[u8], out: &mut BytesMut) -> Result<(), TranscodeError> {
    let mut input = Reader(binary);
    let ndim = usize::try_from(input.i32()?)
        .ok()
        .filter(|&n| n <= MAX_DIMENSIONS)
        .ok_or(TranscodeError::Invalid { ty: TY, reason: "bad number of dimensions" })?;
    if !matches!(input.i32()?, 0 | 1) {
        return Err(TranscodeError::Invalid { ty: TY, reason: "bad has-nulls flag" });
    }
    if input.i32()? as u32 != element_oid {
        return Err(TranscodeError::Invalid { ty: TY, reason: "unexpected element type" });
    }
    let mut lengths = [0usize; MAX_DIMENSIONS];
    let mut lower_bounds = [1i32; MAX_DIMENSIONS];
    let mut items = 1usize;
    for d in 0..ndim {
        let length = input.i32()?;
        let lower = input.i32()?;
        let length = usize::try_from(length).map_err(|_| TranscodeError::Invalid { ty: TY, reason: "negative dimension" })?;
        if length > 0 && lower.checked_add(length as i32 - 1).is_none() {
            return Err(TranscodeError::Invalid { ty: TY, reason: "upper bound out of range" });
        }
        lengths[d] = length;
        lower_bounds[d] = lower;
        items = items.saturating_mul(length);
    }
    if ndim == 0 || items == 0 {
        if !input.0.is_empty() {
            return Err(TranscodeError::Invalid { ty: TY, reason: "trailing bytes" });
        }
        out.extend_from_slice(b"{}");
        return Ok(());
    }
    // Each element takes at least its 4-byte length: refuse absurd counts
    // before looping over them.
    if items > input.0.len() / 4 {
        return Err(TranscodeError::Truncated { ty: TY });
    }

    if lower_bounds[..ndim].iter().any(|&lower| lower != 1) {
        for d in 0..ndim {
            out.extend_from_slice(b"[");
            push_int(out, lower_bounds[d]);
            out.extend_from_slice(b":");
            push_int(out, lower_bounds[d] + (lengths[d] as i32 - 1));
            out.extend_from_slice(b"]");
        }
        out.extend_from_slice(b"=");
    }

    // array_out's walk: open the braces still closed, write an element,
    // then step the index from the last dimension, closing finished ones.
    let mut index = [0usize; MAX_DIMENSIONS];
    let mut opened_from = 0;
    out.extend_from_slice(b"{");
    loop {
        for _ in opened_from..ndim - 1 {
            out.extend_from_slice(b"{");
        }
        match input.element()? {
            None => out.extend_from_slice(b"NULL"),
            Some(value) => {
                let start = out.len();
                element.write(value, out)?;
                quote_if_needed(out, start);
            }
        }
        let mut d = ndim;
        loop {
            if d == 0 {
                if !input.0.is_empty() {
                    return Err(TranscodeError::Invalid { ty: TY, reason: "trailing bytes" });
                }
                return Ok(());
            }
            d -= 1;
            index[d] += 1;
            if index[d] < lengths[d] {
                out.extend_from_slice(b",");
                break;
            }
            index[d] = 0;
            out.extend_from_slice(b"}");
        }
        opened_from = d;
    }
}

/// Quotes the element text written at `out[start..]` in place if
/// `array_out` would.
fn quote_if_needed(out: &mut BytesMut, start: usize) {
    let text = &out[start..];
    let mut escapes = 0;
    let mut needs_quotes = text.is_empty() || text.eq_ignore_ascii_case(b"NULL");
    for &c in text {
        match c {
            b'"' | b'\\' => {
                needs_quotes = true;
                escapes += 1;
            }
            b'{' | b'}' | b',' | b' ' | b'\t' | b'\n' | b'\r' | 0x0b | 0x0c => needs_quotes = true,
            _ => {}
        }
    }
    if !needs_quotes {
        return;
    }
    // Grow by the quotes and backslashes, then move the text right-to-left.
    let len = text.len();
    out.resize(out.len() + 2 + escapes, 0);
    let buf = &mut out[start..];
    let mut write = len + 2 + escapes;
    write -= 1;
    buf[write] = b'"';
    for read in (0..len).rev() {
        let c = buf[read];
        write -= 1;
        buf[write] = c;
        if c == b'"' || c == b'\\' {
            write -= 1;
            buf[write] = b'\\';
        }
    }
    buf[0] = b'"';
}

/// Reads the big-endian fields of a binary array.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn i32(&mut self) -> Result<i32, TranscodeError> {
        let (bytes, rest) = self.0.split_first_chunk::<4>().ok_or(TranscodeError::Truncated { ty: TY })?;
        self.0 = rest;
        Ok(i32::from_be_bytes(*bytes))
    }

    /// One element: `None` for NULL.
    fn element(&mut self) -> Result<Option<&'a [u8]>, TranscodeError> {
        let len = self.i32()?;
        if len == -1 {
            return Ok(None);
        }
        let len = usize::try_from(len).map_err(|_| TranscodeError::Invalid { ty: TY, reason: "negative element length" })?;
        if len > self.0.len() {
            return Err(TranscodeError::Truncated { ty: TY });
        }
        let (value, rest) = self.0.split_at(len);
        self.0 = rest;
        Ok(Some(value))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::formats::{oid, DateStyle};

    /// A binary array of `element_oid` with `dims` as (length, lower bound).
    fn binary(element_oid: u32, dims: &[(i32, i32)], elements: &[Option<&[u8]>]) -> Vec<u8> {
        let mut b = Vec::new();
        let has_nulls = elements.iter().any(Option::is_none);
        for word in [dims.len() as i32, i32::from(has_nulls), element_oid as i32] {
            b.extend_from_slice(&word.to_be_bytes());
        }
        for &(length, lower) in dims {
            b.extend_from_slice(&length.to_be_bytes());
            b.extend_from_slice(&lower.to_be_bytes());
        }
        for element in elements {
            match element {
                None => b.extend_from_slice(&(-1i32).to_be_bytes()),
                Some(value) => {
                    b.extend_from_slice(&(value.len() as i32).to_be_bytes());
                    b.extend_from_slice(value);
                }
            }
        }
        b
    }

    fn text(element: Scalar, element_oid: u32, binary: &[u8]) -> String {
        let mut out = BytesMut::new();
        write(element, element_oid, binary, &mut out).expect("valid");
        String::from_utf8(out.to_vec()).unwrap()
    }

    fn int4s(values: &[Option<i32>]) -> Vec<Option<Vec<u8>>> {
        values.iter().map(|v| v.map(|v| v.to_be_bytes().to_vec())).collect()
    }

    fn refs(values: &[Option<Vec<u8>>]) -> Vec<Option<&[u8]>> {
        values.iter().map(|v| v.as_deref()).collect()
    }

    #[test]
    fn one_dimension_with_nulls_and_bounds() {
        let values = int4s(&[Some(1), None, Some(3)]);
        let b = binary(oid::INT4, &[(3, 1)], &refs(&values));
        assert_eq!(text(Scalar::Int4, oid::INT4, &b), "{1,NULL,3}");
        let values = int4s(&[Some(1), Some(2)]);
        let b = binary(oid::INT4, &[(2, 2)], &refs(&values));
        assert_eq!(text(Scalar::Int4, oid::INT4, &b), "[2:3]={1,2}");
        let b = binary(oid::INT4, &[(2, -5)], &refs(&values));
        assert_eq!(text(Scalar::Int4, oid::INT4, &b), "[-5:-4]={1,2}");
    }

    #[test]
    fn empty_arrays() {
        assert_eq!(text(Scalar::Int4, oid::INT4, &binary(oid::INT4, &[], &[])), "{}");
        assert_eq!(text(Scalar::Int4, oid::INT4, &binary(oid::INT4, &[(0, 1)], &[])), "{}");
    }

    #[test]
    fn many_dimensions() {
        let values = int4s(&[Some(1), Some(2), Some(3), Some(4)]);
        let b = binary(oid::INT4, &[(2, 1), (2, 1)], &refs(&values));
        assert_eq!(text(Scalar::Int4, oid::INT4, &b), "{{1,2},{3,4}}");
        let values = int4s(&[Some(1), Some(2), Some(3), Some(4), Some(5), Some(6)]);
        let b = binary(oid::INT4, &[(1, 0), (3, 1), (2, 1)], &refs(&values));
        assert_eq!(text(Scalar::Int4, oid::INT4, &b), "[0:0][1:3][1:2]={{{1,2},{3,4},{5,6}}}");
    }

    #[test]
    fn quoting_as_array_out_does() {
        // protocol.md §3.2: {"a b","","NULL","q\"x","back\\slash"}.
        let values: Vec<Option<&[u8]>> = vec![
            Some(b"a b"),
            Some(b""),
            Some(b"NULL"),
            Some(b"q\"x"),
            Some(b"back\\slash"),
            None,
            Some(b"nul"),
            Some(b"null"),
            Some("é{".as_bytes()),
            Some(b"tab\there"),
            Some(b"plain"),
        ];
        let b = binary(oid::TEXT, &[(values.len() as i32, 1)], &values);
        assert_eq!(
            text(Scalar::Identity, oid::TEXT, &b),
            r#"{"a b","","NULL","q\"x","back\\slash",NULL,nul,"null","é{","tab	here",plain}"#
        );
    }

    #[test]
    fn elements_use_the_element_transcoder() {
        let day = 0i32.to_be_bytes();
        let b = binary(oid::DATE, &[(1, 1)], &[Some(&day)]);
        assert_eq!(text(Scalar::Date(DateStyle::ISO_MDY), oid::DATE, &b), "{2000-01-01}");
        let noon = (12 * 3_600_000_000i64).to_be_bytes();
        let b = binary(oid::TIMESTAMP, &[(1, 1)], &[Some(&noon)]);
        assert_eq!(text(Scalar::Timestamp(DateStyle::ISO_MDY), oid::TIMESTAMP, &b), r#"{"2000-01-01 12:00:00"}"#);
    }

    #[test]
    fn malformed() {
        let mut out = BytesMut::new();
        let values = int4s(&[Some(1), Some(2)]);
        let good = binary(oid::INT4, &[(2, 1)], &refs(&values));
        assert!(write(Scalar::Int4, oid::INT8, &good, &mut out).is_err(), "element type");
        assert!(write(Scalar::Int4, oid::INT4, &good[..good.len() - 1], &mut out).is_err());
        let mut trailing = good.clone();
        trailing.push(0);
        assert!(write(Scalar::Int4, oid::INT4, &trailing, &mut out).is_err());
        let seven = binary(oid::INT4, &[(1, 1); 7], &refs(&int4s(&[Some(1)])));
        assert!(write(Scalar::Int4, oid::INT4, &seven, &mut out).is_err());
        let huge = binary(oid::INT4, &[(i32::MAX, 1), (i32::MAX, 1)], &[]);
        assert!(write(Scalar::Int4, oid::INT4, &huge, &mut out).is_err());
        let overflow = binary(oid::INT4, &[(2, i32::MAX)], &refs(&values));
        assert!(write(Scalar::Int4, oid::INT4, &overflow, &mut out).is_err());
        let bad_element = binary(oid::INT4, &[(1, 1)], &[Some(&[1, 2])]);
        assert!(write(Scalar::Int4, oid::INT4, &bad_element, &mut out).is_err());
    }
}
