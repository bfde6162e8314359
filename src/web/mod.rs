//! HTTP: HTML pages, the JSON API, static assets, health checks. Routes are merged here.

mod access;
mod actions;
mod alert_pages;
mod alerts;
mod api;
mod assets;
mod audit;
mod brokers;
mod clients;
pub mod custody;
mod dlq_pages;
mod docs;
mod format;
mod freshness;
mod jobs;
mod nodes;
mod openapi;
mod pages;
mod prometheus;
pub mod query;
mod restricted;
mod topology;

/// The parsers of request input that live with their handlers, public so that the fuzz targets
/// (`fuzz/`) run the handlers' own code on generated input, without a server.
pub mod input {
    pub use super::access::safe_next;
    pub use super::alert_pages::{silence_hours, RuleForm};
    pub use super::dlq_pages::{parse_requeue_form, RequeueForm, TakeRequest};
}

use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde_json::json;

pub use self::access::{Access, Me};
use crate::state::AppState;

/// Every route, under the base path of `public_url` too. A proxy at `/warren/` forwards
/// `/warren/queues` as it is (nginx `proxy_pass http://warren;`) or without the prefix
/// (`proxy_pass http://warren/;`): both are served, so either configuration works and the
/// health checks still answer probes that go straight to warren. Routes, the gate and handlers
/// only ever see warren's own paths (`/queues`): the prefix is taken off here and put on every
/// URL warren writes (`AppState::href`, `Me::base`).
pub fn router(state: AppState) -> Router {
    let base = state.base_path.clone();
    let app = routes(state);
    if base.is_empty() {
        return app;
    }
    // A path segment of `public_url` may start with `:` or `*`, which axum 0.7 read as captures;
    // braces, which 0.8 reads so, come percent-encoded out of the URL parser.
    Router::new().without_v07_checks().nest_service(&base, app.clone()).fallback_service(app)
}

fn routes(state: AppState) -> Router {
    Router::new()
        .merge(access::router())
        .merge(pages::router())
        .merge(api::router())
        .merge(actions::router())
        .merge(custody::router())
        .merge(audit::router())
        .merge(alerts::router())
        .merge(alert_pages::router())
        .merge(dlq_pages::router())
        .merge(jobs::router())
        .merge(assets::router())
        .merge(prometheus::router())
        .merge(brokers::router())
        .merge(clients::router())
        .merge(topology::router())
        .merge(nodes::router())
        .merge(openapi::router())
        .merge(docs::router())
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        // The obvious guess for a list of dead-letter queues.
        .route(
            "/dlq",
            get(|state: axum::extract::State<AppState>| async move {
                axum::response::Redirect::to(&state.href("/queues?dlq=true"))
            }),
        )
        .route("/favicon.ico", get(assets::favicon))
        .fallback(not_found)
        // Inside the gate, which has identified the user by then.
        .layer(axum::middleware::from_fn_with_state(state.clone(), error_pages))
        .layer(axum::middleware::from_fn_with_state(state.clone(), access::gate))
        .layer(axum::middleware::from_fn(api_errors))
        .layer(axum::middleware::map_response(security_headers))
        .layer(tower_http::trace::TraceLayer::new_for_http())
        .with_state(state)
}

/// The browser may run only warren's own scripts and styles (no inline script, so a payload or
/// a queue name that slipped through escaping still could not run), show no page in a frame,
/// and not guess content types. CSSOM changes from those scripts (uPlot sizes its canvas that
/// way) are not inline styles and stay allowed.
const CONTENT_SECURITY_POLICY: &str = "default-src 'self'; script-src 'self'; style-src 'self'; \
    img-src 'self' data:; connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; \
    frame-ancestors 'none'";

async fn security_headers(mut response: Response) -> Response {
    use axum::http::HeaderValue;
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CONTENT_SECURITY_POLICY));
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(header::REFERRER_POLICY, HeaderValue::from_static("same-origin"));
    response
}

/// The process is alive and serving.
async fn healthz() -> &'static str {
    "ok"
}

