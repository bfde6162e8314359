//! The advisor (issue 35): the configurations that lose or strand messages, flagged before
//! they do. Pure rules over what the poller already read (queue arguments and effective
//! policies, queue type, dead-letter routing, consumers, channels, counters, the DLQ
//! browser's snapshots): it asks the broker nothing, and each finding says how old each of
//! its inputs is (issue 35, must-have 4).
//!
//! A rule that needs a field the broker did not give (a listing refused with the metrics
//! collector off, a version it did not say) neither fires nor says all is well: the inputs it
//! lacked are listed in `Advice::unknown`.

pub mod acknowledge;
mod clients;
mod dead_letters;
mod fix;
mod queues;
mod rules;

use chrono::{DateTime, Utc};
use serde::Serialize;

pub use dead_letters::{needs_history, ttls_from_custody};
pub use fix::PolicyFix;
pub use rules::{rule_by_id, Rule, RULES};

use crate::dlq::browse::Snapshots;
use crate::live::BrokerLive;

/// How soon a finding needs attention.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, utoipa::ToSchema)]
#[schema(as = AdviceSeverity)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// Messages are lost or stranded now, or will be at the next failure.
    Critical,
    /// A risk that costs messages or time under load, on a failure, or at an upgrade.
    Warning,
    /// Worth knowing; nothing is lost by it alone.
    Notice,
}

impl Severity {
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Critical => "critical",
            Severity::Warning => "warning",
            Severity::Notice => "notice",
        }
    }

    pub const ALL: [Severity; 3] = [Severity::Critical, Severity::Warning, Severity::Notice];

    pub fn parse(text: &str) -> Option<Severity> {
        Severity::ALL.into_iter().find(|s| s.as_str() == text)
    }
}

/// One fact that made a rule fire: what it is, its value, and where warren read it
/// (`arguments`, `policy NAME`, `listing`, `consumers listing`, a snapshot).
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct Evidence {
    pub what: String,
    pub value: String,
    pub source: String,
    /// A counter that moves with traffic (ready messages, redeliveries, publishes): left out
    /// of the finding's fingerprint, so an acknowledgement outlives it.
    pub counter: bool,
}

/// How old one input of a finding is.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct InputAge {
    /// `queue metadata` (type, arguments, policy), `queue depth`, `queue counters`, `clients`
    /// (connections, channels, consumers), `broker version`, `snapshot`.
    pub input: &'static str,
    /// When warren read it; `None`: not known.
    pub as_of: Option<DateTime<Utc>>,
    /// Seconds between `as_of` and the evaluation.
    pub age_secs: Option<f64>,
}

/// How to remove the risk: a policy where a policy can, else a change of the client or of the
/// queue's declaration, in words.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct Fix {
    /// What to do, in one or two sentences.
    pub summary: String,
    /// The policy that fixes it, ready to copy; `None` where no policy can (a queue argument
    /// wins over a policy, a client setting is no policy's).
    pub policy: Option<PolicyFix>,
}

/// One finding: a rule that fires on one queue, channel or connection.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct Finding {
    /// The stable id of the rule (`quorum-without-dlx`); see `RULES` and docs/advisor.md.
    pub rule: &'static str,
    pub severity: Severity,
    /// The finding in one line, naming its subject.
    pub title: String,
    pub vhost: String,
    /// The queue it is about; `None` for a finding about a connection.
    pub queue: Option<String>,
    /// The connection it is about (the client's name when it gave one, and the broker's).
    pub connection: Option<String>,
    /// The facts that made the rule fire.
    pub evidence: Vec<Evidence>,
    /// Why it matters, in two sentences.
    pub why: &'static str,
    pub fix: Fix,
    /// For an upgrade blocker: which version refuses or removed it, and how warren knows.
    pub blocks_upgrade: Option<String>,
    /// How old each input of the finding is.
    pub inputs: Vec<InputAge>,
    /// 16 hex digits over the rule, the severity and the evidence that is not a counter: what
    /// an acknowledgement holds on to (`acknowledge`).
    pub fingerprint: String,
    /// Its acknowledgement, if someone gave one: `applies` false means the evidence changed
    /// since, and the finding is open again.
    pub acknowledgement: Option<acknowledge::AcknowledgementState>,
}

impl Finding {
    /// Acknowledged, with the evidence unchanged since: not open.
    pub fn acknowledged(&self) -> bool {
        self.acknowledgement.as_ref().is_some_and(|a| a.applies)
    }
}

