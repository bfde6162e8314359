//! Queue roles from the dead-letter graph (issue 17): a work queue, a wait (retry) queue, a
//! terminal dead-letter queue, or unknown, each with the reason a reader can check.
//!
//! A queue that some queue dead-letters into is not always a dead end. In the delayed-retry
//! pattern a wait queue holds failed messages for a TTL and dead-letters them back into the work
//! queue (DOMAIN.md §8), so the live work queue is a dead-letter target too. Frameworks that
//! give every retry its own delay publish the copy with a per-message `expiration`, so the wait
//! queue has no `x-message-ttl` and nothing dead-letters into it: only its place in the graph
//! (it feeds a consumed queue and is consumed by nobody) says what it is. Consumers are the one
//! observation read here: they cost nothing (the listing has them) and are what tells a queue
//! that processes messages from one that keeps them.

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};

use serde::Serialize;
use serde_json::{Map, Value};

/// What a queue is for, as far as the topology and its consumers tell.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum QueueRole {
    /// Messages are processed here: it has consumers, or the only dead letters it receives come
    /// back from its own wait queue.
    Work,
    /// A retry (delay) queue: messages wait out a TTL and dead-letter back into a work queue.
    Wait,
    /// A terminal dead-letter queue: dead letters end here and do not go back to their queue.
    Dlq,
    /// An error (parking) queue an application fills: no dead-letter routing leads here, but the
    /// messages warren read in it were republished by a framework's error handler (or moved here
    /// with their deaths). Seen in its messages, so known only once they were read.
    Error,
    #[default]
    Unknown,
}

impl QueueRole {
    pub fn as_str(self) -> &'static str {
        match self {
            QueueRole::Work => "work",
            QueueRole::Wait => "wait",
            QueueRole::Dlq => "dlq",
            QueueRole::Error => "error",
            QueueRole::Unknown => "unknown",
        }
    }
}

/// A queue's role, why, and (for a DLQ) the queues whose dead letters end in it.
#[derive(Debug, Clone, PartialEq)]
pub struct Classified {
    pub role: QueueRole,
    pub reason: Cow<'static, str>,
    pub dlq_sources: Vec<String>,
    /// `Work` only because it dead-letters somewhere (`DeadLetterInfo::work_unconfirmed`).
    pub work_unconfirmed: bool,
}

/// The role of a queue that no dead-letter routing touches.
pub fn plain_role(consumers: Option<u64>) -> (QueueRole, Cow<'static, str>) {
    if consumers.unwrap_or(0) > 0 {
        (QueueRole::Work, Cow::Borrowed("has consumers"))
    } else {
        (QueueRole::Unknown, Cow::Borrowed("no consumers, and no dead-letter routing says what it is for"))
    }
}

/// What warren saw in a queue's messages when it last read them (a snapshot): what the
/// topology cannot say. An application's error queue has no dead-letter routing into it; only
/// the headers of the copies its framework republished into it tell what it is.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Seen {
    /// When they were read, in words (`2026-12-02 10:00 UTC`).
    pub at: String,
    pub read: usize,
    /// Messages a framework's error handler republished (an error or an origin in its headers,
    /// no `x-death`), and the headers the first was recognised by.
    pub republished: usize,
    pub republished_from: Option<&'static str>,
    /// Messages with an `x-death`: the broker dead-lettered them, then they were moved here.
    pub dead_lettered: usize,
    /// Where the messages read came from (the queue each died or failed in), with counts, most
    /// first: the feeders observed, beside the configured ones.
    pub origins: Vec<(String, usize)>,
    /// Unix seconds of the head message's newest death (its newest `x-death` entry's `time`:
    /// when it first died in that queue for that reason), for the oldest dead letter's age.
    pub head_died_at: Option<i64>,
}

