//! Moves as background jobs: every requeue, move or delete runs outside the HTTP request, with
//! live progress, a cancel, and a final report. The audit log records each job before it starts,
//! checkpoints its progress every second, and records how it ended; a job cut short by a crash
//! is marked `interrupted` at the next start (see `dlq::fates::mark_interrupted`).
//!
//! Every move goes through warren's own mover (`dlq`), never the broker's shovel: a shovel
//! publishes without `mandatory` and the broker confirms what no queue took, so a target
//! deleted mid-move made it ack originals whose copies went nowhere (issue 16, case 3).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::browse::Snapshot;
use super::custody::{self, ReplayRequest};
use super::fates;
use super::message::Filter;
use super::mover::{self, MoveError, MoveReport, Plan, Progress, ProgressCounts, Selection, Target, Wanted};
use crate::audit;
use crate::config::{BrokerConfig, Config};
use crate::history::storage::Storage;
use crate::live::Live;
use crate::metrics::QueueView;

/// (broker, vhost, queue)
type QueueId = (String, String, String);

/// How often a running job's progress is written to the audit log.
const CHECKPOINT_EVERY: Duration = Duration::from_secs(1);
/// Jobs kept in memory; older finished jobs are still in the audit log.
const KEEP_JOBS: usize = 200;

/// What a job uses of warren's shared handles, which `AppState::dlq` hands over: the
/// dead-letter wing sits below the state that holds it.
#[derive(Clone)]
pub struct Handles {
    pub config: Arc<Config>,
    pub store: crate::storage::Store,
    /// Whether the database can be written; a job's audit row must be durable before it starts.
    pub storage: Arc<Storage>,
    /// The queues as the last poll saw them, for the targets where copies would stay for good.
    pub live: Live,
    pub snapshots: super::browse::Snapshots,
    pub jobs: Jobs,
    /// This process as a replica: its id goes with each job's audit entry and claims, so that
    /// another replica recovers them only once this one is dead.
    pub replica: Arc<crate::replicas::Replica>,
}

impl Handles {
    fn broker_config(&self, name: &str) -> Option<&BrokerConfig> {
        self.config.brokers.iter().find(|b| b.name == name)
    }
}

/// Which messages, as the API and the forms name them. Single messages are named as a snapshot
/// showed them, and a move takes exactly those (`Selection::Messages`).
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, utoipa::ToSchema)]
#[schema(as = MoveSelection)]
#[serde(rename_all = "snake_case")]
pub enum Choice {
    /// Positions in the queue's current snapshot (1 = the oldest it showed).
    Positions(Vec<usize>),
    /// The `fingerprint`s of messages in the queue's current snapshot.
    Messages(Vec<String>),
    /// Every message the queue holds when the move starts.
    All,
    /// Every message the queue holds when the move starts that matches the filter.
    Matching(Box<Filter>),
}

