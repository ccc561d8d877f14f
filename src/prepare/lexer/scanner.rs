//! The scanner: one walk over the query text, token by token, feeding the
//! shape hash and filling a [`Lexed`]. This file owns the walk itself
//! (whitespace and comments, punctuation, operators, words, parentheses) and
//! the state that tells the literal rules ([`super::literals`]) where a
//! literal stands: the previous token, a type name being read, the list a
//! parenthesis level is in.

use super::chars::{is_ident_cont, is_ident_start, is_op_char, is_space, operator_len};
use super::hash::{ShapeHasher, TAG_OPERATOR, TAG_QUOTED, TAG_WORD};
use super::keywords::Kw;
use super::literals::Quote;
use super::{LexOptions, Lexed, Token, TokenClass, Unsupported, MAX_NAME_LEN};

/// The previous token, as far as the next literal or `-` cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Prev {
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
    pub(super) fn before_operand(self) -> bool {
        matches!(self, Prev::Keyword(_) | Prev::Operator | Prev::Open | Prev::Comma)
    }
}

/// Where the scanner is in a type name (after `::` or `AS`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum TypeName {
    None,
    /// After `::`, `AS` or `.` in a type name: a word comes next.
    ExpectWord,
    /// After a word of a type name: `(` or `[` opens its modifiers.
    AfterWord,
}

/// Which list a parenthesis level is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum List {
    None,
    /// ORDER BY, PARTITION BY, DISTINCT ON: whole literal items are kept.
    Order,
    /// GROUP BY: every literal is kept.
    Group,
}

/// One level of parentheses or brackets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Frame {
    pub(super) bracket: bool,
    pub(super) list: List,
    /// Type modifiers or array bounds: every literal is kept.
    pub(super) typmod: bool,
    /// The parentheses of `extract(…)`.
    pub(super) extract: bool,
    /// Closing it returns to [`TypeName::AfterWord`] (`timestamp(3) with time zone`).
    pub(super) resume_type_name: bool,
}

impl Frame {
    pub(super) const ROOT: Frame =
        Frame { bracket: false, list: List::None, typmod: false, extract: false, resume_type_name: false };
}

/// `RECORD`: push every token to [`Lexed::tokens`].
pub(super) struct Scanner<'a, const RECORD: bool> {
    pub(super) sql: &'a [u8],
    pub(super) pos: usize,
    pub(super) options: LexOptions,
    pub(super) out: &'a mut Lexed,
    pub(super) hash: ShapeHasher,
    pub(super) prev: Prev,
    /// The previous token's keyword (`Kw::None` for anything else).
    pub(super) prev_kw: Kw,
    pub(super) type_name: TypeName,
    /// A `;` ended the statement: only whitespace and comments may follow.
    pub(super) ended: bool,
}

pub(super) type Lex<T = ()> = Result<T, Unsupported>;

impl<'a, const RECORD: bool> Scanner<'a, RECORD> {
    pub(super) fn new(sql: &'a [u8], options: LexOptions, out: &'a mut Lexed) -> Scanner<'a, RECORD> {
        let hash = ShapeHasher::new(out.seed);
        out.frames.push(Frame::ROOT);
        Scanner { sql, pos: 0, options, out, hash, prev: Prev::Start, prev_kw: Kw::None, type_name: TypeName::None, ended: false }
    }

    pub(super) fn at(&self, pos: usize) -> Option<u8> {
        self.sql.get(pos).copied()
    }

    pub(super) fn frame(&self) -> Frame {
        *self.out.frames.last().expect("the root frame is never popped")
    }

    fn frame_mut(&mut self) -> &mut Frame {
        self.out.frames.last_mut().expect("the root frame is never popped")
    }

    #[inline]
    pub(super) fn run(mut self) -> Lex {
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
    #[inline]
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
    pub(super) fn line_end(&self, pos: usize) -> usize {
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
    pub(super) fn next_token(&self, mut pos: usize) -> usize {
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
    pub(super) fn record(&mut self, class: TokenClass, start: usize, end: usize) {
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

    #[inline]
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

    #[inline]
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

    #[inline]
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

    #[inline]
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
}
