//! Whether a client's request may run on a standby: small pure functions
//! over its bytes and its SQL, and the shard's cache of the SQL verdicts.
//!
//! The rule is no false positives: a request is a read only if pg_query's
//! parse proves it. Anything this module cannot prove (a statement it does
//! not know, a function not on its list, a Bind of the unnamed statement
//! Parsed in an earlier request, a Bind of a name the client has not
//! prepared, an incomplete request) is not a read, and goes to the primary.
//! It owns no state but the cache; it never looks at a session (the text of
//! a client's named statement is handed in).

use std::cell::RefCell;
use std::collections::HashMap;

use pg_query::protobuf::TransactionStmtKind;
use pg_query::NodeRef;

use crate::protocol::frame::{parse_header, HEADER_LEN};
use crate::protocol::frontend;
use crate::protocol::nul_at;

/// What a request (or one statement text) is, for routing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Reads only, and ends where it began, outside a transaction block:
    /// a standby may answer it.
    Read,
    /// Opens a transaction block that is read-only (`BEGIN READ ONLY`):
    /// the whole transaction may run on a standby, where a write fails as
    /// it would on the primary (25006).
    ReadOnlyBlock,
    /// Anything else: the primary.
    Other,
}

/// Names a provably read-only SELECT may put before `(`: built-in
/// functions that never write and that a standby runs, and the keywords
/// and type names that take parentheses (`exists (`, `over (`,
/// `numeric(10, 2)`). A call of any other name (nextval, a user's function
/// that inserts, a quoted name) makes the statement not a read. Matched
/// unqualified or qualified by `pg_catalog`, case-folded as PostgreSQL
/// folds unquoted names. (A user's overload of one of these names for a
/// type of its own would be taken for the built-in: see docs/read-routing.md.)
const READ_ONLY_CALLS: &[&str] = &[
    "abs",
    "array_agg",
    "array_length",
    "avg",
    "bit",
    "bool_and",
    "bool_or",
    "btrim",
    "ceil",
    "char",
    "char_length",
    "character",
    "coalesce",
    "concat",
    "count",
    "cube",
    "current_database",
    "current_schema",
    "current_setting",
    "date_part",
    "date_trunc",
    "dec",
    "decimal",
    "exists",
    "extract",
    "filter",
    "float",
    "floor",
    "format",
    "greatest",
    "grouping",
    "inet_server_addr",
    "inet_server_port",
    "json_agg",
    "json_build_object",
    "jsonb_agg",
    "jsonb_build_object",
    "least",
    "left",
    "length",
    "lower",
    "lpad",
    "ltrim",
    "max",
    "md5",
    "min",
    "mod",
    "now",
    "nullif",
    "numeric",
    "over",
    "pg_backend_pid",
    "pg_is_in_recovery",
    "pg_last_wal_replay_lsn",
    "position",
    "random",
    "replace",
    "right",
    "rollup",
    "round",
    "row",
    "rpad",
    "rtrim",
    "sets",
    "string_agg",
    "substr",
    "substring",
    "sum",
    "time",
    "timestamp",
    "to_char",
    "to_json",
    "to_jsonb",
    "trim",
    "trunc",
    "upper",
    "values",
    "varchar",
    "varying",
    "version",
];

/// Whether the name before a `(`, with what precedes it, is a call
/// [`READ_ONLY_CALLS`] allows (`schema` is the qualifier, if any).
fn is_read_only_call(name: &str, schema: Option<&str>) -> bool {
    let folded = name.to_ascii_lowercase();
    let schema_ok = schema.is_none_or(|s| s.eq_ignore_ascii_case("pg_catalog"));
    schema_ok && READ_ONLY_CALLS.binary_search(&folded.as_str()).is_ok()
}

