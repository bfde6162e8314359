//! The outbox: what each channel must still be told, in SQLite (`notification_outbox`, one row
//! per notification and channel), with the attempts made so far and when the next is due. It is
//! what makes delivery survive a restart: nothing a channel has not accepted lives only in memory.

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::{Row, SqliteConnection};

use super::{LogEntry, Notification, NotificationChannel, NotificationKind, Outcome};
use crate::alerts::AlertKey;
use crate::history::Db;

/// One notification waiting for one channel.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PendingDelivery {
    pub id: i64,
    pub channel_id: String,
    pub channel_name: String,
    pub notification: Notification,
    /// Attempts made (and logged) so far; 0 before the first.
    pub attempts: u32,
    /// Not before then; a row is due at once when it is written.
    pub next_attempt_at: DateTime<Utc>,
    pub created_at: DateTime<Utc>,
}

impl PendingDelivery {
    /// A log row about this delivery, now.
    pub(super) fn log_entry(&self, attempt: u32, outcome: Outcome) -> LogEntry {
        LogEntry::about(&self.channel_id, &self.channel_name, &self.notification, attempt, outcome)
    }
}

/// Every pending delivery, oldest first: what the channels have still to send.
pub async fn pending_deliveries(db: &Db) -> Result<Vec<PendingDelivery>, sqlx::Error> {
    let rows = sqlx::query(&format!("{SELECT} order by id")).fetch_all(db).await?;
    Ok(rows.iter().filter_map(|row| readable(row).ok()).collect())
}

const SELECT: &str = "select id, channel_id, channel_name, notification, attempts, next_attempt_at, created_at \
                      from notification_outbox";

/// How many notifications wait for `channel_id`, the one being attempted included.
pub(super) async fn waiting(conn: &mut SqliteConnection, channel_id: &str) -> Result<usize, sqlx::Error> {
    let count: i64 = sqlx::query_scalar("select count(*) from notification_outbox where channel_id = ?")
        .bind(channel_id)
        .fetch_one(conn)
        .await?;
    Ok(usize::try_from(count).unwrap_or(usize::MAX))
}

/// Adds `n` for `channel`, due at once.
pub(super) async fn insert(
    conn: &mut SqliteConnection,
    channel: &NotificationChannel,
    n: &Notification,
    now: DateTime<Utc>,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "insert into notification_outbox \
         (channel_id, channel_name, kind, rule_id, alert_key, notification, attempts, next_attempt_at, created_at) \
         values (?, ?, ?, ?, ?, ?, 0, ?, ?)",
    )
    .bind(&channel.id)
    .bind(&channel.name)
    .bind(n.kind.as_str())
    .bind(&n.rule_id)
    .bind(serde_json::to_string(&n.key).expect("an alert key is plain data"))
    .bind(serde_json::to_string(n).expect("a notification is plain data"))
    .bind(now.timestamp_millis())
    .bind(now.timestamp())
    .execute(conn)
    .await?;
    Ok(())
}

/// The oldest row of `channel_id`, due or not. A row that cannot be read (written by another
/// version of warren) would block the channel for good: it is deleted, with a log row.
pub(super) async fn oldest(db: &Db, channel_id: &str) -> Result<Option<PendingDelivery>, sqlx::Error> {
    loop {
        let Some(row) = sqlx::query(&format!("{SELECT} where channel_id = ? order by id limit 1"))
            .bind(channel_id)
            .fetch_optional(db)
            .await?
        else {
            return Ok(None);
        };
        let problem = match readable(&row) {
            Ok(pending) => return Ok(Some(pending)),
            Err(problem) => problem,
        };
        let id: i64 = row.try_get("id")?;
        tracing::error!(channel = channel_id, id, %problem, "a pending notification cannot be read; it is dropped");
        drop_unreadable(db, id, &problem).await?;
    }
}

