//! The delivery log: one row per attempt, and one per notification that was never attempted
//! or whose attempt warren abandoned, so an operator can see why a message did not arrive.

use super::{Notification, NotificationChannel, NotificationKind};
use crate::alerts::AlertKey;
use crate::storage::alerts::LogRow;
use crate::storage::{Store, Transaction};
use chrono::{DateTime, Utc};
use serde::Serialize;

/// How one attempt ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    Sent,
    /// This attempt failed; another follows after the backoff.
    Failed,
    /// This attempt failed and was the last: retries are used up, or retrying cannot help.
    GaveUp,
    /// This attempt was not made, or not finished: the channel's queue (its rows in the outbox)
    /// was full or the channel was removed, and the notification is lost; or warren stopped
    /// during the attempt, and the notification stays in the outbox to be tried again.
    Dropped,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Sent => "sent",
            Outcome::Failed => "failed",
            Outcome::GaveUp => "gave_up",
            Outcome::Dropped => "dropped",
        }
    }

    fn parse(text: &str) -> Option<Outcome> {
        [Outcome::Sent, Outcome::Failed, Outcome::GaveUp, Outcome::Dropped].into_iter().find(|o| o.as_str() == text)
    }
}

/// One row to write: which notification, on which channel, which attempt, how it ended.
#[derive(Debug, Clone, PartialEq)]
pub struct LogEntry {
    pub at: DateTime<Utc>,
    pub channel_id: String,
    pub channel_name: String,
    pub kind: NotificationKind,
    /// `None` for a test notification, which is about no rule.
    pub rule_id: Option<String>,
    pub alert_key: Option<AlertKey>,
    /// 1 for the first try; for `dropped`, the attempt that was not made.
    pub attempt: u32,
    pub outcome: Outcome,
    pub http_status: Option<u16>,
    /// Already free of secrets (see `send`).
    pub error: Option<String>,
}

impl LogEntry {
    /// An entry for `n` on `channel`, now; set `http_status` and `error` as they apply.
    pub fn new(channel: &NotificationChannel, n: &Notification, attempt: u32, outcome: Outcome) -> LogEntry {
        LogEntry::about(&channel.id, &channel.name, n, attempt, outcome)
    }

    /// The same, for a channel known only by id and name (one that may have been removed).
    pub fn about(channel_id: &str, channel_name: &str, n: &Notification, attempt: u32, outcome: Outcome) -> LogEntry {
        let about_alert = n.kind != NotificationKind::Test;
        LogEntry {
            at: Utc::now(),
            channel_id: channel_id.to_string(),
            channel_name: channel_name.to_string(),
            kind: n.kind,
            rule_id: about_alert.then(|| n.rule_id.clone()),
            alert_key: about_alert.then(|| n.key.clone()),
            attempt,
            outcome,
            http_status: None,
            error: None,
        }
    }
}

/// A row of the delivery log, for the API and the page.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct DeliveryRecord {
    pub id: i64,
    pub at: DateTime<Utc>,
    pub channel_id: String,
    pub channel_name: String,
    pub kind: NotificationKind,
    pub rule_id: Option<String>,
    pub alert_key: Option<AlertKey>,
    pub attempt: u32,
    pub outcome: Outcome,
    pub http_status: Option<u16>,
    pub error: Option<String>,
}

impl LogEntry {
    fn row(&self) -> LogRow {
        LogRow {
            id: 0,
            at: self.at.timestamp(),
            channel_id: self.channel_id.clone(),
            channel_name: self.channel_name.clone(),
            kind: self.kind.as_str().to_string(),
            rule_id: self.rule_id.clone(),
            alert_key: self.alert_key.as_ref().map(|k| serde_json::to_string(k).expect("an alert key is plain data")),
            attempt: i64::from(self.attempt),
            outcome: self.outcome.as_str().to_string(),
            http_status: self.http_status.map(i64::from),
            error: self.error.clone(),
        }
    }
}

/// Writes one row of the delivery log.
pub async fn record(store: &Store, entry: &LogEntry) -> Result<(), sqlx::Error> {
    store.insert_log(&entry.row()).await
}

/// Writes one row of the delivery log in a transaction (the outbox writes its rows and their
/// log rows together).
pub async fn record_in(tx: &mut dyn Transaction, entry: &LogEntry) -> Result<(), sqlx::Error> {
    tx.insert_log(&entry.row()).await
}

