//! The advisor (issue 35) against the real broker: each test declares a risky configuration in
//! a vhost of its own, waits until warren's poll or client listing shows it, checks the finding
//! and its evidence, then fixes it (with the policy the finding suggests where it has one, or
//! by declaring again) and waits until the finding clears. A well-configured topology raises
//! nothing. Upgrade blockers are declared on 3.10 (4.x refuses some of them: checked there).

mod common;

use std::time::Duration;

use common::{broker, encode, management, publish, wait_for, TestVhost, Warren};
use lapin::options::{BasicConsumeOptions, BasicGetOptions, BasicPublishOptions, BasicQosOptions, BasicRejectOptions};
use lapin::types::FieldTable;
use lapin::{BasicProperties, Connection, ConnectionProperties};
use serde_json::{json, Value};

const WAIT: Duration = Duration::from_secs(90);

/// How long a fix may take to show: on 4.x the plugin serves depth and counters, and the queue
/// listing that carries arguments and policies runs every `METADATA_EVERY` (300 s), so a policy
/// applied just after one listing shows at the next (the finding's `queue metadata` age says so).
fn clear_wait() -> Duration {
    if on_4x() {
        Duration::from_secs(330)
    } else {
        WAIT
    }
}

fn on_3x() -> bool {
    broker().target == "3.10"
}

fn on_4x() -> bool {
    broker().target.starts_with('4')
}

fn nostats() -> bool {
    broker().target.ends_with("-nostats")
}

/// Declares `queue` with these properties and arguments through the management API; returns
/// the status (201 or 204 when declared).
async fn declare(vhost: &TestVhost, queue: &str, durable: bool, arguments: Value) -> (u16, String) {
    let path = format!("/api/queues/{}/{}", encode(&vhost.name), encode(queue));
    management(
        reqwest::Method::PUT,
        &path,
        Some(json!({"durable": durable, "auto_delete": false, "arguments": arguments})),
    )
    .await
}

async fn declared(vhost: &TestVhost, queue: &str, durable: bool, arguments: Value) {
    let (status, body) = declare(vhost, queue, durable, arguments).await;
    assert!(status == 201 || status == 204, "declare {queue}: {status} {body}");
}

async fn set_policy(vhost: &TestVhost, name: &str, body: Value) -> (u16, String) {
    management(reqwest::Method::PUT, &format!("/api/policies/{}/{}", encode(&vhost.name), encode(name)), Some(body))
        .await
}

/// Applies the policy a finding suggests, as its JSON says.
async fn apply_fix(vhost: &TestVhost, finding: &Value) {
    let policy = &finding["fix"]["policy"];
    assert_eq!(policy["vhost"], vhost.name.as_str(), "{finding}");
    let body: Value = serde_json::from_str(policy["json"].as_str().expect("the policy's JSON")).expect("JSON");
    let (status, text) = set_policy(vhost, policy["name"].as_str().unwrap(), body).await;
    assert!(status == 201 || status == 204, "the suggested policy applies: {status} {text}");
}

/// warren on the vhost, polling every second; `hold_limit_secs` is the broker's
/// `scheduled_hold_limit_secs`.
async fn warren(vhost: &TestVhost, hold_limit_secs: u64) -> Warren {
    Warren::start(&format!(
        "[[brokers]]\nname = \"local\"\n{}vhosts_include = [{:?}]\npoll_interval_secs = 1\nscheduled_hold_limit_secs = {hold_limit_secs}\n",
        broker().toml(),
        vhost.name
    ))
    .await
}

async fn advice(warren: &Warren, query: &str) -> Value {
    let (status, body) = warren.get_json(&format!("/api/v1/brokers/local/advice{query}")).await;
    assert_eq!(status, 200, "{body}");
    body
}

/// The findings of `rule` on `queue` (or on any subject, `queue` empty).
fn findings<'a>(advice: &'a Value, rule: &str, queue: &str) -> Vec<&'a Value> {
    advice["findings"]
        .as_array()
        .expect("findings")
        .iter()
        .filter(|f| f["rule"] == rule && (queue.is_empty() || f["queue"] == queue))
        .collect()
}