/// The tokens of `sql` show no call of a function not known to be
/// read-only, no row lock (`FOR UPDATE`, `FOR NO KEY UPDATE`, `FOR SHARE`,
/// `FOR KEY SHARE`) and no `INTO`, anywhere, subqueries included.
/// Reserved keywords before `(` (`in (`, `any (`, `array(`) call nothing.
fn tokens_are_harmless(sql: &str) -> bool {
    use pg_query::protobuf::{KeywordKind, Token};
    let Ok(scanned) = pg_query::scan(sql) else { return false };
    let tokens = &scanned.tokens;
    let text = |i: usize| -> &str {
        let t = &tokens[i];
        sql.get(t.start as usize..t.end as usize).unwrap_or("")
    };
    for (i, token) in tokens.iter().enumerate() {
        let kind = token.token;
        if kind == Token::Into as i32 {
            return false;
        }
        if kind == Token::For as i32 {
            let next = tokens.get(i + 1).map(|t| t.token);
            if [Token::Update, Token::Share, Token::No, Token::Key].iter().any(|k| next == Some(*k as i32)) {
                return false;
            }
        }
        if tokens.get(i + 1).map(|t| t.token) != Some(Token::Ascii40 as i32) {
            continue;
        }
        if token.keyword_kind == KeywordKind::ReservedKeyword as i32 {
            continue;
        }
        let callable = kind == Token::Ident as i32 || token.keyword_kind != KeywordKind::NoKeyword as i32;
        if !callable {
            // `)(`, an operator, a literal: no name before the parenthesis.
            continue;
        }
        let schema = (i >= 2 && tokens[i - 1].token == Token::Ascii46 as i32).then(|| text(i - 2));
        if !is_read_only_call(text(i), schema) {
            return false;
        }
    }
    true
}

/// What one SQL text (one or several statements) is.
pub fn classify_sql(sql: &str) -> Kind {
    let Ok(parsed) = pg_query::parse(sql) else { return Kind::Other };
    let statements: Vec<NodeRef<'_>> = parsed
        .protobuf
        .stmts
        .iter()
        .filter_map(|s| s.stmt.as_ref())
        .filter_map(|n| n.node.as_ref())
        .map(|n| n.to_ref())
        .collect();
    if statements.is_empty() || !statements.iter().all(ctes_only_read) || !tokens_are_harmless(sql) {
        return Kind::Other;
    }
    match statements.as_slice() {
        [first, rest @ ..] if is_begin_read_only(first) => {
            // What follows inside the block must be reads, and the block may
            // end only with the text's last statement (after that, the rest
            // would run outside it).
            let body = match rest {
                [body @ .., last] if is_transaction_end(last) => body,
                _ => rest,
            };
            if body.iter().all(is_plain_select) {
                Kind::ReadOnlyBlock
            } else {
                Kind::Other
            }
        }
        all if all.iter().all(is_plain_select) => Kind::Read,
        _ => Kind::Other,
    }
}

/// A SELECT (or VALUES, or TABLE) that neither locks rows nor creates a
/// table; its CTEs and subqueries are checked by [`nodes_are_harmless`].
fn is_plain_select(node: &NodeRef<'_>) -> bool {
    matches!(node, NodeRef::SelectStmt(s) if s.into_clause.is_none() && s.locking_clause.is_empty())
}

/// `BEGIN` or `START TRANSACTION` whose only characteristics are READ ONLY
/// and an isolation level a standby runs (not SERIALIZABLE, which hot
/// standby refuses; not DEFERRABLE).
fn is_begin_read_only(node: &NodeRef<'_>) -> bool {
    let NodeRef::TransactionStmt(t) = node else { return false };
    if !matches!(t.kind(), TransactionStmtKind::TransStmtBegin | TransactionStmtKind::TransStmtStart) {
        return false;
    }
    let mut read_only = false;
    for option in &t.options {
        let Some(pg_query::NodeEnum::DefElem(d)) = option.node.as_ref() else { return false };
        let value = d.arg.as_ref().and_then(|a| a.node.as_ref());
        match (d.defname.as_str(), value) {
            ("transaction_read_only", Some(pg_query::NodeEnum::AConst(c))) => {
                read_only = matches!(&c.val, Some(pg_query::protobuf::a_const::Val::Ival(i)) if i.ival == 1);
                if !read_only {
                    return false;
                }
            }
            ("transaction_isolation", Some(pg_query::NodeEnum::AConst(c))) => {
                let level = match &c.val {
                    Some(pg_query::protobuf::a_const::Val::Sval(s)) => s.sval.as_str(),
                    _ => return false,
                };
                if !matches!(level, "read committed" | "repeatable read" | "read uncommitted") {
                    return false;
                }
            }
            _ => return false,
        }
    }
    read_only
}

/// COMMIT, END or ROLLBACK (not to a savepoint, not AND CHAIN).
fn is_transaction_end(node: &NodeRef<'_>) -> bool {
    let NodeRef::TransactionStmt(t) = node else { return false };
    matches!(t.kind(), TransactionStmtKind::TransStmtCommit | TransactionStmtKind::TransStmtRollback) && !t.chain
}

