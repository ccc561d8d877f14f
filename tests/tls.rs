//! TLS on both sides, with certificates the test makes (rcgen), a real
//! PostgreSQL with `ssl = on`, and psql (libpq/OpenSSL) as the client.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use common::certs::{ca, leaf};
use common::{connect, postgres, try_connect, Pglane, Postgres, Psql};
use rcgen::ExtendedKeyUsagePurpose;

// ---------------------------------------------------------------------------
// Certificates
// ---------------------------------------------------------------------------

/// PEM files beside the TLS PostgreSQL's data dir: a CA, another CA that signed nothing used here,
/// pglane's certificate (localhost, 127.0.0.1), PostgreSQL's (localhost
/// only, so verify-full to 127.0.0.1 fails on the name) and a client's.
struct Certs {
    ca: PathBuf,
    other_ca: PathBuf,
    pglane_cert: PathBuf,
    pglane_key: PathBuf,
    postgres_cert: String,
    postgres_key: String,
    client_cert: PathBuf,
    client_key: PathBuf,
}

/// Writes the certificates into `dir`.
fn make_certs(dir: &Path) -> Certs {
    std::fs::create_dir_all(dir).unwrap();
    let write = |name: &str, text: &str| {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        // libpq refuses a client key that others may read.
        std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
        path
    };
    let (_, other_pem) = ca("some other CA");
    let (ca, ca_pem) = ca("pglane test CA");
    let (pglane_cert, pglane_key) = leaf(&ca, &["localhost", "127.0.0.1"], ExtendedKeyUsagePurpose::ServerAuth);
    let (postgres_cert, postgres_key) = leaf(&ca, &["localhost"], ExtendedKeyUsagePurpose::ServerAuth);
    let (client_cert, client_key) = leaf(&ca, &["postgres"], ExtendedKeyUsagePurpose::ClientAuth);
    Certs {
        ca: write("ca.crt", &ca_pem),
        other_ca: write("other-ca.crt", &other_pem),
        pglane_cert: write("pglane.crt", &pglane_cert),
        pglane_key: write("pglane.key", &pglane_key),
        client_cert: write("client.crt", &client_cert),
        client_key: write("client.key", &client_key),
        postgres_cert,
        postgres_key,
    }
}

// ---------------------------------------------------------------------------
// A PostgreSQL with ssl = on
// ---------------------------------------------------------------------------

/// A private PostgreSQL with `ssl = on` and the test's certificate, and a
/// role `tlsonly` that pg_hba admits over TLS only (`hostssl`); the
/// certificates live in its temp dir, removed with it.
fn setup() -> &'static (Postgres, Certs) {
    static SETUP: OnceLock<(Postgres, Certs)> = OnceLock::new();
    SETUP.get_or_init(|| {
        let pg = Postgres::start_new();
        let c = make_certs(&pg.data_dir.parent().unwrap().join("certs"));
        for (name, text) in [("server.crt", &c.postgres_cert), ("server.key", &c.postgres_key)] {
            let path = pg.data_dir.join(name);
            std::fs::write(&path, text).unwrap();
            std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
            if unsafe { libc::geteuid() } == 0 {
                let status = Command::new("chown").arg(format!("{}:", common::PG_OS_USER)).arg(&path).status().unwrap();
                assert!(status.success(), "chown {}", path.display());
            }
        }
        let hba = pg.data_dir.join("pg_hba.conf");
        let rules = std::fs::read_to_string(&hba).unwrap();
        std::fs::write(
            &hba,
            format!("hostssl   all tlsonly 127.0.0.1/32 scram-sha-256\nhostnossl all tlsonly 127.0.0.1/32 reject\n{rules}"),
        )
        .unwrap();
        pg.psql("CREATE ROLE tlsonly LOGIN PASSWORD 'tlspass'");
        pg.psql("ALTER SYSTEM SET ssl = on");
        pg.psql("SELECT pg_reload_conf()");
        for _ in 0..250 {
            if pg.psql("SHOW ssl") == "on" {
                return (pg, c);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("PostgreSQL did not turn ssl on");
    })
}

// ---------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------

/// pglane with `settings` in front of `app` on `host`:`port`, two shards.
fn pglane(settings: &str, host: &str, port: u16) -> Pglane {
    Pglane::start_with_args(
        &format!(
            r#"{settings}
[databases.app]
host = "{host}"
port = {port}
dbname = "postgres"
pool_size = 4

[users.postgres]
password = "secret"

[users.tlsonly]
password = "tlspass"
"#
        ),
        &["--cores", "2"],
    )
}

fn tls_postgres() -> &'static Postgres {
    &setup().0
}

