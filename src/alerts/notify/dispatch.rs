//! The dispatcher: one task per channel, each with a bounded queue, so that a receiver that
//! hangs or keeps answering 500 holds up only its own channel. Handing a notification over
//! never waits: a full queue drops the notification, logged and recorded, rather than stall
//! the alert evaluator.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use chrono::Utc;
use tokio::sync::mpsc::{self, error::TrySendError};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::send::{send, Delivered, DeliveryError, DEFAULT_ATTEMPT_TIMEOUT};
use super::{record, LogEntry, Notification, NotificationChannel, Outcome};
use crate::history::Db;

/// How hard the dispatcher tries.
#[derive(Debug, Clone, PartialEq)]
pub struct DeliveryPolicy {
    /// Attempts per notification and channel, the first included.
    pub max_attempts: u32,
    /// The wait after the first failed attempt; it doubles after each further failure.
    pub first_backoff: Duration,
    /// The longest wait between two attempts.
    pub max_backoff: Duration,
    /// How long one attempt may take, connecting included.
    pub attempt_timeout: Duration,
    /// Notifications waiting per channel; more are dropped, not waited for.
    pub queue_capacity: usize,
}

impl Default for DeliveryPolicy {
    /// Eight attempts over about two minutes (waits of 1, 2, 4, 8, 16, 32 and 60 s): enough to
    /// ride out a receiver's restart, short enough that a dead one is reported as given up
    /// while the alert is still news.
    fn default() -> Self {
        DeliveryPolicy {
            max_attempts: 8,
            first_backoff: Duration::from_secs(1),
            max_backoff: Duration::from_secs(60),
            attempt_timeout: DEFAULT_ATTEMPT_TIMEOUT,
            queue_capacity: 100,
        }
    }
}

impl DeliveryPolicy {
    /// The wait after failed attempt number `attempt` (1 for the first):
    /// `first_backoff × 2^(attempt − 1)`, at most `max_backoff`.
    pub fn backoff(&self, attempt: u32) -> Duration {
        let factor = 2u32.saturating_pow(attempt.saturating_sub(1));
        self.first_backoff.saturating_mul(factor).min(self.max_backoff)
    }
}

/// Sends notifications to every channel that wants them, in the background. Cheap to clone:
/// clones share the channels' tasks.
#[derive(Clone)]
pub struct Dispatcher {
    inner: Arc<Inner>,
}

struct Inner {
    delivery: Delivery,
    /// Stops every channel's task; see [`Dispatcher::shutdown`].
    cancel: CancellationToken,
    tracker: TaskTracker,
    workers: Mutex<Vec<Worker>>,
}

impl std::fmt::Debug for Dispatcher {
    /// The channels as pages show them: no URL, no password.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let channels: Vec<_> = self.channels().iter().map(NotificationChannel::view).collect();
        f.debug_struct("Dispatcher").field("channels", &channels).field("policy", &self.inner.delivery.policy).finish()
    }
}

/// One channel's task, as the dispatcher reaches it.
struct Worker {
    channel: Arc<NotificationChannel>,
    queue: mpsc::Sender<Notification>,
}

/// What every attempt needs, shared by the channels' tasks.
#[derive(Clone)]
struct Delivery {
    http: reqwest::Client,
    db: Db,
    policy: DeliveryPolicy,
}

/// What the log says of notifications that warren stopped before sending.
const STOPPED: &str = "warren stopped before sending it";

impl Dispatcher {
    /// A dispatcher with no channel yet; [`Dispatcher::set_channels`] starts them. `http` is
    /// the process's shared client, `db` where the delivery log goes.
    pub fn new(http: reqwest::Client, db: Db, policy: DeliveryPolicy) -> Dispatcher {
        let delivery = Delivery { http, db, policy };
        let workers = Mutex::new(Vec::new());
        Dispatcher {
            inner: Arc::new(Inner { delivery, cancel: CancellationToken::new(), tracker: TaskTracker::new(), workers }),
        }
    }

