use async_trait::async_trait;
use sqlx::Row;

use super::fates::text;
use super::Postgres;
use crate::storage::snapshots::{Snapshots, StoredSnapshot};
use crate::storage::Result;

#[async_trait]
impl Snapshots for Postgres {
    async fn save_snapshot(&self, s: &StoredSnapshot) -> Result<()> {
        sqlx::query(
            "insert into dlq_snapshots
                 (broker, vhost, queue, taken_at, queue_type, delivery_limit, requested, note, outdated, messages)
             values ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
             on conflict (broker, vhost, queue) do update set taken_at = excluded.taken_at,
                 queue_type = excluded.queue_type, delivery_limit = excluded.delivery_limit,
                 requested = excluded.requested, note = excluded.note, outdated = excluded.outdated,
                 messages = excluded.messages",
        )
        .bind(text(&s.broker))
        .bind(text(&s.vhost))
        .bind(text(&s.queue))
        .bind(s.taken_at)
        .bind(text(&s.queue_type))
        .bind(s.delivery_limit)
        .bind(s.requested)
        .bind(s.note.as_deref().map(text))
        .bind(s.outdated.as_deref().map(text))
        .bind(text(&s.messages))
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    async fn outdate_snapshot(&self, (broker, vhost, queue): (&str, &str, &str), outdated: &str) -> Result<()> {
        sqlx::query("update dlq_snapshots set outdated = $1 where broker = $2 and vhost = $3 and queue = $4")
            .bind(text(outdated))
            .bind(text(broker))
            .bind(text(vhost))
            .bind(text(queue))
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    async fn snapshots(&self) -> Result<Vec<StoredSnapshot>> {
        let rows = sqlx::query(
            "select broker, vhost, queue, taken_at, queue_type, delivery_limit, requested, note, outdated, messages
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
