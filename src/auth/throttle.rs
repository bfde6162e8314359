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
//! The failures are kept in the database (`storage::Logins`), so that a restart does not grant
//! a fresh burst of guesses and replicas sharing one database throttle together (issue 33,
//! must-have 2); this module is the policy and the keys. Each attempt forgets the failures that
//! left the window, which bounds what is kept to the attempts of the last 15 minutes, each of
//! which cost a password hash.

use std::net::IpAddr;
use std::time::Duration;

use crate::storage::Store;

/// Failures that cost nothing within the window.
pub const FREE_FAILURES: usize = 5;
/// How long a failure counts.
pub const WINDOW: Duration = Duration::from_secs(15 * 60);
/// The refusal after the fifth failure; it doubles with each further one.
pub const FIRST_DELAY: Duration = Duration::from_secs(60);
/// The longest refusal.
pub const MAX_DELAY: Duration = Duration::from_secs(15 * 60);

/// How long a key with `failures` recent failures is refused after the latest one.
fn delay(failures: usize) -> Option<Duration> {
    let beyond = failures.checked_sub(FREE_FAILURES)?;
    let doubled = FIRST_DELAY.saturating_mul(1u32 << beyond.min(16));
    Some(doubled.min(MAX_DELAY))
}

/// `Ok` if a key with `failures` (unix milliseconds, oldest first) may try at `now`, else how
/// long it must wait.
pub fn check(failures: &[i64], now: i64) -> Result<(), Duration> {
    let window = WINDOW.as_millis() as i64;
    let recent: Vec<i64> = failures.iter().copied().filter(|at| now.saturating_sub(*at) < window).collect();
    let (Some(delay), Some(latest)) = (delay(recent.len()), recent.last()) else { return Ok(()) };
    let until = latest.saturating_add(delay.as_millis() as i64);
    if until <= now {
        Ok(())
    } else {
        Err(Duration::from_millis((until - now) as u64))
    }
}

fn user_key(name: &str) -> String {
    // A name longer than any valid one is hostile; its hash bounds what it takes to keep.
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

/// An attempt let through by [`begin_login`]: what [`login_succeeded`] takes back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Counted {
    at: i64,
}

/// Before checking a password at `now` (unix milliseconds): refuses with the longer wait if the
/// user name or the address is throttled, else counts the attempt as failed on both until
/// [`login_succeeded`] says otherwise, in one step no other attempt on any replica interleaves
/// with.
pub async fn begin_login(
    store: &Store,
    peer: IpAddr,
    user: &str,
    now: i64,
) -> Result<Result<Counted, Duration>, sqlx::Error> {
    let (user, addr) = (user_key(user), addr_key(peer));
    let decide = |failures: &[Vec<i64>]| {
        let waits = failures.iter().filter_map(|f| check(f, now).err());
        waits.max().map_or(Ok(()), Err)
    };
    let since = now.saturating_sub(WINDOW.as_millis() as i64);
    let decided = store.attempt_login(&[&user, &addr], now, since, &decide).await?;
    Ok(decided.map(|()| Counted { at: now }))
}

/// After a correct password: clears the user name's failures and takes back the attempt
/// [`begin_login`] counted against the address.
pub async fn login_succeeded(store: &Store, peer: IpAddr, user: &str, counted: Counted) -> Result<(), sqlx::Error> {
    store.login_succeeded(&user_key(user), &addr_key(peer), counted.at).await
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIN: Duration = Duration::from_secs(60);
    const MIN_MS: i64 = 60_000;

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
        let mut failures = Vec::new();
        let t0 = 1_000_000_000_000;
        for i in 0..4 {
            failures.push(t0 + i * 1000);
            assert_eq!(check(&failures, t0 + i * 1000), Ok(()));
        }
        let fifth = t0 + 4000;
        failures.push(fifth);
        assert_eq!(check(&failures, fifth), Err(MIN));
        assert_eq!(check(&failures, fifth + 59_000), Err(Duration::from_secs(1)));
        assert_eq!(check(&failures, fifth + MIN_MS), Ok(()));

        // Each further failure doubles the wait.
        let mut at = fifth + MIN_MS;
        for wait_minutes in [2, 4, 8] {
            failures.push(at);
            assert_eq!(check(&failures, at), Err(MIN * wait_minutes as u32));
            at += MIN_MS * wait_minutes;
            assert_eq!(check(&failures, at), Ok(()));
        }
        // Failures older than the window no longer count: at `at` (15 min after the fifth) the
        // first five have left it, three remain, so the next one is free.
        failures.push(at);
        assert_eq!(check(&failures, at), Ok(()));
    }

    #[test]
    fn failures_far_apart_never_throttle() {
        let mut failures = Vec::new();
        for i in 0..50 {
            let at = i * 4 * MIN_MS;
            assert_eq!(check(&failures, at), Ok(()), "attempt {i}");
            failures.push(at);
        }
    }

    #[test]
    fn the_longest_wait_is_fifteen_minutes() {
        let failures: Vec<i64> = (0..30).collect();
        assert_eq!(check(&failures, 29), Err(MAX_DELAY));
        assert_eq!(check(&failures, 29 + MAX_DELAY.as_millis() as i64), Ok(()));
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
    fn hostile_names_take_bounded_room() {
        let long = "x".repeat(1_000_000);
        assert_eq!(user_key(&long).len(), "user#".len() + 64);
        assert_eq!(user_key("alice"), "user:alice");
    }
}
