//! What a move did (`MoveReport`), and what the pages read while it runs: its counters and the
//! journal of each message's fate (`Progress`), which the audit log takes in at checkpoints.

use std::sync::atomic::{AtomicU64, Ordering};

use serde::Serialize;

use super::plan::Wanted;
use crate::dlq::fates::Fate;

#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct Moved {
    pub position: usize,
    pub message_id: Option<String>,
    /// Where the copy went: a queue, or `exchange "x", key "k"`; empty for deleted messages.
    pub to_queue: String,
}

/// A message that could not go back to the source without being dropped, kept in the
/// source's holding queue instead (`holding`).
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct Held {
    pub position: usize,
    pub message_id: Option<String>,
    pub queue: String,
    /// Its `x-delivery-count` when read: at the source's delivery limit.
    pub delivery_count: i64,
}

#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct Failed {
    pub position: usize,
    pub message_id: Option<String>,
    pub reason: String,
}

/// What a move did. Every message read and not in `moved` went back to the source queue, or,
/// where giving it back would have been its last delivery, to the holding queue (`held`).
#[derive(Debug, Clone, Serialize, Default, utoipa::ToSchema)]
pub struct MoveReport {
    pub moved: Vec<Moved>,
    pub failed: Vec<Failed>,
    /// Messages read and not moved that are now in the source's holding queue (failed ones
    /// too: those are also in `failed`).
    pub held: Vec<Held>,
    /// Messages read and returned to the source (not selected, or failed).
    pub returned: usize,
    /// Selected messages the move did not find (taken by someone else, or moved further back
    /// than it read), as the snapshot showed them.
    pub not_found: Vec<Wanted>,
    /// The user (or warren's shutdown) stopped the move before it read everything.
    pub cancelled: bool,
    /// Why the move stopped early, when it did.
    pub stopped: Option<String>,
    /// Ready messages left in the source queue at the end (new arrivals included).
    pub left: Option<u32>,
    /// How the move was made, when that needs saying.
    pub note: Option<String>,
}

/// Live counters of a running move, read by the progress page while the move runs, and the
/// journal of what became of each message, which the audit log takes in at every checkpoint.
#[derive(Debug, Default)]
pub struct Progress {
    /// Messages the move expects to read (the queue's depth when it started, or the last
    /// position asked for).
    pub expected: AtomicU64,
    pub read: AtomicU64,
    pub moved: AtomicU64,
    pub failed: AtomicU64,
    journal: std::sync::Mutex<Vec<Fate>>,
}

impl Progress {
    /// The fates recorded since the last call, oldest first.
    pub fn take_journal(&self) -> Vec<Fate> {
        std::mem::take(&mut *self.journal.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// Returns fates that could not be written, ahead of those recorded since.
    pub fn put_back(&self, mut fates: Vec<Fate>) {
        let mut journal = self.journal.lock().unwrap_or_else(|p| p.into_inner());
        fates.append(&mut journal);
        *journal = fates;
    }

    /// Counts and journals what a replay from custody settled, each (record, message id, where
    /// it went or why not); positions number the records in the order they settled.
    pub(in crate::dlq) fn settled(
        &self,
        failed: &[(i64, Option<String>, String)],
        replayed: &[(i64, Option<String>, String)],
    ) {
        for (outcome, counter, records) in [("failed", &self.failed, failed), ("moved", &self.moved, replayed)] {
            for (_, message_id, detail) in records {
                let position = self.read.fetch_add(1, Ordering::Relaxed) as usize + 1;
                Progress::add(counter);
                self.record(Fate::new(position, message_id.as_deref(), outcome, detail));
            }
        }
    }

    pub(super) fn record(&self, fate: Fate) {
        self.journal.lock().unwrap_or_else(|p| p.into_inner()).push(fate);
    }

    pub fn counts(&self) -> ProgressCounts {
        ProgressCounts {
            expected: self.expected.load(Ordering::Relaxed),
            read: self.read.load(Ordering::Relaxed),
            moved: self.moved.load(Ordering::Relaxed),
            failed: self.failed.load(Ordering::Relaxed),
        }
    }

    pub(super) fn add(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq, Eq, utoipa::ToSchema)]
pub struct ProgressCounts {
    pub expected: u64,
    pub read: u64,
    pub moved: u64,
    pub failed: u64,
}
