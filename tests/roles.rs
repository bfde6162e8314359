//! Queue roles on the real broker (issue 17): the delayed-retry topology that frameworks declare
//! must read as a work queue, a wait queue and a terminal DLQ, not as three dead-letter queues.

mod common;

use std::time::Duration;

use common::dead_letters::{depth, drain_ids};
use common::{wait_for, TestVhost, Warren};
use futures_util::StreamExt;
use lapin::options::{
    BasicAckOptions, BasicConsumeOptions, BasicGetOptions, BasicPublishOptions, BasicRejectOptions,
    ExchangeDeclareOptions, QueueBindOptions, QueueDeclareOptions,
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
        .queue_declare(queue.into(), QueueDeclareOptions { durable: true, ..Default::default() }, table)
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
        .basic_consume("work".into(), "failing-worker".into(), BasicConsumeOptions::default(), FieldTable::default())
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
                "".into(),
                "work.wait".into(),
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
    channel.exchange_declare("jobs".into(), ExchangeKind::Direct, durable, FieldTable::default()).await.unwrap();
    channel.exchange_declare("work.dlx".into(), ExchangeKind::Fanout, durable, FieldTable::default()).await.unwrap();
    declare_with(&channel, "work", &[("x-dead-letter-exchange", text("work.dlx"))]).await;
    declare_with(
        &channel,
        "work.wait",
        &[("x-dead-letter-exchange", text("")), ("x-dead-letter-routing-key", text("work"))],
    )
    .await;
    declare_with(&channel, "work.dlq", &[]).await;
    channel
        .queue_bind("work".into(), "jobs".into(), "job".into(), QueueBindOptions::default(), FieldTable::default())
        .await
        .unwrap();
    channel
        .queue_bind("work.dlq".into(), "work.dlx".into(), "".into(), QueueBindOptions::default(), FieldTable::default())
        .await
        .unwrap();

    let worker =
        tokio::spawn(failing_consumer(connection.create_channel().await.unwrap(), vhost.channel(&connection).await));
    for i in 0..3 {
        let confirm = channel
            .basic_publish(
                "jobs".into(),
                "job".into(),
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
    let link = |name: &str| format!(">{}</a>", common::ident(name));
    assert!(rows.contains(&link("work.dlq")) && rows.contains("<td>work</td>"), "the DLQ, fed by work: {rows}");
    assert!(
        !rows.contains(&link("work")) && !rows.contains(&link("work.wait")),
        "work and work.wait are not DLQs: {rows}"
    );
    let (_, html) = warren.get_text(&format!("/queues?vhost={}", encode(&vhost.name))).await;
    assert_eq!(html.matches(">DLQ<").count(), 1, "one DLQ badge in the list");
    assert!(!html.contains(">no consumers<"), "no 'no consumers' badge on the DLQ or the wait queue");

    // The queue pages say the role and why.
    let (_, page) = warren.get_text(&format!("/queues/local/{}/work.wait", encode(&vhost.name))).await;
    assert!(page.contains("<strong>wait (retry) queue</strong>") && page.contains("per-message TTLs"), "wait page");
    assert!(!page.contains("class=\"fed-by\""), "the wait queue is not called a DLQ fed by anything");
    let (_, page) = warren.get_text(&format!("/queues/local/{}/work", encode(&vhost.name))).await;
    assert!(page.contains("<strong>work queue</strong>"), "work page");
    assert!(!page.contains("class=\"fed-by\""), "the work queue is not called a DLQ fed by anything");
    let (_, page) = warren.get_text(&format!("/queues/local/{}/work.dlq", encode(&vhost.name))).await;
    assert!(page.contains("<strong>dead-letter queue</strong>") && page.contains("dead letters of work end here"));
    assert!(page.contains("class=\"fed-by\""), "fed by work, configured: {page}");

    // Must-have 2: the death that put each message here is the work queue's reject, and the
    // message page shows the whole path; must-have 1: the origins observed beside the feeders.
    let snapshot = warren.snapshot(&vhost.name, "work.dlq", 10).await;
    // 3.x counts the wait queue's expiries in the x-death the worker republished; 4.x no
    // longer reads a client's x-death (DOMAIN.md §4), so each copy's history starts again.
    let expiries = if common::broker().facts().await.major >= 4 { 1 } else { MAX_RETRIES };
    for m in snapshot["messages"].as_array().unwrap() {
        assert_eq!((&m["original_queue"], &m["reason"]), (&json!("work"), &json!("rejected")), "{m}");
        assert_eq!((&m["first_death_queue"], &m["first_death_reason"]), (&json!("work.wait"), &json!("expired")));
        let path: Vec<(&str, &str, i64)> = m["deaths"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| (d["queue"].as_str().unwrap(), d["reason"].as_str().unwrap(), d["count"].as_i64().unwrap()))
            .collect();
        assert_eq!(path, [("work.wait", "expired", expiries), ("work", "rejected", 1)], "oldest first: {m}");
    }
    let (_, page) = warren.get_text(&format!("/dlq/local/{}/work.dlq/messages/1", encode(&vhost.name))).await;
    let path = format!("work.wait (expired ×{expiries}) → work (rejected ×1) → here");
    assert!(page.contains(&path), "the path in full: {page}");
    // x-death's `time` as a time like every other on the page, not raw unix seconds (issue 19,
    // case 11).
    let death = page.split("<table class=\"grid kv death\">").nth(1).expect("an x-death table");
    let time = death.split("<th>time</th><td><code>").nth(1).expect("a time row");
    assert!(time.starts_with("20") && time.contains(" UTC ("), "{time}");
    let (_, page) = warren.get_text(&format!("/dlq/local/{}/work.dlq", encode(&vhost.name))).await;
    let observed = page.split("class=\"observed-sources\">").nth(1).expect("observed sources shown");
    assert!(observed.starts_with("<a href=") && observed.contains(">work</a> (3)"), "{observed}");
    assert!(page.contains("class=\"oldest-death\"") && page.contains("died "), "the oldest dead letter's death");
    let dlq = wait_for("the observed origins in the API", Duration::from_secs(20), || async {
        let dlq = warren.queue(&vhost.name, "work.dlq").await.ok_or("not listed")?;
        if dlq["observed_sources"] == json!([["work", 3]]) {
            Ok(dlq)
        } else {
            Err(dlq.to_string())
        }
    })
    .await;
    assert!(dlq["observed_head_died_at"].as_i64().is_some(), "{dlq}");

    // Case 1: a message waiting out a retry carries the timestamp of its first publish, an
    // hour ago; the wait queue's age says that is what it measures.
    let an_hour_ago = (std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs()) - 3600;
    let waiting = BasicProperties::default().with_timestamp(an_hour_ago).with_expiration("600000".into());
    let confirm = channel
        .basic_publish("".into(), "work.wait".into(), BasicPublishOptions::default(), b"job", waiting)
        .await
        .unwrap();
    assert!(confirm.await.unwrap().is_ack());
    let wait = wait_for("work.wait holding the retry", Duration::from_secs(60), || async {
        let q = warren.queue(&vhost.name, "work.wait").await.ok_or("not listed")?;
        let exact_expected = common::broker().facts().await.major < 4;
        let settled = q["oldest_age_source"] == "exact" || (!exact_expected && q["total"] == 1);
        if q["total"] == 1 && settled {
            Ok(q)
        } else {
            Err(q.to_string())
        }
    })
    .await;
    if wait["oldest_age_source"] == "exact" {
        assert!(wait["oldest_age_secs"].as_f64().unwrap() >= 3600.0, "{wait}");
        assert_eq!(wait["age_since_first_publish"], true, "{wait}");
        let (_, html) = warren.get_text(&format!("/queues?vhost={}", encode(&vhost.name))).await;
        assert!(html.contains(" since first published"), "the list says what the age measures");
    }

    worker.abort();
    warren.stop().await;
    connection.close(0, "done".into()).await.ok();
}

fn spring_failure(id: &str, error: &str) -> BasicProperties {
    let mut headers = FieldTable::default();
    headers.insert("x-exception-message".into(), text(error));
    headers.insert(
        "x-exception-stacktrace".into(),
        text(&format!("com.shop.SkuUnknownException: {error}\n\tat com.shop.Catalogue.find(Catalogue.java:42)")),
    );
    headers.insert("x-original-exchange".into(), text("shop"));
    headers.insert("x-original-routingKey".into(), text("order.created"));
    BasicProperties::default().with_message_id(id.into()).with_headers(headers)
}

/// Issue 17, case 2 / must-have 3: an error queue the application fills (Spring's republishing
/// recoverer; NServiceBus's failed-message headers) is known from the messages it holds, offered
/// for browsing before that, and replayed to where its headers say the messages came from.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_application_error_queue_is_known_by_its_messages_and_replayed_to_their_origin() {
    let vhost = TestVhost::create("errorq").await;
    let connection = vhost.connect().await;
    let channel = vhost.channel(&connection).await;
    let durable = ExchangeDeclareOptions { durable: true, ..Default::default() };
    channel.exchange_declare("shop".into(), ExchangeKind::Topic, durable, FieldTable::default()).await.unwrap();
    for queue in ["orders", "orders.failures", "sales", "sales-parked", "billing_error"] {
        declare_with(&channel, queue, &[]).await;
    }
    channel
        .queue_bind(
            "orders".into(),
            "shop".into(),
            "order.*".into(),
            QueueBindOptions::default(),
            FieldTable::default(),
        )
        .await
        .unwrap();
    // What Spring's recoverer republishes: no x-death, the error and the origin in headers.
    let ids: Vec<String> = (1..=4).map(|i| format!("spring-{i}")).collect();
    for id in &ids {
        let error = if id.ends_with('4') { "card declined" } else { "sku GIFT-CARD-LEGACY is not in the catalogue" };
        let confirm = channel
            .basic_publish(
                "".into(),
                "orders.failures".into(),
                BasicPublishOptions::default(),
                b"{}",
                spring_failure(id, error),
            )
            .await
            .unwrap();
        assert!(confirm.await.unwrap().is_ack());
    }
    // NServiceBus's: the failed queue by name.
    for i in 1..=3 {
        let mut headers = FieldTable::default();
        headers.insert("NServiceBus.FailedQ".into(), text("sales@host-1"));
        headers.insert("NServiceBus.ExceptionInfo.Message".into(), text("timeout"));
        headers.insert("NServiceBus.MessageId".into(), text(&format!("nsb-{i}")));
        let properties = BasicProperties::default().with_headers(headers);
        let confirm = channel
            .basic_publish("".into(), "sales-parked".into(), BasicPublishOptions::default(), b"{}", properties)
            .await
            .unwrap();
        assert!(confirm.await.unwrap().is_ack());
    }

    let warren = Warren::for_vhost(&vhost.name, 1).await;
    let failures = wait_for("orders.failures listed", Duration::from_secs(30), || async {
        let q = warren.queue(&vhost.name, "orders.failures").await.ok_or("not listed")?;
        if q["total"] == 4 {
            Ok(q)
        } else {
            Err(q.to_string())
        }
    })
    .await;
    // Before any read, nothing but the messages could say what it is: unknown, and browsable.
    assert_eq!((&failures["role"], &failures["is_dlq"]), (&json!("unknown"), &json!(false)), "{failures}");
    let (_, page) = warren.get_text(&format!("/queues/local/{}/orders.failures", encode(&vhost.name))).await;
    assert!(page.contains("class=\"browse\""), "a queue of unknown role can be browsed: {page}");
    // A name is a hint, never a classification.
    let billing = warren.queue(&vhost.name, "billing_error").await.expect("listed");
    assert_eq!(billing["role"], "unknown");
    let reason = billing["role_reason"].as_str().unwrap();
    assert!(reason.contains("named like an error or parking queue") && reason.contains("hint only"), "{reason}");

    let snapshot = warren.snapshot(&vhost.name, "orders.failures", 10).await;
    for m in snapshot["messages"].as_array().unwrap() {
        assert_eq!(m["reason"], "republished by the application", "{m}");
        assert_eq!(m["original_queue"], Value::Null, "a topic key names no queue: {m}");
        assert_eq!(m["app_origin"]["route"], json!(["shop", "order.created"]), "{m}");
    }
    let (_, page) = warren.get_text(&format!("/dlq/local/{}/orders.failures", encode(&vhost.name))).await;
    assert!(page.contains("republished by the application"), "by reason: {page}");
    assert!(page.contains("com.shop.SkuUnknownException: sku GIFT-CARD-LEGACY is not in the catalogue"), "by error");
    let (_, page) = warren.get_text(&format!("/dlq/local/{}/orders.failures/messages/1", encode(&vhost.name))).await;
    assert!(page.contains("class=\"app-origin\"") && page.contains("routing key &#34;order.created&#34;"), "{page}");

    let failures = wait_for("orders.failures known as an error queue", Duration::from_secs(20), || async {
        let q = warren.queue(&vhost.name, "orders.failures").await.ok_or("not listed")?;
        if q["role"] == "error" {
            Ok(q)
        } else {
            Err(q.to_string())
        }
    })
    .await;
    assert_eq!((&failures["is_dlq"], &failures["no_consumers"]), (&json!(true), &json!(false)), "{failures}");
    let reason = failures["role_reason"].as_str().unwrap();
    assert!(reason.contains("4 of 4") && reason.contains("Spring AMQP"), "{reason}");
    let (_, list) = warren.get_json(&format!("/api/v1/queues?vhost={}&dlq=true", encode(&vhost.name))).await;
    let names: Vec<&Value> = list["items"].as_array().unwrap().iter().map(|q| &q["name"]).collect();
    assert_eq!(names, [&json!("orders.failures")], "{list}");
    let (_, html) = warren.get_text(&format!("/queues?vhost={}", encode(&vhost.name))).await;
    assert_eq!(html.matches(">error queue<").count(), 1, "the error queue's badge: {html}");

    // Must-have 4: triage by cause. The groups link to their filter (by error group, issue 31,
    // must-have 6), and a filter by the error moves exactly its messages, over the whole queue.
    let (_, page) = warren.get_text(&format!("/dlq/local/{}/orders.failures", encode(&vhost.name))).await;
    assert!(
        page.contains("?error_group=com%2Eshop%2ESkuUnknownException%3A%20card%20declined"),
        "the error group links to its filter: {page}"
    );
    let (_, page) =
        warren.get_text(&format!("/dlq/local/{}/orders.failures?error=DECLINED", encode(&vhost.name))).await;
    assert!(page.contains("1 of 4 messages match"), "{page}");
    declare_with(&channel, "declined", &[]).await;
    let path = format!("/api/v1/queues/local/{}/orders.failures/requeue", encode(&vhost.name));
    let job = warren
        .run_move(
            &path,
            json!({"selection": {"matching": {"error": "card declined"}}, "target": {"queue": "declined"}}),
        )
        .await;
    assert_eq!(job["state"], "done", "{job}");
    assert_eq!(drain_ids(&channel, "declined").await, ["spring-4"]);
    let ids = &ids[..3];

    // Replayed to the exchange and routing key its headers name: every id arrives once.
    let job = warren.run_move(&path, json!({"selection": "all", "target": "original_exchange"})).await;
    assert_eq!(job["state"], "done", "{job}");
    assert_eq!(job["report"]["moved"][0]["to_queue"], "exchange \"shop\", routing key \"order.created\"");
    let mut arrived = drain_ids(&channel, "orders").await;
    arrived.sort();
    assert_eq!(arrived, ids, "each replayed message arrived once in orders");
    assert_eq!(depth(&channel, "orders.failures").await, 0);

    // "Requeue to the original queue" takes NServiceBus's failed queue.
    warren.snapshot(&vhost.name, "sales-parked", 10).await;
    let path = format!("/api/v1/queues/local/{}/sales-parked/requeue", encode(&vhost.name));
    let job = warren.run_move(&path, json!({"selection": "all"})).await;
    assert_eq!(job["state"], "done", "{job}");
    let mut moved: Vec<&str> =
        job["report"]["moved"].as_array().unwrap().iter().map(|m| m["message_id"].as_str().unwrap()).collect();
    moved.sort();
    assert_eq!(moved, ["nsb-1", "nsb-2", "nsb-3"], "the framework's ids are recorded: {job}");
    assert_eq!(depth(&channel, "sales").await, 3);
    assert_eq!(depth(&channel, "sales-parked").await, 0);
    // Emptied by the replay, still an error queue: the snapshot is gone, what it showed is not.
    let parked = wait_for("sales-parked known as an error queue", Duration::from_secs(20), || async {
        let q = warren.queue(&vhost.name, "sales-parked").await.ok_or("not listed")?;
        if q["role"] == "error" && q["total"] == 0 {
            Ok(q)
        } else {
            Err(q.to_string())
        }
    })
    .await;
    assert_eq!(parked["observed_sources"], json!([["sales", 3]]), "{parked}");

    warren.stop().await;
    connection.close(0, "done".into()).await.ok();
}

/// The delayed-retry topology of DOMAIN.md §8: `jobs` routes to `work`, whose dead letters go
/// through the fanout `work.dlx` to the final `work.dlq`; `work.wait` (per-message TTLs, no
/// `x-message-ttl`) dead-letters back into `work`.
async fn declare_retry_topology(channel: &Channel) {
    let durable = ExchangeDeclareOptions { durable: true, ..Default::default() };
    channel.exchange_declare("jobs".into(), ExchangeKind::Direct, durable, FieldTable::default()).await.unwrap();
    channel.exchange_declare("work.dlx".into(), ExchangeKind::Fanout, durable, FieldTable::default()).await.unwrap();
    declare_with(channel, "work", &[("x-dead-letter-exchange", text("work.dlx"))]).await;
    declare_with(
        channel,
        "work.wait",
        &[("x-dead-letter-exchange", text("")), ("x-dead-letter-routing-key", text("work"))],
    )
    .await;
    declare_with(channel, "work.dlq", &[]).await;
    channel
        .queue_bind("work".into(), "jobs".into(), "job".into(), QueueBindOptions::default(), FieldTable::default())
        .await
        .unwrap();
    channel
        .queue_bind("work.dlq".into(), "work.dlx".into(), "".into(), QueueBindOptions::default(), FieldTable::default())
        .await
        .unwrap();
}

async fn publish_jobs(channel: &Channel, ids: &[&str]) {
    for id in ids {
        let properties = BasicProperties::default().with_message_id((*id).into());
        let confirm = channel
            .basic_publish("jobs".into(), "job".into(), BasicPublishOptions::default(), id.as_bytes(), properties)
            .await
            .unwrap();
        assert!(confirm.await.unwrap().is_ack());
    }
}

/// The roles of the three queues as warren shows them in one answer each, with the DLQ filter
/// of the list; a mismatch is returned in words.
async fn retry_roles_hold(warren: &Warren, vhost: &str) -> Result<(Value, Value, Value), String> {
    let work = warren.queue(vhost, "work").await.ok_or("work not listed")?;
    let wait = warren.queue(vhost, "work.wait").await.ok_or("work.wait not listed")?;
    let dlq = warren.queue(vhost, "work.dlq").await.ok_or("work.dlq not listed")?;
    let roles = (&work["role"], &wait["role"], &dlq["role"]);
    if roles != (&json!("work"), &json!("wait"), &json!("dlq")) || work["is_dlq"] != false {
        return Err(format!("roles work/wait/dlq: {roles:?}; work: {work}; wait: {wait}"));
    }
    if work["dead_letter_sources"] != json!([]) || dlq["dead_letter_sources"] != json!(["work"]) {
        return Err(format!("sources: work {} work.dlq {}", work["dead_letter_sources"], dlq["dead_letter_sources"]));
    }
    let (_, list) = warren.get_json(&format!("/api/v1/queues?vhost={}&dlq=true", encode(vhost))).await;
    let names: Vec<&Value> =
        list["items"].as_array().map(|a| a.iter().map(|q| &q["name"]).collect()).unwrap_or_default();
    if names != [&json!("work.dlq")] {
        return Err(format!("the DLQ list: {list}"));
    }
    Ok((work, wait, dlq))
}

/// Issue 31, case 3 / must-have 4: a work queue whose consumer died, or has not connected yet,
/// does not become a DLQ "fed by" its wait queue, and the wait queue does not become the work
/// queue; the reasons say what the roles rest on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_roles_hold_before_the_consumer_connects_and_after_it_dies() {
    let vhost = TestVhost::create("roles-incident").await;
    let connection = vhost.connect().await;
    let channel = vhost.channel(&connection).await;
    declare_retry_topology(&channel).await;
    publish_jobs(&channel, &["job-1", "job-2", "job-3"]).await;

    // warren starts before any consumer has connected: right from the first poll that lists
    // the queues, from the topology alone.
    let warren = Warren::for_vhost(&vhost.name, 1).await;
    let first = wait_for("the first poll listing work", Duration::from_secs(30), || async {
        let work = warren.queue(&vhost.name, "work").await.ok_or("not listed")?;
        if work["role"] == "unknown" && work["role_reason"].as_str().unwrap_or_default().contains("not known yet") {
            return Err(format!("topology not read yet: {work}"));
        }
        Ok(work)
    })
    .await;
    let (work, wait, _) = retry_roles_hold(&warren, &vhost.name).await.unwrap_or_else(|e| panic!("first poll: {e}"));
    assert_eq!(first["role"], "work", "{first}");
    assert_eq!(work["consumers"], 0, "no consumer yet: {work}");
    let reason = wait["role_reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("work.dlq") && reason.contains("topology alone"),
        "the reason says what it rests on: {reason}"
    );

    // The consumer connects, retries every job twice and rejects it into work.dlq.
    let worker_connection = vhost.connect().await;
    let worker = tokio::spawn(failing_consumer(
        worker_connection.create_channel().await.unwrap(),
        vhost.channel(&worker_connection).await,
    ));
    wait_for("all three jobs in work.dlq, with work consumed", Duration::from_secs(60), || async {
        let (work, _, dlq) = retry_roles_hold(&warren, &vhost.name).await?;
        if dlq["total"] == 3 && work["consumers"] == 1 {
            Ok(())
        } else {
            Err(format!("work.dlq total {}; work consumers {}", dlq["total"], work["consumers"]))
        }
    })
    .await;

    // The consumer dies with jobs waiting in work and a retry waiting in work.wait.
    worker.abort();
    worker_connection.close(0, "killed".into()).await.ok();
    publish_jobs(&channel, &["job-4", "job-5"]).await;
    let retry = BasicProperties::default().with_message_id("job-6".into()).with_expiration("600000".into());
    let confirm = channel
        .basic_publish("".into(), "work.wait".into(), BasicPublishOptions::default(), b"job-6", retry)
        .await
        .unwrap();
    assert!(confirm.await.unwrap().is_ack());
    wait_for("warren seeing work without consumers", Duration::from_secs(30), || async {
        let work = warren.queue(&vhost.name, "work").await.ok_or("not listed")?;
        if work["consumers"] == 0 && work["total"] == 2 {
            Ok(())
        } else {
            Err(work.to_string())
        }
    })
    .await;
    // Longer than the 25 s the issue saw the roles flip in, at one poll a second.
    let until = std::time::Instant::now() + Duration::from_secs(27);
    while std::time::Instant::now() < until {
        retry_roles_hold(&warren, &vhost.name).await.unwrap_or_else(|e| panic!("consumer dead: {e}"));
        tokio::time::sleep(Duration::from_millis(900)).await;
    }
    let (work, wait, _) = retry_roles_hold(&warren, &vhost.name).await.unwrap();
    let reason = wait["role_reason"].as_str().unwrap_or_default();
    assert!(reason.contains("had consumers when warren last saw them"), "what the role rests on now: {reason}");
    assert!(!work["role_reason"].as_str().unwrap_or_default().is_empty(), "{work}");
    // The pages: no "fed by" on the work queue, one DLQ badge, the overview's DLQ table.
    let (_, page) = warren.get_text(&format!("/queues/local/{}/work", encode(&vhost.name))).await;
    assert!(page.contains("<strong>work queue</strong>") && !page.contains("class=\"fed-by\""), "work page");
    let (_, html) = warren.get_text(&format!("/queues?vhost={}", encode(&vhost.name))).await;
    assert_eq!(html.matches(">DLQ<").count(), 1, "one DLQ badge in the list");
    let (_, overview) = warren.get_text("/").await;
    let rows = overview_dlq_rows(&overview);
    let link = |name: &str| format!(">{}</a>", common::ident(name));
    assert!(rows.contains(&link("work.dlq")) && !rows.contains(&link("work")), "{rows}");

    // A restart while the consumer is still down keeps the roles: what warren saw is stored.
    let warren = warren.restart().await;
    wait_for("the roles after a restart", Duration::from_secs(30), || async {
        let (_, wait, _) = retry_roles_hold(&warren, &vhost.name).await?;
        let reason = wait["role_reason"].as_str().unwrap_or_default();
        if reason.contains("had consumers when warren last saw them") {
            Ok(())
        } else {
            Err(reason.to_string())
        }
    })
    .await;

    warren.stop().await;
    connection.close(0, "done".into()).await.ok();
}

