//! Custody's records as a DLQ's page acts on them and counts them (issue 34, case 6), on the
//! real broker, ids compared as sets:
//! - ticked one by one: the page's checkboxes and the API's `{"selection": {"records": [...]}}`
//!   replay exactly the chosen records, through the replay's checks; ids that are not numbers,
//!   another queue's records, replayed ones, none or thousands are refused with a clear error
//!   and move nothing;
//! - a DLQ deleted and re-created under the same name starts from its own replays, not the old
//!   one's ("907 replayed"), and the records still held stay held.

mod common;

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use common::dead_letters::{dead_letter, depth, drain_ids, numbered};
use common::{encode, wait_for, TestVhost, Warren};
use serde_json::{json, Value};

const N: usize = 20;

/// Message id -> record id of every record `vhost`'s `work.dlq` custody holds.
async fn held(warren: &Warren, vhost: &str) -> HashMap<String, i64> {
    let (status, list) =
        warren.get_json(&format!("/api/v1/queues/local/{}/work.dlq/custody?limit=1000", encode(vhost))).await;
    assert_eq!(status, 200, "{list}");
    list["custody"]["records"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["state"] == "held")
        .map(|r| (r["message_id"].as_str().unwrap().to_string(), r["id"].as_i64().unwrap()))
        .collect()
}

/// Watches `vhosts` every second; every `*.dlq` is taken into custody.
fn custody_toml(vhosts: &[&str]) -> String {
    format!(
        "[[brokers]]\nname = \"local\"\nvhosts_include = {vhosts:?}\npoll_interval_secs = 1\n\n\
         [[custody]]\nqueue = \"*.dlq\"\n"
    )
}

/// Waits until `vhost`'s `work.dlq` custody holds `n` records.
async fn wait_held(warren: &Warren, vhost: &str, n: usize) {
    wait_for(&format!("{n} records held"), Duration::from_secs(60), || async {
        // 404 until the first poll lists the queue.
        warren.queue(vhost, "work.dlq").await.ok_or("work.dlq not listed yet")?;
        let now = held(warren, vhost).await;
        if now.len() == n {
            Ok(())
        } else {
            Err(format!("{} held", now.len()))
        }
    })
    .await;
}

fn ids(names: &[&str]) -> HashSet<String> {
    names.iter().map(|s| s.to_string()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ticked_custody_records_are_replayed_alone_and_hostile_ids_are_refused() {
    let (mine, other) = (TestVhost::create("custodytick").await, TestVhost::create("custodytick2").await);
    let connection = mine.connect().await;
    let channel = mine.channel(&connection).await;
    let other_connection = other.connect().await;
    let other_channel = other.channel(&other_connection).await;
    dead_letter(&mine, &channel, "work.dlq", false, numbered(N)).await;
    dead_letter(&other, &other_channel, "work.dlq", false, numbered(3)).await;
    let warren = Warren::start(&custody_toml(&[&mine.name, &other.name])).await;
    wait_held(&warren, &mine.name, N).await;
    wait_held(&warren, &other.name, 3).await;
    let all: HashSet<String> = (1..=N).map(|i| format!("m{i}")).collect();
    let records = held(&warren, &mine.name).await;
    let record = |m: &str| records[m];

    // The page offers a checkbox per record and the button that replays the ticked ones.
    let dlq = format!("/dlq/local/{}/work.dlq", encode(&mine.name));
    let (_, page) = warren.get_text(&dlq).await;
    assert!(page.contains(&format!("name=\"record\" value=\"{}\"", record("m5"))), "{page}");
    assert!(page.contains("class=\"replay-ticked\""), "{page}");

    // The API: three records by id, and only those move.
    let api = format!("/api/v1/queues/local/{}/work.dlq/custody/replay", encode(&mine.name));
    let chosen = json!({"selection": {"records": [record("m3"), record("m7"), record("m11")]}});
    let (status, started) = warren.post_json(&api, chosen).await;
    assert_eq!(status, 202, "{started}");
    let ended = warren.audit_ended(started["audit_id"].as_i64().unwrap()).await;
    assert_eq!(ended["moved"], 3, "{ended}");
    let arrived: HashSet<String> = drain_ids(&channel, "work").await.into_iter().collect();
    assert_eq!(arrived, ids(&["m3", "m7", "m11"]), "only the chosen records were replayed");
    let still: HashSet<String> = held(&warren, &mine.name).await.into_keys().collect();
    assert_eq!(still, &all - &arrived, "the others stay held, none lost");

    // The page's form: two ticked checkboxes and the "Replay the ticked records" button.
    let http = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
    let post_form = |fields: Vec<(&'static str, String)>| {
        let request = http.post(warren.url(&format!("{dlq}/custody/replay"))).form(&fields);
        async move {
            let response = request.send().await.unwrap();
            let location = response.headers().get("location").map(|l| l.to_str().unwrap().to_string());
            (response.status().as_u16(), location, response.text().await.unwrap())
        }
    };
    let base = || vec![("scope", "all".to_string()), ("target", "original-queue".to_string())];
    let mut ticked = base();
    ticked.extend([
        ("record", record("m1").to_string()),
        ("record", record("m2").to_string()),
        ("ticked", "true".to_string()),
    ]);
    let (status, location, body) = post_form(ticked).await;
    assert_eq!(status, 303, "{body}");
    let job: i64 = location.unwrap().rsplit('/').next().unwrap().parse().unwrap();
    assert_eq!(warren.audit_ended(job).await["moved"], 2);
    let arrived: HashSet<String> = drain_ids(&channel, "work").await.into_iter().collect();
    assert_eq!(arrived, ids(&["m1", "m2"]));
    let before: HashSet<String> = held(&warren, &mine.name).await.into_keys().collect();
    assert_eq!(before, &all - &ids(&["m1", "m2", "m3", "m7", "m11"]));

    // Hostile selections: each refused with a clear error, and nothing moves.
    let theirs = held(&warren, &other.name).await["m1"];
    let thousands: Vec<i64> = (1..=1001).collect();
    let refusals = [
        ("another queue's record", json!([record("m4"), theirs]), 400, "not held in the custody of"),
        ("a replayed record", json!([record("m3")]), 400, "not held"),
        ("a record never taken in", json!([i64::MAX]), 400, "not held"),
        ("no record", json!([]), 400, "tick at least one record"),
        ("thousands of ids", json!(thousands), 400, "at most 1000 by id"),
        ("ids that are not numbers", json!(["m4"]), 422, "invalid type"),
    ];
    for (what, selection, code, says) in refusals {
        let (status, body) = warren.post_json(&api, json!({"selection": {"records": selection}})).await;
        assert_eq!(status, code, "{what}: {body}");
        assert!(body.to_string().contains(says), "{what}: {body}");
    }
    let mut not_a_number = base();
    not_a_number.extend([("record", "4; drop table".to_string()), ("ticked", "true".to_string())]);
    let (status, _, body) = post_form(not_a_number).await;
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("is not a record number"), "{body}");
    // Enter in a field submits with "Replay", the first button: with records ticked, that is
    // refused, not a replay of every record.
    let mut enter = base();
    enter.push(("record", record("m4").to_string()));
    let (status, _, body) = post_form(enter).await;
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("Replay the ticked records"), "{body}");

    // Every refusal came before a job was started, so nothing can still be on its way.
    assert_eq!(depth(&channel, "work").await, 0, "no refused selection sent anything");
    let after: HashSet<String> = held(&warren, &mine.name).await.into_keys().collect();
    assert_eq!(after, before, "no refused selection took a record");
    assert_eq!(held(&warren, &other.name).await.len(), 3, "the other queue's custody untouched");
    warren.stop().await;
}

