//! Messages sent by the client side of a connection: clients to pglane, and
//! pglane (posing as a client) to PostgreSQL.

use bytes::{BufMut, BytesMut};

use super::{put_cstr, put_message, ProtocolError, Reader};

pub const QUERY: u8 = b'Q';
pub const PARSE: u8 = b'P';
pub const BIND: u8 = b'B';
pub const DESCRIBE: u8 = b'D';
pub const EXECUTE: u8 = b'E';
pub const CLOSE: u8 = b'C';
pub const SYNC: u8 = b'S';
pub const FLUSH: u8 = b'H';
pub const FUNCTION_CALL: u8 = b'F';
pub const TERMINATE: u8 = b'X';
pub const COPY_DATA: u8 = b'd';
pub const COPY_DONE: u8 = b'c';
pub const COPY_FAIL: u8 = b'f';
/// PasswordMessage, SASLInitialResponse and SASLResponse all use 'p'.
pub const PASSWORD: u8 = b'p';

/// Is `tag` a message type a client may send once logged in? Anything else
/// (including a stray PasswordMessage) is a protocol violation that PostgreSQL
/// answers with FATAL "invalid frontend message type".
pub fn is_known_tag(tag: u8) -> bool {
    matches!(
        tag,
        QUERY
            | PARSE
            | BIND
            | DESCRIBE
            | EXECUTE
            | CLOSE
            | SYNC
            | FLUSH
            | FUNCTION_CALL
            | TERMINATE
            | COPY_DATA
            | COPY_DONE
            | COPY_FAIL
    )
}

pub fn query(buf: &mut BytesMut, sql: &str) {
    put_message(buf, QUERY, |b| put_cstr(b, sql));
}

pub fn sync(buf: &mut BytesMut) {
    buf.extend_from_slice(&[SYNC, 0, 0, 0, 4]);
}

pub fn terminate(buf: &mut BytesMut) {
    put_message(buf, TERMINATE, |_| {});
}

/// A PasswordMessage carrying a cleartext or md5 password.
pub fn password(buf: &mut BytesMut, password: &str) {
    put_message(buf, PASSWORD, |b| put_cstr(b, password));
}

pub fn sasl_initial_response(buf: &mut BytesMut, mechanism: &str, data: &[u8]) {
    put_message(buf, PASSWORD, |b| {
        put_cstr(b, mechanism);
        b.put_i32(data.len() as i32);
        b.put_slice(data);
    });
}

pub fn sasl_response(buf: &mut BytesMut, data: &[u8]) {
    put_message(buf, PASSWORD, |b| b.put_slice(data));
}

/// The password in a PasswordMessage body, without its terminating NUL.
pub fn decode_password(body: &[u8]) -> Result<&[u8], ProtocolError> {
    match body.split_last() {
        Some((0, password)) if !password.contains(&0) => Ok(password),
        _ => Err(ProtocolError::Malformed("PasswordMessage")),
    }
}

/// A SASLInitialResponse: the chosen mechanism and its initial data.
pub fn decode_sasl_initial_response(body: &[u8]) -> Result<(&str, &[u8]), ProtocolError> {
    let mut r = Reader::new(body, "SASLInitialResponse");
    let mechanism = r.cstr()?;
    let len = r.i32()?;
    let data = if len < 0 { &[][..] } else { r.bytes(len as usize)? };
    if !r.is_empty() {
        return Err(ProtocolError::Malformed("SASLInitialResponse"));
    }
    Ok((mechanism, data))
}

/// The SQL text of a Query message.
pub fn decode_query(body: &[u8]) -> Result<&str, ProtocolError> {
    let mut r = Reader::new(body, "Query");
    let sql = r.cstr()?;
    if !r.is_empty() {
        return Err(ProtocolError::Malformed("Query"));
    }
    Ok(sql)
}

