//! SCRAM-SHA-256 (RFC 5802, RFC 7677) the way PostgreSQL speaks it: without
//! channel binding, with the user name taken from the startup packet.
//!
//! Owns both sides of the exchange as small state machines over message
//! *payloads*:
//! - [`ScramServer`]: pglane authenticating a connecting client against a
//!   stored [`ScramSecret`];
//! - [`ScramClient`]: pglane authenticating to a PostgreSQL server, with either
//!   the password or a ClientKey recovered by a [`ScramServer`];
//!
//! plus the key-derivation primitives (`Hi()`, ClientKey, StoredKey,
//! ServerKey) that [`ScramSecret`] also uses.
//!
//! Must never do I/O or protocol framing, never panic on peer input (every
//! malformed message is a typed [`AuthError`]), never compare secret values in
//! variable time, and never let a step run out of order: any error ends the
//! exchange, and later calls fail.
//!
//! Not here: SASLprep (passwords are used as given, see
//! [`ScramSecret::from_password`]), SCRAM-SHA-256-PLUS, and the verifiers
//! shown to users who cannot log in (`super::mock`; a [`ScramServer`] runs
//! over them unchanged).
//!
//! Cost: deriving keys from a password runs `Hi()` for the secret's iteration
//! count (about a millisecond for 4096 in release builds) on the calling
//! thread. That happens in [`ScramServer::from_secret`] for plaintext secrets
//! and in [`ScramClient::handle_server_first`] for password clients, whose
//! iteration count is chosen by the server: a client refuses counts above its
//! [`ScramClient::with_max_iterations`] limit, and a [`SaltedPasswordCache`]
//! lets a caller that logs in to the same server again and again derive the
//! SaltedPassword once per (password, salt, iterations).

use std::fmt;
use std::str;

use base64::{engine::general_purpose::STANDARD as BASE64, Engine as _};
use hmac::{Hmac, Mac};
use rand::RngCore;
use sha2::{Digest, Sha256};

use super::secret::{ScramSecret, Secret};
use super::{constant_time_eq, AuthError};

/// The SASL mechanism name, as listed in AuthenticationSASL.
pub const SCRAM_SHA_256: &str = "SCRAM-SHA-256";

/// Length of every SCRAM-SHA-256 key, proof and signature.
pub(crate) const KEY_LEN: usize = 32;
type Key = [u8; KEY_LEN];
type HmacSha256 = Hmac<Sha256>;

/// Random bytes in a nonce (PostgreSQL uses 18, giving 24 base64 characters).
const NONCE_RANDOM_BYTES: usize = 18;
/// gs2 header of a client that does not do channel binding.
const GS2_HEADER_NO_BINDING: &str = "n,,";
/// base64 of [`GS2_HEADER_NO_BINDING`], echoed back in `c=`.
const CHANNEL_BINDING_NO_BINDING: &str = "biws";

/// A bound on the SaltedPasswords a [`ScramClient`] derives: the server picks
/// the iteration count, and `Hi()` is a loop of that many HMACs.
pub const DEFAULT_MAX_ITERATIONS: u32 = 100_000;

/// SaltedPasswords already derived, per (password, salt, iterations).
///
/// A server keeps one verifier per role, so every new connection to it asks
/// for the same salt and count and the first derivation can serve them all.
/// Bounded: when `capacity` entries are held the cache starts over (a pooler
/// talks to a handful of (server, role) pairs; a full cache means churn, and
/// starting over is the simplest bound). Capacity 0 caches nothing. The
/// entries are password-equivalent: the cache lives in memory only and is
/// never printed.
pub struct SaltedPasswordCache {
    capacity: usize,
    entries: std::collections::HashMap<(String, Vec<u8>, u32), Key>,
}

impl SaltedPasswordCache {
    #[must_use]
    pub fn new(capacity: usize) -> Self {
        SaltedPasswordCache { capacity, entries: std::collections::HashMap::new() }
    }

    /// The SaltedPassword for these inputs, derived now only if not cached.
    fn get_or_derive(&mut self, password: &str, salt: &[u8], iterations: u32) -> Key {
        let key = (password.to_owned(), salt.to_vec(), iterations);
        if let Some(salted) = self.entries.get(&key) {
            return *salted;
        }
        let salted = salted_password(password.as_bytes(), salt, iterations);
        if self.capacity > 0 {
            if self.entries.len() >= self.capacity {
                self.entries.clear();
            }
            self.entries.insert(key, salted);
        }
        salted
    }

    /// How many SaltedPasswords are held.
    #[must_use]
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

impl fmt::Debug for SaltedPasswordCache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SaltedPasswordCache").field("capacity", &self.capacity).field("entries", &self.entries.len()).finish()
    }
}

// ---------------------------------------------------------------------------
// Key derivation (RFC 5802 section 3)
// ---------------------------------------------------------------------------

/// SaltedPassword := Hi(password, salt, i), i.e. PBKDF2-HMAC-SHA-256 with a
/// single output block. `iterations` of 0 behaves like 1.
pub(crate) fn salted_password(password: &[u8], salt: &[u8], iterations: u32) -> Key {
    let prf = keyed_hmac(password);
    let mut first = prf.clone();
    first.update(salt);
    first.update(&1u32.to_be_bytes());
    let mut u = finalize(first);
    let mut result = u;
    for _ in 1..iterations {
        let mut next = prf.clone();
        next.update(&u);
        u = finalize(next);
        result = xor(&result, &u);
    }
    result
}

/// ClientKey := HMAC(SaltedPassword, "Client Key")
pub(crate) fn client_key(salted_password: &Key) -> Key {
    hmac_sha256(salted_password, b"Client Key")
}

/// ServerKey := HMAC(SaltedPassword, "Server Key")
pub(crate) fn server_key(salted_password: &Key) -> Key {
    hmac_sha256(salted_password, b"Server Key")
}

/// StoredKey := H(ClientKey)
pub(crate) fn stored_key(client_key: &Key) -> Key {
    Sha256::digest(client_key).into()
}

/// ClientProof := ClientKey XOR HMAC(StoredKey, AuthMessage)
fn client_proof(client_key: &Key, auth_message: &str) -> Key {
    let client_signature = hmac_sha256(&stored_key(client_key), auth_message.as_bytes());
    xor(client_key, &client_signature)
}

/// ServerSignature := HMAC(ServerKey, AuthMessage)
fn server_signature(server_key: &Key, auth_message: &str) -> Key {
    hmac_sha256(server_key, auth_message.as_bytes())
}

/// Undoes [`client_proof`]: the ClientKey, if the proof is valid for `stored_key`.
fn recover_client_key(stored: &Key, auth_message: &str, proof: &Key) -> Option<Key> {
    let client_signature = hmac_sha256(stored, auth_message.as_bytes());
    let client_key = xor(proof, &client_signature);
    constant_time_eq(&stored_key(&client_key), stored).then_some(client_key)
}

/// AuthMessage := client-first-message-bare "," server-first-message ","
///                client-final-message-without-proof
fn auth_message(client_first_bare: &str, server_first: &str, client_final_without_proof: &str) -> String {
    format!("{client_first_bare},{server_first},{client_final_without_proof}")
}

fn hmac_sha256(key: &[u8], message: &[u8]) -> Key {
    let mut mac = keyed_hmac(key);
    mac.update(message);
    finalize(mac)
}

