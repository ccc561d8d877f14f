//! SCRAM-SHA-256, server side (`ScramServer`: pglane checking a client).
//!
//! Two modes, picked by the first byte:
//! - free: the input, split at the first 0xff byte, is the client-first and
//!   client-final messages. No panic; and since the fuzzer cannot know the
//!   password, it must never be let in.
//! - tamper: a real client (`ScramClient`) runs a correct exchange, and the
//!   input rewrites its client-final-message (xor mask, truncation, insertion).
//!   A message that differs from the real one in any byte must be refused.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pglane::auth::secret::ScramSecret;
use pglane::auth::{AuthError, ScramClient, ScramServer};

const PASSWORD: &str = "correct horse";

fn secret() -> ScramSecret {
    // Few iterations: the client side derives keys on every run.
    ScramSecret::from_password(PASSWORD, b"0123456789abcdef", 2)
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else { return };
    if mode % 2 == 0 {
        let (first, fin) = match rest.iter().position(|&b| b == 0xff) {
            Some(i) => (&rest[..i], &rest[i + 1..]),
            None => (rest, &[][..]),
        };
        let mut server = ScramServer::new(secret());
        if let Ok(reply) = server.handle_client_first(first) {
            assert!(reply.starts_with(b"r="));
            let outcome = server.handle_client_final(fin);
            assert!(outcome.is_err(), "a guessed client-final-message was accepted");
            assert!(server.client_key().is_none());
            // Out of order after the end.
            assert!(matches!(server.handle_client_final(fin), Err(AuthError::OutOfOrder(_))));
        }
        assert!(server.handle_client_first(first).is_err(), "a second client-first-message was accepted");
    } else {
        let mut server = ScramServer::new(secret());
        let mut client = ScramClient::new(PASSWORD);
        let server_first = server.handle_client_first(&client.client_first()).expect("real client-first");
        let real = client.handle_server_first(&server_first).expect("real server-first");
        let tampered = tamper(&real, rest);
        let outcome = server.handle_client_final(&tampered);
        if tampered == real {
            let server_final = outcome.expect("the real proof is accepted");
            client.verify_server_final(&server_final).expect("the server proves itself");
        } else {
            assert!(outcome.is_err(), "tampered client-final accepted: {:?}", String::from_utf8_lossy(&tampered));
            assert!(server.client_key().is_none());
        }
    }
});

/// Applies the input to `msg`: byte 0 picks an edit, the rest is its data.
fn tamper(msg: &[u8], edit: &[u8]) -> Vec<u8> {
    let mut out = msg.to_vec();
    let Some((&kind, data)) = edit.split_first() else { return out };
    match kind % 4 {
        0 => {
            for (i, &m) in data.iter().enumerate() {
                if let Some(b) = out.get_mut(i % msg.len()) {
                    *b ^= m;
                }
            }
        }
        1 => out.truncate(data.first().map_or(0, |&n| n as usize % (msg.len() + 1))),
        2 => {
            let at = data.first().map_or(0, |&n| n as usize % (msg.len() + 1));
            let tail = out.split_off(at);
            out.extend_from_slice(data.get(1..).unwrap_or_default());
            out.extend_from_slice(&tail);
        }
        _ => {
            // Replace the proof with the input's bytes.
            if let Some(p) = out.windows(3).rposition(|w| w == b",p=") {
                out.truncate(p + 3);
                out.extend_from_slice(data);
            }
        }
    }
    out
}
