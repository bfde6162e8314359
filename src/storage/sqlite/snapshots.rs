use async_trait::async_trait;
use sqlx::Row;

use super::Sqlite;
use crate::storage::snapshots::{Snapshots, StoredSnapshot};
use crate::storage::Result;

#[async_trait]
impl Snapshots for Sqlite {
    async fn save_snapshot(&self, s: &StoredSnapshot) -> Result<()> {
        sqlx::query(
            "insert or replace into dlq_snapshots \
             (broker, vhost, queue, taken_at, queue_type, delivery_limit, requested, note, outdated, messages) \
             values (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        )
        .bind(&s.broker)
        .bind(&s.vhost)
        .bind(&s.queue)
        .bind(s.taken_at)
        .bind(&s.queue_type)
        .bind(s.delivery_limit)
        .bind(s.requested)
        .bind(&s.note)
        .bind(&s.outdated)
        .bind(&s.messages)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    async fn outdate_snapshot(&self, (broker, vhost, queue): (&str, &str, &str), text: &str) -> Result<()> {
        sqlx::query("update dlq_snapshots set outdated = ? where broker = ? and vhost = ? and queue = ?")
            .bind(text)
            .bind(broker)
            .bind(vhost)
            .bind(queue)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    async fn snapshots(&self) -> Result<Vec<StoredSnapshot>> {
        let rows = sqlx::query(
            "select broker, vhost, queue, taken_at, queue_type, delivery_limit, requested, note, outdated, messages \
             from dlq_snapshots",
        )
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|row| {
                Ok(StoredSnapshot {
                    broker: row.try_get(0)?,
                    vhost: row.try_get(1)?,
                    queue: row.try_get(2)?,
                    taken_at: row.try_get(3)?,
                    queue_type: row.try_get(4)?,
                    delivery_limit: row.try_get(5)?,
                    requested: row.try_get(6)?,
                    note: row.try_get(7)?,
                    outdated: row.try_get(8)?,
                    messages: row.try_get(9)?,
                })
            })
            .collect()
    }
}
