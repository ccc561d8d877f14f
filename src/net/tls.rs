//! TLS on both of pglane's sides, with rustls (ring as the crypto provider).
//!
//! This module owns turning the `client_tls_*` / `server_tls_*` settings into
//! rustls configs, the certificate checks of each sslmode, and the two
//! upgrades of a [`Stream`]: answering a client's SSLRequest with a TLS
//! handshake ([`accept`]) and asking a server for TLS ([`negotiate`]). The
//! rustls configs are read from disk once per config load (in
//! `Config::validate`, so `--check` reports a bad file) and shared read-only
//! by all shards. It never decides whether a plaintext client is acceptable
//! (`client::login` does, from the mode) and is never on the query path:
//! after the handshake, bytes go through [`Stream::Tls`].

use std::fmt;
use std::io;
use std::net::Ipv4Addr;
use std::path::Path;
use std::sync::{Arc, OnceLock};

use futures_lite::{AsyncReadExt, AsyncWriteExt};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::{verify_tls12_signature, verify_tls13_signature, CryptoProvider};
use rustls::pki_types::pem::{self, PemObject};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::server::WebPkiClientVerifier;
use rustls::{CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, ServerConfig, SignatureScheme};
use tracing::info;

use super::Stream;
use crate::config::{Config, ServerAddress, SslMode};

/// The ALPN protocol PostgreSQL 17 names; older servers and clients ignore it.
const ALPN_POSTGRESQL: &[u8] = b"postgresql";

/// SSLRequest: length 8, code 1234.5679.
const SSL_REQUEST: [u8; 8] = [0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f];

fn provider() -> Arc<CryptoProvider> {
    static PROVIDER: OnceLock<Arc<CryptoProvider>> = OnceLock::new();
    PROVIDER.get_or_init(|| Arc::new(rustls::crypto::ring::default_provider())).clone()
}

/// The loaded TLS settings of one config.
#[derive(Clone, Default)]
pub struct Contexts {
    /// pglane as a TLS server to its clients; `None` when client_tls_sslmode = disable.
    pub clients: Option<Arc<ServerConfig>>,
    /// pglane as a TLS client of its servers; `None` when server_tls_sslmode = disable.
    pub servers: Option<Arc<ClientConfig>>,
}

impl fmt::Debug for Contexts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Contexts").field("clients", &self.clients.is_some()).field("servers", &self.servers.is_some()).finish()
    }
}

impl Contexts {
    /// Reads and checks every TLS file `config` names (even those its modes
    /// do not use) and builds the rustls configs its modes need.
    pub fn load(config: &Config) -> Result<Contexts, String> {
        let cert = optional(&config.client_tls_cert_file, "client_tls_cert_file", read_certs)?;
        let key = optional(&config.client_tls_key_file, "client_tls_key_file", read_key)?;
        let ca = optional(&config.client_tls_ca_file, "client_tls_ca_file", read_roots)?;
        let mode = config.client_tls_sslmode;
        let clients = match (mode, cert, key) {
            (SslMode::Disable, ..) => None,
            (_, Some(cert), Some(key)) => {
                if mode.verifies() && ca.is_none() {
                    return Err(format!(
                        "client_tls_sslmode = \"{mode}\" needs client_tls_ca_file, the CA that signs client certificates"
                    ));
                }
                Some(Arc::new(server_config(cert, key, ca.filter(|_| mode.verifies()))?))
            }
            _ => return Err(format!("client_tls_sslmode = \"{mode}\" needs client_tls_cert_file and client_tls_key_file")),
        };

        let cert = optional(&config.server_tls_cert_file, "server_tls_cert_file", read_certs)?;
        let key = optional(&config.server_tls_key_file, "server_tls_key_file", read_key)?;
        let ca = optional(&config.server_tls_ca_file, "server_tls_ca_file", read_roots)?;
        let identity = match (cert, key) {
            (Some(cert), Some(key)) => Some((cert, key)),
            (None, None) => None,
            _ => return Err("server_tls_cert_file and server_tls_key_file go together (a client certificate for servers)".into()),
        };
        let mode = config.server_tls_sslmode;
        let servers = match mode {
            SslMode::Disable => None,
            _ if mode.verifies() && ca.is_none() => {
                return Err(format!(
                    "server_tls_sslmode = \"{mode}\" needs server_tls_ca_file, the CA that signs the servers' certificates"
                ))
            }
            _ => Some(Arc::new(client_config(mode, ca, identity)?)),
        };
        if mode != SslMode::Disable {
            for (name, db) in &config.databases {
                for address in db.addresses() {
                    if let ServerAddress::Tcp { host, .. } = address {
                        ServerName::try_from(host.as_str()).map_err(|_| {
                            format!(
                                "databases.{name}.host = {host:?} is not a name TLS can check (server_tls_sslmode = \"{mode}\")"
                            )
                        })?;
                    }
                }
            }
        }
        Ok(Contexts { clients, servers })
    }
}

