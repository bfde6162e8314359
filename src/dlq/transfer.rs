//! Custody records as JSON lines (issue 18, must-have 6): a group or a filter exported for a
//! ticket or another environment, and imported into the custody of a chosen DLQ, never into a
//! live queue (a replay from there goes through the usual checks).
//!
//! A line carries the message twice over where it matters: `properties` as the browser shows
//! them, readable and editable, and `amqp_properties`, the AMQP content header in base64, exact
//! with every header's type. An import takes `amqp_properties` when the readable form still says
//! the same, and the readable form when someone edited it (numbers become 64-bit integers or
//! doubles, text long strings, objects tables). The body is base64.

use base64::Engine;
use lapin::BasicProperties;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::budget::Budget;
use super::custody::{self, decode_properties, Taken};
use super::message::Filter;
use super::mover::peeked_parts;
use super::readable::{properties_from_json, short_string};
use crate::storage::custody::StoredMessage;
use crate::storage::Store;

/// One record as a line.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Line {
    /// The record it was exported from (ignored on import: the import makes new records).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub record: Option<i64>,
    /// When custody took it in, unix seconds (informational).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub received_at: Option<i64>,
    #[serde(default)]
    pub exchange: String,
    #[serde(default)]
    pub routing_key: String,
    /// Informational: an import reads these from the properties again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub original_queue: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(default)]
    pub properties: Map<String, Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub amqp_properties: Option<String>,
    /// The body, base64.
    pub body: String,
}

const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::STANDARD;

/// Records read per query while exporting.
const EXPORT_CHUNK: usize = 200;

/// The ids of the records of a queue held in custody that `filter` matches, oldest first.
pub async fn export_ids(
    store: &Store,
    queue: (&str, &str, &str),
    filter: &Filter,
    budget: &Budget,
) -> Result<Vec<i64>, custody::SearchError> {
    Ok(custody::matching(store, queue, filter, budget).await?.into_iter().map(|r| r.id).collect())
}

/// The lines of the records `ids` (at most `EXPORT_CHUNK` at a time is what callers ask for).
pub async fn export_lines(store: &Store, ids: &[i64]) -> Result<Vec<String>, sqlx::Error> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let messages = store.custody_messages(ids).await?;
    Ok(messages
        .into_iter()
        .map(|StoredMessage { record, exchange, properties, properties_json, body }| {
            let line = Line {
                record: Some(record.id),
                received_at: Some(record.received_at),
                exchange,
                routing_key: record.routing_key,
                message_id: record.message_id,
                reason: record.reason,
                original_queue: record.original_queue,
                error: record.error,
                properties: serde_json::from_str(&properties_json).unwrap_or_default(),
                amqp_properties: Some(B64.encode(properties)),
                body: B64.encode(body),
            };
            serde_json::to_string(&line).expect("a line serialises")
        })
        .collect())
}

pub fn export_chunks(ids: &[i64]) -> impl Iterator<Item = &[i64]> {
    ids.chunks(EXPORT_CHUNK)
}

/// Reads JSON lines into messages ready to be kept; the first line that cannot be one is an
/// error naming it, and then nothing is imported. Blank lines are skipped.
pub fn parse_lines(text: &str) -> Result<Vec<Taken>, String> {
    let mut out = Vec::new();
    for batch in batches(text) {
        out.extend(batch?);
    }
    Ok(out)
}

/// Lines parsed and kept together, at most: an import's memory is its text and one batch,
/// whatever the number of lines (all of them parsed at once took 1.86 GB for 64 MiB).
const IMPORT_BATCH: usize = 200;
/// Bytes of line text per batch, at most (one longer line is a batch of its own).
const IMPORT_BATCH_BYTES: usize = 4 << 20;

/// The messages of `text`'s lines, a batch at a time (bounded by count and by bytes); a line
/// that cannot be a message ends them with an error naming it.
pub fn batches(text: &str) -> impl Iterator<Item = Result<Vec<Taken>, String>> + '_ {
    let mut lines = text.lines().enumerate().peekable();
    std::iter::from_fn(move || {
        let mut batch = Vec::new();
        let mut bytes = 0;
        while batch.len() < IMPORT_BATCH && (batch.is_empty() || bytes < IMPORT_BATCH_BYTES) {
            let Some((i, raw)) = lines.next() else { break };
            bytes += raw.len();
            match parse_line(i + 1, raw) {
                Ok(Some(taken)) => batch.push(taken),
                Ok(None) => {}
                Err(e) => {
                    // Nothing after a bad line: the import is refused whole.
                    lines.by_ref().for_each(drop);
                    return Some(Err(e));
                }
            }
        }
        (!batch.is_empty()).then_some(Ok(batch))
    })
}

/// What a valid import adds: its messages and their bytes (for the custody's budget), read
/// without keeping them, or the first line that cannot be a message.
pub fn check_lines(text: &str) -> Result<(usize, u64), String> {
    let (mut count, mut bytes) = (0, 0);
    for (i, raw) in text.lines().enumerate() {
        if let Some(taken) = parse_line(i + 1, raw)? {
            count += 1;
            bytes += taken.size();
        }
    }
    Ok((count, bytes))
}

