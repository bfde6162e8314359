//! Test fixtures: queues with only the numbers a test cares about, everything else unknown.

use chrono::{DateTime, Utc};

use crate::metrics::{QueueNames, QueueView};

/// The evaluation time `secs` seconds after a fixed start.
pub fn at(secs: i64) -> DateTime<Utc> {
    DateTime::from_timestamp(1_700_000_000 + secs, 0).unwrap()
}

/// A classic queue on broker `local` of which the broker told nothing yet.
pub fn queue(vhost: &str, name: &str) -> TestQueue {
    TestQueue {
        view: QueueView {
            durable: Some(true),
            ..QueueView::unknown(
                QueueNames {
                    broker: "local".into(),
                    vhost: vhost.into(),
                    name: name.into(),
                    kind: "classic".into(),
                    state: Some("running".into()),
                },
                at(0),
            )
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
