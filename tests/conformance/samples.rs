//! The history's raw samples (`history`, `storage::Samples`): what a poll writes reads back the
//! same on both backends, an unknown value stays unknown, and pruning removes what is old.

use std::collections::HashMap;

use warren::history::{self, BrokerSample, KnownQueue, PollWrite, QueueMeta, StoredSample};
use warren::storage::Store;

crate::conformance!(
    a_poll_reads_back_with_its_nulls,
    a_deleted_queue_keeps_its_history_and_comes_back_with_its_id,
    history_and_sparklines_resample_and_leave_gaps,
    broker_history_averages_buckets_and_keeps_unknowns,
    the_fifo_estimate_reads_crossings_and_depths,
    prune_deletes_samples_and_polls_before_the_cutoff,
    thousands_of_queues_are_written_in_one_poll,
    a_queue_named_twice_in_one_poll_keeps_its_last_values,
    a_queue_name_with_a_nul_is_kept_and_found,
);

fn meta(name: &str) -> QueueMeta {
    QueueMeta {
        vhost: "v".into(),
        name: name.into(),
        kind: "quorum".into(),
        durable: Some(true),
        arguments: r#"{"x-queue-type":"quorum"}"#.into(),
        policy: Some("dlx".into()),
        effective_policy: r#"{"dead-letter-exchange":"dlx"}"#.into(),
    }
}

fn sample(ready: i64, unacked: i64) -> StoredSample {
    StoredSample { ready: Some(ready), unacked: Some(unacked), ..StoredSample::default() }
}

fn poll(broker_id: i64, ts: i64) -> PollWrite {
    PollWrite { broker_id, ts, broker: BrokerSample { poll_ms: 7, ..BrokerSample::default() }, ..PollWrite::default() }
}

async fn known(store: &Store, broker_id: i64) -> HashMap<String, KnownQueue> {
    let mut out = HashMap::new();
    history::known_queues(store, broker_id, |k| {
        out.insert(k.meta.name.clone(), k);
    })
    .await
    .unwrap();
    out
}

/// Broker `b` and its queue `name`, their ids; `samples` written at their times, each a poll.
async fn one_queue(store: &Store, name: &str, samples: &[(i64, StoredSample)]) -> (i64, i64) {
    let broker_id = history::broker_id(store, "b").await.unwrap();
    let mut id = None;
    for &(ts, s) in samples {
        let mut write = poll(broker_id, ts);
        match id {
            None => {
                write.upserts.push(meta(name));
                write.new_samples.push((0, s));
            }
            Some(id) => write.samples.push((id, s)),
        }
        let ids = history::write_poll(store, &write).await.unwrap();
        id = id.or(ids.first().copied());
    }
    (broker_id, id.unwrap())
}

