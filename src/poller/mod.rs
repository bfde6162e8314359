//! One loop per broker: fetch, derive, store, publish to the live state.
//!
//! Never more than one request in flight per broker: the loop awaits each call and each poll
//! before sleeping. A failed poll keeps the last data (shown as stale), backs off exponentially
//! up to six poll intervals, and the loop recovers by itself when the broker answers again.
//!
//! Light on the broker (PERF.md: the stats of 10,000 queues cost it 3-4 CPU-seconds per call):
//! depth, consumers and head timestamps come every poll from the Prometheus plugin when it is
//! reachable and complete; the management listing with message stats (rates) and metadata runs
//! at a slower cadence set by the broker CPU budget (`load::stats_interval`), sooner when the
//! scrape shows queues the listing does not have. Without the plugin every poll is a listing,
//! spaced by the same budget.
//!
//! A poll is a plan, then its execution: `plan` decides every queue call and where each metric
//! comes from, `reads` carries the plan out (a failed scrape yields the next plan), `overlay`
//! lays the scrape over the listing; then `track` derives the views, `routing` their roles,
//! `rates` the vhosts' rates and the totals, and `report` what the broker page says. `cadence`
//! and `load` space the calls by the broker CPU budget.

mod cadence;
mod clients;
mod estimate;
mod exchanges;
pub mod listings;
mod load;
mod nodes;
mod overlay;
mod plan;
mod rates;
mod reads;
mod report;
pub mod restore;
mod routing;
mod shared;
mod track;
mod worked;

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use tokio_util::sync::CancellationToken;

pub use self::load::clients_interval;
use self::reads::{Found, QueueReads, Reads};
use self::track::{CounterSource, PollContext, QueueKey, Tracked};
use crate::broker::management::{BrokerError, ManagementClient, Overview, RawQueue, VhostEntry};
use crate::broker::prometheus::PrometheusClient;
use crate::broker::topology::VhostTopology;
use crate::config::BrokerConfig;
use crate::history::{self, KnownQueue};
use crate::live::{BrokerLoad, CallRecord, Live, PrometheusState};
use crate::metrics::{rate_to_milli, BrokerCounters, CounterWindow};
use crate::storage::Store;

pub use self::track::{keyframe_due, KEYFRAME_SECS};

