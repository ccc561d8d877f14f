//! bytea (17): the raw bytes; text depends on bytea_output (`byteaout`):
//! hex is `\x` and two lowercase hex digits per byte, escape keeps printable
//! ASCII, doubles backslashes and writes every other byte as `\ooo` octal.

use bytes::BytesMut;

use super::ByteaOutput;

const HEX: &[u8; 16] = b"0123456789abcdef";

pub(super) fn write_bytea(binary: &[u8], style: ByteaOutput, out: &mut BytesMut) {
    match style {
        ByteaOutput::Hex => {
            out.reserve(2 + 2 * binary.len());
            out.extend_from_slice(b"\\x");
            for chunk in binary.chunks(64) {
                let mut hex = [0u8; 128];
                for (pair, &byte) in hex.chunks_exact_mut(2).zip(chunk) {
                    pair[0] = HEX[usize::from(byte >> 4)];
                    pair[1] = HEX[usize::from(byte & 0xf)];
                }
                out.extend_from_slice(&hex[..2 * chunk.len()]);
            }
        }
        ByteaOutput::Escape => {
            for &byte in binary {
                match byte {
                    b'\\' => out.extend_from_slice(b"\\\\"),
                    0x20..=0x7e => out.extend_from_slice(&[byte]),
                    _ => out.extend_from_slice(&[b'\\', b'0' + (byte >> 6), b'0' + ((byte >> 3) & 7), b'0' + (byte & 7)]),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(binary: &[u8], style: ByteaOutput) -> String {
        let mut out = BytesMut::new();
        write_bytea(binary, style, &mut out);
        String::from_utf8(out.to_vec()).unwrap()
    }

    #[test]
    fn hex() {
        assert_eq!(text(b"", ByteaOutput::Hex), "\\x");
        assert_eq!(text(&[0x01, 0x02, 0xff], ByteaOutput::Hex), "\\x0102ff");
        let long: Vec<u8> = (0..=255).collect();
        let expected: String = long.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(text(&long, ByteaOutput::Hex), format!("\\x{expected}"));
    }

    #[test]
    fn escape() {
        assert_eq!(text(b"", ByteaOutput::Escape), "");
        assert_eq!(text(b"a b~", ByteaOutput::Escape), "a b~");
        assert_eq!(text(&[0, 0x1f, 0x7f, 0xff], ByteaOutput::Escape), "\\000\\037\\177\\377");
        assert_eq!(text(b"\\'\"", ByteaOutput::Escape), "\\\\'\"");
    }
}
