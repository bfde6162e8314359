//! The evaluator over synthetic polls: one `evaluate` per poll, times in seconds from a start.

use chrono::TimeDelta;

use super::testing::{at, queue};
use super::*;
use crate::metrics::QueueView;

use AlertPhase::{Firing, Inactive, Pending, Resolved};

/// `ready > 10` on every queue.
fn backlog(for_secs: i64, keep_firing_for_secs: i64) -> Rule {
    Rule {
        id: "backlog".to_string(),
        name: "Backlog".to_string(),
        scope: Scope::default(),
        metric: Metric::Ready,
        comparator: Some(Comparator::Gt),
        threshold: Some(10.0),
        for_secs,
        keep_firing_for_secs,
        severity: Severity::Warning,
        description: None,
    }
}

fn unreachable(for_secs: i64) -> Rule {
    Rule {
        id: "down".to_string(),
        name: "Broker down".to_string(),
        metric: Metric::BrokerUnreachable,
        comparator: None,
        threshold: None,
        severity: Severity::Critical,
        ..backlog(for_secs, 0)
    }
}

fn orders(ready: u64) -> QueueView {
    queue("/", "orders").ready(ready).view
}

/// One evaluation with broker `local` up and these queues.
fn up(evaluator: &mut Evaluator, secs: i64, queues: &[QueueView]) -> Vec<Transition> {
    evaluator
        .evaluate(at(secs), &[BrokerInput { name: "local", up: true, queues, values: Default::default(), nodes: None }])
}

/// One evaluation with broker `local` down; its last queue list says everything is fine, and
/// must be ignored.
fn down(evaluator: &mut Evaluator, secs: i64) -> Vec<Transition> {
    evaluator.evaluate(
        at(secs),
        &[BrokerInput { name: "local", up: false, queues: &[orders(0)], values: Default::default(), nodes: None }],
    )
}

fn phases(transitions: &[Transition]) -> Vec<(&str, AlertPhase, AlertPhase)> {
    transitions.iter().map(|t| (t.rule_id.as_str(), t.from, t.to)).collect()
}

fn phase_of(evaluator: &Evaluator, rule_id: &str) -> Vec<AlertPhase> {
    evaluator.states().into_iter().filter(|s| s.rule_id == rule_id).map(|s| s.phase).collect()
}

#[test]
fn pending_until_for_has_passed_then_firing() {
    let mut e = Evaluator::new(vec![backlog(10, 0)]);
    let started = up(&mut e, 0, &[orders(42)]);
    assert_eq!(phases(&started), [("backlog", Inactive, Pending)]);
    assert!(!started[0].notifies(), "pending is no news");
    assert_eq!(started[0].key, AlertKey::queue("local", "/", "orders"));
    assert_eq!(up(&mut e, 5, &[orders(42)]), []);
    let almost = e.evaluate(
        at(0) + TimeDelta::milliseconds(9_999),
        &[BrokerInput { name: "local", up: true, queues: &[orders(42)], values: Default::default(), nodes: None }],
    );
    assert_eq!(almost, [], "not before 10 s");
    let fired = up(&mut e, 10, &[orders(43)]);
    assert_eq!(phases(&fired), [("backlog", Pending, Firing)]);
    assert_eq!((fired[0].value, fired[0].at, fired[0].notifies()), (Some(43.0), at(10), true));
    let state = &e.states()[0];
    assert_eq!((state.active_since, state.fired_at), (at(0), Some(at(10))));
    assert_eq!(up(&mut e, 20, &[orders(44)]), [], "firing is reported once");
}

#[test]
fn for_zero_fires_at_once_and_resolves_when_the_value_drops() {
    let mut e = Evaluator::new(vec![backlog(0, 0)]);
    assert_eq!(phases(&up(&mut e, 0, &[orders(42)])), [("backlog", Inactive, Firing)]);
    let resolved = up(&mut e, 10, &[orders(3)]);
    assert_eq!(phases(&resolved), [("backlog", Firing, Resolved)]);
    assert_eq!((resolved[0].value, resolved[0].note.as_deref(), resolved[0].notifies()), (Some(3.0), None, true));
    assert_eq!(e.states(), []);
    assert_eq!(up(&mut e, 20, &[orders(3)]), []);
}

