//! The documentation cannot drift from the code it describes.
//!
//! - `docs/configuration.md` names every key of the config structs
//!   (`pglane::config::{Config, Database, User}`, as serde reads them) and no
//!   other, and each default it writes as a TOML value is the default pglane
//!   applies: setting the key to it changes nothing in the parsed config.
//! - `config/pglane.toml`, the commented example, names every key too (set or
//!   commented out), and no other.
//! - `docs/operations.md` lists every metric family `/metrics` serves, and no
//!   other.
//! - Every relative link in README.md, docs/ and bench/ resolves: the file
//!   exists and, for `#anchor`s, so does the heading.
//! - Every ```toml block in README.md and docs/ uses only config keys, and a
//!   whole file (one with `listen`) parses and validates.
//! - README.md stays a front door: at most 300 lines.
//! - `docs/migrating-from-pgbouncer.md` names every PgBouncer setting pglane
//!   honours, and its table of every PgBouncer setting and parameter (honoured,
//!   accepted or refused, and why) is the importer's own catalogue
//!   (`PGLANE_WRITE_DOCS=1` writes it anew).
//!
//! No PostgreSQL is needed: these read files and the crate's own types.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use pglane::config::{Config, Database, User};
use serde::de::{self, Deserialize, Deserializer, Visitor};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(path: &str) -> String {
    std::fs::read_to_string(root().join(path)).unwrap_or_else(|e| panic!("cannot read {path}: {e}"))
}

/// The names serde accepts for `T`'s fields: what serde_derive passes to
/// `deserialize_struct`, caught by a deserializer that then gives up.
fn serde_fields<'de, T: Deserialize<'de>>() -> BTreeSet<&'static str> {
    struct Recorder<'a>(&'a mut Option<&'static [&'static str]>);
    #[derive(Debug)]
    struct Caught;
    impl std::fmt::Display for Caught {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("field names caught")
        }
    }
    impl std::error::Error for Caught {}
    impl de::Error for Caught {
        fn custom<M: std::fmt::Display>(_: M) -> Self {
            Caught
        }
    }
    impl<'de> Deserializer<'de> for Recorder<'_> {
        type Error = Caught;
        fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Caught> {
            Err(Caught)
        }
        fn deserialize_struct<V: Visitor<'de>>(
            self,
            _: &'static str,
            fields: &'static [&'static str],
            _: V,
        ) -> Result<V::Value, Caught> {
            *self.0 = Some(fields);
            Err(Caught)
        }
        serde::forward_to_deserialize_any! {
            bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf option unit
            unit_struct newtype_struct seq tuple tuple_struct map enum identifier ignored_any
        }
    }
    let mut fields = None;
    let _ = T::deserialize(Recorder(&mut fields));
    fields.expect("a struct deserializes with deserialize_struct").iter().copied().collect()
}

/// Where a key lives: the top level, a `[databases.NAME]` or a `[users.NAME]` table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Table {
    Top,
    Database,
    User,
}

impl Table {
    fn label(self) -> &'static str {
        match self {
            Table::Top => "top-level",
            Table::Database => "[databases.NAME]",
            Table::User => "[users.NAME]",
        }
    }
}

/// The keys of the config structs, by table. `databases` and `users` are the
/// tables themselves, documented as sections.
fn struct_keys() -> BTreeMap<Table, BTreeSet<&'static str>> {
    let mut top = serde_fields::<Config>();
    assert!(top.remove("databases") && top.remove("users"), "Config has no databases/users tables any more: update this test");
    BTreeMap::from([(Table::Top, top), (Table::Database, serde_fields::<Database>()), (Table::User, serde_fields::<User>())])
}

/// One row of a reference table in docs/configuration.md: its key and its
/// default cell.
struct Documented {
    key: String,
    default: String,
}

