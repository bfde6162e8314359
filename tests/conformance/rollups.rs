//! The history's roll-ups (`history::rollup`) and the chart series read from them
//! (`history::series`): polls written, rolled up into minutes and hours, read back at each
//! resolution, pruned by the windows. Every number is checked against the polls written, so both
//! backends give the same ones.
//!
//! The raw samples are written through warren's own write path (`history::write_poll`).

use tokio_util::sync::CancellationToken;
use warren::history::rollup::{self, Level, Windows, GRACE_SECS, HOUR_SECS};
use warren::history::series::{self, Resolution, RollupPoint};
use warren::history::{self, BrokerPoint, PollWrite};
use warren::storage::Store;

use crate::queue_history::{busy_ready, expected_busy, Polls, POLL, QUEUES};
use crate::Pool;

crate::conformance!(
    with_pool: minutes_and_hours_hold_the_values_in_force_at_each_poll,
    unknown_stays_null_and_a_gap_stays_a_gap,
    a_stopped_roll_up_resumes_where_it_stopped,
    pruning_keeps_each_window_and_the_value_in_force,
);

/// An hour's start, a while ago: the clock here is virtual.
const START: i64 = 1_699_999_200;

/// A broker's written history: its id, its queues' ids (as [`QUEUES`]) and its polls.
struct Written {
    broker_id: i64,
    ids: Vec<i64>,
    polls: Vec<i64>,
}

async fn write_history(store: &Store, name: &str, end: i64, down: impl Fn(i64) -> bool) -> Written {
    let broker_id = history::broker_id(store, name).await.unwrap();
    let mut history = Polls::new(START);
    let mut polls = Vec::new();
    let mut ts = START;
    while ts < end {
        if !down(ts) {
            let mut write = history.write(broker_id, ts);
            write.broker.poll_ms = 5 + (ts / POLL) % 2;
            history.written(history::write_poll(store, &write).await.unwrap());
            polls.push(ts);
        }
        ts += POLL;
    }
    Written { broker_id, ids: history.ids, polls }
}

async fn queue_series(store: &Store, w: &Written, queue: usize, resolution: Resolution, to: i64) -> Vec<RollupPoint> {
    let step = resolution.bucket_secs();
    series::queue_series(store, w.broker_id, w.ids[queue], None, resolution, START, to, step, POLL).await.unwrap()
}

async fn broker_series(store: &Store, w: &Written, resolution: Resolution, to: i64) -> Vec<BrokerPoint> {
    series::broker_series(store, w.broker_id, resolution, START, to, resolution.bucket_secs()).await.unwrap()
}

/// Every stored row of a queue at `level`, by bucket.
async fn stored(store: &Store, queue_id: i64, level: Level) -> Vec<(i64, rollup::QueueRollup)> {
    store.queue_rollups(queue_id, level, i64::MIN, i64::MAX).await.unwrap()
}

