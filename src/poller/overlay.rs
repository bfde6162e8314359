//! The scrape over the listing: the listed queues with the scrape's depth, consumers, counters
//! and head timestamps, and what the scrapes say of the Prometheus endpoint as a source (up,
//! failing, incomplete) and of when the listing is wanted sooner.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};

use super::{Listing, Poller};
use crate::broker::management::{BrokerError, QueueStats, RawQueue};
use crate::broker::prometheus::Scrape;

/// A listed queue the plugin has not served for this long makes the plugin an incomplete source
/// (in a cluster each node serves only its own queues). New queues reach the plugin's tables
/// seconds after they exist, so a shorter absence proves nothing.
const MISSING_GRACE: Duration = Duration::from_secs(30);

impl Poller {
    /// The last listing's queues with depth, consumers and head timestamp from the scrape (and
    /// counters, on 4.x). A listed queue the scrape does not serve gets unknown numbers, never the
    /// listing's old ones as if current.
    ///
    /// `base`: the queues kept from the last listing, already overlaid once, or
    /// (`this_poll_listing`) the queues this poll listed, with whether that listing carries
    /// counts and head timestamps (not with the metrics collector off).
    pub(super) fn overlay(
        &mut self,
        mut queues: Vec<RawQueue>,
        scrape: &Scrape,
        this_poll_listing: Option<bool>,
    ) -> Vec<RawQueue> {
        let mut matched = 0;
        // A queue listed before its first stats reached the management database (a new queue,
        // for seconds) has no counts or head timestamp in the listing: list it again. Only the
        // listing itself shows this; the kept queues are overlaid, so it is remembered with it.
        let mut listed_before_stats = false;
        // Messages arrived in a queue the listing saw empty: looked at on every poll.
        let mut listed_without_stats = false;
        let mut missing = HashMap::new();
        for q in &mut queues {
            let key = (q.vhost.clone(), q.name.clone());
            match scrape.queues.get(&key) {
                Some(s) => {
                    matched += 1;
                    listed_before_stats |=
                        this_poll_listing == Some(true) && q.messages_ready.is_none() && s.ready.is_some();
                    // Depth from the scrape must not make a listing without stats look like one
                    // with every counter at 0: the next real reading would be a burst, and the
                    // age estimate would take the 0 for the time before the messages arrived.
                    q.counters_unknown |= !scrape.has_counters
                        && q.messages.is_none()
                        && q.messages_ready.is_none()
                        && q.message_stats.is_none();
                    // Messages arrived in a queue the listing saw empty: their head timestamp is
                    // in the next listing only, so bring it forward as far as the budget allows.
                    listed_without_stats |=
                        !scrape.has_head_timestamps && q.messages_ready == Some(0) && s.ready.is_some_and(|r| r > 0);
                    // A scrape without consumers (4.x between their scrapes) keeps the last known.
                    let consumers = if scrape.has_consumers { s.consumers } else { q.consumers };
                    if scrape.has_head_timestamps {
                        q.head_message_timestamp = s.head_ts;
                        self.head_moved.remove(&key);
                    } else if self.head_moved.contains(&key)
                        || !head_unmoved(q, &crate::broker::prometheus::QueueSample { consumers, ..*s })
                    {
                        // Without `queue_metrics` the listing's head timestamp is the only one;
                        // once the head may have moved it is no longer exact (the age then falls
                        // back to warren's estimate), and a stale "exact" would overstate it. It
                        // stays so until the next listing: a later scrape that looks unmoved
                        // again compares with a reading from before the move.
                        if q.head_message_timestamp.take().is_some() {
                            self.head_moved.insert(key.clone());
                        }
                    }
                    q.messages = s.messages;
                    q.messages_ready = s.ready;
                    q.messages_unacknowledged = s.unacked;
                    q.consumers = consumers;
                    if scrape.has_counters {
                        q.counters_unknown = false;
                        // Counter rows appear with the first event: absent is 0, as in 3.x listings.
                        q.message_stats = Some(QueueStats {
                            publish: Some(s.publish.unwrap_or(0)),
                            deliver_get: Some(s.deliver_get.unwrap_or(0)),
                            ack: Some(s.ack.unwrap_or(0)),
                            redeliver: Some(s.redeliver.unwrap_or(0)),
                        });
                    }
                }
                None => {
                    (q.messages, q.messages_ready, q.messages_unacknowledged) = (None, None, None);
                    (q.consumers, q.head_message_timestamp) = (None, None);
                    // Since when: a new queue reaches the plugin's tables seconds after it exists.
                    let since = self.missing_in_scrape.get(&key).copied().unwrap_or_else(Instant::now);
                    missing.insert(key, since);
                }
            }
        }
        // Queues the listing does not know (created since), or knows without their stats or head
        // timestamp: list again as soon as the budget allows.
        self.missing_in_scrape = missing;
        let stats_pending = match &mut self.listing {
            Some(listing) if this_poll_listing.is_some() => {
                listing.stats_pending = listed_before_stats;
                listed_before_stats
            }
            Some(listing) => listing.stats_pending,
            None => listed_before_stats,
        };
        self.need_listing_why = if scrape.queue_count > matched {
            Some("the scrape shows queues the listing has not")
        } else if !self.missing_in_scrape.is_empty() {
            Some("listed queues missing from the scrape")
        } else if stats_pending {
            Some("a queue listed before its stats")
        } else if listed_without_stats {
            Some("messages in a queue listed empty")
        } else {
            None
        };
        self.need_listing = self.need_listing_why.is_some();
        queues
    }

