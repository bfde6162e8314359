//! `cargo bench --bench history`: storage per metric value after simulated days of polls, and
//! the server time of history chart requests (30 days and shorter) over that history.
//!
//! Phase S (storage) writes `WARREN_BENCH_DAYS` (7) days of polls of `WARREN_BENCH_QUEUES`
//! (10,000) queues, `WARREN_BENCH_BUSY_PERCENT` (10) % busy, every 10 s of virtual time ending
//! now, through warren's own `history::write_poll` (rows only on change or the hourly keyframe,
//! as the poller writes them), `rollup::roll_up` every 10 virtual minutes and `rollup::prune`
//! every virtual hour with the default windows. Then it measures the database.
//!
//! Phase C (charts) adds the older part of a 30-day history (`WARREN_BENCH_CHART_DAYS`) by bulk
//! inserts of hour roll-up rows in the same schema (writing 23 more days poll by poll would take
//! hours on 2 cores), then times `WARREN_BENCH_REQUESTS` (200) requests per case through warren's
//! router (`tower::ServiceExt::oneshot`: routing, handler, SQL, JSON body).
//!
//! Results: stdout summary, JSON to `WARREN_BENCH_JSON` or `$CARGO_TARGET_DIR`/`target/`
//! `bench-history.json`.

// The same allocator as the warren binary (src/main.rs), so the figures are the product's.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::path::{Path, PathBuf};
use std::time::Instant;

use axum::body::Body;
use axum::http::Request;
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;
use warren::history::{self, rollup, BrokerSample, PollWrite, QueueMeta, StoredSample};
use warren::state::AppState;

const POLL_SECS: i64 = 10;
const KEYFRAME_SECS: i64 = 3600;
/// Values per queue per poll: the columns of a `queue_samples` row.
const VALUES_PER_SAMPLE: i64 = 11;

fn env_i64(name: &str, default: i64) -> i64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("target"))
}

fn report_path() -> PathBuf {
    match std::env::var_os("WARREN_BENCH_JSON") {
        Some(p) => PathBuf::from(p),
        None => target_dir().join("bench-history.json"),
    }
}

