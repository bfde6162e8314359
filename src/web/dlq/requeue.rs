//! Requeue, move, delete and purge from the dead-letter page: the form, the confirmation page
//! that says what will happen (and what the target queues would do with the messages), and the
//! action once confirmed, through `moves.rs` as the API does.

use askama::Template;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};

use super::moves::{last_polled, run_purge, start_move, target_queue_names};
use crate::dlq::jobs::{Choice, MoveRequest};
use crate::dlq::message::{self, SnapshotMessage};
use crate::dlq::Target;
use crate::state::AppState;
use crate::web::error::WebError;
use crate::web::error_page::PageError;
use crate::web::format;
use crate::web::htmx::html;
use crate::web::identity::{Access, Me};
use crate::web::links::dlq_href;
use crate::web::lookup::find_queue;
use crate::web::query::form_pairs;

/// The requeue form's fields; `position` repeats, which a plain `Form` cannot read.
pub struct RequeueForm {
    positions: Vec<usize>,
    /// Fingerprints of snapshot messages (`message=`, what the page's checkboxes send).
    messages: Vec<String>,
    scope: Scope,
    target: FormTarget,
    target_queue: String,
    /// The browser's filter, for "all matching".
    filter: message::Filter,
    confirmed: bool,
    /// The user accepts that a target which drops its oldest messages when full may drop some.
    accept_drop_head: bool,
}

#[derive(Clone, Copy, PartialEq)]
enum Scope {
    Selected,
    All,
    Matching,
    DeleteSelected,
    Purge,
}

impl Scope {
    fn as_str(self) -> &'static str {
        match self {
            Scope::Selected => "selected",
            Scope::All => "all",
            Scope::Matching => "matching",
            Scope::DeleteSelected => "delete-selected",
            Scope::Purge => "purge",
        }
    }
}

#[derive(Clone, Copy, PartialEq)]
enum FormTarget {
    OriginalQueue,
    OriginalExchange,
    Queue,
}

impl FormTarget {
    fn as_str(self) -> &'static str {
        match self {
            FormTarget::OriginalQueue => "original-queue",
            FormTarget::OriginalExchange => "original-exchange",
            FormTarget::Queue => "queue",
        }
    }
}

pub fn parse_requeue_form(body: &str) -> Result<RequeueForm, WebError> {
    let mut form = RequeueForm {
        positions: Vec::new(),
        messages: Vec::new(),
        scope: Scope::Selected,
        target: FormTarget::OriginalQueue,
        target_queue: String::new(),
        filter: message::Filter::default(),
        confirmed: false,
        accept_drop_head: false,
    };
    let mut target = None;
    for (key, value) in form_pairs(body) {
        match key.as_str() {
            "position" => form
                .positions
                .push(value.parse().map_err(|_| WebError::BadRequest(format!("position: {value:?} is not a number")))?),
            "message" => form.messages.push(value),
            "scope" => {
                form.scope = match value.as_str() {
                    "selected" => Scope::Selected,
                    "all" => Scope::All,
                    "matching" => Scope::Matching,
                    "delete-selected" => Scope::DeleteSelected,
                    "purge" => Scope::Purge,
                    other => return Err(WebError::BadRequest(format!("scope: {other:?} is not an action"))),
                }
            }
            "target" => {
                target = Some(match value.as_str() {
                    "original-queue" => FormTarget::OriginalQueue,
                    "original-exchange" => FormTarget::OriginalExchange,
                    "queue" => FormTarget::Queue,
                    other => return Err(WebError::BadRequest(format!("target: {other:?} is not a target"))),
                })
            }
            "target_queue" => form.target_queue = value.trim().to_string(),
            key if key.starts_with("filter_") => {
                form.filter.set_form_field(key, value);
            }
            "confirm" => form.confirmed = value == "true",
            "accept_drop_head" => form.accept_drop_head = value == "true",
            _ => {}
        }
    }
    // A queue name typed in without choosing "a queue I name" still means that queue.
    form.target =
        target.unwrap_or(if form.target_queue.is_empty() { FormTarget::OriginalQueue } else { FormTarget::Queue });
    if form.target == FormTarget::Queue && form.target_queue.is_empty() {
        return Err(WebError::BadRequest("target_queue: name the queue to move the messages to".to_string()));
    }
    if matches!(form.scope, Scope::Selected | Scope::DeleteSelected)
        && form.positions.is_empty()
        && form.messages.is_empty()
    {
        return Err(WebError::BadRequest("select at least one message, or requeue all".to_string()));
    }
    if form.scope == Scope::Matching && form.filter.is_empty() {
        return Err(WebError::BadRequest("set a filter first, or requeue all".to_string()));
    }
    form.filter.check().map_err(WebError::BadRequest)?;
    Ok(form)
}

#[derive(Template)]
#[template(path = "dlq_action.html")]
struct ActionPage {
    me: Me,
    action: &'static str,
    name: String,
    back_href: String,
    what: String,
    target: String,
    /// A purge or a delete: nothing goes anywhere, and the button says so.
    deletes: bool,
    duplicates_warning: bool,
    /// What the confirmation says about the queues the messages would go to.
    target_notes: Vec<TargetNote>,
    form: FormEcho,
    /// Set once the action ran (purge) or was refused.
    outcome: Option<String>,
    error: Option<String>,
}

