//! inet (869) and cidr (650): `u8 family (2 = IPv4, 3 = IPv6), u8 bits,
//! u8 is_cidr, u8 address length`, then the address (`network_send`); text
//! as `inet_out` / `cidr_out` print it (PostgreSQL's `inet_net_ntop`).
//!
//! IPv4 is dotted quad; IPv6 is lowercase hex words with the longest run
//! (at least two) of zero words as `::`, and the last 32 bits dotted when
//! the address looks IPv4-compatible or IPv4-mapped. `/bits` follows when it
//! is not the full width; cidr always prints it.

use bytes::BytesMut;

use super::{push_int, TranscodeError};

const FAMILY_V4: u8 = 2;
const FAMILY_V6: u8 = 3;

pub(super) fn write_inet(binary: &[u8], out: &mut BytesMut) -> Result<(), TranscodeError> {
    write_network("inet", binary, false, out)
}

pub(super) fn write_cidr(binary: &[u8], out: &mut BytesMut) -> Result<(), TranscodeError> {
    write_network("cidr", binary, true, out)
}

fn write_network(ty: &'static str, binary: &[u8], is_cidr: bool, out: &mut BytesMut) -> Result<(), TranscodeError> {
    let (&[family, bits, _is_cidr, len], address) = binary.split_first_chunk::<4>().ok_or(TranscodeError::Truncated { ty })?;
    let width = match family {
        FAMILY_V4 => 32,
        FAMILY_V6 => 128,
        _ => return Err(TranscodeError::Invalid { ty, reason: "unknown address family" }),
    };
    if usize::from(len) != width / 8 || address.len() != width / 8 {
        return Err(TranscodeError::Invalid { ty, reason: "address length does not match family" });
    }
    if usize::from(bits) > width {
        return Err(TranscodeError::Invalid { ty, reason: "netmask longer than the address" });
    }
    match address {
        &[a, b, c, d] => write_v4([a, b, c, d], out),
        _ => write_v6(address, out),
    }
    if usize::from(bits) != width || is_cidr {
        out.extend_from_slice(b"/");
        push_int(out, bits);
    }
    Ok(())
}

fn write_v4(octets: [u8; 4], out: &mut BytesMut) {
    for (i, octet) in octets.into_iter().enumerate() {
        if i > 0 {
            out.extend_from_slice(b".");
        }
        push_int(out, octet);
    }
}

/// `inet_net_ntop_ipv6` without the netmask.
fn write_v6(address: &[u8], out: &mut BytesMut) {
    let mut words = [0u16; 8];
    for (word, pair) in words.iter_mut().zip(address.chunks_exact(2)) {
        *word = u16::from_be_bytes([pair[0], pair[1]]);
    }
    let best = longest_zero_run(&words);

    let mut i = 0;
    while i < 8 {
        if let Some((base, len)) = best {
            if i == base {
                out.extend_from_slice(b":");
                i += len;
                continue;
            }
        }
        if i != 0 {
            out.extend_from_slice(b":");
        }
        // An IPv4-compatible (::a.b.c.d, but not ::1) or mapped
        // (::ffff:a.b.c.d) address ends in dotted quad.
        let embeds_v4 = match best {
            Some((0, 6)) => true,
            Some((0, 7)) => words[7] != 1,
            Some((0, 5)) => words[5] == 0xffff,
            _ => false,
        };
        if i == 6 && embeds_v4 {
            write_v4([address[12], address[13], address[14], address[15]], out);
            return;
        }
        write_hex(words[i], out);
        i += 1;
    }
    if best.is_some_and(|(base, len)| base + len == 8) {
        out.extend_from_slice(b":");
    }
}

/// The first longest run of zero words as (start, length), if it has at
/// least two words: the part `::` replaces.
fn longest_zero_run(words: &[u16; 8]) -> Option<(usize, usize)> {
    let mut best = (0, 0);
    let mut start = 0;
    for (i, &word) in words.iter().enumerate() {
        if word != 0 {
            start = i + 1;
        } else if i + 1 - start > best.1 {
            best = (start, i + 1 - start);
        }
    }
    (best.1 >= 2).then_some(best)
}

