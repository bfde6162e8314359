//! The history's raw samples: brokers and their queues (`brokers`, `queues`), each queue's values
//! when they changed (`queue_samples`) and each successful poll's broker-wide values
//! (`broker_samples`). How a poll decides what to write, and how a chart resamples what is read,
//! is `history`'s; each method here is one statement or one transaction.

use async_trait::async_trait;
use serde::Serialize;

use super::{Held, Result};

/// The stored values of one queue sample. Equality decides whether a new row is needed.
/// A value the broker did not give is `None`, stored as null: unknown, never 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize)]
pub struct StoredSample {
    pub ready: Option<i64>,
    pub unacked: Option<i64>,
    pub consumers: Option<i64>,
    pub publish_count: Option<i64>,
    pub publish_rate_m: Option<i64>,
    pub deliver_rate_m: Option<i64>,
    pub ack_rate_m: Option<i64>,
    pub redeliver_rate_m: Option<i64>,
    pub head_ts: Option<i64>,
    pub est_oldest_ts: Option<i64>,
    pub est_bound: Option<i64>,
}

/// The columns of a [`StoredSample`], in the order [`sample_from_row`] reads them.
pub const SAMPLE_COLUMNS: &str =
    "ready, unacked, consumers, publish_count, publish_rate_m, deliver_rate_m, ack_rate_m, \
redeliver_rate_m, head_ts, est_oldest_ts, est_bound";

/// The [`SAMPLE_COLUMNS`] of a row from `offset` on, on either backend.
pub fn sample_from_row<'r, R>(row: &'r R, offset: usize) -> Result<StoredSample>
where
    R: sqlx::Row,
    usize: sqlx::ColumnIndex<R>,
    Option<i64>: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
{
    Ok(StoredSample {
        ready: row.try_get(offset)?,
        unacked: row.try_get(offset + 1)?,
        consumers: row.try_get(offset + 2)?,
        publish_count: row.try_get(offset + 3)?,
        publish_rate_m: row.try_get(offset + 4)?,
        deliver_rate_m: row.try_get(offset + 5)?,
        ack_rate_m: row.try_get(offset + 6)?,
        redeliver_rate_m: row.try_get(offset + 7)?,
        head_ts: row.try_get(offset + 8)?,
        est_oldest_ts: row.try_get(offset + 9)?,
        est_bound: row.try_get(offset + 10)?,
    })
}

/// A queue row with its last sample, as `known_queues` and `find_queue` select it: the queue's
/// id, vhost, name, kind, durable, arguments, policy, effective_policy and deleted_at, then the
/// sample's ts (null without one) and its [`SAMPLE_COLUMNS`].
pub fn known_from_row<'r, R>(row: &'r R) -> Result<KnownQueue>
where
    R: sqlx::Row,
    usize: sqlx::ColumnIndex<R>,
    i64: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    Option<i64>: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    String: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    Option<String>: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    Option<bool>: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
{
    let ts: Option<i64> = row.try_get(9)?;
    let last_sample = match ts {
        Some(ts) => Some((ts, sample_from_row(row, 10)?)),
        None => None,
    };
    Ok(KnownQueue {
        id: row.try_get(0)?,
        meta: QueueMeta {
            vhost: row.try_get(1)?,
            name: row.try_get(2)?,
            kind: row.try_get(3)?,
            durable: row.try_get(4)?,
            arguments: row.try_get(5)?,
            policy: row.try_get(6)?,
            effective_policy: row.try_get(7)?,
        },
        deleted_at: row.try_get(8)?,
        last_sample,
    })
}

/// A queue's metadata row; written when it first appears or when any of it changes.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct QueueMeta {
    pub vhost: String,
    pub name: String,
    pub kind: String,
    pub durable: Option<bool>,
    pub arguments: String,
    pub policy: Option<String>,
    pub effective_policy: String,
}

/// Broker-wide values of one successful poll.
#[derive(Debug, Clone, Default)]
pub struct BrokerSample {
    pub ready: Option<i64>,
    pub unacked: Option<i64>,
    pub consumers: Option<i64>,
    pub queues: i64,
    pub publish_rate_m: Option<i64>,
    pub confirm_rate_m: Option<i64>,
    pub ack_rate_m: Option<i64>,
    pub deliver_rate_m: Option<i64>,
    pub redeliver_rate_m: Option<i64>,
    pub unroutable_rate_m: Option<i64>,
    pub poll_ms: i64,
}

/// Everything one poll writes, applied in one transaction.
#[derive(Debug, Default)]
pub struct PollWrite {
    pub broker_id: i64,
    pub ts: i64,
    /// Queues seen for the first time, or whose metadata changed, or that came back.
    pub upserts: Vec<QueueMeta>,
    /// Ids of queues that disappeared in this poll.
    pub deleted: Vec<i64>,
    /// Samples of queues whose values changed: (queue id, values). Queues in `upserts` that are
    /// new have no id yet; their samples go in `new_samples` by position in `upserts`.
    pub samples: Vec<(i64, StoredSample)>,
    pub new_samples: Vec<(usize, StoredSample)>,
    pub broker: BrokerSample,
}

