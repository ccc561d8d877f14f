//! The auto-prepare hot path: a hand-written SQL lexer that walks a query once.
//!
//! [`Lexed::lex`] yields, for one query text:
//!
//! * a 64-bit **shape hash** of every token that is not a replaceable literal:
//!   words ASCII-case-folded (as PostgreSQL folds unquoted identifiers),
//!   quoted identifiers, operators and punctuation verbatim, kept literals
//!   verbatim, and for each replaced literal only a marker with its parameter
//!   type. Whitespace, comments and a trailing `;` do not count, so two texts
//!   with one hash are the same statement to PostgreSQL up to literal values;
//! * the **slots**: literals that become `$1..$n`, each with its byte span, its
//!   kind, a folded leading `-`, the parameter type to declare in Parse and its
//!   value in text format for Bind;
//! * the literals it **keeps** in the text, and why (typed literals like
//!   `date '…'`, `ORDER BY 1`, typmods, GROUP BY, `extract('field' …)`).
//!
//! The rules are the verified ones of `shared/research/protocol.md` §1.1, §1.2
//! and §2.6; comments below cite them.
//!
//! This module owns nothing but the buffers of the [`Lexed`] it fills, which
//! a session reuses from one query to the next. It must never allocate per
//! query beyond growing those buffers, never panic whatever the input, and
//! never guess: anything outside the SQL it knows exactly ends in
//! [`Unsupported`], and the query passes through unchanged. It does not decide
//! whether a shape may be prepared; [`super::shape`] does, once per shape.
//!
//! The text must be in an ASCII-safe encoding (it is a `&str`, so UTF-8): in
//! SJIS, BIG5, GBK, UHC or GB18030 a multibyte character may contain a `\` or
//! `]`, so the relay must not lex queries of clients using those.
//!
//! One concern per file:
//!
//! * `scanner.rs`: the walk over the text: tokens, punctuation, words,
//!   parentheses, and the state that decides what a literal is;
//! * `literals.rs`: the literal rules: numbers, strings, escapes, dollar
//!   quotes, and whether a literal becomes a slot or is kept;
//! * `keywords.rs`: the keywords the scanner acts on;
//! * `chars.rs`: PostgreSQL's character classes and byte tricks;
//! * `hash.rs`: the shape hash;
//! * `rewrite.rs`: the rewritten text and error positions mapped back;
//! * `respell.rs`: two spellings of one statement, compared token by token;
//! * `relex.rs`: a text read again from one of the last few lexed, when only
//!   its literal values differ (a hot statement's next execution);
//! * `marks.rs`: which of a few telling words a text may hold, in one pass
//!   (for the session-state scans of `client::pinning` and `settings`).
//!
//! This file holds the lexer's public types and [`Lexed`], its output.

mod chars;
mod hash;
mod keywords;
mod literals;
mod marks;
mod relex;
mod respell;
mod rewrite;
mod scanner;

use std::ops::Range;

pub(crate) use chars::contains_ignore_ascii_case;
pub use marks::{Mark, Marks, MarksMemo};
use relex::Templates;
pub use respell::{respelled_position, same_place, same_statement, same_tokens, Token, TokenClass};
use scanner::{Frame, Scanner};

/// Parameter type OIDs declared in Parse (protocol.md §1.1).
pub mod oid {
    /// Unspecified: the server infers the type from context, as it does for a
    /// quoted literal. Never `text` (25): it breaks `date_col = $1`.
    pub const UNKNOWN: u32 = 0;
    pub const INT4: u32 = 23;
    pub const INT8: u32 = 20;
    pub const NUMERIC: u32 = 1700;
    pub const BIT: u32 = 1560;
}

/// NAMEDATALEN − 1: longer names are truncated by the server with a NOTICE,
/// which a prepared statement would send only once.
const MAX_NAME_LEN: usize = 63;

/// A Bind message counts its parameters in an Int16 (PostgreSQL allows 65535).
const MAX_SLOTS: usize = u16::MAX as usize;

/// What kind of literal a slot is; it decides the parameter type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LiteralKind {
    /// An integer that fits int4, sign included: `42`, `-2147483648`.
    Int4,
    /// An integer that fits int8 but not int4: `3000000000`.
    Int8,
    /// An integer too big for int8, or a number with `.` or an exponent.
    Numeric,
    /// `'…'` (with `''` for a quote).
    String,
    /// `E'…'`, with backslash escapes.
    EscapeString,
    /// `$$…$$` or `$tag$…$tag$`.
    DollarString,
    /// `B'101'`.
    BitString,
    /// `X'1F'`.
    HexString,
}

