use std::collections::hash_map::Entry;
use std::collections::HashMap;

use async_trait::async_trait;
use futures_util::TryStreamExt;
use sqlx::Row;

use super::fates::text;
use super::partitions::QUEUE_SAMPLES;
use super::Postgres;
use crate::storage::samples::{
    known_from_row, sample_from_row, BrokerBucket, DepthRow, KnownQueue, PollWrite, QueueMeta, Samples, StoredSample,
    PRUNE_QUEUES_PER_STATEMENT, SAMPLE_COLUMNS,
};
use crate::storage::{Held, Result};

/// A queue with its newest sample: one index probe per queue (the lateral join), where a
/// correlated `max(ts)` comparison would read each queue's samples twice.
fn known_queue_sql(filter: &str) -> String {
    format!(
        "select q.id, q.vhost, q.name, q.kind, q.durable, q.arguments, q.policy, q.effective_policy, q.deleted_at,
                s.ts, {SAMPLE_COLUMNS}
         from queues q
         left join lateral (select ts, {SAMPLE_COLUMNS} from queue_samples
                            where queue_id = q.id order by ts desc limit 1) s on true
         {filter}"
    )
}

#[async_trait]
impl Samples for Postgres {
    async fn broker_id(&self, name: &str) -> Result<i64> {
        let name = text(name);
        sqlx::query("insert into brokers (name) values ($1) on conflict (name) do nothing")
            .bind(&name)
            .execute(&self.pool)
            .await?;
        sqlx::query_scalar("select id from brokers where name = $1").bind(&name).fetch_one(&self.pool).await
    }

    async fn count_known_queues(&self, broker_id: i64) -> Result<i64> {
        sqlx::query_scalar("select count(*) from queues where broker_id = $1")
            .bind(broker_id)
            .fetch_one(&self.pool)
            .await
    }

    async fn known_queues(&self, broker_id: i64, each: &mut (dyn FnMut(KnownQueue) + Send)) -> Result<()> {
        let sql = known_queue_sql("where q.broker_id = $1");
        // Streamed to the caller, as on SQLite: 50,000 rows held at once would stay as the
        // process's memory high-water mark.
        let mut rows = sqlx::query(&sql).bind(broker_id).fetch(&self.pool);
        while let Some(row) = rows.try_next().await? {
            each(known_from_row(&row)?);
        }
        Ok(())
    }

    async fn write_poll(&self, write: &PollWrite, fence: Option<&Held>) -> Result<Option<Vec<i64>>> {
        // Every kind of row in one statement each, whatever the number of queues: the values
        // travel as arrays and `unnest` makes them rows. A statement per row is a round trip to
        // the server per row, thousands per poll.
        let mut tx = self.pool.begin().await?;
        if let Some(held) = fence {
            if !super::leases::fence_in(&mut tx, held).await? {
                return Ok(None);
            }
        }
        let ids = upsert_queues(&mut tx, write).await?;
        if !write.deleted.is_empty() {
            sqlx::query("update queues set deleted_at = $1 where id = any($2)")
                .bind(write.ts)
                .bind(&write.deleted)
                .execute(&mut *tx)
                .await?;
        }
        insert_samples(&mut tx, write, &ids).await?;
        let b = &write.broker;
        sqlx::query(
            "insert into broker_samples
               (broker_id, ts, ready, unacked, consumers, queues, publish_rate_m, confirm_rate_m, ack_rate_m,
                deliver_rate_m, redeliver_rate_m, unroutable_rate_m, poll_ms)
             values ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)
             on conflict (broker_id, ts) do update set
               ready = excluded.ready, unacked = excluded.unacked, consumers = excluded.consumers,
               queues = excluded.queues, publish_rate_m = excluded.publish_rate_m,
               confirm_rate_m = excluded.confirm_rate_m, ack_rate_m = excluded.ack_rate_m,
               deliver_rate_m = excluded.deliver_rate_m, redeliver_rate_m = excluded.redeliver_rate_m,
               unroutable_rate_m = excluded.unroutable_rate_m, poll_ms = excluded.poll_ms",
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
        Ok(Some(ids))
    }

    async fn find_queue(&self, broker: &str, vhost: &str, name: &str) -> Result<Option<KnownQueue>> {
        let sql = known_queue_sql(
            "where q.broker_id = (select id from brokers where name = $1) and q.vhost = $2 and q.name = $3",
        );
        let row =
            sqlx::query(&sql).bind(text(broker)).bind(text(vhost)).bind(text(name)).fetch_optional(&self.pool).await?;
        row.as_ref().map(|r| known_from_row(r)).transpose()
    }

