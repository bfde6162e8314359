//! The last snapshot of each dead-letter queue as stored (`dlq_snapshots`), so a restart shows
//! what was shown before, and the installation's key of the snapshots' tokens
//! (`instance_keys`). What a snapshot holds and how its messages read is `dlq::browse`'s.

use async_trait::async_trait;

use super::Result;

/// A queue's snapshot as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredSnapshot {
    pub broker: String,
    pub vhost: String,
    pub queue: String,
    /// Unix milliseconds.
    pub taken_at: i64,
    pub queue_type: String,
    pub delivery_limit: Option<i64>,
    pub requested: i64,
    pub note: Option<String>,
    pub outdated: Option<String>,
    /// The messages as JSON.
    pub messages: String,
}

#[async_trait]
pub trait Snapshots {
    /// Stores `snapshot` as its queue's, replacing the one before.
    async fn save_snapshot(&self, snapshot: &StoredSnapshot) -> Result<()>;
    /// Sets the stored snapshot of (broker, vhost, queue) outdated by `text`, if there is one.
    async fn outdate_snapshot(&self, queue: (&str, &str, &str), text: &str) -> Result<()>;
    /// Every stored snapshot.
    async fn snapshots(&self) -> Result<Vec<StoredSnapshot>>;
}
