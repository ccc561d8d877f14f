//! Binary format negotiation: the server sends binary, the client still gets
//! its exact text.
//!
//! This module owns the decisions and byte rewrites of negotiation for one
//! client's portals, as pure functions plus a little per-exchange state
//! ([`Negotiator`]):
//!
//! - [`plan_bind`]: for a Bind of a statement whose RowDescription is cached,
//!   which columns the client wants as text pglane asks the server for in
//!   binary (a [`Plan`]), and the result-format codes of the Bind it forwards;
//! - [`transcode_row`]: a DataRow of a negotiated portal, with each such
//!   binary field turned into the text PostgreSQL would have sent
//!   (`formats::Transcoder`), every other byte kept;
//! - [`Plan::client_row_description`]: a portal RowDescription carrying the
//!   formats the *client* asked for.
//!
//! What it must never do is change what the client sees. So a portal is
//! negotiated only when all of this holds:
//!
//! - the column is one the client asked text for and its type is on
//!   [`negotiable`]'s list: bool, int2/4/8, oid, numeric, uuid, inet, cidr
//!   (text independent of any setting), date, time, timetz, timestamp,
//!   timestamptz, interval (text depends on DateStyle, TimeZone,
//!   IntervalStyle, integer_datetimes, all reported by ParameterStatus),
//!   and float4, float8 (text depends on extra_float_digits, which is not
//!   reported: known only where pglane learned the server connection's value
//!   right after login and then set it itself, from a client's startup
//!   packet, or followed an exact SET; SQL that names the setting, or any
//!   `set_config`, makes it unknown again, see `settings`);
//! - the settings those last types depend on are *settled*: the server
//!   connection's known values are the ones that will apply when the
//!   portal runs. PostgreSQL 15 reports a changed setting only at
//!   ReadyForQuery, so a setting changed earlier in the same Sync group (or
//!   in a group still in flight) would be invisible here; the exchange says
//!   a Bind is settled only when no earlier group is in flight and the
//!   client has sent no Execute since its last Sync. Unsettled, only the
//!   setting-free types are negotiated;
//! - the row can be read whole: the relay must read a negotiated portal's
//!   DataRows whole to transcode them (they are otherwise streamed). Either
//!   every column has a bounded size (the list above) and the largest row
//!   those types allow fits the whole-message limit (`max_row`), or the
//!   statement has shown small rows ([`small_rows`]): its registry
//!   `Statement` keeps a [`RowRecord`], made while its first
//!   [`SMALL_ROWS_AFTER`] executions run un-negotiated (the relay hands the
//!   exchange each run of streamed DataRows, and [`largest_data_row`] reads
//!   their headers), and it counts only if no row went over
//!   [`SMALL_ROW_CAP`]. For such a statement these unbounded types are
//!   negotiated too: bytea (hex or escape, bytea_output being known like
//!   extra_float_digits) and arrays of any type with a transcoder
//!   (`array_out`'s text: any bounds and dimensions; text-like elements
//!   only while client and server encodings are equal). Text, varchar,
//!   bpchar, name, json and jsonb themselves stay text: binary would save
//!   nothing (it is the same text, made by the same server code; jsonb adds
//!   a version byte) and would tie them to the encodings; they no longer
//!   keep the rest of the row from being negotiated. Correctness does not rest on the
//!   record: a negotiated row of any size is read whole (the server inbox
//!   takes messages up to `i32::MAX`) and transcoded exactly; a row over the
//!   cap, negotiated or watched, marks the statement `too_big` for good, so
//!   memory stays bounded in practice (stats `big_rows`,
//!   `big_row_statements`);
//! - the Bind's result-format codes are well formed for the column count
//!   (otherwise the server refuses the Bind itself, as it would directly).
//!
//! It must not touch anything else: parameters, portals it did not plan,
//! and binary columns the client asked for pass through byte for byte.

use std::cell::Ref;
use std::collections::HashMap;
use std::rc::Rc;

use bytes::{BufMut, BytesMut};
use thiserror::Error;

use crate::formats::{oid, transcoder_for, TextSettings, TranscodeError, Transcoder};
use crate::prepare::memo::Memo;
use crate::prepare::{RowRecord, Statement};
use crate::protocol::backend::{self, FORMAT_BINARY, FORMAT_TEXT};
use crate::protocol::frame::{parse_header, HEADER_LEN};
use crate::protocol::{frontend, ProtocolError};
use crate::server::ConnectionOutput;
use crate::settings::Settings;

/// What the exchange needs to negotiate on the server connection it holds;
/// absent when `binary_negotiation` is off.
#[derive(Debug, Clone, Copy)]
pub struct Negotiation<'a> {
    /// How the connection prints values.
    pub output: &'a ConnectionOutput,
    /// Largest DataRow pglane may hold whole (max_message_size).
    pub max_row: usize,
}

impl Negotiation<'_> {
    /// The connection's text settings with `server` (its session's settings
    /// as clients changed them): see [`ConnectionOutput::text_settings`].
    pub fn text_settings(&self, server: &Settings) -> Ref<'_, TextSettings> {
        self.output.text_settings(server)
    }
}

