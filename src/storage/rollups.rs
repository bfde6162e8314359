//! The history's roll-ups as stored: 1-minute and 1-hour buckets per queue
//! (`queue_rollups_1m`/`_1h`, change-only) and per broker (`broker_rollups_1m`/`_1h`), each
//! broker's progress (`rollup_progress`), and the reads the roll-up and the chart series make of
//! the raw samples and polls. What a bucket holds, when a row is needed and how a series is
//! built from them is `history::rollup`'s and `history::series`'s; this is the database's side.

use async_trait::async_trait;
use sqlx::{ColumnIndex, Decode, Row, Type};

use super::samples::{sample_from_row, StoredSample};
use super::Result;

pub const MINUTE_SECS: i64 = 60;
pub const HOUR_SECS: i64 = 3600;

/// Min, max and average of a count (depth, consumers); the average in milli-units.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Gauge {
    pub min: Option<i64>,
    pub max: Option<i64>,
    pub avg_m: Option<i64>,
}

/// Average and maximum of a rate, both in milli-messages per second (as stored raw).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Rate {
    pub avg_m: Option<i64>,
    pub max_m: Option<i64>,
}

/// One queue's aggregates over one bucket (or over several merged ones).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct QueueRollup {
    /// Polls at which the queue had values in force.
    pub samples: i64,
    pub ready: Gauge,
    pub unacked: Gauge,
    pub consumers: Gauge,
    pub publish_rate: Rate,
    pub deliver_rate: Rate,
    pub ack_rate: Rate,
    pub redeliver_rate: Rate,
    /// The oldest message's greatest age at any of those polls.
    pub age_max_secs: Option<i64>,
    /// The values in force at the end of the bucket (carried into the next one).
    pub last: StoredSample,
}

/// The two roll-up resolutions and their tables.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    Minute,
    Hour,
}

impl Level {
    pub fn secs(self) -> i64 {
        match self {
            Level::Minute => MINUTE_SECS,
            Level::Hour => HOUR_SECS,
        }
    }

    /// As `rollup_progress.resolution` keeps it.
    pub fn name(self) -> &'static str {
        match self {
            Level::Minute => "1m",
            Level::Hour => "1h",
        }
    }

    pub(super) fn queue_table(self) -> &'static str {
        match self {
            Level::Minute => "queue_rollups_1m",
            Level::Hour => "queue_rollups_1h",
        }
    }

    pub(super) fn broker_table(self) -> &'static str {
        match self {
            Level::Minute => "broker_rollups_1m",
            Level::Hour => "broker_rollups_1h",
        }
    }
}

/// A broker's stored bucket at a roll-up level: its successful polls in it, and the time of the
/// last one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BucketPolls {
    pub bucket: i64,
    pub polls: i64,
    pub last_poll_ts: i64,
}

/// A queue's bucket to store: (queue id, bucket start, aggregate).
pub type QueueBucket = (i64, i64, QueueRollup);

/// Where retention cuts the roll-ups (unix seconds): rows before these go. Decided by
/// `history::rollup::prune`, which keeps everything not rolled up yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cutoffs {
    pub minute: i64,
    /// Hour rows, and queues deleted before it (their last rows too).
    pub hour: i64,
}

/// The broker metrics a broker series averages, in the order of [`MetricSums`]: ready, unacked,
/// the publish, confirm, ack, deliver, redeliver and unroutable rates (milli), poll_ms.
pub const BROKER_METRICS: usize = 9;

/// Per metric: the sum of its values weighted by polls, and the polls that had it.
pub type MetricSums = [(f64, f64); BROKER_METRICS];

