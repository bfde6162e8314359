//! History roll-ups: values, gaps, unknowns, restarts, and the resolution the API picks. The
//! first tests write polls with virtual timestamps through warren's own write path into a real
//! SQLite file and read them back through the real router; the last one runs warren against the
//! real broker.

mod common;

use std::time::Duration;

use axum::body::Body;
use axum::http::Request;
use common::queue_history::{busy_ready, expected_busy, Polls, POLL};
use serde_json::Value;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;
use warren::history::{self, rollup};
use warren::state::AppState;

/// (queue id, bucket, samples, ready average in milli, last ready) of a stored minute.
type RollupRow = (i64, i64, i64, Option<i64>, Option<i64>);

struct Fixture {
    _dir: tempfile::TempDir,
    state: AppState,
    /// The same SQLite file, for the rows the tests read and change directly.
    db: sqlx::SqlitePool,
    broker_id: i64,
}

async fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let toml =
        format!("database = {:?}\n[[brokers]]\nname = \"local\"\n", dir.path().join("w.db").display().to_string());
    let state = warren::build_state(warren::config::Config::from_toml(&toml).unwrap()).await.unwrap();
    let broker_id = state.broker_ids["local"];
    let db = warren::history::open(&dir.path().join("w.db")).await.unwrap();
    Fixture { _dir: dir, state, db, broker_id }
}

/// Polls every 10 s over `[start, end)`, except where `down` says the broker was unreachable.
async fn write_history(f: &Fixture, start: i64, end: i64, down: impl Fn(i64) -> bool) -> Vec<i64> {
    let mut history = Polls::new(start);
    let mut polls = Vec::new();
    let mut ts = start;
    while ts < end {
        if !down(ts) {
            let write = history.write(f.broker_id, ts);
            history.written(history::write_poll(&f.state.store, &write).await.unwrap());
            polls.push(ts);
        }
        ts += POLL;
    }
    polls
}

async fn get(f: &Fixture, path: &str) -> Value {
    let mut request = Request::get(path).body(Body::empty()).unwrap();
    // Without logins configured warren answers only this machine: say where the request is from.
    request.extensions_mut().insert(axum::extract::ConnectInfo(std::net::SocketAddr::from(([127, 0, 0, 1], 1))));
    let response = warren::web::router(f.state.clone()).oneshot(request).await.unwrap();
    assert_eq!(response.status(), 200, "{path}");
    serde_json::from_slice(&axum::body::to_bytes(response.into_body(), usize::MAX).await.unwrap()).unwrap()
}

