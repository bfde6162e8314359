//! What watching costs the broker: broker CPU-seconds per minute spent serving warren (default
//! settings, in process) next to a Prometheus-style scrape of `/metrics/detailed` (depth and
//! consumers) every 10 s, on the real broker, with the idle load subtracted. See benches/README.md.
//!
//! The broker's CPU is `utime + stime` of its `beam.smp` process from `/proc/<pid>/stat`, read
//! at the start and end of each window. The broker is shared with whatever else runs on the
//! machine, so idle is measured before and after and the mean is subtracted.

use std::time::{Duration, Instant};

use futures_util::future::join_all;
use lapin::options::{BasicPublishOptions, ConfirmSelectOptions, QueueDeclareOptions};
use lapin::types::FieldTable;
use lapin::{BasicProperties, Connection, ConnectionProperties};
use serde_json::json;
use tokio_util::sync::CancellationToken;
use warren::config::Config;
use warren::history;
use warren::live::Live;
use warren::poller::Poller;

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The broker under measurement, from the environment (defaults: the host's 3.10.8):
/// `WARREN_BENCH_MANAGEMENT_URL`, `WARREN_BENCH_PROMETHEUS_URL`, `WARREN_BENCH_AMQP_URL` (with
/// credentials; the management and Prometheus calls log in as guest/guest), and
/// `WARREN_BENCH_BROKER_PID`, the broker's `beam.smp` (default: the busiest one on the machine;
/// `.ci/rabbitmq4.sh pid` prints a 4.x node's). See benches/README.md.
struct Endpoints {
    management: String,
    prometheus: String,
    amqp: String,
}

fn endpoints() -> &'static Endpoints {
    static ENDPOINTS: std::sync::LazyLock<Endpoints> = std::sync::LazyLock::new(|| {
        let var = |name: &str, default: &str| {
            std::env::var(name).ok().filter(|v| !v.is_empty()).unwrap_or_else(|| default.to_string())
        };
        Endpoints {
            management: var("WARREN_BENCH_MANAGEMENT_URL", "http://127.0.0.1:15672").trim_end_matches('/').into(),
            prometheus: var("WARREN_BENCH_PROMETHEUS_URL", "http://127.0.0.1:15692").trim_end_matches('/').into(),
            amqp: var("WARREN_BENCH_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672").trim_end_matches('/').into(),
        }
    });
    &ENDPOINTS
}

const VHOST: &str = "warren-bench-cost";
const BROKER: &str = "local";

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn main() {
    let runtime = tokio::runtime::Runtime::new().expect("tokio runtime");
    runtime.block_on(run());
}

/// Clock ticks per second of `/proc/<pid>/stat` times.
fn clock_ticks() -> f64 {
    let out = std::process::Command::new("getconf").arg("CLK_TCK").output().expect("getconf");
    String::from_utf8_lossy(&out.stdout).trim().parse().unwrap_or(100.0)
}

fn beam_pid() -> u32 {
    if let Ok(pid) = std::env::var("WARREN_BENCH_BROKER_PID") {
        let pid: u32 = pid.trim().parse().expect("WARREN_BENCH_BROKER_PID is a process id");
        assert!(
            std::path::Path::new(&format!("/proc/{pid}/stat")).exists(),
            "WARREN_BENCH_BROKER_PID={pid} does not run"
        );
        return pid;
    }
    let out = std::process::Command::new("pgrep").args(["-f", "beam.smp"]).output().expect("pgrep");
    let text = String::from_utf8_lossy(&out.stdout);
    let pids: Vec<u32> = text.split_whitespace().filter_map(|p| p.parse().ok()).collect();
    assert!(!pids.is_empty(), "no beam.smp process: is RabbitMQ running on this machine?");
    // The broker's VM is the one with the most CPU time (there is usually exactly one).
    *pids.iter().max_by_key(|pid| (beam_cpu_ticks(**pid) * 1000.0) as u64).unwrap()
}

