//! PostgreSQL's legacy `md5` password method.
//!
//! Owns the two hash constructions PostgreSQL uses — the stored hash
//! `"md5" + hex(md5(password ++ user))` and the salted response
//! `"md5" + hex(md5(stored_hex ++ salt))` a client sends — and the server-side
//! check of a client's PasswordMessage against a configured [`Secret`].
//! pglane logging in to a server with md5 simply sends
//! `md5_salted_response(&stored_hash, salt)`; knowing the stored hash is enough.
//!
//! Must never do I/O, frame messages, or reveal whether a response was "close";
//! comparisons are constant-time and a malformed response is simply wrong.

use std::borrow::Cow;

use ::md5::{Digest, Md5};

use super::{constant_time_eq, AuthError, Secret};

/// Prefix PostgreSQL puts in front of every md5 hex digest.
pub(crate) const MD5_PREFIX: &str = "md5";

/// The hash PostgreSQL stores in `pg_authid.rolpassword` for md5 users:
/// `"md5" + hex(md5(password ++ user))`.
#[must_use]
pub fn md5_password_hash(user: &str, password: &str) -> String {
    prefixed_md5_hex(&[password.as_bytes(), user.as_bytes()])
}

/// What a client sends in its PasswordMessage for md5 authentication:
/// `"md5" + hex(md5(hex_of_stored_hash ++ salt))`.
///
/// `md5_hash` may be given with or without its `"md5"` prefix. The hex digits
/// are hashed as text, so they must be lowercase, as PostgreSQL produces them.
#[must_use]
pub fn md5_salted_response(md5_hash: &str, salt: [u8; 4]) -> String {
    let hex = md5_hash.strip_prefix(MD5_PREFIX).unwrap_or(md5_hash);
    prefixed_md5_hex(&[hex.as_bytes(), &salt])
}

/// Verifies a client's md5 PasswordMessage payload (without its trailing NUL).
///
/// Plaintext secrets are hashed with `user` first; md5 secrets are used as
/// stored (so they only work for the user name they were created for). A
/// SCRAM verifier cannot check an md5 response and yields
/// [`AuthError::IncompatibleSecret`]. Any malformed response is `Ok(false)`.
pub fn verify_md5(secret: &Secret, user: &str, salt: [u8; 4], response: &[u8]) -> Result<bool, AuthError> {
    let stored_hash: Cow<'_, str> = match secret {
        Secret::Plain(password) => Cow::Owned(md5_password_hash(user, password)),
        Secret::Md5(hash) => Cow::Borrowed(hash),
        Secret::Scram(_) => return Err(AuthError::IncompatibleSecret { method: "md5", secret: secret.kind() }),
    };
    let expected = md5_salted_response(&stored_hash, salt);
    Ok(constant_time_eq(expected.as_bytes(), response))
}

/// `"md5"` followed by the lowercase hex md5 digest of the concatenated parts.
fn prefixed_md5_hex(parts: &[&[u8]]) -> String {
    let mut hasher = Md5::new();
    for part in parts {
        hasher.update(part);
    }
    let digest = hasher.finalize();
    let mut out = String::with_capacity(MD5_PREFIX.len() + 2 * digest.len());
    out.push_str(MD5_PREFIX);
    push_lower_hex(&mut out, &digest);
    out
}

fn push_lower_hex(out: &mut String, bytes: &[u8]) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    for byte in bytes {
        out.push(char::from(DIGITS[usize::from(byte >> 4)]));
        out.push(char::from(DIGITS[usize::from(byte & 0x0f)]));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::ScramSecret;

    const SALT: [u8; 4] = [1, 2, 3, 4];
    // python3 -c "import hashlib;print('md5'+hashlib.md5(b'secretpostgres').hexdigest())"
    const POSTGRES_SECRET_HASH: &str = "md553f48b7c4b76a86ce72276c5755f217d";
    // The same construction salted with [1, 2, 3, 4], computed with python's hashlib.
    const POSTGRES_SECRET_RESPONSE: &str = "md5bb41a296aab6baccb36ff243a562abff";

    #[test]
    fn password_hash_matches_python_hashlib() {
        assert_eq!(md5_password_hash("postgres", "secret"), POSTGRES_SECRET_HASH);
    }

    #[test]
    fn password_hash_matches_postgres_15() {
        // `SET password_encryption = 'md5'; CREATE ROLE bob PASSWORD 'secret'`
        // on PostgreSQL 15, then `SELECT rolpassword FROM pg_authid`.
        assert_eq!(md5_password_hash("bob", "secret"), "md521f3163f8f86fa10bdefbfbd502a8f06");
    }

    #[test]
    fn salted_response_matches_python_hashlib() {
        assert_eq!(md5_salted_response(POSTGRES_SECRET_HASH, SALT), POSTGRES_SECRET_RESPONSE);
    }

    #[test]
    fn salted_response_accepts_hash_without_prefix() {
        let bare = POSTGRES_SECRET_HASH.trim_start_matches("md5");
        assert_eq!(md5_salted_response(bare, SALT), POSTGRES_SECRET_RESPONSE);
    }

    #[test]
    fn verifies_against_plaintext_secret() {
        let secret = Secret::Plain("secret".into());
        let ok = verify_md5(&secret, "postgres", SALT, POSTGRES_SECRET_RESPONSE.as_bytes());
        assert_eq!(ok, Ok(true));
    }

    #[test]
    fn verifies_against_md5_secret() {
        let secret = Secret::Md5(POSTGRES_SECRET_HASH.into());
        let ok = verify_md5(&secret, "postgres", SALT, POSTGRES_SECRET_RESPONSE.as_bytes());
        assert_eq!(ok, Ok(true));
    }

    #[test]
    fn rejects_wrong_password_user_or_salt() {
        let response = POSTGRES_SECRET_RESPONSE.as_bytes();
        let wrong_password = Secret::Plain("Secret".into());
        assert_eq!(verify_md5(&wrong_password, "postgres", SALT, response), Ok(false));
        let right_password = Secret::Plain("secret".into());
        assert_eq!(verify_md5(&right_password, "postgre", SALT, response), Ok(false));
        assert_eq!(verify_md5(&right_password, "postgres", [1, 2, 3, 5], response), Ok(false));
    }

    #[test]
    fn scram_secret_cannot_verify_md5() {
        let secret = Secret::Scram(ScramSecret::from_password("secret", b"salt", 1));
        let err = verify_md5(&secret, "postgres", SALT, POSTGRES_SECRET_RESPONSE.as_bytes());
        assert_eq!(err, Err(AuthError::IncompatibleSecret { method: "md5", secret: "SCRAM-SHA-256" }));
    }

    #[test]
    fn garbage_responses_are_wrong_not_errors() {
        let secret = Secret::Plain("secret".into());
        let with_nul = format!("{POSTGRES_SECRET_RESPONSE}\0");
        let upper = POSTGRES_SECRET_RESPONSE.to_ascii_uppercase();
        let garbage: [&[u8]; 6] =
            [b"", b"md5", &[0xff, 0xfe, 0x00], &POSTGRES_SECRET_RESPONSE.as_bytes()[..34], with_nul.as_bytes(), upper.as_bytes()];
        for response in garbage {
            assert_eq!(verify_md5(&secret, "postgres", SALT, response), Ok(false));
        }
    }
}
