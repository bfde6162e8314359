use async_trait::async_trait;

use super::fates::text;
use super::Postgres;
use crate::storage::topology::{StoredListing, StoredTopology, Topology, WorkedQueue};
use crate::storage::{Held, Result};

#[async_trait]
impl Topology for Postgres {
    async fn store_topology(
        &self,
        broker_id: i64,
        t: &StoredTopology,
        read_at: i64,
        fence: Option<&Held>,
    ) -> Result<bool> {
        let mut tx = self.pool.begin().await?;
        if !fenced(&mut tx, fence).await? {
            return Ok(false);
        }
        sqlx::query(
            "insert into vhost_topology (broker_id, vhost, bindings, exchanges, read_at) values ($1, $2, $3, $4, $5)
             on conflict (broker_id, vhost) do update set
               bindings = excluded.bindings, exchanges = excluded.exchanges, read_at = excluded.read_at",
        )
        .bind(broker_id)
        .bind(text(&t.vhost))
        .bind(text(&t.bindings))
        .bind(text(&t.exchanges))
        .bind(read_at)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(true)
    }

    async fn topologies(&self, broker_id: i64) -> Result<Vec<StoredTopology>> {
        sqlx::query_as("select vhost, bindings, exchanges from vhost_topology where broker_id = $1")
            .bind(broker_id)
            .fetch_all(&self.pool)
            .await
    }

    async fn worked_queues(&self, broker_id: i64) -> Result<Vec<WorkedQueue>> {
        sqlx::query_as("select vhost, queue, seen_at from roles_worked_queues where broker_id = $1")
            .bind(broker_id)
            .fetch_all(&self.pool)
            .await
    }

    async fn record_worked(
        &self,
        broker_id: i64,
        vhost: &str,
        queue: &str,
        seen_at: i64,
        fence: Option<&Held>,
    ) -> Result<bool> {
        let mut tx = self.pool.begin().await?;
        if !fenced(&mut tx, fence).await? {
            return Ok(false);
        }
        sqlx::query(
            "insert into roles_worked_queues (broker_id, vhost, queue, seen_at) values ($1, $2, $3, $4)
             on conflict (broker_id, vhost, queue) do update set seen_at = excluded.seen_at",
        )
        .bind(broker_id)
        .bind(text(vhost))
        .bind(text(queue))
        .bind(seen_at)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(true)
    }

    async fn store_listings(&self, broker_id: i64, listings: &[StoredListing], fence: Option<&Held>) -> Result<bool> {
        let mut tx = self.pool.begin().await?;
        if !fenced(&mut tx, fence).await? {
            return Ok(false);
        }
        for listing in listings {
            sqlx::query(
                "insert into broker_listings (broker_id, kind, read_at, body) values ($1, $2, $3, $4)
                 on conflict (broker_id, kind) do update set read_at = excluded.read_at, body = excluded.body",
            )
            .bind(broker_id)
            .bind(&listing.kind)
            .bind(listing.read_at)
            .bind(text(&listing.body))
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(true)
    }

    async fn listing(&self, broker_id: i64, kind: &str, newer_than: i64) -> Result<Option<StoredListing>> {
        sqlx::query_as(
            "select kind, read_at, body from broker_listings where broker_id = $1 and kind = $2 and read_at > $3",
        )
        .bind(broker_id)
        .bind(kind)
        .bind(newer_than)
        .fetch_optional(&self.pool)
        .await
    }
}

/// The fence at the start of a transaction: `true` without a lease to check.
async fn fenced(conn: &mut sqlx::PgConnection, fence: Option<&Held>) -> Result<bool> {
    match fence {
        Some(held) => super::leases::fence_in(conn, held).await,
        None => Ok(true),
    }
}