/// Names that error and parking queues are often given: a hint only, never a classification
/// (DOMAIN.md §4: detect from topology, not names). Returns the part of the name that matched.
pub fn error_name_hint(name: &str) -> Option<&'static str> {
    const ENDINGS: &[&str] =
        &["parking-lot", "parking_lot", "parking.lot", "dead-letter", "dead_letter", "dead.letter", "dead-letters"];
    const LAST: &[&str] = &[
        "error",
        "errors",
        "dlq",
        "dead",
        "deadletter",
        "deadletters",
        "parking",
        "parkinglot",
        "skipped",
        "failed",
        "poison",
        "xq",
    ];
    let lower = name.to_ascii_lowercase();
    if let Some(ending) = ENDINGS.iter().copied().find(|e| lower.ends_with(e)) {
        return Some(ending);
    }
    let last = lower.rsplit(['.', '_', '-', ':', '/']).next().unwrap_or_default();
    LAST.iter().copied().find(|m| *m == last)
}

/// The role the messages read say a queue has, where the topology gave it none of its own
/// (`Unknown`, or `Work` only because something consumes it, which warren's own mover does
/// while it moves). At least half of what was read must say it: one stray copy does not make a
/// queue an error queue.
pub fn observed_role(seen: &Seen) -> Option<(QueueRole, String)> {
    if seen.read == 0 {
        return None;
    }
    let origins = if seen.origins.is_empty() {
        String::new()
    } else {
        let top: Vec<String> = seen.origins.iter().take(5).map(|(q, n)| format!("{q} ({n})")).collect();
        format!("; they came from {}", top.join(", "))
    };
    if seen.republished * 2 >= seen.read {
        let from = seen.republished_from.unwrap_or("an error header");
        return Some((
            QueueRole::Error,
            format!(
                "{} of {} messages read at {} were republished into it by an application's error handler (no \
                 x-death; recognised by {from}){origins}: an error queue the application fills",
                seen.republished, seen.read, seen.at
            ),
        ));
    }
    if seen.dead_lettered * 2 >= seen.read {
        return Some((
            QueueRole::Error,
            format!(
                "{} of {} messages read at {} are dead letters (x-death), though no dead-letter routing leads here: \
                 a parking queue they were moved into{origins}",
                seen.dead_lettered, seen.read, seen.at
            ),
        ));
    }
    None
}

/// The message TTL in force, in milliseconds: `x-message-ttl` or the policy's `message-ttl`
/// (RabbitMQ applies the lower of the two when both are set). A value that is not a
/// non-negative number is ignored, as the broker would refuse it.
pub fn message_ttl_ms(arguments: &Map<String, Value>, effective_policy: &Map<String, Value>) -> Option<u64> {
    let read = |v: Option<&Value>| v.and_then(Value::as_f64).filter(|ms| ms.is_finite() && *ms >= 0.0);
    match (read(arguments.get("x-message-ttl")), read(effective_policy.get("message-ttl"))) {
        (Some(a), Some(p)) => Some(a.min(p) as u64),
        (a, p) => a.or(p).map(|ms| ms as u64),
    }
}

/// One queue as the role rules read it.
pub struct Node<'a> {
    pub name: &'a str,
    /// Queues its dead letters reach (`None`: no DLX, or routing not known yet).
    pub targets: Option<&'a [String]>,
    pub ttl_ms: Option<u64>,
    pub consumers: Option<u64>,
    /// When warren last saw it with consumers while it was not a dead-letter queue, in words
    /// (`None`: never, as far as warren's stored observations go). A work queue whose consumers
    /// died, or have not connected yet, is still the queue that processes messages: one poll's
    /// consumer count must not turn it into a DLQ (issue 31, case 3).
    pub worked_at: Option<String>,
    /// It has a length limit: a full queue dead-letters its oldest messages (drop-head), as a
    /// DLQ that overflows into a parking queue does.
    pub limited: bool,
}

/// Queue names for a reason, the first few only: a fanout DLX can name thousands.
fn names(queues: &[&str]) -> String {
    const SHOWN: usize = 5;
    if queues.len() <= SHOWN {
        return queues.join(", ");
    }
    format!("{} and {} more", queues[..SHOWN].join(", "), queues.len() - SHOWN)
}

