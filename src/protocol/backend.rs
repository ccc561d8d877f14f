//! Messages sent by the server side of a connection: PostgreSQL to pglane, and
//! pglane (posing as PostgreSQL) to its clients.

use bytes::{BufMut, BytesMut};

use super::frame::HEADER_LEN;
use super::{put_cstr, put_message, ProtocolError, Reader};

pub const AUTHENTICATION: u8 = b'R';
pub const PARAMETER_STATUS: u8 = b'S';
pub const BACKEND_KEY_DATA: u8 = b'K';
pub const READY_FOR_QUERY: u8 = b'Z';
pub const ERROR_RESPONSE: u8 = b'E';
pub const NOTICE_RESPONSE: u8 = b'N';
pub const COPY_IN_RESPONSE: u8 = b'G';
pub const COPY_OUT_RESPONSE: u8 = b'H';
pub const COPY_BOTH_RESPONSE: u8 = b'W';
pub const NEGOTIATE_PROTOCOL_VERSION: u8 = b'v';
pub const ROW_DESCRIPTION: u8 = b'T';
pub const DATA_ROW: u8 = b'D';
pub const COMMAND_COMPLETE: u8 = b'C';
pub const EMPTY_QUERY_RESPONSE: u8 = b'I';
pub const PARAMETER_DESCRIPTION: u8 = b't';
pub const NO_DATA: u8 = b'n';
pub const PARSE_COMPLETE: u8 = b'1';
pub const BIND_COMPLETE: u8 = b'2';
pub const CLOSE_COMPLETE: u8 = b'3';
pub const PORTAL_SUSPENDED: u8 = b's';
pub const NOTIFICATION_RESPONSE: u8 = b'A';

/// A message the server may send whenever it likes, answering no request
/// of the client's: NoticeResponse, NotificationResponse, ParameterStatus
/// (protocol docs, "Asynchronous Operations").
pub fn is_asynchronous(tag: u8) -> bool {
    matches!(tag, NOTICE_RESPONSE | NOTIFICATION_RESPONSE | PARAMETER_STATUS)
}

/// Transaction status reported in ReadyForQuery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TransactionStatus {
    Idle,
    InTransaction,
    Failed,
}

impl TransactionStatus {
    pub fn from_byte(b: u8) -> Result<Self, ProtocolError> {
        match b {
            b'I' => Ok(Self::Idle),
            b'T' => Ok(Self::InTransaction),
            b'E' => Ok(Self::Failed),
            _ => Err(ProtocolError::Malformed("ReadyForQuery")),
        }
    }

    pub fn as_byte(self) -> u8 {
        match self {
            Self::Idle => b'I',
            Self::InTransaction => b'T',
            Self::Failed => b'E',
        }
    }
}

/// An Authentication ('R') request from a server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Authentication {
    Ok,
    CleartextPassword,
    Md5Password {
        salt: [u8; 4],
    },
    Sasl {
        mechanisms: Vec<String>,
    },
    SaslContinue(Vec<u8>),
    SaslFinal(Vec<u8>),
    /// Kerberos, GSS, SSPI: methods pglane does not speak.
    Unsupported(i32),
}

pub fn decode_authentication(body: &[u8]) -> Result<Authentication, ProtocolError> {
    let mut r = Reader::new(body, "Authentication");
    Ok(match r.i32()? {
        0 => Authentication::Ok,
        3 => Authentication::CleartextPassword,
        5 => {
            let s = r.bytes(4)?;
            Authentication::Md5Password { salt: [s[0], s[1], s[2], s[3]] }
        }
        10 => {
            let mut mechanisms = Vec::new();
            loop {
                let m = r.cstr()?;
                if m.is_empty() {
                    break;
                }
                mechanisms.push(m.to_owned());
            }
            Authentication::Sasl { mechanisms }
        }
        11 => Authentication::SaslContinue(r.rest().to_vec()),
        12 => Authentication::SaslFinal(r.rest().to_vec()),
        other => Authentication::Unsupported(other),
    })
}

pub fn authentication_ok(buf: &mut BytesMut) {
    put_message(buf, AUTHENTICATION, |b| b.put_i32(0));
}

pub fn authentication_cleartext_password(buf: &mut BytesMut) {
    put_message(buf, AUTHENTICATION, |b| b.put_i32(3));
}

pub fn authentication_md5(buf: &mut BytesMut, salt: [u8; 4]) {
    put_message(buf, AUTHENTICATION, |b| {
        b.put_i32(5);
        b.put_slice(&salt);
    });
}

pub fn authentication_sasl(buf: &mut BytesMut, mechanisms: &[&str]) {
    put_message(buf, AUTHENTICATION, |b| {
        b.put_i32(10);
        for m in mechanisms {
            put_cstr(b, m);
        }
        b.put_u8(0);
    });
}

pub fn authentication_sasl_continue(buf: &mut BytesMut, data: &[u8]) {
    put_message(buf, AUTHENTICATION, |b| {
        b.put_i32(11);
        b.put_slice(data);
    });
}

