//! Custody's records (`custody_messages`) and the admins' switches (`custody_queues`) as
//! stored: a batch of taken messages written in one transaction, the records a search matches,
//! the claims of a replay and their settling, deletes and retention. What decides (when a
//! delivery is acked, when a record is marked replayed, which queue is in custody, what a
//! filter means) is `dlq::custody`'s; each method here is the database's side of one operation.
//!
//! A record is claimed, replayed or deleted by one process only, on either backend: claims and
//! deletes are guarded by the record's state in the statement itself (`state = 'held'`), which
//! SQLite's single writer makes atomic and PostgreSQL's row locks do too (claims take
//! `FOR UPDATE SKIP LOCKED`, so two replicas' replays never wait on, or take, each other's).
//!
//! PostgreSQL's text cannot hold a NUL, which an AMQP short string or header may: the body and
//! the encoded properties are `bytea` on both backends (what a replay publishes, byte for byte),
//! and PostgreSQL's text columns (the message id, the error, the JSON form of the properties)
//! hold U+FFFD in its place, so that intake keeps such a message rather than refuse its batch.

use std::collections::HashMap;

use async_trait::async_trait;
use serde::Serialize;

use super::Result;

/// (broker, vhost, queue)
pub type Queue<'a> = (&'a str, &'a str, &'a str);

/// A taken message to write as a held record.
#[derive(Debug, Clone, Copy)]
pub struct NewRecord<'a> {
    pub exchange: &'a str,
    pub routing_key: &'a str,
    /// The AMQP content-header properties, encoded: what a replay publishes again.
    pub properties: &'a [u8],
    /// The properties as the browser shows them (JSON).
    pub properties_json: &'a str,
    pub body: &'a [u8],
    /// Bytes of body and properties, for the size budget.
    pub size: i64,
    pub message_id: Option<&'a str>,
    pub reason: Option<&'a str>,
    pub original_queue: Option<&'a str>,
    pub error: Option<&'a str>,
    pub error_group: Option<&'a str>,
    /// The broker delivered it before: kept as a possible duplicate only when custody already
    /// holds a record of the queue with the same fingerprint (decided in the insert).
    pub redelivered: bool,
    pub fingerprint: &'a str,
}

/// One record as the list shows it.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema, sqlx::FromRow)]
#[schema(as = CustodyRecord)]
pub struct Record {
    pub id: i64,
    #[serde(flatten, serialize_with = "crate::times::received_at")]
    #[schema(schema_with = crate::times::schema::received_at)]
    pub received_at: i64,
    pub message_id: Option<String>,
    pub reason: Option<String>,
    pub original_queue: Option<String>,
    pub error: Option<String>,
    pub routing_key: String,
    /// The body's length in bytes.
    #[sqlx(try_from = "i64")]
    pub size: u64,
    pub redelivered: bool,
    pub state: String,
}

/// The columns a [`Record`] is read from, first in every query that lists records.
pub(super) const RECORD_COLUMNS: &str =
    "id, received_at, message_id, reason, original_queue, error, routing_key, length(body) as size, redelivered, state";

/// A record with its message: what the record page shows, an edit changes, an export writes.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct StoredMessage {
    #[sqlx(flatten)]
    pub record: Record,
    pub exchange: String,
    pub properties: Vec<u8>,
    pub properties_json: String,
    pub body: Vec<u8>,
}

/// The columns of a [`StoredMessage`] after [`RECORD_COLUMNS`].
pub(super) const MESSAGE_COLUMNS: &str = "exchange, properties, properties_json, body";

/// A record a regular expression is to be matched on (by the caller: neither backend has
/// Rust's syntax), with the first bytes of its body and of its properties' JSON.
pub type Candidate = (Record, Vec<u8>, Vec<u8>);

/// Which records a search reads.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum States {
    /// Held only: what a replay may claim.
    Held,
    /// Held or claimed by a running replay: what custody still holds.
    #[default]
    Kept,
}

/// One step of a JSON path (`order.items[0].sku`).
#[derive(Debug, Clone, PartialEq)]
pub enum PathStep {
    Key(String),
    Index(usize),
}