/// The part of a Bind body after its portal and statement names, split into
/// the parameters (format codes and values, untouched) and the result-format
/// codes, each 0 (text) or 1 (binary): none means all text, one applies to
/// every column, otherwise one per column.
pub fn split_bind_results(rest: &[u8]) -> Result<(&[u8], Vec<i16>), ProtocolError> {
    let (params, codes) = split_bind_result_codes(rest)?;
    Ok((params, decode_format_codes(codes)))
}

/// [`split_bind_results`] with the result-format codes left as they came
/// (two bytes each), for a caller that compares them before it decodes.
pub fn split_bind_result_codes(rest: &[u8]) -> Result<(&[u8], &[u8]), ProtocolError> {
    const WHAT: &str = "Bind";
    let mut r = Reader::new(rest, WHAT);
    let formats = usize::from(r.u16()?);
    r.bytes(formats * 2)?;
    for _ in 0..r.u16()? {
        let len = r.i32()?;
        if len != -1 {
            r.bytes(usize::try_from(len).map_err(|_| ProtocolError::Malformed(WHAT))?)?;
        }
    }
    let params_len = rest.len() - r.remaining();
    let count = usize::from(r.u16()?);
    let codes = r.bytes(count * 2)?;
    if !r.is_empty() {
        return Err(ProtocolError::Malformed(WHAT));
    }
    Ok((&rest[..params_len], codes))
}

/// Format codes as sent (two bytes each, big-endian).
pub fn decode_format_codes(codes: &[u8]) -> Vec<i16> {
    codes.chunks_exact(2).map(|c| i16::from_be_bytes([c[0], c[1]])).collect()
}

/// An Execute body as `(portal, max rows)`.
pub fn decode_execute(body: &[u8]) -> Result<(&str, i32), ProtocolError> {
    let mut r = Reader::new(body, "Execute");
    let portal = r.cstr()?;
    let max_rows = r.i32()?;
    if !r.is_empty() {
        return Err(ProtocolError::Malformed("Execute"));
    }
    Ok((portal, max_rows))
}

/// What a Describe or Close names: a prepared statement or a portal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    Statement,
    Portal,
}

impl Target {
    pub fn as_byte(self) -> u8 {
        match self {
            Target::Statement => b'S',
            Target::Portal => b'P',
        }
    }
}

/// Parse: prepare `sql` as statement `name` ("" is the unnamed statement).
/// `param_types` may be shorter than the parameters used; 0 leaves a type to
/// the server.
pub fn parse(buf: &mut BytesMut, name: &str, sql: &str, param_types: &[u32]) {
    debug_assert!(param_types.len() <= u16::MAX as usize, "more parameters than the protocol allows");
    put_message(buf, PARSE, |b| {
        put_cstr(b, name);
        put_cstr(b, sql);
        b.put_u16(param_types.len() as u16);
        for &oid in param_types {
            b.put_u32(oid);
        }
    });
}

/// Bind: make portal `portal` from statement `statement` with the given
/// parameter values (`None` is NULL). Format codes follow the protocol: none
/// means all text, one applies to all, else one per parameter or column.
pub fn bind<'v>(
    buf: &mut BytesMut,
    portal: &str,
    statement: &str,
    param_formats: &[i16],
    params: impl ExactSizeIterator<Item = Option<&'v [u8]>>,
    result_formats: &[i16],
) {
    debug_assert!(params.len() <= u16::MAX as usize, "more parameters than the protocol allows");
    put_message(buf, BIND, |b| {
        put_cstr(b, portal);
        put_cstr(b, statement);
        b.put_u16(param_formats.len() as u16);
        for &f in param_formats {
            b.put_i16(f);
        }
        b.put_u16(params.len() as u16);
        for value in params {
            match value {
                Some(v) => {
                    b.put_i32(v.len() as i32);
                    b.put_slice(v);
                }
                None => b.put_i32(-1),
            }
        }
        b.put_u16(result_formats.len() as u16);
        for &f in result_formats {
            b.put_i16(f);
        }
    });
}

