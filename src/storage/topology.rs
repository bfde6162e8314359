//! What warren keeps of each broker's topology between runs: the last exchanges and bindings
//! read of each vhost (`vhost_topology`) and the queues it has seen processing messages
//! (`roles_worked_queues`). What they mean for a queue's role is `poller`'s and `broker`'s.

use async_trait::async_trait;

use super::Result;

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

#[async_trait]
pub trait Topology {
    /// Keeps `topology` as its vhost's last one read, at `read_at` (unix seconds).
    async fn store_topology(&self, broker_id: i64, topology: &StoredTopology, read_at: i64) -> Result<()>;
    /// The last topology stored of each vhost of the broker.
    async fn topologies(&self, broker_id: i64) -> Result<Vec<StoredTopology>>;
    /// Every queue of the broker seen with consumers.
    async fn worked_queues(&self, broker_id: i64) -> Result<Vec<WorkedQueue>>;
    /// Records that the queue was seen with consumers at `seen_at`.
    async fn record_worked(&self, broker_id: i64, vhost: &str, queue: &str, seen_at: i64) -> Result<()>;
}