async fn a_poll_reads_back_with_its_nulls(store: &Store) {
    let broker_id = history::broker_id(store, "b").await.unwrap();
    assert_eq!(history::broker_id(store, "b").await.unwrap(), broker_id, "one id per name");
    assert_ne!(history::broker_id(store, "other").await.unwrap(), broker_id);

    let full = StoredSample {
        ready: Some(5),
        unacked: Some(0),
        consumers: Some(2),
        publish_count: Some(1_000_000_000_000),
        publish_rate_m: Some(1_500),
        deliver_rate_m: Some(0),
        ack_rate_m: Some(250),
        redeliver_rate_m: Some(0),
        head_ts: Some(990),
        est_oldest_ts: None,
        est_bound: None,
    };
    // The broker gave only the depth: everything else is unknown and must read back unknown.
    let sparse = StoredSample { ready: Some(3), ..StoredSample::default() };
    let bare = QueueMeta { durable: None, policy: None, arguments: "{}".into(), ..meta("sparse") };
    let mut write = poll(broker_id, 1_000);
    write.upserts = vec![meta("full"), bare.clone()];
    write.new_samples = vec![(0, full), (1, sparse)];
    write.broker = BrokerSample { ready: Some(8), unacked: None, queues: 2, poll_ms: 12, ..BrokerSample::default() };
    let ids = history::write_poll(store, &write).await.unwrap();
    assert_eq!(ids.len(), 2);
    assert_ne!(ids[0], ids[1]);

    assert_eq!(history::count_known_queues(store, broker_id).await.unwrap(), 2);
    let known = known(store, broker_id).await;
    assert_eq!(known["full"].id, ids[0]);
    assert_eq!(known["full"].meta, meta("full"));
    assert_eq!(known["full"].last_sample, Some((1_000, full)));
    assert_eq!(known["sparse"].meta, bare);
    assert_eq!(known["sparse"].last_sample, Some((1_000, sparse)), "unknown values stay null, never 0");
    assert_eq!(known["sparse"].deleted_at, None);

    let found = history::find_queue(store, "b", "v", "sparse").await.unwrap().expect("found by its names");
    assert_eq!((found.id, found.meta, found.last_sample), (ids[1], bare, Some((1_000, sparse))));
    assert!(history::find_queue(store, "other", "v", "sparse").await.unwrap().is_none(), "another broker's");
    assert!(history::find_queue(store, "b", "w", "sparse").await.unwrap().is_none(), "another vhost's");
    assert!(history::count_known_queues(store, broker_id + 1_000).await.unwrap() == 0);

    assert_eq!(history::last_known::last_poll_at(store, broker_id).await.unwrap(), Some(1_000));
    assert_eq!(history::last_known::last_poll_at(store, broker_id + 1_000).await.unwrap(), None);
    let points = history::broker_history(store, broker_id, 1_000, 1_000, 1).await.unwrap();
    assert_eq!((points[0].ready, points[0].unacked, points[0].poll_ms), (Some(8), None, Some(12)));
}

async fn a_deleted_queue_keeps_its_history_and_comes_back_with_its_id(store: &Store) {
    let broker_id = history::broker_id(store, "b").await.unwrap();
    let mut first = poll(broker_id, 100);
    first.upserts = vec![meta("stays"), meta("goes")];
    first.new_samples = vec![(0, sample(1, 0)), (1, sample(2, 0))];
    let ids = history::write_poll(store, &first).await.unwrap();

    let mut second = poll(broker_id, 110);
    second.deleted = vec![ids[1]];
    second.samples = vec![(ids[0], sample(4, 1))];
    assert!(history::write_poll(store, &second).await.unwrap().is_empty(), "no upserts, no ids");
    let known = known(store, broker_id).await;
    assert_eq!(known["stays"].last_sample, Some((110, sample(4, 1))));
    assert_eq!(known["goes"].deleted_at, Some(110));
    assert_eq!(known["goes"].last_sample, Some((100, sample(2, 0))), "its history stays");

    // Back, as a classic queue now: the same id, its new metadata, no longer deleted.
    let mut third = poll(broker_id, 120);
    let classic = QueueMeta { kind: "classic".into(), ..meta("goes") };
    third.upserts = vec![classic.clone()];
    third.new_samples = vec![(0, sample(0, 0))];
    assert_eq!(history::write_poll(store, &third).await.unwrap(), vec![ids[1]]);
    let back = history::find_queue(store, "b", "v", "goes").await.unwrap().unwrap();
    assert_eq!((back.id, back.meta, back.deleted_at), (ids[1], classic, None));
    assert_eq!(history::count_known_queues(store, broker_id).await.unwrap(), 2);
}

