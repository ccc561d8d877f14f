//! How a user's password is stored in pglane's configuration.
//!
//! Owns [`Secret`] — plaintext, an md5 hash, or a SCRAM-SHA-256 verifier — in
//! exactly the text forms PostgreSQL keeps in `pg_authid.rolpassword`, so a
//! value can be copied between the two; and [`ScramSecret`], the parsed
//! verifier, including deriving one from a password.
//!
//! Must never do I/O or decide policy (which method a user gets is the
//! caller's business), and must never print secret material: `Debug` output
//! and error messages are redacted.

use std::fmt;
use std::str::FromStr;

use base64::{engine::general_purpose::STANDARD as BASE64, Engine as _};
use rand::RngCore;

use super::md5::{md5_password_hash, MD5_PREFIX};
use super::scram::{self, KEY_LEN, SCRAM_SHA_256};
use super::{constant_time_eq, AuthError};

/// Iteration count PostgreSQL uses by default (`scram_iterations`).
pub const DEFAULT_SCRAM_ITERATIONS: u32 = 4096;
/// Salt length PostgreSQL uses when it generates a verifier.
pub const DEFAULT_SCRAM_SALT_LEN: usize = 16;

const MD5_HEX_LEN: usize = 32;
const SCRAM_SECRET_PREFIX: &str = "SCRAM-SHA-256$";

/// A user's password as stored in configuration.
#[derive(Clone, PartialEq, Eq)]
pub enum Secret {
    /// The password itself. Works for every method.
    Plain(String),
    /// `"md5"` + 32 lowercase hex digits, bound to one user name. Works for md5 only.
    Md5(String),
    /// A SCRAM-SHA-256 verifier. Works for SCRAM-SHA-256 only.
    Scram(ScramSecret),
}

impl Secret {
    /// Parses a stored secret the way PostgreSQL classifies `rolpassword`:
    ///
    /// - `md5<32 hex digits>` → [`Secret::Md5`] (hex normalised to lowercase);
    /// - `SCRAM-SHA-256$<iter>:<b64 salt>$<b64 StoredKey>:<b64 ServerKey>` → [`Secret::Scram`];
    /// - anything else → [`Secret::Plain`].
    ///
    /// Unlike PostgreSQL, a string that *looks like* one of the hashed forms
    /// but is malformed — `SCRAM-SHA-256$…` that does not parse, `md5`
    /// followed by 32 characters that are not all hex, or `md5` followed by
    /// hex digits of the wrong length — is an error rather than silently
    /// becoming a plaintext password (it is almost certainly a truncated or
    /// mangled hash). A plaintext password of that shape has to be stored in
    /// SCRAM form instead.
    pub fn parse(s: &str) -> Result<Secret, AuthError> {
        if let Some(body) = s.strip_prefix(SCRAM_SECRET_PREFIX) {
            return ScramSecret::parse_body(body).map(Secret::Scram);
        }
        if let Some(hex) = s.strip_prefix(MD5_PREFIX) {
            if looks_like_md5_hex(hex) {
                return parse_md5_hex(hex).map(Secret::Md5);
            }
        }
        Ok(Secret::Plain(s.to_owned()))
    }

    /// The password, if it is stored in plaintext.
    #[must_use]
    pub fn plaintext(&self) -> Option<&str> {
        match self {
            Secret::Plain(password) => Some(password),
            Secret::Md5(_) | Secret::Scram(_) => None,
        }
    }

    /// Checks a password a client sent in clear (the `password` method):
    /// compared as stored, hashed with `user` for an md5 secret, or derived
    /// with the verifier's salt and count (a PBKDF2 run) for a SCRAM secret.
    #[must_use]
    pub fn matches_password(&self, user: &str, password: &str) -> bool {
        match self {
            Secret::Plain(stored) => constant_time_eq(stored.as_bytes(), password.as_bytes()),
            Secret::Md5(hash) => constant_time_eq(hash.as_bytes(), md5_password_hash(user, password).as_bytes()),
            Secret::Scram(verifier) => {
                let derived = ScramSecret::from_password(password, &verifier.salt, verifier.iterations);
                constant_time_eq(&derived.stored_key, &verifier.stored_key)
            }
        }
    }

    /// A short, non-secret name of the storage form, for messages.
    #[must_use]
    pub fn kind(&self) -> &'static str {
        match self {
            Secret::Plain(_) => "plaintext",
            Secret::Md5(_) => "md5",
            Secret::Scram(_) => SCRAM_SHA_256,
        }
    }
}

impl FromStr for Secret {
    type Err = AuthError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Secret::parse(s)
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Secret::Plain(_) => f.write_str("Plain(<redacted>)"),
            Secret::Md5(_) => f.write_str("Md5(<redacted>)"),
            Secret::Scram(scram) => f.debug_tuple("Scram").field(scram).finish(),
        }
    }
}

