//! A queue's page (`/queues/{broker}/{vhost}/{queue}`): its live numbers, alerts and consumers
//! (the fragment), its charts, arguments and policies, its health, its dead-letter routing and
//! what routes into it.

use askama::Template;
use axum::extract::{Path, Query, RawQuery, State};
use axum::http::HeaderMap;
use axum::response::Response;

use super::chart_window::ChartWindow;
use super::clients::ConsumersSection;
use super::history::load_queue_history;
use super::queue_row::{browsable, queue_row, QueueRow};
use super::topology::{self, RoutingView};
use crate::broker::management::encode_segment;
use crate::broker::topology::QueueRole;
use crate::metrics::{InflowSource, QueueView};
use crate::state::AppState;
use crate::web::error::WebError;
use crate::web::error_page::PageError;
use crate::web::firing::{alert_rows, AlertRow};
use crate::web::format;
use crate::web::freshness::{Freshness, REFRESH_SECS};
use crate::web::htmx::{html, is_htmx};
use crate::web::identity::Me;
use crate::web::links::queue_href;
use crate::web::lookup::{broker_live, find_queue};
use crate::web::query::RangeQuery;
// The templates' own filters (`|ident`).
use crate::web::format::filters;

#[derive(Template)]
#[template(path = "queue_stats.html")]
struct QueueStats {
    /// The base path, before every URL (`AppState::base_path`).
    base: std::sync::Arc<str>,
    freshness: Freshness,
    alerts: Vec<AlertRow>,
    self_href: String,
    row: QueueRow,
    stale: Option<String>,
    rates_unavailable: bool,
    /// Who consumes, and who holds the unacked messages (`clients`).
    consumers: ConsumersSection,
}

