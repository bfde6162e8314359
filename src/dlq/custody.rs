//! Custody (issue 18): warren takes a DLQ's messages into its own database, where they are read,
//! grouped and filtered without touching the broker (no delivery budget spent, no 1,000-message
//! bound, no race with consumers), and replayed from there.
//!
//! The invariants, each where it is kept:
//! - **Intake never loses a message** (`intake`): a delivery is acked only after its row is
//!   committed with `synchronous = FULL` (survives power loss, not only a crash). A commit that
//!   fails, or the size budget, stops intake and hands the batch back to the broker unacked.
//!   A crash between the commit and the ack leaves the message in both places: a duplicate,
//!   marked `redelivered` when it comes in again (the broker says it delivered it before and
//!   custody holds a message with the same fingerprint: 4.3 marks every first delivery from a
//!   quorum DLQ redelivered, so the broker's flag alone is not enough).
//! - **A record is replayed once** (`replay`): a replay claims its records (`held` -> `claimed`,
//!   guarded by the state, so two replays cannot claim one record), publishes each with
//!   `mandatory` on a confirm channel, and marks it `replayed` only after its confirm came without
//!   a return. A record whose copy was returned or refused goes back to `held` with the reason. A
//!   record left `claimed` by a crash goes back to `held` at the next start (`recover`): at worst
//!   a duplicate.
//! - What a copy carries is what was taken in: the AMQP-encoded properties (header types kept)
//!   and the body, with one header added: `x-warren-custody-id`, by which a returned copy is
//!   matched to its record (lapin hands a return to whichever confirmation comes next).

use std::collections::{HashMap, HashSet};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::Utc;
use futures_util::StreamExt;
use lapin::options::{BasicCancelOptions, BasicConsumeOptions, BasicGetOptions, BasicQosOptions};
use lapin::types::{AMQPValue, FieldTable, LongString};
use lapin::BasicProperties;
use serde::{Deserialize, Serialize};
use sqlx::Row;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::budget::{Budget, Stopped};
use super::expression::head;
use super::message::{self, Filter, SnapshotMessage};
use super::mover::{connect, peeked_parts, Progress};
use super::publish::{Identify, Publisher, Settled};
use super::target::Targets;
use crate::broker::management::ManagementClient;
use crate::config::{BrokerConfig, CustodyRule};
use crate::history::storage::Storage;
use crate::history::Db;

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
/// Copies published, and settled, together. Two batches are in flight at most (one published
/// while the one before is settled): a crash leaves at most 1,000 copies sent and not marked,
/// which a later replay sends again (duplicates, never a loss).
const REPLAY_BATCH: usize = 500;
/// The header a replayed copy carries: its record's id.
pub const CUSTODY_ID_HEADER: &str = "x-warren-custody-id";

/// (broker, vhost, queue)
type QueueId = (String, String, String);

/// The AMQP content-header encoding of `properties`: what a replay publishes again, types kept.
pub fn encode_properties(properties: &BasicProperties) -> Result<Vec<u8>, String> {
    cookie_factory::gen(lapin::protocol::basic::gen_properties(properties), Vec::new())
        .map(|(bytes, _)| bytes)
        .map_err(|e| format!("its properties cannot be encoded again: {e:?}"))
}

pub fn decode_properties(bytes: &[u8]) -> Result<BasicProperties, String> {
    lapin::protocol::basic::parse_properties(bytes)
        .map(|(_, properties)| properties)
        .map_err(|e| format!("stored properties do not parse: {e}"))
}

/// Intake of one queue, as the pages show it.
#[derive(Debug, Clone, Serialize, PartialEq)]
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
    /// Checked before every ack: a commit into a database file that was deleted or replaced
    /// succeeds and is lost at the next start.
    storage: Arc<Storage>,
}

/// What an admin decided for one queue, over the rules (`custody_queues`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Switch {
    On,
    Released,
}

/// The admins' decisions of a broker's queues, by (vhost, queue).
pub async fn switches(db: &Db, broker: &str) -> Result<HashMap<(String, String), Switch>, sqlx::Error> {
    let rows = sqlx::query("select vhost, queue, state from custody_queues where broker = ?")
        .bind(broker)
        .fetch_all(db)
        .await?;
    Ok(rows
        .into_iter()
        .map(|r| {
            let switch = if r.get::<String, _>(2) == "on" { Switch::On } else { Switch::Released };
            ((r.get(0), r.get(1)), switch)
        })
        .collect())
}

/// Records an admin's decision for a queue.
pub async fn set_switch(
    db: &Db,
    broker: &str,
    vhost: &str,
    queue: &str,
    switch: Switch,
    by: &str,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "insert into custody_queues (broker, vhost, queue, state, changed_at, changed_by) values (?, ?, ?, ?, ?, ?)
         on conflict (broker, vhost, queue) do update set state = excluded.state, changed_at = excluded.changed_at,
         changed_by = excluded.changed_by",
    )
    .bind(broker)
    .bind(vhost)
    .bind(queue)
    .bind(if switch == Switch::On { "on" } else { "released" })
    .bind(Utc::now().timestamp())
    .bind(by)
    .execute(db)
    .await?;
    Ok(())
}

/// Whether a queue is in custody: an admin switched it on, or a rule names it and no admin
/// released it.
pub fn in_custody(rules: &[CustodyRule], switch: Option<Switch>, broker: &str, vhost: &str, queue: &str) -> bool {
    match switch {
        Some(Switch::On) => true,
        Some(Switch::Released) => false,
        None => rule_for(rules, broker, vhost, queue).is_some(),
    }
}

/// Whether one queue is in custody now (`in_custody`, with the admins' decision read fresh).
pub async fn is_in_custody(
    db: &Db,
    rules: &[CustodyRule],
    broker: &str,
    vhost: &str,
    queue: &str,
) -> Result<bool, sqlx::Error> {
    let switch = switches(db, broker).await?.remove(&(vhost.to_string(), queue.to_string()));
    Ok(in_custody(rules, switch, broker, vhost, queue))
}

/// The size budget of a queue in custody: its rule's, or the default for one an admin switched on.
/// The least role that reads a queue's payloads and headers in custody (viewer when no rule
/// names the queue: an admin took it in by hand).
pub fn payload_role(rules: &[CustodyRule], broker: &str, vhost: &str, queue: &str) -> crate::config::PayloadRole {
    rule_for(rules, broker, vhost, queue).map(|r| r.payloads).unwrap_or_default()
}

/// Whether admins may edit and replay this queue's records (`CustodyRule::edit`).
pub fn editable(rules: &[CustodyRule], broker: &str, vhost: &str, queue: &str) -> bool {
    rule_for(rules, broker, vhost, queue).is_some_and(|r| r.edit)
}

/// One record with its message: what the record page shows, and the payload it offers.
pub async fn message(
    db: &Db,
    (broker, vhost, queue): (&str, &str, &str),
    id: i64,
) -> Result<Option<(Record, SnapshotMessage, Vec<u8>)>, sqlx::Error> {
    let sql = format!(
        "select {RECORD_COLUMNS}, exchange, properties, body from custody_messages
         where broker = ? and vhost = ? and queue = ? and id = ?"
    );
    let Some(row) = sqlx::query(&sql).bind(broker).bind(vhost).bind(queue).bind(id).fetch_optional(db).await? else {
        return Ok(None);
    };
    let record = record(&row);
    let exchange: String = row.get(10);
    let properties = decode_properties(row.get::<&[u8], _>(11)).unwrap_or_default();
    let body: Vec<u8> = row.get(12);
    let shown = peeked_parts((&exchange, &record.routing_key), record.redelivered, &properties, &body, usize::MAX);
    Ok(Some((record, message::summarize(id.max(0) as usize, String::new(), shown), body)))
}

