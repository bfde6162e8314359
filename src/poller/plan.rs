//! A poll is a plan, then its execution. `plan` decides, before the poll's first queue call,
//! every queue call it makes and where each metric comes from this poll, as one value
//! (`PollPlan`), from the poller's state (`PlanInputs`); the execution (`reads`) carries it out
//! as given, and a failed scrape yields the next plan (`after_failed_scrape`) rather than a
//! change to this one. Pure, so each decision is tested without a broker.
//!
//! The cheap calls every poll makes (overview, vhosts, the alarm check, nodes) come first: the
//! plan is decided from what they say (the version, whether the broker collects stats). The
//! client, exchange and topology listings keep cadences of their own (`clients`, `exchanges`,
//! `routing`), decided where they are read.

use std::time::{Duration, Instant};

use super::{since_4_0, Poller};
use crate::broker::management::Overview;

/// What one poll asks of the broker, decided before its first queue call (`plan`), and so where
/// each of its metrics comes from (`sources`). The broker page shows both.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct PollPlan {
    /// List queues from the management API: metadata (type, arguments, policy) always; depth,
    /// head timestamps and (with stats) counters when no scrape serves them.
    pub list: bool,
    /// Scrape the Prometheus plugin: depth.
    pub scrape: bool,
    /// Ask the scrape for consumers too: every poll before 4.0; on 4.x with every listing and
    /// at their own cadence in between (`Poller::detail_every`).
    pub scrape_consumers: bool,
    /// Ask the scrape for per-queue counters (4.x): rates then come from the plugin every poll.
    pub scrape_counters: bool,
    /// Ask the scrape for head timestamps (`queue_metrics`, about 4x the cost of depth).
    pub scrape_head_timestamps: bool,
    /// The listing has no message stats, effective policies or head timestamps: the broker
    /// collects none (metrics collector off), or the scrape serves depth and counters (4.x).
    /// warren resolves policies itself and asks the listing poll's scrape for head timestamps.
    pub light_listing: bool,
    /// The light listing asks for queue totals (depth): when no scrape serves depth. Without
    /// them it is the metadata listing, one call per vhost (`queues_metadata`).
    pub listing_totals: bool,
    /// Why this poll lists, when it does (counted on the broker page: `listing_reasons`).
    pub list_reason: Option<&'static str>,
}

/// What a poll's plan is decided from: the poller's state before the poll, and what the poll's
/// first calls said (`Poller::plan_inputs`).
#[derive(Debug, Clone)]
pub(super) struct PlanInputs {
    pub poll_interval: Duration,
    /// A Prometheus endpoint is configured (`prometheus_url` is not off).
    pub prometheus_configured: bool,
    /// The endpoint failed or proved incomplete, and is not used until `prometheus_retry_at`.
    pub prometheus_known_down: bool,
    pub prometheus_retry_at: Option<Instant>,
    /// When the last listing's poll started; `None` before the first listing.
    pub listed_at: Option<Instant>,
    /// The listing's interval, and the shortest one the budget allows (for a listing brought
    /// forward): `Poller::stats_intervals`.
    pub stats_every: Duration,
    pub budget_every: Duration,
    /// Why the last scrape wants the listing brought forward, when it does (queues it has that
    /// the listing has not, ...).
    pub listing_wanted: Option<&'static str>,
    /// A resource alarm is in force: a due listing waits (the broker comes first).
    pub alarm: bool,
    /// When consumers were last scraped, and how often they are on 4.x (`Poller::detail_every`).
    pub consumers_scraped_at: Option<Instant>,
    pub consumers_every: Duration,
    /// `prometheus_head_timestamps`: the scrape asks for head timestamps every poll.
    pub head_timestamps_every_poll: bool,
    /// RabbitMQ 4.0 or later: the plugin serves per-queue counters (DOMAIN.md §7).
    pub since_4_0: bool,
    /// The broker collects message stats (the metrics collector is on).
    pub stats_enabled: bool,
}

