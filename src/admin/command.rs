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
    /// pglane's own: per-shard load.
    Shards,
    /// pglane's own: statement registry counters per shard.
    Prepared,
    /// pglane's own: auto-prepare's pass-throughs per shard and reason.
    PassThroughs,
}

impl AdminCommand {
    /// Whether a stats user (not an admin) may run it.
    pub fn is_read_only(&self) -> bool {
        matches!(self, AdminCommand::Show(_))
    }
}

/// Parses one command; the error is the message for the client.
pub fn parse(sql: &str) -> Result<AdminCommand, String> {
    let trimmed = sql.trim().trim_end_matches(';').trim();
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
            "SHARDS" => Show::Shards,
            "PREPARED" => Show::Prepared,
            "PASS_THROUGHS" => Show::PassThroughs,
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
        _ => return Err(invalid()),
    })
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
    }
}
