//! Which replica does which work (issue 33, must-have 3). Replicas sharing one PostgreSQL
//! database divide the work by leases (`storage::Leases`): one per broker (`broker:NAME`: its
//! polling and what hangs off it) and one for the work done once for all (`housekeeping`:
//! roll-ups and retention). Each replica also holds a lease of its own (`replica:ID`) as its
//! heartbeat, so every replica can count the live ones.
//!
//! Every round (a third of the lease's time), a replica renews its heartbeat and the leases it
//! holds, then evens out: it lets go of what it holds beyond its share (the work divided by the
//! live replicas, rounded up), and takes free or expired work up to its share. A replica that
//! dies stops renewing; within one lease time its work is expired, and the next round of each
//! other replica takes it. What a replica does under a lease it writes in a transaction fenced
//! with the lease's epoch (`storage::Fence`), so a replica that was paused past its lease writes
//! nothing after another took over.
//!
//! On SQLite there is one process, one replica: it holds every lease.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use rand::Rng;
use tokio_util::sync::CancellationToken;

use crate::storage::{Held, Store};

/// The lease of the work done once for all replicas: roll-ups and retention.
pub const HOUSEKEEPING: &str = "housekeeping";

/// The lease of a broker's work.
pub fn broker_work(broker: &str) -> String {
    format!("broker:{broker}")
}

use crate::storage::leases::HEARTBEAT_PREFIX;

/// A lease holder's name, unique per start (a process that runs warren twice, as the tests do,
/// is two holders) and readable in an error: host, pid and a random part.
pub fn holder_id() -> String {
    let host = std::env::var("HOSTNAME").unwrap_or_else(|_| "warren".into());
    format!("{host} (pid {}, start {:08x})", std::process::id(), rand::thread_rng().gen::<u32>())
}

/// This process as one of the replicas.
pub struct Replica {
    id: String,
    store: Store,
    /// How long a lease lasts without renewal: how long a dead replica's work waits, at most,
    /// before another takes it.
    ttl: Duration,
    /// Every piece of work to divide.
    work: Vec<String>,
    /// What this replica holds, with when its last renewal was asked for by this process's
    /// clock: the lease is trusted here until then plus the lease time, which ends before the
    /// database's expiry (that was computed later, when the renewal arrived).
    held: RwLock<BTreeMap<String, (Held, Instant)>>,
    heartbeat: RwLock<Option<Held>>,
}

impl std::fmt::Debug for Replica {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Replica").field("id", &self.id).finish_non_exhaustive()
    }
}

impl Replica {
    pub fn new(store: Store, ttl: Duration, work: Vec<String>) -> Arc<Replica> {
        let id = holder_id();
        let (held, heartbeat) = (RwLock::new(BTreeMap::new()), RwLock::new(None));
        Arc::new(Replica { id, store, ttl, work, held, heartbeat })
    }

    /// This replica's id, as the leases name their holder.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The lease this replica holds on `work`, if it does and its last renewal is recent
    /// enough: the fencing token for its writes. A replica whose rounds fail (the database
    /// unreachable) stops doing the work within one lease time, as the others may take it then.
    pub fn held(&self, work: &str) -> Option<Held> {
        let held = self.held.read().unwrap_or_else(|p| p.into_inner());
        let (lease, asked_at) = held.get(work)?;
        (asked_at.elapsed() < self.ttl).then(|| lease.clone())
    }

    /// The work this replica holds now (renewed or not), by name.
    pub fn holding(&self) -> BTreeSet<String> {
        self.held.read().unwrap_or_else(|p| p.into_inner()).keys().cloned().collect()
    }

    /// Renews, lets go and takes, round after round, until `cancel`; then lets go of everything
    /// so that the others take it at once rather than after the lease time.
    pub async fn run(self: Arc<Self>, cancel: CancellationToken) {
        let every = self.ttl / 3;
        loop {
            if let Err(e) = self.round().await {
                // Leases run out on their own: one that could not be renewed is no longer
                // trusted here from its expiry on (`held` drops it in the next round).
                tracing::warn!(error = %e, "leases: a round failed");
            }
            tokio::select! {
                _ = cancel.cancelled() => break,
                _ = tokio::time::sleep(every) => {}
            }
        }
        self.release_all().await;
    }

