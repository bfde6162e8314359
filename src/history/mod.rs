//! Queue and broker history, kept through the storage interface (`storage::Samples`); the
//! SQLite file itself is opened and backed up here.
//!
//! Storage follows the measured SQLite costs (the project's shared PERF notes): a poll's writes
//! go in one transaction, and per-queue rows are written only when a value changed (plus an
//! hourly keyframe per queue), so 90% idle queues cost next to nothing. A stored value holds
//! until the queue's next row; `broker_samples` records every successful poll, so a reader knows
//! where the broker was unreachable and draws a gap there.
//! Raw samples are kept for a short window; [`rollup`] keeps 1-minute and 1-hour aggregates for
//! longer, and [`series`] reads whichever resolution fits a chart's range.

use std::path::Path;
use std::str::FromStr;
use std::time::Duration;

use serde::Serialize;
use sqlx::sqlite::{Sqlite, SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous};

use crate::metrics::rate_from_milli;
pub use crate::storage::samples::{BrokerSample, KnownQueue, PollWrite, QueueMeta, StoredSample};
use crate::storage::Store;

pub mod last_known;
pub mod nodes;
pub mod postgres;
pub mod rollup;
pub mod series;
pub mod storage;

pub type Db = SqlitePool;

/// Opens (creating if needed) the database in WAL mode and applies pending migrations.
pub async fn open(path: &Path) -> Result<Db, sqlx::Error> {
    // The file is created here, once, readable by its owner only (it holds dead letters and
    // sessions). The pool's connections never create it: one opened after the file was deleted
    // under warren would otherwise start an empty database beside the one the other
    // connections still write to, and its writes fail as "no such table" (issue 29, case 2).
    {
        use std::os::unix::fs::OpenOptionsExt;
        std::fs::OpenOptions::new().create(true).append(true).mode(0o600).open(path)?;
    }
    let options = SqliteConnectOptions::from_str(&format!("sqlite://{}", path.display()))?
        .create_if_missing(false)
        .journal_mode(SqliteJournalMode::Wal)
        // FULL: a commit is on disk when it returns, through power loss too. The audit,
        // custody, the outbox and job checkpoints promise that (README, "Data safety"); NORMAL
        // survived a crash of warren but could lose the last commits to a crash of the machine.
        .synchronous(SqliteSynchronous::Full)
        .busy_timeout(Duration::from_secs(10))
        .foreign_keys(true);
    let pool = SqlitePoolOptions::new()
        .max_connections(4)
        // A connection that comes back to the pool inside a transaction is closed, which rolls
        // it back. On a full disk SQLite can roll a transaction back by itself; sqlx still counts
        // it open, its ROLLBACK then fails, and the connection's next transaction begins as a
        // SAVEPOINT, whose failure leaves SQLite's transaction open with the write lock held:
        // every other write then waited out the busy timeout and failed with "database is
        // locked" after the disk had room again (tests/storage.rs, under load).
        .after_release(|conn, _| {
            let depth =
                <<Sqlite as sqlx::Database>::TransactionManager as sqlx::TransactionManager>::get_transaction_depth(
                    conn,
                );
            Box::pin(async move {
                if depth != 0 {
                    tracing::warn!(depth, "a database connection came back inside a transaction: closing it");
                }
                Ok(depth == 0)
            })
        })
        .connect_with(options)
        .await?;
    let migrator = sqlx::migrate!("./migrations/sqlite");
    if let Err(e) = migrator.run(&pool).await {
        pool.close().await;
        return Err(match e {
            // A database a newer warren wrote: say so instead of the migrator's words.
            sqlx::migrate::MigrateError::VersionMissing(version) => sqlx::Error::Configuration(
                format!(
                    "{} was written by a newer warren (it has schema version {version}; this warren knows up to {}): \
                     run that warren or a newer one, or restore a backup this version wrote",
                    path.display(),
                    migrator.iter().map(|m| m.version).max().unwrap_or(0)
                )
                .into(),
            ),
            e => e.into(),
        });
    }
    Ok(pool)
}

