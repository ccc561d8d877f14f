//! The admin console: the virtual databases `pgbouncer` and `pglane`, spoken
//! to with the simple query protocol, as PgBouncer's console is.
//!
//! This module owns one admin session: parsing its commands, gathering every
//! shard's answer over the shard mesh, and writing result sets. It never reads
//! another shard's state directly and never touches the query path.
//! `admin_users` may run every command; `stats_users` only SHOW.

mod command;
pub mod metrics;
mod metrics_pgbouncer;
mod show;
mod show_config;
mod show_process;

use std::rc::Rc;
use std::time::Duration;

use bytes::BytesMut;
use futures_lite::AsyncWriteExt;
use tracing::info;

pub use command::{parse, split_commands, AdminCommand, Show};
pub use show::Table;

use crate::net::{read_message, Stream};
use crate::protocol::backend::{self, ErrorFields, FieldDescription, TransactionStatus};
use crate::protocol::frontend;
use crate::runtime::snapshot::ShardSnapshot;
use crate::runtime::{Answer, Control, Question, Shard};

/// The database names that reach the console.
pub fn is_admin_database(name: &str) -> bool {
    name == "pgbouncer" || name == "pglane"
}

/// How long to wait for the other shards' snapshots.
const SNAPSHOT_WAIT: Duration = Duration::from_secs(2);
/// How long a PAUSE may wait for transactions in flight.
const CONTROL_WAIT: Duration = Duration::from_secs(300);

/// Every shard's snapshot, this one's included.
pub async fn snapshots(shard: &Shard) -> Vec<ShardSnapshot> {
    shard
        .ask_all(Question::Snapshot, SNAPSHOT_WAIT)
        .await
        .into_iter()
        .filter_map(|a| match a {
            Answer::Snapshot(s) => Some(*s),
            Answer::Done => None,
        })
        .collect()
}

/// Every pool's counters added up, over the shards of `snapshots`.
pub fn total_stats(snapshots: &[ShardSnapshot]) -> crate::pool::PoolStats {
    let mut all = crate::pool::PoolStats::default();
    snapshots.iter().flat_map(|s| &s.pools).for_each(|p| all.add(&p.stats));
    all
}

/// PgBouncer's log_stats line for the `period` from `before` to `now` (the
/// counts PgBouncer has and pglane does not, parses, binds and logins, are
/// left out): rates per second, and times per transaction or query.
pub fn stats_line(now: &crate::pool::PoolStats, before: &crate::pool::PoolStats, period: Duration) -> String {
    // A pool dropped meanwhile takes its counts along: never below zero.
    let change = |now: u64, before: u64| now.saturating_sub(before);
    let secs = period.as_secs().max(1);
    let xacts = change(now.xact_count, before.xact_count);
    let queries = change(now.query_count, before.query_count);
    let per = |time: u64, count: u64| time.checked_div(count).unwrap_or(0);
    format!(
        "stats: {} xacts/s, {} queries/s, in {} B/s, out {} B/s, xact {} us, query {} us, wait {} us",
        xacts / secs,
        queries / secs,
        change(now.bytes_received, before.bytes_received) / secs,
        change(now.bytes_from_server, before.bytes_from_server) / secs,
        per(change(now.xact_time_us, before.xact_time_us), xacts),
        per(change(now.query_time_us, before.query_time_us), queries),
        per(change(now.wait_time_us, before.wait_time_us), xacts),
    )
}

/// Serves a logged-in admin session until it ends. `may_control`: the user
/// is in admin_users (not only stats_users).
/// `pending`: what the client sent after its login messages.
pub async fn serve(
    shard: &Rc<Shard>,
    stream: &mut Stream,
    pending: BytesMut,
    process_id: i32,
    secret_key: i32,
    may_control: bool,
) {
    let mut out = BytesMut::new();
    for (name, value) in [
        ("server_version", "15.0 (pglane admin console)"),
        ("server_encoding", "UTF8"),
        ("client_encoding", "UTF8"),
        ("DateStyle", "ISO, MDY"),
        ("integer_datetimes", "on"),
        ("standard_conforming_strings", "on"),
    ] {
        backend::parameter_status(&mut out, name, value);
    }
    backend::backend_key_data(&mut out, process_id, secret_key);
    backend::ready_for_query(&mut out, TransactionStatus::Idle);
    if stream.write_all(&out).await.is_err() {
        return;
    }
    let max = shard.shared.config.load().max_message_size;
    let mut buf = pending;
    loop {
        let Ok(message) = read_message(stream, &mut buf, max).await else { return };
        out.clear();
        match message.tag {
            frontend::TERMINATE => return,
            frontend::QUERY => match frontend::decode_query(&message.body) {
                Ok(sql) => run(shard, sql, may_control, &mut out).await,
                Err(e) => backend::error_response(&mut out, &ErrorFields::error("08P01", e.to_string())),
            },
            _ => {
                backend::error_response(
                    &mut out,
                    &ErrorFields::fatal("08P01", "the admin console speaks only the simple query protocol"),
                );
                let _ = stream.write_all(&out).await;
                return;
            }
        }
        backend::ready_for_query(&mut out, TransactionStatus::Idle);
        if stream.write_all(&out).await.is_err() {
            return;
        }
    }
}

