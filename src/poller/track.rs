//! What the poller remembers of each queue between polls, and how a poll's raw answer becomes
//! views (numbers, rates, health) and the rows to write.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};

use super::shared::SharedMaps;
use crate::broker::management::RawQueue;
use crate::history::{KnownQueue, PollWrite, QueueMeta, StoredSample};
use crate::metrics::{self, rate_to_milli, CounterWindow, Estimate, QueueCounters, QueueNames, QueueRates, QueueView};

/// A queue's rows are rewritten at least this often even when nothing changed, so that a reader
/// never has to look further back than this for the value in force.
pub const KEYFRAME_SECS: i64 = 3600;

/// How long rates stay unknown after a queue was re-created (its counters went backwards or it
/// came back after being gone). Measured on 3.10: a channel that keeps publishing to the name
/// reports its cumulative per-queue count again at its next stats emission (every 5 s), so the
/// new queue's counter first drops, then jumps back up by everything published to the old
/// queue. Three stats intervals absorb that jump into the baseline instead of showing a spike.
const SETTLE: Duration = Duration::from_secs(15);

/// Vhost and name, shared with the views (`QueueView::vhost`, `QueueView::name`).
pub type QueueKey = (Arc<str>, Arc<str>);

/// What the poller remembers of a queue. At 50,000 queues every byte here is 50 kB: what is
/// only compared (the stored metadata and values) is kept as a fingerprint, not as a copy.
pub struct Tracked {
    pub id: Option<i64>,
    /// Fingerprint of the stored metadata (`meta_fingerprint`).
    pub meta: u64,
    pub deleted: bool,
    pub last_written: Option<Written>,
    /// Recent counter readings, for rates, all from `counters_from`.
    pub counters: CounterWindow<QueueCounters>,
    /// Recent total depths, for the backlog's growth (`QueueView::backlog_growth_rate`).
    pub depth: CounterWindow<u64>,
    /// Which source the readings in `counters` came from: a window never mixes two (the
    /// listing's counters trail the plugin's by up to a stats step, so a delta across sources
    /// is off by whatever was published in that lag).
    pub counters_from: Option<CounterSource>,
    /// After a re-creation, rates stay unknown until this time.
    pub settle_until: Option<Instant>,
    /// Since when (and over how many polls) unacked messages were held with no ack.
    pub no_ack_since: Option<(Instant, u32)>,
    /// Since when (and over how many polls) deliveries came back with no ack (`metrics::looping`).
    pub loop_since: Option<(Instant, u32)>,
    /// Unix time from which this queue's stored history belongs to its current incarnation
    /// (0: all of it, as far as warren knows).
    pub incarnation_since: i64,
    /// (publish counter − total) of the last estimate and its result.
    pub estimate: Option<(i64, Estimate)>,
    /// A move by warren put older messages into this queue (`estimate::apply_fifo_breaks`).
    /// Boxed: almost every queue has none.
    pub fifo_break: Option<Box<FifoBreak>>,
    /// The last poll (by number) that listed this queue.
    pub seen_poll: u64,
    /// The latest counters that were known (a re-created quorum queue has none for seconds).
    pub last_known: Option<QueueCounters>,
    /// Consecutive complete polls that did not list this queue.
    pub missing_polls: u32,
    /// Rates of the last poll with fresh counters, shown until the next one (the message stats
    /// listing runs at a slower cadence than depth polls).
    pub rates: QueueRates,
    /// While the queue's age is estimated: the newest rows written for it, oldest first, as
    /// (ts, publish counter), so that a recent FIFO crossing is found without a query (two per
    /// busy queue per poll otherwise: 5,000 busy queues cost more than the rest of a poll).
    pub recent_rows: std::collections::VecDeque<(i64, Option<i64>)>,
}

/// Messages requeued into a queue by a move that ended at `at`. `from` is (publish counter,
/// depth) read fresh after the move's publishes were counted: once as many messages have left
/// since (`estimate::moved_messages_drained`) as the queue held then, every message present was
/// published after the move.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FifoBreak {
    pub at: DateTime<Utc>,
    pub from: Option<(u64, u64)>,
}

