//! `cargo bench --bench storage_scale`: the history's storage on SQLite and on PostgreSQL in one
//! run (issue 33, must-have 5): the write cost of one poll at 10,000 and 50,000 queues, the read
//! of a 30-day chart over 30 days of hour roll-ups, and retention's cost of removing a day.
//!
//! Through warren's storage interface (`warren::storage::Store`), on a new SQLite file and a new
//! database of the local PostgreSQL (`WARREN_BENCH_PG_URL`, default
//! postgres://postgres@127.0.0.1:5432/postgres: the server where it makes and drops its
//! database), each size and each backend in a database of its own.
//!
//! Writes: a first poll that adds every queue (not averaged), `WARREN_BENCH_POLLS` (30) polls
//! in which `WARREN_BENCH_BUSY_PERCENT` (10) % of the queues change (what the poller writes:
//! rows only on change), then one keyframe poll that writes every queue (the hourly keyframe).
//! Chart: `WARREN_BENCH_CHART_QUEUES` (50,000) queues, 30 days of hour roll-ups ending now (a
//! row per hour for the busy ones, one for the idle ones, as the change-only roll-up stores
//! them) and a broker poll per hour; then `WARREN_BENCH_REQUESTS` (50) reads each of a busy and an
//! idle queue's 30-day series (`history::series::queue_series`, 240 points). Then retention
//! removes the oldest day of hour rows (`prune_rollups`): dropped as a partition on
//! PostgreSQL, deleted row by row on SQLite.
//!
//! Results: stdout, and JSON to `WARREN_BENCH_JSON` or `target/bench-storage-scale.json`.

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use sqlx::Connection;
use warren::history::rollup::{Level, QueueRollup, Rate, HOUR_SECS};
use warren::history::series::{self, Resolution};
use warren::history::{self, BrokerSample, PollWrite, QueueMeta, StoredSample};
use warren::storage::rollups::Cutoffs;
use warren::storage::Store;

const POLL_SECS: i64 = 10;
const DAY_SECS: i64 = 86_400;
const CHART_DAYS: i64 = 30;

fn env_i64(name: &str, default: i64) -> i64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn report_path() -> PathBuf {
    if let Some(p) = std::env::var_os("WARREN_BENCH_JSON") {
        return PathBuf::from(p);
    }
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("target"));
    target.join("bench-storage-scale.json")
}

/// A backend with a new, empty database, removed when dropped.
struct Backend {
    name: &'static str,
    store: Store,
    _dir: Option<tempfile::TempDir>,
    database: Option<(String, String)>,
}

impl Backend {
    async fn sqlite() -> Backend {
        let dir = tempfile::tempdir().unwrap();
        let pool = history::open(&dir.path().join("warren.db")).await.unwrap();
        Backend { name: "sqlite", store: warren::storage::sqlite::store(pool), _dir: Some(dir), database: None }
    }

    async fn postgres(tag: &str) -> Backend {
        let admin = std::env::var("WARREN_BENCH_PG_URL")
            .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into());
        let database = format!("warren_bench_{tag}_{}", std::process::id());
        admin_sql(&admin, &format!("drop database if exists {database} with (force)")).await;
        admin_sql(&admin, &format!("create database {database}")).await;
        let (base, _) = admin.rsplit_once('/').expect("a URL ending in /database");
        let pool = warren::storage::postgres::open(&format!("{base}/{database}")).await.unwrap();
        Backend {
            name: "postgres",
            store: warren::storage::postgres::store(pool),
            _dir: None,
            database: Some((admin, database)),
        }
    }

    async fn size_bytes(&self) -> i64 {
        match (&self.database, &self._dir) {
            (Some((admin, database)), _) => {
                let mut conn = sqlx::PgConnection::connect(admin).await.unwrap();
                sqlx::query_scalar("select pg_database_size($1)").bind(database).fetch_one(&mut conn).await.unwrap()
            }
            (None, Some(dir)) => {
                std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().metadata().unwrap().len() as i64).sum()
            }
            (None, None) => 0,
        }
    }

    async fn close(self) {
        self.store.close().await;
        if let Some((admin, database)) = &self.database {
            admin_sql(admin, &format!("drop database if exists {database} with (force)")).await;
        }
    }
}

