//! The statement to prepare, written from the lexer's own spans: the query
//! text with each slot replaced by `$1..$n`, and error positions in it mapped
//! back to the text the client sent.
//!
//! It owns no state: it reads a [`Lexed`] and the text that was lexed.

use std::ops::Range;

use super::chars::is_ident_cont;
use super::Lexed;

impl Lexed {
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
                    out.push('$');
                    out.push_str(itoa::Buffer::new().format(number));
                    if space_after {
                        out.push(' ');
                    }
                }
            }
        }
    }

    /// [`Lexed::write_rewritten`] into a new string (the miss path).
    #[inline]
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
