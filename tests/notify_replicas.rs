//! Two replicas on one PostgreSQL database deliver the notification outbox together (issue 33,
//! must-have 4): every notification reaches its receiver once, named by the same idempotency key
//! in its header and its body. Two `AppState`s (`warren::build_state`), each with its own
//! dispatcher and HTTP client, as two processes would have, and a webhook sink that counts what
//! it accepted per key. No RabbitMQ is needed: the one broker is a closed port, never polled.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::{Json, Router};
use common::postgres::Database;
use common::wait_for;
use serde_json::Value;
use warren::alerts::notify::{pending_deliveries, recent_deliveries, Notification, NotificationKind, Outcome};
use warren::alerts::{AlertKey, Rule};
use warren::state::AppState;

/// One request the sink got.
#[derive(Debug, Clone)]
struct Received {
    /// The channel, as the sink's path names it.
    path: String,
    header_key: Option<String>,
    body_key: Option<String>,
    status: u16,
}

/// A webhook receiver that answers 500 to every fifth request (so that some notifications are
/// retried, maybe by the other replica) and 200 to the others, a little slowly, so that the
/// replicas' deliveries overlap.
#[derive(Clone, Default)]
struct Sink {
    base: String,
    requests: Arc<Mutex<Vec<Received>>>,
}

impl Sink {
    async fn start() -> Sink {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let sink = Sink { base: format!("http://{}", listener.local_addr().unwrap()), ..Sink::default() };
        let app = Router::new().fallback(answer).with_state(sink.clone());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        sink
    }

    fn requests(&self) -> Vec<Received> {
        self.requests.lock().unwrap().clone()
    }

    /// How many times each key was accepted (answered 200).
    fn accepted(&self) -> BTreeMap<String, usize> {
        let mut counts = BTreeMap::new();
        for r in self.requests().iter().filter(|r| r.status == 200) {
            *counts.entry(r.header_key.clone().unwrap_or_default()).or_default() += 1;
        }
        counts
    }
}

async fn answer(State(sink): State<Sink>, uri: Uri, headers: HeaderMap, Json(body): Json<Value>) -> StatusCode {
    let status = {
        let mut requests = sink.requests.lock().unwrap();
        let status = if requests.len() % 5 == 4 { 500 } else { 200 };
        requests.push(Received {
            path: uri.path().to_string(),
            header_key: headers.get("idempotency-key").and_then(|v| v.to_str().ok()).map(str::to_string),
            body_key: body["idempotency_key"].as_str().map(str::to_string),
            status,
        });
        status
    };
    tokio::time::sleep(Duration::from_millis(20)).await;
    StatusCode::from_u16(status).unwrap()
}

const CHANNELS: [&str; 3] = ["hook-a", "hook-b", "hook-c"];
const ALERTS: usize = 20;

async fn replica(database: &Database, sink: &Sink) -> AppState {
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let mut toml = format!(
        "database_url = {:?}\n[[brokers]]\nname = \"local\"\nmanagement_url = \"http://127.0.0.1:{closed}\"\n\
         amqp_url = \"amqp://127.0.0.1:{closed}\"\nprometheus_url = \"off\"\n",
        database.url()
    );
    for channel in CHANNELS {
        toml.push_str(&format!(
            "[[notifications]]\nid = {channel:?}\nname = {channel:?}\ntype = \"webhook\"\nurl = \"{}/{channel}\"\n",
            sink.base
        ));
    }
    warren::build_state(warren::config::Config::from_toml(&toml).unwrap()).await.unwrap()
}

fn firing(i: usize) -> Notification {
    let rule: Rule = serde_json::from_value(serde_json::json!({"id": "backlog", "name": "Backlog",
        "metric": "ready", "comparator": ">", "threshold": 10.0, "severity": "warning"}))
    .unwrap();
    let key = AlertKey::queue("local", "/", &format!("q{i}"));
    Notification::for_rule(NotificationKind::Firing, &rule, key, Some(11.0 + i as f64), chrono::Utc::now(), None)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_deliver_each_notification_once_under_one_idempotency_key() {
    let database = Database::create("notify2").await;
    let sink = Sink::start().await;
    let (a, b) = (replica(&database, &sink).await, replica(&database, &sink).await);
    assert_ne!(a.replica.id(), b.replica.id());

    // Queued by either replica, as their evaluators would; then both are told to look, so that
    // both go for every channel's rows.
    let mut expected = BTreeSet::new();
    for i in 0..ALERTS {
        let n = firing(i);
        let by = if i % 2 == 0 { &a } else { &b };
        assert_eq!(by.notifier.notify(&n).await.unwrap(), CHANNELS.len());
        expected.extend(CHANNELS.iter().map(|channel| n.idempotency_key(channel)));
    }
    a.notifier.wake();
    b.notifier.wake();

    wait_for("every notification accepted and the outbox empty", Duration::from_secs(60), || async {
        let accepted = sink.accepted();
        let pending = pending_deliveries(&a.store).await.unwrap();
        if accepted.len() == expected.len() && pending.is_empty() {
            Ok(())
        } else {
            Err(format!("{} of {} keys accepted, {} pending", accepted.len(), expected.len(), pending.len()))
        }
    })
    .await;
    assert!(a.notifier.shutdown(Duration::from_secs(10)).await, "a's dispatcher did not stop");
    assert!(b.notifier.shutdown(Duration::from_secs(10)).await, "b's dispatcher did not stop");

    let requests = sink.requests();
    for r in &requests {
        assert!(r.header_key.is_some() && r.header_key == r.body_key, "header and body name it alike: {r:?}");
    }
    let accepted = sink.accepted();
    let twice: Vec<_> = accepted.iter().filter(|(_, count)| **count > 1).collect();
    assert!(twice.is_empty(), "accepted more than once: {twice:?}");
    assert_eq!(accepted.keys().cloned().collect::<BTreeSet<_>>(), expected);
    let failed = requests.iter().filter(|r| r.status == 500).count();
    assert!(failed > 0, "the sink failed none: nothing was retried");
    for channel in CHANNELS {
        let path = format!("/{channel}");
        assert_eq!(requests.iter().filter(|r| r.path == path && r.status == 200).count(), ALERTS, "{channel}");
    }

    // The log has each attempt once: one sent row per notification, and its attempts numbered
    // 1, 2, ... without a number twice (two processes making one attempt would repeat one).
    let log = recent_deliveries(&a.store, 10_000).await.unwrap();
    let mut attempts: BTreeMap<(String, String), Vec<(u32, Outcome)>> = BTreeMap::new();
    for row in &log {
        let alert = row.alert_key.as_ref().map(|k| k.to_string()).unwrap_or_default();
        attempts.entry((row.channel_id.clone(), alert)).or_default().push((row.attempt, row.outcome));
    }
    assert_eq!(attempts.len(), expected.len(), "{attempts:?}");
    for (delivery, mut rows) in attempts {
        rows.sort_by_key(|(attempt, _)| *attempt);
        let numbers: Vec<u32> = rows.iter().map(|(attempt, _)| *attempt).collect();
        assert_eq!(numbers, (1..=rows.len() as u32).collect::<Vec<_>>(), "{delivery:?}: {rows:?}");
        let outcomes: Vec<Outcome> = rows.iter().map(|(_, outcome)| *outcome).collect();
        assert_eq!(outcomes.last(), Some(&Outcome::Sent), "{delivery:?}: {rows:?}");
        assert!(outcomes[..outcomes.len() - 1].iter().all(|o| *o == Outcome::Failed), "{delivery:?}: {rows:?}");
    }
    eprintln!("{} requests, {failed} answered 500 and retried", requests.len());
}