/// The database can be written (the file is the one opened, and a write goes through) and every
/// broker has been polled at least once.
async fn readyz(axum::extract::State(state): axum::extract::State<AppState>) -> Response {
    let database = state.storage.check(&state.db).await;
    let brokers = state.live.snapshot();
    let waiting: Vec<&str> =
        brokers.iter().filter(|b| b.status.last_attempt.is_none()).map(|b| b.name.as_str()).collect();
    let ready = database.is_ok() && waiting.is_empty();
    let status = if ready { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE };
    let body = json!({
        "ready": ready,
        "database": database.is_ok(),
        "database_problem": database.err(),
        "brokers_not_polled_yet": waiting,
    });
    (status, Json(body)).into_response()
}

/// Errors of the web boundary, mapped to a response in one place (`respond`).
#[derive(Debug, thiserror::Error)]
pub enum WebError {
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    BadRequest(String),
    /// Input that parsed but is not valid, with a message per field.
    #[error("{}", .0.iter().map(|(f, m)| format!("{f}: {m}")).collect::<Vec<_>>().join("; "))]
    Invalid(Vec<(String, String)>),
    #[error("{0}")]
    Conflict(String),
    /// The role may not read this (payloads restricted by a `[[custody]]` rule).
    #[error("{0}")]
    Forbidden(String),
    /// warren is busy (too many password checks at once): try again soon.
    #[error("{0}")]
    Unavailable(String),
    #[error("database error")]
    Database(#[from] sqlx::Error),
    /// warren's database cannot be written (full, read-only, locked, gone): said as such, since
    /// the request may be fine and the broker up.
    #[error("warren's database cannot be written, so nothing was done: {0}")]
    Storage(String),
    #[error("template error")]
    Template(#[from] askama::Error),
}

impl WebError {
    fn status(&self) -> StatusCode {
        match self {
            WebError::NotFound(_) => StatusCode::NOT_FOUND,
            WebError::BadRequest(_) => StatusCode::BAD_REQUEST,
            WebError::Invalid(_) => StatusCode::UNPROCESSABLE_ENTITY,
            WebError::Conflict(_) => StatusCode::CONFLICT,
            WebError::Forbidden(_) => StatusCode::FORBIDDEN,
            WebError::Unavailable(_) | WebError::Storage(_) => StatusCode::SERVICE_UNAVAILABLE,
            WebError::Database(_) | WebError::Template(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    fn code(&self) -> &'static str {
        match self {
            WebError::NotFound(_) => "not_found",
            WebError::BadRequest(_) => "bad_request",
            WebError::Invalid(_) => "invalid",
            WebError::Conflict(_) => "conflict",
            WebError::Forbidden(_) => "forbidden",
            WebError::Unavailable(_) => "unavailable",
            WebError::Storage(_) => "storage",
            WebError::Database(_) | WebError::Template(_) => "internal",
        }
    }

    /// Internal details go to the log, not to the client.
    fn log(&self) {
        match self {
            WebError::Database(e) => {
                tracing::error!(error = %e, "database error while serving a request")
            }
            WebError::Template(e) => {
                tracing::error!(error = %e, "template error while serving a request")
            }
            _ => {}
        }
    }
}

/// A `WebError` answered as JSON (the API).
pub struct ApiError(pub WebError);

impl<E: Into<WebError>> From<E> for ApiError {
    fn from(e: E) -> Self {
        ApiError(e.into())
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        self.0.log();
        let fields = match &self.0 {
            WebError::Invalid(fields) => Some(
                fields
                    .iter()
                    .map(|(field, message)| openapi::FieldError { field: field.clone(), message: message.clone() })
                    .collect(),
            ),
            _ => None,
        };
        (self.0.status(), Json(openapi::ErrorBody::new(self.0.code(), self.0.to_string(), fields))).into_response()
    }
}

/// A `WebError` answered as an HTML page.
pub struct PageError(pub WebError);

impl<E: Into<WebError>> From<E> for PageError {
    fn from(e: E) -> Self {
        PageError(e.into())
    }
}

impl IntoResponse for PageError {
    fn into_response(self) -> Response {
        self.0.log();
        let (status, message) = (self.0.status(), self.0.to_string());
        // A handler's error knows nothing of who asked: `error_pages` renders it again with the
        // user's header and navigation.
        let mut response = error_page(status, message.clone(), Me::default());
        response.extensions_mut().insert(ErrorToRender(message));
        response
    }
}

/// An error page's message, for `error_pages` to render again with who asked.
#[derive(Clone)]
struct ErrorToRender(String);

/// An error as a full page, with the layout's navigation.
pub(crate) fn error_page(status: StatusCode, message: String, me: Me) -> Response {
    let page = pages::ErrorPage { status: status.as_u16(), message, me };
    let html = askama::Template::render(&page)
        .unwrap_or_else(|_| "<!doctype html><title>error</title><p>error</p>".to_string());
    (status, Html(html)).into_response()
}

/// Renders a handler's error page with the user it answers (their name, role and log-out
/// button stay in the header), and with the base path on its links on public routes too.
async fn error_pages(
    axum::extract::State(state): axum::extract::State<AppState>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let me = match request.extensions().get::<Access>() {
        Some(access) => Me::of(access),
        None => Me::public(&state),
    };
    let response = next.run(request).await;
    match response.extensions().get::<ErrorToRender>() {
        Some(ErrorToRender(message)) => error_page(response.status(), message.clone(), me),
        None => response,
    }
}

/// Every error of the JSON API in one shape, `{"error": {"code", "message"}}` (issue 36, case 8):
/// the framework's own rejections (a path segment or query that does not parse, a body that is
/// not JSON or too large, a missing content type, a method the route does not take) came as
/// plain text or an empty body. Their words are kept as the message; headers such as `Allow`
/// stay.
async fn api_errors(request: axum::extract::Request, next: axum::middleware::Next) -> Response {
    let api = request.uri().path().starts_with("/api/");
    let response = next.run(request).await;
    let status = response.status();
    let json =
        response.headers().get(header::CONTENT_TYPE).is_some_and(|v| v.as_bytes().starts_with(b"application/json"));
    if !api || json || !(status.is_client_error() || status.is_server_error()) {
        return response;
    }
    let (parts, body) = response.into_parts();
    let text = axum::body::to_bytes(body, 4096).await.map(|b| String::from_utf8_lossy(&b).trim().to_string());
    let message = match text {
        Ok(text) if !text.is_empty() => text,
        _ => status.canonical_reason().unwrap_or("error").to_string(),
    };
    let code = match status.as_u16() {
        400 => "bad_request",
        401 => "unauthorized",
        403 => "forbidden",
        404 => "not_found",
        405 => "method_not_allowed",
        409 => "conflict",
        413 => "too_large",
        415 => "unsupported_media_type",
        422 => "invalid",
        429 => "too_many_requests",
        503 => "unavailable",
        500..=599 => "internal",
        _ => "error",
    };
    let mut answer = (status, Json(openapi::ErrorBody::new(code, message, None))).into_response();
    for (name, value) in &parts.headers {
        if name != header::CONTENT_TYPE && name != header::CONTENT_LENGTH {
            answer.headers_mut().insert(name.clone(), value.clone());
        }
    }
    answer
}

/// No route: a JSON error for the API, a page with the navigation for everyone else. Said with
/// the path as it was asked for, base path included.
async fn not_found(
    uri: axum::http::Uri,
    axum::extract::OriginalUri(asked): axum::extract::OriginalUri,
    headers: HeaderMap,
) -> Response {
    let path = asked.path();
    if uri.path().starts_with("/api/")
        || !headers.get(header::ACCEPT).is_some_and(|a| a.to_str().unwrap_or("").contains("html"))
    {
        let message = format!("no such resource: {path}");
        return (StatusCode::NOT_FOUND, Json(openapi::ErrorBody::new("not_found", message, None))).into_response();
    }
    PageError(WebError::NotFound(format!(
        "There is no page at {path}. The navigation above leads to every page; dead-letter queues are under Dead letters."
    )))
    .into_response()
}

/// htmx asks for a fragment; everyone else gets the full page.
fn is_htmx(headers: &HeaderMap) -> bool {
    headers.get("hx-request").is_some_and(|v| v == "true")
}

/// An HTML response that varies on `HX-Request`, so caches keep fragment and page apart.
fn html(body: String) -> Response {
    ([(header::VARY, "HX-Request")], Html(body)).into_response()
}