/// The loaded settings of `config` (loaded now if `validate` never ran).
fn contexts(config: &Config) -> &Contexts {
    config.tls.get_or_init(|| {
        Contexts::load(config).unwrap_or_else(|e| {
            tracing::error!("TLS settings: {e}");
            Contexts::default()
        })
    })
}

/// The TLS config for clients that ask for TLS; `None` when
/// client_tls_sslmode = disable (SSLRequest is answered "N").
pub fn acceptor(config: &Config) -> Option<Arc<ServerConfig>> {
    contexts(config).clients.clone()
}

/// How pglane opens TLS to one server.
#[derive(Debug, Clone)]
pub struct ServerTls {
    pub mode: SslMode,
    config: Arc<ClientConfig>,
    /// The host name (or address) the certificate must name under verify-full.
    name: ServerName<'static>,
}

/// How to talk to the server at `address` under `config`: `None` for
/// plaintext (server_tls_sslmode = disable, or a unix socket).
pub fn server_tls(config: &Config, address: &ServerAddress) -> Option<ServerTls> {
    let ServerAddress::Tcp { host, .. } = address else { return None };
    if config.server_tls_sslmode == SslMode::Disable {
        return None;
    }
    // `validate` built the config and checked the name; should either be
    // missing anyway, fail closed (trust nothing) rather than go plaintext.
    let tls_config = contexts(config).servers.clone().unwrap_or_else(trusting_nothing);
    let name = ServerName::try_from(host.clone()).unwrap_or(ServerName::IpAddress(Ipv4Addr::UNSPECIFIED.into()));
    Some(ServerTls { mode: config.server_tls_sslmode, config: tls_config, name })
}

/// TLS as a libpq client asks a server for it under `sslmode` (pgload's
/// side, not pglane's): `None` for `disable`; `root_cert` is the CA file
/// verify-ca and verify-full check the server's certificate against (and
/// require), `host` the name verify-full checks it for.
pub fn libpq_client(mode: SslMode, root_cert: Option<&Path>, host: &str) -> Result<Option<ServerTls>, String> {
    if mode == SslMode::Disable {
        return Ok(None);
    }
    let roots = match root_cert {
        Some(path) => Some(read_roots("sslrootcert", path)?),
        None if mode.verifies() => return Err(format!("sslmode = {mode} needs a root certificate file (sslrootcert)")),
        None => None,
    };
    let name = ServerName::try_from(host.to_owned()).map_err(|_| format!("{host:?} is not a name TLS can check"))?;
    Ok(Some(ServerTls { mode, config: Arc::new(client_config(mode, roots, None)?), name }))
}

fn trusting_nothing() -> Arc<ClientConfig> {
    let roots = Arc::new(RootCertStore::empty());
    Arc::new(
        ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .expect("ring supports the default TLS versions")
            .with_root_certificates(roots)
            .with_no_client_auth(),
    )
}

/// Why TLS with a server could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("the server does not support SSL, and server_tls_sslmode = \"{0}\" requires it")]
    NotOffered(SslMode),
    #[error("the server answered the SSL request with {0:?}, not 'S' or 'N'")]
    Unexpected(char),
    #[error("received unencrypted data after the server's SSL response")]
    Unencrypted,
    #[error("handshake failed: {0}")]
    Handshake(io::Error),
    #[error("the server closed the connection after the SSL request")]
    Closed,
    #[error("{0}")]
    Io(#[from] io::Error),
}

