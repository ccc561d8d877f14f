//! Checking a client's password: the server side of trust, md5 and
//! SCRAM-SHA-256 logins, against the users in pglane's config.
//!
//! The cryptography lives in `crate::auth`; this file only runs the message
//! exchange on the client's socket.

use bytes::BytesMut;
use futures_lite::AsyncWriteExt;

use super::SessionError;
use crate::auth::md5::verify_md5;
use crate::auth::scram::{ScramServer, SCRAM_SHA_256};
use crate::auth::secret::Secret;
use crate::config::{AuthType, Config};
use crate::net::{read_message, ReadError, Stream};
use crate::protocol::backend::{self, ErrorFields};
use crate::protocol::frontend;
use crate::runtime::Shard;

/// Largest password or SASL message accepted.
const MAX_AUTH_MESSAGE: usize = 8192;

/// Authenticates `user` and sends AuthenticationOk, or fails with the
/// ErrorResponse PostgreSQL would send.
pub async fn authenticate(shard: &Shard, stream: &mut Stream, config: &Config, user: &str) -> Result<(), SessionError> {
    let secret = config.users.get(user).and_then(|u| u.password.as_deref()).and_then(|p| Secret::parse(p).ok());
    match config.auth_type {
        AuthType::Trust => {}
        AuthType::Md5 => md5(stream, secret.as_ref().ok_or_else(|| wrong_password(user))?, user).await?,
        AuthType::ScramSha256 => {
            let server = match secret {
                Some(Secret::Scram(s)) => ScramServer::new(s),
                Some(Secret::Plain(p)) => ScramServer::new(shard.scram_secret(&p)),
                Some(Secret::Md5(_)) => {
                    return Err(SessionError::Refused(ErrorFields::fatal(
                        "28000",
                        format!("user \"{user}\" has an md5 secret, which cannot check a SCRAM-SHA-256 login"),
                    )))
                }
                None => return Err(wrong_password(user)),
            };
            scram(stream, server, user).await?;
        }
    }
    let mut out = BytesMut::new();
    backend::authentication_ok(&mut out);
    stream.write_all(&out).await?;
    Ok(())
}

fn wrong_password(user: &str) -> SessionError {
    SessionError::Refused(ErrorFields::fatal("28P01", format!("password authentication failed for user \"{user}\"")))
}

async fn md5(stream: &mut Stream, secret: &Secret, user: &str) -> Result<(), SessionError> {
    let salt: [u8; 4] = rand::random();
    let mut out = BytesMut::new();
    backend::authentication_md5(&mut out, salt);
    stream.write_all(&out).await?;
    let body = read_password_message(stream).await?;
    let response = frontend::decode_password(&body)?;
    match verify_md5(secret, user, salt, response) {
        Ok(true) => Ok(()),
        _ => Err(wrong_password(user)),
    }
}

async fn scram(stream: &mut Stream, mut server: ScramServer, user: &str) -> Result<(), SessionError> {
    let mut out = BytesMut::new();
    backend::authentication_sasl(&mut out, &[SCRAM_SHA_256]);
    stream.write_all(&out).await?;

    let body = read_password_message(stream).await?;
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

    let body = read_password_message(stream).await?;
    let server_final = server.handle_client_final(&body).map_err(|_| wrong_password(user))?;
    out.clear();
    backend::authentication_sasl_final(&mut out, &server_final);
    stream.write_all(&out).await?;
    Ok(())
}

async fn read_password_message(stream: &mut Stream) -> Result<bytes::Bytes, SessionError> {
    let mut buf = BytesMut::new();
    let m = read_message(stream, &mut buf, MAX_AUTH_MESSAGE).await.map_err(|e| match e {
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
