//! What warren knows of a broker's clients: the last listing of its connections, channels and
//! consumers (`poller` reads them on a cadence of their own, `broker::clients` says how), with
//! when it was made, and the joins the pages need: a queue's consumers with the connection and
//! the channel that hold its unacked messages.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::broker::clients::{Channel, Connection, Consumer};

/// One listing's items, or why there are none: the broker refused (no stats with the metrics
/// collector off) or the call failed. `None` is unknown, never an empty list.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Listed<T> {
    pub items: Option<Vec<T>>,
    /// Why `items` is unknown.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unknown_why: Option<String>,
}

impl<T> Listed<T> {
    pub fn known(items: Vec<T>) -> Self {
        Listed { items: Some(items), unknown_why: None }
    }

    pub fn unknown(why: String) -> Self {
        Listed { items: None, unknown_why: Some(why) }
    }

    pub fn count(&self) -> Option<u64> {
        self.items.as_ref().map(|i| i.len() as u64)
    }
}

/// The last client listing of one broker, over the vhosts warren watches.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ClientsLive {
    /// When the listing started.
    pub listed_at: DateTime<Utc>,
    /// How often it is made now (set by the broker CPU budget, `poller::load::clients_interval`).
    pub every_secs: f64,
    /// The broker time the three calls took (the cost proxy, as for every call).
    pub cost_secs: f64,
    pub connections: Listed<Connection>,
    pub channels: Listed<Channel>,
    pub consumers: Listed<Consumer>,
}

/// A queue's consumer with what the other listings say of its channel and connection.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct QueueConsumer {
    #[serde(flatten)]
    pub consumer: Consumer,
    /// The client's own name of the connection (`connection_name`), if it gave one.
    pub connection_name: Option<String>,
    /// `host:port` of the client.
    pub client_host: Option<String>,
    pub product: Option<String>,
    /// Unacked messages on this consumer's channel: over every consumer of that channel, so
    /// two consumers sharing a channel both show the channel's total.
    pub channel_unacked: Option<u64>,
    /// Consumers on the same channel (more than one: `channel_unacked` is shared).
    pub channel_consumers: Option<u64>,
}

impl QueueConsumer {
    /// What to call its connection: the client's name, else the broker's.
    pub fn connection_label(&self) -> String {
        match (&self.connection_name, &self.consumer.connection) {
            (Some(own), Some(broker)) => format!("{own} ({broker})"),
            (Some(own), None) => own.clone(),
            (None, Some(broker)) => broker.clone(),
            (None, None) => "unknown connection".to_string(),
        }
    }
}

impl ClientsLive {
    /// Connections blocked or blocking (by a resource alarm or flow control); unknown when
    /// the listing is, or when any connection's state is (metrics collector off).
    pub fn blocked_connections(&self) -> Option<u64> {
        let connections = self.connections.items.as_ref()?;
        connections.iter().try_fold(0u64, |n, c| c.is_blocked().map(|b| n + u64::from(b)))
    }

    /// A queue's consumers, with their connection and channel; `None` when the consumers
    /// listing is unknown.
    pub fn queue_consumers(&self, vhost: &str, queue: &str) -> Option<Vec<QueueConsumer>> {
        let consumers = self.consumers.items.as_ref()?;
        let connections = self.connections.items.as_deref().unwrap_or_default();
        let channels = self.channels.items.as_ref();
        let mut out: Vec<QueueConsumer> = consumers
            .iter()
            .filter(|c| c.vhost == vhost && c.queue == queue)
            .map(|c| {
                let connection = connections.iter().find(|x| Some(&x.name) == c.connection.as_ref());
                let channel = channels.and_then(|all| all.iter().find(|x| Some(&x.name) == c.channel.as_ref()));
                QueueConsumer {
                    consumer: c.clone(),
                    connection_name: connection.and_then(|x| x.connection_name.clone()),
                    client_host: match (&c.peer_host, c.peer_port) {
                        (Some(host), Some(port)) => Some(format!("{host}:{port}")),
                        (Some(host), None) => Some(host.clone()),
                        _ => connection.and_then(Connection::client_host),
                    },
                    product: connection.and_then(|x| x.product.clone()),
                    channel_unacked: channel.and_then(|x| x.messages_unacknowledged),
                    channel_consumers: channel.and_then(|x| x.consumer_count),
                }
            })
            .collect();
        out.sort_by(|a, b| {
            a.consumer.channel.cmp(&b.consumer.channel).then(a.consumer.consumer_tag.cmp(&b.consumer.consumer_tag))
        });
        Some(out)
    }

