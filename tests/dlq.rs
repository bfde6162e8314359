//! Moving dead letters back, against the real broker: only confirmed copies are acked, nothing
//! is lost, order is kept.

mod common;

use std::time::Duration;

use common::dead_letters::{dead_letter, dead_letter_through, depth, drain_ids, message_ids, numbered};
use common::{declare, wait_for, TestVhost, Warren};
use lapin::options::{BasicGetOptions, BasicPublishOptions, ExchangeDeclareOptions, QueueDeclareOptions};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{BasicProperties, Channel, ExchangeKind};
use serde_json::{json, Value};

fn encode(s: &str) -> String {
    warren::broker::management::encode_segment(s)
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

    // Positions name the messages of the snapshot the user looked at.
    warren.snapshot(&vhost.name, "work.dlq", 10).await;
    let path = format!("/api/v1/queues/local/{}/work.dlq/requeue", encode(&vhost.name));
    let job = warren.run_move(&path, json!({"selection": {"positions": [3]}})).await;
    assert_eq!(job["state"], "done", "{job}");
    assert_eq!(job["report"]["moved"], json!([{"position": 3, "message_id": "m3", "to_queue": "work"}]));

    // It arrived once in its original queue, with warren's replay counter; the other 49 stay,
    // in order.
    let message =
        channel.basic_get("work".into(), BasicGetOptions { no_ack: true }).await.unwrap().expect("m3 in work");
    assert_eq!(message.delivery.properties.message_id().as_ref().map(|s| s.as_str()), Some("m3"));
    let replays =
        message.delivery.properties.headers().as_ref().and_then(|h| h.inner().get("x-warren-replay-count").cloned());
    assert_eq!(replays, Some(AMQPValue::LongLongInt(1)));
    assert!(
        channel.basic_get("work".into(), BasicGetOptions { no_ack: true }).await.unwrap().is_none(),
        "exactly once"
    );
    let expected: Vec<String> = (1..=50).filter(|i| *i != 3).map(|i| format!("m{i}")).collect();
    assert_eq!(drain_ids(&channel, "work.dlq").await, expected);

    let (_, audit) = warren.get_json("/api/v1/audit").await;
    assert_eq!(audit[0]["outcome"], "done");
    assert_eq!(audit[0]["message_ids"], json!(["m3"]));
    let (status, page) = warren.get_text("/audit").await;
    assert_eq!(status, 200);
    assert!(page.contains("requeue") && page.contains("done") && page.contains("m3"), "the audit page shows it");
    // Where they went, and the job's report (issue 19, case 9).
    let job_id = job["id"].as_i64().unwrap();
    assert!(page.contains(&format!("<a href=\"/jobs/{job_id}\" class=\"job-link\">report</a>")), "{page}");
    assert!(page.contains("each message&#39;s original queue") || page.contains("each message's original queue"));
    // After a restart the job's page still says what became of each message (issue 19, case
    // 10), from the audit log.
    let warren = warren.restart().await;
    let (status, after) = warren.get_json(&format!("/api/v1/jobs/{job_id}")).await;
    assert_eq!(status, 200, "{after}");
    assert_eq!(after["method"], serde_json::Value::Null, "known from the audit log only: {after}");
    assert_eq!(after["report"]["moved"], json!([{"position": 3, "message_id": "m3", "to_queue": "work"}]), "{after}");
    let (_, page) = warren.get_text(&format!("/jobs/{job_id}")).await;
    assert!(page.contains("<td>m3</td><td>work</td>"), "{page}");
    warren.stop().await;
    connection.close(0, "done".into()).await.ok();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requeue_into_a_missing_queue_acks_nothing() {
    let (vhost, connection, channel, warren) = fifty_dead_letters_watched("missing").await;
    let all_fifty: Vec<String> = (1..=50).map(|i| format!("m{i}")).collect();
    let path = format!("/api/v1/queues/local/{}/work.dlq/requeue", encode(&vhost.name));

    // A named target that does not exist: refused before a message is read (a shovel would
    // have created it as a classic queue).
    let job = warren.run_move(&path, json!({"selection": "all", "target": {"queue": "no-such-queue"}})).await;
    assert_eq!(job["state"], "failed", "{job}");
    assert!(job["error"].as_str().unwrap().contains("no queue named"), "{job}");
    let (_, audit) = warren.get_json("/api/v1/audit").await;
    assert_eq!(audit[0]["outcome"], "failed");
    assert!(audit[0]["detail"].as_str().unwrap().contains("no queue named"), "{audit}");

    // The queue they died in was deleted: the check of that target finds it missing before a
    // copy is sent (a copy sent would come back unroutable), nothing is acked.
    vhost.delete_queue("work").await;
    let job = warren.run_move(&path, json!({"selection": "all"})).await;
    assert_eq!(job["state"], "failed", "{job}");
    assert_eq!(job["report"]["failed"].as_array().unwrap().len(), 50, "{job}");
    assert!(job["report"]["failed"][0]["reason"].as_str().unwrap().contains("no queue named \"work\""), "{job}");
    assert!(job["report"]["moved"].as_array().unwrap().is_empty());
    assert_eq!(job["report"]["left"], 50);
    assert_eq!(drain_ids(&channel, "work.dlq").await, all_fifty, "all 50 remain, in order");
    let (_, audit) = warren.get_json("/api/v1/audit").await;
    assert_eq!(audit[0]["outcome"], "failed");
    assert!(audit[0]["detail"].as_str().unwrap().contains("no queue named \"work\""), "{audit}");
    warren.stop().await;
    connection.close(0, "done".into()).await.ok();
}

/// "Requeue all matching": the whole queue is read, only matching messages move, the others
/// stay in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requeue_all_matching_a_filter() {
    let vhost = TestVhost::create("matching").await;
    let connection = vhost.connect().await;
    let channel = vhost.channel(&connection).await;
    // Every third message is a refund.
    let kind = |i: usize| if i.is_multiple_of(3) { "refund" } else { "order" };
    let messages = (1..=30)
        .map(|i| {
            (format!("m{i}"), format!("{{\"kind\": \"{}\", \"n\": {i}}}", kind(i)).into_bytes(), FieldTable::default())
        })
        .collect();
    dead_letter(&vhost, &channel, "work.dlq", false, messages).await;
    let warren = Warren::for_vhost(&vhost.name, 1).await;
    listed(&warren, &vhost.name, "work.dlq").await;

    let path = format!("/api/v1/queues/local/{}/work.dlq/requeue", encode(&vhost.name));
    let job =
        warren.run_move(&path, json!({"selection": {"matching": {"text": "REFUND", "reason": "rejected"}}})).await;
    assert_eq!(job["state"], "done", "{job}");
    let ids = |k: &str| (1..=30).filter(|i| kind(*i) == k).map(|i| format!("m{i}")).collect::<Vec<_>>();
    assert_eq!(drain_ids(&channel, "work").await, ids("refund"));
    assert_eq!(drain_ids(&channel, "work.dlq").await, ids("order"), "the others stay, in order");
    warren.stop().await;
    connection.close(0, "done".into()).await.ok();
}

