//! Auto-prepare in the exchange (`exchange::rewrite`): a validated simple
//! query run as its shape's statement, and what its replies become.

use super::*;

const SELECT: &str = "SELECT name FROM t WHERE id = 42 AND note = 'it''s'";

#[test]
fn a_validated_shape_runs_prepared_and_answers_as_a_simple_query() {
    let mut sides = Sides::new();
    let statement = sides.validate(SELECT);
    let mut ex = Exchange::new(Some(1));
    let sent = query(&mut ex, &mut sides, SELECT);
    assert_eq!(tags(&sent), "PBDES");
    assert_eq!(names::split_parse(&sent[0].1).unwrap().0, &*statement.server_name);
    let (portal, name, _) = names::split_bind(&sent[1].1).unwrap();
    assert_eq!((portal, name), ("", &*statement.server_name));
    let mut bind = BytesMut::new();
    frontend::bind(&mut bind, "", &statement.server_name, &[], [Some(&b"42"[..]), Some(&b"it's"[..])].into_iter(), &[]);
    assert_eq!(sent[1].1, bind[HEADER_LEN..], "text parameters, text results");
    assert_eq!(sent[2].1, b"P\0");

    let got = reply(
        &mut ex,
        &mut sides,
        &[
            (b'1', b""),
            (b'2', b""),
            (b'T', b"\0\x01name\0\0\0\0\0\0\0\0\0\0\x19\xff\xff\xff\xff\xff\xff\0\0"),
            (b'D', b"\0\x01\0\0\0\x01x"),
            (b'N', b"SNOTICE\0Mhi\0\0"),
            (b'C', b"SELECT 1\0"),
            (b'Z', b"I"),
        ],
    );
    assert_eq!(tags(&got), "TDNCZ", "no ParseComplete, no BindComplete");
    assert!(ex.is_releasable());

    // The server connection has it now: no second Parse.
    assert_eq!(tags(&query(&mut ex, &mut sides, "SELECT name FROM t WHERE id = 7 AND note = ''")), "BDES");
    // The same statement spelled otherwise runs as the same statement, ...
    assert_eq!(tags(&query(&mut ex, &mut sides, "select NAME from t\nwhere id = 7 and note = '' ;")), "BDES");
    assert_eq!(sides.registry.stats().respellings, 1);
    // ... but a quoted identifier is not the unquoted word.
    assert_eq!(tags(&query(&mut ex, &mut sides, "SELECT \"name\" FROM t WHERE id = 7 AND note = ''")), "Q");
    let got = reply(&mut ex, &mut sides, &[(b'2', b""), (b'n', b""), (b'C', b"SELECT 0\0"), (b'Z', b"I")]);
    assert_eq!(tags(&got), "CZ", "NoData is not the client's");
    reply(&mut ex, &mut sides, &[(b'2', b""), (b'n', b""), (b'C', b"SELECT 0\0"), (b'Z', b"I")]);
    reply(&mut ex, &mut sides, &[(b'C', b"SELECT 0\0"), (b'Z', b"I")]);
    assert_eq!(sides.registry.stats().rewrites, 3);
}

#[test]
fn new_shapes_pass_through_and_are_queued() {
    let mut sides = Sides::new();
    let mut ex = Exchange::new(Some(1));
    let sent = query(&mut ex, &mut sides, SELECT);
    assert_eq!(tags(&sent), "Q");
    assert_eq!(frontend::decode_query(&sent[0].1).unwrap(), SELECT);
    assert_eq!(sides.registry.shapes.len(), 1);
    assert_eq!(sides.registry.stats().pass_throughs, 1);
    // Multi-statement text, and anything once search_path is mentioned, stay as they are.
    assert_eq!(tags(&query(&mut ex, &mut sides, "SELECT 1; SELECT 2")), "Q");
    sides.validate("SELECT 1");
    assert_eq!(tags(&query(&mut ex, &mut sides, "SELECT 1")), "PBDES");
    reply(&mut ex, &mut sides, &[(b'1', b""), (b'2', b""), (b'n', b""), (b'C', b"SELECT 1\0"), (b'Z', b"I")]);
    assert_eq!(tags(&query(&mut ex, &mut sides, "SET search_path = x")), "Q");
    reply(&mut ex, &mut sides, &[(b'C', b"SET\0"), (b'Z', b"I")]);
    assert_eq!(tags(&query(&mut ex, &mut sides, "SELECT 1")), "Q", "auto-prepare is off for this client now");
}