/// Rows kept in `Tracked::recent_rows`.
const RECENT_ROWS: usize = 16;

/// The last row written for a queue: when, a fingerprint of its values, and its publish counter.
///
/// A fingerprint instead of the values: a row is written when the values' fingerprint changed.
/// Two different samples share a 64-bit fingerprint with odds of 2^-64 per poll and queue (at
/// 50,000 queues every 10 s, once in about 10^10 days), and even then the next change or the
/// hourly keyframe writes the row. The metadata fingerprint (`Tracked::meta`) is the same bet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Written {
    pub ts: i64,
    pub sample: u64,
    pub publish_count: Option<i64>,
}

impl Written {
    pub fn new(ts: i64, sample: &StoredSample) -> Written {
        Written { ts, sample: fingerprint(sample), publish_count: sample.publish_count }
    }
}

fn fingerprint(value: &impl Hash) -> u64 {
    // Fixed keys: the same value has the same fingerprint in every poll of this process.
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    value.hash(&mut hasher);
    hasher.finish()
}

type JsonMap = serde_json::Map<String, serde_json::Value>;

/// Fingerprint of a queue's stored metadata but its key (vhost and name).
fn meta_fingerprint(
    kind: &str,
    durable: Option<bool>,
    policy: Option<&str>,
    arguments: &JsonMap,
    effective: &JsonMap,
) -> u64 {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    (kind, durable, policy).hash(&mut hasher);
    super::shared::hash_map(arguments, &mut hasher);
    super::shared::hash_map(effective, &mut hasher);
    hasher.finish()
}

fn view_meta_fingerprint(view: &QueueView) -> u64 {
    meta_fingerprint(&view.kind, view.durable, view.policy.as_deref(), &view.arguments, &view.effective_policy)
}

/// The fingerprint of metadata as stored (its maps as JSON text). Text that is not a JSON object
/// counts as an empty map, which differs from any real one only if the queue has arguments: the
/// row is then rewritten at the first poll, which is what a damaged row needs.
fn stored_meta_fingerprint(meta: &QueueMeta) -> u64 {
    let parse = |text: &str| serde_json::from_str::<JsonMap>(text).unwrap_or_default();
    meta_fingerprint(
        &meta.kind,
        meta.durable,
        meta.policy.as_deref(),
        &parse(&meta.arguments),
        &parse(&meta.effective_policy),
    )
}

impl Tracked {
    pub fn from_known(k: KnownQueue) -> (QueueKey, Tracked) {
        let meta = stored_meta_fingerprint(&k.meta);
        let key = (k.meta.vhost.into(), k.meta.name.into());
        let tracked = Tracked {
            id: Some(k.id),
            meta,
            deleted: k.deleted_at.is_some(),
            last_written: k.last_sample.map(|(ts, sample)| Written::new(ts, &sample)),
            counters: CounterWindow::default(),
            depth: CounterWindow::default(),
            counters_from: None,
            settle_until: None,
            no_ack_since: None,
            loop_since: None,
            recent_rows: Default::default(),
            incarnation_since: 0,
            estimate: None,
            fifo_break: None,
            seen_poll: 0,
            last_known: None,
            missing_polls: 0,
            rates: QueueRates::default(),
        };
        (key, tracked)
    }

    fn new(ts: i64) -> Tracked {
        Tracked {
            id: None,
            meta: 0,
            deleted: false,
            last_written: None,
            counters: CounterWindow::default(),
            depth: CounterWindow::default(),
            counters_from: None,
            settle_until: None,
            no_ack_since: None,
            loop_since: None,
            recent_rows: Default::default(),
            incarnation_since: ts,
            estimate: None,
            fifo_break: None,
            seen_poll: 0,
            last_known: None,
            missing_polls: 0,
            rates: QueueRates::default(),
        }
    }

    /// `history::publish_crossing` answered from `recent_rows` when they hold the answer: the
    /// latest row since `since` with a publish counter at most `target`, and the time of the row
    /// after it. `None`: not among the recent rows (the database may still have it).
    pub fn recent_crossing(&self, since: i64, target: i64) -> Option<(i64, Option<i64>)> {
        let rows = &self.recent_rows;
        let i = rows.iter().rposition(|(ts, publish)| *ts >= since && publish.is_some_and(|p| p <= target))?;
        Some((rows[i].0, rows.get(i + 1).map(|(ts, _)| *ts)))
    }

