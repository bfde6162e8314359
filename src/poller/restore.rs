//! The last known state from the database, for the time before a broker's first successful poll
//! (issue 19, item 5: restarted while the broker did not answer, warren showed "No queues match"
//! although its database held the last state).
//!
//! What comes back: each watched, not deleted queue with its last stored sample (depth, consumers,
//! head timestamp), its metadata, and its dead-letter role from the vhost's last stored topology;
//! the totals over them. What does not: every rate (a rate is a delta between two readings of
//! this run; the stored one described the minute before the stop, not now), the broker's
//! version, cluster name and per-vhost rates, the FIFO age estimate, hung-consumer and holding
//! times, and what the dead-letter browser's snapshots observed. Those show as unknown.
//!
//! The state is marked stale (`BrokerStatus::restored_from`) until the first successful poll
//! replaces all of it. The alert evaluator reads queues only of a broker whose latest poll
//! succeeded (`alerts::eval::BrokerInput::up`), so restored numbers never fire or resolve a rule.

use std::collections::HashMap;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use serde_json::Value;

use crate::broker::topology;
use crate::history::{self, KnownQueue};
use crate::live::{Live, VhostLive};
use crate::metrics::{exact_age, rate_from_milli, QueueNames, QueueView};
use crate::storage::Store;

/// A stored queue as a view: its metadata and its last stored sample, whose values held at
/// `as_of` (samples are written only when a value changes). Rates are the stored ones; the
/// dead-letter target comes from its arguments and policy, its role is unknown (roles need the
/// topology: `seed` adds it).
pub fn stored_view(broker: &str, known: KnownQueue, as_of: DateTime<Utc>) -> QueueView {
    let parse = |text: &str| match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(map)) => Arc::new(map),
        _ => Default::default(),
    };
    let (_, sample) = known.last_sample.unwrap_or_default();
    let arguments = parse(&known.meta.arguments);
    let effective_policy = parse(&known.meta.effective_policy);
    let total = sample.ready.zip(sample.unacked).map(|(r, u)| (r + u) as u64);
    let (oldest_age_secs, oldest_age_source) = exact_age(total, sample.head_ts, as_of);
    let names = QueueNames {
        broker: broker.into(),
        vhost: known.meta.vhost.into(),
        name: known.meta.name.into(),
        kind: known.meta.kind.into(),
        state: None,
    };
    QueueView {
        durable: known.meta.durable,
        ready: sample.ready.map(|v| v as u64),
        unacked: sample.unacked.map(|v| v as u64),
        total,
        consumers: sample.consumers.map(|v| v as u64),
        publish_rate: rate_from_milli(sample.publish_rate_m),
        deliver_rate: rate_from_milli(sample.deliver_rate_m),
        ack_rate: rate_from_milli(sample.ack_rate_m),
        redeliver_rate: rate_from_milli(sample.redeliver_rate_m),
        oldest_age_secs,
        oldest_age_source,
        // Whether dead-letter routing fed it is not stored: the publish rate alone could be a
        // DLQ's bare 0, so the inflow stays unknown.
        dead_letters: topology::DeadLetterInfo {
            dead_letter_target: topology::dead_letter_config(&arguments, &effective_policy).map(
                |(exchange, routing_key, configured_by)| {
                    Box::new(topology::DeadLetterTarget { exchange, routing_key, configured_by, queues: None })
                },
            ),
            // Roles come from the live topology and consumers, which a stored queue lacks.
            role_reason: "not in the latest listing: no topology to tell its role".into(),
            ..Default::default()
        },
        arguments,
        policy: known.meta.policy,
        effective_policy,
        deleted: known.deleted_at.is_some(),
        id: Some(known.id),
        head_ts: sample.head_ts,
        ..QueueView::unknown(names, as_of)
    }
}

