//! The record store: a message as a row of `custody_messages` (`Taken`, made by intake and by
//! imports), what a queue's rows hold against its size budget, rows written in one transaction
//! (the pool's `synchronous = FULL`), and rows taken out (an admin's delete, the retention of
//! replayed records).

use chrono::Utc;
use lapin::BasicProperties;
use sqlx::Row;

use super::copy::encode_properties;
use super::switch::budget;
use crate::config::CustodyRule;
use crate::dlq::message::{self, SnapshotMessage};
use crate::dlq::mover::peeked_parts;
use crate::history::Db;

/// (broker, vhost, queue)
pub(super) type QueueId = (String, String, String);

/// Gives records taken in before their error's group was kept (migration 0023) their group,
/// so that a filter by group finds them too. Reads only the error texts; once, at start.
pub async fn fill_error_groups(db: &Db) -> Result<u64, sqlx::Error> {
    let rows: Vec<(i64, String)> =
        sqlx::query_as("select id, error from custody_messages where error_group is null and error is not null")
            .fetch_all(db)
            .await?;
    let mut tx = db.begin().await?;
    for (id, error) in &rows {
        sqlx::query("update custody_messages set error_group = ? where id = ?")
            .bind(crate::dlq::framework::error_group(error))
            .bind(id)
            .execute(&mut *tx)
            .await?;
    }
    tx.commit().await?;
    Ok(rows.len() as u64)
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
}

impl Taken {
    /// Bytes it holds for the custody's budget: body and properties.
    pub(in crate::dlq) fn size(&self) -> u64 {
        (self.body.len() + self.properties.len()) as u64
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
    })
}

/// Bytes a queue's records hold in custody (not yet replayed).
pub(super) async fn bytes_kept(db: &Db, id: &QueueId) -> Result<u64, sqlx::Error> {
    let row = sqlx::query(
        "select coalesce(sum(size), 0) from custody_messages
         where broker = ? and vhost = ? and queue = ? and state in ('held', 'claimed')",
    )
    .bind(&id.0)
    .bind(&id.1)
    .bind(&id.2)
    .fetch_one(db)
    .await?;
    Ok(row.get::<i64, _>(0).max(0) as u64)
}

/// Commits a batch so that it survives power loss (the pool's `synchronous = FULL`).
pub(super) async fn commit(db: &Db, id: &QueueId, batch: &[Taken]) -> Result<(), sqlx::Error> {
    let mut tx = db.begin().await?;
    let now = Utc::now().timestamp();
    for t in batch {
        insert(&mut tx, id, now, t).await?;
    }
    tx.commit().await
}

async fn insert(conn: &mut sqlx::SqliteConnection, id: &QueueId, now: i64, t: &Taken) -> Result<(), sqlx::Error> {
    sqlx::query(
        "insert into custody_messages (broker, vhost, queue, received_at, exchange, routing_key, properties,
         properties_json, body, size, message_id, reason, original_queue, error, redelivered, body_nul,
         fingerprint, error_group)
         values (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14,
                 ?15 and exists (select 1 from custody_messages
                                 where broker = ?1 and vhost = ?2 and queue = ?3 and fingerprint = ?17),
                 ?16, ?17, ?18)",
    )
    .bind(&id.0)
    .bind(&id.1)
    .bind(&id.2)
    .bind(now)
    .bind(&t.exchange)
    .bind(&t.routing_key)
    .bind(&t.properties)
    .bind(&t.properties_json)
    .bind(&t.body)
    .bind(t.size() as i64)
    .bind(&t.summary.message_id)
    .bind(&t.summary.reason)
    .bind(&t.summary.original_queue)
    .bind(message::error_line(&t.summary))
    .bind(t.redelivered)
    .bind(t.body.contains(&0))
    .bind(&t.fingerprint)
    .bind(message::error_group(&t.summary))
    .execute(conn)
    .await?;
    Ok(())
}

/// `?, ?, ...`: `n` placeholders for an `in (...)` list (the callers keep lists to 500).
pub(super) fn placeholders(n: usize) -> String {
    vec!["?"; n].join(", ")
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
    db: &Db,
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
    let kept = bytes_kept(db, &id).await?;
    if kept + adding > budget {
        return Err(ImportError::Budget { kept, adding, budget });
    }
    let mut tx = db.begin().await?;
    let now = Utc::now().timestamp();
    let mut imported = 0;
    for batch in batches {
        let batch = batch.map_err(ImportError::Changed)?;
        for t in &batch {
            insert(&mut tx, &id, now, t).await?;
        }
        imported += batch.len();
    }
    if imported != count {
        return Err(ImportError::Changed(format!("{imported} lines read again, {count} checked")));
    }
    tx.commit().await?;
    Ok(imported)
}

/// Records of replays older than this many seconds are deleted (the global retention).
pub async fn prune_replayed(db: &Db, before: i64) -> Result<u64, sqlx::Error> {
    let done = sqlx::query("delete from custody_messages where state = 'replayed' and replayed_at < ?")
        .bind(before)
        .execute(db)
        .await?;
    Ok(done.rows_affected())
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
pub async fn delete(
    db: &Db,
    (broker, vhost, queue): (&str, &str, &str),
    id: i64,
) -> Result<Option<String>, DeleteError> {
    let deleted = sqlx::query_scalar::<_, Option<String>>(
        "delete from custody_messages where broker = ? and vhost = ? and queue = ? and id = ? and state = 'held'
         returning message_id",
    )
    .bind(broker)
    .bind(vhost)
    .bind(queue)
    .bind(id)
    .fetch_optional(db)
    .await?;
    if let Some(message_id) = deleted {
        return Ok(message_id);
    }
    let state = sqlx::query_scalar::<_, String>(
        "select state from custody_messages where broker = ? and vhost = ? and queue = ? and id = ?",
    )
    .bind(broker)
    .bind(vhost)
    .bind(queue)
    .bind(id)
    .fetch_optional(db)
    .await?;
    Err(match state {
        Some(state) => DeleteError::NotHeld { id, state },
        None => DeleteError::NotFound(id),
    })
}
