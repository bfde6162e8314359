//! Alert rules, states, history and silences, kept through the storage interface. Rules from the config file are not
//! stored: they are read from the configuration at every start.

use std::collections::HashSet;

use super::{AlertKey, AlertState, Rule, Transition};
use crate::storage::alerts::{NewSilence, TransitionRow};
use crate::storage::{Store, Transaction};
use chrono::{DateTime, Utc};
use serde::Serialize;

/// Where a rule comes from: the config file (read-only) or the UI and API.
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq, utoipa::ToSchema)]
#[schema(as = RuleSource)]
#[serde(rename_all = "lowercase")]
pub enum Source {
    Config,
    Api,
    /// warren's own rule: a broker that does not answer is an alert even when nobody wrote a
    /// rule for it (missing data never fires queue alerts, so without it an outage says nothing).
    Builtin,
}

/// The id of the built-in rule; writing any `broker_unreachable` rule replaces it.
pub const BUILTIN_UNREACHABLE: &str = "builtin-broker-unreachable";
/// The built-in rule on custody intake; any `custody_intake_stopped` rule replaces it.
pub const BUILTIN_INTAKE_STOPPED: &str = "builtin-custody-intake-stopped";

/// The built-in rule on redelivery loops; any `redelivery_loop_secs` rule replaces it.
pub const BUILTIN_REDELIVERY_LOOP: &str = "builtin-redelivery-loop";

/// A queue whose deliveries all come back unacked processes nothing while its consumers look
/// busy, and its backlog grows behind the poison messages at its head (issue 31, case 1). The
/// loop is flagged after 30 s; two minutes more of it, and someone should look.
fn builtin_redelivery_loop() -> Rule {
    serde_json::from_value(serde_json::json!({
        "id": BUILTIN_REDELIVERY_LOOP, "name": "Redelivery loop: deliveries come back, nothing is acked",
        "metric": "redelivery_loop_secs", "comparator": ">", "threshold": 0, "for_secs": 120, "severity": "warning",
    }))
    .expect("the built-in rule is valid")
}

/// The built-in rule on blocked connections; any `blocked_connections` rule replaces it.
pub const BUILTIN_BLOCKED_CONNECTIONS: &str = "builtin-blocked-connections";

/// Publishers blocked by a resource alarm or flow control lose no message but stop publishing:
/// an application stalls while every queue looks fine (issue 20). A minute, because flow
/// control blocks a connection for moments during ordinary bursts.
fn builtin_blocked_connections() -> Rule {
    serde_json::from_value(serde_json::json!({
        "id": BUILTIN_BLOCKED_CONNECTIONS, "name": "Blocked connections", "metric": "blocked_connections",
        "comparator": ">", "threshold": 0, "for_secs": 60, "severity": "warning",
    }))
    .expect("the built-in rule is valid")
}

/// A custody intake that stopped leaves dead letters in the broker and says why on the DLQ
/// page; this makes sure someone hears of it (issue 18, must-have 2). A minute, because a
/// stopped intake is tried again after 30 s and may recover.
fn builtin_intake_stopped() -> Rule {
    serde_json::from_value(serde_json::json!({
        "id": BUILTIN_INTAKE_STOPPED, "name": "Custody intake stopped", "metric": "custody_intake_stopped",
        "comparator": ">", "threshold": 0, "for_secs": 60, "severity": "warning",
    }))
    .expect("the built-in rule is valid")
}

fn builtin_unreachable() -> Rule {
    serde_json::from_value(serde_json::json!({
        "id": BUILTIN_UNREACHABLE, "name": "Broker unreachable", "metric": "broker_unreachable",
        "for_secs": 60, "severity": "critical",
    }))
    .expect("the built-in rule is valid")
}

