//! The nodes of each broker's cluster: the page (one card per node, values against their
//! limits, charts of each node's history), its live fragment, the JSON API, and the overview's
//! summary. What the broker did not give is "—", never 0 (`broker::nodes`).

use askama::Template;
use axum::extract::{Path, Query, RawQuery, State};
use axum::http::HeaderMap;
use axum::response::{Redirect, Response};
use axum::routing::get;
use axum::{Json, Router};
use chrono::Utc;
use serde::Serialize;

use super::chart_window::ChartWindow;
use crate::broker::management::encode_segment;
use crate::broker::nodes::{Node, NodesLive, DISK_READINGS_KEEP_SECS};
use crate::history::nodes::NodePoint;
use crate::live::BrokerLive;
use crate::state::AppState;
use crate::web::error::ApiError;
use crate::web::error::WebError;
use crate::web::error_page::PageError;
use crate::web::format;
use crate::web::freshness::{Freshness, REFRESH_SECS};
use crate::web::htmx::html;
use crate::web::htmx::is_htmx;
use crate::web::identity::Me;
use crate::web::links::nodes_href;
use crate::web::lookup::broker_live;
use crate::web::lookup::poll_interval_secs;
use crate::web::query::RangeQuery;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/nodes", get(first_broker))
        .route("/brokers/{broker}/nodes", get(page))
        .route("/api/v1/brokers/{broker}/nodes", get(json))
        .route("/api/v1/brokers/{broker}/nodes/{node}/history", get(history_json))
}

/// The nav's "Nodes": the first broker's nodes (the page links the others).
async fn first_broker(State(state): State<AppState>) -> Result<Redirect, PageError> {
    let first =
        state.live.snapshot().into_iter().next().ok_or_else(|| WebError::NotFound("no broker is configured".into()))?;
    Ok(Redirect::to(&state.href(&nodes_href(&first.name))))
}

// ----- JSON -----

#[derive(Serialize, utoipa::ToSchema)]
pub(crate) struct NodesJson {
    broker: String,
    nodes: Vec<Node>,
    /// One sentence per problem: a node down, a partition, a memory or disk alarm.
    problems: Vec<String>,
    /// When the nodes were read (unix seconds); `null` before the first read.
    #[serde(flatten, serialize_with = "crate::times::as_of")]
    #[schema(schema_with = crate::times::schema::as_of)]
    as_of: Option<i64>,
    /// Why the last read failed; the nodes are then as of `as_of`.
    error: Option<String>,
}

async fn json(State(state): State<AppState>, Path(broker): Path<String>) -> Result<Json<NodesJson>, ApiError> {
    let live = broker_live(&state, &broker)?;
    let n = live.nodes;
    Ok(Json(NodesJson {
        broker: live.name,
        problems: n.problems.iter().map(|p| p.text()).collect(),
        as_of: n.as_of.map(|t| t.timestamp()),
        error: n.error,
        nodes: n.nodes,
    }))
}

#[derive(Serialize, utoipa::ToSchema)]
pub struct NodeHistoryJson {
    broker: String,
    node: String,
    #[serde(flatten, serialize_with = "crate::times::from")]
    #[schema(schema_with = crate::times::schema::from)]
    from: i64,
    #[serde(flatten, serialize_with = "crate::times::to")]
    #[schema(schema_with = crate::times::schema::to)]
    to: i64,
    step: i64,
    /// How the points were made, for the charts' caption.
    note: String,
    points: Vec<NodePoint>,
}

