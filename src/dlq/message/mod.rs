//! What a dead letter says: its dead-letter headers decoded (where and why it died, how
//! often), the filter over them, and how its payload is shown. Pure: used by the browser over
//! a snapshot and by the mover over a whole queue.
//!
//! One file per idea; the imports between them point down this list:
//! - `payload`: a payload's bytes, and how it is shown (JSON in its own key order, text, hex).
//! - `summary`: a message's dead-letter facts (`summarize`), its identity and the token a
//!   snapshot shows for it, its error as one line and its group.
//! - `filter`: the filter over summaries, its form fields and checks, and its JSON paths.
//!
//! Everything other code names is re-exported here, as `dlq::message::...`.

mod filter;
mod payload;
mod summary;

pub use crate::dlq::expression::Expression;
pub use filter::{json_text, parse_json_path, Filter, PathStep, FILTER_FIELD_MAX_BYTES};
pub use payload::{payload, payload_bytes, render_payload};
pub use summary::{
    error_group, error_line, identity, summarize, Death, IdentityKey, SnapshotMessage, BROKER_BOOKKEEPING_HEADERS,
    REPUBLISHED,
};

/// What the tests of `summary` and `filter` both read.
#[cfg(test)]
mod fixtures {
    use serde_json::{Map, Value};

    use crate::broker::management::PeekedMessage;

    /// A message with these headers (none when null) and payload, as the management API gives it.
    pub(super) fn peeked(headers: Value, payload: &str) -> PeekedMessage {
        let mut properties = Map::new();
        if !headers.is_null() {
            properties.insert("headers".to_string(), headers);
        }
        PeekedMessage {
            properties,
            payload: payload.to_string(),
            payload_encoding: "string".to_string(),
            payload_bytes: payload.len() as u64,
            exchange: String::new(),
            routing_key: String::new(),
            redelivered: false,
        }
    }
}
