//! Custody in the JSON API (issue 18): what warren holds of a DLQ, grouped and filtered over
//! every record, its export and import as JSON lines, and replays from it, each recorded in the
//! audit log like a move. What the pages do too is `custody.rs`.

use axum::body::Body;
use axum::extract::{DefaultBodyLimit, Path, Query, State};
use axum::http::header;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::json;

use super::custody::{delete_record, edit_record, payloads_for, release_custody, start_custody, start_replay};
use super::moves::{strandings, would_strand};
use super::search::search_failed;
use crate::audit;
use crate::dlq::custody::{self, ReplayRequest};
use crate::dlq::message::Filter;
use crate::dlq::transfer;
use crate::state::AppState;
use crate::web::error::{ApiError, WebError};
use crate::web::identity::Access;
use crate::web::lookup::find_queue;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/api/v1/queues/{broker}/{vhost}/{queue}/custody", get(listing))
        .route("/api/v1/queues/{broker}/{vhost}/{queue}/custody/replay", post(replay))
        .route("/api/v1/queues/{broker}/{vhost}/{queue}/custody/start", post(start_json))
        .route("/api/v1/queues/{broker}/{vhost}/{queue}/custody/release", post(release_json))
        .route("/api/v1/queues/{broker}/{vhost}/{queue}/custody/export", get(export))
        .route("/api/v1/queues/{broker}/{vhost}/{queue}/custody/{id}", get(record))
        .route("/api/v1/queues/{broker}/{vhost}/{queue}/custody/{id}/edit", post(edit_json))
        .route("/api/v1/queues/{broker}/{vhost}/{queue}/custody/{id}/delete", post(delete_json))
        .route(
            "/api/v1/queues/{broker}/{vhost}/{queue}/custody/import",
            post(import).layer(DefaultBodyLimit::max(IMPORT_MAX_BYTES)),
        )
}

/// The largest import, in bytes of JSON lines (an export of about 40,000 messages of 1 KiB);
/// split larger ones. The request is held whole while it is checked and kept (one batch of
/// messages beside it), so this bounds memory.
const IMPORT_MAX_BYTES: usize = 64 << 20;

/// Records listed without `cursor` (the deprecated way), unless asked otherwise, and at most.
const OLD_DEFAULT_LIMIT: usize = 100;
const OLD_MAX_LIMIT: usize = 1000;

/// `?cursor=&limit=` of the custody listing, oldest record first.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
pub struct ListQuery {
    /// The `next_cursor` of the page before (empty: the first page). With `cursor`, `limit` is
    /// 1 to 500 as on every list; without it, for one release more, up to 1000 (larger is
    /// taken as 1000).
    cursor: Option<String>,
    /// Records per page (default 100).
    limit: Option<String>,
}

impl ListQuery {
    fn page(&self) -> Result<crate::web::query::PageAt, WebError> {
        let paging = crate::web::query::Paging { cursor: self.cursor.clone(), limit: self.limit.clone() };
        if paging.cursor_given() {
            return paging.validate();
        }
        let limit = match self.limit.as_deref().map(str::trim).filter(|l| !l.is_empty()) {
            None => OLD_DEFAULT_LIMIT,
            Some(text) => text.parse::<usize>().map(|n| n.min(OLD_MAX_LIMIT)).map_err(|_| {
                WebError::BadRequest(format!("limit: {:?} is not a whole number", crate::auth::shorten(text)))
            })?,
        };
        Ok(crate::web::query::PageAt { cursor: None, limit })
    }
}

async fn listing(
    State(state): State<AppState>,
    access: Access,
    Path((broker, vhost, queue)): Path<(String, String, String)>,
    Query(filter): Query<Filter>,
    Query(query): Query<ListQuery>,
) -> Result<Response, ApiError> {
    let view = find_queue(&state, &broker, &vhost, &queue).await?;
    filter.check().map_err(WebError::BadRequest)?;
    let role = access.principal.role;
    crate::web::restricted::check_filter(&state, role, (&broker, &vhost, &queue), &filter)?;
    let at = query.page()?;
    let budget = state.matchers.request();
    let place = (broker.as_str(), vhost.as_str(), queue.as_str());
    // One record more than the page says whether there is a next page.
    let mut listing = custody::list(&state.store, &state.custody, place, &filter, at.cursor, at.limit + 1, &budget)
        .await
        .map_err(|e| search_failed(&state, e))?;
    let mut page = crate::web::query::Paged::from_one_more(std::mem::take(&mut listing.records), at.limit, |r| r.id);
    listing.records = std::mem::take(&mut page.items);
    if !crate::web::restricted::may_read(&state, role, (&broker, &vhost, &queue)) {
        crate::web::restricted::listing(&mut listing);
    }
    // The page's items as the role may read them (after `restricted::listing`).
    page.items.clone_from(&listing.records);
    let in_custody = custody::is_in_custody(&state.store, &state.config.custody, &broker, &vhost, &queue)
        .await
        .map_err(|e| WebError::Storage(state.storage.failed("reading custody", &e)))?;
    // `custody.records` (deprecated, kept for one release) is `items` again.
    Ok(Json(json!({
        "items": page.items,
        "next_cursor": page.next_cursor,
        "limit": page.limit,
        "in_custody": in_custody,
        "in_broker": view.broker_total(),
        "custody": listing,
    }))
    .into_response())
}