/// Everything one broker's loop owns.
pub struct Poller {
    broker: BrokerConfig,
    client: ManagementClient,
    /// The history and everything else warren keeps.
    store: Store,
    live: Live,
    broker_id: i64,
    queues: HashMap<QueueKey, Tracked>,
    vhost_counters: HashMap<String, CounterWindow<BrokerCounters>>,
    /// When the vhosts were last listed (`vhost_rates`): a vhost absent then is new since.
    vhosts_listed_at: Option<Instant>,
    /// Shared with the pages (`TopologyLive`), which read routing from it.
    topology: HashMap<String, (Instant, Arc<VhostTopology>)>,
    /// The exchange listing and its publish rates (the exchanges page).
    exchanges: exchanges::ExchangeReader,
    /// Number of the current poll (see `track::derive`).
    polls: u64,
    prometheus: Option<PrometheusClient>,
    /// When an unavailable Prometheus endpoint is tried again.
    prometheus_retry_at: Option<Instant>,
    /// Scrapes that failed in a row since the last answer (sets the retry's backoff).
    prometheus_failures: u32,
    /// The last stats listing: metadata and counters that polls between listings reuse.
    listing: Option<Listing>,
    /// The source of the last fresh per-queue counters (what the rates shown are from).
    counters_from: Option<CounterSource>,
    /// The last scrape showed queues the listing does not have (created since).
    need_listing: bool,
    /// Why the last scrape asked for a listing, when it did.
    need_listing_why: Option<&'static str>,
    /// Listed queues the last scrape did not serve: still listed at the next listing means the
    /// endpoint is incomplete (in a cluster each node serves only its own queues' metrics).
    missing_in_scrape: HashMap<(String, String), Instant>,
    /// Broker time of the last poll's calls: all of them, the cheap ones, the stats listing.
    last_calls: PollCalls,
    /// When consumers were last scraped, and what that scrape took (4.x, where they have a
    /// cadence of their own: `detail_every`).
    detail_at: Option<Instant>,
    detail_cost: Duration,
    /// Queues whose head may have moved since the last listing read their head timestamp: it
    /// stays unknown until the next listing, even if a later scrape looks unmoved again.
    head_moved: HashSet<(String, String)>,
    /// A resource alarm in force (the reason), from the health check.
    alarm: Option<String>,
    load: BrokerLoad,
    /// Every distinct argument map, effective policy and short name (vhost, type, state), held
    /// once.
    maps: shared::SharedMaps,
    /// Where a failed history write is reported (`report_storage_to`): warren's storage, not the
    /// broker, so the broker is not marked down for it.
    storage: Option<Arc<crate::history::storage::Storage>>,
    /// The dead-letter browser's snapshots: what their messages say of a queue's role where the
    /// topology says nothing (an application's error queue).
    snapshots: Option<crate::dlq::browse::Snapshots>,
    /// The moves: which queues they put messages into, and when (`estimate::apply_fifo_breaks`).
    jobs: Option<crate::dlq::jobs::Jobs>,
    /// The custody intakes, whose states the views carry (`custody_intake_stopped`), and whose
    /// store holds custody's counts of each queue.
    intakes: Option<crate::dlq::custody::Custody>,
    /// The queues in warren's custody: their intake is a consumer of warren's own, which says
    /// nothing about what the queue is for (`apply_topology`).
    custody: Vec<crate::config::CustodyRule>,
    /// The last client listings and the connection churn (`clients`).
    clients: clients::ClientListings,
    /// The cluster's nodes as last read (`nodes`), and whether the disk readings were seeded
    /// from the history yet.
    nodes: crate::broker::nodes::NodesLive,
    /// Queues seen with consumers while they were work queues: the roles keep them (`worked`).
    worked: worked::Worked,
    nodes_seeded: bool,
    /// The watched queues as stored, until `show_last_known` shows them (warren's start calls
    /// it; until then they are held here).
    last_known: Vec<KnownQueue>,
    /// This replica and the name of its lease on this broker (`under_lease`): a poll writes only
    /// while the lease holds, fenced with its epoch. `None` (tests, benchmarks): unfenced.
    lease: Option<(Arc<crate::replicas::Replica>, String)>,
    /// When the listings last written for the other replicas were read (`listings`).
    listings_written: listings::ListingTimes,
}

/// Durations of one poll's calls, the proxy for the broker time they cost (see `load`).
#[derive(Debug, Clone, Copy, Default)]
struct PollCalls {
    cheap: Duration,
    stats: Duration,
    other: Duration,
    /// The client listings: spaced by their own share of the budget, so not part of what
    /// stretches the poll interval (`total`).
    clients: Duration,
}

impl PollCalls {
    fn total(&self) -> Duration {
        self.cheap + self.stats + self.other
    }
}

struct Listing {
    queues: Vec<RawQueue>,
    /// Some queue was listed before its stats (or head timestamp) reached the listing: the next
    /// listing comes as soon as the budget allows. Kept here because the queues kept for the
    /// scrapes are the overlaid ones, which no longer show what the listing lacked.
    stats_pending: bool,
    at: Instant,
    sampled_at: DateTime<Utc>,
    cost: Duration,
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
    /// This replica no longer holds the broker's lease: another polls it now.
    #[error("another replica took this broker's polling over")]
    LeaseLost,
}

