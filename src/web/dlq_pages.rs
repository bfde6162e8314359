//! The dead-letter browser: a queue's snapshot as a table, with counts by reason and original
//! queue, filters, and a detail view per message. Reading the queue happens only on an explicit
//! POST (take or refresh the snapshot); viewing never touches the broker.

use std::collections::BTreeMap;
use std::sync::Arc;

use askama::Template;
use axum::extract::{Path, Query, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::{Form, Json, Router};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::api::find_queue;
use super::format;
use super::pages::queue_href;
use super::{html, ApiError, PageError, WebError};
use crate::broker::management::encode_segment;
use crate::dlq::browse::{self, BrowseError, Snapshot};
use crate::dlq::budget::Budget;
use crate::dlq::jobs::Choice;
use crate::dlq::jobs::MoveRequest;
use crate::dlq::message::{self, SnapshotMessage};
use crate::dlq::Target;
use crate::metrics::QueueView;
use crate::state::AppState;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/dlq/{broker}/{vhost}/{queue}", get(page))
        .route("/dlq/{broker}/{vhost}/{queue}/snapshot", post(take_form))
        .route("/dlq/{broker}/{vhost}/{queue}/requeue", post(requeue_form))
        .route("/dlq/{broker}/{vhost}/{queue}/custody/replay", post(custody_replay_form))
        .route("/dlq/{broker}/{vhost}/{queue}/custody/start", post(custody_start_form))
        .route("/dlq/{broker}/{vhost}/{queue}/custody/release", post(custody_release_form))
        .route("/dlq/{broker}/{vhost}/{queue}/messages/{position}", get(message_page))
        .route("/dlq/{broker}/{vhost}/{queue}/messages/{position}/payload", get(download))
        .route("/dlq/{broker}/{vhost}/{queue}/custody/{id}", get(custody_record_page))
        .route("/dlq/{broker}/{vhost}/{queue}/custody/{id}/payload", get(custody_payload))
        .route("/dlq/{broker}/{vhost}/{queue}/custody/{id}/edit", post(custody_edit_form))
        .route("/dlq/{broker}/{vhost}/{queue}/custody/{id}/delete", post(custody_delete_form))
        .route("/api/v1/queues/{broker}/{vhost}/{queue}/snapshot", get(snapshot_json).post(take_json))
}

pub(super) fn dlq_href(broker: &str, vhost: &str, queue: &str) -> String {
    format!("/dlq/{}/{}/{}", encode_segment(broker), encode_segment(vhost), encode_segment(queue))
}

#[derive(Debug, Deserialize)]
pub struct TakeRequest {
    pub count: Option<usize>,
    /// Required for a quorum queue with a delivery limit.
    #[serde(default)]
    pub confirm: Option<String>,
}

impl TakeRequest {
    fn confirmed(&self) -> bool {
        matches!(self.confirm.as_deref(), Some("true" | "on" | "1"))
    }
}

async fn take(
    state: &AppState,
    view: &QueueView,
    request: &TakeRequest,
) -> Result<std::sync::Arc<Snapshot>, BrowseError> {
    let broker = state.broker_config(&view.broker).expect("views come from configured brokers");
    browse::take(
        broker,
        (&state.db, &state.snapshots),
        view,
        request.count.unwrap_or(browse::DEFAULT_COUNT),
        request.confirmed(),
    )
    .await
}

async fn take_json(
    State(state): State<AppState>,
    access: super::Access,
    Path((broker, vhost, queue)): Path<(String, String, String)>,
    Json(request): Json<TakeRequest>,
) -> Result<Response, ApiError> {
    let view = find_queue(&state, &broker, &vhost, &queue).await?;
    match take(&state, &view, &request).await {
        Ok(snapshot) => {
            let readable = readable_snapshot(&state, access.principal.role, (&broker, &vhost, &queue), &snapshot);
            Ok(Json(SnapshotAnswer::of(readable)).into_response())
        }
        Err(BrowseError::NeedsConfirmation(message)) => {
            Ok((StatusCode::CONFLICT, Json(json!({"error": {"code": "confirmation_required", "message": message}})))
                .into_response())
        }
        Err(e) => Ok((StatusCode::BAD_GATEWAY, Json(json!({"error": {"code": "broker", "message": e.to_string()}})))
            .into_response()),
    }
}

async fn snapshot_json(
    State(state): State<AppState>,
    access: super::Access,
    Path((broker, vhost, queue)): Path<(String, String, String)>,
) -> Result<Json<SnapshotAnswer>, ApiError> {
    let snapshot = state
        .snapshots
        .get(&broker, &vhost, &queue)
        .ok_or_else(|| WebError::NotFound("no snapshot taken yet: POST to take one".to_string()))?;
    let readable = readable_snapshot(&state, access.principal.role, (&broker, &vhost, &queue), &snapshot);
    Ok(Json(SnapshotAnswer::of(readable)))
}

/// A snapshot in the API, with its messages grouped by the cause of their error as the page's
/// "By error" groups them (issue 31, must-have 6), from what the asker may read: below a
/// restricting rule's role the errors are gone, and so are the groups.
#[derive(Serialize)]
struct SnapshotAnswer {
    #[serde(flatten)]
    snapshot: Snapshot,
    by_error: Vec<SnapshotErrorGroup>,
}

#[derive(Serialize)]
struct SnapshotErrorGroup {
    /// `framework::error_group`: the error's type and its message's fingerprint.
    group: String,
    messages: usize,
    /// The group's texts as recorded, with their messages, most first (at most
    /// `custody::VARIANTS_SHOWN`; `variant_count` says how many there are).
    variants: Vec<crate::dlq::custody::Variant>,
    variant_count: usize,
}

impl SnapshotAnswer {
    fn of(snapshot: Snapshot) -> SnapshotAnswer {
        let lines = snapshot.messages.iter().filter_map(message::error_line).map(Some);
        let errors = counts(lines).into_iter().map(|(line, n)| (line, n, 0, 0));
        let by_error = crate::dlq::custody::error_groups(errors)
            .into_iter()
            .map(|g| SnapshotErrorGroup {
                group: g.value,
                messages: g.records,
                variant_count: g.variant_count.max(g.variants.len()),
                variants: g.variants,
            })
            .collect();
        SnapshotAnswer { snapshot, by_error }
    }
}

