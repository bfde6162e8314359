//! Notifications: telling people that an alert fired, still fires, or resolved, through a
//! generic webhook, a Slack-compatible incoming webhook, email over SMTP, or a Prometheus
//! Alertmanager.
//!
//! - [`NotificationChannel`] is one destination, declared in the TOML file (`[[notifications]]`)
//!   or stored as JSON; [`NotificationChannel::validate`] reports problems by field.
//! - [`Notification`] is what is said; [`send`] makes one attempt to say it on one channel.
//! - The outbox (`notification_outbox`, [`pending_deliveries`]) holds one row per notification
//!   and channel that has not been delivered yet, with the attempts made and when the next is
//!   due. The alert evaluator writes the rows ([`Dispatcher::enqueue`]) in the same transaction
//!   as the alert states, so what it decided to tell survives a crash as surely as the states.
//! - [`Dispatcher`] runs one task per channel, delivering that channel's rows oldest first, one
//!   at a time, so a receiver that hangs or answers 500 delays neither the alert evaluator nor
//!   any other channel. It retries with exponential backoff ([`DeliveryPolicy`]); a row leaves
//!   the outbox when the channel accepted it or warren gave up, and every attempt is recorded in
//!   the delivery log ([`recent_deliveries`]). A channel whose outbox holds `queue_capacity`
//!   rows drops further notifications, logged. Rows and their retries survive a restart (and a
//!   SIGKILL); an attempt cut short is made again, so a receiver may get a notification twice
//!   (at least once, never lost while warren runs again within the attempts). Every attempt
//!   carries the notification's idempotency key ([`Notification::idempotency_key`]).
//! - Several replicas on one database all run every channel's task; a row is claimed before its
//!   attempt, so one replica at a time delivers a channel, and the writes that end an attempt
//!   are made only while the claim is still the replica's (`outbox`, `dispatch`).
//! - An alert counts as notified ([`store::StoredState::delivered_at`], `notified_at` in the
//!   API) only once a channel accepted a firing or reminder notification of it; when one was
//!   queued (`queued_at`) is what the planner remembers, so it does not queue it again.
//! - Which alerts are told, and when a reminder is due ([`reminder_due`]), is the evaluator
//!   loop's decision, not this module's.
//!
//! # Secrets
//!
//! Webhook and Slack URLs usually carry their token in the path, so a URL is a [`Secret`]:
//! pages, API answers and logs show [`NotificationChannel::display_target`] (scheme and host),
//! errors are stripped of the URL and scrubbed of it, and `Debug` prints `***`. Only
//! [`NotificationChannel::to_storage_json`] holds the real values, for the database.
//!
//! # Webhook body (version 1)
//!
//! A generic webhook receives `POST` with `Content-Type: application/json`:
//!
//! ```json
//! {
//!   "version": 1,
//!   "kind": "firing",
//!   "at": "2025-05-01T12:00:00Z",
//!   "summary": "[FIRING] Orders backlog (critical): queue 'orders' (vhost '/', broker 'main'): ready 37 (threshold > 10)",
//!   "description": "Orders backlog: ready is 37 (> 10) for queue 'orders' (vhost '/', broker 'main')",
//!   "rule": {
//!     "id": "orders-backlog",
//!     "name": "Orders backlog",
//!     "severity": "critical",
//!     "metric": "ready",
//!     "comparator": ">",
//!     "threshold": 10.0
//!   },
//!   "alert": { "broker": "main", "vhost": "/", "queue": "orders", "value": 37.0 },
//!   "note": null,
//!   "dashboard_url": "http://warren.example/queues/main/%2F/orders",
//!   "idempotency_key": "5f0c8d4e9b2a7c1e3d6f8a0b2c4e6f81"
//! }
//! ```
//!
//! - `version`: 1; a change that breaks receivers gets a new number.
//! - `kind`: `firing` (the alert started firing), `reminder` (still firing, sent every repeat
//!   interval), `resolved`, or `test` (the "send test notification" button).
//! - `at`: when the change happened (RFC 3339, UTC).
//! - `summary`: one line for humans, the same text as the Slack message and the email subject.
//! - `description`: the rule's description template filled in, or a generated sentence.
//! - `rule.metric`, `rule.comparator`, `rule.threshold`: `null` for `broker_unreachable` rules,
//!   which compare no number, and for tests. `severity` is `info`, `warning` or `critical`.
//! - `alert`: what the alert is about; `vhost` and `queue` are `null` for a broker-level alert.
//!   `value` is the reading that caused the change, `null` when there was none (broker alerts,
//!   a queue deleted, a rule removed).
//! - `note`: why an alert ended other than by its condition ("queue deleted", "rule removed").
//! - `dashboard_url`: where to look, when warren knows its public address.
//! - `idempotency_key`: [`Notification::idempotency_key`], also sent as the `Idempotency-Key`
//!   header: the same for every attempt at this notification on this channel, by any replica,
//!   so a receiver can drop a duplicate (delivery is at least once).
//!
//! A test notification has `kind: "test"`, `rule.id: "test"`, `rule.severity: "info"` and
//! `alert.broker: "warren"`. Any 2xx answer counts as delivered; the answer's body is ignored.
//!
//! # Slack and email
//!
//! Slack-compatible webhooks (Slack, Mattermost, Rocket.Chat) get `{"text": "..."}`: the
//! summary, the description and a link to the dashboard, escaped for Slack's markup, with the
//! `Idempotency-Key` header. Email is plain text with the summary as subject; the body lists
//! rule, severity, alert, value, threshold, time and note; its `Message-ID` is
//! `<idempotency key@warren>`.
//!
//! # Alertmanager
//!
//! An `alertmanager` channel posts to `{url}/api/v2/alerts` (API v2) a JSON array of alerts:
//!
//! - `labels`: `alertname` (the rule's name: Alertmanager's default templates title by it),
//!   `severity`, `broker`, `vhost`, `queue` and `node` where the alert has them, `rule_id` (stable
//!   across a rename, for routes), `source = "warren"`, and the channel's static `labels`, which
//!   cannot replace these.
//! - `annotations`: `summary` (the one-line summary without `[FIRING]`), `description`, `value`
//!   and `threshold` where there is one, `note` where an alert ended other than by its condition.
//! - `generatorURL`: the dashboard link, when warren knows its public address.
//! - `startsAt` (when it fired) and `endsAt`: for a firing, reminder or test alert, four
//!   `resend_secs` from the moment it is sent; for a resolve, when it resolved (and no
//!   `startsAt`: Alertmanager merges it into the alert it holds, keeping that one's start).
//!
//! Alertmanager holds an alert as a lease: a client must re-send what still fires, and an alert
//! past its `endsAt` (or, without one, not re-sent within `resolve_timeout`, 5 min by default)
//! resolves by itself. Reminders come every `alert_repeat_secs` (4 h), far too rarely, so:
//!
//! - Firing, reminder and resolved notifications go through the outbox like every channel's, so
//!   a firing or a resolve survives a restart and is retried while Alertmanager is down.
//! - In addition, the channel's own task re-sends every `resend_secs` (60 s by default, as
//!   Prometheus) every alert that fires now and whose firing was told, read from the alert
//!   store, in one request, outside the outbox and the delivery log (it would be a row a minute,
//!   and a lost re-send is replaced by the next). Running it in the channel's task, between two
//!   deliveries, orders it with them: a re-send read before a resolve was committed is posted
//!   before that resolve, never after, where it would make the alert active again.
//! - Each send leases the alert for four resend intervals (Prometheus's choice: three lost
//!   re-sends in a row do not resolve it). If warren dies, nobody re-sends, and Alertmanager
//!   resolves its alerts within four intervals by itself rather than keep them for ever; after a
//!   restart the task re-sends at once.
//! - A warren silence does not stop the re-sending of an alert already told: letting it lapse
//!   would make Alertmanager report it resolved while it fires. Silence it in Alertmanager.
//! - The "send test notification" button posts an alert with the test labels (`rule_id = "test"`,
//!   `severity = "info"`, `broker = "warren"`) that is never re-sent and ends by itself after
//!   four resend intervals.

