//! Intake never loses a message: a queue in custody is consumed into the record store, and a
//! delivery is acked only after its row is committed with `synchronous = FULL` (survives power
//! loss, not only a crash). A commit that fails, or the size budget, stops intake and hands the
//! batch back to the broker unacked. A crash between the commit and the ack leaves the message
//! in both places: a duplicate, marked `redelivered` when it comes in again (the broker says it
//! delivered it before and custody holds a message with the same fingerprint: 4.3 marks every
//! first delivery from a quorum DLQ redelivered, so the broker's flag alone is not enough).
//!
//! `Custody` is the handle of every queue's intake: its task, its state as the pages show it,
//! its own cancel for a release.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::Utc;
use futures_util::StreamExt;
use lapin::options::{BasicCancelOptions, BasicConsumeOptions, BasicGetOptions, BasicQosOptions};
use lapin::types::FieldTable;
use serde::Serialize;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::store::{bytes_kept, commit, kept, QueueId, Taken};
use super::switch::{budget, in_custody, Switch};
use crate::config::{BrokerConfig, CustodyRule};
use crate::dlq::mover::connect;
use crate::history::storage::Storage;
use crate::storage::Store;

/// Deliveries taken per commit, at most (and the consumer's prefetch).
const BATCH: usize = 200;

/// Message bytes intake holds at once, about: the consumer's prefetch is as many messages of the
/// queue's average size as fit (at least one), and a batch is committed once it holds this
/// much. A count alone took six 40 MB messages in at once (745 MB of memory, issue 29, case 8).
const INTAKE_MEMORY: usize = 32 * 1024 * 1024;

/// The prefetch of an intake that starts on an empty queue, whose message sizes are unknown.
const PREFETCH_UNKNOWN_SIZE: u16 = 16;

/// How long intake waits for more deliveries before committing a smaller batch.
const GATHER: Duration = Duration::from_millis(50);

/// Intake of one queue, as the pages show it.
#[derive(Debug, Clone, Serialize, PartialEq, utoipa::ToSchema)]
pub struct IntakeState {
    /// `running` or `stopped`.
    pub state: &'static str,
    /// Why it stopped (the messages stay in the broker), or empty.
    pub reason: String,
    /// Messages taken in since warren started.
    pub taken: u64,
    /// Messages this intake left unacked in the broker because a copy of them would differ
    /// from them (`target::copy_would_differ`): how many, and the first `LEFT_SHOWN` with why.
    /// They hold one of the consumer's prefetch slots each until intake stops, and go back to
    /// the queue then.
    pub left_count: u64,
    pub left: Vec<String>,
    /// When a stopped intake is tried again (unix seconds): a broker that went away or a
    /// database that refused a write may be back, and replays may have made room in the budget.
    #[serde(flatten, serialize_with = "crate::times::retry_at")]
    #[schema(schema_with = crate::times::schema::retry_at)]
    pub retry_at: Option<i64>,
}

/// How long a stopped intake waits before it is tried again.
const RETRY_AFTER_SECS: i64 = 30;

/// The custody of every queue a `[[custody]]` rule names: intake tasks, their states.
#[derive(Clone)]
pub struct Custody {
    states: Arc<Mutex<HashMap<QueueId, IntakeState>>>,
    /// Each running intake's own cancel, for a release.
    stops: Arc<Mutex<HashMap<QueueId, CancellationToken>>>,
    tasks: TaskTracker,
    /// Where every intake keeps what it takes, and the poller reads custody's counts.
    store: Store,
    /// Checked before every ack: a commit into a database file that was deleted or replaced
    /// succeeds and is lost at the next start.
    storage: Arc<Storage>,
    /// With replicas (`under_leases`), each batch is committed under the broker's lease, fenced
    /// with its epoch: an intake still running on a replica that lost the broker keeps nothing
    /// more, and what it holds unacked goes back to the queue for the next holder's intake.
    replica: Option<Arc<crate::replicas::Replica>>,
}

impl Custody {
    pub fn new(store: Store, storage: Arc<Storage>) -> Custody {
        let (states, stops, tasks) = (Arc::default(), Arc::default(), TaskTracker::new());
        Custody { states, stops, tasks, store, storage, replica: None }
    }

    /// Commits every batch under the lease `replica` holds on the queue's broker.
    pub fn under_leases(mut self, replica: Arc<crate::replicas::Replica>) -> Custody {
        self.replica = Some(replica);
        self
    }

    /// The store the intakes keep their records in.
    pub fn store(&self) -> &Store {
        &self.store
    }

