//! The audit of moves: what became of every message a move, delete or purge touched. The row
//! itself is `crate::audit`'s (`audit::start`, before anything moves); this module keeps the
//! messages' fates beside it, checkpointed while the move runs and completed in one transaction
//! with the final state, so a crash leaves counts and ids that agree (issue 16, case 7).

use serde::Serialize;
use sqlx::Row;

use crate::history::Db;

/// What became of one message of a move, as the audit log keeps it.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Fate {
    pub position: usize,
    pub message_id: Option<String>,
    /// `moved`, `failed`, `held` or `not_found`.
    pub outcome: &'static str,
    /// Where it went (a queue, or empty for a delete), or why it failed.
    pub detail: String,
}

impl Fate {
    pub fn new(position: usize, message_id: Option<&str>, outcome: &'static str, detail: &str) -> Fate {
        Fate { position, message_id: message_id.map(str::to_string), outcome, detail: detail.to_string() }
    }
}

/// Records how an action ended, with the fates of the messages not yet checkpointed, in one
/// transaction: either all of it is durable or none, and the caller tries again.
pub async fn finish(
    db: &Db,
    id: i64,
    outcome: &str,
    moved: usize,
    failed: usize,
    detail: Option<&str>,
    fates: &[Fate],
) -> Result<(), sqlx::Error> {
    let mut tx = db.begin().await?;
    insert_fates(&mut tx, id, fates).await?;
    // The moved ids, checkpointed or not, in the order of their positions.
    sqlx::query(
        "update audit_log set outcome = ?1, moved = ?2, failed = ?3, detail = ?4,
             message_ids = (select json_group_array(message_id) from
                 (select message_id from audit_messages where audit_id = ?5 and outcome = 'moved'
                  order by position, rowid))
         where id = ?5",
    )
    .bind(outcome)
    .bind(moved as i64)
    .bind(failed as i64)
    .bind(detail)
    .bind(id)
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    tracing::info!(audit_id = id, outcome, moved, failed, "action ended");
    Ok(())
}

/// Records the fates of the messages a running action settled since the last checkpoint (what a
/// crash leaves behind), in one transaction with its counts, which are counted from those fates:
/// an interrupted entry's counts and ids always agree.
pub async fn checkpoint(db: &Db, id: i64, fates: &[Fate]) -> Result<(), sqlx::Error> {
    let mut tx = db.begin().await?;
    insert_fates(&mut tx, id, fates).await?;
    sqlx::query(
        "update audit_log set outcome = 'running',
             moved = (select count(*) from audit_messages where audit_id = ?1 and outcome = 'moved'),
             failed = (select count(*) from audit_messages where audit_id = ?1 and outcome = 'failed')
         where id = ?1 and outcome in ('started', 'running')",
    )
    .bind(id)
    .execute(&mut *tx)
    .await?;
    tx.commit().await
}

async fn insert_fates(tx: &mut sqlx::SqliteConnection, id: i64, fates: &[Fate]) -> Result<(), sqlx::Error> {
    // Many rows per statement: a second of a move is thousands of fates, and one statement per
    // row made a checkpoint's write take a good part of the second it covers on a busy machine.
    for chunk in fates.chunks(FATES_PER_STATEMENT) {
        let rows = vec!["(?, ?, ?, ?, ?)"; chunk.len()].join(", ");
        let sql = format!("insert into audit_messages (audit_id, position, message_id, outcome, detail) values {rows}");
        let mut query = sqlx::query(&sql);
        for fate in chunk {
            query =
                query.bind(id).bind(fate.position as i64).bind(&fate.message_id).bind(fate.outcome).bind(&fate.detail);
        }
        query.execute(&mut *tx).await?;
    }
    Ok(())
}

/// Rows of one insert: five parameters each, far below SQLite's limit of 32,766.
const FATES_PER_STATEMENT: usize = 500;

/// What became of each message of action `id`, by position.
pub async fn messages(db: &Db, id: i64) -> Result<Vec<MessageRecord>, sqlx::Error> {
    let rows = sqlx::query(
        "select position, message_id, outcome, detail from audit_messages where audit_id = ? order by position, rowid",
    )
    .bind(id)
    .fetch_all(db)
    .await?;
    rows.iter()
        .map(|r| {
            Ok(MessageRecord {
                position: r.try_get("position")?,
                message_id: r.try_get("message_id")?,
                outcome: r.try_get("outcome")?,
                detail: r.try_get("detail")?,
            })
        })
        .collect()
}

/// One message's fate as the audit log read it back.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct MessageRecord {
    pub position: i64,
    pub message_id: Option<String>,
    pub outcome: String,
    pub detail: String,
}

/// Marks the actions a previous run left unfinished (it crashed or was killed); called at
/// start, before any new action. Returns how many there were.
pub async fn mark_interrupted(db: &Db) -> Result<u64, sqlx::Error> {
    let done = sqlx::query(
        "update audit_log set outcome = 'interrupted', detail = 'warren stopped during this action. Counts are from \
         the last checkpoint. Messages warren held unacked went back to the source queue when its connection \
         closed; a message copied but not yet acked can be in both queues (at-least-once), none is lost.'
         where outcome in ('started', 'running')",
    )
    .execute(db)
    .await?;
    Ok(done.rows_affected())
}