async fn admin_sql(url: &str, sql: &str) {
    let mut conn = sqlx::PgConnection::connect(url).await.unwrap_or_else(|e| panic!("PostgreSQL at {url}: {e}"));
    sqlx::query(sql).execute(&mut conn).await.unwrap_or_else(|e| panic!("{sql}: {e}"));
}

fn meta(i: i64) -> QueueMeta {
    QueueMeta {
        vhost: "bench".into(),
        name: format!("queue-{i:05}"),
        kind: "classic".into(),
        durable: Some(true),
        arguments: "{}".into(),
        policy: None,
        effective_policy: "{}".into(),
    }
}

fn sample(i: i64, k: i64, ts: i64) -> StoredSample {
    StoredSample {
        ready: Some((i * 7 + k * 13) % 200),
        unacked: Some((i + k) % 10),
        consumers: Some(2),
        publish_count: Some(k * 5 + i % 5),
        publish_rate_m: Some(500 + (i * 31 + k) % 1000),
        deliver_rate_m: Some(500 + (i * 17 + k) % 1000),
        ack_rate_m: Some(500 + (i * 11 + k) % 1000),
        redeliver_rate_m: Some(0),
        head_ts: Some(ts - (i + k) % 60),
        est_oldest_ts: None,
        est_bound: None,
    }
}

fn poll(broker_id: i64, ts: i64) -> PollWrite {
    PollWrite {
        broker_id,
        ts,
        broker: BrokerSample { poll_ms: 100, queues: 0, ..BrokerSample::default() },
        ..PollWrite::default()
    }
}

fn ms(d: Duration) -> f64 {
    (d.as_secs_f64() * 1e6).round() / 1e3
}

fn stats(mut times: Vec<f64>) -> Value {
    times.sort_by(f64::total_cmp);
    let mean = times.iter().sum::<f64>() / times.len() as f64;
    json!({
        "n": times.len(),
        "mean_ms": (mean * 10.0).round() / 10.0,
        "median_ms": times[times.len() / 2],
        "p90_ms": times[(times.len() * 9 / 10).min(times.len() - 1)],
    })
}

/// One size on one backend: the first poll, the steady polls, the keyframe.
async fn writes(backend: &Backend, queues: i64, polls: i64, busy_percent: i64, now: i64) -> Value {
    let store = &backend.store;
    store.prepare_partitions(now).await.unwrap();
    let broker_id = history::broker_id(store, "bench").await.unwrap();
    let start = now - (polls + 2) * POLL_SECS;
    let mut first = poll(broker_id, start);
    for i in 0..queues {
        first.upserts.push(meta(i));
        first.new_samples.push((i as usize, sample(i, 0, start)));
    }
    let t = Instant::now();
    let ids = history::write_poll(store, &first).await.unwrap();
    let first_ms = ms(t.elapsed());
    let busy = queues * busy_percent / 100;
    let mut steady = Vec::new();
    for k in 1..=polls {
        let ts = start + k * POLL_SECS;
        let mut write = poll(broker_id, ts);
        write.samples = (0..busy).map(|i| (ids[i as usize], sample(i, k, ts))).collect();
        let t = Instant::now();
        history::write_poll(store, &write).await.unwrap();
        steady.push(ms(t.elapsed()));
    }
    let ts = start + (polls + 1) * POLL_SECS;
    let mut keyframe = poll(broker_id, ts);
    keyframe.samples = (0..queues).map(|i| (ids[i as usize], sample(i, polls + 1, ts))).collect();
    let t = Instant::now();
    history::write_poll(store, &keyframe).await.unwrap();
    let keyframe_ms = ms(t.elapsed());
    eprintln!(
        "{} {queues} queues: first {first_ms} ms, steady {:?}, keyframe {keyframe_ms} ms",
        backend.name,
        stats(steady.clone())
    );
    json!({
        "queues": queues,
        "busy_queues": busy,
        "first_poll_ms": first_ms,
        "steady_poll": stats(steady),
        "keyframe_poll_ms": keyframe_ms,
    })
}

