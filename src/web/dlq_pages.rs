//! The dead-letter browser: a queue's snapshot as a table, with counts by reason and original
//! queue, filters, and a detail view per message. Reading the queue happens only on an explicit
//! POST (take or refresh the snapshot); viewing never touches the broker.

use std::collections::BTreeMap;

use askama::Template;
use axum::extract::{Path, Query, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::{Form, Json, Router};
use serde::Deserialize;
use serde_json::{json, Value};

use super::api::find_queue;
use super::format;
use super::pages::queue_href;
use super::{html, ApiError, PageError, WebError};
use crate::browse::{self, BrowseError, Snapshot, SnapshotMessage};
use crate::management::encode_segment;
use crate::metrics::QueueView;
use crate::state::AppState;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/dlq/{broker}/{vhost}/{queue}", get(page))
        .route("/dlq/{broker}/{vhost}/{queue}/snapshot", post(take_form))
        .route("/dlq/{broker}/{vhost}/{queue}/requeue", post(requeue_form))
        .route("/dlq/{broker}/{vhost}/{queue}/messages/{position}", get(message_page))
        .route("/dlq/{broker}/{vhost}/{queue}/messages/{position}/payload", get(download))
        .route("/api/v1/queues/{broker}/{vhost}/{queue}/snapshot", get(snapshot_json).post(take_json))
}

fn dlq_href(broker: &str, vhost: &str, queue: &str) -> String {
    format!("/dlq/{}/{}/{}", encode_segment(broker), encode_segment(vhost), encode_segment(queue))
}

#[derive(Debug, Deserialize)]
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

async fn take(
    state: &AppState,
    view: &QueueView,
    request: &TakeRequest,
) -> Result<std::sync::Arc<Snapshot>, BrowseError> {
    let broker = state.broker_config(&view.broker).expect("views come from configured brokers");
    browse::take(broker, &state.snapshots, view, request.count.unwrap_or(browse::DEFAULT_COUNT), request.confirmed())
        .await
}

