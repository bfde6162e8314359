//! Bulk requeue throughput on the real broker: warren's own mover (publisher confirms, an ack
//! per original only after its copy is confirmed) against the broker's dynamic shovel
//! (`ack-mode: on-confirm`), on the same messages, in one run.
//!
//! `cargo bench --bench requeue` (needs RabbitMQ with the management and shovel plugins at
//! 127.0.0.1, guest/guest). It creates the vhost `warren-bench-requeue`, fills `dlq` with
//! `WARREN_BENCH_MESSAGES` (default 100,000) dead-letter-shaped messages, then, for each of
//! `WARREN_BENCH_ROUNDS` (default 2) rounds: warren moves them all from `dlq` to `orders` (their
//! `x-first-death-queue`), and the shovel moves as many freshly filled ones the same way; even
//! rounds let the shovel go first. It deletes the vhost at the end.
//! The summary goes to stdout and to `target/bench-requeue.json` (or `$WARREN_BENCH_JSON`).

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::time::{Duration, Instant};

use lapin::options::{BasicPublishOptions, ConfirmSelectOptions, QueueDeclareOptions};
use lapin::types::{AMQPValue, FieldTable};
use lapin::BasicProperties;
use serde_json::json;
use tokio_util::sync::CancellationToken;
use warren::config::BrokerConfig;
use warren::dlq::{self, Plan, Progress, Selection, Target};

#[path = "support/shovel.rs"]
mod shovel;
#[path = "support/broker.rs"]
mod support;

use support::{broker, env_or, management};

const VHOST: &str = "warren-bench-requeue";

/// Publishes `n` messages shaped like dead letters of `orders` into `dlq`, with confirms.
async fn fill(broker: &BrokerConfig, n: usize) {
    let connection = dlq::connect(broker, VHOST).await.expect("AMQP");
    let channel = connection.create_channel().await.unwrap();
    let durable = QueueDeclareOptions { durable: true, ..Default::default() };
    for queue in ["dlq", "orders"] {
        channel.queue_declare(queue.into(), durable, FieldTable::default()).await.unwrap();
    }
    channel.confirm_select(ConfirmSelectOptions::default()).await.unwrap();
    let payload = format!("{{\"order\": 1, \"note\": \"{}\"}}", "x".repeat(160));
    let mut confirms = Vec::with_capacity(1000);
    for i in 0..n {
        let mut headers = FieldTable::default();
        headers.insert("x-first-death-queue".into(), AMQPValue::LongString("orders".into()));
        headers.insert("x-first-death-reason".into(), AMQPValue::LongString("rejected".into()));
        let properties = BasicProperties::default()
            .with_message_id(format!("m{i}").into())
            .with_delivery_mode(2)
            .with_headers(headers);
        confirms.push(
            channel
                .basic_publish("".into(), "dlq".into(), BasicPublishOptions::default(), payload.as_bytes(), properties)
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

#[derive(Debug, Clone, Copy, PartialEq)]
enum Mover {
    Warren,
    Shovel,
}

/// Every message of `dlq` to the queue it first died in (`orders`).
fn plan() -> Plan {
    Plan {
        selection: Selection::All,
        target: Target::OriginalQueue,
        delivery_limit: None,
        quorum: false,
        accept_drop_head: false,
        stranding: Default::default(),
    }
}

#[tokio::main]
async fn main() {
    let n = env_or("WARREN_BENCH_MESSAGES", 100_000);
    let rounds = env_or("WARREN_BENCH_ROUNDS", 2);
    let broker = broker();
    management(reqwest::Method::DELETE, &format!("vhosts/{VHOST}")).await;
    management(reqwest::Method::PUT, &format!("vhosts/{VHOST}")).await;
    eprintln!("filling dlq with {n} messages");
    fill(&broker, n).await;

    let mut results = Vec::new();
    let (mut warren_total, mut shovel_total) = (0.0, 0.0);
    for round in 1..=rounds {
        // Each mover gets messages fresh from `fill`, so neither moves copies carrying the
        // other's headers, and the rounds alternate which goes first: the broker slows down
        // over a run (measured: 15 s to 25 s for the same move within a few minutes), which
        // favoured whichever always went first.
        let order = if round % 2 == 1 { [Mover::Warren, Mover::Shovel] } else { [Mover::Shovel, Mover::Warren] };
        let (mut warren_secs, mut shovel_secs) = (0.0, 0.0);
        for mover in order {
            if round > 1 || mover != order[0] {
                dlq::purge(&broker, VHOST, "orders").await.expect("purge");
                eprintln!("round {round}: filling dlq with {n} messages");
                fill(&broker, n).await;
            }
            let started = Instant::now();
            match mover {
                Mover::Warren => {
                    let report = dlq::move_messages(
                        &broker,
                        VHOST,
                        "dlq",
                        &plan(),
                        &Progress::default(),
                        &CancellationToken::new(),
                    )
                    .await
                    .expect("warren's mover");
                    warren_secs = started.elapsed().as_secs_f64();
                    assert_eq!(report.moved.len(), n, "warren moved every message: {:?}", report.stopped);
                }
                Mover::Shovel => {
                    let shovelled = shovel::move_all(
                        &broker,
                        VHOST,
                        "dlq",
                        "orders",
                        round as i64,
                        &Progress::default(),
                        &CancellationToken::new(),
                    )
                    .await
                    .expect("the shovel");
                    assert_eq!(shovelled.left, Some(0), "the shovel moved every message");
                    // The shovel's last acks can trail its removal by a moment.
                    let deadline = Instant::now() + Duration::from_secs(30);
                    while (support::depth(&broker, VHOST, "orders").await as usize) < n && Instant::now() < deadline {
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                    shovel_secs = started.elapsed().as_secs_f64();
                }
            }
            assert_eq!(support::depth(&broker, VHOST, "orders").await as usize, n);
            assert_eq!(support::depth(&broker, VHOST, "dlq").await as usize, 0);
        }
        warren_total += warren_secs;
        shovel_total += shovel_secs;
        let (w, s) = (n as f64 / warren_secs, n as f64 / shovel_secs);
        println!(
            "round {round} ({} first): warren's mover {n} messages in {warren_secs:.1} s = {w:.0} msg/s; \
             shovel {shovel_secs:.1} s = {s:.0} msg/s; warren/shovel = {:.2}",
            if order[0] == Mover::Warren { "warren" } else { "shovel" },
            w / s
        );
        results.push(json!({
            "round": round, "messages": n, "first": format!("{:?}", order[0]),
            "warren_secs": warren_secs, "warren_msgs_per_sec": w,
            "shovel_secs": shovel_secs, "shovel_msgs_per_sec": s,
        }));
    }
    println!(
        "all rounds: warren's mover {warren_total:.1} s, shovel {shovel_total:.1} s; warren/shovel = {:.2}",
        shovel_total / warren_total
    );
    management(reqwest::Method::DELETE, &format!("vhosts/{VHOST}")).await;

    let path = std::env::var("WARREN_BENCH_JSON").unwrap_or_else(|_| {
        let dir = std::env::var("CARGO_TARGET_DIR").unwrap_or_else(|_| "target".to_string());
        format!("{dir}/bench-requeue.json")
    });
    std::fs::write(&path, serde_json::to_string_pretty(&json!({"rounds": results})).unwrap()).expect("write results");
    println!("results in {path}");
}
