//! Exchanges as the exchanges page shows them: type, flags, alternate exchange, bindings out and
//! publish-in / publish-out rates, from `/api/exchanges/{vhost}` with `columns=`.
//!
//! Unroutable publishes are not per exchange: RabbitMQ counts `return_unroutable` and
//! `drop_unroutable` per channel and exchange, but the exchange listing carries only
//! `message_stats.publish_in` / `publish_out` (measured on 3.10.8 and 4.0.5); the counters are
//! summed per vhost (`/api/vhosts`) and broker (`/api/overview`) only, and the Prometheus
//! plugin's `rabbitmq_global_messages_unroutable_*_total` are node-wide. warren therefore shows
//! unroutable rates per vhost and broker, never per exchange.

use std::collections::BTreeMap;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::topology::VhostTopology;

/// Fields asked of `/api/exchanges/{vhost}`: what the exchanges page shows, nothing more.
pub const EXCHANGE_COLUMNS: &str =
    "name,type,durable,auto_delete,internal,arguments,policy,message_stats.publish_in,message_stats.publish_out";

/// One exchange as the broker lists it. Every field but the name is read leniently: an odd
/// value makes that field unknown, never the listing unreadable.
#[derive(Debug, Clone, Deserialize)]
pub struct RawExchange {
    pub name: String,
    #[serde(rename = "type", default)]
    pub kind: Value,
    #[serde(default)]
    pub durable: Value,
    #[serde(default)]
    pub auto_delete: Value,
    #[serde(default)]
    pub internal: Value,
    #[serde(default)]
    pub arguments: Value,
    /// The name of the policy in force, when one applies.
    #[serde(default)]
    pub policy: Value,
    /// Absent without the metrics collector (4.x) and on an exchange nothing was published to.
    #[serde(default)]
    pub message_stats: Value,
}

/// Cumulative publish counters of one exchange.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ExchangeCounters {
    pub publish_in: Option<u64>,
    pub publish_out: Option<u64>,
}

impl RawExchange {
    /// The counters. With stats collected, an absent counter is 0 (the broker adds the key at
    /// the first publish, as for queues); without, unknown.
    pub fn counters(&self, stats_enabled: bool) -> ExchangeCounters {
        if !stats_enabled {
            return ExchangeCounters::default();
        }
        let counter = |key: &str| match self.message_stats.get(key) {
            None | Some(Value::Null) => Some(0),
            Some(v) => v.as_u64(),
        };
        ExchangeCounters { publish_in: counter("publish_in"), publish_out: counter("publish_out") }
    }

    pub fn policy(&self) -> Option<&str> {
        self.policy.as_str().filter(|p| !p.is_empty())
    }

    /// The alternate exchange set by argument (which wins, as in the broker) and where from;
    /// `policy_definition` is the definition of the exchange's policy, when known.
    pub fn alternate_exchange(&self, policy_definition: Option<&Map<String, Value>>) -> Option<(String, &'static str)> {
        if let Some(ae) = self.arguments.get("alternate-exchange").and_then(Value::as_str) {
            return Some((ae.to_string(), "arguments"));
        }
        let ae = policy_definition?.get("alternate-exchange")?.as_str()?;
        Some((ae.to_string(), "policy"))
    }
}

/// One exchange as the pages and the API show it.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ExchangeView {
    pub vhost: String,
    /// "" is the default exchange.
    pub name: String,
    #[serde(rename = "type")]
    pub kind: Option<String>,
    pub durable: Option<bool>,
    pub auto_delete: Option<bool>,
    pub internal: Option<bool>,
    pub alternate_exchange: Option<String>,
    /// `arguments` or `policy`: where the alternate exchange is set (or why it is unknown).
    pub alternate_exchange_by: Option<String>,
    pub policy: Option<String>,
    /// Bindings whose source is this exchange, from the last topology read; `None` when not
    /// known (topology not read yet) and for the default exchange, which binds every queue
    /// implicitly.
    pub bindings_out: Option<usize>,
    /// Messages per second, counter deltas between warren's reads; `None`: unknown (no stats
    /// from the broker, or one read so far).
    pub publish_in_rate: Option<f64>,
    pub publish_out_rate: Option<f64>,
    /// The cumulative counters as last read.
    pub publish_in: Option<u64>,
    pub publish_out: Option<u64>,
}

