//! History of the cluster's nodes (`node_samples`, migration 0019): one row per node per poll,
//! thinned as it ages (see the migration), and read back bucketed for the nodes page's charts.

use serde::Serialize;
use sqlx::Row;

use super::rollup::{Windows, HOUR_SECS, MINUTE_SECS};
use super::Db;
use crate::broker::nodes::Node;

/// Writes one poll's nodes in one transaction.
pub async fn write(db: &Db, broker_id: i64, ts: i64, nodes: &[Node]) -> Result<(), sqlx::Error> {
    let mut tx = db.begin().await?;
    let int = |v: Option<u64>| v.map(|n| i64::try_from(n).unwrap_or(i64::MAX));
    for n in nodes {
        sqlx::query(
            "insert or replace into node_samples (broker_id, node, ts, running, uptime_secs, mem_used, mem_limit,
               mem_alarm, disk_free, disk_free_limit, disk_free_alarm, fd_used, fd_total, sockets_used,
               sockets_total, proc_used, proc_total, run_queue, partitions)
             values (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        )
        .bind(broker_id)
        .bind(&n.name)
        .bind(ts)
        .bind(n.running)
        .bind(int(n.uptime_secs))
        .bind(int(n.mem_used))
        .bind(int(n.mem_limit))
        .bind(n.mem_alarm)
        .bind(int(n.disk_free))
        .bind(int(n.disk_free_limit))
        .bind(n.disk_free_alarm)
        .bind(int(n.fd_used))
        .bind(int(n.fd_total))
        .bind(int(n.sockets_used))
        .bind(int(n.sockets_total))
        .bind(int(n.proc_used))
        .bind(int(n.proc_total))
        .bind(int(n.run_queue))
        .bind(n.partitions.as_ref().map(|p| p.len() as i64))
        .execute(&mut *tx)
        .await?;
    }
    tx.commit().await
}

/// One chart point: the node's values over `[ts, ts + step)`. Memory, descriptors, sockets,
/// processes and run queue are the step's maximum, free disk its minimum (the worst moment),
/// limits the maximum; `null` where no sample in the step had the value.
#[derive(Debug, Clone, Serialize, PartialEq, utoipa::ToSchema)]
pub struct NodePoint {
    #[serde(flatten, serialize_with = "crate::times::ts")]
    #[schema(schema_with = crate::times::schema::ts)]
    pub ts: i64,
    pub samples: i64,
    pub running: Option<bool>,
    pub mem_used: Option<i64>,
    pub mem_limit: Option<i64>,
    pub disk_free: Option<i64>,
    pub disk_free_limit: Option<i64>,
    pub fd_used: Option<i64>,
    pub fd_total: Option<i64>,
    pub sockets_used: Option<i64>,
    pub sockets_total: Option<i64>,
    pub proc_used: Option<i64>,
    pub proc_total: Option<i64>,
    pub run_queue: Option<i64>,
    pub partitions: Option<i64>,
}

/// The node's points from `from` to `to`, one per `step` seconds that has samples.
pub async fn history(
    db: &Db,
    broker_id: i64,
    node: &str,
    from: i64,
    to: i64,
    step: i64,
) -> Result<Vec<NodePoint>, sqlx::Error> {
    let step = step.max(1);
    let rows = sqlx::query(
        "select (ts / ?1) * ?1 as bucket, count(*) as samples, min(running) as running,
                max(mem_used) as mem_used, max(mem_limit) as mem_limit,
                min(disk_free) as disk_free, max(disk_free_limit) as disk_free_limit,
                max(fd_used) as fd_used, max(fd_total) as fd_total,
                max(sockets_used) as sockets_used, max(sockets_total) as sockets_total,
                max(proc_used) as proc_used, max(proc_total) as proc_total,
                max(run_queue) as run_queue, max(partitions) as partitions
           from node_samples
          where broker_id = ?2 and node = ?3 and ts >= ?4 and ts <= ?5
          group by bucket order by bucket",
    )
    .bind(step)
    .bind(broker_id)
    .bind(node)
    .bind(from)
    .bind(to)
    .fetch_all(db)
    .await?;
    rows.iter()
        .map(|r| {
            Ok(NodePoint {
                ts: r.try_get("bucket")?,
                samples: r.try_get("samples")?,
                running: r.try_get::<Option<i64>, _>("running")?.map(|v| v != 0),
                mem_used: r.try_get("mem_used")?,
                mem_limit: r.try_get("mem_limit")?,
                disk_free: r.try_get("disk_free")?,
                disk_free_limit: r.try_get("disk_free_limit")?,
                fd_used: r.try_get("fd_used")?,
                fd_total: r.try_get("fd_total")?,
                sockets_used: r.try_get("sockets_used")?,
                sockets_total: r.try_get("sockets_total")?,
                proc_used: r.try_get("proc_used")?,
                proc_total: r.try_get("proc_total")?,
                run_queue: r.try_get("run_queue")?,
                partitions: r.try_get("partitions")?,
            })
        })
        .collect()
}

/// The node's free-disk readings since `from`, oldest first: what the disk prediction fits.
pub async fn disk_free_since(db: &Db, broker_id: i64, from: i64) -> Result<Vec<(String, i64, u64)>, sqlx::Error> {
    let rows = sqlx::query(
        "select node, ts, disk_free from node_samples
          where broker_id = ? and ts >= ? and disk_free is not null order by node, ts",
    )
    .bind(broker_id)
    .bind(from)
    .fetch_all(db)
    .await?;
    rows.iter()
        .map(|r| Ok((r.try_get("node")?, r.try_get("ts")?, r.try_get::<i64, _>("disk_free")?.max(0) as u64)))
        .collect()
}

/// Thins aged samples: older than the raw window only the last of each minute stays, older
/// than the minute window the last of each hour, and nothing older than the retention.
pub async fn prune(db: &Db, now: i64, windows: Windows) -> Result<u64, sqlx::Error> {
    let mut removed = sqlx::query("delete from node_samples where ts < ?")
        .bind(now - windows.hour_secs)
        .execute(db)
        .await?
        .rows_affected();
    for (before, bucket) in [(now - windows.raw_secs, MINUTE_SECS), (now - windows.minute_secs, HOUR_SECS)] {
        removed += sqlx::query(
            "delete from node_samples
              where ts < ?1 and exists (
                select 1 from node_samples later
                 where later.broker_id = node_samples.broker_id and later.node = node_samples.node
                   and later.ts > node_samples.ts and later.ts / ?2 = node_samples.ts / ?2)",
        )
        .bind(before)
        .bind(bucket)
        .execute(db)
        .await?
        .rows_affected();
    }
    Ok(removed)
}
