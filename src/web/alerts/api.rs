//! Alerts in the JSON API: rules (create, edit, delete, preview, export as config), the alerts
//! pending and firing now, their history, and silences. Rules declared in the config file are
//! listed but read-only. What the page does too is in `rules.rs`.

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::rules::{
    add_silence, check_rule, end_silence, find_rule, preview, remove_rule, save_existing_rule, save_new_rule, send_test,
};
use crate::alerts::store::{self, Silence, Source, StoredRule};
use crate::alerts::{notify, Rule};
use crate::state::AppState;
use crate::web::error::{ApiError, WebError};
use crate::web::firing::{current_alerts, AlertView};
use crate::web::identity::Access;
use crate::web::query::{PageAt, Paged, Paging};

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/api/v1/alerts", get(current))
        .route("/api/v1/alerts/history", get(history))
        .route("/api/v1/alerts/rules", get(rules).post(create_rule))
        .route("/api/v1/alerts/rules/export", get(export))
        .route("/api/v1/alerts/rules/preview", post(preview_json))
        .route("/api/v1/alerts/rules/{id}", get(one_rule).post(update_rule))
        .route("/api/v1/alerts/rules/{id}/delete", post(delete_rule))
        .route("/api/v1/silences", get(silences).post(create_silence))
        .route("/api/v1/silences/{id}/expire", post(expire_silence))
        .route("/api/v1/notifications/channels", get(channels))
        .route("/api/v1/notifications/channels/{id}/test", post(test_channel))
        .route("/api/v1/notifications/deliveries", get(deliveries))
}

/// The configured channels, masked: no URL path, token or password.
async fn channels(State(state): State<AppState>) -> Json<Vec<notify::ChannelView>> {
    Json(state.notifier.channels().iter().map(notify::NotificationChannel::view).collect())
}

async fn test_channel(
    State(state): State<AppState>,
    access: Access,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    match send_test(&state, &id, &access.principal.actor()).await? {
        Ok(status) => Ok(Json(json!({"outcome": "sent", "http_status": status})).into_response()),
        Err(error) => Ok((
            StatusCode::BAD_GATEWAY,
            Json(json!({"outcome": "failed", "error": {"code": "delivery_failed", "message": error}})),
        )
            .into_response()),
    }
}

async fn deliveries(State(state): State<AppState>, Query(q): Query<Limit>) -> Result<Response, ApiError> {
    let db = &state.store;
    match q.page()? {
        Some(at) => {
            let read = notify::deliveries_before(db, at.cursor, at.limit as i64 + 1).await?;
            Ok(Json(Paged::from_one_more(read, at.limit, |d| d.id)).into_response())
        }
        None => Ok(Json(notify::recent_deliveries(db, q.old_limit()?).await?).into_response()),
    }
}

pub use crate::web::error::parse;

async fn rules(State(state): State<AppState>) -> Result<Json<Vec<StoredRule>>, ApiError> {
    Ok(Json(store::all_rules(&state.config_rules, &state.store).await?))
}

async fn one_rule(State(state): State<AppState>, Path(id): Path<String>) -> Result<Json<StoredRule>, ApiError> {
    Ok(Json(find_rule(&state, &id).await?))
}

async fn create_rule(State(state): State<AppState>, access: Access, body: Bytes) -> Result<Response, ApiError> {
    let rule: Rule = parse(&body)?;
    save_new_rule(&state, &rule, &access.principal.actor()).await?;
    Ok((StatusCode::CREATED, Json(StoredRule { rule, source: Source::Api })).into_response())
}

