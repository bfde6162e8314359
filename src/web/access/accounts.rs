//! Accounts and API tokens (admin): the users and tokens in the JSON API and on the access
//! page, each change recorded in the audit log; and who the caller is (`GET /api/v1/me`).

use axum::extract::{Path, Query, State};
use axum::http::{header, StatusCode};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Form, Json, Router};
use serde::Deserialize;
use serde_json::json;

use super::login::auth_error;
use crate::auth::{self, AuthError, Role};
use crate::state::AppState;
use crate::web::error::{ApiError, WebError};
use crate::web::error_page::PageError;
use crate::web::identity::{Access, Me};

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/api/v1/me", get(me))
        .route("/api/v1/users", get(list_users).post(add_user))
        .route("/api/v1/users/{name}/delete", post(remove_user))
        .route("/api/v1/users/{name}/password", post(set_password))
        .route("/api/v1/users/{name}/role", post(set_role))
        .route("/api/v1/tokens", get(list_tokens).post(add_token))
        .route("/api/v1/tokens/{id}/revoke", post(revoke_token))
        .route("/access", get(access_page))
        .route("/access/users", post(add_user_form))
        .route("/access/users/{name}/delete", post(remove_user_form))
        .route("/access/users/{name}/role", post(set_role_form))
        .route("/access/tokens", post(add_token_form))
        .route("/access/tokens/{id}/revoke", post(revoke_token_form))
}

// ----- Accounts and tokens (JSON API, admin) -----

/// Who is asking (`GET /api/v1/me`).
#[derive(serde::Serialize, utoipa::ToSchema)]
pub struct MeJson {
    name: String,
    role: Role,
    via: auth::How,
    /// How the audit log names the caller (`token:<name>` for a token).
    actor: String,
    /// The session's CSRF token, for scripts that use a session: another site cannot read this
    /// answer (no CORS), so it gives nothing away.
    csrf_token: String,
}

async fn me(access: Access) -> Json<MeJson> {
    let p = &access.principal;
    Json(MeJson { name: p.name.clone(), role: p.role, via: p.via, actor: p.actor(), csrf_token: access.csrf })
}

async fn list_users(State(state): State<AppState>) -> Result<Json<serde_json::Value>, ApiError> {
    // A `User` is its name, role, creation time (with its RFC 3339 twin) and whether it is
    // disabled: what this answer always listed.
    let users = auth::list_users(&state.store).await.map_err(account_error)?;
    Ok(Json(json!({ "users": users })))
}

#[derive(Deserialize, utoipa::ToSchema)]
pub(crate) struct NewUser {
    name: String,
    role: Role,
    password: String,
}

/// Account errors are the admin's input problems (422/404/409), or storage errors.
fn account_error(e: AuthError) -> ApiError {
    ApiError(match e {
        AuthError::Db(e) => WebError::Database(e),
        AuthError::NoSuchUser(_) | AuthError::NoSuchToken(_) => WebError::NotFound(e.to_string()),
        AuthError::UserExists(_) | AuthError::TokenExists(_) | AuthError::LastAdmin(_) => {
            WebError::Conflict(e.to_string())
        }
        AuthError::InvalidName(_) => WebError::Invalid(vec![("name".into(), e.to_string())]),
        AuthError::Busy => WebError::Unavailable(e.to_string()),
        AuthError::PasswordTooShort | AuthError::PasswordTooLong => {
            WebError::Invalid(vec![("password".into(), e.to_string())])
        }
        other => WebError::BadRequest(other.to_string()),
    })
}

/// Records an account change in the audit log (kind `account`).
async fn audit_account(
    state: &AppState,
    access: &Access,
    action: &str,
    request: serde_json::Value,
) -> Result<(), ApiError> {
    crate::audit::account(&state.store, &access.principal.actor(), action, &request).await?;
    Ok(())
}

async fn add_user(
    State(state): State<AppState>,
    access: Access,
    Json(new): Json<NewUser>,
) -> Result<Response, ApiError> {
    auth::add_user(&state.store, &new.name, new.role, &new.password).await.map_err(account_error)?;
    audit_account(&state, &access, "user add", json!({"name": new.name, "role": new.role})).await?;
    Ok((StatusCode::CREATED, Json(json!({"name": new.name, "role": new.role}))).into_response())
}

async fn remove_user(
    State(state): State<AppState>,
    access: Access,
    Path(name): Path<String>,
) -> Result<Json<serde_json::Value>, ApiError> {
    auth::remove_user(&state.store, &name).await.map_err(account_error)?;
    audit_account(&state, &access, "user remove", json!({"name": name})).await?;
    Ok(Json(json!({"removed": name})))
}

