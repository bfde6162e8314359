use async_trait::async_trait;
use sqlx::FromRow;

use super::{PgTx, Postgres};
use crate::storage::alerts::{
    AlertWrites, Alerts, HistoryRow, LogRow, NewOutboxRow, NewSilence, OutboxRow, RuleRow, SilenceRow, StateRow,
    TransitionRow,
};
use crate::storage::Result;

const OUTBOX: &str = "select id, channel_id, channel_name, kind, rule_id, alert_key, notification, attempts, \
                      next_attempt_at, created_at from notification_outbox";

async fn insert_log<'e>(db: impl sqlx::PgExecutor<'e>, row: &LogRow) -> Result<()> {
    sqlx::query(
        "insert into notification_log \
         (at, channel_id, channel_name, kind, rule_id, alert_key, attempt, outcome, http_status, error) \
         values ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
    )
    .bind(row.at)
    .bind(&row.channel_id)
    .bind(&row.channel_name)
    .bind(&row.kind)
    .bind(&row.rule_id)
    .bind(&row.alert_key)
    .bind(row.attempt)
    .bind(&row.outcome)
    .bind(row.http_status)
    .bind(&row.error)
    .execute(db)
    .await?;
    Ok(())
}

#[async_trait]
impl Alerts for Postgres {
    async fn rules(&self) -> Result<Vec<RuleRow>> {
        let rows = sqlx::query("select id, definition from alert_rules order by id").fetch_all(&self.pool).await?;
        rows.iter().map(RuleRow::from_row).collect()
    }

