//! The dead-letter browser of a queue (`/dlq/{broker}/{vhost}/{queue}`): its snapshot as a
//! table, with counts by reason, original queue and error, filters, and what warren holds of it
//! in custody. Reading the queue happens only on an explicit POST (take or refresh the
//! snapshot); viewing never touches the broker.

use std::sync::Arc;

use askama::Template;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use axum::Form;

use super::search::{search_failed, snapshot_matches};
use super::snapshot::{readable_snapshot, take, TakeRequest};
use super::snapshot_view::{error_group_rows, groups, snapshot_view, ErrorGroupRow, SnapshotView};
use crate::broker::management::encode_segment;
use crate::dlq::browse::{BrowseError, Snapshot};
use crate::dlq::budget::Budget;
use crate::dlq::message;
use crate::metrics::QueueView;
use crate::state::AppState;
use crate::web::error::WebError;
use crate::web::error_page::PageError;
use crate::web::format;
use crate::web::freshness::Freshness;
use crate::web::htmx::html;
use crate::web::identity::Me;
use crate::web::links::{dlq_href, queue_href};
use crate::web::lookup::find_queue;
use crate::web::restricted::{self, may_read_payloads, payload_role_name};
// The templates' own filters (`|ident`).
use crate::web::format::filters;

#[derive(Template)]
#[template(path = "dlq.html")]
struct DlqPage {
    me: Me,
    /// Custody is on: no snapshot of the broker's queue, and none of its actions, are offered.
    custody_active: bool,
    name: String,
    vhost: String,
    broker: String,
    queue_href: String,
    self_href: String,
    total: String,
    age: String,
    age_title: &'static str,
    /// How long ago the oldest dead letter died, from the snapshot's head message, and how.
    oldest_death: String,
    oldest_death_title: String,
    sources: Vec<(String, String)>,
    /// Where the snapshot's messages came from (the queue each died or failed in), with counts.
    observed: Vec<(String, String, usize)>,
    notice: Option<String>,
    needs_confirmation: Option<String>,
    snapshot: Option<SnapshotView>,
    /// How old the snapshot is, like every live page's "updated" (but never live).
    snapshot_freshness: Option<Freshness>,
    /// What warren keeps of this queue itself (`dlq::custody`), when it is in custody or was.
    custody: Option<CustodyView>,
    /// The filter in force: the filter form, and (as `filter_<name>` fields) the replay and
    /// requeue forms.
    filter: message::Filter,
    filter_fields: Vec<(String, String)>,
}

struct CustodyView {
    /// In custody now (else: records remain of an earlier custody).
    active: bool,
    held: u64,
    replayed: u64,
    in_broker: String,
    intake: String,
    intake_stopped: bool,
    /// (value, records, the page filtered to it or empty, first and last taken in).
    by_reason: Vec<(String, usize, String, String)>,
    by_queue: Vec<(String, usize, String, String)>,
    by_error: Vec<ErrorGroupRow>,
    matching: usize,
    records: Vec<CustodyRow>,
    /// The least role that reads payloads here, when `me` is below it: no export, and the
    /// filters that search payloads and headers do not apply.
    content_hidden: Option<&'static str>,
    /// The records matching the filter as JSON lines (`dlq::transfer`).
    export_href: String,
    /// Where JSON lines are posted to be imported into this queue's custody.
    import_path: String,
}

struct CustodyRow {
    id: i64,
    received_at: String,
    message_id: String,
    original_queue: String,
    reason: String,
    error: String,
    routing_key: String,
    size: String,
    /// Delivered by the broker before: possibly a copy of a record taken in already.
    redelivered: bool,
}

/// Records listed on the page.
const CUSTODY_ROWS: usize = 100;

/// The custody API of a queue.
fn custody_api(view: &QueueView) -> String {
    format!(
        "/api/v1/queues/{}/{}/{}/custody",
        encode_segment(&view.broker),
        encode_segment(&view.vhost),
        encode_segment(&view.name)
    )
}

