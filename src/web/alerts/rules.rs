//! What the alerts page and the alerts API both do: check and save rules, preview what a rule
//! would match, set and end silences, send a test notification, each change recorded in the
//! audit log. The handlers of both (`page.rs`, `api.rs`) call these and nothing of each other.

use serde::Serialize;
use serde_json::json;

use crate::alerts::store::{self, Silence, Source, StoredRule};
use crate::alerts::{self, AlertKey, Rule};
use crate::state::AppState;
use crate::web::error::WebError;
use crate::web::format;

/// Sends a test notification to one channel now (one attempt, recorded in the delivery log),
/// and records in the audit log who sent it and whether it was delivered.
pub async fn send_test(state: &AppState, id: &str, actor: &str) -> Result<Result<Option<u16>, String>, WebError> {
    let channel = state
        .notifier
        .channels()
        .into_iter()
        .find(|c| c.id == id)
        .ok_or_else(|| WebError::NotFound(format!("no notification channel with id {id:?}")))?;
    let sent = state.notifier.send_test(&channel).await.map(|d| d.http_status).map_err(|e| e.to_string());
    let (outcome, detail) = match &sent {
        Ok(status) => ("done", format!("sent to {id}{}", status.map(|s| format!(" (HTTP {s})")).unwrap_or_default())),
        // The error as the page shows it: the delivery code masks the channel's URL in it.
        Err(error) => ("failed", format!("to {id} not delivered: {error}")),
    };
    let request = json!({"channel": id, "type": channel.type_name()});
    audit_alerts(state, actor, "test notification", request, outcome, detail).await?;
    Ok(sent)
}

/// Records a change to the alerts' settings in the audit log (kind `alerts`).
async fn audit_alerts(
    state: &AppState,
    actor: &str,
    action: &str,
    request: serde_json::Value,
    outcome: &str,
    detail: String,
) -> Result<(), WebError> {
    let change = crate::audit::AlertsChange { actor, action, request, outcome, detail };
    crate::audit::alerts(&state.store, change).await?;
    Ok(())
}

/// Checks a rule as the API and the forms receive it: its own validation, and that a broker
/// it names is configured.
pub fn check_rule(state: &AppState, rule: &Rule) -> Result<(), WebError> {
    let mut fields: Vec<(String, String)> =
        rule.validate().into_iter().map(|e| (e.field.to_string(), e.message)).collect();
    if let Some(broker) = &rule.scope.broker {
        if state.broker_config(broker).is_none() {
            fields.push(("scope.broker".to_string(), format!("no broker named {broker:?} is configured")));
        }
    }
    if fields.is_empty() {
        Ok(())
    } else {
        Err(WebError::Invalid(fields))
    }
}

pub(super) async fn find_rule(state: &AppState, id: &str) -> Result<StoredRule, WebError> {
    store::all_rules(&state.config_rules, &state.store)
        .await?
        .into_iter()
        .find(|r| r.rule.id == id)
        .ok_or_else(|| WebError::NotFound(format!("no alert rule with id {id:?}")))
}

/// Why a rule cannot be changed through the API, if it cannot.
pub fn read_only(source: Source) -> Option<&'static str> {
    match source {
        Source::Config => Some("is declared in the config file; change it there"),
        Source::Builtin => Some("is built in; write a rule of your own on its metric to replace it"),
        Source::Api => None,
    }
}

/// Creates a rule from the API or a form (`source` api), by `actor`.
pub async fn save_new_rule(state: &AppState, rule: &Rule, actor: &str) -> Result<(), WebError> {
    check_rule(state, rule)?;
    if store::all_rules(&state.config_rules, &state.store).await?.iter().any(|r| r.rule.id == rule.id) {
        return Err(WebError::Conflict(format!("a rule with id {:?} exists already", rule.id)));
    }
    store::save_rule(&state.store, rule).await?;
    let detail = format!("rule {} created: {}", rule_name(rule), condition(rule));
    audit_alerts(state, actor, "rule add", rule_request(rule), "done", detail).await
}

/// How the audit log names a rule: its name, and its id where that says something else.
fn rule_name(rule: &Rule) -> String {
    if rule.name == rule.id {
        format!("'{}'", rule.name)
    } else {
        format!("'{}' ({})", rule.name, rule.id)
    }
}

fn rule_request(rule: &Rule) -> serde_json::Value {
    json!({"id": rule.id, "name": rule.name})
}

