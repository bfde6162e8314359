//! What the database keeps of a broker's last known state beyond its samples: the time of its
//! last successful poll and the last topology of each watched vhost. A warren restarted while a
//! broker does not answer shows that state, marked stale (`poller::restore`).

use std::collections::HashMap;

use crate::broker::topology::{Binding, Exchange, VhostTopology};
use crate::storage::topology::StoredTopology;
use crate::storage::{Held, Store};

/// Unix seconds of the broker's last successful poll (its newest `broker_samples` row).
pub async fn last_poll_at(store: &Store, broker_id: i64) -> Result<Option<i64>, sqlx::Error> {
    store.last_poll_at(broker_id).await
}

/// Keeps `topology` as the vhost's last one read, at `read_at` (unix seconds), under `fence`
/// (the poller's lease): `false`, and nothing written, when it is no longer held.
pub async fn store_topology(
    store: &Store,
    broker_id: i64,
    vhost: &str,
    topology: &VhostTopology,
    read_at: i64,
    fence: Option<&Held>,
) -> Result<bool, sqlx::Error> {
    let stored = StoredTopology {
        vhost: vhost.to_string(),
        bindings: serde_json::to_string(&topology.bindings).expect("bindings serialise"),
        exchanges: serde_json::to_string(&topology.exchanges).expect("exchanges serialise"),
    };
    store.store_topology(broker_id, &stored, read_at, fence).await
}

/// The last topology read of each vhost of the broker. A row that does not parse is left out
/// (its queues then have no known role), with a warning.
pub async fn topologies(store: &Store, broker_id: i64) -> Result<HashMap<String, VhostTopology>, sqlx::Error> {
    let rows = store.topologies(broker_id).await?;
    let mut out = HashMap::with_capacity(rows.len());
    for StoredTopology { vhost, bindings, exchanges } in rows {
        let parsed = serde_json::from_str::<Vec<Binding>>(&bindings)
            .and_then(|b| Ok((b, serde_json::from_str::<Vec<Exchange>>(&exchanges)?)));
        match parsed {
            Ok((bindings, exchanges)) => {
                out.insert(vhost, VhostTopology { bindings, exchanges });
            }
            Err(error) => tracing::warn!(%vhost, %error, "stored topology unreadable; its queues' roles stay unknown"),
        }
    }
    Ok(out)
}
