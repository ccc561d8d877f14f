//! Differential scenarios for the integration tests: the same wire
//! messages, sent by several clients with their own startup settings, get
//! the same bytes back from PostgreSQL directly and through pglane.
//!
//! A scenario is a list of steps, each some protocol messages one client
//! sends, answered up to its last ReadyForQuery. It runs once against
//! PostgreSQL with one connection per client, and once through pglane with
//! the clients sharing its server connections, against the same database
//! (so that table and type OIDs agree), and every reply of every step must be
//! the same, byte for byte. `SHARING_SHOW=1` prints every step's replies,
//! both ways.
// Each test crate that includes it uses a different part of it.
#![allow(dead_code)]

use bytes::BytesMut;
use pglane::protocol::backend;
use pglane::protocol::frame::Message;
use pglane::protocol::frontend::{self, Target};

use crate::common::{postgres, Pglane};
use crate::raw::{first_column, RawClient};

/// The role every client logs in as: trusted over TCP by the test server.
pub const USER: &str = "trustuser";

/// What pglane runs with in a scenario.
#[derive(Clone, Copy, Debug)]
pub enum Features {
    /// The config's defaults.
    Defaults,
    /// auto_prepare (from the first execution) and binary_negotiation.
    Everything,
    /// Both off.
    Nothing,
}

impl Features {
    pub fn config(self) -> &'static str {
        match self {
            Features::Defaults => "",
            Features::Everything => "auto_prepare = true\nauto_prepare_after = 1\nbinary_negotiation = true\n",
            Features::Nothing => "auto_prepare = false\nbinary_negotiation = false\n",
        }
    }
}

pub const ALL_FEATURES: [Features; 3] = [Features::Defaults, Features::Everything, Features::Nothing];

/// One client's messages, answered up to the last of their ReadyForQuerys.
pub struct Step {
    pub client: usize,
    pub bytes: BytesMut,
}

pub struct Scenario {
    /// Each client's startup parameters beyond user and database.
    pub clients: Vec<Vec<(&'static str, &'static str)>>,
    pub steps: Vec<Step>,
    /// Compare errors without their source-location fields (F, L, R: the
    /// file, line and function of PostgreSQL's C source): for scenarios in
    /// which pglane answers an error itself (a name the client has not
    /// parsed), whose code, severity and message are PostgreSQL's but not
    /// the location in a particular build's source. Everything else is
    /// compared byte for byte.
    pub error_locations_may_differ: bool,
}

impl Scenario {
    pub fn new(clients: &[&[(&'static str, &'static str)]]) -> Scenario {
        Scenario { clients: clients.iter().map(|c| c.to_vec()).collect(), steps: Vec::new(), error_locations_may_differ: false }
    }

    pub fn step(&mut self, client: usize, build: impl FnOnce(&mut BytesMut)) -> &mut Self {
        let mut bytes = BytesMut::new();
        build(&mut bytes);
        self.steps.push(Step { client, bytes });
        self
    }

    /// A simple query.
    pub fn query(&mut self, client: usize, sql: &str) -> &mut Self {
        self.step(client, |b| frontend::query(b, sql))
    }

    /// `sql` as libpq's PQexecParams sends it: the unnamed statement and
    /// portal, text parameters, Describe portal, Execute, Sync.
    pub fn exec_params(&mut self, client: usize, sql: &str, params: &[&str]) -> &mut Self {
        self.step(client, |b| unnamed_exec(b, sql, params))
    }

    /// Parse of `name` with Describe statement, then Sync (PQprepare +
    /// PQdescribePrepared in one go).
    pub fn prepare(&mut self, client: usize, name: &str, sql: &str) -> &mut Self {
        self.step(client, |b| {
            frontend::parse(b, name, sql, &[]);
            frontend::describe(b, Target::Statement, name);
            frontend::sync(b);
        })
    }

    /// Bind of `name` with text parameters, Describe portal, Execute, Sync
    /// (PQexecPrepared).
    pub fn exec_prepared(&mut self, client: usize, name: &str, params: &[&str]) -> &mut Self {
        self.step(client, |b| bind_exec(b, name, params))
    }

    /// The replies to every step, through a connection per client to `port`
    /// and `database`.
    pub fn run(&self, port: u16, database: &str) -> Vec<Vec<Message>> {
        let mut clients: Vec<RawClient> = self
            .clients
            .iter()
            .map(|params| {
                let mut all = vec![("user", USER), ("database", database)];
                all.extend(params.iter().copied());
                RawClient::login_with(port, &all)
            })
            .collect();
        self.steps
            .iter()
            .map(|step| {
                let client = &mut clients[step.client];
                client.send(&step.bytes);
                (0..ready_count(&step.bytes)).flat_map(|_| client.until_ready()).collect()
            })
            .collect()
    }
}

