//! The rules over each queue's own configuration and counters: the upgrade blockers, quorum
//! dead-lettering, length limits, dead-letter queues and retry queues.

use serde_json::{json, Value};

use super::fix::{for_queue, keep_all};
use super::rules;
use super::{counter, evidence, Evidence, Finding, Fix, Inputs, Severity, UnknownInput};
use crate::broker::policies::{configured_delivery_limit_of, overflow_of, Overflow, DEFAULT_DELIVERY_LIMIT_4X};
use crate::broker::topology::{dead_letter_config, QueueRole};
use crate::metrics::QueueView;

/// Where a setting of a queue comes from: its argument (which wins for these keys) or its
/// effective policy.
struct Setting<'a> {
    value: &'a Value,
    by_argument: bool,
    source: String,
}

fn setting<'a>(q: &'a QueueView, argument: &str, policy_key: &str) -> Option<Setting<'a>> {
    if let Some(value) = q.arguments.get(argument) {
        return Some(Setting { value, by_argument: true, source: format!("argument {argument}") });
    }
    q.effective_policy.get(policy_key).map(|value| Setting { value, by_argument: false, source: policy_source(q) })
}

fn policy_source(q: &QueueView) -> String {
    match &q.policy {
        Some(name) => format!("policy {name}"),
        // An operator policy, or a listing that named no policy.
        None => "effective policy".to_string(),
    }
}

fn text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// A finding about queue `q` for rule `id`, from the inputs this file reads.
pub(super) fn finding(
    inputs: &Inputs,
    q: &QueueView,
    id: &'static str,
    title: String,
    evidence: Vec<Evidence>,
    fix: Fix,
) -> Finding {
    super::queue_finding(inputs, q, id, title, evidence, fix, &["queue metadata"])
}

fn redeclare(what: &str) -> Fix {
    Fix {
        summary: format!(
            "{what} is a queue argument, which a policy cannot override: delete the queue and declare it again \
             without it (drain or move its messages first), and change the code that declares it."
        ),
        policy: None,
    }
}

pub(crate) fn evaluate(inputs: &Inputs, out: &mut Vec<Finding>, unknown: &mut Vec<UnknownInput>) {
    let mut exclusive_unknown = false;
    let mut counters_unknown = false;
    let mut version_unknown = false;
    for q in inputs.queues() {
        upgrade_blockers(inputs, q, out, &mut exclusive_unknown);
        if &*q.kind == "quorum" {
            quorum(inputs, q, out, &mut counters_unknown, &mut version_unknown);
        }
        length_limit(inputs, q, out);
        super::dead_letters::dead_letter_queue(inputs, q, out);
        super::dead_letters::retry_ttls(inputs, q, out);
    }
    if exclusive_unknown {
        unknown.push(UnknownInput {
            input: "queue exclusivity",
            why: "some non-durable queues are the last known state from the database, which does not keep whether a \
                  queue is exclusive"
                .into(),
            rules: vec![rules::TRANSIENT],
        });
    }
    if counters_unknown {
        unknown.push(UnknownInput {
            input: "queue counters",
            why: "the redelivery counter of some quorum queues is unknown (no message stats)".into(),
            rules: vec![rules::DELIVERY_LIMIT_OFF],
        });
    }
    if version_unknown {
        unknown.push(UnknownInput {
            input: "broker version",
            why: "the broker's version is not known yet, and with it the default delivery limit".into(),
            rules: vec![rules::QUORUM_WITHOUT_DLX],
        });
    }
}