/// The form's fields, posted back unchanged by the confirmation.
struct FormEcho {
    positions: Vec<usize>,
    messages: Vec<String>,
    scope: &'static str,
    target: &'static str,
    target_queue: String,
    /// The filter, as `filter_<name>` fields.
    filter_fields: Vec<(String, String)>,
}

/// Something the confirmation says about a target queue before anything moves (issue 16,
/// must-have 3): it does not exist, nobody consumes it, it is a wait queue that dead-letters
/// elsewhere, or it drops its oldest messages when full.
struct TargetNote {
    queue: String,
    says: String,
    /// A queue to send them to instead (where the wait queue dead-letters to).
    instead: Option<String>,
    /// Moving there needs the drop-head risk accepted (the checkbox).
    drop_head: bool,
    /// Copies would stay there for good (`target::stranding`): confirming the page, which says
    /// so, accepts that.
    strands: bool,
}

/// The notes about each queue the selected messages would go to: a named queue, or the queues
/// the snapshot shows them to have died in. From the last poll: the move checks again, as it
/// goes, with the broker's answer of that moment.
fn target_notes(state: &AppState, view: &crate::metrics::QueueView, targets: &[String]) -> Vec<TargetNote> {
    let mut notes = Vec::new();
    for name in targets.iter().cloned() {
        let Some(q) = last_polled(state, view, &name) else {
            notes.push(TargetNote {
                says: "does not exist (as of the last poll): messages that would go there fail and stay here".into(),
                queue: name,
                instead: None,
                drop_head: false,
                strands: false,
            });
            continue;
        };
        if let crate::broker::policies::Overflow::DropHead { limit } =
            crate::broker::policies::overflow_of(&q.arguments, &q.effective_policy)
        {
            notes.push(TargetNote {
                queue: name.clone(),
                says: format!(
                    "holds {limit} and drops its oldest messages when full: the broker confirms each copy and may \
                     then drop messages, these or others. Tick the box to accept that risk"
                ),
                instead: None,
                drop_head: true,
                strands: false,
            });
        }
        if let Some(stranding) = crate::dlq::target::stranding(view, &q) {
            notes.push(TargetNote {
                queue: name.clone(),
                says: stranding.says,
                instead: stranding.instead,
                drop_head: false,
                strands: true,
            });
        } else if q.consumers == Some(0) {
            notes.push(TargetNote {
                queue: name.clone(),
                says: "has no consumer now: the messages will wait there until one comes".into(),
                instead: None,
                drop_head: false,
                strands: false,
            });
        }
    }
    notes
}

/// The move the form asks for (the confirmation page posts it back with `confirm=true`).
fn move_request(form: &RequeueForm) -> MoveRequest {
    MoveRequest {
        selection: match form.scope {
            Scope::All => Choice::All,
            Scope::Matching => Choice::Matching(Box::new(form.filter.clone())),
            // The page's checkboxes name messages by identity; a hand-written form may still
            // give positions, which mean the current snapshot's.
            _ if !form.messages.is_empty() => Choice::Messages(form.messages.clone()),
            _ => Choice::Positions(form.positions.clone()),
        },
        target: match (form.scope, form.target) {
            (Scope::DeleteSelected, _) => Target::Discard,
            (_, FormTarget::OriginalQueue) => Target::OriginalQueue,
            (_, FormTarget::OriginalExchange) => Target::OriginalExchange,
            (_, FormTarget::Queue) => Target::Queue(form.target_queue.clone()),
        },
        // Ticked on the confirmation page, which states the risk.
        accept_drop_head: form.accept_drop_head,
        // Set by the confirmation when its notes said where copies would stay for good.
        accept_stranding: false,
    }
}

/// The selected messages as the confirmation names them: by their place in the snapshot and
/// their message id.
fn selected_in_words(state: &AppState, view: &crate::metrics::QueueView, form: &RequeueForm) -> String {
    let snapshot = state.snapshots.get(&view.broker, &view.vhost, &view.name);
    let messages = snapshot.as_ref().map(|s| s.messages.as_slice()).unwrap_or_default();
    let id = |m: &SnapshotMessage| format!("{} (id {})", m.position, m.message_id.as_deref().unwrap_or("none"));
    let mut named: Vec<String> = Vec::new();
    for position in &form.positions {
        named.push(match messages.iter().find(|m| m.position == *position) {
            Some(m) => id(m),
            None => format!("{position} (not in the snapshot)"),
        });
    }
    for fingerprint in &form.messages {
        named.push(match messages.iter().find(|m| &m.fingerprint == fingerprint) {
            Some(m) => id(m),
            None => "one no longer in the snapshot".to_string(),
        });
    }
    match named.as_slice() {
        [one] => format!("the message at position {one} of the snapshot"),
        _ => format!("the {} messages at positions {} of the snapshot", named.len(), named.join(", ")),
    }
}

