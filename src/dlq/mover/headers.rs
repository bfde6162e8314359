//! What a dead letter's headers say: the queue it last died in, the exchange and routing key it
//! was first published with, what its framework says of where it came from, how often a quorum
//! queue delivered it; and the properties of its copy, with the check that they fit a frame.

use lapin::message::Delivery;
use lapin::types::{AMQPValue, FieldTable, ShortString};
use lapin::BasicProperties;

use super::peeked::properties_json;
use crate::dlq::holding;

/// warren's own replay counter: 4.x no longer interprets an `x-death` header that a client
/// re-publishes (DOMAIN.md §4), so the number of replays is kept in a header of warren's own.
pub const REPLAY_HEADER: &str = "x-warren-replay-count";

fn headers(delivery: &Delivery) -> Option<&std::collections::BTreeMap<ShortString, AMQPValue>> {
    delivery.properties.headers().as_ref().map(FieldTable::inner)
}

fn as_text(value: &AMQPValue) -> Option<String> {
    match value {
        AMQPValue::LongString(s) => Some(String::from_utf8_lossy(s.as_bytes()).into_owned()),
        AMQPValue::ShortString(s) => Some(s.as_str().to_string()),
        _ => None,
    }
}

fn header_string(delivery: &Delivery, key: &str) -> Option<String> {
    as_text(headers(delivery)?.get(key)?)
}

fn header_count(delivery: &Delivery, key: &str) -> i64 {
    properties_count(&delivery.properties, key)
}

/// A quorum queue's count of a message's returns so far (`x-delivery-count`; absent before the
/// first).
pub(super) fn delivery_count(properties: &BasicProperties) -> i64 {
    properties_count(properties, "x-delivery-count")
}

fn properties_count(properties: &BasicProperties, key: &str) -> i64 {
    match properties.headers().as_ref().and_then(|h| h.inner().get(key)) {
        Some(AMQPValue::LongLongInt(n)) => *n,
        Some(AMQPValue::LongInt(n)) => i64::from(*n),
        Some(AMQPValue::ShortInt(n)) => i64::from(*n),
        Some(AMQPValue::LongUInt(n)) => i64::from(*n),
        _ => 0,
    }
}

/// The queue whose dead-lettering put the message where it is: `x-last-death-queue` (3.13+),
/// else the newest `x-death` entry (the array is newest first), else `x-first-death-queue`.
/// Not the first death: in a delayed-retry topology the first death is the expiry in the wait
/// queue, and a copy sent there stays for ever, its per-message TTL stripped (DOMAIN.md §8).
pub fn last_death_queue(delivery: &Delivery) -> Option<String> {
    let headers = headers(delivery)?;
    let newest_entry = || match headers.get("x-death")? {
        AMQPValue::FieldArray(deaths) => match deaths.as_slice().first()? {
            AMQPValue::FieldTable(t) => t.inner().get("queue").and_then(as_text),
            _ => None,
        },
        _ => None,
    };
    headers
        .get("x-last-death-queue")
        .and_then(as_text)
        .or_else(newest_entry)
        .or_else(|| header_string(delivery, "x-first-death-queue"))
        .filter(|q| !q.is_empty())
}

/// Where the application says a message it republished into an error queue came from
/// (`framework::origin`), for a message the broker never dead-lettered: an `x-death` wins.
pub(super) fn app_origin(delivery: &Delivery) -> Option<crate::dlq::framework::Origin> {
    if headers(delivery).is_some_and(|h| h.contains_key("x-death")) {
        return None;
    }
    let properties = properties_json(&delivery.properties);
    crate::dlq::framework::origin(properties.get("headers").and_then(serde_json::Value::as_object))
}

/// The exchange and routing key a dead-lettered message was first published with: the
/// `x-death` entry of its first-death queue holds the original routing keys. Public, like
/// `replay_properties`, for the fuzz targets: both read headers anyone can publish.
pub fn original_route(delivery: &Delivery) -> Option<(String, String)> {
    let first_queue = header_string(delivery, "x-first-death-queue")?;
    let AMQPValue::FieldArray(deaths) = headers(delivery)?.get("x-death")? else { return None };
    let death = deaths.as_slice().iter().find_map(|d| match d {
        AMQPValue::FieldTable(t) if t.inner().get("queue").and_then(as_text).as_deref() == Some(&first_queue) => {
            Some(t.inner())
        }
        _ => None,
    })?;
    let exchange = death.get("exchange").and_then(as_text)?;
    let AMQPValue::FieldArray(keys) = death.get("routing-keys")? else { return None };
    let key = keys.as_slice().first().and_then(as_text)?;
    Some((exchange, key))
}