#[test]
fn nothing_is_rewritten_in_a_failed_transaction_or_after_an_unsynced_message() {
    let mut sides = Sides::new();
    sides.validate("SELECT 1");
    let mut ex = Exchange::new(Some(1));
    assert_eq!(tags(&query(&mut ex, &mut sides, "BEGIN")), "Q");
    reply(&mut ex, &mut sides, &[(b'C', b"BEGIN\0"), (b'Z', b"T")]);
    assert_eq!(tags(&query(&mut ex, &mut sides, "SELECT 1")), "PBDES", "inside a transaction block is fine");
    reply(&mut ex, &mut sides, &[(b'E', b"SERROR\0C57014\0Mcanceled\0\0"), (b'Z', b"E")]);
    assert_eq!(tags(&query(&mut ex, &mut sides, "SELECT 1")), "Q");
    let reasons = sides.registry.stats().pass_through_reasons;
    assert_eq!(reasons.get(PassThrough::FailedTransaction), 1);
    reply(&mut ex, &mut sides, &[(b'E', b"SERROR\0C25P02\0Maborted\0\0"), (b'Z', b"E")]);
    assert_eq!(tags(&query(&mut ex, &mut sides, "ROLLBACK")), "Q");
    reply(&mut ex, &mut sides, &[(b'C', b"ROLLBACK\0"), (b'Z', b"I")]);
    // A Parse the client has not Synced yet: the query waits its turn as it is.
    let mut parse = BytesMut::new();
    frontend::parse(&mut parse, "", "SELECT 2", &[]);
    let mut to_server = BytesMut::new();
    ex.from_client(frontend::PARSE, &parse, &mut sides.st(), &mut to_server);
    assert_eq!(tags(&query(&mut ex, &mut sides, "SELECT 1")), "Q");
    let reasons = sides.registry.stats().pass_through_reasons;
    assert_eq!(reasons.get(PassThrough::NotSynced), 1);
    assert_eq!(reasons.total(), sides.registry.stats().pass_throughs);
}

#[test]
fn an_error_points_into_the_clients_text() {
    let mut sides = Sides::new();
    let statement = sides.validate(SELECT);
    let mut ex = Exchange::new(Some(1));
    query(&mut ex, &mut sides, SELECT);
    // "SELECT name FROM t WHERE id = $1 AND note = $2": `note` is at 38 there, 38 in the original too;
    // put it at the `$2` (45), which is the literal at 45 in the original.
    let got = reply(&mut ex, &mut sides, &[(b'E', b"SERROR\0VERROR\0C42703\0Mno\0P45\0Fx.c\0\0"), (b'Z', b"I")]);
    assert_eq!(tags(&got), "EZ");
    assert_eq!(got[0].1, b"SERROR\0VERROR\0C42703\0Mno\0P45\0Fx.c\0\0");
    assert!(!sides.server.has(statement.id), "the failed Parse is undone");
    // A Bind-time input error of $1 gets the literal's position instead of the context line.
    sides.validate("SELECT name FROM t WHERE id = 'x' AND note = 'y'");
    query(&mut ex, &mut sides, "SELECT name FROM t WHERE id = 'x' AND note = 'y'");
    let got = reply(
        &mut ex,
        &mut sides,
        &[(b'1', b""), (b'E', b"SERROR\0C22P02\0Mbad\0Wunnamed portal parameter $1 = '...'\0Rx\0\0"), (b'Z', b"I")],
    );
    assert_eq!(tags(&got), "EZ");
    assert_eq!(got[0].1, b"SERROR\0C22P02\0Mbad\0P31\0Rx\0\0");
    assert!(ex.is_releasable());
}

