//! What the client listings cost the broker (issue 20): broker CPU per call of
//! `/api/connections`, `/api/channels` and `/api/consumers` (warren's `columns=`) at 1,000
//! connections and 5,000 channels, made by the benchmark on the broker, next to the queue
//! listing's, and per minute at the cadence warren would choose (`clients_interval`).
//!
//! The broker's CPU is `utime + stime` of its `beam.smp` from `/proc/<pid>/stat` (as in
//! `broker_cost.rs`), idle load measured first and subtracted. Defaults: the 4.0.5 node of
//! `.ci/rabbitmq4.sh` (`WARREN_BENCH_MANAGEMENT_URL`, `WARREN_BENCH_AMQP_URL`,
//! `WARREN_BENCH_BROKER_PID`, default `.ci/rabbitmq4.sh pid`), `WARREN_BENCH_CONNECTIONS`
//! (1000) and `WARREN_BENCH_CHANNELS_PER_CONNECTION` (5). Each connection declares one queue
//! and consumes it on its first channel (prefetch 5), so the consumers listing has 1,000 rows.

use std::time::{Duration, Instant};

use lapin::options::{BasicConsumeOptions, BasicQosOptions, QueueDeclareOptions};
use lapin::types::FieldTable;
use lapin::{Connection, ConnectionProperties};

const VHOST: &str = "warren-bench-clients";

fn var(name: &str, default: &str) -> String {
    std::env::var(name).ok().filter(|v| !v.is_empty()).unwrap_or_else(|| default.to_string())
}

fn clock_ticks() -> f64 {
    let out = std::process::Command::new("getconf").arg("CLK_TCK").output().expect("getconf");
    String::from_utf8_lossy(&out.stdout).trim().parse().unwrap_or(100.0)
}

fn broker_pid() -> u32 {
    let pid = std::env::var("WARREN_BENCH_BROKER_PID").ok().filter(|p| !p.is_empty()).unwrap_or_else(|| {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/.ci/rabbitmq4.sh");
        let out = std::process::Command::new(script).arg("pid").output().expect(".ci/rabbitmq4.sh pid");
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    });
    pid.parse().unwrap_or_else(|_| panic!("not a broker pid: {pid:?} (set WARREN_BENCH_BROKER_PID)"))
}

fn cpu_ticks(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("read /proc/<pid>/stat");
    let after = &stat[stat.rfind(')').expect("stat format") + 2..];
    let fields: Vec<&str> = after.split(' ').collect();
    fields[11].parse::<f64>().unwrap() + fields[12].parse::<f64>().unwrap()
}

fn main() {
    let runtime = tokio::runtime::Runtime::new().expect("tokio runtime");
    runtime.block_on(run());
}

async fn management(
    http: &reqwest::Client,
    base: &str,
    method: reqwest::Method,
    path: &str,
    body: Option<serde_json::Value>,
) {
    let mut request = http.request(method, format!("{base}{path}")).basic_auth("guest", Some("guest"));
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().await.expect("the management API answers");
    assert!(response.status().is_success() || response.status() == 404, "{path}: {}", response.status());
}

