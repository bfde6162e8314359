//! The broker's clients: connections, channels and consumers, as the management API lists them
//! (`/api/connections`, `/api/channels`, `/api/consumers`), and the joins that answer "who holds
//! these unacked messages".
//!
//! Shapes measured on 3.10.8, 4.0.5 and 4.0.5 with the metrics collector off
//! (`tests/fixtures`): with the collector off the connections listing has only `name`, `vhost`,
//! `user` and `node` (no state, channels, client properties, peer or rates), and the channels and
//! consumers listings answer HTTP 400 "Stats in management UI are disabled on this node". 4.x
//! omits `global_prefetch_count` (global QoS is deprecated there). Everything the broker did not
//! say is `None` here and "—" on the pages, never 0.
//!
//! Every field is read leniently: a client chooses its own client properties (a
//! `connection_name` that is a number, a table, megabytes of text), and one odd connection must
//! not fail the listing of all of them.

use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

use super::management::{BrokerError, ManagementClient};

/// Fields asked of `/api/connections`. `client_properties` comes whole whatever `columns=` says
/// of its keys (measured on 3.10.8 and 4.0.5).
pub const CONNECTION_COLUMNS: &str = "name,user,vhost,peer_host,peer_port,client_properties,state,channels,\
recv_oct_details.rate,send_oct_details.rate,node,connected_at";

pub const CHANNEL_COLUMNS: &str = "name,number,vhost,user,node,connection_details.name,connection_details.peer_host,\
prefetch_count,global_prefetch_count,messages_unacknowledged,consumer_count,confirm,state,message_stats.publish";

pub const CONSUMER_COLUMNS: &str = "queue.name,queue.vhost,consumer_tag,channel_details.name,\
channel_details.connection_name,channel_details.peer_host,channel_details.peer_port,prefetch_count,\
ack_required,activity_status,active,exclusive";

/// Longest client-chosen text kept (connection name, product): enough for any real name, and a
/// client cannot make warren hold megabytes per connection.
const MAX_CLIENT_TEXT: usize = 200;

/// One AMQP connection.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, utoipa::ToSchema)]
pub struct Connection {
    /// The broker's name for it: `peer:port -> local:port`.
    pub name: String,
    /// The name the client gave itself (`connection_name` in its client properties).
    #[serde(default)]
    pub connection_name: Option<String>,
    #[serde(default, deserialize_with = "text")]
    pub user: Option<String>,
    #[serde(default, deserialize_with = "text")]
    pub vhost: Option<String>,
    #[serde(default, deserialize_with = "text")]
    pub peer_host: Option<String>,
    #[serde(default, deserialize_with = "number")]
    pub peer_port: Option<u64>,
    /// `product` of the client properties ("rabbitmq-c", "lapin", "RabbitMQ" for Java).
    #[serde(default)]
    pub product: Option<String>,
    /// running, flow, blocking, blocked (or starting, tuning, opening, closing, closed).
    #[serde(default, deserialize_with = "text")]
    pub state: Option<String>,
    #[serde(default, deserialize_with = "number")]
    pub channels: Option<u64>,
    /// Bytes per second received from the client, as the broker's rate over its stats interval.
    #[serde(default)]
    pub recv_bytes_per_sec: Option<f64>,
    #[serde(default)]
    pub send_bytes_per_sec: Option<f64>,
    #[serde(default, deserialize_with = "text")]
    pub node: Option<String>,
    /// Unix seconds (the broker says milliseconds).
    #[serde(default)]
    #[serde(flatten, skip_deserializing, serialize_with = "crate::times::connected_at")]
    #[schema(schema_with = crate::times::schema::connected_at)]
    pub connected_at: Option<i64>,
}

impl Connection {
    /// Flow-controlled or blocked by a resource alarm: a publisher that cannot publish
    /// (`blocking`: blocked as soon as it publishes; `blocked`: it tried).
    pub fn is_blocked(&self) -> Option<bool> {
        self.state.as_deref().map(|s| s == "blocked" || s == "blocking")
    }

