//! The advisor's two actions (issue 35, must-have 2), each a form and a JSON API, and each
//! audited:
//!
//! - acknowledging a finding with a reason (and taking that back): stored with the fingerprint
//!   of the evidence the caller read, so the finding comes back once the evidence changes;
//! - applying a finding's suggested policy, after a confirmation page that shows exactly what
//!   will be set and the policy of that name it would replace, if any. Never automatic.
//!
//! Both are an operator's (`auth::policy`): they change what the advisor shows or the broker's
//! policies, as a purge changes a queue, and the policy applied is the advisor's own suggestion
//! for that finding, never a definition the caller chose. warren's own settings (alert rules,
//! accounts) stay an admin's.

use askama::Template;
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::{Form, Json, Router};
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use super::advisor::{advice, advisor_href};
use crate::advisor::acknowledge::subject;
use crate::advisor::{Finding, PolicyFix};
use crate::audit;
use crate::broker::management::{encode_segment, BrokerError, ManagementClient};
use crate::state::AppState;
use crate::storage::acknowledgements::Acknowledgement;
use crate::web::error::parse;
use crate::web::error::{ApiError, WebError};
use crate::web::error_page::PageError;
use crate::web::htmx::html;
use crate::web::identity::{Access, Me};
use crate::web::lookup::broker_live;
// The templates' own filters (`|ident`).
use crate::web::format::filters;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/brokers/{broker}/advisor/acknowledge", post(acknowledge_form))
        .route("/brokers/{broker}/advisor/unacknowledge", post(unacknowledge_form))
        .route("/brokers/{broker}/advisor/apply", get(apply_page).post(apply_form))
        .route("/api/v1/brokers/{broker}/advice/acknowledge", post(acknowledge_json))
        .route("/api/v1/brokers/{broker}/advice/unacknowledge", post(unacknowledge_json))
        .route("/api/v1/brokers/{broker}/advice/apply", get(apply_preview_json).post(apply_json))
}

/// The longest reason kept, in characters: a sentence or two, not a document.
pub const REASON_MAX_CHARS: usize = 500;

/// Which finding: its rule, vhost and subject (its queue, or its connection when it names no
/// queue), as the advice lists them.
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema, utoipa::IntoParams)]
pub struct FindingKey {
    /// The rule's id (`quorum-without-dlx`).
    pub rule: String,
    pub vhost: String,
    /// The finding's queue, or its connection when it names no queue.
    pub subject: String,
}

/// An acknowledgement as asked for.
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
pub struct AcknowledgeRequest {
    pub rule: String,
    pub vhost: String,
    pub subject: String,
    /// The finding's `fingerprint` as the caller read it: refused (409) when the evidence has
    /// changed since, so nobody acknowledges what they did not see.
    pub fingerprint: String,
    /// Why the finding may stay: 1 to 500 characters, no control characters. Shown to every
    /// role that reads the advisor.
    pub reason: String,
}

/// The acknowledgement taken back.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Unacknowledged {
    pub removed: Acknowledgement,
    pub audit_id: i64,
}

/// An acknowledgement as stored, with its audit entry.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Acknowledged {
    pub acknowledgement: Acknowledgement,
    pub audit_id: i64,
}

/// A policy on the broker, as `GET /api/policies/{vhost}/{name}` gives it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ExistingPolicy {
    pub pattern: String,
    #[serde(rename = "apply-to")]
    pub apply_to: String,
    pub priority: i64,
    #[schema(value_type = Object)]
    pub definition: Map<String, Value>,
}

/// What applying a finding's policy would set, read for the confirmation.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ApplyPreview {
    pub policy: PolicyFix,
    /// The broker's policy of the same name in that vhost now, which applying replaces;
    /// `None`: there is none.
    pub existing: Option<ExistingPolicy>,
    /// True when `existing` differs from what would be set: an apply must then send its
    /// definition as `replaces`.
    pub replaces_another: bool,
}

/// Applying a finding's policy, as confirmed.
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
pub struct ApplyRequest {
    pub rule: String,
    pub vhost: String,
    pub subject: String,
    /// The definition the confirmation showed: refused (409) unless it is still the one the
    /// advisor suggests.
    #[schema(value_type = Object)]
    pub definition: Map<String, Value>,
    /// The definition of the policy of that name that the confirmation showed it would
    /// replace; absent or null when it showed none. Refused (409) when the broker has a
    /// different one.
    #[schema(value_type = Option<Object>)]
    #[serde(default)]
    pub replaces: Option<Map<String, Value>>,
}

/// A policy applied.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Applied {
    pub policy: PolicyFix,
    /// The policy it replaced, if there was one.
    pub replaced: Option<ExistingPolicy>,
    pub audit_id: i64,
}