    async fn queue_samples(&self, queue_id: i64, from: i64, to: i64) -> Result<Vec<(i64, StoredSample)>> {
        let sql = format!(
            "select ts, {SAMPLE_COLUMNS} from queue_samples where queue_id = $1 and ts between
               coalesce((select max(ts) from queue_samples where queue_id = $1 and ts <= $2), $2) and $3
             order by ts"
        );
        let rows = sqlx::query(&sql).bind(queue_id).bind(from).bind(to).fetch_all(&self.pool).await?;
        rows.iter().map(|r| Ok((r.try_get::<i64, _>(0)?, sample_from_row(r, 1)?))).collect()
    }

    async fn queue_deleted_at(&self, queue_id: i64) -> Result<Option<i64>> {
        sqlx::query_scalar("select deleted_at from queues where id = $1").bind(queue_id).fetch_one(&self.pool).await
    }

    async fn poll_times(&self, broker_id: i64, from: i64, to: i64) -> Result<Vec<i64>> {
        sqlx::query_scalar("select ts from broker_samples where broker_id = $1 and ts between $2 and $3 order by ts")
            .bind(broker_id)
            .bind(from)
            .bind(to)
            .fetch_all(&self.pool)
            .await
    }

    async fn last_poll_at(&self, broker_id: i64) -> Result<Option<i64>> {
        sqlx::query_scalar("select max(ts) from broker_samples where broker_id = $1")
            .bind(broker_id)
            .fetch_one(&self.pool)
            .await
    }

    async fn depths_since(&self, queue_ids: &[i64], since: i64) -> Result<Vec<(i64, i64, Option<i64>)>> {
        sqlx::query_as(
            "select s.queue_id, s.ts, s.ready + s.unacked
             from unnest($1::bigint[]) as j(id)
             join queue_samples s on s.queue_id = j.id
               and s.ts >= coalesce((select max(ts) from queue_samples where queue_id = j.id and ts <= $2), $2)
             order by s.queue_id, s.ts",
        )
        .bind(queue_ids)
        .bind(since)
        .fetch_all(&self.pool)
        .await
    }

    async fn publish_crossing(&self, queue_id: i64, since: i64, target: i64) -> Result<Option<(i64, Option<i64>)>> {
        let found: Option<i64> = sqlx::query_scalar(
            "select ts from queue_samples where queue_id = $1 and ts >= $2 and publish_count <= $3
             order by ts desc limit 1",
        )
        .bind(queue_id)
        .bind(since)
        .bind(target)
        .fetch_optional(&self.pool)
        .await?;
        let Some(ts) = found else { return Ok(None) };
        let next: Option<i64> = sqlx::query_scalar("select min(ts) from queue_samples where queue_id = $1 and ts > $2")
            .bind(queue_id)
            .bind(ts)
            .fetch_one(&self.pool)
            .await?;
        Ok(Some((ts, next)))
    }

    async fn first_sample(&self, queue_id: i64, since: i64) -> Result<Option<(i64, Option<i64>, Option<i64>)>> {
        sqlx::query_as(
            "select ts, publish_count, ready + unacked from queue_samples
             where queue_id = $1 and ts >= $2 and publish_count is not null and ready is not null
               and unacked is not null and ready + unacked > 0
             order by ts limit 1",
        )
        .bind(queue_id)
        .bind(since)
        .fetch_optional(&self.pool)
        .await
    }

    async fn last_seen_empty(&self, queue_id: i64, since: i64) -> Result<Option<i64>> {
        sqlx::query_scalar(
            "select max(ts) from queue_samples where queue_id = $1 and ts >= $2 and ready = 0 and unacked = 0",
        )
        .bind(queue_id)
        .bind(since)
        .fetch_one(&self.pool)
        .await
    }

    async fn depths_after(&self, queue_id: i64, after: i64, limit: i64) -> Result<Vec<DepthRow>> {
        sqlx::query_as(
            "select ts, ready, unacked, ack_rate_m from queue_samples where queue_id = $1 and ts > $2
             order by ts limit $3",
        )
        .bind(queue_id)
        .bind(after)
        .bind(limit)
        .fetch_all(&self.pool)
        .await
    }