    /// Records a row just written, or forgets the recent rows once the age is exact again.
    fn wrote(&mut self, ts: i64, publish: Option<i64>, age_exact: bool) {
        if age_exact {
            self.recent_rows = Default::default();
            return;
        }
        if self.recent_rows.len() == RECENT_ROWS {
            self.recent_rows.pop_front();
        }
        self.recent_rows.push_back((ts, publish));
    }

    /// The queue was re-created: rates settle, and older history is not this queue's.
    fn restart(&mut self, fetched: Instant, ts: i64) {
        self.counters.clear();
        self.depth.clear();
        self.last_known = None;
        self.settle_until = Some(fetched + SETTLE);
        self.incarnation_since = ts;
        self.recent_rows.clear();
        self.estimate = None;
        self.no_ack_since = None;
        self.loop_since = None;
        self.rates = QueueRates::default();
    }
}

/// Where a poll's per-queue counters (publish, deliver, ack, redeliver) came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CounterSource {
    /// The management listing's `message_stats` (every version with stats enabled).
    Listing,
    /// The Prometheus plugin's per-queue counter families (RabbitMQ 4.0 and later).
    Plugin,
}

/// Parameters of one derivation.
pub struct PollContext {
    pub broker: Arc<str>,
    pub stats_enabled: bool,
    pub now: DateTime<Utc>,
    pub fetched: Instant,
    pub rate_window_secs: f64,
    pub keep_readings_secs: f64,
    /// How long a consumer may hold messages with none ready before it counts as hung
    /// (`BrokerConfig::scheduled_hold_limit`).
    pub hold_limit_secs: f64,
    /// The source of this poll's fresh counters. `None` when they are the previous stats
    /// listing's (depth came from the cheap source): counters are then neither a new reading
    /// nor evidence about consumers, and each queue keeps the rates of the last fresh reading.
    pub counters: Option<CounterSource>,
    /// The queues warren itself read within the rate window, by (vhost, queue)
    /// (`QueueView::own_reads`); almost always empty.
    pub own_reads: std::collections::HashSet<(String, String)>,
}

impl PollContext {
    fn counters_fresh(&self) -> bool {
        self.counters.is_some()
    }
}

/// What `derive` learned of each view that the write needs, so that planning and committing
/// the write look nothing up again.
pub struct Mark {
    pub id: Option<i64>,
    /// The queue's metadata when it is new, changed, or back after being gone.
    pub meta: Option<Box<QueueMeta>>,
    pub last_written: Option<Written>,
    pub was_deleted: bool,
}

