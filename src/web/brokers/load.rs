//! The broker page: which source serves which number and why, the cadences in force, and what
//! warren's recent calls cost the broker (issue 8: a monitoring tool must never become the
//! broker's heaviest client, so its cost is shown where the numbers are).

use askama::Template;
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::Response;
use axum::routing::get;
use axum::{Json, Router};
use chrono::{DateTime, Utc};
use serde::Serialize;

use crate::broker::management::encode_segment;
use crate::live::BrokerLoad;
use crate::state::AppState;
use crate::web::error::ApiError;
use crate::web::error_page::PageError;
use crate::web::format;
use crate::web::freshness::{Freshness, REFRESH_SECS};
use crate::web::htmx::html;
use crate::web::htmx::is_htmx;
use crate::web::identity::Me;
use crate::web::lookup::broker_live;

pub fn router() -> Router<AppState> {
    Router::new().route("/brokers/{broker}", get(page)).route("/api/v1/brokers/{broker}", get(json))
}

/// The broker's load as JSON, with the age of each number in seconds.
#[derive(Serialize, utoipa::ToSchema)]
pub(crate) struct BrokerLoadJson {
    broker: String,
    depth_age_secs: Option<f64>,
    rates_age_secs: Option<f64>,
    metadata_age_secs: Option<f64>,
    /// Another replica polls the broker (its id): the load is that replica's, not known here,
    /// and left out.
    polled_by: Option<String>,
    #[serde(flatten)]
    load: Option<BrokerLoad>,
}

fn age_secs(t: Option<DateTime<Utc>>, now: DateTime<Utc>) -> Option<f64> {
    t.map(|t| (now - t).num_milliseconds() as f64 / 1000.0)
}

async fn json(State(state): State<AppState>, Path(broker): Path<String>) -> Result<Json<BrokerLoadJson>, ApiError> {
    let live = broker_live(&state, &broker)?;
    let now = Utc::now();
    let polled_by = live.status.polled_by.clone();
    let load = Some(live.load).filter(|_| polled_by.is_none());
    let sampled = |at: fn(&BrokerLoad) -> Option<DateTime<Utc>>| age_secs(load.as_ref().and_then(at), now);
    Ok(Json(BrokerLoadJson {
        broker: live.name,
        depth_age_secs: sampled(|l| l.depth_sampled_at),
        rates_age_secs: sampled(|l| l.rates_sampled_at),
        metadata_age_secs: sampled(|l| l.metadata_sampled_at),
        polled_by,
        load,
    }))
}

struct SourceRow {
    metric: &'static str,
    source: String,
    reason: String,
    age: String,
}

/// One management URL on the broker page.
struct ManagementRow {
    url: String,
    /// answering, failing (its last request failed), standby (asked before, or never).
    state: &'static str,
    last_answer: String,
    last_failure: Option<String>,
}

struct CallRow {
    at: String,
    source: &'static str,
    endpoint: String,
    duration: String,
    bytes: String,
    status: String,
    error: Option<String>,
}

#[derive(Template)]
#[template(path = "broker_load.html")]
struct LoadFragment {
    /// The base path, before every URL (`AppState::base_path`).
    base: std::sync::Arc<str>,
    freshness: Freshness,
    href: String,
    /// Another replica polls the broker: the rest is that replica's, not shown here.
    polled_by: Option<String>,
    management: Vec<ManagementRow>,
    prometheus_url: String,
    prometheus_state: &'static str,
    prometheus_reason: String,
    prometheus_next_check: Option<String>,
    sources: Vec<SourceRow>,
    interval: String,
    base_interval: String,
    stretched: Option<String>,
    last_plan: String,
    last_plan_sources: Vec<(&'static str, &'static str)>,
    listing_role: &'static str,
    stats_interval: String,
    stats_reason: String,
    listing_reasons: Vec<(String, u64)>,
    rates_slower_than_wanted: bool,
    budget: String,
    clients_interval: String,
    clients_reason: String,
    clients_age: String,
    clients_href: String,
    estimated_load: String,
    backing_off: Option<String>,
    calls: Vec<CallRow>,
    totals: Vec<(String, String, String, String, String)>,
}

#[derive(Template)]
#[template(path = "broker.html")]
struct BrokerPage {
    name: String,
    fragment: String,
    me: Me,
    /// The broker's advisor page (`advisor.rs`).
    advisor_href: String,
}