#[derive(Deserialize, utoipa::ToSchema)]
pub(crate) struct NewRole {
    role: Role,
}

/// Changes a user's role; the last enabled admin keeps it (409).
async fn set_role(
    State(state): State<AppState>,
    access: Access,
    Path(name): Path<String>,
    Json(body): Json<NewRole>,
) -> Result<Json<serde_json::Value>, ApiError> {
    auth::set_role(&state.store, &name, body.role).await.map_err(account_error)?;
    audit_account(&state, &access, "user role", json!({"name": name, "role": body.role})).await?;
    Ok(Json(json!({"name": name, "role": body.role})))
}

#[derive(Deserialize, utoipa::ToSchema)]
pub(crate) struct NewPassword {
    password: String,
}

/// Sets a password and ends the user's sessions (whoever knew the old one is logged out).
async fn set_password(
    State(state): State<AppState>,
    access: Access,
    Path(name): Path<String>,
    Json(body): Json<NewPassword>,
) -> Result<Json<serde_json::Value>, ApiError> {
    // The password change ends the sessions itself, in its transaction: counting them after it
    // found none and answered `sessions_ended: 0`.
    let ended = auth::set_password(&state.store, &name, &body.password).await.map_err(account_error)?;
    audit_account(&state, &access, "user password", json!({"name": name})).await?;
    Ok(Json(json!({"name": name, "sessions_ended": ended})))
}

async fn list_tokens(State(state): State<AppState>) -> Result<Json<serde_json::Value>, ApiError> {
    let tokens = auth::list_tokens(&state.store).await.map_err(account_error)?;
    Ok(Json(json!({ "tokens": tokens })))
}

#[derive(Deserialize, utoipa::ToSchema)]
pub(crate) struct NewTokenRequest {
    name: String,
    role: Role,
}

/// Creates an API token; the answer is the only place the token is ever shown.
async fn add_token(
    State(state): State<AppState>,
    access: Access,
    Json(body): Json<NewTokenRequest>,
) -> Result<Response, ApiError> {
    let now = chrono::Utc::now().timestamp();
    let actor = access.principal.actor();
    let token = auth::create_token(&state.store, &body.name, body.role, &actor, now).await.map_err(account_error)?;
    audit_account(&state, &access, "token add", json!({"name": body.name, "role": body.role, "id": token.id})).await?;
    let answer = json!({"id": token.id, "name": body.name, "role": body.role, "token": token.token,
        "note": "shown once: warren keeps only its hash"});
    Ok((StatusCode::CREATED, Json(answer)).into_response())
}

async fn revoke_token(
    State(state): State<AppState>,
    access: Access,
    Path(id): Path<i64>,
) -> Result<Json<serde_json::Value>, ApiError> {
    auth::revoke_token(&state.store, id).await.map_err(account_error)?;
    audit_account(&state, &access, "token revoke", json!({"id": id})).await?;
    Ok(Json(json!({"revoked": id})))
}

// ----- Accounts and tokens (HTML, admin) -----

#[derive(askama::Template)]
#[template(path = "access.html")]
struct AccessPage {
    me: Me,
    /// Each with when it was created.
    users: Vec<(auth::User, String)>,
    /// Each with when it was last used.
    tokens: Vec<(auth::TokenInfo, String)>,
    /// (ok, text): the outcome of the last form.
    notice: Option<(bool, String)>,
    /// A token just created: shown this once.
    new_token: Option<String>,
    proxy: Option<String>,
}

async fn render_access(
    state: &AppState,
    me: Me,
    notice: Option<(bool, String)>,
    new_token: Option<String>,
) -> Result<Response, PageError> {
    let page = AccessPage {
        me,
        users: auth::list_users(&state.store)
            .await
            .map_err(auth_error)?
            .into_iter()
            .map(|u| {
                let created = crate::web::format::unix(u.created_at);
                (u, created)
            })
            .collect(),
        tokens: auth::list_tokens(&state.store)
            .await
            .map_err(auth_error)?
            .into_iter()
            .map(|t| {
                let used = t.last_used_at.map_or_else(|| "never".to_string(), crate::web::format::unix);
                (t, used)
            })
            .collect(),
        notice,
        new_token,
        proxy: state.gate.proxy.as_ref().map(|p| {
            let trusted: Vec<String> = p.trusted.iter().map(ToString::to_string).collect();
            format!("header {} from {}", p.header, trusted.join(", "))
        }),
    };
    let status = match &page.notice {
        Some((false, _)) => StatusCode::UNPROCESSABLE_ENTITY,
        _ => StatusCode::OK,
    };
    // A page holding a fresh token must not be cached anywhere.
    Ok((status, [(header::CACHE_CONTROL, "no-store")], Html(askama::Template::render(&page)?)).into_response())
}

