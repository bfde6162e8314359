//! The minimum set of numbers a team watches per queue (issue 35, must-have 3): the wait from
//! publish to the start of processing, the processing time, the retry share, the oldest
//! message's age and the dead letters. Pure: the web layer reads the queue's last stored samples
//! and hands them in with the live view.
//!
//! Each number says how it was derived, and is `unknown` (with why) where an input is, never 0.
//! Little's law (mean number in a stage = arrival rate × mean time in it) holds for averages
//! over a span in which the stage neither fills nor drains: so the inputs are means over the
//! last samples, and a queue whose depth or rates moved across that span gets its numbers
//! labelled `unreliable: not in steady state`, with what moved.

use serde::Serialize;

use crate::history::QueuePoint;
use crate::metrics::{AgeSource, QueueView};

/// Fewer samples than this in the window: too few to call the queue steady.
pub const MIN_SAMPLES: usize = 5;

/// The shortest window the numbers average over; longer where polls are slower, so that it
/// holds `MIN_SAMPLES` polls (`window_secs`).
pub const MIN_WINDOW_SECS: i64 = 30;

/// A depth is steady when its spread (max − min) over the window is at most this share of its
/// mean, plus `DEPTH_SLACK` messages; rates likewise with `RATE_SLACK`. 20 %: the estimates
/// are checked to 20 % of the truth, and a depth that moved more than that across the window
/// moves a Little's law estimate by as much. The slacks keep a queue holding a handful of
/// messages, or a trickle, from reading as unsteady on the noise of one message.
pub const STEADY_SPREAD: f64 = 0.2;
pub const DEPTH_SLACK: f64 = 5.0;
/// msg/s: a rate over a 10 s window moves by 0.1 msg/s per message.
pub const RATE_SLACK: f64 = 0.5;

/// The window the numbers average over, for a broker polled every `poll_interval_secs`.
pub fn window_secs(poll_interval_secs: i64) -> i64 {
    MIN_WINDOW_SECS.max(poll_interval_secs * (MIN_SAMPLES as i64 + 1))
}

/// How far a number can be trusted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Standing {
    /// Derived from known inputs over a steady window.
    Known,
    /// Derived, but its inputs moved across the window (or were too few), or the rates hold
    /// warren's own reads: shown, labelled, not to be compared with a target.
    Unreliable,
    /// An input is unknown: no value.
    Unknown,
}

/// One number, with how it was derived.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct Number {
    /// Seconds, a share (0..1) or messages, as the field's name says; `None` when unknown.
    pub value: Option<f64>,
    pub standing: Standing,
    /// How the value was derived, with its inputs.
    pub derived: String,
    /// Why it is unknown or unreliable.
    pub reason: Option<String>,
}

impl Number {
    fn unknown(derived: impl Into<String>, reason: impl Into<String>) -> Number {
        Number { value: None, standing: Standing::Unknown, derived: derived.into(), reason: Some(reason.into()) }
    }

    fn derived(value: f64, derived: String, steady: &Steadiness) -> Number {
        match &steady.unsteady {
            None => Number { value: Some(value), standing: Standing::Known, derived, reason: None },
            Some(why) => Number {
                value: Some(value),
                standing: Standing::Unreliable,
                derived,
                reason: Some(format!("unreliable: not in steady state ({why})")),
            },
        }
    }
}

/// Whether the window was steady, and if not, what moved.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct Steadiness {
    /// `None`: steady. Otherwise what moved (or that the samples were too few).
    pub unsteady: Option<String>,
    /// Samples in the window with depth and rates known.
    pub samples: usize,
    /// Seconds between the first and the last of them: what the means cover.
    pub covered_secs: i64,
    pub window_secs: i64,
}

/// The samples must cover this share of the window: a queue whose rates became known only
/// lately (its first rate window filling) has few samples at the end of the window, which say
/// nothing of how it got there.
pub const MIN_COVERAGE: f64 = 0.8;

