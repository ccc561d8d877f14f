//! `auth_type = "hba"`: which clients an auth_hba_file lets in, and with
//! which method, against the real PostgreSQL and real clients (tokio-postgres,
//! psql, and raw sockets bound to a chosen source address to see the exact
//! authentication request pglane sends).
//!
//! `local` lines cover clients on pglane's unix socket (`unix_socket_dir`).
//! The address dimension uses two loopback source addresses, 127.0.0.1 and 127.0.0.2, and ::1 against a pglane
//! listening on `[::]`.

mod common;

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::process::Command;
use std::time::Duration;

use bytes::BytesMut;
use common::{connect, postgres, try_connect, Pglane, Psql};
use pglane::protocol::backend::{self, Authentication};
use pglane::protocol::frame::split_message;
use pglane::protocol::startup;

const HBA: &str = "\
# TYPE    DATABASE USER               ADDRESS        METHOD
host      all      all                127.0.0.2/32   reject
hostnossl app      md5user            127.0.0.1/32   reject
hostssl   app      md5user            127.0.0.1/32   password
host      open     scramuser          127.0.0.1/32   trust
host      app      md5user,scramuser  0.0.0.0/0      md5
host      app      postgres           127.0.0.1/32   scram-sha-256
";

/// Files a test writes for pglane to read, removed when the test ends.
struct Files(std::path::PathBuf);

