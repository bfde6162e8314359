//! A broker's and a queue's history over a time range, as the charts read it from the JSON API
//! (`/api/v1/.../history`): raw samples for short ranges, roll-ups for long ones.

use axum::extract::{Path, Query, State};
use axum::routing::get;
use axum::{Json, Router};
use chrono::Utc;
use serde::Serialize;

use crate::history::rollup::Windows;
use crate::history::series::{self, Resolution, RollupPoint};
use crate::history::{self, BrokerPoint, QueuePoint};
use crate::state::AppState;
use crate::web::error::{ApiError, WebError};
use crate::web::lookup::{broker_live, poll_interval_secs};
use crate::web::query::{RangeQuery, TimeRange};

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/api/v1/brokers/{broker}/history", get(broker_history))
        .route("/api/v1/queues/{broker}/{vhost}/{queue}/history", get(queue_history))
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
        Resolution::Raw => history::broker_history(&state.store, id, from, to, step).await?,
        _ => series::broker_series(&state.store, id, resolution, from, to, step).await?,
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
    let known = history::find_queue(&state.store, broker, vhost, name).await?.ok_or_else(|| {
        WebError::NotFound(format!("no history for queue {name:?} in vhost {vhost:?} on broker {broker:?}"))
    })?;
    let broker_id = state.broker_ids[broker];
    let points = match resolution {
        Resolution::Raw => {
            QueuePoints::Raw(history::queue_history(&state.store, broker_id, known.id, from, to, step, interval).await?)
        }
        _ => QueuePoints::Rollup(
            series::queue_series(
                &state.store,
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

/// A queue's minimum set of numbers (`numbers::queue_numbers`), from its stored samples over
/// the numbers' window, one per poll. A queue not stored yet has none: the numbers then say
/// they come from the last poll alone.
pub async fn load_queue_numbers(
    state: &AppState,
    live: &crate::live::BrokerLive,
    view: &crate::metrics::QueueView,
) -> Result<crate::numbers::QueueNumbers, WebError> {
    let interval = poll_interval_secs(state, &live.name).max(1);
    let window = crate::numbers::window_secs(interval);
    let to = Utc::now().timestamp();
    let points = match (view.id, state.broker_ids.get(&live.name)) {
        (Some(queue_id), Some(&broker_id)) if !view.deleted => {
            history::queue_history(&state.store, broker_id, queue_id, to - window, to, interval, interval).await?
        }
        _ => Vec::new(),
    };
    Ok(crate::numbers::queue_numbers(view, &points, window, &live.queues))
}

/// A queue's depth on the broker (ready + unacked) as last stored at or before `at`, with the
/// time of that reading; `None` when nothing was stored in the hour before (a history younger
/// than that, or a gap). Every stored queue gets a keyframe at least hourly, so an hour finds
/// one; raw samples where they are kept, else the roll-ups' last values.
pub async fn depth_at(
    state: &AppState,
    broker_id: i64,
    queue_id: i64,
    at: i64,
    interval: i64,
) -> Result<Option<(i64, u64)>, WebError> {
    const SPAN: i64 = 3600;
    let windows = Windows::from_config(&state.config);
    let from = at - SPAN;
    let depth = |ready: Option<i64>, unacked: Option<i64>| Some((ready? + unacked?).max(0) as u64);
    let found = match series::choose(interval, from, Utc::now().timestamp(), &windows) {
        Resolution::Raw => history::queue_history(&state.store, broker_id, queue_id, from, at, interval, interval)
            .await?
            .into_iter()
            .rev()
            .find_map(|p| Some((p.ts, depth(p.ready, p.unacked)?))),
        resolution => {
            let step = resolution.step(interval);
            series::queue_series(&state.store, broker_id, queue_id, None, resolution, from, at, step, interval)
                .await?
                .into_iter()
                .rev()
                .find_map(|p| Some((p.ts, depth(p.ready_last, p.unacked_last)?)))
        }
    };
    Ok(found)
}