/// The largest frame every RabbitMQ accepts unless its `frame_max` was lowered: an import does
/// not know which broker its records will be replayed to. A message's content header (its
/// properties, headers included) travels in one frame, so a larger one can never be published.
pub const DEFAULT_FRAME_MAX: usize = 131_072;
/// A content header frame's bytes beside the encoded properties: frame type, channel, size and
/// end octet (8), class, weight and body size (12).
const CONTENT_HEADER_OVERHEAD: usize = 20;

/// Line `number` as a message to keep (`None` for a blank line), or why it cannot be one,
/// naming the line and the field.
fn parse_line(number: usize, raw: &str) -> Result<Option<Taken>, String> {
    if raw.trim().is_empty() {
        return Ok(None);
    }
    let at = |e: String| format!("line {number}: {e}");
    let line: Line = serde_json::from_str(raw).map_err(|e| at(e.to_string()))?;
    for (field, value) in [("exchange", &line.exchange), ("routing_key", &line.routing_key)] {
        short_string(field, value).map_err(at)?;
    }
    let body = B64.decode(line.body.trim()).map_err(|e| at(format!("body: not base64: {e}")))?;
    let properties = properties_of(&line).map_err(at)?;
    fits_a_frame(&properties).map_err(at)?;
    let taken = custody::kept(0, (&line.exchange, &line.routing_key), false, &properties, body).map_err(at)?;
    Ok(Some(taken))
}

/// Refuses properties whose content header, as a replay publishes it (with the record's id),
/// would not fit in a frame.
fn fits_a_frame(properties: &BasicProperties) -> Result<(), String> {
    let replayed = custody::with_custody_id(properties.clone(), i64::MAX);
    let size = custody::encode_properties(&replayed)?.len() + CONTENT_HEADER_OVERHEAD;
    if size <= DEFAULT_FRAME_MAX {
        return Ok(());
    }
    let field = if properties.headers().is_some() { "properties.headers" } else { "properties" };
    Err(format!(
        "{field}: the message's content header would take {size} bytes; it must fit in one frame of \
         {DEFAULT_FRAME_MAX} bytes (the broker's default frame_max), or the message could never be published"
    ))
}

/// The exact properties when the readable ones still say the same, else the readable ones.
fn properties_of(line: &Line) -> Result<BasicProperties, String> {
    if let Some(encoded) = &line.amqp_properties {
        let bytes = B64.decode(encoded.trim()).map_err(|e| format!("amqp_properties: not base64: {e}"))?;
        let exact = decode_properties(&bytes).map_err(|e| format!("amqp_properties: {e}"))?;
        let shown = peeked_parts(("", ""), false, &exact, &[], 0).properties;
        if line.properties.is_empty() || shown == line.properties {
            return Ok(exact);
        }
    }
    properties_from_json(&line.properties)
}

#[cfg(test)]
mod tests {
    use lapin::types::{AMQPValue, FieldTable};

    use super::*;

    fn line_of(properties: &BasicProperties, body: &[u8]) -> Line {
        let shown = peeked_parts(("dlx", "rk"), false, properties, body, 0).properties;
        Line {
            exchange: "dlx".into(),
            routing_key: "rk".into(),
            properties: shown,
            amqp_properties: Some(B64.encode(custody::encode_properties(properties).unwrap())),
            body: B64.encode(body),
            ..Line::default()
        }
    }

    #[test]
    fn an_exported_line_imports_as_the_same_message_types_kept() {
        let mut headers = FieldTable::default();
        headers.insert("x-count".into(), AMQPValue::ShortInt(3));
        headers.insert("x-time".into(), AMQPValue::Timestamp(1_700_000_000));
        headers.insert("x-bytes".into(), AMQPValue::ByteArray(vec![0, 159].into()));
        let properties = BasicProperties::default().with_message_id("m-1".into()).with_headers(headers);
        let body = [0x80, 0xff, b'x'];
        let text = serde_json::to_string(&line_of(&properties, &body)).unwrap();
        let taken = parse_lines(&format!("\n{text}\n\n")).unwrap();
        assert_eq!(taken.len(), 1);
        assert_eq!(decode_properties(&taken[0].properties).unwrap(), properties, "exact, short int and all");
        assert_eq!(taken[0].body, body);
        assert_eq!((taken[0].exchange.as_str(), taken[0].routing_key.as_str()), ("dlx", "rk"));
    }

    #[test]
    fn an_edited_line_imports_as_edited() {
        let properties = BasicProperties::default().with_message_id("m-1".into());
        let mut line = line_of(&properties, b"{}");
        line.properties.insert("message_id".into(), "m-2".into());
        line.properties.insert("headers".into(), serde_json::json!({"x-n": 7, "x-r": 1.5, "x-t": {"a": [true, null]}}));
        let taken = parse_lines(&serde_json::to_string(&line).unwrap()).unwrap();
        let back = decode_properties(&taken[0].properties).unwrap();
        assert_eq!(back.message_id().as_ref().map(|s| s.as_str()), Some("m-2"), "the readable form wins once edited");
        let headers = back.headers().clone().unwrap();
        assert_eq!(headers.inner().get("x-n"), Some(&AMQPValue::LongLongInt(7)));
        assert_eq!(headers.inner().get("x-r"), Some(&AMQPValue::Double(1.5)));
        assert_eq!(taken[0].summary.message_id.as_deref(), Some("m-2"));
    }

