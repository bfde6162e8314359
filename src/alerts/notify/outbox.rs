//! The outbox: what each channel must still be told, in the database (`notification_outbox`, one row
//! per notification and channel), with the attempts made so far and when the next is due. It is
//! what makes delivery survive a restart: nothing a channel has not accepted lives only in memory.
//!
//! Several replicas on one database all run every channel's task, so a row is claimed before it
//! is attempted ([`claim`]): one process at a time delivers a channel, and the writes that finish
//! an attempt are made only while the claim is still that process's. A claimer that died (or
//! was paused past its claim) leaves the row to the next process once the claim expires: the
//! receiver may then be told twice, with the same idempotency key, but never not at all.

use super::{LogEntry, Notification, NotificationChannel, NotificationKind, Outcome};
use crate::alerts::AlertKey;
use crate::storage::alerts::{NewOutboxRow, OutboxRow};
use crate::storage::{Store, Transaction};
use chrono::{DateTime, Utc};
use serde::Serialize;
use std::time::Duration;

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
pub async fn pending_deliveries(store: &Store) -> Result<Vec<PendingDelivery>, sqlx::Error> {
    Ok(store.outbox().await?.iter().filter_map(|row| readable(row).ok()).collect())
}

/// How many notifications wait for `channel_id`, the one being attempted included.
pub(super) async fn waiting(tx: &mut dyn Transaction, channel_id: &str) -> Result<usize, sqlx::Error> {
    let count = tx.outbox_waiting(channel_id).await?;
    Ok(usize::try_from(count).unwrap_or(usize::MAX))
}

/// Adds `n` for `channel`, due at once.
pub(super) async fn insert(
    tx: &mut dyn Transaction,
    channel: &NotificationChannel,
    n: &Notification,
    now: DateTime<Utc>,
) -> Result<(), sqlx::Error> {
    tx.insert_outbox(NewOutboxRow {
        channel_id: &channel.id,
        channel_name: &channel.name,
        kind: n.kind.as_str(),
        rule_id: &n.rule_id,
        alert_key: &serde_json::to_string(&n.key).expect("an alert key is plain data"),
        notification: &serde_json::to_string(n).expect("a notification is plain data"),
        next_attempt_at: now.timestamp_millis(),
        created_at: now.timestamp(),
    })
    .await
}

/// The oldest row of `channel_id`, due or not. A row that cannot be read (written by another
/// version of warren) would block the channel for good: it is deleted, with a log row.
pub(super) async fn oldest(store: &Store, channel_id: &str) -> Result<Option<PendingDelivery>, sqlx::Error> {
    loop {
        let Some(row) = store.oldest_in_outbox(channel_id).await? else {
            return Ok(None);
        };
        let problem = match readable(&row) {
            Ok(pending) => return Ok(Some(pending)),
            Err(problem) => problem,
        };
        tracing::error!(channel = channel_id, id = row.id, %problem, "a pending notification cannot be read; it is dropped");
        drop_unreadable(store, row.id, &problem).await?;
    }
}

/// Claims the oldest row of `channel_id` for `claimer` (this process) for `ttl`, if it is due
/// by now and no other process is delivering the channel; see `storage::Alerts::claim_outbox`.
/// An unreadable row is dropped, as by [`oldest`].
pub(super) async fn claim(
    store: &Store,
    channel_id: &str,
    claimer: &str,
    ttl: Duration,
) -> Result<Option<PendingDelivery>, sqlx::Error> {
    loop {
        let due_by = Utc::now().timestamp_millis();
        let Some(row) = store.claim_outbox(channel_id, claimer, due_by, ttl).await? else {
            return Ok(None);
        };
        let problem = match readable(&row) {
            Ok(pending) => return Ok(Some(pending)),
            Err(problem) => problem,
        };
        tracing::error!(channel = channel_id, id = row.id, %problem, "a pending notification cannot be read; it is dropped");
        drop_unreadable(store, row.id, &problem).await?;
    }
}

