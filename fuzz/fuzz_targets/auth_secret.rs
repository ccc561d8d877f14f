//! Stored secrets (`Secret::parse`: plaintext, md5 hash, SCRAM verifier, as in
//! pg_authid and auth_file) and the md5 check of a client's response.
//!
//! Checked: no panic; a parsed SCRAM verifier prints back to a string that
//! parses to the same verifier; an md5 secret is normalised to "md5" + 32
//! lowercase hex digits; `Debug` never shows the secret; verify_md5 accepts
//! exactly the one right response for the salt and nothing else.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pglane::auth::md5::{md5_password_hash, md5_salted_response, verify_md5};
use pglane::auth::secret::Secret;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    match Secret::parse(text) {
        Ok(Secret::Scram(scram)) => {
            let printed = scram.to_postgres_string();
            assert_eq!(Secret::parse(&printed).expect("printed verifier parses"), Secret::Scram(scram.clone()));
            assert!(scram.iterations >= 1 && !scram.salt.is_empty());
            let debug = format!("{:?}", Secret::Scram(scram));
            assert!(!debug.contains(&printed), "Debug shows the verifier");
        }
        Ok(Secret::Md5(hash)) => {
            assert_eq!(hash.len(), 35);
            assert!(hash.starts_with("md5") && hash[3..].bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')));
            assert!(text.eq_ignore_ascii_case(&hash));
            check_md5(&Secret::Md5(hash.clone()), "alice", &hash, data);
        }
        Ok(Secret::Plain(password)) => {
            assert_eq!(password, text);
            assert_eq!(Secret::parse(text).unwrap().plaintext(), Some(text));
            assert_eq!(format!("{:?}", Secret::Plain(password.clone())), "Plain(<redacted>)");
            let user = "alice";
            check_md5(&Secret::Plain(password.clone()), user, &md5_password_hash(user, &password), data);
        }
        // Error messages are fixed strings (AuthError::InvalidSecret(&'static str)).
        Err(e) => assert_eq!(e.sqlstate(), "28000"),
    }
});

/// The right response passes; the fuzz input as a response passes only if it
/// is exactly the right one.
fn check_md5(secret: &Secret, user: &str, stored: &str, response: &[u8]) {
    let salt = [1, 2, 3, 4];
    let right = md5_salted_response(stored, salt);
    assert_eq!(verify_md5(secret, user, salt, right.as_bytes()), Ok(true));
    assert_eq!(verify_md5(secret, user, salt, response), Ok(response == right.as_bytes()));
    // The same response under another salt fails: a captured response cannot be replayed.
    assert_eq!(verify_md5(secret, user, [4, 3, 2, 1], right.as_bytes()), Ok(false));
}
