//! AMQP field tables, the message headers anyone who can publish to a queue writes, as lapin
//! reads them off the wire (`amq-protocol-types`), and as warren uses them: the DLQ browser's
//! JSON of the headers, the dead-letter facts decoded from `x-death` and friends, the header
//! search of a filter, the copy a requeue publishes (original route, replay counter), and the
//! properties custody stores and a replay decodes again.
#![no_main]

use lapin::message::Delivery;
use lapin::types::parsing::parse_field_table;
use lapin::BasicProperties;
use libfuzzer_sys::fuzz_target;
use warren::dlq::browse;
use warren::dlq::message::{self, Filter};

fuzz_target!(|data: &[u8]| {
    let Ok((_, headers)) = parse_field_table(data) else { return };
    let mut delivery = Delivery::mock(1, "".into(), "orders.dlq".into(), false, b"{}".to_vec());
    delivery.properties = BasicProperties::default().with_headers(headers);
    let peeked = warren::dlq::peeked(&delivery, browse::PAYLOAD_LIMIT);
    // The identity a selection names, from the same properties as the snapshot's.
    let identity = message::identity(&delivery.data, &peeked.properties);
    let summary = message::summarize(1, identity, peeked);
    Filter::with_text("x-death").matches(&summary);
    warren::dlq::original_route(&delivery);
    warren::dlq::replay_properties(&delivery);
    Filter::with_error("error").matches(&summary);
    if let Ok(stored) = warren::dlq::custody::encode_properties(&delivery.properties) {
        let _ = warren::dlq::custody::decode_properties(&stored);
    }
});
