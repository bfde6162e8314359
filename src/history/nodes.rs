//! History of the cluster's nodes (`node_samples`, migration 0019): one row per node per poll,
//! thinned as it ages (see the migration), and read back bucketed for the nodes page's charts.

use super::rollup::{Windows, HOUR_SECS, MINUTE_SECS};
use crate::broker::nodes::Node;
pub use crate::storage::nodes::NodePoint;
use crate::storage::{Held, Store};

/// Writes one poll's nodes in one transaction, under `fence` (the poller's lease): `false`, and
/// nothing written, when it is no longer held.
pub async fn write(
    store: &Store,
    broker_id: i64,
    ts: i64,
    nodes: &[Node],
    fence: Option<&Held>,
) -> Result<bool, sqlx::Error> {
    store.write_nodes(broker_id, ts, nodes, fence).await
}

/// The node's points from `from` to `to`, one per `step` seconds that has samples.
pub async fn history(
    store: &Store,
    broker_id: i64,
    node: &str,
    from: i64,
    to: i64,
    step: i64,
) -> Result<Vec<NodePoint>, sqlx::Error> {
    store.node_history(broker_id, node, from, to, step.max(1)).await
}

/// The node's free-disk readings since `from`, oldest first: what the disk prediction fits.
pub async fn disk_free_since(store: &Store, broker_id: i64, from: i64) -> Result<Vec<(String, i64, u64)>, sqlx::Error> {
    let rows = store.disk_free_since(broker_id, from).await?;
    Ok(rows.into_iter().map(|(node, ts, free)| (node, ts, free.max(0) as u64)).collect())
}

/// Thins aged samples: older than the raw window only the last of each minute stays, older
/// than the minute window the last of each hour, and nothing older than the retention.
pub async fn prune(store: &Store, now: i64, windows: Windows) -> Result<u64, sqlx::Error> {
    let mut removed = store.delete_nodes_before(now - windows.hour_secs).await?;
    for (before, bucket) in [(now - windows.raw_secs, MINUTE_SECS), (now - windows.minute_secs, HOUR_SECS)] {
        removed += store.thin_nodes(before, bucket).await?;
    }
    Ok(removed)
}
