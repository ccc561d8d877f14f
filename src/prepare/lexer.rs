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

use std::fmt::Write as _;
use std::ops::Range;

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

/// A token of the statement as its shape sees it, recorded only by
/// [`Lexed::lex_tokens`] (the cold path: a second spelling of a shape, and
/// error positions in it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Token {
    pub start: u32,
    pub end: u32,
    pub class: TokenClass,
}

/// What a [`Token`] is, as far as comparing two spellings goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenClass {
    /// An unquoted identifier or keyword: PostgreSQL folds its ASCII letters
    /// to lower case (and only those: in a UTF-8 database nothing else).
    Word,
    /// These three byte for byte: a quoted identifier, an operator or
    /// punctuation, a literal kept in the text.
    Quoted,
    Operator,
    Kept,
    /// A literal that becomes a parameter of this type.
    Slot(u32),
}

/// Whether two texts, with the tokens [`Lexed::lex_tokens`] recorded for
/// them, are the same statement to PostgreSQL up to their slots' values:
/// the same tokens in the same order, unquoted words equal but for ASCII
/// case, everything else byte for byte, slots of the same parameter types.
/// Whitespace, comments and a trailing `;` are not tokens.
pub fn same_tokens(a_sql: &str, a: &[Token], b_sql: &str, b: &[Token]) -> bool {
    fn text<'s>(sql: &'s str, t: &Token) -> Option<&'s [u8]> {
        sql.as_bytes().get(t.start as usize..t.end as usize)
    }
    a.len() == b.len()
        && a.iter().zip(b).all(|(x, y)| {
            x.class == y.class
                && match x.class {
                    TokenClass::Slot(_) => true,
                    TokenClass::Word => text(a_sql, x).zip(text(b_sql, y)).is_some_and(|(p, q)| p.eq_ignore_ascii_case(q)),
                    TokenClass::Quoted | TokenClass::Operator | TokenClass::Kept => {
                        text(a_sql, x).is_some_and(|p| text(b_sql, y) == Some(p))
                    }
                }
        })
}

/// Maps a character position (1-based, as PostgreSQL counts) in `from_sql`
/// to the same place in `to_sql`, two spellings whose tokens are the same
/// ([`same_tokens`]): the same character of the same token, or, between
/// tokens, the start of the next one.
pub fn same_place(from_sql: &str, from: &[Token], to_sql: &str, to: &[Token], position: usize) -> Option<usize> {
    let byte = from_sql.char_indices().nth(position.checked_sub(1)?).map_or(from_sql.len(), |(i, _)| i);
    let k = from.iter().position(|t| byte < t.end as usize)?;
    let token = from[k];
    let target = to.get(k)?;
    let offset = from_sql.get(token.start as usize..byte.max(token.start as usize))?.chars().count();
    let start = to_sql.get(..target.start as usize)?.chars().count();
    let width = to_sql.get(target.start as usize..target.end as usize)?.chars().count();
    Some(start + offset.min(width.saturating_sub(1)) + 1)
}

/// Whether the queries `a` and `b` (each lexed with its session's options)
/// are the same statement up to their slots' values ([`same_tokens`]); false
/// if either is not lexed. The cold path: it lexes both.
pub fn same_statement(a: &str, a_options: LexOptions, b: &str, b_options: LexOptions) -> bool {
    let (mut x, mut y) = (Lexed::new(), Lexed::new());
    x.lex_tokens(a, a_options).is_ok() && y.lex_tokens(b, b_options).is_ok() && same_tokens(a, x.tokens(), b, y.tokens())
}

/// An error position (1-based, in characters) in the statement rewritten
/// from query `from`, as a position in `to`, another spelling of the same
/// statement ([`same_statement`]); None if they are not.
pub fn respelled_position(
    from: &str,
    from_options: LexOptions,
    to: &str,
    to_options: LexOptions,
    position: usize,
) -> Option<usize> {
    let (mut x, mut y) = (Lexed::new(), Lexed::new());
    x.lex_tokens(from, from_options).ok()?;
    y.lex_tokens(to, to_options).ok()?;
    if !same_tokens(from, x.tokens(), to, y.tokens()) {
        return None;
    }
    same_place(from, x.tokens(), to, y.tokens(), x.original_position(from, position))
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
}

impl Default for Lexed {
    fn default() -> Self {
        Lexed::new()
    }
}

impl Lexed {
    pub fn new() -> Lexed {
        Lexed::with_seed(0x243f_6a88_85a3_08d3)
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
        }
    }

    /// Lexes one query. On `Err` the output is empty and the query must pass
    /// through unchanged.
    pub fn lex(&mut self, sql: &str, options: LexOptions) -> Result<(), Unsupported> {
        self.lex_recording::<false>(sql, options)
    }

    /// [`Lexed::lex`], recording the tokens ([`Lexed::tokens`]) as well: for
    /// the cold path only.
    pub fn lex_tokens(&mut self, sql: &str, options: LexOptions) -> Result<(), Unsupported> {
        self.lex_recording::<true>(sql, options)
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
    pub fn value(&self, i: usize) -> &[u8] {
        let (start, end) = self.slots[i].value;
        &self.values[start as usize..end as usize]
    }

    /// The Bind parameters (text format, never NULL), in the shape
    /// [`crate::protocol::frontend::bind`] takes.
    pub fn params(&self) -> impl ExactSizeIterator<Item = Option<&[u8]>> + '_ {
        self.slots.iter().map(|slot| Some(&self.values[slot.value.0 as usize..slot.value.1 as usize]))
    }

    /// Appends the statement to prepare: `sql` (the text that was lexed) with
    /// each slot replaced by `$1..$n`. A space is added where `$n` would
    /// otherwise run into a neighbouring word (`SELECT'a'` → `SELECT $1`).
    pub fn write_rewritten(&self, sql: &str, out: &mut String) {
        for piece in self.pieces(sql) {
            match piece {
                Piece::Copy(range) => out.push_str(&sql[range]),
                Piece::Param { number, space_before, space_after, .. } => {
                    if space_before {
                        out.push(' ');
                    }
                    // Writing to a String cannot fail.
                    let _ = write!(out, "${number}");
                    if space_after {
                        out.push(' ');
                    }
                }
            }
        }
    }

    /// [`Lexed::write_rewritten`] into a new string (the miss path).
    pub fn rewritten(&self, sql: &str) -> String {
        let mut out = String::with_capacity(sql.len() + 2 * self.slots.len());
        self.write_rewritten(sql, &mut out);
        out
    }

    /// Maps an error position in the rewritten text back to `sql`, the text
    /// that was lexed. Positions are PostgreSQL's: 1-based, in characters.
    /// A position inside a `$n` points at its literal's first character.
    pub fn original_position(&self, sql: &str, position: usize) -> usize {
        let Some(mut at) = position.checked_sub(1) else { return position };
        let mut original = 0;
        for piece in self.pieces(sql) {
            let (width, span) = match &piece {
                Piece::Copy(range) => (sql[range.clone()].chars().count(), range.clone()),
                Piece::Param { number, space_before, space_after, span } => {
                    (1 + decimal_width(*number) + usize::from(*space_before) + usize::from(*space_after), span.clone())
                }
            };
            if at < width {
                return match piece {
                    Piece::Copy(_) => original + at + 1,
                    Piece::Param { .. } => original + 1,
                };
            }
            at -= width;
            original += sql[span].chars().count();
        }
        original + at + 1
    }

    /// The rewritten text as pieces: runs of `sql` copied as they are, and
    /// parameters in place of slots.
    fn pieces<'s>(&'s self, sql: &'s str) -> impl Iterator<Item = Piece> + 's {
        let bytes = sql.as_bytes();
        let copy_from = std::iter::once(0).chain(self.slots.iter().map(|slot| slot.end as usize));
        let tail = self.slots.last().map_or(0, |slot| slot.end as usize)..sql.len();
        self.slots
            .iter()
            .zip(copy_from)
            .enumerate()
            .flat_map(move |(i, (slot, from))| {
                let span = slot.span();
                [
                    Piece::Copy(from..span.start),
                    Piece::Param {
                        number: i + 1,
                        space_before: span.start > 0 && is_ident_cont(bytes[span.start - 1]),
                        space_after: bytes.get(span.end).is_some_and(|&c| is_ident_cont(c)),
                        span,
                    },
                ]
            })
            .chain(std::iter::once(Piece::Copy(tail)))
    }
}

/// A piece of the rewritten text (see [`Lexed::pieces`]).
enum Piece {
    /// These bytes of the original text, unchanged.
    Copy(Range<usize>),
    /// `$number`, in place of the literal at `span`, with a space on either
    /// side where it would otherwise run into a word.
    Param { number: usize, space_before: bool, space_after: bool, span: Range<usize> },
}

fn decimal_width(mut n: usize) -> usize {
    let mut width = 1;
    while n >= 10 {
        n /= 10;
        width += 1;
    }
    width
}

// ---------------------------------------------------------------------------
// Character classes (PostgreSQL's scan.l)
// ---------------------------------------------------------------------------

/// `ident_start`: `[A-Za-z\200-\377_]`.
#[inline]
fn is_ident_start(c: u8) -> bool {
    c.is_ascii_alphabetic() || c == b'_' || c >= 0x80
}

