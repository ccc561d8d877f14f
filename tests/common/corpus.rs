//! The auto-prepare corpus (`tests/corpus/auto_prepare.sql`), read as its
//! header describes: setup statements, then queries with what is expected of
//! each. Shared by the lexer's differential test and the end-to-end one.

pub const CORPUS: &str = include_str!("../corpus/auto_prepare.sql");

/// What the corpus says about one query.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Expect {
    Rewrite,
    /// The lexer or the validator refuses it, with this reason label.
    Pass(String),
    /// The validator accepts it, the side-connection check refuses it.
    ServerPass,
}

pub struct Corpus {
    pub setup: Vec<String>,
    pub queries: Vec<(String, Expect)>,
}

impl Corpus {
    pub fn parse(text: &str) -> Corpus {
        let mut corpus = Corpus { setup: Vec::new(), queries: Vec::new() };
        let mut in_setup = false;
        let mut expect = Expect::Rewrite;
        let mut entry: Vec<&str> = Vec::new();
        let mut flush = |entry: &mut Vec<&str>, in_setup: bool, expect: &mut Expect| {
            if entry.is_empty() {
                return;
            }
            let sql = entry.join("\n");
            entry.clear();
            if in_setup {
                corpus.setup.push(sql);
            } else {
                corpus.queries.push((sql, std::mem::replace(expect, Expect::Rewrite)));
            }
        };
        for line in text.lines() {
            if let Some(directive) = line.strip_prefix("--!") {
                flush(&mut entry, in_setup, &mut expect);
                match directive.trim() {
                    "setup" => in_setup = true,
                    "queries" => in_setup = false,
                    "server-pass" => expect = Expect::ServerPass,
                    d if d.starts_with("pass ") => expect = Expect::Pass(d["pass ".len()..].trim().to_owned()),
                    _ => {}
                }
            } else if line.trim().is_empty() {
                flush(&mut entry, in_setup, &mut expect);
            } else {
                entry.push(line);
            }
        }
        flush(&mut entry, in_setup, &mut expect);
        corpus
    }
}