async fn update_rule(
    State(state): State<AppState>,
    access: Access,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<Json<StoredRule>, ApiError> {
    let rule: Rule = parse(&body)?;
    save_existing_rule(&state, &id, &rule, &access.principal.actor()).await?;
    Ok(Json(StoredRule { rule, source: Source::Api }))
}

async fn delete_rule(
    State(state): State<AppState>,
    access: Access,
    Path(id): Path<String>,
) -> Result<Json<serde_json::Value>, ApiError> {
    if !remove_rule(&state, &id, &access.principal.actor()).await? {
        return Err(WebError::NotFound(format!("no alert rule with id {id:?}")).into());
    }
    Ok(Json(json!({"deleted": id})))
}

/// Every rule in the config file's format (`[[alerts]]` tables), to move rules made in the UI
/// into configuration as code.
async fn export(State(state): State<AppState>) -> Result<Response, ApiError> {
    // The built-in rule is not exported: it exists whenever no broker_unreachable rule does.
    let rules: Vec<Rule> = store::all_rules(&state.config_rules, &state.store)
        .await?
        .into_iter()
        .filter(|r| r.source != Source::Builtin)
        .map(|r| r.rule)
        .collect();
    #[derive(Serialize)]
    struct File {
        alerts: Vec<Rule>,
    }
    let text = toml::to_string(&File { alerts: rules })
        .map_err(|e| WebError::BadRequest(format!("cannot export the rules as TOML: {e}")))?;
    Ok(([(header::CONTENT_TYPE, "application/toml; charset=utf-8")], text).into_response())
}

async fn preview_json(State(state): State<AppState>, body: Bytes) -> Result<Json<serde_json::Value>, ApiError> {
    let rule: Rule = parse(&body)?;
    check_rule(&state, &rule)?;
    let rows = preview(&state, &rule);
    Ok(Json(json!({"matches": rows.len(), "holding": rows.iter().filter(|r| r.holds).count(), "queues": rows})))
}

async fn current(State(state): State<AppState>) -> Result<Json<Vec<AlertView>>, ApiError> {
    Ok(Json(current_alerts(&state).await?))
}

/// `?cursor=&limit=` of the alert history and the delivery log, newest first.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
pub struct Limit {
    /// The `next_cursor` of the page before (empty: the newest page). With `cursor` the answer
    /// is the `{"items", "next_cursor", "limit"}` envelope; without it, for one release more, a
    /// bare array of the newest `limit` (default 200, up to 5000).
    cursor: Option<String>,
    /// Entries per page: 1 to 500 (default 100).
    limit: Option<String>,
}

impl Limit {
    /// The page asked for, when the request pages by cursor.
    fn page(&self) -> Result<Option<PageAt>, WebError> {
        let paging = Paging { cursor: self.cursor.clone(), limit: self.limit.clone() };
        paging.cursor_given().then(|| paging.validate()).transpose()
    }

    /// The deprecated `limit` of a bare array: 1 to 5000 (larger is taken as 5000), 200 unless
    /// given, as it always was; not a number is a 400 (it was one before, from the framework).
    fn old_limit(&self) -> Result<i64, WebError> {
        match self.limit.as_deref().map(str::trim).filter(|l| !l.is_empty()) {
            None => Ok(200),
            Some(text) => text.parse::<i64>().map(|n| n.clamp(1, 5000)).map_err(|_| {
                WebError::BadRequest(format!("limit: {:?} is not a whole number", crate::auth::shorten(text)))
            }),
        }
    }
}

async fn history(State(state): State<AppState>, Query(q): Query<Limit>) -> Result<Response, ApiError> {
    let db = &state.store;
    match q.page()? {
        Some(at) => {
            let read = store::history(db, at.cursor, at.limit as i64 + 1).await?;
            Ok(Json(Paged::from_one_more(read, at.limit, |e| e.id)).into_response())
        }
        None => Ok(Json(store::history(db, None, q.old_limit()?).await?).into_response()),
    }
}

async fn silences(State(state): State<AppState>) -> Result<Json<Vec<Silence>>, ApiError> {
    Ok(Json(store::silences(&state.store, false).await?))
}

async fn create_silence(State(state): State<AppState>, access: Access, body: Bytes) -> Result<Response, ApiError> {
    let silence: Silence = parse(&body)?;
    let silence = add_silence(&state, silence, &access.principal.actor()).await?;
    Ok((StatusCode::CREATED, Json(silence)).into_response())
}

async fn expire_silence(
    State(state): State<AppState>,
    access: Access,
    Path(id): Path<i64>,
) -> Result<Json<serde_json::Value>, ApiError> {
    if !end_silence(&state, id, &access.principal.actor()).await? {
        return Err(WebError::NotFound(format!("no silence with id {id}")).into());
    }
    Ok(Json(json!({"expired": id})))
}
