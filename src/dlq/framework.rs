//! Well-known frameworks' message formats: where Celery, dramatiq, MassTransit, NServiceBus and
//! Spring AMQP put a message's id, its task or type, its attempt and its arguments, which the
//! AMQP properties often do not hold (issue 17, case 4: the message id column was empty for
//! Celery and dramatiq, so the audit recorded null ids). Pure, and tolerant: a message that only
//! looks like a format gives what it has, never an error.
//!
//! The shapes, as the frameworks write them:
//! - Celery, protocol 2: headers `id`, `task`, `retries`, `argsrepr`, `kwargsrepr` (a readable
//!   form even when the body is a pickle); protocol 1: the same keys in a JSON body.
//! - dramatiq: a JSON body with `message_id`, `actor_name`, `queue_name`, `args`, `kwargs` and
//!   `options.retries`.
//! - MassTransit: a JSON envelope with `messageId` and `messageType` (`urn:message:...`).
//! - NServiceBus: headers `NServiceBus.MessageId`, `NServiceBus.EnclosedMessageTypes`,
//!   `NServiceBus.Retries` (delayed retries) or `NServiceBus.ImmediateRetries`.
//! - Spring AMQP: the header `__TypeId__` names the payload's class.

use serde::Serialize;
use serde_json::{Map, Value};

/// Bodies parsed for a framework's envelope, at most: the envelopes are small, and a large body
/// is not worth parsing for an id.
const MAX_BODY: usize = 256 * 1024;

/// Arguments shown, at most (characters).
const MAX_ARGUMENTS: usize = 500;

/// What a framework's format says about one message.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct App {
    /// `celery`, `dramatiq`, `masstransit`, `nservicebus` or `spring`.
    pub framework: &'static str,
    pub id: Option<String>,
    /// Where the id was read, in words.
    pub id_from: Option<&'static str>,
    /// The task, actor or message type.
    pub kind: Option<String>,
    /// Retries before this delivery, as the framework counts them.
    pub attempt: Option<i64>,
    /// A readable form of the arguments.
    pub arguments: Option<String>,
}