impl PollWrite {
    /// Every sample with its queue id, given the ids of `upserts` in order.
    pub fn all_samples<'a>(&'a self, ids: &'a [i64]) -> impl Iterator<Item = (i64, StoredSample)> + 'a {
        self.samples.iter().copied().chain(self.new_samples.iter().map(|&(index, s)| (ids[index], s)))
    }
}

/// A queue row as loaded at start, so the poller knows ids and what was last stored.
#[derive(Debug, Clone)]
pub struct KnownQueue {
    pub id: i64,
    pub meta: QueueMeta,
    pub deleted_at: Option<i64>,
    pub last_sample: Option<(i64, StoredSample)>,
}

/// A broker's polls of one bucket of a chart, averaged (`broker_samples`): `bucket` counts
/// steps from the range's start; a value no poll of the bucket had is `None`.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct BrokerBucket {
    pub bucket: i64,
    pub ready: Option<f64>,
    pub unacked: Option<f64>,
    pub publish_rate_m: Option<f64>,
    pub confirm_rate_m: Option<f64>,
    pub ack_rate_m: Option<f64>,
    pub deliver_rate_m: Option<f64>,
    pub redeliver_rate_m: Option<f64>,
    pub unroutable_rate_m: Option<f64>,
    pub poll_ms: Option<f64>,
}

/// Queues whose old samples one delete of the pruning takes: a short write each, so the
/// poller's writes wait for none of them long.
pub(super) const PRUNE_QUEUES_PER_STATEMENT: usize = 200;

/// One stored depth row for the age estimate from depth alone: (ts, ready, unacked, ack rate × 1000).
pub type DepthRow = (i64, Option<i64>, Option<i64>, Option<i64>);

#[async_trait]
pub trait Samples {
    /// The id of the broker named `name`, added if it is new.
    async fn broker_id(&self, name: &str) -> Result<i64>;
    /// How many queues of a broker are stored (deleted ones too).
    async fn count_known_queues(&self, broker_id: i64) -> Result<i64>;
    /// Every queue of a broker with its last stored sample, handed to `each` as read (never all
    /// at once: 50,000 queues' rows held together cost the process its memory high-water mark).
    async fn known_queues(&self, broker_id: i64, each: &mut (dyn FnMut(KnownQueue) + Send)) -> Result<()>;
    /// One poll's writes in one transaction; returns the ids of `write.upserts`, in order.
    /// Under `fence` (the poller's lease on its broker), the transaction first checks the lease
    /// (`Fence`) and writes nothing when it was lost: `None`.
    async fn write_poll(&self, write: &PollWrite, fence: Option<&Held>) -> Result<Option<Vec<i64>>>;
    /// A queue found by its names, with its last stored sample.
    async fn find_queue(&self, broker: &str, vhost: &str, name: &str) -> Result<Option<KnownQueue>>;
    /// The queue's samples in `[from, to]`, led by the one in force at `from`, by time.
    async fn queue_samples(&self, queue_id: i64, from: i64, to: i64) -> Result<Vec<(i64, StoredSample)>>;
    /// When the queue was seen deleted (`None`: it exists).
    async fn queue_deleted_at(&self, queue_id: i64) -> Result<Option<i64>>;
    /// Times of the broker's successful polls in `[from, to]`, ascending.
    async fn poll_times(&self, broker_id: i64, from: i64, to: i64) -> Result<Vec<i64>>;
    /// Time of the broker's last successful poll.
    async fn last_poll_at(&self, broker_id: i64) -> Result<Option<i64>>;
    /// (queue id, ts, ready + unacked) of the queues' samples from the one in force at `since`
    /// on, by queue and time.
    async fn depths_since(&self, queue_ids: &[i64], since: i64) -> Result<Vec<(i64, i64, Option<i64>)>>;
    /// The latest sample since `since` whose publish counter was at most `target`, and the time
    /// of the sample after it.
    async fn publish_crossing(&self, queue_id: i64, since: i64, target: i64) -> Result<Option<(i64, Option<i64>)>>;
    /// The first sample since `since` with its counts known and messages in it: (ts,
    /// publish_count, ready + unacked).
    async fn first_sample(&self, queue_id: i64, since: i64) -> Result<Option<(i64, Option<i64>, Option<i64>)>>;
    /// The last time since `since` the queue was seen empty (ready and unacked both 0).
    async fn last_seen_empty(&self, queue_id: i64, since: i64) -> Result<Option<i64>>;
    /// The queue's first `limit` [`DepthRow`]s after `after`, by time.
    async fn depths_after(&self, queue_id: i64, after: i64, limit: i64) -> Result<Vec<DepthRow>>;
    /// The broker's polls in `[from, to]` averaged per `step` seconds; buckets without a poll are
    /// left out.
    async fn broker_buckets(&self, broker_id: i64, from: i64, to: i64, step: i64) -> Result<Vec<BrokerBucket>>;
    /// Deletes queue samples and broker polls older than `before`; returns how many.
    async fn prune_samples(&self, before: i64) -> Result<u64>;
    /// Makes ready the storage of the history's coming days (`now` is unix seconds): on
    /// PostgreSQL, the day partitions of today and the next few days of the samples and queue
    /// roll-ups, with any rows already written for those days; on SQLite, nothing. A write for a
    /// day not prepared is kept all the same (PostgreSQL's default partition takes it).
    async fn prepare_partitions(&self, now: i64) -> Result<()>;
}
