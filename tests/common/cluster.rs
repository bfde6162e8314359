//! The three-node RabbitMQ 4.0.5 cluster `.ci/cluster.sh` runs on this machine (nodes
//! `rabbit4c1..3@localhost`, AMQP 5683-5685, management 15683-15685, Prometheus 15703-15705),
//! whatever `WARREN_TEST_BROKER` says.
//!
//! Cluster tests change the cluster (a node stopped, an alarm forced), so `Cluster::get` hands
//! out one guard at a time: an exclusive lock (a local port), which also keeps the test binaries of
//! other checkouts on this machine away. Dropping the guard restores the cluster (every node
//! running and clustered, memory and disk limits back to their defaults), also when the test
//! panicked; `get` restores it too, for a test process that was killed before its guard dropped.
//!
//! Nodes are numbered 1 to 3, as in the script.

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use serde_json::Value;

/// 4.0's defaults (`rabbitmqctl environment` on these nodes), which the guard restores.
const DEFAULT_MEMORY_WATERMARK: &str = "0.6";
const DEFAULT_DISK_FREE_LIMIT: &str = "50000000";

/// The cluster lock: held by listening here (beside the cluster's Prometheus ports).
const LOCK_ADDR: &str = "127.0.0.1:15709";
/// Cluster tests take a minute or two each; past this something holds the lock for good.
const LOCK_WAIT: Duration = Duration::from_secs(30 * 60);

/// One node of the test cluster. URLs have no trailing slash and no credentials (guest/guest).
#[derive(Debug, Clone)]
pub struct ClusterNode {
    /// The Erlang node name, e.g. `rabbit4c1@localhost` (the `name` in `GET /api/nodes`).
    pub name: String,
    /// Management HTTP API, e.g. `http://127.0.0.1:15683`.
    pub management: String,
    /// AMQP listener, e.g. `amqp://127.0.0.1:5683` (warren's `amqp_url`).
    pub amqp: String,
    /// Prometheus plugin, e.g. `http://127.0.0.1:15703`.
    pub prometheus: String,
}

impl ClusterNode {
    fn numbered(node: usize) -> ClusterNode {
        ClusterNode {
            name: format!("rabbit4c{node}@localhost"),
            management: format!("http://127.0.0.1:{}", 15682 + node),
            amqp: format!("amqp://127.0.0.1:{}", 5682 + node),
            prometheus: format!("http://127.0.0.1:{}", 15702 + node),
        }
    }

    /// The AMQP URL with the guest credentials and `vhost` (encoded), for the tests' own clients.
    pub fn amqp_with_guest(&self, vhost: &str) -> String {
        format!("{}/{}", self.amqp.replacen("://", "://guest:guest@", 1), super::encode(vhost))
    }
}

/// The running cluster, held exclusively until dropped.
pub struct Cluster {
    nodes: Vec<ClusterNode>,
    /// Nodes whose memory watermark or disk limit a test set through `ctl`: reset on drop.
    limits_changed: std::sync::Mutex<Vec<usize>>,
    /// Held for the guard's life: the lock (`LOCK_ADDR`) goes with it.
    _lock: std::net::TcpListener,
}

impl Cluster {
    /// Waits for the cluster lock, starts the cluster if it does not run (a first start forms it
    /// in ~35 s), and returns it with all three nodes running and default limits. A cluster
    /// that cannot be started is a panic that says why, never a skip.
    pub async fn get() -> Cluster {
        // A listening socket on a fixed local port is the lock: a second bind fails, in this
        // process and in any other, and the kernel frees it when the process ends however it
        // ends (a file lock, `File::lock`, needs Rust 1.89; the crate supports 1.85).
        let started = std::time::Instant::now();
        let lock = loop {
            match std::net::TcpListener::bind(LOCK_ADDR) {
                Ok(listener) => break listener,
                Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => {
                    assert!(
                        started.elapsed() < LOCK_WAIT,
                        "waited {LOCK_WAIT:?} for the cluster lock ({LOCK_ADDR} stays taken: another cluster test, or something else on that port)"
                    );
                    tokio::time::sleep(Duration::from_millis(250)).await;
                }
                Err(e) => panic!("cluster lock {LOCK_ADDR}: {e}"),
            }
        };
        blocking(|| restore(Vec::new())).await;
        Cluster { nodes: (1..=3).map(ClusterNode::numbered).collect(), limits_changed: Default::default(), _lock: lock }
    }

    /// Node `node` (1 to 3).
    pub fn node(&self, node: usize) -> &ClusterNode {
        assert!((1..=3).contains(&node), "cluster nodes are 1 to 3, not {node}");
        &self.nodes[node - 1]
    }

    /// All three nodes, node 1 first.
    pub fn nodes(&self) -> &[ClusterNode] {
        &self.nodes
    }

    /// Stops node `node` (`rabbitmqctl stop`: a clean shutdown; its peers see it leave).
    pub async fn stop_node(&self, node: usize) {
        self.node(node);
        blocking(move || script(&["stop-node", &node.to_string()])).await;
    }

    /// Starts node `node` again and waits until all three nodes report 3 running nodes.
    pub async fn start_node(&self, node: usize) {
        self.node(node);
        blocking(move || script(&["start-node", &node.to_string()])).await;
    }

    /// `rabbitmqctl ARGS` against node `node`; returns its output, panics when it fails.
    /// `set_vm_memory_high_watermark` and `set_disk_free_limit` are undone when the guard drops.
    pub async fn ctl(&self, node: usize, args: &[&str]) -> String {
        self.node(node);
        if matches!(args.first(), Some(&"set_vm_memory_high_watermark" | &"set_disk_free_limit")) {
            self.limits_changed.lock().expect("not poisoned").push(node);
        }
        let mut full = vec!["ctl".to_string(), node.to_string()];
        full.extend(args.iter().map(|a| a.to_string()));
        blocking(move || script(&full.iter().map(String::as_str).collect::<Vec<_>>())).await
    }

