//! Dead letters: everything warren does to them, in one place, so that the invariants can be
//! read in one sitting (issue 16, must-have 8). The imports go one way:
//!
//! - `framework`: where well-known frameworks (Celery, dramatiq, ...) put a message's id, task,
//!   attempt and arguments. Pure.
//! - `message`: what a dead letter says (where and why it died), the filter, payload display.
//!   Pure; uses `framework`.
//! - `mover`: the only code that takes messages off a queue: reading (`peek`) and moving, each
//!   original acked only after its copy is confirmed and not returned (DOMAIN.md §6). Uses
//!   `message`. A folder, one file per idea (its `mod.rs` lists them).
//! - `target`: the checks every path that puts messages back makes before its first publish
//!   (the target exists, and does not drop its oldest when full unless the user accepted that),
//!   and the words for a copy the broker refused. Used by `mover` and `custody`.
//! - `holding`: the queue where a message goes instead of back to a quorum queue that would
//!   drop it (its delivery limit reached). Used by `mover`.
//! - `browse`: snapshots of a queue's head, kept so that page views never read it again. Uses
//!   `mover` and `message`.
//! - `fates`: what became of each message of a move (its fate), recorded beside the audit log's
//!   row. Pure storage; `mover` reports fates in its type.
//! - `custody`: dead letters taken into warren's database (intake acks only after a durable
//!   commit), listed and grouped there, and replayed (a record marked replayed only after its
//!   copy's confirm). Uses `message` and `mover`'s connection and message conversion.
//!   A folder, one file per idea (its `mod.rs` lists them).
//! - `expression`: a filter's regular expression, bounded in size, in what it reads, and in
//!   time (checked as a long text is read). Pure.
//! - `budget`: the time a filter's regular expression may take, off the async workers, stopped
//!   when its request or job is. Used by `custody`, `mover` and the pages.
//! - `jobs`: moves as background jobs, one per queue at a time, with the audit log's record.
//!   Uses `mover`, `browse` and `fates`.

pub mod browse;
pub mod budget;
pub mod custody;
pub mod expression;
pub mod fates;
pub mod framework;
pub mod holding;
pub mod jobs;
pub mod message;
pub mod mover;
pub mod publish;
pub mod readable;
pub mod target;
pub mod transfer;

pub use mover::{
    connect, move_messages, original_route, peek, peeked, purge, replay_properties, MoveError, MoveReport, Plan,
    Progress, Selection, Target,
};

/// What a dead replica left behind, taken care of by `survivor` (the calling replica): its
/// unfinished actions marked interrupted and its custody claims handed back to held, in one
/// statement each, so that a replica alive at that moment keeps its own. At start, and every
/// housekeeping round: a replica that died mid-move or mid-replay is cleaned up by another
/// within a lease time of its last heartbeat. Returns (actions interrupted, records reclaimed).
pub async fn recover_dead_replicas(store: &crate::storage::Store, survivor: &str) -> Result<(u64, u64), sqlx::Error> {
    let interrupted = fates::mark_interrupted(store, survivor).await?;
    let reclaimed = custody::recover(store, survivor).await?;
    Ok((interrupted, reclaimed))
}

/// Recovery at start: as [`recover_dead_replicas`], and on SQLite, first lets go of every lease
/// another process holds. SQLite's file has one process (docs/replicas.md), so another holder
/// there is a killed process: left to run out, its heartbeat would keep its moves `running` and
/// its claims held for up to a lease time after this start, and count as a live replica in the
/// division of the work until then, and its work leases would hold this start's polls back.
pub async fn recover_at_start(store: &crate::storage::Store, me: &str) -> Result<(u64, u64), sqlx::Error> {
    use crate::storage::leases::Held;
    if store.backend() == "sqlite" {
        let now = store.database_now().await?;
        for lease in store.leases().await? {
            if lease.holder != me && lease.expires_at > now {
                let held =
                    Held { name: lease.name, holder: lease.holder, epoch: lease.epoch, expires_at: lease.expires_at };
                store.release_lease(&held).await?;
            }
        }
    }
    recover_dead_replicas(store, me).await
}
