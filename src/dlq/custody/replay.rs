//! A record is replayed once: a replay claims its records (`held` -> `claimed`, guarded by the
//! state, so two replays cannot claim one record), publishes each with `mandatory` on a confirm
//! channel, and marks it `replayed` only after its confirm came without a return. A record whose
//! copy was returned or refused goes back to `held` with the reason. A record left `claimed` by a
//! crash goes back to `held` at the next start (`recover`): at worst a duplicate.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use chrono::Utc;
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use super::copy::{decode_properties, with_custody_id, CUSTODY_ID_HEADER};
use super::search::{records, Record};
use crate::broker::management::ManagementClient;
use crate::config::BrokerConfig;
use crate::dlq::budget::Budget;
use crate::dlq::message::Filter;
use crate::dlq::mover::{connect, Progress};
use crate::dlq::publish::{Identify, Publisher, Settled};
use crate::dlq::target::Targets;
use crate::storage::custody::States;
use crate::storage::Store;

/// Copies published, and settled, together. Two batches are in flight at most (one published
/// while the one before is settled): a crash leaves at most 1,000 copies sent and not marked,
/// which a later replay sends again (duplicates, never a loss).
const REPLAY_BATCH: usize = 500;

/// Hands back to held the records claimed by a replica that died (crashed, or was killed)
/// mid-replay: one whose heartbeat lease ran out, or a process from before replicas. Records
/// claimed by a live replica, `survivor` (the caller) included, stay claimed: its replay is
/// still sending them. At worst a record whose copy was sent comes back: a duplicate, never a loss.
pub async fn recover(store: &Store, survivor: &str) -> Result<u64, sqlx::Error> {
    store.recover_claims(survivor).await
}

/// Which records a replay takes.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum CustodySelection {
    All,
    Matching(Box<Filter>),
    Records(Vec<i64>),
}

/// Where a replay sends each record.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, Default, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum CustodyTarget {
    /// The queue it last died in (or its framework names), through the default exchange.
    #[default]
    OriginalQueue,
    Queue(String),
}

#[derive(Debug, Clone, Deserialize, Serialize, utoipa::ToSchema)]
#[schema(as = CustodyReplayRequest)]
pub struct ReplayRequest {
    pub selection: CustodySelection,
    #[serde(default)]
    pub target: CustodyTarget,
    /// The user accepted that a target which drops its oldest messages when full may drop some
    /// (`target::Targets`); without it such a target is refused, as for a move.
    #[serde(default)]
    pub accept_drop_head: bool,
    /// The user accepted sending copies where they would stay for good (`target::stranding`);
    /// without it such a target is refused, as for a move.
    #[serde(default)]
    pub accept_stranding: bool,
}

/// How a replay ended.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ReplayReport {
    pub replayed: Vec<(i64, Option<String>, String)>,
    /// (record, message id, why): back to `held`.
    pub failed: Vec<(i64, Option<String>, String)>,
    /// Stopped by a cancel (the user's, or warren's shutdown) before every record was sent.
    pub cancelled: bool,
    /// Selected records not sent because of the cancel: still held.
    pub not_sent: usize,
}

/// Claims the selected held records for `job`, run by replica `replica`; returns the ids it
/// got. The store's state guard makes a record claimable once: a second replay of the same
/// records, in this process or another, claims none of them.
pub(super) async fn claim(store: &Store, (job, replica): (&str, &str), ids: &[i64]) -> Result<Vec<i64>, sqlx::Error> {
    store.claim_records(job, replica, ids).await
}

/// Marks `replayed` (record, where its copy went) replayed now and `failed` held again, in one
/// transaction.
pub(super) async fn settle(store: &Store, replayed: &[(i64, String)], failed: &[i64]) -> Result<(), sqlx::Error> {
    store.settle_records(replayed, failed, Utc::now().timestamp()).await
}