/// utime + stime in ticks (fields 14 and 15; the command name in parentheses may hold spaces).
fn beam_cpu_ticks(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("read /proc/<pid>/stat");
    let after = &stat[stat.rfind(')').expect("stat format") + 2..];
    let fields: Vec<&str> = after.split(' ').collect();
    // `after` starts at field 3 (state): utime is field 14, stime 15.
    fields[11].parse::<f64>().unwrap() + fields[12].parse::<f64>().unwrap()
}

struct Window {
    name: &'static str,
    secs: f64,
    cpu_secs: f64,
}

impl Window {
    fn per_minute(&self) -> f64 {
        self.cpu_secs / self.secs * 60.0
    }
}

async fn measure<F: std::future::Future<Output = ()>>(name: &'static str, pid: u32, ticks: f64, work: F) -> Window {
    let start_cpu = beam_cpu_ticks(pid);
    let start = Instant::now();
    work.await;
    let secs = start.elapsed().as_secs_f64();
    let cpu_secs = (beam_cpu_ticks(pid) - start_cpu) / ticks;
    let w = Window { name, secs, cpu_secs };
    eprintln!("{name}: {:.2} broker CPU-s in {secs:.0} s = {:.3} CPU-s/min", w.cpu_secs, w.per_minute());
    w
}

async fn management(http: &reqwest::Client, method: reqwest::Method, path: &str, body: Option<serde_json::Value>) {
    let mut request =
        http.request(method, format!("{}{path}", endpoints().management)).basic_auth("guest", Some("guest"));
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().await.expect("the management API answers");
    assert!(response.status().is_success() || response.status() == 404, "{path}: {}", response.status());
}

/// The vhost with `queues` classic queues, one message in every tenth (as in PERF.md).
async fn create_queues(queues: usize) {
    let http = reqwest::Client::new();
    let vhost = warren::broker::management::encode_segment(VHOST);
    management(&http, reqwest::Method::DELETE, &format!("/api/vhosts/{vhost}"), None).await;
    management(&http, reqwest::Method::PUT, &format!("/api/vhosts/{vhost}"), Some(json!({}))).await;
    let permissions = json!({"configure": ".*", "write": ".*", "read": ".*"});
    management(&http, reqwest::Method::PUT, &format!("/api/permissions/{vhost}/guest"), Some(permissions)).await;
    let started = Instant::now();
    let connections = 8;
    let tasks = (0..connections).map(|c| async move {
        let uri = format!("{}/{vhost}", endpoints().amqp, vhost = warren::broker::management::encode_segment(VHOST));
        let connection = Connection::connect(&uri, ConnectionProperties::default()).await.expect("AMQP");
        let channel = connection.create_channel().await.unwrap();
        channel.confirm_select(ConfirmSelectOptions::default()).await.unwrap();
        for i in (c..queues).step_by(connections) {
            let name = format!("q{i}");
            channel
                .queue_declare(name.as_str().into(), QueueDeclareOptions::default(), FieldTable::default())
                .await
                .unwrap();
            if i % 10 == 0 {
                let props = BasicProperties::default().with_timestamp(chrono::Utc::now().timestamp() as u64);
                channel
                    .basic_publish("".into(), name.as_str().into(), BasicPublishOptions::default(), b"x", props)
                    .await
                    .unwrap()
                    .await
                    .unwrap();
            }
        }
        connection.close(200, "done".into()).await.ok();
    });
    join_all(tasks).await;
    eprintln!("created {queues} queues in {:.1} s", started.elapsed().as_secs_f64());
}

async fn delete_vhost() {
    let http = reqwest::Client::new();
    let vhost = warren::broker::management::encode_segment(VHOST);
    management(&http, reqwest::Method::DELETE, &format!("/api/vhosts/{vhost}"), None).await;
}

/// What a Prometheus server configured for depth and consumers does: scrape every 10 s.
async fn scrape_every_10s(window: Duration) -> (u64, u64) {
    let http = reqwest::Client::builder().gzip(true).build().unwrap();
    let url = format!(
        "{}/metrics/detailed?vhost={}&family=queue_coarse_metrics&family=queue_consumer_count",
        endpoints().prometheus,
        warren::broker::management::encode_segment(VHOST)
    );
    let end = Instant::now() + window;
    let (mut scrapes, mut bytes) = (0, 0);
    let mut tick = tokio::time::interval(Duration::from_secs(10));
    while Instant::now() < end {
        tick.tick().await;
        let body = http.get(&url).send().await.expect("scrape").bytes().await.expect("scrape body");
        scrapes += 1;
        bytes += body.len() as u64;
    }
    (scrapes, bytes)
}

