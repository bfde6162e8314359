//! The dispatcher: one task per channel, each delivering that channel's rows of the outbox
//! (`notification_outbox`, see `outbox`) oldest first, one at a time, so that a receiver that
//! hangs or keeps answering 500 holds up only its own channel. Handing a notification over
//! writes rows and never waits for a receiver: a channel whose outbox is full gets a `dropped`
//! log row instead, rather than grow without bound while its receiver is down. What a channel
//! has not accepted is in the database, with its attempts, so it survives a restart (at least
//! once: an attempt cut short by a stop is made again).
//!
//! Every replica on a shared database runs every channel's task. A task claims the row it is
//! about to attempt (`outbox::claim`, for the attempt's timeout and a margin, by the database's
//! clock), so one process at a time delivers a channel, oldest first; the others wait for the
//! channel to be free and take over a row whose claimer died once its claim expires.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use chrono::Utc;
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::alertmanager::{self, AlertSource};
use super::outbox::{self, PendingDelivery};
use super::send::{resend_alertmanager, send, Delivered, DeliveryError, DEFAULT_ATTEMPT_TIMEOUT};
use super::{record, record_in, ChannelKind, LogEntry, Notification, NotificationChannel, NotificationKind, Outcome};
use crate::storage::{Store, Transaction};

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
    /// Notifications waiting per channel (its rows in the outbox, the one being attempted
    /// included); more are dropped, not waited for.
    pub queue_capacity: usize,
    /// How long rows of a channel this process does not have stay in the outbox before it drops
    /// them. With several replicas, another may have the channel: during a rolling change of
    /// the configuration, a replica that does not know a channel yet would otherwise drop what
    /// one that knows it just queued. 0 with one process (SQLite): drop at once.
    pub unknown_channel_grace: Duration,
}

/// The grace of rows of unknown channels with several replicas: a rolling change of the
/// configuration is over within it.
pub const REPLICAS_UNKNOWN_CHANNEL_GRACE: Duration = Duration::from_secs(600);

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
            unknown_channel_grace: Duration::ZERO,
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

/// Sends notifications to every channel that wants them, in the background, through the
/// outbox. Cheap to clone: clones share the channels' tasks.
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
    /// Stops the sweep of unknown channels' rows the last `set_channels` started.
    sweep: Mutex<CancellationToken>,
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
    /// Signalled when rows for the channel were committed.
    wake: Arc<Notify>,
    /// Stops this task alone: its channel was changed or removed.
    stop: CancellationToken,
    /// The task, for a successor on the same channel id to wait for.
    task: JoinHandle<()>,
}

/// What every attempt needs, shared by the channels' tasks.
#[derive(Clone)]
struct Delivery {
    http: reqwest::Client,
    db: Store,
    policy: DeliveryPolicy,
    /// What an Alertmanager channel re-sends.
    alerts: Arc<AlertSource>,
    /// This process, as its claims on outbox rows name it (a replica id).
    claimer: Arc<str>,
}

/// What the log says of an attempt cut short: the receiver may have it, and it is made again.
const STOPPED: &str = "stopped during the attempt (warren shut down or the channel changed); the receiver may or \
                       may not have it; it stays in the outbox and is tried again";

impl Dispatcher {
    /// A dispatcher with no channel yet; [`Dispatcher::set_channels`] starts them. `http` is
    /// the process's shared client, `db` where the outbox and the delivery log are, `claimer`
    /// this process among those sharing `db` (its replica id): what its claims on outbox rows
    /// are made in the name of, so it must differ from every other live process's.
    pub fn new(http: reqwest::Client, db: Store, policy: DeliveryPolicy, claimer: String) -> Dispatcher {
        Dispatcher::with_alerts(http, db, policy, AlertSource::default(), claimer)
    }

    /// As [`Dispatcher::new`], with the rules of the config file and warren's public address,
    /// which an Alertmanager channel needs to re-send the alerts that still fire.
    pub fn with_alerts(
        http: reqwest::Client,
        db: Store,
        policy: DeliveryPolicy,
        alerts: AlertSource,
        claimer: String,
    ) -> Dispatcher {
        let delivery = Delivery { http, db, policy, alerts: Arc::new(alerts), claimer: claimer.into() };
        let workers = Mutex::new(Vec::new());
        Dispatcher {
            inner: Arc::new(Inner {
                delivery,
                cancel: CancellationToken::new(),
                tracker: TaskTracker::new(),
                workers,
                sweep: Mutex::new(CancellationToken::new()),
            }),
        }
    }