/// The original exchange and routing key come from `x-death`; every queue bound to that key
/// gets a copy, as the confirmation page warns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requeue_through_the_original_exchange() {
    let vhost = TestVhost::create("origexchange").await;
    let connection = vhost.connect().await;
    let channel = vhost.channel(&connection).await;
    let durable = ExchangeDeclareOptions { durable: true, ..Default::default() };
    channel.exchange_declare("orders".into(), ExchangeKind::Direct, durable, FieldTable::default()).await.unwrap();
    let mut args = FieldTable::default();
    args.insert("x-dead-letter-exchange".into(), AMQPValue::LongString("dlx".into()));
    channel
        .queue_declare("work".into(), QueueDeclareOptions { durable: true, ..Default::default() }, args)
        .await
        .unwrap();
    declare(&channel, "audit", false).await;
    for queue in ["work", "audit"] {
        channel
            .queue_bind(
                queue.into(),
                "orders".into(),
                "order.created".into(),
                Default::default(),
                FieldTable::default(),
            )
            .await
            .unwrap();
    }
    dead_letter_through(&vhost, &channel, "work.dlq", false, ("orders", "order.created"), numbered(3)).await;
    assert_eq!(drain_ids(&channel, "audit").await, vec!["m1", "m2", "m3"], "audit got the first copies");
    let warren = Warren::for_vhost(&vhost.name, 1).await;
    listed(&warren, &vhost.name, "work.dlq").await;

    let path = format!("/api/v1/queues/local/{}/work.dlq/requeue", encode(&vhost.name));
    let job = warren.run_move(&path, json!({"selection": "all", "target": "original_exchange"})).await;
    assert_eq!(job["state"], "done", "{job}");
    assert_eq!(job["report"]["moved"][0]["to_queue"], "exchange \"orders\", routing key \"order.created\"");
    assert_eq!(drain_ids(&channel, "work").await, vec!["m1", "m2", "m3"]);
    assert_eq!(drain_ids(&channel, "audit").await, vec!["m1", "m2", "m3"], "the duplicates the UI warns about");
    assert_eq!(depth(&channel, "work.dlq").await, 0);

    // The browser asks with the warning before doing it.
    let form = warren
        .http
        .post(warren.url(&format!("/dlq/local/{}/work.dlq/requeue", encode(&vhost.name))))
        .header("content-type", "application/x-www-form-urlencoded")
        .body("scope=all&target=original-exchange")
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(form.contains("Confirm: requeue") && form.contains("duplicates-warning"), "{form}");
    warren.stop().await;
    connection.close(0, "done".into()).await.ok();
}

/// Returned copies are matched to their originals across the batches in flight: 2,000 dead
/// letters of which every 25th was published with a routing key that is no longer bound, moved
/// back through the original exchange. The mover keeps two batches of copies in flight, and lapin
/// attaches a return to whichever confirmation comes next, so a return can arrive on another
/// batch's confirmation: exactly the 80 unroutable ones fail and stay, every other one moves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unroutable_copies_among_many_keep_exactly_their_originals() {
    let vhost = TestVhost::create("unroutable").await;
    let connection = vhost.connect().await;
    let channel = vhost.channel(&connection).await;
    let durable = ExchangeDeclareOptions { durable: true, ..Default::default() };
    channel.exchange_declare("orders".into(), ExchangeKind::Direct, durable, FieldTable::default()).await.unwrap();
    declare(&channel, "work.dlq", false).await;
    let mut args = FieldTable::default();
    args.insert("x-dead-letter-exchange".into(), AMQPValue::LongString("".into()));
    args.insert("x-dead-letter-routing-key".into(), AMQPValue::LongString("work.dlq".into()));
    channel
        .queue_declare("work".into(), QueueDeclareOptions { durable: true, ..Default::default() }, args)
        .await
        .unwrap();
    for key in ["order.created", "order.legacy"] {
        channel
            .queue_bind("work".into(), "orders".into(), key.into(), Default::default(), FieldTable::default())
            .await
            .unwrap();
    }
    // Published already expired: the broker dead-letters each at once, with the route in x-death.
    let ids: Vec<String> = (1..=2_000).map(|i| format!("u{i}")).collect();
    let legacy = |i: usize| i.is_multiple_of(25);
    for (i, id) in ids.iter().enumerate() {
        let key = if legacy(i + 1) { "order.legacy" } else { "order.created" };
        // Persistent: the broker confirms the routed copies after writing them, several at once,
        // while the unroutable ones are returned at once.
        let properties = BasicProperties::default()
            .with_message_id(id.as_str().into())
            .with_expiration("0".into())
            .with_delivery_mode(2);
        channel
            .basic_publish("orders".into(), key.into(), BasicPublishOptions::default(), b"{}", properties)
            .await
            .unwrap();
    }
    channel.wait_for_confirms().await.unwrap();
    wait_for("2,000 dead letters", Duration::from_secs(30), || async {
        let n = depth(&channel, "work.dlq").await;
        if n == 2_000 {
            Ok(())
        } else {
            Err(format!("{n}"))
        }
    })
    .await;
    channel.queue_unbind("work".into(), "orders".into(), "order.legacy".into(), FieldTable::default()).await.unwrap();
    let warren = Warren::for_vhost(&vhost.name, 1).await;
    listed(&warren, &vhost.name, "work.dlq").await;

    let path = format!("/api/v1/queues/local/{}/work.dlq/requeue", encode(&vhost.name));
    let job = warren.run_move(&path, json!({"selection": "all", "target": "original_exchange"})).await;
    let expect_failed: Vec<String> =
        ids.iter().enumerate().filter(|(i, _)| legacy(i + 1)).map(|(_, id)| id.clone()).collect();
    let expect_moved: Vec<String> =
        ids.iter().enumerate().filter(|(i, _)| !legacy(i + 1)).map(|(_, id)| id.clone()).collect();
    let failed = message_ids(&job["report"]["failed"]);
    assert_eq!(failed, expect_failed, "exactly the unroutable ones failed: {}", job["report"]["stopped"]);
    let reasons = job["report"]["failed"].as_array().unwrap();
    assert!(reasons.iter().all(|f| f["reason"].as_str().unwrap().contains("unroutable")), "{job}");
    assert_eq!(drain_ids(&channel, "work").await, expect_moved, "every other one moved, in order");
    assert_eq!(drain_ids(&channel, "work.dlq").await, expect_failed, "the unroutable ones stay, in order");
    warren.stop().await;
    connection.close(0, "done".into()).await.ok();
}

/// Issue 16 (6): a delayed-retry topology. The consumer's first failure went to a wait queue
/// with a per-message TTL; it expired back into `work`; the next failure was rejected into the
/// final DLQ. The message's first death is the wait queue's expiry, but it came to the DLQ from
/// `work`: requeue sends it there (a copy in the wait queue, its TTL stripped, stays for ever).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requeue_sends_a_retried_message_to_the_queue_it_last_died_in() {
    use futures_util::StreamExt;
    use lapin::options::{BasicConsumeOptions, BasicRejectOptions};
    let vhost = TestVhost::create("retrytopology").await;
    let connection = vhost.connect().await;
    let channel = vhost.channel(&connection).await;
    let durable = QueueDeclareOptions { durable: true, ..Default::default() };
    let dead_letters_to = |queue: &str| {
        let mut args = FieldTable::default();
        args.insert("x-dead-letter-exchange".into(), AMQPValue::LongString("".into()));
        args.insert("x-dead-letter-routing-key".into(), AMQPValue::LongString(queue.into()));
        args
    };
    channel.queue_declare("final.dlq".into(), durable, FieldTable::default()).await.unwrap();
    channel.queue_declare("work".into(), durable, dead_letters_to("final.dlq")).await.unwrap();
    channel.queue_declare("work.wait".into(), durable, dead_letters_to("work")).await.unwrap();
    let ids: Vec<String> = (1..=5).map(|i| format!("retry-{i}")).collect();
    for id in &ids {
        // The application's retry: into the wait queue with a per-message TTL.
        let properties = BasicProperties::default().with_message_id(id.as_str().into()).with_expiration("20".into());
        let confirm = channel
            .basic_publish("".into(), "work.wait".into(), BasicPublishOptions::default(), b"{}", properties)
            .await
            .unwrap();
        assert!(confirm.await.unwrap().is_ack());
    }
    // They expire into `work`, where the consumer fails them for good.
    let rejecter = vhost.channel(&connection).await;
    let mut consumer = rejecter
        .basic_consume("work".into(), "rejecter".into(), BasicConsumeOptions::default(), FieldTable::default())
        .await
        .unwrap();
    for _ in &ids {
        let delivery = tokio::time::timeout(Duration::from_secs(10), consumer.next()).await.unwrap().unwrap().unwrap();
        delivery.reject(BasicRejectOptions { requeue: false }).await.unwrap();
    }
    rejecter.close(200, "done".into()).await.unwrap();
    wait_for("5 in the final DLQ", Duration::from_secs(10), || async {
        let n = depth(&channel, "final.dlq").await;
        if n == 5 {
            Ok(())
        } else {
            Err(format!("{n}"))
        }
    })
    .await;

    let warren = Warren::for_vhost(&vhost.name, 1).await;
    listed(&warren, &vhost.name, "final.dlq").await;
    // The snapshot says where each died last, and where first.
    let snapshot_path = format!("/api/v1/queues/local/{}/final.dlq/snapshot", encode(&vhost.name));
    let (status, snapshot) = warren.post_json(&snapshot_path, json!({})).await;
    assert_eq!(status, 200, "{snapshot}");
    let first = &snapshot["messages"][0];
    assert_eq!(
        (first["original_queue"].as_str(), first["reason"].as_str()),
        (Some("work"), Some("rejected")),
        "{first}"
    );
    assert_eq!(first["first_death_queue"], "work.wait", "{first}");

    let path = format!("/api/v1/queues/local/{}/final.dlq/requeue", encode(&vhost.name));
    let job = warren.run_move(&path, json!({"selection": "all"})).await;
    assert_eq!(job["state"], "done", "{job}");
    assert_eq!(drain_ids(&channel, "work").await, ids, "every message back in the work queue, in order");
    assert_eq!(drain_ids(&channel, "work.wait").await, Vec::<String>::new(), "none stranded in the wait queue");
    assert_eq!(depth(&channel, "final.dlq").await, 0);
    warren.stop().await;
    connection.close(0, "done".into()).await.ok();
}

