//! Custody on the real broker (issue 18's benchmarks), in one run: intake of
//! `WARREN_BENCH_MESSAGES` (default 100,000) persistent 1 KiB messages (msg/s, and bytes on
//! disk per message), a listing with its groups and a text search over all of them (server time,
//! as the API computes it), and a replay of all of them to a queue against the broker's dynamic
//! shovel moving the same number back.
//!
//! `cargo bench --bench custody` (RabbitMQ with the management and shovel plugins at
//! 127.0.0.1, guest/guest). It uses the vhost `warren-bench-custody` and a database in a
//! temporary directory, and deletes both at the end. Results also go to
//! `target/bench-custody.json` (or `$WARREN_BENCH_JSON`).

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use lapin::options::{BasicPublishOptions, ConfirmSelectOptions, QueueDeclareOptions};
use lapin::types::{AMQPValue, FieldTable};
use lapin::BasicProperties;
use serde_json::json;
use tokio_util::sync::CancellationToken;
use warren::config::BrokerConfig;
use warren::dlq::custody::{self, Custody, CustodySelection, CustodyTarget, ReplayRequest};
use warren::dlq::message::Filter;
use warren::dlq::{self, Progress};

#[path = "support/shovel.rs"]
mod shovel;
#[path = "support/broker.rs"]
mod support;

use support::{broker, env_or, management};

const VHOST: &str = "warren-bench-custody";

/// `n` dead letters of `orders`, 1 KiB bodies, persistent, into `orders.dlq`.
async fn fill(broker: &BrokerConfig, n: usize) {
    let connection = dlq::connect(broker, VHOST).await.expect("AMQP");
    let channel = connection.create_channel().await.unwrap();
    let durable = QueueDeclareOptions { durable: true, ..Default::default() };
    for queue in ["orders.dlq", "orders"] {
        channel.queue_declare(queue.into(), durable, FieldTable::default()).await.unwrap();
    }
    channel.confirm_select(ConfirmSelectOptions::default()).await.unwrap();
    let mut confirms = Vec::with_capacity(1000);
    for i in 0..n {
        let mut headers = FieldTable::default();
        headers.insert("x-first-death-queue".into(), AMQPValue::LongString("orders".into()));
        headers.insert("x-first-death-reason".into(), AMQPValue::LongString("rejected".into()));
        let error = if i % 10 == 0 { "card declined" } else { "sku GIFT-CARD-LEGACY is not in the catalogue" };
        headers.insert("x-exception-message".into(), AMQPValue::LongString(error.into()));
        // Valid JSON of exactly 1 KiB, so that a JSON path finds what it looks for.
        let head = format!("{{\"order\": {i}, \"note\": \"");
        let body = format!("{head}{}\"}}", "x".repeat(1024 - head.len() - 2));
        let properties = BasicProperties::default()
            .with_message_id(format!("m{i}").into())
            .with_delivery_mode(2)
            .with_headers(headers);
        confirms.push(
            channel
                .basic_publish(
                    "".into(),
                    "orders.dlq".into(),
                    BasicPublishOptions::default(),
                    &body.as_bytes()[..1024],
                    properties,
                )
                .await
                .unwrap(),
        );
        if confirms.len() == 1000 {
            for c in confirms.drain(..) {
                assert!(c.await.unwrap().is_ack());
            }
        }
    }
    for c in confirms.drain(..) {
        assert!(c.await.unwrap().is_ack());
    }
    connection.close(200, "done".into()).await.ok();
}

fn disk_bytes(dir: &std::path::Path) -> u64 {
    std::fs::read_dir(dir).unwrap().filter_map(|e| e.ok()?.metadata().ok()).map(|m| m.len()).sum()
}