#[derive(Deserialize)]
struct NoticeQuery {
    notice: Option<String>,
}

async fn access_page(
    State(state): State<AppState>,
    me: Me,
    Query(q): Query<NoticeQuery>,
) -> Result<Response, PageError> {
    let notice = q.notice.and_then(|key| state.notices.take(&key)).map(|n| (n.ok, n.text));
    render_access(&state, me, notice, None).await
}

/// After a user form: back to the page with what it did, so that a reload shows the page rather
/// than posting the form again (issue 34, case 5).
fn back_to_access(state: &AppState, (ok, text): (bool, String)) -> Response {
    let key = state.notices.put(ok, text);
    axum::response::Redirect::to(&state.href(&format!("/access?notice={key}"))).into_response()
}

#[derive(Deserialize)]
struct UserForm {
    name: String,
    role: String,
    password: String,
}

/// Runs an account change for a form: its audit entry on success, its message either way.
async fn form_outcome(
    state: &AppState,
    access: &Access,
    done: Result<String, AuthError>,
    action: &str,
    request: serde_json::Value,
) -> Result<(bool, String), PageError> {
    match done {
        Ok(text) => {
            audit_account(state, access, action, request).await.map_err(|e| PageError(e.0))?;
            Ok((true, text))
        }
        Err(AuthError::Db(e)) => Err(WebError::Database(e).into()),
        Err(e) => Ok((false, e.to_string())),
    }
}

async fn add_user_form(
    State(state): State<AppState>,
    access: Access,
    Form(form): Form<UserForm>,
) -> Result<Response, PageError> {
    let done = async {
        let role: Role = form.role.parse()?;
        auth::add_user(&state.store, &form.name, role, &form.password).await?;
        Ok(format!("User {} ({role}) created.", form.name))
    }
    .await;
    let request = json!({"name": form.name, "role": form.role});
    let notice = form_outcome(&state, &access, done, "user add", request).await?;
    Ok(back_to_access(&state, notice))
}

#[derive(Deserialize)]
struct RemoveForm {
    /// The box that confirms the removal, which the form requires.
    #[serde(default)]
    confirmed: Option<String>,
}

async fn remove_user_form(
    State(state): State<AppState>,
    access: Access,
    Path(name): Path<String>,
    Form(form): Form<RemoveForm>,
) -> Result<Response, PageError> {
    if form.confirmed.as_deref() != Some("true") {
        return Ok(back_to_access(&state, (false, format!("User {name} was not removed: tick the box to confirm."))));
    }
    let done = auth::remove_user(&state.store, &name).await.map(|()| format!("User {name} removed."));
    let notice = form_outcome(&state, &access, done, "user remove", json!({"name": name})).await?;
    Ok(back_to_access(&state, notice))
}

#[derive(Deserialize)]
struct RoleForm {
    role: String,
}

async fn set_role_form(
    State(state): State<AppState>,
    access: Access,
    Path(name): Path<String>,
    Form(form): Form<RoleForm>,
) -> Result<Response, PageError> {
    let done = async {
        let role: Role = form.role.parse()?;
        auth::set_role(&state.store, &name, role).await?;
        Ok(format!("{name} is now {role}."))
    }
    .await;
    let notice = form_outcome(&state, &access, done, "user role", json!({"name": name, "role": form.role})).await?;
    Ok(back_to_access(&state, notice))
}

#[derive(Deserialize)]
struct TokenForm {
    name: String,
    role: String,
}

async fn add_token_form(
    State(state): State<AppState>,
    access: Access,
    Form(form): Form<TokenForm>,
) -> Result<Response, PageError> {
    let now = chrono::Utc::now().timestamp();
    let created = async {
        let role: Role = form.role.parse()?;
        auth::create_token(&state.store, &form.name, role, &access.principal.actor(), now).await
    }
    .await;
    let (done, token) = match created {
        Ok(t) => (
            Ok(format!("Token {} created (id {}). Copy it now: it is not shown again.", form.name, t.id)),
            Some(t.token),
        ),
        Err(e) => (Err(e), None),
    };
    let request = json!({"name": form.name, "role": form.role});
    let notice = form_outcome(&state, &access, done, "token add", request).await?;
    render_access(&state, Me::of(&access), Some(notice), token).await
}

async fn revoke_token_form(
    State(state): State<AppState>,
    access: Access,
    Path(id): Path<i64>,
) -> Result<Response, PageError> {
    let done = auth::revoke_token(&state.store, id).await.map(|()| format!("Token {id} revoked."));
    let notice = form_outcome(&state, &access, done, "token revoke", json!({"id": id})).await?;
    render_access(&state, Me::of(&access), Some(notice), None).await
}