/// A negotiated portal's DataRow could not be turned into the client's
/// text, or the settings it depends on are not what pglane recorded.
#[derive(Debug, Error)]
pub enum NegotiateError {
    #[error("pglane's query aligning the server connection's settings failed: {0}")]
    Settings(String),
    #[error("DataRow of a negotiated portal: {0}")]
    Protocol(#[from] ProtocolError),
    #[error("DataRow has {actual} columns, its portal {expected}")]
    Columns { expected: usize, actual: usize },
    #[error("a negotiated portal's row is too large for a DataRow once turned into text")]
    TooLarge,
    #[error("column {column} of a negotiated portal: {source}")]
    Transcode { column: usize, source: TranscodeError },
}

/// The most bytes one value of a numeric column takes on the wire, either
/// format: 131072 digits before the point, 16383 after, sign and point.
const NUMERIC_WIRE_MAX: usize = 131_072 + 16_383 + 2;

/// The most bytes one value of a type takes on the wire in either format
/// (text or binary), for the types a negotiated row may hold; `None` for
/// types of unbounded size or not known here.
fn wire_bound(type_oid: u32) -> Option<usize> {
    match type_oid {
        oid::NUMERIC => Some(NUMERIC_WIRE_MAX),
        // Fixed-size binary forms whose text is under 128 bytes in every
        // style (the longest: a postgres_verbose interval such as `@ 178956970
        // years 8 mons 2147483648 days 2562047788 hours 54.775808 secs ago`,
        // under 80).
        oid::BOOL
        | oid::INT2
        | oid::INT4
        | oid::INT8
        | oid::OID
        | oid::FLOAT4
        | oid::FLOAT8
        | oid::UUID
        | oid::DATE
        | oid::TIME
        | oid::TIMETZ
        | oid::TIMESTAMP
        | oid::TIMESTAMPTZ
        | oid::INTERVAL
        | oid::INET
        | oid::CIDR => Some(128),
        _ => None,
    }
}

/// Whether pglane may ask for `type_oid` in binary on a client's behalf:
/// transcoded exactly, with text that depends on no setting or only on
/// settings pglane knows (reported ones, extra_float_digits and
/// bytea_output where known: `transcoder_for` says when), and either of
/// bounded size or, with `small_rows` (the statement has shown small rows),
/// one of the unbounded types where binary saves the server work: bytea
/// (`byteaout`'s hex: 0.20x the CPU, half the bytes) and arrays of any type
/// with a transcoder (no `array_out` quoting scan and no element `*_out`:
/// 0.67x the CPU for int4[], 0.62x for text[], which costs 1.14x the bytes
/// for short words; bench/RESULTS.md).
///
/// The text-like types (text, varchar, bpchar, name, json) and jsonb are
/// never asked for in binary: their binary form is their text (jsonb's with
/// one more byte), made by the same server code, so it saves nothing
/// (measured: the same CPU, jsonb 1.06x), and it would tie them to the
/// encodings. They no longer stop the rest of a row from being negotiated,
/// though: that needs the row read whole, which the small-row record allows.
pub fn negotiable(type_oid: u32, small_rows: bool) -> bool {
    let bounded = matches!(
        type_oid,
        oid::BOOL
            | oid::INT2
            | oid::INT4
            | oid::INT8
            | oid::OID
            | oid::NUMERIC
            | oid::UUID
            | oid::INET
            | oid::CIDR
            | oid::DATE
            | oid::TIME
            | oid::TIMETZ
            | oid::TIMESTAMP
            | oid::TIMESTAMPTZ
            | oid::INTERVAL
            | oid::FLOAT4
            | oid::FLOAT8
    );
    bounded || (small_rows && (type_oid == oid::BYTEA || oid::array_element(type_oid).is_some()))
}

/// Executions of a statement pglane watches, un-negotiated, before it
/// negotiates columns of unbounded size for it.
pub const SMALL_ROWS_AFTER: u32 = 3;

/// The largest DataRow (body bytes) a statement may have shown to count as
/// having small rows. A constant, not a setting: it bounds the memory a
/// negotiated portal's rows take in practice (they are read whole), and a
/// row over it is still transcoded exactly, after which the statement's
/// unbounded columns stay text for good.
pub const SMALL_ROW_CAP: usize = 256 * 1024;

/// Whether a statement with this record has shown small rows: watched over
/// [`SMALL_ROWS_AFTER`] executions, no row ever over [`SMALL_ROW_CAP`].
pub fn small_rows(record: RowRecord) -> bool {
    !record.too_big && record.executions >= SMALL_ROWS_AFTER && record.largest_row <= SMALL_ROW_CAP
}

/// Whether the relay should still watch the sizes of a statement's rows.
pub fn still_watching(record: RowRecord) -> bool {
    !record.too_big && record.executions < SMALL_ROWS_AFTER
}

/// The record after a DataRow of `len` body bytes.
pub fn row_seen(record: RowRecord, len: usize) -> RowRecord {
    RowRecord { largest_row: record.largest_row.max(len), too_big: record.too_big || len > SMALL_ROW_CAP, ..record }
}

/// The record after an Execute whose rows were all seen.
pub fn execution_seen(record: RowRecord) -> RowRecord {
    RowRecord { executions: record.executions.saturating_add(1), ..record }
}

/// The largest DataRow body in `piece`, the first bytes of a run of
/// streamed DataRows as the relay hands them over: every message in it
/// starts there with its whole header, the last may be cut short.
pub fn largest_data_row(piece: &[u8]) -> usize {
    let mut largest = 0;
    let mut rest = piece;
    while let Ok(Some(header)) = parse_header(rest, usize::MAX) {
        if header.tag != backend::DATA_ROW {
            break;
        }
        largest = largest.max(header.body_len);
        match rest.get(HEADER_LEN + header.body_len..) {
            Some(next) => rest = next,
            None => break,
        }
    }
    largest
}

/// What pglane does with one portal's result columns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// Per column: the transcoder where pglane asked for binary and the
    /// client wants text; `None` where the server sends what the client asked.
    columns: Box<[Option<Transcoder>]>,
    /// Per column, the format the client asked for.
    client_formats: Box<[i16]>,
    /// Per column, the format pglane asks the server for.
    server_formats: Box<[i16]>,
    /// The column types do not bound the row's size under the whole-row
    /// limit: negotiated because the statement has shown small rows, so a
    /// row over the cap ends that.
    unbounded: bool,
}

impl Plan {
    /// The plan for a portal of a statement with result columns `types`,
    /// bound with the client's result-format `codes`; `None` when nothing is
    /// negotiated (see the module doc for when that is). `small_rows`: the
    /// statement has shown small rows ([`small_rows`]), so its rows may be
    /// read whole whatever its column types.
    pub fn new(types: &[u32], codes: &[i16], settings: &TextSettings, max_row: usize, small_rows: bool) -> Option<Plan> {
        let client_formats = expand_formats(codes, types.len())?;
        let unbounded = !row_bounded(types, max_row);
        if unbounded && !small_rows {
            return None;
        }
        let columns: Box<[Option<Transcoder>]> = types
            .iter()
            .zip(client_formats.iter())
            .map(
                |(&t, &format)| {
                    if format == FORMAT_TEXT && negotiable(t, small_rows) {
                        transcoder_for(t, settings)
                    } else {
                        None
                    }
                },
            )
            .collect();
        if columns.iter().all(Option::is_none) {
            return None;
        }
        let server_formats =
            columns.iter().zip(client_formats.iter()).map(|(c, &f)| if c.is_some() { FORMAT_BINARY } else { f }).collect();
        Some(Plan { columns, client_formats, server_formats, unbounded })
    }

    /// Whether the row size is unbounded by the column types (negotiated on
    /// the statement's small-row record).
    pub fn unbounded(&self) -> bool {
        self.unbounded
    }

    /// The result-format codes of the Bind pglane sends: one per column.
    pub fn server_formats(&self) -> &[i16] {
        &self.server_formats
    }

    /// How many columns pglane transcodes.
    pub fn transcoded_columns(&self) -> usize {
        self.columns.iter().filter(|c| c.is_some()).count()
    }

    /// The server's portal RowDescription `body` as the client must see it:
    /// the formats it asked for.
    pub fn client_row_description(&self, body: &[u8], out: &mut BytesMut) -> Result<(), ProtocolError> {
        backend::row_description_with_formats(out, body, &self.client_formats)
    }
}

/// Whether a row of columns of `types` is at most `max_row` bytes on the
/// wire whatever its values, in either format.
fn row_bounded(types: &[u32], max_row: usize) -> bool {
    types
        .iter()
        .try_fold(HEADER_LEN + 2, |bound: usize, &t| bound.checked_add(4 + wire_bound(t)?))
        .is_some_and(|bound| bound <= max_row)
}

/// Bind result-format codes as one code per column: none is all text, one
/// applies to all; `None` if they are not 0/1 or do not fit the column count
/// (then the server refuses the Bind, and pglane must not hide why).
fn expand_formats(codes: &[i16], columns: usize) -> Option<Box<[i16]>> {
    if !codes.iter().all(|&c| c == FORMAT_TEXT || c == FORMAT_BINARY) {
        return None;
    }
    match codes {
        [] => Some(vec![FORMAT_TEXT; columns].into()),
        [one] => Some(vec![*one; columns].into()),
        all if all.len() == columns => Some(all.into()),
        _ => None,
    }
}

