//! The nodes of the test broker (issue 20, must-have 1): the API, the page, the history, the
//! overview's summary and `/metrics`, on each broker version. On 4.0.5 without the metrics
//! collector the broker says only that the node runs: every number must read unknown, never 0.

mod common;

use std::time::Duration;

use common::{broker, encode, wait_for, TestVhost, Warren};
use serde_json::Value;

/// Waits until warren has read the nodes; returns the API's answer.
async fn nodes(warren: &Warren) -> Value {
    wait_for("the nodes to be read", Duration::from_secs(30), || async {
        let (status, body) = warren.get_json("/api/v1/brokers/local/nodes").await;
        if status == 200 && body["as_of"].is_i64() && !body["nodes"].as_array().is_none_or(Vec::is_empty) {
            Ok(body)
        } else {
            Err(format!("{status} {body}"))
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_nodes_api_and_page_show_the_running_node_against_its_limits() {
    let vhost = TestVhost::create("nodes").await;
    let warren = Warren::for_vhost(&vhost.name, 2).await;
    let nostats = broker().target.ends_with("-nostats");

    let body = nodes(&warren).await;
    let node = &body["nodes"][0];
    let name = node["name"].as_str().expect("a node name").to_string();
    assert_eq!(node["running"], true, "{body}");
    assert_eq!(body["problems"], serde_json::json!([]), "a healthy single node has no problems: {body}");
    for key in
        ["mem_used", "mem_limit", "disk_free", "disk_free_limit", "fd_used", "fd_total", "proc_used", "run_queue"]
    {
        if nostats {
            assert!(node[key].is_null(), "{key} is unknown without the metrics collector, not 0: {node}");
        } else {
            assert!(node[key].as_u64().is_some_and(|v| v > 0 || key == "run_queue"), "{key}: {node}");
        }
    }
    if nostats {
        assert!(node["mem_alarm"].is_null() && node["partitions"].is_null(), "{node}");
    } else {
        assert_eq!((&node["mem_alarm"], &node["disk_free_alarm"]), (&Value::Bool(false), &Value::Bool(false)));
        assert_eq!(node["partitions"], serde_json::json!([]));
        assert!(node["mem_used"].as_u64() < node["mem_limit"].as_u64(), "{node}");
    }
    // 4.x counts no sockets (0 of 0): unknown, not "0 used".
    match broker().target.as_str() {
        "3.10" => assert!(node["sockets_total"].as_u64().is_some_and(|t| t > 0), "{node}"),
        _ => assert!(node["sockets_used"].is_null() && node["sockets_total"].is_null(), "{node}"),
    }
    // A known target's name is the version it runs (`3.10`, `4.0`, `4.3-nostats`, ...).
    if broker().target != "custom" {
        let version = format!("{}.", broker().target.split('-').next().unwrap_or_default());
        assert!(node["rabbitmq_version"].as_str().is_some_and(|v| v.starts_with(&version)), "{node}");
    }
    assert!(node["erlang_version"].as_str().is_some(), "the answering node's Erlang version: {node}");

    let (status, page) = warren.get_text("/brokers/local/nodes").await;
    assert_eq!(status, 200, "{page}");
    assert!(page.contains(&name) && page.contains("running"), "{page}");
    if nostats {
        assert!(page.contains("— of — watermark"), "memory unknown on the page: {page}");
        assert!(!page.contains("0 B of"), "{page}");
    } else {
        assert!(page.contains(" watermark ("), "memory against its watermark with a share: {page}");
        assert!(page.contains("no alarm"), "{page}");
    }
    assert!(page.contains(&format!("/api/v1/brokers/local/nodes/{}/history", encode(&name))), "charts: {page}");
    let (_, overview) = warren.get_text("/").await;
    assert!(overview.contains("1 of 1 running"), "the overview's nodes section: {overview}");
    assert!(!overview.contains("cluster-problems"), "no banner without a problem");
    let (_, load) = warren.get_text("/brokers/local").await;
    assert!(load.contains("/api/nodes"), "the call's cost shows with the others: {load}");

    // History: a point per poll, with the same unknowns.
    let history = wait_for("two node samples", Duration::from_secs(30), || async {
        let (_, h) = warren.get_json(&format!("/api/v1/brokers/local/nodes/{}/history?range=15m", encode(&name))).await;
        if h["points"].as_array().is_some_and(|p| !p.is_empty()) {
            Ok(h)
        } else {
            Err(h.to_string())
        }
    })
    .await;
    let point = &history["points"][0];
    assert_eq!(point["mem_used"].is_null(), nostats, "{history}");
    assert_eq!(point["running"], true);
    let (status, _) = warren.get_json(&format!("/api/v1/brokers/local/nodes/{}/history?range=2y", encode(&name))).await;
    assert_eq!(status, 400, "a bad range is refused");
    let (status, _) = warren.get_json("/api/v1/brokers/nope/nodes").await;
    assert_eq!(status, 404);

    let (_, metrics) = warren.get_text("/metrics").await;
    let running = format!("warren_node_running{{broker=\"local\",node=\"{name}\"}} 1");
    assert!(metrics.contains(&running), "{metrics}");
    assert_eq!(metrics.contains("warren_node_mem_used_bytes{"), !nostats, "unknown is left out: {metrics}");

    // The built-in node rules watch the node and stay quiet.
    let (_, rules) = warren.get_json("/api/v1/alerts/rules").await;
    let ids: Vec<&str> = rules.as_array().unwrap().iter().filter_map(|r| r["id"].as_str()).collect();
    for id in
        ["builtin-node-down", "builtin-memory-alarm", "builtin-disk-alarm", "builtin-fd-used", "builtin-partition"]
    {
        assert!(ids.contains(&id), "{id} in {ids:?}");
    }
    let (_, alerts) = warren.get_json("/api/v1/alerts").await;
    assert!(alerts.as_array().unwrap().iter().all(|a| a["key"]["node"].is_null()), "{alerts}");
    warren.stop().await;
}