/// What a purge deletes: the ready messages (a purge leaves those a consumer holds unacked),
/// as many as the last poll counted.
fn purge_in_words(view: &crate::metrics::QueueView) -> String {
    let held = match view.unacked {
        Some(n) if n > 0 => format!("; the {} unacked, held by a consumer, stay", format::count(Some(n))),
        _ => String::new(),
    };
    match view.ready {
        Some(n) => format!("all {} ready messages (at the last poll{held})", format::count(Some(n))),
        None => format!("every ready message (how many is unknown: the last poll did not count them{held})"),
    }
}

/// Where a requeue to the original queue sends the messages: the queues the snapshot shows
/// them to have died in, by name. `whole`: every message moved is in the snapshot (a
/// selection); for all or all matching, the snapshot shows some of them only.
fn original_queues_in_words(targets: &[String], whole: bool) -> String {
    const RULE: &str = "the queue each message last died in (its newest x-death entry)";
    let names = targets.iter().map(|q| format!("{q:?}")).collect::<Vec<_>>().join(", ");
    match targets {
        [] => RULE.to_string(),
        _ if !whole => format!("{RULE}: {names} for the messages of the snapshot"),
        [one] => format!("queue {one:?}, where they last died (their newest x-death entry)"),
        _ => format!("queues {names}, each message to the one it last died in (its newest x-death entry)"),
    }
}

pub(super) async fn requeue_form(
    State(state): State<AppState>,
    access: Access,
    Path((broker, vhost, queue)): Path<(String, String, String)>,
    body: String,
) -> Result<Response, PageError> {
    let view = find_queue(&state, &broker, &vhost, &queue).await?;
    let form = parse_requeue_form(&body)?;
    if form.scope == Scope::Matching {
        // Before the confirmation, which names the queues the matching messages died in.
        crate::web::restricted::check_filter(&state, access.principal.role, (&broker, &vhost, &queue), &form.filter)?;
    }
    let deletes = matches!(form.scope, Scope::Purge | Scope::DeleteSelected);
    let targets = if deletes {
        Vec::new()
    } else {
        let request = move_request(&form);
        target_queue_names(&state, &view, &request.target, &request.selection).await?
    };
    let mut page = ActionPage {
        me: Me::of(&access),
        action: match form.scope {
            Scope::Purge => "Purge",
            Scope::DeleteSelected => "Delete",
            _ if form.target == FormTarget::Queue => "Move",
            _ => "Requeue",
        },
        name: queue.clone(),
        back_href: dlq_href(&broker, &vhost, &queue),
        // How many, as the last poll counted them (issue 34, case 6: the purge gave no count).
        what: match form.scope {
            Scope::All => format!("every message ({} at the last poll)", format::count(view.total)),
            Scope::Purge => purge_in_words(&view),
            Scope::Matching => format!("every message matching {}", form.filter.describe()),
            Scope::Selected | Scope::DeleteSelected => selected_in_words(&state, &view, &form),
        },
        target: if deletes {
            String::new()
        } else {
            match form.target {
                // The queues by name, as the snapshot shows them (issue 34, case 6: the page
                // named the rule, not the queue).
                FormTarget::OriginalQueue => original_queues_in_words(&targets, matches!(form.scope, Scope::Selected)),
                FormTarget::OriginalExchange => {
                    "the exchange each message was first published to, with its original routing key".to_string()
                }
                FormTarget::Queue => format!("queue {:?}", form.target_queue),
            }
        },
        deletes,
        duplicates_warning: !deletes && form.target == FormTarget::OriginalExchange,
        target_notes: target_notes(&state, &view, &targets),
        form: FormEcho {
            positions: form.positions.clone(),
            messages: form.messages.clone(),
            scope: form.scope.as_str(),
            target: form.target.as_str(),
            target_queue: form.target_queue.clone(),
            filter_fields: form.filter.form_fields(),
        },
        outcome: None,
        error: None,
    };
    // Every action asks first; the confirmation page posts the same form back with confirm=true.
    if !form.confirmed {
        return Ok(html(page.render()?));
    }
    if form.scope == Scope::Purge {
        let (_, outcome) = run_purge(&state, &view, &access.principal.actor()).await?;
        match outcome {
            Ok(n) => page.outcome = Some(format!("done, {n} messages deleted")),
            Err(e) => {
                page.outcome = Some("failed".to_string());
                page.error = Some(e.to_string());
            }
        }
        return Ok(html(page.render()?));
    }
    let mut request = move_request(&form);
    // The page stated it (`target_notes`), and the user confirmed.
    request.accept_stranding = page.target_notes.iter().any(|n| n.strands);
    match start_move(&state, &view, request, &access.principal.actor()).await? {
        // The job page shows the progress, a cancel button, and the final report.
        Ok(job) => Ok(Redirect::to(&state.href(&format!("/jobs/{}", job.id))).into_response()),
        Err(e) => {
            page.outcome = Some("refused".to_string());
            page.error = Some(e.to_string());
            Ok((StatusCode::UNPROCESSABLE_ENTITY, html(page.render()?)).into_response())
        }
    }
}
