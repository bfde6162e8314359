//! The cluster's nodes over time (`node_samples`): one row per node per poll, thinned as it
//! ages. Which rows age out when is `history::nodes`'s.

use async_trait::async_trait;
use serde::Serialize;

use super::{Held, Result};
use crate::broker::nodes::Node;

/// One chart point: the node's values over `[ts, ts + step)`. Memory, descriptors, sockets,
/// processes and run queue are the step's maximum, free disk its minimum (the worst moment),
/// limits the maximum; `null` where no sample in the step had the value.
#[derive(Debug, Clone, Serialize, PartialEq, utoipa::ToSchema, sqlx::FromRow)]
pub struct NodePoint {
    #[serde(flatten, serialize_with = "crate::times::ts")]
    #[schema(schema_with = crate::times::schema::ts)]
    pub ts: i64,
    pub samples: i64,
    /// False if the node was down at any sample of the step.
    pub running: Option<bool>,
    pub mem_used: Option<i64>,
    pub mem_limit: Option<i64>,
    pub disk_free: Option<i64>,
    pub disk_free_limit: Option<i64>,
    pub fd_used: Option<i64>,
    pub fd_total: Option<i64>,
    pub sockets_used: Option<i64>,
    pub sockets_total: Option<i64>,
    pub proc_used: Option<i64>,
    pub proc_total: Option<i64>,
    pub run_queue: Option<i64>,
    pub partitions: Option<i64>,
}

/// A count as stored: the broker's unsigned values beyond i64 (none in practice) are kept as
/// the largest i64, not wrapped into negatives.
pub(super) fn int(v: Option<u64>) -> Option<i64> {
    v.map(|n| i64::try_from(n).unwrap_or(i64::MAX))
}

#[async_trait]
pub trait Nodes {
    /// One poll's nodes, in one transaction; `false`, and nothing written, when `fence` (the
    /// poller's lease) is no longer held.
    async fn write_nodes(&self, broker_id: i64, ts: i64, nodes: &[Node], fence: Option<&Held>) -> Result<bool>;
    /// The node's points in `[from, to]`, one per `step` seconds that has samples, by time.
    async fn node_history(&self, broker_id: i64, node: &str, from: i64, to: i64, step: i64) -> Result<Vec<NodePoint>>;
    /// (node, ts, free disk bytes) of the broker's samples since `from` that have it, by node and time.
    async fn disk_free_since(&self, broker_id: i64, from: i64) -> Result<Vec<(String, i64, i64)>>;
    /// Deletes every node sample older than `before`; returns how many.
    async fn delete_nodes_before(&self, before: i64) -> Result<u64>;
    /// Of the samples older than `before`, keeps only each node's last of each `bucket_secs`;
    /// returns how many were deleted.
    async fn thin_nodes(&self, before: i64, bucket_secs: i64) -> Result<u64>;
}