/// Waits until `rule` fires on `queue`; returns the finding.
async fn fires(warren: &Warren, rule: &str, queue: &str) -> Value {
    wait_for(&format!("{rule} on {queue}"), WAIT, || async {
        let advice = advice(warren, "").await;
        match findings(&advice, rule, queue).first() {
            Some(f) => Ok((*f).clone()),
            None => Err(advice.to_string()),
        }
    })
    .await
}

/// As [`fires`], until the finding also satisfies `check`: a client's own connection name comes
/// from the connections listing, which may be a listing behind the consumers' and channels'
/// (seen on 4.0.5: the first finding named the broker's connection only).
async fn fires_with(warren: &Warren, rule: &str, queue: &str, check: impl Fn(&Value) -> bool) -> Value {
    wait_for(&format!("{rule} on {queue}, as expected"), WAIT, || async {
        let advice = advice(warren, "").await;
        match findings(&advice, rule, queue).into_iter().find(|f| check(f)) {
            Some(f) => Ok(f.clone()),
            None => Err(advice.to_string()),
        }
    })
    .await
}

/// Waits until `rule` no longer fires on `queue`, and its inputs were known (it ran).
async fn clears(warren: &Warren, rule: &str, queue: &str) {
    wait_for(&format!("{rule} on {queue} to clear"), clear_wait(), || async {
        let advice = advice(warren, "").await;
        let ran = advice["counts"].as_array().unwrap().iter().any(|c| c["rule"] == rule && c["ran"] == true);
        if ran && findings(&advice, rule, queue).is_empty() {
            Ok(())
        } else {
            Err(advice.to_string())
        }
    })
    .await
}

fn evidence<'a>(finding: &'a Value, what: &str) -> &'a Value {
    finding["evidence"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["what"] == what)
        .unwrap_or_else(|| panic!("{what}: {finding}"))
}

