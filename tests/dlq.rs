//! Moving dead letters back, against the real broker: only confirmed copies are acked, nothing
//! is lost, order is kept.

mod common;

use std::time::Duration;

use common::dead_letters::{dead_letter, depth, drain_ids, numbered};
use common::{declare, wait_for, TestVhost, Warren};
use lapin::options::{BasicGetOptions, BasicPublishOptions, QueueDeclareOptions};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{BasicProperties, Channel};
use serde_json::json;

fn encode(s: &str) -> String {
    warren::management::encode_segment(s)
}

async fn listed(warren: &Warren, vhost: &str, queue: &str) {
    wait_for(&format!("{queue} listed by warren"), Duration::from_secs(30), || async {
        warren.queue(vhost, queue).await.map(|_| ()).ok_or_else(|| "not yet".to_string())
    })
    .await;
}

/// A vhost with 50 dead letters in `work.dlq`, and warren watching it.
async fn fifty_dead_letters_watched(test: &str) -> (TestVhost, lapin::Connection, Channel, Warren) {
    let vhost = TestVhost::create(test).await;
    let connection = vhost.connect().await;
    let channel = vhost.channel(&connection).await;
    dead_letter(&vhost, &channel, "work.dlq", false, numbered(50)).await;
    wait_for("50 dead letters", Duration::from_secs(10), || async {
        let n = depth(&channel, "work.dlq").await;
        if n == 50 {
            Ok(())
        } else {
            Err(format!("{n}"))
        }
    })
    .await;
    let warren = Warren::for_vhost(&vhost.name, 1).await;
    listed(&warren, &vhost.name, "work.dlq").await;
    (vhost, connection, channel, warren)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requeue_the_third_message_only() {
    let (vhost, connection, channel, warren) = fifty_dead_letters_watched("requeue3").await;

    let path = format!("/api/v1/queues/local/{}/work.dlq/requeue", encode(&vhost.name));
    let (status, body) = warren.post_json(&path, json!({"selection": {"positions": [3]}})).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["report"]["moved"], json!([{"position": 3, "message_id": "m3", "to_queue": "work"}]));

    // It arrived once in its original queue, with warren's replay counter; the other 49 stay,
    // in order.
    let message = channel.basic_get("work", BasicGetOptions { no_ack: true }).await.unwrap().expect("m3 in work");
    assert_eq!(message.delivery.properties.message_id().as_ref().map(|s| s.as_str()), Some("m3"));
    let replays =
        message.delivery.properties.headers().as_ref().and_then(|h| h.inner().get("x-warren-replay-count").cloned());
    assert_eq!(replays, Some(AMQPValue::LongLongInt(1)));
    assert!(channel.basic_get("work", BasicGetOptions { no_ack: true }).await.unwrap().is_none(), "exactly once");
    let expected: Vec<String> = (1..=50).filter(|i| *i != 3).map(|i| format!("m{i}")).collect();
    assert_eq!(drain_ids(&channel, "work.dlq").await, expected);

    let (_, audit) = warren.get_json("/api/v1/audit").await;
    assert_eq!(audit[0]["outcome"], "done");
    assert_eq!(audit[0]["message_ids"], json!(["m3"]));
    let (status, page) = warren.get_text("/audit").await;
    assert_eq!(status, 200);
    assert!(page.contains("requeue") && page.contains("done") && page.contains("m3"), "the audit page shows it");
    warren.stop().await;
    connection.close(0, "done").await.ok();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requeue_into_a_missing_queue_acks_nothing() {
    let (vhost, connection, channel, warren) = fifty_dead_letters_watched("missing").await;

    let path = format!("/api/v1/queues/local/{}/work.dlq/requeue", encode(&vhost.name));
    let (status, body) =
        warren.post_json(&path, json!({"selection": "all", "target": {"queue": "no-such-queue"}})).await;
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["outcome"], "failed");
    assert!(body["report"]["failed"][0]["reason"].as_str().unwrap().contains("unroutable"), "{body}");
    assert!(body["report"]["moved"].as_array().unwrap().is_empty());

    let expected: Vec<String> = (1..=50).map(|i| format!("m{i}")).collect();
    assert_eq!(drain_ids(&channel, "work.dlq").await, expected, "all 50 remain, in order");
    let (_, audit) = warren.get_json("/api/v1/audit").await;
    assert_eq!(audit[0]["outcome"], "failed");
    assert!(audit[0]["detail"].as_str().unwrap().contains("unroutable"));
    warren.stop().await;
    connection.close(0, "done").await.ok();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quorum_dlq_with_a_delivery_limit_is_not_read_past_unmoved_messages() {
    let vhost = TestVhost::create("quorumlimit").await;
    let connection = vhost.connect().await;
    let channel = vhost.channel(&connection).await;
    let mut args = FieldTable::default();
    args.insert("x-queue-type".into(), AMQPValue::LongString("quorum".into()));
    args.insert("x-delivery-limit".into(), AMQPValue::LongInt(2));
    channel.queue_declare("qdlq", QueueDeclareOptions { durable: true, ..Default::default() }, args).await.unwrap();
    for i in 1..=5 {
        let properties = BasicProperties::default().with_message_id(format!("q{i}").into());
        let confirm =
            channel.basic_publish("", "qdlq", BasicPublishOptions::default(), b"x", properties).await.unwrap();
        assert!(confirm.await.unwrap().is_ack());
    }
    declare(&channel, "target", false).await;
    let warren = Warren::for_vhost(&vhost.name, 1).await;
    listed(&warren, &vhost.name, "qdlq").await;

    let path = format!("/api/v1/queues/local/{}/qdlq/requeue", encode(&vhost.name));
    for _ in 0..3 {
        let (status, body) =
            warren.post_json(&path, json!({"selection": {"positions": [3]}, "target": {"queue": "target"}})).await;
        assert_eq!(status, 422, "refused: reading past q1 and q2 would count toward their limit: {body}");
    }
    assert_eq!(depth(&channel, "qdlq").await, 5, "nothing dropped");
    // Moving the head in order is allowed: every message read is moved.
    let (status, body) =
        warren.post_json(&path, json!({"selection": {"positions": [1, 2]}, "target": {"queue": "target"}})).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(drain_ids(&channel, "target").await, vec!["q1", "q2"]);
    assert_eq!(drain_ids(&channel, "qdlq").await, vec!["q3", "q4", "q5"]);
    warren.stop().await;
    connection.close(0, "done").await.ok();
}

/// The browser's form: it asks first, moves only after the confirmation, and reports.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_browser_form_confirms_before_requeueing() {
    let (vhost, connection, channel, warren) = fifty_dead_letters_watched("form").await;
    let base = format!("/dlq/local/{}/work.dlq", encode(&vhost.name));
    let form = |body: &'static str| {
        let request = warren.http.post(warren.url(&format!("{base}/requeue")));
        request.header("content-type", "application/x-www-form-urlencoded").body(body).send()
    };
    let asked = form("position=3&position=5&scope=selected&target_queue=").await.unwrap();
    assert_eq!(asked.status().as_u16(), 200);
    let page = asked.text().await.unwrap();
    assert!(page.contains("Confirm: requeue") && page.contains("3, 5"), "{page}");
    assert_eq!(depth(&channel, "work.dlq").await, 50, "asking moves nothing");
    let page = form("scope=purge&target_queue=").await.unwrap().text().await.unwrap();
    assert!(page.contains("Confirm: purge") && page.contains("cannot be undone"), "{page}");
    assert_eq!(depth(&channel, "work.dlq").await, 50, "asking purges nothing");

    let done = form("position=3&position=5&scope=selected&target_queue=&confirm=true").await.unwrap();
    let page = done.text().await.unwrap();
    assert!(page.contains("Requeue: done"), "{page}");
    assert_eq!(drain_ids(&channel, "work").await, vec!["m3", "m5"]);
    assert_eq!(depth(&channel, "work.dlq").await, 48);
    warren.stop().await;
    connection.close(0, "done").await.ok();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_selected_and_purge_are_recorded() {
    let (vhost, connection, channel, warren) = fifty_dead_letters_watched("delete").await;
    let base = format!("/api/v1/queues/local/{}/work.dlq", encode(&vhost.name));
    let (status, body) = warren.post_json(&format!("{base}/delete"), json!({"selection": {"positions": [2]}})).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["report"]["moved"][0]["message_id"], "m2");
    assert_eq!(depth(&channel, "work").await, 0, "a delete makes no copy");
    assert_eq!(depth(&channel, "work.dlq").await, 49);
    let (status, _) =
        warren.post_json(&format!("{base}/requeue"), json!({"selection": "all", "target": "discard"})).await;
    assert_eq!(status, 400, "the requeue action never deletes");

    let (status, body) = warren.post_json(&format!("{base}/purge"), json!({})).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["purged"], 49);
    assert_eq!(depth(&channel, "work.dlq").await, 0);
    let (_, audit) = warren.get_json("/api/v1/audit").await;
    assert_eq!((audit[0]["action"].as_str(), audit[0]["moved"].as_i64()), (Some("purge"), Some(49)));
    assert_eq!((audit[1]["action"].as_str(), audit[1]["message_ids"].clone()), (Some("delete"), json!(["m2"])));
    warren.stop().await;
    connection.close(0, "done").await.ok();
}
