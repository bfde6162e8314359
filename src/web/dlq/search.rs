//! Searching dead letters within a budget: which of a snapshot's messages a filter matches,
//! and a search of custody that stopped or failed, as the client is told.

use std::sync::Arc;

use crate::dlq::browse::Snapshot;
use crate::dlq::budget::{Budget, Stopped};
use crate::dlq::custody;
use crate::dlq::message;
use crate::state::AppState;
use crate::web::error::WebError;

/// Which of a snapshot's messages `f` matches, in order; a regular expression matches within
/// `budget`, off the async workers (a snapshot holds up to 1,000 messages).
pub(super) async fn snapshot_matches(
    snapshot: &Arc<Snapshot>,
    f: &message::Filter,
    budget: &Budget,
) -> Result<Vec<bool>, WebError> {
    if f.regex().is_none() {
        return Ok(snapshot.messages.iter().map(|m| f.matches(m)).collect());
    }
    let (snapshot, f) = (snapshot.clone(), f.clone());
    budget
        .run(move |check| {
            snapshot.messages.iter().map(|m| f.matches_within(m, Some(check))).collect::<Result<Vec<bool>, _>>()
        })
        .await
        .map_err(stopped_search)
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
