//! Rates and totals: the vhosts' rates from their counters, the watched broker's as their sum,
//! and the queues' totals.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};

use super::Poller;
use crate::broker::management::VhostEntry;
use crate::live::{BrokerTotals, VhostLive};
use crate::metrics::{self, BrokerCounters, BrokerRates, CounterWindow, QueueView};

impl Poller {
    /// The queues warren itself read recently enough for the reads to be in this poll's rates:
    /// within the rate window and the broker's stats step before it (`QueueView::own_reads`).
    pub(super) fn own_reads(&self, now: DateTime<Utc>) -> HashSet<(String, String)> {
        let window = self.rate_window_secs() + 2.0 * crate::metrics::STATS_STEP_SECS;
        let since = now - chrono::Duration::milliseconds((window * 1000.0) as i64);
        let mut reads = self.snapshots.as_ref().map(|s| s.read_since(&self.broker.name, since)).unwrap_or_default();
        if let Some(jobs) = &self.jobs {
            reads.extend(jobs.moving_from(&self.broker.name));
        }
        reads
    }

    /// Rates span at least one poll interval and at least two stats steps (10 s).
    pub(super) fn rate_window_secs(&self) -> f64 {
        self.broker.poll_interval.as_secs_f64().max(2.0 * metrics::STATS_STEP_SECS)
    }

    /// Readings older than this are never a baseline (see `CounterWindow::baseline`). Counters
    /// are read once per stats listing, so the previous listing's reading must still be there.
    pub(super) fn keep_readings_secs(&self) -> f64 {
        let listings = self.stats_intervals().0.as_secs_f64().max(self.load.interval_secs) * 2.5;
        (self.rate_window_secs() * 5.0).max(65.0).max(listings)
    }

    /// Per-vhost rates: confirms and unroutable returns exist per vhost, not per queue.
    ///
    /// A vhost absent from the last listing is new since: its counters began at 0 after that
    /// listing, so all they count fell between the two, and its rate over that span is known
    /// at its first reading. Leaving it unknown made the broker's total unknown at every poll
    /// after a vhost appeared (issue 34, case 8: the overview's rates were null at 8 of 23 polls
    /// on a broker where test vhosts come and go).
    pub(super) fn vhost_rates(
        &mut self,
        vhosts: &[VhostEntry],
        stats_enabled: bool,
        fetched: Instant,
    ) -> Vec<VhostLive> {
        let (window, keep) = (self.rate_window_secs(), self.keep_readings_secs());
        let last_listing = self.vhosts_listed_at.replace(fetched);
        let mut out = Vec::with_capacity(vhosts.len());
        for vhost in vhosts {
            let current = BrokerCounters::from_overview(vhost.message_stats.as_ref(), stats_enabled);
            let new = !self.vhost_counters.contains_key(&vhost.name);
            let counters = self.vhost_counters.entry(vhost.name.clone()).or_default();
            if let (Some(last), true) = (last_listing, new) {
                // Its counters were 0 at every instant up to the last listing: a run of zeros
                // reaching back far enough to be the baseline of this reading and the next.
                let before = fetched.checked_sub(Duration::from_secs_f64(2.0 * window)).map_or(last, |t| t.min(last));
                counters.push(before, current.zeroed(), keep);
                counters.push(last, current.zeroed(), keep);
            }
            let rates = rates_from(counters, current, fetched, window, keep);
            out.push(VhostLive { name: vhost.name.clone(), rates, counters: current });
        }
        self.vhost_counters.retain(|name, _| vhosts.iter().any(|v| &v.name == name));
        out
    }
}

/// The rates of the watched vhosts together. Unknown where any vhost's is: a partial sum would
/// be an undercount shown as fact.
/// No vhost watched: nothing measured, so unknown rather than 0.
pub(super) fn watched_rates(vhosts: &[VhostLive]) -> BrokerRates {
    if vhosts.is_empty() {
        return BrokerRates::default();
    }
    let sum = |f: fn(&BrokerRates) -> Option<f64>| vhosts.iter().map(|v| f(&v.rates)).sum::<Option<f64>>();
    BrokerRates {
        publish_rate: sum(|r| r.publish_rate),
        confirm_rate: sum(|r| r.confirm_rate),
        ack_rate: sum(|r| r.ack_rate),
        deliver_rate: sum(|r| r.deliver_rate),
        redeliver_rate: sum(|r| r.redeliver_rate),
        unroutable_rate: sum(|r| r.unroutable_rate),
    }
}

fn rates_from(
    window: &mut CounterWindow<BrokerCounters>,
    current: BrokerCounters,
    fetched: Instant,
    min_window_secs: f64,
    keep_secs: f64,
) -> BrokerRates {
    let rates = match window.baseline(fetched, min_window_secs) {
        Some((previous, age)) => metrics::broker_rates(&previous, &current, age),
        None => BrokerRates::default(),
    };
    window.push(fetched, current, keep_secs);
    rates
}

pub(super) fn totals(views: &[QueueView]) -> BrokerTotals {
    // Unknown if any queue's value is unknown: a partial sum would be an undercount shown as fact.
    let sum = |f: fn(&QueueView) -> Option<u64>| views.iter().map(f).sum::<Option<u64>>();
    BrokerTotals {
        queues: views.len() as u64,
        ready: sum(|v| v.ready),
        unacked: sum(|v| v.unacked),
        consumers: sum(|v| v.consumers),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn watched_rates_sum_the_vhosts_and_stay_unknown_where_one_is() {
        let vhost = |publish: Option<f64>| VhostLive {
            name: "v".into(),
            rates: BrokerRates { publish_rate: publish, confirm_rate: Some(1.0), ..BrokerRates::default() },
            counters: Default::default(),
        };
        let both = watched_rates(&[vhost(Some(2.0)), vhost(Some(3.5))]);
        assert_eq!((both.publish_rate, both.confirm_rate), (Some(5.5), Some(2.0)));
        // A partial sum would be an undercount shown as fact.
        assert_eq!(watched_rates(&[vhost(Some(2.0)), vhost(None)]).publish_rate, None);
        // Nothing watched: nothing measured.
        assert_eq!(watched_rates(&[]), BrokerRates::default());
    }
}