/// Issue 16 (5): two moves of one queue at once read each other's messages, so a selection
/// picked messages the user did not choose. The second is refused (409) and names the running
/// job; every message ends in the DLQ or in the target, none twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_move_of_a_queue_is_refused_while_the_first_runs() {
    let vhost = TestVhost::create("onemove").await;
    let connection = vhost.connect().await;
    let channel = vhost.channel(&connection).await;
    declare(&channel, "big.dlq", false).await;
    declare(&channel, "parked", false).await;
    let all: Vec<String> = (1..=3000).map(|i| format!("b{i}")).collect();
    for id in &all {
        let properties = BasicProperties::default().with_message_id(id.as_str().into());
        channel
            .basic_publish("".into(), "big.dlq".into(), BasicPublishOptions::default(), b"{}", properties)
            .await
            .unwrap();
    }
    channel.wait_for_confirms().await.unwrap();
    let warren = Warren::for_vhost(&vhost.name, 1).await;
    listed(&warren, &vhost.name, "big.dlq").await;

    let path = format!("/api/v1/queues/local/{}/big.dlq/requeue", encode(&vhost.name));
    let whole = json!({"selection": "all", "target": {"queue": "parked"}});
    warren.snapshot(&vhost.name, "big.dlq", 10).await;
    let some = json!({"selection": {"positions": [2, 4, 6]}, "target": {"queue": "parked"}});
    let (first, second) = tokio::join!(warren.post_json(&path, whole), warren.post_json(&path, some));
    let (started, refused) = if first.0 == 202 { (first, second) } else { (second, first) };
    assert_eq!(started.0, 202, "one starts: {started:?}");
    assert_eq!(refused.0, 409, "the other is refused: {refused:?}");
    let id = started.1["job"]["id"].as_i64().unwrap();
    let message = refused.1["error"]["message"].as_str().unwrap();
    assert!(message.contains(&format!("/jobs/{id}")), "it links the running job: {message}");
    let job = warren.wait_job(id).await;
    assert_eq!(job["state"], "done", "{job}");

    let mut seen = drain_ids(&channel, "parked").await;
    seen.extend(drain_ids(&channel, "big.dlq").await);
    assert_eq!(seen.len(), all.len(), "no message twice");
    seen.sort();
    let mut expected = all.clone();
    expected.sort();
    assert_eq!(seen, expected);
    // Once it ended, the queue can be moved again.
    let (status, body) = warren.post_json(&path, json!({"selection": "all", "target": {"queue": "parked"}})).await;
    assert_eq!(status, 202, "{body}");
    warren.stop().await;
    connection.close(0, "done".into()).await.ok();
}

/// Issue 16 (4): length-limited targets. One that drops its head when full took 1,000
/// confirmed copies and kept 100: it is refused unless the user accepts the risk. One that
/// rejects publishes when full takes what fits; the rest stay in the DLQ with the reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn length_limited_targets_lose_nothing_unasked() {
    let vhost = TestVhost::create("limitedtarget").await;
    let connection = vhost.connect().await;
    let channel = vhost.channel(&connection).await;
    declare(&channel, "many.dlq", false).await;
    let durable = QueueDeclareOptions { durable: true, ..Default::default() };
    let limited = |overflow: &str| {
        let mut args = FieldTable::default();
        args.insert("x-max-length".into(), AMQPValue::LongInt(100));
        args.insert("x-overflow".into(), AMQPValue::LongString(overflow.into()));
        args
    };
    channel.queue_declare("drops".into(), durable, limited("drop-head")).await.unwrap();
    channel.queue_declare("rejects".into(), durable, limited("reject-publish")).await.unwrap();
    // A policy sets the limit of this one, with the default overflow (drop-head).
    channel.queue_declare("policed".into(), durable, FieldTable::default()).await.unwrap();
    let policy = reqwest::Client::new()
        .put(format!("{}/api/policies/{}/limit", common::broker().management, encode(&vhost.name)))
        .basic_auth("guest", Some("guest"))
        .json(&json!({"pattern": "^policed$", "definition": {"max-length": 100}, "apply-to": "queues"}))
        .send()
        .await
        .unwrap();
    assert!(policy.status().is_success());
    let all: Vec<String> = (1..=1000).map(|i| format!("l{i}")).collect();
    for id in &all {
        let properties = BasicProperties::default().with_message_id(id.as_str().into());
        channel
            .basic_publish("".into(), "many.dlq".into(), BasicPublishOptions::default(), b"{}", properties)
            .await
            .unwrap();
    }
    channel.wait_for_confirms().await.unwrap();
    let warren = Warren::for_vhost(&vhost.name, 1).await;
    listed(&warren, &vhost.name, "many.dlq").await;
    let path = format!("/api/v1/queues/local/{}/many.dlq/requeue", encode(&vhost.name));

    for target in ["drops", "policed"] {
        let job = warren.run_move(&path, json!({"selection": "all", "target": {"queue": target}})).await;
        assert_eq!((job["state"].as_str(), job["progress"]["moved"].as_u64()), (Some("failed"), Some(0)), "{target}");
        assert!(job["error"].as_str().is_some_and(|e| e.contains("drop-head")), "{}", job["error"]);
        assert_eq!(depth(&channel, target).await, 0, "nothing was moved to {target}");
        assert_eq!(depth(&channel, "many.dlq").await, 1000);
    }

    let job = warren.run_move(&path, json!({"selection": "all", "target": {"queue": "rejects"}})).await;
    assert_eq!(job["state"], "partial", "{}", job["progress"]);
    let reason = &job["report"]["failed"][0]["reason"];
    assert!(reason.as_str().is_some_and(|r| r.contains("reject")), "{reason}");
    let mut seen = drain_ids(&channel, "rejects").await;
    assert_eq!(seen.len(), 100, "what fits");
    let moved = message_ids(&job["report"]["moved"]);
    let mut in_target = seen.clone();
    in_target.sort();
    let mut reported = moved.clone();
    reported.sort();
    assert_eq!(in_target, reported, "the report lists exactly what the target holds");
    seen.extend(drain_ids(&channel, "many.dlq").await);
    assert_eq!(seen.len(), 1000, "no message lost or twice");
    seen.sort();
    let mut expected = all.clone();
    expected.sort();
    assert_eq!(seen, expected);

    // Accepting the risk moves into the dropping target: what it drops, the user agreed to.
    for id in &all[..10] {
        let properties = BasicProperties::default().with_message_id(id.as_str().into());
        channel
            .basic_publish("".into(), "many.dlq".into(), BasicPublishOptions::default(), b"{}", properties)
            .await
            .unwrap();
    }
    channel.wait_for_confirms().await.unwrap();
    let job = warren
        .run_move(&path, json!({"selection": "all", "target": {"queue": "drops"}, "accept_drop_head": true}))
        .await;
    assert_eq!(job["state"], "done", "{}", job["error"]);
    assert_eq!(drain_ids(&channel, "drops").await, all[..10].to_vec());
    warren.stop().await;
    connection.close(0, "done".into()).await.ok();
}