/// Turns raw queues into views, updating what is remembered per queue (counters, health
/// trackers). Returns the views, a mark per view, and the keys of watched queues that
/// disappeared. `poll` numbers this poll: each tracked queue remembers the last poll it was in.
pub fn derive(
    queues: &mut HashMap<QueueKey, Tracked>,
    shared: &mut SharedMaps,
    raw_pages: Vec<Vec<RawQueue>>,
    ctx: &PollContext,
    poll: u64,
    watches_vhost: impl Fn(&str) -> bool,
) -> (Vec<QueueView>, Vec<Mark>, Vec<QueueKey>) {
    let ts = ctx.now.timestamp();
    let count = raw_pages.iter().map(Vec::len).sum();
    let mut views = Vec::with_capacity(count);
    let mut marks = Vec::with_capacity(count);
    // The raw queues are consumed: each view takes its strings and argument maps over instead of
    // copying them, so a poll of 50,000 queues does not hold both copies at once.
    for raw in raw_pages.into_iter().flatten() {
        let current = metrics::queue_counters(&raw, ctx.stats_enabled);
        let vhost = shared.share_str(&raw.vhost);
        let entry = queues.entry((vhost.clone(), raw.name.as_str().into()));
        // The view's name is the map's key: one copy per queue, whichever poll it is.
        let name = entry.key().1.clone();
        let tracked = entry.or_insert_with(|| Tracked::new(ts));
        if tracked.seen_poll == poll {
            continue; // a queue created during pagination can shift into the next page twice
        }
        tracked.seen_poll = poll;
        tracked.missing_polls = 0;
        // A new source starts a new window: readings from two sources are not comparable, so
        // neither a rate nor a reset is read across them.
        let switched = ctx.counters.is_some() && tracked.counters_from.is_some_and(|from| Some(from) != ctx.counters);
        if switched {
            tracked.counters.clear();
        }
        if ctx.counters.is_some() {
            tracked.counters_from = ctx.counters;
        }
        let counters_fresh = ctx.counters_fresh();
        let previous_reading = tracked.counters.latest().copied();
        // Compare with the last counters that were known: a queue re-created under the same name
        // may first show none at all, then its channel's old count again.
        let went_back =
            counters_fresh && !switched && tracked.last_known.is_some_and(|c| counters_went_back(&c, &current));
        // After a restart of warren: a publish counter below what was stored means the queue (or
        // the node) started again while warren was away; older history is not this queue's.
        let restarted_while_away = counters_fresh
            && tracked.last_known.is_none()
            && tracked.incarnation_since == 0
            && matches!((current.publish, tracked.last_written.and_then(|w| w.publish_count)),
                        (Some(now), Some(stored)) if (now as i64) < stored);
        if tracked.deleted || went_back || restarted_while_away {
            tracked.restart(ctx.fetched, ts);
        }
        if current.publish.is_some() {
            tracked.last_known = Some(current);
        }
        let settled = tracked.settle_until.is_none_or(|until| ctx.fetched >= until);
        let baseline = if tracked.deleted || !settled || !counters_fresh {
            None
        } else {
            tracked.counters.baseline(ctx.fetched, ctx.rate_window_secs)
        };
        let names = QueueNames {
            broker: ctx.broker.clone(),
            vhost,
            name,
            kind: shared.share_str(raw.kind.as_deref().unwrap_or("classic")),
            state: raw.state.as_deref().map(|s| shared.share_str(s)),
        };
        let mut view = metrics::queue_view_named(
            names,
            raw,
            ctx.stats_enabled,
            baseline.as_ref().map(|(c, age)| (c, *age)),
            ctx.now,
        );

        if !counters_fresh {
            view.counters = tracked.last_known.unwrap_or_default();
        }
        if counters_fresh {
            tracked.rates = QueueRates {
                publish: view.publish_rate,
                deliver: view.deliver_rate,
                ack: view.ack_rate,
                redeliver: view.redeliver_rate,
            };
        } else if !tracked.deleted && settled {
            (view.publish_rate, view.deliver_rate, view.ack_rate, view.redeliver_rate) =
                (tracked.rates.publish, tracked.rates.deliver, tracked.rates.ack, tracked.rates.redeliver);
        }

        // Hung consumer: unacked messages and an ack counter that did not move.
        let holding = view.unacked.is_some_and(|u| u > 0);
        let acked = match (previous_reading.and_then(|c| c.ack), current.ack) {
            (Some(before), Some(now)) => now != before,
            _ => true, // unknown counters never accuse a consumer
        };
        if counters_fresh {
            tracked.no_ack_since = match (holding && !acked, tracked.no_ack_since) {
                (false, _) => None,
                (true, Some((since, polls))) => Some((since, polls + 1)),
                (true, None) => Some((ctx.fetched, 1)),
            };
        } else if !holding {
            tracked.no_ack_since = None;
        }
        // Redeliveries: messages handed back stay at the head while later ones are acked, so the
        // FIFO age estimate no longer holds until the queue has turned over
        // (`estimate::apply_fifo_breaks`). warren's own reads hand back in place and break nothing.
        let own_reads =
            !ctx.own_reads.is_empty() && ctx.own_reads.contains(&(view.vhost.to_string(), view.name.to_string()));
        let redelivered = matches!((previous_reading.and_then(|c| c.redeliver), current.redeliver),
                                   (Some(before), Some(now)) if now > before);
        if counters_fresh && redelivered && !own_reads {
            tracked.fifo_break = Some(Box::new(FifoBreak { at: ctx.now, from: None }));
        }
        view.fifo_broken_since = tracked.fifo_break.as_ref().map(|b| b.at);
        let no_ack_for =
            tracked.no_ack_since.map(|(since, polls)| (ctx.fetched.duration_since(since).as_secs_f64(), polls));
        // The backlog's growth from depth readings a rate window apart (each poll reads depth).
        let depth_growth = match (view.total, tracked.depth.baseline(ctx.fetched, ctx.rate_window_secs)) {
            (Some(now), Some((then, age))) if !tracked.deleted && age > 0.0 => Some((now as f64 - then as f64) / age),
            _ => None,
        };
        if let Some(total) = view.total {
            tracked.depth.push(ctx.fetched, total, ctx.keep_readings_secs);
        }
        view.own_reads = own_reads;
        metrics::apply_health(&mut view, no_ack_for, depth_growth, ctx.hold_limit_secs);
        if counters_fresh {
            tracked.loop_since = match (metrics::looping(&view), tracked.loop_since) {
                (Some(true), Some((since, polls))) => Some((since, polls + 1)),
                (Some(true), None) => Some((ctx.fetched, 1)),
                (Some(false), _) => None,
                // warren's own reads, or rates unknown: neither evidence of a loop nor of its end.
                (None, kept) => kept,
            };
        }
        let loop_for =
            tracked.loop_since.map(|(since, polls)| (ctx.fetched.duration_since(since).as_secs_f64(), polls));
        metrics::apply_loop(&mut view, loop_for);

        if counters_fresh {
            tracked.counters.push(ctx.fetched, current, ctx.keep_readings_secs);
        }
        view.id = tracked.id;
        // Compared in place: building the metadata row (two JSON documents, four strings) for
        // every queue on every poll was a measurable share of a poll, and it rarely changes.
        let changed = tracked.deleted || tracked.id.is_none() || tracked.meta != view_meta_fingerprint(&view);
        marks.push(Mark {
            id: tracked.id,
            meta: changed.then(|| Box::new(queue_meta(&view))),
            last_written: tracked.last_written,
            was_deleted: tracked.deleted,
        });
        views.push(view);
    }

    let mut gone = Vec::new();
    for (key, tracked) in queues.iter_mut() {
        if !tracked.deleted && tracked.seen_poll != poll && watches_vhost(&key.0) {
            // A queue deleted while the pages were being read shifts the next page by one, so a
            // queue can be missed once without being gone: it must be missing twice in a row.
            tracked.missing_polls += 1;
            if tracked.missing_polls >= 2 {
                // Forget the counters: a queue that comes back under this name starts afresh.
                tracked.counters.clear();
                tracked.last_known = None;
                tracked.no_ack_since = None;
                tracked.loop_since = None;
                tracked.estimate = None;
                tracked.rates = QueueRates::default();
                gone.push(key.clone());
            }
        }
    }
    (views, marks, gone)
}

