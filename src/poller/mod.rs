//! One loop per broker: fetch, derive, store, publish to the live state.
//!
//! Never more than one poll in flight per broker (the loop awaits each poll before sleeping).
//! A failed poll keeps the last data (shown as stale), backs off exponentially up to six poll
//! intervals, and the loop recovers by itself when the broker answers again.

mod estimate;
mod track;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::Utc;
use tokio_util::sync::CancellationToken;

use self::track::{PollContext, QueueKey, Tracked};
use crate::config::BrokerConfig;
use crate::history::{self, Db};
use crate::management::{BrokerError, ManagementClient, Overview, RawQueue, VhostEntry};
use crate::metrics::{self, rate_to_milli, BrokerCounters, BrokerRates, CounterWindow, QueueView};
use crate::state::{BrokerTotals, Live, VhostLive};
use crate::topology::{self, QueueConfig, VhostTopology};

pub use self::track::{keyframe_due, KEYFRAME_SECS};

/// Bindings change rarely and listing them costs the broker: refresh each vhost's topology at
/// most this often, or sooner when a queue appears or its arguments or policy change.
const TOPOLOGY_EVERY: Duration = Duration::from_secs(60);

/// Everything one broker's loop owns.
pub struct Poller {
    broker: BrokerConfig,
    client: ManagementClient,
    db: Db,
    live: Live,
    broker_id: i64,
    queues: HashMap<QueueKey, Tracked>,
    broker_counters: CounterWindow<BrokerCounters>,
    vhost_counters: HashMap<String, CounterWindow<BrokerCounters>>,
    topology: HashMap<String, (Instant, VhostTopology)>,
    /// Number of the current poll (see `track::derive`).
    polls: u64,
}

/// Result of one successful poll, for callers that measure (the benchmark).
#[derive(Debug, Clone, Copy)]
pub struct PollStats {
    pub queues: usize,
    pub samples_written: usize,
    pub bytes: usize,
}