impl Files {
    /// A new, empty directory of this test process.
    fn new() -> Files {
        static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("pglane-hba-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        Files(dir)
    }
}

impl Drop for Files {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// pglane with `hba` as its rules, TLS offered to clients that ask, and three
/// databases on the shared server: `app`, `open` and `closed` (no line of
/// [`HBA`] names it). Returns pglane and the path of its auth_hba_file.
fn pglane_with_hba(hba: &str) -> (Pglane, std::path::PathBuf, Files) {
    let files = Files::new();
    let dir = files.0.clone();
    let hba_path = dir.join("hba.conf");
    std::fs::write(&hba_path, hba).unwrap();
    let cert = rcgen::generate_simple_self_signed(vec!["localhost".to_string(), "127.0.0.1".to_string()]).unwrap();
    let (cert_path, key_path) = (dir.join("pglane.crt"), dir.join("pglane.key"));
    std::fs::write(&cert_path, cert.cert.pem()).unwrap();
    std::fs::write(&key_path, cert.signing_key.serialize_pem()).unwrap();
    let port = postgres().port;
    let db = |name: &str| format!("[databases.{name}]\nhost = \"127.0.0.1\"\nport = {port}\ndbname = \"postgres\"\n");
    let lane = Pglane::start(&format!(
        "auth_type = \"hba\"\nauth_hba_file = {hba_path:?}\n\
         client_tls_sslmode = \"allow\"\nclient_tls_cert_file = {cert_path:?}\nclient_tls_key_file = {key_path:?}\n\
         {}{}{}\
         [users.postgres]\npassword = \"secret\"\n[users.scramuser]\npassword = \"scrampass\"\n\
         [users.md5user]\npassword = \"md5pass\"\n[users.trustuser]\n",
        db("app"),
        db("open"),
        db("closed"),
    ));
    (lane, hba_path, files)
}

/// What pglane answers a StartupMessage from `source`: the authentication
/// request, or the (SQLSTATE, message) of its refusal.
fn first_answer(port: u16, source: &str, user: &str, database: &str) -> Result<Authentication, (String, String)> {
    first_answer_at(SocketAddr::from(([127, 0, 0, 1], port)), source, user, database)
}

/// [`first_answer`] from `source` to `target`.
fn first_answer_at(target: SocketAddr, source: &str, user: &str, database: &str) -> Result<Authentication, (String, String)> {
    let socket = socket2::Socket::new(socket2::Domain::for_address(target), socket2::Type::STREAM, None).unwrap();
    let source: IpAddr = source.parse().unwrap();
    socket.bind(&SocketAddr::new(source, 0).into()).unwrap();
    socket.connect(&target.into()).unwrap();
    let mut stream: TcpStream = socket.into();
    stream.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut out = BytesMut::new();
    startup::encode_startup(&mut out, &[("user", user), ("database", database)]);
    stream.write_all(&out).unwrap();
    let mut buf = BytesMut::new();
    loop {
        if let Some(m) = split_message(&mut buf, 1 << 20).unwrap() {
            return match m.tag {
                backend::AUTHENTICATION => Ok(backend::decode_authentication(&m.body).unwrap()),
                backend::ERROR_RESPONSE => {
                    let e = backend::decode_error_fields(&m.body).unwrap();
                    Err((e.code, e.message))
                }
                other => panic!("unexpected message {:?}", other as char),
            };
        }
        let mut chunk = [0u8; 4096];
        let n = stream.read(&mut chunk).unwrap();
        assert!(n > 0, "pglane closed the connection without a word");
        buf.extend_from_slice(&chunk[..n]);
    }
}

fn method(answer: Result<Authentication, (String, String)>) -> String {
    match answer {
        Ok(Authentication::Ok) => "trust".into(),
        Ok(Authentication::CleartextPassword) => "password".into(),
        Ok(Authentication::Md5Password { .. }) => "md5".into(),
        Ok(Authentication::Sasl { .. }) => "scram-sha-256".into(),
        Ok(other) => format!("{other:?}"),
        Err((code, message)) => format!("{code} {message}"),
    }
}

#[test]
fn the_first_covering_line_picks_the_method_by_user_database_and_address() {
    let (lane, _, _files) = pglane_with_hba(HBA);
    let p = lane.port;
    // By user: the same database and address, three methods.
    assert_eq!(method(first_answer(p, "127.0.0.1", "postgres", "app")), "scram-sha-256");
    assert_eq!(method(first_answer(p, "127.0.0.1", "scramuser", "app")), "md5");
    assert_eq!(
        method(first_answer(p, "127.0.0.1", "md5user", "app")),
        "28000 pg_hba.conf rejects connection for host \"127.0.0.1\", user \"md5user\", database \"app\", no encryption"
    );
    // By database: scramuser is trusted in `open` only; nobody else may use it.
    assert_eq!(method(first_answer(p, "127.0.0.1", "scramuser", "open")), "trust");
    assert_eq!(
        method(first_answer(p, "127.0.0.1", "postgres", "open")),
        "28000 no pg_hba.conf entry for host \"127.0.0.1\", user \"postgres\", database \"open\", no encryption"
    );
    assert_eq!(
        method(first_answer(p, "127.0.0.1", "scramuser", "closed")),
        "28000 no pg_hba.conf entry for host \"127.0.0.1\", user \"scramuser\", database \"closed\", no encryption"
    );
    // A user no line names is refused by the rules, like any other: before a
    // password, and whether or not pglane knows the user.
    assert_eq!(
        method(first_answer(p, "127.0.0.1", "trustuser", "app")),
        "28000 no pg_hba.conf entry for host \"127.0.0.1\", user \"trustuser\", database \"app\", no encryption"
    );
    // By address: 127.0.0.2 is rejected whoever it is.
    for (user, database) in [("postgres", "app"), ("scramuser", "open"), ("nobody", "closed")] {
        assert_eq!(
            method(first_answer(p, "127.0.0.2", user, database)),
            format!("28000 pg_hba.conf rejects connection for host \"127.0.0.2\", user \"{user}\", database \"{database}\", no encryption")
        );
    }
}

#[tokio::test]
async fn clients_log_in_with_the_method_their_line_names() {
    let (lane, _, _files) = pglane_with_hba(HBA);
    let p = lane.port;
    let whoami = |c: tokio_postgres::Client| async move {
        c.query_one("select current_user::text", &[]).await.unwrap().get::<_, String>(0)
    };
    assert_eq!(whoami(connect(p, "postgres", "secret", "app").await).await, "postgres");
    // md5 for scramuser (pglane checks the md5 response against its plaintext
    // password, then logs in to the server with SCRAM as before).
    assert_eq!(whoami(connect(p, "scramuser", "scrampass", "app").await).await, "scramuser");
    // trust: any password, or none.
    assert_eq!(whoami(connect(p, "scramuser", "anything", "open").await).await, "scramuser");
    // Wrong passwords still fail as such.
    for (user, db) in [("postgres", "app"), ("scramuser", "app")] {
        let e = try_connect(p, user, "wrong", db).await.expect_err("refused");
        assert_eq!(e.as_db_error().map(|d| d.code().code()), Some("28P01"), "{user}: {e:?}");
    }
    let e = try_connect(p, "postgres", "secret", "closed").await.expect_err("refused");
    assert_eq!(e.as_db_error().map(|d| d.code().code()), Some("28000"), "{e:?}");
}

/// psql through pglane as md5user; stdout or stderr.
fn psql(port: u16, password: &str, sslmode: &str) -> Result<String, String> {
    Psql::tcp(port, "md5user", password, "app")
        .conninfo(&format!("sslmode={sslmode}"))
        .command("select current_user || ' ' || (select ssl from pg_stat_ssl where pid = pg_backend_pid())::text")
        .run()
}

#[test]
fn hostssl_and_hostnossl_lines_follow_the_client_connection() {
    let (lane, _, _files) = pglane_with_hba(HBA);
    // Over TLS the hostssl line lets md5user in with a cleartext password
    // (the server connection behind pglane is plaintext: "false").
    assert_eq!(psql(lane.port, "md5pass", "require").unwrap(), "md5user false");
    let e = psql(lane.port, "wrong", "require").unwrap_err();
    assert!(e.contains("password authentication failed for user \"md5user\""), "{e}");
    // Without TLS the hostnossl line rejects it, password or not.
    let e = psql(lane.port, "md5pass", "disable").unwrap_err();
    assert!(
        e.contains("pg_hba.conf rejects connection for host \"127.0.0.1\", user \"md5user\", database \"app\", no encryption"),
        "{e}"
    );
}

#[tokio::test]
async fn a_bad_auth_hba_file_keeps_the_old_rules_on_reload() {
    let (lane, hba_path, _files) = pglane_with_hba(HBA);
    assert_eq!(method(first_answer(lane.port, "127.0.0.1", "postgres", "app")), "scram-sha-256");
    // Rewrite the file with a line pglane cannot honour: the reload is refused
    // and the old rules stay.
    std::fs::write(&hba_path, "host all all all ldap\n").unwrap();
    lane.signal(libc::SIGHUP);
    lane.wait_for_log("config not reloaded", Duration::from_secs(10));
    assert!(lane.log().contains("line 1: authentication method \"ldap\" is not supported"), "{}", lane.log());
    assert_eq!(method(first_answer(lane.port, "127.0.0.1", "postgres", "app")), "scram-sha-256");
    // A good file is taken at the next reload.
    std::fs::write(&hba_path, "host all postgres 127.0.0.1/32 trust\n").unwrap();
    lane.signal(libc::SIGHUP);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while method(first_answer(lane.port, "127.0.0.1", "postgres", "app")) != "trust" {
        assert!(std::time::Instant::now() < deadline, "the new rules were not applied\n{}", lane.log());
        std::thread::sleep(Duration::from_millis(50));
    }
    let c = connect(lane.port, "postgres", "", "app").await;
    assert_eq!(c.query_one("select 1", &[]).await.unwrap().get::<_, i32>(0), 1);
}

/// A pglane child listening on `[::]` (IPv4 and IPv6), which the harness's
/// `Pglane` (127.0.0.1 only) cannot start; killed when dropped.
struct DualStack {
    child: std::process::Child,
    port: u16,
}

impl DualStack {
    fn start(dir: &std::path::Path, body: &str) -> DualStack {
        let port = common::free_port();
        let config = dir.join("dual.toml");
        std::fs::write(&config, format!("listen = \"[::]:{port}\"\n{body}")).unwrap();
        let log = std::fs::File::create(dir.join("dual.log")).unwrap();
        let child = Command::new(common::pglane_bin())
            .arg("--config")
            .arg(&config)
            .args(["--cores", "1"])
            .stdin(std::process::Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("spawn pglane");
        let mut lane = DualStack { child, port };
        let deadline = std::time::Instant::now() + Duration::from_secs(15);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            let log = std::fs::read_to_string(dir.join("dual.log")).unwrap_or_default();
            assert!(lane.child.try_wait().unwrap().is_none(), "pglane exited:\n{log}");
            assert!(std::time::Instant::now() < deadline, "pglane did not listen on [::]:{port}:\n{log}");
            std::thread::sleep(Duration::from_millis(20));
        }
        lane
    }
}

impl Drop for DualStack {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Listening on `[::]`, IPv4 clients arrive as `::ffff:127.0.0.1`: they
/// match IPv4 lines and are named as IPv4 in refusals; `::1` matches IPv6 lines.
#[test]
fn ipv6_clients_match_ipv6_lines_and_mapped_ipv4_clients_ipv4_lines() {
    let files = Files::new();
    let hba = files.0.join("dual-hba.conf");
    std::fs::write(&hba, "host all all ::1/128 reject\nhost app all 127.0.0.1/32 trust\n").unwrap();
    let lane = DualStack::start(
        &files.0,
        &format!(
            "auth_type = \"hba\"\nauth_hba_file = {hba:?}\n[databases.app]\nhost = \"127.0.0.1\"\nport = {}\n\
             [databases.other]\nhost = \"127.0.0.1\"\nport = {}\n",
            postgres().port,
            postgres().port
        ),
    );
    let v4 = SocketAddr::from(([127, 0, 0, 1], lane.port));
    let v6: SocketAddr = format!("[::1]:{}", lane.port).parse().unwrap();
    assert_eq!(method(first_answer_at(v4, "127.0.0.1", "postgres", "app")), "trust");
    assert_eq!(
        method(first_answer_at(v6, "::1", "postgres", "app")),
        "28000 pg_hba.conf rejects connection for host \"::1\", user \"postgres\", database \"app\", no encryption"
    );
    assert_eq!(
        method(first_answer_at(v4, "127.0.0.1", "postgres", "other")),
        "28000 no pg_hba.conf entry for host \"127.0.0.1\", user \"postgres\", database \"other\", no encryption"
    );
}

/// `local` lines decide for clients on the unix socket, `host` lines for TCP
/// ones: the same user and database, two methods.
#[test]
fn local_lines_cover_the_unix_socket_and_host_lines_tcp() {
    let files = Files::new();
    let dir = files.0.clone();
    let hba_path = dir.join("hba.conf");
    std::fs::write(&hba_path, "local app postgres trust\nhost app postgres 127.0.0.1/32 scram-sha-256\n").unwrap();
    let lane = Pglane::start(&format!(
        "unix_socket_dir = {dir:?}\nauth_type = \"hba\"\nauth_hba_file = {hba_path:?}\n\
         [databases.app]\nhost = \"127.0.0.1\"\nport = {}\ndbname = \"postgres\"\n[users.postgres]\npassword = \"secret\"\n",
        postgres().port
    ));
    // Over TCP: asked for SCRAM.
    assert_eq!(method(first_answer(lane.port, "127.0.0.1", "postgres", "app")), "scram-sha-256");
    // Over the unix socket: let in without a password.
    let mut unix = std::os::unix::net::UnixStream::connect(dir.join(format!(".s.PGSQL.{}", lane.port))).unwrap();
    unix.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut out = BytesMut::new();
    startup::encode_startup(&mut out, &[("user", "postgres"), ("database", "app")]);
    unix.write_all(&out).unwrap();
    let mut buf = BytesMut::new();
    let first = loop {
        if let Some(m) = split_message(&mut buf, 1 << 20).unwrap() {
            break m;
        }
        let mut chunk = [0u8; 4096];
        let n = unix.read(&mut chunk).unwrap();
        assert!(n > 0, "pglane closed the unix connection without a word");
        buf.extend_from_slice(&chunk[..n]);
    };
    assert_eq!(first.tag, backend::AUTHENTICATION);
    assert!(matches!(backend::decode_authentication(&first.body).unwrap(), Authentication::Ok));
}
