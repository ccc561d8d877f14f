//! Statements PostgreSQL runs only while no other session is connected to a
//! database, and which database that is. Pure: a client's first message in,
//! a database name out.
//!
//! `DROP DATABASE x`, `ALTER DATABASE x RENAME TO y`, `ALTER DATABASE x SET
//! TABLESPACE t` and `CREATE DATABASE y TEMPLATE x` fail with 55006 ("being
//! accessed by other users") while any session is connected to `x`, after
//! waiting up to five seconds for them to leave (`CountOtherDBBackends`,
//! PostgreSQL's procarray.c). A pooler's idle server connections are such
//! sessions, though no client of the pooler is using them: direct, the same
//! statement would succeed. So the session that is about to send one asks
//! its shard to close the idle server connections to `x` of every pool on
//! every shard first ([`crate::runtime::Shard::close_idle_connections_to`]);
//! their backends leave within the server's wait. Connections in use by a
//! client stay, and keep the statement failing, as a client connected
//! direct would.
//!
//! Each of these statements runs outside any transaction block, alone in
//! its simple query or its extended-protocol request, so it is the first
//! message of a request: [`database_needed_alone`] looks only there. A
//! cheap test of the first words lets every other text through; the few
//! that pass it are parsed with `pg_query` (names quoted or not, comments,
//! `IF EXISTS`, `WITH (FORCE)`, `TEMPLATE = x`), never on the hot path.

use pg_query::protobuf::ObjectType;
use pg_query::NodeEnum;

use crate::protocol::frontend;

/// The database that the request `first` (a client's first message of a
/// request: its tag and body) needs free of other sessions, if any.
/// Asked before every transaction: any other request is let through at the
/// first letter of its text.
pub fn database_needed_alone(tag: u8, body: &[u8]) -> Option<String> {
    let text = match tag {
        frontend::QUERY => body,
        // Parse: statement name, then the text.
        frontend::PARSE => &body[crate::protocol::nul_at(body)? + 1..],
        _ => return None,
    };
    let first = text.iter().find(|b| !b.is_ascii_whitespace())?;
    if !matches!(first.to_ascii_lowercase(), b'd' | b'a' | b'c') {
        return None;
    }
    let sql = std::str::from_utf8(&text[..crate::protocol::nul_at(text)?]).ok()?;
    may_need_a_database_alone(sql).then(|| parsed_database(sql)).flatten()
}

/// Whether `sql` begins with DROP, ALTER or CREATE and its second word is
/// DATABASE (comments or odd spacing between them make it answer no, which
/// leaves the statement to fail as it would have).
fn may_need_a_database_alone(sql: &str) -> bool {
    let mut words = sql.split_ascii_whitespace();
    let (Some(verb), Some(object)) = (words.next(), words.next()) else { return false };
    ["drop", "alter", "create"].iter().any(|v| verb.eq_ignore_ascii_case(v)) && object.eq_ignore_ascii_case("database")
}

/// The database `sql`, one statement, needs alone, as PostgreSQL names it.
fn parsed_database(sql: &str) -> Option<String> {
    let parsed = pg_query::parse(sql).ok()?;
    let [statement] = parsed.protobuf.stmts.as_slice() else { return None };
    match statement.stmt.as_ref()?.node.as_ref()? {
        NodeEnum::DropdbStmt(drop) => Some(drop.dbname.clone()),
        NodeEnum::RenameStmt(rename) if rename.rename_type == ObjectType::ObjectDatabase as i32 => Some(rename.subname.clone()),
        NodeEnum::AlterDatabaseStmt(alter) => option_named(&alter.options, "tablespace").map(|_| alter.dbname.clone()),
        NodeEnum::CreatedbStmt(create) => option_named(&create.options, "template"),
        _ => None,
    }
}

/// The string value of the option `name` among a statement's `options`.
fn option_named(options: &[pg_query::protobuf::Node], name: &str) -> Option<String> {
    options.iter().find_map(|option| match option.node.as_ref()? {
        NodeEnum::DefElem(element) if element.defname == name => match element.arg.as_ref()?.node.as_ref()? {
            NodeEnum::String(value) => Some(value.sval.clone()),
            _ => None,
        },
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn query(sql: &str) -> Option<String> {
        database_needed_alone(frontend::QUERY, format!("{sql}\0").as_bytes())
    }

    #[test]
    fn the_statements_that_need_a_database_alone_name_it() {
        for (sql, database) in [
            ("DROP DATABASE app_test", "app_test"),
            ("drop database if exists \"App Test\";", "App Test"),
            ("DROP DATABASE Shop WITH (FORCE)", "shop"),
            ("drop  database  /* c */ old", "old"),
            ("ALTER DATABASE old RENAME TO new", "old"),
            ("alter database \"Old\" set tablespace pg_default", "Old"),
            ("CREATE DATABASE copy TEMPLATE origin", "origin"),
            ("create database copy with owner = me template = \"Origin\" encoding 'UTF8'", "Origin"),
        ] {
            assert_eq!(query(sql).as_deref(), Some(database), "{sql}");
        }
    }

    #[test]
    fn everything_else_needs_nothing() {
        for sql in [
            "select 1",
            "CREATE DATABASE fresh",
            "ALTER DATABASE app SET work_mem = '8MB'",
            "alter database app owner to me",
            "DROP TABLE database",
            "drop database",
            "drop database a; drop database b",
            "select 'drop database x'",
            "",
        ] {
            assert_eq!(query(sql), None, "{sql}");
        }
    }

    #[test]
    fn a_parse_is_read_past_its_statement_name_and_other_messages_are_not_read() {
        assert_eq!(database_needed_alone(frontend::PARSE, b"s1\0DROP DATABASE x\0\0\0").as_deref(), Some("x"));
        assert_eq!(database_needed_alone(frontend::PARSE, b"\0drop database y\0\0\0").as_deref(), Some("y"));
        assert_eq!(database_needed_alone(frontend::BIND, b"\0drop database y\0"), None);
        assert_eq!(database_needed_alone(frontend::QUERY, b"drop database \xff\0"), None, "not UTF-8");
    }
}