#[tokio::test]
async fn hourly_rollups_hold_min_max_avg_last_gaps_and_unknowns() {
    let f = fixture().await;
    let now = chrono::Utc::now().timestamp();
    // Three hours, ten days ago (only hour roll-ups reach back that far); the broker was
    // unreachable for the first half of the second hour.
    let start = (now - 10 * 86_400).div_euclid(3600) * 3600;
    let down = |ts: i64| ts >= start + 3600 && ts < start + 5400;
    let polls = write_history(&f, start, start + 3 * 3600, down).await;
    let cancel = CancellationToken::new();
    rollup::roll_up(&f.state.store, f.broker_id, now, &cancel).await.unwrap();

    // The idle queue costs one row (its first hour); later hours are derived from it.
    let rows: Vec<(String, i64)> = sqlx::query_as(
        "select q.name, count(*) from queue_rollups_1h r join queues q on q.id = r.queue_id group by q.name order by 1",
    )
    .fetch_all(&f.db)
    .await
    .unwrap();
    assert_eq!(rows, vec![("busy".to_string(), 3), ("idle".to_string(), 1), ("unknown".to_string(), 1)]);

    let path = format!("/api/v1/queues/local/v/busy/history?from={start}&to={}", start + 3 * 3600 - 1);
    let body = get(&f, &path).await;
    assert_eq!(body["resolution"], "1h", "{body}");
    assert_eq!(body["step"], 3600);
    let points = body["points"].as_array().unwrap();
    assert_eq!(points.len(), 3);
    for (h, point) in points.iter().enumerate() {
        let from = start + h as i64 * 3600;
        let (min, max, avg, n) = expected_busy(start, &polls, from, from + 3600);
        assert_eq!(point["ts"], from);
        assert_eq!(point["samples"], n, "hour {h}");
        assert_eq!((point["ready_min"].as_i64(), point["ready_max"].as_i64()), (Some(min), Some(max)), "hour {h}");
        assert!((point["ready"].as_f64().unwrap() - avg).abs() < 0.001, "hour {h}: {} vs {avg}", point["ready"]);
        let last_poll = polls.iter().filter(|&&p| p < from + 3600).max().unwrap();
        assert_eq!(point["ready_last"].as_i64(), Some(busy_ready((last_poll - start) / POLL)));
        assert_eq!(point["unacked"], 1.0);
    }
    // Half the second hour had no poll: half covered, not padded with zeros or held values.
    assert_eq!(points[0]["coverage"], 1.0);
    assert_eq!(points[1]["coverage"], 0.5);
    // The rate is unknown at the first poll only: averaged over the polls that knew it.
    let first_hour_rates: Vec<i64> = (1..360).map(|p| 1000 + (p % 3) * 500).collect();
    let rate = first_hour_rates.iter().sum::<i64>() as f64 / first_hour_rates.len() as f64 / 1000.0;
    assert!((points[0]["publish_rate"].as_f64().unwrap() - rate).abs() < 0.001, "{}", points[0]);
    assert_eq!(points[0]["publish_rate_max"], 2.0);

    let idle = get(&f, &format!("/api/v1/queues/local/v/idle/history?from={start}&to={}", start + 3 * 3600 - 1)).await;
    let idle_points = idle["points"].as_array().unwrap();
    for point in idle_points {
        assert_eq!((point["ready"].as_f64(), point["ready_min"].as_i64()), (Some(5.0), Some(5)), "{point}");
    }
    assert_eq!(idle_points[1]["samples"], 180, "the held value counts only at polls that happened");
    assert_eq!(idle_points[2]["samples"], 360);

    let unknown =
        get(&f, &format!("/api/v1/queues/local/v/unknown/history?from={start}&to={}", start + 3 * 3600 - 1)).await;
    for point in unknown["points"].as_array().unwrap() {
        assert!(point["ready"].is_null() && point["ready_max"].is_null(), "unknown is null, not 0: {point}");
        assert_eq!(point["consumers"], 1.0);
    }

    // The broker's own series comes from its roll-ups too.
    let broker = get(&f, &format!("/api/v1/brokers/local/history?from={start}&to={}", start + 3 * 3600 - 1)).await;
    assert_eq!(broker["resolution"], "1h");
    assert_eq!(broker["points"][1]["ready"], 1);
}

#[tokio::test]
async fn minute_rollups_and_the_live_tail_agree_with_raw_samples() {
    let f = fixture().await;
    let now = chrono::Utc::now().timestamp();
    // Thirty minutes three days ago: raw samples are past their window there, minutes are not.
    let start = (now - 3 * 86_400).div_euclid(3600) * 3600;
    let down = |ts: i64| ts >= start + 600 && ts < start + 660;
    let polls = write_history(&f, start, start + 1800, down).await;
    let path = format!("/api/v1/queues/local/v/busy/history?from={start}&to={}", start + 1799);

    // Before any roll-up the series is computed from raw samples; after it, read from the
    // stored minutes. Both must be the same.
    let before = get(&f, &path).await;
    assert_eq!(before["resolution"], "1m", "{before}");
    let cancel = CancellationToken::new();
    rollup::roll_up(&f.state.store, f.broker_id, now, &cancel).await.unwrap();
    let after = get(&f, &path).await;
    assert_eq!(before["points"], after["points"]);

    let points = after["points"].as_array().unwrap();
    assert_eq!(points.len(), 30);
    for (m, point) in points.iter().enumerate() {
        let from = start + m as i64 * 60;
        if m == 10 {
            assert!(point["ready"].is_null() && point["samples"] == 0, "a minute without polls is a gap: {point}");
            continue;
        }
        let (min, max, avg, n) = expected_busy(start, &polls, from, from + 60);
        assert_eq!(point["samples"], n);
        assert_eq!((point["ready_min"].as_i64(), point["ready_max"].as_i64()), (Some(min), Some(max)));
        assert!((point["ready"].as_f64().unwrap() - avg).abs() < 0.001);
    }

    // Idempotent: rolling the same buckets up again (a restart before the watermark was saved)
    // gives the same rows.
    let dump = || async {
        let rows: Vec<RollupRow> = sqlx::query_as(
            "select queue_id, bucket, samples, ready_avg_m, ready from queue_rollups_1m order by queue_id, bucket",
        )
        .fetch_all(&f.db)
        .await
        .unwrap();
        rows
    };
    let first = dump().await;
    sqlx::query("delete from rollup_progress").execute(&f.db).await.unwrap();
    rollup::roll_up(&f.state.store, f.broker_id, now, &cancel).await.unwrap();
    assert_eq!(first, dump().await);
}

