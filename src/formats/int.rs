//! int2 (21), int4 (23), int8 (20) and oid (26): big-endian two's
//! complement (oid unsigned); text is plain decimal (`int2out`, `int4out`,
//! `int8out`, `oidout`).

use bytes::BytesMut;

use super::{fixed, push_int, TranscodeError};

pub(super) fn write_int2(binary: &[u8], out: &mut BytesMut) -> Result<(), TranscodeError> {
    push_int(out, i16::from_be_bytes(fixed("int2", binary)?));
    Ok(())
}

pub(super) fn write_int4(binary: &[u8], out: &mut BytesMut) -> Result<(), TranscodeError> {
    push_int(out, i32::from_be_bytes(fixed("int4", binary)?));
    Ok(())
}

pub(super) fn write_int8(binary: &[u8], out: &mut BytesMut) -> Result<(), TranscodeError> {
    push_int(out, i64::from_be_bytes(fixed("int8", binary)?));
    Ok(())
}

pub(super) fn write_oid(binary: &[u8], out: &mut BytesMut) -> Result<(), TranscodeError> {
    push_int(out, u32::from_be_bytes(fixed("oid", binary)?));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    type Writer = fn(&[u8], &mut BytesMut) -> Result<(), TranscodeError>;

    fn text(write: Writer, binary: &[u8]) -> String {
        let mut out = BytesMut::new();
        write(binary, &mut out).expect("valid");
        String::from_utf8(out.to_vec()).unwrap()
    }

    #[test]
    fn extremes() {
        assert_eq!(text(write_int2, &i16::MIN.to_be_bytes()), "-32768");
        assert_eq!(text(write_int2, &[0x7f, 0xff]), "32767");
        assert_eq!(text(write_int4, &(-1i32).to_be_bytes()), "-1");
        assert_eq!(text(write_int4, &0i32.to_be_bytes()), "0");
        assert_eq!(text(write_int4, &i32::MIN.to_be_bytes()), "-2147483648");
        assert_eq!(text(write_int8, &i64::MIN.to_be_bytes()), "-9223372036854775808");
        assert_eq!(text(write_int8, &i64::MAX.to_be_bytes()), "9223372036854775807");
        assert_eq!(text(write_oid, &[0xff, 0xff, 0xff, 0xff]), "4294967295");
        assert_eq!(text(write_oid, &26u32.to_be_bytes()), "26");
    }

    #[test]
    fn wrong_length() {
        let mut out = BytesMut::new();
        assert_eq!(write_int8(&[0; 4], &mut out), Err(TranscodeError::Length { ty: "int8", expected: 8, actual: 4 }));
        assert!(write_int2(&[0; 3], &mut out).is_err());
        assert!(write_int4(&[], &mut out).is_err());
        assert!(write_oid(&[0; 8], &mut out).is_err());
        assert!(out.is_empty());
    }
}
