//! Hostile input from the broker and from clients, against the real broker: warren answers with
//! a clear error or handles it, keeps serving, and loses no message.

mod common;

use std::time::Duration;

use common::dead_letters::{dead_letter, depth, drain_ids, numbered};
use common::{declare, wait_for, TestVhost, Warren};
use serde_json::{json, Value};

fn encode(s: &str) -> String {
    warren::management::encode_segment(s)
}

/// Header tables nested `levels` deep, as JSON text (built as text: a `serde_json::Value` that
/// deep would recurse as deeply to serialise and drop).
fn nested_json(levels: usize) -> String {
    format!("{}{{}}{}", "{\"a\":".repeat(levels - 1), "}".repeat(levels - 1))
}

/// Publishes into `queue` through the management API, which takes headers as JSON and encodes
/// them as AMQP tables in the broker (the test's own AMQP client never builds the deep value).
async fn publish_raw(vhost: &TestVhost, queue: &str, message_id: &str, extra_headers: &str) {
    let body = format!(
        r#"{{"properties":{{"message_id":"{message_id}","headers":{{"x-first-death-queue":"work"{extra_headers}}}}},
            "routing_key":"{queue}","payload":"{{\"id\":\"{message_id}\"}}","payload_encoding":"string"}}"#
    );
    let response = reqwest::Client::new()
        .post(format!("{}/api/exchanges/{}/amq.default/publish", common::MANAGEMENT, encode(&vhost.name)))
        .basic_auth("guest", Some("guest"))
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .expect("management API");
    assert!(response.status().is_success(), "publish {message_id}: {}", response.status());
    let routed: Value = response.json().await.unwrap();
    assert_eq!(routed["routed"], true, "{message_id} routed to {queue}");
}

fn ids(list: &Value) -> Vec<String> {
    list.as_array().unwrap().iter().map(|m| m["message_id"].as_str().unwrap_or_default().to_string()).collect()
}

async fn still_serving(warren: &Warren) {
    let (status, _) = warren.get_json("/api/v1/queues").await;
    assert_eq!(status, 200, "warren still serves");
    assert_eq!(warren.get_text("/healthz").await.0, 200);
}

/// One message whose headers nest 1,000 tables deep once overflowed the stack of the AMQP
/// client's IO thread when warren read it, and aborted the process. It is read now (the parser
/// keeps what lies past 64 levels as raw bytes), shown in the snapshot, and left in the DLQ by
/// warren's mover, which publishes no altered copy; every other message moves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_nested_1000_deep_is_snapshotted_and_left_in_place_by_moves() {
    let vhost = TestVhost::create("deep").await;
    let connection = vhost.connect().await;
    let channel = vhost.channel(&connection).await;
    dead_letter(&vhost, &channel, "work.dlq", false, numbered(3)).await;
    let deep = format!(r#","deep":{}"#, nested_json(1000));
    publish_raw(&vhost, "work.dlq", "deep", &deep).await;
    publish_raw(&vhost, "work.dlq", "m5", "").await;
    declare(&channel, "parking", false).await;
    let warren = Warren::for_vhost(&vhost.name, 1).await;
    wait_for("work.dlq listed by warren", Duration::from_secs(30), || async {
        warren.queue(&vhost.name, "work.dlq").await.map(|_| ()).ok_or_else(|| "not yet".to_string())
    })
    .await;

    let base = format!("/api/v1/queues/local/{}/work.dlq", encode(&vhost.name));
    let (status, snapshot) = warren.post_json(&format!("{base}/snapshot"), json!({"count": 100})).await;
    assert_eq!(status, 200, "{snapshot}");
    assert_eq!(ids(&snapshot["messages"]), ["m1", "m2", "m3", "deep", "m5"]);
    still_serving(&warren).await;

    // Warren's own mover (a selection by position reads with basic.get).
    let job = warren
        .run_move(&format!("{base}/requeue"), json!({"selection": {"positions": [1, 2, 3, 4, 5]}, "target": {"queue": "parking"}}))
        .await;
    assert_eq!(ids(&job["report"]["moved"]), ["m1", "m2", "m3", "m5"], "{job}");
    assert_eq!(ids(&job["report"]["failed"]), ["deep"], "{job}");
    let reason = job["report"]["failed"][0]["reason"].as_str().unwrap();
    assert!(reason.contains("nest deeper than 64 levels"), "{reason}");
    assert_eq!(drain_ids(&channel, "parking").await, ["m1", "m2", "m3", "m5"]);
    assert_eq!(depth(&channel, "work.dlq").await, 1, "the deep message stays in the DLQ");
    still_serving(&warren).await;

    // A whole-queue requeue to the original queue reads with a consumer.
    publish_raw(&vhost, "work.dlq", "m6", "").await;
    let job = warren.run_move(&format!("{base}/requeue"), json!({"selection": "all"})).await;
    assert_eq!(ids(&job["report"]["moved"]), ["m6"], "{job}");
    assert_eq!(ids(&job["report"]["failed"]), ["deep"], "{job}");
    assert_eq!(drain_ids(&channel, "work").await, ["m6"]);
    still_serving(&warren).await;

    // It is still there, and reads again.
    let (status, again) = warren.post_json(&format!("{base}/snapshot"), json!({})).await;
    assert_eq!(status, 200, "{again}");
    assert_eq!(ids(&again["messages"]), ["deep"]);
    assert_eq!(drain_ids(&channel, "work.dlq").await, ["deep"]);
    warren.stop().await;
    connection.close(0, "done").await.ok();
}

/// Times near the limits of i64 once wrapped `to - from` and built a chart grid without end
/// (the process allocated until it aborted); the smallest i64 panicked the request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn absurd_time_ranges_are_refused_and_warren_keeps_serving() {
    let vhost = TestVhost::create("ranges").await;
    let connection = vhost.connect().await;
    let channel = vhost.channel(&connection).await;
    declare(&channel, "q", false).await;
    let warren = Warren::for_vhost(&vhost.name, 1).await;
    wait_for("q listed by warren", Duration::from_secs(30), || async {
        warren.queue(&vhost.name, "q").await.map(|_| ()).ok_or_else(|| "not yet".to_string())
    })
    .await;
    let queue = format!("local/{}/q", encode(&vhost.name));
    for query in [
        "from=9223372036854775806&to=9223372036854775807",
        "from=-9223372036854775808",
        "from=-9223372036854775808&to=9223372036854775807",
        "to=-9223372036854775808&range=30d",
        "from=0&to=253402300800",
        "from=99999999999999999999",
    ] {
        let (status, body) = warren.get_json(&format!("/api/v1/queues/{queue}/history?{query}")).await;
        assert_eq!(status, 400, "{query}: {body}");
        assert_eq!(body["error"]["code"], "bad_request", "{query}: {body}");
        let (status, _) = warren.get_text(&format!("/queues/{queue}?{query}")).await;
        assert_eq!(status, 400, "queue page, {query}");
        let (status, _) = warren.get_json(&format!("/api/v1/brokers/local/history?{query}")).await;
        assert_eq!(status, 400, "broker history, {query}");
    }
    // The widest range accepted still answers, with a bounded number of points.
    let (status, body) = warren.get_json(&format!("/api/v1/queues/{queue}/history?from=0&to=34560000")).await;
    assert_eq!(status, 200, "{body}");
    still_serving(&warren).await;
    warren.stop().await;
    connection.close(0, "done").await.ok();
}
