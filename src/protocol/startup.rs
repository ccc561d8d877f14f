//! The first packet of a connection, which has no tag byte: StartupMessage,
//! SSLRequest, GSSENCRequest or CancelRequest.

use bytes::{BufMut, BytesMut};

use super::{put_cstr, ProtocolError, Reader, PROTOCOL_VERSION_3};

/// PostgreSQL's own limit on a startup packet (MAX_STARTUP_PACKET_LENGTH).
pub const MAX_STARTUP_PACKET: usize = 10_000;

const CANCEL_REQUEST_CODE: i32 = 80_877_102;
const SSL_REQUEST_CODE: i32 = 80_877_103;
const GSSENC_REQUEST_CODE: i32 = 80_877_104;

/// A decoded first packet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StartupPacket {
    Startup(StartupParams),
    SslRequest,
    GssEncRequest,
    Cancel { process_id: i32, secret_key: i32 },
}

/// The name/value pairs of a StartupMessage, in the order the client sent them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StartupParams {
    pub params: Vec<(String, String)>,
}

impl StartupParams {
    pub fn get(&self, name: &str) -> Option<&str> {
        self.params.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
    }

    /// The role the client logs in as (`user` is mandatory in a StartupMessage).
    pub fn user(&self) -> Option<&str> {
        self.get("user").filter(|u| !u.is_empty())
    }

    /// The database asked for; PostgreSQL defaults it to the user name.
    pub fn database(&self) -> Option<&str> {
        self.get("database").filter(|d| !d.is_empty()).or(self.user())
    }
}

/// The total length (including the length field itself) declared by the packet
/// at the front of `buf`, once its four length bytes are there. Lengths outside
/// 8..=MAX_STARTUP_PACKET are rejected before anything is allocated.
pub fn packet_length(buf: &[u8]) -> Result<Option<usize>, ProtocolError> {
    if buf.len() < 4 {
        return Ok(None);
    }
    let len = i32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]);
    if len < 8 {
        return Err(ProtocolError::InvalidLength(len.into()));
    }
    if len as usize > MAX_STARTUP_PACKET {
        return Err(ProtocolError::MessageTooLarge { len: len as usize, max: MAX_STARTUP_PACKET });
    }
    Ok(Some(len as usize))
}

/// Decodes a whole packet (length field included).
pub fn decode(packet: &[u8]) -> Result<StartupPacket, ProtocolError> {
    let mut r = Reader::new(packet, "startup packet");
    let _len = r.i32()?;
    let code = r.i32()?;
    match code {
        SSL_REQUEST_CODE => Ok(StartupPacket::SslRequest),
        GSSENC_REQUEST_CODE => Ok(StartupPacket::GssEncRequest),
        CANCEL_REQUEST_CODE => {
            let process_id = r.i32()?;
            let secret_key = r.i32()?;
            Ok(StartupPacket::Cancel { process_id, secret_key })
        }
        PROTOCOL_VERSION_3 => decode_params(r).map(StartupPacket::Startup),
        // 3.x minor versions: PostgreSQL answers NegotiateProtocolVersion; we
        // only speak 3.0 and say so.
        other => Err(ProtocolError::UnsupportedVersion(other)),
    }
}

fn decode_params(mut r: Reader<'_>) -> Result<StartupParams, ProtocolError> {
    let mut params = Vec::new();
    loop {
        let name = r.cstr()?;
        if name.is_empty() {
            break;
        }
        let value = r.cstr()?;
        params.push((name.to_owned(), value.to_owned()));
    }
    if !r.is_empty() {
        return Err(ProtocolError::Malformed("startup packet"));
    }
    Ok(StartupParams { params })
}

/// Encodes a v3.0 StartupMessage with the given parameters.
pub fn encode_startup(buf: &mut BytesMut, params: &[(&str, &str)]) {
    let start = buf.len();
    buf.put_i32(0);
    buf.put_i32(PROTOCOL_VERSION_3);
    for (name, value) in params {
        put_cstr(buf, name);
        put_cstr(buf, value);
    }
    buf.put_u8(0);
    let len = (buf.len() - start) as i32;
    buf[start..start + 4].copy_from_slice(&len.to_be_bytes());
}

/// Encodes a CancelRequest.
pub fn encode_cancel(buf: &mut BytesMut, process_id: i32, secret_key: i32) {
    buf.put_i32(16);
    buf.put_i32(CANCEL_REQUEST_CODE);
    buf.put_i32(process_id);
    buf.put_i32(secret_key);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn packet(code: i32, rest: &[u8]) -> Vec<u8> {
        let mut v = ((rest.len() + 8) as i32).to_be_bytes().to_vec();
        v.extend_from_slice(&code.to_be_bytes());
        v.extend_from_slice(rest);
        v
    }

    #[test]
    fn startup_round_trip() {
        let mut buf = BytesMut::new();
        encode_startup(&mut buf, &[("user", "alice"), ("database", "app"), ("application_name", "t")]);
        assert_eq!(packet_length(&buf), Ok(Some(buf.len())));
        let StartupPacket::Startup(p) = decode(&buf).unwrap() else { panic!("not a startup") };
        assert_eq!(p.user(), Some("alice"));
        assert_eq!(p.database(), Some("app"));
        assert_eq!(p.get("application_name"), Some("t"));
    }

    #[test]
    fn database_defaults_to_user() {
        let p = StartupParams { params: vec![("user".into(), "bob".into())] };
        assert_eq!(p.database(), Some("bob"));
        assert_eq!(StartupParams::default().user(), None);
    }

    #[test]
    fn special_requests() {
        assert_eq!(decode(&packet(SSL_REQUEST_CODE, b"")), Ok(StartupPacket::SslRequest));
        assert_eq!(decode(&packet(GSSENC_REQUEST_CODE, b"")), Ok(StartupPacket::GssEncRequest));
        let mut buf = BytesMut::new();
        encode_cancel(&mut buf, 42, -7);
        assert_eq!(decode(&buf), Ok(StartupPacket::Cancel { process_id: 42, secret_key: -7 }));
    }

    #[test]
    fn malformed_packets_are_errors() {
        assert_eq!(packet_length(&[0, 0, 0, 3]), Err(ProtocolError::InvalidLength(3)));
        assert!(matches!(packet_length(&[0, 1, 0, 0]), Err(ProtocolError::MessageTooLarge { .. })));
        assert_eq!(packet_length(&[0, 0]), Ok(None));
        // unterminated parameter name
        assert!(decode(&packet(PROTOCOL_VERSION_3, b"user\0bob")).is_err());
        // missing final NUL
        assert!(decode(&packet(PROTOCOL_VERSION_3, b"user\0bob\0")).is_err());
        // trailing garbage after the final NUL
        assert!(decode(&packet(PROTOCOL_VERSION_3, b"user\0bob\0\0x")).is_err());
        // cancel request cut short
        assert!(decode(&packet(CANCEL_REQUEST_CODE, b"\0\0")).is_err());
        assert_eq!(decode(&packet(0x0002_0000, b"")), Err(ProtocolError::UnsupportedVersion(0x0002_0000)));
        assert!(decode(&[0, 0, 0, 8]).is_err());
    }
}
