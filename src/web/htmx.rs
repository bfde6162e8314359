//! A page or its fragment: htmx asks for the live fragment alone (same URL, `HX-Request`
//! header), every other client gets the full page, so each URL works without JavaScript too.

use axum::http::{header, HeaderMap};
use axum::response::{Html, IntoResponse, Response};

/// htmx asks for a fragment; everyone else gets the full page.
pub fn is_htmx(headers: &HeaderMap) -> bool {
    headers.get("hx-request").is_some_and(|v| v == "true")
}

/// An HTML response that varies on `HX-Request`, so caches keep fragment and page apart.
pub fn html(body: String) -> Response {
    ([(header::VARY, "HX-Request")], Html(body)).into_response()
}
