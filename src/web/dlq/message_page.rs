//! One dead letter on its own page: a snapshot's message or a record in custody, with its
//! properties, headers, deaths and payload (only to the roles that may read them), the payload
//! as a download, and for admins the edit-and-replay and delete forms of a held record.

use askama::Template;
use axum::extract::{Path, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};

use super::snapshot_view::{snapshot_view, Row};
use crate::dlq::browse::Snapshot;
use crate::dlq::message::{self, SnapshotMessage};
use crate::state::AppState;
use crate::web::error::WebError;
use crate::web::error_page::PageError;
use crate::web::format;
use crate::web::htmx::html;
use crate::web::identity::Me;
use crate::web::links::dlq_href;
use crate::web::restricted::{self, hidden_here, may_read_payloads, payload_role_name};

#[derive(Template)]
#[template(path = "dlq_message.html")]
struct MessagePage {
    me: Me,
    name: String,
    /// "Message 3" (of a snapshot) or "Record 42" (in custody).
    heading: String,
    /// Why its headers and payload are not shown (`CustodyRule::payloads`), or nothing.
    hidden: Option<String>,
    /// The edit-and-replay form of a held record in custody, for admins where it is on.
    edit: Option<EditForm>,
    /// Where an admin posts to delete a held record in custody.
    delete_action: Option<String>,
    back_href: String,
    download_href: String,
    row: Row,
    properties: Vec<(String, String)>,
    headers: Vec<(String, String, bool)>,
    deaths: Vec<Vec<(String, String)>>,
    payload_kind: &'static str,
    payload: String,
    truncated: Option<String>,
    /// A snapshot's message, of a snapshot outdated by what ran since (`Snapshot::outdated`):
    /// the message may have left the queue.
    outdated: Option<String>,
    /// A snapshot's message: the messages before and after it, and what an operator can do
    /// with it (issue 34, case 6: the page had no action and no previous/next).
    around: Option<Around>,
}

