//! Following a move: its status in the API, a page with a live progress bar (htmx refreshes
//! the fragment every second while the move runs), a cancel button, and the final report.

use askama::Template;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::json;

use crate::audit;
use crate::dlq::jobs::{JobStatus, Method};
use crate::state::AppState;
use crate::web::error::ApiError;
use crate::web::error::WebError;
use crate::web::error_page::PageError;
use crate::web::format;
use crate::web::freshness::Freshness;
use crate::web::htmx::html;
use crate::web::htmx::is_htmx;
use crate::web::identity::Access;
use crate::web::identity::Me;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/api/v1/jobs/{id}", get(job_json))
        .route("/api/v1/jobs/{id}/cancel", post(cancel_json))
        .route("/jobs/{id}", get(page))
        .route("/jobs/{id}/cancel", post(cancel_form))
}

/// A job's status: from memory while warren runs it (and for a while after), else from the
/// audit log.
pub async fn job_status(state: &AppState, id: i64) -> Result<JobStatus, WebError> {
    if let Some(job) = state.jobs.get(id) {
        return Ok(job.status());
    }
    let record = audit::get(&state.store, id)
        .await?
        .filter(|r| r.action != "purge" && r.kind == audit::Kind::Action)
        .ok_or_else(|| WebError::NotFound(format!("no move with id {id}")))?;
    let fates = crate::dlq::fates::messages(&state.store, id).await?;
    Ok(JobStatus::from_audit(record, fates))
}

/// A job's status as `role` may read it (`restricted::job`): the API and the page alike.
async fn job_status_for(state: &AppState, id: i64, role: crate::auth::Role) -> Result<JobStatus, WebError> {
    let mut status = job_status(state, id).await?;
    crate::web::restricted::job(state, role, &mut status).await?;
    Ok(status)
}

async fn job_json(
    State(state): State<AppState>,
    access: Access,
    Path(id): Path<i64>,
) -> Result<Json<JobStatus>, ApiError> {
    Ok(Json(job_status_for(&state, id, access.principal.role).await?))
}

/// Asks a running job to stop: it stops reading, settles the copies in flight, and gives back
/// what it holds. 409 when the job already ended.
async fn cancel_json(State(state): State<AppState>, Path(id): Path<i64>) -> Result<Response, ApiError> {
    let status = job_status(&state, id).await?;
    let Some(job) = state.jobs.get(id).filter(|_| status.state == "running") else {
        return Ok((
            StatusCode::CONFLICT,
            Json(json!({"error": {"code": "not_running", "message": format!("this move already ended ({})", status.state)}})),
        )
            .into_response());
    };
    job.cancel();
    Ok((StatusCode::ACCEPTED, Json(job.status())).into_response())
}

/// Rows of the final report shown on the page; the API and the audit log have them all.
const SHOWN_ROWS: usize = 1000;

#[derive(Template)]
#[template(path = "job.html")]
struct JobPage {
    me: Me,
    title: String,
    back_href: String,
    fragment: String,
}

#[derive(Template)]
#[template(path = "job_progress.html")]
struct JobFragment {
    me: Me,
    freshness: Freshness,
    self_href: String,
    api_href: String,
    running: bool,
    state: String,
    state_class: &'static str,
    method: String,
    /// What the job does to each message: `moved`, or `replayed` from custody.
    verb: &'static str,
    /// Where what a cancel leaves stays.
    stays_in: &'static str,
    started: String,
    expected: u64,
    moved: u64,
    failed: u64,
    read: u64,
    percent: u64,
    left: Option<u32>,
    stopped: Option<String>,
    note: Option<String>,
    error: Option<String>,
    moved_rows: Vec<(usize, String, String)>,
    failed_rows: Vec<(usize, String, String)>,
    /// Position, message id, holding queue.
    held_rows: Vec<(usize, String, String)>,
    /// Selected and not found: position in the snapshot, message id.
    not_found_rows: Vec<(usize, String)>,
    more_moved: usize,
    from_audit_only: bool,
}

