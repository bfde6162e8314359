//! What a notification says on each kind of channel: the webhook's JSON (documented in the
//! module docs of `notify`), Slack's `{"text": ...}`, and a plain-text email.

use chrono::SecondsFormat;
use lettre::message::header::ContentType;
use lettre::message::Mailbox;
use lettre::Message;
use serde::Serialize;

use super::channel::EmailSettings;
use super::{Notification, NotificationKind};
use crate::alerts::{Comparator, Metric, Severity};

/// The `version` of the webhook body; a change that breaks receivers gets a new number.
pub const WEBHOOK_VERSION: u32 = 1;

#[derive(Serialize)]
struct WebhookBody<'a> {
    version: u32,
    kind: NotificationKind,
    at: String,
    summary: String,
    description: &'a str,
    rule: WebhookRule<'a>,
    alert: WebhookAlert<'a>,
    note: Option<&'a str>,
    dashboard_url: Option<&'a str>,
    idempotency_key: &'a str,
}

#[derive(Serialize)]
struct WebhookRule<'a> {
    id: &'a str,
    name: &'a str,
    severity: Severity,
    metric: Option<Metric>,
    comparator: Option<Comparator>,
    threshold: Option<f64>,
}

#[derive(Serialize)]
struct WebhookAlert<'a> {
    broker: &'a str,
    vhost: Option<&'a str>,
    queue: Option<&'a str>,
    value: Option<f64>,
}

/// The webhook's JSON for `n`, named by `idempotency_key` ([`Notification::idempotency_key`]).
pub(super) fn webhook_body(n: &Notification, idempotency_key: &str) -> serde_json::Value {
    let body = WebhookBody {
        version: WEBHOOK_VERSION,
        kind: n.kind,
        at: n.at.to_rfc3339_opts(SecondsFormat::Secs, true),
        summary: summary(n),
        description: &n.description,
        rule: WebhookRule {
            id: &n.rule_id,
            name: &n.rule_name,
            severity: n.severity,
            metric: n.metric,
            comparator: n.comparator,
            threshold: n.threshold,
        },
        alert: WebhookAlert {
            broker: &n.key.broker,
            vhost: n.key.vhost.as_deref(),
            queue: n.key.queue.as_deref(),
            value: n.value,
        },
        note: n.note.as_deref(),
        dashboard_url: n.dashboard_url.as_deref(),
        idempotency_key,
    };
    serde_json::to_value(body).expect("the webhook body is plain data")
}

/// Slack's incoming-webhook body: the summary, the description when it says more, and a link.
pub(super) fn slack_body(n: &Notification) -> serde_json::Value {
    let mut text = slack_escape(&summary(n));
    // A test's summary is its description already.
    if !n.description.is_empty() && n.kind != NotificationKind::Test {
        text.push('\n');
        text.push_str(&slack_escape(&n.description));
    }
    if let Some(url) = &n.dashboard_url {
        // Inside <...> only `|` and `>` would break the link; a URL has neither unescaped.
        text.push_str(&format!("\n<{url}|Open in warren>"));
    }
    serde_json::json!({ "text": text })
}

/// Slack treats `&`, `<` and `>` as markup (links, mentions); everything else is literal.
fn slack_escape(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

/// One line for humans: what happened, to what, and the reading, e.g.
/// `[FIRING] Orders backlog (critical): queue 'orders' (vhost '/', broker 'main'): ready 37 (threshold > 10)`.
pub(super) fn summary(n: &Notification) -> String {
    let label = match n.kind {
        NotificationKind::Firing => "FIRING",
        NotificationKind::Resolved => "RESOLVED",
        NotificationKind::Reminder => "STILL FIRING",
        NotificationKind::Test => "TEST",
    };
    format!("[{label}] {}", headline(n))
}

/// The summary without its `[FIRING]` mark, for receivers that show the state themselves
/// (Alertmanager): `Orders backlog (critical): queue 'orders' (...): ready 37 (threshold > 10)`.
pub(super) fn headline(n: &Notification) -> String {
    if n.kind == NotificationKind::Test {
        return n.description.clone();
    }
    let mut line = format!("{} ({}): {}", n.rule_name, severity_name(n.severity), n.key);
    if let Some(metric) = n.metric.filter(|m| *m != Metric::BrokerUnreachable) {
        line.push_str(&format!(": {} {}", metric.as_str(), format_value(n.value)));
        if let (Some(comparator), Some(threshold)) = (n.comparator, n.threshold) {
            line.push_str(&format!(" (threshold {} {})", comparator.as_str(), format_value(Some(threshold))));
        }
    }
    if let Some(note) = &n.note {
        line.push_str(&format!(" ({note})"));
    }
    line
}

pub(super) fn severity_name(severity: Severity) -> &'static str {
    match severity {
        Severity::Info => "info",
        Severity::Warning => "warning",
        Severity::Critical => "critical",
    }
}

