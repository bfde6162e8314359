//! Custody on the real broker (issue 18): intake takes every dead letter into warren's database
//! and acks it only once committed; the listing and its groups cover every record; a replay
//! publishes each record once, even when two run at once; a SIGKILL during intake leaves every
//! message in the broker or in custody, never in neither.

mod common;

use std::collections::HashSet;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::dead_letters::{dead_letter, depth, drain_ids, numbered};
use common::{wait_for, TestVhost, Warren};
use lapin::options::BasicPublishOptions;
use lapin::BasicProperties;
use serde_json::{json, Value};

fn encode(s: &str) -> String {
    warren::broker::management::encode_segment(s)
}

fn custody_toml(vhost: &str) -> String {
    format!(
        "[[brokers]]\nname = \"local\"\nvhosts_include = [{vhost:?}]\npoll_interval_secs = 1\n\n\
         [[custody]]\nqueue = \"*.dlq\"\n"
    )
}

async fn listing(warren: &Warren, vhost: &str, query: &str) -> Value {
    let (status, body) =
        warren.get_json(&format!("/api/v1/queues/local/{}/work.dlq/custody{query}", encode(vhost))).await;
    assert_eq!(status, 200, "{body}");
    body
}

async fn audit_done(warren: &Warren, id: i64) -> Value {
    wait_for(&format!("custody replay {id} to end"), Duration::from_secs(60), || async {
        let (_, audit) = warren.get_json("/api/v1/audit").await;
        let entry = audit.as_array().into_iter().flatten().find(|e| e["id"] == id).cloned();
        match entry {
            Some(e) if e["outcome"] != "started" && e["outcome"] != "running" => Ok(e),
            other => Err(format!("{other:?}")),
        }
    })
    .await
}

