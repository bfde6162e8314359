//! The history's raw samples: each queue's values when they changed (`queue_samples`) and each
//! successful poll's broker-wide values (`broker_samples`). On this branch only what the roll-ups
//! need of the part: the sample type, its columns, and the pruning of raw rows.

use async_trait::async_trait;
use serde::Serialize;

use super::Result;

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

/// Queues whose old samples one delete of the pruning takes: a short write each, so the
/// poller's writes wait for none of them long.
pub(super) const PRUNE_QUEUES_PER_STATEMENT: usize = 200;

#[async_trait]
pub trait Samples {
    /// Deletes queue samples and broker polls older than `before`; returns how many.
    async fn prune_samples(&self, before: i64) -> Result<u64>;
}