/// A queue's minimum set of numbers.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct QueueNumbers {
    pub steady_state: Steadiness,
    /// From publish to the start of processing (delivery): mean ready ÷ mean delivery rate.
    pub wait_secs: Number,
    /// From delivery to ack: mean unacked ÷ mean ack rate. It includes the time a message
    /// waits in the consumer's prefetch buffer, which the broker cannot tell apart.
    pub processing_secs: Number,
    /// Redeliveries ÷ deliveries over the same window.
    pub retry_share: Number,
    pub oldest_age_secs: Number,
    /// Messages in the queue's dead-letter queues (or, for a DLQ, in itself).
    pub dead_letters: Number,
}

/// Means over the window's samples of the inputs Little's law needs.
struct Means {
    ready: f64,
    unacked: f64,
    deliver: f64,
    ack: f64,
    redeliver: Option<f64>,
}

/// The samples with depth and delivery and ack rates known: the ones Little's law can use.
fn usable(window: &[QueuePoint]) -> Vec<&QueuePoint> {
    window
        .iter()
        .filter(|p| p.ready.is_some() && p.unacked.is_some() && p.deliver_rate.is_some() && p.ack_rate.is_some())
        .collect()
}

fn spread(values: impl Iterator<Item = f64> + Clone) -> (f64, f64, f64) {
    let n = values.clone().count().max(1) as f64;
    let (lo, hi) = values.clone().fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| (lo.min(v), hi.max(v)));
    (lo, hi, values.sum::<f64>() / n)
}

/// The steady-state test: enough samples, and depth and rates within `STEADY_SPREAD` of their
/// means (plus slack) across the window.
pub fn steadiness(window: &[QueuePoint], window_secs: i64) -> Steadiness {
    let points = usable(window);
    let samples = points.len();
    let covered_secs = match (points.first(), points.last()) {
        (Some(first), Some(last)) => last.ts - first.ts,
        _ => 0,
    };
    let few = if samples < MIN_SAMPLES {
        Some(format!("too few samples: {samples} of {MIN_SAMPLES} in the last {window_secs} s"))
    } else if (covered_secs as f64) < MIN_COVERAGE * window_secs as f64 {
        Some(format!("the samples with depth and rates known cover only {covered_secs} s of the last {window_secs} s"))
    } else {
        None
    };
    if let Some(few) = few {
        return Steadiness { unsteady: Some(few), samples, covered_secs, window_secs };
    }
    let mut moved = Vec::new();
    let depth = |name: &str, f: fn(&QueuePoint) -> f64, moved: &mut Vec<String>| {
        let (lo, hi, mean) = spread(points.iter().map(|p| f(p)));
        if hi - lo > STEADY_SPREAD * mean + DEPTH_SLACK {
            moved.push(format!("{name} ranged {lo:.0}–{hi:.0}"));
        }
    };
    depth("ready", |p| p.ready.unwrap_or(0) as f64, &mut moved);
    depth("unacked", |p| p.unacked.unwrap_or(0) as f64, &mut moved);
    let rate = |name: &str, f: fn(&QueuePoint) -> f64, moved: &mut Vec<String>| {
        let (lo, hi, mean) = spread(points.iter().map(|p| f(p)));
        if hi - lo > STEADY_SPREAD * mean + RATE_SLACK {
            moved.push(format!("{name} ranged {lo:.1}–{hi:.1} msg/s"));
        }
    };
    rate("delivery rate", |p| p.deliver_rate.unwrap_or(0.0), &mut moved);
    rate("ack rate", |p| p.ack_rate.unwrap_or(0.0), &mut moved);
    let unsteady = (!moved.is_empty()).then(|| format!("{} in the last {window_secs} s", moved.join(", ")));
    Steadiness { unsteady, samples, covered_secs, window_secs }
}

