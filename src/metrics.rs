//! What warren says about a queue and a broker, derived from raw broker answers. Pure functions,
//! no I/O: the poller feeds them, the web layer shows their results.
//!
//! Truthful numbers (DEVELOPERS.md): a value the broker did not give is `None` and is shown as
//! unknown, never as 0; the oldest-message age always carries its source.

use std::sync::Arc;

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::{Map, Value};

use crate::broker::management::{OverviewStats, RawQueue};

/// How warren knows a queue's inflow (`QueueView::inflow_rate`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Default, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum InflowSource {
    /// The broker's publish counter: every message that arrives is published.
    PublishCounter,
    /// Dead-letter routing feeds the queue and the broker counts no publish for a dead letter:
    /// depth change plus acks (and never less than the publishes), a lower bound, since
    /// messages that leave without an ack (expiry, purge, reject, no-ack delivery) hide as
    /// much inflow.
    DerivedLowerBound,
    /// Neither is known (yet).
    #[default]
    Unknown,
}

impl InflowSource {
    pub fn as_str(self) -> &'static str {
        match self {
            InflowSource::PublishCounter => "publish counter",
            InflowSource::DerivedLowerBound => "derived from depth change and acks (a lower bound)",
            InflowSource::Unknown => "unknown",
        }
    }
}

/// How warren knows a queue's oldest-message age.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum AgeSource {
    /// From the broker's `head_message_timestamp`, or the queue is empty.
    Exact,
    /// Derived from warren's own history (FIFO estimate).
    Estimated,
    /// The broker gives no age for this queue and warren cannot estimate it yet.
    Unknown,
}

impl AgeSource {
    pub fn as_str(self) -> &'static str {
        match self {
            AgeSource::Exact => "exact",
            AgeSource::Estimated => "estimated",
            AgeSource::Unknown => "unknown",
        }
    }
}

/// A FIFO estimate of when a queue's oldest message was published (DOMAIN.md §3).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Estimate {
    /// The oldest message was published at about this unix time (seconds).
    PublishedAt(f64),
    /// Older than warren's history of the queue, which starts at this unix time.
    OlderThan(i64),
    /// The publish counter cannot account for the messages present (for example messages that
    /// arrived by dead-lettering, which no publish counter counts).
    Impossible,
    /// For a queue no publish counter counts (a DLQ fed by dead-lettering): its depth history
    /// shows nothing left it since it was last empty, so the oldest message is the first that
    /// arrived after that, at about this unix time (seconds).
    ArrivedAt(f64),
    /// As `ArrivedAt`, but the queue was never seen empty: the oldest message arrived before
    /// warren's history of it, which starts at this unix time.
    ArrivedBefore(i64),
}

/// Cumulative per-queue counters at one poll; `None` when the broker serves no stats.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QueueCounters {
    pub publish: Option<u64>,
    pub deliver: Option<u64>,
    pub ack: Option<u64>,
    pub redeliver: Option<u64>,
}

/// Per-second rates between two polls.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct QueueRates {
    pub publish: Option<f64>,
    pub deliver: Option<f64>,
    pub ack: Option<f64>,
    pub redeliver: Option<f64>,
}