async fn custody_view(
    state: &AppState,
    me: &Me,
    view: &QueueView,
    base: &str,
    filters: &message::Filter,
    budget: &Budget,
) -> Result<Option<CustodyView>, WebError> {
    let active =
        crate::dlq::custody::is_in_custody(&state.store, &state.config.custody, &view.broker, &view.vhost, &view.name)
            .await
            .map_err(|e| WebError::Storage(state.storage.failed("reading custody", &e)))?;
    if !active && view.custody_held.is_none() {
        return Ok(None);
    }
    let allowed = may_read_payloads(state, me, (&view.broker, &view.vhost, &view.name));
    let readable;
    let filters = if allowed {
        filters
    } else {
        readable = restricted::readable_filter(filters);
        &readable
    };
    let mut listing = crate::dlq::custody::list(
        &state.store,
        &state.custody,
        (&view.broker, &view.vhost, &view.name),
        filters,
        None,
        CUSTODY_ROWS,
        budget,
    )
    .await
    .map_err(|e| search_failed(state, e))?;
    if !allowed {
        restricted::listing(&mut listing);
    }
    let (intake, intake_stopped) = match &listing.intake {
        Some(i) if i.state == "running" && i.left_count > 0 => (
            format!(
                "running: {} taken in since warren started; {} left unacked in the broker, because a copy of them \
                 would differ from them (they go back to the queue when intake stops): {}",
                i.taken,
                i.left_count,
                i.left.join("; ")
            ),
            false,
        ),
        Some(i) if i.state == "running" => (format!("running: {} taken in since warren started", i.taken), false),
        Some(i) => {
            let again = i.retry_at.and_then(|t| chrono::DateTime::from_timestamp(t, 0));
            (format!("stopped: {} (tried again at {})", i.reason, format::time(again)), true)
        }
        None if active => ("starting (once the next poll lists the queue)".to_string(), false),
        None => ("off: released by an admin, or no [[custody]] rule names this queue now".to_string(), false),
    };
    let unknown_if_none = |v: &Option<String>| v.clone().unwrap_or_else(|| format::UNKNOWN.to_string());
    Ok(Some(CustodyView {
        active,
        held: listing.counts.held + listing.counts.claimed,
        replayed: listing.counts.replayed,
        in_broker: format::count(view.broker_total()),
        intake,
        intake_stopped,
        by_reason: groups(base, "reason", listing.by_reason),
        by_queue: groups(base, "original", listing.by_original_queue),
        by_error: error_group_rows(base, listing.by_error),
        matching: listing.matching,
        content_hidden: (!allowed).then(|| payload_role_name(state, (&view.broker, &view.vhost, &view.name))),
        export_href: {
            let query = filters.query();
            format!("{}/export{}{query}", custody_api(view), if query.is_empty() { "" } else { "?" })
        },
        import_path: format!("{}/import", custody_api(view)),
        records: listing
            .records
            .iter()
            .map(|r| CustodyRow {
                id: r.id,
                received_at: format::time(chrono::DateTime::from_timestamp(r.received_at, 0)),
                message_id: unknown_if_none(&r.message_id),
                original_queue: unknown_if_none(&r.original_queue),
                reason: unknown_if_none(&r.reason),
                error: r.error.clone().unwrap_or_default(),
                routing_key: r.routing_key.clone(),
                size: format!("{} B", format::count(Some(r.size))),
                redelivered: r.redelivered,
            })
            .collect(),
    }))
}

/// How long ago the head message of a snapshot died (its newest death).
/// The oldest dead letter as the snapshot read it: its head message's death time, while that can
/// still be the queue's head. An empty queue has none, whatever the snapshot read; after a move
/// or purge the head read may have left (issue 31, case 6: "died 14 m ago" beside 0 messages).
fn oldest_death(snapshot: Option<&Snapshot>, in_broker: Option<u64>) -> String {
    if in_broker == Some(0) {
        return "— (the queue is empty)".to_string();
    }
    let Some(snapshot) = snapshot else { return format!("{} (no snapshot yet)", format::UNKNOWN) };
    match snapshot.seen.head_died_at.and_then(|t| chrono::DateTime::from_timestamp(t, 0)) {
        Some(at) if snapshot.outdated.is_some() => format!(
            "{} (the snapshot's head died at {}, but the snapshot is outdated: it may have left the queue)",
            format::UNKNOWN,
            format::time(Some(at))
        ),
        Some(at) => {
            let ago = (chrono::Utc::now() - at).num_seconds().max(0) as f64;
            format!("died {} ago (at {}, as read in the snapshot)", format::duration(ago), format::time(Some(at)))
        }
        None => format!("{} (the head message read has no death time)", format::UNKNOWN),
    }
}

