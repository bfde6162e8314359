//! Test harness: a real RabbitMQ vhost per test, a real SQLite file per test, warren started
//! in-process on port 0, and waiting helpers (conditions with deadlines, never fixed sleeps).
//! The broker comes from the environment (`WARREN_TEST_BROKER`, see `broker`).
#![allow(dead_code)]

pub mod broker;
pub mod browser;
pub mod cluster;
pub mod dead_letters;
pub mod nginx;
pub mod postgres;
pub mod queue_history;
pub mod sessions;
pub mod tls;

use std::future::Future;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use lapin::options::{BasicPublishOptions, ConfirmSelectOptions, QueueDeclareOptions};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties};
use serde_json::{json, Value};
use tokio::sync::oneshot;

pub use broker::broker;

pub fn encode(s: &str) -> String {
    warren::broker::management::encode_segment(s)
}

/// A vhost of its own on the real broker, deleted when dropped.
pub struct TestVhost {
    pub name: String,
    http: reqwest::Client,
    /// The broker it is on: the test broker, or another one (`create_on`).
    on: broker::TestBroker,
}

impl TestVhost {
    pub async fn create(test: &str) -> TestVhost {
        TestVhost::create_named(format!("warren-test-{test}-{}", rand::random::<u32>())).await
    }

    /// A vhost with exactly this name (for names that need encoding).
    pub async fn create_named(name: String) -> TestVhost {
        // A bad WARREN_TEST_* setting fails here, before there is a vhost whose `drop` would
        // read the broker again while unwinding.
        TestVhost::create_named_on(broker().clone(), name).await
    }

    /// A vhost on `on`, another broker than the test broker (the TLS node's plain listeners).
    pub async fn create_on(on: broker::TestBroker, test: &str) -> TestVhost {
        TestVhost::create_named_on(on, format!("warren-test-{test}-{}", rand::random::<u32>())).await
    }

    async fn create_named_on(on: broker::TestBroker, name: String) -> TestVhost {
        let http = reqwest::Client::new();
        let vhost = TestVhost { name, http, on };
        vhost.management_put(&format!("/api/vhosts/{}", encode(&vhost.name)), serde_json::json!({})).await;
        vhost
            .management_put(
                &format!("/api/permissions/{}/guest", encode(&vhost.name)),
                serde_json::json!({"configure": ".*", "write": ".*", "read": ".*"}),
            )
            .await;
        vhost
    }

    async fn management_put(&self, path: &str, body: Value) {
        let response = self
            .http
            .put(format!("{}{path}", self.on.management))
            .basic_auth("guest", Some("guest"))
            .json(&body)
            .send()
            .await
            .unwrap_or_else(|e| {
                let (target, management) = (&self.on.target, &self.on.management);
                panic!("management API of test broker {target} unreachable at {management} (is rabbitmq_management enabled?): {e}")
            });
        assert!(response.status().is_success(), "PUT {path}: {}", response.status());
    }

    pub async fn delete_queue(&self, queue: &str) {
        let response = self
            .http
            .delete(format!("{}/api/queues/{}/{}", self.on.management, encode(&self.name), encode(queue)))
            .basic_auth("guest", Some("guest"))
            .send()
            .await
            .expect("management API");
        assert!(response.status().is_success(), "delete queue: {}", response.status());
    }

    pub async fn connect(&self) -> Connection {
        let uri = format!("{}/{}", self.on.amqp_with_guest(), encode(&self.name));
        Connection::connect(&uri, ConnectionProperties::default()).await.expect("AMQP connection to the test broker")
    }

    /// A channel in confirm mode.
    pub async fn channel(&self, connection: &Connection) -> Channel {
        let channel = connection.create_channel().await.expect("channel");
        channel.confirm_select(ConfirmSelectOptions::default()).await.expect("confirm mode");
        channel
    }
}

impl Drop for TestVhost {
    fn drop(&mut self) {
        let url = format!("{}/api/vhosts/{}", self.on.management, encode(&self.name));
        // Drop cannot await; delete from a thread of its own so a failed test still cleans up.
        let done = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
            rt.block_on(async move {
                if let Err(e) = reqwest::Client::new().delete(url).basic_auth("guest", Some("guest")).send().await {
                    eprintln!("could not delete test vhost: {e}");
                }
            });
        });
        if done.join().is_err() {
            eprintln!("vhost cleanup thread panicked");
        }
    }
}

pub async fn declare(channel: &Channel, queue: &str, quorum: bool) {
    let mut args = FieldTable::default();
    if quorum {
        args.insert("x-queue-type".into(), AMQPValue::LongString("quorum".into()));
    }
    channel
        .queue_declare(queue.into(), QueueDeclareOptions { durable: true, ..Default::default() }, args)
        .await
        .unwrap_or_else(|e| panic!("declare {queue}: {e}"));
}

