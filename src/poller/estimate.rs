//! FIFO estimate of the oldest-message age for queues the broker gives no age for (quorum
//! queues, streams, lazy queues, messages without a timestamp), from warren's own history of
//! the queue's cumulative publish counter (DOMAIN.md §3).
//!
//! In a FIFO queue the messages present now are the last `total` ones published. With
//! P(t) the publish counter, the oldest was published at the latest time t* with
//! P(now) − P(t*) ≥ total, i.e. P(t*) ≤ P(now) − total (the "target"). Stored samples are
//! written whenever the counter changes, so the sample after the latest one at or below the
//! target is the first poll that saw the message counted: it was published within one poll
//! interval (plus the broker's stats lag) before that poll. Requeues, TTL expiry, priorities
//! and purges break FIFO, so the result is always labelled an estimate.

use std::collections::HashMap;

use chrono::{DateTime, Utc};

use super::track::{FifoBreak, QueueKey, Tracked};
use crate::history;
use crate::metrics::{AgeSource, Estimate, QueueView, STATS_STEP_SECS};
use crate::storage::Store;

/// Estimates ages in place for every view whose age is unknown and that has messages.
/// Unchanged targets reuse the cached result, so idle queues cost no query.
pub async fn estimate_ages(
    store: &Store,
    queues: &mut HashMap<QueueKey, Tracked>,
    views: &mut [QueueView],
    poll_interval_secs: f64,
    now: DateTime<Utc>,
) -> Result<(), sqlx::Error> {
    for view in views.iter_mut() {
        if view.oldest_age_source != AgeSource::Unknown {
            continue;
        }
        let (Some(total), Some(published), Some(id)) = (view.total, view.publish_count, view.id) else {
            continue;
        };
        let Some(tracked) = queues.get_mut(&(view.vhost.clone(), view.name.clone())) else {
            continue;
        };
        let slack = lag_slack(view.publish_rate, poll_interval_secs);
        let target = fifo_target(total, published, slack);
        let estimate = match tracked.estimate {
            Some((cached_target, estimate)) if cached_target == target => estimate,
            _ => {
                let (mut estimate, settled) = estimate_one(
                    store,
                    id,
                    tracked,
                    target,
                    total as i64,
                    published as i64 + slack,
                    poll_interval_secs,
                )
                .await?;
                // No publish counter accounts for the messages (dead letters arrive without one):
                // the depth history may still tell when the oldest arrived (issue 31, case 6: a
                // filling DLQ's age was unknown in 46 of 47 polls until someone browsed it).
                if estimate == Estimate::Impossible && view.ack_rate.is_none_or(|r| r == 0.0) {
                    if let Some(by_depth) =
                        estimate_from_depth(store, id, tracked.incarnation_since, total, poll_interval_secs).await?
                    {
                        estimate = by_depth;
                    }
                }
                // Without any stored sample yet the answer changes at the next poll.
                tracked.estimate = settled.then_some((target, estimate));
                estimate
            }
        };
        view.apply_estimate(estimate, now);
    }
    Ok(())
}

/// Marks the ages that a move by warren, or messages handed back by consumers, made wrong, and
/// forgets the marks once they hold again (issue 17, case 6: after a requeue of old dead
/// letters into a quorum queue, the estimate stayed 246 s too low for 32 polls, labelled a
/// plain estimate). The requeued copies are counted as publishes of the moment they were
/// moved, so when they reach the head the estimate gives that moment, not their age: a lower
/// bound. Messages a consumer hands back (nack or reject with requeue) stay at the head while
/// later ones are acked, so the messages present are no longer the last ones published (issue
/// 31, case 1: a poison loop's estimate was 46.5 s too young on average, unflagged);
/// `track::derive` marks those. `requeued` holds, by queue name, each (vhost, end of the move)
/// that put messages into it; `counters_fresh` says this poll's publish counters were read now.
pub fn apply_fifo_breaks(
    queues: &mut HashMap<QueueKey, Tracked>,
    views: &mut [QueueView],
    requeued: &HashMap<String, Vec<(String, DateTime<Utc>)>>,
    counters_fresh: bool,
    now: DateTime<Utc>,
) {
    for view in views.iter_mut() {
        // A break the poll found (`track::derive`: redeliveries) or a move that put messages in.
        let moved_at = requeued
            .get(&*view.name)
            .and_then(|moves| moves.iter().filter(|(vhost, _)| **vhost == *view.vhost).map(|(_, at)| *at).max());
        if moved_at.is_none() && view.fifo_broken_since.is_none() {
            continue;
        }
        let Some(tracked) = queues.get_mut(&(view.vhost.clone(), view.name.clone())) else { continue };
        if let Some(at) = moved_at {
            if tracked.fifo_break.as_ref().is_none_or(|b| b.at < at) {
                tracked.fifo_break = Some(Box::new(FifoBreak { at, from: None }));
            }
        }
        let Some(fifo_break) = tracked.fifo_break.as_mut() else {
            view.fifo_broken_since = None;
            continue;
        };
        // The broker counts a publish up to a stats step late: read the counter after that.
        let counted = (now - fifo_break.at).num_milliseconds() as f64 / 1000.0 > STATS_STEP_SECS + 1.0;
        if fifo_break.from.is_none() && counters_fresh && counted {
            fifo_break.from = view.publish_count.zip(view.total);
        }
        if moved_messages_drained(fifo_break.from, view.publish_count, view.total) {
            tracked.fifo_break = None;
            view.fifo_broken_since = None;
            continue;
        }
        view.fifo_broken_since = Some(fifo_break.at);
        if view.oldest_age_source == AgeSource::Estimated {
            view.oldest_age_lower_bound = true;
        }
    }
}

