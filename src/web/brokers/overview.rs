//! The overview (`/`): each broker's status, totals and rates, the alerts firing, the
//! dead-letter queues and each cluster's nodes, with the brokers' charts.

use askama::Template;
use axum::extract::{Query, State};
use axum::http::HeaderMap;
use axum::response::Response;
use chrono::Utc;

use super::chart_window::ChartWindow;
use super::nodes::{self, NodesSummary};
use super::queue_row::{queue_row, QueueRow};
use crate::broker::management::encode_segment;
use crate::live::BrokerLive;
use crate::metrics::QueueView;
use crate::state::AppState;
use crate::web::error_page::PageError;
use crate::web::firing::{alert_rows, AlertRow};
use crate::web::format;
use crate::web::freshness::{Freshness, REFRESH_SECS};
use crate::web::htmx::{html, is_htmx};
use crate::web::identity::Me;
use crate::web::query::RangeQuery;
// The templates' own filters (`|ident`).
use crate::web::format::filters;

struct BrokerRow {
    name: String,
    /// What the counts and rates cover: the watched vhosts, never the broker beyond them.
    scope: String,
    status: &'static str,
    status_class: &'static str,
    error: Option<String>,
    last_poll: String,
    stale_since: Option<String>,
    version: String,
    queues: String,
    ready: String,
    unacked: String,
    consumers: String,
    rates_unavailable: bool,
    publish_rate: String,
    confirm_rate: String,
    ack_rate: String,
    deliver_rate: String,
    redeliver_rate: String,
    unroutable_rate: String,
    poll_ms: String,
}

fn broker_row(b: &BrokerLive) -> BrokerRow {
    let now = Utc::now();
    let s = &b.status;
    let (status, status_class) = match s.up {
        None => ("waiting for first poll", "pending"),
        Some(true) => ("up", "up"),
        Some(false) => ("down", "down"),
    };
    BrokerRow {
        name: b.name.clone(),
        scope: match b.vhosts.len() {
            0 => String::new(),
            1 => format!("counts and rates of the watched vhost {}", b.vhosts[0].name),
            n => format!("counts and rates of the {n} watched vhosts"),
        },
        status,
        status_class,
        error: s.error.clone(),
        last_poll: format::ago(s.last_attempt, now),
        // The error is in its own line above: a broker that went down says only since when.
        stale_since: match s.restored_from.is_some() || s.polled_by.is_some() {
            true => format::stale_note(b),
            false => b.stale_since().map(|t| format!("stale since {}", format::time(Some(t)))),
        },
        version: s.rabbitmq_version.clone().unwrap_or_else(|| format::UNKNOWN.to_string()),
        queues: format::count((s.last_success.is_some() || s.restored_from.is_some()).then_some(b.totals.queues)),
        ready: format::count(b.totals.ready),
        unacked: format::count(b.totals.unacked),
        consumers: format::count(b.totals.consumers),
        rates_unavailable: s.stats_enabled == Some(false),
        publish_rate: format::rate(b.rates.publish_rate),
        confirm_rate: format::rate(b.rates.confirm_rate),
        ack_rate: format::rate(b.rates.ack_rate),
        deliver_rate: format::rate(b.rates.deliver_rate),
        redeliver_rate: format::rate(b.rates.redeliver_rate),
        unroutable_rate: format::rate(b.rates.unroutable_rate),
        poll_ms: s.last_poll_ms.map(|ms| format!("{ms} ms")).unwrap_or_else(|| format::UNKNOWN.to_string()),
    }
}

#[derive(Template)]
#[template(path = "overview_brokers.html")]
struct OverviewBrokers {
    /// The base path, before every URL (`AppState::base_path`).
    base: std::sync::Arc<str>,
    freshness: Freshness,
    alerts: Vec<AlertRow>,
    brokers: Vec<BrokerRow>,
    dlqs: Vec<QueueRow>,
    dlq_sources: Vec<String>,
    nodes: Vec<NodesSummary>,
}

#[derive(Template)]
#[template(path = "overview.html")]
struct OverviewPage {
    me: Me,
    fragment: String,
    brokers: Vec<String>,
    /// The broker charts' window (none without brokers).
    window: Option<ChartWindow>,
}

pub(super) async fn overview(
    State(state): State<AppState>,
    me: Me,
    headers: HeaderMap,
    Query(range): Query<RangeQuery>,
) -> Result<Response, PageError> {
    let live = state.live.snapshot();
    let mut dlqs: Vec<&QueueView> =
        live.iter().flat_map(|b| b.queues.iter()).filter(|q| q.dead_letters.is_dlq).collect();
    dlqs.sort_by(|a, b| b.total.cmp(&a.total).then_with(|| a.name.cmp(&b.name)));
    let fragment = OverviewBrokers {
        base: state.base_path.clone(),
        freshness: Freshness::polled(&live.iter().collect::<Vec<_>>(), REFRESH_SECS),
        alerts: alert_rows(&state, None).await?,
        brokers: live.iter().map(broker_row).collect(),
        nodes: live.iter().map(nodes::summary).collect(),
        dlq_sources: dlqs.iter().map(|q| q.dead_letters.dead_letter_sources.join(", ")).collect(),
        dlqs: dlqs.into_iter().map(|q| queue_row(q, Default::default())).collect(),
    }
    .render()?;
    if is_htmx(&headers) {
        return Ok(html(fragment));
    }
    let window = match live.first() {
        Some(b) => Some(ChartWindow::new(&state, &b.name, &range, "/", Vec::new(), String::new())?),
        None => None,
    };
    let page = OverviewPage { me, fragment, brokers: live.iter().map(|b| encode_segment(&b.name)).collect(), window };
    Ok(html(page.render()?))
}
