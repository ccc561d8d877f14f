//! A text lexed again from one lexed lately: a hot statement's next
//! execution differs from its last only in its literal values (`… WHERE aid
//! = 12345`, then `… WHERE aid = 678`), and a comparison of the bytes
//! around them tells so for a fraction of a scan's work.
//!
//! [`Lexed::relex`] takes a template (a text lexed before, and its lexing)
//! and the new text. It succeeds only if the new text is the template's
//! bytes exactly, except that each slot holds another literal of the same
//! kind, read by the rules the scanner reads it by. The scanner walks left
//! to right, and what it decides at a token depends on the tokens before it
//! and on the bytes after it up to the next token, never on a literal's
//! value. Equal bytes before a slot, a literal of the same kind and
//! parameter type in it, and equal bytes after it give the same walk: the
//! same shape hash, parameter types, kept literals and errors, with the
//! slots' spans and values those of the new text. The tests check this
//! against a full lex of random texts.
//!
//! Only the literals a hot path repeats are read here: a plain integer
//! (`42`, no `.`, no exponent; `-42` where the template's number had its
//! minus folded, which the scanner then folds here too, or none) and a
//! plain `'…'` string (no prefix letter, no continuation). Anything else,
//! or any byte that differs outside a slot, and the caller lexes the text
//! in full.
//!
//! [`Templates`] keeps the last few texts lexed, one per [`text_key`] (a
//! transaction's statements each have their own), each with its lexing and
//! rewritten text. It owns nothing else: [`Lexed::relex`] writes a
//! [`Lexed`]'s slots, values and kept spans from a template's, and leaves
//! them unusable when it returns false.

use super::literals::classify_number;
use super::{Kept, LexOptions, Lexed, LiteralKind, Slot};
use crate::prepare::memo::Memo;

/// How many texts are kept: a transaction's statements fit (pgbench's
/// tpcb-like runs seven).
const TEMPLATES: usize = 8;

/// A longer text is not kept: it would hold memory for a query that is
/// seldom hot, and a scan of it costs little more than the comparison.
const TEMPLATE_MAX: usize = 1024;

/// How many of a text's first bytes key its template.
const KEY_BYTES: usize = 16;

/// Which template a text may be read again from: its first bytes up to its
/// first digit or quote (where a literal may start), at most
/// [`KEY_BYTES`], so that the next text of the same statement finds the same
/// one. Eight bytes at a time; a kept text is compared in full before use.
pub(super) fn text_key(sql: &[u8]) -> u64 {
    let (low, high) = match sql.get(..KEY_BYTES) {
        Some(first) => (
            u64::from_le_bytes(first[..8].try_into().expect("8 bytes")),
            u64::from_le_bytes(first[8..].try_into().expect("8 bytes")),
        ),
        None => {
            let mut first = [0u8; KEY_BYTES];
            first[..sql.len()].copy_from_slice(sql);
            (
                u64::from_le_bytes(first[..8].try_into().expect("8 bytes")),
                u64::from_le_bytes(first[8..].try_into().expect("8 bytes")),
            )
        }
    };
    let (low, high) = match literal_start(low) {
        Some(at) => (low & below(at), 0),
        None => (low, literal_start(high).map_or(high, |at| high & below(at))),
    };
    let full = u128::from(low ^ 0x243f_6a88_85a3_08d3) * u128::from(high ^ 0x1319_8a2e_0370_7344);
    (full as u64) ^ ((full >> 64) as u64)
}

/// The index of the first byte of `w` (little-endian) that is an ASCII
/// digit or a quote, if any.
fn literal_start(w: u64) -> Option<u32> {
    const LOW7: u64 = 0x7f7f_7f7f_7f7f_7f7f;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    const ONES: u64 = 0x0101_0101_0101_0101;
    // Per byte, with no carry between bytes: its high bit set when the
    // byte's low seven bits are at least `c`.
    let at_least = |low: u64, c: u8| low + ONES * (0x80 - u64::from(c));
    let low = w & LOW7;
    let digit = at_least(low, b'0') & !at_least(low, b'9' + 1);
    let quote = at_least(low, b'\'') & !at_least(low, b'\'' + 1);
    let found = (digit | quote) & !w & HIGH;
    (found != 0).then(|| found.trailing_zeros() / 8)
}

/// The bytes of a word below index `at`.
fn below(at: u32) -> u64 {
    if at == 0 {
        0
    } else {
        u64::MAX >> (64 - 8 * at)
    }
}