fn means(window: &[QueuePoint]) -> Option<Means> {
    let points = usable(window);
    if points.is_empty() {
        return None;
    }
    let n = points.len() as f64;
    let mean = |f: &dyn Fn(&QueuePoint) -> f64| points.iter().map(|p| f(p)).sum::<f64>() / n;
    let redeliver =
        points.iter().all(|p| p.redeliver_rate.is_some()).then(|| mean(&|p| p.redeliver_rate.unwrap_or(0.0)));
    Some(Means {
        ready: mean(&|p| p.ready.unwrap_or(0) as f64),
        unacked: mean(&|p| p.unacked.unwrap_or(0) as f64),
        deliver: mean(&|p| p.deliver_rate.unwrap_or(0.0)),
        ack: mean(&|p| p.ack_rate.unwrap_or(0.0)),
        redeliver,
    })
}

/// The live view's own values, when the window has no usable sample (a queue warren has not
/// stored yet): one instant, never steady.
fn means_of_view(q: &QueueView) -> Option<Means> {
    Some(Means {
        ready: q.ready? as f64,
        unacked: q.unacked? as f64,
        deliver: q.deliver_rate?,
        ack: q.ack_rate?,
        redeliver: q.redeliver_rate,
    })
}

/// The numbers of queue `q`, from its samples over the last `window_secs` (oldest first) and
/// the broker's other queues (for its dead-letter queues' depth).
pub fn queue_numbers(q: &QueueView, window: &[QueuePoint], window_secs: i64, queues: &[QueueView]) -> QueueNumbers {
    let steady = steadiness(window, window_secs);
    let (means, over) = match means(window) {
        Some(m) => (Some(m), format!("means over {} samples in the last {window_secs} s", steady.samples)),
        None => (means_of_view(q), "the last poll's values (no stored samples yet)".to_string()),
    };
    let mut steady_for_rates = steady.clone();
    if q.own_reads {
        // warren's snapshot or move reads are deliveries the broker counts as the application's.
        let own = "warren's own reads are in the delivery rates".to_string();
        steady_for_rates.unsteady = Some(match steady.unsteady.clone() {
            Some(why) => format!("{why}; {own}"),
            None => own,
        });
    }
    let Some(m) = means else {
        let why = "depth or rates unknown (no message stats, or the rate window has not filled yet)";
        return QueueNumbers {
            steady_state: steady,
            wait_secs: wait_from_head(q).unwrap_or_else(|| Number::unknown("Little's law: ready ÷ delivery rate", why)),
            processing_secs: Number::unknown("Little's law: unacked ÷ ack rate", why),
            retry_share: Number::unknown("redelivery rate ÷ delivery rate", why),
            oldest_age_secs: oldest_age(q),
            dead_letters: dead_letters(q, queues),
        };
    };
    let wait = if m.deliver > 0.0 {
        let mut derived = format!("Little's law: ready {:.1} ÷ delivery rate {:.2} msg/s ({over})", m.ready, m.deliver);
        if q.oldest_age_source == AgeSource::Exact && q.ready.is_some_and(|r| r > 0) {
            if let Some(age) = q.oldest_age_secs {
                derived.push_str(&format!("; the head message's age now: {age:.0} s (broker timestamp, 1 s steps)"));
            }
        }
        Number::derived(m.ready / m.deliver, derived, &steady_for_rates)
    } else if m.ready > 0.0 {
        wait_from_head(q).unwrap_or_else(|| {
            Number::unknown(
                "Little's law: ready ÷ delivery rate",
                "nothing was delivered in the window while messages waited",
            )
        })
    } else {
        Number::unknown("Little's law: ready ÷ delivery rate", "nothing was delivered or waiting in the window")
    };
    let processing = if m.ack > 0.0 {
        let derived = format!(
            "Little's law: unacked {:.1} ÷ ack rate {:.2} msg/s ({over}); includes time in the consumer's prefetch buffer",
            m.unacked, m.ack
        );
        Number::derived(m.unacked / m.ack, derived, &steady_for_rates)
    } else if m.unacked > 0.0 {
        Number::unknown(
            "Little's law: unacked ÷ ack rate",
            "nothing was acknowledged in the window while messages were held (see hung consumers)",
        )
    } else {
        Number::unknown(
            "Little's law: unacked ÷ ack rate",
            "nothing was acknowledged in the window (no traffic, or consumers with automatic acknowledgement)",
        )
    };
    let retry_share = match (m.redeliver, m.deliver > 0.0) {
        (Some(r), true) => Number::derived(
            (r / m.deliver).min(1.0),
            format!("redelivery rate {r:.2} ÷ delivery rate {:.2} msg/s ({over})", m.deliver),
            &steady_for_rates,
        ),
        (None, _) => Number::unknown("redelivery rate ÷ delivery rate", "the redelivery counter is unknown"),
        (Some(_), false) => Number::unknown("redelivery rate ÷ delivery rate", "nothing was delivered in the window"),
    };
    QueueNumbers {
        steady_state: steady,
        wait_secs: wait,
        processing_secs: processing,
        retry_share,
        oldest_age_secs: oldest_age(q),
        dead_letters: dead_letters(q, queues),
    }
}

