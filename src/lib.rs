//! warren: a web dashboard for RabbitMQ. `main.rs` parses the command line; everything else is
//! here so that tests and benchmarks can start the same server.

pub mod alerts;
pub mod audit;
pub mod auth;
pub mod browse;
pub mod config;
pub mod demo;
pub mod dlq;
pub mod history;
pub mod management;
pub mod metrics;
pub mod moves;
pub mod poller;
pub mod prometheus;
pub mod shovel;
pub mod state;
pub mod topology;
pub mod web;

use std::collections::HashMap;
use std::future::Future;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::config::Config;
use crate::state::AppState;

/// How long background loops get to finish after the server stopped.
const SHUTDOWN_DEADLINE: Duration = Duration::from_secs(10);

/// How often the retention cleanup runs.
const RETENTION_EVERY: Duration = Duration::from_secs(3600);

/// Opens the database and builds the shared state (tests call this too).
pub async fn build_state(config: Config) -> anyhow::Result<AppState> {
    let db = history::open(&config.database)
        .await
        .map_err(|e| anyhow::anyhow!("cannot open database {}: {e}", config.database.display()))?;
    let mut ids = HashMap::new();
    for broker in &config.brokers {
        ids.insert(broker.name.clone(), history::broker_id(&db, &broker.name).await?);
    }
    Ok(AppState::new(config, db, ids))
}

/// Runs warren on `listener` until `shutdown` completes: one poller per broker, the retention
/// cleanup, and the web server. Shutdown is ordered: stop accepting requests, cancel the loops,
/// wait for them with a deadline, close the database.
pub async fn run(
    config: Config,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let state = build_state(config).await?;
    let interrupted = audit::mark_interrupted(&state.db).await?;
    if interrupted > 0 {
        tracing::warn!(interrupted, "actions of a previous run did not finish; see the audit log");
    }
    let cancel = CancellationToken::new();
    let tracker = TaskTracker::new();

    for broker in state.config.brokers.iter().cloned() {
        let id = state.broker_ids[&broker.name];
        let poller = poller::Poller::new(broker, state.db.clone(), state.live.clone(), id).await?;
        tracker.spawn(poller.run(cancel.child_token()));
    }
    tracker.spawn(retention_loop(state.clone(), cancel.child_token()));
    tracker.spawn(alerts::runner::run(state.clone(), cancel.child_token()));

    let addr = listener.local_addr()?;
    tracing::info!(%addr, brokers = state.config.brokers.len(), "warren is serving on http://{addr}");
    let app = web::router(state.clone());
    let serve_cancel = cancel.clone();
    let served = axum::serve(listener, app)
        .with_graceful_shutdown(async move {
            tokio::select! {
                _ = shutdown => {}
                _ = serve_cancel.cancelled() => {}
            }
        })
        .await;

    // Moves first: each hands back the messages it holds and records how it ended, while the
    // database is still open.
    state.jobs.shutdown(SHUTDOWN_DEADLINE).await;
    cancel.cancel();
    tracker.close();
    if tokio::time::timeout(SHUTDOWN_DEADLINE, tracker.wait()).await.is_err() {
        tracing::warn!("background tasks did not stop within {SHUTDOWN_DEADLINE:?}");
    }
    // After the alert loop: what it queued is sent or logged as dropped before the database closes.
    state.notifier.shutdown(SHUTDOWN_DEADLINE).await;
    state.db.close().await;
    served.map_err(Into::into)
}

/// Deletes samples older than the retention window, hourly, starting at once.
async fn retention_loop(state: AppState, cancel: CancellationToken) {
    loop {
        let cutoff = chrono::Utc::now().timestamp() - state.config.retention.as_secs() as i64;
        match history::prune(&state.db, cutoff).await {
            Ok(removed) => tracing::debug!(removed, "retention cleanup done"),
            Err(e) => tracing::error!(error = %e, "retention cleanup failed; will retry"),
        }
        // Alert history and the delivery log follow the same window. The audit log is kept:
        // it is the record of who changed what on the brokers.
        let pruned = async {
            let history = alerts::store::prune_history(&state.db, cutoff).await?;
            let deliveries = alerts::notify::prune(&state.db, cutoff).await?;
            Ok::<_, sqlx::Error>((history, deliveries))
        };
        match pruned.await {
            Ok((history, deliveries)) => tracing::debug!(history, deliveries, "alert history cleanup done"),
            Err(e) => tracing::error!(error = %e, "alert history cleanup failed; will retry"),
        }
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tokio::time::sleep(RETENTION_EVERY) => {}
        }
    }
}
