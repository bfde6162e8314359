//! The JSON API (`/api/v1`): the same data as the pages.

use axum::extract::{Path, Query, State};
use axum::routing::get;
use axum::{Json, Router};
use chrono::{DateTime, Utc};
use serde::Serialize;

use super::query::{Paged, QueueQuery, RangeQuery, TimeRange};
use super::{ApiError, WebError};
use crate::history::rollup::Windows;
use crate::history::series::{self, Resolution, RollupPoint};
use crate::history::{self, BrokerPoint, QueuePoint};
use crate::live::BrokerLive;
use crate::metrics::QueueView;
use crate::state::AppState;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/api/v1/brokers", get(brokers))
        .route("/api/v1/brokers/{broker}/history", get(broker_history))
        .route("/api/v1/queues", get(queues))
        .route("/api/v1/queues/{broker}/{vhost}/{queue}", get(queue))
        .route("/api/v1/queues/{broker}/{vhost}/{queue}/history", get(queue_history))
}

/// A broker as the API shows it: status, rates, totals; never its credentials.
#[derive(Serialize)]
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

pub fn broker_live(state: &AppState, broker: &str) -> Result<BrokerLive, WebError> {
    state.live.broker(broker).ok_or_else(|| WebError::NotFound(format!("no broker named {broker:?}")))
}

pub(super) fn poll_interval_secs(state: &AppState, broker: &str) -> i64 {
    state.broker_config(broker).map(|b| b.poll_interval.as_secs() as i64).unwrap_or(10)
}

#[derive(Serialize, utoipa::ToSchema)]
pub struct BrokerHistory {
    pub broker: String,
    #[serde(flatten, serialize_with = "crate::times::from")]
    #[schema(schema_with = crate::times::schema::from)]
    pub from: i64,
    #[serde(flatten, serialize_with = "crate::times::to")]
    #[schema(schema_with = crate::times::schema::to)]
    pub to: i64,
    pub step: i64,
    /// `raw`: each point averages the polls in `(ts - step, ts]`; `1m` / `1h`: read from roll-ups,
    /// each point averages the polls in `[ts, ts + step)`.
    pub resolution: Resolution,
    pub points: Vec<BrokerPoint>,
}

/// The resolution for a range, and the step in whole buckets of it.
fn resolution_for(state: &AppState, range: &TimeRange) -> (Resolution, i64) {
    let windows = Windows::from_config(&state.config);
    let resolution = series::choose(range.step, range.from, Utc::now().timestamp(), &windows);
    (resolution, resolution.step(range.step))
}

pub async fn load_broker_history(
    state: &AppState,
    broker: &str,
    range: &RangeQuery,
) -> Result<BrokerHistory, WebError> {
    broker_live(state, broker)?;
    let id = state.broker_ids[broker];
    let range = range.validate(Utc::now(), poll_interval_secs(state, broker))?;
    let (resolution, step) = resolution_for(state, &range);
    let TimeRange { from, to, .. } = range;
    let points = match resolution {
        Resolution::Raw => history::broker_history(&state.db, id, from, to, step).await?,
        _ => series::broker_series(&state.db, id, resolution, from, to, step).await?,
    };
    Ok(BrokerHistory { broker: broker.to_string(), from, to, step, resolution, points })
}

async fn broker_history(
    State(state): State<AppState>,
    Path(broker): Path<String>,
    Query(range): Query<RangeQuery>,
) -> Result<Json<BrokerHistory>, ApiError> {
    Ok(Json(load_broker_history(&state, &broker, &range).await?))
}

/// A broker whose numbers are not current: down since its last success, or showing the last
/// known state from the database (`restored`) until its first poll of this run succeeds.
#[derive(Serialize)]
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
        note: super::format::stale_note(live)?,
    })
}

/// The queue list: one page of the sorted snapshot, as every list (`items`, `next_cursor`,
/// `limit`), with the count of matching queues and, deprecated for one release, `page` and
/// `per_page`.
#[derive(Serialize)]
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

/// A queue by its names: live if the broker lists it, otherwise its last stored state if warren
/// has seen it (a deleted queue keeps its history).
pub async fn find_queue(state: &AppState, broker: &str, vhost: &str, name: &str) -> Result<QueueView, WebError> {
    let live = broker_live(state, broker)?;
    if let Some(q) = live.queues.iter().find(|q| *q.vhost == *vhost && *q.name == *name) {
        return Ok(q.clone());
    }
    let not_found = || WebError::NotFound(format!("no queue {name:?} in vhost {vhost:?} on broker {broker:?}"));
    let known = history::find_queue(&state.db, broker, vhost, name).await?.ok_or_else(not_found)?;
    let ts = known.last_sample.map(|(ts, _)| ts).unwrap_or_default();
    let as_of = DateTime::from_timestamp(known.deleted_at.unwrap_or(ts), 0).unwrap_or_default();
    Ok(crate::poller::restore::stored_view(broker, known, as_of))
}

