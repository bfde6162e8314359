//! What a dead letter says: its dead-letter headers decoded (where and why it died, how often),
//! what its framework says (its id, task, error), which message it is (`identity`, and the
//! keyed token a snapshot shows for it), and the error it carries as one line and its group.

use serde::Serialize;
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use super::payload::payload;
use crate::broker::management::PeekedMessage;
use crate::dlq::framework::{self, App, AppError, Origin};

/// One message of a snapshot, with its dead-letter facts decoded.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct SnapshotMessage {
    pub position: usize,
    /// What a selection names (`IdentityKey::token` of `identity`), so that a move takes the
    /// messages the user saw, wherever they are in the queue by then. Keyed, so that it says
    /// nothing about the content to a reader below the payload role (issue 29).
    pub fingerprint: String,
    /// Which message this is (`identity`): what the move compares with what it reads. Never
    /// shown: from a digest of the content, anyone could test a guessed payload against it.
    #[serde(skip)]
    pub identity: String,
    /// The `message_id` property, or else the id a framework's format holds (`app`).
    pub message_id: Option<String>,
    /// Where `message_id` was read, in words.
    pub message_id_from: Option<&'static str>,
    /// What a well-known framework's format says of it (task, attempt, arguments).
    pub app: Option<App>,
    /// Why the application gave up on it, where its framework recorded that in the headers.
    pub error: Option<AppError>,
    /// The queue whose dead-lettering brought it here, and why: the newest death (see
    /// `dlq::last_death_queue`), where a requeue sends it. A copy an application published into
    /// its error queue has no death: the queue its framework recorded (`app_origin`), and the
    /// reason `republished by the application`.
    pub original_queue: Option<String>,
    pub reason: Option<String>,
    /// Where the application says it came from, on a copy it republished itself.
    pub app_origin: Option<Origin>,
    /// Its deaths oldest first, one per (queue, reason) as `x-death` keeps them: the path it
    /// took (work -> wait -> work -> here), each step with how often.
    pub deaths: Vec<Death>,
    /// Where and why it died first (`x-first-death-*`): in a retry topology, a wait queue.
    pub first_death_queue: Option<String>,
    pub first_death_reason: Option<String>,
    /// Sum of the `count` of every `x-death` entry.
    pub death_count: i64,
    /// Unix seconds of the first death (`x-death` entry of the first-death queue).
    #[serde(flatten, serialize_with = "crate::times::first_death_at")]
    #[schema(schema_with = crate::times::schema::first_death_at)]
    pub first_death_at: Option<i64>,
    pub routing_key: String,
    pub exchange: String,
    pub payload_bytes: u64,
    pub content_type: Option<String>,
    /// Quorum queues: how often it was delivered before (`x-delivery-count`).
    pub delivery_count: Option<i64>,
    /// Read at the queue's delivery limit, so not given back (the broker would have dropped
    /// it): the holding queue it is in now (`dlq::holding`).
    pub held_in: Option<String>,
    pub message: PeekedMessage,
}

/// One `x-death` entry.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct Death {
    pub queue: String,
    pub reason: String,
    pub count: i64,
    /// Unix seconds of the first death for this (queue, reason).
    #[serde(flatten, serialize_with = "crate::times::time")]
    #[schema(schema_with = crate::times::schema::time)]
    pub time: Option<i64>,
}

/// The reason of a copy an application published into an error queue itself.
pub const REPUBLISHED: &str = "republished by the application";

fn headers(m: &PeekedMessage) -> Option<&Map<String, Value>> {
    m.properties.get("headers").and_then(Value::as_object)
}

fn text(v: Option<&Value>) -> Option<String> {
    v.and_then(Value::as_str).map(str::to_string)
}

