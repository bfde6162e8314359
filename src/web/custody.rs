//! Custody in the JSON API (issue 18): what warren holds of a DLQ, grouped and filtered over
//! every record, and replays from it, each recorded in the audit log like a move.

use std::collections::HashMap;

use axum::body::Body;
use axum::extract::{DefaultBodyLimit, Path, Query, State};
use axum::http::header;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::json;

use super::api::find_queue;
use super::{ApiError, WebError};
use crate::audit;
use crate::dlq::budget::Stopped;
use crate::dlq::custody::{self, ReplayRequest};
use crate::dlq::fates::Fate;
use crate::dlq::message::Filter;
use crate::dlq::transfer;
use crate::state::AppState;

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
pub(super) struct ListQuery {
    /// The `next_cursor` of the page before (empty: the first page). With `cursor`, `limit` is
    /// 1 to 500 as on every list; without it, for one release more, up to 1000 (larger is
    /// taken as 1000).
    cursor: Option<String>,
    /// Records per page (default 100).
    limit: Option<String>,
}

impl ListQuery {
    fn page(&self) -> Result<super::query::PageAt, WebError> {
        let paging = super::query::Paging { cursor: self.cursor.clone(), limit: self.limit.clone() };
        if paging.cursor_given() {
            return paging.validate();
        }
        let limit = match self.limit.as_deref().map(str::trim).filter(|l| !l.is_empty()) {
            None => OLD_DEFAULT_LIMIT,
            Some(text) => text.parse::<usize>().map(|n| n.min(OLD_MAX_LIMIT)).map_err(|_| {
                WebError::BadRequest(format!("limit: {:?} is not a whole number", crate::auth::shorten(text)))
            })?,
        };
        Ok(super::query::PageAt { cursor: None, limit })
    }
}

/// Refuses a role below the one that reads this queue's payloads and headers.
pub(super) fn payloads_for(
    state: &AppState,
    access: &super::Access,
    queue: (&str, &str, &str),
) -> Result<(), WebError> {
    super::restricted::require(state, access.principal.role, queue, "this queue's records")
}