    /// What the operator recognises: the client's own name when it gave one, else the broker's.
    pub fn display_name(&self) -> &str {
        self.connection_name.as_deref().unwrap_or(&self.name)
    }

    /// `host:port` of the client, when the broker said.
    pub fn client_host(&self) -> Option<String> {
        let host = self.peer_host.as_deref()?;
        Some(match self.peer_port {
            Some(port) => format!("{host}:{port}"),
            None => host.to_string(),
        })
    }
}

/// One channel.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, utoipa::ToSchema)]
pub struct Channel {
    pub name: String,
    #[serde(default, deserialize_with = "number")]
    pub number: Option<u64>,
    #[serde(default, deserialize_with = "text")]
    pub vhost: Option<String>,
    #[serde(default, deserialize_with = "text")]
    pub user: Option<String>,
    #[serde(default, deserialize_with = "text")]
    pub node: Option<String>,
    /// The broker's name of its connection.
    #[serde(default)]
    pub connection: Option<String>,
    #[serde(default)]
    pub peer_host: Option<String>,
    /// Per-consumer prefetch (`basic.qos` with global false); 0 is "no limit".
    #[serde(default, deserialize_with = "number")]
    pub prefetch_count: Option<u64>,
    /// Shared prefetch over the channel's consumers; absent on 4.x (global QoS is deprecated).
    #[serde(default, deserialize_with = "number")]
    pub global_prefetch_count: Option<u64>,
    /// Delivered on this channel and not yet acknowledged, over all of its consumers.
    #[serde(default, deserialize_with = "number")]
    pub messages_unacknowledged: Option<u64>,
    #[serde(default, deserialize_with = "number")]
    pub consumer_count: Option<u64>,
    /// Publisher confirms on.
    #[serde(default, deserialize_with = "boolean")]
    pub confirm: Option<bool>,
    #[serde(default, deserialize_with = "text")]
    pub state: Option<String>,
    /// Messages published on this channel since it opened (`message_stats.publish`): `Some(0)`
    /// when the listing has stats but none for publishing (the broker omits a counter that never
    /// moved), `None` when the listing has no stats at all.
    #[serde(default)]
    pub published: Option<u64>,
}

/// One consumer of a queue.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, utoipa::ToSchema)]
pub struct Consumer {
    pub queue: String,
    pub vhost: String,
    #[serde(default, deserialize_with = "text")]
    pub consumer_tag: Option<String>,
    /// The broker's name of its channel (`connection (number)`).
    #[serde(default)]
    pub channel: Option<String>,
    /// The broker's name of its connection.
    #[serde(default)]
    pub connection: Option<String>,
    #[serde(default)]
    pub peer_host: Option<String>,
    #[serde(default)]
    pub peer_port: Option<u64>,
    #[serde(default, deserialize_with = "number")]
    pub prefetch_count: Option<u64>,
    /// Manual acknowledgements (`true`) or auto-ack (`false`).
    #[serde(default, deserialize_with = "boolean")]
    pub ack_required: Option<bool>,
    /// `up`, `single_active` or `waiting` (single active consumer).
    #[serde(default, deserialize_with = "text")]
    pub activity_status: Option<String>,
    #[serde(default, deserialize_with = "boolean")]
    pub exclusive: Option<bool>,
}

/// A listing as the broker answers it, before it is made into the types above.
#[derive(Deserialize)]
struct RawConnection {
    #[serde(default, deserialize_with = "text")]
    name: Option<String>,
    #[serde(default)]
    client_properties: Value,
    #[serde(default)]
    recv_oct_details: Value,
    #[serde(default)]
    send_oct_details: Value,
    #[serde(default)]
    connected_at: Value,
    #[serde(flatten)]
    rest: serde_json::Map<String, Value>,
}

#[derive(Deserialize)]
struct RawChannel {
    #[serde(default)]
    connection_details: Value,
    #[serde(default)]
    message_stats: Value,
    #[serde(flatten)]
    rest: serde_json::Map<String, Value>,
}