/// The wait so far of the message at the head, where the broker gives its publish timestamp:
/// a lower bound of the wait of a queue that delivers nothing.
fn wait_from_head(q: &QueueView) -> Option<Number> {
    let age =
        q.oldest_age_secs.filter(|_| q.oldest_age_source == AgeSource::Exact && q.ready.is_some_and(|r| r > 0))?;
    Some(Number {
        value: Some(age),
        standing: Standing::Unreliable,
        derived: "the head message's age (broker timestamp): the wait so far of the next message".into(),
        reason: Some("a lower bound: nothing was delivered in the window, so the head is still waiting".into()),
    })
}

fn oldest_age(q: &QueueView) -> Number {
    let Some(age) = q.oldest_age_secs else {
        return Number::unknown(
            "oldest message age",
            "the broker gives no age for this queue and warren has no estimate yet",
        );
    };
    let how = match (q.oldest_age_source, q.oldest_age_lower_bound) {
        (AgeSource::Exact, _) => "exact: the head message's timestamp (or an empty queue)",
        (_, true) => "estimated, a lower bound (older than warren's history of it)",
        _ => "estimated from the publish counter and depth history (FIFO)",
    };
    let standing = if q.oldest_age_lower_bound { Standing::Unreliable } else { Standing::Known };
    let reason = q.oldest_age_lower_bound.then(|| "a lower bound".to_string());
    Number { value: Some(age), standing, derived: how.to_string(), reason }
}

fn dead_letters(q: &QueueView, queues: &[QueueView]) -> Number {
    if q.dead_letters.is_dlq {
        return match q.total {
            Some(n) => Number {
                value: Some(n as f64),
                standing: Standing::Known,
                derived: "this queue is a dead-letter queue: its own depth".into(),
                reason: None,
            },
            None => Number::unknown("its own depth", "the depth is unknown"),
        };
    }
    let Some(target) = &q.dead_letters.dead_letter_target else {
        return Number::unknown(
            "depth of its dead-letter queues",
            "no dead-letter exchange: rejected and expired messages are destroyed, and nothing counts them",
        );
    };
    let Some(names) = &target.queues else {
        return Number::unknown(
            "depth of its dead-letter queues",
            "where its dead-letter exchange routes is not known yet",
        );
    };
    if names.is_empty() {
        return Number::unknown(
            "depth of its dead-letter queues",
            "its dead-letter exchange routes to no queue: dead letters are dropped",
        );
    }
    let depth = |name: &String| queues.iter().find(|o| *o.vhost == *q.vhost && *o.name == **name && !o.deleted)?.total;
    match names.iter().map(depth).sum::<Option<u64>>() {
        Some(n) => Number {
            value: Some(n as f64),
            standing: Standing::Known,
            derived: format!("depth of {} (shared with any other queue dead-lettering there)", names.join(", ")),
            reason: None,
        },
        None => {
            Number::unknown("depth of its dead-letter queues", format!("the depth of {} is unknown", names.join(", ")))
        }
    }
}

#[cfg(test)]
mod tests;