fn write_hex(word: u16, out: &mut BytesMut) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let digits = [word >> 12, (word >> 8) & 0xf, (word >> 4) & 0xf, word & 0xf].map(|d| HEX[usize::from(d)]);
    let skip = (word.leading_zeros() / 4).min(3) as usize;
    out.extend_from_slice(&digits[skip..]);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn binary(family: u8, bits: u8, address: &[u8]) -> Vec<u8> {
        let mut b = vec![family, bits, 0, address.len() as u8];
        b.extend_from_slice(address);
        b
    }

    fn inet(bits: u8, address: &[u8]) -> String {
        let family = if address.len() == 4 { FAMILY_V4 } else { FAMILY_V6 };
        let mut out = BytesMut::new();
        write_inet(&binary(family, bits, address), &mut out).expect("valid");
        String::from_utf8(out.to_vec()).unwrap()
    }

    fn cidr(bits: u8, address: &[u8]) -> String {
        let family = if address.len() == 4 { FAMILY_V4 } else { FAMILY_V6 };
        let mut out = BytesMut::new();
        write_cidr(&binary(family, bits, address), &mut out).expect("valid");
        String::from_utf8(out.to_vec()).unwrap()
    }

    fn v6(words: [u16; 8]) -> Vec<u8> {
        words.iter().flat_map(|w| w.to_be_bytes()).collect()
    }

    #[test]
    fn ipv4() {
        assert_eq!(inet(24, &[192, 168, 0, 1]), "192.168.0.1/24");
        assert_eq!(inet(32, &[10, 0, 0, 1]), "10.0.0.1");
        assert_eq!(cidr(8, &[10, 0, 0, 0]), "10.0.0.0/8");
        assert_eq!(cidr(32, &[10, 0, 0, 1]), "10.0.0.1/32");
        assert_eq!(inet(0, &[0, 0, 0, 0]), "0.0.0.0/0");
    }

    #[test]
    fn ipv6() {
        assert_eq!(inet(128, &v6([0x2001, 0xdb8, 0, 0, 0, 0, 0, 1])), "2001:db8::1");
        assert_eq!(inet(128, &v6([0, 0, 0, 0, 0, 0xffff, 0x0102, 0x0304])), "::ffff:1.2.3.4");
        assert_eq!(inet(128, &v6([0; 8])), "::");
        assert_eq!(inet(128, &v6([0, 0, 0, 0, 0, 0, 0, 1])), "::1");
        // ::2 is not dotted: the check for it sits inside the zero run.
        assert_eq!(inet(128, &v6([0, 0, 0, 0, 0, 0, 0, 2])), "::2");
        assert_eq!(inet(128, &v6([0, 0, 0, 0, 0xffff, 0, 0x0102, 0x0304])), "::ffff:0:102:304");
        assert_eq!(inet(128, &v6([0, 0, 0, 0, 0, 0, 0x0102, 0x0304])), "::1.2.3.4");
        assert_eq!(inet(128, &v6([1, 0, 0, 0, 0, 0, 0, 0])), "1::");
        assert_eq!(inet(128, &v6([1, 0, 1, 0, 0, 1, 0, 0])), "1:0:1::1:0:0");
        assert_eq!(inet(64, &v6([1, 0, 0, 1, 0, 0, 1, 1])), "1::1:0:0:1:1/64");
        assert_eq!(cidr(128, &v6([0xfe80, 0, 0, 0, 0, 0, 0, 0xabcd])), "fe80::abcd/128");
    }

    #[test]
    fn malformed() {
        let mut out = BytesMut::new();
        assert!(write_inet(&[2, 32, 0], &mut out).is_err());
        assert!(write_inet(&binary(4, 32, &[1, 2, 3, 4]), &mut out).is_err());
        assert!(write_inet(&binary(2, 33, &[1, 2, 3, 4]), &mut out).is_err());
        assert!(write_inet(&binary(3, 128, &[1, 2, 3, 4]), &mut out).is_err());
        assert!(write_inet(&[2, 32, 0, 4, 1, 2, 3], &mut out).is_err());
    }
}