async fn run() {
    let base = var("WARREN_BENCH_MANAGEMENT_URL", "http://127.0.0.1:15673").trim_end_matches('/').to_string();
    let amqp = var("WARREN_BENCH_AMQP_URL", "amqp://guest:guest@127.0.0.1:5673").trim_end_matches('/').to_string();
    let connections: usize = var("WARREN_BENCH_CONNECTIONS", "1000").parse().expect("a number");
    let per_connection: usize = var("WARREN_BENCH_CHANNELS_PER_CONNECTION", "5").parse().expect("a number");
    let pid = broker_pid();
    let ticks = clock_ticks();
    let http = reqwest::Client::builder().gzip(true).build().unwrap();
    let vhost = warren::broker::management::encode_segment(VHOST);
    management(&http, &base, reqwest::Method::DELETE, &format!("/api/vhosts/{vhost}"), None).await;
    management(&http, &base, reqwest::Method::PUT, &format!("/api/vhosts/{vhost}"), Some(serde_json::json!({}))).await;
    let permissions = serde_json::json!({"configure": ".*", "write": ".*", "read": ".*"});
    management(&http, &base, reqwest::Method::PUT, &format!("/api/permissions/{vhost}/guest"), Some(permissions)).await;

    let started = Instant::now();
    let mut held = Vec::with_capacity(connections);
    let mut consumers = Vec::with_capacity(connections);
    for i in 0..connections {
        let properties = ConnectionProperties::default().with_connection_name(format!("bench-client-{i}").into());
        let connection = Connection::connect(&format!("{amqp}/{vhost}"), properties).await.expect("connect");
        let mut channels = Vec::with_capacity(per_connection);
        for c in 0..per_connection {
            let channel = connection.create_channel().await.expect("channel");
            if c == 0 {
                let queue = format!("q{i}");
                channel
                    .queue_declare(queue.as_str().into(), QueueDeclareOptions::default(), FieldTable::default())
                    .await
                    .expect("declare");
                channel.basic_qos(5, BasicQosOptions::default()).await.expect("qos");
                // Kept: a consumer dropped is cancelled.
                let consumer = channel
                    .basic_consume(
                        queue.as_str().into(),
                        "bench".into(),
                        BasicConsumeOptions::default(),
                        FieldTable::default(),
                    )
                    .await
                    .expect("consume");
                consumers.push(consumer);
            }
            channels.push(channel);
        }
        held.push((connection, channels));
        if (i + 1) % 100 == 0 {
            eprintln!("{} connections, {:.0} s", i + 1, started.elapsed().as_secs_f64());
        }
    }
    // Let the management database catch up with the new objects (stats are emitted every 5 s).
    tokio::time::sleep(Duration::from_secs(15)).await;
    let idle_start = cpu_ticks(pid);
    tokio::time::sleep(Duration::from_secs(20)).await;
    let idle_per_sec = (cpu_ticks(pid) - idle_start) / ticks / 20.0;
    eprintln!("idle: {:.3} broker CPU-s per s", idle_per_sec);

    use warren::broker::clients::{CHANNEL_COLUMNS, CONNECTION_COLUMNS, CONSUMER_COLUMNS};
    use warren::broker::management::QUEUE_COLUMNS;
    let calls = [
        ("connections", format!("/api/connections?columns={CONNECTION_COLUMNS}")),
        ("channels", format!("/api/channels?columns={CHANNEL_COLUMNS}")),
        ("consumers", format!("/api/consumers?columns={CONSUMER_COLUMNS}")),
        (
            "queues (stats listing, one page)",
            format!("/api/queues/{vhost}?page=1&page_size=500&columns={QUEUE_COLUMNS}"),
        ),
    ];
    let mut results = Vec::new();
    for (name, path) in &calls {
        let n = 5;
        let (mut cpu, mut wall, mut bytes, mut rows) = (0.0, 0.0, 0usize, 0usize);
        for _ in 0..n {
            let (c0, t0) = (cpu_ticks(pid), Instant::now());
            let response = http.get(format!("{base}{path}")).basic_auth("guest", Some("guest")).send().await.unwrap();
            assert!(response.status().is_success(), "{path}: {}", response.status());
            let body = response.bytes().await.unwrap();
            let w = t0.elapsed().as_secs_f64();
            cpu += (cpu_ticks(pid) - c0) / ticks - idle_per_sec * w;
            wall += w;
            bytes += body.len();
            let value: serde_json::Value = serde_json::from_slice(&body).unwrap();
            rows = value.as_array().map(Vec::len).or_else(|| value["items"].as_array().map(Vec::len)).unwrap_or(0);
            // Past the listing cache (5x the compute time): each call is computed afresh.
            tokio::time::sleep(Duration::from_secs(3)).await;
        }
        let (cpu, wall, bytes) = (cpu / n as f64, wall / n as f64, bytes / n);
        eprintln!("{name}: {rows} rows, {cpu:.3} broker CPU-s, {wall:.3} s wall, {bytes} bytes (mean of {n})");
        results.push((*name, rows, cpu, wall, bytes));
    }
    // warren's cadence for the three client calls together at the defaults (10 s poll, 5%).
    let client_wall: f64 = results[..3].iter().map(|r| r.3).sum();
    let client_cpu: f64 = results[..3].iter().map(|r| r.2).sum();
    let (every, by_budget) = warren::poller::clients_interval(
        client_wall,
        Duration::from_secs(10),
        warren::config::DEFAULT_BROKER_CPU_BUDGET,
        Duration::from_secs(10),
    );
    let per_minute = client_cpu * 60.0 / every.as_secs_f64();
    println!("connections {connections}, channels {}, consumers {connections}", connections * per_connection);
    for (name, rows, cpu, wall, bytes) in &results {
        println!("{name:<34} rows {rows:>5}  broker CPU {cpu:.3} s  wall {wall:.3} s  {bytes} bytes");
    }
    println!(
        "client listings every {:.0} s ({}): {per_minute:.3} broker CPU-s per minute ({:.2}% of a core)",
        every.as_secs_f64(),
        if by_budget { "spaced by the budget" } else { "the minimum interval" },
        per_minute / 60.0 * 100.0
    );
    drop(consumers);
    for (connection, _) in held {
        if let Err(e) = connection.close(200, "bench done".into()).await {
            eprintln!("closing a bench connection: {e}");
        }
    }
    management(&http, &base, reqwest::Method::DELETE, &format!("/api/vhosts/{vhost}"), None).await;
}