async fn take_json(
    State(state): State<AppState>,
    Path((broker, vhost, queue)): Path<(String, String, String)>,
    Json(request): Json<TakeRequest>,
) -> Result<Response, ApiError> {
    let view = find_queue(&state, &broker, &vhost, &queue).await?;
    match take(&state, &view, &request).await {
        Ok(snapshot) => Ok(Json(snapshot.as_ref().clone()).into_response()),
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
    Path((broker, vhost, queue)): Path<(String, String, String)>,
) -> Result<Json<Snapshot>, ApiError> {
    let snapshot = state
        .snapshots
        .get(&broker, &vhost, &queue)
        .ok_or_else(|| WebError::NotFound("no snapshot taken yet: POST to take one".to_string()))?;
    Ok(Json(snapshot.as_ref().clone()))
}

#[derive(Template)]
#[template(path = "dlq.html")]
struct DlqPage {
    name: String,
    vhost: String,
    broker: String,
    queue_href: String,
    self_href: String,
    total: String,
    age: String,
    age_title: &'static str,
    sources: Vec<(String, String)>,
    notice: Option<String>,
    needs_confirmation: Option<String>,
    snapshot: Option<SnapshotView>,
}

struct SnapshotView {
    taken_at: String,
    requested: usize,
    count: usize,
    delivery_limit: Option<i64>,
    by_reason: Vec<(String, usize)>,
    by_queue: Vec<(String, usize)>,
    rows: Vec<Row>,
    shown: usize,
    filter_reason: String,
    filter_queue: String,
    filter_text: String,
}

struct Row {
    href: String,
    position: usize,
    message_id: String,
    original_queue: String,
    reason: String,
    death_count: i64,
    first_death: String,
    routing_key: String,
    size: String,
    content_type: String,
    delivery_count: String,
}

#[derive(Debug, Default, Deserialize)]
struct Filters {
    reason: Option<String>,
    original: Option<String>,
    text: Option<String>,
}

fn unknown_if_none(v: Option<String>) -> String {
    v.unwrap_or_else(|| format::UNKNOWN.to_string())
}

fn matches(m: &SnapshotMessage, f: &Filters) -> bool {
    let non_empty = |o: &Option<String>| o.as_deref().map(str::trim).filter(|s| !s.is_empty()).map(str::to_string);
    if let Some(reason) = non_empty(&f.reason) {
        if m.reason.as_deref() != Some(reason.as_str()) {
            return false;
        }
    }
    if let Some(queue) = non_empty(&f.original) {
        if m.original_queue.as_deref() != Some(queue.as_str()) {
            return false;
        }
    }
    if let Some(needle) = non_empty(&f.text) {
        let needle = needle.to_lowercase();
        let headers = m.message.properties.get("headers").map(Value::to_string).unwrap_or_default();
        let payload = String::from_utf8_lossy(&browse::payload_bytes(&m.message)).to_lowercase();
        if !payload.contains(&needle) && !headers.to_lowercase().contains(&needle) {
            return false;
        }
    }
    true
}

fn counts(values: impl Iterator<Item = Option<String>>) -> Vec<(String, usize)> {
    let mut map: BTreeMap<String, usize> = BTreeMap::new();
    for v in values {
        *map.entry(unknown_if_none(v)).or_default() += 1;
    }
    let mut out: Vec<(String, usize)> = map.into_iter().collect();
    out.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    out
}

fn snapshot_view(snapshot: &Snapshot, base: &str, f: &Filters) -> SnapshotView {
    let rows: Vec<Row> = snapshot
        .messages
        .iter()
        .filter(|m| matches(m, f))
        .map(|m| Row {
            href: format!("{base}/messages/{}", m.position),
            position: m.position,
            message_id: unknown_if_none(m.message_id.clone()),
            original_queue: unknown_if_none(m.original_queue.clone()),
            reason: unknown_if_none(m.reason.clone()),
            death_count: m.death_count,
            first_death: m
                .first_death_at
                .and_then(|t| chrono::DateTime::from_timestamp(t, 0))
                .map(|t| format::time(Some(t)))
                .unwrap_or_else(|| format::UNKNOWN.to_string()),
            routing_key: m.routing_key.clone(),
            size: format!("{} B", format::count(Some(m.payload_bytes))),
            content_type: unknown_if_none(m.content_type.clone()),
            delivery_count: m.delivery_count.map(|c| c.to_string()).unwrap_or_else(|| format::UNKNOWN.to_string()),
        })
        .collect();
    SnapshotView {
        taken_at: format::time(Some(snapshot.taken_at)),
        requested: snapshot.requested,
        count: snapshot.messages.len(),
        delivery_limit: snapshot.delivery_limit,
        by_reason: counts(snapshot.messages.iter().map(|m| m.reason.clone())),
        by_queue: counts(snapshot.messages.iter().map(|m| m.original_queue.clone())),
        shown: rows.len(),
        rows,
        filter_reason: f.reason.clone().unwrap_or_default(),
        filter_queue: f.original.clone().unwrap_or_default(),
        filter_text: f.text.clone().unwrap_or_default(),
    }
}

fn render_page(
    state: &AppState,
    view: &QueueView,
    filters: &Filters,
    notice: Option<String>,
    needs_confirmation: Option<String>,
) -> Result<String, WebError> {
    let base = dlq_href(&view.broker, &view.vhost, &view.name);
    let snapshot = state.snapshots.get(&view.broker, &view.vhost, &view.name);
    let page = DlqPage {
        name: view.name.clone(),
        vhost: view.vhost.clone(),
        broker: view.broker.clone(),
        queue_href: queue_href(&view.broker, &view.vhost, &view.name),
        total: format::count(view.total),
        age: format::age(view),
        age_title: format::age_title(view),
        sources: view
            .dead_letters
            .dead_letter_sources
            .iter()
            .map(|s| (s.clone(), queue_href(&view.broker, &view.vhost, s)))
            .collect(),
        notice,
        needs_confirmation,
        snapshot: snapshot.map(|s| snapshot_view(&s, &base, filters)),
        self_href: base,
    };
    Ok(page.render()?)
}

async fn page(
    State(state): State<AppState>,
    Path((broker, vhost, queue)): Path<(String, String, String)>,
    Query(filters): Query<Filters>,
) -> Result<Response, PageError> {
    let view = find_queue(&state, &broker, &vhost, &queue).await?;
    Ok(html(render_page(&state, &view, &filters, None, None)?))
}

async fn take_form(
    State(state): State<AppState>,
    Path((broker, vhost, queue)): Path<(String, String, String)>,
    Form(request): Form<TakeRequest>,
) -> Result<Response, PageError> {
    let view = find_queue(&state, &broker, &vhost, &queue).await?;
    match take(&state, &view, &request).await {
        // Post/redirect/get: a reload of the page never reads the queue again.
        Ok(_) => Ok(Redirect::to(&dlq_href(&broker, &vhost, &queue)).into_response()),
        Err(BrowseError::NeedsConfirmation(message)) => {
            let body = render_page(&state, &view, &Filters::default(), None, Some(message))?;
            Ok((StatusCode::CONFLICT, html(body)).into_response())
        }
        Err(e) => {
            let body = render_page(&state, &view, &Filters::default(), Some(e.to_string()), None)?;
            Ok((StatusCode::BAD_GATEWAY, html(body)).into_response())
        }
    }
}

#[derive(Template)]
#[template(path = "dlq_message.html")]
struct MessagePage {
    name: String,
    back_href: String,
    download_href: String,
    row: Row,
    properties: Vec<(String, String)>,
    headers: Vec<(String, String, bool)>,
    deaths: Vec<Vec<(String, String)>>,
    payload_kind: &'static str,
    payload: String,
    truncated: Option<String>,
}

fn snapshot_message(
    state: &AppState,
    broker: &str,
    vhost: &str,
    queue: &str,
    position: usize,
) -> Result<SnapshotMessage, WebError> {
    let snapshot = state
        .snapshots
        .get(broker, vhost, queue)
        .ok_or_else(|| WebError::NotFound("no snapshot of this queue yet".to_string()))?;
    snapshot
        .messages
        .iter()
        .find(|m| m.position == position)
        .cloned()
        .ok_or_else(|| WebError::NotFound(format!("no message at position {position} in the snapshot")))
}

/// A header value as text; nested tables as indented JSON.
fn show(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => serde_json::to_string_pretty(other).unwrap_or_else(|_| other.to_string()),
    }
}

