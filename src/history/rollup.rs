//! Roll-ups of the history into 1-minute and 1-hour buckets (migration 0007), so long ranges
//! read few rows and raw samples can be pruned after a short window.
//!
//! The aggregates are over the broker's successful polls: at each poll a queue's value is the one
//! in force (its latest `queue_samples` row). This keeps the change-only meaning of the raw table
//! (a value holds until the next row) and never carries a value across a gap where the broker
//! was not polled, because a gap has no polls. Minutes are computed from raw samples, hours from
//! minutes. Rows are change-only too: a queue's bucket is stored only when it differs from
//! [`held`] (the previous bucket's last values, one sample per poll), so idle queues cost none.
//!
//! The step is incremental and idempotent: each broker and resolution has a watermark in
//! `rollup_progress`, written in the same transaction as the rows it covers; a row replaces any of
//! the same bucket, so redoing a bucket after a crash gives the same rows.
//!
//! What is computed here is the same on every backend; the reads and the writes are
//! [`crate::storage::Rollups`]'s.

use std::collections::HashMap;

use tokio_util::sync::CancellationToken;

use super::StoredSample;
use crate::storage::rollups::Cutoffs;
pub use crate::storage::rollups::{Gauge, Level, QueueRollup, Rate, HOUR_SECS, MINUTE_SECS};
use crate::storage::Store;

/// A bucket is rolled up once its end is this far in the past: a poll stamps its rows with the
/// time it started and commits them when it ends (pages of queues, up to the request timeout).
pub const GRACE_SECS: i64 = 120;
/// Raw samples are read an hour at a time (a busy queue has 360 rows in an hour at 10 s).
const MINUTES_PER_STEP: i64 = 60;

/// The oldest-message age at `ts` for a stored sample, as the raw history computes it: 0 for a
/// queue known to be empty, else from the head timestamp or warren's estimate.
pub fn age_at(ts: i64, s: &StoredSample) -> Option<i64> {
    match (s.ready.zip(s.unacked), s.head_ts.or(s.est_oldest_ts)) {
        (Some((0, 0)), _) => Some(0),
        (_, Some(oldest)) => Some((ts - oldest).max(0)),
        _ => None,
    }
}

#[derive(Default)]
struct GaugeAcc {
    min: Option<i64>,
    max: Option<i64>,
    sum_m: i64,
    weight: i64,
}

impl GaugeAcc {
    fn add(&mut self, g: Gauge, weight: i64) {
        self.min = min_opt(self.min, g.min);
        self.max = max_opt(self.max, g.max);
        if let Some(avg) = g.avg_m {
            self.sum_m += avg * weight;
            self.weight += weight;
        }
    }
    fn finish(&self) -> Gauge {
        Gauge { min: self.min, max: self.max, avg_m: average(self.sum_m, self.weight) }
    }
}

#[derive(Default)]
struct RateAcc {
    max_m: Option<i64>,
    sum_m: i64,
    weight: i64,
}

impl RateAcc {
    fn add(&mut self, r: Rate, weight: i64) {
        self.max_m = max_opt(self.max_m, r.max_m);
        if let Some(avg) = r.avg_m {
            self.sum_m += avg * weight;
            self.weight += weight;
        }
    }
    fn finish(&self) -> Rate {
        Rate { avg_m: average(self.sum_m, self.weight), max_m: self.max_m }
    }
}

fn min_opt(a: Option<i64>, b: Option<i64>) -> Option<i64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

fn max_opt(a: Option<i64>, b: Option<i64>) -> Option<i64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    }
}

fn average(sum: i64, weight: i64) -> Option<i64> {
    (weight > 0).then(|| (sum as f64 / weight as f64).round() as i64)
}

fn gauge_of(v: Option<i64>) -> Gauge {
    Gauge { min: v, max: v, avg_m: v.map(|v| v * 1000) }
}

fn rate_of(v_m: Option<i64>) -> Rate {
    Rate { avg_m: v_m, max_m: v_m }
}

