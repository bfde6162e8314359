//! A queue as one row of a table: its numbers as text, its trend and its badges. The queue
//! list, the overview's dead-letter queues and a queue's own page all show it.

use crate::broker::management::encode_segment;
use crate::broker::topology::QueueRole;
use crate::metrics::{InflowSource, QueueView};
use crate::web::format;
use crate::web::links::queue_href;

/// A queue as a row of the queue list, the overview and the queue page.
pub(super) struct QueueRow {
    pub(super) href: String,
    /// The dead-letter browser, for DLQs.
    pub(super) dlq_href: Option<String>,
    pub(super) vhost_href: String,
    pub(super) broker: String,
    pub(super) vhost: String,
    pub(super) name: String,
    pub(super) kind: String,
    pub(super) deleted: bool,
    pub(super) ready: String,
    pub(super) unacked: String,
    pub(super) total: String,
    pub(super) consumers: String,
    pub(super) publish_rate: String,
    pub(super) deliver_rate: String,
    pub(super) ack_rate: String,
    pub(super) redeliver_rate: String,
    pub(super) age: String,
    /// What the age measures where that is not the plain age ("since first published").
    pub(super) age_note: Option<&'static str>,
    pub(super) age_source: &'static str,
    pub(super) age_title: &'static str,
    /// Backlog trend: growing at a rate, or the time to drain.
    pub(super) trend: String,
    pub(super) trend_class: &'static str,
    pub(super) sparkline: format::Sparkline,
    /// Badges: (css class, text, explanation).
    pub(super) signals: Vec<(&'static str, String, &'static str)>,
}

fn signals(q: &QueueView) -> Vec<(&'static str, String, &'static str)> {
    let mut out = Vec::new();
    if q.dead_letters.role == QueueRole::Error {
        out.push((
            "info",
            "error queue".to_string(),
            "an application's error (parking) queue, known from its messages",
        ));
    } else if q.dead_letters.is_dlq {
        out.push(("info", "DLQ".to_string(), "dead-letter queue: other queues' dead letters end in it"));
    }
    if q.dead_letters.role == QueueRole::Wait {
        out.push(("info", "wait".to_string(), "wait (retry) queue: its messages dead-letter back into a work queue"));
    }
    // A DLQ has no reader by design; dead letters arriving are what is worth a look.
    if matches!(q.dead_letters.role, QueueRole::Dlq | QueueRole::Error) && q.inflow_rate.is_some_and(|r| r > 0.0) {
        out.push((
            "warn",
            format!("dead letters arriving {}", format::rate(q.inflow_rate)),
            "messages are dead-lettered into this queue now (a lower bound when derived from depth and acks)",
        ));
    }
    if q.no_consumers {
        out.push(("warn", "no consumers".to_string(), "ready messages and no consumer: nothing will drain this queue"));
    }
    if let Some(secs) = q.holding_secs {
        out.push((
            "info",
            format!("holding {}", format::duration(secs)),
            "unacked messages held with no ack while none are ready: a consumer holding scheduled (ETA, delayed) \
             messages does this by design; flagged hung past the broker's scheduled_hold_limit_secs",
        ));
    }
    if let Some(secs) = q.hung_consumer_secs {
        out.push((
            "bad",
            format!("hung consumer {}", format::duration(secs)),
            "unacked messages held with no ack for several polls",
        ));
    }
    if let Some(secs) = q.redelivery_loop_secs {
        out.push((
            "bad",
            format!("redelivery loop {}", format::duration(secs)),
            "consumers take deliveries and hand them back (nack or reject with requeue) with nothing acked: the \
             messages at the head fail every time and the rest wait behind them",
        ));
    }
    if q.own_reads {
        out.push((
            "info",
            "read by warren".to_string(),
            "warren read this queue within the rate window (a snapshot or a move): the broker counts those reads as \
             deliveries and redeliveries, so the rates include them",
        ));
    }
    out
}

