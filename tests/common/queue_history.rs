//! The synthetic history the roll-up tests write (`tests/rollups.rs`, the conformance suite's
//! `rollups`): three queues polled every 10 s, written as the poller writes them, and what their
//! depth was, to check the roll-ups against.

use warren::history::{BrokerSample, PollWrite, QueueMeta, StoredSample};

pub const POLL: i64 = 10;

/// The queues: a busy one, an idle one, one whose depth is unknown.
pub const QUEUES: [&str; 3] = ["busy", "idle", "unknown"];

/// The busy queue's depth at the poll numbered `poll` from the start.
pub fn busy_ready(poll: i64) -> i64 {
    (poll * 7) % 23
}

fn samples_at(poll: i64) -> [StoredSample; 3] {
    let busy = StoredSample {
        ready: Some(busy_ready(poll)),
        unacked: Some(1),
        consumers: Some(2),
        // The first poll of a queue has no rate yet.
        publish_rate_m: (poll > 0).then_some(1000 + (poll % 3) * 500),
        ..StoredSample::default()
    };
    let idle = StoredSample { ready: Some(5), unacked: Some(0), consumers: Some(0), ..StoredSample::default() };
    let unknown = StoredSample { consumers: Some(1), ..StoredSample::default() };
    [busy, idle, unknown]
}

/// The polls of one broker's history from `start`: what each writes, as the poller writes it
/// (a queue's row on change, and an hourly keyframe).
pub struct Polls {
    start: i64,
    /// The queues' ids, as [`QUEUES`], once the first poll has written them.
    pub ids: Vec<i64>,
    last: [Option<(i64, StoredSample)>; 3],
}

impl Polls {
    pub fn new(start: i64) -> Polls {
        Polls { start, ids: Vec::new(), last: [None; 3] }
    }

    /// The write of the poll at `ts`: the broker's depth is known (1), its unacked count is not.
    pub fn write(&mut self, broker_id: i64, ts: i64) -> PollWrite {
        let poll = (ts - self.start) / POLL;
        let mut write = PollWrite { broker_id, ts, ..PollWrite::default() };
        write.broker = BrokerSample { queues: 3, ready: Some(1), poll_ms: 5, ..BrokerSample::default() };
        for (i, sample) in samples_at(poll).into_iter().enumerate() {
            if self.last[i].is_some_and(|(at, s)| s == sample && ts - at < 3600) {
                continue;
            }
            if self.ids.is_empty() {
                let meta = QueueMeta {
                    vhost: "v".into(),
                    name: QUEUES[i].into(),
                    kind: "classic".into(),
                    ..QueueMeta::default()
                };
                write.upserts.push(meta);
                write.new_samples.push((i, sample));
            } else {
                write.samples.push((self.ids[i], sample));
            }
            self.last[i] = Some((ts, sample));
        }
        write
    }

    /// Takes the ids the first poll's write returned.
    pub fn written(&mut self, ids: Vec<i64>) {
        if self.ids.is_empty() {
            self.ids = ids;
        }
    }
}

/// (min, max, average, polls) of the busy queue's depth over the `polls` in `[from, to)` of a
/// history that started at `start`.
pub fn expected_busy(start: i64, polls: &[i64], from: i64, to: i64) -> (i64, i64, f64, i64) {
    let values: Vec<i64> =
        polls.iter().filter(|&&p| p >= from && p < to).map(|p| busy_ready((p - start) / POLL)).collect();
    let avg = values.iter().sum::<i64>() as f64 / values.len() as f64;
    (*values.iter().min().unwrap(), *values.iter().max().unwrap(), avg, values.len() as i64)
}
