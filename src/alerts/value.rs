//! The numbers rules compare: read from a [`QueueView`], `None` when the broker did not give
//! them. An unknown value is never 0 (as everywhere in `metrics`): the evaluator treats it
//! as missing data.

use std::collections::HashMap;

use chrono::{DateTime, Utc};

use super::eval::AlertKey;
use super::rule::Metric;
use crate::metrics::{QueueView, STATS_STEP_SECS};

/// The value of `metric` for one queue. `dlq_inflow` needs two readings of the queue and comes
/// from [`InflowTracker`], so it is `None` here, as is `broker_unreachable`, which is no queue
/// value. `dlq_depth` is `None` on a queue that is not a dead-letter queue.
pub fn value(metric: Metric, view: &QueueView) -> Option<f64> {
    let count = |n: Option<u64>| n.map(|n| n as f64);
    match metric {
        Metric::Ready => count(view.ready),
        Metric::Unacked => count(view.unacked),
        Metric::Total => count(view.total),
        Metric::Consumers => count(view.consumers),
        // Exact or estimated alike; an estimate that is a lower bound can only be older, so a
        // `>` rule that fires on it is right.
        Metric::OldestAgeSecs => view.oldest_age_secs,
        Metric::PublishRate => view.publish_rate,
        Metric::AckRate => view.ack_rate,
        // warren's own reads (a snapshot, a move) are deliveries and redeliveries the broker
        // counts like the application's: no value then, rather than warren's (issue 31, case 9).
        Metric::DeliverRate | Metric::RedeliverRate | Metric::RedeliveryShare if view.own_reads => None,
        Metric::DeliverRate => view.deliver_rate,
        Metric::RedeliverRate => view.redeliver_rate,
        Metric::RedeliveryShare => view.redelivery_share,
        // 0 while the counters say no consumer is hung or holding (acks known, unacked known).
        Metric::HungConsumerSecs => view.hung_consumer_secs.or(held_known(view)),
        Metric::HoldingSecs => view.holding_secs.or(held_known(view)),
        Metric::RedeliveryLoopSecs => crate::metrics::looping(view).map(|_| view.redelivery_loop_secs.unwrap_or(0.0)),
        Metric::InflowRate => view.inflow_rate,
        Metric::TimeToDrainSecs => view.time_to_drain_secs,
        // From the change of depth (`apply_health`): publish − ack missed rejects, expiries and
        // dead letters that arrive (issue 17, case 5).
        Metric::BacklogGrowth => view.backlog_growth_rate,
        // What the broker holds and what warren took into custody: a rule on a DLQ's depth
        // keeps working once custody empties the broker's copy (issue 18, must-have 1).
        Metric::DlqDepth if view.dead_letters.is_dlq => count(dead_letters_held(view)),
        Metric::CustodyIntakeStopped => view.custody_intake_stopped.map(|stopped| if stopped { 1.0 } else { 0.0 }),
        Metric::DlqDepth | Metric::DlqInflow | Metric::BrokerUnreachable => None,
        // Node values come from `alerts::nodes::node_value`.
        Metric::NodeDown
        | Metric::MemoryAlarm
        | Metric::DiskAlarm
        | Metric::DiskFreePredictedSecs
        | Metric::FdUsedRatio
        | Metric::Partitions => None,
        // Values of a whole broker (`broker_values`).
        Metric::BlockedConnections | Metric::ConnectionChurn | Metric::UnroutableRate => None,
    }
}

/// 0 where a hold would be seen: the unacked count and the ack rate are known.
fn held_known(view: &QueueView) -> Option<f64> {
    view.unacked.and(view.ack_rate).map(|_| 0.0)
}

/// The values of a whole broker that broker-level rules compare: unknown when the broker did
/// not give them (connections not listed yet, or listed without their states).
pub fn broker_values(live: &crate::live::BrokerLive) -> super::BrokerValues {
    super::BrokerValues {
        blocked_connections: live.clients.as_ref().and_then(|c| c.blocked_connections()).map(|n| n as f64),
        connection_churn: live.connection_churn_per_sec,
        unroutable_rate: live.rates.unroutable_rate,
    }
}

/// A DLQ's dead letters: in the broker plus in warren's custody.
pub fn dead_letters_held(view: &QueueView) -> Option<u64> {
    // The poller counts custody in the total (`QueueView::apply_custody`).
    view.total
}

/// Measures how fast dead letters arrive in each DLQ.
///
/// The broker counts no publish for a dead-lettered message: it moves the message itself, not
/// through a channel, so a DLQ's `publish_rate` stays 0 while it fills (the same reason the FIFO
/// age estimate calls such queues `Impossible`). Inflow is therefore derived from the depth: the
/// growth of `total` between two readings at least one stats step apart (depths refresh in 5 s
/// steps, so closer readings would show 0 and then a burst), plus the ack rate when the broker
/// gives it, because a consumer draining the DLQ (a replay) would otherwise hide arrivals.
/// Messages that leave without an ack (TTL, max-length, purge) are not seen, so the result is a
/// lower bound. Readings are not persisted: after a restart the inflow is unknown for one step.
#[derive(Debug, Default)]
pub struct InflowTracker {
    readings: HashMap<AlertKey, DepthReading>,
}

