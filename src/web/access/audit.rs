//! The audit log as a page (`/audit`) and in the JSON API (`/api/v1/audit`): one kind or all,
//! newest first, paged by entry id through the whole log, account names for admins only.
//!
//! The API pages as every list does (`?cursor=&limit=`, answering `{"items", "next_cursor",
//! "limit"}`). Without `cursor` or `limit` it answers, for one release more, a JSON array as it
//! always has, with the pages around it in a `Link` header (`rel="next"` older, `rel="prev"`
//! newer, `rel="first"` the newest), so scripts that read the array keep working.

use axum::extract::{Query, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde::Deserialize;

use crate::audit::{self, Kind, Listing, Page, Record};
use crate::auth::{shorten, Role};
use crate::state::AppState;
use crate::web::error::ApiError;
use crate::web::error::WebError;
use crate::web::error_page::PageError;
use crate::web::htmx::html;
use crate::web::htmx::is_htmx;
use crate::web::identity::Access;
use crate::web::identity::Me;
use crate::web::query::Paged;
// The templates' own filters (`|ident`).
use crate::web::format::filters;

/// Entries per page unless asked otherwise.
pub const DEFAULT_PER_PAGE: i64 = 100;
/// The most entries one page may ask for (a bulk move's entry alone can list 100,000 ids).
pub const MAX_PER_PAGE: i64 = 500;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/api/v1/audit", get(audit_api))
        .route("/api/v1/audit/{id}/messages", get(messages_api))
        .route("/audit", get(audit_page))
}

/// `?kind=&cursor=&limit=` (and, deprecated, `before=&after=&per_page=`), as text so that a bad
/// value gets a 400 that says why.
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
pub struct AuditQuery {
    /// `action`, `login`, `account`, `alerts`, or `all` (the default).
    kind: Option<String>,
    /// The `next_cursor` of the page before (empty: the newest page). With `cursor` or `limit`
    /// the answer is the `{"items", "next_cursor", "limit"}` envelope.
    cursor: Option<String>,
    /// Entries per page: 1 to 500 (default 100).
    limit: Option<String>,
    /// Deprecated (kept for one release): entries older than this id; use `cursor`.
    before: Option<String>,
    /// Deprecated (kept for one release): entries newer than this id.
    after: Option<String>,
    /// Deprecated (kept for one release): as `limit`.
    per_page: Option<String>,
}

fn given(value: &Option<String>) -> Option<&str> {
    value.as_deref().map(str::trim).filter(|v| !v.is_empty())
}

impl AuditQuery {
    /// Whether the request pages as every list does (`cursor` or `limit`), rather than with
    /// the deprecated `before`/`after`/`per_page` and a bare array.
    fn pages_by_cursor(&self) -> bool {
        self.cursor.is_some() || given(&self.limit).is_some()
    }

    fn validate(&self) -> Result<Page, WebError> {
        let kind = match given(&self.kind) {
            None | Some("all") => None,
            Some(text) => Some(Kind::parse(text).ok_or_else(|| {
                WebError::BadRequest(format!(
                    "kind: {:?} is not one of all, action, login, account, alerts",
                    shorten(text)
                ))
            })?),
        };
        let id = |field: &str, value: &Option<String>| -> Result<Option<i64>, WebError> {
            given(value)
                .map(|text| {
                    text.parse::<i64>().ok().filter(|id| *id >= 1).ok_or_else(|| {
                        WebError::BadRequest(format!("{field}: {:?} is not an entry id (from 1)", shorten(text)))
                    })
                })
                .transpose()
        };
        if self.pages_by_cursor() {
            if [&self.before, &self.after, &self.per_page].into_iter().any(|v| given(v).is_some()) {
                return Err(WebError::BadRequest(
                    "before, after and per_page (deprecated) or cursor and limit: not both".to_string(),
                ));
            }
            let paging = crate::web::query::Paging { cursor: self.cursor.clone(), limit: self.limit.clone() };
            let at = paging.validate()?;
            return Ok(Page { kind, before: at.cursor, after: None, per_page: at.limit as i64 });
        }
        let (before, after) = (id("before", &self.before)?, id("after", &self.after)?);
        if before.is_some() && after.is_some() {
            return Err(WebError::BadRequest("before and after: give one of them, not both".to_string()));
        }
        let per_page = match given(&self.per_page) {
            None => DEFAULT_PER_PAGE,
            Some(text) => text.parse::<i64>().ok().filter(|n| (1..=MAX_PER_PAGE).contains(n)).ok_or_else(|| {
                WebError::BadRequest(format!(
                    "per_page: {:?} is not a whole number from 1 to {MAX_PER_PAGE}",
                    shorten(text)
                ))
            })?,
        };
        Ok(Page { kind, before, after, per_page })
    }
}