#[test]
fn keep_firing_for_counts_from_the_first_false_reading() {
    let mut e = Evaluator::new(vec![backlog(0, 30)]);
    up(&mut e, 0, &[orders(42)]);
    for secs in [20, 30, 40, 49] {
        assert_eq!(up(&mut e, secs, &[orders(3)]), [], "at {secs} s");
    }
    assert_eq!(e.states()[0].false_since, Some(at(20)));
    assert_eq!(phases(&up(&mut e, 50, &[orders(3)])), [("backlog", Firing, Resolved)]);
}

#[test]
fn flapping_within_keep_firing_for_does_not_resolve() {
    let mut e = Evaluator::new(vec![backlog(0, 30)]);
    up(&mut e, 0, &[orders(42)]);
    assert_eq!(up(&mut e, 10, &[orders(3)]), []);
    assert_eq!(up(&mut e, 20, &[orders(42)]), [], "true again: the count starts over");
    assert_eq!(e.states()[0].false_since, None);
    for secs in [30, 45, 59] {
        assert_eq!(up(&mut e, secs, &[orders(3)]), [], "at {secs} s, 30 s after the first false reading is 60 s");
    }
    assert_eq!(phases(&up(&mut e, 60, &[orders(3)])), [("backlog", Firing, Resolved)]);
}

#[test]
fn pending_that_recovers_goes_back_to_inactive_silently() {
    let mut e = Evaluator::new(vec![backlog(10, 0)]);
    up(&mut e, 0, &[orders(42)]);
    let recovered = up(&mut e, 5, &[orders(3)]);
    assert_eq!(phases(&recovered), [("backlog", Pending, Inactive)]);
    assert!(!recovered[0].notifies());
    assert_eq!(e.states(), []);
    // A new episode counts `for` from its own start, not from the first one.
    assert_eq!(phases(&up(&mut e, 10, &[orders(42)])), [("backlog", Inactive, Pending)]);
    assert_eq!(up(&mut e, 15, &[orders(42)]), []);
    assert_eq!(phases(&up(&mut e, 20, &[orders(42)])), [("backlog", Pending, Firing)]);
}

#[test]
fn broker_down_holds_queue_alerts_and_fires_broker_unreachable() {
    let mut e = Evaluator::new(vec![backlog(0, 0), unreachable(30)]);
    assert_eq!(phases(&up(&mut e, 0, &[orders(42)])), [("backlog", Inactive, Firing)]);
    let outage = down(&mut e, 10);
    assert_eq!(phases(&outage), [("down", Inactive, Pending)], "the stale ready=0 resolves nothing");
    assert_eq!(outage[0].key, AlertKey::broker("local"));
    assert_eq!(down(&mut e, 30), []);
    let fired = down(&mut e, 40);
    assert_eq!(phases(&fired), [("down", Pending, Firing)]);
    assert!(fired[0].notifies());
    assert_eq!(phase_of(&e, "backlog"), [Firing]);
    // Back up: the outage resolves, the backlog alert carries on without a second notification.
    assert_eq!(phases(&up(&mut e, 50, &[orders(42)])), [("down", Firing, Resolved)]);
    assert_eq!(phases(&up(&mut e, 60, &[orders(0)])), [("backlog", Firing, Resolved)]);
}

#[test]
fn timers_hold_through_an_outage() {
    let mut e = Evaluator::new(vec![backlog(60, 0)]);
    up(&mut e, 0, &[orders(42)]);
    for secs in (10..=100).step_by(10) {
        assert_eq!(down(&mut e, secs), []);
    }
    // Pending since 0 s: true again after the outage at 110 s is more than 60 s on.
    assert_eq!(phases(&up(&mut e, 110, &[orders(42)])), [("backlog", Pending, Firing)]);
}

#[test]
fn other_brokers_are_evaluated_while_one_is_down() {
    let mut e = Evaluator::new(vec![backlog(0, 0), unreachable(0)]);
    let theirs = [queue("/", "orders").broker("other").ready(42).view];
    let t = e.evaluate(
        at(0),
        &[
            BrokerInput { name: "local", up: false, queues: &[], values: Default::default(), nodes: None },
            BrokerInput { name: "other", up: true, queues: &theirs, values: Default::default(), nodes: None },
        ],
    );
    let keys: Vec<String> = t.iter().map(|t| format!("{} {}", t.rule_id, t.key)).collect();
    assert_eq!(keys, ["backlog queue 'orders' (vhost '/', broker 'other')", "down broker 'local'"]);
}

