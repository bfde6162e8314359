//! A move or a purge as the requeue page and the API both start it, and the queues a move would
//! put messages into, checked before it starts: the confirmation page states what the API
//! refuses with 409 (`would_strand`).

use std::sync::Arc;

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

use super::search::snapshot_matches;
use crate::audit;
use crate::dlq::jobs::{self, Choice, Job, MoveRequest, StartError};
use crate::dlq::message;
use crate::dlq::{self, MoveError, Target};
use crate::state::AppState;
use crate::web::error::WebError;

/// Starts a move as a background job (`dlq::jobs::start`), as the actor of the request.
pub(super) async fn start_move(
    state: &AppState,
    view: &crate::metrics::QueueView,
    request: MoveRequest,
    actor: &str,
) -> Result<Result<Arc<Job>, MoveError>, WebError> {
    match jobs::start(&state.dlq(), view, request, actor).await {
        Ok(job) => Ok(Ok(job)),
        Err(StartError::Refused(e)) => Ok(Err(e)),
        Err(StartError::NoBroker(name)) => Err(WebError::NotFound(format!("no broker named {name:?}"))),
        Err(StartError::Storage(why)) => Err(WebError::Storage(why)),
        Err(busy @ StartError::Busy(_)) => Err(WebError::Conflict(busy.to_string())),
        Err(StartError::Stale(why)) => Err(WebError::Conflict(why)),
    }
}

/// Runs a purge with its audit entry; returns the audit id and how many messages went.
pub(super) async fn run_purge(
    state: &AppState,
    view: &crate::metrics::QueueView,
    actor: &str,
) -> Result<(i64, Result<u32, MoveError>), WebError> {
    let config = state
        .broker_config(&view.broker)
        .ok_or_else(|| WebError::NotFound(format!("no broker named {:?}", view.broker)))?;
    let entry = audit::Entry {
        actor,
        broker: &view.broker,
        vhost: &view.vhost,
        queue: &view.name,
        action: "purge",
        request: "{}".to_string(),
        run_by: state.replica.id(),
    };
    state.storage.check(&*state.store).await.map_err(WebError::Storage)?;
    let audit_id = audit::start(&state.store, entry)
        .await
        .map_err(|e| WebError::Storage(state.storage.failed("the audit log", &e)))?;
    let outcome = dlq::purge(config, &view.vhost, &view.name).await;
    let what = match &outcome {
        Ok(n) => format!("the purge of {n} messages"),
        Err(_) => "a purge that failed".to_string(),
    };
    let what = format!("{what} at {}", chrono::Utc::now().format("%Y-%m-%d %H:%M:%S UTC"));
    let queue = (view.broker.as_ref(), view.vhost.as_ref(), view.name.as_ref());
    crate::dlq::browse::outdate(&state.store, &state.snapshots, queue, &what).await;
    match &outcome {
        Ok(n) => crate::dlq::fates::finish(&state.store, audit_id, "done", *n as usize, 0, None, &[]).await?,
        Err(e) => crate::dlq::fates::finish(&state.store, audit_id, "failed", 0, 0, Some(&e.to_string()), &[]).await?,
    }
    Ok((audit_id, outcome))
}

/// The queues a move would put messages into, as far as is known before it reads any: a named
/// queue, or the queues the snapshot shows the chosen messages to have died in last (for the
/// original queue; without a snapshot none are known yet). The confirmation page and the API
/// both check these (`target::stranding`).
pub(super) async fn target_queue_names(
    state: &AppState,
    view: &crate::metrics::QueueView,
    target: &Target,
    choice: &Choice,
) -> Result<Vec<String>, WebError> {
    match target {
        Target::Queue(name) => Ok(vec![name.clone()]),
        Target::OriginalExchange | Target::Discard => Ok(Vec::new()),
        Target::OriginalQueue => {
            let Some(snapshot) = state.snapshots.get(&view.broker, &view.vhost, &view.name) else {
                return Ok(Vec::new());
            };
            let matched = match choice {
                Choice::Matching(filter) => snapshot_matches(&snapshot, filter, &state.matchers.request()).await?,
                _ => Vec::new(),
            };
            let chosen = |(i, m): &(usize, &message::SnapshotMessage)| match choice {
                Choice::Positions(positions) => positions.contains(&m.position),
                Choice::Messages(fingerprints) => fingerprints.contains(&m.fingerprint),
                Choice::Matching(_) => matched[*i],
                Choice::All => true,
            };
            let mut names: Vec<String> = snapshot
                .messages
                .iter()
                .enumerate()
                .filter(chosen)
                .filter_map(|(_, m)| m.original_queue.clone())
                .collect();
            names.sort();
            names.dedup();
            Ok(names)
        }
    }
}

/// The queues of the vhost of `view` as the last poll saw them, by name.
pub(super) fn last_polled(
    state: &AppState,
    view: &crate::metrics::QueueView,
    name: &str,
) -> Option<crate::metrics::QueueView> {
    let live = state.live.snapshot();
    let broker = live.iter().find(|b| *b.name == *view.broker)?;
    broker.queues.iter().find(|q| *q.vhost == *view.vhost && *q.name == *name).cloned()
}

/// The moves into `names` that would strand their messages (`target::stranding`), as the last
/// poll saw those queues.
pub(super) fn strandings(
    state: &AppState,
    view: &crate::metrics::QueueView,
    names: &[String],
) -> Vec<crate::dlq::target::Stranding> {
    names
        .iter()
        .filter_map(|n| last_polled(state, view, n))
        .filter_map(|q| crate::dlq::target::stranding(view, &q))
        .collect()
}

/// 409 `would_strand`: copies sent to `s.queue` would stay there for good. The answer of every
/// API path that puts messages back (moves, requeues, custody replays) unless the request
/// accepts the risk.
pub(super) fn would_strand(s: &crate::dlq::target::Stranding, nothing: &str) -> Response {
    let instead = match &s.instead {
        Some(q) => format!("; send them to {q:?} instead (target {{\"queue\": {q:?}}})"),
        None => String::new(),
    };
    let message = format!(
        "queue {:?} {}{instead}, or confirm the risk with \"accept_stranding\": true; {nothing}",
        s.queue, s.says
    );
    let error = json!({"error": {
        "code": "would_strand",
        "message": message,
        "queue": s.queue,
        "suggested_target": s.instead,
    }});
    (StatusCode::CONFLICT, Json(error)).into_response()
}