/// The result column types in a cached statement description
/// (ParameterDescription, then RowDescription or NoData, as sent); `None`
/// when the statement returns no rows or the bytes are not that.
pub fn described_types(description: &[u8]) -> Option<Vec<u32>> {
    let first = parse_header(description, usize::MAX).ok()??;
    let rest = description.get(HEADER_LEN + first.body_len..)?;
    let second = parse_header(rest, usize::MAX).ok()??;
    if first.tag != backend::PARAMETER_DESCRIPTION || second.tag != backend::ROW_DESCRIPTION {
        return None;
    }
    let body = rest.get(HEADER_LEN..HEADER_LEN + second.body_len)?;
    backend::row_description_types(body).ok()
}

/// For a Bind (`rest`: the body after the portal and statement names) of a
/// statement whose cached description is `description`: the portal's plan,
/// and the Bind's parameter part to forward with the plan's result formats
/// (`names::put_bind_with_result_formats`). `None`: forward the Bind as is.
pub fn plan_bind<'r>(
    description: &[u8],
    rest: &'r [u8],
    settings: &TextSettings,
    max_row: usize,
    small_rows: bool,
) -> Option<(Plan, &'r [u8])> {
    let types = described_types(description)?;
    let (params, codes) = frontend::split_bind_results(rest).ok()?;
    Some((Plan::new(&types, &codes, settings, max_row, small_rows)?, params))
}

/// Plans a [`PlanMemo`] keeps: a transaction's statements fit (pgbench's
/// tpcb-like binds five). Found by key among all of them: placed by the
/// statement's address alone, two of tpcb-like's five shared a place and
/// one was planned again in every transaction.
const PLAN_SLOTS: usize = 8;
/// Longer descriptions are planned each time and not kept.
const PLAN_DESCRIPTION_MAX: usize = 2048;

/// The plans made lately, each with everything it was made from: the
/// statement's cached description, the Bind's result-format codes, the text
/// settings, `max_row` and `small_rows`. A Bind that matches them all gets
/// the same plan without the description being decoded or a plan built
/// again; the match is by content, so a refreshed description or a changed
/// setting plans anew. Lent with the exchange's other working state (see
/// `exchange::InFlight`), so that an idle client holds none of it.
#[derive(Debug, Default)]
pub struct PlanMemo {
    kept: Memo<Planned, PLAN_SLOTS>,
    /// What [`PlanMemo::retained_bytes`] says, counted as plans are kept:
    /// it is asked at every transaction's end.
    bytes: usize,
}

#[derive(Debug, Default)]
struct Planned {
    description: Vec<u8>,
    codes: Vec<u8>,
    settings: TextSettings,
    max_row: usize,
    small_rows: bool,
    plan: Option<Rc<Plan>>,
}

impl Planned {
    fn retained_bytes(&self) -> usize {
        self.description.capacity() + self.codes.capacity()
    }

    fn made_from(&self, description: &[u8], codes: &[u8], settings: &TextSettings, max_row: usize, small_rows: bool) -> bool {
        self.description == description
            && self.codes == codes
            && self.max_row == max_row
            && self.small_rows == small_rows
            && self.settings == *settings
    }
}

impl PlanMemo {
    /// [`plan_bind`], remembered under `key` (any number: the statement's
    /// address, say; the entry's content decides a hit).
    pub fn plan_bind<'r>(
        &mut self,
        key: usize,
        description: &[u8],
        rest: &'r [u8],
        settings: &TextSettings,
        max_row: usize,
        small_rows: bool,
    ) -> Option<(Rc<Plan>, &'r [u8])> {
        let (params, codes) = frontend::split_bind_result_codes(rest).ok()?;
        if description.len() > PLAN_DESCRIPTION_MAX {
            let plan =
                Plan::new(&described_types(description)?, &frontend::decode_format_codes(codes), settings, max_row, small_rows)?;
            return Some((Rc::new(plan), params));
        }
        let key = key as u64;
        let found = self.kept.find(key);
        if let Some(planned) = found.map(|i| self.kept.get(i)) {
            if planned.made_from(description, codes, settings, max_row, small_rows) {
                return planned.plan.clone().map(|plan| (plan, params));
            }
        }
        let plan = described_types(description)
            .and_then(|types| Plan::new(&types, &frontend::decode_format_codes(codes), settings, max_row, small_rows))
            .map(Rc::new);
        let (_, planned) = self.kept.place(key, found);
        self.bytes -= planned.retained_bytes();
        planned.description.clear();
        planned.description.extend_from_slice(description);
        planned.codes.clear();
        planned.codes.extend_from_slice(codes);
        self.bytes += planned.retained_bytes();
        planned.settings.clone_from(settings);
        planned.max_row = max_row;
        planned.small_rows = small_rows;
        planned.plan = plan.clone();
        plan.map(|plan| (plan, params))
    }

    /// The bytes it holds, for whoever keeps it between clients.
    pub fn retained_bytes(&self) -> usize {
        self.bytes
    }
}

/// What transcoding one DataRow did, for the stats.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct RowStats {
    /// Non-NULL values turned from binary into text.
    pub values: u64,
    /// Text bytes written minus binary bytes received for them: what the
    /// server would have sent more (negative where text is shorter, as for
    /// small integers).
    pub bytes_saved: i64,
}

/// Appends to `out` DataRow `body` (of a portal planned by `plan`) as the
/// client must see it. On error `out` is left as it was.
pub fn transcode_row(body: &[u8], plan: &Plan, out: &mut BytesMut) -> Result<RowStats, NegotiateError> {
    let row = backend::decode_data_row(body)?;
    if row.len() != plan.columns.len() {
        return Err(NegotiateError::Columns { expected: plan.columns.len(), actual: row.len() });
    }
    let start = out.len();
    out.reserve(HEADER_LEN + body.len() + body.len() / 2);
    out.put_u8(backend::DATA_ROW);
    out.put_i32(0);
    out.put_i16(row.len() as i16);
    let mut stats = RowStats::default();
    for (column, (value, transcoder)) in row.iter().zip(plan.columns.iter()).enumerate() {
        match (value, transcoder) {
            (None, _) => out.put_i32(-1),
            (Some(v), None) => {
                out.put_i32(v.len() as i32);
                out.put_slice(v);
            }
            (Some(v), Some(t)) => {
                let len_at = out.len();
                out.put_i32(0);
                if let Err(source) = t.write_text(v, out) {
                    out.truncate(start);
                    return Err(NegotiateError::Transcode { column, source });
                }
                let written = out.len() - len_at - 4;
                out[len_at..len_at + 4].copy_from_slice(&(written as i32).to_be_bytes());
                stats.values += 1;
                stats.bytes_saved += written as i64 - v.len() as i64;
            }
        }
    }
    // Text over 2 GiB fits no message (PostgreSQL itself fails to print a
    // value whose text is over its 1 GiB allocation limit, a bytea over 512 MiB).
    let Ok(len) = i32::try_from(out.len() - start - 1) else {
        out.truncate(start);
        return Err(NegotiateError::TooLarge);
    };
    out[start + 1..start + HEADER_LEN].copy_from_slice(&len.to_be_bytes());
    Ok(stats)
}

/// The negotiated portals of one exchange and what the settled rule needs.
#[derive(Debug, Default)]
pub struct Negotiator {
    /// The client's portals that exist on the server connection now and
    /// are negotiated or have rows to watch: the unnamed one (most drivers
    /// use only it) apart, so that it costs no hashing and no allocation.
    unnamed: Option<Portal>,
    named: HashMap<String, Portal>,
    /// The client sent an Execute (or a FunctionCall) since its last Sync: a
    /// setting may have changed without being reported yet.
    executed_in_group: bool,
}