impl Poller {
    /// Loads what the database knows of this broker's queues, so that a restart does not
    /// rewrite every queue's sample.
    pub async fn new(broker: BrokerConfig, store: Store, live: Live, broker_id: i64) -> Result<Self, sqlx::Error> {
        // Sized once: a map grown by doubling holds both tables while it moves (34 MB at 50,000).
        let known = history::count_known_queues(&store, broker_id).await?;
        let mut queues = HashMap::with_capacity(usize::try_from(known).unwrap_or(0));
        // The same rows are the last known state the pages show until the first poll succeeds
        // (`show_last_known`).
        let mut last_known = Vec::new();
        history::known_queues(&store, broker_id, |k| {
            if k.deleted_at.is_none() && broker.watches_vhost(&k.meta.vhost) {
                last_known.push(k.clone());
            }
            let (key, tracked) = Tracked::from_known(k);
            queues.insert(key, tracked);
        })
        .await?;
        let worked = worked::Worked::load(&store, broker_id).await?;
        let client = ManagementClient::new(&broker);
        let management = client.endpoints();
        live.update(&broker.name, |b| b.status.management = management);
        let prometheus = broker.prometheus_url.clone().map(|url| PrometheusClient::new(&broker, url));
        let load = BrokerLoad {
            prometheus: PrometheusState {
                url: broker.prometheus_url.as_ref().map(crate::broker::prometheus::shown_url),
                reason: match &broker.prometheus_url {
                    Some(_) => "not tried yet: the first poll lists queues from the management API".into(),
                    None => "turned off in the configuration (prometheus_url = \"off\")".into(),
                },
                ..PrometheusState::default()
            },
            base_interval_secs: broker.poll_interval.as_secs_f64(),
            interval_secs: broker.poll_interval.as_secs_f64(),
            budget: broker.broker_cpu_budget,
            ..BrokerLoad::default()
        };
        Ok(Poller {
            broker,
            client,
            store,
            live,
            broker_id,
            queues,
            vhost_counters: HashMap::new(),
            vhosts_listed_at: None,
            topology: HashMap::new(),
            exchanges: exchanges::ExchangeReader::default(),
            polls: 0,
            prometheus,
            prometheus_retry_at: None,
            prometheus_failures: 0,
            listing: None,
            counters_from: None,
            need_listing: false,
            need_listing_why: None,
            missing_in_scrape: HashMap::new(),
            last_calls: PollCalls::default(),
            detail_at: None,
            detail_cost: Duration::ZERO,
            head_moved: HashSet::new(),
            alarm: None,
            load,
            maps: shared::SharedMaps::default(),
            storage: None,
            snapshots: None,
            jobs: None,
            intakes: None,
            custody: Vec::new(),
            clients: clients::ClientListings::default(),
            nodes: Default::default(),
            listings_written: Default::default(),
            nodes_seeded: false,
            last_known,
            worked,
            lease: None,
        })
    }

    /// Shows the last known state of the broker's queues, from the database, until the first
    /// poll succeeds. After `watch_dead_letter_work`, so that the roles leave custody's intake
    /// consumers out as the polls do.
    pub async fn show_last_known(mut self) -> Result<Self, sqlx::Error> {
        let known = std::mem::take(&mut self.last_known);
        restore::seed(&self.store, &self.live, &self.broker.name, self.broker_id, known, &self.custody, &self.worked)
            .await?;
        Ok(self)
    }

    /// Polls only while `replica` holds this broker's lease (`replicas::broker_work`), and
    /// writes each poll in a transaction fenced with it: a replica paused past its lease writes
    /// nothing after another took over.
    pub fn under_lease(mut self, replica: Arc<crate::replicas::Replica>) -> Self {
        self.lease = Some((replica, crate::replicas::broker_work(&self.broker.name)));
        self
    }

    /// The lease this poller works under, while it holds; `Ok(None)` without one.
    fn lease(&self) -> Result<Option<crate::storage::Held>, PollError> {
        match &self.lease {
            None => Ok(None),
            Some((replica, work)) => replica.held(work).map(Some).ok_or(PollError::LeaseLost),
        }
    }

    /// Reports the database's health to `storage`: a history write that fails is a fault of
    /// warren's storage, shown as such, and one that succeeds ends it.
    pub fn report_storage_to(mut self, storage: Arc<crate::history::storage::Storage>) -> Self {
        self.storage = Some(storage);
        self
    }

    /// Reads what the dead-letter browser's snapshots saw in each queue's messages (`observe`),
    /// and which queues moves put messages into (their age estimates do not hold for a while).
    pub fn watch_dead_letter_work(
        mut self,
        snapshots: crate::dlq::browse::Snapshots,
        jobs: crate::dlq::jobs::Jobs,
        custody: Vec<crate::config::CustodyRule>,
        intakes: crate::dlq::custody::Custody,
    ) -> Self {
        self.snapshots = Some(snapshots);
        self.jobs = Some(jobs);
        self.custody = custody;
        self.intakes = Some(intakes);
        self
    }

