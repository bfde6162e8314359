//! Exchanges and routing (issue 20, must-have 3): the exchanges page and its API, and what routes
//! into a queue (the queue page's Routing section and its API), from the topology the poller
//! keeps (`TopologyLive`). Nothing here calls the broker.

use askama::Template;
use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;
use axum::{Json, Router};
use chrono::{DateTime, Utc};
use serde::Serialize;

use crate::broker::exchanges::ExchangeView;
use crate::broker::management::encode_segment;
use crate::broker::topology::routing::{routes_into, Route};
use crate::live::BrokerLive;
use crate::metrics::QueueView;
use crate::state::AppState;
use crate::web::error::ApiError;
use crate::web::error::WebError;
use crate::web::error_page::PageError;
use crate::web::format;
use crate::web::format::filters;
use crate::web::freshness::{Freshness, REFRESH_SECS};
use crate::web::htmx::html;
use crate::web::htmx::is_htmx;
use crate::web::identity::Me;
use crate::web::links::queue_href;
use crate::web::lookup::broker_live;
use crate::web::lookup::find_queue;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/exchanges", get(first_broker))
        .route("/brokers/{broker}/exchanges", get(page))
        .route("/api/v1/brokers/{broker}/exchanges", get(exchanges_json))
        .route("/api/v1/queues/{broker}/{vhost}/{queue}/routing", get(routing_json))
}

/// What the pages and the API say about unroutable counts per exchange.
const PER_EXCHANGE_UNROUTABLE: &str = "No unroutable count per exchange: the management API's exchange listing \
    has only publish in and publish out, and sums the unroutable counters (returned with mandatory, dropped \
    without) per vhost and per broker. RabbitMQ 4.x's Prometheus plugin has per-exchange counters \
    (rabbitmq_exchange_messages_unroutable_*_total), which warren does not read yet. Below: per vhost.";

/// Measured on 3.10.8: 430 publishes without `mandatory` to an exchange without bindings left
/// the management API's `drop_unroutable` (vhost, overview and channel) at 0, while the
/// Prometheus plugin's `rabbitmq_global_messages_unroutable_dropped_total` counted them; returns
/// (`mandatory`) were counted. 4.0.5 counts both.
const DROPS_UNCOUNTED_3X: &str = "RabbitMQ 3.x (measured on 3.10.8) does not count publishes without \
    mandatory that route nowhere in the management API (drop_unroutable stays 0); only returned ones \
    count, so this rate is a lower bound there.";

/// The nav's link: the first broker's exchanges (the page links the others).
async fn first_broker(State(state): State<AppState>) -> Response {
    match state.config.brokers.first() {
        Some(b) => {
            Redirect::to(&state.href(&format!("/brokers/{}/exchanges", encode_segment(&b.name)))).into_response()
        }
        None => PageError(WebError::NotFound("no broker is configured".to_string())).into_response(),
    }
}

#[derive(Serialize, utoipa::ToSchema)]
struct UnroutableJson {
    /// Messages per second over the watched vhosts; `null`: the broker does not give it.
    rate: Option<f64>,
    /// How it is measured.
    source: &'static str,
    per_vhost: Vec<VhostUnroutable>,
    /// True on RabbitMQ 3.x, whose management API does not count dropped publishes: the rate
    /// counts returns only, a lower bound (`lower_bound_note`).
    lower_bound: bool,
    lower_bound_note: Option<&'static str>,
    /// Always `null`: see `note`.
    #[schema(schema_with = always_null)]
    per_exchange: Option<()>,
    note: &'static str,
}

/// The schema of a field that is always `null`.
fn always_null() -> utoipa::openapi::Schema {
    utoipa::openapi::schema::ObjectBuilder::new().schema_type(utoipa::openapi::schema::Type::Null).into()
}

#[derive(Serialize, utoipa::ToSchema)]
struct VhostUnroutable {
    vhost: String,
    rate: Option<f64>,
}

const UNROUTABLE_SOURCE: &str = "return_unroutable + drop_unroutable of /api/vhosts, counter deltas between \
    warren's polls, summed over the watched vhosts; unknown when the broker collects no message stats";

#[derive(Serialize, utoipa::ToSchema)]
pub(crate) struct ExchangesJson {
    broker: String,
    /// When the exchange listing was read (unix seconds); `null`: not yet.
    #[serde(flatten, serialize_with = "crate::times::as_of")]
    #[schema(schema_with = crate::times::schema::as_of)]
    as_of: Option<i64>,
    /// How often it is read now.
    every_secs: Option<f64>,
    /// Why the last read failed, when it did (the listing shown is the one before).
    error: Option<String>,
    /// False: the broker collects no message stats, so publish rates are unknown.
    stats_enabled: Option<bool>,
    /// How the publish rates are measured.
    rates: &'static str,
    unroutable: UnroutableJson,
    exchanges: Vec<ExchangeView>,
}