impl LiteralKind {
    /// The type to declare for this literal in Parse: what PostgreSQL's
    /// scanner and `make_const` give it (protocol.md §1.1).
    pub fn param_type(self) -> u32 {
        match self {
            LiteralKind::Int4 => oid::INT4,
            LiteralKind::Int8 => oid::INT8,
            LiteralKind::Numeric => oid::NUMERIC,
            LiteralKind::String | LiteralKind::EscapeString | LiteralKind::DollarString => oid::UNKNOWN,
            LiteralKind::BitString | LiteralKind::HexString => oid::BIT,
        }
    }

    pub fn is_number(self) -> bool {
        matches!(self, LiteralKind::Int4 | LiteralKind::Int8 | LiteralKind::Numeric)
    }
}

/// A literal that becomes a parameter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slot {
    /// Byte offset of the literal's first byte in the query text: its folded
    /// `-`, its prefix letter (`E'…'`), its quote or its first digit. This is
    /// where PostgreSQL's parser places the constant.
    pub start: u32,
    /// Byte offset one past its last byte (closing quote, last digit).
    pub end: u32,
    pub kind: LiteralKind,
    /// A unary minus folded into the number, as the grammar's `doNegate`
    /// does (`-5`, `- 5`; not `-5::int`, where the cast binds first).
    pub negative: bool,
    /// Where the value is in [`Lexed`]'s value buffer.
    value: (u32, u32),
}

impl Slot {
    pub fn span(&self) -> Range<usize> {
        self.start as usize..self.end as usize
    }

    pub fn param_type(&self) -> u32 {
        self.kind.param_type()
    }
}

/// Why a literal stays in the statement text (it is then part of the shape).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum KeepReason {
    /// After a word: `date '…'`, `interval '1' day`, `AT TIME ZONE 'UTC'`,
    /// `ROWS 5 PRECEDING`. `date $1` is a syntax error and `interval $1 hour`
    /// silently means something else (protocol.md §1.1).
    TypedLiteral,
    /// A whole ORDER BY / DISTINCT ON / window item: `ORDER BY 1` sorts by the
    /// first column, `ORDER BY $1` by a constant (protocol.md §1.2).
    Position,
    /// In GROUP BY: positions again, and expressions there must equal the
    /// select list's (`GROUP BY a + $2` does not match `SELECT a + $1`).
    GroupBy,
    /// In a type's modifiers or array bounds: `numeric(10,2)`, `int[3]`.
    TypeModifier,
    /// The field of `extract('epoch' FROM …)`; `extract($1 …)` is a syntax
    /// error (protocol.md §1.2).
    ExtractField,
    /// At the start of the statement or after `)`, `::` or `.`: not a place
    /// where the lexer knows a value may stand.
    Operand,
}

/// A literal kept in the text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Kept {
    pub start: u32,
    pub end: u32,
    pub why: KeepReason,
}

impl Kept {
    pub fn span(&self) -> Range<usize> {
        self.start as usize..self.end as usize
    }
}

/// Why a query is not lexed: it then passes through unchanged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
pub enum Unsupported {
    #[error("no statement")]
    Empty,
    #[error("more than one statement")]
    MultipleStatements,
    #[error("the query already has $n parameters")]
    HasParameters,
    #[error("unterminated string, quoted identifier or comment")]
    Unterminated,
    #[error("unbalanced parentheses or brackets")]
    Unbalanced,
    #[error("a literal form the lexer does not take (U&'', N'', a bad escape, trailing junk)")]
    UnsupportedLiteral,
    #[error("a backslash in a string while standard_conforming_strings is off")]
    BackslashInString,
    #[error("a name of 64 bytes or more (the server truncates it with a NOTICE)")]
    LongName,
    #[error("two literals in a row")]
    AdjacentLiterals,
    #[error("a character outside the SQL the lexer knows (psql variable, backslash, ...)")]
    UnexpectedCharacter,
    #[error("a kept literal whose value depends on when it is parsed ('now', 'today', ...)")]
    TimeDependentLiteral,
    #[error("more literals than a Bind message can carry")]
    TooManyLiterals,
    #[error("query text of 4 GiB or more")]
    TooLong,
}

impl Unsupported {
    pub const ALL: [Unsupported; 13] = [
        Unsupported::Empty,
        Unsupported::MultipleStatements,
        Unsupported::HasParameters,
        Unsupported::Unterminated,
        Unsupported::Unbalanced,
        Unsupported::UnsupportedLiteral,
        Unsupported::BackslashInString,
        Unsupported::LongName,
        Unsupported::AdjacentLiterals,
        Unsupported::UnexpectedCharacter,
        Unsupported::TimeDependentLiteral,
        Unsupported::TooManyLiterals,
        Unsupported::TooLong,
    ];

