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

mod clients;
mod estimate;
mod exchanges;
mod load;
mod nodes;
pub mod restore;
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
use self::track::{CounterSource, PollContext, QueueKey, Tracked};
use crate::broker::management::{BrokerError, ManagementClient, Overview, QueueStats, RawQueue, VhostEntry};
use crate::broker::policies;
use crate::broker::prometheus::{PrometheusClient, Scrape};
use crate::broker::topology::{self, QueueConfig, VhostTopology};
use crate::config::BrokerConfig;
use crate::history::{self, Db, KnownQueue};
use crate::live::{BrokerLoad, BrokerTotals, CallRecord, Live, MetricSource, PrometheusState, VhostLive};
use crate::metrics::{self, rate_to_milli, BrokerCounters, BrokerRates, CounterWindow, QueueView};

pub use self::track::{keyframe_due, KEYFRAME_SECS};

/// Bindings change rarely and listing them costs the broker: refresh each vhost's topology at
/// most this often, or sooner when a queue appears or its arguments or policy change. On 4.x
/// with the metadata listing, with it (`METADATA_EVERY`): the bindings listing of 10,000
/// queues (one default-exchange binding each) cost 4.0.5 0.18 CPU-s, as much again as the
/// metadata listing, and every 60 s it alone was a sixth of the reference scrape's cost.
const TOPOLOGY_EVERY: Duration = Duration::from_secs(60);

/// A listed queue the plugin has not served for this long makes the plugin an incomplete source
/// (in a cluster each node serves only its own queues). New queues reach the plugin's tables
/// seconds after they exist, so a shorter absence proves nothing.
const MISSING_GRACE: Duration = Duration::from_secs(30);

/// On RabbitMQ 4.x the plugin serves the counters, so the queue listing is only for metadata
/// (type, arguments, durability): listed this often, or sooner when a queue appears. A policy
/// changed since shows on the queue page within this time; the dead-letter actions read
/// policies at the moment they act (`policies::queue_now`), never from here.
const METADATA_EVERY: Duration = Duration::from_secs(300);

/// The share of `broker_cpu_budget` that scraping consumers may cost on 4.x: they are asked
/// every poll while that is cheap, else spaced (and then at least every `stats_max_interval`).
/// A tenth: measured on 4.0.5 at 10,000 queues, depth and consumers every 10 s is what a
/// Prometheus server scraping the plugin costs the broker (1.06 CPU-s per minute), of which
/// consumers are the larger part (`queue_consumer_count` reads the plugin's largest table),
/// and warren's depth and counters plus its small calls already take 0.7 of it: consumers
/// every poll could not stay within it (benches/README.md). Before 4.0 the stats listing is
/// the expensive call, and consumers come every poll.
const DETAIL_SHARE: f64 = 0.1;

/// Everything one broker's loop owns.
pub struct Poller {
    broker: BrokerConfig,
    client: ManagementClient,
    db: Db,
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
    /// The custody intakes, whose states the views carry (`custody_intake_stopped`).
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

/// What one poll asks of the broker, decided before its first queue call (`Poller::plan`).
/// Where each metric comes from follows from it, and the broker page shows both.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct PollPlan {
    /// List queues from the management API: metadata (type, arguments, policy) always; depth,
    /// head timestamps and (with stats) counters when no scrape serves them.
    list: bool,
    /// Scrape the Prometheus plugin: depth.
    scrape: bool,
    /// Ask the scrape for consumers too: every poll before 4.0; on 4.x with every listing and
    /// at their own cadence in between (`Poller::detail_every`).
    scrape_consumers: bool,
    /// Ask the scrape for per-queue counters (4.x): rates then come from the plugin every poll.
    scrape_counters: bool,
    /// Ask the scrape for head timestamps (`queue_metrics`, about 4x the cost of depth).
    scrape_head_timestamps: bool,
    /// The listing has no message stats, effective policies or head timestamps: the broker
    /// collects none (metrics collector off). warren resolves policies itself and asks the
    /// listing poll's scrape for head timestamps.
    light_listing: bool,
    /// Why this poll lists, when it does (counted on the broker page: `listing_reasons`).
    list_reason: Option<&'static str>,
}

impl PollPlan {
    /// The plan that serves a poll whose scrape failed, decided from this one: the listing
    /// when the plan only scraped (with message stats when the broker collects them), or the
    /// stats listing when its metadata listing had no depth without the scrape. `None` when
    /// the listing this plan makes serves without the scrape.
    fn after_failed_scrape(&self, stats_enabled: bool) -> Option<PollPlan> {
        let listing = PollPlan {
            list: true,
            scrape: false,
            light_listing: !stats_enabled,
            list_reason: Some("the scrape failed"),
            ..*self
        };
        (!self.list || (self.light_listing && stats_enabled)).then_some(listing)
    }

    /// The plan in words, for the broker page.
    fn describe(&self) -> String {
        let mut calls = Vec::new();
        if self.scrape {
            let mut families = vec!["depth"];
            if self.scrape_consumers {
                families.push("consumers");
            }
            if self.scrape_counters {
                families.push("per-queue counters");
            }
            if self.scrape_head_timestamps {
                families.push("head timestamps");
            }
            calls.push(format!("prometheus /metrics/detailed ({})", families.join(", ")));
        }
        if self.list && self.light_listing && self.scrape {
            calls.push("management queue listing without message stats (metadata only, one call)".to_string());
        } else if self.list && self.light_listing {
            calls.push("management queue listing without message stats (metadata, totals)".to_string());
        } else if self.list {
            calls.push("management queue listing with message stats".to_string());
        }
        calls.join(" + ")
    }
}

/// Which source served this poll's depth.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum DepthSource {
    Prometheus,
    Listing,
}

/// What the poll's first calls found, for carrying out its plan (`Poller::read_queues`).
#[derive(Clone, Copy)]
struct Found<'a> {
    watched: &'a [VhostEntry],
    overview: &'a Overview,
    stats_enabled: bool,
    started: Instant,
    now: DateTime<Utc>,
}

/// What carrying out a plan's queue reads gave.
struct QueueReads {
    queues: Vec<Vec<RawQueue>>,
    depth_source: DepthSource,
    counters: Option<CounterSource>,
    /// When the counters were read: the start of the call that served them. Rates need
    /// readings a whole number of 5 s stats steps apart (`CounterWindow::baseline`); with one
    /// reading per listing, the listing's varying duration must not shift its time.
    counters_at: Instant,
    /// The plan as carried out: a listing whose scrape failed served without it.
    done: PollPlan,
}

