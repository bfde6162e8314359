//! The alert evaluator: a state machine per (rule, queue or broker), advanced by one call per
//! poll with the brokers' live data and the time. No I/O: the caller persists [`AlertState`]s
//! and sends notifications for the [`Transition`]s it returns.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;

use chrono::{DateTime, TimeDelta, Utc};
use serde::{Deserialize, Serialize};

use super::rule::{Metric, Rule};
use super::value::{value, InflowTracker};
use crate::metrics::QueueView;

/// What one alert is about: a queue, or a whole broker for `broker_unreachable`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, utoipa::ToSchema)]
pub struct AlertKey {
    pub broker: String,
    /// `None` (with `queue`) for a broker-level alert.
    pub vhost: Option<String>,
    pub queue: Option<String>,
    /// The node of a node alert (`Metric::is_node`); left out of the stored key otherwise, so
    /// the keys of queue and broker alerts stay as they were.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
}

impl AlertKey {
    pub fn broker(broker: &str) -> Self {
        AlertKey { broker: broker.to_string(), vhost: None, queue: None, node: None }
    }

    pub fn node(broker: &str, node: &str) -> Self {
        AlertKey { broker: broker.to_string(), vhost: None, queue: None, node: Some(node.to_string()) }
    }

    pub fn queue(broker: &str, vhost: &str, queue: &str) -> Self {
        AlertKey {
            broker: broker.to_string(),
            vhost: Some(vhost.to_string()),
            queue: Some(queue.to_string()),
            node: None,
        }
    }

    pub fn of(view: &QueueView) -> Self {
        AlertKey::queue(&view.broker, &view.vhost, &view.name)
    }
}

impl fmt::Display for AlertKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(node) = &self.node {
            return write!(f, "node '{node}' (broker '{}')", self.broker);
        }
        match (&self.vhost, &self.queue) {
            (Some(vhost), Some(queue)) => write!(f, "queue '{queue}' (vhost '{vhost}', broker '{}')", self.broker),
            _ => write!(f, "broker '{}'", self.broker),
        }
    }
}

/// Where an alert is in its life. Only `pending` and `firing` alerts are kept; `inactive` and
/// `resolved` appear in transitions only.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum AlertPhase {
    Inactive,
    /// The condition holds, for less than the rule's `for` so far.
    Pending,
    Firing,
    /// Was firing, and the condition stopped holding for the rule's `keep_firing_for` (or the
    /// queue, the rule or the match went away).
    Resolved,
}

/// One pending or firing alert, as the caller persists it so that a restart neither forgets a
/// firing alert nor notifies it again.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct AlertState {
    pub rule_id: String,
    pub key: AlertKey,
    pub phase: AlertPhase,
    /// The first evaluation of this episode at which the condition held: `for` counts from here.
    pub active_since: DateTime<Utc>,
    pub fired_at: Option<DateTime<Utc>>,
    /// While firing: the first evaluation at which the condition no longer held;
    /// `keep_firing_for` counts from here, and a new true reading clears it.
    pub false_since: Option<DateTime<Utc>>,
    /// The value at the last evaluation that had one.
    pub last_value: Option<f64>,
    /// The last evaluation that had data for this alert; older than the latest evaluation while
    /// the alert is held for missing data.
    pub observed_at: DateTime<Utc>,
}

/// A change of an alert's phase, for the notifier and the alert history.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Transition {
    pub rule_id: String,
    pub key: AlertKey,
    pub from: AlertPhase,
    pub to: AlertPhase,
    /// The value that caused the change; `None` for broker alerts and when the alert ended
    /// without a reading (queue deleted, rule removed).
    pub value: Option<f64>,
    pub at: DateTime<Utc>,
    /// Why an alert ended other than by its condition: "queue deleted", "rule removed", ...
    pub note: Option<String>,
}

impl Transition {
    /// Whether anyone should be told: pending alerts come and go silently (that is what `for`
    /// is for); firing and resolving are news.
    pub fn notifies(&self) -> bool {
        matches!(self.to, AlertPhase::Firing | AlertPhase::Resolved)
    }
}

