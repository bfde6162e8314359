//! Clients: the page of a broker's connections and channels, the queue page's consumers, and
//! their JSON. Everything comes from the poller's last client listing (`clients::ClientsLive`),
//! which runs on a cadence of its own: every view says how old it is and how often it is made.

use askama::Template;
use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;
use axum::{Json, Router};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::broker::clients::{Channel, Connection};
use crate::broker::management::encode_segment;
use crate::live::clients::{ClientsLive, QueueConsumer};
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
use crate::web::lookup::broker_live;
use crate::web::lookup::find_queue;
// The templates' own filters (`|ident`).
use crate::web::format::filters;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/clients", get(first_broker))
        .route("/brokers/{broker}/clients", get(page))
        .route("/api/v1/brokers/{broker}/connections", get(connections_json))
        .route("/api/v1/brokers/{broker}/channels", get(channels_json))
        .route("/api/v1/queues/{broker}/{vhost}/{queue}/consumers", get(consumers_json))
}

/// What a view says of the listing's age: "as of 14s ago, listed every 30s: see the broker page".
pub struct ListingAge {
    pub listed: bool,
    pub ago: String,
    pub at: String,
    pub every: String,
    pub broker_href: String,
}

impl ListingAge {
    pub fn of(broker: &str, clients: Option<&ClientsLive>, now: DateTime<Utc>) -> ListingAge {
        ListingAge {
            listed: clients.is_some(),
            ago: format::ago(clients.map(|c| c.listed_at), now),
            at: format::time(clients.map(|c| c.listed_at)),
            every: clients.map_or(format::UNKNOWN.to_string(), |c| format::duration(c.every_secs)),
            broker_href: format!("/brokers/{}", encode_segment(broker)),
        }
    }
}

/// Bytes per second, as people read traffic.
fn bytes_rate(v: Option<f64>) -> String {
    match v {
        None => format::UNKNOWN.to_string(),
        Some(b) if b < 1000.0 => format!("{b:.0} B/s"),
        Some(b) if b < 1e6 => format!("{:.1} kB/s", b / 1e3),
        Some(b) => format!("{:.1} MB/s", b / 1e6),
    }
}

fn text(v: &Option<String>) -> String {
    v.clone().unwrap_or_else(|| format::UNKNOWN.to_string())
}

fn yes_no(v: Option<bool>) -> String {
    match v {
        Some(true) => "yes".into(),
        Some(false) => "no".into(),
        None => format::UNKNOWN.into(),
    }
}

struct ConnectionRow {
    name: String,
    /// The broker's name, when the client named itself (shown beneath).
    broker_name: Option<String>,
    user: String,
    vhost: String,
    client_host: String,
    product: String,
    state: String,
    /// `bad` (blocked, blocking), `warn` (flow) or empty.
    state_class: &'static str,
    channels: String,
    recv: String,
    send: String,
    node: String,
    connected: String,
}

impl ConnectionRow {
    fn of(c: &Connection) -> Self {
        ConnectionRow {
            name: c.display_name().to_string(),
            broker_name: c.connection_name.as_ref().map(|_| c.name.clone()),
            user: text(&c.user),
            vhost: text(&c.vhost),
            client_host: c.client_host().unwrap_or_else(|| format::UNKNOWN.to_string()),
            product: text(&c.product),
            state: text(&c.state),
            state_class: match c.state.as_deref() {
                Some("blocked" | "blocking") => "bad",
                Some("flow") => "warn",
                _ => "",
            },
            channels: format::count(c.channels),
            recv: bytes_rate(c.recv_bytes_per_sec),
            send: bytes_rate(c.send_bytes_per_sec),
            node: text(&c.node),
            connected: c.connected_at.map_or(format::UNKNOWN.to_string(), format::unix),
        }
    }
}

struct ChannelRow {
    name: String,
    connection: String,
    prefetch: String,
    global_prefetch: String,
    unacked: String,
    consumers: String,
    confirm: String,
    state: String,
}