async fn history_and_sparklines_resample_and_leave_gaps(store: &Store) {
    let unknown_unacked = StoredSample { ready: Some(7), unacked: None, ..StoredSample::default() };
    let (broker_id, id) = one_queue(store, "q", &[(1_000, sample(5, 1)), (1_020, unknown_unacked)]).await;
    // Polls that found nothing changed: broker rows only. Then the broker is unreachable from
    // 1,040 to 1,070.
    for ts in [1_010, 1_030, 1_080] {
        history::write_poll(store, &poll(broker_id, ts)).await.unwrap();
    }
    let points = history::queue_history(store, broker_id, id, 1_000, 1_080, 10, 10).await.unwrap();
    let ready: Vec<Option<i64>> = points.iter().map(|p| p.ready).collect();
    let unacked: Vec<Option<i64>> = points.iter().map(|p| p.unacked).collect();
    assert_eq!(ready, [Some(5), Some(5), Some(7), Some(7), Some(7), Some(7), None, None, Some(7)]);
    assert_eq!(unacked, [Some(1), Some(1), None, None, None, None, None, None, None]);
    assert_eq!(points[0].ts, 1_000);
    // Reading from the middle starts with the value in force then.
    let later = history::queue_history(store, broker_id, id, 1_010, 1_010, 10, 10).await.unwrap();
    assert_eq!(later[0].ready, Some(5));

    let lines = history::depth_sparklines(store, &[id, id + 1_000], 1_000, 1_030, 10).await.unwrap();
    assert_eq!(lines[&id], [Some(6), Some(6), None, None], "a depth with an unknown part is unknown");
    assert!(!lines.contains_key(&(id + 1_000)), "a queue without samples has no line");
    assert!(history::depth_sparklines(store, &[], 1_000, 1_030, 10).await.unwrap().is_empty());
}

async fn broker_history_averages_buckets_and_keeps_unknowns(store: &Store) {
    let broker_id = history::broker_id(store, "b").await.unwrap();
    let polls = [(1_000, Some(10), Some(1_500)), (1_010, Some(21), None), (1_040, None, None)];
    for (ts, ready, publish_rate_m) in polls {
        let mut write = poll(broker_id, ts);
        write.broker = BrokerSample { ready, publish_rate_m, poll_ms: ts - 990, ..BrokerSample::default() };
        history::write_poll(store, &write).await.unwrap();
    }
    let points = history::broker_history(store, broker_id, 1_000, 1_059, 20).await.unwrap();
    let got: Vec<_> = points.iter().map(|p| (p.ts, p.ready, p.publish_rate, p.confirm_rate, p.poll_ms)).collect();
    assert_eq!(
        got,
        [
            // 15.5 rounds to 16; the rate only one poll had is that poll's.
            (1_019, Some(16), Some(1.5), None, Some(15)),
            (1_039, None, None, None, None),
            (1_059, None, None, None, Some(50)),
        ]
    );
}

async fn the_fifo_estimate_reads_crossings_and_depths(store: &Store) {
    let s = |published: Option<i64>, ready: i64, unacked: i64, ack_rate_m: Option<i64>| StoredSample {
        publish_count: published,
        ack_rate_m,
        ..sample(ready, unacked)
    };
    let (_, id) = one_queue(
        store,
        "q",
        &[
            (100, s(Some(10), 0, 0, None)),
            (110, s(Some(20), 5, 0, None)),
            (120, s(Some(30), 8, 1, Some(0))),
            (130, s(None, 3, 0, Some(2_000))),
        ],
    )
    .await;
    assert_eq!(history::publish_crossing(store, id, 100, 20).await.unwrap(), Some((110, Some(120))));
    assert_eq!(history::publish_crossing(store, id, 100, 35).await.unwrap(), Some((120, Some(130))));
    assert_eq!(history::publish_crossing(store, id, 100, 5).await.unwrap(), None, "published before the history");
    assert_eq!(history::publish_crossing(store, id, 115, 20).await.unwrap(), None, "before `since`");
    // The first sample with its counts and messages in it: not the empty one at 100.
    assert_eq!(history::first_sample(store, id, 0).await.unwrap(), Some((110, Some(20), Some(5))));
    assert_eq!(history::first_sample(store, id, 125).await.unwrap(), None, "no counter at 130");

    // The age from the depth alone (`poller::estimate`).
    assert_eq!(store.last_seen_empty(id, 0).await.unwrap(), Some(100));
    assert_eq!(store.last_seen_empty(id, 101).await.unwrap(), None);
    assert_eq!(
        store.depths_after(id, 100, 2).await.unwrap(),
        [(110, Some(5), Some(0), None), (120, Some(8), Some(1), Some(0))]
    );
    assert_eq!(store.depths_after(id, 120, 10).await.unwrap(), [(130, Some(3), Some(0), Some(2_000))]);
}