/// The built-in node rules (issue 20): what the official RabbitMQ alerts and CloudAMQP's warn of
/// by default. Each exists while no rule on its metric was written; a rule of one's own on the
/// metric (with a threshold never reached, to switch it off) replaces it.
pub fn builtin_node_rules() -> Vec<Rule> {
    let rule = |id: &str, name: &str, metric: &str, comparator: &str, threshold: f64, for_secs: i64, severity: &str| {
        serde_json::from_value::<Rule>(serde_json::json!({
            "id": id, "name": name, "metric": metric, "comparator": comparator, "threshold": threshold,
            "for_secs": for_secs, "severity": severity,
        }))
        .expect("the built-in rule is valid")
    };
    vec![
        rule("builtin-node-down", "Node down", "node_down", ">", 0.0, 30, "critical"),
        rule("builtin-memory-alarm", "Memory alarm: publishers blocked", "memory_alarm", ">", 0.0, 0, "critical"),
        rule("builtin-disk-alarm", "Disk alarm: publishers blocked", "disk_alarm", ">", 0.0, 0, "critical"),
        rule("builtin-fd-used", "File descriptors above 90%", "fd_used_ratio", ">", 0.9, 300, "warning"),
        rule("builtin-partition", "Network partition", "partitions", ">", 0.0, 0, "critical"),
        // The line is fitted over the rule's `for_secs` (at least 10 minutes: `alerts::nodes`).
        rule(
            "builtin-disk-predicted",
            "Disk predicted to reach its limit within 1 h",
            "disk_free_predicted_secs",
            "<",
            3600.0,
            600,
            "warning",
        ),
    ]
}

#[derive(Debug, Clone, Serialize)]
pub struct StoredRule {
    #[serde(flatten)]
    pub rule: Rule,
    pub source: Source,
}

fn key_json(key: &AlertKey) -> String {
    serde_json::to_string(key).expect("keys serialise")
}

/// Rules created in the UI or the API, by id.
pub async fn api_rules(store: &Store) -> Result<Vec<Rule>, sqlx::Error> {
    let rows = store.rules().await?;
    let mut rules = Vec::with_capacity(rows.len());
    for row in rows {
        let id = row.id;
        match serde_json::from_str::<Rule>(&row.definition) {
            Ok(rule) => rules.push(rule),
            // A rule written by another version of warren: skip it rather than stop alerting.
            Err(e) => tracing::error!(rule = %id, error = %e, "a stored alert rule cannot be read; it is ignored"),
        }
    }
    Ok(rules)
}

/// The config file's rules, then the stored ones.
pub async fn all_rules(config_rules: &[Rule], store: &Store) -> Result<Vec<StoredRule>, sqlx::Error> {
    let mut all: Vec<StoredRule> =
        config_rules.iter().map(|r| StoredRule { rule: r.clone(), source: Source::Config }).collect();
    all.extend(api_rules(store).await?.into_iter().map(|rule| StoredRule { rule, source: Source::Api }));
    if !all.iter().any(|r| r.rule.metric == super::Metric::BrokerUnreachable) {
        all.push(StoredRule { rule: builtin_unreachable(), source: Source::Builtin });
    }
    if !all.iter().any(|r| r.rule.metric == super::Metric::CustodyIntakeStopped) {
        all.push(StoredRule { rule: builtin_intake_stopped(), source: Source::Builtin });
    }
    if !all.iter().any(|r| r.rule.metric == super::Metric::RedeliveryLoopSecs) {
        all.push(StoredRule { rule: builtin_redelivery_loop(), source: Source::Builtin });
    }
    if !all.iter().any(|r| r.rule.metric == super::Metric::BlockedConnections) {
        all.push(StoredRule { rule: builtin_blocked_connections(), source: Source::Builtin });
    }
    for builtin in builtin_node_rules() {
        if !all.iter().any(|r| r.rule.metric == builtin.metric) {
            all.push(StoredRule { rule: builtin, source: Source::Builtin });
        }
    }
    Ok(all)
}

/// Inserts or replaces a rule.
pub async fn save_rule(store: &Store, rule: &Rule) -> Result<(), sqlx::Error> {
    store.save_rule(&rule.id, &serde_json::to_string(rule).expect("rules serialise"), Utc::now().timestamp()).await
}

/// Deletes a rule; false if there was none. Its alerts end at the next evaluation.
pub async fn delete_rule(store: &Store, id: &str) -> Result<bool, sqlx::Error> {
    store.delete_rule(id).await
}

