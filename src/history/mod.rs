//! Queue and broker history in SQLite.
//!
//! Storage follows the measured SQLite costs (the project's shared PERF notes): a poll's writes go in one transaction, and per-queue rows are written
//! only when a value changed (plus an hourly keyframe per queue), so 90% idle queues cost next to
//! nothing. A stored value holds until the queue's next row; `broker_samples` records every
//! successful poll, so a reader knows where the broker was unreachable and draws a gap there.
//! Raw samples are kept for a short window; [`rollup`] keeps 1-minute and 1-hour aggregates for
//! longer, and [`series`] reads whichever resolution fits a chart's range.

use std::path::Path;
use std::str::FromStr;
use std::time::Duration;

use futures_util::TryStreamExt;
use serde::Serialize;
use sqlx::sqlite::{Sqlite, SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous};
use sqlx::Row;

use crate::metrics::rate_from_milli;
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

pub use crate::storage::samples::StoredSample;
use crate::storage::samples::{sample_from_row, SAMPLE_COLUMNS};

/// A queue's metadata row; written when it first appears or when any of it changes.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct QueueMeta {
    pub vhost: String,
    pub name: String,
    pub kind: String,
    pub durable: Option<bool>,
    pub arguments: String,
    pub policy: Option<String>,
    pub effective_policy: String,
}

/// Broker-wide values of one successful poll.
#[derive(Debug, Clone, Default)]
pub struct BrokerSample {
    pub ready: Option<i64>,
    pub unacked: Option<i64>,
    pub consumers: Option<i64>,
    pub queues: i64,
    pub publish_rate_m: Option<i64>,
    pub confirm_rate_m: Option<i64>,
    pub ack_rate_m: Option<i64>,
    pub deliver_rate_m: Option<i64>,
    pub redeliver_rate_m: Option<i64>,
    pub unroutable_rate_m: Option<i64>,
    pub poll_ms: i64,
}

/// Everything one poll writes, applied in one transaction.
#[derive(Debug, Default)]
pub struct PollWrite {
    pub broker_id: i64,
    pub ts: i64,
    /// Queues seen for the first time, or whose metadata changed, or that came back.
    pub upserts: Vec<QueueMeta>,
    /// Ids of queues that disappeared in this poll.
    pub deleted: Vec<i64>,
    /// Samples of queues whose values changed: (queue id, values). Queues in `upserts` that are
    /// new have no id yet; their samples go in `new_samples` by position in `upserts`.
    pub samples: Vec<(i64, StoredSample)>,
    pub new_samples: Vec<(usize, StoredSample)>,
    pub broker: BrokerSample,
}

/// A queue row as loaded at start, so the poller knows ids and what was last stored.
#[derive(Debug, Clone)]
pub struct KnownQueue {
    pub id: i64,
    pub meta: QueueMeta,
    pub deleted_at: Option<i64>,
    pub last_sample: Option<(i64, StoredSample)>,
}

pub async fn broker_id(db: &Db, name: &str) -> Result<i64, sqlx::Error> {
    sqlx::query("insert into brokers (name) values (?) on conflict (name) do nothing").bind(name).execute(db).await?;
    sqlx::query_scalar("select id from brokers where name = ?").bind(name).fetch_one(db).await
}

fn meta_from_row(row: &sqlx::sqlite::SqliteRow) -> Result<QueueMeta, sqlx::Error> {
    Ok(QueueMeta {
        vhost: row.try_get("vhost")?,
        name: row.try_get("name")?,
        kind: row.try_get("kind")?,
        durable: row.try_get("durable")?,
        arguments: row.try_get("arguments")?,
        policy: row.try_get("policy")?,
        effective_policy: row.try_get("effective_policy")?,
    })
}

/// How many queues of a broker the database knows (deleted ones too).
pub async fn count_known_queues(db: &Db, broker_id: i64) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar("select count(*) from queues where broker_id = ?").bind(broker_id).fetch_one(db).await
}