/// Puts the last known state of `known` (the broker's watched, not deleted queues) into `live`,
/// marked as restored from the broker's last successful poll. Nothing when the broker was never
/// polled successfully: then there is no state to show.
pub async fn seed(
    store: &Store,
    live: &Live,
    broker: &str,
    broker_id: i64,
    known: Vec<KnownQueue>,
    custody: &[crate::config::CustodyRule],
    worked: &super::worked::Worked,
) -> Result<(), sqlx::Error> {
    let Some(last_poll) = history::last_known::last_poll_at(store, broker_id).await? else { return Ok(()) };
    let as_of = DateTime::from_timestamp(last_poll, 0).unwrap_or_default();
    let mut views: Vec<QueueView> = known.into_iter().map(|k| stored_view(broker, k, as_of)).collect();
    for view in &mut views {
        // Not measured by this run: unknown, never the last minute before the stop shown as now.
        (view.publish_rate, view.deliver_rate, view.ack_rate, view.redeliver_rate) = (None, None, None, None);
    }
    let (views, totals, vhosts) = with_roles(store, broker, broker_id, views, custody, worked).await?;
    tracing::info!(broker, queues = views.len(), %as_of, "showing the last known state until the first poll succeeds");
    live.update(broker, |b| {
        b.queues = Arc::new(views);
        b.totals = totals;
        b.vhosts = vhosts;
        b.status.restored_from = Some(as_of);
    });
    Ok(())
}

/// Shows what another replica's polls of `broker` wrote (`follow`): the last stored sample of
/// each watched queue, its rates as that poll measured them, as of that poll. `None` when the
/// broker was never polled.
pub async fn follow(
    store: &Store,
    live: &Live,
    broker: &crate::config::BrokerConfig,
    broker_id: i64,
    custody: &[crate::config::CustodyRule],
) -> Result<Option<DateTime<Utc>>, sqlx::Error> {
    let Some(last_poll) = history::last_known::last_poll_at(store, broker_id).await? else { return Ok(None) };
    let as_of = DateTime::from_timestamp(last_poll, 0).unwrap_or_default();
    let mut known = Vec::new();
    history::known_queues(store, broker_id, |k| {
        if k.deleted_at.is_none() && broker.watches_vhost(&k.meta.vhost) {
            known.push(k);
        }
    })
    .await?;
    let views = known.into_iter().map(|k| stored_view(&broker.name, k, as_of)).collect();
    let worked = super::worked::Worked::load(store, broker_id).await?;
    let (views, totals, vhosts) = with_roles(store, &broker.name, broker_id, views, custody, &worked).await?;
    live.update(&broker.name, |b| {
        b.queues = Arc::new(views);
        b.totals = totals;
        b.vhosts = vhosts;
    });
    Ok(Some(as_of))
}

/// `views` with their dead-letter roles from each vhost's last stored topology, sorted, with
/// their totals and vhosts.
async fn with_roles(
    store: &Store,
    broker: &str,
    broker_id: i64,
    mut views: Vec<QueueView>,
    custody: &[crate::config::CustodyRule],
    worked: &super::worked::Worked,
) -> Result<(Vec<QueueView>, crate::live::BrokerTotals, Vec<VhostLive>), sqlx::Error> {
    let topologies = history::last_known::topologies(store, broker_id).await?;
    let mut by_vhost: HashMap<Arc<str>, Vec<usize>> = HashMap::new();
    for (i, view) in views.iter().enumerate() {
        by_vhost.entry(view.vhost.clone()).or_default().push(i);
    }
    for (vhost, indexes) in &by_vhost {
        let configs = super::routing::queue_configs(&views, indexes, custody, broker, vhost);
        let mut info = topology::analyse_with(&configs, topologies.get(&**vhost), &|q: &str| worked.words(vhost, q));
        for &i in indexes {
            let facts = info.remove(&*views[i].name);
            views[i].dead_letters = facts.unwrap_or_else(|| topology::DeadLetterInfo::plain(views[i].consumers));
        }
    }
    views.sort_by(|a, b| (&a.vhost, &a.name).cmp(&(&b.vhost, &b.name)));
    let mut vhosts: Vec<VhostLive> = by_vhost
        .into_keys()
        .map(|name| VhostLive { name: name.to_string(), rates: Default::default(), counters: Default::default() })
        .collect();
    vhosts.sort_by(|a, b| a.name.cmp(&b.name));
    let totals = super::rates::totals(&views);
    Ok((views, totals, vhosts))
}