fn hour_rollup(i: i64, h: i64) -> QueueRollup {
    let s = sample(i, h, h * HOUR_SECS);
    let gauge =
        |v: Option<i64>| warren::history::rollup::Gauge { min: v, max: v.map(|v| v + 5), avg_m: v.map(|v| v * 1000) };
    QueueRollup {
        samples: 360,
        ready: gauge(s.ready),
        unacked: gauge(s.unacked),
        consumers: gauge(s.consumers),
        publish_rate: Rate { avg_m: s.publish_rate_m, max_m: s.publish_rate_m.map(|r| r + 100) },
        deliver_rate: Rate { avg_m: s.deliver_rate_m, max_m: s.deliver_rate_m },
        ack_rate: Rate { avg_m: s.ack_rate_m, max_m: s.ack_rate_m },
        redeliver_rate: Rate { avg_m: Some(0), max_m: Some(0) },
        age_max_secs: Some(30),
        last: s,
    }
}

/// 30 days of hour roll-ups, then chart reads, then the retention of the oldest day.
async fn chart(backend: &Backend, queues: i64, busy_percent: i64, requests: i64, now: i64) -> Value {
    let store = &backend.store;
    let end = now.div_euclid(HOUR_SECS) * HOUR_SECS;
    let start = end - CHART_DAYS * DAY_SECS;
    // Partitions for every day of the history, as a warren running 30 days would have made them.
    for day in 0..=CHART_DAYS {
        store.prepare_partitions(start + day * DAY_SECS).await.unwrap();
    }
    let broker_id = history::broker_id(store, "chart").await.unwrap();
    let mut first = poll(broker_id, start);
    for i in 0..queues {
        first.upserts.push(meta(i));
        first.new_samples.push((i as usize, sample(i, 0, start)));
    }
    let ids = history::write_poll(store, &first).await.unwrap();
    let busy = queues * busy_percent / 100;
    let t = Instant::now();
    let mut rows_written = 0;
    let mut h = start;
    while h < end {
        if h > start {
            history::write_poll(store, &poll(broker_id, h)).await.unwrap();
        }
        let rows: Vec<(i64, i64, QueueRollup)> = if h == start {
            (0..queues).map(|i| (ids[i as usize], h, hour_rollup(i, h / HOUR_SECS))).collect()
        } else {
            (0..busy).map(|i| (ids[i as usize], h, hour_rollup(i, h / HOUR_SECS))).collect()
        };
        rows_written += rows.len();
        store.save_rollups(broker_id, Level::Hour, h, h + HOUR_SECS, &rows).await.unwrap();
        h += HOUR_SECS;
    }
    // The minutes are rolled up to the end too (none stored: the chart reads hours).
    store.save_rollups(broker_id, Level::Minute, end - 60, end, &[]).await.unwrap();
    let generate_secs = t.elapsed().as_secs_f64();
    let size = backend.size_bytes().await;
    eprintln!("{}: {rows_written} hour rows in {generate_secs:.0} s, {} MB", backend.name, size / 1_000_000);

    let step = Resolution::Hour.step(CHART_DAYS * DAY_SECS / 240);
    let read = |queue_id: i64| async move {
        let mut times = Vec::new();
        let mut points = 0;
        for _ in 0..requests {
            let t = Instant::now();
            let series = series::queue_series(
                store,
                broker_id,
                queue_id,
                None,
                Resolution::Hour,
                start,
                end - 1,
                step,
                POLL_SECS,
            )
            .await
            .unwrap();
            times.push(ms(t.elapsed()));
            points = series.len();
        }
        (stats(times), points)
    };
    let (busy_read, points) = read(ids[0]).await;
    let (idle_read, _) = read(ids[(queues - 1) as usize]).await;

    // Retention's removal of the oldest day of hour rows (each queue's row in force kept).
    let t = Instant::now();
    let removed = store
        .prune_rollups(Cutoffs { minute: start, hour: start.div_euclid(DAY_SECS) * DAY_SECS + 2 * DAY_SECS })
        .await
        .unwrap();
    let prune_ms = ms(t.elapsed());
    eprintln!("{}: chart busy {busy_read} idle {idle_read}; pruned {removed} rows in {prune_ms} ms", backend.name);
    json!({
        "queues": queues,
        "busy_queues": busy,
        "hour_rows": rows_written,
        "generate_secs": (generate_secs * 10.0).round() / 10.0,
        "database_mb": size / 1_000_000,
        "points": points,
        "busy_queue_chart": busy_read,
        "idle_queue_chart": idle_read,
        "prune_oldest_day": { "rows": removed, "ms": prune_ms },
    })
}