#[derive(Template)]
#[template(path = "queue.html")]
struct QueuePage {
    me: Me,
    fragment: String,
    row: QueueRow,
    history_src: String,
    window: ChartWindow,
    arguments: Vec<(String, String)>,
    policy: String,
    effective_policy: Vec<(String, String)>,
    durable: String,
    health: Vec<(&'static str, String)>,
    dead_letter: DeadLetterView,
    dlq_href: String,
    routing: RoutingView,
    /// The advisor's findings for this queue (`advisor::queue_section`).
    advice: String,
    /// The minimum set of numbers (`numbers`), as rows.
    numbers: Vec<NumberRow>,
    /// The steady-state test's verdict, in words.
    steady: String,
}

/// One of the minimum set of numbers as the page shows it.
struct NumberRow {
    name: &'static str,
    value: String,
    derived: String,
    /// `known`, `unreliable` or `unknown`: the row's class.
    standing: &'static str,
    reason: String,
}

fn number_rows(n: &crate::numbers::QueueNumbers) -> Vec<NumberRow> {
    use crate::numbers::{Number, Standing};
    let row = |name, number: &Number, show: &dyn Fn(f64) -> String| NumberRow {
        name,
        value: number.value.map(show).unwrap_or_else(|| format::UNKNOWN.to_string()),
        derived: number.derived.clone(),
        standing: match number.standing {
            Standing::Known => "known",
            Standing::Unreliable => "unreliable",
            Standing::Unknown => "unknown",
        },
        reason: number.reason.clone().unwrap_or_default(),
    };
    let secs = |v: f64| if v < 10.0 { format!("{v:.2} s") } else { format::duration(v) };
    vec![
        row("Wait from publish to start of processing", &n.wait_secs, &secs),
        row("Processing time (delivery to ack)", &n.processing_secs, &secs),
        row("Retry share", &n.retry_share, &|v| format!("{:.1}%", v * 100.0)),
        row("Oldest message age", &n.oldest_age_secs, &format::duration),
        row("Dead letters", &n.dead_letters, &|v| format!("{v:.0}")),
    ]
}

struct QueueLink {
    name: String,
    href: String,
}

struct DeadLetterView {
    /// `None`: no dead-letter exchange.
    target: Option<(String, String, &'static str)>,
    target_queues: Vec<QueueLink>,
    routing_known: bool,
    is_dlq: bool,
    browsable: bool,
    sources: Vec<QueueLink>,
    /// The queues the messages last read came from, with counts, and when they were read.
    observed: Vec<(QueueLink, usize)>,
    /// Dead letters of this queue in warren's custody, beside what the broker holds.
    custody_held: Option<u64>,
    observed_at: String,
    /// `work`, `wait`, `dlq` or `unknown`, and why.
    role: &'static str,
    role_reason: String,
}

fn role_label(role: QueueRole) -> &'static str {
    match role {
        QueueRole::Work => "work queue",
        QueueRole::Wait => "wait (retry) queue",
        QueueRole::Dlq => "dead-letter queue",
        QueueRole::Error => "error (parking) queue",
        QueueRole::Unknown => "unknown",
    }
}

fn dead_letter_view(q: &QueueView) -> DeadLetterView {
    let link = |name: &String| QueueLink { name: name.clone(), href: queue_href(&q.broker, &q.vhost, name) };
    let d = &q.dead_letters;
    DeadLetterView {
        target: d.dead_letter_target.as_ref().map(|t| {
            let exchange = if t.exchange.is_empty() { "(default exchange)".to_string() } else { t.exchange.clone() };
            let key = t.routing_key.clone().unwrap_or_else(|| "(the message's own routing key)".to_string());
            (exchange, key, t.configured_by)
        }),
        target_queues: d
            .dead_letter_target
            .as_ref()
            .and_then(|t| t.queues.as_ref())
            .map(|qs| qs.iter().map(link).collect())
            .unwrap_or_default(),
        routing_known: d.dead_letter_target.as_ref().is_some_and(|t| t.queues.is_some()),
        is_dlq: d.is_dlq,
        browsable: browsable(q),
        sources: d.dead_letter_sources.iter().map(link).collect(),
        observed: d.observed_sources.iter().map(|(name, n)| (link(name), *n)).collect(),
        custody_held: q.custody_held,
        observed_at: d.observed_at.clone().unwrap_or_default(),
        role: role_label(d.role),
        role_reason: d.role_reason.to_string(),
    }
}

fn health(q: &QueueView) -> Vec<(&'static str, String)> {
    let rate = |r: Option<f64>| format::rate(r);
    vec![
        ("Backlog growth (change of depth)", rate(q.backlog_growth_rate)),
        (
            "Inflow",
            match q.inflow_source {
                InflowSource::PublishCounter => format!("{} (publish counter)", rate(q.inflow_rate)),
                InflowSource::DerivedLowerBound => {
                    format!(
                        "at least {} (dead letters are not counted as published: {})",
                        rate(q.inflow_rate),
                        q.inflow_source.as_str()
                    )
                }
                InflowSource::Unknown => format::UNKNOWN.to_string(),
            },
        ),
        (
            "Time to drain",
            match (q.time_to_drain_secs, q.backlog_growth_rate) {
                (Some(secs), _) => format::duration(secs),
                (None, Some(_)) => "not draining".to_string(),
                (None, None) => format::UNKNOWN.to_string(),
            },
        ),
        (
            "Redelivery share",
            match (q.redelivery_share, q.own_reads) {
                (Some(s), false) => format!("{:.1}%", s * 100.0),
                (Some(s), true) => format!("{:.1}% (with warren's own reads)", s * 100.0),
                (None, _) => format::UNKNOWN.to_string(),
            },
        ),
        (
            "Redelivery loop",
            match (q.redelivery_loop_secs, crate::metrics::looping(q)) {
                (Some(secs), _) => format!(
                    "for {}: {} deliveries come back, none acked (poison messages at the head)",
                    format::duration(secs),
                    format::rate(q.redeliver_rate)
                ),
                (None, Some(true)) => "deliveries come back with none acked (not long enough to call it a loop)".into(),
                (None, Some(false)) => "no".to_string(),
                (None, None) if q.own_reads => "unknown: warren's own reads are in the rates".to_string(),
                (None, None) => format::UNKNOWN.to_string(),
            },
        ),
        (
            "Consumers",
            if q.no_consumers { "none while messages are ready".to_string() } else { format::count(q.consumers) },
        ),
        (
            "Unacked held without acks",
            match (q.hung_consumer_secs, q.holding_secs) {
                (Some(secs), _) => format!("{} (hung: messages wait, or held past the limit)", format::duration(secs)),
                (None, Some(secs)) => {
                    format!(
                        "{} with none ready (holding, as with scheduled messages; not hung)",
                        format::duration(secs)
                    )
                }
                (None, None) => "no".to_string(),
            },
        ),
    ]
}

fn pairs(map: &serde_json::Map<String, serde_json::Value>) -> Vec<(String, String)> {
    map.iter().map(|(k, v)| (k.clone(), v.to_string())).collect()
}

pub(super) async fn queue(
    State(state): State<AppState>,
    me: Me,
    headers: HeaderMap,
    Path((broker, vhost, name)): Path<(String, String, String)>,
    Query(range): Query<RangeQuery>,
    RawQuery(raw_query): RawQuery,
) -> Result<Response, PageError> {
    let view = find_queue(&state, &broker, &vhost, &name).await?;
    let live = broker_live(&state, &broker)?;
    let advice = super::advisor::queue_section(&state, &live, &me, &vhost, &name).await?;
    let href = queue_href(&broker, &vhost, &name);
    let stats = QueueStats {
        base: state.base_path.clone(),
        freshness: Freshness::polled(&[&live], REFRESH_SECS),
        alerts: alert_rows(&state, Some(&crate::alerts::AlertKey::of(&view))).await?,
        self_href: match &raw_query {
            Some(q) => format!("{href}?{q}"),
            None => href.clone(),
        },
        row: queue_row(&view, Default::default()),
        stale: format::stale_note(&live),
        rates_unavailable: live.status.stats_enabled == Some(false),
        consumers: ConsumersSection::of(&live, &view),
    };
    let fragment = stats.render()?;
    if is_htmx(&headers) {
        return Ok(html(fragment));
    }
    // The chart data comes from the API; the page validates the range now so a bad one is a
    // clear error rather than an empty chart.
    let history = load_queue_history(&state, &broker, &vhost, &name, &range).await;
    let points = history.as_ref().map(|h| h.points.len()).unwrap_or(0);
    if let Err(WebError::BadRequest(message)) = history {
        return Err(WebError::BadRequest(message).into());
    }
    // The window itself, also when the queue has no history yet (the charts then say so).
    let window = ChartWindow::new(&state, &broker, &range, &href, Vec::new(), format!("{points} points; "))?;
    let api = format!("/api/v1{href}/history");
    let history_src = match &raw_query {
        Some(q) if range.from.is_some() || range.range.is_some() => format!("{api}?{q}"),
        _ => format!("{api}?range=1h"),
    };
    let numbers = super::history::load_queue_numbers(&state, &live, &view).await?;
    let page = QueuePage {
        me,
        fragment,
        history_src,
        window,
        arguments: pairs(&view.arguments),
        policy: view.policy.clone().unwrap_or_else(|| "none".to_string()),
        effective_policy: pairs(&view.effective_policy),
        durable: match view.durable {
            Some(true) => "yes".to_string(),
            Some(false) => "no".to_string(),
            None => format::UNKNOWN.to_string(),
        },
        row: queue_row(&view, Default::default()),
        health: health(&view),
        dead_letter: dead_letter_view(&view),
        routing: topology::routing_view(&live, &view),
        advice,
        numbers: number_rows(&numbers),
        steady: match &numbers.steady_state.unsteady {
            None => format!(
                "Steady state over the last {} s ({} samples): depth and rates within 20 % of their means.",
                numbers.steady_state.window_secs, numbers.steady_state.samples
            ),
            Some(why) => format!("Not in steady state: {why}. The numbers below are labelled unreliable."),
        },
        dlq_href: format!("/dlq/{}/{}/{}", encode_segment(&broker), encode_segment(&vhost), encode_segment(&name)),
    };
    Ok(html(page.render()?))
}
