//! The division of work between replicas by leases (`warren::replicas`, issue 33, must-have 3):
//! three replicas on one database, each with its own handle, as three processes would be.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use warren::replicas::{broker_work, Replica, HOUSEKEEPING};
use warren::storage::Store;

crate::conformance!(
    three_replicas_divide_the_work_evenly_and_never_share_a_piece,
    a_dead_replicas_work_moves_within_one_lease_time,
    a_replica_that_stops_hands_its_work_on_at_once,
    a_paused_replica_stops_trusting_its_leases_and_its_writes_are_fenced,
);

// Long enough that a round of three replicas on a loaded machine ends well within it.
const TTL: Duration = Duration::from_secs(3);

fn work() -> Vec<String> {
    let mut work: Vec<String> = (1..=6).map(|i| broker_work(&format!("b{i}"))).collect();
    work.push(HOUSEKEEPING.into());
    work
}

fn replicas(store: &Store, n: usize) -> Vec<Arc<Replica>> {
    (0..n).map(|_| Replica::new(store.clone(), TTL, work())).collect()
}

async fn rounds(replicas: &[Arc<Replica>], n: usize) {
    for _ in 0..n {
        for r in replicas {
            r.round().await.unwrap();
        }
    }
}

/// Each piece held by at most one replica (by what each trusts), and the pieces held.
fn assert_disjoint(replicas: &[Arc<Replica>]) -> BTreeSet<String> {
    let mut all = BTreeSet::new();
    for r in replicas {
        for work in work().iter().filter(|w| r.held(w).is_some()) {
            assert!(all.insert(work.clone()), "{work} held twice");
        }
    }
    all
}

async fn three_replicas_divide_the_work_evenly_and_never_share_a_piece(store: &Store) {
    let replicas = replicas(store, 3);
    // The first alone takes everything; as the others start, it lets go down to its share.
    rounds(&replicas[..1], 1).await;
    assert_eq!(replicas[0].holding().len(), 7);
    for _ in 0..3 {
        rounds(&replicas, 1).await;
        assert_disjoint(&replicas);
    }
    assert_eq!(assert_disjoint(&replicas), work().into_iter().collect(), "every piece is held");
    let counts: Vec<usize> = replicas.iter().map(|r| r.holding().len()).collect();
    assert!(counts.iter().all(|c| (2..=3).contains(c)), "shares of 7 over 3: {counts:?}");
    // The epochs in the database are the ones the replicas hold.
    for lease in store.leases().await.unwrap().iter().filter(|l| !l.name.starts_with("replica:")) {
        let holder = replicas.iter().find(|r| r.id() == lease.holder).expect("a live replica holds it");
        assert_eq!(holder.held(&lease.name).map(|h| h.epoch), Some(lease.epoch));
    }
}

async fn a_dead_replicas_work_moves_within_one_lease_time(store: &Store) {
    let replicas = replicas(store, 3);
    rounds(&replicas, 3).await;
    let dead = replicas[2].holding();
    assert!(!dead.is_empty());
    // Killed: it neither renews nor lets go. The others' rounds go on every third of the lease
    // time, as `Replica::run` does.
    let started = std::time::Instant::now();
    let live = &replicas[..2];
    loop {
        rounds(live, 1).await;
        let held: BTreeSet<String> = live.iter().flat_map(|r| r.holding()).collect();
        if dead.iter().all(|w| held.contains(w)) {
            break;
        }
        assert!(started.elapsed() < TTL * 2, "the dead replica's work still waits after {:?}", started.elapsed());
        tokio::time::sleep(TTL / 3).await;
    }
    assert_eq!(assert_disjoint(live), work().into_iter().collect());
    let counts: Vec<usize> = live.iter().map(|r| r.holding().len()).collect();
    assert!(counts.iter().all(|c| (3..=4).contains(c)), "shares of 7 over 2: {counts:?}");
}

async fn a_replica_that_stops_hands_its_work_on_at_once(store: &Store) {
    let replicas = replicas(store, 2);
    rounds(&replicas, 3).await;
    replicas[1].release_all().await;
    // No wait for the lease time: the next round takes it all.
    rounds(&replicas[..1], 1).await;
    assert_eq!(replicas[0].holding().len(), 7);
}

async fn a_paused_replica_stops_trusting_its_leases_and_its_writes_are_fenced(store: &Store) {
    let replicas = replicas(store, 2);
    rounds(&replicas, 3).await;
    let paused = &replicas[1];
    let work = paused.holding().into_iter().next().expect("it holds something");
    let token = paused.held(&work).unwrap();
    // Paused (SIGSTOP) past its lease: it no longer trusts it, and the other takes it.
    tokio::time::sleep(TTL + Duration::from_millis(200)).await;
    assert_eq!(paused.held(&work), None, "not trusted after the lease time without a renewal");
    rounds(&replicas[..1], 1).await;
    let taken = replicas[0].held(&work).expect("taken over");
    assert!(taken.epoch > token.epoch);
    // A write it had begun with the old token is refused.
    let mut tx = store.begin().await.unwrap();
    assert!(!tx.fence(&token).await.unwrap());
    drop(tx);
    // Resumed, its next round renews nothing of that work, and it takes no piece held by another.
    paused.round().await.unwrap();
    assert_eq!(paused.held(&work), None);
    assert_disjoint(&replicas);
}