/// Classifies every queue that dead-letters somewhere or receives dead letters. Queues named as
/// targets but absent from `nodes` (the default exchange routes by name to queues that may not
/// exist) are classified too, as queues with no consumers.
pub fn classify<'a>(nodes: &[Node<'a>]) -> HashMap<&'a str, Classified> {
    let by_name: HashMap<&str, &Node> = nodes.iter().map(|n| (n.name, n)).collect();
    let consumed_now = |q: &str| by_name.get(q).and_then(|n| n.consumers).unwrap_or(0) > 0;
    let worked_at = |q: &str| by_name.get(q).and_then(|n| n.worked_at.as_deref());
    // Consumers now, or seen by warren before: what tells a queue that processes messages.
    let live = |q: &str| consumed_now(q) || worked_at(q).is_some();
    // What `live` rests on, for the reasons.
    let live_words = |q: &str| match worked_at(q) {
        _ if consumed_now(q) => "has consumers".to_string(),
        Some(at) => format!("had consumers when warren last saw them ({at}), none now"),
        None => "has no consumers".to_string(),
    };
    let ttl = |q: &str| by_name.get(q).and_then(|n| n.ttl_ms);
    // A queue that dead-letters into itself puts rejects back at its own tail: that edge says
    // nothing about other queues, so it is kept apart.
    let mut out: HashMap<&str, Vec<&str>> = HashMap::new();
    let mut into: HashMap<&str, Vec<&str>> = HashMap::new();
    let mut self_loops: HashSet<&str> = HashSet::new();
    for n in nodes {
        for t in n.targets.into_iter().flatten() {
            if t == n.name {
                self_loops.insert(n.name);
            } else {
                out.entry(n.name).or_default().push(t);
                into.entry(t.as_str()).or_default().push(n.name);
            }
        }
    }
    let empty: Vec<&str> = Vec::new();
    let out_of = |q: &str| out.get(q).unwrap_or(&empty);
    let into_of = |q: &str| into.get(q).unwrap_or(&empty);
    // A set, not a scan of `out`: one fanout DLX bound to every queue gives each queue as many
    // edges as there are queues, and anyone who may declare a queue shapes this graph.
    let edges: HashSet<(&str, &str)> = out.iter().flat_map(|(f, ts)| ts.iter().map(move |t| (*f, *t))).collect();
    let edge = |from: &str, to: &str| edges.contains(&(from, to));
    // A queue the dead letters of `w` reach that is itself no dead end: it has no TTL (so it
    // does not pass messages on by expiring them, as a DLQ with a retention does), is fed only
    // by queues nothing dead-letters into (the application's entry queues, such as wait queues
    // it republishes failures to), has no length limit (so it does not pass on its oldest when
    // full either), and its own dead letters go onward into terminal queues (no DLX of their
    // own): so it dead-letters only what a consumer rejects. That is the work queue of a
    // delayed-retry topology, whose rejects end in the final DLQ, whatever its consumers do now
    // (issue 31, case 3).
    let onward_to_terminal = |t: &str, w: &str| -> Option<Vec<&str>> {
        let onward = out.get(t)?;
        let terminal = onward.iter().all(|d| *d != w && out.get(d).is_none_or(|o| o.is_empty()));
        let entry_fed = into.get(t).into_iter().flatten().all(|f| into.get(f).is_none_or(|i| i.is_empty()));
        let limited = by_name.get(t).is_some_and(|n| n.limited);
        (ttl(t).is_none() && !limited && !edge(t, w) && terminal && entry_fed).then(|| onward.clone())
    };

    // Wait queues first: whether a dead-letter target is a DLQ depends on whether its feeders
    // are wait queues, and a wait queue is recognised without knowing the target's role.
    let mut waits: HashMap<&str, String> = HashMap::new();
    for n in nodes {
        let w = n.name;
        if live(w) || out_of(w).is_empty() {
            continue;
        }
        let targets = out_of(w);
        let returning: Vec<&str> = targets.iter().copied().filter(|t| edge(t, w)).collect();
        let consumed: Vec<&str> = targets.iter().copied().filter(|t| live(t)).collect();
        // A TTL alone does not make a wait queue: a DLQ that expires old dead letters into a
        // parking queue has one too. Its messages must go back where they came from, or (for a
        // queue the application publishes into) on to a queue that processes them.
        let passes_on = !returning.is_empty() || (into_of(w).is_empty() && !consumed.is_empty());
        let onward: Option<(&str, Vec<&str>)> = if into_of(w).is_empty() {
            targets.iter().copied().find_map(|t| onward_to_terminal(t, w).map(|o| (t, o)))
        } else {
            None
        };
        let reason = if let Some(ms) = ttl(w).filter(|_| passes_on) {
            let back = if returning.is_empty() { &consumed } else { &returning };
            let how = if returning.is_empty() {
                format!("which {}", live_words(back[0]))
            } else {
                "which dead-letters back into it".to_string()
            };
            format!(
                "holds messages for {ms} ms (message TTL), then dead-letters them into {} ({how}): a wait (retry) queue",
                names(back)
            )
        } else if let Some(t) = returning.iter().copied().find(|t| live(t) && ttl(w).is_none()) {
            format!(
                "dead-letters into {t}, which dead-letters back into it; {t} {} and this queue none: the wait queue \
                 of a retry loop (per-message TTLs)",
                live_words(t)
            )
        } else if into_of(w).is_empty() && !consumed.is_empty() && ttl(w).is_none() {
            format!(
                "has no consumers, receives no dead letters and dead-letters into {}, which {}: a wait queue its \
                 messages leave by expiring back into {} (per-message TTLs)",
                names(&consumed),
                live_words(consumed[0]),
                names(&consumed)
            )
        } else if let Some((t, onward)) = onward {
            let ttl = match ttl(w) {
                Some(ms) => format!("holds messages for {ms} ms (message TTL)"),
                None => "holds messages until their per-message TTLs expire".to_string(),
            };
            format!(
                "receives no dead letters, {ttl} and dead-letters them into {t}, whose own dead letters go on to {}, \
                 a terminal dead-letter queue: {t} is the work queue and this its wait (retry) queue, from the \
                 topology alone ({t} {} now)",
                names(&onward),
                live_words(t)
            )
        } else {
            continue;
        };
        waits.insert(w, reason);
    }

    // Only queues the dead-letter routing touches: every other one has `plain_role`.
    let mut all: Vec<&str> = out.keys().chain(into.keys()).chain(self_loops.iter()).copied().collect();
    all.sort_unstable();
    all.dedup();
    let mut classified = HashMap::new();
    for q in all {
        let (role, reason, dlq_sources) = if let Some(reason) = waits.get(q) {
            (QueueRole::Wait, Cow::Owned(reason.clone()), Vec::new())
        } else {
            role_of(q, into_of(q), out_of(q), &waits, live(q).then(|| live_words(q)), self_loops.contains(q), &edge)
        };
        let work_unconfirmed = role == QueueRole::Work
            && !live(q)
            && !self_loops.contains(q)
            && !into_of(q).iter().any(|f| waits.contains_key(f));
        classified.insert(q, Classified { role, reason, dlq_sources, work_unconfirmed });
    }
    classified
}

