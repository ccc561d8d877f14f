//! Recognizes SQL `DEALLOCATE [PREPARE] name` sent as the whole of a simple
//! query. Pure: text in, name out.
//!
//! Drivers drop protocol-level statements with it: psycopg 3 sends
//! `DEALLOCATE _pg3_N` for each statement it evicts from its cache
//! (`prepared_max`). Behind pglane the server knows such a statement under
//! the shard's shared name, so the query cannot pass through; the exchange
//! drops the client's name instead (see `exchange`). `DEALLOCATE ALL` is not
//! this (the server runs it), nor is anything with more than one statement or
//! a comment: those pass through unchanged.

/// Whether `text`, past leading whitespace, begins with the keyword
/// `DEALLOCATE` in any case: the test every query fails first. It reads
/// only that far, so a message body may be given whole (its NUL ends the
/// whitespace like any other byte).
pub fn begins_with_deallocate(text: &[u8]) -> bool {
    text.iter()
        .position(|b| !b.is_ascii_whitespace())
        .is_some_and(|start| text[start..].get(..10).is_some_and(|word| word.eq_ignore_ascii_case(b"deallocate")))
}

/// The statement name `text` deallocates, as PostgreSQL resolves it
/// (unquoted names folded to lower case, `""` in a quoted name is `"`), or
/// None if `text` is not a single `DEALLOCATE [PREPARE] name`. The text is
/// the query's bytes, undecoded: every query and Parse of a client comes
/// through here, and nearly none begins with the keyword.
pub fn deallocated_name(text: &[u8]) -> Option<String> {
    if !begins_with_deallocate(text) {
        return None;
    }
    let sql = std::str::from_utf8(text).ok()?.trim();
    let sql = sql.strip_suffix(';').unwrap_or(sql).trim_end();
    if sql.contains("--") || sql.contains("/*") {
        return None;
    }
    let rest = strip_keyword(sql, "deallocate")?;
    // `DEALLOCATE PREPARE name`, but `DEALLOCATE prepare` names "prepare".
    let rest = match strip_keyword(rest, "prepare") {
        Some(after) if !after.is_empty() => after,
        _ => rest,
    };
    let name = if let Some(quoted) = rest.strip_prefix('"') {
        let mut name = String::new();
        let mut chars = quoted.chars();
        loop {
            match chars.next()? {
                '"' => match chars.next() {
                    Some('"') => name.push('"'),
                    None => break,
                    Some(_) => return None,
                },
                c => name.push(c),
            }
        }
        name
    } else {
        let first = rest.chars().next()?;
        let is_ident = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '$' || !c.is_ascii();
        if first.is_ascii_digit() || first == '$' || !rest.chars().all(is_ident) || rest.eq_ignore_ascii_case("all") {
            return None;
        }
        rest.to_ascii_lowercase()
    };
    // PostgreSQL truncates longer names (NAMEDATALEN); leave those to it.
    (!name.is_empty() && name.len() < 64).then_some(name)
}

/// `text` without its leading `keyword` (any case) and the blanks after it.
fn strip_keyword<'a>(text: &'a str, keyword: &str) -> Option<&'a str> {
    let head = text.get(..keyword.len())?;
    let rest = &text[keyword.len()..];
    if !head.eq_ignore_ascii_case(keyword) || !rest.starts_with(|c: char| c.is_ascii_whitespace()) {
        return None;
    }
    Some(rest.trim_start())
}

#[cfg(test)]
mod tests {
    use super::{begins_with_deallocate, deallocated_name};

    #[test]
    fn the_keyword_is_recognized_in_a_whole_message_body() {
        for (body, begins) in [
            (&b"DEALLOCATE _pg3_1\0"[..], true),
            (b"  \n deallocate prepare x;\0", true),
            (b"DeAlLoCaTe", true),
            (b"DEALLOCAT\0", false),
            (b"\0DEALLOCATE x", false),
            (b"select 1\0", false),
            (b"", false),
            (b"   ", false),
        ] {
            assert_eq!(begins_with_deallocate(body), begins, "{body:?}");
            if !begins {
                assert_eq!(deallocated_name(crate::protocol::names::query_bytes(body)), None);
            }
        }
    }

    #[test]
    fn names() {
        assert_eq!(deallocated_name(b"DEALLOCATE _pg3_0").as_deref(), Some("_pg3_0"));
        assert_eq!(deallocated_name(b" deallocate prepare S_1 ; ").as_deref(), Some("s_1"));
        assert_eq!(deallocated_name(b"DEALLOCATE \"S_1\"").as_deref(), Some("S_1"));
        assert_eq!(deallocated_name(b"DEALLOCATE \"a\"\"b\"").as_deref(), Some("a\"b"));
        assert_eq!(deallocated_name(b"DEALLOCATE prepare").as_deref(), Some("prepare"));
        assert_eq!(deallocated_name(b"DEALLOCATE \"all\"").as_deref(), Some("all"));
    }

    #[test]
    fn not_a_single_deallocate_of_a_name() {
        for sql in [
            "DEALLOCATE ALL",
            "deallocate prepare all",
            "DEALLOCATE",
            "DEALLOCATE a; select 1",
            "DEALLOCATE a b",
            "DEALLOCATE a -- c",
            "DEALLOCATE \"a",
            "DEALLOCATE \"a\"b",
            "DEALLOCATE 1a",
            "DEALLOCATEx a",
            "select 'DEALLOCATE a'",
            "",
            "é",
            "\u{3000}DEALLOCATE a",
        ] {
            assert_eq!(deallocated_name(sql.as_bytes()), None, "{sql}");
        }
    }
}
