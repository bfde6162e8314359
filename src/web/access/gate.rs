//! The gate: the middleware that identifies every request (trusted proxy header, API token,
//! session cookie, or anonymous on loopback when no authentication is configured), checks its
//! CSRF token and its role, and puts `Access` on it for the handlers (`web/identity.rs`).
//!
//! Order of the checks, and why:
//! 1. Public paths (health checks, static files, the login form) pass untouched.
//! 2. An `Authorization: Bearer` header is decisive: a wrong token is refused, never ignored, so
//!    a script with a revoked token fails loudly instead of running as someone else.
//! 3. A trusted proxy's user header, only from the proxy's addresses.
//! 4. A session cookie.
//! 5. Anonymous, only while no user exists and no proxy is configured, and only for requests
//!    that really come from this machine (`auth::anonymous_allowed`).
//!
//! Then every request that is not a GET or HEAD must carry the CSRF token (header
//! `x-csrf-token`, which htmx sends from `hx-headers` on `<body>`, or the form field
//! `csrf_token`): always for sessions; for proxy and anonymous principals whenever a browser
//! sent it (a browser always sends `Origin` or `Sec-Fetch-Site` with such a request, and a
//! cross-site page cannot remove them). Token requests need none: browsers never add a bearer
//! token by themselves. Last, the role the route needs (`auth::required_role`).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use axum::body::Body;
use axum::extract::{ConnectInfo, Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::Json;
use serde_json::json;

use crate::auth::{self, AuthError, How, Principal, Role};
use crate::state::AppState;
use crate::web::error_page::error_page;
use crate::web::htmx::is_htmx;
use crate::web::identity::{Access, Me};

/// Form bodies are read whole to find their CSRF field; none of warren's forms comes close.
const FORM_LIMIT: usize = 2 * 1024 * 1024;

fn is_public(path: &str) -> bool {
    matches!(path, "/healthz" | "/readyz" | "/login" | "/favicon.ico" | "/api/v1/openapi.json")
        || path.starts_with("/static/")
}

/// Whether the requester is a script or API client (JSON answers) rather than a browser page.
fn wants_json(path: &str, headers: &HeaderMap) -> bool {
    if path.starts_with("/api/") || path == "/metrics" {
        return true;
    }
    let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()).unwrap_or("");
    !accept.contains("text/html") && !is_htmx(headers)
}

/// Why a request is not served, answered in one place (`refuse`).
enum Refusal {
    /// Nobody proved who they are.
    Unauthenticated(&'static str),
    Forbidden {
        code: &'static str,
        message: String,
        /// Who was refused, for the page's header.
        me: Box<Me>,
    },
    TooLarge,
    Internal(AuthError),
}

/// The peer address from the connection; a request without one (a router driven in-process) is
/// treated as remote, which is the strict choice.
fn peer_of(request: &Request) -> IpAddr {
    request
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|info| info.0.ip())
        .unwrap_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED))
}

/// The middleware: identifies, checks CSRF and role, then runs the handler with `Access` in the
/// request's extensions.
pub async fn gate(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let path = request.uri().path().to_string();
    if is_public(&path) {
        return next.run(request).await;
    }
    let json = wants_json(&path, request.headers());
    let htmx = is_htmx(request.headers());
    let target = request.uri().path_and_query().map(|p| p.as_str().to_string()).unwrap_or_else(|| path.clone());
    let method = request.method().clone();
    let cross_site = request.headers().get("sec-fetch-site").is_some_and(|v| v == "cross-site");
    match admit(&state, request).await {
        Ok(request) => next.run(request).await,
        Err(Refusal::Unauthenticated(_)) if cross_site && !json && method == Method::GET => reload_same_site(),
        Err(refusal) => refuse(&state, refusal, json, htmx, &method, &target),
    }
}

