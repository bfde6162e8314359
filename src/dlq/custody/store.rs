//! The record store: a message as a row of `custody_messages` (`Taken`, made by intake and by
//! imports), what a queue's rows hold against its size budget, rows written in one transaction
//! (the pool's `synchronous = FULL`), and rows taken out (an admin's delete, the retention of
//! replayed records).

use chrono::Utc;
use lapin::BasicProperties;

use super::copy::encode_properties;
use super::switch::budget;
use crate::config::CustodyRule;
use crate::dlq::message::{self, SnapshotMessage};
use crate::dlq::mover::peeked_parts;
use crate::storage::custody::{Deleted, NewRecord, Queue};
use crate::storage::Store;

/// (broker, vhost, queue)
pub(super) type QueueId = (String, String, String);

/// `id` as the store names a queue.
pub(super) fn place(id: &QueueId) -> Queue<'_> {
    (&id.0, &id.1, &id.2)
}

/// Gives records taken in before their error's group was kept (migration 0023) their group,
/// so that a filter by group finds them too. Reads only the error texts; once, at start.
pub async fn fill_error_groups(store: &Store) -> Result<u64, sqlx::Error> {
    let groups: Vec<(i64, String)> = store
        .ungrouped_errors()
        .await?
        .into_iter()
        .map(|(id, error)| (id, crate::dlq::framework::error_group(&error)))
        .collect();
    store.set_error_groups(&groups).await?;
    Ok(groups.len() as u64)
}

/// One delivery (or imported message) as a row: made by intake and by `dlq::transfer`.
#[derive(Debug)]
pub struct Taken {
    pub(super) tag: u64,
    pub(in crate::dlq) exchange: String,
    pub(in crate::dlq) routing_key: String,
    pub(in crate::dlq) properties: Vec<u8>,
    properties_json: String,
    pub(in crate::dlq) body: Vec<u8>,
    pub(in crate::dlq) summary: SnapshotMessage,
    redelivered: bool,
    /// Which message it is (`message::identity`): intake flags a redelivered message only
    /// when custody already holds one with the same fingerprint.
    fingerprint: String,
    /// The application's error (`message::error_line`) and its group, read from the summary.
    error: Option<String>,
    error_group: Option<String>,
}

impl Taken {
    /// Bytes it holds for the custody's budget: body and properties.
    pub(in crate::dlq) fn size(&self) -> u64 {
        (self.body.len() + self.properties.len()) as u64
    }

    /// It as the store writes it.
    pub(super) fn record(&self) -> NewRecord<'_> {
        NewRecord {
            exchange: &self.exchange,
            routing_key: &self.routing_key,
            properties: &self.properties,
            properties_json: &self.properties_json,
            body: &self.body,
            size: self.size() as i64,
            message_id: self.summary.message_id.as_deref(),
            reason: self.summary.reason.as_deref(),
            original_queue: self.summary.original_queue.as_deref(),
            error: self.error.as_deref(),
            error_group: self.error_group.as_deref(),
            redelivered: self.redelivered,
            fingerprint: &self.fingerprint,
        }
    }
}

/// A message as a row: what triage reads of it beside what a replay publishes again.
pub(in crate::dlq) fn kept(
    tag: u64,
    route: (&str, &str),
    redelivered: bool,
    properties: &BasicProperties,
    body: Vec<u8>,
) -> Result<Taken, String> {
    let encoded = encode_properties(properties)?;
    let shown = peeked_parts(route, redelivered, properties, &body, usize::MAX);
    let properties_json = serde_json::Value::Object(shown.properties.clone()).to_string();
    let fingerprint = message::identity(&body, &shown.properties);
    let mut summary = message::summarize(0, String::new(), shown);
    // What the row keeps of the summary is its id, death and error; the payload's text (a
    // second copy of the body) goes now, not with the batch.
    summary.message.payload = String::new();
    let (error, error_group) = (message::error_line(&summary), message::error_group(&summary));
    Ok(Taken {
        tag,
        exchange: route.0.to_string(),
        routing_key: route.1.to_string(),
        properties: encoded,
        properties_json,
        body,
        summary,
        redelivered,
        fingerprint,
        error,
        error_group,
    })
}