impl ChannelRow {
    fn of(c: &Channel, connections: &[Connection]) -> Self {
        // The client's name of the connection reads better than `host:port -> host:port`.
        let connection = c.connection.as_ref().map(|name| {
            connections
                .iter()
                .find(|x| &x.name == name)
                .and_then(|x| x.connection_name.clone())
                .unwrap_or_else(|| name.clone())
        });
        ChannelRow {
            name: c.name.clone(),
            connection: text(&connection),
            prefetch: format::count(c.prefetch_count),
            global_prefetch: format::count(c.global_prefetch_count),
            unacked: format::count(c.messages_unacknowledged),
            consumers: format::count(c.consumer_count),
            confirm: yes_no(c.confirm),
            state: text(&c.state),
        }
    }
}

#[derive(Template)]
#[template(path = "clients_tables.html")]
struct ClientsFragment {
    /// The base path, before every URL (`AppState::base_path`).
    base: std::sync::Arc<str>,
    freshness: Freshness,
    self_href: String,
    age: ListingAge,
    vhost: Option<String>,
    vhosts: Vec<(String, String)>,
    all_href: String,
    connections: Option<Vec<ConnectionRow>>,
    connections_unknown: Option<String>,
    blocked: String,
    channels: Option<Vec<ChannelRow>>,
    channels_unknown: Option<String>,
    churn: String,
}

#[derive(Template)]
#[template(path = "clients.html")]
struct ClientsPage {
    me: Me,
    broker: String,
    others: Vec<(String, String)>,
    fragment: String,
}

#[derive(Deserialize, Default)]
struct VhostFilter {
    vhost: Option<String>,
}

fn clients_href(broker: &str) -> String {
    format!("/brokers/{}/clients", encode_segment(broker))
}

/// The Clients link of the navigation: the first broker's clients (each page links the others).
async fn first_broker(State(state): State<AppState>) -> Result<Response, PageError> {
    let first =
        state.live.snapshot().into_iter().next().ok_or_else(|| WebError::NotFound("no broker configured".into()))?;
    Ok(Redirect::to(&state.href(&clients_href(&first.name))).into_response())
}

async fn page(
    State(state): State<AppState>,
    Path(broker): Path<String>,
    Query(filter): Query<VhostFilter>,
    me: Me,
    headers: HeaderMap,
) -> Result<Response, PageError> {
    let live = broker_live(&state, &broker)?;
    let now = Utc::now();
    let clients = live.clients.as_deref();
    let vhost = filter.vhost.filter(|v| !v.is_empty());
    let in_vhost = |v: &Option<String>| vhost.as_ref().is_none_or(|want| v.as_ref() == Some(want));
    let all_connections = clients.and_then(|c| c.connections.items.as_deref()).unwrap_or_default();
    let mut vhosts: Vec<String> = all_connections.iter().filter_map(|c| c.vhost.clone()).collect();
    vhosts.sort();
    vhosts.dedup();
    let href = clients_href(&live.name);
    let self_href = match &vhost {
        Some(v) => format!("{href}?vhost={}", encode_segment(v)),
        None => href.clone(),
    };
    let fragment = ClientsFragment {
        base: state.base_path.clone(),
        freshness: Freshness::polled(&[&live], REFRESH_SECS),
        self_href,
        age: ListingAge::of(&live.name, clients, now),
        vhosts: vhosts.into_iter().map(|v| (format!("{href}?vhost={}", encode_segment(&v)), v)).collect(),
        vhost: vhost.clone(),
        all_href: href.clone(),
        connections: clients
            .and_then(|c| c.connections.items.as_ref())
            .map(|all| all.iter().filter(|c| in_vhost(&c.vhost)).map(ConnectionRow::of).collect()),
        connections_unknown: clients.and_then(|c| c.connections.unknown_why.clone()),
        blocked: format::count(clients.and_then(ClientsLive::blocked_connections)),
        channels: clients
            .and_then(|c| c.channels.items.as_ref())
            .map(|all| all.iter().filter(|c| in_vhost(&c.vhost)).map(|c| ChannelRow::of(c, all_connections)).collect()),
        channels_unknown: clients.and_then(|c| c.channels.unknown_why.clone()),
        churn: format::rate(live.connection_churn_per_sec),
    }
    .render()?;
    if is_htmx(&headers) {
        return Ok(html(fragment));
    }
    let others = state
        .live
        .snapshot()
        .into_iter()
        .filter(|b| b.name != live.name)
        .map(|b| (clients_href(&b.name), b.name))
        .collect();
    Ok(html(ClientsPage { me, broker: live.name, others, fragment }.render()?))
}

