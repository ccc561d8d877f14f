//! PostgreSQL's character classes (scan.l) and the byte tricks the scanner
//! and the shape hash share. Pure functions over bytes; no state.

/// `ident_start`: `[A-Za-z\200-\377_]`.
#[inline]
pub(super) fn is_ident_start(c: u8) -> bool {
    c.is_ascii_alphabetic() || c == b'_' || c >= 0x80
}

/// `ident_cont`: `[A-Za-z\200-\377_0-9\$]`.
#[inline]
pub(super) fn is_ident_cont(c: u8) -> bool {
    IDENT_CONT[usize::from(c)]
}

/// [`is_ident_cont`] as a table: identifiers are most of a query's bytes.
static IDENT_CONT: [bool; 256] = {
    let mut table = [false; 256];
    let mut c = 0;
    while c < 256 {
        let b = c as u8;
        table[c] = b.is_ascii_alphanumeric() || b == b'_' || b == b'$' || b >= 0x80;
        c += 1;
    }
    table
};

/// `dolq_cont`: an identifier character but `$`.
#[inline]
pub(super) fn is_dollar_tag_cont(c: u8) -> bool {
    is_ident_start(c) || c.is_ascii_digit()
}

/// `op_chars`: `[\~\!\@\#\^\&\|\`\?\+\-\*\/\%\<\>\=]`.
#[inline]
pub(super) fn is_op_char(c: u8) -> bool {
    matches!(
        c,
        b'~' | b'!' | b'@' | b'#' | b'^' | b'&' | b'|' | b'`' | b'?' | b'+' | b'-' | b'*' | b'/' | b'%' | b'<' | b'>' | b'='
    )
}

/// `space`: `[ \t\n\r\f]` (PostgreSQL 15 does not take `\v`).
#[inline]
pub(super) fn is_space(c: u8) -> bool {
    matches!(c, b' ' | b'\t' | b'\n' | b'\r' | 0x0c)
}

/// The length of the operator token at the start of `run` (a maximal run of
/// operator characters), per scan.l's `{operator}` rule: it stops before a
/// `/*` or `--`, and drops trailing `+`/`-` unless it holds one of
/// ``~!@#^&|`?%`` (so `=-` is `=` then `-`).
#[inline]
pub(super) fn operator_len(run: &[u8]) -> usize {
    let comment = run.windows(2).position(|w| w == b"/*" || w == b"--");
    let mut len = comment.unwrap_or(run.len());
    if len > 1 && matches!(run[len - 1], b'+' | b'-') {
        let qualifies =
            run[..len - 1].iter().any(|c| matches!(c, b'~' | b'!' | b'@' | b'#' | b'^' | b'&' | b'|' | b'`' | b'?' | b'%'));
        if !qualifies {
            while len > 1 && matches!(run[len - 1], b'+' | b'-') {
                len -= 1;
            }
        }
    }
    len
}

/// Whether `needle` occurs in `haystack`, ASCII case ignored (SQL keywords
/// and identifiers folded the way PostgreSQL folds them).
///
/// A plain loop over the offsets, comparing the rest only where the first
/// byte matches: every simple query is searched this way (for search_path),
/// and on pgbench's query it runs in a quarter of the instructions of
/// comparing a window at every offset, and in less than memchr's vector
/// search, whose set-up costs more than such short texts.
pub(crate) fn contains_ignore_ascii_case(haystack: &[u8], needle: &[u8]) -> bool {
    let Some((&first, rest)) = needle.split_first() else { return true };
    let Some(last_start) = haystack.len().checked_sub(needle.len()) else { return false };
    let first = first.to_ascii_lowercase();
    (0..=last_start)
        .any(|i| haystack[i].to_ascii_lowercase() == first && haystack[i + 1..i + needle.len()].eq_ignore_ascii_case(rest))
}

/// ASCII-lowercases the eight bytes of a word at once.
#[inline]
pub(super) fn lowercase_word(w: u64) -> u64 {
    const LOW7: u64 = 0x7f7f_7f7f_7f7f_7f7f;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    const ONES: u64 = 0x0101_0101_0101_0101;
    let low = w & LOW7;
    let at_least_a = low + ONES * (0x80 - u64::from(b'A'));
    let above_z = low + ONES * (0x7f - u64::from(b'Z'));
    let upper = at_least_a & !above_z & !w & HIGH;
    w | (upper >> 2)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn operator_lengths() {
        assert_eq!(operator_len(b"=-"), 1);
        assert_eq!(operator_len(b"<=-+"), 2);
        assert_eq!(operator_len(b"@-"), 2);
        assert_eq!(operator_len(b"*--"), 1);
        assert_eq!(operator_len(b"+/*"), 1);
        assert_eq!(operator_len(b"-"), 1);
        assert_eq!(operator_len(b"!=-"), 3);
    }

    #[test]
    fn swar_lowercase() {
        let word = u64::from_le_bytes(*b"AZaz@[`{");
        assert_eq!(lowercase_word(word).to_le_bytes(), *b"azaz@[`{");
        let high = u64::from_le_bytes([0xc3, 0x89, b'A', 0xc1, b'Z', 0xda, b'_', b'0']);
        assert_eq!(lowercase_word(high).to_le_bytes(), [0xc3, 0x89, b'a', 0xc1, b'z', 0xda, b'_', b'0']);
    }

    #[test]
    fn case_blind_search_finds_words_at_either_end_and_in_any_case() {
        let sql = b"SELECT set_config('Search_Path', 'x', false)";
        assert!(contains_ignore_ascii_case(sql, b"search_path"));
        assert!(contains_ignore_ascii_case(sql, b"select"), "at the start");
        assert!(contains_ignore_ascii_case(sql, b"FALSE)"), "at the end");
        assert!(contains_ignore_ascii_case(sql, b"_config('"), "a first byte that has no case");
        assert!(!contains_ignore_ascii_case(sql, b"search_paths"));
        assert!(!contains_ignore_ascii_case(b"path", b"search_path"), "a needle longer than the text");
        assert!(contains_ignore_ascii_case(b"", b""));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        /// The memchr search finds exactly what comparing at every offset finds.
        #[test]
        fn case_blind_search_agrees_with_comparing_everywhere(
            haystack in "[a-dA-D_ 1]{0,40}",
            needle in "[a-dA-D_1]{0,5}",
        ) {
            let everywhere = needle.is_empty()
                || haystack.as_bytes().windows(needle.len()).any(|w| w.eq_ignore_ascii_case(needle.as_bytes()));
            prop_assert_eq!(contains_ignore_ascii_case(haystack.as_bytes(), needle.as_bytes()), everywhere);
        }
    }
}