async fn admit(state: &AppState, mut request: Request) -> Result<Request, Refusal> {
    let peer = peer_of(&request);
    let now = chrono::Utc::now().timestamp();
    let (principal, session_csrf) = identify(state, peer, request.headers(), now).await?;

    let changes_state = !matches!(*request.method(), Method::GET | Method::HEAD);
    let csrf = match principal.via {
        How::Token => String::new(),
        How::Session => session_csrf.unwrap_or_default(),
        How::Proxy | How::Anonymous => state.gate.csrf_token_for(&principal),
    };
    let storage_problem = state.storage.problem().map(|p| format!("{} (seen during {})", p.message, p.during));
    let cluster_problems = state.live.cluster_problems();
    let base_path = state.base_path.clone();
    let access = Access { principal, csrf, storage_problem, cluster_problems, base_path };
    let me = || Box::new(Me::of(&access));
    let Access { principal, csrf, .. } = &access;
    if changes_state && principal.via != How::Token {
        let from_browser = ["origin", "sec-fetch-site"].iter().any(|h| request.headers().contains_key(*h));
        if principal.via == How::Session || from_browser {
            let (given, rebuilt) = presented_csrf(request).await?;
            request = rebuilt;
            if !auth::csrf_ok(csrf, given.as_deref()) {
                return Err(Refusal::Forbidden {
                    me: me(),
                    code: "csrf",
                    message: "this request carries no valid CSRF token: reload the page and try again \
                              (scripts: send the session's token in the x-csrf-token header, or use an API token)"
                        .into(),
                });
            }
        }
    }

    let needed = auth::required_role(request.method(), request.uri().path());
    if !principal.role.allows(needed) {
        return Err(Refusal::Forbidden {
            me: me(),
            code: "forbidden",
            message: format!(
                "this needs the {needed} role; {} is {} {}",
                principal.actor(),
                if principal.role == Role::Admin { "an" } else { "a" },
                principal.role
            ),
        });
    }
    request.extensions_mut().insert(access);
    Ok(request)
}

/// Who the request is from, and the CSRF token of its session if it has one.
async fn identify(
    state: &AppState,
    peer: IpAddr,
    headers: &HeaderMap,
    now: i64,
) -> Result<(Principal, Option<String>), Refusal> {
    if let Some(presented) = auth::bearer_token(headers) {
        return match auth::token(&state.store, presented, now).await.map_err(Refusal::Internal)? {
            Some(principal) => Ok((principal, None)),
            None => Err(Refusal::Unauthenticated("the API token is unknown or revoked")),
        };
    }
    if let Some(proxy) = &state.gate.proxy {
        if let Some(principal) = proxy.principal(peer, headers) {
            return Ok((principal, None));
        }
    }
    if let Some(cookie) = auth::session_cookie_from(headers) {
        let idle = state.gate.config.session_idle;
        if let Some(active) = auth::session(&state.store, cookie, idle, now).await.map_err(Refusal::Internal)? {
            return Ok((active.principal, Some(active.csrf_token)));
        }
    }
    if state.gate.auth_configured(&state.store).await.map_err(Refusal::Internal)? {
        return Err(Refusal::Unauthenticated("log in first"));
    }
    if auth::anonymous_allowed(peer, headers) {
        return Ok((Principal::anonymous(), None));
    }
    Err(Refusal::Forbidden {
        me: Box::new(Me::public(state)),
        code: "loopback_only",
        message: "warren runs without authentication, so it serves only requests made directly on this \
                  machine (no proxy headers, a loopback Host). Create a user with `warren user add NAME --role admin` \
                  or configure [auth.proxy]"
            .into(),
    })
}

/// The CSRF token a request presents: the header, or else the `csrf_token` field of a form body
/// (which is read and put back for the handler).
async fn presented_csrf(request: Request) -> Result<(Option<String>, Request), Refusal> {
    if let Some(value) = request.headers().get(auth::CSRF_HEADER) {
        let given = value.to_str().ok().map(str::to_string);
        return Ok((given, request));
    }
    let is_form = request
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/x-www-form-urlencoded"));
    if !is_form {
        return Ok((None, request));
    }
    let (parts, body) = request.into_parts();
    let bytes = axum::body::to_bytes(body, FORM_LIMIT).await.map_err(|_| Refusal::TooLarge)?;
    let given = form_field(&bytes, auth::CSRF_FIELD);
    Ok((given, Request::from_parts(parts, Body::from(bytes))))
}