fn upgrade_blockers(inputs: &Inputs, q: &QueueView, out: &mut Vec<Finding>, exclusive_unknown: &mut bool) {
    let ha: Vec<(&String, &Value)> = q.effective_policy.iter().filter(|(k, _)| k.starts_with("ha-")).collect();
    if !ha.is_empty() {
        let source = policy_source(q);
        let evidence = ha.iter().map(|(k, v)| super::queues::evidence(k, text(v), source.clone())).collect();
        let remaining = q.effective_policy.keys().filter(|k| !k.starts_with("ha-")).count();
        let fix = Fix {
            summary: format!(
                "Take the ha-* keys out of {source} (it applies to other queues too, most likely). A queue that needs \
                 replicas becomes a quorum queue: declare a new one and move the messages. The policy below does it \
                 for this queue alone{}.",
                if remaining == 0 { " (the policy then only holds the queue's other settings: none)" } else { "" }
            ),
            policy: (remaining > 0).then(|| for_queue(q, rules::CLASSIC_MIRRORING, &[], &|k| k.starts_with("ha-"))),
        };
        let mut f =
            finding(inputs, q, rules::CLASSIC_MIRRORING, format!("{} is mirrored by {source}", q.name), evidence, fix);
        f.blocks_upgrade = Some(
            "RabbitMQ 4.0 removed classic mirroring and refuses a policy with ha-* keys (measured on 4.0.5 and 4.3.6: \
             \"not recognised policy settings\")."
                .into(),
        );
        out.push(f);
    }
    if let Some(mode) = setting(q, "x-queue-mode", "queue-mode") {
        let fix = if mode.by_argument {
            redeclare("x-queue-mode")
        } else {
            Fix {
                summary: "Remove queue-mode from the policy: classic queues v2 keep messages on disk already.".into(),
                policy: (q.effective_policy.len() > 1)
                    .then(|| for_queue(q, rules::QUEUE_MODE, &[], &|k| k == "queue-mode")),
            }
        };
        let evidence = vec![evidence("queue mode", text(mode.value), mode.source)];
        let mut f = finding(inputs, q, rules::QUEUE_MODE, format!("{} sets a queue mode", q.name), evidence, fix);
        f.blocks_upgrade = Some(
            "Deprecated and ignored from RabbitMQ 4.0 (no lazy mode in classic queues v2); 4.0.5 and 4.3.6 still \
             accepted the argument when measured, a release that denies the deprecated feature refuses it."
                .into(),
        );
        out.push(f);
    }
    if let Some(version) = setting(q, "x-queue-version", "queue-version").filter(|s| s.value.as_i64() == Some(1)) {
        let fix = if version.by_argument {
            redeclare("x-queue-version=1")
        } else {
            Fix {
                summary: "Set queue-version 2 in the policy (the queue converts its storage in place).".into(),
                policy: Some(for_queue(q, rules::QUEUE_VERSION_1, &[("queue-version", json!(2))], &keep_all)),
            }
        };
        let evidence = vec![evidence("queue version", "1", version.source)];
        let mut f = finding(
            inputs,
            q,
            rules::QUEUE_VERSION_1,
            format!("{} uses classic queue storage v1", q.name),
            evidence,
            fix,
        );
        f.blocks_upgrade = Some(
            "RabbitMQ 4.3 refuses x-queue-version=1 (measured on 4.3.6: \"unsupported queue version '1'\"); 4.0.5 \
             still accepted it."
                .into(),
        );
        out.push(f);
    }
    if q.durable == Some(false) && &*q.kind == "classic" {
        match q.exclusive {
            None => *exclusive_unknown = true,
            Some(true) => {}
            Some(false) => {
                let evidence = vec![
                    evidence("durable", "false", "listing"),
                    evidence("exclusive", "false", "listing"),
                    evidence("auto-delete", "not read by warren", "listing"),
                ];
                let fix = Fix {
                    summary: "Declare the queue durable (a shared queue), or exclusive (a queue one connection owns, \
                              such as a reply queue); this is a declaration change in the client."
                        .into(),
                    policy: None,
                };
                let title = format!("{} is transient and not exclusive", q.name);
                let mut f = finding(inputs, q, rules::TRANSIENT, title, evidence, fix);
                f.blocks_upgrade = Some(
                    "Deprecated in RabbitMQ 4.x (transient_nonexcl_queues); 4.0.5 and 4.3.6 still accepted such a \
                     declaration when measured, a release that denies the deprecated feature refuses it."
                        .into(),
                );
                out.push(f);
            }
        }
    }
}

/// The delivery limit in force on a quorum queue and where it comes from; `None` when it
/// cannot be known (unknown version and nothing configured).
fn delivery_limit(inputs: &Inputs, q: &QueueView) -> Option<(Option<i64>, String)> {
    let configured = configured_delivery_limit_of(&q.arguments, &q.effective_policy);
    let source = || {
        if q.arguments.contains_key("x-delivery-limit") {
            "argument x-delivery-limit".to_string()
        } else {
            policy_source(q)
        }
    };
    match (inputs.version, configured) {
        (_, Some(limit)) => Some(((limit >= 0).then_some(limit), source())),
        (Some((major, _)), None) if major >= 4 => match q.delivery_limit {
            Some(limit) => Some(((limit >= 0).then_some(limit), "listing".to_string())),
            None => Some((Some(DEFAULT_DELIVERY_LIMIT_4X), "RabbitMQ 4.x default".to_string())),
        },
        (Some(_), None) => Some((None, "none set (RabbitMQ 3.x has no default)".to_string())),
        (None, None) => None,
    }
}

