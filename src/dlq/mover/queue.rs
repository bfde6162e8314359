//! What the mover does to a queue as a whole: asks how many messages it holds ready (live, by a
//! passive declare; or with their bytes, from the management API), gives back the deliveries
//! it read and did not take, in order, and empties it.

use std::time::Duration;

use lapin::options::{BasicNackOptions, QueueDeclareOptions};
use lapin::types::FieldTable;
use lapin::Connection;
use serde::Deserialize;

use super::connection::{connect, short_name, MoveError};
use crate::broker::management::ManagementClient;
use crate::config::BrokerConfig;

/// Empties a queue (AMQP queue.purge); returns how many messages it held.
pub async fn purge(broker: &BrokerConfig, vhost: &str, queue: &str) -> Result<u32, MoveError> {
    let connection = connect(broker, vhost).await?;
    let outcome = async {
        let channel = connection.create_channel().await?;
        let purged = channel.queue_purge(short_name("the queue", queue)?, Default::default()).await?;
        channel.close(200, "done".into()).await?;
        Ok::<u32, MoveError>(purged)
    }
    .await;
    if let Err(e) = connection.close(200, "done".into()).await {
        tracing::warn!(error = %e, "closing the purge's AMQP connection");
    }
    outcome
}

/// A queue's ready messages and their bytes, as the management API counts them (it lags behind
/// the queue by a few seconds); `None` where it does not say (no statistics kept).
pub(in crate::dlq) async fn ready_sizes(
    broker: &BrokerConfig,
    vhost: &str,
    queue: &str,
) -> Result<Option<(u64, u64)>, crate::broker::management::BrokerError> {
    #[derive(Deserialize)]
    struct Sizes {
        messages_ready: Option<u64>,
        message_bytes_ready: Option<u64>,
    }
    let path = format!(
        "api/queues/{}/{}?columns=messages_ready,message_bytes_ready",
        crate::broker::management::encode_segment(vhost),
        crate::broker::management::encode_segment(queue)
    );
    let (sizes, _) = ManagementClient::new(broker).get::<Sizes>(&path).await?;
    Ok(sizes.messages_ready.zip(sizes.message_bytes_ready))
}

/// Ready messages of `queue`, or `None` when it does not exist. A failed passive declare closes
/// its channel, hence a channel of its own.
pub async fn queue_ready(connection: &Connection, queue: &str) -> Result<Option<u32>, MoveError> {
    let channel = connection.create_channel().await?;
    match ready_count(&channel, queue).await {
        Ok(n) => {
            channel.close(200, "done".into()).await?;
            Ok(Some(n))
        }
        Err(_) => Ok(None),
    }
}

/// Ready messages in `queue`, from a passive declare (live, unlike the management API's
/// statistics which lag by seconds).
pub async fn ready_count(channel: &lapin::Channel, queue: &str) -> Result<u32, MoveError> {
    let declared = channel
        .queue_declare(
            short_name("the queue", queue)?,
            QueueDeclareOptions { passive: true, ..Default::default() },
            FieldTable::default(),
        )
        .await?;
    Ok(declared.message_count())
}

/// Returns unacked deliveries to their queue, oldest first. Classic queues put a returned
/// message back in its original place, so a nack each, back to back, is enough. Quorum queues apply returns asynchronously: measured
/// on 3.10, a multiple nack, or nacks sent back to back, put part of the messages back in reverse
/// or rotated order; waiting until the queue counts each returned message keeps the order.
///
/// Returns whether the order was kept for certain: `false` when another consumer took messages
/// meanwhile (the count never reached what was given back). The waits stop then: each would
/// last its whole bound (a snapshot of 100 from a queue being drained took 168 s), and the
/// order of a queue others read from is theirs to change anyway.
pub(super) async fn give_back_in_order(
    channel: &lapin::Channel,
    queue: &str,
    tags: &[u64],
    quorum: bool,
) -> Result<bool, MoveError> {
    let mut expected = ready_count(channel, queue).await?;
    if !quorum {
        for &tag in tags {
            channel.basic_nack(tag, BasicNackOptions { multiple: false, requeue: true }).await?;
        }
        // The queue applies returns after the nacks are sent: wait, so that what the caller
        // counts next includes them.
        return wait_until_counted(channel, queue, expected + tags.len() as u32).await;
    }
    let mut counted = true;
    for &tag in tags {
        channel.basic_nack(tag, BasicNackOptions { multiple: false, requeue: true }).await?;
        expected += 1;
        if counted {
            counted = wait_until_counted(channel, queue, expected).await?;
        }
    }
    Ok(counted)
}

/// Waits until `queue` holds `expected` ready messages; `false` if it did not within 2 s
/// (others consume meanwhile). The messages are back either way, only their place could differ.
async fn wait_until_counted(channel: &lapin::Channel, queue: &str, expected: u32) -> Result<bool, MoveError> {
    let deadline = std::time::Instant::now() + Duration::from_secs(2);
    loop {
        if ready_count(channel, queue).await? >= expected {
            return Ok(true);
        }
        if std::time::Instant::now() >= deadline {
            return Ok(false);
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}
