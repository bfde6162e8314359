//! A message's properties and headers from their readable form (the JSON the browser, the
//! export and the edit form show) back to AMQP: for imports (`transfer`) and edits (`custody`).
//! Numbers become 64-bit integers or doubles, text long strings, objects tables.

use lapin::types::{AMQPValue, FieldArray, FieldTable, LongString, ShortString};
use lapin::BasicProperties;
use serde_json::{Map, Value};

/// AMQP short strings (most properties, exchange and routing key) hold at most this many bytes.
const SHORT_STRING_MAX: usize = 255;

/// Refuses `value` for `field` when it is longer than a short string holds.
pub fn short_string(field: &str, value: &str) -> Result<(), String> {
    if value.len() > SHORT_STRING_MAX {
        return Err(format!("{field}: {} bytes; an AMQP short string holds at most {SHORT_STRING_MAX}", value.len()));
    }
    Ok(())
}

/// Properties from their readable form (as the browser and the export show them).
pub fn properties_from_json(map: &Map<String, Value>) -> Result<BasicProperties, String> {
    let mut p = BasicProperties::default();
    for (key, value) in map {
        let text = || {
            value.as_str().ok_or_else(|| format!("properties.{key}: a string")).and_then(|s| {
                short_string(&format!("properties.{key}"), s)?;
                Ok(ShortString::from(s.to_string()))
            })
        };
        let number = |max: u64| {
            value.as_u64().filter(|n| *n <= max).ok_or_else(|| format!("properties.{key}: a whole number up to {max}"))
        };
        p = match key.as_str() {
            "content_type" => p.with_content_type(text()?),
            "content_encoding" => p.with_content_encoding(text()?),
            "delivery_mode" => p.with_delivery_mode(number(255)? as u8),
            "priority" => p.with_priority(number(255)? as u8),
            "correlation_id" => p.with_correlation_id(text()?),
            "reply_to" => p.with_reply_to(text()?),
            "expiration" => p.with_expiration(text()?),
            "message_id" => p.with_message_id(text()?),
            "timestamp" => p.with_timestamp(number(u64::MAX)?),
            "type" => p.with_type(text()?),
            "user_id" => p.with_user_id(text()?),
            "app_id" => p.with_app_id(text()?),
            "headers" => p.with_headers(table(value, "properties.headers", 0)?),
            other => return Err(format!("properties.{other}: not an AMQP property")),
        };
    }
    Ok(p)
}

/// A message's headers after an edit of their readable form (`new`): a header whose readable
/// value did not change keeps its AMQP value and type (`old`, shown as `old_shown`); a changed
/// or added one is read as an import reads it.
pub fn headers_edited(
    old: &FieldTable,
    old_shown: &Map<String, Value>,
    new: &Map<String, Value>,
) -> Result<FieldTable, String> {
    let mut table = FieldTable::default();
    for (k, v) in new {
        if k.len() > 255 {
            return Err(format!("headers: {k:?} is longer than 255 bytes"));
        }
        let kept = old_shown.get(k).filter(|shown| *shown == v).and_then(|_| old.inner().get(k.as_str()));
        let value = match kept {
            Some(value) => value.clone(),
            None => amqp_value(v, &format!("headers.{k}"), 1)?,
        };
        table.insert(k.clone().into(), value);
    }
    Ok(table)
}

/// Tables nested deeper than this are refused.
const MAX_DEPTH: usize = 32;

fn table(value: &Value, at: &str, depth: usize) -> Result<FieldTable, String> {
    let Value::Object(map) = value else { return Err(format!("{at}: an object")) };
    let mut table = FieldTable::default();
    for (k, v) in map {
        if k.len() > 255 {
            return Err(format!("{at}: a name longer than 255 bytes"));
        }
        table.insert(k.clone().into(), amqp_value(v, &format!("{at}.{k}"), depth + 1)?);
    }
    Ok(table)
}

fn amqp_value(value: &Value, at: &str, depth: usize) -> Result<AMQPValue, String> {
    if depth > MAX_DEPTH {
        return Err(format!("{at}: nested deeper than {MAX_DEPTH}"));
    }
    Ok(match value {
        Value::Null => AMQPValue::Void,
        Value::Bool(b) => AMQPValue::Boolean(*b),
        Value::String(s) => AMQPValue::LongString(LongString::from(s.as_bytes().to_vec())),
        Value::Number(n) => match (n.as_i64(), n.as_f64()) {
            (Some(i), _) => AMQPValue::LongLongInt(i),
            (None, Some(f)) if n.is_f64() => AMQPValue::Double(f),
            _ => return Err(format!("{at}: {n} does not fit a 64-bit signed integer")),
        },
        Value::Array(items) => {
            let mut array = FieldArray::default();
            for (i, item) in items.iter().enumerate() {
                array.push(amqp_value(item, &format!("{at}[{i}]"), depth + 1)?);
            }
            AMQPValue::FieldArray(array)
        }
        Value::Object(_) => AMQPValue::FieldTable(table(value, at, depth)?),
    })
}
