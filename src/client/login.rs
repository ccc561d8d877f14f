//! A client's login: from its first packet to the greeting's turn.
//!
//! This module owns what happens before a client is a session: the startup
//! packet (TLS through `net::tls`, GSSENC refusal, cancel requests, old
//! protocols), admission (max_client_conn, with connections reserved for
//! admin_users), authentication (`auth`), where the client goes (a pool,
//! the admin console, a replication connection), and the log line of a
//! failed login. It holds no server connection; what it reads past the
//! startup messages it hands on, untouched.

use std::rc::Rc;

use bytes::BytesMut;
use futures_lite::{AsyncReadExt, AsyncWriteExt};
use tracing::{debug, warn};

use super::{auth, auth_query, replication, send_error, SessionError};
use crate::auth::secret::Secret;
use crate::config::Config;
use crate::logging::Escaped;
use crate::net::Stream;
use crate::pool::Pool;
use crate::protocol::backend::{self, ErrorFields};
use crate::protocol::startup::{self, StartupPacket, StartupParams};
use crate::protocol::ProtocolError;
use crate::runtime::{NoPool, Shard};

/// Connections past max_client_conn that admin_users may still open to the
/// admin console (as PostgreSQL's superuser_reserved_connections), so that
/// a full pglane can still be looked at and KILLed. Checked before the
/// password, as max_client_conn is: a client that claims such a name and
/// fails to prove it holds one of them only until it is refused.
const ADMIN_RESERVED_CONNECTIONS: usize = 2;

/// Tells a client why it may not log in (if there is something to tell),
/// and closes its connection.
pub(super) async fn refuse(stream: &mut Stream, why: SessionError) {
    if let Some(fields) = why.client_message() {
        send_error(stream, &fields).await;
    }
    if let SessionError::RefusedOldProtocol(fields) = &why {
        let mut out = BytesMut::new();
        backend::error_response_v2(&mut out, fields);
        let _ = stream.write_all(&out).await;
    }
}

/// Who a client said it was in its startup packet.
#[derive(Default)]
pub(super) struct Claimed {
    user: String,
    database: String,
}

/// A failed login (`why`; `None`: client_login_timeout), unless
/// log_pooler_errors is off, at WARN (as
/// PgBouncer's "pooler error" lines are warnings) with the
/// client's address and the user and database it asked for, for operators
/// and fail2ban, at most as often as [`crate::logging::PerAddress`] lets
/// one address; a client that hangs up during its login, at DEBUG.
pub(super) fn log_failed_login(
    shard: &Shard,
    config: &Config,
    peer: Option<std::net::SocketAddr>,
    claimed: &Claimed,
    why: Option<&SessionError>,
) {
    if let Some(SessionError::ClientClosed | SessionError::ClientIo(_)) = why {
        debug!(?peer, "client hung up during its login");
        return;
    }
    // log_pooler_errors, as PgBouncer's: off, what pglane tells a client
    // it refuses is not logged.
    if !config.log_pooler_errors {
        return;
    }
    let Some(left_out) = shard.login_log.borrow_mut().admit(peer.map(|p| p.ip()), crate::rt::now()) else { return };
    let addr = peer.map_or_else(|| "unix socket".to_owned(), |p| p.to_string());
    let why = match why {
        None => "client_login_timeout: login took too long".to_owned(),
        Some(SessionError::Refused(fields)) if fields.code == "53300" => format!("max_client_conn reached: {}", fields.message),
        Some(e) => e.to_string(),
    };
    let also = match left_out {
        0 => String::new(),
        n => format!(" ({n} more from this address since the last one not logged)"),
    };
    let (user, database) = (Escaped(&claimed.user), Escaped(&claimed.database));
    warn!(%addr, %user, %database, "login failed: {}{also}", Escaped(&why));
}

/// Where a logged-in client goes.
pub(super) enum Target {
    Pool(Rc<Pool>),
    /// A replication connection, to a server connection of its own.
    Replication(Box<crate::server::ServerTarget>),
    /// The admin console; `may_control` for admin_users (not only stats_users).
    Admin {
        may_control: bool,
    },
}

