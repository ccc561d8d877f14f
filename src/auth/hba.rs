//! Host-based authentication rules: the `auth_hba_file` of `auth_type = hba`,
//! in pg_hba.conf format, and the first-match decision over them.
//!
//! This module owns parsing the file's text into [`Hba`] and deciding which
//! line, if any, covers a connection ([`Hba::decide`]); it also words
//! PostgreSQL's refusals. It never reads files (the config module does), never
//! touches sockets, and never decides anything from a line it could not parse:
//! a line it does not understand is an error for the whole file, because
//! skipping a `reject` line would let in connections it was meant to stop.
//!
//! Supported, as in PostgreSQL:
//! - connection types `local` (clients on pglane's `unix_socket_dir`
//!   socket), `host`, `hostssl`, `hostnossl` (TCP clients);
//! - database and user fields as comma-separated lists of names, `"quoted"`
//!   names (a quoted `"all"` is a name, not the keyword), `all`, and
//!   `sameuser` and `replication` in the database field (`replication`
//!   covers physical replication connections, which nothing else covers;
//!   a logical one, `replication=database`, is covered by its database);
//! - addresses as `all`, CIDR (`10.0.0.0/8`, `::1/128`), or an address
//!   followed by a netmask field (`10.0.0.0 255.0.0.0`). An IPv4 line matches
//!   IPv4 clients (including IPv4-mapped IPv6 ones), an IPv6 line IPv6 clients;
//! - methods `trust`, `reject`, `md5`, `scram-sha-256`, `password`;
//! - `#` comments and blank lines.
//!
//! Not supported (an error naming the line): `hostgssenc`/`hostnogssenc`,
//! `+group` and `@file` names, `samerole`/`samegroup`, host
//! names and `samehost`/`samenet`, any other method (`peer`, `ident`, `cert`,
//! `ldap`, ...), options after the method (`clientcert=...`), `include`
//! directives and backslash line continuations.

use std::fmt;
use std::net::IpAddr;

use thiserror::Error;

/// A line pglane cannot use, with its number (from 1).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("line {line}: {reason}")]
pub struct HbaError {
    pub line: usize,
    pub reason: String,
}

/// How the client reached pglane.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Connection {
    Local,
    Host,
    HostSsl,
    HostNoSsl,
}

/// One entry of a database or user list.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Name {
    All,
    /// Database field only: the database named like the user.
    SameUser,
    /// Database field only: physical replication connections.
    Replication,
    Exact(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Address {
    All,
    Net { network: IpAddr, prefix: u8 },
}

/// What a matching line asks of the client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HbaMethod {
    Trust,
    Reject,
    Md5,
    ScramSha256,
    /// The password in clear text.
    Password,
}

/// One rule, as written on one line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    /// Line number in the file, from 1.
    pub line: usize,
    connection: Connection,
    databases: Vec<Name>,
    users: Vec<Name>,
    address: Address,
    pub method: HbaMethod,
}

/// The connection a decision is about.
#[derive(Debug, Clone, Copy)]
pub struct Client<'a> {
    /// The client's address; `None` for a unix socket.
    pub addr: Option<IpAddr>,
    pub tls: bool,
    pub database: &'a str,
    pub user: &'a str,
    /// A physical replication connection (`replication=true`): no database.
    pub physical_replication: bool,
}

/// A parsed auth_hba_file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Hba {
    rules: Vec<Rule>,
}

impl Hba {
    /// Parses the whole file; the first line pglane cannot use is the error.
    pub fn parse(text: &str) -> Result<Hba, HbaError> {
        let mut rules = Vec::new();
        for (index, line) in text.lines().enumerate() {
            let number = index + 1;
            let fields = tokenize(line).map_err(|reason| HbaError { line: number, reason })?;
            if fields.is_empty() {
                continue;
            }
            let rule = parse_rule(number, &fields).map_err(|reason| HbaError { line: number, reason })?;
            rules.push(rule);
        }
        Ok(Hba { rules })
    }

