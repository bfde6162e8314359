//! Which queues are in custody, and on what terms: the `[[custody]]` rules, and over them an
//! admin's decision for one queue (`custody_queues`); each queue's size budget, the role that
//! reads its payloads, whether its records may be edited.

use std::collections::HashMap;

use chrono::Utc;

use crate::config::CustodyRule;
use crate::storage::Store;

/// What an admin decided for one queue, over the rules (`custody_queues`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Switch {
    On,
    Released,
}

/// The admins' decisions of a broker's queues, by (vhost, queue).
pub async fn switches(store: &Store, broker: &str) -> Result<HashMap<(String, String), Switch>, sqlx::Error> {
    let rows = store.custody_switches(broker).await?;
    Ok(rows
        .into_iter()
        .map(|(vhost, queue, state)| {
            let switch = if state == "on" { Switch::On } else { Switch::Released };
            ((vhost, queue), switch)
        })
        .collect())
}

/// Records an admin's decision for a queue.
pub async fn set_switch(
    store: &Store,
    broker: &str,
    vhost: &str,
    queue: &str,
    switch: Switch,
    by: &str,
) -> Result<(), sqlx::Error> {
    let state = if switch == Switch::On { "on" } else { "released" };
    store.set_custody_switch((broker, vhost, queue), state, Utc::now().timestamp(), by).await
}

/// Whether a queue is in custody: an admin switched it on, or a rule names it and no admin
/// released it.
pub fn in_custody(rules: &[CustodyRule], switch: Option<Switch>, broker: &str, vhost: &str, queue: &str) -> bool {
    match switch {
        Some(Switch::On) => true,
        Some(Switch::Released) => false,
        None => rule_for(rules, broker, vhost, queue).is_some(),
    }
}

/// Whether one queue is in custody now (`in_custody`, with the admins' decision read fresh).
pub async fn is_in_custody(
    store: &Store,
    rules: &[CustodyRule],
    broker: &str,
    vhost: &str,
    queue: &str,
) -> Result<bool, sqlx::Error> {
    let switch = switches(store, broker).await?.remove(&(vhost.to_string(), queue.to_string()));
    Ok(in_custody(rules, switch, broker, vhost, queue))
}

/// The least role that reads a queue's payloads and headers in custody (viewer when no rule
/// names the queue: an admin took it in by hand).
pub fn payload_role(rules: &[CustodyRule], broker: &str, vhost: &str, queue: &str) -> crate::config::PayloadRole {
    rule_for(rules, broker, vhost, queue).map(|r| r.payloads).unwrap_or_default()
}

/// Whether admins may edit and replay this queue's records (`CustodyRule::edit`).
pub fn editable(rules: &[CustodyRule], broker: &str, vhost: &str, queue: &str) -> bool {
    rule_for(rules, broker, vhost, queue).is_some_and(|r| r.edit)
}

/// The size budget of a queue in custody: its rule's, or the default for one an admin switched on.
pub fn budget(rules: &[CustodyRule], broker: &str, vhost: &str, queue: &str) -> u64 {
    rule_for(rules, broker, vhost, queue).map(|r| r.max_bytes).unwrap_or(crate::config::DEFAULT_CUSTODY_BYTES)
}

/// The rule that puts a queue in custody, if one does.
pub fn rule_for<'r>(rules: &'r [CustodyRule], broker: &str, vhost: &str, queue: &str) -> Option<&'r CustodyRule> {
    rules.iter().find(|r| r.matches(broker, vhost, queue))
}