#[test]
fn unknown_values_neither_fire_nor_resolve() {
    let mut e = Evaluator::new(vec![backlog(0, 0)]);
    // `orders` with no ready count: the broker did not give it.
    let unknown = [queue("/", "orders").view];
    assert_eq!(up(&mut e, 0, &unknown), [], "unknown is not 0, and not above 10 either");
    up(&mut e, 10, &[orders(42)]);
    assert_eq!(up(&mut e, 20, &unknown), [], "an unknown value does not resolve");
    let state = &e.states()[0];
    assert_eq!((state.phase, state.last_value, state.observed_at), (Firing, Some(42.0), at(10)));
    assert_eq!(phases(&up(&mut e, 30, &[orders(3)])), [("backlog", Firing, Resolved)]);
}

#[test]
fn deleted_queues_end_their_alerts_with_a_note() {
    let mut e = Evaluator::new(vec![backlog(0, 0), Rule { id: "slow".to_string(), ..backlog(60, 0) }]);
    let payments = queue("/", "payments").ready(42);
    up(&mut e, 0, &[orders(42), payments.view.clone()]);
    // `orders` is gone from the list; `payments` is still listed, marked deleted.
    let ended = up(&mut e, 10, &[payments.deleted().view]);
    let summary: Vec<_> = ended.iter().map(|t| (t.rule_id.as_str(), t.key.queue.as_deref(), t.from, t.to)).collect();
    assert_eq!(
        summary,
        [
            ("backlog", Some("orders"), Firing, Resolved),
            ("backlog", Some("payments"), Firing, Resolved),
            ("slow", Some("orders"), Pending, Inactive),
            ("slow", Some("payments"), Pending, Inactive),
        ]
    );
    assert!(ended.iter().all(|t| t.note.as_deref() == Some("queue deleted") && t.value.is_none()));
    assert_eq!(e.states(), []);
}

#[test]
fn a_broker_not_polled_yet_ends_nothing() {
    let mut e = Evaluator::new(vec![backlog(0, 0), unreachable(0)]);
    up(&mut e, 0, &[orders(42)]);
    down(&mut e, 10);
    assert_eq!(e.evaluate(at(20), &[]), []);
    assert_eq!(phase_of(&e, "backlog"), [Firing]);
    assert_eq!(phase_of(&e, "down"), [Firing]);
}

#[test]
fn restored_states_carry_on_without_firing_again() {
    let rules = vec![backlog(10, 0), Rule { id: "slow".to_string(), ..backlog(60, 0) }];
    let mut before = Evaluator::new(rules.clone());
    up(&mut before, 0, &[orders(42)]);
    up(&mut before, 10, &[orders(42)]);
    assert_eq!(phase_of(&before, "backlog"), [Firing]);
    assert_eq!(phase_of(&before, "slow"), [Pending]);
    let saved = serde_json::to_string(&before.states()).unwrap();

    // Restarted a minute later.
    let mut after = Evaluator::restore(rules, serde_json::from_str(&saved).unwrap());
    assert_eq!(after.states(), before.states());
    let t = up(&mut after, 70, &[orders(42)]);
    assert_eq!(phases(&t), [("slow", Pending, Firing)], "pending since 0 s; no new pending, no second firing");
    assert_eq!(after.states()[0].fired_at, Some(at(10)), "fired before the restart");
    let resolved = up(&mut after, 80, &[orders(3)]);
    assert_eq!(phases(&resolved), [("backlog", Firing, Resolved), ("slow", Firing, Resolved)]);
}

