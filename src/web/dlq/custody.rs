//! Custody (issue 18) as the dead-letter pages and the API both act on it: take a queue into
//! custody and release it, replay records, edit and replay one, delete one, each recorded in
//! the audit log like a move; and the confirmation page a start or release shows first.

use std::collections::HashMap;

use serde_json::json;

use crate::audit;
use crate::dlq::custody::{self, ReplayRequest};
use crate::dlq::fates::Fate;
use crate::state::AppState;
use crate::web::error::WebError;
use crate::web::identity::{Access, Me};
use crate::web::links::dlq_href;
use crate::web::lookup::find_queue;

/// Refuses a role below the one that reads this queue's payloads and headers.
pub(super) fn payloads_for(state: &AppState, access: &Access, queue: (&str, &str, &str)) -> Result<(), WebError> {
    crate::web::restricted::require(state, access.principal.role, queue, "this queue's records")
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
        run_by: state.replica.id(),
    };
    state.storage.check(&*state.store).await.map_err(WebError::Storage)?;
    let audit_id = audit::start(&state.store, entry)
        .await
        .map_err(|e| WebError::Storage(state.storage.failed("the audit log", &e)))?;
    let job = format!("audit-{audit_id}");
    let stranding = if edit.accept_stranding {
        HashMap::new()
    } else {
        crate::dlq::jobs::strandings(&state.live, (broker, vhost, queue))
    };
    let outcome = custody::edit_and_replay(
        &state.store,
        &config,
        (vhost, queue),
        id,
        &edit,
        (&job, state.replica.id(), stranding),
    )
    .await;
    if let Ok((to, _)) = &outcome {
        state.jobs.put_into(broker, vhost, std::iter::once(to.as_str()));
    }
    let message_id = custody::message(&state.store, (broker, vhost, queue), id)
        .await
        .ok()
        .flatten()
        .and_then(|(record, _, _)| record.message_id);
    let finished = match &outcome {
        Ok((to, diff)) => {
            let detail = json!({"record": id, "to": to, "diff": diff}).to_string();
            let fate = Fate::new(1, message_id.as_deref(), "moved", &format!("{to} (an edited copy)"));
            crate::dlq::fates::finish(&state.store, audit_id, "done", 1, 0, Some(&detail), &[fate]).await
        }
        Err(why) => {
            let fate = Fate::new(1, message_id.as_deref(), "failed", why);
            crate::dlq::fates::finish(&state.store, audit_id, "failed", 0, 1, Some(why), &[fate]).await
        }
    };
    if let Err(e) = finished {
        tracing::error!(audit_id, error = %e, "recording the end of a custody edit");
    }
    Ok((audit_id, outcome))
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
    custody::message(&state.store, (broker, vhost, queue), id)
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
        run_by: state.replica.id(),
    };
    state.storage.check(&*state.store).await.map_err(WebError::Storage)?;
    let audit_id = audit::start(&state.store, entry)
        .await
        .map_err(|e| WebError::Storage(state.storage.failed("the audit log", &e)))?;
    let outcome = custody::delete(&state.store, (broker, vhost, queue), id).await;
    let finished = match &outcome {
        // A delete's fate is `moved` to nowhere, as the audit of a delete from a queue says it.
        Ok(message_id) => {
            let fate = Fate::new(1, message_id.as_deref(), "moved", "");
            crate::dlq::fates::finish(&state.store, audit_id, "done", 1, 0, None, &[fate]).await
        }
        Err(why) => {
            let why = why.to_string();
            crate::dlq::fates::finish(&state.store, audit_id, "failed", 0, 1, Some(&why), &[]).await
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
    match &request.selection {
        custody::CustodySelection::Matching(filter) => filter.check().map_err(WebError::BadRequest)?,
        custody::CustodySelection::Records(ids) => check_ticked(state, (broker, vhost, queue), ids).await?,
        custody::CustodySelection::All => {}
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

/// The most records a replay takes by id: a page lists at most this many, and more are a
/// filter's work (`Matching`), which the store answers without a list of ids in the request.
pub const TICKED_MAX: usize = 1000;

/// Refuses a selection of records by id that is empty, longer than `TICKED_MAX`, or names a
/// record this queue's custody does not hold now (another queue's, replayed already, or never
/// taken in): nothing is replayed then, and the error names the ids, not where they are.
async fn check_ticked(state: &AppState, queue: (&str, &str, &str), ids: &[i64]) -> Result<(), WebError> {
    if ids.is_empty() {
        return Err(WebError::BadRequest("tick at least one record, or replay all".to_string()));
    }
    if ids.len() > TICKED_MAX {
        return Err(WebError::BadRequest(format!(
            "{} records named; a replay takes at most {TICKED_MAX} by id: replay the records matching a filter instead",
            ids.len()
        )));
    }
    let missing = custody::not_held(&state.store, queue, ids)
        .await
        .map_err(|e| WebError::Storage(state.storage.failed("reading custody", &e)))?;
    if missing.is_empty() {
        return Ok(());
    }
    const NAMED: usize = 10;
    let mut named = missing.iter().take(NAMED).map(i64::to_string).collect::<Vec<_>>().join(", ");
    if missing.len() > NAMED {
        named.push_str(&format!(" and {} more", missing.len() - NAMED));
    }
    let (noun, verb) = if missing.len() == 1 { ("record", "is") } else { ("records", "are") };
    Err(WebError::BadRequest(format!(
        "{noun} {named} {verb} not held in the custody of {:?} (another queue's, replayed already, or never taken \
         in): nothing was replayed",
        queue.2
    )))
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
        run_by: state.replica.id(),
    };
    state.storage.check(&*state.store).await.map_err(WebError::Storage)?;
    let audit_id = audit::start(&state.store, entry)
        .await
        .map_err(|e| WebError::Storage(state.storage.failed("the audit log", &e)))?;
    let switched = custody::set_switch(&state.store, broker, vhost, queue, custody::Switch::On, actor).await;
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
    if let Err(e) = crate::dlq::fates::finish(&state.store, audit_id, outcome, 0, 0, Some(&detail), &[]).await {
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
    pub me: Me,
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
        me: Me,
        (broker, vhost, queue): (&str, &str, &str),
        action: &'static str,
    ) -> Result<ConfirmPage, WebError> {
        let view = find_queue(state, broker, vhost, queue).await?;
        let counts = custody::counts_by_queue(&state.store, broker)
            .await
            .map_err(|e| WebError::Storage(state.storage.failed("reading custody", &e)))?;
        let held = counts.get(&(vhost.to_string(), queue.to_string())).map_or(0, |c| c.held + c.claimed);
        Ok(ConfirmPage {
            me,
            name: queue.to_string(),
            back_href: dlq_href(broker, vhost, queue),
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
    custody::set_switch(&state.store, broker, vhost, queue, custody::Switch::Released, actor)
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
