//! What the broker page says after a poll: where each number comes from, the cadences and
//! why, and warren's estimated load on the broker.

use std::time::Duration;

use chrono::{DateTime, Utc};

use super::cadence::DETAIL_SHARE;
use super::plan::PollPlan;
use super::track::CounterSource;
use super::{exchanges, load, Poller};
use crate::live::MetricSource;

/// Which source served this poll's depth.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum DepthSource {
    Prometheus,
    Listing,
}

impl Poller {
    /// What the broker page says about sources, cadences and ages after this poll.
    pub(super) fn update_load(
        &mut self,
        now: DateTime<Utc>,
        plan: &PollPlan,
        counters: Option<CounterSource>,
        stats_enabled: bool,
    ) {
        // The plan as carried out: with a scrape only when it answered.
        let depth = if plan.scrape { DepthSource::Prometheus } else { DepthSource::Listing };
        let (stats_every, _) = self.stats_intervals();
        if counters.is_some() {
            self.counters_from = counters;
        }
        let counters_from = self.counters_from;
        let b = &self.broker;
        let listing_at = self.listing.as_ref().map(|l| l.sampled_at);
        let listing_cost = self.listing.as_ref().map(|l| l.cost.as_secs_f64());
        let prometheus_used = depth == DepthSource::Prometheus || self.prometheus_in_use();
        let head_every_poll = b.prometheus_head_timestamps;
        let stats_off = !stats_enabled;
        // 4.x: consumers at their own cadence, the listing for metadata only.
        let metadata_only = prometheus_used && counters_from == Some(CounterSource::Plugin);
        let detail_every = self.detail_every().as_secs_f64();
        let detail_at = self.detail_at;
        let exchange_share = self.exchanges.load_share(b);
        let (exchange_every, exchanges_at) = (self.exchanges.every(b).as_secs_f64(), self.exchanges.read_at());
        let l = &mut self.load;
        l.last_plan = plan.describe();
        l.last_plan_sources = plan.sources().describe();
        l.listing_role = if counters_from == Some(CounterSource::Plugin) {
            "metadata: type, arguments, policy"
        } else {
            "message stats for rates, and metadata"
        };
        l.backing_off = self.alarm.as_ref().map(|a| {
            format!("resource alarm: {a}; polls are spaced twice as far and the stats listing waits until it clears")
        });
        l.depth_sampled_at = Some(now);
        l.metadata_sampled_at = listing_at;
        l.stats_cost_secs = listing_cost;
        let by_budget = listing_cost.is_some_and(|c| {
            load::stats_interval(
                c,
                self.last_calls.cheap.as_secs_f64(),
                b.poll_interval,
                b.broker_cpu_budget,
                b.stats_min_interval,
            )
            .1
        });
        let spaced_by_budget = |listing: &str| {
            format!(
                "the last {listing} took {:.2} s of broker time; at most one every {:.0} s keeps warren within {:.0}% of a core",
                listing_cost.unwrap_or_default(),
                stats_every.as_secs_f64(),
                b.broker_cpu_budget * 100.0
            )
        };
        if metadata_only {
            l.stats_interval_secs = stats_every.as_secs_f64();
            l.stats_reason = if by_budget {
                spaced_by_budget("metadata listing")
            } else {
                format!(
                    "metadata only (the plugin serves the counters): every {:.0} s, sooner when a queue appears",
                    stats_every.as_secs_f64()
                )
            };
        } else if prometheus_used {
            l.stats_interval_secs = stats_every.as_secs_f64();
            l.stats_reason = if by_budget {
                spaced_by_budget("listing")
            } else {
                format!("the minimum stats interval ({} s): the listing is cheap", b.stats_min_interval.as_secs())
            };
        } else {
            l.stats_interval_secs = l.interval_secs;
            l.stats_reason = "every poll lists queues (no Prometheus source)".into();
        }
        // Rates from the plugin come every poll; only listing-served rates can be too slow.
        l.rates_slower_than_wanted = counters_from == Some(CounterSource::Listing)
            && l.stats_interval_secs > b.stats_max_interval.as_secs_f64() + 0.5;
        if counters.is_some() {
            l.rates_sampled_at = Some(now);
        }
        let cheap = self.last_calls.cheap.as_secs_f64();
        let interval = Duration::from_secs_f64(l.interval_secs.max(0.001));
        let stats = listing_cost.map(|c| (c, Duration::from_secs_f64(l.stats_interval_secs.max(0.001))));
        // Consumers asked less often than every poll: their scrape's own share.
        let detail = if metadata_only && detail_every > l.interval_secs + 0.5 {
            self.detail_cost.as_secs_f64() / detail_every.max(0.001)
        } else {
            0.0
        };
        l.estimated_load = Some(load::estimated_load(cheap, interval, stats) + detail + exchange_share);

        let (depth_source, depth_reason) = match depth {
            DepthSource::Prometheus => (
                "prometheus /metrics/detailed, every poll".to_string(),
                "the plugin serves depth and consumers for a fraction of a listing's broker CPU (0.12 against 3.4 CPU-s at 10,000 queues on 3.10.8; docs: Benchmarks)"
                    .to_string(),
            ),
            DepthSource::Listing if prometheus_used => (
                "management listing (this poll)".to_string(),
                "a stats listing was due; the scrape serves the polls in between".to_string(),
            ),
            DepthSource::Listing => (
                "management /api/queues listing, every poll".to_string(),
                format!("Prometheus source not used: {}", l.prometheus.reason),
            ),
        };
        let rates = match counters_from {
            Some(CounterSource::Plugin) => (
                "prometheus counters (queue_delivery_metrics, queue_exchange_metrics), every poll".to_string(),
                "RabbitMQ 4.x serves per-queue counters in the plugin: rates are deltas between polls, all from this one source"
                    .to_string(),
            ),
            Some(CounterSource::Listing) => (
                format!("management listing with message_stats, every {:.0} s", l.stats_interval_secs),
                "only the management API has per-queue counters before RabbitMQ 4.0; rates are counter deltas over the time between listings".to_string(),
            ),
            None => (
                "none: unknown".to_string(),
                "no source has served per-queue counters: the management listing has none with the metrics collector off, and the Prometheus plugin has them from RabbitMQ 4.0 only".to_string(),
            ),
        };
        let rates_at = l.rates_sampled_at;
        let depth_at = l.depth_sampled_at;
        l.sources = vec![
            MetricSource {
                metric: "ready, unacked, total",
                source: depth_source.clone(),
                reason: depth_reason.clone(),
                sampled_at: depth_at,
            },
            if metadata_only && depth == DepthSource::Prometheus {
                MetricSource {
                    metric: "consumers",
                    source: format!("prometheus queue_consumer_count, every {detail_every:.0} s"),
                    reason: format!(
                        "it costs the broker more than depth (0.11 against 0.08 CPU-s at 10,000 queues on 4.0.5): asked every poll while its scrape fits in {:.1}% of a core, spaced when it does not, and at least every {} s",
                        b.broker_cpu_budget * DETAIL_SHARE * 100.0,
                        b.stats_max_interval.as_secs()
                    ),
                    sampled_at: detail_at.map(|at| now - chrono::Duration::from_std(at.elapsed()).unwrap_or_default()),
                }
            } else {
                MetricSource {
                    metric: "consumers",
                    source: depth_source.clone(),
                    reason: depth_reason.clone(),
                    sampled_at: depth_at,
                }
            },
            if head_every_poll || depth == DepthSource::Listing {
                MetricSource {
                    metric: "oldest-message age (head timestamp)",
                    source: depth_source,
                    reason: depth_reason,
                    sampled_at: depth_at,
                }
            } else {
                MetricSource {
                    metric: "oldest-message age (head timestamp)",
                    source: if stats_off || metadata_only {
                        "prometheus queue_metrics with each listing; between listings kept while the head cannot have moved, else warren's estimate"
                    } else {
                        "management listing; between listings kept while the head cannot have moved, else warren's estimate"
                    }.into(),
                    reason: "head timestamps are only in the plugin's queue_metrics family, about 4x the broker cost of the depth scrape (prometheus_head_timestamps = true asks for it)".into(),
                    sampled_at: listing_at,
                }
            },
            MetricSource {
                metric: "queue rates (publish, deliver, ack, redeliver)",
                source: rates.0,
                reason: rates.1,
                sampled_at: rates_at,
            },
            MetricSource {
                metric: "broker and vhost rates (confirm, unroutable)",
                source: "management /api/overview and /api/vhosts, every poll".into(),
                reason: "confirms and unroutable counts exist only there; both calls are cheap".into(),
                sampled_at: Some(now),
            },
            MetricSource {
                metric: "nodes (memory, disk, descriptors, alarms, partitions)",
                source: "management /api/nodes with columns=, every poll".into(),
                reason: "only the management API has them; a few KB per node, milliseconds (see its line in the calls below)".into(),
                sampled_at: self.nodes.as_of,
            },
            if metadata_only {
                MetricSource {
                    metric: "type, arguments, policy",
                    source: "management listing without stats (one call per vhost), policies resolved by warren from /api/policies and /api/operator-policies".into(),
                    reason: format!("only the management API has them; listed every {:.0} s and when a queue appears", l.stats_interval_secs),
                    sampled_at: listing_at,
                }
            } else {
                MetricSource {
                    metric: "type, arguments, policy",
                    source: "management listing".into(),
                    reason: "only the management API has them; refreshed with every stats listing".into(),
                    sampled_at: listing_at,
                }
            },
            MetricSource {
                metric: "exchanges (publish in / out rates)",
                source: format!("management /api/exchanges listing, every {exchange_every:.0} s"),
                reason: format!(
                    "only the management API lists exchanges and their counters: every poll while a listing fits in {:.1}% of a core, spaced when it does not",
                    b.broker_cpu_budget * exchanges::EXCHANGE_SHARE * 100.0
                ),
                sampled_at: exchanges_at,
            },
        ];
    }
}