const RATES_SOURCE: &str = "message_stats.publish_in / publish_out of /api/exchanges, counter deltas between \
    warren's reads at least 10 s apart; unknown after the first read and when the broker collects no stats";

/// RabbitMQ 3.x by the version the broker reported.
fn drops_uncounted(live: &BrokerLive) -> bool {
    live.status.rabbitmq_version.as_deref().is_some_and(|v| v.starts_with("3."))
}

fn unroutable(live: &BrokerLive) -> UnroutableJson {
    let lower_bound = drops_uncounted(live);
    UnroutableJson {
        lower_bound,
        lower_bound_note: lower_bound.then_some(DROPS_UNCOUNTED_3X),
        rate: live.rates.unroutable_rate,
        source: UNROUTABLE_SOURCE,
        per_vhost: live
            .vhosts
            .iter()
            .map(|v| VhostUnroutable { vhost: v.name.clone(), rate: v.rates.unroutable_rate })
            .collect(),
        per_exchange: None,
        note: PER_EXCHANGE_UNROUTABLE,
    }
}

async fn exchanges_json(
    State(state): State<AppState>,
    Path(broker): Path<String>,
) -> Result<Json<ExchangesJson>, ApiError> {
    let live = broker_live(&state, &broker)?;
    let t = &live.topology;
    Ok(Json(ExchangesJson {
        broker: live.name.clone(),
        as_of: t.exchanges_read_at.map(|at| at.timestamp()),
        every_secs: t.exchanges_every_secs,
        error: t.exchanges_error.clone(),
        stats_enabled: t.stats_enabled,
        rates: RATES_SOURCE,
        unroutable: unroutable(&live),
        exchanges: t.exchanges.clone(),
    }))
}

struct ExchangeRow {
    name: String,
    /// "(default exchange)" for "".
    label: String,
    kind: String,
    flags: String,
    alternate: String,
    policy: String,
    bindings_out: String,
    publish_in: String,
    publish_out: String,
}

struct VhostSection {
    name: String,
    unroutable: String,
    exchanges: Vec<ExchangeRow>,
}

#[derive(Template)]
#[template(path = "exchanges_table.html")]
struct ExchangesFragment {
    /// The base path, before every URL (`AppState::base_path`).
    base: std::sync::Arc<str>,
    freshness: Freshness,
    self_href: String,
    read_at: String,
    every: String,
    error: Option<String>,
    stats_off: bool,
    broker_unroutable: String,
    lower_bound_note: Option<&'static str>,
    per_exchange_note: &'static str,
    /// The vhost chosen, if one is.
    only: Option<String>,
    vhosts: Vec<VhostSection>,
}

#[derive(Template)]
#[template(path = "exchanges.html")]
struct ExchangesPage {
    me: Me,
    name: String,
    others: Vec<(String, String)>,
    /// Each vhost: (name, its page, chosen).
    vhost_choices: Vec<(String, String, bool)>,
    all_href: String,
    /// No vhost chosen: every vhost's exchanges show.
    all_chosen: bool,
    fragment: String,
}

fn row(x: &ExchangeView) -> ExchangeRow {
    let flag = |name: &str, v: Option<bool>| match v {
        Some(true) => Some(name.to_string()),
        Some(false) => None,
        None => Some(format!("{name}: {}", format::UNKNOWN)),
    };
    let flags: Vec<String> =
        [flag("durable", x.durable), flag("auto-delete", x.auto_delete), flag("internal", x.internal)]
            .into_iter()
            .flatten()
            .collect();
    ExchangeRow {
        name: x.name.clone(),
        label: if x.name.is_empty() { "(default exchange)".to_string() } else { x.name.clone() },
        kind: x.kind.clone().unwrap_or_else(|| format::UNKNOWN.to_string()),
        flags: if flags.is_empty() { "transient".to_string() } else { flags.join(", ") },
        alternate: match (&x.alternate_exchange, x.alternate_exchange_by.as_deref()) {
            (Some(ae), Some(by)) => format!("{ae} (by {by})"),
            (None, Some(why)) => format!("{} ({why})", format::UNKNOWN),
            _ => "none".to_string(),
        },
        policy: x.policy.clone().unwrap_or_else(|| "none".to_string()),
        bindings_out: match x.bindings_out {
            Some(n) => format::count(Some(n as u64)),
            None if x.name.is_empty() => "every queue (by name)".to_string(),
            // Every watched vhost's bindings are read; until the first read (or after every
            // read failed, which the log says) the count is unknown, and says why.
            None => format!("{} (bindings not read yet)", format::UNKNOWN),
        },
        publish_in: format::rate(x.publish_in_rate),
        publish_out: format::rate(x.publish_out_rate),
    }
}

