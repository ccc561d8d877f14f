//! The first packet of a connection, which has no tag byte: StartupMessage,
//! SSLRequest, GSSENCRequest or CancelRequest, and pglane's own
//! PeerCloseIdle between peered instances; and the protocol version
//! negotiation a StartupMessage may call for.
//!
//! pglane speaks protocol 3.0 with its clients, as PostgreSQL 15 to 17 do.
//! A client asking for a later 3.x (PostgreSQL 18's libpq asks 3.2 with
//! `max_protocol_version=latest`) or sending protocol options (`_pq_.*`) is
//! answered NegotiateProtocolVersion ([`StartupParams::negotiation`]) and
//! carries on in 3.0; any major version but 3 is refused, with PostgreSQL's
//! words ([`unsupported_version_message`]).

use bytes::{BufMut, BytesMut};

use super::{put_cstr, ProtocolError, Reader, PROTOCOL_VERSION_3};

/// PostgreSQL's own limit on a startup packet (MAX_STARTUP_PACKET_LENGTH).
pub const MAX_STARTUP_PACKET: usize = 10_000;

const CANCEL_REQUEST_CODE: i32 = 80_877_102;
const SSL_REQUEST_CODE: i32 = 80_877_103;
const GSSENC_REQUEST_CODE: i32 = 80_877_104;
/// pglane's PeerCloseIdle: 1234 in the high half, as PostgreSQL's special
/// requests, and "pl" in the low half, far from the codes PostgreSQL uses
/// (5678 to 5680). PostgreSQL and PgBouncer refuse it as an unknown
/// protocol version.
const PEER_CLOSE_IDLE_CODE: i32 = (1234 << 16) | 0x706c;

/// A decoded first packet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StartupPacket {
    Startup(StartupParams),
    SslRequest,
    GssEncRequest,
    Cancel {
        process_id: i32,
        secret_key: i32,
    },
    /// A peered pglane instance asks this one to close its idle server
    /// connections to server database `dbname`, which a client of the peer
    /// is about to DROP (or otherwise needs free of other sessions).
    PeerCloseIdle {
        dbname: String,
    },
}

/// A StartupMessage of protocol 3.x: the minor version asked for and the
/// name/value pairs, in the order the client sent them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StartupParams {
    pub minor_version: u16,
    pub params: Vec<(String, String)>,
}

/// The newest protocol version pglane speaks with clients.
pub const NEWEST_VERSION: i32 = PROTOCOL_VERSION_3;

/// Names of protocol options start with this; PostgreSQL ignores the
/// ones it does not know and says so (NegotiateProtocolVersion).
pub const PROTOCOL_OPTION_PREFIX: &str = "_pq_.";

/// What a NegotiateProtocolVersion message says: the newest version the
/// server speaks of the major version asked for, and the protocol options
/// of the StartupMessage it does not know.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Negotiation {
    pub newest_version: i32,
    pub unrecognized_options: Vec<String>,
}

impl StartupParams {
    /// What pglane must answer before anything else, as PostgreSQL does:
    /// `Some` when the client asked for a minor version above 3.0 or sent
    /// protocol options, none of which pglane knows.
    pub fn negotiation(&self) -> Option<Negotiation> {
        let unrecognized_options: Vec<String> = self
            .params
            .iter()
            .filter(|(name, _)| name.starts_with(PROTOCOL_OPTION_PREFIX))
            .map(|(name, _)| name.clone())
            .collect();
        let newer = i32::from(self.minor_version) > NEWEST_VERSION & 0xffff;
        (newer || !unrecognized_options.is_empty())
            .then_some(Negotiation { newest_version: NEWEST_VERSION, unrecognized_options })
    }

    pub fn get(&self, name: &str) -> Option<&str> {
        self.params.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
    }

