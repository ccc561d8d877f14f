//! The keywords the scanner acts on (all others are plain words), and what
//! each means to it: an expression starts after it, it ends an ORDER BY /
//! GROUP BY list, it continues a type name.

use super::chars::lowercase_word;

/// Declares [`Kw`] and its lookup: a word (at most 16 bytes) is packed,
/// lowercased, into a `u128` and matched against the packed keywords, one
/// integer `match` instead of a string comparison per keyword.
macro_rules! keywords {
    ($($word:literal => $kw:ident,)*) => {
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub(super) enum Kw {
            None,
            /// `ON` right after `DISTINCT`: the next `(` holds ORDER BY-like items.
            DistinctOn,
            $($kw,)*
        }

        #[allow(non_upper_case_globals)]
        mod packed {
            $(pub const $kw: u128 = super::pack($word);)*
        }

        impl Kw {
            #[inline(always)]
            pub(super) fn lookup(word: &[u8]) -> Kw {
                match pack_lowercase(word) {
                    $(packed::$kw => Kw::$kw,)*
                    _ => Kw::None,
                }
            }
        }
    };
}

keywords! {
    b"all" => All,
    b"and" => And,
    b"as" => As,
    b"asymmetric" => Asymmetric,
    b"between" => Between,
    b"by" => By,
    b"case" => Case,
    b"character" => Character,
    b"day" => Day,
    b"distinct" => Distinct,
    b"else" => Else,
    b"escape" => Escape,
    b"except" => Except,
    b"extract" => Extract,
    b"fetch" => Fetch,
    b"first" => First,
    b"for" => For,
    b"from" => From,
    b"group" => Group,
    b"groups" => Groups,
    b"having" => Having,
    b"hour" => Hour,
    b"ilike" => Ilike,
    b"in" => In,
    b"intersect" => Intersect,
    b"like" => Like,
    b"limit" => Limit,
    b"materialized" => Materialized,
    b"minute" => Minute,
    b"month" => Month,
    b"next" => Next,
    b"not" => Not,
    b"offset" => Offset,
    b"on" => On,
    b"or" => Or,
    b"order" => Order,
    b"partition" => Partition,
    b"precision" => Precision,
    b"range" => Range,
    b"returning" => Returning,
    b"rows" => Rows,
    b"second" => Second,
    b"select" => Select,
    b"symmetric" => Symmetric,
    b"then" => Then,
    b"time" => Time,
    b"to" => To,
    b"union" => Union,
    b"values" => Values,
    b"varying" => Varying,
    b"when" => When,
    b"where" => Where,
    b"window" => Window,
    b"with" => With,
    b"without" => Without,
    b"year" => Year,
    b"zone" => Zone,
}

/// A keyword's bytes, little-endian in a `u128` (zero-padded).
const fn pack(word: &[u8]) -> u128 {
    let mut packed = 0;
    let mut i = 0;
    while i < word.len() {
        packed |= (word[i] as u128) << (8 * i);
        i += 1;
    }
    packed
}

/// [`pack`] of a word ASCII-lowercased, read with overlapping loads rather
/// than a byte loop; 0 (no keyword) if longer than 16 bytes.
#[inline]
fn pack_lowercase(word: &[u8]) -> u128 {
    let len = word.len();
    let packed = match len {
        0 => return 0,
        1..=3 => {
            u128::from(word[0]) | u128::from(word[len / 2]) << (8 * (len / 2)) | u128::from(word[len - 1]) << (8 * (len - 1))
        }
        4..=8 => {
            let first = u32::from_le_bytes(word[..4].try_into().expect("4 bytes"));
            let last = u32::from_le_bytes(word[len - 4..].try_into().expect("4 bytes"));
            u128::from(first) | u128::from(last) << (8 * (len - 4))
        }
        9..=16 => {
            let first = u64::from_le_bytes(word[..8].try_into().expect("8 bytes"));
            let last = u64::from_le_bytes(word[len - 8..].try_into().expect("8 bytes"));
            u128::from(first) | u128::from(last) << (8 * (len - 8))
        }
        _ => return 0,
    };
    u128::from(lowercase_word(packed as u64)) | u128::from(lowercase_word((packed >> 64) as u64)) << 64
}

impl Kw {
    /// Keywords after which an expression starts: a literal there is a value
    /// (and may become a slot), a `-` there is a unary minus. After any other
    /// word a literal is kept (`date '…'`) and a `-` subtracts.
    #[inline]
    pub(super) fn starts_expression(self) -> bool {
        matches!(
            self,
            Kw::All
                | Kw::And
                | Kw::Asymmetric
                | Kw::Between
                | Kw::By
                | Kw::Case
                | Kw::Distinct
                | Kw::Else
                | Kw::Escape
                | Kw::First
                | Kw::For
                | Kw::From
                | Kw::Having
                | Kw::Ilike
                | Kw::In
                | Kw::Like
                | Kw::Limit
                | Kw::Next
                | Kw::Not
                | Kw::Offset
                | Kw::On
                | Kw::Or
                | Kw::Returning
                | Kw::Select
                | Kw::Symmetric
                | Kw::Then
                | Kw::When
                | Kw::Where
        )
    }

    /// Keywords that end an ORDER BY / GROUP BY list at their level.
    #[inline]
    pub(super) fn ends_list(self) -> bool {
        matches!(
            self,
            Kw::Except
                | Kw::Fetch
                | Kw::For
                | Kw::From
                | Kw::Group
                | Kw::Groups
                | Kw::Having
                | Kw::Intersect
                | Kw::Limit
                | Kw::Offset
                | Kw::Order
                | Kw::Partition
                | Kw::Range
                | Kw::Returning
                | Kw::Rows
                | Kw::Select
                | Kw::Union
                | Kw::Values
                | Kw::Where
                | Kw::Window
        )
    }

    /// Words that continue a type name after its first word
    /// (`double precision`, `timestamp with time zone`, `interval day to second`).
    #[inline]
    pub(super) fn continues_type_name(self) -> bool {
        matches!(
            self,
            Kw::Character
                | Kw::Day
                | Kw::Hour
                | Kw::Minute
                | Kw::Month
                | Kw::Precision
                | Kw::Second
                | Kw::Time
                | Kw::To
                | Kw::Varying
                | Kw::With
                | Kw::Without
                | Kw::Year
                | Kw::Zone
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keywords_whatever_their_case_or_length() {
        assert_eq!(Kw::lookup(b"SELECT"), Kw::Select);
        assert_eq!(Kw::lookup(b"sElEcT"), Kw::Select);
        assert_eq!(Kw::lookup(b"Materialized"), Kw::Materialized);
        for word in [&b"selects"[..], b"selec", b"s", b"", b"materializedd", b"a_very_long_identifier_indeed", b"\xc3\xa9"] {
            assert_eq!(Kw::lookup(word), Kw::None, "{word:?}");
        }
        for len in 1..=16 {
            let word: Vec<u8> = (0..len).map(|i| b'A' + i as u8).collect();
            assert_eq!(pack_lowercase(&word), pack(&word.to_ascii_lowercase()), "{len}");
        }
        assert_eq!(pack_lowercase(&[b'a'; 17]), 0);
    }
}
