//! Alerts as stored: the rules written in the UI or the API, the pending and firing alerts with
//! when each was last queued and delivered, their history, silences, the notification outbox
//! and the delivery log. Rules, states, notifications and alert keys are kept as the alerts wing
//! serialises them (JSON text); what they mean is the wing's.
//!
//! An evaluation writes its history, its states and its notifications in one transaction, and
//! a delivery its outbox row, its log row and the alert's delivery together: those writes are
//! [`AlertWrites`], made on a [`super::Transaction`].

use std::time::Duration;

use async_trait::async_trait;

use super::Result;

/// A rule written in the UI or the API: its id and definition (JSON).
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct RuleRow {
    pub id: String,
    pub definition: String,
}

/// A pending or firing alert: its state (JSON) and, in unix seconds, when its last firing or
/// reminder was queued and when a channel last accepted one.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct StateRow {
    pub state: String,
    pub queued_at: Option<i64>,
    pub delivered_at: Option<i64>,
}

/// A phase change.
#[derive(Debug, Clone, PartialEq)]
pub struct TransitionRow<'a> {
    pub at: i64,
    pub rule_id: &'a str,
    /// JSON.
    pub alert_key: &'a str,
    pub from_phase: &'a str,
    pub to_phase: &'a str,
    pub value: Option<f64>,
    pub note: Option<&'a str>,
    pub silenced: bool,
}

/// A phase change as read.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct HistoryRow {
    pub id: i64,
    pub at: i64,
    pub rule_id: String,
    pub alert_key: String,
    pub from_phase: String,
    pub to_phase: String,
    pub value: Option<f64>,
    pub note: Option<String>,
    pub silenced: bool,
}

/// A silence to write; times in unix seconds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewSilence<'a> {
    pub rule_id: Option<&'a str>,
    /// JSON.
    pub alert_key: Option<&'a str>,
    pub until: i64,
    pub comment: &'a str,
    pub created_by: &'a str,
    pub created_at: i64,
}

/// A silence as read.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct SilenceRow {
    pub id: i64,
    pub rule_id: Option<String>,
    pub alert_key: Option<String>,
    pub until: i64,
    pub comment: String,
    pub created_by: String,
    pub created_at: i64,
}

/// A notification waiting for a channel.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct OutboxRow {
    pub id: i64,
    pub channel_id: String,
    pub channel_name: String,
    pub kind: String,
    pub rule_id: String,
    /// JSON.
    pub alert_key: String,
    /// JSON.
    pub notification: String,
    pub attempts: i64,
    /// Unix milliseconds.
    pub next_attempt_at: i64,
    /// Unix seconds.
    pub created_at: i64,
    /// The process delivering it (a replica id), while it does; see [`Alerts::claim_outbox`].
    pub claimed_by: Option<String>,
    /// Unix milliseconds by the database's clock: after then, another process may take it.
    pub claim_expires_at: Option<i64>,
}

/// A notification to queue for a channel, due at `next_attempt_at` (unix milliseconds).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewOutboxRow<'a> {
    pub channel_id: &'a str,
    pub channel_name: &'a str,
    pub kind: &'a str,
    pub rule_id: &'a str,
    pub alert_key: &'a str,
    pub notification: &'a str,
    pub next_attempt_at: i64,
    pub created_at: i64,
}

/// A row of the delivery log, to write (`id` unused) or as read.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct LogRow {
    pub id: i64,
    /// Unix seconds.
    pub at: i64,
    pub channel_id: String,
    pub channel_name: String,
    pub kind: String,
    pub rule_id: Option<String>,
    /// JSON.
    pub alert_key: Option<String>,
    pub attempt: i64,
    pub outcome: String,
    pub http_status: Option<i64>,
    pub error: Option<String>,
}

