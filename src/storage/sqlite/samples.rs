use async_trait::async_trait;

use super::Sqlite;
use crate::storage::samples::{Samples, PRUNE_QUEUES_PER_STATEMENT};
use crate::storage::Result;

#[async_trait]
impl Samples for Sqlite {
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
}