    /// Replaces the channels (the channels must have passed `validate`) and starts their tasks,
    /// which first deliver what the outbox already holds for them (rows from before a restart,
    /// with their attempt counts). An unchanged channel keeps its task. A changed channel's old
    /// task stops (an attempt in flight is abandoned, and made again) and the new one, which
    /// waits for it, delivers the channel's rows with the new settings.
    ///
    /// Rows of a channel id that is no longer configured are deleted, each with a `dropped` log
    /// row saying "the channel was removed": keeping them until the id came back would send
    /// stale news (a firing resolved long ago) to whatever the id then names, and would hide
    /// them from the log meanwhile.
    pub fn set_channels(&self, channels: Vec<NotificationChannel>) {
        let mut workers = self.inner.workers.lock().unwrap_or_else(PoisonError::into_inner);
        let mut old = std::mem::take(&mut *workers);
        for channel in channels {
            if let Some(i) = old.iter().position(|w| *w.channel == channel && !w.task.is_finished()) {
                workers.push(old.swap_remove(i));
                continue;
            }
            // One task at a time per channel id, or two would deliver the same rows.
            let previous = old.iter().position(|w| w.channel.id == channel.id).map(|i| {
                let worker = old.swap_remove(i);
                worker.stop.cancel();
                worker.task
            });
            let channel = Arc::new(channel);
            let wake = Arc::new(Notify::new());
            let stop = self.inner.cancel.child_token();
            let task = run_channel(channel.clone(), wake.clone(), self.inner.delivery.clone(), stop.clone(), previous);
            let task = self.inner.tracker.spawn(task);
            workers.push(Worker { channel, wake, stop, task });
        }
        for removed in old {
            removed.stop.cancel();
        }
        drop(workers);
        let dispatcher = self.clone();
        // One sweep at a time: this call's replaces the previous call's.
        let cancel = self.inner.cancel.child_token();
        let previous =
            std::mem::replace(&mut *self.inner.sweep.lock().unwrap_or_else(PoisonError::into_inner), cancel.clone());
        previous.cancel();
        self.inner.tracker.spawn(async move {
            let grace = dispatcher.inner.delivery.policy.unknown_channel_grace;
            loop {
                // The channels as they are when this runs: a later call may have brought one back.
                let ids: Vec<String> = dispatcher.channels().into_iter().map(|c| c.id).collect();
                let before = Utc::now() - chrono::Duration::from_std(grace).unwrap_or_default();
                match outbox::drop_other_channels(&dispatcher.inner.delivery.db, &ids, before).await {
                    Ok(0) => {}
                    Ok(dropped) => tracing::warn!(dropped, "pending notifications of removed channels dropped"),
                    Err(e) => tracing::error!(error = %e, "cannot drop the pending notifications of removed channels"),
                }
                // With a grace, rows younger than it are looked at again once it passed.
                if grace.is_zero() {
                    return;
                }
                tokio::select! {
                    _ = cancel.cancelled() => return,
                    _ = tokio::time::sleep(grace) => {}
                }
            }
        });
    }

    /// The current channels, in the order given to `set_channels`.
    pub fn channels(&self) -> Vec<NotificationChannel> {
        let workers = self.inner.workers.lock().unwrap_or_else(PoisonError::into_inner);
        workers.iter().map(|w| (*w.channel).clone()).collect()
    }

    /// Puts `n` in the outbox for every channel that wants it and wakes their tasks; returns how
    /// many took it. Never waits for a receiver. See [`Dispatcher::enqueue`] for a full channel.
    pub async fn notify(&self, n: &Notification) -> Result<usize, sqlx::Error> {
        let mut tx = self.inner.delivery.db.begin().await?;
        let queued = self.enqueue(&mut *tx, n).await?;
        tx.commit().await?;
        self.wake();
        Ok(queued)
    }

