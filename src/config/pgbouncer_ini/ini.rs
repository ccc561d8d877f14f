//! The ini format as PgBouncer's config loader reads it: `[section]` headers,
//! `key = value` lines, whole-line `;`/`#` comments and `%include FILE`.
//!
//! This module owns turning text into a flat list of located [`Item`]s,
//! following `%include` through a caller-supplied loader (so tests use
//! in-memory files), with PgBouncer's nesting limit and cycle detection. It
//! knows nothing about what sections and keys mean, never touches the file
//! system itself, and never quotes a value in an error (values may be
//! passwords).
//!
//! Faithful to PgBouncer where an existing file depends on it:
//! - a comment is a whole line starting with `;` or `#`; the two characters
//!   are not special later in a line, so `password = a;b` keeps `a;b`;
//! - a value is the rest of the line without surrounding blanks, and may be empty;
//! - a key is made of `A-Za-z0-9_.-*`; as PgBouncer documents for database
//!   names, it may also be double-quoted, with `""` for a quote;
//! - the current section carries across `%include` both ways;
//! - a later setting of the same key wins (the caller keeps the last one).
//!
//! Different on purpose: a relative `%include` path is taken relative to the
//! including file (PgBouncer: the working directory), an include cycle is
//! reported as such, and text after a `[section]` header is an error.

use std::io;
use std::path::{Component, Path, PathBuf};

use super::{IniError, Location};

/// How deep `%include`s may nest, as in PgBouncer.
pub const MAX_INCLUDE_DEPTH: usize = 10;

/// One meaningful line of an ini file, in reading order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Item {
    Section { name: String, at: Location },
    Setting { section: String, key: String, value: String, at: Location },
}

/// Reads `text` (the contents of `path`) and every file it includes.
pub fn read(path: &Path, text: &str, files: &dyn Fn(&Path) -> io::Result<String>) -> Result<Vec<Item>, IniError> {
    let mut reader = Reader { files, items: Vec::new(), section: None, open: Vec::new() };
    reader.file(path, text)?;
    Ok(reader.items)
}

struct Reader<'a> {
    files: &'a dyn Fn(&Path) -> io::Result<String>,
    items: Vec<Item>,
    /// The section settings go to; shared by all files, as in PgBouncer.
    section: Option<String>,
    /// The files being read, outermost first, lexically normalised.
    open: Vec<PathBuf>,
}

impl Reader<'_> {
    fn file(&mut self, path: &Path, text: &str) -> Result<(), IniError> {
        self.open.push(normalize(path));
        let text = text.strip_prefix('\u{feff}').unwrap_or(text);
        for (index, line) in text.lines().enumerate() {
            self.line(line.trim_matches(is_space), Location::new(path, index + 1))?;
        }
        self.open.pop();
        Ok(())
    }

    fn line(&mut self, line: &str, at: Location) -> Result<(), IniError> {
        if line.is_empty() || line.starts_with([';', '#']) {
            Ok(())
        } else if let Some(directive) = line.strip_prefix('%') {
            self.directive(directive, at)
        } else if let Some(header) = line.strip_prefix('[') {
            let name = section_name(header).map_err(|message| IniError::Syntax { at: at.clone(), message })?;
            self.section = Some(name.clone());
            self.items.push(Item::Section { name, at });
            Ok(())
        } else {
            let (key, value) = setting(line).map_err(|message| IniError::Syntax { at: at.clone(), message })?;
            let Some(section) = self.section.clone() else {
                return Err(IniError::Syntax { at, message: format!("{key} is set before any [section]") });
            };
            self.items.push(Item::Setting { section, key, value, at });
            Ok(())
        }
    }

    fn directive(&mut self, directive: &str, at: Location) -> Result<(), IniError> {
        let target = match directive.strip_prefix("include") {
            Some(rest) if rest.starts_with(is_blank) => rest.trim_matches(is_space),
            Some("") => return Err(IniError::Syntax { at, message: "%include needs a file name".into() }),
            _ => return Err(IniError::Syntax { at, message: "unknown directive: only %include is supported".into() }),
        };
        // `open` holds the top file too, so its length is the nesting level + 1.
        if self.open.len() > MAX_INCLUDE_DEPTH {
            return Err(IniError::IncludeTooDeep { at });
        }
        let path = resolve(&at.file, target);
        if self.open.contains(&normalize(&path)) {
            return Err(IniError::IncludeCycle { at, path });
        }
        let text = (self.files)(&path).map_err(|source| IniError::ReadIncluded { at, path: path.clone(), source })?;
        self.file(&path, &text)
    }
}

