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
//! `rollup_progress`, written in the same transaction as the rows it covers; rows are written with
//! `insert or replace`, so redoing a bucket after a crash gives the same rows.

use std::collections::HashMap;

use sqlx::Row;
use tokio_util::sync::CancellationToken;

use super::{sample_from_row, Db, StoredSample, SAMPLE_COLUMNS};

pub const MINUTE_SECS: i64 = 60;
pub const HOUR_SECS: i64 = 3600;
/// A bucket is rolled up once its end is this far in the past: a poll stamps its rows with the
/// time it started and commits them when it ends (pages of queues, up to the request timeout).
pub const GRACE_SECS: i64 = 120;
/// Raw samples are read an hour at a time (a busy queue has 360 rows in an hour at 10 s).
const MINUTES_PER_STEP: i64 = 60;

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
pub type BrokerBuckets = HashMap<i64, (i64, i64)>;

/// Fills `[start, end)` in steps of `bucket_secs` from stored rows and, where a bucket has no
/// row, [`held`] of the value carried from before (`prev`). Buckets without a broker poll and no
/// row are gaps and are left out.
pub fn fill_buckets(
    start: i64,
    end: i64,
    bucket_secs: i64,
    mut prev: StoredSample,
    stored: &HashMap<i64, QueueRollup>,
    broker: &BrokerBuckets,
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

const ROLLUP_COLUMNS: &str = "samples, ready_min, ready_max, ready_avg_m, unacked_min, unacked_max, unacked_avg_m, \
consumers_min, consumers_max, consumers_avg_m, publish_rate_avg_m, publish_rate_max_m, deliver_rate_avg_m, \
deliver_rate_max_m, ack_rate_avg_m, ack_rate_max_m, redeliver_rate_avg_m, redeliver_rate_max_m, age_max_secs, \
ready, unacked, consumers, publish_count, publish_rate_m, deliver_rate_m, ack_rate_m, redeliver_rate_m, head_ts, \
est_oldest_ts, est_bound";

fn rollup_from_row(row: &sqlx::sqlite::SqliteRow, o: usize) -> Result<QueueRollup, sqlx::Error> {
    let gauge = |i: usize| -> Result<Gauge, sqlx::Error> {
        Ok(Gauge { min: row.try_get(o + i)?, max: row.try_get(o + i + 1)?, avg_m: row.try_get(o + i + 2)? })
    };
    let rate = |i: usize| -> Result<Rate, sqlx::Error> {
        Ok(Rate { avg_m: row.try_get(o + i)?, max_m: row.try_get(o + i + 1)? })
    };
    Ok(QueueRollup {
        samples: row.try_get(o)?,
        ready: gauge(1)?,
        unacked: gauge(4)?,
        consumers: gauge(7)?,
        publish_rate: rate(10)?,
        deliver_rate: rate(12)?,
        ack_rate: rate(14)?,
        redeliver_rate: rate(16)?,
        age_max_secs: row.try_get(o + 18)?,
        last: sample_from_row(row, o + 19)?,
    })
}

fn rollup_values(id: i64, bucket: i64, r: &QueueRollup) -> [Option<i64>; 32] {
    let l = &r.last;
    [
        Some(id),
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
    pub fn name(self) -> &'static str {
        match self {
            Level::Minute => "1m",
            Level::Hour => "1h",
        }
    }
    fn queue_table(self) -> &'static str {
        match self {
            Level::Minute => "queue_rollups_1m",
            Level::Hour => "queue_rollups_1h",
        }
    }
    fn broker_table(self) -> &'static str {
        match self {
            Level::Minute => "broker_rollups_1m",
            Level::Hour => "broker_rollups_1h",
        }
    }
}

/// Every bucket of `broker_id` before this is rolled up at `level` (None: nothing yet).
pub async fn done_until(db: &Db, broker_id: i64, level: Level) -> Result<Option<i64>, sqlx::Error> {
    sqlx::query_scalar("select done_until from rollup_progress where broker_id = ? and resolution = ?")
        .bind(broker_id)
        .bind(level.name())
        .fetch_optional(db)
        .await
}

/// Successful poll times of a broker in `[from, to)`, ascending.
pub async fn polls_between(db: &Db, broker_id: i64, from: i64, to: i64) -> Result<Vec<i64>, sqlx::Error> {
    sqlx::query_scalar("select ts from broker_samples where broker_id = ? and ts >= ? and ts < ? order by ts")
        .bind(broker_id)
        .bind(from)
        .bind(to)
        .fetch_all(db)
        .await
}

