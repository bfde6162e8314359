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

/// Several replicas on one database (issue 33, must-haves 3 and 4): a replica starting while
/// another replays from custody leaves that replay's claims and its audit entry alone, so every
/// record is replayed once. (The start used to hand every claimed record back to held, to be
/// replayed a second time, and mark the running replay interrupted.) Two states on one database
/// stand for the two processes, each with its heartbeat as its replica loop takes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_starting_leaves_another_ones_running_replay_alone() {
    use base64::Engine;
    use warren::dlq::custody::{self, CustodySelection, CustodyTarget, ReplayRequest};
    const N: usize = 20_000;
    let database = Database::create("recover").await;
    let vhost = TestVhost::create("pgrecover").await;
    let connection = vhost.connect().await;
    let channel = vhost.channel(&connection).await;
    common::declare(&channel, "orders", false).await;
    let toml = common::with_test_broker(&format!(
        "database_url = {:?}\n[[brokers]]\nname = \"local\"\nvhosts_include = [{:?}]\n",
        database.url(),
        vhost.name
    ));
    let config = || warren::config::Config::from_toml(&toml).unwrap();
    let first = warren::build_state(config()).await.unwrap();
    first.replica.round().await.unwrap();

    let b64 = base64::engine::general_purpose::STANDARD;
    let lines: Vec<String> = (0..N)
        .map(|i| {
            let properties = lapin::BasicProperties::default().with_message_id(format!("m{i}").into());
            let line = warren::dlq::transfer::Line {
                exchange: "dlx".into(),
                routing_key: "rk".into(),
                amqp_properties: Some(b64.encode(custody::encode_properties(&properties).unwrap())),
                body: b64.encode(format!("{{\"order\": {i}}}")),
                ..Default::default()
            };
            serde_json::to_string(&line).unwrap()
        })
        .collect();
    let text = lines.join("\n");
    let adding = warren::dlq::transfer::check_lines(&text).unwrap();
    let queue = ("local", vhost.name.as_str(), "orders.dlq");
    let kept = custody::import(&first.store, &[], queue, adding, warren::dlq::transfer::batches(&text)).await.unwrap();
    assert_eq!(kept, N);

    let request = ReplayRequest {
        selection: CustodySelection::All,
        target: CustodyTarget::Queue("orders".into()),
        accept_drop_head: false,
        accept_stranding: true,
    };
    let job = warren::dlq::jobs::start_replay(&first.dlq(), queue, request, "otto", false).await.unwrap();
    let claimed = || async {
        let counts = custody::counts_by_queue(&first.store, "local").await.unwrap();
        counts.get(&(vhost.name.clone(), "orders.dlq".to_string())).map(|c| c.claimed).unwrap_or(0)
    };
    wait_for("the replay's claims", Duration::from_secs(30), || async {
        match claimed().await {
            0 => Err("none claimed yet".to_string()),
            n => Ok(n),
        }
    })
    .await;

    // The second replica starts as `warren::run` does, while the first's replay runs.
    let second = warren::build_state(config()).await.unwrap();
    second.replica.round().await.unwrap();
    let recovered = warren::dlq::recover_dead_replicas(&second.store, second.replica.id()).await.unwrap();
    assert_eq!(recovered, (0, 0), "nothing of a live replica's is interrupted or handed back");
    let outcome = warren::audit::get(&first.store, job.id).await.unwrap().unwrap().outcome;
    assert!(claimed().await > 0 && outcome != "done", "the replay ended before the second replica started: {outcome}");

    let entry = wait_for("the replay's end", Duration::from_secs(120), || async {
        let entry = warren::audit::get(&first.store, job.id).await.unwrap().unwrap();
        if entry.outcome == "started" || entry.outcome == "running" {
            Err(entry.outcome)
        } else {
            Ok(entry)
        }
    })
    .await;
    assert_eq!((entry.outcome.as_str(), entry.moved), ("done", N as i64), "{entry:?}");
    let mut replayed = drain_ids(&channel, "orders").await;
    replayed.sort();
    let mut all: Vec<String> = (0..N).map(|i| format!("m{i}")).collect();
    all.sort();
    assert_eq!(replayed.len(), N, "each record replayed once");
    assert_eq!(replayed, all);
    first.jobs.shutdown(Duration::from_secs(10)).await;
    connection.close(0, "done".into()).await.ok();
}
