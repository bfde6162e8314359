//! The forms of custody on the dead-letter pages: take a queue into custody or release it (each
//! asks first), replay records, edit and replay one record, delete one. What they do is
//! `custody.rs`, shared with the API.

use askama::Template;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Redirect, Response};
use serde_json::Value;

use super::custody::{
    delete_record, edit_record, payloads_for, release_custody, start_custody, start_replay, ConfirmPage,
};
use crate::dlq::message;
use crate::state::AppState;
use crate::web::error::WebError;
use crate::web::error_page::PageError;
use crate::web::htmx::html;
use crate::web::identity::{Access, Me};
use crate::web::links::dlq_href;
use crate::web::query::form_pairs;

/// Asks first, with what will happen (`custody::ConfirmPage`); the confirmation posts
/// `confirmed=true` back.
pub(super) async fn custody_start_form(
    State(state): State<AppState>,
    access: Access,
    me: Me,
    Path((broker, vhost, queue)): Path<(String, String, String)>,
    body: String,
) -> Result<Response, PageError> {
    if !confirmed(&body) {
        let page = ConfirmPage::new(&state, me, (&broker, &vhost, &queue), "start").await?;
        return Ok(html(page.render()?));
    }
    start_custody(&state, &broker, &vhost, &queue, &access.principal.actor()).await?;
    Ok(Redirect::to(&state.href(&dlq_href(&broker, &vhost, &queue))).into_response())
}

pub(super) async fn custody_release_form(
    State(state): State<AppState>,
    access: Access,
    me: Me,
    Path((broker, vhost, queue)): Path<(String, String, String)>,
    body: String,
) -> Result<Response, PageError> {
    if !confirmed(&body) {
        let page = ConfirmPage::new(&state, me, (&broker, &vhost, &queue), "release").await?;
        return Ok(html(page.render()?));
    }
    let audit_id = release_custody(&state, &broker, &vhost, &queue, &access.principal.actor()).await?;
    Ok(Redirect::to(&state.href(&format!("/jobs/{audit_id}"))).into_response())
}

/// Whether a form carries `confirmed=true` (the confirmation page's button).
fn confirmed(body: &str) -> bool {
    form_pairs(body).any(|(k, v)| k == "confirmed" && v == "true")
}

/// The custody replay form: `scope` (`all` or `matching`, with the `filter_*` fields), or
/// `ticked=true` (the "Replay the ticked records" button) with a `record` field per ticked
/// record; and `target` (`original-queue`, or `queue` with `target_queue`).
pub(super) async fn custody_replay_form(
    State(state): State<AppState>,
    access: Access,
    Path((broker, vhost, queue)): Path<(String, String, String)>,
    body: String,
) -> Result<Response, PageError> {
    use crate::dlq::custody::{CustodySelection, CustodyTarget, ReplayRequest};
    let (mut scope, mut target, mut target_queue, mut filter) =
        (String::new(), String::new(), String::new(), message::Filter::default());
    let (mut accept_drop_head, mut accept_stranding) = (false, false);
    let (mut ticked, mut records) = (false, Vec::new());
    for (key, value) in form_pairs(&body) {
        match key.as_str() {
            "scope" => scope = value,
            "ticked" => ticked = value == "true",
            "record" => records.push(value.trim().parse::<i64>().map_err(|_| {
                WebError::BadRequest(format!("record: {:?} is not a record number", crate::auth::shorten(&value)))
            })?),
            "accept_drop_head" => accept_drop_head = value == "true",
            "accept_stranding" => accept_stranding = value == "true",
            "target" => target = value,
            "target_queue" => target_queue = value.trim().to_string(),
            key if key.starts_with("filter_") => {
                filter.set_form_field(key, value);
            }
            _ => {}
        }
    }
    let selection = match scope.as_str() {
        _ if ticked => CustodySelection::Records(records),
        // Enter in a field submits with the first button, "Replay": with records ticked, that
        // would replay every record, not the ticked ones.
        _ if !records.is_empty() => {
            return Err(WebError::BadRequest(format!(
                "{} records are ticked, and Replay takes every record or those matching the filter: press \"Replay \
                 the ticked records\", or untick them",
                records.len()
            ))
            .into())
        }
        "all" => CustodySelection::All,
        "matching" if !filter.is_empty() => {
            filter.check().map_err(WebError::BadRequest)?;
            CustodySelection::Matching(Box::new(filter))
        }
        "matching" => return Err(WebError::BadRequest("set a filter first, or replay all".to_string()).into()),
        _ => return Err(WebError::BadRequest("scope must be all or matching".to_string()).into()),
    };
    let target = match target.as_str() {
        "queue" if !target_queue.is_empty() => CustodyTarget::Queue(target_queue),
        "queue" => return Err(WebError::BadRequest("name the target queue".to_string()).into()),
        _ => CustodyTarget::OriginalQueue,
    };
    let request = ReplayRequest { selection, target, accept_drop_head, accept_stranding };
    payloads_for(&state, &access, (&broker, &vhost, &queue))?;
    let audit_id = start_replay(&state, &broker, &vhost, &queue, request, &access.principal.actor(), false).await?;
    // Post/redirect/get: the job's page follows it, and says what became of each record.
    Ok(Redirect::to(&state.href(&format!("/jobs/{audit_id}"))).into_response())
}

/// The edit-and-replay form: `body` (when the record's body is text), `headers` (JSON), and
/// `target_queue` (empty: the queue it died in).
pub(super) async fn custody_edit_form(
    State(state): State<AppState>,
    access: Access,
    Path((broker, vhost, queue, id)): Path<(String, String, String, i64)>,
    body: String,
) -> Result<Response, PageError> {
    let mut edit = crate::dlq::custody::Edit::default();
    for (key, value) in form_pairs(&body) {
        match key.as_str() {
            "body" => edit.body = Some(value.replace("\r\n", "\n")),
            "headers" => {
                let parsed: serde_json::Map<String, Value> = serde_json::from_str(&value)
                    .map_err(|e| WebError::BadRequest(format!("headers: not a JSON object: {e}")))?;
                edit.headers = Some(parsed);
            }
            "target_queue" if !value.trim().is_empty() => {
                edit.target = crate::dlq::custody::CustodyTarget::Queue(value.trim().to_string())
            }
            "accept_drop_head" => edit.accept_drop_head = value == "true",
            "accept_stranding" => edit.accept_stranding = value == "true",
            _ => {}
        }
    }
    let actor = access.principal.actor();
    let (audit_id, outcome) = edit_record(&state, (&broker, &vhost, &queue), id, edit, &actor).await?;
    match outcome {
        Ok(_) => Ok(Redirect::to(&state.href("/audit")).into_response()),
        Err(why) => Err(WebError::Conflict(format!("{why} (audit entry {audit_id})")).into()),
    }
}

/// Deletes a held record (admins), then back to the queue's page.
pub(super) async fn custody_delete_form(
    State(state): State<AppState>,
    access: Access,
    Path((broker, vhost, queue, id)): Path<(String, String, String, i64)>,
) -> Result<Response, PageError> {
    delete_record(&state, (&broker, &vhost, &queue), id, &access.principal.actor()).await?;
    Ok(Redirect::to(&state.href(&dlq_href(&broker, &vhost, &queue))).into_response())
}
