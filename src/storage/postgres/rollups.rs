use async_trait::async_trait;

use super::partitions::{QUEUE_ROLLUPS_1H, QUEUE_ROLLUPS_1M};
use super::Postgres;
use crate::storage::rollups::{
    rollup_at, rollup_values, sums_at, BucketPolls, Cutoffs, Level, MetricSums, QueueBucket, QueueRollup, Rollups,
    BROKER_POLL_METRICS, BROKER_ROLLUP_METRICS, ROLLUP_COLUMNS, ROLLUP_VALUES,
};
use crate::storage::samples::{sample_from_row, StoredSample, PRUNE_QUEUES_PER_STATEMENT, SAMPLE_COLUMNS};
use crate::storage::Result;

/// Queue rows per insert. The rows travel as one array per column (`unnest`), so the limit of
/// 65,535 parameters does not apply; this only bounds one statement's size.
const ROWS_PER_INSERT: usize = 5000;

/// The broker roll-up tables' columns after `broker_id, bucket`.
const BROKER_ROLLUP_COLUMNS: &str = "samples, last_ts, ready_avg, ready_max, unacked_avg, unacked_max, consumers_avg, \
queues_last, publish_rate_avg_m, confirm_rate_avg_m, ack_rate_avg_m, deliver_rate_avg_m, redeliver_rate_avg_m, \
unroutable_rate_avg_m, poll_ms_avg, poll_ms_max";

/// `set c = excluded.c` for each of `columns`: an upsert that replaces the row, as SQLite's
/// `insert or replace` does.
fn replace_all(columns: &str) -> String {
    columns.split(", ").map(|c| format!("{c} = excluded.{c}")).collect::<Vec<_>>().join(", ")
}

#[async_trait]
impl Rollups for Postgres {
    async fn rolled_up_until(&self, broker_id: i64, level: Level) -> Result<Option<i64>> {
        sqlx::query_scalar("select done_until from rollup_progress where broker_id = $1 and resolution = $2")
            .bind(broker_id)
            .bind(level.name())
            .fetch_optional(&self.pool)
            .await
    }

    async fn oldest_poll(&self, broker_id: i64) -> Result<Option<i64>> {
        sqlx::query_scalar("select min(ts) from broker_samples where broker_id = $1")
            .bind(broker_id)
            .fetch_one(&self.pool)
            .await
    }

    async fn oldest_minute(&self, broker_id: i64) -> Result<Option<i64>> {
        sqlx::query_scalar("select min(bucket) from broker_rollups_1m where broker_id = $1")
            .bind(broker_id)
            .fetch_one(&self.pool)
            .await
    }

    async fn polls_between(&self, broker_id: i64, from: i64, to: i64) -> Result<Vec<i64>> {
        sqlx::query_scalar("select ts from broker_samples where broker_id = $1 and ts >= $2 and ts < $3 order by ts")
            .bind(broker_id)
            .bind(from)
            .bind(to)
            .fetch_all(&self.pool)
            .await
    }

    async fn bucket_polls(&self, broker_id: i64, level: Level, from: i64, to: i64) -> Result<Vec<BucketPolls>> {
        let sql = format!(
            "select bucket, samples, last_ts from {} where broker_id = $1 and bucket >= $2 and bucket < $3",
            level.broker_table()
        );
        let rows: Vec<(i64, i64, i64)> =
            sqlx::query_as(&sql).bind(broker_id).bind(from).bind(to).fetch_all(&self.pool).await?;
        Ok(rows.into_iter().map(|(bucket, polls, last_poll_ts)| BucketPolls { bucket, polls, last_poll_ts }).collect())
    }

    async fn queue_rollups(&self, queue_id: i64, level: Level, from: i64, to: i64) -> Result<Vec<(i64, QueueRollup)>> {
        let table = level.queue_table();
        let sql = format!(
            "select bucket, {ROLLUP_COLUMNS} from {table} where queue_id = $1 and bucket >=
               coalesce((select max(bucket) from {table} where queue_id = $1 and bucket < $2), $2) and bucket < $3
             order by bucket"
        );
        let rows = sqlx::query(&sql).bind(queue_id).bind(from).bind(to).fetch_all(&self.pool).await?;
        rows.iter().map(|row| Ok((sqlx::Row::try_get(row, 0)?, rollup_at(row, 1)?))).collect()
    }

    async fn queue_samples_from(&self, queue_id: i64, from: i64, to: i64) -> Result<Vec<(i64, StoredSample)>> {
        let sql = format!(
            "select ts, {SAMPLE_COLUMNS} from queue_samples where queue_id = $1 and ts >=
               coalesce((select max(ts) from queue_samples where queue_id = $1 and ts < $2), $2) and ts < $3
             order by ts"
        );
        let rows = sqlx::query(&sql).bind(queue_id).bind(from).bind(to).fetch_all(&self.pool).await?;
        rows.iter().map(|row| Ok((sqlx::Row::try_get(row, 0)?, sample_from_row(row, 1)?))).collect()
    }

