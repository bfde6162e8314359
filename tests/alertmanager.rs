//! Alertmanager as a notification channel (issue 36, must-have 9), against a real Alertmanager
//! (Debian's `prometheus-alertmanager`, started by the test on a port of its own, never the
//! system service) and a rule firing on the real broker: the alert shows in Alertmanager with its
//! labels, annotations and link, stays active past `resolve_timeout` and past its own `endsAt`
//! because warren re-sends it, and ends there when it resolves in warren. An Alertmanager that
//! is down at first gets the firing through the outbox's retries.

mod common;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use common::{declare, encode, publish, wait_for, TestVhost, Warren};
use lapin::options::QueuePurgeOptions;
use lapin::BasicProperties;
use serde_json::{json, Value};

/// A `prometheus-alertmanager` process of the test's own, killed when dropped.
struct Alertmanager {
    child: Mutex<Child>,
    base: String,
    _dir: tempfile::TempDir,
}

impl Alertmanager {
    /// Starts Alertmanager on `port` with `resolve_timeout` as given, and waits until it is
    /// ready. A missing binary fails the test: `.ci/run` installs it.
    async fn start(port: u16, resolve_timeout: &str) -> Alertmanager {
        let dir = tempfile::tempdir().expect("temp dir");
        let config = dir.path().join("alertmanager.yml");
        std::fs::write(
            &config,
            format!(
                "global:\n  resolve_timeout: {resolve_timeout}\nroute:\n  receiver: nobody\n  group_wait: 1s\n\
                 receivers:\n  - name: nobody\n"
            ),
        )
        .expect("write the Alertmanager config");
        let child = Command::new("prometheus-alertmanager")
            .arg(format!("--config.file={}", config.display()))
            .arg(format!("--storage.path={}", dir.path().join("data").display()))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            // No gossip: a cluster listener would need a port of its own and peers.
            .arg("--cluster.listen-address=")
            .stdout(Stdio::null())
            .stderr(log_file(dir.path()))
            .spawn()
            .unwrap_or_else(|e| {
                panic!("cannot start prometheus-alertmanager (apt-get install prometheus-alertmanager): {e}")
            });
        let am = Alertmanager { child: Mutex::new(child), base: format!("http://127.0.0.1:{port}"), _dir: dir };
        let http = reqwest::Client::new();
        let ready = format!("{}/-/ready", am.base);
        let log = am._dir.path().join("alertmanager.log");
        wait_for("Alertmanager to be ready", Duration::from_secs(20), || async {
            if let Ok(Some(status)) = am.child.lock().unwrap().try_wait() {
                panic!("Alertmanager exited ({status}): {}", std::fs::read_to_string(&log).unwrap_or_default());
            }
            match http.get(&ready).send().await {
                Ok(r) if r.status().is_success() => Ok(()),
                other => Err(format!("{other:?}")),
            }
        })
        .await;
        am
    }

    /// The active alerts of rule `rule_id` (Alertmanager lists no resolved alert).
    async fn active(&self, rule_id: &str) -> Vec<Value> {
        let alerts: Value = reqwest::get(format!("{}/api/v2/alerts", self.base))
            .await
            .expect("Alertmanager answers")
            .json()
            .await
            .expect("JSON");
        let alerts = alerts.as_array().expect("an array").iter();
        alerts.filter(|a| a["labels"]["rule_id"] == rule_id && a["status"]["state"] == "active").cloned().collect()
    }
}

fn log_file(dir: &Path) -> Stdio {
    std::fs::File::create(dir.join("alertmanager.log")).map(Stdio::from).unwrap_or(Stdio::null())
}

impl Drop for Alertmanager {
    fn drop(&mut self) {
        let child = self.child.get_mut().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Err(e) = child.kill() {
            eprintln!("could not stop Alertmanager: {e}");
        }
        child.wait().ok();
    }
}

fn time(v: &Value) -> DateTime<Utc> {
    v.as_str().expect("a time").parse().expect("RFC 3339")
}

