//! What warren knows now: each broker's latest poll result, written by its poller and read by
//! the pages, the API, the alert loop and the dead-letter wing. In memory only; what warren
//! keeps across restarts is in `history` (and `poller::restore` brings the last of it back).

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use chrono::{DateTime, Utc};
use serde::Serialize;

use crate::metrics::{BrokerRates, QueueView};

pub mod clients;
mod load;
pub use load::{BrokerLoad, CallRecord, CallTotals, MetricSource, PrometheusState, RECENT_CALLS};

/// The latest poll result of every broker, written by the pollers and read by the pages.
/// Each poll replaces a broker's queue list as a whole (`Arc`), so readers never block a poll
/// for longer than a pointer swap.
#[derive(Clone, Default)]
pub struct Live {
    brokers: Arc<RwLock<HashMap<String, BrokerLive>>>,
    /// Signalled after every poll (successful or not), for the alert evaluator.
    polled: Arc<tokio::sync::Notify>,
}

impl Live {
    pub fn new(brokers: &[String]) -> Self {
        let map = brokers.iter().map(|name| (name.clone(), BrokerLive::new(name))).collect();
        Live { brokers: Arc::new(RwLock::new(map)), polled: Arc::default() }
    }

    /// Called by a poller when a poll ended and its result is in place.
    pub fn poll_finished(&self) {
        // One waiter (the alert loop); a permit is kept if it is busy, so no poll is missed.
        self.polled.notify_one();
    }

    /// Completes after the next poll of any broker ended.
    pub async fn next_poll(&self) {
        self.polled.notified().await
    }

    pub fn update(&self, broker: &str, f: impl FnOnce(&mut BrokerLive)) {
        let mut map = self.brokers.write().unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(live) = map.get_mut(broker) {
            f(live);
        }
    }

    /// A copy of every broker's state, in configuration order of names (sorted).
    pub fn snapshot(&self) -> Vec<BrokerLive> {
        let map = self.brokers.read().unwrap_or_else(|poisoned| poisoned.into_inner());
        let mut all: Vec<BrokerLive> = map.values().cloned().collect();
        all.sort_by(|a, b| a.name.cmp(&b.name));
        all
    }

    /// The cluster problems every page's banner shows: of each broker whose last poll succeeded,
    /// as "Cluster NAME: node X is down since ...". A broker that does not answer says so on its
    /// own; its nodes' last known state is not news.
    pub fn cluster_problems(&self) -> Vec<String> {
        let map = self.brokers.read().unwrap_or_else(|poisoned| poisoned.into_inner());
        let mut out: Vec<String> = map
            .values()
            .filter(|b| b.status.up == Some(true))
            .flat_map(|b| {
                let cluster = b.status.cluster_name.as_deref().unwrap_or(&b.name);
                b.nodes.problems.iter().map(move |p| format!("Cluster {cluster} (broker {}): {}", b.name, p.text()))
            })
            .collect();
        out.sort();
        out
    }

    pub fn broker(&self, name: &str) -> Option<BrokerLive> {
        let map = self.brokers.read().unwrap_or_else(|poisoned| poisoned.into_inner());
        map.get(name).cloned()
    }
}

/// What the dashboard knows about one broker right now.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct BrokerLive {
    pub name: String,
    pub status: BrokerStatus,
    /// Rates over the watched vhosts (the sum of `vhosts`), the scope of `totals`: not the
    /// broker-wide figures when `vhosts_include` or `vhosts_exclude` leave vhosts out.
    pub rates: BrokerRates,
    pub totals: BrokerTotals,
    /// Per-vhost rates of the watched vhosts.
    pub vhosts: Vec<VhostLive>,
    #[serde(skip)]
    pub queues: Arc<Vec<QueueView>>,
    /// Sources, cadences and the cost of warren's calls (the broker page).
    #[serde(skip)]
    pub load: BrokerLoad,
    /// The last listing of connections, channels and consumers (on a cadence of its own).
    #[serde(skip)]
    pub clients: Option<Arc<crate::live::clients::ClientsLive>>,
    /// Connections opened plus closed per second, broker-wide (`/api/overview` churn counters);
    /// `None` when the broker does not count them (metrics collector off).
    pub connection_churn_per_sec: Option<f64>,
    /// Exchanges and bindings of the watched vhosts (the exchanges page, queue routing).
    #[serde(skip)]
    pub topology: Arc<crate::broker::exchanges::TopologyLive>,
    /// The cluster's nodes and their problems (`broker::nodes`).
    #[serde(skip)]
    pub nodes: crate::broker::nodes::NodesLive,
}

/// Rates of one vhost (publish, confirm, ack, deliver, redeliver, unroutable).
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct VhostLive {
    pub name: String,
    pub rates: BrokerRates,
    /// The vhost's cumulative counters as last read, for `/metrics`.
    #[serde(skip)]
    pub counters: crate::metrics::BrokerCounters,
}

impl BrokerLive {
    fn new(name: &str) -> Self {
        BrokerLive {
            name: name.to_string(),
            status: BrokerStatus::default(),
            rates: BrokerRates::default(),
            totals: BrokerTotals::default(),
            vhosts: Vec::new(),
            queues: Arc::new(Vec::new()),
            load: Default::default(),
            clients: None,
            connection_churn_per_sec: None,
            topology: Arc::default(),
            nodes: Default::default(),
        }
    }

    /// Whether the data shown is older than the latest poll attempt (the broker is down), or
    /// is the last known state from the database, not polled by this run at all.
    pub fn stale_since(&self) -> Option<DateTime<Utc>> {
        if self.status.polled_by.is_some() && self.status.up != Some(true) {
            self.status.last_success.or(Some(DateTime::UNIX_EPOCH))
        } else if let Some(restored) = self.status.restored_from {
            Some(restored)
        } else if self.status.up == Some(false) {
            self.status.last_success
        } else {
            None
        }
    }
}

/// Health of the polling of one broker.
#[derive(Debug, Clone, Default, Serialize, utoipa::ToSchema)]
pub struct BrokerStatus {
    /// `None` until the first poll finished.
    pub up: Option<bool>,
    /// Why the last poll failed, for the operator.
    pub error: Option<String>,
    pub last_attempt: Option<DateTime<Utc>>,
    pub last_success: Option<DateTime<Utc>>,
    /// The queues shown are the last known state from warren's database, as of the broker's
    /// last successful poll before warren started (`poller::restore`); cleared by this run's
    /// first successful poll.
    pub restored_from: Option<DateTime<Utc>>,
    /// Another replica polls this broker (its id, or why none does): what shows is what that
    /// replica wrote to the database, as of `last_success`, and `up` says whether that is recent.
    pub polled_by: Option<String>,
    /// First failed poll of the current outage.
    pub down_since: Option<DateTime<Utc>>,
    pub next_poll_at: Option<DateTime<Utc>>,
    pub consecutive_failures: u32,
    pub last_poll_ms: Option<u64>,
    pub last_poll_bytes: Option<u64>,
    pub rabbitmq_version: Option<String>,
    pub cluster_name: Option<String>,
    /// False when the broker collects no message stats (rates unavailable, not zero).
    pub stats_enabled: Option<bool>,
    /// Which management URL answers, and each URL's last failure (several for a cluster).
    pub management: crate::broker::management::Endpoints,
}

/// Sums over the watched queues of a broker.
#[derive(Debug, Clone, Default, Serialize, utoipa::ToSchema)]
pub struct BrokerTotals {
    pub queues: u64,
    pub ready: Option<u64>,
    pub unacked: Option<u64>,
    pub consumers: Option<u64>,
}
