//! The audit log.

use warren::audit::{self, Entry, Kind, Page, HIDDEN, NAMES_PER_SOURCE, OTHER_NAMES, OTHER_SOURCES, ROWS_PER_MINUTE};
use warren::storage::Store;

crate::conformance!(
    failed_logins_share_a_row_per_source_name_and_minute,
    many_names_and_many_sources_add_a_bounded_number_of_rows,
    pages_reach_every_entry_of_a_kind_both_ways,
    account_names_can_be_hidden_except_the_callers_own,
    entries_keep_what_was_written,
);

fn newest(kind: Option<Kind>, per_page: i64) -> Page {
    Page { kind, before: None, after: None, per_page }
}

async fn purge(store: &Store, queue: &str) -> i64 {
    let entry =
        Entry { actor: "otto", broker: "b", vhost: "v", queue, action: "purge", request: "{}".into(), run_by: "r-1" };
    audit::start(store, entry).await.unwrap()
}

/// A minute's start, so that a test's attempts all fall in one minute.
const MINUTE: i64 = 1_800_000_000 / 60 * 60;
async fn failed_logins_share_a_row_per_source_name_and_minute(store: &Store) {
    for i in 0..520 {
        audit::login_failed(store, "ada", "192.0.2.7", i >= 5, MINUTE + i % 60).await.unwrap();
    }
    audit::login_failed(store, "ada", "192.0.2.7", true, MINUTE + 60).await.unwrap();
    audit::login_failed(store, "ada", "192.0.2.8", false, MINUTE + 60).await.unwrap();
    let rows = audit::list(store, &newest(None, 100)).await.unwrap().records;
    let counts: Vec<_> = rows
        .iter()
        .map(|r| (r.actor.as_str(), r.source.as_deref(), r.attempts, r.throttled, r.at, r.last_at))
        .collect();
    assert_eq!(
        counts,
        [
            ("ada", Some("192.0.2.8"), 1, 0, MINUTE + 60, Some(MINUTE + 60)),
            ("ada", Some("192.0.2.7"), 1, 1, MINUTE + 60, Some(MINUTE + 60)),
            ("ada", Some("192.0.2.7"), 520, 515, MINUTE, Some(MINUTE + 59)),
        ]
    );
    assert!(rows.iter().all(|r| r.kind == Kind::Login && r.outcome == "failed" && r.action == "login"));
}

async fn many_names_and_many_sources_add_a_bounded_number_of_rows(store: &Store) {
    // One source trying one password against many names.
    for i in 0..520 {
        audit::login_failed(store, &format!("user{i}"), "192.0.2.7", false, MINUTE).await.unwrap();
    }
    let rows = audit::list(store, &newest(None, 500)).await.unwrap().records;
    assert_eq!(rows.len() as i64, NAMES_PER_SOURCE + 1);
    assert_eq!((rows[0].actor.as_str(), rows[0].attempts), (OTHER_NAMES, 520 - NAMES_PER_SOURCE));
    assert_eq!(rows.last().unwrap().actor, "user0");

    // Many sources: the minute's rows are capped, the rest share one row.
    for i in 0..200 {
        audit::login_failed(store, "ada", &format!("198.51.100.{i}"), false, MINUTE).await.unwrap();
    }
    let rows = audit::list(store, &newest(None, 500)).await.unwrap().records;
    assert_eq!(rows.len() as i64, ROWS_PER_MINUTE + 1);
    let overflow = &rows[0];
    assert_eq!((overflow.source.as_deref(), overflow.actor.as_str()), (Some(OTHER_SOURCES), OTHER_NAMES));
    assert_eq!(rows.iter().map(|r| r.attempts).sum::<i64>(), 720);
    // The next minute starts afresh.
    audit::login_failed(store, "ada", "198.51.100.199", false, MINUTE + 60).await.unwrap();
    assert_eq!(
        audit::list(store, &newest(None, 1)).await.unwrap().records[0].source.as_deref(),
        Some("198.51.100.199")
    );
}

