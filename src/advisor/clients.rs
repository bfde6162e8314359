//! The rules over the last client listing (`live::clients`): how consumers acknowledge and
//! prefetch, which channels publish without confirms, and who holds a queue's unacked
//! messages. The listing is refused with the metrics collector off: then these rules are
//! unknown, not clear.

use std::collections::BTreeMap;

use super::rules::{self, rule_by_id};
use super::{counter, evidence, Evidence, Finding, Fix, Inputs, UnknownInput};
use crate::broker::topology::dead_letter_config;
use crate::live::clients::{ClientsLive, QueueConsumer};
use crate::metrics::QueueView;

/// A channel's confirm flag comes with the broker's periodic channel stats, its publish
/// counter with the fine-grained ones, which can come first: measured on 4.0.5, a channel in
/// confirm mode was listed with 10 publishes and `confirm: false` in its first seconds. The
/// publishers of connections younger than this (two stats intervals and a listing's lag) are
/// not judged yet.
const CONFIRM_SETTLES_SECS: i64 = 15;

const CONSUMER_RULES: [&str; 4] =
    [rules::AUTO_ACK, rules::UNLIMITED_PREFETCH, rules::PREFETCH_ABOVE_PROCESSING, rules::SINGLE_HOLDER];

/// A prefetch is "far above" what a consumer works through when it is more than this many times
/// the messages it acknowledges in one processing time. Ten: RabbitMQ's guidance sizes a prefetch
/// at a few times what a consumer processes in a round trip, so that it never waits for the next
/// delivery; past ten times, nine tenths of the credit is never used in steady traffic and only
/// serves to pile a burst onto one consumer.
pub const PREFETCH_FACTOR: f64 = 10.0;

/// A prefetch at or below this is never "far above": 100 to 300 is the range RabbitMQ's
/// guidance calls reasonable for most work queues, and a smaller one costs little in a burst.
pub const PREFETCH_FLOOR: u64 = 100;

/// A finding about queue `q` for rule `id`, from the inputs this file reads.
fn finding(
    inputs: &Inputs,
    q: &QueueView,
    id: &'static str,
    title: String,
    evidence: Vec<Evidence>,
    fix: Fix,
) -> Finding {
    super::queue_finding(inputs, q, id, title, evidence, fix, &["clients", "queue metadata"])
}

/// A consumer as evidence: its tag and connection.
fn consumer_value(c: &QueueConsumer) -> String {
    format!("{} on {}", c.consumer.consumer_tag.as_deref().unwrap_or("(no tag)"), c.connection_label())
}

pub(crate) fn evaluate(inputs: &Inputs, out: &mut Vec<Finding>, unknown: &mut Vec<UnknownInput>) {
    let Some(clients) = inputs.live.clients.as_deref() else {
        unknown.push(UnknownInput {
            input: "clients",
            why: "connections, channels and consumers have not been listed yet".into(),
            rules: [&CONSUMER_RULES[..], &[rules::NO_CONFIRMS]].concat(),
        });
        return;
    };
    match &clients.consumers.unknown_why {
        Some(why) => {
            unknown.push(UnknownInput { input: "consumers", why: why.clone(), rules: CONSUMER_RULES.to_vec() })
        }
        None => {
            for q in inputs.queues().filter(|q| q.consumers != Some(0)) {
                let Some(consumers) = clients.queue_consumers(&q.vhost, &q.name) else { continue };
                if consumers.is_empty() {
                    continue;
                }
                auto_ack(inputs, q, &consumers, out);
                unlimited_prefetch(inputs, q, &consumers, clients, out);
                prefetch_above_processing(inputs, q, &consumers, out);
                single_holder(inputs, q, &consumers, out);
            }
        }
    }
    match &clients.channels.unknown_why {
        Some(why) if inputs.only.is_none() => {
            unknown.push(UnknownInput { input: "channels", why: why.clone(), rules: vec![rules::NO_CONFIRMS] })
        }
        Some(_) => {}
        None if inputs.only.is_none() => no_confirms(inputs, clients, out),
        None => {}
    }
}