/// A queue as warren shows it: the API's queue object.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct QueueView {
    /// Names are shared (`Arc<str>`): between the views of one poll (broker, vhost, type,
    /// state) and with the poller's own record of the queue and the next poll's view (name).
    pub broker: Arc<str>,
    pub vhost: Arc<str>,
    pub name: Arc<str>,
    #[serde(rename = "type")]
    pub kind: Arc<str>,
    pub durable: Option<bool>,
    /// Owned by one connection (`None`: not listed, as in a view restored from the database).
    pub exclusive: Option<bool>,
    pub state: Option<Arc<str>>,
    pub ready: Option<u64>,
    pub unacked: Option<u64>,
    pub total: Option<u64>,
    pub consumers: Option<u64>,
    pub publish_rate: Option<f64>,
    pub deliver_rate: Option<f64>,
    pub ack_rate: Option<f64>,
    pub redeliver_rate: Option<f64>,
    /// A quorum queue's delivery limit as the broker reports it (4.x; where a light listing
    /// lacks it, resolved from argument, policy and 4.x's default of 20), else `None`.
    pub delivery_limit: Option<i64>,
    pub oldest_age_secs: Option<f64>,
    pub oldest_age_source: AgeSource,
    /// The estimate is a lower bound: the oldest message is older than warren's history.
    /// The age is the head message's timestamp, set when it was first published, in a queue
    /// where that is not when it arrived: a wait (retry) queue, whose messages come back again
    /// and again (issue 17, case 1: wait queues showed ages far past their TTL).
    pub age_since_first_publish: bool,
    /// Dead letters of this queue in warren's custody (taken off the broker, not yet
    /// replayed), `None` when it has none (`dlq::custody`). `total` counts them with what the
    /// broker holds (`apply_custody`); `ready` and `unacked` are the broker's.
    pub custody_held: Option<u64>,
    /// The oldest-message age is that of the oldest dead letter in warren's custody: when it
    /// was taken off the broker, so a lower bound (it died before).
    pub age_from_custody: bool,
    /// The oldest-message age is estimated from the queue's depth history (`Estimate::ArrivedAt`):
    /// for a queue no publish counter counts, such as a DLQ, how long since the first message
    /// arrived after it was last empty, while nothing has left it.
    pub age_from_depth: bool,
    /// Whether the intake of this queue's custody stopped (`dlq::custody::IntakeState`);
    /// `None` when no intake runs for it.
    pub custody_intake_stopped: Option<bool>,
    /// Since when the FIFO estimate does not hold: a move by warren put messages into the
    /// queue that are older than their place in it says (issue 17, case 6). Until they drain,
    /// the estimate is their re-publish time, so a lower bound of the true age.
    pub fifo_broken_since: Option<DateTime<Utc>>,
    pub oldest_age_lower_bound: bool,
    /// redeliver / deliver: the share of deliveries that were redeliveries.
    pub redelivery_share: Option<f64>,
    /// How fast the queue's total depth changes, messages per second over the rate window:
    /// positive means the backlog grows. Measured from depth, so messages that leave without
    /// an ack (rejected, expired, dead-lettered onwards) and messages that arrive without a
    /// publish (dead letters) count; `publish − ack` counted neither (issue 17, case 5).
    pub backlog_growth_rate: Option<f64>,
    /// Messages arriving per second, and how warren knows (`inflow_source`): the publish
    /// counter, or for a queue that dead-letter routing feeds (the broker counts no publish
    /// for a dead letter) derived from depth change and acks, a lower bound.
    pub inflow_rate: Option<f64>,
    pub inflow_source: InflowSource,
    /// How long the current backlog takes to drain at current rates; `None` when it does not
    /// drain (or rates are unknown).
    pub time_to_drain_secs: Option<f64>,
    /// Ready messages and no consumer: nothing will ever drain this queue.
    pub no_consumers: bool,
    /// Unacked messages held with no ack for this long (a hung consumer), once that lasted at
    /// least `HUNG_AFTER_POLLS` polls while messages were ready (waiting), or longer than the
    /// broker's `scheduled_hold_limit` with none ready.
    pub hung_consumer_secs: Option<f64>,
    /// Unacked messages held with no ack for this long while none are ready: a consumer that
    /// took everything there is and holds it, as one holding scheduled (ETA, delayed) messages
    /// does by design (issue 17, case 6). Not a fault until `scheduled_hold_limit`.
    pub holding_secs: Option<f64>,
    /// Deliveries that come back unacked for this long: consumers take messages and hand them
    /// back (a nack or reject with requeue, or a crash) with nothing acked, so the same messages
    /// go round, as poison messages at the head of a queue do (issue 31, case 1). Once that has
    /// lasted `HUNG_AFTER_POLLS` polls and `HUNG_AFTER_SECS`. Not hung: the consumers work.
    pub redelivery_loop_secs: Option<f64>,
    /// warren itself read the queue within the rate window (a snapshot, or a move that handed
    /// messages back): its reads are deliveries and, read again, redeliveries the broker counts
    /// like the application's, so the delivery and redelivery rates say nothing of the
    /// application's then (issue 31, case 9). Alerts on them see no value while this holds.
    pub own_reads: bool,
    #[serde(flatten)]
    pub dead_letters: crate::broker::topology::DeadLetterInfo,
    /// Shared with other queues' views and the next poll's (see `RawQueue::arguments`).
    pub arguments: Arc<Map<String, Value>>,
    pub policy: Option<String>,
    pub effective_policy: Arc<Map<String, Value>>,
    pub updated_at: DateTime<Utc>,
    /// True when the queue no longer exists on the broker; its history is kept.
    pub deleted: bool,
    /// warren's database id, once the queue has been stored.
    #[serde(skip)]
    pub id: Option<i64>,
    /// The cumulative publish counter (stored, and the FIFO age estimate's input); the other
    /// counters live in the poller's window only.
    #[serde(skip)]
    pub publish_count: Option<u64>,
    /// The broker's cumulative counters, as last read (between two stats listings, the last
    /// listing's): what `/metrics` exports as counters, so that Prometheus can take its own rates.
    #[serde(skip)]
    pub counters: QueueCounters,
    /// `head_message_timestamp` in unix seconds, as stored.
    #[serde(skip)]
    pub head_ts: Option<i64>,
    /// The FIFO estimate behind an `estimated` age.
    #[serde(skip)]
    pub estimate: Option<Estimate>,
}

impl QueueView {
    /// A queue of which nothing is known but its names: every number unknown, no flag set.
    /// The one place that lists every field; the views the poller makes, the ones restored
    /// from the database and the tests' fixtures fill in what they know.
    pub fn unknown(names: QueueNames, updated_at: DateTime<Utc>) -> QueueView {
        QueueView {
            broker: names.broker,
            vhost: names.vhost,
            name: names.name,
            kind: names.kind,
            durable: None,
            exclusive: None,
            state: names.state,
            ready: None,
            unacked: None,
            total: None,
            consumers: None,
            publish_rate: None,
            deliver_rate: None,
            ack_rate: None,
            redeliver_rate: None,
            delivery_limit: None,
            oldest_age_secs: None,
            oldest_age_source: AgeSource::Unknown,
            oldest_age_lower_bound: false,
            fifo_broken_since: None,
            custody_held: None,
            age_from_custody: false,
            age_from_depth: false,
            custody_intake_stopped: None,
            age_since_first_publish: false,
            redelivery_share: None,
            backlog_growth_rate: None,
            inflow_rate: None,
            inflow_source: InflowSource::Unknown,
            time_to_drain_secs: None,
            no_consumers: false,
            hung_consumer_secs: None,
            holding_secs: None,
            redelivery_loop_secs: None,
            own_reads: false,
            dead_letters: Default::default(),
            arguments: Default::default(),
            policy: None,
            effective_policy: Default::default(),
            updated_at,
            deleted: false,
            id: None,
            publish_count: None,
            counters: QueueCounters::default(),
            head_ts: None,
            estimate: None,
        }
    }

    /// What the broker holds: the total without the dead letters in warren's custody.
    pub fn broker_total(&self) -> Option<u64> {
        self.total.map(|t| t - self.custody_held.unwrap_or(0).min(t))
    }

