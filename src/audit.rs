//! The audit log: who did what to which queue, who logged in, who changed accounts or alert
//! settings, when, and how it ended.
//!
//! Entries have a [`Kind`], so a view can show broker actions without the logins around them,
//! and every view pages through the whole log by id ([`list`]). Failed logins are aggregated
//! ([`login_failed`]): anyone who can reach the login form can fail to log in, and a row per
//! attempt let them bury real actions (520 rows in 1.7 s).
//!
//! The fates of the messages a move touched are the dead-letter code's, in `dlq::audit`.

use crate::storage::audit::{FailedLogin, NewEntry, Span};
pub use crate::storage::audit::{Kind, Record};
use crate::storage::Store;

/// One action as it starts.
pub struct Entry<'a> {
    pub actor: &'a str,
    pub broker: &'a str,
    pub vhost: &'a str,
    pub queue: &'a str,
    pub action: &'a str,
    pub request: String,
    /// The replica that runs it (`Replica::id`): while that replica's heartbeat lasts, no other
    /// marks the action interrupted (`dlq::recover_dead_replicas`).
    pub run_by: &'a str,
}

/// Records a broker action before it runs; returns its id for `finish`. The id comes only once
/// the row is committed: `insert ... returning` hands its row over before the statement ends, and
/// on a full disk a requeue ran with an id whose commit had failed (issue 16, case 7).
pub async fn start(store: &Store, entry: Entry<'_>) -> Result<i64, sqlx::Error> {
    let id = store
        .insert_entry(NewEntry {
            at: chrono::Utc::now().timestamp(),
            kind: Kind::Action,
            actor: entry.actor,
            source: None,
            broker: entry.broker,
            vhost: entry.vhost,
            queue: entry.queue,
            action: entry.action,
            request: &entry.request,
            outcome: "started",
            detail: None,
            run_by: Some(entry.run_by),
        })
        .await?;
    // One line per action for the log collector; the request (filters, edits) stays in the
    // audit log, where roles decide who reads it.
    tracing::info!(
        audit_id = id,
        actor = entry.actor,
        broker = entry.broker,
        vhost = entry.vhost,
        queue = entry.queue,
        action = entry.action,
        "action started"
    );
    Ok(id)
}

/// Records an account change that was made (`user add`, `token revoke`, ...), by `actor`.
pub async fn account(
    store: &Store,
    actor: &str,
    action: &str,
    request: &serde_json::Value,
) -> Result<i64, sqlx::Error> {
    let request = request.to_string();
    let id = store.insert_entry(settings(Kind::Account, actor, action, &request, "done", None)).await?;
    tracing::info!(audit_id = id, actor, action, "account changed");
    Ok(id)
}

/// A change to the alerts' settings as it is recorded: `action` says what (`rule add`, `rule
/// edit`, `rule delete`, `silence add`, `silence end`, `test notification`), `request` names what
/// it was about, `detail` says it in words for the page. Written once the change was made (or,
/// for a test notification, tried): a refused change changed nothing.
pub struct AlertsChange<'a> {
    pub actor: &'a str,
    pub action: &'a str,
    pub request: serde_json::Value,
    /// `done`, or `failed` for a test notification that was not delivered.
    pub outcome: &'a str,
    pub detail: String,
}

/// Records a change to the alerts' settings (kind `alerts`).
pub async fn alerts(store: &Store, change: AlertsChange<'_>) -> Result<i64, sqlx::Error> {
    let request = change.request.to_string();
    let entry = settings(Kind::Alerts, change.actor, change.action, &request, change.outcome, Some(&change.detail));
    let id = store.insert_entry(entry).await?;
    tracing::info!(
        audit_id = id,
        actor = change.actor,
        action = change.action,
        outcome = change.outcome,
        "alert settings changed"
    );
    Ok(id)
}