/// How carrying out a plan's queue reads ended.
enum Reads {
    Done(QueueReads),
    /// A call failed, and this plan serves the poll instead.
    Instead(PollPlan),
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
        // Sized once: a map grown by doubling holds both tables while it moves (34 MB at 50,000).
        let known = history::count_known_queues(&db, broker_id).await?;
        let mut queues = HashMap::with_capacity(usize::try_from(known).unwrap_or(0));
        // The same rows are the last known state the pages show until the first poll succeeds
        // (`show_last_known`).
        let mut last_known = Vec::new();
        history::known_queues(&db, broker_id, |k| {
            if k.deleted_at.is_none() && broker.watches_vhost(&k.meta.vhost) {
                last_known.push(k.clone());
            }
            let (key, tracked) = Tracked::from_known(k);
            queues.insert(key, tracked);
        })
        .await?;
        let worked = worked::Worked::load(&db, broker_id).await?;
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
            db,
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
            nodes_seeded: false,
            last_known,
            worked,
        })
    }

    /// Shows the last known state of the broker's queues, from the database, until the first
    /// poll succeeds. After `watch_dead_letter_work`, so that the roles leave custody's intake
    /// consumers out as the polls do.
    pub async fn show_last_known(mut self) -> Result<Self, sqlx::Error> {
        let known = std::mem::take(&mut self.last_known);
        restore::seed(&self.db, &self.live, &self.broker.name, self.broker_id, known, &self.custody, &self.worked)
            .await?;
        Ok(self)
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
            let outcome = tokio::select! {
                _ = cancel.cancelled() => return,
                outcome = self.poll_once() => outcome,
            };
            let delay = match outcome {
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

        let plan = self.plan(started, &overview, stats_enabled);
        let found = Found { watched: &watched, overview: &overview, stats_enabled, started, now };
        // A failed call yields the plan that serves the poll instead (`after_failed_scrape`),
        // which has no scrape to fail: the second plan ends it.
        let mut next = plan;
        let reads = loop {
            match self.read_queues(next, &found, &mut calls, &mut bytes).await? {
                Reads::Done(reads) => break reads,
                Reads::Instead(instead) => next = instead,
            }
        };
        let QueueReads { queues: raw_queues, depth_source, counters, counters_at, done: plan } = reads;
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
        bytes += self.apply_topology(&mut views, &marks, fetched, &mut calls.other).await;
        estimate::estimate_ages(&self.db, &mut self.queues, &mut views, self.broker.poll_interval.as_secs_f64(), now)
            .await?;
        let mut requeued: HashMap<String, Vec<(String, DateTime<Utc>)>> = HashMap::new();
        for ((vhost, queue), at) in self.jobs.as_ref().map(|j| j.requeued_into(&self.broker.name)).unwrap_or_default() {
            requeued.entry(queue).or_default().push((vhost, at));
        }
        estimate::apply_fifo_breaks(&mut self.queues, &mut views, &requeued, ctx.counters.is_some(), now);
        match crate::dlq::custody::counts_by_queue(&self.db, &self.broker.name).await {
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

        let totals = totals(&views);
        let vhost_rates = self.vhost_rates(&watched, stats_enabled, fetched);
        // The broker's row and its chart describe what warren watches, as its totals do: with
        // `vhosts_include` the overview's broker-wide rates counted publishes to vhosts whose
        // queues are not counted (issue 19, item 4: Consumers 0 beside Publish 438/s).
        let rates = watched_rates(&vhost_rates);
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
        crate::memory::release_sqlite_freed_memory();
        track::commit(&mut self.queues, &mut views, &marks, &write, &ids, &gone);

        self.last_calls = calls;
        self.next_interval();
        self.update_load(now, &plan, depth_source, counters, stats_enabled);
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

    /// Carries out `plan`'s queue reads: the scrape, the listing, or both. A failed scrape ends
    /// with the plan that serves the poll instead, when the listing made cannot serve without it.
    async fn read_queues(
        &mut self,
        plan: PollPlan,
        found: &Found<'_>,
        calls: &mut PollCalls,
        bytes: &mut usize,
    ) -> Result<Reads, PollError> {
        let Found { stats_enabled, started, now, .. } = *found;
        let mut done = plan;
        let mut counters_at = Instant::now();
        let mut raw_queues: Vec<Vec<RawQueue>> = Vec::new();
        let mut depth_source = DepthSource::Listing;
        let mut counters = None;
        if !plan.list {
            counters_at = Instant::now();
            let mut spent = Duration::ZERO;
            let answer = self.scrape(found.watched, &plan, found.overview.cluster_name.as_deref(), &mut spent).await;
            // On 4.x consumers have a cadence of their own: a scrape with them is not what
            // every poll costs.
            let detail = plan.scrape_consumers && plan.scrape_counters;
            if detail {
                calls.other += spent;
            } else {
                calls.cheap += spent;
            }
            match answer {
                Ok((scrape, size)) => {
                    *bytes += size;
                    self.prometheus_answered(now, &scrape);
                    counters = scrape.has_counters.then_some(CounterSource::Plugin);
                    if detail {
                        self.detail_at = Some(counters_at);
                        self.detail_cost = spent;
                    }
                    let base = self.listing.as_ref().map(|l| l.queues.clone()).unwrap_or_default();
                    let overlaid = self.overlay(base, &scrape, None);
                    if scrape.has_consumers {
                        // Kept for the polls that do not ask for consumers (same order: the
                        // overlay keeps the listing's).
                        if let Some(listing) = &mut self.listing {
                            for (kept, now) in listing.queues.iter_mut().zip(&overlaid) {
                                kept.consumers = now.consumers;
                            }
                        }
                    }
                    raw_queues = vec![overlaid];
                    depth_source = DepthSource::Prometheus;
                }
                Err(error) => {
                    // The listing serves this poll instead.
                    self.prometheus_failed(started, now, &error);
                    return Ok(Reads::Instead(plan.after_failed_scrape(stats_enabled).expect("a scrape-only plan")));
                }
            }
        }
        if plan.list {
            let reason = plan.list_reason.unwrap_or("unknown");
            *self.load.listing_reasons.entry(reason.to_string()).or_default() += 1;
            // Kept as the pages they came in: `derive` frees each page once it is read, so
            // the whole listing (16 MB at 50,000 queues) is never held beside both views.
            counters_at = Instant::now();
            for vhost in found.watched {
                // Totals only when no scrape serves depth: measured on 4.0.5 with the metrics
                // collector off at 10,000 queues, a listing with them cost the broker 5.94 CPU-s,
                // without 1.14.
                let totals = plan.light_listing && !plan.scrape;
                *bytes += if plan.light_listing && plan.scrape {
                    self.fetch_metadata(&vhost.name, &mut raw_queues, &mut calls.stats).await?
                } else {
                    self.fetch_vhost(&vhost.name, plan.light_listing, totals, &mut raw_queues, &mut calls.stats).await?
                };
            }
            if plan.light_listing {
                // A light listing (and any listing with the metrics collector off) has no
                // effective policy.
                *bytes += self.apply_policies(found.watched, &mut raw_queues, &mut calls.stats).await;
            }
            // Nor a delivery limit, and a full listing lacks it too for a queue whose first
            // stats are not in yet: on 4.x a quorum queue always has one, so reads of it must
            // be confirmed from the first listing on. 3.x listings never say it; its argument
            // or policy does.
            let since_4_0 = since_4_0(found.overview);
            for q in raw_queues.iter_mut().flatten() {
                if q.kind.as_deref() == Some("quorum") && q.delivery_limit.is_none() {
                    q.delivery_limit = policies::delivery_limit(q, since_4_0);
                }
            }
            counters = (stats_enabled && !plan.light_listing).then_some(CounterSource::Listing);
            // Depth from the scrape on listing polls too: the listing's counts lag the
            // plugin's by up to a stats interval, and alternating sources would make depth
            // jump back and forth (an alert on depth would flap). On 4.x the counters come from
            // it too, so that a rate window never mixes the two sources.
            let mut cost = calls.stats;
            if plan.scrape {
                let scrape_started = Instant::now();
                let mut spent = Duration::ZERO;
                let answer =
                    self.scrape(found.watched, &plan, found.overview.cluster_name.as_deref(), &mut spent).await;
                calls.other += spent;
                // Head timestamps asked only because the listing has none are part of what a
                // listing costs, and so of its budgeted cadence.
                if plan.scrape_head_timestamps && !self.broker.prometheus_head_timestamps {
                    cost += spent;
                }
                match answer {
                    Ok((scrape, size)) => {
                        *bytes += size;
                        self.prometheus_answered(now, &scrape);
                        if scrape.has_counters {
                            counters = Some(CounterSource::Plugin);
                            counters_at = scrape_started;
                        }
                        if scrape.has_consumers {
                            self.detail_at = Some(scrape_started);
                        }
                        self.listed(&raw_queues, started, now, cost, false);
                        let base = raw_queues.into_iter().flatten().collect();
                        let overlaid = self.overlay(base, &scrape, Some(!plan.light_listing));
                        if let Some(listing) = &mut self.listing {
                            listing.queues = overlaid.clone();
                        }
                        raw_queues = vec![overlaid];
                        depth_source = DepthSource::Prometheus;
                    }
                    Err(error) => {
                        self.prometheus_failed(started, now, &error);
                        if let Some(instead) = plan.after_failed_scrape(stats_enabled) {
                            // The metadata listing has no depth, and the scrape that was to
                            // serve it failed: the stats listing serves this poll.
                            return Ok(Reads::Instead(instead));
                        }
                        // The listing serves without the scrape.
                        done.scrape = false;
                        self.listed(&raw_queues, started, now, cost, true);
                    }
                }
            } else {
                self.listed(&raw_queues, started, now, cost, self.prometheus.is_some());
            }
        }
        Ok(Reads::Done(QueueReads { queues: raw_queues, depth_source, counters, counters_at, done }))
    }

    /// This poll's calls (see `PollPlan`). The scrape serves depth whenever the plugin is
    /// configured and not known to be unavailable (or its re-check is due); the listing runs at
    /// start, when no scrape can serve, and at its budgeted cadence, sooner when queues appeared.
    /// During a resource alarm a due listing waits (the broker comes first).
    fn plan(&self, started: Instant, overview: &Overview, stats_enabled: bool) -> PollPlan {
        let configured = self.prometheus.is_some();
        let known_down = self.load.prometheus.available == Some(false);
        // A quarter poll of slack for timer jitter, as for the listing below: a retry due next
        // poll must not wait for the one after.
        let retry_due = self.prometheus_retry_at.is_some_and(|retry| started + self.broker.poll_interval / 4 >= retry);
        let listing_due = match &self.listing {
            None => true,
            Some(listing) => {
                // Measured from the start of the listing's poll, with a quarter poll of slack
                // for timer jitter: a listing due every poll must not skip every other one.
                let since = started.duration_since(listing.at) + self.broker.poll_interval / 4;
                let (stats_every, budget_every) = self.stats_intervals();
                let due = since >= stats_every || (self.need_listing && since >= budget_every);
                due && self.alarm.is_none()
            }
        };
        let scrape_only = configured && self.listing.is_some() && (!known_down || retry_due) && !listing_due;
        let list = !scrape_only;
        let scrape = scrape_only || (configured && (!known_down || retry_due));
        // Per-queue counters exist in the plugin from 4.0 only (DOMAIN.md §7).
        let plugin_counters = since_4_0(overview);
        // Without the metrics collector the listing has no stats to give; on 4.x with the
        // plugin serving depth and counters it needs none either: it is then a metadata listing
        // in one call (`queues_metadata`), measured on 4.0.5 at 10,000 queues at 0.18 broker
        // CPU-s against 1.6 for the stats listing.
        let light_listing = list && (!stats_enabled || (scrape && plugin_counters));
        // Consumers: every poll before 4.0 (the listing is the expensive call there); on 4.x
        // with every listing and at their own cadence in between. Counters every poll.
        let detail_due = self
            .detail_at
            .is_none_or(|at| started.duration_since(at) + self.broker.poll_interval / 4 >= self.detail_every());
        let scrape_consumers = scrape && (!plugin_counters || list || detail_due);
        let list_reason = list.then(|| match &self.listing {
            None => "first poll",
            Some(_) if !configured => "no Prometheus source",
            Some(_) if known_down && !retry_due => "Prometheus source unavailable",
            Some(_) if self.need_listing => self.need_listing_why.unwrap_or("brought forward"),
            Some(_) => "stats listing due",
        });
        PollPlan {
            list,
            scrape,
            scrape_consumers,
            scrape_counters: scrape && plugin_counters,
            // A light listing has no head timestamps: the listing poll's scrape asks
            // `queue_metrics` for them instead, at the listing's budgeted cadence.
            scrape_head_timestamps: scrape && (self.broker.prometheus_head_timestamps || light_listing),
            light_listing,
            list_reason,
        }
    }

    /// One scrape of the watched vhosts' queues as the plan asks; the call's time goes to `spent`.
    /// `cluster`: the cluster name the management API gave, which the endpoint must serve.
    async fn scrape(
        &mut self,
        watched: &[VhostEntry],
        plan: &PollPlan,
        cluster: Option<&str>,
        spent: &mut Duration,
    ) -> Result<(Scrape, usize), BrokerError> {
        let client = self.prometheus.clone().expect("a plan scrapes only with a client");
        let names: Vec<String> = watched.iter().map(|v| v.name.clone()).collect();
        let families = crate::broker::prometheus::Families {
            consumers: plan.scrape_consumers,
            counters: plan.scrape_counters,
            head_timestamps: plan.scrape_head_timestamps,
        };
        let call = client.scrape(&names, families);
        let (scrape, size) = timed(&mut self.load, spent, "prometheus", "/metrics/detailed", call).await?;
        // Before any of its numbers is used: is it this broker's endpoint?
        let Some(identity) = &scrape.identity else {
            return Err(BrokerError::Malformed {
                path: "/metrics/detailed".into(),
                detail: "no rabbitmq_identity_info: the endpoint does not say which broker it serves, so its numbers \
                         are not used"
                    .into(),
            });
        };
        let nodes: Vec<String> = self.nodes.nodes.iter().map(|n| n.name.clone()).collect();
        identity.check(cluster, &nodes)?;
        Ok((scrape, size))
    }

    /// How often consumers are scraped on 4.x: every poll while a scrape with them costs at
    /// most `DETAIL_SHARE` of the budget, spaced when it costs more, and at least every
    /// `stats_max_interval`, in whole polls.
    fn detail_every(&self) -> Duration {
        let b = &self.broker;
        let share = (b.broker_cpu_budget * DETAIL_SHARE).max(1e-6);
        let by_cost = Duration::from_secs_f64((self.detail_cost.as_secs_f64() / share).min(86_400.0));
        let every = by_cost.max(b.stats_min_interval).min(b.stats_max_interval.max(b.poll_interval));
        if every > b.poll_interval {
            load::whole_stats_steps(every, b.poll_interval).min(b.stats_max_interval.max(b.poll_interval))
        } else {
            b.poll_interval
        }
    }

    /// The queue listing serves metadata only: the plugin serves depth, consumers and counters
    /// (4.x).
    fn metadata_only(&self) -> bool {
        self.prometheus_in_use() && self.counters_from == Some(CounterSource::Plugin)
    }

    /// The stats listing's interval, and the shortest one the budget allows (for a listing
    /// brought forward because queues appeared).
    fn stats_intervals(&self) -> (Duration, Duration) {
        let b = &self.broker;
        let cost = self.listing.as_ref().map_or(0.0, |l| l.cost.as_secs_f64());
        let cheap = self.last_calls.cheap.as_secs_f64();
        let min = if self.metadata_only() { METADATA_EVERY.max(b.stats_min_interval) } else { b.stats_min_interval };
        let (every, _) = load::stats_interval(cost, cheap, b.poll_interval, b.broker_cpu_budget, min);
        // Listing every poll keeps readings one poll apart; a longer interval must keep them a
        // whole number of stats steps apart.
        let every = if every > b.poll_interval { load::whole_stats_steps(every, b.poll_interval) } else { every };
        let (budget_every, _) =
            load::stats_interval(cost, cheap, b.poll_interval, b.broker_cpu_budget, b.poll_interval);
        (every, budget_every)
    }

    /// The delay between polls: the configured interval, stretched when the broker is slow or
    /// in alarm, and, when every poll is a listing (no Prometheus source), spaced by the budget.
    fn next_interval(&mut self) -> Duration {
        let base = self.broker.poll_interval;
        // With the scrape serving depth, the stats listing is spaced by the budget instead: only
        // the calls every poll makes count toward stretching the poll interval.
        let recurring = if self.prometheus_in_use() { self.last_calls.cheap } else { self.last_calls.total() };
        let (mut interval, mut why) = load::poll_interval(base, recurring, self.alarm.is_some());
        if !self.prometheus_in_use() {
            if let Some(listing) = &self.listing {
                let (every, by_budget) = load::stats_interval(
                    listing.cost.as_secs_f64(),
                    self.last_calls.cheap.as_secs_f64(),
                    base,
                    self.broker.broker_cpu_budget,
                    base,
                );
                if by_budget && every > interval {
                    interval = every;
                    why = Some(format!(
                        "without the Prometheus source every poll lists queues ({:.2} s of broker time): spaced to stay within the {:.0}% budget",
                        listing.cost.as_secs_f64(),
                        self.broker.broker_cpu_budget * 100.0
                    ));
                }
            }
        }
        self.load.interval_secs = interval.as_secs_f64();
        self.load.stretched = why;
        interval
    }

    fn prometheus_in_use(&self) -> bool {
        self.prometheus.is_some() && self.load.prometheus.available == Some(true)
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

    /// The last listing's queues with depth, consumers and head timestamp from the scrape (and
    /// counters, on 4.x). A listed queue the scrape does not serve gets unknown numbers, never the
    /// listing's old ones as if current.
    ///
    /// `base`: the queues kept from the last listing, already overlaid once, or
    /// (`this_poll_listing`) the queues this poll listed, with whether that listing carries
    /// counts and head timestamps (not with the metrics collector off).
    fn overlay(
        &mut self,
        mut queues: Vec<RawQueue>,
        scrape: &Scrape,
        this_poll_listing: Option<bool>,
    ) -> Vec<RawQueue> {
        let mut matched = 0;
        // A queue listed before its first stats reached the management database (a new queue,
        // for seconds) has no counts or head timestamp in the listing: list it again. Only the
        // listing itself shows this; the kept queues are overlaid, so it is remembered with it.
        let mut listed_before_stats = false;
        // Messages arrived in a queue the listing saw empty: looked at on every poll.
        let mut listed_without_stats = false;
        let mut missing = HashMap::new();
        for q in &mut queues {
            let key = (q.vhost.clone(), q.name.clone());
            match scrape.queues.get(&key) {
                Some(s) => {
                    matched += 1;
                    listed_before_stats |=
                        this_poll_listing == Some(true) && q.messages_ready.is_none() && s.ready.is_some();
                    // Depth from the scrape must not make a listing without stats look like one
                    // with every counter at 0: the next real reading would be a burst, and the
                    // age estimate would take the 0 for the time before the messages arrived.
                    q.counters_unknown |= !scrape.has_counters
                        && q.messages.is_none()
                        && q.messages_ready.is_none()
                        && q.message_stats.is_none();
                    // Messages arrived in a queue the listing saw empty: their head timestamp is
                    // in the next listing only, so bring it forward as far as the budget allows.
                    listed_without_stats |=
                        !scrape.has_head_timestamps && q.messages_ready == Some(0) && s.ready.is_some_and(|r| r > 0);
                    // A scrape without consumers (4.x between their scrapes) keeps the last known.
                    let consumers = if scrape.has_consumers { s.consumers } else { q.consumers };
                    if scrape.has_head_timestamps {
                        q.head_message_timestamp = s.head_ts;
                        self.head_moved.remove(&key);
                    } else if self.head_moved.contains(&key)
                        || !head_unmoved(q, &crate::broker::prometheus::QueueSample { consumers, ..*s })
                    {
                        // Without `queue_metrics` the listing's head timestamp is the only one;
                        // once the head may have moved it is no longer exact (the age then falls
                        // back to warren's estimate), and a stale "exact" would overstate it. It
                        // stays so until the next listing: a later scrape that looks unmoved
                        // again compares with a reading from before the move.
                        if q.head_message_timestamp.take().is_some() {
                            self.head_moved.insert(key.clone());
                        }
                    }
                    q.messages = s.messages;
                    q.messages_ready = s.ready;
                    q.messages_unacknowledged = s.unacked;
                    q.consumers = consumers;
                    if scrape.has_counters {
                        q.counters_unknown = false;
                        // Counter rows appear with the first event: absent is 0, as in 3.x listings.
                        q.message_stats = Some(QueueStats {
                            publish: Some(s.publish.unwrap_or(0)),
                            deliver_get: Some(s.deliver_get.unwrap_or(0)),
                            ack: Some(s.ack.unwrap_or(0)),
                            redeliver: Some(s.redeliver.unwrap_or(0)),
                        });
                    }
                }
                None => {
                    (q.messages, q.messages_ready, q.messages_unacknowledged) = (None, None, None);
                    (q.consumers, q.head_message_timestamp) = (None, None);
                    // Since when: a new queue reaches the plugin's tables seconds after it exists.
                    let since = self.missing_in_scrape.get(&key).copied().unwrap_or_else(Instant::now);
                    missing.insert(key, since);
                }
            }
        }
        // Queues the listing does not know (created since), or knows without their stats or head
        // timestamp: list again as soon as the budget allows.
        self.missing_in_scrape = missing;
        let stats_pending = match &mut self.listing {
            Some(listing) if this_poll_listing.is_some() => {
                listing.stats_pending = listed_before_stats;
                listed_before_stats
            }
            Some(listing) => listing.stats_pending,
            None => listed_before_stats,
        };
        self.need_listing_why = if scrape.queue_count > matched {
            Some("the scrape shows queues the listing has not")
        } else if !self.missing_in_scrape.is_empty() {
            Some("listed queues missing from the scrape")
        } else if stats_pending {
            Some("a queue listed before its stats")
        } else if listed_without_stats {
            Some("messages in a queue listed empty")
        } else {
            None
        };
        self.need_listing = self.need_listing_why.is_some();
        queues
    }

    fn prometheus_answered(&mut self, now: DateTime<Utc>, scrape: &Scrape) {
        let p = &mut self.load.prometheus;
        p.available = Some(true);
        p.counters = scrape.has_counters;
        p.checked_at = Some(now);
        p.next_check_at = None;
        p.reason = format!(
            "answers: {} queues in the last scrape{}",
            scrape.queue_count,
            if scrape.skipped_lines > 0 {
                format!(", {} unreadable lines skipped", scrape.skipped_lines)
            } else {
                String::new()
            }
        );
        self.prometheus_retry_at = None;
        self.prometheus_failures = 0;
    }

    /// A scrape that failed. A single failure is usually the broker busy for a moment, and on a
    /// node without the metrics collector the plugin is the only source of counters: the
    /// scrape is tried again next poll, then after twice as long at each failure in a row, up
    /// to `source_recheck`.
    fn prometheus_failed(&mut self, started: Instant, now: DateTime<Utc>, error: &BrokerError) {
        self.prometheus_failures += 1;
        let retry = retry_after(self.prometheus_failures, self.broker.poll_interval, self.broker.source_recheck);
        self.prometheus_unavailable(started, now, format!("unreachable or failing: {error}"), retry);
    }

    /// `recheck`: when to try the endpoint again.
    fn prometheus_unavailable(&mut self, started: Instant, now: DateTime<Utc>, reason: String, recheck: Duration) {
        tracing::info!(broker = %self.broker.name, %reason, "Prometheus source not used; management API serves depth");
        let p = &mut self.load.prometheus;
        p.available = Some(false);
        p.reason = reason;
        p.checked_at = Some(now);
        p.next_check_at = Some(now + chrono::Duration::from_std(recheck).unwrap_or_default());
        self.prometheus_retry_at = Some(started + recheck);
        self.missing_in_scrape.clear();
    }

    /// Records a stats listing; notices queues the scrapes have left out for `MISSING_GRACE`
    /// although they still exist.
    /// `keep`: keep a copy of the queues for scrapes to overlay (the caller keeps the overlaid
    /// ones instead when this poll's scrape answered).
    fn listed(&mut self, pages: &[Vec<RawQueue>], started: Instant, now: DateTime<Utc>, cost: Duration, keep: bool) {
        let queues = || pages.iter().flatten();
        if !self.missing_in_scrape.is_empty() {
            let listed: HashSet<(&str, &str)> = queues().map(|q| (q.vhost.as_str(), q.name.as_str())).collect();
            // Deleted queues are not missing.
            self.missing_in_scrape.retain(|(v, n), _| listed.contains(&(v.as_str(), n.as_str())));
            let still = self.missing_in_scrape.values().filter(|since| since.elapsed() >= MISSING_GRACE).count();
            if still > 0 {
                let reason = format!(
                    "incomplete: it did not serve {still} of {} listed queues (in a cluster each node serves only its own queues' metrics)",
                    queues().count()
                );
                // Not a passing fault: the endpoint answers, it just does not serve these queues.
                self.prometheus_unavailable(started, now, reason, self.broker.source_recheck);
            }
        }
        self.need_listing = false;
        self.need_listing_why = None;
        self.head_moved.clear();
        // The queues are kept for the scrapes to overlay; without a Prometheus source only the
        // listing's time and cost matter (a copy of 50,000 queues is tens of MB).
        let kept = if keep { queues().cloned().collect() } else { Vec::new() };
        self.listing = Some(Listing { queues: kept, stats_pending: false, at: started, sampled_at: now, cost });
    }

    /// What the broker page says about sources, cadences and ages after this poll.
    fn update_load(
        &mut self,
        now: DateTime<Utc>,
        plan: &PollPlan,
        depth: DepthSource,
        counters: Option<CounterSource>,
        stats_enabled: bool,
    ) {
        let (stats_every, _) = self.stats_intervals();
        if counters.is_some() {
            self.counters_from = counters;
        }
        let counters_from = self.counters_from;
        let b = &self.broker;
        let listing_at = self.listing.as_ref().map(|l| l.sampled_at);
        let listing_cost = self.listing.as_ref().map(|l| l.cost.as_secs_f64());
        let prometheus_used = depth == DepthSource::Prometheus || self.prometheus_in_use();
        let head_every_poll = b.prometheus_head_timestamps;
        let stats_off = !stats_enabled;
        // 4.x: consumers at their own cadence, the listing for metadata only.
        let metadata_only = prometheus_used && counters_from == Some(CounterSource::Plugin);
        let detail_every = self.detail_every().as_secs_f64();
        let detail_at = self.detail_at;
        let exchange_share = self.exchanges.load_share(b);
        let (exchange_every, exchanges_at) = (self.exchanges.every(b).as_secs_f64(), self.exchanges.read_at());
        let l = &mut self.load;
        l.last_plan = plan.describe();
        l.listing_role = if counters_from == Some(CounterSource::Plugin) {
            "metadata: type, arguments, policy"
        } else {
            "message stats for rates, and metadata"
        };
        l.backing_off = self.alarm.as_ref().map(|a| {
            format!("resource alarm: {a}; polls are spaced twice as far and the stats listing waits until it clears")
        });
        l.depth_sampled_at = Some(now);
        l.metadata_sampled_at = listing_at;
        l.stats_cost_secs = listing_cost;
        let by_budget = listing_cost.is_some_and(|c| {
            load::stats_interval(
                c,
                self.last_calls.cheap.as_secs_f64(),
                b.poll_interval,
                b.broker_cpu_budget,
                b.stats_min_interval,
            )
            .1
        });
        let spaced_by_budget = |listing: &str| {
            format!(
                "the last {listing} took {:.2} s of broker time; at most one every {:.0} s keeps warren within {:.0}% of a core",
                listing_cost.unwrap_or_default(),
                stats_every.as_secs_f64(),
                b.broker_cpu_budget * 100.0
            )
        };
        if metadata_only {
            l.stats_interval_secs = stats_every.as_secs_f64();
            l.stats_reason = if by_budget {
                spaced_by_budget("metadata listing")
            } else {
                format!(
                    "metadata only (the plugin serves the counters): every {:.0} s, sooner when a queue appears",
                    stats_every.as_secs_f64()
                )
            };
        } else if prometheus_used {
            l.stats_interval_secs = stats_every.as_secs_f64();
            l.stats_reason = if by_budget {
                spaced_by_budget("listing")
            } else {
                format!("the minimum stats interval ({} s): the listing is cheap", b.stats_min_interval.as_secs())
            };
        } else {
            l.stats_interval_secs = l.interval_secs;
            l.stats_reason = "every poll lists queues (no Prometheus source)".into();
        }
        // Rates from the plugin come every poll; only listing-served rates can be too slow.
        l.rates_slower_than_wanted = counters_from == Some(CounterSource::Listing)
            && l.stats_interval_secs > b.stats_max_interval.as_secs_f64() + 0.5;
        if counters.is_some() {
            l.rates_sampled_at = Some(now);
        }
        let cheap = self.last_calls.cheap.as_secs_f64();
        let interval = Duration::from_secs_f64(l.interval_secs.max(0.001));
        let stats = listing_cost.map(|c| (c, Duration::from_secs_f64(l.stats_interval_secs.max(0.001))));
        // Consumers asked less often than every poll: their scrape's own share.
        let detail = if metadata_only && detail_every > l.interval_secs + 0.5 {
            self.detail_cost.as_secs_f64() / detail_every.max(0.001)
        } else {
            0.0
        };
        l.estimated_load = Some(load::estimated_load(cheap, interval, stats) + detail + exchange_share);

        let (depth_source, depth_reason) = match depth {
            DepthSource::Prometheus => (
                "prometheus /metrics/detailed, every poll".to_string(),
                "the plugin serves depth and consumers for a fraction of a listing's broker CPU (0.12 against 3.4 CPU-s at 10,000 queues on 3.10.8; docs: Benchmarks)"
                    .to_string(),
            ),
            DepthSource::Listing if prometheus_used => (
                "management listing (this poll)".to_string(),
                "a stats listing was due; the scrape serves the polls in between".to_string(),
            ),
            DepthSource::Listing => (
                "management /api/queues listing, every poll".to_string(),
                format!("Prometheus source not used: {}", l.prometheus.reason),
            ),
        };
        let rates = match counters_from {
            Some(CounterSource::Plugin) => (
                "prometheus counters (queue_delivery_metrics, queue_exchange_metrics), every poll".to_string(),
                "RabbitMQ 4.x serves per-queue counters in the plugin: rates are deltas between polls, all from this one source"
                    .to_string(),
            ),
            Some(CounterSource::Listing) => (
                format!("management listing with message_stats, every {:.0} s", l.stats_interval_secs),
                "only the management API has per-queue counters before RabbitMQ 4.0; rates are counter deltas over the time between listings".to_string(),
            ),
            None => (
                "none: unknown".to_string(),
                "no source has served per-queue counters: the management listing has none with the metrics collector off, and the Prometheus plugin has them from RabbitMQ 4.0 only".to_string(),
            ),
        };
        let rates_at = l.rates_sampled_at;
        let depth_at = l.depth_sampled_at;
        l.sources = vec![
            MetricSource {
                metric: "ready, unacked, total",
                source: depth_source.clone(),
                reason: depth_reason.clone(),
                sampled_at: depth_at,
            },
            if metadata_only && depth == DepthSource::Prometheus {
                MetricSource {
                    metric: "consumers",
                    source: format!("prometheus queue_consumer_count, every {detail_every:.0} s"),
                    reason: format!(
                        "it costs the broker more than depth (0.11 against 0.08 CPU-s at 10,000 queues on 4.0.5): asked every poll while its scrape fits in {:.1}% of a core, spaced when it does not, and at least every {} s",
                        b.broker_cpu_budget * DETAIL_SHARE * 100.0,
                        b.stats_max_interval.as_secs()
                    ),
                    sampled_at: detail_at.map(|at| now - chrono::Duration::from_std(at.elapsed()).unwrap_or_default()),
                }
            } else {
                MetricSource {
                    metric: "consumers",
                    source: depth_source.clone(),
                    reason: depth_reason.clone(),
                    sampled_at: depth_at,
                }
            },
            if head_every_poll || depth == DepthSource::Listing {
                MetricSource {
                    metric: "oldest-message age (head timestamp)",
                    source: depth_source,
                    reason: depth_reason,
                    sampled_at: depth_at,
                }
            } else {
                MetricSource {
                    metric: "oldest-message age (head timestamp)",
                    source: if stats_off || metadata_only {
                        "prometheus queue_metrics with each listing; between listings kept while the head cannot have moved, else warren's estimate"
                    } else {
                        "management listing; between listings kept while the head cannot have moved, else warren's estimate"
                    }.into(),
                    reason: "head timestamps are only in the plugin's queue_metrics family, about 4x the broker cost of the depth scrape (prometheus_head_timestamps = true asks for it)".into(),
                    sampled_at: listing_at,
                }
            },
            MetricSource {
                metric: "queue rates (publish, deliver, ack, redeliver)",
                source: rates.0,
                reason: rates.1,
                sampled_at: rates_at,
            },
            MetricSource {
                metric: "broker and vhost rates (confirm, unroutable)",
                source: "management /api/overview and /api/vhosts, every poll".into(),
                reason: "confirms and unroutable counts exist only there; both calls are cheap".into(),
                sampled_at: Some(now),
            },
            MetricSource {
                metric: "nodes (memory, disk, descriptors, alarms, partitions)",
                source: "management /api/nodes with columns=, every poll".into(),
                reason: "only the management API has them; a few KB per node, milliseconds (see its line in the calls below)".into(),
                sampled_at: self.nodes.as_of,
            },
            if metadata_only {
                MetricSource {
                    metric: "type, arguments, policy",
                    source: "management listing without stats (one call per vhost), policies resolved by warren from /api/policies and /api/operator-policies".into(),
                    reason: format!("only the management API has them; listed every {:.0} s and when a queue appears", l.stats_interval_secs),
                    sampled_at: listing_at,
                }
            } else {
                MetricSource {
                    metric: "type, arguments, policy",
                    source: "management listing".into(),
                    reason: "only the management API has them; refreshed with every stats listing".into(),
                    sampled_at: listing_at,
                }
            },
            MetricSource {
                metric: "exchanges (publish in / out rates)",
                source: format!("management /api/exchanges listing, every {exchange_every:.0} s"),
                reason: format!(
                    "only the management API lists exchanges and their counters: every poll while a listing fits in {:.1}% of a core, spaced when it does not",
                    b.broker_cpu_budget * exchanges::EXCHANGE_SHARE * 100.0
                ),
                sampled_at: exchanges_at,
            },
        ];
    }

    /// One vhost's queues, metadata only, in one call (`queues_metadata`); returns the bytes read.
    async fn fetch_metadata(
        &mut self,
        vhost: &str,
        out: &mut Vec<Vec<RawQueue>>,
        spent: &mut Duration,
    ) -> Result<usize, PollError> {
        let endpoint = format!("/api/queues/{}", crate::broker::management::encode_segment(vhost));
        let answer = timed(&mut self.load, spent, "management", &endpoint, self.client.queues_metadata(vhost)).await;
        let (mut items, size) = match answer {
            Ok(answer) => answer,
            // The vhost was deleted since the listing: it has no queues now.
            Err(BrokerError::Http { status: 404, .. }) => return Ok(0),
            Err(e) => return Err(e.into()),
        };
        for q in &mut items {
            if q.vhost.is_empty() {
                q.vhost = vhost.to_string();
            }
            q.arguments = Some(self.maps.share_or_empty(q.arguments.take()));
            q.effective_policy_definition = Some(self.maps.share_or_empty(q.effective_policy_definition.take()));
            // No message stats here: unknown, never 0 (the scrape's counters replace them).
            q.counters_unknown = true;
        }
        if !items.is_empty() {
            out.push(items);
        }
        Ok(size)
    }

    /// All pages of one vhost's queues; returns the bytes read.
    async fn fetch_vhost(
        &mut self,
        vhost: &str,
        light: bool,
        totals: bool,
        out: &mut Vec<Vec<RawQueue>>,
        spent: &mut Duration,
    ) -> Result<usize, PollError> {
        let mut bytes = 0;
        let mut page = 1;
        let endpoint = format!("/api/queues/{}", crate::broker::management::encode_segment(vhost));
        loop {
            let answer =
                timed(&mut self.load, spent, "management", &endpoint, self.client.queues_page(vhost, page, totals))
                    .await;
            let (body, size) = match answer {
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
            let maps = &mut self.maps;
            let mut items = body.items;
            for q in &mut items {
                if q.vhost.is_empty() {
                    q.vhost = vhost.to_string();
                }
                q.arguments = Some(maps.share_or_empty(q.arguments.take()));
                q.effective_policy_definition = Some(maps.share_or_empty(q.effective_policy_definition.take()));
                // A light listing has no message stats: unknown, never 0 (the scrape's replace them).
                q.counters_unknown |= light;
            }
            out.push(items);
            if page >= page_count {
                return Ok(bytes);
            }
            page += 1;
        }
    }

    /// Resolves the effective policy of listed queues that lack one (the listing of a broker
    /// with the metrics collector off). A failed call leaves them without (logged): the numbers
    /// are not worth losing for it. Returns the bytes read.
    async fn apply_policies(
        &mut self,
        watched: &[VhostEntry],
        pages: &mut [Vec<RawQueue>],
        spent: &mut Duration,
    ) -> usize {
        let mut bytes = 0;
        for vhost in watched {
            let path = crate::broker::management::encode_segment(&vhost.name);
            let call = self.client.policies("policies", &vhost.name);
            let user = timed(&mut self.load, spent, "management", &format!("/api/policies/{path}"), call).await;
            let call = self.client.policies("operator-policies", &vhost.name);
            let endpoint = format!("/api/operator-policies/{path}");
            let operator = timed(&mut self.load, spent, "management", &endpoint, call).await;
            let (user, operator) = match (user, operator) {
                (Ok((u, a)), Ok((o, b))) => {
                    bytes += a + b;
                    (u, o)
                }
                (Err(e), _) | (_, Err(e)) => {
                    tracing::warn!(broker = %self.broker.name, vhost = %vhost.name, error = %e, "policies not read");
                    continue;
                }
            };
            let resolver = policies::Resolver::new(&user, &operator);
            if resolver.unreadable() > 0 {
                let unreadable = resolver.unreadable();
                tracing::warn!(broker = %self.broker.name, vhost = %vhost.name, unreadable, "operator policy patterns not understood");
            }
            // Each page holds one vhost's queues (`fetch_vhost`).
            for page in pages.iter_mut().filter(|p| p.first().is_some_and(|q| q.vhost == vhost.name)) {
                resolver.apply(page);
                for q in page.iter_mut() {
                    q.effective_policy_definition =
                        Some(self.maps.share_or_empty(q.effective_policy_definition.take()));
                }
            }
        }
        bytes
    }

    /// Refreshes stale vhost topologies and sets each view's dead-letter facts. A failed
    /// topology call keeps the previous topology (it is logged, the poll goes on): dead-letter
    /// routing is not worth losing the numbers for. Returns the bytes read.
    async fn apply_topology(
        &mut self,
        views: &mut [QueueView],
        marks: &[track::Mark],
        fetched: Instant,
        spent: &mut Duration,
    ) -> usize {
        let mut by_vhost: HashMap<&str, Vec<usize>> = HashMap::new();
        for (i, view) in views.iter().enumerate() {
            by_vhost.entry(&*view.vhost).or_default().push(i);
        }
        let by_vhost: Vec<(String, Vec<usize>)> = by_vhost.into_iter().map(|(v, i)| (v.to_string(), i)).collect();
        let mut bytes = 0;
        let seen = self.snapshots.as_ref().map(|s| s.seen(&self.broker.name)).unwrap_or_default();
        for (vhost, indexes) in &by_vhost {
            // A queue seen for the first time, or whose settings changed, may change routing.
            // Read after the listing in this poll already: it has what the listing has.
            let read_this_poll = self.topology.get(vhost).is_some_and(|(at, _)| *at == fetched);
            let changed = indexes.iter().any(|&i| marks[i].meta.is_some());
            if changed && !read_this_poll {
                bytes += self.refresh_topology(vhost, fetched, spent).await;
            } else {
                bytes += self.refresh_topology_if_stale(vhost, fetched, spent).await;
            }
            let topology = self.topology.get(vhost).map(|(_, t)| &**t);
            let configs = queue_configs(views, indexes, &self.custody, &self.broker.name, vhost);
            let worked = &self.worked;
            let mut info = topology::analyse_with(&configs, topology, &|q: &str| worked.words(vhost, q));
            let consumed: Vec<bool> = configs.iter().map(|c| c.consumers.unwrap_or(0) > 0).collect();
            let mut working = Vec::new();
            for (&i, consumed) in indexes.iter().zip(consumed) {
                views[i].dead_letters = match info.remove(&*views[i].name) {
                    Some(facts) => facts,
                    None => topology::DeadLetterInfo::plain(views[i].consumers),
                };
                let seen = seen.get(&(vhost.clone(), views[i].name.to_string()));
                views[i].dead_letters.observe(&views[i].name, seen);
                // Only a queue that dead-letters somewhere of its own is remembered: consumers on
                // a queue with no DLX that dead letters reach may be a reader of a DLQ (warren's
                // own mover, or one a killed warren left listed for a few seconds), and they made
                // its feeder look like a wait queue and the DLQ a work queue; remembered, that
                // misreading would stick (tests/bulk.rs's restarts mid-move).
                let dead_letters_on = views[i]
                    .dead_letters
                    .dead_letter_target
                    .as_ref()
                    .is_some_and(|t| t.queues.as_ref().is_some_and(|q| !q.is_empty()));
                if consumed && dead_letters_on && views[i].dead_letters.role == topology::QueueRole::Work {
                    working.push(i);
                }
                views[i].age_since_first_publish = views[i].dead_letters.role == topology::QueueRole::Wait
                    && views[i].oldest_age_source == metrics::AgeSource::Exact
                    && views[i].total.is_some_and(|t| t > 0);
                // DLQs, error queues and wait queues have no consumer by design: "nothing will
                // drain this queue" is what they are for, not a fault (issue 17, case 6). Their
                // badges say what they hold.
                if matches!(
                    views[i].dead_letters.role,
                    topology::QueueRole::Dlq | topology::QueueRole::Error | topology::QueueRole::Wait
                ) {
                    views[i].no_consumers = false;
                }
            }
            // Queues that dead-letter routing feeds: the broker counts no publish for a dead
            // letter, so their publish rate is not their inflow (a DLQ's was a bare 0 while it
            // filled: issue 17, case 5).
            let now = chrono::Utc::now().timestamp();
            for i in working {
                self.worked.record(&self.db, self.broker_id, vhost, &views[i].name, now).await;
            }
            let fed: HashSet<String> = indexes
                .iter()
                .filter_map(|&i| views[i].dead_letters.dead_letter_target.as_ref()?.queues.clone())
                .flatten()
                .collect();
            for &i in indexes {
                let view = &mut views[i];
                let by_role = matches!(
                    view.dead_letters.role,
                    topology::QueueRole::Dlq | topology::QueueRole::Error | topology::QueueRole::Wait
                );
                if by_role || fed.contains(&*view.name) {
                    metrics::derive_inflow(view);
                }
            }
        }
        self.topology.retain(|vhost, _| by_vhost.iter().any(|(v, _)| v == vhost));
        bytes
    }

    async fn refresh_topology_if_stale(&mut self, vhost: &str, fetched: Instant, spent: &mut Duration) -> usize {
        let every = if self.metadata_only() { METADATA_EVERY } else { TOPOLOGY_EVERY };
        let stale = self.topology.get(vhost).is_none_or(|(at, _)| fetched.duration_since(*at) >= every);
        if stale {
            self.refresh_topology(vhost, fetched, spent).await
        } else {
            0
        }
    }

    /// Reads a vhost's topology; a failure keeps the previous one. Returns the bytes read.
    async fn refresh_topology(&mut self, vhost: &str, fetched: Instant, spent: &mut Duration) -> usize {
        match self.fetch_topology(vhost, spent).await {
            Ok((topology, size)) => {
                // Kept in the database for a restart while the broker does not answer (roles
                // come from bindings); written only when it changed, bindings change rarely.
                let changed = self.topology.get(vhost).is_none_or(|(_, before)| **before != topology);
                if changed {
                    let at = Utc::now().timestamp();
                    if let Err(e) =
                        history::last_known::store_topology(&self.db, self.broker_id, vhost, &topology, at).await
                    {
                        tracing::warn!(broker = %self.broker.name, %vhost, error = %e, "keeping the topology failed");
                    }
                }
                self.topology.insert(vhost.to_string(), (fetched, Arc::new(topology)));
                size
            }
            Err(e) => {
                tracing::warn!(broker = %self.broker.name, %vhost, error = %e, "topology refresh failed");
                0
            }
        }
    }

    async fn fetch_topology(
        &mut self,
        vhost: &str,
        spent: &mut Duration,
    ) -> Result<(VhostTopology, usize), BrokerError> {
        let path = crate::broker::management::encode_segment(vhost);
        let (bindings, a) =
            timed(&mut self.load, spent, "management", &format!("/api/bindings/{path}"), self.client.bindings(vhost))
                .await?;
        let (exchanges, b) =
            timed(&mut self.load, spent, "management", &format!("/api/exchanges/{path}"), self.client.exchanges(vhost))
                .await?;
        Ok((VhostTopology { bindings: bindings.0, exchanges }, a + b))
    }

    /// The queues warren itself read recently enough for the reads to be in this poll's rates:
    /// within the rate window and the broker's stats step before it (`QueueView::own_reads`).
    fn own_reads(&self, now: DateTime<Utc>) -> HashSet<(String, String)> {
        let window = self.rate_window_secs() + 2.0 * crate::metrics::STATS_STEP_SECS;
        let since = now - chrono::Duration::milliseconds((window * 1000.0) as i64);
        let mut reads = self.snapshots.as_ref().map(|s| s.read_since(&self.broker.name, since)).unwrap_or_default();
        if let Some(jobs) = &self.jobs {
            reads.extend(jobs.moving_from(&self.broker.name));
        }
        reads
    }

    /// Rates span at least one poll interval and at least two stats steps (10 s).
    fn rate_window_secs(&self) -> f64 {
        self.broker.poll_interval.as_secs_f64().max(2.0 * metrics::STATS_STEP_SECS)
    }

    /// Readings older than this are never a baseline (see `CounterWindow::baseline`). Counters
    /// are read once per stats listing, so the previous listing's reading must still be there.
    fn keep_readings_secs(&self) -> f64 {
        let listings = self.stats_intervals().0.as_secs_f64().max(self.load.interval_secs) * 2.5;
        (self.rate_window_secs() * 5.0).max(65.0).max(listings)
    }

    /// Per-vhost rates: confirms and unroutable returns exist per vhost, not per queue.
    ///
    /// A vhost absent from the last listing is new since: its counters began at 0 after that
    /// listing, so all they count fell between the two, and its rate over that span is known
    /// at its first reading. Leaving it unknown made the broker's total unknown at every poll
    /// after a vhost appeared (issue 34, case 8: the overview's rates were null at 8 of 23 polls
    /// on a broker where test vhosts come and go).
    fn vhost_rates(&mut self, vhosts: &[VhostEntry], stats_enabled: bool, fetched: Instant) -> Vec<VhostLive> {
        let (window, keep) = (self.rate_window_secs(), self.keep_readings_secs());
        let last_listing = self.vhosts_listed_at.replace(fetched);
        let mut out = Vec::with_capacity(vhosts.len());
        for vhost in vhosts {
            let current = BrokerCounters::from_overview(vhost.message_stats.as_ref(), stats_enabled);
            let new = !self.vhost_counters.contains_key(&vhost.name);
            let counters = self.vhost_counters.entry(vhost.name.clone()).or_default();
            if let (Some(last), true) = (last_listing, new) {
                // Its counters were 0 at every instant up to the last listing: a run of zeros
                // reaching back far enough to be the baseline of this reading and the next.
                let before = fetched.checked_sub(Duration::from_secs_f64(2.0 * window)).map_or(last, |t| t.min(last));
                counters.push(before, current.zeroed(), keep);
                counters.push(last, current.zeroed(), keep);
            }
            let rates = rates_from(counters, current, fetched, window, keep);
            out.push(VhostLive { name: vhost.name.clone(), rates, counters: current });
        }
        self.vhost_counters.retain(|name, _| vhosts.iter().any(|v| &v.name == name));
        out
    }
}

/// The rates of the watched vhosts together. Unknown where any vhost's is: a partial sum would
/// be an undercount shown as fact.
/// No vhost watched: nothing measured, so unknown rather than 0.
fn watched_rates(vhosts: &[VhostLive]) -> BrokerRates {
    if vhosts.is_empty() {
        return BrokerRates::default();
    }
    let sum = |f: fn(&BrokerRates) -> Option<f64>| vhosts.iter().map(|v| f(&v.rates)).sum::<Option<f64>>();
    BrokerRates {
        publish_rate: sum(|r| r.publish_rate),
        confirm_rate: sum(|r| r.confirm_rate),
        ack_rate: sum(|r| r.ack_rate),
        deliver_rate: sum(|r| r.deliver_rate),
        redeliver_rate: sum(|r| r.redeliver_rate),
        unroutable_rate: sum(|r| r.unroutable_rate),
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

/// RabbitMQ 4.0 or later (by the overview's version; an unknown version counts as older).
fn since_4_0(overview: &Overview) -> bool {
    overview.major_version().is_some_and(|m| m >= 4)
}

/// Whether a queue's head message is still the one the listing saw: no consumer and nothing
/// unacked, then or now, and no fewer ready messages (FIFO: publishes only add at the tail; only
/// a consumer, basic.get, expiry or a purge removes the head, and the last three lower `ready`).
/// A consumer that attached and left between the two readings goes unseen: a known limit.
fn head_unmoved(listed: &RawQueue, now: &crate::broker::prometheus::QueueSample) -> bool {
    let idle = |consumers: Option<u64>, unacked: Option<u64>| consumers == Some(0) && unacked == Some(0);
    idle(listed.consumers, listed.messages_unacknowledged)
        && idle(now.consumers, now.unacked)
        && matches!((listed.messages_ready, now.ready), (Some(before), Some(after)) if after >= before)
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

/// When a Prometheus endpoint that failed `failures` times in a row is tried again: next poll
/// after the first failure, then twice as long at each one, at most `ceiling`.
fn retry_after(failures: u32, poll_interval: Duration, ceiling: Duration) -> Duration {
    let factor = 1u32 << failures.saturating_sub(1).min(16);
    poll_interval.saturating_mul(factor).min(ceiling)
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

/// The queues `indexes` of `views`, all of `vhost`, as the dead-letter analysis reads them
/// (`topology::analyse`), for the polls and for the state restored at start alike.
fn queue_configs<'v>(
    views: &'v [QueueView],
    indexes: &[usize],
    custody: &[crate::config::CustodyRule],
    broker: &str,
    vhost: &str,
) -> Vec<QueueConfig<'v>> {
    indexes
        .iter()
        .map(|&i| QueueConfig {
            name: &views[i].name,
            arguments: &views[i].arguments,
            effective_policy: &views[i].effective_policy,
            // Custody's intake is one consumer of warren's own: with it counted, a work queue
            // whose DLQ is in custody read as a wait queue feeding a consumed queue.
            consumers: match crate::dlq::custody::rule_for(custody, broker, vhost, &views[i].name) {
                Some(_) => views[i].consumers.map(|c| c.saturating_sub(1)),
                None => views[i].consumers,
            },
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn watched_rates_sum_the_vhosts_and_stay_unknown_where_one_is() {
        let vhost = |publish: Option<f64>| VhostLive {
            name: "v".into(),
            rates: BrokerRates { publish_rate: publish, confirm_rate: Some(1.0), ..BrokerRates::default() },
            counters: Default::default(),
        };
        let both = watched_rates(&[vhost(Some(2.0)), vhost(Some(3.5))]);
        assert_eq!((both.publish_rate, both.confirm_rate), (Some(5.5), Some(2.0)));
        // A partial sum would be an undercount shown as fact.
        assert_eq!(watched_rates(&[vhost(Some(2.0)), vhost(None)]).publish_rate, None);
        // Nothing watched: nothing measured.
        assert_eq!(watched_rates(&[]), BrokerRates::default());
    }

    /// A failed scrape yields the plan that serves the poll instead, decided without a broker.
    #[test]
    fn a_failed_scrape_yields_the_plan_that_serves_instead() {
        let plan = |list, scrape, light_listing| PollPlan {
            list,
            scrape,
            scrape_consumers: true,
            scrape_counters: false,
            scrape_head_timestamps: false,
            light_listing,
            list_reason: list.then_some("budget"),
        };
        // A scrape-only poll lists instead: with message stats when the broker collects them.
        let instead = plan(false, true, false).after_failed_scrape(true).unwrap();
        assert_eq!(
            instead,
            PollPlan { list: true, scrape: false, list_reason: Some("the scrape failed"), ..plan(false, true, false) }
        );
        assert!(plan(false, true, false).after_failed_scrape(false).unwrap().light_listing, "no stats to list");
        // A metadata listing has no depth without its scrape: the stats listing serves.
        let instead = plan(true, true, true).after_failed_scrape(true).unwrap();
        assert!(instead.list && !instead.scrape && !instead.light_listing, "{instead:?}");
        // A stats listing serves as it is. So does a metadata listing where the broker collects
        // no stats: no listing would have more, and the poll's depth is unknown, not 0.
        assert_eq!(plan(true, true, false).after_failed_scrape(true), None);
        assert_eq!(plan(true, true, true).after_failed_scrape(false), None);
        // The plan that serves instead has no scrape, so nothing of it can fail the same way.
        for p in [plan(false, true, false), plan(true, true, true)] {
            for stats in [true, false] {
                if let Some(instead) = p.after_failed_scrape(stats) {
                    assert!(!instead.scrape);
                }
            }
        }
    }

    #[test]
    fn backoff_doubles_and_caps_at_six_intervals() {
        let s = Duration::from_secs(10);
        assert_eq!(backoff(s, 1), Duration::from_secs(10));
        assert_eq!(backoff(s, 2), Duration::from_secs(20));
        assert_eq!(backoff(s, 3), Duration::from_secs(40));
        assert_eq!(backoff(s, 4), Duration::from_secs(60));
        assert_eq!(backoff(s, 30), Duration::from_secs(60));
    }

    #[test]
    fn a_failed_scrape_is_tried_again_next_poll_then_less_often() {
        // A single failed scrape on a busy 4.0.5 node without the metrics collector (the only
        // source of counters there) made rates and FIFO ages unknown for five minutes.
        let (poll, ceiling) = (Duration::from_secs(5), Duration::from_secs(300));
        assert_eq!(retry_after(1, poll, ceiling), poll);
        assert_eq!(retry_after(2, poll, ceiling), Duration::from_secs(10));
        assert_eq!(retry_after(4, poll, ceiling), Duration::from_secs(40));
        assert_eq!(retry_after(7, poll, ceiling), ceiling);
        assert_eq!(retry_after(u32::MAX, poll, ceiling), ceiling);
    }

    #[test]
    fn a_listed_head_timestamp_stays_only_while_the_head_cannot_have_moved() {
        let listed: RawQueue = serde_json::from_str(
            r#"{"name":"q","consumers":0,"messages_ready":7,"messages_unacknowledged":0,"head_message_timestamp":1700000000}"#,
        )
        .unwrap();
        let now = |ready, unacked, consumers| crate::broker::prometheus::QueueSample {
            ready: Some(ready),
            unacked: Some(unacked),
            consumers: Some(consumers),
            ..Default::default()
        };
        assert!(head_unmoved(&listed, &now(7, 0, 0)));
        assert!(head_unmoved(&listed, &now(12, 0, 0)), "publishes add at the tail");
        assert!(!head_unmoved(&listed, &now(6, 0, 0)), "a get, an expiry or a purge removed messages");
        assert!(!head_unmoved(&listed, &now(7, 0, 1)), "a consumer is attached");
        assert!(!head_unmoved(&listed, &now(6, 1, 0)), "a message is unacked");
    }
}
