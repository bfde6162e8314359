//! What a role below a queue's payload role may see of it (issue 29, must-have 3): a
//! `[[custody]]` rule's `payloads` names the least role that reads the payloads and headers of
//! the queue it covers, in custody and in the broker alike (a release or a stopped intake puts
//! its messages back in the broker, where a snapshot reads them). The application's error is
//! read from the headers, so it follows the rule too.
//!
//! Every view of such a queue passes through here, once, for the HTML pages and the JSON API
//! alike: filters that search what the role may not read are refused (a filter that matches or
//! not is a yes/no question about the content, answered by a count or a list of ids), and
//! snapshots, custody listings, job reports and audit entries are served without payloads,
//! headers, errors, edit diffs and the ids a content filter chose.

use serde_json::Value;

use crate::audit;
use crate::auth::Role;
use crate::config::PayloadRole;
use crate::dlq::browse::Snapshot;
use crate::dlq::custody::Listing;
use crate::dlq::jobs::JobStatus;
use crate::dlq::message::{Filter, SnapshotMessage};
use crate::state::AppState;
use crate::web::error::WebError;
use crate::web::identity::Me;

/// What stands in for what was left out.
pub const HIDDEN: &str = "(hidden: for the queue's payload role)";

/// The least role that reads this queue's payloads, headers and errors.
pub fn payload_role(state: &AppState, (broker, vhost, queue): (&str, &str, &str)) -> Role {
    match crate::dlq::custody::payload_role(&state.config.custody, broker, vhost, queue) {
        PayloadRole::Viewer => Role::Viewer,
        PayloadRole::Operator => Role::Operator,
        PayloadRole::Admin => Role::Admin,
    }
}

pub fn may_read(state: &AppState, role: Role, queue: (&str, &str, &str)) -> bool {
    role.allows(payload_role(state, queue))
}

/// The role of whoever a page is for (an unidentified requester is a viewer).
pub fn role_of(me: &Me) -> Role {
    if me.admin {
        Role::Admin
    } else if me.operator {
        Role::Operator
    } else {
        Role::Viewer
    }
}

/// 403 below the queue's payload role, saying for what and for whom.
pub fn require(state: &AppState, role: Role, queue: (&str, &str, &str), what: &str) -> Result<(), WebError> {
    if may_read(state, role, queue) {
        return Ok(());
    }
    Err(WebError::Forbidden(format!(
        "{what}: the payloads, headers and errors of this queue's messages are for the {} role and above; you are {role}",
        payload_role(state, queue)
    )))
}

/// Refuses a filter that searches payloads, headers or errors below the payload role.
pub fn check_filter(state: &AppState, role: Role, queue: (&str, &str, &str), filter: &Filter) -> Result<(), WebError> {
    if filter.searches_content() {
        require(state, role, queue, "filters on text, headers, JSON, regular expressions or errors")?;
    }
    Ok(())
}

/// The part of a filter every role may use: by reason and by the queue a message died in.
pub fn readable_filter(filter: &Filter) -> Filter {
    let mut readable = Filter::default();
    readable.reason = filter.reason.clone();
    readable.original_queue = filter.original_queue.clone();
    readable
}

/// A message without its payload, headers, error and framework fields (a framework's arguments
/// are the payload); its size, properties and dead-letter facts stay.
pub fn message(m: &mut SnapshotMessage) {
    m.message.payload = String::new();
    m.message.payload_encoding = "hidden".to_string();
    m.message.properties.remove("headers");
    m.error = None;
    m.app = None;
}

/// A snapshot as a role below the payload role reads it.
pub fn snapshot(snapshot: &Snapshot) -> Snapshot {
    let mut copy = snapshot.clone();
    copy.messages.iter_mut().for_each(message);
    copy
}

/// A custody listing without the records' errors and the groups by error.
pub fn listing(listing: &mut Listing) {
    listing.by_error.clear();
    listing.records.iter_mut().for_each(|r| r.error = None);
}

/// Whether an action's request chose its messages by a filter that searches content
/// (`{"selection": {"matching": {...}}}`, as moves and replays write it).
fn chosen_by_content(request: &Value) -> bool {
    request
        .get("selection")
        .and_then(|s| s.get("matching"))
        .and_then(|f| serde_json::from_value::<Filter>(f.clone()).ok())
        .is_some_and(|f| f.searches_content())
}

