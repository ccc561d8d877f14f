//! The auto-prepare miss path: may this query shape run as a prepared
//! statement, with the lexer's slots as its parameters?
//!
//! [`validate`] answers with PostgreSQL's own grammar (pg_query, the 17.x
//! parser) for a query the [lexer](super::lexer) took. It accepts a shape only
//! if
//!
//! * the text is exactly one statement of a kind SQL `PREPARE` takes: SELECT,
//!   VALUES, INSERT, UPDATE, DELETE or MERGE, with no `SELECT … INTO`
//!   (protocol.md §1.4);
//! * every slot is a constant the parser also sees (an `A_Const` at the same
//!   byte offset, with the same value and type class), and none sits where a
//!   parameter means something else: an ORDER BY / DISTINCT ON position, a
//!   GROUP BY, a type modifier, an `interval` field qualifier, an `extract`
//!   field (protocol.md §1.1, §1.2, §2.1);
//! * every other constant of the parser is one the lexer kept in the text, or
//!   a keyword the grammar turns into a constant (`NULL`, `TRUE`, `hour`);
//! * the rewritten text parses to the same statement: same fingerprint (which
//!   ignores constants and parameters alike) and exactly `$1..$n`.
//!
//! It is the slow path, run once per shape per shard (two parses and two
//! fingerprints, tens to hundreds of µs), never per query. It is pure: no
//! I/O, no state. What it cannot see, the relay still checks on a side
//! connection before the first rewrite (protocol.md §1.7 step 4): that the
//! server prepares the rewritten text with the same RowDescription, and,
//! with [`Rewrite::check_parameter_types`], the types it infers for the
//! parameters. If the original itself fails to prepare there (a bad value,
//! a missing table), that says nothing of the shape: check it again with the
//! next query of that shape rather than caching "pass through".

use std::collections::{HashMap, HashSet};

use pg_query::NodeEnum;
use serde_json::Value;

use super::lexer::{Lexed, LiteralKind};

/// What a shape that may be rewritten is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StatementKind {
    Select,
    Values,
    Insert,
    Update,
    Delete,
    Merge,
}

impl StatementKind {
    /// Whether it writes at its top level, where rules apply (a SELECT's
    /// data-modifying WITH cannot have a rule add a SELECT: PostgreSQL
    /// refuses DO INSTEAD SELECT rules there).
    pub fn writes(self) -> bool {
        matches!(self, StatementKind::Insert | StatementKind::Update | StatementKind::Delete | StatementKind::Merge)
    }
}

/// A shape that may run as a prepared statement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rewrite {
    pub kind: StatementKind,
    /// The statement to prepare: the query with its slots as `$1..$n`.
    pub sql: String,
    /// The types to declare in Parse, one per parameter.
    pub param_types: Vec<u32>,
    /// Per parameter: a quoted literal, not cast, in a statement that writes
    /// columns (INSERT, UPDATE or MERGE, also in a WITH), so it may be
    /// assigned to a column as it is. See [`Rewrite::check_parameter_types`].
    assignable: Vec<bool>,
}

impl Rewrite {
    /// After the relay's side connection prepared [`Rewrite::sql`] and
    /// described it: checks the server's ParameterDescription (`described`).
    /// One type per parameter, each declared one kept, and no quoted
    /// literal that may be assigned to a column as it is inferred as
    /// `interval` or `interval[]`. Assigned to an `interval hour` column,
    /// `'1'` is 1 hour as a literal (the input function gets the column's
    /// typmod) but 1 second, truncated to 0, as a parameter; neither the parse
    /// tree nor the RowDescription shows it. (`'1'::interval hour` is refused
    /// by [`validate`]; a plain cast, a comparison or a function argument
    /// carries no typmod.)
    pub fn check_parameter_types(&self, described: &[u32]) -> Result<(), Reason> {
        const INTERVAL: u32 = 1186;
        const INTERVAL_ARRAY: u32 = 1187;
        if self.param_types.len() != described.len() {
            return Err(Reason::RewriteInvalid);
        }
        for ((&declared, &described), &assignable) in self.param_types.iter().zip(described).zip(&self.assignable) {
            if assignable && matches!(described, INTERVAL | INTERVAL_ARRAY) {
                return Err(Reason::IntervalParameter);
            }
            if declared != 0 && declared != described {
                return Err(Reason::RewriteInvalid);
            }
        }
        Ok(())
    }
}