fn quorum(
    inputs: &Inputs,
    q: &QueueView,
    out: &mut Vec<Finding>,
    counters_unknown: &mut bool,
    version_unknown: &mut bool,
) {
    let dlx = dead_letter_config(&q.arguments, &q.effective_policy);
    let limit = delivery_limit(inputs, q);
    let Some(dlx) = dlx else {
        match &limit {
            None => *version_unknown = true,
            Some((None, _)) if inputs.version.is_some_and(|v| v.0 >= 4) => {}
            Some((None, _))
                if q.arguments.contains_key("x-delivery-limit")
                    || q.effective_policy.contains_key("delivery-limit") => {}
            Some((limit, source)) => {
                let dlq = format!("{}.dlq", q.name);
                let fix = Fix {
                    summary: format!(
                        "Declare a dead-letter queue ({dlq}, say) and point the queue's dead letters at it through the \
                         default exchange, dead-lettering at least once (which needs overflow reject-publish)."
                    ),
                    policy: Some(for_queue(
                        q,
                        rules::QUORUM_WITHOUT_DLX,
                        &[
                            ("dead-letter-exchange", json!("")),
                            ("dead-letter-routing-key", json!(dlq)),
                            ("dead-letter-strategy", json!("at-least-once")),
                            ("overflow", json!("reject-publish")),
                        ],
                        &keep_all,
                    )),
                };
                let mut evidence = vec![
                    super::queues::evidence("type", "quorum", "listing"),
                    super::queues::evidence("dead-letter exchange", "none", "arguments and effective policy"),
                ];
                let mut f = match limit {
                    Some(n) => {
                        evidence.push(super::queues::evidence("delivery limit", n.to_string(), source.clone()));
                        let title = format!("{} drops messages past {n} deliveries", q.name);
                        finding(inputs, q, rules::QUORUM_WITHOUT_DLX, title, evidence, fix)
                    }
                    None => {
                        evidence.push(super::queues::evidence("delivery limit", "none", source.clone()));
                        let title = format!("{} has no dead-letter target; on 4.x it drops past 20 deliveries", q.name);
                        let mut f = finding(inputs, q, rules::QUORUM_WITHOUT_DLX, title, evidence, fix);
                        // Nothing is dropped by a limit on 3.x yet: the upgrade sets one.
                        f.severity = Severity::Warning;
                        f
                    }
                };
                f.inputs.push(inputs.age("broker version"));
                out.push(f);
            }
        }
        return;
    };
    // The limit off, and messages coming back: a poison message loops for ever.
    if let Some((None, source)) = &limit {
        let off = q.arguments.get("x-delivery-limit").or(q.effective_policy.get("delivery-limit"));
        if off.is_some() || q.delivery_limit.is_some_and(|l| l < 0) {
            match q.counters.redeliver {
                None => *counters_unknown = true,
                Some(0) => {}
                Some(n) => {
                    let evidence = vec![
                        evidence("delivery limit", "off (-1)", source.clone()),
                        counter("redeliveries", n.to_string(), "queue counters"),
                    ];
                    let fix = Fix {
                        summary: "Set a delivery limit, so that a message failing every time goes to the dead-letter \
                                  target instead of round again."
                            .into(),
                        policy: Some(for_queue(
                            q,
                            rules::DELIVERY_LIMIT_OFF,
                            &[("delivery-limit", json!(20))],
                            &keep_all,
                        )),
                    };
                    let title = format!("{} redelivers without a delivery limit", q.name);
                    let mut f = finding(inputs, q, rules::DELIVERY_LIMIT_OFF, title, evidence, fix);
                    f.inputs.push(inputs.age("queue counters"));
                    out.push(f);
                }
            }
        }
    }
    let (exchange, _, dlx_source) = dlx;
    let dlx_evidence = evidence(
        "dead-letter exchange",
        if exchange.is_empty() { "(default exchange)".to_string() } else { exchange },
        if dlx_source == "arguments" { "argument x-dead-letter-exchange".to_string() } else { policy_source(q) },
    );
    let strategy = setting(q, "x-dead-letter-strategy", "dead-letter-strategy");
    let overflow = setting(q, "x-overflow", "overflow");
    let at_least_once = strategy.as_ref().is_some_and(|s| s.value.as_str() == Some("at-least-once"));
    let reject_publish = overflow.as_ref().is_some_and(|s| s.value.as_str() == Some("reject-publish"));
    let strategy_evidence = match &strategy {
        Some(s) => evidence("dead-letter strategy", text(s.value), s.source.clone()),
        None => evidence("dead-letter strategy", "at-most-once", "default"),
    };
    let overflow_evidence = match &overflow {
        Some(s) => evidence("overflow", text(s.value), s.source.clone()),
        None => evidence("overflow", "drop-head", "default"),
    };
    let fix = if strategy.as_ref().is_some_and(|s| s.by_argument && !at_least_once) {
        redeclare("x-dead-letter-strategy")
    } else if overflow.as_ref().is_some_and(|s| s.by_argument && !reject_publish) {
        redeclare("x-overflow")
    } else {
        Fix {
            summary: "Dead-letter at least once, with overflow reject-publish (a full queue then refuses publishes, \
                      which publishers with confirms see and retry)."
                .into(),
            policy: Some(for_queue(
                q,
                rules::AT_MOST_ONCE,
                &[("dead-letter-strategy", json!("at-least-once")), ("overflow", json!("reject-publish"))],
                &keep_all,
            )),
        }
    };
    if !at_least_once {
        let title = format!("{} dead-letters at most once", q.name);
        out.push(finding(inputs, q, rules::AT_MOST_ONCE, title, vec![dlx_evidence, strategy_evidence], fix));
    } else if !reject_publish {
        let title = format!("{} falls back to at-most-once dead-lettering", q.name);
        let evidence = vec![dlx_evidence, strategy_evidence, overflow_evidence];
        let mut fix = fix;
        if let Some(policy) = &mut fix.policy {
            *policy = for_queue(q, rules::AT_LEAST_ONCE_FALLBACK, &[("overflow", json!("reject-publish"))], &keep_all);
        }
        out.push(finding(inputs, q, rules::AT_LEAST_ONCE_FALLBACK, title, evidence, fix));
    }
}