pub fn authentication_sasl_final(buf: &mut BytesMut, data: &[u8]) {
    put_message(buf, AUTHENTICATION, |b| {
        b.put_i32(12);
        b.put_slice(data);
    });
}

pub fn parameter_status(buf: &mut BytesMut, name: &str, value: &str) {
    put_message(buf, PARAMETER_STATUS, |b| {
        put_cstr(b, name);
        put_cstr(b, value);
    });
}

pub fn decode_parameter_status(body: &[u8]) -> Result<(String, String), ProtocolError> {
    let mut r = Reader::new(body, "ParameterStatus");
    Ok((r.cstr()?.to_owned(), r.cstr()?.to_owned()))
}

pub fn backend_key_data(buf: &mut BytesMut, process_id: i32, secret_key: i32) {
    put_message(buf, BACKEND_KEY_DATA, |b| {
        b.put_i32(process_id);
        b.put_i32(secret_key);
    });
}

pub fn decode_backend_key_data(body: &[u8]) -> Result<(i32, i32), ProtocolError> {
    let mut r = Reader::new(body, "BackendKeyData");
    Ok((r.i32()?, r.i32()?))
}

/// NegotiateProtocolVersion: the newest version the server speaks of the
/// major version the client asked for, and the protocol options it does not know.
pub fn negotiate_protocol_version(buf: &mut BytesMut, n: &crate::protocol::startup::Negotiation) {
    put_message(buf, NEGOTIATE_PROTOCOL_VERSION, |b| {
        b.put_i32(n.newest_version);
        b.put_i32(n.unrecognized_options.len() as i32);
        for option in &n.unrecognized_options {
            put_cstr(b, option);
        }
    });
}

pub fn decode_negotiate_protocol_version(body: &[u8]) -> Result<crate::protocol::startup::Negotiation, ProtocolError> {
    let mut r = Reader::new(body, "NegotiateProtocolVersion");
    let newest_version = r.i32()?;
    let count = usize::try_from(r.i32()?).map_err(|_| ProtocolError::Malformed("NegotiateProtocolVersion"))?;
    // Each option takes at least its NUL: a count beyond that is a lie.
    if count > r.remaining() {
        return Err(ProtocolError::Malformed("NegotiateProtocolVersion"));
    }
    let unrecognized_options = (0..count).map(|_| r.cstr().map(str::to_owned)).collect::<Result<_, _>>()?;
    if !r.is_empty() {
        return Err(ProtocolError::Malformed("NegotiateProtocolVersion"));
    }
    Ok(crate::protocol::startup::Negotiation { newest_version, unrecognized_options })
}

pub fn ready_for_query(buf: &mut BytesMut, status: TransactionStatus) {
    put_message(buf, READY_FOR_QUERY, |b| b.put_u8(status.as_byte()));
}

pub fn decode_ready_for_query(body: &[u8]) -> Result<TransactionStatus, ProtocolError> {
    match body {
        [b] => TransactionStatus::from_byte(*b),
        _ => Err(ProtocolError::Malformed("ReadyForQuery")),
    }
}

/// The fields of an ErrorResponse or NoticeResponse that pglane writes or reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ErrorFields {
    pub severity: String,
    pub code: String,
    pub message: String,
    pub detail: Option<String>,
    pub hint: Option<String>,
}

impl ErrorFields {
    /// An ERROR with the given SQLSTATE and message.
    pub fn error(code: &str, message: impl Into<String>) -> Self {
        Self::new("ERROR", code, message)
    }

    /// A NOTICE (SQLSTATE 00000), which informs and ends nothing.
    pub fn notice(message: impl Into<String>) -> Self {
        Self::new("NOTICE", "00000", message)
    }

    /// A FATAL error, which ends the connection.
    pub fn fatal(code: &str, message: impl Into<String>) -> Self {
        Self::new("FATAL", code, message)
    }

    fn new(severity: &str, code: &str, message: impl Into<String>) -> Self {
        ErrorFields { severity: severity.to_owned(), code: code.to_owned(), message: message.into(), detail: None, hint: None }
    }

    pub fn with_detail(mut self, detail: impl Into<String>) -> Self {
        self.detail = Some(detail.into());
        self
    }

    /// A FATAL or PANIC: the server closes the connection after sending it.
    pub fn ends_session(&self) -> bool {
        self.severity == "FATAL" || self.severity == "PANIC"
    }
}

/// Whether an ErrorResponse body says the sender ends the session (FATAL
/// or PANIC, read from the unlocalized severity where there is one).
pub fn error_ends_session(body: &[u8]) -> bool {
    decode_error_fields(body).is_ok_and(|e| e.ends_session())
}

impl std::fmt::Display for ErrorFields {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {} (SQLSTATE {})", self.severity, self.message, self.code)
    }
}