/// A whole queue moved to a named queue goes through warren's mover (the broker's shovel
/// was used here before and could lose messages): in order, nothing left behind, every id in
/// the report, and no shovel left on the broker.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn moving_a_whole_queue_to_a_named_queue_uses_warrens_mover() {
    let (vhost, connection, channel, warren) = fifty_dead_letters_watched("wholemove").await;
    declare(&channel, "parked", false).await;
    let path = format!("/api/v1/queues/local/{}/work.dlq/requeue", encode(&vhost.name));
    let job = warren.run_move(&path, json!({"selection": "all", "target": {"queue": "parked"}})).await;
    assert_eq!((job["state"].as_str(), job["method"].as_str()), (Some("done"), Some("in-process")), "{job}");
    assert_eq!((job["progress"]["moved"].as_u64(), job["report"]["left"].as_u64()), (Some(50), Some(0)), "{job}");
    let expected: Vec<String> = (1..=50).map(|i| format!("m{i}")).collect();
    let reported = message_ids(&job["report"]["moved"]);
    assert_eq!(reported, expected, "the report lists every id");
    assert_eq!(drain_ids(&channel, "parked").await, expected, "all 50, in order");
    let (_, audit) = warren.get_json("/api/v1/audit").await;
    assert_eq!((audit[0]["action"].as_str(), audit[0]["moved"].as_i64()), (Some("move"), Some(50)));
    let shovels: Value = reqwest::Client::new()
        .get(format!("{}/api/parameters/shovel/{}", common::broker().management, encode(&vhost.name)))
        .basic_auth("guest", Some("guest"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(shovels, json!([]), "no shovel");
    warren.stop().await;
    connection.close(0, "done".into()).await.ok();
}

/// Issue 16 (3): the target of a whole-queue move deleted while the move runs. The shovel
/// said `done` and had acked 13,053 originals whose copies went nowhere. Now every message is
/// either still in the DLQ or listed as moved (those the delete itself destroyed), and the job
/// says the target went away.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_target_deleted_during_a_move_loses_nothing_the_delete_did_not() {
    let vhost = TestVhost::create("targetgone").await;
    let connection = vhost.connect().await;
    let channel = vhost.channel(&connection).await;
    declare(&channel, "big.dlq", false).await;
    declare(&channel, "parked", false).await;
    let all: Vec<String> = (1..=20_000).map(|i| format!("t{i}")).collect();
    for id in &all {
        let properties = BasicProperties::default().with_message_id(id.as_str().into()).with_delivery_mode(2);
        channel
            .basic_publish("".into(), "big.dlq".into(), BasicPublishOptions::default(), b"{}", properties)
            .await
            .unwrap();
    }
    channel.wait_for_confirms().await.unwrap();
    let warren = Warren::for_vhost(&vhost.name, 1).await;
    listed(&warren, &vhost.name, "big.dlq").await;

    let path = format!("/api/v1/queues/local/{}/big.dlq/requeue", encode(&vhost.name));
    let (status, started) = warren.post_json(&path, json!({"selection": "all", "target": {"queue": "parked"}})).await;
    assert_eq!(status, 202, "{started}");
    let id = started["job"]["id"].as_i64().unwrap();
    // Delete the target once some messages are in it.
    wait_for("the move under way", Duration::from_secs(30), || async {
        let (_, job) = warren.get_json(&format!("/api/v1/jobs/{id}")).await;
        match job["progress"]["moved"].as_u64() {
            Some(n) if n >= 500 => Ok(()),
            _ if job["state"] != "running" => panic!("the move ended before the target was deleted: {job}"),
            _ => Err(format!("{}", job["progress"])),
        }
    })
    .await;
    vhost.delete_queue("parked").await;
    let job = warren.wait_job(id).await;
    assert_ne!(job["state"], "done", "{job}");
    let failed = &job["report"]["failed"];
    assert!(failed[0]["reason"].as_str().is_some_and(|r| r.contains("unroutable")), "{job}");

    let moved: std::collections::HashSet<String> = message_ids(&job["report"]["moved"]).into_iter().collect();
    let left = drain_ids(&channel, "big.dlq").await;
    let left_set: std::collections::HashSet<String> = left.iter().cloned().collect();
    assert_eq!(left.len(), left_set.len(), "no message twice in the DLQ");
    let lost: Vec<&String> = all.iter().filter(|id| !moved.contains(*id) && !left_set.contains(*id)).collect();
    assert!(lost.is_empty(), "{} lost, the first: {:?}", lost.len(), lost.first());
    let both = moved.intersection(&left_set).count();
    assert!(moved.len() < all.len() && !left.is_empty(), "the delete stopped the move: {} moved", moved.len());
    eprintln!("moved {} before the delete, {} left in the DLQ, {both} in both (duplicates)", moved.len(), left.len());
    // The audit log has every moved id and the failure with its reason, not just counts.
    let (status, fates) = warren.get_json(&format!("/api/v1/audit/{id}/messages")).await;
    assert_eq!(status, 200, "{fates}");
    let of = |outcome: &str| -> Vec<&Value> {
        fates.as_array().unwrap().iter().filter(|f| f["outcome"] == outcome).collect()
    };
    let recorded: std::collections::HashSet<String> =
        of("moved").iter().map(|f| f["message_id"].as_str().unwrap().to_string()).collect();
    assert_eq!(recorded, moved, "the audit's moved ids are the report's");
    assert!(of("failed").iter().any(|f| f["detail"].as_str().unwrap().contains("unroutable")), "{fates}");
    warren.stop().await;
    connection.close(0, "done".into()).await.ok();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quorum_dlq_with_a_delivery_limit_is_not_read_past_unmoved_messages() {
    let vhost = TestVhost::create("quorumlimit").await;
    let connection = vhost.connect().await;
    let channel = vhost.channel(&connection).await;
    let mut args = FieldTable::default();
    args.insert("x-queue-type".into(), AMQPValue::LongString("quorum".into()));
    args.insert("x-delivery-limit".into(), AMQPValue::LongInt(2));
    channel
        .queue_declare("qdlq".into(), QueueDeclareOptions { durable: true, ..Default::default() }, args)
        .await
        .unwrap();
    for i in 1..=5 {
        let properties = BasicProperties::default().with_message_id(format!("q{i}").into());
        let confirm = channel
            .basic_publish("".into(), "qdlq".into(), BasicPublishOptions::default(), b"x", properties)
            .await
            .unwrap();
        assert!(confirm.await.unwrap().is_ack());
    }
    declare(&channel, "target", false).await;
    let warren = Warren::for_vhost(&vhost.name, 1).await;
    listed(&warren, &vhost.name, "qdlq").await;

    let path = format!("/api/v1/queues/local/{}/qdlq/requeue", encode(&vhost.name));
    // Taking the snapshot that the positions name reads each message once.
    warren.snapshot(&vhost.name, "qdlq", 10).await;
    if !common::broker().facts().await.hand_backs_count() {
        // 4.3 does not count a read given back toward the limit: reading past q1 and q2 costs
        // them nothing, and a move selected by the snapshot finds the messages it showed, though
        // each read raised their `x-acquired-count` (issue 30).
        warren.snapshot(&vhost.name, "qdlq", 10).await;
        let job = warren.run_move(&path, json!({"selection": {"positions": [3]}, "target": {"queue": "target"}})).await;
        assert_eq!(job["state"], "done", "{job}");
        assert_eq!(message_ids(&job["report"]["moved"]), ["q3"], "{job}");
        // The head two of a fresh snapshot, read three times by now (4.3 gives back the messages
        // read past to the queue's end: their place is the snapshot's to say).
        let snapshot = warren.snapshot(&vhost.name, "qdlq", 10).await;
        let head = message_ids(&snapshot["messages"])[..2].to_vec();
        let job =
            warren.run_move(&path, json!({"selection": {"positions": [1, 2]}, "target": {"queue": "target"}})).await;
        assert_eq!(job["state"], "done", "{job}");
        assert_eq!(message_ids(&job["report"]["moved"]), head, "{job}");
        let mut everywhere = drain_ids(&channel, "target").await;
        assert_eq!(everywhere[1..], head);
        everywhere.extend(drain_ids(&channel, "qdlq").await);
        everywhere.sort();
        assert_eq!(everywhere, ["q1", "q2", "q3", "q4", "q5"], "each once, nothing dropped");
        warren.stop().await;
        connection.close(0, "done".into()).await.ok();
        return;
    }
    for _ in 0..3 {
        let (status, body) =
            warren.post_json(&path, json!({"selection": {"positions": [3]}, "target": {"queue": "target"}})).await;
        assert_eq!(status, 422, "refused: reading past q1 and q2 would count toward their limit: {body}");
    }
    assert_eq!(depth(&channel, "qdlq").await, 5, "nothing dropped");
    // Moving the head in order is allowed: every message read is moved.
    let job = warren.run_move(&path, json!({"selection": {"positions": [1, 2]}, "target": {"queue": "target"}})).await;
    assert_eq!(job["state"], "done", "{job}");
    assert_eq!(drain_ids(&channel, "target").await, vec!["q1", "q2"]);
    assert_eq!(drain_ids(&channel, "qdlq").await, vec!["q3", "q4", "q5"]);
    warren.stop().await;
    connection.close(0, "done".into()).await.ok();
}

/// Issue 16 (1): a quorum DLQ with a delivery limit of 2 and no DLX of its own, the queue its
/// messages died in deleted. Three requeues all fail, and every failure handed the messages back:
/// each hand-back counts as a delivery, and the broker dropped all 50. Now a message whose
/// hand-back would be its last delivery goes to the holding queue. From 4.3 on a hand-back is
/// not counted (DOMAIN.md §10): none is at risk, none is held, and the broker keeps all 50.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_requeues_of_a_quorum_dlq_hold_what_the_broker_would_drop() {
    let vhost = TestVhost::create("burn").await;
    let connection = vhost.connect().await;
    let channel = vhost.channel(&connection).await;
    dead_letter(&vhost, &channel, "qdlq", true, numbered(50)).await;
    let policy = reqwest::Client::new()
        .put(format!("{}/api/policies/{}/limit", common::broker().management, encode(&vhost.name)))
        .basic_auth("guest", Some("guest"))
        .json(&json!({"pattern": "^qdlq$", "definition": {"delivery-limit": 2}, "apply-to": "queues"}))
        .send()
        .await
        .unwrap();
    assert!(policy.status().is_success());
    vhost.delete_queue("work").await;
    let warren = Warren::for_vhost(&vhost.name, 1).await;
    listed(&warren, &vhost.name, "qdlq").await;
    let all: Vec<String> = (1..=50).map(|i| format!("m{i}")).collect();

    let path = format!("/api/v1/queues/local/{}/qdlq/requeue", encode(&vhost.name));
    let counted = common::broker().facts().await.hand_backs_count();
    for round in 1..=3 {
        let job = warren.run_move(&path, json!({"selection": "all"})).await;
        assert_eq!(job["state"], "failed", "round {round}: {job}");
        assert!(job["report"]["moved"].as_array().unwrap().is_empty(), "{job}");
        assert_eq!(job["report"]["failed"].as_array().unwrap().len(), 50, "{job}");
        let held = message_ids(&job["report"]["held"]);
        if !counted {
            assert!(held.is_empty(), "round {round}: not at risk, given back: {job}");
        } else if round < 3 {
            assert!(held.is_empty(), "round {round}: read with a count below the limit, given back: {job}");
        } else {
            // Rounds 1 and 2 raised every count to the limit: a third hand-back would drop them.
            assert_eq!(held, all, "every message held once, in order: {job}");
            let reason = job["report"]["failed"][0]["reason"].as_str().unwrap();
            assert!(reason.contains("no queue named \"work\"") && reason.contains("warren.held.qdlq"), "{reason}");
        }
    }
    if !counted {
        assert_eq!(drain_ids(&channel, "qdlq").await, all, "none dropped by the broker, in order");
        warren.stop().await;
        connection.close(0, "done".into()).await.ok();
        return;
    }
    assert!(drain_ids(&channel, "qdlq").await.is_empty());
    assert_eq!(drain_ids(&channel, "warren.held.qdlq").await, all, "none dropped by the broker");
    warren.stop().await;
    connection.close(0, "done".into()).await.ok();
}

