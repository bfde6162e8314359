//! The cluster's nodes over time (`history::nodes`, `storage::Nodes`): written per poll, read
//! back per chart step with unknowns kept, thinned as they age.

use warren::broker::nodes::Node;
use warren::history::{self, rollup::Windows};
use warren::storage::Store;

crate::conformance!(nodes_read_back_per_step_with_unknowns_kept, aged_node_samples_are_thinned_then_deleted);

fn node(name: &str, running: bool, mem_used: Option<u64>, disk_free: Option<u64>) -> Node {
    Node {
        name: name.into(),
        running: Some(running),
        mem_used,
        mem_limit: Some(1_000),
        disk_free,
        partitions: Some(vec!["rabbit@other".into()]),
        ..Node::default()
    }
}

async fn nodes_read_back_per_step_with_unknowns_kept(store: &Store) {
    let broker_id = history::broker_id(store, "b").await.unwrap();
    let polls = [
        (1_000, vec![node("a", true, Some(100), Some(5_000)), node("b", true, None, None)]),
        (1_010, vec![node("a", false, Some(300), Some(4_000)), node("b", true, None, None)]),
        (1_020, vec![node("a", true, None, Some(4_500))]),
    ];
    for (ts, nodes) in &polls {
        history::nodes::write(store, broker_id, *ts, nodes, None).await.unwrap();
    }
    let a = history::nodes::history(store, broker_id, "a", 1_000, 1_029, 20).await.unwrap();
    let got: Vec<_> = a.iter().map(|p| (p.ts, p.samples, p.running, p.mem_used, p.disk_free, p.partitions)).collect();
    assert_eq!(
        got,
        [
            // Down at one sample of the step: not running; the worst free disk.
            (1_000, 2, Some(false), Some(300), Some(4_000), Some(1)),
            (1_020, 1, Some(true), None, Some(4_500), Some(1)),
        ]
    );
    assert_eq!(a[0].mem_limit, Some(1_000));
    assert_eq!(a[0].fd_used, None, "never given: unknown, not 0");
    let b = history::nodes::history(store, broker_id, "b", 1_000, 1_029, 10).await.unwrap();
    assert_eq!(b.iter().map(|p| (p.ts, p.mem_used)).collect::<Vec<_>>(), [(1_000, None), (1_010, None)]);
    assert!(history::nodes::history(store, broker_id, "c", 0, 2_000, 10).await.unwrap().is_empty());

    let disk = history::nodes::disk_free_since(store, broker_id, 1_010).await.unwrap();
    assert_eq!(disk, [("a".to_string(), 1_010, 4_000), ("a".to_string(), 1_020, 4_500)]);

    // The same poll written again replaces its row.
    history::nodes::write(store, broker_id, 1_020, &[node("a", true, Some(7), Some(1))], None).await.unwrap();
    let again = history::nodes::history(store, broker_id, "a", 1_020, 1_020, 1).await.unwrap();
    assert_eq!((again[0].samples, again[0].mem_used, again[0].disk_free), (1, Some(7), Some(1)));
}

async fn aged_node_samples_are_thinned_then_deleted(store: &Store) {
    let broker_id = history::broker_id(store, "b").await.unwrap();
    let hour = 3_600;
    // Every 20 s over the first two hours, then one sample at hour 10.
    for ts in (0..2 * hour).step_by(20).chain([10 * hour]) {
        history::nodes::write(store, broker_id, ts, &[node("a", true, Some(ts as u64), None)], None).await.unwrap();
    }
    let windows = Windows { raw_secs: 9 * hour, minute_secs: 10 * hour + 30 * 60, hour_secs: 11 * hour };
    // At 10 h 30 min the samples before 1 h 30 min are past the raw window: the last of each
    // minute stays. None is past the minute window yet.
    let removed = history::nodes::prune(store, 10 * hour + 30 * 60, windows).await.unwrap();
    assert_eq!(removed, 90 * 2, "of 90 minutes' 3 samples each, 2 go");
    let minutes = history::nodes::history(store, broker_id, "a", 0, 90 * 60 - 1, 60).await.unwrap();
    assert_eq!(minutes.len(), 90);
    assert!(minutes.iter().all(|p| p.samples == 1 && p.mem_used == Some(p.ts + 40)), "the last of each minute");

    // At 11 h: 30 more minutes thinned, and the first half hour is past the minute window, so
    // of hour 0 only the samples from 30 min on stay (the last of it among them).
    let removed = history::nodes::prune(store, 11 * hour + 1, windows).await.unwrap();
    assert_eq!(removed, 30 * 2 + 30);
    let first_hour = history::nodes::history(store, broker_id, "a", 0, hour - 1, hour).await.unwrap();
    assert_eq!((first_hour[0].samples, first_hour[0].mem_used), (30, Some(3_580)));

    // At 21 h everything before 10 h is past the retention.
    assert_eq!(history::nodes::prune(store, 21 * hour, windows).await.unwrap(), 30 + 60);
    let left = history::nodes::history(store, broker_id, "a", 0, 20 * hour, hour).await.unwrap();
    assert_eq!(left.iter().map(|p| p.ts).collect::<Vec<_>>(), [10 * hour]);
}
