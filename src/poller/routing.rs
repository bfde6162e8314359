//! Each vhost's topology (bindings, exchanges), read at its own cadence, and what it says of
//! each queue: its dead-letter facts and role, and where its inflow comes from.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::Utc;

use super::cadence::METADATA_EVERY;
use super::{timed, track, Poller};
use crate::broker::management::BrokerError;
use crate::broker::topology::{self, QueueConfig, VhostTopology};
use crate::history;
use crate::metrics::{self, QueueView};

/// Bindings change rarely and listing them costs the broker: refresh each vhost's topology at
/// most this often, or sooner when a queue appears or its arguments or policy change. On 4.x
/// with the metadata listing, with it (`METADATA_EVERY`): the bindings listing of 10,000
/// queues (one default-exchange binding each) cost 4.0.5 0.18 CPU-s, as much again as the
/// metadata listing, and every 60 s it alone was a sixth of the reference scrape's cost.
const TOPOLOGY_EVERY: Duration = Duration::from_secs(60);

impl Poller {
    /// Refreshes stale vhost topologies and sets each view's dead-letter facts. A failed
    /// topology call keeps the previous topology (it is logged, the poll goes on): dead-letter
    /// routing is not worth losing the numbers for. `watched`: every watched vhost, queues or
    /// not. Returns the bytes read.
    pub(super) async fn apply_topology(
        &mut self,
        views: &mut [QueueView],
        marks: &[track::Mark],
        watched: &[&str],
        fetched: Instant,
        spent: &mut Duration,
    ) -> usize {
        let mut by_vhost: HashMap<&str, Vec<usize>> = HashMap::new();
        for (i, view) in views.iter().enumerate() {
            by_vhost.entry(&*view.vhost).or_default().push(i);
        }
        let by_vhost: Vec<(String, Vec<usize>)> = by_vhost.into_iter().map(|(v, i)| (v.to_string(), i)).collect();
        let mut bytes = 0;
        let seen = self.snapshots.as_ref().map(|s| s.seen(&self.broker.name)).unwrap_or_default();
        for (vhost, indexes) in &by_vhost {
            // A queue seen for the first time, or whose settings changed, may change routing.
            // Read after the listing in this poll already: it has what the listing has.
            let read_this_poll = self.topology.get(vhost).is_some_and(|(at, _)| *at == fetched);
            let changed = indexes.iter().any(|&i| marks[i].meta.is_some());
            if changed && !read_this_poll {
                bytes += self.refresh_topology(vhost, fetched, spent).await;
            } else {
                bytes += self.refresh_topology_if_stale(vhost, fetched, spent).await;
            }
            let topology = self.topology.get(vhost).map(|(_, t)| &**t);
            let configs = queue_configs(views, indexes, &self.custody, &self.broker.name, vhost);
            let worked = &self.worked;
            let mut info = topology::analyse_with(&configs, topology, &|q: &str| worked.words(vhost, q));
            let consumed: Vec<bool> = configs.iter().map(|c| c.consumers.unwrap_or(0) > 0).collect();
            let mut working = Vec::new();
            for (&i, consumed) in indexes.iter().zip(consumed) {
                views[i].dead_letters = match info.remove(&*views[i].name) {
                    Some(facts) => facts,
                    None => topology::DeadLetterInfo::plain(views[i].consumers),
                };
                let seen = seen.get(&(vhost.clone(), views[i].name.to_string()));
                views[i].dead_letters.observe(&views[i].name, seen);
                // Only a queue that dead-letters somewhere of its own is remembered: consumers on
                // a queue with no DLX that dead letters reach may be a reader of a DLQ (warren's
                // own mover, or one a killed warren left listed for a few seconds), and they made
                // its feeder look like a wait queue and the DLQ a work queue; remembered, that
                // misreading would stick (tests/bulk.rs's restarts mid-move).
                let dead_letters_on = views[i]
                    .dead_letters
                    .dead_letter_target
                    .as_ref()
                    .is_some_and(|t| t.queues.as_ref().is_some_and(|q| !q.is_empty()));
                if consumed && dead_letters_on && views[i].dead_letters.role == topology::QueueRole::Work {
                    working.push(i);
                }
                views[i].age_since_first_publish = views[i].dead_letters.role == topology::QueueRole::Wait
                    && views[i].oldest_age_source == metrics::AgeSource::Exact
                    && views[i].total.is_some_and(|t| t > 0);
                // DLQs, error queues and wait queues have no consumer by design: "nothing will
                // drain this queue" is what they are for, not a fault (issue 17, case 6). Their
                // badges say what they hold.
                if matches!(
                    views[i].dead_letters.role,
                    topology::QueueRole::Dlq | topology::QueueRole::Error | topology::QueueRole::Wait
                ) {
                    views[i].no_consumers = false;
                }
            }
            // Queues that dead-letter routing feeds: the broker counts no publish for a dead
            // letter, so their publish rate is not their inflow (a DLQ's was a bare 0 while it
            // filled: issue 17, case 5).
            let now = chrono::Utc::now().timestamp();
            // Without the lease nothing is stored (the poll's own write then ends the poller).
            if let Ok(fence) = self.lease() {
                for i in working {
                    self.worked.record(&self.store, self.broker_id, vhost, &views[i].name, now, fence.as_ref()).await;
                }
            }
            let fed: HashSet<String> = indexes
                .iter()
                .filter_map(|&i| views[i].dead_letters.dead_letter_target.as_ref()?.queues.clone())
                .flatten()
                .collect();
            for &i in indexes {
                let view = &mut views[i];
                let by_role = matches!(
                    view.dead_letters.role,
                    topology::QueueRole::Dlq | topology::QueueRole::Error | topology::QueueRole::Wait
                );
                if by_role || fed.contains(&*view.name) {
                    metrics::derive_inflow(view);
                }
            }
        }
        // A watched vhost without queues has exchanges, and bindings between them, all the
        // same: the exchanges page counts its bindings out from its topology (issue 34, case 6:
        // "—" in vhost `/`, where a fresh broker has no queue, beside numbers elsewhere). Read
        // at the stale cadence only: such a vhost's listings are a few bindings.
        for vhost in watched.iter().filter(|w| !by_vhost.iter().any(|(v, _)| v == *w)) {
            bytes += self.refresh_topology_if_stale(vhost, fetched, spent).await;
        }
        self.topology.retain(|vhost, _| watched.contains(&vhost.as_str()) || by_vhost.iter().any(|(v, _)| v == vhost));
        bytes
    }