/// Asks a server for TLS on a new connection (SSLRequest) and, if it agrees,
/// makes `stream` a TLS stream. If the server declines, `stream` stays
/// plaintext when `tls.mode` allows that and the answer is an error if not.
pub async fn negotiate(stream: &mut Stream, tls: &ServerTls) -> Result<(), TlsError> {
    stream.write_all(&SSL_REQUEST).await?;
    // Exactly one byte: what follows 'S' must come through TLS.
    let mut answer = [0u8; 1];
    stream.read_exact(&mut answer).await.map_err(|e| match e.kind() {
        io::ErrorKind::UnexpectedEof => TlsError::Closed,
        _ => TlsError::Io(e),
    })?;
    match answer[0] {
        b'S' if stream.has_unread_bytes() => Err(TlsError::Unencrypted),
        b'S' => {
            let plain = std::mem::replace(stream, Stream::Detached);
            let connector = futures_rustls::TlsConnector::from(tls.config.clone());
            let tls_stream = connector.connect(tls.name.clone(), plain).await.map_err(TlsError::Handshake)?;
            *stream = Stream::Tls(Box::new(tls_stream.into()));
            Ok(())
        }
        b'N' if tls.mode.requires_tls() => Err(TlsError::NotOffered(tls.mode)),
        b'N' => Ok(()),
        other => Err(TlsError::Unexpected(char::from(other))),
    }
}

/// Runs the server side of a TLS handshake on a client that sent SSLRequest
/// and has been answered 'S'; `stream` becomes a TLS stream. On failure it is
/// left detached (the connection is over).
pub async fn accept(stream: &mut Stream, config: Arc<ServerConfig>) -> io::Result<()> {
    let plain = std::mem::replace(stream, Stream::Detached);
    match futures_rustls::TlsAcceptor::from(config).accept(plain).await {
        Ok(tls_stream) => {
            *stream = Stream::Tls(Box::new(tls_stream.into()));
            Ok(())
        }
        Err(e) => {
            info!("TLS handshake with a client failed: {e}");
            Err(e)
        }
    }
}

fn optional<T>(
    path: &Option<std::path::PathBuf>,
    key: &str,
    read: impl FnOnce(&str, &Path) -> Result<T, String>,
) -> Result<Option<T>, String> {
    path.as_deref().map(|p| read(key, p)).transpose()
}

fn read_file(key: &str, path: &Path) -> Result<Vec<u8>, String> {
    std::fs::read(path).map_err(|e| format!("{key} {}: {e}", path.display()))
}

fn read_certs(key: &str, path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let pem = read_file(key, path)?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("{key} {}: {e}", path.display()))?;
    if certs.is_empty() {
        return Err(format!("{key} {}: no PEM certificate (BEGIN CERTIFICATE) in it", path.display()));
    }
    Ok(certs)
}

fn read_key(key: &str, path: &Path) -> Result<PrivateKeyDer<'static>, String> {
    let pem = read_file(key, path)?;
    PrivateKeyDer::from_pem_slice(&pem).map_err(|e| match e {
        pem::Error::NoItemsFound => {
            format!("{key} {}: no PEM private key (BEGIN PRIVATE KEY, RSA PRIVATE KEY or EC PRIVATE KEY) in it", path.display())
        }
        e => format!("{key} {}: {e}", path.display()),
    })
}

fn read_roots(key: &str, path: &Path) -> Result<RootCertStore, String> {
    let mut roots = RootCertStore::empty();
    for cert in read_certs(key, path)? {
        roots.add(cert).map_err(|e| format!("{key} {}: {e}", path.display()))?;
    }
    Ok(roots)
}