#[derive(serde::Deserialize)]
struct ExchangesQuery {
    /// One vhost's exchanges only (issue 34, case 6: every vhost's made a page 5,861 px tall).
    vhost: Option<String>,
}

async fn page(
    State(state): State<AppState>,
    Path(broker): Path<String>,
    Query(q): Query<ExchangesQuery>,
    me: Me,
    headers: HeaderMap,
) -> Result<Response, PageError> {
    let live = broker_live(&state, &broker)?;
    let only = q.vhost.filter(|v| !v.is_empty());
    let now = Utc::now();
    let t = &live.topology;
    let mut vhosts: Vec<VhostSection> = live
        .vhosts
        .iter()
        .map(|v| VhostSection {
            name: v.name.clone(),
            unroutable: format::rate(v.rates.unroutable_rate),
            exchanges: Vec::new(),
        })
        .collect();
    for x in &t.exchanges {
        match vhosts.iter_mut().find(|v| v.name == x.vhost) {
            Some(v) => v.exchanges.push(row(x)),
            None => vhosts.push(VhostSection {
                name: x.vhost.clone(),
                unroutable: format::UNKNOWN.to_string(),
                exchanges: vec![row(x)],
            }),
        }
    }
    let vhost_choices: Vec<(String, String, bool)> = vhosts
        .iter()
        .map(|v| {
            let href = format!("/brokers/{}/exchanges?vhost={}", encode_segment(&live.name), encode_segment(&v.name));
            (v.name.clone(), href, only.as_ref() == Some(&v.name))
        })
        .collect();
    if let Some(only) = &only {
        vhosts.retain(|v| v.name == *only);
    }
    let self_href = match &only {
        Some(v) => format!("/brokers/{}/exchanges?vhost={}", encode_segment(&live.name), encode_segment(v)),
        None => format!("/brokers/{}/exchanges", encode_segment(&live.name)),
    };
    let fragment = ExchangesFragment {
        base: state.base_path.clone(),
        freshness: Freshness::polled(&[&live], REFRESH_SECS),
        self_href,
        only: only.clone(),
        read_at: match t.exchanges_read_at {
            Some(at) => format!("{} ({})", format::time(Some(at)), format::ago(Some(at), now)),
            None => "not yet".to_string(),
        },
        every: t.exchanges_every_secs.map(format::duration).unwrap_or_else(|| format::UNKNOWN.to_string()),
        error: t.exchanges_error.clone(),
        stats_off: t.stats_enabled == Some(false),
        broker_unroutable: format::rate(live.rates.unroutable_rate),
        lower_bound_note: drops_uncounted(&live).then_some(DROPS_UNCOUNTED_3X),
        per_exchange_note: PER_EXCHANGE_UNROUTABLE,
        vhosts,
    }
    .render()?;
    if is_htmx(&headers) {
        return Ok(html(fragment));
    }
    let others = state
        .config
        .brokers
        .iter()
        .filter(|b| b.name != live.name)
        .map(|b| (b.name.clone(), format!("/brokers/{}/exchanges", encode_segment(&b.name))))
        .collect();
    let all_href = format!("/brokers/{}/exchanges", encode_segment(&live.name));
    let all_chosen = !vhost_choices.iter().any(|c| c.2);
    Ok(html(
        ExchangesPage { me, name: live.name.clone(), others, vhost_choices, all_href, all_chosen, fragment }
            .render()?,
    ))
}

// ----- Routing into a queue -----

/// What routes into a queue, and where its dead letters go.
#[derive(Serialize, utoipa::ToSchema)]
pub struct RoutingJson {
    pub broker: String,
    pub vhost: String,
    pub queue: String,
    /// Every queue is bound to the default exchange ("") by its own name.
    pub default_exchange: DefaultExchange,
    /// Bindings into the queue, each with the exchanges bound to its exchange (one level);
    /// `null`: the vhost's bindings have not been read (yet).
    pub bindings: Option<Vec<Route>>,
    /// Routes past the page's limit, left out.
    pub left_out: usize,
    /// When the bindings were read (unix seconds).
    #[serde(flatten, serialize_with = "crate::times::topology_as_of")]
    #[schema(schema_with = crate::times::schema::topology_as_of)]
    pub topology_as_of: Option<i64>,
    /// Where dead letters go: the exchange, key, what set it and the queues reached (`null`
    /// when the bindings are not known); `null` altogether: no dead-letter exchange.
    pub dead_letters: Option<crate::broker::topology::DeadLetterTarget>,
    /// Said when the queue has no dead-letter exchange, or its exchange routes nowhere.
    pub dead_letter_warning: Option<String>,
}