fn put_fields(buf: &mut BytesMut, e: &ErrorFields) {
    for (tag, value) in [
        (b'S', Some(&e.severity)),
        (b'V', Some(&e.severity)),
        (b'C', Some(&e.code)),
        (b'M', Some(&e.message)),
        (b'D', e.detail.as_ref()),
        (b'H', e.hint.as_ref()),
    ] {
        if let Some(v) = value {
            buf.put_u8(tag);
            put_cstr(buf, v);
        }
    }
    buf.put_u8(0);
}

pub fn error_response(buf: &mut BytesMut, e: &ErrorFields) {
    put_message(buf, ERROR_RESPONSE, |b| put_fields(b, e));
}

/// An ErrorResponse as protocol 2 had it, which PostgreSQL still sends a
/// client that asked for protocol 1 or 2 to say it does not speak them:
/// the tag, then one line of text.
pub fn error_response_v2(buf: &mut BytesMut, e: &ErrorFields) {
    buf.put_u8(ERROR_RESPONSE);
    put_cstr(buf, &format!("{}:  {}\n", e.severity, e.message));
}

pub fn notice_response(buf: &mut BytesMut, e: &ErrorFields) {
    put_message(buf, NOTICE_RESPONSE, |b| put_fields(b, e));
}

/// Decodes the body of an ErrorResponse or NoticeResponse. Unknown field types
/// are skipped, as the protocol requires.
pub fn decode_error_fields(body: &[u8]) -> Result<ErrorFields, ProtocolError> {
    let mut r = Reader::new(body, "ErrorResponse");
    let mut e = ErrorFields::new("", "", "");
    loop {
        let tag = r.u8()?;
        if tag == 0 {
            break;
        }
        let value = r.cstr()?.to_owned();
        match tag {
            b'S' if e.severity.is_empty() => e.severity = value,
            b'V' => e.severity = value,
            b'C' => e.code = value,
            b'M' => e.message = value,
            b'D' => e.detail = Some(value),
            b'H' => e.hint = Some(value),
            _ => {}
        }
    }
    Ok(e)
}

/// The fields of an ErrorResponse or NoticeResponse body as they are:
/// `(field type, raw value)` in order, values without their NUL.
pub fn error_field_list(body: &[u8]) -> Result<Vec<(u8, &[u8])>, ProtocolError> {
    const WHAT: &str = "ErrorResponse";
    let mut fields = Vec::with_capacity(10);
    let mut rest = body;
    loop {
        let (&code, after) = rest.split_first().ok_or(ProtocolError::Malformed(WHAT))?;
        if code == 0 {
            return Ok(fields);
        }
        let end = super::nul_at(after).ok_or(ProtocolError::Malformed(WHAT))?;
        fields.push((code, &after[..end]));
        rest = &after[end + 1..];
    }
}

/// Writes an ErrorResponse or NoticeResponse (`tag`) with these fields, in
/// this order (the inverse of [`error_field_list`]).
pub fn put_error_field_list(buf: &mut BytesMut, tag: u8, fields: &[(u8, &[u8])]) {
    put_message(buf, tag, |b| {
        for (code, value) in fields {
            b.put_u8(*code);
            b.put_slice(value);
            b.put_u8(0);
        }
        b.put_u8(0);
    });
}

/// Reads an Int16 (the protocol's column counts, attribute numbers, formats).
fn read_i16(r: &mut Reader<'_>) -> Result<i16, ProtocolError> {
    let b = r.bytes(2)?;
    Ok(i16::from_be_bytes([b[0], b[1]]))
}

/// A count of things that follow (Int16, never negative), read as `usize`.
fn read_count(r: &mut Reader<'_>, what: &'static str) -> Result<usize, ProtocolError> {
    usize::try_from(read_i16(r)?).map_err(|_| ProtocolError::Malformed(what))
}

/// Format code of a column or parameter: 0 text, 1 binary.
pub const FORMAT_TEXT: i16 = 0;
pub const FORMAT_BINARY: i16 = 1;

/// One column of a RowDescription.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldDescription {
    pub name: String,
    /// OID of the table the column comes from, or 0 if it is not a table column.
    pub table_oid: u32,
    /// Attribute number of that column in its table, or 0.
    pub column: i16,
    pub type_oid: u32,
    /// `pg_type.typlen`: negative for variable-width types.
    pub type_size: i16,
    pub type_modifier: i32,
    /// [`FORMAT_TEXT`] or [`FORMAT_BINARY`] (always text in a statement Describe).
    pub format: i16,
}

pub fn row_description(buf: &mut BytesMut, fields: &[FieldDescription]) {
    debug_assert!(fields.len() <= i16::MAX as usize, "more columns than the protocol allows");
    put_message(buf, ROW_DESCRIPTION, |b| {
        b.put_i16(fields.len() as i16);
        for f in fields {
            put_cstr(b, &f.name);
            b.put_u32(f.table_oid);
            b.put_i16(f.column);
            b.put_u32(f.type_oid);
            b.put_i16(f.type_size);
            b.put_i32(f.type_modifier);
            b.put_i16(f.format);
        }
    });
}

