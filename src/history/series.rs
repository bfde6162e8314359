//! Chart series at the resolution that fits the range: raw samples for short ranges, 1-minute
//! or 1-hour roll-ups for long ones, or a coarser one where the finer window has been pruned.
//!
//! A roll-up series reads stored buckets up to the roll-up's watermark and computes the rest
//! (the last minutes, not rolled up yet) from raw samples with the same code, so the newest
//! point is never missing.

use std::collections::HashMap;

use serde::Serialize;

use super::rollup::{
    broker_buckets, fill_buckets, minutes_from_raw, queue_rows, raw_rows, Acc, Level, QueueRollup, Windows, HOUR_SECS,
    MINUTE_SECS,
};
use super::{BrokerPoint, StoredSample};
use crate::storage::rollups::{MetricSums, BROKER_METRICS};
use crate::storage::Store;

/// What one point of a series stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub enum Resolution {
    /// Raw samples: each point is the value in force at its time.
    #[serde(rename = "raw")]
    Raw,
    /// 1-minute roll-ups: each point aggregates the polls in `[ts, ts + step)`.
    #[serde(rename = "1m")]
    Minute,
    /// 1-hour roll-ups, likewise.
    #[serde(rename = "1h")]
    Hour,
}

impl Resolution {
    pub fn bucket_secs(self) -> i64 {
        match self {
            Resolution::Raw => 1,
            Resolution::Minute => MINUTE_SECS,
            Resolution::Hour => HOUR_SECS,
        }
    }

    /// The step actually used: a whole number of buckets, at least the requested one.
    pub fn step(self, requested: i64) -> i64 {
        let b = self.bucket_secs();
        ((requested.max(1) + b - 1) / b) * b
    }
}

/// The coarsest resolution whose buckets are not longer than `step` (fewer rows to read, no
/// detail lost at that step), made coarser still while its window no longer reaches `from`.
pub fn choose(step: i64, from: i64, now: i64, windows: &Windows) -> Resolution {
    let by_step = if step >= HOUR_SECS {
        Resolution::Hour
    } else if step >= MINUTE_SECS {
        Resolution::Minute
    } else {
        Resolution::Raw
    };
    match by_step {
        Resolution::Raw if from >= now - windows.raw_secs => Resolution::Raw,
        Resolution::Raw | Resolution::Minute if from >= now - windows.minute_secs => Resolution::Minute,
        _ => Resolution::Hour,
    }
}

/// One point of a roll-up series: the aggregates of the polls in `[ts, ts + step)`. Every value is
/// `null` where no poll had it (a gap, or unknown to the broker), never 0.
#[derive(Debug, Clone, Serialize, PartialEq, utoipa::ToSchema)]
pub struct RollupPoint {
    #[serde(flatten, serialize_with = "crate::times::ts")]
    #[schema(schema_with = crate::times::schema::ts)]
    pub ts: i64,
    /// Polls with values for this queue in the step.
    pub samples: i64,
    /// `samples` against the polls the step should have had at the configured interval (0 to 1):
    /// below 1 the step is only partly covered (broker unreachable, queue new or deleted).
    pub coverage: f64,
    /// Averages, like the raw series' fields, so charts read both the same way.
    pub ready: Option<f64>,
    pub ready_min: Option<i64>,
    pub ready_max: Option<i64>,
    pub ready_last: Option<i64>,
    pub unacked: Option<f64>,
    pub unacked_min: Option<i64>,
    pub unacked_max: Option<i64>,
    pub unacked_last: Option<i64>,
    pub consumers: Option<f64>,
    pub consumers_min: Option<i64>,
    pub consumers_max: Option<i64>,
    pub consumers_last: Option<i64>,
    pub publish_rate: Option<f64>,
    pub publish_rate_max: Option<f64>,
    pub deliver_rate: Option<f64>,
    pub deliver_rate_max: Option<f64>,
    pub ack_rate: Option<f64>,
    pub ack_rate_max: Option<f64>,
    pub redeliver_rate: Option<f64>,
    pub redeliver_rate_max: Option<f64>,
    /// The greatest oldest-message age in the step.
    pub oldest_age_secs: Option<f64>,
    pub oldest_age_estimated: bool,
}

fn milli(v: Option<i64>) -> Option<f64> {
    v.map(|m| m as f64 / 1000.0)
}