/// The reference tables of docs/configuration.md: rows starting with
/// "| `key` |" under the headings "## Top-level keys", "## `[databases.NAME]`"
/// and "## `[users.NAME]`".
fn documented_keys() -> BTreeMap<Table, Vec<Documented>> {
    let text = read("docs/configuration.md");
    let mut tables: BTreeMap<Table, Vec<Documented>> = BTreeMap::new();
    let mut current = None;
    for line in text.lines() {
        if let Some(heading) = line.strip_prefix("## ") {
            current = match heading.trim() {
                "Top-level keys" => Some(Table::Top),
                "`[databases.NAME]`" => Some(Table::Database),
                "`[users.NAME]`" => Some(Table::User),
                _ => None,
            };
            continue;
        }
        let (Some(table), Some(row)) = (current, line.strip_prefix("| `")) else { continue };
        let cells: Vec<&str> = row.split(" | ").collect();
        let key = cells[0].trim_end_matches('`').to_owned();
        let default = cells.get(1).map(|c| c.trim().to_owned()).unwrap_or_default();
        tables.entry(table).or_default().push(Documented { key, default });
    }
    tables
}

/// The keys config/pglane.toml sets or shows commented out (`# key = ...`), by table.
fn example_keys() -> BTreeMap<Table, BTreeSet<String>> {
    let text = read("config/pglane.toml");
    let mut keys: BTreeMap<Table, BTreeSet<String>> = BTreeMap::new();
    let mut table = Table::Top;
    for line in text.lines() {
        let line = line.trim();
        if let Some(header) = line.strip_prefix('[') {
            table = if header.starts_with("databases.") {
                Table::Database
            } else if header.starts_with("users.") {
                Table::User
            } else {
                panic!("config/pglane.toml: unexpected table [{header}");
            };
            continue;
        }
        let line = line.strip_prefix("# ").unwrap_or(line);
        let Some((key, _)) = line.split_once(" = ") else { continue };
        if !key.is_empty() && key.bytes().all(|b| b.is_ascii_lowercase() || b == b'_') {
            keys.entry(table).or_default().insert(key.to_owned());
        }
    }
    keys
}

/// What a set of names lacks and has in excess against the struct's, as lines.
fn differences(what: &str, table: Table, have: &BTreeSet<String>, want: &BTreeSet<&'static str>, problems: &mut Vec<String>) {
    for key in want.iter().filter(|k| !have.contains(**k)) {
        problems.push(format!("{what} does not name the {} key `{key}`", table.label()));
    }
    for key in have.iter().filter(|k| !want.contains(k.as_str())) {
        problems.push(format!("{what} names `{key}`, which is not a {} key of the config", table.label()));
    }
}

#[test]
fn the_configuration_reference_names_every_key_and_no_other() {
    let documented = documented_keys();
    let mut problems = Vec::new();
    for (table, want) in struct_keys() {
        let rows = documented.get(&table).map(Vec::as_slice).unwrap_or_default();
        let mut have = BTreeSet::new();
        for row in rows {
            if !have.insert(row.key.clone()) {
                problems.push(format!("docs/configuration.md names the {} key `{}` twice", table.label(), row.key));
            }
        }
        differences("docs/configuration.md", table, &have, &want, &mut problems);
    }
    assert!(problems.is_empty(), "\n{}\n", problems.join("\n"));
}

#[test]
fn the_example_config_names_every_key_and_no_other() {
    let example = example_keys();
    let mut problems = Vec::new();
    for (table, want) in struct_keys() {
        let have = example.get(&table).cloned().unwrap_or_default();
        differences("config/pglane.toml", table, &have, &want, &mut problems);
    }
    assert!(problems.is_empty(), "\n{}\n", problems.join("\n"));
}

