//! The name fields of extended-protocol messages, for renaming statements.
//!
//! A pooler that shares server-side prepared statements between clients
//! rewrites the statement name in Parse, Bind, Describe and Close and leaves
//! every other byte alone. These functions split a message body into its name
//! and the untouched rest, and write the message back with another name. They
//! never look inside the rest (query text, parameter values).

use bytes::{BufMut, BytesMut};

use super::frontend::{Target, BIND, PARSE};
use super::{put_cstr, put_message, ProtocolError, Reader};

/// A Parse body as `(statement name, rest)`; the rest (query text, NUL,
/// parameter count and type OIDs) is what identifies the statement.
pub fn split_parse(body: &[u8]) -> Result<(&str, &[u8]), ProtocolError> {
    split_parse_text(body).map(|(name, rest, _)| (name, rest))
}

/// [`split_parse`], with the query text the rest starts with: found once,
/// by the same pass that checks the rest's shape.
pub fn split_parse_text(body: &[u8]) -> Result<(&str, &[u8], &str), ProtocolError> {
    let mut r = Reader::new(body, "Parse");
    let name = r.cstr()?;
    let rest = r.rest();
    // Check the rest's shape so that a malformed Parse is never cached.
    let mut check = Reader::new(rest, "Parse");
    let text = check.cstr()?;
    // The count is unsigned on the wire: PostgreSQL takes up to 65,535.
    let count = usize::from(check.u16()?);
    if check.rest().len() != count * 4 {
        return Err(ProtocolError::Malformed("Parse"));
    }
    Ok((name, rest, text))
}

/// The query text inside a Parse rest (for logs and statistics).
pub fn parse_query(rest: &[u8]) -> &str {
    Reader::new(rest, "Parse").cstr().unwrap_or("")
}

/// The query text of a Query body, or of a Parse body's rest, as bytes:
/// those before its terminating NUL (all of them if there is none). For
/// cheap tests on every query that most texts fail before any decoding.
pub fn query_bytes(body: &[u8]) -> &[u8] {
    match super::nul_at(body) {
        Some(end) => &body[..end],
        None => body,
    }
}

pub fn put_parse(out: &mut BytesMut, name: &str, rest: &[u8]) {
    put_message(out, PARSE, |b| {
        put_cstr(b, name);
        b.put_slice(rest);
    });
}

/// Where the rest of a Bind message (header included) that pglane wrote
/// itself with `portal` and `statement` begins, as [`split_bind`] would
/// find it: names it made need no scan for their ends.
pub fn bind_rest_at(portal: &str, statement: &str) -> usize {
    super::frame::HEADER_LEN + portal.len() + 1 + statement.len() + 1
}

/// A Bind body as `(portal, statement name, rest)`.
pub fn split_bind(body: &[u8]) -> Result<(&str, &str, &[u8]), ProtocolError> {
    let mut r = Reader::new(body, "Bind");
    let portal = r.cstr()?;
    let statement = r.cstr()?;
    Ok((portal, statement, r.rest()))
}

pub fn put_bind(out: &mut BytesMut, portal: &str, statement: &str, rest: &[u8]) {
    put_message(out, BIND, |b| {
        put_cstr(b, portal);
        put_cstr(b, statement);
        b.put_slice(rest);
    });
}

/// Bind with the parameters of another Bind (`params`, as
/// `frontend::split_bind_results` returns them) and new result-format codes.
pub fn put_bind_with_result_formats(out: &mut BytesMut, portal: &str, statement: &str, params: &[u8], result_formats: &[i16]) {
    put_message(out, BIND, |b| {
        put_cstr(b, portal);
        put_cstr(b, statement);
        b.put_slice(params);
        b.put_u16(result_formats.len() as u16);
        for &f in result_formats {
            b.put_i16(f);
        }
    });
}