/// The rows one poll writes: changed metadata, changed samples (plus keyframes), deletions.
pub fn plan_write(
    queues: &HashMap<QueueKey, Tracked>,
    views: &[QueueView],
    marks: &[Mark],
    gone: &[QueueKey],
    broker_id: i64,
    ts: i64,
) -> PollWrite {
    let mut write = PollWrite { broker_id, ts, ..PollWrite::default() };
    for (view, mark) in views.iter().zip(marks) {
        let sample = stored_sample(view);
        if let Some(meta) = &mark.meta {
            write.upserts.push((**meta).clone());
        }
        let Some(id) = mark.id else {
            write.new_samples.push((write.upserts.len() - 1, sample));
            continue;
        };
        let due = match mark.last_written {
            Some(last) => last.sample != fingerprint(&sample) || keyframe_due(id, last.ts, ts),
            None => true,
        };
        if due || mark.was_deleted {
            write.samples.push((id, sample));
        }
    }
    write.deleted = gone.iter().filter_map(|key| queues.get(key).and_then(|t| t.id)).collect();
    // An all-unknown row at the deletion: a queue re-created later under the same name must not
    // carry its old values across the time it did not exist.
    write.samples.extend(write.deleted.iter().map(|id| (*id, StoredSample::default())));
    write
}

