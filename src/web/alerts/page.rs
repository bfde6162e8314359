//! The alerts page: what fires and is pending now, the rules with an editor and a live preview
//! (htmx posts the form as it is typed and swaps in the queues it would match), silences, and
//! the history of phase changes. Every form also works without JavaScript.

use std::collections::HashMap;

use askama::Template;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::{Form, Router};
use serde_json::{json, Map, Value};

use super::rules::{
    add_silence, check_rule, condition, end_silence, preview, read_only, remove_rule, save_existing_rule,
    save_new_rule, send_test,
};
use crate::alerts::store::{self, Silence};
use crate::alerts::{AlertKey, Rule};
use crate::state::AppState;
use crate::web::error::WebError;
use crate::web::error_page::PageError;
use crate::web::firing::{alert_rows, AlertRow};
use crate::web::format;
use crate::web::format::filters;
use crate::web::freshness::{Freshness, REFRESH_SECS};
use crate::web::htmx::{html, is_htmx};
use crate::web::identity::{Access, Me};
use crate::web::links::{nodes_href, queue_href};

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/alerts", get(page))
        .route("/alerts/rules", post(create_form))
        .route("/alerts/preview", post(preview_form))
        .route("/alerts/rules/{id}/delete", post(delete_form))
        .route("/alerts/silences", post(silence_form))
        .route("/alerts/silences/{id}/expire", post(expire_form))
        .route("/alerts/channels/{id}/test", post(test_form))
}

struct RuleRow {
    id: String,
    name: String,
    condition: String,
    scope: String,
    severity: String,
    read_only: Option<&'static str>,
    /// The silences that cover the whole rule or some of its alerts, as a sentence.
    silenced: Option<String>,
}

/// What fires and is pending, refreshed in place every 5 s (the page around it keeps the
/// editor's input).
#[derive(Template)]
#[template(path = "alerts_firing.html")]
struct FiringFragment {
    me: Me,
    alerts: Vec<AlertRow>,
    /// Alert states are warren's own, read for this answer.
    freshness: Freshness,
}

async fn firing(state: &AppState, me: Me) -> Result<String, WebError> {
    let fragment =
        FiringFragment { me, alerts: alert_rows(state, None).await?, freshness: Freshness::rendered(REFRESH_SECS) };
    Ok(fragment.render()?)
}

struct HistoryRow {
    at: String,
    rule_id: String,
    what: String,
    change: String,
    value: String,
    note: String,
}

#[derive(Template)]
#[template(path = "alerts.html")]
struct AlertsPage {
    me: Me,
    firing: String,
    rules: Vec<RuleRow>,
    silences: Vec<(i64, String, String, String, String)>,
    history: Vec<HistoryRow>,
    form: RuleForm,
    /// Every metric's name, for the form's choice.
    metrics: Vec<&'static str>,
    /// How many channels are configured; the channels page lists them.
    channels: usize,
    notice: Option<crate::state::Notice>,
    errors: HashMap<String, String>,
    error_list: Vec<(String, String)>,
    preview: PreviewFragment,
}

#[derive(Template)]
#[template(path = "alerts_preview.html")]
struct PreviewFragment {
    /// The base path, before every URL (`AppState::base_path`).
    base: std::sync::Arc<str>,
    rows: Vec<(String, Option<String>, String, bool)>,
    problem: Option<String>,
}

/// The editor's fields as typed (strings, so a bad number is shown back as typed).
#[derive(Debug, Default, Clone, serde::Deserialize)]
pub struct RuleForm {
    /// The id of the rule being edited; empty for a new rule.
    #[serde(default)]
    editing: String,
    #[serde(default)]
    id: String,
    #[serde(default)]
    name: String,
    #[serde(default)]
    broker: String,
    #[serde(default)]
    vhost: String,
    #[serde(default)]
    queue: String,
    #[serde(default)]
    queue_type: String,
    #[serde(default)]
    dlq_only: Option<String>,
    #[serde(default)]
    metric: String,
    #[serde(default)]
    comparator: String,
    #[serde(default)]
    threshold: String,
    #[serde(default)]
    for_secs: String,
    #[serde(default)]
    keep_firing_for_secs: String,
    #[serde(default)]
    severity: String,
    #[serde(default)]
    description: String,
}