#[tokio::test]
async fn pruning_keeps_what_is_not_rolled_up_and_the_value_in_force() {
    let f = fixture().await;
    let now = chrono::Utc::now().timestamp();
    let start = (now - 10 * 86_400).div_euclid(3600) * 3600;
    write_history(&f, start, start + 2 * 3600, |_| false).await;
    let windows = rollup::Windows::from_config(&f.state.config);
    let db = f.db.clone();
    let count = |table: &'static str| {
        let db = db.clone();
        async move {
            let n: i64 = sqlx::query_scalar(&format!("select count(*) from {table}")).fetch_one(&db).await.unwrap();
            n
        }
    };
    // Nothing rolled up yet: raw samples stay even though they are past their window.
    rollup::prune(&f.state.store, now, windows, &[f.broker_id]).await.unwrap();
    assert!(count("queue_samples").await > 0);

    let cancel = CancellationToken::new();
    rollup::roll_up(&f.state.store, f.broker_id, now, &cancel).await.unwrap();
    rollup::prune(&f.state.store, now, windows, &[f.broker_id]).await.unwrap();
    assert_eq!(count("queue_samples").await, 0);
    // Minutes are past their 7-day window, but each queue keeps its latest minute row: the idle
    // queue's value is still in force.
    let minute_rows: i64 = sqlx::query_scalar(
        "select count(*) from queue_rollups_1m r join queues q on q.id = r.queue_id where q.name = 'idle'",
    )
    .fetch_one(&f.db)
    .await
    .unwrap();
    assert_eq!(minute_rows, 1);
    let hours = get(&f, &format!("/api/v1/queues/local/v/idle/history?from={start}&to={}", start + 2 * 3600 - 1)).await;
    assert_eq!(hours["points"][1]["ready"], 5.0, "{hours}");

    // A queue deleted longer ago than the retention loses its last rows and its record.
    sqlx::query("update queues set deleted_at = ? where name = 'idle'").bind(start + 7200).execute(&db).await.unwrap();
    rollup::prune(&f.state.store, now + 40 * 86_400, windows, &[f.broker_id]).await.unwrap();
    let names: Vec<String> = sqlx::query_scalar("select name from queues order by name").fetch_all(&db).await.unwrap();
    assert_eq!(names, vec!["busy".to_string(), "unknown".to_string()]);
    assert!(count("queue_rollups_1h").await > 0, "the others keep the row still in force");
}

/// Against the real broker: warren's own polls show up at every resolution, the newest minutes
/// computed from raw samples until they are rolled up.
#[tokio::test]
async fn live_history_at_every_resolution() {
    let vhost = common::TestVhost::create("rollups").await;
    let connection = vhost.connect().await;
    let channel = vhost.channel(&connection).await;
    common::declare(&channel, "depth9", false).await;
    common::publish(&channel, "depth9", 9, Default::default()).await;
    let warren = common::Warren::for_vhost(&vhost.name, 1).await;
    let encoded = warren::broker::management::encode_segment(&vhost.name);
    for (range, resolution) in [("1h", "raw"), ("24h", "1m"), ("30d", "1h")] {
        let path = format!("/api/v1/queues/local/{encoded}/depth9/history?range={range}");
        common::wait_for(&format!("{range} history to show 9 ready"), Duration::from_secs(30), || async {
            let (status, body) = warren.get_json(&path).await;
            let last = body["points"].as_array().and_then(|p| p.iter().rev().find(|p| !p["ready"].is_null()).cloned());
            // A roll-up point averages its polls, and the first poll of a queue declared a moment
            // before warren started may still see the broker's stats from before the publishes
            // (0 ready): the newest value in the bucket and its maximum are the queue's 9.
            let nine = |point: &Value, key: &str| point[key].as_f64() == Some(9.0);
            let shows_nine = |point: &Value| {
                if resolution == "raw" {
                    nine(point, "ready")
                } else {
                    nine(point, "ready_last") && nine(point, "ready_max") && point["ready"].as_f64() > Some(0.0)
                }
            };
            match (status, body["resolution"].as_str(), last) {
                (200, Some(r), Some(point)) if r == resolution && shows_nine(&point) => Ok(()),
                _ => Err(body.to_string().chars().take(400).collect()),
            }
        })
        .await;
    }
    warren.stop().await;
    connection.close(0, "done".into()).await.ok();
}
