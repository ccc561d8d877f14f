//! The code stays in rooms of readable size: no Rust source file of the repo
//! has more than [`MAX_LINES`] lines before its tests (its first top-level
//! `#[cfg(test)]`), so a file that grows past it is split by concern.
//!
//! No PostgreSQL and no pglane: this reads the files `git ls-files` lists.

use std::path::Path;
use std::process::Command;

/// The most lines a source file may have before its tests.
const MAX_LINES: usize = 1200;

/// Lines before the first top-level `#[cfg(test)]`, or all of them.
fn lines_before_tests(text: &str) -> usize {
    text.lines().position(|line| line.starts_with("#[cfg(test)]")).unwrap_or_else(|| text.lines().count())
}

#[test]
fn no_source_file_is_over_the_limit_before_its_tests() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let listed =
        Command::new("git").args(["ls-files", "--cached", "--others", "--exclude-standard", "*.rs"]).current_dir(root).output();
    let files: Vec<String> = match listed {
        Ok(out) if out.status.success() => String::from_utf8_lossy(&out.stdout).lines().map(str::to_owned).collect(),
        // Not a git checkout (a source tarball): nothing to list.
        _ => return,
    };
    assert!(files.iter().any(|f| f == "src/lib.rs"), "git ls-files listed no src/lib.rs: {files:?}");
    let mut over = Vec::new();
    for file in &files {
        let Ok(text) = std::fs::read_to_string(root.join(file)) else { continue };
        let lines = lines_before_tests(&text);
        if lines > MAX_LINES {
            over.push(format!("{file}: {lines} lines before its tests (at most {MAX_LINES}): split it by concern"));
        }
    }
    assert!(over.is_empty(), "\n{}\n", over.join("\n"));
}

#[test]
fn the_count_stops_at_the_tests() {
    assert_eq!(lines_before_tests("fn a() {}\n\n#[cfg(test)]\nmod tests {}\n"), 2);
    assert_eq!(lines_before_tests("fn a() {}\nfn b() {}\n"), 2);
    assert_eq!(lines_before_tests("    #[cfg(test)]\nfn a() {}\n"), 2, "only a top-level attribute counts");
}
