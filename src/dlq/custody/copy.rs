//! What a replayed copy carries: what was taken in, the AMQP-encoded properties (header types
//! kept) and the body, with one header added: `x-warren-custody-id`, by which a returned copy is
//! matched to its record (lapin hands a return to whichever confirmation comes next).

use lapin::types::{AMQPValue, FieldTable, LongString};
use lapin::BasicProperties;

use crate::dlq::message;

/// The header a replayed copy carries: its record's id.
pub const CUSTODY_ID_HEADER: &str = "x-warren-custody-id";

/// The AMQP content-header encoding of `properties`: what a replay publishes again, types kept.
pub fn encode_properties(properties: &BasicProperties) -> Result<Vec<u8>, String> {
    cookie_factory::gen(lapin::protocol::basic::gen_properties(properties), Vec::new())
        .map(|(bytes, _)| bytes)
        .map_err(|e| format!("its properties cannot be encoded again: {e:?}"))
}

pub fn decode_properties(bytes: &[u8]) -> Result<BasicProperties, String> {
    lapin::protocol::basic::parse_properties(bytes)
        .map(|(_, properties)| properties)
        .map_err(|e| format!("stored properties do not parse: {e}"))
}

/// The copy's properties: the original's, without the broker's bookkeeping of the DLQ (a
/// quorum DLQ's `x-delivery-count`), with the record's id.
pub(in crate::dlq) fn with_custody_id(properties: BasicProperties, id: i64) -> BasicProperties {
    let mut headers = properties.headers().clone().unwrap_or_default();
    let mut kept = FieldTable::default();
    for (key, value) in headers.inner() {
        if !message::BROKER_BOOKKEEPING_HEADERS.contains(&key.as_str()) {
            kept.insert(key.clone(), value.clone());
        }
    }
    headers = kept;
    headers.insert(CUSTODY_ID_HEADER.into(), AMQPValue::LongString(LongString::from(id.to_string())));
    properties.with_headers(headers)
}

#[cfg(test)]
fn custody_id(properties: &BasicProperties) -> Option<i64> {
    match properties.headers().as_ref()?.inner().get(CUSTODY_ID_HEADER)? {
        AMQPValue::LongString(s) => s.to_string().parse().ok(),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn properties_round_trip_with_their_types() {
        let mut headers = FieldTable::default();
        headers.insert("x-count".into(), AMQPValue::LongLongInt(3));
        headers.insert("x-time".into(), AMQPValue::Timestamp(1_700_000_000));
        headers.insert("x-flag".into(), AMQPValue::Boolean(true));
        headers.insert("x-bytes".into(), AMQPValue::ByteArray(vec![0, 159, 146, 150].into()));
        let properties = BasicProperties::default()
            .with_message_id("m-1".into())
            .with_content_type("application/json".into())
            .with_delivery_mode(2)
            .with_timestamp(1_700_000_001)
            .with_headers(headers);
        let back = decode_properties(&encode_properties(&properties).unwrap()).unwrap();
        assert_eq!(back, properties);
        assert!(decode_properties(b"\xff").is_err(), "garbage is an error, not a panic");
    }

    #[test]
    fn a_copy_carries_its_record_id() {
        let p = with_custody_id(BasicProperties::default(), 42);
        assert_eq!(custody_id(&p), Some(42));
        assert_eq!(custody_id(&BasicProperties::default()), None);
    }
}
