//! The `key=value key='quoted value'` strings of PgBouncer's `[databases]`
//! and `[users]` sections.
//!
//! This module owns splitting one such string into pairs the way PgBouncer's
//! loader does. It knows nothing about what the keys mean, and its errors
//! never quote a value (values may be passwords).
//!
//! PgBouncer reads these strings itself, not through libpq, and its quoting
//! is not libpq's: inside single quotes `''` stands for one quote and a
//! backslash is an ordinary character, so `password='a\b'` is the three
//! characters `a\b` (libpq would read `ab`). pglane follows PgBouncer, so that
//! a file that works with PgBouncer means the same thing here.
//!
//! Pairs are separated by blanks (spaces, and tabs, which PgBouncer does not
//! treat as separators); blanks around `=` are allowed; an empty value is an
//! error, as in PgBouncer. A repeated key is returned twice: the later wins.

use thiserror::Error;

/// Why a connection string could not be split. Names keys, never values.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ConnStrError {
    #[error("expected key=value at the start")]
    NoEqualsAtStart,
    #[error("expected key=value after the value of {after}")]
    NoEqualsAfter { after: String },
    #[error("= without a parameter name")]
    EmptyKey,
    #[error("{key} has an empty value")]
    EmptyValue { key: String },
    #[error("the quoted value of {key} has no closing quote")]
    UnterminatedQuote { key: String },
    #[error("the quoted value of {key} must be followed by a space")]
    TextAfterQuote { key: String },
}

/// Splits `text` into `(key, value)` pairs, unquoting values.
pub fn parse(text: &str) -> Result<Vec<(String, String)>, ConnStrError> {
    let mut pairs: Vec<(String, String)> = Vec::new();
    let mut rest = text.trim_start_matches(is_blank);
    while !rest.is_empty() {
        let key_end = rest.find(|c: char| c == '=' || is_blank(c)).unwrap_or(rest.len());
        let key = &rest[..key_end];
        let Some(after_equals) = rest[key_end..].trim_start_matches(is_blank).strip_prefix('=') else {
            return Err(match pairs.last() {
                Some((after, _)) => ConnStrError::NoEqualsAfter { after: after.clone() },
                None => ConnStrError::NoEqualsAtStart,
            });
        };
        if key.is_empty() {
            return Err(ConnStrError::EmptyKey);
        }
        let after_equals = after_equals.trim_start_matches(is_blank);
        let (value, remaining) = match after_equals.strip_prefix('\'') {
            Some(quoted) => unquote(quoted, key)?,
            None => {
                let end = after_equals.find(is_blank).unwrap_or(after_equals.len());
                (after_equals[..end].to_owned(), &after_equals[end..])
            }
        };
        if value.is_empty() {
            return Err(ConnStrError::EmptyValue { key: key.to_owned() });
        }
        pairs.push((key.to_owned(), value));
        rest = remaining.trim_start_matches(is_blank);
    }
    Ok(pairs)
}

/// A single-quoted value (after its opening quote): `''` is one quote.
/// Returns the value and what follows the closing quote.
fn unquote<'t>(text: &'t str, key: &str) -> Result<(String, &'t str), ConnStrError> {
    let mut value = String::new();
    let mut chars = text.char_indices();
    while let Some((i, c)) = chars.next() {
        if c != '\'' {
            value.push(c);
        } else if text[i + 1..].starts_with('\'') {
            value.push('\'');
            chars.next();
        } else {
            let after = &text[i + 1..];
            if !after.is_empty() && !after.starts_with(is_blank) {
                return Err(ConnStrError::TextAfterQuote { key: key.to_owned() });
            }
            return Ok((value, after));
        }
    }
    Err(ConnStrError::UnterminatedQuote { key: key.to_owned() })
}