    /// The first rule that covers `client`, as PostgreSQL decides: later
    /// lines are never looked at, and no rule means the connection is refused.
    #[must_use]
    pub fn decide(&self, client: &Client<'_>) -> Option<&Rule> {
        self.rules.iter().find(|rule| rule.covers(client))
    }

    #[must_use]
    pub fn len(&self) -> usize {
        self.rules.len()
    }

    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }
}

impl Rule {
    fn covers(&self, client: &Client<'_>) -> bool {
        let connection = match (self.connection, client.addr) {
            (Connection::Local, None) => true,
            (Connection::Local, Some(_)) | (_, None) => false,
            (Connection::Host, Some(_)) => true,
            (Connection::HostSsl, Some(_)) => client.tls,
            (Connection::HostNoSsl, Some(_)) => !client.tls,
        };
        connection
            && self.databases.iter().any(|name| match (name, client.physical_replication) {
                (Name::Replication, physical) => physical,
                (_, true) => false,
                (name, false) => name.matches(client.database, client.user),
            })
            && self.users.iter().any(|name| name.matches(client.user, client.user))
            && client.addr.is_none_or(|addr| self.address.contains(addr))
    }
}

impl Name {
    /// Does this entry name `value` (a database or user name)? `user` is for
    /// `sameuser`.
    fn matches(&self, value: &str, user: &str) -> bool {
        match self {
            Name::All => true,
            Name::SameUser => value == user,
            Name::Replication => false,
            Name::Exact(name) => name == value,
        }
    }
}

impl Address {
    fn contains(&self, addr: IpAddr) -> bool {
        let Address::Net { network, prefix } = self else { return true };
        match (network, addr.to_canonical()) {
            (IpAddr::V4(net), IpAddr::V4(addr)) => same_prefix(&net.octets(), &addr.octets(), *prefix),
            (IpAddr::V6(net), IpAddr::V6(addr)) => same_prefix(&net.octets(), &addr.octets(), *prefix),
            _ => false,
        }
    }
}

/// Do `a` and `b` agree on their first `prefix` bits?
fn same_prefix(a: &[u8], b: &[u8], prefix: u8) -> bool {
    let prefix = usize::from(prefix);
    let (whole, bits) = (prefix / 8, prefix % 8);
    if a[..whole] != b[..whole] {
        return false;
    }
    bits == 0 || {
        let mask = 0xffu8 << (8 - bits);
        (a[whole] & mask) == (b[whole] & mask)
    }
}

/// One whitespace-separated field, split at its commas.
type Field = Vec<Token>;

/// A list item, remembering whether it was quoted (a quoted keyword is a name).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Token {
    text: String,
    quoted: bool,
}

/// Splits a line into fields and each field into its comma-separated items,
/// dropping a `#` comment (outside quotes).
fn tokenize(line: &str) -> Result<Vec<Field>, String> {
    let mut fields: Vec<Field> = Vec::new();
    let mut chars = line.chars().peekable();
    loop {
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        match chars.peek() {
            None | Some('#') => return Ok(fields),
            Some(_) => {}
        }
        let mut field = Vec::new();
        loop {
            let mut token = Token { text: String::new(), quoted: false };
            let mut in_quotes = false;
            while let Some(&c) = chars.peek() {
                if in_quotes {
                    chars.next();
                    if c == '"' {
                        in_quotes = false;
                    } else {
                        token.text.push(c);
                    }
                } else if c == '"' {
                    chars.next();
                    in_quotes = true;
                    token.quoted = true;
                } else if c == ',' || c == '#' || c.is_whitespace() {
                    break;
                } else {
                    chars.next();
                    token.text.push(c);
                }
            }
            if in_quotes {
                return Err("unterminated quoted name".into());
            }
            if token.text.is_empty() && !token.quoted {
                return Err("empty item in a comma-separated list".into());
            }
            field.push(token);
            if chars.next_if_eq(&',').is_none() {
                break;
            }
        }
        fields.push(field);
    }
}