/// The listing's time, as every client answer of the API carries it.
#[derive(Serialize, utoipa::ToSchema)]
struct ListingJson {
    broker: String,
    /// When the listing was made (unix seconds); `null` before the first one.
    #[serde(flatten, serialize_with = "crate::times::as_of")]
    #[schema(schema_with = crate::times::schema::as_of)]
    as_of: Option<i64>,
    age_secs: Option<f64>,
    /// How often it is made now.
    every_secs: Option<f64>,
}

fn listing_json(live: &BrokerLive, now: DateTime<Utc>) -> ListingJson {
    let clients = live.clients.as_deref();
    ListingJson {
        broker: live.name.clone(),
        as_of: clients.map(|c| c.listed_at.timestamp()),
        age_secs: clients.map(|c| (now - c.listed_at).num_milliseconds() as f64 / 1000.0),
        every_secs: clients.map(|c| c.every_secs),
    }
}

#[derive(Serialize, utoipa::ToSchema)]
pub(crate) struct ConnectionsJson {
    #[serde(flatten)]
    listing: ListingJson,
    /// `null` when unknown (not listed yet, or the broker refused: `unknown_why`).
    connections: Option<Vec<Connection>>,
    unknown_why: Option<String>,
    /// Connections in state blocked or blocking; `null` when any state is unknown.
    blocked_connections: Option<u64>,
    /// Opened plus closed per second, broker-wide, from the overview (every poll).
    connection_churn_per_sec: Option<f64>,
}

async fn connections_json(
    State(state): State<AppState>,
    Path(broker): Path<String>,
) -> Result<Json<ConnectionsJson>, ApiError> {
    let live = broker_live(&state, &broker)?;
    let clients = live.clients.as_deref();
    Ok(Json(ConnectionsJson {
        listing: listing_json(&live, Utc::now()),
        connections: clients.and_then(|c| c.connections.items.clone()),
        unknown_why: clients.map_or(Some("not listed yet".into()), |c| c.connections.unknown_why.clone()),
        blocked_connections: clients.and_then(ClientsLive::blocked_connections),
        connection_churn_per_sec: live.connection_churn_per_sec,
    }))
}

#[derive(Serialize, utoipa::ToSchema)]
pub(crate) struct ChannelsJson {
    #[serde(flatten)]
    listing: ListingJson,
    channels: Option<Vec<Channel>>,
    unknown_why: Option<String>,
}

async fn channels_json(
    State(state): State<AppState>,
    Path(broker): Path<String>,
) -> Result<Json<ChannelsJson>, ApiError> {
    let live = broker_live(&state, &broker)?;
    let clients = live.clients.as_deref();
    Ok(Json(ChannelsJson {
        listing: listing_json(&live, Utc::now()),
        channels: clients.and_then(|c| c.channels.items.clone()),
        unknown_why: clients.map_or(Some("not listed yet".into()), |c| c.channels.unknown_why.clone()),
    }))
}

/// Said wherever a consumer's unacked count is shown.
pub const CHANNEL_UNACKED_NOTE: &str =
    "unacked messages are counted per channel: a channel's count spans every consumer on it, of this queue and others";

#[derive(Serialize, utoipa::ToSchema)]
pub(crate) struct ConsumersJson {
    #[serde(flatten)]
    listing: ListingJson,
    vhost: String,
    queue: String,
    consumers: Option<Vec<QueueConsumer>>,
    unknown_why: Option<String>,
    /// The connections whose channels hold unacked messages (or may: their count is unknown).
    holders: Option<Vec<String>>,
    channel_unacked_note: &'static str,
}