/// This poll's calls (see `PollPlan`), as of `now` (the poll's start). The scrape serves depth
/// whenever the plugin is configured and not known to be unavailable (or its re-check is due);
/// the listing runs at start, when no scrape can serve, and at its budgeted cadence, sooner when
/// queues appeared. During a resource alarm a due listing waits (the broker comes first).
pub(super) fn plan(state: &PlanInputs, now: Instant) -> PollPlan {
    // A quarter poll of slack for timer jitter: a listing (or a retry, or consumers) due every
    // poll must not skip every other one.
    let slack = state.poll_interval / 4;
    let configured = state.prometheus_configured;
    let known_down = state.prometheus_known_down;
    let retry_due = state.prometheus_retry_at.is_some_and(|retry| now + slack >= retry);
    let listing_due = match state.listed_at {
        None => true,
        Some(at) => {
            // Measured from the start of the listing's poll.
            let since = now.duration_since(at) + slack;
            let due = since >= state.stats_every || (state.listing_wanted.is_some() && since >= state.budget_every);
            due && !state.alarm
        }
    };
    let scrape = configured && (!known_down || retry_due);
    let list = !(scrape && state.listed_at.is_some() && !listing_due);
    let plugin_counters = state.since_4_0;
    // Without the metrics collector the listing has no stats to give; on 4.x with the plugin
    // serving depth and counters it needs none either: it is then a metadata listing in one
    // call (`queues_metadata`), measured on 4.0.5 at 10,000 queues at 0.18 broker CPU-s
    // against 1.6 for the stats listing.
    let light_listing = list && (!state.stats_enabled || (scrape && plugin_counters));
    // Consumers: every poll before 4.0 (the listing is the expensive call there); on 4.x with
    // every listing and at their own cadence in between. Counters every poll.
    let consumers_due =
        state.consumers_scraped_at.is_none_or(|at| now.duration_since(at) + slack >= state.consumers_every);
    let scrape_consumers = scrape && (!plugin_counters || list || consumers_due);
    let list_reason = list.then(|| match state.listed_at {
        None => "first poll",
        Some(_) if !configured => "no Prometheus source",
        Some(_) if known_down && !retry_due => "Prometheus source unavailable",
        Some(_) => state.listing_wanted.unwrap_or("stats listing due"),
    });
    PollPlan {
        list,
        scrape,
        scrape_consumers,
        scrape_counters: scrape && plugin_counters,
        // A light listing has no head timestamps: the listing poll's scrape asks
        // `queue_metrics` for them instead, at the listing's budgeted cadence.
        scrape_head_timestamps: scrape && (state.head_timestamps_every_poll || light_listing),
        light_listing,
        // Totals only when no scrape serves depth: measured on 4.0.5 with the metrics collector
        // off at 10,000 queues, a listing with them cost the broker 5.94 CPU-s, without 1.14.
        listing_totals: light_listing && !scrape,
        list_reason,
    }
}

impl PollPlan {
    /// The plan that serves a poll whose scrape failed, decided from this one: the listing
    /// when the plan only scraped (with message stats when the broker collects them), or the
    /// stats listing when its metadata listing had no depth without the scrape. `None` when
    /// the listing this plan makes serves without the scrape (`listing_without_scrape`).
    pub fn after_failed_scrape(&self, stats_enabled: bool) -> Option<PollPlan> {
        let listing = PollPlan {
            list: true,
            scrape: false,
            light_listing: !stats_enabled,
            listing_totals: !stats_enabled,
            list_reason: Some("the scrape failed"),
            ..*self
        };
        (!self.list || (self.light_listing && stats_enabled)).then_some(listing)
    }

    /// What served a poll whose scrape failed when its listing serves as it is
    /// (`after_failed_scrape` is `None`): that listing alone. A metadata listing then leaves
    /// depth unknown, never 0: the broker collects no stats, so no listing would have more.
    pub fn listing_without_scrape(&self) -> PollPlan {
        PollPlan { scrape: false, ..*self }
    }

