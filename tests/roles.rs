//! Queue roles on the real broker (issue 17): the delayed-retry topology that frameworks declare
//! must read as a work queue, a wait queue and a terminal DLQ, not as three dead-letter queues.

mod common;

use std::time::Duration;

use common::{wait_for, TestVhost, Warren};
use futures_util::StreamExt;
use lapin::options::{
    BasicAckOptions, BasicConsumeOptions, BasicPublishOptions, BasicRejectOptions, ExchangeDeclareOptions,
    QueueBindOptions, QueueDeclareOptions,
};
use lapin::types::{AMQPValue, FieldTable, LongString};
use lapin::{BasicProperties, Channel, ExchangeKind};
use serde_json::{json, Value};

fn encode(s: &str) -> String {
    warren::broker::management::encode_segment(s)
}

fn text(value: &str) -> AMQPValue {
    AMQPValue::LongString(LongString::from(value))
}

async fn declare_with(channel: &Channel, queue: &str, arguments: &[(&str, AMQPValue)]) {
    let mut table = FieldTable::default();
    for (key, value) in arguments {
        table.insert((*key).into(), value.clone());
    }
    channel
        .queue_declare(queue, QueueDeclareOptions { durable: true, ..Default::default() }, table)
        .await
        .unwrap_or_else(|e| panic!("declare {queue}: {e}"));
}

const RETRIES: &str = "x-retries";
const MAX_RETRIES: i64 = 2;

fn retries(properties: &BasicProperties) -> i64 {
    match properties.headers().as_ref().and_then(|h| h.inner().get(RETRIES).cloned()) {
        Some(AMQPValue::LongLongInt(n)) => n,
        _ => 0,
    }
}

/// The consumer of a framework with delayed retries: every delivery fails; a failure is
/// republished to the wait queue with a per-message expiration (growing with each retry, so the
/// wait queue has no `x-message-ttl`) and acked after the confirm; once out of retries the
/// delivery is rejected, and the work queue's DLX takes it to the final DLQ.
async fn failing_consumer(consumer_channel: Channel, retry_channel: Channel) {
    let mut deliveries = consumer_channel
        .basic_consume("work", "failing-worker", BasicConsumeOptions::default(), FieldTable::default())
        .await
        .expect("consume work");
    while let Some(Ok(delivery)) = deliveries.next().await {
        let tries = retries(&delivery.properties);
        if tries >= MAX_RETRIES {
            delivery.acker.reject(BasicRejectOptions { requeue: false }).await.expect("reject");
            continue;
        }
        let mut headers = delivery.properties.headers().clone().unwrap_or_default();
        headers.insert(RETRIES.into(), AMQPValue::LongLongInt(tries + 1));
        let expiration = format!("{}", 100 * (tries + 1));
        let properties = delivery.properties.clone().with_headers(headers).with_expiration(expiration.into());
        let confirm = retry_channel
            .basic_publish(
                "",
                "work.wait",
                BasicPublishOptions { mandatory: true, ..Default::default() },
                &delivery.data,
                properties,
            )
            .await
            .expect("republish to the wait queue");
        assert!(confirm.await.expect("confirm").is_ack(), "the wait queue took the retry");
        delivery.acker.ack(BasicAckOptions::default()).await.expect("ack");
    }
}

