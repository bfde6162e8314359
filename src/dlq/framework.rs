//! Well-known frameworks' message formats: where Celery, dramatiq, MassTransit, NServiceBus and
//! Spring AMQP put a message's id, its task or type, its attempt and its arguments ([`recognise`])
//! and why the application gave up on it ([`error`]), which the
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
#[derive(Debug, Clone, Default, PartialEq, Serialize, utoipa::ToSchema)]
#[schema(as = FrameworkApp)]
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
    cut_to(s, MAX_ARGUMENTS)
}

fn cut_to(s: String, max: usize) -> String {
    if s.chars().count() <= max {
        return s;
    }
    let mut short: String = s.chars().take(max).collect();
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
        let readable = arguments(text(h.get("argsrepr")), text(h.get("kwargsrepr")));
        return Some(celery(h, "the Celery id header", readable));
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

/// Why the application gave up on a message, as its framework recorded it in the headers.
#[derive(Debug, Clone, Default, PartialEq, Serialize, utoipa::ToSchema)]
#[schema(as = FrameworkError)]
pub struct AppError {
    /// The exception's message.
    pub message: Option<String>,
    /// The exception's type (class), where the framework records it.
    pub kind: Option<String>,
    /// The headers it was read from, in words.
    pub from: &'static str,
}

/// Where the application says a message came from, on a copy it published into an error queue
/// itself: such a copy has no `x-death` (the broker did not dead-letter it), so only these
/// headers say where a replay should go (issue 17, must-have 3).
#[derive(Debug, Clone, Default, PartialEq, Serialize, utoipa::ToSchema)]
#[schema(as = FrameworkOrigin)]
pub struct Origin {
    /// The queue it failed in, where the headers name one.
    pub queue: Option<String>,
    /// The exchange and routing key it was published with, where the headers name them.
    pub route: Option<(String, String)>,
    /// The headers it was read from, in words.
    pub from: &'static str,
}

/// The origin a framework recorded when it republished a failed message. The families:
/// - Spring AMQP's republishing recoverer: `x-original-exchange`, `x-original-routingKey` (the
///   queue too when the exchange is the default one, which routes by queue name);
/// - MassTransit: `MT-Fault-InputAddress`, the failing endpoint's address, whose last path
///   segment is its queue (`rabbitmq://host/vhost/submit-order?durable=true`);
/// - NServiceBus: `NServiceBus.FailedQ`, the failing endpoint's queue (`Sales`, or
///   `Sales@machine` from MSMQ-era tooling).
pub fn origin(headers: Option<&Map<String, Value>>) -> Option<Origin> {
    let h = headers?;
    // Strings only: an exchange named `""` is the default exchange, a meaningful value.
    let string = |k: &str| h.get(k).and_then(Value::as_str).map(str::to_string);
    if let (Some(exchange), Some(key)) = (string("x-original-exchange"), string("x-original-routingKey")) {
        let queue = (exchange.is_empty() && !key.is_empty()).then(|| key.clone());
        return Some(Origin {
            queue,
            route: Some((exchange, key)),
            from: "x-original-exchange and x-original-routingKey (Spring AMQP)",
        });
    }
    if let Some(address) = string("MT-Fault-InputAddress") {
        let path = address.split(['?', '#']).next().unwrap_or_default();
        // Past the scheme's `//` and the host: what is left is `vhost/queue` or `queue`.
        let after_host = path.split_once("//").map(|(_, rest)| rest).unwrap_or(path);
        let queue = after_host.split_once('/').and_then(|(_, rest)| rest.rsplit('/').next()).unwrap_or_default();
        return Some(Origin {
            queue: (!queue.is_empty()).then(|| queue.to_string()),
            route: None,
            from: "MT-Fault-InputAddress (MassTransit)",
        });
    }
    if let Some(failed) = string("NServiceBus.FailedQ") {
        let queue = failed.split('@').next().unwrap_or_default().trim();
        return Some(Origin {
            queue: (!queue.is_empty()).then(|| queue.to_string()),
            route: None,
            from: "NServiceBus.FailedQ (NServiceBus)",
        });
    }
    None
}

/// Error messages shown, at most (characters).
const MAX_ERROR: usize = 300;

/// The error a framework recorded on a message (issue 17, case 3: the real cause was only on
/// each message's page). The families, as the frameworks write them:
/// - Spring AMQP's republishing recoverer: `x-exception-message`, and the type as the first
///   line of `x-exception-stacktrace` (`com.shop.SkuUnknown: ...`);
/// - MassTransit: `MT-Fault-Message`, `MT-Fault-ExceptionType`;
/// - NServiceBus: `NServiceBus.ExceptionInfo.Message`, `NServiceBus.ExceptionInfo.ExceptionType`;
/// - a header table named like `error` or `exception` holding `message` (and `type`), as some
///   frameworks nest it; or a plain `error` / `exception` / `x-error` string header.
pub fn error(headers: Option<&Map<String, Value>>) -> Option<AppError> {
    let h = headers?;
    let short = |v: Option<String>| v.map(|s| cut_to(s.trim().to_string(), MAX_ERROR)).filter(|s| !s.is_empty());
    if h.contains_key("x-exception-message") || h.contains_key("x-exception-stacktrace") {
        // Spring wraps the listener's exception (`ListenerExecutionFailedException: Listener
        // method ... threw exception`) and nests the real one in `Caused by:` lines: the last of
        // them is the root cause, and its type and message are the error (issue 31, case 7).
        let trace = text(h.get("x-exception-stacktrace"));
        let (kind, root_message) = match trace.as_deref().and_then(java_root_cause) {
            Some((kind, message)) => (Some(kind), message),
            None => (None, None),
        };
        return Some(AppError {
            message: short(root_message.or_else(|| text(h.get("x-exception-message")))),
            kind,
            from: "x-exception-message and x-exception-stacktrace (Spring AMQP)",
        });
    }
    if h.contains_key("MT-Fault-Message") {
        return Some(AppError {
            message: short(text(h.get("MT-Fault-Message"))),
            kind: text(h.get("MT-Fault-ExceptionType")),
            from: "MT-Fault-Message and MT-Fault-ExceptionType (MassTransit)",
        });
    }
    if h.contains_key("NServiceBus.ExceptionInfo.Message") {
        return Some(AppError {
            message: short(text(h.get("NServiceBus.ExceptionInfo.Message"))),
            kind: text(h.get("NServiceBus.ExceptionInfo.ExceptionType")),
            from: "NServiceBus.ExceptionInfo.* (NServiceBus)",
        });
    }
    // Rascal (Node.js) nests its error two levels down: `rascal.error.message`.
    if let Some(Value::Object(e)) = h.get("rascal").and_then(Value::as_object).and_then(|r| r.get("error")) {
        if e.contains_key("message") {
            return Some(AppError {
                message: short(text(e.get("message"))),
                kind: ["name", "type", "code"].iter().find_map(|k| text(e.get(*k))),
                from: "rascal.error (Rascal)",
            });
        }
    }
    let named = |k: &str| {
        let k = k.to_ascii_lowercase();
        !k.starts_with("x-death") && (k.contains("error") || k.contains("exception"))
    };
    for value in h.iter().filter(|(k, _)| named(k)).map(|(_, v)| v) {
        match value {
            Value::Object(nested) if nested.contains_key("message") => {
                let kind = ["type", "class", "name", "exception_type"].iter().find_map(|k| text(nested.get(*k)));
                return Some(AppError {
                    message: short(text(nested.get("message"))),
                    kind,
                    from: "a nested error header",
                });
            }
            Value::String(message) if !message.trim().is_empty() => {
                return Some(AppError { message: short(Some(message.clone())), kind: None, from: "an error header" });
            }
            _ => {}
        }
    }
    None
}

/// The error a framework keeps in a JSON body: dramatiq's `options.traceback` (a Python
/// traceback, whose last line is `Type: message`). Bodies over [`MAX_BODY`] are not parsed.
pub fn body_error(body: &[u8]) -> Option<AppError> {
    let start = body.iter().position(|b| !b.is_ascii_whitespace())?;
    if body.len() > MAX_BODY || body[start] != b'{' {
        return None;
    }
    let Ok(Value::Object(o)) = serde_json::from_slice::<Value>(body) else { return None };
    let trace = o.get("options").and_then(Value::as_object).and_then(|opts| opts.get("traceback")?.as_str())?;
    let (kind, message) = python_root_cause(trace)?;
    Some(AppError { message, kind: Some(kind), from: "options.traceback in the body (dramatiq)" })
}

/// The exception of a Python traceback: its last non-blank line, `Type: message` (a chained
/// traceback ends with the exception that was raised last, the one that escaped).
fn python_root_cause(trace: &str) -> Option<(String, Option<String>)> {
    let tail: String = trace.chars().rev().take(MAX_ERROR * 8).collect::<Vec<_>>().into_iter().rev().collect();
    let last = tail.lines().rev().map(str::trim).find(|l| !l.is_empty())?;
    let (kind, message) = match last.split_once(':') {
        Some((kind, message)) => (kind.trim(), Some(message.trim())),
        None => (last, None),
    };
    if kind.is_empty() || kind.contains(char::is_whitespace) {
        return None;
    }
    let message = message.filter(|m| !m.is_empty()).map(|m| cut_to(m.to_string(), MAX_ERROR));
    Some((cut_to(kind.to_string(), MAX_ERROR), message))
}

/// Lines of a stack trace looked at, at most: a hostile header costs bounded time.
const MAX_TRACE_LINES: usize = 2_000;

/// The root cause of a Java stack trace: the type and message of its last `Caused by:` line, or
/// of its first line when nothing is nested.
fn java_root_cause(trace: &str) -> Option<(String, Option<String>)> {
    let mut lines = trace.lines().take(MAX_TRACE_LINES);
    let mut root = lines.next()?.trim();
    for line in lines {
        if let Some(cause) = line.trim().strip_prefix("Caused by:") {
            root = cause.trim();
        }
    }
    let (kind, message) = match root.split_once(':') {
        Some((kind, message)) => (kind.trim(), Some(message.trim())),
        None => (root, None),
    };
    if kind.is_empty() || kind.contains(char::is_whitespace) {
        return None;
    }
    let message = message.filter(|m| !m.is_empty()).map(|m| cut_to(m.to_string(), MAX_ERROR));
    Some((cut_to(kind.to_string(), MAX_ERROR), message))
}

/// Placeholders a fingerprint puts for what varies between messages of one cause.
const NUMBER: &str = "<n>";
const QUOTED: &str = "<q>";
const ID: &str = "<id>";

/// An error text with what varies per message replaced (numbers, UUIDs, hex strings, ids with
/// digits, quoted values), so that `order 123 failed` and `order 456 failed` group together.
/// One pass over the characters, no regular expression: linear in the (capped) length.
pub fn fingerprint(text: &str) -> String {
    let text: String = text.chars().take(MAX_ERROR * 4).collect();
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\'' || c == '"' {
            // A quoted value up to its closing quote; an unclosed quote is kept as it is.
            let rest: String = chars.clone().collect();
            if let Some(end) = rest.find(c) {
                out.push_str(QUOTED);
                for _ in 0..rest[..end].chars().count() + 1 {
                    chars.next();
                }
                continue;
            }
            out.push(c);
            continue;
        }
        if c.is_alphanumeric() || c == '-' || c == '_' {
            let mut word = String::from(c);
            while let Some(&n) = chars.peek() {
                if n.is_alphanumeric() || n == '-' || n == '_' || (n == '.' && word.chars().all(|w| w.is_ascii_digit()))
                {
                    word.push(n);
                    chars.next();
                } else {
                    break;
                }
            }
            out.push_str(&word_fingerprint(&word));
            continue;
        }
        out.push(c);
    }
    out
}

