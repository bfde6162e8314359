//! The audit of moves: what became of every message a move, delete or purge touched. The row
//! itself is `crate::audit`'s (`audit::start`, before anything moves); this module keeps the
//! messages' fates beside it, checkpointed while the move runs and completed in one transaction
//! with the final state, so a crash leaves counts and ids that agree (issue 16, case 7).

use serde::Serialize;

use crate::storage::fates::{Ending, NewFate, StoredFate};
use crate::storage::Store;

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
    store: &Store,
    id: i64,
    outcome: &str,
    moved: usize,
    failed: usize,
    detail: Option<&str>,
    fates: &[Fate],
) -> Result<(), sqlx::Error> {
    let ending = Ending { audit_id: id, outcome, moved: moved as i64, failed: failed as i64, detail };
    store.finish_action(ending, &rows(fates)).await?;
    tracing::info!(audit_id = id, outcome, moved, failed, "action ended");
    Ok(())
}

/// Records the fates of the messages a running action settled since the last checkpoint (what a
/// crash leaves behind), in one transaction with its counts, which are counted from those fates:
/// an interrupted entry's counts and ids always agree.
pub async fn checkpoint(store: &Store, id: i64, fates: &[Fate]) -> Result<(), sqlx::Error> {
    store.checkpoint_action(id, &rows(fates)).await
}

fn rows(fates: &[Fate]) -> Vec<NewFate<'_>> {
    fates
        .iter()
        .map(|f| NewFate {
            position: f.position as i64,
            message_id: f.message_id.as_deref(),
            outcome: f.outcome,
            detail: &f.detail,
        })
        .collect()
}

/// What became of each message of action `id`, by position.
pub async fn messages(store: &Store, id: i64) -> Result<Vec<MessageRecord>, sqlx::Error> {
    let fates = store.action_fates(id).await?;
    Ok(fates.into_iter().map(MessageRecord::from).collect())
}

/// One message's fate as the audit log read it back.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct MessageRecord {
    pub position: i64,
    pub message_id: Option<String>,
    pub outcome: String,
    pub detail: String,
}

impl From<StoredFate> for MessageRecord {
    fn from(f: StoredFate) -> MessageRecord {
        MessageRecord { position: f.position, message_id: f.message_id, outcome: f.outcome, detail: f.detail }
    }
}

/// Marks interrupted the actions left unfinished by a replica that died (crashed, or was
/// killed): one whose heartbeat lease ran out, or a process from before replicas. Actions of a
/// live replica, `survivor` (the caller) included, are left running. Returns how many.
pub async fn mark_interrupted(store: &Store, survivor: &str) -> Result<u64, sqlx::Error> {
    store
        .mark_interrupted(
            "warren stopped during this action. Counts are from the last checkpoint. Messages warren held \
             unacked went back to the source queue when its connection closed; a message copied but not yet \
             acked can be in both queues (at-least-once), none is lost.",
            survivor,
        )
        .await
}
