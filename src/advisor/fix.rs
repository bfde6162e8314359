//! A fix as a policy: the `rabbitmqctl set_policy` line and the JSON body of
//! `PUT /api/policies/{vhost}/{name}`, ready to copy.
//!
//! Only one policy applies to a queue (the one of highest priority), so a policy for one
//! queue carries the definition of the policy that applies now, with the fix's keys on top,
//! at a priority above it: applying it changes only what the fix says. A queue argument wins
//! over a policy for most keys, so a fix for a setting made by argument is a re-declaration,
//! not a policy (the rules say so in their summary).

use serde::Serialize;
use serde_json::{Map, Value};

use crate::metrics::QueueView;

/// The priority of warren's suggested policies: above the usual 0-10 of hand-made ones.
pub const PRIORITY: i64 = 100;

/// A policy that fixes a finding.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct PolicyFix {
    pub vhost: String,
    pub name: String,
    /// A regular expression matching the queue's name only.
    pub pattern: String,
    pub apply_to: &'static str,
    pub priority: i64,
    #[schema(value_type = Object)]
    pub definition: Map<String, Value>,
    /// The line to run on a broker node.
    pub command: String,
    /// The body of `PUT /api/policies/{vhost}/{name}` (the management API).
    pub json: String,
    /// What else applying it changes, if anything (the policy it takes over from).
    pub note: Option<String>,
}

/// Quotes a word for a POSIX shell.
fn quote(word: &str) -> String {
    format!("'{}'", word.replace('\'', "'\\''"))
}

/// A policy for queue `q` setting `keys` on top of the definition that applies to it now
/// (`without`: keys of that definition to leave out, such as `ha-*`).
pub fn for_queue(q: &QueueView, rule: &str, keys: &[(&str, Value)], without: &dyn Fn(&str) -> bool) -> PolicyFix {
    let mut definition: Map<String, Value> = Map::new();
    let inherited = q.policy.is_some();
    if inherited {
        for (k, v) in q.effective_policy.iter().filter(|(k, _)| !without(k)) {
            definition.insert(k.clone(), v.clone());
        }
    }
    for (k, v) in keys {
        definition.insert((*k).to_string(), v.clone());
    }
    let name = format!("warren-{rule}-{}", q.name);
    let pattern = format!("^{}$", regex::escape(&q.name));
    let body = serde_json::json!({
        "pattern": pattern,
        "definition": definition,
        "apply-to": "queues",
        "priority": PRIORITY,
    });
    let command = format!(
        "rabbitmqctl set_policy -p {} --apply-to queues --priority {PRIORITY} {} {} {}",
        quote(&q.vhost),
        quote(&name),
        quote(&pattern),
        quote(&Value::Object(definition.clone()).to_string())
    );
    let note = q.policy.as_ref().map(|p| {
        format!(
            "Policy {p} applies to this queue now; this one takes over (priority {PRIORITY} must be above {p}'s) \
             and keeps the settings it has in effect{}.",
            if keys.is_empty() { "" } else { ", with the fix's on top" }
        )
    });
    PolicyFix {
        vhost: q.vhost.to_string(),
        name,
        pattern,
        apply_to: "queues",
        priority: PRIORITY,
        definition,
        command,
        json: body.to_string(),
        note,
    }
}

/// No key left out.
pub fn keep_all(_: &str) -> bool {
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_policy_matches_the_queue_only_and_quotes_for_the_shell() {
        let mut q = crate::advisor::tests::queue("it's.q", "quorum");
        q.policy = Some("base".into());
        q.effective_policy = std::sync::Arc::new(serde_json::from_str(r#"{"max-length":5,"ha-mode":"all"}"#).unwrap());
        let fix = for_queue(&q, "r", &[("dead-letter-exchange", "dlx".into())], &|k| k.starts_with("ha-"));
        assert_eq!(fix.pattern, "^it's\\.q$");
        assert_eq!(
            Value::Object(fix.definition.clone()),
            serde_json::json!({"max-length":5,"dead-letter-exchange":"dlx"})
        );
        assert!(fix.command.contains("'^it'\\''s\\.q$'"), "{}", fix.command);
        assert!(fix
            .command
            .starts_with("rabbitmqctl set_policy -p 'v' --apply-to queues --priority 100 'warren-r-it'\\''s.q'"));
        assert!(fix.note.unwrap().contains("base"));
        let body: Value = serde_json::from_str(&fix.json).unwrap();
        assert_eq!(body["apply-to"], "queues");
    }
}