/// Why a poll failed: the broker, or warren's own storage.
#[derive(Debug, thiserror::Error)]
pub enum PollError {
    #[error(transparent)]
    Broker(#[from] BrokerError),
    #[error("storage error: {0}")]
    Storage(#[from] sqlx::Error),
}

impl Poller {
    /// Loads what the database knows of this broker's queues, so that a restart does not
    /// rewrite every queue's sample.
    pub async fn new(broker: BrokerConfig, db: Db, live: Live, broker_id: i64) -> Result<Self, sqlx::Error> {
        let queues = history::known_queues(&db, broker_id).await?.into_iter().map(Tracked::from_known).collect();
        let client = ManagementClient::new(&broker);
        Ok(Poller {
            broker,
            client,
            db,
            live,
            broker_id,
            queues,
            broker_counters: CounterWindow::default(),
            vhost_counters: HashMap::new(),
            topology: HashMap::new(),
            polls: 0,
        })
    }

    /// Polls until `cancel` fires. The first poll starts at once.
    pub async fn run(mut self, cancel: CancellationToken) {
        let interval = self.broker.poll_interval;
        let mut failures: u32 = 0;
        loop {
            let started = Instant::now();
            let attempt_at = Utc::now();
            let outcome = tokio::select! {
                _ = cancel.cancelled() => return,
                outcome = self.poll_once() => outcome,
            };
            let delay = match outcome {
                Ok(_) => {
                    failures = 0;
                    interval.saturating_sub(started.elapsed())
                }
                Err(error) => {
                    failures += 1;
                    let delay = backoff(interval, failures);
                    tracing::warn!(broker = %self.broker.name, %error, retry_in = ?delay, "poll failed");
                    self.live.update(&self.broker.name, |b| {
                        b.status.up = Some(false);
                        b.status.error = Some(error.to_string());
                        b.status.last_attempt = Some(attempt_at);
                        b.status.down_since.get_or_insert(attempt_at);
                        b.status.consecutive_failures = failures;
                    });
                    delay
                }
            };
            self.live.poll_finished();
            let next = Utc::now() + chrono::Duration::from_std(delay).unwrap_or_default();
            self.live.update(&self.broker.name, |b| b.status.next_poll_at = Some(next));
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tokio::time::sleep(delay) => {}
            }
        }
    }

    /// One complete poll: every watched vhost's queues, all pages, then one write. Any failed
    /// request fails the whole poll, so a partial listing never marks queues as deleted.
    pub async fn poll_once(&mut self) -> Result<PollStats, PollError> {
        let started = Instant::now();
        let now = Utc::now();
        let (overview, mut bytes) = self.client.overview().await?;
        // 4.x with the metrics collector off serves no message_stats at all: rates are then
        // unavailable, not zero.
        let stats_enabled = overview.disable_stats != Some(true) && overview.message_stats.is_some();

        let (vhosts, vhost_bytes) = self.client.vhosts().await?;
        bytes += vhost_bytes;
        let watched: Vec<VhostEntry> = vhosts.into_iter().filter(|v| self.broker.watches_vhost(&v.name)).collect();
        let mut raw_queues: Vec<RawQueue> = Vec::new();
        for vhost in &watched {
            bytes += self.fetch_vhost(&vhost.name, &mut raw_queues).await?;
        }
        let fetched = Instant::now();

        let ctx = PollContext {
            broker: self.broker.name.clone(),
            stats_enabled,
            now,
            fetched,
            rate_window_secs: self.rate_window_secs(),
            keep_readings_secs: self.keep_readings_secs(),
        };
        let broker = self.broker.clone();
        self.polls += 1;
        let (mut views, marks, gone) =
            track::derive(&mut self.queues, raw_queues, &ctx, self.polls, |v| broker.watches_vhost(v));
        bytes += self.apply_topology(&mut views, &marks, fetched).await;
        estimate::estimate_ages(&self.db, &mut self.queues, &mut views, self.broker.poll_interval.as_secs_f64(), now)
            .await?;

        let totals = totals(&views);
        let rates = self.broker_rates(&overview, stats_enabled, fetched);
        let vhost_rates = self.vhost_rates(&watched, stats_enabled, fetched);
        let mut write = track::plan_write(&self.queues, &views, &marks, &gone, self.broker_id, now.timestamp());
        let poll_ms = started.elapsed().as_millis() as u64;
        write.broker = history::BrokerSample {
            ready: totals.ready.map(|v| v as i64),
            unacked: totals.unacked.map(|v| v as i64),
            consumers: totals.consumers.map(|v| v as i64),
            queues: totals.queues as i64,
            publish_rate_m: rate_to_milli(rates.publish_rate),
            confirm_rate_m: rate_to_milli(rates.confirm_rate),
            ack_rate_m: rate_to_milli(rates.ack_rate),
            deliver_rate_m: rate_to_milli(rates.deliver_rate),
            redeliver_rate_m: rate_to_milli(rates.redeliver_rate),
            unroutable_rate_m: rate_to_milli(rates.unroutable_rate),
            poll_ms: poll_ms as i64,
        };
        let samples_written = write.samples.len() + write.new_samples.len();
        let ids = history::write_poll(&self.db, &write).await?;
        track::commit(&mut self.queues, &mut views, &marks, &write, &ids, &gone);

        let queue_count = views.len();
        self.live.update(&self.broker.name, |b| {
            b.queues = Arc::new(views);
            b.totals = totals;
            b.rates = rates;
            b.vhosts = vhost_rates;
            let s = &mut b.status;
            s.up = Some(true);
            s.error = None;
            s.last_attempt = Some(now);
            s.last_success = Some(now);
            s.down_since = None;
            s.consecutive_failures = 0;
            s.last_poll_ms = Some(poll_ms);
            s.last_poll_bytes = Some(bytes as u64);
            s.rabbitmq_version = overview.rabbitmq_version.clone();
            s.cluster_name = overview.cluster_name.clone();
            s.stats_enabled = Some(stats_enabled);
        });
        Ok(PollStats { queues: queue_count, samples_written, bytes })
    }

    /// All pages of one vhost's queues; returns the bytes read.
    async fn fetch_vhost(&self, vhost: &str, out: &mut Vec<RawQueue>) -> Result<usize, PollError> {
        let mut bytes = 0;
        let mut page = 1;
        loop {
            let (body, size) = match self.client.queues_page(vhost, page).await {
                Ok(answer) => answer,
                // The vhost was deleted since the listing: it has no queues now.
                Err(BrokerError::Http { status: 404, .. }) => return Ok(bytes),
                // An empty vhost answers "page out of range" for page 1 on some versions.
                Err(BrokerError::Http { status: 400, ref body, .. }) if body.contains("page_out_of_range") => {
                    return Ok(bytes)
                }
                Err(e) => return Err(e.into()),
            };
            bytes += size;
            let page_count = body.page_count;
            out.extend(body.items.into_iter().map(|mut q| {
                if q.vhost.is_empty() {
                    q.vhost = vhost.to_string();
                }
                q
            }));
            if page >= page_count {
                return Ok(bytes);
            }
            page += 1;
        }
    }

    /// Refreshes stale vhost topologies and sets each view's dead-letter facts. A failed
    /// topology call keeps the previous topology (it is logged, the poll goes on): dead-letter
    /// routing is not worth losing the numbers for. Returns the bytes read.
    async fn apply_topology(&mut self, views: &mut [QueueView], marks: &[track::Mark], fetched: Instant) -> usize {
        let mut by_vhost: HashMap<&str, Vec<usize>> = HashMap::new();
        for (i, view) in views.iter().enumerate() {
            by_vhost.entry(view.vhost.as_str()).or_default().push(i);
        }
        let by_vhost: Vec<(String, Vec<usize>)> = by_vhost.into_iter().map(|(v, i)| (v.to_string(), i)).collect();
        let mut bytes = 0;
        for (vhost, indexes) in &by_vhost {
            // A queue seen for the first time, or whose settings changed, may change routing.
            let changed = indexes.iter().any(|&i| marks[i].meta.is_some());
            let stale = self.topology.get(vhost).is_none_or(|(at, _)| fetched.duration_since(*at) >= TOPOLOGY_EVERY);
            if changed || stale {
                match self.fetch_topology(vhost).await {
                    Ok((topology, size)) => {
                        bytes += size;
                        self.topology.insert(vhost.clone(), (fetched, topology));
                    }
                    Err(e) => {
                        tracing::warn!(broker = %self.broker.name, %vhost, error = %e, "topology refresh failed")
                    }
                }
            }
            let topology = self.topology.get(vhost).map(|(_, t)| t);
            let configs: Vec<QueueConfig<'_>> = indexes
                .iter()
                .map(|&i| QueueConfig {
                    name: &views[i].name,
                    arguments: &views[i].arguments,
                    effective_policy: &views[i].effective_policy,
                })
                .collect();
            let mut info = topology::analyse(&configs, topology);
            for &i in indexes {
                if let Some(facts) = info.remove(&views[i].name) {
                    views[i].dead_letters = facts;
                }
            }
        }
        self.topology.retain(|vhost, _| by_vhost.iter().any(|(v, _)| v == vhost));
        bytes
    }

    async fn fetch_topology(&self, vhost: &str) -> Result<(VhostTopology, usize), BrokerError> {
        let (bindings, a) = self.client.bindings(vhost).await?;
        let (exchanges, b) = self.client.exchanges(vhost).await?;
        Ok((VhostTopology { bindings, exchanges }, a + b))
    }

    /// Rates span at least one poll interval and at least two stats steps (10 s).
    fn rate_window_secs(&self) -> f64 {
        self.broker.poll_interval.as_secs_f64().max(2.0 * metrics::STATS_STEP_SECS)
    }

    /// Readings older than this are never a baseline (see `CounterWindow::baseline`).
    fn keep_readings_secs(&self) -> f64 {
        (self.rate_window_secs() * 5.0).max(65.0)
    }

    fn broker_rates(&mut self, overview: &Overview, stats_enabled: bool, fetched: Instant) -> BrokerRates {
        let current = BrokerCounters::from_overview(overview.message_stats.as_ref(), stats_enabled);
        let (window, keep) = (self.rate_window_secs(), self.keep_readings_secs());
        rates_from(&mut self.broker_counters, current, fetched, window, keep)
    }

    /// Per-vhost rates: confirms and unroutable returns exist per vhost, not per queue.
    fn vhost_rates(&mut self, vhosts: &[VhostEntry], stats_enabled: bool, fetched: Instant) -> Vec<VhostLive> {
        let (window, keep) = (self.rate_window_secs(), self.keep_readings_secs());
        let mut out = Vec::with_capacity(vhosts.len());
        for vhost in vhosts {
            let current = BrokerCounters::from_overview(vhost.message_stats.as_ref(), stats_enabled);
            let counters = self.vhost_counters.entry(vhost.name.clone()).or_default();
            out.push(VhostLive {
                name: vhost.name.clone(),
                rates: rates_from(counters, current, fetched, window, keep),
            });
        }
        self.vhost_counters.retain(|name, _| vhosts.iter().any(|v| &v.name == name));
        out
    }
}

fn rates_from(
    window: &mut CounterWindow<BrokerCounters>,
    current: BrokerCounters,
    fetched: Instant,
    min_window_secs: f64,
    keep_secs: f64,
) -> BrokerRates {
    let rates = match window.baseline(fetched, min_window_secs) {
        Some((previous, age)) => metrics::broker_rates(&previous, &current, age),
        None => BrokerRates::default(),
    };
    window.push(fetched, current, keep_secs);
    rates
}

/// Delay after `failures` consecutive failed polls: the interval doubled per failure, at most
/// six intervals (one minute at the default 10 s).
pub fn backoff(interval: Duration, failures: u32) -> Duration {
    let factor = 1u32 << failures.saturating_sub(1).min(3);
    (interval * factor).min(interval * 6)
}

fn totals(views: &[QueueView]) -> BrokerTotals {
    // Unknown if any queue's value is unknown: a partial sum would be an undercount shown as fact.
    let sum = |f: fn(&QueueView) -> Option<u64>| views.iter().map(f).sum::<Option<u64>>();
    BrokerTotals {
        queues: views.len() as u64,
        ready: sum(|v| v.ready),
        unacked: sum(|v| v.unacked),
        consumers: sum(|v| v.consumers),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_and_caps_at_six_intervals() {
        let s = Duration::from_secs(10);
        assert_eq!(backoff(s, 1), Duration::from_secs(10));
        assert_eq!(backoff(s, 2), Duration::from_secs(20));
        assert_eq!(backoff(s, 3), Duration::from_secs(40));
        assert_eq!(backoff(s, 4), Duration::from_secs(60));
        assert_eq!(backoff(s, 30), Duration::from_secs(60));
    }
}
