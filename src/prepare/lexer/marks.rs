//! Which of a few telling words a SQL text may hold, found in one pass.
//!
//! Every simple query a client sends (and every Parse text not seen before)
//! is looked at for what it may do to the session: SET, RESET, DISCARD,
//! `set_config`, LISTEN, PREPARE, advisory locks, temporary objects, WITH
//! HOLD cursors, SELECT INTO, the temporary schema by name, Unicode
//! escapes, the sequence state `lastval` and `currval` read, the output
//! settings binary negotiation hangs on. Almost no query names any of
//! them. Searching for each word on its own took about a quarter of
//! pglane's instructions per pgbench -S transaction at the defaults (13
//! searches of the text); [`Marks::of`] answers for all of them in one pass
//! over the bytes, and the callers look closer only at a text that is
//! marked.
//!
//! Most words are marked by their first three letters ([`Mark`]), found
//! anywhere in the text, ASCII case ignored, inside literals, comments and
//! longer words too (`offset` marks [`Mark::Set`]): a mark says a word *may*
//! be there, its absence that it is not. `set_config`, which an UPDATE's
//! `SET` would otherwise stand for, `lastval` and `currval` are looked for
//! whole.
//!
//! [`MarksMemo`] answers for a text that differs from one looked at lately
//! only in bytes no mark has (digits, a minus, spaces, quotes: a hot
//! query's next values) without a pass: such a byte ends any match, so two
//! texts with the same runs of mark letters between such bytes have the
//! same marks.
//!
//! [`Marks::of`] is pure and never allocates. Shift-And (one table load and three bit
//! operations per byte), written here because a search for several short
//! words in texts this short is cheaper so than any general multi-pattern
//! searcher's set-up.

use crate::prepare::memo::Memo;

/// What is looked for: a word's first letters, or a whole word.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mark {
    /// `lis`: `listen`.
    Lis,
    /// `pre`: `prepare`.
    Pre,
    /// `set`: `set`, and in it `reset`, `set_config`, `offset`.
    Set,
    /// `adv`: `advisory`, as in the advisory lock functions.
    Adv,
    /// `tem`: `temp`, `temporary`.
    Tem,
    /// `hol`: `hold`.
    Hol,
    /// `dis`: `discard`.
    Dis,
    /// `res`: `reset`.
    Res,
    /// `ext`: `extra_float_digits`.
    Ext,
    /// `byt`: `bytea_output`.
    Byt,
    /// `int`: `into`.
    Int,
    /// `set_config`, whole.
    SetConfig,
    /// `u&`: a Unicode-escaped string or identifier (`U&'…'`, `U&"…"`),
    /// which may spell any word the others look for.
    UnicodeEscape,
    /// `lastval`, whole: it reads the session's sequence state.
    Lastval,
    /// `currval`, whole: so does it.
    Currval,
    /// `pg_se`: `pg_settings`, whose UPDATE sets what it names.
    PgSe,
}

const ALL: [Mark; 16] = [
    Mark::Lis,
    Mark::Pre,
    Mark::Set,
    Mark::Adv,
    Mark::Tem,
    Mark::Hol,
    Mark::Dis,
    Mark::Res,
    Mark::Ext,
    Mark::Byt,
    Mark::Int,
    Mark::SetConfig,
    Mark::UnicodeEscape,
    Mark::Lastval,
    Mark::Currval,
    Mark::PgSe,
];

impl Mark {
    const fn letters(self) -> &'static [u8] {
        match self {
            Mark::Lis => b"lis",
            Mark::Pre => b"pre",
            Mark::Set => b"set",
            Mark::Adv => b"adv",
            Mark::Tem => b"tem",
            Mark::Hol => b"hol",
            Mark::Dis => b"dis",
            Mark::Res => b"res",
            Mark::Ext => b"ext",
            Mark::Byt => b"byt",
            Mark::Int => b"int",
            Mark::SetConfig => b"set_config",
            Mark::UnicodeEscape => b"u&",
            Mark::Lastval => b"lastval",
            Mark::Currval => b"currval",
            Mark::PgSe => b"pg_se",
        }
    }

    const fn bit(self) -> u16 {
        1 << self as u16
    }
}

/// The marks a text has (see the module doc).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Marks(u16);