async fn listing(
    State(state): State<AppState>,
    access: super::Access,
    Path((broker, vhost, queue)): Path<(String, String, String)>,
    Query(filter): Query<Filter>,
    Query(query): Query<ListQuery>,
) -> Result<Response, ApiError> {
    let view = find_queue(&state, &broker, &vhost, &queue).await?;
    filter.check().map_err(WebError::BadRequest)?;
    let role = access.principal.role;
    super::restricted::check_filter(&state, role, (&broker, &vhost, &queue), &filter)?;
    let at = query.page()?;
    let budget = state.matchers.request();
    let place = (broker.as_str(), vhost.as_str(), queue.as_str());
    // One record more than the page says whether there is a next page.
    let mut listing = custody::list(&state.db, &state.custody, place, &filter, at.cursor, at.limit + 1, &budget)
        .await
        .map_err(|e| search_failed(&state, e))?;
    let mut page = super::query::Paged::from_one_more(std::mem::take(&mut listing.records), at.limit, |r| r.id);
    listing.records = std::mem::take(&mut page.items);
    if !super::restricted::may_read(&state, role, (&broker, &vhost, &queue)) {
        super::restricted::listing(&mut listing);
    }
    // The page's items as the role may read them (after `restricted::listing`).
    page.items.clone_from(&listing.records);
    let in_custody = custody::is_in_custody(&state.db, &state.config.custody, &broker, &vhost, &queue)
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
    access: super::Access,
    Path((broker, vhost, queue)): Path<(String, String, String)>,
    Query(filter): Query<Filter>,
) -> Result<Response, ApiError> {
    find_queue(&state, &broker, &vhost, &queue).await?;
    payloads_for(&state, &access, (&broker, &vhost, &queue))?;
    filter.check().map_err(WebError::BadRequest)?;
    let ids = transfer::export_ids(&state.db, (&broker, &vhost, &queue), &filter, &state.matchers.request())
        .await
        .map_err(|e| search_failed(&state, e))?;
    let (lines, received) = tokio::sync::mpsc::channel::<Result<String, std::io::Error>>(4);
    let db = state.db.clone();
    tokio::spawn(async move {
        for chunk in transfer::export_chunks(&ids) {
            let sent = match transfer::export_lines(&db, chunk).await {
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

/// A search of custody that gave no answer, as the client is told: a regular expression past
/// its budget or a query SQLite refused for the filter's values is the request's (400), only a
/// fault of the database itself is reported as one.
pub(super) fn search_failed(state: &AppState, error: custody::SearchError) -> WebError {
    match error {
        custody::SearchError::Stopped(stopped) => stopped_search(stopped),
        custody::SearchError::Database(e) => match state.storage.read_failed("reading custody", &e) {
            Some(why) => WebError::Storage(why),
            None => WebError::BadRequest(format!(
                "this filter cannot be searched for ({}): change it",
                e.as_database_error().map_or_else(|| e.to_string(), |d| d.message().to_string())
            )),
        },
    }
}

/// A search stopped before its answer: too slow is the filter's (400); cancelled, with the
/// client gone, is only ever seen when warren stops.
pub(super) fn stopped_search(stopped: Stopped) -> WebError {
    match stopped {
        Stopped::TooSlow(_) => WebError::BadRequest(stopped.to_string()),
        Stopped::Cancelled => WebError::Unavailable("warren is stopping: search again once it is back".to_string()),
    }
}

/// One record with its message as the browser reads it (headers and payload only to the roles
/// that may read them here).
async fn record(
    State(state): State<AppState>,
    access: super::Access,
    Path((broker, vhost, queue, id)): Path<(String, String, String, i64)>,
) -> Result<Response, ApiError> {
    let found = custody::message(&state.db, (&broker, &vhost, &queue), id)
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

/// Edits one held record and replays the edited copy (admins; off unless the queue's
/// `[[custody]]` rule says `edit = true`), synchronously: one message. The audit entry keeps
/// the request and the diff; the original record is kept, marked replayed as an edited copy.
pub async fn edit_record(
    state: &AppState,
    (broker, vhost, queue): (&str, &str, &str),
    id: i64,
    edit: custody::Edit,
    actor: &str,
) -> Result<(i64, Result<(String, custody::EditDiff), String>), WebError> {
    find_queue(state, broker, vhost, queue).await?;
    if !custody::editable(&state.config.custody, broker, vhost, queue) {
        return Err(WebError::Forbidden(
            "editing records is off for this queue: its [[custody]] rule needs edit = true".to_string(),
        ));
    }
    let config =
        state.broker_config(broker).ok_or_else(|| WebError::NotFound(format!("no broker named {broker:?}")))?.clone();
    let entry = audit::Entry {
        actor,
        broker,
        vhost,
        queue,
        action: "custody edit",
        request: json!({"record": id, "edit": edit}).to_string(),
    };
    state.storage.check(&state.db).await.map_err(WebError::Storage)?;
    let audit_id = audit::start(&state.db, entry)
        .await
        .map_err(|e| WebError::Storage(state.storage.failed("the audit log", &e)))?;
    let job = format!("audit-{audit_id}");
    let stranding = if edit.accept_stranding {
        HashMap::new()
    } else {
        crate::dlq::jobs::strandings(&state.live, (broker, vhost, queue))
    };
    let outcome = custody::edit_and_replay(&state.db, &config, (vhost, queue), id, &edit, (&job, stranding)).await;
    if let Ok((to, _)) = &outcome {
        state.jobs.put_into(broker, vhost, std::iter::once(to.as_str()));
    }
    let message_id = custody::message(&state.db, (broker, vhost, queue), id)
        .await
        .ok()
        .flatten()
        .and_then(|(record, _, _)| record.message_id);
    let finished = match &outcome {
        Ok((to, diff)) => {
            let detail = json!({"record": id, "to": to, "diff": diff}).to_string();
            let fate = Fate::new(1, message_id.as_deref(), "moved", &format!("{to} (an edited copy)"));
            crate::dlq::fates::finish(&state.db, audit_id, "done", 1, 0, Some(&detail), &[fate]).await
        }
        Err(why) => {
            let fate = Fate::new(1, message_id.as_deref(), "failed", why);
            crate::dlq::fates::finish(&state.db, audit_id, "failed", 0, 1, Some(why), &[fate]).await
        }
    };
    if let Err(e) = finished {
        tracing::error!(audit_id, error = %e, "recording the end of a custody edit");
    }
    Ok((audit_id, outcome))
}

async fn edit_json(
    State(state): State<AppState>,
    access: super::Access,
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

/// Deletes one held record (admins: the way out for a record that can never be replayed),
/// recorded in the audit log like a delete from a queue. A record a replay has claimed is
/// refused. Returns the audit entry's id.
pub async fn delete_record(
    state: &AppState,
    (broker, vhost, queue): (&str, &str, &str),
    id: i64,
    actor: &str,
) -> Result<i64, WebError> {
    find_queue(state, broker, vhost, queue).await?;
    custody::message(&state.db, (broker, vhost, queue), id)
        .await
        .map_err(|e| WebError::Storage(state.storage.failed("reading custody", &e)))?
        .ok_or_else(|| WebError::NotFound(format!("no record {id} in the custody of {queue:?}")))?;
    let entry = audit::Entry {
        actor,
        broker,
        vhost,
        queue,
        action: "custody delete",
        request: json!({"record": id}).to_string(),
    };
    state.storage.check(&state.db).await.map_err(WebError::Storage)?;
    let audit_id = audit::start(&state.db, entry)
        .await
        .map_err(|e| WebError::Storage(state.storage.failed("the audit log", &e)))?;
    let outcome = custody::delete(&state.db, (broker, vhost, queue), id).await;
    let finished = match &outcome {
        // A delete's fate is `moved` to nowhere, as the audit of a delete from a queue says it.
        Ok(message_id) => {
            let fate = Fate::new(1, message_id.as_deref(), "moved", "");
            crate::dlq::fates::finish(&state.db, audit_id, "done", 1, 0, None, &[fate]).await
        }
        Err(why) => {
            let why = why.to_string();
            crate::dlq::fates::finish(&state.db, audit_id, "failed", 0, 1, Some(&why), &[]).await
        }
    };
    if let Err(e) = finished {
        tracing::error!(audit_id, error = %e, "recording the end of a custody delete");
    }
    match outcome {
        Ok(_) => Ok(audit_id),
        Err(custody::DeleteError::NotFound(_)) => {
            Err(WebError::NotFound(format!("no record {id} in the custody of {queue:?}")))
        }
        Err(e @ custody::DeleteError::NotHeld { .. }) => {
            Err(WebError::Conflict(format!("{e} (audit entry {audit_id})")))
        }
        Err(custody::DeleteError::Storage(e)) => {
            Err(WebError::Storage(state.storage.failed("deleting a custody record", &e)))
        }
    }
}

async fn delete_json(
    State(state): State<AppState>,
    access: super::Access,
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
    access: super::Access,
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
    };
    state.storage.check(&state.db).await.map_err(WebError::Storage)?;
    let audit_id = audit::start(&state.db, entry)
        .await
        .map_err(|e| WebError::Storage(state.storage.failed("the audit log", &e)))?;
    let outcome = custody::import(
        &state.db,
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
    if let Err(e) = crate::dlq::fates::finish(&state.db, audit_id, result, imported, 0, detail.as_deref(), &[]).await {
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
    access: super::Access,
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
        if let Some(s) = super::dlq_pages::strandings(&state, &view, std::slice::from_ref(name)).first() {
            return Ok(super::actions::would_strand(s, "no record was replayed"));
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

/// Checks a replay from `queue`'s custody and starts it as a job (recorded in the audit log
/// before anything is claimed); returns the job's id, which is its audit entry's.
pub async fn start_replay(
    state: &AppState,
    broker: &str,
    vhost: &str,
    queue: &str,
    request: ReplayRequest,
    actor: &str,
    releasing: bool,
) -> Result<i64, WebError> {
    find_queue(state, broker, vhost, queue).await?;
    if let custody::CustodySelection::Matching(filter) = &request.selection {
        filter.check().map_err(WebError::BadRequest)?;
    }
    use crate::dlq::jobs::{self, StartError};
    let job = jobs::start_replay(&state.dlq(), (broker, vhost, queue), request, actor, releasing).await.map_err(
        |e| match e {
            StartError::NoBroker(name) => WebError::NotFound(format!("no broker named {name:?}")),
            StartError::Storage(why) => WebError::Storage(why),
            other => WebError::Conflict(other.to_string()),
        },
    )?;
    Ok(job.id)
}

/// Takes a queue into custody (admin): intake starts within seconds, whatever the rules say.
/// Recorded in the audit log with who, when and how many messages the broker held then, which
/// intake is about to take off it (issue 31, case 8: custody took 582 messages with no audit
/// entry). Returns the audit entry's id.
pub async fn start_custody(
    state: &AppState,
    broker: &str,
    vhost: &str,
    queue: &str,
    actor: &str,
) -> Result<i64, WebError> {
    let view = find_queue(state, broker, vhost, queue).await?;
    let in_broker = view.broker_total();
    let entry = audit::Entry {
        actor,
        broker,
        vhost,
        queue,
        action: "custody start",
        request: json!({"messages_in_broker": in_broker}).to_string(),
    };
    state.storage.check(&state.db).await.map_err(WebError::Storage)?;
    let audit_id = audit::start(&state.db, entry)
        .await
        .map_err(|e| WebError::Storage(state.storage.failed("the audit log", &e)))?;
    let switched = custody::set_switch(&state.db, broker, vhost, queue, custody::Switch::On, actor).await;
    let (outcome, detail) = match &switched {
        Ok(()) => (
            "done",
            format!(
                "intake started with {} messages in the broker; it takes each dead letter that arrives until custody \
                 is released",
                in_broker.map_or_else(|| "an unknown number of".to_string(), |n| n.to_string())
            ),
        ),
        Err(e) => ("failed", format!("custody could not be recorded: {e}")),
    };
    if let Err(e) = crate::dlq::fates::finish(&state.db, audit_id, outcome, 0, 0, Some(&detail), &[]).await {
        tracing::error!(audit_id, error = %e, "recording the start of custody");
    }
    tracing::info!(audit_id, broker, vhost, queue, actor, "custody started");
    switched.map_err(|e| WebError::Storage(state.storage.failed("recording custody", &e)))?;
    Ok(audit_id)
}

/// What the confirmation of a custody start or release says before anything happens (issue 31,
/// case 8: "Take into custody" moved 582 messages out of the broker in one click).
#[derive(askama::Template)]
#[template(path = "custody_confirm.html")]
pub struct ConfirmPage {
    pub me: super::Me,
    pub name: String,
    pub back_href: String,
    /// `start` or `release`.
    pub action: &'static str,
    /// Messages the broker holds now (as of the last poll), unknown without a listing.
    pub in_broker: Option<u64>,
    pub consumers: Option<u64>,
    /// Records warren holds (held and claimed).
    pub held: u64,
}

impl ConfirmPage {
    pub async fn new(
        state: &AppState,
        me: super::Me,
        (broker, vhost, queue): (&str, &str, &str),
        action: &'static str,
    ) -> Result<ConfirmPage, WebError> {
        let view = find_queue(state, broker, vhost, queue).await?;
        let counts = custody::counts_by_queue(&state.db, broker)
            .await
            .map_err(|e| WebError::Storage(state.storage.failed("reading custody", &e)))?;
        let held = counts.get(&(vhost.to_string(), queue.to_string())).map_or(0, |c| c.held + c.claimed);
        Ok(ConfirmPage {
            me,
            name: queue.to_string(),
            back_href: super::dlq_pages::dlq_href(broker, vhost, queue),
            action,
            in_broker: view.broker_total(),
            consumers: view.consumers,
            held,
        })
    }
}

/// Hands a queue's custody back (admin): intake stops (it hands back what it holds), the admin's
/// decision is recorded so that no rule restarts it, and every held record is replayed into the
/// queue, recorded in the audit log like a replay. Returns the audit entry's id.
pub async fn release_custody(
    state: &AppState,
    broker: &str,
    vhost: &str,
    queue: &str,
    actor: &str,
) -> Result<i64, WebError> {
    find_queue(state, broker, vhost, queue).await?;
    custody::set_switch(&state.db, broker, vhost, queue, custody::Switch::Released, actor)
        .await
        .map_err(|e| WebError::Storage(state.storage.failed("recording custody", &e)))?;
    state.custody.stop(broker, vhost, queue).await;
    let request = ReplayRequest {
        selection: custody::CustodySelection::All,
        target: custody::CustodyTarget::Queue(queue.to_string()),
        // A queue that drops its oldest when full is not filled blindly by a release either:
        // the records stay held, and the job says why.
        accept_drop_head: false,
        accept_stranding: false,
    };
    start_replay(state, broker, vhost, queue, request, actor, true).await
}

async fn start_json(
    State(state): State<AppState>,
    access: super::Access,
    Path((broker, vhost, queue)): Path<(String, String, String)>,
) -> Result<Response, ApiError> {
    let audit_id = start_custody(&state, &broker, &vhost, &queue, &access.principal.actor()).await?;
    Ok(Json(json!({"in_custody": true, "audit_id": audit_id})).into_response())
}

async fn release_json(
    State(state): State<AppState>,
    access: super::Access,
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
