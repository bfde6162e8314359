//! warren: a web dashboard for RabbitMQ. `main.rs` parses the command line; everything else is
//! here so that tests and benchmarks can start the same server.

/// The commit warren was built from (`WARREN_COMMIT` at build time), or "unknown".
pub const COMMIT: &str = env!("WARREN_BUILD_COMMIT");

/// `--version` and `warren version`: the version, the commit and its date (issue 34, case 9).
pub const VERSION_LINE: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("WARREN_BUILD_COMMIT"),
    ", committed ",
    env!("WARREN_BUILD_COMMIT_DATE"),
    ")"
);

pub mod advisor;
pub mod alerts;
pub mod audit;
pub mod auth;
pub mod broker;
pub mod config;
pub mod demo;
pub mod dlq;
pub mod history;
pub mod live;
pub mod memory;
pub mod metrics;
pub mod numbers;
pub mod poller;
pub mod replicas;
pub mod state;
pub mod storage;
pub mod times;
pub mod web;

pub use state::Wings;

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

/// How long open requests get to finish once the shutdown began; then their connections close.
const HTTP_DRAIN: Duration = Duration::from_secs(5);

/// How often the roll-up step runs: minute buckets should be ready soon after they end.
const ROLLUP_EVERY: Duration = Duration::from_secs(60);

/// How often the retention cleanup runs.
const RETENTION_EVERY: Duration = Duration::from_secs(3600);

/// Opens what warren keeps: the SQLite file, or the PostgreSQL database `database_url` names,
/// its schema brought up to date under sqlx's advisory lock (replicas starting together migrate
/// one at a time).
pub async fn open_store(config: &Config) -> anyhow::Result<storage::Store> {
    match &config.database_url {
        // sqlx's errors name the host and database, never the password.
        Some(url) => match storage::postgres::open(url.expose()).await {
            Ok(pool) => Ok(storage::postgres::store(pool)),
            Err(e) => Err(anyhow::anyhow!("cannot open the PostgreSQL database of database_url: {e}")),
        },
        None => match history::open(&config.database).await {
            Ok(pool) => Ok(storage::sqlite::store(pool)),
            Err(e) => Err(anyhow::anyhow!("cannot open database {}: {e}", config.database.display())),
        },
    }
}

/// Opens the database and builds the shared state (tests call this too).
pub async fn build_state(config: Config) -> anyhow::Result<AppState> {
    let wings = Wings::read(&config)?;
    let store = open_store(&config).await?;
    let mut ids = HashMap::new();
    for broker in &config.brokers {
        ids.insert(broker.name.clone(), history::broker_id(&store, &broker.name).await?);
    }
    let state = AppState::new(config, wings, store, ids);
    state.gate.use_stored_csrf_key(&state.store).await?;
    Ok(state)
}