    async fn broker_queue_samples(&self, broker_id: i64, from: i64, to: i64) -> Result<Vec<(i64, i64, StoredSample)>> {
        let sql = format!(
            "select s.queue_id, s.ts, {SAMPLE_COLUMNS} from queues q
             join queue_samples s on s.queue_id = q.id and s.ts >= $2 and s.ts < $3
             where q.broker_id = $1 order by s.queue_id, s.ts"
        );
        let rows = sqlx::query(&sql).bind(broker_id).bind(from).bind(to).fetch_all(&self.pool).await?;
        rows.iter()
            .map(|row| Ok((sqlx::Row::try_get(row, 0)?, sqlx::Row::try_get(row, 1)?, sample_from_row(row, 2)?)))
            .collect()
    }

    async fn samples_in_force(&self, queue_ids: &[i64], before: i64) -> Result<Vec<(i64, StoredSample)>> {
        // Per queue, its newest row before `before` by the primary key (queue_id, ts), read
        // backwards: one index probe each.
        let sql = format!(
            "select j.id, s.* from unnest($1::bigint[]) j (id)
             cross join lateral (select {SAMPLE_COLUMNS} from queue_samples
                                 where queue_id = j.id and ts < $2 order by ts desc limit 1) s"
        );
        let rows = sqlx::query(&sql).bind(queue_ids).bind(before).fetch_all(&self.pool).await?;
        rows.iter().map(|row| Ok((sqlx::Row::try_get(row, 0)?, sample_from_row(row, 1)?))).collect()
    }

    async fn broker_queue_minutes(&self, broker_id: i64, from: i64, to: i64) -> Result<Vec<QueueBucket>> {
        let sql = format!(
            "select r.queue_id, r.bucket, {ROLLUP_COLUMNS} from queues q
             join queue_rollups_1m r on r.queue_id = q.id and r.bucket >= $2 and r.bucket < $3
             where q.broker_id = $1 order by r.queue_id, r.bucket"
        );
        let rows = sqlx::query(&sql).bind(broker_id).bind(from).bind(to).fetch_all(&self.pool).await?;
        rows.iter()
            .map(|row| Ok((sqlx::Row::try_get(row, 0)?, sqlx::Row::try_get(row, 1)?, rollup_at(row, 2)?)))
            .collect()
    }

    async fn minutes_in_force(
        &self,
        broker_id: i64,
        queue_ids: &[i64],
        before: i64,
    ) -> Result<Vec<(i64, StoredSample)>> {
        let sql = format!(
            "select q.id, r.* from queues q
             cross join lateral (select {SAMPLE_COLUMNS} from queue_rollups_1m
                                 where queue_id = q.id and bucket < $2 order by bucket desc limit 1) r
             where q.broker_id = $1 and q.id = any($3)"
        );
        let rows = sqlx::query(&sql).bind(broker_id).bind(before).bind(queue_ids).fetch_all(&self.pool).await?;
        rows.iter().map(|row| Ok((sqlx::Row::try_get(row, 0)?, sample_from_row(row, 1)?))).collect()
    }

    async fn save_rollups(
        &self,
        broker_id: i64,
        level: Level,
        start: i64,
        end: i64,
        rows: &[QueueBucket],
    ) -> Result<()> {
        let mut tx = self.pool.begin().await?;
        // One array per column, unnested into rows: a statement per 5,000 rows, not per row.
        let arrays: Vec<String> = (1..=ROLLUP_VALUES).map(|i| format!("${i}::bigint[]")).collect();
        let sql = format!(
            "insert into {} (queue_id, bucket, {ROLLUP_COLUMNS}) select * from unnest({})
             on conflict (queue_id, bucket) do update set {}",
            level.queue_table(),
            arrays.join(", "),
            replace_all(ROLLUP_COLUMNS)
        );
        for chunk in rows.chunks(ROWS_PER_INSERT) {
            let mut columns = vec![Vec::with_capacity(chunk.len()); ROLLUP_VALUES];
            for row in chunk {
                for (column, value) in columns.iter_mut().zip(rollup_values(row)) {
                    column.push(value);
                }
            }
            let mut query = sqlx::query(&sql);
            for column in columns {
                query = query.bind(column);
            }
            query.execute(&mut *tx).await?;
        }
        // Broker-wide buckets straight from broker_samples (one row per poll, so this is cheap).
        // `avg` of a bigint is numeric here (SQLite's is a real): cast to the column's type.
        let sql = format!(
            "insert into {} (broker_id, bucket, {BROKER_ROLLUP_COLUMNS})
             select $1, b, n, last_ts, ready_avg, ready_max, unacked_avg, unacked_max, consumers_avg,
                    (select queues from broker_samples l where l.broker_id = $1 and l.ts = g.last_ts),
                    p, c, a, d, r, u, poll_avg, poll_max
             from (select (ts / $4) * $4 as b, count(*) as n, max(ts) as last_ts,
                          avg(ready)::double precision as ready_avg, max(ready) as ready_max,
                          avg(unacked)::double precision as unacked_avg, max(unacked) as unacked_max,
                          avg(consumers)::double precision as consumers_avg,
                          avg(publish_rate_m)::double precision as p, avg(confirm_rate_m)::double precision as c,
                          avg(ack_rate_m)::double precision as a, avg(deliver_rate_m)::double precision as d,
                          avg(redeliver_rate_m)::double precision as r,
                          avg(unroutable_rate_m)::double precision as u,
                          avg(poll_ms)::double precision as poll_avg, max(poll_ms) as poll_max
                   from broker_samples where broker_id = $1 and ts >= $2 and ts < $3 group by b) g
             on conflict (broker_id, bucket) do update set {}",
            level.broker_table(),
            replace_all(BROKER_ROLLUP_COLUMNS)
        );
        sqlx::query(&sql).bind(broker_id).bind(start).bind(end).bind(level.secs()).execute(&mut *tx).await?;
        sqlx::query(
            "insert into rollup_progress (broker_id, resolution, done_until) values ($1, $2, $3)
             on conflict (broker_id, resolution) do update set done_until = excluded.done_until",
        )
        .bind(broker_id)
        .bind(level.name())
        .bind(end)
        .execute(&mut *tx)
        .await?;
        tx.commit().await
    }