impl ExchangeView {
    pub fn new(
        vhost: &str,
        raw: &RawExchange,
        counters: ExchangeCounters,
        policy_definition: Option<&Map<String, Value>>,
    ) -> Self {
        let (alternate_exchange, alternate_exchange_by) = match raw.alternate_exchange(policy_definition) {
            Some((name, by)) => (Some(name), Some(by.to_string())),
            // Its policy may set one: not "none" when warren could not read the policy.
            None if raw.policy().is_some() && policy_definition.is_none() => {
                (None, Some("unknown: the exchange's policy was not read".to_string()))
            }
            None => (None, None),
        };
        ExchangeView {
            vhost: vhost.to_string(),
            name: raw.name.clone(),
            kind: raw.kind.as_str().map(str::to_string),
            durable: raw.durable.as_bool(),
            auto_delete: raw.auto_delete.as_bool(),
            internal: raw.internal.as_bool(),
            alternate_exchange,
            alternate_exchange_by,
            policy: raw.policy().map(str::to_string),
            bindings_out: None,
            publish_in_rate: None,
            publish_out_rate: None,
            publish_in: counters.publish_in,
            publish_out: counters.publish_out,
        }
    }
}

/// Bindings out of `exchange` in `topology` (`None` for the default exchange: every queue).
pub fn bindings_out(topology: &VhostTopology, exchange: &str) -> Option<usize> {
    (!exchange.is_empty()).then(|| topology.bindings.iter().filter(|b| b.source == exchange).count())
}

/// A vhost's topology as the poller last read it, for the queue page's Routing section.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct VhostTopologyLive {
    pub topology: Arc<VhostTopology>,
    pub read_at: DateTime<Utc>,
}

/// The exchanges and bindings of a broker's watched vhosts, as last read.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct TopologyLive {
    /// Exchanges of every watched vhost, by vhost then name.
    pub exchanges: Vec<ExchangeView>,
    /// When the exchange listing was read (the start of its calls); `None`: not yet.
    pub exchanges_read_at: Option<DateTime<Utc>>,
    /// How often it is read now, seconds.
    pub exchanges_every_secs: Option<f64>,
    /// Why the last read failed, when it did (the previous listing stays, with its time).
    pub exchanges_error: Option<String>,
    /// Whether the broker collects message stats (publish rates are unknown without).
    pub stats_enabled: Option<bool>,
    /// The bindings and exchanges of each watched vhost.
    pub vhosts: BTreeMap<String, VhostTopologyLive>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_listing_leniently_and_counters_truthfully() {
        let rows: Vec<RawExchange> = serde_json::from_str(
            r#"[{"name":"events","type":"topic","durable":true,"auto_delete":false,"internal":false,
                 "arguments":{"alternate-exchange":"unrouted"},"message_stats":{"publish_in":12}},
                {"name":"odd","type":7,"durable":"yes","arguments":[],"policy":"ae","message_stats":[]},
                {"name":"big","message_stats":{"publish_in":1e30}}]"#,
        )
        .unwrap();
        let events = &rows[0];
        assert_eq!(events.counters(true), ExchangeCounters { publish_in: Some(12), publish_out: Some(0) });
        assert_eq!(events.counters(false), ExchangeCounters::default(), "no stats collected: unknown, not 0");
        assert_eq!(events.alternate_exchange(None), Some(("unrouted".to_string(), "arguments")));
        let policy = serde_json::json!({"alternate-exchange": "from-policy"});
        assert_eq!(
            rows[1].alternate_exchange(policy.as_object()),
            Some(("from-policy".to_string(), "policy")),
            "3.x writes empty arguments as []"
        );
        let view = ExchangeView::new("/", &rows[1], rows[1].counters(true), None);
        assert_eq!((view.kind, view.durable, view.policy.as_deref()), (None, None, Some("ae")));
        assert_eq!(rows[2].counters(true).publish_in, None, "a counter past u64 is no number the broker gave");
    }
}