    /// Counts the dead letters warren took into custody as the queue's (issue 31, case 5: a DLQ
    /// whose 35 dead letters were held read "0 messages, oldest 0 s, exact"): the total is the
    /// broker's plus `held` (unknown stays unknown), and the oldest-message age is at least that
    /// of the oldest held record, taken at `oldest_taken_at`.
    pub fn apply_custody(&mut self, held: u64, oldest_taken_at: Option<i64>, now: DateTime<Utc>) {
        self.custody_held = Some(held);
        if held == 0 {
            return;
        }
        self.total = self.total.and_then(|t| t.checked_add(held));
        let Some(taken) = oldest_taken_at else { return };
        let age = (now.timestamp() - taken).max(0) as f64;
        if self.oldest_age_secs.is_none_or(|a| a <= age) {
            self.oldest_age_secs = Some(age);
            self.oldest_age_source = AgeSource::Estimated;
            self.oldest_age_lower_bound = true;
            self.age_from_custody = true;
        }
    }

    /// Applies a FIFO estimate to a queue whose age the broker does not give.
    pub fn apply_estimate(&mut self, estimate: Estimate, now: DateTime<Utc>) {
        if self.oldest_age_source != AgeSource::Unknown {
            return;
        }
        let now = now.timestamp_millis() as f64 / 1000.0;
        match estimate {
            Estimate::PublishedAt(t) => {
                self.oldest_age_secs = Some((now - t).max(0.0));
                self.oldest_age_source = AgeSource::Estimated;
            }
            Estimate::OlderThan(t) => {
                self.oldest_age_secs = Some((now - t as f64).max(0.0));
                self.oldest_age_source = AgeSource::Estimated;
                self.oldest_age_lower_bound = true;
            }
            Estimate::ArrivedAt(t) => {
                self.oldest_age_secs = Some((now - t).max(0.0));
                self.oldest_age_source = AgeSource::Estimated;
                self.age_from_depth = true;
            }
            Estimate::ArrivedBefore(t) => {
                self.oldest_age_secs = Some((now - t as f64).max(0.0));
                self.oldest_age_source = AgeSource::Estimated;
                self.oldest_age_lower_bound = true;
                self.age_from_depth = true;
            }
            Estimate::Impossible => {}
        }
        self.estimate = Some(estimate);
    }
}

/// Rate from two readings of a cumulative counter `dt_secs` apart. A counter that went
/// backwards was reset (queue re-created, node restarted): the rate over that interval is
/// unknown, never negative and never the whole new count as a spike.
pub fn counter_rate(previous: Option<u64>, current: Option<u64>, dt_secs: f64) -> Option<f64> {
    let (previous, current) = (previous?, current?);
    if dt_secs <= 0.0 || current < previous {
        return None;
    }
    Some((current - previous) as f64 / dt_secs)
}

pub fn rates_between(previous: &QueueCounters, current: &QueueCounters, dt_secs: f64) -> QueueRates {
    QueueRates {
        publish: counter_rate(previous.publish, current.publish, dt_secs),
        deliver: counter_rate(previous.deliver, current.deliver, dt_secs),
        ack: counter_rate(previous.ack, current.ack, dt_secs),
        redeliver: counter_rate(previous.redeliver, current.redeliver, dt_secs),
    }
}

/// Counters of a raw queue. `stats_enabled` says whether the broker collects message stats at
/// all: where it does, an absent counter means "no such activity yet" (3.x omits keys until the
/// first event) and is 0; where it does not (4.x with the metrics collector off), it is unknown.
pub fn queue_counters(raw: &RawQueue, stats_enabled: bool) -> QueueCounters {
    // A queue whose first stats have not reached the management database yet has no counts at
    // all (a new quorum queue, for seconds): its counters are unknown, not 0, or the first real
    // reading would look like a burst.
    let no_stats_yet = raw.messages.is_none() && raw.messages_ready.is_none() && raw.message_stats.is_none();
    if !stats_enabled || no_stats_yet || raw.counters_unknown {
        return QueueCounters::default();
    }
    let stats = raw.message_stats.clone().unwrap_or_default();
    QueueCounters {
        publish: Some(stats.publish.unwrap_or(0)),
        deliver: Some(stats.deliver_get.unwrap_or(0)),
        ack: Some(stats.ack.unwrap_or(0)),
        redeliver: Some(stats.redeliver.unwrap_or(0)),
    }
}

/// Oldest-message age from what the broker reports. `head_message_timestamp` counts unacked
/// messages too and is null when the head message carries no timestamp (DOMAIN.md §3). A queue
/// known to be empty has no waiting message: its age is exactly 0.
pub fn exact_age(total: Option<u64>, head_ts: Option<i64>, now: DateTime<Utc>) -> (Option<f64>, AgeSource) {
    match (total, head_ts) {
        (Some(0), _) => (Some(0.0), AgeSource::Exact),
        // More than a minute in the future is no usable timestamp (milliseconds where seconds
        // belong, or a badly wrong publisher clock): fall back to what is known otherwise.
        (_, Some(ts)) if ts > now.timestamp() + 60 => (None, AgeSource::Unknown),
        (_, Some(ts)) => {
            // So far in the past that the age overflows: no usable timestamp either.
            let Some(age_ms) = ts.checked_mul(1000).and_then(|ms| now.timestamp_millis().checked_sub(ms)) else {
                return (None, AgeSource::Unknown);
            };
            // A publisher clock slightly ahead of ours would give a negative age; the message is new.
            (Some(age_ms.max(0) as f64 / 1000.0), AgeSource::Exact)
        }
        _ => (None, AgeSource::Unknown),
    }
}

/// Builds the view of one queue from its raw form, its counters at the previous poll (if the
/// queue existed then) and the time between the two polls.
pub fn queue_view(
    broker: impl Into<Arc<str>>,
    raw: RawQueue,
    stats_enabled: bool,
    previous: Option<(&QueueCounters, f64)>,
    now: DateTime<Utc>,
) -> QueueView {
    let names = QueueNames {
        broker: broker.into(),
        vhost: raw.vhost.as_str().into(),
        name: raw.name.as_str().into(),
        kind: raw.kind.as_deref().unwrap_or("classic").into(),
        state: raw.state.as_deref().map(Into::into),
    };
    queue_view_named(names, raw, stats_enabled, previous, now)
}