impl Choice {
    /// The mover's selection: single messages are looked up in `snapshot`, the one the user
    /// saw, so that a move never acts on a position counted at the time of the move.
    pub fn resolve(&self, snapshot: Option<&Snapshot>) -> Result<Selection, StartError> {
        let named = match self {
            Choice::All => return Ok(Selection::All),
            Choice::Matching(filter) => {
                filter.check().map_err(MoveError::Refused)?;
                return Ok(Selection::Matching(filter.clone()));
            }
            Choice::Positions(p) if p.is_empty() || p.contains(&0) => {
                return Err(MoveError::Refused("positions start at 1 and at least one is needed".into()).into())
            }
            Choice::Messages(m) if m.is_empty() => {
                return Err(MoveError::Refused("name at least one message".into()).into())
            }
            Choice::Positions(p) => p.len(),
            Choice::Messages(m) => m.len(),
        };
        let Some(snapshot) = snapshot else {
            return Err(StartError::Stale(
                "single messages are named as a snapshot showed them, and this queue has no snapshot: take one, \
                 then select from it"
                    .to_string(),
            ));
        };
        // A move or purge ran since: a position may name another message now, and a named
        // message may be gone. Refused rather than guessed; "all" and "matching" still work.
        if let Some(what) = &snapshot.outdated {
            return Err(StartError::Stale(format!(
                "the snapshot taken at {} is outdated (taken before {what}): take one again (Refresh), then select from it",
                snapshot.taken_at.format("%Y-%m-%d %H:%M:%S UTC")
            )));
        }
        let stale = |what: String| {
            StartError::Stale(format!(
                "{what} in the snapshot taken at {}: it changed since the selection was made; look again",
                snapshot.taken_at.format("%Y-%m-%d %H:%M:%S UTC")
            ))
        };
        // Each named message's index in the snapshot; a message named twice counts once.
        let mut indices: Vec<usize> = Vec::with_capacity(named.min(snapshot.messages.len()));
        let mut taken = vec![false; snapshot.messages.len()];
        match self {
            Choice::Positions(positions) => {
                for &p in positions {
                    let i = snapshot.messages.iter().position(|m| m.position == p);
                    let i = i.ok_or_else(|| stale(format!("no message at position {p}")))?;
                    if !std::mem::replace(&mut taken[i], true) {
                        indices.push(i);
                    }
                }
            }
            Choice::Messages(fingerprints) => {
                for f in fingerprints {
                    // The n-th mention of a fingerprint is the n-th message alike.
                    let i = (0..snapshot.messages.len())
                        .find(|&i| !taken[i] && snapshot.messages[i].fingerprint == *f)
                        .ok_or_else(|| stale(format!("no message {:?}", f.chars().take(40).collect::<String>())))?;
                    taken[i] = true;
                    indices.push(i);
                }
            }
            Choice::All | Choice::Matching(_) => unreachable!("returned above"),
        }
        let mut wanted = Vec::with_capacity(indices.len());
        for i in indices {
            let m = &snapshot.messages[i];
            if let Some(held) = &m.held_in {
                return Err(MoveError::Refused(format!(
                    "message {} of the snapshot is no longer in this queue: it is in {held:?}, select it there",
                    m.position
                ))
                .into());
            }
            wanted.push(Wanted {
                fingerprint: m.fingerprint.clone(),
                identity: m.identity.clone(),
                position: m.position,
                message_id: m.message_id.clone(),
            });
        }
        wanted.sort_by_key(|w| w.position);
        Ok(Selection::Messages(wanted))
    }
}

/// What to move, as the API and the forms ask for it.
#[derive(Debug, Clone, Deserialize, Serialize, utoipa::ToSchema)]
pub struct MoveRequest {
    pub selection: Choice,
    #[serde(default)]
    pub target: Target,
    /// The user accepts that a target which drops its oldest messages when full may drop some.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub accept_drop_head: bool,
    /// The user accepts sending copies where they would stay for good (`target::stranding`: a
    /// wait queue whose expiry no longer applies to them). Without it the API refuses (409).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub accept_stranding: bool,
}

impl MoveRequest {
    /// The audit log's name for the action.
    pub fn action(&self) -> &'static str {
        match self.target {
            Target::Discard => "delete",
            Target::Queue(_) => "move",
            Target::OriginalQueue | Target::OriginalExchange => "requeue",
        }
    }
}

/// How a job is carried out: by warren's own mover (the only way to move messages since the
/// broker's shovel was found to lose them; kept in the API, which showed `shovel` too), or by a
/// replay of records from warren's custody.
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq, utoipa::ToSchema)]
#[schema(as = JobMethod)]
#[serde(rename_all = "kebab-case")]
pub enum Method {
    InProcess,
    Custody,
}

/// What a job runs.
enum Work {
    Move(Plan),
    /// A replay from custody; `releasing` when it hands the whole custody back to the queue.
    Replay {
        request: ReplayRequest,
        releasing: bool,
        /// As [`Plan::stranding`].
        stranding: HashMap<String, String>,
    },
}

/// One move, running or finished.
#[derive(Debug)]
pub struct Job {
    /// The audit log entry's id.
    pub id: i64,
    pub broker: String,
    pub vhost: String,
    pub queue: String,
    pub action: &'static str,
    pub method: Method,
    pub started_at: DateTime<Utc>,
    pub progress: Progress,
    cancel: CancellationToken,
    state: Mutex<JobState>,
}

#[derive(Debug, Clone)]
struct JobState {
    finished: Option<Finished>,
    /// Why the job's end is not recorded yet (the audit log cannot be written).
    audit_problem: Option<String>,
}

#[derive(Debug, Clone)]
struct Finished {
    at: DateTime<Utc>,
    outcome: &'static str,
    result: Result<MoveReport, String>,
}

