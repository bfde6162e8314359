//! The failed logins the login throttle counts (`login_failures`), per key. What a key is and
//! how long a key with these failures waits is `auth::throttle`'s; this part keeps the failures
//! and makes an attempt's check and its count one step, on every replica sharing the database.

use std::time::Duration;

use async_trait::async_trait;

use super::Result;

/// The throttle's decision on one attempt, given the recent failures (unix milliseconds, oldest
/// first) of each of its keys, in the order of the keys: `Err` is how long to wait.
pub type Decide<'a> = &'a (dyn Fn(&[Vec<i64>]) -> std::result::Result<(), Duration> + Send + Sync);

#[async_trait]
pub trait Logins {
    /// In one transaction that no other attempt interleaves with: forgets failures before
    /// `since` (of every key), reads those of `keys`, and asks `decide`; when it lets the attempt
    /// through, counts a failure at `now` on each key until the login proves right
    /// ([`Logins::login_succeeded`]). Counting before the password is checked means concurrent
    /// attempts cannot all pass the check while their passwords are being hashed.
    async fn attempt_login(
        &self,
        keys: &[&str],
        now: i64,
        since: i64,
        decide: Decide<'_>,
    ) -> Result<std::result::Result<(), Duration>>;
    /// After a right password: forgets every failure of `clear`, and takes back the one
    /// [`Logins::attempt_login`] counted at `counted_at` on `take_back`.
    async fn login_succeeded(&self, clear: &str, take_back: &str, counted_at: i64) -> Result<()>;
}