/// `ident_cont`: `[A-Za-z\200-\377_0-9\$]`.
#[inline]
fn is_ident_cont(c: u8) -> bool {
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
fn is_dollar_tag_cont(c: u8) -> bool {
    is_ident_start(c) || c.is_ascii_digit()
}

/// `op_chars`: `[\~\!\@\#\^\&\|\`\?\+\-\*\/\%\<\>\=]`.
#[inline]
fn is_op_char(c: u8) -> bool {
    matches!(
        c,
        b'~' | b'!' | b'@' | b'#' | b'^' | b'&' | b'|' | b'`' | b'?' | b'+' | b'-' | b'*' | b'/' | b'%' | b'<' | b'>' | b'='
    )
}

/// `space`: `[ \t\n\r\f]` (PostgreSQL 15 does not take `\v`).
#[inline]
fn is_space(c: u8) -> bool {
    matches!(c, b' ' | b'\t' | b'\n' | b'\r' | 0x0c)
}

/// The length of the operator token at the start of `run` (a maximal run of
/// operator characters), per scan.l's `{operator}` rule: it stops before a
/// `/*` or `--`, and drops trailing `+`/`-` unless it holds one of
/// ``~!@#^&|`?%`` (so `=-` is `=` then `-`).
#[inline]
fn operator_len(run: &[u8]) -> usize {
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

/// Date/time input words evaluated when the literal is parsed: kept inline in
/// a cached statement, their value would freeze (protocol.md §1.3).
fn is_time_dependent(value: &[u8]) -> bool {
    const WORDS: [&[u8]; 4] = [b"now", b"today", b"tomorrow", b"yesterday"];
    WORDS.iter().any(|word| contains_ignore_ascii_case(value, word))
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

// ---------------------------------------------------------------------------
// Keywords the lexer acts on (all others are plain words)
// ---------------------------------------------------------------------------

/// Declares [`Kw`] and its lookup: a word (at most 16 bytes) is packed,
/// lowercased, into a `u128` and matched against the packed keywords, one
/// integer `match` instead of a string comparison per keyword.
macro_rules! keywords {
    ($($word:literal => $kw:ident,)*) => {
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        enum Kw {
            None,
            /// `ON` right after `DISTINCT`: the next `(` holds ORDER BY-like items.
            DistinctOn,
            $($kw,)*
        }

        #[allow(non_upper_case_globals)]
        mod packed {
            $(pub const $kw: u128 = super::pack($word);)*
        }

        impl Kw {
            #[inline(always)]
            fn lookup(word: &[u8]) -> Kw {
                match pack_lowercase(word) {
                    $(packed::$kw => Kw::$kw,)*
                    _ => Kw::None,
                }
            }
        }
    };
}

keywords! {
    b"all" => All,
    b"and" => And,
    b"as" => As,
    b"asymmetric" => Asymmetric,
    b"between" => Between,
    b"by" => By,
    b"case" => Case,
    b"character" => Character,
    b"day" => Day,
    b"distinct" => Distinct,
    b"else" => Else,
    b"escape" => Escape,
    b"except" => Except,
    b"extract" => Extract,
    b"fetch" => Fetch,
    b"first" => First,
    b"for" => For,
    b"from" => From,
    b"group" => Group,
    b"groups" => Groups,
    b"having" => Having,
    b"hour" => Hour,
    b"ilike" => Ilike,
    b"in" => In,
    b"intersect" => Intersect,
    b"like" => Like,
    b"limit" => Limit,
    b"materialized" => Materialized,
    b"minute" => Minute,
    b"month" => Month,
    b"next" => Next,
    b"not" => Not,
    b"offset" => Offset,
    b"on" => On,
    b"or" => Or,
    b"order" => Order,
    b"partition" => Partition,
    b"precision" => Precision,
    b"range" => Range,
    b"returning" => Returning,
    b"rows" => Rows,
    b"second" => Second,
    b"select" => Select,
    b"symmetric" => Symmetric,
    b"then" => Then,
    b"time" => Time,
    b"to" => To,
    b"union" => Union,
    b"values" => Values,
    b"varying" => Varying,
    b"when" => When,
    b"where" => Where,
    b"window" => Window,
    b"with" => With,
    b"without" => Without,
    b"year" => Year,
    b"zone" => Zone,
}

/// A keyword's bytes, little-endian in a `u128` (zero-padded).
const fn pack(word: &[u8]) -> u128 {
    let mut packed = 0;
    let mut i = 0;
    while i < word.len() {
        packed |= (word[i] as u128) << (8 * i);
        i += 1;
    }
    packed
}

/// [`pack`] of a word ASCII-lowercased, read with overlapping loads rather
/// than a byte loop; 0 (no keyword) if longer than 16 bytes.
#[inline]
fn pack_lowercase(word: &[u8]) -> u128 {
    let len = word.len();
    let packed = match len {
        0 => return 0,
        1..=3 => {
            u128::from(word[0]) | u128::from(word[len / 2]) << (8 * (len / 2)) | u128::from(word[len - 1]) << (8 * (len - 1))
        }
        4..=8 => {
            let first = u32::from_le_bytes(word[..4].try_into().expect("4 bytes"));
            let last = u32::from_le_bytes(word[len - 4..].try_into().expect("4 bytes"));
            u128::from(first) | u128::from(last) << (8 * (len - 4))
        }
        9..=16 => {
            let first = u64::from_le_bytes(word[..8].try_into().expect("8 bytes"));
            let last = u64::from_le_bytes(word[len - 8..].try_into().expect("8 bytes"));
            u128::from(first) | u128::from(last) << (8 * (len - 8))
        }
        _ => return 0,
    };
    u128::from(lowercase_word(packed as u64)) | u128::from(lowercase_word((packed >> 64) as u64)) << 64
}

impl Kw {
    /// Keywords after which an expression starts: a literal there is a value
    /// (and may become a slot), a `-` there is a unary minus. After any other
    /// word a literal is kept (`date '…'`) and a `-` subtracts.
    #[inline]
    fn starts_expression(self) -> bool {
        matches!(
            self,
            Kw::All
                | Kw::And
                | Kw::Asymmetric
                | Kw::Between
                | Kw::By
                | Kw::Case
                | Kw::Distinct
                | Kw::Else
                | Kw::Escape
                | Kw::First
                | Kw::For
                | Kw::From
                | Kw::Having
                | Kw::Ilike
                | Kw::In
                | Kw::Like
                | Kw::Limit
                | Kw::Next
                | Kw::Not
                | Kw::Offset
                | Kw::On
                | Kw::Or
                | Kw::Returning
                | Kw::Select
                | Kw::Symmetric
                | Kw::Then
                | Kw::When
                | Kw::Where
        )
    }

    /// Keywords that end an ORDER BY / GROUP BY list at their level.
    #[inline]
    fn ends_list(self) -> bool {
        matches!(
            self,
            Kw::Except
                | Kw::Fetch
                | Kw::For
                | Kw::From
                | Kw::Group
                | Kw::Groups
                | Kw::Having
                | Kw::Intersect
                | Kw::Limit
                | Kw::Offset
                | Kw::Order
                | Kw::Partition
                | Kw::Range
                | Kw::Returning
                | Kw::Rows
                | Kw::Select
                | Kw::Union
                | Kw::Values
                | Kw::Where
                | Kw::Window
        )
    }

    /// Words that continue a type name after its first word
    /// (`double precision`, `timestamp with time zone`, `interval day to second`).
    #[inline]
    fn continues_type_name(self) -> bool {
        matches!(
            self,
            Kw::Character
                | Kw::Day
                | Kw::Hour
                | Kw::Minute
                | Kw::Month
                | Kw::Precision
                | Kw::Second
                | Kw::Time
                | Kw::To
                | Kw::Varying
                | Kw::With
                | Kw::Without
                | Kw::Year
                | Kw::Zone
        )
    }
}

// ---------------------------------------------------------------------------
// Scanner state
// ---------------------------------------------------------------------------

/// The previous token, as far as the next literal or `-` cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Prev {
    Start,
    /// An identifier, a quoted identifier or a keyword after which no
    /// expression starts (`date`, `interval`, `zone`, `null`, `end`, ...).
    Word,
    /// A keyword after which an expression starts.
    Keyword(Kw),
    Operator,
    Open,
    Comma,
    Close,
    Literal,
    Cast,
    Dot,
}

impl Prev {
    /// Whether a `-` here is a unary minus.
    #[inline]
    fn before_operand(self) -> bool {
        matches!(self, Prev::Keyword(_) | Prev::Operator | Prev::Open | Prev::Comma)
    }
}

/// Where the scanner is in a type name (after `::` or `AS`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TypeName {
    None,
    /// After `::`, `AS` or `.` in a type name: a word comes next.
    ExpectWord,
    /// After a word of a type name: `(` or `[` opens its modifiers.
    AfterWord,
}

/// Which list a parenthesis level is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum List {
    None,
    /// ORDER BY, PARTITION BY, DISTINCT ON: whole literal items are kept.
    Order,
    /// GROUP BY: every literal is kept.
    Group,
}

/// One level of parentheses or brackets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Frame {
    bracket: bool,
    list: List,
    /// Type modifiers or array bounds: every literal is kept.
    typmod: bool,
    /// The parentheses of `extract(…)`.
    extract: bool,
    /// Closing it returns to [`TypeName::AfterWord`] (`timestamp(3) with time zone`).
    resume_type_name: bool,
}

impl Frame {
    const ROOT: Frame = Frame { bracket: false, list: List::None, typmod: false, extract: false, resume_type_name: false };
}

/// The shape hash: a folded-multiply hash (as in foldhash / rapidhash) over
/// tagged tokens, keyed by the seed.
struct ShapeHasher {
    state: u64,
    key: u64,
}

const TAG_WORD: u64 = 1;
const TAG_QUOTED: u64 = 2;
const TAG_OPERATOR: u64 = 3;
const TAG_SLOT: u64 = 4;
const TAG_KEPT: u64 = 5;

#[inline]
fn folded_multiply(a: u64, b: u64) -> u64 {
    let full = u128::from(a) * u128::from(b);
    (full as u64) ^ ((full >> 64) as u64)
}

/// ASCII-lowercases the eight bytes of a word at once.
#[inline]
fn lowercase_word(w: u64) -> u64 {
    const LOW7: u64 = 0x7f7f_7f7f_7f7f_7f7f;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    const ONES: u64 = 0x0101_0101_0101_0101;
    let low = w & LOW7;
    let at_least_a = low + ONES * (0x80 - u64::from(b'A'));
    let above_z = low + ONES * (0x7f - u64::from(b'Z'));
    let upper = at_least_a & !above_z & !w & HIGH;
    w | (upper >> 2)
}

/// 1 to 7 bytes as a word, without the memcpy and store-forwarding stall of
/// copying them into a buffer. Given the length (hashed before it), the word
/// determines the bytes: two overlapping 4-byte reads, or the first, middle
/// and last byte (as in wyhash).
#[inline]
fn load_short(bytes: &[u8]) -> u64 {
    let len = bytes.len();
    if len >= 4 {
        let first = u32::from_le_bytes(bytes[..4].try_into().expect("4 bytes"));
        let last = u32::from_le_bytes(bytes[len - 4..].try_into().expect("4 bytes"));
        u64::from(first) | u64::from(last) << 32
    } else {
        u64::from(bytes[0]) | u64::from(bytes[len / 2]) << 8 | u64::from(bytes[len - 1]) << 16
    }
}

impl ShapeHasher {
    const K0: u64 = 0x9e37_79b9_7f4a_7c15;
    const K1: u64 = 0xd6e8_feb8_6659_fd93;

    #[inline]
    fn new(seed: u64) -> ShapeHasher {
        ShapeHasher { state: seed ^ Self::K0, key: (seed.rotate_left(32) ^ Self::K1) | 1 }
    }

    #[inline]
    fn mix(&mut self, word: u64) {
        self.state = folded_multiply(self.state ^ word, self.key);
    }

    /// A token: its tag and length, then its bytes eight at a time.
    #[inline]
    fn token(&mut self, tag: u64, bytes: &[u8], fold_case: bool) {
        let fold = |word: u64| if fold_case { lowercase_word(word) } else { word };
        self.mix(tag | (bytes.len() as u64) << 8);
        let mut chunks = bytes.chunks_exact(8);
        for chunk in &mut chunks {
            self.mix(fold(u64::from_le_bytes(chunk.try_into().expect("8 bytes"))));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            self.mix(fold(load_short(rest)));
        }
    }

    #[inline]
    fn finish(&self, slots: usize) -> u64 {
        folded_multiply(self.state ^ slots as u64, Self::K1 ^ self.key)
    }
}

/// `RECORD`: push every token to [`Lexed::tokens`].
struct Scanner<'a, const RECORD: bool> {
    sql: &'a [u8],
    pos: usize,
    options: LexOptions,
    out: &'a mut Lexed,
    hash: ShapeHasher,
    prev: Prev,
    /// The previous token's keyword (`Kw::None` for anything else).
    prev_kw: Kw,
    type_name: TypeName,
    /// A `;` ended the statement: only whitespace and comments may follow.
    ended: bool,
}

type Lex<T = ()> = Result<T, Unsupported>;