/// Each default docs/configuration.md gives as a TOML value (a `code` cell):
/// a config that sets the key to it parses to the same config as one that
/// leaves it out.
#[test]
fn the_documented_defaults_are_the_defaults() {
    const BARE: &str = "listen = \"127.0.0.1:6432\"\n\n[databases.app]\n";
    let parsed = |text: &str| format!("{:?}", Config::parse(text).unwrap_or_else(|e| panic!("{e} in:\n{text}")));
    let mut checked = 0;
    let mut problems = Vec::new();
    for (table, rows) in documented_keys() {
        // The same file without the key, and with it set to the documented default.
        let (without, with) = match table {
            Table::Top => (BARE.to_owned(), "{key} = {value}\n".to_owned() + BARE),
            Table::Database => (BARE.to_owned(), BARE.to_owned() + "{key} = {value}\n"),
            Table::User => (BARE.to_owned() + "[users.someone]\n", BARE.to_owned() + "[users.someone]\n{key} = {value}\n"),
        };
        for row in rows {
            let Some(value) = row.default.strip_prefix('`').and_then(|v| v.strip_suffix('`')) else { continue };
            let with = with.replace("{key}", &row.key).replace("{value}", value);
            if parsed(&with) != parsed(&without) {
                problems.push(format!(
                    "docs/configuration.md gives `{} = {value}` as the {} default, but pglane's default differs",
                    row.key,
                    table.label()
                ));
            }
            checked += 1;
        }
    }
    assert!(checked >= 30, "only {checked} defaults found: has the table format changed?");
    assert!(problems.is_empty(), "\n{}\n", problems.join("\n"));
}

#[test]
fn the_operations_page_lists_every_metric_family() {
    let served: BTreeSet<String> = pglane::admin::metrics::render(&[], 0)
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split(' ').next())
        .map(str::to_owned)
        .collect();
    assert!(served.len() > 30, "only {} families rendered", served.len());
    let documented: BTreeSet<String> = read("docs/operations.md")
        .lines()
        .filter_map(|l| l.strip_prefix("| `pglane_"))
        .filter_map(|l| l.split('`').next())
        .map(|name| format!("pglane_{name}"))
        .collect();
    let mut problems = Vec::new();
    for name in served.difference(&documented) {
        problems.push(format!("docs/operations.md does not list the metric family `{name}`"));
    }
    for name in documented.difference(&served) {
        problems.push(format!("docs/operations.md lists `{name}`, which /metrics does not serve"));
    }
    assert!(problems.is_empty(), "\n{}\n", problems.join("\n"));
}

/// GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

fn anchors(markdown: &str) -> BTreeSet<String> {
    let mut in_code = false;
    let mut out = BTreeSet::new();
    for line in markdown.lines() {
        if line.starts_with("```") {
            in_code = !in_code;
        } else if !in_code && line.starts_with('#') {
            out.insert(anchor(line.trim_start_matches('#')));
        }
    }
    out
}

/// The targets of inline links `[text](target)` outside code blocks and code spans.
fn links(markdown: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut in_code = false;
    for line in markdown.lines() {
        if line.starts_with("```") {
            in_code = !in_code;
            continue;
        }
        if in_code {
            continue;
        }
        // Drop code spans, whose brackets are not links.
        let mut text = String::new();
        for (i, part) in line.split('`').enumerate() {
            if i % 2 == 0 {
                text.push_str(part);
            }
        }
        let mut rest = text.as_str();
        while let Some(at) = rest.find("](") {
            let after = &rest[at + 2..];
            let Some(end) = after.find(')') else { break };
            out.push(after[..end].to_owned());
            rest = &after[end..];
        }
    }
    out
}

fn markdown_files() -> Vec<PathBuf> {
    let mut files = vec![root().join("README.md"), root().join("bench/RESULTS.md")];
    for dir in ["docs", "bench/history"] {
        let Ok(entries) = std::fs::read_dir(root().join(dir)) else { continue };
        let mut found: Vec<PathBuf> =
            entries.flatten().map(|e| e.path()).filter(|p| p.extension().is_some_and(|e| e == "md")).collect();
        found.sort();
        files.extend(found);
    }
    files
}