/// The name in `[name]`, given what follows the `[`.
fn section_name(header: &str) -> Result<String, String> {
    let (name, after) = header.split_once(']').ok_or("a section header needs a closing ]")?;
    let name = name.trim_matches(is_space);
    if name.is_empty() {
        return Err("empty section name".into());
    }
    let after = after.trim_start_matches(is_space);
    if !after.is_empty() && !after.starts_with([';', '#']) {
        return Err(format!("unexpected text after [{name}]"));
    }
    Ok(name.to_owned())
}

/// Splits `key = value`; the key may be double-quoted.
fn setting(line: &str) -> Result<(String, String), String> {
    let (key, rest) = match line.strip_prefix('"') {
        Some(quoted) => unquote_key(quoted)?,
        None => {
            let end = line.find(|c: char| !is_key_char(c)).unwrap_or(line.len());
            (line[..end].to_owned(), &line[end..])
        }
    };
    if key.is_empty() {
        return Err(match rest.chars().next() {
            Some('=') => "a setting needs a name before =".into(),
            _ => "expected a setting (name = value), a [section], a comment or %include".into(),
        });
    }
    let value = rest
        .trim_start_matches(is_blank)
        .strip_prefix('=')
        .ok_or_else(|| format!("expected = after {key} (a name is made of letters, digits and _ . - *)"))?;
    Ok((key, value.trim_matches(is_space).to_owned()))
}

/// A double-quoted key (after its opening quote), `""` standing for `"`.
/// Returns the key and the rest of the line.
fn unquote_key(text: &str) -> Result<(String, &str), String> {
    let mut key = String::new();
    let mut chars = text.char_indices();
    while let Some((i, c)) = chars.next() {
        if c != '"' {
            key.push(c);
        } else if text[i + 1..].starts_with('"') {
            key.push('"');
            chars.next();
        } else {
            return Ok((key, &text[i + 1..]));
        }
    }
    Err("a quoted name needs a closing \"".into())
}

fn is_key_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-' | '*')
}

fn is_blank(c: char) -> bool {
    c == ' ' || c == '\t'
}

fn is_space(c: char) -> bool {
    c.is_ascii_whitespace() || c == '\u{b}'
}

/// `target` as named from within `including`: absolute, or relative to the
/// including file's directory.
pub fn resolve(including: &Path, target: &str) -> PathBuf {
    match including.parent() {
        Some(dir) if Path::new(target).is_relative() => dir.join(target),
        _ => PathBuf::from(target),
    }
}

