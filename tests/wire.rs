//! What a client sees on the wire outside its queries' results (issue 24):
//! errors that end a session, login refusals, the startup packet and its
//! framing, reported settings, protocol negotiation. Each test compares
//! pglane, in both pool modes where the mode could matter, with what the
//! same client gets from PostgreSQL directly.

mod common;
#[path = "common/raw.rs"]
mod raw;

use common::{postgres, Pglane, Psql, SUPERUSER, SUPERUSER_PASSWORD};
use pglane::protocol::backend::{self, ErrorFields};
use pglane::protocol::frame::Message;
use raw::{query, RawClient};

const MODES: [&str; 2] = ["session", "transaction"];

/// pglane in `mode` on two shards, trusting its clients unless `settings`
/// (config lines) set an auth_type, serving the server's `postgres`
/// database as `app`.
fn start(mode: &str, settings: &str) -> Pglane {
    let auth = if settings.contains("auth_type") { "" } else { "auth_type = \"trust\"" };
    Pglane::start_with_args(
        &format!(
            "pool_mode = \"{mode}\"\n{auth}\n{settings}\n\
             [databases.app]\nhost = \"127.0.0.1\"\nport = {port}\ndbname = \"postgres\"\npool_size = 4\n\
             [users.{SUPERUSER}]\npassword = \"{SUPERUSER_PASSWORD}\"\n",
            port = postgres().port
        ),
        &["--cores", "2"],
    )
}

/// The ErrorResponses among `messages`.
fn errors(messages: &[Message]) -> Vec<ErrorFields> {
    messages
        .iter()
        .filter(|m| m.tag == backend::ERROR_RESPONSE)
        .map(|m| backend::decode_error_fields(&m.body).expect("valid error"))
        .collect()
}