/// Issue 16 (5): a selection made in a snapshot while a consumer reads the DLQ. Positions were
/// counted at the time of the move, so messages the user never selected were moved. A selection
/// now names the snapshot's messages: exactly those move, wherever they are by then, and one that
/// is gone is reported as not found.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_selection_moves_the_messages_the_snapshot_showed_and_reports_those_gone() {
    let (vhost, connection, channel, warren) = fifty_dead_letters_watched("identity").await;
    let path = format!("/api/v1/queues/local/{}/work.dlq/requeue", encode(&vhost.name));
    let take = |n: usize| {
        let channel = channel.clone();
        async move {
            for _ in 0..n {
                channel
                    .basic_get("work.dlq".into(), BasicGetOptions { no_ack: true })
                    .await
                    .unwrap()
                    .expect("a message");
            }
        }
    };

    let snapshot = warren.snapshot(&vhost.name, "work.dlq", 10).await;
    assert_eq!(message_ids(&snapshot["messages"])[3..5], ["m4", "m5"]);
    take(3).await; // someone else takes m1, m2 and m3 meanwhile
    let job = warren.run_move(&path, json!({"selection": {"positions": [4, 5]}})).await;
    assert_eq!(job["state"], "done", "{job}");
    assert_eq!(
        job["report"]["moved"],
        json!([{"position": 4, "message_id": "m4", "to_queue": "work"}, {"position": 5, "message_id": "m5", "to_queue": "work"}])
    );
    assert_eq!(drain_ids(&channel, "work").await, ["m4", "m5"], "not m7 and m8, now 4th and 5th");
    // The job counts "moved" against the two selected, not against how far it may read (it
    // said "2 of 10 moved" and stopped its bar at 20 %).
    assert_eq!(job["progress"]["expected"], 2, "{job}");
    assert_eq!(job["progress"]["moved"], 2, "{job}");

    // By fingerprint, as the page's checkboxes send it; the first one is taken before the move.
    let snapshot = warren.snapshot(&vhost.name, "work.dlq", 10).await;
    assert_eq!(message_ids(&snapshot["messages"])[..2], ["m6", "m7"]);
    let fingerprints: Vec<&str> =
        snapshot["messages"].as_array().unwrap()[..2].iter().map(|m| m["fingerprint"].as_str().unwrap()).collect();
    take(1).await;
    let job = warren.run_move(&path, json!({"selection": {"messages": fingerprints}})).await;
    assert_eq!(job["state"], "partial", "{job}");
    assert_eq!(message_ids(&job["report"]["moved"]), ["m7"], "{job}");
    assert_eq!(message_ids(&job["report"]["not_found"]), ["m6"], "{job}");
    let (_, page) = warren.get_text(&format!("/jobs/{}", job["id"])).await;
    assert!(page.contains("Selected, not found") && page.contains("m6"), "the job page says it");
    assert_eq!(drain_ids(&channel, "work").await, ["m7"]);

    // Without a snapshot, positions name nothing: refused, nothing read.
    let (status, body) = warren.post_json(&path, json!({"selection": {"positions": [1]}})).await;
    assert_eq!(status, 409, "{body}");
    assert!(body["error"]["message"].as_str().unwrap().contains("take one"), "{body}");
    // A fingerprint that is not in the snapshot is a snapshot that changed.
    warren.snapshot(&vhost.name, "work.dlq", 10).await;
    let (status, body) = warren.post_json(&path, json!({"selection": {"messages": [fingerprints[0]]}})).await;
    assert_eq!(status, 409, "m6 is no longer in the snapshot: {body}");
    let expected: Vec<String> = (8..=50).map(|i| format!("m{i}")).collect();
    assert_eq!(drain_ids(&channel, "work.dlq").await, expected, "nothing else moved, order kept");
    warren.stop().await;
    connection.close(0, "done".into()).await.ok();
}