async fn render_page(
    state: &AppState,
    me: Me,
    view: &QueueView,
    filters: &message::Filter,
    notice: Option<String>,
    needs_confirmation: Option<String>,
) -> Result<String, WebError> {
    let base = dlq_href(&view.broker, &view.vhost, &view.name);
    let queue = (view.broker.as_ref(), view.vhost.as_ref(), view.name.as_ref());
    let role = restricted::role_of(&me);
    // One budget for the page: custody's search and the snapshot's filter together.
    let budget = state.matchers.request();
    let custody = custody_view(state, &me, view, &base, filters, &budget).await?;
    // While custody is on, the broker's queue holds only what intake has not taken yet: a
    // snapshot of it is stale, and its requeue and purge would act behind intake's back (issue
    // 31, case 8). The queue's messages are custody's records then.
    let custody_active = custody.as_ref().is_some_and(|c| c.active);
    let snapshot = state.snapshots.get(&view.broker, &view.vhost, &view.name).filter(|_| !custody_active);
    // Below the payload role, the snapshot is read without what the role may not read, and
    // filtered only by what it may (a count of matches would answer a question about content).
    let content_hidden = (!restricted::may_read(state, role, queue)).then(|| payload_role_name(state, queue));
    let readable_filters = restricted::readable_filter(filters);
    let snapshot_filters = if content_hidden.is_some() { &readable_filters } else { filters };
    let readable = snapshot.as_deref().map(|s| Arc::new(readable_snapshot(state, role, queue, s)));
    let shown = match &readable {
        Some(s) => snapshot_matches(s, snapshot_filters, &budget).await?,
        None => Vec::new(),
    };
    let page = DlqPage {
        custody,
        custody_active,
        filter: filters.clone(),
        filter_fields: filters.form_fields(),
        me,
        name: view.name.to_string(),
        vhost: view.vhost.to_string(),
        broker: view.broker.to_string(),
        queue_href: queue_href(&view.broker, &view.vhost, &view.name),
        total: format::count(view.total),
        age: format::age(view),
        age_title: format::age_title(view),
        oldest_death: oldest_death(snapshot.as_deref(), view.broker_total()),
        oldest_death_title: match snapshot.as_deref() {
            Some(s) => format!(
                "the time of the newest death (x-death) of the head message read in the snapshot of {}: when it \
                 first died in that queue for that reason. Messages taken from the head since are not seen.",
                format::time(Some(s.taken_at))
            ),
            None => "every dead letter carries its death time; take a snapshot to read the head's".to_string(),
        },
        observed: snapshot
            .iter()
            .flat_map(|s| s.seen.origins.iter())
            .map(|(s, n)| (s.clone(), queue_href(&view.broker, &view.vhost, s), *n))
            .collect(),
        sources: view
            .dead_letters
            .dead_letter_sources
            .iter()
            .map(|s| (s.clone(), queue_href(&view.broker, &view.vhost, s)))
            .collect(),
        notice,
        needs_confirmation,
        snapshot_freshness: snapshot.as_deref().map(|s| Freshness::snapshot(s.taken_at)),
        snapshot: snapshot.map(|s| SnapshotView {
            queue_total: format::count(view.broker_total()),
            content_hidden,
            ..snapshot_view(readable.as_deref().unwrap_or(&s), &base, snapshot_filters, &shown)
        }),
        self_href: base,
    };
    Ok(page.render()?)
}

pub(super) async fn page(
    State(state): State<AppState>,
    me: Me,
    Path((broker, vhost, queue)): Path<(String, String, String)>,
    Query(filters): Query<message::Filter>,
) -> Result<Response, PageError> {
    let view = find_queue(&state, &broker, &vhost, &queue).await?;
    if let Err(e) = filters.check() {
        return Ok(html(render_page(&state, me, &view, &message::Filter::default(), Some(e), None).await?));
    }
    Ok(html(render_page(&state, me, &view, &filters, None, None).await?))
}

pub(super) async fn take_form(
    State(state): State<AppState>,
    me: Me,
    Path((broker, vhost, queue)): Path<(String, String, String)>,
    Form(request): Form<TakeRequest>,
) -> Result<Response, PageError> {
    let view = find_queue(&state, &broker, &vhost, &queue).await?;
    match take(&state, &view, &request).await {
        // Post/redirect/get: a reload of the page never reads the queue again.
        Ok(_) => Ok(Redirect::to(&state.href(&dlq_href(&broker, &vhost, &queue))).into_response()),
        Err(BrowseError::NeedsConfirmation(message)) => {
            let body = render_page(&state, me, &view, &message::Filter::default(), None, Some(message)).await?;
            Ok((StatusCode::CONFLICT, html(body)).into_response())
        }
        Err(e) => {
            let body = render_page(&state, me, &view, &message::Filter::default(), Some(e.to_string()), None).await?;
            Ok((StatusCode::BAD_GATEWAY, html(body)).into_response())
        }
    }
}
