//! A broker and a queue by the names in a URL, as every wing looks them up: the poller's live
//! view, a queue warren has seen but the broker no longer lists, or a 404 that says which name
//! was not found.

use chrono::DateTime;

use crate::history;
use crate::live::BrokerLive;
use crate::metrics::QueueView;
use crate::state::AppState;
use crate::web::error::WebError;

/// The broker's live view (its last poll), or 404.
pub fn broker_live(state: &AppState, broker: &str) -> Result<BrokerLive, WebError> {
    state.live.broker(broker).ok_or_else(|| WebError::NotFound(format!("no broker named {broker:?}")))
}

/// How often warren polls the broker, in seconds (time ranges are checked against it).
pub fn poll_interval_secs(state: &AppState, broker: &str) -> i64 {
    state.broker_config(broker).map(|b| b.poll_interval.as_secs() as i64).unwrap_or(10)
}

/// A queue by its names: live if the broker lists it, otherwise its last stored state if warren
/// has seen it (a deleted queue keeps its history).
pub async fn find_queue(state: &AppState, broker: &str, vhost: &str, name: &str) -> Result<QueueView, WebError> {
    let live = broker_live(state, broker)?;
    if let Some(q) = live.queues.iter().find(|q| *q.vhost == *vhost && *q.name == *name) {
        return Ok(q.clone());
    }
    let not_found = || WebError::NotFound(format!("no queue {name:?} in vhost {vhost:?} on broker {broker:?}"));
    let known = history::find_queue(&state.store, broker, vhost, name).await?.ok_or_else(not_found)?;
    let ts = known.last_sample.map(|(ts, _)| ts).unwrap_or_default();
    let as_of = DateTime::from_timestamp(known.deleted_at.unwrap_or(ts), 0).unwrap_or_default();
    Ok(crate::poller::restore::stored_view(broker, known, as_of))
}