/// Decodes the dead-letter headers of one message.
pub fn summarize(position: usize, identity: String, message: PeekedMessage) -> SnapshotMessage {
    let h = headers(&message);
    let deaths: Vec<&Map<String, Value>> = h
        .and_then(|h| h.get("x-death"))
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_object).collect())
        .unwrap_or_default();
    let header = |name: &str| text(h.and_then(|h| h.get(name))).filter(|s| !s.is_empty());
    // `x-death` is newest first; `x-last-death-*` exist from 3.13 (DOMAIN.md §4).
    let original_queue = header("x-last-death-queue")
        .or_else(|| deaths.first().and_then(|d| text(d.get("queue"))))
        .or_else(|| header("x-first-death-queue"))
        .filter(|s| !s.is_empty());
    let reason = header("x-last-death-reason")
        .or_else(|| deaths.first().and_then(|d| text(d.get("reason"))))
        .or_else(|| header("x-first-death-reason"));
    let error = framework::error(h);
    // The body as it is already held (borrowed; decoded only where the broker gave base64), read
    // once for a framework's envelope and, on a dramatiq message without an error header, for
    // the traceback it keeps in its body. A copy of every body here broke custody's memory
    // ceiling before.
    let (app, error) = {
        let body = payload(&message);
        let app = framework::recognise(h, &body);
        let error = match error {
            None if app.as_ref().is_some_and(|a| a.framework == "dramatiq") => framework::body_error(&body),
            error => error,
        };
        (app, error)
    };
    // Only a message the broker never dead-lettered is read for the application's origin: the
    // broker's record of a death wins over headers anyone can set.
    let app_origin = if original_queue.is_none() && reason.is_none() { framework::origin(h) } else { None };
    let (original_queue, reason) = match &app_origin {
        Some(o) => (o.queue.clone(), Some(REPUBLISHED.to_string())),
        None if original_queue.is_none() && reason.is_none() && error.is_some() => {
            (None, Some(REPUBLISHED.to_string()))
        }
        None => (original_queue, reason),
    };
    let path: Vec<Death> = deaths
        .iter()
        .rev()
        .map(|d| Death {
            queue: text(d.get("queue")).unwrap_or_default(),
            reason: text(d.get("reason")).unwrap_or_default(),
            count: d.get("count").and_then(Value::as_i64).unwrap_or(0),
            time: d.get("time").and_then(Value::as_i64),
        })
        .collect();
    let first_death_queue = header("x-first-death-queue").or_else(|| deaths.last().and_then(|d| text(d.get("queue"))));
    let first_death_reason =
        header("x-first-death-reason").or_else(|| deaths.last().and_then(|d| text(d.get("reason"))));
    let first = deaths.iter().find(|d| text(d.get("queue")) == first_death_queue).or(deaths.last());
    let (message_id, message_id_from) = match text(message.properties.get("message_id")).filter(|s| !s.is_empty()) {
        Some(id) => (Some(id), Some("the message_id property")),
        None => match app.as_ref().and_then(|a| a.id.clone().map(|id| (id, a.id_from))) {
            Some((id, from)) => (Some(id), from),
            None => (None, None),
        },
    };
    SnapshotMessage {
        position,
        fingerprint: String::new(),
        identity,
        message_id,
        message_id_from,
        app,
        error,
        app_origin,
        deaths: path,
        // The counts come with the message, so anyone who can publish chooses them: saturate.
        death_count: deaths
            .iter()
            .filter_map(|d| d.get("count").and_then(Value::as_i64))
            .fold(0i64, i64::saturating_add),
        first_death_at: first.and_then(|d| d.get("time")).and_then(Value::as_i64),
        original_queue,
        reason,
        first_death_queue,
        first_death_reason,
        routing_key: message.routing_key.clone(),
        exchange: message.exchange.clone(),
        payload_bytes: message.payload_bytes,
        content_type: text(message.properties.get("content_type")),
        delivery_count: h.and_then(|h| h.get("x-delivery-count")).and_then(Value::as_i64),
        held_in: None,
        message,
    }
}

