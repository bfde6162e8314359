//! What warren keeps of a broker's topology between runs (`history::last_known`,
//! `storage::Topology`): each vhost's last exchanges and bindings, the queues seen with
//! consumers; and the storage write check on each backend (`history::storage`).

use std::time::Duration;

use warren::broker::topology::{Binding, Exchange, VhostTopology};
use warren::history::{self, storage::Storage};
use warren::storage::topology::{StoredListing, StoredTopology, WorkedQueue};
use warren::storage::Store;

crate::conformance!(
    the_last_topology_of_each_vhost_reads_back,
    a_stored_topology_that_does_not_parse_is_left_out,
    queues_seen_with_consumers_are_kept,
    the_write_check_writes_and_reads_back,
    the_last_listing_of_each_kind_reads_back_when_newer,
    a_holder_that_lost_its_lease_writes_no_topology_listing_node_or_sighting,
);

fn topology(queue: &str) -> VhostTopology {
    let mut arguments = serde_json::Map::new();
    arguments.insert("x-match".into(), "all".into());
    VhostTopology {
        bindings: vec![
            Binding {
                source: "orders".into(),
                destination: queue.into(),
                destination_type: "queue".into(),
                routing_key: "order.*".into(),
                arguments: None,
            },
            Binding {
                source: "headers".into(),
                destination: queue.into(),
                destination_type: "queue".into(),
                routing_key: String::new(),
                arguments: Some(arguments),
            },
        ],
        exchanges: vec![Exchange { name: "orders".into(), kind: "topic".into() }],
    }
}

async fn the_last_topology_of_each_vhost_reads_back(store: &Store) {
    let broker_id = history::broker_id(store, "b").await.unwrap();
    let other = history::broker_id(store, "other").await.unwrap();
    history::last_known::store_topology(store, broker_id, "v", &topology("first"), 100, None).await.unwrap();
    history::last_known::store_topology(store, broker_id, "v", &topology("second"), 200, None).await.unwrap();
    history::last_known::store_topology(store, broker_id, "w", &VhostTopology::default(), 200, None).await.unwrap();
    history::last_known::store_topology(store, other, "v", &topology("elsewhere"), 200, None).await.unwrap();
    let read = history::last_known::topologies(store, broker_id).await.unwrap();
    assert_eq!(read.len(), 2);
    assert_eq!(read["v"], topology("second"), "the last one read replaces the one before");
    assert_eq!(read["w"], VhostTopology::default());
    assert!(history::last_known::topologies(store, other + 1).await.unwrap().is_empty());
}

async fn a_stored_topology_that_does_not_parse_is_left_out(store: &Store) {
    let broker_id = history::broker_id(store, "b").await.unwrap();
    history::last_known::store_topology(store, broker_id, "v", &topology("q"), 100, None).await.unwrap();
    let unreadable = StoredTopology { vhost: "broken".into(), bindings: "[{".into(), exchanges: "[]".into() };
    store.store_topology(broker_id, &unreadable, 100, None).await.unwrap();
    assert_eq!(store.topologies(broker_id).await.unwrap().len(), 2, "both stored");
    let read = history::last_known::topologies(store, broker_id).await.unwrap();
    assert_eq!(read.keys().collect::<Vec<_>>(), ["v"], "its queues' roles stay unknown; the others' do not");
}

async fn queues_seen_with_consumers_are_kept(store: &Store) {
    let broker_id = history::broker_id(store, "b").await.unwrap();
    let other = history::broker_id(store, "other").await.unwrap();
    store.record_worked(broker_id, "v", "work", 100, None).await.unwrap();
    store.record_worked(broker_id, "v", "also", 150, None).await.unwrap();
    store.record_worked(broker_id, "v", "work", 900, None).await.unwrap();
    store.record_worked(other, "v", "work", 50, None).await.unwrap();
    let mut seen = store.worked_queues(broker_id).await.unwrap();
    seen.sort_by(|a, b| a.queue.cmp(&b.queue));
    let worked = |queue: &str, seen_at| WorkedQueue { vhost: "v".into(), queue: queue.into(), seen_at };
    assert_eq!(seen, [worked("also", 150), worked("work", 900)]);
    assert_eq!(store.worked_queues(other).await.unwrap(), [worked("work", 50)]);
}

async fn the_write_check_writes_and_reads_back(store: &Store) {
    assert_eq!(store.probe(1_234).await.unwrap(), 1_234);
    assert_eq!(store.probe(5_678).await.unwrap(), 5_678, "the one row, updated");
    // On a server there is no file to check: only the write.
    let storage = Storage::server();
    assert_eq!(storage.check(&**store).await, Ok(()));
    assert_eq!(storage.problem(), None);
    assert_eq!(storage.file_check(), Ok(()));
}

