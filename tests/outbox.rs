//! The notification outbox survives restarts: a notification whose delivery was being retried
//! when warren died is delivered by the next warren on the same database. warren runs as a
//! separate process (so the test can SIGKILL it) against a receiver on loopback; its only broker
//! is a closed port, so no RabbitMQ is needed.

mod common;

use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use axum::{Json, Router};
use chrono::{DateTime, Utc};
use common::wait_for;
use serde_json::Value;

/// One request the receiver got, with the status it answered.
#[derive(Debug, Clone)]
struct Received {
    status: u16,
    body: Value,
}

/// A webhook receiver on loopback whose answer the test switches.
#[derive(Clone)]
struct Receiver {
    url: String,
    status: Arc<AtomicU16>,
    requests: Arc<Mutex<Vec<Received>>>,
}

impl Receiver {
    async fn start(status: u16) -> Receiver {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let receiver = Receiver {
            url: format!("http://{}/hook", listener.local_addr().unwrap()),
            status: Arc::new(AtomicU16::new(status)),
            requests: Arc::default(),
        };
        let app = Router::new().fallback(answer).with_state(receiver.clone());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        receiver
    }

    fn answer_with(&self, status: u16) {
        self.status.store(status, Ordering::SeqCst);
    }

    fn requests(&self) -> Vec<Received> {
        self.requests.lock().unwrap().clone()
    }
}

/// The status for [`Receiver::answer_with`] that holds each request without answering (until
/// warren gives up on it), to kill warren in the middle of an attempt.
const HANG: u16 = 0;

async fn answer(State(receiver): State<Receiver>, Json(body): Json<Value>) -> StatusCode {
    let status = receiver.status.load(Ordering::SeqCst);
    receiver.requests.lock().unwrap().push(Received { status, body });
    if status == HANG {
        tokio::time::sleep(Duration::from_secs(120)).await;
        return StatusCode::GATEWAY_TIMEOUT;
    }
    StatusCode::from_u16(status).unwrap()
}

/// A number below `n` that differs from run to run, so the kills land at different points; the
/// test prints it, to repeat a failure.
fn random_below(n: u64) -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u64(std::process::id().into());
    hasher.finish() % n
}

/// warren as a separate process, so the test can SIGKILL it.
struct Process {
    child: Child,
    base: String,
    http: reqwest::Client,
}

impl Process {
    /// warren on `dir/warren.db`, watching one broker that never answers (a port bound, then
    /// released), with a `broker_unreachable` rule that fires at the first failed poll and one
    /// webhook channel to `hook`.
    async fn start(dir: &std::path::Path, hook: &str) -> Process {
        let free_port = || std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let (port, closed) = (free_port(), free_port());
        let config = dir.join("warren.toml");
        std::fs::write(
            &config,
            format!(
                "listen = \"127.0.0.1:{port}\"\ndatabase = {database:?}\n\
                 [[brokers]]\nname = \"down\"\nmanagement_url = \"http://127.0.0.1:{closed}\"\n\
                 amqp_url = \"amqp://127.0.0.1:{closed}\"\nprometheus_url = \"off\"\n\
                 user = \"guest\"\npassword = \"guest\"\npoll_interval_secs = 1\n\
                 [[alerts]]\nid = \"down\"\nname = \"Broker down\"\nmetric = \"broker_unreachable\"\n\
                 for_secs = 0\nseverity = \"critical\"\n\
                 [[notifications]]\nid = \"hook\"\nname = \"Hook\"\ntype = \"webhook\"\nurl = {hook:?}\n",
                database = dir.join("warren.db").display().to_string(),
            ),
        )
        .unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_warren"))
            .arg("--config")
            .arg(&config)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("warren starts");
        let process = Process { child, base: format!("http://127.0.0.1:{port}"), http: reqwest::Client::new() };
        wait_for("warren answers", Duration::from_secs(30), || async {
            match process.http.get(format!("{}/healthz", process.base)).send().await {
                Ok(r) if r.status().is_success() => Ok(()),
                other => Err(format!("{other:?}")),
            }
        })
        .await;
        process
    }

    async fn get(&self, path: &str) -> Value {
        let response = self.http.get(format!("{}{path}", self.base)).send().await.unwrap();
        assert!(response.status().is_success(), "GET {path}: {}", response.status());
        response.json().await.unwrap()
    }

    /// The delivery log of the `hook` channel, oldest first.
    async fn deliveries(&self) -> Vec<Value> {
        let mut rows = self.get("/api/v1/notifications/deliveries?limit=1000").await.as_array().unwrap().clone();
        rows.retain(|r| r["channel_id"] == "hook");
        rows.reverse();
        rows
    }