/// The custody counts of `vhost`'s `work.dlq` as the API lists them.
async fn counts(warren: &Warren, vhost: &str) -> Value {
    let (status, list) = warren.get_json(&format!("/api/v1/queues/local/{}/work.dlq/custody", encode(vhost))).await;
    assert_eq!(status, 200, "{list}");
    list["custody"]["counts"].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recreated_dlq_counts_its_own_replays_not_the_old_ones() {
    let vhost = TestVhost::create("custodyagain").await;
    let connection = vhost.connect().await;
    let channel = vhost.channel(&connection).await;
    dead_letter(&vhost, &channel, "work.dlq", false, numbered(6)).await;
    let warren = Warren::start(&custody_toml(&[&vhost.name])).await;
    wait_held(&warren, &vhost.name, 6).await;
    let records = held(&warren, &vhost.name).await;
    let api = format!("/api/v1/queues/local/{}/work.dlq/custody/replay", encode(&vhost.name));
    let chosen: Vec<i64> = ["m1", "m2", "m3", "m4"].iter().map(|m| records[*m]).collect();
    let (status, started) = warren.post_json(&api, json!({"selection": {"records": chosen}})).await;
    assert_eq!(status, 202, "{started}");
    assert_eq!(warren.audit_ended(started["audit_id"].as_i64().unwrap()).await["moved"], 4);
    let arrived: HashSet<String> = drain_ids(&channel, "work").await.into_iter().collect();
    assert_eq!(arrived, ids(&["m1", "m2", "m3", "m4"]));
    assert_eq!(counts(&warren, &vhost.name).await["replayed"], 4);
    let dlq = format!("/dlq/local/{}/work.dlq", encode(&vhost.name));
    assert!(warren.get_text(&dlq).await.1.contains("; 4 replayed"));

    // Deleted on the broker: warren marks it gone once two polls miss it.
    vhost.delete_queue("work.dlq").await;
    wait_for("work.dlq marked deleted", Duration::from_secs(30), || async {
        match warren.queue(&vhost.name, "work.dlq").await {
            Some(q) if q["deleted"] == true => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    // Declared again, with two new dead letters, which custody takes in.
    dead_letter(
        &vhost,
        &channel,
        "work.dlq",
        false,
        vec![("n1".into(), b"{}".to_vec(), Default::default()), ("n2".into(), b"{}".to_vec(), Default::default())],
    )
    .await;
    wait_held(&warren, &vhost.name, 4).await;
    let kept: HashSet<String> = held(&warren, &vhost.name).await.into_keys().collect();
    assert_eq!(kept, ids(&["m5", "m6", "n1", "n2"]), "the old queue's held records stay held, none lost");
    let now = counts(&warren, &vhost.name).await;
    assert_eq!(now["replayed"], 0, "the new queue replayed nothing yet: {now}");
    let page = warren.get_text(&dlq).await.1;
    assert!(page.contains("still in the broker. Intake"), "no replayed count: {page}");

    // Its own replays count.
    let records = held(&warren, &vhost.name).await;
    let (status, started) = warren.post_json(&api, json!({"selection": {"records": [records["n1"]]}})).await;
    assert_eq!(status, 202, "{started}");
    assert_eq!(warren.audit_ended(started["audit_id"].as_i64().unwrap()).await["moved"], 1);
    assert_eq!(drain_ids(&channel, "work").await, vec!["n1".to_string()]);
    assert_eq!(counts(&warren, &vhost.name).await["replayed"], 1);
    assert!(warren.get_text(&dlq).await.1.contains("; 1 replayed"));
    warren.stop().await;
}