/// The role of a queue that is not a wait queue.
fn role_of(
    q: &str,
    feeders: &[&str],
    targets: &[&str],
    waits: &HashMap<&str, String>,
    // What says the queue processes messages: consumers now, or seen before.
    live: Option<String>,
    self_loop: bool,
    edge: &dyn Fn(&str, &str) -> bool,
) -> (QueueRole, Cow<'static, str>, Vec<String>) {
    // A feeder whose dead letters end here: not a wait queue passing messages on for another
    // try, and not the other half of a loop that this queue dead-letters back into. Consumers
    // do not make such a queue a work queue: warren's own mover consumes from a DLQ while it
    // moves, and a DLQ stays one while someone reads it.
    let mut ended: Vec<&str> = feeders.iter().copied().filter(|f| !waits.contains_key(f) && !edge(q, f)).collect();
    ended.sort_unstable();
    ended.dedup();
    if !ended.is_empty() {
        let onward = if targets.is_empty() {
            String::new()
        } else {
            format!("; its own dead letters go on to {}", names(targets))
        };
        let reason = format!(
            "dead letters of {} end here: it does not dead-letter back into {}{onward}: a dead-letter queue",
            names(&ended),
            if ended.len() == 1 { "it" } else { "them" }
        );
        return (QueueRole::Dlq, reason.into(), ended.into_iter().map(str::to_string).collect());
    }
    let mut wait_feeders: Vec<&str> = feeders.iter().copied().filter(|f| waits.contains_key(f)).collect();
    wait_feeders.sort_unstable();
    wait_feeders.dedup();
    let loops: Vec<&str> = feeders.iter().copied().filter(|f| !waits.contains_key(f)).collect();
    if !loops.is_empty() && live.is_none() {
        // Two queues dead-lettering into each other with nothing to tell which one waits.
        let reason = format!(
            "dead-letters into {}, which dead-letters back into it: a retry loop, but no TTL or consumers say \
             which of them is the wait queue",
            names(&loops)
        );
        return (QueueRole::Unknown, reason.into(), Vec::new());
    }
    if !wait_feeders.is_empty() {
        let reason = format!(
            "receives dead letters only from {}, a wait queue: they come back here to be retried, so this is the \
             work queue of a retry loop, not a dead-letter queue",
            names(&wait_feeders)
        );
        return (QueueRole::Work, reason.into(), Vec::new());
    }
    if let Some(words) = live {
        return (QueueRole::Work, Cow::Owned(words), Vec::new());
    }
    if !targets.is_empty() {
        let reason = format!("dead-letters into {}: a work queue (no consumers now)", names(targets));
        return (QueueRole::Work, reason.into(), Vec::new());
    }
    if self_loop {
        let reason = "dead-letters into itself: rejected and expired messages go back to its own tail, a retry in \
                      place, not a dead-letter queue";
        return (QueueRole::Work, Cow::Borrowed(reason), Vec::new());
    }
    let (role, reason) = plain_role(None);
    (role, reason, Vec::new())
}