    /// The plan in words, for the broker page.
    pub fn describe(&self) -> String {
        let mut calls = Vec::new();
        if self.scrape {
            let mut families = vec!["depth"];
            if self.scrape_consumers {
                families.push("consumers");
            }
            if self.scrape_counters {
                families.push("per-queue counters");
            }
            if self.scrape_head_timestamps {
                families.push("head timestamps");
            }
            calls.push(format!("prometheus /metrics/detailed ({})", families.join(", ")));
        }
        if self.list && self.light_listing && !self.listing_totals {
            calls.push("management queue listing without message stats (metadata only, one call)".to_string());
        } else if self.list && self.light_listing {
            calls.push("management queue listing without message stats (metadata, totals)".to_string());
        } else if self.list {
            calls.push("management queue listing with message stats".to_string());
        }
        calls.join(" + ")
    }

    /// Where each of this poll's queue metrics comes from, following from its calls.
    pub fn sources(&self) -> PlanSources {
        let scrape = |family: bool| self.scrape && family;
        let stats_listing = self.list && !self.light_listing;
        let depth = if self.scrape {
            Source::Scrape
        } else if stats_listing || (self.list && self.listing_totals) {
            Source::Listing
        } else {
            // The metadata listing whose scrape failed.
            Source::Unknown
        };
        let consumers = if scrape(self.scrape_consumers) {
            Source::Scrape
        } else if self.scrape && !self.list {
            // 4.x between the scrapes with consumers: each queue keeps its last known count.
            Source::Kept
        } else if stats_listing {
            Source::Listing
        } else {
            // A listing without stats has no consumers.
            Source::Unknown
        };
        let counters = if scrape(self.scrape_counters) {
            Source::Scrape
        } else if stats_listing {
            Source::Listing
        } else if !self.list {
            // Read with the next listing; the last poll's rates are shown until then.
            Source::Kept
        } else {
            // A listing without stats, and no plugin counters (before 4.0).
            Source::Unknown
        };
        let head_timestamps = if scrape(self.scrape_head_timestamps) {
            Source::Scrape
        } else if stats_listing && !self.scrape {
            Source::Listing
        } else if stats_listing || !self.list {
            // This poll's listing or the last one, while the scrape shows the head cannot have
            // moved (`overlay::head_unmoved`).
            Source::ListingWhileUnmoved
        } else {
            // A listing without stats has none, and no scrape asked for them.
            Source::Estimate
        };
        let metadata = if stats_listing {
            Source::Listing
        } else if self.list {
            Source::ListingAndPolicies
        } else {
            Source::Kept
        };
        PlanSources { depth, consumers, counters, head_timestamps, metadata }
    }
}

/// Where one poll's queue metrics come from (`PollPlan::sources`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct PlanSources {
    /// Ready, unacked, total.
    pub depth: Source,
    pub consumers: Source,
    /// Per-queue counters (publish, deliver, ack, redeliver), and so the queues' rates.
    pub counters: Source,
    /// Head timestamps, and so the oldest message's age.
    pub head_timestamps: Source,
    /// Type, arguments, policy.
    pub metadata: Source,
}

/// Where one metric comes from this poll.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Source {
    /// This poll's Prometheus scrape.
    Scrape,
    /// This poll's management listing.
    Listing,
    /// This poll's management listing, with the policies warren resolves itself (a listing
    /// without stats has no effective policy).
    ListingAndPolicies,
    /// The listing's, kept only while the scrape shows the head cannot have moved; else
    /// warren's estimate.
    ListingWhileUnmoved,
    /// Not read this poll: the last reading stays.
    Kept,
    /// Warren's estimate from depth and rates (`estimate`).
    Estimate,
    /// No call this poll serves it.
    Unknown,
}

