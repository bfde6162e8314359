//! One loop per broker: fetch, derive, store, publish to the live state.
//!
//! Never more than one poll in flight per broker (the loop awaits each poll before sleeping).
//! A failed poll keeps the last data (shown as stale), backs off exponentially up to six poll
//! intervals, and the loop recovers by itself when the broker answers again.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use tokio_util::sync::CancellationToken;

use crate::config::BrokerConfig;
use crate::history::{self, Db, PollWrite, QueueMeta, StoredSample};
use crate::management::{BrokerError, ManagementClient, RawQueue};
use crate::metrics::{
    self, rate_to_milli, BrokerCounters, CounterWindow, QueueCounters, QueueView,
};
use crate::state::{BrokerTotals, Live};

/// A queue's rows are rewritten at least this often even when nothing changed, so that a reader
/// never has to look further back than this for the value in force.
pub const KEYFRAME_SECS: i64 = 3600;

type QueueKey = (String, String);

/// What the poller remembers of a queue between polls.
struct Tracked {
    id: Option<i64>,
    meta: QueueMeta,
    deleted: bool,
    last_written: Option<(i64, StoredSample)>,
    /// Recent counter readings of the queue, for rates.
    counters: CounterWindow<QueueCounters>,
    /// After a re-creation, rates stay unknown until this time (see `SETTLE`).
    settle_until: Option<Instant>,
}

/// How long rates stay unknown after a queue was re-created (its counters went backwards or it
/// came back after being gone). Measured on 3.10: a channel that keeps publishing to the name
/// reports its cumulative per-queue count again at its next stats emission (every 5 s), so the
/// new queue's counter first drops, then jumps back up by everything published to the old
/// queue. Three stats intervals absorb that jump into the baseline instead of showing a spike.
const SETTLE: Duration = Duration::from_secs(15);

/// Everything one broker's loop owns.
pub struct Poller {
    broker: BrokerConfig,
    client: ManagementClient,
    db: Db,
    live: Live,
    broker_id: i64,
    queues: HashMap<QueueKey, Tracked>,
    broker_counters: CounterWindow<BrokerCounters>,
}

/// Result of one successful poll, for callers that measure (the benchmark).
#[derive(Debug, Clone, Copy)]
pub struct PollStats {
    pub queues: usize,
    pub samples_written: usize,
    pub bytes: usize,
}

