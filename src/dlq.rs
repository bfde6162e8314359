//! Moving messages out of a dead-letter queue without ever losing one (DOMAIN.md §6).
//!
//! The only way messages leave a queue here: consume with manual acks, publish the chosen
//! message on a channel in confirm mode with `mandatory`, and ack the original delivery only
//! after the broker confirmed the copy and did not return it as unroutable. Everything not
//! moved is returned to the queue (consumer cancelled first, then one multiple nack), so a
//! crash at any point leaves each message in the source, in the target, or (between the
//! confirm and the ack) in both: at-least-once, never lost.

use std::time::Duration;

use lapin::message::Delivery;
use lapin::options::{
    BasicGetOptions, BasicNackOptions, BasicPublishOptions, ConfirmSelectOptions, QueueDeclareOptions,
};
use lapin::publisher_confirm::Confirmation;
use lapin::types::{AMQPValue, FieldTable, ShortString};
use lapin::uri::AMQPUri;
use lapin::{BasicProperties, Connection, ConnectionProperties};
use serde::{Deserialize, Serialize};

use crate::config::BrokerConfig;

/// warren's own replay counter: 4.x no longer interprets an `x-death` header that a client
/// re-publishes (DOMAIN.md §4), so the number of replays is kept in a header of warren's own.
pub const REPLAY_HEADER: &str = "x-warren-replay-count";

/// At most this many messages in one synchronous move.
pub const MAX_MESSAGES: usize = 100_000;

/// Which messages, by their position at the head of the queue (1 = the oldest).
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "snake_case")]
pub enum Selection {
    Positions(Vec<usize>),
    All,
}

/// Where moved messages go.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, Default)]
#[serde(rename_all = "snake_case")]
pub enum Target {
    /// The queue the message died in (`x-first-death-queue`), through the default exchange.
    #[default]
    OriginalQueue,
    /// A queue the user names, through the default exchange.
    Queue(String),
    /// Nowhere: the selected messages are deleted (acked without a copy). Only on request.
    Discard,
}

/// Empties a queue (AMQP queue.purge); returns how many messages it held.
pub async fn purge(broker: &BrokerConfig, vhost: &str, queue: &str) -> Result<u32, MoveError> {
    let connection = connect(broker, vhost).await?;
    let outcome = async {
        let channel = connection.create_channel().await?;
        let purged = channel.queue_purge(queue, lapin::options::QueuePurgeOptions::default()).await?;
        channel.close(200, "done").await?;
        Ok::<u32, MoveError>(purged)
    }
    .await;
    if let Err(e) = connection.close(200, "done").await {
        tracing::warn!(error = %e, "closing the purge's AMQP connection");
    }
    outcome
}

