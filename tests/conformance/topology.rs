//! What warren keeps of a broker's topology between runs (`history::last_known`,
//! `storage::Topology`): each vhost's last exchanges and bindings, the queues seen with
//! consumers; and the storage write check on each backend (`history::storage`).

use warren::broker::topology::{Binding, Exchange, VhostTopology};
use warren::history::{self, storage::Storage};
use warren::storage::topology::{StoredTopology, WorkedQueue};
use warren::storage::Store;

crate::conformance!(
    the_last_topology_of_each_vhost_reads_back,
    a_stored_topology_that_does_not_parse_is_left_out,
    queues_seen_with_consumers_are_kept,
    the_write_check_writes_and_reads_back,
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
    history::last_known::store_topology(store, broker_id, "v", &topology("first"), 100).await.unwrap();
    history::last_known::store_topology(store, broker_id, "v", &topology("second"), 200).await.unwrap();
    history::last_known::store_topology(store, broker_id, "w", &VhostTopology::default(), 200).await.unwrap();
    history::last_known::store_topology(store, other, "v", &topology("elsewhere"), 200).await.unwrap();
    let read = history::last_known::topologies(store, broker_id).await.unwrap();
    assert_eq!(read.len(), 2);
    assert_eq!(read["v"], topology("second"), "the last one read replaces the one before");
    assert_eq!(read["w"], VhostTopology::default());
    assert!(history::last_known::topologies(store, other + 1).await.unwrap().is_empty());
}

async fn a_stored_topology_that_does_not_parse_is_left_out(store: &Store) {
    let broker_id = history::broker_id(store, "b").await.unwrap();
    history::last_known::store_topology(store, broker_id, "v", &topology("q"), 100).await.unwrap();
    let unreadable = StoredTopology { vhost: "broken".into(), bindings: "[{".into(), exchanges: "[]".into() };
    store.store_topology(broker_id, &unreadable, 100).await.unwrap();
    assert_eq!(store.topologies(broker_id).await.unwrap().len(), 2, "both stored");
    let read = history::last_known::topologies(store, broker_id).await.unwrap();
    assert_eq!(read.keys().collect::<Vec<_>>(), ["v"], "its queues' roles stay unknown; the others' do not");
}

async fn queues_seen_with_consumers_are_kept(store: &Store) {
    let broker_id = history::broker_id(store, "b").await.unwrap();
    let other = history::broker_id(store, "other").await.unwrap();
    store.record_worked(broker_id, "v", "work", 100).await.unwrap();
    store.record_worked(broker_id, "v", "also", 150).await.unwrap();
    store.record_worked(broker_id, "v", "work", 900).await.unwrap();
    store.record_worked(other, "v", "work", 50).await.unwrap();
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
