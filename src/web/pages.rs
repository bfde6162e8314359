//! HTML pages. Each page embeds its live fragment; htmx asks for the fragment alone (same URL,
//! `HX-Request` header) every few seconds, so the numbers move without reloads, and the page
//! still works without JavaScript.

use askama::Template;
use axum::extract::{Path, Query, RawQuery, State};
use axum::http::HeaderMap;
use axum::response::Response;
use axum::routing::get;
use axum::Router;
use chrono::{DateTime, Utc};

use super::api::{find_queue, load_queue_history};
use super::format;
use super::freshness::{Freshness, REFRESH_SECS};
use super::query::{form_pairs, Listing, QueueQuery, RangeQuery, RANGES};
use super::{html, is_htmx, PageError};
use crate::broker::management::encode_segment;
use crate::broker::topology::QueueRole;
use crate::history;
use crate::live::BrokerLive;
use crate::metrics::{InflowSource, QueueView};
use crate::state::AppState;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/", get(overview))
        .route("/queues", get(queues))
        .route("/queues/{broker}/{vhost}/{queue}", get(queue))
        .route("/compare", get(compare))
}

/// Where a queue's page is.
pub fn queue_href(broker: &str, vhost: &str, name: &str) -> String {
    format!("/queues/{}/{}/{}", encode_segment(broker), encode_segment(vhost), encode_segment(name))
}

#[derive(Template)]
#[template(path = "error.html")]
pub struct ErrorPage {
    pub me: super::Me,
    pub status: u16,
    pub message: String,
}

// ----- Overview -----

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
        stale_since: match s.restored_from {
            Some(_) => format::stale_note(b),
            None => b.stale_since().map(|t| format!("stale since {}", format::time(Some(t)))),
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
    alerts: Vec<super::alert_pages::AlertRow>,
    brokers: Vec<BrokerRow>,
    dlqs: Vec<QueueRow>,
    dlq_sources: Vec<String>,
    nodes: Vec<super::nodes::NodesSummary>,
}

#[derive(Template)]
#[template(path = "overview.html")]
struct OverviewPage {
    me: super::Me,
    fragment: String,
    brokers: Vec<String>,
    /// The broker charts' window (none without brokers).
    window: Option<ChartWindow>,
}

