//! The advisor's pages and API (issue 35): a broker's findings, most severe first, filterable
//! by rule and severity, with counts (`/brokers/{broker}/advisor`), and the same as JSON
//! (`/api/v1/brokers/{broker}/advice`). The queue page shows a queue's own findings through
//! `queue_section`. Every view evaluates the rules over the poller's last results in memory:
//! nothing here asks the broker.
//!
//! Viewers read it like the queue list: the findings name queues, settings and counters, never
//! a message's payload or headers (a retry queue's TTLs are message properties, which every
//! role reads in a snapshot too).

use askama::Template;
use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;
use axum::{Json, Router};
use chrono::Utc;
use serde::Deserialize;

use crate::advisor::{self, acknowledge, Advice, Finding, Severity, RULES};
use crate::auth::Role;
use crate::broker::management::encode_segment;
use crate::live::BrokerLive;
use crate::state::AppState;
use crate::web::error::{ApiError, WebError};
use crate::web::error_page::PageError;
use crate::web::format;
use crate::web::freshness::{Freshness, REFRESH_SECS};
use crate::web::htmx::{html, is_htmx};
use crate::web::identity::Me;
use crate::web::links::queue_href;
use crate::web::lookup::broker_live;
// The templates' own filters (`|ident`).
use crate::web::format::filters;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/advisor", get(first_broker))
        .route("/brokers/{broker}/advisor", get(page))
        .route("/api/v1/brokers/{broker}/advice", get(json))
}

/// Where a broker's advisor page is.
pub fn advisor_href(broker: &str) -> String {
    format!("/brokers/{}/advisor", encode_segment(broker))
}

/// `?rule=&severity=&vhost=`: which findings to list (the counts are over all of them).
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
pub struct AdviceFilter {
    /// A rule's id (`quorum-without-dlx`); an unknown one is refused (400).
    pub rule: Option<String>,
    /// `critical`, `warning` or `notice`; anything else is refused (400).
    pub severity: Option<String>,
    /// Findings of this vhost only.
    pub vhost: Option<String>,
    /// `open` (not acknowledged, or acknowledged before its evidence changed) or
    /// `acknowledged`; anything else is refused (400). Both without it.
    pub state: Option<String>,
}

/// `?notice=`: the outcome of a form, shown once.
#[derive(Debug, Default, Deserialize)]
pub struct NoticeQuery {
    notice: Option<String>,
}

/// The filter, checked: an unknown rule or severity is a mistake the user should see, not an
/// empty list that looks like "all clear".
struct Checked {
    rule: Option<&'static str>,
    severity: Option<Severity>,
    vhost: Option<String>,
    /// `Some(true)`: acknowledged only; `Some(false)`: open only.
    acknowledged: Option<bool>,
}

impl AdviceFilter {
    fn check(self) -> Result<Checked, WebError> {
        let nonempty = |v: Option<String>| v.filter(|s| !s.is_empty());
        let rule = match nonempty(self.rule) {
            None => None,
            Some(r) => Some(advisor::rule_by_id(&r).map(|r| r.id).ok_or_else(|| {
                let known: Vec<&str> = RULES.iter().map(|r| r.id).collect();
                WebError::BadRequest(format!("no advisor rule {r:?}; the rules are {}", known.join(", ")))
            })?),
        };
        let severity = match nonempty(self.severity) {
            None => None,
            Some(s) => Some(Severity::parse(&s).ok_or_else(|| {
                WebError::BadRequest(format!("no severity {s:?}; the severities are critical, warning, notice"))
            })?),
        };
        let acknowledged = match nonempty(self.state).as_deref() {
            None => None,
            Some("open") => Some(false),
            Some("acknowledged") => Some(true),
            Some(other) => {
                return Err(WebError::BadRequest(format!("no state {other:?}; the states are open, acknowledged")))
            }
        };
        Ok(Checked { rule, severity, vhost: nonempty(self.vhost), acknowledged })
    }
}

