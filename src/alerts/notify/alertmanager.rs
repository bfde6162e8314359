//! Prometheus Alertmanager as a channel: its settings, the alerts warren posts to
//! `POST {url}/api/v2/alerts`, and which alerts are re-sent to keep them active there.
//!
//! Alertmanager treats an alert as a lease: a client re-sends what still fires, and an alert whose
//! `endsAt` passes (or, without one, that is not re-sent within `resolve_timeout`) resolves by
//! itself. warren's own reminders come every few hours, so the channel's task re-sends every
//! firing alert it was told about every `resend_secs` (see `dispatch`), with `endsAt` four resend
//! intervals ahead as Prometheus does. See the module docs of `notify` for why.

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::{DateTime, SecondsFormat, Utc};
use serde::{Deserialize, Serialize};

use super::channel::NotificationChannel;
use super::message::{format_value, headline, severity_name};
use super::{Notification, NotificationKind};
use crate::alerts::runner::dashboard_url;
use crate::alerts::{store, AlertPhase, FieldError, Rule};
use crate::config::Secret;
use crate::storage::Store;

/// The labels warren sets itself; static labels of a channel cannot replace them, or two alerts
/// could share a fingerprint.
pub const WARREN_LABELS: [&str; 8] = ["alertname", "severity", "broker", "vhost", "queue", "node", "rule_id", "source"];

/// How many resend intervals ahead a firing alert's `endsAt` is: Prometheus's choice, so that
/// three lost re-sends in a row do not resolve it, and a warren that died lets it go minutes later.
const RESENDS_PER_LEASE: u32 = 4;

/// An Alertmanager and what warren adds to its alerts.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AlertmanagerSettings {
    /// The base address (`http://alertmanager:9093`, or with its path prefix); warren adds
    /// `/api/v2/alerts`. A user and password in it are sent as basic authentication, so it is a
    /// secret like a webhook URL.
    #[serde(deserialize_with = "super::channel::secret")]
    pub url: Secret,
    /// Labels added to every alert (`team = "ops"`), for Alertmanager's routes.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// How often the alerts that still fire are sent again (Prometheus: every minute).
    #[serde(default = "default_resend_secs")]
    pub resend_secs: u64,
}

fn default_resend_secs() -> u64 {
    60
}

impl AlertmanagerSettings {
    pub fn resend_interval(&self) -> Duration {
        Duration::from_secs(self.resend_secs)
    }

    /// `POST` goes here.
    pub(super) fn alerts_url(&self) -> Secret {
        Secret::new(format!("{}/api/v2/alerts", self.url.expose().trim_end_matches('/')))
    }

    /// Problems with the settings other than the URL's scheme and host, by field.
    pub(super) fn problems(&self) -> Vec<FieldError> {
        let mut errors = Vec::new();
        let mut error = |field: &'static str, message: String| errors.push(FieldError { field, message });
        if let Ok(url) = reqwest::Url::parse(self.url.expose()) {
            if url.query().is_some() || url.fragment().is_some() {
                error("url", "must be Alertmanager's base address, without query or fragment".to_string());
            } else if url.path().trim_end_matches('/').ends_with("/api/v2/alerts") {
                error("url", "must be Alertmanager's base address: warren adds /api/v2/alerts".to_string());
            }
        }
        for (name, value) in &self.labels {
            if !is_label_name(name) {
                error("labels", format!("{name:?} is not a label name (letters, digits and _, not first a digit)"));
            } else if name.starts_with("__") {
                error("labels", format!("{name:?}: names starting with __ are reserved"));
            } else if WARREN_LABELS.contains(&name.as_str()) {
                error("labels", format!("{name:?} is set by warren"));
            } else if value.is_empty() {
                // Alertmanager, like Prometheus, reads an empty value as no label.
                error("labels", format!("{name:?} needs a value"));
            }
        }
        if !(1..=3600).contains(&self.resend_secs) {
            error("resend_secs", "must be from 1 to 3600".to_string());
        }
        errors
    }
}

fn is_label_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// One alert of API v2's `postableAlerts`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct PostableAlert {
    labels: BTreeMap<String, String>,
    annotations: BTreeMap<&'static str, String>,
    /// Absent for a resolve: Alertmanager then takes `endsAt`, and merging with the alert it
    /// holds keeps that one's start.
    #[serde(skip_serializing_if = "Option::is_none")]
    starts_at: Option<String>,
    ends_at: String,
    #[serde(rename = "generatorURL", skip_serializing_if = "Option::is_none")]
    generator_url: Option<String>,
}

