//! The client, exchange and node listings in the database, for the replicas that do not poll a
//! broker (issue 33, must-have 2: live pages right on every replica). The holder of a broker's
//! lease writes each listing when it is new, fenced with the lease's epoch; the others read a
//! listing again only when a newer one was written, and show it as the holder read it.

use std::sync::Arc;

use chrono::{DateTime, Utc};
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::broker::exchanges::TopologyLive;
use crate::broker::nodes::{NodesLive, DISK_READINGS_KEEP_SECS};
use crate::history;
use crate::live::clients::ClientsLive;
use crate::live::Live;
use crate::storage::topology::StoredListing;
use crate::storage::{Held, Store};

const CLIENTS: &str = "clients";
const TOPOLOGY: &str = "topology";
const NODES: &str = "nodes";

/// When each listing was read (unix milliseconds), as last written or read: a listing is
/// written, or read back, only when its time moved.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ListingTimes {
    clients: i64,
    topology: i64,
    nodes: i64,
}

fn millis(t: Option<DateTime<Utc>>) -> i64 {
    t.map_or(0, |t| t.timestamp_millis())
}

/// When `topology` was last read: the newer of its exchange listing and any vhost's bindings,
/// to the second (a vhost's read time is derived from an `Instant` at each call).
fn topology_time(topology: &TopologyLive) -> i64 {
    let vhosts = topology.vhosts.values().map(|v| v.read_at.timestamp()).max().unwrap_or(0);
    let exchanges = topology.exchanges_read_at.map_or(0, |t| t.timestamp());
    vhosts.max(exchanges) * 1000
}

fn listing(kind: &str, read_at: i64, value: &impl Serialize) -> StoredListing {
    StoredListing { kind: kind.into(), read_at, body: serde_json::to_string(value).expect("listings serialise") }
}

/// Writes the listings that are newer than `written`, under `fence`, and moves `written` on.
/// `Ok(false)`: the lease was lost, nothing written.
pub async fn store(
    store: &Store,
    broker_id: i64,
    clients: Option<&ClientsLive>,
    topology: &TopologyLive,
    nodes: &NodesLive,
    written: &mut ListingTimes,
    fence: Option<&Held>,
) -> Result<bool, sqlx::Error> {
    let now = ListingTimes {
        clients: millis(clients.map(|c| c.listed_at)),
        topology: topology_time(topology),
        nodes: millis(nodes.as_of),
    };
    let mut due = Vec::new();
    if let Some(clients) = clients.filter(|_| now.clients > written.clients) {
        due.push(listing(CLIENTS, now.clients, &StoredClients::from(clients)));
    }
    if now.topology > written.topology {
        due.push(listing(TOPOLOGY, now.topology, topology));
    }
    if now.nodes > written.nodes {
        due.push(listing(NODES, now.nodes, nodes));
    }
    if due.is_empty() {
        return Ok(true);
    }
    if !store.store_listings(broker_id, &due, fence).await? {
        return Ok(false);
    }
    *written = now;
    Ok(true)
}

/// Shows the listings the holder wrote that are newer than `read`, and moves `read` on. A
/// listing that does not parse (written by another version of warren) is left out, with a
/// warning: its page says it was not read yet, as before.
pub async fn follow(
    store: &Store,
    live: &Live,
    broker: &str,
    broker_id: i64,
    read: &mut ListingTimes,
) -> Result<(), sqlx::Error> {
    if let Some(clients) = newer::<StoredClients>(store, broker_id, CLIENTS, &mut read.clients).await? {
        live.update(broker, |b| b.clients = Some(Arc::new(clients.into_live())));
    }
    if let Some(topology) = newer::<TopologyLive>(store, broker_id, TOPOLOGY, &mut read.topology).await? {
        live.update(broker, |b| b.topology = Arc::new(topology));
    }
    if let Some(mut nodes) = newer::<NodesLive>(store, broker_id, NODES, &mut read.nodes).await? {
        // The disk trend's readings, from the node history the holder writes.
        let since = Utc::now().timestamp() - DISK_READINGS_KEEP_SECS;
        let mut readings = std::collections::HashMap::<String, std::collections::VecDeque<(i64, u64)>>::new();
        for (node, ts, free) in history::nodes::disk_free_since(store, broker_id, since).await? {
            readings.entry(node).or_default().push_back((ts, free));
        }
        nodes.disk_free_readings = Arc::new(readings);
        live.update(broker, |b| b.nodes = nodes);
    }
    Ok(())
}