async fn message_page(
    State(state): State<AppState>,
    Path((broker, vhost, queue, position)): Path<(String, String, String, usize)>,
) -> Result<Response, PageError> {
    let m = snapshot_message(&state, &broker, &vhost, &queue, position)?;
    let base = dlq_href(&broker, &vhost, &queue);
    let headers_map = m.message.properties.get("headers").and_then(Value::as_object).cloned().unwrap_or_default();
    let deaths = headers_map
        .get("x-death")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_object)
                .map(|d| d.iter().map(|(k, v)| (k.clone(), show(v))).collect())
                .collect()
        })
        .unwrap_or_default();
    // Error texts that consumer libraries add (Spring's x-exception-*, and similar).
    let highlighted = |k: &str| k.starts_with("x-exception") || k.contains("error") || k.contains("stacktrace");
    let headers = headers_map
        .iter()
        .filter(|(k, _)| *k != "x-death")
        .map(|(k, v)| (k.clone(), show(v), highlighted(k)))
        .collect();
    let properties =
        m.message.properties.iter().filter(|(k, _)| *k != "headers").map(|(k, v)| (k.clone(), show(v))).collect();
    let (payload_kind, payload) = browse::render_payload(&m.message);
    let kept = browse::payload_bytes(&m.message).len() as u64;
    let truncated = (kept < m.payload_bytes).then(|| {
        format!("showing the first {} of {} bytes", format::count(Some(kept)), format::count(Some(m.payload_bytes)))
    });
    let page = MessagePage {
        name: queue.clone(),
        back_href: base.clone(),
        download_href: format!("{base}/messages/{position}/payload"),
        row: snapshot_view(
            &Snapshot {
                taken_at: chrono::Utc::now(),
                queue_type: String::new(),
                delivery_limit: None,
                requested: 1,
                messages: vec![m.clone()],
            },
            &base,
            &Filters::default(),
        )
        .rows
        .remove(0),
        properties,
        headers,
        deaths,
        payload_kind,
        payload,
        truncated,
    };
    Ok(html(page.render()?))
}

async fn download(
    State(state): State<AppState>,
    Path((broker, vhost, queue, position)): Path<(String, String, String, usize)>,
) -> Result<Response, PageError> {
    let m = snapshot_message(&state, &broker, &vhost, &queue, position)?;
    let bytes = browse::payload_bytes(&m.message);
    let truncated = (bytes.len() as u64) < m.payload_bytes;
    Ok((
        [
            (header::CONTENT_TYPE, "application/octet-stream".to_string()),
            (header::CONTENT_DISPOSITION, format!("attachment; filename=\"message-{position}.bin\"")),
            (header::HeaderName::from_static("x-warren-truncated"), truncated.to_string()),
        ],
        bytes,
    )
        .into_response())
}

/// The requeue form's fields; `position` repeats, which a plain `Form` cannot read.
struct RequeueForm {
    positions: Vec<usize>,
    all: bool,
    /// Delete the selected messages instead of moving them.
    delete: bool,
    /// Empty the whole queue.
    purge: bool,
    target_queue: String,
    confirmed: bool,
}