    async fn save_rule(&self, id: &str, definition: &str, updated_at: i64) -> Result<()> {
        sqlx::query(
            "insert into alert_rules (id, definition, updated_at) values ($1, $2, $3)
             on conflict (id) do update set definition = excluded.definition, updated_at = excluded.updated_at",
        )
        .bind(id)
        .bind(definition)
        .bind(updated_at)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    async fn delete_rule(&self, id: &str) -> Result<bool> {
        Ok(sqlx::query("delete from alert_rules where id = $1").bind(id).execute(&self.pool).await?.rows_affected() > 0)
    }

    async fn alert_states(&self) -> Result<Vec<StateRow>> {
        let rows = sqlx::query("select state, queued_at, delivered_at from alert_states").fetch_all(&self.pool).await?;
        rows.iter().map(StateRow::from_row).collect()
    }

    async fn alert_history(&self, before: i64, limit: i64) -> Result<Vec<HistoryRow>> {
        let rows = sqlx::query(
            "select id, at, rule_id, alert_key, from_phase, to_phase, value, note, silenced
             from alert_history where id < $1 order by id desc limit $2",
        )
        .bind(before)
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(HistoryRow::from_row).collect()
    }

    async fn prune_alert_history(&self, cutoff: i64) -> Result<u64> {
        let done = sqlx::query("delete from alert_history where at < $1").bind(cutoff).execute(&self.pool).await?;
        Ok(done.rows_affected())
    }

    async fn insert_silence(&self, s: NewSilence<'_>) -> Result<i64> {
        // In a transaction of its own: the id is handed on only after the commit returned.
        let mut tx = self.pool.begin().await?;
        let id = sqlx::query_scalar(
            "insert into silences (rule_id, alert_key, until, comment, created_by, created_at)
             values ($1, $2, $3, $4, $5, $6) returning id",
        )
        .bind(s.rule_id)
        .bind(s.alert_key)
        .bind(s.until)
        .bind(s.comment)
        .bind(s.created_by)
        .bind(s.created_at)
        .fetch_one(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(id)
    }

    async fn end_silence(&self, id: i64, now: i64) -> Result<bool> {
        let done = sqlx::query("update silences set until = least(until, $1) where id = $2")
            .bind(now)
            .bind(id)
            .execute(&self.pool)
            .await?;
        Ok(done.rows_affected() > 0)
    }

    async fn silences(&self, until_after: i64) -> Result<Vec<SilenceRow>> {
        let rows = sqlx::query(
            "select id, rule_id, alert_key, until, comment, created_by, created_at from silences
             where until > $1 order by id desc limit 200",
        )
        .bind(until_after)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(SilenceRow::from_row).collect()
    }

    async fn outbox(&self) -> Result<Vec<OutboxRow>> {
        sqlx::query(&format!("{OUTBOX} order by id"))
            .fetch_all(&self.pool)
            .await?
            .iter()
            .map(OutboxRow::from_row)
            .collect()
    }

    async fn oldest_in_outbox(&self, channel_id: &str) -> Result<Option<OutboxRow>> {
        let row = sqlx::query(&format!("{OUTBOX} where channel_id = $1 order by id limit 1"))
            .bind(channel_id)
            .fetch_optional(&self.pool)
            .await?;
        row.as_ref().map(OutboxRow::from_row).transpose()
    }

    async fn insert_log(&self, row: &LogRow) -> Result<()> {
        insert_log(&self.pool, row).await
    }

    async fn deliveries(&self, before: i64, limit: i64) -> Result<Vec<LogRow>> {
        let rows = sqlx::query(
            "select id, at, channel_id, channel_name, kind, rule_id, alert_key, attempt, outcome, http_status, error \
             from notification_log where id < $1 order by id desc limit $2",
        )
        .bind(before)
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(LogRow::from_row).collect()
    }

    async fn prune_log(&self, cutoff: i64) -> Result<u64> {
        let done = sqlx::query("delete from notification_log where at < $1").bind(cutoff).execute(&self.pool).await?;
        Ok(done.rows_affected())
    }
}

#[async_trait]
impl AlertWrites for PgTx {
    async fn insert_transition(&mut self, t: TransitionRow<'_>) -> Result<()> {
        sqlx::query(
            "insert into alert_history (at, rule_id, alert_key, from_phase, to_phase, value, note, silenced)
             values ($1, $2, $3, $4, $5, $6, $7, $8)",
        )
        .bind(t.at)
        .bind(t.rule_id)
        .bind(t.alert_key)
        .bind(t.from_phase)
        .bind(t.to_phase)
        .bind(t.value)
        .bind(t.note)
        .bind(t.silenced)
        .execute(&mut *self.0)
        .await?;
        Ok(())
    }

    async fn state_keys(&mut self) -> Result<Vec<(String, String)>> {
        sqlx::query_as("select rule_id, alert_key from alert_states").fetch_all(&mut *self.0).await
    }

    async fn delete_state(&mut self, rule_id: &str, alert_key: &str) -> Result<()> {
        sqlx::query("delete from alert_states where rule_id = $1 and alert_key = $2")
            .bind(rule_id)
            .bind(alert_key)
            .execute(&mut *self.0)
            .await?;
        Ok(())
    }

    async fn upsert_state(
        &mut self,
        rule_id: &str,
        alert_key: &str,
        state: &str,
        queued_at: Option<i64>,
    ) -> Result<()> {
        sqlx::query(
            "insert into alert_states (rule_id, alert_key, state, queued_at) values ($1, $2, $3, $4)
             on conflict (rule_id, alert_key) do update set state = excluded.state, queued_at = excluded.queued_at",
        )
        .bind(rule_id)
        .bind(alert_key)
        .bind(state)
        .bind(queued_at)
        .execute(&mut *self.0)
        .await?;
        Ok(())
    }

    async fn mark_delivered(&mut self, rule_id: &str, alert_key: &str, planned_at: i64, at: i64) -> Result<()> {
        sqlx::query(
            "update alert_states set delivered_at = greatest(coalesce(delivered_at, 0), $1)
             where rule_id = $2 and alert_key = $3 and queued_at = $4",
        )
        .bind(at)
        .bind(rule_id)
        .bind(alert_key)
        .bind(planned_at)
        .execute(&mut *self.0)
        .await?;
        Ok(())
    }

    async fn outbox_waiting(&mut self, channel_id: &str) -> Result<i64> {
        sqlx::query_scalar("select count(*) from notification_outbox where channel_id = $1")
            .bind(channel_id)
            .fetch_one(&mut *self.0)
            .await
    }

    async fn insert_outbox(&mut self, row: NewOutboxRow<'_>) -> Result<()> {
        sqlx::query(
            "insert into notification_outbox \
             (channel_id, channel_name, kind, rule_id, alert_key, notification, attempts, next_attempt_at, created_at) \
             values ($1, $2, $3, $4, $5, $6, 0, $7, $8)",
        )
        .bind(row.channel_id)
        .bind(row.channel_name)
        .bind(row.kind)
        .bind(row.rule_id)
        .bind(row.alert_key)
        .bind(row.notification)
        .bind(row.next_attempt_at)
        .bind(row.created_at)
        .execute(&mut *self.0)
        .await?;
        Ok(())
    }

    async fn outbox_row(&mut self, id: i64) -> Result<Option<OutboxRow>> {
        let row = sqlx::query(&format!("{OUTBOX} where id = $1")).bind(id).fetch_optional(&mut *self.0).await?;
        row.as_ref().map(OutboxRow::from_row).transpose()
    }

    async fn outbox_rows(&mut self) -> Result<Vec<OutboxRow>> {
        sqlx::query(&format!("{OUTBOX} order by id"))
            .fetch_all(&mut *self.0)
            .await?
            .iter()
            .map(OutboxRow::from_row)
            .collect()
    }

    async fn delete_outbox(&mut self, id: i64) -> Result<()> {
        sqlx::query("delete from notification_outbox where id = $1").bind(id).execute(&mut *self.0).await?;
        Ok(())
    }

    async fn retry_outbox(&mut self, id: i64, attempts: i64, next_attempt_at: i64) -> Result<()> {
        sqlx::query("update notification_outbox set attempts = $1, next_attempt_at = $2 where id = $3")
            .bind(attempts)
            .bind(next_attempt_at)
            .bind(id)
            .execute(&mut *self.0)
            .await?;
        Ok(())
    }

    async fn insert_log(&mut self, row: &LogRow) -> Result<()> {
        insert_log(&mut *self.0, row).await
    }
}
