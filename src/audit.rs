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

/// Records a running action's progress (a checkpoint a crash leaves behind).
pub async fn progress(db: &Db, id: i64, moved: usize, failed: usize) -> Result<(), sqlx::Error> {
    sqlx::query("update audit_log set outcome = 'running', moved = ?, failed = ? where id = ? and outcome in ('started', 'running')")
        .bind(moved as i64)
        .bind(failed as i64)
        .bind(id)
        .execute(db)
        .await?;
    Ok(())
}

/// Marks the actions a previous run left unfinished (it crashed or was killed); called at
/// start, before any new action. Returns how many there were.
pub async fn mark_interrupted(db: &Db) -> Result<u64, sqlx::Error> {
    let done = sqlx::query(
        "update audit_log set outcome = 'interrupted', detail = 'warren stopped during this action. Counts are from \
         the last checkpoint. Messages warren held unacked went back to the source queue when its connection \
         closed; a message copied but not yet acked can be in both queues (at-least-once), none is lost.'
         where outcome in ('started', 'running')",
    )
    .execute(db)
    .await?;
    Ok(done.rows_affected())
}

/// One entry by id.
pub async fn get(db: &Db, id: i64) -> Result<Option<Record>, sqlx::Error> {
    Ok(query_records(db, "where id = ?", id).await?.pop())
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
    query_records(db, "order by id desc limit ?", limit).await
}

async fn query_records(db: &Db, clause: &str, value: i64) -> Result<Vec<Record>, sqlx::Error> {
    let sql = format!(
        "select id, at, actor, broker, vhost, queue, action, request, outcome, moved, failed, message_ids, detail
         from audit_log {clause}"
    );
    let rows = sqlx::query(&sql).bind(value).fetch_all(db).await?;
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