/// A snapshot as `role` may read it: a queue a `[[custody]]` rule covers keeps its payloads,
/// headers and errors from the roles below the rule's in the broker too (`restricted`).
fn readable_snapshot(
    state: &AppState,
    role: crate::auth::Role,
    queue: (&str, &str, &str),
    snapshot: &Snapshot,
) -> Snapshot {
    if super::restricted::may_read(state, role, queue) {
        snapshot.clone()
    } else {
        super::restricted::snapshot(snapshot)
    }
}

#[derive(Template)]
#[template(path = "dlq.html")]
struct DlqPage {
    me: super::Me,
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
    snapshot_freshness: Option<super::freshness::Freshness>,
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
    me: &super::Me,
    view: &QueueView,
    base: &str,
    filters: &message::Filter,
    budget: &Budget,
) -> Result<Option<CustodyView>, WebError> {
    let active =
        crate::dlq::custody::is_in_custody(&state.db, &state.config.custody, &view.broker, &view.vhost, &view.name)
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
        readable = super::restricted::readable_filter(filters);
        &readable
    };
    let mut listing = crate::dlq::custody::list(
        &state.db,
        &state.custody,
        (&view.broker, &view.vhost, &view.name),
        filters,
        None,
        CUSTODY_ROWS,
        budget,
    )
    .await
    .map_err(|e| super::custody::search_failed(state, e))?;
    if !allowed {
        super::restricted::listing(&mut listing);
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

struct SnapshotView {
    requested: usize,
    /// Why the read stopped early, or why the queue's order may differ.
    note: Option<String>,
    count: usize,
    delivery_limit: Option<i64>,
    /// (value, messages, the page filtered to it or empty): by reason, queue died in, error.
    by_reason: Vec<(String, usize, String)>,
    by_queue: Vec<(String, usize, String)>,
    /// By the error the application recorded, grouped by cause (`any_error`: some message has
    /// one).
    by_error: Vec<ErrorGroupRow>,
    /// Messages in the queue as of the last poll, for the bound of the counts.
    queue_total: String,
    any_error: bool,
    rows: Vec<Row>,
    shown: usize,
    /// A filter is set: "requeue all matching" is offered.
    filtered: bool,
    /// What ran since the snapshot was taken (`Snapshot::outdated`): no single messages are
    /// selected from it.
    outdated: Option<String>,
    /// The least role that reads payloads, headers and errors here, when `me` is below it.
    content_hidden: Option<&'static str>,
}

struct Row {
    href: String,
    position: usize,
    message_id: String,
    /// Where the id was read (the property, or a framework's header or body).
    message_id_from: String,
    /// The task, actor or message type a framework's format names, or empty.
    kind: String,
    /// The framework's own fields, for the message page: (name, value).
    app: Vec<(&'static str, String)>,
    /// The error the application recorded (type: message), or empty.
    error: String,
    /// Where that was read.
    error_from: String,
    original_queue: String,
    reason: String,
    death_count: i64,
    first_death: String,
    /// Where and why it died first, when that is not where it died last (a retry's wait queue).
    first_death_place: Option<String>,
    /// Every death oldest first (`work (rejected ×3) → work.wait (expired ×2)`), or empty.
    path: String,
    /// Where its framework says it came from, on a copy the application republished, or empty.
    origin: String,
    routing_key: String,
    size: String,
    content_type: String,
    delivery_count: String,
    /// No longer in this queue: read at its delivery limit, it went to this holding queue.
    held_in: Option<String>,
    fingerprint: String,
}

/// A framework's fields as the message page lists them, leaving out those it did not give.
fn app_fields(app: &crate::dlq::framework::App) -> Vec<(&'static str, String)> {
    let mut fields = vec![("Framework", app.framework.to_string())];
    let mut put = |name, value: Option<String>| fields.extend(value.map(|v| (name, v)));
    put("Id", app.id.clone().map(|id| format!("{id} (from {})", app.id_from.unwrap_or("its format"))));
    put("Task / type", app.kind.clone());
    put("Retries before this delivery", app.attempt.map(|a| a.to_string()));
    put("Arguments", app.arguments.clone());
    fields
}

/// Where an application's framework says a republished message came from, in words.
fn origin_text(o: &crate::dlq::framework::Origin) -> String {
    let queue = o.queue.as_ref().map(|q| format!("queue {q:?}"));
    let route = o.route.as_ref().map(|(e, k)| {
        let e = if e.is_empty() { "(default exchange)".to_string() } else { format!("{e:?}") };
        format!("exchange {e}, routing key {k:?}")
    });
    let what: Vec<String> = [queue, route].into_iter().flatten().collect();
    format!("{} (from {})", what.join("; "), o.from)
}

fn unknown_if_none(v: Option<String>) -> String {
    v.unwrap_or_else(|| format::UNKNOWN.to_string())
}

fn counts(values: impl Iterator<Item = Option<String>>) -> Vec<(String, usize)> {
    let mut map: BTreeMap<String, usize> = BTreeMap::new();
    for v in values {
        *map.entry(unknown_if_none(v)).or_default() += 1;
    }
    let mut out: Vec<(String, usize)> = map.into_iter().collect();
    out.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    out
}

/// Each group with the link that filters the snapshot to it (none for the unknown group).
/// Custody's groups as the page lists them: `filtered`, with when the group was first and last
/// taken in.
fn groups(base: &str, param: &str, groups: Vec<crate::dlq::custody::Group>) -> Vec<(String, usize, String, String)> {
    let at = |t: i64| format::time(chrono::DateTime::from_timestamp(t, 0));
    let seen: Vec<String> = groups.iter().map(|g| format!("{} … {}", at(g.first_seen), at(g.last_seen))).collect();
    filtered(base, param, groups.into_iter().map(|g| (g.value, g.records)).collect())
        .into_iter()
        .zip(seen)
        .map(|((value, n, href), seen)| (value, n, href, seen))
        .collect()
}

/// One error group as "By error" lists it: the group (type and fingerprinted message), its
/// messages, the page filtered to it (`error_group`), when custody took in its first and last
/// (empty for a snapshot), and the texts it gathers as recorded, with their counts.
struct ErrorGroupRow {
    value: String,
    count: usize,
    href: String,
    seen: String,
    variants: Vec<(String, usize)>,
    /// Texts of the group not listed (`custody::VARIANTS_SHOWN`).
    more_variants: usize,
}

/// A snapshot's messages by error group, and those without an error as one unknown row.
fn snapshot_error_groups(base: &str, snapshot: &Snapshot) -> Vec<ErrorGroupRow> {
    let lines: Vec<Option<String>> = snapshot.messages.iter().map(message::error_line).collect();
    let none = lines.iter().filter(|l| l.is_none()).count();
    let errors = counts(lines.into_iter().filter(Option::is_some)).into_iter().map(|(line, n)| (line, n, 0, 0));
    let mut rows = error_group_rows(base, crate::dlq::custody::error_groups(errors));
    if none > 0 {
        let unknown = format::UNKNOWN.to_string();
        let row = ErrorGroupRow {
            value: unknown,
            count: none,
            href: String::new(),
            seen: String::new(),
            variants: Vec::new(),
            more_variants: 0,
        };
        rows.push(row);
    }
    rows
}

fn error_group_rows(base: &str, groups: Vec<crate::dlq::custody::Group>) -> Vec<ErrorGroupRow> {
    let at = |t: i64| format::time(chrono::DateTime::from_timestamp(t, 0));
    groups
        .into_iter()
        .map(|g| {
            let seen =
                if g.first_seen > 0 { format!("{} … {}", at(g.first_seen), at(g.last_seen)) } else { String::new() };
            let href = filtered(base, "error_group", vec![(g.value.clone(), g.records)]).remove(0).2;
            ErrorGroupRow {
                more_variants: g.variant_count.saturating_sub(g.variants.len()),
                variants: g.variants.into_iter().map(|v| (v.value, v.records)).collect(),
                value: g.value,
                count: g.records,
                href,
                seen,
            }
        })
        .collect()
}

fn filtered(base: &str, param: &str, groups: Vec<(String, usize)>) -> Vec<(String, usize, String)> {
    groups
        .into_iter()
        .map(|(value, n)| {
            let href = if value == format::UNKNOWN {
                String::new()
            } else {
                let value: String =
                    percent_encoding::utf8_percent_encode(&value, percent_encoding::NON_ALPHANUMERIC).to_string();
                format!("{base}?{param}={value}")
            };
            (value, n, href)
        })
        .collect()
}

/// Which of a snapshot's messages `f` matches, in order; a regular expression matches within
/// `budget`, off the async workers (a snapshot holds up to 1,000 messages).
async fn snapshot_matches(
    snapshot: &Arc<Snapshot>,
    f: &message::Filter,
    budget: &Budget,
) -> Result<Vec<bool>, WebError> {
    if f.regex().is_none() {
        return Ok(snapshot.messages.iter().map(|m| f.matches(m)).collect());
    }
    let (snapshot, f) = (snapshot.clone(), f.clone());
    budget
        .run(move |check| {
            snapshot.messages.iter().map(|m| f.matches_within(m, Some(check))).collect::<Result<Vec<bool>, _>>()
        })
        .await
        .map_err(super::custody::stopped_search)
}

/// The page's view of a snapshot, its messages shown where `shown` (one per message) says.
fn snapshot_view(snapshot: &Snapshot, base: &str, f: &message::Filter, shown: &[bool]) -> SnapshotView {
    let rows: Vec<Row> = snapshot
        .messages
        .iter()
        .zip(shown)
        .filter(|(_, shown)| **shown)
        .map(|(m, _)| m)
        .map(|m| Row {
            href: format!("{base}/messages/{}", m.position),
            position: m.position,
            message_id: unknown_if_none(m.message_id.clone()),
            message_id_from: m.message_id_from.unwrap_or("no message_id property, and no framework's id").to_string(),
            kind: m.app.as_ref().and_then(|a| a.kind.clone()).unwrap_or_default(),
            app: m.app.as_ref().map(app_fields).unwrap_or_default(),
            error: message::error_line(m).unwrap_or_default(),
            error_from: m.error.as_ref().map(|e| e.from.to_string()).unwrap_or_default(),
            original_queue: unknown_if_none(m.original_queue.clone()),
            reason: unknown_if_none(m.reason.clone()),
            death_count: m.death_count,
            first_death: m
                .first_death_at
                .and_then(|t| chrono::DateTime::from_timestamp(t, 0))
                .map(|t| format::time(Some(t)))
                .unwrap_or_else(|| format::UNKNOWN.to_string()),
            path: m
                .deaths
                .iter()
                .map(|d| format!("{} ({} ×{})", d.queue, d.reason, d.count))
                .collect::<Vec<_>>()
                .join(" → "),
            origin: m.app_origin.as_ref().map(origin_text).unwrap_or_default(),
            first_death_place: (m.first_death_queue.is_some()
                && (m.first_death_queue != m.original_queue || m.first_death_reason != m.reason))
                .then(|| {
                    format!(
                        "{} ({})",
                        unknown_if_none(m.first_death_queue.clone()),
                        unknown_if_none(m.first_death_reason.clone())
                    )
                }),
            routing_key: m.routing_key.clone(),
            size: format!("{} B", format::count(Some(m.payload_bytes))),
            content_type: unknown_if_none(m.content_type.clone()),
            delivery_count: m.delivery_count.map(|c| c.to_string()).unwrap_or_else(|| format::UNKNOWN.to_string()),
            held_in: m.held_in.clone(),
            fingerprint: m.fingerprint.clone(),
        })
        .collect();
    SnapshotView {
        requested: snapshot.requested,
        note: snapshot.note.clone(),
        count: snapshot.messages.len(),
        delivery_limit: snapshot.delivery_limit,
        by_reason: filtered(base, "reason", counts(snapshot.messages.iter().map(|m| m.reason.clone()))),
        by_queue: filtered(base, "original", counts(snapshot.messages.iter().map(|m| m.original_queue.clone()))),
        by_error: snapshot_error_groups(base, snapshot),
        queue_total: String::new(),
        any_error: snapshot.messages.iter().any(|m| m.error.is_some()),
        shown: rows.len(),
        rows,
        filtered: !f.is_empty(),
        outdated: snapshot.outdated.clone(),
        content_hidden: None,
    }
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
    me: super::Me,
    view: &QueueView,
    filters: &message::Filter,
    notice: Option<String>,
    needs_confirmation: Option<String>,
) -> Result<String, WebError> {
    let base = dlq_href(&view.broker, &view.vhost, &view.name);
    let queue = (view.broker.as_ref(), view.vhost.as_ref(), view.name.as_ref());
    let role = super::restricted::role_of(&me);
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
    let content_hidden = (!super::restricted::may_read(state, role, queue)).then(|| payload_role_name(state, queue));
    let readable_filters = super::restricted::readable_filter(filters);
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
        snapshot_freshness: snapshot.as_deref().map(|s| super::freshness::Freshness::snapshot(s.taken_at)),
        snapshot: snapshot.map(|s| SnapshotView {
            queue_total: format::count(view.broker_total()),
            content_hidden,
            ..snapshot_view(readable.as_deref().unwrap_or(&s), &base, snapshot_filters, &shown)
        }),
        self_href: base,
    };
    Ok(page.render()?)
}

async fn page(
    State(state): State<AppState>,
    me: super::Me,
    Path((broker, vhost, queue)): Path<(String, String, String)>,
    Query(filters): Query<message::Filter>,
) -> Result<Response, PageError> {
    let view = find_queue(&state, &broker, &vhost, &queue).await?;
    if let Err(e) = filters.check() {
        return Ok(html(render_page(&state, me, &view, &message::Filter::default(), Some(e), None).await?));
    }
    Ok(html(render_page(&state, me, &view, &filters, None, None).await?))
}

async fn take_form(
    State(state): State<AppState>,
    me: super::Me,
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

/// Asks first, with what will happen (`custody::ConfirmPage`); the confirmation posts
/// `confirmed=true` back.
async fn custody_start_form(
    State(state): State<AppState>,
    access: super::Access,
    me: super::Me,
    Path((broker, vhost, queue)): Path<(String, String, String)>,
    body: String,
) -> Result<Response, PageError> {
    if !confirmed(&body) {
        let page = super::custody::ConfirmPage::new(&state, me, (&broker, &vhost, &queue), "start").await?;
        return Ok(html(page.render()?));
    }
    super::custody::start_custody(&state, &broker, &vhost, &queue, &access.principal.actor()).await?;
    Ok(Redirect::to(&state.href(&dlq_href(&broker, &vhost, &queue))).into_response())
}

async fn custody_release_form(
    State(state): State<AppState>,
    access: super::Access,
    me: super::Me,
    Path((broker, vhost, queue)): Path<(String, String, String)>,
    body: String,
) -> Result<Response, PageError> {
    if !confirmed(&body) {
        let page = super::custody::ConfirmPage::new(&state, me, (&broker, &vhost, &queue), "release").await?;
        return Ok(html(page.render()?));
    }
    let audit_id = super::custody::release_custody(&state, &broker, &vhost, &queue, &access.principal.actor()).await?;
    Ok(Redirect::to(&state.href(&format!("/jobs/{audit_id}"))).into_response())
}

/// Whether a form carries `confirmed=true` (the confirmation page's button).
fn confirmed(body: &str) -> bool {
    super::query::form_pairs(body).any(|(k, v)| k == "confirmed" && v == "true")
}

/// The custody replay form: `scope` (`all` or `matching`, with the `filter_*` fields) and
/// `target` (`original-queue`, or `queue` with `target_queue`).
async fn custody_replay_form(
    State(state): State<AppState>,
    access: super::Access,
    Path((broker, vhost, queue)): Path<(String, String, String)>,
    body: String,
) -> Result<Response, PageError> {
    use crate::dlq::custody::{CustodySelection, CustodyTarget, ReplayRequest};
    let (mut scope, mut target, mut target_queue, mut filter) =
        (String::new(), String::new(), String::new(), message::Filter::default());
    let (mut accept_drop_head, mut accept_stranding) = (false, false);
    for (key, value) in super::query::form_pairs(&body) {
        match key.as_str() {
            "scope" => scope = value,
            "accept_drop_head" => accept_drop_head = value == "true",
            "accept_stranding" => accept_stranding = value == "true",
            "target" => target = value,
            "target_queue" => target_queue = value.trim().to_string(),
            key if key.starts_with("filter_") => {
                filter.set_form_field(key, value);
            }
            _ => {}
        }
    }
    let selection = match scope.as_str() {
        "all" => CustodySelection::All,
        "matching" if !filter.is_empty() => {
            filter.check().map_err(WebError::BadRequest)?;
            CustodySelection::Matching(Box::new(filter))
        }
        "matching" => return Err(WebError::BadRequest("set a filter first, or replay all".to_string()).into()),
        _ => return Err(WebError::BadRequest("scope must be all or matching".to_string()).into()),
    };
    let target = match target.as_str() {
        "queue" if !target_queue.is_empty() => CustodyTarget::Queue(target_queue),
        "queue" => return Err(WebError::BadRequest("name the target queue".to_string()).into()),
        _ => CustodyTarget::OriginalQueue,
    };
    let request = ReplayRequest { selection, target, accept_drop_head, accept_stranding };
    super::custody::payloads_for(&state, &access, (&broker, &vhost, &queue))?;
    let audit_id =
        super::custody::start_replay(&state, &broker, &vhost, &queue, request, &access.principal.actor(), false)
            .await?;
    // Post/redirect/get: the job's page follows it, and says what became of each record.
    Ok(Redirect::to(&state.href(&format!("/jobs/{audit_id}"))).into_response())
}

#[derive(Template)]
#[template(path = "dlq_message.html")]
struct MessagePage {
    me: super::Me,
    name: String,
    /// "Message 3" (of a snapshot) or "Record 42" (in custody).
    heading: String,
    /// Why its headers and payload are not shown (`CustodyRule::payloads`), or nothing.
    hidden: Option<String>,
    /// The edit-and-replay form of a held record in custody, for admins where it is on.
    edit: Option<EditForm>,
    /// Where an admin posts to delete a held record in custody.
    delete_action: Option<String>,
    back_href: String,
    download_href: String,
    row: Row,
    properties: Vec<(String, String)>,
    headers: Vec<(String, String, bool)>,
    deaths: Vec<Vec<(String, String)>>,
    payload_kind: &'static str,
    payload: String,
    truncated: Option<String>,
    /// A snapshot's message, of a snapshot outdated by what ran since (`Snapshot::outdated`):
    /// the message may have left the queue.
    outdated: Option<String>,
}

fn snapshot_message(
    state: &AppState,
    broker: &str,
    vhost: &str,
    queue: &str,
    position: usize,
) -> Result<SnapshotMessage, WebError> {
    let snapshot = state
        .snapshots
        .get(broker, vhost, queue)
        .ok_or_else(|| WebError::NotFound("no snapshot of this queue yet".to_string()))?;
    snapshot
        .messages
        .iter()
        .find(|m| m.position == position)
        .cloned()
        .ok_or_else(|| WebError::NotFound(format!("no message at position {position} in the snapshot")))
}

/// A header value as text; nested tables as indented JSON.
fn show(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => serde_json::to_string_pretty(other).unwrap_or_else(|_| other.to_string()),
    }
}

/// A property or x-death field; the AMQP `timestamp` property and x-death's `time` (unix
/// seconds) as times, with the number beside them.
fn show_field(key: &str, v: &Value) -> String {
    match (key, v.as_i64()) {
        ("timestamp" | "time", Some(secs)) => format!("{} ({secs})", format::unix(secs)),
        _ => show(v),
    }
}

async fn message_page(
    State(state): State<AppState>,
    me: super::Me,
    Path((broker, vhost, queue, position)): Path<(String, String, String, usize)>,
) -> Result<Response, PageError> {
    let mut m = snapshot_message(&state, &broker, &vhost, &queue, position)?;
    let base = dlq_href(&broker, &vhost, &queue);
    let download_href = format!("{base}/messages/{position}/payload");
    let hidden = hidden_here(&state, &me, (&broker, &vhost, &queue), &mut m);
    let mut page = message_view(me, &queue, &base, &m, format!("Message {position}"), download_href, hidden);
    // Issue 31, case 6: the message pages of an outdated snapshot did not say so.
    page.outdated = state.snapshots.get(&broker, &vhost, &queue).and_then(|s| s.outdated.clone());
    Ok(html(page.render()?))
}

struct EditForm {
    action: String,
    /// The body as text, when it is text (a binary body is replayed as it is).
    body: Option<String>,
    /// The headers as JSON, to edit.
    headers: String,
    /// The queue it died in, the default target.
    original_queue: String,
}

/// A record in custody, shown like a snapshot's message; its headers and payload only to the
/// roles its `[[custody]]` rule lets read them.
async fn custody_record_page(
    State(state): State<AppState>,
    me: super::Me,
    Path((broker, vhost, queue, id)): Path<(String, String, String, i64)>,
) -> Result<Response, PageError> {
    let (record, mut m, _) = custody_record(&state, &broker, &vhost, &queue, id).await?;
    let base = dlq_href(&broker, &vhost, &queue);
    let hidden = hidden_here(&state, &me, (&broker, &vhost, &queue), &mut m);
    let heading = format!("Record {} ({})", record.id, record.state);
    let download_href = format!("{base}/custody/{id}/payload");
    let editable = me.admin
        && hidden.is_none()
        && record.state == "held"
        && crate::dlq::custody::editable(&state.config.custody, &broker, &vhost, &queue);
    let edit = editable.then(|| EditForm {
        action: format!("{base}/custody/{id}/edit"),
        body: std::str::from_utf8(&message::payload_bytes(&m.message)).ok().map(str::to_string),
        headers: serde_json::to_string_pretty(m.message.properties.get("headers").unwrap_or(&json!({})))
            .unwrap_or_default(),
        original_queue: record.original_queue.clone().unwrap_or_default(),
    });
    let delete_action = (me.admin && record.state == "held").then(|| format!("{base}/custody/{id}/delete"));
    let mut page = message_view(me, &queue, &base, &m, heading, download_href, hidden);
    page.edit = edit;
    page.delete_action = delete_action;
    Ok(html(page.render()?))
}

/// The edit-and-replay form: `body` (when the record's body is text), `headers` (JSON), and
/// `target_queue` (empty: the queue it died in).
async fn custody_edit_form(
    State(state): State<AppState>,
    access: super::Access,
    Path((broker, vhost, queue, id)): Path<(String, String, String, i64)>,
    body: String,
) -> Result<Response, PageError> {
    let mut edit = crate::dlq::custody::Edit::default();
    for (key, value) in super::query::form_pairs(&body) {
        match key.as_str() {
            "body" => edit.body = Some(value.replace("\r\n", "\n")),
            "headers" => {
                let parsed: serde_json::Map<String, Value> = serde_json::from_str(&value)
                    .map_err(|e| WebError::BadRequest(format!("headers: not a JSON object: {e}")))?;
                edit.headers = Some(parsed);
            }
            "target_queue" if !value.trim().is_empty() => {
                edit.target = crate::dlq::custody::CustodyTarget::Queue(value.trim().to_string())
            }
            "accept_drop_head" => edit.accept_drop_head = value == "true",
            "accept_stranding" => edit.accept_stranding = value == "true",
            _ => {}
        }
    }
    let actor = access.principal.actor();
    let (audit_id, outcome) = super::custody::edit_record(&state, (&broker, &vhost, &queue), id, edit, &actor).await?;
    match outcome {
        Ok(_) => Ok(Redirect::to(&state.href("/audit")).into_response()),
        Err(why) => Err(WebError::Conflict(format!("{why} (audit entry {audit_id})")).into()),
    }
}

/// Deletes a held record (admins), then back to the queue's page.
async fn custody_delete_form(
    State(state): State<AppState>,
    access: super::Access,
    Path((broker, vhost, queue, id)): Path<(String, String, String, i64)>,
) -> Result<Response, PageError> {
    super::custody::delete_record(&state, (&broker, &vhost, &queue), id, &access.principal.actor()).await?;
    Ok(Redirect::to(&state.href(&dlq_href(&broker, &vhost, &queue))).into_response())
}

async fn custody_record(
    state: &AppState,
    broker: &str,
    vhost: &str,
    queue: &str,
    id: i64,
) -> Result<(crate::dlq::custody::Record, SnapshotMessage, Vec<u8>), WebError> {
    crate::dlq::custody::message(&state.db, (broker, vhost, queue), id)
        .await
        .map_err(|e| WebError::Storage(state.storage.failed("reading custody", &e)))?
        .ok_or_else(|| WebError::NotFound(format!("no record {id} in the custody of {queue:?}")))
}

/// Why `m`'s headers, payload and error are not shown to `me`, having left them out; `None`
/// when `me` reads them.
fn hidden_here(state: &AppState, me: &super::Me, queue: (&str, &str, &str), m: &mut SnapshotMessage) -> Option<String> {
    if may_read_payloads(state, me, queue) {
        return None;
    }
    super::restricted::message(m);
    Some(format!(
        "Headers, payload and error are shown to the {} role and above here; you are {}.",
        payload_role_name(state, queue),
        me.role
    ))
}

fn payload_role_name(state: &AppState, (broker, vhost, queue): (&str, &str, &str)) -> &'static str {
    crate::dlq::custody::payload_role(&state.config.custody, broker, vhost, queue).as_str()
}