/// The broker's stored buckets at `level` in `[from, to)`.
pub async fn broker_buckets(
    db: &Db,
    broker_id: i64,
    level: Level,
    from: i64,
    to: i64,
) -> Result<BrokerBuckets, sqlx::Error> {
    let sql = format!(
        "select bucket, samples, last_ts from {} where broker_id = ? and bucket >= ? and bucket < ?",
        level.broker_table()
    );
    let rows: Vec<(i64, i64, i64)> = sqlx::query_as(&sql).bind(broker_id).bind(from).bind(to).fetch_all(db).await?;
    Ok(rows.into_iter().map(|(b, n, last)| (b, (n, last))).collect())
}

/// One queue's stored rows at `level` in `[from, to)`, and the last values of its latest row
/// before `from` (the value in force when the range starts).
pub async fn queue_rows(
    db: &Db,
    queue_id: i64,
    level: Level,
    from: i64,
    to: i64,
) -> Result<(Option<StoredSample>, HashMap<i64, QueueRollup>), sqlx::Error> {
    let table = level.queue_table();
    let sql = format!(
        "select bucket, {ROLLUP_COLUMNS} from {table} where queue_id = ?1 and bucket >=
           coalesce((select max(bucket) from {table} where queue_id = ?1 and bucket < ?2), ?2) and bucket < ?3
         order by bucket"
    );
    let rows = sqlx::query(&sql).bind(queue_id).bind(from).bind(to).fetch_all(db).await?;
    let mut prev = None;
    let mut stored = HashMap::new();
    for row in &rows {
        let bucket: i64 = row.try_get(0)?;
        let rollup = rollup_from_row(row, 1)?;
        if bucket < from {
            prev = Some(rollup.last);
        } else {
            stored.insert(bucket, rollup);
        }
    }
    Ok((prev, stored))
}

/// One queue's raw samples in `[from, to)`, and its latest sample before `from`.
pub async fn raw_rows(
    db: &Db,
    queue_id: i64,
    from: i64,
    to: i64,
) -> Result<(Option<StoredSample>, Vec<(i64, StoredSample)>), sqlx::Error> {
    let sql = format!(
        "select ts, {SAMPLE_COLUMNS} from queue_samples where queue_id = ?1 and ts >=
           coalesce((select max(ts) from queue_samples where queue_id = ?1 and ts < ?2), ?2) and ts < ?3
         order by ts"
    );
    let rows = sqlx::query(&sql).bind(queue_id).bind(from).bind(to).fetch_all(db).await?;
    let mut prev = None;
    let mut out = Vec::with_capacity(rows.len());
    for row in &rows {
        let ts: i64 = row.try_get(0)?;
        let sample = sample_from_row(row, 1)?;
        if ts < from {
            prev = Some(sample);
        } else {
            out.push((ts, sample));
        }
    }
    Ok((prev, out))
}

/// Rolls up every complete bucket of one broker: minutes from raw samples up to `now` minus
/// [`GRACE_SECS`], then hours from minutes. Stops early (between transactions) when `cancel`
/// fires. Returns the number of buckets rolled up.
pub async fn roll_up(db: &Db, broker_id: i64, now: i64, cancel: &CancellationToken) -> Result<u64, sqlx::Error> {
    let mut done = 0;
    let minute_limit = (now - GRACE_SECS).div_euclid(MINUTE_SECS) * MINUTE_SECS;
    let mut minute_wm = match done_until(db, broker_id, Level::Minute).await? {
        Some(wm) => wm,
        None => {
            // First run (or first data): start at the oldest poll, so existing history is
            // rolled up too.
            let first: Option<i64> = sqlx::query_scalar("select min(ts) from broker_samples where broker_id = ?")
                .bind(broker_id)
                .fetch_one(db)
                .await?;
            match first {
                Some(ts) => ts.div_euclid(MINUTE_SECS) * MINUTE_SECS,
                None => return Ok(0),
            }
        }
    };
    while minute_wm < minute_limit && !cancel.is_cancelled() {
        let end = (minute_wm + MINUTES_PER_STEP * MINUTE_SECS).min(minute_limit);
        roll_up_minutes(db, broker_id, minute_wm, end).await?;
        done += ((end - minute_wm) / MINUTE_SECS) as u64;
        minute_wm = end;
    }

    let hour_limit = minute_wm.div_euclid(HOUR_SECS) * HOUR_SECS;
    let mut hour_wm = match done_until(db, broker_id, Level::Hour).await? {
        Some(wm) => wm,
        None => {
            let first: Option<i64> =
                sqlx::query_scalar("select min(bucket) from broker_rollups_1m where broker_id = ?")
                    .bind(broker_id)
                    .fetch_one(db)
                    .await?;
            match first {
                Some(ts) => ts.div_euclid(HOUR_SECS) * HOUR_SECS,
                None => return Ok(done),
            }
        }
    };
    while hour_wm < hour_limit && !cancel.is_cancelled() {
        roll_up_hour(db, broker_id, hour_wm).await?;
        done += 1;
        hour_wm += HOUR_SECS;
    }
    Ok(done)
}

