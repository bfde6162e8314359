//! The cadences chosen from what warren costs the broker: the budget math, pure functions. The
//! record of recent calls and sources they read is `live::BrokerLoad`.
//!
//! Cost proxy: a call's wall-clock duration stands for the broker CPU it cost. PERF.md measured
//! both for the expensive listings (4.4 s wall / 4.1 s CPU, 3.0 / 2.9, 0.8 / 0.9): the broker
//! builds the whole answer before sending the first byte, so the wait is its work. For small
//! calls the wall time also holds network and transfer, so the proxy overstates their cost,
//! which errs on the broker's side.

use std::time::Duration;

/// A poll whose calls took more than this share of the interval stretches the interval.
pub const STRETCH_AT: f64 = 0.5;

/// The stats listing's interval: long enough that its estimated cost per second fits in what
/// the budget leaves after the calls made every poll, never shorter than `min`. Returns the
/// interval and whether the budget (rather than `min`) set it.
pub fn stats_interval(
    stats_cost_secs: f64,
    cheap_cost_per_poll_secs: f64,
    poll_interval: Duration,
    budget: f64,
    min: Duration,
) -> (Duration, bool) {
    let cheap_share = cheap_cost_per_poll_secs / poll_interval.as_secs_f64().max(0.001);
    // When the cheap calls alone use the budget up, the listing still runs, at a tenth of the
    // budget: rates every hour are better than none, and the broker page says why.
    let available = (budget - cheap_share).max(budget * 0.1);
    let by_budget = Duration::from_secs_f64((stats_cost_secs / available).min(86_400.0));
    if by_budget > min {
        (by_budget, true)
    } else {
        (min, false)
    }
}

/// `interval` rounded up to a whole number of polls that is also a whole number of the
/// management API's 5 s stats steps. Listings run on poll ticks and rates need two readings a
/// whole number of steps apart (`CounterWindow::baseline`): 6 s apart at a 2 s poll, no pair of
/// recent readings is, and the rate falls back to a long window that still holds old bursts.
pub fn whole_stats_steps(interval: Duration, poll_interval: Duration) -> Duration {
    let poll = poll_interval.as_secs().max(1);
    let step = crate::metrics::STATS_STEP_SECS as u64;
    let gcd = |mut a: u64, mut b: u64| {
        while b != 0 {
            (a, b) = (b, a % b);
        }
        a
    };
    let grid = poll / gcd(poll, step) * step;
    let steps = (interval.as_secs_f64() / grid as f64).ceil().max(1.0) as u64;
    Duration::from_secs(steps * grid)
}

/// The poll interval in force: the configured one, stretched to twice the time the last poll's
/// calls took when that exceeded half of it (so the broker is busy with warren at most half the
/// time), and doubled during a resource alarm. At most ten times the configured interval.
pub fn poll_interval(base: Duration, last_calls: Duration, alarm: bool) -> (Duration, Option<String>) {
    let mut interval = base;
    let mut why = None;
    if last_calls.as_secs_f64() > base.as_secs_f64() * STRETCH_AT {
        interval = last_calls * 2;
        why = Some(format!(
            "the last poll's calls took {:.1} s, more than half of the {} s interval",
            last_calls.as_secs_f64(),
            base.as_secs()
        ));
    }
    if alarm {
        interval *= 2;
        why = Some(match why {
            Some(w) => format!("{w}; doubled during the resource alarm"),
            None => "doubled during the broker's resource alarm".to_string(),
        });
    }
    (interval.min(base * 10), why)
}

/// Estimated share of one broker core spent on warren: each kind of call's cost over its interval.
pub fn estimated_load(cheap_cost_per_poll_secs: f64, interval: Duration, stats: Option<(f64, Duration)>) -> f64 {
    let cheap = cheap_cost_per_poll_secs / interval.as_secs_f64().max(0.001);
    let stats = stats.map_or(0.0, |(cost, every)| cost / every.as_secs_f64().max(0.001));
    cheap + stats
}

/// The share of `broker_cpu_budget` the client listings may cost. They grow with connections
/// and channels, not queues, and a fifth keeps them from crowding out the queue numbers,
/// which every page and most alerts stand on.
pub const CLIENTS_SHARE: f64 = 0.2;

