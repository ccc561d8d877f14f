//! SCRAM-SHA-256, client side (`ScramClient`: pglane logging in to a server).
//! What a server sends is untrusted too: a hostile or broken "PostgreSQL"
//! must not crash pglane.
//!
//! The input, split at the first 0xff byte, is the server-first and
//! server-final messages; "@N" in the first is replaced by the client's own
//! nonce, so the fuzzer can get past the nonce check. Iteration counts above
//! 64 are skipped to keep runs fast (the count is a plain loop bound; see
//! FUZZING.md for what a huge one means). Checked: no panic; without the
//! password no server-final-message is accepted; a tampered final message of
//! a real exchange is refused.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pglane::auth::secret::ScramSecret;
use pglane::auth::{ScramClient, ScramServer};

fuzz_target!(|data: &[u8]| {
    let (first, fin) = match data.iter().position(|&b| b == 0xff) {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &[][..]),
    };
    let mut client = ScramClient::new("pencil");
    let client_first = String::from_utf8(client.client_first()).unwrap();
    let nonce = client_first.rsplit_once("r=").unwrap().1.to_owned();
    let Ok(first) = std::str::from_utf8(first) else {
        assert!(client.handle_server_first(first).is_err());
        return;
    };
    if big_iterations(first) {
        return;
    }
    let first = first.replace("@N", &nonce);
    match client.handle_server_first(first.as_bytes()) {
        Ok(reply) => {
            let reply = String::from_utf8(reply).expect("ASCII reply");
            assert!(reply.starts_with("c=biws,r=") && reply.contains(",p="));
            // The fuzzer does not know the server's keys for this exchange.
            assert!(client.verify_server_final(fin).is_err(), "a guessed server signature was accepted");
        }
        Err(_) => assert!(client.verify_server_final(fin).is_err()),
    }

    // A real exchange whose server-final the input rewrites.
    let secret = ScramSecret::from_password("pencil", b"salt", 3);
    let mut server = ScramServer::new(secret);
    let mut client = ScramClient::new("pencil");
    let sf = server.handle_client_first(&client.client_first()).unwrap();
    let cf = client.handle_server_first(&sf).unwrap();
    let real = server.handle_client_final(&cf).unwrap();
    if fin != real.as_slice() {
        assert!(client.verify_server_final(fin).is_err());
    }
    let mut flipped = real.clone();
    if let Some(b) = flipped.get_mut(fin.first().map_or(3, |&i| 2 + i as usize % (real.len() - 2))) {
        *b ^= fin.get(1).copied().unwrap_or(1).max(1);
        if flipped != real {
            assert!(client.verify_server_final(&flipped).is_err());
        }
    }
    client.verify_server_final(&real).expect("the real signature is accepted");
});

/// Does any `i=` attribute ask for more than 64 iterations?
fn big_iterations(msg: &str) -> bool {
    msg.split(',').any(|a| a.strip_prefix("i=").is_some_and(|v| v.len() > 2 || v.parse::<u32>().map_or(false, |n| n > 64)))
}