    /// Replaces the channels (the channels must have passed `validate`). An unchanged channel
    /// keeps its task, its queue and the retries in progress; a changed or removed channel's
    /// task sends what it has queued with its old settings, then stops.
    pub fn set_channels(&self, channels: Vec<NotificationChannel>) {
        let mut workers = self.inner.workers.lock().unwrap_or_else(PoisonError::into_inner);
        let mut old = std::mem::take(&mut *workers);
        for channel in channels {
            if let Some(i) = old.iter().position(|w| *w.channel == channel && !w.queue.is_closed()) {
                workers.push(old.swap_remove(i));
                continue;
            }
            let (queue, receiver) = mpsc::channel(self.inner.delivery.policy.queue_capacity.max(1));
            let channel = Arc::new(channel);
            let task =
                run_channel(channel.clone(), receiver, self.inner.delivery.clone(), self.inner.cancel.child_token());
            self.inner.tracker.spawn(task);
            workers.push(Worker { channel, queue });
        }
        // Dropping the rest of `old` closes their queues: those tasks finish and stop.
    }

    /// The current channels, in the order given to `set_channels`.
    pub fn channels(&self) -> Vec<NotificationChannel> {
        let workers = self.inner.workers.lock().unwrap_or_else(PoisonError::into_inner);
        workers.iter().map(|w| (*w.channel).clone()).collect()
    }

    /// Queues `n` for every channel that wants it, without waiting; returns how many took it.
    /// A channel whose queue is full (its receiver has been failing for a while) drops `n`,
    /// with a warning and a `dropped` row in the delivery log.
    pub fn notify(&self, n: &Notification) -> usize {
        let workers = self.inner.workers.lock().unwrap_or_else(PoisonError::into_inner);
        let mut queued = 0;
        for worker in workers.iter().filter(|w| w.channel.wants(n)) {
            let reason = match worker.queue.try_send(n.clone()) {
                Ok(()) => {
                    queued += 1;
                    continue;
                }
                Err(TrySendError::Full(_)) => {
                    format!("the channel's queue is full ({} notifications waiting)", worker.queue.max_capacity())
                }
                Err(TrySendError::Closed(_)) => STOPPED.to_string(),
            };
            tracing::warn!(
                channel = %worker.channel.id,
                target = %worker.channel.display_target(),
                rule = %n.rule_id,
                alert = %n.key,
                "notification dropped: {reason}"
            );
            let entry = LogEntry { error: Some(reason), ..LogEntry::new(&worker.channel, n, 1, Outcome::Dropped) };
            let delivery = self.inner.delivery.clone();
            self.inner.tracker.spawn(async move { delivery.log(&entry).await });
        }
        queued
    }

    /// The "send test notification" button: one attempt at once on `channel` (which need not
    /// be one of the dispatcher's), bounded by the attempt timeout, recorded in the log.
    pub async fn send_test(&self, channel: &NotificationChannel) -> Result<Delivered, DeliveryError> {
        let delivery = &self.inner.delivery;
        let n = Notification::test(Utc::now());
        let result = send(&delivery.http, channel, &n, delivery.policy.attempt_timeout).await;
        let entry = match &result {
            Ok(delivered) => {
                LogEntry { http_status: delivered.http_status, ..LogEntry::new(channel, &n, 1, Outcome::Sent) }
            }
            Err(e) => LogEntry {
                http_status: e.http_status(),
                error: Some(e.to_string()),
                ..LogEntry::new(channel, &n, 1, Outcome::GaveUp)
            },
        };
        delivery.log(&entry).await;
        result
    }

    /// Stops every channel: an attempt in progress is abandoned, and what is still queued or
    /// waiting for a retry is recorded as dropped. Waits up to `deadline` for the tasks (which
    /// write those rows) and returns whether they all ended. Call it before closing the database.
    pub async fn shutdown(&self, deadline: Duration) -> bool {
        self.inner.cancel.cancel();
        self.inner.tracker.close();
        tokio::time::timeout(deadline, self.inner.tracker.wait()).await.is_ok()
    }
}