/// The rows of the overview's dead-letter table.
fn overview_dlq_rows(page: &str) -> &str {
    let start = page.find("<table class=\"grid dlqs\">").expect("the overview lists DLQs");
    let end = page[start..].find("</table>").expect("the DLQ table ends") + start;
    &page[start..end]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delayed_retry_topology_reads_as_work_wait_and_dlq() {
    let vhost = TestVhost::create("roles").await;
    let connection = vhost.connect().await;
    let channel = vhost.channel(&connection).await;
    let durable = ExchangeDeclareOptions { durable: true, ..Default::default() };
    channel.exchange_declare("jobs", ExchangeKind::Direct, durable, FieldTable::default()).await.unwrap();
    channel.exchange_declare("work.dlx", ExchangeKind::Fanout, durable, FieldTable::default()).await.unwrap();
    declare_with(&channel, "work", &[("x-dead-letter-exchange", text("work.dlx"))]).await;
    declare_with(
        &channel,
        "work.wait",
        &[("x-dead-letter-exchange", text("")), ("x-dead-letter-routing-key", text("work"))],
    )
    .await;
    declare_with(&channel, "work.dlq", &[]).await;
    channel.queue_bind("work", "jobs", "job", QueueBindOptions::default(), FieldTable::default()).await.unwrap();
    channel.queue_bind("work.dlq", "work.dlx", "", QueueBindOptions::default(), FieldTable::default()).await.unwrap();

    let worker =
        tokio::spawn(failing_consumer(connection.create_channel().await.unwrap(), vhost.channel(&connection).await));
    for i in 0..3 {
        let confirm = channel
            .basic_publish(
                "jobs",
                "job",
                BasicPublishOptions::default(),
                format!("job {i}").as_bytes(),
                BasicProperties::default(),
            )
            .await
            .unwrap();
        assert!(confirm.await.unwrap().is_ack());
    }

    let warren = Warren::for_vhost(&vhost.name, 1).await;
    // Every job went work -> work.wait -> work twice, then into work.dlq; the worker stays up.
    let dlq = wait_for("all three jobs in work.dlq, with work consumed", Duration::from_secs(60), || async {
        let dlq = warren.queue(&vhost.name, "work.dlq").await.ok_or("work.dlq not listed")?;
        let work = warren.queue(&vhost.name, "work").await.ok_or("work not listed")?;
        if dlq["total"] == 3 && work["consumers"] == 1 && dlq["role"] == "dlq" {
            Ok(dlq)
        } else {
            Err(format!("work.dlq total {} role {}; work consumers {}", dlq["total"], dlq["role"], work["consumers"]))
        }
    })
    .await;
    assert_eq!(dlq["is_dlq"], true);
    assert_eq!(dlq["no_consumers"], false, "a DLQ has no consumer by design (issue 17, case 6): {dlq}");
    assert_eq!(dlq["dead_letter_sources"], json!(["work"]), "fed by the work queue, not by the wait queue");

    let work = warren.queue(&vhost.name, "work").await.unwrap();
    assert_eq!((&work["role"], &work["is_dlq"]), (&json!("work"), &json!(false)), "{work}");
    assert_eq!(work["dead_letter_sources"], json!([]), "the wait queue passes messages back; it is no feeder of a DLQ");
    let wait = warren.queue(&vhost.name, "work.wait").await.unwrap();
    assert_eq!((&wait["role"], &wait["is_dlq"]), (&json!("wait"), &json!(false)), "{wait}");
    let reason = wait["role_reason"].as_str().unwrap_or_default();
    assert!(reason.contains("work") && reason.contains("per-message TTLs"), "the reason says why: {reason}");
    assert!(!dlq["role_reason"].as_str().unwrap_or_default().is_empty(), "every role has a reason");

    // The list's DLQ filter and the overview's DLQ table hold the terminal DLQ only.
    let (_, list) = warren.get_json(&format!("/api/v1/queues?vhost={}&dlq=true", encode(&vhost.name))).await;
    let names: Vec<&Value> = list["items"].as_array().unwrap().iter().map(|q| &q["name"]).collect();
    assert_eq!(names, [&json!("work.dlq")], "{list}");
    let (_, list) = warren.get_json(&format!("/api/v1/queues?vhost={}", encode(&vhost.name))).await;
    let wait_row = list["items"].as_array().unwrap().iter().find(|q| q["name"] == "work.wait").expect("listed");
    assert_eq!(wait_row["role"], "wait", "the list API carries the role too");
    let (_, overview) = warren.get_text("/").await;
    let rows = overview_dlq_rows(&overview);
    assert!(rows.contains(">work.dlq</a>") && rows.contains("<td>work</td>"), "the DLQ, fed by work: {rows}");
    assert!(!rows.contains(">work</a>") && !rows.contains(">work.wait</a>"), "work and work.wait are not DLQs: {rows}");
    let (_, html) = warren.get_text(&format!("/queues?vhost={}", encode(&vhost.name))).await;
    assert_eq!(html.matches(">DLQ<").count(), 1, "one DLQ badge in the list");
    assert!(!html.contains(">no consumers<"), "no 'no consumers' badge on the DLQ or the wait queue");

    // The queue pages say the role and why.
    let (_, page) = warren.get_text(&format!("/queues/local/{}/work.wait", encode(&vhost.name))).await;
    assert!(page.contains("<strong>wait (retry) queue</strong>") && page.contains("per-message TTLs"), "wait page");
    assert!(!page.contains("This is a dead-letter queue"), "the wait queue is not called a DLQ");
    let (_, page) = warren.get_text(&format!("/queues/local/{}/work", encode(&vhost.name))).await;
    assert!(page.contains("<strong>work queue</strong>"), "work page");
    assert!(!page.contains("This is a dead-letter queue"), "the work queue is not called a DLQ");
    let (_, page) = warren.get_text(&format!("/queues/local/{}/work.dlq", encode(&vhost.name))).await;
    assert!(page.contains("<strong>dead-letter queue</strong>") && page.contains("dead letters of work end here"));

    worker.abort();
    warren.stop().await;
    connection.close(0, "done").await.ok();
}