/// The client listings' interval: their measured cost over their share of the budget, never
/// shorter than `min`, in whole polls (they run on poll ticks). Returns it and whether the
/// budget (rather than `min`) set it.
pub fn clients_interval(cost_secs: f64, poll_interval: Duration, budget: f64, min: Duration) -> (Duration, bool) {
    let by_budget = Duration::from_secs_f64((cost_secs / (budget * CLIENTS_SHARE).max(1e-6)).min(86_400.0));
    let (every, by_budget) = if by_budget > min { (by_budget, true) } else { (min, false) };
    let poll = poll_interval.as_secs_f64().max(0.001);
    let polls = (every.as_secs_f64() / poll - 1e-9).ceil().max(1.0);
    (Duration::from_secs_f64(polls * poll), by_budget)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_listings_are_spaced_by_their_share_of_the_budget() {
        // Cheap (a few connections): the minimum, in whole polls.
        assert_eq!(clients_interval(0.005, S(10), 0.05, S(10)), (S(10), false));
        assert_eq!(clients_interval(0.005, S(4), 0.05, S(10)), (S(12), false));
        // 0.3 s of broker time (thousands of channels) at 5%: a fifth is 1% of a core, so
        // every 30 s, which keeps the listings' load at 0.3 / 30 = 1%.
        let (every, by_budget) = clients_interval(0.3, S(10), 0.05, S(10));
        assert!(by_budget);
        assert_eq!(every, S(30));
        assert!(0.3 / every.as_secs_f64() <= 0.05 * CLIENTS_SHARE + 1e-9);
    }

    #[test]
    fn stats_intervals_are_whole_polls_and_whole_stats_steps() {
        let s = Duration::from_secs;
        assert_eq!(whole_stats_steps(s(6), s(2)), s(10));
        assert_eq!(whole_stats_steps(s(30), s(10)), s(30));
        assert_eq!(whole_stats_steps(Duration::from_secs_f64(257.6), s(10)), s(260));
        assert_eq!(whole_stats_steps(s(9), s(3)), s(15));
        assert_eq!(whole_stats_steps(s(0), s(10)), s(10));
    }

    const S: fn(u64) -> Duration = Duration::from_secs;

    #[test]
    fn cheap_listings_run_at_the_minimum_interval() {
        // 20 ms listing, 10 ms of cheap calls per 10 s poll, 5% budget: far within budget.
        assert_eq!(stats_interval(0.02, 0.01, S(10), 0.05, S(30)), (S(30), false));
    }

    #[test]
    fn expensive_listings_are_spaced_by_the_budget() {
        // PERF.md: 3 s for the stats of 10,000 queues; the scrape (0.16 s) every 10 s leaves
        // 5% - 1.6% = 3.4% of a core, so the listing runs every 3 / 0.034 = 88 s.
        let (every, by_budget) = stats_interval(3.0, 0.16, S(10), 0.05, S(30));
        assert!(by_budget);
        assert!((every.as_secs_f64() - 88.2).abs() < 0.1, "{every:?}");
        // cost / interval stays within what the budget leaves
        assert!(3.0 / every.as_secs_f64() + 0.016 <= 0.05 + 1e-9);
        // A 10% budget gets rates every 36 s.
        assert_eq!(stats_interval(3.0, 0.16, S(10), 0.10, S(30)).0.as_secs(), 35);
    }

    #[test]
    fn cheap_calls_over_budget_still_leave_rates_a_tenth() {
        let (every, by_budget) = stats_interval(1.0, 1.0, S(10), 0.05, S(30));
        assert!(by_budget);
        assert_eq!(every.as_secs(), 200, "1 s / (5% / 10)");
    }

    #[test]
    fn slow_calls_stretch_the_poll_interval() {
        assert_eq!(poll_interval(S(10), Duration::from_millis(4000), false), (S(10), None));
        let (every, why) = poll_interval(S(10), Duration::from_millis(6000), false);
        assert_eq!(every, S(12));
        assert!(why.unwrap().contains("6.0 s"));
        let (every, why) = poll_interval(S(10), Duration::from_millis(100), true);
        assert_eq!(every, S(20));
        assert!(why.unwrap().contains("alarm"));
        assert_eq!(poll_interval(S(10), S(500), true).0, S(100), "at most ten intervals");
    }

    #[test]
    fn load_adds_each_call_over_its_interval() {
        let load = estimated_load(0.2, S(10), Some((3.0, S(60))));
        assert!((load - 0.07).abs() < 1e-9);
        assert_eq!(estimated_load(0.1, S(10), None), 0.01);
    }
}