#[tokio::test]
async fn upgrade_blockers_are_flagged_with_their_source_and_clear_when_fixed() {
    let vhost = TestVhost::create("advisor-blockers").await;
    if on_4x() {
        // The point of the blockers: 4.x refuses what 3.x accepted.
        let (status, body) = set_policy(&vhost, "ha", json!({"pattern": "^m", "definition": {"ha-mode": "all"}})).await;
        assert_eq!(status, 400, "4.x refuses ha-* policies: {body}");
        if broker().target.starts_with("4.3") {
            let (status, body) = declare(&vhost, "v1", true, json!({"x-queue-version": 1})).await;
            assert_eq!(status, 400, "4.3 refuses x-queue-version=1: {body}");
        }
        return;
    }
    declared(&vhost, "lazy", true, json!({"x-queue-mode": "lazy"})).await;
    declared(&vhost, "v1", true, json!({"x-queue-version": 1})).await;
    declared(&vhost, "tmp", false, json!({})).await;
    declared(&vhost, "mirrored", true, json!({})).await;
    let (status, body) =
        set_policy(&vhost, "ha", json!({"pattern": "^mirrored$", "definition": {"ha-mode": "all", "max-length": 100}}))
            .await;
    assert_eq!(status, 201, "{body}");
    let warren = warren(&vhost, 3600).await;

    let lazy = fires(&warren, "queue-mode-set", "lazy").await;
    assert_eq!(evidence(&lazy, "queue mode")["source"], "argument x-queue-mode");
    assert!(lazy["blocks_upgrade"].as_str().unwrap().contains("4.0"), "{lazy}");
    assert!(lazy["fix"]["policy"].is_null(), "an argument needs a new declaration: {lazy}");
    let v1 = fires(&warren, "queue-version-1", "v1").await;
    assert!(v1["blocks_upgrade"].as_str().unwrap().contains("4.3"), "{v1}");
    let tmp = fires(&warren, "transient-non-exclusive-queue", "tmp").await;
    assert_eq!(evidence(&tmp, "durable")["value"], "false");
    let mirrored = fires(&warren, "classic-mirroring-policy", "mirrored").await;
    assert_eq!(evidence(&mirrored, "ha-mode")["source"], "policy ha");
    let suggested = &mirrored["fix"]["policy"];
    assert_eq!(suggested["definition"], json!({"max-length": 100}), "the ha keys go, the rest stays: {mirrored}");
    assert!(suggested["command"].as_str().unwrap().starts_with("rabbitmqctl set_policy -p "), "{mirrored}");
    for f in [&lazy, &v1, &tmp, &mirrored] {
        let inputs = f["inputs"].as_array().unwrap();
        assert!(inputs.iter().any(|i| i["input"] == "queue metadata" && i["age_secs"].as_f64().is_some()), "{f}");
        assert_eq!(f["severity"], "warning");
    }

    // The page lists them, sorted and counted; the filter keeps one rule.
    let (status, page) = warren.get_text("/brokers/local/advisor").await;
    assert_eq!(status, 200);
    assert!(page.contains("Upgrade blocker:") && page.contains("queue-version-1"), "{page}");
    let (status, page) = warren.get_text("/brokers/local/advisor?rule=queue-mode-set").await;
    assert_eq!(status, 200);
    assert!(
        page.contains("data-rule=\"queue-mode-set\"")
            && !page.contains("<article class=\"finding severity-warning\" data-rule=\"queue-version-1\"")
    );
    let only = advice(&warren, "?rule=queue-version-1").await;
    assert_eq!(only["findings"].as_array().unwrap().len(), 1, "{only}");
    // /metrics counts them per rule and severity.
    let (_, metrics) = warren.get_text("/metrics").await;
    assert!(
        metrics.contains("warren_advisor_findings{broker=\"local\",rule=\"queue-mode-set\",severity=\"warning\"} 1"),
        "{metrics}"
    );

    // Fixed: declared again without the arguments, durable, and the suggested policy.
    for q in ["lazy", "v1", "tmp"] {
        vhost.delete_queue(q).await;
        declared(&vhost, q, true, json!({})).await;
    }
    apply_fix(&vhost, &mirrored).await;
    for (rule, q) in [
        ("queue-mode-set", "lazy"),
        ("queue-version-1", "v1"),
        ("transient-non-exclusive-queue", "tmp"),
        ("classic-mirroring-policy", "mirrored"),
    ] {
        clears(&warren, rule, q).await;
    }
    let (_, metrics) = warren.get_text("/metrics").await;
    assert!(
        metrics.contains("warren_advisor_findings{broker=\"local\",rule=\"queue-mode-set\",severity=\"warning\"} 0")
    );
    warren.stop().await;
}

#[tokio::test]
async fn a_quorum_queue_without_dlx_is_flagged_and_the_suggested_policy_clears_it() {
    let vhost = TestVhost::create("advisor-quorum").await;
    declared(&vhost, "orders", true, json!({"x-queue-type": "quorum"})).await;
    declared(&vhost, "orders.dlq", true, json!({"x-queue-type": "quorum", "x-message-ttl": 86_400_000})).await;
    let warren = warren(&vhost, 3600).await;
    let found = fires(&warren, "quorum-without-dlx", "orders").await;
    let limit = evidence(&found, "delivery limit");
    if on_3x() {
        // 3.x has no default limit: nothing is dropped yet, the upgrade sets 20.
        assert_eq!((found["severity"].as_str(), limit["value"].as_str()), (Some("warning"), Some("none")), "{found}");
    } else {
        assert_eq!((found["severity"].as_str(), limit["value"].as_str()), (Some("critical"), Some("20")), "{found}");
    }
    assert_eq!(evidence(&found, "dead-letter exchange")["value"], "none");
    // The queue page shows it too.
    let (_, page) = warren.get_text(&format!("/queues/local/{}/orders", encode(&vhost.name))).await;
    assert!(page.contains("<h2>Advisor</h2>") && page.contains("data-rule=\"quorum-without-dlx\""), "{page}");

    // The suggested policy sets a DLX, at-least-once and reject-publish: nothing left to say.
    assert_eq!(found["fix"]["policy"]["definition"]["dead-letter-routing-key"], "orders.dlq");
    apply_fix(&vhost, &found).await;
    clears(&warren, "quorum-without-dlx", "orders").await;
    let after = advice(&warren, "").await;
    for rule in ["quorum-dlx-at-most-once", "quorum-at-least-once-without-reject-publish"] {
        assert!(findings(&after, rule, "orders").is_empty(), "{rule}: {after}");
    }
    let (_, page) = warren.get_text(&format!("/queues/local/{}/orders", encode(&vhost.name))).await;
    assert!(page.contains("No finding for this queue"), "{page}");
    warren.stop().await;
}

