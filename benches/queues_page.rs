//! `cargo bench --bench queues_page`: warren's queue list against the broker's own, on a real
//! RabbitMQ holding 10,000 queues, measured in the same run.
//!
//! It creates the vhost `warren-bench-queues` (deleting a leftover of a crashed run first) with
//! `WARREN_BENCH_QUEUES` (10,000) classic queues, declared over `WARREN_BENCH_CONNECTIONS` (8) AMQP
//! connections in parallel, one message in every tenth and a dead-letter exchange on every
//! fiftieth. It starts warren in this process (`warren::run` on a loopback port, a fresh SQLite
//! file) watching only that vhost, waits until warren's live state lists every queue with rates
//! known (two polls), then takes `WARREN_BENCH_ROUNDS` (20) rounds. Each round requests, one after
//! another: warren's HTML page `/queues` and JSON `/api/v1/queues` with 100 rows, sorted by every
//! sortable column, plus three filtered listings; and the broker's
//! `/api/queues/{vhost}?page=1&page_size=100&sort=messages`. Interleaving the two sides in every
//! round exposes both to the same background noise (warren's own poll of the broker included).
//!
//! "Server time" is the same for both sides: the loopback HTTP round trip seen by one reqwest
//! client with a kept-alive connection, from sending the request to the last byte of the body,
//! uncompressed (no `Accept-Encoding`). It includes HTTP handling on both sides and the client's
//! reading of the body, which are small next to the work behind either answer.
//!
//! The vhost is deleted at the end, also after a failure or Ctrl-C (unless
//! `WARREN_BENCH_KEEP_VHOST=1`, which also reuses an existing vhost with the right number of queues,
//! to save the minute of set-up while iterating). The summary goes to stdout, the full result to
//! `target/bench-queues-page.json` (or `$WARREN_BENCH_JSON`).

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use lapin::options::QueueDeclareOptions;
use lapin::options::{BasicPublishOptions, ConfirmSelectOptions, ExchangeDeclareOptions, QueueBindOptions};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{BasicProperties, Connection, ConnectionProperties, ExchangeKind};
use serde_json::{json, Value};
use tokio::sync::oneshot;
use warren::broker::management::encode_segment;
use warren::config::Config;
use warren::web::query::SORT_KEYS;

const MANAGEMENT: &str = "http://127.0.0.1:15672";
const AMQP: &str = "amqp://guest:guest@127.0.0.1:5672";
const VHOST: &str = "warren-bench-queues";
const PER_PAGE: usize = 100;
/// Name prefixes, so that a name filter matches a realistic share of the queues.
const PREFIXES: [&str; 5] = ["orders", "billing", "shipping", "audit", "email"];

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
    queues: usize,
    connections: usize,
    rounds: usize,
    poll_interval_secs: u64,
    keep_vhost: bool,
}

fn main() {
    let settings = Settings {
        queues: env_num("WARREN_BENCH_QUEUES", 10_000) as usize,
        connections: env_num("WARREN_BENCH_CONNECTIONS", 8).max(1) as usize,
        rounds: env_num("WARREN_BENCH_ROUNDS", 20).max(2) as usize,
        poll_interval_secs: env_num("WARREN_BENCH_POLL_SECS", warren::config::DEFAULT_POLL_INTERVAL_SECS),
        keep_vhost: env_num("WARREN_BENCH_KEEP_VHOST", 0) != 0,
    };
    let runtime = tokio::runtime::Runtime::new().expect("tokio runtime");
    let ok = runtime.block_on(async {
        // The benchmark runs as a task so that Ctrl-C and a panic both still reach the clean-up.
        let run = tokio::spawn(bench(settings));
        let outcome = tokio::select! {
            joined = run => match joined {
                Ok(Ok(())) => true,
                Ok(Err(e)) => { eprintln!("benchmark failed: {e:#}"); false }
                Err(e) => { eprintln!("benchmark panicked: {e}"); false }
            },
            _ = tokio::signal::ctrl_c() => { eprintln!("interrupted"); false }
        };
        if !settings.keep_vhost {
            eprintln!("deleting vhost {VHOST} ...");
            if let Err(e) =
                management(reqwest::Method::DELETE, &format!("vhosts/{}", encode_segment(VHOST)), None).await
            {
                eprintln!("could not delete vhost {VHOST}: {e:#}");
            }
        }
        outcome
    });
    // warren's tasks (poller, server) are cut off with the runtime.
    runtime.shutdown_timeout(Duration::from_secs(2));
    if !ok {
        std::process::exit(1);
    }
}

