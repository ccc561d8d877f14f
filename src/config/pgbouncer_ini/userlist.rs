//! PgBouncer's `auth_file` (userlist.txt): one `"user" "secret"` line per user.
//!
//! This module owns reading that format and checking every secret with
//! [`Secret::parse`], so a mangled md5 or SCRAM secret is an error naming its
//! line rather than a password nobody can type. It never prints a secret and
//! does not decide which users may log in how.
//!
//! As in PgBouncer: `""` inside quotes is one `"`; lines starting with `;` are
//! comments (pglane also takes `#`); whatever follows the second field is
//! ignored; a user listed twice keeps the later secret; `""` as the secret
//! means the user has no password. Stricter: only blanks may separate the two
//! fields, and anything else that is not a comment is an error naming the
//! line (PgBouncer stops reading there, keeping the users before it).

use std::path::Path;

use super::{IniError, Location};
use crate::auth::secret::Secret;

/// One user of the auth_file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub user: String,
    /// A plaintext password or an md5 / SCRAM-SHA-256 secret that
    /// [`Secret::parse`] accepts; `None` for an empty one.
    pub secret: Option<String>,
    pub at: Location,
}

/// Reads the auth_file `text`, found at `path`.
pub fn parse(path: &Path, text: &str) -> Result<Vec<Entry>, IniError> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut entries = Vec::new();
    for (index, line) in text.lines().enumerate() {
        let at = Location::new(path, index + 1);
        let line = line.trim_matches(|c: char| c.is_ascii_whitespace());
        if line.is_empty() || line.starts_with([';', '#']) {
            continue;
        }
        let syntax = |message: &str| IniError::Syntax { at: at.clone(), message: message.to_owned() };
        let rest = line.strip_prefix('"').ok_or_else(|| syntax(EXPECTED))?;
        let (user, rest) = unquote(rest).ok_or_else(|| syntax("the user name has no closing \""))?;
        let rest = rest.trim_start_matches([' ', '\t']);
        let rest = rest.strip_prefix('"').ok_or_else(|| syntax(EXPECTED))?;
        let (secret, _ignored) = unquote(rest).ok_or_else(|| syntax("the password has no closing \""))?;
        if user.is_empty() {
            return Err(syntax("empty user name"));
        }
        if let Err(e) = Secret::parse(&secret) {
            return Err(IniError::Invalid { at, setting: format!("the password of user {user}"), message: e.to_string() });
        }
        entries.push(Entry { user, secret: Some(secret).filter(|s| !s.is_empty()), at });
    }
    Ok(entries)
}

const EXPECTED: &str = "expected \"user\" \"password\"";

/// A double-quoted field (after its opening quote), `""` standing for `"`.
/// Returns the field and the rest of the line, or `None` if it never closes.
fn unquote(text: &str) -> Option<(String, &str)> {
    let mut field = String::new();
    let mut chars = text.char_indices();
    while let Some((i, c)) = chars.next() {
        if c != '"' {
            field.push(c);
        } else if text[i + 1..].starts_with('"') {
            field.push('"');
            chars.next();
        } else {
            return Some((field, &text[i + 1..]));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::test_vectors::POSTGRES_15_SECRET;

    const MD5: &str = "md553f48b7c4b76a86ce72276c5755f217d";

    fn users(text: &str) -> Vec<(String, Option<String>, usize)> {
        parse(Path::new("/etc/pgb/userlist.txt"), text)
            .unwrap_or_else(|e| panic!("{e}"))
            .into_iter()
            .map(|e| (e.user, e.secret, e.at.line))
            .collect()
    }

    fn error(text: &str) -> String {
        parse(Path::new("/etc/pgb/userlist.txt"), text).unwrap_err().to_string()
    }

    #[test]
    fn plaintext_md5_and_scram_secrets() {
        let text = format!("\"alice\" \"wonderland\"\n\"bob\" \"{MD5}\"\n\"carol\" \"{POSTGRES_15_SECRET}\"\n");
        assert_eq!(
            users(&text),
            vec![
                ("alice".into(), Some("wonderland".into()), 1),
                ("bob".into(), Some(MD5.into()), 2),
                ("carol".into(), Some(POSTGRES_15_SECRET.into()), 3),
            ]
        );
    }

    #[test]
    fn quotes_comments_blank_lines_and_trailing_fields() {
        let text = "\u{feff}; a comment\n\n# another\n  \"we\"\"ird\"\t\"pa\"\"ss\"  \"ignored\" more\r\n\"sp ace\" \"with space\"x\n\"\" \"\"x\n";
        let got = parse(Path::new("u.txt"), text);
        // The last line has an empty user name.
        assert_eq!(got.unwrap_err().to_string(), "u.txt:6: empty user name");
        assert_eq!(
            users(&text[..text.rfind("\"\" ").unwrap()]),
            vec![("we\"ird".into(), Some("pa\"ss".into()), 4), ("sp ace".into(), Some("with space".into()), 5)]
        );
    }

    #[test]
    fn an_empty_secret_means_no_password() {
        assert_eq!(users("\"nopass\" \"\"\n"), vec![("nopass".into(), None, 1)]);
    }

    #[test]
    fn malformed_lines_are_errors_naming_the_line() {
        assert_eq!(error("\"a\" \"b\"\nalice secret\n"), "/etc/pgb/userlist.txt:2: expected \"user\" \"password\"");
        assert_eq!(error("\"alice\"\n"), "/etc/pgb/userlist.txt:1: expected \"user\" \"password\"");
        assert_eq!(error("\"alice secret\n"), "/etc/pgb/userlist.txt:1: the user name has no closing \"");
        assert_eq!(error("\"alice\" \"secret\n"), "/etc/pgb/userlist.txt:1: the password has no closing \"");
        assert_eq!(error("\"alice\" x \"secret\"\n"), "/etc/pgb/userlist.txt:1: expected \"user\" \"password\"");
        assert_eq!(error("\"alice\" 'secret'\n"), "/etc/pgb/userlist.txt:1: expected \"user\" \"password\"");
    }

    #[test]
    fn mangled_secrets_are_errors_that_do_not_leak_them() {
        let message = error("\n\"bob\" \"md553f48b7c4b76a86ce72276c5755f217\"\n");
        assert!(message.starts_with("/etc/pgb/userlist.txt:2: the password of user bob:"), "{message}");
        assert!(!message.contains("53f48"), "{message}");
        let truncated = &POSTGRES_15_SECRET[..POSTGRES_15_SECRET.len() - 4];
        let message = error(&format!("\"carol\" \"{truncated}\"\n"));
        assert!(message.contains("user carol") && message.contains("SCRAM"), "{message}");
    }

    #[test]
    fn garbage_never_panics() {
        for text in crate::config::pgbouncer_ini::garbage("\"\" ;#\nab\u{e9}md5SCRAM-SHA-256$:", 5_000) {
            let _ = parse(Path::new("u"), &text);
        }
    }
}
