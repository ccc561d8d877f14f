//! uuid (2950): 16 bytes; text is lowercase hex in 8-4-4-4-12 groups
//! (`uuid_out`).

use bytes::BytesMut;

use super::{fixed, TranscodeError};

/// Each byte's two lowercase hex digits.
const HEX_PAIRS: [[u8; 2]; 256] = {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut table = [[0u8; 2]; 256];
    let mut i = 0;
    while i < 256 {
        table[i] = [HEX[i >> 4], HEX[i & 0xf]];
        i += 1;
    }
    table
};

/// Where each byte's digits go in `xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`.
const POSITIONS: [usize; 16] = [0, 2, 4, 6, 9, 11, 14, 16, 19, 21, 24, 26, 28, 30, 32, 34];

pub(super) fn write_uuid(binary: &[u8], out: &mut BytesMut) -> Result<(), TranscodeError> {
    let bytes: [u8; 16] = fixed("uuid", binary)?;
    let mut text = [b'-'; 36];
    for (byte, at) in bytes.into_iter().zip(POSITIONS) {
        text[at..at + 2].copy_from_slice(&HEX_PAIRS[usize::from(byte)]);
    }
    out.extend_from_slice(&text);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_and_lowercase() {
        let mut out = BytesMut::new();
        let binary = [0xa0, 0xee, 0xbc, 0x99, 0x9c, 0x0b, 0x4e, 0xf8, 0xbb, 0x6d, 0x6b, 0xb9, 0xbd, 0x38, 0x0a, 0x11];
        write_uuid(&binary, &mut out).unwrap();
        assert_eq!(&out[..], b"a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11");
    }

    #[test]
    fn extremes_and_malformed() {
        let mut out = BytesMut::new();
        write_uuid(&[0; 16], &mut out).unwrap();
        write_uuid(&[0xff; 16], &mut out).unwrap();
        assert_eq!(&out[..], b"00000000-0000-0000-0000-000000000000ffffffff-ffff-ffff-ffff-ffffffffffff");
        assert!(write_uuid(&[0; 15], &mut out).is_err());
    }
}
