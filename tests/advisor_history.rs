//! The advisor's rules that read more than one listing (issue 35): a dead-letter queue's growth
//! from warren's stored history, and a prefetch far above what a consumer processes (from the
//! processing time); and what a viewer reads of the advisor and of a queue's numbers. On the
//! real broker, each in a vhost of its own, as tests/advisor.rs.

mod common;

use std::time::Duration;

use common::dead_letters::dead_letter;
use common::sessions::{add_users, login, Session};
use common::{broker, encode, wait_for, TestVhost, Warren};
use futures_util::StreamExt;
use lapin::options::{BasicAckOptions, BasicConsumeOptions, BasicPublishOptions, BasicQosOptions};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{BasicProperties, Channel};
use serde_json::Value;
use warren::auth::Role;

const WAIT: Duration = Duration::from_secs(90);

async fn advice(warren: &Warren) -> Value {
    let (status, body) = warren.get_json("/api/v1/brokers/local/advice").await;
    assert_eq!(status, 200, "{body}");
    body
}

fn finding<'a>(advice: &'a Value, rule: &str, queue: &str) -> Option<&'a Value> {
    advice["findings"].as_array().unwrap().iter().find(|f| f["rule"] == rule && f["queue"] == queue)
}

/// Waits until `rule` on `queue` satisfies `check`; returns the finding.
async fn fires_with(warren: &Warren, rule: &str, queue: &str, check: impl Fn(&Value) -> bool) -> Value {
    wait_for(&format!("{rule} on {queue}, as expected"), WAIT, || async {
        let advice = advice(warren).await;
        match finding(&advice, rule, queue).filter(|f| check(f)) {
            Some(f) => Ok(f.clone()),
            None => Err(advice.to_string()),
        }
    })
    .await
}

async fn clears(warren: &Warren, rule: &str, queue: &str) {
    wait_for(&format!("{rule} on {queue} to clear"), WAIT, || async {
        let advice = advice(warren).await;
        let ran = advice["counts"].as_array().unwrap().iter().any(|c| c["rule"] == rule && c["ran"] == true);
        if ran && finding(&advice, rule, queue).is_none() {
            Ok(())
        } else {
            Err(advice.to_string())
        }
    })
    .await
}

fn evidence<'a>(finding: &'a Value, what: &str) -> &'a str {
    let e = finding["evidence"].as_array().unwrap().iter().find(|e| e["what"] == what);
    e.and_then(|e| e["value"].as_str()).unwrap_or_else(|| panic!("{what}: {finding}"))
}