/// What a command answers besides its rows and errors.
enum Outcome {
    /// A result set, tagged SHOW.
    Table(Table),
    /// Done; tagged with the command's first word.
    Done,
    /// NOTICEs, then the tag.
    Notices(Vec<ErrorFields>, String),
}

/// Runs each `;`-separated command of a Query, writing its results.
async fn run(shard: &Shard, sql: &str, may_control: bool, out: &mut BytesMut) {
    let commands = split_commands(sql);
    if commands.is_empty() {
        backend::empty_query_response(out);
        return;
    }
    for text in commands {
        let command = match parse(text) {
            Ok(c) => c,
            Err(message) => {
                backend::error_response(out, &ErrorFields::error("08P01", message));
                return;
            }
        };
        if !may_control && !command.is_read_only() {
            backend::error_response(out, &ErrorFields::error("42501", "admin access needed (admin_users)"));
            return;
        }
        match execute(shard, command).await {
            Ok(Outcome::Table(table)) => {
                write_table(out, &table);
                backend::command_complete(out, "SHOW");
            }
            Ok(Outcome::Done) => {
                backend::command_complete(out, &text.split_whitespace().next().unwrap_or("").to_ascii_uppercase())
            }
            Ok(Outcome::Notices(notices, tag)) => {
                notices.iter().for_each(|n| backend::notice_response(out, n));
                backend::command_complete(out, &tag);
            }
            Err(message) => {
                backend::error_response(out, &ErrorFields::error("08P01", message));
                return;
            }
        }
    }
}

/// Why SUSPEND and SHOW FDS are refused.
const NO_ONLINE_RESTART: &str =
    "SUSPEND and SHOW FDS belong to PgBouncer's online restart (-R); pglane restarts without dropping clients by starting the new process beside the old one (SO_REUSEPORT), see docs/deploy.md";

async fn execute(shard: &Shard, command: AdminCommand) -> Result<Outcome, String> {
    let config = shard.shared.config.load_full();
    let control = |c: Control| async move {
        shard.ask_all(Question::Control(c), CONTROL_WAIT).await;
        Ok(Outcome::Done)
    };
    match command {
        AdminCommand::Show(what) => show(shard, what, &config).await,
        AdminCommand::Suspend => Err(NO_ONLINE_RESTART.into()),
        AdminCommand::Pause(db) => {
            check_database(&config, db.as_deref())?;
            info!("admin: PAUSE {}", db.as_deref().unwrap_or("(all)"));
            control(Control::Pause(db)).await
        }
        AdminCommand::Resume(db) => {
            check_database(&config, db.as_deref())?;
            info!("admin: RESUME {}", db.as_deref().unwrap_or("(all)"));
            control(Control::Resume(db)).await
        }
        AdminCommand::Kill(db) => {
            check_database(&config, Some(&db))?;
            info!("admin: KILL {db}");
            control(Control::Kill(db)).await
        }
        AdminCommand::Reconnect(db) => {
            check_database(&config, db.as_deref())?;
            control(Control::Reconnect(db)).await
        }
        AdminCommand::Disable(db) => {
            check_database(&config, Some(&db))?;
            info!("admin: DISABLE {db}");
            control(Control::Disable(db)).await
        }
        AdminCommand::Enable(db) => {
            check_database(&config, Some(&db))?;
            info!("admin: ENABLE {db}");
            control(Control::Enable(db)).await
        }
        AdminCommand::WaitClose(db) => {
            check_database(&config, db.as_deref())?;
            control(Control::WaitClose(db)).await
        }
        AdminCommand::Reload => {
            let warnings = shard.shared.reload()?;
            warnings.iter().for_each(|w| tracing::warn!("{w}"));
            info!("admin: RELOAD");
            control(Control::Reload).await
        }
        AdminCommand::Set { key, value } => {
            let warnings = shard.shared.set(&key, &value)?;
            info!("admin: SET {key} = {value}");
            shard.ask_all(Question::Control(Control::Reload), CONTROL_WAIT).await;
            let notices = warnings.into_iter().map(ErrorFields::notice).collect();
            Ok(Outcome::Notices(notices, format!("SET {key}={value}")))
        }
        AdminCommand::Shutdown => {
            info!("admin: SHUTDOWN");
            shard.shared.begin_shutdown();
            Ok(Outcome::Done)
        }
    }
}