impl PlanSources {
    /// (metric, source) in words, for the broker page.
    pub fn describe(&self) -> Vec<(&'static str, &'static str)> {
        let metadata = match self.metadata {
            Source::Listing => "management listing",
            Source::ListingAndPolicies => "management listing, policies resolved by warren",
            _ => "the last listing's",
        };
        vec![
            ("depth", self.depth.words("prometheus scrape", "management listing")),
            ("consumers", self.consumers.words("prometheus scrape", "management listing")),
            ("rates", self.counters.words("prometheus per-queue counters", "management listing message stats")),
            ("head timestamps", self.head_timestamps.words("prometheus queue_metrics", "management listing")),
            ("type, arguments, policy", metadata),
        ]
    }
}

impl Source {
    /// In words, given what the scrape and the listing are for this metric.
    fn words(self, scrape: &'static str, listing: &'static str) -> &'static str {
        match self {
            Source::Scrape => scrape,
            Source::Listing | Source::ListingAndPolicies => listing,
            Source::ListingWhileUnmoved => {
                "the listing's, kept while the head cannot have moved, else warren's estimate"
            }
            Source::Kept => "not read this poll: the last reading stays",
            Source::Estimate => "warren's estimate",
            Source::Unknown => "unknown: no call this poll serves it",
        }
    }
}