fn certs() -> &'static Certs {
    &setup().1
}

fn client_tls(mode: &str) -> String {
    let c = certs();
    format!(
        "client_tls_sslmode = \"{mode}\"\nclient_tls_cert_file = {:?}\nclient_tls_key_file = {:?}\nclient_tls_ca_file = {:?}\n",
        c.pglane_cert, c.pglane_key, c.ca
    )
}

fn server_tls(mode: &str, ca: &Path) -> String {
    format!("server_tls_sslmode = \"{mode}\"\nserver_tls_ca_file = {ca:?}\n")
}

/// psql through pglane with extra conninfo (`sslmode=...`); its stdout, or its stderr.
fn psql(port: u16, user: &str, conninfo: &str, sql: &[&str]) -> Result<String, String> {
    let password = if user == "tlsonly" { "tlspass" } else { "secret" };
    sql.iter().fold(Psql::tcp(port, user, password, "app").conninfo(conninfo), |psql, sql| psql.command(sql)).run()
}

const SERVER_SSL: &str = "select ssl from pg_stat_ssl where pid = pg_backend_pid()";

/// What pg_stat_ssl says of the server connection pglane lends `user`.
async fn server_ssl(port: u16, user: &str) -> Result<bool, tokio_postgres::Error> {
    let password = if user == "tlsonly" { "tlspass" } else { "secret" };
    let c = try_connect(port, user, password, "app").await?;
    Ok(c.query_one(SERVER_SSL, &[]).await?.get(0))
}

/// The error a plaintext tokio-postgres client gets logging in through pglane.
async fn refusal(port: u16) -> String {
    match try_connect(port, "postgres", "secret", "app").await {
        Ok(_) => panic!("connected through pglane on port {port}"),
        Err(e) => e.as_db_error().map(|d| d.message().to_owned()).unwrap_or_else(|| e.to_string()),
    }
}

// ---------------------------------------------------------------------------
// Client side
// ---------------------------------------------------------------------------

#[test]
fn clients_require_tls_and_get_the_configured_certificate() {
    let pg = tls_postgres();
    let c = certs();
    let lane = pglane(&client_tls("require"), "127.0.0.1", pg.port);

    // sslmode=require succeeds only if TLS was negotiated; \conninfo says so.
    let out = psql(lane.port, "postgres", "sslmode=require", &["\\conninfo", SERVER_SSL, "select 41 + 1"]).unwrap();
    assert!(out.contains("SSL connection (protocol: TLSv1."), "{out}");
    assert!(out.ends_with("f\n42"), "client side TLS, server side plaintext: {out}");

    // verify-full: the chain leads to the test CA and the name is right, by
    // address and by name.
    let ca = format!("sslmode=verify-full sslrootcert={}", c.ca.display());
    assert_eq!(psql(lane.port, "postgres", &ca, &["select 1"]).unwrap(), "1");
    let by_name = ca.clone() + " host=localhost";
    assert_eq!(psql(lane.port, "postgres", &by_name, &["select 2"]).unwrap(), "2");
    let other = format!("sslmode=verify-full sslrootcert={}", c.other_ca.display());
    let e = psql(lane.port, "postgres", &other, &["select 1"]).unwrap_err();
    assert!(e.contains("certificate verify failed"), "{e}");

    // Plaintext clients are refused: psql and tokio-postgres.
    let e = psql(lane.port, "postgres", "sslmode=disable", &["select 1"]).unwrap_err();
    assert!(e.contains("SSL required"), "{e}");
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let Err(e) = rt.block_on(try_connect(lane.port, "postgres", "secret", "app")) else { panic!("plaintext accepted") };
    assert_eq!(e.as_db_error().map(|d| d.code().code()), Some("28000"), "{e}");
    // Cancel requests may come in plaintext (the key is the secret).
    let mut s = TcpStream::connect(("127.0.0.1", lane.port)).unwrap();
    s.write_all(&[0, 0, 0, 16, 0x04, 0xd2, 0x16, 0x2e, 0, 0, 0, 1, 0, 0, 0, 2]).unwrap();
    assert_eq!(read_all(&mut s), b"");
}