/// Accumulates observations (polls) or finer buckets into one bucket.
#[derive(Default)]
pub struct Acc {
    samples: i64,
    ready: GaugeAcc,
    unacked: GaugeAcc,
    consumers: GaugeAcc,
    rates: [RateAcc; 4],
    age_max_secs: Option<i64>,
    last: StoredSample,
}

impl Acc {
    /// Starts a bucket whose value in force at its start is `prev`.
    pub fn starting_with(prev: StoredSample) -> Acc {
        Acc { last: prev, ..Acc::default() }
    }

    /// `polls` polls at which `s` was in force, the latest at `last_poll_ts`. A sample with no
    /// value at all (the row written when a queue disappears) is not an observation.
    pub fn observe(&mut self, s: &StoredSample, polls: i64, last_poll_ts: i64) {
        self.last = *s;
        if polls == 0 || *s == StoredSample::default() {
            return;
        }
        self.merge(&QueueRollup {
            samples: polls,
            ready: gauge_of(s.ready),
            unacked: gauge_of(s.unacked),
            consumers: gauge_of(s.consumers),
            publish_rate: rate_of(s.publish_rate_m),
            deliver_rate: rate_of(s.deliver_rate_m),
            ack_rate: rate_of(s.ack_rate_m),
            redeliver_rate: rate_of(s.redeliver_rate_m),
            // A held value's age grows with time, so its maximum is at the latest poll.
            age_max_secs: age_at(last_poll_ts, s),
            last: *s,
        });
    }

    /// Adds a finer (or equal) bucket that follows the ones added before.
    pub fn merge(&mut self, r: &QueueRollup) {
        self.last = r.last;
        if r.samples == 0 {
            return;
        }
        self.samples += r.samples;
        self.ready.add(r.ready, r.samples);
        self.unacked.add(r.unacked, r.samples);
        self.consumers.add(r.consumers, r.samples);
        for (acc, rate) in self.rates.iter_mut().zip([r.publish_rate, r.deliver_rate, r.ack_rate, r.redeliver_rate]) {
            acc.add(rate, r.samples);
        }
        self.age_max_secs = max_opt(self.age_max_secs, r.age_max_secs);
    }

    pub fn samples(&self) -> i64 {
        self.samples
    }

    pub fn finish(&self) -> QueueRollup {
        QueueRollup {
            samples: self.samples,
            ready: self.ready.finish(),
            unacked: self.unacked.finish(),
            consumers: self.consumers.finish(),
            publish_rate: self.rates[0].finish(),
            deliver_rate: self.rates[1].finish(),
            ack_rate: self.rates[2].finish(),
            redeliver_rate: self.rates[3].finish(),
            age_max_secs: self.age_max_secs,
            last: self.last,
        }
    }
}

/// What a bucket without a stored row holds: `prev` in force at each of the broker's `polls`
/// polls in it. The writer stores a row only when the real aggregate differs from this, and the
/// readers fill missing buckets with it, so both use this one function.
pub fn held(prev: StoredSample, polls: i64, last_poll_ts: i64) -> QueueRollup {
    let mut acc = Acc::starting_with(prev);
    acc.observe(&prev, polls, last_poll_ts);
    acc.finish()
}

/// A queue's minute buckets over `[start, end)` from raw samples: `prev` is the latest sample
/// before `start` (if any), `rows` the samples in `[start, end)` ascending, `polls` the broker's
/// successful polls in `[start, end)` ascending. Returns (bucket start, aggregate) for every
/// minute, with `prev` and `rows` deciding the value in force at each poll.
pub fn minutes_from_raw(
    start: i64,
    end: i64,
    prev: Option<StoredSample>,
    rows: &[(i64, StoredSample)],
    polls: &[i64],
) -> Vec<(i64, QueueRollup)> {
    let mut out = Vec::with_capacity(((end - start) / MINUTE_SECS) as usize);
    let mut current = prev.unwrap_or_default();
    let (mut r, mut p) = (0, 0);
    let mut bucket = start;
    while bucket < end {
        let bucket_end = bucket + MINUTE_SECS;
        let mut acc = Acc::starting_with(current);
        while p < polls.len() && polls[p] < bucket_end {
            let poll = polls[p];
            while r < rows.len() && rows[r].0 <= poll {
                current = rows[r].1;
                r += 1;
            }
            acc.observe(&current, 1, poll);
            p += 1;
        }
        while r < rows.len() && rows[r].0 < bucket_end {
            current = rows[r].1;
            r += 1;
        }
        acc.last = current;
        out.push((bucket, acc.finish()));
        bucket = bucket_end;
    }
    out
}

