//! The script language of a transaction: `\set` lines that draw random
//! integers, and SQL statements that use them as `:name`, like pgbench's.
//!
//! ```text
//! \set aid random(1, 100000 * :scale)
//! SELECT abalance FROM pgbench_accounts WHERE aid = :aid;
//! ```
//!
//! This module owns parsing a script into [`Script`] (checked once, at start:
//! unknown variables and bad expressions are errors before anything runs) and
//! the per-transaction work that needs no I/O: evaluating the variables and
//! writing a statement's SQL for the simple protocol or its `$n` parameters
//! for the extended ones. It never touches a socket.
//!
//! Expressions: integers, `:variables`, `+ - * / %`, parentheses and
//! `random(lo, hi)` (uniform, both ends included). Predefined variables:
//! `:scale` and `:client_id` (the connection's number, from 0). Statements end
//! with `;`; `--` starts a comment; `::` is a cast, not a variable.

use std::fmt::Write as _;
use std::ops::Range;

use rand::Rng;
use thiserror::Error;

/// Slots of the predefined variables.
pub const SCALE: usize = 0;
pub const CLIENT_ID: usize = 1;
const PREDEFINED: [&str; 2] = ["scale", "client_id"];

#[derive(Debug, Error, PartialEq, Eq)]
pub enum ScriptError {
    #[error("line {line}: unknown variable :{name} (define it with \\set before use)")]
    UnknownVariable { line: usize, name: String },
    #[error("line {line}: {message}")]
    Syntax { line: usize, message: String },
    #[error("line {line}: :{name} is predefined and cannot be set")]
    Predefined { line: usize, name: String },
    #[error("the script has no SQL statement")]
    Empty,
}

#[derive(Debug, Error, PartialEq, Eq)]
pub enum EvalError {
    #[error("\\set {0}: division by zero")]
    DivisionByZero(String),
    #[error("\\set {0}: integer overflow")]
    Overflow(String),
    #[error("\\set {0}: random() with lower bound above upper bound")]
    EmptyRange(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Expr {
    Int(i64),
    Var(usize),
    Neg(Box<Expr>),
    Binary(Op, Box<Expr>, Box<Expr>),
    Random(Box<Expr>, Box<Expr>),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Add,
    Sub,
    Mul,
    Div,
    Rem,
}

/// One `\set`: evaluated into `slot` at the start of every transaction.
#[derive(Debug, Clone)]
struct Assignment {
    name: String,
    slot: usize,
    expr: Expr,
}

/// A piece of a statement's SQL: verbatim text or a variable's value.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Piece {
    Sql(String),
    Var(usize),
}

/// One SQL statement of a script, ready for either protocol.
#[derive(Debug, Clone)]
pub struct Statement {
    pieces: Vec<Piece>,
    /// The SQL with `$1..$n` where the variables are, for Parse.
    pub parameterized: String,
    /// The variable slot behind each `$n`, in order.
    params: Vec<usize>,
}

/// A parsed script: what one transaction runs.
#[derive(Debug, Clone)]
pub struct Script {
    assignments: Vec<Assignment>,
    pub statements: Vec<Statement>,
    slots: usize,
}

impl Script {
    pub fn parse(text: &str) -> Result<Script, ScriptError> {
        Parser::default().parse(text)
    }

    /// Storage for the variables of one connection, predefined ones filled in.
    pub fn new_values(&self, scale: i64, client_id: i64) -> Vec<i64> {
        let mut values = vec![0; self.slots];
        values[SCALE] = scale;
        values[CLIENT_ID] = client_id;
        values
    }

    /// Evaluates the `\set` lines in order, for one transaction.
    pub fn draw(&self, values: &mut [i64], rng: &mut impl Rng) -> Result<(), EvalError> {
        for a in &self.assignments {
            values[a.slot] = eval(&a.expr, values, rng).map_err(|make| make(a.name.clone()))?;
        }
        Ok(())
    }
}

impl Statement {
    /// The SQL with the variables' values written in, for the simple protocol.
    pub fn render(&self, values: &[i64], out: &mut String) {
        out.clear();
        for piece in &self.pieces {
            match piece {
                Piece::Sql(s) => out.push_str(s),
                Piece::Var(slot) => {
                    let v = values[*slot];
                    // `x - :v` with v = -1 must not become the comment `x --1`.
                    if v < 0 && out.ends_with('-') {
                        out.push(' ');
                    }
                    let _ = write!(out, "{v}");
                }
            }
        }
    }

