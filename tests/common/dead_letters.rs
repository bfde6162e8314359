//! Real dead letters for the DLQ tests: messages published to `work` and rejected by a real
//! consumer, so the broker writes the `x-death` headers itself.

use futures_util::StreamExt;
use lapin::options::{
    BasicConsumeOptions, BasicGetOptions, BasicPublishOptions, BasicQosOptions, BasicRejectOptions,
    ExchangeDeclareOptions, QueueBindOptions, QueueDeclareOptions,
};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{BasicProperties, Channel, ExchangeKind};
use serde_json::Value;

use super::TestVhost;

/// (message id, payload, headers)
pub type Message = (String, Vec<u8>, FieldTable);

/// `m1`..`mN` with small JSON payloads.
pub fn numbered(n: usize) -> Vec<Message> {
    (1..=n).map(|i| (format!("m{i}"), format!("{{\"n\": {i}}}").into_bytes(), FieldTable::default())).collect()
}

/// `work` dead-letters into `dlq` (a quorum queue if asked) through the fanout exchange `dlx`;
/// `messages` are published to `work` with confirms and rejected (requeue=false) one by one, so
/// they land in the DLQ in order.
pub async fn dead_letter(vhost: &TestVhost, channel: &Channel, dlq: &str, dlq_quorum: bool, messages: Vec<Message>) {
    dead_letter_through(vhost, channel, dlq, dlq_quorum, ("", "work"), messages).await
}

/// As `dead_letter`, with the messages published to `exchange` with `routing_key` (which the
/// caller binds to `work`), so that `x-death` records that route.
pub async fn dead_letter_through(
    vhost: &TestVhost,
    channel: &Channel,
    dlq: &str,
    dlq_quorum: bool,
    (exchange, routing_key): (&str, &str),
    messages: Vec<Message>,
) {
    let durable = ExchangeDeclareOptions { durable: true, ..Default::default() };
    channel.exchange_declare("dlx".into(), ExchangeKind::Fanout, durable, FieldTable::default()).await.unwrap();
    let mut dlq_args = FieldTable::default();
    if dlq_quorum {
        dlq_args.insert("x-queue-type".into(), AMQPValue::LongString("quorum".into()));
    }
    channel
        .queue_declare(dlq.into(), QueueDeclareOptions { durable: true, ..Default::default() }, dlq_args)
        .await
        .unwrap();
    channel
        .queue_bind(dlq.into(), "dlx".into(), "".into(), QueueBindOptions::default(), FieldTable::default())
        .await
        .unwrap();
    let mut args = FieldTable::default();
    args.insert("x-dead-letter-exchange".into(), AMQPValue::LongString("dlx".into()));
    channel
        .queue_declare("work".into(), QueueDeclareOptions { durable: true, ..Default::default() }, args)
        .await
        .unwrap();
    let n = messages.len();
    for (id, payload, headers) in messages {
        let properties = BasicProperties::default().with_message_id(id.into()).with_headers(headers);
        let confirm = channel
            .basic_publish(exchange.into(), routing_key.into(), BasicPublishOptions::default(), &payload, properties)
            .await
            .unwrap();
        assert!(confirm.await.unwrap().is_ack());
    }
    let consumer_channel = vhost.connect().await.create_channel().await.unwrap();
    consumer_channel.basic_qos(1, BasicQosOptions::default()).await.unwrap();
    let mut consumer = consumer_channel
        .basic_consume("work".into(), "rejecter".into(), BasicConsumeOptions::default(), FieldTable::default())
        .await
        .unwrap();
    for _ in 0..n {
        let delivery = consumer.next().await.unwrap().unwrap();
        delivery.reject(BasicRejectOptions { requeue: false }).await.unwrap();
    }
    consumer_channel.close(200, "done".into()).await.unwrap();
}

/// Takes every message of `queue` (acking them) and returns their message ids, in order.
pub async fn drain_ids(channel: &Channel, queue: &str) -> Vec<String> {
    let mut ids = Vec::new();
    while let Some(message) = channel.basic_get(queue.into(), BasicGetOptions { no_ack: true }).await.unwrap() {
        ids.push(message.delivery.properties.message_id().as_ref().map(|s| s.to_string()).unwrap_or_default());
    }
    ids
}

/// Ready messages in `queue`.
pub async fn depth(channel: &Channel, queue: &str) -> u32 {
    channel
        .queue_declare(queue.into(), QueueDeclareOptions { passive: true, ..Default::default() }, FieldTable::default())
        .await
        .unwrap()
        .message_count()
}

/// The message ids of a list of messages (a snapshot's) or of report entries (`report.moved`), in order.
pub fn message_ids(list: &Value) -> Vec<String> {
    list.as_array().unwrap().iter().map(|m| m["message_id"].as_str().unwrap_or_default().to_string()).collect()
}