/// A view's names, which the poller shares between views and polls (see `QueueView::broker`).
pub struct QueueNames {
    pub broker: Arc<str>,
    pub vhost: Arc<str>,
    pub name: Arc<str>,
    pub kind: Arc<str>,
    pub state: Option<Arc<str>>,
}

/// `queue_view` with names already made; the raw queue's own names are not used.
pub fn queue_view_named(
    names: QueueNames,
    raw: RawQueue,
    stats_enabled: bool,
    previous: Option<(&QueueCounters, f64)>,
    now: DateTime<Utc>,
) -> QueueView {
    let counters = queue_counters(&raw, stats_enabled);
    let rates = match previous {
        Some((prev, dt)) => rates_between(prev, &counters, dt),
        None => QueueRates::default(),
    };
    // A sum past u64 is no number the broker gave: unknown, like a missing part.
    let total = raw.messages.or_else(|| raw.messages_ready?.checked_add(raw.messages_unacknowledged?));
    let head_ts = raw.head_message_timestamp.map(|ts| ts as i64);
    let (oldest_age_secs, oldest_age_source) = exact_age(total, head_ts, now);
    QueueView {
        durable: raw.durable,
        exclusive: raw.exclusive,
        ready: raw.messages_ready,
        unacked: raw.messages_unacknowledged,
        total,
        consumers: raw.consumers,
        publish_rate: rates.publish,
        deliver_rate: rates.deliver,
        ack_rate: rates.ack,
        redeliver_rate: rates.redeliver,
        delivery_limit: raw.delivery_limit,
        oldest_age_secs,
        oldest_age_source,
        inflow_rate: rates.publish,
        inflow_source: if rates.publish.is_some() { InflowSource::PublishCounter } else { InflowSource::Unknown },
        arguments: raw.arguments.unwrap_or_default(),
        policy: raw.policy,
        effective_policy: raw.effective_policy_definition.unwrap_or_default(),
        publish_count: counters.publish,
        counters,
        head_ts,
        ..QueueView::unknown(names, now)
    }
}

/// A hung consumer is flagged after this many polls (and at least `HUNG_AFTER_SECS`) with
/// unacked messages and no ack.
pub const HUNG_AFTER_POLLS: u32 = 3;
pub const HUNG_AFTER_SECS: f64 = 30.0;

/// Fills the health signals of a view from its numbers. `no_ack_for` is how long the queue has
/// held unacked messages without any ack, with the number of polls that covers; `depth_growth`
/// the change of its total depth per second over the rate window, when two readings span it;
/// `hold_limit_secs` how long a consumer may hold messages with none ready before it is hung.
pub fn apply_health(
    view: &mut QueueView,
    no_ack_for: Option<(f64, u32)>,
    depth_growth: Option<f64>,
    hold_limit_secs: f64,
) {
    view.redelivery_share = match (view.redeliver_rate, view.deliver_rate) {
        (Some(r), Some(d)) if d > 0.0 => Some((r / d).min(1.0)),
        _ => None,
    };
    view.backlog_growth_rate = depth_growth;
    // The publish counter, until dead-letter routing is known to feed the queue (`derive_inflow`).
    view.inflow_rate = view.publish_rate;
    view.inflow_source = if view.publish_rate.is_some() { InflowSource::PublishCounter } else { InflowSource::Unknown };
    view.time_to_drain_secs = match (view.total, view.backlog_growth_rate) {
        (Some(0), _) => Some(0.0),
        (Some(total), Some(growth)) if growth < 0.0 => Some(total as f64 / -growth),
        _ => None,
    };
    view.no_consumers = view.consumers == Some(0) && view.ready.is_some_and(|r| r > 0);
    // A consumer that holds messages while others wait is stuck. One that took everything there
    // is and holds it may hold scheduled messages by design (Celery's countdown and ETA tasks,
    // dramatiq's delays): counters cannot tell the two apart, so only the hold limit does. An
    // unknown ready count says nothing either way, and is judged by the limit too.
    let held = no_ack_for.filter(|(secs, polls)| *polls >= HUNG_AFTER_POLLS && *secs >= HUNG_AFTER_SECS);
    let waiting = view.ready.is_some_and(|r| r > 0);
    (view.hung_consumer_secs, view.holding_secs) = match held {
        Some((secs, _)) if waiting || secs >= hold_limit_secs => (Some(secs), None),
        Some((secs, _)) => (None, Some(secs)),
        None => (None, None),
    };
}

/// The redelivered share of deliveries from which a queue whose deliveries see no ack is in a
/// loop: with poison messages at the head every delivery is one of them coming back.
pub const LOOP_SHARE: f64 = 0.9;

/// Whether the queue's deliveries come back now: deliveries, almost all of them redeliveries,
/// and no ack (under 1 % of them). `None` when the rates are unknown, or are warren's own reads.
pub fn looping(view: &QueueView) -> Option<bool> {
    if view.own_reads {
        return None;
    }
    let (deliver, ack, share) = (view.deliver_rate?, view.ack_rate?, view.redelivery_share);
    Some(deliver > 0.0 && ack <= deliver * 0.01 && share.is_some_and(|s| s >= LOOP_SHARE))
}

/// Fills the loop signal after `apply_health`: `loop_for` is how long, and over how many polls,
/// `looping` has held. A queue whose deliveries go round is not hung, whatever its unacked
/// messages say: the consumers take deliveries all the time (issue 31, case 1: a consumer
/// nacking poison messages with requeue was called hung).
pub fn apply_loop(view: &mut QueueView, loop_for: Option<(f64, u32)>) {
    if looping(view) == Some(true) {
        (view.hung_consumer_secs, view.holding_secs) = (None, None);
        view.redelivery_loop_secs =
            loop_for.filter(|(secs, polls)| *polls >= HUNG_AFTER_POLLS && *secs >= HUNG_AFTER_SECS).map(|(s, _)| s);
    } else {
        view.redelivery_loop_secs = None;
    }
}