/// A reproducible pseudo-random number per (queue, poll, salt): splitmix64.
fn noise(queue: i64, poll: i64, salt: u64) -> i64 {
    let mut z = (queue as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ (poll as u64).wrapping_add(salt << 40);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    ((z ^ (z >> 31)) >> 1) as i64
}

/// What the poller would store for queue `i` at poll `k` (time `ts`): busy queues change every
/// poll (depth, rates, counter, head timestamp), idle ones never (30% of them hold a backlog).
fn sample(i: i64, k: i64, ts: i64, busy: bool, start: i64) -> StoredSample {
    if busy {
        StoredSample {
            ready: Some(noise(i, k, 1) % 200),
            unacked: Some(noise(i, k, 2) % 10),
            consumers: Some(2),
            publish_count: Some(k * 5 + noise(i, k, 3) % 5),
            publish_rate_m: Some(500 + noise(i, k, 4) % 1000),
            deliver_rate_m: Some(500 + noise(i, k, 5) % 1000),
            ack_rate_m: Some(500 + noise(i, k, 6) % 1000),
            redeliver_rate_m: Some(if noise(i, k, 7) % 10 == 0 { 100 } else { 0 }),
            head_ts: Some(ts - noise(i, k, 8) % 60),
            est_oldest_ts: None,
            est_bound: None,
        }
    } else if i % 10 < 3 {
        StoredSample {
            ready: Some(1 + i % 50),
            unacked: Some(0),
            consumers: Some(0),
            publish_count: Some(1000 + i),
            publish_rate_m: Some(0),
            deliver_rate_m: Some(0),
            ack_rate_m: Some(0),
            redeliver_rate_m: Some(0),
            head_ts: Some(start - 1000),
            est_oldest_ts: None,
            est_bound: None,
        }
    } else {
        StoredSample {
            ready: Some(0),
            unacked: Some(0),
            consumers: Some(1),
            publish_count: Some(1000 + i),
            publish_rate_m: Some(0),
            deliver_rate_m: Some(0),
            ack_rate_m: Some(0),
            redeliver_rate_m: Some(0),
            head_ts: None,
            est_oldest_ts: None,
            est_bound: None,
        }
    }
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn summary(mut ms: Vec<f64>) -> Value {
    ms.sort_by(|a, b| a.partial_cmp(b).unwrap());
    json!({
        "n": ms.len(),
        "p50_ms": percentile(&ms, 0.5),
        "p95_ms": percentile(&ms, 0.95),
        "max_ms": ms.last().copied().unwrap_or(f64::NAN),
        "mean_ms": ms.iter().sum::<f64>() / ms.len().max(1) as f64,
    })
}

struct Setup {
    queues: i64,
    busy_every: i64,
    days: i64,
    chart_days: i64,
    requests: i64,
}

impl Setup {
    fn busy(&self, i: i64) -> bool {
        i % self.busy_every == 0
    }
}

fn main() {
    let busy_percent = env_i64("WARREN_BENCH_BUSY_PERCENT", 10).clamp(1, 100);
    let setup = Setup {
        queues: env_i64("WARREN_BENCH_QUEUES", 10_000),
        busy_every: 100 / busy_percent,
        days: env_i64("WARREN_BENCH_DAYS", 7),
        chart_days: env_i64("WARREN_BENCH_CHART_DAYS", 30),
        requests: env_i64("WARREN_BENCH_REQUESTS", 200),
    };
    let runtime = tokio::runtime::Runtime::new().expect("tokio runtime");
    runtime.block_on(run(setup));
}

async fn run(setup: Setup) {
    let dir = tempfile::tempdir_in(target_dir()).expect("temp dir in the target dir");
    let db_path = dir.path().join("warren.db");
    let toml = format!("database = {:?}\n[[brokers]]\nname = \"bench\"\n", db_path.display().to_string());
    let config = warren::config::Config::from_toml(&toml).expect("config");
    let windows = rollup::Windows::from_config(&config);
    let state = warren::build_state(config).await.expect("state");
    let broker_id = state.broker_ids["bench"];
    let db = history::open(&db_path).await.expect("the same file, for the measures and the bulk writes");

    // Phase S: the last `days` days, poll by poll, through warren's write, roll-up and prune.
    let now = chrono::Utc::now().timestamp();
    let start = (now - setup.days * 86_400).div_euclid(3600) * 3600;
    let polls = (now - start) / POLL_SECS;
    eprintln!("phase S: {} queues, {} polls ({} days) ...", setup.queues, polls, setup.days);
    let cancel = CancellationToken::new();
    let mut ids: Vec<i64> = Vec::new();
    let mut last_written: Vec<(i64, StoredSample)> = Vec::new();
    let (mut write_secs, mut rollup_secs, mut prune_secs) = (0.0, 0.0, 0.0);
    let mut raw_rows_written: i64 = 0;
    let started = Instant::now();
    for k in 0..polls {
        let ts = start + k * POLL_SECS;
        let mut write = PollWrite { broker_id, ts, ..PollWrite::default() };
        for i in 0..setup.queues {
            let s = sample(i, k, ts, setup.busy(i), start);
            if k == 0 {
                write.upserts.push(QueueMeta {
                    vhost: "bench".into(),
                    name: format!("q{i:05}"),
                    kind: "classic".into(),
                    durable: Some(true),
                    arguments: "{}".into(),
                    policy: None,
                    effective_policy: "{}".into(),
                });
                write.new_samples.push((i as usize, s));
            } else {
                let (at, last) = last_written[i as usize];
                if last != s || ts - at >= KEYFRAME_SECS {
                    write.samples.push((ids[i as usize], s));
                    last_written[i as usize] = (ts, s);
                }
            }
            if k == 0 {
                last_written.push((ts, s));
            }
        }
        raw_rows_written += (write.samples.len() + write.new_samples.len()) as i64;
        write.broker = BrokerSample {
            ready: Some(1000),
            unacked: Some(10),
            consumers: Some(setup.queues),
            queues: setup.queues,
            publish_rate_m: Some(500_000),
            confirm_rate_m: Some(500_000),
            ack_rate_m: Some(500_000),
            deliver_rate_m: Some(500_000),
            redeliver_rate_m: Some(0),
            unroutable_rate_m: Some(0),
            poll_ms: 80,
        };
        let t = Instant::now();
        let new_ids = history::write_poll(&state.store, &write).await.expect("write_poll");
        write_secs += t.elapsed().as_secs_f64();
        if k == 0 {
            ids = new_ids;
        }
        // The retention loop: roll up every 10 virtual minutes, prune every virtual hour.
        if (k + 1) % 60 == 0 {
            let t = Instant::now();
            rollup::roll_up(&state.store, broker_id, ts + POLL_SECS, &cancel).await.expect("roll_up");
            rollup_secs += t.elapsed().as_secs_f64();
        }
        if (k + 1) % 360 == 0 {
            let t = Instant::now();
            rollup::prune(&state.store, ts + POLL_SECS, windows, &[broker_id]).await.expect("prune");
            prune_secs += t.elapsed().as_secs_f64();
        }
        if k % 8640 == 8639 {
            eprintln!("  day {} done after {:.0} s", (k + 1) / 8640, started.elapsed().as_secs_f64());
        }
    }
    let end = start + polls * POLL_SECS;
    let t = Instant::now();
    rollup::roll_up(&state.store, broker_id, end, &cancel).await.expect("roll_up");
    rollup::prune(&state.store, end, windows, &[broker_id]).await.expect("prune");
    rollup_secs += t.elapsed().as_secs_f64();
    let phase_s_secs = started.elapsed().as_secs_f64();

    let storage = measure_storage(&db, &db_path, &setup, polls, raw_rows_written).await;
    let storage_json = json!({
        "queues": setup.queues,
        "busy_percent": 100 / setup.busy_every,
        "days": setup.days,
        "polls": polls,
        "poll_interval_secs": POLL_SECS,
        "windows_secs": {"raw": windows.raw_secs, "minute": windows.minute_secs, "hour": windows.hour_secs},
        "raw_rows_written": raw_rows_written,
        "seconds": {"total": phase_s_secs, "write_poll": write_secs, "roll_up_and_final_prune": rollup_secs, "prune": prune_secs},
        "write_poll_mean_ms": write_secs * 1000.0 / polls as f64,
        "measured": storage,
    });

    // Phase C: the older days as hour roll-ups, in bulk, then chart requests.
    let chart_start = (now - setup.chart_days * 86_400).div_euclid(3600) * 3600;
    let t = Instant::now();
    bulk_hours(&db, broker_id, &ids, &setup, chart_start, start).await;
    let bulk_secs = t.elapsed().as_secs_f64();
    // Everything up to the present rolled up, as the running loop would have it.
    rollup::roll_up(&state.store, broker_id, chrono::Utc::now().timestamp(), &cancel).await.expect("roll_up");

    let busy: Vec<i64> = (0..setup.queues).filter(|&i| setup.busy(i)).collect();
    let idle: Vec<i64> = (0..setup.queues).filter(|&i| !setup.busy(i)).collect();
    let mut charts = serde_json::Map::new();
    let mut lines = Vec::new();
    for range in ["30d", "7d", "24h", "6h", "1h"] {
        for (kind, set) in [("busy", &busy), ("idle", &idle)] {
            // Fewer requests for the short ranges: they are not the target, only context.
            let n = if range == "30d" { setup.requests } else { setup.requests / 4 };
            let (times, resolution, points) = time_requests(&state, set, range, n).await;
            let s = summary(times);
            lines.push(format!(
                "  {range:>4} {kind:<4} ({resolution}, {points} points): p50 {:.2} ms, p95 {:.2} ms, max {:.2} ms (n={})",
                s["p50_ms"].as_f64().unwrap(),
                s["p95_ms"].as_f64().unwrap(),
                s["max_ms"].as_f64().unwrap(),
                s["n"]
            ));
            charts.insert(
                format!("{range}_{kind}"),
                json!({"resolution": resolution, "points": points, "server_time": s}),
            );
        }
    }
    checkpoint(&db).await;
    let chart_db_bytes = std::fs::metadata(&db_path).map(|m| m.len()).unwrap_or(0);

    let report = json!({
        "phase_s_storage": storage_json,
        "phase_c_charts": {
            "chart_days": setup.chart_days,
            "bulk_hour_rows_seconds": bulk_secs,
            "database_bytes": chart_db_bytes,
            "requests": charts,
        },
    });
    let path = report_path();
    std::fs::write(&path, serde_json::to_string_pretty(&report).unwrap()).expect("write report");

    let m = &storage_json["measured"];
    println!("warren history benchmark ({} queues, {}% busy, 10 s polls)", setup.queues, 100 / setup.busy_every);
    println!(
        "storage after {} simulated days ({} polls, through write_poll + roll_up + prune; {:.0} s, write_poll mean {:.2} ms):",
        setup.days,
        polls,
        phase_s_secs,
        storage_json["write_poll_mean_ms"].as_f64().unwrap()
    );
    println!(
        "  database {} bytes = {:.3} B per metric value observed ({} queues x {} polls x {} values)",
        m["database_bytes"],
        m["bytes_per_value_observed"].as_f64().unwrap(),
        setup.queues,
        polls,
        VALUES_PER_SAMPLE
    );
    println!(
        "  = {:.2} B per metric value stored ({} values in raw samples and roll-ups); {:.2} B per queue per poll",
        m["bytes_per_value_stored"].as_f64().unwrap(),
        m["values_stored"],
        m["bytes_per_queue_per_poll"].as_f64().unwrap()
    );
    println!(
        "  Prometheus documents 1-2 B per sample for compacted blocks (measured here: 3.0 B compacted, 6.9 B head)"
    );
    for (table, t) in m["tables"].as_object().unwrap() {
        println!(
            "  {table}: {} rows, {} bytes ({:.2} B per value)",
            t["rows"],
            t["bytes"],
            t["bytes_per_value"].as_f64().unwrap_or(f64::NAN)
        );
    }
    println!("chart requests over {} days of history (server time through the router):", setup.chart_days);
    for line in lines {
        println!("{line}");
    }
    println!("report: {}", path.display());
}

/// Moves the WAL into the database file, so the file size is the whole cost.
async fn checkpoint(db: &history::Db) {
    sqlx::query("pragma wal_checkpoint(truncate)").execute(db).await.expect("checkpoint");
}

/// Value columns per row (keys excluded) of each table that holds history.
const TABLE_VALUES: &[(&str, i64)] = &[
    ("queue_samples", VALUES_PER_SAMPLE),
    ("queue_rollups_1m", 30),
    ("queue_rollups_1h", 30),
    ("broker_samples", 11),
    ("broker_rollups_1m", 16),
    ("broker_rollups_1h", 16),
];

async fn measure_storage(db: &history::Db, path: &Path, setup: &Setup, polls: i64, raw_rows_written: i64) -> Value {
    checkpoint(db).await;
    let bytes = std::fs::metadata(path).expect("database file").len() as i64;
    let mut tables = serde_json::Map::new();
    let mut values_stored = 0;
    for &(table, per_row) in TABLE_VALUES {
        let rows: i64 = sqlx::query_scalar(&format!("select count(*) from {table}")).fetch_one(db).await.unwrap();
        let table_bytes: Option<i64> = sqlx::query_scalar("select sum(pgsize) from dbstat where name = ?")
            .bind(table)
            .fetch_one(db)
            .await
            .ok()
            .flatten();
        values_stored += rows * per_row;
        tables.insert(
            table.to_string(),
            json!({
                "rows": rows,
                "values_per_row": per_row,
                "bytes": table_bytes,
                "bytes_per_value": table_bytes.map(|b| b as f64 / (rows * per_row).max(1) as f64),
            }),
        );
    }
    let observed = setup.queues * polls * VALUES_PER_SAMPLE;
    json!({
        "database_bytes": bytes,
        "values_observed": observed,
        "values_stored": values_stored,
        "bytes_per_value_observed": bytes as f64 / observed as f64,
        "bytes_per_value_stored": bytes as f64 / values_stored as f64,
        "bytes_per_queue_per_poll": bytes as f64 / (setup.queues * polls) as f64,
        "raw_rows_written_per_queue_per_poll": raw_rows_written as f64 / (setup.queues * polls) as f64,
        "tables": tables,
    })
}

/// The hour roll-ups of `[from, to)` as the roll-up step would have written them: a row per busy
/// queue per hour, one per idle queue at its first hour, a broker row per hour.
async fn bulk_hours(db: &history::Db, broker_id: i64, ids: &[i64], setup: &Setup, from: i64, to: i64) {
    let mut tx = db.begin().await.unwrap();
    let hours = (to - from) / 3600;
    for h in 0..hours {
        let bucket = from + h * 3600;
        let mut rows: Vec<[i64; 32]> = Vec::new();
        for (i, &id) in ids.iter().enumerate() {
            let i = i as i64;
            if !setup.busy(i) && h > 0 {
                continue;
            }
            let s = sample(i, h * 360 + 359, bucket + 3590, setup.busy(i), from);
            let n = |salt| noise(i, h, salt);
            rows.push([
                id,
                bucket,
                360,
                0,
                199,
                99_000 + n(1) % 2000,
                0,
                9,
                4_500 + n(2) % 100,
                2,
                2,
                2000,
                1000 + n(3) % 50,
                1499,
                1000 + n(4) % 50,
                1499,
                1000 + n(5) % 50,
                1499,
                10 + n(6) % 10,
                100,
                59,
                s.ready.unwrap(),
                s.unacked.unwrap(),
                s.consumers.unwrap(),
                s.publish_count.unwrap(),
                s.publish_rate_m.unwrap(),
                s.deliver_rate_m.unwrap(),
                s.ack_rate_m.unwrap(),
                s.redeliver_rate_m.unwrap(),
                s.head_ts.unwrap_or(0),
                0,
                0,
            ]);
        }
        let columns: String = (0..32).map(|i| format!("value ->> {i}")).collect::<Vec<_>>().join(", ");
        sqlx::query(&format!(
            "insert into queue_rollups_1h (queue_id, bucket, samples, ready_min, ready_max, ready_avg_m, unacked_min,
               unacked_max, unacked_avg_m, consumers_min, consumers_max, consumers_avg_m, publish_rate_avg_m,
               publish_rate_max_m, deliver_rate_avg_m, deliver_rate_max_m, ack_rate_avg_m, ack_rate_max_m,
               redeliver_rate_avg_m, redeliver_rate_max_m, age_max_secs, ready, unacked, consumers, publish_count,
               publish_rate_m, deliver_rate_m, ack_rate_m, redeliver_rate_m, head_ts, est_oldest_ts, est_bound)
             select {columns} from json_each(?)"
        ))
        .bind(serde_json::to_string(&rows).unwrap())
        .execute(&mut *tx)
        .await
        .unwrap();
        sqlx::query(
            "insert into broker_rollups_1h (broker_id, bucket, samples, last_ts, ready_avg, ready_max, unacked_avg,
               unacked_max, consumers_avg, queues_last, publish_rate_avg_m, confirm_rate_avg_m, ack_rate_avg_m,
               deliver_rate_avg_m, redeliver_rate_avg_m, unroutable_rate_avg_m, poll_ms_avg, poll_ms_max)
             values (?, ?, 360, ?, 1000, 1000, 10, 10, ?, ?, 500000, 500000, 500000, 500000, 0, 0, 80, 80)",
        )
        .bind(broker_id)
        .bind(bucket)
        .bind(bucket + 3590)
        .bind(setup.queues as f64)
        .bind(setup.queues)
        .execute(&mut *tx)
        .await
        .unwrap();
    }
    tx.commit().await.unwrap();
}