impl RuleForm {
    /// The rule the form describes, or the fields that could not be read.
    pub fn rule(&self) -> Result<Rule, WebError> {
        let mut errors = Vec::new();
        let mut number = |field: &str, text: &str, default: Option<f64>| -> Option<f64> {
            match (text.trim(), default) {
                ("", d) => d,
                (t, _) => match t.parse::<f64>() {
                    Ok(v) if v.is_finite() => Some(v),
                    _ => {
                        errors.push((field.to_string(), format!("{t:?} is not a number")));
                        None
                    }
                },
            }
        };
        let threshold = number("threshold", &self.threshold, None);
        let for_secs = number("for_secs", &self.for_secs, Some(0.0));
        let keep = number("keep_firing_for_secs", &self.keep_firing_for_secs, Some(0.0));
        if !errors.is_empty() {
            return Err(WebError::Invalid(errors));
        }
        let text = |s: &str| (!s.trim().is_empty()).then(|| Value::String(s.trim().to_string()));
        let mut scope = Map::new();
        for (key, value) in [("broker", &self.broker), ("queue_type", &self.queue_type)] {
            if let Some(v) = text(value) {
                scope.insert(key.into(), v);
            }
        }
        scope.insert("vhost".into(), text(&self.vhost).unwrap_or_else(|| "*".into()));
        scope.insert("queue".into(), text(&self.queue).unwrap_or_else(|| "*".into()));
        scope.insert("dlq_only".into(), Value::Bool(self.dlq_only.is_some()));
        // A blank id is made from the name (issue 34, case 6: the form asked for a free-text id).
        let id = match self.id.trim() {
            "" => id_from(&self.name),
            id => id.to_string(),
        };
        let mut rule = json!({
            "id": id, "name": self.name.trim(), "scope": scope,
            "metric": self.metric, "severity": self.severity,
            "for_secs": for_secs.unwrap_or(0.0) as i64, "keep_firing_for_secs": keep.unwrap_or(0.0) as i64,
        });
        if self.metric != "broker_unreachable" {
            rule["comparator"] = Value::String(self.comparator.clone());
            if let Some(t) = threshold {
                rule["threshold"] = json!(t);
            }
        }
        if let Some(d) = text(&self.description) {
            rule["description"] = d;
        }
        serde_json::from_value(rule).map_err(|e| WebError::Invalid(vec![("rule".into(), e.to_string())]))
    }
}

/// A rule id from its name: letters and digits kept (lower case), every other run of characters
/// one '-', at most 64 characters.
fn id_from(name: &str) -> String {
    let mut id = String::new();
    for c in name.trim().chars() {
        if c.is_ascii_alphanumeric() {
            id.push(c.to_ascii_lowercase());
        } else if !id.is_empty() && !id.ends_with('-') {
            id.push('-');
        }
    }
    id.trim_end_matches('-').chars().take(64).collect::<String>().trim_end_matches('-').to_string()
}

fn preview_fragment(state: &AppState, form: &RuleForm) -> PreviewFragment {
    // The preview needs the condition and the scope, not the id or the name: a blank form
    // previews instead of listing errors before anything was typed (issue 34, case 6).
    if form.threshold.trim().is_empty() && form.metric != "broker_unreachable" {
        let problem = Some("type a threshold to see what would match now".to_string());
        return PreviewFragment { base: state.base_path.clone(), rows: Vec::new(), problem };
    }
    let mut form = form.clone();
    for field in [&mut form.id, &mut form.name] {
        if field.trim().is_empty() {
            *field = "preview".to_string();
        }
    }
    let rule = form.rule().and_then(|r| check_rule(state, &r).map(|_| r));
    match rule {
        Ok(rule) => PreviewFragment {
            base: state.base_path.clone(),
            rows: preview(state, &rule)
                .into_iter()
                .take(200)
                .map(|r| {
                    let href = match (&r.key.vhost, &r.key.queue) {
                        (Some(v), Some(q)) => Some(queue_href(&r.key.broker, v, q)),
                        _ if r.key.node.is_some() => Some(nodes_href(&r.key.broker)),
                        _ => None,
                    };
                    let value = format::value(r.value);
                    (r.key.to_string(), href, value, r.holds)
                })
                .collect(),
            problem: None,
        },
        Err(e) => PreviewFragment { base: state.base_path.clone(), rows: Vec::new(), problem: Some(e.to_string()) },
    }
}