/// The inflow of a queue that dead-letter routing feeds: depth change plus acks, never less
/// than the publishes, a lower bound (see `InflowSource::DerivedLowerBound`); unknown while
/// the depth's change is.
pub fn derive_inflow(view: &mut QueueView) {
    let derived = view.backlog_growth_rate.map(|growth| {
        let lower = growth + view.ack_rate.unwrap_or(0.0);
        lower.max(view.publish_rate.unwrap_or(0.0)).max(0.0)
    });
    view.inflow_rate = derived;
    view.inflow_source = if derived.is_some() { InflowSource::DerivedLowerBound } else { InflowSource::Unknown };
}

/// The broker refreshes its statistics in steps of `collect_statistics_interval` (5 s by
/// default, DOMAIN.md §2): a counter read at time t is the value of the last step before t. A
/// delta between two readings covers exactly k steps when the readings are k × 5 s apart,
/// whatever the phase; between readings 2 s apart it covers 0 or 1 step (0 or 2.5x the true
/// rate). So rates are taken over the shortest window that is a multiple of the step and at
/// least `min_window` long, from a short history of readings.
pub const STATS_STEP_SECS: f64 = 5.0;

/// Recent counter readings, kept as runs of equal readings: counters never go back (a queue
/// whose counters did is cleared), so counters read equal at two polls held that value at every
/// instant between them. An idle queue, most of a large broker, then holds one run instead of
/// one reading per poll: at 50,000 queues the readings were the largest part of warren's memory.
#[derive(Debug, Clone)]
pub struct CounterWindow<C> {
    runs: std::collections::VecDeque<Run<C>>,
}

/// Counters read equal at every poll from `first` to `last`.
#[derive(Debug, Clone, Copy)]
struct Run<C> {
    first: std::time::Instant,
    last: std::time::Instant,
    counters: C,
}

impl<C: Copy> Default for CounterWindow<C> {
    fn default() -> Self {
        CounterWindow { runs: std::collections::VecDeque::new() }
    }
}

impl<C: Copy + PartialEq> CounterWindow<C> {
    /// Most runs kept; with polls of at least 1 s this spans the windows chosen below.
    const MAX_RUNS: usize = 16;

    /// The reading to take a rate against at `now`, with its age in seconds: the youngest one
    /// at least `min_window` old whose age is within half a second of a multiple of the stats
    /// step; failing that, the oldest one at least one step old. A run offers every age between
    /// its first and last reading, so the age chosen in a run is the aligned one itself.
    pub fn baseline(&self, now: std::time::Instant, min_window_secs: f64) -> Option<(C, f64)> {
        let age = |at: std::time::Instant| now.duration_since(at).as_secs_f64();
        let aligned = self
            .runs
            .iter()
            .filter_map(|run| {
                let (lo, hi) = (age(run.last).max(min_window_secs - 0.5), age(run.first));
                if lo > hi {
                    return None;
                }
                // The first multiple of the step that `lo` is within half a second of, or below.
                let target = ((lo - 0.5) / STATS_STEP_SECS).ceil() * STATS_STEP_SECS;
                let chosen = target.clamp(lo, hi);
                ((chosen - target).abs() <= 0.5).then_some((run.counters, chosen))
            })
            .min_by(|a, b| a.1.total_cmp(&b.1));
        aligned.or_else(|| {
            let oldest = self.runs.front()?;
            let oldest_age = age(oldest.first);
            (oldest_age >= STATS_STEP_SECS - 0.5).then_some((oldest.counters, oldest_age))
        })
    }

    pub fn push(&mut self, at: std::time::Instant, counters: C, keep_secs: f64) {
        match self.runs.back_mut() {
            Some(run) if run.counters == counters => run.last = at,
            _ => {
                // Room is made before pushing, so the buffer never grows past the limit.
                if self.runs.len() >= Self::MAX_RUNS {
                    self.runs.pop_front();
                }
                self.runs.push_back(Run { first: at, last: at, counters });
            }
        }
        let keep = std::time::Duration::from_secs_f64(keep_secs);
        while self.runs.front().is_some_and(|run| at.duration_since(run.last) > keep) {
            self.runs.pop_front();
        }
        if let Some(front) = self.runs.front_mut() {
            // A run older than the window still holds its value at the window's start.
            if at.duration_since(front.first) > keep {
                front.first = at.checked_sub(keep).unwrap_or(front.first);
            }
        }
        if self.runs.len() == 1 && self.runs.capacity() > 1 {
            self.runs.shrink_to_fit(); // an idle queue keeps one run, not a buffer for sixteen
        }
    }

    pub fn latest(&self) -> Option<&C> {
        self.runs.back().map(|run| &run.counters)
    }

    pub fn clear(&mut self) {
        self.runs.clear();
    }
}

/// Broker-wide cumulative counters from `/api/overview`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BrokerCounters {
    pub publish: Option<u64>,
    pub confirm: Option<u64>,
    pub ack: Option<u64>,
    pub deliver: Option<u64>,
    pub redeliver: Option<u64>,
    pub unroutable: Option<u64>,
}

impl BrokerCounters {
    /// 0 for every counter this reading has: the counters of a vhost before it existed.
    pub fn zeroed(&self) -> Self {
        let zero = |c: Option<u64>| c.map(|_| 0);
        BrokerCounters {
            publish: zero(self.publish),
            confirm: zero(self.confirm),
            ack: zero(self.ack),
            deliver: zero(self.deliver),
            redeliver: zero(self.redeliver),
            unroutable: zero(self.unroutable),
        }
    }

