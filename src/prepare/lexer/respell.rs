//! Two spellings of one statement: texts that differ only in whitespace,
//! comments, the case of unquoted words and a trailing `;` are one statement
//! to PostgreSQL. The cold path only (a second spelling of a validated shape,
//! and error positions mapped into it): [`super::Lexed::lex_tokens`] records
//! the tokens these functions compare; the hot path records nothing.

use super::{LexOptions, Lexed};

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prepare::lexer::oid;

    fn lexed(sql: &str) -> Lexed {
        let mut lexed = Lexed::new();
        lexed.lex(sql, LexOptions::default()).unwrap_or_else(|e| panic!("{sql:?} did not lex: {e}"));
        lexed
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
}