/// Writes a consistent copy of the live database `db` to `to` (`VACUUM INTO`: one read
/// transaction, so writers go on), created readable by its owner only; refuses a `to` that
/// exists. Returns the copy's size in bytes after checking it (`pragma quick_check`).
pub async fn backup(db: &Db, to: &Path) -> Result<u64, sqlx::Error> {
    {
        use std::os::unix::fs::OpenOptionsExt;
        // create_new: never over an existing file (VACUUM INTO takes an empty one).
        std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(to)?;
    }
    let copied = sqlx::query("vacuum into ?").bind(to.display().to_string()).execute(db).await;
    if let Err(e) = copied {
        let _ = std::fs::remove_file(to);
        return Err(e);
    }
    let options = SqliteConnectOptions::from_str(&format!("sqlite://{}", to.display()))?.read_only(true);
    let mut copy = <sqlx::SqliteConnection as sqlx::Connection>::connect_with(&options).await?;
    let check: String = sqlx::query_scalar("pragma quick_check").fetch_one(&mut copy).await?;
    sqlx::Connection::close(copy).await?;
    if check != "ok" {
        return Err(sqlx::Error::Protocol(format!("the copy at {} does not check: {check}", to.display())));
    }
    Ok(std::fs::metadata(to)?.len())
}

/// The id of the broker named `name`, added if it is new.
pub async fn broker_id(store: &Store, name: &str) -> Result<i64, sqlx::Error> {
    store.broker_id(name).await
}

/// How many queues of a broker the database knows (deleted ones too).
pub async fn count_known_queues(store: &Store, broker_id: i64) -> Result<i64, sqlx::Error> {
    store.count_known_queues(broker_id).await
}

/// Every queue of a broker with its last stored sample, handed to `each` one at a time.
pub async fn known_queues(
    store: &Store,
    broker_id: i64,
    mut each: impl FnMut(KnownQueue) + Send,
) -> Result<(), sqlx::Error> {
    store.known_queues(broker_id, &mut each).await
}

/// Applies one poll's writes in a single transaction; returns the ids of `upserts`, in order.
pub async fn write_poll(store: &Store, write: &PollWrite) -> Result<Vec<i64>, sqlx::Error> {
    Ok(store.write_poll(write, None).await?.unwrap_or_default())
}

/// `write_poll` under the poller's lease on its broker: `None` when the lease was lost (another
/// replica polls the broker now), and nothing was written.
pub async fn write_poll_fenced(
    store: &Store,
    write: &PollWrite,
    held: &crate::storage::Held,
) -> Result<Option<Vec<i64>>, sqlx::Error> {
    store.write_poll(write, Some(held)).await
}

/// A queue found by its names, with its id, for history reads and deleted queues.
pub async fn find_queue(
    store: &Store,
    broker: &str,
    vhost: &str,
    name: &str,
) -> Result<Option<KnownQueue>, sqlx::Error> {
    store.find_queue(broker, vhost, name).await
}

/// One point of a resampled series.
#[derive(Debug, Clone, Serialize, PartialEq, utoipa::ToSchema)]
pub struct QueuePoint {
    #[serde(flatten, serialize_with = "crate::times::ts")]
    #[schema(schema_with = crate::times::schema::ts)]
    pub ts: i64,
    pub ready: Option<i64>,
    pub unacked: Option<i64>,
    pub consumers: Option<i64>,
    pub publish_rate: Option<f64>,
    pub deliver_rate: Option<f64>,
    pub ack_rate: Option<f64>,
    pub redeliver_rate: Option<f64>,
    pub oldest_age_secs: Option<f64>,
    /// True when that age is warren's FIFO estimate (or its lower bound), not the broker's.
    pub oldest_age_estimated: bool,
}

