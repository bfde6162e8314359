//! Secrets never leave warren: the broker password and a notification URL's token appear in no
//! page and no API answer. The test crawls every link warren serves, plus the API, and scans.

mod common;

use std::collections::{BTreeSet, VecDeque};
use std::time::Duration;

use common::dead_letters::{dead_letter, numbered};
use common::{broker, wait_for, TestVhost, Warren};
use serde_json::json;

/// A broker user of its own with a password no page could contain by chance.
struct BrokerUser {
    name: String,
    password: String,
    http: reqwest::Client,
}

impl BrokerUser {
    async fn create(vhost: &str) -> BrokerUser {
        let name = format!("warren-secret-{}", rand::random::<u32>());
        let password = format!("pw-{:032x}", rand::random::<u128>());
        let http = reqwest::Client::new();
        let put = |path: String, body: serde_json::Value| {
            http.put(format!("{}/api/{path}", broker().management))
                .basic_auth("guest", Some("guest"))
                .json(&body)
                .send()
        };
        let created =
            put(format!("users/{name}"), json!({"password": password, "tags": "administrator"})).await.unwrap();
        assert!(created.status().is_success(), "create user: {}", created.status());
        let path = format!("permissions/{}/{name}", warren::broker::management::encode_segment(vhost));
        let allowed = put(path, json!({"configure": ".*", "write": ".*", "read": ".*"})).await.unwrap();
        assert!(allowed.status().is_success(), "permissions: {}", allowed.status());
        BrokerUser { name, password, http }
    }
}

impl Drop for BrokerUser {
    fn drop(&mut self) {
        let (http, url) = (self.http.clone(), format!("{}/api/users/{}", broker().management, self.name));
        // Best effort, from a thread of its own: Drop cannot await.
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            runtime.block_on(async { http.delete(url).basic_auth("guest", Some("guest")).send().await.ok() });
        })
        .join()
        .ok();
    }
}

