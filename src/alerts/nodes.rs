//! The values node rules compare (`Metric::is_node`), one per node of a broker. Unknown stays
//! unknown: a broker without the metrics collector gives no alarms, and the alert holds.

use super::rule::{Metric, Rule};
use crate::broker::nodes::{Node, NodesLive, DISK_READINGS_KEEP_SECS};

/// Shortest window a disk prediction fits its line to: fewer minutes of readings swing with
/// every log rotation.
pub const PREDICT_MIN_WINDOW_SECS: i64 = 600;

/// The window `disk_free_predicted_secs` fits its line to for `rule`: the rule's `for_secs`,
/// at least ten minutes, at most the hour of readings kept.
pub fn predict_window_secs(rule: &Rule) -> i64 {
    rule.for_secs.clamp(PREDICT_MIN_WINDOW_SECS, DISK_READINGS_KEEP_SECS)
}

/// The value of a node metric for one node; `None` for queue metrics and unknown values.
pub fn node_value(rule: &Rule, node: &Node, nodes: &NodesLive, now: i64) -> Option<f64> {
    let flag = |b: Option<bool>| b.map(|on| if on { 1.0 } else { 0.0 });
    let running = node.running == Some(true);
    match rule.metric {
        Metric::NodeDown => node.running.map(|r| if r { 0.0 } else { 1.0 }),
        // A node that is down has no alarms to report: its down alert says it.
        Metric::MemoryAlarm if running => flag(node.mem_alarm),
        Metric::DiskAlarm if running => flag(node.disk_free_alarm),
        Metric::FdUsedRatio => node.fd_used_ratio(),
        Metric::Partitions if running => crate::broker::nodes::partition_count(node),
        Metric::DiskFreePredictedSecs if running => {
            nodes.disk_free_predicted_secs(node, predict_window_secs(rule), now)
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::alerts::rule::{Comparator, Scope, Severity};
    use chrono::DateTime;

    fn rule(metric: Metric, for_secs: i64) -> Rule {
        Rule {
            id: "n".into(),
            name: "n".into(),
            scope: Scope::default(),
            metric,
            comparator: Some(Comparator::Lt),
            threshold: Some(3600.0),
            for_secs,
            keep_firing_for_secs: 0,
            severity: Severity::Warning,
            description: None,
        }
    }

    #[test]
    fn node_values_and_unknowns() {
        let up = Node {
            name: "rabbit@a".into(),
            running: Some(true),
            mem_alarm: Some(true),
            fd_used: Some(900),
            fd_total: Some(1000),
            partitions: Some(vec![]),
            ..Node::default()
        };
        let live = NodesLive::default();
        let v = |m: Metric, n: &Node| node_value(&rule(m, 0), n, &live, 0);
        assert_eq!(v(Metric::NodeDown, &up), Some(0.0));
        assert_eq!(v(Metric::MemoryAlarm, &up), Some(1.0));
        assert_eq!(v(Metric::DiskAlarm, &up), None, "not given is not 0");
        assert_eq!(v(Metric::FdUsedRatio, &up), Some(0.9));
        assert_eq!(v(Metric::Partitions, &up), Some(0.0));
        let down = Node { name: "rabbit@b".into(), running: Some(false), ..Node::default() };
        assert_eq!(v(Metric::NodeDown, &down), Some(1.0));
        assert_eq!(v(Metric::MemoryAlarm, &down), None);
        assert_eq!(v(Metric::Ready, &up), None);
    }

    #[test]
    fn disk_prediction_fits_the_rules_window() {
        let at = |s: i64| DateTime::from_timestamp(1_000_000 + s, 0).unwrap();
        let mut live = NodesLive::default();
        let node = |free: u64| Node {
            name: "rabbit@a".into(),
            running: Some(true),
            disk_free: Some(free),
            disk_free_limit: Some(50_000_000),
            ..Node::default()
        };
        // Falling 100 KB/s for 20 minutes, then flat for 10.
        for i in 0..=40 {
            live.observe(vec![node(1_000_000_000 - i * 30 * 100_000)], at(i as i64 * 30));
        }
        for i in 41..=60 {
            live.observe(vec![node(1_000_000_000 - 40 * 30 * 100_000)], at(i as i64 * 30));
        }
        let now = 1_000_000 + 60 * 30;
        let n = live.nodes[0].clone();
        assert_eq!(node_value(&rule(Metric::DiskFreePredictedSecs, 0), &n, &live, now), None, "flat for 10 min");
        let hour = node_value(&rule(Metric::DiskFreePredictedSecs, 3600), &n, &live, now).unwrap();
        assert!(hour > 0.0 && hour < 20_000.0, "the last hour still falls: {hour}");
    }
}
