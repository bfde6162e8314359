//! warren on PostgreSQL (issue 33, must-have 1): `database_url = "postgres://..."` and the whole
//! product runs on it, against the real broker: polls and their history, accounts and logins,
//! and a requeue of dead letters whose ids are compared as sets, with its audit entry. The
//! storage interface's own tests are `tests/conformance/`, on both backends.

mod common;

use std::time::Duration;

use common::dead_letters::{dead_letter, drain_ids, numbered};
use common::postgres::Database;
use common::{encode, wait_for, TestVhost, Warren};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn warren_runs_on_postgres_polls_keeps_history_and_requeues_by_identity() {
    let database = Database::create("runs").await;
    let vhost = TestVhost::create("onpg").await;
    let connection = vhost.connect().await;
    let channel = vhost.channel(&connection).await;
    dead_letter(&vhost, &channel, "work.dlq", false, numbered(30)).await;
    let warren = Warren::start(&format!(
        "database_url = {:?}\n[[brokers]]\nname = \"local\"\nvhosts_include = [{:?}]\npoll_interval_secs = 1\n",
        database.url(),
        vhost.name
    ))
    .await;
    // Nothing went to the SQLite file the configuration also names.
    assert!(!warren.dir.path().join("warren.db").exists(), "warren wrote a SQLite file");

    // Polls, and their history read back from PostgreSQL.
    let queue = format!("/api/v1/queues/local/{}/work.dlq", encode(&vhost.name));
    // (The broker's management statistics lag its queues by a few seconds.)
    wait_for("a poll that saw the 30 dead letters", Duration::from_secs(30), || async {
        let (status, body) = warren.get_json(&format!("{queue}/history?range=15m")).await;
        let points = body["points"].as_array().cloned().unwrap_or_default();
        let last = points.iter().rev().find(|p| !p["ready"].is_null()).cloned();
        match last {
            Some(p) if status == 200 && p["ready"] == 30 => Ok(()),
            other => Err(format!("{status}: last known point {other:?}")),
        }
    })
    .await;

    // A requeue: every id back in the queue it died in, none left, audited.
    let job = warren.run_move(&format!("{queue}/requeue"), json!({"selection": "all"})).await;
    assert_eq!(job["state"], "done", "{job}");
    let mut back = drain_ids(&channel, "work").await;
    back.sort();
    let mut all: Vec<String> = (1..=30).map(|i| format!("m{i}")).collect();
    all.sort();
    assert_eq!(back, all, "every message back, by id");
    assert!(drain_ids(&channel, "work.dlq").await.is_empty());
    let (_, audit) = warren.get_json("/api/v1/audit").await;
    assert_eq!((audit[0]["action"].as_str(), audit[0]["outcome"].as_str()), (Some("requeue"), Some("done")), "{audit}");
    assert_eq!(audit[0]["moved"], 30);

    // Accounts: a user added with the command line into the same database logs in.
    warren.stop().await;
    let mut add = std::process::Command::new(env!("CARGO_BIN_EXE_warren"))
        .args(["user", "add", "ada", "--role", "admin", "--database-url", &database.url()])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    add.stdin.take().unwrap().write_all(b"correct horse battery staple\n").unwrap();
    let added = add.wait_with_output().unwrap();
    let said = String::from_utf8_lossy(&added.stdout);
    assert!(added.status.success() && said.contains("PostgreSQL"), "{said}");
    let warren = Warren::start(&format!(
        "database_url = {:?}\n[[brokers]]\nname = \"local\"\nvhosts_include = [{:?}]\n",
        database.url(),
        vhost.name
    ))
    .await;
    let client = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
    let login = client
        .post(warren.url("/login"))
        .form(&[("name", "ada"), ("password", "correct horse battery staple")])
        .send()
        .await
        .unwrap();
    assert_eq!(login.status().as_u16(), 303, "logged in");
    let (status, _) = warren.get_json("/api/v1/audit").await;
    assert_eq!(status, 401, "logins are required now");
    warren.stop().await;
    connection.close(0, "done".into()).await.ok();
}