    /// The parameter values in text format, for Bind: written into `out`,
    /// with the range of each in `ranges`.
    pub fn params(&self, values: &[i64], out: &mut Vec<u8>, ranges: &mut Vec<Range<usize>>) {
        out.clear();
        ranges.clear();
        for &slot in &self.params {
            let start = out.len();
            let _ = write!(IoString(out), "{}", values[slot]);
            ranges.push(start..out.len());
        }
    }
}

/// `fmt::Write` over a byte vector, to format integers without a String.
struct IoString<'a>(&'a mut Vec<u8>);

impl std::fmt::Write for IoString<'_> {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        self.0.extend_from_slice(s.as_bytes());
        Ok(())
    }
}

/// What went wrong, still without the variable's name: each variant of
/// [`EvalError`] is a `fn(String) -> EvalError`.
type Failure = fn(String) -> EvalError;

fn eval(expr: &Expr, values: &[i64], rng: &mut impl Rng) -> Result<i64, Failure> {
    Ok(match expr {
        Expr::Int(n) => *n,
        Expr::Var(slot) => values[*slot],
        Expr::Neg(e) => eval(e, values, rng)?.checked_neg().ok_or(EvalError::Overflow as Failure)?,
        Expr::Binary(op, l, r) => {
            let (l, r) = (eval(l, values, rng)?, eval(r, values, rng)?);
            if matches!(op, Op::Div | Op::Rem) && r == 0 {
                return Err(EvalError::DivisionByZero);
            }
            match op {
                Op::Add => l.checked_add(r),
                Op::Sub => l.checked_sub(r),
                Op::Mul => l.checked_mul(r),
                Op::Div => l.checked_div(r),
                Op::Rem => l.checked_rem(r),
            }
            .ok_or(EvalError::Overflow as Failure)?
        }
        Expr::Random(lo, hi) => {
            let (lo, hi) = (eval(lo, values, rng)?, eval(hi, values, rng)?);
            if lo > hi {
                return Err(EvalError::EmptyRange);
            }
            rng.gen_range(lo..=hi)
        }
    })
}

/// Parses a script; holds the variable names seen so far.
#[derive(Default)]
struct Parser {
    names: Vec<String>,
}

impl Parser {
    fn slot(&self, name: &str) -> Option<usize> {
        PREDEFINED
            .iter()
            .position(|p| *p == name)
            .or_else(|| self.names.iter().position(|n| n == name).map(|i| i + PREDEFINED.len()))
    }

    fn parse(mut self, text: &str) -> Result<Script, ScriptError> {
        let mut assignments = Vec::new();
        let mut statements = Vec::new();
        let mut sql = SqlScanner::default();
        for (i, line) in text.lines().enumerate() {
            let line_no = i + 1;
            if sql.is_blank() && line.trim_start().starts_with('\\') {
                assignments.push(self.meta(line.trim(), line_no)?);
                continue;
            }
            for stmt in sql.feed(line, line_no) {
                statements.push(self.statement(&stmt)?);
            }
        }
        if let Some(stmt) = sql.finish() {
            statements.push(self.statement(&stmt)?);
        }
        if statements.is_empty() {
            return Err(ScriptError::Empty);
        }
        Ok(Script { assignments, statements, slots: PREDEFINED.len() + self.names.len() })
    }

    /// A `\set name expression` line.
    fn meta(&mut self, line: &str, line_no: usize) -> Result<Assignment, ScriptError> {
        let syntax = |message: &str| ScriptError::Syntax { line: line_no, message: message.to_owned() };
        let rest = line
            .strip_prefix("\\set")
            .filter(|r| r.starts_with(char::is_whitespace))
            .ok_or_else(|| syntax("only \\set is supported"))?;
        let rest = rest.trim_start();
        let name_len = rest.find(|c: char| !is_ident(c)).unwrap_or(rest.len());
        let (name, expr) = rest.split_at(name_len);
        if name.is_empty() || name.starts_with(|c: char| c.is_ascii_digit()) {
            return Err(syntax("\\set needs a variable name"));
        }
        if PREDEFINED.contains(&name) {
            return Err(ScriptError::Predefined { line: line_no, name: name.to_owned() });
        }
        let mut tokens = Tokens::new(expr, line_no);
        let expr = self.expr(&mut tokens)?;
        if tokens.peek().is_some() {
            return Err(syntax("unexpected text after the expression"));
        }
        // Defined after its expression: `\set x :x + 1` refers to the old x.
        let slot = match self.slot(name) {
            Some(slot) => slot,
            None => {
                self.names.push(name.to_owned());
                PREDEFINED.len() + self.names.len() - 1
            }
        };
        Ok(Assignment { name: name.to_owned(), slot, expr })
    }

