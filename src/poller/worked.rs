//! Queues warren has seen processing messages: with consumers, a dead-letter target of their
//! own, and the role `work` (issue 31, must-have 4). One poll's consumer count is a weak signal
//! in an incident: the consumers of a work queue die, or have not connected yet after a deploy,
//! exactly when people look. What warren saw before is kept, in the database so that a restart
//! keeps it too, and the roles read it beside the listing (`topology::analyse_with`).

use std::collections::HashMap;

use crate::storage::{Held, Store};

/// A stored sighting is refreshed at most this often: the reason shows when warren last saw
/// the consumers, to the minute, and a poll every few seconds need not write it each time.
const REFRESH_SECS: i64 = 600;

/// When each queue (vhost, name) was last seen with consumers, unix seconds.
#[derive(Debug, Default)]
pub struct Worked {
    seen: HashMap<(String, String), i64>,
}

impl Worked {
    pub async fn load(store: &Store, broker_id: i64) -> Result<Worked, sqlx::Error> {
        let rows = store.worked_queues(broker_id).await?;
        let seen = rows.into_iter().map(|w| ((w.vhost, w.queue), w.seen_at)).collect();
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
    /// Stored under `fence`, the poller's lease: without it, kept in memory only.
    pub async fn record(
        &mut self,
        store: &Store,
        broker_id: i64,
        vhost: &str,
        queue: &str,
        now: i64,
        fence: Option<&Held>,
    ) {
        let key = (vhost.to_string(), queue.to_string());
        if self.seen.get(&key).is_some_and(|at| now - *at < REFRESH_SECS) {
            return;
        }
        self.seen.insert(key, now);
        match store.record_worked(broker_id, vhost, queue, now, fence).await {
            Ok(true) => {}
            Ok(false) => tracing::warn!(vhost, queue, "lease lost: that the queue has consumers is not stored"),
            Err(error) => {
                tracing::warn!(vhost, queue, %error, "could not store that the queue has consumers; kept for this run")
            }
        }
    }
}