/// Why the copy cannot be published, if its content header would not fit one frame of the
/// connection's `frame_max`: a content header is never split, and the broker closes the whole
/// connection over a larger frame. The original may be larger than that (the broker adds
/// `x-death` when it dead-letters a message and sends a frame over its own `frame_max`); the
/// copy leaves the broker's headers out, so most such messages fit again.
pub(super) fn copy_too_large(copy: &BasicProperties, frame_max: u32) -> Option<String> {
    let size = match lapin::content_header_frame_size(copy) {
        Ok(size) => size,
        Err(e) => return Some(format!("its properties cannot be encoded again ({e}); it stays in this queue")),
    };
    (size > frame_max as usize).then(|| {
        format!(
            "its headers take {size} bytes in a content-header frame, over the broker's frame_max of {frame_max} \
             bytes (a header is never split into frames): the broker would refuse the copy; it stays in this queue"
        )
    })
}

/// The properties of the copy: the original's, without the broker's bookkeeping headers, with
/// warren's replay counter raised.
pub fn replay_properties(delivery: &Delivery) -> BasicProperties {
    let mut headers = holding::copied_headers(&delivery.properties);
    // The counter comes with the message, so its publisher chose it: at the limit it stays there.
    let count = header_count(delivery, REPLAY_HEADER).saturating_add(1);
    headers.insert(ShortString::from(REPLAY_HEADER), AMQPValue::LongLongInt(count));
    delivery.properties.clone().with_headers(headers)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A crash of the `amqp_field_table` fuzz target: anyone who can publish to a DLQ chooses
    /// the replay counter, and raising `i64::MAX` overflowed (a panic in the mover's task).
    #[test]
    fn a_replay_counter_at_its_limit_stays_there() {
        let mut headers = FieldTable::default();
        headers.insert(REPLAY_HEADER.into(), AMQPValue::LongLongInt(i64::MAX));
        let copy = replay_properties(&with_headers(headers));
        let count = copy.headers().as_ref().and_then(|h| h.inner().get(REPLAY_HEADER).cloned());
        assert_eq!(count, Some(AMQPValue::LongLongInt(i64::MAX)));
    }

    fn with_headers(headers: FieldTable) -> Delivery {
        let mut delivery = Delivery::mock(1, "".into(), "final.dlq".into(), false, Vec::new());
        delivery.properties = BasicProperties::default().with_headers(headers);
        delivery
    }

    fn death(queue: &str, reason: &str) -> AMQPValue {
        let mut entry = FieldTable::default();
        entry.insert("queue".into(), AMQPValue::LongString(queue.into()));
        entry.insert("reason".into(), AMQPValue::LongString(reason.into()));
        AMQPValue::FieldTable(entry)
    }

    /// Issue 16 (6): in a delayed-retry topology the first death is the expiry in the wait
    /// queue; the requeue target is the work queue that rejected it last.
    #[test]
    fn a_message_goes_back_to_the_queue_it_last_died_in() {
        let mut headers = FieldTable::default();
        headers.insert("x-first-death-queue".into(), AMQPValue::LongString("work.wait".into()));
        headers.insert(
            "x-death".into(),
            AMQPValue::FieldArray(vec![death("work", "rejected"), death("work.wait", "expired")].into()),
        );
        assert_eq!(last_death_queue(&with_headers(headers.clone())).as_deref(), Some("work"));
        // 3.13+ names it outright.
        headers.insert("x-last-death-queue".into(), AMQPValue::LongString("work.v2".into()));
        assert_eq!(last_death_queue(&with_headers(headers)).as_deref(), Some("work.v2"));
        // Only the first-death header (a copy someone re-published without `x-death`).
        let mut headers = FieldTable::default();
        headers.insert("x-first-death-queue".into(), AMQPValue::LongString("work".into()));
        assert_eq!(last_death_queue(&with_headers(headers)).as_deref(), Some("work"));
        // Nothing says where: no target.
        let mut headers = FieldTable::default();
        headers.insert("x-death".into(), AMQPValue::LongString("not an array".into()));
        assert_eq!(last_death_queue(&with_headers(headers)), None);
    }
}
