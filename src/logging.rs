//! What pglane writes to its log about what clients send it.
//!
//! Two things: client-supplied text (user and database names, application
//! names, the messages of errors that quote them) is printed [`Escaped`], so
//! that no client can put a NUL, a newline or a terminal escape in a log
//! line, or forge one; and [`PerAddress`] limits how many lines about failed
//! logins one address may cause, so that a flood of them cannot fill the
//! disk while every event up to the limit still gets its line (what
//! fail2ban and auditors read). Per shard, so without a lock: the limit is
//! per address and shard.
//!
//! This module decides nothing about sessions and never blocks.

use std::collections::HashMap;
use std::fmt;
use std::net::IpAddr;
use std::time::{Duration, Instant};

/// Text a client sent, for a log line: printed as it is, except control
/// characters (NUL, newlines, escapes, C1), the invisible ones that reorder
/// what a terminal shows (bidirectional overrides), and the backslash, which
/// come out as Rust-style escapes (`\0`, `\n`, `\x1b`, `\u{202e}`, `\\`).
pub struct Escaped<'a>(pub &'a str);

impl fmt::Display for Escaped<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut rest = self.0;
        while let Some((at, c)) = rest.char_indices().find(|&(_, c)| needs_escape(c)) {
            f.write_str(&rest[..at])?;
            match c {
                '\0' => f.write_str("\\0")?,
                '\n' => f.write_str("\\n")?,
                '\r' => f.write_str("\\r")?,
                '\t' => f.write_str("\\t")?,
                '\\' => f.write_str("\\\\")?,
                c if (c as u32) < 0x80 => write!(f, "\\x{:02x}", c as u32)?,
                c => write!(f, "\\u{{{:x}}}", c as u32)?,
            }
            rest = &rest[at + c.len_utf8()..];
        }
        f.write_str(rest)
    }
}

fn needs_escape(c: char) -> bool {
    c == '\\' || c.is_control() || matches!(c, '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// Lines one address may cause in a burst, and how fast that allowance
/// comes back: a line per second.
const BURST: u32 = 10;
const REFILL: Duration = Duration::from_secs(1);

/// Addresses followed at once; past that, the ones whose allowance is whole
/// again are forgotten, and if none is, the newcomers share one allowance.
const ADDRESSES: usize = 4096;

/// How many log lines each client address may still cause (see the module
/// comment). `None` stands for clients without one (the unix socket) and,
/// when too many addresses are followed, for the newest.
#[derive(Default)]
pub struct PerAddress {
    addresses: HashMap<Option<IpAddr>, Allowance>,
}

struct Allowance {
    left: u32,
    since: Instant,
    /// Lines not written since the last one that was.
    suppressed: u64,
}

impl PerAddress {
    /// Whether a line about `addr` may be written at `now`: `Some(n)` if it
    /// may, `n` being how many were not since the last one that was.
    pub fn admit(&mut self, addr: Option<IpAddr>, now: Instant) -> Option<u64> {
        if self.addresses.len() >= ADDRESSES && !self.addresses.contains_key(&addr) {
            self.addresses.retain(|_, a| {
                a.refill(now);
                a.left < BURST
            });
        }
        let key = if self.addresses.len() >= ADDRESSES && !self.addresses.contains_key(&addr) { None } else { addr };
        let allowance = self.addresses.entry(key).or_insert(Allowance { left: BURST, since: now, suppressed: 0 });
        allowance.refill(now);
        if allowance.left == 0 {
            allowance.suppressed += 1;
            return None;
        }
        allowance.left -= 1;
        Some(std::mem::take(&mut allowance.suppressed))
    }
}

impl Allowance {
    /// Adds the lines that came back by `now` (one per [`REFILL`] since
    /// `since`, up to [`BURST`]).
    fn refill(&mut self, now: Instant) {
        let back = now.saturating_duration_since(self.since).as_nanos() / REFILL.as_nanos();
        if back == 0 {
            return;
        }
        let left = (u128::from(self.left) + back).min(u128::from(BURST)) as u32;
        self.since = match left {
            BURST => now,
            _ => self.since + REFILL * (back as u32),
        };
        self.left = left;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_and_backslashes_are_escaped_and_the_rest_is_left_alone() {
        let shown = |s: &str| Escaped(s).to_string();
        assert_eq!(shown("alice"), "alice");
        assert_eq!(shown("zoë ünïcode 数据库"), "zoë ünïcode 数据库");
        assert_eq!(shown("a\0b"), "a\\0b");
        assert_eq!(shown("x\n2026-12-01 INFO forged line"), "x\\n2026-12-01 INFO forged line");
        assert_eq!(shown("\r\t\x1b[31mred\x7f"), "\\r\\t\\x1b[31mred\\x7f");
        assert_eq!(shown("back\\slash"), "back\\\\slash");
        assert_eq!(shown("\u{85}next line, \u{202e}reversed"), "\\u{85}next line, \\u{202e}reversed");
        // Escaping is unambiguous: an escape in the input stays visible as such.
        assert_ne!(shown("\\n"), shown("\n"));
    }

    #[test]
    fn an_address_gets_a_burst_of_lines_then_one_a_second_and_hears_of_what_was_left_out() {
        let mut limit = PerAddress::default();
        let (a, b) = (Some(IpAddr::from([10, 0, 0, 1])), Some(IpAddr::from([10, 0, 0, 2])));
        let t0 = Instant::now();
        for _ in 0..BURST {
            assert_eq!(limit.admit(a, t0), Some(0));
        }
        for _ in 0..5 {
            assert_eq!(limit.admit(a, t0), None);
        }
        assert_eq!(limit.admit(b, t0), Some(0), "another address has its own allowance");
        assert_eq!(limit.admit(a, t0 + REFILL), Some(5), "a line a second comes back, telling what was left out");
        assert_eq!(limit.admit(a, t0 + REFILL), None);
        // Half a second at a time still adds up to a line a second.
        assert_eq!(limit.admit(a, t0 + REFILL + REFILL / 2), None);
        assert_eq!(limit.admit(a, t0 + REFILL * 2), Some(2));
        assert_eq!(limit.admit(a, t0 + REFILL * 100), Some(0));
        for _ in 1..BURST {
            assert!(limit.admit(a, t0 + REFILL * 100).is_some(), "the whole burst is back after a quiet while");
        }
    }

    #[test]
    fn following_many_addresses_stays_bounded() {
        let mut limit = PerAddress::default();
        let t0 = Instant::now();
        for i in 0..(ADDRESSES as u32 * 3) {
            limit.admit(Some(IpAddr::from(i.to_be_bytes())), t0);
        }
        assert!(limit.addresses.len() <= ADDRESSES + 1);
        // The newest share one allowance then, used up by now.
        assert_eq!(limit.admit(Some(IpAddr::from([1, 2, 3, 4])), t0), None);
        // Once the first ones' allowances are whole again, they are forgotten.
        assert_eq!(limit.admit(Some(IpAddr::from([1, 2, 3, 4])), t0 + REFILL * BURST), Some(0));
    }
}