/// Runs warren on `listener` until `shutdown` completes: one poller per broker, the history
/// roll-up and retention cleanup, and the web server. Shutdown is ordered and bounded whatever
/// clients do: the listener closes, moves hand back, the loops stop, intake and the notifier
/// stop (each with a deadline), open requests get `HTTP_DRAIN`, then the database closes.
pub async fn run(
    config: Config,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let state = build_state(config).await?;
    check_access(&state, listener.local_addr()?).await?;
    // Whatever the configuration says now: a record left claimed would be stranded.
    let (interrupted, reclaimed) = dlq::recover_at_start(&state.store, state.replica.id()).await?;
    dlq::custody::fill_error_groups(&state.store).await?;
    // The browser's snapshots as they were shown before the restart (outdated ones marked so).
    let snapshots = dlq::browse::load(&state.store, &state.snapshots).await?;
    tracing::debug!(snapshots, "stored snapshots loaded");
    if reclaimed > 0 {
        tracing::warn!(records = reclaimed, "custody records claimed by an interrupted replay are held again");
    }
    if interrupted > 0 {
        tracing::warn!(interrupted, "actions of a previous run did not finish; see the audit log");
    }
    let cancel = CancellationToken::new();
    let tracker = TaskTracker::new();
    // The first round before the pollers start, so that the first poll need not wait for it.
    // The leases are let go last, after the work under them stopped.
    if let Err(e) = state.replica.round().await {
        tracing::warn!(error = %e, "leases: the first round failed; the next is in a third of the lease time");
    }
    let leases_cancel = CancellationToken::new();
    let leases = tokio::spawn(state.replica.clone().run(leases_cancel.clone()));

    for broker in state.config.brokers.iter().cloned() {
        tracker.spawn(broker_loop(state.clone(), broker, cancel.child_token()));
    }
    tracker.spawn(retention_loop(state.clone(), cancel.child_token()));
    tracker.spawn(recovery_loop(state.clone(), cancel.child_token()));
    tracker.spawn(storage_loop(state.clone(), cancel.child_token()));
    tracker.spawn(alerts::runner::run(state.alerts(), cancel.child_token()));
    tracker.spawn(custody_loop(state.clone(), cancel.child_token()));

    let addr = listener.local_addr()?;
    tracing::info!(%addr, brokers = state.config.brokers.len(), "warren is serving on http://{addr}");
    let app = web::router(state.clone());
    let matchers = state.matchers.clone();
    // The peer address decides whether anonymous access (loopback) or a proxy header is accepted.
    let app = app.into_make_service_with_connect_info::<std::net::SocketAddr>();
    // The server runs as a task of its own so that a client cannot hold up the shutdown: a
    // graceful shutdown waits for every open request, and one that sent half its header kept
    // warren running for as long as it kept the connection (70 s measured, issue 36).
    let stopping = CancellationToken::new();
    let graceful = stopping.clone();
    let mut server = tokio::spawn(async move {
        axum::serve(listener, app)
            .with_graceful_shutdown(async move {
                graceful.cancelled().await;
                // Requests matching a filter answer now, rather than hold up the shutdown.
                matchers.stop();
            })
            .await
    });
    let ended_early = tokio::select! {
        _ = shutdown => None,
        _ = cancel.cancelled() => None,
        ended = &mut server => Some(ended),
    };
    let drain_until = tokio::time::Instant::now() + HTTP_DRAIN;
    // The listener closes; open requests may finish while the rest stops.
    stopping.cancel();

    // Moves first: each hands back the messages it holds and records how it ended, while the
    // database is still open.
    state.jobs.shutdown(SHUTDOWN_DEADLINE).await;
    cancel.cancel();
    tracker.close();
    if tokio::time::timeout(SHUTDOWN_DEADLINE, tracker.wait()).await.is_err() {
        tracing::warn!("background tasks did not stop within {SHUTDOWN_DEADLINE:?}");
    }
    // Intake hands back what it holds unacked while the database is still open.
    state.custody.shutdown(SHUTDOWN_DEADLINE).await;
    // Nothing works under the leases any more: the other replicas may take them at once.
    leases_cancel.cancel();
    if tokio::time::timeout(SHUTDOWN_DEADLINE, leases).await.is_err() {
        tracing::warn!("leases were not let go within {SHUTDOWN_DEADLINE:?}; they run out");
    }
    // After the alert loop, before the database closes: an attempt in flight is abandoned and
    // logged; what waits in the outbox stays there for the next start.
    state.notifier.shutdown(SHUTDOWN_DEADLINE).await;
    let served = match ended_early {
        Some(ended) => ended,
        None => match tokio::time::timeout_at(drain_until, &mut server).await {
            Ok(ended) => ended,
            Err(_) => {
                server.abort();
                tracing::warn!("requests still open {HTTP_DRAIN:?} after the shutdown began were cut off");
                Ok(Ok(()))
            }
        },
    };
    state.store.close().await;
    served?.map_err(Into::into)
}

/// How often a replica checks whether it holds a broker's lease (then it polls the broker), and
/// shows what the holder wrote while it does not.
const LEASE_CHECK_EVERY: Duration = Duration::from_secs(1);

/// One broker's work on this replica: polling it while this replica holds its lease, and
/// otherwise showing what the replica that holds it wrote to the database, once per poll
/// interval. A poller starts afresh from the database at each takeover: what it tracks in
/// memory (counters, listings) is of its own polls.
async fn broker_loop(state: AppState, broker: config::BrokerConfig, cancel: CancellationToken) {
    let work = replicas::broker_work(&broker.name);
    let id = state.broker_ids[&broker.name];
    let mut followed_at: Option<tokio::time::Instant> = None;
    // When the listings shown were read, as the holder wrote them.
    let mut listings = poller::listings::ListingTimes::default();
    loop {
        if state.replica.held(&work).is_some() {
            state.live.update(&broker.name, |b| b.status.polled_by = None);
            match start_poller(&state, &broker, id).await {
                Ok(poller) => poller.run(cancel.child_token()).await,
                Err(e) => tracing::error!(broker = broker.name, error = %e, "cannot start polling; will retry"),
            }
            followed_at = None;
            listings = Default::default();
        } else if followed_at.is_none_or(|at| at.elapsed() >= broker.poll_interval) {
            followed_at = Some(tokio::time::Instant::now());
            if let Err(e) = follow(&state, &broker, id, &mut listings).await {
                tracing::warn!(broker = broker.name, error = %e, "cannot read what the replica that polls it wrote");
            }
        }
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tokio::time::sleep(LEASE_CHECK_EVERY) => {}
        }
    }
}