    /// Writes `n` to the outbox for every channel that wants it, in the caller's transaction (the
    /// alert evaluator's, with the alert states), and returns how many took it. Call
    /// [`Dispatcher::wake`] once it is committed. A channel already holding `queue_capacity`
    /// rows (its receiver has been failing for a while) drops `n`, with a warning and a
    /// `dropped` row in the delivery log.
    pub async fn enqueue(&self, tx: &mut dyn Transaction, n: &Notification) -> Result<usize, sqlx::Error> {
        let capacity = self.inner.delivery.policy.queue_capacity.max(1);
        let mut queued = 0;
        for channel in self.channels().iter().filter(|c| c.wants(n)) {
            let waiting = outbox::waiting(tx, &channel.id).await?;
            if waiting < capacity {
                outbox::insert(tx, channel, n, Utc::now()).await?;
                queued += 1;
                continue;
            }
            let reason = format!("the channel's queue is full ({waiting} notifications waiting)");
            tracing::warn!(
                channel = %channel.id,
                target = %channel.display_target(),
                rule = %n.rule_id,
                alert = %n.key,
                "notification dropped: {reason}"
            );
            record_in(tx, &LogEntry { error: Some(reason), ..LogEntry::new(channel, n, 1, Outcome::Dropped) }).await?;
        }
        Ok(queued)
    }

    /// Tells every channel's task to look at the outbox: rows were committed for it.
    pub fn wake(&self) {
        let workers = self.inner.workers.lock().unwrap_or_else(PoisonError::into_inner);
        for worker in workers.iter() {
            // A permit is kept while the task is busy, so no wake is missed.
            worker.wake.notify_one();
        }
    }

    /// The "send test notification" button: one attempt at once on `channel` (which need not
    /// be one of the dispatcher's), bounded by the attempt timeout, recorded in the log. It does
    /// not go through the outbox: the person who pressed the button wants the answer now.
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

    /// Stops every channel: an attempt in progress is abandoned (logged as `dropped`, and made
    /// again at the next start); what waits in the outbox stays there for the next start.
    /// Waits up to `deadline` for the tasks and returns whether they all ended. Call it before
    /// closing the database.
    pub async fn shutdown(&self, deadline: Duration) -> bool {
        self.inner.cancel.cancel();
        self.inner.tracker.close();
        tokio::time::timeout(deadline, self.inner.tracker.wait()).await.is_ok()
    }
}

/// How long a channel's task waits after the database failed it, before it reads again.
const DATABASE_RETRY: Duration = Duration::from_secs(1);

/// How much longer than an attempt's timeout a claim lasts: time to write the outcome. Short, as
/// it is also how long a row whose claimer died waits for another process (a claim renewed during
/// the attempt would save little: an attempt is bounded by its timeout anyway).
const CLAIM_MARGIN: Duration = Duration::from_secs(5);

/// How soon a channel's task looks again when another process was delivering the channel: that
/// process delivers the rows after it too, so this is only for a claim left to expire.
const CLAIMED_ELSEWHERE: Duration = Duration::from_secs(2);

