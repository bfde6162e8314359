//! The record of what warren's calls cost a broker, and which source serves each metric: the
//! poller keeps it (`poller::load` chooses the cadences from it), the broker page and
//! `/metrics` show it.

use std::collections::{BTreeMap, VecDeque};

use chrono::{DateTime, Utc};
use serde::Serialize;

/// Recent calls kept per broker.
pub const RECENT_CALLS: usize = 60;

/// One HTTP call warren made to the broker.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct CallRecord {
    pub at: DateTime<Utc>,
    /// `management` or `prometheus`.
    pub source: &'static str,
    /// The endpoint without its query (`/api/queues/{vhost}` pages are one endpoint).
    pub endpoint: String,
    pub duration_ms: f64,
    pub bytes: u64,
    /// HTTP status, `None` when no answer arrived.
    pub status: Option<u16>,
    pub error: Option<String>,
}

/// Totals per endpoint since warren started (for `/metrics`).
#[derive(Debug, Clone, Default, Serialize, utoipa::ToSchema)]
pub struct CallTotals {
    pub calls: u64,
    pub errors: u64,
    pub seconds: f64,
    pub bytes: u64,
}

/// Which source serves one metric, and why.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct MetricSource {
    pub metric: &'static str,
    pub source: String,
    pub reason: String,
    /// When the value shown was sampled.
    pub sampled_at: Option<DateTime<Utc>>,
}

/// The Prometheus endpoint's state as the last check found it.
#[derive(Debug, Clone, Default, Serialize, utoipa::ToSchema)]
pub struct PrometheusState {
    /// `None`: turned off in the configuration.
    pub url: Option<String>,
    /// `None` until it was tried.
    pub available: Option<bool>,
    pub reason: String,
    pub checked_at: Option<DateTime<Utc>>,
    pub next_check_at: Option<DateTime<Utc>>,
    /// Per-queue counters come from it too (RabbitMQ 4.x).
    pub counters: bool,
}

/// What the broker page shows about warren's load on one broker.
#[derive(Debug, Clone, Default, Serialize, utoipa::ToSchema)]
pub struct BrokerLoad {
    pub prometheus: PrometheusState,
    pub sources: Vec<MetricSource>,
    /// The calls of the last poll (`PollPlan`), in words.
    pub last_plan: String,
    /// Where the last poll's queue metrics came from, as its plan decided: (metric, source).
    pub last_plan_sources: Vec<(&'static str, &'static str)>,
    /// What the queue listing is for: with the plugin's counters only metadata.
    pub listing_role: &'static str,
    /// The configured poll interval, and the one in force (stretched when the broker is slow).
    pub base_interval_secs: f64,
    pub interval_secs: f64,
    /// Why the interval is longer than configured, if it is.
    pub stretched: Option<String>,
    /// Interval of the message stats listing (rates), and why it is that long.
    pub stats_interval_secs: f64,
    pub stats_reason: String,
    /// True when the budget forbids rates as fresh as `stats_max_interval`.
    pub rates_slower_than_wanted: bool,
    /// The last stats listing's duration (the cost estimate), seconds.
    pub stats_cost_secs: Option<f64>,
    /// The configured budget and warren's estimated load, as shares of one broker core.
    pub budget: f64,
    pub estimated_load: Option<f64>,
    /// Backing off: resource alarm or the broker answering 503.
    pub backing_off: Option<String>,
    pub depth_sampled_at: Option<DateTime<Utc>>,
    pub rates_sampled_at: Option<DateTime<Utc>>,
    pub metadata_sampled_at: Option<DateTime<Utc>>,
    /// Newest first.
    #[schema(value_type = Vec<CallRecord>)]
    pub calls: VecDeque<CallRecord>,
    pub totals: BTreeMap<String, CallTotals>,
    /// Listings made since start, by why each was made.
    pub listing_reasons: BTreeMap<String, u64>,
    /// The client listings (connections, channels, consumers): their interval, why, and what
    /// the last one cost the broker (seconds, the three calls together).
    pub clients_interval_secs: f64,
    pub clients_reason: String,
    pub clients_cost_secs: Option<f64>,
    pub clients_sampled_at: Option<DateTime<Utc>>,
}

impl BrokerLoad {
    pub fn record(&mut self, call: CallRecord) {
        let totals = self.totals.entry(format!("{} {}", call.source, call.endpoint)).or_default();
        totals.calls += 1;
        totals.errors += u64::from(call.error.is_some());
        totals.seconds += call.duration_ms / 1000.0;
        totals.bytes += call.bytes;
        self.calls.push_front(call);
        self.calls.truncate(RECENT_CALLS);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_call_ring_is_bounded_and_totals_add_up() {
        let mut load = BrokerLoad::default();
        for i in 0..100 {
            load.record(CallRecord {
                at: Utc::now(),
                source: "prometheus",
                endpoint: "/metrics/detailed".into(),
                duration_ms: 10.0,
                bytes: i,
                status: Some(200),
                error: None,
            });
        }
        assert_eq!(load.calls.len(), RECENT_CALLS);
        assert_eq!(load.calls[0].bytes, 99, "newest first");
        let t = &load.totals["prometheus /metrics/detailed"];
        assert_eq!((t.calls, t.bytes), (100, 4950));
        assert!((t.seconds - 1.0).abs() < 1e-9);
    }
}