fn messages(names: &[&str]) -> Vec<(String, Vec<u8>, FieldTable)> {
    names
        .iter()
        .map(|n| {
            let mut headers = FieldTable::default();
            headers.insert("x-exception-message".into(), AMQPValue::LongString(format!("pw=hunter-{n}").into()));
            (format!("secret-{n}"), format!("{{\"card\": \"4111-{n}\"}}").into_bytes(), headers)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dlq_is_flagged_once_it_grew_over_the_window_and_the_policy_clears_it() {
    let vhost = TestVhost::create("advisor-dlq-growth").await;
    let connection = vhost.connect().await;
    let channel = vhost.channel(&connection).await;
    dead_letter(&vhost, &channel, "work.dlq", false, messages(&["a", "b", "c"])).await;
    // A growth window of 20 s stands in for the default two days.
    let warren = Warren::start(&format!(
        "[[brokers]]\nname = \"local\"\n{}vhosts_include = [{:?}]\npoll_interval_secs = 1\ndlq_growth_window_secs = 20\n",
        broker().toml(),
        vhost.name
    ))
    .await;
    // warren's history of it is younger than the window: flagged, growth not yet known.
    let young = fires_with(&warren, "dlq-without-owner-or-retention", "work.dlq", |_| true).await;
    assert_eq!(young["severity"], "notice", "{young}");
    assert!(evidence(&young, "growth").starts_with("not yet known: no stored depth from 20 s ago"), "{young}");

    // Once the history reaches back past the window, two more dead letters are growth.
    wait_for("a stored history older than the window", Duration::from_secs(40), || async {
        tokio::time::sleep(Duration::from_secs(21)).await;
        Ok::<_, String>(())
    })
    .await;
    dead_letter(&vhost, &channel, "work.dlq", false, messages(&["d", "e"])).await;
    let grown = fires_with(&warren, "dlq-without-owner-or-retention", "work.dlq", |f| f["severity"] == "warning").await;
    assert_eq!(evidence(&grown, "growth"), "3 → 5 messages since 20 s ago", "{grown}");
    assert!(grown["title"].as_str().unwrap().contains("grows"), "{grown}");

    // The policy it suggests (a retention) clears it.
    let policy = &grown["fix"]["policy"];
    let body: Value = serde_json::from_str(policy["json"].as_str().unwrap()).unwrap();
    let response = reqwest::Client::new()
        .put(format!(
            "{}/api/policies/{}/{}",
            broker().management,
            encode(&vhost.name),
            encode(policy["name"].as_str().unwrap())
        ))
        .basic_auth("guest", Some("guest"))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert!(response.status().is_success(), "the suggested policy applies");
    clears(&warren, "dlq-without-owner-or-retention", "work.dlq").await;
    warren.stop().await;
}

/// A consumer with `prefetch` that works on each delivery as it arrives for 100 ms, then acks.
async fn worker(channel: Channel, prefetch: u16, tag: &str) {
    channel.basic_qos(prefetch, BasicQosOptions::default()).await.unwrap();
    let mut deliveries = channel
        .basic_consume("work".into(), tag.into(), BasicConsumeOptions::default(), FieldTable::default())
        .await
        .unwrap();
    tokio::spawn(async move {
        while let Some(Ok(delivery)) = deliveries.next().await {
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(100)).await;
                delivery.ack(BasicAckOptions::default()).await.expect("ack");
            });
        }
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prefetch_far_above_the_processing_is_flagged_and_a_smaller_one_clears_it() {
    if broker().target.ends_with("-nostats") {
        return; // no consumer listing there: the rule is unknown (unit-tested in src/advisor)
    }
    let vhost = TestVhost::create("advisor-prefetch").await;
    let connection = vhost.connect().await;
    let channel = vhost.channel(&connection).await;
    common::declare(&channel, "work", false).await;
    let greedy = connection.create_channel().await.unwrap();
    worker(greedy.clone(), 1000, "greedy").await;
    // 5 msg/s, 0.1 s each: half a message in flight, a prefetch of 1000 is 2000 times that.
    let publisher = tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_millis(200));
        loop {
            tick.tick().await;
            let confirm = channel
                .basic_publish(
                    "".into(),
                    "work".into(),
                    BasicPublishOptions::default(),
                    b"job",
                    BasicProperties::default(),
                )
                .await
                .expect("publish");
            assert!(confirm.await.expect("confirm").is_ack());
        }
    });
    let warren = Warren::start(&format!(
        "[[brokers]]\nname = \"local\"\n{}vhosts_include = [{:?}]\npoll_interval_secs = 1\n",
        broker().toml(),
        vhost.name
    ))
    .await;
    let found = fires_with(&warren, "prefetch-far-above-processing", "work", |_| true).await;
    assert!(evidence(&found, "consumer prefetch").starts_with("1000: greedy on "), "{found}");
    assert!(evidence(&found, "processing time").contains("Little's law"), "{found}");
    assert_eq!(found["severity"], "notice");

    // The consumer comes back with a prefetch of 20: within the floor of 100.
    greedy.close(200, "smaller prefetch".into()).await.unwrap();
    worker(connection.create_channel().await.unwrap(), 20, "modest").await;
    clears(&warren, "prefetch-far-above-processing", "work").await;
    publisher.abort();
    warren.stop().await;
}

