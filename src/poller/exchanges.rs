//! The exchange listing (`broker::exchanges`), read on a cadence of its own: every poll while
//! one read costs at most `EXCHANGE_SHARE` of the broker CPU budget, spaced when it costs more,
//! and at least every `stats_max_interval`. A vhost has far fewer exchanges than queues, so
//! this is usually every poll; a broker with thousands of exchanges gets them less often, and
//! the exchanges page says how old its listing is.
//!
//! Publish rates are counter deltas between warren's own reads (as for queues: DOMAIN.md §2),
//! never the broker's `*_details.rate`.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use serde_json::{Map, Value};

use super::{load, timed};
use crate::broker::exchanges::{
    bindings_out, ExchangeCounters, ExchangeView, RawExchange, TopologyLive, VhostTopologyLive, EXCHANGE_COLUMNS,
};
use crate::broker::management::{encode_segment, BrokerError, ManagementClient};
use crate::broker::topology::VhostTopology;
use crate::config::BrokerConfig;
use crate::live::BrokerLoad;
use crate::metrics::{counter_rate, CounterWindow};

/// The share of `broker_cpu_budget` the exchange listing may cost. A tenth, as for the 4.x
/// consumer scrape (`DETAIL_SHARE`): the queue numbers come first.
pub(super) const EXCHANGE_SHARE: f64 = 0.1;

/// Reads the exchange listing and keeps what the pages show of it.
#[derive(Default)]
pub(super) struct ExchangeReader {
    windows: HashMap<(String, String), CounterWindow<ExchangeCounters>>,
    /// When the last read started, and what it took (the cost proxy, as in `load`).
    read_at: Option<Instant>,
    read_wall: Option<DateTime<Utc>>,
    cost: Duration,
    exchanges: Vec<ExchangeView>,
    error: Option<String>,
}

/// What one read needs from its poll.
pub(super) struct ReadContext<'a> {
    pub client: &'a ManagementClient,
    pub broker: &'a BrokerConfig,
    pub vhosts: &'a [String],
    pub stats_enabled: bool,
    pub started: Instant,
    pub rate_window_secs: f64,
}

impl ExchangeReader {
    /// How often the listing is read: every poll while it fits its share of the budget.
    pub(super) fn every(&self, b: &BrokerConfig) -> Duration {
        let share = (b.broker_cpu_budget * EXCHANGE_SHARE).max(1e-6);
        let by_cost = Duration::from_secs_f64((self.cost.as_secs_f64() / share).min(86_400.0));
        let ceiling = b.stats_max_interval.max(b.poll_interval);
        let every = by_cost.max(b.poll_interval).min(ceiling);
        if every > b.poll_interval {
            load::whole_stats_steps(every, b.poll_interval).min(ceiling)
        } else {
            b.poll_interval
        }
    }

    /// The estimated share of a broker core the listing costs at its cadence.
    pub(super) fn load_share(&self, b: &BrokerConfig) -> f64 {
        self.cost.as_secs_f64() / self.every(b).as_secs_f64().max(0.001)
    }

    pub(super) fn read_at(&self) -> Option<DateTime<Utc>> {
        self.read_wall
    }

    /// Reads every watched vhost's exchanges when due; returns the bytes read. A failed call
    /// keeps the previous listing (its time says how old it is) and the error for the page:
    /// the queue numbers are not worth losing for it.
    pub(super) async fn read_if_due(
        &mut self,
        ctx: ReadContext<'_>,
        load: &mut BrokerLoad,
        spent: &mut Duration,
    ) -> usize {
        let b = ctx.broker;
        let every = self.every(b);
        // A quarter poll of slack for timer jitter, as for the listing.
        if self.read_at.is_some_and(|at| ctx.started.duration_since(at) + b.poll_interval / 4 < every) {
            return 0;
        }
        let (at, wall) = (Instant::now(), Utc::now());
        let mut took = Duration::ZERO;
        let result = read(&ctx, load, &mut took).await;
        *spent += took;
        self.cost = took;
        self.read_at = Some(at);
        let (listed, bytes) = match result {
            Ok(answer) => answer,
            Err(e) => {
                tracing::warn!(broker = %b.name, error = %e, "exchange listing failed");
                self.error = Some(e.to_string());
                return 0;
            }
        };
        let window_secs = ctx.rate_window_secs;
        let keep_secs = (window_secs * 5.0).max(65.0).max(every.as_secs_f64() * 2.5);
        let mut present = HashSet::new();
        let mut views = Vec::new();
        for (vhost, exchanges, policies) in listed {
            for raw in &exchanges {
                let counters = raw.counters(ctx.stats_enabled);
                let key = (vhost.clone(), raw.name.clone());
                let window = self.windows.entry(key.clone()).or_default();
                let policy = raw.policy().and_then(|p| policies.get(p));
                let mut view = ExchangeView::new(&vhost, raw, counters, policy);
                if let Some((previous, age)) = window.baseline(at, window_secs) {
                    view.publish_in_rate = counter_rate(previous.publish_in, counters.publish_in, age);
                    view.publish_out_rate = counter_rate(previous.publish_out, counters.publish_out, age);
                }
                window.push(at, counters, keep_secs);
                present.insert(key);
                views.push(view);
            }
        }
        self.windows.retain(|key, _| present.contains(key));
        views.sort_by(|a, b| (&a.vhost, &a.name).cmp(&(&b.vhost, &b.name)));
        self.exchanges = views;
        self.read_wall = Some(wall);
        self.error = None;
        bytes
    }