/// Every WITH of a top-level statement is a plain query (a
/// data-modifying WITH may only be at the top level, so that is all of them).
fn ctes_only_read(node: &NodeRef<'_>) -> bool {
    let NodeRef::SelectStmt(s) = node else { return true };
    s.with_clause.as_ref().is_none_or(|w| {
        w.ctes.iter().all(|cte| match cte.node.as_ref() {
            Some(pg_query::NodeEnum::CommonTableExpr(c)) => {
                matches!(c.ctequery.as_ref().and_then(|q| q.node.as_ref()), Some(pg_query::NodeEnum::SelectStmt(_)))
            }
            _ => false,
        })
    })
}

/// The statement text a Query or Parse message body carries.
fn text_of(tag: u8, body: &[u8]) -> Option<&[u8]> {
    let body = match tag {
        frontend::QUERY => body,
        frontend::PARSE => {
            let name_end = nul_at(body)?;
            body.get(name_end + 1..)?
        }
        _ => return None,
    };
    let end = nul_at(body)?;
    Some(&body[..end])
}

/// The statement name a Parse message body prepares (empty: the unnamed one).
fn parse_name(body: &[u8]) -> Option<&[u8]> {
    nul_at(body).map(|end| &body[..end])
}

/// The statement name a Bind message body binds (after the portal name).
fn bind_statement(body: &[u8]) -> Option<&[u8]> {
    let portal_end = nul_at(body)?;
    parse_name(body.get(portal_end + 1..)?)
}

/// What the client's first request in `pending` is: a Query, or extended
/// messages up to and including a Sync. Every statement it Parses (or
/// queries) is judged by `judge`. A Bind must bind a statement Parsed
/// earlier in the same request, or a named statement the client prepared
/// in an earlier request, whose text `prepared` gives (the client's own
/// names: a name it does not give is not a read); the unnamed statement of
/// an earlier request is not known here. The request must be whole in
/// `pending`.
pub fn classify_request<'s>(
    pending: &[u8],
    max_body: usize,
    mut judge: impl FnMut(&[u8]) -> Kind,
    prepared: impl Fn(&[u8]) -> Option<&'s [u8]>,
) -> Kind {
    let mut at = 0;
    let mut verdict: Option<Kind> = None;
    // The statements this request Parses, each proven a read.
    let mut parsed: Vec<&[u8]> = Vec::new();
    loop {
        let Ok(Some(header)) = parse_header(&pending[at..], max_body) else { return Kind::Other };
        let Some(body) = pending.get(at + HEADER_LEN..at + HEADER_LEN + header.body_len) else { return Kind::Other };
        at += HEADER_LEN + header.body_len;
        match header.tag {
            frontend::QUERY if verdict.is_none() => {
                return text_of(header.tag, body).map_or(Kind::Other, &mut judge);
            }
            frontend::PARSE => {
                let (Some(name), Some(text)) = (parse_name(body), text_of(header.tag, body)) else { return Kind::Other };
                if judge(text) != Kind::Read {
                    return Kind::Other;
                }
                parsed.push(name);
                verdict = Some(Kind::Read);
            }
            frontend::BIND => {
                let Some(name) = bind_statement(body) else { return Kind::Other };
                // A name Parsed here is a read; if the client also had it
                // from before, that Parse fails and so does this Bind.
                let known =
                    parsed.contains(&name) || (!name.is_empty() && prepared(name).is_some_and(|text| judge(text) == Kind::Read));
                if !known {
                    return Kind::Other;
                }
                verdict = Some(Kind::Read);
            }
            frontend::DESCRIBE | frontend::EXECUTE | frontend::FLUSH if verdict.is_some() => {}
            frontend::SYNC => return verdict.unwrap_or(Kind::Other),
            _ => return Kind::Other,
        }
    }
}