/// One channel's task: its rows of the outbox one after the other, oldest first (so a firing is
/// told before its resolution), each when it is due, until `stop`. It starts once `previous`
/// (the task of the channel's former settings) has ended.
async fn run_channel(
    channel: Arc<NotificationChannel>,
    wake: Arc<Notify>,
    delivery: Delivery,
    stop: CancellationToken,
    previous: Option<JoinHandle<()>>,
) {
    if let Some(previous) = previous {
        if let Err(e) = previous.await {
            tracing::error!(channel = %channel.id, error = %e, "the channel's previous task failed");
        }
    }
    // Re-sending runs in this task, between deliveries, never beside one: a re-send read
    // before a resolve was committed is then posted before that resolve, not after it (which
    // would make Alertmanager take the alert as firing again until its `endsAt`).
    let resend_every = match &channel.kind {
        ChannelKind::Alertmanager(am) => Some(am.resend_interval()),
        _ => None,
    };
    let mut next_resend = tokio::time::Instant::now();
    let mut resend_failing = false;
    loop {
        if let Some(every) = resend_every.filter(|_| tokio::time::Instant::now() >= next_resend) {
            delivery.resend(&channel, &stop, &mut resend_failing).await;
            next_resend = tokio::time::Instant::now() + every;
        }
        let next = tokio::select! {
            biased;
            _ = stop.cancelled() => return,
            next = outbox::oldest(&delivery.db, &channel.id) => next,
        };
        // How long to wait for the next row to come due; `None`: until woken.
        let wait = match next {
            Ok(Some(pending)) => match (pending.next_attempt_at - Utc::now()).to_std() {
                // A wall clock set back must not hold a row for longer than a backoff.
                Ok(due_in) if !due_in.is_zero() => Some(due_in.min(delivery.policy.max_backoff)),
                _ => {
                    let claimed = tokio::select! {
                        biased;
                        _ = stop.cancelled() => return,
                        claimed = outbox::claim(&delivery.db, &channel.id, &delivery.claimer, delivery.claim_time()) => claimed,
                    };
                    match claimed {
                        // The row claimed may be another than the one read, if that one went
                        // meanwhile: the claim takes the oldest.
                        Ok(Some(claimed)) => {
                            delivery.attempt(&channel, &claimed, &stop).await;
                            continue;
                        }
                        Ok(None) => Some(CLAIMED_ELSEWHERE),
                        Err(e) => {
                            tracing::error!(channel = %channel.id, error = %e, "cannot claim a notification; will retry");
                            Some(DATABASE_RETRY)
                        }
                    }
                }
            },
            Ok(None) => None,
            Err(e) => {
                tracing::error!(channel = %channel.id, error = %e, "cannot read the notification outbox; will retry");
                Some(DATABASE_RETRY)
            }
        };
        let until_resend = resend_every.map(|_| next_resend.saturating_duration_since(tokio::time::Instant::now()));
        let wait = match (wait, until_resend) {
            (Some(wait), Some(resend)) => Some(wait.min(resend)),
            (wait, resend) => wait.or(resend),
        };
        let sleep = async {
            match wait {
                Some(wait) => tokio::time::sleep(wait).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            biased;
            _ = stop.cancelled() => return,
            _ = wake.notified() => {}
            _ = sleep => {}
        }
    }
}

impl Delivery {
    /// How long a claim on a row lasts: longer than its attempt may take, by [`CLAIM_MARGIN`].
    fn claim_time(&self) -> Duration {
        self.policy.attempt_timeout.saturating_add(CLAIM_MARGIN)
    }

    /// Re-sends to an Alertmanager every alert that still fires and was told, so that it stays
    /// active there (see the module docs of `notify`). Not in the outbox nor the delivery log:
    /// it comes again within a resend interval anyway, and would be a row per minute. A failure
    /// is logged when it starts and when it ends, not at every try.
    async fn resend(&self, channel: &NotificationChannel, stop: &CancellationToken, failing: &mut bool) {
        let ChannelKind::Alertmanager(am) = &channel.kind else { return };
        if let Some(replica) = &self.alerts.resend_under {
            if replica.held(crate::replicas::HOUSEKEEPING).is_none() {
                return;
            }
        }
        let alerts = match alertmanager::still_firing(&self.db, &self.alerts, channel).await {
            Ok(alerts) if alerts.is_empty() => return,
            Ok(alerts) => alerts,
            Err(e) => {
                tracing::error!(channel = %channel.id, error = %e, "cannot read the firing alerts to re-send");
                return;
            }
        };
        let result = tokio::select! {
            biased;
            _ = stop.cancelled() => return,
            result = resend_alertmanager(&self.http, channel, am, &alerts, self.policy.attempt_timeout) => result,
        };
        match result {
            Ok(_) if *failing => {
                tracing::info!(channel = %channel.id, alerts = alerts.len(), "firing alerts re-sent to Alertmanager again");
                *failing = false;
            }
            Ok(_) => tracing::debug!(channel = %channel.id, alerts = alerts.len(), "firing alerts re-sent"),
            Err(error) if !*failing => {
                tracing::warn!(
                    channel = %channel.id,
                    target = %channel.display_target(),
                    alerts = alerts.len(),
                    error = %error,
                    "cannot re-send the firing alerts to Alertmanager; they end there at their endsAt unless a later re-send gets through"
                );
                *failing = true;
            }
            Err(error) => {
                tracing::debug!(channel = %channel.id, error = %error, "re-send to Alertmanager failed again")
            }
        }
    }

    /// One attempt at `pending`, logged, its outcome written to the outbox in the same
    /// transaction: delivered or given up, the row goes; failed, it comes due again after the
    /// backoff. An attempt cut short by `stop` leaves the row as it was, its claim ended.
    /// `pending` is claimed by this process.
    async fn attempt(&self, channel: &NotificationChannel, pending: &PendingDelivery, stop: &CancellationToken) {
        let n = &pending.notification;
        let attempt = pending.attempts + 1;
        let result = tokio::select! {
            biased;
            _ = stop.cancelled() => {
                let entry = LogEntry { error: Some(STOPPED.to_string()), ..LogEntry::new(channel, n, attempt, Outcome::Dropped) };
                self.log(&entry).await;
                // So that the next process (this one's successor, after a restart) need not
                // wait for the claim to expire; if this fails, it waits.
                if let Err(e) = outbox::release(&self.db, pending.id, &self.claimer).await {
                    tracing::warn!(channel = %channel.id, error = %e, "cannot end the claim on an abandoned notification; it ends by itself");
                }
                return;
            }
            result = send(&self.http, channel, n, self.policy.attempt_timeout) => result,
        };
        let (entry, retry_in) = match result {
            Ok(delivered) => (
                LogEntry { http_status: delivered.http_status, ..LogEntry::new(channel, n, attempt, Outcome::Sent) },
                None,
            ),
            Err(error) => {
                // A row from before a restart under a policy with fewer attempts ends here too.
                let last = attempt >= self.policy.max_attempts.max(1) || error.is_permanent();
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
                let outcome = if last { Outcome::GaveUp } else { Outcome::Failed };
                let entry = LogEntry {
                    http_status: error.http_status(),
                    error: Some(error.to_string()),
                    ..LogEntry::new(channel, n, attempt, outcome)
                };
                (entry, (!last).then(|| self.policy.backoff(attempt)))
            }
        };
        let settled = self.settle(pending, &entry, retry_in).await;
        if let Ok(false) = settled {
            // Paused past the claim (a stalled process, a slow receiver): another process took
            // the row over and makes (or made) the attempt that counts. This one's outcome is
            // not logged, so a delivery is logged once; the receiver may have it twice, under
            // one idempotency key.
            tracing::warn!(
                channel = %channel.id,
                rule = %n.rule_id,
                alert = %n.key,
                outcome = entry.outcome.as_str(),
                "the claim on a notification expired during its attempt and another process took it over; \
                 this attempt's outcome is not recorded"
            );
        }
        if let Err(e) = settled {
            // The row stays as it was: the attempt is made again (a duplicate if it was sent).
            tracing::error!(error = %e, channel = %channel.id, outcome = entry.outcome.as_str(), "cannot record a notification attempt");
            tokio::select! {
                _ = stop.cancelled() => {}
                _ = tokio::time::sleep(DATABASE_RETRY) => {}
            }
        }
    }

    /// Writes an attempt's outcome: its log row, and the outbox row retried after `retry_in`
    /// or deleted; a delivered firing or reminder marks its alert as notified. All of it only if
    /// this process still claims the row: `false` when another took it over, and nothing is
    /// written.
    async fn settle(
        &self,
        pending: &PendingDelivery,
        entry: &LogEntry,
        retry_in: Option<Duration>,
    ) -> Result<bool, sqlx::Error> {
        let mut tx = self.db.begin().await?;
        // The claim first: it is the fence for the writes after it (on PostgreSQL the row stays
        // locked until the commit, so a takeover waits for this transaction or sees it fail).
        let still_claimed = match retry_in {
            Some(wait) => {
                let next_at = entry.at + chrono::Duration::from_std(wait).unwrap_or(chrono::Duration::MAX);
                outbox::retry_later(&mut *tx, pending.id, &self.claimer, entry.attempt, next_at).await?
            }
            None => outbox::remove(&mut *tx, pending.id, &self.claimer).await?,
        };
        if !still_claimed {
            return Ok(false);
        }
        let n = &pending.notification;
        if entry.outcome == Outcome::Sent && matches!(n.kind, NotificationKind::Firing | NotificationKind::Reminder) {
            crate::alerts::store::mark_delivered(&mut *tx, &n.rule_id, &n.key, n.at, entry.at).await?;
        }
        record_in(&mut *tx, entry).await?;
        tx.commit().await?;
        Ok(true)
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
