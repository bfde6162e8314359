//! Static assets, embedded in the binary so that the binary alone is the whole product.
//! Vendored libraries carry their version in the file name and are cached for a year.

use axum::extract::Path;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;

use crate::state::AppState;

/// (file name, content type, bytes)
const ASSETS: &[(&str, &str, &[u8])] = &[
    ("htmx-2.0.11.min.js", "text/javascript", include_bytes!("../../static/htmx-2.0.11.min.js")),
    ("uplot-1.6.32.min.js", "text/javascript", include_bytes!("../../static/uplot-1.6.32.min.js")),
    ("uplot-1.6.32.min.css", "text/css", include_bytes!("../../static/uplot-1.6.32.min.css")),
    ("warren.css", "text/css", include_bytes!("../../static/warren.css")),
    ("favicon.svg", "image/svg+xml", include_bytes!("../../static/favicon.svg")),
    ("warren.js", "text/javascript", include_bytes!("../../static/warren.js")),
];

pub fn router() -> Router<AppState> {
    Router::new().route("/static/{file}", get(asset))
}

/// Browsers ask for `/favicon.ico` whatever the page links: the same icon (SVG, which they take).
pub async fn favicon() -> Response {
    asset(Path("favicon.svg".to_string())).await
}

async fn asset(Path(file): Path<String>) -> Response {
    let Some((name, content_type, bytes)) = ASSETS.iter().find(|(name, _, _)| *name == file) else {
        return (StatusCode::NOT_FOUND, "no such asset").into_response();
    };
    // Versioned vendor files never change; warren's own files change with releases.
    let cache = if name.starts_with("warren.") || name.starts_with("favicon.") {
        "public, max-age=300"
    } else {
        "public, max-age=31536000, immutable"
    };
    ([(header::CONTENT_TYPE, *content_type), (header::CACHE_CONTROL, cache)], *bytes).into_response()
}
