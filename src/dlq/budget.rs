//! A filter's regular expression matched within a budget (issue 29, must-have 4): off the async
//! runtime's workers, in a bounded number of threads, for at most `REQUEST` per request, and
//! stopped when the request is dropped (the client left) or warren stops.
//!
//! An expression can match at a few KB/s (`dlq::expression` says how slow): the work checks
//! its budget between two records and every few KiB of a long one. Run on the runtime's workers
//! (two on a 2-core machine), two such requests made `/healthz` take 13 s.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Semaphore;
use tokio::time::Instant;
use tokio_util::sync::{CancellationToken, DropGuard};

/// How long a request's regular expression may run. A listing of 100,000 records of 1 KiB
/// matches in 0.1-0.2 s (README, "Custody benchmark"); past 2 s a page is no longer an answer,
/// and the filter is better narrowed (a reason, a queue, a text every match holds).
pub const REQUEST: Duration = Duration::from_secs(2);

/// How long the matching of a job's selection may run (a replay's records, the messages a
/// move reads): longer than a request's, as nobody waits on a page for it, and bounded still,
/// as it holds a thread and a core.
pub const JOB: Duration = Duration::from_secs(20);

/// Why matching stopped before it was done.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Stopped {
    #[error(
        "the regular expression ran past its time budget of {} s: narrow the filter (a reason, a queue, a text \
         every match holds) or simplify the expression",
        .0.as_secs_f64()
    )]
    TooSlow(Duration),
    #[error("the search was cancelled")]
    Cancelled,
}

/// What every request's matching shares: how many threads match at once, and warren's shutdown.
#[derive(Clone)]
pub struct Matchers {
    threads: Arc<Semaphore>,
    stopping: CancellationToken,
}

impl Default for Matchers {
    fn default() -> Self {
        Matchers::new()
    }
}

impl Matchers {
    /// One thread fewer than the cores (at least one): the runtime's workers keep a core for
    /// every other request however many filters run.
    pub fn new() -> Matchers {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        Matchers {
            threads: Arc::new(Semaphore::new(cores.saturating_sub(1).max(1))),
            stopping: CancellationToken::new(),
        }
    }

    /// A budget of `REQUEST` from now, cancelled when it is dropped.
    pub fn request(&self) -> Budget {
        Budget::new(REQUEST, &self.stopping, Some(self.threads.clone()))
    }

    /// Stops every match in progress and refuses new ones (warren is stopping).
    pub fn stop(&self) {
        self.stopping.cancel();
    }
}

/// One request's or job's time for matching: a deadline, and a flag set when the budget is
/// dropped (the request's future with it) or its parent is cancelled.
pub struct Budget {
    allowed: Duration,
    deadline: Instant,
    cancel: CancellationToken,
    threads: Option<Arc<Semaphore>>,
    _cancel_on_drop: DropGuard,
}

impl Budget {
    /// `allowed` from now; stopped with `parent` (warren's shutdown, a job's cancel).
    pub fn new(allowed: Duration, parent: &CancellationToken, threads: Option<Arc<Semaphore>>) -> Budget {
        let cancel = parent.child_token();
        Budget {
            allowed,
            deadline: Instant::now() + allowed,
            _cancel_on_drop: cancel.clone().drop_guard(),
            cancel,
            threads,
        }
    }

    /// For a job: `JOB`, stopped with the job's cancel.
    pub fn job(cancel: &CancellationToken) -> Budget {
        Budget::new(JOB, cancel, None)
    }

    /// What work checks between two records, on whichever thread it runs.
    pub fn check(&self) -> Check {
        Check { deadline: self.deadline.into_std(), allowed: self.allowed, cancel: self.cancel.clone() }
    }