pub fn decode_row_description(body: &[u8]) -> Result<Vec<FieldDescription>, ProtocolError> {
    const WHAT: &str = "RowDescription";
    let mut r = Reader::new(body, WHAT);
    let count = read_count(&mut r, WHAT)?;
    // Each field takes at least 19 bytes: do not trust `count` for the allocation.
    let mut fields = Vec::with_capacity(count.min(body.len() / 19));
    for _ in 0..count {
        fields.push(FieldDescription {
            name: r.cstr()?.to_owned(),
            table_oid: r.i32()? as u32,
            column: read_i16(&mut r)?,
            type_oid: r.i32()? as u32,
            type_size: read_i16(&mut r)?,
            type_modifier: r.i32()?,
            format: read_i16(&mut r)?,
        });
    }
    if !r.is_empty() {
        return Err(ProtocolError::Malformed(WHAT));
    }
    Ok(fields)
}

/// The type OID of each column of a RowDescription body, read without
/// decoding the column names.
pub fn row_description_types(body: &[u8]) -> Result<Vec<u32>, ProtocolError> {
    let mut types = Vec::with_capacity(body.len() / (FIELD_FIXED_LEN + 1));
    walk_row_description(body, |field| types.push(u32::from_be_bytes([field[6], field[7], field[8], field[9]])))?;
    Ok(types)
}

/// Appends RowDescription `body` as a whole message with each column's format
/// code replaced by `formats[column]`; every other byte is kept.
pub fn row_description_with_formats(out: &mut BytesMut, body: &[u8], formats: &[i16]) -> Result<(), ProtocolError> {
    let before = out.len();
    let start = before + HEADER_LEN;
    put_message(out, ROW_DESCRIPTION, |b| b.put_slice(body));
    // One walk over the server's bytes, patching the copy as it goes.
    let mut columns = 0;
    let walked = walk_row_description(body, |field| {
        if let Some(format) = formats.get(columns) {
            let at = start + field.as_ptr() as usize - body.as_ptr() as usize + FIELD_FORMAT_AT;
            out[at..at + 2].copy_from_slice(&format.to_be_bytes());
        }
        columns += 1;
    });
    if walked.is_err() || columns != formats.len() {
        out.truncate(before);
        return Err(ProtocolError::Malformed("RowDescription"));
    }
    Ok(())
}

/// Bytes of a RowDescription field after its name: table OID, column
/// number, type OID, type size, type modifier, format code.
const FIELD_FIXED_LEN: usize = 18;
/// Where the format code sits in those bytes.
const FIELD_FORMAT_AT: usize = 16;

/// Checks a RowDescription body and calls `field` with the fixed-size part
/// of each column (the bytes after its name), in order.
fn walk_row_description(body: &[u8], mut field: impl FnMut(&[u8])) -> Result<(), ProtocolError> {
    const WHAT: &str = "RowDescription";
    let mut r = Reader::new(body, WHAT);
    let count = read_count(&mut r, WHAT)?;
    for _ in 0..count {
        r.skip_cstr()?;
        field(r.bytes(FIELD_FIXED_LEN)?);
    }
    if !r.is_empty() {
        return Err(ProtocolError::Malformed(WHAT));
    }
    Ok(())
}

/// The column values of a DataRow, checked once by [`decode_data_row`] and then
/// read in place: iterating allocates nothing and cannot fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DataRow<'a> {
    len: usize,
    /// The columns, each an Int32 length (-1 for NULL) and that many bytes.
    columns: &'a [u8],
}

impl<'a> DataRow<'a> {
    /// Number of columns.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The values in column order; `None` is SQL NULL.
    pub fn iter(&self) -> DataRowValues<'a> {
        DataRowValues { left: self.len, rest: self.columns }
    }
}

impl<'a> IntoIterator for DataRow<'a> {
    type Item = Option<&'a [u8]>;
    type IntoIter = DataRowValues<'a>;

    fn into_iter(self) -> DataRowValues<'a> {
        self.iter()
    }
}

/// Iterator over the values of a [`DataRow`].
#[derive(Debug, Clone)]
pub struct DataRowValues<'a> {
    left: usize,
    rest: &'a [u8],
}

impl<'a> Iterator for DataRowValues<'a> {
    type Item = Option<&'a [u8]>;

    fn next(&mut self) -> Option<Self::Item> {
        // The layout was checked by decode_data_row, so `None` from `split_value`
        // cannot happen; it would end the iteration rather than panic.
        self.left = self.left.checked_sub(1)?;
        let (value, rest) = split_value(self.rest)?;
        self.rest = rest;
        Some(value)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.left, Some(self.left))
    }
}

impl ExactSizeIterator for DataRowValues<'_> {}

/// Splits one `Int32 length, bytes` value off the front of `buf`.
fn split_value(buf: &[u8]) -> Option<(Option<&[u8]>, &[u8])> {
    let (len, rest) = buf.split_first_chunk::<4>()?;
    match i32::from_be_bytes(*len) {
        -1 => Some((None, rest)),
        n => {
            let n = usize::try_from(n).ok()?;
            (rest.len() >= n).then(|| (Some(&rest[..n]), &rest[n..]))
        }
    }
}

