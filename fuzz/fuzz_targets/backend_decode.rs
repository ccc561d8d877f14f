//! Server → pglane message bodies: every decoder pglane runs on what a
//! PostgreSQL server (or something posing as one) sends. The first input byte
//! picks the decoder, the rest is the body.
//!
//! Where an encoder exists, a decoded value must encode back to the same
//! bytes (RowDescription, DataRow, ParameterDescription, CommandComplete,
//! ReadyForQuery, BackendKeyData), so pglane never alters what it re-sends.
#![no_main]

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use pglane::protocol::backend::{self, Authentication};
use pglane::protocol::frame::split_message;

fn body_of(mut out: BytesMut, tag: u8) -> Vec<u8> {
    let m = split_message(&mut out, usize::MAX >> 1).expect("encoder writes a valid frame").expect("whole");
    assert_eq!(m.tag, tag);
    assert!(out.is_empty(), "encoder wrote one message");
    m.body.to_vec()
}

fuzz_target!(|data: &[u8]| {
    let Some((&which, body)) = data.split_first() else { return };
    match which % 10 {
        0 => {
            if let Ok(auth) = backend::decode_authentication(body) {
                let mut out = BytesMut::new();
                match &auth {
                    Authentication::Ok => backend::authentication_ok(&mut out),
                    Authentication::Md5Password { salt } => backend::authentication_md5(&mut out, *salt),
                    Authentication::SaslContinue(d) => backend::authentication_sasl_continue(&mut out, d),
                    Authentication::SaslFinal(d) => backend::authentication_sasl_final(&mut out, d),
                    Authentication::Sasl { mechanisms } => {
                        assert!(mechanisms.iter().all(|m| !m.is_empty() && !m.contains('\0')));
                        return;
                    }
                    Authentication::CleartextPassword | Authentication::Unsupported(_) => return,
                }
                // Re-encoding reproduces at least the bytes that were read.
                let again = body_of(out, backend::AUTHENTICATION);
                assert!(body.starts_with(&again) || matches!(auth, Authentication::Ok));
                assert_eq!(backend::decode_authentication(&again).unwrap(), auth);
            }
        }
        1 => {
            if let Ok((name, value)) = backend::decode_parameter_status(body) {
                let mut out = BytesMut::new();
                backend::parameter_status(&mut out, &name, &value);
                assert!(body.starts_with(&body_of(out, backend::PARAMETER_STATUS)));
            }
        }
        2 => {
            if let Ok((pid, key)) = backend::decode_backend_key_data(body) {
                let mut out = BytesMut::new();
                backend::backend_key_data(&mut out, pid, key);
                assert_eq!(&body_of(out, backend::BACKEND_KEY_DATA)[..], &body[..8]);
            }
        }
        3 => {
            if let Ok(status) = backend::decode_ready_for_query(body) {
                let mut out = BytesMut::new();
                backend::ready_for_query(&mut out, status);
                assert_eq!(body_of(out, backend::READY_FOR_QUERY), body);
            }
        }
        4 => {
            if let Ok(fields) = backend::decode_error_fields(body) {
                let _ = fields.to_string();
                let mut out = BytesMut::new();
                backend::error_response(&mut out, &fields);
                let again = body_of(out, backend::ERROR_RESPONSE);
                let round = backend::decode_error_fields(&again).expect("re-decodes");
                assert_eq!(round, fields);
            }
        }
        5 => {
            if let Ok(fields) = backend::decode_row_description(body) {
                let mut out = BytesMut::new();
                backend::row_description(&mut out, &fields);
                assert_eq!(body_of(out, backend::ROW_DESCRIPTION), body);
            }
        }
        6 => {
            if let Ok(row) = backend::decode_data_row(body) {
                let values: Vec<Option<&[u8]>> = row.iter().collect();
                assert_eq!(values.len(), row.len());
                assert_eq!(row.iter().len(), row.len());
                let mut out = BytesMut::new();
                backend::data_row(&mut out, &values);
                assert_eq!(body_of(out, backend::DATA_ROW), body);
            }
        }
        7 => {
            if let Ok(tag) = backend::decode_command_complete(body) {
                let _ = backend::command_tag_rows(tag);
                let mut out = BytesMut::new();
                backend::command_complete(&mut out, tag);
                assert_eq!(body_of(out, backend::COMMAND_COMPLETE), body);
            }
        }
        8 => {
            if let Ok(oids) = backend::decode_parameter_description(body) {
                let mut out = BytesMut::new();
                backend::parameter_description(&mut out, &oids);
                assert_eq!(body_of(out, backend::PARAMETER_DESCRIPTION), body);
            }
        }
        9 => {
            if let Ok(s) = std::str::from_utf8(body) {
                let _ = backend::command_tag_rows(s);
            }
            let _ = backend::TransactionStatus::from_byte(body.first().copied().unwrap_or(0));
        }
        _ => unreachable!(),
    }
});