/// One SHOW's answer.
async fn show(shard: &Shard, what: Show, config: &crate::config::Config) -> Result<Outcome, String> {
    let uptime = shard.shared.started.elapsed();
    let snaps = match what {
        Show::Help
        | Show::Fds
        | Show::Config
        | Show::Version
        | Show::Peers
        | Show::PeerPools
        | Show::DnsHosts
        | Show::DnsZones => Vec::new(),
        _ => snapshots(shard).await,
    };
    Ok(Outcome::Table(match what {
        Show::Help => return Ok(Outcome::Notices(vec![help_notice()], "SHOW".into())),
        Show::Fds => return Err(NO_ONLINE_RESTART.into()),
        Show::Pools => show::pools_table(&snaps, config),
        Show::Stats => show::stats_table(&snaps, uptime),
        Show::StatsAverages => show::stats_averages_table(&snaps, uptime),
        Show::Totals => show::totals_table(&snaps, uptime),
        Show::Sockets => show::sockets_table(&snaps, config.listen.first(), false),
        Show::ActiveSockets => show::sockets_table(&snaps, config.listen.first(), true),
        Show::Mem => show_process::mem_table(&snaps, config),
        Show::State => show_process::state_table(&snaps),
        Show::Peers => show_process::peers_table(config),
        Show::PeerPools => show_process::peer_pools_table(config),
        Show::DnsHosts => show_process::dns_hosts_table(),
        Show::DnsZones => show_process::dns_zones_table(),
        Show::StatsTotals => show::stats_totals_table(&snaps),
        Show::Clients => show::clients_table(&snaps, config.listen.first()),
        Show::Servers => show::servers_table(&snaps),
        Show::Databases => show::databases_table(&snaps, config),
        Show::Users => show::users_table(&snaps, config),
        Show::Config => show_config::config_table(config),
        Show::Version => show::version_table(),
        Show::Lists => show::lists_table(&snaps, config),
        Show::Shards => show::shards_table(&snaps),
        Show::Prepared => show::prepared_table(&snaps),
        Show::PassThroughs => show::pass_throughs_table(&snaps),
        Show::Notify => show::notify_table(&snaps),
        Show::Routing => show::routing_table(&snaps),
    }))
}

fn check_database(config: &crate::config::Config, db: Option<&str>) -> Result<(), String> {
    match db {
        Some(name) if config.database(name).is_none() => Err(format!("no such database: {name}")),
        _ => Ok(()),
    }
}

/// SHOW HELP's answer: as PgBouncer's, a NOTICE "Console usage" whose
/// DETAIL lists the commands, one per line; pglane's own last.
fn help_notice() -> ErrorFields {
    let lines = [
        "SHOW HELP|CONFIG|DATABASES|POOLS|CLIENTS|SERVERS|USERS|VERSION",
        "SHOW PEERS|PEER_POOLS",
        "SHOW FDS|SOCKETS|ACTIVE_SOCKETS|LISTS|MEM|STATE",
        "SHOW DNS_HOSTS|DNS_ZONES",
        "SHOW STATS|STATS_TOTALS|STATS_AVERAGES|TOTALS",
        "SET key = arg",
        "RELOAD",
        "PAUSE [<db>]",
        "RESUME [<db>]",
        "DISABLE <db>",
        "ENABLE <db>",
        "RECONNECT [<db>]",
        "KILL <db>",
        "SUSPEND",
        "SHUTDOWN",
        "WAIT_CLOSE [<db>]",
        "SHOW SHARDS|PREPARED|PASS_THROUGHS|NOTIFY|ROUTING (pglane)",
    ];
    let detail = lines.iter().map(|l| format!("\t{l}")).collect::<Vec<_>>().join("\n");
    ErrorFields::notice("Console usage").with_detail(detail)
}

/// RowDescription and DataRows for `table`, all columns in text format.
pub fn write_table(out: &mut BytesMut, table: &Table) {
    let fields: Vec<FieldDescription> = table
        .columns
        .iter()
        .map(|&(name, type_oid)| FieldDescription {
            name: name.to_owned(),
            table_oid: 0,
            column: 0,
            type_oid,
            type_size: match type_oid {
                show::INT4 => 4,
                show::INT8 => 8,
                _ => -1,
            },
            type_modifier: -1,
            format: backend::FORMAT_TEXT,
        })
        .collect();
    backend::row_description(out, &fields);
    for row in &table.rows {
        let values: Vec<Option<&[u8]>> = row.iter().map(|v| v.as_deref().map(str::as_bytes)).collect();
        backend::data_row(out, &values);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stats_line_is_pgbouncers_rates_and_times_for_the_period() {
        use crate::pool::PoolStats;
        let before = PoolStats { xact_count: 100, query_count: 200, wait_time_us: 50, ..PoolStats::default() };
        let now = PoolStats {
            xact_count: 700,
            query_count: 1400,
            bytes_received: 60_000,
            bytes_from_server: 120_000,
            xact_time_us: 6_000,
            query_time_us: 3_600,
            wait_time_us: 650,
            ..PoolStats::default()
        };
        assert_eq!(
            stats_line(&now, &before, Duration::from_secs(60)),
            "stats: 10 xacts/s, 20 queries/s, in 1000 B/s, out 2000 B/s, xact 10 us, query 3 us, wait 1 us"
        );
        // A pool gone meanwhile took its counts: nothing negative.
        assert_eq!(
            stats_line(&before, &now, Duration::from_secs(60)),
            "stats: 0 xacts/s, 0 queries/s, in 0 B/s, out 0 B/s, xact 0 us, query 0 us, wait 0 us"
        );
    }
}
