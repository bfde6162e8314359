//! Login throttling against password guessing, per user name and per client address.
//!
//! The policy: failures count per key over a sliding [`WINDOW`] of 15 minutes. The first
//! [`FREE_FAILURES`] (5) cost nothing; from the fifth on, the key is refused for a delay after its
//! latest failure that doubles with each further failure: 1, 2, 4, 8, then at most 15 minutes.
//! In the long run that is about five guesses per 15 minutes per user name and per address,
//! hopeless against a password of twelve characters or more. A successful login clears its user
//! name's count (not the address's: one good account must not buy unlimited guesses at others).
//! IPv6 clients are keyed by their /64, which one host usually has to itself.
//!
//! The state is in memory: it resets when warren restarts, which grants at most one fresh burst
//! of five guesses per restart; keeping it in SQLite would put a write on every failed login for
//! little more. Memory is bounded: at most [`MAX_KEYS`] keys, stale ones dropped first.

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::time::{Duration, Instant};

/// Failures that cost nothing within the window.
pub const FREE_FAILURES: usize = 5;
/// How long a failure counts.
pub const WINDOW: Duration = Duration::from_secs(15 * 60);
/// The refusal after the fifth failure; it doubles with each further one.
pub const FIRST_DELAY: Duration = Duration::from_secs(60);
/// The longest refusal.
pub const MAX_DELAY: Duration = Duration::from_secs(15 * 60);
/// Keys kept at most; beyond that the stalest are forgotten.
const MAX_KEYS: usize = 100_000;
/// Failures kept per key: enough to reach the longest delay.
const KEPT_FAILURES: usize = 16;

/// The throttle's state; the web layer keeps one behind a mutex.
#[derive(Debug, Default)]
pub struct LoginThrottle {
    /// Recent failures per key, oldest first.
    failures: HashMap<String, VecDeque<Instant>>,
}

/// How long a key with `failures` recent failures is refused after the latest one.
fn delay(failures: usize) -> Option<Duration> {
    let beyond = failures.checked_sub(FREE_FAILURES)?;
    let doubled = FIRST_DELAY.saturating_mul(1u32 << beyond.min(16));
    Some(doubled.min(MAX_DELAY))
}

fn user_key(name: &str) -> String {
    // A name longer than any valid one is hostile; its hash bounds the memory it takes.
    if name.len() > 64 {
        format!("user#{}", super::secret_hash(name))
    } else {
        format!("user:{name}")
    }
}

/// Where a login comes from, as the throttle counts it and the audit log aggregates it: the IPv4
/// address, or the /64 of an IPv6 one.
pub fn source(peer: IpAddr) -> String {
    match peer.to_canonical() {
        IpAddr::V4(v4) => v4.to_string(),
        IpAddr::V6(v6) => {
            let s = v6.segments();
            format!("{:x}:{:x}:{:x}:{:x}::/64", s[0], s[1], s[2], s[3])
        }
    }
}

fn addr_key(peer: IpAddr) -> String {
    format!("addr:{}", source(peer))
}

impl LoginThrottle {
    pub fn new() -> Self {
        Self::default()
    }

    /// `Ok` if `key` may try now, else how long it must wait.
    pub fn check(&self, key: &str, now: Instant) -> Result<(), Duration> {
        let Some(failures) = self.failures.get(key) else { return Ok(()) };
        let recent: Vec<&Instant> = failures.iter().filter(|at| now.saturating_duration_since(**at) < WINDOW).collect();
        let (Some(delay), Some(latest)) = (delay(recent.len()), recent.last()) else { return Ok(()) };
        let wait = (**latest + delay).saturating_duration_since(now);
        if wait.is_zero() {
            Ok(())
        } else {
            Err(wait)
        }
    }

    pub fn record_failure(&mut self, key: &str, now: Instant) {
        if !self.failures.contains_key(key) && self.failures.len() >= MAX_KEYS {
            self.make_room(now);
        }
        let failures = self.failures.entry(key.to_string()).or_default();
        failures.retain(|at| now.saturating_duration_since(*at) < WINDOW);
        if failures.len() == KEPT_FAILURES {
            failures.pop_front();
        }
        failures.push_back(now);
    }