#[derive(Deserialize)]
struct RawConsumer {
    #[serde(default)]
    queue: Value,
    #[serde(default)]
    channel_details: Value,
    #[serde(flatten)]
    rest: serde_json::Map<String, Value>,
}

fn short_text(v: Option<&Value>) -> Option<String> {
    let s = v?.as_str()?;
    Some(s.chars().filter(|c| !c.is_control()).take(MAX_CLIENT_TEXT).collect())
}

fn rate(v: &Value) -> Option<f64> {
    v.get("rate")?.as_f64().filter(|r| r.is_finite() && *r >= 0.0)
}

/// Items of a listing that is an array of objects; anything else (an error object, a number)
/// is malformed.
fn items(body: Value, path: &str) -> Result<Vec<Value>, BrokerError> {
    match body {
        Value::Array(items) => Ok(items),
        other => Err(BrokerError::Malformed {
            path: path.to_string(),
            detail: format!("expected a list, got {}", kind(&other)),
        }),
    }
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

/// Connections from a `/api/connections` answer; items without a name are skipped.
pub fn connections_from(body: Value) -> Result<Vec<Connection>, BrokerError> {
    let mut out = Vec::new();
    for item in items(body, "/api/connections")? {
        let Ok(raw) = serde_json::from_value::<RawConnection>(item) else { continue };
        let Some(name) = raw.name else { continue };
        let rest = Value::Object(raw.rest);
        let Ok(mut c) = serde_json::from_value::<Connection>(
            serde_json::json!({"name": name, "user": rest.get("user"), "vhost": rest.get("vhost"),
                "peer_host": rest.get("peer_host"), "peer_port": rest.get("peer_port"),
                "state": rest.get("state"), "channels": rest.get("channels"), "node": rest.get("node")}),
        ) else {
            continue;
        };
        c.connection_name = short_text(raw.client_properties.get("connection_name"));
        c.product = short_text(raw.client_properties.get("product"));
        c.recv_bytes_per_sec = rate(&raw.recv_oct_details);
        c.send_bytes_per_sec = rate(&raw.send_oct_details);
        c.connected_at = raw.connected_at.as_i64().map(|ms| ms / 1000);
        out.push(c);
    }
    Ok(out)
}

pub fn channels_from(body: Value) -> Result<Vec<Channel>, BrokerError> {
    let mut out = Vec::new();
    for item in items(body, "/api/channels")? {
        let Ok(raw) = serde_json::from_value::<RawChannel>(item) else { continue };
        let Ok(mut c) = serde_json::from_value::<Channel>(Value::Object(raw.rest)) else { continue };
        c.connection = short_text(raw.connection_details.get("name"));
        c.peer_host = short_text(raw.connection_details.get("peer_host"));
        c.published = match &raw.message_stats {
            Value::Object(stats) => Some(stats.get("publish").and_then(Value::as_u64).unwrap_or(0)),
            // 3.x writes an empty proplist as `[]`.
            Value::Array(items) if items.is_empty() => Some(0),
            _ => None,
        };
        out.push(c);
    }
    Ok(out)
}

pub fn consumers_from(body: Value) -> Result<Vec<Consumer>, BrokerError> {
    let mut out = Vec::new();
    for item in items(body, "/api/consumers")? {
        let Ok(raw) = serde_json::from_value::<RawConsumer>(item) else { continue };
        let (Some(queue), Some(vhost)) = (short_name(raw.queue.get("name")), short_name(raw.queue.get("vhost"))) else {
            continue;
        };
        let mut rest = raw.rest;
        rest.insert("queue".into(), Value::String(queue));
        rest.insert("vhost".into(), Value::String(vhost));
        let Ok(mut c) = serde_json::from_value::<Consumer>(Value::Object(rest)) else { continue };
        let d = &raw.channel_details;
        c.channel = short_text(d.get("name"));
        c.connection = short_text(d.get("connection_name"));
        c.peer_host = short_text(d.get("peer_host"));
        c.peer_port = d.get("peer_port").and_then(Value::as_u64);
        out.push(c);
    }
    Ok(out)
}

/// A queue or vhost name, whole (they are matched against the queues warren lists).
fn short_name(v: Option<&Value>) -> Option<String> {
    v?.as_str().map(str::to_string)
}

fn text<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    Ok(short_text(Some(&Value::deserialize(d)?)))
}

