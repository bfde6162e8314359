//! Who is asking: `Access`, the principal the gate (`access/gate.rs`) admitted and put on the
//! request, and `Me`, what the page layout shows of them. Every handler reads these; only the
//! gate makes them.

use axum::extract::FromRequestParts;
use axum::http::request::Parts;

use crate::auth::{How, Principal, Role};
use crate::state::AppState;
use crate::web::error::{ApiError, WebError};

/// The identified principal of a request and the CSRF token its pages must send back.
#[derive(Debug, Clone)]
pub struct Access {
    pub principal: Principal,
    /// Empty for API tokens (they need none).
    pub csrf: String,
    /// The database fault every page warns about, if there is one (`history::storage`).
    pub storage_problem: Option<String>,
    /// The clusters' problems every page's banner shows (`Live::cluster_problems`).
    pub cluster_problems: Vec<String>,
    /// The prefix of every link the page writes (`AppState::base_path`).
    pub base_path: std::sync::Arc<str>,
}

impl<S: Send + Sync> FromRequestParts<S> for Access {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        // The middleware puts it on every request that is not public; a handler asking for it
        // on a public route is a programming error, answered as such.
        parts.extensions.get::<Access>().cloned().ok_or_else(|| {
            ApiError(WebError::BadRequest("this request was not identified; it needs to be logged in".into()))
        })
    }
}

/// What the page layout shows of the requester: the name and role in the header, the logout
/// button for sessions, the CSRF token for forms and htmx.
#[derive(Debug, Clone, Default)]
pub struct Me {
    pub name: String,
    pub role: &'static str,
    pub csrf: String,
    /// Logged in with a session (so there is something to log out of).
    pub session: bool,
    /// Not anonymous: worth showing who.
    pub known: bool,
    pub operator: bool,
    pub admin: bool,
    /// The database fault the layout warns about: warren's storage, not a broker.
    pub storage_problem: Option<String>,
    /// A node down, a partition or an alarm, per cluster: the layout's banner.
    pub cluster_problems: Vec<String>,
    /// What every URL the page writes starts with: the path of `public_url`, often empty
    /// (`AppState::base_path`).
    pub base: std::sync::Arc<str>,
    /// The navigation's entry of this page (`section`), marked as the current page.
    pub section: &'static str,
}

impl Me {
    pub fn of(access: &Access) -> Me {
        let p = &access.principal;
        Me {
            name: p.actor(),
            role: p.role.as_str(),
            csrf: access.csrf.clone(),
            session: p.via == How::Session,
            known: p.via != How::Anonymous,
            operator: p.role.allows(Role::Operator),
            admin: p.role.allows(Role::Admin),
            storage_problem: access.storage_problem.clone(),
            cluster_problems: access.cluster_problems.clone(),
            base: access.base_path.clone(),
            section: "",
        }
    }

    /// Nobody in particular: the login form, the error pages of public routes and refusals.
    pub fn public(state: &AppState) -> Me {
        Me { base: state.base_path.clone(), ..Me::default() }
    }
}

impl<S: Send + Sync> FromRequestParts<S> for Me {
    type Rejection = std::convert::Infallible;

    /// Public pages (the error page of a public route) get an empty `Me`.
    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        let mut me = parts.extensions.get::<Access>().map(Me::of).unwrap_or_default();
        // The whole path: nested routers see only the part after their own prefix.
        let uri = parts.extensions.get::<axum::extract::OriginalUri>().map_or(&parts.uri, |o| &o.0);
        let path = uri.path().strip_prefix(&*me.base).unwrap_or(uri.path());
        me.section = section(if path.is_empty() { "/" } else { path }, uri.query().unwrap_or(""));
        Ok(me)
    }
}

/// The navigation entry a page belongs to (issue 34, case 7: no page said where one was, and
/// "Dead letters" led to a page titled "Queues"). The path is the router's, after `public_url`'s.
pub fn section(path: &str, query: &str) -> &'static str {
    let dlq_list = query.split('&').any(|p| p == "dlq=true");
    match path.split('/').nth(1).unwrap_or("") {
        "" => "overview",
        "queues" if path == "/queues" && dlq_list => "dead-letters",
        "dlq" => "dead-letters",
        "queues" | "compare" => "queues",
        "nodes" => "nodes",
        "clients" => "clients",
        "exchanges" => "exchanges",
        "alerts" => "alerts",
        "audit" | "jobs" => "audit",
        "access" => "access",
        "advisor" => "advisor",
        "brokers" if path.ends_with("/nodes") => "nodes",
        "brokers" if path.ends_with("/advisor") => "advisor",
        "brokers" => "overview",
        _ => "",
    }
}
