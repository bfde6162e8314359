//! Who is asking, at the web boundary: the middleware that identifies every request (trusted
//! proxy header, API token, session cookie, or anonymous on loopback when no authentication is
//! configured), checks its CSRF token and its role, and the login, logout and account pages.
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
use axum::extract::{ConnectInfo, FromRequestParts, Path, Query, Request, State};
use axum::http::request::Parts;
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::{Form, Json, Router};
use serde::Deserialize;
use serde_json::json;

use super::{ApiError, WebError};
use crate::auth::{self, AuthError, How, LoginOutcome, Principal, Role};
use crate::state::AppState;

/// Form bodies are read whole to find their CSRF field; none of warren's forms comes close.
const FORM_LIMIT: usize = 2 * 1024 * 1024;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/login", get(login_page).post(login))
        .route("/logout", post(logout))
        .route("/api/v1/me", get(me))
        .route("/api/v1/users", get(list_users).post(add_user))
        .route("/api/v1/users/{name}/delete", post(remove_user))
        .route("/api/v1/users/{name}/password", post(set_password))
        .route("/api/v1/users/{name}/role", post(set_role))
        .route("/api/v1/tokens", get(list_tokens).post(add_token))
        .route("/api/v1/tokens/{id}/revoke", post(revoke_token))
        .route("/access", get(access_page))
        .route("/access/users", post(add_user_form))
        .route("/access/users/{name}/delete", post(remove_user_form))
        .route("/access/users/{name}/role", post(set_role_form))
        .route("/access/tokens", post(add_token_form))
        .route("/access/tokens/{id}/revoke", post(revoke_token_form))
}

/// The identified principal of a request and the CSRF token its pages must send back.
#[derive(Debug, Clone)]
pub struct Access {
    pub principal: Principal,
    /// Empty for API tokens (they need none).
    pub csrf: String,
    /// The database fault every page warns about, if there is one (`history::storage`).
    pub storage_problem: Option<String>,
    /// The clusters' problems every page's banner shows (`Live::cluster_problems`).
    pub cluster_problems: Vec<String>,
    /// The prefix of every link the page writes (`AppState::base_path`).
    pub base_path: std::sync::Arc<str>,
}

impl<S: Send + Sync> FromRequestParts<S> for Access {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        // The middleware puts it on every request that is not public; a handler asking for it
        // on a public route is a programming error, answered as such.
        parts.extensions.get::<Access>().cloned().ok_or_else(|| {
            ApiError(WebError::BadRequest("this request was not identified; it needs to be logged in".into()))
        })
    }
}

/// What the page layout shows of the requester: the name and role in the header, the logout
/// button for sessions, the CSRF token for forms and htmx.
#[derive(Debug, Clone, Default)]
pub struct Me {
    pub name: String,
    pub role: &'static str,
    pub csrf: String,
    /// Logged in with a session (so there is something to log out of).
    pub session: bool,
    /// Not anonymous: worth showing who.
    pub known: bool,
    pub operator: bool,
    pub admin: bool,
    /// The database fault the layout warns about: warren's storage, not a broker.
    pub storage_problem: Option<String>,
    /// A node down, a partition or an alarm, per cluster: the layout's banner.
    pub cluster_problems: Vec<String>,
    /// What every URL the page writes starts with: the path of `public_url`, often empty
    /// (`AppState::base_path`).
    pub base: std::sync::Arc<str>,
    /// The navigation's entry of this page (`section`), marked as the current page.
    pub section: &'static str,
}

impl Me {
    pub fn of(access: &Access) -> Me {
        let p = &access.principal;
        Me {
            name: p.actor(),
            role: p.role.as_str(),
            csrf: access.csrf.clone(),
            session: p.via == How::Session,
            known: p.via != How::Anonymous,
            operator: p.role.allows(Role::Operator),
            admin: p.role.allows(Role::Admin),
            storage_problem: access.storage_problem.clone(),
            cluster_problems: access.cluster_problems.clone(),
            base: access.base_path.clone(),
            section: "",
        }
    }

    /// Nobody in particular: the login form, the error pages of public routes and refusals.
    pub fn public(state: &AppState) -> Me {
        Me { base: state.base_path.clone(), ..Me::default() }
    }
}

impl<S: Send + Sync> FromRequestParts<S> for Me {
    type Rejection = std::convert::Infallible;

