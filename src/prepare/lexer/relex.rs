//! A text lexed again from the last one: a hot statement's next execution
//! differs from its last only in its literal values (`… WHERE aid = 12345`,
//! then `… WHERE aid = 678`), and a comparison of the bytes around them
//! tells so for less than a tenth of a scan's work.
//!
//! [`Lexed::relex`] takes the previous text (the template) and its lexing,
//! and the new text. It succeeds only if the new text is the template's
//! bytes exactly, except that each slot holds another literal of the same
//! kind, read by the rules the scanner reads it by. The scanner walks left
//! to right, and what it decides at a token depends on the tokens before it
//! and on the bytes after it up to the next token, never on a literal's
//! value. Equal bytes before a slot, a literal of the same kind in it (so
//! the same first byte, and the same parameter type), and equal bytes after
//! it give the same walk: the same shape hash, parameter types, kept
//! literals and errors, with the slots' spans and values those of the new
//! text. `lexer::tests` checks this against a full lex of random texts.
//!
//! Only the literals a hot path repeats are read here: a plain integer
//! (`42`, no sign, no `.`, no exponent) and a plain `'…'` string (no prefix
//! letter, no continuation). Anything else, or any byte that differs outside
//! a slot, and the caller lexes the text in full.
//!
//! It owns nothing: it rewrites a [`Lexed`]'s slots, values and kept spans
//! in place, and leaves them unusable when it returns false.

use super::literals::classify_number;
use super::{LexOptions, Lexed, LiteralKind};

impl Lexed {
    /// Re-reads `sql` as `template` (the text this `Lexed` holds the lexing
    /// of, with `options`) with other literal values. Returns false if it
    /// cannot tell so; the caller must then lex `sql` in full.
    pub(super) fn relex(&mut self, template: &[u8], sql: &[u8], options: LexOptions) -> bool {
        self.values.clear();
        self.tokens.clear();
        let (mut from_template, mut from_sql) = (0usize, 0usize);
        let mut kept = 0;
        for i in 0..self.slots.len() {
            let slot = self.slots[i];
            let (start, end) = (slot.start as usize, slot.end as usize);
            let Some(gap) = template.get(from_template..start) else { return false };
            if sql.get(from_sql..from_sql + gap.len()) != Some(gap) {
                return false;
            }
            // The kept literals in this gap move by what the slots before
            // them grew or shrank.
            while let Some(k) = self.kept.get_mut(kept).filter(|k| (k.start as usize) < start) {
                k.start = shifted(k.start, from_template, from_sql);
                k.end = shifted(k.end, from_template, from_sql);
                kept += 1;
            }
            let literal_at = from_sql + gap.len();
            let value_start = self.values.len();
            let literal_end = match slot.kind {
                LiteralKind::Int4 | LiteralKind::Int8
                    if !slot.negative && template[start..end].iter().all(u8::is_ascii_digit) =>
                {
                    let digits = sql[literal_at..].iter().take_while(|c| c.is_ascii_digit()).count();
                    let number = &sql[literal_at..literal_at + digits];
                    if digits == 0 || classify_number(number, false, false) != slot.kind {
                        return false;
                    }
                    self.values.extend_from_slice(number);
                    literal_at + digits
                }
                LiteralKind::String if template[start] == b'\'' => {
                    match plain_string(sql, literal_at, options, &mut self.values) {
                        Some(end) => end,
                        None => return false,
                    }
                }
                _ => return false,
            };
            let (Ok(new_start), Ok(new_end)) = (u32::try_from(literal_at), u32::try_from(literal_end)) else { return false };
            self.slots[i].start = new_start;
            self.slots[i].end = new_end;
            self.slots[i].value = (value_start as u32, self.values.len() as u32);
            from_template = end;
            from_sql = literal_end;
        }
        if template.get(from_template..) != sql.get(from_sql..) {
            return false;
        }
        for k in &mut self.kept[kept..] {
            k.start = shifted(k.start, from_template, from_sql);
            k.end = shifted(k.end, from_template, from_sql);
        }
        true
    }
}

/// A template offset past `from_template` moved to the same place past
/// `from_sql`.
fn shifted(offset: u32, from_template: usize, from_sql: usize) -> u32 {
    (offset as usize - from_template + from_sql) as u32
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
    use super::super::{Kept, Slot, Unsupported};
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
        if lexed.lex_tokens(template, options).is_err() || !lexed.relex(template.as_bytes(), sql.as_bytes(), options) {
            return false;
        }
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
        // Literals the fast path does not read.
        assert!(!relexed("SELECT -5 AS x", "SELECT -6 AS x", on));
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
