//! A WAL position (`pg_lsn`), as PostgreSQL prints it (`16/B374D848`).

use thiserror::Error;

/// A position in the primary's WAL; later positions compare greater.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Lsn(pub u64);

#[derive(Debug, Error, PartialEq, Eq)]
#[error("not a WAL position (pg_lsn, as 16/B374D848): {0:?}")]
pub struct BadLsn(pub String);

impl std::str::FromStr for Lsn {
    type Err = BadLsn;

    /// PostgreSQL's `pg_lsn` input: two hexadecimal numbers of up to 8
    /// digits each, separated by `/`.
    fn from_str(text: &str) -> Result<Lsn, BadLsn> {
        let bad = || BadLsn(text.to_owned());
        let (high, low) = text.trim().split_once('/').ok_or_else(bad)?;
        let half = |s: &str| {
            if s.is_empty() || s.len() > 8 || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
                None
            } else {
                u32::from_str_radix(s, 16).ok()
            }
        };
        let (high, low) = (half(high).ok_or_else(bad)?, half(low).ok_or_else(bad)?);
        Ok(Lsn((u64::from(high) << 32) | u64::from(low)))
    }
}

impl std::fmt::Display for Lsn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:X}/{:X}", self.0 >> 32, self.0 & 0xffff_ffff)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_and_prints_postgresql_spelling() {
        for (text, value) in [("0/0", 0u64), ("16/B374D848", 0x16_B374_D848), ("FFFFFFFF/FFFFFFFF", u64::MAX), ("0/1", 1)] {
            let lsn: Lsn = text.parse().unwrap();
            assert_eq!(lsn, Lsn(value));
            assert_eq!(lsn.to_string(), text);
        }
        assert_eq!(" 0/3000148 ".parse::<Lsn>(), Ok(Lsn(0x300_0148)));
        assert_eq!("16/b374d848".parse::<Lsn>(), Ok(Lsn(0x16_B374_D848)));
        for bad in ["", "0", "/", "0/", "/0", "x/0", "0/123456789", "1/2/3", "-1/0", "0/+1"] {
            assert!(bad.parse::<Lsn>().is_err(), "{bad}");
        }
        assert!("0/10".parse::<Lsn>().unwrap() > "0/F".parse::<Lsn>().unwrap());
        assert!("1/0".parse::<Lsn>().unwrap() > "0/FFFFFFFF".parse::<Lsn>().unwrap());
    }
}