impl RollupPoint {
    fn new(ts: i64, r: &QueueRollup, coverage: f64) -> RollupPoint {
        let seen = r.samples > 0;
        let last = |v: Option<i64>| v.filter(|_| seen);
        RollupPoint {
            ts,
            samples: r.samples,
            coverage,
            ready: milli(r.ready.avg_m),
            ready_min: r.ready.min,
            ready_max: r.ready.max,
            ready_last: last(r.last.ready),
            unacked: milli(r.unacked.avg_m),
            unacked_min: r.unacked.min,
            unacked_max: r.unacked.max,
            unacked_last: last(r.last.unacked),
            consumers: milli(r.consumers.avg_m),
            consumers_min: r.consumers.min,
            consumers_max: r.consumers.max,
            consumers_last: last(r.last.consumers),
            publish_rate: milli(r.publish_rate.avg_m),
            publish_rate_max: milli(r.publish_rate.max_m),
            deliver_rate: milli(r.deliver_rate.avg_m),
            deliver_rate_max: milli(r.deliver_rate.max_m),
            ack_rate: milli(r.ack_rate.avg_m),
            ack_rate_max: milli(r.ack_rate.max_m),
            redeliver_rate: milli(r.redeliver_rate.avg_m),
            redeliver_rate_max: milli(r.redeliver_rate.max_m),
            oldest_age_secs: r.age_max_secs.map(|a| a as f64),
            oldest_age_estimated: seen && r.last.head_ts.is_none() && r.last.est_oldest_ts.is_some(),
        }
    }
}

fn level_of(resolution: Resolution) -> Level {
    match resolution {
        Resolution::Hour => Level::Hour,
        _ => Level::Minute,
    }
}

/// Where stored roll-ups end and computing from finer data begins: (end of stored `level`
/// buckets, end of stored minutes), both within `[start, end]`.
async fn regions(store: &Store, broker_id: i64, level: Level, start: i64, end: i64) -> Result<(i64, i64), sqlx::Error> {
    let minute_done = store.rolled_up_until(broker_id, Level::Minute).await?.unwrap_or(start).clamp(start, end);
    let level_done = match level {
        Level::Minute => minute_done,
        Level::Hour => store.rolled_up_until(broker_id, Level::Hour).await?.unwrap_or(start).clamp(start, minute_done),
    };
    Ok((level_done, minute_done))
}

/// A queue's roll-up series over `[from, to]` in points of `step` seconds (a multiple of the
/// resolution's bucket), aligned to multiples of `step`.
#[allow(clippy::too_many_arguments)]
pub async fn queue_series(
    store: &Store,
    broker_id: i64,
    queue_id: i64,
    deleted_at: Option<i64>,
    resolution: Resolution,
    from: i64,
    to: i64,
    step: i64,
    poll_interval_secs: i64,
) -> Result<Vec<RollupPoint>, sqlx::Error> {
    let level = level_of(resolution);
    let start = from.div_euclid(step) * step;
    let end = (to + MINUTE_SECS).div_euclid(MINUTE_SECS) * MINUTE_SECS;
    let (level_done, minute_done) = regions(store, broker_id, level, start, end).await?;

    let mut cells: Vec<(i64, QueueRollup)> = Vec::new();
    if level_done > start {
        let (prev, stored) = queue_rows(store, queue_id, level, start, level_done).await?;
        let broker = broker_buckets(store, broker_id, level, start, level_done).await?;
        cells.extend(fill_buckets(start, level_done, level.secs(), prev.unwrap_or_default(), &stored, &broker));
    }
    if minute_done > level_done {
        let (prev, stored) = queue_rows(store, queue_id, Level::Minute, level_done, minute_done).await?;
        let broker = broker_buckets(store, broker_id, Level::Minute, level_done, minute_done).await?;
        cells.extend(fill_buckets(level_done, minute_done, MINUTE_SECS, prev.unwrap_or_default(), &stored, &broker));
    }
    if end > minute_done {
        let (prev, rows) = raw_rows(store, queue_id, minute_done, end).await?;
        let polls = store.polls_between(broker_id, minute_done, end).await?;
        cells.extend(minutes_from_raw(minute_done, end, prev, &rows, &polls));
    }
    // Older history may lack the row written at a deletion; the queue's own record still says.
    if let Some(deleted) = deleted_at {
        cells.retain(|(bucket, _)| *bucket < deleted);
    }
    Ok(points_of(&cells, start, to, step, poll_interval_secs))
}

fn points_of(
    cells: &[(i64, QueueRollup)],
    start: i64,
    to: i64,
    step: i64,
    poll_interval_secs: i64,
) -> Vec<RollupPoint> {
    let mut points = Vec::new();
    let mut i = 0;
    let mut t = start;
    while t <= to {
        let mut acc = Acc::starting_with(StoredSample::default());
        while i < cells.len() && cells[i].0 < t + step {
            if cells[i].0 >= t {
                acc.merge(&cells[i].1);
            }
            i += 1;
        }
        // The newest step is still running: coverage is against the part that has passed.
        let span = ((t + step).min(to + 1) - t).max(1);
        let expected = (span as f64 / poll_interval_secs.max(1) as f64).max(1.0);
        let coverage = (acc.samples() as f64 / expected).min(1.0);
        points.push(RollupPoint::new(t, &acc.finish(), (coverage * 1000.0).round() / 1000.0));
        // Checked, so that no range can make this loop run forever.
        match t.checked_add(step) {
            Some(next) => t = next,
            None => break,
        }
    }
    points
}