async fn run() {
    let queues = env_u64("WARREN_BENCH_QUEUES", 10_000) as usize;
    let window = Duration::from_secs(env_u64("WARREN_BENCH_WINDOW_SECS", 90));
    let rounds = env_u64("WARREN_BENCH_ROUNDS", 3) as usize;
    let warmup = Duration::from_secs(env_u64("WARREN_BENCH_WARMUP_SECS", 0));
    let ticks = clock_ticks();
    let pid = beam_pid();
    eprintln!("beam.smp pid {pid}; {queues} queues; {rounds} rounds of idle / warren / scrape, windows of {window:?}");
    create_queues(queues).await;
    // Let the broker settle after the creation burst (stats emission, GC).
    tokio::time::sleep(Duration::from_secs(20)).await;

    let dir = tempfile::tempdir().unwrap();
    let toml = format!(
        "database = {:?}\n[[brokers]]\nname = \"{BROKER}\"\nmanagement_url = {:?}\nprometheus_url = {:?}\namqp_url = {:?}\nvhosts_include = [\"{VHOST}\"]\n",
        dir.path().join("bench.db"),
        endpoints().management,
        endpoints().prometheus,
        endpoints().amqp.replacen("guest:guest@", "", 1)
    );
    let config = Config::from_toml(&toml).expect("bench config");
    let broker = config.brokers[0].clone();
    let db = history::open(&config.database).await.expect("open db");
    let store = warren::storage::sqlite::store(db.clone());
    let broker_id = history::broker_id(&store, BROKER).await.expect("broker id");

    let per_call = per_call_costs(&broker, pid, ticks).await;
    if rounds == 0 {
        delete_vhost().await;
        print_per_call(&per_call);
        return;
    }

    let (mut idle, mut warren, mut scrape) = (Vec::new(), Vec::new(), Vec::new());
    let mut warren_calls = Vec::new();
    let mut scraped = (0, 0);
    for round in 0..rounds {
        eprintln!("round {}", round + 1);
        idle.push(measure("idle", pid, ticks, tokio::time::sleep(window)).await);

        // warren with its defaults, watching the bench vhost, in process, started afresh for
        // each window. Its first poll lists queues; with `WARREN_BENCH_WARMUP_SECS` (default 0)
        // the window starts that long after, so that a window as long as the listing interval
        // (300 s on 4.x) holds one listing as warren running for days would, not one per window.
        let live = Live::new(&[BROKER.to_string()]);
        let poller = Poller::new(broker.clone(), store.clone(), live.clone(), broker_id)
            .await
            .expect("poller")
            .show_last_known()
            .await
            .expect("last known state");
        let cancel = CancellationToken::new();
        let task = tokio::spawn(poller.run(cancel.clone()));
        tokio::time::sleep(warmup).await;
        let w = measure("warren (defaults)", pid, ticks, tokio::time::sleep(window)).await;
        cancel.cancel();
        task.await.ok();
        warren.push(w);
        warren_calls.push(live.broker(BROKER).unwrap().load);

        let s = measure("prometheus scrape every 10 s", pid, ticks, async {
            let (n, b) = scrape_every_10s(window).await;
            scraped = (scraped.0 + n, scraped.1 + b);
        })
        .await;
        scrape.push(s);
    }
    idle.push(measure("idle", pid, ticks, tokio::time::sleep(window)).await);
    delete_vhost().await;

    // Each phase against the mean of the idle windows around it.
    let net = |phase: &[Window]| -> Vec<f64> {
        phase
            .iter()
            .enumerate()
            .map(|(r, w)| w.per_minute() - (idle[r].per_minute() + idle[r + 1].per_minute()) / 2.0)
            .collect()
    };
    let (warren_net, scrape_net) = (net(&warren), net(&scrape));
    let median = |v: &[f64]| {
        let mut v = v.to_vec();
        v.sort_by(|a, b| a.partial_cmp(b).unwrap());
        v[v.len() / 2]
    };
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
    let per_min = |v: &[Window]| v.iter().map(Window::per_minute).collect::<Vec<_>>();

    let sum = |f: &dyn Fn(&warren::live::BrokerLoad) -> (u64, f64, u64)| {
        warren_calls.iter().map(f).fold((0, 0.0, 0), |a, b| (a.0 + b.0, a.1 + b.1, a.2 + b.2))
    };
    let of = |prefix: &'static str| {
        move |l: &warren::live::BrokerLoad| {
            l.totals
                .iter()
                .filter(|(k, _)| k.starts_with(prefix))
                .fold((0, 0.0, 0), |a, (_, t)| (a.0 + t.calls, a.1 + t.seconds, a.2 + t.bytes))
        }
    };
    let scrapes_warren = sum(&of("prometheus"));
    let listings = sum(&of("management /api/queues"));
    let management = sum(&of("management"));
    let pages_per_listing = queues.div_ceil(500).max(1) as u64;
    let last = warren_calls.last().unwrap();

    let windows: Vec<serde_json::Value> = idle
        .iter()
        .chain(&warren)
        .chain(&scrape)
        .map(|w| json!({"name": w.name, "secs": w.secs, "broker_cpu_secs": w.cpu_secs, "cpu_secs_per_min": w.per_minute()}))
        .collect();
    let summary = json!({
        "queues": queues,
        "rounds": rounds,
        "window_secs": window.as_secs(),
        "idle_cpu_secs_per_min": per_min(&idle),
        "warren_cpu_secs_per_min": per_min(&warren),
        "scrape_cpu_secs_per_min": per_min(&scrape),
        "warren_net_cpu_secs_per_min": warren_net,
        "scrape_net_cpu_secs_per_min": scrape_net,
        "warren_net_median": median(&warren_net),
        "scrape_net_median": median(&scrape_net),
        "warren_over_scrape_medians": median(&warren_net) / median(&scrape_net),
        "warren_over_scrape_means": mean(&warren_net) / mean(&scrape_net),
        "warren": {
            "scrapes": scrapes_warren.0,
            "scrape_wall_secs": scrapes_warren.1,
            "scrape_bytes": scrapes_warren.2,
            "stats_listings": listings.0 / pages_per_listing,
            "listing_pages": listings.0,
            "listing_wall_secs": listings.1,
            "other_management_calls": management.0 - listings.0,
            "other_management_wall_secs": management.1 - listings.1,
            "poll_interval_secs": last.interval_secs,
            "stats_interval_secs": last.stats_interval_secs,
            "stats_reason": last.stats_reason,
            "rates_slower_than_wanted": last.rates_slower_than_wanted,
            "estimated_load": last.estimated_load,
            "prometheus": last.prometheus.reason,
        },
        "scrape": {"scrapes": scraped.0, "bytes": scraped.1},
        "windows": windows,
        "per_call": per_call.json(),
    });
    let path = std::env::var("WARREN_BENCH_JSON").unwrap_or_else(|_| {
        let target = std::env::var("CARGO_TARGET_DIR").unwrap_or_else(|_| "target".into());
        format!("{target}/bench-broker-cost.json")
    });
    std::fs::write(&path, serde_json::to_string_pretty(&summary).unwrap()).expect("write the JSON result");

    let list = |v: &[f64]| v.iter().map(|x| format!("{x:.2}")).collect::<Vec<_>>().join(" ");
    println!(
        "broker_cost: {queues} queues, {rounds} rounds, windows of {} s (broker CPU-seconds per minute, beam.smp)",
        window.as_secs()
    );
    println!("  idle windows              {}", list(&per_min(&idle)));
    println!(
        "  warren (defaults)         {}  net {}  median {:.2}",
        list(&per_min(&warren)),
        list(&warren_net),
        median(&warren_net)
    );
    println!(
        "  scrape every 10 s         {}  net {}  median {:.2}",
        list(&per_min(&scrape)),
        list(&scrape_net),
        median(&scrape_net)
    );
    println!(
        "  warren / scrape (net)     {:.2} (medians), {:.2} (means)",
        median(&warren_net) / median(&scrape_net),
        mean(&warren_net) / mean(&scrape_net)
    );
    println!(
        "  warren: {} scrapes ({:.2} s wall, {} bytes), {} stats listings ({} pages, {:.2} s wall), {} other management calls ({:.2} s); \
         poll every {:.0} s, rates every {:.0} s ({}); own estimate {:.1}% of a core",
        scrapes_warren.0,
        scrapes_warren.1,
        scrapes_warren.2,
        listings.0 / pages_per_listing,
        listings.0,
        listings.1,
        management.0 - listings.0,
        management.1 - listings.1,
        last.interval_secs,
        last.stats_interval_secs,
        last.stats_reason,
        last.estimated_load.unwrap_or_default() * 100.0
    );
    println!("  reference scrape: {} scrapes, {} bytes", scraped.0, scraped.1);
    print_per_call(&per_call);
    println!("  full result: {path}");
}