async fn render(state: &AppState, me: Me, form: RuleForm, error: Option<WebError>) -> Result<String, WebError> {
    render_with(state, me, form, error, None).await
}

async fn render_with(
    state: &AppState,
    me: Me,
    form: RuleForm,
    error: Option<WebError>,
    notice: Option<crate::state::Notice>,
) -> Result<String, WebError> {
    let rules = store::all_rules(&state.config_rules, &state.store).await?;
    let silences = store::silences(&state.store, true).await?;
    let silenced = |rule_id: &str| -> Option<String> {
        let mut whole: Vec<String> = Vec::new();
        let mut some = 0;
        for s in &silences {
            match (&s.rule_id, &s.key) {
                (None, _) => whole.push(format!("every alert until {}", format::time(Some(s.until)))),
                (Some(r), None) if r == rule_id => whole.push(format!("until {}", format::time(Some(s.until)))),
                (Some(r), Some(_)) if r == rule_id => some += 1,
                _ => {}
            }
        }
        if let Some(first) = whole.first() {
            return Some(format!("silenced {first}"));
        }
        (some > 0).then(|| format!("{some} of its alerts silenced"))
    };
    let error_list: Vec<(String, String)> = match error {
        Some(WebError::Invalid(fields)) => fields,
        Some(other) => vec![("rule".to_string(), other.to_string())],
        None => Vec::new(),
    };
    let page = AlertsPage {
        firing: firing(state, me.clone()).await?,
        me,
        metrics: crate::alerts::Metric::ALL.iter().map(|m| m.as_str()).collect(),
        rules: rules
            .iter()
            .map(|r| RuleRow {
                id: r.rule.id.clone(),
                name: r.rule.name.clone(),
                condition: condition(&r.rule),
                scope: format!(
                    "{} / {} / {}{}{}",
                    r.rule.scope.broker.as_deref().unwrap_or("*"),
                    r.rule.scope.vhost,
                    r.rule.scope.queue,
                    r.rule.scope.queue_type.as_deref().map(|t| format!(" ({t})")).unwrap_or_default(),
                    if r.rule.scope.dlq_only { ", DLQs only" } else { "" }
                ),
                severity: format!("{:?}", r.rule.severity).to_lowercase(),
                // Short in each row; the page says once what it means (issue 34, case 6: nine rows
                // repeated the whole sentence).
                read_only: match r.source {
                    crate::alerts::store::Source::Builtin => Some("built in"),
                    crate::alerts::store::Source::Config => Some("in the config file"),
                    crate::alerts::store::Source::Api => None,
                },
                silenced: silenced(&r.rule.id),
            })
            .collect(),
        silences: silences
            .into_iter()
            .map(|s| {
                let what = match (&s.rule_id, &s.key) {
                    (None, _) => "every alert".to_string(),
                    (Some(r), None) => format!("rule {r}"),
                    (Some(r), Some(k)) => format!("rule {r}, {k}"),
                };
                (s.id, what, format::time(Some(s.until)), s.comment, s.created_by)
            })
            .collect(),
        history: store::history(&state.store, None, 100)
            .await?
            .into_iter()
            .map(|h| HistoryRow {
                at: format::time(Some(h.at)),
                what: serde_json::from_value::<AlertKey>(h.key.clone()).map(|k| k.to_string()).unwrap_or_default(),
                rule_id: h.rule_id,
                change: format!("{} → {}{}", h.from, h.to, if h.silenced { " (silenced)" } else { "" }),
                value: h.value.map(|v| format::value(Some(v))).unwrap_or_default(),
                note: h.note.unwrap_or_default(),
            })
            .collect(),
        preview: preview_fragment(state, &form),
        channels: state.notifier.channels().len(),
        notice,
        errors: error_list.iter().cloned().collect(),
        error_list,
        form,
    };
    Ok(page.render()?)
}

fn blank_form() -> RuleForm {
    RuleForm {
        metric: "ready".into(),
        comparator: ">".into(),
        severity: "warning".into(),
        for_secs: "60".into(),
        ..RuleForm::default()
    }
}