/// A pending or firing alert as stored, with its notifications.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredState {
    pub state: AlertState,
    /// When its last firing or reminder notification was planned and put in the outbox; the
    /// planner's memory of what it has told (so a firing is queued once, not after every poll).
    pub queued_at: Option<DateTime<Utc>>,
    /// When a channel last accepted a firing or reminder notification of it: only then does the
    /// alert count as notified.
    pub delivered_at: Option<DateTime<Utc>>,
}

/// The pending and firing alerts as last evaluated.
pub async fn states(store: &Store) -> Result<Vec<StoredState>, sqlx::Error> {
    let rows = store.alert_states().await?;
    let mut states = Vec::with_capacity(rows.len());
    let time = |t: Option<i64>| t.and_then(|t| DateTime::from_timestamp(t, 0));
    for row in rows {
        let (queued_at, delivered_at) = (time(row.queued_at), time(row.delivered_at));
        match serde_json::from_str(&row.state) {
            Ok(state) => states.push(StoredState { state, queued_at, delivered_at }),
            Err(e) => tracing::error!(error = %e, "a stored alert state cannot be read; it is dropped"),
        }
    }
    Ok(states)
}

/// One evaluation's result, in the caller's transaction (which also writes the evaluation's
/// notifications to the outbox): its transitions go to the history, and the stored states become
/// exactly `states`, each with when it was last queued for notification. When a channel accepted
/// one (`delivered_at`) is kept: the channels' tasks write it ([`mark_delivered`]).
///
/// Only the states of `brokers` are this evaluation's: with several replicas, each evaluates
/// the brokers whose leases it holds, and the others' stored states are theirs to change.
pub async fn record(
    tx: &mut dyn Transaction,
    transitions: &[(Transition, bool)],
    states: &[(AlertState, Option<DateTime<Utc>>)],
    brokers: &std::collections::BTreeSet<String>,
) -> Result<(), sqlx::Error> {
    for (t, silenced) in transitions {
        tx.insert_transition(TransitionRow {
            at: t.at.timestamp(),
            rule_id: &t.rule_id,
            alert_key: &key_json(&t.key),
            from_phase: phase(t.from),
            to_phase: phase(t.to),
            value: t.value,
            note: t.note.as_deref(),
            silenced: *silenced,
        })
        .await?;
    }
    // States change at most once per poll and there are few: those that ended go, the others
    // are written whole but for `delivered_at`.
    let kept: HashSet<(&str, String)> = states.iter().map(|(s, _)| (s.rule_id.as_str(), key_json(&s.key))).collect();
    let stored = tx.state_keys().await?;
    // A key that does not parse is no replica's: the one that evaluates whatever it names, or
    // none, would never delete it.
    let ours = |key: &str| serde_json::from_str::<AlertKey>(key).map_or(true, |k| brokers.contains(&k.broker));
    let ended = stored.iter().filter(|(rule_id, key)| ours(key) && !kept.contains(&(rule_id.as_str(), key.clone())));
    for (rule_id, key) in ended {
        tx.delete_state(rule_id, key).await?;
    }
    for (s, queued_at) in states {
        let state = serde_json::to_string(s).expect("states serialise");
        tx.upsert_state(&s.rule_id, &key_json(&s.key), &state, queued_at.map(|t| t.timestamp())).await?;
    }
    Ok(())
}

/// Notes that a channel accepted, at `at`, the firing or reminder notification of an alert that
/// was planned at `planned_at`. Only the latest one queued for the alert counts: one from an
/// earlier firing of the same rule and queue (resolved since, then fired again) must not mark
/// the new one as told. A firing accepted after its reminder was queued therefore waits for the
/// reminder's delivery: late, never wrong.
pub async fn mark_delivered(
    tx: &mut dyn Transaction,
    rule_id: &str,
    key: &AlertKey,
    planned_at: DateTime<Utc>,
    at: DateTime<Utc>,
) -> Result<(), sqlx::Error> {
    tx.mark_delivered(rule_id, &key_json(key), planned_at.timestamp(), at.timestamp()).await
}

