//! The dead-letter queues' stored snapshots (`dlq::browse`) and the key of their tokens.

use warren::dlq::browse::{self, Snapshots};
use warren::storage::snapshots::StoredSnapshot;
use warren::storage::Store;

crate::conformance!(
    a_snapshot_reads_back_as_stored_and_is_replaced_whole,
    load_shows_each_snapshot_as_it_was_outdated_or_not,
    processes_starting_together_share_one_identity_key,
);

fn stored(queue: &str, messages: &str) -> StoredSnapshot {
    StoredSnapshot {
        broker: "local".into(),
        vhost: "/ä".into(),
        queue: queue.into(),
        taken_at: 1_765_000_000_123,
        queue_type: "quorum".into(),
        delivery_limit: Some(20),
        requested: 100,
        note: Some("stopped at 64 KiB: \"x\" \\ ✓".into()),
        outdated: None,
        messages: messages.into(),
    }
}

fn sorted(mut rows: Vec<StoredSnapshot>) -> Vec<StoredSnapshot> {
    rows.sort_by(|a, b| a.queue.cmp(&b.queue));
    rows
}

async fn a_snapshot_reads_back_as_stored_and_is_replaced_whole(store: &Store) {
    // A message's JSON as browse writes it: an escaped NUL and binary text stay escapes.
    let first = stored("orders.dlq", r#"[{"identity":"a\u0000b","held_in":null,"message":{"payload":"\u00ff"}}]"#);
    let other =
        StoredSnapshot { queue_type: "classic".into(), delivery_limit: None, note: None, ..stored("z.dlq", "[]") };
    store.save_snapshot(&first).await.unwrap();
    store.save_snapshot(&other).await.unwrap();
    assert_eq!(sorted(store.snapshots().await.unwrap()), [first.clone(), other.clone()]);

    let second =
        StoredSnapshot { taken_at: first.taken_at + 1, requested: 7, note: None, ..stored("orders.dlq", "[]") };
    store.save_snapshot(&second).await.unwrap();
    store.outdate_snapshot(("local", "/ä", "z.dlq"), "the purge of 3 messages at 10:02").await.unwrap();
    store.outdate_snapshot(("local", "/ä", "missing"), "nothing").await.unwrap();
    let outdated = StoredSnapshot { outdated: Some("the purge of 3 messages at 10:02".into()), ..other };
    assert_eq!(sorted(store.snapshots().await.unwrap()), [second, outdated]);
}

async fn load_shows_each_snapshot_as_it_was_outdated_or_not(store: &Store) {
    store.save_snapshot(&stored("orders.dlq", "[]")).await.unwrap();
    store.save_snapshot(&stored("broken.dlq", "not json")).await.unwrap();
    let snapshots = Snapshots::default();
    assert_eq!(browse::load(store, &snapshots).await.unwrap(), 1, "the one that no longer reads is left out");
    let shown = snapshots.get("local", "/ä", "orders.dlq").unwrap();
    assert_eq!(
        (shown.taken_at.timestamp_millis(), shown.delivery_limit, shown.requested),
        (1_765_000_000_123, Some(20), 100)
    );
    assert_eq!(shown.outdated, None);

    browse::outdate(store, &snapshots, ("local", "/ä", "orders.dlq"), "the requeue of 4 messages at 10:01").await;
    browse::outdate(store, &snapshots, ("local", "/ä", "orders.dlq"), "the purge of 1 messages at 10:02").await;
    let restarted = Snapshots::default();
    browse::load(store, &restarted).await.unwrap();
    assert_eq!(
        restarted.get("local", "/ä", "orders.dlq").unwrap().outdated.as_deref(),
        Some("the requeue of 4 messages at 10:01; then the purge of 1 messages at 10:02")
    );
    assert!(restarted.get("local", "/ä", "broken.dlq").is_none());
}

async fn processes_starting_together_share_one_identity_key(store: &Store) {
    let offers = (0..8u8).map(|i| {
        let store = store.clone();
        tokio::spawn(async move { store.instance_key("identity", &[i; 32]).await.unwrap() })
    });
    let keys: Vec<Vec<u8>> = futures_util::future::join_all(offers).await.into_iter().map(Result::unwrap).collect();
    assert_eq!(keys[0].len(), 32);
    assert!(keys.iter().all(|k| *k == keys[0]), "every process reads the one stored: {keys:?}");
    assert_eq!(store.instance_key("identity", &[99; 32]).await.unwrap(), keys[0], "kept for good");
}
