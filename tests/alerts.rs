//! Threshold alerts against the real broker: a rule fires only after its condition held for
//! its `for`, survives a restart without firing again, and resolves when the queue drains.

mod common;

use std::time::Duration;

use std::sync::{Arc, Mutex};

use common::{declare, publish, wait_for, TestVhost, Warren};
use lapin::options::QueuePurgeOptions;
use lapin::BasicProperties;
use serde_json::{json, Value};

/// A webhook receiver on loopback: it keeps every JSON body it gets; when `hang` is set it
/// never answers.
#[derive(Clone, Default)]
struct Receiver {
    bodies: Arc<Mutex<Vec<Value>>>,
}

impl Receiver {
    async fn start(hang: bool) -> (Receiver, String) {
        let receiver = Receiver::default();
        let kept = receiver.clone();
        let app = axum::Router::new().route(
            "/hook/{token}",
            axum::routing::post(move |axum::Json(body): axum::Json<Value>| {
                let kept = kept.clone();
                async move {
                    kept.bodies.lock().unwrap().push(body);
                    if hang {
                        std::future::pending::<()>().await;
                    }
                    "ok"
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/hook/s3cr3t-token", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        (receiver, url)
    }

    /// The bodies of kind `kind` ("firing", "resolved", ...) about rule `rule`.
    fn of(&self, kind: &str, rule: &str) -> Vec<Value> {
        self.bodies.lock().unwrap().iter().filter(|b| b["kind"] == kind && b["rule"]["id"] == rule).cloned().collect()
    }
}

/// warren watching `vhost` every second, notifying the given webhooks, with `rules` declared.
async fn warren_notifying(vhost: &str, hooks: &[(&str, &str)], rules: &str) -> Warren {
    let mut toml = format!(
        "alert_repeat_secs = 0\n{rules}\n[[brokers]]\nname = \"local\"\n\
         vhosts_include = [{vhost:?}]\npoll_interval_secs = 1\n"
    );
    for (id, url) in hooks {
        toml.push_str(&format!("[[notifications]]\nid = {id:?}\nname = {id:?}\ntype = \"webhook\"\nurl = {url:?}\n"));
    }
    Warren::start(&toml).await
}

/// The alert of rule `rule` on queue `queue`, if pending or firing.
async fn alert(warren: &Warren, rule: &str, queue: &str) -> Option<Value> {
    let (_, alerts) = warren.get_json("/api/v1/alerts").await;
    alerts.as_array()?.iter().find(|a| a["rule_id"] == rule && a["key"]["queue"] == queue).cloned()
}

fn common_encode(s: &str) -> String {
    warren::broker::management::encode_segment(s)
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
    let (receiver, hook) = Receiver::start(false).await;
    let warren = warren_notifying(&vhost.name, &[("hook", &hook)], "").await;

    // Bad input is refused with a message per field.
    let (status, body) = warren
        .post_json(
            "/api/v1/alerts/rules",
            json!({"id": "bad", "name": "", "metric": "ready", "comparator": ">", "threshold": 10,
                   "for_secs": -5, "severity": "warning", "scope": {"queue": "/x(/"}}),
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
    wait_for("the firing notification", Duration::from_secs(10), || async {
        let sent = receiver.of("firing", "deep");
        if sent.len() == 1 {
            Ok(())
        } else {
            Err(format!("{sent:?}"))
        }
    })
    .await;
    let sent = &receiver.of("firing", "deep")[0];
    assert_eq!(
        (sent["alert"]["queue"].as_str(), sent["alert"]["value"].as_f64()),
        (Some("work"), Some(11.0)),
        "{sent}"
    );
    // The channel is listed without its token; the delivery is logged.
    let (_, channels) = warren.get_json("/api/v1/notifications/channels").await;
    assert!(!channels.to_string().contains("s3cr3t-token"), "{channels}");
    let (_, deliveries) = warren.get_json("/api/v1/notifications/deliveries").await;
    assert_eq!((deliveries[0]["outcome"].as_str(), deliveries[0]["http_status"].as_u64()), (Some("sent"), Some(200)));
    // The "send test notification" button.
    let (status, body) = warren.post_json("/api/v1/notifications/channels/hook/test", json!({})).await;
    assert_eq!((status, body["outcome"].as_str()), (200, Some("sent")), "{body}");
    assert_eq!(receiver.bodies.lock().unwrap().iter().filter(|b| b["kind"] == "test").count(), 1);
    let page = warren.http.post(warren.url("/alerts/channels/hook/test")).send().await.unwrap().text().await.unwrap();
    assert!(page.contains("Test notification sent to hook") && !page.contains("s3cr3t-token"), "{page}");

    // A restart neither forgets it nor fires it again.
    let warren = warren.restart().await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let after = alert(&warren, "deep", "work").await.expect("remembered");
    assert_eq!((after["phase"].as_str(), time(&after["fired_at"])), (Some("firing"), fired_at), "{after}");
    assert_eq!(firings(&warren, "deep").await, 1, "not fired a second time");
    assert_eq!(receiver.of("firing", "deep").len(), 1, "not notified a second time");

    // Drained: it resolves.
    channel.queue_purge("work".into(), QueuePurgeOptions::default()).await.unwrap();
    wait_for("the alert to resolve", Duration::from_secs(20), || async {
        match alert(&warren, "deep", "work").await {
            None => Ok(()),
            Some(a) => Err(a.to_string()),
        }
    })
    .await;
    let (_, history) = warren.get_json("/api/v1/alerts/history").await;
    assert_eq!(history[0]["to"], "resolved", "{history}");
    wait_for("the resolved notification", Duration::from_secs(10), || async {
        let sent = receiver.of("resolved", "deep");
        if sent.len() == 1 {
            Ok(())
        } else {
            Err(format!("{sent:?}"))
        }
    })
    .await;
    assert_eq!(receiver.of("firing", "deep").len(), 1);
    warren.stop().await;
    connection.close(0, "done".into()).await.ok();
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
        page.contains("field-error")
            && page.contains("&#34;lots&#34; is not a number")
            && page.contains("value=\"lots\""),
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
    // Edit it: the editor loads the rule, saving replaces it.
    let (status, editor) = warren.get_text("/alerts?edit=a").await;
    assert_eq!(status, 200);
    assert!(editor.contains("Edit rule a") && editor.contains("name=\"threshold\" value=\"2\""), "{editor}");
    let saved = post(
        "/alerts/rules",
        format!("editing=a&id=a&name=Orders+waiting&vhost={vhost_field}&queue=orders&metric=ready&comparator=%3E&threshold=5&for_secs=0&severity=info"),
    )
    .await
    .unwrap();
    assert!(saved.status().is_success(), "{}", saved.status());
    let (_, rule) = warren.get_json("/api/v1/alerts/rules/a").await;
    assert_eq!(rule["threshold"], 5.0, "{rule}");
    let (status, _) = warren.get_text("/alerts?edit=builtin-broker-unreachable").await;
    assert_eq!(status, 409, "the built-in rule is read-only");
    let (_, export) = warren.get_text("/api/v1/alerts/rules/export").await;
    assert!(export.contains("[[alerts]]") && export.contains("id = \"a\""), "{export}");
    let config = warren::config::Config::from_toml(&export).expect("the export is a valid config file");
    let wings = warren::Wings::read(&config).expect("the alerts wing reads the exported rules");
    assert_eq!(wings.rules.len(), 1);
    assert_eq!(wings.rules[0].threshold, Some(5.0));
    warren.stop().await;
    connection.close(0, "done".into()).await.ok();
}

const ANY_READY: &str = "[[alerts]]\nid = \"any\"\nname = \"Anything ready\"\nmetric = \"ready\"\ncomparator = \">\"\nthreshold = 0\nseverity = \"info\"\n";

/// A silence holds notifications back while the alert still fires; when it ends the
/// notification goes out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silence_suppresses_notifications_and_its_expiry_restores_them() {
    let vhost = TestVhost::create("silence").await;
    let connection = vhost.connect().await;
    let channel = vhost.channel(&connection).await;
    declare(&channel, "work", false).await;
    let (receiver, hook) = Receiver::start(false).await;
    let warren = warren_notifying(&vhost.name, &[("hook", &hook)], ANY_READY).await;
    let until = chrono::Utc::now() + chrono::Duration::seconds(8);
    let (status, body) =
        warren.post_json("/api/v1/silences", json!({"rule_id": "any", "until": until, "comment": "deploying"})).await;
    assert_eq!(status, 201, "{body}");
    let (status, _) = warren
        .post_json("/api/v1/silences", json!({"rule_id": "any", "until": chrono::Utc::now(), "comment": ""}))
        .await;
    assert_eq!(status, 422, "a silence in the past without a comment is refused");

    publish(&channel, "work", 1, BasicProperties::default()).await;
    let firing = wait_for("the alert to fire", Duration::from_secs(20), || async {
        match alert(&warren, "any", "work").await {
            Some(a) if a["phase"] == "firing" => Ok(a),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    assert_eq!(firing["silenced"], true);
    let sent = wait_for("the notification after the silence", Duration::from_secs(30), || async {
        let sent = receiver.of("firing", "any");
        if sent.is_empty() {
            Err("nothing yet".to_string())
        } else {
            Ok(sent)
        }
    })
    .await;
    assert!(chrono::Utc::now() >= until, "nothing was sent during the silence");
    assert_eq!(sent.len(), 1);
    warren.stop().await;
    connection.close(0, "done".into()).await.ok();
}

/// A webhook that never answers delays neither the poller nor the other channel.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hanging_webhook_delays_neither_the_poller_nor_another_channel() {
    let vhost = TestVhost::create("hang").await;
    let connection = vhost.connect().await;
    let channel = vhost.channel(&connection).await;
    declare(&channel, "work", false).await;
    let (hanging, hang_url) = Receiver::start(true).await;
    let (fast, fast_url) = Receiver::start(false).await;
    let warren = warren_notifying(&vhost.name, &[("hang", &hang_url), ("fast", &fast_url)], ANY_READY).await;

    publish(&channel, "work", 1, BasicProperties::default()).await;
    wait_for("the fast channel to be told", Duration::from_secs(15), || async {
        if fast.of("firing", "any").len() == 1 {
            Ok(())
        } else {
            Err("not yet".to_string())
        }
    })
    .await;
    assert_eq!(hanging.of("firing", "any").len(), 1, "the hanging one got the request and holds it");
    // The poller goes on: new messages show within a few polls.
    publish(&channel, "work", 4, BasicProperties::default()).await;
    wait_for("5 ready while the webhook hangs", Duration::from_secs(8), || async {
        match warren.queue(&vhost.name, "work").await {
            Some(q) if q["ready"] == 5 => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    assert!(hanging.of("firing", "any").len() == 1 && hanging.bodies.lock().unwrap().len() == 1);
    warren.stop().await;
    connection.close(0, "done".into()).await.ok();
}

/// Issue 19, cases 1 and 14: the alerts page's forms redirect (a reload shows the page again
/// and sends nothing) and say once what they did; the rules list shows a silenced rule; the
/// firing list is a fragment htmx refreshes in place.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alert_forms_redirect_with_a_notice_shown_once_and_the_firing_list_refreshes() {
    let vhost = TestVhost::create("alertforms").await;
    let (receiver, hook) = Receiver::start(false).await;
    let warren = warren_notifying(&vhost.name, &[("hook", &hook)], ANY_READY).await;
    let http = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
    let form = |path: &str, fields: &[(&str, &str)]| {
        let request = http.post(warren.url(path)).form(fields);
        async move {
            let response = request.send().await.unwrap();
            assert_eq!(response.status().as_u16(), 303, "{:?}", response.text().await);
            response.headers()["location"].to_str().unwrap().to_string()
        }
    };
    let page = |path: String| {
        let request = http.get(warren.url(&path));
        async move { request.send().await.unwrap().text().await.unwrap() }
    };

    let landing = form("/alerts/channels/hook/test", &[]).await;
    assert!(
        landing.starts_with("/alerts/channels?notice="),
        "back to the channels page, where the button is: {landing}"
    );
    let shown = page(landing.clone()).await;
    assert!(shown.contains("Test notification sent to hook"), "{shown}");
    let again = page(landing).await;
    assert!(!again.contains("Test notification sent"), "a notice is shown once: {again}");
    assert_eq!(receiver.bodies.lock().unwrap().len(), 1, "the reload sent nothing");

    let landing = form("/alerts/silences", &[("rule_id", "any"), ("hours", "2"), ("comment", "deploying")]).await;
    let shown = page(landing).await;
    assert!(shown.contains("Rule any silenced until"), "{shown}");
    assert!(shown.contains("class=\"signal info rule-silenced\">silenced until"), "the rules list says so: {shown}");

    let fragment = http.get(warren.url("/alerts")).header("hx-request", "true").send().await.unwrap();
    let fragment = fragment.text().await.unwrap();
    assert!(fragment.starts_with("<div id=\"firing\"") && fragment.contains("hx-trigger=\"every 5s\""), "{fragment}");
    assert!(!fragment.contains("<html") && fragment.contains("Updated "), "{fragment}");
    warren.stop().await;
}

/// Issue 19, case 7: with `public_url` set, a notification links to the alert's queue or
/// broker page under it, and "does not answer" says why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn notifications_link_back_and_say_why_a_broker_does_not_answer() {
    let vhost = TestVhost::create("alertlinks").await;
    let connection = vhost.connect().await;
    let channel = vhost.channel(&connection).await;
    declare(&channel, "work", false).await;
    let (receiver, hook) = Receiver::start(false).await;
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let toml = format!(
        "public_url = \"https://ops.example/warren/\"\nalert_repeat_secs = 0\n{ANY_READY}\n\
         [[alerts]]\nid = \"down\"\nname = \"Down\"\nmetric = \"broker_unreachable\"\nseverity = \"critical\"\n\n\
         [[brokers]]\nname = \"local\"\nvhosts_include = [{:?}]\npoll_interval_secs = 1\n\n\
         [[brokers]]\nname = \"gone\"\nmanagement_url = \"http://127.0.0.1:{closed}\"\nprometheus_url = \"off\"\n\
         poll_interval_secs = 1\nrequest_timeout_secs = 2\n\n\
         [[notifications]]\nid = \"hook\"\nname = \"hook\"\ntype = \"webhook\"\nurl = {hook:?}\n",
        vhost.name
    );
    let warren = Warren::start(&toml).await;
    publish(&channel, "work", 1, BasicProperties::default()).await;
    let (ready, down) = wait_for("both notifications", Duration::from_secs(40), || async {
        match (receiver.of("firing", "any").first(), receiver.of("firing", "down").first()) {
            (Some(r), Some(d)) => Ok((r.clone(), d.clone())),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    let queue_link = format!("https://ops.example/warren/queues/local/{}/work", common_encode(&vhost.name));
    assert_eq!(ready["dashboard_url"], queue_link, "{ready}");
    assert_eq!(down["dashboard_url"], "https://ops.example/warren/brokers/gone", "{down}");
    let description = down["description"].as_str().unwrap();
    assert!(description.contains("does not answer: ") && description.contains("unreachable"), "{description}");
    warren.stop().await;
    connection.close(0, "done".into()).await.ok();
}

/// Issue 34, cases 6 and 7: no page said where one was; "Dead letters" led to a page titled
/// "Queues"; without users, the page where the first one is added was linked from nowhere; nine
/// built-in rule rows repeated one sentence.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pages_say_where_one_is_and_built_in_rules_are_explained_once() {
    let vhost = TestVhost::create("navigation").await;
    let warren = Warren::for_vhost(&vhost.name, 2).await;
    for (path, current) in [
        ("/", "Overview"),
        ("/queues", "Queues"),
        ("/queues?dlq=true", "Dead letters"),
        ("/nodes", "Nodes"),
        ("/alerts", "Alerts"),
        ("/audit", "Audit log"),
        ("/access", "Users"),
    ] {
        let (status, page) = warren.get_text(path).await;
        assert_eq!(status, 200, "{path}");
        assert!(page.contains(&format!("aria-current=\"page\">{current}</a>")), "{path} marks {current}: {page}");
        assert_eq!(page.matches("aria-current").count(), 1, "{path}: one current entry");
        assert!(page.contains("/access\""), "{path}: the users page is linked without users: {page}");
    }
    let (_, page) = warren.get_text("/queues?dlq=true").await;
    assert!(page.contains("<h1>Dead-letter queues</h1>"), "{page}");
    let (_, page) = warren.get_text("/alerts").await;
    assert!(!page.contains("is built in; write a rule"), "{page}");
    // The blank form previews without errors, and a rule without an id takes one from its name.
    assert!(page.contains("Preview: type a threshold to see what would match now"), "{page}");
    assert!(!page.contains("field-error") && !page.contains("must be 1 to"), "{page}");
    let created = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
        .post(warren.url("/alerts/rules"))
        .form(&[
            ("id", ""),
            ("name", "Orders backlog > 1,000"),
            ("metric", "ready"),
            ("comparator", ">"),
            ("threshold", "1000"),
            ("severity", "warning"),
        ])
        .send()
        .await
        .unwrap();
    assert_eq!(created.status().as_u16(), 303, "{:?}", created.text().await);
    let (status, rule) = warren.get_json("/api/v1/alerts/rules/orders-backlog-1-000").await;
    assert_eq!((status, rule["name"].as_str()), (200, Some("Orders backlog > 1,000")), "{rule}");
    assert_eq!(page.matches("Rules marked \"built in\" exist while").count(), 1, "{page}");
    warren.stop().await;
}

/// Issue 34, cases 5 and 6: a silenced alert offers to end its silence, not a second one; the
/// notice says the end the table says (it was a second early); the channels page lists each
/// channel masked, with its last delivery and its last failure.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silenced_alert_offers_its_end_and_the_channels_page_shows_each_channels_deliveries() {
    let vhost = TestVhost::create("silenceend").await;
    let connection = vhost.connect().await;
    let channel = vhost.channel(&connection).await;
    declare(&channel, "work", false).await;
    let (receiver, hook) = Receiver::start(false).await;
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let dead = format!("http://127.0.0.1:{closed}/hook/s3cr3t-token");
    let warren = warren_notifying(&vhost.name, &[("hook", &hook), ("dead", &dead)], ANY_READY).await;
    publish(&channel, "work", 1, BasicProperties::default()).await;
    wait_for("the alert to fire", Duration::from_secs(20), || async {
        match alert(&warren, "any", "work").await {
            Some(a) if a["phase"] == "firing" => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    let firing = |page: &str| page.split("<div id=\"firing\"").nth(1).unwrap_or_default().to_string();
    let (_, page) = warren.get_text("/alerts").await;
    assert!(firing(&page).contains(">Silence</button>") && !firing(&page).contains("end-silence"), "{page}");

    let http = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
    let fields = [("rule_id", "any"), ("hours", "1"), ("comment", "deploying")];
    let landing = http.post(warren.url("/alerts/silences")).form(&fields).send().await.unwrap();
    let landing = landing.headers()["location"].to_str().unwrap().to_string();
    let (_, page) = warren.get_text(&landing).await;
    let until = page.split("Rule any silenced until ").nth(1).and_then(|t| t.split('.').next()).expect("a notice");
    let silences = page.split("<h2>Silences</h2>").nth(1).expect("the silences table");
    assert!(silences.contains(&format!("<td>{until}</td>")), "the table says the notice's end, {until}: {silences}");
    let shown = firing(&page);
    assert!(shown.contains("class=\"inline end-silence\"") && shown.contains(">End the rule&#39;s silence</button>"));
    assert!(!shown.contains(">Silence</button>"), "a silenced alert is not offered a second silence: {shown}");
    let end = shown.split("action=\"").nth(1).and_then(|a| a.split('"').next()).expect("the end form's action");
    assert!(end.starts_with("/alerts/silences/") && end.ends_with("/expire"), "{end}");
    assert_eq!(http.post(warren.url(end)).send().await.unwrap().status().as_u16(), 303);
    let (_, page) = warren.get_text("/alerts").await;
    assert!(firing(&page).contains(">Silence</button>"), "ended: {page}");

    // The notification went to hook and failed on dead; the channels page says both.
    wait_for("a delivery logged on each channel", Duration::from_secs(30), || async {
        let (_, log) = warren.get_json("/api/v1/notifications/deliveries").await;
        let on = |id: &str| log.as_array().unwrap().iter().any(|d| d["channel_id"] == id);
        (on("hook") && on("dead") && !receiver.of("firing", "any").is_empty())
            .then_some(())
            .ok_or_else(|| log.to_string())
    })
    .await;
    let (status, page) = warren.get_text("/alerts/channels").await;
    assert_eq!(status, 200);
    assert!(!page.contains("s3cr3t-token"), "no secret on the page: {page}");
    let row = |id: &str| {
        let start = page.find(&format!("<tr data-channel=\"{id}\">")).unwrap_or_else(|| panic!("{id}: {page}"));
        page[start..start + page[start..].find("</tr>").unwrap()].to_string()
    };
    let (hook_row, dead_row) = (row("hook"), row("dead"));
    assert!(hook_row.contains("<td>webhook</td>") && hook_row.contains(": sent</td>"), "{hook_row}");
    assert!(hook_row.contains("none among the last 500 deliveries"), "no failure on hook: {hook_row}");
    assert!(dead_row.contains("class=\"error\">") && dead_row.contains("attempt 1"), "dead's failure: {dead_row}");
    assert!(dead_row.replace("<wbr>", "").contains(&format!("http://127.0.0.1:{closed}/…")), "masked: {dead_row}");
    let (_, only) = warren.get_text("/alerts/channels?channel=dead").await;
    let deliveries = only.split("<table class=\"grid deliveries\">").nth(1).expect("deliveries");
    assert!(deliveries.contains("<td>dead</td>") && !deliveries.contains("<td>hook</td>"), "{deliveries}");
    let (_, alerts) = warren.get_text("/alerts").await;
    assert!(alerts.contains("2 channels are configured") && alerts.contains("href=\"/alerts/channels\""), "{alerts}");
    warren.stop().await;
    connection.close(0, "done".into()).await.ok();
}