/// What an edit changed, field by field ("threshold 100 → 500"), from the rules as the API
/// reads and writes them, so that every field, present and future, is compared.
fn rule_changes(old: &Rule, new: &Rule) -> String {
    use std::collections::{BTreeMap, BTreeSet};
    /// The rule's fields by name, the scope's as `scope.queue`, ...
    fn fields(rule: &Rule) -> BTreeMap<String, serde_json::Value> {
        let mut out = BTreeMap::new();
        if let Ok(serde_json::Value::Object(top)) = serde_json::to_value(rule) {
            for (key, value) in top {
                match value {
                    serde_json::Value::Object(inner) => {
                        out.extend(inner.into_iter().map(|(k, v)| (format!("{key}.{k}"), v)));
                    }
                    value => {
                        out.insert(key, value);
                    }
                }
            }
        }
        out
    }
    fn plain(value: Option<&serde_json::Value>) -> String {
        /// A description can run to 2000 characters; the log says how it began.
        const SHOWN_CHARS: usize = 60;
        match value {
            None | Some(serde_json::Value::Null) => "none".to_string(),
            Some(serde_json::Value::String(s)) if s.chars().count() > SHOWN_CHARS => {
                format!("'{}…'", s.chars().take(SHOWN_CHARS).collect::<String>())
            }
            Some(serde_json::Value::String(s)) => format!("'{s}'"),
            // Thresholds are f64: 100, not 100.0.
            Some(serde_json::Value::Number(n)) => match n.as_f64() {
                Some(f) if f.fract() == 0.0 && f.abs() < 1e15 => format!("{}", f as i64),
                _ => n.to_string(),
            },
            Some(other) => other.to_string(),
        }
    }
    let (old, new) = (fields(old), fields(new));
    let keys: BTreeSet<&String> = old.keys().chain(new.keys()).collect();
    let changes: Vec<String> = keys
        .into_iter()
        .filter(|key| old.get(*key) != new.get(*key))
        .map(|key| format!("{key} {} → {}", plain(old.get(key)), plain(new.get(key))))
        .collect();
    if changes.is_empty() {
        "nothing changed".to_string()
    } else {
        changes.join(", ")
    }
}

/// Replaces rule `id` (one made in the UI or the API) with `rule`, by `actor`.
pub async fn save_existing_rule(state: &AppState, id: &str, rule: &Rule, actor: &str) -> Result<(), WebError> {
    let existing = find_rule(state, id).await?;
    if let Some(why) = read_only(existing.source) {
        return Err(WebError::Conflict(format!("rule {id:?} {why}")));
    }
    if rule.id != id {
        return Err(WebError::Invalid(vec![("id".into(), format!("cannot change (it is {id:?})"))]));
    }
    check_rule(state, rule)?;
    store::save_rule(&state.store, rule).await?;
    let detail = format!("rule {} edited: {}", rule_name(&existing.rule), rule_changes(&existing.rule, rule));
    audit_alerts(state, actor, "rule edit", rule_request(rule), "done", detail).await
}

/// Deletes rule `id` (one made in the UI or the API), by `actor`; false if there was none.
pub async fn remove_rule(state: &AppState, id: &str, actor: &str) -> Result<bool, WebError> {
    let existing = match find_rule(state, id).await {
        Ok(rule) => rule,
        Err(WebError::NotFound(_)) => return Ok(false),
        Err(e) => return Err(e),
    };
    if let Some(why) = read_only(existing.source) {
        return Err(WebError::Conflict(format!("rule {id:?} {why}")));
    }
    if !store::delete_rule(&state.store, id).await? {
        return Ok(false);
    }
    let detail = format!("rule {} deleted", rule_name(&existing.rule));
    audit_alerts(state, actor, "rule delete", rule_request(&existing.rule), "done", detail).await?;
    Ok(true)
}

/// One queue (or broker) a rule covers now, with its current value.
#[derive(Debug, Serialize)]
pub struct PreviewRow {
    pub key: AlertKey,
    /// `None`: the broker did not give the value (the alert would hold, not fire).
    pub value: Option<f64>,
    /// The condition holds now (it fires once it held for the rule's `for`).
    pub holds: bool,
}

/// Which queues a rule matches now, with their values and whether the condition holds.
pub fn preview(state: &AppState, rule: &Rule) -> Vec<PreviewRow> {
    let mut rows = Vec::new();
    for broker in state.live.snapshot() {
        if !rule.scope.matches_broker(&broker.name) {
            continue;
        }
        if rule.metric == alerts::Metric::BrokerUnreachable {
            rows.push(PreviewRow {
                key: AlertKey::broker(&broker.name),
                value: None,
                holds: broker.status.up == Some(false),
            });
            continue;
        }
        if rule.metric.is_broker_level() {
            let value = alerts::broker_values(&broker).get(rule.metric);
            rows.push(PreviewRow {
                key: AlertKey::broker(&broker.name),
                value,
                holds: value.is_some_and(|v| rule.holds(v)),
            });
            continue;
        }
        if rule.metric.is_node() {
            let now = chrono::Utc::now().timestamp();
            for node in &broker.nodes.nodes {
                let value = alerts::nodes::node_value(rule, node, &broker.nodes, now);
                rows.push(PreviewRow {
                    key: AlertKey::node(&broker.name, &node.name),
                    value,
                    holds: value.is_some_and(|v| rule.holds(v)),
                });
            }
            continue;
        }
        for view in broker.queues.iter().filter(|q| !q.deleted && rule.applies_to(q)) {
            let value = alerts::value(rule.metric, view);
            rows.push(PreviewRow { key: AlertKey::of(view), value, holds: value.is_some_and(|v| rule.holds(v)) });
        }
    }
    rows
}

