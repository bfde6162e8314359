use async_trait::async_trait;
use futures_util::TryStreamExt;
use sqlx::Row;

use super::Sqlite;
use crate::storage::samples::{
    known_from_row, sample_from_row, BrokerBucket, DepthRow, KnownQueue, PollWrite, Samples, StoredSample,
    PRUNE_QUEUES_PER_STATEMENT, SAMPLE_COLUMNS,
};
use crate::storage::{Held, Result};

#[async_trait]
impl Samples for Sqlite {
    async fn broker_id(&self, name: &str) -> Result<i64> {
        sqlx::query("insert into brokers (name) values (?) on conflict (name) do nothing")
            .bind(name)
            .execute(&self.pool)
            .await?;
        sqlx::query_scalar("select id from brokers where name = ?").bind(name).fetch_one(&self.pool).await
    }

    async fn count_known_queues(&self, broker_id: i64) -> Result<i64> {
        sqlx::query_scalar("select count(*) from queues where broker_id = ?")
            .bind(broker_id)
            .fetch_one(&self.pool)
            .await
    }

    async fn known_queues(&self, broker_id: i64, each: &mut (dyn FnMut(KnownQueue) + Send)) -> Result<()> {
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
        let mut rows = sqlx::query(&sql).bind(broker_id).fetch(&self.pool);
        while let Some(row) = rows.try_next().await? {
            each(known_from_row(&row)?);
        }
        Ok(())
    }