    /// Polls until `cancel` fires. The first poll starts at once.
    pub async fn run(mut self, cancel: CancellationToken) {
        let mut failures: u32 = 0;
        loop {
            let started = Instant::now();
            let attempt_at = Utc::now();
            // No call to the broker without the lease: another replica polls it.
            if self.lease().is_err() {
                return;
            }
            let outcome = tokio::select! {
                _ = cancel.cancelled() => return,
                outcome = self.poll_once() => outcome,
            };
            let delay = match outcome {
                Err(PollError::LeaseLost) => {
                    tracing::warn!(broker = %self.broker.name, "lost the lease on this broker: another replica polls it");
                    return;
                }
                Ok(_) => {
                    failures = 0;
                    if let Some(storage) = &self.storage {
                        storage.succeeded();
                    }
                    // `poll_once` set the interval from this poll's calls.
                    Duration::from_secs_f64(self.load.interval_secs).saturating_sub(started.elapsed())
                }
                // The broker answered; warren could not keep what it said. The broker is not
                // down (that would also fire its unreachable alert): the pages say the database is.
                Err(PollError::Storage(error)) => {
                    let message = match &self.storage {
                        Some(storage) => storage.failed("the history write", &error),
                        None => crate::history::storage::describe(&error),
                    };
                    let delay = self.next_interval();
                    self.load.backing_off =
                        Some(format!("this poll's history was not written ({message}): next try in {delay:?}"));
                    let load = self.load.clone();
                    self.live.update(&self.broker.name, |b| {
                        b.status.last_attempt = Some(attempt_at);
                        b.load = load;
                    });
                    delay
                }
                Err(error) => {
                    failures += 1;
                    let delay = backoff(self.next_interval(), failures);
                    self.load.backing_off = match &error {
                        PollError::Broker(BrokerError::Http { status: 503, .. }) => {
                            Some(format!("the broker answered 503 (overloaded or starting): next try in {delay:?}"))
                        }
                        _ => Some(format!("the last poll failed: next try in {delay:?}")),
                    };
                    let load = self.load.clone();
                    tracing::warn!(broker = %self.broker.name, %error, retry_in = ?delay, "poll failed");
                    self.live.update(&self.broker.name, |b| {
                        b.status.up = Some(false);
                        b.status.error = Some(error.to_string());
                        b.status.last_attempt = Some(attempt_at);
                        b.status.down_since.get_or_insert(attempt_at);
                        b.status.consecutive_failures = failures;
                        b.load = load;
                    });
                    delay
                }
            };
            self.live.poll_finished();
            let next = Utc::now() + chrono::Duration::from_std(delay).unwrap_or_default();
            let management = self.client.endpoints();
            self.live.update(&self.broker.name, |b| {
                b.status.next_poll_at = Some(next);
                b.status.management = management;
            });
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tokio::time::sleep(delay) => {}
            }
        }
    }

    /// One complete poll: every watched vhost's queues (from the scrape or the listing), then one
    /// write. Any failed management request fails the whole poll, so a partial listing never
    /// marks queues as deleted; a failed scrape falls back to the listing in the same poll.
    pub async fn poll_once(&mut self) -> Result<PollStats, PollError> {
        let started = Instant::now();
        let now = Utc::now();
        let mut calls = PollCalls::default();
        let (overview, mut bytes) =
            timed(&mut self.load, &mut calls.cheap, "management", "/api/overview", self.client.overview()).await?;
        // 4.x with the metrics collector off serves no message_stats at all: rates are then
        // unavailable, not zero.
        let stats_enabled = overview.disable_stats != Some(true) && overview.message_stats.is_some();
        let connection_churn =
            self.clients.churn.observe(Instant::now(), overview.churn_rates.as_ref().and_then(|c| c.connections()));

        let (vhosts, vhost_bytes) =
            timed(&mut self.load, &mut calls.cheap, "management", "/api/vhosts", self.client.vhosts()).await?;
        bytes += vhost_bytes;
        let watched: Vec<VhostEntry> = vhosts.into_iter().filter(|v| self.broker.watches_vhost(&v.name)).collect();
        self.alarm = self.check_alarms(&mut calls).await;
        bytes += self.read_nodes(&overview, now, &mut calls).await?;

        // A poll is a plan, then its execution: the plan decides every queue call and the source
        // of every queue metric before the first of them (`plan`).
        let planned = plan::plan(&self.plan_inputs(&overview, stats_enabled), started);
        let found = Found { watched: &watched, overview: &overview, stats_enabled, started, now };
        // A failed call yields the plan that serves the poll instead (`after_failed_scrape`),
        // which has no scrape to fail: the second plan ends it.
        let mut next = planned;
        let reads = loop {
            match self.read_queues(next, &found, &mut calls, &mut bytes).await? {
                Reads::Done(reads) => break reads,
                Reads::Instead(instead) => next = instead,
            }
        };
        let QueueReads { queues: raw_queues, counters, counters_at, done } = reads;
        let fetched = counters_at;
        // Topologies due by age are read before the views are built: the bindings listing is the
        // largest answer after the queues' (at least one binding per queue), and read here it is
        // not held beside two copies of every view (the pages' and this poll's). Those due
        // because a queue appeared or changed are read after `derive`, which finds them.
        let vhosts: HashSet<&str> = raw_queues.iter().flatten().map(|q| q.vhost.as_str()).collect();
        let vhosts: Vec<String> = vhosts.into_iter().map(str::to_string).collect();
        for vhost in vhosts {
            bytes += self.refresh_topology_if_stale(&vhost, fetched, &mut calls.other).await;
        }

        let own_reads = self.own_reads(now);
        let ctx = PollContext {
            own_reads,
            broker: self.broker.name.as_str().into(),
            stats_enabled: stats_enabled || counters == Some(CounterSource::Plugin),
            now,
            fetched,
            rate_window_secs: self.rate_window_secs(),
            keep_readings_secs: self.keep_readings_secs(),
            hold_limit_secs: self.broker.scheduled_hold_limit.as_secs_f64(),
            counters,
        };
        let broker = self.broker.clone();
        self.polls += 1;
        let (mut views, marks, gone) =
            track::derive(&mut self.queues, &mut self.maps, raw_queues, &ctx, self.polls, |v| broker.watches_vhost(v));
        let watched_names: Vec<&str> = watched.iter().map(|v| v.name.as_str()).collect();
        bytes += self.apply_topology(&mut views, &marks, &watched_names, fetched, &mut calls.other).await;
        estimate::estimate_ages(
            &self.store,
            &mut self.queues,
            &mut views,
            self.broker.poll_interval.as_secs_f64(),
            now,
        )
        .await?;
        let mut requeued: HashMap<String, Vec<(String, DateTime<Utc>)>> = HashMap::new();
        for ((vhost, queue), at) in self.jobs.as_ref().map(|j| j.requeued_into(&self.broker.name)).unwrap_or_default() {
            requeued.entry(queue).or_default().push((vhost, at));
        }
        estimate::apply_fifo_breaks(&mut self.queues, &mut views, &requeued, ctx.counters.is_some(), now);
        let custody = match &self.intakes {
            Some(intakes) => crate::dlq::custody::counts_by_queue(intakes.store(), &self.broker.name).await,
            None => Ok(HashMap::new()),
        };
        match custody {
            Ok(custody) if !custody.is_empty() => {
                for view in views.iter_mut() {
                    if let Some(c) = custody.get(&(view.vhost.to_string(), view.name.to_string())) {
                        view.apply_custody(c.held + c.claimed, c.oldest_taken_at, now);
                    }
                }
            }
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "reading custody counts"),
        }
        if let Some(intakes) = &self.intakes {
            for view in views.iter_mut() {
                view.custody_intake_stopped =
                    intakes.state(&self.broker.name, &view.vhost, &view.name).map(|s| s.state == "stopped");
            }
        }

        let stats_off_connections =
            overview.object_totals.as_ref().and_then(|t| t.connections).filter(|_| !stats_enabled);
        bytes += self.list_clients_if_due(started, &mut calls.clients, stats_off_connections).await;
        // During a resource alarm the exchange listing waits, as the queue listing does.
        if self.alarm.is_none() {
            let vhosts: Vec<String> = watched.iter().map(|v| v.name.clone()).collect();
            let ctx = exchanges::ReadContext {
                client: &self.client,
                broker: &self.broker,
                vhosts: &vhosts,
                stats_enabled,
                started,
                rate_window_secs: self.rate_window_secs(),
            };
            bytes += self.exchanges.read_if_due(ctx, &mut self.load, &mut calls.other).await;
        }
        let topology_live = Arc::new(self.exchanges.live(&self.broker, stats_enabled, &self.topology));

        let totals = rates::totals(&views);
        let vhost_rates = self.vhost_rates(&watched, stats_enabled, fetched);
        // The broker's row and its chart describe what warren watches, as its totals do: with
        // `vhosts_include` the overview's broker-wide rates counted publishes to vhosts whose
        // queues are not counted (issue 19, item 4: Consumers 0 beside Publish 438/s).
        let rates = rates::watched_rates(&vhost_rates);
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
        let ids = match self.lease()? {
            None => history::write_poll(&self.store, &write).await?,
            Some(held) => history::write_poll_fenced(&self.store, &write, &held).await?.ok_or(PollError::LeaseLost)?,
        };
        crate::memory::release_sqlite_freed_memory();
        track::commit(&mut self.queues, &mut views, &marks, &write, &ids, &gone);
        // The listings the pages show, for the replicas that do not poll this broker. A failed
        // write leaves them older there; the poll itself was kept.
        let fence = self.lease()?;
        let written = listings::store(
            &self.store,
            self.broker_id,
            self.clients.last.as_deref(),
            &topology_live,
            &self.nodes,
            &mut self.listings_written,
            fence.as_ref(),
        )
        .await;
        match written {
            Ok(true) => {}
            Ok(false) => return Err(PollError::LeaseLost),
            Err(error) => tracing::warn!(broker = %self.broker.name, %error, "keeping the listings failed"),
        }

        self.last_calls = calls;
        self.next_interval();
        self.update_load(now, &done, counters, stats_enabled);
        self.clients_load(now);
        let load = self.load.clone();
        let clients = self.clients.last.clone();
        let queue_count = views.len();
        self.live.update(&self.broker.name, |b| {
            b.queues = Arc::new(views);
            b.totals = totals;
            b.rates = rates;
            b.vhosts = vhost_rates;
            b.load = load;
            b.clients = clients;
            b.connection_churn_per_sec = connection_churn;
            b.topology = topology_live;
            b.nodes = self.nodes.clone();
            let s = &mut b.status;
            s.up = Some(true);
            s.error = None;
            s.last_attempt = Some(now);
            s.last_success = Some(now);
            // This poll's state replaced the one restored from the database.
            s.restored_from = None;
            s.down_since = None;
            s.consecutive_failures = 0;
            s.last_poll_ms = Some(poll_ms);
            s.last_poll_bytes = Some(bytes as u64);
            s.rabbitmq_version = overview.rabbitmq_version.clone();
            s.cluster_name = overview.cluster_name.clone();
            s.stats_enabled = Some(stats_enabled);
        });
        // The previous views are gone unless a page still reads them: maps only they held go.
        self.maps.prune();
        Ok(PollStats { queues: queue_count, samples_written, bytes })
    }

    /// A resource alarm (memory or disk) from the broker's health check, which answers 503 then.
    /// Other failures of the check (an old version without it) say nothing about alarms.
    async fn check_alarms(&mut self, calls: &mut PollCalls) -> Option<String> {
        let check = self.client.health_check::<serde_json::Value>("api/health/checks/alarms");
        match timed(&mut self.load, &mut calls.cheap, "management", "/api/health/checks/alarms", check).await {
            Err(BrokerError::Http { status: 503, body, .. }) => Some(body),
            _ => None,
        }
    }
}

