//! Browsing a dead-letter queue: a bounded snapshot of its head, taken on request and kept, so
//! that page views never re-read the queue (every read of a quorum queue counts toward its
//! delivery limit, DOMAIN.md §5).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::message::{summarize, IdentityKey, SnapshotMessage, REPUBLISHED};
use super::mover::{self, MoveError};
use crate::broker::management::PeekedMessage;
use crate::broker::topology::Seen;
use crate::metrics::QueueView;
use crate::storage::snapshots::StoredSnapshot;
use crate::storage::Store;

/// Messages in a snapshot unless asked otherwise, and at most.
pub const DEFAULT_COUNT: usize = 100;
pub const MAX_COUNT: usize = 1000;
/// Payload bytes kept per message; the full size is still shown.
pub const PAYLOAD_LIMIT: usize = 64 * 1024;

/// A bounded read of a queue's head.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct Snapshot {
    pub taken_at: DateTime<Utc>,
    pub queue_type: String,
    /// The delivery limit the reads counted toward (`policies::hand_back_limit_now`): none on
    /// a classic queue, and none from 4.3 on, where a read given back is not counted.
    pub delivery_limit: Option<i64>,
    pub requested: usize,
    /// Why the read stopped before `requested`, or why the queue's order may differ from it.
    pub note: Option<String>,
    pub messages: Vec<SnapshotMessage>,
    /// Set once a move or purge of the queue ran after the snapshot was taken (what ran, and
    /// when): its positions and contents may no longer be the queue's, so single messages are
    /// no longer selected from it (`jobs::Choice::resolve`). The snapshot is still shown.
    pub outdated: Option<String>,
    /// What the messages say about the queue (its role, where they came from), for the poller.
    #[serde(skip)]
    pub seen: Seen,
}

/// What a snapshot's messages say about their queue (`topology::Seen`).
fn seen(taken_at: DateTime<Utc>, messages: &[SnapshotMessage]) -> Seen {
    let mut origins: HashMap<&str, usize> = HashMap::new();
    for q in messages.iter().filter_map(|m| m.original_queue.as_deref()) {
        *origins.entry(q).or_default() += 1;
    }
    let mut origins: Vec<(String, usize)> = origins.into_iter().map(|(q, n)| (q.to_string(), n)).collect();
    origins.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    let republished: Vec<&SnapshotMessage> =
        messages.iter().filter(|m| m.reason.as_deref() == Some(REPUBLISHED)).collect();
    Seen {
        at: taken_at.format("%Y-%m-%d %H:%M:%S UTC").to_string(),
        read: messages.len(),
        republished: republished.len(),
        republished_from: republished
            .first()
            .and_then(|m| m.app_origin.as_ref().map(|o| o.from).or(m.error.as_ref().map(|e| e.from))),
        dead_lettered: messages.iter().filter(|m| !m.deaths.is_empty() || m.first_death_queue.is_some()).count(),
        origins,
        head_died_at: messages.first().and_then(|m| m.deaths.last()).and_then(|d| d.time),
    }
}

#[derive(Debug, thiserror::Error)]
pub enum BrowseError {
    #[error("{0}")]
    NeedsConfirmation(String),
    #[error("reading the queue failed: {0}")]
    Read(#[from] MoveError),
    /// A quorum queue is read only once its delivery limit is known as it stands.
    #[error("the queue's delivery limit could not be read from the broker, so it was not read: {0}")]
    LimitUnknown(String),
}

/// (broker, vhost, queue)
type QueueId = (String, String, String);

/// The last snapshot of each queue, and what each said about its queue (`Seen`), which a move
/// that clears the snapshot does not clear: an error queue emptied by a replay is still one.
#[derive(Clone, Default)]
pub struct Snapshots(Arc<Mutex<Kept>>);

#[derive(Default)]
struct Kept {
    snapshots: HashMap<QueueId, Arc<Snapshot>>,
    seen: HashMap<QueueId, Seen>,
    /// The key of the tokens the snapshots show (`IdentityKey`): the stored one once `load` ran,
    /// a key of this process's until then.
    key: Option<IdentityKey>,
    /// When warren last read each queue itself (a snapshot, a move): the broker counts those
    /// reads as deliveries and redeliveries like the application's (`QueueView::own_reads`).
    reads: HashMap<QueueId, DateTime<Utc>>,
}

impl Snapshots {
    fn lock(&self) -> std::sync::MutexGuard<'_, Kept> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn key(&self) -> IdentityKey {
        *self.lock().key.get_or_insert_with(IdentityKey::random)
    }

