//! Bulk moves against the real broker: a cancel leaves a consistent report, and a warren killed
//! with SIGKILL at random points of a 20,000-message requeue, or of a move into a length-limited
//! queue, loses nothing: the id sets of the queues afterwards hold every message.

mod common;

use std::collections::HashSet;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::dead_letters::{depth, drain_ids};
use common::{wait_for, TestVhost, Warren};
use lapin::options::{BasicPublishOptions, ConfirmSelectOptions, QueueDeclareOptions};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{BasicProperties, Channel};
use serde_json::{json, Value};

fn encode(s: &str) -> String {
    warren::broker::management::encode_segment(s)
}

/// `orders` dead-letters (through the default exchange) into `orders.dlq`; `n` messages are
/// published to `orders` already expired, so the broker dead-letters each at once, with real
/// `x-death` headers. The copies moved back carry no expiration (the broker removes it when it
/// dead-letters), so they stay in `orders`.
async fn dead_letters(channel: &Channel, n: usize) {
    dead_letters_from(channel, 1, n, n).await
}

/// As `dead_letters`, with ids `o{first}..`, until `orders.dlq` holds `expected`.
async fn dead_letters_from(channel: &Channel, first: usize, n: usize, expected: usize) {
    let durable = QueueDeclareOptions { durable: true, ..Default::default() };
    channel.queue_declare("orders.dlq".into(), durable, FieldTable::default()).await.unwrap();
    let mut args = FieldTable::default();
    args.insert("x-dead-letter-exchange".into(), AMQPValue::LongString("".into()));
    args.insert("x-dead-letter-routing-key".into(), AMQPValue::LongString("orders.dlq".into()));
    channel.queue_declare("orders".into(), durable, args).await.unwrap();
    channel.confirm_select(ConfirmSelectOptions::default()).await.unwrap();
    let mut confirms = Vec::with_capacity(1000);
    for i in first..first + n {
        let properties = BasicProperties::default().with_message_id(format!("o{i}").into()).with_expiration("0".into());
        let payload = format!("{{\"order\": {i}}}");
        confirms.push(
            channel
                .basic_publish(
                    "".into(),
                    "orders".into(),
                    BasicPublishOptions::default(),
                    payload.as_bytes(),
                    properties,
                )
                .await
                .unwrap(),
        );
        if confirms.len() == 1000 || i == first + n - 1 {
            for confirm in confirms.drain(..) {
                assert!(confirm.await.unwrap().is_ack());
            }
        }
    }
    wait_for(&format!("{expected} dead letters"), Duration::from_secs(60), || async {
        let in_dlq = depth(channel, "orders.dlq").await as usize;
        if in_dlq == expected {
            Ok(())
        } else {
            Err(format!("{in_dlq}"))
        }
    })
    .await;
}

/// Polls a job until `moved` reaches `at_least`; fails if the job ended first.
async fn wait_until_moved(http: &reqwest::Client, base: &str, id: i64, at_least: u64) -> Value {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let job: Value = http.get(format!("{base}/api/v1/jobs/{id}")).send().await.unwrap().json().await.unwrap();
        assert_eq!(job["state"], "running", "the job ended before the test could interrupt it: {job}");
        if job["progress"]["moved"].as_u64().unwrap_or(0) >= at_least {
            return job;
        }
        assert!(std::time::Instant::now() < deadline, "no progress: {job}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_stops_a_bulk_requeue_with_a_consistent_report() {
    let vhost = TestVhost::create("cancel").await;
    let connection = vhost.connect().await;
    let channel = vhost.channel(&connection).await;
    dead_letters(&channel, 20_000).await;
    let warren = Warren::for_vhost(&vhost.name, 1).await;
    wait_for("orders.dlq listed", Duration::from_secs(30), || async {
        warren.queue(&vhost.name, "orders.dlq").await.map(|_| ()).ok_or_else(|| "not yet".to_string())
    })
    .await;

    let path = format!("/api/v1/queues/local/{}/orders.dlq/requeue", encode(&vhost.name));
    let (status, started) = warren.post_json(&path, json!({"selection": "all"})).await;
    assert_eq!(status, 202, "{started}");
    let id = started["job"]["id"].as_i64().unwrap();
    wait_until_moved(&warren.http, &warren.url(""), id, 200).await;
    let (status, body) = warren.post_json(&format!("/api/v1/jobs/{id}/cancel"), json!({})).await;
    assert_eq!(status, 202, "{body}");
    let job = warren.wait_job(id).await;

    assert_eq!(job["state"], "cancelled", "{job}");
    let moved = job["progress"]["moved"].as_u64().unwrap();
    let left = job["report"]["left"].as_u64().unwrap();
    assert!(moved > 0 && moved < 20_000, "stopped part-way: {moved}");
    assert_eq!(moved + left, 20_000, "every message is either moved or left: {job}");
    assert_eq!(u64::from(depth(&channel, "orders").await), moved, "each moved message arrived once");
    assert_eq!(u64::from(depth(&channel, "orders.dlq").await), left);
    let (_, audit) = warren.get_json("/api/v1/audit").await;
    assert_eq!((audit[0]["outcome"].as_str(), audit[0]["moved"].as_u64()), (Some("cancelled"), Some(moved)));
    // A cancelled job cannot be cancelled again.
    let (status, _) = warren.post_json(&format!("/api/v1/jobs/{id}/cancel"), json!({})).await;
    assert_eq!(status, 409);
    warren.stop().await;
    connection.close(0, "done".into()).await.ok();
}

/// The most copies a move has in flight (two batches of 500): the only messages a kill can leave
/// in both queues.
const IN_FLIGHT: u64 = 1_000;

/// A number below `n` that differs from run to run, so the kills land at different points; the
/// test prints it, to repeat a failure.
fn random_below(n: u64) -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u64(std::process::id().into());
    hasher.finish() % n
}

