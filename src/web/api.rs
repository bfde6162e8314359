//! The JSON API (`/api/v1`): the same data as the pages.

use axum::extract::{Path, Query, State};
use axum::routing::get;
use axum::{Json, Router};
use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::{json, Value};

use super::query::{QueueQuery, RangeQuery, TimeRange};
use super::{ApiError, WebError};
use crate::history::rollup::Windows;
use crate::history::series::{self, Resolution, RollupPoint};
use crate::history::{self, BrokerPoint, QueuePoint};
use crate::metrics::{exact_age, rate_from_milli, QueueView};
use crate::state::{AppState, BrokerLive};

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

fn poll_interval_secs(state: &AppState, broker: &str) -> i64 {
    state.broker_config(broker).map(|b| b.poll_interval.as_secs() as i64).unwrap_or(10)
}

#[derive(Serialize)]
pub struct BrokerHistory {
    pub broker: String,
    pub from: i64,
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

async fn queues(State(state): State<AppState>, Query(query): Query<QueueQuery>) -> Result<Json<Value>, ApiError> {
    let listing = query.validate()?;
    let (items, total) = listing.apply(&state.live.snapshot());
    Ok(Json(json!({"items": items, "total": total, "page": listing.page, "per_page": listing.per_page})))
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
    let parse = |text: &str| match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(map)) => std::sync::Arc::new(map),
        _ => Default::default(),
    };
    let (ts, sample) = known.last_sample.unwrap_or_default();
    let arguments = parse(&known.meta.arguments);
    let effective_policy = parse(&known.meta.effective_policy);
    let updated_at = DateTime::from_timestamp(known.deleted_at.unwrap_or(ts), 0).unwrap_or_default();
    let total = sample.ready.zip(sample.unacked).map(|(r, u)| (r + u) as u64);
    let (oldest_age_secs, oldest_age_source) = exact_age(total, sample.head_ts, updated_at);
    Ok(QueueView {
        broker: broker.into(),
        vhost: known.meta.vhost.into(),
        name: known.meta.name.into(),
        kind: known.meta.kind.into(),
        durable: known.meta.durable,
        state: None,
        ready: sample.ready.map(|v| v as u64),
        unacked: sample.unacked.map(|v| v as u64),
        total,
        consumers: sample.consumers.map(|v| v as u64),
        publish_rate: rate_from_milli(sample.publish_rate_m),
        deliver_rate: rate_from_milli(sample.deliver_rate_m),
        ack_rate: rate_from_milli(sample.ack_rate_m),
        redeliver_rate: rate_from_milli(sample.redeliver_rate_m),
        delivery_limit: None,
        oldest_age_secs,
        oldest_age_source,
        oldest_age_lower_bound: false,
        fifo_broken_since: None,
        custody_held: None,
        custody_intake_stopped: None,
        age_since_first_publish: false,
        redelivery_share: None,
        backlog_growth_rate: None,
        // Whether dead-letter routing fed it is not stored: the publish rate alone could be a
        // DLQ's bare 0.
        inflow_rate: None,
        inflow_source: crate::metrics::InflowSource::Unknown,
        time_to_drain_secs: None,
        no_consumers: false,
        hung_consumer_secs: None,
        holding_secs: None,
        dead_letters: crate::broker::topology::DeadLetterInfo {
            dead_letter_target: crate::broker::topology::dead_letter_config(&arguments, &effective_policy).map(
                |(exchange, routing_key, configured_by)| {
                    Box::new(crate::broker::topology::DeadLetterTarget {
                        exchange,
                        routing_key,
                        configured_by,
                        queues: None,
                    })
                },
            ),
            // Roles come from the live topology and consumers, which a stored queue lacks.
            role_reason: "not in the latest listing: no topology to tell its role".into(),
            ..Default::default()
        },
        arguments,
        policy: known.meta.policy,
        effective_policy,
        updated_at,
        deleted: known.deleted_at.is_some(),
        id: Some(known.id),
        publish_count: None,
        head_ts: sample.head_ts,
        estimate: None,
    })
}

async fn queue(
    State(state): State<AppState>,
    Path((broker, vhost, name)): Path<(String, String, String)>,
) -> Result<Json<QueueView>, ApiError> {
    Ok(Json(find_queue(&state, &broker, &vhost, &name).await?))
}

#[derive(Serialize)]
pub struct QueueHistory {
    pub broker: String,
    pub vhost: String,
    pub name: String,
    pub from: i64,
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