/// A change to the advisor's acknowledgements as it is recorded (`advisor acknowledge`,
/// `advisor unacknowledge`): on the finding's broker, vhost and queue (empty for a finding
/// about a connection, which `request` names), written once the change was made.
pub struct AdvisorChange<'a> {
    pub actor: &'a str,
    pub broker: &'a str,
    pub vhost: &'a str,
    pub queue: &'a str,
    pub action: &'a str,
    pub request: serde_json::Value,
    /// The change in words, with the reason as given.
    pub detail: String,
}

/// Records a change to the advisor's acknowledgements (kind `action`: it is about a broker's
/// queue or connection, as moves and purges are, and every role that reads those reads it).
pub async fn advisor(store: &Store, change: AdvisorChange<'_>) -> Result<i64, sqlx::Error> {
    let request = change.request.to_string();
    let id = store
        .insert_entry(NewEntry {
            at: chrono::Utc::now().timestamp(),
            kind: Kind::Action,
            actor: change.actor,
            source: None,
            broker: change.broker,
            vhost: change.vhost,
            queue: change.queue,
            action: change.action,
            request: &request,
            outcome: "done",
            detail: Some(&change.detail),
            run_by: None,
        })
        .await?;
    tracing::info!(audit_id = id, actor = change.actor, broker = change.broker, action = change.action, "advisor");
    Ok(id)
}

/// Records a successful login of `name` from `peer` (the client's address): one row each, as
/// only someone with an account can make them.
pub async fn login_succeeded(store: &Store, name: &str, peer: &str) -> Result<(), sqlx::Error> {
    let request = serde_json::json!({ "peer": peer }).to_string();
    let id = store
        .insert_entry(NewEntry {
            at: chrono::Utc::now().timestamp(),
            kind: Kind::Login,
            actor: name,
            source: Some(peer),
            broker: "",
            vhost: "",
            queue: "",
            action: "login",
            request: &request,
            outcome: "done",
            detail: None,
            run_by: None,
        })
        .await?;
    tracing::info!(audit_id = id, actor = name, peer, "login");
    Ok(())
}

/// An entry about warren's own settings (accounts, alerts): no broker, vhost or queue.
fn settings<'a>(
    kind: Kind,
    actor: &'a str,
    action: &'a str,
    request: &'a str,
    outcome: &'a str,
    detail: Option<&'a str>,
) -> NewEntry<'a> {
    NewEntry {
        at: chrono::Utc::now().timestamp(),
        kind,
        actor,
        source: None,
        broker: "",
        vhost: "",
        queue: "",
        action,
        request,
        outcome,
        detail,
        run_by: None,
    }
}

/// Attempted names a source gets a row of its own for, per minute; its further names share one
/// row ([`OTHER_NAMES`]), so trying one password against many names adds no more rows than that.
pub const NAMES_PER_SOURCE: i64 = 5;
/// Rows failed logins get per minute in all; then every further source and name shares one row
/// ([`OTHER_SOURCES`]). At most `ROWS_PER_MINUTE + 1` rows a minute whatever the number of
/// attacking addresses, a few tens of thousands a day.
pub const ROWS_PER_MINUTE: i64 = 40;
/// The name of the row that counts a source's attempts beyond [`NAMES_PER_SOURCE`] names.
pub const OTHER_NAMES: &str = "(other names)";
/// The source of the row that counts a minute's attempts beyond [`ROWS_PER_MINUTE`] rows.
pub const OTHER_SOURCES: &str = "(other sources)";

/// Counts a failed login (`throttled`: refused before the password was checked) of the name
/// typed (already shortened: it is hostile input) from `source` (an IPv4 address, or an IPv6
/// client's /64 as the throttle keys it, since one host has the whole /64 to choose from). The
/// attempt adds to its minute's row for that source and name, or creates it, never a row of its
/// own. The caps are read before the upsert, not in one transaction: concurrent attempts can
/// exceed them by the number of requests in flight, which is bounded and harmless.
pub async fn login_failed(
    store: &Store,
    name: &str,
    source: &str,
    throttled: bool,
    now: i64,
) -> Result<(), sqlx::Error> {
    let bucket = now.div_euclid(60);
    let (source, name) = failed_login_row(store, bucket, source, name).await?;
    let request = serde_json::json!({ "peer": source }).to_string();
    store
        .count_failed_login(FailedLogin {
            at: now,
            bucket,
            name: &name,
            source: &source,
            request: &request,
            detail: "unknown user, wrong password or disabled account, or refused by the throttle before the check",
            throttled,
        })
        .await?;
    // The source only: the name typed is hostile input, and a password typed as a name is
    // a secret (the audit log keeps it for admins).
    tracing::info!(source, throttled, "login failed");
    Ok(())
}