/// Messages leave a FIFO queue in order: once as many have left since the mark was read as the
/// queue held then (`from`: publish counter and depth at that reading), the moved ones are gone.
/// What left is the change of the counter minus the change of the depth: differences, so that
/// a counter trailing the depth by its stats lag (steady while publishing goes on) cancels out,
/// and publishes the counter never saw before the mark (3.10 misses short-lived channels', such
/// as the move's own) do not matter. (Comparing the counter with the depth itself failed on
/// 3.10: both at once, the trailing counter never reached the depth while publishing went on.)
fn moved_messages_drained(from: Option<(u64, u64)>, published: Option<u64>, total: Option<u64>) -> bool {
    match (from, published, total) {
        (Some((published_then, held_then)), Some(published), Some(total)) => {
            let left = published as i128 - published_then as i128 - (total as i128 - held_then as i128);
            left >= held_then as i128
        }
        _ => false,
    }
}

/// How many messages the publish counter may trail the depth by: what was published during
/// the lag between the two readings (on 3.x the listing's counters trail the plugin's depth by
/// up to a stats step and a poll), plus one.
/// Without a known rate there is no slack: the estimate waits for the next poll.
fn lag_slack(publish_rate: Option<f64>, poll_interval_secs: f64) -> i64 {
    match publish_rate {
        Some(rate) if rate.is_finite() && rate > 0.0 => {
            (rate * (STATS_STEP_SECS + poll_interval_secs)).ceil() as i64 + 1
        }
        _ => 0,
    }
}

/// The publish count the oldest message present was published after: `published − total`.
/// A count short by no more than the slack is the counter's lag, not messages from elsewhere:
/// the oldest message is then among the first published, so the target is 0 (the estimate's
/// bound widens by the lag) rather than negative, which would make the estimate impossible.
fn fifo_target(total: u64, published: u64, slack: i64) -> i64 {
    let target = published as i64 - total as i64;
    if target < 0 && -target <= slack {
        0
    } else {
        target
    }
}

/// Rows of a queue's depth history read at most for one estimate: a queue with more rows since it
/// was last empty (days of changes) stays unknown rather than cost a poll that long a read.
const DEPTH_ROWS: i64 = 20_000;

/// When the oldest message of a queue arrived, from its depth history alone, for a queue no
/// publish counter counts (a DLQ fed by dead-lettering). Only while nothing has left it: if the
/// depth never went down and nothing was acked since it was last empty, every message present
/// arrived after that, and the oldest is the first (a FIFO queue's head). Removals would take
/// the oldest first and make this an overstatement, so any sign of one leaves the age unknown.
async fn estimate_from_depth(
    store: &Store,
    queue_id: i64,
    since: i64,
    total: u64,
    poll_interval_secs: f64,
) -> Result<Option<Estimate>, sqlx::Error> {
    let empty_at = store.last_seen_empty(queue_id, since).await?;
    let rows = store.depths_after(queue_id, empty_at.unwrap_or(since - 1), DEPTH_ROWS + 1).await?;
    Ok(arrival_from_depth(empty_at, &rows, total, poll_interval_secs))
}

/// `estimate_from_depth` on the rows read: (ts, ready, unacked, ack rate × 1000) after the last
/// time the queue was seen empty (`empty_at`), or since its history began.
fn arrival_from_depth(
    empty_at: Option<i64>,
    rows: &[(i64, Option<i64>, Option<i64>, Option<i64>)],
    total: u64,
    poll_interval_secs: f64,
) -> Option<Estimate> {
    if rows.is_empty() || rows.len() as i64 > DEPTH_ROWS {
        return None;
    }
    let mut previous = 0;
    for (_, ready, unacked, ack_m) in rows {
        let depth = (*ready)? + (*unacked)?;
        if depth < previous || ack_m.is_some_and(|a| a > 0) {
            return None; // something left the queue
        }
        previous = depth;
    }
    if (total as i64) < previous {
        return None;
    }
    let first = rows[0].0;
    Some(match empty_at {
        // It arrived after the poll before the first row that counted it, and the broker's
        // depth lags up to a stats step: the middle of that span, as the FIFO estimate takes.
        Some(_) => Estimate::ArrivedAt(first as f64 - (poll_interval_secs + STATS_STEP_SECS) / 2.0),
        None => Estimate::ArrivedBefore(first),
    })
}