/// What happens to one portal's rows.
#[derive(Debug, Clone, Default)]
pub struct Portal {
    /// Its plan, if negotiated: its DataRows are transcoded.
    pub plan: Option<Rc<Plan>>,
    /// The statement whose row record its rows update: while the record is
    /// still being made, or when the plan negotiates unbounded columns (a
    /// row over the cap ends that).
    pub rows_of: Option<Rc<Statement>>,
}

impl Negotiator {
    /// Forgets every portal (the server connection went back), keeping the
    /// map's room.
    pub fn clear(&mut self) {
        self.forget_portals();
        self.executed_in_group = false;
    }

    fn forget_portals(&mut self) {
        self.unnamed = None;
        if !self.named.is_empty() {
            self.named.clear();
        }
    }

    /// A Bind made `portal`, with `plan` or none, and the statement whose
    /// rows to watch or none (both none forgets an old portal of the name).
    pub fn bound(&mut self, portal: &str, plan: Option<Rc<Plan>>, rows_of: Option<Rc<Statement>>) {
        let kept = (plan.is_some() || rows_of.is_some()).then(|| Portal { plan, rows_of });
        match kept {
            Some(kept) if !portal.is_empty() => {
                self.named.insert(portal.to_owned(), kept);
            }
            Some(kept) => self.unnamed = Some(kept),
            None => self.closed(portal),
        }
    }

    /// The plan of `portal`, if it was negotiated.
    pub fn plan(&self, portal: &str) -> Option<Rc<Plan>> {
        self.get(portal).and_then(|p| p.plan.clone())
    }

    /// What an Execute of `portal` does with its rows.
    pub fn portal(&self, portal: &str) -> Portal {
        self.get(portal).cloned().unwrap_or_default()
    }

    fn get(&self, portal: &str) -> Option<&Portal> {
        match portal {
            "" => self.unnamed.as_ref(),
            _ if self.named.is_empty() => None,
            _ => self.named.get(portal),
        }
    }

    pub fn closed(&mut self, portal: &str) {
        if portal.is_empty() {
            self.unnamed = None;
        } else if !self.named.is_empty() {
            self.named.remove(portal);
        }
    }

    /// The client sent a message with `tag` to the server.
    pub fn client_sent(&mut self, tag: u8) {
        match tag {
            frontend::EXECUTE => self.executed_in_group = true,
            frontend::SYNC => self.executed_in_group = false,
            _ => {}
        }
    }

    /// Whether nothing the client sent in its current Sync group can have
    /// changed a setting yet (earlier groups are the exchange's to check).
    pub fn group_is_clean(&self) -> bool {
        !self.executed_in_group
    }