async fn consumers_json(
    State(state): State<AppState>,
    Path((broker, vhost, queue)): Path<(String, String, String)>,
) -> Result<Json<ConsumersJson>, ApiError> {
    find_queue(&state, &broker, &vhost, &queue).await?;
    let live = broker_live(&state, &broker)?;
    let clients = live.clients.as_deref();
    Ok(Json(ConsumersJson {
        listing: listing_json(&live, Utc::now()),
        consumers: clients.and_then(|c| c.queue_consumers(&vhost, &queue)),
        unknown_why: clients.map_or(Some("not listed yet".into()), |c| c.consumers.unknown_why.clone()),
        holders: clients.and_then(|c| c.holders(&vhost, &queue)),
        vhost,
        queue,
        channel_unacked_note: CHANNEL_UNACKED_NOTE,
    }))
}

/// The connections named by a queue's hung-consumer signal: those whose channels hold
/// unacked messages. `None` when the queue is not hung or the consumers are not known.
pub fn hung_consumer_connections(live: &BrokerLive, view: &crate::metrics::QueueView) -> Option<Vec<String>> {
    view.hung_consumer_secs?;
    live.clients.as_deref()?.holders(&view.vhost, &view.name)
}

pub struct ConsumerRow {
    pub tag: String,
    pub channel: String,
    pub connection: String,
    pub client_host: String,
    pub product: String,
    pub prefetch: String,
    pub ack_mode: &'static str,
    pub activity: String,
    pub channel_unacked: String,
    /// Other consumers share the channel (its unacked count is theirs too).
    pub shared: bool,
}

/// The queue page's Consumers section.
pub struct ConsumersSection {
    pub age: ListingAge,
    pub rows: Option<Vec<ConsumerRow>>,
    pub unknown_why: Option<String>,
    /// A hung consumer: the connections holding the unacked messages.
    pub hung_holders: Option<String>,
    pub note: &'static str,
}

impl ConsumersSection {
    pub fn of(live: &BrokerLive, view: &crate::metrics::QueueView) -> ConsumersSection {
        let clients = live.clients.as_deref();
        let rows = clients.and_then(|c| c.queue_consumers(&view.vhost, &view.name)).map(|all| {
            all.iter()
                .map(|c| ConsumerRow {
                    tag: text(&c.consumer.consumer_tag),
                    channel: text(&c.consumer.channel),
                    connection: c.connection_label(),
                    client_host: text(&c.client_host),
                    product: text(&c.product),
                    prefetch: match c.consumer.prefetch_count {
                        Some(0) => "unlimited".to_string(),
                        n => format::count(n),
                    },
                    ack_mode: match c.consumer.ack_required {
                        Some(true) => "manual",
                        Some(false) => "auto",
                        None => format::UNKNOWN,
                    },
                    activity: text(&c.consumer.activity_status),
                    channel_unacked: format::count(c.channel_unacked),
                    shared: c.channel_consumers.is_some_and(|n| n > 1),
                })
                .collect()
        });
        ConsumersSection {
            age: ListingAge::of(&live.name, clients, Utc::now()),
            rows,
            unknown_why: match clients {
                None => Some("not listed yet".into()),
                Some(c) => c.consumers.unknown_why.clone(),
            },
            hung_holders: hung_consumer_connections(live, view).filter(|h| !h.is_empty()).map(|h| h.join(", ")),
            note: CHANNEL_UNACKED_NOTE,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traffic_reads_in_bytes_per_second_and_unknown_is_a_dash() {
        assert_eq!(bytes_rate(None), "—");
        assert_eq!(bytes_rate(Some(11.8)), "12 B/s");
        assert_eq!(bytes_rate(Some(2500.0)), "2.5 kB/s");
        assert_eq!(bytes_rate(Some(3.2e6)), "3.2 MB/s");
    }
}
