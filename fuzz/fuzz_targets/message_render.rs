//! A delivered message as the DLQ browser shows it: its properties as lapin reads them off the
//! wire (a content header's property flags and values), its payload kept up to a limit (text,
//! or base64 when the cut or the bytes are not UTF-8), the dead-letter facts, the payload shown
//! as pretty JSON, text or a hex dump, and a filter's text search over payload and headers.
//!
//! Input: one byte for the payload limit (below 128: that many bytes, so that cuts through
//! UTF-8 sequences are tried; else the browser's own limit), the encoded properties, the payload.
#![no_main]

use lapin::message::Delivery;
use lapin::protocol::basic::parse_properties;
use libfuzzer_sys::fuzz_target;
use warren::dlq::browse;
use warren::dlq::message::{self, Filter};

fuzz_target!(|data: &[u8]| {
    let Some((&limit, rest)) = data.split_first() else { return };
    let limit = if limit < 128 { usize::from(limit) } else { browse::PAYLOAD_LIMIT };
    let Ok((payload, properties)) = parse_properties(rest) else { return };
    let mut delivery = Delivery::mock(1, "orders".into(), "eu.created".into(), true, payload.to_vec());
    delivery.properties = properties;
    let message = warren::dlq::peeked(&delivery, limit);
    assert!(message.payload_bytes as usize == payload.len());
    let summary = message::summarize(1, String::new(), message);
    let kept = message::payload_bytes(&summary.message);
    assert!(payload.starts_with(&kept), "the kept payload is a prefix of the delivered one");
    let (kind, shown) = message::render_payload(&summary.message);
    match kind {
        "json" => assert!(serde_json::from_str::<serde_json::Value>(&shown).is_ok(), "pretty JSON parses back"),
        "text" => assert_eq!(shown.as_bytes(), &kept[..], "text is shown as it is"),
        _ => {}
    }
    let needle = String::from_utf8_lossy(&kept[..kept.len().min(8)]).into_owned();
    Filter::with_text(&needle).matches(&summary);
    // The same bytes as a JSON path, a header name, a header value and a regular expression:
    // refused or matching, never a panic.
    for field in ["json_path", "header", "regex"] {
        let mut filter = Filter::default();
        filter.set_form_field(&format!("filter_{field}"), needle.clone());
        filter.set_form_field("filter_header_value", needle.clone());
        let _ = filter.check();
        filter.matches(&summary);
    }
});