/// A backend terminated under its client sends FATAL 57P01 and closes:
/// that is all the client gets, directly and through pglane (which used to
/// add its own FATAL 08006 "server closed the connection unexpectedly").
#[test]
fn a_terminated_backend_is_one_fatal_in_both_modes() {
    let pg = postgres();
    let terminate = "select pg_terminate_backend(pg_backend_pid())";
    let expected = errors(&query_until_closed(&mut RawClient::login(pg.port, "trustuser", "postgres"), terminate));
    assert_eq!(expected.len(), 1, "{expected:?}");
    assert_eq!((expected[0].severity.as_str(), expected[0].code.as_str()), ("FATAL", "57P01"));
    let psql_direct = Psql::tcp(pg.port, SUPERUSER, SUPERUSER_PASSWORD, "postgres").command(terminate).output();
    assert!(!psql_direct.success);
    for mode in MODES {
        let lane = start(mode, "");
        for _ in 0..3 {
            let mut through = RawClient::login(lane.port, SUPERUSER, "app");
            let got = errors(&query_until_closed(&mut through, terminate));
            assert_eq!(got, expected, "{mode}");
        }
        // psql prints what it got: the same lines.
        let psql = Psql::tcp(lane.port, SUPERUSER, SUPERUSER_PASSWORD, "app").command(terminate).output();
        assert!(!psql.success, "{mode}");
        assert_eq!(psql.stderr, psql_direct.stderr, "{mode}");
        assert_eq!(psql.stderr.matches("FATAL").count(), 1, "{mode}: {}", psql.stderr);
        // A terminated idle backend of a session: its FATAL comes when
        // the client next speaks (session mode keeps the backend; in
        // transaction mode the pool drops it and the client sees nothing).
        let mut idle = RawClient::login(lane.port, SUPERUSER, "app");
        let pid = raw::first_column(&query(&mut idle, "select pg_backend_pid()"))[0].clone();
        pg.psql(&format!("select pg_terminate_backend({pid})"));
        // The backend goes at its own pace; once gone, its FATAL is there.
        let gone = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while pg.psql(&format!("select count(*) from pg_stat_activity where pid = {pid}")) != "0" {
            assert!(std::time::Instant::now() < gone, "backend {pid} did not go");
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        let after = errors(&query_until_closed_or_ready(&mut idle, "select 1"));
        match mode {
            "session" => {
                assert_eq!(after.len(), 1, "{after:?}");
                assert_eq!(after[0].code, "57P01");
            }
            _ => assert!(after.is_empty(), "{after:?}"),
        }
    }
}

/// Sends `sql` and reads everything up to the connection's end.
fn query_until_closed(client: &mut RawClient, sql: &str) -> Vec<Message> {
    raw::send_query(client, sql);
    client.until_closed()
}

/// Sends `sql` and reads up to its ReadyForQuery or the connection's end.
fn query_until_closed_or_ready(client: &mut RawClient, sql: &str) -> Vec<Message> {
    raw::send_query(client, sql);
    client.until_closed_or_ready()
}

/// A StartupMessage of protocol `version` with `params`.
fn startup_packet(version: i32, params: &[(&str, &str)]) -> Vec<u8> {
    let mut packet = bytes::BytesMut::new();
    pglane::protocol::startup::encode_startup_version(&mut packet, version, params);
    packet.to_vec()
}

const V3_0: i32 = 0x0003_0000;

/// PostgreSQL 18's libpq asks for protocol 3.2 with
/// `max_protocol_version=latest`, and any client may send protocol options
/// (`_pq_.*`): PostgreSQL 15 answers NegotiateProtocolVersion (3.0, and the
/// options it does not know) before authentication, and the session goes
/// on in 3.0. pglane refused both with FATAL 08P01.
#[test]
fn protocol_3_2_and_protocol_options_are_negotiated_down_to_3_0() {
    let pg = postgres();
    let lane = start("transaction", "");
    let cases: [(i32, &[(&str, &str)]); 4] = [
        (V3_0 | 2, &[]),
        (V3_0, &[("_pq_.compression", "on")]),
        (V3_0 | 2, &[("_pq_.a", "1"), ("_pq_.b", "")]),
        (V3_0 | 0x7fff, &[]),
    ];
    for (version, options) in cases {
        let login = |port: u16, user: &str, db: &str| {
            let mut params = vec![("user", user), ("database", db)];
            params.extend_from_slice(options);
            let (mut client, messages) = RawClient::start_with_bytes(port, &startup_packet(version, &params));
            assert!(errors(&messages).is_empty(), "{messages:?}");
            assert_eq!(raw::first_column(&query(&mut client, "select 'on ' || 3")), ["on 3"]);
            messages
        };
        let direct = login(pg.port, "trustuser", "postgres");
        let through = login(lane.port, SUPERUSER, "app");
        assert_eq!(direct[0].tag, backend::NEGOTIATE_PROTOCOL_VERSION, "{version:#x}: {direct:?}");
        assert_eq!(through[0].tag, backend::NEGOTIATE_PROTOCOL_VERSION, "{version:#x}: {through:?}");
        assert_eq!(through[0].body, direct[0].body, "{version:#x} {options:?}");
        // Authentication comes right after, as on PostgreSQL.
        assert_eq!(through[1].tag, backend::AUTHENTICATION);
    }
    // 3.0 without options: no negotiation, from either.
    for (port, user, db) in [(pg.port, "trustuser", "postgres"), (lane.port, SUPERUSER, "app")] {
        let (_, messages) = RawClient::start_with_bytes(port, &startup_packet(V3_0, &[("user", user), ("database", db)]));
        assert_eq!(messages[0].tag, backend::AUTHENTICATION);
    }
}

/// Protocol versions but 3 are refused as PostgreSQL refuses them: 1 and 2
/// with a protocol-2 error line (which is what those clients can read), 4
/// with an ErrorResponse, both FATAL 0A000 with the same words.
#[test]
fn protocols_other_than_3_are_refused_in_postgresql_words_and_format() {
    let pg = postgres();
    let lane = start("transaction", "");
    let answer = |port: u16, version: i32| {
        let mut client = RawClient::connect(port);
        client.send(&startup_packet(version, &[("user", "trustuser")]));
        let mut got = Vec::new();
        let mut s = client.into_stream();
        std::io::Read::read_to_end(&mut s, &mut got).expect("read");
        got
    };
    for version in [0x0001_0000, 0x0002_0000] {
        let direct = answer(pg.port, version);
        assert!(direct.starts_with(b"EFATAL:  unsupported frontend protocol"), "{direct:?}");
        assert_eq!(answer(lane.port, version), direct, "{version:#x}");
    }
    let fields = |bytes: Vec<u8>| {
        let mut client_buf = bytes::BytesMut::from(&bytes[..]);
        let m = pglane::protocol::frame::split_message(&mut client_buf, 1 << 20).unwrap().expect("a message");
        assert_eq!(m.tag, backend::ERROR_RESPONSE);
        backend::decode_error_fields(&m.body).unwrap()
    };
    let direct = fields(answer(pg.port, 0x0004_0000));
    assert_eq!(
        (direct.code.as_str(), direct.message.as_str()),
        ("0A000", "unsupported frontend protocol 4.0: server supports 3.0 to 3.0")
    );
    assert_eq!(fields(answer(lane.port, 0x0004_0000)), direct);
}

/// What a client sends after its startup packet, or after its password,
/// in the same write (a pipelined first query) is the session's first
/// message, on PostgreSQL and through pglane (which used to drop what
/// followed a password message).
#[test]
fn bytes_after_the_startup_packet_and_the_password_are_the_first_messages() {
    let pg = postgres();
    let mut then = bytes::BytesMut::new();
    pglane::protocol::frontend::query(&mut then, "select 'first ' || 42");
    let expect_answer = |client: &mut RawClient, what: &str| {
        let messages = client.until_ready();
        assert!(errors(&messages).is_empty(), "{what}: {messages:?}");
        assert_eq!(raw::first_column(&messages), ["first 42"], "{what}");
    };
    // Trust: right behind the StartupMessage.
    let trusting = start("transaction", "");
    for (port, user, db) in [(pg.port, "trustuser", "postgres"), (trusting.port, SUPERUSER, "app")] {
        let mut first = startup_packet(V3_0, &[("user", user), ("database", db)]);
        first.extend_from_slice(&then);
        let mut client = RawClient::connect(port);
        client.send(&first);
        let login = client.until_ready();
        assert!(errors(&login).is_empty(), "{login:?}");
        expect_answer(&mut client, &format!("trust on {port}"));
    }
    // md5: right behind the password message.
    let md5 = start("session", "auth_type = \"md5\"");
    for (port, user, password, db) in
        [(pg.port, "md5user", "md5pass", "postgres"), (md5.port, SUPERUSER, SUPERUSER_PASSWORD, "app")]
    {
        let mut client = RawClient::connect(port);
        client.send(&startup_packet(V3_0, &[("user", user), ("database", db)]));
        let request = client.recv();
        let Ok(backend::Authentication::Md5Password { salt }) = backend::decode_authentication(&request.body) else {
            panic!("md5 on {port}: {request:?}");
        };
        let hash = pglane::auth::md5::md5_password_hash(user, password);
        let mut out = bytes::BytesMut::new();
        pglane::protocol::frontend::password(&mut out, &pglane::auth::md5::md5_salted_response(&hash, salt));
        out.extend_from_slice(&then);
        client.send(&out);
        let login = client.until_ready();
        assert!(errors(&login).is_empty(), "{login:?}");
        expect_answer(&mut client, &format!("md5 on {port}"));
    }
}

/// node-postgres' `end()` before its socket connected writes Terminate
/// ahead of the StartupMessage: PostgreSQL reads its first four bytes as a
/// length out of bounds and closes without a word (it logs "invalid length
/// of startup packet"), and the client, which is ending anyway, is content.
/// pglane answered with a FATAL, which node-postgres reports as an error.
/// The same for any length out of bounds and for a packet cut short.
#[test]
fn a_first_packet_of_bad_length_is_closed_without_a_word() {
    let pg = postgres();
    let lane = start("transaction", "");
    let startup = startup_packet(V3_0, &[("user", "trustuser")]);
    let mut terminate_first = b"X\0\0\0\x04".to_vec();
    terminate_first.extend_from_slice(&startup);
    let cases: [(&str, Vec<u8>); 4] = [
        ("Terminate before the startup packet", terminate_first),
        ("a length of 3", vec![0, 0, 0, 3, 0, 0, 0, 0]),
        ("a length above 10000", vec![0, 0, 0x27, 0x11]),
        ("a CancelRequest cut short", vec![0, 0, 0, 12, 0x04, 0xd2, 0x16, 0x2e, 0, 0, 0, 1]),
    ];
    for (what, bytes) in cases {
        for port in [pg.port, lane.port] {
            let mut client = RawClient::connect(port);
            client.send(&bytes);
            let mut s = client.into_stream();
            let _ = s.shutdown(std::net::Shutdown::Write);
            let mut got = Vec::new();
            let _ = std::io::Read::read_to_end(&mut s, &mut got);
            assert_eq!(got, b"", "{what} on port {port}");
        }
    }
}

/// Bytes that came in with an SSLRequest or GSSENCRequest were sent before
/// the client saw the answer: PostgreSQL refuses them, whatever it answers,
/// rather than read them as if they came through the encryption (the rule
/// of CVE-2021-23214). pglane answers 'N' to both here (no TLS configured).
#[test]
fn bytes_sent_with_an_encryption_request_are_refused() {
    let pg = postgres();
    let lane = start("transaction", "");
    let startup = startup_packet(V3_0, &[("user", "trustuser")]);
    let refusal = |port: u16, request: u32| {
        let mut client = RawClient::connect(port);
        let mut first = [8u32.to_be_bytes(), request.to_be_bytes()].concat();
        first.extend_from_slice(&startup);
        client.send(&first);
        let answer = client.recv_bytes(1);
        (answer, errors(&client.until_closed()))
    };
    let direct = refusal(pg.port, 80_877_103);
    assert_eq!(direct.0, b"N");
    assert_eq!(direct.1.len(), 1);
    assert_eq!(refusal(lane.port, 80_877_103), direct);
    // The test server answers GSSENCRequest 'G' (it has GSSAPI), so only
    // PostgreSQL's words are compared here.
    let (answer, errors) = refusal(lane.port, 80_877_104);
    assert_eq!(answer, b"N");
    assert_eq!(errors.len(), 1);
    assert_eq!(
        (errors[0].code.as_str(), errors[0].message.as_str(), errors[0].detail.as_deref()),
        ("08P01", "received unencrypted data after GSSAPI encryption request", direct.1[0].detail.as_deref())
    );
}

/// The reported settings among `login`'s ParameterStatus messages, by name.
fn reported_settings(login: &[Message]) -> Vec<(String, String)> {
    const CARRIED: [&str; 6] =
        ["application_name", "client_encoding", "DateStyle", "IntervalStyle", "TimeZone", "standard_conforming_strings"];
    login
        .iter()
        .filter(|m| m.tag == backend::PARAMETER_STATUS)
        .map(|m| backend::decode_parameter_status(&m.body).expect("valid ParameterStatus"))
        .filter(|(name, _)| CARRIED.contains(&name.as_str()))
        .collect()
}

/// Reported settings a startup packet gives are reported as PostgreSQL
/// reports them, not as the client spelled them: `utf-8` is `UTF8` (asyncpg
/// sends `utf-8`, and checks what comes back), `iso, dmy` is `ISO, DMY`,
/// `utc` is `UTC`; at login (the first time a pool sees a spelling and every
/// time after, when it knows it), and after a RESET. A value the server
/// does not take is refused at login with the server's error, as on
/// PostgreSQL.
#[test]
fn reported_settings_are_spelled_as_the_server_reports_them() {
    let pg = postgres();
    let given: [&[(&str, &str)]; 3] = [
        &[("client_encoding", "utf-8"), ("DateStyle", "iso, dmy"), ("TimeZone", "utc"), ("IntervalStyle", "ISO_8601")],
        &[("client_encoding", "utf8"), ("application_name", "café"), ("standard_conforming_strings", "yes")],
        &[("client_encoding", "Unicode"), ("TimeZone", "europe/paris"), ("options", "-c DateStyle=german")],
    ];
    let login = |port: u16, user: &str, db: &str, settings: &[(&str, &str)]| {
        let mut params = vec![("user", user), ("database", db)];
        params.extend_from_slice(settings);
        RawClient::start(port, &params)
    };
    for mode in MODES {
        let lane = start(mode, "");
        for settings in given {
            let (mut direct, direct_login) = login(pg.port, "trustuser", "postgres", settings);
            let expected = reported_settings(&direct_login);
            assert!(expected.iter().any(|(n, v)| n == "client_encoding" && v == "UTF8"), "{expected:?}");
            // The first login teaches the pool the spelling, the next ones use it.
            for round in 0..3 {
                let (mut through, through_login) = login(lane.port, SUPERUSER, "app", settings);
                assert_eq!(reported_settings(&through_login), expected, "{mode}, round {round}, {settings:?}");
                // And after changing and resetting it.
                for client in [&mut direct, &mut through] {
                    assert!(errors(&query(client, "SET client_encoding = 'LATIN1'")).is_empty());
                }
                let reset = |client: &mut RawClient| reported_settings(&query(client, "RESET client_encoding"));
                let direct_reset = reset(&mut direct);
                assert_eq!(direct_reset, [("client_encoding".to_owned(), "UTF8".to_owned())]);
                assert_eq!(reset(&mut through), direct_reset, "{mode}, round {round}");
            }
        }
        // A value the server does not take: refused at login, as PostgreSQL does.
        let bad = [("client_encoding", "no-such-encoding")];
        let (_, direct) = login(pg.port, "trustuser", "postgres", &bad);
        let (_, through) = login(lane.port, SUPERUSER, "app", &bad);
        let expected = errors(&direct);
        assert_eq!(expected.len(), 1, "{direct:?}");
        assert_eq!(errors(&through), expected, "{mode}");
        assert!(through.iter().all(|m| m.tag != backend::AUTHENTICATION || m.body[..] == [0, 0, 0, 0]), "{through:?}");
        // The pool goes on serving.
        let (mut next, _) = login(lane.port, SUPERUSER, "app", &[]);
        assert_eq!(raw::first_column(&query(&mut next, "show client_encoding")), ["UTF8"]);
    }
}

/// Learning a spelling never makes a login wait for another client's
/// server connection: with the only one held by a session-mode client, a
/// client with a spelling the pool has not seen logs in at once (and keeps
/// its own spelling, the one exception), its first query waits as any
/// would, and the spelling learned there serves the next client's login.
#[test]
fn learning_a_spelling_never_makes_a_login_wait() {
    let lane = Pglane::start_with_args(
        &format!(
            "pool_mode = \"session\"\nauth_type = \"trust\"\n\
             [databases.app]\nhost = \"127.0.0.1\"\nport = {port}\ndbname = \"postgres\"\npool_size = 1\n\
             [users.{SUPERUSER}]\npassword = \"{SUPERUSER_PASSWORD}\"\n",
            port = postgres().port
        ),
        &["--cores", "1"],
    );
    let spelled = [("user", SUPERUSER), ("database", "app"), ("client_encoding", "unicode")];
    let mut holder = RawClient::login(lane.port, SUPERUSER, "app");
    assert!(errors(&query(&mut holder, "select 1")).is_empty());
    let started = std::time::Instant::now();
    let (mut waiting, login) = RawClient::start(lane.port, &spelled);
    assert!(started.elapsed() < std::time::Duration::from_secs(5), "the login waited {:?}", started.elapsed());
    assert!(errors(&login).is_empty(), "{login:?}");
    assert!(reported_settings(&login).contains(&("client_encoding".to_owned(), "unicode".to_owned())), "{login:?}");
    raw::send_query(&mut waiting, "show client_encoding");
    drop(holder);
    assert_eq!(raw::first_column(&waiting.until_ready()), ["UTF8"]);
    drop(waiting);
    let (_, next) = RawClient::start(lane.port, &spelled);
    assert!(reported_settings(&next).contains(&("client_encoding".to_owned(), "UTF8".to_owned())), "{next:?}");
}