/// The client's first request in `pending` (up to and with its Query or
/// Sync), if it can run a second time on another server: its length, and
/// the statement names it Parses (none for a simple Query, nor for the
/// unnamed statement). A named Parse adds the name to the client's
/// statements as it goes out: the caller forgets those before the second
/// run (or it would fail with 42P05), and holds no request that Parses a
/// name the client already has. `None` for other messages (a Close
/// changes the client's statements), and if the request is not all in
/// `pending`. For a read routed to a standby, which runs again on the
/// primary if the standby refuses or loses it (`client::routing`).
pub fn repeatable_request(pending: &[u8], max_body: usize) -> Option<(usize, Vec<&[u8]>)> {
    let mut at = 0;
    let mut parsed = Vec::new();
    loop {
        let header = parse_header(&pending[at..], max_body).ok()??;
        let body = pending.get(at + HEADER_LEN..at + HEADER_LEN + header.body_len)?;
        at += HEADER_LEN + header.body_len;
        match header.tag {
            frontend::QUERY | frontend::SYNC => return Some((at, parsed)),
            frontend::PARSE => {
                let name = parse_name(body)?;
                if !name.is_empty() {
                    parsed.push(name);
                }
            }
            frontend::BIND | frontend::DESCRIBE | frontend::EXECUTE | frontend::FLUSH => {}
            _ => return None,
        }
    }
}

/// The shard's verdicts on statement texts, so that a hot statement is
/// parsed once: at most [`Classifier::CAPACITY`] texts, forgotten all at
/// once when full (a verdict costs one parse to find again).
#[derive(Default)]
pub struct Classifier {
    verdicts: RefCell<HashMap<Box<[u8]>, Kind>>,
}

impl Classifier {
    pub const CAPACITY: usize = 4096;

    /// The verdict on `sql`, from the cache or worked out and kept.
    pub fn judge(&self, sql: &[u8]) -> Kind {
        if let Some(kind) = self.verdicts.borrow().get(sql) {
            return *kind;
        }
        let kind = std::str::from_utf8(sql).map_or(Kind::Other, classify_sql);
        let mut verdicts = self.verdicts.borrow_mut();
        if verdicts.len() >= Self::CAPACITY {
            verdicts.clear();
        }
        verdicts.insert(sql.into(), kind);
        kind
    }