/// Latest raw sample before `before` of each of these queues.
async fn raw_in_force(db: &Db, queue_ids: &[i64], before: i64) -> Result<HashMap<i64, StoredSample>, sqlx::Error> {
    let sql = format!(
        "select j.value, {SAMPLE_COLUMNS} from json_each(?1) j
         join queue_samples s on s.queue_id = j.value
           and s.ts = (select max(ts) from queue_samples where queue_id = j.value and ts < ?2)"
    );
    let ids = serde_json::to_string(queue_ids).expect("ids serialise");
    let rows = sqlx::query(&sql).bind(ids).bind(before).fetch_all(db).await?;
    rows.iter().map(|r| Ok((r.try_get(0)?, sample_from_row(r, 1)?))).collect()
}

/// Minutes `[start, end)` of one broker from raw samples, in one transaction.
async fn roll_up_minutes(db: &Db, broker_id: i64, start: i64, end: i64) -> Result<(), sqlx::Error> {
    let polls = polls_between(db, broker_id, start, end).await?;
    let sql = format!(
        "select s.queue_id, s.ts, {SAMPLE_COLUMNS} from queues q
         join queue_samples s on s.queue_id = q.id and s.ts >= ?2 and s.ts < ?3
         where q.broker_id = ?1 order by s.queue_id, s.ts"
    );
    let rows = sqlx::query(&sql).bind(broker_id).bind(start).bind(end).fetch_all(db).await?;
    let mut by_queue: HashMap<i64, Vec<(i64, StoredSample)>> = HashMap::new();
    for row in &rows {
        by_queue.entry(row.try_get(0)?).or_default().push((row.try_get(1)?, sample_from_row(row, 2)?));
    }
    // Queues without rows in the range held their value at every poll: they match `held` and
    // need no row, so only queues with rows are computed.
    let ids: Vec<i64> = by_queue.keys().copied().collect();
    let mut prev = raw_in_force(db, &ids, start).await?;
    let mut broker: BrokerBuckets = HashMap::new();
    for &poll in &polls {
        let entry = broker.entry(poll.div_euclid(MINUTE_SECS) * MINUTE_SECS).or_insert((0, poll));
        entry.0 += 1;
        entry.1 = poll;
    }
    let mut values = Vec::new();
    for (queue_id, rows) in &by_queue {
        let queue_prev = prev.remove(queue_id);
        let mut carried = queue_prev.unwrap_or_default();
        for (bucket, rollup) in minutes_from_raw(start, end, queue_prev, rows, &polls) {
            let (n, last_ts) = broker.get(&bucket).copied().unwrap_or((0, bucket));
            if rollup != held(carried, n, last_ts) {
                values.push(rollup_values(*queue_id, bucket, &rollup));
            }
            carried = rollup.last;
        }
    }
    let mut tx = db.begin().await?;
    insert_rollups(&mut tx, Level::Minute, &values).await?;
    roll_up_broker(&mut tx, broker_id, Level::Minute, start, end).await?;
    set_done_until(&mut tx, broker_id, Level::Minute, end).await?;
    tx.commit().await
}

