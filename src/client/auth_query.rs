//! auth_query: finding the secret of a user pglane's config does not list by
//! asking the server, as PgBouncer's `auth_user` + `auth_query` do.
//!
//! This file owns the lookup — a server connection of the shard's pool for
//! (auth database, auth_user), the query run over the extended protocol with
//! the user name as its only parameter — and the shard's short-lived cache of its
//! answers. It never decides whether a login succeeds (`auth` does, with the
//! secret found here, or with a mock one when there is none) and never
//! returns a different answer for "no such role" and "role without a
//! password": both are `None`.
//!
//! The lookup connection is an ordinary server connection of the pool for
//! (database, auth_user), so it shows in SHOW POOLS and obeys pool_size; when
//! the database forces a server user (`user =`), the query runs as that user,
//! like every connection to that database.
//!
//! Which auth_user, auth_query and database apply to a client's database is
//! the config's to say (`Config::auth_lookup_for`: the database's own
//! settings, else the global ones; the database is `auth_dbname`'s, else the
//! client's). Answers are cached per (client's database, user), since two
//! databases may look the same user up differently.

use std::cell::RefCell;
use std::collections::HashMap;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use futures_lite::AsyncWriteExt;
use thiserror::Error;
use tracing::{debug, warn};

use crate::auth::secret::Secret;
use crate::config::{AuthLookup, Config};
use crate::net::read_message;
use crate::pool::PoolError;
use crate::protocol::backend::{self, ErrorFields, TransactionStatus};
use crate::protocol::frontend;
use crate::runtime::Shard;
use crate::server::{ServerConn, ServerError};

/// How long an answer (a secret, or "no such user") is reused before the
/// server is asked again. A password changed on the server, or a role
/// created there, takes effect in pglane within this time.
pub const CACHE_TTL: Duration = Duration::from_secs(10);
/// Answers one shard keeps at most; expired ones are dropped first, then all.
const CACHE_CAPACITY: usize = 4096;
/// Largest reply message read from the lookup.
const MAX_REPLY: usize = 1 << 20;

/// How pglane logs in to the server as an auth_query user: with the md5
/// hash the server gave, the password the client sent in clear, or the keys
/// its SCRAM proof revealed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerLogin {
    pub secret: Option<Secret>,
    pub scram_keys: Option<crate::auth::ClientKeys>,
}

/// How to log in to the server as a user who just proved `verified` against
/// the `secret` auth_query found: the password if the client sent it in
/// clear, else its SCRAM keys, else the md5 hash (which answers md5 logins).
pub fn server_login(secret: Option<Secret>, verified: super::auth::Verified) -> ServerLogin {
    match (verified.password, verified.scram_keys, secret) {
        (Some(password), _, _) => ServerLogin { secret: Some(Secret::Plain(password.0)), scram_keys: None },
        (None, Some(keys), _) => ServerLogin { secret: None, scram_keys: Some(keys) },
        (None, None, secret @ Some(Secret::Md5(_))) => ServerLogin { secret, scram_keys: None },
        (None, None, _) => ServerLogin { secret: None, scram_keys: None },
    }
}

