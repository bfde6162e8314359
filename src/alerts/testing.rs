//! Test fixtures: queues with only the numbers a test cares about, everything else unknown.

use chrono::{DateTime, Utc};

use crate::metrics::{AgeSource, QueueView};

/// The evaluation time `secs` seconds after a fixed start.
pub fn at(secs: i64) -> DateTime<Utc> {
    DateTime::from_timestamp(1_700_000_000 + secs, 0).unwrap()
}

/// A classic queue on broker `local` of which the broker told nothing yet.
pub fn queue(vhost: &str, name: &str) -> TestQueue {
    TestQueue {
        view: QueueView {
            broker: "local".into(),
            vhost: vhost.into(),
            name: name.into(),
            kind: "classic".into(),
            durable: Some(true),
            state: Some("running".into()),
            ready: None,
            unacked: None,
            total: None,
            consumers: None,
            publish_rate: None,
            deliver_rate: None,
            ack_rate: None,
            redeliver_rate: None,
            delivery_limit: None,
            oldest_age_secs: None,
            oldest_age_source: AgeSource::Unknown,
            oldest_age_lower_bound: false,
            fifo_broken_since: None,
            custody_held: None,
            custody_intake_stopped: None,
            age_since_first_publish: false,
            redelivery_share: None,
            backlog_growth_rate: None,
            inflow_rate: None,
            inflow_source: Default::default(),
            time_to_drain_secs: None,
            no_consumers: false,
            hung_consumer_secs: None,
            holding_secs: None,
            dead_letters: Default::default(),
            arguments: Default::default(),
            policy: None,
            effective_policy: Default::default(),
            updated_at: at(0),
            deleted: false,
            id: None,
            publish_count: None,
            head_ts: None,
            estimate: None,
        },
    }
}

pub struct TestQueue {
    pub view: QueueView,
}

impl TestQueue {
    pub fn broker(mut self, broker: &str) -> Self {
        self.view.broker = broker.into();
        self
    }

    pub fn kind(mut self, kind: &str) -> Self {
        self.view.kind = kind.into();
        self
    }

    /// Some queue dead-letters into this one.
    pub fn dlq(mut self) -> Self {
        self.view.dead_letters.is_dlq = true;
        self
    }

    pub fn ready(mut self, ready: u64) -> Self {
        self.view.ready = Some(ready);
        self
    }

    pub fn total(mut self, total: u64) -> Self {
        self.view.total = Some(total);
        self
    }

    pub fn publish_rate(mut self, rate: f64) -> Self {
        self.view.publish_rate = Some(rate);
        self
    }

    pub fn ack_rate(mut self, rate: f64) -> Self {
        self.view.ack_rate = Some(rate);
        self
    }

    pub fn deleted(mut self) -> Self {
        self.view.deleted = true;
        self
    }
}
