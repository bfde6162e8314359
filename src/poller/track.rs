//! What the poller remembers of each queue between polls, and how a poll's raw answer becomes
//! views (numbers, rates, health) and the rows to write.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};

use crate::history::{KnownQueue, PollWrite, QueueMeta, StoredSample};
use crate::management::RawQueue;
use crate::metrics::{self, rate_to_milli, CounterWindow, Estimate, QueueCounters, QueueRates, QueueView};

/// A queue's rows are rewritten at least this often even when nothing changed, so that a reader
/// never has to look further back than this for the value in force.
pub const KEYFRAME_SECS: i64 = 3600;

/// How long rates stay unknown after a queue was re-created (its counters went backwards or it
/// came back after being gone). Measured on 3.10: a channel that keeps publishing to the name
/// reports its cumulative per-queue count again at its next stats emission (every 5 s), so the
/// new queue's counter first drops, then jumps back up by everything published to the old
/// queue. Three stats intervals absorb that jump into the baseline instead of showing a spike.
const SETTLE: Duration = Duration::from_secs(15);

pub type QueueKey = (String, String);

/// What the poller remembers of a queue.
pub struct Tracked {
    pub id: Option<i64>,
    pub meta: QueueMeta,
    pub deleted: bool,
    pub last_written: Option<(i64, StoredSample)>,
    /// Recent counter readings, for rates.
    pub counters: CounterWindow<QueueCounters>,
    /// After a re-creation, rates stay unknown until this time.
    pub settle_until: Option<Instant>,
    /// Since when (and over how many polls) unacked messages were held with no ack.
    pub no_ack_since: Option<(Instant, u32)>,
    /// Unix time from which this queue's stored history belongs to its current incarnation
    /// (0: all of it, as far as warren knows).
    pub incarnation_since: i64,
    /// (publish counter − total) of the last estimate and its result.
    pub estimate: Option<(i64, Estimate)>,
    /// The last poll (by number) that listed this queue.
    pub seen_poll: u64,
    /// The latest counters that were known (a re-created quorum queue has none for seconds).
    pub last_known: Option<QueueCounters>,
    /// Consecutive complete polls that did not list this queue.
    pub missing_polls: u32,
    /// Rates of the last poll with fresh counters, shown until the next one (the message stats
    /// listing runs at a slower cadence than depth polls).
    pub rates: QueueRates,
}

impl Tracked {
    pub fn from_known(k: KnownQueue) -> (QueueKey, Tracked) {
        let key = (k.meta.vhost.clone(), k.meta.name.clone());
        let tracked = Tracked {
            id: Some(k.id),
            meta: k.meta,
            deleted: k.deleted_at.is_some(),
            last_written: k.last_sample,
            counters: CounterWindow::default(),
            settle_until: None,
            no_ack_since: None,
            incarnation_since: 0,
            estimate: None,
            seen_poll: 0,
            last_known: None,
            missing_polls: 0,
            rates: QueueRates::default(),
        };
        (key, tracked)
    }

    fn new(meta: QueueMeta, ts: i64) -> Tracked {
        Tracked {
            id: None,
            meta,
            deleted: false,
            last_written: None,
            counters: CounterWindow::default(),
            settle_until: None,
            no_ack_since: None,
            incarnation_since: ts,
            estimate: None,
            seen_poll: 0,
            last_known: None,
            missing_polls: 0,
            rates: QueueRates::default(),
        }
    }

    /// The queue was re-created: rates settle, and older history is not this queue's.
    fn restart(&mut self, fetched: Instant, ts: i64) {
        self.counters.clear();
        self.last_known = None;
        self.settle_until = Some(fetched + SETTLE);
        self.incarnation_since = ts;
        self.estimate = None;
        self.no_ack_since = None;
        self.rates = QueueRates::default();
    }
}

/// Parameters of one derivation.
pub struct PollContext {
    pub broker: String,
    pub stats_enabled: bool,
    pub now: DateTime<Utc>,
    pub fetched: Instant,
    pub rate_window_secs: f64,
    pub keep_readings_secs: f64,
    /// False when this poll's counters are the previous stats listing's (depth came from the
    /// cheap source): counters are then neither a new reading nor evidence about consumers, and
    /// each queue keeps the rates of the last fresh reading.
    pub counters_fresh: bool,
}

/// What `derive` learned of each view that the write needs, so that planning and committing
/// the write look nothing up again.
pub struct Mark {
    pub id: Option<i64>,
    /// The queue's metadata when it is new, changed, or back after being gone.
    pub meta: Option<QueueMeta>,
    pub last_written: Option<(i64, StoredSample)>,
    pub was_deleted: bool,
}