/// A hex string after `"md5"` that is meant to be an md5 hash: exactly hash
/// length, or nothing but hex digits.
fn looks_like_md5_hex(hex: &str) -> bool {
    hex.len() == MD5_HEX_LEN || (!hex.is_empty() && hex.bytes().all(|b| b.is_ascii_hexdigit()))
}

fn parse_md5_hex(hex: &str) -> Result<String, AuthError> {
    if hex.len() != MD5_HEX_LEN || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(AuthError::InvalidSecret("an md5 secret must be \"md5\" followed by exactly 32 hex digits"));
    }
    // The hex text itself is hashed into md5 responses, so its case matters.
    Ok(format!("{MD5_PREFIX}{}", hex.to_ascii_lowercase()))
}

/// A parsed SCRAM-SHA-256 verifier, as in
/// `SCRAM-SHA-256$<iterations>:<salt>$<StoredKey>:<ServerKey>`.
///
/// `StoredKey` lets a server check a client's proof; `ServerKey` lets it prove
/// itself to the client. Neither reveals the password, but both are secret:
/// whoever holds `ServerKey` can impersonate the server.
#[derive(Clone, PartialEq, Eq)]
pub struct ScramSecret {
    pub iterations: u32,
    pub salt: Vec<u8>,
    pub stored_key: [u8; 32],
    pub server_key: [u8; 32],
}

impl ScramSecret {
    /// Derives the verifier PostgreSQL would store for `password`.
    ///
    /// SaltedPassword is PBKDF2-HMAC-SHA-256 (`Hi()` in RFC 5802). SASLprep is
    /// not applied: the password bytes are used as given. That equals
    /// PostgreSQL's behaviour for ASCII passwords and for any password on which
    /// its SASLprep fails; a non-ASCII password that SASLprep would *change*
    /// (e.g. one not in NFKC form) yields a different verifier than PostgreSQL's.
    ///
    /// `salt` should be non-empty (PostgreSQL uses 16 random bytes) or the
    /// result will not round-trip through [`Secret::parse`]. An `iterations`
    /// of 0 is treated as 1. Cost is linear in `iterations`: with the default
    /// 4096 expect around a millisecond of CPU in release builds.
    #[must_use]
    pub fn from_password(password: &str, salt: &[u8], iterations: u32) -> ScramSecret {
        let iterations = iterations.max(1);
        let salted_password = scram::salted_password(password.as_bytes(), salt, iterations);
        let client_key = scram::client_key(&salted_password);
        ScramSecret {
            iterations,
            salt: salt.to_vec(),
            stored_key: scram::stored_key(&client_key),
            server_key: scram::server_key(&salted_password),
        }
    }

    /// Derives a verifier with a fresh random salt and PostgreSQL's defaults
    /// (16-byte salt, 4096 iterations). Convert plaintext passwords once with
    /// this at configuration load instead of on every connection.
    #[must_use]
    pub fn generate(password: &str) -> ScramSecret {
        let mut salt = [0u8; DEFAULT_SCRAM_SALT_LEN];
        rand::thread_rng().fill_bytes(&mut salt);
        ScramSecret::from_password(password, &salt, DEFAULT_SCRAM_ITERATIONS)
    }

    /// The `pg_authid` text form; the inverse of [`Secret::parse`].
    #[must_use]
    pub fn to_postgres_string(&self) -> String {
        format!(
            "{SCRAM_SECRET_PREFIX}{}:{}${}:{}",
            self.iterations,
            BASE64.encode(&self.salt),
            BASE64.encode(self.stored_key),
            BASE64.encode(self.server_key),
        )
    }

    /// Parses what follows `SCRAM-SHA-256$`: `<iter>:<salt>$<StoredKey>:<ServerKey>`.
    /// `$` and `:` are not base64 characters, so splitting on them is unambiguous.
    fn parse_body(body: &str) -> Result<ScramSecret, AuthError> {
        const SHAPE: &str = "a SCRAM secret must look like SCRAM-SHA-256$<iterations>:<salt>$<StoredKey>:<ServerKey>";
        let (parameters, keys) = body.split_once('$').ok_or(AuthError::InvalidSecret(SHAPE))?;
        let (iterations, salt) = parameters.split_once(':').ok_or(AuthError::InvalidSecret(SHAPE))?;
        let (stored_key, server_key) = keys.split_once(':').ok_or(AuthError::InvalidSecret(SHAPE))?;
        Ok(ScramSecret {
            iterations: scram::parse_iteration_count(iterations)
                .map_err(|_| AuthError::InvalidSecret("SCRAM iteration count must be an integer in 1..=4294967295"))?,
            salt: decode_salt(salt)?,
            stored_key: decode_key(stored_key, "SCRAM StoredKey must be base64 of 32 bytes")?,
            server_key: decode_key(server_key, "SCRAM ServerKey must be base64 of 32 bytes")?,
        })
    }
}

