//! The cluster's nodes as `GET /api/nodes` reports them, and the problems they show (a node
//! down, a partition, a memory or disk alarm).
//!
//! What the three brokers on hand answer (recorded in `tests/fixtures/*/nodes-columns*.json`):
//! - 3.10.8: every field, `sockets_total` a real limit.
//! - 4.0.5: every field, but `sockets_used` and `sockets_total` are always 0: 4.x dropped the file
//!   handle cache that counted sockets against a limit. A limit of 0 is no limit, so both are
//!   read as unknown there.
//! - 4.0.5 with the metrics collector off: only `name`, `running`, `type`, `being_drained`. Every
//!   number is unknown, never 0.
//!
//! No version gives the Erlang version per node; the RabbitMQ version is in the node's
//! `applications` (the `rabbit` entry). `/api/overview` gives both for the node that answered.
//! A node that is not running has no current numbers: warren shows none for it.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Fields asked of `/api/nodes`. `applications` (about 7 KB a node) is the only per-node source
/// of the RabbitMQ version; the whole answer is a few KB per node and takes milliseconds
/// (measured 3-4 ms on the single-node brokers here), so it is read every poll.
pub const NODE_COLUMNS: &str = "name,running,uptime,mem_used,mem_limit,mem_alarm,disk_free,disk_free_limit,\
disk_free_alarm,fd_used,fd_total,sockets_used,sockets_total,proc_used,proc_total,run_queue,partitions,applications";

/// One node as the broker reports it. Every number is lenient: a field of an unexpected type
/// (a string where a number belongs) is unknown, and does not fail the whole answer.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct RawNode {
    pub name: String,
    #[serde(default, deserialize_with = "lenient_bool")]
    pub running: Option<bool>,
    /// Milliseconds.
    #[serde(default, deserialize_with = "lenient_u64")]
    pub uptime: Option<u64>,
    #[serde(default, deserialize_with = "lenient_u64")]
    pub mem_used: Option<u64>,
    #[serde(default, deserialize_with = "lenient_u64")]
    pub mem_limit: Option<u64>,
    #[serde(default, deserialize_with = "lenient_bool")]
    pub mem_alarm: Option<bool>,
    #[serde(default, deserialize_with = "lenient_u64")]
    pub disk_free: Option<u64>,
    #[serde(default, deserialize_with = "lenient_u64")]
    pub disk_free_limit: Option<u64>,
    #[serde(default, deserialize_with = "lenient_bool")]
    pub disk_free_alarm: Option<bool>,
    #[serde(default, deserialize_with = "lenient_u64")]
    pub fd_used: Option<u64>,
    #[serde(default, deserialize_with = "lenient_u64")]
    pub fd_total: Option<u64>,
    #[serde(default, deserialize_with = "lenient_u64")]
    pub sockets_used: Option<u64>,
    #[serde(default, deserialize_with = "lenient_u64")]
    pub sockets_total: Option<u64>,
    #[serde(default, deserialize_with = "lenient_u64")]
    pub proc_used: Option<u64>,
    #[serde(default, deserialize_with = "lenient_u64")]
    pub proc_total: Option<u64>,
    #[serde(default, deserialize_with = "lenient_u64")]
    pub run_queue: Option<u64>,
    #[serde(default, deserialize_with = "lenient_names")]
    pub partitions: Option<Vec<String>>,
    #[serde(default, deserialize_with = "lenient_apps")]
    pub applications: Option<Vec<App>>,
}

#[derive(Debug, Clone, Default, Deserialize)]
pub struct App {
    pub name: String,
    pub version: Option<String>,
}

/// One node as warren shows it (the API's `nodes` items). `None` is unknown, shown as "—".
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Node {
    pub name: String,
    pub running: Option<bool>,
    pub uptime_secs: Option<u64>,
    pub mem_used: Option<u64>,
    /// The high watermark in bytes: publishers are blocked above it.
    pub mem_limit: Option<u64>,
    pub mem_alarm: Option<bool>,
    pub disk_free: Option<u64>,
    /// Publishers are blocked when free disk falls below it.
    pub disk_free_limit: Option<u64>,
    pub disk_free_alarm: Option<bool>,
    pub fd_used: Option<u64>,
    pub fd_total: Option<u64>,
    pub sockets_used: Option<u64>,
    pub sockets_total: Option<u64>,
    pub proc_used: Option<u64>,
    pub proc_total: Option<u64>,
    pub run_queue: Option<u64>,
    /// Nodes this node cannot reach (a network partition); `None` when the broker did not say.
    pub partitions: Option<Vec<String>>,
    pub rabbitmq_version: Option<String>,
    pub erlang_version: Option<String>,
}