fn phase(p: super::AlertPhase) -> &'static str {
    match p {
        super::AlertPhase::Inactive => "inactive",
        super::AlertPhase::Pending => "pending",
        super::AlertPhase::Firing => "firing",
        super::AlertPhase::Resolved => "resolved",
    }
}

/// Deletes phase changes older than `cutoff` (unix seconds); returns how many. The states of
/// alerts still pending or firing are not history and stay.
pub async fn prune_history(store: &Store, cutoff: i64) -> Result<u64, sqlx::Error> {
    store.prune_alert_history(cutoff).await
}

#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct HistoryEntry {
    pub id: i64,
    pub at: DateTime<Utc>,
    pub rule_id: String,
    pub key: serde_json::Value,
    pub from: String,
    pub to: String,
    pub value: Option<f64>,
    pub note: Option<String>,
    pub silenced: bool,
}

/// The newest phase changes below the id `before` (all: none), newest first.
pub async fn history(store: &Store, before: Option<i64>, limit: i64) -> Result<Vec<HistoryEntry>, sqlx::Error> {
    let rows = store.alert_history(before.unwrap_or(i64::MAX), limit).await?;
    Ok(rows
        .into_iter()
        .map(|r| HistoryEntry {
            id: r.id,
            at: DateTime::from_timestamp(r.at, 0).unwrap_or_default(),
            rule_id: r.rule_id,
            key: serde_json::from_str(&r.alert_key).unwrap_or(serde_json::Value::String(r.alert_key)),
            from: r.from_phase,
            to: r.to_phase,
            value: r.value,
            note: r.note,
            silenced: r.silenced,
        })
        .collect())
}

/// A silence: notifications of a rule (or of one of its alerts, or of every rule) are held back
/// until a time. Alerts still change phase and show in the dashboard.
#[derive(Debug, Clone, Serialize, serde::Deserialize, utoipa::ToSchema)]
pub struct Silence {
    #[serde(default)]
    pub id: i64,
    pub rule_id: Option<String>,
    pub key: Option<AlertKey>,
    pub until: DateTime<Utc>,
    pub comment: String,
    #[serde(default)]
    pub created_by: String,
    #[serde(default = "Utc::now")]
    pub created_at: DateTime<Utc>,
}

impl Silence {
    pub fn covers(&self, rule_id: &str, key: &AlertKey, now: DateTime<Utc>) -> bool {
        self.until > now
            && self.rule_id.as_deref().is_none_or(|r| r == rule_id)
            && self.key.as_ref().is_none_or(|k| k == key)
    }
}

pub async fn add_silence(store: &Store, s: &Silence) -> Result<i64, sqlx::Error> {
    let key = s.key.as_ref().map(key_json);
    store
        .insert_silence(NewSilence {
            rule_id: s.rule_id.as_deref(),
            alert_key: key.as_deref(),
            // Whole seconds, rounded up: a silence asked to last until 12:00:07.4 must not end at
            // 07.0 and let a notification out early.
            until: s.until.timestamp() + i64::from(s.until.timestamp_subsec_nanos() > 0),
            comment: &s.comment,
            created_by: &s.created_by,
            created_at: s.created_at.timestamp(),
        })
        .await
}

/// Ends a silence now; false if there was none.
pub async fn expire_silence(store: &Store, id: i64) -> Result<bool, sqlx::Error> {
    store.end_silence(id, Utc::now().timestamp()).await
}