/// Whole numbers without decimals (counts), others with two (rates, ages); unknown is
/// "unknown", never 0.
pub(super) fn format_value(value: Option<f64>) -> String {
    match value {
        None => "unknown".to_string(),
        Some(v) if v.fract() == 0.0 && v.abs() < 1e15 => format!("{v:.0}"),
        Some(v) => format!("{v:.2}"),
    }
}

/// The email's body: the description, then the facts one per line.
pub(super) fn email_text(n: &Notification) -> String {
    let mut text = format!("{}\n\n", n.description);
    let mut line = |label: &str, value: &str| text.push_str(&format!("{label:<11}{value}\n"));
    if n.kind != NotificationKind::Test {
        line("Rule:", &format!("{} ({})", n.rule_name, n.rule_id));
        line("Severity:", severity_name(n.severity));
        line("Alert:", &n.key.to_string());
        if let Some(metric) = n.metric.filter(|m| *m != Metric::BrokerUnreachable) {
            line("Value:", &format!("{} {}", metric.as_str(), format_value(n.value)));
        }
        if let (Some(comparator), Some(threshold)) = (n.comparator, n.threshold) {
            line("Threshold:", &format!("{} {}", comparator.as_str(), format_value(Some(threshold))));
        }
    }
    line("At:", &n.at.to_rfc3339_opts(SecondsFormat::Secs, true));
    if let Some(note) = &n.note {
        line("Note:", note);
    }
    if let Some(url) = &n.dashboard_url {
        line("Open:", url);
    }
    text.push_str("\n-- \nSent by warren.\n");
    text
}