/// Whether `me` reads the payloads and headers of this queue's records in custody.
pub fn may_read_payloads(state: &AppState, me: &super::Me, queue: (&str, &str, &str)) -> bool {
    super::restricted::may_read(state, super::restricted::role_of(me), queue)
}

async fn custody_payload(
    State(state): State<AppState>,
    me: super::Me,
    Path((broker, vhost, queue, id)): Path<(String, String, String, i64)>,
) -> Result<Response, PageError> {
    let (_, _, body) = custody_record(&state, &broker, &vhost, &queue, id).await?;
    if !may_read_payloads(&state, &me, (&broker, &vhost, &queue)) {
        return Err(WebError::Forbidden(format!(
            "payloads here are for the {} role and above",
            payload_role_name(&state, (&broker, &vhost, &queue))
        ))
        .into());
    }
    Ok((
        [
            (header::CONTENT_TYPE, "application/octet-stream".to_string()),
            (header::CONTENT_DISPOSITION, format!("attachment; filename=\"record-{id}.bin\"")),
        ],
        body,
    )
        .into_response())
}

/// The message page of `m`; `hidden` says why headers and payload are left out.
fn message_view(
    me: super::Me,
    queue: &str,
    base: &str,
    m: &SnapshotMessage,
    heading: String,
    download_href: String,
    hidden: Option<String>,
) -> MessagePage {
    let headers_map = m.message.properties.get("headers").and_then(Value::as_object).cloned().unwrap_or_default();
    let deaths = headers_map
        .get("x-death")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_object)
                .map(|d| d.iter().map(|(k, v)| (k.clone(), show_field(k, v))).collect())
                .collect()
        })
        .unwrap_or_default();
    // Error texts that consumer libraries add (Spring's x-exception-*, and similar).
    let highlighted = |k: &str| k.starts_with("x-exception") || k.contains("error") || k.contains("stacktrace");
    let headers = headers_map
        .iter()
        .filter(|(k, _)| *k != "x-death")
        .map(|(k, v)| (k.clone(), show(v), highlighted(k)))
        .collect();
    let properties = m
        .message
        .properties
        .iter()
        .filter(|(k, _)| *k != "headers")
        .map(|(k, v)| (k.clone(), show_field(k, v)))
        .collect();
    let (payload_kind, payload) =
        if hidden.is_some() { ("hidden", String::new()) } else { message::render_payload(&m.message) };
    let (headers, deaths) = if hidden.is_some() { (Vec::new(), Vec::new()) } else { (headers, deaths) };
    let kept = message::payload_bytes(&m.message).len() as u64;
    let truncated = (kept < m.payload_bytes).then(|| {
        format!("showing the first {} of {} bytes", format::count(Some(kept)), format::count(Some(m.payload_bytes)))
    });
    let mut page = MessagePage {
        me,
        name: queue.to_string(),
        heading,
        hidden,
        edit: None,
        delete_action: None,
        back_href: base.to_string(),
        download_href,
        row: snapshot_view(
            &Snapshot {
                taken_at: chrono::Utc::now(),
                queue_type: String::new(),
                delivery_limit: None,
                requested: 1,
                note: None,
                messages: vec![m.clone()],
                outdated: None,
                seen: Default::default(),
            },
            base,
            &message::Filter::default(),
            &[true],
        )
        .rows
        .remove(0),
        properties,
        headers,
        deaths,
        payload_kind,
        payload,
        truncated,
        outdated: None,
    };
    if page.hidden.is_some() {
        // A framework's readable arguments are the payload too.
        page.row.app.clear();
    }
    page
}