#[test]
fn error_fields_are_mapped_only_where_they_point_at_the_rewrite() {
    let sql = "SELECT 'éé', 1 + x FROM t";
    let mut lexed = Lexed::new();
    lexed.lex(sql, LexOptions::default()).unwrap();
    assert_eq!(lexed.rewritten(sql), "SELECT $1, $2 + x FROM t");
    let fields = |list: &[(u8, &[u8])]| original_error_fields(list, &lexed, sql, |p| Some(lexed.original_position(sql, p)));
    // `x` is at 17 in the rewrite and at 18 in the original (`'éé'` is 4 characters, `$1` 2, `1` 1 and `$2` 2).
    assert_eq!(fields(&[(b'M', b"m"), (b'P', b"17")]), Some(vec![(b'M', b"m".to_vec()), (b'P', b"18".to_vec())]));
    assert_eq!(fields(&[(b'W', b"unnamed portal parameter $2 = '...'")]), Some(vec![(b'P', b"14".to_vec())]));
    assert_eq!(fields(&[(b'M', b"m"), (b'W', b"SQL function \"f\"")]), None);
    assert_eq!(fields(&[(b'W', b"unnamed portal parameter $9 = '...'")]), None, "no such slot");
    assert_eq!(bound_parameter(b"unnamed portal parameter $12 = '1'"), Some(12));
    assert_eq!(bound_parameter(b"unnamed portal parameter $1 = '1'\nPL/pgSQL function"), None);
}

#[test]
fn ddl_clears_the_shapes_now_and_when_its_transaction_ends() {
    let mut sides = Sides::new();
    let old = sides.validate("SELECT 1");
    let mut ex = Exchange::new(Some(1));
    query(&mut ex, &mut sides, "BEGIN");
    reply(&mut ex, &mut sides, &[(b'C', b"BEGIN\0"), (b'Z', b"T")]);
    query(&mut ex, &mut sides, "ALTER TABLE t ADD COLUMN c int");
    reply(&mut ex, &mut sides, &[(b'C', b"ALTER TABLE\0"), (b'Z', b"T")]);
    assert!(sides.registry.shapes.is_empty());
    sides.validate("SELECT 1");
    query(&mut ex, &mut sides, "COMMIT");
    reply(&mut ex, &mut sides, &[(b'C', b"COMMIT\0"), (b'Z', b"I")]);
    assert!(sides.registry.shapes.is_empty(), "validated during the DDL's transaction: dropped");
    let new = sides.validate("SELECT 1");
    assert_ne!(old.server_name, new.server_name, "prepared afresh under a new name");
}

#[test]
fn two_names_for_one_new_text_in_one_pipeline_prepare_it_once() {
    // Parse S_1 and S_2 of the same text before the server answered the
    // first: a second Parse under the same server name would fail (42P05).
    let mut sides = Sides::new();
    let mut ex = Exchange::default();
    let mut p = BytesMut::new();
    frontend::parse(&mut p, "S_1", "SELECT 1", &[]);
    frontend::parse(&mut p, "S_2", "SELECT 1", &[]);
    frontend::sync(&mut p);
    let mut to_server = BytesMut::new();
    let mut rest = p;
    while let Some(m) = split_message(&mut rest, 1 << 20).unwrap() {
        ex.from_client(m.tag, &whole(m.tag, &m.body), &mut sides.st(), &mut to_server);
    }
    assert_eq!(tags(&messages(to_server)), "PS");
    let got = reply(&mut ex, &mut sides, &[(b'1', b""), (b'Z', b"I")]);
    assert_eq!(tags(&got), "11Z", "both Parses answered, in order");
    assert!(sides.client.get("S_1").is_some() && sides.client.get("S_2").is_some());
}

const STALE: &[u8] = b"SERROR\0C0A000\0Mcached plan must not change result type\0RRevalidateCachedQuery\0\0";

