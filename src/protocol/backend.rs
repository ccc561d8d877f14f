//! Messages sent by the server side of a connection: PostgreSQL to pglane, and
//! pglane (posing as PostgreSQL) to its clients.

use bytes::{BufMut, BytesMut};

use super::{put_cstr, put_message, ProtocolError, Reader};

pub const AUTHENTICATION: u8 = b'R';
pub const PARAMETER_STATUS: u8 = b'S';
pub const BACKEND_KEY_DATA: u8 = b'K';
pub const READY_FOR_QUERY: u8 = b'Z';
pub const ERROR_RESPONSE: u8 = b'E';
pub const NOTICE_RESPONSE: u8 = b'N';
pub const COPY_IN_RESPONSE: u8 = b'G';
pub const COPY_OUT_RESPONSE: u8 = b'H';
pub const COPY_BOTH_RESPONSE: u8 = b'W';
pub const NEGOTIATE_PROTOCOL_VERSION: u8 = b'v';

/// Transaction status reported in ReadyForQuery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TransactionStatus {
    Idle,
    InTransaction,
    Failed,
}

impl TransactionStatus {
    pub fn from_byte(b: u8) -> Result<Self, ProtocolError> {
        match b {
            b'I' => Ok(Self::Idle),
            b'T' => Ok(Self::InTransaction),
            b'E' => Ok(Self::Failed),
            _ => Err(ProtocolError::Malformed("ReadyForQuery")),
        }
    }

    pub fn as_byte(self) -> u8 {
        match self {
            Self::Idle => b'I',
            Self::InTransaction => b'T',
            Self::Failed => b'E',
        }
    }
}

/// An Authentication ('R') request from a server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Authentication {
    Ok,
    CleartextPassword,
    Md5Password { salt: [u8; 4] },
    Sasl { mechanisms: Vec<String> },
    SaslContinue(Vec<u8>),
    SaslFinal(Vec<u8>),
    /// Kerberos, GSS, SSPI: methods pglane does not speak.
    Unsupported(i32),
}

pub fn decode_authentication(body: &[u8]) -> Result<Authentication, ProtocolError> {
    let mut r = Reader::new(body, "Authentication");
    Ok(match r.i32()? {
        0 => Authentication::Ok,
        3 => Authentication::CleartextPassword,
        5 => {
            let s = r.bytes(4)?;
            Authentication::Md5Password { salt: [s[0], s[1], s[2], s[3]] }
        }
        10 => {
            let mut mechanisms = Vec::new();
            loop {
                let m = r.cstr()?;
                if m.is_empty() {
                    break;
                }
                mechanisms.push(m.to_owned());
            }
            Authentication::Sasl { mechanisms }
        }
        11 => Authentication::SaslContinue(r.rest().to_vec()),
        12 => Authentication::SaslFinal(r.rest().to_vec()),
        other => Authentication::Unsupported(other),
    })
}

pub fn authentication_ok(buf: &mut BytesMut) {
    put_message(buf, AUTHENTICATION, |b| b.put_i32(0));
}

pub fn authentication_md5(buf: &mut BytesMut, salt: [u8; 4]) {
    put_message(buf, AUTHENTICATION, |b| {
        b.put_i32(5);
        b.put_slice(&salt);
    });
}

pub fn authentication_sasl(buf: &mut BytesMut, mechanisms: &[&str]) {
    put_message(buf, AUTHENTICATION, |b| {
        b.put_i32(10);
        for m in mechanisms {
            put_cstr(b, m);
        }
        b.put_u8(0);
    });
}

pub fn authentication_sasl_continue(buf: &mut BytesMut, data: &[u8]) {
    put_message(buf, AUTHENTICATION, |b| {
        b.put_i32(11);
        b.put_slice(data);
    });
}

pub fn authentication_sasl_final(buf: &mut BytesMut, data: &[u8]) {
    put_message(buf, AUTHENTICATION, |b| {
        b.put_i32(12);
        b.put_slice(data);
    });
}

pub fn parameter_status(buf: &mut BytesMut, name: &str, value: &str) {
    put_message(buf, PARAMETER_STATUS, |b| {
        put_cstr(b, name);
        put_cstr(b, value);
    });
}

pub fn decode_parameter_status(body: &[u8]) -> Result<(String, String), ProtocolError> {
    let mut r = Reader::new(body, "ParameterStatus");
    Ok((r.cstr()?.to_owned(), r.cstr()?.to_owned()))
}

pub fn backend_key_data(buf: &mut BytesMut, process_id: i32, secret_key: i32) {
    put_message(buf, BACKEND_KEY_DATA, |b| {
        b.put_i32(process_id);
        b.put_i32(secret_key);
    });
}

pub fn decode_backend_key_data(body: &[u8]) -> Result<(i32, i32), ProtocolError> {
    let mut r = Reader::new(body, "BackendKeyData");
    Ok((r.i32()?, r.i32()?))
}

pub fn ready_for_query(buf: &mut BytesMut, status: TransactionStatus) {
    put_message(buf, READY_FOR_QUERY, |b| b.put_u8(status.as_byte()));
}

pub fn decode_ready_for_query(body: &[u8]) -> Result<TransactionStatus, ProtocolError> {
    match body {
        [b] => TransactionStatus::from_byte(*b),
        _ => Err(ProtocolError::Malformed("ReadyForQuery")),
    }
}

