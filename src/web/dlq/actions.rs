//! State-changing actions (POST only), in the JSON API. Each is recorded in the audit log
//! before it runs and updated when it ends (the log's views are in `access/audit.rs`).

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::json;

use super::moves::{run_purge, start_move, strandings, target_queue_names, would_strand};
use crate::dlq::jobs::{Choice, MoveRequest};
use crate::dlq::Target;
use crate::state::AppState;
use crate::web::error::{ApiError, WebError};
use crate::web::identity::Access;
use crate::web::lookup::find_queue;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/api/v1/queues/{broker}/{vhost}/{queue}/requeue", post(requeue))
        .route("/api/v1/queues/{broker}/{vhost}/{queue}/delete", post(delete))
        .route("/api/v1/queues/{broker}/{vhost}/{queue}/purge", post(purge))
}

#[derive(Debug, Deserialize)]
pub struct DeleteRequest {
    pub selection: Choice,
}

/// Deletes the selected messages: read and acked without a copy. Destructive by intent.
async fn delete(
    State(state): State<AppState>,
    access: Access,
    Path((broker, vhost, queue)): Path<(String, String, String)>,
    Json(request): Json<DeleteRequest>,
) -> Result<Response, ApiError> {
    let request = MoveRequest {
        selection: request.selection,
        target: Target::Discard,
        accept_drop_head: false,
        accept_stranding: false,
    };
    respond(&state, &access, &broker, &vhost, &queue, request).await
}

async fn purge(
    State(state): State<AppState>,
    access: Access,
    Path((broker, vhost, queue)): Path<(String, String, String)>,
) -> Result<Response, ApiError> {
    let view = find_queue(&state, &broker, &vhost, &queue).await?;
    let (audit_id, outcome) = run_purge(&state, &view, &access.principal.actor()).await?;
    match outcome {
        Ok(purged) => Ok(Json(json!({"outcome": "done", "purged": purged, "audit_id": audit_id})).into_response()),
        Err(e) => Ok((
            StatusCode::BAD_GATEWAY,
            Json(json!({"error": {"code": "purge_failed", "message": e.to_string()}, "audit_id": audit_id})),
        )
            .into_response()),
    }
}

async fn requeue(
    State(state): State<AppState>,
    access: Access,
    Path((broker, vhost, queue)): Path<(String, String, String)>,
    Json(request): Json<MoveRequest>,
) -> Result<Response, ApiError> {
    if request.target == Target::Discard {
        return Err(WebError::BadRequest("use the delete action to delete messages".to_string()).into());
    }
    respond(&state, &access, &broker, &vhost, &queue, request).await
}

/// 202 with the job's status and where to follow it, or 422 when the move was refused.
async fn respond(
    state: &AppState,
    access: &Access,
    broker: &str,
    vhost: &str,
    queue: &str,
    request: MoveRequest,
) -> Result<Response, ApiError> {
    let view = find_queue(state, broker, vhost, queue).await?;
    if let Choice::Matching(filter) = &request.selection {
        crate::web::restricted::check_filter(state, access.principal.role, (broker, vhost, queue), filter)?;
    }
    if !request.accept_stranding {
        // The rule the confirmation page states (issue 31, must-have 5).
        let targets = target_queue_names(state, &view, &request.target, &request.selection).await?;
        if let Some(s) = strandings(state, &view, &targets).into_iter().next() {
            return Ok(would_strand(&s, "nothing was moved"));
        }
    }
    match start_move(state, &view, request, &access.principal.actor()).await? {
        Ok(job) => Ok((
            StatusCode::ACCEPTED,
            Json(json!({
                "job": job.status(),
                "status_url": state.href(&format!("/api/v1/jobs/{}", job.id)),
                "page_url": state.href(&format!("/jobs/{}", job.id)),
            })),
        )
            .into_response()),
        Err(e) => Ok((
            StatusCode::UNPROCESSABLE_ENTITY,
            Json(json!({"error": {"code": "refused", "message": e.to_string()}})),
        )
            .into_response()),
    }
}