fn keyed_hmac(key: &[u8]) -> HmacSha256 {
    // HMAC hashes over-long keys and pads short ones, so no key length is invalid.
    HmacSha256::new_from_slice(key).expect("HMAC accepts keys of any length")
}

fn finalize(mac: HmacSha256) -> Key {
    mac.finalize().into_bytes().into()
}

fn xor(a: &Key, b: &Key) -> Key {
    std::array::from_fn(|i| a[i] ^ b[i])
}

fn random_nonce() -> String {
    let mut bytes = [0u8; NONCE_RANDOM_BYTES];
    rand::thread_rng().fill_bytes(&mut bytes);
    BASE64.encode(bytes)
}

// ---------------------------------------------------------------------------
// Message parsing (RFC 5802 section 7)
// ---------------------------------------------------------------------------

/// A client-first-message, split into the parts the exchange needs.
#[derive(Debug)]
struct ClientFirst<'a> {
    gs2_header: &'a str,
    bare: &'a str,
    nonce: &'a str,
}

/// A client-final-message, split into the parts the exchange needs.
#[derive(Debug)]
struct ClientFinal<'a> {
    without_proof: &'a str,
    channel_binding: Vec<u8>,
    nonce: &'a str,
    proof: Key,
}

/// A server-first-message, decoded.
#[derive(Debug)]
struct ServerFirst<'a> {
    nonce: &'a str,
    salt: Vec<u8>,
    iterations: u32,
}

/// `gs2-header client-first-message-bare`, where the bare part is
/// `[m=…,] n=<user>,r=<nonce>[,extensions]`. The user name is not validated:
/// PostgreSQL ignores it in favour of the startup packet's.
fn parse_client_first(message: &str) -> Result<ClientFirst<'_>, AuthError> {
    let (gs2_header, bare) = split_gs2_header(message)?;
    let mut attributes = Attributes::new(bare);
    attributes.require(b'n')?;
    let nonce = parse_nonce(attributes.require(b'r')?)?;
    attributes.skip_extensions()?;
    Ok(ClientFirst { gs2_header, bare, nonce })
}

/// Splits `gs2-cbind-flag "," [authzid] ","` off the front of a client-first-message.
///
/// Flag `n` (no channel binding) and `y` (client could bind but believes the
/// server cannot; true, since pglane never offers SCRAM-SHA-256-PLUS) are
/// accepted; `p=…` and an authorization identity are not supported.
fn split_gs2_header(message: &str) -> Result<(&str, &str), AuthError> {
    let missing = AuthError::MalformedMessage("missing gs2 header");
    let (cbind_flag, rest) = message.split_once(',').ok_or(missing.clone())?;
    let (authzid, _) = rest.split_once(',').ok_or(missing)?;
    match cbind_flag {
        "n" | "y" => {}
        flag if flag.starts_with("p=") => {
            return Err(AuthError::Unsupported("channel binding (only SCRAM-SHA-256 is offered, not SCRAM-SHA-256-PLUS)"))
        }
        _ => return Err(AuthError::MalformedMessage("invalid gs2 channel-binding flag")),
    }
    if authzid.starts_with("a=") {
        return Err(AuthError::Unsupported("authorization identity (a=)"));
    }
    if !authzid.is_empty() {
        return Err(AuthError::MalformedMessage("invalid gs2 authzid"));
    }
    Ok(message.split_at(cbind_flag.len() + ",,".len()))
}

/// `c=<b64 gs2 header>,r=<nonce>[,extensions],p=<b64 proof>`; the proof is
/// always last, so everything before the final comma is the
/// client-final-message-without-proof that goes into the AuthMessage.
fn parse_client_final(message: &str) -> Result<ClientFinal<'_>, AuthError> {
    let (without_proof, proof) = message.rsplit_once(',').ok_or(AuthError::MissingAttribute('p'))?;
    let proof = decode_key(Attributes::new(proof).require(b'p')?, 'p')?;
    let mut attributes = Attributes::new(without_proof);
    let channel_binding = decode_base64(attributes.require(b'c')?, 'c')?;
    let nonce = attributes.require(b'r')?;
    attributes.skip_extensions()?;
    Ok(ClientFinal { without_proof, channel_binding, nonce, proof })
}

/// `[m=…,] r=<nonce>,s=<b64 salt>,i=<iterations>[,extensions]`
fn parse_server_first(message: &str) -> Result<ServerFirst<'_>, AuthError> {
    let mut attributes = Attributes::new(message);
    let nonce = parse_nonce(attributes.require(b'r')?)?;
    let salt = decode_base64(attributes.require(b's')?, 's')?;
    if salt.is_empty() {
        return Err(AuthError::InvalidBase64('s'));
    }
    let iterations = parse_iteration_count(attributes.require(b'i')?)?;
    attributes.skip_extensions()?;
    Ok(ServerFirst { nonce, salt, iterations })
}

/// `v=<b64 server signature>[,extensions]` or `e=<error>[,extensions]`.
fn parse_server_final(message: &str) -> Result<Key, AuthError> {
    let mut attributes = Attributes::new(message);
    match attributes.next()? {
        Some((b'e', error)) => Err(AuthError::ServerError(error.to_owned())),
        Some((b'v', signature)) => {
            let signature = decode_key(signature, 'v')?;
            attributes.skip_extensions()?;
            Ok(signature)
        }
        Some((found, _)) => Err(AuthError::UnexpectedAttribute { expected: 'v', found: char::from(found) }),
        None => Err(AuthError::MissingAttribute('v')),
    }
}

/// A nonce is one or more printable ASCII characters other than `,`.
fn parse_nonce(nonce: &str) -> Result<&str, AuthError> {
    let printable = |b: u8| (0x21..=0x7e).contains(&b) && b != b',';
    if nonce.is_empty() || !nonce.bytes().all(printable) {
        return Err(AuthError::InvalidNonce);
    }
    Ok(nonce)
}

/// A decimal iteration count in `1..=u32::MAX` (no sign, no whitespace).
pub(crate) fn parse_iteration_count(text: &str) -> Result<u32, AuthError> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(AuthError::InvalidIterationCount);
    }
    match text.parse::<u32>() {
        Ok(count) if count > 0 => Ok(count),
        _ => Err(AuthError::InvalidIterationCount),
    }
}

fn decode_base64(text: &str, attribute: char) -> Result<Vec<u8>, AuthError> {
    BASE64.decode(text).map_err(|_| AuthError::InvalidBase64(attribute))
}

fn decode_key(text: &str, attribute: char) -> Result<Key, AuthError> {
    Key::try_from(decode_base64(text, attribute)?).map_err(|_| AuthError::InvalidBase64(attribute))
}

fn utf8(message: &[u8]) -> Result<&str, AuthError> {
    str::from_utf8(message).map_err(|_| AuthError::NotUtf8)
}

/// A cursor over a SCRAM message's comma-separated `k=value` attributes.
struct Attributes<'a> {
    remaining: Option<&'a str>,
}

impl<'a> Attributes<'a> {
    fn new(message: &'a str) -> Self {
        Attributes { remaining: Some(message) }
    }

    /// The next attribute as (key, value), or `None` at the end.
    fn next(&mut self) -> Result<Option<(u8, &'a str)>, AuthError> {
        let Some(rest) = self.remaining else {
            return Ok(None);
        };
        let (attribute, tail) = match rest.split_once(',') {
            Some((attribute, tail)) => (attribute, Some(tail)),
            None => (rest, None),
        };
        self.remaining = tail;
        parse_attribute(attribute).map(Some)
    }

