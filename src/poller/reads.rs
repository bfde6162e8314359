//! Carrying out a poll's plan (`plan`): the queue calls it decided, as given. The listing's
//! pages, the policies warren resolves for a listing without them, and the scrape with the
//! families the plan asks for; the scrape's numbers go over the listing's (`overlay`).

use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};

use super::plan::PollPlan;
use super::track::CounterSource;
use super::{since_4_0, timed, PollCalls, PollError, Poller};
use crate::broker::management::{BrokerError, Overview, RawQueue, VhostEntry};
use crate::broker::policies;
use crate::broker::prometheus::Scrape;

/// What the poll's first calls found, for carrying out its plan (`Poller::read_queues`).
#[derive(Clone, Copy)]
pub(super) struct Found<'a> {
    pub(super) watched: &'a [VhostEntry],
    pub(super) overview: &'a Overview,
    pub(super) stats_enabled: bool,
    pub(super) started: Instant,
    pub(super) now: DateTime<Utc>,
}

/// What carrying out a plan's queue reads gave.
pub(super) struct QueueReads {
    pub(super) queues: Vec<Vec<RawQueue>>,
    /// The source of this poll's fresh per-queue counters, as the calls answered.
    pub(super) counters: Option<CounterSource>,
    /// When the counters were read: the start of the call that served them. Rates need
    /// readings a whole number of 5 s stats steps apart (`CounterWindow::baseline`); with one
    /// reading per listing, the listing's varying duration must not shift its time.
    pub(super) counters_at: Instant,
    /// The plan as carried out: the one given, or the listing alone when its scrape failed
    /// (`PollPlan::listing_without_scrape`).
    pub(super) done: PollPlan,
}

/// How carrying out a plan's queue reads ended.
pub(super) enum Reads {
    Done(QueueReads),
    /// A call failed, and this plan serves the poll instead.
    Instead(PollPlan),
}

impl Poller {
    /// Carries out `plan`'s queue reads as given: the scrape, the listing, or both. A failed
    /// scrape ends with the plan that serves the poll instead (`PollPlan::after_failed_scrape`)
    /// when the listing made cannot serve without it.
    pub(super) async fn read_queues(
        &mut self,
        plan: PollPlan,
        found: &Found<'_>,
        calls: &mut PollCalls,
        bytes: &mut usize,
    ) -> Result<Reads, PollError> {
        if plan.list {
            self.list_queues(plan, found, calls, bytes).await
        } else {
            Ok(self.scrape_queues(plan, found, calls, bytes).await)
        }
    }

    /// A poll between listings: the scrape over the queues the last listing kept.
    async fn scrape_queues(
        &mut self,
        plan: PollPlan,
        found: &Found<'_>,
        calls: &mut PollCalls,
        bytes: &mut usize,
    ) -> Reads {
        let Found { stats_enabled, started, now, .. } = *found;
        let counters_at = Instant::now();
        let mut spent = Duration::ZERO;
        let answer = self.scrape(found.watched, &plan, found.overview.cluster_name.as_deref(), &mut spent).await;
        // On 4.x consumers have a cadence of their own: a scrape with them is not what every
        // poll costs.
        let detail = plan.scrape_consumers && plan.scrape_counters;
        if detail {
            calls.other += spent;
        } else {
            calls.cheap += spent;
        }
        let scrape = match answer {
            Ok((scrape, size)) => {
                *bytes += size;
                scrape
            }
            Err(error) => {
                // The listing serves this poll instead.
                self.prometheus_failed(started, now, &error);
                return Reads::Instead(plan.after_failed_scrape(stats_enabled).expect("a scrape-only plan"));
            }
        };
        self.prometheus_answered(now, &scrape);
        let counters = scrape.has_counters.then_some(CounterSource::Plugin);
        if detail {
            self.detail_at = Some(counters_at);
            self.detail_cost = spent;
        }
        let base = self.listing.as_ref().map(|l| l.queues.clone()).unwrap_or_default();
        let overlaid = self.overlay(base, &scrape, None);
        if scrape.has_consumers {
            // Kept for the polls that do not ask for consumers (same order: the overlay keeps
            // the listing's).
            if let Some(listing) = &mut self.listing {
                for (kept, now) in listing.queues.iter_mut().zip(&overlaid) {
                    kept.consumers = now.consumers;
                }
            }
        }
        Reads::Done(QueueReads { queues: vec![overlaid], counters, counters_at, done: plan })
    }