/// Every queue of a broker with its last stored sample, handed to `each` one at a time.
pub async fn known_queues(db: &Db, broker_id: i64, mut each: impl FnMut(KnownQueue)) -> Result<(), sqlx::Error> {
    let sql = format!(
        "select q.id, q.vhost, q.name, q.kind, q.durable, q.arguments, q.policy, q.effective_policy, q.deleted_at,
                s.ts, {SAMPLE_COLUMNS}
         from queues q
         left join queue_samples s
           on s.queue_id = q.id and s.ts = (select max(ts) from queue_samples where queue_id = q.id)
         where q.broker_id = ?"
    );
    // Streamed row by row, and to the caller: `fetch_all` held every decoded row beside the
    // result (190 MB at 50,000 queues), and a list of them beside the poller's map another 26 MB,
    // of a start-up peak that stays as the process's high-water mark.
    let mut rows = sqlx::query(&sql).bind(broker_id).fetch(db);
    while let Some(row) = rows.try_next().await? {
        let ts: Option<i64> = row.try_get("ts")?;
        let last_sample = match ts {
            Some(ts) => Some((ts, sample_from_row(&row, 10)?)),
            None => None,
        };
        each(KnownQueue {
            id: row.try_get("id")?,
            meta: meta_from_row(&row)?,
            deleted_at: row.try_get("deleted_at")?,
            last_sample,
        });
    }
    Ok(())
}