#[cfg(test)]
mod tests {
    use super::super::{analyse, DeadLetterInfo, QueueConfig, VhostTopology};
    use super::*;
    use serde_json::json;

    /// A queue for the tests: its arguments and consumers.
    struct Q {
        name: &'static str,
        arguments: Map<String, Value>,
        consumers: Option<u64>,
    }

    fn q(name: &'static str, arguments: Value, consumers: u64) -> Q {
        Q { name, arguments: arguments.as_object().unwrap().clone(), consumers: Some(consumers) }
    }

    /// Dead-letters through the default exchange into `target`, as most retry frameworks do.
    fn to(target: &str) -> Value {
        json!({"x-dead-letter-exchange": "", "x-dead-letter-routing-key": target})
    }

    fn with_ttl(mut arguments: Value, ms: u64) -> Value {
        arguments["x-message-ttl"] = json!(ms);
        arguments
    }

    fn roles(queues: &[Q]) -> HashMap<String, DeadLetterInfo> {
        let empty = Map::new();
        let configs: Vec<QueueConfig<'_>> = queues
            .iter()
            .map(|q| QueueConfig {
                name: q.name,
                arguments: &q.arguments,
                effective_policy: &empty,
                consumers: q.consumers,
            })
            .collect();
        let mut info = analyse(&configs, Some(&VhostTopology::default()));
        for q in queues {
            info.entry(q.name.to_string()).or_insert_with(|| DeadLetterInfo::plain(q.consumers));
        }
        info
    }

    fn role(info: &HashMap<String, DeadLetterInfo>, name: &str) -> (QueueRole, bool) {
        (info[name].role, info[name].is_dlq)
    }

    #[test]
    fn a_queue_with_a_ttl_that_dead_letters_back_into_its_feeder_is_a_wait_queue() {
        // work rejects into work.wait; work.wait holds them 5 s and dead-letters them back.
        for work_consumers in [2, 0] {
            let info =
                roles(&[q("work", to("work.wait"), work_consumers), q("work.wait", with_ttl(to("work"), 5000), 0)]);
            assert_eq!(role(&info, "work.wait"), (QueueRole::Wait, false), "consumers on work: {work_consumers}");
            assert_eq!(role(&info, "work"), (QueueRole::Work, false), "consumers on work: {work_consumers}");
            let reason = &info["work.wait"].role_reason;
            assert!(reason.contains("5000 ms") && reason.contains("into work"), "{reason}");
            assert!(info["work"].role_reason.contains("work.wait, a wait queue"), "{}", info["work"].role_reason);
            assert!(info["work"].dead_letter_sources.is_empty() && info["work.wait"].dead_letter_sources.is_empty());
        }
    }

