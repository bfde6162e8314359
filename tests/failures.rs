//! A broker that is unreachable, answers 500, or answers garbage: warren keeps serving, shows the
//! broker as down with the reason, and recovers by itself when the broker answers again.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use common::{broker, declare, publish, wait_for, TestVhost, Warren};
use lapin::BasicProperties;
use serde_json::Value;

#[derive(Clone, Copy, Debug, PartialEq)]
enum Mode {
    Error500,
    /// A proxy's error page: HTML, not the management API.
    HtmlPage,
    Garbage,
    Proxy,
}

/// Stands where the management API should be and misbehaves as told; in `Proxy` mode it
/// forwards to the real management API.
async fn fake_management(State(mode): State<Arc<Mutex<Mode>>>, request: Request) -> Response {
    let mode = *mode.lock().unwrap();
    match mode {
        Mode::Error500 => (StatusCode::INTERNAL_SERVER_ERROR, "{\"error\":\"boom\"}").into_response(),
        Mode::HtmlPage => (
            StatusCode::BAD_GATEWAY,
            [("content-type", "text/html")],
            "<html>\r\n<head><title>502 Bad Gateway</title></head>\r\n<body>\r\n<center><h1>502 Bad Gateway</h1></center>\r\n\
             <hr><center>nginx/1.22.1</center>\r\n</body>\r\n</html>",
        )
            .into_response(),
        Mode::Garbage => {
            (StatusCode::OK, [("content-type", "application/json")], "{\"items\": [1, 2,, <html>").into_response()
        }
        Mode::Proxy => {
            let path = request.uri().path_and_query().map(|p| p.as_str().to_string()).unwrap_or_default();
            let auth = request.headers().get("authorization").cloned();
            let mut forward = reqwest::Client::new().get(format!("{}{path}", broker().management));
            if let Some(auth) = auth {
                forward = forward.header("authorization", auth);
            }
            match forward.send().await {
                Ok(answer) => {
                    let status = StatusCode::from_u16(answer.status().as_u16()).unwrap();
                    let bytes = answer.bytes().await.unwrap_or_default();
                    Response::builder()
                        .status(status)
                        .header("content-type", "application/json")
                        .body(Body::from(bytes))
                        .unwrap()
                }
                Err(e) => (StatusCode::BAD_GATEWAY, e.to_string()).into_response(),
            }
        }
    }
}

async fn broker_status(warren: &Warren) -> Value {
    let (status, brokers) = warren.get_json("/api/v1/brokers").await;
    assert_eq!(status, 200, "the API keeps serving");
    brokers[0].clone()
}