/// Headers the broker keeps for its own bookkeeping of one queue. They are not part of which
/// message it is (`identity`: a quorum queue raises `x-delivery-count` at every read before
/// 4.3 and `x-acquired-count` at every read from 4.3 on, DOMAIN.md §10), and they must not
/// travel with a copy: `x-delivery-count` (DOMAIN.md §8) would make a consumer that reads it for
/// its own retry decisions see deliveries the copy never had. The `x-death` family stays: it is
/// the message's history, and applications read it.
pub const BROKER_BOOKKEEPING_HEADERS: &[&str] = &["x-delivery-count", "x-acquired-count"];

/// Which message this is (issue 16, must-have 1): a digest of its whole payload and of its
/// properties as the mover shows them (message id, timestamps, every header, and so its death
/// history), leaving out what the broker changes between two reads of it
/// (`BROKER_BOOKKEEPING_HEADERS`).
/// Two messages alike in all of that are alike to the user too; a selection says how many of
/// each it wants. Internal: what users see is its `IdentityKey::token`.
pub fn identity(payload: &[u8], properties: &Map<String, Value>) -> String {
    let mut properties = properties.clone();
    if let Some(Value::Object(headers)) = properties.get_mut("headers") {
        for key in BROKER_BOOKKEEPING_HEADERS {
            headers.remove(*key);
        }
        // A message first read without headers gets a table holding only the count once given back.
        if headers.is_empty() {
            properties.remove("headers");
        }
    }
    let mut digest = Sha256::new();
    digest.update((payload.len() as u64).to_be_bytes());
    digest.update(payload);
    digest.update(Value::Object(properties).to_string().as_bytes());
    digest.finalize()[..16].iter().map(|b| format!("{b:02x}")).collect()
}

/// The key of the tokens a snapshot shows for its messages' identities. A bare digest of the
/// content would let a reader below the payload role confirm a guessed payload offline (a card
/// number from a small set, say); a token keyed with a secret of this installation says
/// nothing about the content. Kept in the database (`instance_keys`), so that a snapshot's
/// tokens survive a restart and a page opened before it still selects the same messages.
#[derive(Clone, Copy)]
pub struct IdentityKey([u8; 32]);

impl IdentityKey {
    pub fn new(key: [u8; 32]) -> IdentityKey {
        IdentityKey(key)
    }

    /// A key for this process only (tests, and until the stored one is read at start).
    pub fn random() -> IdentityKey {
        use rand::RngCore;
        let mut key = [0u8; 32];
        rand::rngs::OsRng.fill_bytes(&mut key);
        IdentityKey(key)
    }

    /// What a snapshot shows for the message with `identity`: HMAC-SHA256 under the key, 128
    /// bits in hex.
    pub fn token(&self, identity: &str) -> String {
        use hmac::Mac;
        let mut mac = hmac::Hmac::<Sha256>::new_from_slice(&self.0).expect("HMAC takes any key length");
        mac.update(identity.as_bytes());
        mac.finalize().into_bytes()[..16].iter().map(|b| format!("{b:02x}")).collect()
    }
}

impl std::fmt::Debug for IdentityKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("IdentityKey(..)")
    }
}

/// The error an application recorded on a message, as one line: `Type: message`.
pub fn error_line(m: &SnapshotMessage) -> Option<String> {
    let e = m.error.as_ref()?;
    match (&e.kind, &e.message) {
        (Some(kind), Some(message)) => Some(format!("{kind}: {message}")),
        (Some(one), None) | (None, Some(one)) => Some(one.clone()),
        (None, None) => None,
    }
}