impl Checked {
    fn keeps(&self, f: &Finding) -> bool {
        self.rule.is_none_or(|r| f.rule == r)
            && self.severity.is_none_or(|s| f.severity == s)
            && self.vhost.as_ref().is_none_or(|v| f.vhost == *v)
            && self.acknowledged.is_none_or(|a| f.acknowledged() == a)
    }
}

/// A broker's settings, with what the rules read from the database for `queues`.
pub async fn settings<'a>(
    state: &AppState,
    live: &BrokerLive,
    queues: impl Iterator<Item = &'a crate::metrics::QueueView>,
) -> Result<advisor::Settings, WebError> {
    let mut settings = advisor::Settings::of(state.broker_config(&live.name));
    let Some(&broker_id) = state.broker_ids.get(&live.name) else { return Ok(settings) };
    let then = Utc::now().timestamp() - settings.dlq_growth_window_secs as i64;
    let interval = crate::web::lookup::poll_interval_secs(state, &live.name).max(1);
    for q in queues.filter(|q| advisor::needs_history(q)) {
        let Some(queue_id) = q.id else { continue };
        let depth = super::history::depth_at(state, broker_id, queue_id, then, interval).await?;
        settings.stored.dlq_depth_then.insert((q.vhost.to_string(), q.name.to_string()), depth);
    }
    settings.stored.custody_ttls = custody_ttls(state, &live.name).await?;
    Ok(settings)
}

/// The newest records read per queue in custody for their per-message TTLs.
const CUSTODY_RECORDS_READ: i64 = 500;

/// Per queue (vhost, name): the per-message TTLs its messages carried, read from the `x-death`
/// headers of the newest records in custody, with how many records were read. Headers are
/// what a `[[custody]]` rule's payload role keeps, so only queues every role may read are read:
/// the findings and the counts of `/metrics` are the same for every reader, and reveal nothing
/// of a restricted queue's headers.
async fn custody_ttls(
    state: &AppState,
    broker: &str,
) -> Result<std::collections::HashMap<(String, String), (std::collections::BTreeMap<String, u64>, usize)>, WebError> {
    use crate::storage::custody::{Scan, Search, States};
    let mut out: std::collections::HashMap<(String, String), (std::collections::BTreeMap<String, u64>, usize)> =
        Default::default();
    for ((vhost, dlq), counts) in crate::dlq::custody::counts_by_queue(&state.store, broker).await? {
        let place = (broker, vhost.as_str(), dlq.as_str());
        if counts.held + counts.claimed == 0 || crate::web::restricted::payload_role(state, place) != Role::Viewer {
            continue;
        }
        let Some((low, high)) = state.store.custody_id_span(place).await? else { continue };
        let search = Search { states: States::Kept, ..Search::default() };
        let scan =
            Scan { ids: (low.max(high - CUSTODY_RECORDS_READ + 1), high), head_bytes: 64 * 1024, max_bytes: 8 << 20 };
        let records = state.store.custody_candidates(place, &search, scan).await?;
        // A properties text cut at `head_bytes` does not parse, and is left out.
        let properties: Vec<serde_json::Value> =
            records.iter().filter_map(|(_, _, p)| serde_json::from_slice(p).ok()).collect();
        for (queue, ttls) in advisor::ttls_from_custody(properties.iter()) {
            let entry = out.entry((vhost.clone(), queue)).or_default();
            for (ttl, n) in ttls {
                *entry.0.entry(ttl).or_default() += n;
            }
            entry.1 += properties.len();
        }
    }
    Ok(out)
}

/// A broker's advice now.
pub async fn advice(state: &AppState, live: &BrokerLive) -> Result<Advice, WebError> {
    let settings = settings(state, live, live.queues.iter()).await?;
    Ok(advisor::advise(live, Some(&state.snapshots), &settings, Utc::now()))
}

