//! The broker's own dynamic shovel, for `cargo bench --bench requeue` only: warren's mover is
//! measured against it. warren does not use it for moves any more. A shovel publishes without
//! `mandatory`, and the broker confirms a publish that no queue took, so with the target
//! deleted mid-move `ack-mode: on-confirm` acks originals whose copies went nowhere (issue 16,
//! case 3: 13,053 of 20,000 lost beyond what the delete destroyed). No shovel setting asks for
//! returns.
//!
//! With `src-delete-after: queue-length` the shovel moves the messages present when it starts
//! and then removes itself; this follows the source queue's depth and deletes it on cancel.

use std::sync::atomic::Ordering;
use std::time::Duration;

use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

use warren::broker::management::{encode_segment, BrokerError, ManagementClient};
use warren::config::BrokerConfig;
use warren::dlq::mover::{queue_ready, ready_count};
use warren::dlq::{MoveError, MoveReport, Progress};

/// How often the source queue's depth is read for progress.
const PROGRESS_EVERY: Duration = Duration::from_millis(250);

#[derive(Debug, thiserror::Error)]
pub enum ShovelError {
    /// The broker has no shovel plugin (or refuses dynamic shovels): use the in-process mover.
    #[error("dynamic shovels are not available on this broker: {0}")]
    Unavailable(String),
    #[error(transparent)]
    Move(#[from] MoveError),
    #[error("management API: {0}")]
    Broker(#[from] BrokerError),
}

/// The shovel's name for a move recorded under `audit_id`.
pub fn name(audit_id: i64) -> String {
    format!("warren-move-{audit_id}")
}

/// Moves every message `queue` holds now to `target` (an existing queue in the same vhost).
pub async fn move_all(
    broker: &BrokerConfig,
    vhost: &str,
    queue: &str,
    target: &str,
    audit_id: i64,
    progress: &Progress,
    cancel: &CancellationToken,
) -> Result<MoveReport, ShovelError> {
    let connection = warren::dlq::connect(broker, vhost).await?;
    let outcome = shovel(&connection, broker, vhost, queue, target, audit_id, progress, cancel).await;
    if let Err(e) = connection.close(200, "done".into()).await {
        tracing::warn!(error = %e, "closing the shovel watcher's AMQP connection");
    }
    outcome
}

#[allow(clippy::too_many_arguments)]
async fn shovel(
    connection: &lapin::Connection,
    broker: &BrokerConfig,
    vhost: &str,
    queue: &str,
    target: &str,
    audit_id: i64,
    progress: &Progress,
    cancel: &CancellationToken,
) -> Result<MoveReport, ShovelError> {
    let Some(expected) = queue_ready(connection, queue).await? else {
        return Err(MoveError::Refused(format!("no queue named {queue:?} in this vhost")).into());
    };
    // The shovel would create a missing destination as a plain classic queue: refuse instead,
    // as the in-process mover does (nothing is moved).
    if queue_ready(connection, target).await?.is_none() {
        return Err(MoveError::Refused(format!("no queue named {target:?} in this vhost; nothing was moved")).into());
    }
    progress.expected.store(u64::from(expected), Ordering::Relaxed);
    let mut report = MoveReport {
        note: Some(format!(
            "moved by the broker's dynamic shovel {:?}; copies carry its x-shovelled header, and message ids are \
             not known to warren",
            name(audit_id)
        )),
        ..MoveReport::default()
    };
    if expected == 0 {
        report.left = Some(0);
        return Ok(report);
    }

    let client = ManagementClient::new(broker);
    let path = format!("api/parameters/shovel/{}/{}", encode_segment(vhost), encode_segment(&name(audit_id)));
    // `amqp://` without a host is the local node; the path names the vhost.
    let uri = format!("amqp:///{}", encode_segment(vhost));
    let definition = json!({"value": {
        "src-protocol": "amqp091",
        "src-uri": uri,
        "src-queue": queue,
        "src-delete-after": "queue-length",
        "dest-protocol": "amqp091",
        "dest-uri": uri,
        "dest-queue": target,
        "dest-add-forward-headers": true,
        "ack-mode": "on-confirm",
    }});
    match client.put_json(&path, &definition).await {
        Ok(()) => {}
        Err(BrokerError::Http { status: 400 | 404, body, .. }) if body.contains("shovel") => {
            return Err(ShovelError::Unavailable(body));
        }
        Err(e) => return Err(e.into()),
    }

    let status_path = format!("api/shovels/{}", encode_segment(vhost));
    // One channel for the progress reads; if the source goes away it closes, and the depth
    // reads as 0 (nothing left to move).
    let watch = connection.create_channel().await.map_err(MoveError::from)?;
    loop {
        tokio::select! {
            _ = cancel.cancelled() => {
                client.delete(&path).await?;
                report.cancelled = true;
                break;
            }
            _ = tokio::time::sleep(PROGRESS_EVERY) => {}
        }
        let left = ready_count(&watch, queue).await.unwrap_or(0);
        progress.moved.store(u64::from(expected.saturating_sub(left)), Ordering::Relaxed);
        match client.get::<Value>(&path).await {
            Ok(_) => {}
            // The shovel removed itself: it moved what the queue held when it started.
            Err(BrokerError::Http { status: 404, .. }) => break,
            Err(e) => return Err(e.into()),
        }
        // A shovel that cannot run (for example its destination went away) says so here.
        if let Ok((shovels, _)) = client.get::<Vec<Value>>(&status_path).await {
            let ours = shovels.iter().find(|s| s.get("name").and_then(Value::as_str) == Some(&name(audit_id)));
            if let Some(s) = ours.filter(|s| s.get("state").and_then(Value::as_str) == Some("terminated")) {
                client.delete(&path).await?;
                let reason = s.get("reason").map(Value::to_string).unwrap_or_else(|| "no reason given".to_string());
                report.stopped = Some(format!("the shovel stopped: {reason}"));
                break;
            }
        }
    }
    let left = queue_ready(connection, queue).await?.unwrap_or(0);
    watch.close(200, "done".into()).await.ok();
    report.left = Some(left);
    let moved = u64::from(expected.saturating_sub(left));
    progress.moved.store(moved, Ordering::Relaxed);
    progress.read.store(moved, Ordering::Relaxed);
    Ok(report)
}