async fn minutes_and_hours_hold_the_values_in_force_at_each_poll(store: &Store, _pool: &Pool) {
    // Three hours; the broker was unreachable for the first half of the second.
    let end = START + 3 * HOUR_SECS;
    let w = write_history(store, "local", end, |ts| ts >= START + 3600 && ts < START + 5400).await;
    let now = end + GRACE_SECS;

    // Before any roll-up the minutes are computed from raw samples; after it they are read from
    // the stored rows. Both must be the same.
    let computed = queue_series(store, &w, 0, Resolution::Minute, end - 1).await;
    let computed_broker = broker_series(store, &w, Resolution::Minute, end - 1).await;
    let done = rollup::roll_up(store, w.broker_id, now, &CancellationToken::new()).await.unwrap();
    assert_eq!(done, 180 + 3, "every minute and hour of the range");
    assert_eq!(store.rolled_up_until(w.broker_id, Level::Minute).await.unwrap(), Some(end));
    assert_eq!(store.rolled_up_until(w.broker_id, Level::Hour).await.unwrap(), Some(end));
    assert_eq!(queue_series(store, &w, 0, Resolution::Minute, end - 1).await, computed);
    let stored_broker = broker_series(store, &w, Resolution::Minute, end - 1).await;
    assert_eq!(stored_broker.len(), computed_broker.len());
    for (stored, computed) in stored_broker.iter().zip(&computed_broker) {
        assert_eq!(format!("{stored:?}"), format!("{computed:?}"));
    }

    assert_eq!(computed.len(), 180);
    for (m, point) in computed.iter().enumerate() {
        let from = START + m as i64 * 60;
        assert_eq!(point.ts, from);
        if (60..90).contains(&m) {
            assert_eq!((point.samples, point.ready, point.coverage), (0, None, 0.0), "minute {m} is a gap");
            continue;
        }
        let (min, max, avg, n) = expected_busy(START, &w.polls, from, from + 60);
        assert_eq!((point.samples, point.ready_min, point.ready_max), (n, Some(min), Some(max)), "minute {m}");
        assert!((point.ready.unwrap() - avg).abs() < 0.001, "minute {m}: {:?} vs {avg}", point.ready);
        assert_eq!(point.coverage, 1.0);
    }

    let hours = queue_series(store, &w, 0, Resolution::Hour, end - 1).await;
    assert_eq!(hours.len(), 3);
    for (h, point) in hours.iter().enumerate() {
        let from = START + h as i64 * 3600;
        let (min, max, avg, n) = expected_busy(START, &w.polls, from, from + 3600);
        assert_eq!((point.ts, point.samples, point.ready_min, point.ready_max), (from, n, Some(min), Some(max)));
        assert!((point.ready.unwrap() - avg).abs() < 0.001, "hour {h}: {:?} vs {avg}", point.ready);
        let last_poll = w.polls.iter().filter(|&&p| p < from + 3600).max().unwrap();
        assert_eq!(point.ready_last, Some(busy_ready((last_poll - START) / POLL)));
        assert_eq!((point.unacked, point.unacked_last, point.consumers), (Some(1.0), Some(1), Some(2.0)));
    }
    assert_eq!([hours[0].coverage, hours[1].coverage, hours[2].coverage], [1.0, 0.5, 1.0]);
    // The rate is unknown at the first poll only: averaged over the polls that knew it.
    let rates: Vec<i64> = (1..360).map(|p| 1000 + (p % 3) * 500).collect();
    let rate = rates.iter().sum::<i64>() as f64 / rates.len() as f64 / 1000.0;
    assert!((hours[0].publish_rate.unwrap() - rate).abs() < 0.001, "{:?}", hours[0]);
    assert_eq!((hours[0].publish_rate_max, hours[2].publish_rate_max), (Some(2.0), Some(2.0)));

    // The idle queue costs one row per resolution (its first minute and hour); the later ones
    // are derived from it, and read the same.
    assert_eq!(stored(store, w.ids[1], Level::Minute).await.len(), 1);
    assert_eq!(stored(store, w.ids[1], Level::Hour).await.len(), 1);
    let idle = queue_series(store, &w, 1, Resolution::Hour, end - 1).await;
    let idle: Vec<_> = idle.iter().map(|p| (p.samples, p.ready, p.ready_min, p.ready_last)).collect();
    assert_eq!(
        idle,
        [(360, Some(5.0), Some(5), Some(5)), (180, Some(5.0), Some(5), Some(5)), (360, Some(5.0), Some(5), Some(5))]
    );

    // The broker's series: its depth averaged over its polls, the poll time too.
    let broker = broker_series(store, &w, Resolution::Hour, end - 1).await;
    let broker: Vec<_> = broker.iter().map(|p| (p.ts, p.ready, p.poll_ms)).collect();
    // poll_ms alternates 5 and 6: an average of 5.5 rounds to 6.
    assert_eq!(broker, [(START, Some(1), Some(6)), (START + 3600, Some(1), Some(6)), (START + 7200, Some(1), Some(6))]);
}

