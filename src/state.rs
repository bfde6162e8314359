//! `AppState`: the handles every handler and background loop shares, built by one function.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use chrono::{DateTime, Utc};
use serde::Serialize;

use crate::config::Config;
use crate::dlq::browse::Snapshots;
use crate::history::Db;
use crate::metrics::{BrokerRates, QueueView};

#[derive(Clone)]
pub struct AppState {
    pub config: Arc<Config>,
    pub db: Db,
    pub live: Live,
    /// Broker name to its id in the database.
    pub broker_ids: Arc<HashMap<String, i64>>,
    /// The last DLQ snapshot of each queue.
    pub snapshots: Snapshots,
    /// Running and recent moves.
    pub jobs: crate::dlq::jobs::Jobs,
    /// Dead letters in warren's custody: the intake of each queue a `[[custody]]` rule names.
    pub custody: crate::dlq::custody::Custody,
    /// Sends alert notifications in the background.
    pub notifier: crate::alerts::notify::Dispatcher,
    /// Who must log in, the login throttle, CSRF tokens without a session.
    pub gate: Arc<crate::auth::Gate>,
    /// Whether the database can be written, apart from the brokers' health.
    pub storage: Arc<crate::history::storage::Storage>,
    /// What a form did, for the page it redirects to.
    pub notices: Notices,
    /// The threads and time filters' regular expressions match in, and their stop at shutdown.
    pub matchers: crate::dlq::budget::Matchers,
    /// The path of `public_url` (`Config::base_path`), kept once: every link of every page
    /// starts with it.
    pub base_path: Arc<str>,
}

/// One-time notices for post/redirect/get: a form's handler keeps what it did here and
/// redirects with the key; the page it lands on shows it once. A reload then shows the page,
/// never a second submission. In memory (the last `KEEP` only): a notice is for the next second.
#[derive(Clone, Default)]
pub struct Notices {
    kept: Arc<std::sync::Mutex<std::collections::VecDeque<(String, Notice)>>>,
}

/// What a form did: `ok` false for a failure worth showing as an error.
#[derive(Clone, Debug)]
pub struct Notice {
    pub ok: bool,
    pub text: String,
}

impl Notices {
    const KEEP: usize = 256;

    /// Keeps `notice`; returns its key (random: a link cannot show someone a notice of its own).
    pub fn put(&self, ok: bool, text: String) -> String {
        use rand::Rng;
        let key = format!("{:016x}", rand::thread_rng().gen::<u64>());
        let mut kept = self.kept.lock().unwrap_or_else(|p| p.into_inner());
        kept.push_back((key.clone(), Notice { ok, text }));
        while kept.len() > Self::KEEP {
            kept.pop_front();
        }
        key
    }

    /// The notice under `key`, once.
    pub fn take(&self, key: &str) -> Option<Notice> {
        let mut kept = self.kept.lock().unwrap_or_else(|p| p.into_inner());
        let at = kept.iter().position(|(k, _)| k == key)?;
        kept.remove(at).map(|(_, notice)| notice)
    }
}

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
#[derive(Debug, Clone, Serialize)]
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
    pub load: crate::poller::BrokerLoad,
    /// The last listing of connections, channels and consumers (on a cadence of its own).
    #[serde(skip)]
    pub clients: Option<Arc<crate::clients::ClientsLive>>,
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
#[derive(Debug, Clone, Serialize)]
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
        if let Some(restored) = self.status.restored_from {
            Some(restored)
        } else if self.status.up == Some(false) {
            self.status.last_success
        } else {
            None
        }
    }
}

/// Health of the polling of one broker.
#[derive(Debug, Clone, Default, Serialize)]
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
#[derive(Debug, Clone, Default, Serialize)]
pub struct BrokerTotals {
    pub queues: u64,
    pub ready: Option<u64>,
    pub unacked: Option<u64>,
    pub consumers: Option<u64>,
}

impl AppState {
    /// A configured broker by name.
    pub fn broker_config(&self, name: &str) -> Option<&crate::config::BrokerConfig> {
        self.config.brokers.iter().find(|b| b.name == name)
    }

    /// `path`, one of warren's own (`/jobs/7`, as routes and handlers know them), as the browser
    /// asks for it: under the base path. For redirects and the links in JSON answers; templates
    /// write `{{ me.base }}` (or a fragment's `base`) before each URL themselves.
    pub fn href(&self, path: &str) -> String {
        format!("{}{path}", self.base_path)
    }

    pub fn new(config: Config, db: Db, broker_ids: HashMap<String, i64>) -> Self {
        let names: Vec<String> = config.brokers.iter().map(|b| b.name.clone()).collect();
        let http = reqwest::Client::builder()
            .user_agent(concat!("warren/", env!("CARGO_PKG_VERSION")))
            .build()
            .expect("TLS backend initialises");
        let alerts = crate::alerts::notify::AlertSource {
            config_rules: config.alerts.clone(),
            public_url: config.public_url.clone(),
        };
        let notifier = crate::alerts::notify::Dispatcher::with_alerts(http, db.clone(), Default::default(), alerts);
        notifier.set_channels(config.notifications.clone());
        let gate = Arc::new(crate::auth::Gate::new(config.auth.clone()));
        let storage = Arc::new(crate::history::storage::Storage::new(&config.database));
        AppState {
            base_path: config.base_path().into(),
            gate,
            storage: storage.clone(),
            config: Arc::new(config),
            db,
            live: Live::new(&names),
            broker_ids: Arc::new(broker_ids),
            snapshots: Snapshots::default(),
            jobs: crate::dlq::jobs::Jobs::default(),
            custody: crate::dlq::custody::Custody::new(storage.clone()),
            notifier,
            notices: Notices::default(),
            matchers: crate::dlq::budget::Matchers::new(),
        }
    }
}
