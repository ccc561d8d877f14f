//! Parsing the admin console's commands (PgBouncer's syntax).

/// What an admin command asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AdminCommand {
    Show(Show),
    Pause(Option<String>),
    Resume(Option<String>),
    Kill(String),
    Reconnect(Option<String>),
    /// New clients of the database are refused until ENABLE.
    Disable(String),
    Enable(String),
    /// Waits until no server connection opened before the last RECONNECT
    /// (or RELOAD that changed the server) is left.
    WaitClose(Option<String>),
    Reload,
    Shutdown,
    /// `SET key = value`: a setting, by its PgBouncer name when pglane was
    /// started from a pgbouncer.ini (else by pglane's own), until RELOAD.
    Set {
        key: String,
        value: String,
    },
    /// PgBouncer's step before an online restart with `-R`; refused, with
    /// what pglane does instead.
    Suspend,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Show {
    Help,
    Pools,
    Stats,
    StatsTotals,
    Clients,
    Servers,
    Databases,
    Users,
    Config,
    Version,
    Lists,
    StatsAverages,
    Totals,
    Sockets,
    ActiveSockets,
    Mem,
    State,
    Peers,
    PeerPools,
    DnsHosts,
    DnsZones,
    /// PgBouncer's socket list for an online restart: refused, as Suspend.
    Fds,
    /// pglane's own: per-shard load.
    Shards,
    /// pglane's own: statement registry counters per shard.
    Prepared,
    /// pglane's own: auto-prepare's pass-throughs per shard and reason.
    PassThroughs,
    /// pglane's own: the notification hub per shard.
    Notify,
    /// pglane's own: read routing, per shard, database, user and host.
    Routing,
}

impl AdminCommand {
    /// Whether a stats user (not an admin) may run it.
    pub fn is_read_only(&self) -> bool {
        matches!(self, AdminCommand::Show(_))
    }
}