async fn pages_reach_every_entry_of_a_kind_both_ways(store: &Store) {
    let mut actions = Vec::new();
    for i in 0..7 {
        actions.push(purge(store, &format!("q{i}")).await);
        audit::account(store, "ada", "user add", &serde_json::json!({"name": format!("u{i}")})).await.unwrap();
        audit::login_succeeded(store, "ada", "192.0.2.7").await.unwrap();
    }
    actions.reverse();

    let mut page = newest(Some(Kind::Action), 3);
    let mut seen = Vec::new();
    let mut pages = Vec::new();
    loop {
        let listing = audit::list(store, &page).await.unwrap();
        assert!(listing.records.iter().all(|r| r.kind == Kind::Action && r.action == "purge"));
        seen.extend(listing.records.iter().map(|r| r.id));
        pages.push(listing.records.iter().map(|r| r.id).collect::<Vec<_>>());
        assert_eq!(listing.newer.is_some(), pages.len() > 1, "page {}", pages.len());
        match listing.older {
            Some(before) => page = Page { before: Some(before), ..page },
            None => break,
        }
    }
    assert_eq!(seen, actions, "every action once, newest first");
    assert_eq!(pages.len(), 3);

    // Back up from the last page: the same pages, still newest first within each.
    let mut page = Page { before: None, after: audit::list(store, &page).await.unwrap().newer, ..page };
    for expected in pages.iter().rev().skip(1) {
        let listing = audit::list(store, &page).await.unwrap();
        assert_eq!(&listing.records.iter().map(|r| r.id).collect::<Vec<_>>(), expected);
        match listing.newer {
            Some(after) => page = Page { after: Some(after), ..page },
            None => break,
        }
    }

    assert_eq!(audit::list(store, &newest(Some(Kind::Account), 100)).await.unwrap().records.len(), 7);
    assert_eq!(audit::list(store, &newest(None, 100)).await.unwrap().records.len(), 21);
    let empty = audit::list(store, &Page { before: Some(1), ..newest(None, 10) }).await.unwrap();
    assert!(empty.records.is_empty() && empty.older.is_none() && empty.newer == Some(0));
}

async fn account_names_can_be_hidden_except_the_callers_own(store: &Store) {
    purge(store, "orders").await;
    audit::account(store, "ada", "token add", &serde_json::json!({"name": "ci", "role": "viewer", "id": 3}))
        .await
        .unwrap();
    audit::login_succeeded(store, "vera", "192.0.2.7").await.unwrap();
    audit::login_failed(store, "mallory", "192.0.2.9", false, MINUTE).await.unwrap();
    let mut rows = audit::list(store, &newest(None, 10)).await.unwrap().records;
    rows.iter_mut().for_each(|r| r.hide_account_names("vera"));
    let actors: Vec<&str> = rows.iter().map(|r| r.actor.as_str()).collect();
    assert_eq!(actors, [HIDDEN, "vera", HIDDEN, HIDDEN]);
    assert_eq!(rows[2].request, serde_json::json!({"name": HIDDEN, "role": "viewer", "id": 3}));
    assert_eq!(rows[0].source.as_deref(), Some("192.0.2.9"), "addresses are not account names");
}

/// What was written reads back the same on both backends, text that is hostile input included.
async fn entries_keep_what_was_written(store: &Store) {
    let queue = "orders.fulfil\u{e9}ment \"dlq\"\n'; drop table audit_log; --";
    let request = serde_json::json!({"filter": "a%_\\b", "ids": ["\u{1F407}", ""], "n": 12345678901234_i64});
    let entry = Entry {
        actor: "ada",
        broker: "prod",
        vhost: "/",
        queue,
        action: "requeue",
        request: request.to_string(),
        run_by: "r-1",
    };
    let id = audit::start(store, entry).await.unwrap();
    let record = audit::get(store, id).await.unwrap().expect("written");
    assert_eq!(
        (record.kind, record.actor.as_str(), record.broker.as_str(), record.vhost.as_str(), record.queue.as_str()),
        (Kind::Action, "ada", "prod", "/", queue)
    );
    assert_eq!((record.action.as_str(), record.outcome.as_str()), ("requeue", "started"));
    assert_eq!(record.request, request);
    assert_eq!((record.moved, record.failed, record.attempts, record.throttled), (0, 0, 1, 0));
    assert_eq!(record.message_ids, serde_json::json!([]));
    assert_eq!((record.detail.as_deref(), record.source.as_deref(), record.last_at), (None, None, None));
    assert!((record.at - chrono::Utc::now().timestamp()).abs() < 60);

    let change = audit::AlertsChange {
        actor: "ada",
        action: "test notification",
        request: serde_json::json!({"channel": "pager"}),
        outcome: "failed",
        detail: "HTTP 500 from https://hooks.example/\u{2603}".into(),
    };
    let id = audit::alerts(store, change).await.unwrap();
    let record = audit::get(store, id).await.unwrap().unwrap();
    assert_eq!((record.kind, record.outcome.as_str()), (Kind::Alerts, "failed"));
    assert_eq!(record.detail.as_deref(), Some("HTTP 500 from https://hooks.example/\u{2603}"));
    assert!(audit::get(store, id + 1000).await.unwrap().is_none());
}