    /// The server ended its transaction: every portal is gone.
    pub fn transaction_ended(&mut self) {
        self.forget_portals();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::backend::FieldDescription;
    use crate::protocol::frame::split_message;
    use crate::protocol::names;

    fn settings() -> TextSettings {
        let mut s = TextSettings::default();
        for (n, v) in [("DateStyle", "ISO, MDY"), ("IntervalStyle", "postgres"), ("TimeZone", "UTC"), ("integer_datetimes", "on")]
        {
            s.apply(n, v);
        }
        s
    }

    fn field(type_oid: u32) -> FieldDescription {
        FieldDescription {
            name: format!("c{type_oid}"),
            table_oid: 0,
            column: 0,
            type_oid,
            type_size: -1,
            type_modifier: -1,
            format: 0,
        }
    }

    /// A cached description: ParameterDescription + RowDescription.
    fn description(types: &[u32]) -> BytesMut {
        let mut d = BytesMut::new();
        backend::parameter_description(&mut d, &[23]);
        backend::row_description(&mut d, &types.iter().map(|&t| field(t)).collect::<Vec<_>>());
        d
    }

    fn bind_rest(result_formats: &[i16]) -> Vec<u8> {
        let mut out = BytesMut::new();
        let values: [Option<&[u8]>; 1] = [Some(b"7")];
        frontend::bind(&mut out, "p", "s", &[], values.into_iter(), result_formats);
        let m = split_message(&mut out, 1000).unwrap().unwrap();
        names::split_bind(&m.body).unwrap().2.to_vec()
    }

    #[test]
    fn text_columns_of_negotiable_types_go_binary() {
        let types = [oid::UUID, 25, oid::INT8, oid::TIMESTAMP];
        let plan = Plan::new(&types, &[], &settings(), 1 << 20, false);
        assert_eq!(plan, None, "a text column makes the row unbounded");
        let plan = Plan::new(&types, &[], &settings(), 1 << 20, true).expect("rows shown small");
        assert_eq!(plan.server_formats(), &[1, 0, 1, 1], "the text column stays text");
        let types = [oid::UUID, oid::FLOAT8, oid::INT8, oid::TIMESTAMP];
        let plan = Plan::new(&types, &[], &settings(), 1 << 20, false).expect("negotiated");
        assert_eq!(plan.server_formats(), &[1, 0, 1, 1]);
        assert_eq!(plan.transcoded_columns(), 3);
        // The client's own binary column stays binary and is not transcoded.
        let plan = Plan::new(&types, &[0, 0, 1, 0], &settings(), 1 << 20, false).expect("negotiated");
        assert_eq!(plan.server_formats(), &[1, 0, 1, 1]);
        assert_eq!(plan.transcoded_columns(), 2);
        assert_eq!(Plan::new(&types, &[1], &settings(), 1 << 20, false), None, "all binary: nothing to do");
    }

    #[test]
    fn unbounded_columns_only_for_statements_with_small_rows() {
        let mut s = settings();
        s.apply("bytea_output", "hex");
        s.apply("client_encoding", "UTF8");
        s.apply("server_encoding", "UTF8");
        let types = [oid::UUID, oid::TEXT, oid::BYTEA, 1007, 1009, oid::JSONB, 3807, oid::VARCHAR, 790];
        assert_eq!(Plan::new(&types, &[], &s, 1 << 20, false), None, "not shown small rows yet");
        let plan = Plan::new(&types, &[], &s, 1 << 20, true).expect("small rows");
        // uuid, bytea, int4[], text[] and jsonb[] binary; text-likes, jsonb
        // and money (no transcoder) as the client asked.
        assert_eq!(plan.server_formats(), &[1, 0, 1, 1, 1, 0, 1, 0, 0]);
        assert!(plan.unbounded());
        assert_eq!(Plan::new(&[oid::TEXT, oid::JSON], &[], &s, 1 << 20, true), None, "nothing worth binary");
        // bytea only where bytea_output is known (and settled).
        let plan = Plan::new(&[oid::BYTEA, oid::INT4], &[], &settings(), 1 << 20, true).expect("int4");
        assert_eq!(plan.server_formats(), &[0, 1]);
        // Bounded rows need no record, and say so.
        let plan = Plan::new(&[oid::UUID], &[], &s, 1 << 20, false).expect("bounded");
        assert!(!plan.unbounded());
        assert!(Plan::new(&[oid::NUMERIC; 8], &[], &s, 1 << 20, true).expect("shown small").unbounded());
    }

    #[test]
    fn negotiable_types() {
        for t in [oid::BOOL, oid::INT4, oid::NUMERIC, oid::UUID, oid::TIMESTAMPTZ, oid::FLOAT8, oid::CIDR] {
            assert!(negotiable(t, false) && negotiable(t, true), "{t}");
        }
        for t in [oid::BYTEA, 1007, 1016, 2951, 1231, 1115, 1001, 1022, 1009, 1015, 1014, 1003, 3807, 199] {
            assert!(!negotiable(t, false) && negotiable(t, true), "{t}");
        }
        for t in [oid::TEXT, oid::VARCHAR, oid::BPCHAR, oid::NAME, oid::JSON, oid::JSONB, 790, 22, 30, 1040] {
            assert!(!negotiable(t, false) && !negotiable(t, true), "{t}");
        }
    }

    #[test]
    fn the_row_record_decides_after_enough_small_executions() {
        let mut r = RowRecord::default();
        assert!(still_watching(r) && !small_rows(r));
        for _ in 0..SMALL_ROWS_AFTER {
            assert!(!small_rows(r));
            r = execution_seen(row_seen(row_seen(r, 100), SMALL_ROW_CAP));
        }
        assert_eq!(r, RowRecord { executions: SMALL_ROWS_AFTER, largest_row: SMALL_ROW_CAP, too_big: false });
        assert!(small_rows(r) && !still_watching(r));
        let big = row_seen(r, SMALL_ROW_CAP + 1);
        assert!(big.too_big && !small_rows(big) && !still_watching(big));
        assert!(row_seen(big, 1).too_big, "for good");
        assert!(!small_rows(execution_seen(big)));
        let early = row_seen(RowRecord::default(), 1 << 30);
        assert!(!still_watching(early), "a big row before the end of the watch ends it");
        assert_eq!(execution_seen(RowRecord { executions: u32::MAX, ..r }).executions, u32::MAX);
    }

    #[test]
    fn largest_data_row_reads_the_headers_of_a_streamed_run() {
        let mut run = BytesMut::new();
        backend::data_row(&mut run, &[Some(&[1; 10])]);
        backend::data_row(&mut run, &[Some(&[2; 300])]);
        backend::data_row(&mut run, &[Some(&[3; 20])]);
        assert_eq!(largest_data_row(&run), 2 + 4 + 300);
        // The last row cut short still tells its length.
        let mut cut = run[..run.len() - 10].to_vec();
        assert_eq!(largest_data_row(&cut), 306);
        let mut big = BytesMut::new();
        backend::data_row(&mut big, &[Some(&[9; 5000])]);
        cut.extend_from_slice(&big[..HEADER_LEN + 100]);
        assert_eq!(largest_data_row(&cut[..]), 306, "a row after a cut one is not in the piece");
        assert_eq!(largest_data_row(&big[..HEADER_LEN + 1]), 5006);
        assert_eq!(largest_data_row(&big[..3]), 0);
        assert_eq!(largest_data_row(b""), 0);
        assert_eq!(largest_data_row(b"C\x00\x00\x00\x05x"), 0, "not rows");
    }

    #[test]
    fn unknown_settings_keep_dependent_types_text() {
        let types = [oid::TIMESTAMPTZ, oid::NUMERIC];
        let plan = Plan::new(&types, &[], &TextSettings::default(), 1 << 20, false).expect("numeric needs no setting");
        assert_eq!(plan.server_formats(), &[0, 1]);
        let mut berlin = settings();
        berlin.apply("TimeZone", "Europe/Berlin");
        assert_eq!(Plan::new(&[oid::TIMESTAMPTZ], &[], &berlin, 1 << 20, false), None);
        assert!(Plan::new(&[oid::TIMESTAMPTZ], &[], &settings(), 1 << 20, false).is_some());
        // Floats only with extra_float_digits known.
        assert_eq!(Plan::new(&[oid::FLOAT8, oid::FLOAT4], &[], &settings(), 1 << 20, false), None);
        let mut efd = settings();
        efd.apply("extra_float_digits", "-15");
        let plan = Plan::new(&[oid::FLOAT8, oid::FLOAT4], &[], &efd, 1 << 20, false).expect("efd known");
        assert_eq!(plan.server_formats(), &[1, 1]);
    }

    #[test]
    fn malformed_or_oversized_binds_are_not_negotiated() {
        let types = [oid::INT4, oid::INT4];
        assert_eq!(Plan::new(&types, &[0, 0, 0], &settings(), 1 << 20, false), None, "wrong code count");
        assert_eq!(Plan::new(&types, &[2], &settings(), 1 << 20, false), None, "bad code");
        assert_eq!(Plan::new(&[oid::NUMERIC; 8], &[], &settings(), 1 << 20, false), None, "8 numerics may exceed 1 MiB");
        assert!(Plan::new(&[oid::NUMERIC; 8], &[], &settings(), 64 << 20, false).is_some());
        assert_eq!(Plan::new(&[oid::INT4, 1009], &[], &settings(), 64 << 20, false), None, "arrays are unbounded");
        assert_eq!(Plan::new(&[], &[], &settings(), 64 << 20, false), None, "no columns");
    }

    #[test]
    fn bind_is_rewritten_with_per_column_formats_and_the_same_parameters() {
        let d = description(&[oid::UUID, oid::INT4]);
        let rest = bind_rest(&[]);
        let (plan, params) = plan_bind(&d, &rest, &settings(), 1 << 20, false).expect("negotiated");
        let mut out = BytesMut::new();
        names::put_bind_with_result_formats(&mut out, "p", "pglane_0_1", params, plan.server_formats());
        let m = split_message(&mut out, 1000).unwrap().unwrap();
        let (portal, statement, new_rest) = names::split_bind(&m.body).unwrap();
        assert_eq!((portal, statement), ("p", "pglane_0_1"));
        let (new_params, formats) = frontend::split_bind_results(new_rest).unwrap();
        assert_eq!(new_params, params);
        assert_eq!(formats, vec![1, 1]);
        // No rows (NoData), no cached RowDescription: as is.
        let mut no_data = BytesMut::new();
        backend::parameter_description(&mut no_data, &[]);
        backend::no_data(&mut no_data);
        assert!(plan_bind(&no_data, &rest, &settings(), 1 << 20, false).is_none());
        assert!(plan_bind(b"", &rest, &settings(), 1 << 20, false).is_none());
    }

    /// What [`plan_bind`] makes, as comparable values.
    fn planned<P: std::borrow::Borrow<Plan>>(plan: Option<(P, &[u8])>) -> Option<(Vec<i16>, Vec<i16>, Vec<u8>)> {
        plan.map(|(p, params)| {
            let p = p.borrow();
            (p.server_formats().to_vec(), p.client_formats.to_vec(), params.to_vec())
        })
    }

    #[test]
    fn the_plan_memo_answers_what_planning_again_would() {
        let mut memo = PlanMemo::default();
        let utc = settings();
        let mut other_zone = settings();
        other_zone.apply("TimeZone", "Europe/Paris");
        let descriptions = [
            description(&[oid::UUID, oid::INT4]),
            description(&[oid::INT4]),
            description(&[25]),
            description(&[oid::TIMESTAMPTZ]),
            BytesMut::from(&b"not a description"[..]),
        ];
        let rests = [bind_rest(&[]), bind_rest(&[1]), bind_rest(&[0, 1]), b"\0".to_vec()];
        // Every mix twice over, all under one key and under their own: the
        // inputs decide, never the slot.
        for _ in 0..2 {
            for (i, d) in descriptions.iter().enumerate() {
                for rest in &rests {
                    for s in [&utc, &other_zone] {
                        for (max_row, small_rows) in [(1 << 20, false), (8, false), (8, true)] {
                            let want = planned(plan_bind(d, rest, s, max_row, small_rows));
                            assert_eq!(planned(memo.plan_bind(0, d, rest, s, max_row, small_rows)), want);
                            assert_eq!(planned(memo.plan_bind(i, d, rest, s, max_row, small_rows)), want);
                        }
                    }
                }
            }
        }
        // A hit is the same plan, not a new one.
        let d = &descriptions[0];
        let first = memo.plan_bind(3, d, &rests[0], &utc, 1 << 20, false).unwrap().0;
        let again = memo.plan_bind(3, d, &rests[0], &utc, 1 << 20, false).unwrap().0;
        assert!(Rc::ptr_eq(&first, &again));
        // Keys alike in their low bits (statements' addresses) keep a plan each.
        let other = &descriptions[1];
        let beside = memo.plan_bind(3 + PLAN_SLOTS, other, &rests[0], &utc, 1 << 20, false).unwrap().0;
        let first_again = memo.plan_bind(3, d, &rests[0], &utc, 1 << 20, false).unwrap().0;
        let beside_again = memo.plan_bind(3 + PLAN_SLOTS, other, &rests[0], &utc, 1 << 20, false).unwrap().0;
        assert!(Rc::ptr_eq(&first, &first_again) && Rc::ptr_eq(&beside, &beside_again));
        // A description over the memo's limit is planned, and not kept.
        let wide = description(&[oid::INT4; 200]);
        assert!(wide.len() > PLAN_DESCRIPTION_MAX);
        let kept = memo.retained_bytes();
        assert_eq!(
            planned(memo.plan_bind(3, &wide, &rests[0], &utc, 1 << 20, false)),
            planned(plan_bind(&wide, &rests[0], &utc, 1 << 20, false))
        );
        assert_eq!(memo.retained_bytes(), kept);
        assert_eq!(kept, memo.kept.entries().map(|p| p.retained_bytes()).sum::<usize>(), "counted as filled");
    }

    #[test]
    fn rows_are_transcoded_field_by_field() {
        let plan =
            Plan::new(&[oid::UUID, oid::INT4, oid::FLOAT8, oid::NUMERIC], &[0, 1, 0, 0], &settings(), 1 << 20, false).unwrap();
        let uuid = [0x12u8, 0x34, 0x56, 0x78, 0x9a, 0xbc, 0xde, 0xf0, 0, 1, 2, 3, 4, 5, 6, 7];
        let int4 = 42i32.to_be_bytes();
        // numeric -12.50: ndigits 2, weight 0, sign -, dscale 2, digits 12 5000
        let numeric: Vec<u8> = [2i16, 0, 0x4000, 2, 12, 5000].iter().flat_map(|w| (*w as u16).to_be_bytes()).collect();
        let mut body = BytesMut::new();
        backend::data_row(&mut body, &[Some(&uuid), Some(&int4), Some(b"1.5"), Some(&numeric)]);
        let mut out = BytesMut::new();
        let stats = transcode_row(&body[HEADER_LEN..], &plan, &mut out).unwrap();
        let mut expected = BytesMut::new();
        backend::data_row(
            &mut expected,
            &[Some(b"12345678-9abc-def0-0001-020304050607"), Some(&int4), Some(b"1.5"), Some(b"-12.50")],
        );
        assert_eq!(out, expected);
        assert_eq!(stats, RowStats { values: 2, bytes_saved: (36 - 16) + (6 - 12) });

        let mut nulls = BytesMut::new();
        backend::data_row(&mut nulls, &[None, None, None, None]);
        let mut out = BytesMut::new();
        assert_eq!(transcode_row(&nulls[HEADER_LEN..], &plan, &mut out).unwrap(), RowStats::default());
        assert_eq!(out, nulls);
    }

    #[test]
    fn bad_rows_are_errors_and_leave_the_output_alone() {
        let plan = Plan::new(&[oid::UUID, oid::INT4], &[], &settings(), 1 << 20, false).unwrap();
        let mut out = BytesMut::from(&b"kept"[..]);
        let mut short = BytesMut::new();
        backend::data_row(&mut short, &[Some(&[1, 2, 3]), Some(&[0, 0, 0, 1])]);
        assert!(matches!(transcode_row(&short[HEADER_LEN..], &plan, &mut out), Err(NegotiateError::Transcode { column: 0, .. })));
        let mut one = BytesMut::new();
        backend::data_row(&mut one, &[None]);
        assert!(matches!(
            transcode_row(&one[HEADER_LEN..], &plan, &mut out),
            Err(NegotiateError::Columns { expected: 2, actual: 1 })
        ));
        assert!(matches!(transcode_row(b"\x00\x01\x00\x00", &plan, &mut out), Err(NegotiateError::Protocol(_))));
        assert_eq!(&out[..], b"kept");
    }

    #[test]
    fn portal_row_descriptions_show_the_client_formats() {
        let plan = Plan::new(&[oid::UUID, oid::INT8, oid::TIMESTAMP], &[0, 1, 0], &settings(), 1 << 20, false).unwrap();
        let mut server = BytesMut::new();
        let fields: Vec<_> = [(oid::UUID, 1), (oid::INT8, 1), (oid::TIMESTAMP, 1)]
            .iter()
            .map(|&(t, format)| FieldDescription { format, ..field(t) })
            .collect();
        backend::row_description(&mut server, &fields);
        let mut out = BytesMut::new();
        plan.client_row_description(&server[HEADER_LEN..], &mut out).unwrap();
        let m = split_message(&mut out, 1000).unwrap().unwrap();
        let got = backend::decode_row_description(&m.body).unwrap();
        assert_eq!(got.iter().map(|f| f.format).collect::<Vec<_>>(), vec![0, 1, 0]);
        assert_eq!(
            got.iter().map(|f| (f.name.as_str(), f.type_oid)).collect::<Vec<_>>(),
            vec![("c2950", 2950), ("c20", 20), ("c1114", 1114)]
        );
        let mut wrong = BytesMut::new();
        backend::row_description(&mut wrong, &fields[..2]);
        assert!(plan.client_row_description(&wrong[HEADER_LEN..], &mut BytesMut::new()).is_err());
    }

    #[test]
    fn an_execute_unsettles_its_group_until_sync() {
        let mut n = Negotiator::default();
        assert!(n.group_is_clean());
        n.client_sent(frontend::BIND);
        assert!(n.group_is_clean());
        n.client_sent(frontend::EXECUTE);
        assert!(!n.group_is_clean());
        n.client_sent(frontend::SYNC);
        assert!(n.group_is_clean());
        n.bound("", Plan::new(&[oid::INT4], &[], &settings(), 1 << 20, false).map(Rc::new), None);
        assert!(n.plan("").is_some());
        n.bound("", None, None);
        assert!(n.plan("").is_none());
        n.bound("c", Plan::new(&[oid::INT4], &[], &settings(), 1 << 20, false).map(Rc::new), None);
        n.bound("", Plan::new(&[oid::INT4], &[], &settings(), 1 << 20, false).map(Rc::new), None);
        assert!(n.plan("c").is_some() && n.plan("").is_some());
        n.closed("c");
        assert!(n.plan("c").is_none() && n.plan("").is_some(), "closing a named portal leaves the unnamed one");
        n.bound("c", Plan::new(&[oid::INT4], &[], &settings(), 1 << 20, false).map(Rc::new), None);
        n.bound("c", None, None);
        assert!(n.plan("c").is_none(), "a Bind of nothing to negotiate replaces the old portal");
        n.bound("c", Plan::new(&[oid::INT4], &[], &settings(), 1 << 20, false).map(Rc::new), None);
        n.transaction_ended();
        assert!(n.plan("c").is_none() && n.plan("").is_none());
    }
}

/// The exchange with negotiation on, message by message: what reaches the
/// server and what reaches the client.
#[cfg(test)]
mod exchange_tests {
    use bytes::{Bytes, BytesMut};