async fn download(
    State(state): State<AppState>,
    me: super::Me,
    Path((broker, vhost, queue, position)): Path<(String, String, String, usize)>,
) -> Result<Response, PageError> {
    let role = super::restricted::role_of(&me);
    super::restricted::require(&state, role, (&broker, &vhost, &queue), "the payload")?;
    let m = snapshot_message(&state, &broker, &vhost, &queue, position)?;
    let bytes = message::payload_bytes(&m.message);
    let truncated = (bytes.len() as u64) < m.payload_bytes;
    Ok((
        [
            (header::CONTENT_TYPE, "application/octet-stream".to_string()),
            (header::CONTENT_DISPOSITION, format!("attachment; filename=\"message-{position}.bin\"")),
            (header::HeaderName::from_static("x-warren-truncated"), truncated.to_string()),
        ],
        bytes,
    )
        .into_response())
}

/// The requeue form's fields; `position` repeats, which a plain `Form` cannot read.
pub struct RequeueForm {
    positions: Vec<usize>,
    /// Fingerprints of snapshot messages (`message=`, what the page's checkboxes send).
    messages: Vec<String>,
    scope: Scope,
    target: FormTarget,
    target_queue: String,
    /// The browser's filter, for "all matching".
    filter: message::Filter,
    confirmed: bool,
    /// The user accepts that a target which drops its oldest messages when full may drop some.
    accept_drop_head: bool,
}

