//! The built-in scenarios: each is a script (what one transaction runs) and a
//! setup step that creates the data it needs.
//!
//! This module owns the scenarios' SQL and deciding whether their data is
//! already there. Setup runs before any load, on one connection, with the
//! simple protocol; it never runs while load is being measured.

use pglane::protocol::backend::{self, ErrorFields};
use pglane::protocol::frontend;
use thiserror::Error;

use crate::conn::{ConnError, Connection};

/// A built-in scenario, as `--scenario` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Builtin {
    /// pgbench -S: one primary-key lookup in pgbench_accounts.
    SelectOnly,
    /// A four-table join with a dozen literals: planning costs more than running.
    ParserHeavy,
    /// One query fetching every row of a table of uuids (--rows, 1,000,000 by default).
    UuidFetch,
    /// One single-row INSERT into pgload_inserts.
    Insert,
}

/// Rows in the uuid-fetch table unless `--rows` says otherwise (seed 000's workload).
pub const DEFAULT_UUID_ROWS: u64 = 1_000_000;

const SELECT_ONLY: &str = "\
\\set aid random(1, 100000 * :scale)
SELECT abalance FROM pgbench_accounts WHERE aid = :aid;
";

/// Always 4 rows: the four tellers from :tid on all belong to :aid's branch,
/// and pgbench_history is empty (the LEFT JOIN only adds planning work).
const PARSER_HEAVY: &str = "\
\\set aid random(1, 100000 * :scale)
\\set bid (:aid - 1) / 100000 + 1
\\set tid (:bid - 1) * 10 + random(1, 7)
SELECT a.aid, a.abalance, b.bid, b.bbalance, t.tid, t.tbalance,
       CASE WHEN a.abalance > 100 THEN 'high' WHEN a.abalance < -100 THEN 'low' ELSE 'mid' END AS band,
       coalesce(h.delta, 0) AS last_delta
FROM pgbench_accounts a
JOIN pgbench_branches b ON b.bid = a.bid
JOIN pgbench_tellers t ON t.bid = b.bid AND t.tid BETWEEN :tid AND :tid + 3
LEFT JOIN pgbench_history h ON h.aid = a.aid AND h.tid = t.tid AND h.mtime > '2020-01-01 00:00:00'
WHERE a.aid = :aid
  AND b.bid <= :scale
  AND a.abalance BETWEEN -1000000000 AND 1000000000
  AND a.filler NOT LIKE 'zzz%'
  AND t.tbalance <> 123456789
ORDER BY t.tid
LIMIT 10;
";

const UUID_FETCH: &str = "SELECT id FROM pgload_uuids;\n";

const INSERT: &str = "\
\\set aid random(1, 100000 * :scale)
\\set delta random(-5000, 5000)
INSERT INTO pgload_inserts (aid, delta, note) VALUES (:aid, :delta, 'pgload');
";

impl Builtin {
    pub fn script(self) -> &'static str {
        match self {
            Builtin::SelectOnly => SELECT_ONLY,
            Builtin::ParserHeavy => PARSER_HEAVY,
            Builtin::UuidFetch => UUID_FETCH,
            Builtin::Insert => INSERT,
        }
    }
}

#[derive(Debug, Error)]
pub enum SetupError {
    #[error(transparent)]
    Conn(#[from] ConnError),
    #[error("setup statement failed: {error}\n  statement: {sql}")]
    Sql { sql: String, error: ErrorFields },
}

/// What setup found or made, for the report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Prepared {
    /// The scale the data has (select-only and parser-heavy read it from
    /// pgbench_branches, as pgbench does).
    pub scale: u32,
    /// Whether setup had to create the data.
    pub created: bool,
}