#[test]
fn every_relative_link_resolves() {
    let mut problems = Vec::new();
    let mut checked = 0;
    for file in markdown_files() {
        let text = std::fs::read_to_string(&file).unwrap();
        let name = file.strip_prefix(root()).unwrap().display().to_string();
        for target in links(&text) {
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            checked += 1;
            let (path, fragment) = match target.split_once('#') {
                Some((p, f)) => (p, Some(f)),
                None => (target.as_str(), None),
            };
            let resolved: PathBuf = if path.is_empty() { file.clone() } else { file.parent().unwrap().join(path) };
            if !resolved.exists() {
                problems.push(format!("{name}: link to {target}: {} does not exist", resolved.display()));
                continue;
            }
            if let Some(fragment) = fragment {
                if resolved.extension().is_some_and(|e| e == "md") {
                    let headings = anchors(&std::fs::read_to_string(&resolved).unwrap());
                    if !headings.contains(fragment) {
                        problems.push(format!("{name}: link to {target}: no heading #{fragment} there"));
                    }
                }
            }
        }
    }
    assert!(checked > 20, "only {checked} links found");
    assert!(problems.is_empty(), "\n{}\n", problems.join("\n"));
}

/// The ```toml blocks of a markdown text.
fn toml_blocks(markdown: &str) -> Vec<String> {
    let mut blocks = Vec::new();
    let mut current: Option<String> = None;
    for line in markdown.lines() {
        match &mut current {
            None if line.trim_start() == "```toml" => current = Some(String::new()),
            Some(_) if line.trim_start() == "```" => blocks.extend(current.take()),
            Some(block) => {
                block.push_str(line);
                block.push('\n');
            }
            None => {}
        }
    }
    blocks
}

#[test]
fn the_config_examples_in_the_docs_are_real() {
    let keys = struct_keys();
    let mut problems = Vec::new();
    let mut blocks = 0;
    for file in markdown_files() {
        let name = file.strip_prefix(root()).unwrap().display().to_string();
        for block in toml_blocks(&std::fs::read_to_string(&file).unwrap()) {
            blocks += 1;
            let table: toml::Table = match toml::from_str(&block) {
                Ok(t) => t,
                Err(e) => {
                    problems.push(format!("{name}: a toml block does not parse: {e}\n{block}"));
                    continue;
                }
            };
            for (key, value) in &table {
                let nested = match key.as_str() {
                    "databases" => Some(Table::Database),
                    "users" => Some(Table::User),
                    _ => None,
                };
                let Some(nested) = nested else {
                    if !keys[&Table::Top].contains(key.as_str()) {
                        problems.push(format!("{name}: a toml block sets `{key}`, which is not a config key"));
                    }
                    continue;
                };
                for entry in value.as_table().into_iter().flat_map(|t| t.values()) {
                    for inner in entry.as_table().into_iter().flat_map(|t| t.keys()) {
                        if !keys[&nested].contains(inner.as_str()) {
                            problems.push(format!("{name}: a toml block sets `{inner}`, not a {} key", nested.label()));
                        }
                    }
                }
            }
            if table.contains_key("listen") {
                if let Err(e) = Config::parse(&block) {
                    problems.push(format!("{name}: a whole config does not validate: {e}\n{block}"));
                }
            }
        }
    }
    assert!(blocks >= 2, "only {blocks} toml blocks found");
    assert!(problems.is_empty(), "\n{}\n", problems.join("\n"));
}

/// The table between these lines of docs/migrating-from-pgbouncer.md.
const TABLE_START: &str = "<!-- generated by tests/docs.rs from the importer's catalogue: do not edit -->";
const TABLE_END: &str = "<!-- end of the generated table -->";