async fn newer<T: DeserializeOwned>(
    store: &Store,
    broker_id: i64,
    kind: &str,
    read: &mut i64,
) -> Result<Option<T>, sqlx::Error> {
    let Some(stored) = store.listing(broker_id, kind, *read).await? else { return Ok(None) };
    *read = stored.read_at;
    match serde_json::from_str(&stored.body) {
        Ok(value) => Ok(Some(value)),
        Err(error) => {
            tracing::warn!(kind, %error, "a stored listing does not parse; left out");
            Ok(None)
        }
    }
}

/// The client listing as stored: a connection's `connected_at` is written for the API as two
/// keys and not read back by its `Deserialize` (made for the broker's answer), so it is kept
/// beside, in the order of the connections.
#[derive(serde::Serialize, serde::Deserialize)]
struct StoredClients {
    live: ClientsLive,
    connected_at: Vec<Option<i64>>,
}

impl From<&ClientsLive> for StoredClients {
    fn from(live: &ClientsLive) -> Self {
        let connected_at = live.connections.items.iter().flatten().map(|c| c.connected_at).collect();
        StoredClients { live: live.clone(), connected_at }
    }
}

impl StoredClients {
    fn into_live(mut self) -> ClientsLive {
        for (c, at) in self.live.connections.items.iter_mut().flatten().zip(self.connected_at) {
            c.connected_at = at;
        }
        self.live
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::broker::clients::{Channel, Connection, Consumer};
    use crate::live::clients::Listed;

    #[test]
    fn a_client_listing_reads_back_as_written() {
        let connection: Connection = serde_json::from_value(serde_json::json!({
            "name": "10.0.0.1:5000 -> 10.0.0.2:5672", "connection_name": "orders", "user": "app", "vhost": "/",
            "state": "blocked", "channels": 2
        }))
        .unwrap();
        let connection = Connection { connected_at: Some(1_800_000_000), ..connection };
        let channel: Channel = serde_json::from_value(serde_json::json!({"name": "c (1)", "confirm": true})).unwrap();
        let live = ClientsLive {
            listed_at: DateTime::from_timestamp(1_800_000_100, 0).unwrap(),
            every_secs: 60.0,
            cost_secs: 0.5,
            connections: Listed::known(vec![connection.clone()]),
            channels: Listed::known(vec![channel.clone()]),
            consumers: Listed::<Consumer>::unknown("the metrics collector is off".into()),
        };
        let body = serde_json::to_string(&StoredClients::from(&live)).unwrap();
        let back = serde_json::from_str::<StoredClients>(&body).unwrap().into_live();
        assert_eq!(back.connections.items, Some(vec![connection]), "connected_at too");
        assert_eq!(back.channels.items, Some(vec![channel]));
        assert_eq!(back.consumers.items, None);
        assert_eq!(back.consumers.unknown_why.as_deref(), Some("the metrics collector is off"));
        assert_eq!(back.listed_at, live.listed_at);
    }

    #[test]
    fn nodes_and_topology_read_back_as_written() {
        let raw: Vec<crate::broker::nodes::RawNode> = serde_json::from_value(serde_json::json!([
            {"name": "rabbit@a", "running": true, "mem_used": 100, "mem_limit": 1000, "partitions": ["rabbit@b"]},
            {"name": "rabbit@b", "running": false}
        ]))
        .unwrap();
        let mut nodes = NodesLive::default();
        let now = DateTime::from_timestamp(1_800_000_000, 0).unwrap();
        nodes.observe(raw.into_iter().map(|r| crate::broker::nodes::Node::from_raw(r, None)).collect(), now);
        assert!(!nodes.problems.is_empty(), "a node down and a partition");
        let back: NodesLive = serde_json::from_str(&serde_json::to_string(&nodes).unwrap()).unwrap();
        assert_eq!((back.nodes, back.problems, back.as_of), (nodes.nodes, nodes.problems, nodes.as_of));

        let raw: crate::broker::exchanges::RawExchange = serde_json::from_value(serde_json::json!(
            {"name": "events", "type": "topic", "durable": true, "arguments": {"alternate-exchange": "unrouted"}}
        ))
        .unwrap();
        let topology = TopologyLive {
            exchanges: vec![crate::broker::exchanges::ExchangeView::new("/", &raw, raw.counters(true), None)],
            exchanges_read_at: Some(now),
            ..Default::default()
        };
        let back: TopologyLive = serde_json::from_str(&serde_json::to_string(&topology).unwrap()).unwrap();
        assert_eq!(serde_json::to_value(&back.exchanges).unwrap(), serde_json::to_value(&topology.exchanges).unwrap());
        assert_eq!(back.exchanges[0].alternate_exchange_by.as_deref(), Some("arguments"));
        assert_eq!(topology_time(&back), 1_800_000_000_000);
    }
}