    pub fn record_success(&mut self, key: &str) {
        self.failures.remove(key);
    }

    /// Before checking a password: refuses (with the longer wait) if the user name or the
    /// address is throttled, else counts the attempt as failed on both until
    /// [`LoginThrottle::login_succeeded`] says otherwise. Counting first means concurrent attempts
    /// cannot all slip past the check while their passwords are being hashed.
    pub fn begin_login(&mut self, peer: IpAddr, user: &str, now: Instant) -> Result<(), Duration> {
        let (user, addr) = (user_key(user), addr_key(peer));
        match (self.check(&user, now), self.check(&addr, now)) {
            (Ok(()), Ok(())) => {
                self.record_failure(&user, now);
                self.record_failure(&addr, now);
                Ok(())
            }
            (Err(a), Err(b)) => Err(a.max(b)),
            (Err(wait), _) | (_, Err(wait)) => Err(wait),
        }
    }

    /// After a correct password: clears the user name's failures and takes back the attempt
    /// [`LoginThrottle::begin_login`] counted against the address.
    pub fn login_succeeded(&mut self, peer: IpAddr, user: &str) {
        self.record_success(&user_key(user));
        let addr = addr_key(peer);
        if let Some(failures) = self.failures.get_mut(&addr) {
            failures.pop_back();
            if failures.is_empty() {
                self.failures.remove(&addr);
            }
        }
    }