/// Why a lookup gave no answer (as opposed to the answer "no secret").
#[derive(Debug, Error)]
pub enum LookupError {
    #[error("auth_user \"{0}\" has no pool for this database")]
    NoPool(String),
    #[error("{0}")]
    Pool(#[from] PoolError),
    #[error("{0}")]
    Server(#[from] ServerError),
    #[error("auth_query failed on the server: {0}")]
    Query(ErrorFields),
    #[error("auth_query must return the user name and the secret, as text; it returned {0} column(s)")]
    Shape(usize),
    #[error("auth_query returned a secret pglane cannot read: {0}")]
    Secret(#[from] crate::auth::AuthError),
}

/// When an answer was fetched, and the answer.
type Answer = (Instant, Option<Secret>);

/// The answers of recent lookups on one shard, by (database, user).
#[derive(Default)]
pub struct SecretCache {
    entries: RefCell<HashMap<(String, String), Answer>>,
}

impl SecretCache {
    /// A fresh answer for (database, user): `Some(None)` means "the server
    /// has no secret for this user".
    fn get(&self, database: &str, user: &str, now: Instant) -> Option<Option<Secret>> {
        let entries = self.entries.borrow();
        let (at, secret) = entries.get(&(database.to_owned(), user.to_owned()))?;
        (now.duration_since(*at) < CACHE_TTL).then(|| secret.clone())
    }

    fn put(&self, database: &str, user: &str, secret: Option<Secret>, now: Instant) {
        let mut entries = self.entries.borrow_mut();
        if entries.len() >= CACHE_CAPACITY {
            entries.retain(|_, (at, _)| now.duration_since(*at) < CACHE_TTL);
            if entries.len() >= CACHE_CAPACITY {
                entries.clear();
            }
        }
        entries.insert((database.to_owned(), user.to_owned()), (now, secret));
    }
}

/// The secret the server holds for `user`, a client of `database`, from the
/// cache or by running the lookup's query as its user in its database.
/// `Ok(None)`: no such role, or a role without a password.
pub async fn lookup(
    shard: &Shard,
    config: &Config,
    how: AuthLookup<'_>,
    database: &str,
    user: &str,
) -> Result<Option<Secret>, LookupError> {
    if let Some(answer) = shard.auth_query_cache.get(database, user, Instant::now()) {
        return Ok(answer);
    }
    let pool = shard.pool(config, how.database, how.user).map_err(|_| LookupError::NoPool(how.user.to_owned()))?;
    let mut lease = pool.checkout(Config::secs(config.query_wait_timeout)).await?;
    let outcome = fetch(&mut lease, how.query, user).await;
    // The connection is reusable after a clean answer or an SQL error (both
    // end at ReadyForQuery idle); after anything else dropping it closes it.
    if matches!(outcome, Ok(_) | Err(LookupError::Query(_) | LookupError::Shape(_))) {
        lease.release();
    }
    let answer = outcome?.map(|text| Secret::parse(&text)).transpose()?;
    debug!(%database, %user, found = answer.is_some(), "auth_query answered");
    shard.auth_query_cache.put(database, user, answer.clone(), Instant::now());
    Ok(answer)
}

/// Runs `sql` with `user` as `$1` (Parse/Bind/Execute/Sync on the unnamed
/// statement, which clients of this connection cannot reach: see
/// `exchange`) and returns the second column of the first row, if there is a
/// row and that column is not NULL.
async fn fetch(conn: &mut ServerConn, sql: &str, user: &str) -> Result<Option<String>, LookupError> {
    let mut out = BytesMut::new();
    frontend::parse(&mut out, "", sql, &[]);
    frontend::bind(&mut out, "", "", &[], std::iter::once(Some(user.as_bytes())), &[]);
    frontend::execute(&mut out, "", 0);
    frontend::sync(&mut out);
    conn.stream.write_all(&out).await.map_err(ServerError::Write)?;
    let mut buf = BytesMut::new();
    let mut answer: Option<Result<Option<String>, LookupError>> = None;
    loop {
        let m = read_message(&mut conn.stream, &mut buf, MAX_REPLY).await.map_err(ServerError::Read)?;
        match m.tag {
            backend::DATA_ROW if answer.is_none() => {
                let row = backend::decode_data_row(&m.body).map_err(ServerError::Protocol)?;
                answer = Some(secret_column(row));
            }
            backend::ERROR_RESPONSE => {
                let e = backend::decode_error_fields(&m.body).map_err(ServerError::Protocol)?;
                answer = Some(Err(LookupError::Query(e)));
            }
            backend::READY_FOR_QUERY => {
                return match backend::decode_ready_for_query(&m.body).map_err(ServerError::Protocol)? {
                    TransactionStatus::Idle if buf.is_empty() => answer.unwrap_or(Ok(None)),
                    _ => Err(ServerError::Unexpected { tag: m.tag, during: "auth_query" }.into()),
                };
            }
            backend::COPY_IN_RESPONSE | backend::COPY_OUT_RESPONSE | backend::COPY_BOTH_RESPONSE => {
                return Err(ServerError::Unexpected { tag: m.tag, during: "auth_query" }.into());
            }
            _ => {}
        }
    }
}

/// The secret column of an auth_query row: (user name, secret).
fn secret_column(row: backend::DataRow<'_>) -> Result<Option<String>, LookupError> {
    if row.len() != 2 {
        return Err(LookupError::Shape(row.len()));
    }
    let secret = row.iter().nth(1).flatten();
    Ok(secret.map(|bytes| String::from_utf8_lossy(bytes).into_owned()).filter(|s| !s.is_empty()))
}

/// The error a client sees when the lookup itself failed. The same for every
/// user name, so it tells nothing about which exist; the details go to the log.
pub fn lookup_failed(user: &str, e: &LookupError) -> ErrorFields {
    warn!(%user, "auth_query lookup failed: {e}");
    ErrorFields::fatal("08006", "pglane could not look up the password (auth_query failed); see pglane's log")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_expire_and_the_cache_stays_bounded() {
        let cache = SecretCache::default();
        let t0 = Instant::now();
        cache.put("db", "alice", Some(Secret::Plain("pw".into())), t0);
        cache.put("db", "nobody", None, t0);
        assert_eq!(cache.get("db", "alice", t0 + Duration::from_secs(1)), Some(Some(Secret::Plain("pw".into()))));
        assert_eq!(cache.get("db", "nobody", t0), Some(None), "a negative answer is an answer");
        assert_eq!(cache.get("other", "alice", t0), None, "per database");
        assert_eq!(cache.get("db", "alice", t0 + CACHE_TTL), None, "expired");
        for i in 0..CACHE_CAPACITY + 10 {
            cache.put("db", &format!("u{i}"), None, t0);
        }
        assert!(cache.entries.borrow().len() <= CACHE_CAPACITY);
    }

    #[test]
    fn the_secret_is_the_second_column() {
        let row = |values: &[Option<&[u8]>]| {
            let mut buf = BytesMut::new();
            backend::data_row(&mut buf, values);
            bytes::Buf::advance(&mut buf, 5); // tag and length
            buf.freeze()
        };
        let one = row(&[Some(b"alice"), Some(b"md5abc")]);
        let decode = |b: &bytes::Bytes| secret_column(backend::decode_data_row(b).unwrap());
        assert_eq!(decode(&one).unwrap(), Some("md5abc".to_owned()));
        assert_eq!(decode(&row(&[Some(b"alice"), None])).unwrap(), None);
        assert_eq!(decode(&row(&[Some(b"alice"), Some(b"")])).unwrap(), None);
        assert!(matches!(decode(&row(&[Some(b"md5abc")])), Err(LookupError::Shape(1))));
    }
}
