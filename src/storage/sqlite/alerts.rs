use std::time::Duration;

use async_trait::async_trait;
use sqlx::FromRow;

use super::leases::NOW_MS;
use super::{Sqlite, SqliteTx};
use crate::storage::alerts::{
    AlertWrites, Alerts, HistoryRow, LogRow, NewOutboxRow, NewSilence, OutboxRow, RuleRow, SilenceRow, StateRow,
    TransitionRow,
};
use crate::storage::Result;

/// The outbox's columns, as [`OutboxRow`] reads them (a macro, for `concat!`).
macro_rules! outbox_columns {
    () => {
        "id, channel_id, channel_name, kind, rule_id, alert_key, notification, attempts, next_attempt_at, \
         created_at, claimed_by, claim_expires_at"
    };
}
const OUTBOX: &str = concat!("select ", outbox_columns!(), " from notification_outbox");

async fn insert_log<'e>(db: impl sqlx::SqliteExecutor<'e>, row: &LogRow) -> Result<()> {
    sqlx::query(
        "insert into notification_log \
         (at, channel_id, channel_name, kind, rule_id, alert_key, attempt, outcome, http_status, error) \
         values (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
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
impl Alerts for Sqlite {
    async fn rules(&self) -> Result<Vec<RuleRow>> {
        let rows = sqlx::query("select id, definition from alert_rules order by id").fetch_all(&self.pool).await?;
        rows.iter().map(RuleRow::from_row).collect()
    }

    async fn save_rule(&self, id: &str, definition: &str, updated_at: i64) -> Result<()> {
        sqlx::query(
            "insert into alert_rules (id, definition, updated_at) values (?, ?, ?)
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
        Ok(sqlx::query("delete from alert_rules where id = ?").bind(id).execute(&self.pool).await?.rows_affected() > 0)
    }

    async fn alert_states(&self) -> Result<Vec<StateRow>> {
        let rows = sqlx::query("select state, queued_at, delivered_at from alert_states").fetch_all(&self.pool).await?;
        rows.iter().map(StateRow::from_row).collect()
    }

    async fn alert_history(&self, before: i64, limit: i64) -> Result<Vec<HistoryRow>> {
        let rows = sqlx::query(
            "select id, at, rule_id, alert_key, from_phase, to_phase, value, note, silenced
             from alert_history where id < ? order by id desc limit ?",
        )
        .bind(before)
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(HistoryRow::from_row).collect()
    }

    async fn prune_alert_history(&self, cutoff: i64) -> Result<u64> {
        let done = sqlx::query("delete from alert_history where at < ?").bind(cutoff).execute(&self.pool).await?;
        Ok(done.rows_affected())
    }

    async fn insert_silence(&self, s: NewSilence<'_>) -> Result<i64> {
        // Not `returning id`: see the audit log's insert.
        let done = sqlx::query(
            "insert into silences (rule_id, alert_key, until, comment, created_by, created_at)
             values (?, ?, ?, ?, ?, ?)",
        )
        .bind(s.rule_id)
        .bind(s.alert_key)
        .bind(s.until)
        .bind(s.comment)
        .bind(s.created_by)
        .bind(s.created_at)
        .execute(&self.pool)
        .await?;
        Ok(done.last_insert_rowid())
    }

    async fn end_silence(&self, id: i64, now: i64) -> Result<bool> {
        let done = sqlx::query("update silences set until = min(until, ?) where id = ?")
            .bind(now)
            .bind(id)
            .execute(&self.pool)
            .await?;
        Ok(done.rows_affected() > 0)
    }

    async fn silences(&self, until_after: i64) -> Result<Vec<SilenceRow>> {
        let rows = sqlx::query(
            "select id, rule_id, alert_key, until, comment, created_by, created_at from silences
             where until > ? order by id desc limit 200",
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
        let row = sqlx::query(&format!("{OUTBOX} where channel_id = ? order by id limit 1"))
            .bind(channel_id)
            .fetch_optional(&self.pool)
            .await?;
        row.as_ref().map(OutboxRow::from_row).transpose()
    }

    async fn claim_outbox(
        &self,
        channel_id: &str,
        claimer: &str,
        due_by: i64,
        ttl: Duration,
    ) -> Result<Option<OutboxRow>> {
        // One statement, so it holds SQLite's one write lock from its reads to its write: two
        // processes claiming at once are one after the other. Only the channel's oldest row,
        // and none while another claimer holds a live claim on the channel.
        let sql = format!(
            "update notification_outbox set claimed_by = ?2, claim_expires_at = {NOW_MS} + ?4
             where id = (select min(id) from notification_outbox where channel_id = ?1)
               and next_attempt_at <= ?3
               and not exists (select 1 from notification_outbox other
                               where other.channel_id = ?1 and other.claimed_by <> ?2
                                 and other.claim_expires_at > {NOW_MS})
             returning {}",
            outbox_columns!()
        );
        let row = sqlx::query(&sql)
            .bind(channel_id)
            .bind(claimer)
            .bind(due_by)
            .bind(i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX / 2))
            .fetch_optional(&self.pool)
            .await?;
        row.as_ref().map(OutboxRow::from_row).transpose()
    }

    async fn release_outbox_claim(&self, id: i64, claimer: &str) -> Result<()> {
        sqlx::query(
            "update notification_outbox set claimed_by = null, claim_expires_at = null where id = ? and claimed_by = ?",
        )
        .bind(id)
        .bind(claimer)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    async fn insert_log(&self, row: &LogRow) -> Result<()> {
        insert_log(&self.pool, row).await
    }

    async fn deliveries(&self, before: i64, limit: i64) -> Result<Vec<LogRow>> {
        let rows = sqlx::query(
            "select id, at, channel_id, channel_name, kind, rule_id, alert_key, attempt, outcome, http_status, error \
             from notification_log where id < ? order by id desc limit ?",
        )
        .bind(before)
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(LogRow::from_row).collect()
    }

    async fn prune_log(&self, cutoff: i64) -> Result<u64> {
        let done = sqlx::query("delete from notification_log where at < ?").bind(cutoff).execute(&self.pool).await?;
        Ok(done.rows_affected())
    }
}

#[async_trait]
impl AlertWrites for SqliteTx {
    async fn insert_transition(&mut self, t: TransitionRow<'_>) -> Result<()> {
        sqlx::query(
            "insert into alert_history (at, rule_id, alert_key, from_phase, to_phase, value, note, silenced)
             values (?, ?, ?, ?, ?, ?, ?, ?)",
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
        sqlx::query("delete from alert_states where rule_id = ? and alert_key = ?")
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
            "insert into alert_states (rule_id, alert_key, state, queued_at) values (?, ?, ?, ?)
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
            "update alert_states set delivered_at = max(coalesce(delivered_at, 0), ?)
             where rule_id = ? and alert_key = ? and queued_at = ?",
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
        sqlx::query_scalar("select count(*) from notification_outbox where channel_id = ?")
            .bind(channel_id)
            .fetch_one(&mut *self.0)
            .await
    }

    async fn insert_outbox(&mut self, row: NewOutboxRow<'_>) -> Result<()> {
        sqlx::query(
            "insert into notification_outbox \
             (channel_id, channel_name, kind, rule_id, alert_key, notification, attempts, next_attempt_at, created_at) \
             values (?, ?, ?, ?, ?, ?, 0, ?, ?)",
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
        let row = sqlx::query(&format!("{OUTBOX} where id = ?")).bind(id).fetch_optional(&mut *self.0).await?;
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
        sqlx::query("delete from notification_outbox where id = ?").bind(id).execute(&mut *self.0).await?;
        Ok(())
    }

    async fn delete_claimed_outbox(&mut self, id: i64, claimer: &str) -> Result<bool> {
        let done = sqlx::query("delete from notification_outbox where id = ? and claimed_by = ?")
            .bind(id)
            .bind(claimer)
            .execute(&mut *self.0)
            .await?;
        Ok(done.rows_affected() == 1)
    }

    async fn retry_outbox(&mut self, id: i64, claimer: &str, attempts: i64, next_attempt_at: i64) -> Result<bool> {
        let done = sqlx::query(
            "update notification_outbox
             set attempts = ?, next_attempt_at = ?, claimed_by = null, claim_expires_at = null
             where id = ? and claimed_by = ?",
        )
        .bind(attempts)
        .bind(next_attempt_at)
        .bind(id)
        .bind(claimer)
        .execute(&mut *self.0)
        .await?;
        Ok(done.rows_affected() == 1)
    }

    async fn insert_log(&mut self, row: &LogRow) -> Result<()> {
        insert_log(&mut *self.0, row).await
    }
}