/// `path` without `.` components and with `..` applied, without asking the
/// file system (so this stays pure; a symlink loop still meets the depth limit).
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            Component::CurDir => {}
            Component::ParentDir => match out.components().next_back() {
                Some(Component::Normal(_)) => {
                    out.pop();
                }
                Some(Component::RootDir | Component::Prefix(_)) => {}
                _ => out.push(".."),
            },
            other => out.push(other),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    /// In-memory files for `read`.
    fn files(list: &[(&str, &str)]) -> impl Fn(&Path) -> io::Result<String> {
        let map: HashMap<PathBuf, String> = list.iter().map(|(p, t)| (PathBuf::from(p), t.to_string())).collect();
        move |path: &Path| map.get(path).cloned().ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "no such file"))
    }

    fn read_str(text: &str) -> Result<Vec<Item>, IniError> {
        read(Path::new("/etc/pgb/pgbouncer.ini"), text, &files(&[]))
    }

    /// (section, key, value, line) of each setting.
    fn settings(items: &[Item]) -> Vec<(String, String, String, usize)> {
        items
            .iter()
            .filter_map(|item| match item {
                Item::Setting { section, key, value, at } => Some((section.clone(), key.clone(), value.clone(), at.line)),
                Item::Section { .. } => None,
            })
            .collect()
    }

    fn s(section: &str, key: &str, value: &str, line: usize) -> (String, String, String, usize) {
        (section.into(), key.into(), value.into(), line)
    }

    fn syntax_error(text: &str) -> (usize, String) {
        match read_str(text) {
            Err(IniError::Syntax { at, message }) => (at.line, message),
            other => panic!("expected a syntax error for {text:?}, got {other:?}"),
        }
    }

    #[test]
    fn sections_settings_and_their_lines() {
        let items = read_str("[databases]\napp = host=db1\n\n[pgbouncer]\nlisten_port=6432\n").unwrap();
        assert_eq!(
            items[0],
            Item::Section { name: "databases".into(), at: Location::new(Path::new("/etc/pgb/pgbouncer.ini"), 1) }
        );
        assert_eq!(settings(&items), vec![s("databases", "app", "host=db1", 2), s("pgbouncer", "listen_port", "6432", 5)]);
    }

    #[test]
    fn comments_are_whole_lines_only() {
        let text = "; top\n# also\n[pgbouncer]\n   ; indented comment\n\t# tabbed\nadmin_users = a;b # c\nx = ;\n";
        assert_eq!(
            settings(&read_str(text).unwrap()),
            vec![s("pgbouncer", "admin_users", "a;b # c", 6), s("pgbouncer", "x", ";", 7)]
        );
    }

    #[test]
    fn blanks_line_endings_and_a_byte_order_mark() {
        let text = "\u{feff}[pgbouncer]\r\n  pool_mode\t=\t session  \r\nempty =\r\nalso_empty=   \n";
        assert_eq!(
            settings(&read_str(text).unwrap()),
            vec![s("pgbouncer", "pool_mode", "session", 2), s("pgbouncer", "empty", "", 3), s("pgbouncer", "also_empty", "", 4)]
        );
    }

    #[test]
    fn keys_may_hold_dots_dashes_stars_and_be_quoted() {
        let text = "[databases]\n* = host=x\nmy-db.v2 = host=y\n\"my db\" = host=z\n\"we\"\"ird\"=host=w\n";
        let keys: Vec<String> = settings(&read_str(text).unwrap()).into_iter().map(|(_, k, _, _)| k).collect();
        assert_eq!(keys, ["*", "my-db.v2", "my db", "we\"ird"]);
    }

    #[test]
    fn section_headers() {
        let items = read_str("[ pgbouncer ]  ; the main one\n[users]#x\n").unwrap();
        let names: Vec<&str> = items
            .iter()
            .map(|i| match i {
                Item::Section { name, .. } => name.as_str(),
                Item::Setting { .. } => "",
            })
            .collect();
        assert_eq!(names, ["pgbouncer", "users"]);
    }

    #[test]
    fn syntax_errors_name_their_line() {
        assert_eq!(syntax_error("[pgbouncer]\n\nlisten_port 6432\n").0, 3);
        assert!(syntax_error("[pgbouncer]\nlisten_port 6432\n").1.contains("expected = after listen_port"));
        assert!(syntax_error("listen_port = 1\n").1.contains("before any [section]"));
        assert!(syntax_error("[pgbouncer\n").1.contains("closing ]"));
        assert!(syntax_error("[]\n").1.contains("empty section"));
        assert!(syntax_error("[pgbouncer] x = 1\n").1.contains("after [pgbouncer]"));
        assert!(syntax_error("[a]\n= 1\n").1.contains("name before ="));
        assert!(syntax_error("[a]\n\"open = 1\n").1.contains("closing \""));
        assert!(syntax_error("[a]\nkey with space = 1\n").1.contains("expected = after key"));
        assert!(syntax_error("[a]\n!x = 1\n").1.contains("expected a setting"));
        assert!(syntax_error("[a]\n%include\n").1.contains("needs a file name"));
        assert!(syntax_error("[a]\n%includex y\n").1.contains("unknown directive"));
        assert!(syntax_error("[a]\n%define x\n").1.contains("unknown directive"));
    }

    #[test]
    fn errors_do_not_quote_values() {
        let (_, message) = syntax_error("password = hunter2\n");
        assert!(!message.contains("hunter2"), "{message}");
    }

    #[test]
    fn includes_are_relative_to_the_including_file_and_share_the_section() {
        let loader = files(&[
            ("/etc/pgb/conf.d/dbs.ini", "app = host=db1\n[pgbouncer]\n%include ../more.ini\n"),
            // Handed to the loader as named: the file system, not this module, applies `..`.
            ("/etc/pgb/conf.d/../more.ini", "pool_mode = session\n"),
            ("/abs/x.ini", "max_client_conn = 5\n"),
        ]);
        let text = "[databases]\n%include conf.d/dbs.ini\nlisten_port = 1\n%include   /abs/x.ini  \n";
        let items = read(Path::new("/etc/pgb/pgbouncer.ini"), text, &loader).unwrap();
        assert_eq!(
            settings(&items),
            vec![
                s("databases", "app", "host=db1", 1),
                s("pgbouncer", "pool_mode", "session", 1),
                s("pgbouncer", "listen_port", "1", 3),
                s("pgbouncer", "max_client_conn", "5", 1),
            ]
        );
        let first_setting = items.iter().find_map(|item| match item {
            Item::Setting { at, .. } => Some(at.to_string()),
            Item::Section { .. } => None,
        });
        assert_eq!(first_setting.as_deref(), Some("/etc/pgb/conf.d/dbs.ini:1"));
    }

    #[test]
    fn a_relative_top_file_includes_relative_to_its_directory() {
        let loader = files(&[("conf/b.ini", "[x]\na=1\n")]);
        let items = read(Path::new("conf/a.ini"), "%include b.ini\n", &loader).unwrap();
        assert_eq!(settings(&items), vec![s("x", "a", "1", 2)]);
    }

    #[test]
    fn include_cycles_are_errors() {
        let loader = files(&[("/c/a.ini", "[x]\n%include b.ini\n"), ("/c/b.ini", "\n\n%include ./sub/../a.ini\n")]);
        match read(Path::new("/c/a.ini"), "[x]\n%include b.ini\n", &loader) {
            Err(IniError::IncludeCycle { at, path }) => {
                assert_eq!(at.to_string(), "/c/b.ini:3");
                assert_eq!(path, PathBuf::from("/c/./sub/../a.ini"));
            }
            other => panic!("{other:?}"),
        }
        let self_include = files(&[]);
        assert!(matches!(read(Path::new("/c/a.ini"), "%include a.ini\n", &self_include), Err(IniError::IncludeCycle { .. })));
    }

    #[test]
    fn includes_nest_ten_deep_and_no_deeper() {
        let chain = |depth: usize| {
            let list: Vec<(String, String)> = (1..=depth)
                .map(|i| {
                    (format!("/d/{i}.ini"), if i < depth { format!("%include {}.ini\n", i + 1) } else { "[x]\nk = v\n".into() })
                })
                .collect();
            move |path: &Path| {
                list.iter()
                    .find(|(p, _)| Path::new(p) == path)
                    .map(|(_, t)| t.clone())
                    .ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))
            }
        };
        let ok = read(Path::new("/d/0.ini"), "%include 1.ini\n", &chain(MAX_INCLUDE_DEPTH)).unwrap();
        assert_eq!(settings(&ok), vec![s("x", "k", "v", 2)]);
        match read(Path::new("/d/0.ini"), "%include 1.ini\n", &chain(MAX_INCLUDE_DEPTH + 1)) {
            Err(IniError::IncludeTooDeep { at }) => assert_eq!(at.to_string(), "/d/10.ini:1"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_missing_include_names_the_including_line() {
        match read_str("[x]\n\n%include nowhere.ini\n") {
            Err(e @ IniError::ReadIncluded { .. }) => {
                let text = e.to_string();
                assert!(text.starts_with("/etc/pgb/pgbouncer.ini:3: cannot read /etc/pgb/nowhere.ini"), "{text}");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn normalize_is_lexical() {
        assert_eq!(normalize(Path::new("/a/./b/../c")), PathBuf::from("/a/c"));
        assert_eq!(normalize(Path::new("../../x")), PathBuf::from("../../x"));
        assert_eq!(normalize(Path::new("/../x")), PathBuf::from("/x"));
        assert_eq!(normalize(Path::new("a/../../b")), PathBuf::from("../b"));
    }

    #[test]
    fn garbage_never_panics() {
        for text in crate::config::pgbouncer_ini::garbage("[]=%\"';# \t\r\nabcxyz*._-\u{e9}\u{feff}\u{0}include", 5_000) {
            let _ = read_str(&text);
        }
    }
}
