//! Topology against the real broker (issue 20, must-have 3): what routes into a queue (a topic
//! exchange with an exchange-to-exchange binding above it, and the dead-letter path out), the
//! exchanges page and API with publish rates (unknown without the metrics collector), and the
//! broker's unroutable rate with an `unroutable_rate` rule on it.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::{broker, encode, wait_for, TestVhost, Warren};
use lapin::options::{
    BasicPublishOptions, ExchangeBindOptions, ExchangeDeclareOptions, QueueBindOptions, QueueDeclareOptions,
};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{BasicProperties, Channel, ExchangeKind};
use serde_json::{json, Value};

async fn exchange(channel: &Channel, name: &str, kind: ExchangeKind) {
    let durable = ExchangeDeclareOptions { durable: true, ..Default::default() };
    channel.exchange_declare(name.into(), kind, durable, FieldTable::default()).await.unwrap();
}

async fn queue(channel: &Channel, name: &str, dlx: Option<&str>) {
    let mut args = FieldTable::default();
    if let Some(dlx) = dlx {
        args.insert("x-dead-letter-exchange".into(), AMQPValue::LongString(dlx.into()));
    }
    channel
        .queue_declare(name.into(), QueueDeclareOptions { durable: true, ..Default::default() }, args)
        .await
        .unwrap();
}

async fn bind(channel: &Channel, queue: &str, exchange: &str, key: &str) {
    channel
        .queue_bind(queue.into(), exchange.into(), key.into(), QueueBindOptions::default(), FieldTable::default())
        .await
        .unwrap();
}

