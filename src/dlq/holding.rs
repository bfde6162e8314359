//! The holding queue: where a message goes when giving it back would be its last delivery
//! (issue 16, must-have 2).
//!
//! Before RabbitMQ 4.3, every return of a quorum queue's message counts as a delivery, the
//! returns of a failed, cancelled or filtered move and of a snapshot included (DOMAIN.md §5,
//! §8). (4.3 counts only failed deliveries, not warren's nacks: there the callers pass no limit,
//! `policies::hand_back_limit_now`, and nothing is held.) A message read
//! with an `x-delivery-count` at the queue's delivery limit is dropped, or dead-lettered, by the
//! broker the moment it is given back: three failed requeues of a DLQ with a limit of 2 let the
//! broker drop all 50 (issue 16, case 1). warren never hands such a message back. It copies it,
//! with publisher confirms and `mandatory`, into a classic queue it declares beside the source,
//! `warren.held.<source>`, and acks the original only once that copy is confirmed and not
//! returned. A classic queue has no delivery limit, so the held message can be browsed and
//! requeued from there like from any dead-letter queue: its `x-death` history comes along.

use std::sync::Arc;

use lapin::options::QueueDeclareOptions;
use lapin::types::{AMQPValue, FieldTable};
use lapin::{BasicProperties, Connection};
use sha2::{Digest, Sha256};

use super::message::BROKER_BOOKKEEPING_HEADERS;
use super::publish::{Identify, Publisher};
use crate::broker::management::{ManagementClient, RawQueue};
use crate::broker::policies::{self, Overflow};

/// Every holding queue's name starts so.
pub const PREFIX: &str = "warren.held.";
/// The broker's limit on a queue name, in bytes.
const MAX_NAME: usize = 255;

/// The holding queue of `source`: `warren.held.<source>`, or, for a name too long for that,
/// its first bytes and a digest of the whole, so that each source keeps one holding queue.
pub fn queue_name(source: &str) -> String {
    if PREFIX.len() + source.len() <= MAX_NAME {
        return format!("{PREFIX}{source}");
    }
    let digest: String = Sha256::digest(source.as_bytes())[..8].iter().map(|b| format!("{b:02x}")).collect();
    let mut cut = MAX_NAME - PREFIX.len() - 1 - digest.len();
    while !source.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{PREFIX}{}.{digest}", &source[..cut])
}

/// Whether giving back a message read with `delivery_count` (its `x-delivery-count`: returns so
/// far) would make the broker drop it, on a queue whose delivery limit is `limit`. Measured: with
/// a limit of 2 the third return removes the message, which was read with a count of 2; on 4.0.5
/// with the default of 20, the 21st. A 4.0.5 quorum DLQ's first read shows the count the message
/// had in its source queue (DOMAIN.md §8), which can only make this answer yes too early.
pub fn last_delivery(limit: Option<i64>, delivery_count: i64) -> bool {
    limit.is_some_and(|limit| limit >= 0 && delivery_count >= limit)
}

/// Checks, before a queue with a delivery limit is read, that its holding queue would keep what
/// it is given under the policies as they stand (a vhost-wide policy with a message TTL is
/// common, and would expire held messages). Declares nothing: most reads hold nothing. An
/// operator can exempt the holding queues with a policy of higher priority for `^warren\.held\.`.
pub async fn check_before_reading(management: &ManagementClient, vhost: &str, source: &str) -> Result<(), String> {
    let queue = queue_name(source);
    let cannot = |e: &dyn std::fmt::Display| {
        format!(
            "not read: a message read at its delivery limit would go to the holding queue {queue:?}, and {e}; \
             nothing was read"
        )
    };
    let (user, _) = management
        .policies("policies", vhost)
        .await
        .map_err(|e| cannot(&format!("the policies could not be read: {e}")))?;
    let (operator, _) = management
        .policies("operator-policies", vhost)
        .await
        .map_err(|e| cannot(&format!("the operator policies could not be read: {e}")))?;
    let mut planned: RawQueue =
        serde_json::from_value(serde_json::json!({"name": queue, "vhost": vhost, "type": "classic"}))
            .expect("a queue with a name and a type");
    policies::Resolver::new(&user, &operator).effective_now(&mut planned);
    match loses_messages(&planned) {
        Some(problem) => Err(cannot(&problem)),
        None => Ok(()),
    }
}

