//! Checking a client's password: the server side of trust, password (clear
//! text), md5 and SCRAM-SHA-256 logins.
//!
//! This file owns the message exchange on the client's socket and the rule
//! that decides which exchange a (method, stored secret) pair gets. It never
//! looks secrets up (the caller passes what the config or auth_query found)
//! and the cryptography lives in `crate::auth`.
//!
//! A user who cannot log in — unknown, without a password, or whose stored
//! secret cannot check this method — goes through the same exchange as one who
//! can, with a mock salt (`crate::auth::mock`), and fails with the same
//! message as a wrong password, as PostgreSQL does: what a client sees before
//! it proves a password never says whether the user exists.

use bytes::BytesMut;
use futures_lite::AsyncWriteExt;
use tracing::warn;

use super::SessionError;
use crate::auth::hba::{self, HbaMethod};
use crate::auth::md5::verify_md5;
use crate::auth::mock;
use crate::auth::scram::{ClientKeys, ScramServer, SCRAM_SHA_256};
use crate::auth::secret::{ScramSecret, Secret};
use crate::config::{AuthType, Config};
use crate::net::{read_message, ReadError, Stream};
use crate::protocol::backend::{self, ErrorFields};
use crate::protocol::frontend;
use crate::runtime::Shard;

/// Largest password or SASL message accepted.
const MAX_AUTH_MESSAGE: usize = 8192;

/// How a client proves who it is: `auth_type`, or the method of the
/// matching `auth_hba_file` line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    Trust,
    /// The password in clear (AuthenticationCleartextPassword).
    Password,
    /// md5, or SCRAM-SHA-256 for a user whose secret is a SCRAM verifier
    /// (PostgreSQL's rule).
    Md5,
    ScramSha256,
}

/// The method `config` asks of this connection: `auth_type`, or under
/// `auth_type = "hba"` the method of the first covering auth_hba_file line.
/// No covering line, or a `reject` one, refuses the connection as PostgreSQL
/// does (28000), before any password is asked for.
pub fn method_for(config: &Config, client: &hba::Client<'_>) -> Result<Method, SessionError> {
    let refuse = |message: String| SessionError::Refused(ErrorFields::fatal("28000", message));
    Ok(match config.auth_type {
        AuthType::Trust => Method::Trust,
        AuthType::Md5 => Method::Md5,
        AuthType::ScramSha256 => Method::ScramSha256,
        AuthType::Hba => {
            let rule = config.hba.get().and_then(|hba| hba.decide(client));
            match rule.map(|rule| rule.method) {
                None => return Err(refuse(hba::no_entry_message(client))),
                Some(HbaMethod::Reject) => return Err(refuse(hba::rejected_message(client))),
                Some(HbaMethod::Trust) => Method::Trust,
                Some(HbaMethod::Password) => Method::Password,
                Some(HbaMethod::Md5) => Method::Md5,
                Some(HbaMethod::ScramSha256) => Method::ScramSha256,
            }
        }
    })
}

/// What a successful login leaves behind: what the client revealed that
/// lets pglane log in to the server as this user (auth_query users, whose
/// password pglane does not otherwise know). Password-equivalent; never printed.
#[derive(Debug, Default)]
pub struct Verified {
    /// After a SCRAM login: the client's ClientKey and the verifier's ServerKey.
    pub scram_keys: Option<ClientKeys>,
    /// After a `password` login: the password.
    pub password: Option<Password>,
}

/// A password a client sent in clear; `Debug` does not show it.
pub struct Password(pub String);

impl std::fmt::Debug for Password {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Password(..)")
    }
}

/// The exchange a login gets.
enum Exchange {
    Accept,
    Cleartext(Option<Secret>),
    Md5(Option<Secret>),
    /// `genuine` is false for a mock verifier: the login fails whatever the
    /// client sends.
    Scram {
        verifier: ScramSecret,
        genuine: bool,
    },
}

