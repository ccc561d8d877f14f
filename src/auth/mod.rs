//! Password authentication for pglane: the pure, synchronous half of
//! PostgreSQL's `md5` and `SCRAM-SHA-256` methods.
//!
//! This module owns:
//! - [`secret`]: how a user's password is stored in configuration (plaintext,
//!   an `md5…` hash or a `SCRAM-SHA-256$…` verifier, exactly as `pg_authid`
//!   stores them) and how to parse and print those forms;
//! - [`hba`]: the rules of an `auth_hba_file` (pg_hba.conf format) and which
//!   one covers a connection;
//! - [`mock`]: the salts shown to users who cannot log in, so they look like
//!   users who can;
//! - [`md5`]: computing and verifying md5 password responses;
//! - [`scram`]: both sides of a SCRAM-SHA-256 exchange — [`ScramServer`]
//!   authenticates a connecting client, [`ScramClient`] authenticates pglane to
//!   a PostgreSQL server.
//!
//! It must never do I/O, touch sockets, read configuration files, log, or frame
//! protocol messages: callers pass in the *payload* of AuthenticationSASL /
//! SASLInitialResponse / SASLResponse / PasswordMessage and get payload bytes
//! back. It must never panic on bytes that came from the network — every
//! malformed input is an [`AuthError`] — and it must never put passwords, keys
//! or hashes into error messages or `Debug` output.

pub mod hba;
pub mod md5;
pub mod mock;
pub mod scram;
pub mod secret;

pub use self::md5::{md5_password_hash, md5_salted_response, verify_md5};
pub use self::scram::{ClientKeys, ScramClient, ScramServer, SCRAM_SHA_256};
pub use self::secret::{ScramSecret, Secret};

/// Everything that can go wrong while authenticating.
///
/// Messages never contain secret material. Most variants describe a malformed
/// or unexpected message from the peer; [`AuthError::WrongPassword`] is the
/// only one that means "the credentials were well-formed but wrong".
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    /// The client's proof (or md5 response) did not match the stored secret.
    #[error("password authentication failed")]
    WrongPassword,
    /// A configured secret looks like an md5 hash or SCRAM verifier but is malformed.
    #[error("invalid stored secret: {0}")]
    InvalidSecret(&'static str),
    /// The stored secret cannot be used with the requested method (an md5
    /// response cannot be checked against a SCRAM verifier, and vice versa).
    #[error(
        "{method} authentication is impossible with a stored {secret} secret; \
         store the password in plaintext or in {method} form"
    )]
    IncompatibleSecret { method: &'static str, secret: &'static str },
    /// A SCRAM message was not valid UTF-8.
    #[error("malformed SCRAM message: not valid UTF-8")]
    NotUtf8,
    /// A SCRAM message violates the RFC 5802 grammar.
    #[error("malformed SCRAM message: {0}")]
    MalformedMessage(&'static str),
    /// A required SCRAM attribute was absent.
    #[error("malformed SCRAM message: attribute '{0}' is missing")]
    MissingAttribute(char),
    /// A SCRAM attribute appeared where a different one was required.
    #[error("malformed SCRAM message: expected attribute '{expected}', found '{found}'")]
    UnexpectedAttribute { expected: char, found: char },
    /// A SCRAM attribute that must be base64 was not (or decoded to the wrong length).
    #[error("malformed SCRAM message: attribute '{0}' is not valid base64 of the expected length")]
    InvalidBase64(char),
    /// The iteration count was not a decimal integer in `1..=u32::MAX`.
    #[error("malformed SCRAM message: invalid iteration count")]
    InvalidIterationCount,
    /// A nonce was empty or contained characters outside printable ASCII.
    #[error("malformed SCRAM message: invalid nonce")]
    InvalidNonce,
    /// The server asked for more PBKDF2 iterations than pglane is willing to
    /// compute on a shard thread (client side only).
    #[error(
        "the server asks for {iterations} SCRAM iterations, above the limit of {max} \
         (server_scram_max_iterations); raise the limit or lower the role's scram_iterations"
    )]
    TooManyIterations { iterations: u32, max: u32 },
    /// The peer's nonce does not extend (client side) or repeat (server side) the agreed nonce.
    #[error("SCRAM nonce mismatch")]
    NonceMismatch,
    /// The peer asked for a SCRAM feature PostgreSQL (and pglane) does not support.
    #[error("unsupported SCRAM feature: {0}")]
    Unsupported(&'static str),
    /// The channel-binding attribute does not echo the gs2 header of the first message.
    #[error("SCRAM channel binding data does not match the gs2 header")]
    ChannelBindingMismatch,
    /// A SCRAM step was called in the wrong order (a caller bug or a confused peer).
    #[error("SCRAM exchange out of order: {0}")]
    OutOfOrder(&'static str),
    /// The server's signature did not prove it knows the secret (client side only).
    #[error("SCRAM server signature does not match; the server could not prove it knows the password")]
    ServerSignatureMismatch,
    /// The server ended the exchange with `e=<error>` (client side only).
    #[error("SCRAM authentication rejected by server: {0}")]
    ServerError(String),
}

impl AuthError {
    /// The SQLSTATE PostgreSQL would report to a client for this failure:
    /// `28P01` (invalid_password) for wrong credentials, `28000`
    /// (invalid_authorization_specification) for unusable configured secrets,
    /// `08P01` (protocol_violation) for everything the peer got wrong.
    #[must_use]
    pub fn sqlstate(&self) -> &'static str {
        match self {
            AuthError::WrongPassword => "28P01",
            AuthError::InvalidSecret(_) | AuthError::IncompatibleSecret { .. } => "28000",
            _ => "08P01",
        }
    }
}

