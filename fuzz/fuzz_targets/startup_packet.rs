//! The untagged first packet of a client connection (StartupMessage,
//! SSLRequest, GSSENCRequest, CancelRequest), exactly as pglane reads it:
//! four length bytes checked by `packet_length` before anything is allocated,
//! then `decode` of the whole packet.
//!
//! A decoded StartupMessage must encode back to the same packet, and the
//! user/database accessors must agree with PostgreSQL's defaults.
#![no_main]

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use pglane::protocol::startup::{self, StartupPacket, MAX_STARTUP_PACKET};

fuzz_target!(|data: &[u8]| {
    // What the login path does: length first, then exactly that many bytes.
    match startup::packet_length(data) {
        Ok(Some(len)) => {
            assert!((8..=MAX_STARTUP_PACKET).contains(&len));
            if data.len() >= len {
                check(&data[..len]);
            }
        }
        Ok(None) => assert!(data.len() < 4),
        Err(_) => {}
    }
    // And the decoder on its own, whatever the length field says.
    check(data);
});

fn check(packet: &[u8]) {
    match startup::decode(packet) {
        Ok(StartupPacket::Startup(params)) => {
            let pairs: Vec<(&str, &str)> = params.params.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
            let mut out = BytesMut::new();
            startup::encode_startup(&mut out, &pairs);
            // The length field is not checked by decode; everything after it is.
            assert_eq!(&out[4..], &packet[4..]);
            if let Some(user) = params.user() {
                assert!(!user.is_empty());
            }
            if let Some(db) = params.database() {
                assert!(!db.is_empty());
            }
            assert_eq!(params.database().is_none(), params.user().is_none() && params.get("database").is_none_or(str::is_empty));
        }
        Ok(StartupPacket::Cancel { process_id, secret_key }) => {
            let mut out = BytesMut::new();
            startup::encode_cancel(&mut out, process_id, secret_key);
            assert_eq!(&out[4..], &packet[4..16]);
        }
        Ok(StartupPacket::SslRequest | StartupPacket::GssEncRequest) | Err(_) => {}
    }
}