#[derive(Clone, Copy, PartialEq)]
enum Scope {
    Selected,
    All,
    Matching,
    DeleteSelected,
    Purge,
}

impl Scope {
    fn as_str(self) -> &'static str {
        match self {
            Scope::Selected => "selected",
            Scope::All => "all",
            Scope::Matching => "matching",
            Scope::DeleteSelected => "delete-selected",
            Scope::Purge => "purge",
        }
    }
}

#[derive(Clone, Copy, PartialEq)]
enum FormTarget {
    OriginalQueue,
    OriginalExchange,
    Queue,
}

impl FormTarget {
    fn as_str(self) -> &'static str {
        match self {
            FormTarget::OriginalQueue => "original-queue",
            FormTarget::OriginalExchange => "original-exchange",
            FormTarget::Queue => "queue",
        }
    }
}

pub fn parse_requeue_form(body: &str) -> Result<RequeueForm, WebError> {
    let mut form = RequeueForm {
        positions: Vec::new(),
        messages: Vec::new(),
        scope: Scope::Selected,
        target: FormTarget::OriginalQueue,
        target_queue: String::new(),
        filter: message::Filter::default(),
        confirmed: false,
        accept_drop_head: false,
    };
    let mut target = None;
    for (key, value) in super::query::form_pairs(body) {
        match key.as_str() {
            "position" => form
                .positions
                .push(value.parse().map_err(|_| WebError::BadRequest(format!("position: {value:?} is not a number")))?),
            "message" => form.messages.push(value),
            "scope" => {
                form.scope = match value.as_str() {
                    "selected" => Scope::Selected,
                    "all" => Scope::All,
                    "matching" => Scope::Matching,
                    "delete-selected" => Scope::DeleteSelected,
                    "purge" => Scope::Purge,
                    other => return Err(WebError::BadRequest(format!("scope: {other:?} is not an action"))),
                }
            }
            "target" => {
                target = Some(match value.as_str() {
                    "original-queue" => FormTarget::OriginalQueue,
                    "original-exchange" => FormTarget::OriginalExchange,
                    "queue" => FormTarget::Queue,
                    other => return Err(WebError::BadRequest(format!("target: {other:?} is not a target"))),
                })
            }
            "target_queue" => form.target_queue = value.trim().to_string(),
            key if key.starts_with("filter_") => {
                form.filter.set_form_field(key, value);
            }
            "confirm" => form.confirmed = value == "true",
            "accept_drop_head" => form.accept_drop_head = value == "true",
            _ => {}
        }
    }
    // A queue name typed in without choosing "a queue I name" still means that queue.
    form.target =
        target.unwrap_or(if form.target_queue.is_empty() { FormTarget::OriginalQueue } else { FormTarget::Queue });
    if form.target == FormTarget::Queue && form.target_queue.is_empty() {
        return Err(WebError::BadRequest("target_queue: name the queue to move the messages to".to_string()));
    }
    if matches!(form.scope, Scope::Selected | Scope::DeleteSelected)
        && form.positions.is_empty()
        && form.messages.is_empty()
    {
        return Err(WebError::BadRequest("select at least one message, or requeue all".to_string()));
    }
    if form.scope == Scope::Matching && form.filter.is_empty() {
        return Err(WebError::BadRequest("set a filter first, or requeue all".to_string()));
    }
    form.filter.check().map_err(WebError::BadRequest)?;
    Ok(form)
}