    pub(super) fn prometheus_answered(&mut self, now: DateTime<Utc>, scrape: &Scrape) {
        let p = &mut self.load.prometheus;
        p.available = Some(true);
        p.counters = scrape.has_counters;
        p.checked_at = Some(now);
        p.next_check_at = None;
        p.reason = format!(
            "answers: {} queues in the last scrape{}",
            scrape.queue_count,
            if scrape.skipped_lines > 0 {
                format!(", {} unreadable lines skipped", scrape.skipped_lines)
            } else {
                String::new()
            }
        );
        self.prometheus_retry_at = None;
        self.prometheus_failures = 0;
    }

    /// A scrape that failed. A single failure is usually the broker busy for a moment, and on a
    /// node without the metrics collector the plugin is the only source of counters: the
    /// scrape is tried again next poll, then after twice as long at each failure in a row, up
    /// to `source_recheck`.
    pub(super) fn prometheus_failed(&mut self, started: Instant, now: DateTime<Utc>, error: &BrokerError) {
        self.prometheus_failures += 1;
        let retry = retry_after(self.prometheus_failures, self.broker.poll_interval, self.broker.source_recheck);
        self.prometheus_unavailable(started, now, format!("unreachable or failing: {error}"), retry);
    }

    /// `recheck`: when to try the endpoint again.
    pub(super) fn prometheus_unavailable(
        &mut self,
        started: Instant,
        now: DateTime<Utc>,
        reason: String,
        recheck: Duration,
    ) {
        tracing::info!(broker = %self.broker.name, %reason, "Prometheus source not used; management API serves depth");
        let p = &mut self.load.prometheus;
        p.available = Some(false);
        p.reason = reason;
        p.checked_at = Some(now);
        p.next_check_at = Some(now + chrono::Duration::from_std(recheck).unwrap_or_default());
        self.prometheus_retry_at = Some(started + recheck);
        self.missing_in_scrape.clear();
    }