    /// `GET path` on node `node`'s management API, as JSON (`None` when the node does not answer).
    pub async fn management_get(&self, node: usize, path: &str) -> Option<Value> {
        let response = reqwest::Client::new()
            .get(format!("{}{path}", self.node(node).management))
            .basic_auth("guest", Some("guest"))
            .timeout(Duration::from_secs(10))
            .send()
            .await
            .ok()?;
        response.error_for_status().ok()?.json().await.ok()
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        // Drop cannot await, and the next cluster test must find the cluster whole: restore
        // synchronously, before the lock goes with `_lock`, on a thread of its own so that a
        // failure there does not abort a test that is already unwinding.
        let limits = std::mem::take(&mut *self.limits_changed.lock().unwrap_or_else(|e| e.into_inner()));
        if std::thread::spawn(move || restore(limits)).join().is_err() {
            eprintln!("could not restore the test cluster; the next Cluster::get tries again");
        }
    }
}

/// Every node running and clustered; default limits on `limits_changed` and on every node that
/// reports an alarm (blocking: runs the script).
fn restore(mut limits_changed: Vec<usize>) {
    script(&["start"]);
    limits_changed.extend(alarmed_nodes());
    limits_changed.sort_unstable();
    limits_changed.dedup();
    for node in limits_changed {
        let node = node.to_string();
        script(&["ctl", &node, "set_vm_memory_high_watermark", DEFAULT_MEMORY_WATERMARK]);
        script(&["ctl", &node, "set_disk_free_limit", DEFAULT_DISK_FREE_LIMIT]);
    }
}

/// Runs blocking `work` (the script) off the async runtime's threads.
async fn blocking<T: Send + 'static>(work: impl FnOnce() -> T + Send + 'static) -> T {
    match tokio::task::spawn_blocking(work).await {
        Ok(value) => value,
        // keep the script's own panic message
        Err(e) => std::panic::resume_unwind(e.into_panic()),
    }
}

/// Nodes (1 to 3) whose management API reports a memory or disk alarm, asked of the first node
/// that answers (blocking).
fn alarmed_nodes() -> Vec<usize> {
    for node in 1..=3 {
        let url =
            format!("{}/api/nodes?columns=name,mem_alarm,disk_free_alarm", ClusterNode::numbered(node).management);
        let output = Command::new("curl").args(["-fsS", "-m", "10", "-u", "guest:guest", &url]).output();
        let Ok(output) = output else { continue };
        let Ok(nodes) = serde_json::from_slice::<Vec<Value>>(&output.stdout) else { continue };
        return nodes
            .iter()
            .filter(|n| n["mem_alarm"] == true || n["disk_free_alarm"] == true)
            .filter_map(|n| (1..=3).find(|&i| n["name"] == ClusterNode::numbered(i).name.as_str()))
            .collect();
    }
    Vec::new()
}

fn script_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(".ci/cluster.sh")
}

/// Runs `.ci/cluster.sh ARGS` and returns its standard output; a failure panics with the
/// script's own explanation (its standard error).
fn script(args: &[&str]) -> String {
    let output = Command::new(script_path())
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {} (it needs root and bash): {e}", script_path().display()));
    if !output.status.success() {
        panic!(
            "the test cluster is not available: `.ci/cluster.sh {}` failed ({}):\n{}{}",
            args.join(" "),
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// A vhost of its own on the test cluster (vhosts are cluster-wide), deleted when dropped
/// through whichever node answers.
pub struct ClusterVhost {
    pub name: String,
}

impl ClusterVhost {
    /// Creates `warren-test-{test}-{random}` through node `node` with guest's full permissions.
    pub async fn create(cluster: &Cluster, node: usize, test: &str) -> ClusterVhost {
        let name = format!("warren-test-{test}-{}", rand::random::<u32>());
        let http = reqwest::Client::new();
        let management = &cluster.node(node).management;
        let vhost = super::encode(&name);
        for (path, body) in [
            (format!("/api/vhosts/{vhost}"), serde_json::json!({})),
            (
                format!("/api/permissions/{vhost}/guest"),
                serde_json::json!({"configure": ".*", "write": ".*", "read": ".*"}),
            ),
        ] {
            let response = http
                .put(format!("{management}{path}"))
                .basic_auth("guest", Some("guest"))
                .json(&body)
                .send()
                .await
                .unwrap_or_else(|e| panic!("management API of cluster node {node} at {management}: {e}"));
            assert!(response.status().is_success(), "PUT {path} on cluster node {node}: {}", response.status());
        }
        ClusterVhost { name }
    }
}

impl Drop for ClusterVhost {
    fn drop(&mut self) {
        let vhost = super::encode(&self.name);
        // Drop cannot await; delete from a thread of its own, through the first node that answers
        // (the test may have left one stopped).
        let deleted = std::thread::spawn(move || {
            (1..=3).any(|node| {
                let url = format!("{}/api/vhosts/{vhost}", ClusterNode::numbered(node).management);
                Command::new("curl")
                    .args(["-fsS", "-m", "20", "-o", "/dev/null", "-X", "DELETE", "-u", "guest:guest", &url])
                    .status()
                    .is_ok_and(|s| s.success())
            })
        })
        .join();
        if !matches!(deleted, Ok(true)) {
            eprintln!("could not delete test vhost {} on the cluster", self.name);
        }
    }
}