/// Replays the selected records of `queue`'s custody. Each target queue is checked before the
/// first publish; a record goes `replayed` only after its copy was confirmed and not returned.
/// `progress` counts and journals each record's fate as it settles (for the job's page and the
/// audit log's checkpoints); `cancel` stops it between two batches. Whatever way it ends, the
/// records it claimed and did not settle go back to `held`.
pub async fn replay(
    store: &Store,
    broker: &BrokerConfig,
    (vhost, queue): (&str, &str),
    request: &ReplayRequest,
    run: &ReplayRun<'_>,
) -> Result<ReplayReport, String> {
    let result = replay_claimed(store, broker, (vhost, queue), request, run).await;
    // Hands back to `held` what `job` still has claimed: records it had not sent when it stopped
    // (cancelled, or failed part way). A copy sent and not confirmed may then be replayed again:
    // a duplicate, never a loss.
    let handed_back = store.unclaim_records(run.job).await;
    let mut report = result?;
    // Unclaimed now, or by `recover` at the next start if this write failed too.
    if let Ok(n) = handed_back {
        report.not_sent = n as usize;
    }
    Ok(report)
}

/// Who runs a replay and how it is followed.
pub struct ReplayRun<'a> {
    /// What its claims are marked with (`audit-{id}`).
    pub job: &'a str,
    /// The replica that runs it (`Replica::id`): its claims are handed back only once that
    /// replica is dead (`recover`).
    pub replica: &'a str,
    /// It hands the whole custody back to the queue (intake stopped first).
    pub releasing: bool,
    /// Queues refused because copies would stay there for good (`target::stranding`), with why.
    pub stranding: &'a HashMap<String, String>,
    pub progress: &'a Progress,
    pub cancel: &'a CancellationToken,
}

async fn replay_claimed(
    store: &Store,
    broker: &BrokerConfig,
    (vhost, queue): (&str, &str),
    request: &ReplayRequest,
    &ReplayRun { job, replica, releasing, stranding, progress, cancel }: &ReplayRun<'_>,
) -> Result<ReplayReport, String> {
    let id = (broker.name.clone(), vhost.to_string(), queue.to_string());
    let all_filter = Filter::default();
    let filter = match &request.selection {
        CustodySelection::Matching(filter) => filter,
        _ => &all_filter,
    };
    let found = records(store, (&id.0, &id.1, &id.2), filter, (States::Held, None), i64::MAX, &Budget::job(cancel))
        .await
        .map_err(|e| e.to_string())?;
    let chosen: Vec<&Record> = match &request.selection {
        CustodySelection::Records(ids) => {
            let ids: HashSet<i64> = ids.iter().copied().collect();
            found.iter().filter(|r| ids.contains(&r.id)).collect()
        }
        _ => found.iter().collect(),
    };
    progress.expected.store(chosen.len() as u64, Ordering::Relaxed);
    let mut report = ReplayReport::default();
    let mut routes: Vec<(&Record, String)> = Vec::new();
    for h in chosen {
        let to = match &request.target {
            CustodyTarget::Queue(name) => Some(name.clone()),
            CustodyTarget::OriginalQueue => h.original_queue.clone(),
        };
        match to {
            // Replaying into the queue in custody would take it straight back in; a release
            // has stopped its intake first.
            Some(to) if to == queue && !releasing => report.failed.push((
                h.id,
                h.message_id.clone(),
                "its target is this queue, which is in custody".to_string(),
            )),
            Some(to) => routes.push((h, to)),
            None => report.failed.push((
                h.id,
                h.message_id.clone(),
                "no x-death or framework header names the queue it died in: name a target queue".to_string(),
            )),
        }
    }
    // Every distinct target is checked before anything is claimed, as a move checks its
    // targets (`target`): it exists, and it does not drop its oldest when full unless the user
    // accepted that (issue 29, case 1: 900 of 1,000 records replayed into `x-max-length: 100`
    // were confirmed, marked replayed and dropped by the broker).
    let mut targets =
        Targets::new(ManagementClient::new(broker), vhost, request.accept_drop_head).refusing(stranding.clone());
    let mut refused: HashMap<String, String> = HashMap::new();
    for to in routes.iter().map(|(_, to)| to).collect::<HashSet<&String>>() {
        if let Err(why) = targets.check(to).await {
            refused.insert(to.clone(), why);
        }
    }
    let (routes, unfit): (Vec<_>, Vec<_>) = routes.into_iter().partition(|(_, to)| !refused.contains_key(to));
    for (h, to) in unfit {
        report.failed.push((h.id, h.message_id.clone(), refused[&to].clone()));
    }
    let connection = connect(broker, vhost).await.map_err(|e| e.to_string())?;
    let wanted: Vec<i64> = routes.iter().map(|(h, _)| h.id).collect();
    let claimed: HashSet<i64> =
        claim(store, (job, replica), &wanted).await.map_err(|e| e.to_string())?.into_iter().collect();
    let routes: Vec<(&Record, String)> = routes.into_iter().filter(|(h, _)| claimed.contains(&h.id)).collect();

    progress.settled(&report.failed[..], &[]);
    // One batch is published while the one before waits for its confirms and is settled: the
    // broker's confirm latency no longer stops the stream (0.41-0.54 of the shovel's rate
    // with one batch at a time). A channel that fails ends the replay: the records not settled
    // go back to held (`replay`), and a copy the broker took meanwhile is a duplicate, never a
    // loss.
    let mut publisher =
        Publisher::open(&connection, Identify::Header(CUSTODY_ID_HEADER)).await.map_err(|e| e.to_string())?;
    let channel_failed = |e: lapin::Error| format!("the replay stopped: {e}");
    for batch in routes.chunks(REPLAY_BATCH) {
        if cancel.is_cancelled() {
            report.cancelled = true;
            break;
        }
        let unsent = send_batch(store, &mut publisher, batch).await?;
        let settled = publisher.end_batch().await.map_err(channel_failed)?;
        record_settled(store, settled, unsent, &mut report, progress).await?;
    }
    let settled = publisher.settle_all().await.map_err(channel_failed)?;
    record_settled(store, settled, Vec::new(), &mut report, progress).await?;
    publisher.close("replayed").await;
    let _ = connection.close(200, "replayed".into()).await;
    Ok(report)
}