    async fn broker_buckets(&self, broker_id: i64, from: i64, to: i64, step: i64) -> Result<Vec<BrokerBucket>> {
        // avg() of a bigint is numeric here: read as a double, as SQLite's avg() gives it.
        sqlx::query_as(
            "select (ts - $2) / $4 as bucket, avg(ready)::float8 as ready, avg(unacked)::float8 as unacked,
                    avg(publish_rate_m)::float8 as publish_rate_m, avg(confirm_rate_m)::float8 as confirm_rate_m,
                    avg(ack_rate_m)::float8 as ack_rate_m, avg(deliver_rate_m)::float8 as deliver_rate_m,
                    avg(redeliver_rate_m)::float8 as redeliver_rate_m,
                    avg(unroutable_rate_m)::float8 as unroutable_rate_m, avg(poll_ms)::float8 as poll_ms
             from broker_samples where broker_id = $1 and ts between $2 and $3
             group by 1 order by 1",
        )
        .bind(broker_id)
        .bind(from)
        .bind(to)
        .bind(step)
        .fetch_all(&self.pool)
        .await
    }

    async fn prepare_partitions(&self, now: i64) -> Result<()> {
        self.prepare_days(now).await
    }

    async fn prune_samples(&self, before: i64) -> Result<u64> {
        // Whole days first. Raw samples keep no value in force past their window (the poller
        // writes every queue's hourly keyframe, and retention keeps an hour before the last
        // hour rolled up), so a day before `before` goes with all its rows.
        let mut removed = self.drop_days_before(QUEUE_SAMPLES, before, false).await?;
        // Then the rows of the day that straddles the cutoff and of the default partition: by
        // queue, in batches, as on SQLite: the key (queue_id, ts) finds each queue's old rows,
        // and each delete is a short transaction.
        let ids: Vec<i64> = sqlx::query_scalar("select id from queues").fetch_all(&self.pool).await?;
        for batch in ids.chunks(PRUNE_QUEUES_PER_STATEMENT) {
            removed += sqlx::query("delete from queue_samples where queue_id = any($1) and ts < $2")
                .bind(batch)
                .bind(before)
                .execute(&self.pool)
                .await?
                .rows_affected();
        }
        removed += sqlx::query("delete from broker_samples where ts < $1")
            .bind(before)
            .execute(&self.pool)
            .await?
            .rows_affected();
        Ok(removed)
    }
}

/// Inserts or updates `write.upserts` in one statement; returns their ids in order. A queue
/// named twice in one poll is written once, with its last metadata, as SQLite's row-by-row
/// upsert leaves it (PostgreSQL refuses to update one row twice in one statement).
async fn upsert_queues(tx: &mut sqlx::PgConnection, write: &PollWrite) -> Result<Vec<i64>> {
    if write.upserts.is_empty() {
        return Ok(Vec::new());
    }
    let mut unique: Vec<&QueueMeta> = Vec::with_capacity(write.upserts.len());
    let mut keys: Vec<(String, String)> = Vec::with_capacity(write.upserts.len());
    let mut at: HashMap<(String, String), usize> = HashMap::with_capacity(write.upserts.len());
    for meta in &write.upserts {
        let key = (text(&meta.vhost).into_owned(), text(&meta.name).into_owned());
        match at.entry(key.clone()) {
            Entry::Occupied(e) => unique[*e.get()] = meta,
            Entry::Vacant(e) => {
                e.insert(unique.len());
                unique.push(meta);
            }
        }
        keys.push(key);
    }
    let column = |f: fn(&QueueMeta) -> &str| unique.iter().map(|m| text(f(m)).into_owned()).collect::<Vec<String>>();
    let rows = sqlx::query(
        "insert into queues (broker_id, vhost, name, kind, durable, arguments, policy, effective_policy, first_seen)
         select $1, u.vhost, u.name, u.kind, u.durable, u.arguments, u.policy, u.effective_policy, $2
         from unnest($3::text[], $4::text[], $5::text[], $6::boolean[], $7::text[], $8::text[], $9::text[])
           as u(vhost, name, kind, durable, arguments, policy, effective_policy)
         on conflict (broker_id, vhost, name) do update set
           kind = excluded.kind, durable = excluded.durable, arguments = excluded.arguments,
           policy = excluded.policy, effective_policy = excluded.effective_policy, deleted_at = null,
           -- Back after it vanished: a new queue under the old name (migrations/postgres/0010).
           incarnation_since = case when queues.deleted_at is null then queues.incarnation_since
                            else excluded.first_seen end
         returning id, vhost, name",
    )
    .bind(write.broker_id)
    .bind(write.ts)
    .bind(column(|m| &m.vhost))
    .bind(column(|m| &m.name))
    .bind(column(|m| &m.kind))
    .bind(unique.iter().map(|m| m.durable).collect::<Vec<_>>())
    .bind(column(|m| &m.arguments))
    .bind(unique.iter().map(|m| m.policy.as_deref().map(|p| text(p).into_owned())).collect::<Vec<_>>())
    .bind(column(|m| &m.effective_policy))
    .fetch_all(&mut *tx)
    .await?;
    let mut id_of = HashMap::with_capacity(rows.len());
    for row in rows {
        id_of.insert((row.try_get::<String, _>(1)?, row.try_get::<String, _>(2)?), row.try_get::<i64, _>(0)?);
    }
    keys.iter()
        .map(|key| {
            id_of.get(key).copied().ok_or_else(|| {
                sqlx::Error::Protocol(format!("the upsert of queue {:?} in vhost {:?} returned no id", key.1, key.0))
            })
        })
        .collect()
}

