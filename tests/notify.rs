//! Notifications against real receivers on loopback: an HTTP server the test starts (answering
//! 200, 500, 404, or never), a tiny SMTP server, and a real SQLite file for the outbox and the
//! delivery log. No RabbitMQ is needed. (tests/outbox.rs kills a whole warren mid-retry.)

mod common;

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::http::{StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::{Json, Router};
use chrono::{SubsecRound, Utc};
use common::wait_for;
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use warren::alerts::notify::{
    pending_deliveries, recent_deliveries, DeliveryError, DeliveryPolicy, DeliveryRecord, Dispatcher, Notification,
    NotificationChannel, NotificationKind, Outcome,
};
use warren::alerts::{AlertKey, Comparator, Metric, Rule, Scope, Severity};
use warren::storage::Store;

/// In every receiver URL: it must never show up in the log table, the logs or `Debug`.
const TOKEN: &str = "T0KEN-s3cr3t-4711";

/// The one process on the test's database, as its claims on outbox rows name it.
const WARREN: &str = "this warren";

/// One request the HTTP receiver got.
#[derive(Debug, Clone)]
struct Received {
    path: String,
    body: Value,
    at: Instant,
}

/// An HTTP receiver on loopback. The first path segment says how it answers: `ok` 200,
/// `fail` 500 (echoing the path, as some proxies do), `gone` 404, `hang` never.
#[derive(Clone, Default)]
struct Receiver {
    base: String,
    requests: Arc<Mutex<Vec<Received>>>,
}

impl Receiver {
    async fn start() -> Receiver {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let receiver = Receiver { base: format!("http://{}", listener.local_addr().unwrap()), ..Receiver::default() };
        let app = Router::new().fallback(answer).with_state(receiver.clone());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        receiver
    }

    fn url(&self, behaviour: &str) -> String {
        format!("{}/{behaviour}/services/{TOKEN}", self.base)
    }

    fn requests(&self, behaviour: &str) -> Vec<Received> {
        let prefix = format!("/{behaviour}/");
        self.requests.lock().unwrap().iter().filter(|r| r.path.starts_with(&prefix)).cloned().collect()
    }
}

async fn answer(State(receiver): State<Receiver>, uri: Uri, Json(body): Json<Value>) -> Response {
    let path = uri.path().to_string();
    receiver.requests.lock().unwrap().push(Received { path: path.clone(), body, at: Instant::now() });
    match path.split('/').nth(1) {
        Some("ok") => StatusCode::OK.into_response(),
        Some("fail") => (StatusCode::INTERNAL_SERVER_ERROR, format!("no upstream for {path}")).into_response(),
        Some("gone") => (StatusCode::NOT_FOUND, "no_service").into_response(),
        _ => std::future::pending().await,
    }
}

fn channel(id: &str, kind: &str, url: &str) -> NotificationChannel {
    let channel: NotificationChannel =
        toml::from_str(&format!("id = \"{id}\"\nname = \"Channel {id}\"\ntype = \"{kind}\"\nurl = \"{url}\"")).unwrap();
    assert!(channel.validate().is_empty(), "{:?}", channel.validate());
    channel
}

fn firing() -> Notification {
    let rule = Rule {
        id: "orders-backlog".to_string(),
        name: "Orders backlog".to_string(),
        scope: Scope::default(),
        metric: Metric::Ready,
        comparator: Some(Comparator::Gt),
        threshold: Some(10.0),
        for_secs: 0,
        keep_firing_for_secs: 0,
        severity: Severity::Critical,
        description: None,
    };
    Notification::for_rule(
        NotificationKind::Firing,
        &rule,
        AlertKey::queue("main", "/", "orders"),
        Some(37.0),
        Utc::now(),
        None,
    )
}

/// A database of its own in a temporary directory, kept alive with it.
async fn database() -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().unwrap();
    let db = warren::history::open(&dir.path().join("warren.db")).await.unwrap();
    (dir, warren::storage::sqlite::store(db))
}