    /// The connections whose channels hold this queue's unacked messages, named for the
    /// operator (a hung consumer's owner). A channel whose unacked count is unknown is named
    /// too: it may hold them. Empty when no consumer's channel holds any.
    pub fn holders(&self, vhost: &str, queue: &str) -> Option<Vec<String>> {
        let mut names: Vec<String> = self
            .queue_consumers(vhost, queue)?
            .iter()
            .filter(|c| c.channel_unacked != Some(0))
            .map(QueueConsumer::connection_label)
            .collect();
        names.sort();
        names.dedup();
        Some(names)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn connection(name: &str, state: Option<&str>, own: Option<&str>) -> Connection {
        Connection {
            name: name.into(),
            connection_name: own.map(str::to_string),
            user: Some("guest".into()),
            vhost: Some("v".into()),
            peer_host: Some("10.0.0.5".into()),
            peer_port: Some(40000),
            product: Some("lapin".into()),
            state: state.map(str::to_string),
            channels: Some(1),
            recv_bytes_per_sec: None,
            send_bytes_per_sec: None,
            node: None,
            connected_at: None,
        }
    }

    fn channel(connection: &str, unacked: Option<u64>, consumers: u64) -> Channel {
        Channel {
            name: format!("{connection} (1)"),
            number: Some(1),
            vhost: Some("v".into()),
            user: None,
            node: None,
            connection: Some(connection.into()),
            peer_host: None,
            prefetch_count: Some(5),
            global_prefetch_count: None,
            messages_unacknowledged: unacked,
            consumer_count: Some(consumers),
            confirm: Some(false),
            state: Some("running".into()),
            published: None,
        }
    }

    fn consumer(connection: &str, queue: &str, tag: &str) -> Consumer {
        Consumer {
            queue: queue.into(),
            vhost: "v".into(),
            consumer_tag: Some(tag.into()),
            channel: Some(format!("{connection} (1)")),
            connection: Some(connection.into()),
            peer_host: Some("10.0.0.5".into()),
            peer_port: Some(40000),
            prefetch_count: Some(5),
            ack_required: Some(true),
            activity_status: Some("up".into()),
            exclusive: Some(false),
        }
    }

    fn live(connections: Listed<Connection>, channels: Listed<Channel>, consumers: Listed<Consumer>) -> ClientsLive {
        ClientsLive { listed_at: Utc::now(), every_secs: 10.0, cost_secs: 0.01, connections, channels, consumers }
    }

    #[test]
    fn blocked_counts_blocked_and_blocking_and_is_unknown_when_a_state_is() {
        let all = |states: &[Option<&str>]| {
            let connections = states.iter().enumerate().map(|(i, s)| connection(&format!("c{i}"), *s, None)).collect();
            live(Listed::known(connections), Listed::known(vec![]), Listed::known(vec![]))
        };
        assert_eq!(
            all(&[Some("running"), Some("blocked"), Some("blocking"), Some("flow")]).blocked_connections(),
            Some(2)
        );
        assert_eq!(all(&[]).blocked_connections(), Some(0));
        assert_eq!(all(&[Some("blocked"), None]).blocked_connections(), None);
        let unlisted = live(Listed::unknown("HTTP 400".into()), Listed::known(vec![]), Listed::known(vec![]));
        assert_eq!(unlisted.blocked_connections(), None);
    }

    #[test]
    fn a_queue_s_consumers_name_the_connection_and_the_channel_s_unacked() {
        let clients = live(
            Listed::known(vec![
                connection("a", Some("running"), Some("billing-worker")),
                connection("b", Some("running"), None),
            ]),
            Listed::known(vec![channel("a", Some(5), 1), channel("b", Some(0), 1)]),
            Listed::known(vec![
                consumer("a", "orders", "t1"),
                consumer("b", "orders", "t2"),
                consumer("b", "other", "t3"),
            ]),
        );
        let found = clients.queue_consumers("v", "orders").unwrap();
        assert_eq!(found.len(), 2);
        assert_eq!(found[0].connection_label(), "billing-worker (a)");
        assert_eq!((found[0].channel_unacked, found[0].product.as_deref()), (Some(5), Some("lapin")));
        assert_eq!(found[0].client_host.as_deref(), Some("10.0.0.5:40000"));
        assert_eq!(clients.holders("v", "orders").unwrap(), vec!["billing-worker (a)"]);
        assert!(clients.queue_consumers("v", "none").unwrap().is_empty());
    }

    #[test]
    fn unknown_channels_leave_unacked_unknown_and_name_every_consumer_as_a_possible_holder() {
        let clients = live(
            Listed::known(vec![connection("a", None, None)]),
            Listed::unknown("HTTP 400".into()),
            Listed::known(vec![consumer("a", "orders", "t1")]),
        );
        let found = clients.queue_consumers("v", "orders").unwrap();
        assert_eq!(found[0].channel_unacked, None);
        assert_eq!(clients.holders("v", "orders").unwrap(), vec!["a"]);
        let no_consumers = live(Listed::unknown("x".into()), Listed::unknown("x".into()), Listed::unknown("x".into()));
        assert!(no_consumers.queue_consumers("v", "orders").is_none());
    }
}