    /// One round: heartbeat, renewals, then the shares evened out.
    pub async fn round(&self) -> crate::storage::Result<()> {
        let heartbeat = format!("{HEARTBEAT_PREFIX}{}", self.id);
        let beat = self.store.take_lease(&heartbeat, &self.id, self.ttl).await?;
        *self.heartbeat.write().unwrap_or_else(|p| p.into_inner()) = beat;

        // Renew what is held; what could not be renewed is lost.
        for work in self.holding() {
            let asked_at = Instant::now();
            let renewed = self.store.take_lease(&work, &self.id, self.ttl).await?;
            self.set(&work, renewed.map(|h| (h, asked_at)));
        }

        let now = self.store.database_now().await?;
        let leases = self.store.leases().await?;
        let live: BTreeSet<&str> = leases
            .iter()
            .filter(|l| l.expires_at > now)
            .filter_map(|l| l.name.strip_prefix(HEARTBEAT_PREFIX))
            .collect();
        let share = self.work.len().div_ceil(live.len().max(1));
        let holds = |replica: &str| {
            leases.iter().filter(|l| l.holder == replica && l.expires_at > now && self.work.contains(&l.name)).count()
        };
        // The fewest pieces another live replica holds (one that just started holds none).
        let least_other = live.iter().filter(|r| **r != self.id).map(|r| holds(r)).min();

        // Beyond the share, let go of the last ones; and one more while another replica holds
        // two fewer, so that the shares end up within one of each other ([3, 2, 2] of 7, not
        // [3, 3, 1]). The others take it in their next rounds.
        let mut mine: Vec<String> = self.holding().into_iter().collect();
        let uneven = least_other.is_some_and(|least| mine.len() >= least + 2);
        let keep = share.min(if uneven { mine.len() - 1 } else { mine.len() });
        let mut let_go = BTreeSet::new();
        while mine.len() > keep {
            let work = mine.pop().expect("longer than what it keeps");
            let released = self.held.write().unwrap_or_else(|p| p.into_inner()).remove(&work);
            if let Some((held, _)) = released {
                self.store.release_lease(&held).await?;
            }
            let_go.insert(work);
        }

        // Take free or expired work while below the share and holding no more than any other
        // live replica: the one that holds least takes first.
        let taken_by_others: BTreeSet<&str> =
            leases.iter().filter(|l| l.holder != self.id && l.expires_at > now).map(|l| l.name.as_str()).collect();
        for work in &self.work {
            let mine = self.holding().len();
            if mine >= share || least_other.is_some_and(|least| mine > least) {
                break;
            }
            if taken_by_others.contains(work.as_str()) || let_go.contains(work) || self.holding().contains(work) {
                continue;
            }
            let asked_at = Instant::now();
            let taken = self.store.take_lease(work, &self.id, self.ttl).await?;
            self.set(work, taken.map(|h| (h, asked_at)));
        }
        Ok(())
    }

    fn set(&self, work: &str, held: Option<(Held, Instant)>) {
        let mut map = self.held.write().unwrap_or_else(|p| p.into_inner());
        match held {
            Some(held) => map.insert(work.to_string(), held),
            None => map.remove(work),
        };
    }

    /// Lets go of every lease, the heartbeat too (at shutdown).
    pub async fn release_all(&self) {
        let held = std::mem::take(&mut *self.held.write().unwrap_or_else(|p| p.into_inner()));
        let heartbeat = self.heartbeat.write().unwrap_or_else(|p| p.into_inner()).take();
        for lease in held.into_values().map(|(lease, _)| lease).chain(heartbeat) {
            if let Err(e) = self.store.release_lease(&lease).await {
                tracing::warn!(lease = lease.name, error = %e, "leases: could not let go at shutdown; it runs out");
            }
        }
    }
}