fn fast_policy() -> DeliveryPolicy {
    DeliveryPolicy {
        max_attempts: 3,
        first_backoff: Duration::from_millis(200),
        max_backoff: Duration::from_secs(1),
        attempt_timeout: Duration::from_secs(5),
        queue_capacity: 10,
        unknown_channel_grace: Duration::ZERO,
    }
}

/// Waits until the delivery log holds rows of `channel` that satisfy `done`; returns them oldest first.
async fn log_rows(
    db: &Store,
    channel: &str,
    what: &str,
    done: impl Fn(&[DeliveryRecord]) -> bool,
) -> Vec<DeliveryRecord> {
    wait_for(what, Duration::from_secs(10), || async {
        let mut rows = recent_deliveries(db, 100).await.map_err(|e| e.to_string())?;
        rows.retain(|r| r.channel_id == channel);
        rows.reverse();
        if done(&rows) {
            Ok(rows)
        } else {
            Err(format!("{rows:?}"))
        }
    })
    .await
}

fn assert_no_token(text: &str) {
    assert!(!text.contains(TOKEN) && !text.contains("/services/"), "a secret URL leaked: {text}");
}

/// Everything `tracing` writes while the guard lives, on this thread (the tests that use it
/// run on the current-thread runtime, so the dispatcher's tasks log here too).
#[derive(Clone, Default)]
struct CapturedLogs(Arc<Mutex<Vec<u8>>>);

