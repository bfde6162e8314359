//! warren's own database failing under it (issue 16, case 7): a full disk (a small tmpfs the test
//! mounts; the tests run as root, as CI does) and database files deleted while it runs. Moves are
//! refused with the database's error before anything is read, `/readyz` says the database is the
//! problem, the pages say so, and the broker is not shown down for it.

mod common;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::dead_letters::{dead_letter, depth, drain_ids, numbered};
use common::{wait_for, TestVhost, Warren};
use serde_json::{json, Value};

fn encode(s: &str) -> String {
    warren::broker::management::encode_segment(s)
}

/// A tmpfs of `size` mounted for one test, unmounted when dropped.
struct SmallDisk {
    dir: tempfile::TempDir,
}

impl SmallDisk {
    fn mount(size: &str) -> SmallDisk {
        let dir = tempfile::tempdir().unwrap();
        let status = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .status()
            .expect("mount runs");
        assert!(status.success(), "mounting a tmpfs needs root, as in CI");
        SmallDisk { dir }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Writes zeros until the file system is full; returns the filler's path.
    fn fill(&self) -> PathBuf {
        let filler = self.path().join("filler");
        let mut file = std::fs::File::create(&filler).unwrap();
        let chunk = vec![0u8; 4096];
        loop {
            if let Err(e) = file.write_all(&chunk).and_then(|()| file.sync_all()) {
                assert_eq!(e.raw_os_error(), Some(28), "ENOSPC, not {e}");
                return filler;
            }
        }
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(self.dir.path()).status();
    }
}

fn watching(vhost: &str) -> String {
    format!(
        "[[brokers]]\nname = \"local\"\n{}vhosts_include = [{vhost:?}]\npoll_interval_secs = 1\n",
        common::broker().toml()
    )
}

async fn readyz(warren: &Warren) -> (u16, Value) {
    warren.get_json("/readyz").await
}

async fn broker_up(warren: &Warren) -> Value {
    let (_, brokers) = warren.get_json("/api/v1/brokers").await;
    brokers[0]["status"]["up"].clone()
}

/// The disk fills while warren runs: a requeue is refused with the database's error and moves
/// nothing (it used to run with no audit row), `/readyz` and the pages say the disk is full, the
/// broker stays up; once there is room again, everything works and the refused request left no
/// audit row behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_refuses_moves_with_the_databases_error_and_nothing_moves() {
    let disk = SmallDisk::mount("8m");
    let vhost = TestVhost::create("fulldisk").await;
    let connection = vhost.connect().await;
    let channel = vhost.channel(&connection).await;
    dead_letter(&vhost, &channel, "work.dlq", false, numbered(20)).await;
    let warren = Warren::start_with_database(&disk.path().join("warren.db"), &watching(&vhost.name)).await;
    wait_for("work.dlq listed", Duration::from_secs(30), || async {
        warren.queue(&vhost.name, "work.dlq").await.map(|_| ()).ok_or_else(|| "not yet".to_string())
    })
    .await;
    assert_eq!(readyz(&warren).await.0, 200);

    let filler = disk.fill();
    let path = format!("/api/v1/queues/local/{}/work.dlq/requeue", encode(&vhost.name));
    let (status, body) = warren.post_json(&path, json!({"selection": "all"})).await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["error"]["code"], "storage", "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("disk holding the database is full") && message.contains("nothing was done"), "{body}");
    assert_eq!(depth(&channel, "work.dlq").await, 20, "nothing was read");
    assert_eq!(depth(&channel, "work").await, 0, "nothing was moved");

    let (status, ready) = readyz(&warren).await;
    assert_eq!(status, 503, "{ready}");
    assert_eq!(ready["database"], false, "{ready}");
    assert!(ready["database_problem"].as_str().unwrap().contains("full"), "{ready}");
    let (_, page) = warren.get_text("/").await;
    assert!(page.contains("warren's own database cannot be written") && page.contains("full"), "{page}");
    // Polls go on failing to write history meanwhile: the broker answered, it is not down.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(broker_up(&warren).await, true, "a storage fault is not a broker outage");