fn auto_ack(inputs: &Inputs, q: &QueueView, consumers: &[QueueConsumer], out: &mut Vec<Finding>) {
    let auto: Vec<&QueueConsumer> = consumers.iter().filter(|c| c.consumer.ack_required == Some(false)).collect();
    if auto.is_empty() {
        return;
    }
    let dlx = dead_letter_config(&q.arguments, &q.effective_policy);
    let redelivered = q.counters.redeliver.filter(|n| *n > 0);
    if dlx.is_none() && redelivered.is_none() {
        return;
    }
    let mut evidence: Vec<Evidence> = auto
        .iter()
        .map(|c| self::evidence("consumer with automatic ack", consumer_value(c), "consumers listing"))
        .collect();
    if let Some((exchange, _, by)) = dlx {
        let exchange = if exchange.is_empty() { "(default exchange)".to_string() } else { exchange };
        evidence.push(self::evidence("dead-letter exchange", exchange, by));
    }
    if let Some(n) = redelivered {
        evidence.push(counter("redeliveries", n.to_string(), "queue counters"));
    }
    let fix = Fix {
        summary: "Consume with manual acknowledgements (no_ack / autoAck false), acknowledge after processing, and \
                  reject with requeue=false what fails for good so that it is dead-lettered."
            .into(),
        policy: None,
    };
    let title = format!("{} has {} consumer(s) with automatic acknowledgement", q.name, auto.len());
    out.push(finding(inputs, q, rules::AUTO_ACK, title, evidence, fix));
}

fn unlimited_prefetch(
    inputs: &Inputs,
    q: &QueueView,
    consumers: &[QueueConsumer],
    clients: &ClientsLive,
    out: &mut Vec<Finding>,
) {
    let channels = clients.channels.items.as_deref().unwrap_or_default();
    let unlimited: Vec<&QueueConsumer> = consumers
        .iter()
        .filter(|c| c.consumer.ack_required == Some(true) && c.consumer.prefetch_count == Some(0))
        // A global (per-channel) prefetch still bounds it (3.x).
        .filter(|c| {
            let channel = channels.iter().find(|x| Some(&x.name) == c.consumer.channel.as_ref());
            channel.and_then(|x| x.global_prefetch_count).unwrap_or(0) == 0
        })
        .collect();
    if unlimited.is_empty() {
        return;
    }
    let mut evidence: Vec<Evidence> = unlimited
        .iter()
        .map(|c| self::evidence("consumer with prefetch 0 (unlimited)", consumer_value(c), "consumers listing"))
        .collect();
    if let Some(ready) = q.ready {
        evidence.push(counter("ready messages", ready.to_string(), "listing"));
    }
    let fix = Fix {
        summary: "Set a prefetch (basic.qos) on the consumer's channel: a few times the messages it processes in one \
                  round trip, 10 to 300 for most work queues."
            .into(),
        policy: None,
    };
    let title = format!("{} has {} consumer(s) with unlimited prefetch", q.name, unlimited.len());
    out.push(finding(inputs, q, rules::UNLIMITED_PREFETCH, title, evidence, fix));
}

/// Consumers whose prefetch is more than `PREFETCH_FACTOR` times what they acknowledge in one
/// processing time. By Little's law, what a consumer acknowledges in one processing time (its
/// ack rate × the processing time, unacked ÷ ack rate) is what it holds: the queue's unacked ÷
/// its consumers, the ack rate shared evenly (the broker counts acks per queue, not per
/// consumer). Only while it acks and the queue has no backlog: with messages ready every
/// consumer fills its prefetch, and its holding says nothing of its processing.
fn prefetch_above_processing(inputs: &Inputs, q: &QueueView, consumers: &[QueueConsumer], out: &mut Vec<Finding>) {
    let (Some(ack_rate), Some(unacked), Some(ready)) = (q.ack_rate.filter(|r| *r > 0.0), q.unacked, q.ready) else {
        return;
    };
    let manual: Vec<&QueueConsumer> = consumers.iter().filter(|c| c.consumer.ack_required == Some(true)).collect();
    if manual.is_empty() || ready > 0 || q.own_reads {
        return;
    }
    let per_consumer = unacked as f64 / manual.len() as f64;
    let processing_secs = unacked as f64 / ack_rate;
    // At least one message: a consumer faster than a poll is seen holding none.
    let threshold = PREFETCH_FACTOR * per_consumer.max(1.0);
    let far: Vec<(&QueueConsumer, u64)> = manual
        .iter()
        .filter_map(|c| c.consumer.prefetch_count.map(|p| (*c, p)))
        .filter(|(_, p)| *p > PREFETCH_FLOOR && *p as f64 > threshold)
        .collect();
    let Some(largest) = far.iter().map(|(_, p)| *p).max() else { return };
    let mut evidence: Vec<Evidence> = far
        .iter()
        .map(|(c, p)| self::evidence("consumer prefetch", format!("{p}: {}", consumer_value(c)), "consumers listing"))
        .collect();
    evidence.push(self::evidence(
        "ack rate",
        format!("{ack_rate:.2} msg/s over {} consumer(s)", manual.len()),
        "queue counters",
    ));
    evidence.push(self::evidence(
        "processing time",
        format!("{processing_secs:.2} s (Little's law: unacked {unacked} ÷ ack rate)"),
        "listing and queue counters",
    ));
    evidence.push(self::evidence(
        "acknowledged per consumer in one processing time",
        format!("{per_consumer:.1} (limit {PREFETCH_FACTOR:.0}× that, and over {PREFETCH_FLOOR})"),
        "derived",
    ));
    let suggested = (per_consumer.max(1.0) * 3.0).ceil().max(10.0) as u64;
    let fix = Fix {
        summary: format!(
            "Lower the consumer's prefetch (basic.qos) to a few times what it holds while working: {suggested} or so              here, instead of {largest}."
        ),
        policy: None,
    };
    let title = format!("{} has {} consumer(s) with a prefetch far above what they process", q.name, far.len());
    let mut f = finding(inputs, q, rules::PREFETCH_ABOVE_PROCESSING, title, evidence, fix);
    f.inputs.push(inputs.age("queue counters"));
    out.push(f);
}