impl fmt::Debug for ScramSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ScramSecret")
            .field("iterations", &self.iterations)
            .field("salt", &BASE64.encode(&self.salt))
            .field("stored_key", &"<redacted>")
            .field("server_key", &"<redacted>")
            .finish()
    }
}

fn decode_salt(text: &str) -> Result<Vec<u8>, AuthError> {
    match BASE64.decode(text) {
        Ok(salt) if !salt.is_empty() => Ok(salt),
        _ => Err(AuthError::InvalidSecret("SCRAM salt must be non-empty base64")),
    }
}

fn decode_key(text: &str, problem: &'static str) -> Result<[u8; KEY_LEN], AuthError> {
    BASE64.decode(text).ok().and_then(|bytes| <[u8; KEY_LEN]>::try_from(bytes).ok()).ok_or(AuthError::InvalidSecret(problem))
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::auth::test_vectors::{POSTGRES_15_PASSWORD, POSTGRES_15_SECRET, RFC7677_SALT, RFC7677_SECRET};

    fn scram(secret: Secret) -> ScramSecret {
        match secret {
            Secret::Scram(scram) => scram,
            other => panic!("expected a SCRAM secret, got {other:?}"),
        }
    }

    #[test]
    fn parses_postgres_scram_secret_and_prints_it_back() {
        let parsed = scram(Secret::parse(POSTGRES_15_SECRET).expect("valid secret"));
        assert_eq!(parsed.iterations, 4096);
        assert_eq!(parsed.salt.len(), 16);
        assert_eq!(parsed.to_postgres_string(), POSTGRES_15_SECRET);
    }

    #[test]
    fn from_password_reproduces_postgres_verifier() {
        let parsed = scram(Secret::parse(POSTGRES_15_SECRET).expect("valid secret"));
        let derived = ScramSecret::from_password(POSTGRES_15_PASSWORD, &parsed.salt, parsed.iterations);
        assert_eq!(derived, parsed);
    }

    #[test]
    fn from_password_matches_python_pbkdf2() {
        let salt = BASE64.decode(RFC7677_SALT).expect("valid base64");
        let derived = ScramSecret::from_password("pencil", &salt, 4096);
        assert_eq!(derived.to_postgres_string(), RFC7677_SECRET);
    }

    #[test]
    fn zero_iterations_are_clamped_to_one() {
        let secret = ScramSecret::from_password("pw", b"salt", 0);
        assert_eq!(secret.iterations, 1);
        assert_eq!(secret, ScramSecret::from_password("pw", b"salt", 1));
    }

    #[test]
    fn generate_uses_postgres_defaults_and_round_trips() {
        let secret = ScramSecret::generate("pw");
        assert_eq!(secret.iterations, DEFAULT_SCRAM_ITERATIONS);
        assert_eq!(secret.salt.len(), DEFAULT_SCRAM_SALT_LEN);
        let reparsed = scram(Secret::parse(&secret.to_postgres_string()).expect("round trip"));
        assert_eq!(reparsed, secret);
        assert_ne!(ScramSecret::generate("pw").salt, secret.salt);
    }

    #[test]
    fn parses_md5_and_normalises_case() {
        assert_eq!(
            Secret::parse("md553F48B7C4B76A86CE72276C5755F217D"),
            Ok(Secret::Md5("md553f48b7c4b76a86ce72276c5755f217d".into()))
        );
    }

    #[test]
    fn everything_else_is_plaintext() {
        for text in ["", "secret", "md5", "md5isgreat", "SCRAM-SHA-256", "scram-sha-256$x", "md5 53f4"] {
            assert_eq!(Secret::parse(text), Ok(Secret::Plain(text.into())), "{text:?}");
        }
        let plain: Secret = "hunter2".parse().expect("plaintext");
        assert_eq!(plain.plaintext(), Some("hunter2"));
        assert_eq!(plain.kind(), "plaintext");
    }

    #[test]
    fn only_plain_secrets_have_plaintext() {
        let md5 = Secret::parse("md553f48b7c4b76a86ce72276c5755f217d").expect("md5");
        assert_eq!(md5.plaintext(), None);
        assert_eq!(md5.kind(), "md5");
        let scram = Secret::parse(POSTGRES_15_SECRET).expect("scram");
        assert_eq!(scram.plaintext(), None);
        assert_eq!(scram.kind(), "SCRAM-SHA-256");
    }

    #[test]
    fn malformed_md5_looking_secrets_are_errors() {
        for text in [
            "md553f48b7c4b76a86ce72276c5755f217",   // 31 hex digits
            "md553f48b7c4b76a86ce72276c5755f217d0", // 33 hex digits
            "md553f48b7c4b76a86ce72276c5755f217g",  // 32 chars, one not hex
            "md5123",
        ] {
            assert!(matches!(Secret::parse(text), Err(AuthError::InvalidSecret(_))), "{text:?}");
        }
    }

    #[test]
    fn malformed_scram_secrets_are_errors() {
        let stored = "WG5d8oPm3OtcPnkdi4Uo7BkeZkBFzpcXkuLmtbsT4qY=";
        let server = "wfPLwcE6nTWhTAmQ7tl2KeoiWGPlZqQxSrmfPwDl2dU=";
        let cases = [
            String::from("SCRAM-SHA-256$"),
            String::from("SCRAM-SHA-256$4096"),
            String::from("SCRAM-SHA-256$4096:c2FsdA=="),
            String::from("SCRAM-SHA-256$4096:c2FsdA==$"),
            format!("SCRAM-SHA-256$4096:c2FsdA==${stored}"),
            format!("SCRAM-SHA-256$4096:c2FsdA==${stored}:"),
            format!("SCRAM-SHA-256$:c2FsdA==${stored}:{server}"),
            format!("SCRAM-SHA-256$0:c2FsdA==${stored}:{server}"),
            format!("SCRAM-SHA-256$-1:c2FsdA==${stored}:{server}"),
            format!("SCRAM-SHA-256$+4096:c2FsdA==${stored}:{server}"),
            format!("SCRAM-SHA-256$4294967296:c2FsdA==${stored}:{server}"),
            format!("SCRAM-SHA-256${}:c2FsdA==${stored}:{server}", "9".repeat(10_000)),
            format!("SCRAM-SHA-256$4096:${stored}:{server}"),
            format!("SCRAM-SHA-256$4096:c2FsdA=${stored}:{server}"),
            format!("SCRAM-SHA-256$4096:c2F!dA==${stored}:{server}"),
            format!("SCRAM-SHA-256$4096:c2FsdA==$c2FsdA==:{server}"),
            format!("SCRAM-SHA-256$4096:c2FsdA==${stored}:{server}$"),
            format!("SCRAM-SHA-256$4096:c2FsdA==${stored}:{server}:"),
            format!("SCRAM-SHA-256$4096:c2FsdA==${stored}:{server} "),
            format!("SCRAM-SHA-256$4096:c2FsdA==${stored}:{server}\n"),
            format!("SCRAM-SHA-256$4096:c2FsdA==$:{server}"),
            String::from("SCRAM-SHA-256$4096:c2FsdA==$\u{e9}:\u{e9}"),
        ];
        for text in &cases {
            assert!(matches!(Secret::parse(text), Err(AuthError::InvalidSecret(_))), "{text:?}");
        }
    }

    #[test]
    fn errors_do_not_leak_the_secret() {
        let text = "SCRAM-SHA-256$4096:c2FsdA==$WG5d8oPm3OtcPnkdi4Uo7BkeZkBFzpcXkuLmtbsT4qY=:short";
        let message = Secret::parse(text).expect_err("invalid").to_string();
        assert!(!message.contains("WG5d8"), "{message}");
    }

    #[test]
    fn debug_output_is_redacted() {
        let plain = format!("{:?}", Secret::Plain("hunter2".into()));
        assert!(!plain.contains("hunter2"), "{plain}");
        let md5 = format!("{:?}", Secret::parse("md553f48b7c4b76a86ce72276c5755f217d").expect("md5"));
        assert!(!md5.contains("53f48"), "{md5}");
        let scram = format!("{:?}", Secret::parse(RFC7677_SECRET).expect("scram"));
        assert!(!scram.contains("WG5d8") && !scram.contains("wfPLw"), "{scram}");
        assert!(scram.contains("4096"), "{scram}");
    }

    #[test]
    fn cleartext_passwords_are_checked_against_every_form() {
        let scram = Secret::Scram(ScramSecret::from_password("pw", b"salt", 2));
        for secret in [Secret::Plain("pw".into()), Secret::Md5(md5_password_hash("alice", "pw")), scram] {
            assert!(secret.matches_password("alice", "pw"), "{}", secret.kind());
            assert!(!secret.matches_password("alice", "pw2"), "{}", secret.kind());
            assert!(!secret.matches_password("alice", ""), "{}", secret.kind());
        }
        // An md5 secret is bound to its user name.
        assert!(!Secret::Md5(md5_password_hash("alice", "pw")).matches_password("bob", "pw"));
    }
}
