//! Login sessions: a random id in an HttpOnly, SameSite=Strict cookie, stored as its SHA-256 so
//! that a copy of the database holds no live session; a CSRF token per session.
//!
//! A session ends at whichever comes first: its absolute lifetime (`ttl`, default 12 hours: a
//! working day, then log in again), an idle time without requests (default 2 hours: an abandoned
//! browser does not stay logged in), logout, a password change, or the user being disabled or
//! removed. The idle clock (`last_seen_at`) is refreshed at most once a minute so that reading
//! pages does not write to the database on every request; the idle limit holds to within that.

use std::fmt;
use std::time::Duration;

use axum::http::{header, HeaderMap};

use super::{is_secret_shaped, random_secret, same_secret, secret_hash, AuthError, How, Principal, Role, User};
use crate::storage::accounts::NewSessionRow;
use crate::storage::Store;

/// The cookie that carries the session id.
pub const SESSION_COOKIE: &str = "warren_session";
/// Where htmx and scripts send the CSRF token.
pub const CSRF_HEADER: &str = "x-csrf-token";
/// Where a plain HTML form sends it.
pub const CSRF_FIELD: &str = "csrf_token";
pub use crate::config::{DEFAULT_SESSION_IDLE, DEFAULT_SESSION_TTL};
/// `last_seen_at` is written at most this often.
const LAST_SEEN_EVERY_SECS: i64 = 60;

/// A session just created: the cookie value goes to the browser once and is not kept anywhere.
pub struct NewSession {
    pub cookie: String,
    pub csrf_token: String,
    /// Unix seconds.
    pub expires_at: i64,
}

impl fmt::Debug for NewSession {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NewSession").field("cookie", &"***").field("expires_at", &self.expires_at).finish()
    }
}

/// A live session found by its cookie.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ActiveSession {
    pub principal: Principal,
    /// What every state-changing request of this session must carry (see [`csrf_ok`]).
    pub csrf_token: String,
}

/// Starts a session for `user` (who just proved their password) at `now` (unix seconds).
pub async fn create_session(store: &Store, user: &User, ttl: Duration, now: i64) -> Result<NewSession, AuthError> {
    let cookie = random_secret();
    let csrf_token = random_secret();
    let expires_at = now.saturating_add(ttl.as_secs() as i64);
    let id_hash = secret_hash(&cookie);
    store
        .insert_session(NewSessionRow {
            id_hash: &id_hash,
            user_name: &user.name,
            csrf_token: &csrf_token,
            created_at: now,
            expires_at,
        })
        .await?;
    Ok(NewSession { cookie, csrf_token, expires_at })
}

/// The live session a cookie value names at `now`, with the user's current role; `None` for an
/// unknown, expired, idle or disabled one (an ended session's row is deleted on the way).
pub async fn session(
    store: &Store,
    cookie: &str,
    idle: Duration,
    now: i64,
) -> Result<Option<ActiveSession>, AuthError> {
    if !is_secret_shaped(cookie) {
        return Ok(None);
    }
    let id_hash = secret_hash(cookie);
    let Some(row) = store.session(&id_hash).await? else { return Ok(None) };
    let idle_until = row.last_seen_at.saturating_add(idle.as_secs() as i64);
    if now >= row.expires_at || now >= idle_until || row.disabled {
        store.delete_session(&id_hash).await?;
        return Ok(None);
    }
    if now - row.last_seen_at >= LAST_SEEN_EVERY_SECS {
        store.touch_session(&id_hash, now).await?;
    }
    let role: Role = row.role.parse()?;
    Ok(Some(ActiveSession {
        principal: Principal { name: row.user_name, role, via: How::Session },
        csrf_token: row.csrf_token,
    }))
}

/// Logout: ends the session a cookie value names. Whether there was one.
pub async fn end_session(store: &Store, cookie: &str) -> Result<bool, AuthError> {
    Ok(store.delete_session(&secret_hash(cookie)).await?)
}

/// Ends every session of a user ("log out everywhere"). How many there were.
pub async fn end_user_sessions(store: &Store, name: &str) -> Result<u64, AuthError> {
    Ok(store.delete_user_sessions(name).await?)
}

/// Deletes sessions that expired or went idle by `now`, for a periodic cleanup. How many.
pub async fn purge_expired(store: &Store, idle: Duration, now: i64) -> Result<u64, AuthError> {
    Ok(store.purge_sessions(now, now.saturating_sub(idle.as_secs() as i64)).await?)
}

/// Whether a request carries the session's CSRF token, compared in constant time. A missing or
/// empty token never matches.
pub fn csrf_ok(expected: &str, given: Option<&str>) -> bool {
    match given {
        Some(given) if !expected.is_empty() => same_secret(expected.as_bytes(), given.as_bytes()),
        _ => false,
    }
}