    std::fs::remove_file(filler).unwrap();
    wait_for("readyz once there is room", Duration::from_secs(30), || async {
        match readyz(&warren).await {
            (200, _) => Ok(()),
            (_, body) => Err(body.to_string()),
        }
    })
    .await;
    let (_, page) = warren.get_text("/").await;
    assert!(!page.contains("warren's own database cannot be written"), "the warning is gone");
    let job = warren.run_move(&path, json!({"selection": "all"})).await;
    assert_eq!(job["state"], "done", "{job}");
    let (_, audit) = warren.get_json("/api/v1/audit").await;
    let actions: Vec<&Value> = audit.as_array().unwrap().iter().filter(|r| r["kind"] == "action").collect();
    assert_eq!(actions.len(), 1, "the refused request left no row: {audit}");
    assert_eq!(actions[0]["outcome"], "done");
    let expected: Vec<String> = (1..=20).map(|i| format!("m{i}")).collect();
    assert_eq!(drain_ids(&channel, "work").await, expected);
    warren.stop().await;
    connection.close(0, "done".into()).await.ok();
}

/// The database files are deleted while warren runs: SQLite keeps writing to the deleted file,
/// and all of it would be lost at the next start. warren says so, `/readyz` is false, and moves
/// are refused rather than audited into a file that no longer exists.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleted_database_files_are_reported_and_moves_refused() {
    let dir = tempfile::tempdir().unwrap();
    let vhost = TestVhost::create("dbgone").await;
    let connection = vhost.connect().await;
    let channel = vhost.channel(&connection).await;
    dead_letter(&vhost, &channel, "work.dlq", false, numbered(5)).await;
    let database = dir.path().join("warren.db");
    let warren = Warren::start_with_database(&database, &watching(&vhost.name)).await;
    wait_for("work.dlq listed", Duration::from_secs(30), || async {
        warren.queue(&vhost.name, "work.dlq").await.map(|_| ()).ok_or_else(|| "not yet".to_string())
    })
    .await;
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", database.display()));
    }
    let (status, ready) = readyz(&warren).await;
    assert_eq!(status, 503, "{ready}");
    assert!(ready["database_problem"].as_str().unwrap().contains("was deleted"), "{ready}");
    let path = format!("/api/v1/queues/local/{}/work.dlq/requeue", encode(&vhost.name));
    let (status, body) = warren.post_json(&path, json!({"selection": "all"})).await;
    assert_eq!(status, 503, "{body}");
    assert!(body["error"]["message"].as_str().unwrap().contains("was deleted"), "{body}");
    let (_, page) = warren.get_text("/queues").await;
    assert!(page.contains("was deleted"), "every page says it");
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(broker_up(&warren).await, true);
    assert_eq!(depth(&channel, "work.dlq").await, 5, "nothing was read");
    warren.stop().await;
    connection.close(0, "done".into()).await.ok();
}

/// Issue 18, tests: the disk fills during custody intake. Intake stops with the database's
/// reason, every message stays in the broker, the DLQ page says why; once there is room
/// again, intake starts over and custody holds every id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_stops_custody_intake_and_loses_nothing() {
    const N: usize = 50;
    let disk = SmallDisk::mount("8m");
    let vhost = TestVhost::create("fulldiskcustody").await;
    let connection = vhost.connect().await;
    let channel = vhost.channel(&connection).await;
    dead_letter(&vhost, &channel, "work.dlq", false, Vec::new()).await;
    let toml = format!("{}\n[[custody]]\nqueue = \"work.dlq\"\n", watching(&vhost.name));
    let warren = Warren::start_with_database(&disk.path().join("warren.db"), &toml).await;
    let api = format!("/api/v1/queues/local/{}/work.dlq/custody", encode(&vhost.name));
    wait_for("intake running", Duration::from_secs(30), || async {
        let (_, list) = warren.get_json(&api).await;
        if list["custody"]["intake"]["state"] == "running" {
            Ok(())
        } else {
            Err(list.to_string())
        }
    })
    .await;

    let filler = disk.fill();
    dead_letter(&vhost, &channel, "work.dlq", false, numbered(N)).await;
    let list = wait_for("intake stopped", Duration::from_secs(60), || async {
        let (_, list) = warren.get_json(&api).await;
        if list["custody"]["intake"]["state"] == "stopped" {
            Ok(list)
        } else {
            Err(list.to_string())
        }
    })
    .await;
    let reason = list["custody"]["intake"]["reason"].as_str().unwrap().to_string();
    assert!(reason.contains("full"), "the database's reason: {reason}");
    assert_eq!(list["custody"]["counts"]["held"], 0, "{list}");
    wait_for("every message back in the broker", Duration::from_secs(30), || async {
        let left = depth(&channel, "work.dlq").await as usize;
        if left == N {
            Ok(())
        } else {
            Err(format!("{left} in the broker"))
        }
    })
    .await;
    let (_, page) = warren.get_text(&format!("/dlq/local/{}/work.dlq", encode(&vhost.name))).await;
    assert!(page.contains("signal bad custody-intake") && page.contains("full"), "the page says why");
    // `/metrics` and the alerts cannot say it here: with the disk full, polls write no history
    // and the live numbers stay those of the last poll written (the pages say the database is
    // the problem). The budget test checks both.

    // Room again: intake is tried again (every 30 s) and takes every message once.
    std::fs::remove_file(filler).unwrap();
    let list = wait_for("every message in custody", Duration::from_secs(90), || async {
        let (_, list) = warren.get_json(&format!("{api}?limit=1000")).await;
        if list["custody"]["counts"]["held"] == N && list["custody"]["intake"]["state"] == "running" {
            Ok(list)
        } else {
            Err(list["custody"]["intake"].to_string())
        }
    })
    .await;
    let mut ids: Vec<String> = list["custody"]["records"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["message_id"].as_str().unwrap().to_string())
        .collect();
    ids.sort();
    let mut expected: Vec<String> = (1..=N).map(|i| format!("m{i}")).collect();
    expected.sort();
    assert_eq!(ids, expected, "each id once");
    assert_eq!(depth(&channel, "work.dlq").await, 0);
    warren.stop().await;
    connection.close(0, "done".into()).await.ok();
}