/// Where each mark's letters start in the Shift-And state, one bit a letter,
/// the marks one after the other.
const OFFSETS: [u32; ALL.len()] = {
    let mut offsets = [0; ALL.len()];
    let mut at = 0;
    let mut i = 0;
    while i < ALL.len() {
        offsets[i] = at;
        at += ALL[i].letters().len() as u32;
        i += 1;
    }
    assert!(at <= 64, "the state is one u64");
    offsets
};

/// Shift-And over all marks at once: `TABLE[b]` has the bits of the letters
/// `b` is (either case). After each byte, the bit of a mark's `j`th letter
/// is set when the text ends with its first `j + 1` letters.
const TABLE: [u64; 256] = {
    let mut table = [0u64; 256];
    let mut i = 0;
    while i < ALL.len() {
        let letters = ALL[i].letters();
        let mut j = 0;
        while j < letters.len() {
            let bit = 1u64 << (OFFSETS[i] + j as u32);
            table[letters[j] as usize] |= bit;
            table[letters[j].to_ascii_uppercase() as usize] |= bit;
            j += 1;
        }
        i += 1;
    }
    table
};

/// The bits of each mark's first letter, and of its last.
const FIRST: u64 = letter_bits(false);
const LAST: u64 = letter_bits(true);

const fn letter_bits(last: bool) -> u64 {
    let mut bits = 0;
    let mut i = 0;
    while i < ALL.len() {
        let at = if last { OFFSETS[i] + ALL[i].letters().len() as u32 - 1 } else { OFFSETS[i] };
        bits |= 1 << at;
        i += 1;
    }
    bits
}

impl Marks {
    /// The marks of `sql`.
    pub fn of(sql: &[u8]) -> Marks {
        let (mut state, mut seen) = (0u64, 0u64);
        for &b in sql {
            state = ((state << 1) | FIRST) & TABLE[usize::from(b)];
            seen |= state;
        }
        let ends = seen & LAST;
        let mut found = 0u16;
        if ends != 0 {
            for (i, mark) in ALL.iter().enumerate() {
                if ends >> (OFFSETS[i] + mark.letters().len() as u32 - 1) & 1 != 0 {
                    found |= mark.bit();
                }
            }
        }
        Marks(found)
    }

    /// Whether the text has `mark`.
    pub fn has(self, mark: Mark) -> bool {
        self.0 & mark.bit() != 0
    }

    /// Whether the text has any of `marks`.
    pub fn any(self, marks: &[Mark]) -> bool {
        marks.iter().any(|&m| self.has(m))
    }

    /// Whether the text has no mark at all.
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }
}

/// How many texts [`MarksMemo`] keeps: a transaction's statements fit.
const MEMO_TEXTS: usize = 8;

/// A longer text is not kept.
const MEMO_TEXT_MAX: usize = 1024;

/// The last texts [`MarksMemo::of`] passed over, one per key (the lexer's
/// template key, `relex::text_key`), and their marks.
#[derive(Debug, Default)]
pub struct MarksMemo {
    kept: Memo<(Vec<u8>, Marks), MEMO_TEXTS>,
    /// The capacity of the texts kept, counted as they are kept.
    bytes: usize,
}

impl MarksMemo {
    /// [`Marks::of`] `sql`: a kept text's marks if `sql` differs from it
    /// only in bytes no mark has.
    pub fn of(&mut self, sql: &[u8]) -> Marks {
        let key = super::relex::text_key(sql);
        let found = self.kept.find(key);
        if let Some(i) = found {
            let (text, marks) = self.kept.get(i);
            if same_but_neutral(text, sql) {
                return *marks;
            }
        }
        let marks = Marks::of(sql);
        if sql.len() > MEMO_TEXT_MAX {
            return marks;
        }
        let (_, (text, kept)) = self.kept.place(key, found);
        self.bytes -= text.capacity();
        text.clear();
        text.extend_from_slice(sql);
        *kept = marks;
        self.bytes += text.capacity();
        marks
    }

    /// The bytes it keeps.
    pub fn retained_bytes(&self) -> usize {
        self.bytes
    }
}