impl Write for CapturedLogs {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl CapturedLogs {
    fn start() -> (CapturedLogs, tracing::subscriber::DefaultGuard) {
        let logs = CapturedLogs::default();
        let writer = logs.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::DEBUG)
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .finish();
        (logs, tracing::subscriber::set_default(subscriber))
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

#[tokio::test]
async fn a_webhook_gets_the_documented_body_and_the_log_its_status() {
    let receiver = Receiver::start().await;
    let (_dir, db) = database().await;
    let dispatcher = Dispatcher::new(reqwest::Client::new(), db.clone(), fast_policy(), WARREN.into());
    dispatcher.set_channels(vec![channel("hook", "webhook", &receiver.url("ok"))]);

    assert_eq!(dispatcher.notify(&firing()).await.unwrap(), 1);

    let rows = log_rows(&db, "hook", "a sent row", |rows| !rows.is_empty()).await;
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!((rows[0].outcome, rows[0].attempt, rows[0].http_status), (Outcome::Sent, 1, Some(200)));
    assert_eq!(rows[0].kind, NotificationKind::Firing);
    assert_eq!(rows[0].rule_id.as_deref(), Some("orders-backlog"));
    assert_eq!(rows[0].alert_key, Some(AlertKey::queue("main", "/", "orders")));
    assert_eq!(rows[0].channel_name, "Channel hook");

    let requests = receiver.requests("ok");
    assert_eq!(requests.len(), 1);
    let body = &requests[0].body;
    assert_eq!(body["version"], 1);
    assert_eq!(body["kind"], "firing");
    assert_eq!(body["rule"]["id"], "orders-backlog");
    assert_eq!(body["rule"]["severity"], "critical");
    assert_eq!(body["rule"]["metric"], "ready");
    assert_eq!(body["rule"]["comparator"], ">");
    assert_eq!(body["rule"]["threshold"], 10.0);
    assert_eq!(body["alert"], serde_json::json!({"broker": "main", "vhost": "/", "queue": "orders", "value": 37.0}));
    assert!(body["summary"].as_str().unwrap().starts_with("[FIRING] Orders backlog (critical)"), "{body}");
    assert!(body["at"].as_str().unwrap().parse::<chrono::DateTime<Utc>>().is_ok(), "{body}");
    assert!(body["note"].is_null() && body["dashboard_url"].is_null(), "{body}");
    assert_eq!(pending_deliveries(&db).await.unwrap(), [], "a delivered notification leaves the outbox");

    assert!(dispatcher.shutdown(Duration::from_secs(5)).await);
}

#[tokio::test]
async fn a_500_is_retried_with_backoff_then_given_up_and_every_attempt_logged_without_the_url() {
    let (logs, _guard) = CapturedLogs::start();
    let receiver = Receiver::start().await;
    let (_dir, db) = database().await;
    let dispatcher = Dispatcher::new(reqwest::Client::new(), db.clone(), fast_policy(), WARREN.into());
    let failing = channel("failing", "webhook", &receiver.url("fail"));
    dispatcher.set_channels(vec![failing.clone(), channel("gone", "slack", &receiver.url("gone"))]);

    assert_eq!(dispatcher.notify(&firing()).await.unwrap(), 2);

    let rows = log_rows(&db, "failing", "three attempts", |rows| rows.len() >= 3).await;
    let attempts: Vec<_> = rows.iter().map(|r| (r.attempt, r.outcome, r.http_status)).collect();
    assert_eq!(
        attempts,
        [(1, Outcome::Failed, Some(500)), (2, Outcome::Failed, Some(500)), (3, Outcome::GaveUp, Some(500))]
    );
    for row in &rows {
        let error = row.error.as_deref().unwrap();
        assert!(error.starts_with("the receiver answered HTTP 500: no upstream for "), "{error}");
        assert_no_token(error);
    }
    // Waits of 200 ms, then 400 ms, between the attempts the receiver saw.
    let requests = receiver.requests("fail");
    assert_eq!(requests.len(), 3);
    let gaps: Vec<Duration> = requests.windows(2).map(|w| w[1].at - w[0].at).collect();
    assert!(gaps[0] >= Duration::from_millis(200) && gaps[1] >= Duration::from_millis(400), "{gaps:?}");
    assert!(gaps[1] > gaps[0], "the backoff grows: {gaps:?}");

    // A 404 says the hook is gone: retrying cannot help, so one attempt only.
    let rows = log_rows(&db, "gone", "one attempt", |rows| !rows.is_empty()).await;
    assert_eq!((rows[0].attempt, rows[0].outcome, rows[0].http_status), (1, Outcome::GaveUp, Some(404)));
    assert_eq!(rows[0].error.as_deref(), Some("the receiver answered HTTP 404: no_service"));
    assert_eq!(receiver.requests("gone").len(), 1);
    assert_eq!(pending_deliveries(&db).await.unwrap(), [], "given up, the notifications leave the outbox");

    assert!(dispatcher.shutdown(Duration::from_secs(5)).await);
    let logs = logs.text();
    assert!(logs.contains("notification attempt failed; giving up"), "{logs}");
    assert!(logs.contains(&format!("{}/…", receiver.base)), "logs name the channel's masked target: {logs}");
    assert_no_token(&logs);
    assert_no_token(&format!("{failing:?} {:?} {dispatcher:?}", dispatcher.channels()));
    assert_no_token(&serde_json::to_string(&failing.view()).unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hanging_webhook_delays_neither_the_caller_nor_another_channel() {
    let receiver = Receiver::start().await;
    let (_dir, db) = database().await;
    let policy = DeliveryPolicy { queue_capacity: 2, attempt_timeout: Duration::from_secs(30), ..fast_policy() };
    let dispatcher = Dispatcher::new(reqwest::Client::new(), db.clone(), policy, WARREN.into());
    dispatcher.set_channels(vec![
        channel("hanging", "webhook", &receiver.url("hang")),
        channel("fine", "slack", &receiver.url("ok")),
    ]);

    assert_eq!(dispatcher.notify(&firing()).await.unwrap(), 2);
    wait_for("the first attempt to reach the hanging receiver", Duration::from_secs(5), || async {
        match receiver.requests("hang").len() {
            0 => Err("no request yet".to_string()),
            _ => Ok(()),
        }
    })
    .await;

    // The hanging channel holds one notification in flight and takes one more: the one in
    // flight is a row of the outbox too and counts toward the capacity of 2 (an in-memory
    // queue took two more besides it). Each new one reaches the other channel at once, and
    // handing it over never waits.
    let mut queued = Vec::new();
    for expected in 2..=6 {
        let started = Instant::now();
        queued.push(dispatcher.notify(&firing()).await.unwrap());
        assert!(started.elapsed() < Duration::from_millis(100), "notify blocked for {:?}", started.elapsed());
        wait_for("the other channel's message", Duration::from_secs(2), || async {
            let sent = recent_deliveries(&db, 100).await.unwrap().iter().filter(|r| r.channel_id == "fine").count();
            match (receiver.requests("ok").len(), sent) {
                (received, sent) if received == expected && sent == expected => Ok(()),
                (received, sent) => Err(format!("{received} received, {sent} logged as sent, {expected} expected")),
            }
        })
        .await;
    }
    assert_eq!(queued, [2, 1, 1, 1, 1], "channels that took each notification");

    let rows = log_rows(&db, "hanging", "dropped rows for the full queue", |rows| rows.len() >= 4).await;
    assert_eq!(rows.len(), 4, "{rows:?}");
    for row in &rows {
        assert_eq!((row.outcome, row.attempt), (Outcome::Dropped, 1));
        assert!(row.error.as_deref().unwrap().contains("queue is full"), "{row:?}");
    }
    assert_eq!(receiver.requests("hang").len(), 1, "one attempt at a time per channel");

    // Shutdown abandons the hanging attempt and logs it; the two notifications stay in the
    // outbox for the next start (they used to be logged as dropped, and lost).
    assert!(dispatcher.shutdown(Duration::from_secs(5)).await, "the dispatcher did not stop");
    let rows = recent_deliveries(&db, 100).await.unwrap();
    let errors: Vec<&str> =
        rows.iter().filter(|r| r.channel_id == "hanging").map(|r| r.error.as_deref().unwrap()).collect();
    assert_eq!(errors.len(), 5, "{rows:?}");
    assert_eq!(errors.iter().filter(|e| e.contains("during the attempt")).count(), 1, "{errors:?}");
    let pending = pending_deliveries(&db).await.unwrap();
    let left: Vec<_> = pending.iter().map(|p| (p.channel_id.as_str(), p.attempts)).collect();
    assert_eq!(left, [("hanging", 0), ("hanging", 0)], "the abandoned attempt is not counted");
}

#[tokio::test]
async fn a_pending_delivery_outlives_its_dispatcher_and_keeps_its_attempt_count() {
    let receiver = Receiver::start().await;
    let (_dir, db) = database().await;
    // Waits of 500 ms and 1 s: time enough to stop the first dispatcher between two attempts.
    let policy = DeliveryPolicy { max_attempts: 5, first_backoff: Duration::from_millis(500), ..fast_policy() };
    let first = Dispatcher::new(reqwest::Client::new(), db.clone(), policy.clone(), "first warren".into());
    first.set_channels(vec![channel("flaky", "webhook", &receiver.url("fail"))]);
    let mut n = firing();
    n.note = Some("a note".to_string());
    n.dashboard_url = Some("http://warren.test/queues/main/%2F/orders".to_string());
    assert_eq!(first.notify(&n).await.unwrap(), 1);
    log_rows(&db, "flaky", "two failed attempts", |rows| rows.len() >= 2).await;
    assert!(first.shutdown(Duration::from_secs(5)).await);
    drop(first);
    let pending = pending_deliveries(&db).await.unwrap();
    assert_eq!(pending.len(), 1, "{pending:?}");
    assert_eq!((pending[0].channel_id.as_str(), pending[0].attempts), ("flaky", 2));
    assert_eq!(pending[0].notification, n, "stored exactly as planned");

    // The same channel id, its receiver fixed: a new dispatcher on the same database (as after
    // a restart) delivers it as the third attempt.
    let second = Dispatcher::new(reqwest::Client::new(), db.clone(), policy, "second warren".into());
    second.set_channels(vec![channel("flaky", "webhook", &receiver.url("ok"))]);
    let rows = log_rows(&db, "flaky", "a sent row", |rows| rows.iter().any(|r| r.outcome == Outcome::Sent)).await;
    let attempts: Vec<_> = rows.iter().map(|r| (r.attempt, r.outcome)).collect();
    assert_eq!(attempts, [(1, Outcome::Failed), (2, Outcome::Failed), (3, Outcome::Sent)]);
    assert_eq!(receiver.requests("fail").len(), 2);
    let delivered = receiver.requests("ok");
    assert_eq!(delivered.len(), 1);
    let body = &delivered[0].body;
    // Every attempt, by either process, names the notification alike.
    let key = body["idempotency_key"].as_str().expect("an idempotency key");
    assert_eq!(key, n.idempotency_key("flaky"));
    for failed in receiver.requests("fail") {
        assert_eq!(failed.body["idempotency_key"], key, "{:?}", failed.body);
    }
    assert_eq!((body["kind"].as_str(), body["rule"]["id"].as_str()), (Some("firing"), Some("orders-backlog")));
    assert_eq!(body["note"], "a note");
    assert_eq!(body["dashboard_url"], "http://warren.test/queues/main/%2F/orders");
    assert_eq!(body["at"].as_str().unwrap().parse::<chrono::DateTime<Utc>>().unwrap(), n.at.trunc_subsecs(0));
    assert_eq!(pending_deliveries(&db).await.unwrap(), []);
    assert!(second.shutdown(Duration::from_secs(5)).await);
}

/// Another process took the row over while this one's attempt was under way (this one was paused
/// past its claim): this one's outcome is not written, neither its log row nor its retry, so the
/// delivery is logged once, by the process that holds the row now.
#[tokio::test]
async fn a_dispatcher_whose_claim_was_taken_over_during_an_attempt_writes_no_outcome() {
    let (logs, _guard) = CapturedLogs::start();
    let receiver = Receiver::start().await;
    let (_dir, db) = database().await;
    let policy = DeliveryPolicy { attempt_timeout: Duration::from_secs(1), ..fast_policy() };
    let dispatcher = Dispatcher::new(reqwest::Client::new(), db.clone(), policy, WARREN.into());
    dispatcher.set_channels(vec![channel("slow", "webhook", &receiver.url("hang"))]);
    assert_eq!(dispatcher.notify(&firing()).await.unwrap(), 1);
    wait_for("an attempt under way", Duration::from_secs(10), || async {
        match receiver.requests("hang").len() {
            0 => Err("no request yet".to_string()),
            _ => Ok(()),
        }
    })
    .await;
    let row = db.oldest_in_outbox("slow").await.unwrap().unwrap();
    assert_eq!(row.claimed_by.as_deref(), Some(WARREN));
    // What an expired claim and another process's claim come to.
    db.release_outbox_claim(row.id, WARREN).await.unwrap();
    let taken = db.claim_outbox("slow", "another warren", i64::MAX, Duration::from_secs(60)).await.unwrap();
    assert_eq!(taken.map(|r| r.id), Some(row.id));

    wait_for("the attempt's end, its outcome refused", Duration::from_secs(10), || async {
        let text = logs.text();
        if text.contains("another process took it over") {
            Ok(())
        } else {
            Err(text)
        }
    })
    .await;
    let rows = recent_deliveries(&db, 100).await.unwrap();
    assert!(rows.iter().all(|r| r.channel_id != "slow"), "logged after the takeover: {rows:?}");
    let row = db.oldest_in_outbox("slow").await.unwrap().unwrap();
    assert_eq!((row.attempts, row.claimed_by.as_deref()), (0, Some("another warren")), "{row:?}");
    assert!(dispatcher.shutdown(Duration::from_secs(5)).await);
}

#[tokio::test]
async fn pending_deliveries_of_a_removed_channel_are_dropped_and_logged() {
    let receiver = Receiver::start().await;
    let (_dir, db) = database().await;
    let first = Dispatcher::new(reqwest::Client::new(), db.clone(), fast_policy(), "first warren".into());
    first.set_channels(vec![channel("old", "webhook", &receiver.url("hang"))]);
    assert_eq!(first.notify(&firing()).await.unwrap(), 1);
    assert!(first.shutdown(Duration::from_secs(5)).await);
    assert_eq!(pending_deliveries(&db).await.unwrap().len(), 1);

    let second = Dispatcher::new(reqwest::Client::new(), db.clone(), fast_policy(), "second warren".into());
    second.set_channels(vec![channel("new", "webhook", &receiver.url("ok"))]);
    let rows = log_rows(&db, "old", "a dropped row", |rows| {
        rows.iter().any(|r| r.outcome == Outcome::Dropped && r.error.as_deref().is_some_and(|e| e.contains("removed")))
    })
    .await;
    let removed = rows.last().unwrap();
    assert_eq!((removed.channel_name.as_str(), removed.kind), ("Channel old", NotificationKind::Firing));
    assert_eq!(removed.error.as_deref(), Some("the channel was removed from the configuration"));
    assert_eq!(pending_deliveries(&db).await.unwrap(), []);
    assert!(receiver.requests("ok").is_empty(), "another channel does not inherit it");
    assert!(second.shutdown(Duration::from_secs(5)).await);
}

/// With several replicas another may have a channel this one lacks (a rolling change of the
/// configuration): its fresh rows stay for the grace, and are delivered by the replica that has
/// the channel; rows older than the grace go, as with one process.
#[tokio::test]
async fn rows_of_a_channel_another_replica_has_stay_for_the_grace() {
    let receiver = Receiver::start().await;
    let (_dir, db) = database().await;
    let grace = Duration::from_secs(3);
    let policy = DeliveryPolicy { unknown_channel_grace: grace, ..fast_policy() };
    // The replica without the channel starts first: it must not drop what the other queues.
    let lacking = Dispatcher::new(reqwest::Client::new(), db.clone(), policy.clone(), "old config".into());
    lacking.set_channels(vec![channel("kept", "webhook", &receiver.url("ok"))]);
    let having = Dispatcher::new(reqwest::Client::new(), db.clone(), policy.clone(), "new config".into());
    // Queued while `having` delivers nothing yet: its channel's receiver hangs.
    having.set_channels(vec![channel("added", "webhook", &receiver.url("hang"))]);
    assert_eq!(having.notify(&firing()).await.unwrap(), 1);
    assert!(having.shutdown(Duration::from_secs(5)).await);
    // The other replica's configuration changes (a reload): it still lacks "added".
    lacking.set_channels(vec![channel("kept", "webhook", &receiver.url("ok"))]);
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(pending_deliveries(&db).await.unwrap().len(), 1, "dropped within the grace");

    // Past the grace, with no replica delivering it, the row goes, logged.
    log_rows(&db, "added", "the row dropped after the grace", |rows| {
        rows.iter().any(|r| r.outcome == Outcome::Dropped && r.error.as_deref().is_some_and(|e| e.contains("removed")))
    })
    .await;
    assert_eq!(pending_deliveries(&db).await.unwrap(), []);
    assert!(lacking.shutdown(Duration::from_secs(5)).await);
}

#[tokio::test]
async fn slack_gets_a_text_message() {
    let receiver = Receiver::start().await;
    let (_dir, db) = database().await;
    let dispatcher = Dispatcher::new(reqwest::Client::new(), db.clone(), fast_policy(), WARREN.into());
    dispatcher.set_channels(vec![channel("slack", "slack", &receiver.url("ok"))]);
    let mut resolved = firing();
    resolved.kind = NotificationKind::Resolved;
    resolved.value = Some(3.0);
    resolved.dashboard_url = Some("http://warren.test/queues/main/%2F/orders".to_string());

    dispatcher.notify(&resolved).await.unwrap();

    log_rows(&db, "slack", "a sent row", |rows| rows.iter().any(|r| r.outcome == Outcome::Sent)).await;
    let body = &receiver.requests("ok")[0].body;
    let text = body["text"].as_str().unwrap();
    assert_eq!(body.as_object().unwrap().len(), 1, "Slack gets only text: {body}");
    assert!(
        text.starts_with(
            "[RESOLVED] Orders backlog (critical): queue 'orders' (vhost '/', broker 'main'): ready 3 (threshold &gt; 10)\n"
        ),
        "{text}"
    );
    assert!(text.ends_with("<http://warren.test/queues/main/%2F/orders|Open in warren>"), "{text}");
    dispatcher.shutdown(Duration::from_secs(5)).await;
}

#[tokio::test]
async fn send_test_makes_one_attempt_and_reports_it() {
    let receiver = Receiver::start().await;
    let (_dir, db) = database().await;
    let dispatcher = Dispatcher::new(reqwest::Client::new(), db.clone(), fast_policy(), WARREN.into());
    let ok = channel("ok", "webhook", &receiver.url("ok"));
    let failing = channel("failing", "webhook", &receiver.url("fail"));

    // The channels need not be the dispatcher's: the button tests the form being edited.
    let delivered = dispatcher.send_test(&ok).await.unwrap();
    assert_eq!(delivered.http_status, Some(200));
    assert_eq!(receiver.requests("ok")[0].body["kind"], "test");

    let error = dispatcher.send_test(&failing).await.unwrap_err();
    assert_eq!(error.http_status(), Some(500));
    assert_no_token(&error.to_string());
    assert_eq!(receiver.requests("fail").len(), 1, "a test is never retried");

    let rows = recent_deliveries(&db, 10).await.unwrap();
    let summary: Vec<_> = rows.iter().map(|r| (r.channel_id.as_str(), r.kind, r.outcome, r.http_status)).collect();
    assert_eq!(
        summary,
        [
            ("failing", NotificationKind::Test, Outcome::GaveUp, Some(500)),
            ("ok", NotificationKind::Test, Outcome::Sent, Some(200))
        ]
    );
    assert!(rows.iter().all(|r| r.rule_id.is_none() && r.alert_key.is_none()));
}

#[tokio::test]
async fn connection_errors_do_not_quote_the_url() {
    let (logs, _guard) = CapturedLogs::start();
    let (_dir, db) = database().await;
    // A port nothing listens on: bound, then released.
    let port = TcpListener::bind("127.0.0.1:0").await.unwrap().local_addr().unwrap().port();
    let refused = channel("refused", "webhook", &format!("http://127.0.0.1:{port}/hook/{TOKEN}?token={TOKEN}"));
    let dispatcher = Dispatcher::new(
        reqwest::Client::new(),
        db.clone(),
        DeliveryPolicy { max_attempts: 2, ..fast_policy() },
        WARREN.into(),
    );

    let error = dispatcher.send_test(&refused).await.unwrap_err();
    assert!(matches!(error, DeliveryError::Transport(_)), "{error:?}");
    assert_no_token(&error.to_string());
    assert_no_token(&format!("{error:?}"));

    dispatcher.set_channels(vec![refused]);
    dispatcher.notify(&firing()).await.unwrap();
    let rows = log_rows(&db, "refused", "two failed attempts and a test", |rows| rows.len() >= 3).await;
    for row in &rows {
        assert_no_token(row.error.as_deref().unwrap());
    }
    assert_eq!(rows[2].outcome, Outcome::GaveUp);
    dispatcher.shutdown(Duration::from_secs(5)).await;
    assert_no_token(&logs.text());
}

/// One message the fake SMTP server accepted.
#[derive(Debug, Clone, Default)]
struct Mail {
    from: String,
    to: Vec<String>,
    data: String,
}

/// Just enough SMTP for a client that sends one message per connection: EHLO, MAIL, RCPT,
/// DATA, QUIT (and RSET, NOOP).
async fn start_smtp() -> (u16, Arc<Mutex<Vec<Mail>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let mails = Arc::new(Mutex::new(Vec::new()));
    let accepted = mails.clone();
    tokio::spawn(async move {
        loop {
            let (socket, _) = listener.accept().await.unwrap();
            tokio::spawn(smtp_session(socket, accepted.clone()));
        }
    });
    (port, mails)
}

async fn smtp_session(socket: TcpStream, mails: Arc<Mutex<Vec<Mail>>>) -> std::io::Result<()> {
    let (read, mut write) = socket.into_split();
    let mut lines = BufReader::new(read).lines();
    write.write_all(b"220 fake.test ESMTP\r\n").await?;
    let mut mail = Mail::default();
    while let Some(line) = lines.next_line().await? {
        let command = line.to_ascii_uppercase();
        let reply: &[u8] = if command.starts_with("EHLO") || command.starts_with("HELO") {
            b"250 fake.test\r\n"
        } else if command.starts_with("MAIL FROM:") {
            mail.from = line["MAIL FROM:".len()..].trim().to_string();
            b"250 OK\r\n"
        } else if command.starts_with("RCPT TO:") {
            mail.to.push(line["RCPT TO:".len()..].trim().to_string());
            b"250 OK\r\n"
        } else if command == "DATA" {
            write.write_all(b"354 go ahead\r\n").await?;
            while let Some(data) = lines.next_line().await? {
                if data == "." {
                    break;
                }
                mail.data.push_str(data.strip_prefix('.').unwrap_or(&data));
                mail.data.push('\n');
            }
            mails.lock().unwrap().push(std::mem::take(&mut mail));
            b"250 OK queued\r\n"
        } else if command == "QUIT" {
            write.write_all(b"221 bye\r\n").await?;
            return Ok(());
        } else if command == "RSET" || command == "NOOP" {
            b"250 OK\r\n"
        } else {
            b"502 not implemented\r\n"
        };
        write.write_all(reply).await?;
    }
    Ok(())
}

#[tokio::test]
async fn email_goes_out_over_smtp() {
    let (port, mails) = start_smtp().await;
    let (_dir, db) = database().await;
    let email: NotificationChannel = toml::from_str(&format!(
        "id = \"mail\"\nname = \"Ops mail\"\ntype = \"email\"\nhost = \"127.0.0.1\"\nport = {port}\n\
         security = \"none\"\nfrom = \"Warren <warren@example.com>\"\nto = [\"ops@example.com\", \"oncall@example.com\"]"
    ))
    .unwrap();
    assert!(email.validate().is_empty(), "{:?}", email.validate());
    let dispatcher = Dispatcher::new(reqwest::Client::new(), db.clone(), fast_policy(), WARREN.into());

    assert_eq!(dispatcher.send_test(&email).await.unwrap().http_status, None);
    dispatcher.set_channels(vec![email]);
    dispatcher.notify(&firing()).await.unwrap();
    let rows = log_rows(&db, "mail", "two sent mails", |rows| rows.len() >= 2).await;
    assert!(rows.iter().all(|r| r.outcome == Outcome::Sent && r.http_status.is_none()), "{rows:?}");

    let mails = mails.lock().unwrap().clone();
    assert_eq!(mails.len(), 2, "{mails:?}");
    assert_eq!(mails[1].from, "<warren@example.com>");
    assert_eq!(mails[1].to, ["<ops@example.com>", "<oncall@example.com>"]);
    assert!(mails[0].data.contains("Subject: [TEST] This is a test notification from warren"), "{}", mails[0].data);
    let data = &mails[1].data;
    assert!(data.contains("Subject: [FIRING] Orders backlog (critical)"), "{data}");
    assert!(data.contains("From: Warren <warren@example.com>"), "{data}");
    assert!(data.contains("Content-Type: text/plain"), "{data}");
    assert!(data.contains("Threshold: > 10"), "{data}");
    dispatcher.shutdown(Duration::from_secs(5)).await;
}

#[tokio::test]
async fn starttls_that_the_server_does_not_offer_sends_nothing_in_clear() {
    let (port, mails) = start_smtp().await;
    let (_dir, db) = database().await;
    let email: NotificationChannel = toml::from_str(&format!(
        "id = \"mail\"\nname = \"Ops mail\"\ntype = \"email\"\nhost = \"127.0.0.1\"\nport = {port}\n\
         user = \"warren\"\npassword = \"hunter2hunter2\"\nfrom = \"warren@example.com\"\nto = [\"ops@example.com\"]"
    ))
    .unwrap();
    assert!(email.validate().is_empty(), "{:?}", email.validate());
    let dispatcher = Dispatcher::new(reqwest::Client::new(), db.clone(), fast_policy(), WARREN.into());

    let error = dispatcher.send_test(&email).await.unwrap_err();
    assert!(matches!(error, DeliveryError::Smtp { .. }), "{error:?}");
    assert!(!error.to_string().contains("hunter2"), "{error}");
    assert!(mails.lock().unwrap().is_empty());
    let rows = recent_deliveries(&db, 10).await.unwrap();
    assert_eq!((rows[0].outcome, rows[0].http_status), (Outcome::GaveUp, None));
}