    /// A listing poll: the listing, then the scrape when the plan has one.
    async fn list_queues(
        &mut self,
        plan: PollPlan,
        found: &Found<'_>,
        calls: &mut PollCalls,
        bytes: &mut usize,
    ) -> Result<Reads, PollError> {
        let Found { stats_enabled, started, now, .. } = *found;
        let mut raw_queues: Vec<Vec<RawQueue>> = Vec::new();
        let reason = plan.list_reason.unwrap_or("unknown");
        *self.load.listing_reasons.entry(reason.to_string()).or_default() += 1;
        // Kept as the pages they came in: `derive` frees each page once it is read, so the
        // whole listing (16 MB at 50,000 queues) is never held beside both views.
        let mut counters_at = Instant::now();
        for vhost in found.watched {
            *bytes += if plan.light_listing && !plan.listing_totals {
                self.fetch_metadata(&vhost.name, &mut raw_queues, &mut calls.stats).await?
            } else {
                let (light, totals) = (plan.light_listing, plan.listing_totals);
                self.fetch_vhost(&vhost.name, light, totals, &mut raw_queues, &mut calls.stats).await?
            };
        }
        if plan.light_listing {
            // A light listing (and any listing with the metrics collector off) has no
            // effective policy.
            *bytes += self.apply_policies(found.watched, &mut raw_queues, &mut calls.stats).await;
        }
        // Nor a delivery limit, and a full listing lacks it too for a queue whose first stats
        // are not in yet: on 4.x a quorum queue always has one, so reads of it must be
        // confirmed from the first listing on. 3.x listings never say it; its argument or
        // policy does.
        let since_4_0 = since_4_0(found.overview);
        for q in raw_queues.iter_mut().flatten() {
            if q.kind.as_deref() == Some("quorum") && q.delivery_limit.is_none() {
                q.delivery_limit = policies::delivery_limit(q, since_4_0);
            }
        }
        let mut counters = (stats_enabled && !plan.light_listing).then_some(CounterSource::Listing);
        let mut cost = calls.stats;
        if !plan.scrape {
            self.listed(&raw_queues, started, now, cost, self.prometheus.is_some());
            return Ok(Reads::Done(QueueReads { queues: raw_queues, counters, counters_at, done: plan }));
        }
        // Depth from the scrape on listing polls too: the listing's counts lag the plugin's by
        // up to a stats interval, and alternating sources would make depth jump back and forth
        // (an alert on depth would flap). On 4.x the counters come from it too, so that a rate
        // window never mixes the two sources.
        let scrape_started = Instant::now();
        let mut spent = Duration::ZERO;
        let answer = self.scrape(found.watched, &plan, found.overview.cluster_name.as_deref(), &mut spent).await;
        calls.other += spent;
        // Head timestamps asked only because the listing has none are part of what a listing
        // costs, and so of its budgeted cadence.
        if plan.scrape_head_timestamps && !self.broker.prometheus_head_timestamps {
            cost += spent;
        }
        let scrape = match answer {
            Ok((scrape, size)) => {
                *bytes += size;
                scrape
            }
            Err(error) => {
                self.prometheus_failed(started, now, &error);
                if let Some(instead) = plan.after_failed_scrape(stats_enabled) {
                    // The metadata listing has no depth, and the scrape that was to serve it
                    // failed: the stats listing serves this poll.
                    return Ok(Reads::Instead(instead));
                }
                // The listing serves without the scrape.
                self.listed(&raw_queues, started, now, cost, true);
                let done = plan.listing_without_scrape();
                return Ok(Reads::Done(QueueReads { queues: raw_queues, counters, counters_at, done }));
            }
        };
        self.prometheus_answered(now, &scrape);
        if scrape.has_counters {
            counters = Some(CounterSource::Plugin);
            counters_at = scrape_started;
        }
        if scrape.has_consumers {
            self.detail_at = Some(scrape_started);
        }
        self.listed(&raw_queues, started, now, cost, false);
        let base = raw_queues.into_iter().flatten().collect();
        let overlaid = self.overlay(base, &scrape, Some(!plan.light_listing));
        if let Some(listing) = &mut self.listing {
            listing.queues = overlaid.clone();
        }
        Ok(Reads::Done(QueueReads { queues: vec![overlaid], counters, counters_at, done: plan }))
    }

    /// One scrape of the watched vhosts' queues as the plan asks; the call's time goes to `spent`.
    /// `cluster`: the cluster name the management API gave, which the endpoint must serve.
    pub(super) async fn scrape(
        &mut self,
        watched: &[VhostEntry],
        plan: &PollPlan,
        cluster: Option<&str>,
        spent: &mut Duration,
    ) -> Result<(Scrape, usize), BrokerError> {
        let client = self.prometheus.clone().expect("a plan scrapes only with a client");
        let names: Vec<String> = watched.iter().map(|v| v.name.clone()).collect();
        let families = crate::broker::prometheus::Families {
            consumers: plan.scrape_consumers,
            counters: plan.scrape_counters,
            head_timestamps: plan.scrape_head_timestamps,
        };
        let call = client.scrape(&names, families);
        let (scrape, size) = timed(&mut self.load, spent, "prometheus", "/metrics/detailed", call).await?;
        // Before any of its numbers is used: is it this broker's endpoint?
        let Some(identity) = &scrape.identity else {
            return Err(BrokerError::Malformed {
                path: "/metrics/detailed".into(),
                detail: "no rabbitmq_identity_info: the endpoint does not say which broker it serves, so its numbers \
                         are not used"
                    .into(),
            });
        };
        let nodes: Vec<String> = self.nodes.nodes.iter().map(|n| n.name.clone()).collect();
        identity.check(cluster, &nodes)?;
        Ok((scrape, size))
    }