/// The fields of an ErrorResponse or NoticeResponse that pglane writes or reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ErrorFields {
    pub severity: String,
    pub code: String,
    pub message: String,
    pub detail: Option<String>,
    pub hint: Option<String>,
}

impl ErrorFields {
    /// An ERROR with the given SQLSTATE and message.
    pub fn error(code: &str, message: impl Into<String>) -> Self {
        Self::new("ERROR", code, message)
    }

    /// A FATAL error, which ends the connection.
    pub fn fatal(code: &str, message: impl Into<String>) -> Self {
        Self::new("FATAL", code, message)
    }

    fn new(severity: &str, code: &str, message: impl Into<String>) -> Self {
        ErrorFields {
            severity: severity.to_owned(),
            code: code.to_owned(),
            message: message.into(),
            detail: None,
            hint: None,
        }
    }

    pub fn with_detail(mut self, detail: impl Into<String>) -> Self {
        self.detail = Some(detail.into());
        self
    }
}

impl std::fmt::Display for ErrorFields {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {} (SQLSTATE {})", self.severity, self.message, self.code)
    }
}

fn put_fields(buf: &mut BytesMut, e: &ErrorFields) {
    for (tag, value) in [(b'S', Some(&e.severity)), (b'V', Some(&e.severity)), (b'C', Some(&e.code)), (b'M', Some(&e.message)), (b'D', e.detail.as_ref()), (b'H', e.hint.as_ref())] {
        if let Some(v) = value {
            buf.put_u8(tag);
            put_cstr(buf, v);
        }
    }
    buf.put_u8(0);
}

pub fn error_response(buf: &mut BytesMut, e: &ErrorFields) {
    put_message(buf, ERROR_RESPONSE, |b| put_fields(b, e));
}

pub fn notice_response(buf: &mut BytesMut, e: &ErrorFields) {
    put_message(buf, NOTICE_RESPONSE, |b| put_fields(b, e));
}

/// Decodes the body of an ErrorResponse or NoticeResponse. Unknown field types
/// are skipped, as the protocol requires.
pub fn decode_error_fields(body: &[u8]) -> Result<ErrorFields, ProtocolError> {
    let mut r = Reader::new(body, "ErrorResponse");
    let mut e = ErrorFields::new("", "", "");
    loop {
        let tag = r.u8()?;
        if tag == 0 {
            break;
        }
        let value = r.cstr()?.to_owned();
        match tag {
            b'S' if e.severity.is_empty() => e.severity = value,
            b'V' => e.severity = value,
            b'C' => e.code = value,
            b'M' => e.message = value,
            b'D' => e.detail = Some(value),
            b'H' => e.hint = Some(value),
            _ => {}
        }
    }
    Ok(e)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::frame::split_message;

    fn one(buf: &mut BytesMut) -> crate::protocol::frame::Message {
        split_message(buf, 1 << 20).unwrap().unwrap()
    }

    #[test]
    fn authentication_requests_round_trip() {
        let mut buf = BytesMut::new();
        authentication_ok(&mut buf);
        authentication_md5(&mut buf, [1, 2, 3, 4]);
        authentication_sasl(&mut buf, &["SCRAM-SHA-256"]);
        authentication_sasl_continue(&mut buf, b"r=abc");
        authentication_sasl_final(&mut buf, b"v=xyz");
        let expected = [
            Authentication::Ok,
            Authentication::Md5Password { salt: [1, 2, 3, 4] },
            Authentication::Sasl { mechanisms: vec!["SCRAM-SHA-256".into()] },
            Authentication::SaslContinue(b"r=abc".to_vec()),
            Authentication::SaslFinal(b"v=xyz".to_vec()),
        ];
        for want in expected {
            let m = one(&mut buf);
            assert_eq!(m.tag, AUTHENTICATION);
            assert_eq!(decode_authentication(&m.body).unwrap(), want);
        }
        assert_eq!(decode_authentication(&7i32.to_be_bytes()), Ok(Authentication::Unsupported(7)));
        assert!(decode_authentication(&[0, 0, 0, 5, 1]).is_err());
    }

    #[test]
    fn error_response_round_trip() {
        let e = ErrorFields::fatal("28P01", "password authentication failed for user \"x\"").with_detail("d");
        let mut buf = BytesMut::new();
        error_response(&mut buf, &e);
        let m = one(&mut buf);
        assert_eq!(m.tag, ERROR_RESPONSE);
        assert_eq!(decode_error_fields(&m.body).unwrap(), e);
        assert!(decode_error_fields(b"Mno terminator").is_err());
        assert!(decode_error_fields(b"").is_err());
    }

    #[test]
    fn small_messages_round_trip() {
        let mut buf = BytesMut::new();
        parameter_status(&mut buf, "TimeZone", "UTC");
        backend_key_data(&mut buf, 7, -9);
        ready_for_query(&mut buf, TransactionStatus::InTransaction);
        assert_eq!(decode_parameter_status(&one(&mut buf).body).unwrap(), ("TimeZone".into(), "UTC".into()));
        assert_eq!(decode_backend_key_data(&one(&mut buf).body).unwrap(), (7, -9));
        assert_eq!(decode_ready_for_query(&one(&mut buf).body).unwrap(), TransactionStatus::InTransaction);
        assert!(decode_ready_for_query(b"X").is_err());
        assert!(decode_ready_for_query(b"").is_err());
        assert!(decode_backend_key_data(&[0; 7]).is_err());
    }
}