/// libpq never uses TLS on a unix socket: client_tls_sslmode = require
/// holds for TCP clients, and clients on pglane's unix socket come in
/// without it, as with PgBouncer.
#[test]
fn require_leaves_unix_socket_clients_in() {
    let pg = tls_postgres();
    let dir = std::env::temp_dir().join(format!("pglane-tls-unix-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let lane = pglane(&format!("unix_socket_dir = {dir:?}\n{}", client_tls("require")), "127.0.0.1", pg.port);
    let socket = Psql::socket(&dir, lane.port, "postgres", "app").conninfo("password=secret");
    assert_eq!(socket.command("select 40 + 2").run(), Ok("42".to_owned()));
    let e = psql(lane.port, "postgres", "sslmode=disable", &["select 1"]).unwrap_err();
    assert!(e.contains("SSL required"), "over TCP: {e}");
    drop(lane);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn prefer_serves_both_and_disable_answers_no() {
    let pg = tls_postgres();
    let prefer = pglane(&client_tls("prefer"), "127.0.0.1", pg.port);
    let out = psql(prefer.port, "postgres", "sslmode=require", &["\\conninfo"]).unwrap();
    assert!(out.contains("SSL connection"), "{out}");
    let out = psql(prefer.port, "postgres", "sslmode=disable", &["\\conninfo"]).unwrap();
    assert!(!out.contains("SSL"), "{out}");

    let plain = pglane("", "127.0.0.1", pg.port);
    let e = psql(plain.port, "postgres", "sslmode=require", &["select 1"]).unwrap_err();
    assert!(e.contains("server does not support SSL"), "{e}");
    let out = psql(plain.port, "postgres", "sslmode=prefer", &["\\conninfo"]).unwrap();
    assert!(!out.contains("SSL"), "{out}");
}

#[test]
fn verify_ca_asks_clients_for_a_certificate_the_ca_signed() {
    let pg = tls_postgres();
    let c = certs();
    let lane = pglane(&client_tls("verify-ca"), "127.0.0.1", pg.port);
    let e = psql(lane.port, "postgres", "sslmode=require", &["select 1"]).unwrap_err();
    assert!(e.to_lowercase().contains("certificate"), "{e}");
    let with_cert = format!("sslmode=require sslcert={} sslkey={}", c.client_cert.display(), c.client_key.display());
    assert_eq!(psql(lane.port, "postgres", &with_cert, &["select 1"]).unwrap(), "1");
}

/// Plaintext stuffed behind an SSLRequest must never be read as if it had
/// come through TLS (CVE-2021-23214).
#[test]
fn plaintext_after_ssl_request_is_refused() {
    let pg = tls_postgres();
    let lane = pglane(&client_tls("prefer"), "127.0.0.1", pg.port);
    let startup = startup_message("postgres");

    // In the same packet as the SSLRequest: refused before 'S'.
    let mut s = TcpStream::connect(("127.0.0.1", lane.port)).unwrap();
    s.write_all(&[SSL_REQUEST.as_slice(), &startup].concat()).unwrap();
    let answer = read_all(&mut s);
    assert_eq!(answer.first(), Some(&b'E'), "{answer:?}");
    assert!(String::from_utf8_lossy(&answer).contains("received unencrypted data after SSL request"));

    // After 'S', instead of a TLS ClientHello: the handshake fails, and the
    // StartupMessage is never answered (no 'R' authentication request).
    let mut s = TcpStream::connect(("127.0.0.1", lane.port)).unwrap();
    s.write_all(&SSL_REQUEST).unwrap();
    let mut byte = [0u8; 1];
    s.read_exact(&mut byte).unwrap();
    assert_eq!(&byte, b"S");
    s.write_all(&startup).unwrap();
    let answer = read_all(&mut s);
    assert!(!answer.starts_with(b"R") && !answer.starts_with(b"E"), "plaintext was read after 'S': {answer:?}");
    assert!(answer.is_empty() || answer[0] == 0x15, "expected a TLS alert or nothing: {answer:?}");

    // The same through psql still works.
    assert_eq!(psql(lane.port, "postgres", "sslmode=require", &["select 1"]).unwrap(), "1");
}

#[test]
fn a_second_ssl_request_inside_tls_is_refused() {
    let pg = tls_postgres();
    let lane = pglane(&client_tls("require"), "127.0.0.1", pg.port);
    let mut tls = tls_client(lane.port);
    tls.write_all(&SSL_REQUEST).unwrap();
    let mut answer = Vec::new();
    let _ = tls.read_to_end(&mut answer);
    assert_eq!(answer.first(), Some(&b'E'), "{answer:?}");
    let text = String::from_utf8_lossy(&answer);
    assert!(text.contains("08P01") && text.contains("encryption requested again inside TLS"), "{text}");

    // A StartupMessage over the same kind of connection is served.
    let mut tls = tls_client(lane.port);
    tls.write_all(&startup_message("postgres")).unwrap();
    let mut byte = [0u8; 1];
    tls.read_exact(&mut byte).unwrap();
    assert_eq!(&byte, b"R", "an authentication request");
}

// ---------------------------------------------------------------------------
// Server side
// ---------------------------------------------------------------------------

/// A pgbouncer.ini that does not set server_tls_sslmode gets PgBouncer's
/// default (since 1.20, as libpq's): prefer, so a server with ssl = on is
/// talked to over TLS, and one that needs it (tlsonly's hostssl line) works.
#[tokio::test]
async fn an_imported_ini_prefers_tls_to_the_server() {
    let pg = tls_postgres();
    let dir = std::env::temp_dir().join(format!("pglane-tls-ini-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("userlist.txt"), "\"postgres\" \"secret\"\n\"tlsonly\" \"tlspass\"\n").unwrap();
    let ini = dir.join("pgbouncer.ini");
    std::fs::write(
        &ini,
        format!(
            "[databases]\napp = host=127.0.0.1 port={} dbname=postgres\n[pgbouncer]\nlisten_addr = 127.0.0.1\n\
             auth_type = md5\nauth_file = userlist.txt\npool_mode = transaction\nunix_socket_dir =\n",
            pg.port
        ),
    )
    .unwrap();
    let lane = Pglane::start_with_args("", &["--pgbouncer-ini", ini.to_str().unwrap(), "--cores", "1"]);
    assert!(server_ssl(lane.port, "postgres").await.unwrap(), "pg_stat_ssl.ssl through pglane");
    assert!(server_ssl(lane.port, "tlsonly").await.unwrap(), "a hostssl-only role is served");
    drop(lane);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn verify_full_to_the_server() {
    let pg = tls_postgres();
    let c = certs();
    let lane = pglane(&server_tls("verify-full", &c.ca), "localhost", pg.port);
    assert!(server_ssl(lane.port, "postgres").await.unwrap(), "pg_stat_ssl.ssl through pglane");
    // TLS on both sides, through psql.
    let both = pglane(&(server_tls("verify-full", &c.ca) + &client_tls("require")), "localhost", pg.port);
    let out = psql(both.port, "postgres", "sslmode=require", &["\\conninfo", SERVER_SSL]).unwrap();
    assert!(out.contains("SSL connection") && out.ends_with("\nt"), "{out}");

    // Big results and many messages both ways go through the TLS streams whole.
    let client = connect(lane.port, "postgres", "secret", "app").await;
    // TLS server connections go back to the pool and pass its health check
    // (nothing unread on the socket) when lent again.
    let mut pids = std::collections::HashSet::new();
    for _ in 0..5 {
        pids.insert(client.query_one("select pg_backend_pid()", &[]).await.unwrap().get::<_, i32>(0));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(pids.len(), 1, "one server connection, reused: {pids:?}");
    let row = client.query_one("select length(repeat('x', 3000000)), md5(repeat('x', 3000000))", &[]).await.unwrap();
    assert_eq!(row.get::<_, i32>(0), 3_000_000);
    let text: String = client.query_one("select repeat('pglane', 500000)", &[]).await.unwrap().get(0);
    assert_eq!(text.len(), 3_000_000);
    let rows = client.query("select g from generate_series(1, 100000) g", &[]).await.unwrap();
    assert_eq!(rows.len(), 100_000);
    let out = psql(
        both.port,
        "postgres",
        "sslmode=require",
        &["select sum(length(x)) from (select repeat('y', 1000) x from generate_series(1, 5000)) t"],
    )
    .unwrap();
    assert_eq!(out, "5000000");
    let out = psql(
        both.port,
        "postgres",
        "sslmode=require",
        &["select count(*), sum(length(r)) from (select repeat('z', 300) r from generate_series(1, 20000)) t", "select 'after'"],
    )
    .unwrap();
    assert_eq!(out, "20000|6000000\nafter");
}

#[test]
fn show_clients_and_servers_name_the_tls_in_use() {
    let pg = tls_postgres();
    let c = certs();
    let settings = server_tls("verify-full", &c.ca) + &client_tls("prefer") + "admin_users = [\"postgres\"]\n";
    let lane = pglane(&settings, "localhost", pg.port);
    // One query through a TLS client leaves a TLS server connection idle in the pool.
    assert_eq!(psql(lane.port, "postgres", "sslmode=require", &["select 1"]).unwrap(), "1");
    // The tls column is the 18th of SHOW CLIENTS / SHOW SERVERS (PgBouncer 1.24's).
    let tls_column = |mode: &str, show: &str| -> Vec<String> {
        let out = psql(lane.port, "postgres", &format!("sslmode={mode} dbname=pgbouncer"), &[show]).unwrap();
        out.lines().map(|row| row.split('|').nth(17).unwrap_or("?").to_owned()).collect()
    };
    let clients = tls_column("require", "SHOW CLIENTS");
    assert_eq!(clients.len(), 1, "the console's own client: {clients:?}");
    assert!(clients[0].starts_with("TLSv1.3/TLS13_"), "{clients:?}");
    assert_eq!(tls_column("disable", "SHOW CLIENTS"), vec![String::new()], "plaintext: empty, as in PgBouncer");
    let servers = tls_column("disable", "SHOW SERVERS");
    assert!(!servers.is_empty() && servers.iter().all(|t| t.starts_with("TLSv1.3/TLS13_")), "{servers:?}");
}

#[tokio::test]
async fn verify_full_refuses_a_certificate_from_another_ca_or_for_another_name() {
    let pg = tls_postgres();
    let c = certs();
    let wrong_ca = pglane(&server_tls("verify-full", &c.other_ca), "localhost", pg.port);
    let msg = refusal(wrong_ca.port).await;
    assert!(msg.contains("TLS with server localhost:") && msg.contains("UnknownIssuer"), "{msg}");
    let e = psql(wrong_ca.port, "postgres", "", &["select 1"]).unwrap_err();
    assert!(e.contains("invalid peer certificate"), "{e}");

    // PostgreSQL's certificate names localhost, not 127.0.0.1: verify-full
    // checks the name, verify-ca only the chain.
    let by_address = pglane(&server_tls("verify-full", &c.ca), "127.0.0.1", pg.port);
    let msg = refusal(by_address.port).await;
    assert!(msg.contains("not valid for name \"127.0.0.1\""), "{msg}");
    let verify_ca = pglane(&server_tls("verify-ca", &c.ca), "127.0.0.1", pg.port);
    assert!(server_ssl(verify_ca.port, "postgres").await.unwrap());
    let verify_ca_wrong = pglane(&server_tls("verify-ca", &c.other_ca), "127.0.0.1", pg.port);
    assert!(server_ssl(verify_ca_wrong.port, "postgres").await.is_err());
}

#[tokio::test]
async fn prefer_require_and_allow_to_the_server() {
    let tls_pg = tls_postgres();
    let plain_pg = postgres();
    let no_ca = |mode: &str| format!("server_tls_sslmode = \"{mode}\"\n");

    // prefer: TLS where the server offers it (its certificate unchecked), plaintext where not.
    let lane = pglane(&no_ca("prefer"), "127.0.0.1", tls_pg.port);
    assert!(server_ssl(lane.port, "postgres").await.unwrap());
    let lane = pglane(&no_ca("prefer"), "127.0.0.1", plain_pg.port);
    assert!(!server_ssl(lane.port, "postgres").await.unwrap());

    // require: TLS or nothing.
    let lane = pglane(&no_ca("require"), "127.0.0.1", tls_pg.port);
    assert!(server_ssl(lane.port, "tlsonly").await.unwrap());
    let lane = pglane(&no_ca("require"), "127.0.0.1", plain_pg.port);
    let msg = refusal(lane.port).await;
    assert!(msg.contains("does not support SSL"), "{msg}");

    // allow: plaintext first, TLS when the server refuses plaintext (hostnossl reject).
    let lane = pglane(&no_ca("allow"), "127.0.0.1", tls_pg.port);
    assert!(!server_ssl(lane.port, "postgres").await.unwrap());
    assert!(server_ssl(lane.port, "tlsonly").await.unwrap());
    // disable: the hostssl-only role cannot log in.
    let lane = pglane("", "127.0.0.1", tls_pg.port);
    assert!(server_ssl(lane.port, "tlsonly").await.is_err());
}

// ---------------------------------------------------------------------------
// Raw protocol
// ---------------------------------------------------------------------------

const SSL_REQUEST: [u8; 8] = [0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f];

fn startup_message(user: &str) -> Vec<u8> {
    let mut body = vec![0, 3, 0, 0];
    for s in ["user", user, "database", "app"] {
        body.extend_from_slice(s.as_bytes());
        body.push(0);
    }
    body.push(0);
    let mut packet = ((body.len() + 4) as u32).to_be_bytes().to_vec();
    packet.extend(body);
    packet
}

/// Everything until the peer closes (or 10 s pass).
fn read_all(s: &mut TcpStream) -> Vec<u8> {
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => return out,
            Ok(n) => out.extend_from_slice(&buf[..n]),
        }
    }
}

/// A TLS connection to pglane after SSLRequest/'S', trusting the test CA.
fn tls_client(port: u16) -> rustls::StreamOwned<rustls::ClientConnection, TcpStream> {
    let mut roots = rustls::RootCertStore::empty();
    let pem = std::fs::read(&certs().ca).unwrap();
    use rustls::pki_types::pem::PemObject;
    roots.add(rustls::pki_types::CertificateDer::from_pem_slice(&pem).unwrap()).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(&SSL_REQUEST).unwrap();
    let mut byte = [0u8; 1];
    s.read_exact(&mut byte).unwrap();
    assert_eq!(&byte, b"S");
    let conn = rustls::ClientConnection::new(Arc::new(config), "localhost".try_into().unwrap()).unwrap();
    rustls::StreamOwned::new(conn, s)
}

// ---------------------------------------------------------------------------
// pgload, the bundled load tool, as a TLS client
// ---------------------------------------------------------------------------

/// pgload with `args` through pglane on `port`: 2 connections, 3
/// transactions of `SELECT 1` each, HOME in a directory without
/// ~/.postgresql/root.crt. Its exit code and its stdout and stderr.
fn pgload(port: u16, args: &[&str]) -> (Option<i32>, String) {
    let dir = certs().ca.parent().unwrap().join("pgload");
    std::fs::create_dir_all(&dir).unwrap();
    let script = dir.join("select.sql");
    std::fs::write(&script, "SELECT 1;\n").unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_pgload"))
        .args(["-h", "127.0.0.1", "-p", &port.to_string(), "-U", "postgres", "-c", "2", "-t", "3", "-f"])
        .arg(&script)
        .args(args)
        .arg("app")
        .env("PGPASSWORD", "secret")
        .env("HOME", &dir)
        .env_remove("PGSSLMODE")
        .env_remove("PGSSLROOTCERT")
        .output()
        .expect("run pgload");
    let text = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    (output.status.code(), text)
}

/// pgload's --sslmode means what libpq's sslmode means: prefer (the
/// default) takes TLS where offered, require insists, verify-full checks
/// the certificate against --sslrootcert, allow falls back to TLS when a
/// plaintext login is refused.
#[test]
fn pgload_speaks_tls_as_libpq() {
    let lane = pglane(&client_tls("require"), "127.0.0.1", postgres().port);
    let ca = certs().ca.to_str().unwrap().to_owned();
    for args in [&[][..], &["--sslmode", "require"], &["--sslmode", "allow"], &["--sslmode", "verify-full", "--sslrootcert", &ca]]
    {
        let (code, text) = pgload(lane.port, args);
        assert_eq!(code, Some(0), "{args:?}: {text}");
        assert!(text.contains("tls: 2 of 2 connections") && text.contains("transactions: 6 ok, 0 failed"), "{args:?}: {text}");
    }
    let (code, text) = pgload(lane.port, &["--sslmode", "disable"]);
    assert_eq!(code, Some(1), "pglane requires TLS: {text}");
    let (code, text) = pgload(lane.port, &["--sslmode", "verify-full"]);
    assert_eq!(code, Some(1), "{text}");
    assert!(text.contains("needs a root certificate file (sslrootcert)"), "{text}");
    let other_ca = certs().other_ca.to_str().unwrap().to_owned();
    let (code, text) = pgload(lane.port, &["--sslmode", "verify-ca", "--sslrootcert", &other_ca]);
    assert_eq!(code, Some(1), "a certificate another CA signed: {text}");

    let plain = pglane("", "127.0.0.1", postgres().port);
    let (code, text) = pgload(plain.port, &[]);
    assert_eq!(code, Some(0), "{text}");
    assert!(text.contains("tls: 0 of 2 connections"), "prefer goes on without TLS where none is offered: {text}");
    let (code, text) = pgload(plain.port, &["--sslmode", "require"]);
    assert_eq!(code, Some(1), "{text}");
    assert!(text.contains("server does not support SSL, but SSL was required"), "{text}");
}