fn parse_rule(line: usize, fields: &[Field]) -> Result<Rule, String> {
    let mut fields = fields.iter();
    let mut next = |what: &str| fields.next().ok_or_else(|| format!("the line ends before its {what}"));
    let connection = parse_connection(single(next("connection type")?, "connection type")?)?;
    let databases = parse_names(next("database")?, true)?;
    let users = parse_names(next("user")?, false)?;
    let address = match connection {
        Connection::Local => Address::All,
        _ => {
            let address = single(next("address")?, "address")?;
            match address.split_once('/') {
                Some(_) => parse_address(address, None)?,
                None if address == "all" => Address::All,
                None => parse_address(address, Some(single(next("netmask")?, "netmask")?))?,
            }
        }
    };
    let method = parse_method(single(next("method")?, "method")?)?;
    if let Some(option) = fields.next() {
        let option: Vec<&str> = option.iter().map(|t| t.text.as_str()).collect();
        return Err(format!("options after the method ({}) are not supported by pglane", option.join(",")));
    }
    Ok(Rule { line, connection, databases, users, address, method })
}

/// A field that must be one unquoted word.
fn single<'a>(field: &'a Field, what: &str) -> Result<&'a str, String> {
    match field.as_slice() {
        [token] if !token.quoted => Ok(&token.text),
        _ => Err(format!("the {what} must be a single word")),
    }
}

fn parse_connection(word: &str) -> Result<Connection, String> {
    match word {
        "local" => Ok(Connection::Local),
        "host" => Ok(Connection::Host),
        "hostssl" => Ok(Connection::HostSsl),
        "hostnossl" => Ok(Connection::HostNoSsl),
        "hostgssenc" | "hostnogssenc" => {
            Err(format!("connection type \"{word}\" is not supported: pglane does not do GSSAPI encryption"))
        }
        "include" | "include_if_exists" | "include_dir" => Err(format!("\"{word}\" directives are not supported by pglane")),
        _ => Err(format!("invalid connection type \"{word}\"")),
    }
}

fn parse_names(field: &Field, database: bool) -> Result<Vec<Name>, String> {
    field
        .iter()
        .map(|token| {
            if token.quoted {
                return Ok(Name::Exact(token.text.clone()));
            }
            match token.text.as_str() {
                "all" => Ok(Name::All),
                "sameuser" if database => Ok(Name::SameUser),
                "replication" if database => Ok(Name::Replication),
                "samerole" | "samegroup" if database => {
                    Err(format!("database keyword \"{}\" is not supported by pglane", token.text))
                }
                text if text.starts_with('+') => Err(format!("group membership (\"{text}\") is not supported by pglane")),
                text if text.starts_with('@') => Err(format!("name files (\"{text}\") are not supported by pglane")),
                text => Ok(Name::Exact(text.to_owned())),
            }
        })
        .collect()
}

/// `addr/prefix`, or `addr` with a separate netmask.
fn parse_address(address: &str, netmask: Option<&str>) -> Result<Address, String> {
    let (addr, prefix) = match (address.split_once('/'), netmask) {
        (Some((addr, prefix)), _) => (addr, Some(prefix)),
        (None, _) => (address, None),
    };
    let network: IpAddr = addr.parse().map_err(|_| match addr {
        "samehost" | "samenet" => format!("address keyword \"{addr}\" is not supported by pglane"),
        _ => format!("invalid IP address \"{addr}\" (host names are not supported by pglane)"),
    })?;
    let bits: u8 = if network.is_ipv4() { 32 } else { 128 };
    let prefix = match (prefix, netmask) {
        (Some(prefix), _) => prefix
            .parse::<u8>()
            .ok()
            .filter(|p| *p <= bits)
            .ok_or_else(|| format!("invalid CIDR mask in address \"{address}\""))?,
        (None, Some(mask)) => netmask_prefix(mask, network)?,
        (None, None) => unreachable!("parse_rule passes a netmask when the address has no /"),
    };
    Ok(Address::Net { network, prefix })
}

