use async_trait::async_trait;

use super::Sqlite;
use crate::storage::topology::{StoredTopology, Topology, WorkedQueue};
use crate::storage::Result;

#[async_trait]
impl Topology for Sqlite {
    async fn store_topology(&self, broker_id: i64, t: &StoredTopology, read_at: i64) -> Result<()> {
        sqlx::query(
            "insert into vhost_topology (broker_id, vhost, bindings, exchanges, read_at) values (?, ?, ?, ?, ?)
             on conflict (broker_id, vhost) do update set
               bindings = excluded.bindings, exchanges = excluded.exchanges, read_at = excluded.read_at",
        )
        .bind(broker_id)
        .bind(&t.vhost)
        .bind(&t.bindings)
        .bind(&t.exchanges)
        .bind(read_at)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    async fn topologies(&self, broker_id: i64) -> Result<Vec<StoredTopology>> {
        sqlx::query_as("select vhost, bindings, exchanges from vhost_topology where broker_id = ?")
            .bind(broker_id)
            .fetch_all(&self.pool)
            .await
    }

    async fn worked_queues(&self, broker_id: i64) -> Result<Vec<WorkedQueue>> {
        sqlx::query_as("select vhost, queue, seen_at from roles_worked_queues where broker_id = ?")
            .bind(broker_id)
            .fetch_all(&self.pool)
            .await
    }

    async fn record_worked(&self, broker_id: i64, vhost: &str, queue: &str, seen_at: i64) -> Result<()> {
        sqlx::query(
            "insert into roles_worked_queues (broker_id, vhost, queue, seen_at) values (?, ?, ?, ?) \
             on conflict (broker_id, vhost, queue) do update set seen_at = excluded.seen_at",
        )
        .bind(broker_id)
        .bind(vhost)
        .bind(queue)
        .bind(seen_at)
        .execute(&self.pool)
        .await?;
        Ok(())
    }
}
