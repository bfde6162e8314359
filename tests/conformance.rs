//! The storage interface's conformance suite (issue 33): every test here runs against both
//! backends, SQLite in a temporary file and PostgreSQL in a database of its own on
//! 127.0.0.1:5432, through `warren::storage::Store` and the parts of warren that use it. A
//! behaviour one backend has and the other lacks fails here.
//!
//! The parts behind the interface so far: accounts (users, sessions, tokens) and the audit log.

use std::time::Duration;

use warren::audit::{self, Entry, Kind, Page, HIDDEN, NAMES_PER_SOURCE, OTHER_NAMES, OTHER_SOURCES, ROWS_PER_MINUTE};
use warren::auth::{self, AuthError, Role};
use warren::storage::Store;

const ADMIN_URL: &str = "postgres://postgres@127.0.0.1:5432/postgres";

/// One backend with a fresh database.
struct Backend {
    store: Store,
    _dir: Option<tempfile::TempDir>,
    /// The PostgreSQL database to drop at the end.
    database: Option<String>,
}

impl Backend {
    async fn sqlite() -> Backend {
        let dir = tempfile::tempdir().unwrap();
        let pool = warren::history::open(&dir.path().join("warren.db")).await.unwrap();
        Backend { store: warren::storage::sqlite::store(pool), _dir: Some(dir), database: None }
    }

    /// A database named after the test and this process, so tests run in parallel and a rerun
    /// starts clean. A missing server fails the test: it is part of what CI sets up.
    async fn postgres(test: &str) -> Backend {
        let database = format!("warren_conformance_{test}_{}", std::process::id());
        admin(&format!("drop database if exists {database} with (force)")).await;
        admin(&format!("create database {database}")).await;
        let url = format!("postgres://postgres@127.0.0.1:5432/{database}");
        let pool = warren::storage::postgres::open(&url).await.unwrap_or_else(|e| panic!("{url}: {e}"));
        Backend { store: warren::storage::postgres::store(pool), _dir: None, database: Some(database) }
    }

    async fn finish(self) {
        let Backend { store, database, .. } = self;
        drop(store);
        if let Some(database) = database {
            admin(&format!("drop database if exists {database} with (force)")).await;
        }
    }
}

async fn admin(sql: &str) {
    use sqlx::Connection;
    let mut conn = sqlx::PgConnection::connect(ADMIN_URL).await.unwrap_or_else(|e| {
        panic!("PostgreSQL at {ADMIN_URL} (every machine of this kind has one; .ci/run checks it): {e}")
    });
    sqlx::query(sql).execute(&mut conn).await.unwrap_or_else(|e| panic!("{sql}: {e}"));
}

/// Each test, once per backend: `sqlite::name` and `postgres::name`.
macro_rules! conformance {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test]
                async fn $name() {
                    let backend = super::Backend::sqlite().await;
                    super::$name(&backend.store).await;
                    backend.finish().await;
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test]
                async fn $name() {
                    let backend = super::Backend::postgres(stringify!($name)).await;
                    super::$name(&backend.store).await;
                    backend.finish().await;
                }
            )*
        }
    };
}

conformance!(
    users_and_the_last_admin,
    the_last_admin_holds_against_concurrent_changes,
    sessions_end_by_time_logout_password_and_disabling,
    tokens_are_unique_while_live_and_record_their_use,
    failed_logins_share_a_row_per_source_name_and_minute,
    many_names_and_many_sources_add_a_bounded_number_of_rows,
    pages_reach_every_entry_of_a_kind_both_ways,
    account_names_can_be_hidden_except_the_callers_own,
    entries_keep_what_was_written,
);

const PW: &str = "correct horse battery";