/// The prefix length of a netmask like `255.255.0.0`, of the address's family.
fn netmask_prefix(mask: &str, network: IpAddr) -> Result<u8, String> {
    let invalid = || format!("invalid IP mask \"{mask}\"");
    let mask: IpAddr = mask.parse().map_err(|_| invalid())?;
    let bytes = match (mask, network) {
        (IpAddr::V4(m), IpAddr::V4(_)) => m.octets().to_vec(),
        (IpAddr::V6(m), IpAddr::V6(_)) => m.octets().to_vec(),
        _ => return Err(format!("IP address and mask \"{mask}\" do not match")),
    };
    let ones: u32 = bytes.iter().map(|b| b.count_ones()).sum();
    // Contiguous: exactly the first `ones` bits set.
    let contiguous = bytes.iter().enumerate().all(|(i, b)| {
        let bits_here = (ones as usize).saturating_sub(i * 8).min(8) as u32;
        *b == if bits_here == 0 { 0 } else { 0xffu8 << (8 - bits_here) }
    });
    if contiguous {
        Ok(ones as u8)
    } else {
        Err(invalid())
    }
}

fn parse_method(word: &str) -> Result<HbaMethod, String> {
    match word {
        "trust" => Ok(HbaMethod::Trust),
        "reject" => Ok(HbaMethod::Reject),
        "md5" => Ok(HbaMethod::Md5),
        "scram-sha-256" => Ok(HbaMethod::ScramSha256),
        "password" => Ok(HbaMethod::Password),
        "peer" | "ident" | "cert" | "gss" | "sspi" | "pam" | "ldap" | "radius" | "bsd" => {
            Err(format!("authentication method \"{word}\" is not supported by pglane"))
        }
        _ => Err(format!("invalid authentication method \"{word}\"")),
    }
}

/// How PostgreSQL names the client's host and encryption in its refusals.
struct Described<'a>(&'a Client<'a>);

impl fmt::Display for Described<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let client = self.0;
        let encryption = if client.tls { "SSL encryption" } else { "no encryption" };
        match client.addr {
            Some(addr) => write!(f, "host \"{}\", ", addr.to_canonical())?,
            None => f.write_str("local connection, ")?,
        }
        match client.physical_replication {
            true => write!(f, "user \"{}\", {encryption}", client.user),
            false => write!(f, "user \"{}\", database \"{}\", {encryption}", client.user, client.database),
        }
    }
}

/// PostgreSQL's message (SQLSTATE 28000) when no line covers the connection.
#[must_use]
pub fn no_entry_message(client: &Client<'_>) -> String {
    match client.physical_replication {
        true => format!("no pg_hba.conf entry for replication connection from {}", Described(client)),
        false => format!("no pg_hba.conf entry for {}", Described(client)),
    }
}