/// Issue 31, case 4 / must-have 5: the API applies the confirmation page's rule. A requeue whose
/// target is the wait queue (which a dead letter, stripped of its expiration, never leaves)
/// answers 409 with the reason and the suggested target, and goes through only when the request
/// accepts that risk.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_api_requeue_into_a_wait_queue_is_refused_unless_the_risk_is_accepted() {
    let vhost = TestVhost::create("roles-strand").await;
    let connection = vhost.connect().await;
    let channel = vhost.channel(&connection).await;
    declare_retry_topology(&channel).await;
    // Retries expire out of work.wait back into work, whose consumer is down: each message in
    // work died last in work.wait, so its "original queue" is the wait queue.
    for id in ["w-1", "w-2", "w-3"] {
        let retry = BasicProperties::default().with_message_id(id.into()).with_expiration("50".into());
        let confirm = channel
            .basic_publish("".into(), "work.wait".into(), BasicPublishOptions::default(), b"job", retry)
            .await
            .unwrap();
        assert!(confirm.await.unwrap().is_ack());
    }
    let warren = Warren::for_vhost(&vhost.name, 1).await;
    wait_for("the retries back in work, and the topology read", Duration::from_secs(30), || async {
        let work = warren.queue(&vhost.name, "work").await.ok_or("work not listed")?;
        let wait = warren.queue(&vhost.name, "work.wait").await.ok_or("work.wait not listed")?;
        let routed = wait["dead_letter_target"]["queues"] == json!(["work"]);
        if work["total"] == 3 && wait["total"] == 0 && routed {
            Ok(())
        } else {
            Err(format!("work total {}, work.wait total {}", work["total"], wait["total"]))
        }
    })
    .await;
    // Without a snapshot nothing says beforehand where the messages would go: the move starts,
    // and refuses the wait queue as it meets it; every message stays.
    let path = format!("/api/v1/queues/local/{}/work/requeue", encode(&vhost.name));
    let job = warren.run_move(&path, json!({"selection": "all", "target": "original_queue"})).await;
    assert_ne!(job["state"], "done", "{job}");
    assert_eq!(job["report"]["moved"], json!([]), "{job}");
    assert!(job.to_string().contains("accept_stranding"), "the refusal says how to accept the risk: {job}");
    assert_eq!(depth(&channel, "work").await, 3, "nothing moved");
    assert_eq!(depth(&channel, "work.wait").await, 0, "nothing moved");

    let snapshot = warren.snapshot(&vhost.name, "work", 10).await;
    let originals: Vec<&Value> =
        snapshot["messages"].as_array().unwrap().iter().map(|m| &m["original_queue"]).collect();
    assert_eq!(originals, [&json!("work.wait"); 3], "{snapshot}");

    // The confirmation page warns, and names where to send them instead.
    let form = "scope=all&target=original-queue";
    let response = warren
        .http
        .post(warren.url(&format!("/dlq/local/{}/work/requeue", encode(&vhost.name))))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(form)
        .send()
        .await
        .unwrap();
    let page = response.text().await.unwrap();
    assert!(page.contains("stays there for ever"), "the page warns: {page}");

    // The API refuses the same, with the same reason and the suggested target.
    let (status, refused) = warren.post_json(&path, json!({"selection": "all", "target": "original_queue"})).await;
    assert_eq!(status, 409, "{refused}");
    assert_eq!(refused["error"]["code"], "would_strand", "{refused}");
    assert_eq!(refused["error"]["suggested_target"], "work", "{refused}");
    assert_eq!(refused["error"]["queue"], "work.wait", "{refused}");
    let message = refused["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("stays there for ever") && message.contains("accept_stranding"), "{message}");
    assert_eq!(depth(&channel, "work").await, 3, "nothing moved");
    // A named target is checked the same way: from the DLQ into the wait queue.
    let dlq_path = format!("/api/v1/queues/local/{}/work.dlq/requeue", encode(&vhost.name));
    let (status, refused) =
        warren.post_json(&dlq_path, json!({"selection": "all", "target": {"queue": "work.wait"}})).await;
    assert_eq!((status, &refused["error"]["suggested_target"]), (409, &json!("work")), "{refused}");

    // Accepting the risk moves them, every id once, into the wait queue, where they stay.
    let job =
        warren.run_move(&path, json!({"selection": "all", "target": "original_queue", "accept_stranding": true})).await;
    assert_eq!(job["state"], "done", "{job}");
    let mut moved = common::dead_letters::message_ids(&job["report"]["moved"]);
    moved.sort();
    assert_eq!(moved, ["w-1", "w-2", "w-3"], "{job}");
    assert_eq!(depth(&channel, "work").await, 0);
    let mut arrived = drain_ids(&channel, "work.wait").await;
    arrived.sort();
    assert_eq!(arrived, moved, "each moved message is in the wait queue, once");

    warren.stop().await;
    connection.close(0, "done".into()).await.ok();
}