/// The hour starting at `start` of one broker, from its minute roll-ups, in one transaction.
async fn roll_up_hour(db: &Db, broker_id: i64, start: i64) -> Result<(), sqlx::Error> {
    let end = start + HOUR_SECS;
    let minutes = broker_buckets(db, broker_id, Level::Minute, start, end).await?;
    let sql = format!(
        "select r.queue_id, r.bucket, {ROLLUP_COLUMNS} from queues q
         join queue_rollups_1m r on r.queue_id = q.id and r.bucket >= ?2 and r.bucket < ?3
         where q.broker_id = ?1 order by r.queue_id, r.bucket"
    );
    let rows = sqlx::query(&sql).bind(broker_id).bind(start).bind(end).fetch_all(db).await?;
    let mut by_queue: HashMap<i64, HashMap<i64, QueueRollup>> = HashMap::new();
    for row in &rows {
        by_queue.entry(row.try_get(0)?).or_default().insert(row.try_get(1)?, rollup_from_row(row, 2)?);
    }
    // The value in force at the start of the hour: the last values of each queue's latest minute
    // row before it (queues without minute rows in the hour held it throughout).
    let sql = "select q.id, r.ready, r.unacked, r.consumers, r.publish_count, r.publish_rate_m, r.deliver_rate_m,
                r.ack_rate_m, r.redeliver_rate_m, r.head_ts, r.est_oldest_ts, r.est_bound
         from queues q join queue_rollups_1m r on r.queue_id = q.id
           and r.bucket = (select max(bucket) from queue_rollups_1m where queue_id = q.id and bucket < ?2)
         where q.broker_id = ?1 and q.id in (select value from json_each(?3))";
    let ids: Vec<i64> = by_queue.keys().copied().collect();
    let prev_rows = sqlx::query(sql)
        .bind(broker_id)
        .bind(start)
        .bind(serde_json::to_string(&ids).expect("ids serialise"))
        .fetch_all(db)
        .await?;
    let mut prev: HashMap<i64, StoredSample> = HashMap::new();
    for row in &prev_rows {
        prev.insert(row.try_get(0)?, sample_from_row(row, 1)?);
    }
    let polls: i64 = minutes.values().map(|(n, _)| n).sum();
    let last_poll = minutes.values().map(|(_, last)| *last).max().unwrap_or(start);
    let mut values = Vec::new();
    for (queue_id, stored) in &by_queue {
        let carried = prev.get(queue_id).copied().unwrap_or_default();
        let mut acc = Acc::starting_with(carried);
        for (_, cell) in fill_buckets(start, end, MINUTE_SECS, carried, stored, &minutes) {
            acc.merge(&cell);
        }
        let rollup = acc.finish();
        if rollup != held(carried, polls, last_poll) {
            values.push(rollup_values(*queue_id, start, &rollup));
        }
    }
    let mut tx = db.begin().await?;
    insert_rollups(&mut tx, Level::Hour, &values).await?;
    roll_up_broker(&mut tx, broker_id, Level::Hour, start, end).await?;
    set_done_until(&mut tx, broker_id, Level::Hour, end).await?;
    tx.commit().await
}

async fn insert_rollups(
    tx: &mut sqlx::SqliteConnection,
    level: Level,
    values: &[[Option<i64>; 32]],
) -> Result<(), sqlx::Error> {
    // As write_poll: rows travel as JSON arrays, one statement per 5,000, unpacked by SQLite.
    let columns: String = (0..32).map(|i| format!("value ->> {i}")).collect::<Vec<_>>().join(", ");
    let sql = format!(
        "insert or replace into {} (queue_id, bucket, {ROLLUP_COLUMNS}) select {columns} from json_each(?)",
        level.queue_table()
    );
    for chunk in values.chunks(5000) {
        let json = serde_json::to_string(chunk).expect("roll-ups serialise");
        sqlx::query(&sql).bind(json).execute(&mut *tx).await?;
    }
    Ok(())
}

/// Broker-wide buckets straight from broker_samples (one row per poll, so this is cheap).
async fn roll_up_broker(
    tx: &mut sqlx::SqliteConnection,
    broker_id: i64,
    level: Level,
    start: i64,
    end: i64,
) -> Result<(), sqlx::Error> {
    let sql = format!(
        "insert or replace into {}
           (broker_id, bucket, samples, last_ts, ready_avg, ready_max, unacked_avg, unacked_max, consumers_avg,
            queues_last, publish_rate_avg_m, confirm_rate_avg_m, ack_rate_avg_m, deliver_rate_avg_m,
            redeliver_rate_avg_m, unroutable_rate_avg_m, poll_ms_avg, poll_ms_max)
         select ?1, b, n, last_ts, ready_avg, ready_max, unacked_avg, unacked_max, consumers_avg,
                (select queues from broker_samples l where l.broker_id = ?1 and l.ts = g.last_ts),
                p, c, a, d, r, u, poll_avg, poll_max
         from (select (ts / ?4) * ?4 as b, count(*) as n, max(ts) as last_ts, avg(ready) as ready_avg,
                      max(ready) as ready_max, avg(unacked) as unacked_avg, max(unacked) as unacked_max,
                      avg(consumers) as consumers_avg, avg(publish_rate_m) as p, avg(confirm_rate_m) as c,
                      avg(ack_rate_m) as a, avg(deliver_rate_m) as d, avg(redeliver_rate_m) as r,
                      avg(unroutable_rate_m) as u, avg(poll_ms) as poll_avg, max(poll_ms) as poll_max
               from broker_samples where broker_id = ?1 and ts >= ?2 and ts < ?3 group by b) g",
        level.broker_table()
    );
    sqlx::query(&sql).bind(broker_id).bind(start).bind(end).bind(level.secs()).execute(&mut *tx).await?;
    Ok(())
}