/// Compares two byte strings in time that depends only on their lengths.
///
/// Lengths are not secret here (hashes and keys have fixed sizes), so a length
/// mismatch returns early.
pub(crate) fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let difference = a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y));
    std::hint::black_box(difference) == 0
}

/// Known-good values shared by the tests of all submodules.
#[cfg(test)]
pub(crate) mod test_vectors {
    /// `SET password_encryption = 'scram-sha-256'; CREATE ROLE alice PASSWORD 'correct horse'`
    /// on PostgreSQL 15.18, then `SELECT rolpassword FROM pg_authid`.
    pub const POSTGRES_15_SECRET: &str = "SCRAM-SHA-256$4096:HFQdJ9B7VJITlHV0ZRMVFQ==$\
        ypXbGdn/GoEnpoJK6hGhoAt+5hF5NkeHs+cygh7fFas=:stHA49BSS2CmzjaIe+mH/yzc+Fb6OSgSfkU7s86hUfk=";
    pub const POSTGRES_15_PASSWORD: &str = "correct horse";

    /// RFC 7677 section 3: user "user", password "pencil", 4096 iterations.
    pub const RFC7677_PASSWORD: &str = "pencil";
    pub const RFC7677_SALT: &str = "W22ZaJ0SNY7soEsUEjb6gQ==";
    pub const RFC7677_CLIENT_NONCE: &str = "rOprNGfwEbeRWgbNEkqO";
    pub const RFC7677_SERVER_NONCE: &str = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0";
    pub const RFC7677_CLIENT_FIRST: &str = "n,,n=user,r=rOprNGfwEbeRWgbNEkqO";
    pub const RFC7677_SERVER_FIRST: &str =
        "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096";
    pub const RFC7677_CLIENT_FINAL: &str = "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,\
        p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=";
    pub const RFC7677_SERVER_FINAL: &str = "v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=";
    /// The verifier for the RFC 7677 password and salt, computed with python's
    /// `hashlib.pbkdf2_hmac` and `hmac`.
    pub const RFC7677_SECRET: &str = "SCRAM-SHA-256$4096:W22ZaJ0SNY7soEsUEjb6gQ==$\
        WG5d8oPm3OtcPnkdi4Uo7BkeZkBFzpcXkuLmtbsT4qY=:wfPLwcE6nTWhTAmQ7tl2KeoiWGPlZqQxSrmfPwDl2dU=";
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constant_time_eq_compares_content_and_length() {
        assert!(constant_time_eq(b"", b""));
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"ab"));
    }

    #[test]
    fn sqlstates_follow_postgres() {
        assert_eq!(AuthError::WrongPassword.sqlstate(), "28P01");
        assert_eq!(AuthError::InvalidSecret("x").sqlstate(), "28000");
        assert_eq!(AuthError::NotUtf8.sqlstate(), "08P01");
    }

    #[test]
    fn error_messages_name_the_problem() {
        let err = AuthError::IncompatibleSecret { method: "md5", secret: "SCRAM-SHA-256" };
        assert_eq!(
            err.to_string(),
            "md5 authentication is impossible with a stored SCRAM-SHA-256 secret; \
             store the password in plaintext or in md5 form"
        );
        assert_eq!(AuthError::MissingAttribute('r').to_string(), "malformed SCRAM message: attribute 'r' is missing");
    }
}
