//! The alerts pending and firing now, as every view of them reads them: the API's
//! `/api/v1/alerts` (`AlertView`) and the rows of the alerts page, the overview and a queue's
//! page (`AlertRow`). Here, below the wings, so the pages of queues show their alerts without
//! importing the alerts wing.

use serde::Serialize;

use crate::alerts::{self, store, AlertKey, AlertState};
use crate::state::AppState;
use crate::web::error::WebError;
use crate::web::format;
use crate::web::links::{nodes_href, queue_href};

/// A pending or firing alert with its rule's name and severity, and whether it is silenced.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct AlertView {
    #[serde(flatten)]
    pub state: AlertState,
    pub rule_name: String,
    pub severity: Option<alerts::Severity>,
    pub silenced: bool,
    /// When a channel last accepted a firing or reminder notification of the alert; `null`
    /// until one did. (Before the outbox this was when the notification was queued; the field
    /// keeps its name and now means what it says.)
    pub notified_at: Option<chrono::DateTime<chrono::Utc>>,
    /// When the last firing or reminder notification was queued for the channels.
    pub queued_at: Option<chrono::DateTime<chrono::Utc>>,
}

/// The pending and firing alerts as of the last evaluation, firing first.
pub async fn current_alerts(state: &AppState) -> Result<Vec<AlertView>, WebError> {
    let silences = store::silences(&state.store, true).await?;
    alerts_under(state, &silences, chrono::Utc::now()).await
}

/// The pending and firing alerts, silenced by `silences` (the active ones).
async fn alerts_under(
    state: &AppState,
    silences: &[store::Silence],
    now: chrono::DateTime<chrono::Utc>,
) -> Result<Vec<AlertView>, WebError> {
    let rules = store::all_rules(&state.config_rules, &state.store).await?;
    let mut views: Vec<AlertView> = store::states(&state.store)
        .await?
        .into_iter()
        .map(|stored| {
            let s = stored.state;
            let rule = rules.iter().find(|r| r.rule.id == s.rule_id);
            AlertView {
                rule_name: rule.map(|r| r.rule.name.clone()).unwrap_or_else(|| s.rule_id.clone()),
                severity: rule.map(|r| r.rule.severity),
                silenced: silences.iter().any(|x| x.covers(&s.rule_id, &s.key, now)),
                notified_at: stored.delivered_at,
                queued_at: stored.queued_at,
                state: s,
            }
        })
        .collect();
    views.sort_by_key(|v| (v.state.phase != alerts::AlertPhase::Firing, v.state.active_since));
    Ok(views)
}

/// A pending or firing alert as the page shows it (the overview and the queue page too).
pub struct AlertRow {
    pub rule: String,
    pub rule_id: String,
    pub severity: String,
    pub phase: String,
    pub what: String,
    pub href: Option<String>,
    pub since: String,
    pub value: String,
    pub silenced: bool,
    /// The silence that holds this alert's notifications back and the words of its button: a
    /// silenced alert offers to end it, not to silence it again (issue 34, case 6).
    pub silence: Option<(i64, &'static str)>,
    pub key_json: String,
}

/// The alerts as rows, optionally only those of one queue.
pub async fn alert_rows(state: &AppState, only: Option<&AlertKey>) -> Result<Vec<AlertRow>, WebError> {
    let silences = store::silences(&state.store, true).await?;
    let now = chrono::Utc::now();
    Ok(alerts_under(state, &silences, now)
        .await?
        .into_iter()
        .filter(|a| only.is_none_or(|k| *k == a.state.key))
        .map(|a| {
            let key = &a.state.key;
            // The narrowest silence first: ending it is what the row is about.
            let silence = silences
                .iter()
                .filter(|s| s.covers(&a.state.rule_id, key, now))
                .max_by_key(|s| (s.key.is_some(), s.rule_id.is_some()))
                .map(|s| {
                    let words = match (&s.rule_id, &s.key) {
                        (_, Some(_)) => "End silence",
                        (Some(_), None) => "End the rule's silence",
                        (None, _) => "End the silence of every alert",
                    };
                    (s.id, words)
                });
            AlertRow {
                rule: a.rule_name,
                rule_id: a.state.rule_id.clone(),
                severity: a.severity.map(|s| format!("{s:?}").to_lowercase()).unwrap_or_default(),
                phase: format!("{:?}", a.state.phase).to_lowercase(),
                what: key.to_string(),
                href: match (&key.vhost, &key.queue) {
                    (Some(v), Some(q)) => Some(queue_href(&key.broker, v, q)),
                    _ if key.node.is_some() => Some(nodes_href(&key.broker)),
                    _ => None,
                },
                since: format::time(Some(a.state.fired_at.unwrap_or(a.state.active_since))),
                value: format::value(a.state.last_value),
                silenced: a.silenced,
                silence,
                key_json: serde_json::to_string(key).unwrap_or_default(),
            }
        })
        .collect())
}
