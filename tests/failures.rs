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
    Garbage,
    Proxy,
}

/// Stands where the management API should be and misbehaves as told; in `Proxy` mode it
/// forwards to the real management API.
async fn fake_management(State(mode): State<Arc<Mutex<Mode>>>, request: Request) -> Response {
    let mode = *mode.lock().unwrap();
    match mode {
        Mode::Error500 => (StatusCode::INTERNAL_SERVER_ERROR, "{\"error\":\"boom\"}").into_response(),
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

    // 2. The same port now answers 500.
    let mode = Arc::new(Mutex::new(Mode::Error500));
    let app = axum::Router::new().fallback(fake_management).with_state(mode.clone());
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await.unwrap();
    let server = tokio::spawn(async move { axum::serve(listener, app).await });
    wait_down(&warren, "HTTP 500").await;

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
    connection.close(0, "done").await.ok();
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