/// A value in a JSON payload: present, or equal to `expected` (a string as it is, anything
/// else as its JSON text).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct JsonSearch {
    /// None: a path that does not read, which matches nothing.
    pub steps: Option<Vec<PathStep>>,
    pub expected: Option<String>,
}

/// What a search asks of a queue's records, in the terms of the browser's filter
/// (`dlq::message::Filter`), which `dlq::custody` translates. Text comparisons ignore the case of
/// ASCII letters only, on both backends, as SQLite's `like` and `lower` do.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Search {
    pub states: States,
    /// Only records with a larger id (a page's cursor).
    pub after: Option<i64>,
    pub reason: Option<String>,
    pub original_queue: Option<String>,
    /// Part of the application's error.
    pub error: Option<String>,
    pub error_group: Option<String>,
    /// Part of the body or of the properties' JSON, headers included.
    pub text: Option<String>,
    /// Texts of which a candidate holds one, in its body or properties (a regular expression's
    /// literals: a cheap first look before the expression runs). Case-sensitive texts; a
    /// backend may pass more rows, never fewer.
    pub literals: Option<Vec<String>>,
    /// A header by its exact name, with part of its value.
    pub header: Option<String>,
    pub header_part: Option<String>,
    pub json: Option<JsonSearch>,
}

/// How a regular expression's candidates are read: ids in `ids` (inclusive), in order, until
/// `max_bytes` of them are read; each with the first `head_bytes` of its body and properties.
#[derive(Debug, Clone, Copy)]
pub struct Scan {
    pub ids: (i64, i64),
    pub head_bytes: usize,
    pub max_bytes: usize,
}

/// A queue's records in one state (`custody_counts`) or with one reason, original queue and
/// error (`custody_triage`): how many, their bytes, and when the first and last were taken.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct Tally {
    pub vhost: String,
    pub queue: String,
    pub state: String,
    pub reason: Option<String>,
    pub original_queue: Option<String>,
    pub error: Option<String>,
    pub records: i64,
    pub bytes: i64,
    pub first_at: Option<i64>,
    pub last_at: Option<i64>,
}

/// How a delete of a held record ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Deleted {
    /// Deleted; its message id.
    Deleted(Option<String>),
    /// Not held (claimed by a replay, or replayed): left as it is.
    NotHeld(String),
    NotFound,
}