#[derive(Serialize, utoipa::ToSchema)]
pub struct DefaultExchange {
    pub exchange: &'static str,
    pub routing_key: String,
}

pub fn routing(live: &BrokerLive, view: &QueueView) -> RoutingJson {
    let topology = live.topology.vhosts.get(&*view.vhost);
    let routed = topology.map(|t| routes_into(&t.topology, &view.name));
    let target = view.dead_letters.dead_letter_target.as_deref().cloned();
    let dead_letter_warning = match &target {
        None => Some(
            "no dead-letter exchange: rejected, expired and overflowing messages of this queue are destroyed"
                .to_string(),
        ),
        Some(t) if t.queues.as_ref().is_some_and(Vec::is_empty) => {
            Some(format!("its dead-letter exchange {:?} routes them to no queue: they are dropped", t.exchange))
        }
        Some(_) => None,
    };
    RoutingJson {
        broker: view.broker.to_string(),
        vhost: view.vhost.to_string(),
        queue: view.name.to_string(),
        default_exchange: DefaultExchange { exchange: "", routing_key: view.name.to_string() },
        left_out: routed.as_ref().map_or(0, |(_, n)| *n),
        bindings: routed.map(|(routes, _)| routes),
        topology_as_of: topology.map(|t| t.read_at.timestamp()),
        dead_letters: target,
        dead_letter_warning,
    }
}

async fn routing_json(
    State(state): State<AppState>,
    Path((broker, vhost, queue)): Path<(String, String, String)>,
) -> Result<Json<RoutingJson>, ApiError> {
    let view = find_queue(&state, &broker, &vhost, &queue).await?;
    let live = broker_live(&state, &broker)?;
    Ok(Json(routing(&live, &view)))
}

/// A queue's name and its page: (name, href).
pub type QueueLink = (String, String);

/// One line of the Routing section.
pub struct RouteLine {
    pub exchange: String,
    pub kind: String,
    pub binding: String,
    pub upstream: Vec<RouteLine>,
}

/// The queue page's Routing section.
pub struct RoutingView {
    pub default_key: String,
    /// `None`: bindings not read yet.
    pub routes: Option<Vec<RouteLine>>,
    pub left_out: usize,
    pub as_of: String,
    /// Dead letters: exchange, key, and the queues reached (links) or why none.
    pub dead_letters: Option<(String, String, Vec<QueueLink>)>,
    pub dead_letter_note: Option<String>,
}

fn binding_text(r: &Route) -> String {
    let key = if r.routing_key.is_empty() { "(empty key)".to_string() } else { format!("key {}", r.routing_key) };
    match &r.arguments {
        Some(args) => {
            let args: Vec<String> = args.iter().map(|(k, v)| format!("{k}={v}")).collect();
            format!("{key}, arguments {}", args.join(", "))
        }
        None => key,
    }
}

fn line(r: &Route) -> RouteLine {
    RouteLine {
        exchange: r.exchange.clone(),
        kind: r.kind.clone().unwrap_or_else(|| format::UNKNOWN.to_string()),
        binding: binding_text(r),
        upstream: r.upstream.iter().map(line).collect(),
    }
}

pub fn routing_view(live: &BrokerLive, view: &QueueView) -> RoutingView {
    let r = routing(live, view);
    let as_of = r
        .topology_as_of
        .and_then(|t| DateTime::from_timestamp(t, 0))
        .map(|t| format::time(Some(t)))
        .unwrap_or_else(|| "not read yet".to_string());
    RoutingView {
        default_key: r.default_exchange.routing_key,
        routes: r.bindings.as_ref().map(|b| b.iter().map(line).collect()),
        left_out: r.left_out,
        as_of,
        dead_letters: r.dead_letters.as_ref().map(|t| {
            let exchange = if t.exchange.is_empty() { "(default exchange)".to_string() } else { t.exchange.clone() };
            let key = t.routing_key.clone().unwrap_or_else(|| "(the message's own routing key)".to_string());
            let queues =
                t.queues.iter().flatten().map(|q| (q.clone(), queue_href(&view.broker, &view.vhost, q))).collect();
            (exchange, key, queues)
        }),
        dead_letter_note: match (&r.dead_letters, r.dead_letter_warning) {
            (Some(t), None) if t.queues.is_none() => Some("where that exchange routes them is not known yet".into()),
            (_, warning) => warning,
        },
    }
}