fn stored(kind: &str, read_at: i64, body: &str) -> StoredListing {
    StoredListing { kind: kind.into(), read_at, body: body.into() }
}

async fn the_last_listing_of_each_kind_reads_back_when_newer(store: &Store) {
    let broker_id = history::broker_id(store, "b").await.unwrap();
    let other = history::broker_id(store, "other").await.unwrap();
    assert_eq!(store.listing(broker_id, "clients", 0).await.unwrap(), None, "none yet");
    let first = [stored("clients", 1_000, r#"{"n":1}"#), stored("nodes", 1_500, "[]")];
    assert!(store.store_listings(broker_id, &first, None).await.unwrap());
    assert!(store.store_listings(broker_id, &[stored("clients", 2_000, r#"{"n":2}"#)], None).await.unwrap());
    assert!(store.store_listings(other, &[stored("clients", 9_000, "{}")], None).await.unwrap());
    assert_eq!(store.listing(broker_id, "clients", 0).await.unwrap(), Some(stored("clients", 2_000, r#"{"n":2}"#)));
    assert_eq!(store.listing(broker_id, "clients", 2_000).await.unwrap(), None, "not newer than what was read");
    assert_eq!(store.listing(broker_id, "nodes", 1_000).await.unwrap(), Some(stored("nodes", 1_500, "[]")));
    assert_eq!(store.listing(broker_id, "topology", 0).await.unwrap(), None);
    // A client may name a connection with a NUL: PostgreSQL's text takes none.
    let hostile = stored("clients", 3_000, "{\"name\":\"a\u{0}b\"}");
    assert!(store.store_listings(broker_id, &[hostile], None).await.unwrap());
    assert!(store.listing(broker_id, "clients", 2_000).await.unwrap().is_some());
}

async fn a_holder_that_lost_its_lease_writes_no_topology_listing_node_or_sighting(store: &Store) {
    let broker_id = history::broker_id(store, "b").await.unwrap();
    let a = store.take_lease("broker:b", "a", Duration::from_millis(200)).await.unwrap().unwrap();
    let t = StoredTopology { vhost: "v".into(), bindings: "[]".into(), exchanges: "[]".into() };
    assert!(store.store_topology(broker_id, &t, 100, Some(&a)).await.unwrap(), "a holds it");
    tokio::time::sleep(Duration::from_millis(400)).await;
    let b = store.take_lease("broker:b", "b", Duration::from_secs(60)).await.unwrap().expect("expired");

    // a was paused past its lease: each of its writes is refused, and nothing changes.
    let changed = StoredTopology { bindings: "[1]".into(), ..t.clone() };
    assert!(!store.store_topology(broker_id, &changed, 200, Some(&a)).await.unwrap());
    assert!(!store.record_worked(broker_id, "v", "work", 200, Some(&a)).await.unwrap());
    assert!(!store.store_listings(broker_id, &[stored("nodes", 200, "[]")], Some(&a)).await.unwrap());
    assert!(!store.write_nodes(broker_id, 200, &[Default::default()], Some(&a)).await.unwrap());
    assert_eq!(store.topologies(broker_id).await.unwrap(), [t.clone()]);
    assert_eq!(store.worked_queues(broker_id).await.unwrap(), []);
    assert_eq!(store.listing(broker_id, "nodes", 0).await.unwrap(), None);
    assert_eq!(store.disk_free_since(broker_id, 0).await.unwrap(), []);
    assert!(store.node_history(broker_id, "", 0, 1_000, 60).await.unwrap().is_empty());

    // The new holder's are kept.
    assert!(store.store_topology(broker_id, &changed, 200, Some(&b)).await.unwrap());
    assert!(store.record_worked(broker_id, "v", "work", 200, Some(&b)).await.unwrap());
    assert!(store.store_listings(broker_id, &[stored("nodes", 200, "[]")], Some(&b)).await.unwrap());
    assert!(store.write_nodes(broker_id, 200, &[Default::default()], Some(&b)).await.unwrap());
    assert_eq!(store.topologies(broker_id).await.unwrap(), [changed]);
    assert_eq!(store.worked_queues(broker_id).await.unwrap().len(), 1);
    assert!(store.listing(broker_id, "nodes", 0).await.unwrap().is_some());
    assert_eq!(store.node_history(broker_id, "", 0, 1_000, 60).await.unwrap().len(), 1);
}