/// Picks the exchange for `method` and the user's stored secret, if any.
/// `plain_verifier` turns a plaintext password into the verifier SCRAM checks
/// it with (cached by the caller: it costs a PBKDF2 run).
fn exchange_for(
    method: Method,
    user: &str,
    secret: Option<&Secret>,
    iterations: u32,
    plain_verifier: impl FnOnce(&str) -> ScramSecret,
) -> Exchange {
    match (method, secret) {
        (Method::Trust, _) => Exchange::Accept,
        (Method::Password, secret) => Exchange::Cleartext(secret.cloned()),
        (Method::Md5, Some(Secret::Scram(verifier))) | (Method::ScramSha256, Some(Secret::Scram(verifier))) => {
            Exchange::Scram { verifier: verifier.clone(), genuine: true }
        }
        (Method::Md5, secret) => Exchange::Md5(secret.cloned()),
        (Method::ScramSha256, Some(Secret::Plain(password))) => {
            Exchange::Scram { verifier: plain_verifier(password), genuine: true }
        }
        (Method::ScramSha256, Some(Secret::Md5(_))) => {
            warn!(%user, "user has an md5 secret, which cannot check a SCRAM-SHA-256 login; the login will fail");
            Exchange::Scram { verifier: mock::scram_secret(user, iterations), genuine: false }
        }
        (Method::ScramSha256, None) => Exchange::Scram { verifier: mock::scram_secret(user, iterations), genuine: false },
    }
}

/// Authenticates `user` by `method` against `secret` (None: the user cannot
/// log in, which the client learns only after its password) and sends
/// AuthenticationOk, or fails with the ErrorResponse PostgreSQL would send.
/// SCRAM verifiers pglane makes (from a plaintext password, or a mock one)
/// have `scram_iterations`.
pub async fn authenticate(
    shard: &Shard,
    stream: &mut Stream,
    pending: &mut BytesMut,
    method: Method,
    user: &str,
    secret: Option<&Secret>,
    scram_iterations: u32,
) -> Result<Verified, SessionError> {
    let exchange =
        exchange_for(method, user, secret, scram_iterations, |password| shard.scram_secret(user, password, scram_iterations));
    let verified = match exchange {
        Exchange::Accept => Verified::default(),
        Exchange::Cleartext(secret) => {
            let password = cleartext(stream, pending, secret.as_ref(), user).await?;
            Verified { password: Some(Password(password)), ..Verified::default() }
        }
        Exchange::Md5(secret) => {
            md5(stream, pending, secret.as_ref(), user).await?;
            Verified::default()
        }
        Exchange::Scram { verifier, genuine } => {
            let server_key = verifier.server_key;
            let client_key = scram(stream, pending, ScramServer::new(verifier), user).await?;
            if !genuine {
                return Err(wrong_password(user));
            }
            Verified { scram_keys: Some(ClientKeys { client_key, server_key }), ..Verified::default() }
        }
    };
    let mut out = BytesMut::new();
    backend::authentication_ok(&mut out);
    stream.write_all(&out).await?;
    Ok(verified)
}

/// PostgreSQL's answer to a wrong password, and to every other login that
/// must not say more.
pub fn wrong_password(user: &str) -> SessionError {
    SessionError::Refused(ErrorFields::fatal("28P01", format!("password authentication failed for user \"{user}\"")))
}

/// Asks for the password in clear and returns it if it matches.
async fn cleartext(
    stream: &mut Stream,
    pending: &mut BytesMut,
    secret: Option<&Secret>,
    user: &str,
) -> Result<String, SessionError> {
    let mut out = BytesMut::new();
    backend::authentication_cleartext_password(&mut out);
    stream.write_all(&out).await?;
    let body = read_password_message(stream, pending).await?;
    let password = std::str::from_utf8(frontend::decode_password(&body)?).unwrap_or_default();
    match secret {
        Some(secret) if !password.is_empty() && secret.matches_password(user, password) => Ok(password.to_owned()),
        _ => Err(wrong_password(user)),
    }
}

async fn md5(stream: &mut Stream, pending: &mut BytesMut, secret: Option<&Secret>, user: &str) -> Result<(), SessionError> {
    let salt: [u8; 4] = rand::random();
    let mut out = BytesMut::new();
    backend::authentication_md5(&mut out, salt);
    stream.write_all(&out).await?;
    let body = read_password_message(stream, pending).await?;
    let response = frontend::decode_password(&body)?;
    match secret.map(|secret| verify_md5(secret, user, salt, response)) {
        Some(Ok(true)) => Ok(()),
        _ => Err(wrong_password(user)),
    }
}