fn fragment(status: &JobStatus, me: Me) -> JobFragment {
    let p = status.progress;
    let id = |m: &Option<String>| m.clone().unwrap_or_else(|| format::UNKNOWN.to_string());
    let report = status.report.as_ref();
    let moved_rows: Vec<(usize, String, String)> = report
        .map(|r| {
            r.moved
                .iter()
                .take(SHOWN_ROWS)
                .map(|m| {
                    let to = if m.to_queue.is_empty() { "(deleted)".to_string() } else { m.to_queue.clone() };
                    (m.position, id(&m.message_id), to)
                })
                .collect()
        })
        .unwrap_or_default();
    let running = status.state == "running";
    JobFragment {
        me,
        // A running move's page asks for its progress every second (`job_progress.html`).
        freshness: if running {
            Freshness::rendered(1)
        } else {
            Freshness::still("The move has ended: this report no longer changes.")
        },
        self_href: format!("/jobs/{}", status.id),
        api_href: format!("/api/v1/jobs/{}", status.id),
        running,
        state_class: match status.state.as_str() {
            "running" | "done" => "info",
            "failed" | "interrupted" => "bad",
            _ => "warn",
        },
        state: status.state.clone(),
        method: match status.method {
            Some(Method::InProcess) => "warren's mover (publisher confirms)".to_string(),
            Some(Method::Custody) => "a replay from warren's custody (publisher confirms, mandatory)".to_string(),
            None => format::UNKNOWN.to_string(),
        },
        verb: if status.method == Some(Method::Custody) { "replayed" } else { "moved" },
        stays_in: if status.method == Some(Method::Custody) { "custody" } else { "the queue" },
        started: format::time(Some(status.started_at)),
        expected: p.expected,
        moved: p.moved,
        failed: p.failed,
        read: p.read,
        percent: (p.moved * 100).checked_div(p.expected).unwrap_or(0).min(100),
        left: report.and_then(|r| r.left),
        stopped: report.and_then(|r| r.stopped.clone()),
        note: report.and_then(|r| r.note.clone()),
        error: status.error.clone(),
        more_moved: report.map(|r| r.moved.len().saturating_sub(SHOWN_ROWS)).unwrap_or(0),
        failed_rows: report
            .map(|r| r.failed.iter().map(|f| (f.position, id(&f.message_id), f.reason.clone())).collect())
            .unwrap_or_default(),
        held_rows: report
            .map(|r| r.held.iter().map(|h| (h.position, id(&h.message_id), h.queue.clone())).collect())
            .unwrap_or_default(),
        not_found_rows: report
            .map(|r| r.not_found.iter().map(|w| (w.position, id(&w.message_id))).collect())
            .unwrap_or_default(),
        moved_rows,
        from_audit_only: status.method.is_none(),
    }
}

async fn page(
    State(state): State<AppState>,
    me: Me,
    Path(id): Path<i64>,
    headers: HeaderMap,
) -> Result<Response, PageError> {
    let status = job_status_for(&state, id, crate::web::restricted::role_of(&me)).await?;
    let fragment = fragment(&status, me.clone()).render()?;
    if is_htmx(&headers) {
        return Ok(html(fragment));
    }
    let page = JobPage {
        me,
        title: format!("{} from {}", status.action, status.queue),
        back_href: format!(
            "/dlq/{}/{}/{}",
            crate::broker::management::encode_segment(&status.broker),
            crate::broker::management::encode_segment(&status.vhost),
            crate::broker::management::encode_segment(&status.queue)
        ),
        fragment,
    };
    Ok(html(page.render()?))
}

async fn cancel_form(State(state): State<AppState>, Path(id): Path<i64>) -> Result<Response, PageError> {
    job_status(&state, id).await?;
    if let Some(job) = state.jobs.get(id) {
        job.cancel();
    }
    Ok(Redirect::to(&state.href(&format!("/jobs/{id}"))).into_response())
}