/// The decision for a shape.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Rewrite(Rewrite),
    PassThrough(Reason),
}

/// Why a shape passes through unchanged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
pub enum Reason {
    #[error("the parser rejects the query (the server will answer with the error)")]
    Syntax,
    #[error("not exactly one statement")]
    NotOneStatement,
    #[error("not a SELECT, VALUES, INSERT, UPDATE, DELETE or MERGE")]
    Utility,
    #[error("SELECT ... INTO creates a table")]
    SelectInto,
    #[error("a literal is an ORDER BY or DISTINCT ON position")]
    Position,
    #[error("a literal is in GROUP BY")]
    GroupBy,
    #[error("a literal is a type modifier")]
    TypeModifier,
    #[error("a literal is cast to an interval with a field qualifier")]
    IntervalQualifier,
    #[error("a literal is an extract() field")]
    ExtractField,
    #[error("a literal is where the grammar wants a constant (CYCLE mark)")]
    ConstantRequired,
    #[error("the lexer and the parser disagree on where the constants are")]
    ConstantMismatch,
    #[error("the lexer and the parser disagree on a constant's value or type")]
    ValueMismatch,
    #[error("the rewritten text is not the same statement")]
    RewriteInvalid,
    #[error("the server infers interval for a quoted literal assigned to a column (its typmod reads it differently)")]
    IntervalParameter,
    #[error("the server describes the rewritten statement's result differently (names, types or typmods)")]
    ResultMismatch,
    #[error("a write in a database with rules on writes: a rule's SELECT returns rows to a simple query only")]
    Rules,
}

impl Reason {
    pub const ALL: [Reason; 16] = [
        Reason::Syntax,
        Reason::NotOneStatement,
        Reason::Utility,
        Reason::SelectInto,
        Reason::Position,
        Reason::GroupBy,
        Reason::TypeModifier,
        Reason::IntervalQualifier,
        Reason::ExtractField,
        Reason::ConstantRequired,
        Reason::ConstantMismatch,
        Reason::ValueMismatch,
        Reason::RewriteInvalid,
        Reason::IntervalParameter,
        Reason::ResultMismatch,
        Reason::Rules,
    ];

    /// Whether the reason lies in how this query spells its literals rather
    /// than in its shape: another query of the same shape (same rewritten
    /// text and parameter types) may still be rewritten. pg_query refuses
    /// some literal spellings PostgreSQL 15 takes (a comment between
    /// continued strings), and the lexer and parser may disagree on one
    /// literal's value.
    pub fn is_about_the_literals(self) -> bool {
        matches!(self, Reason::Syntax | Reason::ConstantMismatch | Reason::ValueMismatch)
    }

    /// A stable label for stats and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Syntax => "syntax",
            Reason::NotOneStatement => "not_one_statement",
            Reason::Utility => "utility",
            Reason::SelectInto => "select_into",
            Reason::Position => "position",
            Reason::GroupBy => "group_by",
            Reason::TypeModifier => "type_modifier",
            Reason::IntervalQualifier => "interval_qualifier",
            Reason::ExtractField => "extract_field",
            Reason::ConstantRequired => "constant_required",
            Reason::ConstantMismatch => "constant_mismatch",
            Reason::ValueMismatch => "value_mismatch",
            Reason::RewriteInvalid => "rewrite_invalid",
            Reason::IntervalParameter => "interval_parameter",
            Reason::ResultMismatch => "result_mismatch",
            Reason::Rules => "rules",
        }
    }
}

/// Decides whether the query `sql`, as `lexed`, may be rewritten.
pub fn validate(sql: &str, lexed: &Lexed) -> Verdict {
    match rewrite(sql, lexed) {
        Ok(rewrite) => Verdict::Rewrite(rewrite),
        Err(reason) => Verdict::PassThrough(reason),
    }
}

fn rewrite(sql: &str, lexed: &Lexed) -> Result<Rewrite, Reason> {
    let parsed = pg_query::parse(sql).map_err(|_| Reason::Syntax)?;
    let statement = single_statement(&parsed.protobuf)?;
    let kind = preparable_kind(statement)?;
    let tree = Tree::walk(statement);
    if tree.select_into {
        return Err(Reason::SelectInto);
    }
    check_slots(sql, lexed, &tree)?;
    let rewritten = lexed.rewritten(sql);
    check_rewritten(sql, &rewritten, kind, lexed.slots().len())?;
    let assignable = lexed
        .slots()
        .iter()
        .map(|slot| tree.assigns && slot.param_type() == 0 && !tree.cast.contains(&(slot.start as usize)))
        .collect();
    Ok(Rewrite { kind, sql: rewritten, param_types: lexed.param_types().to_vec(), assignable })
}