/// The held records a filter matches (all without one) as JSON lines (`dlq::transfer`),
/// streamed: an export of 100,000 records is not built in memory first.
async fn export(
    State(state): State<AppState>,
    access: Access,
    Path((broker, vhost, queue)): Path<(String, String, String)>,
    Query(filter): Query<Filter>,
) -> Result<Response, ApiError> {
    find_queue(&state, &broker, &vhost, &queue).await?;
    payloads_for(&state, &access, (&broker, &vhost, &queue))?;
    filter.check().map_err(WebError::BadRequest)?;
    let ids = transfer::export_ids(&state.store, (&broker, &vhost, &queue), &filter, &state.matchers.request())
        .await
        .map_err(|e| search_failed(&state, e))?;
    let (lines, received) = tokio::sync::mpsc::channel::<Result<String, std::io::Error>>(4);
    let store = state.store.clone();
    tokio::spawn(async move {
        for chunk in transfer::export_chunks(&ids) {
            let sent = match transfer::export_lines(&store, chunk).await {
                Ok(chunk) => lines.send(Ok(chunk.into_iter().map(|l| l + "\n").collect())).await,
                // The client sees the export cut off, never a short file that looks whole.
                Err(e) => lines.send(Err(std::io::Error::other(e))).await,
            };
            if sent.is_err() {
                return; // the client went away
            }
        }
    });
    let stream = futures_util::stream::unfold(received, |mut r| async move { r.recv().await.map(|x| (x, r)) });
    let name: String =
        queue.chars().map(|c| if c.is_ascii_alphanumeric() || "-_.".contains(c) { c } else { '_' }).collect();
    Ok((
        [
            (header::CONTENT_TYPE, "application/x-ndjson".to_string()),
            (header::CONTENT_DISPOSITION, format!("attachment; filename=\"{name}.custody.jsonl\"")),
        ],
        Body::from_stream(stream),
    )
        .into_response())
}

/// One record with its message as the browser reads it (headers and payload only to the roles
/// that may read them here).
async fn record(
    State(state): State<AppState>,
    access: Access,
    Path((broker, vhost, queue, id)): Path<(String, String, String, i64)>,
) -> Result<Response, ApiError> {
    let found = custody::message(&state.store, (&broker, &vhost, &queue), id)
        .await
        .map_err(|e| WebError::Storage(state.storage.failed("reading custody", &e)))?;
    let Some((mut record, message, _)) = found else {
        return Err(WebError::NotFound(format!("no record {id} in the custody of {queue:?}")).into());
    };
    if payloads_for(&state, &access, (&broker, &vhost, &queue)).is_err() {
        record.error = None;
        return Ok(Json(json!({"record": record, "payload_hidden": true})).into_response());
    }
    Ok(Json(json!({"record": record, "message": message, "payload_hidden": false})).into_response())
}

async fn edit_json(
    State(state): State<AppState>,
    access: Access,
    Path((broker, vhost, queue, id)): Path<(String, String, String, i64)>,
    Json(edit): Json<custody::Edit>,
) -> Result<Response, ApiError> {
    let actor = access.principal.actor();
    let (audit_id, outcome) = edit_record(&state, (&broker, &vhost, &queue), id, edit, &actor).await?;
    match outcome {
        Ok((to, diff)) => Ok(Json(json!({"audit_id": audit_id, "to": to, "diff": diff})).into_response()),
        Err(why) => Err(WebError::Conflict(format!("{why} (audit entry {audit_id})")).into()),
    }
}

async fn delete_json(
    State(state): State<AppState>,
    access: Access,
    Path((broker, vhost, queue, id)): Path<(String, String, String, i64)>,
) -> Result<Response, ApiError> {
    let audit_id = delete_record(&state, (&broker, &vhost, &queue), id, &access.principal.actor()).await?;
    Ok(Json(json!({"deleted": id, "audit_id": audit_id})).into_response())
}