/// A queue with whether its broker's numbers are current.
#[derive(Serialize)]
pub struct QueueJson {
    #[serde(flatten)]
    pub queue: QueueView,
    pub stale: Option<StaleJson>,
    /// With a hung consumer: the connections whose channels hold the unacked messages, from
    /// the last consumers listing (`/consumers` has the details and the listing's age).
    pub hung_consumer_connections: Option<Vec<String>>,
}

async fn queue(
    State(state): State<AppState>,
    Path((broker, vhost, name)): Path<(String, String, String)>,
) -> Result<Json<QueueJson>, ApiError> {
    let queue = find_queue(&state, &broker, &vhost, &name).await?;
    let live = broker_live(&state, &broker)?;
    let stale = stale_json(&live);
    let hung_consumer_connections = super::clients::hung_consumer_connections(&live, &queue);
    Ok(Json(QueueJson { queue, stale, hung_consumer_connections }))
}

#[derive(Serialize, utoipa::ToSchema)]
pub struct QueueHistory {
    pub broker: String,
    pub vhost: String,
    pub name: String,
    #[serde(flatten, serialize_with = "crate::times::from")]
    #[schema(schema_with = crate::times::schema::from)]
    pub from: i64,
    #[serde(flatten, serialize_with = "crate::times::to")]
    #[schema(schema_with = crate::times::schema::to)]
    pub to: i64,
    pub step: i64,
    /// Which data the points come from: `raw` samples (each point the values in force at its
    /// time) or `1m` / `1h` roll-ups (each point aggregates `[ts, ts + step)`, with min, max,
    /// last and coverage).
    pub resolution: Resolution,
    pub points: QueuePoints,
}

/// A queue's points: their shape follows the resolution.
#[derive(Serialize)]
#[serde(untagged)]
pub enum QueuePoints {
    Raw(Vec<QueuePoint>),
    Rollup(Vec<RollupPoint>),
}

/// Raw points or roll-up points: `anyOf`, since an empty list is either (`oneOf` would refuse
/// an empty answer; serde's untagged enum would derive that).
impl utoipa::PartialSchema for QueuePoints {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        use utoipa::openapi::schema::{AnyOfBuilder, ArrayBuilder};
        use utoipa::openapi::Ref;
        AnyOfBuilder::new()
            .item(ArrayBuilder::new().items(Ref::from_schema_name("QueuePoint")))
            .item(ArrayBuilder::new().items(Ref::from_schema_name("RollupPoint")))
            .into()
    }
}

impl utoipa::ToSchema for QueuePoints {
    fn schemas(schemas: &mut Vec<(String, utoipa::openapi::RefOr<utoipa::openapi::schema::Schema>)>) {
        use utoipa::PartialSchema;
        schemas.push(("QueuePoint".to_string(), QueuePoint::schema()));
        schemas.push(("RollupPoint".to_string(), RollupPoint::schema()));
    }
}

impl QueuePoints {
    pub fn len(&self) -> usize {
        match self {
            QueuePoints::Raw(p) => p.len(),
            QueuePoints::Rollup(p) => p.len(),
        }
    }
}

pub async fn load_queue_history(
    state: &AppState,
    broker: &str,
    vhost: &str,
    name: &str,
    range: &RangeQuery,
) -> Result<QueueHistory, WebError> {
    broker_live(state, broker)?;
    let interval = poll_interval_secs(state, broker);
    let range = range.validate(Utc::now(), interval)?;
    let (resolution, step) = resolution_for(state, &range);
    let TimeRange { from, to, .. } = range;
    let known = history::find_queue(&state.db, broker, vhost, name).await?.ok_or_else(|| {
        WebError::NotFound(format!("no history for queue {name:?} in vhost {vhost:?} on broker {broker:?}"))
    })?;
    let broker_id = state.broker_ids[broker];
    let points = match resolution {
        Resolution::Raw => {
            QueuePoints::Raw(history::queue_history(&state.db, broker_id, known.id, from, to, step, interval).await?)
        }
        _ => QueuePoints::Rollup(
            series::queue_series(
                &state.db,
                broker_id,
                known.id,
                known.deleted_at,
                resolution,
                from,
                to,
                step,
                interval,
            )
            .await?,
        ),
    };
    Ok(QueueHistory {
        broker: broker.to_string(),
        vhost: vhost.to_string(),
        name: name.to_string(),
        from,
        to,
        step,
        resolution,
        points,
    })
}

async fn queue_history(
    State(state): State<AppState>,
    Path((broker, vhost, name)): Path<(String, String, String)>,
    Query(range): Query<RangeQuery>,
) -> Result<Json<QueueHistory>, ApiError> {
    Ok(Json(load_queue_history(&state, &broker, &vhost, &name, &range).await?))
}