/// How many ReadyForQuery messages the server owes for `bytes`: one per
/// Query and per Sync.
pub fn ready_count(bytes: &[u8]) -> usize {
    let mut rest = bytes;
    let mut count = 0;
    while rest.len() >= 5 {
        let len = u32::from_be_bytes([rest[1], rest[2], rest[3], rest[4]]) as usize;
        if matches!(rest[0], frontend::QUERY | frontend::SYNC) {
            count += 1;
        }
        rest = &rest[1 + len..];
    }
    count
}

pub fn unnamed_exec(b: &mut BytesMut, sql: &str, params: &[&str]) {
    frontend::parse(b, "", sql, &[]);
    bind_exec(b, "", params);
}

pub fn bind_exec(b: &mut BytesMut, name: &str, params: &[&str]) {
    frontend::bind(b, "", name, &[], params.iter().map(|p| Some(p.as_bytes())), &[]);
    frontend::describe(b, Target::Portal, "");
    frontend::execute(b, "", 0);
    frontend::sync(b);
}

/// A readable form of a reply, for failure messages.
pub fn show(messages: &[Message]) -> String {
    messages
        .iter()
        .map(|m| match m.tag {
            backend::DATA_ROW => format!("D{:?}", first_column(std::slice::from_ref(m))),
            backend::ERROR_RESPONSE => {
                let e = backend::decode_error_fields(&m.body).expect("error");
                format!("E[{} {}]", e.code, e.message)
            }
            backend::COMMAND_COMPLETE => format!("C[{}]", backend::decode_command_complete(&m.body).unwrap_or("?")),
            backend::PARAMETER_STATUS => {
                let (n, v) = backend::decode_parameter_status(&m.body).expect("status");
                format!("S[{n}={v}]")
            }
            tag => (tag as char).to_string(),
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Runs `scenario` against PostgreSQL directly and through pglane (one
/// shard, transaction mode, `pool_size` server connections, every
/// [`Features`]), in database `db`
/// (created fresh, owned by the clients' role, with `setup` run in it as
/// that role), and asserts the replies are the
/// same bytes.
pub fn same_through_pglane(db: &str, setup: &str, pool_size: usize, scenario: &Scenario) {
    same_through_pglane_in(db, setup, pool_size, "transaction", scenario);
}

/// [`same_through_pglane`] in `pool_mode`.
pub fn same_through_pglane_in(db: &str, setup: &str, pool_size: usize, pool_mode: &str, scenario: &Scenario) {
    let pg = postgres();
    for features in ALL_FEATURES {
        pg.fresh_database(db, Some(USER));
        if !setup.is_empty() {
            pg.psql_db(db, &format!("set role {USER}; {setup}"));
        }
        let direct = scenario.run(pg.port, db);
        let lane = Pglane::start_with_args(
            &format!(
                "pool_mode = \"{pool_mode}\"\nauth_type = \"trust\"\n{}[databases.app]\nhost = \"127.0.0.1\"\n\
                 port = {}\ndbname = \"{db}\"\npool_size = {pool_size}\n[users.{USER}]\n",
                features.config(),
                pg.port
            ),
            &["--cores", "1"],
        );
        let through = scenario.run(lane.port, "app");
        if std::env::var_os("SHARING_SHOW").is_some() {
            for (i, (d, t)) in direct.iter().zip(&through).enumerate() {
                eprintln!("{features:?} step {i}:\n  direct: {}\n  pglane: {}", show(d), show(t));
            }
        }
        for (i, (d, t)) in direct.iter().zip(&through).enumerate() {
            let same = match scenario.error_locations_may_differ {
                true => without_error_locations(d) == without_error_locations(t),
                false => d == t,
            };
            assert!(
                same,
                "step {i} (client {}) with {features:?}:\n  direct: {}\n  pglane: {}\n--- pglane log ---\n{}",
                scenario.steps[i].client,
                show(d),
                show(t),
                lane.log()
            );
        }
    }
}

/// `messages` with the F, L and R fields of each ErrorResponse left out.
fn without_error_locations(messages: &[Message]) -> Vec<(u8, Vec<u8>)> {
    messages
        .iter()
        .map(|m| match m.tag {
            backend::ERROR_RESPONSE => {
                let fields = m.body.split(|&b| b == 0).filter(|f| !f.is_empty() && !matches!(f[0], b'F' | b'L' | b'R'));
                (m.tag, fields.flat_map(|f| f.iter().copied().chain([0])).collect())
            }
            tag => (tag, m.body.to_vec()),
        })
        .collect()
}