    /// One vhost's queues, metadata only, in one call (`queues_metadata`); returns the bytes read.
    pub(super) async fn fetch_metadata(
        &mut self,
        vhost: &str,
        out: &mut Vec<Vec<RawQueue>>,
        spent: &mut Duration,
    ) -> Result<usize, PollError> {
        let endpoint = format!("/api/queues/{}", crate::broker::management::encode_segment(vhost));
        let answer = timed(&mut self.load, spent, "management", &endpoint, self.client.queues_metadata(vhost)).await;
        let (mut items, size) = match answer {
            Ok(answer) => answer,
            // The vhost was deleted since the listing: it has no queues now.
            Err(BrokerError::Http { status: 404, .. }) => return Ok(0),
            Err(e) => return Err(e.into()),
        };
        for q in &mut items {
            if q.vhost.is_empty() {
                q.vhost = vhost.to_string();
            }
            q.arguments = Some(self.maps.share_or_empty(q.arguments.take()));
            q.effective_policy_definition = Some(self.maps.share_or_empty(q.effective_policy_definition.take()));
            // No message stats here: unknown, never 0 (the scrape's counters replace them).
            q.counters_unknown = true;
        }
        if !items.is_empty() {
            out.push(items);
        }
        Ok(size)
    }

    /// All pages of one vhost's queues; returns the bytes read.
    pub(super) async fn fetch_vhost(
        &mut self,
        vhost: &str,
        light: bool,
        totals: bool,
        out: &mut Vec<Vec<RawQueue>>,
        spent: &mut Duration,
    ) -> Result<usize, PollError> {
        let mut bytes = 0;
        let mut page = 1;
        let endpoint = format!("/api/queues/{}", crate::broker::management::encode_segment(vhost));
        loop {
            let answer =
                timed(&mut self.load, spent, "management", &endpoint, self.client.queues_page(vhost, page, totals))
                    .await;
            let (body, size) = match answer {
                Ok(answer) => answer,
                // The vhost was deleted since the listing: it has no queues now.
                Err(BrokerError::Http { status: 404, .. }) => return Ok(bytes),
                // An empty vhost answers "page out of range" for page 1 on some versions.
                Err(BrokerError::Http { status: 400, ref body, .. }) if body.contains("page_out_of_range") => {
                    return Ok(bytes)
                }
                Err(e) => return Err(e.into()),
            };
            bytes += size;
            let page_count = body.page_count;
            let maps = &mut self.maps;
            let mut items = body.items;
            for q in &mut items {
                if q.vhost.is_empty() {
                    q.vhost = vhost.to_string();
                }
                q.arguments = Some(maps.share_or_empty(q.arguments.take()));
                q.effective_policy_definition = Some(maps.share_or_empty(q.effective_policy_definition.take()));
                // A light listing has no message stats: unknown, never 0 (the scrape's replace them).
                q.counters_unknown |= light;
            }
            out.push(items);
            if page >= page_count {
                return Ok(bytes);
            }
            page += 1;
        }
    }

    /// Resolves the effective policy of listed queues that lack one (the listing of a broker
    /// with the metrics collector off). A failed call leaves them without (logged): the numbers
    /// are not worth losing for it. Returns the bytes read.
    pub(super) async fn apply_policies(
        &mut self,
        watched: &[VhostEntry],
        pages: &mut [Vec<RawQueue>],
        spent: &mut Duration,
    ) -> usize {
        let mut bytes = 0;
        for vhost in watched {
            let path = crate::broker::management::encode_segment(&vhost.name);
            let call = self.client.policies("policies", &vhost.name);
            let user = timed(&mut self.load, spent, "management", &format!("/api/policies/{path}"), call).await;
            let call = self.client.policies("operator-policies", &vhost.name);
            let endpoint = format!("/api/operator-policies/{path}");
            let operator = timed(&mut self.load, spent, "management", &endpoint, call).await;
            let (user, operator) = match (user, operator) {
                (Ok((u, a)), Ok((o, b))) => {
                    bytes += a + b;
                    (u, o)
                }
                (Err(e), _) | (_, Err(e)) => {
                    tracing::warn!(broker = %self.broker.name, vhost = %vhost.name, error = %e, "policies not read");
                    continue;
                }
            };
            let resolver = policies::Resolver::new(&user, &operator);
            if resolver.unreadable() > 0 {
                let unreadable = resolver.unreadable();
                tracing::warn!(broker = %self.broker.name, vhost = %vhost.name, unreadable, "operator policy patterns not understood");
            }
            // Each page holds one vhost's queues (`fetch_vhost`).
            for page in pages.iter_mut().filter(|p| p.first().is_some_and(|q| q.vhost == vhost.name)) {
                resolver.apply(page);
                for q in page.iter_mut() {
                    q.effective_policy_definition =
                        Some(self.maps.share_or_empty(q.effective_policy_definition.take()));
                }
            }
        }
        bytes
    }
}