/// Turns raw queues into views, updating what is remembered per queue (counters, health
/// trackers). Returns the views, a mark per view, and the keys of watched queues that
/// disappeared. `poll` numbers this poll: each tracked queue remembers the last poll it was in.
pub fn derive(
    queues: &mut HashMap<QueueKey, Tracked>,
    raw_queues: &[RawQueue],
    ctx: &PollContext,
    poll: u64,
    watches_vhost: impl Fn(&str) -> bool,
) -> (Vec<QueueView>, Vec<Mark>, Vec<QueueKey>) {
    let ts = ctx.now.timestamp();
    let mut views = Vec::with_capacity(raw_queues.len());
    let mut marks = Vec::with_capacity(raw_queues.len());
    for raw in raw_queues {
        let current = metrics::queue_counters(raw, ctx.stats_enabled);
        let tracked = queues.entry((raw.vhost.clone(), raw.name.clone())).or_insert_with(|| {
            let meta = QueueMeta { vhost: raw.vhost.clone(), name: raw.name.clone(), ..QueueMeta::default() };
            Tracked::new(meta, ts)
        });
        if tracked.seen_poll == poll {
            continue; // a queue created during pagination can shift into the next page twice
        }
        tracked.seen_poll = poll;
        tracked.missing_polls = 0;
        let previous_reading = tracked.counters.latest().copied();
        // Compare with the last counters that were known: a queue re-created under the same name
        // may first show none at all, then its channel's old count again.
        let went_back = ctx.counters_fresh && tracked.last_known.is_some_and(|c| counters_went_back(&c, &current));
        // After a restart of warren: a publish counter below what was stored means the queue (or
        // the node) started again while warren was away; older history is not this queue's.
        let restarted_while_away = ctx.counters_fresh
            && tracked.last_known.is_none()
            && tracked.incarnation_since == 0
            && matches!((current.publish, tracked.last_written.and_then(|(_, s)| s.publish_count)),
                        (Some(now), Some(stored)) if (now as i64) < stored);
        if tracked.deleted || went_back || restarted_while_away {
            tracked.restart(ctx.fetched, ts);
        }
        if current.publish.is_some() {
            tracked.last_known = Some(current);
        }
        let settled = tracked.settle_until.is_none_or(|until| ctx.fetched >= until);
        let baseline = if tracked.deleted || !settled || !ctx.counters_fresh {
            None
        } else {
            tracked.counters.baseline(ctx.fetched, ctx.rate_window_secs)
        };
        let mut view = metrics::queue_view(
            &ctx.broker,
            raw,
            ctx.stats_enabled,
            baseline.as_ref().map(|(c, age)| (c, *age)),
            ctx.now,
        );

        if ctx.counters_fresh {
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
        if ctx.counters_fresh {
            tracked.no_ack_since = match (holding && !acked, tracked.no_ack_since) {
                (false, _) => None,
                (true, Some((since, polls))) => Some((since, polls + 1)),
                (true, None) => Some((ctx.fetched, 1)),
            };
        } else if !holding {
            tracked.no_ack_since = None;
        }
        let no_ack_for =
            tracked.no_ack_since.map(|(since, polls)| (ctx.fetched.duration_since(since).as_secs_f64(), polls));
        metrics::apply_health(&mut view, no_ack_for);

        if ctx.counters_fresh {
            tracked.counters.push(ctx.fetched, current, ctx.keep_readings_secs);
        }
        view.id = tracked.id;
        let meta = queue_meta(&view);
        let changed = tracked.meta != meta || tracked.deleted || tracked.id.is_none();
        marks.push(Mark {
            id: tracked.id,
            meta: changed.then_some(meta),
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
            write.upserts.push(meta.clone());
        }
        let Some(id) = mark.id else {
            write.new_samples.push((write.upserts.len() - 1, sample));
            continue;
        };
        let due = match mark.last_written {
            Some((last_ts, last)) => last != sample || ts - last_ts >= KEYFRAME_SECS,
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
        if let (Some(id), Some(meta)) = (new_id, &mark.meta) {
            t.id = Some(id);
            t.meta = meta.clone();
            t.deleted = false;
            view.id = Some(id);
        }
        if sample_written {
            t.last_written = Some((write.ts, stored_sample(view)));
        }
    }
    for key in gone {
        if let Some(t) = queues.get_mut(key) {
            t.deleted = true;
        }
    }
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
        vhost: view.vhost.clone(),
        name: view.name.clone(),
        kind: view.kind.clone(),
        durable: view.durable,
        arguments: serde_json::Value::Object(view.arguments.clone()).to_string(),
        policy: view.policy.clone(),
        effective_policy: serde_json::Value::Object(view.effective_policy.clone()).to_string(),
    }
}

pub fn stored_sample(view: &QueueView) -> StoredSample {
    let (est_oldest_ts, est_bound) = match view.estimate {
        Some(Estimate::PublishedAt(t)) => (Some(t.round() as i64), None),
        Some(Estimate::OlderThan(t)) => (Some(t), Some(1)),
        _ => (None, None),
    };
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
        est_oldest_ts,
        est_bound,
    }
}