/// Broker CPU per call, measured on calls made back to back (the broker's idle rate over the
/// same wall time subtracted): far less exposed to other load on a shared broker than minutes-long
/// windows, and the per-minute figures follow from the cadences.
struct PerCall {
    /// (name, broker CPU-s per call, wall s per call, bytes per call)
    calls: Vec<(&'static str, f64, f64, u64)>,
    idle_per_sec: f64,
    /// RabbitMQ 4.x: depth and counters every poll, consumers at their own cadence, and a
    /// metadata listing with a head-timestamp scrape every 300 s (`PollPlan`).
    four: bool,
}

impl PerCall {
    fn get(&self, name: &str) -> (f64, f64) {
        self.calls.iter().find(|c| c.0 == name).map(|c| (c.1, c.2)).unwrap()
    }

    /// Broker CPU-s per minute of warren's defaults and of the reference scrape every 10 s,
    /// and the interval of warren's listing, derived from the per-call figures at the cadences
    /// warren's rules give (`Poller::plan`, `stats_intervals`, `detail_every`; 10 s polls, 5%
    /// budget).
    ///
    /// 3.x: the scrape (depth and consumers) and the small calls every poll; the stats listing,
    /// with its own scrape, at the interval its duration gives under the budget; the
    /// dead-letter topology (bindings and exchanges) every 60 s.
    /// 4.x: depth, counters and the small calls every poll; consumers with them every
    /// `wall / 0.5%` (whole polls, at most 60 s); the metadata listing and a scrape with head
    /// timestamps (and consumers and counters) every 300 s or as the budget allows, and the
    /// topology with it.
    fn per_minute(&self) -> (f64, f64, f64) {
        let (small, small_wall) = self.get("overview + vhosts + alarm check");
        let (reference, _) = self.get("reference scrape (coarse + consumer_count)");
        let (topology, _) = self.get("topology: bindings + exchanges");
        if !self.four {
            let (scrape, scrape_wall) = self.get("warren scrape (default families)");
            // Each listing poll also scrapes, so that depth keeps one source.
            let (listing, listing_wall) = self.get("stats listing (all pages)");
            let cheap_share = (scrape_wall + small_wall) / 10.0;
            let stats_interval = (listing_wall / (0.05 - cheap_share).max(0.005)).max(30.0);
            let warren = 6.0 * (scrape + small) + 60.0 / stats_interval * (listing + scrape) + topology;
            return (warren, 6.0 * reference, stats_interval);
        }
        let (depth, depth_wall) = self.get("warren depth scrape (coarse + counters)");
        let (detail, detail_wall) = self.get("warren scrape with consumers (+ consumer_count)");
        let (meta, meta_wall) = self.get("metadata listing (one call)");
        let (head, head_wall) = self.get("scrape with head timestamps (+ queue_metrics)");
        let cheap_share = (depth_wall + small_wall) / 10.0;
        let listing_every = ((meta_wall + head_wall) / (0.05 - cheap_share).max(0.005)).max(300.0);
        let detail_every = ((detail_wall / 0.005).clamp(10.0, 60.0) / 10.0).ceil() * 10.0;
        let listing_polls = 60.0 / listing_every;
        let detail_polls = (60.0 / detail_every - listing_polls).max(0.0);
        let depth_polls = 6.0 - detail_polls - listing_polls;
        let warren =
            6.0 * small + depth_polls * depth + detail_polls * detail + listing_polls * (meta + head + topology);
        (warren, 6.0 * reference, listing_every)
    }