/// Records a successful write: ids of new queues, what each queue has stored, deletions. Only
/// queues with something written are looked up.
pub fn commit(
    queues: &mut HashMap<QueueKey, Tracked>,
    views: &mut [QueueView],
    marks: &[Mark],
    write: &PollWrite,
    ids: &[i64],
    gone: &[QueueKey],
) {
    let written: std::collections::HashSet<i64> = write.samples.iter().map(|(id, _)| *id).collect();
    let mut upsert = 0;
    for (view, mark) in views.iter_mut().zip(marks) {
        let new_id = mark.meta.as_ref().map(|_| {
            upsert += 1;
            ids[upsert - 1]
        });
        let sample_written = mark.id.is_none() || mark.id.is_some_and(|id| written.contains(&id));
        if new_id.is_none() && !sample_written {
            continue;
        }
        let Some(t) = queues.get_mut(&(view.vhost.clone(), view.name.clone())) else { continue };
        if let Some(id) = new_id {
            t.id = Some(id);
            t.meta = view_meta_fingerprint(view);
            t.deleted = false;
            view.id = Some(id);
        }
        if sample_written {
            let sample = stored_sample(view);
            t.last_written = Some(Written::new(write.ts, &sample));
            // Every row written is recorded: the recent rows are the newest ones, without gaps.
            t.wrote(write.ts, sample.publish_count, view.oldest_age_source == metrics::AgeSource::Exact);
        }
    }
    for key in gone {
        if let Some(t) = queues.get_mut(key) {
            t.deleted = true;
        }
    }
}

/// Whether an unchanged queue's row is due again. Every queue started at the same poll would
/// otherwise write its keyframe in the same poll each hour (10,000 rows at once at 10,000
/// queues); instead each queue has its own point in the hour (its id modulo the hour), and the
/// keyframe is written at the first poll past that point. The hard limit keeps the promise that
/// no row is older than `KEYFRAME_SECS`.
pub fn keyframe_due(queue_id: i64, last_ts: i64, ts: i64) -> bool {
    let slot = |t: i64| (t - queue_id.rem_euclid(KEYFRAME_SECS)).div_euclid(KEYFRAME_SECS);
    slot(ts) != slot(last_ts) || ts - last_ts >= KEYFRAME_SECS
}

fn counters_went_back(previous: &QueueCounters, current: &QueueCounters) -> bool {
    let back = |p: Option<u64>, c: Option<u64>| matches!((p, c), (Some(p), Some(c)) if c < p);
    back(previous.publish, current.publish)
        || back(previous.deliver, current.deliver)
        || back(previous.ack, current.ack)
        || back(previous.redeliver, current.redeliver)
}

pub fn queue_meta(view: &QueueView) -> QueueMeta {
    QueueMeta {
        vhost: view.vhost.to_string(),
        name: view.name.to_string(),
        kind: view.kind.to_string(),
        durable: view.durable,
        arguments: serde_json::Value::Object((*view.arguments).clone()).to_string(),
        policy: view.policy.clone(),
        effective_policy: serde_json::Value::Object((*view.effective_policy).clone()).to_string(),
    }
}

