//! An alert rule: what to watch (scope, metric), when it is bad (comparator, threshold, `for`),
//! how long it keeps firing once it looks fine again, and how loud it is. Rules are stored as
//! JSON and declared in TOML with the same field names, so one serde shape serves both.

use std::fmt;

use serde::{Deserialize, Serialize};

use super::template::template_problem;
use crate::config::{glob_match, invalid, read_entry, Config, ConfigError};
use crate::metrics::QueueView;

/// Longest `for_secs` and `keep_firing_for_secs` accepted: a week. Anything longer is almost
/// always milliseconds written where seconds belong, and would make the alert never fire.
pub const MAX_DURATION_SECS: i64 = 7 * 24 * 3600;

const MAX_ID_CHARS: usize = 64;
const MAX_NAME_CHARS: usize = 200;
const MAX_DESCRIPTION_CHARS: usize = 2000;

/// One alert rule. Call [`Rule::validate`] before handing it to the evaluator: the evaluator
/// assumes a valid rule (a queue metric without a threshold, for example, simply never holds).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Rule {
    /// Stable identifier (letters, digits, `-`, `_`, `.`). A string rather than a database
    /// number because rules declared in the TOML file have no row to number them, and the
    /// persisted alert states refer to their rule by this id across restarts.
    pub id: String,
    /// What the operator sees in the dashboard and in notifications.
    pub name: String,
    /// Which queues (or brokers) the rule watches; everything by default.
    #[serde(default)]
    pub scope: Scope,
    pub metric: Metric,
    /// Required for every metric but `broker_unreachable`, which has no number to compare.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub comparator: Option<Comparator>,
    /// Required for every metric but `broker_unreachable`. Counts are messages, ages seconds,
    /// rates messages per second.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub threshold: Option<f64>,
    /// How long the condition must hold before the alert fires (Prometheus `for`); 0 fires at
    /// the first evaluation that sees it.
    #[serde(default)]
    pub for_secs: i64,
    /// How long a firing alert keeps firing after its condition stopped holding (Prometheus
    /// `keep_firing_for`), so that a value hovering around the threshold does not notify on
    /// every crossing.
    #[serde(default)]
    pub keep_firing_for_secs: i64,
    pub severity: Severity,
    /// Notification text with placeholders (see `template::PLACEHOLDERS`); a generated sentence when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}

/// Which queues a rule watches. Patterns are globs (`*` any run of characters, `?` one
/// character) over whole names, as for `vhosts_include` in the configuration, or regular
/// expressions written `/.../`, which must match the whole name (anchored, as Prometheus label
/// matchers are): `/orders\.(eu|us)/` matches `orders.eu` but not `orders.eu.dlq`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(default, deny_unknown_fields)]
pub struct Scope {
    /// A broker name as configured; `None`: every broker.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub broker: Option<String>,
    /// Glob over vhost names.
    pub vhost: String,
    /// Glob over queue names.
    pub queue: String,
    /// `classic`, `quorum` or `stream`; `None`: any type.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub queue_type: Option<String>,
    /// Only dead-letter queues, as detected from topology (DOMAIN.md §4), not from names.
    pub dlq_only: bool,
    /// The compiled regular expressions of `vhost` and `queue`, built at the first match: a
    /// rule is matched against every queue at every poll.
    #[serde(skip)]
    pub(crate) compiled: Compiled,
}

/// A cache, equal to any other so that two scopes compare by their patterns.
#[derive(Debug, Clone, Default)]
pub(crate) struct Compiled(std::sync::OnceLock<[Option<regex::Regex>; 2]>);