fn number<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    Ok(Value::deserialize(d)?.as_u64())
}

fn boolean<'de, D: Deserializer<'de>>(d: D) -> Result<Option<bool>, D::Error> {
    Ok(Value::deserialize(d)?.as_bool())
}

impl ManagementClient {
    /// Every connection the user may see, one call.
    pub async fn connections(&self) -> Result<(Vec<Connection>, usize), BrokerError> {
        let (body, size) = self.get::<Value>(&format!("api/connections?columns={CONNECTION_COLUMNS}")).await?;
        Ok((connections_from(body)?, size))
    }

    /// Every connection, listed user by user (`/api/users`, then
    /// `/api/connections/username/{user}` each): RabbitMQ 4.3 with the metrics collector off
    /// answers `/api/connections` with an empty list while the per-user listing still names
    /// each connection (measured on 4.3.6). `None` when the broker has more than `max_users`
    /// users: a call per user would cost more than the listing is worth.
    pub async fn connections_by_user(&self, max_users: usize) -> Result<(Option<Vec<Connection>>, usize), BrokerError> {
        let (users, mut size) = self.get::<Value>("api/users?columns=name").await?;
        let names: Vec<String> = items(users, "/api/users")?
            .into_iter()
            .filter_map(|u| u.get("name").and_then(Value::as_str).map(str::to_string))
            .collect();
        if names.len() > max_users {
            return Ok((None, size));
        }
        let mut out = Vec::new();
        for name in names {
            let path = format!("api/connections/username/{}", super::management::encode_segment(&name));
            let (body, read) = self.get::<Value>(&path).await?;
            size += read;
            out.extend(connections_from(body)?);
        }
        Ok((Some(out), size))
    }

    /// Every channel, one call. HTTP 400 with the metrics collector off.
    pub async fn channels(&self) -> Result<(Vec<Channel>, usize), BrokerError> {
        let (body, size) = self.get::<Value>(&format!("api/channels?columns={CHANNEL_COLUMNS}")).await?;
        Ok((channels_from(body)?, size))
    }