/// Deletes an unreadable row, logging what its own columns still say.
async fn drop_unreadable(db: &Db, id: i64, problem: &str) -> Result<(), sqlx::Error> {
    let mut tx = db.begin().await?;
    let row = sqlx::query(
        "select channel_id, channel_name, kind, rule_id, alert_key, attempts from notification_outbox where id = ?",
    )
    .bind(id)
    .fetch_one(&mut *tx)
    .await?;
    let kind: String = row.try_get("kind")?;
    let alert_key: String = row.try_get("alert_key")?;
    let attempts: u32 = row.try_get("attempts")?;
    if let Some(kind) = NotificationKind::parse(&kind) {
        let entry = LogEntry {
            at: Utc::now(),
            channel_id: row.try_get("channel_id")?,
            channel_name: row.try_get("channel_name")?,
            kind,
            rule_id: Some(row.try_get("rule_id")?),
            alert_key: serde_json::from_str::<AlertKey>(&alert_key).ok(),
            attempt: attempts + 1,
            outcome: Outcome::Dropped,
            http_status: None,
            error: Some(format!("the stored notification cannot be read: {problem}")),
        };
        super::record(&mut *tx, &entry).await?;
    }
    remove(&mut tx, id).await?;
    tx.commit().await
}

/// Deletes a row: delivered, given up on, or its channel is gone.
pub(super) async fn remove(conn: &mut SqliteConnection, id: i64) -> Result<(), sqlx::Error> {
    sqlx::query("delete from notification_outbox where id = ?").bind(id).execute(conn).await?;
    Ok(())
}

/// Records a failed attempt: `attempts` made so far, the next not before `next_at`.
pub(super) async fn retry_later(
    conn: &mut SqliteConnection,
    id: i64,
    attempts: u32,
    next_at: DateTime<Utc>,
) -> Result<(), sqlx::Error> {
    sqlx::query("update notification_outbox set attempts = ?, next_attempt_at = ? where id = ?")
        .bind(attempts)
        .bind(next_at.timestamp_millis())
        .bind(id)
        .execute(conn)
        .await?;
    Ok(())
}

/// Deletes the rows of channels not in `channel_ids`, each with a `dropped` log row; returns how
/// many. See [`super::Dispatcher::set_channels`] for why they are not kept.
pub(super) async fn drop_other_channels(db: &Db, channel_ids: &[String]) -> Result<usize, sqlx::Error> {
    let mut tx = db.begin().await?;
    let rows = sqlx::query(SELECT).fetch_all(&mut *tx).await?;
    let mut dropped = 0;
    for row in rows {
        let channel_id: String = row.try_get("channel_id")?;
        if channel_ids.contains(&channel_id) {
            continue;
        }
        let id: i64 = row.try_get("id")?;
        if let Ok(pending) = readable(&row) {
            let entry = LogEntry {
                error: Some("the channel was removed from the configuration".to_string()),
                ..pending.log_entry(pending.attempts + 1, Outcome::Dropped)
            };
            super::record(&mut *tx, &entry).await?;
        }
        remove(&mut tx, id).await?;
        dropped += 1;
    }
    tx.commit().await?;
    Ok(dropped)
}

/// A row as a pending delivery, or what is wrong with it.
fn readable(row: &sqlx::sqlite::SqliteRow) -> Result<PendingDelivery, String> {
    let text = |e: sqlx::Error| e.to_string();
    let notification: String = row.try_get("notification").map_err(text)?;
    let time = |millis: i64| DateTime::from_timestamp_millis(millis).ok_or_else(|| format!("{millis} is not a time"));
    Ok(PendingDelivery {
        id: row.try_get("id").map_err(text)?,
        channel_id: row.try_get("channel_id").map_err(text)?,
        channel_name: row.try_get("channel_name").map_err(text)?,
        notification: serde_json::from_str(&notification).map_err(|e| e.to_string())?,
        attempts: row.try_get("attempts").map_err(text)?,
        next_attempt_at: time(row.try_get("next_attempt_at").map_err(text)?)?,
        created_at: time(row.try_get::<i64, _>("created_at").map_err(text)?.saturating_mul(1000))?,
    })
}