/// Validates and stores a silence set by `actor`.
pub async fn add_silence(state: &AppState, mut silence: Silence, actor: &str) -> Result<Silence, WebError> {
    let mut fields = Vec::new();
    if silence.until <= chrono::Utc::now() {
        fields.push(("until".to_string(), "must be in the future".to_string()));
    }
    if silence.until > chrono::Utc::now() + chrono::Duration::days(365) {
        fields.push(("until".to_string(), "must be within a year".to_string()));
    }
    if silence.comment.trim().is_empty() {
        fields.push(("comment".to_string(), "say why (it is shown to everyone)".to_string()));
    }
    if let Some(rule) = &silence.rule_id {
        if find_rule(state, rule).await.is_err() {
            fields.push(("rule_id".to_string(), format!("no alert rule with id {rule:?}")));
        }
    } else if silence.key.is_some() {
        fields.push(("rule_id".to_string(), "a silence of one alert names its rule".to_string()));
    }
    if !fields.is_empty() {
        return Err(WebError::Invalid(fields));
    }
    // The store keeps whole seconds, rounded up; the answer and the page's notice say the end
    // it keeps (issue 34, case 6: the notice said a second before the table).
    if silence.until.timestamp_subsec_nanos() > 0 {
        silence.until = chrono::DateTime::from_timestamp(silence.until.timestamp() + 1, 0).unwrap_or(silence.until);
    }
    silence.created_by = actor.to_string();
    silence.created_at = chrono::Utc::now();
    silence.id = store::add_silence(&state.store, &silence).await?;
    let request = json!({"id": silence.id, "rule_id": silence.rule_id, "key": silence.key});
    let detail = format!(
        "silence {} of {} until {}: {}",
        silence.id,
        silenced(&silence),
        format::time(Some(silence.until)),
        silence.comment.trim()
    );
    audit_alerts(state, actor, "silence add", request, "done", detail).await?;
    Ok(silence)
}

/// What a silence holds back, in words.
fn silenced(silence: &Silence) -> String {
    match (&silence.rule_id, &silence.key) {
        (None, _) => "every alert".to_string(),
        (Some(r), None) => format!("rule {r}"),
        (Some(r), Some(k)) => format!("rule {r}, {k}"),
    }
}

/// Ends silence `id` now, by `actor`; false if there was none.
pub async fn end_silence(state: &AppState, id: i64, actor: &str) -> Result<bool, WebError> {
    let silence = store::silences(&state.store, false).await?.into_iter().find(|s| s.id == id);
    if !store::expire_silence(&state.store, id).await? {
        return Ok(false);
    }
    let what = silence.as_ref().map(|s| format!(" of {}", silenced(s))).unwrap_or_default();
    let request = json!({"id": id});
    audit_alerts(state, actor, "silence end", request, "done", format!("silence {id}{what} ended")).await?;
    Ok(true)
}

/// A rule's condition in words (metric, comparison, how long), as the page and the audit log say it.
pub fn condition(rule: &Rule) -> String {
    let mut text = rule.metric.as_str().to_string();
    if let (Some(c), Some(t)) = (rule.comparator, rule.threshold) {
        text = format!("{text} {} {t}", c.as_str());
    }
    if rule.for_secs > 0 {
        text = format!("{text} for {}", format::duration(rule.for_secs as f64));
    }
    if rule.keep_firing_for_secs > 0 {
        text = format!("{text}, keep firing {}", format::duration(rule.keep_firing_for_secs as f64));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(extra: serde_json::Value) -> Rule {
        let mut rule = json!({"id": "backlog", "name": "Queue backlog", "metric": "ready", "comparator": ">",
                              "threshold": 100, "severity": "warning"});
        rule.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        serde_json::from_value(rule).unwrap()
    }

    #[test]
    fn an_edit_is_described_field_by_field() {
        let old = rule(json!({}));
        assert_eq!(rule_changes(&old, &old), "nothing changed");
        let new = rule(json!({"threshold": 500, "severity": "critical", "scope": {"vhost": "prod", "queue": "*"}}));
        assert_eq!(
            rule_changes(&old, &new),
            "scope.vhost '*' → 'prod', severity 'warning' → 'critical', threshold 100 → 500"
        );
        let described = rule(json!({"threshold": 2.5, "description": "x".repeat(2000)}));
        let text = rule_changes(&old, &described);
        assert!(text.starts_with(&format!("description none → '{}…', threshold 100 → 2.5", "x".repeat(60))), "{text}");
    }
}