/// Reads the startup packet(s) and authenticates. `Ok(None)` when the
/// connection was only a cancel request (or gave up after SSL was refused).
/// `pending` keeps what the client sent beyond the messages read.
pub(super) async fn login(
    shard: &Rc<Shard>,
    config: &Config,
    stream: &mut Stream,
    peer: Option<std::net::SocketAddr>,
    pending: &mut BytesMut,
    claimed: &mut Claimed,
) -> Result<Option<(StartupParams, Target)>, SessionError> {
    let tls = crate::net::tls::acceptor(config);
    let params = loop {
        match read_startup_packet(stream, pending).await? {
            StartupPacket::SslRequest | StartupPacket::GssEncRequest if stream.is_tls() => {
                return Err(SessionError::Refused(ErrorFields::fatal("08P01", "encryption requested again inside TLS")));
            }
            StartupPacket::SslRequest => match &tls {
                Some(tls) => {
                    // Bytes sent before the client saw 'S' are not encrypted,
                    // yet would be read as if they came through TLS
                    // (CVE-2021-23214): refuse them.
                    if !pending.is_empty() || stream.has_unread_bytes() {
                        return Err(unencrypted_data_after("SSL request"));
                    }
                    stream.write_all(b"S").await?;
                    crate::net::tls::accept(stream, tls.clone()).await?;
                }
                None => {
                    stream.write_all(b"N").await?;
                    // PostgreSQL refuses what came with the request whatever
                    // it answered: sent before the client saw the answer.
                    if !pending.is_empty() {
                        return Err(unencrypted_data_after("SSL request"));
                    }
                }
            },
            StartupPacket::GssEncRequest => {
                stream.write_all(b"N").await?;
                if !pending.is_empty() {
                    return Err(unencrypted_data_after("GSSAPI encryption request"));
                }
            }
            StartupPacket::Cancel { process_id, secret_key } => {
                shard.route_cancel(process_id, secret_key).await;
                return Ok(None);
            }
            StartupPacket::PeerCloseIdle { dbname } => {
                match config.is_peer_address(peer.map(|p| p.ip())) {
                    true => shard.close_idle_connections_to(&dbname, true),
                    // Not INFO: anyone can send these.
                    false => debug!(?peer, "a peer's request from an address [peers] does not list"),
                }
                return Ok(None);
            }
            // libpq never uses TLS on a unix socket (`peer` is None there):
            // the mode is for TCP clients, as PgBouncer's.
            StartupPacket::Startup(_) if config.client_tls_sslmode.requires_tls() && !stream.is_tls() && peer.is_some() => {
                return Err(SessionError::Refused(ErrorFields::fatal("28000", "SSL required")));
            }
            StartupPacket::Startup(params) => break params,
        }
    };
    let mut params = params;
    if let Some(peer) = peer.filter(|_| config.application_name_add_host) {
        params.add_host_to_application_name(peer);
    }
    if let Some(negotiation) = params.negotiation() {
        // Before anything else, as PostgreSQL: the session goes on in 3.0.
        debug!(?peer, minor = params.minor_version, options = ?negotiation.unrecognized_options, "negotiating protocol 3.0");
        let mut out = BytesMut::new();
        backend::negotiate_protocol_version(&mut out, &negotiation);
        stream.write_all(&out).await?;
    }
    // Handing the port over (so_reuseport), a client accepted before the
    // listener closed is served: it reached this pglane, not the next one.
    if shard.shutdown.is_fired() && !config.so_reuseport {
        return Err(SessionError::Refused(ErrorFields::fatal("57P03", "pglane is shutting down")));
    }
    let Some(user) = params.user() else {
        return Err(SessionError::Refused(ErrorFields::fatal("28000", "no PostgreSQL user name specified in startup packet")));
    };
    let replication = params.get("replication").map(replication::mode).transpose().map_err(SessionError::Refused)?.flatten();
    let database = params.database().unwrap_or(user);
    *claimed = Claimed { user: user.to_owned(), database: database.to_owned() };
    let admin = crate::admin::is_admin_database(database);
    // Past max_client_conn, admin_users still reach the admin console.
    let over = shard.client_count().saturating_sub(config.max_client_conn);
    let reserved = admin && config.admin_users.iter().any(|u| u == user) && over <= ADMIN_RESERVED_CONNECTIONS;
    if over > 0 && !reserved {
        // PostgreSQL's words at max_connections; the log says which limit
        // (`log_failed_login`).
        return Err(SessionError::Refused(ErrorFields::fatal("53300", "sorry, too many clients already")));
    }
    let client = crate::auth::hba::Client {
        addr: peer.map(|p| p.ip()),
        tls: stream.is_tls(),
        database,
        user,
        physical_replication: replication == Some(replication::Mode::Physical),
    };
    let method = auth::method_for(config, &client)?;
    let lookup = config.database(database).is_some().then(|| config.auth_lookup_for(database)).flatten();
    let (secret, from_server) = match (config.users.get(user), lookup) {
        (Some(configured), _) => (configured.password.as_deref().and_then(|p| Secret::parse(p).ok()), false),
        // Not in the config: ask the server, if it is one pglane knows.
        (None, Some(lookup)) if method != auth::Method::Trust && !admin => {
            let looked_up = auth_query::lookup(shard, config, lookup, database, user)
                .await
                .map_err(|e| SessionError::Refused(auth_query::lookup_failed(user, &e)))?;
            (looked_up, true)
        }
        (None, _) => (None, false),
    };
    let verified = auth::authenticate(shard, stream, pending, method, user, secret.as_ref(), config.scram_iterations).await?;
    // A SCRAM verifier (in the config or userlist, as from auth_query)
    // cannot answer the server's SCRAM: the keys the client's proof
    // revealed can, as PgBouncer uses them.
    if from_server || matches!(secret, Some(Secret::Scram(_))) {
        shard.learn_login(config, database, user, auth_query::server_login(secret, verified));
    }
    if admin && replication.is_some() {
        return Err(SessionError::Refused(ErrorFields::fatal("08P01", "the admin console takes no replication connections")));
    }
    if admin {
        let may_control = config.admin_users.iter().any(|u| u == user);
        if !may_control && !config.stats_users.iter().any(|u| u == user) {
            return Err(SessionError::Refused(ErrorFields::fatal(
                "28000",
                format!("user \"{user}\" is not in admin_users or stats_users"),
            )));
        }
        return Ok(Some((params, Target::Admin { may_control })));
    }
    if replication.is_some() {
        let Some(target) = shard.server_target(config, database, user) else {
            return Err(SessionError::Refused(ErrorFields::fatal(
                "3D000",
                format!("database \"{database}\" does not exist in pglane's configuration"),
            )));
        };
        return Ok(Some((params, Target::Replication(Box::new(target)))));
    }
    let pool = shard.pool(config, database, user).map_err(|refused| {
        SessionError::Refused(match refused {
            NoPool::NotConfigured => {
                ErrorFields::fatal("3D000", format!("database \"{database}\" does not exist in pglane's configuration"))
            }
            NoPool::FallbackFull { max } => ErrorFields::fatal(
                "53400",
                format!(
                    "database \"{database}\" is not in pglane's configuration, and the \"*\" entry serves \
                     max_fallback_databases = {max} other databases already"
                ),
            ),
        })
    })?;
    Ok(Some((params, Target::Pool(pool))))
}

