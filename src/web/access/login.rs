//! Logging in and out: the login form, its checks (same site, throttled failures) and the
//! session cookie it sets, and the `next` page it returns to.

use std::net::SocketAddr;

use axum::extract::{ConnectInfo, Query, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::{Form, Router};
use serde::Deserialize;

use crate::auth::{self, AuthError, LoginOutcome};
use crate::state::AppState;
use crate::web::error::WebError;
use crate::web::error_page::PageError;
use crate::web::identity::Me;

pub fn router() -> Router<AppState> {
    Router::new().route("/login", get(login_page).post(login)).route("/logout", post(logout))
}

/// Only a path on this site: `/x` but not `//host` or `/\host` (both leave the site). URL
/// parsers drop tabs and newlines anywhere (WHATWG URL), so `/\t/host` is `//host` to a browser:
/// a `next` with any control character is refused whole rather than cleaned, and so is a
/// backslash anywhere (browsers read it as `/`). A space stays: parsers keep it inside a URL.
pub fn safe_next(next: Option<&str>) -> String {
    match next {
        Some(n) if n.starts_with('/') && !n.starts_with("//") && !n.chars().any(|c| c.is_control() || c == '\\') => {
            n.to_string()
        }
        _ => "/".to_string(),
    }
}

#[derive(askama::Template)]
#[template(path = "login.html")]
struct LoginPage {
    me: Me,
    next: String,
    name: String,
    error: Option<String>,
    /// No users and no proxy: there is nothing to log in to.
    login_off: bool,
}

#[derive(Deserialize)]
struct LoginQuery {
    next: Option<String>,
}

async fn login_page(State(state): State<AppState>, Query(query): Query<LoginQuery>) -> Result<Response, PageError> {
    let login_off = !state.gate.auth_configured(&state.store).await.map_err(auth_error)?;
    let page = LoginPage {
        me: Me::public(&state),
        next: safe_next(query.next.as_deref()),
        name: String::new(),
        error: None,
        login_off,
    };
    Ok(Html(askama::Template::render(&page)?).into_response())
}

#[derive(Deserialize)]
struct LoginForm {
    name: String,
    password: String,
    next: Option<String>,
}

/// An authentication error as the web says it: the database, busy, or the request.
pub(super) fn auth_error(e: AuthError) -> WebError {
    match e {
        AuthError::Db(e) => WebError::Database(e),
        AuthError::Busy => WebError::Unavailable(e.to_string()),
        other => WebError::BadRequest(other.to_string()),
    }
}

/// Whether a login form came from warren's own page: a cross-site page must not log a
/// victim's browser into the attacker's account.
fn same_origin(headers: &HeaderMap) -> bool {
    let Some(origin) = headers.get(header::ORIGIN) else { return true };
    let host = headers.get(header::HOST).and_then(|h| h.to_str().ok());
    let origin = origin.to_str().ok().and_then(|o| o.split_once("://").map(|(_, rest)| rest));
    matches!((origin, host), (Some(o), Some(h)) if o == h)
}

/// Whether the browser reached warren over TLS (directly or through a TLS-terminating proxy).
fn over_tls(state: &AppState, headers: &HeaderMap) -> bool {
    state.gate.config.secure_cookie.unwrap_or_else(|| {
        headers.get("x-forwarded-proto").and_then(|v| v.to_str().ok()).is_some_and(|v| v.eq_ignore_ascii_case("https"))
    })
}

async fn login(
    State(state): State<AppState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    Form(form): Form<LoginForm>,
) -> Result<Response, PageError> {
    let peer = peer.ip();
    let next = safe_next(form.next.as_deref());
    let page = |status: StatusCode, error: String| -> Result<Response, PageError> {
        let page = LoginPage {
            me: Me::public(&state),
            next: next.clone(),
            name: auth::shorten(&form.name),
            error: Some(error),
            login_off: false,
        };
        Ok((status, Html(askama::Template::render(&page)?)).into_response())
    };
    if !same_origin(&headers) {
        return page(StatusCode::FORBIDDEN, "This login form was sent from another site.".into());
    }
    let now = chrono::Utc::now().timestamp_millis();
    let counted = auth::begin_login(&state.store, peer, &form.name, now).await.map_err(WebError::Database)?;
    let counted = match counted {
        Ok(counted) => counted,
        Err(wait) => {
            auth::record_login(&state.store, &form.name, peer, LoginOutcome::Throttled).await.map_err(auth_error)?;
            let mut response = page(
                StatusCode::TOO_MANY_REQUESTS,
                format!("Too many failed logins. Try again in {} seconds.", wait.as_secs().max(1)),
            )?;
            response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(wait.as_secs().max(1)));
            return Ok(response);
        }
    };
    let Some(user) = auth::verify_password(&state.store, &form.name, &form.password).await.map_err(auth_error)? else {
        auth::record_login(&state.store, &form.name, peer, LoginOutcome::Failed).await.map_err(auth_error)?;
        return page(StatusCode::UNAUTHORIZED, "Wrong name or password.".into());
    };
    auth::login_succeeded(&state.store, peer, &user.name, counted).await.map_err(WebError::Database)?;
    auth::record_login(&state.store, &user.name, peer, LoginOutcome::Success).await.map_err(auth_error)?;
    let ttl = state.gate.config.session_ttl;
    let session =
        auth::create_session(&state.store, &user, ttl, chrono::Utc::now().timestamp()).await.map_err(auth_error)?;
    let cookie = auth::session_cookie(&session.cookie, ttl, over_tls(&state, &headers), cookie_path(&state));
    Ok(([(header::SET_COOKIE, cookie)], Redirect::to(&state.href(&next))).into_response())
}