async fn overview(
    State(state): State<AppState>,
    me: super::Me,
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
        alerts: super::alert_pages::alert_rows(&state, None).await?,
        brokers: live.iter().map(broker_row).collect(),
        nodes: live.iter().map(super::nodes::summary).collect(),
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

// ----- Queue list -----

struct QueueRow {
    href: String,
    /// The dead-letter browser, for DLQs.
    dlq_href: Option<String>,
    vhost_href: String,
    broker: String,
    vhost: String,
    name: String,
    kind: String,
    deleted: bool,
    ready: String,
    unacked: String,
    total: String,
    consumers: String,
    publish_rate: String,
    deliver_rate: String,
    ack_rate: String,
    redeliver_rate: String,
    age: String,
    age_source: &'static str,
    age_title: &'static str,
    /// Backlog trend: growing at a rate, or the time to drain.
    trend: String,
    trend_class: &'static str,
    sparkline: format::Sparkline,
    /// Badges: (css class, text, explanation).
    signals: Vec<(&'static str, String, &'static str)>,
}

fn signals(q: &QueueView) -> Vec<(&'static str, String, &'static str)> {
    let mut out = Vec::new();
    if q.dead_letters.role == QueueRole::Error {
        out.push((
            "info",
            "error queue".to_string(),
            "an application's error (parking) queue, known from its messages",
        ));
    } else if q.dead_letters.is_dlq {
        out.push(("info", "DLQ".to_string(), "dead-letter queue: other queues' dead letters end in it"));
    }
    if q.dead_letters.role == QueueRole::Wait {
        out.push(("info", "wait".to_string(), "wait (retry) queue: its messages dead-letter back into a work queue"));
    }
    // A DLQ has no reader by design; dead letters arriving are what is worth a look.
    if matches!(q.dead_letters.role, QueueRole::Dlq | QueueRole::Error) && q.inflow_rate.is_some_and(|r| r > 0.0) {
        out.push((
            "warn",
            format!("dead letters arriving {}", format::rate(q.inflow_rate)),
            "messages are dead-lettered into this queue now (a lower bound when derived from depth and acks)",
        ));
    }
    if q.no_consumers {
        out.push(("warn", "no consumers".to_string(), "ready messages and no consumer: nothing will drain this queue"));
    }
    if let Some(secs) = q.holding_secs {
        out.push((
            "info",
            format!("holding {}", format::duration(secs)),
            "unacked messages held with no ack while none are ready: a consumer holding scheduled (ETA, delayed) \
             messages does this by design; flagged hung past the broker's scheduled_hold_limit_secs",
        ));
    }
    if let Some(secs) = q.hung_consumer_secs {
        out.push((
            "bad",
            format!("hung consumer {}", format::duration(secs)),
            "unacked messages held with no ack for several polls",
        ));
    }
    if let Some(secs) = q.redelivery_loop_secs {
        out.push((
            "bad",
            format!("redelivery loop {}", format::duration(secs)),
            "consumers take deliveries and hand them back (nack or reject with requeue) with nothing acked: the \
             messages at the head fail every time and the rest wait behind them",
        ));
    }
    if q.own_reads {
        out.push((
            "info",
            "read by warren".to_string(),
            "warren read this queue within the rate window (a snapshot or a move): the broker counts those reads as \
             deliveries and redeliveries, so the rates include them",
        ));
    }
    out
}

/// The dead-letter browser is offered for DLQs and error queues, for queues whose role is
/// unknown (no consumers, no dead-letter routing): reading their messages is the only way to
/// tell an application's error queue (issue 17, must-have 3), and for a queue in a loop.
fn browsable(q: &QueueView) -> bool {
    // A queue in a redelivery loop too: the messages at its head are the ones going round, and
    // a snapshot shows which (issue 31, must-have 1).
    q.dead_letters.is_dlq || q.dead_letters.role == QueueRole::Unknown || q.redelivery_loop_secs.is_some()
}

fn queue_row(q: &QueueView, sparkline: format::Sparkline) -> QueueRow {
    QueueRow {
        href: queue_href(&q.broker, &q.vhost, &q.name),
        dlq_href: browsable(q).then(|| {
            format!("/dlq/{}/{}/{}", encode_segment(&q.broker), encode_segment(&q.vhost), encode_segment(&q.name))
        }),
        vhost_href: format!("/queues?broker={}&vhost={}", encode_segment(&q.broker), encode_segment(&q.vhost)),
        broker: q.broker.to_string(),
        vhost: q.vhost.to_string(),
        name: q.name.to_string(),
        kind: q.kind.to_string(),
        deleted: q.deleted,
        ready: format::count(q.ready),
        unacked: format::count(q.unacked),
        total: format::count(q.total),
        consumers: format::count(q.consumers),
        // A queue that dead-letter routing feeds shows its derived inflow: the broker counts no
        // publish for a dead letter, and its publish rate is a bare 0 while it fills.
        publish_rate: match q.inflow_source {
            InflowSource::PublishCounter => format::rate(q.publish_rate),
            // A lower bound of 0 says only that none were seen arriving (issue 34, case 6).
            InflowSource::DerivedLowerBound if q.inflow_rate == Some(0.0) => "none seen".to_string(),
            InflowSource::DerivedLowerBound => format!("≥ {}", format::rate(q.inflow_rate)),
            InflowSource::Unknown => format::UNKNOWN.to_string(),
        },
        deliver_rate: format::rate(q.deliver_rate),
        ack_rate: format::rate(q.ack_rate),
        redeliver_rate: format::rate(q.redeliver_rate),
        age: format::age(q),
        age_source: q.oldest_age_source.as_str(),
        age_title: format::age_title(q),
        trend: match (q.time_to_drain_secs, q.backlog_growth_rate) {
            (Some(0.0), _) => "empty".to_string(),
            (Some(secs), _) => format!("drains in {}", format::duration(secs)),
            (None, Some(g)) if g > 0.0 => format!("+{}", format::rate(Some(g))),
            (None, Some(_)) => "steady".to_string(),
            (None, None) => format::UNKNOWN.to_string(),
        },
        trend_class: match (q.time_to_drain_secs, q.backlog_growth_rate) {
            (None, Some(g)) if g > 0.0 => "growing",
            _ => "",
        },
        sparkline,
        signals: signals(q),
    }
}

struct SortLink {
    label: &'static str,
    href: String,
    marker: &'static str,
    numeric: bool,
    /// Hidden on narrow screens (`COLUMNS`).
    wide_only: bool,
}

#[derive(Template)]
#[template(path = "queues_table.html")]
struct QueuesTable {
    /// The base path, before every URL (`AppState::base_path`).
    base: std::sync::Arc<str>,
    freshness: Freshness,
    self_href: String,
    columns: Vec<SortLink>,
    rows: Vec<QueueRow>,
    total: usize,
    first: usize,
    last: usize,
    prev_href: Option<String>,
    next_href: Option<String>,
    stale: Vec<String>,
    rates_unavailable: Vec<String>,
}

#[derive(Template)]
#[template(path = "queues.html")]
struct QueuesPage {
    me: super::Me,
    fragment: String,
    brokers: Vec<String>,
    broker: String,
    vhost: String,
    name: String,
    dlq_only: bool,
}

/// Rebuilds a query string from the listing with some parameters changed.
fn listing_href(l: &Listing, sort: &str, descending: bool, page: usize) -> String {
    let mut parts = Vec::new();
    for (key, value) in [("broker", &l.broker), ("vhost", &l.vhost), ("name", &l.name)] {
        if let Some(v) = value {
            parts.push(format!("{key}={}", encode_segment(v)));
        }
    }
    if l.dlq_only {
        parts.push("dlq=true".to_string());
    }
    parts.push(format!("sort={sort}"));
    parts.push(format!("order={}", if descending { "desc" } else { "asc" }));
    if page > 1 {
        parts.push(format!("page={page}"));
    }
    if l.per_page != super::query::DEFAULT_PER_PAGE {
        parts.push(format!("per_page={}", l.per_page));
    }
    format!("/queues?{}", parts.join("&"))
}

/// (label, sort key, numeric, shown on a phone): a phone gets the columns that say whether a
/// queue is in trouble (its name, its backlog, its oldest message; a queue without consumers
/// says so next to its name); the rest would make the list scroll sideways.
const COLUMNS: &[(&str, &str, bool, bool)] = &[
    ("Queue", "name", false, true),
    ("Vhost", "vhost", false, false),
    ("Broker", "broker", false, false),
    ("Type", "type", false, false),
    ("Ready", "ready", true, true),
    ("Unacked", "unacked", true, true),
    ("Total", "total", true, false),
    ("Consumers", "consumers", true, false),
    ("Publish", "publish_rate", true, false),
    ("Deliver", "deliver_rate", true, false),
    ("Ack", "ack_rate", true, false),
    ("Redeliver", "redeliver_rate", true, false),
    ("Oldest", "oldest_age", true, true),
];

async fn queues(
    State(state): State<AppState>,
    me: super::Me,
    headers: HeaderMap,
    Query(query): Query<QueueQuery>,
) -> Result<Response, PageError> {
    let listing = query.validate()?;
    let live = state.live.snapshot();
    let (items, total) = listing.apply(&live);

    // Depth sparklines over the last hour, one database read for the whole page.
    let now = Utc::now().timestamp();
    let id_list: Vec<i64> = items.iter().filter_map(|q| q.id).collect();
    let series = history::depth_sparklines(&state.db, &id_list, now - 3600, now, 60).await?;
    let rows = items
        .iter()
        .map(|q| {
            let line = q.id.and_then(|id| series.get(&id)).map(|s| format::sparkline(s, 60)).unwrap_or_default();
            queue_row(q, line)
        })
        .collect();

    let columns = COLUMNS
        .iter()
        .map(|&(label, key, numeric, on_phone)| {
            let active = listing.sort == key;
            // Clicking the active column flips it; a new column starts in its natural order.
            let descending = if active { !listing.descending } else { numeric };
            SortLink {
                label,
                href: listing_href(&listing, key, descending, 1),
                marker: if !active {
                    ""
                } else if listing.descending {
                    " ▼"
                } else {
                    " ▲"
                },
                numeric,
                wide_only: !on_phone,
            }
        })
        .collect();
    let first = ((listing.page - 1) * listing.per_page + 1).min(total);
    let last = (listing.page * listing.per_page).min(total);
    // The numbers shown come from the brokers the listing covers.
    let shown: Vec<&BrokerLive> =
        live.iter().filter(|b| listing.broker.as_ref().is_none_or(|name| *name == b.name)).collect();
    let table = QueuesTable {
        base: state.base_path.clone(),
        freshness: Freshness::polled(&shown, REFRESH_SECS),
        self_href: listing_href(&listing, listing.sort, listing.descending, listing.page),
        columns,
        rows,
        total,
        first,
        last,
        prev_href: (listing.page > 1)
            .then(|| listing_href(&listing, listing.sort, listing.descending, listing.page - 1)),
        next_href: (last < total).then(|| listing_href(&listing, listing.sort, listing.descending, listing.page + 1)),
        rates_unavailable: live
            .iter()
            .filter(|b| b.status.stats_enabled == Some(false))
            .map(|b| b.name.clone())
            .collect(),
        stale: live.iter().filter_map(|b| format::stale_note(b).map(|note| format!("{}: {note}", b.name))).collect(),
    };
    let fragment = table.render()?;
    if is_htmx(&headers) {
        return Ok(html(fragment));
    }
    let page = QueuesPage {
        me,
        fragment,
        brokers: live.iter().map(|b| b.name.clone()).collect(),
        broker: listing.broker.clone().unwrap_or_default(),
        vhost: listing.vhost.clone().unwrap_or_default(),
        name: listing.name.clone().unwrap_or_default(),
        dlq_only: listing.dlq_only,
    };
    Ok(html(page.render()?))
}

// ----- Queue detail -----

#[derive(Template)]
#[template(path = "queue_stats.html")]
struct QueueStats {
    /// The base path, before every URL (`AppState::base_path`).
    base: std::sync::Arc<str>,
    freshness: Freshness,
    alerts: Vec<super::alert_pages::AlertRow>,
    self_href: String,
    row: QueueRow,
    stale: Option<String>,
    rates_unavailable: bool,
    /// Who consumes, and who holds the unacked messages (`clients`).
    consumers: super::clients::ConsumersSection,
}

pub(super) struct Range {
    pub(super) label: &'static str,
    pub(super) href: String,
    pub(super) active: bool,
}

/// The time window of a page's charts, for the range picker (`_range_picker.html`): the
/// relative ranges, both ends as text in warren's one format and as the custom form's values
/// (`2026-12-03 09:30`, UTC, as the form is read without JavaScript).
pub(super) struct ChartWindow {
    pub(super) ranges: Vec<Range>,
    pub(super) from: String,
    pub(super) to: String,
    pub(super) from_field: String,
    pub(super) to_field: String,
    /// A custom or zoomed window (`from` given): the picker offers the way back.
    pub(super) custom: bool,
    /// The relative range to return to from a custom window.
    pub(super) reset_href: String,
    /// The page's other query parameters, kept by the custom range form.
    pub(super) keep: Vec<(String, String)>,
    /// Before the zoom hint, e.g. "61 points; ".
    pub(super) note: String,
}

impl ChartWindow {
    /// `page`: the page's path and its query parameters other than the window's.
    pub(super) fn new(
        state: &AppState,
        broker: &str,
        range: &RangeQuery,
        page: &str,
        keep: Vec<(String, String)>,
        note: String,
    ) -> Result<Self, super::WebError> {
        let window = range.validate(Utc::now(), super::api::poll_interval_secs(state, broker))?;
        let custom = range.from.as_deref().is_some_and(|f| !f.trim().is_empty());
        let selected = range.range.clone().unwrap_or_else(|| "1h".to_string());
        let query: String = keep.iter().map(|(k, v)| format!("{k}={}&", encode_segment(v))).collect();
        let field = |secs: i64| {
            DateTime::from_timestamp(secs, 0).map(|t| t.format("%Y-%m-%d %H:%M").to_string()).unwrap_or_default()
        };
        Ok(ChartWindow {
            ranges: RANGES
                .iter()
                .map(|(label, _)| Range {
                    label,
                    href: format!("{page}?{query}range={label}"),
                    active: !custom && *label == selected,
                })
                .collect(),
            from: format::unix(window.from),
            to: format::unix(window.to),
            from_field: field(window.from),
            to_field: field(window.to),
            custom,
            reset_href: format!("{page}?{query}range={selected}"),
            keep,
            note,
        })
    }
}

#[derive(Template)]
#[template(path = "queue.html")]
struct QueuePage {
    me: super::Me,
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
    routing: super::topology::RoutingView,
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

async fn queue(
    State(state): State<AppState>,
    me: super::Me,
    headers: HeaderMap,
    Path((broker, vhost, name)): Path<(String, String, String)>,
    Query(range): Query<RangeQuery>,
    RawQuery(raw_query): RawQuery,
) -> Result<Response, PageError> {
    let view = find_queue(&state, &broker, &vhost, &name).await?;
    let live = super::api::broker_live(&state, &broker)?;
    let href = queue_href(&broker, &vhost, &name);
    let stats = QueueStats {
        base: state.base_path.clone(),
        freshness: Freshness::polled(&[&live], REFRESH_SECS),
        alerts: super::alert_pages::alert_rows(&state, Some(&crate::alerts::AlertKey::of(&view))).await?,
        self_href: match &raw_query {
            Some(q) => format!("{href}?{q}"),
            None => href.clone(),
        },
        row: queue_row(&view, Default::default()),
        stale: format::stale_note(&live),
        rates_unavailable: live.status.stats_enabled == Some(false),
        consumers: super::clients::ConsumersSection::of(&live, &view),
    };
    let fragment = stats.render()?;
    if is_htmx(&headers) {
        return Ok(html(fragment));
    }
    // The chart data comes from the API; the page validates the range now so a bad one is a
    // clear error rather than an empty chart.
    let history = load_queue_history(&state, &broker, &vhost, &name, &range).await;
    let points = history.as_ref().map(|h| h.points.len()).unwrap_or(0);
    if let Err(super::WebError::BadRequest(message)) = history {
        return Err(super::WebError::BadRequest(message).into());
    }
    // The window itself, also when the queue has no history yet (the charts then say so).
    let window = ChartWindow::new(&state, &broker, &range, &href, Vec::new(), format!("{points} points; "))?;
    let api = format!("/api/v1{href}/history");
    let history_src = match &raw_query {
        Some(q) if range.from.is_some() || range.range.is_some() => format!("{api}?{q}"),
        _ => format!("{api}?range=1h"),
    };
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
        routing: super::topology::routing_view(&live, &view),
        dlq_href: format!("/dlq/{}/{}/{}", encode_segment(&broker), encode_segment(&vhost), encode_segment(&name)),
    };
    Ok(html(page.render()?))
}

// ----- Queues compared on one chart -----

/// Queues on one chart at most: more lines than that (and than the charts' colours) stop being
/// readable.
const COMPARE_MAX: usize = 8;

struct Compared {
    label: String,
    href: String,
    /// The queue list's query that leaves this queue out of the comparison.
    without: String,
}

#[derive(Template)]
#[template(path = "compare.html")]
struct ComparePage {
    me: super::Me,
    queues: Vec<Compared>,
    window: ChartWindow,
    /// `[{label, src}]` for the charts: each queue's history in the JSON API.
    sources: String,
}

/// `/compare?q=/queues/{broker}/{vhost}/{name}&q=...` (the queue pages' paths, as the queue
/// list's checkboxes send them) with the usual `range` or `from`/`to`.
async fn compare(
    State(state): State<AppState>,
    me: super::Me,
    RawQuery(raw_query): RawQuery,
) -> Result<Response, PageError> {
    let raw_query = raw_query.unwrap_or_default();
    let mut range = RangeQuery::default();
    let mut picked: Vec<String> = Vec::new();
    for (key, value) in form_pairs(&raw_query) {
        match key.as_str() {
            "q" if !picked.contains(&value) => picked.push(value),
            "range" => range.range = Some(value),
            "from" => range.from = Some(value),
            "to" => range.to = Some(value),
            _ => {}
        }
    }
    let bad = |m: String| PageError::from(super::WebError::BadRequest(m));
    if picked.is_empty() {
        return Err(bad(format!(
            "no queues to compare: tick up to {COMPARE_MAX} in the queue list, or name them as \
             q=/queues/{{broker}}/{{vhost}}/{{name}}"
        )));
    }
    if picked.len() > COMPARE_MAX {
        return Err(bad(format!("{} queues: at most {COMPARE_MAX} fit on one chart", picked.len())));
    }
    let mut views = Vec::new();
    for path in &picked {
        let segments: Vec<String> = path
            .strip_prefix("/queues/")
            .map(|rest| {
                rest.split('/').map(|s| percent_encoding::percent_decode_str(s).decode_utf8_lossy().into_owned())
            })
            .map(Iterator::collect)
            .unwrap_or_default();
        let [broker, vhost, name] = segments.as_slice() else {
            return Err(bad(format!("q: {path:?} is not a queue's path (/queues/{{broker}}/{{vhost}}/{{name}})")));
        };
        views.push(find_queue(&state, broker, vhost, name).await?);
    }
    // Each line says which queue it is in as few words as tell them apart.
    let label = |q: &QueueView| {
        let same_name = views.iter().filter(|o| o.name == q.name).count() > 1;
        let same_vhost = views.iter().filter(|o| o.name == q.name && o.vhost == q.vhost).count() > 1;
        match (same_name, same_vhost) {
            (false, _) => q.name.to_string(),
            (true, false) => format!("{}/{}", q.vhost, q.name),
            (true, true) => format!("{}/{}/{}", q.broker, q.vhost, q.name),
        }
    };
    let keep: Vec<(String, String)> = picked.iter().map(|p| ("q".to_string(), p.clone())).collect();
    let queues: Vec<Compared> = views
        .iter()
        .zip(&picked)
        .map(|(q, path)| Compared {
            label: label(q),
            href: queue_href(&q.broker, &q.vhost, &q.name),
            without: keep
                .iter()
                .filter(|(_, p)| p != path)
                .map(|(k, p)| format!("{k}={}", encode_segment(p)))
                .collect::<Vec<_>>()
                .join("&"),
        })
        .collect();
    let sources: Vec<serde_json::Value> = queues
        .iter()
        .map(|q| serde_json::json!({"label": q.label, "src": state.href(&format!("/api/v1{}/history", q.href))}))
        .collect();
    let window =
        ChartWindow::new(&state, &views[0].broker, &range, "/compare", keep, format!("{} queues; ", queues.len()))?;
    let page = ComparePage { me, queues, window, sources: serde_json::Value::from(sources).to_string() };
    Ok(html(page.render()?))
}