    /// The value of the next attribute, which must have key `key`.
    fn require(&mut self, key: u8) -> Result<&'a str, AuthError> {
        match self.next()? {
            Some((found, value)) if found == key => Ok(value),
            Some((b'm', _)) => Err(AuthError::Unsupported("mandatory extension (m=)")),
            Some((found, _)) => Err(AuthError::UnexpectedAttribute { expected: char::from(key), found: char::from(found) }),
            None => Err(AuthError::MissingAttribute(char::from(key))),
        }
    }

    /// Optional extensions may follow the known attributes; they must be well
    /// formed but are otherwise ignored, as PostgreSQL does.
    fn skip_extensions(mut self) -> Result<(), AuthError> {
        while self.next()?.is_some() {}
        Ok(())
    }
}

/// `ALPHA "=" value`
fn parse_attribute(attribute: &str) -> Result<(u8, &str), AuthError> {
    match attribute.as_bytes() {
        [key, b'=', ..] if key.is_ascii_alphabetic() => Ok((*key, &attribute[2..])),
        _ => Err(AuthError::MalformedMessage("expected an attribute of the form x=value")),
    }
}

// ---------------------------------------------------------------------------
// Server side
// ---------------------------------------------------------------------------

/// Server side of SCRAM-SHA-256: pglane authenticating a connecting client.
///
/// Send AuthenticationSASL listing [`SCRAM_SHA_256`], then feed the
/// SASLInitialResponse data to [`handle_client_first`](Self::handle_client_first)
/// (reply with AuthenticationSASLContinue) and the SASLResponse data to
/// [`handle_client_final`](Self::handle_client_final) (reply with
/// AuthenticationSASLFinal, then AuthenticationOk). Any error ends the exchange.
pub struct ScramServer {
    secret: ScramSecret,
    server_nonce: String,
    state: ServerState,
}

enum ServerState {
    AwaitingClientFirst,
    AwaitingClientFinal(Exchange),
    Succeeded { client_key: Key },
    Failed,
}

/// What the server remembers between the client's two messages.
struct Exchange {
    gs2_header: String,
    client_first_bare: String,
    server_first: String,
    nonce: String,
}

impl ScramServer {
    /// A server for `secret` with a fresh random nonce.
    #[must_use]
    pub fn new(secret: ScramSecret) -> Self {
        Self::with_server_nonce(secret, random_nonce())
    }

    /// A server for a configured secret. A plaintext password is turned into a
    /// verifier with a random salt and 4096 iterations — which costs a `Hi()`
    /// run per call, so prefer converting once with [`ScramSecret::generate`].
    /// An md5 secret cannot do SCRAM: [`AuthError::IncompatibleSecret`].
    pub fn from_secret(secret: &Secret) -> Result<Self, AuthError> {
        match secret {
            Secret::Scram(scram) => Ok(Self::new(scram.clone())),
            Secret::Plain(password) => Ok(Self::new(ScramSecret::generate(password))),
            Secret::Md5(_) => Err(AuthError::IncompatibleSecret { method: SCRAM_SHA_256, secret: secret.kind() }),
        }
    }

    fn with_server_nonce(secret: ScramSecret, server_nonce: String) -> Self {
        ScramServer { secret, server_nonce, state: ServerState::AwaitingClientFirst }
    }

    /// Takes the client-first-message (`n,,n=<user>,r=<nonce>`; gs2 flag `y`
    /// also accepted, `p=` and `a=` rejected) and returns the
    /// server-first-message `r=<nonce>,s=<salt>,i=<iterations>`.
    pub fn handle_client_first(&mut self, message: &[u8]) -> Result<Vec<u8>, AuthError> {
        if !matches!(self.state, ServerState::AwaitingClientFirst) {
            return Err(AuthError::OutOfOrder("client-first-message was already handled"));
        }
        match self.start_exchange(message) {
            Ok(exchange) => {
                let reply = exchange.server_first.clone().into_bytes();
                self.state = ServerState::AwaitingClientFinal(exchange);
                Ok(reply)
            }
            Err(err) => {
                self.state = ServerState::Failed;
                Err(err)
            }
        }
    }

    /// Takes the client-final-message and, if the channel-binding echo, nonce
    /// and proof all check out, returns the server-final-message `v=<signature>`.
    /// A well-formed but wrong proof is [`AuthError::WrongPassword`].
    pub fn handle_client_final(&mut self, message: &[u8]) -> Result<Vec<u8>, AuthError> {
        let ServerState::AwaitingClientFinal(exchange) = &self.state else {
            return Err(AuthError::OutOfOrder("client-final-message must follow a handled client-first-message"));
        };
        let outcome = finish_exchange(&self.secret, exchange, message);
        self.state = match &outcome {
            Ok((client_key, _)) => ServerState::Succeeded { client_key: *client_key },
            Err(_) => ServerState::Failed,
        };
        outcome.map(|(_, reply)| reply)
    }

    /// After a successful exchange, the client's ClientKey, recovered from its
    /// proof. With it (and the same verifier) pglane can log in to a
    /// PostgreSQL server via [`ScramClient::with_client_key`] — but only if the
    /// server stores the *same* verifier (same salt and iteration count).
    /// The key is password-equivalent for that verifier: keep it secret.
    /// `None` until the exchange has succeeded.
    #[must_use]
    pub fn client_key(&self) -> Option<[u8; 32]> {
        match self.state {
            ServerState::Succeeded { client_key } => Some(client_key),
            _ => None,
        }
    }

    fn start_exchange(&self, message: &[u8]) -> Result<Exchange, AuthError> {
        let client_first = parse_client_first(utf8(message)?)?;
        let nonce = format!("{}{}", client_first.nonce, self.server_nonce);
        let server_first = format!("r={nonce},s={},i={}", BASE64.encode(&self.secret.salt), self.secret.iterations);
        Ok(Exchange {
            gs2_header: client_first.gs2_header.to_owned(),
            client_first_bare: client_first.bare.to_owned(),
            server_first,
            nonce,
        })
    }
}

/// Checks a client-final-message against the exchange so far; on success the
/// recovered ClientKey and the server-final-message.
fn finish_exchange(secret: &ScramSecret, exchange: &Exchange, message: &[u8]) -> Result<(Key, Vec<u8>), AuthError> {
    let client_final = parse_client_final(utf8(message)?)?;
    if client_final.channel_binding != exchange.gs2_header.as_bytes() {
        return Err(AuthError::ChannelBindingMismatch);
    }
    if client_final.nonce != exchange.nonce {
        return Err(AuthError::NonceMismatch);
    }
    let auth_message = auth_message(&exchange.client_first_bare, &exchange.server_first, client_final.without_proof);
    let client_key =
        recover_client_key(&secret.stored_key, &auth_message, &client_final.proof).ok_or(AuthError::WrongPassword)?;
    let signature = server_signature(&secret.server_key, &auth_message);
    Ok((client_key, format!("v={}", BASE64.encode(signature)).into_bytes()))
}