    pub fn get(&self, broker: &str, vhost: &str, queue: &str) -> Option<Arc<Snapshot>> {
        self.lock().snapshots.get(&(broker.to_string(), vhost.to_string(), queue.to_string())).cloned()
    }

    /// What the last snapshot of each of a broker's queues said about it, by (vhost, queue).
    pub fn seen(&self, broker: &str) -> HashMap<(String, String), Seen> {
        self.lock()
            .seen
            .iter()
            .filter(|((b, _, _), _)| b == broker)
            .map(|((_, vhost, queue), seen)| ((vhost.clone(), queue.clone()), seen.clone()))
            .collect()
    }

    /// Records that warren reads the queue now: called when a read starts and when it ends.
    pub fn mark_read(&self, broker: &str, vhost: &str, queue: &str) {
        let id = (broker.to_string(), vhost.to_string(), queue.to_string());
        self.lock().reads.insert(id, Utc::now());
    }

    /// The queues of `broker` warren read since `since`, by (vhost, queue). Older marks are
    /// forgotten: a poll asks with its rate window, and no later poll asks further back.
    pub fn read_since(&self, broker: &str, since: DateTime<Utc>) -> std::collections::HashSet<(String, String)> {
        let mut kept = self.lock();
        kept.reads.retain(|_, at| *at >= since - chrono::Duration::minutes(10));
        kept.reads
            .iter()
            .filter(|((b, _, _), at)| b == broker && **at >= since)
            .map(|((_, vhost, queue), _)| (vhost.clone(), queue.clone()))
            .collect()
    }

    /// Marks the queue's snapshot outdated by `what` (a move or purge that just ran). Every change
    /// since it was taken is named, the last ones first kept (issue 31, case 6: the mark named the
    /// first, failed move of 0 messages, not the two that emptied the queue). Returns the text.
    fn outdate(&self, broker: &str, vhost: &str, queue: &str, what: &str) -> Option<String> {
        let id = (broker.to_string(), vhost.to_string(), queue.to_string());
        let mut kept = self.lock();
        let snapshot = kept.snapshots.get_mut(&id)?;
        let text = outdated_by(snapshot.outdated.as_deref(), what);
        *snapshot = Arc::new(Snapshot { outdated: Some(text.clone()), ..snapshot.as_ref().clone() });
        Some(text)
    }

    fn put(&self, broker: &str, vhost: &str, queue: &str, snapshot: Arc<Snapshot>) {
        let id = (broker.to_string(), vhost.to_string(), queue.to_string());
        let mut kept = self.lock();
        kept.seen.insert(id.clone(), snapshot.seen.clone());
        kept.snapshots.insert(id, snapshot);
    }
}