fn parse_requeue_form(body: &str) -> Result<RequeueForm, WebError> {
    let mut form = RequeueForm {
        positions: Vec::new(),
        all: false,
        delete: false,
        purge: false,
        target_queue: String::new(),
        confirmed: false,
    };
    for pair in body.split('&').filter(|p| !p.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        let value = percent_encoding::percent_decode_str(&value.replace('+', " ")).decode_utf8_lossy().into_owned();
        match key {
            "position" => form
                .positions
                .push(value.parse().map_err(|_| WebError::BadRequest(format!("position: {value:?} is not a number")))?),
            "scope" => {
                form.all = value == "all";
                form.delete = value == "delete-selected";
                form.purge = value == "purge";
            }
            "target_queue" => form.target_queue = value.trim().to_string(),
            "confirm" => form.confirmed = value == "true",
            _ => {}
        }
    }
    if !form.all && !form.purge && form.positions.is_empty() {
        return Err(WebError::BadRequest("select at least one message, or requeue all".to_string()));
    }
    Ok(form)
}

struct ActionResult {
    outcome: String,
    moved: Vec<(usize, String, String)>,
    failed: Vec<(usize, String, String)>,
    returned: usize,
    error: Option<String>,
}

impl ActionResult {
    /// An action that stopped before any message moved.
    fn failed(error: &dyn std::fmt::Display) -> Self {
        ActionResult {
            outcome: "failed".to_string(),
            moved: Vec::new(),
            failed: Vec::new(),
            returned: 0,
            error: Some(error.to_string()),
        }
    }
}

#[derive(Template)]
#[template(path = "dlq_action.html")]
struct ActionPage {
    action: &'static str,
    name: String,
    back_href: String,
    what: String,
    target: String,
    positions: Vec<usize>,
    scope: &'static str,
    target_queue: String,
    result: Option<ActionResult>,
}

async fn requeue_form(
    State(state): State<AppState>,
    Path((broker, vhost, queue)): Path<(String, String, String)>,
    body: String,
) -> Result<Response, PageError> {
    let view = find_queue(&state, &broker, &vhost, &queue).await?;
    let form = parse_requeue_form(&body)?;
    let action = if form.purge {
        "Purge"
    } else if form.delete {
        "Delete"
    } else {
        "Requeue"
    };
    let mut page = ActionPage {
        action,
        name: queue.clone(),
        back_href: dlq_href(&broker, &vhost, &queue),
        what: if form.all || form.purge {
            "every message".to_string()
        } else {
            format!(
                "message(s) at position {}",
                form.positions.iter().map(usize::to_string).collect::<Vec<_>>().join(", ")
            )
        },
        target: if form.purge || form.delete {
            "nowhere: they are deleted for good".to_string()
        } else if form.target_queue.is_empty() {
            "the queue each message died in (x-first-death-queue)".to_string()
        } else {
            format!("queue {:?}", form.target_queue)
        },
        positions: form.positions.clone(),
        scope: if form.purge {
            "purge"
        } else if form.delete {
            "delete-selected"
        } else if form.all {
            "all"
        } else {
            "selected"
        },
        target_queue: form.target_queue.clone(),
        result: None,
    };
    // Every action asks first; the confirmation page posts the same form back with confirm=true.
    if !form.confirmed {
        return Ok(html(page.render()?));
    }
    if form.purge {
        let (_, outcome) = super::actions::run_purge(&state, &view).await?;
        page.result = Some(match outcome {
            Ok(n) => ActionResult {
                outcome: format!("done, {n} messages deleted"),
                moved: Vec::new(),
                failed: Vec::new(),
                returned: 0,
                error: None,
            },
            Err(e) => ActionResult::failed(&e),
        });
        return Ok(html(page.render()?));
    }
    let request = super::actions::RequeueRequest {
        selection: if form.all { crate::dlq::Selection::All } else { crate::dlq::Selection::Positions(form.positions) },
        target: if form.delete {
            crate::dlq::Target::Discard
        } else if form.target_queue.is_empty() {
            crate::dlq::Target::OriginalQueue
        } else {
            crate::dlq::Target::Queue(form.target_queue)
        },
    };
    let outcome = super::actions::run_requeue(&state, &view, &request).await?;
    let id = |m: &Option<String>| m.clone().unwrap_or_else(|| format::UNKNOWN.to_string());
    page.result = Some(match outcome.result {
        Ok((result, report)) => ActionResult {
            outcome: result.to_string(),
            moved: report
                .moved
                .iter()
                .map(|m| {
                    let to = if m.to_queue.is_empty() { "(deleted)".to_string() } else { m.to_queue.clone() };
                    (m.position, id(&m.message_id), to)
                })
                .collect(),
            failed: report.failed.iter().map(|f| (f.position, id(&f.message_id), f.reason.clone())).collect(),
            returned: report.returned,
            error: None,
        },
        Err(e) => ActionResult::failed(&e),
    });
    Ok(html(page.render()?))
}
