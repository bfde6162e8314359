//! Alerts: the alerts page (`page.rs`), the notification channels page (`channels.rs`) and
//! the alerts API (`api.rs`), which do what they share
//! through `rules.rs` (saving rules, silences, test notifications, each audited) and never
//! through each other. The alerts firing now, which other wings' pages show too, are
//! `web/firing.rs`.

use axum::Router;

use crate::state::AppState;

pub mod api;
mod channels;
mod page;
mod rules;

pub use page::{silence_hours, RuleForm};

pub fn router() -> Router<AppState> {
    Router::new().merge(api::router()).merge(page::router()).merge(channels::router())
}