fn single_statement(result: &pg_query::protobuf::ParseResult) -> Result<&NodeEnum, Reason> {
    match result.stmts.as_slice() {
        [raw] => raw.stmt.as_ref().and_then(|node| node.node.as_ref()).ok_or(Reason::NotOneStatement),
        _ => Err(Reason::NotOneStatement),
    }
}

/// protocol.md §1.4: what SQL `PREPARE` takes. Protocol Parse takes anything,
/// but utility statements get no parameter analysis and must stay visible to
/// the pooler (BEGIN, SET, DISCARD, ...).
fn preparable_kind(statement: &NodeEnum) -> Result<StatementKind, Reason> {
    match statement {
        NodeEnum::SelectStmt(select) if select.values_lists.is_empty() => Ok(StatementKind::Select),
        NodeEnum::SelectStmt(_) => Ok(StatementKind::Values),
        NodeEnum::InsertStmt(_) => Ok(StatementKind::Insert),
        NodeEnum::UpdateStmt(_) => Ok(StatementKind::Update),
        NodeEnum::DeleteStmt(_) => Ok(StatementKind::Delete),
        NodeEnum::MergeStmt(_) => Ok(StatementKind::Merge),
        _ => Err(Reason::Utility),
    }
}

/// A constant of the parse tree.
#[derive(Debug, Clone, PartialEq)]
enum Constant {
    /// The scanner's int4.
    Integer(i64),
    /// The scanner's float string: an integer too big for int4, or a number
    /// with `.` or an exponent (negated by `doNegate` if signed).
    Float(String),
    String(String),
    /// `b101` or `x1F`.
    Bits(String),
    /// NULL, TRUE, FALSE and other keywords made constants.
    Other,
}

impl Constant {
    fn from_json(a_const: &Value) -> Constant {
        let val = &a_const["val"];
        if let Some(n) = val["Ival"]["ival"].as_i64() {
            Constant::Integer(n)
        } else if let Some(f) = val["Fval"]["fval"].as_str() {
            Constant::Float(f.to_owned())
        } else if let Some(s) = val["Sval"]["sval"].as_str() {
            Constant::String(s.to_owned())
        } else if let Some(b) = val["Bsval"]["bsval"].as_str() {
            Constant::Bits(b.to_owned())
        } else {
            Constant::Other
        }
    }

    /// Whether the lexer's slot of `kind` with `value` is this constant.
    fn matches(&self, kind: LiteralKind, value: &[u8]) -> bool {
        match self {
            Constant::Integer(n) => {
                kind == LiteralKind::Int4 && std::str::from_utf8(value).ok().and_then(|v| v.parse::<i64>().ok()) == Some(*n)
            }
            // `make_const`: an int8 if it parses as one (an int4 if it fits:
            // only `-2147483648` gets here), else numeric.
            Constant::Float(f) => {
                let expected = match f.parse::<i64>() {
                    Ok(n) if i32::try_from(n).is_ok() => LiteralKind::Int4,
                    Ok(_) => LiteralKind::Int8,
                    Err(_) => LiteralKind::Numeric,
                };
                kind == expected && f.as_bytes() == value
            }
            Constant::String(s) => {
                matches!(kind, LiteralKind::String | LiteralKind::EscapeString | LiteralKind::DollarString)
                    && s.as_bytes() == value
            }
            Constant::Bits(b) => matches!(kind, LiteralKind::BitString | LiteralKind::HexString) && b.as_bytes() == value,
            Constant::Other => false,
        }
    }
}

/// What the validator needs from a parse tree, gathered in one walk over its
/// JSON form (pg_query's types derive `Serialize`): generic and complete over
/// every node type, unlike pg_query's `nodes()`.
#[derive(Debug, Default)]
struct Tree {
    /// Constants by byte offset in the text; each with the reason it must
    /// not become a parameter, if any.
    constants: HashMap<usize, (Constant, Option<Reason>)>,
    /// `$n` numbers (of a rewritten text).
    params: Vec<i64>,
    select_into: bool,
    /// An INSERT, UPDATE or MERGE anywhere.
    assigns: bool,
    /// Constants cast right away (`'…'::t`, `CAST('…' AS t)`), by offset.
    cast: HashSet<usize>,
}