impl Poller {
    /// Loads what the database knows of this broker's queues, so that a restart does not
    /// rewrite every queue's sample.
    pub async fn new(
        broker: BrokerConfig,
        db: Db,
        live: Live,
        broker_id: i64,
    ) -> Result<Self, sqlx::Error> {
        let known = history::known_queues(&db, broker_id).await?;
        let queues = known
            .into_iter()
            .map(|k| {
                let key = (k.meta.vhost.clone(), k.meta.name.clone());
                let tracked = Tracked {
                    id: Some(k.id),
                    meta: k.meta,
                    deleted: k.deleted_at.is_some(),
                    last_written: k.last_sample,
                    counters: CounterWindow::default(),
                    settle_until: None,
                };
                (key, tracked)
            })
            .collect();
        let client = ManagementClient::new(&broker);
        Ok(Poller {
            broker,
            client,
            db,
            live,
            broker_id,
            queues,
            broker_counters: CounterWindow::default(),
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
            let next = Utc::now() + chrono::Duration::from_std(delay).unwrap_or_default();
            self.live
                .update(&self.broker.name, |b| b.status.next_poll_at = Some(next));
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
        let stats_enabled = overview.disable_stats != Some(true);

        let (vhosts, vhost_bytes) = self.client.vhosts().await?;
        bytes += vhost_bytes;
        let mut raw_queues: Vec<RawQueue> = Vec::new();
        for vhost in vhosts.iter().filter(|v| self.broker.watches_vhost(&v.name)) {
            bytes += self.fetch_vhost(&vhost.name, &mut raw_queues).await?;
        }
        let fetched = Instant::now();
        let (views, write) = self.derive(&raw_queues, stats_enabled, now, fetched, &overview)?;
        let samples_written = write.samples.len() + write.new_samples.len();
        let poll_ms = started.elapsed().as_millis() as u64;
        let mut write = write;
        write.broker.poll_ms = poll_ms as i64;
        let ids = history::write_poll(&self.db, &write).await?;
        self.commit(&write, &ids);
        let mut views = views;
        for view in &mut views {
            view.id = self
                .queues
                .get(&(view.vhost.clone(), view.name.clone()))
                .and_then(|t| t.id);
        }

        let totals = totals(&views);
        let rates = self.broker_rates(&overview, stats_enabled, fetched);
        let queue_count = views.len();
        self.live.update(&self.broker.name, |b| {
            b.queues = Arc::new(views);
            b.totals = totals;
            b.rates = rates;
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
        Ok(PollStats {
            queues: queue_count,
            samples_written,
            bytes,
        })
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
                Err(BrokerError::Http {
                    status: 400,
                    ref body,
                    ..
                }) if body.contains("page_out_of_range") => return Ok(bytes),
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

    /// Turns raw queues into views and the rows to write. Does not touch `self.queues` beyond
    /// reading it; `commit` records what was written once the write succeeded.
    fn derive(
        &mut self,
        raw_queues: &[RawQueue],
        stats_enabled: bool,
        now: DateTime<Utc>,
        fetched: Instant,
        overview: &crate::management::Overview,
    ) -> Result<(Vec<QueueView>, PollWrite), PollError> {
        let ts = now.timestamp();
        let mut write = PollWrite {
            broker_id: self.broker_id,
            ts,
            ..PollWrite::default()
        };
        let mut views = Vec::with_capacity(raw_queues.len());
        let mut seen: HashSet<(&str, &str)> = HashSet::with_capacity(raw_queues.len());

        let rate_window = self.rate_window_secs();
        for raw in raw_queues {
            if !seen.insert((&raw.vhost, &raw.name)) {
                continue; // a queue created during pagination can shift into the next page twice
            }
            let key = (raw.vhost.clone(), raw.name.clone());
            let mut tracked = self.queues.get_mut(&key);
            let current = metrics::queue_counters(raw, stats_enabled);
            if let Some(t) = tracked.as_deref_mut() {
                let went_back = t
                    .counters
                    .latest()
                    .is_some_and(|c| counters_went_back(c, &current));
                if t.deleted || went_back {
                    t.settle_until = Some(fetched + SETTLE);
                }
            }
            let baseline = tracked
                .as_ref()
                .filter(|t| !t.deleted && t.settle_until.is_none_or(|until| fetched >= until))
                .and_then(|t| t.counters.baseline(fetched, rate_window));
            let previous = baseline.as_ref().map(|(c, age)| (c, *age));
            let view = metrics::queue_view(&self.broker.name, raw, stats_enabled, previous, now);
            let meta = queue_meta(&view);
            let sample = stored_sample(&view);

            match tracked {
                Some(t) => {
                    let changed_meta = t.meta != meta || t.deleted || t.id.is_none();
                    let due = match t.last_written {
                        Some((last_ts, last)) => last != sample || ts - last_ts >= KEYFRAME_SECS,
                        None => true,
                    };
                    if changed_meta {
                        write.upserts.push(meta);
                        if t.id.is_none() {
                            write.new_samples.push((write.upserts.len() - 1, sample));
                        } else if due || t.deleted {
                            write.samples.push((t.id.expect("checked"), sample));
                        }
                    } else if due {
                        write.samples.push((t.id.expect("checked"), sample));
                    }
                }
                None => {
                    write.upserts.push(meta);
                    write.new_samples.push((write.upserts.len() - 1, sample));
                }
            }
            views.push(view);
        }

        for (key, tracked) in self.queues.iter_mut() {
            let gone = !tracked.deleted
                && self.broker.watches_vhost(&key.0)
                && !seen.contains(&(key.0.as_str(), key.1.as_str()));
            if gone {
                // Forget the counters: a queue that comes back under this name starts afresh.
                tracked.counters.clear();
                if let Some(id) = tracked.id {
                    write.deleted.push(id);
                }
            }
        }

        let totals = totals(&views);
        let rates = self.peek_broker_rates(overview, stats_enabled, fetched);
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
            poll_ms: 0,
        };

        // Remember counters for the next polls' rates (independent of whether the write works).
        let keep = self.keep_readings_secs();
        for view in &views {
            let key = (view.vhost.clone(), view.name.clone());
            match self.queues.get_mut(&key) {
                Some(t) => t.counters.push(fetched, view.counters, keep),
                None => {
                    let mut counters = CounterWindow::default();
                    counters.push(fetched, view.counters, keep);
                    self.queues.insert(
                        key,
                        Tracked {
                            id: None,
                            meta: queue_meta(view),
                            deleted: false,
                            last_written: None,
                            counters,
                            settle_until: None,
                        },
                    );
                }
            }
        }
        Ok((views, write))
    }

    /// Records a successful write: ids of new queues, what each queue has stored, deletions.
    fn commit(&mut self, write: &PollWrite, ids: &[i64]) {
        let mut by_id: HashMap<i64, &mut Tracked> = HashMap::new();
        for (i, meta) in write.upserts.iter().enumerate() {
            if let Some(t) = self
                .queues
                .get_mut(&(meta.vhost.clone(), meta.name.clone()))
            {
                t.id = Some(ids[i]);
                t.meta = meta.clone();
                t.deleted = false;
            }
        }
        for t in self.queues.values_mut() {
            if let Some(id) = t.id {
                by_id.insert(id, t);
            }
        }
        for (id, sample) in &write.samples {
            if let Some(t) = by_id.get_mut(id) {
                t.last_written = Some((write.ts, *sample));
            }
        }
        for (index, sample) in &write.new_samples {
            if let Some(t) = by_id.get_mut(&ids[*index]) {
                t.last_written = Some((write.ts, *sample));
            }
        }
        for id in &write.deleted {
            if let Some(t) = by_id.get_mut(id) {
                t.deleted = true;
            }
        }
    }

    /// Rates span at least one poll interval and at least two stats steps (10 s).
    fn rate_window_secs(&self) -> f64 {
        self.broker
            .poll_interval
            .as_secs_f64()
            .max(2.0 * metrics::STATS_STEP_SECS)
    }

    /// Readings older than this are never a baseline (see `CounterWindow::baseline`).
    fn keep_readings_secs(&self) -> f64 {
        (self.rate_window_secs() * 5.0).max(65.0)
    }

    fn peek_broker_rates(
        &self,
        overview: &crate::management::Overview,
        stats_enabled: bool,
        fetched: Instant,
    ) -> metrics::BrokerRates {
        let current = BrokerCounters::from_overview(overview.message_stats.as_ref(), stats_enabled);
        match self
            .broker_counters
            .baseline(fetched, self.rate_window_secs())
        {
            Some((previous, age)) => metrics::broker_rates(&previous, &current, age),
            None => metrics::BrokerRates::default(),
        }
    }

    fn broker_rates(
        &mut self,
        overview: &crate::management::Overview,
        stats_enabled: bool,
        fetched: Instant,
    ) -> metrics::BrokerRates {
        let rates = self.peek_broker_rates(overview, stats_enabled, fetched);
        let current = BrokerCounters::from_overview(overview.message_stats.as_ref(), stats_enabled);
        let keep = self.keep_readings_secs();
        self.broker_counters.push(fetched, current, keep);
        rates
    }
}

/// Why a poll failed: the broker, or warren's own storage.
#[derive(Debug, thiserror::Error)]
pub enum PollError {
    #[error(transparent)]
    Broker(#[from] BrokerError),
    #[error("storage error: {0}")]
    Storage(#[from] sqlx::Error),
}

/// Delay after `failures` consecutive failed polls: the interval doubled per failure, at most
/// six intervals (one minute at the default 10 s).
pub fn backoff(interval: Duration, failures: u32) -> Duration {
    let factor = 1u32 << failures.saturating_sub(1).min(3);
    (interval * factor).min(interval * 6)
}

fn counters_went_back(previous: &QueueCounters, current: &QueueCounters) -> bool {
    let back = |p: Option<u64>, c: Option<u64>| matches!((p, c), (Some(p), Some(c)) if c < p);
    back(previous.publish, current.publish)
        || back(previous.deliver, current.deliver)
        || back(previous.ack, current.ack)
        || back(previous.redeliver, current.redeliver)
}

fn queue_meta(view: &QueueView) -> QueueMeta {
    QueueMeta {
        vhost: view.vhost.clone(),
        name: view.name.clone(),
        kind: view.kind.clone(),
        durable: view.durable,
        arguments: serde_json::Value::Object(view.arguments.clone()).to_string(),
        policy: view.policy.clone(),
        effective_policy: serde_json::Value::Object(view.effective_policy.clone()).to_string(),
    }
}

fn stored_sample(view: &QueueView) -> StoredSample {
    StoredSample {
        ready: view.ready.map(|v| v as i64),
        unacked: view.unacked.map(|v| v as i64),
        consumers: view.consumers.map(|v| v as i64),
        publish_count: view.counters.publish.map(|v| v as i64),
        publish_rate_m: rate_to_milli(view.publish_rate),
        deliver_rate_m: rate_to_milli(view.deliver_rate),
        ack_rate_m: rate_to_milli(view.ack_rate),
        redeliver_rate_m: rate_to_milli(view.redeliver_rate),
        head_ts: view.head_ts,
    }
}

fn totals(views: &[QueueView]) -> BrokerTotals {
    let sum = |f: fn(&QueueView) -> Option<u64>| {
        views.iter().filter_map(f).reduce(|a, b| a + b).or(Some(0))
    };
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