    /// Runs `work` on a blocking thread; `work` calls `Check::go_on` between two records. Answers
    /// at the deadline even when `work` is inside one long match: it stops at its next check.
    pub async fn run<T: Send + 'static>(
        &self,
        work: impl FnOnce(&Check) -> Result<T, Stopped> + Send + 'static,
    ) -> Result<T, Stopped> {
        let too_slow = Stopped::TooSlow(self.allowed);
        let permit = match &self.threads {
            Some(threads) => tokio::select! {
                permit = threads.clone().acquire_owned() => Some(permit.map_err(|_| Stopped::Cancelled)?),
                _ = tokio::time::sleep_until(self.deadline) => return Err(too_slow),
                _ = self.cancel.cancelled() => return Err(Stopped::Cancelled),
            },
            None => None,
        };
        let check = self.check();
        let cancel = self.cancel.clone();
        let matching = tokio::task::spawn_blocking(move || {
            // Held until the thread is done, not until the request stops waiting: the permits
            // count threads that use a core.
            let _permit = permit;
            work(&check)
        });
        tokio::select! {
            done = matching => done.unwrap_or(Err(Stopped::Cancelled)),
            _ = tokio::time::sleep_until(self.deadline) => {
                cancel.cancel();
                Err(too_slow)
            }
            _ = self.cancel.cancelled() => Err(Stopped::Cancelled),
        }
    }
}

/// What matching checks between two records.
pub struct Check {
    deadline: std::time::Instant,
    allowed: Duration,
    cancel: CancellationToken,
}

impl Check {
    pub fn go_on(&self) -> Result<(), Stopped> {
        if self.cancel.is_cancelled() {
            return Err(Stopped::Cancelled);
        }
        if std::time::Instant::now() >= self.deadline {
            return Err(Stopped::TooSlow(self.allowed));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};

    fn budget(allowed: Duration) -> Budget {
        Budget::new(allowed, &CancellationToken::new(), Some(Arc::new(Semaphore::new(1))))
    }

    #[tokio::test]
    async fn work_past_the_deadline_answers_too_slow_and_stops_at_its_next_check() {
        let stopped = Arc::new(AtomicBool::new(false));
        let seen = stopped.clone();
        let started = std::time::Instant::now();
        let answer = budget(Duration::from_millis(200))
            .run(move |check| loop {
                if let Err(e) = check.go_on() {
                    seen.store(true, Ordering::SeqCst);
                    return Err::<(), _>(e);
                }
                std::thread::sleep(Duration::from_millis(5));
            })
            .await;
        assert_eq!(answer, Err(Stopped::TooSlow(Duration::from_millis(200))));
        assert!(started.elapsed() < Duration::from_secs(1), "{:?}", started.elapsed());
        let until = std::time::Instant::now() + Duration::from_secs(5);
        while !stopped.load(Ordering::SeqCst) {
            assert!(std::time::Instant::now() < until, "the work went on");
            tokio::task::yield_now().await;
        }
    }

    #[tokio::test]
    async fn dropping_the_budget_stops_the_work() {
        let stopped = Arc::new(AtomicBool::new(false));
        let seen = stopped.clone();
        let budget = budget(Duration::from_secs(60));
        let (started, began) = tokio::sync::oneshot::channel();
        let run = budget.run(move |check| {
            let _ = started.send(());
            loop {
                if let Err(e) = check.go_on() {
                    seen.store(true, Ordering::SeqCst);
                    return Err::<(), _>(e);
                }
                std::thread::sleep(Duration::from_millis(5));
            }
        });
        // The request's future is dropped once its work is under way, as when the client leaves.
        tokio::select! {
            _ = run => panic!("the work ended on its own"),
            _ = began => {}
        }
        drop(budget);
        let until = std::time::Instant::now() + Duration::from_secs(5);
        while !stopped.load(Ordering::SeqCst) {
            assert!(std::time::Instant::now() < until, "the work went on after the request was dropped");
            tokio::task::yield_now().await;
        }
    }

    #[tokio::test]
    async fn stopping_warren_stops_matching() {
        let matchers = Matchers::new();
        let budget = matchers.request();
        matchers.stop();
        assert_eq!(budget.run(|check| check.go_on()).await, Err(Stopped::Cancelled));
    }
}