pub fn budget(rules: &[CustodyRule], broker: &str, vhost: &str, queue: &str) -> u64 {
    rule_for(rules, broker, vhost, queue).map(|r| r.max_bytes).unwrap_or(crate::config::DEFAULT_CUSTODY_BYTES)
}

impl Custody {
    pub fn new(storage: Arc<Storage>) -> Custody {
        Custody { states: Arc::default(), stops: Arc::default(), tasks: TaskTracker::new(), storage }
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

/// The rule that puts a queue in custody, if one does.
pub fn rule_for<'r>(rules: &'r [CustodyRule], broker: &str, vhost: &str, queue: &str) -> Option<&'r CustodyRule> {
    rules.iter().find(|r| r.matches(broker, vhost, queue))
}

/// Starts intake for every queue of `queues` (broker, vhost, name) in custody (`in_custody`) that
/// has none running, and again `RETRY_AFTER_SECS` after one stopped (a broker that went away, a
/// failed write, the budget): the page says why it stopped and when it is tried again.
pub fn start_intakes(
    custody: &Custody,
    db: &Db,
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
        let (custody2, db, broker, cancel) = (custody.clone(), db.clone(), broker.clone(), own);
        custody.tasks.spawn(async move {
            let outcome = intake(&custody2, &db, &broker, &id, max_bytes, &cancel).await;
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

/// Gives records taken in before their error's group was kept (migration 0023) their group,
/// so that a filter by group finds them too. Reads only the error texts; once, at start.
pub async fn fill_error_groups(db: &Db) -> Result<u64, sqlx::Error> {
    let rows: Vec<(i64, String)> =
        sqlx::query_as("select id, error from custody_messages where error_group is null and error is not null")
            .fetch_all(db)
            .await?;
    let mut tx = db.begin().await?;
    for (id, error) in &rows {
        sqlx::query("update custody_messages set error_group = ? where id = ?")
            .bind(super::framework::error_group(error))
            .bind(id)
            .execute(&mut *tx)
            .await?;
    }
    tx.commit().await?;
    Ok(rows.len() as u64)
}

/// Resets records a crash left claimed: no replay runs at start.
pub async fn recover(db: &Db) -> Result<u64, sqlx::Error> {
    let done = sqlx::query("update custody_messages set state = 'held', job = null where state = 'claimed'")
        .execute(db)
        .await?;
    Ok(done.rows_affected())
}

/// One delivery (or imported message) as a row: made by intake and by `dlq::transfer`.
#[derive(Debug)]
pub struct Taken {
    tag: u64,
    pub(super) exchange: String,
    pub(super) routing_key: String,
    pub(super) properties: Vec<u8>,
    properties_json: String,
    pub(super) body: Vec<u8>,
    pub(super) summary: SnapshotMessage,
    redelivered: bool,
    /// Which message it is (`message::identity`): intake flags a redelivered message only
    /// when custody already holds one with the same fingerprint.
    fingerprint: String,
}

impl Taken {
    /// Bytes it holds for the custody's budget: body and properties.
    pub(super) fn size(&self) -> u64 {
        (self.body.len() + self.properties.len()) as u64
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
    if let Some(why) = super::target::copy_would_differ(&delivery.properties) {
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

/// A message as a row: what triage reads of it beside what a replay publishes again.
pub(super) fn kept(
    tag: u64,
    route: (&str, &str),
    redelivered: bool,
    properties: &BasicProperties,
    body: Vec<u8>,
) -> Result<Taken, String> {
    let encoded = encode_properties(properties)?;
    let shown = peeked_parts(route, redelivered, properties, &body, usize::MAX);
    let properties_json = serde_json::Value::Object(shown.properties.clone()).to_string();
    let fingerprint = message::identity(&body, &shown.properties);
    let mut summary = message::summarize(0, String::new(), shown);
    // What the row keeps of the summary is its id, death and error; the payload's text (a
    // second copy of the body) goes now, not with the batch.
    summary.message.payload = String::new();
    Ok(Taken {
        tag,
        exchange: route.0.to_string(),
        routing_key: route.1.to_string(),
        properties: encoded,
        properties_json,
        body,
        summary,
        redelivered,
        fingerprint,
    })
}

/// Bytes a queue's records hold in custody (not yet replayed).
async fn bytes_kept(db: &Db, id: &QueueId) -> Result<u64, sqlx::Error> {
    let row = sqlx::query(
        "select coalesce(sum(size), 0) from custody_messages
         where broker = ? and vhost = ? and queue = ? and state in ('held', 'claimed')",
    )
    .bind(&id.0)
    .bind(&id.1)
    .bind(&id.2)
    .fetch_one(db)
    .await?;
    Ok(row.get::<i64, _>(0).max(0) as u64)
}

/// Commits a batch so that it survives power loss (the pool's `synchronous = FULL`).
async fn commit(db: &Db, id: &QueueId, batch: &[Taken]) -> Result<(), sqlx::Error> {
    let mut tx = db.begin().await?;
    let now = Utc::now().timestamp();
    for t in batch {
        insert(&mut tx, id, now, t).await?;
    }
    tx.commit().await
}

async fn insert(conn: &mut sqlx::SqliteConnection, id: &QueueId, now: i64, t: &Taken) -> Result<(), sqlx::Error> {
    sqlx::query(
        "insert into custody_messages (broker, vhost, queue, received_at, exchange, routing_key, properties,
         properties_json, body, size, message_id, reason, original_queue, error, redelivered, body_nul,
         fingerprint, error_group)
         values (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14,
                 ?15 and exists (select 1 from custody_messages
                                 where broker = ?1 and vhost = ?2 and queue = ?3 and fingerprint = ?17),
                 ?16, ?17, ?18)",
    )
    .bind(&id.0)
    .bind(&id.1)
    .bind(&id.2)
    .bind(now)
    .bind(&t.exchange)
    .bind(&t.routing_key)
    .bind(&t.properties)
    .bind(&t.properties_json)
    .bind(&t.body)
    .bind(t.size() as i64)
    .bind(&t.summary.message_id)
    .bind(&t.summary.reason)
    .bind(&t.summary.original_queue)
    .bind(message::error_line(&t.summary))
    .bind(t.redelivered)
    .bind(t.body.contains(&0))
    .bind(&t.fingerprint)
    .bind(message::error_group(&t.summary))
    .execute(conn)
    .await?;
    Ok(())
}

/// Consumes `id`'s queue into custody until cancelled or until a write fails or the budget is
/// reached (the error says which). Unacked deliveries go back to the broker when the channel
/// closes: a quorum queue counts that as a delivery, once.
async fn intake(
    custody: &Custody,
    db: &Db,
    broker: &BrokerConfig,
    id: &QueueId,
    max_bytes: u64,
    cancel: &CancellationToken,
) -> Result<(), String> {
    // Before the first delivery: a consumer that only hands its batch back would spend a
    // delivery of each message's budget on a quorum queue at every retry.
    custody
        .storage
        .check(db)
        .await
        .map_err(|e| format!("{e}: intake did not start, the messages stay in the broker"))?;
    let mut kept = bytes_kept(db, id).await.map_err(|e| format!("reading custody's size: {e}"))?;
    // What a run before this one left unacked went back to the queue when its channel closed.
    custody.set(id, |s| {
        s.left_count = 0;
        s.left.clear();
    });
    let mut left: Vec<u64> = Vec::new();
    let queue = super::mover::short_name("the queue", &id.2).map_err(|e| e.to_string())?;
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
        if let Err(e) = commit(db, id, &batch).await {
            custody.storage.failed("custody intake", &e);
            break Err(format!("the database refused the batch ({e}): intake stopped, the batch stays in the broker"));
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
    match super::mover::ready_sizes(broker, vhost, queue).await {
        Ok(Some((n, bytes))) if n > 0 && bytes > 0 => {
            let average = (bytes / n).max(1);
            Some((INTAKE_MEMORY as u64 / average).clamp(1, BATCH as u64) as u16)
        }
        _ => None,
    }
}

/// Counts of one queue's custody.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Counts {
    pub held: u64,
    pub claimed: u64,
    pub replayed: u64,
    pub bytes: u64,
    /// When the oldest record still held (or claimed by a replay) was taken, unix seconds.
    #[serde(flatten, serialize_with = "crate::times::oldest_taken_at")]
    pub oldest_taken_at: Option<i64>,
}

/// Every queue's custody counts of a broker, by (vhost, queue): for the poller.
pub async fn counts_by_queue(db: &Db, broker: &str) -> Result<HashMap<(String, String), Counts>, sqlx::Error> {
    let rows = sqlx::query(
        "select vhost, queue, state, count(*), coalesce(sum(size), 0), min(received_at)
         from custody_messages where broker = ? group by vhost, queue, state",
    )
    .bind(broker)
    .fetch_all(db)
    .await?;
    let mut out: HashMap<(String, String), Counts> = HashMap::new();
    for row in rows {
        let c = out.entry((row.get(0), row.get(1))).or_default();
        let (n, bytes) = (row.get::<i64, _>(3).max(0) as u64, row.get::<i64, _>(4).max(0) as u64);
        match row.get::<String, _>(2).as_str() {
            "held" => c.held = n,
            "claimed" => c.claimed = n,
            _ => c.replayed = n,
        }
        if row.get::<String, _>(2) != "replayed" {
            c.bytes += bytes;
            let taken: Option<i64> = row.get(5);
            c.oldest_taken_at = match (c.oldest_taken_at, taken) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
        }
    }
    Ok(out)
}

/// One record as the list shows it.
#[derive(Debug, Clone, Serialize)]
pub struct Record {
    pub id: i64,
    #[serde(flatten, serialize_with = "crate::times::received_at")]
    pub received_at: i64,
    pub message_id: Option<String>,
    pub reason: Option<String>,
    pub original_queue: Option<String>,
    pub error: Option<String>,
    pub routing_key: String,
    pub size: u64,
    pub redelivered: bool,
    pub state: String,
}

/// A triage group: the records sharing a reason, an original queue or an error's group
/// (`framework::error_group`: its type and its message's fingerprint).
#[derive(Debug, Clone, Serialize)]
pub struct Group {
    /// "—" for records without one (no error groups of those).
    pub value: String,
    pub records: usize,
    /// When custody took in the first and the last of them, unix seconds.
    #[serde(flatten, serialize_with = "crate::times::first_seen")]
    pub first_seen: i64,
    #[serde(flatten, serialize_with = "crate::times::last_seen")]
    pub last_seen: i64,
    /// An error group's texts as recorded, with their records, most first (`VARIANTS_SHOWN` at
    /// most; `variant_count` says how many there are).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub variants: Vec<Variant>,
    #[serde(skip_serializing_if = "is_zero")]
    pub variant_count: usize,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// One text of an error group, as the application recorded it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Variant {
    pub value: String,
    pub records: usize,
}

/// Variants listed in a group, at most: a group of 100,000 order numbers names the commonest.
pub const VARIANTS_SHOWN: usize = 20;

/// Error texts, each with its records and when the first and the last were taken in (unix
/// seconds; 0 where not known), as groups (`framework::error_group`) with their variants,
/// largest first, then by value.
pub fn error_groups(errors: impl IntoIterator<Item = (String, usize, i64, i64)>) -> Vec<Group> {
    let mut by_group: HashMap<String, (Group, HashMap<String, usize>)> = HashMap::new();
    for (error, n, first, last) in errors {
        let value = super::framework::error_group(&error);
        let (group, variants) = by_group.entry(value.clone()).or_insert_with(|| {
            let group =
                Group { value, records: 0, first_seen: first, last_seen: last, variants: Vec::new(), variant_count: 0 };
            (group, HashMap::new())
        });
        group.records += n;
        group.first_seen = group.first_seen.min(first);
        group.last_seen = group.last_seen.max(last);
        *variants.entry(error).or_default() += n;
    }
    let mut out: Vec<Group> = by_group
        .into_values()
        .map(|(mut group, variants)| {
            group.variant_count = variants.len();
            group.variants = variants.into_iter().map(|(value, records)| Variant { value, records }).collect();
            group.variants.sort_by(|a, b| b.records.cmp(&a.records).then_with(|| a.value.cmp(&b.value)));
            group.variants.truncate(VARIANTS_SHOWN);
            group
        })
        .collect();
    out.sort_by(|a, b| b.records.cmp(&a.records).then_with(|| a.value.cmp(&b.value)));
    out
}

/// What custody holds of a queue, filtered, with its groups over every held record.
#[derive(Debug, Clone, Serialize)]
pub struct Listing {
    pub counts: Counts,
    pub intake: Option<IntakeState>,
    /// Over every held record (not only the filtered ones).
    pub by_reason: Vec<Group>,
    pub by_original_queue: Vec<Group>,
    pub by_error: Vec<Group>,
    /// Held records matching the filter.
    pub matching: usize,
    /// The first `limit` of them.
    pub records: Vec<Record>,
}

/// The columns a `Record` is read from (`record`), first in every query that lists records.
const RECORD_COLUMNS: &str =
    "id, received_at, message_id, reason, original_queue, error, routing_key, length(body), redelivered, state";

fn record(row: &sqlx::sqlite::SqliteRow) -> Record {
    Record {
        id: row.get(0),
        received_at: row.get(1),
        message_id: row.get(2),
        reason: row.get(3),
        original_queue: row.get(4),
        error: row.get(5),
        routing_key: row.get(6),
        size: row.get::<i64, _>(7).max(0) as u64,
        redelivered: row.get(8),
        state: row.get(9),
    }
}

/// The SQL condition (and its values, in order) for a queue's records in `states` that `filter`
/// matches: what the browser's filter means (`Filter::matches`), its text search in the body and
/// in every property, headers included, ignoring the case of ASCII letters.
fn conditions(broker: &str, vhost: &str, queue: &str, states: &str, filter: &Filter) -> (String, Vec<String>) {
    let set = |v: &Option<String>| v.as_deref().map(str::trim).filter(|s| !s.is_empty()).map(str::to_string);
    let mut conditions = format!("broker = ? and vhost = ? and queue = ? and {states}");
    let mut values: Vec<String> = vec![broker.to_string(), vhost.to_string(), queue.to_string()];
    if let Some(reason) = set(&filter.reason) {
        conditions.push_str(" and reason = ?");
        values.push(reason);
    }
    if let Some(original) = set(&filter.original_queue) {
        conditions.push_str(" and original_queue = ?");
        values.push(original);
    }
    if let Some(error) = set(&filter.error) {
        conditions.push_str(" and instr(lower(error), ?) > 0");
        values.push(error.to_ascii_lowercase());
    }
    if let Some(group) = set(&filter.error_group) {
        conditions.push_str(" and error_group = ?");
        values.push(group);
    }
    if let Some(text) = set(&filter.text) {
        // LIKE folds ASCII case as lower() does, without copying each body; it stops at a NUL
        // byte, so a body that may hold one is also searched whole (`body_nul`).
        conditions.push_str(
            " and (cast(body as text) like ? escape '\\' or properties_json like ? escape '\\' \
             or (body_nul is not 0 and instr(lower(cast(body as text)), ?) > 0))",
        );
        let pattern = like_pattern(&text);
        values.extend([pattern.clone(), pattern, text.to_ascii_lowercase()]);
    }
    // A header's value as `message::json_text` gives it (json_each gives true as 1).
    const HEADER_TEXT: &str =
        "case h.type when 'true' then 'true' when 'false' then 'false' when 'null' then 'null' else h.value end";
    if let Some(literals) = filter.regex_literals() {
        // Every match starts with one of these: rows without any are passed over in SQL, before
        // their bodies are copied out to run the expression (LIKE folds case: more rows, never
        // fewer; it stops at a NUL, so such bodies are always read).
        let looks: Vec<&str> = literals
            .iter()
            .map(|_| "cast(body as text) like ? escape '\\' or properties_json like ? escape '\\'")
            .collect();
        conditions.push_str(&format!(" and ({} or body_nul is not 0)", looks.join(" or ")));
        for literal in &literals {
            let pattern = like_pattern(literal);
            values.extend([pattern.clone(), pattern]);
        }
    }
    if let Some(name) = filter.header_name() {
        // A cheap first look at the JSON text passes over most records without parsing them,
        // where it cannot miss: a part that no number's text holds (json_each gives numbers in
        // SQLite's own format) and that JSON writes as it is.
        if let Some(part) = filter.header_part().filter(|p| verbatim_in_json(p) && !p.chars().all(in_number)) {
            conditions.push_str(" and properties_json like ? escape '\\'");
            values.push(like_pattern(part));
        }
        conditions.push_str(" and exists (select 1 from json_each(properties_json, '$.headers') h where h.key = ?");
        values.push(name.to_string());
        if let Some(part) = filter.header_part() {
            conditions.push_str(&format!(" and instr(lower({HEADER_TEXT}), ?) > 0"));
            values.push(part.to_ascii_lowercase());
        }
        conditions.push(')');
    }
    if filter.json_path.as_deref().is_some_and(|p| !p.trim().is_empty()) {
        // A payload that is not JSON has no path (json_type would fail the whole query on it;
        // `case` is evaluated in order, `and` need not be).
        const BODY: &str = "cast(body as text)";
        match filter.json_steps() {
            Some(steps) => {
                let path = message::sqlite_json_path(&steps);
                match filter.json_expected() {
                    Some(expected) => {
                        // The expected value, when it is a string or a scalar that JSON writes
                        // as it is, is in the body's text, unless a \u escape spells it (or a
                        // NUL ends LIKE's reading): a cheap first look passes over the rest
                        // without parsing them (a third of the time at 100,000 records).
                        if verbatim_in_json(expected) && !expected.starts_with(['{', '[']) {
                            conditions.push_str(&format!(
                                " and ({BODY} like ? escape '\\' or {BODY} like '%\\u%' or body_nul is not 0)"
                            ));
                            values.push(like_pattern(expected));
                        }
                        conditions.push_str(&format!(
                            " and (case when json_valid({BODY}) then (case json_type({BODY}, ?) \
                             when 'true' then 'true' when 'false' then 'false' when 'null' then 'null' \
                             when 'text' then json_extract({BODY}, ?) else json(json_extract({BODY}, ?)) end) end) = ?"
                        ));
                        values.extend([path.clone(), path.clone(), path, expected.to_string()]);
                    }
                    None => {
                        conditions.push_str(&format!(
                            " and (case when json_valid({BODY}) then json_type({BODY}, ?) end) is not null"
                        ));
                        values.push(path);
                    }
                }
            }
            None => conditions.push_str(" and 0"),
        }
    }
    (conditions, values)
}

/// Whether JSON writes `text` as it is (nothing in it is escaped), so that a value that shows
/// as `text` holds it verbatim in the JSON text.
fn verbatim_in_json(text: &str) -> bool {
    !text.chars().any(|c| c == '"' || c == '\\' || c.is_control())
}

/// Whether `c` can be part of a number as SQLite writes one.
fn in_number(c: char) -> bool {
    matches!(c, '0'..='9' | '.' | 'e' | 'E' | '+' | '-')
}

/// A LIKE pattern that matches `text` anywhere, its own `%`, `_` and `\\` taken literally.
fn like_pattern(text: &str) -> String {
    let mut pattern = String::with_capacity(text.len() + 2);
    pattern.push('%');
    for c in text.chars() {
        if matches!(c, '%' | '_' | '\\') {
            pattern.push('\\');
        }
        pattern.push(c);
    }
    pattern.push('%');
    pattern
}

/// The records of a queue in `states` that `filter` matches, oldest first, at most `limit`; a
/// regular expression matches within `budget`.
async fn records(
    db: &Db,
    (broker, vhost, queue): (&str, &str, &str),
    states: &str,
    filter: &Filter,
    limit: i64,
    budget: &Budget,
) -> Result<Vec<Record>, SearchError> {
    let (conditions, values) = conditions(broker, vhost, queue, states, filter);
    let Some(regex) = filter.regex() else {
        let sql = format!("select {RECORD_COLUMNS} from custody_messages where {conditions} order by id limit ?");
        let mut query = sqlx::query(&sql);
        for v in &values {
            query = query.bind(v);
        }
        return Ok(query.bind(limit).fetch_all(db).await?.iter().map(record).collect());
    };
    let Some(regex) = regex else { return Ok(Vec::new()) };
    // SQLite has no regular expressions of its own (and sqlx's fails the query on a body that
    // is not UTF-8): the rows the rest of the filter leaves are read in order, a range of ids
    // per core, and matched in batches on the budget's threads (`dlq::budget`).
    let sql = format!(
        "select {RECORD_COLUMNS}, body, properties_json from custody_messages
         where {conditions} and id between ? and ? order by id"
    );
    let scans = id_ranges(db, (broker, vhost, queue)).await?.into_iter().map(|(low, high)| {
        let (sql, values) = (&sql, &values);
        async move {
            let mut query = sqlx::query(sql);
            for v in values {
                query = query.bind(v);
            }
            let mut rows = query.bind(low).bind(high).fetch(db);
            let mut out = Vec::new();
            let (mut batch, mut batch_bytes) = (Vec::new(), 0);
            loop {
                let row = rows.next().await.transpose()?;
                if let Some(row) = &row {
                    // Only what the expression reads is copied out of the row.
                    let (body, properties): (&[u8], &str) = (row.get(10), row.get(11));
                    let (body, properties) = (head(body).to_vec(), head(properties.as_bytes()).to_vec());
                    batch_bytes += body.len() + properties.len();
                    batch.push((record(row), body, properties));
                }
                if row.is_some() && batch_bytes < MATCH_BATCH_BYTES {
                    continue;
                }
                let (regex, candidates) = (regex.clone(), std::mem::take(&mut batch));
                batch_bytes = 0;
                let matched = budget
                    .run(move |check| {
                        let (mut matched, mut searcher) = (Vec::new(), regex.searcher());
                        for (record, body, properties) in candidates {
                            check.go_on()?;
                            if searcher.in_record(&body, &properties, Some(check))? {
                                matched.push(record);
                            }
                        }
                        Ok(matched)
                    })
                    .await?;
                out.extend(matched);
                if row.is_none() || out.len() as i64 >= limit {
                    break;
                }
            }
            out.truncate(usize::try_from(limit.max(0)).unwrap_or(usize::MAX));
            Ok::<_, SearchError>(out)
        }
    });
    let mut out: Vec<Record> = futures_util::future::try_join_all(scans).await?.into_iter().flatten().collect();
    out.truncate(usize::try_from(limit.max(0)).unwrap_or(usize::MAX));
    Ok(out)
}

/// How many bytes of records are matched on a thread at once: few enough hops between the
/// runtime and the thread (25 over 100 MB), little enough held per scan.
const MATCH_BATCH_BYTES: usize = 4 << 20;

/// Why a search of custody gave no answer.
#[derive(Debug, thiserror::Error)]
pub enum SearchError {
    /// Its regular expression ran past its budget, or the request went away.
    #[error(transparent)]
    Stopped(#[from] Stopped),
    #[error(transparent)]
    Database(#[from] sqlx::Error),
}

/// Id ranges that split a queue's records into one scan per core (at most 4), in order: one
/// SQLite query runs on one core, and a filter that reads every body reads 100 MB at 100,000
/// records (225 ms in one scan on the benchmark's machine).
async fn id_ranges(db: &Db, (broker, vhost, queue): (&str, &str, &str)) -> Result<Vec<(i64, i64)>, sqlx::Error> {
    let parts = std::thread::available_parallelism().map_or(1, |n| n.get()).clamp(1, 4) as i64;
    let (low, high): (Option<i64>, Option<i64>) =
        sqlx::query_as("select min(id), max(id) from custody_messages where broker = ? and vhost = ? and queue = ?")
            .bind(broker)
            .bind(vhost)
            .bind(queue)
            .fetch_one(db)
            .await?;
    let (Some(low), Some(high)) = (low, high) else { return Ok(vec![(i64::MIN, i64::MAX)]) };
    let step = ((high - low) / parts).max(1);
    let mut ranges = Vec::new();
    let mut start = i64::MIN;
    for i in 1..parts {
        let end = low + step * i;
        if end >= high {
            break;
        }
        ranges.push((start, end));
        start = end + 1;
    }
    ranges.push((start, i64::MAX));
    Ok(ranges)
}

/// The ids of a queue's records in `states` that `filter` (without a regular expression)
/// matches, in order; a filter that reads bodies or headers scans a range of ids per core.
async fn matching_ids(
    db: &Db,
    queue: (&str, &str, &str),
    states: &str,
    filter: &Filter,
) -> Result<Vec<i64>, sqlx::Error> {
    let (conditions, values) = conditions(queue.0, queue.1, queue.2, states, filter);
    let sql = format!("select id from custody_messages where {conditions} and id between ? and ? order by id");
    let ranges = if filter.reads_content() { id_ranges(db, queue).await? } else { vec![(i64::MIN, i64::MAX)] };
    let scans = ranges.into_iter().map(|(low, high)| {
        let mut query = sqlx::query_scalar::<_, i64>(&sql);
        for v in &values {
            query = query.bind(v);
        }
        query.bind(low).bind(high).fetch_all(db)
    });
    Ok(futures_util::future::try_join_all(scans).await?.into_iter().flatten().collect())
}

/// `?, ?, ...`: `n` placeholders for an `in (...)` list (the callers keep lists to 500).
fn placeholders(n: usize) -> String {
    vec!["?"; n].join(", ")
}

/// The records with these ids (sorted), oldest first.
async fn records_by_id(db: &Db, ids: &[i64]) -> Result<Vec<Record>, sqlx::Error> {
    let mut out = Vec::with_capacity(ids.len());
    for chunk in ids.chunks(500) {
        let marks = placeholders(chunk.len());
        let sql = format!("select {RECORD_COLUMNS} from custody_messages where id in ({marks}) order by id");
        let mut query = sqlx::query(&sql);
        for id in chunk {
            query = query.bind(id);
        }
        out.extend(query.fetch_all(db).await?.iter().map(record));
    }
    Ok(out)
}

/// Every record of a queue held in custody (not being replayed) that `filter` matches, oldest
/// first.
pub(super) async fn matching(
    db: &Db,
    queue: (&str, &str, &str),
    filter: &Filter,
    budget: &Budget,
) -> Result<Vec<Record>, SearchError> {
    records(db, queue, "state in ('held', 'claimed')", filter, i64::MAX, budget).await
}

/// Why an import kept nothing.
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    #[error("custody of this queue holds {kept} bytes; {adding} more would pass its size budget of {budget} bytes")]
    Budget { kept: u64, adding: u64, budget: u64 },
    /// The lines read differently the second time (a bug: they were checked first).
    #[error("the import's lines read differently when kept: {0}")]
    Changed(String),
    #[error(transparent)]
    Storage(#[from] sqlx::Error),
}

/// Puts imported messages (`dlq::transfer`) into the custody of a queue, all or none, within
/// its size budget; returns how many. `adding` is what they add (count, bytes), known before
/// the first batch is made: only one batch is in memory at a time, and all go in one
/// transaction, committed as intake commits.
pub async fn import<B>(
    db: &Db,
    rules: &[CustodyRule],
    (broker, vhost, queue): (&str, &str, &str),
    (count, adding): (usize, u64),
    batches: B,
) -> Result<usize, ImportError>
where
    B: Iterator<Item = Result<Vec<Taken>, String>>,
{
    let id = (broker.to_string(), vhost.to_string(), queue.to_string());
    let budget = budget(rules, broker, vhost, queue);
    let kept = bytes_kept(db, &id).await?;
    if kept + adding > budget {
        return Err(ImportError::Budget { kept, adding, budget });
    }
    let mut tx = db.begin().await?;
    let now = Utc::now().timestamp();
    let mut imported = 0;
    for batch in batches {
        let batch = batch.map_err(ImportError::Changed)?;
        for t in &batch {
            insert(&mut tx, &id, now, t).await?;
        }
        imported += batch.len();
    }
    if imported != count {
        return Err(ImportError::Changed(format!("{imported} lines read again, {count} checked")));
    }
    tx.commit().await?;
    Ok(imported)
}

/// What custody holds of a queue: counts, groups over every held record, and the records the
/// filter matches. In SQL, so that it answers in milliseconds over 100,000 records (reading and
/// decoding every record per request took seconds). The filter means what the browser's does
/// (`Filter::matches`); its text search looks in the body and in every property, headers
/// included, ignoring the case of ASCII letters.
pub async fn list(
    db: &Db,
    custody: &Custody,
    (broker, vhost, queue): (&str, &str, &str),
    filter: &Filter,
    after: Option<i64>,
    limit: usize,
    budget: &Budget,
) -> Result<Listing, SearchError> {
    // One scan of the covering index (in its order: no sort) gives the counts, the sizes and
    // every group; a query per group plus the broker-wide counts read it five times (269 ms at
    // 100,000 records).
    let rows = sqlx::query(
        "select state, reason, original_queue, error, count(*), coalesce(sum(size), 0), min(received_at),
         max(received_at) from custody_messages where broker = ? and vhost = ? and queue = ?
         group by state, reason, original_queue, error",
    )
    .bind(broker)
    .bind(vhost)
    .bind(queue)
    .fetch_all(db)
    .await?;
    let mut counts = Counts::default();
    let mut groups: [HashMap<Option<String>, Group>; 3] = Default::default();
    for row in &rows {
        let n = row.get::<i64, _>(4).max(0) as u64;
        match row.get::<&str, _>(0) {
            "held" => counts.held += n,
            "claimed" => counts.claimed += n,
            _ => {
                counts.replayed += n;
                continue;
            }
        }
        counts.bytes += row.get::<i64, _>(5).max(0) as u64;
        let (first, last): (i64, i64) = (row.get(6), row.get(7));
        for (i, by) in groups.iter_mut().enumerate() {
            let value: Option<String> = row.get(i + 1);
            let group = by.entry(value.clone()).or_insert_with(|| Group {
                value: value.unwrap_or_else(|| "—".to_string()),
                records: 0,
                first_seen: first,
                last_seen: last,
                variants: Vec::new(),
                variant_count: 0,
            });
            group.records += n as usize;
            group.first_seen = group.first_seen.min(first);
            group.last_seen = group.last_seen.max(last);
        }
    }
    // Largest first, then by value; records without an error form no error group.
    let ordered = |by: HashMap<Option<String>, Group>, with_none: bool| -> Vec<Group> {
        let mut out: Vec<Group> = by.into_iter().filter(|(k, _)| with_none || k.is_some()).map(|(_, g)| g).collect();
        out.sort_by(|a, b| b.records.cmp(&a.records).then_with(|| a.value.cmp(&b.value)));
        out
    };
    let [reasons, queues, errors] = groups;
    let (by_reason, by_original_queue) = (ordered(reasons, true), ordered(queues, true));
    // Errors by their group, from the error texts the scan gave (old records too, whatever
    // their stored group), each with its variants.
    let by_error =
        error_groups(errors.into_iter().filter_map(|(k, g)| Some((k?, g.records, g.first_seen, g.last_seen))));

    // The page starts after the id `after` (the API's cursor); `matching` counts every match.
    let after = after.unwrap_or(0);
    let records = if filter.is_empty() {
        let kept = (counts.held + counts.claimed) as usize;
        let states = format!("state in ('held', 'claimed') and id > {after}");
        (kept, records(db, (broker, vhost, queue), &states, filter, limit as i64, budget).await?)
    } else if filter.regex().is_some() {
        // Matched outside SQL: every match read once, counted, and the first `limit` kept.
        let mut all =
            records(db, (broker, vhost, queue), "state in ('held', 'claimed')", filter, i64::MAX, budget).await?;
        let matching = all.len();
        all.retain(|r| r.id > after);
        all.truncate(limit);
        (matching, all)
    } else {
        // One scan for the count and the page: a count and then the first `limit` read every
        // body twice when matches are rare (a text search reads 100 MB at 100,000 records).
        let ids = matching_ids(db, (broker, vhost, queue), "state in ('held', 'claimed')", filter).await?;
        let page: Vec<i64> = ids.iter().copied().filter(|id| *id > after).take(limit).collect();
        (ids.len(), records_by_id(db, &page).await?)
    };
    let (matching, records) = records;
    Ok(Listing {
        counts,
        intake: custody.state(broker, vhost, queue),
        by_reason,
        by_original_queue,
        by_error,
        matching,
        records,
    })
}

/// Which records a replay takes.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "snake_case")]
pub enum CustodySelection {
    All,
    Matching(Box<Filter>),
    Records(Vec<i64>),
}

/// Where a replay sends each record.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, Default)]
#[serde(rename_all = "snake_case")]
pub enum CustodyTarget {
    /// The queue it last died in (or its framework names), through the default exchange.
    #[default]
    OriginalQueue,
    Queue(String),
}

#[derive(Debug, Clone, Deserialize, Serialize)]
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

/// An admin's change to one record, replayed as a new copy (issue 18, must-have 5; off unless
/// the queue's `[[custody]]` rule says `edit = true`).
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
pub struct Edit {
    /// The new body, as text; none: unchanged.
    #[serde(default)]
    pub body: Option<String>,
    /// Every header, as the browser shows them (a header left as it was keeps its AMQP type);
    /// none: unchanged.
    #[serde(default)]
    pub headers: Option<serde_json::Map<String, serde_json::Value>>,
    #[serde(default)]
    pub target: CustodyTarget,
    /// As [`ReplayRequest::accept_drop_head`].
    #[serde(default)]
    pub accept_drop_head: bool,
    /// As [`ReplayRequest::accept_stranding`].
    #[serde(default)]
    pub accept_stranding: bool,
}

/// What an edit changed: each header added, changed or removed (name, before, after), and the
/// body before and after when it changed (as text, lossy for bytes that are not UTF-8).
#[derive(Debug, Clone, Default, Serialize)]
pub struct EditDiff {
    pub headers: Vec<(String, Option<serde_json::Value>, Option<serde_json::Value>)>,
    pub body: Option<(String, String)>,
}

/// Publishes an edited copy of held record `id` to its target (checked first), with confirms
/// and `mandatory`. The record is claimed first, so no replay takes it meanwhile; once the copy
/// is confirmed it is marked replayed (`replayed_to` says it was an edited copy) and kept like
/// any replayed record. Returns where the copy went and what changed.
pub async fn edit_and_replay(
    db: &Db,
    broker: &BrokerConfig,
    (vhost, queue): (&str, &str),
    id: i64,
    edit: &Edit,
    (job, stranding): (&str, HashMap<String, String>),
) -> Result<(String, EditDiff), String> {
    let row = sqlx::query(
        "select properties, body, original_queue, state from custody_messages
         where broker = ? and vhost = ? and queue = ? and id = ?",
    )
    .bind(&broker.name)
    .bind(vhost)
    .bind(queue)
    .bind(id)
    .fetch_optional(db)
    .await
    .map_err(|e| e.to_string())?
    .ok_or_else(|| format!("no record {id} in the custody of {queue:?}"))?;
    let state: String = row.get(3);
    if state != "held" {
        return Err(format!("record {id} is {state}: only a held record is edited and replayed"));
    }
    let old = decode_properties(row.get::<&[u8], _>(0))?;
    let old_body: Vec<u8> = row.get(1);
    let to = match &edit.target {
        CustodyTarget::Queue(name) => name.clone(),
        CustodyTarget::OriginalQueue => row
            .get::<Option<String>, _>(2)
            .ok_or("no x-death or framework header names the queue it died in: name a target queue")?,
    };
    if to == queue {
        return Err("its target is this queue, which is in custody".to_string());
    }
    let old_shown = peeked_parts(("", ""), false, &old, &[], 0).properties;
    let empty = serde_json::Map::new();
    let old_headers_shown = old_shown.get("headers").and_then(|h| h.as_object()).unwrap_or(&empty);
    let mut diff = EditDiff::default();
    let mut properties = old.clone();
    if let Some(new) = &edit.headers {
        let table =
            super::readable::headers_edited(&old.headers().clone().unwrap_or_default(), old_headers_shown, new)?;
        let mut names: Vec<&String> = old_headers_shown.keys().chain(new.keys()).collect();
        names.sort();
        names.dedup();
        for name in names {
            let (before, after) = (old_headers_shown.get(name), new.get(name));
            if before != after {
                diff.headers.push((name.clone(), before.cloned(), after.cloned()));
            }
        }
        properties = properties.with_headers(table);
    }
    let body = match &edit.body {
        Some(text) if text.as_bytes() != old_body.as_slice() => {
            diff.body = Some((String::from_utf8_lossy(&old_body).into_owned(), text.clone()));
            text.clone().into_bytes()
        }
        _ => old_body,
    };
    encode_properties(&properties)?;

    // The same checks as every other path that puts messages back (`target`): a full target that
    // drops its oldest would confirm the copy and drop another message (issue 29, case 1).
    let mut targets = Targets::new(ManagementClient::new(broker), vhost, edit.accept_drop_head).refusing(stranding);
    targets.check(&to).await?;
    let connection = connect(broker, vhost).await.map_err(|e| e.to_string())?;
    if claim(db, job, &[id]).await.map_err(|e| e.to_string())?.is_empty() {
        let _ = connection.close(200, "claimed elsewhere".into()).await;
        return Err(format!("record {id} was claimed by another replay meanwhile"));
    }
    let published = async {
        let mut publisher =
            Publisher::open(&connection, Identify::Header(CUSTODY_ID_HEADER)).await.map_err(|e| e.to_string())?;
        let route = ("", to.as_str(), to.clone());
        let settled = publisher.send_one((), route, Arc::new(body), with_custody_id(properties, id)).await;
        publisher.close("edited copy replayed").await;
        settled?.outcome
    }
    .await;
    let _ = connection.close(200, "edited copy replayed".into()).await;
    match published {
        Ok(()) => {
            settle(db, &[(id, format!("{to} (an edited copy)"))], &[]).await.map_err(|e| e.to_string())?;
            Ok((to, diff))
        }
        Err(why) => {
            settle(db, &[], &[id]).await.map_err(|e| e.to_string())?;
            Err(why)
        }
    }
}

/// Records of replays older than this many seconds are deleted (the global retention).
pub async fn prune_replayed(db: &Db, before: i64) -> Result<u64, sqlx::Error> {
    let done = sqlx::query("delete from custody_messages where state = 'replayed' and replayed_at < ?")
        .bind(before)
        .execute(db)
        .await?;
    Ok(done.rows_affected())
}

/// Why a record was not deleted.
#[derive(Debug, thiserror::Error)]
pub enum DeleteError {
    #[error("no record {0} in this queue's custody")]
    NotFound(i64),
    /// Claimed by a running replay (which may be publishing it now), or replayed already.
    #[error("record {id} is {state}, not held: only a held record can be deleted")]
    NotHeld { id: i64, state: String },
    #[error(transparent)]
    Storage(#[from] sqlx::Error),
}

/// Deletes one held record (an admin's way out for a record that can never be replayed);
/// returns its message id. The state guard is the one `claim` uses, so a record a replay has
/// claimed is never deleted under it.
pub async fn delete(
    db: &Db,
    (broker, vhost, queue): (&str, &str, &str),
    id: i64,
) -> Result<Option<String>, DeleteError> {
    let deleted = sqlx::query_scalar::<_, Option<String>>(
        "delete from custody_messages where broker = ? and vhost = ? and queue = ? and id = ? and state = 'held'
         returning message_id",
    )
    .bind(broker)
    .bind(vhost)
    .bind(queue)
    .bind(id)
    .fetch_optional(db)
    .await?;
    if let Some(message_id) = deleted {
        return Ok(message_id);
    }
    let state = sqlx::query_scalar::<_, String>(
        "select state from custody_messages where broker = ? and vhost = ? and queue = ? and id = ?",
    )
    .bind(broker)
    .bind(vhost)
    .bind(queue)
    .bind(id)
    .fetch_optional(db)
    .await?;
    Err(match state {
        Some(state) => DeleteError::NotHeld { id, state },
        None => DeleteError::NotFound(id),
    })
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

/// Claims the selected held records for `job`; returns the ids it got. The state guard makes a
/// record claimable once: a second replay of the same records claims none of them.
async fn claim(db: &Db, job: &str, ids: &[i64]) -> Result<Vec<i64>, sqlx::Error> {
    // A statement per chunk, not per record: 100,000 single-row statements took seconds.
    let mut got = Vec::new();
    for chunk in ids.chunks(500) {
        let marks = placeholders(chunk.len());
        let sql = format!(
            "update custody_messages set state = 'claimed', job = ? where state = 'held' and id in ({marks})
             returning id"
        );
        let mut query = sqlx::query_scalar::<_, i64>(&sql).bind(job);
        for id in chunk {
            query = query.bind(id);
        }
        got.extend(query.fetch_all(db).await?);
    }
    got.sort_unstable();
    Ok(got)
}

async fn settle(db: &Db, replayed: &[(i64, String)], failed: &[i64]) -> Result<(), sqlx::Error> {
    let mut tx = db.begin().await?;
    let now = Utc::now().timestamp();
    // One statement per target (most replays have one or a few), not one per record.
    let mut by_target: HashMap<&str, Vec<i64>> = HashMap::new();
    for (record, to) in replayed {
        by_target.entry(to.as_str()).or_default().push(*record);
    }
    for (to, records) in by_target {
        for chunk in records.chunks(500) {
            let marks = placeholders(chunk.len());
            let sql = format!(
                "update custody_messages set state = 'replayed', replayed_at = ?, replayed_to = ? where id in ({marks})"
            );
            let mut query = sqlx::query(&sql).bind(now).bind(to);
            for id in chunk {
                query = query.bind(id);
            }
            query.execute(&mut *tx).await?;
        }
    }
    for chunk in failed.chunks(500) {
        let marks = placeholders(chunk.len());
        let sql = format!("update custody_messages set state = 'held', job = null where id in ({marks})");
        let mut query = sqlx::query(&sql);
        for id in chunk {
            query = query.bind(id);
        }
        query.execute(&mut *tx).await?;
    }
    tx.commit().await
}

/// Hands back to `held` what `job` still has claimed: records it had not sent when it stopped
/// (cancelled, or failed part way). A copy sent and not confirmed may then be replayed again: a
/// duplicate, never a loss.
async fn unclaim(db: &Db, job: &str) -> Result<u64, sqlx::Error> {
    let done =
        sqlx::query("update custody_messages set state = 'held', job = null where job = ? and state = 'claimed'")
            .bind(job)
            .execute(db)
            .await?;
    Ok(done.rows_affected())
}

/// Replays the selected records of `queue`'s custody. Each target queue is checked before the
/// first publish; a record goes `replayed` only after its copy was confirmed and not returned.
/// `progress` counts and journals each record's fate as it settles (for the job's page and the
/// audit log's checkpoints); `cancel` stops it between two batches. Whatever way it ends, the
/// records it claimed and did not settle go back to `held`.
pub async fn replay(
    db: &Db,
    broker: &BrokerConfig,
    (vhost, queue): (&str, &str),
    request: &ReplayRequest,
    run: &ReplayRun<'_>,
) -> Result<ReplayReport, String> {
    let result = replay_claimed(db, broker, (vhost, queue), request, run).await;
    let handed_back = unclaim(db, run.job).await;
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
    /// It hands the whole custody back to the queue (intake stopped first).
    pub releasing: bool,
    /// Queues refused because copies would stay there for good (`target::stranding`), with why.
    pub stranding: &'a HashMap<String, String>,
    pub progress: &'a Progress,
    pub cancel: &'a CancellationToken,
}

async fn replay_claimed(
    db: &Db,
    broker: &BrokerConfig,
    (vhost, queue): (&str, &str),
    request: &ReplayRequest,
    &ReplayRun { job, releasing, stranding, progress, cancel }: &ReplayRun<'_>,
) -> Result<ReplayReport, String> {
    let id = (broker.name.clone(), vhost.to_string(), queue.to_string());
    let all_filter = Filter::default();
    let filter = match &request.selection {
        CustodySelection::Matching(filter) => filter,
        _ => &all_filter,
    };
    let found = records(db, (&id.0, &id.1, &id.2), "state = 'held'", filter, i64::MAX, &Budget::job(cancel))
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
    let claimed: HashSet<i64> = claim(db, job, &wanted).await.map_err(|e| e.to_string())?.into_iter().collect();
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
        let unsent = send_batch(db, &mut publisher, batch).await?;
        let settled = publisher.end_batch().await.map_err(channel_failed)?;
        record_settled(db, settled, unsent, &mut report, progress).await?;
    }
    let settled = publisher.settle_all().await.map_err(channel_failed)?;
    record_settled(db, settled, Vec::new(), &mut report, progress).await?;
    publisher.close("replayed").await;
    let _ = connection.close(200, "replayed".into()).await;
    Ok(report)
}

/// A record's id and message id, as its copy goes through the publisher.
type Replaying = (i64, Option<String>);

/// Publishes a batch; returns (record, message id, why) of those that could not be published
/// at all (their row went missing, its properties cannot be read, or lapin would not send it).
async fn send_batch(
    db: &Db,
    publisher: &mut Publisher<Replaying>,
    batch: &[(&Record, String)],
) -> Result<Vec<(i64, Option<String>, String)>, String> {
    let ids: Vec<i64> = batch.iter().map(|(h, _)| h.id).collect();
    let mut bodies = bodies(db, &ids).await.map_err(|e| e.to_string())?;
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
    db: &Db,
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
    settle(db, &marks, &back).await.map_err(|e| e.to_string())?;
    progress.settled(&failed, &replayed);
    report.failed.extend(failed);
    report.replayed.extend(replayed);
    Ok(())
}

async fn bodies(db: &Db, ids: &[i64]) -> Result<HashMap<i64, (Vec<u8>, Vec<u8>)>, sqlx::Error> {
    let mut out = HashMap::with_capacity(ids.len());
    for chunk in ids.chunks(500) {
        let marks = placeholders(chunk.len());
        let sql = format!("select id, properties, body from custody_messages where id in ({marks})");
        let mut query = sqlx::query(&sql);
        for id in chunk {
            query = query.bind(id);
        }
        for row in query.fetch_all(db).await? {
            out.insert(row.get(0), (row.get(1), row.get(2)));
        }
    }
    Ok(out)
}

/// The copy's properties: the original's, without the broker's bookkeeping of the DLQ (a
/// quorum DLQ's `x-delivery-count`), with the record's id.
pub(super) fn with_custody_id(properties: BasicProperties, id: i64) -> BasicProperties {
    let mut headers = properties.headers().clone().unwrap_or_default();
    let mut kept = FieldTable::default();
    for (key, value) in headers.inner() {
        if !message::BROKER_BOOKKEEPING_HEADERS.contains(&key.as_str()) {
            kept.insert(key.clone(), value.clone());
        }
    }
    headers = kept;
    headers.insert(CUSTODY_ID_HEADER.into(), AMQPValue::LongString(LongString::from(id.to_string())));
    properties.with_headers(headers)
}

#[cfg(test)]
fn custody_id(properties: &BasicProperties) -> Option<i64> {
    match properties.headers().as_ref()?.inner().get(CUSTODY_ID_HEADER)? {
        AMQPValue::LongString(s) => s.to_string().parse().ok(),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn properties_round_trip_with_their_types() {
        let mut headers = FieldTable::default();
        headers.insert("x-count".into(), AMQPValue::LongLongInt(3));
        headers.insert("x-time".into(), AMQPValue::Timestamp(1_700_000_000));
        headers.insert("x-flag".into(), AMQPValue::Boolean(true));
        headers.insert("x-bytes".into(), AMQPValue::ByteArray(vec![0, 159, 146, 150].into()));
        let properties = BasicProperties::default()
            .with_message_id("m-1".into())
            .with_content_type("application/json".into())
            .with_delivery_mode(2)
            .with_timestamp(1_700_000_001)
            .with_headers(headers);
        let back = decode_properties(&encode_properties(&properties).unwrap()).unwrap();
        assert_eq!(back, properties);
        assert!(decode_properties(b"\xff").is_err(), "garbage is an error, not a panic");
    }

    #[test]
    fn errors_group_by_cause_with_their_variants() {
        let errors =
            (0..78).map(|n| (format!("java.lang.NullPointerException: customer of order {n} is null"), 1, n, n));
        let other = std::iter::once(("com.shop.SkuUnknown: sku 'A-1' unknown".to_string(), 5, 100, 200));
        let groups = error_groups(errors.chain(other));
        assert_eq!(groups.len(), 2);
        let npe = &groups[0];
        assert_eq!(npe.value, "java.lang.NullPointerException: customer of order <n> is null");
        assert_eq!((npe.records, npe.variant_count, npe.variants.len()), (78, 78, VARIANTS_SHOWN));
        assert_eq!((npe.first_seen, npe.last_seen), (0, 77));
        assert_eq!(groups[1].value, "com.shop.SkuUnknown: sku <q> unknown");
        assert_eq!(
            groups[1].variants,
            vec![Variant { value: "com.shop.SkuUnknown: sku 'A-1' unknown".into(), records: 5 }]
        );
    }

    #[test]
    fn a_copy_carries_its_record_id() {
        let p = with_custody_id(BasicProperties::default(), 42);
        assert_eq!(custody_id(&p), Some(42));
        assert_eq!(custody_id(&BasicProperties::default()), None);
    }
}