impl fmt::Debug for ScramServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = match self.state {
            ServerState::AwaitingClientFirst => "awaiting client-first-message",
            ServerState::AwaitingClientFinal(_) => "awaiting client-final-message",
            ServerState::Succeeded { .. } => "succeeded",
            ServerState::Failed => "failed",
        };
        f.debug_struct("ScramServer").field("secret", &self.secret).field("state", &state).finish_non_exhaustive()
    }
}

// ---------------------------------------------------------------------------
// Client side
// ---------------------------------------------------------------------------

/// What a successful [`ScramServer`] exchange proves about the client: its
/// ClientKey, and the ServerKey of the verifier it matched. With both,
/// [`ScramClient::with_keys`] logs in to a server that stores that same
/// verifier, and checks the server's signature. Password-equivalent for that
/// verifier: never printed.
#[derive(Clone, PartialEq, Eq)]
pub struct ClientKeys {
    pub client_key: [u8; 32],
    pub server_key: [u8; 32],
}

impl fmt::Debug for ClientKeys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ClientKeys(..)")
    }
}

/// Client side of SCRAM-SHA-256: pglane authenticating to a PostgreSQL server.
///
/// Send [`client_first`](Self::client_first) in SASLInitialResponse, feed the
/// AuthenticationSASLContinue data to
/// [`handle_server_first`](Self::handle_server_first) and send the result in
/// SASLResponse, then check the AuthenticationSASLFinal data with
/// [`verify_server_final`](Self::verify_server_final) *before* trusting the
/// server's AuthenticationOk.
pub struct ScramClient {
    credentials: Credentials,
    /// Highest iteration count accepted from the server.
    max_iterations: u32,
    /// `n=` value, already saslname-escaped. Empty: PostgreSQL ignores it.
    username: String,
    nonce: String,
    state: ClientState,
}

enum Credentials {
    Password(String),
    ClientKey { client_key: Key, server_key: Option<Key> },
}

enum ClientState {
    AwaitingServerFirst,
    AwaitingServerFinal { server_signature: Option<Key> },
    Failed,
}

impl Credentials {
    /// ClientKey, and ServerKey if it can be known, for the server's salt and iterations.
    fn keys(&self, salt: &[u8], iterations: u32, cache: &mut SaltedPasswordCache) -> (Key, Option<Key>) {
        match self {
            Credentials::Password(password) => {
                let salted = cache.get_or_derive(password, salt, iterations);
                (client_key(&salted), Some(server_key(&salted)))
            }
            Credentials::ClientKey { client_key, server_key } => (*client_key, *server_key),
        }
    }
}

impl ScramClient {
    /// A client that knows the password (used as given, without SASLprep).
    #[must_use]
    pub fn new(password: &str) -> Self {
        Self::with_credentials(Credentials::Password(password.to_owned()), random_nonce())
    }

    /// A client that logs in with a ClientKey (e.g. from
    /// [`ScramServer::client_key`]) instead of a password; the server's salt
    /// and iteration count are then irrelevant, but its verifier must be the
    /// one the key came from. The server's signature is verified only if
    /// `server_key_check` (the verifier's ServerKey) is given; without it the
    /// server is not authenticated.
    #[must_use]
    pub fn with_client_key(client_key: [u8; 32], server_key_check: Option<[u8; 32]>) -> Self {
        let credentials = Credentials::ClientKey { client_key, server_key: server_key_check };
        Self::with_credentials(credentials, random_nonce())
    }

    /// [`with_client_key`](Self::with_client_key) with the server checked.
    #[must_use]
    pub fn with_keys(keys: &ClientKeys) -> Self {
        Self::with_client_key(keys.client_key, Some(keys.server_key))
    }

    fn with_credentials(credentials: Credentials, nonce: String) -> Self {
        ScramClient {
            credentials,
            max_iterations: DEFAULT_MAX_ITERATIONS,
            username: String::new(),
            nonce,
            state: ClientState::AwaitingServerFirst,
        }
    }

    /// Refuses servers that ask for more than `max` PBKDF2 iterations
    /// ([`AuthError::TooManyIterations`]) instead of spending the time;
    /// the default is [`DEFAULT_MAX_ITERATIONS`].
    #[must_use]
    pub fn with_max_iterations(mut self, max: u32) -> Self {
        self.max_iterations = max;
        self
    }

    /// The client-first-message, `n,,n=,r=<nonce>`.
    #[must_use]
    pub fn client_first(&self) -> Vec<u8> {
        format!("{GS2_HEADER_NO_BINDING}{}", self.client_first_bare()).into_bytes()
    }

    /// Takes the server-first-message and returns the client-final-message.
    /// The server's nonce must extend ours, its salt must be non-empty base64
    /// and its iteration count a positive integer.
    pub fn handle_server_first(&mut self, message: &[u8]) -> Result<Vec<u8>, AuthError> {
        self.handle_server_first_cached(message, &mut SaltedPasswordCache::new(0))
    }

    /// [`handle_server_first`](Self::handle_server_first), taking the
    /// SaltedPassword from `cache` when it holds one for the server's salt
    /// and iteration count, and adding it otherwise.
    pub fn handle_server_first_cached(&mut self, message: &[u8], cache: &mut SaltedPasswordCache) -> Result<Vec<u8>, AuthError> {
        if !matches!(self.state, ClientState::AwaitingServerFirst) {
            return Err(AuthError::OutOfOrder("server-first-message was already handled"));
        }
        match self.answer_server_first(message, cache) {
            Ok((reply, server_signature)) => {
                self.state = ClientState::AwaitingServerFinal { server_signature };
                Ok(reply)
            }
            Err(err) => {
                self.state = ClientState::Failed;
                Err(err)
            }
        }
    }

    /// Checks the server-final-message: `v=<signature>` must match (when the
    /// ServerKey is known); `e=<error>` becomes [`AuthError::ServerError`].
    pub fn verify_server_final(&self, message: &[u8]) -> Result<(), AuthError> {
        let ClientState::AwaitingServerFinal { server_signature } = &self.state else {
            return Err(AuthError::OutOfOrder("server-final-message must follow a handled server-first-message"));
        };
        let received = parse_server_final(utf8(message)?)?;
        match server_signature {
            Some(expected) if !constant_time_eq(expected, &received) => Err(AuthError::ServerSignatureMismatch),
            _ => Ok(()),
        }
    }

    fn client_first_bare(&self) -> String {
        format!("n={},r={}", self.username, self.nonce)
    }

    /// The client-final-message, and the server signature to expect if known.
    fn answer_server_first(&self, message: &[u8], cache: &mut SaltedPasswordCache) -> Result<(Vec<u8>, Option<Key>), AuthError> {
        let server_first_text = utf8(message)?;
        let server_first = parse_server_first(server_first_text)?;
        check_server_nonce(&self.nonce, server_first.nonce)?;
        if server_first.iterations > self.max_iterations {
            return Err(AuthError::TooManyIterations { iterations: server_first.iterations, max: self.max_iterations });
        }
        let (client_key, server_key) = self.credentials.keys(&server_first.salt, server_first.iterations, cache);
        let without_proof = format!("c={CHANNEL_BINDING_NO_BINDING},r={}", server_first.nonce);
        let auth_message = auth_message(&self.client_first_bare(), server_first_text, &without_proof);
        let proof = client_proof(&client_key, &auth_message);
        let expected_signature = server_key.map(|key| server_signature(&key, &auth_message));
        let reply = format!("{without_proof},p={}", BASE64.encode(proof));
        Ok((reply.into_bytes(), expected_signature))
    }
}