    /// What the pages show: the last listing with its bindings counted from the topologies,
    /// and the topologies themselves. `topologies` holds when each was read (`Instant`).
    pub(super) fn live(
        &self,
        b: &BrokerConfig,
        stats_enabled: bool,
        topologies: &HashMap<String, (Instant, Arc<VhostTopology>)>,
    ) -> TopologyLive {
        let now = Utc::now();
        let exchanges = self
            .exchanges
            .iter()
            .map(|x| {
                let mut x = x.clone();
                x.bindings_out = topologies.get(&x.vhost).and_then(|(_, t)| bindings_out(t, &x.name));
                x
            })
            .collect();
        let vhosts = topologies
            .iter()
            .map(|(vhost, (at, topology))| {
                let read_at = now - chrono::Duration::from_std(at.elapsed()).unwrap_or_default();
                (vhost.clone(), VhostTopologyLive { topology: topology.clone(), read_at })
            })
            .collect();
        TopologyLive {
            exchanges,
            exchanges_read_at: self.read_wall,
            exchanges_every_secs: self.read_at.map(|_| self.every(b).as_secs_f64()),
            exchanges_error: self.error.clone(),
            stats_enabled: Some(stats_enabled),
            vhosts,
        }
    }
}

/// One vhost's exchanges, with the definitions of the policies they name.
type Listed = (String, Vec<RawExchange>, HashMap<String, Map<String, Value>>);

/// The calls of one read; the time they took goes to `took`.
async fn read(
    ctx: &ReadContext<'_>,
    load: &mut BrokerLoad,
    took: &mut Duration,
) -> Result<(Vec<Listed>, usize), BrokerError> {
    let mut bytes = 0;
    let mut listed = Vec::new();
    for vhost in ctx.vhosts {
        let segment = encode_segment(vhost);
        let path = format!("api/exchanges/{segment}?columns={EXCHANGE_COLUMNS}");
        let endpoint = format!("/api/exchanges/{segment}");
        let call = ctx.client.get::<Vec<RawExchange>>(&path);
        let exchanges = match timed(load, took, "management", &endpoint, call).await {
            Ok((exchanges, size)) => {
                bytes += size;
                exchanges
            }
            // Deleted since the vhost listing: it has no exchanges now.
            Err(BrokerError::Http { status: 404, .. }) => continue,
            Err(e) => return Err(e),
        };
        // An alternate exchange set by policy is only in the policy's definition; asked only
        // when an exchange names a policy. Operator policies cannot set one.
        let mut policies = HashMap::new();
        if exchanges.iter().any(|x| x.policy().is_some()) {
            let endpoint = format!("/api/policies/{segment}");
            let call = ctx.client.policies("policies", vhost);
            match timed(load, took, "management", &endpoint, call).await {
                Ok((list, size)) => {
                    bytes += size;
                    policies = list.into_iter().map(|p| (p.name, p.definition)).collect();
                }
                // Without it the alternate exchange set by policy is unknown; the rest stands.
                Err(e) => tracing::warn!(broker = %ctx.broker.name, %vhost, error = %e, "policies not read"),
            }
        }
        listed.push((vhost.clone(), exchanges, policies));
    }
    Ok((listed, bytes))
}