/// The browser's form: it asks first, moves only after the confirmation, and reports.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_browser_form_confirms_before_requeueing() {
    let (vhost, connection, channel, warren) = fifty_dead_letters_watched("form").await;
    let base = format!("/dlq/local/{}/work.dlq", encode(&vhost.name));
    // The page's checkboxes name the snapshot's messages by fingerprint.
    let snapshot = warren.snapshot(&vhost.name, "work.dlq", 10).await;
    let fingerprint = |i: usize| snapshot["messages"][i - 1]["fingerprint"].as_str().unwrap().to_string();
    let (_, page) = warren.get_text(&base).await;
    assert!(page.contains(&format!("name=\"message\" value=\"{}\"", fingerprint(3))), "{page}");
    // Issue 34, case 6: a message's page leads to its neighbours and offers its own requeue
    // and delete, through the same confirmation.
    let (_, message) = warren.get_text(&format!("{base}/messages/3")).await;
    for expected in [
        format!("<a href=\"{base}/messages/2\" rel=\"prev\">"),
        format!("<a href=\"{base}/messages/4\" rel=\"next\">"),
        "message 3 of 10 of the snapshot".to_string(),
        format!("action=\"{base}/requeue\" class=\"message-actions\""),
        format!("name=\"message\" value=\"{}\"", fingerprint(3)),
        "name=\"scope\" value=\"selected\">Requeue this message…</button>".to_string(),
    ] {
        assert!(message.contains(&expected), "{expected}: {message}");
    }
    let (_, first) = warren.get_text(&format!("{base}/messages/1")).await;
    assert!(!first.contains("rel=\"prev\"") && first.contains("rel=\"next\""), "{first}");
    let selected = format!("message={}&message={}&scope=selected&target_queue=", fingerprint(3), fingerprint(5));
    let form = |body: String| {
        let request = warren.http.post(warren.url(&format!("{base}/requeue")));
        request.header("content-type", "application/x-www-form-urlencoded").body(body).send()
    };
    let asked = form(selected.clone()).await.unwrap();
    assert_eq!(asked.status().as_u16(), 200);
    let page = asked.text().await.unwrap();
    assert!(
        page.contains("Confirm: requeue") && page.contains("the 2 messages at positions 3 (id m3), 5 (id m5)"),
        "{page}"
    );
    // Issue 34, case 6: it names the queue they go to, not the rule that picks it.
    assert!(page.contains("class=\"target\">queue &#34;work&#34;, where they last died"), "{page}");
    // A position alone is named with its message id too (issue 19, case 14).
    let page = form("position=3&scope=selected&target_queue=".to_string()).await.unwrap().text().await.unwrap();
    assert!(page.contains("the message at position 3 (id m3) of the snapshot"), "{page}");
    assert_eq!(depth(&channel, "work.dlq").await, 50, "asking moves nothing");
    // A poll after the snapshot's reads, which held the messages unacked for a moment.
    wait_for("50 ready at warren's last poll", Duration::from_secs(20), || async {
        let q = warren.queue(&vhost.name, "work.dlq").await.ok_or("not listed")?;
        (q["ready"] == 50).then_some(()).ok_or_else(|| q.to_string())
    })
    .await;
    let page = form("scope=purge&target_queue=".to_string()).await.unwrap().text().await.unwrap();
    assert!(page.contains("Confirm: purge") && page.contains("cannot be undone"), "{page}");
    // Issue 34, case 6: how many it deletes, and a button unlike every other.
    assert!(page.contains("all 50 ready messages (at the last poll)"), "{page}");
    assert!(page.contains("class=\"danger\">Purge: delete for good</button>"), "{page}");
    assert_eq!(depth(&channel, "work.dlq").await, 50, "asking purges nothing");

    // Confirmed: the move starts and the browser is sent to its progress page.
    let done = form(format!("{selected}&confirm=true")).await.unwrap();
    let job_page = done.url().path().to_string();
    assert!(job_page.starts_with("/jobs/"), "redirected to the job page, not {job_page}");
    let id: i64 = job_page.trim_start_matches("/jobs/").parse().unwrap();
    warren.wait_job(id).await;
    let (_, page) = warren.get_text(&job_page).await;
    assert!(page.contains("job-state\">done") && page.contains("m3") && page.contains("m5"), "{page}");
    assert_eq!(drain_ids(&channel, "work").await, vec!["m3", "m5"]);
    assert_eq!(depth(&channel, "work.dlq").await, 48);
    warren.stop().await;
    connection.close(0, "done".into()).await.ok();
}

/// Issue 16, must-have 3: the confirmation says where the messages would go before anything
/// moves. The queue they last died in is a delayed-retry wait queue with no consumer (a copy
/// without its per-message expiration would stay there for ever): the page says so and offers
/// the queue it dead-letters into. A named target that drops its oldest when full needs the
/// risk accepted on the page.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_confirmation_says_what_each_target_would_do_with_the_messages() {
    let vhost = TestVhost::create("confirmtargets").await;
    let connection = vhost.connect().await;
    let channel = vhost.channel(&connection).await;
    declare(&channel, "work", false).await;
    let mut wait_args = FieldTable::default();
    wait_args.insert("x-dead-letter-exchange".into(), AMQPValue::LongString("".into()));
    wait_args.insert("x-dead-letter-routing-key".into(), AMQPValue::LongString("work".into()));
    channel
        .queue_declare("retry.wait".into(), QueueDeclareOptions { durable: true, ..Default::default() }, wait_args)
        .await
        .unwrap();
    let mut capped_args = FieldTable::default();
    capped_args.insert("x-max-length".into(), AMQPValue::LongInt(2));
    channel
        .queue_declare("capped".into(), QueueDeclareOptions { durable: true, ..Default::default() }, capped_args)
        .await
        .unwrap();
    declare(&channel, "final.dlq", false).await;
    for i in 1..=3 {
        // As the broker writes it when a message expires in the wait queue.
        let mut death = FieldTable::default();
        death.insert("queue".into(), AMQPValue::LongString("retry.wait".into()));
        death.insert("reason".into(), AMQPValue::LongString("expired".into()));
        death.insert("count".into(), AMQPValue::LongLongInt(1));
        death.insert("exchange".into(), AMQPValue::LongString("".into()));
        let mut headers = FieldTable::default();
        headers.insert("x-death".into(), AMQPValue::FieldArray(vec![AMQPValue::FieldTable(death)].into()));
        headers.insert("x-first-death-queue".into(), AMQPValue::LongString("retry.wait".into()));
        let properties = BasicProperties::default().with_message_id(format!("w{i}").into()).with_headers(headers);
        channel
            .basic_publish("".into(), "final.dlq".into(), BasicPublishOptions::default(), b"{}", properties)
            .await
            .unwrap();
    }
    channel.wait_for_confirms().await.unwrap();
    let warren = Warren::for_vhost(&vhost.name, 1).await;
    listed(&warren, &vhost.name, "final.dlq").await;
    listed(&warren, &vhost.name, "capped").await;
    let snapshot = warren.snapshot(&vhost.name, "final.dlq", 10).await;
    let fingerprint = |i: usize| snapshot["messages"][i]["fingerprint"].as_str().unwrap().to_string();
    let base = format!("/dlq/local/{}/final.dlq", encode(&vhost.name));
    let form = |body: String| {
        let request = warren.http.post(warren.url(&format!("{base}/requeue")));
        request.header("content-type", "application/x-www-form-urlencoded").body(body).send()
    };

    let page = form(format!("message={}&scope=selected&target=original-queue&target_queue=", fingerprint(0)))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(page.contains("<code>retry.wait</code> has no consumer and dead-letters into work"), "{page}");
    assert!(page.contains("Send them to work instead"), "{page}");
    // The offered form, confirmed: the message goes to the work queue, not the wait queue.
    let done = form(format!("message={}&scope=selected&target=queue&target_queue=work&confirm=true", fingerprint(0)))
        .await
        .unwrap();
    let id: i64 = done.url().path().trim_start_matches("/jobs/").parse().expect("the job page");
    assert_eq!(warren.wait_job(id).await["state"], "done");
    assert_eq!(drain_ids(&channel, "work").await, ["w1"]);
    assert_eq!(depth(&channel, "retry.wait").await, 0);

    // A target that drops its head: the page asks to accept the risk; without it, refused.
    let snapshot = warren.snapshot(&vhost.name, "final.dlq", 10).await;
    let both = format!(
        "message={}&message={}&scope=selected&target=queue&target_queue=capped",
        snapshot["messages"][0]["fingerprint"].as_str().unwrap(),
        snapshot["messages"][1]["fingerprint"].as_str().unwrap()
    );
    let page = form(both.clone()).await.unwrap().text().await.unwrap();
    assert!(
        page.contains("drops its oldest messages when full") && page.contains("name=\"accept_drop_head\""),
        "{page}"
    );
    let refused = form(format!("{both}&confirm=true")).await.unwrap();
    let id: i64 = refused.url().path().trim_start_matches("/jobs/").parse().expect("the job page");
    let job = warren.wait_job(id).await;
    assert_eq!(job["state"], "failed", "{job}");
    assert!(job["error"].as_str().unwrap_or_default().contains("accept_drop_head"), "the refusal says why: {job}");
    assert_eq!(depth(&channel, "capped").await, 0, "nothing moved unasked");
    let done = form(format!("{both}&accept_drop_head=true&confirm=true")).await.unwrap();
    let id: i64 = done.url().path().trim_start_matches("/jobs/").parse().expect("the job page");
    assert_eq!(warren.wait_job(id).await["state"], "done");
    assert_eq!(drain_ids(&channel, "capped").await, ["w2", "w3"]);
    warren.stop().await;
    connection.close(0, "done".into()).await.ok();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_selected_and_purge_are_recorded() {
    let (vhost, connection, channel, warren) = fifty_dead_letters_watched("delete").await;
    let base = format!("/api/v1/queues/local/{}/work.dlq", encode(&vhost.name));
    warren.snapshot(&vhost.name, "work.dlq", 5).await;
    let job = warren.run_move(&format!("{base}/delete"), json!({"selection": {"positions": [2]}})).await;
    assert_eq!(job["state"], "done", "{job}");
    assert_eq!(job["report"]["moved"][0]["message_id"], "m2");
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
    connection.close(0, "done".into()).await.ok();
}

