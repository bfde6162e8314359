//! Queues compared on one chart (`/compare`): up to eight queues picked in the queue list, each
//! a line, over one time window.

use askama::Template;
use axum::extract::{RawQuery, State};
use axum::response::Response;

use super::chart_window::ChartWindow;
use crate::broker::management::encode_segment;
use crate::metrics::QueueView;
use crate::state::AppState;
use crate::web::error::WebError;
use crate::web::error_page::PageError;
use crate::web::htmx::html;
use crate::web::identity::Me;
use crate::web::links::queue_href;
use crate::web::lookup::find_queue;
use crate::web::query::{form_pairs, RangeQuery};

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
    me: Me,
    queues: Vec<Compared>,
    window: ChartWindow,
    /// `[{label, src}]` for the charts: each queue's history in the JSON API.
    sources: String,
}

/// `/compare?q=/queues/{broker}/{vhost}/{name}&q=...` (the queue pages' paths, as the queue
/// list's checkboxes send them) with the usual `range` or `from`/`to`.
pub(super) async fn compare(
    State(state): State<AppState>,
    me: Me,
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
    let bad = |m: String| PageError::from(WebError::BadRequest(m));
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