    fn expr(&self, t: &mut Tokens<'_>) -> Result<Expr, ScriptError> {
        let mut left = self.term(t)?;
        while let Some(op) = t.eat_op(&[('+', Op::Add), ('-', Op::Sub)]) {
            left = Expr::Binary(op, Box::new(left), Box::new(self.term(t)?));
        }
        Ok(left)
    }

    fn term(&self, t: &mut Tokens<'_>) -> Result<Expr, ScriptError> {
        let mut left = self.factor(t)?;
        while let Some(op) = t.eat_op(&[('*', Op::Mul), ('/', Op::Div), ('%', Op::Rem)]) {
            left = Expr::Binary(op, Box::new(left), Box::new(self.factor(t)?));
        }
        Ok(left)
    }

    fn factor(&self, t: &mut Tokens<'_>) -> Result<Expr, ScriptError> {
        match t.next() {
            Some(Token::Int(n)) => Ok(Expr::Int(n)),
            Some(Token::Var(name)) => {
                self.slot(name).map(Expr::Var).ok_or_else(|| ScriptError::UnknownVariable { line: t.line, name: name.to_owned() })
            }
            Some(Token::Punct('-')) => Ok(Expr::Neg(Box::new(self.factor(t)?))),
            Some(Token::Punct('(')) => {
                let e = self.expr(t)?;
                t.expect(')')?;
                Ok(e)
            }
            Some(Token::Ident("random")) => {
                t.expect('(')?;
                let lo = self.expr(t)?;
                t.expect(',')?;
                let hi = self.expr(t)?;
                t.expect(')')?;
                Ok(Expr::Random(Box::new(lo), Box::new(hi)))
            }
            Some(Token::Ident(name)) => Err(t.error(&format!("unknown function {name}()"))),
            Some(Token::Punct(c)) => Err(t.error(&format!("unexpected '{c}'"))),
            Some(Token::Bad(what)) => Err(t.error(what)),
            None => Err(t.error("expression expected")),
        }
    }

    /// Splits a statement's SQL at its `:variables`.
    fn statement(&self, sql: &ScannedSql) -> Result<Statement, ScriptError> {
        let mut pieces = Vec::new();
        let mut parameterized = String::with_capacity(sql.text.len());
        let mut params = Vec::new();
        let mut last = 0;
        for var in &sql.vars {
            let slot =
                self.slot(&var.name).ok_or_else(|| ScriptError::UnknownVariable { line: var.line, name: var.name.clone() })?;
            let before = &sql.text[last..var.span.start];
            pieces.push(Piece::Sql(before.to_owned()));
            pieces.push(Piece::Var(slot));
            parameterized.push_str(before);
            let n = match params.iter().position(|&s| s == slot) {
                Some(i) => i + 1,
                None => {
                    params.push(slot);
                    params.len()
                }
            };
            let _ = write!(parameterized, "${n}");
            last = var.span.end;
        }
        pieces.push(Piece::Sql(sql.text[last..].to_owned()));
        parameterized.push_str(&sql.text[last..]);
        pieces.retain(|p| *p != Piece::Sql(String::new()));
        Ok(Statement { pieces, parameterized, params })
    }
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Token<'a> {
    Int(i64),
    Var(&'a str),
    Ident(&'a str),
    Punct(char),
    Bad(&'static str),
}

/// The tokens of a `\set` expression.
struct Tokens<'a> {
    rest: &'a str,
    line: usize,
    peeked: Option<Option<Token<'a>>>,
}

impl<'a> Tokens<'a> {
    fn new(text: &'a str, line: usize) -> Self {
        Tokens { rest: text, line, peeked: None }
    }

    fn error(&self, message: &str) -> ScriptError {
        ScriptError::Syntax { line: self.line, message: message.to_owned() }
    }

    fn peek(&mut self) -> Option<&Token<'a>> {
        if self.peeked.is_none() {
            self.peeked = Some(self.lex());
        }
        self.peeked.as_ref().and_then(Option::as_ref)
    }

    fn next(&mut self) -> Option<Token<'a>> {
        match self.peeked.take() {
            Some(t) => t,
            None => self.lex(),
        }
    }

    fn expect(&mut self, c: char) -> Result<(), ScriptError> {
        match self.next() {
            Some(Token::Punct(p)) if p == c => Ok(()),
            _ => Err(self.error(&format!("'{c}' expected"))),
        }
    }

    fn eat_op(&mut self, ops: &[(char, Op)]) -> Option<Op> {
        let op = match self.peek() {
            Some(Token::Punct(c)) => ops.iter().find(|(p, _)| p == c).map(|(_, op)| *op)?,
            _ => return None,
        };
        self.next();
        Some(op)
    }