/// A job as the API shows it.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct JobStatus {
    pub id: i64,
    pub broker: String,
    pub vhost: String,
    pub queue: String,
    pub action: String,
    /// `in-process`; unknown for jobs known only from the audit log.
    pub method: Option<Method>,
    /// `running`, then `done`, `partial`, `failed`, `cancelled` (or `interrupted` by a crash).
    pub state: String,
    pub started_at: DateTime<Utc>,
    pub finished_at: Option<DateTime<Utc>>,
    pub progress: ProgressCounts,
    /// The full report, once finished (kept in memory only).
    pub report: Option<MoveReport>,
    pub error: Option<String>,
}

impl Job {
    pub fn cancel(&self) {
        self.cancel.cancel();
    }

    pub fn status(&self) -> JobStatus {
        let state = self.state.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let (outcome, finished_at, report, error) = match state.finished {
            None => ("running", None, None, state.audit_problem),
            Some(f) => match f.result {
                Ok(report) => (f.outcome, Some(f.at), Some(report), None),
                Err(e) => (f.outcome, Some(f.at), None, Some(e)),
            },
        };
        JobStatus {
            id: self.id,
            broker: self.broker.clone(),
            vhost: self.vhost.clone(),
            queue: self.queue.clone(),
            action: self.action.to_string(),
            method: Some(self.method),
            state: outcome.to_string(),
            started_at: self.started_at,
            finished_at,
            progress: self.progress.counts(),
            report,
            error,
        }
    }
}

impl JobStatus {
    /// A job known only from the audit log (it ran before warren restarted), with the report
    /// its recorded fates give: each message moved (and where), failed (and why), kept in a
    /// holding queue, or not found.
    pub fn from_audit(r: audit::Record, fates: Vec<fates::MessageRecord>) -> JobStatus {
        let mut report = MoveReport::default();
        for f in fates {
            let (position, message_id) = (f.position.max(0) as usize, f.message_id);
            match f.outcome.as_str() {
                "moved" => report.moved.push(mover::Moved { position, message_id, to_queue: f.detail }),
                "held" => report.held.push(mover::Held { position, message_id, queue: f.detail, delivery_count: 0 }),
                "not_found" => report.not_found.push(mover::Wanted {
                    fingerprint: String::new(),
                    identity: String::new(),
                    position,
                    message_id,
                }),
                _ => report.failed.push(mover::Failed { position, message_id, reason: f.detail }),
            }
        }
        let recorded = !(report.moved.is_empty() && report.failed.is_empty() && report.held.is_empty());
        JobStatus {
            id: r.id,
            broker: r.broker,
            vhost: r.vhost,
            queue: r.queue,
            action: r.action,
            method: None,
            state: r.outcome,
            started_at: DateTime::from_timestamp(r.at, 0).unwrap_or_default(),
            finished_at: None,
            progress: ProgressCounts { moved: r.moved as u64, failed: r.failed as u64, ..Default::default() },
            report: recorded.then_some(report),
            error: r.detail,
        }
    }
}

/// The running and recent jobs, and the tasks that run them (for an ordered shutdown).
#[derive(Clone, Default)]
pub struct Jobs {
    jobs: Arc<Mutex<BTreeMap<i64, Arc<Job>>>>,
    tasks: TaskTracker,
    cancel: CancellationToken,
    /// Held from the check for a running move of the queue to the new job's insertion, so
    /// that two requests at once cannot both pass the check.
    starting: Arc<tokio::sync::Mutex<()>>,
    /// When a move last put messages into each queue, by (broker, vhost, queue): they are older
    /// than their place in it says, so a FIFO age estimate does not hold there until they drain.
    requeued: Arc<Mutex<std::collections::HashMap<QueueId, DateTime<Utc>>>>,
}

impl Jobs {
    /// When a move last put messages into each of a broker's queues, by (vhost, queue).
    pub fn requeued_into(&self, broker: &str) -> std::collections::HashMap<(String, String), DateTime<Utc>> {
        let requeued = self.requeued.lock().unwrap_or_else(|p| p.into_inner());
        requeued
            .iter()
            .filter(|((b, _, _), _)| b == broker)
            .map(|((_, vhost, queue), at)| ((vhost.clone(), queue.clone()), *at))
            .collect()
    }

    fn record_requeued(&self, broker: &str, vhost: &str, report: &MoveReport, target: &Target) {
        // A copy sent through an exchange went to queues its bindings chose: not known here.
        if matches!(target, Target::OriginalExchange | Target::Discard) {
            return;
        }
        self.put_into(broker, vhost, report.moved.iter().map(|m| m.to_queue.as_str()));
    }