/// The editor's fields for an existing rule.
fn form_of(rule: &Rule) -> RuleForm {
    let number = |v: f64| if v.fract() == 0.0 { format!("{v:.0}") } else { v.to_string() };
    RuleForm {
        editing: rule.id.clone(),
        id: rule.id.clone(),
        name: rule.name.clone(),
        broker: rule.scope.broker.clone().unwrap_or_default(),
        vhost: rule.scope.vhost.clone(),
        queue: rule.scope.queue.clone(),
        queue_type: rule.scope.queue_type.clone().unwrap_or_default(),
        dlq_only: rule.scope.dlq_only.then(|| "on".to_string()),
        metric: rule.metric.as_str().to_string(),
        comparator: rule.comparator.map(|c| c.as_str().to_string()).unwrap_or_default(),
        threshold: rule.threshold.map(number).unwrap_or_default(),
        for_secs: rule.for_secs.to_string(),
        keep_firing_for_secs: rule.keep_firing_for_secs.to_string(),
        severity: format!("{:?}", rule.severity).to_lowercase(),
        description: rule.description.clone().unwrap_or_default(),
    }
}

#[derive(Debug, serde::Deserialize)]
struct PageQuery {
    /// A rule to load into the editor.
    edit: Option<String>,
    /// What the form before did (`Notices`).
    notice: Option<String>,
}

async fn page(
    State(state): State<AppState>,
    me: Me,
    Query(q): Query<PageQuery>,
    headers: HeaderMap,
) -> Result<Response, PageError> {
    if is_htmx(&headers) {
        return Ok(html(firing(&state, me).await?));
    }
    let notice = q.notice.and_then(|key| state.notices.take(&key));
    let form = match q.edit {
        Some(id) => {
            let rules = store::all_rules(&state.config_rules, &state.store).await?;
            let found = rules.into_iter().find(|r| r.rule.id == id);
            let stored = found.ok_or_else(|| WebError::NotFound(format!("no alert rule with id {id:?}")))?;
            if let Some(why) = read_only(stored.source) {
                return Err(WebError::Conflict(format!("rule {id:?} {why}")).into());
            }
            form_of(&stored.rule)
        }
        None => blank_form(),
    };
    Ok(html(render_with(&state, me, form, None, notice).await?))
}

/// Post/redirect/get: back to the alerts page, which says once what the form did.
fn done(state: &AppState, ok: bool, text: String) -> Response {
    done_on(state, "/alerts", ok, text)
}

/// The same, back to `page`.
fn done_on(state: &AppState, page: &str, ok: bool, text: String) -> Response {
    Redirect::to(&state.href(&format!("{page}?notice={}", state.notices.put(ok, text)))).into_response()
}

async fn preview_form(State(state): State<AppState>, Form(form): Form<RuleForm>) -> Result<Response, PageError> {
    Ok(html(preview_fragment(&state, &form).render().map_err(WebError::from)?))
}

async fn create_form(
    State(state): State<AppState>,
    access: Access,
    Form(form): Form<RuleForm>,
) -> Result<Response, PageError> {
    let (me, actor) = (Me::of(&access), access.principal.actor());
    let saved = match form.rule() {
        Ok(rule) if form.editing.is_empty() => save_new_rule(&state, &rule, &actor).await,
        Ok(rule) => save_existing_rule(&state, &form.editing, &rule, &actor).await,
        Err(e) => Err(e),
    };
    match saved {
        Ok(()) => {
            let verb = if form.editing.is_empty() { "created" } else { "saved" };
            Ok(done(&state, true, format!("Rule {} {verb}.", form.id.trim())))
        }
        Err(e @ (WebError::Invalid(_) | WebError::Conflict(_))) => {
            let status = if matches!(e, WebError::Conflict(_)) {
                StatusCode::CONFLICT
            } else {
                StatusCode::UNPROCESSABLE_ENTITY
            };
            Ok((status, html(render(&state, me, form, Some(e)).await?)).into_response())
        }
        Err(e) => Err(e.into()),
    }
}

async fn delete_form(
    State(state): State<AppState>,
    access: Access,
    Path(id): Path<String>,
) -> Result<Response, PageError> {
    // A rule that was gone already is what the form asked for: it says deleted, as before.
    remove_rule(&state, &id, &access.principal.actor()).await?;
    Ok(done(&state, true, format!("Rule {id} deleted.")))
}