/// Takes a snapshot of `count` head messages. A quorum queue with a delivery limit is read only
/// with `confirmed`: each read raises every message's delivery count by one, and past the limit
/// the broker drops or dead-letters it.
pub async fn take(
    broker: &crate::config::BrokerConfig,
    (store, snapshots): (&Store, &Snapshots),
    view: &QueueView,
    count: usize,
    confirmed: bool,
) -> Result<Arc<Snapshot>, BrowseError> {
    // The limit as the broker applies it now: the last poll's can be seconds old.
    let limit = if &*view.kind == "quorum" {
        let client = crate::broker::management::ManagementClient::new(broker);
        crate::broker::policies::hand_back_limit_now(&client, &view.vhost, &view.name)
            .await
            .map_err(|e| BrowseError::LimitUnknown(e.to_string()))?
    } else {
        None
    };
    if let (Some(limit), false) = (limit, confirmed) {
        return Err(BrowseError::NeedsConfirmation(format!(
            "{} is a quorum queue with a delivery limit of {limit}: every read counts as a delivery, and a message \
             read more than {limit} times is dropped or dead-lettered by the broker. Confirm to read it once.",
            view.name
        )));
    }
    let count = count.clamp(1, MAX_COUNT);
    snapshots.mark_read(&view.broker, &view.vhost, &view.name);
    let peeked = mover::peek(broker, &view.vhost, &view.name, count, PAYLOAD_LIMIT, limit).await;
    snapshots.mark_read(&view.broker, &view.vhost, &view.name);
    let peeked = peeked?;
    let held_in = |i: usize| peeked.held.contains(&i).then(|| peeked.holding_queue.clone()).flatten();
    let key = snapshots.key();
    let messages: Vec<SnapshotMessage> = (peeked.messages.into_iter().zip(peeked.identities).enumerate())
        .map(|(i, (m, identity))| SnapshotMessage {
            held_in: held_in(i),
            fingerprint: key.token(&identity),
            ..summarize(i + 1, identity, m)
        })
        .collect();
    let taken_at = Utc::now();
    let snapshot = Arc::new(Snapshot {
        outdated: None,
        seen: seen(taken_at, &messages),
        taken_at,
        queue_type: view.kind.to_string(),
        delivery_limit: limit,
        requested: count,
        note: peeked.note,
        messages,
    });
    snapshots.put(&view.broker, &view.vhost, &view.name, snapshot.clone());
    if let Err(e) = save(store, &view.broker, &view.vhost, &view.name, &snapshot).await {
        // The snapshot is shown all the same; only a restart loses it.
        tracing::warn!(queue = %view.name, error = %e, "the snapshot could not be stored: a restart loses it");
    }
    Ok(snapshot)
}

/// A snapshot's message as stored: the message as read, which `summarize` turns back into what
/// the browser shows (so that a stored snapshot reads like a fresh one, whatever `summarize`
/// learns later).
#[derive(Serialize, Deserialize)]
struct StoredMessage {
    /// `message::identity`; stored snapshots of versions before the keyed tokens named it so.
    #[serde(alias = "fingerprint")]
    identity: String,
    held_in: Option<String>,
    message: PeekedMessage,
}

/// Stores `snapshot` as the queue's, replacing the one before.
async fn save(store: &Store, broker: &str, vhost: &str, queue: &str, snapshot: &Snapshot) -> Result<(), sqlx::Error> {
    let messages: Vec<StoredMessage> = snapshot
        .messages
        .iter()
        .map(|m| StoredMessage { identity: m.identity.clone(), held_in: m.held_in.clone(), message: m.message.clone() })
        .collect();
    store
        .save_snapshot(&StoredSnapshot {
            broker: broker.to_string(),
            vhost: vhost.to_string(),
            queue: queue.to_string(),
            taken_at: snapshot.taken_at.timestamp_millis(),
            queue_type: snapshot.queue_type.clone(),
            delivery_limit: snapshot.delivery_limit,
            requested: snapshot.requested as i64,
            note: snapshot.note.clone(),
            outdated: snapshot.outdated.clone(),
            messages: serde_json::to_string(&messages).expect("messages serialise"),
        })
        .await
}

/// Marks the queue's snapshot outdated by `what` (in memory and stored), after a move or purge
/// that read or removed messages: it stays visible, but its positions and contents may have
/// changed.
pub async fn outdate(store: &Store, snapshots: &Snapshots, queue: (&str, &str, &str), what: &str) {
    let Some(text) = snapshots.outdate(queue.0, queue.1, queue.2, what) else { return };
    if let Err(e) = store.outdate_snapshot(queue, &text).await {
        tracing::warn!(queue = %queue.2, error = %e, "marking the stored snapshot outdated failed: a restart shows it current");
    }
}

