//! Issue 36, case 7: `/metrics` as Prometheus expects it. Against a real warren watching a
//! real RabbitMQ vhost, checked with Prometheus' own `promtool check metrics` (Debian's
//! `prometheus` package; `.ci/run` installs it): counters for what the broker counts, so that
//! `rate()` works; label sets that never change; endpoints as templates, not vhosts; gzip;
//! process metrics; the build's commit.

mod common;

use std::io::Write;
use std::time::Duration;

use common::{declare, publish, wait_for, TestVhost, Warren};
use lapin::options::{BasicAckOptions, BasicGetOptions};
use lapin::BasicProperties;

fn sample<'a>(text: &'a str, metric: &str, queue: &str) -> Option<&'a str> {
    text.lines().find(|l| l.starts_with(&format!("{metric}{{")) && l.contains(&format!("queue=\"{queue}\"")))
}

fn value(line: &str) -> f64 {
    line.rsplit(' ').next().unwrap().parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_follow_prometheus_conventions_and_pass_promtool() {
    let vhost = TestVhost::create("promtool").await;
    let connection = vhost.connect().await;
    let channel = vhost.channel(&connection).await;
    declare(&channel, "orders", false).await;
    publish(&channel, "orders", 5, BasicProperties::default()).await;
    for _ in 0..2 {
        let got =
            channel.basic_get("orders".into(), BasicGetOptions { no_ack: false }).await.unwrap().expect("a message");
        got.delivery.ack(BasicAckOptions::default()).await.unwrap();
    }
    let warren = Warren::for_vhost(&vhost.name, 1).await;
    // The broker's counters reach warren with its next stats emission and listing. The vhost's
    // come from another listing, which can lag the queues' by a stats emission (measured in a
    // CI run: the queue's 5 beside the vhost's 0).
    let vhost_published = |text: &str| {
        text.lines().find(|l| l.starts_with("warren_vhost_published_total{") && l.contains(&vhost.name)).map(value)
    };
    let text = wait_for("the queue's and the vhost's counters in /metrics", Duration::from_secs(90), || async {
        let (status, text) = warren.get_text("/metrics").await;
        let published = sample(&text, "warren_queue_published_total", "orders").map(value);
        let acked = sample(&text, "warren_queue_acknowledged_total", "orders").map(value);
        let in_vhost = vhost_published(&text);
        if status == 200 && published == Some(5.0) && acked == Some(2.0) && in_vhost == Some(5.0) {
            Ok(text)
        } else {
            Err(format!("status {status}: published {published:?}, acknowledged {acked:?}, in the vhost {in_vhost:?}"))
        }
    })
    .await;

    // Counters are typed so, and rates stay gauges beside them.
    assert!(text.contains("# TYPE warren_queue_published_total counter"), "{text}");
    assert!(text.contains("# TYPE warren_queue_delivered_total counter"));
    assert!(text.contains("# TYPE warren_vhost_published_total counter"));
    assert!(text.contains("# TYPE warren_queue_publish_rate gauge"));
    assert_eq!(sample(&text, "warren_queue_delivered_total", "orders").map(value), Some(2.0));
    assert_eq!(vhost_published(&text), Some(5.0), "the vhost's publish counter");

    // The age's series keeps its labels whatever its source; the source is a gauge of its own.
    if let Some(age) = sample(&text, "warren_queue_oldest_message_age_seconds", "orders") {
        assert!(!age.contains("source=") && !age.contains("lower_bound="), "{age}");
    }
    assert!(text.contains("# TYPE warren_queue_oldest_message_age_estimated gauge"));
    // No vhost in an endpoint label: a vhost is no endpoint, and each would be a series.
    for line in text.lines().filter(|l| l.starts_with("warren_broker_calls_total{")) {
        assert!(!line.contains(&vhost.name), "{line}");
    }
    assert!(text.contains("endpoint=\"/api/queues/:vhost\""), "listings counted under their template");
    // The process and the build.
    for name in [
        "process_cpu_seconds_total ",
        "process_resident_memory_bytes ",
        "process_open_fds ",
        "process_start_time_seconds ",
    ] {
        assert!(text.lines().any(|l| l.starts_with(name)), "{name}");
    }
    let build = text.lines().find(|l| l.starts_with("warren_build_info{")).expect("build info");
    assert!(build.contains("version=\"") && build.contains("commit=\""), "{build}");
    assert!(!text.contains("warren_node_fd_total"), "a gauge named like a counter");

    // gzip when asked, as Prometheus asks.
    let raw = reqwest::Client::builder().no_gzip().build().unwrap();
    let response = raw.get(warren.url("/metrics")).header("accept-encoding", "gzip").send().await.unwrap();
    assert_eq!(response.headers().get("content-encoding").map(|v| v.to_str().unwrap()), Some("gzip"));
    let zipped = response.bytes().await.unwrap().len();
    assert!(zipped * 3 < text.len(), "compressed: {zipped} bytes of {}", text.len());

    // Prometheus' own linter.
    let mut file = tempfile::NamedTempFile::new().unwrap();
    file.write_all(text.as_bytes()).unwrap();
    let checked = std::process::Command::new("promtool")
        .arg("check")
        .arg("metrics")
        .stdin(std::fs::File::open(file.path()).unwrap())
        .output()
        .unwrap_or_else(|e| panic!("promtool (Debian's prometheus package, `.ci/run` installs it): {e}"));
    let said = format!("{}{}", String::from_utf8_lossy(&checked.stdout), String::from_utf8_lossy(&checked.stderr));
    assert!(checked.status.success() && said.trim().is_empty(), "promtool check metrics: {said}");
    warren.stop().await;
    connection.close(0, "done".into()).await.ok();
}