/// Publishes to `exchange` with `key` every 50 ms until the returned flag is set; `mandatory`
/// asks the broker to return what it cannot route.
fn keep_publishing(channel: Channel, exchange: &'static str, key: &'static str, mandatory: bool) -> Arc<AtomicBool> {
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    tokio::spawn(async move {
        while !flag.load(Ordering::Relaxed) {
            let confirm = channel
                .basic_publish(
                    exchange.into(),
                    key.into(),
                    BasicPublishOptions { mandatory, ..Default::default() },
                    b"x",
                    BasicProperties::default(),
                )
                .await
                .expect("publish");
            // Confirmed: the broker took it (routed or not) before the next one.
            confirm.await.expect("confirm");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
    stop
}

/// The exchanges API once its listing was read at least `reads_apart` seconds after `first`
/// (so that a rate could be known), or the first listing at all.
async fn exchanges_after(warren: &Warren, first: Option<i64>, reads_apart: i64) -> Value {
    wait_for("the exchange listing to be read (again)", Duration::from_secs(60), || async {
        let (status, body) = warren.get_json("/api/v1/brokers/local/exchanges").await;
        match (status, body["as_of"].as_i64(), first) {
            (200, Some(at), Some(first)) if at - first >= reads_apart => Ok(body),
            (200, Some(_), None) => Ok(body),
            _ => Err(format!("{status} {body}")),
        }
    })
    .await
}

fn find<'a>(exchanges: &'a Value, name: &str) -> &'a Value {
    exchanges["exchanges"].as_array().unwrap().iter().find(|x| x["name"] == name).unwrap_or(&Value::Null)
}

/// The page's Routing section.
fn routing_section(page: &str) -> &str {
    let start = page.find(r#"<section class="routing">"#).expect("the queue page has a Routing section");
    let end = page[start..].find("</section>").expect("the section ends") + start;
    &page[start..end]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn routing_shows_the_exchange_path_in_and_the_dead_letter_path_out() {
    let vhost = TestVhost::create("routing").await;
    let connection = vhost.connect().await;
    let channel = vhost.channel(&connection).await;
    exchange(&channel, "ingress", ExchangeKind::Direct).await;
    exchange(&channel, "events", ExchangeKind::Topic).await;
    exchange(&channel, "orders.dlx", ExchangeKind::Fanout).await;
    channel
        .exchange_bind(
            "events".into(),
            "ingress".into(),
            "order.created".into(),
            ExchangeBindOptions::default(),
            FieldTable::default(),
        )
        .await
        .unwrap();
    queue(&channel, "orders", Some("orders.dlx")).await;
    bind(&channel, "orders", "events", "order.#").await;
    queue(&channel, "orders.dlq", None).await;
    bind(&channel, "orders.dlq", "orders.dlx", "").await;
    let warren = Warren::for_vhost(&vhost.name, 1).await;

    let path = format!("/api/v1/queues/local/{}/orders/routing", encode(&vhost.name));
    let routing = wait_for("the routing of orders with its bindings read", Duration::from_secs(30), || async {
        let (status, body) = warren.get_json(&path).await;
        if status == 200 && body["bindings"].is_array() && body["dead_letters"]["queues"].is_array() {
            Ok(body)
        } else {
            Err(format!("{status} {body}"))
        }
    })
    .await;
    assert_eq!(routing["default_exchange"], json!({"exchange": "", "routing_key": "orders"}), "{routing}");
    let bindings = routing["bindings"].as_array().unwrap();
    assert_eq!(bindings.len(), 1, "one binding into orders: {routing}");
    let events = &bindings[0];
    assert_eq!(
        (&events["exchange"], &events["kind"], &events["routing_key"]),
        (&json!("events"), &json!("topic"), &json!("order.#"))
    );
    assert_eq!(
        events["upstream"],
        json!([{"exchange": "ingress", "kind": "direct", "routing_key": "order.created", "arguments": null, "upstream": []}]),
        "the exchange-to-exchange binding above events: {routing}"
    );
    assert_eq!(routing["dead_letters"]["exchange"], "orders.dlx");
    assert_eq!(routing["dead_letters"]["queues"], json!(["orders.dlq"]));
    assert!(routing["dead_letter_warning"].is_null(), "{routing}");
    assert!(routing["topology_as_of"].is_i64(), "{routing}");

    // The DLQ itself has no dead-letter exchange: the warning says what happens to its rejects.
    let (_, dlq) = warren.get_json(&format!("/api/v1/queues/local/{}/orders.dlq/routing", encode(&vhost.name))).await;
    assert!(
        dlq["dead_letters"].is_null() && dlq["dead_letter_warning"].as_str().unwrap().contains("destroyed"),
        "{dlq}"
    );
    assert_eq!(dlq["bindings"][0]["exchange"], "orders.dlx", "{dlq}");

    let (status, page) = warren.get_text(&format!("/queues/local/{}/orders", encode(&vhost.name))).await;
    assert_eq!(status, 200);
    let section = routing_section(&page);
    for expected in [
        "<code>events</code> (topic): key order.#",
        "<code>ingress</code> (direct)",
        "order.created",
        "orders.dlx",
        ">orders.dlq</a>",
        "routing key <code>orders</code>",
    ] {
        assert!(section.contains(expected), "Routing section lacks {expected:?}: {section}");
    }
    let (status, _) = warren.get_json(&format!("/api/v1/queues/local/{}/nope/routing", encode(&vhost.name))).await;
    assert_eq!(status, 404);
    warren.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exchanges_list_publish_rates_where_the_broker_counts_them() {
    let facts = broker().facts().await;
    let vhost = TestVhost::create("exchanges").await;
    let connection = vhost.connect().await;
    let channel = vhost.channel(&connection).await;
    exchange(&channel, "events", ExchangeKind::Topic).await;
    queue(&channel, "work", None).await;
    bind(&channel, "work", "events", "#").await;
    let warren = Warren::for_vhost(&vhost.name, 1).await;
    let publishing = keep_publishing(vhost.channel(&connection).await, "events", "order.created", false);

    let first = exchanges_after(&warren, None, 0).await;
    let first_at = first["as_of"].as_i64().unwrap();
    let listing = if facts.stats {
        wait_for("a publish-in rate on events", Duration::from_secs(60), || async {
            let (_, body) = warren.get_json("/api/v1/brokers/local/exchanges").await;
            match find(&body, "events")["publish_in_rate"].as_f64() {
                Some(rate) if rate > 0.0 => Ok(body),
                _ => Err(find(&body, "events").to_string()),
            }
        })
        .await
    } else {
        // Two reads more than a rate window apart: a rate would be known by now if the broker
        // gave the counters.
        let later = exchanges_after(&warren, Some(first_at), 11).await;
        let events = find(&later, "events");
        assert!(events["publish_in_rate"].is_null() && events["publish_in"].is_null(), "unknown, not 0: {events}");
        assert_eq!(later["stats_enabled"], false);
        later
    };
    publishing.store(true, Ordering::Relaxed);
    let events = find(&listing, "events");
    assert_eq!(
        (&events["type"], &events["durable"], &events["internal"]),
        (&json!("topic"), &json!(true), &json!(false))
    );
    assert_eq!(events["vhost"], vhost.name);
    assert!(events["alternate_exchange"].is_null());
    assert!(listing["exchanges"].as_array().unwrap().iter().any(|x| x["name"] == ""), "the default exchange is listed");
    assert!(listing["rates"].as_str().unwrap().contains("counter deltas"));
    assert!(listing["unroutable"]["per_exchange"].is_null());
    wait_for("events' bindings out counted", Duration::from_secs(30), || async {
        let (_, body) = warren.get_json("/api/v1/brokers/local/exchanges").await;
        (find(&body, "events")["bindings_out"] == 1).then_some(()).ok_or_else(|| find(&body, "events").to_string())
    })
    .await;

    let (status, page) = warren.get_text("/brokers/local/exchanges").await;
    assert_eq!(status, 200);
    let row_start = page.find(r#"<tr data-exchange="events">"#).expect("events has a row");
    let row = &page[row_start..row_start + page[row_start..].find("</tr>").unwrap()];
    let cell = {
        let start = row.find(r#"class="num publish-in">"#).unwrap() + r#"class="num publish-in">"#.len();
        &row[start..start + row[start..].find("</td>").unwrap()]
    };
    if facts.stats {
        assert!(cell.ends_with("/s") && cell != "0/s", "a publish-in rate: {row}");
    } else {
        assert_eq!(cell, "—", "unknown without stats: {row}");
        assert!(page.contains("collects no message stats"), "the page says why");
    }
    assert!(page.contains("Exchange listing read"), "the page says how old the listing is");
    assert!(page.contains("No unroutable count per exchange"), "and that the listing has none per exchange");
    let (status, _) = warren.get_text("/exchanges").await;
    assert_eq!(status, 200, "the nav link leads to the broker's exchanges");
    warren.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unroutable_publishes_make_the_rate_known_and_fire_a_rule() {
    let facts = broker().facts().await;
    let vhost = TestVhost::create("unroutable").await;
    let connection = vhost.connect().await;
    let channel = vhost.channel(&connection).await;
    exchange(&channel, "nowhere", ExchangeKind::Direct).await;
    let warren = Warren::for_vhost(&vhost.name, 1).await;
    let (status, body) = warren
        .post_json(
            "/api/v1/alerts/rules",
            json!({"id": "unroutable", "name": "Unroutable publishes", "metric": "unroutable_rate",
                   "comparator": ">", "threshold": 0, "for_secs": 0, "severity": "warning"}),
        )
        .await;
    assert!(status == 200 || status == 201, "the rule is accepted: {status} {body}");
    // With `mandatory`, returned: 3.10.8's management API counts no dropped ones (measured;
    // the page says its rate is a lower bound there), 4.0.5 counts both.
    let publishing = keep_publishing(vhost.channel(&connection).await, "nowhere", "no.binding", true);

    let firing = || async {
        let (_, alerts) = warren.get_json("/api/v1/alerts").await;
        alerts
            .as_array()
            .and_then(|a| a.iter().find(|a| a["rule_id"] == "unroutable" && a["phase"] == "firing").cloned())
    };
    if facts.stats {
        let rate = wait_for("a non-zero unroutable rate", Duration::from_secs(60), || async {
            let (_, body) = warren.get_json("/api/v1/brokers/local/exchanges").await;
            match body["unroutable"]["rate"].as_f64() {
                Some(rate) if rate > 0.0 => Ok(rate),
                _ => Err(body["unroutable"].to_string()),
            }
        })
        .await;
        assert!(rate < 100.0, "about 20 a second are published: {rate}");
        let alert = wait_for("the unroutable_rate rule to fire", Duration::from_secs(30), || async {
            firing().await.ok_or_else(|| "not firing".to_string())
        })
        .await;
        assert_eq!(alert["key"], json!({"broker": "local", "vhost": null, "queue": null}), "{alert}");
        let (_, page) = warren.get_text("/brokers/local/exchanges").await;
        let start = page.find(r#"class="broker-unroutable">"#).unwrap() + r#"class="broker-unroutable">"#.len();
        let shown = &page[start..start + page[start..].find('<').unwrap()];
        assert!(shown.ends_with("/s") && shown != "0/s", "the page shows the rate: {shown}");
        let (_, body) = warren.get_json("/api/v1/brokers/local/exchanges").await;
        assert_eq!(body["unroutable"]["lower_bound"], facts.major == 3, "3.x counts no drops: {}", body["unroutable"]);
        assert_eq!(page.contains("lower-bound"), facts.major == 3);
    } else {
        let first = exchanges_after(&warren, None, 0).await["as_of"].as_i64().unwrap();
        let later = exchanges_after(&warren, Some(first), 11).await;
        assert!(later["unroutable"]["rate"].is_null(), "no stats, no unroutable count: {}", later["unroutable"]);
        assert!(firing().await.is_none(), "an unknown value never fires");
        let (_, page) = warren.get_text("/brokers/local/exchanges").await;
        assert!(page.contains(r#"class="broker-unroutable">—<"#), "shown as unknown");
    }
    publishing.store(true, Ordering::Relaxed);
    warren.stop().await;
}

/// Issue 34, case 6: the exchanges page listed every watched vhost's exchanges on one page
/// (5,861 px tall); it shows one vhost's when asked, links each vhost, and refreshes in place
/// with the same choice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_exchanges_page_shows_one_vhost_when_asked() {
    let (first, second) = (TestVhost::create("xvhosta").await, TestVhost::create("xvhostb").await);
    for (vhost, name) in [(&first, "first-events"), (&second, "second-events")] {
        let connection = vhost.connect().await;
        exchange(&vhost.channel(&connection).await, name, ExchangeKind::Topic).await;
        connection.close(0, "done".into()).await.ok();
    }
    let toml = format!(
        "[[brokers]]\nname = \"local\"\nvhosts_include = [{:?}, {:?}]\npoll_interval_secs = 1\n",
        first.name, second.name
    );
    let warren = Warren::start(&toml).await;
    wait_for("both vhosts' exchanges listed", Duration::from_secs(30), || async {
        let (_, body) = warren.get_json("/api/v1/brokers/local/exchanges").await;
        let named = |name: &str| find(&body, name).is_object();
        (named("first-events") && named("second-events")).then_some(()).ok_or_else(|| body.to_string())
    })
    .await;
    let (_, all) = warren.get_text("/brokers/local/exchanges").await;
    assert!(all.contains(r#"data-exchange="first-events""#) && all.contains(r#"data-exchange="second-events""#));
    let only_second = format!("/brokers/local/exchanges?vhost={}", encode(&second.name));
    assert!(all.contains(&format!("href=\"{only_second}\"")), "each vhost is linked: {all}");
    let (status, page) = warren.get_text(&only_second).await;
    assert_eq!(status, 200);
    assert!(page.contains(r#"data-exchange="second-events""#), "{page}");
    assert!(!page.contains(r#"data-exchange="first-events""#), "the other vhost's exchanges are left out: {page}");
    assert!(page.contains(&format!("hx-get=\"{only_second}\"")), "the refresh keeps the choice: {page}");
    let (_, page) = warren.get_text("/brokers/local/exchanges?vhost=no-such-vhost").await;
    assert!(page.contains("No vhost no-such-vhost among the watched ones"), "{page}");
    warren.stop().await;
}

/// Issue 34, case 6: "Bindings out" read "—" in vhost `/` and a number elsewhere: the poller
/// read the bindings of vhosts with queues only, and a fresh broker's `/` has none. A vhost of
/// exchanges alone (one bound to another) has its bindings counted too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bindings_out_are_counted_in_a_vhost_without_queues() {
    let vhost = TestVhost::create("xnoqueues").await;
    let connection = vhost.connect().await;
    let channel = vhost.channel(&connection).await;
    exchange(&channel, "upstream", ExchangeKind::Topic).await;
    exchange(&channel, "downstream", ExchangeKind::Fanout).await;
    channel
        .exchange_bind(
            "downstream".into(),
            "upstream".into(),
            "order.#".into(),
            ExchangeBindOptions::default(),
            FieldTable::default(),
        )
        .await
        .unwrap();
    let warren = Warren::for_vhost(&vhost.name, 1).await;
    let body = wait_for("bindings out counted", Duration::from_secs(30), || async {
        let (_, body) = warren.get_json("/api/v1/brokers/local/exchanges").await;
        let counted =
            ["upstream", "downstream", "amq.direct"].iter().all(|x| find(&body, x)["bindings_out"].is_number());
        counted.then(|| body.clone()).ok_or_else(|| body.to_string())
    })
    .await;
    assert_eq!(find(&body, "upstream")["bindings_out"], 1, "{body}");
    assert_eq!(find(&body, "downstream")["bindings_out"], 0, "{body}");
    assert_eq!(find(&body, "amq.direct")["bindings_out"], 0, "{body}");
    let (_, page) = warren.get_text("/brokers/local/exchanges").await;
    let row = |name: &str| {
        let start = page.find(&format!(r#"<tr data-exchange="{name}">"#)).expect("a row per exchange");
        page[start..start + page[start..].find("</tr>").unwrap()].to_string()
    };
    assert!(row("upstream").contains(r#"<td class="num">1</td>"#), "{}", row("upstream"));
    assert!(row("amq.direct").contains(r#"<td class="num">0</td>"#), "{}", row("amq.direct"));
    connection.close(0, "done".into()).await.ok();
    warren.stop().await;
}