/// One call to the management API as the administrator; 404 on DELETE counts as done.
async fn management(method: reqwest::Method, path: &str, body: Option<Value>) -> anyhow::Result<()> {
    let mut request = reqwest::Client::new()
        .request(method.clone(), format!("{MANAGEMENT}/api/{path}"))
        .basic_auth("guest", Some("guest"));
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().await.map_err(|e| anyhow::anyhow!("management API at {MANAGEMENT}: {e}"))?;
    let status = response.status();
    anyhow::ensure!(
        status.is_success() || (method == reqwest::Method::DELETE && status == 404),
        "{method} {path}: {status}"
    );
    Ok(())
}

fn queue_name(i: usize) -> String {
    format!("{}.{i:05}", PREFIXES[i % PREFIXES.len()])
}

/// How many queues the vhost holds now, or `None` when it does not exist.
async fn existing_queues(http: &reqwest::Client) -> Option<u64> {
    let url = format!("{MANAGEMENT}/api/vhosts/{}?columns=name", encode_segment(VHOST));
    let response = http.get(url).basic_auth("guest", Some("guest")).send().await.ok()?;
    if !response.status().is_success() {
        return None;
    }
    let url = format!("{MANAGEMENT}/api/queues/{}?page=1&page_size=1&columns=name", encode_segment(VHOST));
    let page: Value = http.get(url).basic_auth("guest", Some("guest")).send().await.ok()?.json().await.ok()?;
    page["total_count"].as_u64()
}

/// Declares queues `part`, `part + parts`, ... on one connection; every tenth gets one
/// timestamped message, every fiftieth dead-letters to `dlx`.
async fn declare_share(part: usize, parts: usize, queues: usize) -> anyhow::Result<()> {
    let uri = format!("{AMQP}/{}", encode_segment(VHOST));
    let connection = Connection::connect(&uri, ConnectionProperties::default()).await?;
    let channel = connection.create_channel().await?;
    channel.confirm_select(ConfirmSelectOptions::default()).await?;
    let durable = QueueDeclareOptions { durable: true, ..Default::default() };
    let now = chrono::Utc::now().timestamp() as u64;
    let mut confirms = Vec::new();
    for i in (part..queues).step_by(parts) {
        let name = queue_name(i);
        let mut arguments = FieldTable::default();
        if i % 50 == 0 {
            arguments.insert("x-dead-letter-exchange".into(), AMQPValue::LongString("dlx".into()));
        }
        channel.queue_declare(name.as_str().into(), durable, arguments).await?;
        if i % 10 == 0 {
            let properties = BasicProperties::default().with_timestamp(now);
            confirms.push(
                channel
                    .basic_publish(
                        "".into(),
                        name.as_str().into(),
                        BasicPublishOptions::default(),
                        b"bench",
                        properties,
                    )
                    .await?,
            );
        }
    }
    for confirm in confirms {
        confirm.await?;
    }
    connection.close(200, "done".into()).await?;
    Ok(())
}