impl<'a, const RECORD: bool> Scanner<'a, RECORD> {
    fn new(sql: &'a [u8], options: LexOptions, out: &'a mut Lexed) -> Scanner<'a, RECORD> {
        let hash = ShapeHasher::new(out.seed);
        out.frames.push(Frame::ROOT);
        Scanner { sql, pos: 0, options, out, hash, prev: Prev::Start, prev_kw: Kw::None, type_name: TypeName::None, ended: false }
    }

    fn at(&self, pos: usize) -> Option<u8> {
        self.sql.get(pos).copied()
    }

    fn frame(&self) -> Frame {
        *self.out.frames.last().expect("the root frame is never popped")
    }

    fn frame_mut(&mut self) -> &mut Frame {
        self.out.frames.last_mut().expect("the root frame is never popped")
    }

    fn run(mut self) -> Lex {
        loop {
            self.skip_trivia()?;
            let Some(c) = self.at(self.pos) else { break };
            if self.ended {
                return Err(Unsupported::MultipleStatements);
            }
            match c {
                b'\'' => self.string(self.pos, self.pos, Quote::Plain)?,
                b'"' => self.quoted_identifier()?,
                b'$' => self.dollar()?,
                b'0'..=b'9' => self.number()?,
                b'.' if self.at(self.pos + 1).is_some_and(|c| c.is_ascii_digit()) => self.number()?,
                b'.' => self.dot(),
                b'(' => self.open(false),
                b'[' => self.open(true),
                b')' => self.close(false)?,
                b']' => self.close(true)?,
                b',' => self.punctuation(Prev::Comma),
                b';' => self.semicolon()?,
                b':' => self.colon()?,
                c if is_op_char(c) => self.operator()?,
                c if is_ident_start(c) => self.word()?,
                _ => return Err(Unsupported::UnexpectedCharacter),
            }
        }
        if self.out.frames.len() != 1 {
            return Err(Unsupported::Unbalanced);
        }
        if self.prev == Prev::Start {
            return Err(Unsupported::Empty);
        }
        self.out.shape_hash = self.hash.finish(self.out.slots.len());
        Ok(())
    }

    /// Skips whitespace, `--` comments and nested `/* */` comments.
    fn skip_trivia(&mut self) -> Lex {
        loop {
            match self.at(self.pos) {
                Some(c) if is_space(c) => self.pos += 1,
                Some(b'-') if self.at(self.pos + 1) == Some(b'-') => self.pos = self.line_end(self.pos),
                Some(b'/') if self.at(self.pos + 1) == Some(b'*') => {
                    self.pos = self.block_comment_end(self.pos).ok_or(Unsupported::Unterminated)?;
                }
                _ => return Ok(()),
            }
        }
    }

    /// Where a `--` comment starting at `pos` ends (at its newline, or the end).
    fn line_end(&self, pos: usize) -> usize {
        self.sql[pos..].iter().position(|&c| c == b'\n' || c == b'\r').map_or(self.sql.len(), |n| pos + n)
    }

    /// One past the end of the nested `/* */` comment starting at `pos`.
    fn block_comment_end(&self, pos: usize) -> Option<usize> {
        let mut depth = 0usize;
        let mut p = pos;
        while p + 1 < self.sql.len() {
            match (self.sql[p], self.sql[p + 1]) {
                (b'/', b'*') => {
                    depth += 1;
                    p += 2;
                }
                (b'*', b'/') => {
                    depth -= 1;
                    p += 2;
                    if depth == 0 {
                        return Some(p);
                    }
                }
                _ => p += 1,
            }
        }
        None
    }

    /// The position of the next token after `pos` (the end if none, or if an
    /// unterminated comment follows: the main loop reports that one).
    fn next_token(&self, mut pos: usize) -> usize {
        loop {
            match self.at(pos) {
                Some(c) if is_space(c) => pos += 1,
                Some(b'-') if self.at(pos + 1) == Some(b'-') => pos = self.line_end(pos),
                Some(b'/') if self.at(pos + 1) == Some(b'*') => match self.block_comment_end(pos) {
                    Some(end) => pos = end,
                    None => return self.sql.len(),
                },
                _ => return pos,
            }
        }
    }

    /// Records the token `start..end` if [`Lexed::lex_tokens`] asked
    /// (nothing at all in [`Lexed::lex`]'s scanner).
    #[inline(always)]
    fn record(&mut self, class: TokenClass, start: usize, end: usize) {
        if RECORD {
            self.out.tokens.push(Token { start: start as u32, end: end as u32, class });
        }
    }

    // -- punctuation --------------------------------------------------------

    fn punctuation(&mut self, prev: Prev) {
        self.hash.token(TAG_OPERATOR, &self.sql[self.pos..self.pos + 1], false);
        self.record(TokenClass::Operator, self.pos, self.pos + 1);
        self.pos += 1;
        self.prev = prev;
        self.prev_kw = Kw::None;
        self.type_name = TypeName::None;
    }

    fn dot(&mut self) {
        let in_type_name = self.type_name != TypeName::None;
        self.punctuation(Prev::Dot);
        if in_type_name {
            self.type_name = TypeName::ExpectWord;
        }
    }

    fn open(&mut self, bracket: bool) {
        let parent = self.frame();
        let after_type_word = self.type_name == TypeName::AfterWord;
        let list = if !bracket && self.prev_kw == Kw::DistinctOn {
            List::Order
        } else {
            match parent.list {
                List::Group => List::Group,
                // A parenthesised item: `ORDER BY (1)` is still position 1.
                List::Order if matches!(self.prev, Prev::Open | Prev::Comma | Prev::Keyword(Kw::By)) => List::Order,
                _ => List::None,
            }
        };
        let frame = Frame {
            bracket,
            list,
            typmod: parent.typmod || after_type_word,
            extract: !bracket && self.prev_kw == Kw::Extract,
            resume_type_name: after_type_word,
        };
        self.out.frames.push(frame);
        self.punctuation(Prev::Open);
    }

    fn close(&mut self, bracket: bool) -> Lex {
        if self.out.frames.len() == 1 || self.frame().bracket != bracket {
            return Err(Unsupported::Unbalanced);
        }
        let frame = self.out.frames.pop().expect("more than the root frame");
        self.punctuation(Prev::Close);
        if frame.resume_type_name {
            self.type_name = TypeName::AfterWord;
        }
        Ok(())
    }

    fn semicolon(&mut self) -> Lex {
        if self.out.frames.len() != 1 {
            return Err(Unsupported::Unbalanced);
        }
        if self.prev == Prev::Start {
            return Err(Unsupported::Empty);
        }
        // Not hashed: `SELECT 1` and `SELECT 1;` are one statement.
        self.pos += 1;
        self.ended = true;
        Ok(())
    }

    fn colon(&mut self) -> Lex {
        match self.at(self.pos + 1) {
            Some(b':') => {
                self.hash.token(TAG_OPERATOR, b"::", false);
                self.record(TokenClass::Operator, self.pos, self.pos + 2);
                self.pos += 2;
                self.prev = Prev::Cast;
                self.prev_kw = Kw::None;
                self.type_name = TypeName::ExpectWord;
            }
            Some(b'=') => {
                self.hash.token(TAG_OPERATOR, b":=", false);
                self.record(TokenClass::Operator, self.pos, self.pos + 2);
                self.pos += 2;
                self.prev = Prev::Operator;
                self.prev_kw = Kw::None;
                self.type_name = TypeName::None;
            }
            // A slice bound `a[1:2]`; anywhere else a lone `:` is a psql
            // variable (`:name`, `:'name'`) or a syntax error.
            _ if self.frame().bracket => self.punctuation(Prev::Operator),
            _ => return Err(Unsupported::UnexpectedCharacter),
        }
        Ok(())
    }

    fn operator(&mut self) -> Lex {
        let start = self.pos;
        let run = self.sql[start..].iter().take_while(|&&c| is_op_char(c)).count();
        let len = operator_len(&self.sql[start..start + run]);
        if len > MAX_NAME_LEN {
            return Err(Unsupported::LongName);
        }
        if len == 1 && self.sql[start] == b'-' && self.prev.before_operand() && self.negative_number(start)? {
            return Ok(());
        }
        self.hash.token(TAG_OPERATOR, &self.sql[start..start + len], false);
        self.record(TokenClass::Operator, start, start + len);
        self.pos = start + len;
        self.prev = Prev::Operator;
        self.prev_kw = Kw::None;
        self.type_name = TypeName::None;
        Ok(())
    }

    // -- words --------------------------------------------------------------

    fn word(&mut self) -> Lex {
        let start = self.pos;
        let first = self.sql[start].to_ascii_lowercase();
        match (first, self.at(start + 1), self.at(start + 2)) {
            (b'e', Some(b'\''), _) => return self.string(start, start + 1, Quote::Escape),
            (b'b', Some(b'\''), _) => return self.string(start, start + 1, Quote::Bit),
            (b'x', Some(b'\''), _) => return self.string(start, start + 1, Quote::Hex),
            // National character `N'…'` is a typed literal in disguise;
            // `U&'…'` / `U&"…"` take Unicode escapes and UESCAPE.
            (b'n', Some(b'\''), _) | (b'u', Some(b'&'), Some(b'\'' | b'"')) => return Err(Unsupported::UnsupportedLiteral),
            _ => {}
        }
        let len = self.sql[start..].iter().take_while(|&&c| is_ident_cont(c)).count();
        if len > MAX_NAME_LEN {
            return Err(Unsupported::LongName);
        }
        let word = &self.sql[start..start + len];
        self.hash.token(TAG_WORD, word, true);
        self.record(TokenClass::Word, start, start + len);
        self.pos = start + len;
        self.after_word(Kw::lookup(word));
        Ok(())
    }

    fn quoted_identifier(&mut self) -> Lex {
        let start = self.pos;
        let mut p = start + 1;
        let mut name_len = 0;
        loop {
            let quote = self.sql[p..].iter().position(|&c| c == b'"').ok_or(Unsupported::Unterminated)?;
            name_len += quote;
            p += quote + 1;
            if self.at(p) == Some(b'"') {
                name_len += 1;
                p += 1;
            } else {
                break;
            }
        }
        if name_len > MAX_NAME_LEN {
            return Err(Unsupported::LongName);
        }
        self.hash.token(TAG_QUOTED, &self.sql[start..p], false);
        self.record(TokenClass::Quoted, start, p);
        self.pos = p;
        self.after_word(Kw::None);
        Ok(())
    }

    /// State changes after a word (identifier, keyword or quoted identifier).
    fn after_word(&mut self, kw: Kw) {
        let mut kw = kw;
        self.type_name = match self.type_name {
            // `WITH x AS [NOT] MATERIALIZED (…)` is no type name.
            TypeName::ExpectWord if matches!(kw, Kw::Materialized | Kw::Not) => TypeName::None,
            TypeName::ExpectWord => TypeName::AfterWord,
            TypeName::AfterWord if kw.continues_type_name() => TypeName::AfterWord,
            _ => TypeName::None,
        };
        if self.type_name == TypeName::None {
            match kw {
                Kw::By => match self.prev_kw {
                    Kw::Order | Kw::Partition => self.frame_mut().list = List::Order,
                    Kw::Group => self.frame_mut().list = List::Group,
                    _ => {}
                },
                Kw::On if self.prev_kw == Kw::Distinct => kw = Kw::DistinctOn,
                Kw::As => self.type_name = TypeName::ExpectWord,
                kw if kw.ends_list() => self.frame_mut().list = List::None,
                _ => {}
            }
        }
        self.prev = if kw.starts_expression() { Prev::Keyword(kw) } else { Prev::Word };
        self.prev_kw = kw;
    }

    // -- literals -----------------------------------------------------------

    fn number(&mut self) -> Lex {
        let start = self.pos;
        let (end, fractional) = self.scan_number(start)?;
        let value_start = self.out.values.len();
        self.out.values.extend_from_slice(&self.sql[start..end]);
        self.pos = end;
        let kind = classify_number(&self.sql[start..end], fractional, false);
        self.literal(start, end, kind, false, value_start)
    }

    /// A unary `-` at `minus` before a number: folded into the constant
    /// unless a cast or subscript binds to the number first (`-5::text` is
    /// `-(5::text)`). Returns whether it folded.
    fn negative_number(&mut self, minus: usize) -> Lex<bool> {
        let digits = self.next_token(minus + 1);
        let starts_number = match self.at(digits) {
            Some(c) if c.is_ascii_digit() => true,
            Some(b'.') => self.at(digits + 1).is_some_and(|c| c.is_ascii_digit()),
            _ => false,
        };
        if !starts_number {
            return Ok(false);
        }
        let (end, fractional) = self.scan_number(digits)?;
        let after = self.next_token(end);
        if self.sql[after..].starts_with(b"::") || self.at(after) == Some(b'[') {
            return Ok(false);
        }
        let value_start = self.out.values.len();
        self.out.values.push(b'-');
        self.out.values.extend_from_slice(&self.sql[digits..end]);
        self.pos = end;
        let kind = classify_number(&self.sql[digits..end], fractional, true);
        self.literal(minus, end, kind, true, value_start)?;
        Ok(true)
    }

    /// `digits[.digits][e[+-]digits]` or `.digits[…]` at `start`; returns its
    /// end and whether it has a `.` or an exponent. Trailing junk (`1abc`,
    /// `0x1F`, `1_000`, `1..2`, `1.2.3`) is refused: PostgreSQL 15 rejects it
    /// or reads it differently from 16.
    fn scan_number(&self, start: usize) -> Lex<(usize, bool)> {
        let digits = |p: usize| self.sql[p..].iter().take_while(|c| c.is_ascii_digit()).count();
        let mut p = start + digits(start);
        let mut fractional = false;
        if self.at(p) == Some(b'.') {
            if self.at(p + 1) == Some(b'.') {
                return Err(Unsupported::UnsupportedLiteral);
            }
            p += 1;
            p += digits(p);
            fractional = true;
        }
        if matches!(self.at(p), Some(b'e' | b'E')) {
            let mut q = p + 1;
            if matches!(self.at(q), Some(b'+' | b'-')) {
                q += 1;
            }
            let exponent = digits(q);
            if exponent == 0 {
                return Err(Unsupported::UnsupportedLiteral);
            }
            p = q + exponent;
            fractional = true;
        }
        match self.at(p) {
            Some(c) if is_ident_cont(c) || c == b'.' => Err(Unsupported::UnsupportedLiteral),
            _ => Ok((p, fractional)),
        }
    }

    /// A quoted string whose opening quote is at `quote` (`start` is its
    /// prefix letter, if any), with PostgreSQL's continuation rule: quoted
    /// parts separated by whitespace holding a newline are one literal.
    fn string(&mut self, start: usize, quote: usize, kind: Quote) -> Lex {
        let value_start = self.out.values.len();
        match kind {
            Quote::Bit => self.out.values.push(b'b'),
            Quote::Hex => self.out.values.push(b'x'),
            Quote::Plain | Quote::Escape => {}
        }
        let mut raw_bytes = false;
        let mut p = quote + 1;
        loop {
            p = match kind {
                Quote::Escape => self.escape_part(p, &mut raw_bytes)?,
                Quote::Plain | Quote::Bit | Quote::Hex => self.plain_part(p, kind == Quote::Plain)?,
            };
            match self.continuation(p) {
                Some(next_quote) => p = next_quote + 1,
                None => break,
            }
        }
        // Octal and hex escapes can make bytes the server refuses
        // ("invalid byte sequence"), including NUL.
        if raw_bytes {
            let value = &self.out.values[value_start..];
            if value.contains(&0) || std::str::from_utf8(value).is_err() {
                return Err(Unsupported::UnsupportedLiteral);
            }
        }
        self.pos = p;
        let kind = match kind {
            Quote::Plain => LiteralKind::String,
            Quote::Escape => LiteralKind::EscapeString,
            Quote::Bit => LiteralKind::BitString,
            Quote::Hex => LiteralKind::HexString,
        };
        self.literal(start, p, kind, false, value_start)
    }

    /// The rest of a `'…'` part from `p`; returns the position after its
    /// closing quote. In `B'…'` and `X'…'` a `''` ends the literal.
    fn plain_part(&mut self, mut p: usize, doubled_quotes: bool) -> Lex<usize> {
        loop {
            let len = self.sql[p..].iter().position(|&c| c == b'\'').ok_or(Unsupported::Unterminated)?;
            let part = &self.sql[p..p + len];
            if doubled_quotes && !self.options.standard_conforming_strings && part.contains(&b'\\') {
                return Err(Unsupported::BackslashInString);
            }
            self.out.values.extend_from_slice(part);
            p += len + 1;
            if doubled_quotes && self.at(p) == Some(b'\'') {
                self.out.values.push(b'\'');
                p += 1;
            } else {
                return Ok(p);
            }
        }
    }

    /// The rest of an `E'…'` part from `p`, resolving backslash escapes as
    /// scan.l does; returns the position after its closing quote.
    fn escape_part(&mut self, mut p: usize, raw_bytes: &mut bool) -> Lex<usize> {
        loop {
            let len = self.sql[p..].iter().position(|&c| c == b'\'' || c == b'\\').ok_or(Unsupported::Unterminated)?;
            self.out.values.extend_from_slice(&self.sql[p..p + len]);
            p += len;
            if self.sql[p] == b'\'' {
                if self.at(p + 1) == Some(b'\'') {
                    self.out.values.push(b'\'');
                    p += 2;
                    continue;
                }
                return Ok(p + 1);
            }
            let escaped = self.at(p + 1).ok_or(Unsupported::Unterminated)?;
            p += 2;
            match escaped {
                b'b' => self.out.values.push(0x08),
                b'f' => self.out.values.push(0x0c),
                b'n' => self.out.values.push(b'\n'),
                b'r' => self.out.values.push(b'\r'),
                b't' => self.out.values.push(b'\t'),
                b'0'..=b'7' => {
                    let digits = 1 + self.sql[p..].iter().take(2).take_while(|c| matches!(c, b'0'..=b'7')).count();
                    let code = parse_radix(&self.sql[p - 1..p - 1 + digits], 8);
                    // scan.l stores `(unsigned char) strtoul(…, 8)`.
                    self.out.values.push(code as u8);
                    p += digits - 1;
                    *raw_bytes = true;
                }
                b'x' if self.at(p).is_some_and(|c| c.is_ascii_hexdigit()) => {
                    let digits = self.sql[p..].iter().take(2).take_while(|c| c.is_ascii_hexdigit()).count();
                    self.out.values.push(parse_radix(&self.sql[p..p + digits], 16) as u8);
                    p += digits;
                    *raw_bytes = true;
                }
                b'u' | b'U' => {
                    let digits = if escaped == b'u' { 4 } else { 8 };
                    let hex = self.sql.get(p..p + digits).ok_or(Unsupported::UnsupportedLiteral)?;
                    if !hex.iter().all(u8::is_ascii_hexdigit) {
                        return Err(Unsupported::UnsupportedLiteral);
                    }
                    // Surrogate pairs and NUL are refused rather than combined.
                    let c = char::from_u32(parse_radix(hex, 16)).filter(|&c| c != '\0').ok_or(Unsupported::UnsupportedLiteral)?;
                    let mut buf = [0u8; 4];
                    self.out.values.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
                    p += digits;
                }
                // Any other character stands for itself (`\'`, `\\`, `\x`
                // without hex digits); a multibyte one is copied on by the
                // next round.
                other => self.out.values.push(other),
            }
        }
    }

    /// If a quoted part ending before `p` continues (whitespace and `--`
    /// comments holding a newline, then a quote), the next quote's position.
    fn continuation(&self, mut p: usize) -> Option<usize> {
        let mut newline = false;
        loop {
            match self.at(p)? {
                b' ' | b'\t' | 0x0c => p += 1,
                b'\n' | b'\r' => {
                    newline = true;
                    p += 1;
                }
                b'-' if self.at(p + 1) == Some(b'-') => p = self.line_end(p),
                b'\'' if newline => return Some(p),
                _ => return None,
            }
        }
    }

    /// `$1` (a parameter: the query passes through) or a dollar-quoted string.
    fn dollar(&mut self) -> Lex {
        let start = self.pos;
        let tag_len = match self.at(start + 1) {
            Some(c) if c.is_ascii_digit() => return Err(Unsupported::HasParameters),
            Some(b'$') => 2,
            Some(c) if is_ident_start(c) => {
                let name = self.sql[start + 1..].iter().take_while(|&&c| is_dollar_tag_cont(c)).count();
                if self.at(start + 1 + name) != Some(b'$') {
                    return Err(Unsupported::UnexpectedCharacter);
                }
                name + 2
            }
            _ => return Err(Unsupported::UnexpectedCharacter),
        };
        let tag = &self.sql[start..start + tag_len];
        let body = start + tag_len;
        let body_len = self.sql[body..].windows(tag_len).position(|w| w == tag).ok_or(Unsupported::Unterminated)?;
        let value_start = self.out.values.len();
        self.out.values.extend_from_slice(&self.sql[body..body + body_len]);
        self.pos = body + body_len + tag_len;
        self.literal(start, self.pos, LiteralKind::DollarString, false, value_start)
    }

    /// A literal spanning `start..end`, whose value is in the value buffer
    /// from `value_start`: a slot, or kept in the text.
    fn literal(&mut self, start: usize, end: usize, kind: LiteralKind, negative: bool, value_start: usize) -> Lex {
        if self.prev == Prev::Literal {
            return Err(Unsupported::AdjacentLiterals);
        }
        match self.keep_reason(end) {
            Some(why) => {
                if !kind.is_number() && is_time_dependent(&self.out.values[value_start..]) {
                    return Err(Unsupported::TimeDependentLiteral);
                }
                self.out.values.truncate(value_start);
                self.hash.token(TAG_KEPT, &self.sql[start..end], false);
                self.record(TokenClass::Kept, start, end);
                self.out.kept.push(Kept { start: start as u32, end: end as u32, why });
            }
            None => {
                if self.out.slots.len() == MAX_SLOTS {
                    return Err(Unsupported::TooManyLiterals);
                }
                let param_type = kind.param_type();
                self.hash.mix(TAG_SLOT | u64::from(param_type) << 8);
                self.record(TokenClass::Slot(param_type), start, end);
                self.out.slots.push(Slot {
                    start: start as u32,
                    end: end as u32,
                    kind,
                    negative,
                    value: (value_start as u32, self.out.values.len() as u32),
                });
                self.out.param_types.push(param_type);
            }
        }
        self.prev = Prev::Literal;
        self.prev_kw = Kw::None;
        self.type_name = TypeName::None;
        Ok(())
    }

    /// Whether the literal ending at `end` stays in the text, given the
    /// tokens before it and the next one.
    fn keep_reason(&self, end: usize) -> Option<KeepReason> {
        let frame = self.frame();
        if frame.typmod {
            return Some(KeepReason::TypeModifier);
        }
        if frame.list == List::Group {
            return Some(KeepReason::GroupBy);
        }
        match self.prev {
            Prev::Word => return Some(KeepReason::TypedLiteral),
            Prev::Start | Prev::Close | Prev::Cast | Prev::Dot => return Some(KeepReason::Operand),
            Prev::Open if frame.extract => return Some(KeepReason::ExtractField),
            _ => {}
        }
        let list_item_start = matches!(self.prev, Prev::Open | Prev::Comma | Prev::Keyword(Kw::By));
        if frame.list == List::Order && list_item_start && self.ends_item(end) {
            return Some(KeepReason::Position);
        }
        None
    }

    /// Whether the token after `end` ends a list item (so the literal before
    /// it is the whole item): not an operator, cast, subscript, call or dot.
    fn ends_item(&self, end: usize) -> bool {
        match self.at(self.next_token(end)) {
            None => true,
            Some(c) => !(is_op_char(c) || matches!(c, b':' | b'[' | b'(' | b'.')),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Quote {
    Plain,
    Escape,
    Bit,
    Hex,
}

/// Parses ASCII digits of `radix` (already checked, at most 8 of them).
fn parse_radix(digits: &[u8], radix: u32) -> u32 {
    digits.iter().fold(0, |acc, &c| acc * radix + char::from(c).to_digit(radix).unwrap_or(0))
}

/// The kind of a number literal, as PostgreSQL types it: `.` or exponent →
/// numeric; else int4, int8 or numeric by magnitude, sign included (the
/// scanner makes `2147483648` a float string, `doNegate` and `make_const`
/// turn `-2147483648` back into an int4).
fn classify_number(text: &[u8], fractional: bool, negative: bool) -> LiteralKind {
    if fractional {
        return LiteralKind::Numeric;
    }
    let significant = &text[text.iter().take_while(|&&c| c == b'0').count()..];
    // i64::MAX has 19 digits; anything longer is numeric.
    if significant.len() > 19 {
        return LiteralKind::Numeric;
    }
    let magnitude = significant.iter().fold(0u64, |acc, &c| acc * 10 + u64::from(c - b'0'));
    let value = if negative { -i128::from(magnitude) } else { i128::from(magnitude) };
    if i32::try_from(value).is_ok() {
        LiteralKind::Int4
    } else if i64::try_from(value).is_ok() {
        LiteralKind::Int8
    } else {
        LiteralKind::Numeric
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn lex(sql: &str) -> Result<Lexed, Unsupported> {
        let mut lexed = Lexed::new();
        lexed.lex(sql, LexOptions::default())?;
        Ok(lexed)
    }

    fn lexed(sql: &str) -> Lexed {
        lex(sql).unwrap_or_else(|e| panic!("{sql:?} did not lex: {e}"))
    }

    /// The rewritten text, the declared types and the values.
    fn rewrite(sql: &str) -> (String, Vec<u32>, Vec<String>) {
        let lexed = lexed(sql);
        let values = (0..lexed.slots().len()).map(|i| String::from_utf8(lexed.value(i).to_vec()).expect("utf-8 value")).collect();
        (lexed.rewritten(sql), lexed.param_types().to_vec(), values)
    }

    fn kept(sql: &str) -> Vec<(&str, KeepReason)> {
        lexed(sql).kept().iter().map(|k| (&sql[k.span()], k.why)).collect()
    }

    fn hash(sql: &str) -> u64 {
        lexed(sql).shape_hash()
    }

    fn refused(sql: &str) -> Unsupported {
        match lex(sql) {
            Ok(lexed) => panic!("{sql:?} lexed: {:?}", lexed.slots()),
            Err(e) => e,
        }
    }

    /// The original text at an error position in the rewritten text, as
    /// PostgreSQL counts positions (1-based characters).
    fn original_at(sql: &str, rewritten_needle: &str) -> String {
        let lexed = lexed(sql);
        let rewritten = lexed.rewritten(sql);
        let byte = rewritten.find(rewritten_needle).unwrap_or_else(|| panic!("{rewritten_needle:?} not in {rewritten:?}"));
        let position = rewritten[..byte].chars().count() + 1;
        let original = lexed.original_position(sql, position);
        sql.chars().skip(original - 1).collect()
    }

    #[test]
    fn error_positions_map_back_to_the_original_text() {
        let sql = "SELECT 'héllo', 12345 + nosuch, x FROM t WHERE b = 'é' AND c = 3";
        assert!(original_at(sql, "nosuch").starts_with("nosuch, x"));
        assert!(original_at(sql, "$2").starts_with("12345 + nosuch"));
        assert!(original_at(sql, "$1").starts_with("'héllo'"));
        assert!(original_at(sql, "t WHERE").starts_with("t WHERE b = 'é'"));
        assert!(original_at(sql, "$3").starts_with("'é' AND"));
        assert!(original_at(sql, " AND c").starts_with(" AND c = 3"));
        assert_eq!(original_at(sql, "$4"), "3");
        // A space was added around `$n`: the added space maps to the literal.
        let sql = "SELECT'a'FROM t";
        assert_eq!(lexed(sql).rewritten(sql), "SELECT $1 FROM t");
        assert!(original_at(sql, " $1").starts_with("'a'FROM"));
        assert!(original_at(sql, "FROM").starts_with("FROM t"));
        // Without slots, and past the end, positions are unchanged.
        let plain = lexed("SELECT x FROM t");
        assert_eq!(plain.original_position("SELECT x FROM t", 8), 8);
        assert_eq!(plain.original_position("SELECT x FROM t", 0), 0);
    }

    #[test]
    fn pgbench_select() {
        let sql = "SELECT abalance FROM pgbench_accounts WHERE aid = 12345;";
        let (text, types, values) = rewrite(sql);
        assert_eq!(text, "SELECT abalance FROM pgbench_accounts WHERE aid = $1;");
        assert_eq!(types, [oid::INT4]);
        assert_eq!(values, ["12345"]);
        let slot = lexed(sql).slots()[0];
        assert_eq!(&sql[slot.span()], "12345");
        assert_eq!((slot.kind, slot.negative), (LiteralKind::Int4, false));
    }

    #[test]
    fn integers_by_magnitude() {
        let cases = [
            ("0", oid::INT4),
            ("007", oid::INT4),
            ("2147483647", oid::INT4),
            ("2147483648", oid::INT8),
            ("-2147483648", oid::INT4),
            ("-2147483649", oid::INT8),
            ("9223372036854775807", oid::INT8),
            ("-9223372036854775808", oid::INT8),
            ("9223372036854775808", oid::NUMERIC),
            ("-9223372036854775809", oid::NUMERIC),
            ("99999999999999999999", oid::NUMERIC),
            ("000000000000000000000000001", oid::INT4),
        ];
        for (literal, expected) in cases {
            let sql = format!("SELECT {literal}");
            let (text, types, values) = rewrite(&sql);
            assert_eq!(text, "SELECT $1", "{sql}");
            assert_eq!(types, [expected], "{sql}");
            assert_eq!(values, [literal], "{sql}");
        }
    }

    #[test]
    fn decimals_and_exponents_are_numeric() {
        for literal in ["1.5", ".5", "5.", "1e3", "1E-2", "1.5e+10", "0.0", "-1.5", "-.5"] {
            let (text, types, values) = rewrite(&format!("SELECT {literal} AS x"));
            assert_eq!(text, "SELECT $1 AS x");
            assert_eq!(types, [oid::NUMERIC], "{literal}");
            assert_eq!(values, [literal]);
        }
    }

    #[test]
    fn numbers_with_trailing_junk_are_refused() {
        for sql in [
            "SELECT 0x1F",
            "SELECT 1_000",
            "SELECT 123abc",
            "SELECT 1e",
            "SELECT 1e+",
            "SELECT 1..2",
            "SELECT 1.2.3",
            "SELECT 1$",
        ] {
            assert_eq!(refused(sql), Unsupported::UnsupportedLiteral, "{sql}");
        }
    }

    #[test]
    fn unary_minus_folds_like_do_negate() {
        // protocol.md §1.1: `-42` and `- 42` are one constant.
        let (text, types, values) = rewrite("SELECT - 42, x-1, x - -1, (-2), a[-3] FROM t WHERE y=-4 LIMIT -5");
        assert_eq!(text, "SELECT $1, x-$2, x - $3, ($4), a[$5] FROM t WHERE y=$6 LIMIT $7");
        assert_eq!(values, ["-42", "1", "-1", "-2", "-3", "-4", "-5"]);
        assert_eq!(types, [oid::INT4; 7]);
        let slots = lexed("SELECT - 42").slots().to_vec();
        assert!(slots[0].negative);
        assert_eq!(slots[0].start, 7);
    }

    #[test]
    fn a_cast_binds_before_the_minus() {
        // `-5::text` is `-(5::text)`: the constant is 5, the minus stays.
        let (text, _, values) = rewrite("SELECT -5::text, - a[1], 5 -3, -.5::numeric");
        assert_eq!(text, "SELECT -$1::text, - a[$2], $3 -$4, -$5::numeric");
        assert_eq!(values, ["5", "1", "5", "3", ".5"]);
    }

    #[test]
    fn minus_after_operand_subtracts() {
        let (text, _, values) = rewrite("SELECT CASE WHEN a THEN 1 END - 2, NULL -3, f(x) - 4");
        assert_eq!(text, "SELECT CASE WHEN a THEN $1 END - $2, NULL -$3, f(x) - $4");
        assert_eq!(values, ["1", "2", "3", "4"]);
    }

    #[test]
    fn operators_split_like_scan_l() {
        // `=-` is `=` then `-`; `@-` keeps its minus; `*/*` ends before the comment.
        let (text, _, values) = rewrite("SELECT a=-1, b@-2, c*/* c */3");
        assert_eq!(text, "SELECT a=$1, b@-$2, c*/* c */$3");
        assert_eq!(values, ["-1", "2", "3"]);
    }

    #[test]
    fn strings() {
        let (text, types, values) = rewrite("SELECT 'a', 'it''s', '', E'tab\\there', e'\\'q\\'', $$dollar 'x'$$, $tag$a$$b$tag$");
        assert_eq!(text, "SELECT $1, $2, $3, $4, $5, $6, $7");
        assert_eq!(types, [oid::UNKNOWN; 7]);
        assert_eq!(values, ["a", "it's", "", "tab\there", "'q'", "dollar 'x'", "a$$b"]);
    }

    #[test]
    fn escape_strings_resolve_like_the_server() {
        let cases = [
            (r"E'\b\f\n\r\t'", "\u{8}\u{c}\n\r\t"),
            (r"E'\101\1011'", "AA1"),
            (r"E'\x41\x4a\x4G'", "AJ\u{4}G"),
            (r"E'\x'", "x"),
            (r"E'\u00e9\U0001F600'", "é😀"),
            (r"E'\\ \q \''''", "\\ q ''"),
            ("E'caf\u{e9}\\\u{e9}'", "café\u{e9}"),
        ];
        for (literal, value) in cases {
            let (_, _, values) = rewrite(&format!("SELECT {literal}"));
            assert_eq!(values, [value], "{literal}");
        }
    }

    #[test]
    fn escapes_the_server_refuses_are_refused() {
        for sql in [
            r"SELECT E'\0'",
            r"SELECT E'\xff'",
            r"SELECT E'\u12'",
            r"SELECT E'\uD800'",
            r"SELECT E'\u0000'",
            r"SELECT E'\U0011FFFF'",
        ] {
            assert_eq!(refused(sql), Unsupported::UnsupportedLiteral, "{sql}");
        }
    }

    #[test]
    fn string_continuation_across_newlines() {
        // scan.l `quotecontinue`: whitespace with a newline (and -- comments).
        let sql = "SELECT 'a'\n  'b' -- c\n'c', E'\\t'\r'\\n', B'1'\n'0'";
        let (text, types, values) = rewrite(sql);
        assert_eq!(text, "SELECT $1, $2, $3");
        assert_eq!(values, ["abc", "\t\n", "b10"]);
        assert_eq!(types, [oid::UNKNOWN, oid::UNKNOWN, oid::BIT]);
        // Without a newline, or with a /* */ comment, two strings are two
        // literals: a syntax error for the server.
        assert_eq!(refused("SELECT 'a' 'b'"), Unsupported::AdjacentLiterals);
        assert_eq!(refused("SELECT 'a' /* x */\n'b'"), Unsupported::AdjacentLiterals);
        assert_eq!(refused("SELECT $$a$$\n'b'"), Unsupported::AdjacentLiterals);
    }

    #[test]
    fn bit_strings() {
        let (text, types, values) = rewrite("SELECT B'101', x'1F', b''");
        assert_eq!(text, "SELECT $1, $2, $3");
        assert_eq!(types, [oid::BIT; 3]);
        assert_eq!(values, ["b101", "x1F", "b"]);
        // `''` does not escape a quote in B'' / X'' strings.
        assert_eq!(refused("SELECT B'1''0'"), Unsupported::AdjacentLiterals);
    }

    #[test]
    fn unsupported_string_forms() {
        assert_eq!(refused("SELECT U&'d\\0061t'"), Unsupported::UnsupportedLiteral);
        assert_eq!(refused("SELECT u&\"x\" FROM t"), Unsupported::UnsupportedLiteral);
        assert_eq!(refused("SELECT N'abc'"), Unsupported::UnsupportedLiteral);
        // `u &'x'` is an operator, and `u&x` too.
        assert_eq!(rewrite("SELECT u &'x', u&1").0, "SELECT u &$1, u&$2");
    }

    #[test]
    fn backslashes_without_standard_conforming_strings() {
        let off = LexOptions { standard_conforming_strings: false };
        let mut lexed = Lexed::new();
        assert_eq!(lexed.lex(r"SELECT 'a\b'", off), Err(Unsupported::BackslashInString));
        lexed.lex("SELECT 'plain', E'\\n'", off).unwrap();
        assert_eq!(lexed.slots().len(), 2);
        // On (the default) a backslash is an ordinary character.
        assert_eq!(rewrite(r"SELECT 'a\'").2, [r"a\"]);
    }

    #[test]
    fn unterminated() {
        for sql in [
            "SELECT 'abc",
            "SELECT E'abc\\'",
            "SELECT $$abc$",
            "SELECT $a$ x $b$",
            "SELECT \"abc",
            "SELECT 1 /* x /* y */",
            "SELECT B'10",
        ] {
            assert_eq!(refused(sql), Unsupported::Unterminated, "{sql}");
        }
    }

    #[test]
    fn comments_and_whitespace_are_not_shape() {
        let base = hash("SELECT a FROM t WHERE b = 1");
        for sql in [
            "select A from T where B = 2",
            "SELECT a\n\tFROM t -- trailing\nWHERE b = 3",
            "SELECT /* one /* nested */ comment */ a FROM t WHERE b=4;",
            "SELECT a FROM t WHERE b = 5 ; -- done",
            "  SELECT a FROM t WHERE b = -6",
        ] {
            assert_eq!(hash(sql), base, "{sql}");
        }
        assert_eq!(rewrite("SELECT /* 'no' */ 1 -- 'nor' $1\n").0, "SELECT /* 'no' */ $1 -- 'nor' $1\n");
    }

    #[test]
    fn shapes_differ_where_statements_differ() {
        let distinct = [
            "SELECT a FROM t WHERE b = 1",
            "SELECT a FROM t WHERE b = 3000000000",
            "SELECT a FROM t WHERE b = 1.5",
            "SELECT a FROM t WHERE b = '1'",
            "SELECT a FROM t WHERE b = B'1'",
            "SELECT a FROM t WHERE b < 1",
            "SELECT a FROM t WHERE b <= 1",
            "SELECT a FROM t WHERE b < = 1",
            "SELECT a FROM t WHERE \"b\" = 1",
            "SELECT a FROM t WHERE \"B\" = 1",
            "SELECT a FROM t WHERE b = 1 ORDER BY 1",
            "SELECT a FROM t WHERE b = 1 ORDER BY 2",
            "SELECT a FROM t WHERE b = 1 AND c = 2",
            "SELECT a FROM t WHERE b = 1::int",
            "SELECT a FROM t WHERE b = date '2024-01-01'",
            "SELECT a FROM t WHERE b = date '2024-01-02'",
            "SELECT a FROM t WHERE ab = 1",
            "SELECT a FROM tw HERE b = 1",
        ];
        let hashes: std::collections::HashSet<u64> = distinct.iter().map(|sql| hash(sql)).collect();
        assert_eq!(hashes.len(), distinct.len());
        // The text of kinds of strings does not matter: they are all unknown.
        assert_eq!(hash("SELECT 'a'"), hash("SELECT E'b'"));
        assert_eq!(hash("SELECT 'a'"), hash("SELECT $x$c$x$"));
        // The seed keys the hash.
        let mut seeded = Lexed::with_seed(7);
        seeded.lex("SELECT 1", LexOptions::default()).unwrap();
        assert_ne!(seeded.shape_hash(), hash("SELECT 1"));
    }

    #[test]
    fn quoted_identifiers() {
        let sql = r#"SELECT "a""b", "select" FROM "T" WHERE "x y" = 'z'"#;
        let (text, _, values) = rewrite(sql);
        assert_eq!(text, r#"SELECT "a""b", "select" FROM "T" WHERE "x y" = $1"#);
        assert_eq!(values, ["z"]);
        // A quoted identifier is a word: a literal after it is kept.
        assert_eq!(kept(r#"SELECT "date" '2024-01-01'"#), [("'2024-01-01'", KeepReason::TypedLiteral)]);
    }

    #[test]
    fn long_names_are_refused() {
        let name = "a".repeat(64);
        assert_eq!(refused(&format!("SELECT {name}")), Unsupported::LongName);
        assert_eq!(refused(&format!("SELECT \"{name}\"")), Unsupported::LongName);
        assert!(lex(&format!("SELECT {}", "a".repeat(63))).is_ok());
        assert_eq!(refused(&format!("SELECT 1 {} 2", "<".repeat(64))), Unsupported::LongName);
    }

    #[test]
    fn casts_keep_the_type_and_replace_the_literal() {
        let (text, types, values) =
            rewrite("SELECT '2024-01-01'::date, 5::text, CAST('1.5' AS numeric), '{1,2}'::int[], 'a'::\"MyType\"");
        assert_eq!(text, "SELECT $1::date, $2::text, CAST($3 AS numeric), $4::int[], $5::\"MyType\"");
        assert_eq!(types, [oid::UNKNOWN, oid::INT4, oid::UNKNOWN, oid::UNKNOWN, oid::UNKNOWN]);
        assert_eq!(values, ["2024-01-01", "5", "1.5", "{1,2}", "a"]);
    }

    #[test]
    fn type_modifiers_are_kept() {
        let sql = "SELECT 'abc'::varchar(2), CAST(x AS numeric(10, 2)), '1'::pg_catalog.numeric(3,1)[], \
                   y::int[3], z::timestamp(3) with time zone, '5'::bit varying(8)";
        let (text, _, values) = rewrite(sql);
        assert_eq!(
            text,
            "SELECT $1::varchar(2), CAST(x AS numeric(10, 2)), $2::pg_catalog.numeric(3,1)[], \
             y::int[3], z::timestamp(3) with time zone, $3::bit varying(8)"
        );
        assert_eq!(values, ["abc", "1", "5"]);
        assert!(kept(sql).iter().all(|(_, why)| *why == KeepReason::TypeModifier));
        assert_eq!(kept(sql).len(), 8);
    }

    #[test]
    fn after_a_type_name_the_statement_goes_on() {
        // The type name ends at the first word that cannot continue it.
        let (text, _, _) = rewrite("SELECT x::int IN (1, 2), y::text || 'a', a AS b FROM f(1) AS g(c) WHERE c = 3");
        assert_eq!(text, "SELECT x::int IN ($1, $2), y::text || $3, a AS b FROM f($4) AS g(c) WHERE c = $5");
        let (text, _, _) = rewrite("WITH w AS MATERIALIZED (SELECT 1), v AS NOT MATERIALIZED (SELECT 2) SELECT 3");
        assert_eq!(text, "WITH w AS MATERIALIZED (SELECT $1), v AS NOT MATERIALIZED (SELECT $2) SELECT $3");
    }

    #[test]
    fn typed_literals_are_kept() {
        // protocol.md §1.1: `date $1` and `interval $1 hour` are syntax errors.
        let sql = "SELECT date '2024-01-01', interval '1' hour, interval '1 day', \
                   timestamp with time zone '2024-01-01 00:00+00', ts AT TIME ZONE 'UTC', int4 '5' FROM t";
        let (text, _, _) = rewrite(sql);
        assert_eq!(text, sql);
        assert_eq!(kept(sql).len(), 6);
        assert!(kept(sql).iter().all(|(_, why)| *why == KeepReason::TypedLiteral));
    }

    #[test]
    fn time_dependent_kept_literals_are_refused() {
        // protocol.md §1.3: inline, `'now'` would freeze in a cached statement.
        assert_eq!(refused("SELECT timestamptz 'now'"), Unsupported::TimeDependentLiteral);
        assert_eq!(refused("SELECT date 'Today'"), Unsupported::TimeDependentLiteral);
        assert_eq!(refused("SELECT x FROM t GROUP BY x > 'tomorrow'::date"), Unsupported::TimeDependentLiteral);
        // As a parameter it is read at each execution, as the original is.
        assert_eq!(rewrite("SELECT 'now'::timestamptz").0, "SELECT $1::timestamptz");
    }

    #[test]
    fn order_by_positions_are_kept() {
        let sql = "SELECT a, b FROM t WHERE c = 1 ORDER BY 2 DESC, (1), -1 NULLS LAST, a + 1, 'x' LIMIT 10 OFFSET 5";
        let (text, types, values) = rewrite(sql);
        assert_eq!(text, "SELECT a, b FROM t WHERE c = $1 ORDER BY 2 DESC, (1), -1 NULLS LAST, a + $2, 'x' LIMIT $3 OFFSET $4");
        assert_eq!(types, [oid::INT4; 4]);
        assert_eq!(values, ["1", "1", "10", "5"]);
        assert!(kept(sql).iter().all(|(_, why)| *why == KeepReason::Position));
    }

    #[test]
    fn order_by_expressions_are_values() {
        let (text, _, _) =
            rewrite("SELECT a FROM t ORDER BY CASE WHEN a = 'x' THEN 1 ELSE 2 END, f(3), p <-> point(4, 5), 6::int, (SELECT 7)");
        assert_eq!(
            text,
            "SELECT a FROM t ORDER BY CASE WHEN a = $1 THEN $2 ELSE $3 END, f($4), p <-> point($5, $6), $7::int, (SELECT $8)"
        );
    }

    #[test]
    fn distinct_on_and_window_lists() {
        let sql =
            "SELECT DISTINCT ON (1, a) a, rank() OVER (PARTITION BY 1 ORDER BY 2 ROWS BETWEEN 3 PRECEDING AND 4 FOLLOWING) \
                   FROM t ORDER BY 1, a";
        let (text, _, values) = rewrite(sql);
        assert_eq!(
            text,
            "SELECT DISTINCT ON (1, a) a, rank() OVER (PARTITION BY 1 ORDER BY 2 ROWS BETWEEN $1 PRECEDING AND $2 FOLLOWING) \
             FROM t ORDER BY 1, a"
        );
        assert_eq!(values, ["3", "4"]);
        // `ROWS 5 PRECEDING`: after a word the lexer keeps the literal.
        assert_eq!(kept("SELECT sum(x) OVER (ORDER BY y ROWS 5 PRECEDING) FROM t")[0].1, KeepReason::TypedLiteral);
    }

    #[test]
    fn group_by_keeps_every_literal() {
        let sql = "SELECT date_trunc('day', ts), count(*) FROM t WHERE x > 5 \
                   GROUP BY 1, date_trunc('day', ts), ROLLUP (2) HAVING count(*) > 10 ORDER BY 1";
        let (text, _, values) = rewrite(sql);
        assert_eq!(
            text,
            "SELECT date_trunc($1, ts), count(*) FROM t WHERE x > $2 \
             GROUP BY 1, date_trunc('day', ts), ROLLUP (2) HAVING count(*) > $3 ORDER BY 1"
        );
        assert_eq!(values, ["day", "5", "10"]);
        let reasons: Vec<KeepReason> = kept(sql).iter().map(|k| k.1).collect();
        assert_eq!(reasons, [KeepReason::GroupBy, KeepReason::GroupBy, KeepReason::GroupBy, KeepReason::Position]);
    }

    #[test]
    fn lists_end_at_their_parenthesis() {
        let (text, _, _) =
            rewrite("SELECT (SELECT a FROM t ORDER BY 1 LIMIT 1), 2 FROM u WHERE v IN (SELECT w FROM x GROUP BY w) AND y = 3");
        assert_eq!(
            text,
            "SELECT (SELECT a FROM t ORDER BY 1 LIMIT $1), $2 FROM u WHERE v IN (SELECT w FROM x GROUP BY w) AND y = $3"
        );
        let (text, _, _) = rewrite("SELECT array_agg(a ORDER BY 1), 2 FROM t");
        assert_eq!(text, "SELECT array_agg(a ORDER BY 1), $1 FROM t");
    }

    #[test]
    fn extract_fields_are_kept() {
        let (text, _, _) = rewrite("SELECT extract('epoch' FROM ts), EXTRACT(day FROM ts), date_part('year', ts) FROM t");
        assert_eq!(text, "SELECT extract('epoch' FROM ts), EXTRACT(day FROM ts), date_part($1, ts) FROM t");
        assert_eq!(kept("SELECT extract('epoch' FROM ts)")[0].1, KeepReason::ExtractField);
    }

    #[test]
    fn null_and_booleans_stay_in_the_shape() {
        let (text, types, _) = rewrite("SELECT NULL, true, FALSE, 1 IS NULL, x IS NOT TRUE FROM t");
        assert_eq!(text, "SELECT NULL, true, FALSE, $1 IS NULL, x IS NOT TRUE FROM t");
        assert_eq!(types, [oid::INT4]);
        assert_ne!(hash("SELECT true"), hash("SELECT false"));
    }

    #[test]
    fn dml() {
        let (text, types, values) =
            rewrite("INSERT INTO t (a, b, c) VALUES (1, 'x', 2.5), (-2, E'y', NULL) ON CONFLICT (a) DO UPDATE SET b = 'z' RETURNING a, 'r'");
        assert_eq!(
            text,
            "INSERT INTO t (a, b, c) VALUES ($1, $2, $3), ($4, $5, NULL) ON CONFLICT (a) DO UPDATE SET b = $6 RETURNING a, $7"
        );
        assert_eq!(types, [oid::INT4, 0, oid::NUMERIC, oid::INT4, 0, 0, 0]);
        assert_eq!(values, ["1", "x", "2.5", "-2", "y", "z", "r"]);
        let (text, _, _) = rewrite("UPDATE t SET a = a + 1, b = DEFAULT WHERE c BETWEEN 2 AND 3 AND d LIKE 'x%' ESCAPE '!'");
        assert_eq!(text, "UPDATE t SET a = a + $1, b = DEFAULT WHERE c BETWEEN $2 AND $3 AND d LIKE $4 ESCAPE $5");
        let (text, _, _) = rewrite("DELETE FROM t WHERE id IN (1, 2, 3) OR name IS DISTINCT FROM 'x'");
        assert_eq!(text, "DELETE FROM t WHERE id IN ($1, $2, $3) OR name IS DISTINCT FROM $4");
    }

    #[test]
    fn arrays_jsonb_and_slices() {
        let (text, types, _) = rewrite("SELECT ARRAY[1, 2], a[1:2], a[3], j ->> 'k', j @> '{\"a\": 1}', j ? 'x', f(a := 4)");
        assert_eq!(text, "SELECT ARRAY[$1, $2], a[$3:$4], a[$5], j ->> $6, j @> $7, j ? $8, f(a := $9)");
        assert_eq!(types, [23, 23, 23, 23, 23, 0, 0, 0, 23]);
    }

    #[test]
    fn ctes_and_set_operations() {
        let (text, _, _) = rewrite(
            "WITH RECURSIVE r(n) AS (VALUES (1) UNION ALL SELECT n + 1 FROM r WHERE n < 100) SELECT sum(n) FROM r \
             UNION SELECT 'a' EXCEPT SELECT 2",
        );
        assert_eq!(
            text,
            "WITH RECURSIVE r(n) AS (VALUES ($1) UNION ALL SELECT n + $2 FROM r WHERE n < $3) SELECT sum(n) FROM r \
             UNION SELECT $4 EXCEPT SELECT $5"
        );
    }

    #[test]
    fn fetch_first_and_offset_rows() {
        let (text, _, _) = rewrite("SELECT a FROM t OFFSET 5 ROWS FETCH FIRST 10 ROWS ONLY");
        assert_eq!(text, "SELECT a FROM t OFFSET $1 ROWS FETCH FIRST $2 ROWS ONLY");
        let (text, _, _) = rewrite("SELECT a FROM t FETCH NEXT 3 ROWS WITH TIES");
        assert_eq!(text, "SELECT a FROM t FETCH NEXT $1 ROWS WITH TIES");
    }

    #[test]
    fn parameters_pass_through() {
        assert_eq!(refused("SELECT * FROM t WHERE id = $1"), Unsupported::HasParameters);
        assert_eq!(refused("SELECT $12"), Unsupported::HasParameters);
        // `$` inside identifiers is fine.
        assert_eq!(rewrite("SELECT a$1 FROM t$ WHERE x = 1").0, "SELECT a$1 FROM t$ WHERE x = $1");
        assert_eq!(refused("SELECT $ 1"), Unsupported::UnexpectedCharacter);
        assert_eq!(refused("SELECT $a"), Unsupported::UnexpectedCharacter);
    }

    #[test]
    fn statements() {
        assert_eq!(refused("SELECT 1; SELECT 2"), Unsupported::MultipleStatements);
        assert_eq!(refused("SELECT 1;;"), Unsupported::MultipleStatements);
        assert_eq!(refused(""), Unsupported::Empty);
        assert_eq!(refused("  -- nothing\n /* here */ "), Unsupported::Empty);
        assert_eq!(refused(";"), Unsupported::Empty);
        assert_eq!(rewrite("SELECT 1; -- end\n").0, "SELECT $1; -- end\n");
        // Not lexed here, but decided by the validator: utility statements.
        assert_eq!(rewrite("BEGIN").0, "BEGIN");
        assert_eq!(rewrite("SET x = 5").0, "SET x = $1");
    }

    #[test]
    fn garbage() {
        assert_eq!(refused("SELECT (1"), Unsupported::Unbalanced);
        assert_eq!(refused("SELECT 1)"), Unsupported::Unbalanced);
        assert_eq!(refused("SELECT a[1)"), Unsupported::Unbalanced);
        assert_eq!(refused("SELECT (1; SELECT 2)"), Unsupported::Unbalanced);
        assert_eq!(refused("SELECT :name"), Unsupported::UnexpectedCharacter);
        assert_eq!(refused("SELECT :'name'"), Unsupported::UnexpectedCharacter);
        assert_eq!(refused("\\d t"), Unsupported::UnexpectedCharacter);
        assert_eq!(refused("SELECT {1}"), Unsupported::UnexpectedCharacter);
        assert_eq!(refused("SELECT 1\u{b}"), Unsupported::UnexpectedCharacter);
        assert_eq!(refused("SELECT 1 2"), Unsupported::AdjacentLiterals);
    }

    #[test]
    fn the_rewrite_never_glues_tokens() {
        let (text, _, _) = rewrite("SELECT'a'AS x, CASE WHEN y THEN'b'ELSE $$c$$END");
        assert_eq!(text, "SELECT $1 AS x, CASE WHEN y THEN $2 ELSE $3 END");
        // (`ELSE$$c$$` would be one identifier: `$` continues a word.)
    }

    #[test]
    fn non_ascii_text() {
        let sql = "SELECT 'ünï', \"ñ\" FROM tëst WHERE naïve = 'ß' -- ☃\n";
        let (text, _, values) = rewrite(sql);
        assert_eq!(text, "SELECT $1, \"ñ\" FROM tëst WHERE naïve = $2 -- ☃\n");
        assert_eq!(values, ["ünï", "ß"]);
        // Bytes ≥ 0x80 are identifier characters, as in scan.l (here U+00A0).
        assert_eq!(rewrite("SELECT\u{a0}1").0, "SELECT\u{a0}1");
    }

    #[test]
    fn reused_between_queries() {
        let mut lexed = Lexed::new();
        lexed.lex("SELECT 1, 'abc', 3", LexOptions::default()).unwrap();
        assert_eq!(lexed.slots().len(), 3);
        assert_eq!(lexed.lex("SELECT 'x", LexOptions::default()), Err(Unsupported::Unterminated));
        assert!(lexed.slots().is_empty() && lexed.param_types().is_empty() && lexed.params().len() == 0);
        lexed.lex("SELECT 'y'", LexOptions::default()).unwrap();
        assert_eq!(lexed.params().collect::<Vec<_>>(), [Some(&b"y"[..])]);
    }

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
    fn short_loads_keep_every_byte() {
        for len in 1..8 {
            let bytes: Vec<u8> = (1..=len as u8).collect();
            let word = load_short(&bytes);
            for (i, &b) in bytes.iter().enumerate() {
                assert!(word.to_le_bytes().contains(&b), "byte {i} of {len}");
            }
        }
        assert_ne!(load_short(b"abc"), load_short(b"acb"));
        assert_ne!(load_short(b"abcde"), load_short(b"abdce"));
    }

    #[test]
    fn keywords_whatever_their_case_or_length() {
        assert_eq!(Kw::lookup(b"SELECT"), Kw::Select);
        assert_eq!(Kw::lookup(b"sElEcT"), Kw::Select);
        assert_eq!(Kw::lookup(b"Materialized"), Kw::Materialized);
        for word in [&b"selects"[..], b"selec", b"s", b"", b"materializedd", b"a_very_long_identifier_indeed", b"\xc3\xa9"] {
            assert_eq!(Kw::lookup(word), Kw::None, "{word:?}");
        }
        for len in 1..=16 {
            let word: Vec<u8> = (0..len).map(|i| b'A' + i as u8).collect();
            assert_eq!(pack_lowercase(&word), pack(&word.to_ascii_lowercase()), "{len}");
        }
        assert_eq!(pack_lowercase(&[b'a'; 17]), 0);
    }

    #[test]
    fn swar_lowercase() {
        let word = u64::from_le_bytes(*b"AZaz@[`{");
        assert_eq!(lowercase_word(word).to_le_bytes(), *b"azaz@[`{");
        let high = u64::from_le_bytes([0xc3, 0x89, b'A', 0xc1, b'Z', 0xda, b'_', b'0']);
        assert_eq!(lowercase_word(high).to_le_bytes(), [0xc3, 0x89, b'a', 0xc1, b'z', 0xda, b'_', b'0']);
    }

    fn tokens_of(sql: &str) -> (Lexed, Vec<Token>) {
        let mut lexed = Lexed::new();
        lexed.lex_tokens(sql, LexOptions::default()).unwrap_or_else(|e| panic!("{sql:?} did not lex: {e}"));
        let tokens = lexed.tokens().to_vec();
        (lexed, tokens)
    }

    fn same(a: &str, b: &str) -> bool {
        let ((la, ta), (lb, tb)) = (tokens_of(a), tokens_of(b));
        let same = same_tokens(a, &ta, b, &tb);
        if same {
            assert_eq!(la.shape_hash(), lb.shape_hash(), "{a:?} / {b:?}");
            assert_eq!(la.param_types(), lb.param_types());
        }
        same
    }

    #[test]
    fn tokens_are_recorded_only_when_asked_and_do_not_change_the_hash() {
        let sql = "SELECT \"A\", b::int FROM t WHERE c = 'x' ORDER BY 1;";
        let plain = lexed(sql);
        assert!(plain.tokens().is_empty());
        let (recorded, tokens) = tokens_of(sql);
        assert_eq!(recorded.shape_hash(), plain.shape_hash());
        let texts: Vec<(&str, TokenClass)> = tokens.iter().map(|t| (&sql[t.start as usize..t.end as usize], t.class)).collect();
        use TokenClass::*;
        assert_eq!(
            texts,
            [
                ("SELECT", Word),
                ("\"A\"", Quoted),
                (",", Operator),
                ("b", Word),
                ("::", Operator),
                ("int", Word),
                ("FROM", Word),
                ("t", Word),
                ("WHERE", Word),
                ("c", Word),
                ("=", Operator),
                ("'x'", Slot(oid::UNKNOWN)),
                ("ORDER", Word),
                ("BY", Word),
                ("1", Kept),
            ]
        );
    }

    #[test]
    fn spellings_of_one_statement() {
        assert!(same("SELECT a FROM t WHERE b = 1", "select A\n  from T -- where\n WHERE B=2;"));
        assert!(same("SELECT a, -5, x::INT FROM t", "SELECT/* */a ,- 7,x :: int from t"));
        assert!(same("SELECT 'a'\n'b' AS Label", "select 'c' as LABEL"));
        assert!(same("SELECT date '2024-01-01' ORDER BY 1", "SELECT DATE '2024-01-01' order by 1"));
    }

    #[test]
    fn what_keeps_spellings_apart() {
        // Quoted identifiers keep their case, and are not the unquoted word.
        assert!(!same("SELECT \"A\" FROM t", "SELECT \"a\" FROM t"));
        assert!(!same("SELECT \"a\" FROM t", "SELECT a FROM t"));
        // Kept literals are the statement's text.
        assert!(!same("SELECT date '2024-01-01'", "SELECT date '2024-01-02'"));
        assert!(!same("SELECT 1 ORDER BY 1", "SELECT 1 ORDER BY 01"));
        // Another parameter type, another operator spelling, another token.
        assert!(!same("SELECT 1", "SELECT 1.0"));
        assert!(!same("SELECT 1 <> 2", "SELECT 1 != 2"));
        assert!(!same("SELECT 1 AS a", "SELECT 1 a"));
        // Only ASCII letters fold (PostgreSQL leaves others alone in UTF-8).
        assert!(same("SELECT 1 AS Éa", "SELECT 1 AS Éa"));
        assert!(!same("SELECT 1 AS Éa", "SELECT 1 AS éa"));
    }

    #[test]
    fn a_position_maps_to_the_same_place_in_another_spelling() {
        let a = "SELECT a, bc FROM t";
        let b = "select\n  A ,  -- x\n BC from t";
        let ((_, ta), (_, tb)) = (tokens_of(a), tokens_of(b));
        let place = |p: usize| same_place(a, &ta, b, &tb, p);
        assert_eq!(place(11), Some(b.find("BC").unwrap() + 1), "the start of bc");
        assert_eq!(place(12), Some(b.find("BC").unwrap() + 2), "its second character");
        assert_eq!(place(10), Some(b.find("BC").unwrap() + 1), "between tokens: the next one");
        assert_eq!(place(1), Some(1));
        assert_eq!(place(100), None, "past the last token");
        // Characters, not bytes.
        let a = "SELECT 'é', x";
        let b = "SELECT 'é' ,  x";
        let ((_, ta), (_, tb)) = (tokens_of(a), tokens_of(b));
        assert_eq!(same_place(a, &ta, b, &tb, 13), Some(15));
    }

    #[test]
    fn a_position_in_one_spellings_rewrite_maps_into_another_spelling() {
        let from = "SELECT 'é', 42 + x FROM t";
        let to = "select 'é', 7 +  X\nfrom T";
        // "SELECT $1, $2 + x FROM t": x is at 17.
        let x = to[..to.find('X').unwrap()].chars().count() + 1;
        assert_eq!(respelled_position(from, LexOptions::default(), to, LexOptions::default(), 17), Some(x));
        // At $2: the literal in the other spelling.
        assert_eq!(respelled_position(from, LexOptions::default(), to, LexOptions::default(), 12), Some(13));
        assert_eq!(respelled_position(from, LexOptions::default(), "SELECT 1", LexOptions::default(), 1), None);
        assert!(same_statement(from, LexOptions::default(), to, LexOptions::default()));
        assert!(!same_statement(from, LexOptions::default(), "SELECT 1; SELECT 2", LexOptions::default()));
    }

    /// Pieces that exercise every branch of the lexer when glued at random.
    fn sqlish() -> impl Strategy<Value = String> {
        let piece = prop::sample::select(vec![
            "SELECT", " ", "\n", "'", "''", "\"", "E'", "B'", "X'", "N'", "U&'", "$$", "$a$", "$1", "$", "--", "/*", "*/", "(",
            ")", "[", "]", ",", ";", ":", "::", ":=", ".", "-", "+", "=", "<>", "@-", "1", "2.5", ".5", "1e", "e", "ORDER", "BY",
            "GROUP", "DISTINCT", "ON", "AS", "extract", "interval", "now", "\\", "\\x41", "\\u00e9", "\\U", "\\0", "é", "\u{a0}",
            "\u{b}", "\r", "x", "int", "(3)",
        ]);
        prop::collection::vec(piece, 0..40).prop_map(|pieces| pieces.concat())
    }

    /// Whatever the outcome, the output is consistent with the input.
    fn check_invariants(sql: &str, lexed: &Lexed) {
        let mut last_end = 0;
        for (i, slot) in lexed.slots().iter().enumerate() {
            assert!(slot.start as usize >= last_end && slot.end > slot.start && slot.end as usize <= sql.len());
            assert!(sql.is_char_boundary(slot.start as usize) && sql.is_char_boundary(slot.end as usize));
            let _ = lexed.value(i);
            last_end = slot.end as usize;
        }
        assert_eq!(lexed.param_types().len(), lexed.slots().len());
        let _ = lexed.rewritten(sql);
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

        #[test]
        fn never_panics_on_any_string(sql in any::<String>()) {
            let mut lexed = Lexed::new();
            if lexed.lex(&sql, LexOptions::default()).is_ok() {
                check_invariants(&sql, &lexed);
            }
        }

        /// Any text the lexer takes, spelled again with other whitespace,
        /// comments and case of its unquoted words, is the same statement.
        #[test]
        fn respellings_are_the_same_statement(
            sql in sqlish(),
            cases in prop::collection::vec(any::<bool>(), 64),
            gaps in prop::collection::vec(prop::sample::select(vec![" ", "\n", "\t ", " /* c */ ", " -- c\n"]), 64),
        ) {
            let mut lexed = Lexed::new();
            if lexed.lex_tokens(&sql, LexOptions::default()).is_ok() {
                let tokens = lexed.tokens().to_vec();
                let mut again = String::new();
                for (i, t) in tokens.iter().enumerate() {
                    let text = &sql[t.start as usize..t.end as usize];
                    match t.class {
                        TokenClass::Word if cases[i % 64] => again.push_str(&text.to_ascii_uppercase()),
                        TokenClass::Word => again.push_str(&text.to_ascii_lowercase()),
                        _ => again.push_str(text),
                    }
                    again.push_str(gaps[i % 64]);
                }
                let mut other = Lexed::new();
                prop_assert!(other.lex_tokens(&again, LexOptions::default()).is_ok(), "{:?} -> {:?}", sql, again);
                prop_assert!(same_tokens(&sql, &tokens, &again, other.tokens()), "{:?} -> {:?}", sql, again);
                prop_assert_eq!(lexed.shape_hash(), other.shape_hash());
                prop_assert_eq!(lexed.param_types(), other.param_types());
            }
        }

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

        #[test]
        fn never_panics_on_sqlish_strings(sql in sqlish(), scs in any::<bool>()) {
            let mut lexed = Lexed::new();
            if lexed.lex(&sql, LexOptions { standard_conforming_strings: scs }).is_ok() {
                check_invariants(&sql, &lexed);
            }
        }
    }
}