    pub fn from_overview(stats: Option<&OverviewStats>, stats_enabled: bool) -> Self {
        if !stats_enabled {
            return BrokerCounters::default();
        }
        let s = stats.cloned().unwrap_or_default();
        // A sum past u64 is no number the broker gave.
        let unroutable = s.return_unroutable.unwrap_or(0).checked_add(s.drop_unroutable.unwrap_or(0));
        BrokerCounters {
            publish: Some(s.publish.unwrap_or(0)),
            confirm: Some(s.confirm.unwrap_or(0)),
            ack: Some(s.ack.unwrap_or(0)),
            deliver: Some(s.deliver_get.unwrap_or(0)),
            redeliver: Some(s.redeliver.unwrap_or(0)),
            unroutable,
        }
    }
}

/// Broker-wide rates, messages per second.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, utoipa::ToSchema)]
pub struct BrokerRates {
    pub publish_rate: Option<f64>,
    pub confirm_rate: Option<f64>,
    pub ack_rate: Option<f64>,
    pub deliver_rate: Option<f64>,
    pub redeliver_rate: Option<f64>,
    pub unroutable_rate: Option<f64>,
}

pub fn broker_rates(previous: &BrokerCounters, current: &BrokerCounters, dt_secs: f64) -> BrokerRates {
    BrokerRates {
        publish_rate: counter_rate(previous.publish, current.publish, dt_secs),
        confirm_rate: counter_rate(previous.confirm, current.confirm, dt_secs),
        ack_rate: counter_rate(previous.ack, current.ack, dt_secs),
        deliver_rate: counter_rate(previous.deliver, current.deliver, dt_secs),
        redeliver_rate: counter_rate(previous.redeliver, current.redeliver, dt_secs),
        unroutable_rate: counter_rate(previous.unroutable, current.unroutable, dt_secs),
    }
}

/// Rates are stored as integer milli-messages per second (compact in SQLite).
pub fn rate_to_milli(rate: Option<f64>) -> Option<i64> {
    rate.map(|r| (r * 1000.0).round() as i64)
}