/// Silences that have not ended (`active_only`) or the newest 200, newest first.
pub async fn silences(store: &Store, active_only: bool) -> Result<Vec<Silence>, sqlx::Error> {
    let rows = store.silences(if active_only { Utc::now().timestamp() } else { i64::MIN }).await?;
    Ok(rows
        .into_iter()
        .map(|r| Silence {
            id: r.id,
            rule_id: r.rule_id,
            key: r.alert_key.and_then(|k| serde_json::from_str(&k).ok()),
            until: DateTime::from_timestamp(r.until, 0).unwrap_or_default(),
            comment: r.comment,
            created_by: r.created_by,
            created_at: DateTime::from_timestamp(r.created_at, 0).unwrap_or_default(),
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_built_in_rules_exist_unless_one_on_their_metric_was_written() {
        let dir = tempfile::tempdir().unwrap();
        let db = crate::storage::sqlite::store(crate::history::open(&dir.path().join("w.db")).await.unwrap());
        let rules = all_rules(&[], &db).await.unwrap();
        // The node rules have a test of their own.
        let ids = |rules: &[StoredRule]| {
            rules.iter().filter(|r| !r.rule.metric.is_node()).map(|r| r.rule.id.clone()).collect::<Vec<_>>()
        };
        assert_eq!(
            ids(&rules),
            vec![BUILTIN_UNREACHABLE, BUILTIN_INTAKE_STOPPED, BUILTIN_REDELIVERY_LOOP, BUILTIN_BLOCKED_CONNECTIONS]
        );
        assert!(rules.iter().all(|r| r.source == Source::Builtin && r.rule.validate().is_empty()));
        let own: Rule = serde_json::from_value(serde_json::json!({"id": "down", "name": "Down",
            "metric": "broker_unreachable", "for_secs": 10, "severity": "warning"}))
        .unwrap();
        save_rule(&db, &own).await.unwrap();
        let rules = all_rules(&[], &db).await.unwrap();
        assert_eq!(
            ids(&rules),
            vec!["down", BUILTIN_INTAKE_STOPPED, BUILTIN_REDELIVERY_LOOP, BUILTIN_BLOCKED_CONNECTIONS]
        );
        let own: Rule = serde_json::from_value(serde_json::json!({"id": "intake", "name": "Intake",
            "metric": "custody_intake_stopped", "comparator": ">", "threshold": 0, "severity": "critical"}))
        .unwrap();
        save_rule(&db, &own).await.unwrap();
        let rules = all_rules(&[], &db).await.unwrap();
        assert_eq!(ids(&rules), vec!["down", "intake", BUILTIN_REDELIVERY_LOOP, BUILTIN_BLOCKED_CONNECTIONS]);
        let own: Rule = serde_json::from_value(serde_json::json!({"id": "blocked", "name": "Blocked",
            "metric": "blocked_connections", "comparator": ">", "threshold": 5, "severity": "info"}))
        .unwrap();
        save_rule(&db, &own).await.unwrap();
        let rules = all_rules(&[], &db).await.unwrap();
        assert_eq!(ids(&rules), vec!["blocked", "down", "intake", BUILTIN_REDELIVERY_LOOP], "stored rules come by id");
        let own: Rule = serde_json::from_value(serde_json::json!({"id": "loop", "name": "Loop",
            "metric": "redelivery_loop_secs", "comparator": ">", "threshold": 60, "severity": "critical"}))
        .unwrap();
        save_rule(&db, &own).await.unwrap();
        let rules = all_rules(&[], &db).await.unwrap();
        assert_eq!(ids(&rules), vec!["blocked", "down", "intake", "loop"]);
    }

    #[tokio::test]
    async fn the_built_in_node_rules_exist_unless_one_on_their_metric_was_written() {
        let dir = tempfile::tempdir().unwrap();
        let db = crate::storage::sqlite::store(crate::history::open(&dir.path().join("w.db")).await.unwrap());
        let builtin = |rules: &[StoredRule]| {
            rules
                .iter()
                .filter(|r| r.source == Source::Builtin && r.rule.metric.is_node())
                .map(|r| r.rule.id.clone())
                .collect::<Vec<_>>()
        };
        let rules = all_rules(&[], &db).await.unwrap();
        assert_eq!(builtin(&rules).len(), 6);
        assert!(rules.iter().all(|r| r.rule.validate().is_empty()));
        let quiet: Rule = serde_json::from_value(serde_json::json!({"id": "fds", "name": "fds",
            "metric": "fd_used_ratio", "comparator": ">", "threshold": 2, "severity": "info"}))
        .unwrap();
        save_rule(&db, &quiet).await.unwrap();
        let rules = all_rules(&[], &db).await.unwrap();
        assert!(!builtin(&rules).contains(&"builtin-fd-used".to_string()), "switched off by a rule of one's own");
        assert_eq!(builtin(&rules).len(), 5);
    }
}
