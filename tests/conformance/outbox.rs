//! Claims on the notification outbox (`storage::Alerts::claim_outbox`, issue 33, must-have 3):
//! several processes on one database deliver each row once, a channel by one of them at a time
//! and oldest first, a dead claimer's row is taken over once its claim expires, and a claimer
//! that was paused past its claim cannot finish the row afterwards.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use warren::storage::alerts::NewOutboxRow;
use warren::storage::Store;

crate::conformance!(
    of_ten_claimers_at_once_exactly_one_gets_the_row,
    claimers_draining_channels_together_deliver_each_row_once_in_order,
    a_channel_is_claimed_by_one_claimer_at_a_time_oldest_first_when_due,
    an_expired_claim_is_taken_over_and_a_released_one_at_once,
    the_finishing_writes_of_a_claimer_whose_claim_was_taken_over_do_nothing,
);

const LONG: Duration = Duration::from_secs(60);

/// Per channel, each claim as it was made: the row's id and its claimer.
type ClaimsMade = Arc<Mutex<BTreeMap<String, Vec<(i64, String)>>>>;
/// Due by any time a test passes: the rows it writes are due at once.
const ANY_TIME: i64 = i64::MAX;

async fn queue(store: &Store, channel: &str, notifications: impl IntoIterator<Item = String>, due: i64) -> Vec<i64> {
    let mut tx = store.begin().await.unwrap();
    for notification in notifications {
        tx.insert_outbox(NewOutboxRow {
            channel_id: channel,
            channel_name: channel,
            kind: "firing",
            rule_id: "r",
            alert_key: "{\"broker\":\"b\"}",
            notification: &notification,
            next_attempt_at: due,
            created_at: 1_700_000_000,
        })
        .await
        .unwrap();
    }
    tx.commit().await.unwrap();
    let rows = store.outbox().await.unwrap();
    rows.iter().filter(|r| r.channel_id == channel).map(|r| r.id).collect()
}

/// Finishes a delivered row as the dispatcher does: deleted, in a transaction with its log row,
/// if `claimer` still claims it. Whether it did.
async fn finish(store: &Store, id: i64, claimer: &str) -> bool {
    let mut tx = store.begin().await.unwrap();
    let finished = tx.delete_claimed_outbox(id, claimer).await.unwrap();
    if finished {
        tx.commit().await.unwrap();
    }
    finished
}

async fn of_ten_claimers_at_once_exactly_one_gets_the_row(store: &Store) {
    let ids = queue(store, "pager", (1..=3).map(|n| format!("{{\"n\":{n}}}")), 0).await;
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..10 {
        let store = store.clone();
        tasks.spawn(async move {
            let claimer = format!("r{i}");
            store.claim_outbox("pager", &claimer, ANY_TIME, LONG).await.unwrap().map(|row| (claimer, row))
        });
    }
    let mut winners = Vec::new();
    while let Some(claimed) = tasks.join_next().await {
        winners.extend(claimed.unwrap());
    }
    assert_eq!(winners.len(), 1, "{winners:?}");
    let (claimer, row) = &winners[0];
    assert_eq!(row.id, ids[0], "the oldest row");
    assert_eq!(row.claimed_by.as_deref(), Some(claimer.as_str()));
    let stored = store.oldest_in_outbox("pager").await.unwrap().unwrap();
    assert_eq!((stored.claimed_by, stored.claim_expires_at), (row.claimed_by.clone(), row.claim_expires_at));
}