/// A broker's poll count and last poll time in each bucket (buckets without a poll are absent).
pub type BucketPollss = HashMap<i64, (i64, i64)>;

/// Fills `[start, end)` in steps of `bucket_secs` from stored rows and, where a bucket has no
/// row, [`held`] of the value carried from before (`prev`). Buckets without a broker poll and no
/// row are gaps and are left out.
pub fn fill_buckets(
    start: i64,
    end: i64,
    bucket_secs: i64,
    mut prev: StoredSample,
    stored: &HashMap<i64, QueueRollup>,
    broker: &BucketPollss,
) -> Vec<(i64, QueueRollup)> {
    let mut out = Vec::new();
    let mut bucket = start;
    while bucket < end {
        let cell = match (stored.get(&bucket), broker.get(&bucket)) {
            (Some(row), _) => Some(*row),
            (None, Some(&(polls, last_ts))) => Some(held(prev, polls, last_ts)),
            (None, None) => None,
        };
        if let Some(cell) = cell {
            prev = cell.last;
            out.push((bucket, cell));
        }
        bucket += bucket_secs;
    }
    out
}

/// The broker's stored buckets at `level` in `[from, to)`.
pub async fn broker_buckets(
    store: &Store,
    broker_id: i64,
    level: Level,
    from: i64,
    to: i64,
) -> Result<BucketPollss, sqlx::Error> {
    let rows = store.bucket_polls(broker_id, level, from, to).await?;
    Ok(rows.into_iter().map(|b| (b.bucket, (b.polls, b.last_poll_ts))).collect())
}

/// Rows read from a queue's latest row before `from` on: that row's value (the one in force
/// when the range starts), and the rows from `from` on.
fn in_force_and_after<T: Copy>(rows: Vec<(i64, T)>, from: i64) -> (Option<T>, Vec<(i64, T)>) {
    let prev = rows.iter().take_while(|(at, _)| *at < from).last().map(|(_, value)| *value);
    (prev, rows.into_iter().filter(|(at, _)| *at >= from).collect())
}

/// One queue's stored rows at `level` in `[from, to)`, and the last values of its latest row
/// before `from` (the value in force when the range starts).
pub async fn queue_rows(
    store: &Store,
    queue_id: i64,
    level: Level,
    from: i64,
    to: i64,
) -> Result<(Option<StoredSample>, HashMap<i64, QueueRollup>), sqlx::Error> {
    let (prev, rows) = in_force_and_after(store.queue_rollups(queue_id, level, from, to).await?, from);
    Ok((prev.map(|r| r.last), rows.into_iter().collect()))
}

/// One queue's raw samples in `[from, to)`, and its latest sample before `from`.
pub async fn raw_rows(
    store: &Store,
    queue_id: i64,
    from: i64,
    to: i64,
) -> Result<(Option<StoredSample>, Vec<(i64, StoredSample)>), sqlx::Error> {
    Ok(in_force_and_after(store.queue_samples_from(queue_id, from, to).await?, from))
}