impl Poller {
    /// What this poll's plan is decided from; `overview` and `stats_enabled` are this poll's.
    pub(super) fn plan_inputs(&self, overview: &Overview, stats_enabled: bool) -> PlanInputs {
        let (stats_every, budget_every) = self.stats_intervals();
        PlanInputs {
            poll_interval: self.broker.poll_interval,
            prometheus_configured: self.prometheus.is_some(),
            prometheus_known_down: self.load.prometheus.available == Some(false),
            prometheus_retry_at: self.prometheus_retry_at,
            listed_at: self.listing.as_ref().map(|l| l.at),
            stats_every,
            budget_every,
            listing_wanted: self.need_listing.then(|| self.need_listing_why.unwrap_or("brought forward")),
            alarm: self.alarm.is_some(),
            consumers_scraped_at: self.detail_at,
            consumers_every: self.detail_every(),
            head_timestamps_every_poll: self.broker.prometheus_head_timestamps,
            since_4_0: since_4_0(overview),
            stats_enabled,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A failed scrape yields the plan that serves the poll instead, decided without a broker.
    #[test]
    fn a_failed_scrape_yields_the_plan_that_serves_instead() {
        let plan = |list, scrape, light_listing| PollPlan {
            list,
            scrape,
            scrape_consumers: true,
            scrape_counters: false,
            scrape_head_timestamps: false,
            light_listing,
            listing_totals: light_listing && !scrape,
            list_reason: list.then_some("budget"),
        };
        // A scrape-only poll lists instead: with message stats when the broker collects them.
        let instead = plan(false, true, false).after_failed_scrape(true).unwrap();
        assert_eq!(
            instead,
            PollPlan { list: true, scrape: false, list_reason: Some("the scrape failed"), ..plan(false, true, false) }
        );
        assert!(plan(false, true, false).after_failed_scrape(false).unwrap().light_listing, "no stats to list");
        // A metadata listing has no depth without its scrape: the stats listing serves.
        let instead = plan(true, true, true).after_failed_scrape(true).unwrap();
        assert!(instead.list && !instead.scrape && !instead.light_listing, "{instead:?}");
        // A stats listing serves as it is. So does a metadata listing where the broker collects
        // no stats: no listing would have more, and the poll's depth is unknown, not 0.
        assert_eq!(plan(true, true, false).after_failed_scrape(true), None);
        assert_eq!(plan(true, true, true).after_failed_scrape(false), None);
        // The plan that serves instead has no scrape, so nothing of it can fail the same way.
        for p in [plan(false, true, false), plan(true, true, true)] {
            for stats in [true, false] {
                if let Some(instead) = p.after_failed_scrape(stats) {
                    assert!(!instead.scrape);
                }
            }
        }
    }

    const POLL: Duration = Duration::from_secs(10);

    /// A 3.x broker with the metrics collector on and the plugin answering, listed `since` ago,
    /// its listing every 60 s (20 s when brought forward), consumers scraped with it.
    fn inputs(now: Instant, since: Duration) -> PlanInputs {
        PlanInputs {
            poll_interval: POLL,
            prometheus_configured: true,
            prometheus_known_down: false,
            prometheus_retry_at: None,
            listed_at: Some(now - since),
            stats_every: Duration::from_secs(60),
            budget_every: Duration::from_secs(20),
            listing_wanted: None,
            alarm: false,
            consumers_scraped_at: Some(now - since),
            consumers_every: POLL,
            head_timestamps_every_poll: false,
            since_4_0: false,
            stats_enabled: true,
        }
    }

    fn four(mut state: PlanInputs) -> PlanInputs {
        state.since_4_0 = true;
        state
    }

    fn collector_off(mut state: PlanInputs) -> PlanInputs {
        state.stats_enabled = false;
        state
    }

    #[test]
    fn the_first_poll_lists_and_scrapes() {
        let now = Instant::now();
        let first = PlanInputs { listed_at: None, consumers_scraped_at: None, ..inputs(now, POLL) };
        // 3.x: the stats listing, depth and consumers from the scrape.
        let p = plan(&first, now);
        assert!(p.list && p.scrape && !p.light_listing && p.scrape_consumers, "{p:?}");
        assert!(!p.scrape_counters && !p.scrape_head_timestamps, "the listing has counters and head timestamps: {p:?}");
        assert_eq!(p.list_reason, Some("first poll"));
        let s = p.sources();
        assert_eq!(
            (s.depth, s.consumers, s.counters, s.metadata),
            (Source::Scrape, Source::Scrape, Source::Listing, Source::Listing)
        );
        assert_eq!(s.head_timestamps, Source::ListingWhileUnmoved);
        // 4.x: the metadata listing in one call; depth, consumers, counters and head timestamps
        // from the scrape.
        let p = plan(&four(first.clone()), now);
        assert!(p.list && p.scrape && p.light_listing && !p.listing_totals, "{p:?}");
        assert!(p.scrape_consumers && p.scrape_counters && p.scrape_head_timestamps, "{p:?}");
        let s = p.sources();
        assert_eq!(
            (s.depth, s.consumers, s.counters, s.head_timestamps),
            (Source::Scrape, Source::Scrape, Source::Scrape, Source::Scrape)
        );
        assert_eq!(s.metadata, Source::ListingAndPolicies);
        assert!(p.describe().contains("metadata only, one call"), "{}", p.describe());
        // Even in a resource alarm: there is nothing to show without a listing.
        assert!(plan(&PlanInputs { alarm: true, ..first }, now).list);
    }

    #[test]
    fn between_listings_3x_scrapes_depth_and_consumers_only() {
        let now = Instant::now();
        let p = plan(&inputs(now, Duration::from_secs(15)), now);
        assert!(!p.list && p.scrape && p.scrape_consumers, "{p:?}");
        assert!(!p.scrape_counters && !p.scrape_head_timestamps && p.list_reason.is_none(), "{p:?}");
        assert_eq!(p.describe(), "prometheus /metrics/detailed (depth, consumers)");
        let s = p.sources();
        assert_eq!((s.depth, s.consumers), (Source::Scrape, Source::Scrape));
        // Rates are the last listing's until the next; so is the head timestamp, while the
        // head cannot have moved.
        assert_eq!(
            (s.counters, s.head_timestamps, s.metadata),
            (Source::Kept, Source::ListingWhileUnmoved, Source::Kept)
        );
    }

    #[test]
    fn on_4x_counters_come_every_poll_and_consumers_at_their_own_cadence() {
        let now = Instant::now();
        let mut state = four(inputs(now, Duration::from_secs(15)));
        state.consumers_every = Duration::from_secs(30);
        state.consumers_scraped_at = Some(now - Duration::from_secs(5));
        let p = plan(&state, now);
        assert!(!p.list && p.scrape && p.scrape_counters && !p.scrape_consumers, "{p:?}");
        assert_eq!(p.describe(), "prometheus /metrics/detailed (depth, per-queue counters)");
        let s = p.sources();
        assert_eq!((s.depth, s.consumers, s.counters), (Source::Scrape, Source::Kept, Source::Scrape));
        // Due within a quarter poll of slack.
        state.consumers_scraped_at = Some(now - Duration::from_secs(28));
        assert!(plan(&state, now).scrape_consumers);
        // Before 4.0 consumers come every poll, however recent their last scrape.
        state.since_4_0 = false;
        state.consumers_scraped_at = Some(now - Duration::from_secs(1));
        assert!(plan(&state, now).scrape_consumers);
    }

    #[test]
    fn the_listing_comes_at_its_cadence_sooner_when_wanted_and_waits_for_an_alarm() {
        let now = Instant::now();
        // Due within a quarter poll of slack (60 s), not before.
        let p = plan(&inputs(now, Duration::from_secs(58)), now);
        assert!(p.list && p.scrape && p.list_reason == Some("stats listing due"), "{p:?}");
        assert!(!plan(&inputs(now, Duration::from_secs(50)), now).list);
        // Brought forward when the scrape wants it, but no sooner than the budget allows (20 s).
        let wanted = |since| PlanInputs { listing_wanted: Some("queues appeared"), ..inputs(now, since) };
        let p = plan(&wanted(Duration::from_secs(25)), now);
        assert_eq!((p.list, p.list_reason), (true, Some("queues appeared")));
        assert!(!plan(&wanted(Duration::from_secs(10)), now).list);
        // A resource alarm: the due listing waits, the scrape serves.
        let p = plan(&PlanInputs { alarm: true, ..inputs(now, Duration::from_secs(120)) }, now);
        assert!(!p.list && p.scrape, "{p:?}");
    }

    #[test]
    fn without_a_usable_plugin_every_poll_lists() {
        let now = Instant::now();
        let off = PlanInputs { prometheus_configured: false, ..inputs(now, Duration::from_secs(1)) };
        let p = plan(&off, now);
        assert!(p.list && !p.scrape && !p.light_listing, "{p:?}");
        assert_eq!(p.list_reason, Some("no Prometheus source"));
        assert_eq!(p.describe(), "management queue listing with message stats");
        let s = p.sources();
        assert_eq!(
            (s.depth, s.consumers, s.counters, s.head_timestamps, s.metadata),
            (Source::Listing, Source::Listing, Source::Listing, Source::Listing, Source::Listing)
        );
        // Known down: listed until its re-check is due, then scraped again.
        let down = |retry_in: Duration| PlanInputs {
            prometheus_known_down: true,
            prometheus_retry_at: Some(now + retry_in),
            ..inputs(now, Duration::from_secs(1))
        };
        let p = plan(&down(Duration::from_secs(30)), now);
        assert!(p.list && !p.scrape && p.list_reason == Some("Prometheus source unavailable"), "{p:?}");
        let p = plan(&down(Duration::from_secs(2)), now);
        assert!(!p.list && p.scrape, "the re-check is due within a quarter poll: {p:?}");
    }

    #[test]
    fn with_the_metrics_collector_off_the_listing_is_light() {
        let now = Instant::now();
        // The listing poll: metadata in one call, head timestamps from the scrape since the
        // listing has none, no counters before 4.0.
        let p = plan(&collector_off(inputs(now, Duration::from_secs(60))), now);
        assert!(p.list && p.scrape && p.light_listing && !p.listing_totals && p.scrape_head_timestamps, "{p:?}");
        let s = p.sources();
        assert_eq!((s.depth, s.counters, s.head_timestamps), (Source::Scrape, Source::Unknown, Source::Scrape));
        // On 4.x the plugin's counters serve the rates.
        assert_eq!(
            plan(&four(collector_off(inputs(now, Duration::from_secs(60)))), now).sources().counters,
            Source::Scrape
        );
        // Without the plugin: the listing with totals, which has depth but no consumers,
        // counters or head timestamps.
        let alone = PlanInputs { prometheus_configured: false, ..collector_off(inputs(now, POLL)) };
        let p = plan(&alone, now);
        assert!(p.list && !p.scrape && p.light_listing && p.listing_totals, "{p:?}");
        assert_eq!(p.describe(), "management queue listing without message stats (metadata, totals)");
        let s = p.sources();
        assert_eq!(
            (s.depth, s.consumers, s.counters, s.head_timestamps, s.metadata),
            (Source::Listing, Source::Unknown, Source::Unknown, Source::Estimate, Source::ListingAndPolicies)
        );
    }

    #[test]
    fn head_timestamps_are_scraped_when_asked_or_when_the_listing_has_none() {
        let now = Instant::now();
        let asked = |since| PlanInputs { head_timestamps_every_poll: true, ..inputs(now, since) };
        for since in [Duration::from_secs(15), Duration::from_secs(60)] {
            let p = plan(&asked(since), now);
            assert!(p.scrape_head_timestamps, "{p:?}");
            assert_eq!(p.sources().head_timestamps, Source::Scrape);
            assert!(p.describe().contains("head timestamps"), "{}", p.describe());
        }
        // Not asked: the stats listing has them; between listings they are its, while the
        // head cannot have moved.
        let p = plan(&inputs(now, Duration::from_secs(60)), now);
        assert!(p.list && !p.scrape_head_timestamps && !p.describe().contains("head timestamps"), "{p:?}");
        // Without the plugin the listing serves them.
        let off = PlanInputs { prometheus_configured: false, ..inputs(now, POLL) };
        assert_eq!(plan(&off, now).sources().head_timestamps, Source::Listing);
    }

    #[test]
    fn a_failed_scrape_yields_a_plan_whose_sources_are_the_listing() {
        let now = Instant::now();
        // 3.x between listings: the stats listing serves instead.
        let p = plan(&inputs(now, Duration::from_secs(15)), now);
        let instead = p.after_failed_scrape(true).unwrap();
        let s = instead.sources();
        assert_eq!(
            (s.depth, s.consumers, s.counters, s.metadata),
            (Source::Listing, Source::Listing, Source::Listing, Source::Listing)
        );
        assert_eq!(instead.describe(), "management queue listing with message stats");
        assert_eq!(p.sources().depth, Source::Scrape, "the plan that failed is not changed");
        // 4.x: the metadata listing has no depth without its scrape: the stats listing.
        let p = plan(&four(inputs(now, Duration::from_secs(300))), now);
        assert!(p.light_listing && !p.listing_totals, "{p:?}");
        let instead = p.after_failed_scrape(true).unwrap();
        assert_eq!((instead.sources().depth, instead.sources().counters), (Source::Listing, Source::Listing));
        // Collector off, no scrape between listings: the listing with totals serves.
        let p = plan(&collector_off(inputs(now, Duration::from_secs(15))), now);
        let instead = p.after_failed_scrape(false).unwrap();
        assert!(instead.light_listing && instead.listing_totals, "{instead:?}");
        assert_eq!((instead.sources().depth, instead.sources().consumers), (Source::Listing, Source::Unknown));
        // Collector off on the listing poll: the metadata listing made serves alone, and depth is
        // unknown this poll, never 0.
        let p = plan(&collector_off(inputs(now, Duration::from_secs(60))), now);
        assert_eq!(p.after_failed_scrape(false), None);
        let served = p.listing_without_scrape();
        assert_eq!((served.sources().depth, served.sources().head_timestamps), (Source::Unknown, Source::Estimate));
        assert_eq!(served.describe(), "management queue listing without message stats (metadata only, one call)");
    }

    #[test]
    fn the_page_names_a_source_for_each_metric() {
        let now = Instant::now();
        let pairs = plan(&inputs(now, Duration::from_secs(15)), now).sources().describe();
        let metrics: Vec<&str> = pairs.iter().map(|(m, _)| *m).collect();
        assert_eq!(metrics, ["depth", "consumers", "rates", "head timestamps", "type, arguments, policy"]);
        assert_eq!(pairs[0].1, "prometheus scrape");
        assert_eq!(pairs[2].1, "not read this poll: the last reading stays");
    }
}