mod alertmanager;
mod channel;
mod dispatch;
mod log;
mod message;
mod outbox;
mod send;

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

pub use alertmanager::{AlertSource, AlertmanagerSettings};
pub use channel::{ChannelKind, ChannelView, EmailSettings, NotificationChannel, SmtpSecurity};
pub use dispatch::{DeliveryPolicy, Dispatcher, REPLICAS_UNKNOWN_CHANNEL_GRACE};
pub use log::{deliveries_before, prune, recent_deliveries, record, record_in, DeliveryRecord, LogEntry, Outcome};
pub use message::WEBHOOK_VERSION;
pub use outbox::{pending_deliveries, PendingDelivery};
pub use send::{send, Delivered, DeliveryError, DEFAULT_ATTEMPT_TIMEOUT, IDEMPOTENCY_KEY_HEADER};

use super::{AlertKey, Comparator, Metric, Rule, Severity};
#[cfg(doc)]
use crate::{alerts::store, config::Secret};

/// Why a notification is sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum NotificationKind {
    Firing,
    Resolved,
    /// Still firing, and the repeat interval has passed since it was last told.
    Reminder,
    /// Sent by the "send test notification" button, about no alert.
    Test,
}

impl NotificationKind {
    pub fn as_str(self) -> &'static str {
        match self {
            NotificationKind::Firing => "firing",
            NotificationKind::Resolved => "resolved",
            NotificationKind::Reminder => "reminder",
            NotificationKind::Test => "test",
        }
    }

    fn parse(text: &str) -> Option<NotificationKind> {
        use NotificationKind::*;
        [Firing, Resolved, Reminder, Test].into_iter().find(|kind| kind.as_str() == text)
    }
}

