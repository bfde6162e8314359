//! What warren keeps of each broker's topology between runs: the last exchanges and bindings
//! read of each vhost (`vhost_topology`), the queues it has seen processing messages
//! (`roles_worked_queues`), and the last client, exchange and node listings (`broker_listings`),
//! which the replicas that do not poll the broker show. What they mean for a queue's role is
//! `poller`'s and `broker`'s.
//!
//! Every write takes the poller's lease (`fence`): a replica paused past its lease writes none
//! of them after another took the broker over (issue 33, must-have 3).

use async_trait::async_trait;

use super::{Held, Result};

/// A vhost's last topology as stored: bindings and exchanges as JSON arrays, parsed by the reader.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct StoredTopology {
    pub vhost: String,
    pub bindings: String,
    pub exchanges: String,
}

/// A queue last seen with consumers at `seen_at` (unix seconds).
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct WorkedQueue {
    pub vhost: String,
    pub queue: String,
    pub seen_at: i64,
}

/// One listing of a broker as its poller last made it: what `kind` it is (`live::listings`
/// names them), when it was read (unix milliseconds) and its JSON.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct StoredListing {
    pub kind: String,
    pub read_at: i64,
    pub body: String,
}

#[async_trait]
pub trait Topology {
    /// Keeps `topology` as its vhost's last one read, at `read_at` (unix seconds). `false`, and
    /// nothing written, when `fence` is no longer held.
    async fn store_topology(
        &self,
        broker_id: i64,
        topology: &StoredTopology,
        read_at: i64,
        fence: Option<&Held>,
    ) -> Result<bool>;
    /// The last topology stored of each vhost of the broker.
    async fn topologies(&self, broker_id: i64) -> Result<Vec<StoredTopology>>;
    /// Every queue of the broker seen with consumers.
    async fn worked_queues(&self, broker_id: i64) -> Result<Vec<WorkedQueue>>;
    /// Records that the queue was seen with consumers at `seen_at`; `false`, and nothing
    /// written, when `fence` is no longer held.
    async fn record_worked(
        &self,
        broker_id: i64,
        vhost: &str,
        queue: &str,
        seen_at: i64,
        fence: Option<&Held>,
    ) -> Result<bool>;
    /// Keeps each listing as the broker's last one of its kind, in one transaction; `false`,
    /// and nothing written, when `fence` is no longer held.
    async fn store_listings(&self, broker_id: i64, listings: &[StoredListing], fence: Option<&Held>) -> Result<bool>;
    /// The broker's last listing of `kind` if it was read after `newer_than` (unix ms): a
    /// follower reads a listing again only when it changed.
    async fn listing(&self, broker_id: i64, kind: &str, newer_than: i64) -> Result<Option<StoredListing>>;
}
