//! The history's day partitions (issue 33, must-have 5; `storage/postgres/partitions.rs`): on
//! PostgreSQL the samples and queue roll-ups are partitioned by UTC day, retention drops whole
//! days, and a write for a day without a partition goes to the default partition. Both backends
//! must read back the same rows and prune the same ones; on PostgreSQL the tests also look at
//! which partition each row is in, through the pool (partitions are not behind the interface).

use warren::history::rollup::{Level, QueueRollup};
use warren::history::{self, BrokerSample, PollWrite, QueueMeta, StoredSample};
use warren::storage::rollups::Cutoffs;
use warren::storage::Store;

use crate::Pool;

crate::conformance!(
    with_pool: writes_land_in_their_day_across_midnight,
    a_write_for_a_day_without_a_partition_is_kept_and_moved_when_the_day_is_made,
    retention_drops_whole_days_and_keeps_the_values_in_force,
);

const DAY: i64 = 86_400;
/// 2024-10-04 00:00 UTC: a day long before the one the test database was made on, so no
/// partition exists for it until a test makes it.
const D0: i64 = 20_000 * DAY;

fn meta(name: &str) -> QueueMeta {
    QueueMeta { vhost: "v".into(), name: name.into(), kind: "classic".into(), ..QueueMeta::default() }
}

fn ready(n: i64) -> StoredSample {
    StoredSample { ready: Some(n), unacked: Some(0), ..StoredSample::default() }
}

fn poll(broker_id: i64, ts: i64) -> PollWrite {
    PollWrite { broker_id, ts, broker: BrokerSample { poll_ms: 5, ..BrokerSample::default() }, ..PollWrite::default() }
}

/// A poll that adds the queues `names` with these samples; returns their ids.
async fn new_queues(store: &Store, broker_id: i64, ts: i64, names: &[(&str, i64)]) -> Vec<i64> {
    let mut write = poll(broker_id, ts);
    for (i, (name, n)) in names.iter().enumerate() {
        write.upserts.push(meta(name));
        write.new_samples.push((i, ready(*n)));
    }
    history::write_poll(store, &write).await.unwrap()
}

async fn sample_at(store: &Store, broker_id: i64, ts: i64, queue_id: i64, n: i64) {
    let mut write = poll(broker_id, ts);
    write.samples.push((queue_id, ready(n)));
    history::write_poll(store, &write).await.unwrap();
}

/// The day partition's name for a time, as the migration names it.
fn day_partition(table: &str, ts: i64) -> String {
    let date = chrono::DateTime::from_timestamp(ts, 0).unwrap();
    format!("partitions.{table}_{}", date.format("%Y%m%d"))
}

/// On PostgreSQL, (partition, time) of each row of `table` by time; on SQLite, `None`.
async fn placed(pool: &Pool, table: &str, key: &str) -> Option<Vec<(String, i64)>> {
    let Pool::Postgres(pg) = pool else { return None };
    let sql = format!("select tableoid::regclass::text, {key} from {table} order by {key}, tableoid::regclass::text");
    Some(sqlx::query_as(&sql).fetch_all(pg).await.unwrap())
}

/// On PostgreSQL, the days of `table` that have a partition, as names; on SQLite, `None`.
async fn partitions(pool: &Pool, table: &str) -> Option<Vec<String>> {
    let Pool::Postgres(pg) = pool else { return None };
    let sql = "select c.oid::regclass::text from pg_inherits i join pg_class c on c.oid = i.inhrelid
               where i.inhparent = $1::regclass order by 1";
    Some(sqlx::query_scalar(sql).bind(table).fetch_all(pg).await.unwrap())
}

fn times(rows: &[(i64, StoredSample)]) -> Vec<i64> {
    rows.iter().map(|r| r.0).collect()
}