/// Sums and counts per point of each broker metric.
type BrokerSums = HashMap<i64, MetricSums>;

/// Adds a part of the range, read by the backend as (point, sums) rows, to the sums.
fn add_sums(sums: &mut BrokerSums, rows: Vec<(i64, MetricSums)>) {
    for (point, row) in rows {
        let entry = sums.entry(point).or_insert([(0.0, 0.0); BROKER_METRICS]);
        for ((sum, count), (row_sum, row_count)) in entry.iter_mut().zip(row) {
            *sum += row_sum;
            *count += row_count;
        }
    }
}

/// A broker's series over `[from, to]` from its roll-ups (and raw polls for the part not rolled
/// up yet): averages per step of `step` seconds, aligned to multiples of `step`; a step without
/// a successful poll is a gap.
pub async fn broker_series(
    store: &Store,
    broker_id: i64,
    resolution: Resolution,
    from: i64,
    to: i64,
    step: i64,
) -> Result<Vec<BrokerPoint>, sqlx::Error> {
    let level = level_of(resolution);
    let start = from.div_euclid(step) * step;
    let end = to + 1;
    let (level_done, minute_done) = regions(store, broker_id, level, start, end).await?;
    let mut sums = BrokerSums::new();
    // Stored buckets up to their watermark, then stored minutes, then the raw polls not rolled
    // up yet; an empty part reads nothing.
    if level_done > start {
        add_sums(&mut sums, store.broker_rollup_sums(broker_id, level, (start, level_done), start, step).await?);
    }
    if minute_done > level_done {
        let minutes = (level_done, minute_done);
        add_sums(&mut sums, store.broker_rollup_sums(broker_id, Level::Minute, minutes, start, step).await?);
    }
    if end > minute_done {
        add_sums(&mut sums, store.broker_poll_sums(broker_id, (minute_done, end), start, step).await?);
    }

    let mut points = Vec::new();
    let mut p = 0;
    while start + p * step <= to {
        let avg = |i: usize| sums.get(&p).and_then(|s| (s[i].1 > 0.0).then(|| s[i].0 / s[i].1));
        let rate = |i: usize| avg(i).map(|m| m.round() / 1000.0);
        points.push(BrokerPoint {
            ts: start + p * step,
            ready: avg(0).map(|v| v.round() as i64),
            unacked: avg(1).map(|v| v.round() as i64),
            publish_rate: rate(2),
            confirm_rate: rate(3),
            ack_rate: rate(4),
            deliver_rate: rate(5),
            redeliver_rate: rate(6),
            unroutable_rate: rate(7),
            poll_ms: avg(8).map(|v| v.round() as i64),
        });
        p += 1;
    }
    Ok(points)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolution_fits_the_step_and_the_window_that_still_has_data() {
        let w = Windows { raw_secs: 48 * 3600, minute_secs: 7 * 86_400, hour_secs: 30 * 86_400 };
        let now = 100 * 86_400;
        // The ranges the pages offer, with the step the API gives them (at most 720 points).
        assert_eq!(choose(10, now - 3600, now, &w), Resolution::Raw);
        assert_eq!(choose(30, now - 6 * 3600, now, &w), Resolution::Raw);
        assert_eq!(choose(120, now - 86_400, now, &w), Resolution::Minute);
        assert_eq!(choose(840, now - 7 * 86_400, now, &w), Resolution::Minute);
        assert_eq!(choose(3600, now - 30 * 86_400, now, &w), Resolution::Hour);
        // An hour three days ago: raw samples are pruned by then, minutes are not.
        assert_eq!(choose(10, now - 3 * 86_400, now, &w), Resolution::Minute);
        // Ten days ago only hours are left.
        assert_eq!(choose(10, now - 10 * 86_400, now, &w), Resolution::Hour);
        assert_eq!(Resolution::Minute.step(840), 840);
        assert_eq!(Resolution::Minute.step(100), 120);
        assert_eq!(Resolution::Hour.step(10), 3600);
        assert_eq!(Resolution::Raw.step(10), 10);
    }

    #[test]
    fn points_merge_cells_and_report_coverage() {
        let s = StoredSample { ready: Some(4), unacked: Some(0), ..StoredSample::default() };
        let full = super::super::rollup::held(s, 6, 50);
        let half = super::super::rollup::held(s, 3, 170);
        let cells = vec![(0, full), (60, full), (120, half)];
        let points = points_of(&cells, 0, 239, 120, 10);
        assert_eq!(points.len(), 2);
        assert_eq!((points[0].samples, points[0].coverage), (12, 1.0));
        assert_eq!((points[1].samples, points[1].coverage), (3, 0.25));
        assert_eq!(points[1].ready, Some(4.0));
        let empty = points_of(&[], 0, 119, 120, 10);
        assert_eq!((empty[0].samples, empty[0].ready, empty[0].ready_last), (0, None, None), "a gap, not 0");
    }
}