    /// Records that warren just put older messages into these queues (a move, or a replay from
    /// custody): their age estimates are lower bounds until those drain.
    pub fn put_into<'q>(&self, broker: &str, vhost: &str, queues: impl Iterator<Item = &'q str>) {
        let now = Utc::now();
        let mut requeued = self.requeued.lock().unwrap_or_else(|p| p.into_inner());
        for queue in queues.filter(|q| !q.is_empty()) {
            requeued.insert((broker.to_string(), vhost.to_string(), queue.to_string()), now);
        }
    }

    /// The running move of a queue, if there is one. Replays from custody do not count: they
    /// read warren's database, not the queue, and their claims keep them apart.
    fn running_on(&self, broker: &str, vhost: &str, queue: &str) -> Option<i64> {
        let jobs = self.jobs.lock().unwrap_or_else(|p| p.into_inner());
        jobs.values()
            .find(|j| {
                j.method == Method::InProcess
                    && (j.broker.as_str(), j.vhost.as_str(), j.queue.as_str()) == (broker, vhost, queue)
                    && j.state.lock().unwrap_or_else(|p| p.into_inner()).finished.is_none()
            })
            .map(|j| j.id)
    }

    /// The queues of `broker` a move is reading now, by (vhost, queue).
    pub fn moving_from(&self, broker: &str) -> std::collections::HashSet<(String, String)> {
        let jobs = self.jobs.lock().unwrap_or_else(|p| p.into_inner());
        jobs.values()
            .filter(|j| {
                j.method == Method::InProcess
                    && j.broker == broker
                    && j.state.lock().unwrap_or_else(|p| p.into_inner()).finished.is_none()
            })
            .map(|j| (j.vhost.clone(), j.queue.clone()))
            .collect()
    }

    pub fn get(&self, id: i64) -> Option<Arc<Job>> {
        self.jobs.lock().unwrap_or_else(|p| p.into_inner()).get(&id).cloned()
    }

    fn insert(&self, job: Arc<Job>) {
        let mut jobs = self.jobs.lock().unwrap_or_else(|p| p.into_inner());
        jobs.insert(job.id, job);
        while jobs.len() > KEEP_JOBS {
            let oldest_finished =
                jobs.iter().find(|(_, j)| j.state.lock().unwrap_or_else(|p| p.into_inner()).finished.is_some());
            match oldest_finished.map(|(id, _)| *id) {
                Some(id) => jobs.remove(&id),
                None => break,
            };
        }
    }

    /// Cancels every running job and waits (up to `deadline`) until each has handed back what
    /// it held and recorded how it ended.
    pub async fn shutdown(&self, deadline: Duration) {
        self.cancel.cancel();
        self.tasks.close();
        if tokio::time::timeout(deadline, self.tasks.wait()).await.is_err() {
            tracing::warn!("moves did not stop within {deadline:?}; the next start marks them interrupted");
        }
    }
}

/// Why a move did not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("no broker named {0:?}")]
    NoBroker(String),
    #[error(transparent)]
    Refused(#[from] MoveError),
    /// Another move of the same queue is running (its job id). Two at once read each other's
    /// messages: a position or a filter would pick messages the user did not select.
    #[error("another move of this queue is running (job {0}): wait for it or cancel it at /jobs/{0}")]
    Busy(i64),
    /// The selection names messages of a snapshot that is not the queue's current one.
    #[error("{0}")]
    Stale(String),
    /// The audit row could not be made durable (or the database file is gone): nothing was read.
    #[error("{0}")]
    Storage(String),
}