    #[test]
    fn per_message_ttl_wait_queues_are_recognised_by_the_cycle() {
        // The consumer republishes a failure to work.wait with a per-message expiration;
        // work.wait (no x-message-ttl) dead-letters back; the last failure is rejected into
        // work.dlq. Nothing dead-letters into work.wait: only work's consumers tell it apart.
        let info = roles(&[q("work", to("work.dlq"), 1), q("work.wait", to("work"), 0), q("work.dlq", json!({}), 0)]);
        assert_eq!(role(&info, "work"), (QueueRole::Work, false));
        assert_eq!(role(&info, "work.wait"), (QueueRole::Wait, false));
        assert!(info["work.wait"].role_reason.contains("per-message TTLs"), "{}", info["work.wait"].role_reason);
        assert_eq!(role(&info, "work.dlq"), (QueueRole::Dlq, true));
        assert_eq!(info["work.dlq"].dead_letter_sources, ["work"]);
        // The same when work's rejects go to work.wait through its DLX (the loop is in the topology).
        let info = roles(&[q("work", to("work.wait"), 1), q("work.wait", to("work"), 0)]);
        assert_eq!(role(&info, "work.wait"), (QueueRole::Wait, false));
        assert_eq!(role(&info, "work"), (QueueRole::Work, false));
        // With no consumer on either and no TTL, nothing says which one waits: neither is a DLQ.
        let info = roles(&[q("work", to("work.wait"), 0), q("work.wait", to("work"), 0)]);
        assert_eq!(role(&info, "work.wait"), (QueueRole::Unknown, false));
        assert_eq!(role(&info, "work"), (QueueRole::Unknown, false));
        assert!(info["work"].role_reason.contains("retry loop"), "{}", info["work"].role_reason);
    }