pub fn rate_from_milli(milli: Option<i64>) -> Option<f64> {
    milli.map(|m| m as f64 / 1000.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_never_go_negative_across_a_reset() {
        assert_eq!(counter_rate(Some(100), Some(150), 10.0), Some(5.0));
        assert_eq!(counter_rate(Some(100), Some(20), 10.0), None, "reset is unknown, not negative");
        assert_eq!(counter_rate(None, Some(20), 10.0), None, "first sample has no rate");
        assert_eq!(counter_rate(Some(1), Some(2), 0.0), None);
    }

    #[test]
    fn absent_stats_are_zero_only_when_the_broker_collects_them() {
        let raw: RawQueue = serde_json::from_str(r#"{"name":"q","vhost":"/","messages":0}"#).unwrap();
        assert_eq!(queue_counters(&raw, true).publish, Some(0));
        let fresh: RawQueue = serde_json::from_str(r#"{"name":"q","vhost":"/"}"#).unwrap();
        assert_eq!(queue_counters(&fresh, true).publish, None, "no stats yet is unknown");
        assert_eq!(queue_counters(&raw, false).publish, None);
        let view = queue_view("b", raw, false, Some((&QueueCounters::default(), 10.0)), Utc::now());
        assert_eq!(view.publish_rate, None, "no stats on the broker means unknown rates");
    }

    #[test]
    fn age_is_exact_from_timestamp_unknown_without() {
        let now = DateTime::from_timestamp(1_000_100, 0).unwrap();
        assert_eq!(exact_age(Some(3), Some(1_000_000), now), (Some(100.0), AgeSource::Exact));
        assert_eq!(exact_age(Some(0), None, now), (Some(0.0), AgeSource::Exact));
        assert_eq!(exact_age(Some(3), None, now), (None, AgeSource::Unknown));
        assert_eq!(exact_age(None, None, now), (None, AgeSource::Unknown));
        assert_eq!(exact_age(Some(1), Some(1_000_130), now).0, Some(0.0), "small clock skew clamps to 0");
        assert_eq!(exact_age(Some(1), Some(1_000_100_000), now), (None, AgeSource::Unknown), "milliseconds");
    }

    /// Crashes of the `management_json` fuzz target: numbers a broker (or whatever answers in its
    /// place) may send panicked in arithmetic, or wrapped in a release build.
    #[test]
    fn numbers_out_of_range_are_unknown_not_a_panic() {
        let raw: RawQueue =
            serde_json::from_str(r#"{"name":"q","messages_ready":18446744073709551615,"messages_unacknowledged":1}"#)
                .unwrap();
        assert_eq!(queue_view("b", raw, true, None, Utc::now()).total, None, "a total past u64 is no number");
        let now = DateTime::from_timestamp(1_000_100, 0).unwrap();
        assert_eq!(exact_age(Some(3), Some(i64::MIN / 10), now), (None, AgeSource::Unknown));
        let stats = OverviewStats { return_unroutable: Some(u64::MAX), drop_unroutable: Some(1), ..Default::default() };
        assert_eq!(BrokerCounters::from_overview(Some(&stats), true).unroutable, None);
    }

    #[test]
    fn depth_from_elsewhere_does_not_invent_counters() {
        // A listing without stats, then depth from the Prometheus scrape: the counters stay
        // unknown instead of reading as a publish count of 0.
        let mut raw: RawQueue = serde_json::from_str(r#"{"name":"q","vhost":"/","type":"quorum"}"#).unwrap();
        (raw.messages, raw.messages_ready, raw.messages_unacknowledged) = (Some(12), Some(12), Some(0));
        assert_eq!(queue_counters(&raw, true).publish, Some(0), "3.x listings omit zero counters");
        raw.counters_unknown = true;
        assert_eq!(queue_counters(&raw, true).publish, None);
    }

    #[test]
    fn missing_depth_stays_unknown() {
        // A new quorum queue has no messages* keys for its first seconds [3.10].
        let raw: RawQueue = serde_json::from_str(r#"{"name":"q","vhost":"/","type":"quorum"}"#).unwrap();
        let view = queue_view("b", raw, true, None, Utc::now());
        assert_eq!((view.ready, view.unacked, view.total), (None, None, None));
        assert_eq!(view.oldest_age_source, AgeSource::Unknown);
        assert_eq!(view.oldest_age_secs, None);
    }

    #[test]
    fn rate_window_spans_whole_stats_steps() {
        use std::time::{Duration, Instant};
        let start = Instant::now();
        let mut window = CounterWindow::default();
        for i in 0..8u64 {
            window.push(start + Duration::from_secs(2 * i), i, 65.0);
        }
        let now = start + Duration::from_secs(16);
        // Polls every 2 s: the reading 10 s old is the youngest aligned one at least 10 s old.
        let (reading, age) = window.baseline(now, 10.0).unwrap();
        assert_eq!((reading, age.round() as u64), (3, 10));
        // Polls every 10 s: the previous reading.
        let mut window = CounterWindow::default();
        window.push(start, 1u64, 65.0);
        window.push(start + Duration::from_secs(10), 2, 65.0);
        let (reading, _) = window.baseline(start + Duration::from_secs(20), 10.0).unwrap();
        assert_eq!(reading, 2);
        // Too young to give a rate.
        assert!(window.baseline(start + Duration::from_secs(12), 10.0).is_some());
        let mut fresh = CounterWindow::default();
        fresh.push(start, 1u64, 65.0);
        assert!(fresh.baseline(start + Duration::from_secs(2), 10.0).is_none());
    }

    #[test]
    fn equal_readings_are_one_run_offering_every_age_between() {
        use std::time::{Duration, Instant};
        let start = Instant::now();
        let mut window = CounterWindow::default();
        // Readings 0.7 s apart, none of them a whole number of 5 s steps before `now`.
        for i in 0..30u64 {
            window.push(start + Duration::from_millis(700 * i), 5u64, 65.0);
        }
        assert_eq!(window.runs.len(), 1);
        assert!(window.runs.capacity() <= 1, "an idle window keeps no spare buffer");
        let now = start + Duration::from_millis(700 * 29 + 300);
        let (reading, age) = window.baseline(now, 10.0).unwrap();
        assert_eq!(reading, 5);
        assert!((age - 10.0).abs() < 1e-9, "the run held 5 exactly 10 s ago: {age}");
        // A new value starts a run; the old run is still the baseline 10 s back.
        window.push(now, 9, 65.0);
        let (reading, age) = window.baseline(now + Duration::from_secs(2), 10.0).unwrap();
        assert_eq!((reading, age), (5, 10.0));
        // A run older than the window is trimmed to it.
        let mut idle = CounterWindow::default();
        for i in 0..40u64 {
            idle.push(start + Duration::from_secs(5 * i), 1u64, 65.0);
        }
        let (_, age) = idle.baseline(start + Duration::from_secs(195), 1000.0).unwrap();
        assert!((age - 65.0).abs() < 1e-6, "oldest age {age}");
    }

    #[test]
    fn changing_readings_keep_a_bounded_buffer() {
        use std::time::{Duration, Instant};
        let start = Instant::now();
        let mut window = CounterWindow::default();
        for i in 0..100u64 {
            window.push(start + Duration::from_millis(100 * i), i, 65.0);
        }
        assert_eq!(window.runs.len(), 16);
        assert!(window.runs.capacity() <= 16, "capacity {}", window.runs.capacity());
        assert_eq!(window.latest(), Some(&99));
    }

    #[test]
    fn a_dead_letter_queues_inflow_is_derived_from_its_depth_never_a_bare_zero() {
        let raw: RawQueue = serde_json::from_str(
            r#"{"name":"dlq","vhost":"/","messages":166,"messages_ready":166,"messages_unacknowledged":0}"#,
        )
        .unwrap();
        let mut view = queue_view("b", raw, true, None, Utc::now());
        (view.publish_rate, view.ack_rate) = (Some(0.0), Some(0.0));
        view.inflow_rate = view.publish_rate;
        derive_inflow(&mut view);
        assert_eq!(
            (view.inflow_rate, view.inflow_source),
            (None, InflowSource::Unknown),
            "not yet: no depth change known"
        );
        apply_health(&mut view, None, Some(2.5), 3600.0);
        derive_inflow(&mut view);
        assert_eq!((view.inflow_rate, view.inflow_source), (Some(2.5), InflowSource::DerivedLowerBound));
        // A reader acking 1/s while the depth grows 2.5/s: 3.5/s arrive, at least.
        view.ack_rate = Some(1.0);
        derive_inflow(&mut view);
        assert_eq!(view.inflow_rate, Some(3.5));
        // Draining faster than anything is known to arrive: at least nothing, never negative.
        apply_health(&mut view, None, Some(-4.0), 3600.0);
        derive_inflow(&mut view);
        assert_eq!(view.inflow_rate, Some(0.0));
    }

    #[test]
    fn dead_letters_in_custody_count_and_age_the_queue() {
        let raw: RawQueue = serde_json::from_str(
            r#"{"name":"dlq","vhost":"/","messages":0,"messages_ready":0,"messages_unacknowledged":0}"#,
        )
        .unwrap();
        let now = Utc::now();
        let mut view = queue_view("b", raw, true, None, now);
        assert_eq!((view.oldest_age_secs, view.oldest_age_source), (Some(0.0), AgeSource::Exact));
        view.apply_custody(35, Some(now.timestamp() - 600), now);
        assert_eq!((view.total, view.ready, view.custody_held), (Some(35), Some(0), Some(35)));
        assert_eq!(view.oldest_age_secs, Some(600.0));
        assert_eq!(view.oldest_age_source, AgeSource::Estimated);
        assert!(view.oldest_age_lower_bound && view.age_from_custody);
        // Nothing held: the broker's numbers as they are.
        let raw: RawQueue = serde_json::from_str(r#"{"name":"dlq","vhost":"/","messages":3}"#).unwrap();
        let mut view = queue_view("b", raw, true, None, now);
        view.apply_custody(0, None, now);
        assert_eq!((view.total, view.custody_held, view.age_from_custody), (Some(3), Some(0), false));
    }

    #[test]
    fn health_signals() {
        let raw: RawQueue = serde_json::from_str(
            r#"{"name":"q","vhost":"/","messages":100,"messages_ready":90,"messages_unacknowledged":10,"consumers":0}"#,
        )
        .unwrap();
        let mut view = queue_view("b", raw, true, None, Utc::now());
        view.publish_rate = Some(2.0);
        view.ack_rate = Some(7.0);
        view.deliver_rate = Some(10.0);
        view.redeliver_rate = Some(1.0);
        // 2 published and 7 acked per second, and more leaving unacked (rejected, expired):
        // the depth says how the backlog moves.
        apply_health(&mut view, Some((45.0, 4)), Some(-5.0), 3600.0);
        assert_eq!(view.backlog_growth_rate, Some(-5.0));
        assert_eq!(view.time_to_drain_secs, Some(20.0));
        assert_eq!(view.redelivery_share, Some(0.1));
        assert!(view.no_consumers);
        assert_eq!(view.hung_consumer_secs, Some(45.0));
        view.ack_rate = Some(1.0);
        apply_health(&mut view, Some((45.0, 2)), Some(1.0), 3600.0);
        assert_eq!(view.time_to_drain_secs, None, "a growing backlog does not drain");
        assert_eq!(view.hung_consumer_secs, None, "two polls are not enough to call it hung");
        apply_health(&mut view, None, None, 3600.0);
        assert_eq!(view.backlog_growth_rate, None, "unknown until two depth readings span the window");
    }

    /// Issue 31, case 1: a consumer nacking poison messages with requeue, prefetch 10: 90
    /// deliveries a second, all redelivered, nothing acked, ready growing.
    #[test]
    fn deliveries_that_come_back_unacked_are_a_loop_not_a_hung_consumer() {
        let raw: RawQueue = serde_json::from_str(
            r#"{"name":"q","vhost":"/","messages":360,"messages_ready":350,"messages_unacknowledged":10,"consumers":1}"#,
        )
        .unwrap();
        let mut view = queue_view("b", raw, true, None, Utc::now());
        (view.deliver_rate, view.redeliver_rate, view.ack_rate, view.publish_rate) =
            (Some(90.0), Some(90.0), Some(0.0), Some(4.0));
        apply_health(&mut view, Some((60.0, 12)), Some(4.0), 3600.0);
        assert_eq!(view.hung_consumer_secs, Some(60.0), "what apply_health alone says");
        apply_loop(&mut view, Some((60.0, 12)));
        assert_eq!((view.hung_consumer_secs, view.holding_secs, view.redelivery_loop_secs), (None, None, Some(60.0)));
        // Too short to say: no loop yet, and no hung consumer either.
        apply_health(&mut view, Some((60.0, 12)), Some(4.0), 3600.0);
        apply_loop(&mut view, Some((10.0, 2)));
        assert_eq!((view.hung_consumer_secs, view.redelivery_loop_secs), (None, None));
        // Acks again: no loop; the hung signal is apply_health's own.
        view.ack_rate = Some(5.0);
        apply_health(&mut view, Some((60.0, 12)), Some(4.0), 3600.0);
        apply_loop(&mut view, Some((60.0, 12)));
        assert_eq!(view.redelivery_loop_secs, None);
        // warren's own reads (a snapshot) are no application's loop.
        view.ack_rate = Some(0.0);
        view.own_reads = true;
        apply_health(&mut view, Some((60.0, 12)), Some(4.0), 3600.0);
        apply_loop(&mut view, Some((60.0, 12)));
        assert_eq!(looping(&view), None);
        assert_eq!(view.redelivery_loop_secs, None);
        // Unknown rates say nothing.
        view.own_reads = false;
        view.ack_rate = None;
        assert_eq!(looping(&view), None);
    }

    /// Issue 17, case 6: a consumer holding ETA tasks was "hung" for up to 110 s.
    #[test]
    fn a_consumer_holding_messages_with_none_ready_is_holding_not_hung() {
        let raw: RawQueue = serde_json::from_str(
            r#"{"name":"q","vhost":"/","messages":5,"messages_ready":0,"messages_unacknowledged":5,"consumers":1}"#,
        )
        .unwrap();
        let mut view = queue_view("b", raw, true, None, Utc::now());
        apply_health(&mut view, Some((110.0, 11)), Some(0.0), 3600.0);
        assert_eq!((view.hung_consumer_secs, view.holding_secs), (None, Some(110.0)));
        // Past the limit, holding is hung too.
        apply_health(&mut view, Some((3700.0, 370)), Some(0.0), 3600.0);
        assert_eq!((view.hung_consumer_secs, view.holding_secs), (Some(3700.0), None));
        // Messages waiting while it holds others without acking: stuck, at once.
        view.ready = Some(3);
        apply_health(&mut view, Some((40.0, 4)), Some(0.0), 3600.0);
        assert_eq!((view.hung_consumer_secs, view.holding_secs), (Some(40.0), None));
        // Unknown ready (4.x without the collector) accuses no one before the limit.
        view.ready = None;
        apply_health(&mut view, Some((40.0, 4)), Some(0.0), 3600.0);
        assert_eq!((view.hung_consumer_secs, view.holding_secs), (None, Some(40.0)));
    }

    #[test]
    fn milli_rates_round_trip() {
        assert_eq!(rate_from_milli(rate_to_milli(Some(12.3456))), Some(12.346));
        assert_eq!(rate_to_milli(None), None);
    }
}
