//! Queues warren has seen processing messages: with consumers, a dead-letter target of their
//! own, and the role `work` (issue 31, must-have 4). One poll's consumer count is a weak signal
//! in an incident: the consumers of a work queue die, or have not connected yet after a deploy,
//! exactly when people look. What warren saw before is kept, in the database so that a restart
//! keeps it too, and the roles read it beside the listing (`topology::analyse_with`).

use std::collections::HashMap;

use sqlx::Row;

use crate::history::Db;

/// A stored sighting is refreshed at most this often: the reason shows when warren last saw
/// the consumers, to the minute, and a poll every few seconds need not write it each time.
const REFRESH_SECS: i64 = 600;

/// When each queue (vhost, name) was last seen with consumers, unix seconds.
#[derive(Debug, Default)]
pub struct Worked {
    seen: HashMap<(String, String), i64>,
}

impl Worked {
    pub async fn load(db: &Db, broker_id: i64) -> Result<Worked, sqlx::Error> {
        let rows = sqlx::query("select vhost, queue, seen_at from roles_worked_queues where broker_id = ?")
            .bind(broker_id)
            .fetch_all(db)
            .await?;
        let mut seen = HashMap::with_capacity(rows.len());
        for row in rows {
            seen.insert((row.try_get("vhost")?, row.try_get("queue")?), row.try_get("seen_at")?);
        }
        Ok(Worked { seen })
    }

    /// When the queue was last seen with consumers, in words for a role's reason.
    pub fn words(&self, vhost: &str, queue: &str) -> Option<String> {
        let at = *self.seen.get(&(vhost.to_string(), queue.to_string()))?;
        let at = chrono::DateTime::from_timestamp(at, 0)?;
        Some(at.format("%Y-%m-%d %H:%M UTC").to_string())
    }

    /// Records that the queue has consumers now and processes messages (its role is `work`).
    /// A failed write is logged: the sighting is still kept in memory for this run.
    pub async fn record(&mut self, db: &Db, broker_id: i64, vhost: &str, queue: &str, now: i64) {
        let key = (vhost.to_string(), queue.to_string());
        if self.seen.get(&key).is_some_and(|at| now - *at < REFRESH_SECS) {
            return;
        }
        self.seen.insert(key, now);
        let written = sqlx::query(
            "insert into roles_worked_queues (broker_id, vhost, queue, seen_at) values (?, ?, ?, ?) \
             on conflict (broker_id, vhost, queue) do update set seen_at = excluded.seen_at",
        )
        .bind(broker_id)
        .bind(vhost)
        .bind(queue)
        .bind(now)
        .execute(db)
        .await;
        if let Err(error) = written {
            tracing::warn!(vhost, queue, %error, "could not store that the queue has consumers; kept for this run");
        }
    }
}
