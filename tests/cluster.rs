//! Tests against the three-node RabbitMQ 4.0.5 cluster of `.ci/cluster.sh`
//! (tests/common/cluster.rs). They run whatever `WARREN_TEST_BROKER` says, once per CI
//! (`.ci/test` leaves this file out of the 4.0 pass), one at a time (the cluster guard), and
//! every test leaves the cluster whole (the guard restores it when dropped).

mod common;

use std::time::Duration;

use common::cluster::Cluster;
use common::wait_for;
use serde_json::Value;

/// (name, running) of every node, as node `asked` reports them; Err when it does not answer.
async fn running_as_seen_by(cluster: &Cluster, asked: usize) -> Result<Vec<(String, bool)>, String> {
    let nodes = cluster
        .management_get(asked, "/api/nodes?columns=name,running")
        .await
        .ok_or_else(|| format!("node {asked}'s management API does not answer"))?;
    Ok(nodes
        .as_array()
        .ok_or_else(|| format!("node {asked}: /api/nodes is not a list: {nodes}"))?
        .iter()
        .map(|n| (n["name"].as_str().unwrap_or("?").to_string(), n["running"] == true))
        .collect())
}

async fn assert_whole(cluster: &Cluster) {
    for asked in 1..=3 {
        let seen = running_as_seen_by(cluster, asked).await.expect("a whole cluster answers on every node");
        let names: Vec<&str> = cluster.nodes().iter().map(|n| n.name.as_str()).collect();
        for name in &names {
            assert!(seen.iter().any(|(n, running)| n == name && *running), "node {asked} sees {name} running: {seen:?}");
        }
        assert_eq!(seen.len(), 3, "node {asked} sees three nodes: {seen:?}");
    }
}

#[tokio::test]
async fn the_harness_stops_a_node_its_peers_see_it_down_and_it_rejoins() {
    let cluster = Cluster::get().await;
    assert_whole(&cluster).await;

    cluster.stop_node(3).await;
    assert!(cluster.management_get(3, "/api/overview").await.is_none(), "a stopped node's management API is gone");
    let node3 = cluster.node(3).name.clone();
    wait_for("node 1 to report node 3 down", Duration::from_secs(30), || async {
        let seen = running_as_seen_by(&cluster, 1).await?;
        if seen.iter().any(|(n, running)| *n == node3 && !running) {
            Ok(())
        } else {
            Err(format!("{seen:?}"))
        }
    })
    .await;

    cluster.start_node(3).await;
    assert_whole(&cluster).await;
    let status: Value = serde_json::from_str(&cluster.ctl(3, &["cluster_status", "--formatter", "json"]).await)
        .expect("cluster_status --formatter json is JSON");
    assert_eq!(status["running_nodes"].as_array().map(Vec::len), Some(3), "node 3 is clustered again: {status}");

    // The guard restores what a test leaves broken (a node stopped, a limit changed), also
    // when the test panics: the next guard finds the cluster whole.
    cluster.stop_node(2).await;
    cluster.ctl(1, &["set_vm_memory_high_watermark", "0.0001"]).await;
    drop(cluster);
    let cluster = Cluster::get().await;
    assert_whole(&cluster).await;
    wait_for("the memory alarm to clear after the restore", Duration::from_secs(30), || async {
        let nodes = cluster.management_get(2, "/api/nodes?columns=name,mem_alarm").await.ok_or_else(|| "node 2 does not answer".to_string())?;
        let clear = nodes.as_array().is_some_and(|n| n.iter().all(|n| n["mem_alarm"] == false));
        if clear {
            Ok(())
        } else {
            Err(nodes.to_string())
        }
    })
    .await;
}
