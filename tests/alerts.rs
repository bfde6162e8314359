//! Threshold alerts against the real broker: a rule fires only after its condition held for
//! its `for`, survives a restart without firing again, and resolves when the queue drains.

mod common;

use std::time::Duration;

use common::{declare, publish, wait_for, TestVhost, Warren};
use lapin::options::QueuePurgeOptions;
use lapin::BasicProperties;
use serde_json::{json, Value};

/// The alert of rule `rule` on queue `queue`, if pending or firing.
async fn alert(warren: &Warren, rule: &str, queue: &str) -> Option<Value> {
    let (_, alerts) = warren.get_json("/api/v1/alerts").await;
    alerts.as_array()?.iter().find(|a| a["rule_id"] == rule && a["key"]["queue"] == queue).cloned()
}

fn common_encode(s: &str) -> String {
    warren::management::encode_segment(s)
}

fn time(v: &Value) -> chrono::DateTime<chrono::Utc> {
    v.as_str().expect("a time").parse().expect("RFC 3339")
}

async fn firings(warren: &Warren, rule: &str) -> usize {
    let (_, history) = warren.get_json("/api/v1/alerts/history").await;
    history.as_array().unwrap().iter().filter(|h| h["rule_id"] == rule && h["to"] == "firing").count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ready_above_ten_for_ten_seconds_fires_once_survives_a_restart_and_resolves() {
    let vhost = TestVhost::create("alert").await;
    let connection = vhost.connect().await;
    let channel = vhost.channel(&connection).await;
    declare(&channel, "work", false).await;
    let warren = Warren::for_vhost(&vhost.name, 1).await;

    // Bad input is refused with a message per field.
    let (status, body) = warren
        .post_json(
            "/api/v1/alerts/rules",
            json!({"id": "bad", "name": "", "metric": "ready", "comparator": ">", "threshold": 10,
                   "for_secs": -5, "severity": "warning", "scope": {"queue": "/x/"}}),
        )
        .await;
    assert_eq!(status, 422, "{body}");
    let fields: Vec<&str> =
        body["error"]["fields"].as_array().unwrap().iter().filter_map(|f| f["field"].as_str()).collect();
    for field in ["name", "for_secs", "scope.queue"] {
        assert!(fields.contains(&field), "{field} is reported: {body}");
    }
    let (status, body) =
        warren.post_json("/api/v1/alerts/rules", json!({"id": "x", "metric": "sideways", "severity": "warning"})).await;
    assert_eq!((status, body["error"]["code"].as_str()), (422, Some("invalid")), "{body}");

    let rule = json!({"id": "deep", "name": "Deep work queue", "metric": "ready", "comparator": ">", "threshold": 10,
                      "for_secs": 10, "severity": "warning", "scope": {"vhost": vhost.name, "queue": "work"}});
    let (status, body) = warren.post_json("/api/v1/alerts/rules", rule.clone()).await;
    assert_eq!(status, 201, "{body}");
    let (status, _) = warren.post_json("/api/v1/alerts/rules", rule).await;
    assert_eq!(status, 409, "ids are unique");

    publish(&channel, "work", 11, BasicProperties::default()).await;
    let pending = wait_for("the alert to be pending", Duration::from_secs(20), || async {
        match alert(&warren, "deep", "work").await {
            Some(a) if a["phase"] == "pending" => Ok(a),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    let active_since = time(&pending["active_since"]);
    // The preview agrees: the queue matches and its condition holds.
    let (_, preview) = warren
        .post_json(
            "/api/v1/alerts/rules/preview",
            json!({"id": "p", "name": "p", "metric": "ready", "comparator": ">", "threshold": 10,
                   "severity": "info", "scope": {"vhost": vhost.name}}),
        )
        .await;
    assert_eq!((preview["matches"].as_u64(), preview["holding"].as_u64()), (Some(1), Some(1)), "{preview}");

    // Never firing before 10 s have passed since it became pending; firing soon after.
    let firing = wait_for("the alert to fire", Duration::from_secs(30), || async {
        let a = alert(&warren, "deep", "work").await.expect("still there");
        let now = chrono::Utc::now();
        if a["phase"] == "firing" {
            return Ok(a);
        }
        assert!(now - active_since < chrono::Duration::seconds(12), "still {} at {now}: {a}", a["phase"]);
        Err(a.to_string())
    })
    .await;
    let fired_at = time(&firing["fired_at"]);
    // Shown on the alerts page, the overview and the queue page.
    for page in ["/alerts".to_string(), "/".to_string(), format!("/queues/local/{}/work", common_encode(&vhost.name))] {
        let (status, text) = warren.get_text(&page).await;
        assert_eq!(status, 200);
        assert!(text.contains("Deep work queue") && text.contains("firing"), "{page} shows the alert: {text}");
    }
    assert!(fired_at - active_since >= chrono::Duration::seconds(10), "fired {fired_at}, pending since {active_since}");
    assert_eq!(firings(&warren, "deep").await, 1);

    // A restart neither forgets it nor fires it again.
    let warren = warren.restart().await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let after = alert(&warren, "deep", "work").await.expect("remembered");
    assert_eq!((after["phase"].as_str(), time(&after["fired_at"])), (Some("firing"), fired_at), "{after}");
    assert_eq!(firings(&warren, "deep").await, 1, "not fired a second time");

    // Drained: it resolves.
    channel.queue_purge("work", QueuePurgeOptions::default()).await.unwrap();
    wait_for("the alert to resolve", Duration::from_secs(20), || async {
        match alert(&warren, "deep", "work").await {
            None => Ok(()),
            Some(a) => Err(a.to_string()),
        }
    })
    .await;
    let (_, history) = warren.get_json("/api/v1/alerts/history").await;
    assert_eq!(history[0]["to"], "resolved", "{history}");
    warren.stop().await;
    connection.close(0, "done").await.ok();
}

/// The rule editor: errors at the field, the typed values kept, and a preview of the queues
/// the rule would match.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rule_editor_reports_errors_at_the_field_and_previews_matches() {
    let vhost = TestVhost::create("alertform").await;
    let connection = vhost.connect().await;
    let channel = vhost.channel(&connection).await;
    declare(&channel, "orders", false).await;
    publish(&channel, "orders", 3, BasicProperties::default()).await;
    let warren = Warren::for_vhost(&vhost.name, 1).await;
    wait_for("orders listed with 3 ready", Duration::from_secs(20), || async {
        match warren.queue(&vhost.name, "orders").await {
            Some(q) if q["ready"] == 3 => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    let post = |path: &'static str, body: String| {
        warren.http.post(warren.url(path)).header("content-type", "application/x-www-form-urlencoded").body(body).send()
    };
    let vhost_field = common_encode(&vhost.name);
    let preview = post(
        "/alerts/preview",
        format!("id=a&name=A&vhost={vhost_field}&queue=ord*&metric=ready&comparator=%3E&threshold=2&severity=info"),
    )
    .await
    .unwrap()
    .text()
    .await
    .unwrap();
    assert!(preview.contains("orders") && preview.contains("holds"), "{preview}");

    let bad = post("/alerts/rules", "id=a&name=A&metric=ready&comparator=%3E&threshold=lots&severity=info".into())
        .await
        .unwrap();
    assert_eq!(bad.status().as_u16(), 422);
    let page = bad.text().await.unwrap();
    assert!(
        page.contains("field-error") && page.contains("&#34;lots&#34; is not a number") && page.contains("value=\"lots\""),
        "{page}"
    );

    let good = post(
        "/alerts/rules",
        format!("id=a&name=Orders+waiting&vhost={vhost_field}&queue=orders&metric=ready&comparator=%3E&threshold=2&for_secs=0&severity=info"),
    )
    .await
    .unwrap();
    assert!(good.url().path() == "/alerts" && good.status().is_success(), "{}", good.status());
    let (_, rules) = warren.get_json("/api/v1/alerts/rules").await;
    assert_eq!(rules[0]["id"], "a", "{rules}");
    let (_, export) = warren.get_text("/api/v1/alerts/rules/export").await;
    assert!(export.contains("[[alerts]]") && export.contains("id = \"a\""), "{export}");
    let config = warren::config::Config::from_toml(&export).expect("the export is a valid config file");
    assert_eq!(config.alerts.len(), 1);
    warren.stop().await;
    connection.close(0, "done").await.ok();
}
