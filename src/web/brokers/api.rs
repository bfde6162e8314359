//! The JSON API of brokers and queues (`/api/v1/brokers`, `/api/v1/queues`): the same data as
//! the overview, the queue list and a queue's page. Their history is `history.rs`.

use axum::extract::{Path, Query, State};
use axum::routing::get;
use axum::{Json, Router};
use chrono::{DateTime, Utc};
use serde::Serialize;

use super::clients::hung_consumer_connections;
use crate::live::BrokerLive;
use crate::metrics::QueueView;
use crate::state::AppState;
use crate::web::error::ApiError;
use crate::web::format;
use crate::web::lookup::{broker_live, find_queue};
use crate::web::query::{Paged, QueueQuery};

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/api/v1/brokers", get(brokers))
        .route("/api/v1/queues", get(queues))
        .route("/api/v1/queues/{broker}/{vhost}/{queue}", get(queue))
}

/// A broker as the API shows it: status, rates, totals; never its credentials.
#[derive(Serialize, utoipa::ToSchema)]
pub struct BrokerJson {
    pub management_url: String,
    pub poll_interval_secs: u64,
    pub stale_since: Option<DateTime<Utc>>,
    #[serde(flatten)]
    pub live: BrokerLive,
}

pub fn broker_json(state: &AppState, live: BrokerLive) -> BrokerJson {
    let config = state.broker_config(&live.name);
    BrokerJson {
        management_url: config.map(|b| b.management_url.to_string()).unwrap_or_default(),
        poll_interval_secs: config.map(|b| b.poll_interval.as_secs()).unwrap_or_default(),
        stale_since: live.stale_since(),
        live,
    }
}

async fn brokers(State(state): State<AppState>) -> Json<Vec<BrokerJson>> {
    Json(state.live.snapshot().into_iter().map(|b| broker_json(&state, b)).collect())
}

/// A broker whose numbers are not current: down since its last success, or showing the last
/// known state from the database (`restored`) until its first poll of this run succeeds.
#[derive(Serialize, utoipa::ToSchema)]
pub struct StaleJson {
    pub broker: String,
    pub since: DateTime<Utc>,
    pub restored: bool,
    pub note: String,
}

fn stale_json(live: &BrokerLive) -> Option<StaleJson> {
    Some(StaleJson {
        broker: live.name.clone(),
        since: live.stale_since()?,
        restored: live.status.restored_from.is_some(),
        note: format::stale_note(live)?,
    })
}

/// The queue list: one page of the sorted snapshot, as every list (`items`, `next_cursor`,
/// `limit`), with the count of matching queues and, deprecated for one release, `page` and
/// `per_page`.
#[derive(Serialize, utoipa::ToSchema)]
pub struct QueueList {
    #[serde(flatten)]
    pub page: Paged<QueueView>,
    /// Queues matching the filters, on every page.
    pub total: usize,
    /// Deprecated (kept for one release): the page number of `page`/`per_page` paging.
    #[serde(rename = "page")]
    pub page_number: usize,
    /// Deprecated (kept for one release): as `limit`.
    pub per_page: usize,
    pub stale: Vec<StaleJson>,
}

async fn queues(State(state): State<AppState>, Query(query): Query<QueueQuery>) -> Result<Json<QueueList>, ApiError> {
    let listing = query.validate()?;
    let live = state.live.snapshot();
    let (items, total) = listing.apply(&live);
    let stale: Vec<StaleJson> = live.iter().filter_map(stale_json).collect();
    // The cursor of a sorted snapshot is a position in it: the snapshot is sorted anew for each
    // request, so there is no item to anchor on that keeps its place.
    let end = listing.offset.saturating_add(items.len());
    let next_cursor = (end < total).then(|| end.to_string());
    let page = Paged { items, next_cursor, limit: listing.per_page };
    Ok(Json(QueueList { page, total, page_number: listing.page, per_page: listing.per_page, stale }))
}

/// A queue with whether its broker's numbers are current.
#[derive(Serialize, utoipa::ToSchema)]
pub struct QueueJson {
    #[serde(flatten)]
    pub queue: QueueView,
    pub stale: Option<StaleJson>,
    /// With a hung consumer: the connections whose channels hold the unacked messages, from
    /// the last consumers listing (`/consumers` has the details and the listing's age).
    pub hung_consumer_connections: Option<Vec<String>>,
    /// The minimum set of numbers (issue 35): wait, processing time, retry share, oldest age and
    /// dead letters, each with how it was derived and whether the queue was in steady state.
    pub numbers: crate::numbers::QueueNumbers,
}

async fn queue(
    State(state): State<AppState>,
    Path((broker, vhost, name)): Path<(String, String, String)>,
) -> Result<Json<QueueJson>, ApiError> {
    let queue = find_queue(&state, &broker, &vhost, &name).await?;
    let live = broker_live(&state, &broker)?;
    let stale = stale_json(&live);
    let hung_consumer_connections = hung_consumer_connections(&live, &queue);
    let numbers = super::history::load_queue_numbers(&state, &live, &queue).await?;
    Ok(Json(QueueJson { queue, stale, hung_consumer_connections, numbers }))
}