#[tokio::main]
async fn main() {
    let n = env_or("WARREN_BENCH_MESSAGES", 100_000);
    let broker = broker();
    management(reqwest::Method::DELETE, &format!("vhosts/{VHOST}")).await;
    management(reqwest::Method::PUT, &format!("vhosts/{VHOST}")).await;
    eprintln!("filling orders.dlq with {n} messages of 1 KiB");
    fill(&broker, n).await;

    let dir = tempfile::tempdir().unwrap();
    let db = warren::history::open(&dir.path().join("warren.db")).await.expect("database");
    let empty = disk_bytes(dir.path());
    let rules: Vec<warren::config::CustodyRule> = toml::from_str::<HashMap<String, Vec<warren::config::CustodyRule>>>(
        "[[custody]]\nqueue = \"*.dlq\"\nmax_bytes = 100000000000\n",
    )
    .unwrap()
    .remove("custody")
    .unwrap();

    // Intake.
    let storage = std::sync::Arc::new(warren::history::storage::Storage::new(&dir.path().join("warren.db")));
    let store = warren::storage::sqlite::store(db.clone());
    let keeper = Custody::new(store.clone(), storage);
    let cancel = CancellationToken::new();
    let started = Instant::now();
    let queues = std::iter::once((VHOST.to_string(), "orders.dlq".to_string()));
    custody::start_intakes(&keeper, &rules, &HashMap::new(), &broker, queues, &cancel);
    loop {
        let counts = custody::counts_by_queue(&store, "local").await.unwrap();
        let held = counts.get(&(VHOST.to_string(), "orders.dlq".to_string())).map(|c| c.held).unwrap_or(0);
        if held as usize >= n {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(1800), "intake took over 30 minutes");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let intake_secs = started.elapsed().as_secs_f64();
    cancel.cancel();
    keeper.shutdown(Duration::from_secs(10)).await;
    assert_eq!(support::depth(&broker, VHOST, "orders.dlq").await, 0, "intake emptied the DLQ");
    sqlx::query("pragma wal_checkpoint(TRUNCATE)").execute(&db).await.unwrap();
    let per_message = (disk_bytes(dir.path()) - empty) as f64 / n as f64;
    println!(
        "intake: {n} messages in {intake_secs:.1} s = {:.0} msg/s; {per_message:.0} bytes on disk per 1 KiB message",
        n as f64 / intake_secs
    );

    // Listing, groups and search, as the API computes them.
    let list_secs = |filter: Filter| {
        let (store, keeper) = (store.clone(), keeper.clone());
        async move {
            let started = Instant::now();
            // As a request: within its time budget, on the matching threads.
            let budget = warren::dlq::budget::Matchers::new().request();
            let queue = ("local", VHOST, "orders.dlq");
            let listing = custody::list(&store, &keeper, queue, &filter, None, 100, &budget).await.unwrap();
            (started.elapsed().as_secs_f64(), listing.matching)
        }
    };
    let (group_secs, all) = list_secs(Filter::default()).await;
    assert_eq!(all, n);
    let (search_secs, found) = list_secs(Filter::with_text("m4242\"")).await;
    let (error_secs, declined) = list_secs(Filter::with_error("declined")).await;
    assert_eq!(declined, n.div_ceil(10));
    let filter = |fields: &[(&str, &str)]| {
        let mut f = Filter::default();
        for (k, v) in fields {
            f.set_form_field(&format!("filter_{k}"), v.to_string());
        }
        f
    };
    let (header_secs, by_header) =
        list_secs(filter(&[("header", "x-exception-message"), ("header_value", "declined")])).await;
    assert_eq!(by_header, n.div_ceil(10));
    let (json_secs, by_path) = list_secs(filter(&[("json_path", "order"), ("json_value", "4242")])).await;
    let (regex_secs, by_regex) = list_secs(filter(&[("regex", r#""order": 4242\b"#)])).await;
    assert_eq!((by_path, by_regex), (usize::from(n > 4242), usize::from(n > 4242)));
    println!(
        "listing with groups over {n}: {:.0} ms; text search: {:.0} ms ({found} found); error filter: {:.0} ms; \
         header value: {:.0} ms; JSON path: {:.0} ms; regex: {:.0} ms",
        group_secs * 1000.0,
        search_secs * 1000.0,
        error_secs * 1000.0,
        header_secs * 1000.0,
        json_secs * 1000.0,
        regex_secs * 1000.0
    );

    // Replay of everything to `orders`, then the shovel moves as many back to `orders.dlq`.
    let request = ReplayRequest {
        selection: CustodySelection::All,
        target: CustodyTarget::Queue("orders".into()),
        accept_drop_head: false,
        accept_stranding: false,
    };
    let started = Instant::now();
    let report = custody::replay(
        &store,
        &broker,
        (VHOST, "orders.dlq"),
        &request,
        &custody::ReplayRun {
            job: "bench",
            replica: "bench",
            releasing: false,
            stranding: &Default::default(),
            progress: &Progress::default(),
            cancel: &CancellationToken::new(),
        },
    )
    .await
    .expect("replay");
    let replay_secs = started.elapsed().as_secs_f64();
    assert_eq!(report.replayed.len(), n, "every record replayed: {:?}", report.failed.first());
    let started = Instant::now();
    let shovelled =
        shovel::move_all(&broker, VHOST, "orders", "orders.dlq", 1, &Progress::default(), &CancellationToken::new())
            .await
            .expect("the shovel");
    let shovel_secs = started.elapsed().as_secs_f64();
    assert_eq!(shovelled.left, Some(0), "the shovel moved every message");
    let (r, s) = (n as f64 / replay_secs, n as f64 / shovel_secs);
    println!(
        "replay: {n} in {replay_secs:.1} s = {r:.0} msg/s; shovel {shovel_secs:.1} s = {s:.0} msg/s; replay/shovel = {:.2}",
        r / s
    );
    management(reqwest::Method::DELETE, &format!("vhosts/{VHOST}")).await;

    let path = std::env::var("WARREN_BENCH_JSON").unwrap_or_else(|_| {
        let dir = std::env::var("CARGO_TARGET_DIR").unwrap_or_else(|_| "target".to_string());
        format!("{dir}/bench-custody.json")
    });
    let results = json!({
        "messages": n,
        "intake_secs": intake_secs, "intake_msgs_per_sec": n as f64 / intake_secs, "disk_bytes_per_message": per_message,
        "list_groups_ms": group_secs * 1000.0, "text_search_ms": search_secs * 1000.0, "error_filter_ms": error_secs * 1000.0,
        "header_filter_ms": header_secs * 1000.0, "json_path_ms": json_secs * 1000.0, "regex_ms": regex_secs * 1000.0,
        "replay_secs": replay_secs, "shovel_secs": shovel_secs, "replay_over_shovel": r / s,
    });
    std::fs::write(&path, serde_json::to_string_pretty(&results).unwrap()).expect("write results");
    println!("results in {path}");
}