async fn start_poller(state: &AppState, broker: &config::BrokerConfig, id: i64) -> Result<poller::Poller, sqlx::Error> {
    poller::Poller::new(broker.clone(), state.store.clone(), state.live.clone(), id)
        .await?
        .report_storage_to(state.storage.clone())
        .watch_dead_letter_work(
            state.snapshots.clone(),
            state.jobs.clone(),
            state.config.custody.clone(),
            state.custody.clone(),
        )
        .under_lease(state.replica.clone())
        .show_last_known()
        .await
}

/// Shows what the replica that holds `broker`'s lease wrote: recent (within three poll intervals,
/// and at least 30 s) reads as up; older says since when nothing came.
async fn follow(
    state: &AppState,
    broker: &config::BrokerConfig,
    id: i64,
    listings: &mut poller::listings::ListingTimes,
) -> Result<(), sqlx::Error> {
    let work = replicas::broker_work(&broker.name);
    let now_ms = state.store.database_now().await?;
    let holder = state.store.leases().await?.into_iter().find(|l| l.name == work && l.expires_at > now_ms);
    let polled_by = match holder {
        Some(lease) => lease.holder,
        None => "none holds its lease now; one takes it within a lease time".into(),
    };
    let as_of = poller::restore::follow(&state.store, &state.live, broker, id, &state.config.custody).await?;
    poller::listings::follow(&state.store, &state.live, &broker.name, id, listings).await?;
    let recent = (broker.poll_interval * 3).max(Duration::from_secs(30));
    let fresh = as_of.is_some_and(|t| (chrono::Utc::now() - t).to_std().unwrap_or_default() <= recent);
    state.live.update(&broker.name, |b| {
        let s = &mut b.status;
        s.up = as_of.map(|_| fresh).filter(|fresh| *fresh);
        s.error = None;
        s.restored_from = None;
        s.last_success = as_of;
        s.last_attempt = as_of;
        s.down_since = None;
        s.consecutive_failures = 0;
        s.polled_by = Some(polled_by);
    });
    Ok(())
}

/// How often new queues are looked for that a `[[custody]]` rule names.
const CUSTODY_SCAN_EVERY: Duration = Duration::from_secs(2);

/// Starts custody intake for every queue a `[[custody]]` rule names, as the polls find them,
/// and again a while after one stopped (`dlq::custody::start_intakes`). Intake runs on the
/// replica that holds the broker's lease, and stops when the lease goes: what it held unacked
/// goes back to the queue, for the next holder's intake (it acks only what it committed).
async fn custody_loop(state: AppState, cancel: CancellationToken) {
    let mut intakes: HashMap<String, CancellationToken> = HashMap::new();
    loop {
        for broker in &state.config.brokers {
            if state.replica.held(&replicas::broker_work(&broker.name)).is_none() {
                if let Some(stop) = intakes.remove(&broker.name) {
                    stop.cancel();
                }
                continue;
            }
            let cancel = intakes.entry(broker.name.clone()).or_insert_with(|| cancel.child_token()).clone();
            let switched = match dlq::custody::switches(&state.store, &broker.name).await {
                Ok(switched) => switched,
                Err(e) => {
                    tracing::warn!(error = %e, "reading custody switches");
                    continue;
                }
            };
            // Without rules or switches there is nothing to look for among the queues.
            if state.config.custody.is_empty() && !switched.values().any(|s| *s == dlq::custody::Switch::On) {
                continue;
            }
            let Some(live) = state.live.broker(&broker.name) else { continue };
            let queues = live.queues.iter().filter(|q| !q.deleted).map(|q| (q.vhost.to_string(), q.name.to_string()));
            let rules = &state.config.custody;
            dlq::custody::start_intakes(&state.custody, rules, &switched, broker, queues, &cancel);
        }
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tokio::time::sleep(CUSTODY_SCAN_EVERY) => {}
        }
    }
}

/// Cleans up after replicas that died (`dlq::recover_dead_replicas`): their moves and replays
/// marked interrupted, their custody claims held again, by the housekeeping's holder at every
/// lease round, so within about a lease time of a replica's last heartbeat.
async fn recovery_loop(state: AppState, cancel: CancellationToken) {
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tokio::time::sleep(state.config.lease_time / 3) => {}
        }
        if state.replica.held(replicas::HOUSEKEEPING).is_none() {
            continue;
        }
        match dlq::recover_dead_replicas(&state.store, state.replica.id()).await {
            Ok((0, 0)) => {}
            Ok((interrupted, reclaimed)) => tracing::warn!(
                interrupted,
                reclaimed,
                "a replica died: its actions are marked interrupted and its claimed custody records held again"
            ),
            Err(e) => tracing::warn!(error = %e, "recovering what dead replicas left; will retry"),
        }
    }
}