    /// Public pages (the error page of a public route) get an empty `Me`.
    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        let mut me = parts.extensions.get::<Access>().map(Me::of).unwrap_or_default();
        // The whole path: nested routers see only the part after their own prefix.
        let uri = parts.extensions.get::<axum::extract::OriginalUri>().map_or(&parts.uri, |o| &o.0);
        let path = uri.path().strip_prefix(&*me.base).unwrap_or(uri.path());
        me.section = section(if path.is_empty() { "/" } else { path }, uri.query().unwrap_or(""));
        Ok(me)
    }
}

/// The navigation entry a page belongs to (issue 34, case 7: no page said where one was, and
/// "Dead letters" led to a page titled "Queues"). The path is the router's, after `public_url`'s.
pub fn section(path: &str, query: &str) -> &'static str {
    let dlq_list = query.split('&').any(|p| p == "dlq=true");
    match path.split('/').nth(1).unwrap_or("") {
        "" => "overview",
        "queues" if path == "/queues" && dlq_list => "dead-letters",
        "dlq" => "dead-letters",
        "queues" | "compare" => "queues",
        "nodes" => "nodes",
        "clients" => "clients",
        "exchanges" => "exchanges",
        "alerts" => "alerts",
        "audit" | "jobs" => "audit",
        "access" => "access",
        "brokers" if path.ends_with("/nodes") => "nodes",
        "brokers" => "overview",
        _ => "",
    }
}

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
    !accept.contains("text/html") && !super::is_htmx(headers)
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
    let htmx = super::is_htmx(request.headers());
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
        return match auth::token(&state.db, presented, now).await.map_err(Refusal::Internal)? {
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
        if let Some(active) = auth::session(&state.db, cookie, idle, now).await.map_err(Refusal::Internal)? {
            return Ok((active.principal, Some(active.csrf_token)));
        }
    }
    if state.gate.auth_configured(&state.db).await.map_err(Refusal::Internal)? {
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
    super::error_page(status, message, me)
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

// ----- Login and logout -----

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

async fn login_page(
    State(state): State<AppState>,
    Query(query): Query<LoginQuery>,
) -> Result<Response, super::PageError> {
    let login_off = !state.gate.auth_configured(&state.db).await.map_err(auth_error)?;
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

fn auth_error(e: AuthError) -> WebError {
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
) -> Result<Response, super::PageError> {
    let peer = peer.ip();
    let next = safe_next(form.next.as_deref());
    let page = |status: StatusCode, error: String| -> Result<Response, super::PageError> {
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
    let throttled = state.gate.throttle().begin_login(peer, &form.name, std::time::Instant::now());
    if let Err(wait) = throttled {
        auth::record_login(&state.db, &form.name, peer, LoginOutcome::Throttled).await.map_err(auth_error)?;
        let mut response = page(
            StatusCode::TOO_MANY_REQUESTS,
            format!("Too many failed logins. Try again in {} seconds.", wait.as_secs().max(1)),
        )?;
        response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(wait.as_secs().max(1)));
        return Ok(response);
    }
    let Some(user) = auth::verify_password(&state.db, &form.name, &form.password).await.map_err(auth_error)? else {
        auth::record_login(&state.db, &form.name, peer, LoginOutcome::Failed).await.map_err(auth_error)?;
        return page(StatusCode::UNAUTHORIZED, "Wrong name or password.".into());
    };
    state.gate.throttle().login_succeeded(peer, &user.name);
    auth::record_login(&state.db, &user.name, peer, LoginOutcome::Success).await.map_err(auth_error)?;
    let ttl = state.gate.config.session_ttl;
    let session =
        auth::create_session(&state.db, &user, ttl, chrono::Utc::now().timestamp()).await.map_err(auth_error)?;
    let cookie = auth::session_cookie(&session.cookie, ttl, over_tls(&state, &headers), cookie_path(&state));
    Ok(([(header::SET_COOKIE, cookie)], Redirect::to(&state.href(&next))).into_response())
}

async fn logout(State(state): State<AppState>, headers: HeaderMap) -> Result<Response, super::PageError> {
    if let Some(cookie) = auth::session_cookie_from(&headers) {
        auth::end_session(&state.db, cookie).await.map_err(auth_error)?;
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

// ----- Accounts and tokens (JSON API, admin) -----

/// Who is asking (`GET /api/v1/me`).
#[derive(serde::Serialize, utoipa::ToSchema)]
pub(super) struct MeJson {
    name: String,
    role: Role,
    via: auth::How,
    /// How the audit log names the caller (`token:<name>` for a token).
    actor: String,
    /// The session's CSRF token, for scripts that use a session: another site cannot read this
    /// answer (no CORS), so it gives nothing away.
    csrf_token: String,
}

async fn me(access: Access) -> Json<MeJson> {
    let p = &access.principal;
    Json(MeJson { name: p.name.clone(), role: p.role, via: p.via, actor: p.actor(), csrf_token: access.csrf })
}

async fn list_users(State(state): State<AppState>) -> Result<Json<serde_json::Value>, ApiError> {
    // A `User` is its name, role, creation time (with its RFC 3339 twin) and whether it is
    // disabled: what this answer always listed.
    let users = auth::list_users(&state.db).await.map_err(account_error)?;
    Ok(Json(json!({ "users": users })))
}

#[derive(Deserialize)]
struct NewUser {
    name: String,
    role: Role,
    password: String,
}

/// Account errors are the admin's input problems (422/404/409), or storage errors.
fn account_error(e: AuthError) -> ApiError {
    ApiError(match e {
        AuthError::Db(e) => WebError::Database(e),
        AuthError::NoSuchUser(_) | AuthError::NoSuchToken(_) => WebError::NotFound(e.to_string()),
        AuthError::UserExists(_) | AuthError::TokenExists(_) | AuthError::LastAdmin(_) => {
            WebError::Conflict(e.to_string())
        }
        AuthError::InvalidName(_) => WebError::Invalid(vec![("name".into(), e.to_string())]),
        AuthError::Busy => WebError::Unavailable(e.to_string()),
        AuthError::PasswordTooShort | AuthError::PasswordTooLong => {
            WebError::Invalid(vec![("password".into(), e.to_string())])
        }
        other => WebError::BadRequest(other.to_string()),
    })
}

/// Records an account change in the audit log (kind `account`).
async fn audit_account(
    state: &AppState,
    access: &Access,
    action: &str,
    request: serde_json::Value,
) -> Result<(), ApiError> {
    crate::audit::account(&state.db, &access.principal.actor(), action, &request).await?;
    Ok(())
}

async fn add_user(
    State(state): State<AppState>,
    access: Access,
    Json(new): Json<NewUser>,
) -> Result<Response, ApiError> {
    auth::add_user(&state.db, &new.name, new.role, &new.password).await.map_err(account_error)?;
    audit_account(&state, &access, "user add", json!({"name": new.name, "role": new.role})).await?;
    Ok((StatusCode::CREATED, Json(json!({"name": new.name, "role": new.role}))).into_response())
}

async fn remove_user(
    State(state): State<AppState>,
    access: Access,
    Path(name): Path<String>,
) -> Result<Json<serde_json::Value>, ApiError> {
    auth::remove_user(&state.db, &name).await.map_err(account_error)?;
    audit_account(&state, &access, "user remove", json!({"name": name})).await?;
    Ok(Json(json!({"removed": name})))
}

#[derive(Deserialize)]
struct NewRole {
    role: Role,
}

/// Changes a user's role; the last enabled admin keeps it (409).
async fn set_role(
    State(state): State<AppState>,
    access: Access,
    Path(name): Path<String>,
    Json(body): Json<NewRole>,
) -> Result<Json<serde_json::Value>, ApiError> {
    auth::set_role(&state.db, &name, body.role).await.map_err(account_error)?;
    audit_account(&state, &access, "user role", json!({"name": name, "role": body.role})).await?;
    Ok(Json(json!({"name": name, "role": body.role})))
}

#[derive(Deserialize)]
struct NewPassword {
    password: String,
}

/// Sets a password and ends the user's sessions (whoever knew the old one is logged out).
async fn set_password(
    State(state): State<AppState>,
    access: Access,
    Path(name): Path<String>,
    Json(body): Json<NewPassword>,
) -> Result<Json<serde_json::Value>, ApiError> {
    // The password change ends the sessions itself, in its transaction: counting them after it
    // found none and answered `sessions_ended: 0`.
    let ended = auth::set_password(&state.db, &name, &body.password).await.map_err(account_error)?;
    audit_account(&state, &access, "user password", json!({"name": name})).await?;
    Ok(Json(json!({"name": name, "sessions_ended": ended})))
}

async fn list_tokens(State(state): State<AppState>) -> Result<Json<serde_json::Value>, ApiError> {
    let tokens = auth::list_tokens(&state.db).await.map_err(account_error)?;
    Ok(Json(json!({ "tokens": tokens })))
}

#[derive(Deserialize)]
struct NewTokenRequest {
    name: String,
    role: Role,
}

/// Creates an API token; the answer is the only place the token is ever shown.
async fn add_token(
    State(state): State<AppState>,
    access: Access,
    Json(body): Json<NewTokenRequest>,
) -> Result<Response, ApiError> {
    let now = chrono::Utc::now().timestamp();
    let actor = access.principal.actor();
    let token = auth::create_token(&state.db, &body.name, body.role, &actor, now).await.map_err(account_error)?;
    audit_account(&state, &access, "token add", json!({"name": body.name, "role": body.role, "id": token.id})).await?;
    let answer = json!({"id": token.id, "name": body.name, "role": body.role, "token": token.token,
        "note": "shown once: warren keeps only its hash"});
    Ok((StatusCode::CREATED, Json(answer)).into_response())
}

async fn revoke_token(
    State(state): State<AppState>,
    access: Access,
    Path(id): Path<i64>,
) -> Result<Json<serde_json::Value>, ApiError> {
    auth::revoke_token(&state.db, id).await.map_err(account_error)?;
    audit_account(&state, &access, "token revoke", json!({"id": id})).await?;
    Ok(Json(json!({"revoked": id})))
}

// ----- Accounts and tokens (HTML, admin) -----

#[derive(askama::Template)]
#[template(path = "access.html")]
struct AccessPage {
    me: Me,
    /// Each with when it was created.
    users: Vec<(auth::User, String)>,
    /// Each with when it was last used.
    tokens: Vec<(auth::TokenInfo, String)>,
    /// (ok, text): the outcome of the last form.
    notice: Option<(bool, String)>,
    /// A token just created: shown this once.
    new_token: Option<String>,
    proxy: Option<String>,
}

async fn render_access(
    state: &AppState,
    me: Me,
    notice: Option<(bool, String)>,
    new_token: Option<String>,
) -> Result<Response, super::PageError> {
    let page = AccessPage {
        me,
        users: auth::list_users(&state.db)
            .await
            .map_err(auth_error)?
            .into_iter()
            .map(|u| {
                let created = super::format::unix(u.created_at);
                (u, created)
            })
            .collect(),
        tokens: auth::list_tokens(&state.db)
            .await
            .map_err(auth_error)?
            .into_iter()
            .map(|t| {
                let used = t.last_used_at.map_or_else(|| "never".to_string(), super::format::unix);
                (t, used)
            })
            .collect(),
        notice,
        new_token,
        proxy: state.gate.proxy.as_ref().map(|p| {
            let trusted: Vec<String> = p.trusted.iter().map(ToString::to_string).collect();
            format!("header {} from {}", p.header, trusted.join(", "))
        }),
    };
    let status = match &page.notice {
        Some((false, _)) => StatusCode::UNPROCESSABLE_ENTITY,
        _ => StatusCode::OK,
    };
    // A page holding a fresh token must not be cached anywhere.
    Ok((status, [(header::CACHE_CONTROL, "no-store")], Html(askama::Template::render(&page)?)).into_response())
}

#[derive(Deserialize)]
struct NoticeQuery {
    notice: Option<String>,
}

async fn access_page(
    State(state): State<AppState>,
    me: Me,
    Query(q): Query<NoticeQuery>,
) -> Result<Response, super::PageError> {
    let notice = q.notice.and_then(|key| state.notices.take(&key)).map(|n| (n.ok, n.text));
    render_access(&state, me, notice, None).await
}

/// After a user form: back to the page with what it did, so that a reload shows the page rather
/// than posting the form again (issue 34, case 5).
fn back_to_access(state: &AppState, (ok, text): (bool, String)) -> Response {
    let key = state.notices.put(ok, text);
    axum::response::Redirect::to(&state.href(&format!("/access?notice={key}"))).into_response()
}

#[derive(Deserialize)]
struct UserForm {
    name: String,
    role: String,
    password: String,
}

/// Runs an account change for a form: its audit entry on success, its message either way.
async fn form_outcome(
    state: &AppState,
    access: &Access,
    done: Result<String, AuthError>,
    action: &str,
    request: serde_json::Value,
) -> Result<(bool, String), super::PageError> {
    match done {
        Ok(text) => {
            audit_account(state, access, action, request).await.map_err(|e| super::PageError(e.0))?;
            Ok((true, text))
        }
        Err(AuthError::Db(e)) => Err(WebError::Database(e).into()),
        Err(e) => Ok((false, e.to_string())),
    }
}

async fn add_user_form(
    State(state): State<AppState>,
    access: Access,
    Form(form): Form<UserForm>,
) -> Result<Response, super::PageError> {
    let done = async {
        let role: Role = form.role.parse()?;
        auth::add_user(&state.db, &form.name, role, &form.password).await?;
        Ok(format!("User {} ({role}) created.", form.name))
    }
    .await;
    let request = json!({"name": form.name, "role": form.role});
    let notice = form_outcome(&state, &access, done, "user add", request).await?;
    Ok(back_to_access(&state, notice))
}

#[derive(Deserialize)]
struct RemoveForm {
    /// The box that confirms the removal, which the form requires.
    #[serde(default)]
    confirmed: Option<String>,
}

async fn remove_user_form(
    State(state): State<AppState>,
    access: Access,
    Path(name): Path<String>,
    Form(form): Form<RemoveForm>,
) -> Result<Response, super::PageError> {
    if form.confirmed.as_deref() != Some("true") {
        return Ok(back_to_access(&state, (false, format!("User {name} was not removed: tick the box to confirm."))));
    }
    let done = auth::remove_user(&state.db, &name).await.map(|()| format!("User {name} removed."));
    let notice = form_outcome(&state, &access, done, "user remove", json!({"name": name})).await?;
    Ok(back_to_access(&state, notice))
}

#[derive(Deserialize)]
struct RoleForm {
    role: String,
}

async fn set_role_form(
    State(state): State<AppState>,
    access: Access,
    Path(name): Path<String>,
    Form(form): Form<RoleForm>,
) -> Result<Response, super::PageError> {
    let done = async {
        let role: Role = form.role.parse()?;
        auth::set_role(&state.db, &name, role).await?;
        Ok(format!("{name} is now {role}."))
    }
    .await;
    let notice = form_outcome(&state, &access, done, "user role", json!({"name": name, "role": form.role})).await?;
    Ok(back_to_access(&state, notice))
}

#[derive(Deserialize)]
struct TokenForm {
    name: String,
    role: String,
}

async fn add_token_form(
    State(state): State<AppState>,
    access: Access,
    Form(form): Form<TokenForm>,
) -> Result<Response, super::PageError> {
    let now = chrono::Utc::now().timestamp();
    let created = async {
        let role: Role = form.role.parse()?;
        auth::create_token(&state.db, &form.name, role, &access.principal.actor(), now).await
    }
    .await;
    let (done, token) = match created {
        Ok(t) => (
            Ok(format!("Token {} created (id {}). Copy it now: it is not shown again.", form.name, t.id)),
            Some(t.token),
        ),
        Err(e) => (Err(e), None),
    };
    let request = json!({"name": form.name, "role": form.role});
    let notice = form_outcome(&state, &access, done, "token add", request).await?;
    render_access(&state, Me::of(&access), Some(notice), token).await
}

async fn revoke_token_form(
    State(state): State<AppState>,
    access: Access,
    Path(id): Path<i64>,
) -> Result<Response, super::PageError> {
    let done = auth::revoke_token(&state.db, id).await.map(|()| format!("Token {id} revoked."));
    let notice = form_outcome(&state, &access, done, "token revoke", json!({"id": id})).await?;
    render_access(&state, Me::of(&access), Some(notice), None).await
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
    fn form_fields_are_found_and_decoded() {
        assert_eq!(form_field(b"a=1&csrf_token=abc-_x&b=2", "csrf_token").as_deref(), Some("abc-_x"));
        assert_eq!(form_field(b"csrf_token=a%2Bb+c", "csrf_token").as_deref(), Some("a+b c"));
        assert_eq!(form_field(b"xcsrf_token=1", "csrf_token"), None);
        assert_eq!(form_field(b"\xff\xfe", "csrf_token"), None);
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