/// The tables of every PgBouncer setting and parameter, and what pglane
/// does with each, from the catalogue.
fn settings_tables() -> String {
    use pglane::config::pgbouncer_ini::unsupported::{
        self, database_parameter, pgbouncer_setting, user_parameter, Treatment, DATABASE_PARAMETERS, HONOURED,
        PGBOUNCER_SETTINGS, USER_PARAMETERS,
    };
    let value = |v: &str| if v.is_empty() { "empty".to_owned() } else { format!("`{v}`") };
    let mut table = String::from("| `[pgbouncer]` setting | PgBouncer's default | pglane |\n|---|---|---|\n");
    for setting in PGBOUNCER_SETTINGS {
        let what = match pgbouncer_setting(setting.name) {
            None if HONOURED.contains(&setting.name) => "**honoured**, as the table above says".to_owned(),
            None => unreachable!("{} is neither honoured nor in the catalogue", setting.name),
            Some(Treatment::Accepted(reason)) => format!("accepted, any value: {reason}"),
            Some(Treatment::AcceptedAt { values, reason }) => {
                let values: Vec<String> = values.iter().map(|v| value(v)).collect();
                format!("accepted at {}; **refused** at any other value: {reason}", values.join(", "))
            }
        };
        let default = if setting.default.chars().count() > 24 { "(a query)".to_owned() } else { value(setting.default) };
        table.push_str(&format!("| `{}` | {default} | {what} |\n", setting.name));
    }
    table.push_str("\n| parameter | pglane |\n|---|---|\n");
    /// A section's parameters, the ones pglane honours, and why it refuses one.
    type Parameters = (&'static str, &'static [&'static str], &'static [&'static str], fn(&str) -> Option<&'static str>);
    let sections: [Parameters; 2] = [
        ("[databases]", DATABASE_PARAMETERS, unsupported::HONOURED_DATABASE_PARAMETERS, database_parameter),
        ("[users]", USER_PARAMETERS, unsupported::HONOURED_USER_PARAMETERS, user_parameter),
    ];
    for (section, names, honoured, refused) in sections {
        for name in names {
            let what = match refused(name) {
                Some(reason) => format!("**refused**: {reason}"),
                None if honoured.contains(name) => "**honoured**, as the table above says".to_owned(),
                None => unreachable!("{section} {name} is neither honoured nor refused"),
            };
            table.push_str(&format!("| {section} `{name}` | {what} |\n"));
        }
    }
    table
}

#[test]
fn the_migration_guide_covers_every_pgbouncer_setting() {
    use pglane::config::pgbouncer_ini::unsupported::HONOURED;
    let path = "docs/migrating-from-pgbouncer.md";
    let text = read(path);
    let missing: Vec<&&str> = HONOURED.iter().filter(|key| !text.contains(&format!("`{key}`"))).collect();
    assert!(missing.is_empty(), "{path} does not name these settings pglane honours: {missing:?}");
    let (Some(start), Some(end)) = (text.find(TABLE_START), text.find(TABLE_END)) else {
        panic!("{path} has no generated table of settings ({TABLE_START} ... {TABLE_END})");
    };
    let have = &text[start + TABLE_START.len()..end];
    let want = format!("\n{}", settings_tables());
    if have != want {
        if std::env::var_os("PGLANE_WRITE_DOCS").is_some() {
            let written = format!("{}{want}{}", &text[..start + TABLE_START.len()], &text[end..]);
            std::fs::write(root().join(path), written).expect("write the guide");
        } else {
            panic!("{path}'s table of settings is not the importer's catalogue; run with PGLANE_WRITE_DOCS=1");
        }
    }
}

#[test]
fn the_readme_is_a_front_door() {
    let lines = read("README.md").lines().count();
    assert!(lines <= 300, "README.md has {lines} lines; move detail into docs/ (at most 300)");
}

#[test]
fn the_anchor_rule_is_githubs() {
    assert_eq!(anchor(" Pool modes"), "pool-modes");
    assert_eq!(anchor("`[databases.NAME]`"), "databasesname");
    assert_eq!(anchor("Auto-prepare: the rules"), "auto-prepare-the-rules");
    assert_eq!(anchor("auth_query"), "auth_query");
}
