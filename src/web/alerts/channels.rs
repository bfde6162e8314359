//! The notification channels page (issue 34, case 5): each channel of the config file with its
//! kind, where it sends (secrets masked), its last delivery and its last failure, the recent
//! deliveries, and for admins a test notification. Channels are written in the config file
//! only: changing them here would need them kept in the database, which they are not.

use askama::Template;
use axum::extract::{Query, State};
use axum::response::Response;
use axum::routing::get;
use axum::Router;

use crate::alerts::notify::{self, DeliveryRecord, Outcome};
use crate::state::AppState;
use crate::web::error_page::PageError;
use crate::web::format;
use crate::web::format::filters;
use crate::web::htmx::html;
use crate::web::identity::Me;

pub fn router() -> Router<AppState> {
    Router::new().route("/alerts/channels", get(page))
}

/// How many of the newest deliveries the page reads for each channel's last delivery and
/// failure; older ones are in the API (`/api/v1/notifications/deliveries`, paged).
const READ: i64 = 500;

/// Deliveries listed under the channels.
const LISTED: usize = 50;

struct ChannelRow {
    id: String,
    name: String,
    kind: &'static str,
    target: String,
    severities: String,
    last_delivery: String,
    /// The newest failed attempt, or `None` when none is among the deliveries read.
    last_failure: Option<String>,
}

struct DeliveryRow {
    at: String,
    channel: String,
    kind: &'static str,
    alert: String,
    outcome: &'static str,
    detail: String,
}

#[derive(Template)]
#[template(path = "alerts_channels.html")]
struct ChannelsPage {
    me: Me,
    channels: Vec<ChannelRow>,
    deliveries: Vec<DeliveryRow>,
    read: i64,
    /// The channel the deliveries are filtered to (`?channel=`).
    only: Option<String>,
    notice: Option<crate::state::Notice>,
}

#[derive(serde::Deserialize)]
struct PageQuery {
    channel: Option<String>,
    notice: Option<String>,
}

fn failed(outcome: Outcome) -> bool {
    matches!(outcome, Outcome::Failed | Outcome::GaveUp | Outcome::Dropped)
}

/// An outcome as the page says it.
fn outcome_words(outcome: Outcome) -> &'static str {
    match outcome {
        Outcome::Sent => "sent",
        Outcome::Failed => "failed, retried",
        Outcome::GaveUp => "failed, given up",
        Outcome::Dropped => "dropped",
    }
}

/// The HTTP status and the error of a delivery (already free of secrets: `notify::send`).
fn detail(d: &DeliveryRecord) -> String {
    match (d.http_status, &d.error) {
        (Some(s), Some(e)) => format!("HTTP {s}: {e}"),
        (Some(s), None) => format!("HTTP {s}"),
        (None, Some(e)) => e.clone(),
        (None, None) => String::new(),
    }
}

/// Each configured channel with its newest delivery and newest failure among `read`.
fn channel_rows(channels: &[notify::NotificationChannel], read: &[DeliveryRecord]) -> Vec<ChannelRow> {
    let none = format!("none among the last {READ} deliveries");
    channels
        .iter()
        .map(|c| {
            let view = c.view();
            let mine = || read.iter().filter(|d| d.channel_id == c.id);
            ChannelRow {
                last_delivery: match mine().next() {
                    Some(d) => format!("{}: {}", format::time(Some(d.at)), outcome_words(d.outcome)),
                    None => none.clone(),
                },
                last_failure: mine().find(|d| failed(d.outcome)).map(|d| {
                    format!(
                        "{} ({}, attempt {}): {}",
                        format::time(Some(d.at)),
                        outcome_words(d.outcome),
                        d.attempt,
                        detail(d)
                    )
                }),
                severities: match view.min_severity {
                    Some(m) => format!("{} and above", format!("{m:?}").to_lowercase()),
                    None => "all".to_string(),
                },
                id: view.id,
                name: view.name,
                kind: view.kind,
                target: view.target,
            }
        })
        .collect()
}

async fn page(State(state): State<AppState>, me: Me, Query(q): Query<PageQuery>) -> Result<Response, PageError> {
    let notice = q.notice.and_then(|key| state.notices.take(&key));
    let read = notify::recent_deliveries(&state.store, READ).await.map_err(crate::web::error::WebError::from)?;
    let only = q.channel.filter(|c| !c.is_empty());
    let page = ChannelsPage {
        me,
        channels: channel_rows(&state.notifier.channels(), &read),
        deliveries: read
            .iter()
            .filter(|d| only.as_ref().is_none_or(|c| *c == d.channel_id))
            .take(LISTED)
            .map(|d| DeliveryRow {
                at: format::time(Some(d.at)),
                channel: d.channel_name.clone(),
                kind: d.kind.as_str(),
                alert: d.alert_key.as_ref().map(|k| k.to_string()).unwrap_or_default(),
                outcome: outcome_words(d.outcome),
                detail: detail(d),
            })
            .collect(),
        read: READ,
        only,
        notice,
    };
    Ok(html(page.render().map_err(crate::web::error::WebError::from)?))
}