/// Runs the exchange to its end; the ClientKey the client proved.
async fn scram(
    stream: &mut Stream,
    pending: &mut BytesMut,
    mut server: ScramServer,
    user: &str,
) -> Result<[u8; 32], SessionError> {
    let mut out = BytesMut::new();
    backend::authentication_sasl(&mut out, &[SCRAM_SHA_256]);
    stream.write_all(&out).await?;

    let body = read_password_message(stream, pending).await?;
    let (mechanism, first) = frontend::decode_sasl_initial_response(&body)?;
    if mechanism != SCRAM_SHA_256 {
        return Err(SessionError::Refused(ErrorFields::fatal(
            "28000",
            format!("client selected an invalid SASL authentication mechanism \"{mechanism}\""),
        )));
    }
    let server_first = server.handle_client_first(first).map_err(|_| wrong_password(user))?;
    out.clear();
    backend::authentication_sasl_continue(&mut out, &server_first);
    stream.write_all(&out).await?;

    let body = read_password_message(stream, pending).await?;
    let server_final = server.handle_client_final(&body).map_err(|_| wrong_password(user))?;
    let client_key = server.client_key().ok_or_else(|| wrong_password(user))?;
    out.clear();
    backend::authentication_sasl_final(&mut out, &server_final);
    stream.write_all(&out).await?;
    Ok(client_key)
}

/// The client's next message, read through `pending` (what it sent after
/// stays there, for the session).
async fn read_password_message(stream: &mut Stream, pending: &mut BytesMut) -> Result<bytes::Bytes, SessionError> {
    let m = read_message(stream, pending, MAX_AUTH_MESSAGE).await.map_err(|e| match e {
        ReadError::Io(e) => SessionError::ClientIo(e),
        ReadError::Protocol(e) => SessionError::ClientProtocol(e),
        ReadError::Closed => SessionError::ClientClosed,
    })?;
    if m.tag != frontend::PASSWORD {
        return Err(SessionError::Refused(ErrorFields::fatal(
            "08P01",
            format!("expected password response, got message type {}", m.tag),
        )));
    }
    Ok(m.body)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kind(e: &Exchange) -> String {
        match e {
            Exchange::Accept => "accept".into(),
            Exchange::Cleartext(s) => format!("cleartext {}", s.as_ref().map_or("none", Secret::kind)),
            Exchange::Md5(s) => format!("md5 {}", s.as_ref().map_or("none", Secret::kind)),
            Exchange::Scram { genuine, .. } => format!("scram {}", if *genuine { "genuine" } else { "mock" }),
        }
    }

    #[test]
    fn each_method_and_secret_gets_postgres_exchange() {
        let plain = Secret::Plain("pw".into());
        let md5 = Secret::Md5(crate::auth::md5_password_hash("alice", "pw"));
        let scram = Secret::Scram(ScramSecret::from_password("pw", b"salt", 2));
        let verifier = |_: &str| ScramSecret::from_password("pw", b"salt", 2);
        let cases: [(Method, Option<&Secret>, &str); 12] = [
            (Method::Trust, None, "accept"),
            (Method::Trust, Some(&scram), "accept"),
            (Method::Password, Some(&md5), "cleartext md5"),
            (Method::Password, None, "cleartext none"),
            (Method::Md5, Some(&plain), "md5 plaintext"),
            (Method::Md5, Some(&md5), "md5 md5"),
            // PostgreSQL: md5 with a SCRAM verifier does SCRAM.
            (Method::Md5, Some(&scram), "scram genuine"),
            (Method::Md5, None, "md5 none"),
            (Method::ScramSha256, Some(&plain), "scram genuine"),
            (Method::ScramSha256, Some(&scram), "scram genuine"),
            // Cannot work, but looks the same until the end.
            (Method::ScramSha256, Some(&md5), "scram mock"),
            (Method::ScramSha256, None, "scram mock"),
        ];
        for (method, secret, want) in cases {
            assert_eq!(kind(&exchange_for(method, "alice", secret, 4096, verifier)), want, "{method:?} {secret:?}");
        }
    }

    #[test]
    fn an_unknown_user_is_shown_the_salt_a_plaintext_user_would_be() {
        let Exchange::Scram { verifier: mock, .. } = exchange_for(Method::ScramSha256, "alice", None, 10, |_| unreachable!())
        else {
            panic!("scram expected")
        };
        let real = mock::scram_secret_for_password("alice", "pw", 10);
        assert_eq!((mock.salt, mock.iterations), (real.salt, real.iterations));
    }
}