/// Applies one poll's writes in a single transaction; returns the ids of `upserts`, in order.
pub async fn write_poll(db: &Db, write: &PollWrite) -> Result<Vec<i64>, sqlx::Error> {
    let mut tx = db.begin().await?;
    let mut ids = Vec::with_capacity(write.upserts.len());
    for meta in &write.upserts {
        let id: i64 = sqlx::query_scalar(
            "insert into queues (broker_id, vhost, name, kind, durable, arguments, policy, effective_policy, first_seen)
             values (?, ?, ?, ?, ?, ?, ?, ?, ?)
             on conflict (broker_id, vhost, name) do update set
               kind = excluded.kind, durable = excluded.durable, arguments = excluded.arguments,
               policy = excluded.policy, effective_policy = excluded.effective_policy, deleted_at = null
             returning id",
        )
        .bind(write.broker_id)
        .bind(&meta.vhost)
        .bind(&meta.name)
        .bind(&meta.kind)
        .bind(meta.durable)
        .bind(&meta.arguments)
        .bind(&meta.policy)
        .bind(&meta.effective_policy)
        .bind(write.ts)
        .fetch_one(&mut *tx)
        .await?;
        ids.push(id);
    }
    if !write.deleted.is_empty() {
        let list = serde_json::to_string(&write.deleted).expect("ids serialise");
        sqlx::query("update queues set deleted_at = ? where id in (select value from json_each(?))")
            .bind(write.ts)
            .bind(list)
            .execute(&mut *tx)
            .await?;
    }

    // All samples in one statement: the rows travel as one JSON array and SQLite unpacks them,
    // which avoids a round trip per row to sqlx's SQLite worker thread (10,000 rows per poll).
    let rows: Vec<[Option<i64>; 12]> = write
        .samples
        .iter()
        .copied()
        .chain(write.new_samples.iter().map(|&(index, s)| (ids[index], s)))
        .map(|(id, s)| {
            [
                Some(id),
                s.ready,
                s.unacked,
                s.consumers,
                s.publish_count,
                s.publish_rate_m,
                s.deliver_rate_m,
                s.ack_rate_m,
                s.redeliver_rate_m,
                s.head_ts,
                s.est_oldest_ts,
                s.est_bound,
            ]
        })
        .collect();
    if !rows.is_empty() {
        let json = serde_json::to_string(&rows).expect("samples serialise");
        sqlx::query(
            "insert or replace into queue_samples
               (queue_id, ts, ready, unacked, consumers, publish_count,
                publish_rate_m, deliver_rate_m, ack_rate_m, redeliver_rate_m, head_ts,
                est_oldest_ts, est_bound)
             select value ->> 0, ?1, value ->> 1, value ->> 2, value ->> 3, value ->> 4,
                    value ->> 5, value ->> 6, value ->> 7, value ->> 8, value ->> 9,
                    value ->> 10, value ->> 11
             from json_each(?2)",
        )
        .bind(write.ts)
        .bind(json)
        .execute(&mut *tx)
        .await?;
    }

    let b = &write.broker;
    sqlx::query(
        "insert or replace into broker_samples
           (broker_id, ts, ready, unacked, consumers, queues, publish_rate_m, confirm_rate_m, ack_rate_m,
            deliver_rate_m, redeliver_rate_m, unroutable_rate_m, poll_ms)
         values (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
    )
    .bind(write.broker_id)
    .bind(write.ts)
    .bind(b.ready)
    .bind(b.unacked)
    .bind(b.consumers)
    .bind(b.queues)
    .bind(b.publish_rate_m)
    .bind(b.confirm_rate_m)
    .bind(b.ack_rate_m)
    .bind(b.deliver_rate_m)
    .bind(b.redeliver_rate_m)
    .bind(b.unroutable_rate_m)
    .bind(b.poll_ms)
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(ids)
}

/// A queue found by its names, with its id, for history reads and deleted queues.
pub async fn find_queue(db: &Db, broker: &str, vhost: &str, name: &str) -> Result<Option<KnownQueue>, sqlx::Error> {
    let sql = format!(
        "select q.id, q.vhost, q.name, q.kind, q.durable, q.arguments, q.policy, q.effective_policy, q.deleted_at,
                s.ts, {SAMPLE_COLUMNS}
         from queues q join brokers b on b.id = q.broker_id
         left join queue_samples s
           on s.queue_id = q.id and s.ts = (select max(ts) from queue_samples where queue_id = q.id)
         where b.name = ? and q.vhost = ? and q.name = ?"
    );
    let row = sqlx::query(&sql).bind(broker).bind(vhost).bind(name).fetch_optional(db).await?;
    row.map(|row| {
        let ts: Option<i64> = row.try_get("ts")?;
        let last_sample = match ts {
            Some(ts) => Some((ts, sample_from_row(&row, 10)?)),
            None => None,
        };
        Ok(KnownQueue {
            id: row.try_get("id")?,
            meta: meta_from_row(&row)?,
            deleted_at: row.try_get("deleted_at")?,
            last_sample,
        })
    })
    .transpose()
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

/// Successful poll times of a broker in `[from, to]`, ascending.
async fn poll_times(db: &Db, broker_id: i64, from: i64, to: i64) -> Result<Vec<i64>, sqlx::Error> {
    sqlx::query_scalar("select ts from broker_samples where broker_id = ? and ts between ? and ? order by ts")
        .bind(broker_id)
        .bind(from)
        .bind(to)
        .fetch_all(db)
        .await
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
    db: &Db,
    broker_id: i64,
    queue_id: i64,
    from: i64,
    to: i64,
    step: i64,
    poll_interval_secs: i64,
) -> Result<Vec<QueuePoint>, sqlx::Error> {
    let sql = format!(
        "select ts, {SAMPLE_COLUMNS} from queue_samples where queue_id = ?1 and ts between
           coalesce((select max(ts) from queue_samples where queue_id = ?1 and ts <= ?2), ?2) and ?3
         order by ts"
    );
    let rows = sqlx::query(&sql).bind(queue_id).bind(from).bind(to).fetch_all(db).await?;
    let samples: Vec<(i64, StoredSample)> = rows
        .iter()
        .map(|r| Ok((r.try_get::<i64, _>(0)?, sample_from_row(r, 1)?)))
        .collect::<Result<_, sqlx::Error>>()?;
    let deleted_at: Option<i64> =
        sqlx::query_scalar("select deleted_at from queues where id = ?").bind(queue_id).fetch_one(db).await?;
    let polls = poll_times(db, broker_id, from - 2 * poll_interval_secs, to).await?;

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
    db: &Db,
    queue_ids: &[i64],
    since: i64,
    now: i64,
    step: i64,
) -> Result<std::collections::HashMap<i64, Vec<Option<i64>>>, sqlx::Error> {
    let mut out = std::collections::HashMap::new();
    if queue_ids.is_empty() {
        return Ok(out);
    }
    let ids = serde_json::to_string(queue_ids).expect("ids serialise");
    let rows = sqlx::query(
        "select s.queue_id, s.ts, s.ready + s.unacked
         from json_each(?1) j
         join queue_samples s on s.queue_id = j.value
           and s.ts >= coalesce((select max(ts) from queue_samples where queue_id = j.value and ts <= ?2), ?2)
         order by s.queue_id, s.ts",
    )
    .bind(ids)
    .bind(since)
    .fetch_all(db)
    .await?;
    let mut by_queue: std::collections::HashMap<i64, Vec<(i64, Option<i64>)>> = std::collections::HashMap::new();
    for row in &rows {
        by_queue.entry(row.try_get(0)?).or_default().push((row.try_get(1)?, row.try_get(2)?));
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
    db: &Db,
    queue_id: i64,
    since: i64,
    target: i64,
) -> Result<Option<(i64, Option<i64>)>, sqlx::Error> {
    let found: Option<i64> = sqlx::query_scalar(
        "select ts from queue_samples where queue_id = ? and ts >= ? and publish_count <= ? order by ts desc limit 1",
    )
    .bind(queue_id)
    .bind(since)
    .bind(target)
    .fetch_optional(db)
    .await?;
    let Some(ts) = found else { return Ok(None) };
    let next: Option<i64> = sqlx::query_scalar("select min(ts) from queue_samples where queue_id = ? and ts > ?")
        .bind(queue_id)
        .bind(ts)
        .fetch_one(db)
        .await?;
    Ok(Some((ts, next)))
}

/// The first sample of a queue since `since` that has its counts and holds messages: (ts,
/// publish_count, ready + unacked). An empty queue starts no lower bound of an age, and a new
/// quorum queue on 4.3 reports 0 messages for its first seconds while its publish counter
/// already counts them (3.10 leaves the keys out instead): such a sample would make the
/// messages present later look as if they came in unseen by the counter.
pub async fn first_sample(
    db: &Db,
    queue_id: i64,
    since: i64,
) -> Result<Option<(i64, Option<i64>, Option<i64>)>, sqlx::Error> {
    let row = sqlx::query(
        "select ts, publish_count, ready + unacked from queue_samples
         where queue_id = ? and ts >= ? and publish_count is not null and ready is not null and unacked is not null
           and ready + unacked > 0
         order by ts limit 1",
    )
    .bind(queue_id)
    .bind(since)
    .fetch_optional(db)
    .await?;
    row.map(|r| Ok((r.try_get(0)?, r.try_get(1)?, r.try_get(2)?))).transpose()
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
    db: &Db,
    broker_id: i64,
    from: i64,
    to: i64,
    step: i64,
) -> Result<Vec<BrokerPoint>, sqlx::Error> {
    let rows = sqlx::query(
        "select (ts - ?2) / ?4 as bucket, avg(ready), avg(unacked),
                avg(publish_rate_m), avg(confirm_rate_m), avg(ack_rate_m), avg(deliver_rate_m),
                avg(redeliver_rate_m), avg(unroutable_rate_m), avg(poll_ms)
         from broker_samples where broker_id = ?1 and ts between ?2 and ?3
         group by bucket order by bucket",
    )
    .bind(broker_id)
    .bind(from)
    .bind(to)
    .bind(step)
    .fetch_all(db)
    .await?;
    let milli = |v: Option<f64>| v.map(|m| m.round() / 1000.0);
    let mut by_bucket = std::collections::HashMap::new();
    for row in &rows {
        let bucket: i64 = row.try_get(0)?;
        by_bucket.insert(
            bucket,
            BrokerPoint {
                ts: from + bucket * step + step - 1,
                ready: row.try_get::<Option<f64>, _>(1)?.map(|v| v.round() as i64),
                unacked: row.try_get::<Option<f64>, _>(2)?.map(|v| v.round() as i64),
                publish_rate: milli(row.try_get(3)?),
                confirm_rate: milli(row.try_get(4)?),
                ack_rate: milli(row.try_get(5)?),
                deliver_rate: milli(row.try_get(6)?),
                redeliver_rate: milli(row.try_get(7)?),
                unroutable_rate: milli(row.try_get(8)?),
                poll_ms: row.try_get::<Option<f64>, _>(9)?.map(|v| v.round() as i64),
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