/// pglane as a TLS server for clients; with `client_ca`, clients must show a
/// certificate it signed.
fn server_config(
    cert: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
    client_ca: Option<RootCertStore>,
) -> Result<ServerConfig, String> {
    let builder =
        ServerConfig::builder_with_provider(provider()).with_safe_default_protocol_versions().map_err(|e| e.to_string())?;
    let builder = match client_ca {
        Some(roots) => {
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider())
                .build()
                .map_err(|e| format!("client_tls_ca_file: {e}"))?;
            builder.with_client_cert_verifier(verifier)
        }
        None => builder.with_no_client_auth(),
    };
    let mut config =
        builder.with_single_cert(cert, key).map_err(|e| format!("client_tls_cert_file and client_tls_key_file: {e}"))?;
    config.alpn_protocols = vec![ALPN_POSTGRESQL.to_vec()];
    Ok(config)
}

/// pglane as a TLS client of servers, checking what `mode` asks: nothing
/// (allow, prefer, require without a CA file), the chain (require with a CA
/// file, as libpq does, and verify-ca), or the chain and the name (verify-full).
fn client_config(
    mode: SslMode,
    ca: Option<RootCertStore>,
    identity: Option<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>)>,
) -> Result<ClientConfig, String> {
    let verifier: Arc<dyn ServerCertVerifier> = match ca {
        Some(roots) if mode >= SslMode::Require => {
            let webpki = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider())
                .build()
                .map_err(|e| format!("server_tls_ca_file: {e}"))?;
            if mode == SslMode::VerifyFull {
                webpki
            } else {
                Arc::new(ChainOnly(webpki))
            }
        }
        _ => Arc::new(NoCheck(provider())),
    };
    let builder = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .dangerous()
        .with_custom_certificate_verifier(verifier);
    let mut config = match identity {
        Some((cert, key)) => {
            builder.with_client_auth_cert(cert, key).map_err(|e| format!("server_tls_cert_file and server_tls_key_file: {e}"))?
        }
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = vec![ALPN_POSTGRESQL.to_vec()];
    Ok(config)
}