/// Reads the page asked for, with account names hidden unless the caller is an admin, and
/// what the caller's role may not read of a queue left out (`restricted::audit_record`).
async fn read(state: &AppState, page: &Page, role: Role, own_actor: &str) -> Result<Listing, WebError> {
    let mut listing = audit::list(&state.store, page).await?;
    if !role.allows(Role::Admin) {
        listing.records.iter_mut().for_each(|r| r.hide_account_names(own_actor));
    }
    listing.records.iter_mut().for_each(|r| crate::web::restricted::audit_record(state, role, r));
    Ok(listing)
}

/// A link to another page of the same view.
fn href(path: &str, page: &Page, cursor: Option<(&str, i64)>) -> String {
    let mut pairs: Vec<String> = Vec::new();
    if let Some(kind) = page.kind {
        pairs.push(format!("kind={}", kind.as_str()));
    }
    if let Some((name, id)) = cursor {
        pairs.push(format!("{name}={id}"));
    }
    if page.per_page != DEFAULT_PER_PAGE {
        pairs.push(format!("per_page={}", page.per_page));
    }
    if pairs.is_empty() {
        path.to_string()
    } else {
        format!("{path}?{}", pairs.join("&"))
    }
}

/// Where the pages around this one are: (newest, newer, older), each only where there is one.
fn neighbours(path: &str, page: &Page, listing: &Listing) -> (Option<String>, Option<String>, Option<String>) {
    let newer = listing.newer.map(|id| href(path, page, Some(("after", id))));
    let newest = newer.as_ref().map(|_| href(path, page, None));
    let older = listing.older.map(|id| href(path, page, Some(("before", id))));
    (newest, newer, older)
}

async fn audit_api(
    State(state): State<AppState>,
    access: Access,
    Query(query): Query<AuditQuery>,
) -> Result<Response, ApiError> {
    let page = query.validate()?;
    let listing = read(&state, &page, access.principal.role, &access.principal.actor()).await?;
    if query.pages_by_cursor() {
        // An entry's id is its cursor: the next page is the entries below the last one.
        let next_cursor = listing.older.map(|id| id.to_string());
        let limit = page.per_page as usize;
        return Ok(Json(Paged { items: listing.records, next_cursor, limit }).into_response());
    }
    let (newest, newer, older) = neighbours(&state.href("/api/v1/audit"), &page, &listing);
    let links: Vec<String> = [(older, "next"), (newer, "prev"), (newest, "first")]
        .into_iter()
        .filter_map(|(url, rel)| url.map(|url| format!("<{url}>; rel=\"{rel}\"")))
        .collect();
    let mut response = Json(listing.records).into_response();
    if !links.is_empty() {
        let value = links.join(", ").parse().expect("links are ASCII: paths and numbers");
        response.headers_mut().insert(header::LINK, value);
    }
    Ok(response)
}

/// What became of each message of one move: moved (and where), failed (and why), held or not
/// found, as checkpointed while it ran and recorded when it ended.
async fn messages_api(
    State(state): State<AppState>,
    access: Access,
    axum::extract::Path(id): axum::extract::Path<i64>,
) -> Result<Json<Vec<crate::dlq::fates::MessageRecord>>, ApiError> {
    let Some(record) = crate::audit::get(&state.store, id).await? else {
        return Err(WebError::NotFound(format!("no audit entry {id}")).into());
    };
    if crate::web::restricted::ids_hidden(&state, access.principal.role, &record) {
        let queue = (record.broker.as_str(), record.vhost.as_str(), record.queue.as_str());
        crate::web::restricted::require(&state, access.principal.role, queue, "the messages a content filter chose")?;
    }
    Ok(Json(crate::dlq::fates::messages(&state.store, id).await?))
}

