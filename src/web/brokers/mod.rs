//! What the brokers show, live and over time: the overview, the queue list, a queue's page and
//! the comparison of queues, each broker's nodes, clients, exchanges and load, and their JSON.
//! Each page embeds its live fragment; htmx asks for the fragment alone (same URL, `HX-Request`
//! header) every few seconds, so the numbers move without reloads, and the page still works
//! without JavaScript.
//!
//! The files import one way: the pages use `queue_row.rs` (a queue as a row) and
//! `chart_window.rs` (the charts' window); the overview uses `nodes.rs` (each cluster's
//! summary); a queue's page uses `clients.rs` (its consumers), `topology.rs` (what routes into
//! it) and `history.rs`; `api.rs` uses `clients.rs` (hung consumers' connections).

use axum::routing::get;
use axum::Router;

use crate::state::AppState;

pub mod advisor;
pub mod advisor_actions;
pub(crate) mod api;
mod chart_window;
pub(crate) mod clients;
mod compare;
pub mod history;
pub(crate) mod load;
pub mod nodes;
mod overview;
mod queue_list;
mod queue_page;
mod queue_row;
pub(crate) mod topology;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/", get(overview::overview))
        .route("/queues", get(queue_list::queues))
        .route("/queues/{broker}/{vhost}/{queue}", get(queue_page::queue))
        .route("/compare", get(compare::compare))
        .merge(api::router())
        .merge(advisor::router())
        .merge(advisor_actions::router())
        .merge(history::router())
        .merge(nodes::router())
        .merge(clients::router())
        .merge(topology::router())
        .merge(load::router())
}
