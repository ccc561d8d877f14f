//! text (25), varchar (1043), bpchar (1042), name (19), json (114) and
//! jsonb (3802).
//!
//! Their binary form is the text itself, already converted to the client
//! encoding (`textsend`, `json_send`); bpchar keeps its padding. jsonb adds a
//! version byte, 1, in front of the same text `jsonb_out` prints. The caller
//! must only use these when client and server encoding are the same (see
//! `TextSettings::text_is_identity`).

use bytes::BytesMut;

use super::TranscodeError;

/// The only jsonb binary format version there is.
const JSONB_VERSION: u8 = 1;

pub(super) fn write_identity(binary: &[u8], out: &mut BytesMut) {
    out.extend_from_slice(binary);
}

pub(super) fn write_jsonb(binary: &[u8], out: &mut BytesMut) -> Result<(), TranscodeError> {
    match binary.split_first() {
        Some((&JSONB_VERSION, text)) => {
            out.extend_from_slice(text);
            Ok(())
        }
        Some(_) => Err(TranscodeError::Invalid { ty: "jsonb", reason: "unknown version" }),
        None => Err(TranscodeError::Truncated { ty: "jsonb" }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identity_keeps_every_byte() {
        let mut out = BytesMut::new();
        write_identity("héllo  ".as_bytes(), &mut out);
        write_identity(b"", &mut out);
        assert_eq!(&out[..], "héllo  ".as_bytes());
    }

    #[test]
    fn jsonb_drops_the_version_byte() {
        let mut out = BytesMut::new();
        write_jsonb(b"\x01{\"a\": [1, 2], \"b\": 1}", &mut out).unwrap();
        assert_eq!(&out[..], b"{\"a\": [1, 2], \"b\": 1}");
        assert!(write_jsonb(b"\x02{}", &mut out).is_err());
        assert!(write_jsonb(b"", &mut out).is_err());
    }
}