    /// Drops keys without a recent failure; if that is not enough, the one that failed longest ago.
    fn make_room(&mut self, now: Instant) {
        self.failures
            .retain(|_, failures| failures.back().is_some_and(|at| now.saturating_duration_since(*at) < WINDOW));
        if self.failures.len() >= MAX_KEYS {
            let stalest =
                self.failures.iter().min_by_key(|(_, failures)| failures.back().copied()).map(|(k, _)| k.clone());
            if let Some(key) = stalest {
                self.failures.remove(&key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIN: Duration = Duration::from_secs(60);

    #[test]
    fn the_delay_schedule() {
        let minutes: Vec<Option<u64>> = (0..12).map(|n| delay(n).map(|d| d.as_secs() / 60)).collect();
        assert_eq!(
            minutes,
            [None, None, None, None, None, Some(1), Some(2), Some(4), Some(8), Some(15), Some(15), Some(15)]
        );
        assert_eq!(delay(1000), Some(MAX_DELAY));
    }

    #[test]
    fn five_failures_are_free_then_delays_grow() {
        let mut throttle = LoginThrottle::new();
        let t0 = Instant::now();
        for i in 0..4 {
            throttle.record_failure("k", t0 + Duration::from_secs(i));
            assert_eq!(throttle.check("k", t0 + Duration::from_secs(i)), Ok(()));
        }
        let fifth = t0 + Duration::from_secs(4);
        throttle.record_failure("k", fifth);
        assert_eq!(throttle.check("k", fifth), Err(MIN));
        assert_eq!(throttle.check("k", fifth + Duration::from_secs(59)), Err(Duration::from_secs(1)));
        assert_eq!(throttle.check("k", fifth + MIN), Ok(()));

        // Each further failure doubles the wait.
        let mut at = fifth + MIN;
        for wait_minutes in [2, 4, 8] {
            throttle.record_failure("k", at);
            assert_eq!(throttle.check("k", at), Err(MIN * wait_minutes));
            at += MIN * wait_minutes;
            assert_eq!(throttle.check("k", at), Ok(()));
        }
        // Failures older than the window no longer count: at `at` (15 min after the fifth) the
        // first five have left it, three remain, so the next one is free.
        throttle.record_failure("k", at);
        assert_eq!(throttle.check("k", at), Ok(()));
    }

    #[test]
    fn failures_far_apart_never_throttle() {
        let mut throttle = LoginThrottle::new();
        let t0 = Instant::now();
        for i in 0..50 {
            let at = t0 + Duration::from_secs(4 * 60) * i;
            assert_eq!(throttle.check("k", at), Ok(()), "attempt {i}");
            throttle.record_failure("k", at);
        }
    }

    #[test]
    fn the_longest_wait_is_fifteen_minutes() {
        let mut throttle = LoginThrottle::new();
        let t0 = Instant::now();
        for i in 0..30 {
            throttle.record_failure("k", t0 + Duration::from_millis(i));
        }
        let latest = t0 + Duration::from_millis(29);
        assert_eq!(throttle.check("k", latest), Err(MAX_DELAY));
        assert_eq!(throttle.check("k", latest + MAX_DELAY), Ok(()));
    }

    #[test]
    fn success_clears_a_key_and_keys_are_separate() {
        let mut throttle = LoginThrottle::new();
        let now = Instant::now();
        for _ in 0..5 {
            throttle.record_failure("a", now);
        }
        assert!(throttle.check("a", now).is_err());
        assert_eq!(throttle.check("b", now), Ok(()));
        throttle.record_success("a");
        assert_eq!(throttle.check("a", now), Ok(()));
    }

    #[test]
    fn logins_are_throttled_per_user_and_per_address() {
        let mut throttle = LoginThrottle::new();
        let now = Instant::now();
        let attacker: IpAddr = "192.0.2.1".parse().unwrap();
        let other: IpAddr = "192.0.2.2".parse().unwrap();
        // Five wrong passwords for alice from one address.
        for _ in 0..5 {
            throttle.begin_login(attacker, "alice", now).unwrap();
        }
        assert_eq!(throttle.begin_login(attacker, "bob", now), Err(MIN), "the address is throttled");
        assert_eq!(throttle.begin_login(other, "alice", now), Err(MIN), "the user name is throttled");
        throttle.begin_login(other, "bob", now).unwrap();
        throttle.login_succeeded(other, "bob");
        assert_eq!(throttle.check("addr:192.0.2.2", now), Ok(()));
        assert!(!throttle.failures.contains_key("addr:192.0.2.2"));
    }

    #[test]
    fn a_good_login_does_not_clear_the_address() {
        let mut throttle = LoginThrottle::new();
        let now = Instant::now();
        let peer: IpAddr = "192.0.2.1".parse().unwrap();
        for name in ["a", "b", "c", "d"] {
            throttle.begin_login(peer, name, now).unwrap();
        }
        throttle.begin_login(peer, "mine", now).unwrap();
        throttle.login_succeeded(peer, "mine");
        assert_eq!(throttle.check("user:mine", now), Ok(()));
        // Four failures stay on the address: one more and it is throttled.
        throttle.begin_login(peer, "e", now).unwrap();
        assert_eq!(throttle.begin_login(peer, "f", now), Err(MIN));
    }

    #[test]
    fn ipv6_clients_share_their_slash_64() {
        let a: IpAddr = "2001:db8:1:2::1".parse().unwrap();
        let b: IpAddr = "2001:db8:1:2:ffff::9".parse().unwrap();
        let c: IpAddr = "2001:db8:1:3::1".parse().unwrap();
        assert_eq!(addr_key(a), addr_key(b));
        assert_ne!(addr_key(a), addr_key(c));
        assert_eq!(addr_key("::ffff:192.0.2.1".parse().unwrap()), "addr:192.0.2.1");
    }

    #[test]
    fn hostile_names_take_bounded_memory() {
        let long = "x".repeat(1_000_000);
        assert_eq!(user_key(&long).len(), "user#".len() + 64);
        assert_eq!(user_key("alice"), "user:alice");
    }

    #[test]
    fn memory_is_bounded() {
        let mut throttle = LoginThrottle::new();
        let t0 = Instant::now();
        for i in 0..MAX_KEYS {
            throttle.failures.insert(format!("k{i}"), VecDeque::from([t0]));
        }
        // Everything is recent: the stalest goes.
        throttle.failures.insert("old".into(), VecDeque::from([t0 - Duration::from_secs(1)]));
        throttle.failures.remove("k0");
        throttle.record_failure("new", t0);
        assert_eq!(throttle.failures.len(), MAX_KEYS);
        assert!(!throttle.failures.contains_key("old"));
        // Later, stale keys are dropped all at once.
        throttle.record_failure("newer", t0 + WINDOW);
        assert_eq!(throttle.failures.len(), 1);
    }
}