/// Four processes deliver three channels' rows as fast as they can claim them: every row is
/// delivered once, and each channel's in the order of its rows.
async fn claimers_draining_channels_together_deliver_each_row_once_in_order(store: &Store) {
    let channels = ["a", "b", "c"];
    let mut queued = BTreeMap::new();
    for channel in channels {
        queued.insert(channel, queue(store, channel, (0..15).map(|n| format!("{{\"n\":{n}}}")), 0).await);
    }
    // Each claim as it was made, per channel. A claim is pushed before its row is finished, and
    // the next row of the channel can only be claimed once this one is: the order pushed is
    // the order claimed.
    let claims: ClaimsMade = Arc::default();
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..4 {
        let (store, claims) = (store.clone(), claims.clone());
        tasks.spawn(async move {
            let claimer = format!("replica {i}");
            let mut idle_rounds = 0;
            while idle_rounds < 20 {
                let mut claimed_any = false;
                for channel in channels {
                    let Some(row) = store.claim_outbox(channel, &claimer, ANY_TIME, LONG).await.unwrap() else {
                        continue;
                    };
                    claims.lock().unwrap().entry(channel.to_string()).or_default().push((row.id, claimer.clone()));
                    tokio::task::yield_now().await;
                    assert!(finish(&store, row.id, &claimer).await, "{claimer} lost its claim on {}", row.id);
                    claimed_any = true;
                }
                idle_rounds = if claimed_any { 0 } else { idle_rounds + 1 };
                if !claimed_any {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            }
        });
    }
    while let Some(done) = tasks.join_next().await {
        done.unwrap();
    }
    assert!(store.outbox().await.unwrap().is_empty(), "every row delivered");
    let claims = claims.lock().unwrap();
    for channel in channels {
        let ids: Vec<i64> = claims[channel].iter().map(|(id, _)| *id).collect();
        assert_eq!(ids, queued[channel], "channel {channel}: each row once, oldest first: {:?}", claims[channel]);
    }
    let claimers: std::collections::BTreeSet<&str> =
        claims.values().flatten().map(|(_, claimer)| claimer.as_str()).collect();
    eprintln!("rows delivered by {claimers:?}");
}

async fn a_channel_is_claimed_by_one_claimer_at_a_time_oldest_first_when_due(store: &Store) {
    let now = store.database_now().await.unwrap();
    let pager = queue(store, "pager", ["{\"n\":1}".to_string(), "{\"n\":2}".to_string()], now).await;
    let hook = queue(store, "hook", ["{\"n\":3}".to_string()], now + 3_600_000).await;

    let first = store.claim_outbox("pager", "a", now, LONG).await.unwrap().expect("due");
    assert_eq!(first.id, pager[0]);
    assert!(first.claim_expires_at.unwrap() >= now + 60_000, "{first:?}");
    // While a holds a claim on the channel, b gets nothing of it, not even the next row.
    assert_eq!(store.claim_outbox("pager", "b", now, LONG).await.unwrap(), None);
    // A row not due yet is not claimed; another channel is another matter.
    assert_eq!(store.claim_outbox("hook", "b", now, LONG).await.unwrap(), None, "not due");
    let later = store.claim_outbox("hook", "b", now + 3_600_000, LONG).await.unwrap().expect("due then");
    assert_eq!(later.id, hook[0]);
    // a claiming again renews its claim on the same row (a claim is per row, not per call).
    let again = store.claim_outbox("pager", "a", now, LONG).await.unwrap().expect("a's own");
    assert_eq!(again.id, first.id);
    assert!(again.claim_expires_at >= first.claim_expires_at);

    // Once a finished the row, the channel is free: b takes the next one.
    assert!(finish(store, first.id, "a").await);
    let second = store.claim_outbox("pager", "b", now, LONG).await.unwrap().expect("free again");
    assert_eq!((second.id, second.claimed_by.as_deref()), (pager[1], Some("b")));
    assert_eq!(store.claim_outbox("pager", "a", now, LONG).await.unwrap(), None, "b's now");
}

async fn an_expired_claim_is_taken_over_and_a_released_one_at_once(store: &Store) {
    let ids = queue(store, "pager", ["{\"n\":1}".to_string(), "{\"n\":2}".to_string()], 0).await;
    let short = Duration::from_millis(300);
    let a = store.claim_outbox("pager", "a", ANY_TIME, short).await.unwrap().unwrap();
    assert_eq!(store.claim_outbox("pager", "b", ANY_TIME, LONG).await.unwrap(), None, "a's claim holds");
    // a died in the middle of its attempt: once its claim expired, b delivers the row again.
    tokio::time::sleep(short + Duration::from_millis(200)).await;
    let b = store.claim_outbox("pager", "b", ANY_TIME, LONG).await.unwrap().expect("expired");
    assert_eq!((b.id, b.claimed_by.as_deref(), b.attempts), (a.id, Some("b"), 0));
    assert!(b.claim_expires_at > a.claim_expires_at);

    // A claim let go (an attempt abandoned at a stop) is free at once; a release by who does not
    // hold it changes nothing.
    store.release_outbox_claim(b.id, "a").await.unwrap();
    assert_eq!(store.claim_outbox("pager", "c", ANY_TIME, LONG).await.unwrap(), None, "still b's");
    store.release_outbox_claim(b.id, "b").await.unwrap();
    let c = store.claim_outbox("pager", "c", ANY_TIME, LONG).await.unwrap().expect("released");
    assert_eq!((c.id, c.claimed_by.as_deref()), (ids[0], Some("c")));
}

async fn the_finishing_writes_of_a_claimer_whose_claim_was_taken_over_do_nothing(store: &Store) {
    let ids = queue(store, "pager", ["{\"n\":1}".to_string()], 0).await;
    let short = Duration::from_millis(300);
    let a = store.claim_outbox("pager", "a", ANY_TIME, short).await.unwrap().unwrap();
    tokio::time::sleep(short + Duration::from_millis(200)).await;
    let b = store.claim_outbox("pager", "b", ANY_TIME, LONG).await.unwrap().expect("expired");
    assert_eq!(b.id, a.id);

    // a was paused past its claim and resumes: neither its delivery nor its retry is written.
    assert!(!finish(store, a.id, "a").await, "a's delete after the takeover");
    let mut tx = store.begin().await.unwrap();
    assert!(!tx.retry_outbox(a.id, "a", 1, 0).await.unwrap(), "a's retry after the takeover");
    tx.commit().await.unwrap();
    let row = store.oldest_in_outbox("pager").await.unwrap().expect("still there, b's");
    assert_eq!((row.id, row.attempts, row.claimed_by.as_deref()), (ids[0], 0, Some("b")));

    // b's do.
    let mut tx = store.begin().await.unwrap();
    assert!(tx.retry_outbox(b.id, "b", 1, 0).await.unwrap());
    tx.commit().await.unwrap();
    let row = store.oldest_in_outbox("pager").await.unwrap().unwrap();
    assert_eq!((row.attempts, row.claimed_by), (1, None), "retried and free for any process");
    // And once finished, a late finish by the old claimer still does nothing.
    let b = store.claim_outbox("pager", "b", ANY_TIME, LONG).await.unwrap().unwrap();
    assert!(finish(store, b.id, "b").await);
    assert!(!finish(store, b.id, "a").await);
    assert!(store.outbox().await.unwrap().is_empty());
}