#[derive(Debug, Clone, Copy)]
struct DepthReading {
    total: u64,
    at: DateTime<Utc>,
    /// The inflow measured when this reading was taken, repeated until the next full step.
    rate_per_sec: Option<f64>,
}

impl InflowTracker {
    /// Records the depth of a DLQ at `now` and returns its inflow, messages per second.
    pub fn observe(&mut self, key: &AlertKey, view: &QueueView, now: DateTime<Utc>) -> Option<f64> {
        // An unknown depth tells nothing: the previous reading stays the baseline.
        // Custody takes arrivals off the broker at once: count them where they went.
        let total = dead_letters_held(view)?;
        let Some(previous) = self.readings.get_mut(key) else {
            self.readings.insert(key.clone(), DepthReading { total, at: now, rate_per_sec: None });
            return None;
        };
        let dt_secs = (now - previous.at).num_milliseconds() as f64 / 1000.0;
        // Half a second of slack, as in `CounterWindow::baseline`: polls every 5 s drift a little.
        if dt_secs < STATS_STEP_SECS - 0.5 {
            return previous.rate_per_sec;
        }
        let growth = (total as f64 - previous.total as f64) / dt_secs;
        let rate = (growth + view.ack_rate.unwrap_or(0.0)).max(0.0);
        *previous = DepthReading { total, at: now, rate_per_sec: Some(rate) };
        Some(rate)
    }

    /// Forgets the queues for which `keep` is false.
    pub fn retain(&mut self, mut keep: impl FnMut(&AlertKey) -> bool) {
        self.readings.retain(|key, _| keep(key));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::alerts::testing::{at, queue};

    #[test]
    fn unknown_stays_unknown() {
        let q = queue("/", "orders").view;
        for metric in [Metric::Ready, Metric::PublishRate, Metric::OldestAgeSecs, Metric::BacklogGrowth] {
            assert_eq!(value(metric, &q), None, "{metric:?} the broker did not give is not 0");
        }
        let q = queue("/", "orders").ready(0).publish_rate(3.0).ack_rate(5.0).view;
        assert_eq!(value(Metric::Ready, &q), Some(0.0));
        assert_eq!(value(Metric::PublishRate, &q), Some(3.0));
        assert_eq!(value(Metric::BacklogGrowth, &q), None, "publish − ack is not the backlog's growth");
        let mut q = q;
        q.backlog_growth_rate = Some(-2.0);
        assert_eq!(value(Metric::BacklogGrowth, &q), Some(-2.0));
        assert_eq!(value(Metric::AckRate, &q), Some(5.0));
        assert_eq!(value(Metric::DeliverRate, &q), None);
    }

    #[test]
    fn dlq_depth_only_on_dlqs() {
        assert_eq!(value(Metric::DlqDepth, &queue("/", "orders").total(7).view), None);
        assert_eq!(value(Metric::DlqDepth, &queue("/", "orders.dlq").dlq().total(7).view), Some(7.0));
        assert_eq!(value(Metric::DlqInflow, &queue("/", "orders.dlq").dlq().total(7).view), None);
    }

    #[test]
    fn inflow_from_depth_growth_over_whole_stats_steps() {
        let mut tracker = InflowTracker::default();
        let key = AlertKey::queue("local", "/", "orders.dlq");
        let dlq = |total: u64| queue("/", "orders.dlq").dlq().total(total);
        assert_eq!(tracker.observe(&key, &dlq(10).view, at(0)), None, "one reading gives no rate");
        assert_eq!(tracker.observe(&key, &dlq(10).view, at(2)), None, "too close to the first reading");
        assert_eq!(tracker.observe(&key, &dlq(60).view, at(10)), Some(5.0));
        assert_eq!(tracker.observe(&key, &dlq(70).view, at(12)), Some(5.0), "repeats until the next step");
        // 20 arrived while a replay acked 3/s: the depth alone would show 2/s.
        assert_eq!(tracker.observe(&key, &dlq(80).ack_rate(3.0).view, at(20)), Some(5.0));
        // A purge is no negative inflow.
        assert_eq!(tracker.observe(&key, &dlq(0).view, at(30)), Some(0.0));
        assert_eq!(tracker.observe(&key, &queue("/", "orders.dlq").dlq().view, at(40)), None, "unknown depth");
        assert_eq!(tracker.observe(&key, &dlq(100).view, at(50)), Some(5.0), "baseline kept across it");
        tracker.retain(|_| false);
        assert_eq!(tracker.observe(&key, &dlq(200).view, at(60)), None, "forgotten");
    }
}