/// The count limit (`x-max-length`, `max-length`; the lower wins) and where it is set.
fn count_limit(q: &QueueView) -> Option<(u64, String)> {
    let read = |v: Option<&Value>| v.and_then(Value::as_i64).filter(|n| *n >= 0);
    match (read(q.arguments.get("x-max-length")), read(q.effective_policy.get("max-length"))) {
        (Some(a), Some(p)) if p < a => Some((p as u64, policy_source(q))),
        (Some(a), _) => Some((a as u64, "argument x-max-length".into())),
        (None, Some(p)) => Some((p as u64, policy_source(q))),
        (None, None) => None,
    }
}

fn length_limit(inputs: &Inputs, q: &QueueView, out: &mut Vec<Finding>) {
    let overflow = overflow_of(&q.arguments, &q.effective_policy);
    let limit_text = match &overflow {
        Overflow::Unlimited => return,
        Overflow::DropHead { limit } | Overflow::RejectPublish { limit } => limit.clone(),
    };
    let overflow_setting = setting(q, "x-overflow", "overflow");
    let overflow_evidence = match &overflow_setting {
        Some(s) => evidence("overflow", text(s.value), s.source.clone()),
        None => evidence("overflow", "drop-head", "default"),
    };
    let role = q.dead_letters.role;
    let has_dlx = dead_letter_config(&q.arguments, &q.effective_policy).is_some();
    let works =
        role == QueueRole::Work || (q.consumers.unwrap_or(0) > 0 && !matches!(role, QueueRole::Dlq | QueueRole::Wait));
    if matches!(overflow, Overflow::DropHead { .. }) && works {
        let fix = if overflow_setting.as_ref().is_some_and(|s| s.by_argument) {
            redeclare("x-overflow")
        } else {
            Fix {
                summary: "Refuse publishes when full (overflow reject-publish) so that publishers with confirms see \
                          it and slow down, instead of losing the oldest work."
                    .into(),
                policy: Some(for_queue(q, rules::DROP_HEAD, &[("overflow", json!("reject-publish"))], &keep_all)),
            }
        };
        let mut evidence = vec![
            evidence("length limit", limit_text.clone(), "arguments and effective policy"),
            overflow_evidence.clone(),
            evidence(
                "dead-letter exchange",
                if has_dlx { "set" } else { "none: dropped messages are destroyed" },
                "arguments and effective policy",
            ),
        ];
        if let Some(n) = q.consumers {
            evidence.push(counter("consumers", n.to_string(), "listing"));
        }
        let title = format!("{} drops its oldest work when full", q.name);
        let mut f = finding(inputs, q, rules::DROP_HEAD, title, evidence, fix);
        if !has_dlx {
            f.severity = Severity::Critical;
        }
        out.push(f);
    }
    // Only ready messages count toward x-max-length.
    if let (Some((limit, source)), Some(ready)) = (count_limit(q), q.ready) {
        if ready >= limit {
            let evidence = vec![
                counter("ready messages", ready.to_string(), "listing"),
                evidence("max length", limit.to_string(), source),
                overflow_evidence,
            ];
            let what = match overflow {
                Overflow::RejectPublish { .. } => "refuses publishes",
                _ => "drops its oldest messages",
            };
            let fix = Fix {
                summary: "Find why it filled (consumers missing or too slow) and drain it; raise the limit only if \
                          the queue is meant to hold more."
                    .into(),
                policy: None,
            };
            let title = format!("{} is at its length limit and {what}", q.name);
            let mut f = finding(inputs, q, rules::LIMIT_REACHED, title, evidence, fix);
            if role == QueueRole::Dlq && matches!(overflow, Overflow::DropHead { .. }) {
                // A DLQ bounded by drop-head: its retention working as configured.
                f.severity = Severity::Notice;
            }
            f.inputs.push(inputs.age("queue depth"));
            out.push(f);
        }
    }
}