pub fn data_row(buf: &mut BytesMut, values: &[Option<&[u8]>]) {
    debug_assert!(values.len() <= i16::MAX as usize, "more columns than the protocol allows");
    put_message(buf, DATA_ROW, |b| {
        b.put_i16(values.len() as i16);
        for value in values {
            match value {
                Some(v) => {
                    b.put_i32(v.len() as i32);
                    b.put_slice(v);
                }
                None => b.put_i32(-1),
            }
        }
    });
}

/// Checks a DataRow body (column count, every length) and returns its values.
pub fn decode_data_row(body: &[u8]) -> Result<DataRow<'_>, ProtocolError> {
    const WHAT: &str = "DataRow";
    let mut r = Reader::new(body, WHAT);
    let len = read_count(&mut r, WHAT)?;
    let columns = r.rest();
    let mut rest = columns;
    for _ in 0..len {
        rest = split_value(rest).ok_or(ProtocolError::Malformed(WHAT))?.1;
    }
    if !rest.is_empty() {
        return Err(ProtocolError::Malformed(WHAT));
    }
    Ok(DataRow { len, columns })
}

pub fn command_complete(buf: &mut BytesMut, tag: &str) {
    put_message(buf, COMMAND_COMPLETE, |b| put_cstr(b, tag));
}

/// A NotificationResponse: from the backend `process_id`, on `channel`.
pub fn notification_response(buf: &mut BytesMut, process_id: i32, channel: &str, payload: &str) {
    put_message(buf, NOTIFICATION_RESPONSE, |b| {
        b.put_i32(process_id);
        put_cstr(b, channel);
        put_cstr(b, payload);
    });
}

/// The channel a NotificationResponse is for (its body: the notifying
/// backend's process id, the channel, the payload).
pub fn decode_notification_channel(body: &[u8]) -> Result<&str, ProtocolError> {
    let mut r = Reader::new(body, "NotificationResponse");
    r.i32()?;
    let channel = r.cstr()?;
    r.cstr()?;
    if !r.is_empty() {
        return Err(ProtocolError::Malformed("NotificationResponse"));
    }
    Ok(channel)
}

/// The command tag of a CommandComplete, such as `SELECT 5` or `INSERT 0 1`.
pub fn decode_command_complete(body: &[u8]) -> Result<&str, ProtocolError> {
    let mut r = Reader::new(body, "CommandComplete");
    let tag = r.cstr()?;
    if !r.is_empty() {
        return Err(ProtocolError::Malformed("CommandComplete"));
    }
    Ok(tag)
}

/// The row count a command tag reports (`SELECT 5` → 5, `INSERT 0 1` → 1), for
/// the commands that report one; `None` for the others (`BEGIN`, `CREATE TABLE`).
pub fn command_tag_rows(tag: &str) -> Option<u64> {
    let (command, rest) = tag.split_once(' ')?;
    match command {
        "SELECT" | "INSERT" | "UPDATE" | "DELETE" | "MERGE" | "FETCH" | "MOVE" | "COPY" => rest.rsplit(' ').next()?.parse().ok(),
        _ => None,
    }
}

pub fn parameter_description(buf: &mut BytesMut, type_oids: &[u32]) {
    debug_assert!(type_oids.len() <= u16::MAX as usize, "more parameters than the protocol allows");
    put_message(buf, PARAMETER_DESCRIPTION, |b| {
        b.put_u16(type_oids.len() as u16);
        for &oid in type_oids {
            b.put_u32(oid);
        }
    });
}

/// The parameter type OIDs of a ParameterDescription. The count is an unsigned
/// Int16 here: PostgreSQL allows up to 65535 parameters.
pub fn decode_parameter_description(body: &[u8]) -> Result<Vec<u32>, ProtocolError> {
    const WHAT: &str = "ParameterDescription";
    let mut r = Reader::new(body, WHAT);
    let count = usize::from(read_i16(&mut r)? as u16);
    let oids = r.rest();
    if oids.len() != count * 4 {
        return Err(ProtocolError::Malformed(WHAT));
    }
    Ok(oids.chunks_exact(4).map(|c| u32::from_be_bytes([c[0], c[1], c[2], c[3]])).collect())
}

/// The messages without a body that answer extended-protocol steps.
pub fn parse_complete(buf: &mut BytesMut) {
    put_message(buf, PARSE_COMPLETE, |_| {});
}

pub fn bind_complete(buf: &mut BytesMut) {
    put_message(buf, BIND_COMPLETE, |_| {});
}

pub fn close_complete(buf: &mut BytesMut) {
    put_message(buf, CLOSE_COMPLETE, |_| {});
}

pub fn no_data(buf: &mut BytesMut) {
    put_message(buf, NO_DATA, |_| {});
}