    /// PgBouncer's application_name_add_host: ` - host:port` of `peer`
    /// after the application_name given (or alone, if none was).
    pub fn add_host_to_application_name(&mut self, peer: std::net::SocketAddr) {
        let with_host = format!("{} - {}:{}", self.get("application_name").unwrap_or_default(), peer.ip(), peer.port());
        match self.params.iter_mut().find(|(k, _)| k == "application_name") {
            Some((_, value)) => *value = with_host,
            None => self.params.push(("application_name".to_owned(), with_host)),
        }
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
            let cut_short = |_| ProtocolError::Malformed("CancelRequest");
            let process_id = r.i32().map_err(cut_short)?;
            let secret_key = r.i32().map_err(cut_short)?;
            Ok(StartupPacket::Cancel { process_id, secret_key })
        }
        PEER_CLOSE_IDLE_CODE => {
            let dbname = r.cstr().map_err(|_| ProtocolError::Malformed("PeerCloseIdle"))?;
            Ok(StartupPacket::PeerCloseIdle { dbname: dbname.to_owned() })
        }
        // Any 3.x: a minor version pglane does not speak is negotiated down.
        version if version >> 16 == PROTOCOL_VERSION_3 >> 16 => {
            let params = decode_params(r)?;
            Ok(StartupPacket::Startup(StartupParams { minor_version: (version & 0xffff) as u16, params }))
        }
        other => Err(ProtocolError::UnsupportedVersion(other)),
    }
}

/// PostgreSQL's FATAL message for a StartupMessage of a major version it
/// does not speak (SQLSTATE 0A000), as pglane, speaking 3.0 only, words it.
pub fn unsupported_version_message(version: i32) -> String {
    format!(
        "unsupported frontend protocol {}.{}: server supports 3.0 to {}.{}",
        (version as u32) >> 16,
        version & 0xffff,
        NEWEST_VERSION >> 16,
        NEWEST_VERSION & 0xffff
    )
}

/// Checks a server's NegotiateProtocolVersion against the version pglane
/// asked it for: the server may offer an older 3.x minor (never 2.0, never
/// more than was asked), and pglane goes on in that one.
pub fn accept_negotiation(asked: i32, offered: &Negotiation) -> Result<i32, ProtocolError> {
    let version = offered.newest_version;
    if version >> 16 != PROTOCOL_VERSION_3 >> 16 || version > asked {
        return Err(ProtocolError::UnsupportedVersion(version));
    }
    Ok(version)
}

fn decode_params(mut r: Reader<'_>) -> Result<Vec<(String, String)>, ProtocolError> {
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
    Ok(params)
}

/// Encodes a v3.0 StartupMessage with the given parameters.
pub fn encode_startup(buf: &mut BytesMut, params: &[(&str, &str)]) {
    encode_startup_version(buf, PROTOCOL_VERSION_3, params);
}