/// A quorum DLQ counts every read in `x-delivery-count`; the copies warren publishes once carried
/// it, so a consumer that reads it for its own retry decisions saw deliveries the copy never had.
/// The copy keeps every header the application set, and warren's replay counter.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replayed_copies_leave_the_brokers_delivery_count_behind() {
    let vhost = TestVhost::create("deliverycount").await;
    let connection = vhost.connect().await;
    let channel = vhost.channel(&connection).await;
    declare(&channel, "qdlq", true).await;
    for i in 1..=3 {
        let mut headers = FieldTable::default();
        headers.insert("x-app-attempt".into(), AMQPValue::LongInt(7));
        let properties = BasicProperties::default().with_message_id(format!("c{i}").into()).with_headers(headers);
        let confirm = channel
            .basic_publish("".into(), "qdlq".into(), BasicPublishOptions::default(), b"x", properties)
            .await
            .unwrap();
        assert!(confirm.await.unwrap().is_ack());
    }
    declare(&channel, "target", false).await;
    let warren = Warren::for_vhost(&vhost.name, 1).await;
    listed(&warren, &vhost.name, "qdlq").await;
    // A snapshot reads and hands back each message once: the broker's count is now 1.
    let base = format!("/api/v1/queues/local/{}/qdlq", encode(&vhost.name));
    let (status, snapshot) = warren.post_json(&format!("{base}/snapshot"), json!({"confirm": "true"})).await;
    assert_eq!(status, 200, "{snapshot}");
    let job = warren
        .run_move(
            &format!("{base}/requeue"),
            json!({"selection": {"positions": [1, 2, 3]}, "target": {"queue": "target"}}),
        )
        .await;
    assert_eq!(job["state"], "done", "{job}");
    for i in 1..=3 {
        let message =
            channel.basic_get("target".into(), BasicGetOptions { no_ack: true }).await.unwrap().expect("a copy");
        let properties = &message.delivery.properties;
        assert_eq!(properties.message_id().as_ref().map(|s| s.as_str()), Some(format!("c{i}").as_str()));
        let headers = properties.headers().as_ref().expect("headers").inner();
        assert_eq!(headers.get("x-delivery-count"), None, "c{i}: {headers:?}");
        assert_eq!(headers.get("x-app-attempt"), Some(&AMQPValue::LongInt(7)), "c{i}");
        assert_eq!(headers.get("x-warren-replay-count"), Some(&AMQPValue::LongLongInt(1)), "c{i}");
    }
    warren.stop().await;
    connection.close(0, "done".into()).await.ok();
}

/// Issue 19, item 10: "Requeue all" needs no snapshot. The page offers it (and the purge) with
/// none taken, through the same confirmation and job as after a snapshot, and every message
/// arrives in the queue it died in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requeue_all_from_the_page_without_a_snapshot() {
    let (vhost, connection, channel, warren) = fifty_dead_letters_watched("allnosnap").await;
    let base = format!("/dlq/local/{}/work.dlq", encode(&vhost.name));
    let (_, page) = warren.get_text(&base).await;
    assert!(page.contains("No snapshot yet"), "{page}");
    assert!(
        page.contains(&format!("action=\"{base}/requeue\""))
            && page.contains("name=\"scope\" value=\"all\">Requeue all…")
            && page.contains("name=\"scope\" value=\"purge\">Purge the queue…"),
        "offered without a snapshot: {page}"
    );
    let form = |body: &'static str| {
        let request = warren.http.post(warren.url(&format!("{base}/requeue")));
        request.header("content-type", "application/x-www-form-urlencoded").body(body).send()
    };
    let asked = form("scope=all&target=original-queue&target_queue=").await.unwrap();
    assert_eq!(asked.status().as_u16(), 200);
    let confirm = asked.text().await.unwrap();
    assert!(confirm.contains("Confirm: requeue") && confirm.contains("every message"), "{confirm}");
    assert_eq!(depth(&channel, "work.dlq").await, 50, "asking moves nothing");

    let done = form("scope=all&target=original-queue&target_queue=&confirm=true").await.unwrap();
    let job_page = done.url().path().to_string();
    let id: i64 = job_page.trim_start_matches("/jobs/").parse().expect("redirected to the job page");
    let job = warren.wait_job(id).await;
    assert_eq!(job["state"], "done", "{job}");
    let arrived: std::collections::BTreeSet<String> = drain_ids(&channel, "work").await.into_iter().collect();
    let all_fifty: std::collections::BTreeSet<String> = (1..=50).map(|i| format!("m{i}")).collect();
    assert_eq!(arrived, all_fifty, "every message, each once");
    assert!(drain_ids(&channel, "work.dlq").await.is_empty(), "none left in the DLQ");
    warren.stop().await;
    connection.close(0, "done".into()).await.ok();
}