impl Node {
    /// The node as shown, from the broker's answer. `answering` is the node `/api/overview` came
    /// from, with its RabbitMQ and Erlang versions: the only Erlang version the API gives.
    pub fn from_raw(raw: RawNode, answering: Option<(&str, Option<&str>, Option<&str>)>) -> Node {
        let rabbit = raw
            .applications
            .as_ref()
            .and_then(|apps| apps.iter().find(|a| a.name == "rabbit"))
            .and_then(|a| a.version.clone());
        let (mut rabbitmq_version, mut erlang_version) = (rabbit, None);
        if let Some((node, rabbitmq, erlang)) = answering {
            if node == raw.name {
                rabbitmq_version = rabbitmq_version.or(rabbitmq.map(str::to_string));
                erlang_version = erlang.map(str::to_string);
            }
        }
        if raw.running == Some(false) {
            // A stopped node has no memory, disk or processes to report: whatever the broker
            // still lists for it is not its current state.
            return Node { name: raw.name, running: Some(false), rabbitmq_version, erlang_version, ..Node::default() };
        }
        // 4.x reports sockets 0 of 0: it no longer counts them (see the module docs).
        let sockets_known = raw.sockets_total.is_some_and(|t| t > 0);
        Node {
            running: raw.running,
            uptime_secs: raw.uptime.map(|ms| ms / 1000),
            mem_used: raw.mem_used,
            mem_limit: raw.mem_limit,
            mem_alarm: raw.mem_alarm,
            disk_free: raw.disk_free,
            disk_free_limit: raw.disk_free_limit,
            disk_free_alarm: raw.disk_free_alarm,
            fd_used: raw.fd_used,
            fd_total: raw.fd_total.filter(|t| *t > 0),
            sockets_used: raw.sockets_used.filter(|_| sockets_known),
            sockets_total: raw.sockets_total.filter(|_| sockets_known),
            proc_used: raw.proc_used,
            proc_total: raw.proc_total,
            run_queue: raw.run_queue,
            partitions: raw.partitions,
            rabbitmq_version,
            erlang_version,
            name: raw.name,
        }
    }

    /// File descriptors used as a share of the limit (0..1); unknown without both numbers.
    pub fn fd_used_ratio(&self) -> Option<f64> {
        match (self.fd_used, self.fd_total) {
            (Some(used), Some(total)) if total > 0 => Some(used as f64 / total as f64),
            _ => None,
        }
    }

    /// Memory used as a share of the high watermark.
    pub fn mem_ratio(&self) -> Option<f64> {
        match (self.mem_used, self.mem_limit) {
            (Some(used), Some(limit)) if limit > 0 => Some(used as f64 / limit as f64),
            _ => None,
        }
    }
}

/// How long free-disk readings are kept in memory for `disk_free_predicted_secs`: the longest
/// window a rule fits its line to.
pub const DISK_READINGS_KEEP_SECS: i64 = 3600;

/// The cluster's nodes as of the last poll that read them, kept in the live state.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct NodesLive {
    pub nodes: Vec<Node>,
    pub problems: Vec<Problem>,
    /// When the nodes shown were read; `None` before the first read.
    pub as_of: Option<DateTime<Utc>>,
    /// Why the last read failed (the nodes shown are then older than the last poll).
    pub error: Option<String>,
    /// Free-disk readings per node, (unix seconds, bytes), oldest first, the last
    /// `DISK_READINGS_KEEP_SECS`.
    #[serde(skip)]
    pub disk_free_readings: Arc<HashMap<String, VecDeque<(i64, u64)>>>,
}

impl NodesLive {
    /// Takes in one read of the nodes at `now`.
    pub fn observe(&mut self, nodes: Vec<Node>, now: DateTime<Utc>) {
        self.problems = problems(&nodes, &self.problems, now);
        let ts = now.timestamp();
        let readings = Arc::make_mut(&mut self.disk_free_readings);
        readings.retain(|name, _| nodes.iter().any(|n| &n.name == name));
        for node in &nodes {
            let kept = readings.entry(node.name.clone()).or_default();
            if let Some(free) = node.disk_free {
                kept.push_back((ts, free));
            }
            while kept.front().is_some_and(|(t, _)| *t < ts - DISK_READINGS_KEEP_SECS) {
                kept.pop_front();
            }
        }
        self.nodes = nodes;
        self.as_of = Some(now);
        self.error = None;
    }