/// An audit entry as a role below its queue's payload role reads it: an edit without its body,
/// headers and diff; an action chosen by a content filter without the filter's values and the
/// ids it chose (the counts stay: without the filter they say nothing of the content).
pub fn audit_record(state: &AppState, role: Role, r: &mut audit::Record) {
    if r.kind != audit::Kind::Action || may_read(state, role, (&r.broker, &r.vhost, &r.queue)) {
        return;
    }
    if r.action == "custody edit" {
        if let Some(edit) = r.request.get_mut("edit").and_then(Value::as_object_mut) {
            edit.remove("body");
            edit.remove("headers");
            edit.insert("changes".to_string(), Value::String(HIDDEN.to_string()));
        }
        let recorded = r.detail.as_deref().and_then(|d| serde_json::from_str::<Value>(d).ok());
        if let Some(mut detail) = recorded.filter(|d| d.get("diff").is_some()) {
            detail["diff"] = Value::String(HIDDEN.to_string());
            r.detail = Some(detail.to_string());
        }
    }
    if chosen_by_content(&r.request) {
        if let Some(filter) = r.request.pointer_mut("/selection/matching").and_then(Value::as_object_mut) {
            for (name, value) in filter.iter_mut() {
                if !matches!(name.as_str(), "reason" | "original_queue") && !value.is_null() {
                    *value = Value::String(HIDDEN.to_string());
                }
            }
        }
        r.message_ids = Value::String(HIDDEN.to_string());
    }
}

/// Whether the fates of an action's messages are hidden from `role` (`audit_record`).
pub fn ids_hidden(state: &AppState, role: Role, record: &audit::Record) -> bool {
    !may_read(state, role, (&record.broker, &record.vhost, &record.queue)) && chosen_by_content(&record.request)
}

/// A job's report as a role below its queue's payload role reads it: without the messages a
/// content filter chose (what the audit entry leaves out too), and, for an edit, its diff.
pub async fn job(state: &AppState, role: Role, status: &mut JobStatus) -> Result<(), WebError> {
    if may_read(state, role, (&status.broker, &status.vhost, &status.queue)) {
        return Ok(());
    }
    let Some(mut record) = audit::get(&state.store, status.id).await? else { return Ok(()) };
    // A job known only from the audit log carries its entry's detail as its error: an edit's
    // diff, for one.
    if let (Some(error), Some(detail)) = (status.error.as_mut(), record.detail.as_ref()) {
        if error == detail {
            audit_record(state, role, &mut record);
            *error = record.detail.clone().unwrap_or_default();
        }
    }
    if chosen_by_content(&record.request) {
        if let Some(report) = status.report.as_mut() {
            report.moved.clear();
            report.failed.clear();
            report.held.clear();
            report.not_found.clear();
            report.note = Some(format!(
                "These messages were chosen by a filter over payloads, headers or errors: which ones is shown to the \
                 {} role and above.",
                payload_role(state, (&status.broker, &status.vhost, &status.queue))
            ));
        }
    }
    Ok(())
}

/// Why `m`'s headers, payload and error are not shown to `me` (whoever a page is for), having
/// left them out; `None` when `me` reads them.
pub fn hidden_here(state: &AppState, me: &Me, queue: (&str, &str, &str), m: &mut SnapshotMessage) -> Option<String> {
    if may_read_payloads(state, me, queue) {
        return None;
    }
    message(m);
    Some(format!(
        "Headers, payload and error are shown to the {} role and above here; you are {}.",
        payload_role_name(state, queue),
        me.role
    ))
}

/// The least role that reads this queue's payloads, as the pages name it.
pub fn payload_role_name(state: &AppState, (broker, vhost, queue): (&str, &str, &str)) -> &'static str {
    crate::dlq::custody::payload_role(&state.config.custody, broker, vhost, queue).as_str()
}

/// Whether `me` reads the payloads and headers of this queue's records in custody.
pub fn may_read_payloads(state: &AppState, me: &Me, queue: (&str, &str, &str)) -> bool {
    may_read(state, role_of(me), queue)
}
