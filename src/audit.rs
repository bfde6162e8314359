//! The audit log: who did what to which queue, when, and how it ended.

use serde::Serialize;
use sqlx::Row;

use crate::history::Db;

/// One action as it starts.
pub struct Entry<'a> {
    pub actor: &'a str,
    pub broker: &'a str,
    pub vhost: &'a str,
    pub queue: &'a str,
    pub action: &'a str,
    pub request: String,
}

/// Records an action before it runs; returns its id for `finish`.
pub async fn start(db: &Db, entry: Entry<'_>) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar(
        "insert into audit_log (at, actor, broker, vhost, queue, action, request, outcome)
         values (?, ?, ?, ?, ?, ?, ?, 'started') returning id",
    )
    .bind(chrono::Utc::now().timestamp())
    .bind(entry.actor)
    .bind(entry.broker)
    .bind(entry.vhost)
    .bind(entry.queue)
    .bind(entry.action)
    .bind(entry.request)
    .fetch_one(db)
    .await
}

/// Records how an action ended.
pub async fn finish(
    db: &Db,
    id: i64,
    outcome: &str,
    moved: usize,
    failed: usize,
    message_ids: &[Option<String>],
    detail: Option<&str>,
) -> Result<(), sqlx::Error> {
    let ids = serde_json::to_string(message_ids).expect("ids serialise");
    sqlx::query("update audit_log set outcome = ?, moved = ?, failed = ?, message_ids = ?, detail = ? where id = ?")
        .bind(outcome)
        .bind(moved as i64)
        .bind(failed as i64)
        .bind(ids)
        .bind(detail)
        .bind(id)
        .execute(db)
        .await?;
    Ok(())
}

#[derive(Debug, Serialize)]
pub struct Record {
    pub id: i64,
    pub at: i64,
    pub actor: String,
    pub broker: String,
    pub vhost: String,
    pub queue: String,
    pub action: String,
    pub request: serde_json::Value,
    pub outcome: String,
    pub moved: i64,
    pub failed: i64,
    pub message_ids: serde_json::Value,
    pub detail: Option<String>,
}

/// The newest `limit` entries, newest first.
pub async fn recent(db: &Db, limit: i64) -> Result<Vec<Record>, sqlx::Error> {
    let rows = sqlx::query(
        "select id, at, actor, broker, vhost, queue, action, request, outcome, moved, failed, message_ids, detail
         from audit_log order by id desc limit ?",
    )
    .bind(limit)
    .fetch_all(db)
    .await?;
    let json = |text: String| serde_json::from_str(&text).unwrap_or(serde_json::Value::String(text));
    rows.iter()
        .map(|r| {
            Ok(Record {
                id: r.try_get("id")?,
                at: r.try_get("at")?,
                actor: r.try_get("actor")?,
                broker: r.try_get("broker")?,
                vhost: r.try_get("vhost")?,
                queue: r.try_get("queue")?,
                action: r.try_get("action")?,
                request: json(r.try_get("request")?),
                outcome: r.try_get("outcome")?,
                moved: r.try_get("moved")?,
                failed: r.try_get("failed")?,
                message_ids: json(r.try_get("message_ids")?),
                detail: r.try_get("detail")?,
            })
        })
        .collect()
}