/// Every id `o1` ..= `o{n}` is in one of `queues`' drained ids, and no more than
/// `max_duplicates` are in two places.
fn assert_every_id_once_or_more(n: usize, queues: &[Vec<String>], max_duplicates: usize) {
    let all: HashSet<String> = (1..=n).map(|i| format!("o{i}")).collect();
    let found: Vec<&String> = queues.iter().flatten().collect();
    let distinct: HashSet<&String> = found.iter().copied().collect();
    let missing: Vec<&String> = all.iter().filter(|id| !distinct.contains(id)).take(20).collect();
    assert!(missing.is_empty(), "lost: {missing:?} (of {} missing)", all.len().saturating_sub(distinct.len()));
    let strangers: Vec<&&String> = distinct.iter().filter(|id| !all.contains(**id)).take(20).collect();
    assert!(strangers.is_empty(), "ids nobody sent: {strangers:?}");
    let duplicates = found.len() - distinct.len();
    eprintln!("{} messages, {duplicates} duplicates", all.len());
    assert!(duplicates <= max_duplicates, "{duplicates} duplicates, more than {max_duplicates}");
}

/// warren as a separate process, so the test can SIGKILL it.
struct Process {
    child: Child,
    base: String,
}

impl Process {
    async fn start(dir: &std::path::Path, vhost: &str) -> Process {
        // A free port: bind, note it, release it for warren.
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let config = dir.join("warren.toml");
        std::fs::write(
            &config,
            format!(
                "listen = \"127.0.0.1:{port}\"\ndatabase = {:?}\n[[brokers]]\nname = \"local\"\n\
                 {}vhosts_include = [{vhost:?}]\npoll_interval_secs = 1\n",
                dir.join("warren.db").display().to_string(),
                common::broker().toml()
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
        let base = format!("http://127.0.0.1:{port}");
        let http = reqwest::Client::new();
        wait_for("warren answers", Duration::from_secs(30), || async {
            match http.get(format!("{base}/healthz")).send().await {
                Ok(r) if r.status().is_success() => Ok(()),
                other => Err(format!("{other:?}")),
            }
        })
        .await;
        Process { child, base }
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_in_the_middle_of_a_bulk_requeue_loses_nothing() {
    const N: u64 = 20_000;
    let vhost = TestVhost::create("sigkill").await;
    let connection = vhost.connect().await;
    let channel = vhost.channel(&connection).await;
    dead_letters(&channel, N as usize).await;
    let dir = tempfile::tempdir().unwrap();
    let http = reqwest::Client::new();

    let mut warren = Process::start(dir.path(), &vhost.name).await;
    let queue_url = listed(&http, &warren, &vhost.name, "orders.dlq").await;
    let started: Value = http
        .post(format!("{queue_url}/requeue"))
        .json(&json!({"selection": "all"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let id = started["job"]["id"].as_i64().expect("a job");
    let kill_at = 500 + random_below(8_000);
    eprintln!("killing warren once {kill_at} messages have moved");
    let seen = wait_until_moved(&http, &warren.base, id, kill_at).await;
    // And until a checkpoint recorded some, so that the kill leaves ids behind to check.
    wait_for("a checkpoint with moved messages", Duration::from_secs(30), || async {
        let audit: Value =
            http.get(format!("{}/api/v1/audit", warren.base)).send().await.unwrap().json().await.unwrap();
        match audit[0]["moved"].as_u64() {
            Some(n) if n > 0 && audit[0]["outcome"] == "running" => Ok(()),
            _ if audit[0]["outcome"] != "running" && audit[0]["outcome"] != "started" => {
                panic!("the move ended before the test could interrupt it: {audit}")
            }
            _ => Err(audit[0].to_string()),
        }
    })
    .await;
    warren.child.kill().expect("SIGKILL");
    warren.child.wait().unwrap();
    let moved_before_kill = seen["progress"]["moved"].as_u64().unwrap();

    // The broker returns what the dead connection held unacked; then the two queues together
    // hold every message (a copy confirmed but not yet acked is in both).
    let (in_dlq, in_orders) = wait_for("unacked messages returned to orders.dlq", Duration::from_secs(30), || async {
        let (in_dlq, in_orders) =
            (u64::from(depth(&channel, "orders.dlq").await), u64::from(depth(&channel, "orders").await));
        if in_dlq + in_orders >= N {
            Ok((in_dlq, in_orders))
        } else {
            Err(format!("dlq {in_dlq} + orders {in_orders} < {N}"))
        }
    })
    .await;
    assert!(in_orders >= moved_before_kill, "the kill happened mid-way: {in_orders} moved");
    assert!(in_dlq > 0, "the kill happened before the end: {in_dlq} left");
    assert!(in_dlq + in_orders <= N + IN_FLIGHT, "duplicates only from the copies in flight: {in_dlq} + {in_orders}");

    // The next start says what happened.
    let warren = Process::start(dir.path(), &vhost.name).await;
    let audit: Value = http.get(format!("{}/api/v1/audit", warren.base)).send().await.unwrap().json().await.unwrap();
    assert_eq!(audit[0]["outcome"], "interrupted", "{audit}");
    assert!(audit[0]["detail"].as_str().unwrap().contains("warren stopped during this action"), "{audit}");
    assert!(audit[0]["moved"].as_u64().unwrap() <= in_orders, "the checkpoint never over-reports: {audit}");
    let job: Value = http.get(format!("{}/api/v1/jobs/{id}", warren.base)).send().await.unwrap().json().await.unwrap();
    assert_eq!(job["state"], "interrupted", "{job}");
    // Its checkpoints recorded which messages moved, not just how many: each of those ids is in
    // the target (an interrupted move used to record no id at all).
    let fates: Value =
        http.get(format!("{}/api/v1/audit/{id}/messages", warren.base)).send().await.unwrap().json().await.unwrap();
    let recorded: Vec<String> = fates
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["outcome"] == "moved")
        .map(|f| f["message_id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(recorded.len() as u64, audit[0]["moved"].as_u64().unwrap(), "ids and count from the same checkpoint");
    assert!(!recorded.is_empty(), "the kill came after a checkpoint: {audit}");
    let in_target = drain_ids(&channel, "orders").await;
    let in_source = drain_ids(&channel, "orders.dlq").await;
    let target_ids: HashSet<&String> = in_target.iter().collect();
    let missing: Vec<&String> = recorded.iter().filter(|id| !target_ids.contains(*id)).collect();
    assert!(missing.is_empty(), "recorded as moved but not in the target: {missing:?}");
    assert_every_id_once_or_more(N as usize, &[in_source, in_target], IN_FLIGHT as usize);
    drop(warren);
    connection.close(0, "done".into()).await.ok();
}

/// Waits until warren lists `queue` (its first poll), and returns the queue's API address.
async fn listed(http: &reqwest::Client, warren: &Process, vhost: &str, queue: &str) -> String {
    let queue_url = format!("{}/api/v1/queues/local/{}/{queue}", warren.base, encode(vhost));
    wait_for(&format!("{queue} listed"), Duration::from_secs(30), || async {
        let status = http.get(&queue_url).send().await.map(|r| r.status().as_u16());
        if status.as_ref().is_ok_and(|s| *s == 200) {
            Ok(())
        } else {
            Err(format!("{status:?}"))
        }
    })
    .await;
    // And polled by this process: until its first poll the pages show the last known state of
    // the killed one (its mover among the DLQ's consumers), and a move's stranding check reads
    // the roles of that state.
    let brokers = format!("{}/api/v1/brokers", warren.base);
    wait_for("the broker polled by this process", Duration::from_secs(30), || async {
        let body: serde_json::Value =
            http.get(&brokers).send().await.map_err(|e| e.to_string())?.json().await.map_err(|e| e.to_string())?;
        let status = &body[0]["status"];
        match status["up"] == true && status["restored_from"].is_null() {
            true => Ok(()),
            false => Err(status.to_string()),
        }
    })
    .await;
    queue_url
}

/// Issue 16's SIGKILL test for a length-limited target: a move of 10,000 into `parked`, which
/// holds at most 6,000 and refuses publishes beyond that (`reject-publish`), killed at three
/// random points and then run to the end. Every message is in the DLQ or in `parked`
/// afterwards, duplicates only from the copies in flight at each kill, `parked` never past its
/// limit, and the last run says why it stopped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_during_a_move_to_a_length_limited_target_loses_nothing() {
    const N: usize = 10_000;
    const LIMIT: usize = 6_000;
    const KILLS: usize = 3;
    let vhost = TestVhost::create("sigkill-limited").await;
    let connection = vhost.connect().await;
    let channel = vhost.channel(&connection).await;
    dead_letters(&channel, N).await;
    let mut args = FieldTable::default();
    args.insert("x-max-length".into(), AMQPValue::LongLongInt(LIMIT as i64));
    args.insert("x-overflow".into(), AMQPValue::LongString("reject-publish".into()));
    let durable = QueueDeclareOptions { durable: true, ..Default::default() };
    channel.queue_declare("parked".into(), durable, args).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let http = reqwest::Client::new();
    let request = json!({"selection": "all", "target": {"queue": "parked"}});

    for round in 0..KILLS {
        let mut warren = Process::start(dir.path(), &vhost.name).await;
        let queue_url = listed(&http, &warren, &vhost.name, "orders.dlq").await;
        let started: Value =
            http.post(format!("{queue_url}/requeue")).json(&request).send().await.unwrap().json().await.unwrap();
        let id = started["job"]["id"].as_i64().unwrap_or_else(|| panic!("a job: {started}"));
        // Each round moves at most 900, and leaves at most 1,000 copies behind as duplicates,
        // so the limit is not reached before the last run.
        let kill_at = 100 + random_below(800);
        eprintln!("round {round}: killing warren once {kill_at} messages have moved");
        wait_until_moved(&http, &warren.base, id, kill_at).await;
        warren.child.kill().expect("SIGKILL");
        warren.child.wait().unwrap();
        // The broker gives back what the dead connection held unacked.
        wait_for("unacked messages returned", Duration::from_secs(30), || async {
            let (in_dlq, parked) =
                (depth(&channel, "orders.dlq").await as usize, depth(&channel, "parked").await as usize);
            if in_dlq + parked >= N {
                Ok(())
            } else {
                Err(format!("dlq {in_dlq} + parked {parked} < {N}"))
            }
        })
        .await;
    }

    let warren = Process::start(dir.path(), &vhost.name).await;
    let queue_url = listed(&http, &warren, &vhost.name, "orders.dlq").await;
    let started: Value =
        http.post(format!("{queue_url}/requeue")).json(&request).send().await.unwrap().json().await.unwrap();
    let id = started["job"]["id"].as_i64().unwrap_or_else(|| panic!("a job: {started}"));
    let job = wait_for("the last move ends", Duration::from_secs(120), || async {
        let job: Value =
            http.get(format!("{}/api/v1/jobs/{id}", warren.base)).send().await.unwrap().json().await.unwrap();
        if job["state"] == "running" {
            Err(job["progress"].to_string())
        } else {
            Ok(job)
        }
    })
    .await;
    assert_ne!(job["state"], "done", "the target filled up, so the move could not finish: {job}");
    let stopped = job["report"]["stopped"].as_str().unwrap_or_default();
    assert!(stopped.contains("reject-publish"), "the move says why it stopped: {job}");
    let audit: Value = http.get(format!("{}/api/v1/audit", warren.base)).send().await.unwrap().json().await.unwrap();
    let interrupted = audit.as_array().unwrap().iter().filter(|a| a["outcome"] == "interrupted").count();
    assert_eq!(interrupted, KILLS, "each killed move is recorded as interrupted: {audit}");

    let parked = drain_ids(&channel, "parked").await;
    assert!(parked.len() <= LIMIT, "parked holds {} of at most {LIMIT}", parked.len());
    assert_eq!(parked.len(), LIMIT, "the move filled the target before it stopped");
    let in_dlq = drain_ids(&channel, "orders.dlq").await;
    assert_every_id_once_or_more(N, &[in_dlq, parked], KILLS * IN_FLIGHT as usize);
    drop(warren);
    connection.close(0, "done".into()).await.ok();
}

/// Issue 29, must-have 7: SIGKILL at three points of a 100,000-message requeue (the DLQ is
/// topped up to 100,000 before each). Each time, every message the job counted as moved a
/// checkpoint interval and a write before the kill (3 s) is in the audit by id, and every id the
/// audit lists is in the target. Under load the audit lagged by up to 15,774 ids, and entries read
/// "moved 0" after thousands had moved: the checkpoints were a future joined with the move's,
/// which was not polled while the move never yielded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_audit_after_a_kill_lists_every_id_moved_a_checkpoint_before() {
    const N: usize = 100_000;
    const CHECKPOINT_LAG: Duration = Duration::from_secs(3);
    let vhost = TestVhost::create("auditkill").await;
    let connection = vhost.connect().await;
    let channel = vhost.channel(&connection).await;
    let dir = tempfile::tempdir().unwrap();
    let http = reqwest::Client::new();
    dead_letters(&channel, 0).await; // declares the queues
    let (mut published, mut in_target) = (0, Vec::new());
    for round in 1..=3 {
        let in_dlq = depth(&channel, "orders.dlq").await as usize;
        dead_letters_from(&channel, published + 1, N - in_dlq, N).await;
        published += N - in_dlq;
        let mut warren = Process::start(dir.path(), &vhost.name).await;
        let queue_url = listed(&http, &warren, &vhost.name, "orders.dlq").await;
        let started: Value = http
            .post(format!("{queue_url}/requeue"))
            .json(&json!({"selection": "all"}))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let id = started["job"]["id"].as_i64().expect("a job");
        let moved = |job: &Value| job["progress"]["moved"].as_u64().unwrap_or(0);
        let job_now = || async {
            let job: Value =
                http.get(format!("{}/api/v1/jobs/{id}", warren.base)).send().await.unwrap().json().await.unwrap();
            assert_eq!(
                job["state"],
                "running",
                "round {round}: the move ended before the kill ({} moved): {job}",
                moved(&job)
            );
            job
        };
        let kill_at = 1_000 + random_below(5_000);
        let moved_then = loop {
            let job = job_now().await;
            if moved(&job) >= kill_at {
                break moved(&job);
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        };
        // The move runs on for a checkpoint interval and a write; it must still be running.
        let since = std::time::Instant::now();
        let mut moved_at_kill = moved_then;
        while since.elapsed() < CHECKPOINT_LAG {
            moved_at_kill = moved(&job_now().await);
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        warren.child.kill().expect("SIGKILL");
        warren.child.wait().unwrap();
        drop(warren);
        // What the dead connection held unacked goes back to the DLQ.
        let in_queues = published - in_target.len(); // the copies of earlier rounds were taken out
        wait_for("unacked messages returned", Duration::from_secs(30), || async {
            let (a, b) = (depth(&channel, "orders.dlq").await as usize, depth(&channel, "orders").await as usize);
            if a + b >= in_queues {
                Ok(())
            } else {
                Err(format!("{a} + {b} < {in_queues}"))
            }
        })
        .await;

        let warren = Process::start(dir.path(), &vhost.name).await;
        let fates: Value =
            http.get(format!("{}/api/v1/audit/{id}/messages", warren.base)).send().await.unwrap().json().await.unwrap();
        drop(warren);
        let recorded: Vec<String> = fates
            .as_array()
            .unwrap()
            .iter()
            .filter(|f| f["outcome"] == "moved")
            .map(|f| f["message_id"].as_str().unwrap().to_string())
            .collect();
        eprintln!(
            "round {round}: {moved_then} moved {CHECKPOINT_LAG:?} before the kill, {moved_at_kill} at the kill, {} \
             recorded after it",
            recorded.len()
        );
        assert!(
            recorded.len() as u64 >= moved_then,
            "round {round}: {moved_then} had moved {CHECKPOINT_LAG:?} before the kill, the audit lists {}",
            recorded.len()
        );
        // This round's copies, taken out of `orders` so that the next top-up dead-letters at once.
        let copies = drain_ids(&channel, "orders").await;
        let copy_ids: HashSet<&String> = copies.iter().collect();
        let missing: Vec<&String> = recorded.iter().filter(|id| !copy_ids.contains(*id)).take(20).collect();
        assert!(missing.is_empty(), "round {round}: recorded as moved but not in the target: {missing:?}");
        in_target.extend(copies);
    }
    let in_source = drain_ids(&channel, "orders.dlq").await;
    assert_every_id_once_or_more(published, &[in_source, in_target], 3 * IN_FLIGHT as usize);
    connection.close(0, "done".into()).await.ok();
}