/// The reason, checked: it is shown to everyone and kept in the audit log.
fn check_reason(reason: &str) -> Result<String, WebError> {
    let reason = reason.trim();
    let why = if reason.is_empty() {
        "say why the finding may stay (everyone who reads the advisor sees it)".to_string()
    } else if reason.chars().count() > REASON_MAX_CHARS {
        format!("at most {REASON_MAX_CHARS} characters (this one has {})", reason.chars().count())
    } else if reason.chars().any(char::is_control) {
        "one line without control characters (line breaks, tabs, escapes)".to_string()
    } else {
        return Ok(reason.to_string());
    };
    Err(WebError::Invalid(vec![("reason".into(), why)]))
}

/// The finding `key` names in the broker's advice now.
async fn find(state: &AppState, broker: &str, key: &FindingKey) -> Result<Finding, WebError> {
    let live = broker_live(state, broker)?;
    let advice = advice(state, &live).await?;
    advice
        .findings
        .into_iter()
        .find(|f| f.rule == key.rule && f.vhost == key.vhost && subject(f) == key.subject)
        .ok_or_else(|| {
            WebError::NotFound(format!(
                "no finding of rule {:?} on {:?} in vhost {:?} now (it may have cleared)",
                key.rule, key.subject, key.vhost
            ))
        })
}

async fn acknowledge(
    state: &AppState,
    broker: &str,
    request: AcknowledgeRequest,
    actor: &str,
) -> Result<Acknowledged, WebError> {
    let reason = check_reason(&request.reason)?;
    let key = FindingKey { rule: request.rule, vhost: request.vhost, subject: request.subject };
    let finding = find(state, broker, &key).await?;
    if finding.fingerprint != request.fingerprint {
        return Err(WebError::Conflict(format!(
            "the evidence of this finding changed since it was read (its fingerprint is {}, not {:?}): read it again \
             before acknowledging it",
            finding.fingerprint, request.fingerprint
        )));
    }
    let ack = Acknowledgement {
        broker: broker.to_string(),
        rule: key.rule,
        vhost: key.vhost,
        subject: key.subject,
        fingerprint: finding.fingerprint,
        reason,
        actor: actor.to_string(),
        at: chrono::Utc::now().timestamp(),
    };
    state.store.acknowledge(&ack).await?;
    let change = audit::AdvisorChange {
        actor,
        broker,
        vhost: &ack.vhost,
        queue: finding.queue.as_deref().unwrap_or(""),
        action: "advisor acknowledge",
        request: json!({"rule": ack.rule, "subject": ack.subject, "fingerprint": ack.fingerprint, "reason": ack.reason}),
        detail: format!("acknowledged {} on {}: {}", ack.rule, ack.subject, ack.reason),
    };
    let audit_id = audit::advisor(&state.store, change).await?;
    Ok(Acknowledged { acknowledgement: ack, audit_id })
}

async fn unacknowledge(
    state: &AppState,
    broker: &str,
    key: FindingKey,
    actor: &str,
) -> Result<Unacknowledged, WebError> {
    broker_live(state, broker)?;
    let removed = state.store.unacknowledge(broker, &key.rule, &key.vhost, &key.subject).await?.ok_or_else(|| {
        WebError::NotFound(format!(
            "no acknowledgement of rule {:?} on {:?} in vhost {:?}",
            key.rule, key.subject, key.vhost
        ))
    })?;
    // The finding's queue, if it still is one the broker lists.
    let queue = find(state, broker, &key).await.ok().and_then(|f| f.queue).unwrap_or_default();
    let change = audit::AdvisorChange {
        actor,
        broker,
        vhost: &removed.vhost,
        queue: &queue,
        action: "advisor unacknowledge",
        request: json!({"rule": removed.rule, "subject": removed.subject, "fingerprint": removed.fingerprint}),
        detail: format!(
            "took back {}'s acknowledgement of {} on {} ({})",
            removed.actor, removed.rule, removed.subject, removed.reason
        ),
    };
    let audit_id = audit::advisor(&state.store, change).await?;
    Ok(Unacknowledged { removed, audit_id })
}

fn management(state: &AppState, broker: &str) -> Result<ManagementClient, WebError> {
    let config =
        state.broker_config(broker).ok_or_else(|| WebError::NotFound(format!("no broker named {broker:?}")))?;
    Ok(ManagementClient::new(config))
}

fn policy_path(vhost: &str, name: &str) -> String {
    format!("api/policies/{}/{}", encode_segment(vhost), encode_segment(name))
}

/// The broker's policy `name` in `vhost` now, read at the moment of asking (not from the poll:
/// what is replaced must be what is there).
async fn existing_policy(
    client: &ManagementClient,
    vhost: &str,
    name: &str,
) -> Result<Option<ExistingPolicy>, WebError> {
    match client.get::<ExistingPolicy>(&policy_path(vhost, name)).await {
        Ok((policy, _)) => Ok(Some(policy)),
        Err(BrokerError::Http { status: 404, .. }) => Ok(None),
        Err(e) => Err(WebError::Unavailable(format!(
            "the broker did not say whether policy {name:?} exists in {vhost:?}: {e}"
        ))),
    }
}

