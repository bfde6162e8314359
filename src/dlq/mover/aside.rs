//! Where a message the mover read and did not move goes: back to the source at the end of the
//! move, or, when that hand-back would be its last delivery (a quorum queue's delivery limit),
//! into the source's holding queue, its original acked once the copy is there. And how the
//! mover records each message's fate: in its report, its counters and its journal.

use lapin::message::Delivery;
use lapin::options::BasicAckOptions;
use lapin::BasicProperties;

use super::connection::MoveError;
use super::headers::delivery_count;
use super::moving::{Mover, Original};
use super::plan::Target;
use super::report::{Failed, Held, Moved, Progress};
use crate::dlq::fates::Fate;
use crate::dlq::holding::{self, Holding};

/// A whole-queue move stops after this many messages could not be moved: each one stays unacked
/// (in the prefetch window) until the end, and so many failures mean something is wrong.
const MAX_FAILURES: usize = 100;

/// Where a message read and not moved went.
enum Aside {
    /// It goes back to the source at the end of the move.
    Kept,
    /// It is in this holding queue, its original acked.
    Held(String),
    /// Giving it back will be its last delivery, and holding it failed: why.
    AtLimit(String),
}

impl<'a> Mover<'a> {
    pub(super) fn moved(&mut self, m: Moved) {
        Progress::add(&self.progress.moved);
        self.progress.record(Fate::new(m.position, m.message_id.as_deref(), "moved", &m.to_queue));
        self.report.moved.push(m);
    }

    fn failed(&mut self, f: Failed) {
        Progress::add(&self.progress.failed);
        self.progress.record(Fate::new(f.position, f.message_id.as_deref(), "failed", &f.reason));
        self.report.failed.push(f);
    }

    fn held(&mut self, h: Held) {
        self.progress.record(Fate::new(h.position, h.message_id.as_deref(), "held", &h.queue));
        self.report.held.push(h);
    }

    /// Records a message that cannot be moved for a reason of its own (not the target's): it is
    /// set aside and the move goes on.
    pub(super) async fn skip(
        &mut self,
        position: usize,
        original: Original<'_>,
        reason: String,
    ) -> Result<(), MoveError> {
        let reason = self.set_aside_failed(position, original, reason).await?;
        self.failed(Failed { position, message_id: original.message_id(), reason });
        Ok(())
    }

    /// Records a message that its target did not take: it is set aside, and a fixed target
    /// that cannot take one message will not take the next, so the move stops.
    pub(super) async fn fail(
        &mut self,
        position: usize,
        original: Original<'_>,
        reason: String,
    ) -> Result<(), MoveError> {
        let detail = self.set_aside_failed(position, original, reason.clone()).await?;
        self.failed(Failed { position, message_id: original.message_id(), reason: detail });
        if matches!(self.plan.target, Target::Queue(_)) {
            self.stop.get_or_insert(reason);
        } else if self.report.failed.len() >= MAX_FAILURES {
            self.stop.get_or_insert(format!("stopped after {MAX_FAILURES} messages could not be moved"));
        }
        Ok(())
    }

    /// Sets a failed message aside; returns the failure's reason with where the message is now.
    async fn set_aside_failed(
        &mut self,
        position: usize,
        original: Original<'_>,
        reason: String,
    ) -> Result<String, MoveError> {
        Ok(match self.set_aside_original(position, original).await? {
            Aside::Kept => reason,
            Aside::Held(queue) => {
                format!("{reason}; it is in {queue:?}: giving it back would have been its last delivery")
            }
            Aside::AtLimit(why) => format!("{reason}; {why}"),
        })
    }

    /// A delivery read and not moved (not selected, or read after the move stopped).
    pub(super) async fn set_aside(&mut self, position: usize, delivery: &Delivery) -> Result<(), MoveError> {
        let original = Original::of(delivery);
        if let Aside::AtLimit(reason) = self.set_aside_original(position, original).await? {
            self.failed(Failed { position, message_id: original.message_id(), reason });
        }
        Ok(())
    }

    /// Puts a message read and not moved where it is safe: back in the source at the end, unless
    /// that hand-back would be its last delivery (`holding::last_delivery`): then it is copied to
    /// the holding queue and its original acked. If holding fails, the move stops reading, so no
    /// further message is read only to meet the same end.
    async fn set_aside_original(&mut self, position: usize, original: Original<'_>) -> Result<Aside, MoveError> {
        let count = delivery_count(original.properties);
        if !holding::last_delivery(self.plan.delivery_limit, count) {
            self.kept.push(original.tag);
            self.report.returned += 1;
            return Ok(Aside::Kept);
        }
        match self.hold(original.data, original.properties).await {
            Ok(queue) => {
                self.source.basic_ack(original.tag, BasicAckOptions::default()).await?;
                let message_id = original.message_id();
                self.held(Held { position, message_id, queue: queue.clone(), delivery_count: count });
                Ok(Aside::Held(queue))
            }
            Err(e) => {
                self.kept.push(original.tag);
                self.report.returned += 1;
                let limit = self.plan.delivery_limit.unwrap_or_default();
                let why = format!(
                    "read with delivery count {count} of the limit {limit}, so the broker drops or dead-letters it \
                     when given back; holding it failed: {e}"
                );
                self.stop.get_or_insert_with(|| format!("a message at its delivery limit could not be held: {e}"));
                Ok(Aside::AtLimit(why))
            }
        }
    }

    /// Copies a message into the source's holding queue, opened on first use; returns its name.
    async fn hold(&mut self, data: &[u8], properties: &BasicProperties) -> Result<String, String> {
        if self.holding.is_none() {
            let opened = Holding::open(self.connection, self.targets.management(), self.vhost, self.queue).await;
            self.holding = Some(opened);
        }
        match self.holding.as_mut().expect("opened above") {
            Ok(holding) => holding.hold(data, properties).await.map(|()| holding.queue().to_string()),
            Err(e) => Err(e.clone()),
        }
    }
}
