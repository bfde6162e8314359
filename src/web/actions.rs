//! State-changing actions (POST only), in the JSON API. Each is recorded in the audit log
//! before it runs and updated when it ends.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::json;

use super::api::find_queue;
use super::{ApiError, WebError};
use crate::audit;
use crate::dlq::{self, MoveError, Selection, Target};
use crate::state::AppState;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/api/v1/queues/{broker}/{vhost}/{queue}/requeue", post(requeue))
        .route("/api/v1/queues/{broker}/{vhost}/{queue}/delete", post(delete))
        .route("/api/v1/queues/{broker}/{vhost}/{queue}/purge", post(purge))
        .route("/api/v1/audit", get(audit_log))
        .route("/audit", get(audit_page))
}

struct AuditRow {
    at: String,
    actor: String,
    action: String,
    broker: String,
    vhost: String,
    queue: String,
    outcome: String,
    outcome_class: &'static str,
    moved: i64,
    failed: i64,
    message_ids: String,
    detail: String,
}

#[derive(askama::Template)]
#[template(path = "audit.html")]
struct AuditPage {
    rows: Vec<AuditRow>,
}

async fn audit_page(State(state): State<AppState>) -> Result<Response, super::PageError> {
    let rows = audit::recent(&state.db, 500)
        .await?
        .into_iter()
        .map(|r| AuditRow {
            at: super::format::time(chrono::DateTime::from_timestamp(r.at, 0)),
            outcome_class: match r.outcome.as_str() {
                "done" => "info",
                "failed" => "bad",
                _ => "warn",
            },
            actor: r.actor,
            action: r.action,
            broker: r.broker,
            vhost: r.vhost,
            queue: r.queue,
            outcome: r.outcome,
            moved: r.moved,
            failed: r.failed,
            message_ids: r.message_ids.to_string(),
            detail: r.detail.unwrap_or_default(),
        })
        .collect();
    Ok(super::html(askama::Template::render(&AuditPage { rows })?))
}

#[derive(Debug, Deserialize, serde::Serialize)]
pub struct RequeueRequest {
    pub selection: Selection,
    #[serde(default)]
    pub target: Target,
}