struct AuditRow {
    at: String,
    actor: String,
    action: String,
    broker: String,
    vhost: String,
    queue: String,
    outcome: String,
    outcome_class: &'static str,
    /// Moved and failed messages: broker actions only.
    moved: String,
    failed: String,
    message_ids: String,
    detail: String,
    /// Where the messages were sent, as the request named it.
    to: String,
    /// The job's page (moves and replays): its report message by message.
    job_href: Option<String>,
}

/// Where an action's request sent the messages, in words (`Target` and `CustodyTarget` as
/// serde writes them).
fn destination(action: &str, request: &serde_json::Value) -> String {
    if action == "purge" || action == "delete" {
        return "nowhere (deleted)".to_string();
    }
    match request.get("target") {
        Some(serde_json::Value::String(t)) if t == "original_queue" => "each message's original queue".to_string(),
        Some(serde_json::Value::String(t)) if t == "original_exchange" => {
            "each message's original exchange and routing key".to_string()
        }
        Some(serde_json::Value::String(t)) if t == "discard" => "nowhere (deleted)".to_string(),
        Some(serde_json::Value::Object(o)) => match o.get("queue").and_then(|q| q.as_str()) {
            Some(queue) => format!("queue {queue}"),
            None => String::new(),
        },
        _ => String::new(),
    }
}

/// One of the page's kind filters.
struct KindLink {
    label: &'static str,
    href: String,
    active: bool,
}

#[derive(askama::Template)]
#[template(path = "audit.html")]
struct AuditPage {
    me: Me,
    kinds: Vec<KindLink>,
    fragment: String,
}

/// The entries of one page. The newest page (of any kind) refreshes itself, so a new entry
/// appears at its top; an older page stays still, since new entries would shift what it holds.
#[derive(askama::Template)]
#[template(path = "audit_entries.html")]
struct AuditEntries {
    /// The base path, before every URL (`AppState::base_path`).
    base: std::sync::Arc<str>,
    freshness: crate::web::freshness::Freshness,
    /// Where htmx asks for this page again; `None` for a page that stays still.
    live_href: Option<String>,
    rows: Vec<AuditRow>,
    newest_href: Option<String>,
    newer_href: Option<String>,
    older_href: Option<String>,
}

/// The first ids of a move and how many more: a bulk move records 100,000 of them, which the
/// API returns whole and the page does not.
fn shown_ids(ids: &serde_json::Value) -> String {
    const SHOWN: usize = 20;
    match ids.as_array() {
        Some(all) if all.len() > SHOWN => {
            let first: Vec<String> = all[..SHOWN].iter().map(|v| v.as_str().unwrap_or("?").to_string()).collect();
            format!("{} … and {} more (all in the API)", first.join(", "), all.len() - SHOWN)
        }
        Some(all) => all.iter().map(|v| v.as_str().unwrap_or("?").to_string()).collect::<Vec<_>>().join(", "),
        None => ids.to_string(),
    }
}

fn time(secs: i64) -> String {
    crate::web::format::time(chrono::DateTime::from_timestamp(secs, 0))
}

/// What the Detail column says: for a login, where from and (failures) how many; for an
/// account change, what it was about (from its request, whose names are hidden from
/// non-admins); for a change to the alerts' settings, what it changed, as recorded.
fn detail(r: &Record) -> String {
    let recorded = r.detail.clone().unwrap_or_default();
    match r.kind {
        Kind::Action => recorded,
        Kind::Login => {
            let from = r.source.as_deref().unwrap_or("an unknown address");
            if r.outcome == "done" {
                return format!("from {from}");
            }
            let attempts = if r.attempts == 1 { "1 attempt".to_string() } else { format!("{} attempts", r.attempts) };
            let until = r.last_at.filter(|last| *last != r.at).map(|last| format!(" until {}", time(last)));
            let throttled = match r.throttled {
                0 => String::new(),
                n => format!(", {n} of them refused by the throttle"),
            };
            format!("{attempts} from {from}{}{throttled}", until.unwrap_or_default())
        }
        Kind::Account => account_change(&r.action, &r.request).unwrap_or(recorded),
        Kind::Alerts => recorded,
    }
}

