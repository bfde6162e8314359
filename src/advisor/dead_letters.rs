//! The rules over dead-letter and retry queues that read warren's stored history besides the
//! live state (`Stored`): a dead-letter queue's growth over days, and the per-message TTLs a
//! retry queue's messages carried (in the DLQ browser's snapshot, or in custody records).

use std::collections::{BTreeMap, HashMap};

use serde_json::{json, Value};

use super::fix::{for_queue, keep_all};
use super::queues::finding;
use super::rules;
use super::{counter, evidence, Finding, Fix, Inputs, Severity};
use crate::broker::policies::{overflow_of, Overflow};
use crate::broker::topology::message_ttl_ms;
use crate::metrics::QueueView;

/// A dead-letter queue the growth rule looks at: messages, no consumer, no retention.
fn unbounded_dlq(q: &QueueView) -> bool {
    q.dead_letters.is_dlq
        && q.consumers == Some(0)
        && q.total.unwrap_or(0) > 0
        && matches!(overflow_of(&q.arguments, &q.effective_policy), Overflow::Unlimited)
        && message_ttl_ms(&q.arguments, &q.effective_policy).is_none()
}

/// Whether the growth rule reads this queue's stored depth (`Stored::dlq_depth_then`): a
/// dead-letter queue that would be flagged if it grew.
pub fn needs_history(q: &QueueView) -> bool {
    unbounded_dlq(q)
}

pub(super) fn dead_letter_queue(inputs: &Inputs, q: &QueueView, out: &mut Vec<Finding>) {
    if !unbounded_dlq(q) {
        return;
    }
    let window = inputs.settings.dlq_growth_window_secs;
    let now = q.broker_total();
    let key = (q.vhost.to_string(), q.name.to_string());
    let then = inputs.settings.stored.dlq_depth_then.get(&key).copied().flatten();
    // Not higher than a growth window ago: someone drains it, or nothing dies any more.
    if let (Some((_, then)), Some(now)) = (then, now) {
        if now <= then {
            return;
        }
    }
    let mut facts = vec![
        evidence("role", "dead-letter queue", q.dead_letters.role_reason.to_string()),
        evidence("consumers", "0", "listing"),
        counter("messages", q.total.unwrap_or(0).to_string(), "listing"),
        evidence("retention", "no message TTL, no length limit", "arguments and effective policy"),
    ];
    let ago = crate_duration(window);
    let growing = match (then, now) {
        (Some((at, then)), Some(now)) => {
            let when = chrono::DateTime::from_timestamp(at, 0).map(|t| t.to_rfc3339()).unwrap_or_default();
            facts.push(counter(
                "growth",
                format!("{then} → {now} messages since {ago} ago"),
                format!("stored history (depth at {when})"),
            ));
            true
        }
        _ => {
            facts.push(evidence(
                "growth",
                format!("not yet known: no stored depth from {ago} ago (its history is younger, or has a gap)"),
                "stored history",
            ));
            false
        }
    };
    if let Some(rate) = q.backlog_growth_rate {
        facts.push(counter("depth change", format!("{rate:+.3} msg/s"), "rate window"));
    }
    let fix = Fix {
        summary: "Name an owner who reads and replays or discards its messages (the DLQ browser), and give it a \
                  retention that says how long a failure matters: 14 days below."
            .into(),
        policy: Some(for_queue(
            q,
            rules::DLQ_UNBOUNDED,
            &[("message-ttl", json!(14 * 24 * 3600 * 1000u64))],
            &keep_all,
        )),
    };
    let title = if growing {
        format!("{} grows with no consumer and no retention", q.name)
    } else {
        format!("{} keeps dead letters with no consumer and no retention", q.name)
    };
    let mut f = finding(inputs, q, rules::DLQ_UNBOUNDED, title, facts, fix);
    if !growing {
        // Messages nobody reads, but no growth seen yet: worth knowing, not yet the risk.
        f.severity = Severity::Notice;
    }
    f.inputs.push(inputs.age("queue depth"));
    out.push(f);
}