    async fn prune_rollups(&self, cutoffs: Cutoffs) -> Result<u64> {
        // Whole days first, each queue's row in force kept; the deletes below then go through
        // the day that straddles a cutoff and the default partition only.
        let mut removed = self.drop_days_before(QUEUE_ROLLUPS_1M, cutoffs.minute, true).await?;
        removed += self.drop_days_before(QUEUE_ROLLUPS_1H, cutoffs.hour, true).await?;
        // By queue, in batches, as on SQLite: each delete a short transaction.
        let ids: Vec<i64> = sqlx::query_scalar("select id from queues").fetch_all(&self.pool).await?;
        for (level, cutoff) in [(Level::Minute, cutoffs.minute), (Level::Hour, cutoffs.hour)] {
            let table = level.queue_table();
            let sql = format!(
                "delete from {table} where queue_id = any($1) and bucket < $2
                   and bucket < (select max(bucket) from {table} r where r.queue_id = {table}.queue_id and r.bucket < $2)"
            );
            for batch in ids.chunks(PRUNE_QUEUES_PER_STATEMENT) {
                removed += sqlx::query(&sql).bind(batch).bind(cutoff).execute(&self.pool).await?.rows_affected();
            }
            let sql = format!("delete from {} where bucket < $1", level.broker_table());
            removed += sqlx::query(&sql).bind(cutoff).execute(&self.pool).await?.rows_affected();
        }
        for level in [Level::Minute, Level::Hour] {
            let sql = format!(
                "delete from {} where queue_id in (select id from queues where deleted_at < $1)",
                level.queue_table()
            );
            removed += sqlx::query(&sql).bind(cutoffs.hour).execute(&self.pool).await?.rows_affected();
        }
        sqlx::query(
            "delete from queues where deleted_at < $1
               and not exists (select 1 from queue_samples where queue_id = queues.id)
               and not exists (select 1 from queue_rollups_1m where queue_id = queues.id)
               and not exists (select 1 from queue_rollups_1h where queue_id = queues.id)",
        )
        .bind(cutoffs.hour)
        .execute(&self.pool)
        .await?;
        Ok(removed)
    }

    async fn broker_rollup_sums(
        &self,
        broker_id: i64,
        level: Level,
        range: (i64, i64),
        start: i64,
        step: i64,
    ) -> Result<Vec<(i64, MetricSums)>> {
        // SQLite's `total` is a float sum that is 0.0 over no values.
        let aggregates: Vec<String> = BROKER_ROLLUP_METRICS
            .iter()
            .map(|c| {
                format!(
                    "coalesce(sum({c} * samples), 0)::double precision,
                     coalesce(sum(case when {c} is not null then samples end), 0)::double precision"
                )
            })
            .collect();
        let sql = format!(
            "select (bucket - $4) / $5 as p, {} from {} where broker_id = $1 and bucket >= $2 and bucket < $3 group by p",
            aggregates.join(", "),
            level.broker_table()
        );
        self.sums(&sql, broker_id, range, start, step).await
    }

    async fn broker_poll_sums(
        &self,
        broker_id: i64,
        range: (i64, i64),
        start: i64,
        step: i64,
    ) -> Result<Vec<(i64, MetricSums)>> {
        let aggregates: Vec<String> = BROKER_POLL_METRICS
            .iter()
            .map(|c| format!("coalesce(sum({c}), 0)::double precision, count({c})::double precision"))
            .collect();
        let sql = format!(
            "select (ts - $4) / $5 as p, {} from broker_samples where broker_id = $1 and ts >= $2 and ts < $3 group by p",
            aggregates.join(", ")
        );
        self.sums(&sql, broker_id, range, start, step).await
    }
}

impl Postgres {
    async fn sums(
        &self,
        sql: &str,
        broker_id: i64,
        (from, to): (i64, i64),
        start: i64,
        step: i64,
    ) -> Result<Vec<(i64, MetricSums)>> {
        let rows =
            sqlx::query(sql).bind(broker_id).bind(from).bind(to).bind(start).bind(step).fetch_all(&self.pool).await?;
        rows.iter().map(sums_at).collect()
    }
}
