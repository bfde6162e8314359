//! `cargo bench --bench poll`: what one poll of 10,000 and of 50,000 queues costs warren (CPU,
//! and the memory of the process holding them with 30 days of history in its database), and what
//! their history costs on disk. See benches/README.md for how to read the output.
//!
//! One measuring process per size (this binary re-executed with `WARREN_BENCH_MEASURE=1`), so
//! that each size's memory figures are its own. Each runs:
//!
//! - **History.** A child process (`WARREN_BENCH_SEED=path`) writes `WARREN_BENCH_HISTORY_DAYS`
//!   days of rows for every queue into the database first (see `seed_history`).
//! - **A, the real poller.** A synthetic management API (3.10 shapes, `columns=`, pages of 500,
//!   gzip) runs in a *child process* (`WARREN_BENCH_SERVE=1`), so the measuring process's CPU
//!   time is warren's alone. It calls `Poller::poll_once` back to back and records wall and
//!   process CPU time per poll (`CLOCK_PROCESS_CPUTIME_ID`, all threads), then VmRSS and VmHWM.
//! - **B, storage at a 10 s poll interval.** `poll_once` stamps rows with the wall clock (unix
//!   seconds) and takes rates against `Instant`s, so back-to-back polls land 10-20 in the same
//!   second: `insert or replace` collapses them and rates stay unknown. Phase A's database therefore
//!   says little about disk cost. Phase B feeds the same synthetic data through warren's public
//!   derive functions (`metrics::queue_view`) and writer (`history::write_poll`) with virtual
//!   timestamps 10 s apart, mirroring `Poller::derive`'s change-only rule and keyframes
//!   (`poller::keyframe_due`), and measures a fresh database after `WARREN_BENCH_STORAGE_POLLS`.
//!
//! Environment: WARREN_BENCH_QUEUES (10000,50000: one size or a list), WARREN_BENCH_POLLS (300),
//! WARREN_BENCH_BUSY_PERCENT (10), WARREN_BENCH_NO_TS_PERCENT (0: share of queues whose messages
//! carry no timestamp, so warren estimates their age from history), WARREN_BENCH_HISTORY_DAYS
//! (30; 0: start on an empty database), WARREN_BENCH_HISTORY_BUSY_STEP (300 s),
//! WARREN_BENCH_STORAGE (1; 0 skips phase B), WARREN_BENCH_STORAGE_POLLS (720), WARREN_BENCH_GZIP
//! (1), WARREN_BENCH_PROMETHEUS (0; 1: the synthetic broker also serves `/metrics/detailed` and
//! warren reads depth from it, listing queues only as its broker CPU budget allows),
//! WARREN_BENCH_JSON (report path; default `$CARGO_TARGET_DIR` or `target/`, file
//! `bench-poll.json`, and `bench-poll-{queues}.json` per size beside it).

// The same allocator as the warren binary (src/main.rs), so the figures are the product's.
// Wrapped to count the bytes the process has allocated and not freed: RSS says what the
// operating system sees, the count says how much of it is warren's live data (the rest is the
// allocator's free pages, SQLite's page cache and the binary).
#[global_allocator]
static ALLOCATOR: Counting = Counting;

struct Counting;

static HEAP_LIVE: AtomicU64 = AtomicU64::new(0);
static HEAP_PEAK: AtomicU64 = AtomicU64::new(0);

