//! Leases and their fencing (`storage::Leases`, issue 33, must-have 3): one holder at a time by
//! the database's clock, an epoch that only grows, and no write under an old epoch after a new
//! one was handed out.

use std::time::Duration;

use warren::history::{self, BrokerSample, PollWrite, QueueMeta, StoredSample};
use warren::storage::Store;

crate::conformance!(
    one_holder_at_a_time_and_a_renewal_keeps_the_epoch,
    an_expired_lease_is_taken_with_a_new_epoch_and_fences_out_the_old_holder,
    a_release_hands_the_lease_on_at_once_with_a_new_epoch,
    of_ten_replicas_taking_one_lease_at_once_exactly_one_wins,
    a_takeover_waits_for_a_fenced_write_to_end,
    a_poll_written_under_a_lost_lease_writes_nothing,
);

const LONG: Duration = Duration::from_secs(60);

async fn one_holder_at_a_time_and_a_renewal_keeps_the_epoch(store: &Store) {
    let before = store.database_now().await.unwrap();
    let a = store.take_lease("broker:local", "a", LONG).await.unwrap().expect("free");
    assert_eq!(a.epoch, 1);
    assert!(a.expires_at >= before + 60_000 && a.expires_at < before + 70_000, "{a:?} from {before}");
    assert_eq!(store.take_lease("broker:local", "b", LONG).await.unwrap(), None, "a holds it");
    let renewed = store.take_lease("broker:local", "a", LONG).await.unwrap().expect("a renews");
    assert_eq!(renewed.epoch, 1);
    assert!(renewed.expires_at >= a.expires_at);
    // Another lease is another row.
    assert_eq!(store.take_lease("rollups", "b", LONG).await.unwrap().unwrap().epoch, 1);
    let rows = store.leases().await.unwrap();
    let names: Vec<(&str, &str, i64)> = rows.iter().map(|r| (r.name.as_str(), r.holder.as_str(), r.epoch)).collect();
    assert_eq!(names, [("broker:local", "a", 1), ("rollups", "b", 1)]);
}

async fn an_expired_lease_is_taken_with_a_new_epoch_and_fences_out_the_old_holder(store: &Store) {
    let a = store.take_lease("broker:local", "a", Duration::from_millis(200)).await.unwrap().unwrap();
    let mut tx = store.begin().await.unwrap();
    assert!(tx.fence(&a).await.unwrap(), "a holds it");
    tx.commit().await.unwrap();

    tokio::time::sleep(Duration::from_millis(400)).await;
    let b = store.take_lease("broker:local", "b", LONG).await.unwrap().expect("expired");
    assert_eq!(b.epoch, 2);
    // a was paused past its lease: its write is refused, and its renewal too.
    let mut tx = store.begin().await.unwrap();
    assert!(!tx.fence(&a).await.unwrap(), "the old epoch is fenced out");
    drop(tx);
    assert_eq!(store.take_lease("broker:local", "a", LONG).await.unwrap(), None);
    let mut tx = store.begin().await.unwrap();
    assert!(tx.fence(&b).await.unwrap());
}

async fn a_release_hands_the_lease_on_at_once_with_a_new_epoch(store: &Store) {
    let a = store.take_lease("rollups", "a", LONG).await.unwrap().unwrap();
    store.release_lease(&a).await.unwrap();
    let b = store.take_lease("rollups", "b", LONG).await.unwrap().expect("released");
    assert_eq!(b.epoch, 2);
    // a's release of a lease it no longer holds changes nothing.
    store.release_lease(&a).await.unwrap();
    assert_eq!(store.take_lease("rollups", "c", LONG).await.unwrap(), None);
    // a taking it back after b released it gets a third epoch, not its own first again.
    store.release_lease(&b).await.unwrap();
    assert_eq!(store.take_lease("rollups", "a", LONG).await.unwrap().unwrap().epoch, 3);
}

async fn of_ten_replicas_taking_one_lease_at_once_exactly_one_wins(store: &Store) {
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..10 {
        let store = store.clone();
        tasks.spawn(async move { store.take_lease("broker:local", &format!("r{i}"), LONG).await.unwrap() });
    }
    let mut winners = Vec::new();
    while let Some(taken) = tasks.join_next().await {
        winners.extend(taken.unwrap());
    }
    assert_eq!(winners.len(), 1, "{winners:?}");
    assert_eq!(winners[0].epoch, 1);
}

/// The write a holder began before its lease expired commits before the next holder's epoch
/// begins: the takeover waits for it.
async fn a_takeover_waits_for_a_fenced_write_to_end(store: &Store) {
    let a = store.take_lease("broker:local", "a", Duration::from_millis(100)).await.unwrap().unwrap();
    let mut tx = store.begin().await.unwrap();
    assert!(tx.fence(&a).await.unwrap());
    tokio::time::sleep(Duration::from_millis(300)).await;
    let taker = {
        let store = store.clone();
        tokio::spawn(async move { store.take_lease("broker:local", "b", LONG).await })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!taker.is_finished(), "the takeover waits while a's write is open");
    tx.commit().await.unwrap();
    let b = taker.await.unwrap().unwrap().expect("taken once a's write ended");
    assert_eq!(b.epoch, 2);
}

/// The poller's write (`history::write_poll_fenced`): under its lease it writes, and once
/// another replica took the broker over, the old holder's poll writes nothing at all, neither
/// its queues nor its samples nor the broker's poll.
async fn a_poll_written_under_a_lost_lease_writes_nothing(store: &Store) {
    let broker_id = history::broker_id(store, "local").await.unwrap();
    let write = |ts: i64, queue: &str| {
        let meta = QueueMeta { vhost: "v".into(), name: queue.into(), kind: "classic".into(), ..QueueMeta::default() };
        let sample = StoredSample { ready: Some(ts), ..StoredSample::default() };
        PollWrite {
            broker_id,
            ts,
            broker: BrokerSample { poll_ms: 1, ..BrokerSample::default() },
            upserts: vec![meta],
            new_samples: vec![(0, sample)],
            ..PollWrite::default()
        }
    };
    let a = store.take_lease("broker:local", "a", Duration::from_millis(200)).await.unwrap().unwrap();
    let ids = history::write_poll_fenced(store, &write(100, "first"), &a).await.unwrap();
    assert_eq!(ids.map(|ids| ids.len()), Some(1), "written under the lease");

    tokio::time::sleep(Duration::from_millis(400)).await;
    let b = store.take_lease("broker:local", "b", LONG).await.unwrap().expect("expired");
    assert_eq!(history::write_poll_fenced(store, &write(200, "second"), &a).await.unwrap(), None, "fenced out");
    assert_eq!(history::last_known::last_poll_at(store, broker_id).await.unwrap(), Some(100), "no poll of a's kept");
    let mut names = Vec::new();
    history::known_queues(store, broker_id, |k| names.push(k.meta.name)).await.unwrap();
    assert_eq!(names, ["first"], "no queue of a's kept");
    assert!(history::write_poll_fenced(store, &write(300, "third"), &b).await.unwrap().is_some());
}