    /// 4.x: how often consumers are scraped, as `per_minute` derives it.
    fn detail_every(&self) -> Option<f64> {
        let (_, wall) =
            self.calls.iter().find(|c| c.0 == "warren scrape with consumers (+ consumer_count)").map(|c| (c.1, c.2))?;
        Some(((wall / 0.005).clamp(10.0, 60.0) / 10.0).ceil() * 10.0)
    }

    fn json(&self) -> serde_json::Value {
        let (warren, reference, stats_interval) = self.per_minute();
        json!({
            "idle_broker_cpu_per_sec": self.idle_per_sec,
            "calls": self.calls.iter().map(|c| json!({"call": c.0, "broker_cpu_secs": c.1, "wall_secs": c.2, "bytes": c.3})).collect::<Vec<_>>(),
            "derived_stats_interval_secs": stats_interval,
            "derived_detail_interval_secs": self.detail_every(),
            "derived_warren_cpu_secs_per_min": warren,
            "derived_scrape_cpu_secs_per_min": reference,
            "derived_ratio": warren / reference,
        })
    }
}

fn print_per_call(p: &PerCall) {
    println!("  per call (back to back, idle {:.3} CPU-s/s subtracted):", p.idle_per_sec);
    for (name, cpu, wall, bytes) in &p.calls {
        println!("    {name:45} broker CPU {cpu:.3} s, wall {wall:.3} s, {bytes} bytes");
    }
    let (warren, reference, every) = p.per_minute();
    let detail = p.detail_every().map(|d| format!(", consumers every {d:.0} s")).unwrap_or_default();
    println!(
        "  derived per minute: warren {warren:.2} CPU-s (listing every {every:.0} s{detail}), scrape every 10 s {reference:.2} CPU-s, ratio {:.2}",
        warren / reference
    );
}

async fn per_call_costs(broker: &warren::config::BrokerConfig, pid: u32, ticks: f64) -> PerCall {
    let idle_start = beam_cpu_ticks(pid);
    tokio::time::sleep(Duration::from_secs(20)).await;
    let idle_per_sec = (beam_cpu_ticks(pid) - idle_start) / ticks / 20.0;
    let http = reqwest::Client::builder().gzip(true).build().unwrap();
    let client = warren::broker::management::ManagementClient::new(broker);
    let vhost = warren::broker::management::encode_segment(VHOST);
    let reference_url = format!(
        "{}/metrics/detailed?vhost={vhost}&family=queue_coarse_metrics&family=queue_consumer_count",
        endpoints().prometheus
    );
    // On 4.x warren scrapes depth and counters every poll, consumers at their own cadence, and
    // head timestamps with each metadata listing (`PollPlan`).
    let (overview, _) = client.overview().await.expect("overview");
    let four = overview.rabbitmq_version.as_deref().is_some_and(|v| !v.starts_with('3'));
    let scrape_url = |families| {
        let path = warren::broker::prometheus::PrometheusClient::scrape_path(&[VHOST.to_string()], families);
        format!("{}/{path}", endpoints().prometheus)
    };
    use warren::broker::prometheus::Families;
    let detail = Families { consumers: true, counters: four, head_timestamps: false };
    let (warren_url, depth_url, head_url) = (
        scrape_url(detail),
        scrape_url(Families { counters: four, ..Families::default() }),
        scrape_url(Families { head_timestamps: true, ..detail }),
    );

    let mut calls = Vec::new();
    // (cpu, wall, bytes) summed over `n` calls, each measured on its own
    async fn measure_one<F: std::future::Future<Output = u64>>(
        pid: u32,
        ticks: f64,
        idle: f64,
        f: F,
    ) -> (f64, f64, u64) {
        let (cpu0, t0) = (beam_cpu_ticks(pid), Instant::now());
        let bytes = f.await;
        let wall = t0.elapsed().as_secs_f64();
        ((beam_cpu_ticks(pid) - cpu0) / ticks - idle * wall, wall, bytes)
    }
    let mut scrapes = vec![
        ("reference scrape (coarse + consumer_count)", &reference_url),
        ("scrape with head timestamps (+ queue_metrics)", &head_url),
    ];
    if four {
        scrapes.push(("warren depth scrape (coarse + counters)", &depth_url));
        scrapes.push(("warren scrape with consumers (+ consumer_count)", &warren_url));
    } else {
        scrapes.push(("warren scrape (default families)", &warren_url));
    }
    for (name, url) in scrapes {
        let n = 10;
        let mut total = (0.0, 0.0, 0);
        for _ in 0..n {
            let (c, w, b) = measure_one(pid, ticks, idle_per_sec, async {
                http.get(url.as_str()).send().await.unwrap().bytes().await.unwrap().len() as u64
            })
            .await;
            total = (total.0 + c, total.1 + w, total.2 + b);
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        calls.push((name, total.0 / n as f64, total.1 / n as f64, total.2 / n));
    }
    {
        let n = 10;
        let mut total = (0.0, 0.0, 0);
        for _ in 0..n {
            let (c, w, b) = measure_one(pid, ticks, idle_per_sec, async {
                let (_, a) = client.overview().await.unwrap();
                let (_, b) = client.vhosts().await.unwrap();
                let c = client.get::<serde_json::Value>("api/health/checks/alarms").await.map(|(_, n)| n).unwrap_or(0);
                (a + b + c) as u64
            })
            .await;
            total = (total.0 + c, total.1 + w, total.2 + b);
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        calls.push(("overview + vhosts + alarm check", total.0 / n as f64, total.1 / n as f64, total.2 / n));
    }
    for (name, light) in [("stats listing (all pages)", false), ("light listing (all pages)", true)] {
        // The management API caches a listing for about 5x its compute time: space them out as
        // warren does, so that each one is computed.
        let n = 3;
        let mut total = (0.0, 0.0, 0);
        for _ in 0..n {
            tokio::time::sleep(Duration::from_secs(25)).await;
            let (c, w, b) = measure_one(pid, ticks, idle_per_sec, async {
                let mut bytes = 0;
                let mut page = 1;
                loop {
                    let (body, size) = client.queues_page(VHOST, page, light).await.unwrap();
                    bytes += size as u64;
                    if page >= body.page_count {
                        break bytes;
                    }
                    page += 1;
                }
            })
            .await;
            total = (total.0 + c, total.1 + w, total.2 + b);
        }
        calls.push((name, total.0 / n as f64, total.1 / n as f64, total.2 / n));
    }
    {
        // What warren lists on 4.x: metadata in one call, and the policies it resolves them with.
        let n = 3;
        let mut total = (0.0, 0.0, 0);
        for _ in 0..n {
            tokio::time::sleep(Duration::from_secs(10)).await;
            let (c, w, b) = measure_one(pid, ticks, idle_per_sec, async {
                let (_, a) = client.queues_metadata(VHOST).await.unwrap();
                let (_, b) = client.policies("policies", VHOST).await.unwrap();
                let (_, c) = client.policies("operator-policies", VHOST).await.unwrap();
                (a + b + c) as u64
            })
            .await;
            total = (total.0 + c, total.1 + w, total.2 + b);
        }
        calls.push(("metadata listing (one call)", total.0 / n as f64, total.1 / n as f64, total.2 / n));
    }
    {
        // The dead-letter topology: every 60 s on 3.x, with the metadata listing on 4.x.
        let n = 4;
        let mut total = (0.0, 0.0, 0);
        for _ in 0..n {
            tokio::time::sleep(Duration::from_secs(3)).await;
            let (c, w, b) = measure_one(pid, ticks, idle_per_sec, async {
                let (_, a) = client.bindings(VHOST).await.unwrap();
                let (_, b) = client.exchanges(VHOST).await.unwrap();
                (a + b) as u64
            })
            .await;
            total = (total.0 + c, total.1 + w, total.2 + b);
        }
        calls.push(("topology: bindings + exchanges", total.0 / n as f64, total.1 / n as f64, total.2 / n));
    }
    let p = PerCall { calls, idle_per_sec, four };
    print_per_call(&p);
    p
}