/// A broker's advice now, each finding marked with its acknowledgement.
pub async fn acknowledged_advice(state: &AppState, live: &BrokerLive) -> Result<Advice, WebError> {
    let mut advice = advice(state, live).await?;
    let acks = state.store.acknowledgements(&live.name).await?;
    acknowledge::apply(&mut advice, &acks);
    Ok(advice)
}

async fn json(
    State(state): State<AppState>,
    Path(broker): Path<String>,
    Query(filter): Query<AdviceFilter>,
) -> Result<Json<Advice>, ApiError> {
    let filter = filter.check()?;
    let live = broker_live(&state, &broker)?;
    let mut advice = acknowledged_advice(&state, &live).await?;
    advice.findings.retain(|f| filter.keeps(f));
    Ok(Json(advice))
}

async fn first_broker(State(state): State<AppState>) -> Result<Response, PageError> {
    let first =
        state.live.snapshot().into_iter().next().ok_or_else(|| WebError::NotFound("no broker configured".into()))?;
    Ok(Redirect::to(&state.href(&advisor_href(&first.name))).into_response())
}

/// One finding as the page shows it.
pub struct FindingRow {
    pub rule: &'static str,
    pub severity: &'static str,
    pub title: String,
    pub vhost: String,
    pub queue_href: Option<String>,
    pub queue: Option<String>,
    pub connection: Option<String>,
    pub evidence: Vec<advisor::Evidence>,
    pub why: &'static str,
    pub fix: String,
    pub policy_command: Option<String>,
    pub policy_json: Option<String>,
    pub policy_note: Option<String>,
    pub blocks_upgrade: Option<String>,
    /// "queue metadata 4s ago, clients 12s ago".
    pub inputs: String,
    /// The finding's key and fingerprint, for the forms.
    pub vhost_key: String,
    pub subject: String,
    pub fingerprint: String,
    /// An id for the page, stable while the finding lasts, so a refresh keeps a reason being
    /// typed (`hx-preserve`).
    pub dom_id: String,
    /// Acknowledged, with unchanged evidence: who, when, why.
    pub acknowledged: Option<AckText>,
    /// Acknowledged once, but the evidence changed since: open again.
    pub came_back: Option<AckText>,
    /// The forms, for an operator; `None` for a viewer, who sees no form.
    pub actions: Option<RowActions>,
}

/// An acknowledgement as the page shows it.
pub struct AckText {
    pub by: String,
    pub at: String,
    pub reason: String,
}

/// Where an operator's forms post, and the token they carry.
#[derive(Clone)]
pub struct RowActions {
    pub csrf: String,
    pub acknowledge_href: String,
    pub unacknowledge_href: String,
    /// The confirmation page of the finding's policy, when it has one.
    pub apply_href: Option<String>,
}

impl RowActions {
    /// The forms `me` may use, or `None`.
    pub fn of(me: &Me, broker: &str) -> Option<RowActions> {
        let href = advisor_href(broker);
        me.operator.then(|| RowActions {
            csrf: me.csrf.clone(),
            acknowledge_href: format!("{href}/acknowledge"),
            unacknowledge_href: format!("{href}/unacknowledge"),
            apply_href: None,
        })
    }
}