/// One thing to tell, the same for every channel; each channel renders it its own way.
///
/// Serde is the outbox's storage format (not the webhook body, see `message`): a notification
/// read back is equal to the one written, numbers and times included.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Notification {
    pub kind: NotificationKind,
    pub rule_id: String,
    pub rule_name: String,
    pub severity: Severity,
    /// `None` for a test notification.
    pub metric: Option<Metric>,
    /// `None` for `broker_unreachable` rules and tests, which compare no number.
    pub comparator: Option<Comparator>,
    #[serde(with = "exact_float")]
    pub threshold: Option<f64>,
    pub key: AlertKey,
    /// The reading behind the change; `None` when there was none (unknown, never 0).
    #[serde(with = "exact_float")]
    pub value: Option<f64>,
    /// The rule's description template filled in, or a generated sentence.
    pub description: String,
    pub at: DateTime<Utc>,
    /// Why an alert ended other than by its condition ("queue deleted", "rule removed").
    pub note: Option<String>,
    /// A link to the alert in warren, when warren knows its public address.
    pub dashboard_url: Option<String>,
}

impl Notification {
    /// A notification about one alert of `rule`.
    pub fn for_rule(
        kind: NotificationKind,
        rule: &Rule,
        key: AlertKey,
        value: Option<f64>,
        at: DateTime<Utc>,
        note: Option<String>,
    ) -> Notification {
        Notification {
            kind,
            rule_id: rule.id.clone(),
            rule_name: rule.name.clone(),
            severity: rule.severity,
            metric: Some(rule.metric),
            comparator: rule.comparator,
            threshold: rule.threshold,
            description: rule.describe(&key, value),
            key,
            value,
            at,
            note,
            dashboard_url: None,
        }
    }

    /// The name of this notification on the channel `channel_id`, for its receiver to drop a
    /// duplicate by: delivery is at least once (an attempt cut short, a replica that died or
    /// stalled mid-attempt, and another process makes it again). It is the same for every
    /// attempt and every replica, since it is derived from what the notification is, not from
    /// who sends it or when: a hash of the channel id, the kind, the rule id, the alert key and
    /// the time of the change (`at`, to the nanosecond), 32 hexadecimal digits. The channel is in
    /// it because each channel is told on its own: two channels to one receiver are two
    /// deliveries, not a duplicate.
    pub fn idempotency_key(&self, channel_id: &str) -> String {
        use sha2::{Digest, Sha256};
        let at = self.at.to_rfc3339_opts(chrono::SecondsFormat::Nanos, true);
        // JSON, so that no field's text can run into the next one's.
        let named = serde_json::to_string(&(channel_id, self.kind, &self.rule_id, &self.key, at))
            .expect("a notification's name is plain data");
        let digest = Sha256::digest(named.as_bytes());
        digest[..16].iter().map(|byte| format!("{byte:02x}")).collect()
    }

    /// What the "send test notification" button sends: about no alert, with the placeholder
    /// rule and broker the module docs list.
    pub fn test(at: DateTime<Utc>) -> Notification {
        Notification {
            kind: NotificationKind::Test,
            rule_id: "test".to_string(),
            rule_name: "Test notification".to_string(),
            severity: Severity::Info,
            metric: None,
            comparator: None,
            threshold: None,
            key: AlertKey::broker("warren"),
            value: None,
            description: "This is a test notification from warren: this channel works.".to_string(),
            at,
            note: None,
            dashboard_url: None,
        }
    }
}