impl PartialEq for Compiled {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

/// The regular expression of a `/.../` pattern, anchored; `None` for a glob.
fn regex_of(pattern: &str) -> Option<Result<regex::Regex, regex::Error>> {
    let inner = pattern.strip_prefix('/')?.strip_suffix('/')?;
    Some(regex::Regex::new(&format!("^(?:{inner})$")))
}

fn pattern_matches(pattern: &str, compiled: &Option<regex::Regex>, name: &str) -> bool {
    match compiled {
        Some(re) => re.is_match(name),
        // An invalid regex (refused by `validate`) matches nothing.
        None if regex_of(pattern).is_some() => false,
        None => glob_match(pattern, name),
    }
}

impl Default for Scope {
    fn default() -> Self {
        Scope {
            broker: None,
            vhost: "*".to_string(),
            queue: "*".to_string(),
            queue_type: None,
            dlq_only: false,
            compiled: Compiled::default(),
        }
    }
}

impl Scope {
    pub fn matches_broker(&self, broker: &str) -> bool {
        self.broker.as_deref().is_none_or(|b| b == broker)
    }

    pub fn matches(&self, view: &QueueView) -> bool {
        let [vhost, queue] = self
            .compiled
            .0
            .get_or_init(|| [regex_of(&self.vhost).and_then(Result::ok), regex_of(&self.queue).and_then(Result::ok)]);
        self.matches_broker(&view.broker)
            && pattern_matches(&self.vhost, vhost, &view.vhost)
            && pattern_matches(&self.queue, queue, &view.name)
            && self.queue_type.as_deref().is_none_or(|t| t == &*view.kind)
            && (!self.dlq_only || view.dead_letters.is_dlq)
    }

    /// The scope every queue matches, which is what a broker-level rule must have.
    fn is_everything_in_broker(&self) -> bool {
        self.vhost == "*" && self.queue == "*" && self.queue_type.is_none() && !self.dlq_only
    }
}

/// What a rule measures. Every metric but `broker_unreachable` is a per-queue value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Metric {
    Ready,
    Unacked,
    Total,
    Consumers,
    OldestAgeSecs,
    PublishRate,
    AckRate,
    DeliverRate,
    RedeliverRate,
    /// publish − ack, messages per second; positive means the backlog grows.
    BacklogGrowth,
    /// How long a consumer has held unacked messages with no ack while others wait
    /// (`QueueView::hung_consumer_secs`); 0 while none is hung, unknown without counters.
    HungConsumerSecs,
    /// How long a consumer has held unacked messages with none ready, as one holding scheduled
    /// messages does (`QueueView::holding_secs`); 0 while none does.
    HoldingSecs,
    /// The share of deliveries that were redeliveries, 0..1; unknown while warren's own reads
    /// are in the rates.
    RedeliveryShare,
    /// Messages arriving per second: the publish counter, or for a queue dead-letter routing
    /// feeds, depth change plus acks (a lower bound).
    InflowRate,
    /// Seconds the backlog takes to drain at current rates; unknown while it does not drain
    /// (watch `backlog_growth` for that).
    TimeToDrainSecs,
    /// How long deliveries have come back with nothing acked (poison messages going round,
    /// `QueueView::redelivery_loop_secs`); 0 while the queue is not in a loop.
    RedeliveryLoopSecs,
    /// Messages in a dead-letter queue.
    DlqDepth,
    /// Dead letters arriving per second (see `InflowTracker` for how it is measured).
    DlqInflow,
    /// The broker does not answer warren's polls.
    BrokerUnreachable,
    /// A queue in warren's custody whose intake stopped (a failed write, a full disk, the size
    /// budget): 1, else 0; no value without custody. Its dead letters stay in the broker.
    CustodyIntakeStopped,
    /// Per broker: connections in state blocked or blocking (a resource alarm or flow control
    /// holds their publishes), from the last connections listing.
    BlockedConnections,
    /// Per broker: connections opened plus closed per second (`/api/overview` churn counters).
    ConnectionChurn,
    /// Publishes dropped or returned as unroutable in the broker's watched vhosts, messages per
    /// second (`return_unroutable` + `drop_unroutable` of `/api/vhosts`): a broker-level value,
    /// unknown when the broker collects no message stats.
    UnroutableRate,
    // Node metrics (`broker::nodes`): one alert per node of the broker, keyed by node name.
    /// 1 when the broker lists the node as not running, else 0.
    NodeDown,
    /// 1 while the node's memory alarm is on (publishers blocked), else 0.
    MemoryAlarm,
    /// 1 while the node's free-disk alarm is on (publishers blocked), else 0.
    DiskAlarm,
    /// Seconds until free disk reaches the free-disk limit, by a least-squares line over the
    /// node's readings (`alerts::nodes`); unknown when the disk is not shrinking.
    DiskFreePredictedSecs,
    /// File descriptors used over their limit, 0..1.
    FdUsedRatio,
    /// How many nodes this node reports a network partition with.
    Partitions,
}