fn single_holder(inputs: &Inputs, q: &QueueView, consumers: &[QueueConsumer], out: &mut Vec<Finding>) {
    if q.unacked.unwrap_or(0) == 0 {
        return;
    }
    let held_secs = match (q.hung_consumer_secs, q.holding_secs) {
        (Some(a), Some(b)) => a.max(b),
        (a, b) => match a.or(b) {
            Some(s) => s,
            None => return,
        },
    };
    if held_secs < inputs.settings.hold_limit_secs {
        return;
    }
    // Every consumer whose channel may hold messages: one with an unknown count may too.
    let mut holders: Vec<String> =
        consumers.iter().filter(|c| c.channel_unacked != Some(0)).map(QueueConsumer::connection_label).collect();
    holders.sort();
    holders.dedup();
    let [holder] = holders.as_slice() else { return };
    let evidence = vec![
        counter("unacked messages", q.unacked.unwrap_or(0).to_string(), "listing"),
        evidence("held by", holder.clone(), "consumers and channels listing"),
        counter("no acknowledgement for", format!("{held_secs:.0} s"), "queue counters"),
        evidence("hold limit", format!("{:.0} s", inputs.settings.hold_limit_secs), "scheduled_hold_limit_secs"),
    ];
    let fix = Fix {
        summary: "Find out what the connection is doing (its client's logs, a thread dump); closing it hands the \
                  messages back to the queue. Consumer timeouts (consumer_timeout) bound how long a delivery may stay \
                  unacked."
            .into(),
        policy: None,
    };
    let title = format!("{} has all its unacked messages on one connection", q.name);
    let mut f = finding(inputs, q, rules::SINGLE_HOLDER, title, evidence, fix);
    f.connection = Some(holder.clone());
    f.inputs.push(inputs.age("queue counters"));
    out.push(f);
}

fn no_confirms(inputs: &Inputs, clients: &ClientsLive, out: &mut Vec<Finding>) {
    let channels = clients.channels.items.as_deref().unwrap_or_default();
    let connections = clients.connections.items.as_deref().unwrap_or_default();
    // Per connection: its channels that published without confirms.
    let mut by_connection: BTreeMap<(String, String), Vec<(String, u64)>> = BTreeMap::new();
    let listed_at = clients.listed_at.timestamp();
    for c in channels {
        let (Some(false), Some(published)) = (c.confirm, c.published.filter(|n| *n > 0)) else { continue };
        let connection = c.connection.clone().unwrap_or_else(|| c.name.clone());
        let connected_at = connections.iter().find(|x| x.name == connection).and_then(|x| x.connected_at);
        if connected_at.is_some_and(|t| listed_at - t < CONFIRM_SETTLES_SECS) {
            continue;
        }
        let vhost = c.vhost.clone().unwrap_or_default();
        by_connection.entry((vhost, connection)).or_default().push((c.name.clone(), published));
    }
    let rule = rule_by_id(rules::NO_CONFIRMS).expect("a rule of RULES");
    for ((vhost, connection), channels) in by_connection {
        let label = match connections.iter().find(|x| x.name == connection).and_then(|x| x.connection_name.clone()) {
            Some(own) => format!("{own} ({connection})"),
            None => connection.clone(),
        };
        let evidence = channels
            .iter()
            .map(|(name, n)| counter("channel without confirms", format!("{name}: {n} published"), "channels listing"))
            .collect();
        out.push(Finding {
            rule: rules::NO_CONFIRMS,
            severity: rule.severity,
            title: format!("{label} publishes on {} channel(s) without confirms", channels.len()),
            vhost,
            queue: None,
            connection: Some(label),
            evidence,
            why: rule.why,
            fix: Fix {
                summary: "Put the publishing channel in confirm mode (confirm.select) and treat a message as sent \
                          only once the broker acked it; retry on nack or timeout."
                    .into(),
                policy: None,
            },
            blocks_upgrade: None,
            inputs: inputs.ages(&["clients"]),
            fingerprint: String::new(),
            acknowledgement: None,
        });
    }
}