/// The `;`-separated commands of one Query, without empty ones; a `;`
/// inside quotes (a SET's value) does not separate.
pub fn split_commands(sql: &str) -> Vec<&str> {
    let mut commands = Vec::new();
    let (mut start, mut quote) = (0, None);
    for (i, c) in sql.char_indices() {
        match (quote, c) {
            (None, '\'' | '"') => quote = Some(c),
            (Some(q), c) if c == q => quote = None,
            (None, ';') => {
                commands.push(&sql[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    commands.push(&sql[start..]);
    commands.retain(|c| !c.trim().is_empty());
    commands
}

/// Parses one command; the error is the message for the client.
pub fn parse(sql: &str) -> Result<AdminCommand, String> {
    let trimmed = sql.trim().trim_end_matches(';').trim();
    if let Some(set) = parse_set(trimmed) {
        return set;
    }
    let words: Vec<&str> = trimmed.split_whitespace().collect();
    let invalid = || format!("invalid command '{}', use SHOW HELP;", trimmed);
    let upper: Vec<String> = words.iter().map(|w| w.to_ascii_uppercase()).collect();
    let upper: Vec<&str> = upper.iter().map(String::as_str).collect();
    let database = |i: usize| words.get(i).map(|w| unquote(w));
    Ok(match upper.as_slice() {
        ["SHOW", what] => AdminCommand::Show(match *what {
            "HELP" => Show::Help,
            "POOLS" => Show::Pools,
            "STATS" => Show::Stats,
            "STATS_TOTALS" => Show::StatsTotals,
            "CLIENTS" => Show::Clients,
            "SERVERS" => Show::Servers,
            "DATABASES" => Show::Databases,
            "USERS" => Show::Users,
            "CONFIG" => Show::Config,
            "VERSION" => Show::Version,
            "LISTS" => Show::Lists,
            "STATS_AVERAGES" => Show::StatsAverages,
            "TOTALS" => Show::Totals,
            "SOCKETS" => Show::Sockets,
            "ACTIVE_SOCKETS" => Show::ActiveSockets,
            "MEM" => Show::Mem,
            "STATE" => Show::State,
            "PEERS" => Show::Peers,
            "PEER_POOLS" => Show::PeerPools,
            "DNS_HOSTS" => Show::DnsHosts,
            "DNS_ZONES" => Show::DnsZones,
            "FDS" => Show::Fds,
            "SHARDS" => Show::Shards,
            "PREPARED" => Show::Prepared,
            "PASS_THROUGHS" => Show::PassThroughs,
            "NOTIFY" => Show::Notify,
            "ROUTING" => Show::Routing,
            _ => return Err(invalid()),
        }),
        ["PAUSE"] => AdminCommand::Pause(None),
        ["PAUSE", _] => AdminCommand::Pause(database(1)),
        ["RESUME"] => AdminCommand::Resume(None),
        ["RESUME", _] => AdminCommand::Resume(database(1)),
        ["KILL", _] => AdminCommand::Kill(unquote(words[1])),
        ["RECONNECT"] => AdminCommand::Reconnect(None),
        ["RECONNECT", _] => AdminCommand::Reconnect(database(1)),
        ["DISABLE", _] => AdminCommand::Disable(unquote(words[1])),
        ["ENABLE", _] => AdminCommand::Enable(unquote(words[1])),
        ["WAIT_CLOSE"] => AdminCommand::WaitClose(None),
        ["WAIT_CLOSE", _] => AdminCommand::WaitClose(database(1)),
        ["RELOAD"] => AdminCommand::Reload,
        ["SHUTDOWN"] => AdminCommand::Shutdown,
        ["SUSPEND"] => AdminCommand::Suspend,
        _ => return Err(invalid()),
    })
}

/// `SET key = value` or `SET key TO value`, the value a word, a number or
/// a quoted string (`'…'`, `''` for a quote), as PgBouncer reads it; None
/// if the text is not a SET at all.
fn parse_set(text: &str) -> Option<Result<AdminCommand, String>> {
    let rest = text.get(..4).filter(|w| w.eq_ignore_ascii_case("set ")).map(|_| text[4..].trim_start())?;
    let bad = || Err(format!("invalid command '{text}', use SHOW HELP;"));
    let key_end = rest.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(rest.len());
    let (key, rest) = (&rest[..key_end], rest[key_end..].trim_start());
    let rest = match rest.strip_prefix('=') {
        Some(r) => r,
        None if rest.get(..2).is_some_and(|w| w.eq_ignore_ascii_case("to")) && rest[2..].starts_with(char::is_whitespace) => {
            &rest[2..]
        }
        None => return Some(bad()),
    };
    let rest = rest.trim();
    let value = if let Some(quoted) = rest.strip_prefix('\'') {
        match quoted.strip_suffix('\'') {
            Some(inner) if !inner.replace("''", "").contains('\'') => inner.replace("''", "'"),
            _ => return Some(bad()),
        }
    } else if rest.starts_with('"') {
        unquote(rest)
    } else if !rest.is_empty() && rest.chars().all(|c| c.is_ascii_alphanumeric() || "_.-".contains(c)) {
        rest.to_owned()
    } else {
        return Some(bad());
    };
    if key.is_empty() || value.contains(['\n', '\r']) {
        return Some(bad());
    }
    Some(Ok(AdminCommand::Set { key: key.to_ascii_lowercase(), value }))
}

fn unquote(word: &str) -> String {
    word.strip_prefix('"').and_then(|w| w.strip_suffix('"')).unwrap_or(word).replace("\"\"", "\"")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_in_any_case_with_or_without_semicolon() {
        assert_eq!(parse("show pools;"), Ok(AdminCommand::Show(Show::Pools)));
        assert_eq!(parse("  SHOW   stats_totals "), Ok(AdminCommand::Show(Show::StatsTotals)));
        assert_eq!(parse("show pass_throughs"), Ok(AdminCommand::Show(Show::PassThroughs)));
        assert_eq!(parse("pause app"), Ok(AdminCommand::Pause(Some("app".into()))));
        assert_eq!(parse("PAUSE"), Ok(AdminCommand::Pause(None)));
        assert_eq!(parse("resume \"My DB\""), Err("invalid command 'resume \"My DB\"', use SHOW HELP;".into()));
        assert_eq!(parse("resume \"app\""), Ok(AdminCommand::Resume(Some("app".into()))));
        assert_eq!(parse("kill app"), Ok(AdminCommand::Kill("app".into())));
        assert_eq!(parse("RECONNECT"), Ok(AdminCommand::Reconnect(None)));
        assert_eq!(parse("reload;"), Ok(AdminCommand::Reload));
        assert_eq!(parse("disable app"), Ok(AdminCommand::Disable("app".into())));
        assert_eq!(parse("ENABLE \"app\""), Ok(AdminCommand::Enable("app".into())));
        assert_eq!(parse("wait_close"), Ok(AdminCommand::WaitClose(None)));
        assert_eq!(parse("WAIT_CLOSE app;"), Ok(AdminCommand::WaitClose(Some("app".into()))));
        assert_eq!(parse("shutdown"), Ok(AdminCommand::Shutdown));
        assert_eq!(parse("suspend;"), Ok(AdminCommand::Suspend));
        assert_eq!(parse("show stats_averages"), Ok(AdminCommand::Show(Show::StatsAverages)));
        assert_eq!(parse("SHOW active_sockets"), Ok(AdminCommand::Show(Show::ActiveSockets)));
        assert_eq!(parse("show state"), Ok(AdminCommand::Show(Show::State)));
    }

    #[test]
    fn set_takes_a_word_a_number_or_a_quoted_string_after_eq_or_to() {
        let set = |k: &str, v: &str| Ok(AdminCommand::Set { key: k.into(), value: v.into() });
        assert_eq!(parse("SET default_pool_size = 7"), set("default_pool_size", "7"));
        assert_eq!(parse("set default_pool_size=7;"), set("default_pool_size", "7"));
        assert_eq!(parse("set query_timeout to 2.5"), set("query_timeout", "2.5"));
        assert_eq!(parse("set Server_Reset_Query = 'DISCARD ALL'"), set("server_reset_query", "DISCARD ALL"));
        assert_eq!(parse("set server_reset_query = 'it''s'"), set("server_reset_query", "it's"));
        // Whatever bytes follow, an error, never a slice through a character.
        for text in ["set x 日本", "set x é", "set 日本 = 1", "set x t", "set x to", "set"] {
            assert!(matches!(parse(text), Err(e) if e.contains("invalid command")), "{text}");
        }
        assert_eq!(parse("set stats_users = \"a,b\""), set("stats_users", "a,b"));
        assert_eq!(parse("set pool_mode = transaction"), set("pool_mode", "transaction"));
        for bad in ["set", "set x", "set x =", "set = 1", "set x = 'open", "set x = a b", "set x = 'a'b'", "set x == 1"] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_semicolon_in_quotes_does_not_end_a_command() {
        assert_eq!(split_commands("show pools; show stats;"), ["show pools", " show stats"]);
        assert_eq!(
            split_commands("set server_reset_query = 'DISCARD ALL; SELECT 1'; show config"),
            ["set server_reset_query = 'DISCARD ALL; SELECT 1'", " show config"]
        );
        assert!(split_commands(" ; ;").is_empty());
    }

    #[test]
    fn anything_else_is_refused_like_pgbouncer_does() {
        assert_eq!(parse("select 1"), Err("invalid command 'select 1', use SHOW HELP;".into()));
        assert!(parse("SHOW FOO").is_err());
        assert!(parse("KILL").is_err());
        assert!(parse("DISABLE").is_err());
        assert!(parse("").is_err());
        assert!(parse("SHOW POOLS EXTRA").is_err());
    }

    #[test]
    fn only_show_is_read_only() {
        assert!(parse("SHOW POOLS").unwrap().is_read_only());
        assert!(!parse("PAUSE").unwrap().is_read_only());
        assert!(!parse("SET a = 1").unwrap().is_read_only());
    }
}