/// Issue 36, case 6: `warren backup` takes a consistent copy of the live database while warren
/// writes to it (custody intake and every poll), created readable by its owner only, and refuses
/// a path that exists; restored (the copy put in place of the database), warren serves every
/// dead letter custody held, by id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backup_of_the_live_database_restores_every_record() {
    use std::collections::HashSet;
    use std::os::unix::fs::PermissionsExt;
    const N: usize = 300;
    let dir = tempfile::tempdir().unwrap();
    let vhost = TestVhost::create("backup").await;
    let connection = vhost.connect().await;
    let channel = vhost.channel(&connection).await;
    dead_letter(&vhost, &channel, "work.dlq", false, numbered(N)).await;
    let database = dir.path().join("warren.db");
    let toml = format!("{}\n[[custody]]\nqueue = \"*.dlq\"\n", watching(&vhost.name));
    let warren = Warren::start_with_database(&database, &toml).await;
    let listing = format!("/api/v1/queues/local/{}/work.dlq/custody?limit=1000", encode(&vhost.name));
    wait_for("every dead letter in custody", Duration::from_secs(60), || async {
        let (_, body) = warren.get_json(&listing).await;
        if body["custody"]["counts"]["held"] == N {
            Ok(())
        } else {
            Err(body.to_string())
        }
    })
    .await;

    // While warren polls every second.
    let copy = dir.path().join("copy.db");
    let backup = |to: &Path| {
        Command::new(env!("CARGO_BIN_EXE_warren"))
            .args(["backup", to.to_str().unwrap(), "--database", database.to_str().unwrap()])
            .output()
            .expect("warren runs")
    };
    let out = backup(&copy);
    let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{said}");
    assert!(said.contains("checked"), "{said}");
    assert_eq!(std::fs::metadata(&copy).unwrap().permissions().mode() & 0o777, 0o600, "owner only");
    let out = backup(&copy);
    assert!(!out.status.success(), "an existing file is refused");
    assert!(String::from_utf8_lossy(&out.stderr).contains("copy.db"), "{out:?}");
    warren.stop().await;

    // Restore: the copy in place of the database, alone.
    let restored = dir.path().join("restored.db");
    std::fs::copy(&copy, &restored).unwrap();
    let warren = Warren::start_with_database(&restored, &toml).await;
    let (status, body) = warren.get_json(&listing).await;
    assert_eq!(status, 200, "{body}");
    let ids: HashSet<String> = body["custody"]["records"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["message_id"].as_str().unwrap().to_string())
        .collect();
    let all: HashSet<String> = (1..=N).map(|i| format!("m{i}")).collect();
    assert_eq!(ids, all, "every record, by id");
    warren.stop().await;
    assert!(drain_ids(&channel, "work.dlq").await.is_empty(), "custody held them all");
    connection.close(0, "done".into()).await.ok();
}