    use super::super::exchange::{Exchange, Statements};
    use super::Negotiation;
    use crate::formats::oid;
    use crate::prepare::{ClientStatements, Registry, ServerStatements};
    use crate::protocol::backend::{self, FieldDescription, TransactionStatus};
    use crate::protocol::frame::{split_message, HEADER_LEN};
    use crate::protocol::{frontend, names};
    use crate::server::ConnectionOutput;
    use crate::settings::Settings;

    const UUID: [u8; 16] = [0x12, 0x34, 0x56, 0x78, 0x9a, 0xbc, 0xde, 0xf0, 0, 1, 2, 3, 4, 5, 6, 7];
    const UUID_TEXT: &[u8] = b"12345678-9abc-def0-0001-020304050607";

    fn messages(mut bytes: BytesMut) -> Vec<(u8, Bytes)> {
        let mut v = Vec::new();
        while let Some(m) = split_message(&mut bytes, 1 << 20).unwrap() {
            v.push((m.tag, m.body));
        }
        v
    }

    /// A message with its header, as the relay hands it over.
    fn whole(tag: u8, body: &[u8]) -> Vec<u8> {
        let mut m = vec![tag];
        m.extend_from_slice(&((body.len() + 4) as i32).to_be_bytes());
        m.extend_from_slice(body);
        m
    }