#[tokio::main]
async fn main() {
    let sizes: Vec<i64> = std::env::var("WARREN_BENCH_QUEUES")
        .unwrap_or_else(|_| "10000,50000".into())
        .split(',')
        .map(|s| s.trim().parse().expect("WARREN_BENCH_QUEUES: numbers"))
        .collect();
    let polls = env_i64("WARREN_BENCH_POLLS", 30);
    let busy_percent = env_i64("WARREN_BENCH_BUSY_PERCENT", 10);
    let chart_queues = env_i64("WARREN_BENCH_CHART_QUEUES", 50_000);
    let requests = env_i64("WARREN_BENCH_REQUESTS", 50);
    let now = chrono::Utc::now().timestamp();

    let mut report = json!({ "cores": std::thread::available_parallelism().map_or(0, |n| n.get()) });
    for &queues in &sizes {
        for postgres in [false, true] {
            let backend = if postgres { Backend::postgres("writes").await } else { Backend::sqlite().await };
            let result = writes(&backend, queues, polls, busy_percent, now).await;
            report["writes"][backend.name][queues.to_string()] = result;
            backend.close().await;
        }
    }
    if chart_queues > 0 {
        for postgres in [false, true] {
            let backend = if postgres { Backend::postgres("chart").await } else { Backend::sqlite().await };
            report["chart"][backend.name] = chart(&backend, chart_queues, busy_percent, requests, now).await;
            backend.close().await;
        }
    }

    println!("write cost per poll (ms; steady: {busy_percent}% of the queues changed, keyframe: all):");
    for &queues in &sizes {
        let w = &report["writes"];
        let (s, p) = (&w["sqlite"][queues.to_string()], &w["postgres"][queues.to_string()]);
        println!(
            "  {queues:>6} queues  sqlite: first {} steady median {} keyframe {} | postgres: first {} steady median {} keyframe {}",
            s["first_poll_ms"], s["steady_poll"]["median_ms"], s["keyframe_poll_ms"],
            p["first_poll_ms"], p["steady_poll"]["median_ms"], p["keyframe_poll_ms"]
        );
    }
    if chart_queues > 0 {
        for name in ["sqlite", "postgres"] {
            let c = &report["chart"][name];
            println!(
                "  30-day chart, {name}: {} hour rows ({} MB), busy queue median {} ms, idle {} ms; oldest day pruned in {} ms",
                c["hour_rows"], c["database_mb"], c["busy_queue_chart"]["median_ms"], c["idle_queue_chart"]["median_ms"],
                c["prune_oldest_day"]["ms"]
            );
        }
    }
    let path = report_path();
    std::fs::write(&path, serde_json::to_string_pretty(&report).unwrap()).unwrap();
    println!("full report: {}", path.display());
}