    /// The one alert of rule `down`.
    async fn alert(&self) -> Value {
        let alerts = self.get("/api/v1/alerts").await;
        let mine: Vec<&Value> = alerts.as_array().unwrap().iter().filter(|a| a["rule_id"] == "down").collect();
        assert_eq!(mine.len(), 1, "{alerts}");
        mine[0].clone()
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn is_the_firing(body: &Value) -> bool {
    body["kind"] == "firing" && body["rule"]["id"] == "down" && body["alert"]["broker"] == "down"
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_notification_being_retried_when_warren_is_killed_is_delivered_after_the_restart() {
    let receiver = Receiver::start(500).await;
    let dir = tempfile::tempdir().unwrap();

    let mut warren = Process::start(dir.path(), &receiver.url).await;
    // Killed after 1 to 3 failed attempts (backoff 1 s, 2 s, 4 s).
    let kill_after = 1 + random_below(3) as usize;
    eprintln!("killing warren after {kill_after} failed attempts");
    let failed = wait_for("failed attempts in the delivery log", Duration::from_secs(30), || async {
        let rows = warren.deliveries().await;
        match rows.iter().filter(|r| r["outcome"] == "failed").count() {
            n if n < kill_after => Err(format!("{rows:?}")),
            _ => Ok(rows),
        }
    })
    .await;
    assert!(failed.iter().all(|r| r["outcome"] == "failed" && r["kind"] == "firing"), "{failed:?}");
    let before_kill = warren.alert().await;
    warren.child.kill().expect("SIGKILL");
    warren.child.wait().unwrap();
    let attempts_before = receiver.requests().len();
    assert!(attempts_before >= 1 && receiver.requests().iter().all(|r| r.status == 500 && is_the_firing(&r.body)));

    receiver.answer_with(200);
    let switched_at = Utc::now();
    let warren = Process::start(dir.path(), &receiver.url).await;
    let delivered =
        wait_for("the firing notification delivered after the restart", Duration::from_secs(30), || async {
            let requests = receiver.requests();
            match requests.iter().find(|r| r.status == 200) {
                Some(r) => Ok(r.clone()),
                None => Err(format!("{requests:?}")),
            }
        })
        .await;
    assert!(is_the_firing(&delivered.body), "{}", delivered.body);
    assert_eq!(delivered.body["rule"]["severity"], "critical");
    assert_eq!(
        receiver.requests().iter().filter(|r| r.status == 200).count(),
        1,
        "delivered once; the new warren does not plan a second firing"
    );

    // The attempt count went on from where the killed warren left it: every failed attempt is
    // in the log, and the successful one is the next number.
    let rows = wait_for("a sent row", Duration::from_secs(10), || async {
        let rows = warren.deliveries().await;
        if rows.iter().any(|r| r["outcome"] == "sent") {
            Ok(rows)
        } else {
            Err(format!("{rows:?}"))
        }
    })
    .await;
    let failures = rows.iter().filter(|r| r["outcome"] == "failed").count() as u64;
    let sent: Vec<&Value> = rows.iter().filter(|r| r["outcome"] == "sent").collect();
    assert_eq!(sent.len(), 1, "{rows:?}");
    assert!(failures >= 1, "{rows:?}");
    assert_eq!(sent[0]["attempt"].as_u64(), Some(failures + 1), "{rows:?}");
    assert_eq!(sent[0]["http_status"], 200);

    // Shown notified only once a channel accepted it: not while it was failing, and after the
    // delivery at a time no earlier than the receiver's switch to 200 (whole seconds).
    assert_eq!(before_kill["phase"], "firing", "{before_kill}");
    assert!(before_kill["notified_at"].is_null(), "notified while every attempt failed: {before_kill}");
    assert!(before_kill["queued_at"].is_string(), "{before_kill}");
    let after = wait_for("the alert shown notified", Duration::from_secs(10), || async {
        let alert = warren.alert().await;
        if alert["notified_at"].is_string() {
            Ok(alert)
        } else {
            Err(format!("{alert}"))
        }
    })
    .await;
    let notified_at: DateTime<Utc> = after["notified_at"].as_str().unwrap().parse().unwrap();
    assert!(notified_at.timestamp() >= switched_at.timestamp(), "{after} (switched at {switched_at})");
    assert_eq!(after["queued_at"], before_kill["queued_at"], "the firing was queued once, before the kill");
}

/// Killed in the middle of an attempt (the receiver holds the request): the next warren sends the
/// notification again, and it is delivered. The receiver may have seen the held request too: a
/// duplicate is acceptable, a loss is not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_notification_whose_delivery_is_in_flight_when_warren_is_killed_is_delivered_after_the_restart() {
    let receiver = Receiver::start(HANG).await;
    let dir = tempfile::tempdir().unwrap();

    let mut warren = Process::start(dir.path(), &receiver.url).await;
    wait_for("an attempt under way", Duration::from_secs(30), || async {
        match receiver.requests().len() {
            0 => Err("no request yet".to_string()),
            _ => Ok(()),
        }
    })
    .await;
    let before_kill = warren.alert().await;
    warren.child.kill().expect("SIGKILL");
    warren.child.wait().unwrap();
    assert!(before_kill["notified_at"].is_null(), "notified before any channel accepted it: {before_kill}");

    receiver.answer_with(200);
    let warren = Process::start(dir.path(), &receiver.url).await;
    let delivered = wait_for("the notification delivered after the restart", Duration::from_secs(30), || async {
        let requests = receiver.requests();
        match requests.iter().find(|r| r.status == 200) {
            Some(r) => Ok(r.clone()),
            None => Err(format!("{requests:?}")),
        }
    })
    .await;
    assert!(is_the_firing(&delivered.body), "{}", delivered.body);
    let after = wait_for("the alert shown notified", Duration::from_secs(10), || async {
        let alert = warren.alert().await;
        if alert["notified_at"].is_string() {
            Ok(alert)
        } else {
            Err(format!("{alert}"))
        }
    })
    .await;
    assert_eq!(after["queued_at"], before_kill["queued_at"], "the firing was queued once, before the kill");
    let requests = receiver.requests();
    assert!(requests.iter().all(|r| is_the_firing(&r.body)), "only the one firing was sent: {requests:?}");
}