async fn replay(warren: &Warren, vhost: &str, body: Value) -> i64 {
    let path = format!("/api/v1/queues/local/{}/work.dlq/custody/replay", encode(vhost));
    let (status, started) = warren.post_json(&path, body).await;
    assert_eq!(status, 202, "{started}");
    started["audit_id"].as_i64().expect("an audit id")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn custody_takes_every_dead_letter_and_replays_each_once() {
    for quorum in [false, true] {
        const N: usize = 60;
        let vhost = TestVhost::create(if quorum { "custodyq" } else { "custody" }).await;
        let connection = vhost.connect().await;
        let channel = vhost.channel(&connection).await;
        dead_letter(&vhost, &channel, "work.dlq", quorum, numbered(N)).await;
        let all: HashSet<String> = (1..=N).map(|i| format!("m{i}")).collect();

        let warren = Warren::start(&custody_toml(&vhost.name)).await;
        // Intake empties the broker's DLQ into custody; the queue's numbers count both.
        let view = wait_for("every dead letter in custody", Duration::from_secs(60), || async {
            let q = warren.queue(&vhost.name, "work.dlq").await.ok_or("not listed")?;
            if q["custody_held"] == N && q["total"] == 0 {
                Ok(q)
            } else {
                Err(q.to_string())
            }
        })
        .await;
        assert_eq!(view["is_dlq"], true, "{view}");
        assert_eq!(depth(&channel, "work.dlq").await, 0, "taken off the broker");

        // Every record, not a sample: grouped and filtered over all of them.
        let list = listing(&warren, &vhost.name, "?limit=1000").await;
        assert_eq!(list["in_custody"], true);
        assert_eq!(list["custody"]["counts"]["held"], N);
        assert_eq!(list["custody"]["by_reason"], json!([["rejected", N]]), "{list}");
        assert_eq!(list["custody"]["by_original_queue"], json!([["work", N]]));
        assert_eq!(list["custody"]["intake"]["state"], "running");
        let ids: HashSet<String> = list["custody"]["records"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["message_id"].as_str().unwrap().to_string())
            .collect();
        assert_eq!(ids, all, "each message once");
        let found = listing(&warren, &vhost.name, "?text=%22n%22%3A%207%7D").await;
        assert_eq!(found["custody"]["matching"], 1, "the text filter reads the bodies: {found}");
        let found = listing(&warren, &vhost.name, "?text=M42").await;
        assert_eq!(found["custody"]["matching"], 1, "and the properties, whatever the case: {found}");
        assert_eq!(listing(&warren, &vhost.name, "?reason=rejected&original=work").await["custody"]["matching"], N);
        assert_eq!(listing(&warren, &vhost.name, "?original=elsewhere").await["custody"]["matching"], 0);
        if quorum {
            // Taken once: nothing was handed back, so no delivery was spent.
            let records = list["custody"]["records"].as_array().unwrap();
            assert!(records.iter().all(|r| r["redelivered"] == false), "{list}");
        }

        // The page says where the dead letters are, groups every record, and offers the replay.
        let (_, page) = warren.get_text(&format!("/dlq/local/{}/work.dlq", encode(&vhost.name))).await;
        assert!(
            page.contains(&format!("<strong>{N}</strong> in warren's custody, <strong>0</strong> still in the broker")),
            "{page}"
        );
        assert!(
            page.contains("class=\"custody-replay\"") && page.contains("These counts cover every record in custody")
        );
        let (_, page) = warren.get_text(&format!("/queues/local/{}/work.dlq", encode(&vhost.name))).await;
        assert!(page.contains("class=\"custody-held\""), "the queue page says so too");
        let (_, metrics) = warren.get_text("/metrics").await;
        let exported = metrics
            .lines()
            .find(|l| l.starts_with("warren_queue_custody_messages{") && l.contains("queue=\"work.dlq\""));
        assert_eq!(exported.and_then(|l| l.rsplit(' ').next()), Some(N.to_string().as_str()), "{metrics}");

        // Two replays of the same records at once: each record is published once.
        let first = replay(&warren, &vhost.name, json!({"selection": "all"})).await;
        let second = replay(&warren, &vhost.name, json!({"selection": "all"})).await;
        let (a, b) = (audit_done(&warren, first).await, audit_done(&warren, second).await);
        assert_eq!(a["moved"].as_u64().unwrap() + b["moved"].as_u64().unwrap(), N as u64, "{a} {b}");
        let mut arrived = drain_ids(&channel, "work").await;
        let distinct: HashSet<String> = arrived.iter().cloned().collect();
        assert_eq!(distinct, all, "every id back in its original queue");
        arrived.sort();
        assert_eq!(arrived.len(), N, "and each once");
        let list = listing(&warren, &vhost.name, "").await;
        assert_eq!(
            (&list["custody"]["counts"]["held"], &list["custody"]["counts"]["replayed"]),
            (&json!(0), &json!(N))
        );

        warren.stop().await;
        connection.close(0, "done").await.ok();
    }
}

/// warren as a separate process with custody of `*.dlq`, so the test can SIGKILL it.
struct Process {
    child: Child,
}

impl Process {
    async fn start(dir: &std::path::Path, vhost: &str) -> Process {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let config = dir.join("warren.toml");
        let custody = custody_toml(vhost)
            .replace("name = \"local\"\n", &format!("name = \"local\"\n{}", common::broker().toml()));
        std::fs::write(
            &config,
            format!(
                "listen = \"127.0.0.1:{port}\"\ndatabase = {:?}\n{custody}",
                dir.join("warren.db").display().to_string()
            ),
        )
        .unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_warren"))
            .arg("--config")
            .arg(&config)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("warren starts");
        Process { child }
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The message ids custody holds, read from the database file itself.
async fn ids_in_custody(database: &std::path::Path) -> Vec<String> {
    use sqlx::Row;
    let url = format!("sqlite://{}?mode=ro", database.display());
    let pool =
        sqlx::sqlite::SqlitePoolOptions::new().max_connections(1).connect(&url).await.expect("open the database");
    let rows = sqlx::query("select message_id from custody_messages").fetch_all(&pool).await.expect("read custody");
    pool.close().await;
    rows.iter().map(|r| r.get::<Option<String>, _>(0).unwrap_or_default()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_during_intake_leaves_every_message_in_the_broker_or_in_custody() {
    const N: usize = 20_000;
    let vhost = TestVhost::create("custodykill").await;
    let connection = vhost.connect().await;
    let channel = vhost.channel(&connection).await;
    common::declare(&channel, "work.dlq", false).await;
    // Published in one stream, confirmed at the end: 20,000 round trips would take a while.
    let mut confirms = Vec::with_capacity(N);
    for i in 1..=N {
        let properties = BasicProperties::default().with_message_id(format!("k{i}").into()).with_delivery_mode(2);
        let body = format!("{{\"n\": {i}, \"pad\": \"{}\"}}", "x".repeat(500));
        confirms.push(
            channel
                .basic_publish("", "work.dlq", BasicPublishOptions::default(), body.as_bytes(), properties)
                .await
                .unwrap(),
        );
    }
    for confirm in confirms {
        assert!(confirm.await.unwrap().is_ack());
    }
    let dir = tempfile::tempdir().unwrap();
    let database = dir.path().join("warren.db");
    let mut warren = Process::start(dir.path(), &vhost.name).await;
    // Kill once intake is under way, somewhere in its first few thousand.
    let kill_below = N - 200 - (std::process::id() as usize % 2_000);
    wait_for("intake under way", Duration::from_secs(60), || async {
        let left = depth(&channel, "work.dlq").await as usize;
        if left <= kill_below {
            Ok(())
        } else {
            Err(format!("{left} left"))
        }
    })
    .await;
    warren.child.kill().expect("SIGKILL");
    warren.child.wait().unwrap();

    // The broker returns what the dead connection held unacked; then the two places together
    // hold every message (a batch committed but not yet acked is in both).
    wait_for("the unacked messages returned", Duration::from_secs(30), || async {
        let kept: HashSet<String> = ids_in_custody(&database).await.into_iter().collect();
        let left = depth(&channel, "work.dlq").await as usize;
        if kept.len() + left >= N {
            Ok(())
        } else {
            Err(format!("{} in custody + {left} in the broker", kept.len()))
        }
    })
    .await;
    let kept = ids_in_custody(&database).await;
    let left = depth(&channel, "work.dlq").await as usize;
    eprintln!("killed with {} in custody and {left} in the broker", kept.len());
    assert!(!kept.is_empty() && left > 0, "the kill happened mid-intake: {} kept, {left} left", kept.len());

    // The next start takes the rest in: every id is in custody, duplicates only from the batch
    // the kill caught between its commit and its ack.
    let warren = Process::start(dir.path(), &vhost.name).await;
    // Until custody has every id: the broker's ready count reaches 0 while the last batch is
    // still delivered and not yet committed.
    wait_for("the rest taken in", Duration::from_secs(120), || async {
        let kept: HashSet<String> = ids_in_custody(&database).await.into_iter().collect();
        if kept.len() >= N {
            Ok(())
        } else {
            Err(format!("{} of {N} in custody", kept.len()))
        }
    })
    .await;
    drop(warren);
    let in_custody = ids_in_custody(&database).await;
    let in_broker = drain_ids(&channel, "work.dlq").await;
    let distinct: HashSet<&String> = in_custody.iter().collect();
    let lost: Vec<String> = (1..=N).map(|i| format!("k{i}")).filter(|id| !distinct.contains(id)).take(20).collect();
    assert!(lost.is_empty(), "lost: {lost:?}");
    assert_eq!(distinct.len(), N, "no stranger ids");
    let duplicates = in_custody.len() - distinct.len();
    eprintln!("{} records, {duplicates} duplicates, {} left in the broker", in_custody.len(), in_broker.len());
    assert!(duplicates <= 200, "duplicates only from one batch committed and not yet acked: {duplicates}");
    // What the broker still has (a batch the last kill caught before its ack) is in custody too.
    assert!(in_broker.iter().all(|id| distinct.contains(id)), "nothing only in the broker at the end");
    connection.close(0, "done").await.ok();
}

/// The size budget stops intake and leaves the rest in the broker, and the page says why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn intake_stops_at_its_size_budget_and_loses_nothing() {
    const N: usize = 30;
    let vhost = TestVhost::create("custodybudget").await;
    let connection = vhost.connect().await;
    let channel = vhost.channel(&connection).await;
    dead_letter(&vhost, &channel, "work.dlq", false, numbered(N)).await;
    // A few records' worth: the first batch (all 30 at once) does not fit.
    let toml = custody_toml(&vhost.name).replace("queue = \"*.dlq\"\n", "queue = \"*.dlq\"\nmax_bytes = 2000\n");
    let warren = Warren::start(&toml).await;
    let list = wait_for("intake stopped", Duration::from_secs(60), || async {
        warren.queue(&vhost.name, "work.dlq").await.ok_or("not listed yet")?;
        let list = listing(&warren, &vhost.name, "").await;
        if list["custody"]["intake"]["state"] == "stopped" {
            Ok(list)
        } else {
            Err(list.to_string())
        }
    })
    .await;
    let reason = list["custody"]["intake"]["reason"].as_str().unwrap();
    assert!(reason.contains("size budget of 2000 bytes"), "{reason}");
    let held = list["custody"]["counts"]["held"].as_u64().unwrap() as usize;
    let in_broker = wait_for("the batch back in the broker", Duration::from_secs(30), || async {
        let left = depth(&channel, "work.dlq").await as usize;
        if held + left == N {
            Ok(left)
        } else {
            Err(format!("{held} held + {left} left"))
        }
    })
    .await;
    assert_eq!(in_broker, N, "nothing was taken: the first batch alone exceeds the budget");
    let (_, page) = warren.get_text(&format!("/dlq/local/{}/work.dlq", encode(&vhost.name))).await;
    assert!(page.contains("signal bad custody-intake") && page.contains("size budget"), "the page says why");
    warren.stop().await;
    connection.close(0, "done").await.ok();
}

/// Must-haves 1 and 7: an admin takes a queue no rule names into custody, and releases it: intake
/// stops, every record goes back into the queue once, and intake stays off.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_admin_takes_a_queue_into_custody_and_releases_it() {
    const N: usize = 25;
    let vhost = TestVhost::create("custodyswitch").await;
    let connection = vhost.connect().await;
    let channel = vhost.channel(&connection).await;
    dead_letter(&vhost, &channel, "work.dlq", false, numbered(N)).await;
    let all: HashSet<String> = (1..=N).map(|i| format!("m{i}")).collect();
    let warren = Warren::for_vhost(&vhost.name, 1).await;
    wait_for("work.dlq listed", Duration::from_secs(30), || async {
        warren.queue(&vhost.name, "work.dlq").await.map(|_| ()).ok_or("not listed".to_string())
    })
    .await;
    let (_, page) = warren.get_text(&format!("/dlq/local/{}/work.dlq", encode(&vhost.name))).await;
    assert!(page.contains("class=\"custody-start\""), "an admin is offered custody: {page}");

    let base = format!("/api/v1/queues/local/{}/work.dlq/custody", encode(&vhost.name));
    let (status, body) = warren.post_json(&format!("{base}/start"), json!({})).await;
    assert_eq!(status, 200, "{body}");
    wait_for("every dead letter in custody", Duration::from_secs(60), || async {
        let q = warren.queue(&vhost.name, "work.dlq").await.ok_or("not listed")?;
        if q["custody_held"] == N && q["total"] == 0 {
            Ok(())
        } else {
            Err(q.to_string())
        }
    })
    .await;
    assert_eq!(listing(&warren, &vhost.name, "").await["in_custody"], true);

    let (status, released) = warren.post_json(&format!("{base}/release"), json!({})).await;
    assert_eq!(status, 202, "{released}");
    let entry = audit_done(&warren, released["audit_id"].as_i64().unwrap()).await;
    assert_eq!((&entry["outcome"], &entry["moved"]), (&json!("done"), &json!(N)), "{entry}");
    assert_eq!(entry["action"], "custody release");
    let back = wait_for("every record back in the queue", Duration::from_secs(30), || async {
        let left = depth(&channel, "work.dlq").await as usize;
        if left == N {
            Ok(left)
        } else {
            Err(format!("{left} in the queue"))
        }
    })
    .await;
    assert_eq!(back, N);
    // Intake stays off: the queue keeps its messages over several polls and scans.
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(depth(&channel, "work.dlq").await as usize, N, "released means released");
    let ids: HashSet<String> = drain_ids(&channel, "work.dlq").await.into_iter().collect();
    assert_eq!(ids, all, "each message back once");
    let list = listing(&warren, &vhost.name, "").await;
    assert_eq!((&list["in_custody"], &list["custody"]["counts"]["held"]), (&json!(false), &json!(0)), "{list}");
    warren.stop().await;
    connection.close(0, "done").await.ok();
}