fn same_policy(existing: &ExistingPolicy, policy: &PolicyFix) -> bool {
    existing.definition == policy.definition
        && existing.pattern == policy.pattern
        && existing.priority == policy.priority
        && existing.apply_to == policy.apply_to
}

async fn preview(state: &AppState, broker: &str, key: &FindingKey) -> Result<ApplyPreview, WebError> {
    let finding = find(state, broker, key).await?;
    let policy = finding
        .fix
        .policy
        .ok_or_else(|| WebError::Conflict(format!("no policy can fix this finding: {}", finding.fix.summary)))?;
    let existing = existing_policy(&management(state, broker)?, &policy.vhost, &policy.name).await?;
    let replaces_another = existing.as_ref().is_some_and(|e| !same_policy(e, &policy));
    Ok(ApplyPreview { policy, existing, replaces_another })
}

/// Applies the finding's policy as confirmed; the audit entry's id, and how the broker answered.
async fn apply(
    state: &AppState,
    broker: &str,
    request: ApplyRequest,
    actor: &str,
) -> Result<(Applied, Result<(), BrokerError>), WebError> {
    let key = FindingKey { rule: request.rule, vhost: request.vhost, subject: request.subject };
    let ApplyPreview { policy, existing, replaces_another } = preview(state, broker, &key).await?;
    if policy.definition != request.definition {
        return Err(WebError::Conflict(format!(
            "the suggested policy changed since it was confirmed: its definition is now {}; confirm again",
            Value::Object(policy.definition)
        )));
    }
    if let Some(existing) = existing.as_ref().filter(|_| replaces_another) {
        if request.replaces.as_ref() != Some(&existing.definition) {
            return Err(WebError::Conflict(format!(
                "policy {:?} exists in vhost {:?} with another definition, {}, which applying would replace and \
                 which the confirmation did not show; confirm again on the page that shows it",
                policy.name,
                policy.vhost,
                Value::Object(existing.definition.clone())
            )));
        }
    }
    let body = json!({
        "pattern": policy.pattern,
        "definition": policy.definition,
        "apply-to": policy.apply_to,
        "priority": policy.priority,
    });
    let entry = audit::Entry {
        actor,
        broker,
        vhost: &policy.vhost,
        queue: &key.subject,
        action: "advisor apply policy",
        request:
            json!({"rule": key.rule, "subject": key.subject, "policy": policy.name, "body": body, "replaced": existing})
                .to_string(),
        run_by: state.replica.id(),
    };
    state.storage.check(&*state.store).await.map_err(WebError::Storage)?;
    let audit_id = audit::start(&state.store, entry)
        .await
        .map_err(|e| WebError::Storage(state.storage.failed("the audit log", &e)))?;
    let outcome = management(state, broker)?.put_json(&policy_path(&policy.vhost, &policy.name), &body).await;
    match &outcome {
        Ok(()) => crate::dlq::fates::finish(&state.store, audit_id, "done", 0, 0, None, &[]).await?,
        Err(e) => crate::dlq::fates::finish(&state.store, audit_id, "failed", 0, 0, Some(&e.to_string()), &[]).await?,
    }
    Ok((Applied { policy, replaced: existing.filter(|_| replaces_another), audit_id }, outcome))
}

async fn acknowledge_json(
    State(state): State<AppState>,
    access: Access,
    Path(broker): Path<String>,
    body: Bytes,
) -> Result<Json<Acknowledged>, ApiError> {
    let request: AcknowledgeRequest = parse(&body)?;
    Ok(Json(acknowledge(&state, &broker, request, &access.principal.actor()).await?))
}

async fn unacknowledge_json(
    State(state): State<AppState>,
    access: Access,
    Path(broker): Path<String>,
    body: Bytes,
) -> Result<Json<Unacknowledged>, ApiError> {
    let key: FindingKey = parse(&body)?;
    Ok(Json(unacknowledge(&state, &broker, key, &access.principal.actor()).await?))
}

async fn apply_preview_json(
    State(state): State<AppState>,
    Path(broker): Path<String>,
    Query(key): Query<FindingKey>,
) -> Result<Json<ApplyPreview>, ApiError> {
    Ok(Json(preview(&state, &broker, &key).await?))
}

async fn apply_json(
    State(state): State<AppState>,
    access: Access,
    Path(broker): Path<String>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let request: ApplyRequest = parse(&body)?;
    let (applied, outcome) = apply(&state, &broker, request, &access.principal.actor()).await?;
    Ok(match outcome {
        Ok(()) => Json(applied).into_response(),
        Err(e) => (
            StatusCode::BAD_GATEWAY,
            Json(json!({"error": {"code": "policy_refused", "message": e.to_string()}, "audit_id": applied.audit_id})),
        )
            .into_response(),
    })
}