#[derive(Template)]
#[template(path = "dlq_action.html")]
struct ActionPage {
    me: super::Me,
    action: &'static str,
    name: String,
    back_href: String,
    what: String,
    target: String,
    duplicates_warning: bool,
    /// What the confirmation says about the queues the messages would go to.
    target_notes: Vec<TargetNote>,
    form: FormEcho,
    /// Set once the action ran (purge) or was refused.
    outcome: Option<String>,
    error: Option<String>,
}

/// The form's fields, posted back unchanged by the confirmation.
struct FormEcho {
    positions: Vec<usize>,
    messages: Vec<String>,
    scope: &'static str,
    target: &'static str,
    target_queue: String,
    /// The filter, as `filter_<name>` fields.
    filter_fields: Vec<(String, String)>,
}

/// Something the confirmation says about a target queue before anything moves (issue 16,
/// must-have 3): it does not exist, nobody consumes it, it is a wait queue that dead-letters
/// elsewhere, or it drops its oldest messages when full.
struct TargetNote {
    queue: String,
    says: String,
    /// A queue to send them to instead (where the wait queue dead-letters to).
    instead: Option<String>,
    /// Moving there needs the drop-head risk accepted (the checkbox).
    drop_head: bool,
    /// Copies would stay there for good (`target::stranding`): confirming the page, which says
    /// so, accepts that.
    strands: bool,
}