#[test]
fn edited_and_removed_rules_end_their_alerts() {
    let mut e = Evaluator::new(vec![backlog(0, 0), unreachable(0)]);
    let payments = queue("/", "payments").ready(42).view;
    up(&mut e, 0, &[orders(42), payments.clone()]);
    assert_eq!(e.states().len(), 2);

    let narrowed = Rule { scope: Scope { queue: "pay*".to_string(), ..Scope::default() }, ..backlog(0, 0) };
    e.set_rules(vec![narrowed, unreachable(0)]);
    let t = up(&mut e, 10, &[orders(42), payments.clone()]);
    assert_eq!(phases(&t), [("backlog", Firing, Resolved)]);
    assert_eq!((t[0].key.queue.as_deref(), t[0].note.as_deref()), (Some("orders"), Some("no longer matches the rule")));

    // A changed threshold applies to the firing alert at once.
    e.set_rules(vec![Rule { threshold: Some(100.0), ..backlog(0, 0) }, unreachable(0)]);
    assert_eq!(phases(&up(&mut e, 20, &[orders(42), payments.clone()])), [("backlog", Firing, Resolved)]);

    up(&mut e, 30, &[orders(420)]);
    down(&mut e, 40);
    e.set_rules(vec![]);
    let t = down(&mut e, 50);
    assert_eq!(phases(&t), [("backlog", Firing, Resolved), ("down", Firing, Resolved)]);
    assert!(t.iter().all(|t| t.note.as_deref() == Some("rule removed")), "even while the broker is down");
}

#[test]
fn dlq_rules_watch_dead_letter_queues_only() {
    let depth = Rule { id: "dlq".to_string(), metric: Metric::DlqDepth, threshold: Some(0.0), ..backlog(0, 0) };
    let inflow = Rule { id: "inflow".to_string(), metric: Metric::DlqInflow, threshold: Some(1.0), ..backlog(0, 0) };
    let mut e = Evaluator::new(vec![depth, inflow]);
    let dlq = |total: u64| queue("/", "orders.dlq").dlq().total(total).view;
    let work = queue("/", "orders").total(500).view;
    assert_eq!(phases(&up(&mut e, 0, &[dlq(5), work.clone()])), [("dlq", Inactive, Firing)], "inflow unknown yet");
    let t = up(&mut e, 10, &[dlq(55), work.clone()]);
    assert_eq!(phases(&t), [("inflow", Inactive, Firing)]);
    assert_eq!(t[0].value, Some(5.0), "50 dead letters in 10 s");
    assert_eq!(phases(&up(&mut e, 20, &[dlq(55), work])), [("inflow", Firing, Resolved)]);
}

#[test]
fn broker_scope_limits_broker_unreachable() {
    let only_prod = Rule { scope: Scope { broker: Some("prod".to_string()), ..Scope::default() }, ..unreachable(0) };
    let mut e = Evaluator::new(vec![only_prod]);
    assert_eq!(down(&mut e, 0), []);
    let t = e.evaluate(
        at(10),
        &[BrokerInput { name: "prod", up: false, queues: &[], values: Default::default(), nodes: None }],
    );
    assert_eq!(phases(&t), [("down", Inactive, Firing)]);
    assert_eq!(t[0].value, None, "a broker alert has no value");
}

/// Blocked connections are a broker's value: the rule fires after its `for`, holds while the
/// broker is down or the value unknown, and resolves when none are blocked.
#[test]
fn blocked_connections_fire_per_broker_and_hold_without_a_reading() {
    let rule =
        Rule { id: "blocked".to_string(), metric: Metric::BlockedConnections, threshold: Some(0.0), ..backlog(60, 0) };
    let mut e = Evaluator::new(vec![rule]);
    let input = |up: bool, blocked: Option<f64>| BrokerInput {
        name: "local",
        up,
        queues: &[],
        values: BrokerValues { blocked_connections: blocked, ..Default::default() },
        nodes: None,
    };
    assert_eq!(phases(&e.evaluate(at(0), &[input(true, Some(2.0))])), vec![("blocked", Inactive, Pending)]);
    assert!(e.evaluate(at(30), &[input(true, None)]).is_empty(), "unknown holds");
    assert!(e.evaluate(at(45), &[input(false, Some(0.0))]).is_empty(), "down holds");
    let fired = e.evaluate(at(60), &[input(true, Some(1.0))]);
    assert_eq!(phases(&fired), vec![("blocked", Pending, Firing)]);
    assert_eq!(fired[0].key, AlertKey::broker("local"));
    assert_eq!(fired[0].value, Some(1.0));
    assert_eq!(phases(&e.evaluate(at(70), &[input(true, Some(0.0))])), vec![("blocked", Firing, Resolved)]);
}