/// GETs `path` as `session`, with the pages' line-break hints (`<wbr>`) taken out, so that what
/// is searched is the text as its reader sees it.
async fn get_as(session: &Session<'_>, path: &str) -> (u16, String) {
    let (status, text) = session.get_text(path).await;
    (status, text.replace("<wbr>", ""))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_viewer_reads_findings_and_numbers_and_nothing_the_payload_role_keeps() {
    let vhost = TestVhost::create("advisor-viewer").await;
    let connection = vhost.connect().await;
    let channel = vhost.channel(&connection).await;
    // Dead letters with a card number in the body and a password in a header, in a DLQ whose
    // payloads a [[custody]] rule keeps for admins; and two that expired in a wait queue with
    // different per-message TTLs, which only their headers (`x-death`) tell.
    dead_letter(&vhost, &channel, "work.dlq", false, messages(&["a", "b"])).await;
    let mut wait = FieldTable::default();
    wait.insert("x-dead-letter-exchange".into(), AMQPValue::LongString("dlx".into()));
    let durable = lapin::options::QueueDeclareOptions { durable: true, ..Default::default() };
    channel.queue_declare("work.wait".into(), durable, wait).await.unwrap();
    for ttl in ["100", "300"] {
        let properties = BasicProperties::default().with_expiration(ttl.into());
        let confirm = channel
            .basic_publish("".into(), "work.wait".into(), BasicPublishOptions::default(), b"retry", properties)
            .await
            .unwrap();
        assert!(confirm.await.unwrap().is_ack());
    }
    let warren = Warren::start(&format!(
        "[[brokers]]\nname = \"local\"\n{}vhosts_include = [{:?}]\npoll_interval_secs = 1\n\n\
         [[custody]]\nqueue = \"work.dlq\"\npayloads = \"admin\"\n",
        broker().toml(),
        vhost.name
    ))
    .await;
    // Once warren serves, its migrations ran: opening the database before raced them.
    add_users(&warren, &[("vera", Role::Viewer)]).await;
    let vera = login(&warren, "vera").await;
    // The viewer reads the advice once the rules ran over the vhost.
    let evaluated = wait_for("the advisor to have evaluated the vhost", WAIT, || async {
        let (status, body) = get_as(&vera, "/api/v1/brokers/local/advice").await;
        let advice: Value = serde_json::from_str(&body).unwrap_or_default();
        let clients = advice["inputs"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|i| i["input"] == "clients" && i["age_secs"].is_number());
        if status == 200 && clients {
            Ok(advice)
        } else {
            Err(format!("{status} {body}"))
        }
    })
    .await;
    let dlq_api = format!("/api/v1/queues/local/{}/work.dlq", encode(&vhost.name));
    wait_for("the four dead letters in custody", WAIT, || async {
        let (_, body) = get_as(&vera, &dlq_api).await;
        let queue: Value = serde_json::from_str(&body).unwrap_or_default();
        if queue["custody_held"] == 4 {
            Ok(())
        } else {
            Err(body)
        }
    })
    .await;
    // The TTLs are headers the custody rule keeps for admins: the advisor does not read them, so
    // neither a finding nor a count of /metrics answers a question about them.
    let (_, body) = get_as(&vera, "/api/v1/brokers/local/advice").await;
    let advice: Value = serde_json::from_str(&body).unwrap();
    assert!(finding(&advice, "retry-queue-mixed-ttls", "work.wait").is_none(), "{advice}");
    let (_, metrics) = get_as(&vera, "/metrics").await;
    assert!(
        metrics.contains(
            "warren_advisor_findings{broker=\"local\",rule=\"retry-queue-mixed-ttls\",severity=\"warning\"} 0"
        ),
        "{metrics}"
    );
    let (status, page) = get_as(&vera, "/brokers/local/advisor").await;
    assert_eq!(status, 200, "a viewer reads the advisor page");
    assert!(page.contains("class=\"counts\"") || page.contains("findings"), "{page}");
    let q = format!("/queues/local/{}/work", encode(&vhost.name));
    let (status, queue_page) = get_as(&vera, &q).await;
    assert_eq!(status, 200);
    assert!(queue_page.contains("Numbers to watch") && queue_page.contains("<h2>Advisor</h2>"), "{queue_page}");
    let (status, queue_json) = get_as(&vera, &format!("/api/v1{q}")).await;
    assert_eq!(status, 200);
    let queue_json: Value = serde_json::from_str(&queue_json).unwrap();
    assert!(queue_json["numbers"]["wait_secs"]["derived"].is_string(), "{queue_json}");
    // Nothing of the payloads or headers the custody rule keeps for admins, on any of them.
    let dlq = format!("/queues/local/{}/work.dlq", encode(&vhost.name));
    let (_, dlq_page) = get_as(&vera, &dlq).await;
    let (_, dlq_json) = get_as(&vera, &format!("/api/v1{dlq}")).await;
    for text in [&evaluated.to_string(), &advice.to_string(), &page, &queue_page, &dlq_page, &dlq_json] {
        for secret in ["4111-", "pw=hunter"] {
            assert!(!text.contains(secret), "a viewer reads {secret}: {text}");
        }
    }
    warren.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_message_ttls_of_a_retry_queue_are_read_from_custody_records() {
    let vhost = TestVhost::create("advisor-custody-ttls").await;
    let connection = vhost.connect().await;
    let channel = vhost.channel(&connection).await;
    let durable = lapin::options::QueueDeclareOptions { durable: true, ..Default::default() };
    channel.queue_declare("work.dlq".into(), durable, FieldTable::default()).await.unwrap();
    // A wait queue with per-message TTLs whose expired messages go to the DLQ, which warren
    // takes into custody (payloads for every role): the wait queue is empty after, and the
    // TTLs live on only in the `x-death` headers of the records.
    let mut wait = FieldTable::default();
    wait.insert("x-dead-letter-exchange".into(), AMQPValue::LongString("".into()));
    wait.insert("x-dead-letter-routing-key".into(), AMQPValue::LongString("work.dlq".into()));
    channel.queue_declare("work.wait".into(), durable, wait).await.unwrap();
    let warren = Warren::start(&format!(
        "[[brokers]]\nname = \"local\"\n{}vhosts_include = [{:?}]\npoll_interval_secs = 1\n\n\
         [[custody]]\nqueue = \"work.dlq\"\n",
        broker().toml(),
        vhost.name
    ))
    .await;
    for (i, ttl) in ["100", "300", "100", "300", "300"].into_iter().enumerate() {
        let properties = BasicProperties::default().with_message_id(format!("m{i}").into()).with_expiration(ttl.into());
        let confirm = channel
            .basic_publish("".into(), "work.wait".into(), BasicPublishOptions::default(), b"retry", properties)
            .await
            .unwrap();
        assert!(confirm.await.unwrap().is_ack());
    }
    let found = fires_with(&warren, "retry-queue-mixed-ttls", "work.wait", |f| {
        f["evidence"][0]["value"] == "100 ms, 300 ms" && f["evidence"][1]["value"] == "100 ms ×2, 300 ms ×3"
    })
    .await;
    assert_eq!(found["evidence"][0]["source"], "5 records in warren's custody", "{found}");
    assert!(found["inputs"].as_array().unwrap().iter().any(|i| i["input"] == "custody"), "{found}");
    warren.stop().await;
}