async fn create_vhost(settings: &Settings) -> anyhow::Result<f64> {
    let vhost = encode_segment(VHOST);
    management(reqwest::Method::DELETE, &format!("vhosts/{vhost}"), None).await?;
    management(reqwest::Method::PUT, &format!("vhosts/{vhost}"), Some(json!({}))).await?;
    management(
        reqwest::Method::PUT,
        &format!("permissions/{vhost}/guest"),
        Some(json!({"configure": ".*", "write": ".*", "read": ".*"})),
    )
    .await?;
    let started = Instant::now();
    // The dead-letter target first, so every queue's DLX exists.
    {
        let uri = format!("{AMQP}/{vhost}");
        let connection = Connection::connect(&uri, ConnectionProperties::default()).await?;
        let channel = connection.create_channel().await?;
        channel
            .exchange_declare(
                "dlx".into(),
                ExchangeKind::Fanout,
                ExchangeDeclareOptions::default(),
                FieldTable::default(),
            )
            .await?;
        let durable = QueueDeclareOptions { durable: true, ..Default::default() };
        channel.queue_declare("dead-letters".into(), durable, FieldTable::default()).await?;
        channel
            .queue_bind(
                "dead-letters".into(),
                "dlx".into(),
                "".into(),
                QueueBindOptions::default(),
                FieldTable::default(),
            )
            .await?;
        connection.close(200, "done".into()).await?;
    }
    let parts = settings.connections;
    let tasks: Vec<_> = (0..parts).map(|part| tokio::spawn(declare_share(part, parts, settings.queues - 1))).collect();
    for task in tasks {
        task.await??;
    }
    Ok(started.elapsed().as_secs_f64())
}

/// One timed GET: the round trip to the last byte of the body. Fails on a non-2xx answer.
async fn timed_get(http: &reqwest::Client, url: &str, auth: bool) -> anyhow::Result<(f64, usize, Value)> {
    let started = Instant::now();
    let mut request = http.get(url);
    if auth {
        request = request.basic_auth("guest", Some("guest"));
    }
    let response = request.send().await?;
    let status = response.status();
    let body = response.bytes().await?;
    let ms = started.elapsed().as_secs_f64() * 1e3;
    anyhow::ensure!(status.is_success(), "GET {url}: {status}");
    // Only JSON bodies are looked into (row counts); HTML is only timed.
    let value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    Ok((ms, body.len(), value))
}

/// What one timed variant is: a label and a URL.
struct Variant {
    label: String,
    side: &'static str,
    url: String,
    /// Rows the answer must hold (JSON only): the listing really is 100 rows, or all matches.
    rows: Option<usize>,
}

