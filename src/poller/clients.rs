//! The client listings (connections, channels, consumers) and the connection churn: part of
//! a broker's poll, on a cadence of their own.
//!
//! The listings grow with connections and channels, and each costs the broker the whole table
//! (they are not paged): they run when due by their share of the broker CPU budget
//! (`load::clients_interval`), measured by their own duration as every call is, and the last
//! one is kept with its time so every page can say how old it is. They keep running during a
//! resource alarm, unlike the stats listing: blocked publishers are what an alarm is about, and
//! the alarm already doubles the poll interval.

use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};

use super::load;
use super::{timed, Poller};
use crate::live::clients::{ClientsLive, Listed};
use crate::live::MetricSource;
use crate::metrics::STATS_STEP_SECS;

/// Connections opened plus closed per second, from the overview's cumulative counters: the
/// delta between two readings at least one stats step apart (closer ones may show the same
/// step twice, then a burst). A counter that went back (stats reset, node restart) starts over.
#[derive(Debug, Default)]
pub(super) struct ChurnMeter {
    baseline: Option<(Instant, u64)>,
    rate: Option<f64>,
}

impl ChurnMeter {
    pub(super) fn observe(&mut self, at: Instant, total: Option<u64>) -> Option<f64> {
        let Some(total) = total else {
            // The broker stopped counting (metrics collector off): unknown, not 0.
            *self = ChurnMeter::default();
            return None;
        };
        match self.baseline {
            Some((then, before)) if total >= before => {
                let secs = at.duration_since(then).as_secs_f64();
                if secs < STATS_STEP_SECS {
                    return self.rate;
                }
                self.rate = Some((total - before) as f64 / secs);
            }
            _ => self.rate = None,
        }
        self.baseline = Some((at, total));
        self.rate
    }
}

/// Above this many users, connections the broker does not list whole (4.3 without the metrics
/// collector) stay unknown rather than cost a call per user.
const MAX_USERS_LISTED: usize = 50;

/// What the poller keeps of the client listings between polls.
#[derive(Debug, Default)]
pub(super) struct ClientListings {
    pub(super) last: Option<Arc<ClientsLive>>,
    at: Option<Instant>,
    cost: Duration,
    pub(super) churn: ChurnMeter,
}

impl Poller {
    /// The client listings' interval now, and whether the budget set it.
    fn clients_every(&self) -> (Duration, bool) {
        let b = &self.broker;
        load::clients_interval(
            self.clients.cost.as_secs_f64(),
            b.poll_interval,
            b.broker_cpu_budget,
            b.stats_min_interval.max(b.poll_interval),
        )
    }

    /// Lists connections, channels and consumers when due; returns the bytes read. A failed or
    /// refused call leaves that listing unknown (with why) and fails nothing else: the metrics
    /// collector off makes the broker refuse channels and consumers.
    ///
    /// `stats_off_connections`: with the metrics collector off, how many connections the
    /// overview counts. RabbitMQ 4.3 then lists none at `/api/connections`; when the listing
    /// holds fewer, the connections are listed user by user instead (at most
    /// `MAX_USERS_LISTED` users), or are unknown with why: never 0 connections when the
    /// broker counts some. Its empty channel listing is unknown too.
    pub(super) async fn list_clients_if_due(
        &mut self,
        started: Instant,
        spent: &mut Duration,
        stats_off_connections: Option<u64>,
    ) -> usize {
        let due = self
            .clients
            .at
            .is_none_or(|at| started.duration_since(at) + self.broker.poll_interval / 4 >= self.clients_every().0);
        if !due {
            return 0;
        }
        let listed_at = Utc::now();
        let at = Instant::now();
        let mut cost = Duration::ZERO;
        let mut bytes = 0;
        let client = self.client.clone();
        let listing =
            match timed(&mut self.load, &mut cost, "management", "/api/connections", client.connections()).await {
                Ok((items, size)) if stats_off_connections.is_some_and(|n| (items.len() as u64) < n) => {
                    let by_user = client.connections_by_user(MAX_USERS_LISTED);
                    match timed(&mut self.load, &mut cost, "management", "/api/connections/username", by_user).await {
                        Ok((Some(found), more)) => Ok((found, size + more)),
                        Ok((None, _)) => Err(format!(
                            "the broker counts {} connections but lists {} with the metrics collector off \
                         (RabbitMQ 4.3 lists them per user only), and it has more than {MAX_USERS_LISTED} users",
                            stats_off_connections.unwrap_or_default(),
                            items.len()
                        )),
                        Err(e) => Err(e.to_string()),
                    }
                }
                Ok(listed) => Ok(listed),
                Err(e) => Err(e.to_string()),
            };
        let connections = match listing {
            Ok((items, size)) => {
                bytes += size;
                // A connection not yet opened on a vhost (still authenticating) has none.
                let watched = |v: &Option<String>| v.as_deref().is_none_or(|v| self.broker.watches_vhost(v));
                Listed::known(items.into_iter().filter(|c| watched(&c.vhost)).collect())
            }
            Err(why) => Listed::unknown(why),
        };
        let channels = match timed(&mut self.load, &mut cost, "management", "/api/channels", client.channels()).await {
            // 4.0 refuses the listing without the metrics collector; 4.3 answers an empty one
            // while connections are open (measured on 4.3.6): unknown, not 0 channels.
            Ok((items, size)) if items.is_empty() && stats_off_connections.is_some_and(|n| n > 0) => {
                bytes += size;
                Listed::unknown(format!(
                    "the broker lists no channels with the metrics collector off (RabbitMQ 4.3) while it counts {} \
                     connections",
                    stats_off_connections.unwrap_or_default()
                ))
            }
            Ok((items, size)) => {
                bytes += size;
                let watched = |v: &Option<String>| v.as_deref().is_none_or(|v| self.broker.watches_vhost(v));
                Listed::known(items.into_iter().filter(|c| watched(&c.vhost)).collect())
            }
            Err(e) => Listed::unknown(e.to_string()),
        };
        let consumers = match timed(&mut self.load, &mut cost, "management", "/api/consumers", client.consumers()).await
        {
            Ok((items, size)) => {
                bytes += size;
                Listed::known(items.into_iter().filter(|c| self.broker.watches_vhost(&c.vhost)).collect())
            }
            Err(e) => Listed::unknown(e.to_string()),
        };
        *spent += cost;
        self.clients.at = Some(at);
        self.clients.cost = cost;
        let every = self.clients_every().0;
        self.clients.last = Some(Arc::new(ClientsLive {
            listed_at,
            every_secs: every.as_secs_f64(),
            cost_secs: cost.as_secs_f64(),
            connections,
            channels,
            consumers,
        }));
        bytes
    }

