//! Light on the broker (issue 8), against the real broker: depth from the Prometheus plugin,
//! the management API as fallback, rates from the slower stats listing, and the broker page.

mod common;

use std::time::Duration;

use common::{broker, declare, publish, wait_for, TestVhost, Warren};
use lapin::BasicProperties;
use serde_json::Value;

fn config(vhost: &str, extra: &str) -> String {
    format!("[[brokers]]\nname = \"local\"\nvhosts_include = [{vhost:?}]\npoll_interval_secs = 1\n{extra}")
}

async fn load(warren: &Warren) -> Value {
    let (status, body) = warren.get_json("/api/v1/brokers/local").await;
    assert_eq!(status, 200, "{body}");
    body
}

/// Listing pages fetched so far (one page per listing of a small vhost).
fn listings(load: &Value) -> u64 {
    load["totals"]
        .as_object()
        .unwrap()
        .iter()
        .filter(|(k, _)| k.starts_with("management /api/queues/"))
        .map(|(_, t)| t["calls"].as_u64().unwrap())
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn depth_comes_from_the_prometheus_plugin() {
    let vhost = TestVhost::create("light-prom").await;
    let connection = vhost.connect().await;
    let channel = vhost.channel(&connection).await;
    declare(&channel, "orders", false).await;
    let stamped = BasicProperties::default().with_timestamp(chrono::Utc::now().timestamp() as u64 - 30);
    publish(&channel, "orders", 7, stamped.clone()).await;
    let facts = broker().facts().await;
    // The management API shows a new queue's head timestamp with its next stats emission (up to
    // 5 s); warren reads it from the listing, so start once it is there. With the metrics
    // collector off the listing has none and it comes from the plugin's `queue_metrics`.
    if facts.stats {
        wait_for_head_timestamp(&vhost.name).await;
    }
    // Listings only at start (and when a queue appears): every later depth change is the scrape's.
    let warren =
        Warren::start(&config(&vhost.name, "stats_min_interval_secs = 600\nstats_max_interval_secs = 600\n")).await;
    wait_for("the Prometheus source in use with the depth", Duration::from_secs(30), || async {
        let l = load(&warren).await;
        let q = warren.queue(&vhost.name, "orders").await;
        let ready = q.as_ref().map(|q| q["ready"].clone());
        // exact: a listing with the queue's stats (and its head timestamp) is in place.
        let exact = q.as_ref().is_some_and(|q| q["oldest_age_source"] == "exact");
        match (&l["prometheus"]["available"], l["sources"][0]["source"].as_str()) {
            (Value::Bool(true), Some(s)) if s.starts_with("prometheus") && ready == Some(7.into()) && exact => Ok(()),
            _ => Err(format!(
                "prometheus={} sources[0]={} queue={q:?} totals={}",
                l["prometheus"], l["sources"][0], l["totals"]
            )),
        }
    })
    .await;
    let before = load(&warren).await;
    let listed = listings(&before);

    publish(&channel, "orders", 5, stamped).await;
    let q = wait_for("depth 12 from the scrape", Duration::from_secs(30), || async {
        match warren.queue(&vhost.name, "orders").await {
            Some(q) if q["ready"] == 12 => Ok(q),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    // A listing that stands in for a failed scrape is the fallback, not the depth's need (a
    // scrape failed now and then under the whole suite's load on 4.0.5).
    let after = load(&warren).await;
    let fallbacks = |l: &Value| l["listing_reasons"]["the scrape failed"].as_u64().unwrap_or(0);
    assert_eq!(
        listings(&after) - fallbacks(&after),
        listed - fallbacks(&before),
        "no listing was needed for the new depth: {} before, {} after",
        before["listing_reasons"],
        after["listing_reasons"]
    );
    // The head timestamp keeps its meaning: exact age from the broker's timestamp.
    assert_eq!(q["oldest_age_source"], "exact");
    assert!(q["oldest_age_secs"].as_f64().unwrap() >= 29.0, "{q}");
    assert_eq!(q["consumers"], 0);

    // A queue that appears is listed (for its type and arguments) as soon as the scrape shows it.
    declare(&channel, "audit", true).await;
    wait_for("the new quorum queue listed", Duration::from_secs(30), || async {
        match warren.queue(&vhost.name, "audit").await {
            Some(q) if q["type"] == "quorum" && q["ready"] == 0 => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    if facts.major >= 4 {
        // 4.x gives every quorum queue a delivery limit of 20, which a light listing (and a
        // listing with the metrics collector off) does not say: warren must know it.
        let q = warren.queue(&vhost.name, "audit").await.unwrap();
        assert_eq!(q["delivery_limit"], 20, "{q}");
        let l = load(&warren).await;
        assert_eq!(l["listing_role"], "metadata: type, arguments, policy", "{l}");
    }

    // The broker page and /metrics show the sources and the calls' cost.
    let (status, page) = warren.get_text("/brokers/local").await;
    assert_eq!(status, 200);
    assert!(page.contains("/metrics/detailed") && page.contains("in use"), "{page}");
    let l = load(&warren).await;
    assert!(l["depth_age_secs"].as_f64().unwrap() < 10.0, "{l}");
    assert!(l["calls"]
        .as_array()
        .unwrap()
        .iter()
        .any(|c| c["source"] == "prometheus" && c["bytes"].as_u64() > Some(0)));
    let (_, metrics) = warren.get_text("/metrics").await;
    assert!(
        metrics.contains(
            "warren_broker_calls_total{broker=\"local\",source=\"prometheus\",endpoint=\"/metrics/detailed\"}"
        ),
        "{metrics}"
    );
    assert!(metrics.contains("warren_broker_prometheus_source_up{broker=\"local\"} 1"));
    warren.stop().await;
}

async fn wait_for_head_timestamp(vhost: &str) {
    let url =
        format!("{}/api/queues/{}/orders", broker().management, warren::broker::management::encode_segment(vhost));
    wait_for("the head timestamp and the count in the management API", Duration::from_secs(30), || async {
        let q: Value = reqwest::Client::new()
            .get(&url)
            .basic_auth("guest", Some("guest"))
            .send()
            .await
            .map_err(|e| e.to_string())?
            .json()
            .await
            .map_err(|e| e.to_string())?;
        // And the counts: the management agent collects each metrics table in a process of
        // its own, so the head timestamp (`queue_metrics`) can be in while the counts
        // (`queue_coarse_metrics`) still say 0, and a listing then is one of a queue "listed
        // empty" that warren rightly lists again (CI, 2026-12-02).
        if q["head_message_timestamp"].is_number() && q["messages_ready"] == 7 {
            Ok(())
        } else {
            Err(format!("{q}"))
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn falls_back_to_the_management_api_when_prometheus_is_unreachable() {
    let vhost = TestVhost::create("light-fallback").await;
    let connection = vhost.connect().await;
    let channel = vhost.channel(&connection).await;
    declare(&channel, "orders", false).await;
    publish(&channel, "orders", 3, BasicProperties::default()).await;
    let unused_port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let warren =
        Warren::start(&config(&vhost.name, &format!("prometheus_url = \"http://127.0.0.1:{unused_port}\"\n"))).await;

    let l = wait_for("the Prometheus source marked unavailable", Duration::from_secs(30), || async {
        let l = load(&warren).await;
        if l["prometheus"]["available"] == false {
            Ok(l)
        } else {
            Err(format!("{}", l["prometheus"]))
        }
    })
    .await;
    assert!(l["prometheus"]["reason"].as_str().unwrap().contains("unreachable"), "{l}");
    assert!(l["prometheus"]["next_check_at"].is_string(), "re-checked later: {l}");

    publish(&channel, "orders", 4, BasicProperties::default()).await;
    wait_for("depth from the management listing", Duration::from_secs(30), || async {
        let l = load(&warren).await;
        let q = warren.queue(&vhost.name, "orders").await;
        let source = l["sources"][0]["source"].as_str().unwrap_or_default().to_string();
        match q {
            Some(q) if q["ready"] == 7 && source.starts_with("management") => Ok(()),
            other => Err(format!("source={source} queue={other:?}")),
        }
    })
    .await;
    warren.stop().await;
}

/// Two brokers on one host (issue 30, case 4): an endpoint that answers for another broker is
/// never read as this one's, even where that broker has a vhost and queue of the same names.
/// The other broker is the 4.3.6 node's (or, when it is the one under test, the host's 3.10.8).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prometheus_endpoint_of_another_broker_is_refused_and_its_numbers_never_shown() {
    let vhost = TestVhost::create("light-other").await;
    let connection = vhost.connect().await;
    let channel = vhost.channel(&connection).await;
    declare(&channel, "orders", false).await;
    publish(&channel, "orders", 2, BasicProperties::default()).await;
    let (other_management, other_prometheus) = if broker().prometheus.ends_with(":15695") {
        ("http://127.0.0.1:15672", "http://127.0.0.1:15692")
    } else {
        ("http://127.0.0.1:15675", "http://127.0.0.1:15695")
    };
    // The same vhost and queue on the other broker, holding 7.
    let http = reqwest::Client::new();
    let v = common::encode(&vhost.name);
    let call = |method: reqwest::Method, path: String, body: Value| {
        let request = http.request(method, format!("{other_management}{path}")).basic_auth("guest", Some("guest"));
        async move {
            let response = request.json(&body).send().await.unwrap_or_else(|e| panic!("the other broker: {e}"));
            assert!(response.status().is_success(), "{path}: {}", response.status());
        }
    };
    call(reqwest::Method::PUT, format!("/api/vhosts/{v}"), serde_json::json!({})).await;
    call(
        reqwest::Method::PUT,
        format!("/api/permissions/{v}/guest"),
        serde_json::json!({"configure": ".*", "write": ".*", "read": ".*"}),
    )
    .await;
    call(reqwest::Method::PUT, format!("/api/queues/{v}/orders"), serde_json::json!({"durable": false})).await;
    for _ in 0..7 {
        let message = serde_json::json!({"properties": {}, "routing_key": "orders", "payload": "x", "payload_encoding": "string"});
        call(reqwest::Method::POST, format!("/api/exchanges/{v}/amq.default/publish"), message).await;
    }

    let warren = Warren::start(&config(&vhost.name, &format!("prometheus_url = \"{other_prometheus}/\"\n"))).await;
    let l = wait_for("the other broker's endpoint refused", Duration::from_secs(30), || async {
        let l = load(&warren).await;
        if l["prometheus"]["available"] == false {
            Ok(l)
        } else {
            Err(format!("{}", l["prometheus"]))
        }
    })
    .await;
    let reason = l["prometheus"]["reason"].as_str().unwrap();
    assert!(reason.contains("belongs to another broker") && reason.contains("prometheus_url"), "{reason}");
    let (_, page) = warren.get_text("/brokers/local").await;
    assert!(page.contains("belongs to another broker"), "the broker page says why: {page}");
    // Polls go on from the management API: 2 once its stats are in, never the other broker's 7.
    wait_for("the depth from the management API", Duration::from_secs(30), || async {
        match warren.queue(&vhost.name, "orders").await {
            Some(q) if q["ready"] == 2 => Ok(()),
            // The management API shows a new queue's depth with its next stats emission.
            Some(q) if q["ready"] != 7 => Err(q.to_string()),
            other => panic!("another broker's number shown: {other:?}"),
        }
    })
    .await;
    // With the metrics collector off the depth comes from listings with totals, which do not
    // run every poll: between them it is unknown (null), never 7.
    let stats = broker().facts().await.stats;
    for _ in 0..5 {
        let q = warren.queue(&vhost.name, "orders").await;
        let ready = q.as_ref().map(|q| q["ready"].clone()).unwrap_or_default();
        assert!(ready == 2 || (!stats && ready.is_null()), "{q:?}");
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let l = load(&warren).await;
    assert!(l["sources"][0]["source"].as_str().unwrap_or_default().starts_with("management"), "{l}");
    warren.stop().await;
    let response = http
        .delete(format!("{other_management}/api/vhosts/{v}"))
        .basic_auth("guest", Some("guest"))
        .send()
        .await
        .unwrap();
    assert!(response.status().is_success());
}

/// Publishes one message every `every` until aborted, on a fixed schedule (a late tick catches
/// up), so that the long-run rate is exact.
fn steady_publisher(channel: &lapin::Channel, queue: &'static str, every: Duration) -> tokio::task::JoinHandle<()> {
    let channel = channel.clone();
    tokio::spawn(async move {
        let mut ticks = tokio::time::interval(every);
        loop {
            ticks.tick().await;
            publish(&channel, queue, 1, BasicProperties::default()).await;
        }
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rates_come_from_the_plugins_counters_on_4x_and_from_the_slower_stats_listing_before() {
    let vhost = TestVhost::create("light-rates").await;
    let connection = vhost.connect().await;
    let channel = vhost.channel(&connection).await;
    declare(&channel, "orders", false).await;
    let facts = broker().facts().await;
    // Stats listings every 4 s (rounded to 5), depth every second.
    let warren = Warren::start(&config(&vhost.name, "stats_min_interval_secs = 4\n")).await;
    wait_for("the Prometheus source in use", Duration::from_secs(30), || async {
        let l = load(&warren).await;
        if l["prometheus"]["available"] == true {
            Ok(())
        } else {
            Err(format!("{}", l["prometheus"]))
        }
    })
    .await;

    let publisher = steady_publisher(&channel, "orders", Duration::from_millis(50));
    wait_for("a publish rate from counter deltas", Duration::from_secs(60), || async {
        match warren.queue(&vhost.name, "orders").await {
            Some(q) if q["publish_rate"].as_f64().is_some_and(|r| r > 0.0) => Ok(q),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    let l = load(&warren).await;
    if facts.major >= 4 {
        // The listing is for metadata only: its own slow cadence, whatever the stats interval.
        assert!((l["stats_interval_secs"].as_f64().unwrap() - 300.0).abs() < 0.01, "{l}");
        assert!(l["stats_reason"].as_str().unwrap().contains("metadata only"), "{l}");
    } else {
        // 4 s is rounded up to whole 5 s stats steps, so that two readings are whole steps apart.
        assert!((l["stats_interval_secs"].as_f64().unwrap() - 5.0).abs() < 0.01, "{l}");
    }
    // Every poll for 12 s, so listing polls are among them: every 5 s before 4.x; on 4.x the
    // queue declared here brings one forward.
    let started = std::time::Instant::now();
    let mut plans = std::collections::BTreeSet::new();
    let mut declared = false;
    while started.elapsed() < Duration::from_secs(12) {
        if facts.major >= 4 && !declared && started.elapsed() > Duration::from_secs(3) {
            declare(&channel, "orders.new", false).await;
            declared = true;
        }
        let l = load(&warren).await;
        let q = warren.queue(&vhost.name, "orders").await.unwrap();
        let rates = l["sources"][3]["source"].as_str().unwrap().to_string();
        let rates_age = l["rates_age_secs"].as_f64().unwrap();
        plans.insert(l["last_plan"].as_str().unwrap().to_string());
        if facts.major >= 4 {
            // The plugin serves per-queue counters on 4.x: rates from it on every poll, the
            // listing polls included, and the listing is only for metadata.
            assert!(rates.starts_with("prometheus counters") && rates.contains("every poll"), "{l}");
            assert!(rates_age < 5.0, "{l}");
            assert_eq!(l["listing_role"], "metadata: type, arguments, policy", "{l}");
        } else {
            assert!(rates.contains("every 5 s"), "{l}");
            // Between listings the rate stays (it is the last one measured) and says how old it is.
            assert!(rates_age < 10.0, "{l}");
        }
        assert!(q["publish_rate"].as_f64().unwrap() < 100.0, "about 20 msg/s, never a spike: {q}");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    assert!(plans.iter().any(|p| p.contains("listing")), "a listing poll was seen: {plans:?}");
    publisher.abort();
    warren.stop().await;
}

/// Issue 15 (3): counters from two sources in one rate window made a steady publisher's rate
/// swing at each listing poll (1.2/s, then 2.7/s, for 2.0/s). Every poll's rate must be the
/// publisher's, whichever calls the poll made.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_steady_publishers_rate_is_steady_across_listing_polls() {
    let vhost = TestVhost::create("light-steady").await;
    let connection = vhost.connect().await;
    let channel = vhost.channel(&connection).await;
    declare(&channel, "orders", false).await;
    let warren = Warren::start(&config(&vhost.name, "stats_min_interval_secs = 15\n")).await;
    let publisher = steady_publisher(&channel, "orders", Duration::from_millis(500));
    wait_for("a publish rate", Duration::from_secs(60), || async {
        match warren.queue(&vhost.name, "orders").await {
            Some(q) if q["publish_rate"].as_f64().is_some_and(|r| r > 0.0) => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    // Two listings' worth of polls. On 4.x the listing is for metadata, every 300 s: the
    // queues declared here bring listings forward.
    let four = broker().facts().await.major >= 4;
    let started = std::time::Instant::now();
    let mut seen = Vec::new();
    let mut declared = 0;
    while started.elapsed() < Duration::from_secs(35) {
        if four && started.elapsed() > Duration::from_secs(5 + 12 * declared) {
            declare(&channel, &format!("orders.{declared}"), false).await;
            declared += 1;
        }
        let q = warren.queue(&vhost.name, "orders").await.unwrap();
        let l = load(&warren).await;
        let rate = q["publish_rate"].as_f64();
        seen.push((rate, l["last_plan"].as_str().unwrap_or_default().to_string()));
        tokio::time::sleep(Duration::from_millis(900)).await;
    }
    assert!(seen.iter().any(|(_, plan)| plan.contains("listing")), "{seen:?}");
    for (rate, plan) in &seen {
        assert!(
            rate.is_some_and(|r| (1.5..=2.5).contains(&r)),
            "2.0/s published; {rate:?} after {plan:?}; all: {seen:?}"
        );
    }
    publisher.abort();
    warren.stop().await;
}

/// Issue 15 (6): on 4.x consumers cost the broker more than depth (`queue_consumer_count`
/// reads the plugin's largest table), so when a scrape with them does not fit its share of the
/// budget they are asked less often than depth, at least every `stats_max_interval_secs`, and
/// in between each queue keeps its last known count, never unknown. Depth and counters stay
/// every poll. Before 4.0 consumers come every poll.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consumers_have_their_own_cadence_on_4x_and_depth_stays_every_poll() {
    let vhost = TestVhost::create("light-consumers").await;
    let connection = vhost.connect().await;
    let channel = vhost.channel(&connection).await;
    declare(&channel, "work", false).await;
    publish(&channel, "work", 3, BasicProperties::default()).await;
    let facts = broker().facts().await;
    // A budget so small that no scrape with consumers fits its share: they are then asked every
    // `stats_max_interval_secs` (6 s), depth every second.
    let extra = "broker_cpu_budget = 0.00001\nstats_min_interval_secs = 1\nstats_max_interval_secs = 6\n";
    let warren = Warren::start(&config(&vhost.name, extra)).await;
    wait_for("the queue from the scrape, no consumers", Duration::from_secs(30), || async {
        let l = load(&warren).await;
        match warren.queue(&vhost.name, "work").await {
            Some(q) if l["prometheus"]["available"] == true && q["ready"] == 3 && q["consumers"] == 0 => Ok(()),
            other => Err(format!("{other:?} {}", l["prometheus"])),
        }
    })
    .await;

    // Depth follows every poll while consumers wait for their scrape.
    let started = std::time::Instant::now();
    let mut plans = std::collections::BTreeSet::new();
    let mut published = false;
    let mut depth_seen_at = None;
    while started.elapsed() < Duration::from_secs(10) {
        let l = load(&warren).await;
        plans.insert(l["last_plan"].as_str().unwrap().to_string());
        if !published {
            publish(&channel, "work", 2, BasicProperties::default()).await;
            published = true;
        }
        let q = warren.queue(&vhost.name, "work").await.unwrap();
        assert_eq!(q["consumers"], 0, "the last known count between consumer scrapes: {q}");
        if q["ready"] == 5 && depth_seen_at.is_none() {
            depth_seen_at = Some(started.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    // The plugin's own numbers trail by up to a 5 s stats step; every poll asked for depth.
    let depth_after = depth_seen_at.expect("the new depth was seen");
    assert!(depth_after < Duration::from_secs(8), "depth within a stats step and a poll: {depth_after:?}");
    assert!(plans.iter().all(|p| p.contains("(depth")), "depth every poll: {plans:?}");
    let with_consumers = plans.iter().filter(|p| p.contains("consumers")).count();
    if facts.major >= 4 {
        assert!(with_consumers > 0 && with_consumers < plans.len(), "polls with and without consumers: {plans:?}");
        assert!(plans.iter().all(|p| p.contains("per-queue counters")), "counters every poll: {plans:?}");
        let l = load(&warren).await;
        let consumers = l["sources"].as_array().unwrap().iter().find(|s| s["metric"] == "consumers").unwrap().clone();
        assert!(consumers["source"].as_str().unwrap().contains("every 6 s"), "{consumers}");
    } else {
        assert_eq!(with_consumers, plans.len(), "consumers every poll before 4.0: {plans:?}");
    }

    // A consumer that attaches is seen within the consumers' interval.
    let reader = vhost.channel(&connection).await;
    reader.basic_qos(1, lapin::options::BasicQosOptions::default()).await.unwrap();
    let _consumer = reader
        .basic_consume(
            "work".into(),
            "holder".into(),
            lapin::options::BasicConsumeOptions::default(),
            lapin::types::FieldTable::default(),
        )
        .await
        .unwrap();
    let attached = std::time::Instant::now();
    wait_for("the consumer seen", Duration::from_secs(20), || async {
        match warren.queue(&vhost.name, "work").await {
            Some(q) if q["consumers"] == 1 => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    // Within the 6 s interval, a stats step and a poll (the default interval would be 60 s).
    assert!(attached.elapsed() < Duration::from_secs(15), "{:?}", attached.elapsed());
    warren.stop().await;
}