    async fn write_poll(&self, write: &PollWrite, fence: Option<&Held>) -> Result<Option<Vec<i64>>> {
        let mut tx = self.pool.begin().await?;
        if let Some(held) = fence {
            if !super::leases::fence_in(&mut tx, held).await? {
                return Ok(None);
            }
        }
        let mut ids = Vec::with_capacity(write.upserts.len());
        for meta in &write.upserts {
            let id: i64 = sqlx::query_scalar(
                "insert into queues (broker_id, vhost, name, kind, durable, arguments, policy, effective_policy, first_seen)
                 values (?, ?, ?, ?, ?, ?, ?, ?, ?)
                 on conflict (broker_id, vhost, name) do update set
                   kind = excluded.kind, durable = excluded.durable, arguments = excluded.arguments,
                   policy = excluded.policy, effective_policy = excluded.effective_policy, deleted_at = null,
                   -- Back after it vanished: a new queue under the old name (migrations/sqlite/0031).
                   incarnation_since = case when queues.deleted_at is null then queues.incarnation_since
                                            else excluded.first_seen end
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
            .all_samples(&ids)
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
        Ok(Some(ids))
    }

    async fn find_queue(&self, broker: &str, vhost: &str, name: &str) -> Result<Option<KnownQueue>> {
        let sql = format!(
            "select q.id, q.vhost, q.name, q.kind, q.durable, q.arguments, q.policy, q.effective_policy, q.deleted_at,
                    s.ts, {SAMPLE_COLUMNS}
             from queues q join brokers b on b.id = q.broker_id
             left join queue_samples s
               on s.queue_id = q.id and s.ts = (select max(ts) from queue_samples where queue_id = q.id)
             where b.name = ? and q.vhost = ? and q.name = ?"
        );
        let row = sqlx::query(&sql).bind(broker).bind(vhost).bind(name).fetch_optional(&self.pool).await?;
        row.as_ref().map(|r| known_from_row(r)).transpose()
    }

    async fn queue_samples(&self, queue_id: i64, from: i64, to: i64) -> Result<Vec<(i64, StoredSample)>> {
        let sql = format!(
            "select ts, {SAMPLE_COLUMNS} from queue_samples where queue_id = ?1 and ts between
               coalesce((select max(ts) from queue_samples where queue_id = ?1 and ts <= ?2), ?2) and ?3
             order by ts"
        );
        let rows = sqlx::query(&sql).bind(queue_id).bind(from).bind(to).fetch_all(&self.pool).await?;
        rows.iter().map(|r| Ok((r.try_get::<i64, _>(0)?, sample_from_row(r, 1)?))).collect()
    }

    async fn queue_deleted_at(&self, queue_id: i64) -> Result<Option<i64>> {
        sqlx::query_scalar("select deleted_at from queues where id = ?").bind(queue_id).fetch_one(&self.pool).await
    }

    async fn poll_times(&self, broker_id: i64, from: i64, to: i64) -> Result<Vec<i64>> {
        sqlx::query_scalar("select ts from broker_samples where broker_id = ? and ts between ? and ? order by ts")
            .bind(broker_id)
            .bind(from)
            .bind(to)
            .fetch_all(&self.pool)
            .await
    }

    async fn last_poll_at(&self, broker_id: i64) -> Result<Option<i64>> {
        sqlx::query_scalar("select max(ts) from broker_samples where broker_id = ?")
            .bind(broker_id)
            .fetch_one(&self.pool)
            .await
    }

    async fn depths_since(&self, queue_ids: &[i64], since: i64) -> Result<Vec<(i64, i64, Option<i64>)>> {
        let ids = serde_json::to_string(queue_ids).expect("ids serialise");
        sqlx::query_as(
            "select s.queue_id, s.ts, s.ready + s.unacked
             from json_each(?1) j
             join queue_samples s on s.queue_id = j.value
               and s.ts >= coalesce((select max(ts) from queue_samples where queue_id = j.value and ts <= ?2), ?2)
             order by s.queue_id, s.ts",
        )
        .bind(ids)
        .bind(since)
        .fetch_all(&self.pool)
        .await
    }

    async fn publish_crossing(&self, queue_id: i64, since: i64, target: i64) -> Result<Option<(i64, Option<i64>)>> {
        let found: Option<i64> = sqlx::query_scalar(
            "select ts from queue_samples where queue_id = ? and ts >= ? and publish_count <= ? order by ts desc limit 1",
        )
        .bind(queue_id)
        .bind(since)
        .bind(target)
        .fetch_optional(&self.pool)
        .await?;
        let Some(ts) = found else { return Ok(None) };
        let next: Option<i64> = sqlx::query_scalar("select min(ts) from queue_samples where queue_id = ? and ts > ?")
            .bind(queue_id)
            .bind(ts)
            .fetch_one(&self.pool)
            .await?;
        Ok(Some((ts, next)))
    }

    async fn first_sample(&self, queue_id: i64, since: i64) -> Result<Option<(i64, Option<i64>, Option<i64>)>> {
        sqlx::query_as(
            "select ts, publish_count, ready + unacked from queue_samples
             where queue_id = ? and ts >= ? and publish_count is not null and ready is not null and unacked is not null
               and ready + unacked > 0
             order by ts limit 1",
        )
        .bind(queue_id)
        .bind(since)
        .fetch_optional(&self.pool)
        .await
    }

    async fn last_seen_empty(&self, queue_id: i64, since: i64) -> Result<Option<i64>> {
        sqlx::query_scalar(
            "select max(ts) from queue_samples where queue_id = ? and ts >= ? and ready = 0 and unacked = 0",
        )
        .bind(queue_id)
        .bind(since)
        .fetch_one(&self.pool)
        .await
    }

    async fn depths_after(&self, queue_id: i64, after: i64, limit: i64) -> Result<Vec<DepthRow>> {
        sqlx::query_as(
            "select ts, ready, unacked, ack_rate_m from queue_samples where queue_id = ? and ts > ? order by ts limit ?",
        )
        .bind(queue_id)
        .bind(after)
        .bind(limit)
        .fetch_all(&self.pool)
        .await
    }

    async fn broker_buckets(&self, broker_id: i64, from: i64, to: i64, step: i64) -> Result<Vec<BrokerBucket>> {
        sqlx::query_as(
            "select (ts - ?2) / ?4 as bucket, avg(ready) as ready, avg(unacked) as unacked,
                    avg(publish_rate_m) as publish_rate_m, avg(confirm_rate_m) as confirm_rate_m,
                    avg(ack_rate_m) as ack_rate_m, avg(deliver_rate_m) as deliver_rate_m,
                    avg(redeliver_rate_m) as redeliver_rate_m, avg(unroutable_rate_m) as unroutable_rate_m,
                    avg(poll_ms) as poll_ms
             from broker_samples where broker_id = ?1 and ts between ?2 and ?3
             group by bucket order by bucket",
        )
        .bind(broker_id)
        .bind(from)
        .bind(to)
        .bind(step)
        .fetch_all(&self.pool)
        .await
    }

    async fn prune_samples(&self, before: i64) -> Result<u64> {
        let mut removed = 0;
        // queue_samples is keyed by (queue_id, ts) and has no index on ts alone (it would cost more
        // bytes per sample than the sample): delete queue by queue, in batches, each a short write.
        let ids: Vec<i64> = sqlx::query_scalar("select id from queues").fetch_all(&self.pool).await?;
        for batch in ids.chunks(PRUNE_QUEUES_PER_STATEMENT) {
            let list = serde_json::to_string(batch).expect("ids serialise");
            removed +=
                sqlx::query("delete from queue_samples where queue_id in (select value from json_each(?)) and ts < ?")
                    .bind(list)
                    .bind(before)
                    .execute(&self.pool)
                    .await?
                    .rows_affected();
        }
        removed += sqlx::query("delete from broker_samples where ts < ?")
            .bind(before)
            .execute(&self.pool)
            .await?
            .rows_affected();
        Ok(removed)
    }

    async fn prepare_partitions(&self, _now: i64) -> Result<()> {
        // SQLite has no partitions: retention deletes rows.
        Ok(())
    }
}