    /// A stable label for stats and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Unsupported::Empty => "empty",
            Unsupported::MultipleStatements => "multiple_statements",
            Unsupported::HasParameters => "has_parameters",
            Unsupported::Unterminated => "unterminated",
            Unsupported::Unbalanced => "unbalanced",
            Unsupported::UnsupportedLiteral => "unsupported_literal",
            Unsupported::BackslashInString => "backslash_in_string",
            Unsupported::LongName => "long_name",
            Unsupported::AdjacentLiterals => "adjacent_literals",
            Unsupported::UnexpectedCharacter => "unexpected_character",
            Unsupported::TimeDependentLiteral => "time_dependent_literal",
            Unsupported::TooManyLiterals => "too_many_literals",
            Unsupported::TooLong => "too_long",
        }
    }
}

/// Session settings that change how text is lexed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LexOptions {
    /// The session's `standard_conforming_strings` (reported by the server).
    /// When off, a backslash in a plain `'…'` is an escape and draws a
    /// WARNING, so a query with one is not lexed (protocol.md §1.7 step 6).
    pub standard_conforming_strings: bool,
}

impl Default for LexOptions {
    fn default() -> Self {
        LexOptions { standard_conforming_strings: true }
    }
}

/// The lexer's output, reused from one query to the next.
///
/// ```
/// use pglane::prepare::lexer::{LexOptions, Lexed};
///
/// let sql = "SELECT abalance FROM pgbench_accounts WHERE aid = 12345;";
/// let mut lexed = Lexed::new();
/// lexed.lex(sql, LexOptions::default()).unwrap();
/// assert_eq!(lexed.rewritten(sql), "SELECT abalance FROM pgbench_accounts WHERE aid = $1;");
/// assert_eq!(lexed.param_types(), &[23]);
/// assert_eq!(lexed.params().collect::<Vec<_>>(), [Some(&b"12345"[..])]);
/// ```
#[derive(Debug, Clone)]
pub struct Lexed {
    seed: u64,
    shape_hash: u64,
    slots: Vec<Slot>,
    param_types: Vec<u32>,
    /// The slots' values, one after the other.
    values: Vec<u8>,
    kept: Vec<Kept>,
    /// Scratch: the open parentheses and brackets.
    frames: Vec<Frame>,
    /// The tokens, when [`Lexed::lex_tokens`] records them.
    tokens: Vec<Token>,
    /// Texts [`Lexed::lex`] lexed lately, with their lexing: the next text
    /// of one of their shapes is read again from it (`relex.rs`).
    templates: Templates,
    /// The template holding the last [`Lexed::lex`]'s lexing and rewritten
    /// text: the one it read its text again from, or kept it in.
    last: Option<usize>,
    /// The last [`Lexed::lex`] read its text again from a template.
    read_again: bool,
    /// The rewritten text of a text not kept as a template.
    rewritten: String,
}

impl Lexed {
    /// The bytes its buffers hold (the literal values of the largest query
    /// it lexed, mostly).
    pub fn retained_bytes(&self) -> usize {
        use std::mem::size_of;
        self.slots.capacity() * size_of::<Slot>()
            + self.param_types.capacity() * size_of::<u32>()
            + self.values.capacity()
            + self.kept.capacity() * size_of::<Kept>()
            + self.frames.capacity() * size_of::<Frame>()
            + self.tokens.capacity() * size_of::<Token>()
            + self.templates.retained_bytes()
            + self.rewritten.capacity()
    }
}

impl Default for Lexed {
    fn default() -> Self {
        Lexed::new()
    }
}

/// The seed of the shape hashes of this thread's relays: random, drawn once
/// per thread. A shard is one thread, so the hashes of all its clients agree
/// (they key its pools' shape caches, `prepare::auto::Shapes`), and no
/// client knows the seed to make its queries' hashes collide with others'
/// shapes (every entry of a hash is compared in full, so a collision costs
/// time, not a wrong statement).
pub fn shard_seed() -> u64 {
    thread_local! {
        static SEED: u64 = rand::random();
    }
    SEED.with(|seed| *seed)
}

impl Lexed {
    pub fn new() -> Lexed {
        Lexed::with_seed(0x243f_6a88_85a3_08d3)
    }

    /// A lexer whose shape hashes are keyed as this thread's relays key
    /// theirs ([`shard_seed`]): for whatever looks up or fills a shard's
    /// shape cache.
    pub fn for_this_shard() -> Lexed {
        Lexed::with_seed(shard_seed())
    }

