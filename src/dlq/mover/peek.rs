//! A snapshot's read: messages from a queue's head, each read without an ack and all given back
//! in order; a message at its delivery limit goes to the holding queue instead.

use std::time::Duration;

use lapin::options::{BasicAckOptions, BasicGetOptions};

use super::connection::{connect, short_name, MoveError};
use super::headers::delivery_count;
use super::peeked::{delivery_identity, peeked};
use super::queue::give_back_in_order;
use crate::broker::management::ManagementClient;
use crate::config::BrokerConfig;
use crate::dlq::holding::{self, Holding};

/// How long a snapshot reads at most. The give-back after it no longer waits on consumers, so
/// the answer comes within about 10 s whatever they do (issue 16, must-have 7); a broker slow
/// to serve reads (each read of a quorum queue is a log write) gets a shorter snapshot, which
/// says so.
const PEEK_READ_TIME: Duration = Duration::from_secs(8);

/// The headers and kept payloads a snapshot reads, at most: a message's headers can take up to
/// the AMQP client's frame ceiling (16 MiB, `lapin::INCOMING_FRAME_CEILING`; the broker sends
/// headers past its own frame_max when it adds `x-death`), so a count alone does not bound it.
const PEEK_MEMORY: usize = 64 * 1024 * 1024;

/// What a peek read, and why it stopped early or may show another order, when it did.
pub struct Peeked {
    pub messages: Vec<crate::broker::management::PeekedMessage>,
    /// Each message's identity (`message::identity`), computed on the whole payload.
    pub identities: Vec<String>,
    /// The messages (indices into `messages`) that are no longer in the queue: giving them back
    /// would have been their last delivery, so they are in this holding queue.
    pub held: Vec<usize>,
    pub holding_queue: Option<String>,
    pub note: Option<String>,
}

/// Reads up to `count` messages from the head of `queue` and gives them all back, in order:
/// `basic.get` without ack for each, then a nack for each, oldest first. Unlike the management API's "get
/// messages" (measured on 3.10: it scrambled the order of a quorum queue after one read), this
/// keeps the order for classic and quorum queues alike, and keeps header types. On a quorum
/// queue each read still counts as one delivery; the caller asks the user first. A message read
/// at the queue's `delivery_limit` is not given back, which would make the broker drop it: it
/// goes to the holding queue (`holding`), and the snapshot says so.
pub async fn peek(
    broker: &BrokerConfig,
    vhost: &str,
    queue: &str,
    count: usize,
    payload_limit: usize,
    delivery_limit: Option<i64>,
) -> Result<Peeked, MoveError> {
    if delivery_limit.is_some() {
        holding::check_before_reading(&ManagementClient::new(broker), vhost, queue)
            .await
            .map_err(MoveError::Refused)?;
    }
    let queue_name = short_name("the queue", queue)?;
    let connection = connect(broker, vhost).await?;
    let outcome = async {
        let channel = connection.create_channel().await?;
        let started = std::time::Instant::now();
        let mut messages = Vec::new();
        let mut tags = Vec::new();
        let mut notes = Vec::new();
        let mut held = Vec::new();
        let mut identities = Vec::new();
        let mut holding: Option<Holding> = None;
        let mut kept_bytes = 0;
        while messages.len() < count {
            if started.elapsed() >= PEEK_READ_TIME {
                notes.push(format!(
                    "stopped after {} of {count} messages: reading took longer than {} s",
                    messages.len(),
                    PEEK_READ_TIME.as_secs()
                ));
                break;
            }
            if kept_bytes >= PEEK_MEMORY {
                notes.push(format!(
                    "stopped after {} of {count} messages: their headers and payloads took more than {} MiB",
                    messages.len(),
                    PEEK_MEMORY / (1024 * 1024)
                ));
                break;
            }
            let Some(message) = channel.basic_get(queue_name.clone(), BasicGetOptions { no_ack: false }).await? else {
                break;
            };
            let delivery = message.delivery;
            kept_bytes += delivery.data.len().min(payload_limit)
                + lapin::content_header_frame_size(&delivery.properties).unwrap_or(0);
            messages.push(peeked(&delivery, payload_limit));
            identities.push(delivery_identity(&delivery));
            let count = delivery_count(&delivery.properties);
            if !holding::last_delivery(delivery_limit, count) {
                tags.push(delivery.delivery_tag);
                continue;
            }
            if holding.is_none() {
                let management = ManagementClient::new(broker);
                match Holding::open(&connection, &management, vhost, queue).await {
                    Ok(opened) => holding = Some(opened),
                    Err(e) => {
                        tags.push(delivery.delivery_tag);
                        notes.push(at_limit_not_held(messages.len(), count, &e));
                        break;
                    }
                }
            }
            let holder = holding.as_mut().expect("opened above");
            match holder.hold(&delivery.data, &delivery.properties).await {
                Ok(()) => {
                    channel.basic_ack(delivery.delivery_tag, BasicAckOptions::default()).await?;
                    held.push(messages.len() - 1);
                }
                Err(e) => {
                    tags.push(delivery.delivery_tag);
                    notes.push(at_limit_not_held(messages.len(), count, &e));
                    break;
                }
            }
        }
        let holding_queue = holding.as_ref().map(|h| h.queue().to_string());
        if let (false, Some(queue)) = (held.is_empty(), &holding_queue) {
            notes.push(format!(
                "{} of these messages had been delivered as often as the queue's delivery limit allows: giving them \
                 back would have made the broker drop them, so they are now in {queue:?}, where they can be browsed \
                 and requeued",
                held.len()
            ));
        }
        if let Some(holding) = holding {
            holding.close().await;
        }
        // Always the careful way: the caller does not say whether the queue is a quorum queue.
        if !give_back_in_order(&channel, queue, &tags, true).await? {
            notes.push(
                "another consumer took messages while the snapshot was read: they were given back, their order \
                 in the queue may differ from the snapshot's"
                    .to_string(),
            );
        }
        channel.close(200, "done".into()).await?;
        let note = (!notes.is_empty()).then(|| notes.join("; "));
        Ok::<_, MoveError>(Peeked { messages, identities, held, holding_queue, note })
    }
    .await;
    if let Err(e) = connection.close(200, "done".into()).await {
        tracing::warn!(error = %e, "closing the browser's AMQP connection");
    }
    outcome
}

/// The snapshot's note when a message read at its delivery limit could not be held: the read
/// stops there.
fn at_limit_not_held(position: usize, count: i64, error: &str) -> String {
    format!(
        "stopped at message {position}: it had been delivered {count} times, as often as the queue's delivery limit \
         allows, so giving it back makes the broker drop or dead-letter it, and holding it failed: {error}"
    )
}