/// The (source, name) of the row a failed login counts in: its own, else its source's
/// [`OTHER_NAMES`] row, else the minute's [`OTHER_SOURCES`] row.
async fn failed_login_row(
    store: &Store,
    bucket: i64,
    source: &str,
    name: &str,
) -> Result<(String, String), sqlx::Error> {
    let rows = store.failed_login_rows(bucket, source, name, OTHER_NAMES).await?;
    let (own, other_names, names, rows) = (rows.own, rows.other_names, rows.names, rows.rows);
    let room = rows < ROWS_PER_MINUTE;
    Ok(if own || (names < NAMES_PER_SOURCE && room) {
        (source.to_string(), name.to_string())
    } else if other_names || room {
        (source.to_string(), OTHER_NAMES.to_string())
    } else {
        (OTHER_SOURCES.to_string(), OTHER_NAMES.to_string())
    })
}

/// One entry by id.
pub async fn get(store: &Store, id: i64) -> Result<Option<Record>, sqlx::Error> {
    store.entry(id).await
}

/// What a caller who is not an admin sees instead of an account name.
pub const HIDDEN: &str = "(hidden)";

impl Record {
    /// Hides every account name in the entry except `own_actor` (the caller's own, which they
    /// know): who acted, and the user or token an account change was about. Account names help
    /// a password guesser, which is why only admins may list users; the audit log must not list
    /// them either.
    pub fn hide_account_names(&mut self, own_actor: &str) {
        if self.actor != own_actor {
            self.actor = HIDDEN.to_string();
        }
        if self.kind == Kind::Account {
            if let Some(name) = self.request.get_mut("name") {
                *name = serde_json::Value::String(HIDDEN.to_string());
            }
        }
    }
}

/// Which part of the log to read: newest first, `per_page` entries below `before` or just
/// above `after` (ids, from a previous page's [`Listing`]), of one kind or all.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Page {
    pub kind: Option<Kind>,
    pub before: Option<i64>,
    pub after: Option<i64>,
    pub per_page: i64,
}

/// A page of entries, newest first, and the cursors of the pages around it.
#[derive(Debug)]
pub struct Listing {
    pub records: Vec<Record>,
    /// `before` for the next older page, if there are older entries.
    pub older: Option<i64>,
    /// `after` for the next newer page, if there are newer entries.
    pub newer: Option<i64>,
}

/// Reads one page by id, so paging stays put while new entries arrive (an aggregated row keeps
/// the id of its first attempt).
pub async fn list(store: &Store, page: &Page) -> Result<Listing, sqlx::Error> {
    // Just above `after` means the lowest ids above it: read upwards, then turn the page round.
    let span = Span {
        kind: page.kind,
        below: page.before.unwrap_or(i64::MAX),
        above: page.after.unwrap_or(0),
        ascending: page.after.is_some(),
        limit: page.per_page,
    };
    let mut records = store.entries(span).await?;
    if page.after.is_some() {
        records.reverse();
    }
    // The ids the page spans; an empty page spans its cursor.
    let (highest, lowest) = match (records.first(), records.last()) {
        (Some(first), Some(last)) => (first.id, last.id),
        _ => (
            page.before.map(|b| b - 1).or(page.after).unwrap_or(i64::MAX),
            page.after.map(|a| a.saturating_add(1)).or(page.before).unwrap_or(0),
        ),
    };
    let newer = store.any_entry_beyond(page.kind, highest, true).await?;
    let older = store.any_entry_beyond(page.kind, lowest, false).await?;
    Ok(Listing { records, older: older.then_some(lowest), newer: newer.then_some(highest) })
}