/// `n` requests for the chart of `range`, over queues picked evenly from `set`: server times in
/// ms, the resolution and point count of the last answer.
async fn time_requests(state: &AppState, set: &[i64], range: &str, n: i64) -> (Vec<f64>, String, usize) {
    let router = warren::web::router(state.clone());
    let mut times = Vec::new();
    let (mut resolution, mut points) = (String::new(), 0);
    for r in 0..n.max(1) {
        let i = set[(r as usize * 7919) % set.len()];
        let uri = format!("/api/v1/queues/bench/bench/q{i:05}/history?range={range}");
        let t = Instant::now();
        let mut request = Request::get(&uri).body(Body::empty()).unwrap();
        // Without logins configured warren answers only this machine: say where the request is from.
        request.extensions_mut().insert(axum::extract::ConnectInfo(std::net::SocketAddr::from(([127, 0, 0, 1], 1))));
        let response = router.clone().oneshot(request).await.expect("router answers");
        let status = response.status();
        let body = axum::body::to_bytes(response.into_body(), usize::MAX).await.expect("body");
        times.push(t.elapsed().as_secs_f64() * 1000.0);
        assert!(status.is_success(), "{uri}: {status}");
        if r == n.max(1) - 1 {
            let v: Value = serde_json::from_slice(&body).unwrap();
            resolution = v["resolution"].as_str().unwrap_or("?").to_string();
            points = v["points"].as_array().map(|p| p.len()).unwrap_or(0);
        }
    }
    (times, resolution, points)
}