fn links(base: &str, page: &str) -> Vec<String> {
    page.split("href=\"")
        .skip(1)
        .filter_map(|rest| rest.split('"').next())
        .map(|href| href.replace("&amp;", "&"))
        .filter(|href| href.starts_with('/') && !href.starts_with("//"))
        .map(|href| format!("{base}{href}"))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_page_or_api_answer_contains_a_secret() {
    let vhost = TestVhost::create("secrets").await;
    let connection = vhost.connect().await;
    let channel = vhost.channel(&connection).await;
    dead_letter(&vhost, &channel, "work.dlq", false, numbered(3)).await;
    let user = BrokerUser::create(&vhost.name).await;
    let token = format!("hooktoken{:024x}", rand::random::<u128>());
    let toml = format!(
        "[[alerts]]\nid = \"any\"\nname = \"Anything ready\"\nmetric = \"ready\"\ncomparator = \">\"\nthreshold = 0\n\
         severity = \"info\"\n\
         [[brokers]]\nname = \"local\"\nuser = {:?}\npassword = {:?}\n\
         vhosts_include = [{:?}]\npoll_interval_secs = 1\n\
         [[notifications]]\nid = \"hook\"\nname = \"Hook\"\ntype = \"webhook\"\nurl = \"http://127.0.0.1:9/hooks/{token}\"\n",
        user.name, user.password, vhost.name
    );
    let warren = Warren::start(&toml).await;
    wait_for("work.dlq listed", Duration::from_secs(30), || async {
        warren.queue(&vhost.name, "work.dlq").await.map(|_| ()).ok_or_else(|| "not yet".to_string())
    })
    .await;
    // Some state behind the pages: a snapshot, a move, an alert, a failed delivery.
    let dlq = format!("/api/v1/queues/local/{}/work.dlq", warren::broker::management::encode_segment(&vhost.name));
    let (status, _) = warren.post_json(&format!("{dlq}/snapshot"), json!({"count": 3})).await;
    assert_eq!(status, 200);
    warren.run_move(&format!("{dlq}/requeue"), json!({"selection": {"positions": [1]}})).await;
    warren.post_json("/api/v1/notifications/channels/hook/test", json!({})).await;
    tokio::time::sleep(Duration::from_secs(3)).await;

    let base = warren.url("");
    let mut queue: VecDeque<String> = [
        "/",
        "/queues",
        "/alerts",
        "/audit",
        "/metrics",
        "/healthz",
        "/readyz",
        "/api/v1/brokers",
        "/api/v1/queues",
        "/api/v1/audit",
        "/api/v1/alerts",
        "/api/v1/alerts/history",
        "/api/v1/alerts/rules",
        "/api/v1/alerts/rules/export",
        "/api/v1/silences",
        "/api/v1/notifications/channels",
        "/api/v1/notifications/deliveries",
        "/api/v1/jobs/1",
    ]
    .iter()
    .map(|p| format!("{base}{p}"))
    .collect();
    queue.push_back(format!("{base}{dlq}/snapshot"));
    let mut seen = BTreeSet::new();
    while let Some(url) = queue.pop_front() {
        if seen.len() >= 300 || !seen.insert(url.clone()) || url.contains("/static/") {
            continue;
        }
        let response = warren.http.get(&url).send().await.unwrap();
        let body = response.text().await.unwrap();
        for secret in [&user.password, &token] {
            assert!(!body.contains(secret.as_str()), "{url} shows a secret");
        }
        queue.extend(links(&base, &body));
    }
    assert!(seen.len() > 20, "the crawl reached the pages: {seen:?}");
    // Logs carry no secret either: the delivery error was scrubbed (checked in the answer above).
    warren.stop().await;
    connection.close(0, "done".into()).await.ok();
}

/// A warren process, killed if the test ends before it stops it.
struct Running(std::process::Child);

impl Drop for Running {
    fn drop(&mut self) {
        if self.0.try_wait().ok().flatten().is_none() {
            self.0.kill().ok();
            self.0.wait().ok();
        }
    }
}

/// A webhook receiver on port 0: the paths it was posted to.
async fn hook_receiver() -> (String, std::sync::Arc<std::sync::Mutex<Vec<String>>>) {
    use axum::extract::State;
    let seen: std::sync::Arc<std::sync::Mutex<Vec<String>>> = Default::default();
    let app = axum::Router::new()
        .route(
            "/hooks/{token}",
            axum::routing::post(
                |State(seen): State<std::sync::Arc<std::sync::Mutex<Vec<String>>>>, uri: axum::http::Uri| async move {
                    seen.lock().unwrap().push(uri.path().to_string());
                },
            ),
        )
        .with_state(seen.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (base, seen)
}

/// Issue 36, cases 3 and 4: broker passwords and notification URLs from a file and from a named
/// variable, each form given in the file and in the environment, are used for real (two broker
/// logins with a user of its own, two webhooks delivered), and at debug level no secret, SMTP
/// password included, reaches a log line. The binary runs as an operator runs it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_from_files_and_variables_are_used_and_never_logged() {
    use std::process::{Command, Stdio};
    let vhost = TestVhost::create("secretfiles").await;
    let user = BrokerUser::create(&vhost.name).await;
    let (hooks, seen) = hook_receiver().await;
    let dir = tempfile::tempdir().unwrap();
    let file_token = format!("filetoken{:024x}", rand::random::<u128>());
    let env_token = format!("envtoken{:024x}", rand::random::<u128>());
    let smtp_password = format!("smtp-{:024x}", rand::random::<u128>());
    let write = |name: &str, content: String| {
        let path = dir.path().join(name);
        std::fs::write(&path, content).unwrap();
        path.display().to_string()
    };
    // As an orchestrator mounts them: one line each, the line end not part of the secret.
    let password_file = write("broker-password", format!("{}\n", user.password));
    let hook_file = write("hook-url", format!("{hooks}/hooks/{file_token}\n"));
    let smtp_file = write("smtp-password", format!("{smtp_password}\n"));
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let b = broker();
    let config = write(
        "warren.toml",
        format!(
            "listen = \"127.0.0.1:{port}\"\ndatabase = {:?}\n\
             [[brokers]]\nname = \"by-file\"\nmanagement_url = {:?}\namqp_url = {:?}\nuser = {:?}\n\
             password_file = {password_file:?}\nvhosts_include = [{:?}]\npoll_interval_secs = 1\nprometheus_url = \"off\"\n\
             [[brokers]]\nname = \"by-env\"\nmanagement_url = {:?}\namqp_url = {:?}\nuser = {:?}\n\
             password = \"wrong, replaced by the environment\"\nvhosts_include = [{:?}]\npoll_interval_secs = 1\n\
             prometheus_url = \"off\"\n\
             [[notifications]]\nid = \"hook-file\"\nname = \"From a file\"\ntype = \"webhook\"\nurl_file = {hook_file:?}\n\
             [[notifications]]\nid = \"mail\"\nname = \"Mail\"\ntype = \"email\"\nhost = \"smtp.invalid\"\n\
             user = \"warren\"\npassword_file = {smtp_file:?}\nfrom = \"warren@example.com\"\nto = [\"ops@example.com\"]\n",
            dir.path().join("warren.db").display().to_string(),
            b.management,
            b.amqp,
            user.name,
            vhost.name,
            b.management,
            b.amqp,
            user.name,
            vhost.name,
        ),
    );
    let child = Command::new(env!("CARGO_BIN_EXE_warren"))
        .args(["--config", &config])
        .env("RUST_LOG", "debug")
        .env("BY_ENV_PASSWORD", &user.password)
        .env("WARREN_BROKER_BY_ENV_PASSWORD_ENV", "BY_ENV_PASSWORD")
        .env("WARREN_NOTIFICATIONS", "hook-env")
        .env("WARREN_NOTIFICATION_HOOK_ENV_TYPE", "webhook")
        .env("HOOK_URL", format!("{hooks}/hooks/{env_token}"))
        .env("WARREN_NOTIFICATION_HOOK_ENV_URL_ENV", "HOOK_URL")
        .stdout(Stdio::from(std::fs::File::create(dir.path().join("out.log")).unwrap()))
        .stderr(Stdio::from(std::fs::File::create(dir.path().join("err.log")).unwrap()))
        .spawn()
        .expect("warren runs");
    let mut child = Running(child);
    let base = format!("http://127.0.0.1:{port}");
    let http = reqwest::Client::new();
    let outcome = async {
        // Both brokers polled: each login worked with its password.
        wait_for("both brokers polled with their passwords", Duration::from_secs(60), || async {
            let brokers: serde_json::Value = http
                .get(format!("{base}/api/v1/brokers"))
                .send()
                .await
                .map_err(|e| e.to_string())?
                .json()
                .await
                .map_err(|e| e.to_string())?;
            let polled =
                |name: &str| {
                    brokers.as_array().into_iter().flatten().any(|b| {
                        b["name"] == name && b["status"]["up"] == true && b["status"]["last_success"].is_string()
                    })
                };
            (polled("by-file") && polled("by-env")).then_some(()).ok_or_else(|| brokers.to_string())
        })
        .await;
        for id in ["hook-file", "hook-env"] {
            let sent = http.post(format!("{base}/api/v1/notifications/channels/{id}/test")).send().await.unwrap();
            assert!(sent.status().is_success(), "{id}: {}", sent.status());
        }
        wait_for("both webhooks delivered", Duration::from_secs(30), || async {
            let seen = seen.lock().unwrap().clone();
            let both = [&file_token, &env_token].iter().all(|t| seen.contains(&format!("/hooks/{t}")));
            both.then_some(()).ok_or_else(|| format!("{seen:?}"))
        })
        .await;
    };
    // Stop warren whatever happened, then read every line it wrote.
    let result = tokio::time::timeout(Duration::from_secs(120), outcome).await;
    Command::new("kill").args(["-TERM", &child.0.id().to_string()]).status().unwrap();
    child.0.wait().unwrap();
    let logs = std::fs::read_to_string(dir.path().join("out.log")).unwrap()
        + &std::fs::read_to_string(dir.path().join("err.log")).unwrap();
    result.unwrap_or_else(|_| panic!("timed out; warren wrote:\n{logs}"));
    assert!(logs.lines().count() > 5 && logs.contains("DEBUG"), "debug lines expected:\n{logs}");
    for secret in [&user.password, &file_token, &env_token, &smtp_password] {
        assert!(!logs.contains(secret.as_str()), "a secret reached the log:\n{logs}");
    }
}