unsafe impl std::alloc::GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: std::alloc::Layout) -> *mut u8 {
        let p = unsafe { mimalloc::MiMalloc.alloc(layout) };
        if !p.is_null() {
            let now = HEAP_LIVE.fetch_add(layout.size() as u64, Ordering::Relaxed) + layout.size() as u64;
            HEAP_PEAK.fetch_max(now, Ordering::Relaxed);
        }
        p
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: std::alloc::Layout) {
        unsafe { mimalloc::MiMalloc.dealloc(ptr, layout) };
        HEAP_LIVE.fetch_sub(layout.size() as u64, Ordering::Relaxed);
    }
    unsafe fn alloc_zeroed(&self, layout: std::alloc::Layout) -> *mut u8 {
        let p = unsafe { mimalloc::MiMalloc.alloc_zeroed(layout) };
        if !p.is_null() {
            let now = HEAP_LIVE.fetch_add(layout.size() as u64, Ordering::Relaxed) + layout.size() as u64;
            HEAP_PEAK.fetch_max(now, Ordering::Relaxed);
        }
        p
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: std::alloc::Layout, new_size: usize) -> *mut u8 {
        let p = unsafe { mimalloc::MiMalloc.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            if new_size >= layout.size() {
                let grown = (new_size - layout.size()) as u64;
                let now = HEAP_LIVE.fetch_add(grown, Ordering::Relaxed) + grown;
                HEAP_PEAK.fetch_max(now, Ordering::Relaxed);
            } else {
                HEAP_LIVE.fetch_sub((layout.size() - new_size) as u64, Ordering::Relaxed);
            }
        }
        p
    }
}

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use axum::extract::{Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use chrono::DateTime;
use serde_json::{json, Value};

use warren::broker::management::{QueuePage, RawQueue};
use warren::config::Config;
use warren::history::{self, PollWrite, QueueMeta, StoredSample};
use warren::live::Live;
use warren::metrics::{self, rate_to_milli, QueueCounters};
use warren::poller::{keyframe_due, Poller, KEYFRAME_SECS};

const SERVE_ENV: &str = "WARREN_BENCH_SERVE";
/// Set in the child that measures one size (one process per size, so that its memory is its own).
const MEASURE_ENV: &str = "WARREN_BENCH_MEASURE";
/// Set (to the database path) in the child that writes the synthetic history.
const SEED_ENV: &str = "WARREN_BENCH_SEED";
const VHOST: &str = "bench";
const BROKER: &str = "bench";
/// Virtual seconds between two polls (warren's default poll interval).
const INTERVAL: i64 = 10;

fn env_num(key: &str, default: u64) -> u64 {
    match std::env::var(key) {
        Ok(v) if !v.trim().is_empty() => {
            v.trim().parse().unwrap_or_else(|_| panic!("{key}={v:?} is not a whole number"))
        }
        _ => default,
    }
}

#[derive(Clone, Copy)]
struct Settings {
    /// Queues of this process's run (the first of `WARREN_BENCH_QUEUES`).
    queues: usize,
    polls: usize,
    busy_percent: u64,
    no_ts_percent: u64,
    storage: bool,
    gzip: bool,
    /// Days of synthetic history in the database before phase A (0: an empty database).
    history_days: u64,
    /// Seconds between two synthetic history rows of a busy queue.
    history_busy_step: u64,
    /// Polls of phase B (virtual 10 s apart): at least two hours, so that keyframes show.
    storage_polls: usize,
    /// Serve `/metrics/detailed` and configure warren to use it.
    prometheus: bool,
}

/// `WARREN_BENCH_QUEUES`: one size or a comma-separated list.
fn sizes_from_env() -> Vec<usize> {
    let text = std::env::var("WARREN_BENCH_QUEUES").unwrap_or_default();
    let text = if text.trim().is_empty() { "10000,50000".to_string() } else { text };
    text.split(',')
        .map(|v| v.trim().parse().unwrap_or_else(|_| panic!("WARREN_BENCH_QUEUES: {v:?} is not a whole number")))
        .collect()
}

impl Settings {
    fn from_env() -> Settings {
        let s = Settings {
            queues: sizes_from_env()[0],
            polls: env_num("WARREN_BENCH_POLLS", 300) as usize,
            busy_percent: env_num("WARREN_BENCH_BUSY_PERCENT", 10),
            no_ts_percent: env_num("WARREN_BENCH_NO_TS_PERCENT", 0),
            storage: env_num("WARREN_BENCH_STORAGE", 1) != 0,
            gzip: env_num("WARREN_BENCH_GZIP", 1) != 0,
            history_days: env_num("WARREN_BENCH_HISTORY_DAYS", 30),
            history_busy_step: env_num("WARREN_BENCH_HISTORY_BUSY_STEP", 300).max(INTERVAL as u64),
            storage_polls: env_num("WARREN_BENCH_STORAGE_POLLS", 720) as usize,
            prometheus: env_num("WARREN_BENCH_PROMETHEUS", 0) != 0,
        };
        assert!(
            s.queues >= 2 && s.polls >= 2 && s.storage_polls >= 2 && s.busy_percent <= 100 && s.no_ts_percent <= 100,
            "bad settings"
        );
        s
    }
}

fn main() {
    // As warren's own main does; WARREN_BENCH_PURGE_DELAY_DEFAULT=1 keeps mimalloc's default, for A/B.
    if std::env::var_os("WARREN_BENCH_PURGE_DELAY_DEFAULT").is_none() {
        warren::memory::purge_freed_pages_at_once();
    }
    let settings = Settings::from_env();
    let runtime = tokio::runtime::Runtime::new().expect("tokio runtime");
    if std::env::var_os(SERVE_ENV).is_some() {
        runtime.block_on(serve(settings));
    } else if let Some(path) = std::env::var_os(SEED_ENV) {
        runtime.block_on(seed_history(&settings, Path::new(&path)));
    } else if std::env::var_os(MEASURE_ENV).is_some() {
        runtime.block_on(bench(settings));
    } else {
        drop(runtime);
        orchestrate(&sizes_from_env());
    }
}

/// Runs one measuring child per size, then merges their reports and prints the comparison.
fn orchestrate(sizes: &[usize]) {
    let path = report_path();
    let mut by_size = serde_json::Map::new();
    for &size in sizes {
        let child_path = path.with_file_name(format!("bench-poll-{size}.json"));
        let status = Command::new(std::env::current_exe().expect("current exe"))
            .env(MEASURE_ENV, "1")
            .env("WARREN_BENCH_QUEUES", size.to_string())
            .env("WARREN_BENCH_JSON", &child_path)
            .status()
            .expect("run the measuring child");
        assert!(status.success(), "the run with {size} queues failed: {status}");
        let text = std::fs::read_to_string(&child_path).expect("child report");
        by_size.insert(size.to_string(), serde_json::from_str(&text).expect("child report is JSON"));
    }
    println!("\nSummary (one process per size; CPU = all threads of warren's process)");
    println!(
        "  {:>7} {:>26} {:>12} {:>11} {:>11} {:>14}",
        "queues", "CPU ms/poll p50 / p95", "mean", "projected", "VmRSS MB", "VmHWM MB"
    );
    for (size, r) in &by_size {
        let a = &r["phase_a_poller"];
        let cpu = &a["all_after_first"]["cpu_ms"];
        println!(
            "  {size:>7} {:>12.1} / {:>11.1} {:>12.1} {:>11} {:>11.1} {:>14.1}",
            cpu["p50"].as_f64().unwrap_or(f64::NAN),
            cpu["p95"].as_f64().unwrap_or(f64::NAN),
            cpu["mean"].as_f64().unwrap_or(f64::NAN),
            a["projected_mean_cpu_ms_per_poll_at_10s_interval"].as_f64().map_or("n/a".into(), |v| format!("{v:.1}")),
            a["memory"]["after_polls"]["vm_rss_kb"].as_f64().unwrap_or(f64::NAN) / 1024.0,
            a["memory"]["after_polls"]["vm_hwm_kb"].as_f64().unwrap_or(f64::NAN) / 1024.0,
        );
    }
    std::fs::write(&path, serde_json::to_string_pretty(&json!({"sizes": by_size})).unwrap()).expect("write report");
    println!("\nreport: {} (one file per size beside it)", path.display());
}

// ---------------------------------------------------------------------------------------------
// The synthetic broker: deterministic queue states as a function of (queue, poll step).

/// splitmix64: a cheap deterministic hash.
fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

struct QueueDef {
    name: String,
    busy: bool,
    seed: u64,
    /// Busy queues: messages published per poll interval (>= 10).
    inc: u64,
    consumers: u64,
    arguments: &'static str,
    policy: Option<&'static str>,
    effective_policy: &'static str,
    /// Idle queues: constant depth (0 for most).
    idle_depth: u64,
    /// Messages carry no timestamp: the broker gives no `head_message_timestamp`.
    no_ts: bool,
}

/// Every sixth queue dead-letters to the fanout exchange `dlx`, which is bound to this queue.
const DLQ: &str = "q1";

struct QueueState {
    ready: u64,
    unacked: u64,
    consumers: u64,
    head_ts: Option<i64>,
    /// publish, deliver_get, ack, redeliver; `None`: the queue never saw a message.
    stats: Option<[u64; 4]>,
}

struct Model {
    /// In listing order (sorted by name, as the management API sorts).
    queues: Vec<QueueDef>,
    t0: i64,
    sum_p0: u64,
    sum_inc: u64,
}

impl Model {
    fn new(s: &Settings, t0: i64) -> Model {
        let mut queues: Vec<QueueDef> = (0..s.queues as u64)
            .map(|i| {
                let seed = mix(i);
                // Exactly busy_percent of the queues, spread evenly.
                let busy = (i + 1) * s.busy_percent / 100 != i * s.busy_percent / 100;
                // Rates from 1 to ~200 msg/s, most of them low.
                let rate = 1 + (seed % 1000) * (seed % 1000) / 5000;
                let (arguments, policy, effective_policy) = match seed % 6 {
                    0 | 1 => ("{}", None, "{}"),
                    2 => (r#"{"x-queue-type":"classic"}"#, None, "{}"),
                    3 => (
                        r#"{"x-dead-letter-exchange":"dlx","x-queue-type":"classic"}"#,
                        Some("limits"),
                        r#"{"max-length":100000,"overflow":"reject-publish"}"#,
                    ),
                    _ => ("{}", Some("ttl"), r#"{"message-ttl":86400000,"queue-mode":"lazy"}"#),
                };
                QueueDef {
                    name: format!("q{i}"),
                    busy,
                    seed,
                    inc: rate * INTERVAL as u64,
                    consumers: if busy { 1 + seed % 4 } else { (seed >> 8) % 2 },
                    arguments,
                    policy,
                    effective_policy,
                    idle_depth: if (seed >> 16) % 10 < 3 { 1 + (seed >> 20) % 500 } else { 0 },
                    no_ts: (seed >> 32) % 100 < s.no_ts_percent,
                }
            })
            .collect();
        queues.sort_by(|a, b| a.name.cmp(&b.name));
        let busy = queues.iter().filter(|q| q.busy);
        let sum_inc = busy.clone().map(|q| q.inc).sum();
        let sum_p0 = busy.map(|q| q.inc + q.seed % 1_000_000).sum();
        Model { queues, t0, sum_p0, sum_inc }
    }

    /// A queue at poll `step` (10 s steps); `now` (unix seconds) anchors head-message timestamps.
    fn state(&self, q: &QueueDef, step: u64, now: i64) -> QueueState {
        if !q.busy {
            let n = q.idle_depth;
            return QueueState {
                ready: n,
                unacked: 0,
                consumers: q.consumers,
                head_ts: (n > 0 && !q.no_ts).then(|| self.t0 - (q.seed % 86_400) as i64),
                stats: (n > 0).then_some([n, 0, 0, 0]),
            };
        }
        // published = p0 + inc x step; ready and unacked stay within inc/2 each, so every
        // cumulative counter grows monotonically.
        let p = q.inc + q.seed % 1_000_000 + q.inc * step;
        let h = mix(q.seed ^ step.wrapping_mul(0x1000_0001));
        let ready = h % (q.inc / 2 + 1);
        let unacked = (h >> 20) % ((q.inc / 2).min(50 * q.consumers) + 1);
        let deliver = p - ready;
        let ack = deliver - unacked;
        QueueState {
            ready,
            unacked,
            consumers: q.consumers,
            head_ts: (ready + unacked > 0 && !q.no_ts).then(|| now - ((h >> 40) % 60) as i64),
            stats: Some([p, deliver, ack, deliver / 200]),
        }
    }

    /// One queue object with the columns warren asks for, keys sorted as the API sorts them.
    fn render_queue(&self, out: &mut String, q: &QueueDef, step: u64, now: i64) {
        use std::fmt::Write as _;
        let s = self.state(q, step, now);
        let head = match s.head_ts {
            Some(ts) => ts.to_string(),
            None => "null".into(),
        };
        let stats = match s.stats {
            Some([p, d, a, r]) if q.busy => {
                format!(r#""message_stats":{{"ack":{a},"deliver_get":{d},"publish":{p},"redeliver":{r}}},"#)
            }
            Some([p, ..]) => format!(r#""message_stats":{{"publish":{p}}},"#),
            None => String::new(),
        };
        let policy = match q.policy {
            Some(p) => format!("\"{p}\""),
            None => "null".into(),
        };
        let _ = write!(
            out,
            r#"{{"arguments":{},"consumers":{},"durable":true,"effective_policy_definition":{},"head_message_timestamp":{head},{stats}"messages":{},"messages_ready":{},"messages_unacknowledged":{},"name":"{}","policy":{policy},"state":"running","type":"classic","vhost":"{VHOST}"}}"#,
            q.arguments,
            s.consumers,
            q.effective_policy,
            s.ready + s.unacked,
            s.ready,
            s.unacked,
            q.name,
        );
    }

    fn page_count(&self, page_size: usize) -> usize {
        self.queues.len().div_ceil(page_size)
    }

    /// The paginated envelope of `/api/queues/{vhost}?page=&page_size=`. `idle` holds
    /// pre-rendered idle queues (they never change), so only busy ones are rendered per call.
    fn render_page(&self, page: usize, page_size: usize, step: u64, now: i64, idle: &[String]) -> String {
        let start = (page - 1) * page_size;
        let end = (start + page_size).min(self.queues.len());
        let mut out = String::with_capacity((end - start) * 400 + 200);
        out.push_str(r#"{"items":["#);
        for (i, (q, idle_json)) in self.queues[start..end].iter().zip(&idle[start..end]).enumerate() {
            if i > 0 {
                out.push(',');
            }
            if q.busy {
                self.render_queue(&mut out, q, step, now);
            } else {
                out.push_str(idle_json);
            }
        }
        let n = self.queues.len();
        out.push_str(&format!(
            r#"],"page":{page},"page_count":{},"page_size":{page_size},"total_count":{n},"filtered_count":{n},"item_count":{}}}"#,
            self.page_count(page_size),
            end - start
        ));
        out
    }

    fn render_idle(&self) -> Vec<String> {
        self.queues
            .iter()
            .map(|q| {
                let mut s = String::new();
                if !q.busy {
                    self.render_queue(&mut s, q, 0, self.t0);
                }
                s
            })
            .collect()
    }

    /// Broker-wide (and, with one vhost, per-vhost) cumulative counters.
    fn message_stats(&self, step: u64) -> Value {
        let publish = self.sum_p0 + self.sum_inc * step;
        let deliver = publish - publish / 100;
        let ack = deliver - deliver / 100;
        json!({"publish": publish, "confirm": publish, "deliver_get": deliver, "ack": ack,
            "redeliver": deliver / 200, "return_unroutable": 0, "drop_unroutable": 0})
    }

    fn render_overview(&self, step: u64) -> String {
        let publish = self.sum_p0 + self.sum_inc * step;
        let n = self.queues.len();
        json!({
            "management_version": "3.10.8", "rabbitmq_version": "3.10.8",
            "cluster_name": "rabbit@bench", "disable_stats": false, "enable_queue_totals": false,
            "message_stats": self.message_stats(step),
            "queue_totals": {"messages": publish / 100, "messages_ready": publish / 200,
                "messages_unacknowledged": publish / 200},
            "object_totals": {"queues": n, "consumers": n / 2, "connections": 40, "channels": 80,
                "exchanges": 14},
        })
        .to_string()
    }

    /// `/api/bindings/{vhost}`: the implicit default-exchange binding of every queue (the API
    /// lists them), `dlx` to the DLQ, and a topic exchange to every busy queue.
    fn render_bindings(&self) -> String {
        let binding = |source: &str, queue: &str, key: &str| json!({"source": source, "destination": queue, "destination_type": "queue", "routing_key": key});
        let mut list: Vec<Value> = self.queues.iter().map(|q| binding("", &q.name, &q.name)).collect();
        list.push(binding("dlx", DLQ, ""));
        list.extend(
            self.queues.iter().filter(|q| q.busy).map(|q| binding("events", &q.name, &format!("app.{}.#", q.name))),
        );
        Value::Array(list).to_string()
    }

    fn render_exchanges() -> String {
        let names = [
            ("", "direct"),
            ("amq.direct", "direct"),
            ("amq.fanout", "fanout"),
            ("amq.headers", "headers"),
            ("amq.match", "headers"),
            ("amq.rabbitmq.trace", "topic"),
            ("amq.topic", "topic"),
            ("dlx", "fanout"),
            ("events", "topic"),
        ];
        Value::Array(names.iter().map(|(n, t)| json!({"name": n, "type": t})).collect()).to_string()
    }
}

// ---------------------------------------------------------------------------------------------
// The child process: serves the model over HTTP; one `/api/overview` call = one poll step.

struct Server {
    model: Model,
    idle: Vec<String>,
    bindings: String,
    step: AtomicU64,
    gzip: bool,
}

async fn serve(settings: Settings) {
    let t0: i64 = std::env::var("WARREN_BENCH_T0")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| chrono::Utc::now().timestamp());
    let model = Model::new(&settings, t0);
    let idle = model.render_idle();
    let bindings_json = model.render_bindings();
    let server =
        Arc::new(Server { model, idle, bindings: bindings_json, step: AtomicU64::new(0), gzip: settings.gzip });
    let app = Router::new()
        .route("/api/overview", get(overview))
        .route("/api/vhosts", get(vhosts))
        .route("/api/queues/{vhost}", get(queues))
        .route("/api/bindings/{vhost}", get(bindings))
        .route("/api/exchanges/{vhost}", get(exchanges))
        .route("/metrics/detailed", get(metrics))
        .with_state(server);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    println!("listening {}", listener.local_addr().unwrap());
    std::io::stdout().flush().unwrap();
    // Exit when the parent closes our stdin (or dies).
    std::thread::spawn(|| {
        let mut sink = Vec::new();
        let _ = std::io::stdin().read_to_end(&mut sink);
        std::process::exit(0);
    });
    axum::serve(listener, app).await.expect("serve");
}

fn reply(server: &Server, headers: &HeaderMap, body: String) -> Response {
    let accepts_gzip =
        headers.get(header::ACCEPT_ENCODING).and_then(|v| v.to_str().ok()).is_some_and(|v| v.contains("gzip"));
    if server.gzip && accepts_gzip {
        let mut enc = flate2::write::GzEncoder::new(Vec::with_capacity(body.len() / 8), flate2::Compression::fast());
        enc.write_all(body.as_bytes()).unwrap();
        let bytes = enc.finish().unwrap();
        ([(header::CONTENT_TYPE, "application/json"), (header::CONTENT_ENCODING, "gzip")], bytes).into_response()
    } else {
        ([(header::CONTENT_TYPE, "application/json")], body).into_response()
    }
}

async fn overview(State(server): State<Arc<Server>>, headers: HeaderMap) -> Response {
    let step = server.step.fetch_add(1, Ordering::SeqCst) + 1;
    reply(&server, &headers, server.model.render_overview(step))
}

async fn vhosts(State(server): State<Arc<Server>>, headers: HeaderMap) -> Response {
    let step = server.step.load(Ordering::SeqCst);
    let body = json!([{"name": VHOST, "message_stats": server.model.message_stats(step)}]);
    reply(&server, &headers, body.to_string())
}

/// The plugin's per-queue depth and consumers (`family=queue_coarse_metrics` and
/// `queue_consumer_count`), as RabbitMQ 3.10 writes them, at the current step.
async fn metrics(State(server): State<Arc<Server>>, headers: HeaderMap) -> Response {
    use std::fmt::Write as _;
    let step = server.step.load(Ordering::SeqCst);
    let now = chrono::Utc::now().timestamp();
    let model = &server.model;
    let mut out = String::with_capacity(model.queues.len() * 300);
    // Which broker answers: warren uses no number of an endpoint that does not say it is the
    // management API's cluster.
    out.push_str("rabbitmq_identity_info{rabbitmq_node=\"rabbit@bench\",rabbitmq_cluster=\"rabbit@bench\"} 1\n");
    for (family, pick) in
        [("queue_messages_ready", 0), ("queue_messages_unacked", 1), ("queue_messages", 2), ("queue_consumers", 3)]
    {
        let _ = writeln!(out, "# TYPE rabbitmq_detailed_{family} gauge");
        for q in &model.queues {
            let s = model.state(q, step, now);
            let value = [s.ready, s.unacked, s.ready + s.unacked, s.consumers][pick];
            let _ = writeln!(out, "rabbitmq_detailed_{family}{{vhost=\"{VHOST}\",queue=\"{}\"}} {value}", q.name);
        }
    }
    reply(&server, &headers, out)
}

fn not_found() -> Response {
    (StatusCode::NOT_FOUND, r#"{"error":"Object Not Found","reason":"Not Found"}"#).into_response()
}

async fn bindings(
    State(server): State<Arc<Server>>,
    axum::extract::Path(vhost): axum::extract::Path<String>,
    headers: HeaderMap,
) -> Response {
    if vhost != VHOST {
        return not_found();
    }
    reply(&server, &headers, server.bindings.clone())
}

async fn exchanges(
    State(server): State<Arc<Server>>,
    axum::extract::Path(vhost): axum::extract::Path<String>,
    headers: HeaderMap,
) -> Response {
    if vhost != VHOST {
        return not_found();
    }
    reply(&server, &headers, Model::render_exchanges())
}

async fn queues(
    State(server): State<Arc<Server>>,
    axum::extract::Path(vhost): axum::extract::Path<String>,
    Query(query): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> Response {
    if vhost != VHOST {
        return not_found();
    }
    let num = |k: &str, d: usize| query.get(k).and_then(|v| v.parse().ok()).unwrap_or(d);
    let (page, page_size) = (num("page", 1), num("page_size", 100));
    if page == 0 || page_size == 0 || page_size > 500 || page > server.model.page_count(page_size) {
        return (StatusCode::BAD_REQUEST, r#"{"error":"bad_request","reason":"page_out_of_range"}"#).into_response();
    }
    let step = server.step.load(Ordering::SeqCst);
    // Head timestamps follow the wall clock: polls come faster than the 10 s steps, and warren
    // distrusts timestamps in the future.
    let now = chrono::Utc::now().timestamp();
    let body = server.model.render_page(page, page_size, step, now, &server.idle);
    reply(&server, &headers, body)
}

// ---------------------------------------------------------------------------------------------
// Synthetic history: `history_days` of rows before t0, written by a child process straight into
// the database file, so that the measuring process starts on a database the size of a long-running
// warren's without carrying the writer's memory.

/// Writes the history in a child process; returns (rows, seconds).
fn seed_in_child(settings: &Settings, path: &Path, t0: i64) -> (u64, f64) {
    let started = Instant::now();
    let output = Command::new(std::env::current_exe().expect("current exe"))
        .env(SEED_ENV, path)
        .env("WARREN_BENCH_QUEUES", settings.queues.to_string())
        .env("WARREN_BENCH_T0", t0.to_string())
        .stderr(Stdio::inherit())
        .output()
        .expect("run the history writer");
    assert!(output.status.success(), "the history writer failed: {}", output.status);
    let rows = String::from_utf8_lossy(&output.stdout).trim().parse().expect("row count");
    (rows, started.elapsed().as_secs_f64())
}

/// The child's work: queue rows exactly as the poller would write them for the model's queues,
/// then per queue one row per hour (an idle queue's keyframe) or per `history_busy_step` (a busy
/// queue), from `history_days` days before t0 up to t0. Rows are generated inside SQLite by a
/// recursive CTE crossed with a small table of per-queue parameters, in primary-key order, with
/// the journal off: tens of millions of rows a minute instead of one statement per row.
async fn seed_history(settings: &Settings, path: &Path) {
    use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
    let t0: i64 = std::env::var("WARREN_BENCH_T0").ok().and_then(|v| v.parse().ok()).expect("WARREN_BENCH_T0");
    let options = SqliteConnectOptions::new()
        .filename(path)
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Off)
        .synchronous(SqliteSynchronous::Off)
        .pragma("cache_size", "-65536");
    let db = SqlitePoolOptions::new().max_connections(1).connect_with(options).await.expect("open");
    sqlx::migrate!("./migrations/sqlite").run(&db).await.expect("migrations");
    let broker_id = history::broker_id(&warren::storage::sqlite::store(db.clone()), BROKER).await.expect("broker id");
    let model = Model::new(settings, t0);
    let start = t0 - settings.history_days as i64 * 86_400;
    sqlx::query("create temp table seed (id integer primary key, busy integer, ready integer, consumers integer, head_ts integer, publish integer, inc integer)")
        .execute(&db)
        .await
        .expect("seed table");
    let mut tx = db.begin().await.expect("begin");
    for q in &model.queues {
        let state = model.state(q, 0, t0);
        let id: i64 = sqlx::query_scalar(
            "insert into queues (broker_id, vhost, name, kind, durable, arguments, policy, effective_policy, first_seen)
             values (?, ?, ?, 'classic', 1, ?, ?, ?, ?) returning id",
        )
        .bind(broker_id)
        .bind(VHOST)
        .bind(&q.name)
        .bind(q.arguments)
        .bind(q.policy)
        .bind(q.effective_policy)
        .bind(start)
        .fetch_one(&mut *tx)
        .await
        .expect("queue row");
        sqlx::query("insert into seed values (?, ?, ?, ?, ?, ?, ?)")
            .bind(id)
            .bind(q.busy)
            .bind(state.ready as i64)
            .bind(state.consumers as i64)
            .bind(state.head_ts)
            .bind(state.stats.map(|s| s[0] as i64))
            .bind(q.inc as i64)
            .execute(&mut *tx)
            .await
            .expect("seed row");
    }
    tx.commit().await.expect("commit");
    // Busy queues: values that move on every row, counters that grow (inc messages per 10 s).
    let busy_sql = "with recursive t(ts) as (select ?1 union all select ts + ?3 from t where ts + ?3 < ?2)
        insert into queue_samples (queue_id, ts, ready, unacked, consumers, publish_count, publish_rate_m,
            deliver_rate_m, ack_rate_m, redeliver_rate_m, head_ts)
        select s.id, t.ts, abs(random()) % (s.inc / 2 + 1), abs(random()) % 50, s.consumers,
            s.inc * (t.ts - ?1) / 10, s.inc * 100, s.inc * 100 - abs(random()) % 100, s.inc * 100 - abs(random()) % 100,
            s.inc / 2, t.ts - abs(random()) % 60
        from seed s cross join t where s.busy = 1 and s.id between ?4 and ?5";
    // Idle queues: the same values every hour (the keyframe), all rates 0.
    let idle_sql = "with recursive t(ts) as (select ?1 union all select ts + ?3 from t where ts + ?3 < ?2)
        insert into queue_samples (queue_id, ts, ready, unacked, consumers, publish_count, publish_rate_m,
            deliver_rate_m, ack_rate_m, redeliver_rate_m, head_ts)
        select s.id, t.ts, s.ready, 0, s.consumers, s.publish, 0, 0, 0, 0, s.head_ts
        from seed s cross join t where s.busy = 0 and s.id between ?4 and ?5";
    let max_id: i64 = sqlx::query_scalar("select max(id) from seed").fetch_one(&db).await.expect("max id");
    let mut rows = 0u64;
    let chunk = 500;
    let started = Instant::now();
    for low in (1..=max_id).step_by(chunk) {
        let high = low + chunk as i64 - 1;
        for (sql, step) in [(busy_sql, settings.history_busy_step as i64), (idle_sql, KEYFRAME_SECS)] {
            let done = sqlx::query(sql)
                .bind(start)
                .bind(t0)
                .bind(step)
                .bind(low)
                .bind(high)
                .execute(&db)
                .await
                .expect("history rows");
            rows += done.rows_affected();
        }
        if (high / chunk as i64) % 20 == 0 {
            eprintln!("  history: {rows} rows, {:.0} s", started.elapsed().as_secs_f64());
        }
    }
    db.close().await;
    println!("{rows}");
}

fn start_server(settings: &Settings, t0: i64) -> (Child, String) {
    let mut child = Command::new(std::env::current_exe().expect("current exe"))
        .env(SERVE_ENV, "1")
        .env("WARREN_BENCH_QUEUES", settings.queues.to_string())
        .env("WARREN_BENCH_BUSY_PERCENT", settings.busy_percent.to_string())
        .env("WARREN_BENCH_NO_TS_PERCENT", settings.no_ts_percent.to_string())
        .env("WARREN_BENCH_GZIP", if settings.gzip { "1" } else { "0" })
        .env("WARREN_BENCH_T0", t0.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("start the synthetic management API");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).expect("server address");
    let addr = line
        .trim()
        .strip_prefix("listening ")
        .unwrap_or_else(|| panic!("unexpected server output {line:?}"))
        .to_string();
    (child, addr)
}

// ---------------------------------------------------------------------------------------------
// Measuring.

/// CPU time of the whole process (all threads, including exited ones), in nanoseconds.
#[cfg(all(target_os = "linux", target_pointer_width = "64"))]
fn process_cpu_ns() -> u64 {
    #[repr(C)]
    struct Timespec {
        tv_sec: i64,
        tv_nsec: i64,
    }
    extern "C" {
        fn clock_gettime(clock: i32, tp: *mut Timespec) -> i32;
    }
    const CLOCK_PROCESS_CPUTIME_ID: i32 = 2;
    let mut ts = Timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes one timespec (two 64-bit fields on 64-bit Linux) into `ts`.
    let rc = unsafe { clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime");
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Fallback: utime + stime from /proc/self/stat (10 ms ticks).
#[cfg(not(all(target_os = "linux", target_pointer_width = "64")))]
fn process_cpu_ns() -> u64 {
    proc_stat_cpu_ns().unwrap_or(0)
}

/// utime + stime of the process from /proc/self/stat, assuming 100 ticks per second.
fn proc_stat_cpu_ns() -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // Fields 14 and 15 of stat(5); `rest` starts at field 3.
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    Some(ticks * 10_000_000)
}

/// On-CPU nanoseconds per live thread, grouped by thread name (/proc/self/task/*/schedstat).
fn thread_cpu_ns() -> HashMap<String, u64> {
    let mut out = HashMap::new();
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else {
        return out;
    };
    for entry in dir.flatten() {
        let p = entry.path();
        let name = std::fs::read_to_string(p.join("comm")).unwrap_or_default();
        let ns = std::fs::read_to_string(p.join("schedstat"))
            .ok()
            .and_then(|s| s.split_whitespace().next()?.parse::<u64>().ok())
            .unwrap_or(0);
        // Group threads by name; the main thread (named after the binary) runs the poller.
        let name = if p.file_name() == Some(std::ffi::OsStr::new(&std::process::id().to_string())) {
            "main (poller)".to_string()
        } else {
            name.trim().to_string()
        };
        *out.entry(name).or_insert(0) += ns;
    }
    out
}

/// glibc's `struct mallinfo2`: SQLite allocates with the C library's malloc, not Rust's.
#[repr(C)]
#[allow(dead_code)] // the layout is glibc's; two fields are read
struct MallInfo2 {
    arena: usize,
    ordblks: usize,
    smblks: usize,
    hblks: usize,
    hblkhd: usize,
    usmblks: usize,
    fsmblks: usize,
    uordblks: usize,
    fordblks: usize,
    keepcost: usize,
}

extern "C" {
    fn mallinfo2() -> MallInfo2;
    fn malloc_trim(pad: usize) -> i32;
}

/// VmRSS and VmHWM (peak) of this process, in kB, from /proc/self/status; the bytes Rust code
/// holds (`HEAP_LIVE`, with its peak); and what the C library's malloc (SQLite) holds and uses.
fn memory_status() -> Value {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
    };
    // SAFETY: mallinfo2 only reads the allocator's counters (glibc 2.33 and later).
    let c = unsafe { mallinfo2() };
    json!({"vm_rss_kb": field("VmRSS:"), "vm_hwm_kb": field("VmHWM:"),
        "heap_live_kb": HEAP_LIVE.load(Ordering::Relaxed) / 1024, "heap_peak_kb": HEAP_PEAK.load(Ordering::Relaxed) / 1024,
        "c_malloc_in_use_kb": (c.uordblks + c.hblkhd) / 1024, "c_malloc_held_kb": (c.arena + c.hblkhd) / 1024})
}

#[derive(Clone, Copy, Default)]
struct PollRecord {
    cpu_ms: f64,
    wall_ms: f64,
    /// warren's own `last_poll_ms`: everything before the write (fetch, parse, derive, topology,
    /// estimates, planning), in whole milliseconds.
    before_write_ms: f64,
    rows: usize,
    bytes: usize,
}

fn stats(xs: impl Iterator<Item = f64>) -> Value {
    let mut v: Vec<f64> = xs.collect();
    if v.is_empty() {
        return Value::Null;
    }
    v.sort_by(f64::total_cmp);
    let pick = |q: f64| v[((q * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1];
    let round = |x: f64| (x * 100.0).round() / 100.0;
    json!({
        "p50": round(pick(0.50)), "p95": round(pick(0.95)),
        "mean": round(v.iter().sum::<f64>() / v.len() as f64), "max": round(v[v.len() - 1]),
        "n": v.len(),
    })
}

fn window(records: &[PollRecord], range: std::ops::Range<usize>) -> Value {
    let r = &records[range.clone()];
    json!({
        "polls": format!("{}-{}", range.start + 1, range.end),
        "cpu_ms": stats(r.iter().map(|p| p.cpu_ms)),
        "wall_ms": stats(r.iter().map(|p| p.wall_ms)),
        "before_write_wall_ms": stats(r.iter().map(|p| p.before_write_ms)),
        "store_wall_ms": stats(r.iter().map(|p| p.wall_ms - p.before_write_ms)),
        "rows_per_poll": stats(r.iter().map(|p| p.rows as f64)),
    })
}

async fn storage_report(db: &history::Db, path: &Path, queues: usize, polls: usize) -> Value {
    let wal_before = std::fs::metadata(format!("{}-wal", path.display())).map(|m| m.len()).unwrap_or(0);
    sqlx::query("pragma wal_checkpoint(truncate)").execute(db).await.expect("checkpoint");
    let file = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
    let wal = std::fs::metadata(format!("{}-wal", path.display())).map(|m| m.len()).unwrap_or(0);
    let scalar = |sql: &'static str| async move { sqlx::query_scalar::<_, i64>(sql).fetch_one(db).await.unwrap_or(-1) };
    let rows = scalar("select count(*) from queue_samples").await;
    let distinct_ts = scalar("select count(distinct ts) from queue_samples").await;
    let broker_rows = scalar("select count(*) from broker_samples").await;
    let page_size = scalar("pragma page_size").await;
    let freelist = scalar("pragma freelist_count").await;
    // Value columns of a sample row: all but (queue_id, ts).
    let values = scalar("select count(*) - 2 from pragma_table_info('queue_samples')").await;
    let dbstat: Result<Vec<(String, i64, i64)>, _> =
        sqlx::query_as("select name, sum(pgsize), sum(pgsize - unused) from dbstat group by name order by 2 desc")
            .fetch_all(db)
            .await;
    let (by_table, samples_pages) = match &dbstat {
        Ok(list) => (
            json!(list
                .iter()
                .map(|(n, size, used)| (n.clone(), json!({"bytes": size, "used_bytes": used})))
                .collect::<serde_json::Map<_, _>>()),
            list.iter().find(|r| r.0 == "queue_samples").map(|r| r.1),
        ),
        Err(e) => (json!(format!("dbstat unavailable: {e}")), None),
    };
    let per = |bytes: f64, n: f64| {
        if n > 0.0 {
            (bytes / n * 100.0).round() / 100.0
        } else {
            0.0
        }
    };
    json!({
        "file_bytes": file,
        "wal_bytes_before_checkpoint": wal_before,
        "wal_bytes_after_checkpoint": wal,
        "page_size": page_size,
        "freelist_pages": freelist,
        "queue_sample_rows": rows,
        "distinct_sample_timestamps": distinct_ts,
        "broker_sample_rows": broker_rows,
        "queue_samples_table_bytes": samples_pages,
        "file_bytes_per_sample_row": per(file as f64, rows as f64),
        "table_bytes_per_sample_row": samples_pages.map(|b| per(b as f64, rows as f64)),
        "value_columns_per_row": values,
        "table_bytes_per_value": samples_pages.map(|b| per(b as f64, (values * rows) as f64)),
        "file_bytes_per_queue_per_poll": per(file as f64, (queues * polls) as f64),
        "by_table": by_table,
    })
}

fn fmt_stats(v: &Value) -> String {
    format!(
        "p50 {:>7.2}  p95 {:>7.2}  mean {:>7.2}  max {:>7.2}",
        v["p50"].as_f64().unwrap_or(f64::NAN),
        v["p95"].as_f64().unwrap_or(f64::NAN),
        v["mean"].as_f64().unwrap_or(f64::NAN),
        v["max"].as_f64().unwrap_or(f64::NAN)
    )
}

fn temp_config(dir: &Path, addr: &str, prometheus: bool) -> Config {
    let prometheus_url = if prometheus { format!("http://{addr}/") } else { "off".to_string() };
    let toml = format!(
        "database = {:?}\n[[brokers]]\nname = \"{BROKER}\"\nmanagement_url = \"http://{addr}\"\n\
         poll_interval_secs = {INTERVAL}\nrequest_timeout_secs = 60\nprometheus_url = {prometheus_url:?}\n",
        dir.join("bench.db").display().to_string()
    );
    Config::from_toml(&toml).expect("bench config")
}

async fn bench(settings: Settings) {
    let Settings { queues, polls, .. } = settings;
    let t0 = chrono::Utc::now().timestamp();
    let busy = Model::new(&settings, t0).queues.iter().filter(|q| q.busy).count();
    println!(
        "warren poll benchmark: {queues} queues ({busy} busy, {} idle, {}% without timestamps), {polls} polls, gzip {}, depth from {}",
        queues - busy,
        settings.no_ts_percent,
        if settings.gzip { "on" } else { "off" },
        if settings.prometheus { "the Prometheus plugin (/metrics/detailed)" } else { "the management listing" }
    );

    // ---- Phase A: the real poller against the synthetic API in a child process.
    let (mut child, addr) = start_server(&settings, t0);
    let dir = tempfile::tempdir().expect("tempdir");
    let config = temp_config(dir.path(), &addr, settings.prometheus);
    let seeded = (settings.history_days > 0).then(|| {
        eprintln!("  writing {} days of history ...", settings.history_days);
        let (rows, secs) = seed_in_child(&settings, &config.database, t0);
        let bytes = std::fs::metadata(&config.database).map(|m| m.len()).unwrap_or(0);
        eprintln!("  history: {rows} rows, {:.0} MB, in {secs:.0} s", bytes as f64 / 1e6);
        json!({"days": settings.history_days, "rows": rows, "file_bytes": bytes, "seconds": (secs * 10.0).round() / 10.0,
            "idle_queue_row_every_secs": KEYFRAME_SECS, "busy_queue_row_every_secs": settings.history_busy_step})
    });
    let memory_at_start = memory_status();
    let db = history::open(&config.database).await.expect("open db");
    let store = warren::storage::sqlite::store(db.clone());
    let broker = config.brokers[0].clone();
    let broker_id = history::broker_id(&store, BROKER).await.expect("broker id");
    let live = Live::new(&[BROKER.to_string()]);
    let load_started = Instant::now();
    // As warren starts: the stored queues loaded, then shown as the last known state.
    let mut poller = Poller::new(broker, store.clone(), live.clone(), broker_id)
        .await
        .expect("poller")
        .show_last_known()
        .await
        .expect("last known state");
    let load_ms = load_started.elapsed().as_secs_f64() * 1e3;
    let memory_loaded = memory_status();

    let mut records = Vec::with_capacity(polls);
    let mut memory_first_poll = Value::Null;
    let threads_before = thread_cpu_ns();
    let proc_before = proc_stat_cpu_ns();
    let (cpu_start, wall_start) = (process_cpu_ns(), Instant::now());
    for i in 0..polls {
        let (c0, w0) = (process_cpu_ns(), Instant::now());
        let stats = poller.poll_once().await.expect("poll");
        let wall_ms = w0.elapsed().as_secs_f64() * 1e3;
        let cpu_ms = (process_cpu_ns() - c0) as f64 / 1e6;
        let before_write_ms = live.broker(BROKER).and_then(|b| b.status.last_poll_ms).unwrap_or(0) as f64;
        assert_eq!(stats.queues, queues, "poll {} saw every queue", i + 1);
        records.push(PollRecord { cpu_ms, wall_ms, before_write_ms, rows: stats.samples_written, bytes: stats.bytes });
        if i == 0 {
            // The first poll rewrites every queue known from the database: its peak is its own.
            memory_first_poll = memory_status();
            HEAP_PEAK.store(HEAP_LIVE.load(Ordering::Relaxed), Ordering::Relaxed);
        }
        if (i + 1) % 100 == 0 {
            eprintln!("  phase A: {} polls, last {cpu_ms:.1} ms CPU / {wall_ms:.1} ms wall", i + 1);
        }
    }
    let total_cpu_ms = (process_cpu_ns() - cpu_start) as f64 / 1e6;
    let total_wall_s = wall_start.elapsed().as_secs_f64();
    // Measured while the poller (what it remembers per queue) and the live state (every queue's
    // view, as the pages read it) are held, before anything else is allocated.
    let memory_after = memory_status();
    let live_queues = live.broker(BROKER).map_or(0, |b| b.queues.len());
    // What each part holds: the poller's memory of every queue, then the pages' views.
    drop(poller);
    let memory_without_poller = memory_status();
    live.update(BROKER, |b| b.queues = Arc::new(Vec::new()));
    let memory_without_views = memory_status();
    // SAFETY: malloc_trim only returns the C library's free pages to the system.
    unsafe { malloc_trim(0) };
    let memory_after_c_trim = memory_status();
    let proc_total_ms = proc_stat_cpu_ns().zip(proc_before).map(|(a, b)| (a - b) as f64 / 1e6);
    let threads_after = thread_cpu_ns();
    let mut by_thread: Vec<(String, f64)> = threads_after
        .iter()
        .map(|(n, ns)| {
            let before = threads_before.get(n).copied().unwrap_or(0);
            (n.clone(), ns.saturating_sub(before) as f64 / 1e6 / polls as f64)
        })
        .filter(|(_, ms)| *ms >= 0.01)
        .collect();
    by_thread.sort_by(|a, b| b.1.total_cmp(&a.1));

    let rows_written: usize = records.iter().map(|r| r.rows).sum();
    // Polls that also re-listed bindings and exchanges (warren does that every 60 s of wall time,
    // so back to back it is rare; at a 10 s interval it is every 6th poll): more bytes read.
    let mut sizes: Vec<usize> = records[1..].iter().map(|r| r.bytes).collect();
    sizes.sort_unstable();
    let usual_bytes = sizes[sizes.len() / 2];
    let topo: Vec<PollRecord> =
        records[1..].iter().copied().filter(|r| r.bytes > usual_bytes + usual_bytes / 10).collect();
    let plain: Vec<PollRecord> =
        records[1..].iter().copied().filter(|r| r.bytes <= usual_bytes + usual_bytes / 10).collect();
    let mean = |r: &[PollRecord]| r.iter().map(|p| p.cpu_ms).sum::<f64>() / r.len().max(1) as f64;
    let projected_cpu_ms =
        if topo.is_empty() { None } else { Some(mean(&plain) + (mean(&topo) - mean(&plain)) * INTERVAL as f64 / 60.0) };
    let steady = 1..polls;
    let first = 1..(polls.min(101));
    let last = polls.saturating_sub(100).max(1)..polls;
    // With seeded history the database is gigabytes: dbstat would take minutes and say little.
    let phase_a_storage =
        if seeded.is_none() { storage_report(&db, &config.database, queues, polls).await } else { Value::Null };
    db.close().await;
    drop(child.stdin.take());
    let _ = child.kill();
    let _ = child.wait();

    // The physical floor of the fetch side: parsing the same pages into warren's types.
    let model = Model::new(&settings, t0);
    let idle = model.render_idle();
    let pages: Vec<String> =
        (1..=model.page_count(500)).map(|p| model.render_page(p, 500, 2, t0 + 2 * INTERVAL, &idle)).collect();
    let body_bytes: usize = pages.iter().map(|p| p.len()).sum();
    let parse_ms = {
        let mut best = f64::MAX;
        for _ in 0..5 {
            let c0 = process_cpu_ns();
            for p in &pages {
                let page: QueuePage = serde_json::from_str(p).expect("page parses");
                std::hint::black_box(page);
            }
            best = best.min((process_cpu_ns() - c0) as f64 / 1e6);
        }
        best
    };

    let poll1 = records[0];
    let first_poll_is =
        if seeded.is_some() { "queues known from the database, no counters in memory yet" } else { "every queue new" };
    let a = json!({
        "what": "Poller::poll_once back to back against the synthetic API (child process); CPU is this process only",
        "polls": polls,
        "total_wall_s": (total_wall_s * 10.0).round() / 10.0,
        "total_cpu_ms_per_poll": total_cpu_ms / polls as f64,
        "proc_stat_cpu_ms_per_poll": proc_total_ms.map(|t| t / polls as f64),
        "first_poll": {"cpu_ms": poll1.cpu_ms, "wall_ms": poll1.wall_ms, "rows": poll1.rows,
            "note": first_poll_is},
        "first_100": window(&records, first.clone()),
        "last_100": window(&records, last.clone()),
        "all_after_first": window(&records, steady.clone()),
        "json_bytes_per_poll": usual_bytes,
        "topology_refresh_polls": {"count": topo.len(), "cpu_ms": stats(topo.iter().map(|p| p.cpu_ms)),
            "wall_ms": stats(topo.iter().map(|p| p.wall_ms)),
            "extra_json_bytes": topo.first().map(|r| r.bytes.saturating_sub(usual_bytes))},
        "polls_without_topology_cpu_ms": stats(plain.iter().map(|p| p.cpu_ms)),
        "projected_mean_cpu_ms_per_poll_at_10s_interval": projected_cpu_ms,
        "cpu_ms_per_poll_by_thread": by_thread.iter().map(|(n, ms)| (n.clone(), json!((ms * 100.0).round() / 100.0))).collect::<serde_json::Map<_, _>>(),
        "floor_parse_pages_cpu_ms": (parse_ms * 100.0).round() / 100.0,
        "floor_parse_pages_bytes": body_bytes,
        "rows_written": rows_written,
        "storage_note": "timestamps are wall-clock seconds: back-to-back polls share a second and `insert or replace` keeps one row per queue per second; see phase B for disk cost",
        "storage": phase_a_storage,
        "history_before_the_run": seeded,
        "load_known_queues_ms": (load_ms * 10.0).round() / 10.0,
        "memory": {"note": "/proc/self/status of this process (warren's poller, live state, SQLite pool; the fake broker is another process)",
            "before_opening_the_database": memory_at_start, "after_loading_known_queues": memory_loaded,
            "after_first_poll": memory_first_poll, "after_polls": memory_after, "live_queues": live_queues,
            "after_dropping_the_poller": memory_without_poller, "after_dropping_the_views": memory_without_views,
            "after_dropping_both_and_malloc_trim": memory_after_c_trim},
        "per_poll": {
            "cpu_ms": records.iter().map(|r| (r.cpu_ms * 10.0).round() / 10.0).collect::<Vec<_>>(),
            "wall_ms": records.iter().map(|r| (r.wall_ms * 10.0).round() / 10.0).collect::<Vec<_>>(),
            "before_write_ms": records.iter().map(|r| r.before_write_ms).collect::<Vec<_>>(),
            "rows": records.iter().map(|r| r.rows).collect::<Vec<_>>(),
        },
    });

    println!("\nPhase A: real poller, {polls} polls back to back ({total_wall_s:.1} s)");
    println!(
        "  poll 1 ({first_poll_is}): {:.1} ms CPU, {:.1} ms wall, {} rows",
        poll1.cpu_ms, poll1.wall_ms, poll1.rows
    );
    for (label, key) in [("first 100", "first_100"), ("last 100", "last_100"), ("all after 1", "all_after_first")] {
        println!("  {label:<12} ({:>9}) CPU ms  {}", a[key]["polls"].as_str().unwrap(), fmt_stats(&a[key]["cpu_ms"]));
        println!("  {:<24} wall ms {}", "", fmt_stats(&a[key]["wall_ms"]));
        println!("  {:<24}   before the write (warren's poll_ms) {}", "", fmt_stats(&a[key]["before_write_wall_ms"]));
        println!("  {:<24}   write + publish                     {}", "", fmt_stats(&a[key]["store_wall_ms"]));
    }
    println!(
        "  process CPU over the run: {:.2} ms/poll (clock_gettime), {} ms/poll (/proc/self/stat)",
        total_cpu_ms / polls as f64,
        proc_total_ms.map_or("n/a".into(), |t| format!("{:.2}", t / polls as f64))
    );
    println!(
        "  by thread (ms CPU per poll): {}",
        by_thread.iter().map(|(n, ms)| format!("{n} {ms:.2}")).collect::<Vec<_>>().join(", ")
    );
    println!(
        "  floor: parsing the {} pages ({:.1} MB JSON) into QueuePage alone: {parse_ms:.2} ms CPU",
        pages.len(),
        body_bytes as f64 / 1e6
    );
    println!("  rows written per poll after the first: {}", fmt_stats(&a["all_after_first"]["rows_per_poll"]));
    println!("  JSON read per poll: {:.2} MB (after gunzip)", usual_bytes as f64 / 1e6);
    if !topo.is_empty() {
        println!(
            "  {} polls also re-listed bindings/exchanges (+{:.2} MB): CPU ms {}",
            topo.len(),
            a["topology_refresh_polls"]["extra_json_bytes"].as_f64().unwrap_or(0.0) / 1e6,
            fmt_stats(&a["topology_refresh_polls"]["cpu_ms"])
        );
        println!("  polls without that:             CPU ms {}", fmt_stats(&a["polls_without_topology_cpu_ms"]));
        println!(
            "  projected mean CPU per poll at a {INTERVAL} s interval (topology every 60 s): {:.2} ms",
            projected_cpu_ms.unwrap_or(0.0)
        );
    }
    if seeded.is_none() {
        println!(
            "  database: {} rows written, {} kept ({} distinct seconds; same-second rows are replaced)",
            rows_written, a["storage"]["queue_sample_rows"], a["storage"]["distinct_sample_timestamps"]
        );
    } else {
        let h = &a["history_before_the_run"];
        println!(
            "  database before the run: {} days of history, {} rows, {:.0} MB (written in {} s); known queues loaded in {load_ms:.0} ms",
            h["days"], h["rows"], h["file_bytes"].as_f64().unwrap_or(0.0) / 1e6, h["seconds"]
        );
    }
    let mb = |v: &Value, k: &str| v[k].as_f64().unwrap_or(f64::NAN) / 1024.0;
    println!(
        "  memory: VmRSS {:.1} MB, VmHWM {:.1} MB holding {live_queues} queues' live state (before opening the database: VmRSS {:.1} MB; after loading known queues {:.1} MB)",
        mb(&memory_after, "vm_rss_kb"),
        mb(&memory_after, "vm_hwm_kb"),
        mb(&memory_at_start, "vm_rss_kb"),
        mb(&memory_loaded, "vm_rss_kb"),
    );
    println!(
        "  heap (allocated, not freed): {:.1} MB after polls (peak after the first poll {:.1} MB, in poll 1 {:.1} MB; after loading known queues {:.1} MB); \
         {:.1} MB without the poller's per-queue memory, {:.1} MB without the views too",
        mb(&memory_after, "heap_live_kb"),
        mb(&memory_after, "heap_peak_kb"),
        mb(&memory_first_poll, "heap_peak_kb"),
        mb(&memory_loaded, "heap_live_kb"),
        mb(&memory_without_poller, "heap_live_kb"),
        mb(&memory_without_views, "heap_live_kb"),
    );
    println!(
        "  C malloc (SQLite): {:.1} MB in use, {:.1} MB held after polls (after loading known queues {:.1} / {:.1} MB)",
        mb(&memory_after, "c_malloc_in_use_kb"),
        mb(&memory_after, "c_malloc_held_kb"),
        mb(&memory_loaded, "c_malloc_in_use_kb"),
        mb(&memory_loaded, "c_malloc_held_kb"),
    );
    println!(
        "  VmRSS without the poller {:.1} MB, without the views too {:.1} MB, after malloc_trim {:.1} MB (C malloc held {:.1} MB)",
        mb(&memory_without_poller, "vm_rss_kb"),
        mb(&memory_without_views, "vm_rss_kb"),
        mb(&memory_after_c_trim, "vm_rss_kb"),
        mb(&memory_after_c_trim, "c_malloc_held_kb"),
    );

    // ---- Phase B: storage with virtual timestamps 10 s apart.
    let b = if settings.storage { Some(storage_phase(&settings, &model, &idle).await) } else { None };

    let report = json!({
        "settings": {"queues": queues, "polls": polls, "busy_percent": settings.busy_percent,
            "busy_queues": busy, "no_ts_percent": settings.no_ts_percent, "gzip": settings.gzip,
            "storage_polls": settings.storage_polls, "prometheus": settings.prometheus, "history_days": settings.history_days, "cores": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0)},
        "phase_a_poller": a,
        "phase_b_storage": b,
    });
    let path = report_path();
    if let Some(parent) = path.parent() {
        let _ = std::fs::create_dir_all(parent);
    }
    match std::fs::write(&path, serde_json::to_string_pretty(&report).unwrap()) {
        Ok(()) => println!("\nreport: {}", path.display()),
        Err(e) => eprintln!("cannot write {}: {e}", path.display()),
    }
}

fn report_path() -> PathBuf {
    if let Some(p) = std::env::var_os("WARREN_BENCH_JSON") {
        return PathBuf::from(p);
    }
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("target"));
    target.join("bench-poll.json")
}

// ---------------------------------------------------------------------------------------------
// Phase B: what `Poller::derive` would write at a 10 s interval, through `history::write_poll`.

/// Mirrors `poller::track::stored_sample` (private there).
fn stored_sample(view: &metrics::QueueView) -> StoredSample {
    StoredSample {
        ready: view.ready.map(|v| v as i64),
        unacked: view.unacked.map(|v| v as i64),
        consumers: view.consumers.map(|v| v as i64),
        publish_count: view.publish_count.map(|v| v as i64),
        publish_rate_m: rate_to_milli(view.publish_rate),
        deliver_rate_m: rate_to_milli(view.deliver_rate),
        ack_rate_m: rate_to_milli(view.ack_rate),
        redeliver_rate_m: rate_to_milli(view.redeliver_rate),
        head_ts: view.head_ts,
        // FIFO age estimates (est_*) are not mirrored: the synthetic queues give exact ages
        // unless WARREN_BENCH_NO_TS_PERCENT > 0.
        ..StoredSample::default()
    }
}

/// Mirrors `poller::track::queue_meta` (private there).
fn queue_meta(view: &metrics::QueueView) -> QueueMeta {
    QueueMeta {
        vhost: view.vhost.to_string(),
        name: view.name.to_string(),
        kind: view.kind.to_string(),
        durable: view.durable,
        arguments: Value::Object((*view.arguments).clone()).to_string(),
        policy: view.policy.clone(),
        effective_policy: Value::Object((*view.effective_policy).clone()).to_string(),
    }
}

#[derive(Default)]
struct Known {
    id: Option<i64>,
    last: Option<(i64, StoredSample)>,
    counters: Option<QueueCounters>,
}

async fn storage_phase(settings: &Settings, model: &Model, idle: &[String]) -> Value {
    let Settings { queues, storage_polls: polls, .. } = *settings;
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("storage.db");
    let db = history::open(&path).await.expect("open db");
    let store = warren::storage::sqlite::store(db.clone());
    let broker_id = history::broker_id(&store, BROKER).await.expect("broker id");
    let busy_count = model.queues.iter().filter(|q| q.busy).count();
    // Idle queues answer the same bytes every poll: parse them once; busy ones every step.
    let parse = |json: &str| -> RawQueue { serde_json::from_str(json).expect("queue parses") };
    let idle_raw: Vec<Option<RawQueue>> =
        model.queues.iter().zip(idle).map(|(q, json)| (!q.busy).then(|| parse(json))).collect();
    let mut known: Vec<Known> = (0..queues).map(|_| Known::default()).collect();
    let mut records: Vec<PollRecord> = Vec::with_capacity(polls);
    let (mut busy_rows, mut idle_rows) = (0usize, 0usize);
    let started = Instant::now();
    for step in 1..=polls as u64 {
        let ts = model.t0 + INTERVAL * step as i64;
        let now = DateTime::from_timestamp(ts, 0).expect("timestamp");
        let mut write = PollWrite { broker_id, ts, ..PollWrite::default() };
        let mut new_queues = Vec::new();
        for (i, q) in model.queues.iter().enumerate() {
            let busy_raw;
            let raw = match &idle_raw[i] {
                Some(raw) => raw,
                None => {
                    let mut json = String::new();
                    model.render_queue(&mut json, q, step, ts);
                    busy_raw = parse(&json);
                    &busy_raw
                }
            };
            let k = &mut known[i];
            let previous = k.counters.as_ref().map(|c| (c, INTERVAL as f64));
            let counters = metrics::queue_counters(raw, true);
            let view = metrics::queue_view(BROKER, raw.clone(), true, previous, now);
            let sample = stored_sample(&view);
            k.counters = Some(counters);
            let due = match (k.last, k.id) {
                (Some((last_ts, last)), Some(id)) => last != sample || keyframe_due(id, last_ts, ts),
                _ => true,
            };
            if !due {
                continue;
            }
            if q.busy {
                busy_rows += 1;
            } else {
                idle_rows += 1;
            }
            match k.id {
                Some(id) => write.samples.push((id, sample)),
                None => {
                    write.upserts.push(queue_meta(&view));
                    write.new_samples.push((write.upserts.len() - 1, sample));
                    new_queues.push(i);
                }
            }
            k.last = Some((ts, sample));
        }
        write.broker.queues = queues as i64;
        let rows = write.samples.len() + write.new_samples.len();
        let (c0, w0) = (process_cpu_ns(), Instant::now());
        let ids = history::write_poll(&store, &write).await.expect("write_poll");
        let wall_ms = w0.elapsed().as_secs_f64() * 1e3;
        let cpu_ms = (process_cpu_ns() - c0) as f64 / 1e6;
        for (&i, id) in new_queues.iter().zip(ids) {
            known[i].id = Some(id);
        }
        records.push(PollRecord { cpu_ms, wall_ms, before_write_ms: 0.0, rows, bytes: 0 });
        if step % 100 == 0 {
            eprintln!("  phase B: {step} polls, last write {rows} rows in {wall_ms:.1} ms");
        }
    }
    let elapsed = started.elapsed().as_secs_f64();
    let storage = storage_report(&db, &path, queues, polls).await;
    db.close().await;

    let write_window = |range: std::ops::Range<usize>| {
        let r = &records[range.clone()];
        json!({
            "polls": format!("{}-{}", range.start + 1, range.end),
            "write_poll_wall_ms": stats(r.iter().map(|p| p.wall_ms)),
            "write_poll_cpu_ms": stats(r.iter().map(|p| p.cpu_ms)),
            "rows_per_poll": stats(r.iter().map(|p| p.rows as f64)),
        })
    };
    let busy = busy_count.max(1);
    let idle_count = (queues - busy_count).max(1);
    let per_day = |bytes_per_queue_poll: f64| bytes_per_queue_poll * queues as f64 * 8640.0;
    let b = json!({
        "what": "warren's derive (metrics::queue_view, change-only + hourly keyframe as in Poller::derive) and history::write_poll, virtual timestamps 10 s apart",
        "virtual_hours": (polls as f64 * INTERVAL as f64 / 3600.0 * 100.0).round() / 100.0,
        "elapsed_s": (elapsed * 10.0).round() / 10.0,
        "first_poll_rows": records[0].rows,
        "first_100": write_window(1..polls.min(101)),
        "last_100": write_window(polls.saturating_sub(100).max(1)..polls),
        "polls_writing_over_half_the_queues": records.iter().enumerate()
            .filter(|(_, r)| r.rows > queues / 2).map(|(i, _)| i + 1).collect::<Vec<_>>(),
        "rows_per_poll_mean": (busy_rows + idle_rows) as f64 / polls as f64,
        "rows_per_busy_queue_per_poll": busy_rows as f64 / (busy * polls) as f64,
        "rows_per_idle_queue_per_poll": idle_rows as f64 / (idle_count * polls) as f64,
        "storage": storage,
    });
    let s = &b["storage"];
    let bpq = s["file_bytes_per_queue_per_poll"].as_f64().unwrap_or(0.0);
    println!(
        "\nPhase B: storage, {polls} polls at a virtual {INTERVAL} s interval ({:.1} h), {elapsed:.1} s",
        b["virtual_hours"].as_f64().unwrap()
    );
    println!(
        "  rows per poll: first {}, mean {:.1}; per busy queue per poll {:.3}, per idle queue per poll {:.4}",
        records[0].rows,
        b["rows_per_poll_mean"].as_f64().unwrap(),
        b["rows_per_busy_queue_per_poll"].as_f64().unwrap(),
        b["rows_per_idle_queue_per_poll"].as_f64().unwrap()
    );
    println!(
        "  polls that wrote more than half the queues (first poll, rates becoming known, hourly keyframes): {}",
        b["polls_writing_over_half_the_queues"]
    );
    for key in ["first_100", "last_100"] {
        println!(
            "  write_poll {key:<9} ({:>9}) wall ms {}",
            b[key]["polls"].as_str().unwrap(),
            fmt_stats(&b[key]["write_poll_wall_ms"])
        );
    }
    println!(
        "  database after checkpoint: {:.1} MB, {} sample rows ({} free pages)",
        s["file_bytes"].as_f64().unwrap_or(0.0) / 1e6,
        s["queue_sample_rows"],
        s["freelist_pages"]
    );
    println!(
        "  bytes per sample row: {} (file), {} (queue_samples b-tree, dbstat); per value ({} per row): {}",
        s["file_bytes_per_sample_row"],
        s["table_bytes_per_sample_row"],
        s["value_columns_per_row"],
        s["table_bytes_per_value"]
    );
    println!(
        "  bytes per queue per poll (file / (queues x polls)): {bpq:.2}  =>  {:.0} MB/day for {queues} queues at {INTERVAL} s",
        per_day(bpq) / 1e6
    );
    b
}
