//! The queue list (`/queues`): every watched queue, filtered, sorted and paged, with a depth
//! sparkline per row; its table is the live fragment.

use askama::Template;
use axum::extract::{Query, State};
use axum::http::HeaderMap;
use axum::response::Response;
use chrono::Utc;

use super::queue_row::{queue_row, QueueRow};
use crate::broker::management::encode_segment;
use crate::history;
use crate::live::BrokerLive;
use crate::state::AppState;
use crate::web::error_page::PageError;
use crate::web::format;
use crate::web::freshness::{Freshness, REFRESH_SECS};
use crate::web::htmx::{html, is_htmx};
use crate::web::identity::Me;
use crate::web::query::{Listing, QueueQuery, DEFAULT_PER_PAGE};
// The templates' own filters (`|ident`).
use crate::web::format::filters;

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
    me: Me,
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
    if l.per_page != DEFAULT_PER_PAGE {
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

pub(super) async fn queues(
    State(state): State<AppState>,
    me: Me,
    headers: HeaderMap,
    Query(query): Query<QueueQuery>,
) -> Result<Response, PageError> {
    let listing = query.validate()?;
    let live = state.live.snapshot();
    let (items, total) = listing.apply(&live);

    // Depth sparklines over the last hour, one database read for the whole page.
    let now = Utc::now().timestamp();
    let id_list: Vec<i64> = items.iter().filter_map(|q| q.id).collect();
    let series = history::depth_sparklines(&state.store, &id_list, now - 3600, now, 60).await?;
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