/// The server's nonce must be our nonce followed by at least one character of its own.
fn check_server_nonce(client_nonce: &str, nonce: &str) -> Result<(), AuthError> {
    match nonce.strip_prefix(client_nonce) {
        Some(server_part) if !server_part.is_empty() => Ok(()),
        _ => Err(AuthError::NonceMismatch),
    }
}

impl fmt::Debug for ScramClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let credentials = match self.credentials {
            Credentials::Password(_) => "password",
            Credentials::ClientKey { .. } => "client key",
        };
        let state = match self.state {
            ClientState::AwaitingServerFirst => "awaiting server-first-message",
            ClientState::AwaitingServerFinal { .. } => "awaiting server-final-message",
            ClientState::Failed => "failed",
        };
        f.debug_struct("ScramClient").field("credentials", &credentials).field("state", &state).finish_non_exhaustive()
    }
}

#[cfg(test)]
impl ScramServer {
    /// A server whose nonce part is fixed, to reproduce test vectors.
    fn with_fixed_nonce(secret: ScramSecret, server_nonce: &str) -> Self {
        Self::with_server_nonce(secret, server_nonce.to_owned())
    }
}

#[cfg(test)]
impl ScramClient {
    /// A password client with a fixed nonce and `n=` user name (which must not
    /// need saslname escaping), to reproduce test vectors.
    fn with_fixed_nonce(password: &str, username: &str, nonce: &str) -> Self {
        let mut client = Self::with_credentials(Credentials::Password(password.to_owned()), nonce.to_owned());
        client.username = username.to_owned();
        client
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::test_vectors::*;

    fn rfc7677_secret() -> ScramSecret {
        match Secret::parse(RFC7677_SECRET) {
            Ok(Secret::Scram(secret)) => secret,
            other => panic!("RFC 7677 secret did not parse: {other:?}"),
        }
    }

    fn postgres_15_secret() -> Secret {
        Secret::parse(POSTGRES_15_SECRET).expect("PostgreSQL secret parses")
    }

    /// Runs a whole exchange, returning the first error.
    fn exchange(client: &mut ScramClient, server: &mut ScramServer) -> Result<(), AuthError> {
        let server_first = server.handle_client_first(&client.client_first())?;
        let client_final = client.handle_server_first(&server_first)?;
        let server_final = server.handle_client_final(&client_final)?;
        client.verify_server_final(&server_final)
    }

    /// A server that has answered the RFC 7677 client-first-message.
    fn rfc7677_server_after_first() -> ScramServer {
        let mut server = ScramServer::with_fixed_nonce(rfc7677_secret(), RFC7677_SERVER_NONCE);
        server.handle_client_first(RFC7677_CLIENT_FIRST.as_bytes()).expect("RFC client-first is valid");
        server
    }

    fn rfc7677_client() -> ScramClient {
        ScramClient::with_fixed_nonce(RFC7677_PASSWORD, "user", RFC7677_CLIENT_NONCE)
    }

    fn text(bytes: Vec<u8>) -> String {
        String::from_utf8(bytes).expect("SCRAM output is UTF-8")
    }

    #[test]
    fn gs2_constants_agree() {
        assert_eq!(BASE64.encode(GS2_HEADER_NO_BINDING), CHANNEL_BINDING_NO_BINDING);
    }

    #[test]
    fn rfc7677_vector_server_side() {
        let mut server = ScramServer::with_fixed_nonce(rfc7677_secret(), RFC7677_SERVER_NONCE);
        let server_first = server.handle_client_first(RFC7677_CLIENT_FIRST.as_bytes());
        assert_eq!(server_first.map(text).as_deref(), Ok(RFC7677_SERVER_FIRST));
        assert_eq!(server.client_key(), None);
        let server_final = server.handle_client_final(RFC7677_CLIENT_FINAL.as_bytes());
        assert_eq!(server_final.map(text).as_deref(), Ok(RFC7677_SERVER_FINAL));
        let salted = salted_password(b"pencil", &rfc7677_secret().salt, 4096);
        assert_eq!(server.client_key(), Some(client_key(&salted)));
    }

    #[test]
    fn rfc7677_vector_client_side() {
        let mut client = rfc7677_client();
        assert_eq!(text(client.client_first()), RFC7677_CLIENT_FIRST);
        let client_final = client.handle_server_first(RFC7677_SERVER_FIRST.as_bytes());
        assert_eq!(client_final.map(text).as_deref(), Ok(RFC7677_CLIENT_FINAL));
        assert_eq!(client.verify_server_final(RFC7677_SERVER_FINAL.as_bytes()), Ok(()));
    }

    #[test]
    fn client_first_has_empty_user_and_random_nonce() {
        let first = text(ScramClient::new("pw").client_first());
        let nonce = first.strip_prefix("n,,n=,r=").expect("shape n,,n=,r=<nonce>");
        assert_eq!(nonce.len(), 24);
        assert_eq!(parse_nonce(nonce), Ok(nonce));
        assert_ne!(ScramClient::new("pw").client_first(), first.into_bytes());
    }

    #[test]
    fn server_nonces_are_random() {
        let secret = rfc7677_secret();
        let reply = |server: &mut ScramServer| server.handle_client_first(RFC7677_CLIENT_FIRST.as_bytes());
        let first = reply(&mut ScramServer::new(secret.clone()));
        let second = reply(&mut ScramServer::new(secret));
        assert!(first.is_ok() && second.is_ok());
        assert_ne!(first, second);
    }

    #[test]
    fn password_round_trip_succeeds() {
        let secret = ScramSecret::from_password("s3cret", b"0123456789abcdef", 4096);
        let mut server = ScramServer::new(secret.clone());
        let mut client = ScramClient::new("s3cret");
        assert_eq!(exchange(&mut client, &mut server), Ok(()));
        let salted = salted_password(b"s3cret", &secret.salt, secret.iterations);
        assert_eq!(server.client_key(), Some(client_key(&salted)));
    }

    #[test]
    fn wrong_password_fails_and_ends_the_exchange() {
        let secret = ScramSecret::from_password("s3cret", b"salt", 16);
        let mut server = ScramServer::new(secret);
        let mut client = ScramClient::new("s3cret!");
        let server_first = server.handle_client_first(&client.client_first()).expect("first");
        let client_final = client.handle_server_first(&server_first).expect("final");
        assert_eq!(server.handle_client_final(&client_final), Err(AuthError::WrongPassword));
        assert_eq!(server.client_key(), None);
        assert!(matches!(server.handle_client_final(&client_final), Err(AuthError::OutOfOrder(_))));
    }

    #[test]
    fn tampered_proof_is_wrong_password() {
        let mut server = rfc7677_server_after_first();
        let tampered = RFC7677_CLIENT_FINAL.replace("p=dHzb", "p=dHzc");
        assert_eq!(server.handle_client_final(tampered.as_bytes()), Err(AuthError::WrongPassword));
    }

    #[test]
    fn tampered_nonce_is_rejected() {
        let mut server = rfc7677_server_after_first();
        let tampered = RFC7677_CLIENT_FINAL.replace("$k0,", "$k1,");
        assert_eq!(server.handle_client_final(tampered.as_bytes()), Err(AuthError::NonceMismatch));
    }

    #[test]
    fn tampered_server_first_is_wrong_password() {
        // Anything in the AuthMessage changing invalidates the proof.
        let mut server = ScramServer::new(rfc7677_secret());
        let mut client = ScramClient::new(RFC7677_PASSWORD);
        let server_first = text(server.handle_client_first(&client.client_first()).expect("first"));
        let tampered = format!("{server_first},x=injected");
        let client_final = client.handle_server_first(tampered.as_bytes()).expect("final");
        assert_eq!(server.handle_client_final(&client_final), Err(AuthError::WrongPassword));
    }

    #[test]
    fn client_rejects_server_nonce_that_does_not_extend_its_own() {
        let salt_and_iterations = ",s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096";
        for nonce in ["rOprNGfwEbeRWgbNEkqO", "rOprNGfwEbeRWgbNEkqX%hv", "X", "rOprNGfwEbeRWgbNEkq"] {
            let mut client = rfc7677_client();
            let server_first = format!("r={nonce}{salt_and_iterations}");
            assert_eq!(client.handle_server_first(server_first.as_bytes()), Err(AuthError::NonceMismatch), "{nonce}");
        }
    }

    #[test]
    fn client_detects_forged_server_signature() {
        let mut client = rfc7677_client();
        client.handle_server_first(RFC7677_SERVER_FIRST.as_bytes()).expect("final");
        let forged = RFC7677_SERVER_FINAL.replace("v=6rri", "v=6rrj");
        assert_eq!(client.verify_server_final(forged.as_bytes()), Err(AuthError::ServerSignatureMismatch));
    }

    #[test]
    fn recovered_client_key_logs_in_to_a_second_server() {
        let secret = ScramSecret::from_password("s3cret", b"per-user salt", 4096);
        let mut first_server = ScramServer::new(secret.clone());
        assert_eq!(exchange(&mut ScramClient::new("s3cret"), &mut first_server), Ok(()));
        let client_key = first_server.client_key().expect("key after success");

        let mut checked = ScramClient::with_client_key(client_key, Some(secret.server_key));
        assert_eq!(exchange(&mut checked, &mut ScramServer::new(secret.clone())), Ok(()));

        let mut unchecked = ScramClient::with_client_key(client_key, None);
        assert_eq!(exchange(&mut unchecked, &mut ScramServer::new(secret.clone())), Ok(()));
    }

    #[test]
    fn client_key_login_checks_server_key_when_given() {
        let secret = ScramSecret::from_password("s3cret", b"salt", 16);
        let client_key = client_key(&salted_password(b"s3cret", b"salt", 16));
        let mut client = ScramClient::with_client_key(client_key, Some([7; 32]));
        assert_eq!(exchange(&mut client, &mut ScramServer::new(secret)), Err(AuthError::ServerSignatureMismatch));
    }

    #[test]
    fn client_key_does_not_work_against_a_differently_salted_verifier() {
        let client_key = client_key(&salted_password(b"s3cret", b"salt one", 16));
        let other_verifier = ScramSecret::from_password("s3cret", b"salt two", 16);
        let mut client = ScramClient::with_client_key(client_key, None);
        assert_eq!(exchange(&mut client, &mut ScramServer::new(other_verifier)), Err(AuthError::WrongPassword));
    }

    #[test]
    fn postgres_15_secret_authenticates_the_right_password_only() {
        let secret = postgres_15_secret();
        let mut right = ScramClient::new(POSTGRES_15_PASSWORD);
        let mut server = ScramServer::from_secret(&secret).expect("SCRAM secret");
        assert_eq!(exchange(&mut right, &mut server), Ok(()));

        let mut wrong = ScramClient::new("correct horse ");
        let mut server = ScramServer::from_secret(&secret).expect("SCRAM secret");
        assert_eq!(exchange(&mut wrong, &mut server), Err(AuthError::WrongPassword));
    }

    #[test]
    fn plaintext_secret_gets_a_fresh_verifier() {
        let secret = Secret::Plain("pw".into());
        let mut server = ScramServer::from_secret(&secret).expect("plaintext works");
        assert_eq!(exchange(&mut ScramClient::new("pw"), &mut server), Ok(()));
        let mut server = ScramServer::from_secret(&secret).expect("plaintext works");
        assert_eq!(exchange(&mut ScramClient::new("wrong"), &mut server), Err(AuthError::WrongPassword));
    }

    #[test]
    fn md5_secret_cannot_do_scram() {
        let secret = Secret::parse("md553f48b7c4b76a86ce72276c5755f217d").expect("md5");
        assert_eq!(
            ScramServer::from_secret(&secret).map(|_| ()),
            Err(AuthError::IncompatibleSecret { method: "SCRAM-SHA-256", secret: "md5" })
        );
    }

    #[test]
    fn gs2_flag_y_is_accepted_with_matching_binding_echo() {
        let mut server = ScramServer::with_fixed_nonce(rfc7677_secret(), "S");
        server.handle_client_first(b"y,,n=user,r=abc").expect("y accepted");
        // The echo must be base64("y,,"); "biws" (the RFC vector's) is a mismatch.
        let final_with_wrong_echo = b"c=biws,r=abcS,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=";
        assert_eq!(server.handle_client_final(final_with_wrong_echo), Err(AuthError::ChannelBindingMismatch));

        let secret = rfc7677_secret();
        let mut server = ScramServer::with_fixed_nonce(secret, "S");
        server.handle_client_first(b"y,,n=user,r=abc").expect("y accepted");
        let salted = salted_password(b"pencil", &rfc7677_secret().salt, 4096);
        let server_first = format!("r=abcS,s={RFC7677_SALT},i=4096");
        let without_proof = "c=eSws,r=abcS";
        let proof = client_proof(&client_key(&salted), &auth_message("n=user,r=abc", &server_first, without_proof));
        let client_final = format!("{without_proof},p={}", BASE64.encode(proof));
        assert!(server.handle_client_final(client_final.as_bytes()).is_ok());
    }

    #[test]
    fn extensions_are_ignored_but_covered_by_the_proof() {
        let mut server = ScramServer::with_fixed_nonce(rfc7677_secret(), "S");
        server.handle_client_first(b"n,,n=user,r=abc,x=ext").expect("extension ignored");
        let salted = salted_password(b"pencil", &rfc7677_secret().salt, 4096);
        let server_first = format!("r=abcS,s={RFC7677_SALT},i=4096");
        let without_proof = "c=biws,r=abcS,y=another";
        let proof = client_proof(&client_key(&salted), &auth_message("n=user,r=abc,x=ext", &server_first, without_proof));
        let client_final = format!("{without_proof},p={}", BASE64.encode(proof));
        assert!(server.handle_client_final(client_final.as_bytes()).is_ok());
    }

    #[test]
    fn unsupported_client_features_are_rejected() {
        let cases: [(&[u8], AuthError); 4] = [
            (b"p=tls-server-end-point,,n=,r=abc", AuthError::Unsupported("")),
            (b"n,a=admin,n=,r=abc", AuthError::Unsupported("")),
            (b"n,,m=mandatory,n=,r=abc", AuthError::Unsupported("")),
            (b"n,x=admin,n=,r=abc", AuthError::MalformedMessage("")),
        ];
        for (message, expected) in cases {
            let result = ScramServer::new(rfc7677_secret()).handle_client_first(message);
            assert_eq!(
                std::mem::discriminant(&result.expect_err("rejected")),
                std::mem::discriminant(&expected),
                "{}",
                String::from_utf8_lossy(message)
            );
        }
    }

    #[test]
    fn server_error_is_reported_with_its_text() {
        let mut client = rfc7677_client();
        client.handle_server_first(RFC7677_SERVER_FIRST.as_bytes()).expect("final");
        assert_eq!(client.verify_server_final(b"e=invalid-proof"), Err(AuthError::ServerError("invalid-proof".into())));
    }

    #[test]
    fn steps_out_of_order_are_rejected() {
        let mut server = ScramServer::new(rfc7677_secret());
        assert!(matches!(server.handle_client_final(RFC7677_CLIENT_FINAL.as_bytes()), Err(AuthError::OutOfOrder(_))));
        let mut server = rfc7677_server_after_first();
        assert!(matches!(server.handle_client_first(RFC7677_CLIENT_FIRST.as_bytes()), Err(AuthError::OutOfOrder(_))));
        // An out-of-order call does not disturb the exchange in progress.
        assert!(server.handle_client_final(RFC7677_CLIENT_FINAL.as_bytes()).is_ok());
        assert!(server.client_key().is_some());

        let mut client = rfc7677_client();
        assert!(matches!(client.verify_server_final(RFC7677_SERVER_FINAL.as_bytes()), Err(AuthError::OutOfOrder(_))));
        client.handle_server_first(RFC7677_SERVER_FIRST.as_bytes()).expect("final");
        assert!(matches!(client.handle_server_first(RFC7677_SERVER_FIRST.as_bytes()), Err(AuthError::OutOfOrder(_))));
    }

    #[test]
    fn failed_client_step_ends_the_exchange() {
        let mut client = rfc7677_client();
        assert!(client.handle_server_first(b"garbage").is_err());
        assert!(matches!(client.handle_server_first(RFC7677_SERVER_FIRST.as_bytes()), Err(AuthError::OutOfOrder(_))));
    }

    #[test]
    fn garbage_client_first_messages_are_errors() {
        let cases: &[&[u8]] = &[
            b"",
            b"n",
            b"n,",
            b"n,,",
            b",,n=user,r=abc",
            b"x,,n=user,r=abc",
            b"nn,,n=user,r=abc",
            b"n,,r=abc",
            b"n,,n=user",
            b"n,,n=user,",
            b"n,,n=user,r=",
            b"n,,n=user,r=a b",
            b"n,,n=user,r=abc,",
            b"n,,n=user,r=abc,=x",
            b"n,,n=user,r=abc,xy=1",
            b"n,,n=user,r=abc,x",
            b"n,,user,r=abc",
            b"n,,n=user,r=\xc3\xa9",
            b"n,,n=us\xffer,r=abc",
            b"\xff\xfe\xfd",
        ];
        for &message in cases {
            let result = ScramServer::new(rfc7677_secret()).handle_client_first(message);
            assert!(result.is_err(), "{:?} accepted", String::from_utf8_lossy(message));
        }
        let non_utf8 = ScramServer::new(rfc7677_secret()).handle_client_first(b"n,,n=\xff,r=abc");
        assert_eq!(non_utf8, Err(AuthError::NotUtf8));
    }

    #[test]
    fn garbage_client_final_messages_are_errors() {
        const PROOF: &str = "p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=";
        const NONCE: &str = "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0";
        let cases: Vec<(String, AuthError)> = vec![
            (String::new(), AuthError::MissingAttribute('p')),
            ("c=biws".into(), AuthError::MissingAttribute('p')),
            (format!("c=biws,{NONCE}"), AuthError::UnexpectedAttribute { expected: 'p', found: 'r' }),
            (PROOF.into(), AuthError::MissingAttribute('p')),
            (format!(",{PROOF}"), AuthError::MalformedMessage("")),
            (format!("c=biws,{NONCE},p="), AuthError::InvalidBase64('p')),
            (format!("c=biws,{NONCE},p=!!!!"), AuthError::InvalidBase64('p')),
            (format!("c=biws,{NONCE},p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndQ=="), AuthError::InvalidBase64('p')),
            (format!("c=bi!s,{NONCE},{PROOF}"), AuthError::InvalidBase64('c')),
            (format!("c=,{NONCE},{PROOF}"), AuthError::ChannelBindingMismatch),
            (format!("{NONCE},c=biws,{PROOF}"), AuthError::UnexpectedAttribute { expected: 'c', found: 'r' }),
            (format!("c=biws,{PROOF}"), AuthError::MissingAttribute('r')),
            (format!("c=biws,r=,{PROOF}"), AuthError::NonceMismatch),
            (format!("c=biws,{NONCE},{PROOF},x=1"), AuthError::UnexpectedAttribute { expected: 'p', found: 'x' }),
            (format!("c=biws,{NONCE},,{PROOF}"), AuthError::MalformedMessage("")),
            (format!("c=biws,{NONCE},{PROOF}\0"), AuthError::InvalidBase64('p')),
        ];
        for (message, expected) in cases {
            let result = rfc7677_server_after_first().handle_client_final(message.as_bytes());
            let err = result.expect_err(&message);
            assert_eq!(std::mem::discriminant(&err), std::mem::discriminant(&expected), "{message:?}: {err:?}");
            if !matches!(expected, AuthError::MalformedMessage(_)) {
                assert_eq!(err, expected, "{message:?}");
            }
        }
        let non_utf8 = rfc7677_server_after_first().handle_client_final(b"c=biws,r=\xff,p=AA==");
        assert_eq!(non_utf8, Err(AuthError::NotUtf8));
    }

    #[test]
    fn garbage_server_first_messages_are_errors() {
        const NONCE: &str = "r=rOprNGfwEbeRWgbNEkqO%hv";
        const SALT: &str = "s=W22ZaJ0SNY7soEsUEjb6gQ==";
        let huge = "9".repeat(100_000);
        let cases: Vec<(String, AuthError)> = vec![
            (String::new(), AuthError::MalformedMessage("")),
            ("r=".into(), AuthError::InvalidNonce),
            (NONCE.into(), AuthError::MissingAttribute('s')),
            (format!("{NONCE},s=,i=4096"), AuthError::InvalidBase64('s')),
            (format!("{NONCE},s=!!!!,i=4096"), AuthError::InvalidBase64('s')),
            (format!("{NONCE},s=W22ZaJ0SNY7soEsUEjb6gQ,i=4096"), AuthError::InvalidBase64('s')),
            (format!("{NONCE},{SALT}"), AuthError::MissingAttribute('i')),
            (format!("{NONCE},{SALT},i="), AuthError::InvalidIterationCount),
            (format!("{NONCE},{SALT},i=0"), AuthError::InvalidIterationCount),
            (format!("{NONCE},{SALT},i=-1"), AuthError::InvalidIterationCount),
            (format!("{NONCE},{SALT},i=+4096"), AuthError::InvalidIterationCount),
            (format!("{NONCE},{SALT},i= 4096"), AuthError::InvalidIterationCount),
            (format!("{NONCE},{SALT},i=4096x"), AuthError::InvalidIterationCount),
            (format!("{NONCE},{SALT},i=4294967296"), AuthError::InvalidIterationCount),
            (format!("{NONCE},{SALT},i={huge}"), AuthError::InvalidIterationCount),
            (format!("{NONCE},{SALT},i=4096,"), AuthError::MalformedMessage("")),
            (format!("{SALT},{NONCE},i=4096"), AuthError::UnexpectedAttribute { expected: 'r', found: 's' }),
            (format!("m=ext,{NONCE},{SALT},i=4096"), AuthError::Unsupported("")),
            (format!("{NONCE}\u{e9},{SALT},i=4096"), AuthError::InvalidNonce),
        ];
        for (message, expected) in cases {
            let err = rfc7677_client().handle_server_first(message.as_bytes()).expect_err(&message);
            assert_eq!(std::mem::discriminant(&err), std::mem::discriminant(&expected), "{message:?}: {err:?}");
        }
        let non_utf8 = rfc7677_client().handle_server_first(b"r=rOprNGfwEbeRWgbNEkqO\xff,s=AA==,i=1");
        assert_eq!(non_utf8, Err(AuthError::NotUtf8));
    }

    #[test]
    fn server_first_extensions_are_accepted() {
        let mut client = rfc7677_client();
        let with_extension = format!("{RFC7677_SERVER_FIRST},x=ext");
        assert!(client.handle_server_first(with_extension.as_bytes()).is_ok());
    }

    #[test]
    fn garbage_server_final_messages_are_errors() {
        let cases: &[&[u8]] = &[
            b"",
            b"v=",
            b"v=!!!!",
            b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4",
            b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95A==",
            b"x=1",
            b"r=abc",
            b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=,",
            b"\xff",
            b"e=\xff",
        ];
        for &message in cases {
            let mut client = rfc7677_client();
            client.handle_server_first(RFC7677_SERVER_FIRST.as_bytes()).expect("final");
            let result = client.verify_server_final(message);
            assert!(result.is_err(), "{:?} accepted", String::from_utf8_lossy(message));
            // Without a ServerKey nothing is compared, but parsing is just as strict.
            let mut keyless = ScramClient::with_client_key([0; 32], None);
            keyless.nonce = RFC7677_CLIENT_NONCE.to_owned();
            keyless.handle_server_first(RFC7677_SERVER_FIRST.as_bytes()).expect("final");
            assert!(keyless.verify_server_final(message).is_err());
        }
    }

    #[test]
    fn every_truncation_of_valid_messages_is_handled_without_panic() {
        // Prefixes may still be valid (or not); what matters is no panic.
        for end in 0..=RFC7677_CLIENT_FIRST.len() {
            let _ = ScramServer::new(rfc7677_secret()).handle_client_first(&RFC7677_CLIENT_FIRST.as_bytes()[..end]);
        }
        for end in 0..=RFC7677_CLIENT_FINAL.len() {
            let _ = rfc7677_server_after_first().handle_client_final(&RFC7677_CLIENT_FINAL.as_bytes()[..end]);
        }
        for end in 0..=RFC7677_SERVER_FIRST.len() {
            let prefix = &RFC7677_SERVER_FIRST.as_bytes()[..end];
            let _ = ScramClient::with_client_key([0; 32], None).handle_server_first(prefix);
            let _ = parse_server_first(utf8(prefix).unwrap_or(""));
        }
        for end in 0..=RFC7677_SERVER_FINAL.len() {
            let _ = parse_server_final(&RFC7677_SERVER_FINAL[..end]);
        }
    }

    #[test]
    fn iteration_count_parser() {
        assert_eq!(parse_iteration_count("1"), Ok(1));
        assert_eq!(parse_iteration_count("4096"), Ok(4096));
        assert_eq!(parse_iteration_count("4294967295"), Ok(u32::MAX));
        for bad in ["", "0", "00", "-5", "+5", "4 096", "0x10", "4294967296", "１２"] {
            assert_eq!(parse_iteration_count(bad), Err(AuthError::InvalidIterationCount), "{bad}");
        }
    }

    #[test]
    fn clients_refuse_iteration_counts_above_their_limit() {
        let secret = rfc7677_secret(); // 4096 iterations
        let mut server = ScramServer::new(secret.clone());
        let mut client = ScramClient::new(RFC7677_PASSWORD).with_max_iterations(4095);
        assert_eq!(exchange(&mut client, &mut server), Err(AuthError::TooManyIterations { iterations: 4096, max: 4095 }));
        let message = AuthError::TooManyIterations { iterations: 4096, max: 4095 }.to_string();
        assert!(message.contains("server_scram_max_iterations"), "{message}");
        // The limit itself is allowed, and the default is well above PostgreSQL's.
        let mut client = ScramClient::new(RFC7677_PASSWORD).with_max_iterations(4096);
        assert_eq!(exchange(&mut client, &mut ScramServer::new(secret.clone())), Ok(()));
        let mut client = ScramClient::new(RFC7677_PASSWORD);
        assert_eq!(exchange(&mut client, &mut ScramServer::new(secret)), Ok(()));
    }

    /// Runs a whole exchange with a cache on the client side.
    fn cached_exchange(password: &str, secret: &ScramSecret, cache: &mut SaltedPasswordCache) -> Result<(), AuthError> {
        let mut client = ScramClient::new(password);
        let mut server = ScramServer::new(secret.clone());
        let server_first = server.handle_client_first(&client.client_first())?;
        let client_final = client.handle_server_first_cached(&server_first, cache)?;
        let server_final = server.handle_client_final(&client_final)?;
        client.verify_server_final(&server_final)
    }

    #[test]
    fn salted_passwords_are_derived_once_per_password_salt_and_count() {
        let mut cache = SaltedPasswordCache::new(8);
        let secret = rfc7677_secret();
        cached_exchange(RFC7677_PASSWORD, &secret, &mut cache).unwrap();
        assert_eq!(cache.len(), 1);
        // The cached key is the right one: the next exchanges succeed from it.
        for _ in 0..3 {
            cached_exchange(RFC7677_PASSWORD, &secret, &mut cache).unwrap();
        }
        assert_eq!(cache.len(), 1);
        // Another salt, another count or another password is another entry,
        // never a wrong hit.
        let other_salt = ScramSecret::from_password(RFC7677_PASSWORD, b"another salt", 4096);
        let other_count = ScramSecret::from_password(RFC7677_PASSWORD, &secret.salt, 4097);
        cached_exchange(RFC7677_PASSWORD, &other_salt, &mut cache).unwrap();
        cached_exchange(RFC7677_PASSWORD, &other_count, &mut cache).unwrap();
        assert_eq!(cache.len(), 3);
        assert_eq!(cached_exchange("not pencil", &secret, &mut cache), Err(AuthError::WrongPassword));
        assert_eq!(cache.len(), 4);
    }

    #[test]
    fn the_cache_is_bounded_and_capacity_zero_keeps_nothing() {
        let mut cache = SaltedPasswordCache::new(2);
        for i in 0..5u32 {
            let _ = cache.get_or_derive("pw", b"salt", i + 1);
            assert!(cache.len() <= 2);
        }
        let mut none = SaltedPasswordCache::new(0);
        assert_eq!(none.get_or_derive("pw", b"salt", 2), salted_password(b"pw", b"salt", 2));
        assert!(none.is_empty());
        assert!(!format!("{cache:?}").contains("pw"));
    }

    #[test]
    fn debug_output_is_redacted() {
        let server = format!("{:?}", ScramServer::new(rfc7677_secret()));
        assert!(!server.contains("WG5d8"), "{server}");
        let client = format!("{:?}", ScramClient::new("hunter2"));
        assert!(!client.contains("hunter2"), "{client}");
    }
}