#[async_trait]
pub trait Custody {
    /// Writes `records` into `queue`'s custody, taken at `received_at`, in one durable
    /// transaction: all or none.
    async fn keep_records(&self, queue: Queue<'_>, received_at: i64, records: &[NewRecord<'_>]) -> Result<()>;
    /// Bytes of `queue`'s records held or claimed (not replayed).
    async fn custody_bytes(&self, queue: Queue<'_>) -> Result<u64>;
    /// Records with an error and no error group (taken in before groups were kept).
    async fn ungrouped_errors(&self) -> Result<Vec<(i64, String)>>;
    /// Sets each record's error group, in one transaction.
    async fn set_error_groups(&self, groups: &[(i64, String)]) -> Result<()>;
    /// Deletes records replayed before `before` (unix seconds); returns how many.
    async fn prune_replayed(&self, before: i64) -> Result<u64>;
    /// Deletes record `id` of `queue` if it is held, in one statement guarded by the state.
    async fn delete_held(&self, queue: Queue<'_>, id: i64) -> Result<Deleted>;

    /// The admins' decisions of a broker's queues: (vhost, queue, `on` or `released`).
    async fn custody_switches(&self, broker: &str) -> Result<Vec<(String, String, String)>>;
    /// Records an admin's decision (`on` or `released`) for a queue.
    async fn set_custody_switch(&self, queue: Queue<'_>, state: &str, at: i64, by: &str) -> Result<()>;

    /// A broker's records by queue and state (reason, original queue and error left empty).
    async fn custody_counts(&self, broker: &str) -> Result<Vec<Tally>>;
    /// A queue's records by state, reason, original queue and error, in one scan.
    async fn custody_triage(&self, queue: Queue<'_>) -> Result<Vec<Tally>>;
    /// How many of a queue's records were replayed since the queue's current incarnation began
    /// (`queues.incarnation_since`): a queue deleted and re-created under the same name does not
    /// count the replays from the old one's custody (issue 34, case 6).
    async fn custody_replayed(&self, queue: Queue<'_>) -> Result<i64>;
    /// Record `id` of `queue` with its message.
    async fn custody_message(&self, queue: Queue<'_>, id: i64) -> Result<Option<StoredMessage>>;
    /// The records with these ids with their messages, by id.
    async fn custody_messages(&self, ids: &[i64]) -> Result<Vec<StoredMessage>>;

    /// The first `limit` records of `queue` that `search` matches, by id.
    async fn custody_records(&self, queue: Queue<'_>, search: &Search, limit: i64) -> Result<Vec<Record>>;
    /// The ids in `ids` (inclusive) of `queue`'s records that `search` matches, in order.
    async fn custody_ids(&self, queue: Queue<'_>, search: &Search, ids: (i64, i64)) -> Result<Vec<i64>>;
    /// The records with these ids, by id.
    async fn custody_records_by_id(&self, ids: &[i64]) -> Result<Vec<Record>>;
    /// The smallest and largest id of `queue`'s records, if it has any.
    async fn custody_id_span(&self, queue: Queue<'_>) -> Result<Option<(i64, i64)>>;
    /// The next records a regular expression runs on (`Scan`), which `search` (literals
    /// included) passes.
    async fn custody_candidates(&self, queue: Queue<'_>, search: &Search, scan: Scan) -> Result<Vec<Candidate>>;

    /// Every record claimed by a dead replica back to held: one that recorded no replica (claims
    /// from before replicas), or one other than `survivor` whose heartbeat lease is expired or
    /// missing by the database's clock (as [`super::Fates::mark_interrupted`]). Returns how many.
    async fn recover_claims(&self, survivor: &str) -> Result<u64>;
    /// Claims for `job`, run by replica `replica`, those of `ids` that are held and that no
    /// other claim holds at this moment; returns the ids it got, sorted.
    async fn claim_records(&self, job: &str, replica: &str, ids: &[i64]) -> Result<Vec<i64>>;
    /// In one transaction: `replayed` (record, where its copy went) marked replayed at `at`,
    /// `failed` back to held.
    async fn settle_records(&self, replayed: &[(i64, String)], failed: &[i64], at: i64) -> Result<()>;
    /// What `job` still has claimed back to held; returns how many.
    async fn unclaim_records(&self, job: &str) -> Result<u64>;
    /// The encoded properties and body of each of these records.
    async fn replay_parts(&self, ids: &[i64]) -> Result<HashMap<i64, (Vec<u8>, Vec<u8>)>>;
}

/// Custody's writes that commit with others (an import's batches, all or none).
#[async_trait]
pub trait CustodyWrites {
    async fn keep_records(&mut self, queue: Queue<'_>, received_at: i64, records: &[NewRecord<'_>]) -> Result<()>;
}

/// Statements per list of ids: SQLite allows 32,766 parameters, and 100,000 one-row
/// statements took seconds.
pub(super) const IDS_PER_STATEMENT: usize = 500;

/// A LIKE pattern that matches `text` anywhere, its own `%`, `_` and `\` taken literally
/// (`escape '\'`).
pub(super) fn like_pattern(text: &str) -> String {
    let mut pattern = String::with_capacity(text.len() + 2);
    pattern.push('%');
    for c in text.chars() {
        if matches!(c, '%' | '_' | '\\') {
            pattern.push('\\');
        }
        pattern.push(c);
    }
    pattern.push('%');
    pattern
}

/// Whether JSON writes `text` as it is (nothing in it is escaped), so that a value that shows
/// as `text` holds it verbatim in the JSON text.
pub(super) fn verbatim_in_json(text: &str) -> bool {
    !text.chars().any(|c| c == '"' || c == '\\' || c.is_control())
}