/// A record's id and message id, as its copy goes through the publisher.
type Replaying = (i64, Option<String>);

/// Publishes a batch; returns (record, message id, why) of those that could not be published
/// at all (their row went missing, its properties cannot be read, or lapin would not send it).
async fn send_batch(
    store: &Store,
    publisher: &mut Publisher<Replaying>,
    batch: &[(&Record, String)],
) -> Result<Vec<(i64, Option<String>, String)>, String> {
    let ids: Vec<i64> = batch.iter().map(|(h, _)| h.id).collect();
    let mut bodies = store.replay_parts(&ids).await.map_err(|e| e.to_string())?;
    let mut unsent = Vec::new();
    for (h, to) in batch {
        let Some((properties, body)) = bodies.remove(&h.id) else {
            unsent.push((h.id, h.message_id.clone(), "its row went missing".into()));
            continue;
        };
        let properties = match decode_properties(&properties) {
            Ok(p) => with_custody_id(p, h.id),
            Err(e) => {
                unsent.push((h.id, h.message_id.clone(), e));
                continue;
            }
        };
        let route = ("", to.as_str(), to.clone());
        // A copy lapin refuses to send (its header past the negotiated frame size, say) fails
        // alone; a channel that failed fails each copy after it the same way.
        if let Err(e) = publisher.send((h.id, h.message_id.clone()), route, Arc::new(body), properties).await {
            unsent.push((h.id, h.message_id.clone(), e.to_string()));
        }
    }
    Ok(unsent)
}

/// Marks each settled record replayed (confirmed, not returned) or back to held, in one
/// transaction, and counts them.
async fn record_settled(
    store: &Store,
    settled: Vec<Settled<Replaying>>,
    mut failed: Vec<(i64, Option<String>, String)>,
    report: &mut ReplayReport,
    progress: &Progress,
) -> Result<(), String> {
    let mut replayed = Vec::new();
    for Settled { key: (id, message_id), to, outcome, .. } in settled {
        match outcome {
            Ok(()) => replayed.push((id, message_id, to)),
            Err(why) => failed.push((id, message_id, why)),
        }
    }
    let marks: Vec<(i64, String)> = replayed.iter().map(|(id, _, to)| (*id, to.clone())).collect();
    let back: Vec<i64> = failed.iter().map(|(id, _, _)| *id).collect();
    settle(store, &marks, &back).await.map_err(|e| e.to_string())?;
    progress.settled(&failed, &replayed);
    report.failed.extend(failed);
    report.replayed.extend(replayed);
    Ok(())
}