async fn page(
    State(state): State<AppState>,
    Path(broker): Path<String>,
    me: Me,
    headers: HeaderMap,
) -> Result<Response, PageError> {
    let live = broker_live(&state, &broker)?;
    let now = Utc::now();
    let l = &live.load;
    let p = &l.prometheus;
    let fragment = LoadFragment {
        base: state.base_path.clone(),
        freshness: Freshness::polled(&[&live], REFRESH_SECS),
        href: format!("/brokers/{}", encode_segment(&live.name)),
        polled_by: live.status.polled_by.clone(),
        management: live
            .status
            .management
            .urls
            .iter()
            .map(|u| ManagementRow {
                url: u.url.clone(),
                state: if live.status.management.answering.as_deref() == Some(u.url.as_str()) {
                    "answering"
                } else if u.last_failure_at.is_some() && u.last_failure_at >= u.last_answer_at {
                    "failing"
                } else {
                    "standby"
                },
                last_answer: format::ago(u.last_answer_at, now),
                last_failure: u.last_error.as_ref().map(|e| format!("{}: {e}", format::ago(u.last_failure_at, now))),
            })
            .collect(),
        prometheus_url: p.url.clone().unwrap_or_else(|| "off".into()),
        prometheus_state: match p.available {
            Some(true) => "in use",
            Some(false) => "not used",
            None if p.url.is_none() => "off",
            None => "not tried yet",
        },
        prometheus_reason: p.reason.clone(),
        prometheus_next_check: p.next_check_at.map(|t| format::time(Some(t))),
        sources: l
            .sources
            .iter()
            .map(|s| SourceRow {
                metric: s.metric,
                source: s.source.clone(),
                reason: s.reason.clone(),
                age: format::ago(s.sampled_at, now),
            })
            .collect(),
        interval: format::duration(l.interval_secs),
        base_interval: format::duration(l.base_interval_secs),
        stretched: l.stretched.clone(),
        // Before the first poll nothing is decided yet: say so rather than "every 0s: .".
        last_plan: if l.last_plan.is_empty() { "none yet".to_string() } else { l.last_plan.clone() },
        last_plan_sources: l.last_plan_sources.clone(),
        listing_role: l.listing_role,
        stats_interval: if l.stats_interval_secs > 0.0 {
            format::duration(l.stats_interval_secs)
        } else {
            "(not decided yet)".to_string()
        },
        stats_reason: if l.stats_reason.is_empty() {
            "decided at the first poll".to_string()
        } else {
            l.stats_reason.clone()
        },
        listing_reasons: l.listing_reasons.iter().map(|(k, v)| (k.clone(), *v)).collect(),
        rates_slower_than_wanted: l.rates_slower_than_wanted,
        budget: format!("{:.1}%", l.budget * 100.0),
        clients_interval: if l.clients_interval_secs > 0.0 {
            format::duration(l.clients_interval_secs)
        } else {
            "(not decided yet)".to_string()
        },
        clients_reason: if l.clients_reason.is_empty() {
            "decided at the first poll".into()
        } else {
            l.clients_reason.clone()
        },
        clients_age: format::ago(l.clients_sampled_at, now),
        clients_href: format!("/brokers/{}/clients", encode_segment(&live.name)),
        estimated_load: l.estimated_load.map_or(format::UNKNOWN.to_string(), |v| format!("{:.2}%", v * 100.0)),
        backing_off: l.backing_off.clone(),
        calls: l
            .calls
            .iter()
            .map(|c| CallRow {
                at: format::ago(Some(c.at), now),
                source: c.source,
                endpoint: c.endpoint.clone(),
                duration: format!("{:.1} ms", c.duration_ms),
                bytes: format::count(Some(c.bytes)),
                status: c.status.map_or("no answer".to_string(), |s| s.to_string()),
                error: c.error.clone(),
            })
            .collect(),
        totals: l
            .totals
            .iter()
            .map(|(k, t)| {
                let mean = if t.calls > 0 { t.seconds * 1000.0 / t.calls as f64 } else { 0.0 };
                (
                    k.clone(),
                    format::count(Some(t.calls)),
                    format::count(Some(t.errors)),
                    format!("{mean:.1} ms"),
                    format::count(Some(t.bytes)),
                )
            })
            .collect(),
    }
    .render()?;
    if is_htmx(&headers) {
        return Ok(html(fragment));
    }
    let advisor_href = super::advisor::advisor_href(&live.name);
    Ok(html(BrokerPage { name: live.name, fragment, me, advisor_href }.render()?))
}