async fn users_and_the_last_admin(store: &Store) {
    assert_eq!(auth::count_users(store).await.unwrap(), 0);
    auth::add_user(store, "root", Role::Admin, PW).await.unwrap();
    auth::add_user(store, "ops", Role::Operator, PW).await.unwrap();
    assert!(matches!(auth::add_user(store, "ops", Role::Viewer, PW).await, Err(AuthError::UserExists(_))));
    let users = auth::list_users(store).await.unwrap();
    let listed: Vec<_> = users.iter().map(|u| (u.name.as_str(), u.role, u.disabled)).collect();
    assert_eq!(listed, [("ops", Role::Operator, false), ("root", Role::Admin, false)], "by name");
    assert!(users.iter().all(|u| (u.created_at - chrono::Utc::now().timestamp()).abs() < 60));

    let user = auth::verify_password(store, "root", PW).await.unwrap().expect("the right password");
    assert_eq!(user, auth::get_user(store, "root").await.unwrap().unwrap());
    assert!(auth::verify_password(store, "root", "wrong password!").await.unwrap().is_none());
    assert!(auth::verify_password(store, "nobody", PW).await.unwrap().is_none());

    // The last enabled admin can be neither removed, demoted nor disabled.
    assert!(matches!(auth::remove_user(store, "root").await, Err(AuthError::LastAdmin(_))));
    assert!(matches!(auth::set_role(store, "root", Role::Viewer).await, Err(AuthError::LastAdmin(_))));
    assert!(matches!(auth::set_disabled(store, "root", true).await, Err(AuthError::LastAdmin(_))));
    assert!(matches!(auth::remove_user(store, "nobody").await, Err(AuthError::NoSuchUser(_))));
    assert!(matches!(auth::set_role(store, "nobody", Role::Admin).await, Err(AuthError::NoSuchUser(_))));
    // Promoting the operator lets the first admin go.
    auth::set_role(store, "ops", Role::Admin).await.unwrap();
    auth::set_role(store, "root", Role::Viewer).await.unwrap();
    assert!(matches!(auth::set_disabled(store, "ops", true).await, Err(AuthError::LastAdmin(_))));
    auth::set_disabled(store, "root", true).await.unwrap();
    assert!(auth::verify_password(store, "root", PW).await.unwrap().is_none(), "disabled");
    assert!(auth::get_user(store, "root").await.unwrap().unwrap().disabled);
    auth::set_disabled(store, "root", false).await.unwrap();
    auth::remove_user(store, "root").await.unwrap();
    assert_eq!(auth::count_users(store).await.unwrap(), 1);
    assert!(auth::get_user(store, "root").await.unwrap().is_none());
    assert!(matches!(auth::set_password(store, "root", "a new long password").await, Err(AuthError::NoSuchUser(_))));
}

/// Two admins each demoted, removed or disabled at the same time: one change must lose. On
/// SQLite one writer at a time makes this hold; PostgreSQL's transactions run side by side, and
/// each would see the other admin still there.
async fn the_last_admin_holds_against_concurrent_changes(store: &Store) {
    auth::add_user(store, "a", Role::Admin, PW).await.unwrap();
    auth::add_user(store, "b", Role::Admin, PW).await.unwrap();
    for round in 0..30 {
        let (first, second) = match round % 3 {
            0 => tokio::join!(auth::set_role(store, "a", Role::Viewer), auth::set_role(store, "b", Role::Viewer)),
            1 => tokio::join!(auth::set_disabled(store, "a", true), auth::set_disabled(store, "b", true)),
            _ => tokio::join!(auth::set_role(store, "a", Role::Operator), auth::set_disabled(store, "b", true)),
        };
        let admins =
            auth::list_users(store).await.unwrap().into_iter().filter(|u| u.role == Role::Admin && !u.disabled).count();
        assert_eq!(admins, 1, "round {round}: {first:?} {second:?}");
        assert!(first.is_ok() != second.is_ok(), "round {round}: exactly one of {first:?} {second:?}");
        // Both admins again for the next round.
        for name in ["a", "b"] {
            auth::set_disabled(store, name, false).await.unwrap();
            auth::set_role(store, name, Role::Admin).await.unwrap();
        }
    }
}