#[async_trait]
pub trait Rollups {
    /// Every bucket of `broker_id` before this is rolled up at `level` (None: nothing yet).
    async fn rolled_up_until(&self, broker_id: i64, level: Level) -> Result<Option<i64>>;
    /// The time of the broker's oldest successful poll still kept.
    async fn oldest_poll(&self, broker_id: i64) -> Result<Option<i64>>;
    /// The start of the broker's oldest stored minute.
    async fn oldest_minute(&self, broker_id: i64) -> Result<Option<i64>>;
    /// Successful poll times of a broker in `[from, to)`, ascending.
    async fn polls_between(&self, broker_id: i64, from: i64, to: i64) -> Result<Vec<i64>>;
    /// The broker's stored buckets at `level` in `[from, to)`.
    async fn bucket_polls(&self, broker_id: i64, level: Level, from: i64, to: i64) -> Result<Vec<BucketPolls>>;
    /// One queue's stored rows at `level` in `[from, to)` by bucket, after its latest row before
    /// `from` if it has one (the value in force when the range starts).
    async fn queue_rollups(&self, queue_id: i64, level: Level, from: i64, to: i64) -> Result<Vec<(i64, QueueRollup)>>;
    /// One queue's raw samples in `[from, to)` by time, after its latest sample before `from` if
    /// it has one.
    async fn queue_samples_from(&self, queue_id: i64, from: i64, to: i64) -> Result<Vec<(i64, StoredSample)>>;
    /// The raw samples of all of a broker's queues in `[from, to)`: (queue id, time, sample),
    /// by queue and time.
    async fn broker_queue_samples(&self, broker_id: i64, from: i64, to: i64) -> Result<Vec<(i64, i64, StoredSample)>>;
    /// The latest raw sample before `before` of each of these queues that has one.
    async fn samples_in_force(&self, queue_ids: &[i64], before: i64) -> Result<Vec<(i64, StoredSample)>>;
    /// The minute rows of all of a broker's queues in `[from, to)`, by queue and bucket.
    async fn broker_queue_minutes(&self, broker_id: i64, from: i64, to: i64) -> Result<Vec<QueueBucket>>;
    /// The last values of the latest minute row before `before` of each of these queues of the
    /// broker that has one.
    async fn minutes_in_force(
        &self,
        broker_id: i64,
        queue_ids: &[i64],
        before: i64,
    ) -> Result<Vec<(i64, StoredSample)>>;
    /// In one transaction: the queue rows (replacing any of the same bucket, so redoing a
    /// bucket after a crash gives the same rows), the broker's buckets at `level` in
    /// `[start, end)` from its polls, and the progress `done_until = end`.
    async fn save_rollups(
        &self,
        broker_id: i64,
        level: Level,
        start: i64,
        end: i64,
        rows: &[QueueBucket],
    ) -> Result<()>;
    /// Deletes the roll-ups before their cutoff: broker buckets, and queue rows except each
    /// queue's latest row before the cutoff (the value in force for a queue idle since); then
    /// the rows of queues deleted before `cutoffs.hour`, and those queues once nothing of them is
    /// left (raw samples included, so prune those first). Returns the rows deleted (queues not
    /// counted). Each delete is a short write of its own, so the poller's writes are not held up
    /// behind one long one.
    async fn prune_rollups(&self, cutoffs: Cutoffs) -> Result<u64>;
    /// A broker's stored buckets at `level` in `[from, to)` summed per point of `step` seconds
    /// from `start`: (point index, sums).
    async fn broker_rollup_sums(
        &self,
        broker_id: i64,
        level: Level,
        range: (i64, i64),
        start: i64,
        step: i64,
    ) -> Result<Vec<(i64, MetricSums)>>;
    /// The same from the broker's raw polls in `[from, to)`.
    async fn broker_poll_sums(
        &self,
        broker_id: i64,
        range: (i64, i64),
        start: i64,
        step: i64,
    ) -> Result<Vec<(i64, MetricSums)>>;
}

/// The columns of a [`QueueRollup`] in the roll-up tables, in the order [`rollup_at`] reads them
/// and [`rollup_values`] writes them (after `queue_id, bucket`).
pub(super) const ROLLUP_COLUMNS: &str = "samples, ready_min, ready_max, ready_avg_m, unacked_min, unacked_max, \
unacked_avg_m, consumers_min, consumers_max, consumers_avg_m, publish_rate_avg_m, publish_rate_max_m, \
deliver_rate_avg_m, deliver_rate_max_m, ack_rate_avg_m, ack_rate_max_m, redeliver_rate_avg_m, redeliver_rate_max_m, \
age_max_secs, ready, unacked, consumers, publish_count, publish_rate_m, deliver_rate_m, ack_rate_m, \
redeliver_rate_m, head_ts, est_oldest_ts, est_bound";

/// Values per queue row: `queue_id, bucket` and [`ROLLUP_COLUMNS`].
pub(super) const ROLLUP_VALUES: usize = 32;

