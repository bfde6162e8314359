//! What became of each message a move, delete or purge touched, kept beside its audit entry
//! (`audit_messages`), and the entry's counts and outcome that go with them. What an outcome
//! means, and when a move checkpoints, is `dlq::fates`'s.

use async_trait::async_trait;

use super::Result;

/// A message's fate to write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NewFate<'a> {
    pub position: i64,
    pub message_id: Option<&'a str>,
    /// `moved`, `failed`, `held` or `not_found`.
    pub outcome: &'a str,
    pub detail: &'a str,
}

/// A message's fate as read, in the order written within a position.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredFate {
    pub position: i64,
    pub message_id: Option<String>,
    pub outcome: String,
    pub detail: String,
}

/// How an action ended, for its audit entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ending<'a> {
    pub audit_id: i64,
    pub outcome: &'a str,
    pub moved: i64,
    pub failed: i64,
    pub detail: Option<&'a str>,
}

/// Rows of one insert: five parameters each, far below SQLite's limit of 32,766 (and
/// PostgreSQL's of 65,535). A second of a move is thousands of fates, and one statement per row
/// made a checkpoint's write take a good part of the second it covers on a busy machine.
pub(super) const FATES_PER_STATEMENT: usize = 500;

#[async_trait]
pub trait Fates {
    /// In one transaction: writes `fates`, then the entry's outcome, counts and detail, with its
    /// `message_ids` the ids of all its moved messages (checkpointed or not) by position.
    async fn finish_action(&self, ending: Ending<'_>, fates: &[NewFate<'_>]) -> Result<()>;
    /// In one transaction: writes `fates` and sets a started or running entry `running`, with
    /// its counts counted from all its fates.
    async fn checkpoint_action(&self, audit_id: i64, fates: &[NewFate<'_>]) -> Result<()>;
    /// The fates of entry `audit_id`, by position.
    async fn action_fates(&self, audit_id: i64) -> Result<Vec<StoredFate>>;
    /// Sets `interrupted`, with `detail`, every started or running entry whose replica is dead:
    /// run by none recorded (rows from before replicas), or by one other than `survivor` whose
    /// heartbeat lease is expired or missing by the database's clock. One statement, so an
    /// action whose replica is alive at that moment is never marked. Returns how many.
    async fn mark_interrupted(&self, detail: &str, survivor: &str) -> Result<u64>;
}