async fn history_json(
    State(state): State<AppState>,
    Path((broker, node)): Path<(String, String)>,
    Query(range): Query<RangeQuery>,
) -> Result<Json<NodeHistoryJson>, ApiError> {
    broker_live(&state, &broker)?;
    let broker_id =
        *state.broker_ids.get(&broker).ok_or_else(|| WebError::NotFound(format!("no broker named {broker:?}")))?;
    let window = range.validate(Utc::now(), poll_interval_secs(&state, &broker))?;
    let points =
        crate::history::nodes::history(&state.store, broker_id, &node, window.from, window.to, window.step).await?;
    Ok(Json(NodeHistoryJson {
        note: format!(
            "A point per {}: the highest memory, descriptors, sockets, processes and run queue in it, the lowest free disk. \
             Older history keeps one sample a minute, then one an hour.",
            format::duration(window.step as f64)
        ),
        broker,
        node,
        from: window.from,
        to: window.to,
        step: window.step,
        points,
    }))
}

// ----- Page -----

fn bytes(v: Option<u64>) -> String {
    let Some(v) = v else { return format::UNKNOWN.to_string() };
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = v as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{v} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

/// "1.2 GiB of 1.6 GiB watermark (75%)", with "—" for whatever is unknown.
fn against(used: String, limit: String, ratio: Option<f64>, limit_name: &str) -> String {
    let share = ratio.map(|r| format!(" ({:.0}%)", r * 100.0)).unwrap_or_default();
    format!("{used} of {limit} {limit_name}{share}")
}

fn count_against(used: Option<u64>, total: Option<u64>, limit_name: &str) -> String {
    let ratio = match (used, total) {
        (Some(u), Some(t)) if t > 0 => Some(u as f64 / t as f64),
        _ => None,
    };
    against(format::count(used), format::count(total), ratio, limit_name)
}

fn alarm(on: Option<bool>) -> (&'static str, &'static str) {
    match on {
        Some(true) => ("ALARM: publishers are blocked", "down"),
        Some(false) => ("no alarm", "up"),
        None => (format::UNKNOWN, "pending"),
    }
}

struct NodeCard {
    name: String,
    status: &'static str,
    status_class: &'static str,
    uptime: String,
    memory: String,
    memory_alarm: (&'static str, &'static str),
    disk: String,
    disk_alarm: (&'static str, &'static str),
    disk_prediction: String,
    fds: String,
    sockets: String,
    processes: String,
    run_queue: String,
    partitions: String,
    partitioned: bool,
    versions: String,
    history_src: String,
}

fn card(broker: &str, node: &Node, nodes: &NodesLive, history_query: &str) -> NodeCard {
    let (status, status_class) = match node.running {
        Some(true) => ("running", "up"),
        Some(false) => ("down", "down"),
        None => ("unknown", "pending"),
    };
    let disk_ratio = match (node.disk_free, node.disk_free_limit) {
        (Some(free), Some(limit)) if limit > 0 => Some(free as f64 / limit as f64),
        _ => None,
    };
    let now = Utc::now().timestamp();
    let disk_prediction = match node.running {
        Some(true) => match nodes.disk_free_predicted_secs(node, DISK_READINGS_KEEP_SECS, now) {
            Some(secs) => format!(
                "reaches the limit in about {} at {}",
                format::duration(secs),
                trend_span(nodes, node, now).map_or("the last hour's trend".to_string(), |span| format!(
                    "the trend of the last {} (warren's readings start there)",
                    format::duration(span as f64)
                ))
            ),
            None if node.disk_free.is_some() => {
                "not shrinking over the last hour (or under 5 readings): no prediction".to_string()
            }
            None => format::UNKNOWN.to_string(),
        },
        _ => format::UNKNOWN.to_string(),
    };
    NodeCard {
        status,
        status_class,
        uptime: node.uptime_secs.map(|s| format::duration(s as f64)).unwrap_or_else(|| format::UNKNOWN.to_string()),
        memory: against(bytes(node.mem_used), bytes(node.mem_limit), node.mem_ratio(), "watermark"),
        memory_alarm: alarm(node.mem_alarm),
        disk: match disk_ratio {
            Some(r) => {
                format!("{} free, limit {} ({:.0}x the limit)", bytes(node.disk_free), bytes(node.disk_free_limit), r)
            }
            None => format!("{} free, limit {}", bytes(node.disk_free), bytes(node.disk_free_limit)),
        },
        disk_alarm: alarm(node.disk_free_alarm),
        disk_prediction,
        fds: count_against(node.fd_used, node.fd_total, "limit"),
        sockets: match (node.sockets_used, node.sockets_total) {
            (None, None) if node.running == Some(true) && node.fd_total.is_some() => {
                "— (not counted: RabbitMQ 4.x has no socket limit)".to_string()
            }
            (used, total) => count_against(used, total, "limit"),
        },
        processes: count_against(node.proc_used, node.proc_total, "limit"),
        run_queue: format::count(node.run_queue),
        partitioned: node.partitions.as_ref().is_some_and(|p| !p.is_empty()),
        partitions: match &node.partitions {
            Some(p) if p.is_empty() => "none".to_string(),
            Some(p) => format!("cannot reach {}", p.join(", ")),
            None => format::UNKNOWN.to_string(),
        },
        versions: format!(
            "RabbitMQ {}, Erlang {}",
            node.rabbitmq_version.as_deref().unwrap_or(format::UNKNOWN),
            node.erlang_version.as_deref().unwrap_or(format::UNKNOWN)
        ),
        history_src: format!(
            "/api/v1/brokers/{}/nodes/{}/history?{history_query}",
            encode_segment(broker),
            encode_segment(&node.name)
        ),
        name: node.name.clone(),
    }
}

#[derive(Template)]
#[template(path = "nodes_live.html")]
struct NodesFragment {
    /// The base path, before every URL (`AppState::base_path`).
    base: std::sync::Arc<str>,
    freshness: Freshness,
    self_href: String,
    broker_down: bool,
    error: Option<String>,
    as_of: String,
    summary: String,
    problems: Vec<String>,
    cards: Vec<NodeCard>,
}

#[derive(Template)]
#[template(path = "nodes.html")]
struct NodesPage {
    me: Me,
    name: String,
    fragment: String,
    window: ChartWindow,
    /// The other brokers' node pages.
    others: Vec<(String, String)>,
    /// (node, history source) per chart row.
    charts: Vec<(String, String)>,
}

async fn page(
    State(state): State<AppState>,
    Path(broker): Path<String>,
    me: Me,
    headers: HeaderMap,
    Query(range): Query<RangeQuery>,
    RawQuery(raw_query): RawQuery,
) -> Result<Response, PageError> {
    let live = broker_live(&state, &broker)?;
    let href = nodes_href(&live.name);
    let history_query = match &raw_query {
        Some(q) if range.from.is_some() || range.range.is_some() => q.clone(),
        _ => "range=1h".to_string(),
    };
    let cards: Vec<NodeCard> =
        live.nodes.nodes.iter().map(|n| card(&live.name, n, &live.nodes, &history_query)).collect();
    let fragment = NodesFragment {
        base: state.base_path.clone(),
        freshness: Freshness::polled(&[&live], REFRESH_SECS),
        self_href: match &raw_query {
            Some(q) => format!("{href}?{q}"),
            None => href.clone(),
        },
        broker_down: live.status.up == Some(false),
        error: live.nodes.error.clone(),
        as_of: format::time(live.nodes.as_of),
        summary: summary(&live).text,
        problems: live.nodes.problems.iter().map(|p| p.text()).collect(),
        cards,
    };
    let charts = fragment.cards.iter().map(|c| (c.name.clone(), c.history_src.clone())).collect();
    let fragment_html = fragment.render()?;
    if is_htmx(&headers) {
        return Ok(html(fragment_html));
    }
    let window = ChartWindow::new(&state, &live.name, &range, &href, Vec::new(), String::new())?;
    let others = state
        .live
        .snapshot()
        .into_iter()
        .filter(|b| b.name != live.name)
        .map(|b| (nodes_href(&b.name), b.name))
        .collect();
    let page = NodesPage { me, name: live.name.clone(), fragment: fragment_html, window, others, charts };
    Ok(html(page.render()?))
}

// ----- Overview -----

/// One broker's nodes in a line, for the overview.
pub struct NodesSummary {
    pub broker: String,
    pub href: String,
    pub text: String,
    /// A node down, a partition or an alarm.
    pub trouble: bool,
}

pub fn summary(b: &BrokerLive) -> NodesSummary {
    let n = &b.nodes;
    let text = match n.running_of() {
        None => match &n.error {
            Some(e) => format!("nodes not read: {e}"),
            None => "nodes not read yet".to_string(),
        },
        Some((running, all)) => {
            let mut parts = vec![format!("{running} of {all} running")];
            let alarms: Vec<String> = n
                .nodes
                .iter()
                .flat_map(|node| {
                    let mut a = Vec::new();
                    if node.mem_alarm == Some(true) {
                        a.push(format!("memory alarm on {}", node.name));
                    }
                    if node.disk_free_alarm == Some(true) {
                        a.push(format!("disk alarm on {}", node.name));
                    }
                    a
                })
                .collect();
            if alarms.is_empty() {
                let known = n.nodes.iter().any(|node| node.mem_alarm.is_some());
                parts.push(if known { "no alarms".to_string() } else { "alarms unknown".to_string() });
            } else {
                parts.extend(alarms);
            }
            if n.nodes.iter().any(|node| node.partitions.as_ref().is_some_and(|p| !p.is_empty())) {
                parts.push("partitioned".to_string());
            }
            parts.join(", ")
        }
    };
    NodesSummary { broker: b.name.clone(), href: nodes_href(&b.name), text, trouble: !n.problems.is_empty() }
}

/// How far back the readings a disk prediction fits go, when that is less than the hour it
/// may use: "the last hour's trend" after three minutes of readings said more than there was
/// (issue 34, case 6).
fn trend_span(nodes: &NodesLive, node: &Node, now: i64) -> Option<i64> {
    let first = nodes.disk_free_readings.get(&node.name)?.iter().find(|(t, _)| *t >= now - DISK_READINGS_KEEP_SECS)?.0;
    // A minute's slack: readings come a poll apart and the oldest is dropped at an hour.
    (now - first < DISK_READINGS_KEEP_SECS - 60).then_some(now - first)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_disk_prediction_says_how_far_back_its_readings_go() {
        let n = Node {
            name: "rabbit@a".into(),
            running: Some(true),
            disk_free: Some(1_000_000),
            disk_free_limit: Some(100_000),
            ..Node::default()
        };
        let now = Utc::now();
        let mut live = NodesLive::default();
        // Three minutes of readings, shrinking.
        for (i, free) in [1_600_000u64, 1_450_000, 1_300_000, 1_150_000, 1_000_000].into_iter().enumerate() {
            let at = now - chrono::Duration::seconds(180 - 45 * i as i64);
            live.observe(vec![Node { disk_free: Some(free), ..n.clone() }], at);
        }
        let c = card("b", &n, &live, "range=1h");
        assert!(
            c.disk_prediction.contains("at the trend of the last 3m (warren's readings start there)"),
            "{}",
            c.disk_prediction
        );
        assert!(!c.disk_prediction.contains("last hour"), "{}", c.disk_prediction);
    }

    #[test]
    fn values_read_against_their_limits() {
        assert_eq!(bytes(Some(1_288_490_189)), "1.2 GiB");
        assert_eq!(bytes(None), "—");
        let n = Node {
            name: "rabbit@a".into(),
            running: Some(true),
            mem_used: Some(1_288_490_189),
            mem_limit: Some(1_717_986_918),
            ..Node::default()
        };
        let c = card("b", &n, &NodesLive::default(), "range=1h");
        assert_eq!(c.memory, "1.2 GiB of 1.6 GiB watermark (75%)");
        assert_eq!(c.fds, "— of — limit");
        assert_eq!(c.memory_alarm.0, "—", "an alarm the broker did not report is unknown");
    }
}