/// The group of the error an application recorded: `framework::error_group` of its
/// `error_line`, what "By error" counts and the `error_group` filter matches.
pub fn error_group(m: &SnapshotMessage) -> Option<String> {
    error_line(m).map(|line| framework::error_group(&line))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dlq::message::fixtures::peeked;
    use crate::dlq::message::payload::render_payload;

    #[test]
    fn decodes_recorded_dead_letter_headers() {
        for (name, queue) in
            [("get-dead-lettered-classic.json", "lab.work.c"), ("get-dead-lettered-quorum.json", "lab.work.q")]
        {
            let path = format!("{}/tests/fixtures/rabbitmq-3.10.8/{name}", env!("CARGO_MANIFEST_DIR"));
            let message: PeekedMessage = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
            let s = summarize(1, String::new(), message);
            assert_eq!(s.original_queue.as_deref(), Some(queue), "{name}");
            assert_eq!(s.reason.as_deref(), Some("rejected"));
            assert_eq!(s.death_count, 1);
            assert!(s.first_death_at.is_some());
            assert_eq!(render_payload(&s.message).0, "json");
        }
    }

    /// Issue 17, case 4: a Celery message has no message_id property; its id is in a header.
    #[test]
    fn a_frameworks_id_stands_in_for_a_missing_message_id() {
        let message = |properties: Value, payload: &str| PeekedMessage {
            properties: properties.as_object().unwrap().clone(),
            payload: payload.to_string(),
            payload_encoding: "string".to_string(),
            payload_bytes: payload.len() as u64,
            exchange: String::new(),
            routing_key: String::new(),
            redelivered: false,
        };
        let celery = serde_json::json!({"correlation_id": "c-1", "headers": {"id": "c-1", "task": "t.charge"}});
        let s = summarize(1, String::new(), message(celery, "[[42], {}, {}]"));
        assert_eq!((s.message_id.as_deref(), s.message_id_from), (Some("c-1"), Some("the Celery id header")));
        assert_eq!(s.app.unwrap().kind.as_deref(), Some("t.charge"));
        let own = serde_json::json!({"message_id": "m-1", "headers": {"id": "c-1", "task": "t.charge"}});
        let s = summarize(1, String::new(), message(own, "{}"));
        assert_eq!(s.message_id.as_deref(), Some("m-1"), "the property wins");
    }

    #[test]
    fn a_token_says_nothing_of_the_identity_without_the_key() {
        let id = identity(b"{\"card\": \"4111-0001\"}", &Map::new());
        let (a, b) = (IdentityKey::new([1; 32]), IdentityKey::new([2; 32]));
        assert_eq!(a.token(&id), a.token(&id), "the same key gives the same token");
        assert_ne!(a.token(&id), b.token(&id), "another key, another token");
        assert_ne!(a.token(&id), id, "not the digest itself");
        assert_eq!(a.token(&id).len(), 32);
    }

    /// A message is the same message whatever the broker's delivery and acquired counts say,
    /// and another message as soon as its payload, its id or its death history differ.
    #[test]
    fn an_identity_ignores_the_brokers_counts_only() {
        let properties = |extra: serde_json::Value| {
            let mut headers = serde_json::json!({"x-death": [{"queue": "work", "reason": "rejected", "count": 1}]});
            headers.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
            serde_json::json!({"message_id": "m1", "headers": headers}).as_object().unwrap().clone()
        };
        let first = identity(b"{}", &properties(serde_json::json!({})));
        assert_eq!(first.len(), 32);
        assert_eq!(first, identity(b"{}", &properties(serde_json::json!({"x-delivery-count": 3}))));
        assert_eq!(first, identity(b"{}", &properties(serde_json::json!({"x-acquired-count": 2}))), "4.3's count");
        assert_eq!(
            first,
            identity(b"{}", &properties(serde_json::json!({"x-acquired-count": 5, "x-delivery-count": 1})))
        );
        let bare = serde_json::json!({"message_id": "m1"}).as_object().unwrap().clone();
        let counted = serde_json::json!({"message_id": "m1", "headers": {"x-delivery-count": 1}});
        assert_eq!(
            identity(b"{}", &bare),
            identity(b"{}", counted.as_object().unwrap()),
            "no headers, then only the count"
        );
        let acquired = serde_json::json!({"message_id": "m1", "headers": {"x-acquired-count": 1}});
        assert_eq!(identity(b"{}", &bare), identity(b"{}", acquired.as_object().unwrap()), "4.3: no headers, then");
        assert_ne!(first, identity(b"{ }", &properties(serde_json::json!({}))), "payload");
        assert_ne!(first, identity(b"{}", &properties(serde_json::json!({"x-first-death-queue": "work"}))));
        let mut other_id = properties(serde_json::json!({}));
        other_id.insert("message_id".into(), "m2".into());
        assert_ne!(first, identity(b"{}", &other_id), "message id");
    }

    /// Issue 16 (6): the snapshot shows the queue it last died in (where a requeue sends it)
    /// and, apart, where it died first.
    #[test]
    fn a_retried_message_shows_the_queue_it_last_died_in() {
        let properties = serde_json::json!({"headers": {
            "x-first-death-queue": "work.wait",
            "x-first-death-reason": "expired",
            "x-death": [
                {"queue": "work", "reason": "rejected", "count": 1, "time": 1700000100},
                {"queue": "work.wait", "reason": "expired", "count": 3, "time": 1700000000}
            ]
        }});
        let m = PeekedMessage {
            exchange: String::new(),
            routing_key: "final.dlq".into(),
            redelivered: false,
            payload_bytes: 0,
            payload_encoding: "string".into(),
            payload: String::new(),
            properties: properties.as_object().unwrap().clone(),
        };
        let s = summarize(1, String::new(), m);
        assert_eq!(s.original_queue.as_deref(), Some("work"));
        assert_eq!(s.reason.as_deref(), Some("rejected"));
        assert_eq!(s.first_death_queue.as_deref(), Some("work.wait"));
        assert_eq!(s.first_death_reason.as_deref(), Some("expired"));
        assert_eq!(s.death_count, 4);
        assert_eq!(s.first_death_at, Some(1700000000));
    }

    /// A crash of the `amqp_field_table` and `message_render` fuzz targets: `x-death` counts
    /// that add up past i64 overflowed the sum.
    #[test]
    fn death_counts_past_i64_saturate() {
        let properties = serde_json::json!({"headers": {"x-death": [
            {"queue": "a", "reason": "rejected", "count": i64::MAX},
            {"queue": "b", "reason": "expired", "count": 5}
        ]}});
        let m = PeekedMessage {
            exchange: String::new(),
            routing_key: String::new(),
            redelivered: false,
            payload_bytes: 0,
            payload_encoding: "string".into(),
            payload: String::new(),
            properties: properties.as_object().unwrap().clone(),
        };
        assert_eq!(summarize(1, String::new(), m).death_count, i64::MAX);
    }

    /// Issue 31, case 7: a dramatiq message keeps its traceback in its body; an error header
    /// wins over it; a body that only looks like one gives nothing.
    #[test]
    fn a_dramatiq_traceback_in_the_body_is_the_error() {
        let body = serde_json::json!({"message_id": "m1", "actor_name": "charge", "args": [], "kwargs": {},
            "options": {"retries": 3, "traceback": "Traceback (most recent call last):\n  File \"a.py\", line 3\nKeyError: 'customer 42'\n"}})
        .to_string();
        let s = summarize(1, String::new(), peeked(Value::Null, &body));
        assert_eq!(error_line(&s).as_deref(), Some("KeyError: 'customer 42'"));
        assert_eq!(error_group(&s).as_deref(), Some("KeyError: <q>"));
        assert_eq!(s.reason.as_deref(), Some(REPUBLISHED), "dramatiq publishes its dead letters itself");
        let s = summarize(1, String::new(), peeked(serde_json::json!({"x-error": "header wins"}), &body));
        assert_eq!(error_line(&s).as_deref(), Some("header wins"));
        // Not dramatiq's envelope (no actor): the body is not read for an error.
        let plain = r#"{"options": {"traceback": "ValueError: x"}}"#;
        assert_eq!(summarize(1, String::new(), peeked(Value::Null, plain)).error, None);
    }
}