async fn estimate_one(
    store: &Store,
    queue_id: i64,
    tracked: &Tracked,
    target: i64,
    total: i64,
    published: i64,
    poll_interval_secs: f64,
) -> Result<(Estimate, bool), sqlx::Error> {
    if target < 0 {
        // More messages than were ever published: they came in another way (dead-lettering,
        // or the node restarted and its counters began again).
        return Ok((Estimate::Impossible, true));
    }
    let since = tracked.incarnation_since;
    // A recent crossing (a backlog younger than the last rows written) needs no query.
    let crossing = match tracked.recent_crossing(since, target) {
        Some(found) => Some(found),
        None => history::publish_crossing(store, queue_id, since, target).await?,
    };
    if let Some((_, next)) = crossing {
        // `next` is absent when the crossing poll is the one being written now.
        let seen_at = next.map(|t| t as f64).unwrap_or_else(|| Utc::now().timestamp() as f64);
        // Published after the previous poll and before this one, and the broker's counters lag
        // up to one stats step: take the middle of that span.
        return Ok((Estimate::PublishedAt(seen_at - (poll_interval_secs + STATS_STEP_SECS) / 2.0), true));
    }
    // No sample old enough: the oldest message is older than the history, if the messages
    // present when the history starts, plus everything published since, can account for the
    // messages present now; otherwise the counter does not see this queue's inflow.
    // (`published` includes the lag slack.)
    match history::first_sample(store, queue_id, since).await? {
        Some((first_ts, Some(first_published), Some(first_total)))
            if first_total + (published - first_published) >= total =>
        {
            Ok((Estimate::OlderThan(first_ts), true))
        }
        Some(_) => Ok((Estimate::Impossible, true)),
        None => Ok((Estimate::Impossible, false)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dlq_that_only_fills_is_aged_from_its_depth_history() {
        let row = |ts: i64, depth: i64, ack: i64| (ts, Some(depth), Some(0), Some(ack));
        // Empty at 100, then dead letters arriving: the first came by 110.
        let filling = [row(110, 3, 0), row(120, 9, 0), row(130, 14, 0)];
        assert_eq!(arrival_from_depth(Some(100), &filling, 15, 5.0), Some(Estimate::ArrivedAt(105.0)));
        // Never seen empty: older than the history.
        assert_eq!(arrival_from_depth(None, &filling, 15, 5.0), Some(Estimate::ArrivedBefore(110)));
        // Something left it: the oldest may have gone, unknown rather than overstated.
        let drained = [row(110, 3, 0), row(120, 2, 0), row(130, 5, 0)];
        assert_eq!(arrival_from_depth(Some(100), &drained, 5, 5.0), None);
        let acked = [row(110, 3, 0), row(120, 9, 1500)];
        assert_eq!(arrival_from_depth(Some(100), &acked, 9, 5.0), None);
        assert_eq!(arrival_from_depth(Some(100), &filling, 10, 5.0), None, "fewer now than last stored");
        // Depth unknown in a row (no listing): cannot tell.
        assert_eq!(arrival_from_depth(Some(100), &[(110, Some(3), None, None)], 3, 5.0), None);
        assert_eq!(arrival_from_depth(Some(100), &[], 3, 5.0), None);
    }

    #[test]
    fn a_counter_trailing_the_depth_by_its_lag_keeps_the_estimate() {
        // Issue 15 (4): a stream at 2 msg/s whose publish counter trailed the scrape's depth by
        // 9 messages; polls every 1 s.
        let slack = lag_slack(Some(2.0), 1.0);
        assert_eq!(slack, 13);
        assert_eq!(fifo_target(1_009, 1_000, slack), 0);
        // No lag: the usual target.
        assert_eq!(fifo_target(100, 1_000, slack), 900);
        // Far more than the lag explains (a DLQ filled by dead-lettering, no publishes): impossible.
        assert!(fifo_target(500, 0, lag_slack(Some(0.0), 1.0)) < 0);
        assert!(fifo_target(1_100, 1_000, slack) < 0);
        // Without a rate there is no slack, and the next poll decides again.
        assert_eq!(lag_slack(None, 1.0), 0);
    }

    #[test]
    fn moved_messages_have_drained_once_as_many_left_as_the_queue_held() {
        // 5 moved in and counted (counter 5, depth 5 at the mark); 3 fresh behind them.
        let mark = Some((5, 5));
        assert!(!moved_messages_drained(mark, Some(8), Some(8)));
        assert!(!moved_messages_drained(mark, Some(8), Some(4)), "4 of the 5 taken");
        assert!(moved_messages_drained(mark, Some(8), Some(3)));
        // 3.10: the move's publishes never counted (counter 0 at the mark, depth 5).
        let uncounted = Some((0, 5));
        assert!(!moved_messages_drained(uncounted, Some(3), Some(8)));
        assert!(moved_messages_drained(uncounted, Some(3), Some(3)));
        // A counter trailing the depth by 20 while publishing goes on: the lag cancels out.
        let trailing = Some((100, 25));
        assert!(!moved_messages_drained(trailing, Some(150), Some(60)), "15 left of 25");
        assert!(moved_messages_drained(trailing, Some(150), Some(50)));
        // Not read yet: unknown.
        assert!(!moved_messages_drained(None, Some(8), Some(3)));
    }
}