    fn tags(m: &[(u8, Bytes)]) -> String {
        m.iter().map(|(t, _)| *t as char).collect()
    }

    struct Fixture {
        registry: Registry,
        client: ClientStatements,
        server: ServerStatements,
        client_settings: Settings,
        server_settings: Settings,
        output: ConnectionOutput,
        exchange: Exchange,
    }

    impl Fixture {
        fn new() -> Fixture {
            Fixture {
                registry: Registry::new(0, 10),
                client: ClientStatements::new(10),
                server: ServerStatements::new(10),
                client_settings: Settings::default(),
                server_settings: Settings::default(),
                output: ConnectionOutput::new(
                    &[("integer_datetimes".into(), "on".into())],
                    &[("bytea_output".into(), "hex".into())],
                ),
                exchange: Exchange::default(),
            }
        }

        /// The exchange, and the state it works on.
        fn parts(&mut self) -> (&mut Exchange, Statements<'_>) {
            let st = Statements {
                registry: &self.registry,
                client: &mut self.client,
                server: &mut self.server,
                client_settings: &mut self.client_settings,
                server_settings: &mut self.server_settings,
                negotiation: Some(Negotiation { output: &self.output, max_row: 1 << 20 }),
            };
            (&mut self.exchange, st)
        }

        /// Client messages in, what goes to the server out.
        fn client(&mut self, bytes: BytesMut) -> Vec<(u8, Bytes)> {
            let (mut to_server, mut to_client) = (BytesMut::new(), BytesMut::new());
            for (tag, body) in messages(bytes) {
                let (exchange, mut st) = self.parts();
                exchange.from_client(tag, &whole(tag, &body), &mut st, &mut to_server);
            }
            self.exchange.client_messages_taken(&mut to_client);
            assert!(to_client.is_empty());
            messages(to_server)
        }

        /// Server messages in (whole, as the relay hands them when
        /// `rows_need_whole` says so), what goes to the client out.
        fn server(&mut self, bytes: BytesMut) -> Vec<(u8, Bytes)> {
            let mut to_client = BytesMut::new();
            for (tag, body) in messages(bytes) {
                let (exchange, mut st) = self.parts();
                if tag == backend::DATA_ROW {
                    let negotiated = body.len() == 2 + 4 + UUID.len();
                    assert_eq!(exchange.rows_need_whole(), negotiated, "whole rows exactly for the negotiated portal");
                }
                exchange.from_server(tag, &whole(tag, &body), &mut st, &mut to_client);
                assert!(exchange.take_failure().is_none());
            }
            messages(to_client)
        }
    }

    fn bind_execute_sync() -> BytesMut {
        let mut out = BytesMut::new();
        frontend::bind(&mut out, "", "S_1", &[], std::iter::empty(), &[]);
        frontend::execute(&mut out, "", 0);
        frontend::sync(&mut out);
        out
    }

    fn result(row: &[u8]) -> BytesMut {
        let mut out = BytesMut::new();
        backend::bind_complete(&mut out);
        backend::data_row(&mut out, &[Some(row)]);
        backend::command_complete(&mut out, "SELECT 1");
        backend::ready_for_query(&mut out, TransactionStatus::Idle);
        out
    }

    #[test]
    fn an_undescribed_statement_is_described_by_pglane_then_negotiated() {
        let mut f = Fixture::new();
        let mut parse = BytesMut::new();
        frontend::parse(&mut parse, "S_1", "select u from t", &[]);
        assert_eq!(tags(&f.client(parse)), "P");
        let mut parsed = BytesMut::new();
        backend::parse_complete(&mut parsed);
        assert_eq!(tags(&f.server(parsed)), "1");

        // First Bind: nothing known, so pglane describes the statement ahead
        // of it and the Bind goes as the client sent it.
        let sent = f.client(bind_execute_sync());
        assert_eq!(tags(&sent), "DBES");
        let (_, _, rest) = names::split_bind(&sent[1].1).unwrap();
        assert_eq!(frontend::split_bind_results(rest).unwrap().1, Vec::<i16>::new());
        let mut described = BytesMut::new();
        backend::parameter_description(&mut described, &[]);
        let field = FieldDescription {
            name: "u".into(),
            table_oid: 0,
            column: 0,
            type_oid: oid::UUID,
            type_size: 16,
            type_modifier: -1,
            format: 0,
        };
        backend::row_description(&mut described, &[field]);
        described.extend_from_slice(&result(UUID_TEXT));
        let got = f.server(described);
        assert_eq!(tags(&got), "2DCZ", "pglane's Describe is not the client's to see");
        assert_eq!(&got[1].1[6..], UUID_TEXT);

        // Second Bind: binary asked for, and the row transcoded back.
        let sent = f.client(bind_execute_sync());
        assert_eq!(tags(&sent), "BES");
        let (_, _, rest) = names::split_bind(&sent[0].1).unwrap();
        assert_eq!(frontend::split_bind_results(rest).unwrap().1, vec![1]);
        let got = f.server(result(&UUID));
        assert_eq!(tags(&got), "2DCZ");
        assert_eq!(&got[1].1[6..], UUID_TEXT);
        let stats = f.registry.stats();
        assert_eq!((stats.portals_negotiated, stats.values_transcoded, stats.transcode_bytes_saved), (1, 1, 20));
    }

    /// The result formats of the Bind among `sent`.
    fn bind_formats(sent: &[(u8, Bytes)]) -> Vec<i16> {
        let (_, body) = sent.iter().find(|(tag, _)| *tag == frontend::BIND).expect("a Bind");
        let (_, _, rest) = names::split_bind(body).unwrap();
        frontend::split_bind_results(rest).unwrap().1
    }

