use async_trait::async_trait;

use super::fates::text;
use super::Postgres;
use crate::broker::nodes::Node;
use crate::storage::nodes::{int, NodePoint, Nodes};
use crate::storage::{Held, Result};

#[async_trait]
impl Nodes for Postgres {
    async fn write_nodes(&self, broker_id: i64, ts: i64, nodes: &[Node], fence: Option<&Held>) -> Result<bool> {
        // A statement per node: a cluster has a handful, and a node listed twice is then written
        // twice, the last one kept, as on SQLite.
        let mut tx = self.pool.begin().await?;
        if let Some(held) = fence {
            if !super::leases::fence_in(&mut tx, held).await? {
                return Ok(false);
            }
        }
        for n in nodes {
            sqlx::query(
                "insert into node_samples (broker_id, node, ts, running, uptime_secs, mem_used, mem_limit,
                   mem_alarm, disk_free, disk_free_limit, disk_free_alarm, fd_used, fd_total, sockets_used,
                   sockets_total, proc_used, proc_total, run_queue, partitions)
                 values ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19)
                 on conflict (broker_id, node, ts) do update set
                   running = excluded.running, uptime_secs = excluded.uptime_secs, mem_used = excluded.mem_used,
                   mem_limit = excluded.mem_limit, mem_alarm = excluded.mem_alarm, disk_free = excluded.disk_free,
                   disk_free_limit = excluded.disk_free_limit, disk_free_alarm = excluded.disk_free_alarm,
                   fd_used = excluded.fd_used, fd_total = excluded.fd_total, sockets_used = excluded.sockets_used,
                   sockets_total = excluded.sockets_total, proc_used = excluded.proc_used,
                   proc_total = excluded.proc_total, run_queue = excluded.run_queue,
                   partitions = excluded.partitions",
            )
            .bind(broker_id)
            .bind(text(&n.name))
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
        tx.commit().await?;
        Ok(true)
    }

    async fn node_history(&self, broker_id: i64, node: &str, from: i64, to: i64, step: i64) -> Result<Vec<NodePoint>> {
        // bool_and: false if the node was down at any sample, as SQLite's min() of its 0/1 flag.
        sqlx::query_as(
            "select (ts / $1) * $1 as ts, count(*) as samples, bool_and(running) as running,
                    max(mem_used) as mem_used, max(mem_limit) as mem_limit,
                    min(disk_free) as disk_free, max(disk_free_limit) as disk_free_limit,
                    max(fd_used) as fd_used, max(fd_total) as fd_total,
                    max(sockets_used) as sockets_used, max(sockets_total) as sockets_total,
                    max(proc_used) as proc_used, max(proc_total) as proc_total,
                    max(run_queue) as run_queue, max(partitions) as partitions
               from node_samples
              where broker_id = $2 and node = $3 and ts >= $4 and ts <= $5
              group by 1 order by 1",
        )
        .bind(step)
        .bind(broker_id)
        .bind(text(node))
        .bind(from)
        .bind(to)
        .fetch_all(&self.pool)
        .await
    }

    async fn disk_free_since(&self, broker_id: i64, from: i64) -> Result<Vec<(String, i64, i64)>> {
        sqlx::query_as(
            "select node, ts, disk_free from node_samples
              where broker_id = $1 and ts >= $2 and disk_free is not null order by node, ts",
        )
        .bind(broker_id)
        .bind(from)
        .fetch_all(&self.pool)
        .await
    }

    async fn delete_nodes_before(&self, before: i64) -> Result<u64> {
        let done = sqlx::query("delete from node_samples where ts < $1").bind(before).execute(&self.pool).await?;
        Ok(done.rows_affected())
    }

    async fn thin_nodes(&self, before: i64, bucket_secs: i64) -> Result<u64> {
        let done = sqlx::query(
            "delete from node_samples
              where ts < $1 and exists (
                select 1 from node_samples later
                 where later.broker_id = node_samples.broker_id and later.node = node_samples.node
                   and later.ts > node_samples.ts and later.ts / $2 = node_samples.ts / $2)",
        )
        .bind(before)
        .bind(bucket_secs)
        .execute(&self.pool)
        .await?;
        Ok(done.rows_affected())
    }
}
