//! The day partitions of the history's largest tables (`migrations/postgres/0009_partitions.sql`):
//! `queue_samples` and the queue roll-ups, one partition per UTC day in the schema `partitions`
//! beside a default partition that takes any row whose day has none. This makes the coming
//! days' partitions ahead of the writes, and drops whole days that retention no longer keeps.

use super::Postgres;
use crate::storage::Result;

pub(super) const DAY_SECS: i64 = 86_400;

/// Days made ahead of today: retention, which makes them, runs every hour, so a day's partition
/// exists long before its first write even if several runs fail.
const DAYS_AHEAD: i64 = 3;

/// How long a partition's creation or drop waits for its locks before giving up until the next
/// run. Dropping a partition locks the whole table; waiting behind a long chart read, it would
/// hold every poll's write queued behind it.
const LOCK_TIMEOUT: &str = "3s";

/// A partitioned table and its partition key.
#[derive(Debug, Clone, Copy)]
pub(super) struct Partitioned {
    pub table: &'static str,
    pub key: &'static str,
}

pub(super) const QUEUE_SAMPLES: Partitioned = Partitioned { table: "queue_samples", key: "ts" };
pub(super) const QUEUE_ROLLUPS_1M: Partitioned = Partitioned { table: "queue_rollups_1m", key: "bucket" };
pub(super) const QUEUE_ROLLUPS_1H: Partitioned = Partitioned { table: "queue_rollups_1h", key: "bucket" };

impl Partitioned {
    /// The partition of `day` (days since 1970-01-01, UTC), as the migration names them.
    fn day_partition(self, day: i64) -> String {
        let date = chrono::DateTime::from_timestamp(day * DAY_SECS, 0).unwrap_or_default();
        format!("{}_{}", self.table, date.format("%Y%m%d"))
    }

    fn default_partition(self) -> String {
        format!("{}_default", self.table)
    }

    /// The day of a partition of this table from its name; `None` for the default partition.
    fn day_of(self, partition: &str) -> Option<i64> {
        let date = partition.strip_prefix(self.table)?.strip_prefix('_')?;
        let date = chrono::NaiveDate::parse_from_str(date, "%Y%m%d").ok()?;
        Some(date.and_hms_opt(0, 0, 0)?.and_utc().timestamp().div_euclid(DAY_SECS))
    }
}

impl Postgres {
    /// Makes the partitions of today and the next [`DAYS_AHEAD`] days of each partitioned table
    /// that are missing.
    pub(super) async fn prepare_days(&self, now: i64) -> Result<()> {
        let today = now.div_euclid(DAY_SECS);
        for table in [QUEUE_SAMPLES, QUEUE_ROLLUPS_1M, QUEUE_ROLLUPS_1H] {
            let existing = self.partition_days(table).await?;
            for day in today..=today + DAYS_AHEAD {
                if !existing.contains(&day) {
                    self.create_partition(table, day).await?;
                }
            }
        }
        Ok(())
    }

    /// The days of `table` that have a partition, ascending.
    async fn partition_days(&self, table: Partitioned) -> Result<Vec<i64>> {
        let names: Vec<String> = sqlx::query_scalar(
            "select c.relname::text from pg_inherits i join pg_class c on c.oid = i.inhrelid
             where i.inhparent = $1::regclass",
        )
        .bind(table.table)
        .fetch_all(&self.pool)
        .await?;
        let mut days: Vec<i64> = names.iter().filter_map(|n| table.day_of(n)).collect();
        days.sort_unstable();
        Ok(days)
    }

    /// Makes `day`'s partition of `table`, moving over the rows the default partition took for
    /// that day (written before the partition was there). Made apart and then attached: attaching
    /// takes a lock that lets reads and writes of the other days go on, where `create table ...
    /// partition of` locks the whole table.
    async fn create_partition(&self, table: Partitioned, day: i64) -> Result<()> {
        let name = table.day_partition(day);
        let (from, to) = (day * DAY_SECS, (day + 1) * DAY_SECS);
        let mut tx = self.pool.begin().await?;
        sqlx::query(&format!("set local lock_timeout = '{LOCK_TIMEOUT}'")).execute(&mut *tx).await?;
        // Replicas preparing at once: the first makes it, the others find it made.
        sqlx::query("select pg_advisory_xact_lock(hashtext('warren partitions'))").execute(&mut *tx).await?;
        let made: Option<String> = sqlx::query_scalar("select to_regclass($1)::text")
            .bind(format!("partitions.{name}"))
            .fetch_one(&mut *tx)
            .await?;
        if made.is_some() {
            return Ok(());
        }
        let (parent, key, default) = (table.table, table.key, table.default_partition());
        for sql in [
            format!("create table partitions.{name} (like {parent} including all)"),
            format!(
                "with moved as (delete from partitions.{default} where {key} >= {from} and {key} < {to} returning *)
                 insert into partitions.{name} select * from moved"
            ),
            format!("alter table {parent} attach partition partitions.{name} for values from ({from}) to ({to})"),
        ] {
            sqlx::query(&sql).execute(&mut *tx).await?;
        }
        tx.commit().await
    }

    /// Drops the partitions of `table` whose whole day is before `cutoff`; returns the rows they
    /// held. With `keep_in_force`, each queue's latest row before `cutoff`, if it is in a dropped
    /// day, is kept (in the default partition): the roll-ups are stored on change only, so that
    /// row is the value an idle queue still has.
    pub(super) async fn drop_days_before(&self, table: Partitioned, cutoff: i64, keep_in_force: bool) -> Result<u64> {
        let mut removed = 0;
        for day in self.partition_days(table).await? {
            if (day + 1) * DAY_SECS > cutoff {
                break;
            }
            removed += self.drop_partition(table, day, cutoff, keep_in_force).await?;
        }
        Ok(removed)
    }

    async fn drop_partition(&self, table: Partitioned, day: i64, cutoff: i64, keep_in_force: bool) -> Result<u64> {
        let (parent, key, name) = (table.table, table.key, table.day_partition(day));
        let mut tx = self.pool.begin().await?;
        sqlx::query(&format!("set local lock_timeout = '{LOCK_TIMEOUT}'")).execute(&mut *tx).await?;
        // Counted, not deleted: a read of the day, with no WAL and nothing for vacuum.
        let rows: i64 =
            sqlx::query_scalar(&format!("select count(*) from partitions.{name}")).fetch_one(&mut *tx).await?;
        let mut kept = 0;
        if keep_in_force {
            // Found before the drop takes its lock: one probe per queue of the day's key, read
            // backwards, and one of the later days' up to the cutoff. Nothing writes those days
            // any more, so what is found stays true until the drop.
            sqlx::query(&format!(
                "create temporary table in_force on commit drop as
                 select r.* from queues q
                 cross join lateral (select * from partitions.{name} p where p.queue_id = q.id
                                     order by p.{key} desc limit 1) r
                 where not exists (select 1 from {parent} l where l.queue_id = q.id
                                   and l.{key} > r.{key} and l.{key} < {cutoff})"
            ))
            .execute(&mut *tx)
            .await?;
            sqlx::query(&format!("drop table partitions.{name}")).execute(&mut *tx).await?;
            // No partition holds that day now: the rows go to the default partition.
            kept = sqlx::query(&format!("insert into {parent} select * from in_force"))
                .execute(&mut *tx)
                .await?
                .rows_affected();
        } else {
            sqlx::query(&format!("drop table partitions.{name}")).execute(&mut *tx).await?;
        }
        tx.commit().await?;
        Ok((rows as u64).saturating_sub(kept))
    }
}