/// The body of `POST /api/v2/alerts` for `alerts`, sent at `now`: a firing, reminder or test
/// alert is active until four resend intervals from now, a resolved one ended when it resolved.
pub(super) fn body(settings: &AlertmanagerSettings, alerts: &[Notification], now: DateTime<Utc>) -> serde_json::Value {
    let lease = chrono::Duration::from_std(settings.resend_interval() * RESENDS_PER_LEASE)
        .unwrap_or(chrono::Duration::minutes(4));
    let time = |t: DateTime<Utc>| t.to_rfc3339_opts(SecondsFormat::Millis, true);
    let alerts: Vec<PostableAlert> = alerts
        .iter()
        .map(|n| {
            let (starts_at, ends_at) = match n.kind {
                NotificationKind::Resolved => (None, n.at),
                _ => (Some(n.at.min(now)), now + lease),
            };
            PostableAlert {
                labels: labels(settings, n),
                annotations: annotations(n),
                starts_at: starts_at.map(time),
                ends_at: time(ends_at),
                generator_url: n.dashboard_url.clone(),
            }
        })
        .collect();
    serde_json::to_value(alerts).expect("alerts are plain data")
}

/// What identifies the alert (its fingerprint) and routes it: the channel's static labels, then
/// warren's. `alertname` is the rule's name, as Alertmanager's default templates title by it;
/// routes that must survive a rename use `rule_id`.
fn labels(settings: &AlertmanagerSettings, n: &Notification) -> BTreeMap<String, String> {
    let mut labels = settings.labels.clone();
    let key = &n.key;
    let ours = [
        ("alertname", Some(n.rule_name.as_str())),
        ("severity", Some(severity_name(n.severity))),
        ("broker", Some(key.broker.as_str())),
        ("vhost", key.vhost.as_deref()),
        ("queue", key.queue.as_deref()),
        ("node", key.node.as_deref()),
        ("rule_id", Some(n.rule_id.as_str())),
        ("source", Some("warren")),
    ];
    for (name, value) in ours {
        if let Some(value) = value.filter(|v| !v.is_empty()) {
            labels.insert(name.to_string(), value.to_string());
        }
    }
    labels
}

/// What people read: the summary line (without the `[FIRING]` mark, Alertmanager says the
/// state), the description, and the reading against the threshold where there is one.
fn annotations(n: &Notification) -> BTreeMap<&'static str, String> {
    let mut annotations = BTreeMap::from([("summary", headline(n)), ("description", n.description.clone())]);
    if let Some(value) = n.value {
        annotations.insert("value", format_value(Some(value)));
    }
    if let (Some(comparator), Some(threshold)) = (n.comparator, n.threshold) {
        annotations.insert("threshold", format!("{} {}", comparator.as_str(), format_value(Some(threshold))));
    }
    if let Some(note) = &n.note {
        annotations.insert("note", note.clone());
    }
    annotations
}

/// Where the firing alerts come from: the rules of the config file (the database's are read at
/// each re-send) and warren's public address for the links; and which replica re-sends.
#[derive(Debug, Clone, Default)]
pub struct AlertSource {
    pub config_rules: Vec<Rule>,
    pub public_url: Option<reqwest::Url>,
    /// Re-sends go out only while this replica holds the housekeeping lease: one replica
    /// re-sends, not every one (Alertmanager would merge them, at N times the requests). `None`:
    /// this process re-sends (tests).
    pub resend_under: Option<std::sync::Arc<crate::replicas::Replica>>,
}

