//! bool (16): one byte, 0 or 1 (`boolsend`); text `t` / `f` (`boolout`).

use bytes::BytesMut;

use super::{fixed, TranscodeError};

pub(super) fn write_bool(binary: &[u8], out: &mut BytesMut) -> Result<(), TranscodeError> {
    let text: &[u8] = match fixed::<1>("bool", binary)? {
        [0] => b"f",
        [1] => b"t",
        _ => return Err(TranscodeError::Invalid { ty: "bool", reason: "byte is neither 0 nor 1" }),
    };
    out.extend_from_slice(text);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(binary: &[u8]) -> Result<String, TranscodeError> {
        let mut out = BytesMut::new();
        write_bool(binary, &mut out).map(|()| String::from_utf8(out.to_vec()).unwrap())
    }

    #[test]
    fn t_and_f() {
        assert_eq!(text(&[1]).unwrap(), "t");
        assert_eq!(text(&[0]).unwrap(), "f");
    }

    #[test]
    fn malformed() {
        assert!(matches!(text(&[2]), Err(TranscodeError::Invalid { .. })));
        assert_eq!(text(&[]), Err(TranscodeError::Length { ty: "bool", expected: 1, actual: 0 }));
        assert!(text(&[0, 1]).is_err());
    }
}
