//! JSON request bodies of the API, as its handlers parse them (`web::alerts::api::parse`, axum's
//! `Json`: both `serde_json`), and the checks that run before any I/O: an alert rule's validation,
//! its scope over a queue and the description it would send; a move's plan check, as for a quorum
//! queue with a delivery limit and for a classic queue; a silence and what it covers.
#![no_main]

use std::sync::OnceLock;

use chrono::{DateTime, Utc};
use libfuzzer_sys::fuzz_target;
use warren::alerts::store::Silence;
use warren::alerts::{AlertKey, Rule};
use warren::dlq::jobs::{Choice, MoveRequest};
use warren::dlq::{Plan, Selection};
use warren::metrics::QueueView;
use warren::web::input::TakeRequest;

fuzz_target!(|body: &[u8]| {
    if let Ok(rule) = serde_json::from_slice::<Rule>(body) {
        if rule.validate().is_empty() {
            // As the preview and the evaluator use a valid rule.
            let key = AlertKey::of(queue());
            rule.applies_to(queue());
            rule.holds(12.0);
            rule.describe(&key, Some(12.0));
            rule.describe(&AlertKey::broker("local"), None);
        }
    }
    if let Ok(request) = serde_json::from_slice::<MoveRequest>(body) {
        request.action();
        // Without a snapshot, single messages name nothing.
        let _ = request.selection.resolve(None);
    }
    // The mover's own selection (single messages resolved from a snapshot), as a plan checks it.
    if let Ok(selection) = serde_json::from_slice::<Selection>(body) {
        for (delivery_limit, quorum) in [(Some(20), true), (None, false)] {
            let plan = Plan {
                selection: selection.clone(),
                target: Default::default(),
                delivery_limit,
                quorum,
                accept_drop_head: false,
                stranding: Default::default(),
            };
            let _ = plan.check();
        }
    }
    // The delete action's body is `{"selection": ...}`.
    let _ = serde_json::from_slice::<Choice>(body);
    if let Ok(silence) = serde_json::from_slice::<Silence>(body) {
        let now = DateTime::<Utc>::from_timestamp(1_700_000_000, 0).unwrap();
        silence.covers("orders-backlog", &AlertKey::of(queue()), now);
    }
    let _ = serde_json::from_slice::<AlertKey>(body);
    let _ = serde_json::from_slice::<TakeRequest>(body);
});

/// A queue for scopes to match: `orders.eu` in vhost `/` on broker `local`.
fn queue() -> &'static QueueView {
    static QUEUE: OnceLock<QueueView> = OnceLock::new();
    QUEUE.get_or_init(|| {
        let raw = serde_json::from_str(r#"{"name":"orders.eu","vhost":"/","type":"quorum","messages":12}"#).unwrap();
        warren::metrics::queue_view(
            "local",
            raw,
            true,
            None,
            DateTime::<Utc>::from_timestamp(1_700_000_000, 0).unwrap(),
        )
    })
}
