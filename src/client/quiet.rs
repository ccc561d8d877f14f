//! Statement texts a client sent before in which pglane's scans found
//! nothing to act on.
//!
//! Every Parse is scanned word by word: for session state that pins the
//! client ([`super::pinning`]), for output settings it names (binary
//! negotiation) and for `search_path` (auto-prepare). Under `pgbench -S -M
//! extended` those scans were a fifth of pglane's own instructions per
//! transaction (callgrind), and clients parse the same few texts over and
//! over. The scans are pure functions of the text, so a text found quiet
//! once is quiet for good: this remembers one client's last few quiet texts,
//! and a repeat is recognized by comparing bytes, without decoding or
//! scanning it again.
//! What else the caller works out from the text alone (whether it leaves
//! the server session alone, whether it holds string literals, ...), as
//! pure, is kept with the text: its answer, of any small `Copy` type.
//!
//! Simple queries are not cached: their literals make nearly every text a
//! new one, and a miss costs more than the scans it would save.
//!
//! What it must not do: decide anything itself. The caller scans a text it
//! does not find here and remembers it only if every scan came back empty.
//! Bounded per client: [`ENTRIES`] texts of at most [`MAX_LEN`] bytes, their
//! buffers reused as entries are replaced.

/// How many texts a client's cache keeps (replaced round-robin).
const ENTRIES: usize = 8;

/// Longer texts are scanned every time (they are rarely the hot ones, and
/// the cache's memory stays small with many clients).
const MAX_LEN: usize = 512;

#[derive(Debug)]
pub struct QuietTexts<A> {
    texts: Vec<Vec<u8>>,
    /// What the caller said of each text, kept with it.
    answers: Vec<A>,
    /// The entry the next text replaces once all are in use.
    next: usize,
}

impl<A> Default for QuietTexts<A> {
    fn default() -> Self {
        QuietTexts { texts: Vec::new(), answers: Vec::new(), next: 0 }
    }
}

impl<A: Copy> QuietTexts<A> {
    pub fn contains(&self, text: &[u8]) -> bool {
        self.get(text).is_some()
    }

    /// For a text found quiet before, what the caller said of it.
    pub fn get(&self, text: &[u8]) -> Option<A> {
        self.texts.iter().position(|t| t.as_slice() == text).map(|i| self.answers[i])
    }

    /// Remembers `text`, which every scan found quiet, and what the caller
    /// says of it.
    pub fn remember(&mut self, text: &[u8], answer: A) {
        if text.len() > MAX_LEN || self.contains(text) {
            return;
        }
        if self.texts.len() < ENTRIES {
            self.texts.push(text.to_vec());
            self.answers.push(answer);
            return;
        }
        let entry = &mut self.texts[self.next];
        entry.clear();
        entry.extend_from_slice(text);
        self.answers[self.next] = answer;
        self.next = (self.next + 1) % ENTRIES;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remembers_the_last_texts_and_forgets_the_oldest() {
        let mut quiet = QuietTexts::<bool>::default();
        let texts: Vec<String> = (0..ENTRIES + 2).map(|i| format!("select {i}")).collect();
        for t in &texts {
            quiet.remember(t.as_bytes(), false);
        }
        assert!(!quiet.contains(texts[0].as_bytes()));
        assert!(!quiet.contains(texts[1].as_bytes()));
        assert!(texts[2..].iter().all(|t| quiet.contains(t.as_bytes())));
        quiet.remember(b"select 1", true);
        assert_eq!(quiet.get(b"select 1"), Some(true), "an entry replaced takes the new text's answer");
        assert!(!quiet.contains(b"select"), "whole texts only, not prefixes");
    }

    #[test]
    fn long_texts_are_not_kept() {
        let mut quiet = QuietTexts::<bool>::default();
        let long = vec![b'x'; MAX_LEN + 1];
        quiet.remember(&long, false);
        assert!(!quiet.contains(&long));
    }

    #[test]
    fn a_repeat_does_not_take_a_second_entry() {
        let mut quiet = QuietTexts::<bool>::default();
        for _ in 0..3 * ENTRIES {
            quiet.remember(b"select 1", true);
        }
        quiet.remember(b"select 2", false);
        assert_eq!((quiet.get(b"select 1"), quiet.get(b"select 2")), (Some(true), Some(false)));
        assert_eq!(quiet.texts.len(), 2);
    }
}