/// Why a queue would lose messages it holds: a length limit that drops the oldest, a message
/// TTL, an expiry.
fn loses_messages(queue: &RawQueue) -> Option<String> {
    if let Overflow::DropHead { limit } = policies::overflow(queue) {
        return Some(format!("a policy or argument limits it to {limit} and drops the oldest when full"));
    }
    policies::expiry(queue).map(|expiry| format!("a policy or argument gives it {expiry}"))
}

/// The headers a copy of a message carries, held or replayed: all of the original's except those
/// the broker keeps for its own bookkeeping of one queue (`message::BROKER_BOOKKEEPING_HEADERS`).
pub fn copied_headers(properties: &BasicProperties) -> FieldTable {
    let mut headers = FieldTable::default();
    for (key, value) in properties.headers().as_ref().map(FieldTable::inner).into_iter().flatten() {
        if !BROKER_BOOKKEEPING_HEADERS.contains(&key.as_str()) {
            headers.insert(key.clone(), value.clone());
        }
    }
    headers
}

/// A source's holding queue, declared and checked, with a publisher of its own (a return is
/// then this channel's, never mistaken for one of a move's copies).
pub struct Holding {
    publisher: Publisher<()>,
    queue: String,
}

impl Holding {
    /// Declares the holding queue of `source` (durable, classic whatever the vhost's default
    /// queue type) and checks, with the policies as they stand, that it keeps what it is given:
    /// no length limit that drops, no message TTL, no expiry.
    pub async fn open(
        connection: &Connection,
        management: &ManagementClient,
        vhost: &str,
        source: &str,
    ) -> Result<Holding, String> {
        let queue = queue_name(source);
        let cannot = |e: &dyn std::fmt::Display| format!("cannot use the holding queue {queue:?}: {e}");
        let publisher = Publisher::open(connection, Identify::Content).await.map_err(|e| cannot(&e))?;
        let channel = publisher.channel();
        let mut arguments = FieldTable::default();
        arguments.insert("x-queue-type".into(), AMQPValue::LongString("classic".into()));
        let options = QueueDeclareOptions { durable: true, ..Default::default() };
        channel.queue_declare(queue.as_str().into(), options, arguments).await.map_err(|e| cannot(&e))?;
        let declared = policies::queue_now(management, vhost, &queue).await.map_err(|e| cannot(&e))?;
        let Some(declared) = declared else { return Err(cannot(&"it is gone right after it was declared")) };
        if let Some(problem) = loses_messages(&declared) {
            return Err(cannot(&problem));
        }
        Ok(Holding { publisher, queue })
    }

    pub fn queue(&self) -> &str {
        &self.queue
    }

    /// Copies one message into the holding queue and waits for the broker's confirm. `Ok` means
    /// the copy is safe and the original may be acked.
    pub async fn hold(&mut self, data: &[u8], properties: &BasicProperties) -> Result<(), String> {
        let properties = properties.clone().with_headers(copied_headers(properties));
        let route = ("", self.queue.as_str(), self.queue.clone());
        let settled = self.publisher.send_one((), route, Arc::new(data.to_vec()), properties).await;
        settled
            .and_then(|s| s.outcome)
            .map_err(|e| format!("could not be copied to the holding queue {:?}: {e}", self.queue))
    }

    pub async fn close(self) {
        self.publisher.close("done").await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_at_its_limit_would_not_survive_a_hand_back() {
        assert!(!last_delivery(None, 1_000));
        assert!(!last_delivery(Some(2), 0));
        assert!(!last_delivery(Some(2), 1));
        assert!(last_delivery(Some(2), 2), "the third return drops it");
        assert!(last_delivery(Some(2), 7));
        assert!(last_delivery(Some(20), 20));
        assert!(last_delivery(Some(0), 0));
        assert!(!last_delivery(Some(-1), 50), "a negative limit is none");
    }

    #[test]
    fn every_source_gets_one_holding_queue_within_the_name_limit() {
        assert_eq!(queue_name("orders.dlq"), "warren.held.orders.dlq");
        let long = "é".repeat(200); // 400 bytes
        let held = queue_name(&long);
        assert!(held.len() <= MAX_NAME && held.starts_with(PREFIX), "{}", held.len());
        assert_eq!(held, queue_name(&long), "the same source, the same queue");
        assert_ne!(held, queue_name(&format!("{long}x")), "a source that differs only past the cut");
        let exact = "q".repeat(MAX_NAME - PREFIX.len());
        assert_eq!(queue_name(&exact), format!("{PREFIX}{exact}"));
    }
}