/// Issue 29, must-have 1: custody's replays and edits put messages back under the rule moves
/// follow (issue 31, must-have 5): a wait queue, where a dead letter without its expiration
/// would stay for ever, is refused unless the request accepts the risk, and the records stay
/// held; accepted, each id arrives once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_custody_replay_into_a_wait_queue_is_refused_unless_the_risk_is_accepted() {
    let vhost = TestVhost::create("roles-custody-strand").await;
    let connection = vhost.connect().await;
    let channel = vhost.channel(&connection).await;
    declare_retry_topology(&channel).await;
    publish_jobs(&channel, &["c-1", "c-2", "c-3"]).await;
    // Each job fails for good: rejected without requeue, it dead-letters into work.dlq.
    for _ in 0..3 {
        let got = channel.basic_get("work".into(), BasicGetOptions::default()).await.unwrap().expect("a job");
        got.delivery.acker.reject(BasicRejectOptions { requeue: false }).await.unwrap();
    }
    let toml = format!(
        "[[brokers]]\nname = \"local\"\nvhosts_include = [{:?}]\npoll_interval_secs = 1\n\n\
         [[custody]]\nqueue = \"*.dlq\"\nedit = true\n",
        vhost.name
    );
    let warren = Warren::start(&toml).await;
    let base = format!("/api/v1/queues/local/{}/work.dlq/custody", encode(&vhost.name));
    let held = |list: &Value| list["custody"]["counts"]["held"].clone();
    let list = wait_for("the dead letters in custody, and the topology read", Duration::from_secs(60), || async {
        let wait = warren.queue(&vhost.name, "work.wait").await.ok_or("work.wait not listed")?;
        let (_, list) = warren.get_json(&base).await;
        if held(&list) == 3 && wait["role"] == "wait" {
            Ok(list)
        } else {
            Err(format!("held {}, work.wait role {}", held(&list), wait["role"]))
        }
    })
    .await;

    // Into the wait queue through the API: 409, as for a move, with where to send them instead.
    let (status, refused) = warren
        .post_json(&format!("{base}/replay"), json!({"selection": "all", "target": {"queue": "work.wait"}}))
        .await;
    assert_eq!(status, 409, "{refused}");
    assert_eq!(refused["error"]["code"], "would_strand", "{refused}");
    assert_eq!(refused["error"]["suggested_target"], "work", "{refused}");
    assert!(refused["error"]["message"].as_str().unwrap_or_default().contains("accept_stranding"), "{refused}");

    // Through the page's form the replay runs and refuses each record: every record still held,
    // nothing published.
    let form = "scope=all&target=queue&target_queue=work.wait";
    let response = warren
        .http
        .post(warren.url(&format!("/dlq/local/{}/work.dlq/custody/replay", encode(&vhost.name))))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(form)
        .send()
        .await
        .unwrap();
    let id: i64 = response.url().path().trim_start_matches("/jobs/").parse().expect("the job page");
    let entry = warren.audit_ended(id).await;
    assert_eq!((&entry["moved"], &entry["failed"]), (&json!(0), &json!(3)), "{entry}");
    let (_, fates) = warren.get_json(&format!("/api/v1/audit/{id}/messages")).await;
    assert!(fates.to_string().contains("accept_stranding"), "each refusal says how to accept the risk: {fates}");
    assert_eq!(depth(&channel, "work.wait").await, 0, "nothing was sent");
    let (_, list_after) = warren.get_json(&base).await;
    assert_eq!(held(&list_after), 3, "{list_after}");

    // An edit into the wait queue: refused the same way.
    let id = list["custody"]["records"][0]["id"].as_i64().unwrap();
    let (status, refused) = warren
        .post_json(&format!("{base}/{id}/edit"), json!({"body": "fixed", "target": {"queue": "work.wait"}}))
        .await;
    assert_eq!(status, 409, "{refused}");
    assert!(refused.to_string().contains("accept_stranding"), "{refused}");
    assert_eq!(depth(&channel, "work.wait").await, 0, "nothing was sent");

    // Accepted: every id once, into the wait queue.
    let body = json!({"selection": "all", "target": {"queue": "work.wait"}, "accept_stranding": true});
    let (status, started) = warren.post_json(&format!("{base}/replay"), body).await;
    assert_eq!(status, 202, "{started}");
    let entry = warren.audit_ended(started["audit_id"].as_i64().unwrap()).await;
    assert_eq!((&entry["outcome"], &entry["moved"]), (&json!("done"), &json!(3)), "{entry}");
    let mut arrived = drain_ids(&channel, "work.wait").await;
    arrived.sort();
    assert_eq!(arrived, ["c-1", "c-2", "c-3"], "each record once");

    warren.stop().await;
    connection.close(0, "done".into()).await.ok();
}