async fn prune_deletes_samples_and_polls_before_the_cutoff(store: &Store) {
    let (broker_id, id) = one_queue(store, "q", &[(100, sample(1, 0)), (200, sample(2, 0)), (300, sample(3, 0))]).await;
    let (other_broker, other) = one_queue(store, "other", &[(150, sample(9, 0))]).await;
    assert_eq!(other_broker, broker_id);
    assert_eq!(history::prune(store, 200).await.unwrap(), 4, "two samples and two polls before 200");
    assert_eq!(store.queue_samples(id, 0, 1_000).await.unwrap(), [(200, sample(2, 0)), (300, sample(3, 0))]);
    assert!(store.queue_samples(other, 0, 1_000).await.unwrap().is_empty());
    assert_eq!(store.poll_times(broker_id, 0, 1_000).await.unwrap(), [200, 300]);
    assert_eq!(history::prune(store, 200).await.unwrap(), 0);
}

async fn thousands_of_queues_are_written_in_one_poll(store: &Store) {
    let broker_id = history::broker_id(store, "b").await.unwrap();
    let n = 3_000;
    let mut first = poll(broker_id, 100);
    first.upserts = (0..n).map(|i| meta(&format!("q-{i}"))).collect();
    first.new_samples = (0..n).map(|i| (i, sample(i as i64, 0))).collect();
    let ids = history::write_poll(store, &first).await.unwrap();
    assert_eq!(ids.len(), n);
    let mut second = poll(broker_id, 110);
    second.samples = ids.iter().map(|&id| (id, StoredSample { consumers: Some(1), ..sample(1, 1) })).collect();
    history::write_poll(store, &second).await.unwrap();

    let known = known(store, broker_id).await;
    assert_eq!(known.len(), n);
    for (i, id) in ids.iter().enumerate() {
        let queue = &known[&format!("q-{i}")];
        assert_eq!(queue.id, *id, "ids in the order of the upserts");
        assert_eq!(queue.last_sample, Some((110, StoredSample { consumers: Some(1), ..sample(1, 1) })));
    }
    for i in (0..n).step_by(97) {
        assert_eq!(store.queue_samples(ids[i], 100, 100).await.unwrap(), [(100, sample(i as i64, 0))]);
    }
}

async fn a_queue_named_twice_in_one_poll_keeps_its_last_values(store: &Store) {
    let broker_id = history::broker_id(store, "b").await.unwrap();
    let mut write = poll(broker_id, 100);
    let classic = QueueMeta { kind: "classic".into(), ..meta("q") };
    write.upserts = vec![meta("q"), meta("other"), classic.clone()];
    write.new_samples = vec![(0, sample(1, 0)), (2, sample(2, 0))];
    let ids = history::write_poll(store, &write).await.unwrap();
    assert_eq!(ids[0], ids[2], "one queue, one id");
    assert_ne!(ids[0], ids[1]);
    let found = history::find_queue(store, "b", "v", "q").await.unwrap().unwrap();
    assert_eq!((found.meta, found.last_sample), (classic, Some((100, sample(2, 0)))));
    assert_eq!(history::count_known_queues(store, broker_id).await.unwrap(), 2);
}

async fn a_queue_name_with_a_nul_is_kept_and_found(store: &Store) {
    // RabbitMQ takes any bytes in a queue name; PostgreSQL's text takes no NUL. The queue must
    // still be kept (a refused statement would lose the whole poll) and found by its name.
    let broker_id = history::broker_id(store, "b").await.unwrap();
    let mut write = poll(broker_id, 100);
    write.upserts = vec![meta("a\0b")];
    write.new_samples = vec![(0, sample(1, 0))];
    let ids = history::write_poll(store, &write).await.unwrap();
    let found = history::find_queue(store, "b", "v", "a\0b").await.unwrap().expect("found by its name");
    assert_eq!((found.id, found.last_sample), (ids[0], Some((100, sample(1, 0)))));
    let mut again = poll(broker_id, 110);
    again.upserts = vec![meta("a\0b")];
    assert_eq!(history::write_poll(store, &again).await.unwrap(), ids, "the same queue, not a new one");
}