/// The alerts to re-send on `channel`: those firing now whose firing was told (queued for the
/// channels), as reminders that started when they fired. A silence does not stop re-sending an
/// alert already told: letting it lapse would make Alertmanager report it resolved while it
/// still fires; muting it there is an Alertmanager silence's job.
pub(super) async fn still_firing(
    db: &Store,
    source: &AlertSource,
    channel: &NotificationChannel,
) -> Result<Vec<Notification>, sqlx::Error> {
    let rules = store::all_rules(&source.config_rules, db).await?;
    let states = store::states(db).await?;
    let firing = states.into_iter().filter(|s| s.state.phase == AlertPhase::Firing && s.queued_at.is_some());
    Ok(firing
        .filter_map(|s| {
            let rule = &rules.iter().find(|r| r.rule.id == s.state.rule_id)?.rule;
            let state = s.state;
            let started = state.fired_at.unwrap_or(state.active_since);
            let link = source.public_url.as_ref().map(|base| dashboard_url(base, &state.key));
            let mut n =
                Notification::for_rule(NotificationKind::Reminder, rule, state.key, state.last_value, started, None);
            n.dashboard_url = link;
            Some(n)
        })
        .filter(|n| channel.wants(n))
        .collect())
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;
    use serde_json::json;

    use super::*;
    use crate::alerts::{AlertKey, Comparator, Metric, Scope, Severity};

    fn settings() -> AlertmanagerSettings {
        AlertmanagerSettings {
            url: Secret::new("http://alertmanager:9093"),
            labels: BTreeMap::from([("team".to_string(), "ops".to_string())]),
            resend_secs: 60,
        }
    }

    fn firing(at: DateTime<Utc>) -> Notification {
        let rule = Rule {
            id: "orders-backlog".to_string(),
            name: "Orders backlog".to_string(),
            scope: Scope::default(),
            metric: Metric::Ready,
            comparator: Some(Comparator::Gt),
            threshold: Some(10.0),
            for_secs: 0,
            keep_firing_for_secs: 0,
            severity: Severity::Critical,
            description: None,
        };
        let mut n = Notification::for_rule(
            NotificationKind::Firing,
            &rule,
            AlertKey::queue("main", "/", "orders"),
            Some(37.0),
            at,
            None,
        );
        n.dashboard_url = Some("http://warren.example/queues/main/%2F/orders".to_string());
        n
    }

    #[test]
    fn a_firing_alert_carries_labels_annotations_the_link_and_a_lease_of_four_resends() {
        let fired = Utc.with_ymd_and_hms(2025, 5, 1, 12, 0, 0).unwrap();
        let now = fired + chrono::Duration::seconds(30);
        assert_eq!(
            body(&settings(), &[firing(fired)], now),
            json!([{
                "labels": {
                    "alertname": "Orders backlog", "severity": "critical", "broker": "main", "vhost": "/",
                    "queue": "orders", "rule_id": "orders-backlog", "source": "warren", "team": "ops"
                },
                "annotations": {
                    "summary": "Orders backlog (critical): queue 'orders' (vhost '/', broker 'main'): ready 37 (threshold > 10)",
                    "description": "Orders backlog: ready is 37 (> 10) for queue 'orders' (vhost '/', broker 'main')",
                    "value": "37",
                    "threshold": "> 10"
                },
                "startsAt": "2025-05-01T12:00:00.000Z",
                "endsAt": "2025-05-01T12:04:30.000Z",
                "generatorURL": "http://warren.example/queues/main/%2F/orders"
            }])
        );
    }

    #[test]
    fn a_resolve_ends_when_it_resolved_and_a_broker_alert_has_no_queue_labels() {
        let resolved_at = Utc.with_ymd_and_hms(2025, 5, 1, 12, 10, 0).unwrap();
        let mut n = firing(resolved_at);
        n.kind = NotificationKind::Resolved;
        n.key = AlertKey::broker("main");
        n.value = None;
        n.dashboard_url = None;
        n.note = Some("rule removed".to_string());
        let sent = body(&settings(), &[n], resolved_at + chrono::Duration::minutes(3));
        let alert = &sent[0];
        assert_eq!(alert["endsAt"], "2025-05-01T12:10:00.000Z");
        assert!(alert.get("startsAt").is_none() && alert.get("generatorURL").is_none(), "{alert}");
        assert!(alert["labels"].get("queue").is_none() && alert["labels"].get("vhost").is_none(), "{alert}");
        assert!(alert["annotations"].get("value").is_none(), "unknown is no value, never 0: {alert}");
        assert_eq!(alert["annotations"]["note"], "rule removed");
    }

    #[test]
    fn static_labels_cannot_replace_warrens_and_must_be_label_names() {
        let problems = |labels: &[(&str, &str)], resend_secs: u64| {
            let labels = labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
            AlertmanagerSettings { labels, resend_secs, ..settings() }.problems().len()
        };
        assert_eq!(problems(&[("team", "ops"), ("_env", "prod")], 60), 0);
        for bad in [("severity", "x"), ("9lives", "x"), ("a-b", "x"), ("__name__", "x"), ("team", "")] {
            assert_eq!(problems(&[bad], 60), 1, "{bad:?}");
        }
        assert_eq!(problems(&[], 0), 1);
        assert_eq!(problems(&[], 3601), 1);
        let with_url = |url: &str| AlertmanagerSettings { url: Secret::new(url), ..settings() }.problems().len();
        assert_eq!(with_url("https://user:pw@am.example/prefix/"), 0);
        assert_eq!(with_url("http://am:9093/api/v2/alerts"), 1);
        assert_eq!(with_url("http://am:9093/?x=1"), 1);
        assert_eq!(settings().alerts_url().expose(), "http://alertmanager:9093/api/v2/alerts");
        let prefixed = AlertmanagerSettings { url: Secret::new("https://am.example/am/"), ..settings() };
        assert_eq!(prefixed.alerts_url().expose(), "https://am.example/am/api/v2/alerts");
    }
}