impl Metric {
    /// Every metric, in the order the rule form offers them.
    pub const ALL: &[Metric] = &[
        Metric::Ready,
        Metric::Unacked,
        Metric::Total,
        Metric::Consumers,
        Metric::OldestAgeSecs,
        Metric::PublishRate,
        Metric::AckRate,
        Metric::DeliverRate,
        Metric::RedeliverRate,
        Metric::BacklogGrowth,
        Metric::HungConsumerSecs,
        Metric::HoldingSecs,
        Metric::RedeliveryShare,
        Metric::RedeliveryLoopSecs,
        Metric::InflowRate,
        Metric::TimeToDrainSecs,
        Metric::DlqDepth,
        Metric::DlqInflow,
        Metric::BrokerUnreachable,
        Metric::CustodyIntakeStopped,
        Metric::BlockedConnections,
        Metric::ConnectionChurn,
        Metric::UnroutableRate,
        Metric::NodeDown,
        Metric::MemoryAlarm,
        Metric::DiskAlarm,
        Metric::DiskFreePredictedSecs,
        Metric::FdUsedRatio,
        Metric::Partitions,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Metric::Ready => "ready",
            Metric::Unacked => "unacked",
            Metric::Total => "total",
            Metric::Consumers => "consumers",
            Metric::OldestAgeSecs => "oldest_age_secs",
            Metric::PublishRate => "publish_rate",
            Metric::AckRate => "ack_rate",
            Metric::DeliverRate => "deliver_rate",
            Metric::RedeliverRate => "redeliver_rate",
            Metric::BacklogGrowth => "backlog_growth",
            Metric::HungConsumerSecs => "hung_consumer_secs",
            Metric::HoldingSecs => "holding_secs",
            Metric::RedeliveryShare => "redelivery_share",
            Metric::InflowRate => "inflow_rate",
            Metric::TimeToDrainSecs => "time_to_drain_secs",
            Metric::RedeliveryLoopSecs => "redelivery_loop_secs",
            Metric::DlqDepth => "dlq_depth",
            Metric::DlqInflow => "dlq_inflow",
            Metric::BrokerUnreachable => "broker_unreachable",
            Metric::CustodyIntakeStopped => "custody_intake_stopped",
            Metric::BlockedConnections => "blocked_connections",
            Metric::ConnectionChurn => "connection_churn",
            Metric::UnroutableRate => "unroutable_rate",
            Metric::NodeDown => "node_down",
            Metric::MemoryAlarm => "memory_alarm",
            Metric::DiskAlarm => "disk_alarm",
            Metric::DiskFreePredictedSecs => "disk_free_predicted_secs",
            Metric::FdUsedRatio => "fd_used_ratio",
            Metric::Partitions => "partitions",
        }
    }

    /// Metrics of a whole broker rather than of a queue: their rules have no queue scope.
    pub fn is_broker_level(self) -> bool {
        matches!(
            self,
            Metric::BrokerUnreachable | Metric::BlockedConnections | Metric::ConnectionChurn | Metric::UnroutableRate
        )
    }

    /// Metrics of a cluster node rather than a queue.
    pub fn is_node(self) -> bool {
        matches!(
            self,
            Metric::NodeDown
                | Metric::MemoryAlarm
                | Metric::DiskAlarm
                | Metric::DiskFreePredictedSecs
                | Metric::FdUsedRatio
                | Metric::Partitions
        )
    }

    /// Metrics that only mean something on a dead-letter queue: a rule on them watches DLQs
    /// only, whatever its `dlq_only` says.
    pub fn is_dlq(self) -> bool {
        matches!(self, Metric::DlqDepth | Metric::DlqInflow)
    }

    /// Only the backlog growth can go below zero; the rest are counts, ages and rates.
    fn can_be_negative(self) -> bool {
        self == Metric::BacklogGrowth
    }
}