pub fn describe(buf: &mut BytesMut, target: Target, name: &str) {
    // The unnamed one (every rewritten query's portal): one copy of its
    // seven bytes rather than four appends and a length patched in.
    if name.is_empty() {
        buf.extend_from_slice(&[DESCRIBE, 0, 0, 0, 6, target.as_byte(), 0]);
        return;
    }
    put_message(buf, DESCRIBE, |b| {
        b.put_u8(target.as_byte());
        put_cstr(b, name);
    });
}

/// Execute: run portal `portal`, returning at most `max_rows` rows (0: all).
pub fn execute(buf: &mut BytesMut, portal: &str, max_rows: u32) {
    if portal.is_empty() {
        let [a, b, c, d] = max_rows.min(i32::MAX as u32).to_be_bytes();
        buf.extend_from_slice(&[EXECUTE, 0, 0, 0, 9, 0, a, b, c, d]);
        return;
    }
    put_message(buf, EXECUTE, |b| {
        put_cstr(b, portal);
        b.put_u32(max_rows.min(i32::MAX as u32));
    });
}

pub fn close(buf: &mut BytesMut, target: Target, name: &str) {
    put_message(buf, CLOSE, |b| {
        b.put_u8(target.as_byte());
        put_cstr(b, name);
    });
}