fn text(v: Option<&Value>) -> Option<String> {
    match v? {
        Value::String(s) if !s.is_empty() => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

fn number(v: Option<&Value>) -> Option<i64> {
    match v? {
        Value::Number(n) => n.as_i64(),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

fn cut(s: String) -> String {
    if s.chars().count() <= MAX_ARGUMENTS {
        return s;
    }
    let mut short: String = s.chars().take(MAX_ARGUMENTS).collect();
    short.push('…');
    short
}

fn compact(v: Option<&Value>) -> Option<String> {
    v.filter(|v| !v.is_null()).map(Value::to_string)
}

/// Arguments as `args kwargs`, leaving out the empty ones.
fn arguments(args: Option<String>, kwargs: Option<String>) -> Option<String> {
    let parts: Vec<String> =
        [args, kwargs].into_iter().flatten().filter(|s| !matches!(s.as_str(), "" | "()" | "[]" | "{}")).collect();
    (!parts.is_empty()).then(|| cut(parts.join(" ")))
}

/// Recognises a framework from a message's headers (as JSON, the way the mover and the browser
/// show them) and its body.
pub fn recognise(headers: Option<&Map<String, Value>>, body: &[u8]) -> Option<App> {
    let empty = Map::new();
    let h = headers.unwrap_or(&empty);
    if h.contains_key("task") && h.contains_key("id") {
        return Some(App {
            framework: "celery",
            id: text(h.get("id")),
            id_from: Some("the Celery id header"),
            kind: text(h.get("task")),
            attempt: number(h.get("retries")),
            arguments: arguments(text(h.get("argsrepr")), text(h.get("kwargsrepr"))),
        });
    }
    if h.contains_key("NServiceBus.MessageId") {
        let kind = text(h.get("NServiceBus.EnclosedMessageTypes"))
            // `Namespace.Type, Assembly, Version=...;Other.Type, ...`: the first type's name.
            .map(|t| t.split([',', ';']).next().unwrap_or_default().trim().to_string());
        return Some(App {
            framework: "nservicebus",
            id: text(h.get("NServiceBus.MessageId")),
            id_from: Some("the NServiceBus.MessageId header"),
            kind,
            attempt: number(h.get("NServiceBus.Retries")).or_else(|| number(h.get("NServiceBus.ImmediateRetries"))),
            arguments: None,
        });
    }
    if let Some(app) = from_body(body) {
        return Some(app);
    }
    text(h.get("__TypeId__")).map(|kind| App { framework: "spring", kind: Some(kind), ..App::default() })
}

fn from_body(body: &[u8]) -> Option<App> {
    let start = body.iter().position(|b| !b.is_ascii_whitespace())?;
    if body.len() > MAX_BODY || body[start] != b'{' {
        return None;
    }
    let Ok(Value::Object(o)) = serde_json::from_slice::<Value>(body) else { return None };
    if o.contains_key("actor_name") && o.contains_key("message_id") {
        return Some(App {
            framework: "dramatiq",
            id: text(o.get("message_id")),
            id_from: Some("the dramatiq body's message_id"),
            kind: text(o.get("actor_name")),
            attempt: o.get("options").and_then(|opts| number(opts.get("retries"))),
            arguments: arguments(compact(o.get("args")), compact(o.get("kwargs"))),
        });
    }
    if o.contains_key("messageId") && o.contains_key("messageType") {
        let kind = match o.get("messageType") {
            Some(Value::Array(types)) => text(types.first()),
            other => text(other),
        };
        return Some(App {
            framework: "masstransit",
            id: text(o.get("messageId")),
            id_from: Some("the MassTransit envelope's messageId"),
            kind: kind.map(|k| k.trim_start_matches("urn:message:").to_string()),
            attempt: None,
            arguments: None,
        });
    }
    if o.contains_key("task") && o.contains_key("id") {
        return Some(App {
            framework: "celery",
            id: text(o.get("id")),
            id_from: Some("the Celery body's id"),
            kind: text(o.get("task")),
            attempt: number(o.get("retries")),
            arguments: arguments(compact(o.get("args")), compact(o.get("kwargs"))),
        });
    }
    None
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn headers(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn celery_protocol_2_reads_the_headers_even_of_a_pickle() {
        let h = headers(json!({
            "lang": "py", "task": "shop.tasks.charge", "id": "3f1c", "retries": 2,
            "argsrepr": "(42,)", "kwargsrepr": "{'currency': 'EUR'}", "root_id": "3f1c"
        }));
        let app = recognise(Some(&h), b"\x80\x04\x95pickle").unwrap();
        assert_eq!(app.framework, "celery");
        assert_eq!(app.id.as_deref(), Some("3f1c"));
        assert_eq!(app.kind.as_deref(), Some("shop.tasks.charge"));
        assert_eq!(app.attempt, Some(2));
        assert_eq!(app.arguments.as_deref(), Some("(42,) {'currency': 'EUR'}"));
    }

    #[test]
    fn dramatiq_reads_its_json_body() {
        let body = br#"{"queue_name":"default","actor_name":"send_mail","args":["a@b"],"kwargs":{},
            "options":{"retries":3},"message_id":"9d2e","message_timestamp":1700000000000}"#;
        let app = recognise(None, body).unwrap();
        assert_eq!(app.framework, "dramatiq");
        assert_eq!(app.id.as_deref(), Some("9d2e"));
        assert_eq!(app.kind.as_deref(), Some("send_mail"));
        assert_eq!(app.attempt, Some(3));
        assert_eq!(app.arguments.as_deref(), Some(r#"["a@b"]"#), "empty kwargs left out");
    }

    #[test]
    fn masstransit_nservicebus_and_spring() {
        let body = br#"{"messageId":"0a1b","messageType":["urn:message:Shop:OrderPlaced"],"message":{}}"#;
        let app = recognise(None, body).unwrap();
        assert_eq!((app.framework, app.id.as_deref()), ("masstransit", Some("0a1b")));
        assert_eq!(app.kind.as_deref(), Some("Shop:OrderPlaced"));

        let h = headers(json!({
            "NServiceBus.MessageId": "77", "NServiceBus.Retries": "1",
            "NServiceBus.EnclosedMessageTypes": "Shop.OrderPlaced, Shop, Version=1.0.0.0;Shop.IEvent, Shop"
        }));
        let app = recognise(Some(&h), b"{}").unwrap();
        assert_eq!((app.framework, app.id.as_deref(), app.attempt), ("nservicebus", Some("77"), Some(1)));
        assert_eq!(app.kind.as_deref(), Some("Shop.OrderPlaced"));

        let h = headers(json!({"__TypeId__": "com.shop.Order"}));
        let app = recognise(Some(&h), b"{\"sku\": 1}").unwrap();
        assert_eq!((app.framework, app.id, app.kind.as_deref()), ("spring", None, Some("com.shop.Order")));
    }

    #[test]
    fn plain_and_hostile_messages_are_no_framework() {
        assert_eq!(recognise(None, b"{\"order\": 1}"), None);
        assert_eq!(recognise(None, b"not json"), None);
        assert_eq!(recognise(None, b""), None);
        assert_eq!(recognise(None, &[b'{'; 10_000]), None);
        // Values of the wrong type give nothing rather than an error.
        let h = headers(json!({"task": {"nested": true}, "id": [1], "retries": "many"}));
        let app = recognise(Some(&h), b"").unwrap();
        assert_eq!((app.id, app.kind, app.attempt), (None, None, None));
        let long = format!("({})", "x".repeat(10_000));
        let h = headers(json!({"task": "t", "id": "1", "argsrepr": long}));
        let args = recognise(Some(&h), b"").unwrap().arguments.unwrap();
        assert_eq!(args.chars().count(), MAX_ARGUMENTS + 1, "cut, with an ellipsis");
    }
}