pub fn empty_query_response(buf: &mut BytesMut) {
    put_message(buf, EMPTY_QUERY_RESPONSE, |_| {});
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::frame::split_message;

    #[test]
    fn asynchronous_messages_are_told_apart() {
        for tag in [NOTICE_RESPONSE, NOTIFICATION_RESPONSE, PARAMETER_STATUS] {
            assert!(is_asynchronous(tag));
        }
        for tag in [ERROR_RESPONSE, READY_FOR_QUERY, BIND_COMPLETE, DATA_ROW, ROW_DESCRIPTION, COMMAND_COMPLETE] {
            assert!(!is_asynchronous(tag));
        }
    }

    fn one(buf: &mut BytesMut) -> crate::protocol::frame::Message {
        split_message(buf, 1 << 20).unwrap().unwrap()
    }

    #[test]
    fn error_fields_round_trip_byte_for_byte() {
        // As PostgreSQL sends it: severity twice, code, message, position, file, line, routine.
        let body =
            b"SERROR\0VERROR\0C42703\0Mcolumn \"nosuch\" does not exist\0P12\0Fparse_relation.c\0L3656\0RerrorMissingColumn\0\0";
        let fields = error_field_list(body).unwrap();
        assert_eq!(fields.len(), 8);
        assert_eq!(fields[4], (b'P', &b"12"[..]));
        let mut out = BytesMut::new();
        put_error_field_list(&mut out, ERROR_RESPONSE, &fields);
        let m = one(&mut out);
        assert_eq!((m.tag, &m.body[..]), (ERROR_RESPONSE, &body[..]));
        assert_eq!(error_field_list(b"\0").unwrap(), []);
        for bad in [&b"SERROR"[..], b"SERROR\0", b""] {
            assert!(error_field_list(bad).is_err());
        }
    }

    /// A RowDescription body of columns (name, type OID), text format.
    fn described(columns: &[(&[u8], u32)]) -> Vec<u8> {
        let mut body = (columns.len() as i16).to_be_bytes().to_vec();
        for (name, oid) in columns {
            body.extend_from_slice(name);
            body.push(0);
            body.extend_from_slice(&[0, 0, 0, 0, 0, 0]);
            body.extend_from_slice(&oid.to_be_bytes());
            body.extend_from_slice(&[0, 4, 0xff, 0xff, 0xff, 0xff, 0, 0]);
        }
        body
    }

    #[test]
    fn row_descriptions_are_walked_once_and_names_passed_as_sent() {
        // A name in the client's encoding (LATIN1 `é`) is not UTF-8: pglane
        // forwards it and reads only the fixed part of each column.
        let body = described(&[(b"caf\xe9", 23), (b"b", 25)]);
        assert_eq!(row_description_types(&body).unwrap(), [23, 25]);
        let mut out = BytesMut::from(&b"kept"[..]);
        row_description_with_formats(&mut out, &body, &[1, 0]).unwrap();
        assert_eq!(&out[..4], b"kept");
        let mut rest = out.split_off(4);
        let m = one(&mut rest);
        let mut want = body.clone();
        let first_format = 2 + 5 + FIELD_FORMAT_AT;
        want[first_format..first_format + 2].copy_from_slice(&1i16.to_be_bytes());
        assert_eq!((m.tag, &m.body[..]), (ROW_DESCRIPTION, &want[..]));
        // Fewer or more formats than columns, or a truncated body: an error,
        // and nothing written.
        for (body, formats) in [(&body[..], &[0i16][..]), (&body[..], &[0, 0, 0][..]), (&body[..body.len() - 1], &[0, 0][..])] {
            let mut out = BytesMut::from(&b"kept"[..]);
            assert!(row_description_with_formats(&mut out, body, formats).is_err());
            assert_eq!(&out[..], b"kept");
        }
        assert!(row_description_types(&body[..body.len() - 1]).is_err());
    }

    #[test]
    fn authentication_requests_round_trip() {
        let mut buf = BytesMut::new();
        authentication_ok(&mut buf);
        authentication_md5(&mut buf, [1, 2, 3, 4]);
        authentication_sasl(&mut buf, &["SCRAM-SHA-256"]);
        authentication_sasl_continue(&mut buf, b"r=abc");
        authentication_sasl_final(&mut buf, b"v=xyz");
        let expected = [
            Authentication::Ok,
            Authentication::Md5Password { salt: [1, 2, 3, 4] },
            Authentication::Sasl { mechanisms: vec!["SCRAM-SHA-256".into()] },
            Authentication::SaslContinue(b"r=abc".to_vec()),
            Authentication::SaslFinal(b"v=xyz".to_vec()),
        ];
        for want in expected {
            let m = one(&mut buf);
            assert_eq!(m.tag, AUTHENTICATION);
            assert_eq!(decode_authentication(&m.body).unwrap(), want);
        }
        assert_eq!(decode_authentication(&7i32.to_be_bytes()), Ok(Authentication::Unsupported(7)));
        assert!(decode_authentication(&[0, 0, 0, 5, 1]).is_err());
    }

    #[test]
    fn error_response_round_trip() {
        let e = ErrorFields::fatal("28P01", "password authentication failed for user \"x\"").with_detail("d");
        let mut buf = BytesMut::new();
        error_response(&mut buf, &e);
        let m = one(&mut buf);
        assert_eq!(m.tag, ERROR_RESPONSE);
        assert_eq!(decode_error_fields(&m.body).unwrap(), e);
        assert!(decode_error_fields(b"Mno terminator").is_err());
        assert!(decode_error_fields(b"").is_err());
    }

    #[test]
    fn a_protocol_2_error_is_one_line_of_text() {
        let mut buf = BytesMut::new();
        let e = ErrorFields::fatal("0A000", "unsupported frontend protocol 2.0: server supports 3.0 to 3.0");
        error_response_v2(&mut buf, &e);
        // PostgreSQL 15's bytes.
        assert_eq!(&buf[..], b"EFATAL:  unsupported frontend protocol 2.0: server supports 3.0 to 3.0\n\0");
    }

    #[test]
    fn fatal_and_panic_end_the_session() {
        let body = |e: &ErrorFields| {
            let mut buf = BytesMut::new();
            error_response(&mut buf, e);
            one(&mut buf).body
        };
        assert!(error_ends_session(&body(&ErrorFields::fatal("57P01", "terminating connection"))));
        assert!(error_ends_session(&body(&ErrorFields::new("PANIC", "XX000", "x"))));
        assert!(!error_ends_session(&body(&ErrorFields::error("57014", "canceling statement"))));
        // The unlocalized severity ('V') decides, whatever the localized one ('S') says.
        assert!(error_ends_session(b"SKATASTROFALNY\0VFATAL\0C57P01\0Mx\0\0"));
        assert!(!error_ends_session(b"SKATASTROFALNY\0VERROR\0C42601\0Mx\0\0"));
        assert!(!error_ends_session(b"Mno terminator"));
    }

    #[test]
    fn small_messages_round_trip() {
        let mut buf = BytesMut::new();
        parameter_status(&mut buf, "TimeZone", "UTC");
        backend_key_data(&mut buf, 7, -9);
        ready_for_query(&mut buf, TransactionStatus::InTransaction);
        assert_eq!(decode_parameter_status(&one(&mut buf).body).unwrap(), ("TimeZone".into(), "UTC".into()));
        assert_eq!(decode_backend_key_data(&one(&mut buf).body).unwrap(), (7, -9));
        assert_eq!(decode_ready_for_query(&one(&mut buf).body).unwrap(), TransactionStatus::InTransaction);
        assert!(decode_ready_for_query(b"X").is_err());
        assert!(decode_ready_for_query(b"").is_err());
        assert!(decode_backend_key_data(&[0; 7]).is_err());
    }

    #[test]
    fn negotiate_protocol_version_as_postgresql_sends_it() {
        use crate::protocol::startup::Negotiation;
        let n = Negotiation { newest_version: 0x0003_0000, unrecognized_options: vec!["_pq_.a".into(), "_pq_.bc".into()] };
        let mut buf = BytesMut::new();
        negotiate_protocol_version(&mut buf, &n);
        // PostgreSQL 15's bytes for the same answer.
        assert_eq!(&buf[..], b"v\0\0\0\x1b\0\x03\0\0\0\0\0\x02_pq_.a\0_pq_.bc\0");
        let m = one(&mut buf);
        assert_eq!(m.tag, NEGOTIATE_PROTOCOL_VERSION);
        assert_eq!(decode_negotiate_protocol_version(&m.body).unwrap(), n);
        let none = Negotiation { newest_version: 0x0003_0000, unrecognized_options: vec![] };
        negotiate_protocol_version(&mut buf, &none);
        assert_eq!(decode_negotiate_protocol_version(&one(&mut buf).body).unwrap(), none);
        // Cut short, a count that does not fit, a negative count, trailing bytes.
        assert!(decode_negotiate_protocol_version(b"\0\x03\0\0\0\0").is_err());
        assert!(decode_negotiate_protocol_version(b"\0\x03\0\0\0\0\0\x02_pq_.a\0").is_err());
        assert!(decode_negotiate_protocol_version(b"\0\x03\0\0\xff\xff\xff\xff").is_err());
        assert!(decode_negotiate_protocol_version(b"\0\x03\0\0\0\0\0\0x").is_err());
    }

    fn field(name: &str, type_oid: u32, type_size: i16, format: i16) -> FieldDescription {
        FieldDescription { name: name.into(), table_oid: 16_384, column: 1, type_oid, type_size, type_modifier: -1, format }
    }

    #[test]
    fn row_description_round_trip() {
        let fields =
            vec![field("aid", 23, 4, FORMAT_TEXT), field("", 2950, 16, FORMAT_BINARY), field("héllo", 25, -1, FORMAT_TEXT)];
        let mut buf = BytesMut::new();
        row_description(&mut buf, &fields);
        row_description(&mut buf, &[]);
        let m = one(&mut buf);
        assert_eq!(m.tag, ROW_DESCRIPTION);
        assert_eq!(decode_row_description(&m.body).unwrap(), fields);
        assert_eq!(decode_row_description(&one(&mut buf).body).unwrap(), vec![]);
    }

    #[test]
    fn malformed_row_descriptions_are_errors() {
        let mut buf = BytesMut::new();
        row_description(&mut buf, &[field("a", 23, 4, 0)]);
        let body = one(&mut buf).body;
        for cut in 0..body.len() {
            assert!(decode_row_description(&body[..cut]).is_err(), "cut at {cut}");
        }
        let mut trailing = body.to_vec();
        trailing.push(0);
        assert!(decode_row_description(&trailing).is_err());
        // A negative or huge count with no fields behind it.
        assert!(decode_row_description(&[0xff, 0xff]).is_err());
        assert!(decode_row_description(&[0x7f, 0xff]).is_err());
    }

    #[test]
    fn data_row_round_trip() {
        let values: [Option<&[u8]>; 4] = [Some(b"42"), None, Some(b""), Some(&[0, 1, 2, 255])];
        let mut buf = BytesMut::new();
        data_row(&mut buf, &values);
        data_row(&mut buf, &[]);
        let m = one(&mut buf);
        assert_eq!(m.tag, DATA_ROW);
        let row = decode_data_row(&m.body).unwrap();
        assert_eq!(row.len(), 4);
        assert_eq!(row.iter().len(), 4);
        assert_eq!(row.iter().collect::<Vec<_>>(), values);
        let empty = one(&mut buf);
        let row = decode_data_row(&empty.body).unwrap();
        assert!(row.is_empty() && row.iter().next().is_none());
    }

    #[test]
    fn malformed_data_rows_are_errors() {
        let mut buf = BytesMut::new();
        data_row(&mut buf, &[Some(b"abc"), None]);
        let body = one(&mut buf).body;
        for cut in 0..body.len() {
            assert!(decode_data_row(&body[..cut]).is_err(), "cut at {cut}");
        }
        let mut trailing = body.to_vec();
        trailing.push(0);
        assert!(decode_data_row(&trailing).is_err());
        assert!(decode_data_row(&[0xff, 0xff]).is_err(), "negative column count");
        assert!(decode_data_row(&[0, 1, 0xff, 0xff, 0xff, 0xfe]).is_err(), "length -2");
        assert!(decode_data_row(&[0, 1, 0x7f, 0xff, 0xff, 0xff]).is_err(), "length past the end");
    }

    #[test]
    fn command_complete_and_its_row_count() {
        let mut buf = BytesMut::new();
        command_complete(&mut buf, "INSERT 0 1");
        let m = one(&mut buf);
        assert_eq!(m.tag, COMMAND_COMPLETE);
        assert_eq!(decode_command_complete(&m.body).unwrap(), "INSERT 0 1");
        assert!(decode_command_complete(b"SELECT 1").is_err());
        assert!(decode_command_complete(b"SELECT 1\0x").is_err());
        for (tag, rows) in [
            ("SELECT 1000000", Some(1_000_000)),
            ("INSERT 0 1", Some(1)),
            ("UPDATE 0", Some(0)),
            ("COPY 7", Some(7)),
            ("BEGIN", None),
            ("CREATE TABLE", None),
            ("SELECT x", None),
            ("", None),
        ] {
            assert_eq!(command_tag_rows(tag), rows, "{tag:?}");
        }
    }

    #[test]
    fn parameter_description_round_trip() {
        let mut buf = BytesMut::new();
        parameter_description(&mut buf, &[23, 25, 0, u32::MAX]);
        let m = one(&mut buf);
        assert_eq!(m.tag, PARAMETER_DESCRIPTION);
        assert_eq!(decode_parameter_description(&m.body).unwrap(), vec![23, 25, 0, u32::MAX]);
        assert_eq!(decode_parameter_description(&[0, 0]).unwrap(), Vec::<u32>::new());
        assert!(decode_parameter_description(&[0, 1, 0, 0, 0]).is_err());
        assert!(decode_parameter_description(&[0, 0, 0]).is_err());
        assert!(decode_parameter_description(&[0]).is_err());
        // Counts above i16::MAX are valid: the field is unsigned here.
        let many = vec![23u32; 40_000];
        parameter_description(&mut buf, &many);
        assert_eq!(decode_parameter_description(&one(&mut buf).body).unwrap(), many);
    }

    #[test]
    fn bodiless_replies() {
        let mut buf = BytesMut::new();
        parse_complete(&mut buf);
        bind_complete(&mut buf);
        close_complete(&mut buf);
        no_data(&mut buf);
        empty_query_response(&mut buf);
        for tag in [PARSE_COMPLETE, BIND_COMPLETE, CLOSE_COMPLETE, NO_DATA, EMPTY_QUERY_RESPONSE] {
            let m = one(&mut buf);
            assert_eq!((m.tag, m.body.len()), (tag, 0));
        }
    }
}