/// Back to the broker's advisor page with a notice.
fn done(state: &AppState, broker: &str, ok: bool, text: String) -> Response {
    let href = format!("{}?notice={}", advisor_href(broker), state.notices.put(ok, text));
    Redirect::to(&state.href(&href)).into_response()
}

async fn acknowledge_form(
    State(state): State<AppState>,
    access: Access,
    Path(broker): Path<String>,
    Form(form): Form<AcknowledgeRequest>,
) -> Result<Response, PageError> {
    let done_text = format!("Acknowledged {} on {}.", form.rule, form.subject);
    acknowledge(&state, &broker, form, &access.principal.actor()).await?;
    Ok(done(&state, &broker, true, done_text))
}

async fn unacknowledge_form(
    State(state): State<AppState>,
    access: Access,
    Path(broker): Path<String>,
    Form(key): Form<FindingKey>,
) -> Result<Response, PageError> {
    let text = format!("{} on {} is open again.", key.rule, key.subject);
    unacknowledge(&state, &broker, key, &access.principal.actor()).await?;
    Ok(done(&state, &broker, true, text))
}

#[derive(Template)]
#[template(path = "advisor_apply.html")]
struct ApplyPage {
    me: Me,
    broker: String,
    advisor_href: String,
    apply_href: String,
    key: FindingKey,
    title: String,
    policy: PolicyFix,
    definition: String,
    existing: Option<ExistingPolicy>,
    existing_definition: String,
    replaces_another: bool,
}

fn pretty(definition: &Map<String, Value>) -> String {
    serde_json::to_string_pretty(definition).unwrap_or_default()
}

async fn apply_page(
    State(state): State<AppState>,
    me: Me,
    Path(broker): Path<String>,
    Query(key): Query<FindingKey>,
) -> Result<Response, PageError> {
    let title = find(&state, &broker, &key).await?.title;
    let preview = preview(&state, &broker, &key).await?;
    let page = ApplyPage {
        me,
        advisor_href: advisor_href(&broker),
        apply_href: format!("{}/apply", advisor_href(&broker)),
        broker,
        key,
        title,
        definition: pretty(&preview.policy.definition),
        existing_definition: preview.existing.as_ref().map(|e| pretty(&e.definition)).unwrap_or_default(),
        policy: preview.policy,
        existing: preview.existing,
        replaces_another: preview.replaces_another,
    };
    Ok(html(page.render().map_err(WebError::from)?))
}

/// The confirmation as the form sends it back: JSON texts, as the page showed them.
#[derive(Debug, Deserialize)]
struct ApplyForm {
    rule: String,
    vhost: String,
    subject: String,
    definition: String,
    /// Empty when the page showed no policy to replace.
    #[serde(default)]
    replaces: String,
}

async fn apply_form(
    State(state): State<AppState>,
    access: Access,
    Path(broker): Path<String>,
    Form(form): Form<ApplyForm>,
) -> Result<Response, PageError> {
    let object = |field: &str, text: &str| -> Result<Map<String, Value>, WebError> {
        serde_json::from_str(text)
            .map_err(|e| WebError::Invalid(vec![(field.to_string(), format!("not a JSON object: {e}"))]))
    };
    let replaces = match form.replaces.trim() {
        "" => None,
        text => Some(object("replaces", text)?),
    };
    let request = ApplyRequest {
        definition: object("definition", &form.definition)?,
        rule: form.rule,
        vhost: form.vhost,
        subject: form.subject,
        replaces,
    };
    let (applied, outcome) = apply(&state, &broker, request, &access.principal.actor()).await?;
    let name = &applied.policy.name;
    Ok(match outcome {
        Ok(()) => done(
            &state,
            &broker,
            true,
            format!("Policy {name} set in vhost {} (audit entry {}).", applied.policy.vhost, applied.audit_id),
        ),
        Err(e) => done(
            &state,
            &broker,
            false,
            format!("The broker refused policy {name}: {e} (audit entry {}).", applied.audit_id),
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reason_is_one_short_line() {
        assert_eq!(check_reason("  known: the consumer is idempotent ").unwrap(), "known: the consumer is idempotent");
        for hostile in ["", "   ", "two\nlines", "tab\there", "escape \u{1b}[31m", &"x".repeat(REASON_MAX_CHARS + 1)] {
            assert!(matches!(check_reason(hostile), Err(WebError::Invalid(_))), "{hostile:?}");
        }
        // HTML is kept as text: the templates escape it.
        assert_eq!(check_reason("<b>ok</b>").unwrap(), "<b>ok</b>");
    }
}