    fn lex(&mut self) -> Option<Token<'a>> {
        self.rest = self.rest.trim_start();
        let c = self.rest.chars().next()?;
        let take = |rest: &mut &'a str, pred: fn(char) -> bool| {
            let n = rest.find(|c: char| !pred(c)).unwrap_or(rest.len());
            let (word, tail) = rest.split_at(n);
            *rest = tail;
            word
        };
        Some(if c.is_ascii_digit() {
            let digits = take(&mut self.rest, |c| c.is_ascii_digit());
            digits.parse().map_or(Token::Bad("integer out of range"), Token::Int)
        } else if c == ':' {
            self.rest = &self.rest[1..];
            match take(&mut self.rest, is_ident) {
                "" => Token::Bad("variable name expected after ':'"),
                name => Token::Var(name),
            }
        } else if is_ident(c) {
            Token::Ident(take(&mut self.rest, is_ident))
        } else {
            self.rest = &self.rest[c.len_utf8()..];
            Token::Punct(c)
        })
    }
}

/// A variable reference found in a statement.
#[derive(Debug)]
struct VarRef {
    name: String,
    span: Range<usize>,
    line: usize,
}

/// A statement's text as the scanner saw it.
#[derive(Debug, Default)]
struct ScannedSql {
    text: String,
    vars: Vec<VarRef>,
}

/// Splits SQL into statements at `;` and finds `:variables`, skipping string
/// literals, quoted identifiers and comments (state carries across lines).
#[derive(Debug, Default)]
struct SqlScanner {
    current: ScannedSql,
    quote: Option<char>,
}

impl SqlScanner {
    fn is_blank(&self) -> bool {
        self.quote.is_none() && self.current.text.trim().is_empty()
    }

    /// Scans one line; returns the statements it completed.
    fn feed(&mut self, line: &str, line_no: usize) -> Vec<ScannedSql> {
        let mut done = Vec::new();
        let mut chars = line.char_indices().peekable();
        while let Some((i, c)) = chars.next() {
            if let Some(q) = self.quote {
                self.current.text.push(c);
                if c == q {
                    self.quote = None; // a doubled quote reopens at once
                }
                continue;
            }
            match c {
                '\'' | '"' => {
                    self.quote = Some(c);
                    self.current.text.push(c);
                }
                '-' if line[i + 1..].starts_with('-') => break,
                ';' => {
                    let stmt = std::mem::take(&mut self.current);
                    if !stmt.text.trim().is_empty() {
                        done.push(stmt);
                    }
                }
                ':' if line[i + 1..].starts_with(':') => {
                    self.current.text.push_str("::");
                    chars.next();
                }
                ':' if line[i + 1..].starts_with(is_ident) => {
                    let name_len = line[i + 1..].find(|c: char| !is_ident(c)).unwrap_or(line.len() - i - 1);
                    let name = &line[i + 1..i + 1 + name_len];
                    let start = self.current.text.len();
                    self.current.text.push(':');
                    self.current.text.push_str(name);
                    self.current.vars.push(VarRef { name: name.to_owned(), span: start..self.current.text.len(), line: line_no });
                    for _ in 0..name_len {
                        chars.next();
                    }
                }
                _ => self.current.text.push(c),
            }
        }
        if !self.is_blank() {
            self.current.text.push('\n');
        } else if self.quote.is_none() {
            self.current = ScannedSql::default();
        }
        done
    }