async fn sessions_end_by_time_logout_password_and_disabling(store: &Store) {
    const T0: i64 = 1_700_000_000;
    let ttl = Duration::from_secs(3600);
    let idle = Duration::from_secs(600);
    auth::add_user(store, "root", Role::Admin, PW).await.unwrap();
    auth::add_user(store, "vera", Role::Viewer, PW).await.unwrap();
    let vera = auth::get_user(store, "vera").await.unwrap().unwrap();

    let new = auth::create_session(store, &vera, ttl, T0).await.unwrap();
    assert_eq!(new.expires_at, T0 + 3600);
    let active = auth::session(store, &new.cookie, idle, T0 + 1).await.unwrap().expect("live");
    assert_eq!((active.principal.name.as_str(), active.principal.role), ("vera", Role::Viewer));
    assert_eq!(active.csrf_token, new.csrf_token);
    assert!(auth::session(store, "not a cookie", idle, T0).await.unwrap().is_none());

    // A role change is read at the next request.
    auth::set_role(store, "vera", Role::Operator).await.unwrap();
    assert_eq!(auth::session(store, &new.cookie, idle, T0 + 2).await.unwrap().unwrap().principal.role, Role::Operator);

    // Use keeps it from going idle (last seen is written at most once a minute).
    for minute in 1..=20 {
        assert!(auth::session(store, &new.cookie, idle, T0 + minute * 60).await.unwrap().is_some(), "minute {minute}");
    }
    // Then idle: gone, and its row with it.
    assert!(auth::session(store, &new.cookie, idle, T0 + 20 * 60 + 600).await.unwrap().is_none());
    assert!(auth::session(store, &new.cookie, idle, T0 + 20 * 60 + 1).await.unwrap().is_none(), "deleted");

    // The absolute lifetime.
    let short = auth::create_session(store, &vera, ttl, T0).await.unwrap();
    assert!(auth::session(store, &short.cookie, Duration::from_secs(7200), T0 + 3600).await.unwrap().is_none());

    // Logout, "log out everywhere", a password change and disabling each end sessions.
    let one = auth::create_session(store, &vera, ttl, T0).await.unwrap();
    assert!(auth::end_session(store, &one.cookie).await.unwrap());
    assert!(!auth::end_session(store, &one.cookie).await.unwrap());
    for _ in 0..3 {
        auth::create_session(store, &vera, ttl, T0).await.unwrap();
    }
    assert_eq!(auth::end_user_sessions(store, "vera").await.unwrap(), 3);
    let two = [
        auth::create_session(store, &vera, ttl, T0).await.unwrap(),
        auth::create_session(store, &vera, ttl, T0).await.unwrap(),
    ];
    assert_eq!(auth::set_password(store, "vera", "another long password").await.unwrap(), 2);
    assert!(auth::session(store, &two[0].cookie, idle, T0 + 1).await.unwrap().is_none());
    let three = auth::create_session(store, &vera, ttl, T0).await.unwrap();
    auth::set_disabled(store, "vera", true).await.unwrap();
    assert!(auth::session(store, &three.cookie, idle, T0 + 1).await.unwrap().is_none());
    auth::set_disabled(store, "vera", false).await.unwrap();

    // Removing a user takes their sessions (a cascade on both backends).
    let four = auth::create_session(store, &vera, ttl, T0).await.unwrap();
    auth::remove_user(store, "vera").await.unwrap();
    assert!(auth::session(store, &four.cookie, idle, T0 + 1).await.unwrap().is_none());

    // The periodic cleanup: expired and idle ones, counted.
    let root = auth::get_user(store, "root").await.unwrap().unwrap();
    let kept = auth::create_session(store, &root, ttl, T0 + 5000).await.unwrap();
    auth::create_session(store, &root, ttl, T0).await.unwrap();
    auth::create_session(store, &root, Duration::from_secs(10), T0 + 4990).await.unwrap();
    assert_eq!(auth::purge_expired(store, idle, T0 + 5001).await.unwrap(), 2);
    assert!(auth::session(store, &kept.cookie, idle, T0 + 5002).await.unwrap().is_some());
}

async fn tokens_are_unique_while_live_and_record_their_use(store: &Store) {
    const T0: i64 = 1_700_000_000;
    let ci = auth::create_token(store, "ci", Role::Viewer, "root", T0).await.unwrap();
    assert!(ci.token.starts_with(auth::TOKEN_PREFIX));
    assert!(matches!(auth::create_token(store, "ci", Role::Admin, "root", T0).await, Err(AuthError::TokenExists(_))));
    let principal = auth::token(store, &ci.token, T0 + 5).await.unwrap().expect("live");
    assert_eq!((principal.name.as_str(), principal.role), ("ci", Role::Viewer));
    assert!(auth::token(store, "wrn_not-a-token", T0).await.unwrap().is_none());
    // Last use is recorded, at most once a minute.
    auth::token(store, &ci.token, T0 + 30).await.unwrap().unwrap();
    let listed = auth::list_tokens(store).await.unwrap();
    assert_eq!(listed.len(), 1);
    let info = &listed[0];
    assert_eq!(
        (
            info.id,
            info.name.as_str(),
            info.role,
            info.created_by.as_str(),
            info.created_at,
            info.last_used_at,
            info.revoked
        ),
        (ci.id, "ci", Role::Viewer, "root", T0, Some(T0 + 5), false)
    );
    auth::token(store, &ci.token, T0 + 70).await.unwrap().unwrap();
    assert_eq!(auth::list_tokens(store).await.unwrap()[0].last_used_at, Some(T0 + 70));

    auth::revoke_token(store, ci.id).await.unwrap();
    assert!(matches!(auth::revoke_token(store, ci.id).await, Err(AuthError::NoSuchToken(_))));
    assert!(auth::token(store, &ci.token, T0 + 80).await.unwrap().is_none());
    // A revoked token's name is free again; its row stays, oldest first.
    let again = auth::create_token(store, "ci", Role::Operator, "root", T0 + 90).await.unwrap();
    assert!(again.id > ci.id);
    let listed: Vec<_> = auth::list_tokens(store).await.unwrap().into_iter().map(|t| (t.id, t.revoked)).collect();
    assert_eq!(listed, [(ci.id, true), (again.id, false)]);
}

fn newest(kind: Option<Kind>, per_page: i64) -> Page {
    Page { kind, before: None, after: None, per_page }
}

async fn purge(store: &Store, queue: &str) -> i64 {
    let entry = Entry { actor: "otto", broker: "b", vhost: "v", queue, action: "purge", request: "{}".into() };
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
    let entry =
        Entry { actor: "ada", broker: "prod", vhost: "/", queue, action: "requeue", request: request.to_string() };
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