/// What alerts read, and the writes that stand alone.
#[async_trait]
pub trait Alerts {
    /// The rules written in the UI or the API, by id.
    async fn rules(&self) -> Result<Vec<RuleRow>>;
    /// Inserts or replaces a rule.
    async fn save_rule(&self, id: &str, definition: &str, updated_at: i64) -> Result<()>;
    /// Whether there was one.
    async fn delete_rule(&self, id: &str) -> Result<bool>;
    async fn alert_states(&self) -> Result<Vec<StateRow>>;
    /// Phase changes below the id `before`, newest first.
    async fn alert_history(&self, before: i64, limit: i64) -> Result<Vec<HistoryRow>>;
    /// Deletes phase changes before `cutoff`: how many.
    async fn prune_alert_history(&self, cutoff: i64) -> Result<u64>;
    async fn insert_silence(&self, silence: NewSilence<'_>) -> Result<i64>;
    /// Ends a silence at `now` unless it ended earlier: whether there was one.
    async fn end_silence(&self, id: i64, now: i64) -> Result<bool>;
    /// Silences that last beyond `until_after`, newest first, at most 200.
    async fn silences(&self, until_after: i64) -> Result<Vec<SilenceRow>>;
    /// Every queued notification, oldest first.
    async fn outbox(&self) -> Result<Vec<OutboxRow>>;
    /// The oldest one of a channel, due or not.
    async fn oldest_in_outbox(&self, channel_id: &str) -> Result<Option<OutboxRow>>;
    /// Claims the oldest row of `channel_id` for `claimer` until `ttl` from now by the database's
    /// clock, and returns it as claimed: only when it is due by `due_by` (unix milliseconds) and
    /// no other claimer holds an unexpired claim on any row of the channel, so a channel is
    /// delivered by one process at a time, oldest first. An expired claim is taken over;
    /// `claimer`'s own claim is renewed. On PostgreSQL a row another transaction is claiming
    /// is skipped (`for update skip locked`), not waited for: `None`, as when it is claimed.
    async fn claim_outbox(
        &self,
        channel_id: &str,
        claimer: &str,
        due_by: i64,
        ttl: Duration,
    ) -> Result<Option<OutboxRow>>;
    /// Ends `claimer`'s claim on row `id` (an attempt abandoned at a stop), so that another
    /// process need not wait for it to expire. Nothing when `claimer` does not claim it.
    async fn release_outbox_claim(&self, id: i64, claimer: &str) -> Result<()>;
    async fn insert_log(&self, row: &LogRow) -> Result<()>;
    /// Log rows below the id `before`, newest first.
    async fn deliveries(&self, before: i64, limit: i64) -> Result<Vec<LogRow>>;
    /// Deletes log rows before `cutoff`: how many.
    async fn prune_log(&self, cutoff: i64) -> Result<u64>;
}

/// The writes an evaluation or a delivery makes together, in one transaction.
#[async_trait]
pub trait AlertWrites {
    async fn insert_transition(&mut self, transition: TransitionRow<'_>) -> Result<()>;
    /// The (rule id, alert key) of every stored state.
    async fn state_keys(&mut self) -> Result<Vec<(String, String)>>;
    async fn delete_state(&mut self, rule_id: &str, alert_key: &str) -> Result<()>;
    /// Writes a state whole but for `delivered_at`, which is kept.
    async fn upsert_state(&mut self, rule_id: &str, alert_key: &str, state: &str, queued_at: Option<i64>)
        -> Result<()>;
    /// Sets `delivered_at` to `at` (if later) on the state whose last queued notification was
    /// planned at `planned_at`; one queued since then is not marked.
    async fn mark_delivered(&mut self, rule_id: &str, alert_key: &str, planned_at: i64, at: i64) -> Result<()>;
    /// How many notifications wait for a channel.
    async fn outbox_waiting(&mut self, channel_id: &str) -> Result<i64>;
    async fn insert_outbox(&mut self, row: NewOutboxRow<'_>) -> Result<()>;
    async fn outbox_row(&mut self, id: i64) -> Result<Option<OutboxRow>>;
    /// Every queued notification, oldest first.
    async fn outbox_rows(&mut self) -> Result<Vec<OutboxRow>>;
    /// Deletes a row whoever claims it: one that cannot be read, or whose channel is gone.
    async fn delete_outbox(&mut self, id: i64) -> Result<()>;
    /// Deletes a delivered or given-up row if `claimer` still claims it, and says whether it
    /// did. `false`: the claim expired and another process took the row over (this one was
    /// paused), or finished it; the caller then writes nothing else and rolls back.
    async fn delete_claimed_outbox(&mut self, id: i64, claimer: &str) -> Result<bool>;
    /// After a failed attempt, if `claimer` still claims the row (as
    /// [`AlertWrites::delete_claimed_outbox`]): `attempts` made, the next not before
    /// `next_attempt_at` (ms), and the claim ended, so any process may make the next attempt.
    async fn retry_outbox(&mut self, id: i64, claimer: &str, attempts: i64, next_attempt_at: i64) -> Result<bool>;
    async fn insert_log(&mut self, row: &LogRow) -> Result<()>;
}
