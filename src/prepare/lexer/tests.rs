//! The lexer's rules, tested through its public API: what becomes a slot,
//! what is kept and why, what is refused, shapes, rewrites and positions.

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
    for sql in
        ["SELECT 0x1F", "SELECT 1_000", "SELECT 123abc", "SELECT 1e", "SELECT 1e+", "SELECT 1..2", "SELECT 1.2.3", "SELECT 1$"]
    {
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
    for sql in
        [r"SELECT E'\0'", r"SELECT E'\xff'", r"SELECT E'\u12'", r"SELECT E'\uD800'", r"SELECT E'\u0000'", r"SELECT E'\U0011FFFF'"]
    {
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
    let sql = "SELECT DISTINCT ON (1, a) a, rank() OVER (PARTITION BY 1 ORDER BY 2 ROWS BETWEEN 3 PRECEDING AND 4 FOLLOWING) \
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
    let (text, types, values) = rewrite(
        "INSERT INTO t (a, b, c) VALUES (1, 'x', 2.5), (-2, E'y', NULL) ON CONFLICT (a) DO UPDATE SET b = 'z' RETURNING a, 'r'",
    );
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

/// Pieces that exercise every branch of the lexer when glued at random.
fn sqlish() -> impl Strategy<Value = String> {
    let piece = prop::sample::select(vec![
        "SELECT", " ", "\n", "'", "''", "\"", "E'", "B'", "X'", "N'", "U&'", "$$", "$a$", "$1", "$", "--", "/*", "*/", "(", ")",
        "[", "]", ",", ";", ":", "::", ":=", ".", "-", "+", "=", "<>", "@-", "1", "2.5", ".5", "1e", "e", "ORDER", "BY", "GROUP",
        "DISTINCT", "ON", "AS", "extract", "interval", "now", "\\", "\\x41", "\\u00e9", "\\U", "\\0", "é", "\u{a0}", "\u{b}",
        "\r", "x", "int", "(3)",
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

    #[test]
    fn never_panics_on_sqlish_strings(sql in sqlish(), scs in any::<bool>()) {
        let mut lexed = Lexed::new();
        if lexed.lex(&sql, LexOptions { standard_conforming_strings: scs }).is_ok() {
            check_invariants(&sql, &lexed);
        }
    }
}