async fn logout(State(state): State<AppState>, headers: HeaderMap) -> Result<Response, PageError> {
    if let Some(cookie) = auth::session_cookie_from(&headers) {
        auth::end_session(&state.store, cookie).await.map_err(auth_error)?;
    }
    let cookie = auth::clear_session_cookie(over_tls(&state, &headers), cookie_path(&state));
    Ok(([(header::SET_COOKIE, cookie)], Redirect::to(&state.href("/login"))).into_response())
}

/// The session cookie goes only to warren's own paths: behind a proxy at `/warren/`, not to the
/// other applications on the same host. `/warren` rather than `/warren/`, which would leave out
/// the address without the slash (RFC 6265 path-match).
fn cookie_path(state: &AppState) -> &str {
    if state.base_path.is_empty() {
        "/"
    } else {
        &state.base_path
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn next_stays_on_this_site() {
        assert_eq!(safe_next(Some("/queues?sort=ready")), "/queues?sort=ready");
        for bad in [
            "//evil.example",
            "/\\evil.example",
            "https://evil.example",
            "",
            "queues",
            "/x\r\nSet-Cookie: a",
            "/\t/evil.example/phish",
            "/\n/evil.example",
            "/\u{0}/evil.example",
            "/x\\..\\\\evil.example",
        ] {
            assert_eq!(safe_next(Some(bad)), "/", "{bad:?}");
        }
        assert_eq!(safe_next(None), "/");
        assert_eq!(safe_next(Some("/queues?name=my queue")), "/queues?name=my queue");
    }

    #[test]
    fn login_forms_must_come_from_this_site() {
        let mut headers = HeaderMap::new();
        headers.insert(header::HOST, HeaderValue::from_static("warren.example:8080"));
        assert!(same_origin(&headers));
        headers.insert(header::ORIGIN, HeaderValue::from_static("https://warren.example:8080"));
        assert!(same_origin(&headers));
        headers.insert(header::ORIGIN, HeaderValue::from_static("https://evil.example"));
        assert!(!same_origin(&headers));
    }
}