/// Checks `request` against the queue, records it in the audit log and starts it in the
/// background. Refusals (DOMAIN.md §5: reads that could make the broker drop messages) happen
/// here, before anything is read or recorded.
pub async fn start(
    handles: &Handles,
    view: &QueueView,
    request: MoveRequest,
    actor: &str,
) -> Result<Arc<Job>, StartError> {
    if handles.broker_config(&view.broker).is_none() {
        return Err(StartError::NoBroker(view.broker.to_string()));
    }
    let broker = handles.broker_config(&view.broker).expect("checked above");
    // The limit as the broker applies it now: the last poll's can be seconds old.
    let delivery_limit = if &*view.kind == "quorum" {
        let client = crate::broker::management::ManagementClient::new(broker);
        crate::broker::policies::hand_back_limit_now(&client, &view.vhost, &view.name).await.map_err(|e| {
            MoveError::Refused(format!("the queue's delivery limit could not be read from the broker: {e}"))
        })?
    } else {
        None
    };
    let snapshot = handles.snapshots.get(&view.broker, &view.vhost, &view.name);
    let plan = Plan {
        selection: request.selection.resolve(snapshot.as_deref())?,
        target: request.target.clone(),
        delivery_limit,
        quorum: &*view.kind == "quorum",
        accept_drop_head: request.accept_drop_head,
        // The queues where copies would stay for good, as the last poll saw them: also those
        // the messages name as they are read (`original_queue` without a snapshot), which no
        // check before the move could know (issue 31, must-have 5).
        stranding: if request.accept_stranding {
            HashMap::new()
        } else {
            strandings(&handles.live, (&view.broker, &view.vhost, &view.name))
        },
    };
    plan.check()?;
    let _starting = handles.jobs.starting.lock().await;
    if let Some(running) = handles.jobs.running_on(&view.broker, &view.vhost, &view.name) {
        return Err(StartError::Busy(running));
    }
    let entry = audit::Entry {
        actor,
        broker: &view.broker,
        vhost: &view.vhost,
        queue: &view.name,
        action: request.action(),
        request: serde_json::to_string(&request).expect("request serialises"),
        run_by: handles.replica.id(),
    };
    launch(handles, entry, request.action(), Method::InProcess, Work::Move(plan)).await
}

/// Records `entry` (whose action is `action`) in the audit log, durably, before anything is read
/// or claimed, and runs `work` as the job that entry follows.
async fn launch(
    handles: &Handles,
    entry: audit::Entry<'_>,
    action: &'static str,
    method: Method,
    work: Work,
) -> Result<Arc<Job>, StartError> {
    // The row must be durable before anything moves: a file deleted under warren takes writes
    // and loses them, so it is checked first.
    handles.storage.check(&*handles.store).await.map_err(StartError::Storage)?;
    let (broker, vhost, queue) = (entry.broker.to_string(), entry.vhost.to_string(), entry.queue.to_string());
    let id = audit::start(&handles.store, entry)
        .await
        .map_err(|e| StartError::Storage(handles.storage.failed("the audit log", &e)))?;
    let job = Arc::new(Job {
        id,
        broker,
        vhost,
        queue,
        action,
        method,
        started_at: Utc::now(),
        progress: Progress::default(),
        cancel: handles.jobs.cancel.child_token(),
        state: Mutex::new(JobState { finished: None, audit_problem: None }),
    });
    handles.jobs.insert(job.clone());
    handles.jobs.tasks.spawn(run(handles.clone(), job.clone(), work));
    Ok(job)
}

/// Records a replay from `queue`'s custody in the audit log (durably, before anything is
/// claimed) and runs it as a job: live progress, a cancel, and a final report like a move's.
/// The caller has checked the queue, the broker and the request.
pub async fn start_replay(
    handles: &Handles,
    (broker, vhost, queue): (&str, &str, &str),
    request: ReplayRequest,
    actor: &str,
    releasing: bool,
) -> Result<Arc<Job>, StartError> {
    if handles.broker_config(broker).is_none() {
        return Err(StartError::NoBroker(broker.to_string()));
    }
    let action = if releasing { "custody release" } else { "custody replay" };
    let entry = audit::Entry {
        actor,
        broker,
        vhost,
        queue,
        action,
        request: serde_json::to_string(&request).expect("a request serialises"),
        run_by: handles.replica.id(),
    };
    // A release hands the records back to the queue they were taken from.
    let stranding = if request.accept_stranding || releasing {
        HashMap::new()
    } else {
        strandings(&handles.live, (broker, vhost, queue))
    };
    launch(handles, entry, action, Method::Custody, Work::Replay { request, releasing, stranding }).await
}

/// The queues of a source's vhost where copies from it would stay for good
/// (`target::stranding`), as the last poll saw them, with why: moves, requeues and custody's
/// replays and edits refuse them unless the request accepts the risk (issue 31, must-have 5;
/// issue 29, must-have 1). The queues the messages name as they are read (`original_queue`)
/// are among them, which no check before the work could know.
pub fn strandings(live: &Live, (broker, vhost, source): (&str, &str, &str)) -> HashMap<String, String> {
    let live = live.snapshot();
    let Some(queues) = live.iter().find(|b| *b.name == *broker).map(|b| &b.queues) else {
        return HashMap::new();
    };
    let Some(view) = queues.iter().find(|q| *q.vhost == *vhost && *q.name == *source) else {
        return HashMap::new();
    };
    queues
        .iter()
        .filter(|q| *q.vhost == *vhost)
        .filter_map(|q| super::target::stranding(view, q))
        .map(|s| (s.queue, s.says))
        .collect()
}