/// One broker as the evaluator sees it at one evaluation.
#[derive(Debug, Clone, Copy)]
pub struct BrokerInput<'a> {
    pub name: &'a str,
    /// The latest poll succeeded. A broker not polled yet (warren just started) must be left
    /// out of the input rather than reported up with no queues, which would read as "every
    /// queue deleted".
    pub up: bool,
    /// The queues of the latest successful poll; ignored while the broker is down.
    pub queues: &'a [QueueView],
    /// The cluster's nodes as last read; `None` (node alerts hold) before the first read.
    pub nodes: Option<&'a crate::broker::nodes::NodesLive>,
    /// The broker's own values (not of a queue), for broker-level rules.
    pub values: BrokerValues,
}

/// The values broker-level rules compare, `None` when the broker did not give them.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct BrokerValues {
    /// Connections blocked or blocking, from the last connections listing.
    pub blocked_connections: Option<f64>,
    /// Connections opened plus closed per second.
    pub connection_churn: Option<f64>,
    /// Unroutable publishes per second in the watched vhosts (returned + dropped).
    pub unroutable_rate: Option<f64>,
}

impl BrokerValues {
    pub fn get(&self, metric: Metric) -> Option<f64> {
        match metric {
            Metric::BlockedConnections => self.blocked_connections,
            Metric::ConnectionChurn => self.connection_churn,
            Metric::UnroutableRate => self.unroutable_rate,
            _ => None,
        }
    }
}

/// What one evaluation learnt about one alert.
enum Observation {
    /// The condition holds or not, with the value it was decided on.
    Known { holds: bool, value: Option<f64> },
    /// No value (the broker did not give it): the alert keeps its phase and timers.
    Missing,
}

/// Evaluates the rules over the brokers' live data, keeping the state of every pending and
/// firing alert.
#[derive(Debug, Default)]
pub struct Evaluator {
    rules: Vec<Rule>,
    /// Pending and firing alerts by (rule id, key); ordered so that transitions come out in the
    /// same order at every run.
    states: BTreeMap<(String, AlertKey), AlertState>,
    inflow: InflowTracker,
}

impl Evaluator {
    /// An evaluator with no alert in progress. `rules` must have passed `Rule::validate`.
    pub fn new(rules: Vec<Rule>) -> Self {
        Evaluator::restore(rules, Vec::new())
    }

    /// An evaluator that continues from persisted states: a firing alert stays firing without
    /// a new notification, a pending one keeps counting from its `active_since`. States of
    /// rules that are no longer in `rules` resolve at the next evaluation ("rule removed").
    pub fn restore(rules: Vec<Rule>, states: Vec<AlertState>) -> Self {
        let states = states
            .into_iter()
            .filter(|s| matches!(s.phase, AlertPhase::Pending | AlertPhase::Firing))
            .map(|s| ((s.rule_id.clone(), s.key.clone()), s))
            .collect();
        Evaluator { rules, states, inflow: InflowTracker::default() }
    }

    /// Replaces the rules; takes effect at the next evaluation. A rule keeps its alerts across
    /// an edit if its id stays: a changed threshold applies to the firing alert (which resolves
    /// by the usual `keep_firing_for` if the new condition no longer holds), a narrowed scope
    /// ends the alerts it no longer covers, a removed rule ends all of its alerts.
    pub fn set_rules(&mut self, rules: Vec<Rule>) {
        self.rules = rules;
    }

    pub fn rules(&self) -> &[Rule] {
        &self.rules
    }

    /// Keeps the alerts of the brokers `keep` names and forgets the others' (another replica
    /// evaluates those now), then takes `states` over: the stored alerts of brokers this one
    /// evaluates from now on, as the replica before it left them.
    pub fn hand_over(&mut self, keep: impl Fn(&str) -> bool, states: Vec<AlertState>) {
        self.states.retain(|(_, key), _| keep(&key.broker));
        for s in states.into_iter().filter(|s| matches!(s.phase, AlertPhase::Pending | AlertPhase::Firing)) {
            self.states.insert((s.rule_id.clone(), s.key.clone()), s);
        }
    }

    /// Every pending and firing alert, to persist or show.
    pub fn states(&self) -> Vec<AlertState> {
        self.states.values().cloned().collect()
    }