/// Publishes `n` messages to `queue` through the default exchange and waits for every confirm.
pub async fn publish(channel: &Channel, queue: &str, n: usize, properties: BasicProperties) {
    for i in 0..n {
        let confirm = channel
            .basic_publish(
                "".into(),
                queue.into(),
                BasicPublishOptions::default(),
                format!("message {i}").as_bytes(),
                properties.clone(),
            )
            .await
            .expect("publish");
        let confirmation = confirm.await.expect("confirm");
        assert!(confirmation.is_ack(), "broker nacked a publish to {queue}");
    }
}

/// A running warren with its own database file.
pub struct Warren {
    pub addr: SocketAddr,
    pub http: reqwest::Client,
    stop: Option<oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<anyhow::Result<()>>>,
    pub dir: tempfile::TempDir,
    /// The configuration it was started with (database in `dir`).
    toml: String,
}

impl Warren {
    /// Starts warren with `brokers_toml` (one or more `[[brokers]]` tables) on port 0. A
    /// `[[brokers]]` table without `management_url` watches the test broker: the harness adds
    /// its management URL and, unless the table sets them, its AMQP and Prometheus URLs.
    pub async fn start(brokers_toml: &str) -> Warren {
        let dir = tempfile::tempdir().expect("temp dir");
        let db = dir.path().join("warren.db");
        let toml = format!("listen = \"127.0.0.1:0\"\ndatabase = {:?}\n{brokers_toml}", db.display().to_string());
        Warren::start_in(dir, with_test_broker(&toml)).await
    }

    /// As `start`, with the database at `database` (a file system the test controls).
    pub async fn start_with_database(database: &std::path::Path, brokers_toml: &str) -> Warren {
        let dir = tempfile::tempdir().expect("temp dir");
        let toml = format!("listen = \"127.0.0.1:0\"\ndatabase = {:?}\n{brokers_toml}", database.display().to_string());
        Warren::start_in(dir, with_test_broker(&toml)).await
    }

    /// Stops this warren and starts a new one on the same database and configuration.
    pub async fn restart(mut self) -> Warren {
        let dir = std::mem::replace(&mut self.dir, tempfile::tempdir().expect("temp dir"));
        let toml = self.toml.clone();
        self.stop().await;
        Warren::start_in(dir, toml).await
    }

    /// Stops this warren and starts a new one on the same database, with every broker's
    /// endpoints on a local port nothing listens on: a restart while the broker does not answer.
    pub async fn restart_unreachable(mut self) -> Warren {
        let dir = std::mem::replace(&mut self.dir, tempfile::tempdir().expect("temp dir"));
        let mut config: toml::Table = toml::from_str(&self.toml).expect("test config is TOML");
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        if let Some(toml::Value::Array(brokers)) = config.get_mut("brokers") {
            for table in brokers.iter_mut().filter_map(toml::Value::as_table_mut) {
                table.insert("management_url".into(), format!("http://127.0.0.1:{port}").into());
                table.insert("amqp_url".into(), format!("amqp://127.0.0.1:{port}").into());
                table.insert("prometheus_url".into(), format!("http://127.0.0.1:{port}").into());
            }
        }
        self.stop().await;
        Warren::start_in(dir, toml::to_string(&config).expect("a TOML table serializes")).await
    }

    async fn start_in(dir: tempfile::TempDir, toml: String) -> Warren {
        let config = warren::config::Config::from_toml(&toml).expect("test config is valid");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(warren::run(config, listener, async move {
            let _ = stopped.await;
        }));
        Warren { addr, http: reqwest::Client::new(), stop: Some(stop), task: Some(task), dir, toml }
    }