#[tokio::test]
async fn quorum_dead_lettering_at_least_once_needs_reject_publish() {
    let vhost = TestVhost::create("advisor-strategy").await;
    let arguments = json!({"x-queue-type": "quorum", "x-dead-letter-exchange": "",
        "x-dead-letter-routing-key": "jobs.dlq", "x-dead-letter-strategy": "at-least-once"});
    declared(&vhost, "jobs", true, arguments).await;
    declared(&vhost, "plain", true, json!({"x-queue-type": "quorum", "x-dead-letter-exchange": "dlx"})).await;
    let warren = warren(&vhost, 3600).await;
    let found = fires(&warren, "quorum-at-least-once-without-reject-publish", "jobs").await;
    assert_eq!(evidence(&found, "overflow")["value"], "drop-head");
    assert_eq!(evidence(&found, "dead-letter strategy")["source"], "argument x-dead-letter-strategy");
    let plain = fires(&warren, "quorum-dlx-at-most-once", "plain").await;
    assert_eq!(evidence(&plain, "dead-letter strategy")["source"], "default");
    apply_fix(&vhost, &found).await;
    apply_fix(&vhost, &plain).await;
    clears(&warren, "quorum-at-least-once-without-reject-publish", "jobs").await;
    clears(&warren, "quorum-dlx-at-most-once", "plain").await;
    warren.stop().await;
}

#[tokio::test]
async fn a_work_queue_that_drops_its_head_and_one_at_its_limit() {
    let vhost = TestVhost::create("advisor-drop-head").await;
    declared(&vhost, "work", true, json!({"x-max-length": 3})).await;
    let connection = vhost.connect().await;
    let channel = vhost.channel(&connection).await;
    publish(&channel, "work", 5, BasicProperties::default()).await;
    // A consumer that takes one message and holds it: the queue is worked, 3 stay ready.
    let consumer_channel = connection.create_channel().await.unwrap();
    consumer_channel.basic_qos(1, BasicQosOptions::default()).await.unwrap();
    let _consumer = consumer_channel
        .basic_consume("work".into(), "worker".into(), BasicConsumeOptions::default(), FieldTable::default())
        .await
        .unwrap();
    publish(&channel, "work", 3, BasicProperties::default()).await;
    let warren = warren(&vhost, 3600).await;
    let dropping = fires(&warren, "drop-head-on-work-queue", "work").await;
    assert_eq!(dropping["severity"], "critical", "no DLX: the dropped messages are destroyed: {dropping}");
    assert_eq!(evidence(&dropping, "overflow")["source"], "default");
    let full = fires(&warren, "length-limit-reached", "work").await;
    assert_eq!(evidence(&full, "ready messages")["value"], "3");
    assert!(full["title"].as_str().unwrap().contains("drops its oldest"), "{full}");

    apply_fix(&vhost, &dropping).await;
    clears(&warren, "drop-head-on-work-queue", "work").await;
    let full = wait_for("the full queue to say it refuses publishes", clear_wait(), || async {
        let advice = advice(&warren, "").await;
        match findings(&advice, "length-limit-reached", "work").first() {
            Some(f) if f["title"].as_str().unwrap().contains("refuses publishes") => Ok((*f).clone()),
            _ => Err(advice.to_string()),
        }
    })
    .await;
    assert!(evidence(&full, "overflow")["source"].as_str().unwrap().starts_with("policy warren-"), "{full}");
    warren.stop().await;
}