/// Numbers as Rust writes them: the shortest text that parses back to the same bits, NaN and
/// infinities included. serde_json's own float parsing can be off by one unit in the last place
/// (unless its `float_roundtrip` feature, which would slow down every poll's parsing), and it
/// writes NaN as `null`, which would read back as "no value".
mod exact_float {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    pub fn serialize<S: Serializer>(value: &Option<f64>, serializer: S) -> Result<S::Ok, S::Error> {
        value.map(|v| v.to_string()).serialize(serializer)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<f64>, D::Error> {
        Option::<String>::deserialize(deserializer)?
            .map(|text| text.parse().map_err(serde::de::Error::custom))
            .transpose()
    }
}

/// Whether a firing alert last told at `last_sent` is due a reminder at `now`, given the
/// repeat interval. A `repeat` too large for a date never comes due.
pub fn reminder_due(last_sent: DateTime<Utc>, repeat: Duration, now: DateTime<Utc>) -> bool {
    chrono::Duration::from_std(repeat).is_ok_and(|repeat| now - last_sent >= repeat)
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;

    use super::*;

    #[test]
    fn a_reminder_is_due_once_the_repeat_interval_has_passed() {
        let sent = Utc.with_ymd_and_hms(2025, 5, 1, 12, 0, 0).unwrap();
        let hour = Duration::from_secs(3600);
        assert!(!reminder_due(sent, hour, sent));
        assert!(!reminder_due(sent, hour, sent + chrono::Duration::seconds(3599)));
        assert!(reminder_due(sent, hour, sent + chrono::Duration::seconds(3600)));
        assert!(reminder_due(sent, hour, sent + chrono::Duration::days(2)));
        // A clock that went backwards is not a reason to remind.
        assert!(!reminder_due(sent, hour, sent - chrono::Duration::seconds(10)));
        assert!(!reminder_due(sent, Duration::MAX, sent + chrono::Duration::days(10_000)));
    }

    #[test]
    fn a_notification_reads_back_exactly_as_written() {
        let rule: Rule = serde_json::from_value(serde_json::json!({"id": "r", "name": "R", "metric": "ready",
            "comparator": ">", "threshold": 0.1 + 0.2, "severity": "warning"}))
        .unwrap();
        let at = Utc.with_ymd_and_hms(2025, 5, 1, 12, 0, 0).unwrap() + chrono::Duration::nanoseconds(123_456_789);
        let key = AlertKey::queue("main", "/", "orders");
        let mut n =
            Notification::for_rule(NotificationKind::Resolved, &rule, key, Some(2.2250738585072014e-308), at, None);
        n.note = Some("queue deleted".to_string());
        n.dashboard_url = Some("http://warren.example/queues/main/%2F/orders".to_string());
        let back: Notification = serde_json::from_str(&serde_json::to_string(&n).unwrap()).unwrap();
        assert_eq!(back, n);
        assert_eq!(back.threshold.map(f64::to_bits), Some((0.1f64 + 0.2).to_bits()));

        let mut odd = Notification::test(at);
        odd.value = Some(f64::INFINITY);
        let back: Notification = serde_json::from_str(&serde_json::to_string(&odd).unwrap()).unwrap();
        assert_eq!(back, odd);
        odd.value = Some(f64::NAN);
        let back: Notification = serde_json::from_str(&serde_json::to_string(&odd).unwrap()).unwrap();
        assert!(back.value.is_some_and(f64::is_nan), "NaN is not read back as no value: {back:?}");
    }

    #[test]
    fn the_idempotency_key_names_the_notification_and_its_channel() {
        let rule: Rule = serde_json::from_value(serde_json::json!({"id": "r", "name": "R", "metric": "ready",
            "comparator": ">", "threshold": 10.0, "severity": "warning"}))
        .unwrap();
        let at = Utc.with_ymd_and_hms(2025, 5, 1, 12, 0, 0).unwrap();
        let n =
            Notification::for_rule(NotificationKind::Firing, &rule, AlertKey::queue("main", "/", "a"), None, at, None);
        let key = n.idempotency_key("hook");
        assert_eq!(key.len(), 32);
        assert!(key.bytes().all(|b| b.is_ascii_hexdigit()), "{key}");
        // Read back from the outbox (as another replica does) and with another reading: the same.
        let back: Notification = serde_json::from_str(&serde_json::to_string(&n).unwrap()).unwrap();
        assert_eq!(back.idempotency_key("hook"), key);
        assert_eq!(Notification { value: Some(37.0), ..n.clone() }.idempotency_key("hook"), key);
        // Another channel, kind, alert or change: another key.
        let others = [
            n.idempotency_key("pager"),
            Notification { kind: NotificationKind::Resolved, ..n.clone() }.idempotency_key("hook"),
            Notification { key: AlertKey::queue("main", "/", "b"), ..n.clone() }.idempotency_key("hook"),
            Notification { at: at + chrono::Duration::nanoseconds(1), ..n.clone() }.idempotency_key("hook"),
        ];
        for other in others {
            assert_ne!(other, key);
        }
    }

    #[test]
    fn kinds_serialize_as_their_names() {
        for kind in
            [NotificationKind::Firing, NotificationKind::Resolved, NotificationKind::Reminder, NotificationKind::Test]
        {
            assert_eq!(serde_json::to_value(kind).unwrap(), kind.as_str());
        }
    }
}