/// Grid of `step`-second points over `[from, to]`; a point is covered when a successful poll
/// happened in the step ending there (or within `max_gap` of it, for steps shorter than a poll).
fn covered_grid(from: i64, to: i64, step: i64, max_gap: i64, polls: &[i64]) -> Vec<(i64, bool)> {
    debug_assert!(from <= to && step > 0);
    let mut out = Vec::new();
    let mut t = from + (to - from) % step;
    let mut i = 0;
    while t <= to {
        while i < polls.len() && polls[i] <= t {
            i += 1;
        }
        let covered = i > 0 && t - polls[i - 1] <= step.max(max_gap);
        out.push((t, covered));
        // Checked, so that no range can make this loop run forever.
        match t.checked_add(step) {
            Some(next) => t = next,
            None => break,
        }
    }
    out
}

/// A queue's history over `[from, to]`, resampled to `step` seconds: each point carries the
/// latest stored values at that time; points where the broker was not reachable (or the queue
/// did not exist) are all-null so charts show a gap.
pub async fn queue_history(
    store: &Store,
    broker_id: i64,
    queue_id: i64,
    from: i64,
    to: i64,
    step: i64,
    poll_interval_secs: i64,
) -> Result<Vec<QueuePoint>, sqlx::Error> {
    let samples = store.queue_samples(queue_id, from, to).await?;
    let deleted_at = store.queue_deleted_at(queue_id).await?;
    let polls = store.poll_times(broker_id, from - 2 * poll_interval_secs, to).await?;

    let mut points = Vec::new();
    let mut j = 0;
    for (t, covered) in covered_grid(from, to, step, 2 * poll_interval_secs, &polls) {
        while j < samples.len() && samples[j].0 <= t {
            j += 1;
        }
        let current = if j > 0 { Some(&samples[j - 1]) } else { None };
        let alive = deleted_at.is_none_or(|d| t < d);
        match current {
            Some((_, s)) if covered && alive => points.push(QueuePoint {
                ts: t,
                ready: s.ready,
                unacked: s.unacked,
                consumers: s.consumers,
                publish_rate: rate_from_milli(s.publish_rate_m),
                deliver_rate: rate_from_milli(s.deliver_rate_m),
                ack_rate: rate_from_milli(s.ack_rate_m),
                redeliver_rate: rate_from_milli(s.redeliver_rate_m),
                oldest_age_secs: match (s.ready.zip(s.unacked), s.head_ts.or(s.est_oldest_ts)) {
                    (Some((0, 0)), _) => Some(0.0),
                    (_, Some(oldest)) => Some((t - oldest).max(0) as f64),
                    _ => None,
                },
                oldest_age_estimated: s.head_ts.is_none() && s.est_oldest_ts.is_some(),
            }),
            _ => points.push(QueuePoint {
                ts: t,
                ready: None,
                unacked: None,
                consumers: None,
                publish_rate: None,
                deliver_rate: None,
                ack_rate: None,
                redeliver_rate: None,
                oldest_age_secs: None,
                oldest_age_estimated: false,
            }),
        }
    }
    Ok(points)
}

/// Total depth (ready + unacked) series of many queues since `since`, resampled to `step`, for
/// the sparklines of one page of the queue list.
pub async fn depth_sparklines(
    store: &Store,
    queue_ids: &[i64],
    since: i64,
    now: i64,
    step: i64,
) -> Result<std::collections::HashMap<i64, Vec<Option<i64>>>, sqlx::Error> {
    let mut out = std::collections::HashMap::new();
    if queue_ids.is_empty() {
        return Ok(out);
    }
    let mut by_queue: std::collections::HashMap<i64, Vec<(i64, Option<i64>)>> = std::collections::HashMap::new();
    for (id, ts, depth) in store.depths_since(queue_ids, since).await? {
        by_queue.entry(id).or_default().push((ts, depth));
    }
    for (id, samples) in by_queue {
        let mut series = Vec::new();
        let mut j = 0;
        let mut t = since;
        while t <= now {
            while j < samples.len() && samples[j].0 <= t {
                j += 1;
            }
            series.push(if j > 0 { samples[j - 1].1 } else { None });
            t += step;
        }
        out.insert(id, series);
    }
    Ok(out)
}