/// The `Set-Cookie` value that starts a session. `secure` when warren is reached over TLS (also
/// through a TLS-terminating proxy): the browser then sends the cookie over TLS only. `path` is
/// where warren is served (`/`, or `/warren/` behind a proxy).
pub fn session_cookie(value: &str, max_age: Duration, secure: bool, path: &str) -> String {
    let secure = if secure { "; Secure" } else { "" };
    format!("{SESSION_COOKIE}={value}; Path={path}; Max-Age={}; HttpOnly; SameSite=Strict{secure}", max_age.as_secs())
}

/// The `Set-Cookie` value that makes the browser forget the session (logout): the same `path`
/// as it was set with, or the browser keeps it.
pub fn clear_session_cookie(secure: bool, path: &str) -> String {
    let secure = if secure { "; Secure" } else { "" };
    format!("{SESSION_COOKIE}=; Path={path}; Max-Age=0; HttpOnly; SameSite=Strict{secure}")
}

/// The session cookie's value in a request's `Cookie` headers: the first well-formed one (a
/// malformed value, which warren never sets, is skipped).
pub fn session_cookie_from(headers: &HeaderMap) -> Option<&str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|line| line.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, value)| *name == SESSION_COOKIE && is_secret_shaped(value))
        .map(|(_, value)| value)
}

#[cfg(test)]
mod tests {
    use axum::http::HeaderValue;
    use sqlx::Row;

    use super::*;
    use crate::auth::{add_user, get_user, test_db};

    const TTL: Duration = DEFAULT_SESSION_TTL;
    const IDLE: Duration = DEFAULT_SESSION_IDLE;
    const T0: i64 = 1_700_000_000;

    async fn with_user(role: Role) -> (tempfile::TempDir, Store, crate::history::Db, User) {
        let (dir, db, pool) = test_db().await;
        add_user(&db, "alice", role, "correct horse battery").await.unwrap();
        let user = get_user(&db, "alice").await.unwrap().unwrap();
        (dir, db, pool, user)
    }

    #[tokio::test]
    async fn a_session_names_its_user_and_csrf_token() {
        let (_dir, db, _, user) = with_user(Role::Operator).await;
        let new = create_session(&db, &user, TTL, T0).await.unwrap();
        assert_eq!(new.expires_at, T0 + 12 * 3600);
        assert_ne!(new.cookie, new.csrf_token);
        assert!(!format!("{new:?}").contains(&new.cookie));

        let found = session(&db, &new.cookie, IDLE, T0 + 5).await.unwrap().expect("live session");
        assert_eq!(found.principal, Principal { name: "alice".into(), role: Role::Operator, via: How::Session });
        assert_eq!(found.csrf_token, new.csrf_token);

        let other = create_session(&db, &user, TTL, T0).await.unwrap();
        assert_ne!(other.cookie, new.cookie);
        assert_ne!(other.csrf_token, new.csrf_token);
    }

    #[tokio::test]
    async fn the_database_holds_no_cookie_value() {
        let (_dir, db, pool, user) = with_user(Role::Viewer).await;
        let new = create_session(&db, &user, TTL, T0).await.unwrap();
        let rows = sqlx::query("select id_hash, user_name, csrf_token from sessions").fetch_all(&pool).await.unwrap();
        assert_eq!(rows.len(), 1);
        let id_hash: String = rows[0].get("id_hash");
        assert_eq!(id_hash, secret_hash(&new.cookie));
        for column in ["id_hash", "user_name", "csrf_token"] {
            let stored: String = rows[0].get(column);
            assert!(!stored.contains(&new.cookie), "{column} holds the cookie value");
        }
        // Knowing the stored hash does not help: presenting it is not a session.
        assert!(session(&db, &id_hash, IDLE, T0 + 1).await.unwrap().is_none());
    }

    #[tokio::test]
    async fn sessions_end_at_their_absolute_lifetime() {
        let (_dir, db, pool, user) = with_user(Role::Viewer).await;
        let ttl = Duration::from_secs(3600);
        let new = create_session(&db, &user, ttl, T0).await.unwrap();
        // Active every ten minutes: the idle limit never hits, the lifetime does.
        for minutes in (10..60).step_by(10) {
            assert!(session(&db, &new.cookie, IDLE, T0 + minutes * 60).await.unwrap().is_some(), "{minutes}");
        }
        assert!(session(&db, &new.cookie, IDLE, T0 + 3599).await.unwrap().is_some());
        assert!(session(&db, &new.cookie, IDLE, T0 + 3600).await.unwrap().is_none());
        // The row is gone, not just refused.
        let left: i64 = sqlx::query_scalar("select count(*) from sessions").fetch_one(&pool).await.unwrap();
        assert_eq!(left, 0);
    }

    #[tokio::test]
    async fn sessions_end_when_idle_and_requests_keep_them_alive() {
        let (_dir, db, _, user) = with_user(Role::Viewer).await;
        let idle = Duration::from_secs(600);
        let new = create_session(&db, &user, TTL, T0).await.unwrap();
        // A request every 9 minutes keeps it alive past several idle periods.
        let mut now = T0;
        for _ in 0..5 {
            now += 540;
            assert!(session(&db, &new.cookie, idle, now).await.unwrap().is_some(), "at {}", now - T0);
        }
        assert!(session(&db, &new.cookie, idle, now + 599).await.unwrap().is_some());
        // 599 s later was itself a request; 600 s after that is too long.
        assert!(session(&db, &new.cookie, idle, now + 599 + 600).await.unwrap().is_none());
    }