struct Around {
    previous: Option<String>,
    next: Option<String>,
    /// "3 of 10".
    place: String,
    /// The message's fingerprint, for the requeue and delete forms (operators, and a snapshot
    /// that is not outdated).
    act_on: Option<String>,
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

/// A property or x-death field; the AMQP `timestamp` property and x-death's `time` (unix
/// seconds) as times, with the number beside them.
fn show_field(key: &str, v: &Value) -> String {
    match (key, v.as_i64()) {
        ("timestamp" | "time", Some(secs)) => format!("{} ({secs})", format::unix(secs)),
        _ => show(v),
    }
}

pub(super) async fn message_page(
    State(state): State<AppState>,
    me: Me,
    Path((broker, vhost, queue, position)): Path<(String, String, String, usize)>,
) -> Result<Response, PageError> {
    let mut m = snapshot_message(&state, &broker, &vhost, &queue, position)?;
    let base = dlq_href(&broker, &vhost, &queue);
    let download_href = format!("{base}/messages/{position}/payload");
    let hidden = hidden_here(&state, &me, (&broker, &vhost, &queue), &mut m);
    let operator = me.operator;
    let mut page = message_view(me, &queue, &base, &m, format!("Message {position}"), download_href, hidden);
    let snapshot = state.snapshots.get(&broker, &vhost, &queue);
    // Issue 31, case 6: the message pages of an outdated snapshot did not say so.
    page.outdated = snapshot.as_ref().and_then(|s| s.outdated.clone());
    if let Some(s) = &snapshot {
        let at = |p: Option<usize>| {
            p.filter(|p| s.messages.iter().any(|m| m.position == *p)).map(|p| format!("{base}/messages/{p}"))
        };
        page.around = Some(Around {
            previous: at(position.checked_sub(1)),
            next: at(position.checked_add(1)),
            place: format!("{position} of {}", s.messages.len()),
            act_on: (operator && s.outdated.is_none()).then(|| m.fingerprint.clone()),
        });
    }
    Ok(html(page.render()?))
}

struct EditForm {
    action: String,
    /// The body as text, when it is text (a binary body is replayed as it is).
    body: Option<String>,
    /// The headers as JSON, to edit.
    headers: String,
    /// The queue it died in, the default target.
    original_queue: String,
}

/// A record in custody, shown like a snapshot's message; its headers and payload only to the
/// roles its `[[custody]]` rule lets read them.
pub(super) async fn custody_record_page(
    State(state): State<AppState>,
    me: Me,
    Path((broker, vhost, queue, id)): Path<(String, String, String, i64)>,
) -> Result<Response, PageError> {
    let (record, mut m, _) = custody_record(&state, &broker, &vhost, &queue, id).await?;
    let base = dlq_href(&broker, &vhost, &queue);
    let hidden = hidden_here(&state, &me, (&broker, &vhost, &queue), &mut m);
    let heading = format!("Record {} ({})", record.id, record.state);
    let download_href = format!("{base}/custody/{id}/payload");
    let editable = me.admin
        && hidden.is_none()
        && record.state == "held"
        && crate::dlq::custody::editable(&state.config.custody, &broker, &vhost, &queue);
    let edit = editable.then(|| EditForm {
        action: format!("{base}/custody/{id}/edit"),
        body: std::str::from_utf8(&message::payload_bytes(&m.message)).ok().map(str::to_string),
        headers: serde_json::to_string_pretty(m.message.properties.get("headers").unwrap_or(&json!({})))
            .unwrap_or_default(),
        original_queue: record.original_queue.clone().unwrap_or_default(),
    });
    let delete_action = (me.admin && record.state == "held").then(|| format!("{base}/custody/{id}/delete"));
    let mut page = message_view(me, &queue, &base, &m, heading, download_href, hidden);
    page.edit = edit;
    page.delete_action = delete_action;
    Ok(html(page.render()?))
}

async fn custody_record(
    state: &AppState,
    broker: &str,
    vhost: &str,
    queue: &str,
    id: i64,
) -> Result<(crate::dlq::custody::Record, SnapshotMessage, Vec<u8>), WebError> {
    crate::dlq::custody::message(&state.store, (broker, vhost, queue), id)
        .await
        .map_err(|e| WebError::Storage(state.storage.failed("reading custody", &e)))?
        .ok_or_else(|| WebError::NotFound(format!("no record {id} in the custody of {queue:?}")))
}

pub(super) async fn custody_payload(
    State(state): State<AppState>,
    me: Me,
    Path((broker, vhost, queue, id)): Path<(String, String, String, i64)>,
) -> Result<Response, PageError> {
    let (_, _, body) = custody_record(&state, &broker, &vhost, &queue, id).await?;
    if !may_read_payloads(&state, &me, (&broker, &vhost, &queue)) {
        return Err(WebError::Forbidden(format!(
            "payloads here are for the {} role and above",
            payload_role_name(&state, (&broker, &vhost, &queue))
        ))
        .into());
    }
    Ok((
        [
            (header::CONTENT_TYPE, "application/octet-stream".to_string()),
            (header::CONTENT_DISPOSITION, format!("attachment; filename=\"record-{id}.bin\"")),
        ],
        body,
    )
        .into_response())
}

/// The message page of `m`; `hidden` says why headers and payload are left out.
fn message_view(
    me: Me,
    queue: &str,
    base: &str,
    m: &SnapshotMessage,
    heading: String,
    download_href: String,
    hidden: Option<String>,
) -> MessagePage {
    let headers_map = m.message.properties.get("headers").and_then(Value::as_object).cloned().unwrap_or_default();
    let deaths = headers_map
        .get("x-death")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_object)
                .map(|d| d.iter().map(|(k, v)| (k.clone(), show_field(k, v))).collect())
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
    let properties = m
        .message
        .properties
        .iter()
        .filter(|(k, _)| *k != "headers")
        .map(|(k, v)| (k.clone(), show_field(k, v)))
        .collect();
    let (payload_kind, payload) =
        if hidden.is_some() { ("hidden", String::new()) } else { message::render_payload(&m.message) };
    let (headers, deaths) = if hidden.is_some() { (Vec::new(), Vec::new()) } else { (headers, deaths) };
    let kept = message::payload_bytes(&m.message).len() as u64;
    let truncated = (kept < m.payload_bytes).then(|| {
        format!("showing the first {} of {} bytes", format::count(Some(kept)), format::count(Some(m.payload_bytes)))
    });
    let mut page = MessagePage {
        me,
        name: queue.to_string(),
        heading,
        hidden,
        edit: None,
        delete_action: None,
        back_href: base.to_string(),
        download_href,
        row: snapshot_view(
            &Snapshot {
                taken_at: chrono::Utc::now(),
                queue_type: String::new(),
                delivery_limit: None,
                requested: 1,
                note: None,
                messages: vec![m.clone()],
                outdated: None,
                seen: Default::default(),
            },
            base,
            &message::Filter::default(),
            &[true],
        )
        .rows
        .remove(0),
        properties,
        headers,
        deaths,
        payload_kind,
        payload,
        truncated,
        outdated: None,
        around: None,
    };
    if page.hidden.is_some() {
        // A framework's readable arguments are the payload too.
        page.row.app.clear();
    }
    page
}

pub(super) async fn download(
    State(state): State<AppState>,
    me: Me,
    Path((broker, vhost, queue, position)): Path<(String, String, String, usize)>,
) -> Result<Response, PageError> {
    let role = restricted::role_of(&me);
    restricted::require(&state, role, (&broker, &vhost, &queue), "the payload")?;
    let m = snapshot_message(&state, &broker, &vhost, &queue, position)?;
    let bytes = message::payload_bytes(&m.message);
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