/// Makes sure the data of `builtin` is there: at `scale` if given (else what
/// is there, or 1), with `uuid_rows` rows for uuid-fetch. `log` hears what is
/// being done, since filling tables can take a while.
pub async fn setup(
    conn: &mut Connection,
    builtin: Builtin,
    scale: Option<u32>,
    uuid_rows: u64,
    log: &dyn Fn(&str),
) -> Result<Prepared, SetupError> {
    match builtin {
        Builtin::SelectOnly | Builtin::ParserHeavy => {
            let found = scalar(conn, "SELECT count(*) FROM pgbench_branches").await.ok().flatten();
            let found = found.and_then(|n| n.parse::<u32>().ok()).filter(|&n| n > 0);
            match (found, scale) {
                (Some(have), None) => Ok(Prepared { scale: have, created: false }),
                (Some(have), Some(want)) if have == want => Ok(Prepared { scale: have, created: false }),
                (_, want) => {
                    let scale = want.unwrap_or(1);
                    log(&format!("creating pgbench tables at scale {scale} ({} accounts)", u64::from(scale) * 100_000));
                    run_all(conn, &pgbench_tables(scale)).await?;
                    Ok(Prepared { scale, created: true })
                }
            }
        }
        Builtin::UuidFetch => {
            let scale = scale.unwrap_or(1);
            let found = scalar(conn, "SELECT count(*) FROM pgload_uuids").await.ok().flatten();
            if found.and_then(|n| n.parse::<u64>().ok()) == Some(uuid_rows) {
                return Ok(Prepared { scale, created: false });
            }
            log(&format!("creating pgload_uuids with {uuid_rows} rows"));
            run_all(
                conn,
                &[
                    "DROP TABLE IF EXISTS pgload_uuids".into(),
                    "CREATE TABLE pgload_uuids (id uuid NOT NULL)".into(),
                    format!("INSERT INTO pgload_uuids SELECT gen_random_uuid() FROM generate_series(1, {uuid_rows})"),
                    "VACUUM ANALYZE pgload_uuids".into(),
                ],
            )
            .await?;
            Ok(Prepared { scale, created: true })
        }
        Builtin::Insert => {
            // Emptied on every run, so a run's inserts can be counted.
            run_all(
                conn,
                &[
                    "CREATE TABLE IF NOT EXISTS pgload_inserts (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, \
                     aid int NOT NULL, delta int NOT NULL, note text, created timestamptz NOT NULL DEFAULT now())"
                        .into(),
                    "TRUNCATE pgload_inserts".into(),
                ],
            )
            .await?;
            Ok(Prepared { scale: scale.unwrap_or(1), created: true })
        }
    }
}

/// pgbench -i's tables and rows, generated on the server.
fn pgbench_tables(scale: u32) -> Vec<String> {
    vec![
        "DROP TABLE IF EXISTS pgbench_accounts, pgbench_branches, pgbench_history, pgbench_tellers".into(),
        "CREATE TABLE pgbench_history (tid int, bid int, aid int, delta int, mtime timestamp, filler char(22))".into(),
        "CREATE TABLE pgbench_tellers (tid int NOT NULL, bid int, tbalance int, filler char(84)) WITH (fillfactor = 100)".into(),
        "CREATE TABLE pgbench_accounts (aid int NOT NULL, bid int, abalance int, filler char(84)) WITH (fillfactor = 100)".into(),
        "CREATE TABLE pgbench_branches (bid int NOT NULL, bbalance int, filler char(88)) WITH (fillfactor = 100)".into(),
        format!("INSERT INTO pgbench_branches (bid, bbalance) SELECT bid, 0 FROM generate_series(1, {scale}) AS bid"),
        format!("INSERT INTO pgbench_tellers (tid, bid, tbalance) SELECT tid, (tid - 1) / 10 + 1, 0 FROM generate_series(1, {}) AS tid", 10 * u64::from(scale)),
        format!(
            "INSERT INTO pgbench_accounts (aid, bid, abalance, filler) SELECT aid, (aid - 1) / 100000 + 1, 0, '' FROM generate_series(1, {}) AS aid",
            100_000 * u64::from(scale)
        ),
        "ALTER TABLE pgbench_branches ADD PRIMARY KEY (bid)".into(),
        "ALTER TABLE pgbench_tellers ADD PRIMARY KEY (tid)".into(),
        "ALTER TABLE pgbench_accounts ADD PRIMARY KEY (aid)".into(),
        "VACUUM ANALYZE pgbench_branches, pgbench_tellers, pgbench_accounts, pgbench_history".into(),
    ]
}

async fn run_all(conn: &mut Connection, statements: &[String]) -> Result<(), SetupError> {
    for sql in statements {
        scalar(conn, sql).await?;
    }
    Ok(())
}

/// Runs one simple query; returns the first column of its first row, if any.
async fn scalar(conn: &mut Connection, sql: &str) -> Result<Option<String>, SetupError> {
    frontend::query(&mut conn.out, sql);
    conn.flush().await?;
    let mut value = None;
    let mut error = None;
    loop {
        let (tag, body) = conn.recv().await?;
        match tag {
            backend::DATA_ROW if value.is_none() => {
                let row = backend::decode_data_row(body).map_err(ConnError::from)?;
                value = Some(row.iter().next().flatten().map(|v| String::from_utf8_lossy(v).into_owned()));
            }
            backend::ERROR_RESPONSE => error = Some(backend::decode_error_fields(body).map_err(ConnError::from)?),
            backend::READY_FOR_QUERY => break,
            _ => {}
        }
    }
    match error {
        Some(error) => Err(SetupError::Sql { sql: sql.to_owned(), error }),
        None => Ok(value.flatten()),
    }
}