/// Deletes rows older than `cutoff` (unix seconds); returns how many.
pub async fn prune(store: &Store, cutoff: i64) -> Result<u64, sqlx::Error> {
    store.prune_log(cutoff).await
}

/// The latest `limit` rows, newest first.
pub async fn recent_deliveries(store: &Store, limit: i64) -> Result<Vec<DeliveryRecord>, sqlx::Error> {
    deliveries_before(store, None, limit).await
}

/// The latest `limit` rows below the id `before` (all: none), newest first: the API's pages.
pub async fn deliveries_before(
    store: &Store,
    before: Option<i64>,
    limit: i64,
) -> Result<Vec<DeliveryRecord>, sqlx::Error> {
    store.deliveries(before.unwrap_or(i64::MAX), limit).await?.into_iter().map(delivery_from_row).collect()
}

fn delivery_from_row(row: LogRow) -> Result<DeliveryRecord, sqlx::Error> {
    let decode =
        |column: &str, problem: String| sqlx::Error::ColumnDecode { index: column.to_string(), source: problem.into() };
    let kind = NotificationKind::parse(&row.kind)
        .ok_or_else(|| decode("kind", format!("unknown notification kind {:?}", row.kind)))?;
    let outcome =
        Outcome::parse(&row.outcome).ok_or_else(|| decode("outcome", format!("unknown outcome {:?}", row.outcome)))?;
    let alert_key =
        row.alert_key.map(|k| serde_json::from_str(&k).map_err(|e| decode("alert_key", e.to_string()))).transpose()?;
    let attempt =
        u32::try_from(row.attempt).map_err(|_| decode("attempt", format!("{} is not an attempt", row.attempt)))?;
    let http_status = row
        .http_status
        .map(|s| u16::try_from(s).map_err(|_| decode("http_status", format!("{s} is not an HTTP status"))))
        .transpose()?;
    Ok(DeliveryRecord {
        id: row.id,
        at: DateTime::from_timestamp(row.at, 0).ok_or_else(|| decode("at", format!("{} is not a time", row.at)))?,
        channel_id: row.channel_id,
        channel_name: row.channel_name,
        kind,
        rule_id: row.rule_id,
        alert_key,
        attempt,
        outcome,
        http_status,
        error: row.error,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Secret;

    #[tokio::test]
    async fn rows_come_back_newest_first_with_their_fields() {
        let dir = tempfile::tempdir().unwrap();
        let db = crate::storage::sqlite::store(crate::history::open(&dir.path().join("log.db")).await.unwrap());
        let channel = NotificationChannel {
            id: "hook".to_string(),
            name: "Hook".to_string(),
            min_severity: None,
            kind: super::super::ChannelKind::Webhook { url: Secret::new("http://127.0.0.1:9/x") },
        };
        let mut n = Notification::test(Utc::now());
        record(&db, &LogEntry { http_status: Some(200), ..LogEntry::new(&channel, &n, 1, Outcome::Sent) })
            .await
            .unwrap();
        n.kind = NotificationKind::Firing;
        n.rule_id = "r1".to_string();
        n.key = AlertKey::queue("main", "/", "orders");
        let failed = LogEntry {
            http_status: Some(500),
            error: Some("the receiver answered HTTP 500".to_string()),
            ..LogEntry::new(&channel, &n, 2, Outcome::GaveUp)
        };
        record(&db, &failed).await.unwrap();

        let rows = recent_deliveries(&db, 10).await.unwrap();
        assert_eq!(rows.len(), 2);
        assert_eq!((rows[0].kind, rows[0].outcome, rows[0].attempt), (NotificationKind::Firing, Outcome::GaveUp, 2));
        assert_eq!(rows[0].alert_key, Some(AlertKey::queue("main", "/", "orders")));
        assert_eq!(rows[0].rule_id.as_deref(), Some("r1"));
        assert_eq!(rows[0].http_status, Some(500));
        assert_eq!(
            (rows[1].kind, rows[1].outcome, rows[1].rule_id.as_ref()),
            (NotificationKind::Test, Outcome::Sent, None)
        );
        assert_eq!(rows[1].http_status, Some(200));
        assert_eq!(recent_deliveries(&db, 1).await.unwrap().len(), 1);
        let json = serde_json::to_value(&rows[0]).unwrap();
        assert_eq!(json["outcome"], "gave_up");
        assert_eq!(json["kind"], "firing");
    }
}