/// A replay's report in a move's terms, for the job's page and the API: each record numbered
/// in the order it settled, as the audit log's fates are.
fn replay_report(report: custody::ReplayReport) -> MoveReport {
    let mut moved = Vec::with_capacity(report.replayed.len());
    for (i, (_, message_id, to_queue)) in report.replayed.into_iter().enumerate() {
        moved.push(mover::Moved { position: i + 1, message_id, to_queue });
    }
    let mut failed = Vec::with_capacity(report.failed.len());
    for (i, (_, message_id, reason)) in report.failed.into_iter().enumerate() {
        failed.push(mover::Failed { position: i + 1, message_id, reason });
    }
    let note = (report.not_sent > 0)
        .then(|| format!("{} selected records were not sent and are still held in custody", report.not_sent));
    MoveReport { moved, failed, cancelled: report.cancelled, note, ..Default::default() }
}

async fn run(handles: Handles, job: Arc<Job>, work: Work) {
    let broker = handles.broker_config(&job.broker).expect("checked at start").clone();
    // The checkpoints stop between two writes, never inside one: fates taken from the journal
    // and dropped with an unfinished write would be missing from the audit log.
    let moving = CancellationToken::new();
    // A move reads the queue, and hands back what it keeps: reads the broker counts like the
    // application's (`QueueView::own_reads`), marked at the start and at the end.
    let reads_queue = matches!(work, Work::Move(_));
    if reads_queue {
        handles.snapshots.mark_read(&job.broker, &job.vhost, &job.queue);
    }
    let run_work = async {
        let result = match &work {
            Work::Move(plan) => mover::move_messages(&broker, &job.vhost, &job.queue, plan, &job.progress, &job.cancel)
                .await
                .map_err(|e| e.to_string()),
            Work::Replay { request, releasing, stranding } => {
                let tag = format!("audit-{}", job.id);
                let queue = (job.vhost.as_str(), job.queue.as_str());
                let run = custody::ReplayRun {
                    job: &tag,
                    replica: handles.replica.id(),
                    releasing: *releasing,
                    stranding,
                    progress: &job.progress,
                    cancel: &job.cancel,
                };
                custody::replay(&handles.store, &broker, queue, request, &run).await.map(replay_report)
            }
        };
        moving.cancel();
        result
    };
    // A task of its own, not a future joined with the move's: a move whose reads and publishes
    // are ready at once never yields, and a joined checkpoint was not polled for seconds (issue
    // 29, case 8: after a SIGKILL the audit missed up to 15,774 moved ids, and two entries said
    // "moved 0" after 8,200 and 18,000 had moved).
    let checkpoints = tokio::spawn(checkpoint_loop(handles.clone(), job.clone(), moving.clone()));
    let result = run_work.await;
    if reads_queue {
        handles.snapshots.mark_read(&job.broker, &job.vhost, &job.queue);
    }
    if let Err(e) = checkpoints.await {
        tracing::error!(job = job.id, error = %e, "a move's checkpoint task failed");
    }
    let counts = job.progress.counts();
    match (&work, &result) {
        (Work::Move(plan), Ok(report)) => handles.jobs.record_requeued(&job.broker, &job.vhost, report, &plan.target),
        (Work::Replay { .. }, Ok(report)) => {
            let targets = report.moved.iter().map(|m| m.to_queue.as_str());
            handles.jobs.put_into(&job.broker, &job.vhost, targets);
        }
        _ => {}
    }
    // Whatever was read may have changed the queue's head: the snapshot may no longer show it.
    // It stays visible, marked outdated, and single messages are no longer selected from it. A
    // move refused before its first read leaves the snapshot, and the selection, as they were.
    if matches!(work, Work::Move(_)) && counts.read > 0 {
        let what = format!(
            "the {} of {} messages at {}",
            job.action,
            counts.moved,
            Utc::now().format("%Y-%m-%d %H:%M:%S UTC")
        );
        super::browse::outdate(&handles.store, &handles.snapshots, (&job.broker, &job.vhost, &job.queue), &what).await;
    }

    let outcome = match &result {
        Err(_) => "failed",
        Ok(r) if r.cancelled => "cancelled",
        Ok(r) if r.failed.is_empty() && r.stopped.is_none() && r.not_found.is_empty() => "done",
        Ok(_) if counts.moved == 0 => "failed",
        Ok(_) => "partial",
    };
    let detail = match &result {
        Ok(report) => describe(report),
        Err(e) => Some(e.clone()),
    };
    record_end(&handles, &job, outcome, counts, detail.as_deref()).await;
    job.state.lock().unwrap_or_else(|p| p.into_inner()).finished = Some(Finished { at: Utc::now(), outcome, result });
}

