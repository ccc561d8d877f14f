//! Recognising the LISTEN and UNLISTEN statements the notification hub
//! answers itself. Pure: text in, answer out.
//!
//! Only a text that is exactly one such statement is recognised: `LISTEN
//! name`, `UNLISTEN name` or `UNLISTEN *`, with whitespace around and one
//! optional `;` at the end, keywords in any case. The name is an identifier
//! as PostgreSQL's scanner reads it: unquoted, it is folded to lower case
//! (ASCII letters; a name with other than ASCII letters, digits, `_` and
//! `$` is not recognised, since its folding depends on the server's
//! encoding); quoted (`"Ch"`), it is taken as written, `""` standing for
//! one `"`. The channel is the name the server itself would use, which is
//! what its NotificationResponse carries.
//!
//! Everything else answers `None` and goes to the server as sent (where
//! LISTEN pins the client, see `client::pinning`): comments, several
//! statements, `U&"..."` names, names the server would truncate (longer
//! than 63 bytes, with a NOTICE), reserved words used as names (a syntax
//! error on the server), an empty quoted name (an error too).

/// A statement the hub answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ListenStatement {
    Listen(String),
    Unlisten(String),
    UnlistenAll,
}

impl ListenStatement {
    /// The command tag PostgreSQL answers it with.
    pub fn command_tag(&self) -> &'static str {
        match self {
            ListenStatement::Listen(_) => "LISTEN",
            ListenStatement::Unlisten(_) | ListenStatement::UnlistenAll => "UNLISTEN",
        }
    }
}

/// The longest identifier PostgreSQL keeps whole (NAMEDATALEN - 1 bytes).
const MAX_IDENTIFIER: usize = 63;

/// Words PostgreSQL's grammar does not take as a channel name (a ColId):
/// its reserved and type/function-name keywords. Over-complete is safe
/// (such a text just goes to the server).
const NOT_A_NAME: &[&str] = &[
    "all",
    "analyse",
    "analyze",
    "and",
    "any",
    "array",
    "as",
    "asc",
    "asymmetric",
    "authorization",
    "binary",
    "both",
    "case",
    "cast",
    "check",
    "collate",
    "collation",
    "column",
    "concurrently",
    "constraint",
    "create",
    "cross",
    "current_catalog",
    "current_date",
    "current_role",
    "current_schema",
    "current_time",
    "current_timestamp",
    "current_user",
    "default",
    "deferrable",
    "desc",
    "distinct",
    "do",
    "else",
    "end",
    "except",
    "false",
    "fetch",
    "for",
    "foreign",
    "freeze",
    "from",
    "full",
    "grant",
    "group",
    "having",
    "ilike",
    "in",
    "initially",
    "inner",
    "intersect",
    "into",
    "is",
    "isnull",
    "join",
    "lateral",
    "leading",
    "left",
    "like",
    "limit",
    "localtime",
    "localtimestamp",
    "natural",
    "not",
    "notnull",
    "null",
    "offset",
    "on",
    "only",
    "or",
    "order",
    "outer",
    "overlaps",
    "placing",
    "primary",
    "references",
    "returning",
    "right",
    "select",
    "session_user",
    "similar",
    "some",
    "symmetric",
    "system_user",
    "table",
    "tablesample",
    "then",
    "to",
    "trailing",
    "true",
    "union",
    "unique",
    "user",
    "using",
    "variadic",
    "verbose",
    "when",
    "where",
    "window",
    "with",
];

/// Whether `sql` may be a statement [`parse`] recognises: it begins
/// (after whitespace) with LISTEN or UNLISTEN. A few byte compares and no
/// allocation, for every simple query a client sends between transactions.
#[inline]
pub fn may_be_listen(sql: &[u8]) -> bool {
    let start = sql.iter().position(|b| !is_space(*b)).unwrap_or(sql.len());
    let rest = &sql[start..];
    let prefix = |word: &[u8]| rest.len() >= word.len() && rest[..word.len()].eq_ignore_ascii_case(word);
    prefix(b"listen") || prefix(b"unlisten")
}

/// The statement `sql` is, if it is exactly one the hub answers (see the
/// module comment).
pub fn parse(sql: &str) -> Option<ListenStatement> {
    let mut rest = sql.trim_matches(|c: char| c.is_ascii() && is_space(c as u8));
    if let Some(before) = rest.strip_suffix(';') {
        rest = before.trim_end_matches(|c: char| c.is_ascii() && is_space(c as u8));
    }
    let (keyword, after) = split_word(rest)?;
    let unlisten = if keyword.eq_ignore_ascii_case("listen") {
        false
    } else if keyword.eq_ignore_ascii_case("unlisten") {
        true
    } else {
        return None;
    };
    let name = after.trim_start_matches(|c: char| c.is_ascii() && is_space(c as u8));
    if name.len() == after.len() && !name.starts_with('"') && !name.starts_with('*') {
        return None; // `LISTENx`: one word, not a keyword and a name
    }
    if unlisten && name == "*" {
        return Some(ListenStatement::UnlistenAll);
    }
    let channel = identifier(name)?;
    Some(if unlisten { ListenStatement::Unlisten(channel) } else { ListenStatement::Listen(channel) })
}

