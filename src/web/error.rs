//! Errors of the web boundary (`WebError`) and their JSON form: one type, one shape of answer
//! (`ErrorBody`), one place that maps each to a status code. The HTML form of the same errors is
//! `error_page.rs`, which needs to know who asked.

use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Serialize;
use utoipa::ToSchema;

/// Errors of the web boundary, mapped to a response in one place (`ApiError` here, `PageError` in `error_page.rs`).
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
    pub(super) fn status(&self) -> StatusCode {
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
    pub(super) fn log(&self) {
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
                    .map(|(field, message)| FieldError { field: field.clone(), message: message.clone() })
                    .collect(),
            ),
            _ => None,
        };
        (self.0.status(), Json(ErrorBody::new(self.0.code(), self.0.to_string(), fields))).into_response()
    }
}

/// Every error of the API: `{"error": {"code", "message"}}`, with `fields` when input parsed
/// but was not valid (422).
#[derive(Serialize, ToSchema)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

impl ErrorBody {
    pub fn new(code: &str, message: String, fields: Option<Vec<FieldError>>) -> ErrorBody {
        ErrorBody { error: ErrorDetail { code: code.to_string(), message, fields } }
    }
}

#[derive(Serialize, ToSchema)]
pub struct ErrorDetail {
    /// What went wrong, for programs: `bad_request`, `unauthorized`, `forbidden`, `not_found`,
    /// `method_not_allowed`, `conflict`, `too_large`, `unsupported_media_type`, `invalid`,
    /// `too_many_requests`, `unavailable`, `storage`, `internal`.
    pub code: String,
    /// What went wrong, for people.
    pub message: String,
    /// One message per field that did not validate (422 only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fields: Option<Vec<FieldError>>,
}

#[derive(Serialize, ToSchema)]
pub struct FieldError {
    pub field: String,
    pub message: String,
}

/// Every error of the JSON API in one shape, `{"error": {"code", "message"}}` (issue 36, case 8):
/// the framework's own rejections (a path segment or query that does not parse, a body that is
/// not JSON or too large, a missing content type, a method the route does not take) came as
/// plain text or an empty body. Their words are kept as the message; headers such as `Allow`
/// stay.
pub(super) async fn api_errors(request: axum::extract::Request, next: axum::middleware::Next) -> Response {
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
    let mut answer = (status, Json(ErrorBody::new(code, message, None))).into_response();
    for (name, value) in &parts.headers {
        if name != header::CONTENT_TYPE && name != header::CONTENT_LENGTH {
            answer.headers_mut().insert(name.clone(), value.clone());
        }
    }
    answer
}

/// Parses a JSON body. serde's message names the field ("unknown field `x`", "missing field
/// `metric`", "unknown variant `sideways`") with the line and column.
pub fn parse<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, WebError> {
    serde_json::from_slice(body).map_err(|e| WebError::Invalid(vec![("body".to_string(), e.to_string())]))
}