async fn wait_down(warren: &Warren, reason_contains: &str) -> Value {
    wait_for(&format!("broker down with a reason containing {reason_contains:?}"), Duration::from_secs(30), || async {
        let b = broker_status(warren).await;
        let error = b["status"]["error"].as_str().unwrap_or_default().to_string();
        if b["status"]["up"] == false && error.contains(reason_contains) {
            Ok(b)
        } else {
            Err(format!("up={} error={error:?}", b["status"]["up"]))
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broker_failures_show_as_down_and_recover() {
    let vhost = TestVhost::create("failures").await;
    let connection = vhost.connect().await;
    let channel = vhost.channel(&connection).await;
    declare(&channel, "survivor", false).await;
    publish(&channel, "survivor", 7, BasicProperties::default()).await;

    // A port that nothing listens on (yet).
    let port = {
        let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        probe.local_addr().unwrap().port()
    };
    let warren = Warren::start(&format!(
        "[[brokers]]\nname = \"local\"\nmanagement_url = \"http://127.0.0.1:{port}\"\namqp_url = {:?}\nprometheus_url = {:?}\n\
         vhosts_include = [{:?}]\npoll_interval_secs = 1\nrequest_timeout_secs = 2\n",
        broker().amqp,
        broker().prometheus,
        vhost.name
    ))
    .await;

    // 1. Closed port.
    let down = wait_down(&warren, "unreachable").await;
    assert!(down["status"]["last_success"].is_null());
    let (status, page) = warren.get_text("/").await;
    assert_eq!(status, 200, "the overview keeps serving");
    assert!(page.contains("unreachable"), "the overview says why the broker is down");
    let (status, _) = warren.get_text("/queues").await;
    assert_eq!(status, 200);
    // The broker page before any poll went through says nothing is decided yet (it said
    // "every 0s: .").
    let (status, page) = warren.get_text("/brokers/local").await;
    assert_eq!(status, 200);
    assert!(!page.contains("every <strong>0") && !page.contains(": .</li>"), "{page}");

    // 2. The same port now answers 500.
    let mode = Arc::new(Mutex::new(Mode::Error500));
    let app = axum::Router::new().fallback(fake_management).with_state(mode.clone());
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await.unwrap();
    let server = tokio::spawn(async move { axum::serve(listener, app).await });
    wait_down(&warren, "HTTP 500").await;

    // 2b. A proxy's HTML error page: described, never shown as markup.
    *mode.lock().unwrap() = Mode::HtmlPage;
    let down = wait_down(&warren, "an HTML page titled \"502 Bad Gateway\"").await;
    assert!(!down["status"]["error"].as_str().unwrap().contains('<'), "{down}");

    // 3. Garbage instead of JSON.
    *mode.lock().unwrap() = Mode::Garbage;
    wait_down(&warren, "malformed").await;

    // 4. Pointed back at the real broker: recovers by itself and shows the queue.
    *mode.lock().unwrap() = Mode::Proxy;
    let v = vhost.name.clone();
    wait_for("recovery with the queue listed", Duration::from_secs(30), || {
        let (warren, v) = (&warren, v.clone());
        async move {
            let b = broker_status(warren).await;
            let q = warren.queue(&v, "survivor").await;
            match q {
                Some(q) if b["status"]["up"] == true && q["ready"] == 7 => Ok(()),
                other => Err(format!("up={} error={} queue={other:?}", b["status"]["up"], b["status"]["error"])),
            }
        }
    })
    .await;

    // 5. Down again after data exists: the last data stays, marked stale.
    *mode.lock().unwrap() = Mode::Error500;
    let down = wait_down(&warren, "HTTP 500").await;
    assert!(down["stale_since"].is_string(), "stale since the last success: {down}");
    let q = warren.queue(&vhost.name, "survivor").await.expect("last data still served");
    assert_eq!(q["ready"], 7);
    let (status, page) = warren.get_text("/queues").await;
    assert_eq!(status, 200);
    assert!(page.contains("stale since"), "the queue list says the data is stale");

    server.abort();
    warren.stop().await;
    connection.close(0, "done".into()).await.ok();
}

/// Several management URLs (a cluster's nodes): a first one that answers 503, as a booting node
/// does, passes each request to the next, which serves the broker; the broker stays up and the
/// first URL's failure stays visible (issue 20, must-have 5).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_answering_503_passes_polling_to_the_next_management_url() {
    let vhost = TestVhost::create("failover").await;
    let connection = vhost.connect().await;
    let channel = vhost.channel(&connection).await;
    declare(&channel, "steady", false).await;
    publish(&channel, "steady", 4, BasicProperties::default()).await;

    let booting = axum::Router::new().fallback(|| async {
        (StatusCode::SERVICE_UNAVAILABLE, "{\"error\":\"not_ready\",\"reason\":\"node is booting\"}")
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let booting_url = format!("http://{}", listener.local_addr().unwrap());
    let server = tokio::spawn(async move { axum::serve(listener, booting).await });
    let warren = Warren::start(&format!(
        "[[brokers]]\nname = \"local\"\nmanagement_urls = [{booting_url:?}, {:?}]\namqp_url = {:?}\n\
         prometheus_url = {:?}\nvhosts_include = [{:?}]\npoll_interval_secs = 1\n",
        broker().management,
        broker().amqp,
        broker().prometheus,
        vhost.name
    ))
    .await;
    let v = vhost.name.clone();
    let b = wait_for("the broker up through the second URL, the queue listed", Duration::from_secs(30), || {
        let (warren, v) = (&warren, v.clone());
        async move {
            let b = broker_status(warren).await;
            match warren.queue(&v, "steady").await {
                Some(q) if b["status"]["up"] == true && q["ready"] == 4 => Ok(b),
                other => Err(format!("up={} error={} queue={other:?}", b["status"]["up"], b["status"]["error"])),
            }
        }
    })
    .await;
    let management = &b["status"]["management"];
    assert_eq!(management["answering"], format!("{}/", broker().management), "{management}");
    let first = &management["urls"][0];
    assert_eq!(first["url"], format!("{booting_url}/"), "{management}");
    assert!(
        first["last_error"].as_str().is_some_and(|e| e.contains("HTTP 503") && e.contains("node is booting")),
        "the booting node's 503 stays visible: {management}"
    );
    assert!(first["last_answer_at"].is_null(), "a 5xx is not an answer: {management}");
    let (_, page) = warren.get_text("/brokers/local").await;
    assert!(page.contains("management-state failing\">failing"), "the broker page says the first URL fails: {page}");

    server.abort();
    warren.stop().await;
    connection.close(0, "done".into()).await.ok();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_credentials_are_reported_as_such() {
    let warren = Warren::start(
        "[[brokers]]\nname = \"local\"\nuser = \"guest\"\npassword = \"not-the-password\"\nvhosts_include = [\"none\"]\npoll_interval_secs = 1\n",
    )
    .await;
    let down = wait_down(&warren, "401").await;
    assert!(down["status"]["error"].as_str().unwrap().contains("credentials"));
    // The password is never shown.
    let (_, text) = warren.get_text("/api/v1/brokers").await;
    assert!(!text.contains("not-the-password"));
    let (_, page) = warren.get_text("/").await;
    assert!(!page.contains("not-the-password"));
    warren.stop().await;
}

/// Issue 19, item 5: restarted while the broker does not answer, warren shows the last known
/// state from its database (the queue with its last depth, the DLQ), marked as such, never as
/// current and never as empty; rates it did not measure are unknown.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_while_unreachable_shows_the_last_known_state_as_stale() {
    let vhost = TestVhost::create("restore").await;
    let connection = vhost.connect().await;
    let channel = vhost.channel(&connection).await;
    declare(&channel, "orders", false).await;
    publish(&channel, "orders", 23, BasicProperties::default()).await;
    // `work` dead-letters into `dlq` through the exchange `dlx`: a DLQ only the bindings tell.
    common::dead_letters::dead_letter(&vhost, &channel, "dlq", false, common::dead_letters::numbered(3)).await;

    let warren = Warren::for_vhost(&vhost.name, 1).await;
    let v = vhost.name.clone();
    wait_for("orders at 23 and dlq at 3, known as a DLQ", Duration::from_secs(30), || {
        let (warren, v) = (&warren, v.clone());
        async move {
            let orders = warren.queue(&v, "orders").await.unwrap_or_default();
            let dlq = warren.queue(&v, "dlq").await.unwrap_or_default();
            if orders["ready"] == 23 && dlq["ready"] == 3 && dlq["is_dlq"] == true {
                Ok(())
            } else {
                Err(format!("orders={} dlq ready={} is_dlq={}", orders["ready"], dlq["ready"], dlq["is_dlq"]))
            }
        }
    })
    .await;

    let warren = warren.restart_unreachable().await;
    wait_down(&warren, "unreachable").await;

    // The API: the queue list and the queue, with their last depth, marked as restored.
    let (status, list) = warren.get_json(&format!("/api/v1/queues?vhost={}", common::encode(&v))).await;
    assert_eq!(status, 200);
    let items = list["items"].as_array().expect("items");
    let orders = items.iter().find(|q| q["name"] == "orders").unwrap_or_else(|| panic!("orders listed: {list}"));
    assert_eq!(orders["ready"], 23, "{orders}");
    assert!(orders["publish_rate"].is_null() && orders["ack_rate"].is_null(), "rates are unknown: {orders}");
    let stale = &list["stale"][0];
    assert_eq!(stale["restored"], true, "the list says the data is the last known state: {list}");
    assert!(stale["note"].as_str().unwrap().contains("the broker has not answered since warren started"), "{stale}");
    let dlq = items.iter().find(|q| q["name"] == "dlq").expect("dlq listed");
    assert!(dlq["ready"] == 3 && dlq["is_dlq"] == true, "the DLQ keeps its depth and role: {dlq}");
    let orders = warren.queue(&v, "orders").await.expect("orders");
    assert_eq!(orders["ready"], 23);
    assert!(orders["publish_rate"].is_null(), "{orders}");
    assert_eq!(orders["stale"]["restored"], true, "{orders}");
    let (_, brokers) = warren.get_json("/api/v1/brokers").await;
    assert!(brokers[0]["stale_since"].is_string() && brokers[0]["status"]["restored_from"].is_string(), "{brokers}");
    assert!(brokers[0]["rates"]["publish_rate"].is_null(), "{brokers}");
    assert_eq!(brokers[0]["totals"]["ready"], 26, "{brokers}");

    // The pages.
    let (status, page) = warren.get_text("/queues").await;
    assert_eq!(status, 200);
    assert!(page.contains(">orders<") && !page.contains("No queues match"), "{page}");
    assert!(page.contains("last known state from"), "the queue list says the data is stale: {page}");
    let (_, page) = warren.get_text("/").await;
    assert!(!page.contains("No dead-letter queue found"), "the overview lists the DLQ: {page}");
    assert!(page.contains(">dlq<") && page.contains("last known state from"), "{page}");
    let (_, page) = warren.get_text(&format!("/queues/local/{}/orders", common::encode(&v))).await;
    assert!(page.contains("last known state from") && page.contains("not answered since warren started"), "{page}");

    warren.stop().await;
    connection.close(0, "done".into()).await.ok();
}