/// RabbitMQ 4.0 or later (by the overview's version; an unknown version counts as older).
fn since_4_0(overview: &Overview) -> bool {
    overview.major_version().is_some_and(|m| m >= 4)
}

/// Awaits one call to the broker and records its duration, size and outcome.
async fn timed<T>(
    load: &mut BrokerLoad,
    spent: &mut Duration,
    source: &'static str,
    endpoint: &str,
    call: impl Future<Output = Result<(T, usize), BrokerError>>,
) -> Result<(T, usize), BrokerError> {
    let at = Utc::now();
    let started = Instant::now();
    let result = call.await;
    let took = started.elapsed();
    *spent += took;
    let (status, error, bytes) = match &result {
        Ok((_, size)) => (Some(200), None, *size as u64),
        Err(e) => {
            let status = match e {
                BrokerError::Unauthorized { status } | BrokerError::Forbidden { status } => Some(*status),
                BrokerError::Http { status, .. } => Some(*status),
                BrokerError::Malformed { .. } => Some(200),
                _ => None,
            };
            (status, Some(e.to_string()), 0)
        }
    };
    load.record(CallRecord {
        at,
        source,
        endpoint: endpoint.to_string(),
        duration_ms: took.as_secs_f64() * 1000.0,
        bytes,
        status,
        error,
    });
    result
}

/// Delay after `failures` consecutive failed polls: the interval doubled per failure, at most
/// six intervals (one minute at the default 10 s).
pub fn backoff(interval: Duration, failures: u32) -> Duration {
    let factor = 1u32 << failures.saturating_sub(1).min(3);
    (interval * factor).min(interval * 6)
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
