//! The dead-letter browser against the real broker: snapshots never lose or reorder messages,
//! and hostile payloads render escaped in a real browser.

mod common;

use std::time::Duration;

use common::dead_letters::{dead_letter, drain_ids, numbered};
use common::{wait_for, TestVhost, Warren};
use lapin::options::{BasicPublishOptions, QueueDeclareOptions};
use lapin::types::{AMQPValue, FieldTable};
use lapin::BasicProperties;
use serde_json::{json, Value};

fn encode(s: &str) -> String {
    warren::broker::management::encode_segment(s)
}

/// Waits until warren lists `queue` holding `total` messages.
async fn listed_with(warren: &Warren, vhost: &str, queue: &str, total: u64) {
    wait_for(&format!("{queue} listed with {total}"), Duration::from_secs(30), || async {
        let q = warren.queue(vhost, queue).await.ok_or("not listed")?;
        if q["total"] == total {
            Ok(())
        } else {
            Err(format!("total {}", q["total"]))
        }
    })
    .await;
}

async fn browse_five_times_keeps_all(quorum: bool) {
    let vhost = TestVhost::create(if quorum { "browseq" } else { "browsec" }).await;
    let connection = vhost.connect().await;
    let channel = vhost.channel(&connection).await;
    dead_letter(&vhost, &channel, "dlq", quorum, numbered(50)).await;
    let warren = Warren::for_vhost(&vhost.name, 1).await;
    let expected: Vec<String> = (1..=50).map(|i| format!("m{i}")).collect();
    wait_for("the DLQ listed with 50 messages", Duration::from_secs(30), || async {
        let q = warren.queue(&vhost.name, "dlq").await.ok_or("not listed")?;
        if q["total"] == 50 && q["is_dlq"] == true {
            Ok(())
        } else {
            Err(format!("total {} is_dlq {}", q["total"], q["is_dlq"]))
        }
    })
    .await;
    let path = format!("/api/v1/queues/local/{}/dlq/snapshot", encode(&vhost.name));
    // 4.x gives every quorum queue a delivery limit of 20: reads must be confirmed where they
    // count toward it (five reads raise each message's count to 5, well within it); from 4.3 on
    // they do not, and nothing is asked.
    let facts = common::broker().facts().await;
    let limited = quorum && facts.major >= 4 && facts.hand_backs_count();
    if limited {
        let (status, body) = warren.post_json(&path, json!({"count": 100})).await;
        assert_eq!(status, 409, "4.x's default limit asks for confirmation: {body}");
        assert!(body["error"]["message"].as_str().unwrap().contains("delivery limit of 20"), "{body}");
    }
    for round in 0..5 {
        let body = if limited { json!({"count": 100, "confirm": "true"}) } else { json!({"count": 100}) };
        let (status, snapshot) = warren.post_json(&path, body).await;
        assert_eq!(status, 200, "round {round}: {snapshot}");
        let ids: Vec<String> = snapshot["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["message_id"].as_str().unwrap().to_string())
            .collect();
        // A broker too slow to serve 50 reads in the snapshot's time bound (quorum reads under the
        // whole suite's load) gives a shorter snapshot that says so; it is still the head, in order.
        let stopped_early = snapshot["note"].as_str().is_some_and(|n| n.contains("stopped after"));
        if stopped_early && ids.len() < expected.len() {
            assert!(!ids.is_empty(), "round {round}: {}", snapshot["note"]);
            assert_eq!(ids, expected[..ids.len()], "round {round}: the head, in order ({})", snapshot["note"]);
        } else {
            assert_eq!(ids, expected, "round {round}: the snapshot shows all 50 in order ({})", snapshot["note"]);
        }
        assert_eq!(snapshot["messages"][0]["original_queue"], "work");
        assert_eq!(snapshot["messages"][0]["reason"], "rejected");
    }
    // Viewing the page does not read the queue.
    let (status, page) = warren.get_text(&format!("/dlq/local/{}/dlq", encode(&vhost.name))).await;
    assert_eq!(status, 200);
    assert!(page.contains("m50"));
    assert_eq!(drain_ids(&channel, "dlq").await, expected, "the DLQ still holds all 50, in the same order");
    warren.stop().await;
    connection.close(0, "done".into()).await.ok();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn browsing_a_classic_dlq_five_times_keeps_all_fifty_in_order() {
    browse_five_times_keeps_all(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn browsing_a_quorum_dlq_five_times_keeps_all_fifty_in_order() {
    browse_five_times_keeps_all(true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quorum_dlq_with_a_delivery_limit_is_read_only_when_confirmed() {
    let vhost = TestVhost::create("browselimit").await;
    let connection = vhost.connect().await;
    let channel = vhost.channel(&connection).await;
    let mut args = FieldTable::default();
    args.insert("x-queue-type".into(), AMQPValue::LongString("quorum".into()));
    args.insert("x-delivery-limit".into(), AMQPValue::LongInt(2));
    channel
        .queue_declare("limited".into(), QueueDeclareOptions { durable: true, ..Default::default() }, args)
        .await
        .unwrap();
    for i in 1..=3 {
        let properties = BasicProperties::default().with_message_id(format!("l{i}").into());
        assert!(channel
            .basic_publish("".into(), "limited".into(), BasicPublishOptions::default(), b"x", properties)
            .await
            .unwrap()
            .await
            .unwrap()
            .is_ack());
    }
    let warren = Warren::for_vhost(&vhost.name, 1).await;
    let listed = wait_for("listed", Duration::from_secs(30), || async {
        warren.queue(&vhost.name, "limited").await.ok_or_else(|| "not yet".to_string())
    })
    .await;
    // On every version (issue 17, case 5: null on 3.10, whose listing never says it).
    assert_eq!(listed["delivery_limit"], 2, "{listed}");
    let path = format!("/api/v1/queues/local/{}/limited/snapshot", encode(&vhost.name));
    if common::broker().facts().await.hand_backs_count() {
        for _ in 0..3 {
            let (status, body) = warren.post_json(&path, json!({})).await;
            assert_eq!(status, 409, "a read without confirmation is refused: {body}");
            assert_eq!(body["error"]["code"], "confirmation_required");
        }
    } else {
        // 4.3 does not count a read given back toward the limit: nothing to confirm, and three
        // reads past the limit of 2 keep every message.
        for round in 1..=3 {
            let (status, snapshot) = warren.post_json(&path, json!({})).await;
            assert_eq!(status, 200, "round {round}: {snapshot}");
            assert_eq!(common::dead_letters::message_ids(&snapshot["messages"]), ["l1", "l2", "l3"], "round {round}");
            assert!(snapshot["delivery_limit"].is_null(), "no limit the reads count toward: {snapshot}");
        }
    }
    let (status, snapshot) = warren.post_json(&path, json!({"confirm": "true"})).await;
    assert_eq!(status, 200, "{snapshot}");
    assert_eq!(snapshot["messages"].as_array().unwrap().len(), 3);
    assert_eq!(drain_ids(&channel, "limited").await, vec!["l1", "l2", "l3"], "nothing dropped");
    warren.stop().await;
    connection.close(0, "done".into()).await.ok();
}

/// Issue 16 (2): a `delivery-limit` policy applied half a second before three snapshots. The
/// limit came from warren's last poll, so all three read without asking and the broker dropped
/// 5 messages. The limit is read from the broker before each read now.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delivery_limit_set_a_moment_ago_is_respected() {
    let vhost = TestVhost::create("freshlimit").await;
    let connection = vhost.connect().await;
    let channel = vhost.channel(&connection).await;
    let mut args = FieldTable::default();
    args.insert("x-queue-type".into(), AMQPValue::LongString("quorum".into()));
    channel
        .queue_declare("fresh".into(), QueueDeclareOptions { durable: true, ..Default::default() }, args)
        .await
        .unwrap();
    for i in 1..=5 {
        let properties = BasicProperties::default().with_message_id(format!("f{i}").into());
        channel
            .basic_publish("".into(), "fresh".into(), BasicPublishOptions::default(), b"x", properties)
            .await
            .unwrap();
    }
    channel.wait_for_confirms().await.unwrap();
    // A long poll interval: the one poll warren makes sees no policy.
    let warren = Warren::for_vhost(&vhost.name, 300).await;
    wait_for("listed", Duration::from_secs(30), || async {
        warren.queue(&vhost.name, "fresh").await.map(|_| ()).ok_or_else(|| "not yet".to_string())
    })
    .await;
    let policy = reqwest::Client::new()
        .put(format!("{}/api/policies/{}/limit", common::broker().management, encode(&vhost.name)))
        .basic_auth("guest", Some("guest"))
        .json(&json!({"pattern": "^fresh$", "definition": {"delivery-limit": 2}, "apply-to": "queues"}))
        .send()
        .await
        .unwrap();
    assert!(policy.status().is_success());
    tokio::time::sleep(Duration::from_millis(500)).await;

    let path = format!("/api/v1/queues/local/{}/fresh/snapshot", encode(&vhost.name));
    if common::broker().facts().await.hand_backs_count() {
        for _ in 0..3 {
            let (status, body) = warren.post_json(&path, json!({})).await;
            assert_eq!(status, 409, "a read without confirmation is refused: {body}");
            assert!(body["error"]["message"].as_str().is_some_and(|m| m.contains("delivery limit of 2")), "{body}");
        }
        let requeue = format!("/api/v1/queues/local/{}/fresh/requeue", encode(&vhost.name));
        let (status, body) = warren.post_json(&requeue, json!({"selection": {"matching": {"text": "f3"}}})).await;
        assert_eq!(status, 422, "reading past messages the filter does not take is refused: {body}");
    } else {
        // 4.3: reads given back do not count toward the new limit; three of them drop nothing.
        for round in 1..=3 {
            let (status, snapshot) = warren.post_json(&path, json!({})).await;
            assert_eq!(status, 200, "round {round}: {snapshot}");
            assert_eq!(snapshot["messages"].as_array().unwrap().len(), 5, "round {round}: {snapshot}");
        }
    }
    assert_eq!(drain_ids(&channel, "fresh").await, vec!["f1", "f2", "f3", "f4", "f5"], "nothing dropped");
    warren.stop().await;
    connection.close(0, "done".into()).await.ok();
}

/// Issue 16 (2), must-have 2: confirmed snapshots of a quorum queue walk every message's delivery
/// count up to the limit (on 4.0.5, 21 snapshots against the default of 20 dropped all 100, and
/// the 21st still answered with the 100 messages). A message read at its limit is not given
/// back: it is copied to the holding queue, its original acked, and the snapshot says so.
/// From 4.3 on a read given back is not counted (issue 30: its messages carry `x-acquired-count`
/// and no `x-delivery-count`): nothing is at risk, so nothing is held, and nothing is dropped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshots_hold_messages_at_their_delivery_limit_instead_of_dropping_them() {
    let vhost = TestVhost::create("heldsnap").await;
    let connection = vhost.connect().await;
    let channel = vhost.channel(&connection).await;
    let mut args = FieldTable::default();
    args.insert("x-queue-type".into(), AMQPValue::LongString("quorum".into()));
    args.insert("x-delivery-limit".into(), AMQPValue::LongInt(2));
    channel
        .queue_declare("capped".into(), QueueDeclareOptions { durable: true, ..Default::default() }, args)
        .await
        .unwrap();
    let all: Vec<String> = (1..=20).map(|i| format!("c{i}")).collect();
    for id in &all {
        let properties = BasicProperties::default().with_message_id(id.as_str().into());
        channel
            .basic_publish("".into(), "capped".into(), BasicPublishOptions::default(), b"{}", properties)
            .await
            .unwrap();
    }
    channel.wait_for_confirms().await.unwrap();
    let warren = Warren::for_vhost(&vhost.name, 1).await;
    wait_for("listed", Duration::from_secs(30), || async {
        warren.queue(&vhost.name, "capped").await.map(|_| ()).ok_or_else(|| "not yet".to_string())
    })
    .await;

    let path = format!("/api/v1/queues/local/{}/capped/snapshot", encode(&vhost.name));
    if !common::broker().facts().await.hand_backs_count() {
        for round in 1..=4 {
            let (status, snapshot) = warren.post_json(&path, json!({"confirm": "true"})).await;
            assert_eq!(status, 200, "{snapshot}");
            assert_eq!(common::dead_letters::message_ids(&snapshot["messages"]), all, "round {round}");
            assert!(snapshot["messages"].as_array().unwrap().iter().all(|m| m["held_in"].is_null()), "{snapshot}");
            assert!(snapshot["note"].is_null(), "{snapshot}");
        }
        assert_eq!(drain_ids(&channel, "capped").await, all, "four reads past the limit of 2 dropped none");
        let held = reqwest::Client::new()
            .get(format!("{}/api/queues/{}/warren.held.capped", common::broker().management, encode(&vhost.name)))
            .basic_auth("guest", Some("guest"))
            .send()
            .await
            .unwrap();
        assert_eq!(held.status(), 404, "no holding queue was declared");
        warren.stop().await;
        connection.close(0, "done".into()).await.ok();
        return;
    }
    for round in 1..=2 {
        let (status, snapshot) = warren.post_json(&path, json!({"confirm": "true"})).await;
        assert_eq!(status, 200, "{snapshot}");
        assert_eq!(common::dead_letters::message_ids(&snapshot["messages"]), all, "round {round}");
        assert!(snapshot["messages"].as_array().unwrap().iter().all(|m| m["held_in"].is_null()), "{snapshot}");
    }
    // The third read finds every message at the limit: given back, the broker would drop them.
    let (status, snapshot) = warren.post_json(&path, json!({"confirm": "true"})).await;
    assert_eq!(status, 200, "{snapshot}");
    assert_eq!(common::dead_letters::message_ids(&snapshot["messages"]), all);
    for m in snapshot["messages"].as_array().unwrap() {
        assert_eq!(m["held_in"], "warren.held.capped", "{m}");
    }
    let note = snapshot["note"].as_str().unwrap_or_default();
    assert!(note.contains("20 of these messages") && note.contains("warren.held.capped"), "{snapshot}");
    let (status, page) = warren.get_text(&format!("/dlq/local/{}/capped", encode(&vhost.name))).await;
    assert_eq!(status, 200);
    assert!(page.contains("held in warren.held.capped"), "the browser shows where they are");

    let (status, snapshot) = warren.post_json(&path, json!({"confirm": "true"})).await;
    assert_eq!(status, 200, "{snapshot}");
    assert!(snapshot["messages"].as_array().unwrap().is_empty(), "{snapshot}");
    // Every id is in exactly one place, in order, and the held copies start a fresh count.
    assert!(drain_ids(&channel, "capped").await.is_empty());
    let held = channel
        .basic_get("warren.held.capped".into(), lapin::options::BasicGetOptions { no_ack: false })
        .await
        .unwrap()
        .expect("a held message");
    let headers = held.delivery.properties.headers().clone().unwrap_or_default();
    assert!(!headers.inner().contains_key("x-delivery-count"), "{headers:?}");
    held.delivery.nack(lapin::options::BasicNackOptions { requeue: true, ..Default::default() }).await.unwrap();
    assert_eq!(drain_ids(&channel, "warren.held.capped").await, all);
    warren.stop().await;
    connection.close(0, "done".into()).await.ok();
}

/// A vhost-wide policy with a message TTL would expire what the holding queue holds: a quorum
/// queue with a delivery limit is then not read at all, and the answer says why and how to
/// exempt the holding queues.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holding_queue_that_would_expire_messages_is_refused_before_reading() {
    let vhost = TestVhost::create("heldttl").await;
    let connection = vhost.connect().await;
    let channel = vhost.channel(&connection).await;
    let mut args = FieldTable::default();
    args.insert("x-queue-type".into(), AMQPValue::LongString("quorum".into()));
    args.insert("x-delivery-limit".into(), AMQPValue::LongInt(1));
    channel
        .queue_declare("ttlq".into(), QueueDeclareOptions { durable: true, ..Default::default() }, args)
        .await
        .unwrap();
    for i in 1..=3 {
        let properties = BasicProperties::default().with_message_id(format!("t{i}").into());
        channel
            .basic_publish("".into(), "ttlq".into(), BasicPublishOptions::default(), b"{}", properties)
            .await
            .unwrap();
    }
    channel.wait_for_confirms().await.unwrap();
    let policy = reqwest::Client::new()
        .put(format!("{}/api/policies/{}/everything", common::broker().management, encode(&vhost.name)))
        .basic_auth("guest", Some("guest"))
        .json(&json!({"pattern": "^warren", "definition": {"message-ttl": 60000}, "apply-to": "queues"}))
        .send()
        .await
        .unwrap();
    assert!(policy.status().is_success());
    let warren = Warren::for_vhost(&vhost.name, 1).await;
    wait_for("listed", Duration::from_secs(30), || async {
        warren.queue(&vhost.name, "ttlq").await.map(|_| ()).ok_or_else(|| "not yet".to_string())
    })
    .await;
    let path = format!("/api/v1/queues/local/{}/ttlq/snapshot", encode(&vhost.name));
    let (status, body) = warren.post_json(&path, json!({"confirm": "true"})).await;
    if !common::broker().facts().await.hand_backs_count() {
        // 4.3: a read given back is not counted, so nothing would be held: nothing to refuse.
        assert_eq!(status, 200, "{body}");
        assert_eq!(common::dead_letters::message_ids(&body["messages"]), ["t1", "t2", "t3"]);
        assert_eq!(drain_ids(&channel, "ttlq").await, vec!["t1", "t2", "t3"], "nothing lost");
        let held = reqwest::Client::new()
            .get(format!("{}/api/queues/{}/warren.held.ttlq", common::broker().management, encode(&vhost.name)))
            .basic_auth("guest", Some("guest"))
            .send()
            .await
            .unwrap();
        assert_eq!(held.status(), 404, "no holding queue was declared");
        warren.stop().await;
        connection.close(0, "done".into()).await.ok();
        return;
    }
    assert_ne!(status, 200, "{body}");
    let message = body["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("warren.held.ttlq") && message.contains("message TTL"), "{body}");
    common::declare(&channel, "elsewhere", false).await;
    let requeue = format!("/api/v1/queues/local/{}/ttlq/requeue", encode(&vhost.name));
    let job = warren.run_move(&requeue, json!({"selection": "all", "target": {"queue": "elsewhere"}})).await;
    assert_eq!(job["state"], "failed", "{job}");
    assert!(job["error"].as_str().unwrap_or_default().contains("warren.held.ttlq"), "{job}");
    let held = reqwest::Client::new()
        .get(format!("{}/api/queues/{}/warren.held.ttlq", common::broker().management, encode(&vhost.name)))
        .basic_auth("guest", Some("guest"))
        .send()
        .await
        .unwrap();
    assert_eq!(held.status(), 404, "no holding queue was declared");
    assert!(drain_ids(&channel, "elsewhere").await.is_empty());
    assert_eq!(drain_ids(&channel, "ttlq").await, vec!["t1", "t2", "t3"], "nothing read, nothing lost");
    warren.stop().await;
    connection.close(0, "done".into()).await.ok();
}

/// Issue 16 (9), must-have 7: a snapshot of a queue that a consumer is draining answers within
/// 10 s (it took 168 s: the give-back waited 2 s for each message to be counted, and the
/// consumer took them first), says why its order may differ, and loses nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_of_a_queue_being_drained_answers_quickly_and_loses_nothing() {
    use futures_util::StreamExt;
    use lapin::options::{BasicAckOptions, BasicConsumeOptions, BasicQosOptions};
    let vhost = TestVhost::create("draining").await;
    let connection = vhost.connect().await;
    let channel = vhost.channel(&connection).await;
    let mut args = FieldTable::default();
    args.insert("x-queue-type".into(), AMQPValue::LongString("quorum".into()));
    channel
        .queue_declare("drained".into(), QueueDeclareOptions { durable: true, ..Default::default() }, args)
        .await
        .unwrap();
    let all: Vec<String> = (1..=600).map(|i| format!("d{i}")).collect();
    for id in &all {
        let properties = BasicProperties::default().with_message_id(id.as_str().into());
        channel
            .basic_publish("".into(), "drained".into(), BasicPublishOptions::default(), b"{}", properties)
            .await
            .unwrap();
    }
    channel.wait_for_confirms().await.unwrap();
    let warren = Warren::for_vhost(&vhost.name, 1).await;
    wait_for("listed", Duration::from_secs(30), || async {
        warren.queue(&vhost.name, "drained").await.map(|_| ()).ok_or_else(|| "not yet".to_string())
    })
    .await;

    // A slow consumer: one message at a time, 30 ms each.
    let consumer_connection = vhost.connect().await;
    let consumer_channel = consumer_connection.create_channel().await.unwrap();
    consumer_channel.basic_qos(1, BasicQosOptions::default()).await.unwrap();
    let mut consumer = consumer_channel
        .basic_consume("drained".into(), "slow".into(), BasicConsumeOptions::default(), FieldTable::default())
        .await
        .unwrap();
    let (stop, mut stopped) = tokio::sync::oneshot::channel::<()>();
    let drainer = tokio::spawn(async move {
        let mut consumed = Vec::new();
        loop {
            let delivery = tokio::select! {
                _ = &mut stopped => break,
                next = consumer.next() => next.unwrap().unwrap(),
            };
            tokio::time::sleep(Duration::from_millis(30)).await;
            delivery.ack(BasicAckOptions::default()).await.unwrap();
            consumed.push(delivery.properties.message_id().as_ref().unwrap().to_string());
        }
        consumer_channel.close(200, "done".into()).await.unwrap();
        consumed
    });
    tokio::time::sleep(Duration::from_millis(500)).await;

    let path = format!("/api/v1/queues/local/{}/drained/snapshot", encode(&vhost.name));
    let started = std::time::Instant::now();
    let (status, snapshot) = warren.post_json(&path, json!({"count": 100, "confirm": "true"})).await;
    let took = started.elapsed();
    assert_eq!(status, 200, "{snapshot}");
    assert!(took < Duration::from_secs(10), "the snapshot took {took:?}");
    assert!(!snapshot["messages"].as_array().unwrap().is_empty(), "{snapshot}");
    assert!(snapshot["note"].as_str().is_some_and(|n| n.contains("another consumer")), "{snapshot}");

    stop.send(()).unwrap();
    let mut seen = drainer.await.unwrap();
    seen.extend(drain_ids(&channel, "drained").await);
    let duplicates = seen.len() - seen.iter().collect::<std::collections::HashSet<_>>().len();
    seen.sort();
    seen.dedup();
    let mut expected = all.clone();
    expected.sort();
    assert_eq!(seen, expected, "every message consumed or still in the queue ({duplicates} duplicates)");
    warren.stop().await;
    consumer_connection.close(0, "done".into()).await.ok();
    connection.close(0, "done".into()).await.ok();
}

/// Script and markup in payloads and headers, invalid UTF-8, a 5 MB body, binary and deeply
/// nested header tables: all render escaped and truncated, and no script runs in Chromium.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_payloads_render_escaped_and_never_run() {
    let vhost = TestVhost::create("hostile").await;
    let connection = vhost.connect().await;
    let channel = vhost.channel(&connection).await;
    let script = "<script>window.__pwned = 1</script><img src=x onerror=\"window.__pwned = 2\">";
    let mut hostile_headers = FieldTable::default();
    hostile_headers.insert("x-exception-message".into(), AMQPValue::LongString(script.into()));
    let mut nested = FieldTable::default();
    for depth in 0..20 {
        let mut outer = FieldTable::default();
        outer.insert(format!("level{depth}").as_str().into(), AMQPValue::FieldTable(nested));
        nested = outer;
    }
    let mut nested_headers = FieldTable::default();
    nested_headers.insert("deep".into(), AMQPValue::FieldTable(nested));
    let big = vec![b'A'; 5 * 1024 * 1024];
    let messages = vec![
        ("html".to_string(), script.as_bytes().to_vec(), hostile_headers),
        (
            "invalid-utf8".to_string(),
            vec![0xff, 0xfe, 0x3c, 0x73, 0x63, 0x72, 0x69, 0x70, 0x74, 0x3e],
            FieldTable::default(),
        ),
        ("big".to_string(), big, FieldTable::default()),
        ("binary".to_string(), (0u8..=255).collect(), FieldTable::default()),
        ("nested".to_string(), b"{}".to_vec(), nested_headers),
    ];
    dead_letter(&vhost, &channel, "dlq", false, messages).await;
    let warren = Warren::for_vhost(&vhost.name, 1).await;
    listed_with(&warren, &vhost.name, "dlq", 5).await;
    let (status, snapshot) =
        warren.post_json(&format!("/api/v1/queues/local/{}/dlq/snapshot", encode(&vhost.name)), json!({})).await;
    assert_eq!(status, 200, "{snapshot}");
    assert_eq!(snapshot["messages"][2]["payload_bytes"], 5 * 1024 * 1024, "the full size is known");

    let base = format!("/dlq/local/{}/dlq", encode(&vhost.name));
    for position in 1..=5 {
        let (status, page) = warren.get_text(&format!("{base}/messages/{position}")).await;
        assert_eq!(status, 200, "message {position}");
        assert!(!page.contains("<script>window"), "message {position}: markup is escaped");
        assert!(!page.contains("<img src=x"), "message {position}: markup is escaped");
    }
    let (_, big_page) = warren.get_text(&format!("{base}/messages/3")).await;
    assert!(big_page.contains("Truncated"), "the 5 MB payload is shown truncated");
    assert!(big_page.len() < 1024 * 1024, "and the page stays small: {} bytes", big_page.len());
    let (_, binary_page) = warren.get_text(&format!("{base}/messages/4")).await;
    assert!(binary_page.contains("00000000  00 01 02 03"), "binary is a hex dump");

    // A real browser: open the list and every message; no script from a payload runs.
    let (_driver, client) = common::browser::start().await;
    for path in std::iter::once(base.clone()).chain((1..=5).map(|p| format!("{base}/messages/{p}"))) {
        client.goto(&warren.url(&path)).await.unwrap();
        let pwned = client.execute("return window.__pwned === undefined;", vec![]).await.unwrap();
        assert_eq!(pwned, Value::Bool(true), "a script from a payload ran on {path}");
    }
    let text = client.find(fantoccini::Locator::Css("body")).await.unwrap().text().await.unwrap();
    assert!(text.contains("deep"), "the nested header is shown");
    client.close().await.unwrap();
    warren.stop().await;
    connection.close(0, "done".into()).await.ok();
}

/// Issue 17, case 4: messages of real frameworks, reproduced with a plain AMQP client. Celery
/// keeps its id in the `id` header (and `correlation_id`), with a pickle body and a readable
/// `argsrepr`; dramatiq keeps its id in the JSON body. Both show their id, task and arguments,
/// the audit of a requeue records their ids, and JSON shows in its own key order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn framework_messages_show_their_ids_and_tasks_and_the_audit_records_them() {
    let vhost = TestVhost::create("frameworks").await;
    let connection = vhost.connect().await;
    let channel = vhost.channel(&connection).await;
    let durable = QueueDeclareOptions { durable: true, ..Default::default() };
    channel.queue_declare("work.dlq".into(), durable, FieldTable::default()).await.unwrap();
    let mut args = FieldTable::default();
    args.insert("x-dead-letter-exchange".into(), AMQPValue::LongString("".into()));
    args.insert("x-dead-letter-routing-key".into(), AMQPValue::LongString("work.dlq".into()));
    channel.queue_declare("work".into(), durable, args).await.unwrap();

    let mut celery = FieldTable::default();
    for (k, v) in [
        ("lang", "py"),
        ("task", "shop.tasks.charge"),
        ("id", "c-7f3"),
        ("root_id", "c-7f3"),
        ("argsrepr", "(42,)"),
        ("kwargsrepr", "{'currency': 'EUR'}"),
    ] {
        celery.insert(k.into(), AMQPValue::LongString(v.into()));
    }
    celery.insert("retries".into(), AMQPValue::LongInt(1));
    let pickle = b"\x80\x04\x95\x1d\x00\x00\x00\x00\x00\x00\x00]\x94(K*}\x94}\x94e.".to_vec();
    let dramatiq = br#"{"queue_name":"default","actor_name":"send_mail","args":["a@b.example"],"kwargs":{},"options":{"retries":2},"message_id":"d-91","message_timestamp":1700000000000}"#;
    let plain = br#"{"zeta": 1, "alpha": {"second": 2, "first": 1}}"#;
    let messages: Vec<(BasicProperties, &[u8])> = vec![
        (
            BasicProperties::default()
                .with_correlation_id("c-7f3".into())
                .with_content_type("application/x-python-serialize".into())
                .with_headers(celery),
            &pickle,
        ),
        (BasicProperties::default().with_content_type("application/json".into()), dramatiq),
        (BasicProperties::default().with_message_id("plain".into()), plain),
    ];
    for (properties, body) in messages {
        let properties = properties.with_expiration("0".into()); // dead-lettered at once
        channel
            .basic_publish("".into(), "work".into(), BasicPublishOptions::default(), body, properties)
            .await
            .unwrap();
    }
    channel.wait_for_confirms().await.unwrap();
    let warren = Warren::for_vhost(&vhost.name, 1).await;
    listed_with(&warren, &vhost.name, "work.dlq", 3).await;

    let snapshot = warren.snapshot(&vhost.name, "work.dlq", 10).await;
    let m = &snapshot["messages"];
    assert_eq!(m[0]["message_id"], "c-7f3", "{snapshot}");
    assert_eq!(m[0]["message_id_from"], "the Celery id header");
    assert_eq!(m[0]["app"]["kind"], "shop.tasks.charge");
    assert_eq!(m[0]["app"]["attempt"], 1);
    assert_eq!(m[0]["app"]["arguments"], "(42,) {'currency': 'EUR'}");
    assert_eq!(m[1]["message_id"], "d-91");
    assert_eq!(m[1]["app"]["framework"], "dramatiq");
    assert_eq!(m[1]["app"]["kind"], "send_mail");
    assert_eq!(m[2]["message_id"], "plain");
    assert_eq!(m[2]["message_id_from"], "the message_id property");
    assert!(m[2]["app"].is_null(), "no framework: {}", m[2]);

    let base = format!("/dlq/local/{}/work.dlq", encode(&vhost.name));
    let (_, list) = warren.get_text(&base).await;
    assert!(list.contains("shop.tasks.charge") && list.contains("send_mail"), "the task column");
    assert!(
        list.contains(&format!(">{}<", common::ident("c-7f3")))
            && list.contains(&format!(">{}<", common::ident("d-91"))),
        "the id column"
    );
    let (_, celery_page) = warren.get_text(&format!("{base}/messages/1")).await;
    assert!(celery_page.contains("(42,)") && celery_page.contains("the Celery id header"), "{celery_page}");
    let (_, plain_page) = warren.get_text(&format!("{base}/messages/3")).await;
    let (zeta, alpha) = (plain_page.find("zeta").unwrap(), plain_page.find("alpha").unwrap());
    let (second, first) = (plain_page.find("second").unwrap(), plain_page.find("first&#34;").unwrap());
    assert!(zeta < alpha && second < first, "the payload's own key order");

    let path = format!("/api/v1/queues/local/{}/work.dlq/requeue", encode(&vhost.name));
    let job = warren.run_move(&path, json!({"selection": "all"})).await;
    assert_eq!(job["state"], "done", "{job}");
    let id = job["id"].as_i64().unwrap();
    let (_, fates) = warren.get_json(&format!("/api/v1/audit/{id}/messages")).await;
    let recorded: Vec<&str> = fates.as_array().unwrap().iter().filter_map(|f| f["message_id"].as_str()).collect();
    assert_eq!(recorded, ["c-7f3", "d-91", "plain"], "the audit records the frameworks' ids: {fates}");
    assert_eq!(drain_ids(&channel, "work").await.len(), 3, "all three back in work");
    warren.stop().await;
    connection.close(0, "done".into()).await.ok();
}

/// Issue 17, case 3: why the application gave up. Messages dead-lettered with Spring AMQP's
/// `x-exception-*` headers and with an error nested in a header table show the error and its
/// type in a column and grouped with counts (which say they cover the snapshot).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn application_errors_are_a_column_and_a_grouping() {
    let vhost = TestVhost::create("apperrors").await;
    let connection = vhost.connect().await;
    let channel = vhost.channel(&connection).await;
    let spring = |sku: &str| {
        let mut h = FieldTable::default();
        let message = format!("sku {sku} is not in the catalogue");
        h.insert("x-exception-message".into(), AMQPValue::LongString(message.as_str().into()));
        let trace = format!("com.shop.SkuUnknownException: {message}\n\tat com.shop.Catalogue.find(Catalogue.java:42)");
        h.insert("x-exception-stacktrace".into(), AMQPValue::LongString(trace.as_str().into()));
        h.insert("x-original-exchange".into(), AMQPValue::LongString("orders".into()));
        h.insert("x-original-routingKey".into(), AMQPValue::LongString("order.created".into()));
        h
    };
    let mut nested = FieldTable::default();
    let mut error = FieldTable::default();
    error.insert("message".into(), AMQPValue::LongString("card declined".into()));
    error.insert("type".into(), AMQPValue::LongString("PaymentError".into()));
    nested.insert("error".into(), AMQPValue::FieldTable(error));
    let messages = vec![
        ("e1".to_string(), b"{}".to_vec(), spring("GIFT-CARD-LEGACY")),
        ("e2".to_string(), b"{}".to_vec(), spring("GIFT-CARD-LEGACY")),
        ("e3".to_string(), b"{}".to_vec(), nested),
        ("e4".to_string(), b"{}".to_vec(), FieldTable::default()),
    ];
    dead_letter(&vhost, &channel, "work.dlq", false, messages).await;
    let warren = Warren::for_vhost(&vhost.name, 1).await;
    listed_with(&warren, &vhost.name, "work.dlq", 4).await;
    let snapshot = warren.snapshot(&vhost.name, "work.dlq", 10).await;
    let m = &snapshot["messages"];
    assert_eq!(m[0]["error"]["message"], "sku GIFT-CARD-LEGACY is not in the catalogue", "{snapshot}");
    assert_eq!(m[0]["error"]["kind"], "com.shop.SkuUnknownException");
    assert_eq!(m[2]["error"]["message"], "card declined");
    assert_eq!(m[2]["error"]["kind"], "PaymentError");
    assert!(m[3]["error"].is_null(), "no error recorded: {}", m[3]);

    let (_, page) = warren.get_text(&format!("/dlq/local/{}/work.dlq", encode(&vhost.name))).await;
    let grouping = &page[page.find("By error").expect("a by-error table")..];
    let grouping = &grouping[..grouping.find("</table>").unwrap()];
    assert!(
        grouping.contains(
            "com.shop.SkuUnknownException: sku GIFT-CARD-LEGACY is not in the catalogue</a></td><td class=\"num\">2<"
        ),
        "{grouping}"
    );
    assert!(grouping.contains("PaymentError: card declined</a></td><td class=\"num\">1<"), "{grouping}");
    assert!(page.contains("cover the 4 messages of this snapshot"), "the bound is stated");
    warren.stop().await;
    connection.close(0, "done".into()).await.ok();
}