#[derive(Debug, Clone, Serialize)]
pub struct Moved {
    pub position: usize,
    pub message_id: Option<String>,
    pub to_queue: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct Failed {
    pub position: usize,
    pub message_id: Option<String>,
    pub reason: String,
}

/// What a move did. Every message read and not in `moved` went back to the source queue.
#[derive(Debug, Clone, Serialize, Default)]
pub struct MoveReport {
    pub moved: Vec<Moved>,
    pub failed: Vec<Failed>,
    /// Messages read and returned to the source (not selected, or failed).
    pub returned: usize,
}

#[derive(Debug, thiserror::Error)]
pub enum MoveError {
    #[error("cannot connect to the broker over AMQP: {0}")]
    Connect(String),
    #[error("AMQP error: {0}")]
    Amqp(#[from] lapin::Error),
    #[error("{0}")]
    Refused(String),
}

/// Connects to `vhost` with the broker's credentials.
pub async fn connect(broker: &BrokerConfig, vhost: &str) -> Result<Connection, MoveError> {
    let mut uri: AMQPUri = broker.amqp_url.parse().map_err(|e: String| {
        MoveError::Connect(format!("amqp_url is not valid: {}", e.replace(&broker.amqp_url, "<url>")))
    })?;
    uri.vhost = vhost.to_string();
    uri.authority.userinfo.username = broker.user.clone();
    uri.authority.userinfo.password = broker.password.expose().to_string();
    let properties = ConnectionProperties::default().with_connection_name("warren-dlq-mover".into());
    tokio::time::timeout(Duration::from_secs(10), Connection::connect_uri(uri, properties))
        .await
        .map_err(|_| MoveError::Connect(format!("{} timed out", broker.amqp_url)))?
        .map_err(|e| MoveError::Connect(format!("{}: {e}", broker.amqp_url)))
}

fn header_string(delivery: &Delivery, key: &str) -> Option<String> {
    let headers = delivery.properties.headers().as_ref()?;
    match headers.inner().get(key)? {
        AMQPValue::LongString(s) => Some(String::from_utf8_lossy(s.as_bytes()).into_owned()),
        AMQPValue::ShortString(s) => Some(s.as_str().to_string()),
        _ => None,
    }
}

fn header_count(delivery: &Delivery, key: &str) -> i64 {
    let Some(headers) = delivery.properties.headers().as_ref() else { return 0 };
    match headers.inner().get(key) {
        Some(AMQPValue::LongLongInt(n)) => *n,
        Some(AMQPValue::LongInt(n)) => i64::from(*n),
        Some(AMQPValue::ShortInt(n)) => i64::from(*n),
        Some(AMQPValue::LongUInt(n)) => i64::from(*n),
        _ => 0,
    }
}

/// The properties of the copy: the original's, with warren's replay counter raised.
fn replay_properties(delivery: &Delivery) -> BasicProperties {
    let mut headers = delivery.properties.headers().clone().unwrap_or_default();
    let count = header_count(delivery, REPLAY_HEADER) + 1;
    headers.insert(ShortString::from(REPLAY_HEADER), AMQPValue::LongLongInt(count));
    delivery.properties.clone().with_headers(headers)
}

/// Moves the selected messages of `queue` in `vhost` to `target`. A quorum source with a
/// delivery limit is only read when every message read is also moved (returning a message
/// counts toward the limit and can make the broker drop it, DOMAIN.md §5).
pub async fn move_messages(
    broker: &BrokerConfig,
    vhost: &str,
    queue: &str,
    selection: &Selection,
    target: &Target,
    delivery_limit: Option<i64>,
) -> Result<MoveReport, MoveError> {
    let last_position = match selection {
        Selection::Positions(p) if p.is_empty() || p.contains(&0) => {
            return Err(MoveError::Refused("positions start at 1 and at least one is needed".into()))
        }
        Selection::Positions(p) => *p.iter().max().expect("not empty"),
        Selection::All => MAX_MESSAGES,
    };
    if let (Some(limit), Selection::Positions(p)) = (delivery_limit, selection) {
        let contiguous = (1..=last_position).all(|n| p.contains(&n));
        if !contiguous {
            return Err(MoveError::Refused(format!(
                "this quorum queue has a delivery limit of {limit}: reading past a message without moving it \
                 would count toward that limit and could make the broker drop it; move the head messages in order \
                 or all of them"
            )));
        }
    }

    let connection = connect(broker, vhost).await?;
    let outcome = run_move(&connection, queue, selection, target, last_position).await;
    if let Err(e) = connection.close(200, "done").await {
        tracing::warn!(error = %e, "closing the mover's AMQP connection");
    }
    outcome
}

async fn run_move(
    connection: &Connection,
    queue: &str,
    selection: &Selection,
    target: &Target,
    last_position: usize,
) -> Result<MoveReport, MoveError> {
    let source = connection.create_channel().await?;
    let publisher = connection.create_channel().await?;
    publisher.confirm_select(ConfirmSelectOptions::default()).await?;
    // Passive declare: fails cleanly if the source queue does not exist, and says how many
    // messages there are to read at most.
    let declared = source
        .queue_declare(queue, QueueDeclareOptions { passive: true, ..Default::default() }, FieldTable::default())
        .await?;
    let available = declared.message_count() as usize;
    let to_read = last_position.min(available);
    let mut report = MoveReport::default();
    if to_read == 0 {
        return Ok(report);
    }
    // basic.get, one message at a time, rather than a consumer: a consumer's prefetch window
    // refills as messages are acked, so the broker would push messages past the last one asked
    // for, and returning those counts toward a quorum queue's delivery limit.
    // Deliveries read and not moved, oldest first: they go back at the end, in order.
    let mut kept_tags = Vec::new();
    let mut unacked_kept = 0usize;
    let mut position = 0usize;
    while position < to_read {
        let delivery = match source.basic_get(queue, BasicGetOptions { no_ack: false }).await? {
            Some(message) => message.delivery,
            None => break, // the queue has fewer messages than it had
        };
        position += 1;
        let selected = match selection {
            Selection::All => true,
            Selection::Positions(p) => p.contains(&position),
        };
        let message_id = delivery.properties.message_id().as_ref().map(|s| s.as_str().to_string());
        if !selected {
            unacked_kept += 1;
            kept_tags.push(delivery.delivery_tag);
            continue;
        }
        let to_queue = match target {
            Target::Queue(name) => Some(name.clone()),
            Target::OriginalQueue => header_string(&delivery, "x-first-death-queue"),
            Target::Discard => {
                source.basic_ack(delivery.delivery_tag, Default::default()).await?;
                report.moved.push(Moved { position, message_id, to_queue: String::new() });
                continue;
            }
        };
        let Some(to_queue) = to_queue else {
            unacked_kept += 1;
            kept_tags.push(delivery.delivery_tag);
            report.failed.push(Failed {
                position,
                message_id,
                reason: "no x-first-death-queue header: name a target queue".into(),
            });
            continue;
        };
        let options = BasicPublishOptions { mandatory: true, ..Default::default() };
        let confirm =
            publisher.basic_publish("", &to_queue, options, &delivery.data, replay_properties(&delivery)).await?;
        let failure = match confirm.await? {
            Confirmation::Ack(None) => None,
            Confirmation::Ack(Some(_returned)) => Some(format!("unroutable: no queue named {to_queue:?}")),
            Confirmation::Nack(_) => Some("the broker refused the copy (nack)".to_string()),
            Confirmation::NotRequested => Some("publisher confirms are not enabled".to_string()),
        };
        match failure {
            None => {
                // Only now is the copy safe: ack the original.
                source.basic_ack(delivery.delivery_tag, Default::default()).await?;
                report.moved.push(Moved { position, message_id, to_queue });
            }
            Some(reason) => {
                unacked_kept += 1;
                kept_tags.push(delivery.delivery_tag);
                report.failed.push(Failed { position, message_id, reason });
                // A fixed target that cannot take one message will not take the next.
                if matches!(target, Target::Queue(_)) {
                    break;
                }
            }
        }
    }

    // Hand back everything still unacked, in order.
    give_back_in_order(&source, queue, &kept_tags).await?;
    report.returned = unacked_kept;
    source.close(200, "done").await?;
    publisher.close(200, "done").await?;
    Ok(report)
}

/// Returns unacked deliveries to their queue, oldest first, one at a time, each only once the
/// previous one is back in the queue. Measured on 3.10: a single multiple nack, or nacks sent
/// back to back, put part of a quorum queue's messages back in reverse or rotated order (the
/// queue applies returns asynchronously); waiting until the queue counts each returned message
/// keeps the order.
async fn give_back_in_order(channel: &lapin::Channel, queue: &str, tags: &[u64]) -> Result<(), MoveError> {
    let ready = |channel: &lapin::Channel| {
        let channel = channel.clone();
        let queue = queue.to_string();
        async move {
            let declared = channel
                .queue_declare(
                    &queue,
                    QueueDeclareOptions { passive: true, ..Default::default() },
                    FieldTable::default(),
                )
                .await?;
            Ok::<u32, MoveError>(declared.message_count())
        }
    };
    let mut expected = ready(channel).await?;
    for &tag in tags {
        channel.basic_nack(tag, BasicNackOptions { multiple: false, requeue: true }).await?;
        expected += 1;
        // Bounded: if the count never gets there (others consume meanwhile), go on after 2 s;
        // the message is back either way, only its place could differ.
        let deadline = std::time::Instant::now() + Duration::from_secs(2);
        while ready(channel).await? < expected && std::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }
    Ok(())
}

/// Reads up to `count` messages from the head of `queue` and gives them all back, in order:
/// `basic.get` without ack for each, then a nack for each, oldest first. Unlike the management API's "get
/// messages" (measured on 3.10: it scrambled the order of a quorum queue after one read), this
/// keeps the order for classic and quorum queues alike, and keeps header types. On a quorum
/// queue each read still counts as one delivery; the caller guards the delivery limit.
pub async fn peek(
    broker: &BrokerConfig,
    vhost: &str,
    queue: &str,
    count: usize,
    payload_limit: usize,
) -> Result<Vec<crate::management::PeekedMessage>, MoveError> {
    let connection = connect(broker, vhost).await?;
    let outcome = async {
        let channel = connection.create_channel().await?;
        let mut messages = Vec::new();
        let mut tags = Vec::new();
        while messages.len() < count {
            let Some(message) = channel.basic_get(queue, BasicGetOptions { no_ack: false }).await? else { break };
            tags.push(message.delivery.delivery_tag);
            messages.push(peeked(&message.delivery, payload_limit));
        }
        give_back_in_order(&channel, queue, &tags).await?;
        channel.close(200, "done").await?;
        Ok::<_, MoveError>(messages)
    }
    .await;
    if let Err(e) = connection.close(200, "done").await {
        tracing::warn!(error = %e, "closing the browser's AMQP connection");
    }
    outcome
}

fn peeked(delivery: &Delivery, payload_limit: usize) -> crate::management::PeekedMessage {
    use base64::Engine;
    let kept = &delivery.data[..delivery.data.len().min(payload_limit)];
    let (payload_encoding, payload) = match std::str::from_utf8(kept) {
        Ok(text) => ("string", text.to_string()),
        // A cut can split a UTF-8 sequence: keep what is valid if the rest is only that cut.
        Err(e) if e.error_len().is_none() && e.valid_up_to() + 4 > kept.len() => {
            ("string", String::from_utf8_lossy(&kept[..e.valid_up_to()]).into_owned())
        }
        Err(_) => ("base64", base64::engine::general_purpose::STANDARD.encode(kept)),
    };
    crate::management::PeekedMessage {
        exchange: delivery.exchange.as_str().to_string(),
        routing_key: delivery.routing_key.as_str().to_string(),
        redelivered: delivery.redelivered,
        payload_bytes: delivery.data.len() as u64,
        payload_encoding: payload_encoding.to_string(),
        payload,
        properties: properties_json(&delivery.properties),
    }
}

/// Message properties as JSON, named as the management API names them.
fn properties_json(p: &BasicProperties) -> serde_json::Map<String, serde_json::Value> {
    use serde_json::Value;
    let mut map = serde_json::Map::new();
    let mut put = |key: &str, value: Option<Value>| {
        if let Some(v) = value {
            map.insert(key.to_string(), v);
        }
    };
    let s = |v: &Option<ShortString>| v.as_ref().map(|s| Value::String(s.as_str().to_string()));
    put("content_type", s(p.content_type()));
    put("content_encoding", s(p.content_encoding()));
    put("delivery_mode", p.delivery_mode().map(Value::from));
    put("priority", p.priority().map(Value::from));
    put("correlation_id", s(p.correlation_id()));
    put("reply_to", s(p.reply_to()));
    put("expiration", s(p.expiration()));
    put("message_id", s(p.message_id()));
    put("timestamp", p.timestamp().map(Value::from));
    put("type", s(p.kind()));
    put("user_id", s(p.user_id()));
    put("app_id", s(p.app_id()));
    put("headers", p.headers().as_ref().map(|h| table_json(h, 0)));
    map
}

/// Nested tables deeper than this are shown as a marker, not recursed into.
const MAX_DEPTH: usize = 32;

fn table_json(table: &FieldTable, depth: usize) -> serde_json::Value {
    if depth > MAX_DEPTH {
        return serde_json::Value::String("(nested too deep to show)".into());
    }
    serde_json::Value::Object(
        table.inner().iter().map(|(k, v)| (k.as_str().to_string(), value_json(v, depth + 1))).collect(),
    )
}

fn value_json(v: &AMQPValue, depth: usize) -> serde_json::Value {
    use serde_json::Value;
    match v {
        AMQPValue::Boolean(b) => Value::Bool(*b),
        AMQPValue::ShortShortInt(n) => Value::from(*n),
        AMQPValue::ShortShortUInt(n) => Value::from(*n),
        AMQPValue::ShortInt(n) => Value::from(*n),
        AMQPValue::ShortUInt(n) => Value::from(*n),
        AMQPValue::LongInt(n) => Value::from(*n),
        AMQPValue::LongUInt(n) => Value::from(*n),
        AMQPValue::LongLongInt(n) => Value::from(*n),
        AMQPValue::Float(f) => Value::from(*f),
        AMQPValue::Double(f) => Value::from(*f),
        AMQPValue::DecimalValue(d) => Value::String(format!("{d:?}")),
        AMQPValue::ShortString(s) => Value::String(s.as_str().to_string()),
        AMQPValue::LongString(s) => Value::String(String::from_utf8_lossy(s.as_bytes()).into_owned()),
        AMQPValue::FieldArray(a) => {
            if depth > MAX_DEPTH {
                return Value::String("(nested too deep to show)".into());
            }
            Value::Array(a.as_slice().iter().map(|v| value_json(v, depth + 1)).collect())
        }
        AMQPValue::Timestamp(t) => Value::from(*t),
        AMQPValue::FieldTable(t) => table_json(t, depth),
        AMQPValue::ByteArray(b) => Value::String(format!("{:?}", b.as_slice())),
        AMQPValue::Void => Value::Null,
    }
}