    #[test]
    fn a_work_queue_whose_consumers_died_stays_the_work_queue() {
        // Issue 31, case 3: the delayed-retry topology of DOMAIN.md §8 with work's consumer
        // killed (or not connected yet): work.wait still dead-letters into work, whose own dead
        // letters end in work.dlq, which has no DLX. Neither reads as what it is not.
        let info = roles(&[
            q("work", to("work.dlq"), 0),
            q("work.wait", to("work"), 0),
            q("work.dlq", json!({}), 0),
            q("other.wait", with_ttl(to("work"), 5000), 0),
        ]);
        assert_eq!(role(&info, "work"), (QueueRole::Work, false), "{}", info["work"].role_reason);
        assert!(info["work"].dead_letter_sources.is_empty());
        assert_eq!(role(&info, "work.wait"), (QueueRole::Wait, false), "{}", info["work.wait"].role_reason);
        let reason = &info["work.wait"].role_reason;
        assert!(reason.contains("terminal dead-letter queue") && reason.contains("topology alone"), "{reason}");
        assert!(reason.contains("work has no consumers now"), "what it rests on: {reason}");
        assert_eq!(role(&info, "other.wait"), (QueueRole::Wait, false), "{}", info["other.wait"].role_reason);
        assert_eq!(role(&info, "work.dlq"), (QueueRole::Dlq, true));
        assert_eq!(info["work.dlq"].dead_letter_sources, ["work"]);
        // A DLQ that passes its oldest on to a parking queue when full, or expires them there,
        // is no work queue: its feeder stays a work queue without consumers.
        for dlq in [
            json!({"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "parking", "x-max-length": 10}),
            with_ttl(to("parking"), 60_000),
        ] {
            let info = roles(&[q("orders", to("orders.dlq"), 0), q("orders.dlq", dlq, 0), q("parking", json!({}), 0)]);
            assert_eq!(role(&info, "orders.dlq"), (QueueRole::Dlq, true), "{}", info["orders.dlq"].role_reason);
            assert_eq!(role(&info, "orders"), (QueueRole::Work, false));
        }
    }

    #[test]
    fn what_warren_saw_before_outweighs_one_polls_consumer_count() {
        let queues = [q("work", to("work.wait"), 0), q("work.wait", to("work"), 0)];
        let empty = Map::new();
        let qc: Vec<QueueConfig<'_>> = queues
            .iter()
            .map(|q| QueueConfig {
                name: q.name,
                arguments: &q.arguments,
                effective_policy: &empty,
                consumers: q.consumers,
            })
            .collect();
        // A retry loop with no TTL and no consumer now: unknown, until warren remembers work's consumers.
        let info = super::super::analyse(&qc, Some(&VhostTopology::default()));
        assert_eq!(info["work"].role, QueueRole::Unknown);
        let seen = |q: &str| (q == "work").then(|| "2026-12-04 19:00 UTC".to_string());
        let info = super::super::analyse_with(&qc, Some(&VhostTopology::default()), &seen);
        assert_eq!((info["work"].role, info["work.wait"].role), (QueueRole::Work, QueueRole::Wait));
        let reason = &info["work.wait"].role_reason;
        assert!(
            reason.contains("had consumers when warren last saw them (2026-12-04 19:00 UTC), none now"),
            "{reason}"
        );
    }

    #[test]
    fn a_plain_dlq_is_terminal() {
        let info = roles(&[q("orders", to("orders.dlq"), 3), q("orders.dlq", json!({}), 0), q("other", json!({}), 1)]);
        assert_eq!(role(&info, "orders.dlq"), (QueueRole::Dlq, true));
        assert_eq!(info["orders.dlq"].dead_letter_sources, ["orders"]);
        assert!(info["orders.dlq"].role_reason.contains("dead letters of orders end here"));
        assert_eq!(role(&info, "orders"), (QueueRole::Work, false));
        assert_eq!(role(&info, "other"), (QueueRole::Work, false));
        // A reader on the DLQ (warren's own mover, while it moves) does not make it a work queue.
        let info = roles(&[q("orders", to("orders.dlq"), 3), q("orders.dlq", json!({}), 1)]);
        assert_eq!(role(&info, "orders.dlq"), (QueueRole::Dlq, true));
        // A consumer gone for a while does not turn its DLQ into anything else.
        let info = roles(&[q("orders", to("orders.dlq"), 0), q("orders.dlq", json!({}), 0)]);
        assert_eq!(role(&info, "orders.dlq"), (QueueRole::Dlq, true));
        assert_eq!(role(&info, "orders"), (QueueRole::Work, false));
    }

    #[test]
    fn a_dlq_with_its_own_dlx_to_a_parking_queue_is_still_terminal() {
        // orders.dlq keeps dead letters a day, then expires them into parking.
        for parking_consumers in [0, 1] {
            let info = roles(&[
                q("orders", to("orders.dlq"), 1),
                q("orders.dlq", with_ttl(to("parking"), 86_400_000), 0),
                q("parking", json!({}), parking_consumers),
            ]);
            assert_eq!(role(&info, "orders.dlq"), (QueueRole::Dlq, true), "consumers on parking: {parking_consumers}");
            assert!(info["orders.dlq"].role_reason.contains("go on to parking"), "{}", info["orders.dlq"].role_reason);
            assert_eq!(role(&info, "parking"), (QueueRole::Dlq, true));
            assert_eq!(info["parking"].dead_letter_sources, ["orders.dlq"]);
        }
    }

    #[test]
    fn self_dead_lettering_queues_are_not_dlqs() {
        // Rejects go back to the queue's own tail: a retry in place.
        for arguments in [to("loop"), with_ttl(to("loop"), 1000)] {
            let info = roles(&[q("loop", arguments, 0)]);
            assert_eq!(role(&info, "loop"), (QueueRole::Work, false));
            assert!(info["loop"].role_reason.contains("itself"), "{}", info["loop"].role_reason);
        }
        // A DLQ that dead-letters into itself is still the end of its feeder's dead letters.
        let info = roles(&[q("orders", to("orders.dlq"), 1), q("orders.dlq", to("orders.dlq"), 0)]);
        assert_eq!(role(&info, "orders.dlq"), (QueueRole::Dlq, true));
        assert_eq!(info["orders.dlq"].dead_letter_sources, ["orders"]);
    }

    #[test]
    fn a_ttl_from_a_policy_counts_and_hostile_values_do_not() {
        let none = Map::new();
        let policy = json!({"message-ttl": 2000}).as_object().unwrap().clone();
        assert_eq!(message_ttl_ms(&none, &policy), Some(2000));
        let both = json!({"x-message-ttl": 5000}).as_object().unwrap().clone();
        assert_eq!(message_ttl_ms(&both, &policy), Some(2000), "the broker applies the lower one");
        for hostile in [json!("5000"), json!(-1), json!(null), json!({"a": 1}), json!(1e300)] {
            let arguments = json!({"x-message-ttl": hostile}).as_object().unwrap().clone();
            assert!(message_ttl_ms(&arguments, &none).is_none_or(|ms| ms > 0), "{hostile}");
        }
    }

    #[test]
    fn queues_outside_dead_letter_routing_have_a_plain_role() {
        assert_eq!(plain_role(Some(2)).0, QueueRole::Work);
        assert_eq!(plain_role(Some(0)).0, QueueRole::Unknown);
        assert_eq!(plain_role(None).0, QueueRole::Unknown, "consumers not given: no evidence either way");
        // Without the bindings no routing is known: no role from it, and no DLQ.
        let args = to("orders.dlq").as_object().unwrap().clone();
        let empty = Map::new();
        let configs = [QueueConfig { name: "orders", arguments: &args, effective_policy: &empty, consumers: Some(0) }];
        let info = analyse(&configs, None);
        assert_eq!((info["orders"].role, info["orders"].is_dlq), (QueueRole::Unknown, false));
        assert!(info["orders"].role_reason.contains("not known yet"), "{}", info["orders"].role_reason);
        // Routing known, and it reaches no queue: the reason says so.
        let args = json!({"x-dead-letter-exchange": "unbound"}).as_object().unwrap().clone();
        let configs = [QueueConfig { name: "orders", arguments: &args, effective_policy: &empty, consumers: Some(1) }];
        let info = analyse(&configs, Some(&VhostTopology::default()));
        assert_eq!(info["orders"].role, QueueRole::Work);
        assert!(info["orders"].role_reason.contains("to no queue"), "{}", info["orders"].role_reason);
    }

    /// `n` queues that dead-letter into one fanout exchange bound to all of them: n² edges.
    /// Returns the fastest of five analyses, and checks the roles.
    fn analyse_dense_graph(n: usize) -> std::time::Duration {
        let names: Vec<String> = (0..n).map(|i| format!("q{i}")).collect();
        let bindings = names
            .iter()
            .map(|n| super::super::Binding {
                source: "all".into(),
                destination: n.clone(),
                destination_type: "queue".into(),
                routing_key: String::new(),
                arguments: None,
            })
            .collect();
        let topology = VhostTopology {
            bindings,
            exchanges: vec![super::super::Exchange { name: "all".into(), kind: "fanout".into() }],
        };
        let args = json!({"x-dead-letter-exchange": "all"}).as_object().unwrap().clone();
        let empty = Map::new();
        let configs: Vec<QueueConfig<'_>> = names
            .iter()
            .map(|n| QueueConfig { name: n, arguments: &args, effective_policy: &empty, consumers: Some(0) })
            .collect();
        (0..5)
            .map(|_| {
                let started = std::time::Instant::now();
                let info = analyse(&configs, Some(&topology));
                let took = started.elapsed();
                assert!(info.values().all(|i| !i.is_dlq), "every queue dead-letters back into every other");
                took
            })
            .min()
            .unwrap()
    }

    /// Twice the queues is four times the edges: linear work takes about 4 times as long (5-6
    /// measured: caches), work quadratic in the edges 16 times. A ratio measured in one run, so
    /// that a loaded machine does not fail it (a 5 s bound on 600 queues did, at 5.4-7.3 s); the
    /// wall-clock bound left is a guard against a hang, 20 times what 400 queues take (0.5 s),
    /// and catches what the ratio lets through: n³ log n work took about 20 s there.
    #[test]
    fn roles_of_a_dense_graph_take_linear_time_in_its_edges() {
        let small = analyse_dense_graph(200);
        let large = analyse_dense_graph(400);
        let ratio = large.as_secs_f64() / small.as_secs_f64().max(1e-6);
        assert!(ratio < 12.0, "200 queues {small:?}, 400 queues {large:?}: {ratio:.1} times");
        assert!(large < std::time::Duration::from_secs(10), "400 queues took {large:?}");
    }
}