    /// Advances every alert to `now` and returns the phase changes, in a stable order.
    ///
    /// `brokers` lists every broker that has been polled at least once. While a broker is down
    /// its queue alerts hold (see the module docs) and its `broker_unreachable` alerts advance;
    /// a broker missing from `brokers` holds everything.
    pub fn evaluate(&mut self, now: DateTime<Utc>, brokers: &[BrokerInput<'_>]) -> Vec<Transition> {
        let inflows = self.observe_inflows(now, brokers);
        let mut transitions = Vec::new();
        // Alerts this evaluation had an opinion on (a reading, or a known-missing value); the
        // others are checked afterwards for having ended.
        let mut seen: HashSet<(String, AlertKey)> = HashSet::new();
        for rule in &self.rules {
            for broker in brokers.iter().filter(|b| rule.scope.matches_broker(b.name)) {
                if rule.metric == Metric::BrokerUnreachable {
                    let id = (rule.id.clone(), AlertKey::broker(broker.name));
                    let observation = Observation::Known { holds: !broker.up, value: None };
                    step(&mut self.states, rule, &id, observation, now, &mut transitions);
                    seen.insert(id);
                    continue;
                }
                if rule.metric.is_broker_level() {
                    // Held while the broker is down, as queue alerts are: no reading is no news.
                    let id = (rule.id.clone(), AlertKey::broker(broker.name));
                    let observation = match broker.values.get(rule.metric).filter(|_| broker.up) {
                        Some(v) => Observation::Known { holds: rule.holds(v), value: Some(v) },
                        None => Observation::Missing,
                    };
                    step(&mut self.states, rule, &id, observation, now, &mut transitions);
                    seen.insert(id);
                    continue;
                }
                if !broker.up {
                    continue;
                }
                if rule.metric.is_node() {
                    // Nodes not read yet: their alerts hold, as queue alerts do for missing data.
                    let Some(nodes) = broker.nodes.filter(|n| n.as_of.is_some()) else {
                        continue;
                    };
                    for node in &nodes.nodes {
                        let id = (rule.id.clone(), AlertKey::node(broker.name, &node.name));
                        let observation = match super::nodes::node_value(rule, node, nodes, now.timestamp()) {
                            Some(v) => Observation::Known { holds: rule.holds(v), value: Some(v) },
                            None => Observation::Missing,
                        };
                        step(&mut self.states, rule, &id, observation, now, &mut transitions);
                        seen.insert(id);
                    }
                    continue;
                }
                for view in broker.queues.iter().filter(|q| !q.deleted && rule.applies_to(q)) {
                    let id = (rule.id.clone(), AlertKey::of(view));
                    let reading = match rule.metric {
                        Metric::DlqInflow => inflows.get(&id.1).copied(),
                        metric => value(metric, view),
                    };
                    let observation = match reading {
                        Some(v) => Observation::Known { holds: rule.holds(v), value: Some(v) },
                        None => Observation::Missing,
                    };
                    step(&mut self.states, rule, &id, observation, now, &mut transitions);
                    seen.insert(id);
                }
            }
        }

        let unseen: Vec<(String, AlertKey)> = self.states.keys().filter(|id| !seen.contains(*id)).cloned().collect();
        for id in unseen {
            let Some(note) = why_ended(&self.rules, &id, brokers) else {
                continue;
            };
            if let Some(state) = self.states.remove(&id) {
                let to = if state.phase == AlertPhase::Firing { AlertPhase::Resolved } else { AlertPhase::Inactive };
                transitions.push(transition(&state, state.phase, to, None, now, Some(note)));
            }
        }
        transitions
    }

    /// Reads the depth of every DLQ of the brokers that are up, once per evaluation whatever
    /// the number of rules, and returns the inflows known so far.
    fn observe_inflows(&mut self, now: DateTime<Utc>, brokers: &[BrokerInput<'_>]) -> HashMap<AlertKey, f64> {
        let mut inflows = HashMap::new();
        let mut present = HashSet::new();
        for broker in brokers.iter().filter(|b| b.up) {
            for view in broker.queues.iter().filter(|q| q.dead_letters.is_dlq && !q.deleted) {
                let key = AlertKey::of(view);
                if let Some(rate) = self.inflow.observe(&key, view, now) {
                    inflows.insert(key.clone(), rate);
                }
                present.insert(key);
            }
        }
        // Keep the readings of brokers that are down or not polled: their queues may still be there.
        let up: HashSet<&str> = brokers.iter().filter(|b| b.up).map(|b| b.name).collect();
        self.inflow.retain(|key| present.contains(key) || !up.contains(key.broker.as_str()));
        inflows
    }
}

/// Advances one alert by one observation.
fn step(
    states: &mut BTreeMap<(String, AlertKey), AlertState>,
    rule: &Rule,
    id: &(String, AlertKey),
    observation: Observation,
    now: DateTime<Utc>,
    transitions: &mut Vec<Transition>,
) {
    // Missing data: whatever phase the alert is in, it stays there and its timers keep their
    // start times (module docs, "missing data").
    let Observation::Known { holds, value } = observation else {
        return;
    };
    let for_ = TimeDelta::seconds(rule.for_secs);
    let keep_firing_for = TimeDelta::seconds(rule.keep_firing_for_secs);
    let Some(mut state) = states.remove(id) else {
        if holds {
            let phase = if for_ <= TimeDelta::zero() { AlertPhase::Firing } else { AlertPhase::Pending };
            let state = AlertState {
                rule_id: id.0.clone(),
                key: id.1.clone(),
                phase,
                active_since: now,
                fired_at: (phase == AlertPhase::Firing).then_some(now),
                false_since: None,
                last_value: value,
                observed_at: now,
            };
            transitions.push(transition(&state, AlertPhase::Inactive, phase, value, now, None));
            states.insert(id.clone(), state);
        }
        return;
    };
    state.observed_at = now;
    state.last_value = value;
    match (state.phase, holds) {
        (AlertPhase::Pending, true) => {
            if now - state.active_since >= for_ {
                state.phase = AlertPhase::Firing;
                state.fired_at = Some(now);
                transitions.push(transition(&state, AlertPhase::Pending, AlertPhase::Firing, value, now, None));
            }
        }
        (AlertPhase::Pending, false) => {
            // Back to inactive, silently: it never fired.
            transitions.push(transition(&state, AlertPhase::Pending, AlertPhase::Inactive, value, now, None));
            return;
        }
        (AlertPhase::Firing, true) => state.false_since = None,
        (AlertPhase::Firing, false) => {
            let false_since = *state.false_since.get_or_insert(now);
            if now - false_since >= keep_firing_for {
                transitions.push(transition(&state, AlertPhase::Firing, AlertPhase::Resolved, value, now, None));
                return;
            }
        }
        // Only pending and firing alerts are stored (`restore` filters the rest).
        (AlertPhase::Inactive | AlertPhase::Resolved, _) => return,
    }
    states.insert(id.clone(), state);
}

/// Why an alert that this evaluation did not see has ended; `None` when it holds instead
/// because its data is missing (broker down or not polled yet).
fn why_ended(rules: &[Rule], id: &(String, AlertKey), brokers: &[BrokerInput<'_>]) -> Option<&'static str> {
    let (rule_id, key) = id;
    if !rules.iter().any(|r| &r.id == rule_id) {
        return Some("rule removed");
    }
    let broker = brokers.iter().find(|b| b.name == key.broker)?;
    if let Some(node) = &key.node {
        let nodes = broker.nodes.filter(|n| broker.up && n.as_of.is_some())?;
        if !nodes.nodes.iter().any(|n| &n.name == node) {
            return Some("node left the cluster");
        }
    }
    if let (Some(vhost), Some(queue)) = (&key.vhost, &key.queue) {
        if !broker.up {
            return None;
        }
        let present = broker.queues.iter().any(|q| *q.vhost == **vhost && *q.name == **queue && !q.deleted);
        if !present {
            return Some("queue deleted");
        }
    }
    // The queue (or broker) is there but the rule no longer covers it: an edited scope, a
    // queue that stopped being a DLQ, or a metric changed between queue and broker level.
    Some("no longer matches the rule")
}

fn transition(
    state: &AlertState,
    from: AlertPhase,
    to: AlertPhase,
    value: Option<f64>,
    at: DateTime<Utc>,
    note: Option<&str>,
) -> Transition {
    Transition {
        rule_id: state.rule_id.clone(),
        key: state.key.clone(),
        from,
        to,
        value,
        at,
        note: note.map(str::to_string),
    }
}