    /// A lexer whose shape hashes are keyed by `seed`. A relay that shares
    /// shapes between clients should pick a random seed per shard, so that no
    /// client can craft a query whose hash collides with another's shape.
    pub fn with_seed(seed: u64) -> Lexed {
        Lexed {
            seed,
            shape_hash: 0,
            slots: Vec::new(),
            param_types: Vec::new(),
            values: Vec::new(),
            kept: Vec::new(),
            frames: Vec::new(),
            tokens: Vec::new(),
            templates: Templates::default(),
            last: None,
            read_again: false,
            rewritten: String::new(),
        }
    }

    /// Lexes one query. On `Err` the output is empty and the query must pass
    /// through unchanged. A text that differs from one lexed lately only in
    /// its literal values is read again from that one (`relex.rs`), not
    /// scanned.
    pub fn lex(&mut self, sql: &str, options: LexOptions) -> Result<(), Unsupported> {
        let key = relex::text_key(sql.as_bytes());
        if let Some(i) = self.templates.find(key, options) {
            if self.relex(i, sql.as_bytes(), options) {
                (self.last, self.read_again) = (Some(i), true);
                return Ok(());
            }
        }
        let result = self.lex_recording::<false>(sql, options);
        self.last = match result {
            Ok(()) => self.remember(key, sql, options),
            Err(_) => None,
        };
        if result.is_ok() && self.last.is_none() {
            let mut out = std::mem::take(&mut self.rewritten);
            out.clear();
            self.write_rewritten(sql, &mut out);
            self.rewritten = out;
        }
        self.read_again = false;
        result
    }

    /// [`Lexed::lex`], recording the tokens ([`Lexed::tokens`]) as well: for
    /// the cold path only. It always scans.
    pub fn lex_tokens(&mut self, sql: &str, options: LexOptions) -> Result<(), Unsupported> {
        (self.last, self.read_again) = (None, false);
        self.lex_recording::<true>(sql, options)
    }

    /// Whether the last [`Lexed::lex`] read its text again from one lexed
    /// before (the lexer's own tests ask; callers need not know).
    #[cfg(test)]
    pub(super) fn was_read_again(&self) -> bool {
        self.read_again
    }

    /// The rewritten text ([`Lexed::write_rewritten`]) of the text the last
    /// successful [`Lexed::lex`] lexed: its template's, written once for
    /// every text of its shape, or one written for a text too long to keep.
    pub fn rewritten_of_last(&self) -> &str {
        match self.last {
            Some(i) => self.templates.rewritten(i),
            None => &self.rewritten,
        }
    }

    /// One scanner per `RECORD`, so that [`Lexed::lex`] has no trace of
    /// the recording.
    fn lex_recording<const RECORD: bool>(&mut self, sql: &str, options: LexOptions) -> Result<(), Unsupported> {
        self.clear();
        if u32::try_from(sql.len()).is_err() {
            return Err(Unsupported::TooLong);
        }
        let result = Scanner::<RECORD>::new(sql.as_bytes(), options, self).run();
        if result.is_err() {
            self.clear();
        }
        result
    }

    /// The tokens of the last [`Lexed::lex_tokens`], in text order.
    pub fn tokens(&self) -> &[Token] {
        &self.tokens
    }

    fn clear(&mut self) {
        self.shape_hash = 0;
        self.tokens.clear();
        self.slots.clear();
        self.param_types.clear();
        self.values.clear();
        self.kept.clear();
        self.frames.clear();
    }

    /// The hash of the query's shape: equal for queries that differ only in
    /// the values of their slots, whitespace, comments, the case of unquoted
    /// words and a trailing `;`.
    pub fn shape_hash(&self) -> u64 {
        self.shape_hash
    }

    /// The literals that become `$1..$n`, in text order.
    pub fn slots(&self) -> &[Slot] {
        &self.slots
    }

    /// The literals kept in the text, in text order.
    pub fn kept(&self) -> &[Kept] {
        &self.kept
    }

    /// The parameter types to declare in Parse, one per slot.
    pub fn param_types(&self) -> &[u32] {
        &self.param_types
    }

    /// Slot `i`'s value in text format, as PostgreSQL reads the literal: a
    /// string's content with its escapes resolved, a number's text with its
    /// sign, a bit string as `b101` / `x1F` (what `bit_in` takes).
    #[inline]
    pub fn value(&self, i: usize) -> &[u8] {
        let (start, end) = self.slots[i].value;
        &self.values[start as usize..end as usize]
    }

    /// The Bind parameters (text format, never NULL), in the shape
    /// [`crate::protocol::frontend::bind`] takes.
    pub fn params(&self) -> impl ExactSizeIterator<Item = Option<&[u8]>> + '_ {
        self.slots.iter().map(|slot| Some(&self.values[slot.value.0 as usize..slot.value.1 as usize]))
    }
}

#[cfg(test)]
mod tests;
