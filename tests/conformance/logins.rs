//! The login throttle's failures (`auth::throttle`), kept in the database so that a restart
//! grants no fresh burst of guesses and replicas throttle together.

use std::net::IpAddr;
use std::time::Duration;

use warren::auth::{self, FREE_FAILURES, WINDOW};
use warren::storage::Store;

crate::conformance!(
    logins_are_throttled_per_user_and_per_address,
    a_good_login_clears_the_name_but_not_the_address,
    concurrent_guesses_get_exactly_the_free_ones_through,
    failures_leave_the_window,
);

const MIN: Duration = Duration::from_secs(60);
const T0: i64 = 1_800_000_000_000;

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

async fn logins_are_throttled_per_user_and_per_address(store: &Store) {
    let (attacker, other) = (ip("192.0.2.1"), ip("192.0.2.2"));
    // Five wrong passwords for alice from one address.
    for i in 0..FREE_FAILURES as i64 {
        auth::begin_login(store, attacker, "alice", T0 + i).await.unwrap().expect("free");
    }
    let at = T0 + 4;
    assert_eq!(auth::begin_login(store, attacker, "bob", at).await.unwrap(), Err(MIN), "the address is throttled");
    assert_eq!(auth::begin_login(store, other, "alice", at).await.unwrap(), Err(MIN), "the user name is throttled");
    // Refused attempts are not counted: a minute after the fifth, one more try each.
    let later = at + 60_000;
    let bob = auth::begin_login(store, other, "bob", later).await.unwrap().expect("another name and address");
    auth::login_succeeded(store, other, "bob", bob).await.unwrap();
    auth::begin_login(store, attacker, "carol", later).await.unwrap().expect("the minute has passed");
    assert_eq!(
        auth::begin_login(store, attacker, "dave", later).await.unwrap(),
        Err(2 * MIN),
        "the sixth failure doubles the wait"
    );
}

async fn a_good_login_clears_the_name_but_not_the_address(store: &Store) {
    let peer = ip("2001:db8:1:2::1");
    let same_64 = ip("2001:db8:1:2:ffff::9");
    for name in ["a", "b", "c", "d"] {
        auth::begin_login(store, peer, name, T0).await.unwrap().unwrap();
    }
    // The fifth from the same /64 is the address's fifth: free, and then it is throttled.
    auth::begin_login(store, same_64, "mine", T0).await.unwrap().unwrap();
    assert_eq!(auth::begin_login(store, peer, "mine", T0).await.unwrap(), Err(MIN));

    let fresh = ip("192.0.2.7");
    for name in ["a", "b", "c", "d"] {
        auth::begin_login(store, fresh, name, T0).await.unwrap().unwrap();
    }
    let mine = auth::begin_login(store, fresh, "e", T0).await.unwrap().unwrap();
    auth::login_succeeded(store, fresh, "e", mine).await.unwrap();
    // The good login took back its own count on the address, not the four before it: one more
    // failure is free, the next is refused.
    auth::begin_login(store, fresh, "f", T0).await.unwrap().unwrap();
    assert_eq!(auth::begin_login(store, fresh, "g", T0).await.unwrap(), Err(MIN));
    // And the name it logged in with starts clean.
    let other = ip("192.0.2.8");
    for _ in 0..FREE_FAILURES - 1 {
        auth::begin_login(store, other, "e", T0).await.unwrap().unwrap();
    }
    auth::begin_login(store, other, "e", T0).await.unwrap().expect("the fifth is still free");
}

/// Twenty guesses at once, as from replicas sharing the database: exactly the five free ones
/// get through, because each attempt's check and count are one step.
async fn concurrent_guesses_get_exactly_the_free_ones_through(store: &Store) {
    let peer = ip("192.0.2.9");
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..20 {
        let store = store.clone();
        tasks.spawn(async move { auth::begin_login(&store, peer, "alice", T0).await.unwrap().is_ok() });
    }
    let mut through = 0;
    while let Some(ok) = tasks.join_next().await {
        through += usize::from(ok.unwrap());
    }
    assert_eq!(through, FREE_FAILURES);
}

async fn failures_leave_the_window(store: &Store) {
    let peer = ip("192.0.2.10");
    for _ in 0..FREE_FAILURES - 1 {
        auth::begin_login(store, peer, "alice", T0).await.unwrap().unwrap();
    }
    let window = WINDOW.as_millis() as i64;
    let last_moment = T0 + window - 1;
    auth::begin_login(store, peer, "alice", last_moment).await.unwrap().expect("the fifth is free");
    assert_eq!(auth::begin_login(store, peer, "alice", last_moment).await.unwrap(), Err(MIN), "five in the window");
    // A millisecond later the first four have left it: one failure counts.
    auth::begin_login(store, peer, "alice", T0 + window).await.unwrap().expect("four left the window");
}