/// One channel's task: its notifications one after the other, in order, until its queue
/// closes (the channel was removed or changed) or `cancel`.
async fn run_channel(
    channel: Arc<NotificationChannel>,
    mut queue: mpsc::Receiver<Notification>,
    delivery: Delivery,
    cancel: CancellationToken,
) {
    loop {
        let n = tokio::select! {
            biased;
            _ = cancel.cancelled() => break,
            n = queue.recv() => match n {
                Some(n) => n,
                None => return,
            },
        };
        delivery.deliver(&channel, &n, &cancel).await;
    }
    queue.close();
    while let Ok(n) = queue.try_recv() {
        delivery
            .log(&LogEntry { error: Some(STOPPED.to_string()), ..LogEntry::new(&channel, &n, 1, Outcome::Dropped) })
            .await;
    }
}

impl Delivery {
    /// Attempts until one succeeds, retrying cannot help, the attempts are used up, or `cancel`;
    /// every attempt goes in the log.
    async fn deliver(&self, channel: &NotificationChannel, n: &Notification, cancel: &CancellationToken) {
        let max_attempts = self.policy.max_attempts.max(1);
        for attempt in 1..=max_attempts {
            let result = tokio::select! {
                biased;
                _ = cancel.cancelled() => {
                    let error = "warren stopped during the attempt; the receiver may or may not have it".to_string();
                    self.log(&LogEntry { error: Some(error), ..LogEntry::new(channel, n, attempt, Outcome::Dropped) }).await;
                    return;
                }
                result = send(&self.http, channel, n, self.policy.attempt_timeout) => result,
            };
            let error = match result {
                Ok(delivered) => {
                    let entry = LogEntry {
                        http_status: delivered.http_status,
                        ..LogEntry::new(channel, n, attempt, Outcome::Sent)
                    };
                    self.log(&entry).await;
                    return;
                }
                Err(error) => error,
            };
            let last = attempt == max_attempts || error.is_permanent();
            let outcome = if last { Outcome::GaveUp } else { Outcome::Failed };
            tracing::warn!(
                channel = %channel.id,
                target = %channel.display_target(),
                rule = %n.rule_id,
                alert = %n.key,
                attempt,
                error = %error,
                "notification attempt failed{}",
                if last { "; giving up" } else { "; will retry" }
            );
            let entry = LogEntry {
                http_status: error.http_status(),
                error: Some(error.to_string()),
                ..LogEntry::new(channel, n, attempt, outcome)
            };
            self.log(&entry).await;
            if last {
                return;
            }
            tokio::select! {
                biased;
                _ = cancel.cancelled() => {
                    let entry = LogEntry { error: Some(STOPPED.to_string()), ..LogEntry::new(channel, n, attempt + 1, Outcome::Dropped) };
                    self.log(&entry).await;
                    return;
                }
                _ = tokio::time::sleep(self.policy.backoff(attempt)) => {}
            }
        }
    }

    /// Writes a log row; a database error is logged and the delivery goes on.
    async fn log(&self, entry: &LogEntry) {
        if let Err(e) = record(&self.db, entry).await {
            tracing::error!(error = %e, channel = %entry.channel_id, outcome = entry.outcome.as_str(), "cannot write the delivery log");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_from_the_first_wait_up_to_the_cap() {
        let policy = DeliveryPolicy::default();
        let waits: Vec<u64> = (1..=9).map(|attempt| policy.backoff(attempt).as_secs()).collect();
        assert_eq!(waits, [1, 2, 4, 8, 16, 32, 60, 60, 60]);
        assert_eq!(policy.backoff(u32::MAX), policy.max_backoff);
        let fast = DeliveryPolicy { first_backoff: Duration::from_millis(50), ..policy };
        assert_eq!(fast.backoff(1), Duration::from_millis(50));
        assert_eq!(fast.backoff(3), Duration::from_millis(200));
    }
}