/// For the FIFO age estimate: the latest sample of a queue since `since` whose publish counter
/// was at most `target`, and the time of the sample after it (when the counter passed target).
pub async fn publish_crossing(
    store: &Store,
    queue_id: i64,
    since: i64,
    target: i64,
) -> Result<Option<(i64, Option<i64>)>, sqlx::Error> {
    store.publish_crossing(queue_id, since, target).await
}

/// The first sample of a queue since `since` that has its counts and holds messages: (ts,
/// publish_count, ready + unacked). An empty queue starts no lower bound of an age, and a new
/// quorum queue on 4.3 reports 0 messages for its first seconds while its publish counter
/// already counts them (3.10 leaves the keys out instead): such a sample would make the
/// messages present later look as if they came in unseen by the counter.
pub async fn first_sample(
    store: &Store,
    queue_id: i64,
    since: i64,
) -> Result<Option<(i64, Option<i64>, Option<i64>)>, sqlx::Error> {
    store.first_sample(queue_id, since).await
}

/// One point of a broker's history.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct BrokerPoint {
    #[serde(flatten, serialize_with = "crate::times::ts")]
    #[schema(schema_with = crate::times::schema::ts)]
    pub ts: i64,
    pub ready: Option<i64>,
    pub unacked: Option<i64>,
    pub publish_rate: Option<f64>,
    pub confirm_rate: Option<f64>,
    pub ack_rate: Option<f64>,
    pub deliver_rate: Option<f64>,
    pub redeliver_rate: Option<f64>,
    pub unroutable_rate: Option<f64>,
    pub poll_ms: Option<i64>,
}

/// A broker's samples over `[from, to]`, averaged into `step`-second buckets (empty buckets are
/// gaps).
pub async fn broker_history(
    store: &Store,
    broker_id: i64,
    from: i64,
    to: i64,
    step: i64,
) -> Result<Vec<BrokerPoint>, sqlx::Error> {
    let milli = |v: Option<f64>| v.map(|m| m.round() / 1000.0);
    let mut by_bucket = std::collections::HashMap::new();
    for b in store.broker_buckets(broker_id, from, to, step).await? {
        by_bucket.insert(
            b.bucket,
            BrokerPoint {
                ts: from + b.bucket * step + step - 1,
                ready: b.ready.map(|v| v.round() as i64),
                unacked: b.unacked.map(|v| v.round() as i64),
                publish_rate: milli(b.publish_rate_m),
                confirm_rate: milli(b.confirm_rate_m),
                ack_rate: milli(b.ack_rate_m),
                deliver_rate: milli(b.deliver_rate_m),
                redeliver_rate: milli(b.redeliver_rate_m),
                unroutable_rate: milli(b.unroutable_rate_m),
                poll_ms: b.poll_ms.map(|v| v.round() as i64),
            },
        );
    }
    // A bucket without a successful poll is a gap (all null), so charts do not draw across an
    // outage.
    let buckets = (to - from) / step;
    let points = (0..=buckets)
        .map(|b| {
            by_bucket.remove(&b).unwrap_or(BrokerPoint {
                ts: from + b * step + step - 1,
                ready: None,
                unacked: None,
                publish_rate: None,
                confirm_rate: None,
                ack_rate: None,
                deliver_rate: None,
                redeliver_rate: None,
                unroutable_rate: None,
                poll_ms: None,
            })
        })
        .filter(|p| p.ts <= to + step)
        .collect::<Vec<_>>();
    Ok(points)
}

/// Deletes raw samples and broker polls older than `before` (unix seconds). Called by
/// [`rollup::prune`], which decides how far raw data may go.
pub async fn prune(store: &Store, before: i64) -> Result<u64, sqlx::Error> {
    store.prune_samples(before).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grid_marks_gaps_where_no_poll_succeeded() {
        let polls = [100, 110, 120, 160, 170];
        let grid = covered_grid(100, 170, 10, 20, &polls);
        let covered: Vec<bool> = grid.iter().map(|g| g.1).collect();
        // 140 is 20 s after the poll at 120: still within max_gap; 150 is not.
        assert_eq!(covered, vec![true, true, true, true, true, false, true, true]);
    }
}