    /// How many nodes are running, of how many the broker lists (`None` before the first read).
    pub fn running_of(&self) -> Option<(usize, usize)> {
        self.as_of?;
        Some((self.nodes.iter().filter(|n| n.running == Some(true)).count(), self.nodes.len()))
    }

    /// Seconds until `node`'s free disk reaches its limit, by a least-squares line over its
    /// readings of the last `window_secs` (see `predict_secs_until`).
    pub fn disk_free_predicted_secs(&self, node: &Node, window_secs: i64, now: i64) -> Option<f64> {
        let limit = node.disk_free_limit? as f64;
        let readings = self.disk_free_readings.get(&node.name)?;
        let points: Vec<(i64, f64)> =
            readings.iter().filter(|(t, _)| *t >= now - window_secs).map(|(t, v)| (*t, *v as f64)).collect();
        predict_secs_until(&points, limit, now, PREDICT_MIN_POINTS)
    }
}

/// Readings a disk prediction needs at least.
pub const PREDICT_MIN_POINTS: usize = 5;

/// What kind of cluster problem.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProblemKind {
    NodeDown,
    Partition,
    MemoryAlarm,
    DiskAlarm,
}

/// One cluster problem, with when warren first saw it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Problem {
    pub node: String,
    pub kind: ProblemKind,
    /// The first poll that saw it (this run of warren: a problem older than warren's start
    /// says "since" its start).
    pub since: DateTime<Utc>,
}

impl Problem {
    /// The sentence the banner and the API show.
    pub fn text(&self) -> String {
        let since = self.since.format("%H:%M:%S UTC");
        match self.kind {
            ProblemKind::NodeDown => format!("node {} is down since {since}", self.node),
            ProblemKind::Partition => format!("node {} reports a network partition since {since}", self.node),
            ProblemKind::MemoryAlarm => {
                format!("memory alarm on {} since {since}: publishers are blocked", self.node)
            }
            ProblemKind::DiskAlarm => format!("disk alarm on {} since {since}: publishers are blocked", self.node),
        }
    }
}

/// The problems `nodes` show now. `previous` carries the `since` of problems that continue.
pub fn problems(nodes: &[Node], previous: &[Problem], now: DateTime<Utc>) -> Vec<Problem> {
    let since: HashMap<(&str, ProblemKind), DateTime<Utc>> =
        previous.iter().map(|p| ((p.node.as_str(), p.kind), p.since)).collect();
    let mut out = Vec::new();
    for node in nodes {
        let mut kinds = Vec::new();
        if node.running == Some(false) {
            kinds.push(ProblemKind::NodeDown);
        }
        if node.partitions.as_ref().is_some_and(|p| !p.is_empty()) {
            kinds.push(ProblemKind::Partition);
        }
        if node.mem_alarm == Some(true) {
            kinds.push(ProblemKind::MemoryAlarm);
        }
        if node.disk_free_alarm == Some(true) {
            kinds.push(ProblemKind::DiskAlarm);
        }
        for kind in kinds {
            let since = since.get(&(node.name.as_str(), kind)).copied().unwrap_or(now);
            out.push(Problem { node: node.name.clone(), kind, since });
        }
    }
    out
}

/// The number of distinct nodes that partitions are reported against, over all nodes: 0 in a
/// healthy cluster.
pub fn partition_count(node: &Node) -> Option<f64> {
    node.partitions.as_ref().map(|p| p.len() as f64)
}

fn lenient_u64<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    Ok(match Value::deserialize(d)? {
        Value::Number(n) => n.as_u64().or_else(|| n.as_f64().filter(|f| *f >= 0.0 && f.is_finite()).map(|f| f as u64)),
        _ => None,
    })
}

fn lenient_bool<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<bool>, D::Error> {
    Ok(Value::deserialize(d)?.as_bool())
}

fn lenient_names<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Vec<String>>, D::Error> {
    Ok(match Value::deserialize(d)? {
        Value::Array(items) => Some(items.into_iter().filter_map(|v| v.as_str().map(str::to_string)).collect()),
        _ => None,
    })
}