    /// Feeds server messages as the relay would: DataRows whole when
    /// `rows_need_whole` says so (it must say `whole`), else streamed.
    fn feed(f: &mut Fixture, bytes: BytesMut, whole_rows: bool) -> Vec<(u8, Bytes)> {
        let mut to_client = BytesMut::new();
        for (tag, body) in messages_big(bytes) {
            let (exchange, mut st) = f.parts();
            if tag == backend::DATA_ROW {
                assert_eq!(exchange.rows_need_whole(), whole_rows);
                if !whole_rows {
                    exchange.from_server_stream(tag, &whole(tag, &body), st.registry, &mut to_client);
                    continue;
                }
            }
            exchange.from_server(tag, &whole(tag, &body), &mut st, &mut to_client);
            assert!(exchange.take_failure().is_none());
        }
        messages_big(to_client)
    }

    fn messages_big(mut bytes: BytesMut) -> Vec<(u8, Bytes)> {
        let mut v = Vec::new();
        while let Some(m) = split_message(&mut bytes, 1 << 24).unwrap() {
            v.push((m.tag, m.body));
        }
        v
    }

    fn rows(values: &[(&[u8], &[u8])]) -> BytesMut {
        let mut out = BytesMut::new();
        backend::bind_complete(&mut out);
        for (u, b) in values {
            backend::data_row(&mut out, &[Some(u), Some(b)]);
        }
        backend::command_complete(&mut out, "SELECT 1");
        backend::ready_for_query(&mut out, TransactionStatus::Idle);
        out
    }

    #[test]
    fn unbounded_columns_are_negotiated_after_small_executions_until_a_big_row() {
        use super::{SMALL_ROWS_AFTER, SMALL_ROW_CAP};
        let mut f = Fixture::new();
        let mut parse = BytesMut::new();
        frontend::parse(&mut parse, "S_1", "select u, b from t", &[]);
        f.client(parse);
        let mut parsed = BytesMut::new();
        backend::parse_complete(&mut parsed);
        feed(&mut f, parsed, false);
        let field = |name: &str, type_oid| FieldDescription {
            name: name.into(),
            table_oid: 0,
            column: 0,
            type_oid,
            type_size: -1,
            type_modifier: -1,
            format: 0,
        };

        // Watched, un-negotiated: the first run also describes it.
        for run in 0..SMALL_ROWS_AFTER {
            let sent = f.client(bind_execute_sync());
            assert_eq!(bind_formats(&sent), Vec::<i16>::new(), "run {run}");
            let mut reply = BytesMut::new();
            if run == 0 {
                backend::parameter_description(&mut reply, &[]);
                backend::row_description(&mut reply, &[field("u", oid::UUID), field("b", oid::BYTEA)]);
            }
            reply.extend_from_slice(&rows(&[(UUID_TEXT, b"\\x01"), (UUID_TEXT, &[b'x'; 1000])]));
            assert_eq!(tags(&feed(&mut f, reply, false)), "2DDCZ");
        }
        let record = f.client.get("S_1").cloned().expect("S_1");
        assert_eq!(record.rows.get().executions, SMALL_ROWS_AFTER);
        assert_eq!(record.rows.get().largest_row, 2 + 4 + 36 + 4 + 1000);

        // Shown small: uuid and bytea binary, turned back into text.
        let sent = f.client(bind_execute_sync());
        assert_eq!(bind_formats(&sent), vec![1, 1]);
        let got = feed(&mut f, rows(&[(&UUID, &[0, 1, 0xff]), (&UUID, b"")]), true);
        assert_eq!(tags(&got), "2DDCZ");
        let mut expected = BytesMut::new();
        backend::data_row(&mut expected, &[Some(UUID_TEXT), Some(b"\\x0001ff")]);
        backend::data_row(&mut expected, &[Some(UUID_TEXT), Some(b"\\x")]);
        assert_eq!(&got[1].1[..], &expected[HEADER_LEN..HEADER_LEN + 2 + 4 + 36 + 4 + 8]);
        assert_eq!(&got[2].1[..], &expected[HEADER_LEN + 2 + 4 + 36 + 4 + 8 + HEADER_LEN..]);

        // A row over the cap: still exact, and the last negotiated run.
        let big = vec![0xabu8; SMALL_ROW_CAP];
        let sent = f.client(bind_execute_sync());
        assert_eq!(bind_formats(&sent), vec![1, 1]);
        let got = feed(&mut f, rows(&[(&UUID, &big), (&UUID, &[7])]), true);
        assert_eq!(got[1].1.len(), 2 + 4 + 36 + 4 + 2 + 2 * SMALL_ROW_CAP);
        assert!(got[1].1.ends_with(b"abab"));
        assert_eq!(&got[2].1[2 + 4 + 36 + 4..], b"\\x07");
        let stats = f.registry.stats();
        assert_eq!((stats.big_rows, stats.big_row_statements), (1, 1));
        assert!(record.rows.get().too_big);
        let sent = f.client(bind_execute_sync());
        assert_eq!(bind_formats(&sent), Vec::<i16>::new(), "never again");
        feed(&mut f, rows(&[(UUID_TEXT, b"\\x01")]), false);
        assert_eq!(f.registry.stats().big_rows, 1);
    }

    #[test]
    fn a_portal_read_in_batches_is_one_execution_and_every_batch_is_watched() {
        let mut f = Fixture::new();
        let mut parse = BytesMut::new();
        frontend::parse(&mut parse, "S_1", "select u, b from t", &[]);
        frontend::describe(&mut parse, crate::protocol::frontend::Target::Statement, "S_1");
        frontend::sync(&mut parse);
        f.client(parse);
        let mut reply = BytesMut::new();
        backend::parse_complete(&mut reply);
        backend::parameter_description(&mut reply, &[]);
        let field = |name: &str, type_oid| FieldDescription {
            name: name.into(),
            table_oid: 0,
            column: 0,
            type_oid,
            type_size: -1,
            type_modifier: -1,
            format: 0,
        };
        backend::row_description(&mut reply, &[field("u", oid::UUID), field("b", oid::BYTEA)]);
        backend::ready_for_query(&mut reply, TransactionStatus::Idle);
        feed(&mut f, reply, false);
        let mut batches = BytesMut::new();
        frontend::bind(&mut batches, "c", "S_1", &[], std::iter::empty(), &[]);
        frontend::execute(&mut batches, "c", 1);
        frontend::execute(&mut batches, "c", 1);
        frontend::sync(&mut batches);
        f.client(batches);
        let mut reply = BytesMut::new();
        backend::bind_complete(&mut reply);
        backend::data_row(&mut reply, &[Some(UUID_TEXT), Some(b"\\x01")]);
        crate::protocol::put_message(&mut reply, backend::PORTAL_SUSPENDED, |_| {});
        backend::data_row(&mut reply, &[Some(UUID_TEXT), Some(&[b'a'; 500])]);
        backend::command_complete(&mut reply, "SELECT 2");
        backend::ready_for_query(&mut reply, TransactionStatus::Idle);
        assert_eq!(tags(&feed(&mut f, reply, false)), "2DsDCZ");
        let record = f.client.get("S_1").expect("S_1").rows.get();
        assert_eq!((record.executions, record.largest_row), (1, 2 + 4 + 36 + 4 + 500));
    }
}