/// Issue 19, item 10: a move does not discard the snapshot, nor does a restart. It stays shown,
/// marked outdated (positions and contents may have changed); single messages are no longer
/// selected from it, "all" still works.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_survives_a_move_and_a_restart_marked_outdated() {
    let (vhost, connection, channel, warren) = fifty_dead_letters_watched("keptsnap").await;
    let base = format!("/dlq/local/{}/work.dlq", encode(&vhost.name));
    let api = format!("/api/v1/queues/local/{}/work.dlq", encode(&vhost.name));
    let snapshot = warren.snapshot(&vhost.name, "work.dlq", 10).await;
    let first_ten: Vec<String> = (1..=10).map(|i| format!("m{i}")).collect();
    assert_eq!(message_ids(&snapshot["messages"]), first_ten);
    let fingerprint = |i: usize| snapshot["messages"][i - 1]["fingerprint"].as_str().unwrap().to_string();

    // A fresh snapshot survives a restart, selectable as before.
    let warren = warren.restart().await;
    listed(&warren, &vhost.name, "work.dlq").await;
    let (status, kept) = warren.get_json(&format!("{api}/snapshot")).await;
    assert_eq!(status, 200, "{kept}");
    assert_eq!(message_ids(&kept["messages"]), first_ten);
    assert_eq!(kept["messages"][2]["fingerprint"].as_str().unwrap(), fingerprint(3));
    let (_, page) = warren.get_text(&base).await;
    assert!(page.contains(&format!("name=\"message\" value=\"{}\" aria-label", fingerprint(4))), "{page}");
    assert!(!page.contains("snapshot-outdated"), "{page}");

    let job = warren.run_move(&format!("{api}/requeue"), json!({"selection": {"messages": [fingerprint(3)]}})).await;
    assert_eq!(job["state"], "done", "{job}");
    assert_eq!(drain_ids(&channel, "work").await, ["m3"]);

    // Still shown after the move, marked outdated, its single-message actions off.
    let outdated = |page: &str| {
        let m4 = format!("<td class=\"name\" title=\"from the message_id property\">{}</td>", common::ident("m4"));
        assert!(page.contains(&m4), "shown: {page}");
        assert!(page.contains("Outdated: taken before the requeue of 1 messages at "), "{page}");
        assert!(page.contains("positions and contents may have changed; refresh to see the queue now"), "{page}");
        assert!(!page.contains("class=\"select-all\""), "{page}");
        assert!(page.contains(&format!("value=\"{}\" aria-label=\"select message 4\" disabled", fingerprint(4))));
        assert!(page.contains("value=\"selected\" disabled"), "{page}");
        assert!(page.contains("name=\"scope\" value=\"all\">Requeue all…"), "{page}");
    };
    let (_, page) = warren.get_text(&base).await;
    outdated(&page);
    // The server refuses them too: a fingerprint of the old snapshot must never pick a message.
    let (status, body) =
        warren.post_json(&format!("{api}/requeue"), json!({"selection": {"messages": [fingerprint(4)]}})).await;
    assert_eq!(status, 409, "{body}");
    assert!(body["error"]["message"].as_str().unwrap().contains("is outdated"), "{body}");

    // And after a restart, still outdated.
    let warren = warren.restart().await;
    listed(&warren, &vhost.name, "work.dlq").await;
    let (_, page) = warren.get_text(&base).await;
    outdated(&page);
    let (status, _) = warren.post_json(&format!("{api}/requeue"), json!({"selection": {"positions": [4]}})).await;
    assert_eq!(status, 409);
    // "All" is not tied to the snapshot.
    let job = warren.run_move(&format!("{api}/requeue"), json!({"selection": "all"})).await;
    assert_eq!(job["state"], "done", "{job}");
    let arrived: std::collections::BTreeSet<String> = drain_ids(&channel, "work").await.into_iter().collect();
    let others: std::collections::BTreeSet<String> = (1..=50).filter(|i| *i != 3).map(|i| format!("m{i}")).collect();
    assert_eq!(arrived, others);
    // Issue 31, case 6: the mark names every move since, not only the first; the oldest dead
    // letter read in the snapshot is not shown as the queue's once the queue is empty; and a
    // message page of the outdated snapshot says so.
    let page = wait_for("the emptied queue's page", Duration::from_secs(30), || async {
        let (_, page) = warren.get_text(&base).await;
        if page.contains("the queue is empty") {
            Ok(page)
        } else {
            Err("the oldest dead letter still shown".to_string())
        }
    })
    .await;
    assert!(page.contains("the requeue of 1 messages at "), "{page}");
    assert!(page.contains("; then the requeue of 49 messages at "), "{page}");
    assert!(!page.contains("as read in the snapshot)"), "{page}");
    let (_, message) = warren.get_text(&format!("{base}/messages/4")).await;
    assert!(message.contains("From an outdated snapshot, taken before the requeue of 1 messages"), "{message}");
    warren.stop().await;
    connection.close(0, "done".into()).await.ok();
}

/// Issue 29: the `fingerprint` a snapshot shows is a token keyed with a secret of the
/// installation, not a digest of the content. It was that digest (of the payload and the
/// properties as the snapshot shows them), so a reader below the payload role, who sees the
/// fingerprints but not the payloads, could confirm a guessed payload offline. The token
/// survives a restart (the key is kept in the database), so a page opened before it still
/// selects the same message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshots_fingerprints_are_keyed_tokens_that_survive_a_restart() {
    let (vhost, connection, channel, warren) = fifty_dead_letters_watched("tokens").await;
    let snapshot = warren.snapshot(&vhost.name, "work.dlq", 5).await;
    let shown: Vec<String> = snapshot["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["fingerprint"].as_str().unwrap().to_string())
        .collect();
    for (m, token) in snapshot["messages"].as_array().unwrap().iter().zip(&shown) {
        // What anyone who guessed the payload computes, from the properties the snapshot shows.
        assert_eq!(m["message"]["payload_encoding"], "string", "{m}");
        let payload = m["message"]["payload"].as_str().unwrap().as_bytes();
        let digest = warren::dlq::message::identity(payload, m["message"]["properties"].as_object().unwrap());
        assert_ne!(token, &digest, "the content's digest is shown: {m}");
        assert_eq!(token.len(), 32, "{token}");
    }
    assert_eq!(shown.iter().collect::<std::collections::HashSet<_>>().len(), 5, "one token per message: {shown:?}");

    let warren = warren.restart().await;
    listed(&warren, &vhost.name, "work.dlq").await;
    let (status, kept) =
        warren.get_json(&format!("/api/v1/queues/local/{}/work.dlq/snapshot", encode(&vhost.name))).await;
    assert_eq!(status, 200, "{kept}");
    let after: Vec<&str> =
        kept["messages"].as_array().unwrap().iter().map(|m| m["fingerprint"].as_str().unwrap()).collect();
    assert_eq!(after, shown, "the same tokens after a restart");
    let path = format!("/api/v1/queues/local/{}/work.dlq/requeue", encode(&vhost.name));
    let job = warren.run_move(&path, json!({"selection": {"messages": [&shown[2]]}})).await;
    assert_eq!(job["state"], "done", "{job}");
    assert_eq!(drain_ids(&channel, "work").await, ["m3"], "the token from before the restart names m3");
    let expected: Vec<String> = (1..=50).filter(|&i| i != 3).map(|i| format!("m{i}")).collect();
    assert_eq!(drain_ids(&channel, "work.dlq").await, expected, "nothing else moved");
    warren.stop().await;
    connection.close(0, "done".into()).await.ok();
}

/// Issue 29, must-have 1: a target warren's user may not write to. When the broker lets warren
/// read permissions (an administrator), the move is refused before a message is read, with why;
/// for a user that may not read them (a `monitoring` user: 401), the broker's refusal at the
/// first publish stops the move with the broker's words. Either way nothing is acked: every id
/// stays, in order. (The mover and custody's replay, edit and release share these checks,
/// `dlq::target`.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_target_warrens_user_may_not_write_to_moves_nothing() {
    let vhost = TestVhost::create("nowrite").await;
    let connection = vhost.connect().await;
    let channel = vhost.channel(&connection).await;
    dead_letter(&vhost, &channel, "work.dlq", false, numbered(20)).await;
    declare(&channel, "parking", false).await;
    let broker = common::broker();
    let http = reqwest::Client::new();
    let put = |path: String, body: Value| {
        http.put(format!("{}{path}", broker.management)).basic_auth("guest", Some("guest")).json(&body).send()
    };
    let path = format!("/api/v1/queues/local/{}/work.dlq/requeue", encode(&vhost.name));
    for tags in ["administrator", "monitoring"] {
        let user = format!("warren-test-nowrite-{tags}-{}", rand::random::<u32>());
        let made = put(format!("/api/users/{user}"), json!({"password": "pw", "tags": tags})).await.unwrap();
        assert!(made.status().is_success(), "{}", made.status());
        let allowed = json!({"configure": ".*", "write": "^$", "read": ".*"});
        let set = put(format!("/api/permissions/{}/{user}", encode(&vhost.name)), allowed).await.unwrap();
        assert!(set.status().is_success(), "{}", set.status());
        let warren = Warren::start(&format!(
            "[[brokers]]\nname = \"local\"\n{}user = {user:?}\npassword = \"pw\"\nvhosts_include = [{:?}]\n\
             poll_interval_secs = 1\n",
            broker.toml(),
            vhost.name
        ))
        .await;
        listed(&warren, &vhost.name, "work.dlq").await;
        for target in [json!({"queue": "parking"}), json!("original_queue")] {
            let job = warren.run_move(&path, json!({"selection": "all", "target": target})).await;
            assert_eq!(job["state"], "failed", "{tags}, {target}: {job}");
            let error = job["error"].as_str().unwrap_or_default();
            if tags == "administrator" {
                assert!(error.contains("does not let warren's user") && error.contains("amq.default"), "{job}");
            } else {
                // The broker's words, or, when its refusal reached another call first, the closed
                // channel with what that most often means.
                assert!(error.contains("amq.default") && error.contains("refuse"), "{job}");
            }
            assert_eq!(depth(&channel, "work.dlq").await, 20, "{tags}, {target}");
        }
        warren.stop().await;
        http.delete(format!("{}/api/users/{user}", broker.management))
            .basic_auth("guest", Some("guest"))
            .send()
            .await
            .ok();
    }
    let all: Vec<String> = (1..=20).map(|i| format!("m{i}")).collect();
    assert_eq!(drain_ids(&channel, "work.dlq").await, all, "all 20 remain, in order");
    assert_eq!(depth(&channel, "parking").await, 0);
    assert_eq!(depth(&channel, "work").await, 0);
    connection.close(0, "done".into()).await.ok();
}