/// An account change in words ("token 'ci' (viewer) created"); `None` for a request of
/// another shape. Never a password or a token: the requests hold neither.
fn account_change(action: &str, request: &serde_json::Value) -> Option<String> {
    let field = |key: &str| request.get(key).map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_string));
    let name = field("name");
    let role = field("role").map(|r| format!(" ({r})")).unwrap_or_default();
    let id = field("id");
    Some(match action {
        "user add" => format!("user '{}'{role} added", name?),
        "user remove" => format!("user '{}' removed", name?),
        "user password" => format!("password of user '{}' changed", name?),
        "user role" => format!("user '{}' made {}", name?, field("role")?),
        "token add" => match (name, id) {
            (Some(name), Some(id)) => format!("token '{name}'{role} created, id {id}"),
            (Some(name), None) => format!("token '{name}'{role} created"),
            _ => return None,
        },
        "token revoke" => format!("token {} revoked", id?),
        _ => return None,
    })
}

fn row(r: Record) -> AuditRow {
    let action = r.kind == Kind::Action;
    let to = if action { destination(&r.action, &r.request) } else { String::new() };
    let moves = ["move", "requeue", "delete", "custody replay", "custody release"];
    let job_href = (action && moves.contains(&r.action.as_str())).then(|| format!("/jobs/{}", r.id));
    let count = |n: i64| if action { n.to_string() } else { String::new() };
    AuditRow {
        at: time(r.at),
        outcome_class: match r.outcome.as_str() {
            "done" => "info",
            "failed" => "bad",
            _ => "warn",
        },
        detail: detail(&r),
        moved: count(r.moved),
        failed: count(r.failed),
        message_ids: if action { shown_ids(&r.message_ids) } else { String::new() },
        to,
        job_href,
        actor: r.actor,
        action: r.action,
        broker: r.broker,
        vhost: r.vhost,
        queue: r.queue,
        outcome: r.outcome,
    }
}

async fn audit_page(
    State(state): State<AppState>,
    me: Me,
    headers: axum::http::HeaderMap,
    Query(query): Query<AuditQuery>,
) -> Result<Response, PageError> {
    use crate::web::freshness::{Freshness, REFRESH_SECS};
    let page = query.validate()?;
    let listing = read(&state, &page, crate::web::restricted::role_of(&me), &me.name).await?;
    let (newest_href, newer_href, older_href) = neighbours("/audit", &page, &listing);
    let newest = page.before.is_none() && page.after.is_none();
    let entries = AuditEntries {
        base: state.base_path.clone(),
        freshness: if newest {
            Freshness::rendered(REFRESH_SECS)
        } else {
            Freshness::still("This is an older page and does not refresh itself; the newest page does.")
        },
        live_href: newest.then(|| href("/audit", &page, None)),
        rows: listing.records.into_iter().map(row).collect(),
        newest_href,
        newer_href,
        older_href,
    };
    let fragment = askama::Template::render(&entries)?;
    if is_htmx(&headers) {
        return Ok(html(fragment));
    }
    let filters = [
        (None, "all"),
        (Some(Kind::Action), "actions"),
        (Some(Kind::Login), "logins"),
        (Some(Kind::Account), "account changes"),
        (Some(Kind::Alerts), "alert settings"),
    ];
    let kinds = filters
        .into_iter()
        .map(|(kind, label)| KindLink {
            label,
            href: href("/audit", &Page { kind, before: None, after: None, ..page }, None),
            active: kind == page.kind,
        })
        .collect();
    let html = askama::Template::render(&AuditPage { me, kinds, fragment })?;
    Ok(crate::web::htmx::html(html))
}
