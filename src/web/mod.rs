//! HTTP: HTML pages, the JSON API, static assets, health checks. Every router is merged here
//! (each wing merges the routers of its files in its `mod.rs`).
//!
//! Inside `web/`, as in `src/`, every import points down (`tests/layers.rs` checks it):
//!
//! - the shared bottom, files of `web/` that every wing may use: `error.rs` (`WebError` and its
//!   JSON form), `format.rs`, `htmx.rs`, `links.rs` (where each wing's pages are), then
//!   `identity.rs` (who is asking), `query.rs`, `freshness.rs`, `lookup.rs` (a broker or queue by
//!   name), `firing.rs` (the alerts firing now), then `error_page.rs` and `restricted.rs`;
//! - the wings, one folder each, which use the shared bottom and never each other: `access/`
//!   (the gate, login, accounts and tokens, the audit log), `alerts/` (rules, silences, the alerts
//!   page), `brokers/` (the overview, queues, nodes, clients, exchanges, a broker's load, their
//!   JSON), `dlq/` (dead letters: snapshots, moves, custody, jobs); and the pages that stand
//!   alone: `assets.rs`, `docs.rs`, `prometheus.rs`;
//! - above the wings `openapi.rs`, which describes their API, and on top this file, which merges
//!   every router.

mod access;
mod alerts;
mod api_reference;
mod assets;
pub(crate) mod brokers;
mod dlq;
mod docs;
mod error;
mod error_page;
mod firing;
mod format;
mod freshness;
mod htmx;
mod identity;
mod links;
mod lookup;
mod openapi;
mod prometheus;
pub mod query;
mod restricted;

/// The parsers of request input that live with their handlers, public so that the fuzz targets
/// (`fuzz/`) run the handlers' own code on generated input, without a server.
pub mod input {
    pub use super::access::safe_next;
    pub use super::alerts::{silence_hours, RuleForm};
    pub use super::dlq::{parse_requeue_form, RequeueForm, TakeRequest};
}

use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde_json::json;

pub use self::error::{ApiError, WebError};
pub use self::error_page::PageError;
pub use self::identity::{Access, Me};
use crate::state::AppState;

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
        .merge(alerts::router())
        .merge(brokers::router())
        .merge(dlq::router())
        .merge(assets::router())
        .merge(docs::router())
        .merge(prometheus::router())
        .merge(openapi::router())
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
        .fallback(error_page::not_found)
        // Inside the gate, which has identified the user by then.
        .layer(axum::middleware::from_fn_with_state(state.clone(), error_page::error_pages))
        .layer(axum::middleware::from_fn_with_state(state.clone(), access::gate))
        .layer(axum::middleware::from_fn(error::api_errors))
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
    let database = state.storage.check(&*state.store).await;
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
