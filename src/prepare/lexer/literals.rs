//! The literal rules: numbers (typed by magnitude as PostgreSQL types them),
//! quoted strings with their continuation and escapes, bit and hex strings,
//! dollar quotes, and the decision whether a literal becomes a slot (a
//! parameter) or stays in the text, and why (protocol.md §1.1, §1.2).

use super::chars::{contains_ignore_ascii_case, is_dollar_tag_cont, is_ident_cont, is_ident_start, is_op_char};
use super::hash::{TAG_KEPT, TAG_SLOT};
use super::keywords::Kw;
use super::scanner::{Lex, List, Prev, Scanner, TypeName};
use super::{KeepReason, Kept, LiteralKind, Slot, TokenClass, Unsupported, MAX_SLOTS};

impl<'a, const RECORD: bool> Scanner<'a, RECORD> {
    pub(super) fn number(&mut self) -> Lex {
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
    pub(super) fn negative_number(&mut self, minus: usize) -> Lex<bool> {
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
    pub(super) fn string(&mut self, start: usize, quote: usize, kind: Quote) -> Lex {
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
    #[inline]
    pub(super) fn dollar(&mut self) -> Lex {
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
pub(super) enum Quote {
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
#[inline]
pub(super) fn classify_number(text: &[u8], fractional: bool, negative: bool) -> LiteralKind {
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

/// Date/time input words evaluated when the literal is parsed: kept inline in
/// a cached statement, their value would freeze (protocol.md §1.3).
fn is_time_dependent(value: &[u8]) -> bool {
    const WORDS: [&[u8]; 4] = [b"now", b"today", b"tomorrow", b"yesterday"];
    WORDS.iter().any(|word| contains_ignore_ascii_case(value, word))
}
