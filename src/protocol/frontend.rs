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
        QUERY | PARSE | BIND | DESCRIBE | EXECUTE | CLOSE | SYNC | FLUSH | FUNCTION_CALL | TERMINATE | COPY_DATA | COPY_DONE | COPY_FAIL
    )
}

pub fn query(buf: &mut BytesMut, sql: &str) {
    put_message(buf, QUERY, |b| put_cstr(b, sql));
}

pub fn sync(buf: &mut BytesMut) {
    put_message(buf, SYNC, |_| {});
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
    fn query_text() {
        let mut buf = BytesMut::new();
        query(&mut buf, "select 1");
        let m = split_message(&mut buf, 100).unwrap().unwrap();
        assert_eq!(decode_query(&m.body).unwrap(), "select 1");
        assert!(decode_query(b"select").is_err());
        assert!(is_known_tag(b'Q') && !is_known_tag(b'?') && !is_known_tag(PASSWORD));
    }
}