#[derive(Debug, serde::Deserialize)]
struct SilenceForm {
    rule_id: Option<String>,
    /// An `AlertKey` as JSON, to silence one alert of the rule.
    key: Option<String>,
    hours: String,
    comment: String,
}

/// Longest silence the form takes, in hours: a year, as `add_silence` checks for every silence.
const MAX_SILENCE_HOURS: f64 = 365.0 * 24.0;

/// The form's duration, checked before any time arithmetic: `hours=1e300` once overflowed
/// chrono's duration and panicked the request before the one-year check could refuse it.
pub fn silence_hours(text: &str) -> Result<f64, WebError> {
    let invalid = |message: String| WebError::Invalid(vec![("hours".into(), message)]);
    let hours: f64 = text
        .trim()
        .parse()
        .ok()
        .filter(|h: &f64| h.is_finite() && *h > 0.0)
        .ok_or_else(|| invalid(format!("{text:?} is not a positive number")))?;
    if hours > MAX_SILENCE_HOURS {
        return Err(invalid(format!("{text:?}: a silence lasts at most a year ({MAX_SILENCE_HOURS} hours)")));
    }
    Ok(hours)
}

async fn silence_form(
    State(state): State<AppState>,
    access: Access,
    Form(form): Form<SilenceForm>,
) -> Result<Response, PageError> {
    let hours = silence_hours(&form.hours)?;
    let key = match form.key.as_deref().map(str::trim).filter(|k| !k.is_empty()) {
        Some(k) => Some(
            serde_json::from_str(k).map_err(|_| WebError::Invalid(vec![("key".into(), "not an alert key".into())]))?,
        ),
        None => None,
    };
    let rule_id = form.rule_id.filter(|r| !r.trim().is_empty());
    let what = match (&rule_id, &key) {
        (None, _) => "Every alert".to_string(),
        (Some(r), None) => format!("Rule {r}"),
        (Some(r), Some(k)) => format!("Rule {r}, {k}"),
    };
    let silence = Silence {
        id: 0,
        rule_id,
        key,
        until: chrono::Utc::now() + chrono::Duration::seconds((hours * 3600.0).round() as i64),
        comment: form.comment,
        created_by: String::new(),
        created_at: chrono::Utc::now(),
    };
    let until = format::time(Some(add_silence(&state, silence, &access.principal.actor()).await?.until));
    Ok(done(&state, true, format!("{what} silenced until {until}.")))
}

async fn expire_form(
    State(state): State<AppState>,
    access: Access,
    Path(id): Path<i64>,
) -> Result<Response, PageError> {
    end_silence(&state, id, &access.principal.actor()).await?;
    Ok(done(&state, true, "Silence ended.".to_string()))
}

async fn test_form(
    State(state): State<AppState>,
    access: Access,
    Path(id): Path<String>,
) -> Result<Response, PageError> {
    // Redirected, so that a reload shows the outcome again rather than sending another test;
    // to the channels page, where the button is and the delivery shows.
    Ok(match send_test(&state, &id, &access.principal.actor()).await? {
        Ok(status) => {
            let status = status.map(|s| format!(" (HTTP {s})")).unwrap_or_default();
            done_on(&state, "/alerts/channels", true, format!("Test notification sent to {id}{status}."))
        }
        Err(e) => done_on(&state, "/alerts/channels", false, format!("Test notification to {id} failed: {e}")),
    })
}

#[cfg(test)]
mod id_tests {
    #[test]
    fn a_blank_id_is_made_from_the_name() {
        assert_eq!(super::id_from("Orders backlog > 1,000!"), "orders-backlog-1-000");
        assert_eq!(super::id_from("  ***  "), "");
        assert_eq!(super::id_from(&"x".repeat(100)).len(), 64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn silence_hours_are_checked_before_any_time_arithmetic() {
        for bad in ["1e300", "inf", "NaN", "-1", "0", "8761", "9223372036854775807", "", "two"] {
            assert!(silence_hours(bad).is_err(), "{bad:?}");
        }
        assert_eq!(silence_hours(" 8760 ").unwrap(), 8760.0);
        assert_eq!(silence_hours("0.5").unwrap(), 0.5);
    }
}