/// The first value of `name` in a urlencoded body, decoded.
fn form_field(body: &[u8], name: &str) -> Option<String> {
    form_urlencoded::parse(body).find(|(key, _)| key == name).map(|(_, value)| value.into_owned())
}

/// `target` is warren's own path (without the base path), as `next` of the login form keeps it.
fn refuse(state: &AppState, refusal: Refusal, json: bool, htmx: bool, method: &Method, target: &str) -> Response {
    let mut me = Me::public(state);
    let (status, code, message) = match refusal {
        Refusal::Unauthenticated(why) => {
            if !json && method == Method::GET {
                let next = percent_encoding::utf8_percent_encode(target, NEXT_SET);
                let login = state.href(&format!("/login?next={next}"));
                if htmx {
                    // htmx would swap a redirect's login page into a fragment; this reloads the page.
                    return ([("hx-redirect", login)], StatusCode::OK).into_response();
                }
                return Redirect::to(&login).into_response();
            }
            (StatusCode::UNAUTHORIZED, "unauthenticated", why.to_string())
        }
        Refusal::Forbidden { code, message, me: who } => {
            me = *who;
            (StatusCode::FORBIDDEN, code, message)
        }
        Refusal::TooLarge => (StatusCode::PAYLOAD_TOO_LARGE, "too_large", "the form is too large".to_string()),
        Refusal::Internal(e) => {
            tracing::error!(error = %e, "authentication failed on a storage error");
            (StatusCode::INTERNAL_SERVER_ERROR, "internal", "authentication is unavailable; see warren's log".into())
        }
    };
    if json {
        let mut response = (status, Json(json!({"error": {"code": code, "message": message}}))).into_response();
        if status == StatusCode::UNAUTHORIZED {
            response.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        return response;
    }
    error_page(status, message, me)
}

/// A link from another site (an alert in Slack, say) arrives without the `SameSite=Strict`
/// session cookie, so a logged-in user would land on the login form. This page reloads itself:
/// the reload starts on warren's own page, so the browser sends the cookie; without a session
/// the reload is same-origin and gets the login redirect, so it cannot loop.
fn reload_same_site() -> Response {
    let html = "<!doctype html><meta http-equiv=\"refresh\" content=\"0\"><title>warren</title><p>Loading…</p>";
    ([(header::CACHE_CONTROL, "no-store")], Html(html)).into_response()
}

/// Characters escaped in the `next` parameter (everything but unreserved and `/`).
const NEXT_SET: &percent_encoding::AsciiSet =
    &percent_encoding::NON_ALPHANUMERIC.remove(b'/').remove(b'-').remove(b'_');

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn form_fields_are_found_and_decoded() {
        assert_eq!(form_field(b"a=1&csrf_token=abc-_x&b=2", "csrf_token").as_deref(), Some("abc-_x"));
        assert_eq!(form_field(b"csrf_token=a%2Bb+c", "csrf_token").as_deref(), Some("a+b c"));
        assert_eq!(form_field(b"xcsrf_token=1", "csrf_token"), None);
        assert_eq!(form_field(b"\xff\xfe", "csrf_token"), None);
    }

    #[test]
    fn browsers_get_pages_and_scripts_get_json() {
        let mut headers = HeaderMap::new();
        assert!(wants_json("/api/v1/queues", &headers));
        assert!(wants_json("/queues", &headers));
        headers.insert(header::ACCEPT, HeaderValue::from_static("text/html,application/xhtml+xml"));
        assert!(!wants_json("/queues", &headers));
        assert!(wants_json("/api/v1/queues", &headers));
    }
}