/// The delivery log rows of channel `am` about rule `rule`.
async fn deliveries(warren: &Warren, rule: &str) -> Vec<Value> {
    let (_, rows) = warren.get_json("/api/v1/notifications/deliveries").await;
    rows.as_array()
        .expect("an array")
        .iter()
        .filter(|r| r["channel_id"] == "am" && r["rule_id"] == rule)
        .cloned()
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_firing_alert_stays_active_in_alertmanager_while_it_fires_and_ends_there_when_it_resolves() {
    let vhost = TestVhost::create("alertmanager").await;
    let connection = vhost.connect().await;
    let channel = vhost.channel(&connection).await;
    declare(&channel, "work", false).await;
    // Alertmanager's port, not listened on yet: the first attempts fail.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let resend_secs = 3;
    let toml = format!(
        "public_url = \"https://ops.example/warren/\"\nalert_repeat_secs = 0\n\
         [[alerts]]\nid = \"deep\"\nname = \"Deep work queue\"\nmetric = \"ready\"\ncomparator = \">\"\nthreshold = 0\n\
         severity = \"warning\"\nscope = {{ vhost = {vhost:?}, queue = \"work\" }}\n\n\
         [[brokers]]\nname = \"local\"\nvhosts_include = [{vhost:?}]\npoll_interval_secs = 1\n\n\
         [[notifications]]\nid = \"am\"\nname = \"Alertmanager\"\ntype = \"alertmanager\"\n\
         url = \"http://127.0.0.1:{port}/\"\nlabels = {{ team = \"ops\" }}\nresend_secs = {resend_secs}\n",
        vhost = vhost.name
    );
    let warren = Warren::start(&toml).await;

    publish(&channel, "work", 1, BasicProperties::default()).await;
    wait_for("a failed attempt while Alertmanager is down", Duration::from_secs(30), || async {
        let rows = deliveries(&warren, "deep").await;
        if rows.iter().any(|r| r["kind"] == "firing" && r["outcome"] == "failed") {
            Ok(())
        } else {
            Err(format!("{rows:?}"))
        }
    })
    .await;

    let am = Alertmanager::start(port, "10s").await;
    let alert = wait_for("the alert active in Alertmanager", Duration::from_secs(30), || async {
        match am.active("deep").await.as_slice() {
            [alert] => Ok(alert.clone()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    assert_eq!(
        alert["labels"],
        json!({"alertname": "Deep work queue", "severity": "warning", "broker": "local", "vhost": vhost.name,
               "queue": "work", "rule_id": "deep", "source": "warren", "team": "ops"}),
        "{alert}"
    );
    let annotations = &alert["annotations"];
    assert_eq!((annotations["value"].as_str(), annotations["threshold"].as_str()), (Some("1"), Some("> 0")), "{alert}");
    let summary = annotations["summary"].as_str().unwrap();
    assert!(
        summary.starts_with("Deep work queue (warning): queue 'work'") && !summary.contains("[FIRING]"),
        "{summary}"
    );
    assert!(annotations["description"].as_str().is_some_and(|d| d.contains("ready is 1")), "{alert}");
    let link = format!("https://ops.example/warren/queues/local/{}/work", encode(&vhost.name));
    assert_eq!(alert["generatorURL"], link, "{alert}");
    // The firing itself got through the outbox's retries too.
    wait_for("the firing delivered after the retries", Duration::from_secs(30), || async {
        let rows = deliveries(&warren, "deep").await;
        if rows.iter().any(|r| r["kind"] == "firing" && r["outcome"] == "sent") {
            Ok(())
        } else {
            Err(format!("{rows:?}"))
        }
    })
    .await;

    // Past Alertmanager's resolve_timeout (10 s) and past the first endsAt (4 × 3 s), still
    // active: warren re-sends it.
    let first_ends_at = time(&alert["endsAt"]);
    let since = Instant::now();
    let mut last_ends_at = first_ends_at;
    while since.elapsed() < Duration::from_secs(14) || Utc::now() < first_ends_at + chrono::Duration::seconds(2) {
        let active = am.active("deep").await;
        assert_eq!(active.len(), 1, "still active after {:?}: {active:?}", since.elapsed());
        last_ends_at = time(&active[0]["endsAt"]);
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert!(last_ends_at > first_ends_at, "re-sent with a later endsAt: {first_ends_at} then {last_ends_at}");

    // Drained: resolved in warren, and ended in Alertmanager by the resolve, before the lease of
    // the last re-send ran out.
    channel.queue_purge("work".into(), QueuePurgeOptions::default()).await.unwrap();
    let last_ends_at = Mutex::new(last_ends_at);
    wait_for("the alert to end in Alertmanager", Duration::from_secs(20), || async {
        let active = am.active("deep").await;
        match active.last() {
            None => Ok(()),
            Some(a) => {
                *last_ends_at.lock().unwrap() = time(&a["endsAt"]);
                Err(format!("{active:?}"))
            }
        }
    })
    .await;
    let last_ends_at = last_ends_at.into_inner().unwrap();
    assert!(Utc::now() < last_ends_at, "ended by the resolve, not by expiry at {last_ends_at}");
    let rows = deliveries(&warren, "deep").await;
    assert!(rows.iter().any(|r| r["kind"] == "resolved" && r["outcome"] == "sent"), "{rows:?}");
    // It is not brought back by a re-send.
    tokio::time::sleep(Duration::from_secs(resend_secs + 1)).await;
    assert!(am.active("deep").await.is_empty());

    // The test button posts a short-lived alert.
    let (status, body) = warren.post_json("/api/v1/notifications/channels/am/test", json!({})).await;
    assert_eq!((status, body["outcome"].as_str()), (200, Some("sent")), "{body}");
    let test = wait_for("the test alert in Alertmanager", Duration::from_secs(10), || async {
        match am.active("test").await.as_slice() {
            [alert] => Ok(alert.clone()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    assert_eq!(
        (test["labels"]["severity"].as_str(), test["labels"]["broker"].as_str()),
        (Some("info"), Some("warren"))
    );
    let lasts = time(&test["endsAt"]) - Utc::now();
    assert!(lasts <= chrono::Duration::seconds(4 * resend_secs as i64), "ends by itself soon: {test}");

    warren.stop().await;
    connection.close(0, "done".into()).await.ok();
}

/// A URL Alertmanager cannot take is refused at the field, like a webhook's.
#[test]
fn a_bad_alertmanager_url_is_a_field_error() {
    for (url, problem) in [
        ("alertmanager", "url: is not a URL"),
        ("ftp://alertmanager:9093", "must start with http:// or https://"),
        ("http://alertmanager:9093/api/v2/alerts", "warren adds /api/v2/alerts"),
    ] {
        let toml = format!(
            "[[notifications]]\nid = \"am\"\nname = \"AM\"\ntype = \"alertmanager\"\nurl = {url:?}\n\
             [[brokers]]\nname = \"local\"\n"
        );
        // The alerts wing reads the channels where warren starts and in every command (`Wings`).
        let read = warren::config::Config::from_toml(&toml).and_then(|config| warren::Wings::read(&config));
        let error = read.err().expect(url).to_string();
        assert!(error.contains("notifications[0].url") && error.contains(problem), "{url}: {error}");
    }
}