/// A connection that names itself.
async fn named_connection(vhost: &TestVhost, name: &str) -> Connection {
    let uri = format!("{}/{}", broker().amqp_with_guest(), encode(&vhost.name));
    Connection::connect(&uri, ConnectionProperties::default().with_connection_name(name.into())).await.expect("AMQP")
}

#[tokio::test]
async fn consumers_and_publishers_are_read_from_the_client_listing() {
    if nostats() {
        // No client listing there: the client rules are unknown (unit-tested in src/advisor).
        return;
    }
    let vhost = TestVhost::create("advisor-clients").await;
    declared(&vhost, "jobs", true, json!({"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "jobs.dlq"}))
        .await;
    declared(&vhost, "jobs.dlq", true, json!({"x-max-length": 1000})).await;
    declared(&vhost, "feed", true, json!({})).await;
    // A publisher without confirms, an auto-ack consumer on a dead-lettering queue, and a
    // consumer with no prefetch limit.
    let publisher = named_connection(&vhost, "careless-publisher").await;
    let channel = publisher.create_channel().await.unwrap();
    for _ in 0..5 {
        // Without confirm mode the broker says nothing back: the "confirmation" is NotRequested.
        let confirmation = channel
            .basic_publish("".into(), "feed".into(), BasicPublishOptions::default(), b"x", BasicProperties::default())
            .await
            .unwrap()
            .await
            .unwrap();
        assert!(!confirmation.is_ack(), "no confirms on this channel");
    }
    let auto = named_connection(&vhost, "auto-acker").await;
    let auto_channel = auto.create_channel().await.unwrap();
    let no_ack = BasicConsumeOptions { no_ack: true, ..Default::default() };
    let _auto = auto_channel.basic_consume("jobs".into(), "auto".into(), no_ack, FieldTable::default()).await.unwrap();
    let greedy = named_connection(&vhost, "greedy").await;
    let greedy_channel = greedy.create_channel().await.unwrap();
    let _greedy = greedy_channel
        .basic_consume("feed".into(), "greedy".into(), BasicConsumeOptions::default(), FieldTable::default())
        .await
        .unwrap();
    let warren = warren(&vhost, 3600).await;

    let names = |f: &Value, label: &str, name: &str| evidence(f, label)["value"].as_str().unwrap().contains(name);
    fires_with(&warren, "auto-ack-consumer", "jobs", |f| names(f, "consumer with automatic ack", "auto-acker")).await;
    fires_with(&warren, "unlimited-prefetch", "feed", |f| names(f, "consumer with prefetch 0 (unlimited)", "greedy"))
        .await;
    let careless = fires_with(&warren, "publish-without-confirms", "", |f| {
        f["connection"].as_str().unwrap().starts_with("careless-publisher")
    })
    .await;
    assert!(evidence(&careless, "channel without confirms")["value"].as_str().unwrap().ends_with("5 published"));
    assert!(careless["inputs"][0]["input"] == "clients" && careless["inputs"][0]["age_secs"].is_f64(), "{careless}");

    // Fixed clients: the careless ones go, a worker with acks and a prefetch and a publisher
    // with confirms take their place.
    for c in [&publisher, &auto, &greedy] {
        c.close(200, "fixed".into()).await.unwrap();
    }
    let careful = named_connection(&vhost, "careful").await;
    let channel = vhost.channel(&careful).await;
    publish(&channel, "feed", 3, BasicProperties::default()).await;
    let worker = careful.create_channel().await.unwrap();
    worker.basic_qos(10, BasicQosOptions::default()).await.unwrap();
    let _worker =
        worker.basic_consume("jobs".into(), "w".into(), BasicConsumeOptions::default(), FieldTable::default()).await;
    for (rule, q) in [("auto-ack-consumer", "jobs"), ("unlimited-prefetch", "feed"), ("publish-without-confirms", "")] {
        clears(&warren, rule, q).await;
    }
    warren.stop().await;
}

#[tokio::test]
async fn one_connection_holding_every_unacked_message_past_the_hold_limit() {
    if nostats() {
        return;
    }
    let vhost = TestVhost::create("advisor-holder").await;
    declared(&vhost, "slow", true, json!({})).await;
    let setup = vhost.connect().await;
    publish(&vhost.channel(&setup).await, "slow", 5, BasicProperties::default()).await;
    let holder = named_connection(&vhost, "stuck-worker").await;
    let channel = holder.create_channel().await.unwrap();
    channel.basic_qos(5, BasicQosOptions::default()).await.unwrap();
    let _consumer = channel
        .basic_consume("slow".into(), "stuck".into(), BasicConsumeOptions::default(), FieldTable::default())
        .await;
    let warren = warren(&vhost, 5).await;
    let found = fires(&warren, "unacked-held-by-one-connection", "slow").await;
    assert!(found["connection"].as_str().unwrap().starts_with("stuck-worker"), "{found}");
    assert_eq!(evidence(&found, "unacked messages")["value"], "5");
    assert_eq!(evidence(&found, "hold limit")["value"], "5 s");
    holder.close(200, "released".into()).await.unwrap();
    clears(&warren, "unacked-held-by-one-connection", "slow").await;
    warren.stop().await;
}

#[tokio::test]
async fn a_dead_letter_queue_without_consumer_or_retention() {
    let vhost = TestVhost::create("advisor-dlq").await;
    declared(&vhost, "w", true, json!({"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "w.dlq"})).await;
    declared(&vhost, "w.dlq", true, json!({})).await;
    let connection = vhost.connect().await;
    let channel = vhost.channel(&connection).await;
    publish(&channel, "w", 2, BasicProperties::default()).await;
    for _ in 0..2 {
        let got = channel.basic_get("w".into(), BasicGetOptions::default()).await.unwrap().expect("a message");
        got.delivery.acker.reject(BasicRejectOptions { requeue: false }).await.unwrap();
    }
    let warren = warren(&vhost, 3600).await;
    let found = fires(&warren, "dlq-without-owner-or-retention", "w.dlq").await;
    assert_eq!(evidence(&found, "messages")["value"], "2");
    assert_eq!(evidence(&found, "consumers")["value"], "0");
    apply_fix(&vhost, &found).await;
    clears(&warren, "dlq-without-owner-or-retention", "w.dlq").await;
    warren.stop().await;
}

#[tokio::test]
async fn a_retry_queue_with_different_message_ttls_in_its_snapshot() {
    let vhost = TestVhost::create("advisor-ttls").await;
    declared(&vhost, "work", true, json!({})).await;
    declared(&vhost, "wait", true, json!({"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "work"})).await;
    let connection = vhost.connect().await;
    let channel = vhost.channel(&connection).await;
    publish(&channel, "wait", 1, BasicProperties::default().with_expiration("600000".into())).await;
    publish(&channel, "wait", 2, BasicProperties::default().with_expiration("300000".into())).await;
    let warren = warren(&vhost, 3600).await;
    // Seen only in what warren read: a snapshot of the queue.
    wait_for("warren to list the wait queue", WAIT, || async {
        warren.queue(&vhost.name, "wait").await.filter(|q| q["total"] == 3).ok_or_else(|| "not yet".to_string())
    })
    .await;
    warren.snapshot(&vhost.name, "wait", 10).await;
    let found = fires(&warren, "retry-queue-mixed-ttls", "wait").await;
    assert_eq!(evidence(&found, "per-message TTLs")["value"], "300000 ms, 600000 ms");
    // How many carry each: a counter, which an acknowledgement is not of.
    let counts = evidence(&found, "messages per TTL");
    assert_eq!((&counts["value"], &counts["counter"]), (&json!("300000 ms ×2, 600000 ms ×1"), &json!(true)));
    assert!(found["inputs"].as_array().unwrap().iter().any(|i| i["input"] == "snapshot"), "{found}");
    // Fixed: one delay in the queue, as the next snapshot shows.
    let path = format!("/api/queues/{}/wait/contents", encode(&vhost.name));
    let (status, body) = management(reqwest::Method::DELETE, &path, None).await;
    assert!(status == 204 || status == 200, "{status} {body}");
    publish(&channel, "wait", 2, BasicProperties::default().with_expiration("300000".into())).await;
    wait_for("warren to list the refilled wait queue", WAIT, || async {
        warren.queue(&vhost.name, "wait").await.filter(|q| q["total"] == 2).ok_or_else(|| "not yet".to_string())
    })
    .await;
    warren.snapshot(&vhost.name, "wait", 10).await;
    clears(&warren, "retry-queue-mixed-ttls", "wait").await;
    warren.stop().await;
}

#[tokio::test]
async fn a_configuration_following_the_guidance_raises_nothing() {
    let vhost = TestVhost::create("advisor-clean").await;
    declared(
        &vhost,
        "orders",
        true,
        json!({"x-queue-type": "quorum", "x-dead-letter-exchange": "", "x-dead-letter-routing-key": "orders.dlq",
            "x-dead-letter-strategy": "at-least-once", "x-overflow": "reject-publish", "x-max-length": 10000}),
    )
    .await;
    declared(&vhost, "orders.dlq", true, json!({"x-message-ttl": 1_209_600_000, "x-max-length": 100_000})).await;
    let connection = named_connection(&vhost, "good-service").await;
    let channel = vhost.channel(&connection).await;
    publish(&channel, "orders", 10, BasicProperties::default()).await;
    let worker = connection.create_channel().await.unwrap();
    worker.basic_qos(20, BasicQosOptions::default()).await.unwrap();
    let _worker =
        worker.basic_consume("orders".into(), "w".into(), BasicConsumeOptions::default(), FieldTable::default()).await;
    let warren = warren(&vhost, 3600).await;
    // Once the poll and the client listing saw the worker, every rule ran and none fired.
    let advice = wait_for("a listing with the worker", WAIT, || async {
        let advice = advice(&warren, "").await;
        let consumers = warren.queue(&vhost.name, "orders").await.map(|q| q["consumers"].clone());
        let listed = nostats() || advice["unknown"].as_array().is_some_and(|u| u.is_empty());
        if listed && consumers == Some(json!(1)) {
            Ok(advice)
        } else {
            Err(advice.to_string())
        }
    })
    .await;
    assert_eq!(advice["findings"], json!([]), "no false alarm: {advice}");
    if !nostats() {
        assert!(
            advice["counts"].as_array().unwrap().iter().all(|c| c["ran"] == true && c["findings"] == 0),
            "{advice}"
        );
    }
    let (status, page) = warren.get_text("/brokers/local/advisor").await;
    assert_eq!(status, 200);
    assert!(page.contains("No finding: every rule that ran found nothing."), "{page}");
    warren.stop().await;
}

#[tokio::test]
async fn an_unknown_rule_or_severity_is_refused_with_the_known_ones() {
    let vhost = TestVhost::create("advisor-input").await;
    let warren = warren(&vhost, 3600).await;
    let (status, body) = warren.get_json("/api/v1/brokers/local/advice?rule=no-such-rule").await;
    assert_eq!(status, 400, "{body}");
    assert!(body.to_string().contains("quorum-without-dlx"), "the known rules are named: {body}");
    let (status, body) = warren.get_json("/api/v1/brokers/local/advice?severity=%3Cscript%3E").await;
    assert_eq!(status, 400, "{body}");
    let (status, page) = warren.get_text("/brokers/local/advisor?severity=%3Cscript%3E").await;
    assert_eq!(status, 400);
    assert!(!page.contains("<script>"), "escaped: {page}");
    let (status, _) = warren.get_json("/api/v1/brokers/nobody/advice").await;
    assert_eq!(status, 404);
    warren.stop().await;
}