/// The queues a move would put messages into, as far as is known before it reads any: a named
/// queue, or the queues the snapshot shows the chosen messages to have died in last (for the
/// original queue; without a snapshot none are known yet). The confirmation page and the API
/// both check these (`target::stranding`).
pub(super) async fn target_queue_names(
    state: &AppState,
    view: &crate::metrics::QueueView,
    target: &Target,
    choice: &Choice,
) -> Result<Vec<String>, WebError> {
    match target {
        Target::Queue(name) => Ok(vec![name.clone()]),
        Target::OriginalExchange | Target::Discard => Ok(Vec::new()),
        Target::OriginalQueue => {
            let Some(snapshot) = state.snapshots.get(&view.broker, &view.vhost, &view.name) else {
                return Ok(Vec::new());
            };
            let matched = match choice {
                Choice::Matching(filter) => snapshot_matches(&snapshot, filter, &state.matchers.request()).await?,
                _ => Vec::new(),
            };
            let chosen = |(i, m): &(usize, &message::SnapshotMessage)| match choice {
                Choice::Positions(positions) => positions.contains(&m.position),
                Choice::Messages(fingerprints) => fingerprints.contains(&m.fingerprint),
                Choice::Matching(_) => matched[*i],
                Choice::All => true,
            };
            let mut names: Vec<String> = snapshot
                .messages
                .iter()
                .enumerate()
                .filter(chosen)
                .filter_map(|(_, m)| m.original_queue.clone())
                .collect();
            names.sort();
            names.dedup();
            Ok(names)
        }
    }
}

/// The queues of the vhost of `view` as the last poll saw them, by name.
fn last_polled(state: &AppState, view: &crate::metrics::QueueView, name: &str) -> Option<crate::metrics::QueueView> {
    let live = state.live.snapshot();
    let broker = live.iter().find(|b| *b.name == *view.broker)?;
    broker.queues.iter().find(|q| *q.vhost == *view.vhost && *q.name == *name).cloned()
}

/// The moves into `names` that would strand their messages (`target::stranding`), as the last
/// poll saw those queues.
pub(super) fn strandings(
    state: &AppState,
    view: &crate::metrics::QueueView,
    names: &[String],
) -> Vec<crate::dlq::target::Stranding> {
    names
        .iter()
        .filter_map(|n| last_polled(state, view, n))
        .filter_map(|q| crate::dlq::target::stranding(view, &q))
        .collect()
}

/// The notes about each queue the selected messages would go to: a named queue, or the queues
/// the snapshot shows them to have died in. From the last poll: the move checks again, as it
/// goes, with the broker's answer of that moment.
async fn target_notes(
    state: &AppState,
    view: &crate::metrics::QueueView,
    form: &RequeueForm,
) -> Result<Vec<TargetNote>, WebError> {
    let request = move_request(form);
    let targets = target_queue_names(state, view, &request.target, &request.selection).await?;
    let mut notes = Vec::new();
    for name in targets {
        let Some(q) = last_polled(state, view, &name) else {
            notes.push(TargetNote {
                says: "does not exist (as of the last poll): messages that would go there fail and stay here".into(),
                queue: name,
                instead: None,
                drop_head: false,
                strands: false,
            });
            continue;
        };
        if let crate::broker::policies::Overflow::DropHead { limit } =
            crate::broker::policies::overflow_of(&q.arguments, &q.effective_policy)
        {
            notes.push(TargetNote {
                queue: name.clone(),
                says: format!(
                    "holds {limit} and drops its oldest messages when full: the broker confirms each copy and may \
                     then drop messages, these or others. Tick the box to accept that risk"
                ),
                instead: None,
                drop_head: true,
                strands: false,
            });
        }
        if let Some(stranding) = crate::dlq::target::stranding(view, &q) {
            notes.push(TargetNote {
                queue: name.clone(),
                says: stranding.says,
                instead: stranding.instead,
                drop_head: false,
                strands: true,
            });
        } else if q.consumers == Some(0) {
            notes.push(TargetNote {
                queue: name.clone(),
                says: "has no consumer now: the messages will wait there until one comes".into(),
                instead: None,
                drop_head: false,
                strands: false,
            });
        }
    }
    Ok(notes)
}