#[test]
fn a_stale_plan_outside_a_transaction_runs_the_query_again_as_it_was() {
    let mut sides = Sides::new();
    sides.validate("SELECT * FROM t WHERE a = 1");
    let mut ex = Exchange::new(Some(1));
    assert_eq!(tags(&query(&mut ex, &mut sides, "SELECT * FROM t WHERE a = 1")), "PBDES");
    let got = reply(&mut ex, &mut sides, &[(b'1', b""), (b'E', STALE), (b'Z', b"I")]);
    assert!(got.is_empty(), "the client sees nothing of it: {got:?}");
    assert!(!ex.is_quiet(), "the plain query is owed");
    let mut resend = BytesMut::new();
    ex.take_for_server(&mut resend);
    let resend = messages(resend);
    assert_eq!(tags(&resend), "Q");
    assert_eq!(frontend::decode_query(&resend[0].1).unwrap(), "SELECT * FROM t WHERE a = 1");
    let got = reply(&mut ex, &mut sides, &[(b'T', b"\0\0"), (b'C', b"SELECT 0\0"), (b'Z', b"I")]);
    assert_eq!(tags(&got), "TCZ");
    assert!(ex.is_releasable());
    assert_eq!(sides.registry.stats().reruns, 1);
    assert!(sides.registry.shapes.is_empty(), "a stale plan clears the shapes");
}

#[test]
fn a_rewritten_query_whose_copy_answered_no_data_is_not_described_again() {
    const UPDATE: &str = "UPDATE t SET a = a + 1 WHERE id = 7";
    let mut sides = Sides::new();
    let statement = sides.validate(UPDATE);
    let mut ex = Exchange::new(Some(1));
    assert_eq!(tags(&query(&mut ex, &mut sides, UPDATE)), "PBDES");
    let got = reply(&mut ex, &mut sides, &[(b'1', b""), (b'2', b""), (b'n', b""), (b'C', b"UPDATE 1\0"), (b'Z', b"I")]);
    assert_eq!(tags(&got), "CZ", "NoData is not the client's");
    // This connection's copy has no rows, for as long as it lives.
    assert_eq!(tags(&query(&mut ex, &mut sides, "UPDATE t SET a = a + 1 WHERE id = 8")), "BES");
    let got = reply(&mut ex, &mut sides, &[(b'2', b""), (b'C', b"UPDATE 1\0"), (b'Z', b"I")]);
    assert_eq!(tags(&got), "CZ", "what the client gets is the same");
    assert!(ex.is_releasable());
    // Another connection's copy (or this one's, prepared again) is unknown.
    let mut other = Sides::new();
    std::mem::swap(&mut other.registry, &mut sides.registry);
    assert_eq!(tags(&query(&mut ex, &mut other, UPDATE)), "PBDES");
    std::mem::swap(&mut other.registry, &mut sides.registry);
    reply(&mut ex, &mut other, &[(b'1', b""), (b'2', b""), (b'n', b""), (b'C', b"UPDATE 1\0"), (b'Z', b"I")]);
    sides.server.mark_stale(statement.id);
    let sent = query(&mut ex, &mut sides, UPDATE);
    assert_eq!(tags(&sent), "CPBDES", "closed, prepared again, described");
    reply(&mut ex, &mut sides, &[(b'3', b""), (b'1', b""), (b'2', b""), (b'n', b""), (b'C', b"UPDATE 1\0"), (b'Z', b"I")]);
    // A statement with rows is described every time: its RowDescription is the client's.
    sides.validate(SELECT);
    assert_eq!(tags(&query(&mut ex, &mut sides, SELECT)), "PBDES");
    let row = b"\0\x01name\0\0\0\0\0\0\0\0\0\0\x19\xff\xff\xff\xff\xff\xff\0\0";
    reply(&mut ex, &mut sides, &[(b'1', b""), (b'2', b""), (b'T', row), (b'C', b"SELECT 0\0"), (b'Z', b"I")]);
    assert_eq!(tags(&query(&mut ex, &mut sides, SELECT)), "BDES");
}

#[test]
fn a_stale_plan_in_a_transaction_block_is_the_clients_error() {
    let mut sides = Sides::new();
    sides.validate("SELECT * FROM t WHERE a = 1");
    let mut ex = Exchange::new(Some(1));
    query(&mut ex, &mut sides, "BEGIN");
    reply(&mut ex, &mut sides, &[(b'C', b"BEGIN\0"), (b'Z', b"T")]);
    query(&mut ex, &mut sides, "SELECT * FROM t WHERE a = 1");
    let got = reply(&mut ex, &mut sides, &[(b'1', b""), (b'E', STALE), (b'Z', b"E")]);
    assert_eq!(tags(&got), "EZ");
    let mut resend = BytesMut::new();
    ex.take_for_server(&mut resend);
    assert!(resend.is_empty());
}
