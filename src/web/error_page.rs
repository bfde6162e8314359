//! Errors as HTML pages: `PageError`, the error page in the site's layout with the header of
//! whoever asked, and the answer to a path no route serves. The JSON form of the same errors is
//! `error.rs`.

use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{Html, IntoResponse, Response};
use axum::Json;

use crate::state::AppState;
use crate::web::error::{ErrorBody, WebError};
use crate::web::identity::{Access, Me};

#[derive(askama::Template)]
#[template(path = "error.html")]
pub struct ErrorPage {
    pub me: Me,
    pub status: u16,
    pub message: String,
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
pub fn error_page(status: StatusCode, message: String, me: Me) -> Response {
    let page = ErrorPage { status: status.as_u16(), message, me };
    let html = askama::Template::render(&page)
        .unwrap_or_else(|_| "<!doctype html><title>error</title><p>error</p>".to_string());
    (status, Html(html)).into_response()
}

/// Renders a handler's error page with the user it answers (their name, role and log-out
/// button stay in the header), and with the base path on its links on public routes too.
pub(super) async fn error_pages(
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

/// No route: a JSON error for the API, a page with the navigation for everyone else. Said with
/// the path as it was asked for, base path included.
pub(super) async fn not_found(
    uri: axum::http::Uri,
    axum::extract::OriginalUri(asked): axum::extract::OriginalUri,
    headers: HeaderMap,
) -> Response {
    let path = asked.path();
    if uri.path().starts_with("/api/")
        || !headers.get(header::ACCEPT).is_some_and(|a| a.to_str().unwrap_or("").contains("html"))
    {
        let message = format!("no such resource: {path}");
        return (StatusCode::NOT_FOUND, Json(ErrorBody::new("not_found", message, None))).into_response();
    }
    PageError(WebError::NotFound(format!(
        "There is no page at {path}. The navigation above leads to every page; dead-letter queues are under Dead letters."
    )))
    .into_response()
}