/// Everything the advisor says of one broker.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct Advice {
    pub broker: String,
    /// When the rules ran (each request: they are cheap, and read only memory).
    pub evaluated_at: DateTime<Utc>,
    /// The broker's version as its last poll said, which some rules depend on.
    pub rabbitmq_version: Option<String>,
    /// Findings per rule, every rule listed; over all findings, whatever a filter kept.
    pub counts: Vec<RuleCount>,
    /// Most severe first, then by vhost, queue and rule.
    pub findings: Vec<Finding>,
    /// Of all findings, how many are acknowledged (with their evidence unchanged): the open
    /// ones are the others. 0 until acknowledgements were read (`acknowledge::apply`).
    pub acknowledged: usize,
    /// Inputs that were not known, so the rules that need them said nothing (which is not
    /// "all clear"): each with the rules it silenced and why.
    pub unknown: Vec<UnknownInput>,
    /// How old each input is, over the whole broker.
    pub inputs: Vec<InputAge>,
}

/// How many findings one rule raised, and whether it ran at all.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct RuleCount {
    pub rule: &'static str,
    pub title: &'static str,
    pub findings: usize,
    /// Of those, how many are acknowledged.
    pub acknowledged: usize,
    /// False when an input it needs was unknown: its 0 is then no "all clear".
    pub ran: bool,
}

/// An input the broker did not give, and the rules that therefore did not run.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct UnknownInput {
    pub input: &'static str,
    pub why: String,
    pub rules: Vec<&'static str>,
}

/// What the rules read besides a broker's live state.
#[derive(Default)]
pub struct Settings {
    /// How long one connection may hold all of a queue's unacked messages with no ack before
    /// it is a finding: the broker's `scheduled_hold_limit`.
    pub hold_limit_secs: f64,
    /// How far back a dead-letter queue's depth is compared (`dlq_growth_window_secs`).
    pub dlq_growth_window_secs: f64,
    /// What the web layer read from the database for the rules that need history.
    pub stored: Stored,
}

/// What a few rules read from warren's database rather than memory, loaded by the caller for
/// the queues that need it (`queues::needs_history`); absent entries are unknown, never clear.
#[derive(Debug, Default)]
pub struct Stored {
    /// Per dead-letter queue (vhost, name): its depth on the broker `dlq_growth_window_secs`
    /// ago, as (unix time of that reading, depth); `None` when warren stored none then (its
    /// history is younger, or has a gap there).
    pub dlq_depth_then: std::collections::HashMap<(String, String), Option<(i64, u64)>>,
    /// Per queue (vhost, name): the per-message TTLs (`expiration`) of its records in warren's
    /// custody, with how many records carry each, and how many records were read.
    pub custody_ttls: std::collections::HashMap<(String, String), (std::collections::BTreeMap<String, u64>, usize)>,
}

impl Settings {
    /// A broker's settings from its configuration (the defaults without one), with nothing
    /// read from the database.
    pub fn of(broker: Option<&crate::config::BrokerConfig>) -> Settings {
        let hold = broker.map(|b| b.scheduled_hold_limit.as_secs_f64());
        let growth = broker.map(|b| b.dlq_growth_window.as_secs_f64());
        Settings {
            hold_limit_secs: hold.unwrap_or(crate::config::DEFAULT_SCHEDULED_HOLD_LIMIT_SECS as f64),
            dlq_growth_window_secs: growth.unwrap_or(crate::config::DEFAULT_DLQ_GROWTH_WINDOW_SECS as f64),
            stored: Stored::default(),
        }
    }
}

/// RabbitMQ's (major, minor) from a version string (`3.10.8`).
pub fn major_minor(version: Option<&str>) -> Option<(u32, u32)> {
    let mut parts = version?.split('.');
    Some((parts.next()?.parse().ok()?, parts.next()?.parse().ok()?))
}

/// What the rules see: the broker's live state, with the ages of its inputs.
pub(crate) struct Inputs<'a> {
    pub live: &'a BrokerLive,
    pub snapshots: Option<&'a Snapshots>,
    pub settings: &'a Settings,
    pub now: DateTime<Utc>,
    pub version: Option<(u32, u32)>,
    /// Evaluate this queue only (vhost, name): a queue's page.
    pub only: Option<(&'a str, &'a str)>,
}

impl Inputs<'_> {
    /// The queues the rules look at: those the broker lists now, or the one asked for.
    pub fn queues(&self) -> impl Iterator<Item = &crate::metrics::QueueView> {
        self.live
            .queues
            .iter()
            .filter(|q| !q.deleted)
            .filter(|q| self.only.is_none_or(|(vhost, name)| *q.vhost == *vhost && *q.name == *name))
    }

    pub fn age(&self, input: &'static str) -> InputAge {
        let load = &self.live.load;
        let as_of = match input {
            "queue metadata" => load.metadata_sampled_at.or(load.depth_sampled_at).or(self.live.status.last_success),
            "queue depth" => load.depth_sampled_at.or(self.live.status.last_success),
            "queue counters" => load.rates_sampled_at,
            "clients" => self.live.clients.as_ref().map(|c| c.listed_at),
            "broker version" => self.live.status.last_success,
            _ => None,
        };
        age_at(input, as_of, self.now)
    }

    pub fn ages(&self, inputs: &[&'static str]) -> Vec<InputAge> {
        inputs.iter().map(|i| self.age(i)).collect()
    }
}