/// Inserts or replaces the poll's samples in one statement. A queue sampled twice in one poll
/// keeps its last sample, as SQLite's `insert or replace` does.
async fn insert_samples(tx: &mut sqlx::PgConnection, write: &PollWrite, ids: &[i64]) -> Result<()> {
    let mut rows: Vec<(i64, StoredSample)> = Vec::with_capacity(write.samples.len() + write.new_samples.len());
    let mut at: HashMap<i64, usize> = HashMap::with_capacity(rows.capacity());
    for (id, sample) in write.all_samples(ids) {
        match at.entry(id) {
            Entry::Occupied(e) => rows[*e.get()].1 = sample,
            Entry::Vacant(e) => {
                e.insert(rows.len());
                rows.push((id, sample));
            }
        }
    }
    if rows.is_empty() {
        return Ok(());
    }
    let column = |f: fn(&StoredSample) -> Option<i64>| rows.iter().map(|(_, s)| f(s)).collect::<Vec<_>>();
    sqlx::query(
        "insert into queue_samples
           (queue_id, ts, ready, unacked, consumers, publish_count, publish_rate_m, deliver_rate_m, ack_rate_m,
            redeliver_rate_m, head_ts, est_oldest_ts, est_bound)
         select u.queue_id, $1, u.ready, u.unacked, u.consumers, u.publish_count, u.publish_rate_m,
                u.deliver_rate_m, u.ack_rate_m, u.redeliver_rate_m, u.head_ts, u.est_oldest_ts, u.est_bound
         from unnest($2::bigint[], $3::bigint[], $4::bigint[], $5::bigint[], $6::bigint[], $7::bigint[],
                     $8::bigint[], $9::bigint[], $10::bigint[], $11::bigint[], $12::bigint[], $13::bigint[])
           as u(queue_id, ready, unacked, consumers, publish_count, publish_rate_m, deliver_rate_m, ack_rate_m,
                redeliver_rate_m, head_ts, est_oldest_ts, est_bound)
         on conflict (queue_id, ts) do update set
           ready = excluded.ready, unacked = excluded.unacked, consumers = excluded.consumers,
           publish_count = excluded.publish_count, publish_rate_m = excluded.publish_rate_m,
           deliver_rate_m = excluded.deliver_rate_m, ack_rate_m = excluded.ack_rate_m,
           redeliver_rate_m = excluded.redeliver_rate_m, head_ts = excluded.head_ts,
           est_oldest_ts = excluded.est_oldest_ts, est_bound = excluded.est_bound",
    )
    .bind(write.ts)
    .bind(rows.iter().map(|(id, _)| *id).collect::<Vec<i64>>())
    .bind(column(|s| s.ready))
    .bind(column(|s| s.unacked))
    .bind(column(|s| s.consumers))
    .bind(column(|s| s.publish_count))
    .bind(column(|s| s.publish_rate_m))
    .bind(column(|s| s.deliver_rate_m))
    .bind(column(|s| s.ack_rate_m))
    .bind(column(|s| s.redeliver_rate_m))
    .bind(column(|s| s.head_ts))
    .bind(column(|s| s.est_oldest_ts))
    .bind(column(|s| s.est_bound))
    .execute(&mut *tx)
    .await?;
    Ok(())
}