/// The email for `n`, or what is wrong with the channel's addresses. Its `Message-ID` is made of
/// the idempotency key, so every attempt sends the same message and mail servers and clients
/// that drop a message id seen before drop a duplicate.
pub(super) fn email(settings: &EmailSettings, n: &Notification, idempotency_key: &str) -> Result<Message, String> {
    let mailbox = |address: &str| address.parse::<Mailbox>().map_err(|e| format!("{address:?}: {e}"));
    let mut builder = Message::builder()
        .from(mailbox(&settings.from)?)
        .subject(summary(n))
        .message_id(Some(format!("<{idempotency_key}@warren>")));
    for to in &settings.to {
        builder = builder.to(mailbox(to)?);
    }
    builder.header(ContentType::TEXT_PLAIN).body(email_text(n)).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use chrono::{TimeZone, Utc};
    use serde_json::json;

    use super::*;
    use crate::alerts::{AlertKey, Rule, Scope};

    fn rule() -> Rule {
        Rule {
            id: "orders-backlog".to_string(),
            name: "Orders backlog".to_string(),
            scope: Scope::default(),
            metric: Metric::Ready,
            comparator: Some(Comparator::Gt),
            threshold: Some(10.0),
            for_secs: 0,
            keep_firing_for_secs: 0,
            severity: Severity::Critical,
            description: Some("{queue} has {value} ready".to_string()),
        }
    }

    fn firing() -> Notification {
        let at = Utc.with_ymd_and_hms(2025, 5, 1, 12, 0, 0).unwrap();
        let mut n = Notification::for_rule(
            NotificationKind::Firing,
            &rule(),
            AlertKey::queue("main", "/", "orders"),
            Some(37.0),
            at,
            None,
        );
        n.dashboard_url = Some("http://warren.example/queues/main/%2F/orders".to_string());
        n
    }

    #[test]
    fn webhook_body_follows_the_documented_schema() {
        assert_eq!(
            webhook_body(&firing(), "0123456789abcdef0123456789abcdef"),
            json!({
                "version": 1,
                "kind": "firing",
                "at": "2025-05-01T12:00:00Z",
                "summary": "[FIRING] Orders backlog (critical): queue 'orders' (vhost '/', broker 'main'): ready 37 (threshold > 10)",
                "description": "orders has 37 ready",
                "rule": {
                    "id": "orders-backlog",
                    "name": "Orders backlog",
                    "severity": "critical",
                    "metric": "ready",
                    "comparator": ">",
                    "threshold": 10.0
                },
                "alert": {"broker": "main", "vhost": "/", "queue": "orders", "value": 37.0},
                "note": null,
                "dashboard_url": "http://warren.example/queues/main/%2F/orders",
                "idempotency_key": "0123456789abcdef0123456789abcdef"
            })
        );
    }

    #[test]
    fn broker_alerts_and_tests_have_nulls_where_nothing_applies() {
        let rule =
            Rule { metric: Metric::BrokerUnreachable, comparator: None, threshold: None, description: None, ..rule() };
        let n =
            Notification::for_rule(NotificationKind::Resolved, &rule, AlertKey::broker("main"), None, Utc::now(), None);
        let body = webhook_body(&n, "k");
        assert_eq!(body["alert"], json!({"broker": "main", "vhost": null, "queue": null, "value": null}));
        assert_eq!(body["rule"]["comparator"], json!(null));
        assert_eq!(body["summary"], "[RESOLVED] Orders backlog (critical): broker 'main'");

        let body = webhook_body(&Notification::test(Utc::now()), "k");
        assert_eq!(body["kind"], "test");
        assert_eq!(body["rule"]["id"], "test");
        assert_eq!(body["alert"]["broker"], "warren");
    }

    #[test]
    fn summaries_read_as_one_line() {
        let mut n = firing();
        n.kind = NotificationKind::Reminder;
        n.value = Some(2.5);
        assert_eq!(
            summary(&n),
            "[STILL FIRING] Orders backlog (critical): queue 'orders' (vhost '/', broker 'main'): ready 2.50 (threshold > 10)"
        );
        n.kind = NotificationKind::Resolved;
        n.value = None;
        n.note = Some("queue deleted".to_string());
        assert_eq!(
            summary(&n),
            "[RESOLVED] Orders backlog (critical): queue 'orders' (vhost '/', broker 'main'): ready unknown \
             (threshold > 10) (queue deleted)"
        );
        assert!(!summary(&firing()).contains('\n'));
    }

    #[test]
    fn slack_text_is_escaped_and_links_to_the_dashboard() {
        let body = slack_body(&firing());
        let text = body["text"].as_str().unwrap();
        assert_eq!(body.as_object().unwrap().len(), 1, "only text: {body}");
        assert_eq!(
            text,
            "[FIRING] Orders backlog (critical): queue 'orders' (vhost '/', broker 'main'): ready 37 (threshold &gt; 10)\n\
             orders has 37 ready\n<http://warren.example/queues/main/%2F/orders|Open in warren>"
        );
        let mut n = firing();
        n.rule_name = "<!channel> & friends".to_string();
        assert!(slack_body(&n)["text"].as_str().unwrap().contains("&lt;!channel&gt; &amp; friends"));
        let test = slack_body(&Notification::test(Utc::now()));
        assert_eq!(test["text"], "[TEST] This is a test notification from warren: this channel works.");
    }

    #[test]
    fn email_has_the_summary_as_subject_and_the_facts_in_the_body() {
        let text = email_text(&firing());
        assert!(text.starts_with("orders has 37 ready\n\n"), "{text}");
        for line in [
            "Rule:      Orders backlog (orders-backlog)",
            "Severity:  critical",
            "Alert:     queue 'orders' (vhost '/', broker 'main')",
            "Value:     ready 37",
            "Threshold: > 10",
            "At:        2025-05-01T12:00:00Z",
            "Open:      http://warren.example/queues/main/%2F/orders",
        ] {
            assert!(text.contains(line), "missing {line:?} in\n{text}");
        }
        let settings = EmailSettings {
            host: "mail.example.com".to_string(),
            port: None,
            security: super::super::SmtpSecurity::None,
            user: None,
            password: None,
            from: "Warren <warren@example.com>".to_string(),
            to: vec!["ops@example.com".to_string()],
        };
        let message = String::from_utf8(email(&settings, &firing(), "0123abcd").unwrap().formatted()).unwrap();
        assert!(message.contains("Message-ID: <0123abcd@warren>"), "{message}");
        assert!(message.contains("Subject: [FIRING] Orders backlog (critical)"), "{message}");
        assert!(message.contains("To: ops@example.com"), "{message}");
    }
}
