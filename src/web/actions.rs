//! State-changing actions (POST only), in the JSON API. Each is recorded in the audit log
//! before it runs and updated when it ends (the log's views are in `audit.rs`).

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::json;

use super::api::find_queue;
use super::{ApiError, WebError};
use std::sync::Arc;

use crate::audit;
use crate::dlq::jobs::{self, Choice, Job, MoveRequest, StartError};
use crate::dlq::{self, MoveError, Target};
use crate::state::AppState;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/api/v1/queues/{broker}/{vhost}/{queue}/requeue", post(requeue))
        .route("/api/v1/queues/{broker}/{vhost}/{queue}/delete", post(delete))
        .route("/api/v1/queues/{broker}/{vhost}/{queue}/purge", post(purge))
}

/// Starts a move as a background job (`dlq::jobs::start`), as the actor of the request.
pub async fn start_move(
    state: &AppState,
    view: &crate::metrics::QueueView,
    request: MoveRequest,
    actor: &str,
) -> Result<Result<Arc<Job>, MoveError>, WebError> {
    match jobs::start(&state.dlq(), view, request, actor).await {
        Ok(job) => Ok(Ok(job)),
        Err(StartError::Refused(e)) => Ok(Err(e)),
        Err(StartError::NoBroker(name)) => Err(WebError::NotFound(format!("no broker named {name:?}"))),
        Err(StartError::Storage(why)) => Err(WebError::Storage(why)),
        Err(busy @ StartError::Busy(_)) => Err(WebError::Conflict(busy.to_string())),
        Err(StartError::Stale(why)) => Err(WebError::Conflict(why)),
    }
}

#[derive(Debug, Deserialize)]
pub struct DeleteRequest {
    pub selection: Choice,
}

/// Deletes the selected messages: read and acked without a copy. Destructive by intent.
async fn delete(
    State(state): State<AppState>,
    access: super::Access,
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

/// Runs a purge with its audit entry; returns the audit id and how many messages went.
pub async fn run_purge(
    state: &AppState,
    view: &crate::metrics::QueueView,
    actor: &str,
) -> Result<(i64, Result<u32, MoveError>), WebError> {
    let config = state
        .broker_config(&view.broker)
        .ok_or_else(|| WebError::NotFound(format!("no broker named {:?}", view.broker)))?;
    let entry = audit::Entry {
        actor,
        broker: &view.broker,
        vhost: &view.vhost,
        queue: &view.name,
        action: "purge",
        request: "{}".to_string(),
    };
    state.storage.check(&state.db).await.map_err(WebError::Storage)?;
    let audit_id = audit::start(&state.db, entry)
        .await
        .map_err(|e| WebError::Storage(state.storage.failed("the audit log", &e)))?;
    let outcome = dlq::purge(config, &view.vhost, &view.name).await;
    let what = match &outcome {
        Ok(n) => format!("the purge of {n} messages"),
        Err(_) => "a purge that failed".to_string(),
    };
    let what = format!("{what} at {}", chrono::Utc::now().format("%Y-%m-%d %H:%M:%S UTC"));
    let queue = (view.broker.as_ref(), view.vhost.as_ref(), view.name.as_ref());
    crate::dlq::browse::outdate(&state.db, &state.snapshots, queue, &what).await;
    match &outcome {
        Ok(n) => crate::dlq::fates::finish(&state.db, audit_id, "done", *n as usize, 0, None, &[]).await?,
        Err(e) => crate::dlq::fates::finish(&state.db, audit_id, "failed", 0, 0, Some(&e.to_string()), &[]).await?,
    }
    Ok((audit_id, outcome))
}

async fn purge(
    State(state): State<AppState>,
    access: super::Access,
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
    access: super::Access,
    Path((broker, vhost, queue)): Path<(String, String, String)>,
    Json(request): Json<MoveRequest>,
) -> Result<Response, ApiError> {
    if request.target == Target::Discard {
        return Err(WebError::BadRequest("use the delete action to delete messages".to_string()).into());
    }
    respond(&state, &access, &broker, &vhost, &queue, request).await
}

/// 409 `would_strand`: copies sent to `s.queue` would stay there for good. The answer of every
/// API path that puts messages back (moves, requeues, custody replays) unless the request
/// accepts the risk.
pub(super) fn would_strand(s: &crate::dlq::target::Stranding, nothing: &str) -> Response {
    let instead = match &s.instead {
        Some(q) => format!("; send them to {q:?} instead (target {{\"queue\": {q:?}}})"),
        None => String::new(),
    };
    let message = format!(
        "queue {:?} {}{instead}, or confirm the risk with \"accept_stranding\": true; {nothing}",
        s.queue, s.says
    );
    let error = json!({"error": {
        "code": "would_strand",
        "message": message,
        "queue": s.queue,
        "suggested_target": s.instead,
    }});
    (StatusCode::CONFLICT, Json(error)).into_response()
}

/// 202 with the job's status and where to follow it, or 422 when the move was refused.
async fn respond(
    state: &AppState,
    access: &super::Access,
    broker: &str,
    vhost: &str,
    queue: &str,
    request: MoveRequest,
) -> Result<Response, ApiError> {
    let view = find_queue(state, broker, vhost, queue).await?;
    if let Choice::Matching(filter) = &request.selection {
        super::restricted::check_filter(state, access.principal.role, (broker, vhost, queue), filter)?;
    }
    if !request.accept_stranding {
        // The rule the confirmation page states (issue 31, must-have 5).
        let targets = super::dlq_pages::target_queue_names(state, &view, &request.target, &request.selection).await?;
        if let Some(s) = super::dlq_pages::strandings(state, &view, &targets).into_iter().next() {
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