/// How the value is compared with the threshold. `==` and `!=` compare exactly, which suits
/// counts (`consumers == 0`) and rarely rates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub enum Comparator {
    #[serde(rename = ">")]
    Gt,
    #[serde(rename = ">=")]
    Ge,
    #[serde(rename = "<")]
    Lt,
    #[serde(rename = "<=")]
    Le,
    #[serde(rename = "==")]
    Eq,
    #[serde(rename = "!=")]
    Ne,
}

impl Comparator {
    pub fn holds(self, value: f64, threshold: f64) -> bool {
        match self {
            Comparator::Gt => value > threshold,
            Comparator::Ge => value >= threshold,
            Comparator::Lt => value < threshold,
            Comparator::Le => value <= threshold,
            Comparator::Eq => value == threshold,
            Comparator::Ne => value != threshold,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Comparator::Gt => ">",
            Comparator::Ge => ">=",
            Comparator::Lt => "<",
            Comparator::Le => "<=",
            Comparator::Eq => "==",
            Comparator::Ne => "!=",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Info,
    Warning,
    Critical,
}

/// One problem with one field of a rule, for a form or an API answer to show next to it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FieldError {
    /// The field's path as written in TOML and JSON, e.g. `scope.queue`.
    pub field: &'static str,
    pub message: String,
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

impl Rule {
    /// The rules of the file (`[[alerts]]`), read where warren starts (`warren::Wings`): each
    /// checked as the rule editor checks it, ids unique, and a scope's broker configured.
    pub fn from_config(config: &Config) -> Result<Vec<Rule>, ConfigError> {
        let mut rules: Vec<Rule> = Vec::with_capacity(config.alerts.len());
        for (i, entry) in config.alerts.iter().enumerate() {
            let rule: Rule = read_entry("alerts", i, entry)?;
            if let Some(e) = rule.validate().into_iter().next() {
                return Err(invalid(format!("alerts[{i}].{}", e.field), e.message));
            }
            if rules.iter().any(|r| r.id == rule.id) {
                return Err(invalid(format!("alerts[{i}].id"), format!("{:?} is used twice", rule.id)));
            }
            if let Some(broker) = &rule.scope.broker {
                if !config.brokers.iter().any(|b| &b.name == broker) {
                    return Err(invalid(format!("alerts[{i}].scope.broker"), format!("no broker named {broker:?}")));
                }
            }
            rules.push(rule);
        }
        Ok(rules)
    }

    /// Whether the rule's condition holds for `value`; never for a rule without a comparator
    /// or threshold (which `validate` refuses).
    pub fn holds(&self, value: f64) -> bool {
        match (self.comparator, self.threshold) {
            (Some(comparator), Some(threshold)) => comparator.holds(value, threshold),
            _ => false,
        }
    }

    /// Whether the rule watches this queue: its scope matches, and DLQ metrics only apply to
    /// DLQs. A broker-level rule watches no queue.
    pub fn applies_to(&self, view: &QueueView) -> bool {
        !self.metric.is_broker_level()
            && !self.metric.is_node()
            && self.scope.matches(view)
            && (!self.metric.is_dlq() || view.dead_letters.is_dlq)
    }

    /// Every problem with the rule, by field; empty when the rule is valid.
    pub fn validate(&self) -> Vec<FieldError> {
        let mut errors = Vec::new();
        let mut error = |field: &'static str, message: String| errors.push(FieldError { field, message });

        for e in id_and_name_problems(&self.id, &self.name) {
            error(e.field, e.message);
        }

        if self.scope.broker.as_deref().is_some_and(|b| b.trim().is_empty()) {
            error("scope.broker", "must name a broker, or be left out for every broker".to_string());
        }
        for (field, pattern) in [("scope.vhost", &self.scope.vhost), ("scope.queue", &self.scope.queue)] {
            if let Some(message) = pattern_problem(pattern) {
                error(field, message);
            }
        }
        if let Some(kind) = &self.scope.queue_type {
            if !matches!(kind.as_str(), "classic" | "quorum" | "stream") {
                error("scope.queue_type", format!("must be classic, quorum or stream, not {kind:?}"));
            }
        }

        if self.metric == Metric::BrokerUnreachable {
            // The condition is the broker not answering: there is no queue and no number.
            if !self.scope.is_everything_in_broker() {
                error("scope", "broker_unreachable watches whole brokers: only scope.broker may be set".to_string());
            }
            if self.comparator.is_some() {
                error("comparator", "broker_unreachable has no value to compare; leave it out".to_string());
            }
            if self.threshold.is_some() {
                error("threshold", "broker_unreachable has no value to compare; leave it out".to_string());
            }
        } else {
            if self.metric.is_broker_level() && !self.scope.is_everything_in_broker() {
                error("scope", format!("{} watches whole brokers: only scope.broker may be set", self.metric.as_str()));
            }
            if self.metric.is_node() && !self.scope.is_everything_in_broker() {
                error(
                    "scope",
                    format!("{} watches every node of a broker: only scope.broker may be set", self.metric.as_str()),
                );
            }
            if self.comparator.is_none() {
                error("comparator", "required: one of >, >=, <, <=, ==, !=".to_string());
            }
            match self.threshold {
                None => error("threshold", "required".to_string()),
                Some(t) if !t.is_finite() => error("threshold", "must be a finite number".to_string()),
                Some(t) if t < 0.0 && !self.metric.can_be_negative() => {
                    error("threshold", format!("{} is never negative", self.metric.as_str()))
                }
                Some(_) => {}
            }
        }

        for (field, secs) in [("for_secs", self.for_secs), ("keep_firing_for_secs", self.keep_firing_for_secs)] {
            if !(0..=MAX_DURATION_SECS).contains(&secs) {
                error(field, format!("must be from 0 to {MAX_DURATION_SECS} seconds (a week)"));
            }
        }

        if let Some(description) = &self.description {
            if description.chars().count() > MAX_DESCRIPTION_CHARS {
                error("description", format!("must be at most {MAX_DESCRIPTION_CHARS} characters"));
            }
            if let Some(message) = template_problem(description, self.metric) {
                error("description", message);
            }
        }
        errors
    }
}

/// The checks every named thing (rules, notification channels) shares: an id usable in URLs
/// and config files, and a name to show.
pub(crate) fn id_and_name_problems(id: &str, name: &str) -> Vec<FieldError> {
    let mut errors = Vec::new();
    if id.is_empty() || id.chars().count() > MAX_ID_CHARS {
        errors.push(FieldError { field: "id", message: format!("must be 1 to {MAX_ID_CHARS} characters") });
    } else if !id.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')) {
        errors.push(FieldError { field: "id", message: "may only contain letters, digits, '-', '_' and '.'".into() });
    }
    if name.trim().is_empty() {
        errors.push(FieldError { field: "name", message: "must not be empty".into() });
    } else if name.chars().count() > MAX_NAME_CHARS {
        errors.push(FieldError { field: "name", message: format!("must be at most {MAX_NAME_CHARS} characters") });
    }
    errors
}

fn pattern_problem(pattern: &str) -> Option<String> {
    if pattern.is_empty() {
        return Some("must not be empty; * matches every name".to_string());
    }
    match regex_of(pattern) {
        Some(Err(e)) => Some(format!("not a valid regular expression: {}", e.to_string().lines().last().unwrap_or(""))),
        Some(Ok(_)) if pattern.len() > 1000 => Some("must be at most 1000 characters".to_string()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The file's rules are read by this wing where warren starts (`warren::Wings`), with
    /// errors naming the field as every configuration error does.
    #[test]
    fn the_files_rules_are_read_and_checked_with_their_field() {
        let read = |toml: &str| Rule::from_config(&Config::from_toml(toml).unwrap()).map_err(|e| e.to_string());
        let rule = "id = \"deep\"\nname = \"Deep\"\nmetric = \"ready\"\ncomparator = \">\"\nthreshold = 1\nseverity = \"info\"\n";
        let rules = read(&format!("[[alerts]]\n{rule}")).unwrap();
        assert_eq!((rules.len(), rules[0].threshold), (1, Some(1.0)));
        for (toml, says) in [
            (format!("[[alerts]]\n{rule}[[alerts]]\n{rule}"), "alerts[1].id: \"deep\" is used twice"),
            (format!("[[alerts]]\n{}", rule.replace("ready", "readyy")), "alerts[0].metric: unknown variant"),
            (format!("[[alerts]]\n{}", rule.replace("threshold = 1\n", "")), "alerts[0].threshold"),
            (format!("[[alerts]]\n{rule}scope = {{ broker = \"elsewhere\" }}\n"), "no broker named \"elsewhere\""),
        ] {
            let error = read(&toml).unwrap_err();
            assert!(error.starts_with("invalid configuration: ") && error.contains(says), "{toml}: {error}");
        }
    }
    use crate::alerts::testing::queue;

    fn rule(metric: Metric) -> Rule {
        Rule {
            id: "orders-backlog".to_string(),
            name: "Orders backlog".to_string(),
            scope: Scope::default(),
            metric,
            comparator: Some(Comparator::Gt),
            threshold: Some(10.0),
            for_secs: 60,
            keep_firing_for_secs: 0,
            severity: Severity::Warning,
            description: None,
        }
    }

    fn fields(rule: &Rule) -> Vec<&'static str> {
        rule.validate().into_iter().map(|e| e.field).collect()
    }

    #[test]
    fn declared_in_toml_and_stored_as_json() {
        #[derive(Deserialize)]
        struct File {
            alerts: Vec<Rule>,
        }
        let file: File = toml::from_str(
            r#"
            [[alerts]]
            id = "orders-backlog"
            name = "Orders backlog"
            scope = { vhost = "prod-*", queue = "orders.?" , queue_type = "quorum" }
            metric = "ready"
            comparator = ">="
            threshold = 10
            for_secs = 60
            severity = "critical"
            description = "{queue} has {value} ready"

            [[alerts]]
            id = "down"
            name = "Broker down"
            metric = "broker_unreachable"
            severity = "critical"
            "#,
        )
        .unwrap();
        let backlog = &file.alerts[0];
        assert_eq!((backlog.comparator, backlog.threshold), (Some(Comparator::Ge), Some(10.0)));
        assert_eq!((backlog.scope.vhost.as_str(), backlog.scope.queue_type.as_deref()), ("prod-*", Some("quorum")));
        assert_eq!(backlog.keep_firing_for_secs, 0, "durations default to 0");
        assert_eq!(file.alerts[1].scope, Scope::default());
        for rule in &file.alerts {
            assert_eq!(rule.validate(), vec![]);
            let json = serde_json::to_string(rule).unwrap();
            assert_eq!(&serde_json::from_str::<Rule>(&json).unwrap(), rule);
        }
        let json = serde_json::to_value(backlog).unwrap();
        assert_eq!((json["metric"].as_str(), json["comparator"].as_str()), (Some("ready"), Some(">=")));
        // A misspelt field is an error, not a silently ignored line.
        let typo = r#"{"id":"a","name":"a","metric":"ready","comparator":">","threshold":1,"for":5,"severity":"info"}"#;
        assert!(serde_json::from_str::<Rule>(typo).is_err());
    }

    #[test]
    fn a_sensible_rule_is_valid() {
        assert_eq!(rule(Metric::Ready).validate(), vec![]);
        let mut growth = rule(Metric::BacklogGrowth);
        growth.threshold = Some(-5.0);
        assert_eq!(growth.validate(), vec![], "the backlog can shrink: a negative threshold makes sense");
    }

    #[test]
    fn validation_names_each_bad_field() {
        let mut bad = rule(Metric::Ready);
        bad.id = "orders backlog".to_string();
        bad.name = "  ".to_string();
        bad.scope.vhost = String::new();
        bad.scope.queue = "/orders(/".to_string();
        bad.scope.queue_type = Some("lazy".to_string());
        bad.threshold = Some(f64::NAN);
        bad.for_secs = -1;
        bad.keep_firing_for_secs = MAX_DURATION_SECS + 1;
        bad.description = Some("{queue} is {colour}".to_string());
        assert_eq!(
            fields(&bad),
            vec![
                "id",
                "name",
                "scope.vhost",
                "scope.queue",
                "scope.queue_type",
                "threshold",
                "for_secs",
                "keep_firing_for_secs",
                "description"
            ]
        );
        let errors = bad.validate();
        assert!(errors[3].message.contains("not a valid regular expression"), "{}", errors[3]);
        assert!(errors[8].message.contains("{colour}"), "{}", errors[8]);

        let mut infinite = rule(Metric::PublishRate);
        infinite.threshold = Some(f64::INFINITY);
        assert_eq!(fields(&infinite), vec!["threshold"]);
        let mut missing = rule(Metric::Ready);
        (missing.comparator, missing.threshold) = (None, None);
        assert_eq!(fields(&missing), vec!["comparator", "threshold"]);
        let mut never = rule(Metric::Consumers);
        (never.comparator, never.threshold) = (Some(Comparator::Lt), Some(-1.0));
        assert_eq!(never.validate()[0].to_string(), "threshold: consumers is never negative");
        let mut unclosed = rule(Metric::Ready);
        unclosed.description = Some("{queue".to_string());
        assert_eq!(fields(&unclosed), vec!["description"]);
        let mut empty_broker = rule(Metric::Ready);
        empty_broker.scope.broker = Some(String::new());
        assert_eq!(fields(&empty_broker), vec!["scope.broker"]);
    }

    #[test]
    fn broker_unreachable_takes_no_queue_scope_or_threshold() {
        let mut down = rule(Metric::BrokerUnreachable);
        assert_eq!(fields(&down), vec!["comparator", "threshold"]);
        (down.comparator, down.threshold) = (None, None);
        down.scope.broker = Some("prod".to_string());
        assert_eq!(down.validate(), vec![]);
        down.scope.dlq_only = true;
        down.description = Some("{broker} lost at {value}".to_string());
        assert_eq!(fields(&down), vec!["scope", "description"]);
    }

    #[test]
    fn client_metrics_are_per_broker_with_a_threshold() {
        for metric in [Metric::BlockedConnections, Metric::ConnectionChurn] {
            let mut r = rule(metric);
            assert_eq!(r.validate(), vec![]);
            r.scope.queue = "orders".to_string();
            assert_eq!(fields(&r), vec!["scope"]);
            r.scope.queue = "*".to_string();
            r.threshold = None;
            assert_eq!(fields(&r), vec!["threshold"]);
        }
        let parsed: Rule = serde_json::from_value(serde_json::json!({"id": "b", "name": "B",
            "metric": "blocked_connections", "comparator": ">", "threshold": 0, "severity": "warning"}))
        .unwrap();
        assert_eq!(parsed.metric.as_str(), "blocked_connections");
    }

    #[test]
    fn unroutable_rate_is_a_broker_value_with_a_threshold() {
        let mut unroutable = rule(Metric::UnroutableRate);
        assert_eq!(unroutable.validate(), vec![]);
        assert!(!unroutable.applies_to(&queue("/", "orders").view), "no queue has it");
        unroutable.scope.queue = "orders".to_string();
        unroutable.threshold = None;
        assert_eq!(fields(&unroutable), vec!["scope", "threshold"]);
        unroutable.scope.queue = "*".to_string();
        unroutable.threshold = Some(0.0);
        unroutable.description = Some("{broker} drops {value}/s".to_string());
        assert_eq!(unroutable.validate(), vec![]);
        unroutable.description = Some("{queue} drops".to_string());
        assert_eq!(fields(&unroutable), vec!["description"]);
    }

    #[test]
    fn node_metrics_take_a_broker_scope_and_a_threshold() {
        let mut down = rule(Metric::NodeDown);
        assert_eq!(down.validate(), vec![]);
        down.scope.queue = "orders".to_string();
        assert_eq!(fields(&down), vec!["scope"]);
        assert!(!rule(Metric::FdUsedRatio).applies_to(&queue("/", "orders").view), "no queue has node values");
        let json = serde_json::to_value(rule(Metric::DiskFreePredictedSecs)).unwrap();
        assert_eq!(json["metric"], "disk_free_predicted_secs");
    }

    #[test]
    fn scope_matches_globs_types_and_dlqs() {
        let mut scope = Scope { vhost: "prod-*".to_string(), queue: "orders.?".to_string(), ..Scope::default() };
        assert!(scope.matches(&queue("prod-eu", "orders.1").view));
        assert!(!scope.matches(&queue("prod-eu", "orders.12").view), "? is one character");
        assert!(!scope.matches(&queue("staging", "orders.1").view));
        scope.queue_type = Some("quorum".to_string());
        assert!(!scope.matches(&queue("prod-eu", "orders.1").view), "the helper builds classic queues");
        assert!(scope.matches(&queue("prod-eu", "orders.1").kind("quorum").view));
        scope.broker = Some("other".to_string());
        assert!(!scope.matches(&queue("prod-eu", "orders.1").kind("quorum").view));

        // `/.../` is a regular expression over the whole name.
        let regex = Scope { queue: "/orders\\.(eu|us)/".to_string(), ..Scope::default() };
        assert!(regex.matches(&queue("/", "orders.eu").view));
        assert!(!regex.matches(&queue("/", "orders.eu.dlq").view), "anchored");
        assert!(!regex.matches(&queue("/", "orders.asia").view));
        assert!(rule(Metric::Ready).validate().is_empty());

        let dlqs = Scope { dlq_only: true, ..Scope::default() };
        assert!(!dlqs.matches(&queue("/", "orders").view));
        assert!(dlqs.matches(&queue("/", "orders.dlq").dlq().view));
        // DLQ metrics watch DLQs even without dlq_only; other metrics watch every queue.
        assert!(!rule(Metric::DlqDepth).applies_to(&queue("/", "orders").view));
        assert!(rule(Metric::DlqDepth).applies_to(&queue("/", "orders.dlq").dlq().view));
        assert!(rule(Metric::Ready).applies_to(&queue("/", "orders").view));
        assert!(!rule(Metric::BrokerUnreachable).applies_to(&queue("/", "orders").view));
        assert!(!rule(Metric::BlockedConnections).applies_to(&queue("/", "orders").view));
        assert!(!rule(Metric::ConnectionChurn).applies_to(&queue("/", "orders").view));
    }
}