/// Whether `a` and `b` are the same runs of mark letters, with runs of
/// other bytes (any, but none missing) in the same places between them: a
/// byte no mark has resets the search (its `TABLE` entry is 0).
fn same_but_neutral(a: &[u8], b: &[u8]) -> bool {
    let neutral = |c: u8| TABLE[usize::from(c)] == 0;
    let in_neutral = |text: &[u8], at: usize| text.get(at).is_some_and(|&c| neutral(c)) || (at > 0 && neutral(text[at - 1]));
    let (mut i, mut j) = (0, 0);
    loop {
        let common = common_prefix(&a[i..], &b[j..]);
        i += common;
        j += common;
        if i == a.len() && j == b.len() {
            return true;
        }
        // They differ here: only inside a run of neutral bytes on both sides.
        if !in_neutral(a, i) || !in_neutral(b, j) {
            return false;
        }
        let skipped_a = a[i..].iter().take_while(|&&c| neutral(c)).count();
        let skipped_b = b[j..].iter().take_while(|&&c| neutral(c)).count();
        if skipped_a == 0 && skipped_b == 0 {
            return false;
        }
        i += skipped_a;
        j += skipped_b;
    }
}

/// How many bytes `a` and `b` begin with alike, compared eight at a time.
fn common_prefix(a: &[u8], b: &[u8]) -> usize {
    let n = a.len().min(b.len());
    let mut i = 0;
    while i + 8 <= n {
        let x = u64::from_le_bytes(a[i..i + 8].try_into().expect("8 bytes"));
        let y = u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"));
        if x != y {
            return i + ((x ^ y).trailing_zeros() / 8) as usize;
        }
        i += 8;
    }
    while i < n && a[i] == b[i] {
        i += 1;
    }
    i
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn the_memo_answers_for_other_neutral_bytes_only() {
        let mut memo = MarksMemo::default();
        let pgbench = b"SELECT abalance FROM pgbench_accounts WHERE aid = 81649;";
        assert!(memo.of(pgbench).is_empty());
        assert!(same_but_neutral(pgbench, b"SELECT abalance FROM pgbench_accounts WHERE aid = 7;"));
        assert!(same_but_neutral(b"x12y3", b"x4y567"));
        assert!(same_but_neutral(b"12", b"3"));
        assert!(same_but_neutral(b"SET a = a + -1234 WHERE b = '1'", b"SET a = a + 56 WHERE b = '22'"), "a sign, quotes");
        assert!(!same_but_neutral(b"WHERE b = 'x'", b"WHERE b = 'yy'"), "letters of marks in a literal");
        assert!(!same_but_neutral(b"se1t", b"set"), "a digit that splits a word");
        assert!(!same_but_neutral(b"ab1", b"ab"), "a run of neutral bytes missing");
        assert!(!same_but_neutral(b"x1", b"x1y"));
        assert!(!same_but_neutral(b"1x", b"1y"));
        assert!(!same_but_neutral(b"aid = 5", b"aid = 5 OFFSET 1"));
        assert!(!same_but_neutral(b"a 'set'", b"a 'sit'"), "a letter of a mark inside a literal");
        // A text that gains a mark in a neutral byte's place is passed over.
        assert!(!memo.of(b"SELECT 1 FROM t").has(Mark::Set));
        assert!(memo.of(b"SELECT set FROM t").has(Mark::Set));
        assert!(memo.of(b"SELECT set FROM t").has(Mark::Set), "kept");
        // Texts of other keys are kept beside one another.
        let kept = memo.kept.entries().count();
        assert!(memo.of(b"SELECT abalance FROM pgbench_accounts WHERE aid = 5;").is_empty());
        assert!(memo.of(b"UPDATE t SET x = 1").has(Mark::Set));
        assert_eq!(memo.kept.entries().count(), kept + 1, "the pgbench query was kept, under its key");
        assert_eq!(memo.retained_bytes(), memo.kept.entries().map(|(text, _)| text.capacity()).sum::<usize>());
    }

    fn naive(sql: &[u8]) -> Marks {
        let lower = sql.to_ascii_lowercase();
        let mut found = 0;
        for m in ALL {
            if lower.windows(m.letters().len()).any(|w| w == m.letters()) {
                found |= m.bit();
            }
        }
        Marks(found)
    }

    #[test]
    fn pgbench_queries_have_none_but_their_sets_and_intos() {
        assert!(Marks::of(b"SELECT abalance FROM pgbench_accounts WHERE aid = 81649;").is_empty());
        let update = Marks::of(b"UPDATE pgbench_tellers SET tbalance = tbalance + -1234 WHERE tid = 3;");
        assert!(update.has(Mark::Set) && !update.has(Mark::SetConfig));
        assert!(Marks::of(b"INSERT INTO pgbench_history (tid) VALUES (1)").has(Mark::Int));
    }

    #[test]
    fn each_word_marks_itself_in_any_case() {
        for (word, mark) in [
            ("LISTEN", Mark::Lis),
            ("Prepare", Mark::Pre),
            ("set", Mark::Set),
            ("pg_advisory_lock", Mark::Adv),
            ("TEMPORARY", Mark::Tem),
            ("with hold", Mark::Hol),
            ("DISCARD ALL", Mark::Dis),
            ("RESET all", Mark::Res),
            ("extra_float_digits", Mark::Ext),
            ("BYTEA_OUTPUT", Mark::Byt),
            ("select 1 into x", Mark::Int),
            ("select pg_catalog.SET_CONFIG('a', 'b', false)", Mark::SetConfig),
            ("create table U&\"pg\\005ftemp\".t ()", Mark::UnicodeEscape),
            ("select LASTVAL()", Mark::Lastval),
            ("select pg_catalog.currval('t_id_seq')", Mark::Currval),
        ] {
            assert!(Marks::of(word.as_bytes()).has(mark), "{word}");
        }
        assert!(Marks::of(b"offset").has(Mark::Set), "inside a longer word");
        assert!(Marks::of(b"'reset'").has(Mark::Res), "inside a literal");
        assert!(!Marks::of(b"se t").has(Mark::Set), "split by a space");
        assert!(!Marks::of(b"s\xc5\x9bet").has(Mark::Set), "split by a multibyte character");
        assert!(!Marks::of(b"set config").has(Mark::SetConfig), "whole or not at all");
        assert!(!Marks::of(b"set_confi").has(Mark::SetConfig));
        assert!(Marks::of(b"").is_empty());
        assert!(Marks::of(b"se").is_empty());
    }

    #[test]
    fn only_letters_fold() {
        assert!(!Marks::of(b"in\x14").has(Mark::Int), "a control byte is not 't'");
        assert!(!Marks::of(b"in\xd4").has(Mark::Int), "nor is 't' with its high bit set");
        assert!(!Marks::of(b"set\x7fconfig").has(Mark::SetConfig), "nor DEL '_'");
    }

    proptest! {
        #[test]
        fn one_pass_finds_what_a_search_for_each_finds(
            sql in "(?i)[a-z_ ;'0-9]{0,12}(set|lis|pre|int|byt|res|set_config|set_set_config|u&|lastval|currval)?[a-z_ ;'&\u{e9}]{0,12}"
        ) {
            prop_assert_eq!(Marks::of(sql.as_bytes()), naive(sql.as_bytes()));
        }

        #[test]
        fn any_bytes(sql in proptest::collection::vec(any::<u8>(), 0..64)) {
            prop_assert_eq!(Marks::of(&sql), naive(&sql));
        }

        /// After any text, the memo's marks of the next are a pass's.
        #[test]
        fn the_memo_agrees_with_a_pass(
            first in "(?i)[a-z_ 0-9'-]{0,6}(set|lis|1|12|int|s1et|se-t|lastval|curr3val)?[a-z_ 0-9]{0,6}(set|9|u&|-)?[0-9 ']{0,3}",
            second in "(?i)[a-z_ 0-9'-]{0,6}(set|lis|1|12|int|s1et|se-t|lastval|curr3val)?[a-z_ 0-9]{0,6}(set|9|u&|-)?[0-9 ']{0,3}",
            digits in proptest::collection::vec("[0-9]{1,4}", 4),
        ) {
            // The second text, and the first with its digit runs replaced.
            let respelled = first.split(|c: char| c.is_ascii_digit()).filter(|s| !s.is_empty()).collect::<Vec<_>>();
            let mut same_runs = String::new();
            for (i, run) in respelled.iter().enumerate() {
                same_runs.push_str(run);
                same_runs.push_str(&digits[i % 4]);
            }
            for next in [second.as_str(), same_runs.as_str()] {
                let mut memo = MarksMemo::default();
                memo.of(first.as_bytes());
                prop_assert_eq!(memo.of(next.as_bytes()), Marks::of(next.as_bytes()), "{:?} then {:?}", first, next);
            }
        }
    }
}