pub fn flush(buf: &mut BytesMut) {
    put_message(buf, FLUSH, |_| {});
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::frame::split_message;

    #[test]
    fn password_and_sasl_round_trip() {
        let mut buf = BytesMut::new();
        password(&mut buf, "md5abc");
        sasl_initial_response(&mut buf, "SCRAM-SHA-256", b"n,,n=,r=x");
        sasl_response(&mut buf, b"c=biws");
        let m = split_message(&mut buf, 100).unwrap().unwrap();
        assert_eq!(decode_password(&m.body).unwrap(), b"md5abc");
        let m = split_message(&mut buf, 100).unwrap().unwrap();
        assert_eq!(decode_sasl_initial_response(&m.body).unwrap(), ("SCRAM-SHA-256", &b"n,,n=,r=x"[..]));
        let m = split_message(&mut buf, 100).unwrap().unwrap();
        assert_eq!(&m.body[..], b"c=biws");
    }

    #[test]
    fn malformed_auth_messages_are_errors() {
        assert!(decode_password(b"abc").is_err());
        assert!(decode_password(b"").is_err());
        assert!(decode_password(b"a\0b\0").is_err());
        assert!(decode_sasl_initial_response(b"SCRAM\0\0\0\0\x09abc").is_err());
        assert!(decode_sasl_initial_response(b"SCRAM").is_err());
        assert!(decode_sasl_initial_response(b"SCRAM\0\0\0\0\x01ab").is_err());
        assert_eq!(decode_sasl_initial_response(b"M\0\xff\xff\xff\xff").unwrap(), ("M", &[][..]));
    }

    #[test]
    fn bind_results_are_split_off_the_parameters() {
        let mut buf = BytesMut::new();
        let values: [Option<&[u8]>; 2] = [Some(b"42"), None];
        bind(&mut buf, "p", "s", &[0, 1], values.into_iter(), &[0, 1, 1]);
        let m = split_message(&mut buf, 100).unwrap().unwrap();
        let (_, _, rest) = crate::protocol::names::split_bind(&m.body).unwrap();
        let (params, formats) = split_bind_results(rest).unwrap();
        assert_eq!(formats, vec![0, 1, 1]);
        assert_eq!(&rest[..params.len()], params);
        assert_eq!(rest.len(), params.len() + 2 + 6);
        assert!(split_bind_results(&rest[..rest.len() - 1]).is_err());
        assert!(split_bind_results(b"\0\0\0\x01\xff\xff\xff\xfe\0\0").is_err(), "negative length");
        let mut long = rest.to_vec();
        long.push(0);
        assert!(split_bind_results(&long).is_err());
    }

    #[test]
    fn execute_round_trip() {
        let mut buf = BytesMut::new();
        execute(&mut buf, "C_1", 100);
        let m = split_message(&mut buf, 100).unwrap().unwrap();
        assert_eq!(decode_execute(&m.body).unwrap(), ("C_1", 100));
        assert!(decode_execute(b"C_1\0\0\0").is_err());
    }

    #[test]
    fn query_text() {
        let mut buf = BytesMut::new();
        query(&mut buf, "select 1");
        let m = split_message(&mut buf, 100).unwrap().unwrap();
        assert_eq!(decode_query(&m.body).unwrap(), "select 1");
        assert!(decode_query(b"select").is_err());
        assert!(is_known_tag(b'Q') && !is_known_tag(b'?') && !is_known_tag(PASSWORD));
    }

    /// `tag`, then the Int32 length, then `body`: the reference layout.
    fn framed(tag: u8, body: &[u8]) -> Vec<u8> {
        let mut v = vec![tag];
        v.extend_from_slice(&((body.len() + 4) as i32).to_be_bytes());
        v.extend_from_slice(body);
        v
    }

    #[test]
    fn parse_layout() {
        let mut buf = BytesMut::new();
        parse(&mut buf, "s1", "select $1", &[23, 0]);
        assert_eq!(&buf[..], framed(PARSE, b"s1\0select $1\0\0\x02\0\0\0\x17\0\0\0\0"));
        buf.clear();
        parse(&mut buf, "", "select 1", &[]);
        assert_eq!(&buf[..], framed(PARSE, b"\0select 1\0\0\0"));
    }

    #[test]
    fn bind_layout() {
        let mut buf = BytesMut::new();
        let params: [Option<&[u8]>; 2] = [Some(b"42"), None];
        bind(&mut buf, "p", "s1", &[0], params.into_iter(), &[1]);
        assert_eq!(&buf[..], framed(BIND, b"p\0s1\0\0\x01\0\0\0\x02\0\0\0\x0242\xff\xff\xff\xff\0\x01\0\x01"));
        buf.clear();
        bind(&mut buf, "", "", &[], std::iter::empty(), &[]);
        assert_eq!(&buf[..], framed(BIND, b"\0\0\0\0\0\0\0\0"));
    }

    #[test]
    fn describe_execute_close_flush_layout() {
        let mut buf = BytesMut::new();
        describe(&mut buf, Target::Portal, "");
        execute(&mut buf, "", 0);
        close(&mut buf, Target::Statement, "s1");
        flush(&mut buf);
        execute(&mut buf, "p", u32::MAX);
        describe(&mut buf, Target::Statement, "s1");
        execute(&mut buf, "", 300);
        execute(&mut buf, "", u32::MAX);
        sync(&mut buf);
        let mut want = framed(DESCRIBE, b"P\0");
        want.extend(framed(EXECUTE, b"\0\0\0\0\0"));
        want.extend(framed(CLOSE, b"Ss1\0"));
        want.extend(framed(FLUSH, b""));
        want.extend(framed(EXECUTE, b"p\0\x7f\xff\xff\xff"));
        want.extend(framed(DESCRIBE, b"Ss1\0"));
        want.extend(framed(EXECUTE, b"\0\0\0\x01\x2c"));
        want.extend(framed(EXECUTE, b"\0\x7f\xff\xff\xff"));
        want.extend(framed(SYNC, b""));
        assert_eq!(&buf[..], want);
        for tag in [DESCRIBE, EXECUTE, CLOSE, FLUSH, EXECUTE, DESCRIBE, EXECUTE, EXECUTE, SYNC] {
            assert_eq!(split_message(&mut buf, 100).unwrap().unwrap().tag, tag);
        }
        assert!(is_known_tag(DESCRIBE) && is_known_tag(FLUSH));
    }
}