    #[tokio::test]
    async fn last_seen_is_written_at_most_once_a_minute() {
        let (_dir, db, pool, user) = with_user(Role::Viewer).await;
        let new = create_session(&db, &user, TTL, T0).await.unwrap();
        let last_seen = || sqlx::query_scalar::<_, i64>("select last_seen_at from sessions").fetch_one(&pool);
        session(&db, &new.cookie, IDLE, T0 + 59).await.unwrap().unwrap();
        assert_eq!(last_seen().await.unwrap(), T0);
        session(&db, &new.cookie, IDLE, T0 + 60).await.unwrap().unwrap();
        assert_eq!(last_seen().await.unwrap(), T0 + 60);
    }

    #[tokio::test]
    async fn the_role_is_read_at_each_request() {
        let (_dir, db, pool, user) = with_user(Role::Admin).await;
        let new = create_session(&db, &user, TTL, T0).await.unwrap();
        sqlx::query("update users set role = 'viewer' where name = 'alice'").execute(&pool).await.unwrap();
        let found = session(&db, &new.cookie, IDLE, T0 + 1).await.unwrap().unwrap();
        assert_eq!(found.principal.role, Role::Viewer);
    }

    #[tokio::test]
    async fn logout_and_purge() {
        let (_dir, db, _, user) = with_user(Role::Viewer).await;
        let a = create_session(&db, &user, TTL, T0).await.unwrap();
        let b = create_session(&db, &user, TTL, T0).await.unwrap();
        assert!(end_session(&db, &a.cookie).await.unwrap());
        assert!(!end_session(&db, &a.cookie).await.unwrap());
        assert!(session(&db, &a.cookie, IDLE, T0 + 1).await.unwrap().is_none());
        assert!(session(&db, &b.cookie, IDLE, T0 + 1).await.unwrap().is_some());

        create_session(&db, &user, Duration::from_secs(60), T0).await.unwrap();
        create_session(&db, &user, TTL, T0 + 3000).await.unwrap();
        // At T0 + 2 h: the short one expired, `b` went idle, the late one lives.
        assert_eq!(purge_expired(&db, IDLE, T0 + 7200).await.unwrap(), 2);
        assert_eq!(end_user_sessions(&db, "alice").await.unwrap(), 1);
    }

    #[tokio::test]
    async fn malformed_cookies_are_not_sessions() {
        let (_dir, db, _, _user) = with_user(Role::Viewer).await;
        for cookie in ["", "x", "' or 1=1 --", &"a".repeat(43), &"a".repeat(10_000)] {
            assert!(session(&db, cookie, IDLE, T0).await.unwrap().is_none());
        }
    }

    #[test]
    fn csrf_tokens_must_match_exactly() {
        let token = random_secret();
        assert!(csrf_ok(&token, Some(&token)));
        assert!(!csrf_ok(&token, None));
        assert!(!csrf_ok(&token, Some("")));
        assert!(!csrf_ok(&token, Some(&token[1..])));
        assert!(!csrf_ok(&token, Some(&format!("{token}x"))));
        assert!(!csrf_ok(&token, Some(&token.to_uppercase())));
        assert!(!csrf_ok("", Some("")), "an empty expected token matches nothing");
    }

    #[test]
    fn cookie_headers() {
        assert_eq!(
            session_cookie("abc", TTL, false, "/"),
            "warren_session=abc; Path=/; Max-Age=43200; HttpOnly; SameSite=Strict"
        );
        assert!(session_cookie("abc", TTL, true, "/").ends_with("; Secure"));
        assert!(session_cookie("abc", TTL, false, "/warren").contains("; Path=/warren;"));
        assert_eq!(clear_session_cookie(false, "/"), "warren_session=; Path=/; Max-Age=0; HttpOnly; SameSite=Strict");
        assert!(clear_session_cookie(true, "/").ends_with("; Secure"));
        assert!(clear_session_cookie(false, "/warren").contains("; Path=/warren;"));
    }

    #[test]
    fn the_session_cookie_is_found_among_others() {
        let value = random_secret();
        let mut headers = HeaderMap::new();
        assert_eq!(session_cookie_from(&headers), None);
        headers.append(header::COOKIE, HeaderValue::from_static("theme=dark; warren_session=bogus"));
        assert_eq!(session_cookie_from(&headers), None);
        headers.append(header::COOKIE, HeaderValue::from_str(&format!("a=b;  warren_session={value} ;c=d")).unwrap());
        assert_eq!(session_cookie_from(&headers), Some(value.as_str()));
        let mut other = HeaderMap::new();
        other.insert(header::COOKIE, HeaderValue::from_str(&format!("xwarren_session={value}")).unwrap());
        assert_eq!(session_cookie_from(&other), None);
    }
}