fn inputs_text(inputs: &[advisor::InputAge]) -> String {
    inputs
        .iter()
        .map(|i| match i.age_secs {
            Some(secs) => format!("{} {} ago", i.input, format::duration(secs)),
            None => format!("{} of unknown age", i.input),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

pub fn finding_row(broker: &str, f: &Finding, actions: Option<&RowActions>) -> FindingRow {
    let subject = acknowledge::subject(f).to_string();
    let ack_text = |a: &acknowledge::AcknowledgementState| AckText {
        by: a.by.clone(),
        at: format::time(Some(a.at)),
        reason: a.reason.clone(),
    };
    let actions = actions.map(|a| RowActions {
        apply_href: f.fix.policy.as_ref().map(|_| {
            format!(
                "{}/apply?rule={}&vhost={}&subject={}",
                advisor_href(broker),
                encode_segment(f.rule),
                encode_segment(&f.vhost),
                encode_segment(&subject)
            )
        }),
        ..a.clone()
    });
    let dom_id = {
        use sha2::{Digest, Sha256};
        let hash = Sha256::digest(format!("{}\0{}\0{}", f.rule, f.vhost, subject).as_bytes());
        format!("finding-{}", hash.iter().take(8).map(|b| format!("{b:02x}")).collect::<String>())
    };
    FindingRow {
        vhost_key: f.vhost.clone(),
        subject,
        fingerprint: f.fingerprint.clone(),
        dom_id,
        acknowledged: f.acknowledgement.as_ref().filter(|a| a.applies).map(ack_text),
        came_back: f.acknowledgement.as_ref().filter(|a| !a.applies).map(ack_text),
        actions,
        rule: f.rule,
        severity: f.severity.as_str(),
        title: f.title.clone(),
        vhost: f.vhost.clone(),
        queue_href: f.queue.as_ref().map(|q| queue_href(broker, &f.vhost, q)),
        queue: f.queue.clone(),
        connection: f.connection.clone(),
        evidence: f.evidence.clone(),
        why: f.why,
        fix: f.fix.summary.clone(),
        policy_command: f.fix.policy.as_ref().map(|p| p.command.clone()),
        policy_json: f.fix.policy.as_ref().map(|p| p.json.clone()),
        policy_note: f.fix.policy.as_ref().and_then(|p| p.note.clone()),
        blocks_upgrade: f.blocks_upgrade.clone(),
        inputs: inputs_text(&f.inputs),
    }
}

/// A queue's findings, for its page.
#[derive(Template)]
#[template(path = "_advice.html")]
pub struct QueueAdvice {
    pub base: std::sync::Arc<str>,
    pub rows: Vec<FindingRow>,
    /// Rules that said nothing because an input was unknown, with why.
    pub unknown: Vec<String>,
    pub advisor_href: String,
}

/// The advisor's section of a queue's page, with the forms `me` may use.
pub async fn queue_section(
    state: &AppState,
    live: &BrokerLive,
    me: &Me,
    vhost: &str,
    queue: &str,
) -> Result<String, WebError> {
    let this = live.queues.iter().filter(|q| *q.vhost == *vhost && *q.name == *queue);
    let settings = settings(state, live, this).await?;
    let mut advice = advisor::advise_queue(live, Some(&state.snapshots), &settings, Utc::now(), (vhost, queue));
    acknowledge::apply(&mut advice, &state.store.acknowledgements(&live.name).await?);
    let actions = RowActions::of(me, &live.name);
    Ok(QueueAdvice {
        base: state.base_path.clone(),
        rows: advice.findings.iter().map(|f| finding_row(&live.name, f, actions.as_ref())).collect(),
        unknown: advice.unknown.iter().map(|u| format!("{} ({}): {}", u.input, u.why, u.rules.join(", "))).collect(),
        advisor_href: advisor_href(&live.name),
    }
    .render()?)
}

struct CountRow {
    rule: &'static str,
    title: &'static str,
    findings: String,
    acknowledged: usize,
    href: String,
    current: bool,
}

#[derive(Template)]
#[template(path = "advisor_findings.html")]
struct Fragment {
    base: std::sync::Arc<str>,
    freshness: Freshness,
    self_href: String,
    all_href: String,
    counts: Vec<CountRow>,
    severities: Vec<(String, &'static str, usize, bool)>,
    /// Open findings first; the acknowledged ones apart.
    rows: Vec<FindingRow>,
    acknowledged_rows: Vec<FindingRow>,
    shown: usize,
    total: usize,
    /// The filter by state: links and which is current ("", "open", "acknowledged").
    states: Vec<(String, &'static str, usize, bool)>,
    unknown: Vec<String>,
    inputs: String,
    version: String,
    filtered: bool,
}

#[derive(Template)]
#[template(path = "advisor.html")]
struct Page {
    me: Me,
    notice: Option<crate::state::Notice>,
    broker: String,
    others: Vec<(String, String)>,
    fragment: String,
}

async fn page(
    State(state): State<AppState>,
    Path(broker): Path<String>,
    Query(filter): Query<AdviceFilter>,
    Query(notice): Query<NoticeQuery>,
    me: Me,
    headers: HeaderMap,
) -> Result<Response, PageError> {
    let filter = filter.check()?;
    let live = broker_live(&state, &broker)?;
    let advice = acknowledged_advice(&state, &live).await?;
    let href = advisor_href(&live.name);
    let state_name = filter.acknowledged.map(|a| if a { "acknowledged" } else { "open" });
    let with = |rule: Option<&str>, severity: Option<&str>, state_name: Option<&str>| {
        let mut query = Vec::new();
        if let Some(r) = rule {
            query.push(format!("rule={}", encode_segment(r)));
        }
        if let Some(s) = severity {
            query.push(format!("severity={s}"));
        }
        if let Some(v) = &filter.vhost {
            query.push(format!("vhost={}", encode_segment(v)));
        }
        if let Some(s) = state_name {
            query.push(format!("state={s}"));
        }
        if query.is_empty() {
            href.clone()
        } else {
            format!("{href}?{}", query.join("&"))
        }
    };
    let severity = filter.severity.map(Severity::as_str);
    let counts = advice
        .counts
        .iter()
        .map(|c| CountRow {
            rule: c.rule,
            title: c.title,
            findings: if c.ran { c.findings.to_string() } else { format!("{} (unknown)", format::UNKNOWN) },
            acknowledged: c.acknowledged,
            href: with(Some(c.rule), severity, state_name),
            current: filter.rule == Some(c.rule),
        })
        .collect();
    let severities = advice
        .by_severity()
        .iter()
        .map(|(s, n)| (with(filter.rule, Some(s.as_str()), state_name), s.as_str(), *n, filter.severity == Some(*s)))
        .collect();
    let open = advice.findings.len() - advice.acknowledged;
    let states = vec![
        (with(filter.rule, severity, Some("open")), "open", open, filter.acknowledged == Some(false)),
        (
            with(filter.rule, severity, Some("acknowledged")),
            "acknowledged",
            advice.acknowledged,
            filter.acknowledged == Some(true),
        ),
    ];
    let actions = RowActions::of(&me, &live.name);
    let (mut rows, mut acknowledged_rows) = (Vec::new(), Vec::new());
    for f in advice.findings.iter().filter(|f| filter.keeps(f)) {
        let row = finding_row(&live.name, f, actions.as_ref());
        if f.acknowledged() {
            acknowledged_rows.push(row);
        } else {
            rows.push(row);
        }
    }
    let fragment = Fragment {
        base: state.base_path.clone(),
        freshness: Freshness::polled(&[&live], REFRESH_SECS),
        self_href: with(filter.rule, severity, state_name),
        all_href: href.clone(),
        counts,
        severities,
        shown: rows.len() + acknowledged_rows.len(),
        total: advice.findings.len(),
        states,
        rows,
        acknowledged_rows,
        unknown: advice.unknown.iter().map(|u| format!("{} ({}): {}", u.input, u.why, u.rules.join(", "))).collect(),
        inputs: inputs_text(&advice.inputs),
        version: advice.rabbitmq_version.clone().unwrap_or_else(|| "unknown".into()),
        filtered: filter.rule.is_some()
            || filter.severity.is_some()
            || filter.vhost.is_some()
            || filter.acknowledged.is_some(),
    }
    .render()
    .map_err(WebError::from)?;
    if is_htmx(&headers) {
        return Ok(html(fragment));
    }
    let others = state
        .live
        .snapshot()
        .into_iter()
        .filter(|b| b.name != live.name)
        .map(|b| (advisor_href(&b.name), b.name))
        .collect();
    let notice = notice.notice.and_then(|key| state.notices.take(&key));
    Ok(html(Page { me, notice, broker: live.name.clone(), others, fragment }.render().map_err(WebError::from)?))
}