/// A Describe or Close body as `(target, name)`; encode them back with
/// `frontend::describe` and `frontend::close`.
pub fn split_target(body: &[u8]) -> Result<(Target, &str), ProtocolError> {
    let mut r = Reader::new(body, "Describe/Close");
    let target = match r.u8()? {
        b'S' => Target::Statement,
        b'P' => Target::Portal,
        _ => return Err(ProtocolError::Malformed("Describe/Close")),
    };
    let name = r.cstr()?;
    if !r.is_empty() {
        return Err(ProtocolError::Malformed("Describe/Close"));
    }
    Ok((target, name))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::frame::split_message;
    use crate::protocol::frontend::{close, describe, CLOSE, DESCRIBE};

    #[test]
    fn a_bind_pglane_wrote_has_its_rest_where_a_split_finds_it() {
        for (portal, statement) in [("", "pglane_1_2"), ("p", ""), ("", ""), ("portal", "s")] {
            let mut out = BytesMut::new();
            let values: [Option<&[u8]>; 2] = [Some(b"7"), None];
            crate::protocol::frontend::bind(&mut out, portal, statement, &[0], values.into_iter(), &[1]);
            let (p, s, rest) = split_bind(&out[super::super::frame::HEADER_LEN..]).unwrap();
            assert_eq!((p, s), (portal, statement));
            assert_eq!(&out[bind_rest_at(portal, statement)..], rest);
        }
    }

    #[test]
    fn query_bytes_stop_at_the_nul() {
        assert_eq!(query_bytes(b"select 1\0"), b"select 1");
        assert_eq!(query_bytes(&parse_rest("select $1", &[23])), b"select $1");
        assert_eq!(query_bytes(b"no nul"), b"no nul");
    }

    fn parse_rest(sql: &str, oids: &[u32]) -> Vec<u8> {
        let mut v = sql.as_bytes().to_vec();
        v.push(0);
        v.extend_from_slice(&(oids.len() as i16).to_be_bytes());
        for o in oids {
            v.extend_from_slice(&o.to_be_bytes());
        }
        v
    }

    #[test]
    fn parse_is_renamed_without_touching_the_rest() {
        let rest = parse_rest("select $1::int", &[23]);
        let mut out = BytesMut::new();
        put_parse(&mut out, "S_1", &rest);
        let m = split_message(&mut out, 1000).unwrap().unwrap();
        let (name, got_rest) = split_parse(&m.body).unwrap();
        assert_eq!((name, got_rest), ("S_1", &rest[..]));
        assert_eq!(parse_query(got_rest), "select $1::int");
        let mut renamed = BytesMut::new();
        put_parse(&mut renamed, "pglane_0_7", got_rest);
        let m = split_message(&mut renamed, 1000).unwrap().unwrap();
        assert_eq!(split_parse(&m.body).unwrap(), ("pglane_0_7", &rest[..]));
    }

    #[test]
    fn malformed_parse_bodies_are_rejected() {
        assert!(split_parse(b"S_1").is_err());
        assert!(split_parse(b"S_1\0select 1").is_err());
        assert!(split_parse(b"S_1\0select 1\0\0\x01").is_err()); // one OID announced, none there
        assert!(split_parse(b"S_1\0select 1\0\xff\xff").is_err()); // negative count
        assert!(split_parse(b"S_1\0select 1\0\0\0").is_ok());
        assert_eq!(split_parse_text(b"S_1\0select 1\0\0\0").unwrap(), ("S_1", &b"select 1\0\0\0"[..], "select 1"));
    }

    #[test]
    fn bind_describe_close_round_trip() {
        let mut out = BytesMut::new();
        put_bind(&mut out, "", "S_2", b"\0\0\0\0\0\0");
        describe(&mut out, Target::Statement, "S_2");
        close(&mut out, Target::Portal, "p");
        let m = split_message(&mut out, 1000).unwrap().unwrap();
        assert_eq!(split_bind(&m.body).unwrap(), ("", "S_2", &b"\0\0\0\0\0\0"[..]));
        let m = split_message(&mut out, 1000).unwrap().unwrap();
        assert_eq!((m.tag, split_target(&m.body).unwrap()), (DESCRIBE, (Target::Statement, "S_2")));
        let m = split_message(&mut out, 1000).unwrap().unwrap();
        assert_eq!((m.tag, split_target(&m.body).unwrap()), (CLOSE, (Target::Portal, "p")));
        assert!(split_target(b"Xname\0").is_err());
        assert!(split_target(b"S").is_err());
        assert!(split_target(b"Sname\0extra").is_err());
        assert!(split_bind(b"portal").is_err());
    }
}