/// verify-ca: the chain must lead to the CA file; the name is not checked.
#[derive(Debug)]
struct ChainOnly(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for ChainOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        // webpki checks the name last, after the chain: a name error means
        // the chain was good.
        match self.0.verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now) {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

/// allow, prefer, require without a CA file: any certificate (encryption
/// against passive listeners only, as libpq). The handshake's signatures are
/// still checked, so the peer holds the key of the certificate it showed.
#[derive(Debug)]
struct NoCheck(Arc<CryptoProvider>);

impl ServerCertVerifier for NoCheck {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    /// A test CA (rcgen) that signs leaf certificates.
    struct Ca {
        issuer: rcgen::Issuer<'static, rcgen::KeyPair>,
        pem: String,
    }

    fn ca(name: &str) -> Ca {
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params.distinguished_name.push(rcgen::DnType::CommonName, name);
        let key = rcgen::KeyPair::generate().unwrap();
        let pem = params.self_signed(&key).unwrap().pem();
        Ca { issuer: rcgen::Issuer::new(params, key), pem }
    }

    /// (certificate PEM, key PEM) for `names`, signed by `ca`.
    fn leaf(ca: &Ca, names: &[&str], purpose: rcgen::ExtendedKeyUsagePurpose) -> (String, String) {
        let mut params = rcgen::CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>()).unwrap();
        params.distinguished_name.push(rcgen::DnType::CommonName, names.first().copied().unwrap_or("client"));
        params.extended_key_usages = vec![purpose];
        let key = rcgen::KeyPair::generate().unwrap();
        (params.signed_by(&key, &ca.issuer).unwrap().pem(), key.serialize_pem())
    }

    fn dir() -> PathBuf {
        static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("pglane-tls-unit-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn write(dir: &Path, name: &str, text: &str) -> String {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        path.display().to_string()
    }

    const MINIMAL: &str = "listen = \"127.0.0.1:6432\"\n";
    const DATABASE: &str = "\n[databases.app]\nhost = \"localhost\"\n";

    fn parse(settings: &str) -> Result<Config, String> {
        Config::parse(&format!("{MINIMAL}{settings}{DATABASE}")).map_err(|e| e.to_string())
    }

    fn certs(names: &[&str]) -> (Ca, PathBuf, String, String, String) {
        let ca = ca("pglane unit test CA");
        let (cert, key) = leaf(&ca, names, rcgen::ExtendedKeyUsagePurpose::ServerAuth);
        let d = dir();
        let (ca_path, cert_path, key_path) =
            (write(&d, "ca.crt", &ca.pem), write(&d, "tls.crt", &cert), write(&d, "tls.key", &key));
        (ca, d, ca_path, cert_path, key_path)
    }

    #[test]
    fn tls_is_off_unless_asked_for() {
        let c = parse("").unwrap();
        assert_eq!((c.client_tls_sslmode, c.server_tls_sslmode), (SslMode::Disable, SslMode::Disable));
        assert!(acceptor(&c).is_none());
        assert!(server_tls(&c, &c.databases["app"].addresses()[0]).is_none());
    }

    #[test]
    fn settings_are_loaded_once_and_checked() {
        let (_ca, d, ca_file, cert, key) = certs(&["localhost"]);
        let ok = parse(&format!(
            "client_tls_sslmode = \"verify-full\"\nclient_tls_cert_file = {cert:?}\nclient_tls_key_file = {key:?}\nclient_tls_ca_file = {ca_file:?}\n\
             server_tls_sslmode = \"verify-full\"\nserver_tls_ca_file = {ca_file:?}\nserver_tls_cert_file = {cert:?}\nserver_tls_key_file = {key:?}\n"
        ))
        .unwrap();
        let loaded = ok.tls.get().expect("validate loaded the TLS settings");
        assert!(loaded.clients.is_some() && loaded.servers.is_some());
        // The pools share validate's configs: nothing is read per connection.
        let acceptor = acceptor(&ok).unwrap();
        assert!(Arc::ptr_eq(&acceptor, loaded.clients.as_ref().unwrap()));
        let target = server_tls(&ok, &ok.databases["app"].addresses()[0]).unwrap();
        assert!(Arc::ptr_eq(&target.config, loaded.servers.as_ref().unwrap()));
        // Unix-socket servers never use TLS.
        assert!(server_tls(&ok, &ServerAddress::Unix("/tmp/.s.PGSQL.5432".into())).is_none());

        let garbage = write(&d, "garbage.pem", "not a certificate\n");
        let err = |settings: String| parse(&settings).unwrap_err();
        let e = err("client_tls_sslmode = \"require\"".into());
        assert!(e.contains("client_tls_cert_file and client_tls_key_file"), "{e}");
        let e =
            err(format!("client_tls_sslmode = \"verify-ca\"\nclient_tls_cert_file = {cert:?}\nclient_tls_key_file = {key:?}"));
        assert!(e.contains("needs client_tls_ca_file"), "{e}");
        let e = err("server_tls_sslmode = \"verify-full\"".into());
        assert!(e.contains("needs server_tls_ca_file"), "{e}");
        let e = err("server_tls_ca_file = \"/nonexistent/ca.crt\"".into());
        assert!(e.contains("server_tls_ca_file /nonexistent/ca.crt") && e.contains("No such file"), "{e}");
        let e = err(format!("client_tls_cert_file = {garbage:?}"));
        assert!(e.contains("no PEM certificate"), "{e}");
        let e = err(format!("client_tls_key_file = {cert:?}"));
        assert!(e.contains("no PEM private key"), "{e}");
        let e = err(format!("server_tls_cert_file = {cert:?}"));
        assert!(e.contains("go together"), "{e}");
        let e = err("client_tls_sslmode = \"sometimes\"".into());
        assert!(e.contains("sometimes") && e.contains("verify-full"), "{e}");
        // A key that is not the certificate's.
        let (_, other_key) = leaf(&ca("another CA"), &["localhost"], rcgen::ExtendedKeyUsagePurpose::ServerAuth);
        let other_key = write(&d, "other.key", &other_key);
        let e = err(format!(
            "client_tls_sslmode = \"require\"\nclient_tls_cert_file = {cert:?}\nclient_tls_key_file = {other_key:?}"
        ));
        assert!(e.contains("client_tls_cert_file and client_tls_key_file"), "{e}");
        let _ = std::fs::remove_dir_all(d);
    }

    /// Runs a TLS handshake between the two configs in memory.
    fn handshake(client: Arc<ClientConfig>, name: &str, server: Arc<ServerConfig>) -> Result<(), rustls::Error> {
        let mut client = rustls::ClientConnection::new(client, ServerName::try_from(name.to_owned()).unwrap())?;
        let mut server = rustls::ServerConnection::new(server)?;
        while client.is_handshaking() || server.is_handshaking() {
            let mut moved = false;
            while client.wants_write() {
                let mut buf = Vec::new();
                client.write_tls(&mut buf).unwrap();
                server.read_tls(&mut buf.as_slice()).unwrap();
                moved = true;
            }
            server.process_new_packets()?;
            while server.wants_write() {
                let mut buf = Vec::new();
                server.write_tls(&mut buf).unwrap();
                client.read_tls(&mut buf.as_slice()).unwrap();
                moved = true;
            }
            client.process_new_packets()?;
            if !moved {
                break;
            }
        }
        Ok(())
    }

    #[test]
    fn each_sslmode_checks_what_libpq_checks() {
        let ca_ = ca("pglane unit test CA");
        let other = ca("another CA");
        let (cert, key) = leaf(&ca_, &["localhost"], rcgen::ExtendedKeyUsagePurpose::ServerAuth);
        let roots = |ca: &Ca| {
            let mut r = RootCertStore::empty();
            r.add(CertificateDer::from_pem_slice(ca.pem.as_bytes()).unwrap()).unwrap();
            r
        };
        let der_cert = || CertificateDer::pem_slice_iter(cert.as_bytes()).collect::<Result<Vec<_>, _>>().unwrap();
        let der_key = || PrivateKeyDer::from_pem_slice(key.as_bytes()).unwrap();
        let server = Arc::new(server_config(der_cert(), der_key(), None).unwrap());
        let client = |mode, ca: Option<&Ca>| Arc::new(client_config(mode, ca.map(roots), None).unwrap());
        let shake = |mode, ca, name| handshake(client(mode, ca), name, server.clone());

        shake(SslMode::VerifyFull, Some(&ca_), "localhost").unwrap();
        let e = shake(SslMode::VerifyFull, Some(&ca_), "127.0.0.1").unwrap_err();
        assert!(e.to_string().contains("not valid for name"), "{e}");
        let e = shake(SslMode::VerifyFull, Some(&other), "localhost").unwrap_err();
        assert!(e.to_string().contains("UnknownIssuer"), "{e}");
        // verify-ca: the chain, not the name.
        shake(SslMode::VerifyCa, Some(&ca_), "127.0.0.1").unwrap();
        let e = shake(SslMode::VerifyCa, Some(&other), "127.0.0.1").unwrap_err();
        assert!(e.to_string().contains("UnknownIssuer"), "{e}");
        // require: nothing, unless a CA file is given (then the chain, as libpq).
        shake(SslMode::Require, None, "127.0.0.1").unwrap();
        shake(SslMode::Require, Some(&ca_), "127.0.0.1").unwrap();
        shake(SslMode::Require, Some(&other), "127.0.0.1").unwrap_err();
        shake(SslMode::Prefer, Some(&other), "127.0.0.1").unwrap();

        // Clients under verify-ca/verify-full must show a certificate the CA signed.
        let checking = Arc::new(server_config(der_cert(), der_key(), Some(roots(&ca_))).unwrap());
        let e = handshake(client(SslMode::Require, None), "localhost", checking.clone()).unwrap_err();
        assert!(e.to_string().contains("certificate"), "{e}");
        let identity = |ca: &Ca| {
            let (c, k) = leaf(ca, &[], rcgen::ExtendedKeyUsagePurpose::ClientAuth);
            let c = CertificateDer::pem_slice_iter(c.as_bytes()).collect::<Result<Vec<_>, _>>().unwrap();
            Some((c, PrivateKeyDer::from_pem_slice(k.as_bytes()).unwrap()))
        };
        let with_cert = Arc::new(client_config(SslMode::Require, None, identity(&ca_)).unwrap());
        handshake(with_cert, "localhost", checking.clone()).unwrap();
        let with_wrong_cert = Arc::new(client_config(SslMode::Require, None, identity(&other)).unwrap());
        handshake(with_wrong_cert, "localhost", checking).unwrap_err();
    }
}