pub fn stored_sample(view: &QueueView) -> StoredSample {
    let (est_oldest_ts, est_bound) = match view.estimate {
        Some(Estimate::PublishedAt(t) | Estimate::ArrivedAt(t)) => (Some(t.round() as i64), None),
        Some(Estimate::OlderThan(t) | Estimate::ArrivedBefore(t)) => (Some(t), Some(1)),
        _ => (None, None),
    };
    StoredSample {
        ready: view.ready.map(|v| v as i64),
        unacked: view.unacked.map(|v| v as i64),
        consumers: view.consumers.map(|v| v as i64),
        publish_count: view.publish_count.map(|v| v as i64),
        publish_rate_m: rate_to_milli(view.publish_rate),
        deliver_rate_m: rate_to_milli(view.deliver_rate),
        ack_rate_m: rate_to_milli(view.ack_rate),
        redeliver_rate_m: rate_to_milli(view.redeliver_rate),
        head_ts: view.head_ts,
        est_oldest_ts,
        est_bound,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keyframes_spread_over_the_hour_and_never_lag_more_than_an_hour() {
        // 3,600 queues written together at t0 and never changing, polled every 10 s for 3 h.
        let t0 = 1_800_000_005;
        let mut last: Vec<i64> = vec![t0; 3600];
        let mut per_poll = Vec::new();
        for step in 1..=1080 {
            let ts = t0 + 10 * step;
            let mut written = 0;
            for (id, last_ts) in last.iter_mut().enumerate() {
                if keyframe_due(id as i64, *last_ts, ts) {
                    assert!(ts - *last_ts <= KEYFRAME_SECS, "queue {id}: row {} s old", ts - *last_ts);
                    *last_ts = ts;
                    written += 1;
                }
            }
            per_poll.push(written);
        }
        // Each queue once an hour, about 10 per poll, never all at once.
        let total: usize = per_poll.iter().sum();
        assert!((3 * 3600..=4 * 3600).contains(&total), "{total} keyframes in 3 h");
        assert!(per_poll.iter().all(|&n| n <= 20), "max {} in one poll", per_poll.iter().max().unwrap());
        // The hard limit still applies to a queue whose last row fell just after its slot.
        assert!(keyframe_due(0, 0, KEYFRAME_SECS));
        assert!(!keyframe_due(5, 10, 3000));
    }

    #[test]
    fn recent_rows_answer_the_crossing_as_the_database_would() {
        let mut t = Tracked::new(0);
        for (ts, publish) in [(100, Some(10)), (110, Some(20)), (120, None), (130, Some(30))] {
            t.wrote(ts, publish, false);
        }
        // The latest row at or below the target, and the row after it (a row without a counter
        // still ends the span, as `min(ts)` over the table does).
        assert_eq!(t.recent_crossing(0, 25), Some((110, Some(120))));
        assert_eq!(t.recent_crossing(0, 30), Some((130, None)), "crossed in the poll being written");
        assert_eq!(t.recent_crossing(0, 5), None, "older than the recent rows: ask the database");
        assert_eq!(t.recent_crossing(115, 25), None, "rows before the incarnation do not count");
        for ts in 0..40 {
            t.wrote(200 + ts, Some(100 + ts), false);
        }
        assert_eq!(t.recent_rows.len(), RECENT_ROWS);
        assert_eq!(t.recent_crossing(0, 130), Some((230, Some(231))));
        assert_eq!(t.recent_crossing(0, 110), None, "dropped from the recent rows");
        t.wrote(300, Some(500), true);
        assert!(t.recent_rows.is_empty(), "an exact age needs no estimate");
    }

    #[test]
    fn metadata_changes_change_its_fingerprint() {
        let raw: RawQueue = serde_json::from_str(
            r#"{"name":"q","vhost":"/","type":"classic","durable":true,"policy":"p",
                "arguments":{"x-queue-type":"classic","x-dead-letter-exchange":"dlx"},
                "effective_policy_definition":{"max-length":10}}"#,
        )
        .unwrap();
        let view = metrics::queue_view("b", raw, true, None, Utc::now());
        let meta = queue_meta(&view);
        assert_eq!(stored_meta_fingerprint(&meta), view_meta_fingerprint(&view), "as stored and as read compare equal");
        for change in [
            QueueMeta { arguments: r#"{"x-dead-letter-exchange":"dlx"}"#.into(), ..meta.clone() },
            QueueMeta {
                arguments: r#"{"x-dead-letter-exchange":"dlx","x-queue-type":"classic","x":1}"#.into(),
                ..meta.clone()
            },
            QueueMeta { effective_policy: "{}".into(), ..meta.clone() },
            QueueMeta { policy: None, ..meta.clone() },
            QueueMeta { durable: Some(false), ..meta.clone() },
            QueueMeta { kind: "quorum".into(), ..meta.clone() },
        ] {
            assert_ne!(stored_meta_fingerprint(&change), view_meta_fingerprint(&view), "{change:?}");
        }
    }
}
