use async_trait::async_trait;

use super::Postgres;
use crate::storage::samples::{Samples, PRUNE_QUEUES_PER_STATEMENT};
use crate::storage::Result;

#[async_trait]
impl Samples for Postgres {
    async fn prune_samples(&self, before: i64) -> Result<u64> {
        let mut removed = 0;
        // By queue, in batches, as on SQLite: the key (queue_id, ts) finds each queue's old rows,
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
