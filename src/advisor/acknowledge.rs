//! Acknowledged findings (issue 35, must-have 2): someone read a finding and said why it may
//! stay. An acknowledgement holds the fingerprint of the evidence it was given for; while the
//! finding's fingerprint is the same, the finding is acknowledged (listed apart, counted apart),
//! and once the evidence changes it is open again and says so ("came back").
//!
//! The fingerprint covers the finding's severity and its evidence except the counters that move
//! with traffic (ready messages, redeliveries, publishes, how long a hold lasted: `Evidence::
//! counter`): an acknowledgement of a dead-letter queue without retention must survive its
//! next dead letter, but not a new policy, a new consumer or a raised severity.

use serde::Serialize;
use sha2::{Digest, Sha256};

use super::{Advice, Finding};
use crate::storage::acknowledgements::Acknowledgement;

/// Whether a finding is open or acknowledged, and by whom.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct AcknowledgementState {
    /// Who acknowledged it.
    pub by: String,
    /// When (RFC 3339).
    pub at: chrono::DateTime<chrono::Utc>,
    pub reason: String,
    /// The fingerprint of the evidence as acknowledged.
    pub fingerprint: String,
    /// True: the evidence is the same, the finding is acknowledged. False: the evidence changed
    /// since, so the acknowledgement no longer applies and the finding is open again.
    pub applies: bool,
}

/// The subject of a finding, the last part of its key: its queue, else its connection.
pub fn subject(f: &Finding) -> &str {
    f.queue.as_deref().or(f.connection.as_deref()).unwrap_or("")
}

/// The fingerprint of a finding's evidence: 16 hex digits of a SHA-256 over its rule, severity
/// and every piece of evidence that is not a counter.
pub fn fingerprint(f: &Finding) -> String {
    let mut hash = Sha256::new();
    for part in [f.rule, f.severity.as_str()] {
        hash.update(part.as_bytes());
        hash.update([0]);
    }
    let mut facts: Vec<_> = f.evidence.iter().filter(|e| !e.counter).collect();
    facts.sort_by(|a, b| (&a.what, &a.value, &a.source).cmp(&(&b.what, &b.value, &b.source)));
    for e in facts {
        for part in [&e.what, &e.value, &e.source] {
            hash.update(part.as_bytes());
            hash.update([0]);
        }
        hash.update([1]);
    }
    hash.finalize().iter().take(8).map(|b| format!("{b:02x}")).collect()
}

/// Marks each finding of `advice` with its acknowledgement, if any, and counts those that apply.
pub fn apply(advice: &mut Advice, acks: &[Acknowledgement]) {
    for f in &mut advice.findings {
        let ack = acks.iter().find(|a| a.rule == f.rule && a.vhost == f.vhost && a.subject == subject(f));
        f.acknowledgement = ack.map(|a| AcknowledgementState {
            by: a.actor.clone(),
            at: chrono::DateTime::from_timestamp(a.at, 0).unwrap_or_default(),
            reason: a.reason.clone(),
            fingerprint: a.fingerprint.clone(),
            applies: a.fingerprint == f.fingerprint,
        });
    }
    for count in &mut advice.counts {
        count.acknowledged = advice.findings.iter().filter(|f| f.rule == count.rule && f.acknowledged()).count();
    }
    advice.acknowledged = advice.findings.iter().filter(|f| f.acknowledged()).count();
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::advisor::{counter, evidence, Fix, Severity};

    fn finding() -> Finding {
        Finding {
            rule: "quorum-without-dlx",
            severity: Severity::Warning,
            title: "q".into(),
            vhost: "v".into(),
            queue: Some("q".into()),
            connection: None,
            evidence: vec![evidence("dead-letter exchange", "none", "arguments"), counter("messages", "3", "listing")],
            why: "",
            fix: Fix { summary: String::new(), policy: None },
            blocks_upgrade: None,
            inputs: vec![],
            fingerprint: String::new(),
            acknowledgement: None,
        }
    }

    #[test]
    fn counters_do_not_change_the_fingerprint_but_facts_and_severity_do() {
        let base = fingerprint(&finding());
        assert_eq!(base.len(), 16);
        let mut more = finding();
        more.evidence[1].value = "4000".into();
        assert_eq!(fingerprint(&more), base, "a counter moved");
        let mut changed = finding();
        changed.evidence[0].source = "policy p".into();
        assert_ne!(fingerprint(&changed), base, "a fact changed");
        let mut worse = finding();
        worse.severity = Severity::Critical;
        assert_ne!(fingerprint(&worse), base, "the severity rose");
        // Fields are separated: moving text from one to the next is another fingerprint.
        let mut shifted = finding();
        shifted.evidence[0].what = "dead-letter exchangenone".into();
        shifted.evidence[0].value = String::new();
        assert_ne!(fingerprint(&shifted), base);
    }
}