    /// warren watching only `vhost` on the real broker.
    pub async fn for_vhost(vhost: &str, poll_interval_secs: u64) -> Warren {
        Warren::start(&format!(
            "[[brokers]]\nname = \"local\"\n{}vhosts_include = [{vhost:?}]\npoll_interval_secs = {poll_interval_secs}\n",
            broker().toml()
        ))
        .await
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    pub async fn get_json(&self, path: &str) -> (u16, Value) {
        let response = self.http.get(self.url(path)).send().await.expect("warren answers");
        let status = response.status().as_u16();
        let body = response.json().await.unwrap_or(Value::Null);
        (status, body)
    }

    pub async fn post_json(&self, path: &str, body: Value) -> (u16, Value) {
        let response = self.http.post(self.url(path)).json(&body).send().await.expect("warren answers");
        (response.status().as_u16(), response.json().await.unwrap_or(Value::Null))
    }

    /// Starts a move (requeue, move or delete) at `path` and waits until its job ended;
    /// returns the job's final status.
    pub async fn run_move(&self, path: &str, body: Value) -> Value {
        let (status, started) = self.post_json(path, body).await;
        assert_eq!(status, 202, "the move starts: {started}");
        let id = started["job"]["id"].as_i64().expect("a job id");
        self.wait_job(id).await
    }

    /// Waits until the action of audit entry `id` (a custody replay, say) has ended; returns the
    /// entry.
    pub async fn audit_ended(&self, id: i64) -> Value {
        wait_for(&format!("the action of audit entry {id} to end"), Duration::from_secs(60), || async {
            let (_, audit) = self.get_json("/api/v1/audit").await;
            let entry = audit.as_array().into_iter().flatten().find(|e| e["id"] == id).cloned();
            match entry {
                Some(e) if e["outcome"] != "started" && e["outcome"] != "running" => Ok(e),
                other => Err(format!("{other:?}")),
            }
        })
        .await
    }

    /// Waits until job `id` is no longer running; returns its status.
    pub async fn wait_job(&self, id: i64) -> Value {
        wait_for(&format!("job {id} to end"), Duration::from_secs(120), || async {
            let (_, job) = self.get_json(&format!("/api/v1/jobs/{id}")).await;
            if job["state"] == "running" || job.is_null() {
                Err(job.to_string())
            } else {
                Ok(job)
            }
        })
        .await
    }

    /// Takes a confirmed snapshot of `queue` (of its first `count` messages), which a selection of
    /// single messages names; returns it.
    pub async fn snapshot(&self, vhost: &str, queue: &str, count: usize) -> Value {
        let path = format!("/api/v1/queues/local/{}/{}/snapshot", encode(vhost), encode(queue));
        let (status, snapshot) = self.post_json(&path, json!({"confirm": "true", "count": count})).await;
        assert_eq!(status, 200, "the snapshot is taken: {snapshot}");
        snapshot
    }

    pub async fn get_text(&self, path: &str) -> (u16, String) {
        let response = self.http.get(self.url(path)).send().await.expect("warren answers");
        let status = response.status().as_u16();
        (status, response.text().await.expect("body"))
    }

    pub async fn queue(&self, vhost: &str, name: &str) -> Option<Value> {
        let (status, body) = self.get_json(&format!("/api/v1/queues/local/{}/{}", encode(vhost), encode(name))).await;
        (status == 200).then_some(body)
    }

    pub async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            let result = tokio::time::timeout(Duration::from_secs(15), task).await.expect("warren stops within 15 s");
            result.expect("warren task").expect("warren ran without error");
        }
    }
}

/// `toml` with the test broker's endpoints in every `[[brokers]]` table that names no
/// `management_url` nor `management_urls` (a table that does is about some other endpoint, a
/// fake one or the test cluster for example).
pub fn with_test_broker(toml: &str) -> String {
    let mut config: toml::Table = toml::from_str(toml).expect("test config is TOML");
    let Some(toml::Value::Array(brokers)) = config.get_mut("brokers") else { return toml.to_string() };
    let test = broker();
    for table in brokers.iter_mut().filter_map(toml::Value::as_table_mut) {
        if table.contains_key("management_url") || table.contains_key("management_urls") {
            continue;
        }
        table.insert("management_url".into(), test.management.clone().into());
        table.entry("amqp_url").or_insert_with(|| test.amqp.clone().into());
        table.entry("prometheus_url").or_insert_with(|| test.prometheus.clone().into());
    }
    toml::to_string(&config).expect("a TOML table serializes")
}

/// Polls `check` until it returns `Some`, or fails the test after `deadline` saying what was
/// expected and what was last seen.
pub async fn wait_for<T, F, Fut>(what: &str, deadline: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, String>>,
{
    let started = Instant::now();
    let mut last = String::from("nothing checked yet");
    while started.elapsed() < deadline {
        match check().await {
            Ok(value) => return value,
            Err(seen) => last = seen,
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    panic!("timed out after {deadline:?} waiting for {what}; last seen: {last}");
}

/// How a page writes an identifier (a queue, vhost or message id; `web::format::filters::ident`):
/// in a `span.ident`, with a line break allowed after each `.`, `-`, `_`, `/`, `:` and `@`.
/// Written out again here, so a test that looks for a name in a page's HTML checks the markup.
#[allow(dead_code)]
pub fn ident(name: &str) -> String {
    let mut html = String::from("<span class=\"ident\">");
    for c in name.chars() {
        html.push(c);
        if ".-_/:@".contains(c) {
            html.push_str("<wbr>");
        }
    }
    html + "</span>"
}

/// A call to the test broker's management API; returns the status and body.
pub async fn management(method: reqwest::Method, path: &str, body: Option<Value>) -> (u16, String) {
    let mut request = reqwest::Client::new()
        .request(method, format!("{}{path}", broker().management))
        .basic_auth("guest", Some("guest"));
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().await.expect("the management API answers");
    (response.status().as_u16(), response.text().await.unwrap_or_default())
}