async fn unknown_stays_null_and_a_gap_stays_a_gap(store: &Store, _pool: &Pool) {
    // One hour and a half; no poll in its minutes 10 and 11.
    let end = START + 5400;
    let w = write_history(store, "local", end, |ts| ts >= START + 600 && ts < START + 720).await;
    let check = |label: &str, points: &[RollupPoint], gaps: &[usize]| {
        for (i, p) in points.iter().enumerate() {
            let nulls = (p.ready, p.ready_min, p.ready_max, p.ready_last, p.unacked, p.oldest_age_secs);
            assert_eq!(nulls, (None, None, None, None, None, None), "{label} {i}: unknown is null, not 0");
            if gaps.contains(&i) {
                assert_eq!((p.samples, p.consumers, p.consumers_last), (0, None, None), "{label} {i}: a gap");
            } else {
                assert_eq!(
                    (p.consumers, p.consumers_min, p.consumers_last),
                    (Some(1.0), Some(1), Some(1)),
                    "{label} {i}"
                );
            }
        }
    };
    let unknown = 2;
    let minutes = queue_series(store, &w, unknown, Resolution::Minute, end - 1).await;
    assert_eq!(minutes.len(), 90);
    check("computed minute", &minutes, &[10, 11]);
    rollup::roll_up(store, w.broker_id, end + GRACE_SECS, &CancellationToken::new()).await.unwrap();
    let stored_minutes = queue_series(store, &w, unknown, Resolution::Minute, end - 1).await;
    check("stored minute", &stored_minutes, &[10, 11]);
    assert_eq!(stored_minutes, minutes);
    // The first hour is stored, the last half hour computed from the stored minutes.
    let hours = queue_series(store, &w, unknown, Resolution::Hour, end - 1).await;
    assert_eq!(hours.iter().map(|p| p.samples).collect::<Vec<_>>(), [348, 180]);
    check("hour", &hours, &[]);

    // The broker's unacked count was never known: null at every resolution; its depth is null
    // only where it was not polled.
    for resolution in [Resolution::Minute, Resolution::Hour] {
        for (i, p) in broker_series(store, &w, resolution, end - 1).await.iter().enumerate() {
            let gap = resolution == Resolution::Minute && (i == 10 || i == 11);
            assert_eq!(p.unacked, None, "{resolution:?} {i}");
            assert_eq!(p.publish_rate, None, "{resolution:?} {i}");
            assert_eq!(p.ready, if gap { None } else { Some(1) }, "{resolution:?} {i}");
        }
    }
}

async fn a_stopped_roll_up_resumes_where_it_stopped(store: &Store, _pool: &Pool) {
    // The same two hours for two brokers: one rolled up in pieces, stopped and resumed, the
    // other in one go. Their rows must be the same.
    let end = START + 2 * HOUR_SECS;
    let pieces = write_history(store, "pieces", end, |_| false).await;
    let whole = write_history(store, "whole", end, |_| false).await;
    let now = end + GRACE_SECS;

    let stopped = CancellationToken::new();
    stopped.cancel();
    assert_eq!(rollup::roll_up(store, pieces.broker_id, now, &stopped).await.unwrap(), 0);
    assert_eq!(store.rolled_up_until(pieces.broker_id, Level::Minute).await.unwrap(), None, "nothing done");
    // Up to the first hour (as if stopped there), then a stop before anything more.
    let first =
        rollup::roll_up(store, pieces.broker_id, START + 3600 + GRACE_SECS, &CancellationToken::new()).await.unwrap();
    assert_eq!(first, 60 + 1);
    assert_eq!(rollup::roll_up(store, pieces.broker_id, now, &stopped).await.unwrap(), 0);
    for level in [Level::Minute, Level::Hour] {
        assert_eq!(store.rolled_up_until(pieces.broker_id, level).await.unwrap(), Some(START + 3600), "{level:?}");
    }
    let rest = rollup::roll_up(store, pieces.broker_id, now, &CancellationToken::new()).await.unwrap();
    assert_eq!(rest, 60 + 1, "only what was left");
    assert_eq!(rollup::roll_up(store, whole.broker_id, now, &CancellationToken::new()).await.unwrap(), 120 + 2);

    for level in [Level::Minute, Level::Hour] {
        for q in 0..3 {
            let (a, b) = (stored(store, pieces.ids[q], level).await, stored(store, whole.ids[q], level).await);
            assert!(!a.is_empty(), "{level:?} {}", QUEUES[q]);
            assert_eq!(a, b, "{level:?} {}", QUEUES[q]);
        }
        let a = store.bucket_polls(pieces.broker_id, level, START, end).await.unwrap();
        let b = store.bucket_polls(whole.broker_id, level, START, end).await.unwrap();
        assert_eq!(a.len() as i64, (end - START) / level.secs());
        let sorted = |mut v: Vec<warren::storage::rollups::BucketPolls>| {
            v.sort_by_key(|b| b.bucket);
            v
        };
        assert_eq!(sorted(a), sorted(b), "{level:?}");
    }
    let a = queue_series(store, &pieces, 0, Resolution::Hour, end - 1).await;
    assert_eq!(a, queue_series(store, &whole, 0, Resolution::Hour, end - 1).await);
}

