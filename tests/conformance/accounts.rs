//! Users, sessions and tokens.

use std::time::Duration;

use warren::auth::{self, AuthError, Role};
use warren::storage::Store;

crate::conformance!(
    users_and_the_last_admin,
    the_last_admin_holds_against_concurrent_changes,
    sessions_end_by_time_logout_password_and_disabling,
    tokens_are_unique_while_live_and_record_their_use,
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