/// A text lexed before, and its lexing.
#[derive(Debug, Clone, Default)]
pub(super) struct Template {
    options: LexOptions,
    text: Vec<u8>,
    shape_hash: u64,
    slots: Vec<Slot>,
    param_types: Vec<u32>,
    kept: Vec<Kept>,
    /// Its rewritten text ([`Lexed::write_rewritten`]), the same for every
    /// text read again from it.
    rewritten: String,
}

/// The templates kept, filled in turn.
#[derive(Debug, Clone, Default)]
pub(super) struct Templates {
    kept: Memo<Template, TEMPLATES>,
    /// What [`Templates::retained_bytes`] says, kept up to date.
    bytes: usize,
}

impl Templates {
    /// The template of `key` lexed with `options`, if one is kept.
    pub(super) fn find(&mut self, key: u64, options: LexOptions) -> Option<usize> {
        self.kept.find(key).filter(|&i| self.kept.get(i).options == options)
    }

    pub(super) fn rewritten(&self, i: usize) -> &str {
        &self.kept.get(i).rewritten
    }

    /// The bytes the templates hold, counted as they are kept.
    pub(super) fn retained_bytes(&self) -> usize {
        self.bytes
    }
}

impl Template {
    fn retained_bytes(&self) -> usize {
        use std::mem::size_of;
        self.text.capacity()
            + self.rewritten.capacity()
            + self.slots.capacity() * size_of::<Slot>()
            + self.param_types.capacity() * size_of::<u32>()
            + self.kept.capacity() * size_of::<Kept>()
    }
}

impl Lexed {
    /// Keeps `sql`, just lexed in full with `options`, as the template of
    /// `key`: in place of the one of the same key, else of the oldest.
    /// Returns where, unless it is too long to keep.
    pub(super) fn remember(&mut self, key: u64, sql: &str, options: LexOptions) -> Option<usize> {
        if sql.len() > TEMPLATE_MAX {
            return None;
        }
        let t = &mut self.templates;
        let found = t.kept.find(key);
        let (i, kept) = t.kept.place(key, found);
        let mut template = std::mem::take(kept);
        t.bytes -= template.retained_bytes();
        template.options = options;
        template.text.clear();
        template.text.extend_from_slice(sql.as_bytes());
        template.shape_hash = self.shape_hash;
        template.slots.clone_from(&self.slots);
        template.param_types.clone_from(&self.param_types);
        template.kept.clone_from(&self.kept);
        template.rewritten.clear();
        self.write_rewritten(sql, &mut template.rewritten);
        self.templates.bytes += template.retained_bytes();
        *self.templates.kept.get_mut(i) = template;
        Some(i)
    }

    /// Reads `sql` again as template `i`'s text with other literal values,
    /// into this `Lexed`. Returns false if it cannot tell so; the caller
    /// must then lex `sql` in full.
    pub(super) fn relex(&mut self, i: usize, sql: &[u8], options: LexOptions) -> bool {
        let Lexed { templates, shape_hash, slots, param_types, values, kept: kept_out, tokens, .. } = self;
        let template = templates.kept.get(i);
        let text = template.text.as_slice();
        tokens.clear();
        slots.clear();
        param_types.clear();
        values.clear();
        kept_out.clear();
        let (mut from_template, mut from_sql) = (0usize, 0usize);
        let mut kept = template.kept.iter().peekable();
        for slot in &template.slots {
            let (start, end) = (slot.start as usize, slot.end as usize);
            let Some(gap) = text.get(from_template..start) else { return false };
            if sql.get(from_sql..from_sql + gap.len()) != Some(gap) {
                return false;
            }
            // The kept literals in this gap move by what the slots before
            // them grew or shrank.
            while let Some(k) = kept.next_if(|k| (k.start as usize) < start) {
                kept_out.push(shifted(k, from_template, from_sql));
            }
            let literal_at = from_sql + gap.len();
            let value_start = values.len();
            let mut negative = false;
            let literal_end = match slot.kind {
                LiteralKind::Int4 | LiteralKind::Int8 if is_plain_integer(&text[start..end], slot.negative) => {
                    // Where the scanner folded a minus into the template's
                    // number, it folds one into this text's, or there is none.
                    negative = slot.negative && sql.get(literal_at) == Some(&b'-');
                    let digits_at = literal_at + usize::from(negative);
                    let digits = sql[digits_at..].iter().take_while(|c| c.is_ascii_digit()).count();
                    let number = &sql[digits_at..digits_at + digits];
                    if digits == 0 || classify_number(number, false, negative) != slot.kind {
                        return false;
                    }
                    if negative {
                        values.push(b'-');
                    }
                    values.extend_from_slice(number);
                    digits_at + digits
                }
                LiteralKind::String if text[start] == b'\'' => match plain_string(sql, literal_at, options, values) {
                    Some(end) => end,
                    None => return false,
                },
                _ => return false,
            };
            let (Ok(new_start), Ok(new_end)) = (u32::try_from(literal_at), u32::try_from(literal_end)) else { return false };
            slots.push(Slot {
                start: new_start,
                end: new_end,
                negative,
                value: (value_start as u32, values.len() as u32),
                ..*slot
            });
            from_template = end;
            from_sql = literal_end;
        }
        if text.get(from_template..) != sql.get(from_sql..) {
            return false;
        }
        for k in kept {
            kept_out.push(shifted(k, from_template, from_sql));
        }
        param_types.extend_from_slice(&template.param_types);
        *shape_hash = template.shape_hash;
        true
    }
}