/// Ends this process's claim on a row whose attempt was abandoned, so that another process
/// need not wait for the claim to expire.
pub(super) async fn release(store: &Store, id: i64, claimer: &str) -> Result<(), sqlx::Error> {
    store.release_outbox_claim(id, claimer).await
}

/// Deletes an unreadable row, logging what its own columns still say.
async fn drop_unreadable(store: &Store, id: i64, problem: &str) -> Result<(), sqlx::Error> {
    let mut tx = store.begin().await?;
    let Some(row) = tx.outbox_row(id).await? else { return Ok(()) };
    if let Some(kind) = NotificationKind::parse(&row.kind) {
        let entry = LogEntry {
            at: Utc::now(),
            channel_id: row.channel_id,
            channel_name: row.channel_name,
            kind,
            rule_id: Some(row.rule_id),
            alert_key: serde_json::from_str::<AlertKey>(&row.alert_key).ok(),
            attempt: u32::try_from(row.attempts).unwrap_or(u32::MAX - 1) + 1,
            outcome: Outcome::Dropped,
            http_status: None,
            error: Some(format!("the stored notification cannot be read: {problem}")),
        };
        super::record_in(&mut *tx, &entry).await?;
    }
    tx.delete_outbox(id).await?;
    tx.commit().await
}

/// Deletes a row delivered or given up on, if `claimer` still claims it: whether it did.
pub(super) async fn remove(tx: &mut dyn Transaction, id: i64, claimer: &str) -> Result<bool, sqlx::Error> {
    tx.delete_claimed_outbox(id, claimer).await
}

/// Records a failed attempt, if `claimer` still claims the row: `attempts` made so far, the
/// next not before `next_at`, by whichever process comes first. Whether it did.
pub(super) async fn retry_later(
    tx: &mut dyn Transaction,
    id: i64,
    claimer: &str,
    attempts: u32,
    next_at: DateTime<Utc>,
) -> Result<bool, sqlx::Error> {
    tx.retry_outbox(id, claimer, i64::from(attempts), next_at.timestamp_millis()).await
}

/// Deletes the rows of channels not in `channel_ids` queued before `queued_before`, each with a
/// `dropped` log row; returns how many. See [`super::Dispatcher::set_channels`] for why they are
/// not kept, and [`super::DeliveryPolicy::unknown_channel_grace`] for why younger ones are.
pub(super) async fn drop_other_channels(
    store: &Store,
    channel_ids: &[String],
    queued_before: DateTime<Utc>,
) -> Result<usize, sqlx::Error> {
    let mut tx = store.begin().await?;
    let rows = tx.outbox_rows().await?;
    let mut dropped = 0;
    let other =
        |row: &&OutboxRow| !channel_ids.contains(&row.channel_id) && row.created_at <= queued_before.timestamp();
    for row in rows.iter().filter(other) {
        if let Ok(pending) = readable(row) {
            let entry = LogEntry {
                error: Some("the channel was removed from the configuration".to_string()),
                ..pending.log_entry(pending.attempts + 1, Outcome::Dropped)
            };
            super::record_in(&mut *tx, &entry).await?;
        }
        tx.delete_outbox(row.id).await?;
        dropped += 1;
    }
    tx.commit().await?;
    Ok(dropped)
}

/// A row as a pending delivery, or what is wrong with it.
fn readable(row: &OutboxRow) -> Result<PendingDelivery, String> {
    let time = |millis: i64| DateTime::from_timestamp_millis(millis).ok_or_else(|| format!("{millis} is not a time"));
    Ok(PendingDelivery {
        id: row.id,
        channel_id: row.channel_id.clone(),
        channel_name: row.channel_name.clone(),
        notification: serde_json::from_str(&row.notification).map_err(|e| e.to_string())?,
        attempts: u32::try_from(row.attempts).map_err(|_| format!("{} is not a number of attempts", row.attempts))?,
        next_attempt_at: time(row.next_attempt_at)?,
        created_at: time(row.created_at.saturating_mul(1000))?,
    })
}