/// The changes a snapshot was taken before: `before` and then `what`, the last few named.
fn outdated_by(before: Option<&str>, what: &str) -> String {
    const NAMED: usize = 3;
    let Some(before) = before else { return what.to_string() };
    // "A; then B; then C (and 2 earlier)": the earliest dropped past `NAMED`.
    let (list, earlier) = match before.rsplit_once(" (and ") {
        Some((list, n)) => (list, n.trim_end_matches(" earlier)").parse::<usize>().unwrap_or(0)),
        None => (before, 0),
    };
    let mut named: Vec<&str> = list.split("; then ").collect();
    named.push(what);
    let dropped = named.len().saturating_sub(NAMED);
    let text = named[dropped..].join("; then ");
    match earlier + dropped {
        0 => text,
        n => format!("{text} (and {n} earlier)"),
    }
}

/// The installation's key of the snapshots' tokens (`instance_keys`), made on first use. Two
/// processes starting on one new database both offer a key, and both read the winner.
async fn stored_key(store: &Store) -> Result<IdentityKey, sqlx::Error> {
    let mut fresh = [0u8; 32];
    rand::RngCore::fill_bytes(&mut rand::rngs::OsRng, &mut fresh);
    let key = store.instance_key("identity", &fresh).await?;
    let key: [u8; 32] = key.try_into().map_err(|k: Vec<u8>| {
        sqlx::Error::Protocol(format!("the stored identity key has {} bytes, not 32", k.len()))
    })?;
    Ok(IdentityKey::new(key))
}

/// Loads the stored snapshots (at start): each as it was shown, outdated or not. A stored
/// snapshot that no longer reads is skipped with a warning. Reads the installation's key of
/// the tokens first (making it on the first start), so that they are those shown before.
pub async fn load(store: &Store, snapshots: &Snapshots) -> Result<usize, sqlx::Error> {
    let key = stored_key(store).await?;
    snapshots.lock().key = Some(key);
    let mut loaded = 0;
    for row in store.snapshots().await? {
        let stored: Vec<StoredMessage> = match serde_json::from_str(&row.messages) {
            Ok(m) => m,
            Err(e) => {
                tracing::warn!(queue = %row.queue, error = %e, "a stored snapshot does not read; it is left out");
                continue;
            }
        };
        let messages: Vec<SnapshotMessage> = stored
            .into_iter()
            .enumerate()
            .map(|(i, s)| SnapshotMessage {
                held_in: s.held_in,
                fingerprint: key.token(&s.identity),
                ..summarize(i + 1, s.identity, s.message)
            })
            .collect();
        let taken_at = DateTime::from_timestamp_millis(row.taken_at).unwrap_or_default();
        let snapshot = Snapshot {
            seen: seen(taken_at, &messages),
            taken_at,
            queue_type: row.queue_type,
            delivery_limit: row.delivery_limit,
            requested: row.requested.max(0) as usize,
            note: row.note,
            outdated: row.outdated,
            messages,
        };
        snapshots.put(&row.broker, &row.vhost, &row.queue, Arc::new(snapshot));
        loaded += 1;
    }
    Ok(loaded)
}

#[cfg(test)]
mod tests {
    use super::outdated_by;

    #[test]
    fn every_change_since_the_snapshot_is_named_the_last_ones_kept() {
        let one = outdated_by(None, "the requeue of 0 messages at 10:00");
        let two = outdated_by(Some(&one), "the requeue of 40 messages at 10:01");
        assert_eq!(two, "the requeue of 0 messages at 10:00; then the requeue of 40 messages at 10:01");
        let three = outdated_by(Some(&two), "the purge of 2 messages at 10:02");
        let four = outdated_by(Some(&three), "the requeue of 1 messages at 10:03");
        assert_eq!(
            four,
            "the requeue of 40 messages at 10:01; then the purge of 2 messages at 10:02; then the requeue of 1 \
             messages at 10:03 (and 1 earlier)"
        );
        let five = outdated_by(Some(&four), "x");
        assert!(five.ends_with("; then x (and 2 earlier)"), "{five}");
    }
}