    /// Every consumer of every queue, one call (one per vhost would cost the broker a call
    /// per vhost for the same tables). HTTP 400 with the metrics collector off.
    pub async fn consumers(&self) -> Result<(Vec<Consumer>, usize), BrokerError> {
        let (body, size) = self.get::<Value>(&format!("api/consumers?columns={CONSUMER_COLUMNS}")).await?;
        Ok((consumers_from(body)?, size))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(dir: &str, name: &str) -> Value {
        let path = format!("{}/tests/fixtures/{dir}/{name}", env!("CARGO_MANIFEST_DIR"));
        serde_json::from_slice(&std::fs::read(&path).unwrap_or_else(|e| panic!("fixture {path}: {e}"))).unwrap()
    }

    #[test]
    fn reads_recorded_connections_of_3_10_and_4_0() {
        for dir in ["rabbitmq-3.10.8", "rabbitmq-4.x"] {
            let all = connections_from(fixture(dir, "connections-columns.json")).unwrap();
            assert_eq!(all.len(), 2, "{dir}");
            let c = &all[0];
            assert_eq!((c.user.as_deref(), c.vhost.as_deref()), (Some("guest"), Some("wshape")));
            assert_eq!(
                (c.product.as_deref(), c.state.as_deref(), c.channels),
                (Some("rabbitmq-c"), Some("running"), Some(1))
            );
            assert!(c.peer_port.is_some() && c.client_host().unwrap().starts_with("127.0.0.1:"), "{dir}");
            assert_eq!(c.recv_bytes_per_sec, Some(if dir == "rabbitmq-4.x" { 0.0 } else { 11.8 }));
            assert!(c.connected_at.is_some_and(|t| t > 1_700_000_000 && t < 2_000_000_000));
            assert_eq!(c.is_blocked(), Some(false));
            assert_eq!(c.connection_name, None);
        }
    }

    #[test]
    fn without_the_metrics_collector_a_connection_has_no_state_and_no_rates() {
        let all = connections_from(fixture("rabbitmq-4.x", "connections-metrics-collector-off.json")).unwrap();
        assert_eq!(all.len(), 2);
        let c = &all[0];
        assert_eq!((c.user.as_deref(), c.node.as_deref()), (Some("guest"), Some("rabbit4ns@localhost")));
        assert_eq!((c.state.as_deref(), c.channels, c.recv_bytes_per_sec, c.client_host()), (None, None, None, None));
        assert_eq!(c.is_blocked(), None, "unknown, not 'not blocked'");
    }

    #[test]
    fn reads_recorded_channels() {
        let old = channels_from(fixture("rabbitmq-3.10.8", "channels-columns.json")).unwrap();
        let held = old.iter().find(|c| c.messages_unacknowledged == Some(3)).unwrap();
        assert_eq!((held.prefetch_count, held.global_prefetch_count, held.consumer_count), (Some(5), Some(0), Some(1)));
        assert_eq!((held.confirm, held.number), (Some(false), Some(1)));
        assert!(held.connection.as_deref().unwrap().ends_with("-> 127.0.0.1:5672"));
        let new = channels_from(fixture("rabbitmq-4.x", "channels-columns.json")).unwrap();
        assert!(new.iter().all(|c| c.global_prefetch_count.is_none()), "4.x omits global prefetch");
        assert!(new.iter().all(|c| c.prefetch_count == Some(5)));
    }

    #[test]
    fn reads_recorded_consumers() {
        for dir in ["rabbitmq-3.10.8", "rabbitmq-4.x"] {
            let all = consumers_from(fixture(dir, "consumers.json")).unwrap();
            let c = &all[0];
            assert_eq!((c.queue.as_str(), c.vhost.as_str()), ("shapeq", "wshape"));
            assert_eq!((c.prefetch_count, c.ack_required, c.exclusive), (Some(5), Some(true), Some(false)));
            assert_eq!(c.activity_status.as_deref(), Some("up"));
            assert!(c.channel.as_deref().unwrap().ends_with(" (1)"));
            assert_eq!(c.peer_host.as_deref(), Some("127.0.0.1"));
            assert!(c.channel.as_deref().unwrap().starts_with(c.connection.as_deref().unwrap()));
        }
    }

    #[test]
    fn hostile_client_properties_do_not_fail_the_listing() {
        let body = serde_json::json!([
            {"name": "a", "client_properties": {"connection_name": {"x": 1}, "product": 7}, "peer_port": "x",
             "channels": -1, "recv_oct_details": {"rate": "fast"}, "connected_at": "yesterday", "state": ["blocked"]},
            {"name": "b", "client_properties": {"connection_name": "é\u{0007}".repeat(500)}, "state": "blocked"},
            {"client_properties": {}},
            42,
        ]);
        let all = connections_from(body).unwrap();
        assert_eq!(all.len(), 2);
        assert_eq!(
            (all[0].connection_name.as_deref(), all[0].product.as_deref(), all[0].peer_port),
            (None, None, None)
        );
        assert_eq!(
            (all[0].channels, all[0].recv_bytes_per_sec, all[0].connected_at, all[0].is_blocked()),
            (None, None, None, None)
        );
        assert_eq!(all[1].connection_name.as_deref().map(|n| n.chars().count()), Some(MAX_CLIENT_TEXT));
        assert_eq!(all[1].is_blocked(), Some(true));
        assert!(connections_from(serde_json::json!({"error": "bad_request"})).is_err());
        assert!(channels_from(serde_json::json!([{"name": "c", "connection_details": 3}, 5])).unwrap().len() == 1);
        assert!(consumers_from(serde_json::json!([{"queue": {"name": "q"}}, {"queue": 1}])).unwrap().is_empty());
    }
}