/// Makes the job's end durable (its outcome, and every message's fate not checkpointed yet)
/// before the job reports finished: a failed write is retried, and shown on the job, until it
/// goes through or warren stops (the next start then marks the entry interrupted, with what
/// its checkpoints recorded).
async fn record_end(handles: &Handles, job: &Job, outcome: &str, counts: ProgressCounts, detail: Option<&str>) {
    let fates = job.progress.take_journal();
    let mut wait = Duration::from_millis(500);
    loop {
        let written = fates::finish(
            &handles.store,
            job.id,
            outcome,
            counts.moved as usize,
            counts.failed as usize,
            detail,
            &fates,
        )
        .await;
        let e = match written {
            Ok(()) => {
                handles.storage.succeeded();
                job.state.lock().unwrap_or_else(|p| p.into_inner()).audit_problem = None;
                return;
            }
            Err(e) => e,
        };
        let why = handles.storage.failed("the audit log", &e);
        job.state.lock().unwrap_or_else(|p| p.into_inner()).audit_problem = Some(format!(
            "the move ended ({outcome}), but its audit record could not be written, so the job is not reported \
             finished yet; retrying: {why}"
        ));
        if handles.jobs.cancel.is_cancelled() && wait > Duration::from_secs(4) {
            tracing::error!(job = job.id, error = %why, "warren stops before the end of a move could be recorded");
            return;
        }
        tokio::time::sleep(wait).await;
        wait = (wait * 2).min(MAX_RECORD_WAIT);
    }
}

/// The longest wait between two tries to record a move's end.
const MAX_RECORD_WAIT: Duration = Duration::from_secs(30);

/// Writes the fates of the messages settled since the last checkpoint (and the counts that
/// follow from them) to the job's audit entry every second, so that a crash leaves them behind. A
/// failed write keeps the fates for the next.
async fn checkpoint_loop(handles: Handles, job: Arc<Job>, stop: CancellationToken) {
    let mut started = false;
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(CHECKPOINT_EVERY) => {}
        }
        let fates = job.progress.take_journal();
        // The first checkpoint marks the entry running even before anything settled.
        if started && fates.is_empty() {
            continue;
        }
        match fates::checkpoint(&handles.store, job.id, &fates).await {
            Ok(()) => started = true,
            Err(e) => {
                job.progress.put_back(fates);
                let why = handles.storage.failed("a move's checkpoint", &e);
                tracing::warn!(error = %why, job = job.id, "checkpointing a move's progress failed");
            }
        }
    }
}

/// The audit log's summary of a report: why it stopped, the first failure, what is left.
fn describe(report: &MoveReport) -> Option<String> {
    let mut parts = Vec::new();
    if report.cancelled {
        parts.push("cancelled".to_string());
    }
    if let Some(stopped) = &report.stopped {
        parts.push(format!("stopped: {stopped}"));
    }
    if let Some(first) = report.failed.first() {
        parts.push(format!("first failure (position {}): {}", first.position, first.reason));
    }
    if !report.held.is_empty() {
        parts.push(format!(
            "{} at their delivery limit kept in {} instead of given back",
            report.held.len(),
            report.held[0].queue
        ));
    }
    if !report.not_found.is_empty() {
        let ids: Vec<&str> =
            report.not_found.iter().map(|w| w.message_id.as_deref().unwrap_or("(no message id)")).collect();
        parts.push(format!("{} selected not found: {}", ids.len(), ids.join(", ")));
    }
    if let Some(left) = report.left {
        parts.push(format!("{left} messages left in the queue"));
    }
    if let Some(note) = &report.note {
        parts.push(note.clone());
    }
    (!parts.is_empty()).then(|| parts.join("; "))
}
