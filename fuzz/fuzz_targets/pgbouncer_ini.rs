//! The pgbouncer.ini importer (`config::pgbouncer_ini`): ini syntax,
//! `%include`, `[databases]` connection strings, the auth_file, the
//! translation and the TOML overlay, with files served from memory.
//!
//! The input (UTF-8) is split at U+0001 into: the pgbouncer.ini text, the file
//! named `users.txt`, the file named `inc.ini`, and an optional TOML overlay.
//! Any other file name is "not found". Includes are resolved against the
//! including file's directory, and any path whose last component matches is
//! served, so include cycles are possible and must be caught.
#![no_main]

use std::io;
use std::path::Path;

use libfuzzer_sys::fuzz_target;
use pglane::config::pgbouncer_ini;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let parts: Vec<&str> = text.split('\u{1}').collect();
    let file = |name: &str| parts.get(match name {
        "users.txt" => 1,
        "inc.ini" => 2,
        _ => usize::MAX,
    });
    let loader = |path: &Path| -> io::Result<String> {
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        file(name).map(|s| s.to_string()).ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))
    };
    let ini = Path::new("/etc/pgbouncer/pgbouncer.ini");
    let result = pgbouncer_ini::import(ini, parts[0], &loader);
    let Ok(mut import) = result else { return };
    for w in import.warnings() {
        let _ = w.to_string();
    }
    let _ = import.document();
    if let Some(overlay) = parts.get(3) {
        if import.overlay(overlay).is_err() {
            return;
        }
    }
    if let Ok((config, _)) = import.into_config() {
        // What comes out has passed the same validation as a TOML config.
        config.validate().expect("an imported config validates");
        assert!(!config.databases.is_empty());
    }
});