#[test]
fn unroutable_rate_fires_on_the_brokers_value_and_holds_while_unknown_or_down() {
    let rule = Rule {
        id: "unroutable".to_string(),
        metric: Metric::UnroutableRate,
        comparator: Some(Comparator::Gt),
        threshold: Some(0.0),
        ..backlog(0, 0)
    };
    let mut e = Evaluator::new(vec![rule]);
    let with = |e: &mut Evaluator, secs, up, rate| {
        e.evaluate(
            at(secs),
            &[BrokerInput {
                name: "local",
                up,
                queues: &[orders(0)],
                values: BrokerValues { unroutable_rate: rate, ..Default::default() },
                nodes: None,
            }],
        )
    };
    assert_eq!(with(&mut e, 0, true, Some(0.0)), []);
    let t = with(&mut e, 10, true, Some(2.5));
    assert_eq!(phases(&t), [("unroutable", Inactive, Firing)]);
    assert_eq!((t[0].value, &t[0].key), (Some(2.5), &AlertKey::broker("local")));
    // Unknown (no stats) and down: no opinion, the alert stays as it was.
    assert_eq!(with(&mut e, 20, true, None), []);
    assert_eq!(with(&mut e, 30, false, None), []);
    assert_eq!(phase_of(&e, "unroutable"), [Firing]);
    assert_eq!(phases(&with(&mut e, 40, true, Some(0.0))), [("unroutable", Firing, Resolved)]);
}

/// `node_down > 0` and `memory_alarm > 0` over a cluster whose node `rabbit@b` stops.
#[test]
fn node_rules_fire_per_node_and_hold_without_node_data() {
    use crate::broker::nodes::{Node, NodesLive};
    let node_down = Rule {
        id: "node-down".to_string(),
        metric: Metric::NodeDown,
        threshold: Some(0.0),
        for_secs: 30,
        ..backlog(0, 0)
    };
    let mem = Rule { id: "mem".to_string(), metric: Metric::MemoryAlarm, threshold: Some(0.0), ..backlog(0, 0) };
    let mut e = Evaluator::new(vec![node_down, mem]);
    let node = |name: &str, running: bool, alarm: Option<bool>| Node {
        name: name.to_string(),
        running: Some(running),
        mem_alarm: alarm,
        ..Node::default()
    };
    let mut cluster = NodesLive::default();
    let mut poll = |e: &mut Evaluator, secs: i64, nodes: Vec<Node>| {
        cluster.observe(nodes, at(secs));
        e.evaluate(
            at(secs),
            &[BrokerInput { name: "local", up: true, queues: &[], values: Default::default(), nodes: Some(&cluster) }],
        )
    };
    assert_eq!(poll(&mut e, 0, vec![node("rabbit@a", true, Some(false)), node("rabbit@b", true, Some(false))]), []);
    let t = poll(&mut e, 10, vec![node("rabbit@a", true, Some(true)), node("rabbit@b", false, None)]);
    assert_eq!(phases(&t), [("node-down", Inactive, Pending), ("mem", Inactive, Firing)]);
    assert_eq!(t[0].key, AlertKey::node("local", "rabbit@b"));
    assert_eq!(t[1].key.node.as_deref(), Some("rabbit@a"));
    assert_eq!(t[0].key.to_string(), "node 'rabbit@b' (broker 'local')");
    let t = poll(&mut e, 40, vec![node("rabbit@a", true, Some(true)), node("rabbit@b", false, None)]);
    assert_eq!(phases(&t), [("node-down", Pending, Firing)], "down for the rule's 30 s");
    // Without node data (the metrics collector off gives no alarms) the alert holds.
    let t = poll(&mut e, 50, vec![node("rabbit@a", true, None), node("rabbit@b", false, None)]);
    assert_eq!(t, []);
    // A broker that does not answer holds node alerts too.
    assert_eq!(down(&mut e, 60), []);
    let t = poll(&mut e, 70, vec![node("rabbit@a", true, Some(false))]);
    assert_eq!(
        phases(&t),
        [("mem", Firing, Resolved), ("node-down", Firing, Resolved)],
        "the alarm ended; rabbit@b left the cluster"
    );
    assert_eq!(t[1].note.as_deref(), Some("node left the cluster"));
}
