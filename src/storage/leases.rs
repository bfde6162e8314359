//! Leases: which replica does a piece of work (a broker's polling, the roll-ups), for how long,
//! and the fencing token that goes with it (issue 33, must-have 3).
//!
//! A lease is a row (`leases`) with its holder, an epoch and an expiry computed from the
//! database's clock. Taking a free or expired lease raises its epoch; renewing one's own keeps
//! it. The rows are never deleted, so an epoch is never handed out twice. A lease alone cannot
//! stop a holder that was paused past its expiry from writing afterwards, so every write of the
//! work is made in a transaction that first calls [`Fence::fence`] with the epoch it holds: that
//! fails once another holder took the lease, and while it holds, the lease cannot be taken over
//! until the transaction ends (PostgreSQL: the row is locked for share; SQLite: the transaction
//! has the one write lock).

use std::time::Duration;

use async_trait::async_trait;

use super::Result;

/// What a replica's heartbeat lease is named after: `replica:ID`, held by `ID` (`replicas`
/// takes and renews it). Recovery (`Fates::mark_interrupted`, `Custody::recover_claims`) reads
/// a replica as alive while this lease is unexpired by the database's clock.
pub const HEARTBEAT_PREFIX: &str = "replica:";

/// A lease as held: what [`Fence::fence`] checks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Held {
    pub name: String,
    pub holder: String,
    pub epoch: i64,
    /// Unix milliseconds, by the database's clock.
    pub expires_at: i64,
}

/// A lease as stored, for the status page and metrics.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct LeaseRow {
    pub name: String,
    pub holder: String,
    pub epoch: i64,
    pub expires_at: i64,
}

#[async_trait]
pub trait Leases {
    /// Takes lease `name` for `holder` until `ttl` from now by the database's clock: when it is
    /// free or expired (with a new epoch), or when `holder` holds it already (the same epoch;
    /// a renewal). `None` when another holder has it.
    async fn take_lease(&self, name: &str, holder: &str, ttl: Duration) -> Result<Option<Held>>;
    /// Lets the lease go at once (at shutdown), keeping its epoch: the next taker raises it.
    async fn release_lease(&self, held: &Held) -> Result<()>;
    /// Every lease, by name.
    async fn leases(&self) -> Result<Vec<LeaseRow>>;
    /// The database's clock, in unix milliseconds.
    async fn database_now(&self) -> Result<i64>;
}

/// The first step of a write made under a lease.
#[async_trait]
pub trait Fence {
    /// Whether `held` is still the lease's holder and epoch; while this transaction lasts, no one
    /// takes the lease over. On `false`, the caller rolls back.
    async fn fence(&mut self, held: &Held) -> Result<bool>;
}