/// Bytes a queue's records hold in custody (not yet replayed).
pub(super) async fn bytes_kept(store: &Store, id: &QueueId) -> Result<u64, sqlx::Error> {
    store.custody_bytes(place(id)).await
}

/// Commits a batch so that it survives power loss (SQLite's `synchronous = FULL`, a
/// PostgreSQL commit). Under `fence` (the broker's lease), the transaction checks the lease
/// first and keeps nothing once another replica took it: `false`.
pub(super) async fn commit(
    store: &Store,
    id: &QueueId,
    batch: &[Taken],
    fence: Option<&crate::storage::Held>,
) -> Result<bool, sqlx::Error> {
    let records: Vec<NewRecord<'_>> = batch.iter().map(Taken::record).collect();
    let Some(held) = fence else {
        store.keep_records(place(id), Utc::now().timestamp(), &records).await?;
        return Ok(true);
    };
    let mut tx = store.begin().await?;
    if !tx.fence(held).await? {
        return Ok(false);
    }
    tx.keep_records(place(id), Utc::now().timestamp(), &records).await?;
    tx.commit().await?;
    Ok(true)
}

/// Why an import kept nothing.
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    #[error("custody of this queue holds {kept} bytes; {adding} more would pass its size budget of {budget} bytes")]
    Budget { kept: u64, adding: u64, budget: u64 },
    /// The lines read differently the second time (a bug: they were checked first).
    #[error("the import's lines read differently when kept: {0}")]
    Changed(String),
    #[error(transparent)]
    Storage(#[from] sqlx::Error),
}

/// Puts imported messages (`dlq::transfer`) into the custody of a queue, all or none, within
/// its size budget; returns how many. `adding` is what they add (count, bytes), known before
/// the first batch is made: only one batch is in memory at a time, and all go in one
/// transaction, committed as intake commits.
pub async fn import<B>(
    store: &Store,
    rules: &[CustodyRule],
    (broker, vhost, queue): (&str, &str, &str),
    (count, adding): (usize, u64),
    batches: B,
) -> Result<usize, ImportError>
where
    B: Iterator<Item = Result<Vec<Taken>, String>>,
{
    let id = (broker.to_string(), vhost.to_string(), queue.to_string());
    let budget = budget(rules, broker, vhost, queue);
    let kept = bytes_kept(store, &id).await?;
    if kept + adding > budget {
        return Err(ImportError::Budget { kept, adding, budget });
    }
    let mut tx = store.begin().await?;
    let now = Utc::now().timestamp();
    let mut imported = 0;
    for batch in batches {
        let batch = batch.map_err(ImportError::Changed)?;
        let records: Vec<NewRecord<'_>> = batch.iter().map(Taken::record).collect();
        tx.keep_records(place(&id), now, &records).await?;
        imported += batch.len();
    }
    if imported != count {
        return Err(ImportError::Changed(format!("{imported} lines read again, {count} checked")));
    }
    tx.commit().await?;
    Ok(imported)
}

/// Records of replays older than this many seconds are deleted (the global retention).
pub async fn prune_replayed(store: &Store, before: i64) -> Result<u64, sqlx::Error> {
    store.prune_replayed(before).await
}

/// Why a record was not deleted.
#[derive(Debug, thiserror::Error)]
pub enum DeleteError {
    #[error("no record {0} in this queue's custody")]
    NotFound(i64),
    /// Claimed by a running replay (which may be publishing it now), or replayed already.
    #[error("record {id} is {state}, not held: only a held record can be deleted")]
    NotHeld { id: i64, state: String },
    #[error(transparent)]
    Storage(#[from] sqlx::Error),
}

/// Deletes one held record (an admin's way out for a record that can never be replayed);
/// returns its message id. The state guard is the one `claim` uses, so a record a replay has
/// claimed is never deleted under it.
pub async fn delete(store: &Store, queue: (&str, &str, &str), id: i64) -> Result<Option<String>, DeleteError> {
    match store.delete_held(queue, id).await? {
        Deleted::Deleted(message_id) => Ok(message_id),
        Deleted::NotHeld(state) => Err(DeleteError::NotHeld { id, state }),
        Deleted::NotFound => Err(DeleteError::NotFound(id)),
    }
}