/// Encodes a StartupMessage asking for protocol `version` (what a newer
/// client may send: 3.2, say).
pub fn encode_startup_version(buf: &mut BytesMut, version: i32, params: &[(&str, &str)]) {
    let start = buf.len();
    buf.put_i32(0);
    buf.put_i32(version);
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

/// Encodes a PeerCloseIdle for server database `dbname`.
pub fn encode_peer_close_idle(buf: &mut BytesMut, dbname: &str) {
    let start = buf.len();
    buf.put_i32(0);
    buf.put_i32(PEER_CLOSE_IDLE_CODE);
    put_cstr(buf, dbname);
    let len = (buf.len() - start) as i32;
    buf[start..start + 4].copy_from_slice(&len.to_be_bytes());
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
    fn the_host_goes_after_the_application_name_or_alone() {
        let peer: std::net::SocketAddr = "10.1.2.3:40000".parse().unwrap();
        let mut named = StartupParams {
            params: vec![("user".into(), "u".into()), ("application_name".into(), "psql".into())],
            ..Default::default()
        };
        named.add_host_to_application_name(peer);
        assert_eq!(named.get("application_name"), Some("psql - 10.1.2.3:40000"));
        assert_eq!(named.params.len(), 2);
        let mut unnamed = StartupParams { params: vec![("user".into(), "u".into())], ..Default::default() };
        unnamed.add_host_to_application_name("[::1]:5".parse().unwrap());
        assert_eq!(unnamed.get("application_name"), Some(" - ::1:5"));
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
    fn peer_close_idle_round_trip() {
        let mut buf = BytesMut::new();
        encode_peer_close_idle(&mut buf, "shop \"2\"");
        assert_eq!(packet_length(&buf), Ok(Some(buf.len())));
        assert_eq!(decode(&buf), Ok(StartupPacket::PeerCloseIdle { dbname: "shop \"2\"".into() }));
        assert_eq!(PEER_CLOSE_IDLE_CODE >> 16, 1234, "a special request's major version, as PostgreSQL's");
        for malformed in [&b""[..], b"no terminator", b"\xff\0"] {
            assert_eq!(decode(&packet(PEER_CLOSE_IDLE_CODE, malformed)), Err(ProtocolError::Malformed("PeerCloseIdle")));
        }
    }

    #[test]
    fn database_defaults_to_user() {
        let p = StartupParams { params: vec![("user".into(), "bob".into())], ..StartupParams::default() };
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
        assert_eq!(decode(&packet(0x0004_0000, b"\0")), Err(ProtocolError::UnsupportedVersion(0x0004_0000)));
        assert!(decode(&[0, 0, 0, 8]).is_err());
    }

    fn startup_of(version: i32, params: &[(&str, &str)]) -> StartupParams {
        let mut buf = BytesMut::new();
        encode_startup_version(&mut buf, version, params);
        match decode(&buf) {
            Ok(StartupPacket::Startup(p)) => p,
            other => panic!("not a startup: {other:?}"),
        }
    }

    #[test]
    fn a_newer_minor_version_or_protocol_options_are_negotiated_down_to_3_0() {
        // 3.0 without options: nothing to negotiate.
        let plain = startup_of(PROTOCOL_VERSION_3, &[("user", "u")]);
        assert_eq!((plain.minor_version, plain.negotiation()), (0, None));
        // PostgreSQL 18's libpq with max_protocol_version=latest.
        let v32 = startup_of(PROTOCOL_VERSION_3 | 2, &[("user", "u"), ("database", "d")]);
        assert_eq!(v32.minor_version, 2);
        assert_eq!(v32.user(), Some("u"));
        assert_eq!(v32.negotiation(), Some(Negotiation { newest_version: PROTOCOL_VERSION_3, unrecognized_options: vec![] }));
        // Protocol options, in 3.0 as in 3.2: each is named, in order.
        let options = startup_of(PROTOCOL_VERSION_3, &[("_pq_.a", "1"), ("user", "u"), ("_pq_.b", "")]);
        assert_eq!(
            options.negotiation(),
            Some(Negotiation {
                newest_version: PROTOCOL_VERSION_3,
                unrecognized_options: vec!["_pq_.a".into(), "_pq_.b".into()]
            })
        );
        let both = startup_of(PROTOCOL_VERSION_3 | 0xffff, &[("_pq_.x", "y"), ("user", "u")]);
        assert_eq!(both.negotiation().map(|n| n.unrecognized_options), Some(vec!["_pq_.x".to_owned()]));
        // A name that merely looks like one is an ordinary parameter.
        assert_eq!(startup_of(PROTOCOL_VERSION_3, &[("user", "u"), ("_pq_", "x"), ("pq_.x", "y")]).negotiation(), None);
    }

    #[test]
    fn versions_pglane_does_not_speak_are_refused_in_postgresql_words() {
        assert_eq!(unsupported_version_message(0x0002_0000), "unsupported frontend protocol 2.0: server supports 3.0 to 3.0");
        assert_eq!(unsupported_version_message(0x0004_0001), "unsupported frontend protocol 4.1: server supports 3.0 to 3.0");
        assert_eq!(unsupported_version_message(-1), "unsupported frontend protocol 65535.65535: server supports 3.0 to 3.0");
    }

    #[test]
    fn a_server_may_offer_an_older_3_x_only() {
        let offer = |newest_version| Negotiation { newest_version, unrecognized_options: vec!["_pq_.x".into()] };
        assert_eq!(accept_negotiation(PROTOCOL_VERSION_3, &offer(PROTOCOL_VERSION_3)), Ok(PROTOCOL_VERSION_3));
        assert_eq!(accept_negotiation(PROTOCOL_VERSION_3 | 2, &offer(PROTOCOL_VERSION_3)), Ok(PROTOCOL_VERSION_3));
        assert_eq!(accept_negotiation(PROTOCOL_VERSION_3 | 2, &offer(PROTOCOL_VERSION_3 | 1)), Ok(PROTOCOL_VERSION_3 | 1));
        // More than asked for, or another major version, is a broken server.
        assert!(accept_negotiation(PROTOCOL_VERSION_3, &offer(PROTOCOL_VERSION_3 | 2)).is_err());
        assert!(accept_negotiation(PROTOCOL_VERSION_3, &offer(0x0002_0000)).is_err());
    }
}