impl Tree {
    fn walk(statement: &NodeEnum) -> Tree {
        let mut tree = Tree::default();
        // pg_query's types always serialize; an empty tree would only fail
        // the checks below.
        if let Ok(json) = serde_json::to_value(statement) {
            tree.visit(&json, None);
        }
        tree
    }

    fn visit(&mut self, value: &Value, inherited: Option<Reason>) {
        match value {
            Value::Array(items) => items.iter().for_each(|item| self.visit(item, inherited)),
            Value::Object(fields) => {
                for (key, child) in fields {
                    let context = inherited.or(match key.as_str() {
                        "group_clause" => Some(Reason::GroupBy),
                        "typmods" | "array_bounds" => Some(Reason::TypeModifier),
                        "cycle_clause" => Some(Reason::ConstantRequired),
                        _ => None,
                    });
                    self.inspect(key, child);
                    if key == "AConst" {
                        self.add_constant(child, context);
                    }
                    self.visit(child, context);
                }
            }
            _ => {}
        }
    }

    /// Marks constants whose meaning depends on the node right above them.
    fn inspect(&mut self, key: &str, node: &Value) {
        match key {
            // `ORDER BY 1`, also inside a window or an aggregate: positional
            // or not, keep it a constant (protocol.md §1.2).
            "SortBy" => self.mark(&node["node"], Reason::Position),
            "distinct_clause" => {
                for item in node.as_array().into_iter().flatten() {
                    self.mark(item, Reason::Position);
                }
            }
            // `'1'::interval hour`: a parameter is read as seconds, then
            // truncated (protocol.md §1.1).
            "TypeCast" => {
                if let Some(location) = location(&node["arg"]["node"]["AConst"]) {
                    self.cast.insert(location);
                }
                if is_interval_with_typmods(&node["type_name"]) {
                    self.mark(&node["arg"], Reason::IntervalQualifier);
                }
            }
            "FuncCall" if last_name(&node["funcname"]) == Some("extract") => {
                self.mark(&node["args"][0], Reason::ExtractField);
            }
            "into_clause" if !node.is_null() => self.select_into = true,
            "InsertStmt" | "UpdateStmt" | "MergeStmt" => self.assigns = true,
            "ParamRef" => self.params.push(node["number"].as_i64().unwrap_or(0)),
            _ => {}
        }
    }

    /// Gives the constant that is directly `node` (a `Node` message) `reason`.
    fn mark(&mut self, node: &Value, reason: Reason) {
        let a_const = &node["node"]["AConst"];
        if let Some(location) = location(a_const) {
            let entry = self.constants.entry(location).or_insert((Constant::from_json(a_const), None));
            entry.1.get_or_insert(reason);
        }
    }

    fn add_constant(&mut self, a_const: &Value, context: Option<Reason>) {
        if let Some(location) = location(a_const) {
            let entry = self.constants.entry(location).or_insert((Constant::from_json(a_const), None));
            if let Some(reason) = context {
                entry.1.get_or_insert(reason);
            }
        }
    }
}

/// A node's byte offset in the text (none for constants the grammar made up).
fn location(node: &Value) -> Option<usize> {
    node["location"].as_i64().and_then(|l| usize::try_from(l).ok())
}

/// The last name of a qualified name list (`pg_catalog.extract` → `extract`).
fn last_name(names: &Value) -> Option<&str> {
    names.as_array()?.last()?["node"]["String"]["sval"].as_str()
}

fn is_interval_with_typmods(type_name: &Value) -> bool {
    last_name(&type_name["names"]) == Some("interval")
        && type_name["typmods"].as_array().is_some_and(|typmods| !typmods.is_empty())
}

/// Every slot is a safe constant of the parser, with the same value; every
/// other constant is kept by the lexer or made from a keyword.
fn check_slots(sql: &str, lexed: &Lexed, tree: &Tree) -> Result<(), Reason> {
    for (i, slot) in lexed.slots().iter().enumerate() {
        let (constant, unsafe_context) = tree.constants.get(&(slot.start as usize)).ok_or(Reason::ConstantMismatch)?;
        if let Some(reason) = unsafe_context {
            return Err(*reason);
        }
        if !constant.matches(slot.kind, lexed.value(i)) {
            return Err(Reason::ValueMismatch);
        }
    }
    let lexed_at: HashSet<usize> =
        lexed.slots().iter().map(|slot| slot.start as usize).chain(lexed.kept().iter().map(|kept| kept.start as usize)).collect();
    for &location in tree.constants.keys() {
        if !lexed_at.contains(&location) && !starts_keyword(sql, location) {
            return Err(Reason::ConstantMismatch);
        }
    }
    Ok(())
}

