//! What warren keeps, behind one interface with one implementation per backend (issue 33):
//! SQLite, embedded, the default and all one binary needs; PostgreSQL, which several replicas
//! can share. The interface is a trait only because there are two backends (atuin's server is
//! the model): each backend is one implementation with its own SQL beside it and its own
//! migrations folder (`migrations/sqlite/`, `migrations/postgres/`), and `tests/conformance.rs`
//! runs the same tests against both. Not sqlx's `Any` driver: it loses the types, and its
//! placeholders differ between the two.
//!
//! The interface is cut by what warren keeps, one trait per part ([`Accounts`], [`AuditLog`],
//! [`Alerts`], the advisor's [`Acknowledgements`], [`Custody`], [`Fates`], [`Leases`], [`Logins`], [`Snapshots`], the history's
//! [`Samples`], [`Rollups`], [`Nodes`] and [`Topology`]), and [`Database`] is all of them; a
//! backend implements each part in a file of its own. Its methods are the database's side of an
//! operation: one call is one statement or one transaction, and what decides (password hashes,
//! the last-admin rule's wording, the failed-login caps) stays in the feature that calls it.
//!
//! Writes that must commit together (an alert evaluation's history, states and notifications)
//! are made on a [`Transaction`], so the feature keeps its decisions between them.
//!
//! Behind it: accounts (users, sessions, API tokens), the login throttle's
//! failures, the audit log, alerts, the fates of the messages a move touched, the dead-letter
//! queues' stored snapshots, custody (its records and switches), the leases that divide work
//! between replicas, and the history (raw samples, roll-ups and the chart series' reads, nodes
//! and topology).

use std::sync::Arc;

pub mod accounts;
pub mod acknowledgements;
pub mod alerts;
pub mod audit;
pub mod custody;
pub mod fates;
pub mod leases;
pub mod logins;
pub mod nodes;
pub mod postgres;
pub mod rollups;
pub mod samples;
pub mod snapshots;
pub mod sqlite;
pub mod topology;

pub use accounts::Accounts;
pub use acknowledgements::Acknowledgements;
pub use alerts::{AlertWrites, Alerts};
pub use audit::AuditLog;
pub use custody::{Custody, CustodyWrites};
pub use fates::Fates;
pub use leases::{Fence, Held, Leases};
pub use logins::Logins;
pub use nodes::Nodes;
pub use rollups::Rollups;
pub use samples::Samples;
pub use snapshots::Snapshots;
pub use topology::Topology;

/// Everything warren keeps, on one backend.
#[async_trait::async_trait]
pub trait Database:
    Accounts
    + Acknowledgements
    + AuditLog
    + Alerts
    + Custody
    + Fates
    + Leases
    + Logins
    + Nodes
    + Rollups
    + Samples
    + Snapshots
    + Topology
    + Send
    + Sync
    + 'static
{
    /// `sqlite` or `postgres`, for logs and errors.
    fn backend(&self) -> &'static str;
    /// A transaction for the writes that go together ([`AlertWrites`]). Dropped without
    /// [`Transaction::commit`], it rolls back.
    async fn begin(&self) -> Result<Box<dyn Transaction>>;
    /// A secret of the installation (`instance_keys`): `fresh` stored under `name` if there was
    /// none, else the one stored. Processes starting together on one new database, and replicas
    /// sharing one, all read the same one.
    async fn instance_key(&self, name: &str, fresh: &[u8]) -> Result<Vec<u8>>;
    /// The write check (`history::storage`): the one row of `storage_probe` set to `at` (unix
    /// milliseconds) in a transaction of its own, so a full disk, a read-only database or a lost
    /// server shows up as what it is; returns the row's value as written.
    async fn probe(&self, at: i64) -> Result<i64>;
    /// Closes the pool once its connections are back (the last step of a shutdown).
    async fn close(&self);
}

/// Writes that commit together or not at all.
#[async_trait::async_trait]
pub trait Transaction: AlertWrites + CustodyWrites + Fence + Send {
    async fn commit(self: Box<Self>) -> Result<()>;
}

/// The handle every part of warren shares.
pub type Store = Arc<dyn Database>;

/// What a backend returns: both are sqlx drivers, so their errors are one type.
pub type Result<T> = std::result::Result<T, sqlx::Error>;