/// The channel `text` names, if it is exactly one identifier.
fn identifier(text: &str) -> Option<String> {
    let channel = if let Some(quoted) = text.strip_prefix('"') {
        let inner = quoted.strip_suffix('"')?;
        // Inside, every `"` comes doubled.
        let mut name = String::with_capacity(inner.len());
        let mut chars = inner.chars();
        while let Some(c) = chars.next() {
            if c == '"' && chars.next() != Some('"') {
                return None;
            }
            name.push(c);
        }
        name
    } else {
        let (word, after) = split_word(text)?;
        if !after.is_empty() || word.as_bytes()[0].is_ascii_digit() || word.starts_with('$') {
            return None;
        }
        let word = word.to_ascii_lowercase();
        if NOT_A_NAME.contains(&word.as_str()) {
            return None;
        }
        word
    };
    (!channel.is_empty() && channel.len() <= MAX_IDENTIFIER && !channel.contains('\0')).then_some(channel)
}

/// The leading run of identifier characters (ASCII letters, digits, `_`,
/// `$`) of `text`, and what follows; `None` if there is none.
fn split_word(text: &str) -> Option<(&str, &str)> {
    let end = text.bytes().position(|b| !(b.is_ascii_alphanumeric() || b == b'_' || b == b'$')).unwrap_or(text.len());
    (end > 0).then(|| text.split_at(end))
}

/// PostgreSQL's scanner's whitespace.
fn is_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r' | b'\x0b' | b'\x0c')
}

#[cfg(test)]
mod tests {
    use super::ListenStatement::*;
    use super::*;

    fn listen(name: &str) -> Option<ListenStatement> {
        Some(Listen(name.into()))
    }

    #[test]
    fn unquoted_names_fold_to_lower_case() {
        assert_eq!(parse("LISTEN jobs"), listen("jobs"));
        assert_eq!(parse("listen Jobs"), listen("jobs"));
        assert_eq!(parse("LiStEn JOBS_2$x"), listen("jobs_2$x"));
        assert_eq!(parse("listen _x"), listen("_x"));
        assert_eq!(parse("UNLISTEN Jobs"), Some(Unlisten("jobs".into())));
    }

    #[test]
    fn quoted_names_are_taken_as_written() {
        assert_eq!(parse(r#"LISTEN "Jobs""#), listen("Jobs"));
        assert_eq!(parse(r#"LISTEN "a b;c""#), listen("a b;c"));
        assert_eq!(parse(r#"LISTEN "say ""hi""""#), listen(r#"say "hi""#));
        assert_eq!(parse(r#"LISTEN "select""#), listen("select"));
        assert_eq!(parse(r#"LISTEN "ünï""#), listen("ünï"));
        assert_eq!(parse(r#"LISTEN"x""#), listen("x"), "no space needed before a quote");
        assert_eq!(parse(r#"unlisten "X""#), Some(Unlisten("X".into())));
    }

    #[test]
    fn whitespace_and_one_semicolon_around_it() {
        assert_eq!(parse("  \n\tLISTEN \r\n jobs ; \n"), listen("jobs"));
        assert_eq!(parse("LISTEN jobs;"), listen("jobs"));
        assert_eq!(parse("UNLISTEN *"), Some(UnlistenAll));
        assert_eq!(parse("unlisten\t* ;"), Some(UnlistenAll));
    }

    #[test]
    fn anything_else_goes_to_the_server() {
        for sql in [
            "",
            "LISTEN",
            "LISTEN ;",
            "LISTENjobs",
            "LISTEN *",
            "UNLISTEN**",
            "LISTEN a b",
            "LISTEN a; LISTEN b",
            "LISTEN a;;",
            "LISTEN a; SELECT 1",
            "LISTEN a -- why",
            "/* x */ LISTEN a",
            "LISTEN a.b",
            "LISTEN 1a",
            "LISTEN $1",
            "LISTEN \"\"",
            "LISTEN \"a",
            "LISTEN \"a\"\"",
            "LISTEN \"a\"b",
            "LISTEN U&\"a\"",
            "LISTEN select",
            "LISTEN USER",
            "LISTEN ünï",
            "NOTIFY a",
            "SELECT 1",
            "UPDATE t SET a = 1",
            "UNLISTEN",
        ] {
            assert_eq!(parse(sql), None, "{sql:?}");
        }
    }

    #[test]
    fn names_the_server_would_truncate_go_to_it() {
        assert_eq!(parse(&format!("LISTEN {}", "a".repeat(63))), listen(&"a".repeat(63)));
        assert_eq!(parse(&format!("LISTEN {}", "a".repeat(64))), None);
        assert_eq!(parse(&format!("LISTEN \"{}\"", "é".repeat(32))), None, "64 bytes");
    }

    #[test]
    fn keywords_that_may_name_a_channel() {
        // Unreserved and column-name keywords are names to the grammar.
        assert_eq!(parse("LISTEN listen"), listen("listen"));
        assert_eq!(parse("LISTEN int"), listen("int"));
        assert_eq!(parse("LISTEN notify"), listen("notify"));
    }

    #[test]
    fn the_quick_check_lets_through_what_parse_needs_and_little_else() {
        for sql in ["LISTEN a", " listen a", "\nUnListen *", "UNLISTEN"] {
            assert!(may_be_listen(sql.as_bytes()), "{sql:?}");
        }
        for sql in ["", "SELECT 1", "UPDATE t", "LISTE", "UNLIST", "/* */ LISTEN a"] {
            assert!(!may_be_listen(sql.as_bytes()), "{sql:?}");
        }
    }
}