async fn writes_land_in_their_day_across_midnight(store: &Store, pool: &Pool) {
    let midnight = D0 + DAY;
    store.prepare_partitions(midnight - 60).await.unwrap();
    let broker_id = history::broker_id(store, "b").await.unwrap();
    let id = new_queues(store, broker_id, midnight - 10, &[("orders", 1)]).await[0];
    sample_at(store, broker_id, midnight, id, 2).await;
    sample_at(store, broker_id, midnight + 10, id, 3).await;
    let rows = store.queue_samples(id, midnight - 100, midnight + 100).await.unwrap();
    assert_eq!(times(&rows), [midnight - 10, midnight, midnight + 10]);
    assert_eq!(rows.iter().map(|r| r.1.ready.unwrap()).collect::<Vec<_>>(), [1, 2, 3]);

    // Minute roll-ups on both sides of midnight, as the roll-up saves them.
    let rollup = |n| QueueRollup { samples: 6, last: ready(n), ..QueueRollup::default() };
    let rows = [(id, midnight - 60, rollup(1)), (id, midnight, rollup(3))];
    store.save_rollups(broker_id, Level::Minute, midnight - 60, midnight + 60, &rows).await.unwrap();
    assert_eq!(store.queue_rollups(id, Level::Minute, i64::MIN, i64::MAX).await.unwrap().len(), 2);

    if let Some(samples) = placed(pool, "queue_samples", "ts").await {
        let before = day_partition("queue_samples", midnight - 1);
        let after = day_partition("queue_samples", midnight);
        assert_eq!(samples, [(before, midnight - 10), (after.clone(), midnight), (after, midnight + 10)]);
        let minutes = placed(pool, "queue_rollups_1m", "bucket").await.unwrap();
        let (before, after) =
            (day_partition("queue_rollups_1m", midnight - 1), day_partition("queue_rollups_1m", midnight));
        assert_eq!(minutes, [(before, midnight - 60), (after, midnight)]);
    }
}

async fn a_write_for_a_day_without_a_partition_is_kept_and_moved_when_the_day_is_made(store: &Store, pool: &Pool) {
    let t = D0 + 3600;
    let broker_id = history::broker_id(store, "b").await.unwrap();
    let id = new_queues(store, broker_id, t, &[("orders", 1)]).await[0];
    sample_at(store, broker_id, t + 10, id, 2).await;
    assert_eq!(times(&store.queue_samples(id, t, t + 100).await.unwrap()), [t, t + 10]);
    if let Some(samples) = placed(pool, "queue_samples", "ts").await {
        let default = "partitions.queue_samples_default".to_string();
        assert_eq!(samples, [(default.clone(), t), (default, t + 10)], "no partition for that day yet");
    }

    // The day is made (twice: a second run finds it made): its rows move in, and the next write
    // lands there too.
    store.prepare_partitions(t).await.unwrap();
    store.prepare_partitions(t).await.unwrap();
    sample_at(store, broker_id, t + 20, id, 3).await;
    let rows = store.queue_samples(id, t, t + 100).await.unwrap();
    assert_eq!(times(&rows), [t, t + 10, t + 20]);
    assert_eq!(rows.iter().map(|r| r.1.ready.unwrap()).collect::<Vec<_>>(), [1, 2, 3]);
    if let Some(samples) = placed(pool, "queue_samples", "ts").await {
        let day = day_partition("queue_samples", t);
        assert_eq!(samples, [(day.clone(), t), (day.clone(), t + 10), (day, t + 20)]);
        let days = partitions(pool, "queue_samples").await.unwrap();
        for ahead in 0..=3 {
            assert!(days.contains(&day_partition("queue_samples", t + ahead * DAY)), "{ahead} days ahead: {days:?}");
        }
    }
}