    /// The verdict on the client's first request in `pending`, whose named
    /// statements from earlier requests `prepared` gives the text of (see
    /// [`classify_request`]).
    pub fn request<'s>(&self, pending: &[u8], max_body: usize, prepared: impl Fn(&[u8]) -> Option<&'s [u8]>) -> Kind {
        classify_request(pending, max_body, |sql| self.judge(sql), prepared)
    }

    pub fn cached(&self) -> usize {
        self.verdicts.borrow().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BytesMut;

    #[test]
    fn the_function_list_is_sorted_for_its_binary_search() {
        assert!(READ_ONLY_CALLS.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn reads_are_proven_reads() {
        for sql in [
            "select 1",
            "SELECT abalance FROM pgbench_accounts WHERE aid = 5",
            "select count(*) from t where x > $1",
            "with a as (select 1) select * from a",
            "select * from t join u using (id) order by 1 limit 3",
            "values (1), (2)",
            "table t",
            "select pg_catalog.now(), lower('X')",
            "select 1; select 2",
            "select count(*) over (partition by x) from t",
            "select x from t where x in (1, 2) and exists (select 1 from u)",
            "select 1.5::numeric(10, 2), Lower('A'), PG_CATALOG.UPPER('a')",
            "select * from t where id = any(array[1, 2])",
            "select (select max(x) from t) as m",
            "  select 1 -- comment",
        ] {
            assert_eq!(classify_sql(sql), Kind::Read, "{sql}");
        }
    }

    #[test]
    fn anything_that_may_write_lock_or_is_unknown_is_not_a_read() {
        for sql in [
            "insert into t values (1)",
            "update t set x = 1",
            "delete from t",
            "select nextval('s')",
            "select setval('s', 3)",
            "select my_function()",
            "select * from my_function()",
            "select 1 where my_function(1) > 0",
            "select public.lower('x')",
            "select \"nextval\"('s')",
            "select nextval ('s')",
            "select * from (select * from t for no key update) s",
            "select * from t for key share",
            "with a(x) as (select 1) select * from a",
            "select (select nextval('s'))",
            "select x from t order by my_rank(x)",
            "select x from t limit my_limit()",
            "select * from t where x = 1 union select nextval('s')",
            "select * from t for update",
            "select * from t for share",
            "select * into u from t",
            "with d as (delete from t returning *) select * from d",
            "with i as (insert into t values (1) returning *) select 1",
            "select 1; insert into t values (1)",
            "begin",
            "begin read write",
            "commit",
            "set x = 1",
            "show work_mem",
            "create table x (a int)",
            "copy t to stdout",
            "lock t",
            "select pg_advisory_lock(1)",
            "listen x",
            "notify x",
            "explain analyze insert into t values (1)",
            "prepare p as select 1",
            "execute p",
            "declare c cursor with hold for select 1",
            "this is not sql",
            "",
        ] {
            assert_eq!(classify_sql(sql), Kind::Other, "{sql}");
        }
    }

    #[test]
    fn a_read_only_block_is_a_block_of_reads() {
        for sql in [
            "begin read only",
            "BEGIN TRANSACTION READ ONLY",
            "start transaction read only",
            "begin isolation level repeatable read, read only",
            "begin read only; select 1",
            "begin read only; select 1; select 2; commit",
        ] {
            assert_eq!(classify_sql(sql), Kind::ReadOnlyBlock, "{sql}");
        }
        for sql in [
            "begin isolation level serializable, read only",
            "begin read only deferrable",
            "begin read only; insert into t values (1)",
            "begin read only; commit; select 1",
            "begin read only; commit; insert into t values (1)",
            "begin read only; select nextval('s')",
            "begin read only, read write",
        ] {
            assert_eq!(classify_sql(sql), Kind::Other, "{sql}");
        }
    }

    fn message(out: &mut BytesMut, tag: u8, body: &[u8]) {
        out.extend_from_slice(&[tag]);
        out.extend_from_slice(&((body.len() + 4) as i32).to_be_bytes());
        out.extend_from_slice(body);
    }

    fn query(sql: &str) -> BytesMut {
        let mut out = BytesMut::new();
        message(&mut out, b'Q', format!("{sql}\0").as_bytes());
        out
    }

    fn extended(name: &str, sql: &str, bind_name: &str) -> BytesMut {
        let mut out = BytesMut::new();
        message(&mut out, b'P', format!("{name}\0{sql}\0\0\0").as_bytes());
        message(&mut out, b'B', format!("\0{bind_name}\0\0\0\0\0\0\0").as_bytes());
        message(&mut out, b'D', b"P\0");
        message(&mut out, b'E', b"\0\0\0\0\0");
        message(&mut out, b'S', b"");
        out
    }

    /// No statement prepared in an earlier request.
    fn none(_: &[u8]) -> Option<&'static [u8]> {
        None
    }

    #[test]
    fn a_request_is_judged_whole() {
        let c = Classifier::default();
        assert_eq!(c.request(&query("select 1"), 1 << 20, none), Kind::Read);
        assert_eq!(c.request(&query("begin read only"), 1 << 20, none), Kind::ReadOnlyBlock);
        assert_eq!(c.request(&query("select nextval('s')"), 1 << 20, none), Kind::Other);
        assert_eq!(c.request(&extended("", "select $1::int", ""), 1 << 20, none), Kind::Read);
        assert_eq!(c.request(&extended("", "insert into t values ($1)", ""), 1 << 20, none), Kind::Other);
        // A Bind of a statement neither Parsed here nor prepared before.
        assert_eq!(c.request(&extended("", "select 1", "s1"), 1 << 20, none), Kind::Other);
        assert_eq!(c.request(&extended("s1", "select 1", ""), 1 << 20, none), Kind::Other);
        // A second statement in the same request must be a read too.
        let mut two = extended("", "select 1", "");
        two.truncate(two.len() - 5);
        two.extend_from_slice(&extended("", "update t set x = 1", ""));
        assert_eq!(c.request(&two, 1 << 20, none), Kind::Other);
        // Incomplete requests, and other messages, are not reads.
        let whole = extended("", "select 1", "");
        assert_eq!(c.request(&whole[..whole.len() - 5], 1 << 20, none), Kind::Other);
        assert_eq!(c.request(&whole[..7], 1 << 20, none), Kind::Other);
        let mut call = BytesMut::new();
        message(&mut call, b'F', b"\0\0\0\x01");
        assert_eq!(c.request(&call, 1 << 20, none), Kind::Other);
        assert_eq!(c.request(b"", 1 << 20, none), Kind::Other);
    }

    #[test]
    fn a_request_is_repeatable_with_the_names_it_parses() {
        let none: Vec<&[u8]> = Vec::new();
        let simple = query("select 1");
        let mut then_more = simple.clone();
        then_more.extend_from_slice(&query("select 2"));
        assert_eq!(repeatable_request(&then_more, 1 << 20), Some((simple.len(), none.clone())), "the first request only");
        let unnamed = extended("", "select $1::int", "");
        assert_eq!(repeatable_request(&unnamed, 1 << 20), Some((unnamed.len(), none.clone())));
        // A Bind of a statement named in an earlier request leaves nothing behind.
        let bound = extended("", "select 1", "s1");
        let bind_only = &bound[bound.iter().position(|&b| b == b'B').unwrap()..];
        assert_eq!(repeatable_request(bind_only, 1 << 20), Some((bind_only.len(), none.clone())));
        let named = extended("s1", "select 1", "s1");
        assert_eq!(repeatable_request(&named, 1 << 20), Some((named.len(), vec![&b"s1"[..]])), "it names s1");
        assert_eq!(repeatable_request(&unnamed[..unnamed.len() - 5], 1 << 20), None, "no Sync yet");
        assert_eq!(repeatable_request(&simple[..3], 1 << 20), None);
        assert_eq!(repeatable_request(b"", 1 << 20), None);
        let mut close = BytesMut::new();
        message(&mut close, b'C', b"Ss1\0");
        message(&mut close, b'S', b"");
        assert_eq!(repeatable_request(&close, 1 << 20), None, "a Close changes the client's statements");
    }

    #[test]
    fn a_named_statement_is_judged_by_its_text() {
        let c = Classifier::default();
        // Prepared in the request (Parse, Describe of it, Sync: how drivers
        // prepare), and Parsed and run in one request.
        let mut prepare = BytesMut::new();
        message(&mut prepare, b'P', b"s1\0select $1::int\0\0\0");
        message(&mut prepare, b'D', b"Ss1\0");
        message(&mut prepare, b'S', b"");
        assert_eq!(c.request(&prepare, 1 << 20, none), Kind::Read);
        assert_eq!(c.request(&extended("s1", "select 1", "s1"), 1 << 20, none), Kind::Read);
        assert_eq!(c.request(&extended("s1", "delete from t", "s1"), 1 << 20, none), Kind::Other);
        // Bound in a later request: the client's text for the name decides.
        let mut bind = BytesMut::new();
        message(&mut bind, b'B', b"\0s1\0\0\0\0\0\0\0");
        message(&mut bind, b'E', b"\0\0\0\0\0");
        message(&mut bind, b'S', b"");
        let read = |name: &[u8]| (name == b"s1").then_some(&b"select * from t where id = $1"[..]);
        let write = |name: &[u8]| (name == b"s1").then_some(&b"select nextval('s')"[..]);
        assert_eq!(c.request(&bind, 1 << 20, read), Kind::Read);
        assert_eq!(c.request(&bind, 1 << 20, write), Kind::Other);
        assert_eq!(c.request(&bind, 1 << 20, none), Kind::Other);
        // The unnamed statement of an earlier request is not known, even if
        // the lookup would answer for it.
        let mut unnamed = BytesMut::new();
        message(&mut unnamed, b'B', b"\0\0\0\0\0\0\0\0");
        message(&mut unnamed, b'E', b"\0\0\0\0\0");
        message(&mut unnamed, b'S', b"");
        assert_eq!(c.request(&unnamed, 1 << 20, |_: &[u8]| Some(&b"select 1"[..])), Kind::Other);
        // A read Parse, then a Bind of a statement that writes.
        let mut mixed = extended("s2", "select 1", "s2");
        mixed.truncate(mixed.len() - 5);
        mixed.extend_from_slice(&bind);
        assert_eq!(c.request(&mixed, 1 << 20, write), Kind::Other);
        assert_eq!(c.request(&mixed, 1 << 20, read), Kind::Read);
        // A Describe or Execute before anything proven is not a read.
        let mut describe = BytesMut::new();
        message(&mut describe, b'D', b"Ss1\0");
        message(&mut describe, b'S', b"");
        assert_eq!(c.request(&describe, 1 << 20, read), Kind::Other);
    }

    #[test]
    fn verdicts_are_cached_and_bounded() {
        let c = Classifier::default();
        assert_eq!(c.judge(b"select 1"), Kind::Read);
        assert_eq!(c.judge(b"select 1"), Kind::Read);
        assert_eq!(c.cached(), 1);
        for i in 0..Classifier::CAPACITY + 10 {
            c.judge(format!("select {i}").as_bytes());
        }
        assert!(c.cached() <= Classifier::CAPACITY);
        assert_eq!(c.judge(b"\xff\xfe"), Kind::Other);
    }
}