/// The dead-letter browser is offered for DLQs and error queues, for queues whose role is
/// unknown (no consumers, no dead-letter routing): reading their messages is the only way to
/// tell an application's error queue (issue 17, must-have 3), and for a queue in a loop.
pub(super) fn browsable(q: &QueueView) -> bool {
    // A queue in a redelivery loop too: the messages at its head are the ones going round, and
    // a snapshot shows which (issue 31, must-have 1).
    q.dead_letters.is_dlq || q.dead_letters.role == QueueRole::Unknown || q.redelivery_loop_secs.is_some()
}

pub(super) fn queue_row(q: &QueueView, sparkline: format::Sparkline) -> QueueRow {
    let (age, age_note) = format::age_parts(q);
    QueueRow {
        href: queue_href(&q.broker, &q.vhost, &q.name),
        dlq_href: browsable(q).then(|| {
            format!("/dlq/{}/{}/{}", encode_segment(&q.broker), encode_segment(&q.vhost), encode_segment(&q.name))
        }),
        vhost_href: format!("/queues?broker={}&vhost={}", encode_segment(&q.broker), encode_segment(&q.vhost)),
        broker: q.broker.to_string(),
        vhost: q.vhost.to_string(),
        name: q.name.to_string(),
        kind: q.kind.to_string(),
        deleted: q.deleted,
        ready: format::count(q.ready),
        unacked: format::count(q.unacked),
        total: format::count(q.total),
        consumers: format::count(q.consumers),
        // A queue that dead-letter routing feeds shows its derived inflow: the broker counts no
        // publish for a dead letter, and its publish rate is a bare 0 while it fills.
        publish_rate: match q.inflow_source {
            InflowSource::PublishCounter => format::rate(q.publish_rate),
            // A lower bound of 0 says only that none were seen arriving (issue 34, case 6).
            InflowSource::DerivedLowerBound if q.inflow_rate == Some(0.0) => "none seen".to_string(),
            // Above 0 but below what two decimals show: "≥ < 0.01/s" would read badly.
            InflowSource::DerivedLowerBound if q.inflow_rate.is_some_and(|r| r < 0.005) => "> 0/s".to_string(),
            InflowSource::DerivedLowerBound if q.inflow_rate.is_none() => format::UNKNOWN.to_string(),
            InflowSource::DerivedLowerBound => format!("≥ {}", format::rate(q.inflow_rate)),
            InflowSource::Unknown => format::UNKNOWN.to_string(),
        },
        deliver_rate: format::rate(q.deliver_rate),
        ack_rate: format::rate(q.ack_rate),
        redeliver_rate: format::rate(q.redeliver_rate),
        age,
        age_note,
        age_source: q.oldest_age_source.as_str(),
        age_title: format::age_title(q),
        trend: match (q.time_to_drain_secs, q.backlog_growth_rate) {
            (Some(0.0), _) => "empty".to_string(),
            (Some(secs), _) => format!("drains in {}", format::duration(secs)),
            (None, Some(g)) if g > 0.0 => format!("+{}", format::rate(Some(g))),
            (None, Some(_)) => "steady".to_string(),
            (None, None) => format::UNKNOWN.to_string(),
        },
        trend_class: match (q.time_to_drain_secs, q.backlog_growth_rate) {
            (None, Some(g)) if g > 0.0 => "growing",
            _ => "",
        },
        sparkline,
        signals: signals(q),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::QueueNames;

    /// Issue 34, case 6: a DLQ's inflow, derived from its depth and acks, read "≥ 0/s" when
    /// idle and "≥ 0.00/s" when barely moving.
    #[test]
    fn a_derived_inflow_reads_as_what_was_seen() {
        let names = QueueNames {
            broker: "b".into(),
            vhost: "/".into(),
            name: "work.dlq".into(),
            kind: "classic".into(),
            state: None,
        };
        let mut q = QueueView::unknown(names, chrono::Utc::now());
        q.inflow_source = InflowSource::DerivedLowerBound;
        let inflow = |q: &QueueView| queue_row(q, format::Sparkline::default()).publish_rate;
        for (rate, reads) in [(Some(0.0), "none seen"), (Some(0.004), "> 0/s"), (Some(2.5), "≥ 2.50/s"), (None, "—")]
        {
            q.inflow_rate = rate;
            assert_eq!(inflow(&q), reads, "{rate:?}");
        }
    }
}