async fn retention_drops_whole_days_and_keeps_the_values_in_force(store: &Store, pool: &Pool) {
    // Days D0 to D0 + 6 have partitions. "idle" is written on the first day only; "busy" once a
    // day for five days. Polls at 100 s past each midnight, minute roll-ups at 60 s.
    store.prepare_partitions(D0).await.unwrap();
    store.prepare_partitions(D0 + 3 * DAY).await.unwrap();
    let broker_id = history::broker_id(store, "b").await.unwrap();
    let ids = new_queues(store, broker_id, D0 + 100, &[("idle", 7), ("busy", 0)]).await;
    let (idle, busy) = (ids[0], ids[1]);
    for k in 1..5 {
        sample_at(store, broker_id, D0 + k * DAY + 100, busy, k).await;
    }
    let minute =
        |queue_id, bucket, n| (queue_id, bucket, QueueRollup { samples: 1, last: ready(n), ..QueueRollup::default() });
    let mut rows = vec![minute(idle, D0 + 60, 7)];
    rows.extend((0..5).map(|k| minute(busy, D0 + k * DAY + 60, k)));
    store.save_rollups(broker_id, Level::Minute, D0, D0 + 5 * DAY, &rows).await.unwrap();

    // The cutoff falls inside the fourth day: the first three go whole.
    let cutoff = D0 + 3 * DAY + 500;
    // Five queue samples (idle's, and busy's of four days) and four polls before the cutoff.
    assert_eq!(store.prune_samples(cutoff).await.unwrap(), 9);
    assert!(store.queue_samples_from(idle, i64::MIN, i64::MAX).await.unwrap().is_empty());
    assert_eq!(times(&store.queue_samples_from(busy, i64::MIN, i64::MAX).await.unwrap()), [D0 + 4 * DAY + 100]);

    // Busy's minutes of the first three days go; its fourth day's is its value in force at the
    // cutoff, and idle's only row, on the first day, is idle's. With them, the broker's minutes
    // of the four polls before the cutoff.
    assert_eq!(store.prune_rollups(Cutoffs { minute: cutoff, hour: cutoff }).await.unwrap(), 3 + 4);
    let kept = |queue_id| async move {
        let rows = store.queue_rollups(queue_id, Level::Minute, i64::MIN, i64::MAX).await.unwrap();
        rows.iter().map(|(bucket, r)| (*bucket, r.last.ready.unwrap())).collect::<Vec<_>>()
    };
    assert_eq!(kept(idle).await, [(D0 + 60, 7)]);
    assert_eq!(kept(busy).await, [(D0 + 3 * DAY + 60, 3), (D0 + 4 * DAY + 60, 4)]);
    // What a chart from the cutoff on reads: idle's value in force, led by its row.
    let chart = store.queue_rollups(idle, Level::Minute, cutoff, cutoff + DAY).await.unwrap();
    assert_eq!(chart.iter().map(|r| r.0).collect::<Vec<_>>(), [D0 + 60]);
    // Pruning again removes nothing more.
    assert_eq!(store.prune_samples(cutoff).await.unwrap(), 0);
    assert_eq!(store.prune_rollups(Cutoffs { minute: cutoff, hour: cutoff }).await.unwrap(), 0);

    if let Some(days) = partitions(pool, "queue_samples").await {
        for k in 0..3 {
            assert!(!days.contains(&day_partition("queue_samples", D0 + k * DAY)), "day {k} dropped: {days:?}");
        }
        assert!(days.contains(&day_partition("queue_samples", D0 + 3 * DAY)), "the day straddling the cutoff stays");
        let minutes = placed(pool, "queue_rollups_1m", "bucket").await.unwrap();
        let default = "partitions.queue_rollups_1m_default".to_string();
        assert_eq!(
            minutes,
            [
                (default, D0 + 60),
                (day_partition("queue_rollups_1m", D0 + 3 * DAY), D0 + 3 * DAY + 60),
                (day_partition("queue_rollups_1m", D0 + 4 * DAY), D0 + 4 * DAY + 60),
            ],
            "idle's row in force kept in the default partition; the first three days dropped"
        );
        let days = partitions(pool, "queue_rollups_1m").await.unwrap();
        assert!(!days.iter().any(|d| d == &day_partition("queue_rollups_1m", D0)), "{days:?}");
    }
}