    pub(super) async fn refresh_topology_if_stale(
        &mut self,
        vhost: &str,
        fetched: Instant,
        spent: &mut Duration,
    ) -> usize {
        let every = if self.metadata_only() { METADATA_EVERY } else { TOPOLOGY_EVERY };
        let stale = self.topology.get(vhost).is_none_or(|(at, _)| fetched.duration_since(*at) >= every);
        if stale {
            self.refresh_topology(vhost, fetched, spent).await
        } else {
            0
        }
    }

    /// Reads a vhost's topology; a failure keeps the previous one. Returns the bytes read.
    pub(super) async fn refresh_topology(&mut self, vhost: &str, fetched: Instant, spent: &mut Duration) -> usize {
        match self.fetch_topology(vhost, spent).await {
            Ok((topology, size)) => {
                // Kept in the database for a restart while the broker does not answer (roles
                // come from bindings); written only when it changed, bindings change rarely.
                let changed = self.topology.get(vhost).is_none_or(|(_, before)| **before != topology);
                if changed {
                    let at = Utc::now().timestamp();
                    // Without the lease nothing is written; the poll's own write then ends the
                    // poller (`PollError::LeaseLost`).
                    let kept = match self.lease() {
                        Ok(fence) => {
                            let store = &self.store;
                            history::last_known::store_topology(
                                store,
                                self.broker_id,
                                vhost,
                                &topology,
                                at,
                                fence.as_ref(),
                            )
                            .await
                        }
                        Err(_) => Ok(false),
                    };
                    match kept {
                        Ok(true) => {}
                        Ok(false) => {
                            tracing::warn!(broker = %self.broker.name, %vhost, "lease lost: topology not kept")
                        }
                        Err(e) => {
                            tracing::warn!(broker = %self.broker.name, %vhost, error = %e, "keeping the topology failed")
                        }
                    }
                }
                self.topology.insert(vhost.to_string(), (fetched, Arc::new(topology)));
                size
            }
            Err(e) => {
                tracing::warn!(broker = %self.broker.name, %vhost, error = %e, "topology refresh failed");
                0
            }
        }
    }

    pub(super) async fn fetch_topology(
        &mut self,
        vhost: &str,
        spent: &mut Duration,
    ) -> Result<(VhostTopology, usize), BrokerError> {
        let path = crate::broker::management::encode_segment(vhost);
        let (bindings, a) =
            timed(&mut self.load, spent, "management", &format!("/api/bindings/{path}"), self.client.bindings(vhost))
                .await?;
        let (exchanges, b) =
            timed(&mut self.load, spent, "management", &format!("/api/exchanges/{path}"), self.client.exchanges(vhost))
                .await?;
        Ok((VhostTopology { bindings: bindings.0, exchanges }, a + b))
    }
}

/// The queues `indexes` of `views`, all of `vhost`, as the dead-letter analysis reads them
/// (`topology::analyse`), for the polls and for the state restored at start alike.
pub(super) fn queue_configs<'v>(
    views: &'v [QueueView],
    indexes: &[usize],
    custody: &[crate::config::CustodyRule],
    broker: &str,
    vhost: &str,
) -> Vec<QueueConfig<'v>> {
    indexes
        .iter()
        .map(|&i| QueueConfig {
            name: &views[i].name,
            arguments: &views[i].arguments,
            effective_policy: &views[i].effective_policy,
            // Custody's intake is one consumer of warren's own: with it counted, a work queue
            // whose DLQ is in custody read as a wait queue feeding a consumed queue.
            consumers: match crate::dlq::custody::rule_for(custody, broker, vhost, &views[i].name) {
                Some(_) => views[i].consumers.map(|c| c.saturating_sub(1)),
                None => views[i].consumers,
            },
        })
        .collect()
}