/// "2 d", "15 s": a window in words.
fn crate_duration(secs: f64) -> String {
    if secs >= 86_400.0 && secs % 86_400.0 == 0.0 {
        format!("{} d", secs / 86_400.0)
    } else if secs >= 3_600.0 && secs % 3_600.0 == 0.0 {
        format!("{} h", secs / 3_600.0)
    } else {
        format!("{secs:.0} s")
    }
}

/// Per-message TTLs that records in custody carried in the queues they expired from: each
/// `x-death` entry with an `original-expiration` (the broker strips `expiration` when a message
/// expires and keeps it there) counts for that entry's queue. Returns, per queue, each TTL with
/// how many records carried it.
pub fn ttls_from_custody<'a>(properties: impl Iterator<Item = &'a Value>) -> HashMap<String, BTreeMap<String, u64>> {
    let mut out: HashMap<String, BTreeMap<String, u64>> = Default::default();
    for p in properties {
        let Some(deaths) = p.get("headers").and_then(|h| h.get("x-death")).and_then(Value::as_array) else { continue };
        for death in deaths {
            let (Some(queue), Some(ttl)) = (
                death.get("queue").and_then(Value::as_str),
                death.get("original-expiration").map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_string)),
            ) else {
                continue;
            };
            *out.entry(queue.to_string()).or_default().entry(ttl).or_default() += 1;
        }
    }
    out
}

pub(super) fn retry_ttls(inputs: &Inputs, q: &QueueView, out: &mut Vec<Finding>) {
    let snapshot = inputs.snapshots.and_then(|s| s.get(&q.broker, &q.vhost, &q.name));
    let custody = inputs.settings.stored.custody_ttls.get(&(q.vhost.to_string(), q.name.to_string()));
    let mut ttls: BTreeMap<String, u64> = BTreeMap::new();
    let mut sources = Vec::new();
    if let Some(snapshot) = &snapshot {
        for m in &snapshot.messages {
            if let Some(ttl) = m.message.properties.get("expiration").and_then(Value::as_str) {
                *ttls.entry(ttl.to_string()).or_default() += 1;
            }
        }
        sources.push(format!("snapshot of {} messages", snapshot.messages.len()));
    }
    if let Some((held, read)) = custody {
        for (ttl, n) in held {
            *ttls.entry(ttl.clone()).or_default() += n;
        }
        sources.push(format!("{read} records in warren's custody"));
    }
    if ttls.len() < 2 {
        return;
    }
    // The TTLs are the finding; how many messages carry each moves with traffic (a counter, not
    // part of what an acknowledgement is of).
    let listed: Vec<String> = ttls.keys().take(8).map(|ttl| format!("{ttl} ms")).collect();
    let counts: Vec<String> = ttls.iter().take(8).map(|(ttl, n)| format!("{ttl} ms ×{n}")).collect();
    let evidence = vec![
        evidence("per-message TTLs", listed.join(", "), sources.join(" and ")),
        counter("messages per TTL", counts.join(", "), sources.join(" and ")),
    ];
    let fix = Fix {
        summary: "Give each retry delay a wait queue of its own with a queue TTL (x-message-ttl) instead of a \
                  per-message expiration, so that no short delay waits behind a long one."
            .into(),
        policy: None,
    };
    let title = format!("{} holds messages with {} different TTLs", q.name, ttls.len());
    let mut f = finding(inputs, q, rules::MIXED_TTLS, title, evidence, fix);
    if let Some(snapshot) = snapshot {
        f.inputs.push(super::age_at("snapshot", Some(snapshot.taken_at), inputs.now));
    }
    if custody.is_some() {
        f.inputs.push(super::age_at("custody", Some(inputs.now), inputs.now));
    }
    out.push(f);
}