fn is_blank(c: char) -> bool {
    c == ' ' || c == '\t'
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(text: &str) -> Vec<(String, String)> {
        parse(text).unwrap_or_else(|e| panic!("{text:?}: {e}"))
    }

    fn p(k: &str, v: &str) -> (String, String) {
        (k.into(), v.into())
    }

    #[test]
    fn plain_pairs() {
        assert_eq!(pairs(""), vec![]);
        assert_eq!(pairs("   \t "), vec![]);
        assert_eq!(
            pairs("host=db1 port=5433  dbname=app\tuser=u"),
            vec![p("host", "db1"), p("port", "5433"), p("dbname", "app"), p("user", "u")]
        );
        assert_eq!(pairs("  host = db1   port= 1 "), vec![p("host", "db1"), p("port", "1")]);
        assert_eq!(pairs("host=a host=b"), vec![p("host", "a"), p("host", "b")]);
    }

    #[test]
    fn unquoted_values_run_to_the_next_blank() {
        // What PgBouncer does: after `host=` the value is the next word, whatever it holds.
        assert_eq!(pairs("host= port=5"), vec![p("host", "port=5")]);
        assert_eq!(pairs("password=a'b=c\\d"), vec![p("password", "a'b=c\\d")]);
    }

    #[test]
    fn quoted_values() {
        assert_eq!(pairs("password='two words'"), vec![p("password", "two words")]);
        assert_eq!(pairs("password=' asd''foo' user=x"), vec![p("password", " asd'foo"), p("user", "x")]);
        assert_eq!(pairs("password=''''"), vec![p("password", "'")]);
        assert_eq!(pairs("connect_query='SELECT 1; SET x = ''y'''"), vec![p("connect_query", "SELECT 1; SET x = 'y'")]);
        assert_eq!(pairs("password='h\u{e9}!'\tport=1"), vec![p("password", "h\u{e9}!"), p("port", "1")]);
    }

    #[test]
    fn backslashes_are_ordinary_characters_as_in_pgbouncer() {
        assert_eq!(pairs(r"password='a\b\\c'"), vec![p("password", r"a\b\\c")]);
        assert_eq!(pairs(r"password=a\ b=c"), vec![p("password", "a\\"), p("b", "c")]);
        // libpq would read \' as a quote; PgBouncer ends the value there.
        assert_eq!(parse(r"password='a\'b'"), Err(ConnStrError::TextAfterQuote { key: "password".into() }));
    }

    #[test]
    fn errors() {
        assert_eq!(parse("host"), Err(ConnStrError::NoEqualsAtStart));
        assert_eq!(parse("host=a port"), Err(ConnStrError::NoEqualsAfter { after: "host".into() }));
        assert_eq!(parse("=x"), Err(ConnStrError::EmptyKey));
        assert_eq!(parse("host="), Err(ConnStrError::EmptyValue { key: "host".into() }));
        assert_eq!(parse("host=  "), Err(ConnStrError::EmptyValue { key: "host".into() }));
        assert_eq!(parse("password=''"), Err(ConnStrError::EmptyValue { key: "password".into() }));
        assert_eq!(parse("password='abc"), Err(ConnStrError::UnterminatedQuote { key: "password".into() }));
        assert_eq!(parse("password='ab''"), Err(ConnStrError::UnterminatedQuote { key: "password".into() }));
        assert_eq!(parse("password='ab'c"), Err(ConnStrError::TextAfterQuote { key: "password".into() }));
    }

    #[test]
    fn errors_do_not_quote_values() {
        for text in ["password=sec ret", "password='secret", "password='sec'ret", "password=secret port"] {
            let message = parse(text).unwrap_err().to_string();
            assert!(!message.contains("sec") && !message.contains("ret"), "{text:?}: {message}");
        }
    }

    #[test]
    fn garbage_never_panics() {
        for text in crate::config::pgbouncer_ini::garbage("='' \t\\ab=c\u{e9}\u{0}", 5_000) {
            if let Ok(pairs) = parse(&text) {
                assert!(pairs.iter().all(|(k, v)| !k.is_empty() && !v.is_empty()), "{text:?}");
            }
        }
    }
}
