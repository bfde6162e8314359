//! A delivery as a snapshot keeps it: at most so many payload bytes, and its properties as the
//! management API names them, in JSON (nesting bounded); and its identity (`message::identity`),
//! the same for the snapshot and the move.

use lapin::message::Delivery;
use lapin::types::{AMQPValue, FieldTable, ShortString};
use lapin::BasicProperties;

/// A delivery's identity (`message::identity`), the same for the snapshot and the move.
pub(super) fn delivery_identity(delivery: &Delivery) -> String {
    crate::dlq::message::identity(&delivery.data, &properties_json(&delivery.properties))
}

/// A delivery as the DLQ browser keeps it: at most `payload_limit` payload bytes (text, or
/// base64 when they are not UTF-8) and the properties as JSON. Public for the fuzz targets,
/// which feed it properties and payloads read from arbitrary bytes.
pub fn peeked(delivery: &Delivery, payload_limit: usize) -> crate::broker::management::PeekedMessage {
    let route = (delivery.exchange.as_str(), delivery.routing_key.as_str());
    peeked_parts(route, delivery.redelivered, &delivery.properties, &delivery.data, payload_limit)
}

/// As `peeked`, from a message's parts: (exchange, routing key), whether the broker delivered it
/// before, its properties and its payload.
pub fn peeked_parts(
    (exchange, routing_key): (&str, &str),
    redelivered: bool,
    properties: &BasicProperties,
    data: &[u8],
    payload_limit: usize,
) -> crate::broker::management::PeekedMessage {
    use base64::Engine;
    let kept = &data[..data.len().min(payload_limit)];
    let (payload_encoding, payload) = match std::str::from_utf8(kept) {
        Ok(text) => ("string", text.to_string()),
        // A cut can split a UTF-8 sequence: keep what is valid if the rest is only that cut.
        Err(e) if e.error_len().is_none() && e.valid_up_to() + 4 > kept.len() => {
            ("string", String::from_utf8_lossy(&kept[..e.valid_up_to()]).into_owned())
        }
        Err(_) => ("base64", base64::engine::general_purpose::STANDARD.encode(kept)),
    };
    crate::broker::management::PeekedMessage {
        exchange: exchange.to_string(),
        routing_key: routing_key.to_string(),
        redelivered,
        payload_bytes: data.len() as u64,
        payload_encoding: payload_encoding.to_string(),
        payload,
        properties: properties_json(properties),
    }
}

/// Message properties as JSON, named as the management API names them.
pub(super) fn properties_json(p: &BasicProperties) -> serde_json::Map<String, serde_json::Value> {
    use serde_json::Value;
    let mut map = serde_json::Map::new();
    let mut put = |key: &str, value: Option<Value>| {
        if let Some(v) = value {
            map.insert(key.to_string(), v);
        }
    };
    let s = |v: &Option<ShortString>| v.as_ref().map(|s| Value::String(s.as_str().to_string()));
    put("content_type", s(p.content_type()));
    put("content_encoding", s(p.content_encoding()));
    put("delivery_mode", p.delivery_mode().map(Value::from));
    put("priority", p.priority().map(Value::from));
    put("correlation_id", s(p.correlation_id()));
    put("reply_to", s(p.reply_to()));
    put("expiration", s(p.expiration()));
    put("message_id", s(p.message_id()));
    put("timestamp", p.timestamp().map(Value::from));
    put("type", s(p.kind()));
    put("user_id", s(p.user_id()));
    put("app_id", s(p.app_id()));
    put("headers", p.headers().as_ref().map(|h| table_json(h, 0)));
    map
}

/// Nested tables deeper than this are shown as a marker, not recursed into.
const MAX_DEPTH: usize = 32;

pub(super) fn table_json(table: &FieldTable, depth: usize) -> serde_json::Value {
    if depth > MAX_DEPTH {
        return serde_json::Value::String("(nested too deep to show)".into());
    }
    serde_json::Value::Object(
        table.inner().iter().map(|(k, v)| (k.as_str().to_string(), value_json(v, depth + 1))).collect(),
    )
}

fn value_json(v: &AMQPValue, depth: usize) -> serde_json::Value {
    use serde_json::Value;
    match v {
        AMQPValue::Boolean(b) => Value::Bool(*b),
        AMQPValue::ShortShortInt(n) => Value::from(*n),
        AMQPValue::ShortShortUInt(n) => Value::from(*n),
        AMQPValue::ShortInt(n) => Value::from(*n),
        AMQPValue::ShortUInt(n) => Value::from(*n),
        AMQPValue::LongInt(n) => Value::from(*n),
        AMQPValue::LongUInt(n) => Value::from(*n),
        AMQPValue::LongLongInt(n) => Value::from(*n),
        AMQPValue::Float(f) => Value::from(*f),
        AMQPValue::Double(f) => Value::from(*f),
        AMQPValue::DecimalValue(d) => Value::String(format!("{d:?}")),
        AMQPValue::ShortString(s) => Value::String(s.as_str().to_string()),
        AMQPValue::LongString(s) => Value::String(String::from_utf8_lossy(s.as_bytes()).into_owned()),
        AMQPValue::FieldArray(a) => {
            if depth > MAX_DEPTH {
                return Value::String("(nested too deep to show)".into());
            }
            Value::Array(a.as_slice().iter().map(|v| value_json(v, depth + 1)).collect())
        }
        AMQPValue::Timestamp(t) => Value::from(*t),
        AMQPValue::FieldTable(t) => table_json(t, depth),
        AMQPValue::ByteArray(b) => Value::String(format!("{:?}", b.as_slice())),
        AMQPValue::Void => Value::Null,
    }
}
