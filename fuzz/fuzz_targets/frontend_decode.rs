//! Client → pglane message bodies: every decoder pglane runs on bytes a client
//! sent after the startup packet (PasswordMessage, SASL responses, Query, and
//! the name-splitting of Parse/Bind/Describe/Close used to rename prepared
//! statements). The first input byte picks the decoder, the rest is the body.
//!
//! Besides "never panics", it checks what the renaming relies on: splitting a
//! body into (name, rest) and writing it back with the same name gives the
//! original bytes, so renaming never changes anything but the name.
#![no_main]

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use pglane::protocol::frame::split_message;
use pglane::protocol::frontend::{self, Target};
use pglane::protocol::names;

/// Re-frames what an encoder wrote and returns its body.
fn body_of(mut out: BytesMut, tag: u8) -> Vec<u8> {
    let m = split_message(&mut out, usize::MAX >> 1).expect("encoder writes a valid frame").expect("whole");
    assert_eq!(m.tag, tag);
    assert!(out.is_empty(), "encoder wrote one message");
    m.body.to_vec()
}

fuzz_target!(|data: &[u8]| {
    let Some((&which, body)) = data.split_first() else { return };
    match which % 7 {
        0 => {
            if let Ok(pw) = frontend::decode_password(body) {
                assert!(!pw.contains(&0));
                assert_eq!(pw.len() + 1, body.len());
            }
        }
        1 => {
            if let Ok((mechanism, first)) = frontend::decode_sasl_initial_response(body) {
                assert!(first.len() < body.len());
                let mut out = BytesMut::new();
                frontend::sasl_initial_response(&mut out, mechanism, first);
                // A negative length (-1: no data) decodes as empty and is
                // re-encoded as 0; otherwise the bytes round-trip.
                let again = body_of(out, frontend::PASSWORD);
                let (m2, f2) = frontend::decode_sasl_initial_response(&again).expect("re-decodes");
                assert_eq!((m2, f2), (mechanism, first));
            }
        }
        2 => {
            if let Ok(sql) = frontend::decode_query(body) {
                let mut out = BytesMut::new();
                frontend::query(&mut out, sql);
                assert_eq!(body_of(out, frontend::QUERY), body);
            }
        }
        3 => {
            if let Ok((name, rest)) = names::split_parse(body) {
                let mut out = BytesMut::new();
                names::put_parse(&mut out, name, rest);
                assert_eq!(body_of(out, frontend::PARSE), body);
                let _ = names::parse_query(rest);
                // Renamed, the rest is untouched.
                let mut out = BytesMut::new();
                names::put_parse(&mut out, "pglane_0_1", rest);
                let renamed = body_of(out, frontend::PARSE);
                assert_eq!(names::split_parse(&renamed).expect("renamed parses"), ("pglane_0_1", rest));
            }
        }
        4 => {
            if let Ok((portal, statement, rest)) = names::split_bind(body) {
                let mut out = BytesMut::new();
                names::put_bind(&mut out, portal, statement, rest);
                assert_eq!(body_of(out, frontend::BIND), body);
            }
        }
        5 | 6 => {
            if let Ok((target, name)) = names::split_target(body) {
                let mut out = BytesMut::new();
                let tag = if which % 7 == 5 { frontend::DESCRIBE } else { frontend::CLOSE };
                if tag == frontend::DESCRIBE {
                    frontend::describe(&mut out, target, name);
                } else {
                    frontend::close(&mut out, target, name);
                }
                assert_eq!(body_of(out, tag), body);
                assert!(matches!(target, Target::Statement | Target::Portal));
            }
        }
        _ => unreachable!(),
    }
    let _ = frontend::is_known_tag(which);
});