/// PostgreSQL's refusal of bytes that came in with an encryption request.
fn unencrypted_data_after(request: &str) -> SessionError {
    SessionError::Refused(
        ErrorFields::fatal("08P01", format!("received unencrypted data after {request}"))
            .with_detail("This could be either a client-software bug or evidence of an attempted man-in-the-middle attack."),
    )
}

/// Reads one startup packet, through `pending`: what the client sent after
/// it stays there. A length out of bounds, or a connection that ends
/// mid-packet, closes without a word, as PostgreSQL does; a packet it
/// cannot make sense of gets PostgreSQL's error.
async fn read_startup_packet(stream: &mut Stream, pending: &mut BytesMut) -> Result<StartupPacket, SessionError> {
    let len = loop {
        match startup::packet_length(pending) {
            Ok(Some(len)) if pending.len() >= len => break len,
            Ok(_) => {}
            Err(e) => return Err(SessionError::BadStartupPacket(e)),
        }
        let mut chunk = [0u8; 4096];
        match stream.read(&mut chunk).await? {
            0 if pending.is_empty() => return Err(SessionError::ClientClosed),
            0 => return Err(SessionError::BadStartupPacket(ProtocolError::UnexpectedEof)),
            n => pending.extend_from_slice(&chunk[..n]),
        }
    };
    let packet = pending.split_to(len);
    startup::decode(&packet).map_err(|e| match e {
        ProtocolError::UnsupportedVersion(version) => {
            let fields = ErrorFields::fatal("0A000", startup::unsupported_version_message(version));
            match (version as u32) >> 16 {
                0..=2 => SessionError::RefusedOldProtocol(fields),
                _ => SessionError::Refused(fields),
            }
        }
        ProtocolError::Malformed("CancelRequest") => SessionError::BadStartupPacket(e),
        _ => {
            SessionError::Refused(ErrorFields::fatal("08P01", "invalid startup packet layout: expected terminator as last byte"))
        }
    })
}
