//! What the benchmarks against the real broker share: its address, a vhost of their own, a
//! queue's depth.

use lapin::options::QueueDeclareOptions;
use lapin::types::FieldTable;
use warren::config::{BrokerConfig, Config};
use warren::dlq;

pub const MANAGEMENT: &str = "http://127.0.0.1:15672";

pub fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// A management API call that must succeed (a missing vhost is fine to delete).
pub async fn management(method: reqwest::Method, path: &str) {
    let response = reqwest::Client::new()
        .request(method, format!("{MANAGEMENT}/api/{path}"))
        .basic_auth("guest", Some("guest"))
        .send()
        .await
        .expect("the management API answers (is RabbitMQ running with rabbitmq_management?)");
    assert!(response.status().is_success() || response.status() == 404, "{path}: {}", response.status());
}

/// The broker at 127.0.0.1 as guest, as warren's configuration describes it.
pub fn broker() -> BrokerConfig {
    let toml = format!("[[brokers]]\nname = \"local\"\nmanagement_url = \"{MANAGEMENT}\"\n");
    Config::from_toml(&toml).expect("bench config").brokers.remove(0)
}

/// Messages ready in `queue` of `vhost`.
pub async fn depth(broker: &BrokerConfig, vhost: &str, queue: &str) -> u32 {
    let connection = dlq::connect(broker, vhost).await.expect("AMQP");
    let channel = connection.create_channel().await.unwrap();
    let q = channel
        .queue_declare(queue.into(), QueueDeclareOptions { passive: true, ..Default::default() }, FieldTable::default())
        .await
        .unwrap();
    connection.close(200, "done".into()).await.ok();
    q.message_count()
}
