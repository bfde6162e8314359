//! A queue's snapshot: taking one (an explicit POST, the only read of the queue the browser
//! makes) and reading it back in the JSON API, as the asker's role may read it.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::snapshot_view::counts;
use crate::dlq::browse::{self, BrowseError, Snapshot};
use crate::dlq::message;
use crate::metrics::QueueView;
use crate::state::AppState;
use crate::web::error::{ApiError, WebError};
use crate::web::identity::Access;
use crate::web::lookup::find_queue;

pub fn router() -> Router<AppState> {
    Router::new().route("/api/v1/queues/{broker}/{vhost}/{queue}/snapshot", get(snapshot_json).post(take_json))
}

#[derive(Debug, Deserialize, utoipa::ToSchema)]
pub struct TakeRequest {
    pub count: Option<usize>,
    /// Required for a quorum queue with a delivery limit.
    #[serde(default)]
    pub confirm: Option<String>,
}

impl TakeRequest {
    fn confirmed(&self) -> bool {
        matches!(self.confirm.as_deref(), Some("true" | "on" | "1"))
    }
}

pub(super) async fn take(
    state: &AppState,
    view: &QueueView,
    request: &TakeRequest,
) -> Result<Arc<Snapshot>, BrowseError> {
    let broker = state.broker_config(&view.broker).expect("views come from configured brokers");
    browse::take(
        broker,
        (&state.store, &state.snapshots),
        view,
        request.count.unwrap_or(browse::DEFAULT_COUNT),
        request.confirmed(),
    )
    .await
}

async fn take_json(
    State(state): State<AppState>,
    access: Access,
    Path((broker, vhost, queue)): Path<(String, String, String)>,
    Json(request): Json<TakeRequest>,
) -> Result<Response, ApiError> {
    let view = find_queue(&state, &broker, &vhost, &queue).await?;
    match take(&state, &view, &request).await {
        Ok(snapshot) => {
            let readable = readable_snapshot(&state, access.principal.role, (&broker, &vhost, &queue), &snapshot);
            Ok(Json(SnapshotAnswer::of(readable)).into_response())
        }
        Err(BrowseError::NeedsConfirmation(message)) => {
            Ok((StatusCode::CONFLICT, Json(json!({"error": {"code": "confirmation_required", "message": message}})))
                .into_response())
        }
        Err(e) => Ok((StatusCode::BAD_GATEWAY, Json(json!({"error": {"code": "broker", "message": e.to_string()}})))
            .into_response()),
    }
}

async fn snapshot_json(
    State(state): State<AppState>,
    access: Access,
    Path((broker, vhost, queue)): Path<(String, String, String)>,
) -> Result<Json<SnapshotAnswer>, ApiError> {
    let snapshot = state
        .snapshots
        .get(&broker, &vhost, &queue)
        .ok_or_else(|| WebError::NotFound("no snapshot taken yet: POST to take one".to_string()))?;
    let readable = readable_snapshot(&state, access.principal.role, (&broker, &vhost, &queue), &snapshot);
    Ok(Json(SnapshotAnswer::of(readable)))
}

/// A snapshot in the API, with its messages grouped by the cause of their error as the page's
/// "By error" groups them (issue 31, must-have 6), from what the asker may read: below a
/// restricting rule's role the errors are gone, and so are the groups.
#[derive(Serialize, utoipa::ToSchema)]
pub(crate) struct SnapshotAnswer {
    #[serde(flatten)]
    snapshot: Snapshot,
    by_error: Vec<SnapshotErrorGroup>,
}

#[derive(Serialize, utoipa::ToSchema)]
struct SnapshotErrorGroup {
    /// `framework::error_group`: the error's type and its message's fingerprint.
    group: String,
    messages: usize,
    /// The group's texts as recorded, with their messages, most first (at most
    /// `custody::VARIANTS_SHOWN`; `variant_count` says how many there are).
    variants: Vec<crate::dlq::custody::Variant>,
    variant_count: usize,
}

impl SnapshotAnswer {
    fn of(snapshot: Snapshot) -> SnapshotAnswer {
        let lines = snapshot.messages.iter().filter_map(message::error_line).map(Some);
        let errors = counts(lines).into_iter().map(|(line, n)| (line, n, 0, 0));
        let by_error = crate::dlq::custody::error_groups(errors)
            .into_iter()
            .map(|g| SnapshotErrorGroup {
                group: g.value,
                messages: g.records,
                variant_count: g.variant_count.max(g.variants.len()),
                variants: g.variants,
            })
            .collect();
        SnapshotAnswer { snapshot, by_error }
    }
}

/// A snapshot as `role` may read it: a queue a `[[custody]]` rule covers keeps its payloads,
/// headers and errors from the roles below the rule's in the broker too (`restricted`).
pub(super) fn readable_snapshot(
    state: &AppState,
    role: crate::auth::Role,
    queue: (&str, &str, &str),
    snapshot: &Snapshot,
) -> Snapshot {
    if crate::web::restricted::may_read(state, role, queue) {
        snapshot.clone()
    } else {
        crate::web::restricted::snapshot(snapshot)
    }
}