/// Rolls up every complete bucket of one broker: minutes from raw samples up to `now` minus
/// [`GRACE_SECS`], then hours from minutes. Stops early (between transactions) when `cancel`
/// fires. Returns the number of buckets rolled up.
pub async fn roll_up(store: &Store, broker_id: i64, now: i64, cancel: &CancellationToken) -> Result<u64, sqlx::Error> {
    let mut done = 0;
    let minute_limit = (now - GRACE_SECS).div_euclid(MINUTE_SECS) * MINUTE_SECS;
    let mut minute_wm = match store.rolled_up_until(broker_id, Level::Minute).await? {
        Some(wm) => wm,
        // First run (or first data): start at the oldest poll, so existing history is rolled
        // up too.
        None => match store.oldest_poll(broker_id).await? {
            Some(ts) => ts.div_euclid(MINUTE_SECS) * MINUTE_SECS,
            None => return Ok(0),
        },
    };
    while minute_wm < minute_limit && !cancel.is_cancelled() {
        let end = (minute_wm + MINUTES_PER_STEP * MINUTE_SECS).min(minute_limit);
        roll_up_minutes(store, broker_id, minute_wm, end).await?;
        done += ((end - minute_wm) / MINUTE_SECS) as u64;
        minute_wm = end;
    }

    let hour_limit = minute_wm.div_euclid(HOUR_SECS) * HOUR_SECS;
    let mut hour_wm = match store.rolled_up_until(broker_id, Level::Hour).await? {
        Some(wm) => wm,
        None => match store.oldest_minute(broker_id).await? {
            Some(ts) => ts.div_euclid(HOUR_SECS) * HOUR_SECS,
            None => return Ok(done),
        },
    };
    while hour_wm < hour_limit && !cancel.is_cancelled() {
        roll_up_hour(store, broker_id, hour_wm).await?;
        done += 1;
        hour_wm += HOUR_SECS;
    }
    Ok(done)
}

/// Minutes `[start, end)` of one broker from raw samples, written in one transaction.
async fn roll_up_minutes(store: &Store, broker_id: i64, start: i64, end: i64) -> Result<(), sqlx::Error> {
    let polls = store.polls_between(broker_id, start, end).await?;
    let mut by_queue: HashMap<i64, Vec<(i64, StoredSample)>> = HashMap::new();
    for (queue_id, ts, sample) in store.broker_queue_samples(broker_id, start, end).await? {
        by_queue.entry(queue_id).or_default().push((ts, sample));
    }
    // Queues without rows in the range held their value at every poll: they match `held` and
    // need no row, so only queues with rows are computed.
    let ids: Vec<i64> = by_queue.keys().copied().collect();
    let mut prev: HashMap<i64, StoredSample> = store.samples_in_force(&ids, start).await?.into_iter().collect();
    let mut broker: BucketPollss = HashMap::new();
    for &poll in &polls {
        let entry = broker.entry(poll.div_euclid(MINUTE_SECS) * MINUTE_SECS).or_insert((0, poll));
        entry.0 += 1;
        entry.1 = poll;
    }
    let mut rows = Vec::new();
    for (queue_id, samples) in &by_queue {
        let queue_prev = prev.remove(queue_id);
        let mut carried = queue_prev.unwrap_or_default();
        for (bucket, rollup) in minutes_from_raw(start, end, queue_prev, samples, &polls) {
            let (n, last_ts) = broker.get(&bucket).copied().unwrap_or((0, bucket));
            if rollup != held(carried, n, last_ts) {
                rows.push((*queue_id, bucket, rollup));
            }
            carried = rollup.last;
        }
    }
    store.save_rollups(broker_id, Level::Minute, start, end, &rows).await
}

/// The hour starting at `start` of one broker, from its minute roll-ups, written in one
/// transaction.
async fn roll_up_hour(store: &Store, broker_id: i64, start: i64) -> Result<(), sqlx::Error> {
    let end = start + HOUR_SECS;
    let minutes = broker_buckets(store, broker_id, Level::Minute, start, end).await?;
    let mut by_queue: HashMap<i64, HashMap<i64, QueueRollup>> = HashMap::new();
    for (queue_id, bucket, rollup) in store.broker_queue_minutes(broker_id, start, end).await? {
        by_queue.entry(queue_id).or_default().insert(bucket, rollup);
    }
    // The value in force at the start of the hour: the last values of each queue's latest minute
    // row before it (queues without minute rows in the hour held it throughout).
    let ids: Vec<i64> = by_queue.keys().copied().collect();
    let prev: HashMap<i64, StoredSample> = store.minutes_in_force(broker_id, &ids, start).await?.into_iter().collect();
    let polls: i64 = minutes.values().map(|(n, _)| n).sum();
    let last_poll = minutes.values().map(|(_, last)| *last).max().unwrap_or(start);
    let mut rows = Vec::new();
    for (queue_id, stored) in &by_queue {
        let carried = prev.get(queue_id).copied().unwrap_or_default();
        let mut acc = Acc::starting_with(carried);
        for (_, cell) in fill_buckets(start, end, MINUTE_SECS, carried, stored, &minutes) {
            acc.merge(&cell);
        }
        let rollup = acc.finish();
        if rollup != held(carried, polls, last_poll) {
            rows.push((*queue_id, start, rollup));
        }
    }
    store.save_rollups(broker_id, Level::Hour, start, end, &rows).await
}