async fn set_done_until(
    tx: &mut sqlx::SqliteConnection,
    broker_id: i64,
    level: Level,
    until: i64,
) -> Result<(), sqlx::Error> {
    sqlx::query("insert or replace into rollup_progress (broker_id, resolution, done_until) values (?, ?, ?)")
        .bind(broker_id)
        .bind(level.name())
        .bind(until)
        .execute(&mut *tx)
        .await?;
    Ok(())
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
pub async fn prune(db: &Db, now: i64, windows: Windows, broker_ids: &[i64]) -> Result<u64, sqlx::Error> {
    // Raw samples feed the minute roll-up, and the hour roll-up reads broker polls: keep them
    // until both are done, plus an hour so the value in force (an hourly keyframe) is still there.
    let mut hour_done = i64::MAX;
    let mut minute_done = i64::MAX;
    for &id in broker_ids {
        hour_done = hour_done.min(done_until(db, id, Level::Hour).await?.unwrap_or(i64::MIN));
        minute_done = minute_done.min(done_until(db, id, Level::Minute).await?.unwrap_or(i64::MIN));
    }
    let raw_cutoff = (now - windows.raw_secs).min(hour_done.saturating_sub(HOUR_SECS));
    let minute_cutoff = (now - windows.minute_secs).min(hour_done).min(minute_done);
    let hour_cutoff = now - windows.hour_secs;

    let mut removed = super::prune(&crate::storage::sqlite::store(db.clone()), raw_cutoff).await?;
    let ids: Vec<i64> = sqlx::query_scalar("select id from queues").fetch_all(db).await?;
    for (level, cutoff) in [(Level::Minute, minute_cutoff), (Level::Hour, hour_cutoff)] {
        let table = level.queue_table();
        let sql = format!(
            "delete from {table} where queue_id in (select value from json_each(?1)) and bucket < ?2
               and bucket < (select max(bucket) from {table} r where r.queue_id = {table}.queue_id and r.bucket < ?2)"
        );
        for batch in ids.chunks(200) {
            let list = serde_json::to_string(batch).expect("ids serialise");
            removed += sqlx::query(&sql).bind(list).bind(cutoff).execute(db).await?.rows_affected();
        }
        let sql = format!("delete from {} where bucket < ?", level.broker_table());
        removed += sqlx::query(&sql).bind(cutoff).execute(db).await?.rows_affected();
    }
    // A queue gone for longer than the retention has no value in force any more: its last rows
    // go too, and then the queue itself.
    for level in [Level::Minute, Level::Hour] {
        let sql = format!(
            "delete from {} where queue_id in (select id from queues where deleted_at < ?)",
            level.queue_table()
        );
        removed += sqlx::query(&sql).bind(hour_cutoff).execute(db).await?.rows_affected();
    }
    sqlx::query(
        "delete from queues where deleted_at < ?1
           and not exists (select 1 from queue_samples where queue_id = queues.id)
           and not exists (select 1 from queue_rollups_1m where queue_id = queues.id)
           and not exists (select 1 from queue_rollups_1h where queue_id = queues.id)",
    )
    .bind(hour_cutoff)
    .execute(db)
    .await?;
    Ok(removed)
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
        let broker: BrokerBuckets = [(0, (6, 50)), (120, (6, 170)), (180, (6, 230))].into_iter().collect();
        let cells = fill_buckets(0, 240, 60, s, &stored, &broker);
        let buckets: Vec<i64> = cells.iter().map(|c| c.0).collect();
        assert_eq!(buckets, vec![0, 120, 180], "minute 60 had no poll: a gap");
        assert_eq!(cells[0].1.ready.max, Some(3));
        assert_eq!(cells[2].1.ready.max, Some(6), "held from the stored row before it");
    }
}