/// PostgreSQL's message (SQLSTATE 28000) when the first covering line says `reject`.
#[must_use]
pub fn rejected_message(client: &Client<'_>) -> String {
    match client.physical_replication {
        true => format!("pg_hba.conf rejects replication connection for {}", Described(client)),
        false => format!("pg_hba.conf rejects connection for {}", Described(client)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn client<'a>(addr: &str, tls: bool, database: &'a str, user: &'a str) -> Client<'a> {
        let addr = (addr != "unix").then(|| addr.parse().unwrap());
        Client { addr, tls, database, user, physical_replication: false }
    }

    /// The line number of the rule that decides, or 0 for none.
    fn decide(hba: &Hba, addr: &str, tls: bool, database: &str, user: &str) -> usize {
        hba.decide(&client(addr, tls, database, user)).map_or(0, |r| r.line)
    }

    #[test]
    fn the_first_covering_line_decides() {
        let hba = Hba::parse(
            "# TYPE DATABASE USER ADDRESS METHOD\n\
             \n\
             host    app      alice   10.0.0.0/8        reject   # comment\n\
             host    app      alice,bob  0.0.0.0/0      md5\n\
             hostssl all      all     ::1/128           scram-sha-256\n\
             host    sameuser all     192.168.1.0 255.255.255.0 trust\n\
             local   all      all                       trust\n\
             hostnossl \"all\" all    all               password\n",
        )
        .unwrap();
        assert_eq!(hba.len(), 6);
        assert_eq!(decide(&hba, "10.1.2.3", false, "app", "alice"), 3);
        assert_eq!(hba.decide(&client("10.1.2.3", false, "app", "alice")).unwrap().method, HbaMethod::Reject);
        assert_eq!(decide(&hba, "11.1.2.3", false, "app", "alice"), 4);
        assert_eq!(decide(&hba, "10.1.2.3", false, "app", "bob"), 4);
        assert_eq!(decide(&hba, "::1", true, "app", "carol"), 5);
        // hostssl needs TLS; the v6 line does not cover v4 clients.
        assert_eq!(decide(&hba, "::1", false, "app", "carol"), 0);
        assert_eq!(decide(&hba, "127.0.0.1", true, "app", "carol"), 0);
        // sameuser, and a netmask field.
        assert_eq!(decide(&hba, "192.168.1.77", false, "carol", "carol"), 6);
        assert_eq!(decide(&hba, "192.168.2.77", false, "carol", "carol"), 0);
        assert_eq!(decide(&hba, "192.168.1.77", false, "app", "carol"), 0);
        // local lines cover unix sockets only; host lines never do.
        assert_eq!(decide(&hba, "unix", false, "app", "alice"), 7);
        // A quoted "all" is a database named all.
        assert_eq!(decide(&hba, "::2", false, "all", "dave"), 8);
        assert_eq!(decide(&hba, "::2", false, "app", "dave"), 0);
    }

    #[test]
    fn replication_covers_physical_replication_and_nothing_else_does() {
        let hba = Hba::parse(
            "host replication repl 10.0.0.0/8 scram-sha-256\n\
             host all all 10.0.0.0/8 md5\n\
             host replication all all reject\n",
        )
        .unwrap();
        let physical = |user| Client { physical_replication: true, ..client("10.0.0.1", false, "app", user) };
        assert_eq!(hba.decide(&physical("repl")).map(|r| r.line), Some(1));
        // `all` does not cover physical replication, as in PostgreSQL.
        assert_eq!(hba.decide(&physical("alice")).map(|r| r.line), Some(3));
        // A database named replication, or a logical replication connection, is an ordinary database.
        assert_eq!(decide(&hba, "10.0.0.1", false, "replication", "repl"), 2);
        assert_eq!(decide(&hba, "10.0.0.1", false, "app", "repl"), 2);
        let only_all = Hba::parse("host all all all trust").unwrap();
        let refused = physical("alice");
        assert!(only_all.decide(&refused).is_none());
        assert_eq!(
            no_entry_message(&refused),
            "no pg_hba.conf entry for replication connection from host \"10.0.0.1\", user \"alice\", no encryption"
        );
        assert_eq!(
            rejected_message(&physical("alice")),
            "pg_hba.conf rejects replication connection for host \"10.0.0.1\", user \"alice\", no encryption"
        );
    }

    #[test]
    fn ipv4_mapped_clients_match_ipv4_lines() {
        let hba = Hba::parse("host all all 127.0.0.0/8 trust").unwrap();
        assert_eq!(decide(&hba, "::ffff:127.0.0.2", false, "db", "u"), 1);
        assert_eq!(decide(&hba, "::1", false, "db", "u"), 0);
        assert_eq!(decide(&hba, "128.0.0.1", false, "db", "u"), 0);
    }

    #[test]
    fn prefixes_are_compared_bit_by_bit() {
        assert!(same_prefix(&[10, 0, 0, 1], &[10, 0, 0, 200], 24));
        assert!(same_prefix(&[10, 0, 0, 1], &[10, 0, 0, 127], 25));
        assert!(!same_prefix(&[10, 0, 0, 1], &[10, 0, 0, 128], 25));
        assert!(same_prefix(&[1, 2, 3, 4], &[9, 9, 9, 9], 0));
        assert!(!same_prefix(&[1, 2, 3, 4], &[1, 2, 3, 5], 32));
        assert_eq!(netmask_prefix("255.255.240.0", "10.0.0.0".parse().unwrap()), Ok(20));
        assert_eq!(netmask_prefix("0.0.0.0", "10.0.0.0".parse().unwrap()), Ok(0));
        assert!(netmask_prefix("255.0.255.0", "10.0.0.0".parse().unwrap()).is_err());
        assert!(netmask_prefix("ffff::", "10.0.0.0".parse().unwrap()).is_err());
    }

    #[test]
    fn what_pglane_cannot_honour_is_an_error_naming_the_line() {
        let error = |text: &str| Hba::parse(&format!("host all all all trust\n{text}")).unwrap_err();
        for (text, needle) in [
            ("hostgssenc all all all trust", "GSSAPI"),
            ("host all +admins all trust", "group"),
            ("host @dbs all all trust", "name files"),
            ("host all all samehost trust", "samehost"),
            ("host all all db.example.com/32 trust", "invalid IP address"),
            ("host all all example.com trust", "host names are not supported"),
            ("host all all 10.0.0.0/33 trust", "CIDR mask"),
            ("host all all 10.0.0.1 trust", "invalid IP mask"),
            ("host all all all peer", "\"peer\" is not supported"),
            ("host all all all md5 clientcert=verify-full", "options after the method"),
            ("host all all all", "ends before its method"),
            ("hots all all all trust", "invalid connection type"),
            ("host \"app all all trust", "unterminated"),
            ("host app,,b all all trust", "empty item"),
            ("include other.conf", "include"),
        ] {
            let e = error(text);
            assert_eq!(e.line, 2, "{text}");
            assert!(e.to_string().contains(needle), "{text}: {e}");
        }
    }

    #[test]
    fn refusals_are_worded_like_postgres() {
        let c = client("127.0.0.1", false, "app", "alice");
        assert_eq!(
            no_entry_message(&c),
            "no pg_hba.conf entry for host \"127.0.0.1\", user \"alice\", database \"app\", no encryption"
        );
        let c = client("::ffff:10.0.0.1", true, "app", "alice");
        assert_eq!(
            rejected_message(&c),
            "pg_hba.conf rejects connection for host \"10.0.0.1\", user \"alice\", database \"app\", SSL encryption"
        );
    }

    #[test]
    fn the_shipped_example_parses() {
        let hba = Hba::parse(include_str!("../../config/hba.conf")).unwrap();
        assert_eq!(hba.len(), 8);
        assert_eq!(decide(&hba, "10.1.1.1", true, "app", "app_user"), 10);
        assert_eq!(decide(&hba, "10.1.1.1", false, "app", "app_user"), 12);
        assert_eq!(decide(&hba, "192.168.10.5", false, "reports", "app_user"), 8);
        assert_eq!(decide(&hba, "192.168.10.5", false, "app", "app_user"), 0);
    }

    proptest::proptest! {
        /// Whatever the file holds, parsing and deciding never panic (the
        /// address arithmetic indexes by prefix length).
        #[test]
        fn any_text_is_parsed_or_refused_without_panicking(
            lines in proptest::collection::vec(
                proptest::collection::vec(
                    proptest::prop_oneof![
                        proptest::string::string_regex("(local|host|hostssl|hostnossl|all|sameuser|app|md5|trust|reject|password|scram-sha-256)").unwrap(),
                        proptest::string::string_regex("[0-9a-f:.]{1,20}(/[0-9]{1,3})?").unwrap(),
                        proptest::string::string_regex("[ -~]{0,12}").unwrap(),
                    ],
                    0..7,
                ),
                0..6,
            ),
            v4 in proptest::prelude::any::<[u8; 4]>(),
            v6 in proptest::prelude::any::<[u8; 16]>(),
            tls in proptest::prelude::any::<bool>(),
        ) {
            let text: String = lines.iter().map(|words| words.join(" ") + "\n").collect();
            if let Ok(hba) = Hba::parse(&text) {
                for addr in [Some(IpAddr::from(v4)), Some(IpAddr::from(v6)), None] {
                    let client = Client { addr, tls, database: "app", user: "all", physical_replication: false };
                    let _ = hba.decide(&client);
                }
            }
        }
    }

    #[test]
    fn an_empty_file_refuses_everyone() {
        let hba = Hba::parse("# nothing here\n\n").unwrap();
        assert!(hba.is_empty());
        assert_eq!(decide(&hba, "127.0.0.1", false, "app", "alice"), 0);
    }
}