/// Whether a template's slot `span` is an integer in digits alone, after a
/// minus right before them when `negative` (`-5`, not `- 5`).
fn is_plain_integer(span: &[u8], negative: bool) -> bool {
    let digits = match negative {
        true => match span.split_first() {
            Some((b'-', digits)) => digits,
            _ => return false,
        },
        false => span,
    };
    !digits.is_empty() && digits.iter().all(u8::is_ascii_digit)
}

/// A kept literal of the template, past `from_template`, moved to the same
/// place past `from_sql`.
fn shifted(k: &Kept, from_template: usize, from_sql: usize) -> Kept {
    let at = |offset: u32| (offset as usize - from_template + from_sql) as u32;
    Kept { start: at(k.start), end: at(k.end), why: k.why }
}

/// The plain `'…'` string whose opening quote is at `quote` (`''` for a
/// quote): appends its value to `values` and returns the position after its
/// closing quote, or None if it is unterminated or holds a backslash while
/// `standard_conforming_strings` is off (the scanner refuses both).
fn plain_string(sql: &[u8], quote: usize, options: LexOptions, values: &mut Vec<u8>) -> Option<usize> {
    if sql.get(quote) != Some(&b'\'') {
        return None;
    }
    let mut p = quote + 1;
    loop {
        let len = sql[p..].iter().position(|&c| c == b'\'')?;
        let part = &sql[p..p + len];
        if !options.standard_conforming_strings && part.contains(&b'\\') {
            return None;
        }
        values.extend_from_slice(part);
        p += len + 1;
        if sql.get(p) == Some(&b'\'') {
            values.push(b'\'');
            p += 1;
        } else {
            return Some(p);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::Unsupported;
    use super::*;
    use proptest::prelude::*;

    /// Everything a lexing yields, to compare two of them.
    fn outcome(lexed: &Lexed, sql: &str) -> (u64, Vec<Slot>, Vec<Kept>, Vec<u32>, Vec<Vec<u8>>, String) {
        let values = lexed.params().map(|v| v.expect("never NULL").to_vec()).collect();
        let slots = lexed.slots().to_vec();
        (lexed.shape_hash(), slots, lexed.kept().to_vec(), lexed.param_types().to_vec(), values, lexed.rewritten(sql))
    }

    /// Reads `sql` again from `template`; on success, checks it against a
    /// full lex of `sql` and returns true.
    fn relexed(template: &str, sql: &str, options: LexOptions) -> bool {
        let mut lexed = Lexed::new();
        if lexed.lex(template, options).is_err() {
            return false;
        }
        let Some(i) = lexed.templates.find(text_key(template.as_bytes()), options) else { return false };
        if !lexed.relex(i, sql.as_bytes(), options) {
            return false;
        }
        lexed.last = Some(i);
        let rewritten = lexed.rewritten_of_last().to_owned();
        assert_eq!(rewritten, lexed.rewritten(sql));
        let mut full = Lexed::new();
        let scanned: Result<(), Unsupported> = full.lex_tokens(sql, options);
        assert_eq!(scanned, Ok(()), "{template:?} read again as {sql:?}, which does not lex");
        assert_eq!(outcome(&lexed, sql), outcome(&full, sql), "{template:?} read again as {sql:?}");
        true
    }

    #[test]
    fn a_hot_statement_with_other_values_is_read_again() {
        let on = LexOptions::default();
        let pgbench = "SELECT abalance FROM pgbench_accounts WHERE aid = 12345;";
        assert!(relexed(pgbench, "SELECT abalance FROM pgbench_accounts WHERE aid = 7;", on));
        assert!(relexed(pgbench, "SELECT abalance FROM pgbench_accounts WHERE aid = 2147483647;", on));
        assert!(relexed("UPDATE t SET a = 'x', b = 3 WHERE c = 'it''s'", "UPDATE t SET a = '', b = 40 WHERE c = 'a\\b'", on));
        // Kept literals move with the slots before them.
        assert!(relexed(
            "SELECT a, 'x' FROM t WHERE d > date '2020-01-01' AND e = 5 ORDER BY 1",
            "SELECT a, 'longer' FROM t WHERE d > date '2020-01-01' AND e = 123456 ORDER BY 1",
            on
        ));
    }

    #[test]
    fn anything_else_is_scanned() {
        let on = LexOptions::default();
        let pgbench = "SELECT abalance FROM pgbench_accounts WHERE aid = 12345;";
        // Another type: int8, numeric.
        assert!(!relexed(pgbench, "SELECT abalance FROM pgbench_accounts WHERE aid = 2147483648;", on));
        assert!(!relexed(pgbench, "SELECT abalance FROM pgbench_accounts WHERE aid = 1.5;", on));
        assert!(!relexed(pgbench, "SELECT abalance FROM pgbench_accounts WHERE aid = 1e5;", on));
        // Another word, case, spacing, or a longer text.
        assert!(!relexed(pgbench, "SELECT abalance FROM pgbench_accounts WHERE bid = 12345;", on));
        assert!(!relexed(pgbench, "select abalance FROM pgbench_accounts WHERE aid = 12345;", on));
        assert!(!relexed(pgbench, "SELECT abalance FROM pgbench_accounts WHERE aid = 12345; ", on));
        assert!(!relexed(pgbench, "SELECT abalance FROM pgbench_accounts WHERE aid = 12345", on));
        // A string for a number, a continued string, a prefixed one.
        assert!(!relexed(pgbench, "SELECT abalance FROM pgbench_accounts WHERE aid = '1';", on));
        assert!(!relexed("SELECT 'a' AS x", "SELECT 'a'\n'b' AS x", on));
        assert!(!relexed("SELECT 'a' AS x", "SELECT E'a' AS x", on));
        // A folded minus comes and goes; one not folded does not.
        assert!(relexed("SELECT a + -5 AS x", "SELECT a + -6 AS x", on));
        assert!(relexed("SELECT a + -5 AS x", "SELECT a + 6 AS x", on));
        assert!(!relexed("SELECT a + 5 AS x", "SELECT a + -6 AS x", on), "not known to fold here");
        assert!(!relexed("SELECT a + -2147483648 AS x", "SELECT a + 2147483648 AS x", on), "int4 only with its minus");
        assert!(!relexed("SELECT - 5 AS x", "SELECT - 6 AS x", on), "a minus apart");
        // Literals the fast path does not read.
        assert!(!relexed("SELECT E'a' AS x", "SELECT E'b' AS x", on));
        // A backslash the scanner refuses with standard_conforming_strings off.
        let off = LexOptions { standard_conforming_strings: false };
        assert!(!relexed("SELECT 'a' AS x", "SELECT 'a\\b' AS x", off));
    }

    #[test]
    fn lex_reads_again_only_what_it_may() {
        let mut lexed = Lexed::new();
        let on = LexOptions::default();
        lexed.lex("SELECT 1 FROM t WHERE a = 'x'", on).unwrap();
        lexed.lex("SELECT 1 FROM t WHERE a = 'yy'", on).unwrap();
        assert_eq!(lexed.params().collect::<Vec<_>>(), [Some(&b"1"[..]), Some(&b"yy"[..])]);
        // A text the scanner refuses is refused after a template too.
        assert_eq!(lexed.lex("SELECT 1 FROM t WHERE a = 'yy", on), Err(Unsupported::Unterminated));
        assert_eq!(lexed.lex("SELECT 1 FROM t WHERE a = 'yy'; SELECT 2", on), Err(Unsupported::MultipleStatements));
    }

    #[test]
    fn the_key_reads_up_to_the_first_digit_or_quote() {
        let naive = |sql: &[u8]| {
            let n =
                sql.iter().take(KEY_BYTES).position(|c| c.is_ascii_digit() || *c == b'\'').unwrap_or(sql.len().min(KEY_BYTES));
            let mut padded = sql[..n].to_vec();
            padded.resize(KEY_BYTES + 1, 0);
            text_key(&padded[..KEY_BYTES])
        };
        for sql in [
            &b""[..],
            b"END;",
            b"SELECT 1",
            b"SELECT abalance FROM t WHERE aid = 5",
            b"SELECT 'x'",
            b"12",
            b"UPDATE pgbench_tellers",
        ] {
            assert_eq!(text_key(sql), naive(sql), "{:?}", String::from_utf8_lossy(sql));
        }
        assert_eq!(text_key(b"SELECT 1 + 2"), text_key(b"SELECT 4567"));
        assert_eq!(text_key(b"UPDATE pgbench_tellers SET x = 1"), text_key(b"UPDATE pgbench_tellers SET x = 9"));
        assert_ne!(text_key(b"UPDATE pgbench_tellers"), text_key(b"UPDATE pgbench_branches"));
        assert_eq!(literal_start(u64::from_le_bytes(*b"ab\xb0cd9'x")), Some(5), "a byte with its high bit set is none");
    }

    #[test]
    fn a_transactions_statements_are_each_read_again() {
        let on = LexOptions::default();
        let statements = |round: u32| {
            [
                format!("UPDATE pgbench_accounts SET abalance = abalance + {round} WHERE aid = {};", round * 7),
                format!("SELECT abalance FROM pgbench_accounts WHERE aid = {};", round * 7),
                format!("UPDATE pgbench_tellers SET tbalance = tbalance + {round} WHERE tid = 3;"),
                format!("UPDATE pgbench_branches SET bbalance = bbalance + {round} WHERE bid = 1;"),
                format!(
                    "INSERT INTO pgbench_history (tid, bid, aid, delta, mtime) VALUES (3, 1, {round}, 5, CURRENT_TIMESTAMP);"
                ),
                "END;".to_owned(),
            ]
        };
        let mut lexed = Lexed::new();
        for round in 1..4 {
            for sql in statements(round) {
                lexed.lex(&sql, on).unwrap();
                assert_eq!(lexed.was_read_again(), round > 1, "{sql}");
                let mut full = Lexed::new();
                full.lex(&sql, on).unwrap();
                assert_eq!(outcome(&lexed, &sql), outcome(&full, &sql), "{sql}");
            }
        }
        let counted: usize = lexed.templates.kept.entries().map(Template::retained_bytes).sum();
        assert_eq!(lexed.templates.retained_bytes(), counted);
    }

    /// A statement's skeleton: fixed pieces and holes for literals.
    fn skeleton() -> impl Strategy<Value = Vec<&'static str>> {
        let piece = prop::sample::select(vec![
            "SELECT ",
            "a",
            " ",
            "\n",
            "=",
            "+",
            "-",
            "- ",
            "(",
            ")",
            ",",
            "::int",
            "date ",
            " ORDER BY ",
            " GROUP BY ",
            " LIMIT ",
            " IN ",
            "[",
            "]",
            "numeric(",
            "extract(",
            " FROM ",
            "--c\n",
            "/*c*/",
            ";",
            "?",
            "?",
            "?",
            "?",
        ]);
        prop::collection::vec(piece, 1..24)
    }

    fn literal() -> impl Strategy<Value = &'static str> {
        prop::sample::select(vec![
            "0",
            "7",
            "007",
            "12345",
            "2147483647",
            "2147483648",
            "9223372036854775807",
            "9223372036854775808",
            "1.5",
            ".5",
            "1e3",
            "1x",
            "''",
            "'a'",
            "'it''s'",
            "'a\\b'",
            "'x'\n'y'",
            "'x' \n 'y'",
            "E'z'",
            "B'1'",
            "$$d$$",
            "'now'",
            "'today'",
            "'",
        ])
    }

    fn fill(skeleton: &[&str], literals: &[&str]) -> String {
        let mut next = literals.iter().cycle();
        skeleton.iter().map(|&piece| if piece == "?" { next.next().copied().unwrap_or("1") } else { piece }).collect()
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(4000))]

        /// Whenever a text is read again from another, it is what a full
        /// lex of it gives; and `lex` after any template gives a full lex's
        /// outcome, error or not.
        #[test]
        fn reading_again_agrees_with_scanning(
            skeleton in skeleton(),
            first in prop::collection::vec(literal(), 1..6),
            second in prop::collection::vec(literal(), 1..6),
            scs in any::<bool>(),
        ) {
            let options = LexOptions { standard_conforming_strings: scs };
            let (template, sql) = (fill(&skeleton, &first), fill(&skeleton, &second));
            relexed(&template, &sql, options);
            let mut warm = Lexed::new();
            let _ = warm.lex(&template, options);
            let again = warm.lex(&sql, options);
            let mut cold = Lexed::new();
            prop_assert_eq!(again, cold.lex(&sql, options));
            if again.is_ok() {
                prop_assert_eq!(outcome(&warm, &sql), outcome(&cold, &sql));
            }
        }
    }
}
