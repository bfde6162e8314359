//! The delivery log: one row per attempt, and one per notification that was never attempted
//! or whose attempt warren abandoned, so an operator can see why a message did not arrive.

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::Row;

use super::{Notification, NotificationChannel, NotificationKind};
use crate::alerts::AlertKey;
use crate::history::Db;

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

/// Writes one row of the delivery log, on the pool or in a transaction (the outbox writes its
/// rows and their log rows together).
pub async fn record<'e>(db: impl sqlx::SqliteExecutor<'e>, entry: &LogEntry) -> Result<(), sqlx::Error> {
    let alert_key = entry.alert_key.as_ref().map(|k| serde_json::to_string(k).expect("an alert key is plain data"));
    sqlx::query(
        "insert into notification_log \
         (at, channel_id, channel_name, kind, rule_id, alert_key, attempt, outcome, http_status, error) \
         values (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
    )
    .bind(entry.at.timestamp())
    .bind(&entry.channel_id)
    .bind(&entry.channel_name)
    .bind(entry.kind.as_str())
    .bind(&entry.rule_id)
    .bind(alert_key)
    .bind(entry.attempt)
    .bind(entry.outcome.as_str())
    .bind(entry.http_status)
    .bind(&entry.error)
    .execute(db)
    .await?;
    Ok(())
}

/// Deletes rows older than `cutoff` (unix seconds); returns how many.
pub async fn prune(db: &Db, cutoff: i64) -> Result<u64, sqlx::Error> {
    Ok(sqlx::query("delete from notification_log where at < ?").bind(cutoff).execute(db).await?.rows_affected())
}

/// The latest `limit` rows, newest first.
pub async fn recent_deliveries(db: &Db, limit: i64) -> Result<Vec<DeliveryRecord>, sqlx::Error> {
    deliveries_before(db, None, limit).await
}

/// The latest `limit` rows below the id `before` (all: none), newest first: the API's pages.
pub async fn deliveries_before(db: &Db, before: Option<i64>, limit: i64) -> Result<Vec<DeliveryRecord>, sqlx::Error> {
    let rows = sqlx::query(
        "select id, at, channel_id, channel_name, kind, rule_id, alert_key, attempt, outcome, http_status, error \
         from notification_log where id < ? order by id desc limit ?",
    )
    .bind(before.unwrap_or(i64::MAX))
    .bind(limit)
    .fetch_all(db)
    .await?;
    rows.iter().map(delivery_from_row).collect()
}

fn delivery_from_row(row: &sqlx::sqlite::SqliteRow) -> Result<DeliveryRecord, sqlx::Error> {
    let decode =
        |column: &str, problem: String| sqlx::Error::ColumnDecode { index: column.to_string(), source: problem.into() };
    let kind: String = row.try_get("kind")?;
    let kind =
        NotificationKind::parse(&kind).ok_or_else(|| decode("kind", format!("unknown notification kind {kind:?}")))?;
    let outcome: String = row.try_get("outcome")?;
    let outcome = Outcome::parse(&outcome).ok_or_else(|| decode("outcome", format!("unknown outcome {outcome:?}")))?;
    let alert_key: Option<String> = row.try_get("alert_key")?;
    let alert_key =
        alert_key.map(|k| serde_json::from_str(&k).map_err(|e| decode("alert_key", e.to_string()))).transpose()?;
    let at: i64 = row.try_get("at")?;
    Ok(DeliveryRecord {
        id: row.try_get("id")?,
        at: DateTime::from_timestamp(at, 0).ok_or_else(|| decode("at", format!("{at} is not a time")))?,
        channel_id: row.try_get("channel_id")?,
        channel_name: row.try_get("channel_name")?,
        kind,
        rule_id: row.try_get("rule_id")?,
        alert_key,
        attempt: row.try_get("attempt")?,
        outcome,
        http_status: row.try_get("http_status")?,
        error: row.try_get("error")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Secret;

    #[tokio::test]
    async fn rows_come_back_newest_first_with_their_fields() {
        let dir = tempfile::tempdir().unwrap();
        let db = crate::history::open(&dir.path().join("log.db")).await.unwrap();
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