    #[test]
    fn a_line_that_cannot_be_a_message_names_its_line() {
        let good = serde_json::to_string(&line_of(&BasicProperties::default(), b"x")).unwrap();
        for (bad, why) in [
            ("{", "line 2"),
            (r#"{"body": "%%%"}"#, "body: not base64"),
            (r#"{"body": "", "properties": {"priority": 300}}"#, "properties.priority"),
            (r#"{"body": "", "properties": {"colour": "red"}}"#, "not an AMQP property"),
            (r#"{"body": "", "properties": {"headers": {"n": 18446744073709551615}}}"#, "64-bit"),
            (r#"{"body": "", "amqp_properties": "/w=="}"#, "amqp_properties"),
        ] {
            let err = parse_lines(&format!("{good}\n{bad}")).map(|t| t.len()).unwrap_err();
            assert!(err.starts_with("line 2: ") && err.contains(why), "{bad}: {err}");
        }
        let deep =
            format!(r#"{{"body": "", "properties": {{"headers": {}1{}}}}}"#, r#"{"a":"#.repeat(40), "}".repeat(40));
        assert!(parse_lines(&deep).unwrap_err().contains("nested deeper"));
    }

    /// Issue 29: a message id over 255 bytes was stored as its length mod 256 characters, and
    /// headers too large for a frame were kept as a record no replay could ever publish.
    #[test]
    fn a_line_past_the_amqp_limits_is_refused_naming_its_line_and_field() {
        let good = serde_json::to_string(&line_of(&BasicProperties::default(), b"x")).unwrap();
        let long_id = format!(r#"{{"body": "", "properties": {{"message_id": "{}"}}}}"#, "m".repeat(300));
        let err = parse_lines(&format!("{good}\n{long_id}")).map(|t| t.len()).unwrap_err();
        assert!(err.starts_with("line 2: properties.message_id: 300 bytes"), "{err}");
        let big = format!(r#"{{"body": "", "properties": {{"headers": {{"x-trace": "{}"}}}}}}"#, "t".repeat(131_000));
        let err = parse_lines(&format!("{good}\n\n{big}")).map(|t| t.len()).unwrap_err();
        assert!(err.starts_with("line 3: properties.headers: ") && err.contains("131072"), "{err}");
        // The same through the exact form: what the readable one does not say.
        let mut headers = FieldTable::default();
        headers.insert("x-trace".into(), AMQPValue::LongString("t".repeat(131_000).into()));
        let line = line_of(&BasicProperties::default().with_headers(headers), b"x");
        let err = parse_lines(&serde_json::to_string(&line).unwrap()).map(|t| t.len()).unwrap_err();
        assert!(err.starts_with("line 1: properties.headers: "), "{err}");
        let route = format!(r#"{{"body": "", "routing_key": "{}"}}"#, "k".repeat(256));
        assert!(parse_lines(&route).unwrap_err().starts_with("line 1: routing_key: 256 bytes"));
        // Up to the limits is fine: a 255-byte id, and headers that leave room for the replay's.
        let at_limit = format!(r#"{{"body": "", "properties": {{"message_id": "{}"}}}}"#, "m".repeat(255));
        let taken = parse_lines(&at_limit).unwrap();
        let back = decode_properties(&taken[0].properties).unwrap();
        assert_eq!(back.message_id().as_ref().map(|s| s.as_str().len()), Some(255));
        let fits = format!(r#"{{"body": "", "properties": {{"headers": {{"x-trace": "{}"}}}}}}"#, "t".repeat(130_000));
        assert_eq!(parse_lines(&fits).unwrap().len(), 1);
    }

    #[test]
    fn batches_are_bounded_by_count_and_by_bytes() {
        let small = serde_json::to_string(&line_of(&BasicProperties::default(), b"x")).unwrap();
        let text = vec![small.as_str(); IMPORT_BATCH * 2 + 1].join("\n");
        let sizes: Vec<usize> = batches(&text).map(|b| b.unwrap().len()).collect();
        assert_eq!(sizes, vec![IMPORT_BATCH, IMPORT_BATCH, 1]);
        let large = serde_json::to_string(&line_of(&BasicProperties::default(), &vec![7; 1 << 20])).unwrap();
        let text = [large.as_str(); 8].join("\n");
        let sizes: Vec<usize> = batches(&text).map(|b| b.unwrap().len()).collect();
        // 1 MiB bodies are 1.4 MB lines in base64: three make a batch.
        assert_eq!(sizes, vec![3, 3, 2]);
        let (count, bytes) = check_lines(&text).unwrap();
        assert_eq!(count, 8);
        assert!((8 << 20..(8 << 20) + 100).contains(&bytes), "bodies and their few bytes of properties: {bytes}");
    }
}
