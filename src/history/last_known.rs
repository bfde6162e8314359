//! What the database keeps of a broker's last known state beyond its samples: the time of its
//! last successful poll and the last topology of each watched vhost. A warren restarted while a
//! broker does not answer shows that state, marked stale (`poller::restore`).

use std::collections::HashMap;

use sqlx::Row;

use super::Db;
use crate::broker::topology::{Binding, Exchange, VhostTopology};

/// Unix seconds of the broker's last successful poll (its newest `broker_samples` row).
pub async fn last_poll_at(db: &Db, broker_id: i64) -> Result<Option<i64>, sqlx::Error> {
    sqlx::query_scalar("select max(ts) from broker_samples where broker_id = ?").bind(broker_id).fetch_one(db).await
}

/// Keeps `topology` as the vhost's last one read, at `read_at` (unix seconds).
pub async fn store_topology(
    db: &Db,
    broker_id: i64,
    vhost: &str,
    topology: &VhostTopology,
    read_at: i64,
) -> Result<(), sqlx::Error> {
    let bindings = serde_json::to_string(&topology.bindings).expect("bindings serialise");
    let exchanges = serde_json::to_string(&topology.exchanges).expect("exchanges serialise");
    sqlx::query(
        "insert into vhost_topology (broker_id, vhost, bindings, exchanges, read_at) values (?, ?, ?, ?, ?)
         on conflict (broker_id, vhost) do update set
           bindings = excluded.bindings, exchanges = excluded.exchanges, read_at = excluded.read_at",
    )
    .bind(broker_id)
    .bind(vhost)
    .bind(bindings)
    .bind(exchanges)
    .bind(read_at)
    .execute(db)
    .await?;
    Ok(())
}

/// The last topology read of each vhost of the broker. A row that does not parse is left out
/// (its queues then have no known role), with a warning.
pub async fn topologies(db: &Db, broker_id: i64) -> Result<HashMap<String, VhostTopology>, sqlx::Error> {
    let rows = sqlx::query("select vhost, bindings, exchanges from vhost_topology where broker_id = ?")
        .bind(broker_id)
        .fetch_all(db)
        .await?;
    let mut out = HashMap::with_capacity(rows.len());
    for row in rows {
        let vhost: String = row.try_get("vhost")?;
        let bindings: String = row.try_get("bindings")?;
        let exchanges: String = row.try_get("exchanges")?;
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
