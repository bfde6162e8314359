use async_trait::async_trait;
use sqlx::Row;

use super::leases::dead_replica;
use super::Sqlite;
use crate::storage::fates::{Ending, Fates, NewFate, StoredFate, FATES_PER_STATEMENT};
use crate::storage::leases::HEARTBEAT_PREFIX;
use crate::storage::Result;

#[async_trait]
impl Fates for Sqlite {
    async fn finish_action(&self, ending: Ending<'_>, fates: &[NewFate<'_>]) -> Result<()> {
        let mut tx = self.pool.begin().await?;
        insert_fates(&mut tx, ending.audit_id, fates).await?;
        // The moved ids, checkpointed or not, in the order of their positions.
        sqlx::query(
            "update audit_log set outcome = ?1, moved = ?2, failed = ?3, detail = ?4,
                 message_ids = (select json_group_array(message_id) from
                     (select message_id from audit_messages where audit_id = ?5 and outcome = 'moved'
                      order by position, rowid))
             where id = ?5",
        )
        .bind(ending.outcome)
        .bind(ending.moved)
        .bind(ending.failed)
        .bind(ending.detail)
        .bind(ending.audit_id)
        .execute(&mut *tx)
        .await?;
        tx.commit().await
    }

    async fn checkpoint_action(&self, audit_id: i64, fates: &[NewFate<'_>]) -> Result<()> {
        let mut tx = self.pool.begin().await?;
        insert_fates(&mut tx, audit_id, fates).await?;
        sqlx::query(
            "update audit_log set outcome = 'running',
                 moved = (select count(*) from audit_messages where audit_id = ?1 and outcome = 'moved'),
                 failed = (select count(*) from audit_messages where audit_id = ?1 and outcome = 'failed')
             where id = ?1 and outcome in ('started', 'running')",
        )
        .bind(audit_id)
        .execute(&mut *tx)
        .await?;
        tx.commit().await
    }

    async fn action_fates(&self, audit_id: i64) -> Result<Vec<StoredFate>> {
        let rows = sqlx::query(
            "select position, message_id, outcome, detail from audit_messages where audit_id = ? order by position, rowid",
        )
        .bind(audit_id)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|r| {
                Ok(StoredFate {
                    position: r.try_get("position")?,
                    message_id: r.try_get("message_id")?,
                    outcome: r.try_get("outcome")?,
                    detail: r.try_get("detail")?,
                })
            })
            .collect()
    }

    async fn mark_interrupted(&self, detail: &str, survivor: &str) -> Result<u64> {
        let sql = format!(
            "update audit_log set outcome = 'interrupted', detail = ?1
             where outcome in ('started', 'running') and {}",
            dead_replica("audit_log.run_by", "?2", "?3")
        );
        let done = sqlx::query(&sql).bind(detail).bind(survivor).bind(HEARTBEAT_PREFIX).execute(&self.pool).await?;
        Ok(done.rows_affected())
    }
}

async fn insert_fates(tx: &mut sqlx::SqliteConnection, audit_id: i64, fates: &[NewFate<'_>]) -> Result<()> {
    for chunk in fates.chunks(FATES_PER_STATEMENT) {
        let rows = vec!["(?, ?, ?, ?, ?)"; chunk.len()].join(", ");
        let sql = format!("insert into audit_messages (audit_id, position, message_id, outcome, detail) values {rows}");
        let mut query = sqlx::query(&sql);
        for fate in chunk {
            query = query.bind(audit_id).bind(fate.position).bind(fate.message_id).bind(fate.outcome).bind(fate.detail);
        }
        query.execute(&mut *tx).await?;
    }
    Ok(())
}