    /// The broker page's account of the client listings: cadence, why, cost, and their share
    /// in warren's estimated load (added to what `update_load` estimated for the rest).
    pub(super) fn clients_load(&mut self, now: DateTime<Utc>) {
        let (every, by_budget) = self.clients_every();
        let b = &self.broker;
        let cost = self.clients.at.map(|_| self.clients.cost.as_secs_f64());
        let sampled_at = self.clients.last.as_ref().map(|c| c.listed_at);
        let l = &mut self.load;
        l.clients_interval_secs = every.as_secs_f64();
        l.clients_cost_secs = cost;
        l.clients_sampled_at = sampled_at;
        l.clients_reason = if by_budget {
            format!(
                "the last listings took {:.2} s of broker time; one every {:.0} s keeps them within {:.1}% of a core ({:.0}% of the budget)",
                cost.unwrap_or_default(),
                every.as_secs_f64(),
                b.broker_cpu_budget * load::CLIENTS_SHARE * 100.0,
                load::CLIENTS_SHARE * 100.0
            )
        } else {
            format!(
                "the minimum interval ({:.0} s): the listings are cheap ({} of broker time)",
                every.as_secs_f64(),
                cost.map_or("not measured yet".to_string(), |c| format!("{:.3} s", c))
            )
        };
        if let (Some(load), Some(cost)) = (l.estimated_load.as_mut(), cost) {
            *load += cost / every.as_secs_f64().max(0.001);
        }
        l.sources.push(MetricSource {
            metric: "connections, channels, consumers",
            source: format!(
                "management /api/connections, /api/channels, /api/consumers, every {:.0} s",
                every.as_secs_f64()
            ),
            reason: "only the management API lists clients; the listings are whole tables that grow with connections and channels, so they are spaced by their cost".into(),
            sampled_at,
        });
        l.sources.push(MetricSource {
            metric: "connection churn",
            source: "management /api/overview churn_rates, every poll".into(),
            reason: "opened plus closed connections per second, from the counters' change between polls (broker-wide)"
                .into(),
            sampled_at: Some(now),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn churn_is_the_counters_change_over_at_least_a_stats_step() {
        let t0 = Instant::now();
        let s = |secs: u64| t0 + Duration::from_secs(secs);
        let mut churn = ChurnMeter::default();
        assert_eq!(churn.observe(s(0), Some(100)), None, "one reading is no rate");
        assert_eq!(churn.observe(s(2), Some(150)), None, "too close: wait for a stats step");
        assert_eq!(churn.observe(s(10), Some(150)), Some(5.0));
        assert_eq!(churn.observe(s(12), Some(170)), Some(5.0), "too close: the last rate stands");
        assert_eq!(churn.observe(s(20), Some(140)), None, "counter went back: starts over");
        assert_eq!(churn.observe(s(30), Some(160)), Some(2.0));
        assert_eq!(churn.observe(s(40), None), None, "not counted: unknown");
        assert_eq!(churn.observe(s(50), Some(10)), None);
    }
}