fn percentile(sorted: &[f64], q: f64) -> f64 {
    sorted[((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len()) - 1]
}

fn summary(samples: &[f64]) -> Value {
    let mut v = samples.to_vec();
    v.sort_by(f64::total_cmp);
    let r = |x: f64| (x * 100.0).round() / 100.0;
    json!({"p50": r(percentile(&v, 0.5)), "p95": r(percentile(&v, 0.95)), "max": r(v[v.len() - 1]),
        "mean": r(v.iter().sum::<f64>() / v.len() as f64), "n": v.len()})
}

async fn bench(settings: Settings) -> anyhow::Result<()> {
    let http = reqwest::Client::builder().no_gzip().build()?;
    let expected = settings.queues as u64;
    println!("warren queues page benchmark: {} queues in vhost {VHOST} on the real broker", settings.queues);

    // ---- The vhost and its queues.
    let setup_s = if settings.keep_vhost && existing_queues(&http).await == Some(expected) {
        eprintln!("reusing vhost {VHOST} with {expected} queues");
        None
    } else {
        eprintln!("creating {} queues over {} connections ...", settings.queues, settings.connections);
        let secs = create_vhost(&settings).await?;
        eprintln!("  created in {secs:.1} s ({:.0} queues/s)", settings.queues as f64 / secs);
        Some(secs)
    };

    // ---- warren, in this process, watching only that vhost.
    let dir = tempfile::tempdir()?;
    let toml = format!(
        "database = {:?}\n[[brokers]]\nname = \"local\"\nmanagement_url = \"{MANAGEMENT}\"\n\
         vhosts_include = [{VHOST:?}]\npoll_interval_secs = {}\nrequest_timeout_secs = 120\n",
        dir.path().join("warren.db").display().to_string(),
        settings.poll_interval_secs
    );
    let config = Config::from_toml(&toml)?;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let warren = format!("http://{}", listener.local_addr()?);
    let (stop, stopped) = oneshot::channel::<()>();
    let server = tokio::spawn(warren::run(config, listener, async move {
        let _ = stopped.await;
    }));

    // Wait until warren lists every queue and has rates (its second poll), so that every
    // column sorts real values. A deadline, not a fixed sleep.
    let waiting = Instant::now();
    let deadline = Duration::from_secs(300);
    loop {
        let url = format!("{warren}/api/v1/queues?vhost={VHOST}&per_page=1&sort=publish_rate");
        if let Ok((_, _, body)) = timed_get(&http, &url, false).await {
            let total = body["total"].as_u64();
            let rated = body["items"][0]["publish_rate"].is_number();
            if total == Some(expected) && rated {
                break;
            }
        }
        anyhow::ensure!(
            waiting.elapsed() < deadline,
            "warren did not list {expected} queues with rates in {deadline:?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let ready_s = waiting.elapsed().as_secs_f64();
    let brokers: Value = timed_get(&http, &format!("{warren}/api/v1/brokers"), false).await?.2;
    let last_poll_ms = brokers[0]["status"]["last_poll_ms"].as_u64();
    eprintln!("warren listed all {expected} queues with rates after {ready_s:.1} s (last poll {last_poll_ms:?} ms)");

    // ---- The variants: every sortable column on both warren pages, three filters, the broker.
    let mut variants = Vec::new();
    let page = |path: &str, query: &str| format!("{warren}{path}?vhost={VHOST}&per_page={PER_PAGE}{query}");
    for key in SORT_KEYS {
        for (side, path) in [("warren html", "/queues"), ("warren json", "/api/v1/queues")] {
            variants.push(Variant {
                label: format!("sort={key}"),
                side,
                url: page(path, &format!("&sort={key}")),
                rows: (side == "warren json").then_some(PER_PAGE),
            });
        }
    }
    let filters = [
        // A fifth of the queues, by most messages.
        ("name=billing, sort=total", "&name=billing&sort=total".to_string(), PER_PAGE),
        // Eleven queues.
        ("name=0042, sort=ready", "&name=0042&sort=ready".to_string(), 11.min(settings.queues)),
        // Dead-letter queues only (one).
        ("dlq=true", "&dlq=true".to_string(), 1),
    ];
    for (label, query, rows) in &filters {
        for (side, path) in [("warren html", "/queues"), ("warren json", "/api/v1/queues")] {
            variants.push(Variant {
                label: label.to_string(),
                side,
                url: page(path, query),
                rows: (side == "warren json").then_some(*rows),
            });
        }
    }
    let broker_url =
        format!("{MANAGEMENT}/api/queues/{}?page=1&page_size={PER_PAGE}&sort=messages", encode_segment(VHOST));
    variants.push(Variant { label: "sort=messages".into(), side: "broker", url: broker_url, rows: Some(PER_PAGE) });

    // One untimed pass warms connections and checks the answers.
    for v in &variants {
        let (_, _, body) = timed_get(&http, &v.url, v.side == "broker").await?;
        if let Some(rows) = v.rows {
            let items = body["items"].as_array().map(|a| a.len());
            anyhow::ensure!(items == Some(rows), "{} {}: {items:?} rows, expected {rows}", v.side, v.label);
        }
    }

    let mut times: Vec<Vec<f64>> = vec![Vec::with_capacity(settings.rounds); variants.len()];
    let mut bytes = vec![0usize; variants.len()];
    let started = Instant::now();
    for round in 0..settings.rounds {
        for (i, v) in variants.iter().enumerate() {
            let (ms, size, _) = timed_get(&http, &v.url, v.side == "broker").await?;
            times[i].push(ms);
            bytes[i] = size;
        }
        let broker_ms = times[variants.len() - 1].last().copied().unwrap_or(0.0);
        eprintln!("  round {}/{}: broker {broker_ms:.0} ms", round + 1, settings.rounds);
    }
    let measure_s = started.elapsed().as_secs_f64();
    let _ = stop.send(());
    let _ = tokio::time::timeout(Duration::from_secs(15), server).await;

    // ---- Report.
    let broker_times = &times[variants.len() - 1];
    let broker = summary(broker_times);
    let broker_p95 = broker["p95"].as_f64().unwrap();
    let broker_p50 = broker["p50"].as_f64().unwrap();
    println!(
        "\n{} rounds in {measure_s:.0} s; server time = loopback HTTP round trip to the last body byte, uncompressed",
        settings.rounds
    );
    println!(
        "  {:<12} {:<28} {:>9} {:>9} {:>9} {:>9}",
        "side", "request (100 rows)", "p50 ms", "p95 ms", "max ms", "KB"
    );
    let mut rows = Vec::new();
    let mut worst: std::collections::BTreeMap<&str, f64> = Default::default();
    for (i, v) in variants.iter().enumerate() {
        let s = summary(&times[i]);
        println!(
            "  {:<12} {:<28} {:>9.2} {:>9.2} {:>9.2} {:>9.1}",
            v.side,
            v.label,
            s["p50"].as_f64().unwrap(),
            s["p95"].as_f64().unwrap(),
            s["max"].as_f64().unwrap(),
            bytes[i] as f64 / 1024.0
        );
        if v.side != "broker" {
            let p95 = s["p95"].as_f64().unwrap();
            let w = worst.entry(v.side).or_insert(0.0);
            *w = w.max(p95);
        }
        rows.push(json!({"side": v.side, "request": v.label, "url": v.url, "ms": s, "body_bytes": bytes[i]}));
    }
    let all_warren: Vec<f64> = variants
        .iter()
        .enumerate()
        .filter(|(_, v)| v.side != "broker")
        .flat_map(|(i, _)| times[i].iter().copied())
        .collect();
    let warren_all = summary(&all_warren);
    println!("\n  broker /api/queues/{{vhost}}?page=1&page_size=100&sort=messages: p50 {broker_p50:.1} ms, p95 {broker_p95:.1} ms");
    let mut ratios = serde_json::Map::new();
    for (side, p95) in &worst {
        let ratio = broker_p95 / p95;
        println!(
            "  {side}: slowest variant p95 {p95:.1} ms => broker p95 / warren p95 = {ratio:.0}x (target >= 10x: {})",
            if ratio >= 10.0 { "met" } else { "MISSED" }
        );
        ratios.insert(format!("{side} (slowest variant p95)"), json!((ratio * 10.0).round() / 10.0));
    }
    println!(
        "  every warren request together: p50 {:.1} ms, p95 {:.1} ms",
        warren_all["p50"].as_f64().unwrap(),
        warren_all["p95"].as_f64().unwrap()
    );
    let report = json!({
        "settings": {"queues": settings.queues, "vhost": VHOST, "rounds": settings.rounds,
            "connections": settings.connections, "warren_poll_interval_secs": settings.poll_interval_secs,
            "per_page": PER_PAGE, "cores": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0)},
        "server_time": "loopback HTTP round trip measured by one reqwest client (kept-alive connection), request sent to last body byte, no compression",
        "setup_seconds": setup_s,
        "warren_ready_seconds": ready_s,
        "warren_last_poll_ms": last_poll_ms,
        "broker_sort_messages_ms": broker,
        "warren_all_requests_ms": warren_all,
        "ratio_broker_p95_over_warren_p95": ratios,
        "variants": rows,
    });
    let path = std::env::var_os("WARREN_BENCH_JSON").map(PathBuf::from).unwrap_or_else(|| {
        std::env::var_os("CARGO_TARGET_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target"))
            .join("bench-queues-page.json")
    });
    std::fs::write(&path, serde_json::to_string_pretty(&report)?)?;
    println!("\nreport: {}", path.display());
    Ok(())
}