    /// Records a stats listing; notices queues the scrapes have left out for `MISSING_GRACE`
    /// although they still exist.
    /// `keep`: keep a copy of the queues for scrapes to overlay (the caller keeps the overlaid
    /// ones instead when this poll's scrape answered).
    pub(super) fn listed(
        &mut self,
        pages: &[Vec<RawQueue>],
        started: Instant,
        now: DateTime<Utc>,
        cost: Duration,
        keep: bool,
    ) {
        let queues = || pages.iter().flatten();
        if !self.missing_in_scrape.is_empty() {
            let listed: HashSet<(&str, &str)> = queues().map(|q| (q.vhost.as_str(), q.name.as_str())).collect();
            // Deleted queues are not missing.
            self.missing_in_scrape.retain(|(v, n), _| listed.contains(&(v.as_str(), n.as_str())));
            let still = self.missing_in_scrape.values().filter(|since| since.elapsed() >= MISSING_GRACE).count();
            if still > 0 {
                let reason = format!(
                    "incomplete: it did not serve {still} of {} listed queues (in a cluster each node serves only its own queues' metrics)",
                    queues().count()
                );
                // Not a passing fault: the endpoint answers, it just does not serve these queues.
                self.prometheus_unavailable(started, now, reason, self.broker.source_recheck);
            }
        }
        self.need_listing = false;
        self.need_listing_why = None;
        self.head_moved.clear();
        // The queues are kept for the scrapes to overlay; without a Prometheus source only the
        // listing's time and cost matter (a copy of 50,000 queues is tens of MB).
        let kept = if keep { queues().cloned().collect() } else { Vec::new() };
        self.listing = Some(Listing { queues: kept, stats_pending: false, at: started, sampled_at: now, cost });
    }
}

/// Whether a queue's head message is still the one the listing saw: no consumer and nothing
/// unacked, then or now, and no fewer ready messages (FIFO: publishes only add at the tail; only
/// a consumer, basic.get, expiry or a purge removes the head, and the last three lower `ready`).
/// A consumer that attached and left between the two readings goes unseen: a known limit.
fn head_unmoved(listed: &RawQueue, now: &crate::broker::prometheus::QueueSample) -> bool {
    let idle = |consumers: Option<u64>, unacked: Option<u64>| consumers == Some(0) && unacked == Some(0);
    idle(listed.consumers, listed.messages_unacknowledged)
        && idle(now.consumers, now.unacked)
        && matches!((listed.messages_ready, now.ready), (Some(before), Some(after)) if after >= before)
}

/// When a Prometheus endpoint that failed `failures` times in a row is tried again: next poll
/// after the first failure, then twice as long at each one, at most `ceiling`.
fn retry_after(failures: u32, poll_interval: Duration, ceiling: Duration) -> Duration {
    let factor = 1u32 << failures.saturating_sub(1).min(16);
    poll_interval.saturating_mul(factor).min(ceiling)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_scrape_is_tried_again_next_poll_then_less_often() {
        // A single failed scrape on a busy 4.0.5 node without the metrics collector (the only
        // source of counters there) made rates and FIFO ages unknown for five minutes.
        let (poll, ceiling) = (Duration::from_secs(5), Duration::from_secs(300));
        assert_eq!(retry_after(1, poll, ceiling), poll);
        assert_eq!(retry_after(2, poll, ceiling), Duration::from_secs(10));
        assert_eq!(retry_after(4, poll, ceiling), Duration::from_secs(40));
        assert_eq!(retry_after(7, poll, ceiling), ceiling);
        assert_eq!(retry_after(u32::MAX, poll, ceiling), ceiling);
    }

    #[test]
    fn a_listed_head_timestamp_stays_only_while_the_head_cannot_have_moved() {
        let listed: RawQueue = serde_json::from_str(
            r#"{"name":"q","consumers":0,"messages_ready":7,"messages_unacknowledged":0,"head_message_timestamp":1700000000}"#,
        )
        .unwrap();
        let now = |ready, unacked, consumers| crate::broker::prometheus::QueueSample {
            ready: Some(ready),
            unacked: Some(unacked),
            consumers: Some(consumers),
            ..Default::default()
        };
        assert!(head_unmoved(&listed, &now(7, 0, 0)));
        assert!(head_unmoved(&listed, &now(12, 0, 0)), "publishes add at the tail");
        assert!(!head_unmoved(&listed, &now(6, 0, 0)), "a get, an expiry or a purge removed messages");
        assert!(!head_unmoved(&listed, &now(7, 0, 1)), "a consumer is attached");
        assert!(!head_unmoved(&listed, &now(6, 1, 0)), "a message is unacked");
    }
}