pub(crate) fn age_at(input: &'static str, as_of: Option<DateTime<Utc>>, now: DateTime<Utc>) -> InputAge {
    InputAge { input, as_of, age_secs: as_of.map(|t| ((now - t).num_milliseconds() as f64 / 1000.0).max(0.0)) }
}

/// The advice for one broker, from its live state (and the DLQ browser's snapshots, for the
/// per-message TTLs of retry queues).
pub fn advise(live: &BrokerLive, snapshots: Option<&Snapshots>, settings: &Settings, now: DateTime<Utc>) -> Advice {
    evaluate(live, snapshots, settings, now, None)
}

/// The advice for one queue (its page): the rules about queues and their consumers, for it
/// alone.
pub fn advise_queue(
    live: &BrokerLive,
    snapshots: Option<&Snapshots>,
    settings: &Settings,
    now: DateTime<Utc>,
    (vhost, name): (&str, &str),
) -> Advice {
    evaluate(live, snapshots, settings, now, Some((vhost, name)))
}

fn evaluate(
    live: &BrokerLive,
    snapshots: Option<&Snapshots>,
    settings: &Settings,
    now: DateTime<Utc>,
    only: Option<(&str, &str)>,
) -> Advice {
    let inputs =
        Inputs { live, snapshots, settings, now, version: major_minor(live.status.rabbitmq_version.as_deref()), only };
    let mut findings = Vec::new();
    let mut unknown = Vec::new();
    if live.status.last_success.is_none() && live.status.restored_from.is_none() {
        unknown.push(UnknownInput {
            input: "queue metadata",
            why: "the broker has not answered a poll yet".into(),
            rules: RULES.iter().map(|r| r.id).collect(),
        });
    }
    queues::evaluate(&inputs, &mut findings, &mut unknown);
    clients::evaluate(&inputs, &mut findings, &mut unknown);
    for f in &mut findings {
        f.fingerprint = acknowledge::fingerprint(f);
    }
    findings.sort_by(|a, b| {
        (a.severity, &a.vhost, &a.queue, &a.connection, a.rule).cmp(&(
            b.severity,
            &b.vhost,
            &b.queue,
            &b.connection,
            b.rule,
        ))
    });
    let counts = RULES
        .iter()
        .map(|r| RuleCount {
            rule: r.id,
            title: r.title,
            findings: findings.iter().filter(|f| f.rule == r.id).count(),
            acknowledged: 0,
            ran: !unknown.iter().any(|u: &UnknownInput| u.rules.contains(&r.id)),
        })
        .collect();
    Advice {
        broker: live.name.clone(),
        evaluated_at: now,
        rabbitmq_version: live.status.rabbitmq_version.clone(),
        counts,
        findings,
        acknowledged: 0,
        unknown,
        inputs: inputs.ages(&["queue metadata", "queue depth", "queue counters", "clients", "broker version"]),
    }
}

impl Advice {
    /// Whether a rule ran (its inputs were known).
    pub fn ran(&self, rule: &str) -> bool {
        !self.unknown.iter().any(|u| u.rules.contains(&rule))
    }

    /// Findings per severity, in `Severity::ALL`'s order.
    pub fn by_severity(&self) -> [(Severity, usize); 3] {
        Severity::ALL.map(|s| (s, self.findings.iter().filter(|f| f.severity == s).count()))
    }
}

pub(crate) fn evidence(what: &str, value: impl Into<String>, source: impl Into<String>) -> Evidence {
    Evidence { what: what.to_string(), value: value.into(), source: source.into(), counter: false }
}

/// Evidence that is a counter moving with traffic (`Evidence::counter`).
pub(crate) fn counter(what: &str, value: impl Into<String>, source: impl Into<String>) -> Evidence {
    Evidence { counter: true, ..evidence(what, value, source) }
}

/// A finding about queue `q` for rule `id`, with the rule's severity and text, and the ages of
/// the inputs it was read from.
fn queue_finding(
    inputs: &Inputs,
    q: &crate::metrics::QueueView,
    id: &'static str,
    title: String,
    evidence: Vec<Evidence>,
    fix: Fix,
    read_from: &[&'static str],
) -> Finding {
    let rule = rules::rule_by_id(id).expect("a rule of RULES");
    Finding {
        rule: id,
        severity: rule.severity,
        title,
        vhost: q.vhost.to_string(),
        queue: Some(q.name.to_string()),
        connection: None,
        evidence,
        why: rule.why,
        fix,
        blocks_upgrade: None,
        inputs: inputs.ages(read_from),
        fingerprint: String::new(),
        acknowledgement: None,
    }
}

#[cfg(test)]
mod tests;