fn lenient_apps<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Vec<App>>, D::Error> {
    Ok(match Value::deserialize(d)? {
        Value::Array(items) => Some(items.into_iter().filter_map(|v| serde_json::from_value(v).ok()).collect()),
        _ => None,
    })
}

/// Least-squares line through `(ts, value)` points, like Prometheus' `predict_linear`: the
/// seconds from `now` until the line reaches `target`. `None` with fewer than `min_points`
/// points, points spanning under a minute, or a value that is not falling towards `target`
/// (a flat or growing disk never reaches the limit).
pub fn predict_secs_until(points: &[(i64, f64)], target: f64, now: i64, min_points: usize) -> Option<f64> {
    if points.len() < min_points.max(2) {
        return None;
    }
    let first = points.iter().map(|p| p.0).min()?;
    let last = points.iter().map(|p| p.0).max()?;
    if last - first < 60 {
        return None;
    }
    let n = points.len() as f64;
    // Centred on the first timestamp: unix seconds squared lose precision in f64.
    let xs: Vec<f64> = points.iter().map(|p| (p.0 - first) as f64).collect();
    let mean_x = xs.iter().sum::<f64>() / n;
    let mean_y = points.iter().map(|p| p.1).sum::<f64>() / n;
    let (mut sxy, mut sxx) = (0.0, 0.0);
    for (x, p) in xs.iter().zip(points) {
        sxy += (x - mean_x) * (p.1 - mean_y);
        sxx += (x - mean_x) * (x - mean_x);
    }
    if sxx == 0.0 {
        return None;
    }
    let slope = sxy / sxx;
    if slope >= 0.0 {
        return None;
    }
    let intercept = mean_y - slope * mean_x;
    let now_x = (now - first) as f64;
    let at_now = intercept + slope * now_x;
    // Already at or below the limit: zero seconds left.
    Some(((target - at_now) / slope).max(0.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(dir: &str, name: &str) -> Vec<Node> {
        let path = format!("{}/tests/fixtures/{dir}/{name}", env!("CARGO_MANIFEST_DIR"));
        let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("fixture {path}: {e}"));
        let raw: Vec<RawNode> = serde_json::from_slice(&bytes).unwrap();
        raw.into_iter().map(|r| Node::from_raw(r, None)).collect()
    }

    #[test]
    fn parses_recorded_3_10_nodes() {
        let nodes = fixture("rabbitmq-3.10.8", "nodes-columns.json");
        let n = &nodes[0];
        assert_eq!((n.name.as_str(), n.running), ("rabbit@localhost", Some(true)));
        assert_eq!((n.mem_limit, n.mem_alarm, n.disk_free_alarm), (Some(10110428774), Some(false), Some(false)));
        assert_eq!((n.fd_used, n.fd_total, n.sockets_total), (Some(38), Some(1024), Some(832)));
        assert_eq!((n.proc_total, n.run_queue), (Some(1048576), Some(1)));
        assert_eq!(n.partitions.as_deref(), Some(&[][..]));
        assert_eq!(n.rabbitmq_version.as_deref(), Some("3.10.8"));
        assert_eq!(n.uptime_secs, Some(393), "milliseconds to seconds");
        assert_eq!(n.erlang_version, None, "not in /api/nodes");
    }

    #[test]
    fn rabbitmq_4_counts_no_sockets() {
        let nodes = fixture("rabbitmq-4.x", "nodes-columns.json");
        let n = &nodes[0];
        assert_eq!((n.sockets_used, n.sockets_total), (None, None), "0 of 0 is not counted, not 0 used");
        assert_eq!((n.fd_used, n.fd_total), (Some(46), Some(20000)));
        assert_eq!(n.rabbitmq_version.as_deref(), Some("4.0.5"));
    }

    #[test]
    fn without_the_metrics_collector_every_number_is_unknown() {
        let nodes = fixture("rabbitmq-4.x", "nodes-columns-metrics-collector-off.json");
        let n = &nodes[0];
        assert_eq!(n.running, Some(true));
        assert_eq!(
            (n.mem_used, n.mem_limit, n.mem_alarm, n.disk_free, n.fd_used, n.proc_used, n.run_queue),
            (None, None, None, None, None, None, None)
        );
        assert_eq!(n.partitions, None);
        assert_eq!(problems(&nodes, &[], Utc::now()), vec![], "unknown alarms are no problems");
    }

    #[test]
    fn the_answering_node_gets_the_overview_versions() {
        let raw: RawNode = serde_json::from_str(r#"{"name":"rabbit@a","running":true}"#).unwrap();
        let n = Node::from_raw(raw.clone(), Some(("rabbit@a", Some("4.0.5"), Some("27.3"))));
        assert_eq!((n.rabbitmq_version.as_deref(), n.erlang_version.as_deref()), (Some("4.0.5"), Some("27.3")));
        let other = Node::from_raw(raw, Some(("rabbit@b", Some("4.0.5"), Some("27.3"))));
        assert_eq!((other.rabbitmq_version, other.erlang_version), (None, None));
    }

    #[test]
    fn hostile_fields_are_unknown_not_errors() {
        let raw: Vec<RawNode> = serde_json::from_str(
            r#"[{"name":"a","running":"yes","mem_used":-5,"mem_limit":"big","fd_total":0,"fd_used":3,
                "partitions":"none","applications":[1,{"name":"rabbit"}],"uptime":1.5e3}]"#,
        )
        .unwrap();
        let n = Node::from_raw(raw[0].clone(), None);
        assert_eq!((n.running, n.mem_used, n.mem_limit, n.fd_total), (None, None, None, None));
        assert_eq!((n.fd_used_ratio(), n.partitions, n.uptime_secs), (None, None, Some(1)));
    }

    #[test]
    fn problems_keep_their_first_time() {
        let t0 = DateTime::from_timestamp(1_000, 0).unwrap();
        let t1 = DateTime::from_timestamp(2_000, 0).unwrap();
        let down =
            Node::from_raw(serde_json::from_str(r#"{"name":"rabbit@b","running":false,"mem_used":5}"#).unwrap(), None);
        assert_eq!(down.mem_used, None, "a stopped node's numbers are not current");
        let alarmed = Node {
            name: "rabbit@a".into(),
            running: Some(true),
            mem_alarm: Some(true),
            partitions: Some(vec!["rabbit@c".into()]),
            ..Node::default()
        };
        let first = problems(&[alarmed.clone(), down.clone()], &[], t0);
        let kinds: Vec<_> = first.iter().map(|p| (p.node.as_str(), p.kind)).collect();
        assert_eq!(
            kinds,
            [
                ("rabbit@a", ProblemKind::Partition),
                ("rabbit@a", ProblemKind::MemoryAlarm),
                ("rabbit@b", ProblemKind::NodeDown)
            ]
        );
        let later = problems(&[alarmed, down], &first[1..], t1);
        assert_eq!(later.iter().map(|p| p.since).collect::<Vec<_>>(), [t1, t0, t0]);
        assert_eq!(later[2].text(), "node rabbit@b is down since 00:16:40 UTC");
        assert_eq!(later[1].text(), "memory alarm on rabbit@a since 00:16:40 UTC: publishers are blocked");
    }

    #[test]
    fn predicts_like_predict_linear() {
        // Free disk falls 1 MB/s from 1,000 MB; limit 50 MB, so 950 s from t=0.
        let points: Vec<(i64, f64)> = (0..=10).map(|i| (i * 30, 1_000e6 - (i * 30) as f64 * 1e6)).collect();
        let left = predict_secs_until(&points, 50e6, 300, 5).unwrap();
        assert!((left - 650.0).abs() < 1e-6, "{left}");
        assert_eq!(predict_secs_until(&points[..3], 50e6, 60, 5), None, "too few samples");
        let flat: Vec<(i64, f64)> = (0..10).map(|i| (i * 30, 5e9)).collect();
        assert_eq!(predict_secs_until(&flat, 50e6, 300, 5), None, "a disk that does not shrink");
        let growing: Vec<(i64, f64)> = (0..10).map(|i| (i * 30, 5e9 + i as f64)).collect();
        assert_eq!(predict_secs_until(&growing, 50e6, 300, 5), None);
        let close: Vec<(i64, f64)> = (0..5).map(|i| (i * 10, 5e9 - i as f64)).collect();
        assert_eq!(predict_secs_until(&close, 50e6, 40, 5), None, "under a minute of samples");
        let below: Vec<(i64, f64)> = (0..10).map(|i| (i * 30, 40e6 - i as f64 * 1e3)).collect();
        assert_eq!(predict_secs_until(&below, 50e6, 300, 5), Some(0.0), "already below the limit");
    }
}
