//! How often the poller calls: the poll interval, the listing's interval and the consumers'
//! scrape on 4.x, from the broker CPU budget and what the last calls cost (`load` has the
//! arithmetic, this the poller's side of it).

use std::time::Duration;

use super::track::CounterSource;
use super::{load, Poller};

/// On RabbitMQ 4.x the plugin serves the counters, so the queue listing is only for metadata
/// (type, arguments, durability): listed this often, or sooner when a queue appears. A policy
/// changed since shows on the queue page within this time; the dead-letter actions read
/// policies at the moment they act (`policies::queue_now`), never from here.
pub(super) const METADATA_EVERY: Duration = Duration::from_secs(300);

/// The share of `broker_cpu_budget` that scraping consumers may cost on 4.x: they are asked
/// every poll while that is cheap, else spaced (and then at least every `stats_max_interval`).
/// A tenth: measured on 4.0.5 at 10,000 queues, depth and consumers every 10 s is what a
/// Prometheus server scraping the plugin costs the broker (1.06 CPU-s per minute), of which
/// consumers are the larger part (`queue_consumer_count` reads the plugin's largest table),
/// and warren's depth and counters plus its small calls already take 0.7 of it: consumers
/// every poll could not stay within it (benches/README.md). Before 4.0 the stats listing is
/// the expensive call, and consumers come every poll.
pub(super) const DETAIL_SHARE: f64 = 0.1;

impl Poller {
    /// How often consumers are scraped on 4.x: every poll while a scrape with them costs at
    /// most `DETAIL_SHARE` of the budget, spaced when it costs more, and at least every
    /// `stats_max_interval`, in whole polls.
    pub(super) fn detail_every(&self) -> Duration {
        let b = &self.broker;
        let share = (b.broker_cpu_budget * DETAIL_SHARE).max(1e-6);
        let by_cost = Duration::from_secs_f64((self.detail_cost.as_secs_f64() / share).min(86_400.0));
        let every = by_cost.max(b.stats_min_interval).min(b.stats_max_interval.max(b.poll_interval));
        if every > b.poll_interval {
            load::whole_stats_steps(every, b.poll_interval).min(b.stats_max_interval.max(b.poll_interval))
        } else {
            b.poll_interval
        }
    }

    /// The queue listing serves metadata only: the plugin serves depth, consumers and counters
    /// (4.x).
    pub(super) fn metadata_only(&self) -> bool {
        self.prometheus_in_use() && self.counters_from == Some(CounterSource::Plugin)
    }

    /// The stats listing's interval, and the shortest one the budget allows (for a listing
    /// brought forward because queues appeared).
    pub(super) fn stats_intervals(&self) -> (Duration, Duration) {
        let b = &self.broker;
        let cost = self.listing.as_ref().map_or(0.0, |l| l.cost.as_secs_f64());
        let cheap = self.last_calls.cheap.as_secs_f64();
        let min = if self.metadata_only() { METADATA_EVERY.max(b.stats_min_interval) } else { b.stats_min_interval };
        let (every, _) = load::stats_interval(cost, cheap, b.poll_interval, b.broker_cpu_budget, min);
        // Listing every poll keeps readings one poll apart; a longer interval must keep them a
        // whole number of stats steps apart.
        let every = if every > b.poll_interval { load::whole_stats_steps(every, b.poll_interval) } else { every };
        let (budget_every, _) =
            load::stats_interval(cost, cheap, b.poll_interval, b.broker_cpu_budget, b.poll_interval);
        (every, budget_every)
    }

    /// The delay between polls: the configured interval, stretched when the broker is slow or
    /// in alarm, and, when every poll is a listing (no Prometheus source), spaced by the budget.
    pub(super) fn next_interval(&mut self) -> Duration {
        let base = self.broker.poll_interval;
        // With the scrape serving depth, the stats listing is spaced by the budget instead: only
        // the calls every poll makes count toward stretching the poll interval.
        let recurring = if self.prometheus_in_use() { self.last_calls.cheap } else { self.last_calls.total() };
        let (mut interval, mut why) = load::poll_interval(base, recurring, self.alarm.is_some());
        if !self.prometheus_in_use() {
            if let Some(listing) = &self.listing {
                let (every, by_budget) = load::stats_interval(
                    listing.cost.as_secs_f64(),
                    self.last_calls.cheap.as_secs_f64(),
                    base,
                    self.broker.broker_cpu_budget,
                    base,
                );
                if by_budget && every > interval {
                    interval = every;
                    why = Some(format!(
                        "without the Prometheus source every poll lists queues ({:.2} s of broker time): spaced to stay within the {:.0}% budget",
                        listing.cost.as_secs_f64(),
                        self.broker.broker_cpu_budget * 100.0
                    ));
                }
            }
        }
        self.load.interval_secs = interval.as_secs_f64();
        self.load.stretched = why;
        interval
    }

    pub(super) fn prometheus_in_use(&self) -> bool {
        self.prometheus.is_some() && self.load.prometheus.available == Some(true)
    }
}