/// How often the database's health is checked when nothing else writes (`history::storage`).
const STORAGE_CHECK_EVERY: Duration = Duration::from_secs(10);

/// Checks that the database can still be written, so that every page warns within seconds of a
/// full disk or a deleted file, even while no poll or action writes.
async fn storage_loop(state: AppState, cancel: CancellationToken) {
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tokio::time::sleep(STORAGE_CHECK_EVERY) => {}
        }
        // A failure is recorded and logged by the check; pages and /readyz show it.
        let _ = state.storage.check(&*state.store).await;
    }
}

/// Refuses to serve a non-loopback address without authentication, and says how to set it up
/// when there is none.
async fn check_access(state: &AppState, listen: std::net::SocketAddr) -> anyhow::Result<()> {
    let users = auth::count_users(&state.store).await?;
    let proxy = state.config.auth.proxy.is_some();
    auth::check_bind(listen, users > 0 || proxy).map_err(|message| anyhow::anyhow!(message))?;
    if users == 0 && !proxy {
        tracing::warn!(
            "no users: login is off and warren answers only requests from this machine. To require logins, \
             create an admin with `warren user add NAME --role admin` (the password is read from stdin)"
        );
    }
    Ok(())
}

/// Rolls up history every minute and deletes what fell out of its window every hour, starting
/// at once. The roll-up checks `cancel` between its transactions, so a long catch-up (the first
/// start on an existing database) does not hold up shutdown.
async fn retention_loop(state: AppState, cancel: CancellationToken) {
    let broker_ids: Vec<i64> = state.broker_ids.values().copied().collect();
    let windows = history::rollup::Windows::from_config(&state.config);
    let mut last_cleanup: Option<tokio::time::Instant> = None;
    loop {
        // Once for all replicas: the one that holds the lease.
        while state.replica.held(replicas::HOUSEKEEPING).is_none() {
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tokio::time::sleep(LEASE_CHECK_EVERY) => {}
            }
        }
        let now = chrono::Utc::now().timestamp();
        for &id in &broker_ids {
            match history::rollup::roll_up(&state.store, id, now, &cancel).await {
                Ok(buckets) => tracing::debug!(broker_id = id, buckets, "history roll-up done"),
                Err(e) => tracing::error!(broker_id = id, error = %e, "history roll-up failed; will retry"),
            }
        }
        if cancel.is_cancelled() {
            return;
        }
        if last_cleanup.is_none_or(|at| at.elapsed() >= RETENTION_EVERY) {
            last_cleanup = Some(tokio::time::Instant::now());
            retention_cleanup(&state, &broker_ids, windows, now).await;
        }
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tokio::time::sleep(ROLLUP_EVERY) => {}
        }
    }
}

async fn retention_cleanup(state: &AppState, broker_ids: &[i64], windows: history::rollup::Windows, now: i64) {
    match history::rollup::prune(&state.store, now, windows, broker_ids).await {
        Ok(removed) => tracing::debug!(removed, "history cleanup done"),
        Err(e) => tracing::error!(error = %e, "history cleanup failed; will retry"),
    }
    match history::nodes::prune(&state.store, now, windows).await {
        Ok(removed) => tracing::debug!(removed, "node history thinned"),
        Err(e) => tracing::error!(error = %e, "node history cleanup failed; will retry"),
    }
    // Alert history and the delivery log follow the longest window. The audit log is kept: it
    // is the record of who changed what on the brokers.
    let cutoff = now - state.config.retention.as_secs() as i64;
    let pruned = async {
        let history = alerts::store::prune_history(&state.store, cutoff).await?;
        let deliveries = alerts::notify::prune(&state.store, cutoff).await?;
        Ok::<_, sqlx::Error>((history, deliveries))
    };
    match pruned.await {
        Ok((history, deliveries)) => tracing::debug!(history, deliveries, "alert history cleanup done"),
        Err(e) => tracing::error!(error = %e, "alert history cleanup failed; will retry"),
    }
    // Replayed custody records: kept as long as the rest of the history, so "what did we replay
    // last Tuesday" has an answer.
    match dlq::custody::prune_replayed(&state.store, cutoff).await {
        Ok(records) => tracing::debug!(records, "replayed custody records removed"),
        Err(e) => tracing::error!(error = %e, "custody cleanup failed; will retry"),
    }
    // Expired sessions are refused when presented; this only keeps the table small.
    match auth::purge_expired(&state.store, state.config.auth.session_idle, now).await {
        Ok(sessions) => tracing::debug!(sessions, "expired sessions removed"),
        Err(e) => tracing::error!(error = %e, "session cleanup failed; will retry"),
    }
}