/// How a requeue ended, as recorded in the audit log.
pub struct RequeueOutcome {
    pub audit_id: i64,
    /// `done`, `partial` or `failed`, or the error that stopped it before any message moved.
    pub result: Result<(&'static str, dlq::MoveReport), MoveError>,
}

/// Runs a requeue with its audit entry (written before it starts, updated when it ends). The
/// message copies are made and acked by `dlq::move_messages`; this only records and reports.
pub async fn run_requeue(
    state: &AppState,
    view: &crate::metrics::QueueView,
    request: &RequeueRequest,
) -> Result<RequeueOutcome, WebError> {
    let config = state
        .broker_config(&view.broker)
        .ok_or_else(|| WebError::NotFound(format!("no broker named {:?}", view.broker)))?;
    let entry = audit::Entry {
        actor: "anonymous",
        broker: &view.broker,
        vhost: &view.vhost,
        queue: &view.name,
        action: if request.target == Target::Discard { "delete" } else { "requeue" },
        request: serde_json::to_string(request).expect("request serialises"),
    };
    let audit_id = audit::start(&state.db, entry).await?;
    let limit = crate::browse::delivery_limit(view);
    let outcome = dlq::move_messages(config, &view.vhost, &view.name, &request.selection, &request.target, limit).await;
    // Whatever moved changed the queue's head: the snapshot's positions no longer hold.
    state.snapshots.forget(&view.broker, &view.vhost, &view.name);
    match outcome {
        Ok(report) => {
            let ids: Vec<Option<String>> = report.moved.iter().map(|m| m.message_id.clone()).collect();
            let result = if report.failed.is_empty() {
                "done"
            } else if report.moved.is_empty() {
                "failed"
            } else {
                "partial"
            };
            let detail = report.failed.first().map(|f| f.reason.clone());
            audit::finish(
                &state.db,
                audit_id,
                result,
                report.moved.len(),
                report.failed.len(),
                &ids,
                detail.as_deref(),
            )
            .await?;
            Ok(RequeueOutcome { audit_id, result: Ok((result, report)) })
        }
        Err(e) => {
            audit::finish(&state.db, audit_id, "failed", 0, 0, &[], Some(&e.to_string())).await?;
            Ok(RequeueOutcome { audit_id, result: Err(e) })
        }
    }
}

#[derive(Debug, Deserialize)]
pub struct DeleteRequest {
    pub selection: Selection,
}

/// Deletes the selected messages: read and acked without a copy. Destructive by intent.
async fn delete(
    State(state): State<AppState>,
    Path((broker, vhost, queue)): Path<(String, String, String)>,
    Json(request): Json<DeleteRequest>,
) -> Result<Response, ApiError> {
    let request = RequeueRequest { selection: request.selection, target: Target::Discard };
    respond(&state, &broker, &vhost, &queue, &request).await
}

/// Runs a purge with its audit entry; returns the audit id and how many messages went.
pub async fn run_purge(
    state: &AppState,
    view: &crate::metrics::QueueView,
) -> Result<(i64, Result<u32, MoveError>), WebError> {
    let config = state
        .broker_config(&view.broker)
        .ok_or_else(|| WebError::NotFound(format!("no broker named {:?}", view.broker)))?;
    let entry = audit::Entry {
        actor: "anonymous",
        broker: &view.broker,
        vhost: &view.vhost,
        queue: &view.name,
        action: "purge",
        request: "{}".to_string(),
    };
    let audit_id = audit::start(&state.db, entry).await?;
    let outcome = dlq::purge(config, &view.vhost, &view.name).await;
    state.snapshots.forget(&view.broker, &view.vhost, &view.name);
    match &outcome {
        Ok(n) => audit::finish(&state.db, audit_id, "done", *n as usize, 0, &[], None).await?,
        Err(e) => audit::finish(&state.db, audit_id, "failed", 0, 0, &[], Some(&e.to_string())).await?,
    }
    Ok((audit_id, outcome))
}

async fn purge(
    State(state): State<AppState>,
    Path((broker, vhost, queue)): Path<(String, String, String)>,
) -> Result<Response, ApiError> {
    let view = find_queue(&state, &broker, &vhost, &queue).await?;
    let (audit_id, outcome) = run_purge(&state, &view).await?;
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
    Path((broker, vhost, queue)): Path<(String, String, String)>,
    Json(request): Json<RequeueRequest>,
) -> Result<Response, ApiError> {
    if request.target == Target::Discard {
        return Err(WebError::BadRequest("use the delete action to delete messages".to_string()).into());
    }
    respond(&state, &broker, &vhost, &queue, &request).await
}

async fn respond(
    state: &AppState,
    broker: &str,
    vhost: &str,
    queue: &str,
    request: &RequeueRequest,
) -> Result<Response, ApiError> {
    let view = find_queue(state, broker, vhost, queue).await?;
    let outcome = run_requeue(state, &view, request).await?;
    let audit_id = outcome.audit_id;
    match outcome.result {
        Ok((result, report)) => {
            let status = if result == "failed" { StatusCode::CONFLICT } else { StatusCode::OK };
            Ok((status, Json(json!({"outcome": result, "report": report, "audit_id": audit_id}))).into_response())
        }
        Err(e) => {
            let status = match e {
                MoveError::Refused(_) => StatusCode::UNPROCESSABLE_ENTITY,
                _ => StatusCode::BAD_GATEWAY,
            };
            let body = json!({"error": {"code": "move_failed", "message": e.to_string()}, "audit_id": audit_id});
            Ok((status, Json(body)).into_response())
        }
    }
}

async fn audit_log(State(state): State<AppState>) -> Result<Json<Vec<audit::Record>>, ApiError> {
    Ok(Json(audit::recent(&state.db, 500).await?))
}