/// Puts JSON lines (an export, possibly edited) into the custody of this queue: all or none,
/// recorded in the audit log. Never into the queue itself: a replay from custody does that,
/// with its checks. The lines are checked first, one at a time, and kept in batches: the
/// memory it takes is the request's bytes and one batch.
async fn import(
    State(state): State<AppState>,
    access: Access,
    Path((broker, vhost, queue)): Path<(String, String, String)>,
    body: axum::body::Bytes,
) -> Result<Response, ApiError> {
    find_queue(&state, &broker, &vhost, &queue).await?;
    let text = std::str::from_utf8(&body).map_err(|e| WebError::BadRequest(format!("not UTF-8 text: {e}")))?;
    let (count, adding) = transfer::check_lines(text).map_err(WebError::BadRequest)?;
    if count == 0 {
        return Err(WebError::BadRequest("no lines to import".to_string()).into());
    }
    let actor = access.principal.actor();
    let entry = audit::Entry {
        actor: &actor,
        broker: &broker,
        vhost: &vhost,
        queue: &queue,
        action: "custody import",
        request: json!({"lines": count, "bytes": body.len()}).to_string(),
        run_by: state.replica.id(),
    };
    state.storage.check(&*state.store).await.map_err(WebError::Storage)?;
    let audit_id = audit::start(&state.store, entry)
        .await
        .map_err(|e| WebError::Storage(state.storage.failed("the audit log", &e)))?;
    let outcome = custody::import(
        &state.store,
        &state.config.custody,
        (&broker, &vhost, &queue),
        (count, adding),
        transfer::batches(text),
    )
    .await;
    let (result, imported, detail) = match &outcome {
        Ok(n) => ("done", *n, None),
        Err(e) => ("failed", 0, Some(e.to_string())),
    };
    if let Err(e) = crate::dlq::fates::finish(&state.store, audit_id, result, imported, 0, detail.as_deref(), &[]).await
    {
        tracing::error!(audit_id, error = %e, "recording the end of a custody import");
    }
    match outcome {
        Ok(n) => Ok(Json(json!({"imported": n, "audit_id": audit_id})).into_response()),
        Err(e @ custody::ImportError::Budget { .. }) => Err(WebError::Conflict(e.to_string()).into()),
        Err(e @ custody::ImportError::Changed(_)) => Err(WebError::BadRequest(e.to_string()).into()),
        Err(custody::ImportError::Storage(e)) => {
            Err(WebError::Storage(state.storage.failed("keeping imported messages", &e)).into())
        }
    }
}

/// Starts a replay in the background; 202 with the audit entry that follows it.
async fn replay(
    State(state): State<AppState>,
    access: Access,
    Path((broker, vhost, queue)): Path<(String, String, String)>,
    Json(request): Json<ReplayRequest>,
) -> Result<Response, ApiError> {
    // A copy in a queue no rule covers is read there by anyone (issue 29, case 3b).
    payloads_for(&state, &access, (&broker, &vhost, &queue))?;
    // A named target is checked as a move's is, before the job: 409 with the reason and where
    // to send them instead. Queues the records name (`original_queue`) are checked by the job,
    // which leaves those records held with the same reason.
    if let (false, custody::CustodyTarget::Queue(name)) = (request.accept_stranding, &request.target) {
        let view = find_queue(&state, &broker, &vhost, &queue).await?;
        if let Some(s) = strandings(&state, &view, std::slice::from_ref(name)).first() {
            return Ok(would_strand(s, "no record was replayed"));
        }
    }
    let audit_id = start_replay(&state, &broker, &vhost, &queue, request, &access.principal.actor(), false).await?;
    Ok((
        StatusCode::ACCEPTED,
        Json(json!({
            "audit_id": audit_id,
            "job": state.jobs.get(audit_id).map(|job| job.status()),
            "follow": state.href(&format!("/api/v1/audit/{audit_id}/messages")),
        })),
    )
        .into_response())
}

async fn start_json(
    State(state): State<AppState>,
    access: Access,
    Path((broker, vhost, queue)): Path<(String, String, String)>,
) -> Result<Response, ApiError> {
    let audit_id = start_custody(&state, &broker, &vhost, &queue, &access.principal.actor()).await?;
    Ok(Json(json!({"in_custody": true, "audit_id": audit_id})).into_response())
}

async fn release_json(
    State(state): State<AppState>,
    access: Access,
    Path((broker, vhost, queue)): Path<(String, String, String)>,
) -> Result<Response, ApiError> {
    let audit_id = release_custody(&state, &broker, &vhost, &queue, &access.principal.actor()).await?;
    Ok((
        StatusCode::ACCEPTED,
        Json(json!({
            "in_custody": false,
            "audit_id": audit_id,
            "job": state.jobs.get(audit_id).map(|job| job.status()),
        })),
    )
        .into_response())
}