    fn set(&self, id: &QueueId, f: impl FnOnce(&mut IntakeState)) {
        let mut states = self.states.lock().unwrap_or_else(|p| p.into_inner());
        let state = states.entry(id.clone()).or_insert_with(|| IntakeState {
            state: "running",
            reason: String::new(),
            taken: 0,
            left_count: 0,
            left: Vec::new(),
            retry_at: None,
        });
        f(state);
    }

    pub fn state(&self, broker: &str, vhost: &str, queue: &str) -> Option<IntakeState> {
        let states = self.states.lock().unwrap_or_else(|p| p.into_inner());
        states.get(&(broker.to_string(), vhost.to_string(), queue.to_string())).cloned()
    }

    /// Stops a queue's intake (a release) and waits until it handed back what it held.
    pub async fn stop(&self, broker: &str, vhost: &str, queue: &str) {
        let id = (broker.to_string(), vhost.to_string(), queue.to_string());
        let token = self.stops.lock().unwrap_or_else(|p| p.into_inner()).remove(&id);
        let Some(token) = token else { return };
        token.cancel();
        for _ in 0..100 {
            if self.state(broker, vhost, queue).is_none_or(|s| s.state != "running") {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        // Off for good, not to be tried again: `start_intakes` starts it when it is switched on.
        self.states.lock().unwrap_or_else(|p| p.into_inner()).remove(&id);
    }

    /// Runs a replay in the background, tracked for the ordered shutdown.
    pub fn spawn(&self, task: impl std::future::Future<Output = ()> + Send + 'static) {
        self.tasks.spawn(task);
    }

    /// Waits (up to `deadline`) until every intake handed back what it held.
    pub async fn shutdown(&self, deadline: Duration) {
        self.tasks.close();
        if tokio::time::timeout(deadline, self.tasks.wait()).await.is_err() {
            tracing::warn!("custody intake did not stop within {deadline:?}; the broker returns what it held");
        }
    }
}

/// Starts intake for every queue of `queues` (broker, vhost, name) in custody (`in_custody`) that
/// has none running, and again `RETRY_AFTER_SECS` after one stopped (a broker that went away, a
/// failed write, the budget): the page says why it stopped and when it is tried again.
pub fn start_intakes(
    custody: &Custody,
    rules: &[CustodyRule],
    switched: &HashMap<(String, String), Switch>,
    broker: &BrokerConfig,
    queues: impl Iterator<Item = (String, String)>,
    cancel: &CancellationToken,
) {
    for (vhost, queue) in queues {
        let switch = switched.get(&(vhost.clone(), queue.clone())).copied();
        if !in_custody(rules, switch, &broker.name, &vhost, &queue) {
            continue;
        }
        let max_bytes = budget(rules, &broker.name, &vhost, &queue);
        let id = (broker.name.clone(), vhost, queue);
        let now = Utc::now().timestamp();
        let due = match custody.states.lock().unwrap_or_else(|p| p.into_inner()).get(&id) {
            None => true,
            Some(s) => s.state == "stopped" && s.retry_at.is_some_and(|at| at <= now),
        };
        if !due {
            continue;
        }
        custody.set(&id, |s| {
            s.state = "running";
            s.retry_at = None;
        });
        let own = cancel.child_token();
        custody.stops.lock().unwrap_or_else(|p| p.into_inner()).insert(id.clone(), own.clone());
        let (custody2, broker, cancel) = (custody.clone(), broker.clone(), own);
        custody.tasks.spawn(async move {
            let outcome = intake(&custody2, &broker, &id, max_bytes, &cancel).await;
            let reason = match outcome {
                Ok(()) => "warren stopped".to_string(),
                Err(e) => e,
            };
            if !cancel.is_cancelled() {
                tracing::warn!(queue = %id.2, %reason, "custody intake stopped");
            }
            custody2.set(&id, |s| {
                s.state = "stopped";
                s.reason = reason;
                s.retry_at = Some(Utc::now().timestamp() + RETRY_AFTER_SECS);
            });
        });
    }
}

/// What intake does with one delivery.
enum Sorted {
    /// A row for the batch (boxed: a row is large beside the other variant).
    Keep(Box<Taken>),
    /// Left unacked in the broker: a copy of it (a row here, a replay later) would differ from
    /// it, so acking it would lose what warren could not read, as a move would (issue 29: intake
    /// took messages whose headers nest past the parser's limit, or hold bytes that are not
    /// UTF-8, and acked them for altered rows).
    Leave { tag: u64, what: String },
}

/// How many of the messages left in the broker the intake state names.
const LEFT_SHOWN: usize = 20;

fn sort(delivery: lapin::message::Delivery) -> Result<Sorted, String> {
    if let Some(why) = crate::dlq::target::copy_would_differ(&delivery.properties) {
        let id = delivery.properties.message_id().as_ref().map(|s| format!("{:?}", s.as_str()));
        let what = format!("message {}: {why}", id.as_deref().unwrap_or("without an id"));
        return Ok(Sorted::Leave { tag: delivery.delivery_tag, what });
    }
    taken(delivery).map(|t| Sorted::Keep(Box::new(t)))
}

/// Notes a message left unacked in the broker (`Sorted::Leave`).
fn leave(custody: &Custody, id: &QueueId, left: &mut Vec<u64>, tag: u64, what: String) {
    tracing::warn!(queue = %id.2, %what, "custody intake left a message in the broker");
    left.push(tag);
    custody.set(id, |s| {
        s.left_count += 1;
        if s.left.len() < LEFT_SHOWN {
            s.left.push(what);
        }
    });
}

/// A delivery as a row, or why it cannot be kept as it came (its properties would not encode).
fn taken(delivery: lapin::message::Delivery) -> Result<Taken, String> {
    let lapin::message::Delivery { delivery_tag, exchange, routing_key, redelivered, properties, data, .. } = delivery;
    kept(delivery_tag, (exchange.as_str(), routing_key.as_str()), redelivered, &properties, data)
        .map_err(|e| format!("the message with delivery tag {delivery_tag} cannot be kept: {e}"))
}

/// Consumes `id`'s queue into custody until cancelled or until a write fails or the budget is
/// reached (the error says which). Unacked deliveries go back to the broker when the channel
/// closes: a quorum queue counts that as a delivery, once.
async fn intake(
    custody: &Custody,
    broker: &BrokerConfig,
    id: &QueueId,
    max_bytes: u64,
    cancel: &CancellationToken,
) -> Result<(), String> {
    // Before the first delivery: a consumer that only hands its batch back would spend a
    // delivery of each message's budget on a quorum queue at every retry.
    custody
        .storage
        .check(&*custody.store)
        .await
        .map_err(|e| format!("{e}: intake did not start, the messages stay in the broker"))?;
    let mut kept = bytes_kept(&custody.store, id).await.map_err(|e| format!("reading custody's size: {e}"))?;
    // What a run before this one left unacked went back to the queue when its channel closed.
    custody.set(id, |s| {
        s.left_count = 0;
        s.left.clear();
    });
    let mut left: Vec<u64> = Vec::new();
    let queue = crate::dlq::mover::short_name("the queue", &id.2).map_err(|e| e.to_string())?;
    let connection = connect(broker, &id.1).await.map_err(|e| e.to_string())?;
    let channel = connection.create_channel().await.map_err(|e| e.to_string())?;
    // The first message, read alone when the queue's statistics do not tell its sizes: its size
    // sets the prefetch. It is committed with the first batch (its delivery tag is below the
    // consumer's, so the batch's multiple ack covers it).
    let (prefetch, mut carried) = match intake_prefetch(broker, &id.1, &id.2).await {
        Some(prefetch) => (prefetch, Vec::new()),
        None => match channel.basic_get(queue.clone(), BasicGetOptions { no_ack: false }).await {
            Ok(Some(got)) => {
                let prefetch = (INTAKE_MEMORY / got.delivery.data.len().max(1)).clamp(1, BATCH) as u16;
                match sort(got.delivery)? {
                    Sorted::Keep(first) => (prefetch, vec![*first]),
                    Sorted::Leave { tag, what } => {
                        leave(custody, id, &mut left, tag, what);
                        (prefetch, Vec::new())
                    }
                }
            }
            Ok(None) => (PREFETCH_UNKNOWN_SIZE, Vec::new()),
            Err(e) => return Err(format!("reading {}: {e}", id.2)),
        },
    };
    channel.basic_qos(prefetch, BasicQosOptions::default()).await.map_err(|e| e.to_string())?;
    let mut consumer = channel
        .basic_consume(queue, "warren-custody".into(), BasicConsumeOptions::default(), FieldTable::default())
        .await
        .map_err(|e| format!("consuming {}: {e}", id.2))?;
    let outcome = loop {
        let mut batch = std::mem::take(&mut carried);
        // No more deliveries can come than the prefetch until this batch is acked: it is
        // committed as soon as they are in.
        let most = (usize::from(prefetch) + batch.len()).min(BATCH);
        let mut failed = None;
        if batch.is_empty() {
            let first = tokio::select! {
                _ = cancel.cancelled() => break Ok(()),
                next = consumer.next() => next,
            };
            // Every way out of the loop goes through the cancel and close below, so that nothing
            // taken stays unacked on a connection nobody closes.
            let first = match first {
                Some(Ok(delivery)) => delivery,
                Some(Err(e)) => break Err(format!("the consumer failed: {e}")),
                None => break Err("the broker closed the consumer".to_string()),
            };
            match sort(first) {
                Ok(Sorted::Keep(t)) => batch.push(*t),
                Ok(Sorted::Leave { tag, what }) => {
                    leave(custody, id, &mut left, tag, what);
                    continue;
                }
                Err(e) => failed = Some(e),
            }
        }
        let batch_bytes = |batch: &[Taken]| batch.iter().map(|t| t.body.len() + t.properties.len()).sum::<usize>();
        while batch.len() < most && batch_bytes(&batch) < INTAKE_MEMORY && failed.is_none() {
            match tokio::time::timeout(GATHER, consumer.next()).await {
                Ok(Some(Ok(delivery))) => match sort(delivery) {
                    Ok(Sorted::Keep(t)) => batch.push(*t),
                    Ok(Sorted::Leave { tag, what }) => leave(custody, id, &mut left, tag, what),
                    Err(e) => failed = Some(e),
                },
                Ok(Some(Err(e))) => {
                    failed = Some(format!("the consumer failed: {e}"));
                    break;
                }
                Ok(None) | Err(_) => break,
            }
        }
        if let Some(e) = failed {
            break Err(e);
        }
        if batch.is_empty() {
            continue;
        }
        let size: u64 = batch.iter().map(|t| (t.body.len() + t.properties.len()) as u64).sum();
        if kept + size > max_bytes {
            break Err(format!(
                "the size budget of {max_bytes} bytes is reached ({kept} kept): intake stopped, the rest stays in \
                 the broker"
            ));
        }
        // The commit is durable only in the file warren reads at its next start: checked before
        // the commit (nothing written in vain) and after it, before the ack (the file may go
        // while the commit runs). Moves and purges make the same check before they act.
        if let Err(e) = custody.storage.file_check() {
            break Err(format!("{e}: intake stopped, the batch stays in the broker"));
        }
        const LOST: &str = "another replica took this broker's work over: intake stopped here, the batch stays in the \
                            broker for that replica's intake";
        let lease = match &custody.replica {
            None => None,
            Some(replica) => match replica.held(&crate::replicas::broker_work(&id.0)) {
                Some(held) => Some(held),
                None => break Err(LOST.into()),
            },
        };
        match commit(&custody.store, id, &batch, lease.as_ref()).await {
            Ok(true) => {}
            Ok(false) => break Err(LOST.into()),
            Err(e) => {
                custody.storage.failed("custody intake", &e);
                break Err(format!(
                    "the database refused the batch ({e}): intake stopped, the batch stays in the broker"
                ));
            }
        }
        if let Err(e) = custody.storage.file_check() {
            break Err(format!("{e}: intake stopped, the batch stays in the broker"));
        }
        let last = batch.last().map(|t| t.tag).unwrap_or_default();
        let acked = if left.is_empty() {
            channel.basic_ack(last, lapin::options::BasicAckOptions { multiple: true }).await
        } else {
            // A multiple ack would cover the messages left unacked below `last`.
            let mut acked = Ok(());
            for t in &batch {
                acked = channel.basic_ack(t.tag, lapin::options::BasicAckOptions { multiple: false }).await;
                if acked.is_err() {
                    break;
                }
            }
            acked
        };
        if let Err(e) = acked {
            // Committed and not acked: the broker delivers them again, a duplicate each.
            break Err(format!("acking a committed batch failed ({e}): its messages will come in again"));
        }
        kept += size;
        custody.set(id, |s| s.taken += batch.len() as u64);
    };
    // Cancel first, so that nothing more is delivered while the channel closes (DOMAIN.md §5).
    let _ = channel.basic_cancel("warren-custody".into(), BasicCancelOptions::default()).await;
    let _ = channel.close(200, "custody intake stopped".into()).await;
    let _ = connection.close(200, "custody intake stopped".into()).await;
    outcome
}

/// The prefetch of `queue`'s intake: as many messages of the queue's average size as fit in
/// [`INTAKE_MEMORY`], from the management API's `message_bytes_ready`. The broker pushes that
/// many deliveries whatever warren does with them, so this, not the batch, bounds memory.
/// `None` when they do not say (an empty queue, statistics that lag behind the first arrivals,
/// or a broker that keeps none).
async fn intake_prefetch(broker: &BrokerConfig, vhost: &str, queue: &str) -> Option<u16> {
    match crate::dlq::mover::ready_sizes(broker, vhost, queue).await {
        Ok(Some((n, bytes))) if n > 0 && bytes > 0 => {
            let average = (bytes / n).max(1);
            Some((INTAKE_MEMORY as u64 / average).clamp(1, BATCH as u64) as u16)
        }
        _ => None,
    }
}
