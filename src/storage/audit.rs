//! The audit log as stored: one row per entry (failed logins aggregated per source, name and
//! minute), read in pages by id. What an entry means and who may read it is `audit`'s.

use async_trait::async_trait;
use serde::Serialize;

use super::Result;

/// What an entry is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// A move, delete or purge on a broker.
    Action,
    /// A login: one row per success, one aggregated row per source, name and minute for failures.
    Login,
    /// A user or API token added, removed or changed.
    Account,
    /// An alert rule created, edited or deleted, a silence set or ended, or a test notification
    /// sent: the settings of the alerts page, as `Account` is the access page's.
    Alerts,
}

impl Kind {
    pub const ALL: [Kind; 4] = [Kind::Action, Kind::Login, Kind::Account, Kind::Alerts];

    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Action => "action",
            Kind::Login => "login",
            Kind::Account => "account",
            Kind::Alerts => "alerts",
        }
    }

    pub fn parse(text: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.as_str() == text)
    }
}

/// One entry as read.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Record {
    pub id: i64,
    pub kind: Kind,
    /// Unix seconds; for an aggregated failed-login row, its first attempt.
    #[serde(flatten, serialize_with = "crate::times::at")]
    #[schema(schema_with = crate::times::schema::at)]
    pub at: i64,
    /// Who acted; for a login, the name typed.
    pub actor: String,
    pub broker: String,
    pub vhost: String,
    pub queue: String,
    pub action: String,
    pub request: serde_json::Value,
    pub outcome: String,
    pub moved: i64,
    pub failed: i64,
    pub message_ids: serde_json::Value,
    pub detail: Option<String>,
    /// Logins: the client's address (for aggregated failures an IPv6 client's /64).
    pub source: Option<String>,
    /// Attempts counted in this row: more than 1 only for aggregated failed logins.
    pub attempts: i64,
    /// Of those, how many the throttle refused before checking the password.
    pub throttled: i64,
    /// Aggregated rows: unix seconds of the latest attempt.
    #[serde(flatten, serialize_with = "crate::times::last_at")]
    #[schema(schema_with = crate::times::schema::last_at)]
    pub last_at: Option<i64>,
}

/// An entry to write, a row of its own.
#[derive(Debug, Clone)]
pub struct NewEntry<'a> {
    pub at: i64,
    pub kind: Kind,
    pub actor: &'a str,
    pub source: Option<&'a str>,
    pub broker: &'a str,
    pub vhost: &'a str,
    pub queue: &'a str,
    pub action: &'a str,
    /// JSON.
    pub request: &'a str,
    pub outcome: &'a str,
    pub detail: Option<&'a str>,
    /// The replica that runs a broker action (`Replica::id`), for recovery when it dies; none
    /// for entries that record what was done already.
    pub run_by: Option<&'a str>,
}

/// A failed login, counted into the row of its minute (`bucket`), source and name.
#[derive(Debug, Clone)]
pub struct FailedLogin<'a> {
    pub at: i64,
    pub bucket: i64,
    pub name: &'a str,
    pub source: &'a str,
    /// JSON.
    pub request: &'a str,
    pub detail: &'a str,
    pub throttled: bool,
}

/// What a minute's failed-login rows hold already, for the caps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FailedLoginRows {
    /// The source has a row for this name.
    pub own: bool,
    /// The source has its row for other names.
    pub other_names: bool,
    /// The source's rows for single names.
    pub names: i64,
    /// All rows of the minute.
    pub rows: i64,
}

/// Which entries to read: ids strictly between `above` and `below`, of one kind or all, at most
/// `limit`, from the lowest id up (`ascending`) or from the highest down.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span {
    pub kind: Option<Kind>,
    pub below: i64,
    pub above: i64,
    pub ascending: bool,
    pub limit: i64,
}

#[async_trait]
pub trait AuditLog {
    /// Writes an entry and returns its id once the row is committed (never before: on a full
    /// disk an action once ran with an id whose commit had failed, issue 16, case 7).
    async fn insert_entry(&self, entry: NewEntry<'_>) -> Result<i64>;
    /// `other_names` is the name of the row that counts a source's further names.
    async fn failed_login_rows(
        &self,
        bucket: i64,
        source: &str,
        name: &str,
        other_names: &str,
    ) -> Result<FailedLoginRows>;
    /// Adds the attempt to its row (`attempts`, `throttled`, `last_at`), creating it if needed.
    async fn count_failed_login(&self, login: FailedLogin<'_>) -> Result<()>;
    async fn entry(&self, id: i64) -> Result<Option<Record>>;
    async fn entries(&self, span: Span) -> Result<Vec<Record>>;
    /// Whether an entry of `kind` (or any) has an id above `id` (`above`) or below it.
    async fn any_entry_beyond(&self, kind: Option<Kind>, id: i64, above: bool) -> Result<bool>;
}

/// A stored JSON column as a value; text that is not JSON stays a string (old rows).
pub(super) fn json(text: String) -> serde_json::Value {
    serde_json::from_str(&text).unwrap_or(serde_json::Value::String(text))
}