async fn pruning_keeps_each_window_and_the_value_in_force(store: &Store, pool: &Pool) {
    let end = START + 3 * HOUR_SECS;
    let w = write_history(store, "local", end, |_| false).await;
    let windows = Windows { raw_secs: 2 * 3600, minute_secs: 86_400, hour_secs: 10 * 86_400 };
    let broker_id = w.broker_id;
    let polls = |from: i64, to: i64| async move { store.polls_between(broker_id, from, to).await.unwrap().len() };
    let raw =
        |queue_id: i64| async move { store.queue_samples_from(queue_id, i64::MIN, i64::MAX).await.unwrap().len() };
    let ids = [w.broker_id];

    // Nothing rolled up yet: raw samples stay even past their window.
    let now = end + GRACE_SECS;
    assert_eq!(rollup::prune(store, now + 86_400, windows, &ids).await.unwrap(), 0);
    assert_eq!(polls(START, end).await, 1080);
    let busy_raw = raw(w.ids[0]).await;

    rollup::roll_up(store, w.broker_id, now, &CancellationToken::new()).await.unwrap();
    let hours = queue_series(store, &w, 0, Resolution::Hour, end - 1).await;
    let minutes = queue_series(store, &w, 0, Resolution::Minute, end - 1).await;
    // Raw samples go by their window once rolled up: those before now - 2 h.
    let removed = rollup::prune(store, now, windows, &ids).await.unwrap();
    assert_eq!(polls(START, end).await as i64, (end - (now - 2 * 3600)) / POLL);
    assert_eq!(polls(START, now - 2 * 3600).await, 0);
    assert!(removed > 0 && raw(w.ids[0]).await < busy_raw);
    assert_eq!(queue_series(store, &w, 0, Resolution::Minute, end - 1).await, minutes, "minutes are kept");

    // A day later: raw samples are kept up to an hour before the hour rolled up last (its
    // keyframe); minutes are past their window, but each queue keeps its latest minute row, the
    // value still in force for the idle queue.
    rollup::prune(store, now + 86_400, windows, &ids).await.unwrap();
    assert_eq!(polls(START, end - 3600).await, 0);
    assert_eq!(polls(end - 3600, end).await, 360);
    for q in 0..3 {
        let rows = stored(store, w.ids[q], Level::Minute).await;
        assert_eq!(rows.len(), 1, "{}", QUEUES[q]);
    }
    assert_eq!(stored(store, w.ids[0], Level::Minute).await[0].0, end - 60, "the busy queue's latest minute");
    assert!(store.bucket_polls(w.broker_id, Level::Minute, START, end).await.unwrap().is_empty());
    assert_eq!(queue_series(store, &w, 0, Resolution::Hour, end - 1).await, hours, "hours are kept");
    assert_eq!(stored(store, w.ids[0], Level::Hour).await.len(), 3);

    // Past the hours' window too, with two more hours rolled up: each queue keeps its latest hour
    // row; a queue deleted before the window loses its rows and its record.
    let mut deleting = PollWrite { broker_id: w.broker_id, ts: end, ..PollWrite::default() };
    deleting.deleted.push(w.ids[1]);
    history::write_poll(store, &deleting).await.unwrap();
    rollup::roll_up(store, w.broker_id, end + 2 * 3600 + GRACE_SECS, &CancellationToken::new()).await.unwrap();
    rollup::prune(store, end + 11 * 86_400, windows, &ids).await.unwrap();
    assert_eq!(stored(store, w.ids[0], Level::Hour).await.iter().map(|r| r.0).collect::<Vec<_>>(), [end - 3600]);
    assert_eq!(stored(store, w.ids[2], Level::Hour).await.len(), 1);
    assert!(stored(store, w.ids[1], Level::Hour).await.is_empty());
    assert!(stored(store, w.ids[1], Level::Minute).await.is_empty());
    assert_eq!(queue_names(pool).await, ["busy", "unknown"]);
}

async fn queue_names(pool: &Pool) -> Vec<String> {
    let sql = "select name from queues order by name";
    match pool {
        Pool::Sqlite(db) => sqlx::query_scalar(sql).fetch_all(db).await.unwrap(),
        Pool::Postgres(pg) => sqlx::query_scalar(sql).fetch_all(pg).await.unwrap(),
    }
}