/// The group of an error line (`Type: message`, as `message::error_line` writes it): the type
/// as it is and the message's [`fingerprint`], so that `OrderException: order 123 failed` and
/// `OrderException: order 456 failed` are one cause (issue 31, case 7: 78 groups of 1). A line
/// of one word is a type alone, kept as it is (`S3Error` is no id); a line whose head is not a
/// type (it holds spaces) is fingerprinted whole.
pub fn error_group(line: &str) -> String {
    let line = line.trim();
    if !line.contains(char::is_whitespace) && !line.contains(':') {
        return line.to_string();
    }
    match line.split_once(": ") {
        Some((kind, message)) if !kind.is_empty() && !kind.contains(char::is_whitespace) => {
            format!("{kind}: {}", fingerprint(message))
        }
        _ => fingerprint(line),
    }
}

/// One word: a number, or a word holding digits (an id, a UUID, a hex string) becomes a
/// placeholder; a plain word stays.
fn word_fingerprint(word: &str) -> String {
    if !word.chars().any(|c| c.is_ascii_digit()) {
        return word.to_string();
    }
    if word.chars().all(|c| c.is_ascii_digit() || c == '.' || c == '-') {
        return NUMBER.to_string();
    }
    ID.to_string()
}

/// A Celery message from its fields: the headers in protocol 2, the body in protocol 1.
fn celery(fields: &Map<String, Value>, id_from: &'static str, arguments: Option<String>) -> App {
    App {
        framework: "celery",
        id: text(fields.get("id")),
        id_from: Some(id_from),
        kind: text(fields.get("task")),
        attempt: number(fields.get("retries")),
        arguments,
    }
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
        let readable = arguments(compact(o.get("args")), compact(o.get("kwargs")));
        return Some(celery(&o, "the Celery body's id", readable));
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
    fn origins_the_frameworks_recorded() {
        let spring = headers(json!({"x-original-exchange": "", "x-original-routingKey": "orders"}));
        let o = origin(Some(&spring)).unwrap();
        assert_eq!((o.queue.as_deref(), o.route), (Some("orders"), Some((String::new(), "orders".to_string()))));
        let spring = headers(json!({"x-original-exchange": "shop", "x-original-routingKey": "order.created"}));
        let o = origin(Some(&spring)).unwrap();
        assert_eq!(o.queue, None, "a topic exchange's key is not a queue name");
        assert_eq!(o.route, Some(("shop".to_string(), "order.created".to_string())));
        let mt = headers(json!({"MT-Fault-InputAddress": "rabbitmq://localhost/shop/submit-order?durable=true"}));
        assert_eq!(origin(Some(&mt)).unwrap().queue.as_deref(), Some("submit-order"));
        let mt = headers(json!({"MT-Fault-InputAddress": "rabbitmq://localhost/submit-order"}));
        assert_eq!(origin(Some(&mt)).unwrap().queue.as_deref(), Some("submit-order"));
        let mt = headers(json!({"MT-Fault-InputAddress": "rabbitmq://localhost"}));
        assert_eq!(origin(Some(&mt)).unwrap().queue, None, "an address without a queue names none");
        let nsb = headers(json!({"NServiceBus.FailedQ": "Sales@host-1"}));
        assert_eq!(origin(Some(&nsb)).unwrap().queue.as_deref(), Some("Sales"));
        // Half a pair, or values of the wrong type, say nothing.
        assert_eq!(origin(Some(&headers(json!({"x-original-exchange": ""})))), None);
        assert_eq!(origin(Some(&headers(json!({"x-original-exchange": 1, "x-original-routingKey": 2})))), None);
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
    fn errors_are_read_from_each_frameworks_headers() {
        let spring = headers(json!({
            "x-exception-message": "sku GIFT-CARD-LEGACY is not in the catalogue",
            "x-exception-stacktrace": "com.shop.SkuUnknownException: sku GIFT-CARD-LEGACY is not in the catalogue\n\tat com.shop.Catalogue.find(Catalogue.java:42)",
            "x-original-exchange": "orders", "x-original-routingKey": "order.created"
        }));
        let e = error(Some(&spring)).unwrap();
        assert_eq!(e.message.as_deref(), Some("sku GIFT-CARD-LEGACY is not in the catalogue"));
        assert_eq!(e.kind.as_deref(), Some("com.shop.SkuUnknownException"));

        let mt = headers(json!({"MT-Fault-Message": "timeout", "MT-Fault-ExceptionType": "System.TimeoutException"}));
        assert_eq!(error(Some(&mt)).unwrap().kind.as_deref(), Some("System.TimeoutException"));
        let nsb = headers(json!({"NServiceBus.ExceptionInfo.Message": "boom"}));
        assert_eq!(error(Some(&nsb)).unwrap().message.as_deref(), Some("boom"));

        let nested = headers(json!({"error": {"message": "card declined", "type": "PaymentError"}, "x-death": []}));
        let e = error(Some(&nested)).unwrap();
        assert_eq!((e.message.as_deref(), e.kind.as_deref()), (Some("card declined"), Some("PaymentError")));
        assert_eq!(e.from, "a nested error header");

        assert_eq!(error(Some(&headers(json!({"x-death": [{"reason": "rejected"}], "retries": 2})))), None);
        assert_eq!(error(None), None);
        let long = headers(json!({"x-exception-message": "e".repeat(5_000)}));
        assert_eq!(error(Some(&long)).unwrap().message.unwrap().chars().count(), MAX_ERROR + 1);
    }

    #[test]
    fn spring_errors_are_their_root_cause() {
        let trace = "org.springframework.amqp.rabbit.support.ListenerExecutionFailedException: Listener method 'handle' threw exception\n\tat org.springframework.amqp.rabbit.listener.X.y(X.java:1)\nCaused by: com.shop.OrderException: order 42 failed\n\tat com.shop.A.b(A.java:2)\nCaused by: java.lang.NullPointerException: customer of order 42 is null\n\t... 12 more";
        let spring = headers(json!({
            "x-exception-message": "Listener method 'handle' threw exception",
            "x-exception-stacktrace": trace,
        }));
        let e = error(Some(&spring)).unwrap();
        assert_eq!(e.kind.as_deref(), Some("java.lang.NullPointerException"));
        assert_eq!(e.message.as_deref(), Some("customer of order 42 is null"));
        // No message on the root cause: the wrapper's message stays.
        let bare = headers(
            json!({"x-exception-message": "wrapped", "x-exception-stacktrace": "a.B: x\nCaused by: java.lang.IllegalStateException"}),
        );
        let e = error(Some(&bare)).unwrap();
        assert_eq!(
            (e.kind.as_deref(), e.message.as_deref()),
            (Some("java.lang.IllegalStateException"), Some("wrapped"))
        );
        // Hostile traces: no panic, bounded work.
        assert_eq!(java_root_cause(""), None);
        assert_eq!(java_root_cause("not a type: at all"), None);
        let many = "Caused by: a.B: x\n".repeat(100_000);
        assert!(java_root_cause(&many).is_some());
        assert_eq!(java_root_cause("Caused by:\nCaused by:"), None);
    }

    #[test]
    fn rascal_and_dramatiq_errors_are_read() {
        let rascal = headers(
            json!({"rascal": {"error": {"message": "order 7 failed", "code": "E_ORDER"}, "originalQueue": "q"}}),
        );
        let e = error(Some(&rascal)).unwrap();
        assert_eq!((e.kind.as_deref(), e.message.as_deref()), (Some("E_ORDER"), Some("order 7 failed")));
        assert_eq!(error(Some(&headers(json!({"rascal": {"error": "x"}})))), None);

        let body = json!({"message_id": "m1", "actor_name": "charge", "args": [], "kwargs": {}, "options": {
            "traceback": "Traceback (most recent call last):\n  File \"a.py\", line 3, in charge\nValueError: order 123 failed\n"
        }});
        let e = body_error(body.to_string().as_bytes()).unwrap();
        assert_eq!((e.kind.as_deref(), e.message.as_deref()), (Some("ValueError"), Some("order 123 failed")));
        assert_eq!(body_error(b"{\"options\": {\"traceback\": 5}}"), None);
        assert_eq!(body_error(b"not json"), None);
        assert_eq!(body_error(&[b'{'; 10_000]), None);
        assert_eq!(python_root_cause("  \n\n"), None);
        assert!(python_root_cause(&"x\n".repeat(1_000_000)).is_some());
    }

    #[test]
    fn fingerprints_ignore_what_varies() {
        assert_eq!(fingerprint("order 123 failed"), fingerprint("order 456 failed"));
        assert_eq!(fingerprint("order 123 failed"), "order <n> failed");
        assert_eq!(fingerprint("sku 'GIFT-1' unknown"), "sku <q> unknown");
        assert_eq!(fingerprint("sku \"abc def\" unknown"), "sku <q> unknown");
        assert_eq!(fingerprint("id 3f2a9c0e-1b2c-4d5e-8f90-a1b2c3d4e5f6 gone"), "id <id> gone");
        assert_eq!(fingerprint("hash deadbeef01 at 0x7ffe12"), "hash <id> at <id>");
        assert_eq!(fingerprint("took 1.5 s, -3 left"), "took <n> s, <n> left");
        assert_eq!(fingerprint("customer is null"), "customer is null");
        // Hostile: unclosed quotes, long inputs, multibyte text.
        assert_eq!(fingerprint("it's 5"), "it's <n>");
        assert!(fingerprint(&"\"".repeat(10_000)).chars().count() < 10_000);
        assert!(fingerprint(&"ä1'".repeat(100_000)).len() < 100_000);
        assert_eq!(fingerprint("Bestellung 7 für Müller"), "Bestellung <n> für Müller");
    }

    #[test]
    fn error_groups_keep_the_type_and_fingerprint_the_message() {
        let a = error_group("java.lang.NullPointerException: customer of order 42 is null");
        assert_eq!(a, "java.lang.NullPointerException: customer of order <n> is null");
        assert_eq!(a, error_group("java.lang.NullPointerException: customer of order 4711 is null"));
        assert_ne!(a, error_group("java.lang.IllegalStateException: customer of order 42 is null"), "the type parts");
        // A type with digits in its name stays; so does a type alone.
        assert_eq!(error_group("S3Exception: key 'a/b' missing"), "S3Exception: key <q> missing");
        assert_eq!(error_group("E_ORDER2"), "E_ORDER2");
        // No type: the whole line is fingerprinted.
        assert_eq!(error_group("order 7 failed"), "order <n> failed");
        assert_eq!(error_group("order 7 failed: no stock"), "order <n> failed: no stock");
        assert_eq!(error_group("  "), "");
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