/// How long each resolution is kept, in seconds.
#[derive(Debug, Clone, Copy)]
pub struct Windows {
    pub raw_secs: i64,
    pub minute_secs: i64,
    pub hour_secs: i64,
}

impl Windows {
    pub fn from_config(config: &crate::config::Config) -> Windows {
        Windows {
            raw_secs: config.raw_retention.as_secs() as i64,
            minute_secs: config.minute_retention.as_secs() as i64,
            hour_secs: config.retention.as_secs() as i64,
        }
    }
}

/// Deletes what fell out of its window: raw samples (and broker polls) older than the raw
/// window, minute rows older than theirs, hour rows older than the retention. Nothing is deleted
/// that is not rolled up yet, and each queue keeps its latest roll-up row before a cutoff, the
/// value still in force for a queue idle since. Returns the rows deleted.
///
/// First it makes the storage of the coming days ready (PostgreSQL's day partitions, which
/// retention then drops whole): this runs every hour, and each day is made days ahead.
pub async fn prune(store: &Store, now: i64, windows: Windows, broker_ids: &[i64]) -> Result<u64, sqlx::Error> {
    // Not a reason to skip the pruning: until a later run makes them, writes for those days go
    // to the default partition, and nothing is lost.
    if let Err(e) = store.prepare_partitions(now).await {
        tracing::warn!(error = %e, "making the coming days' partitions failed; will retry");
    }
    // Raw samples feed the minute roll-up, and the hour roll-up reads broker polls: keep them
    // until both are done, plus an hour so the value in force (an hourly keyframe) is still there.
    let mut hour_done = i64::MAX;
    let mut minute_done = i64::MAX;
    for &id in broker_ids {
        hour_done = hour_done.min(store.rolled_up_until(id, Level::Hour).await?.unwrap_or(i64::MIN));
        minute_done = minute_done.min(store.rolled_up_until(id, Level::Minute).await?.unwrap_or(i64::MIN));
    }
    let raw_cutoff = (now - windows.raw_secs).min(hour_done.saturating_sub(HOUR_SECS));
    let minute_cutoff = (now - windows.minute_secs).min(hour_done).min(minute_done);
    let hour_cutoff = now - windows.hour_secs;
    let removed = super::prune(store, raw_cutoff).await?;
    Ok(removed + store.prune_rollups(Cutoffs { minute: minute_cutoff, hour: hour_cutoff }).await?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(ready: i64, rate_m: Option<i64>) -> StoredSample {
        StoredSample {
            ready: Some(ready),
            unacked: Some(0),
            consumers: Some(1),
            publish_rate_m: rate_m,
            ..StoredSample::default()
        }
    }

    #[test]
    fn a_minute_aggregates_the_value_in_force_at_each_poll() {
        // Polls every 10 s; rows only when the value changed: 4 at 0, 10 at 20, 7 at 50.
        let polls = [0, 10, 20, 30, 40, 50];
        let rows = [(0, sample(4, Some(1000))), (20, sample(10, Some(3000))), (50, sample(7, None))];
        let minutes = minutes_from_raw(0, 60, None, &rows, &polls);
        assert_eq!(minutes.len(), 1);
        let m = minutes[0].1;
        assert_eq!(m.samples, 6);
        assert_eq!((m.ready.min, m.ready.max), (Some(4), Some(10)));
        // 4, 4, 10, 10, 10, 7: the held value counts at every poll, not once per row.
        assert_eq!(m.ready.avg_m, Some(7500));
        assert_eq!(m.last.ready, Some(7));
        // The rate is unknown at the last poll: averaged over the 5 polls that knew it.
        assert_eq!(m.publish_rate.avg_m, Some((2 * 1000 + 3 * 3000) / 5));
        assert_eq!(m.publish_rate.max_m, Some(3000));
    }

    #[test]
    fn no_poll_no_sample_and_unknown_stays_unknown() {
        // The broker was unreachable from 10 to 50: only the polls at 0 and 50 count, and the
        // value does not hold across the gap as data.
        let polls = [0, 50];
        let rows = [(0, StoredSample { ready: None, unacked: None, ..sample(0, None) })];
        let m = minutes_from_raw(0, 60, None, &rows, &polls)[0].1;
        assert_eq!(m.samples, 2);
        assert_eq!(m.ready, Gauge::default(), "unknown depth is not 0");
        assert_eq!(m.consumers.avg_m, Some(1000));
        assert_eq!(m.age_max_secs, None);
        // A minute without any poll has no samples: a gap.
        let gap = minutes_from_raw(60, 120, Some(sample(3, None)), &[], &[])[0].1;
        assert_eq!(gap.samples, 0);
        assert_eq!(gap.ready.avg_m, None);
        assert_eq!(gap.last.ready, Some(3), "the value in force is still carried");
    }

    #[test]
    fn a_deleted_queue_stops_counting() {
        // The poller writes an all-unknown row when a queue disappears.
        let polls = [0, 10, 20, 30];
        let rows = [(0, sample(5, None)), (20, StoredSample::default())];
        let m = minutes_from_raw(0, 60, None, &rows, &polls)[0].1;
        assert_eq!(m.samples, 2);
        assert_eq!(m.last, StoredSample::default());
        assert_eq!(held(m.last, 6, 50).samples, 0, "nothing is held after the deletion");
    }

    #[test]
    fn a_held_bucket_equals_the_one_computed_from_raw() {
        // What the writer leaves out must be exactly what readers derive.
        let s = StoredSample { head_ts: Some(-100), ..sample(9, Some(250)) };
        let polls = [600, 610, 620, 630, 640, 650];
        let computed = minutes_from_raw(600, 660, Some(s), &[(630, s)], &polls)[0].1;
        assert_eq!(computed, held(s, 6, 650));
        assert_eq!(computed.age_max_secs, Some(750), "age at the last poll");
        // And an hour of such minutes merges into the held hour.
        let mut acc = Acc::starting_with(s);
        for m in 0..60 {
            acc.merge(&held(s, 6, m * 60 + 50));
        }
        assert_eq!(acc.finish(), held(s, 360, 59 * 60 + 50));
    }

    #[test]
    fn hours_merge_minutes_weighted_by_samples() {
        let a = minutes_from_raw(0, 60, None, &[(0, sample(2, Some(1000)))], &[0, 10, 20, 30, 40, 50])[0].1;
        let b = minutes_from_raw(60, 120, Some(sample(2, None)), &[(60, sample(8, Some(4000)))], &[60, 70])[0].1;
        let mut acc = Acc::default();
        acc.merge(&a);
        acc.merge(&b);
        let h = acc.finish();
        assert_eq!(h.samples, 8);
        assert_eq!(h.ready.avg_m, Some((6 * 2000 + 2 * 8000) / 8));
        assert_eq!((h.ready.min, h.ready.max, h.last.ready), (Some(2), Some(8), Some(8)));
        assert_eq!(h.publish_rate.avg_m, Some((6 * 1000 + 2 * 4000) / 8));
    }

    #[test]
    fn fill_buckets_holds_values_only_where_the_broker_was_polled() {
        let s = sample(3, None);
        let mut stored = HashMap::new();
        stored.insert(120, held(sample(6, None), 6, 170));
        let broker: BucketPollss = [(0, (6, 50)), (120, (6, 170)), (180, (6, 230))].into_iter().collect();
        let cells = fill_buckets(0, 240, 60, s, &stored, &broker);
        let buckets: Vec<i64> = cells.iter().map(|c| c.0).collect();
        assert_eq!(buckets, vec![0, 120, 180], "minute 60 had no poll: a gap");
        assert_eq!(cells[0].1.ready.max, Some(3));
        assert_eq!(cells[2].1.ready.max, Some(6), "held from the stored row before it");
    }
}