/// Whether a word (not a prefixed string like `E'…'`) starts at `location`.
fn starts_keyword(sql: &str, location: usize) -> bool {
    let bytes = sql.as_bytes();
    match bytes.get(location) {
        Some(&c) if c.is_ascii_alphabetic() || c == b'_' => bytes.get(location + 1) != Some(&b'\''),
        _ => false,
    }
}

/// The rewritten text is one statement of the same kind and structure, with
/// exactly the parameters `$1..$n`.
fn check_rewritten(sql: &str, rewritten: &str, kind: StatementKind, params: usize) -> Result<(), Reason> {
    let parsed = pg_query::parse(rewritten).map_err(|_| Reason::RewriteInvalid)?;
    let statement = single_statement(&parsed.protobuf).map_err(|_| Reason::RewriteInvalid)?;
    if preparable_kind(statement) != Ok(kind) {
        return Err(Reason::RewriteInvalid);
    }
    let mut numbers = Tree::walk(statement).params;
    numbers.sort_unstable();
    if !numbers.iter().copied().eq(1..=params as i64) {
        return Err(Reason::RewriteInvalid);
    }
    let fingerprint = |text: &str| pg_query::fingerprint(text).map(|f| f.value).map_err(|_| Reason::RewriteInvalid);
    if fingerprint(sql)? != fingerprint(rewritten)? {
        return Err(Reason::RewriteInvalid);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prepare::lexer::{oid, LexOptions};
    use proptest::prelude::*;

    fn verdict(sql: &str) -> Verdict {
        let mut lexed = Lexed::new();
        lexed.lex(sql, LexOptions::default()).unwrap_or_else(|e| panic!("{sql:?} did not lex: {e}"));
        validate(sql, &lexed)
    }

    fn rewritten(sql: &str) -> Rewrite {
        match verdict(sql) {
            Verdict::Rewrite(rewrite) => rewrite,
            Verdict::PassThrough(reason) => panic!("{sql:?} passes through: {reason}"),
        }
    }

    fn reason(sql: &str) -> Reason {
        match verdict(sql) {
            Verdict::Rewrite(rewrite) => panic!("{sql:?} is rewritten: {rewrite:?}"),
            Verdict::PassThrough(reason) => reason,
        }
    }

    #[test]
    fn pgbench_select() {
        let rewrite = rewritten("SELECT abalance FROM pgbench_accounts WHERE aid = 12345;");
        assert_eq!(rewrite.sql, "SELECT abalance FROM pgbench_accounts WHERE aid = $1;");
        assert_eq!(rewrite.param_types, [oid::INT4]);
        assert_eq!(rewrite.kind, StatementKind::Select);
    }

    #[test]
    fn preparable_kinds() {
        let cases = [
            ("SELECT 1", StatementKind::Select),
            ("VALUES (1, 'a'), (2, 'b')", StatementKind::Values),
            ("TABLE t", StatementKind::Select),
            ("INSERT INTO t (a) VALUES (1) RETURNING a", StatementKind::Insert),
            ("INSERT INTO t SELECT 1", StatementKind::Insert),
            ("UPDATE t SET a = 2 WHERE b = 'x'", StatementKind::Update),
            ("DELETE FROM t WHERE a = -1", StatementKind::Delete),
            ("MERGE INTO t USING s ON t.a = s.a WHEN MATCHED THEN UPDATE SET b = 1 WHEN NOT MATCHED THEN INSERT VALUES (s.a, 2)", StatementKind::Merge),
            ("WITH d AS (DELETE FROM t WHERE a = 1 RETURNING *) SELECT count(*) FROM d", StatementKind::Select),
            ("SELECT * FROM t WHERE a = 1 FOR UPDATE SKIP LOCKED", StatementKind::Select),
        ];
        for (sql, kind) in cases {
            assert_eq!(rewritten(sql).kind, kind, "{sql}");
        }
    }

    #[test]
    fn utility_statements_pass_through() {
        for sql in [
            "BEGIN",
            "COMMIT",
            "SET search_path = 'x'",
            "SET statement_timeout TO 5",
            "SHOW work_mem",
            "EXPLAIN SELECT * FROM t WHERE a = 1",
            "CREATE TABLE t (a varchar(10) DEFAULT 'x')",
            "ALTER TABLE t ADD COLUMN b int DEFAULT 0",
            "COPY t FROM STDIN",
            "DISCARD ALL",
            "PREPARE p AS SELECT 1",
            "EXECUTE p(1)",
            "DECLARE c CURSOR FOR SELECT 1",
            "LISTEN x",
            "DO $$BEGIN END$$",
            "CALL f(1)",
            "VACUUM t",
        ] {
            assert_eq!(reason(sql), Reason::Utility, "{sql}");
        }
    }

    #[test]
    fn select_into_passes_through() {
        assert_eq!(reason("SELECT 1 AS a INTO new_table"), Reason::SelectInto);
        assert_eq!(reason("SELECT 1 AS a INTO new_table UNION SELECT 2"), Reason::SelectInto);
    }

    #[test]
    fn syntax_errors_pass_through() {
        assert_eq!(reason("SELEC 1"), Reason::Syntax);
        assert_eq!(reason("SELECT 1 FROM"), Reason::Syntax);
        assert_eq!(reason("SELECT t.5 FROM t"), Reason::Syntax);
    }

    #[test]
    fn interval_qualifiers_pass_through() {
        // protocol.md §1.1: `$1::interval hour` reads '1' as one second.
        assert_eq!(reason("SELECT '1'::interval hour"), Reason::IntervalQualifier);
        assert_eq!(reason("SELECT CAST('1' AS interval day to second)"), Reason::IntervalQualifier);
        assert_eq!(reason("SELECT '1'::pg_catalog.interval(2)"), Reason::IntervalQualifier);
        // Without a qualifier, and as a typed literal (kept), all is well.
        assert_eq!(rewritten("SELECT '1 hour'::interval, interval '1' hour").sql, "SELECT $1::interval, interval '1' hour");
    }

    #[test]
    fn kept_constants_are_fine() {
        let sql = "SELECT date '2024-01-01', extract('epoch' FROM ts), 'a'::varchar(3), count(*) \
                   FROM t WHERE x = 5 GROUP BY 1, date_trunc('day', ts) ORDER BY 2 DESC LIMIT 10";
        let rewrite = rewritten(sql);
        assert_eq!(
            rewrite.sql,
            "SELECT date '2024-01-01', extract('epoch' FROM ts), $1::varchar(3), count(*) \
             FROM t WHERE x = $2 GROUP BY 1, date_trunc('day', ts) ORDER BY 2 DESC LIMIT $3"
        );
        assert_eq!(rewrite.param_types, [oid::UNKNOWN, oid::INT4, oid::INT4]);
    }

    #[test]
    fn keywords_made_constants_are_fine() {
        let sql = "SELECT NULL, true, extract(day FROM ts), interval '1' day, x FROM t LIMIT ALL";
        assert_eq!(rewritten(sql).sql, sql);
        assert_eq!(rewritten("SELECT x FROM t FETCH FIRST ROW ONLY").param_types, Vec::<u32>::new());
    }

    #[test]
    fn lexer_slots_the_parser_disagrees_with() {
        // `timestamp(3) '…'`: the lexer takes the precision for a value.
        assert_eq!(reason("SELECT timestamp(3) '2024-01-01 00:00'"), Reason::TypeModifier);
        // A typed literal with modifiers: the lexer sees `(10, 2)` as values.
        assert_eq!(reason("SELECT numeric(10, 2) '1.5'"), Reason::TypeModifier);
        // `ROWS -5 PRECEDING`: the grammar folds a minus the lexer took for a
        // subtraction after the word ROWS.
        assert_eq!(reason("SELECT sum(x) OVER (ORDER BY y ROWS -5 PRECEDING) FROM t"), Reason::ConstantMismatch);
        // `- - 5` is one constant 5 at the first minus.
        assert_eq!(reason("SELECT - - 5"), Reason::ConstantMismatch);
    }

    #[test]
    fn values_are_checked_against_the_parser() {
        let rewrite = rewritten(
            "SELECT -2147483648, 2147483648, -9223372036854775808, 99999999999999999999, 1.5e3, 007, -0, \
             E'a\\tb', 'it''s', $q$x$q$, B'101', X'1F', 'a'\n'b'",
        );
        assert_eq!(rewrite.param_types, [23, 20, 20, 1700, 1700, 23, 23, 0, 0, 0, 1560, 1560, 0]);
    }

    #[test]
    fn positions_the_lexer_would_keep_are_refused_if_slotted() {
        // Marked in the tree whatever the lexer does.
        let tree = |sql: &str| {
            let parsed = pg_query::parse(sql).unwrap();
            Tree::walk(single_statement(&parsed.protobuf).unwrap())
        };
        let reasons = |sql: &str| {
            let mut found: Vec<(usize, Option<Reason>)> = tree(sql).constants.into_iter().map(|(l, (_, r))| (l, r)).collect();
            found.sort_unstable_by_key(|&(l, _)| l);
            found.into_iter().map(|(_, r)| r).collect::<Vec<_>>()
        };
        assert_eq!(
            reasons("SELECT DISTINCT ON (1) a FROM t GROUP BY a + 2 ORDER BY 3, a + 4"),
            [Some(Reason::Position), Some(Reason::GroupBy), Some(Reason::Position), None]
        );
        // (Array bounds are plain integers, no constants.)
        assert_eq!(
            reasons("SELECT '1'::numeric(3, 1), x::int[2]"),
            [None, Some(Reason::TypeModifier), Some(Reason::TypeModifier)]
        );
        assert_eq!(reasons("SELECT extract('day' FROM x)"), [Some(Reason::ExtractField)]);
        assert_eq!(
            reasons(
                "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n FROM r) CYCLE n SET c TO 'y' DEFAULT 'n' USING p SELECT 1"
            ),
            [None, Some(Reason::ConstantRequired), Some(Reason::ConstantRequired), None]
        );
    }

    #[test]
    fn parameter_descriptions() {
        let select = rewritten("SELECT 1, 'a', 1.5, '1 day'::interval, '{1 day}'");
        assert_eq!(select.check_parameter_types(&[23, 25, 1700, 1186, 1187]), Ok(()));
        assert_eq!(select.check_parameter_types(&[20, 25, 1700, 1186, 1187]), Err(Reason::RewriteInvalid));
        assert_eq!(select.check_parameter_types(&[23]), Err(Reason::RewriteInvalid));
        let insert = rewritten("INSERT INTO t VALUES ('1', '{1}', '1'::interval)");
        assert_eq!(insert.check_parameter_types(&[1186, 25, 1186]), Err(Reason::IntervalParameter));
        assert_eq!(insert.check_parameter_types(&[25, 1187, 1186]), Err(Reason::IntervalParameter));
        assert_eq!(insert.check_parameter_types(&[25, 1007, 1186]), Ok(()));
        let update = rewritten("WITH u AS (UPDATE t SET a = '1' RETURNING a) SELECT a FROM u");
        assert_eq!(update.check_parameter_types(&[1186]), Err(Reason::IntervalParameter));
    }

    #[test]
    fn reasons_have_distinct_labels() {
        let labels: HashSet<&str> = Reason::ALL.iter().map(|r| r.as_str()).collect();
        assert_eq!(labels.len(), Reason::ALL.len());
    }

    // -- generated queries ----------------------------------------------------

    // Boxed: the nested strategy types overflow a test thread's stack in debug.
    fn literal() -> BoxedStrategy<String> {
        prop_oneof![
            any::<i64>().prop_map(|n| n.to_string()),
            (0u32..100).prop_map(|n| n.to_string()),
            "[0-9]{19,24}",
            (any::<i32>(), 0u32..1000).prop_map(|(a, b)| format!("{a}.{b}")),
            (1u32..100, -20i32..20).prop_map(|(a, e)| format!("{a}e{e}")),
            "[a-z ']{0,8}".prop_map(|s| format!("'{}'", s.replace('\'', "''"))),
            "[a-z\\\\']{0,6}".prop_map(|s| format!("E'{}'", s.replace('\\', "\\\\").replace('\'', "\\'"))),
            "[a-z' ]{0,6}".prop_map(|s| format!("$q${s}$q$")),
            "[01]{0,8}".prop_map(|s| format!("B'{s}'")),
            "[0-9A-F]{0,4}".prop_map(|s| format!("X'{s}'")),
        ]
        .boxed()
    }

    fn column() -> impl Strategy<Value = &'static str> {
        prop::sample::select(vec!["a", "b", "t.c", "\"D\""])
    }

    fn expression() -> BoxedStrategy<String> {
        let operator = prop::sample::select(vec!["=", "<>", "<", ">=", "+", "-", "*", "||", "LIKE"]);
        let cast = prop::sample::select(vec!["int", "text", "numeric(10,2)", "varchar(3)", "int[]", "date"]);
        prop_oneof![
            literal(),
            (column(), operator, literal()).prop_map(|(c, o, l)| format!("{c} {o} {l}")),
            (column(), literal(), literal()).prop_map(|(c, a, b)| format!("{c} IN ({a}, {b})")),
            (column(), literal(), literal()).prop_map(|(c, a, b)| format!("{c} BETWEEN {a} AND {b}")),
            (literal(), cast).prop_map(|(l, t)| format!("{l}::{t}")),
            (column(), literal()).prop_map(|(c, l)| format!("coalesce({c}, {l})")),
            (column(), literal(), literal()).prop_map(|(c, a, b)| format!("CASE WHEN {c} = {a} THEN {b} ELSE a END")),
            (literal(), literal()).prop_map(|(a, b)| format!("ARRAY[{a}, {b}]")),
            "[0-9]{1,5}".prop_map(|n| format!("-{n}")),
            ("[0-9]{1,5}", column()).prop_map(|(n, c)| format!("{c} - -{n}")),
        ]
        .boxed()
    }

    fn query() -> BoxedStrategy<String> {
        let select = (
            prop::collection::vec(expression(), 1..4),
            prop::collection::vec(expression(), 0..3),
            prop::sample::select(vec!["", " ORDER BY 1", " ORDER BY a DESC, 2", " GROUP BY a, 1"]),
            prop::option::of(0u32..1000),
            prop::option::of(0u32..1000),
        )
            .prop_map(|(targets, conditions, order, limit, offset)| {
                let mut sql = format!("SELECT {} FROM t", targets.join(", "));
                if !conditions.is_empty() {
                    sql += &format!(" WHERE {}", conditions.join(" AND "));
                }
                sql += order;
                if let Some(limit) = limit {
                    sql += &format!(" LIMIT {limit}");
                }
                if let Some(offset) = offset {
                    sql += &format!(" OFFSET {offset}");
                }
                sql
            })
            .boxed();
        let insert = prop::collection::vec((literal(), literal()), 1..4).prop_map(|rows| {
            let rows: Vec<String> = rows.iter().map(|(a, b)| format!("({a}, {b})")).collect();
            format!("INSERT INTO t (a, b) VALUES {} RETURNING a, 'x'", rows.join(", "))
        });
        let update = (literal(), expression(), expression())
            .prop_map(|(value, set, condition)| format!("UPDATE t SET a = {value}, b = {set} WHERE {condition}"));
        let delete = expression().prop_map(|condition| format!("DELETE FROM t WHERE {condition}"));
        prop_oneof![select, insert.boxed(), update.boxed(), delete.boxed()].boxed()
    }

    /// `$n` → `$`: pg_query numbers parameters in tree order, not text order.
    fn unnumbered(text: &str) -> String {
        let mut out = String::with_capacity(text.len());
        let mut chars = text.chars().peekable();
        while let Some(c) = chars.next() {
            out.push(c);
            if c == '$' {
                while chars.peek().is_some_and(|d| d.is_ascii_digit()) {
                    chars.next();
                }
            }
        }
        out
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(500))]

        /// The lexer's slots are exactly pg_query's normalized constants, the
        /// validator accepts the shape, and the rewritten text parses.
        #[test]
        fn generated_queries_match_pg_query(sql in query()) {
            let mut lexed = Lexed::new();
            lexed.lex(&sql, LexOptions::default()).map_err(|e| TestCaseError::fail(format!("{sql}: {e}")))?;
            let normalized = pg_query::normalize(&sql).map_err(|e| TestCaseError::fail(format!("{sql}: {e}")))?;
            prop_assert_eq!(unnumbered(&lexed.rewritten(&sql)), unnumbered(&normalized), "{}", sql);
            match validate(&sql, &lexed) {
                Verdict::Rewrite(rewrite) => {
                    prop_assert!(pg_query::parse(&rewrite.sql).is_ok());
                    prop_assert_eq!(rewrite.param_types.as_slice(), lexed.param_types());
                }
                Verdict::PassThrough(reason) => prop_assert!(false, "{} passes through: {}", sql, reason),
            }
        }
    }
}