    /// The last statement if it had no `;`.
    fn finish(self) -> Option<ScannedSql> {
        let mut stmt = self.current;
        let trimmed = stmt.text.trim_end().len();
        stmt.text.truncate(trimmed);
        (!stmt.text.trim().is_empty()).then_some(stmt)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::StdRng;
    use rand::SeedableRng;

    fn rng() -> StdRng {
        StdRng::seed_from_u64(7)
    }

    #[test]
    fn pgbench_select_only_script() {
        let s = Script::parse("\\set aid random(1, 100000 * :scale)\nSELECT abalance FROM pgbench_accounts WHERE aid = :aid;\n")
            .unwrap();
        assert_eq!(s.statements.len(), 1);
        let stmt = &s.statements[0];
        assert_eq!(stmt.parameterized, "SELECT abalance FROM pgbench_accounts WHERE aid = $1");
        let mut values = s.new_values(2, 0);
        let mut rng = rng();
        for _ in 0..1000 {
            s.draw(&mut values, &mut rng).unwrap();
            let aid = values[PREDEFINED.len()];
            assert!((1..=200_000).contains(&aid));
            let mut sql = String::new();
            stmt.render(&values, &mut sql);
            assert_eq!(sql, format!("SELECT abalance FROM pgbench_accounts WHERE aid = {aid}"));
            let (mut bytes, mut ranges) = (Vec::new(), Vec::new());
            stmt.params(&values, &mut bytes, &mut ranges);
            assert_eq!(&bytes[ranges[0].clone()], aid.to_string().as_bytes());
        }
    }

    #[test]
    fn a_variable_used_twice_is_one_parameter() {
        let s = Script::parse("\\set a 5\n\\set b :a * 2 - 1\nselect :b, :a::int8, :b + :client_id").unwrap();
        let stmt = &s.statements[0];
        assert_eq!(stmt.parameterized, "select $1, $2::int8, $1 + $3");
        assert_eq!(stmt.params, vec![PREDEFINED.len() + 1, PREDEFINED.len(), CLIENT_ID]);
        let mut values = s.new_values(1, 4);
        s.draw(&mut values, &mut rng()).unwrap();
        let mut sql = String::new();
        stmt.render(&values, &mut sql);
        assert_eq!(sql, "select 9, 5::int8, 9 + 4");
    }

    #[test]
    fn strings_comments_and_casts_are_not_variables() {
        let s = Script::parse("select ':nope', \":x\", now()::date -- :gone;\n, 1;\nselect 2").unwrap();
        assert_eq!(s.statements.len(), 2);
        assert_eq!(s.statements[0].parameterized, "select ':nope', \":x\", now()::date \n, 1");
        assert_eq!(s.statements[1].parameterized, "select 2");
        let s = Script::parse("select 'it''s;\n:still a string';").unwrap();
        assert_eq!(s.statements[0].parameterized, "select 'it''s;\n:still a string'");
    }

    #[test]
    fn negative_values_never_make_a_comment() {
        let s = Script::parse("\\set d -3\nselect 1 -:d, 1 - :d").unwrap();
        let mut values = s.new_values(1, 0);
        s.draw(&mut values, &mut rng()).unwrap();
        let mut sql = String::new();
        s.statements[0].render(&values, &mut sql);
        assert_eq!(sql, "select 1 - -3, 1 - -3");
    }

    #[test]
    fn expressions_follow_precedence() {
        let s = Script::parse("\\set x (1 + 2) * 3 - 10 / 4 % 2 + -(2)\nselect :x").unwrap();
        let mut values = s.new_values(1, 0);
        s.draw(&mut values, &mut rng()).unwrap();
        assert_eq!(values[2], 9 - 2, "(1 + 2) * 3 - 10 / 4 % 2 + -(2): 10 / 4 % 2 is 0");
    }

    #[test]
    fn errors_name_the_line() {
        assert_eq!(Script::parse("select :nope").unwrap_err(), ScriptError::UnknownVariable { line: 1, name: "nope".into() });
        assert!(matches!(Script::parse("\\set x random(1 2)\nselect 1"), Err(ScriptError::Syntax { line: 1, .. })));
        assert!(matches!(Script::parse("\\sleep 1\nselect 1"), Err(ScriptError::Syntax { .. })));
        assert!(matches!(Script::parse("\\set x foo(1)\nselect 1"), Err(ScriptError::Syntax { .. })));
        assert!(matches!(Script::parse("\\set x 99999999999999999999\nselect 1"), Err(ScriptError::Syntax { .. })));
        assert!(matches!(Script::parse("\n\\set x 1 1\nselect 1"), Err(ScriptError::Syntax { line: 2, .. })));
        assert!(matches!(Script::parse("\\set scale 1\nselect 1"), Err(ScriptError::Predefined { .. })));
        assert_eq!(Script::parse("-- nothing\n\n").unwrap_err(), ScriptError::Empty);
        assert_eq!(Script::parse("\\set x 1").unwrap_err(), ScriptError::Empty);
    }

    #[test]
    fn evaluation_errors_are_reported_not_panics() {
        for (text, want) in [
            ("\\set x 1 / (:scale - 1)\nselect 1", EvalError::DivisionByZero("x".into())),
            ("\\set x 9223372036854775807 + :scale\nselect 1", EvalError::Overflow("x".into())),
            ("\\set x random(5, :scale)\nselect 1", EvalError::EmptyRange("x".into())),
        ] {
            let s = Script::parse(text).unwrap();
            let mut values = s.new_values(1, 0);
            assert_eq!(s.draw(&mut values, &mut rng()), Err(want));
        }
    }
}