/// The move the form asks for (the confirmation page posts it back with `confirm=true`).
fn move_request(form: &RequeueForm) -> MoveRequest {
    MoveRequest {
        selection: match form.scope {
            Scope::All => Choice::All,
            Scope::Matching => Choice::Matching(Box::new(form.filter.clone())),
            // The page's checkboxes name messages by identity; a hand-written form may still
            // give positions, which mean the current snapshot's.
            _ if !form.messages.is_empty() => Choice::Messages(form.messages.clone()),
            _ => Choice::Positions(form.positions.clone()),
        },
        target: match (form.scope, form.target) {
            (Scope::DeleteSelected, _) => Target::Discard,
            (_, FormTarget::OriginalQueue) => Target::OriginalQueue,
            (_, FormTarget::OriginalExchange) => Target::OriginalExchange,
            (_, FormTarget::Queue) => Target::Queue(form.target_queue.clone()),
        },
        // Ticked on the confirmation page, which states the risk.
        accept_drop_head: form.accept_drop_head,
        // Set by the confirmation when its notes said where copies would stay for good.
        accept_stranding: false,
    }
}

/// The selected messages as the confirmation names them: by their place in the snapshot and
/// their message id.
fn selected_in_words(state: &AppState, view: &crate::metrics::QueueView, form: &RequeueForm) -> String {
    let snapshot = state.snapshots.get(&view.broker, &view.vhost, &view.name);
    let messages = snapshot.as_ref().map(|s| s.messages.as_slice()).unwrap_or_default();
    let id = |m: &SnapshotMessage| format!("{} (id {})", m.position, m.message_id.as_deref().unwrap_or("none"));
    let mut named: Vec<String> = Vec::new();
    for position in &form.positions {
        named.push(match messages.iter().find(|m| m.position == *position) {
            Some(m) => id(m),
            None => format!("{position} (not in the snapshot)"),
        });
    }
    for fingerprint in &form.messages {
        named.push(match messages.iter().find(|m| &m.fingerprint == fingerprint) {
            Some(m) => id(m),
            None => "one no longer in the snapshot".to_string(),
        });
    }
    match named.as_slice() {
        [one] => format!("the message at position {one} of the snapshot"),
        _ => format!("the {} messages at positions {} of the snapshot", named.len(), named.join(", ")),
    }
}

async fn requeue_form(
    State(state): State<AppState>,
    access: super::Access,
    Path((broker, vhost, queue)): Path<(String, String, String)>,
    body: String,
) -> Result<Response, PageError> {
    let view = find_queue(&state, &broker, &vhost, &queue).await?;
    let form = parse_requeue_form(&body)?;
    if form.scope == Scope::Matching {
        // Before the confirmation, which names the queues the matching messages died in.
        super::restricted::check_filter(&state, access.principal.role, (&broker, &vhost, &queue), &form.filter)?;
    }
    let deletes = matches!(form.scope, Scope::Purge | Scope::DeleteSelected);
    let mut page = ActionPage {
        me: super::Me::of(&access),
        action: match form.scope {
            Scope::Purge => "Purge",
            Scope::DeleteSelected => "Delete",
            _ if form.target == FormTarget::Queue => "Move",
            _ => "Requeue",
        },
        name: queue.clone(),
        back_href: dlq_href(&broker, &vhost, &queue),
        what: match form.scope {
            Scope::All | Scope::Purge => "every message".to_string(),
            Scope::Matching => format!("every message matching {}", form.filter.describe()),
            Scope::Selected | Scope::DeleteSelected => selected_in_words(&state, &view, &form),
        },
        target: if deletes {
            "nowhere: they are deleted for good".to_string()
        } else {
            match form.target {
                FormTarget::OriginalQueue => {
                    "the queue each message last died in (its newest x-death entry)".to_string()
                }
                FormTarget::OriginalExchange => {
                    "the exchange each message was first published to, with its original routing key".to_string()
                }
                FormTarget::Queue => format!("queue {:?}", form.target_queue),
            }
        },
        duplicates_warning: !deletes && form.target == FormTarget::OriginalExchange,
        target_notes: if deletes { Vec::new() } else { target_notes(&state, &view, &form).await? },
        form: FormEcho {
            positions: form.positions.clone(),
            messages: form.messages.clone(),
            scope: form.scope.as_str(),
            target: form.target.as_str(),
            target_queue: form.target_queue.clone(),
            filter_fields: form.filter.form_fields(),
        },
        outcome: None,
        error: None,
    };
    // Every action asks first; the confirmation page posts the same form back with confirm=true.
    if !form.confirmed {
        return Ok(html(page.render()?));
    }
    if form.scope == Scope::Purge {
        let (_, outcome) = super::actions::run_purge(&state, &view, &access.principal.actor()).await?;
        match outcome {
            Ok(n) => page.outcome = Some(format!("done, {n} messages deleted")),
            Err(e) => {
                page.outcome = Some("failed".to_string());
                page.error = Some(e.to_string());
            }
        }
        return Ok(html(page.render()?));
    }
    let mut request = move_request(&form);
    // The page stated it (`target_notes`), and the user confirmed.
    request.accept_stranding = page.target_notes.iter().any(|n| n.strands);
    match super::actions::start_move(&state, &view, request, &access.principal.actor()).await? {
        // The job page shows the progress, a cancel button, and the final report.
        Ok(job) => Ok(Redirect::to(&state.href(&format!("/jobs/{}", job.id))).into_response()),
        Err(e) => {
            page.outcome = Some("refused".to_string());
            page.error = Some(e.to_string());
            Ok((StatusCode::UNPROCESSABLE_ENTITY, html(page.render()?)).into_response())
        }
    }
}