/// The roll-up in [`ROLLUP_COLUMNS`] starting at column `offset` of a row of either backend.
pub(super) fn rollup_at<'r, R: Row>(row: &'r R, offset: usize) -> Result<QueueRollup>
where
    usize: ColumnIndex<R>,
    i64: Decode<'r, R::Database> + Type<R::Database>,
    Option<i64>: Decode<'r, R::Database> + Type<R::Database>,
{
    let gauge = |i: usize| -> Result<Gauge> {
        Ok(Gauge {
            min: row.try_get(offset + i)?,
            max: row.try_get(offset + i + 1)?,
            avg_m: row.try_get(offset + i + 2)?,
        })
    };
    let rate = |i: usize| -> Result<Rate> {
        Ok(Rate { avg_m: row.try_get(offset + i)?, max_m: row.try_get(offset + i + 1)? })
    };
    Ok(QueueRollup {
        samples: row.try_get(offset)?,
        ready: gauge(1)?,
        unacked: gauge(4)?,
        consumers: gauge(7)?,
        publish_rate: rate(10)?,
        deliver_rate: rate(12)?,
        ack_rate: rate(14)?,
        redeliver_rate: rate(16)?,
        age_max_secs: row.try_get(offset + 18)?,
        last: sample_from_row(row, offset + 19)?,
    })
}

/// A queue row's values: `queue_id, bucket` and [`ROLLUP_COLUMNS`].
pub(super) fn rollup_values(&(queue_id, bucket, ref r): &QueueBucket) -> [Option<i64>; ROLLUP_VALUES] {
    let l = &r.last;
    [
        Some(queue_id),
        Some(bucket),
        Some(r.samples),
        r.ready.min,
        r.ready.max,
        r.ready.avg_m,
        r.unacked.min,
        r.unacked.max,
        r.unacked.avg_m,
        r.consumers.min,
        r.consumers.max,
        r.consumers.avg_m,
        r.publish_rate.avg_m,
        r.publish_rate.max_m,
        r.deliver_rate.avg_m,
        r.deliver_rate.max_m,
        r.ack_rate.avg_m,
        r.ack_rate.max_m,
        r.redeliver_rate.avg_m,
        r.redeliver_rate.max_m,
        r.age_max_secs,
        l.ready,
        l.unacked,
        l.consumers,
        l.publish_count,
        l.publish_rate_m,
        l.deliver_rate_m,
        l.ack_rate_m,
        l.redeliver_rate_m,
        l.head_ts,
        l.est_oldest_ts,
        l.est_bound,
    ]
}

/// The columns [`Rollups::broker_rollup_sums`] averages, in the order of [`MetricSums`].
pub(super) const BROKER_ROLLUP_METRICS: [&str; BROKER_METRICS] = [
    "ready_avg",
    "unacked_avg",
    "publish_rate_avg_m",
    "confirm_rate_avg_m",
    "ack_rate_avg_m",
    "deliver_rate_avg_m",
    "redeliver_rate_avg_m",
    "unroutable_rate_avg_m",
    "poll_ms_avg",
];

/// The columns of `broker_samples` [`Rollups::broker_poll_sums`] averages, likewise.
pub(super) const BROKER_POLL_METRICS: [&str; BROKER_METRICS] = [
    "ready",
    "unacked",
    "publish_rate_m",
    "confirm_rate_m",
    "ack_rate_m",
    "deliver_rate_m",
    "redeliver_rate_m",
    "unroutable_rate_m",
    "poll_ms",
];

/// A sums row of either backend: the point index, then (sum, count) per metric as floats.
pub(super) fn sums_at<'r, R: Row>(row: &'r R) -> Result<(i64, MetricSums)>
where
    usize: ColumnIndex<R>,
    i64: Decode<'r, R::Database> + Type<R::Database>,
    f64: Decode<'r, R::Database> + Type<R::Database>,
{
    let mut sums = [(0.0, 0.0); BROKER_METRICS];
    for (i, (sum, count)) in sums.iter_mut().enumerate() {
        *sum = row.try_get(1 + 2 * i)?;
        *count = row.try_get(2 + 2 * i)?;
    }
    Ok((row.try_get(0)?, sums))
}
