//! A raw wire-protocol client for tests that need exact control over the
//! messages sent (pipelines, reused statement names, malformed input).
//! It logs in with trust auth and speaks through pglane's own encoders.
// Each test crate that includes it uses a different part of it.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use bytes::BytesMut;
use pglane::protocol::backend;
use pglane::protocol::frame::{split_message, Message};
use pglane::protocol::startup;

pub struct RawClient {
    stream: TcpStream,
    buf: BytesMut,
}

impl RawClient {
    /// Connects and logs in (the server must trust this user), reading up to
    /// the first ReadyForQuery.
    pub fn login(port: u16, user: &str, database: &str) -> RawClient {
        Self::login_with(port, &[("user", user), ("database", database)])
    }

    /// Like [`RawClient::login`], with these startup parameters.
    pub fn login_with(port: u16, params: &[(&str, &str)]) -> RawClient {
        let (client, login) = Self::start(port, params);
        assert!(login.iter().all(|m| m.tag != backend::ERROR_RESPONSE), "login failed: {login:?}");
        client
    }

    /// Sends a StartupMessage with `params` and reads the server's answer
    /// up to the first ReadyForQuery or ErrorResponse, whatever it is.
    pub fn start(port: u16, params: &[(&str, &str)]) -> (RawClient, Vec<Message>) {
        let mut client = Self::connect(port);
        let login = client.startup(params);
        (client, login)
    }

    /// This end's address.
    pub fn local_addr(&self) -> std::net::SocketAddr {
        self.stream.local_addr().expect("local address")
    }

    /// Connects and sends nothing yet.
    pub fn connect(port: u16) -> RawClient {
        let stream = TcpStream::connect(("127.0.0.1", port)).expect("connect");
        stream.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        RawClient { stream, buf: BytesMut::new() }
    }

    /// Like [`RawClient::start`], sending `first` (a startup packet of any
    /// kind, maybe with more behind it) as the connection's first bytes.
    pub fn start_with_bytes(port: u16, first: &[u8]) -> (RawClient, Vec<Message>) {
        let mut client = Self::connect(port);
        let login = client.startup_with_bytes(first);
        (client, login)
    }

    /// Sends a StartupMessage with `params` and reads the server's answer
    /// up to the first ReadyForQuery or ErrorResponse, whatever it is.
    pub fn startup(&mut self, params: &[(&str, &str)]) -> Vec<Message> {
        let mut out = BytesMut::new();
        startup::encode_startup(&mut out, params);
        self.startup_with_bytes(&out)
    }

    /// Like [`RawClient::startup`], sending `first` as it is.
    pub fn startup_with_bytes(&mut self, first: &[u8]) -> Vec<Message> {
        self.send(first);
        let mut login = Vec::new();
        loop {
            let m = self.recv();
            let done = m.tag == backend::READY_FOR_QUERY || m.tag == backend::ERROR_RESPONSE;
            login.push(m);
            if done {
                return login;
            }
        }
    }

    /// The socket, for reading and writing it by hand.
    pub fn into_stream(self) -> TcpStream {
        self.stream
    }

    /// The next `n` bytes as they come (an SSLRequest's one-byte answer).
    pub fn recv_bytes(&mut self, n: usize) -> Vec<u8> {
        while self.buf.len() < n {
            let mut chunk = [0u8; 8192];
            let got = self.stream.read(&mut chunk).expect("read");
            assert!(got > 0, "connection closed");
            self.buf.extend_from_slice(&chunk[..got]);
        }
        self.buf.split_to(n).to_vec()
    }

    /// A second handle on the same connection (to write while this one reads).
    pub fn try_clone(&self) -> RawClient {
        RawClient { stream: self.stream.try_clone().expect("clone the socket"), buf: BytesMut::new() }
    }

    pub fn send(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).expect("send");
    }

    /// The next message from the server.
    pub fn recv(&mut self) -> Message {
        loop {
            if let Some(m) = split_message(&mut self.buf, 1 << 30).expect("valid message") {
                return m;
            }
            let mut chunk = [0u8; 8192];
            let n = self.stream.read(&mut chunk).expect("read");
            assert!(n > 0, "connection closed");
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }

    /// Every message until the other side closes the connection.
    pub fn until_closed(&mut self) -> Vec<Message> {
        self.read_until(|_| false)
    }

    /// Messages up to and including the next ReadyForQuery, or up to the
    /// connection's end if that comes first.
    pub fn until_closed_or_ready(&mut self) -> Vec<Message> {
        self.read_until(|m| m.tag == backend::READY_FOR_QUERY)
    }

    fn read_until(&mut self, last: impl Fn(&Message) -> bool) -> Vec<Message> {
        let mut got = Vec::new();
        loop {
            while let Some(m) = split_message(&mut self.buf, 1 << 30).expect("valid message") {
                let done = last(&m);
                got.push(m);
                if done {
                    return got;
                }
            }
            let mut chunk = [0u8; 8192];
            match self.stream.read(&mut chunk) {
                Ok(0) => {
                    assert!(self.buf.is_empty(), "closed in the middle of a message: {:?}", self.buf);
                    return got;
                }
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                // A reset after the last message is a close too.
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return got,
                Err(e) => panic!("read: {e}"),
            }
        }
    }

    /// Messages up to and including the next ReadyForQuery.
    pub fn until_ready(&mut self) -> Vec<Message> {
        let mut got = Vec::new();
        loop {
            let m = self.recv();
            let done = m.tag == backend::READY_FOR_QUERY;
            got.push(m);
            if done {
                return got;
            }
        }
    }
}

/// Sends the simple query `sql`, without waiting for its answer.
pub fn send_query(client: &mut RawClient, sql: &str) {
    let mut out = BytesMut::new();
    pglane::protocol::frontend::query(&mut out, sql);
    client.send(&out);
}

/// Sends the simple query `sql` and reads its answer, up to ReadyForQuery.
pub fn query(client: &mut RawClient, sql: &str) -> Vec<Message> {
    send_query(client, sql);
    client.until_ready()
}

/// The tags of `messages`, as a string (e.g. "12DCZ").
pub fn tags(messages: &[Message]) -> String {
    messages.iter().map(|m| m.tag as char).collect()
}

/// The SQLSTATE of the first ErrorResponse in `messages`.
pub fn error_code(messages: &[Message]) -> Option<String> {
    messages
        .iter()
        .find(|m| m.tag == backend::ERROR_RESPONSE)
        .map(|m| backend::decode_error_fields(&m.body).expect("valid error").code)
}

/// The text of the first column of each DataRow in `messages`.
pub fn first_column(messages: &[Message]) -> Vec<String> {
    messages
        .iter()
        .filter(|m| m.tag == backend::DATA_ROW)
        .map(|m| {
            let row = backend::decode_data_row(&m.body).expect("valid row");
            let value = row.iter().next().expect("one column").expect("not null");
            String::from_utf8(value.to_vec()).expect("utf-8")
        })
        .collect()
}
