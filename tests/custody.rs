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
            if q["custody_held"] == N && q["ready"] == 0 && q["total"] == N {
                Ok(q)
            } else {
                Err(q.to_string())
            }
        })
        .await;
        assert_eq!(view["is_dlq"], true, "{view}");
        assert_eq!(depth(&channel, "work.dlq").await, 0, "taken off the broker");
        // Issue 31, case 5: the age is the oldest held record's, never "0 s exact".
        assert_eq!(
            (&view["oldest_age_source"], &view["oldest_age_lower_bound"], &view["age_from_custody"]),
            (&json!("estimated"), &json!(true), &json!(true)),
            "{view}"
        );

        // Every record, not a sample: grouped and filtered over all of them.
        let list = listing(&warren, &vhost.name, "?limit=1000").await;
        assert_eq!(list["in_custody"], true);
        assert_eq!(list["custody"]["counts"]["held"], N);
        let group = |g: &Value| (g["value"].clone(), g["records"].clone());
        let by_reason: Vec<_> = list["custody"]["by_reason"].as_array().unwrap().iter().map(group).collect();
        assert_eq!(by_reason, vec![(json!("rejected"), json!(N))], "{list}");
        let by_queue: Vec<_> = list["custody"]["by_original_queue"].as_array().unwrap().iter().map(group).collect();
        assert_eq!(by_queue, vec![(json!("work"), json!(N))]);
        // First and last seen: when custody took in the first and the last of the group.
        let g = &list["custody"]["by_reason"][0];
        assert!(g["first_seen"].as_i64().unwrap() <= g["last_seen"].as_i64().unwrap(), "{g}");
        assert!(g["last_seen"].as_i64().unwrap() <= chrono::Utc::now().timestamp(), "{g}");
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
        let (a, b) = (warren.audit_ended(first).await, warren.audit_ended(second).await);
        assert_eq!(a["moved"].as_u64().unwrap() + b["moved"].as_u64().unwrap(), N as u64, "{a} {b}");
        // Old messages in `work` now: its age estimate is marked a lower bound, as after a move.
        wait_for("work marked as holding replayed messages", Duration::from_secs(30), || async {
            let q = warren.queue(&vhost.name, "work").await.ok_or("not listed")?;
            if q["fifo_broken_since"].is_string() {
                Ok(())
            } else {
                Err(q.to_string())
            }
        })
        .await;
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
        connection.close(0, "done".into()).await.ok();
    }
}

/// Issue 18, must-have 3: every record is searched by text, a header's value, a path into a
/// JSON body and a regular expression; each answer is checked against the messages the test put
/// in (JSON bodies of two shapes, binary bodies that are not UTF-8, typed headers), and a replay
/// of a filter takes exactly the records the listing showed for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn custody_search_by_header_json_path_and_regex_answers_what_was_put_in() {
    use lapin::types::{AMQPValue, FieldTable};
    const N: usize = 48;
    struct Put {
        id: String,
        tenant: &'static str,
        retries: Option<i64>,
        sku: Option<String>,
        qty: Option<usize>,
        binary: bool,
    }
    let mut put = Vec::new();
    let mut messages = Vec::new();
    for i in 1..=N {
        let id = format!("m{i}");
        let tenant = if i % 2 == 0 { "Acme-EU" } else { "globex" };
        let retries = (i % 4 != 0).then_some((i % 4) as i64);
        let (body, sku, qty, binary) = match i % 3 {
            0 => {
                let sku = format!("SKU-{}", i % 5);
                (
                    format!("{{\"order\": {{\"sku\": \"{sku}\", \"qty\": {i}}}, \"ok\": true}}").into_bytes(),
                    Some(sku),
                    Some(i),
                    false,
                )
            }
            1 => (
                format!("{{\"items\": [{{\"sku\": \"ITEM-{i}\"}}], \"note\": \"line {i}\"}}").into_bytes(),
                None,
                None,
                false,
            ),
            _ => (vec![0x80, 0xff, 0xfe, i as u8, b'z'], None, None, true),
        };
        let mut headers = FieldTable::default();
        headers.insert("x-tenant".into(), AMQPValue::LongString(tenant.into()));
        if let Some(r) = retries {
            headers.insert("x-retries".into(), AMQPValue::LongLongInt(r));
        }
        messages.push((id.clone(), body, headers));
        put.push(Put { id, tenant, retries, sku, qty, binary });
    }
    // Where a quick first look at the text could miss what the full reading finds: a JSON
    // string spelled with a \u escape, text after a NUL byte, a header value with a quote, and
    // LIKE's own wildcards in the text searched for.
    let extra: [(&str, &[u8], &'static str); 5] = [
        ("x1", br#"{"name": "\u0061bc-z"}"#, "globex"),
        ("x2", b"\x00\x01needle-Q7 after a nul", "globex"),
        ("x3", br#"{"promo": "a_b 50%_off"}"#, "Acme \"quoted\""),
        ("x4", br#"{"promo": "axb 50%xoff"}"#, "globex"),
        ("x5", br#"{"name": "abc-z"}"#, "globex"),
    ];
    for (id, body, tenant) in extra {
        let mut headers = FieldTable::default();
        headers.insert("x-tenant".into(), AMQPValue::LongString(tenant.into()));
        messages.push((id.to_string(), body.to_vec(), headers));
        put.push(Put { id: id.to_string(), tenant, retries: None, sku: None, qty: None, binary: false });
    }
    let total = put.len();
    let vhost = TestVhost::create("custodysearch").await;
    let connection = vhost.connect().await;
    let channel = vhost.channel(&connection).await;
    dead_letter(&vhost, &channel, "work.dlq", false, messages).await;
    let warren = Warren::start(&custody_toml(&vhost.name)).await;
    wait_for("every dead letter in custody", Duration::from_secs(60), || async {
        let q = warren.queue(&vhost.name, "work.dlq").await.ok_or("not listed")?;
        if q["custody_held"] == total {
            Ok(())
        } else {
            Err(q.to_string())
        }
    })
    .await;

    let found = |query: String| {
        let warren = &warren;
        let vhost = &vhost.name;
        async move {
            let list = listing(warren, vhost, &format!("?limit=1000&{query}")).await;
            let ids: HashSet<String> = list["custody"]["records"]
                .as_array()
                .unwrap()
                .iter()
                .map(|r| r["message_id"].as_str().unwrap().to_string())
                .collect();
            assert_eq!(list["custody"]["matching"], ids.len(), "{query}: the count is what is listed");
            ids
        }
    };
    let expect = |keep: &dyn Fn(&Put) -> bool| -> HashSet<String> {
        put.iter().filter(|p| keep(p)).map(|p| p.id.clone()).collect()
    };
    let cases: Vec<(&str, HashSet<String>)> = vec![
        // A header's value: part of it, ignoring case; a number as its text; presence alone.
        ("header=x-tenant&header_value=acme", expect(&|p| p.tenant.to_lowercase().contains("acme"))),
        ("header=x-tenant&header_value=%22QUOTED%22", expect(&|p| p.id == "x3")),
        ("header=x-tenant&header_value=GLOBEX", expect(&|p| p.tenant == "globex")),
        ("header=x-retries&header_value=3", expect(&|p| p.retries == Some(3))),
        ("header=x-retries", expect(&|p| p.retries.is_some())),
        ("header=x-missing", HashSet::new()),
        // A path into the JSON body, its value exact; binary bodies have no paths and break nothing.
        ("json_path=order.sku&json_value=SKU-3", expect(&|p| p.sku.as_deref() == Some("SKU-3"))),
        ("json_path=%24.order.qty&json_value=12", expect(&|p| p.qty == Some(12))),
        ("json_path=order.sku", expect(&|p| p.sku.is_some())),
        ("json_path=items%5B0%5D.sku&json_value=ITEM-7", expect(&|p| p.id == "m7")),
        ("json_path=ok&json_value=true", expect(&|p| p.sku.is_some())),
        ("json_path=name&json_value=abc-z", expect(&|p| p.id == "x1" || p.id == "x5")),
        // Text anywhere, its case aside: after a NUL byte too; `%` and `_` are themselves.
        ("text=NEEDLE-q7", expect(&|p| p.id == "x2")),
        ("text=a_b%2050%25_", expect(&|p| p.id == "x3")),
        // A regular expression over bodies (bytes, not only UTF-8) and properties.
        (
            "regex=ITEM-1%5B0-9%5D%5Cb",
            expect(&|p| !p.binary && p.sku.is_none() && (10..20).contains(&p.id[1..].parse::<usize>().unwrap())),
        ),
        ("regex=%28%3F-u%29%5Cxff%5Cxfe", expect(&|p| p.binary)),
        ("regex=%28%3Fi%29acme-eu", expect(&|p| p.tenant == "Acme-EU")),
        // Text every match starts with is looked for in SQL first: after a NUL byte too.
        ("regex=needle-Q7", expect(&|p| p.id == "x2")),
        ("regex=a_b%2050%25_o", expect(&|p| p.id == "x3")),
        // Combined with each other and with the other filters.
        (
            "regex=SKU-&header=x-tenant&header_value=acme&reason=rejected",
            expect(&|p| p.sku.is_some() && p.tenant.to_lowercase().contains("acme")),
        ),
    ];
    for (query, expected) in &cases {
        assert!(!expected.is_empty() || query.contains("missing"), "{query}: the case tests something");
        assert_eq!(&found(query.to_string()).await, expected, "{query}");
    }

    // What cannot be a filter is a clear 400, never a failed query or a panic.
    for bad in [
        "regex=%28unclosed",
        "json_path=a..b",
        "json_path=a%5Bx%5D",
        "json_value=1",
        "header_value=x",
        "json_path=%22q%22",
    ] {
        let (status, body) =
            warren.get_json(&format!("/api/v1/queues/local/{}/work.dlq/custody?{bad}", encode(&vhost.name))).await;
        assert_eq!(status, 400, "{bad}: {body}");
    }
    let (status, page) = warren.get_text(&format!("/dlq/local/{}/work.dlq?regex=%28", encode(&vhost.name))).await;
    assert_eq!(status, 200);
    assert!(page.contains("regex:"), "the page says what is wrong with the filter");

    // A replay of a filter takes exactly the records the listing showed for it.
    let chosen = found("json_path=order.sku&header=x-tenant&header_value=acme".to_string()).await;
    assert!(!chosen.is_empty());
    let filter = json!({"json_path": "order.sku", "header": "x-tenant", "header_value": "acme"});
    let id = replay(&warren, &vhost.name, json!({"selection": {"matching": filter}})).await;
    let done = warren.audit_ended(id).await;
    assert_eq!(done["moved"], chosen.len(), "{done}");
    let arrived: HashSet<String> = drain_ids(&channel, "work").await.into_iter().collect();
    assert_eq!(arrived, chosen);
    assert_eq!(found(String::new()).await.len(), total - chosen.len());

    warren.stop().await;
    connection.close(0, "done".into()).await.ok();
}

/// Issue 18, must-have 6: a filter's records exported as JSON lines and imported into the
/// custody of another DLQ, never into a live queue; replayed from there they are the messages
/// that died (body, typed headers, the queue they died in). A bad line or a budget passed
/// imports nothing and says why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn custody_exports_json_lines_that_import_into_another_dlqs_custody() {
    use lapin::types::{AMQPValue, FieldTable};
    let vhost = TestVhost::create("custodytransfer").await;
    let connection = vhost.connect().await;
    let channel = vhost.channel(&connection).await;
    let mut messages = Vec::new();
    for i in 1..=12usize {
        let mut headers = FieldTable::default();
        headers.insert("x-tenant".into(), AMQPValue::LongString(if i % 3 == 0 { "acme" } else { "globex" }.into()));
        headers.insert("x-small".into(), AMQPValue::ShortInt(i as i16));
        let body = if i % 2 == 0 { format!("{{\"n\": {i}}}").into_bytes() } else { vec![0x80, 0xff, i as u8] };
        messages.push((format!("t{i}"), body, headers));
    }
    let sent: Vec<(String, Vec<u8>)> = messages.iter().map(|(id, body, _)| (id.clone(), body.clone())).collect();
    dead_letter(&vhost, &channel, "work.dlq", false, messages).await;
    common::declare(&channel, "other.dlq", true).await;
    let toml = custody_toml(&vhost.name).replace("queue = \"*.dlq\"\n", "queue = \"*.dlq\"\nmax_bytes = 20000\n");
    let warren = Warren::start(&toml).await;
    wait_for("every dead letter in custody", Duration::from_secs(60), || async {
        let q = warren.queue(&vhost.name, "work.dlq").await.ok_or("not listed")?;
        warren.queue(&vhost.name, "other.dlq").await.ok_or("other.dlq not listed")?;
        if q["custody_held"] == 12 {
            Ok(())
        } else {
            Err(q.to_string())
        }
    })
    .await;

    let base = |queue: &str| format!("/api/v1/queues/local/{}/{queue}/custody", encode(&vhost.name));
    let response = warren
        .http
        .get(warren.url(&format!("{}/export?header=x-tenant&header_value=acme", base("work.dlq"))))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "application/x-ndjson");
    let export = response.text().await.unwrap();
    let lines: Vec<Value> = export.lines().map(|l| serde_json::from_str(l).expect("each line is JSON")).collect();
    let ids: Vec<&str> = lines.iter().map(|l| l["message_id"].as_str().unwrap()).collect();
    assert_eq!(ids, vec!["t3", "t6", "t9", "t12"], "the filter's records, oldest first");
    assert_eq!(lines[0]["original_queue"], "work");
    assert!(lines[0]["amqp_properties"].is_string() && lines[0]["properties"]["headers"]["x-small"] == 3);
    // The page links the same export for the filter it shows.
    let (_, page) = warren
        .get_text(&format!("/dlq/local/{}/work.dlq?header=x-tenant&header_value=acme", encode(&vhost.name)))
        .await;
    let href = page
        .split("class=\"custody-export\" href=\"")
        .nth(1)
        .and_then(|r| r.split('"').next())
        .expect("an export link");
    let (status, linked) = warren.get_text(&href.replace("&#38;", "&").replace("&amp;", "&")).await;
    assert_eq!((status, linked.as_str()), (200, export.as_str()));

    // Bad input keeps nothing: the line is named.
    let import = |queue: &str, body: String| {
        let url = warren.url(&format!("{}/import", base(queue)));
        let http = warren.http.clone();
        async move {
            let response = http.post(url).body(body).send().await.unwrap();
            (response.status().as_u16(), response.json::<Value>().await.unwrap_or(Value::Null))
        }
    };
    let (status, body) = import("other.dlq", format!("{export}{{\"body\": \"%%\"}}\n")).await;
    assert_eq!(status, 400, "{body}");
    assert!(body.to_string().contains("line 5"), "{body}");
    assert_eq!(listing(&warren, &vhost.name, "").await["custody"]["counts"]["held"], 12, "nothing added anywhere");
    let (status, body) = import("other.dlq", export.clone()).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["imported"], 4);
    let (_, other) = warren.get_json(&base("other.dlq")).await;
    let records = other["custody"]["records"].as_array().unwrap();
    let imported: Vec<&str> = records.iter().map(|r| r["message_id"].as_str().unwrap()).collect();
    assert_eq!(imported, vec!["t3", "t6", "t9", "t12"]);
    assert!(records.iter().all(|r| r["original_queue"] == "work" && r["reason"] == "rejected"), "{other}");

    // Replayed from there, they are the messages that died: bodies and typed headers. `work`
    // has never had a consumer here and dead-letters into work.dlq, not into other.dlq: seen from
    // other.dlq it looks like a wait queue (`target::stranding`), so the risk is accepted.
    let replay_all = json!({"selection": "all", "accept_stranding": true});
    let (status, started) = warren.post_json(&format!("{}/replay", base("other.dlq")), replay_all).await;
    assert_eq!(status, 202, "{started}");
    let done = warren.audit_ended(started["audit_id"].as_i64().unwrap()).await;
    assert_eq!(done["moved"], 4, "{done}");
    let mut arrived = Vec::new();
    while let Some(m) =
        channel.basic_get("work".into(), lapin::options::BasicGetOptions { no_ack: true }).await.unwrap()
    {
        let p = &m.delivery.properties;
        let headers = p.headers().clone().unwrap();
        assert_eq!(
            headers.inner().get("x-small"),
            Some(&AMQPValue::ShortInt(
                m.delivery.properties.message_id().as_ref().unwrap().as_str()[1..].parse().unwrap()
            ))
        );
        arrived.push((p.message_id().as_ref().unwrap().to_string(), m.delivery.data.clone()));
    }
    let expected: Vec<(String, Vec<u8>)> =
        sent.into_iter().filter(|(id, _)| ["t3", "t6", "t9", "t12"].contains(&id.as_str())).collect();
    assert_eq!(arrived, expected);

    // An import past the size budget (20,000 bytes here) keeps nothing, and says so.
    let small = "{\"body\": \"QUFB\"}\n";
    let big = format!("{small}{{\"body\": \"{}\"}}\n", "QUFB".repeat(8_000));
    let (status, body) = import("other.dlq", big).await;
    assert_eq!(status, 409, "{body}");
    assert!(body.to_string().contains("size budget of 20000 bytes"), "{body}");
    let (_, other) = warren.get_json(&base("other.dlq")).await;
    assert_eq!(other["custody"]["counts"]["held"], 0, "all or none: the small line was not kept either");
    warren.stop().await;
    connection.close(0, "done".into()).await.ok();
}

/// Issue 18, must-have 5: an admin changes one record's body and a header and replays it as
/// a new copy; the copy carries the change (headers left alone keep their AMQP types), the
/// original record is kept, marked replayed as an edited copy, and the audit log keeps the diff.
/// Off unless the queue's rule says `edit = true`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_admin_edits_one_record_and_replays_it_as_a_new_copy() {
    use lapin::types::{AMQPValue, FieldTable};
    let vhost = TestVhost::create("custodyedit").await;
    let connection = vhost.connect().await;
    let channel = vhost.channel(&connection).await;
    let mut messages = Vec::new();
    for i in 1..=3usize {
        let mut headers = FieldTable::default();
        headers.insert("x-tenant".into(), AMQPValue::LongString("globex".into()));
        headers.insert("x-small".into(), AMQPValue::ShortInt(i as i16));
        messages.push((format!("e{i}"), format!("{{\"n\": {i}, \"sku\": \"BROKEN\"}}").into_bytes(), headers));
    }
    dead_letter(&vhost, &channel, "work.dlq", false, messages).await;
    common::declare(&channel, "other.noedit", false).await;
    let toml = format!(
        "{}\n[[custody]]\nqueue = \"*.noedit\"\n",
        custody_toml(&vhost.name).replace("queue = \"*.dlq\"\n", "queue = \"*.dlq\"\nedit = true\n")
    );
    let warren = Warren::start(&toml).await;
    let list = wait_for("the dead letters in custody", Duration::from_secs(60), || async {
        warren.queue(&vhost.name, "work.dlq").await.ok_or("not listed yet")?;
        warren.queue(&vhost.name, "other.noedit").await.ok_or("other.noedit not listed yet")?;
        let list = listing(&warren, &vhost.name, "").await;
        if list["custody"]["counts"]["held"] == 3 {
            Ok(list)
        } else {
            Err(list.to_string())
        }
    })
    .await;
    let id = list["custody"]["records"][1]["id"].as_i64().unwrap();
    let base = format!("/api/v1/queues/local/{}/work.dlq/custody", encode(&vhost.name));
    let (_, record) = warren.get_json(&format!("{base}/{id}")).await;
    let mut headers = record["message"]["message"]["properties"]["headers"].as_object().cloned().expect("headers");
    headers.insert("x-tenant".into(), json!("acme"));
    headers.insert("x-fixed-by".into(), json!("ops"));
    let edit = json!({"body": "{\"n\": 2, \"sku\": \"GIFT-1\"}", "headers": headers});
    let (status, edited) = warren.post_json(&format!("{base}/{id}/edit"), edit.clone()).await;
    assert_eq!(status, 200, "{edited}");
    assert_eq!(edited["to"], "work");
    assert_eq!(
        edited["diff"]["headers"],
        json!([["x-fixed-by", null, "ops"], ["x-tenant", "globex", "acme"]]),
        "only what changed: {edited}"
    );
    assert_eq!(edited["diff"]["body"], json!(["{\"n\": 2, \"sku\": \"BROKEN\"}", "{\"n\": 2, \"sku\": \"GIFT-1\"}"]));

    let copy = channel
        .basic_get("work".into(), lapin::options::BasicGetOptions { no_ack: true })
        .await
        .unwrap()
        .expect("the copy");
    assert_eq!(copy.delivery.data, b"{\"n\": 2, \"sku\": \"GIFT-1\"}");
    let p = &copy.delivery.properties;
    assert_eq!(p.message_id().as_ref().map(|s| s.as_str()), Some("e2"));
    let h = p.headers().clone().unwrap();
    assert_eq!(h.inner().get("x-small"), Some(&AMQPValue::ShortInt(2)), "a header left alone keeps its type");
    assert_eq!(h.inner().get("x-tenant"), Some(&AMQPValue::LongString("acme".into())));
    assert!(
        channel.basic_get("work".into(), lapin::options::BasicGetOptions { no_ack: true }).await.unwrap().is_none(),
        "one copy"
    );

    // The original is kept, replayed as an edited copy; the audit keeps the diff.
    let (_, record) = warren.get_json(&format!("{base}/{id}")).await;
    assert_eq!(record["record"]["state"], "replayed", "{record}");
    assert_eq!(listing(&warren, &vhost.name, "").await["custody"]["counts"]["held"], 2);
    let (_, audit) = warren.get_json("/api/v1/audit").await;
    let entry = audit.as_array().unwrap().iter().find(|e| e["action"] == "custody edit").expect("audited").clone();
    assert_eq!(entry["outcome"], "done", "{entry}");
    assert!(entry["detail"].as_str().unwrap().contains("globex"), "the diff is in the audit: {entry}");
    // Once replayed it is not edited again; nor is a record where editing is off.
    let (status, _) = warren.post_json(&format!("{base}/{id}/edit"), edit.clone()).await;
    assert_eq!(status, 409);
    let other = format!("/api/v1/queues/local/{}/other.noedit/custody/1/edit", encode(&vhost.name));
    let (status, body) = warren.post_json(&other, edit).await;
    assert_eq!(status, 403, "{body}");
    warren.stop().await;
    connection.close(0, "done".into()).await.ok();
}

/// warren as a separate process with custody of `*.dlq`, so the test can SIGKILL it.
struct Process {
    child: Child,
    port: u16,
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
        Process { child, port }
    }

    /// POSTs `body` to `path` once warren answers (it may still be starting).
    async fn post_json(&self, path: &str, body: Value) -> (u16, Value) {
        let url = format!("http://127.0.0.1:{}{path}", self.port);
        let http = reqwest::Client::new();
        wait_for("warren answers", Duration::from_secs(60), || async {
            let response = http.post(&url).json(&body).send().await.map_err(|e| e.to_string())?;
            let status = response.status().as_u16();
            Ok((status, response.json().await.unwrap_or(Value::Null)))
        })
        .await
    }

    /// Waits until warren serves (its database is open and migrated by then).
    async fn serving(&self) {
        let url = format!("http://127.0.0.1:{}/api/v1/audit", self.port);
        wait_for("warren serves", Duration::from_secs(60), || async {
            reqwest::get(&url).await.map(|_| ()).map_err(|e| e.to_string())
        })
        .await
    }

    async fn get_json(&self, path: &str) -> (u16, Value) {
        let url = format!("http://127.0.0.1:{}{path}", self.port);
        let response = reqwest::get(&url).await.expect("warren answers");
        let status = response.status().as_u16();
        (status, response.json().await.unwrap_or(Value::Null))
    }
}

/// Publishes `n` persistent messages of about 520 bytes, ids `{prefix}1..`, to `queue`, in one
/// stream confirmed at the end (20,000 round trips would take a while).
async fn publish_many(channel: &lapin::Channel, queue: &str, prefix: &str, n: usize) {
    let mut confirms = Vec::with_capacity(n);
    for i in 1..=n {
        let properties =
            BasicProperties::default().with_message_id(format!("{prefix}{i}").into()).with_delivery_mode(2);
        let body = format!("{{\"n\": {i}, \"pad\": \"{}\"}}", "x".repeat(500));
        confirms.push(
            channel
                .basic_publish("".into(), queue.into(), BasicPublishOptions::default(), body.as_bytes(), properties)
                .await
                .unwrap(),
        );
    }
    for confirm in confirms {
        assert!(confirm.await.unwrap().is_ack());
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
    sigkill_during_intake("custodykill", 20_000, Dlq::Classic).await;
}

/// The same on a quorum DLQ that sets no delivery limit (3.x: none; 4.x: the broker's default
/// of 20).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_during_intake_of_a_quorum_dlq_without_a_delivery_limit_loses_nothing() {
    sigkill_during_intake("custodykillq0", 10_000, Dlq::Quorum(None)).await;
}

/// The DLQ a SIGKILL test fills.
enum Dlq {
    Classic,
    /// With its `x-delivery-limit`, if any.
    Quorum(Option<i64>),
}

/// The same on a quorum DLQ with a delivery limit of 2: what the kill hands back was delivered
/// once, so the broker keeps it, and the restart takes it in (the broker would drop a message
/// handed back at its limit: a limit of 1 would lose what a kill hands back, which no consumer
/// can prevent).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_during_intake_of_a_quorum_dlq_with_a_delivery_limit_loses_nothing() {
    sigkill_during_intake("custodykillq", 10_000, Dlq::Quorum(Some(2))).await;
}

/// Fills `work.dlq` (classic, or quorum with or without a delivery limit) with `n` messages,
/// kills warren mid-intake, restarts it, and checks every id ends in custody.
async fn sigkill_during_intake(test: &str, n: usize, dlq: Dlq) {
    use lapin::options::QueueDeclareOptions;
    use lapin::types::{AMQPValue, FieldTable};
    let vhost = TestVhost::create(test).await;
    let connection = vhost.connect().await;
    let channel = vhost.channel(&connection).await;
    let mut args = FieldTable::default();
    if let Dlq::Quorum(limit) = dlq {
        args.insert("x-queue-type".into(), AMQPValue::LongString("quorum".into()));
        if let Some(limit) = limit {
            args.insert("x-delivery-limit".into(), AMQPValue::LongLongInt(limit));
        }
    }
    channel
        .queue_declare("work.dlq".into(), QueueDeclareOptions { durable: true, ..Default::default() }, args)
        .await
        .unwrap();
    publish_many(&channel, "work.dlq", "k", n).await;
    let dir = tempfile::tempdir().unwrap();
    let database = dir.path().join("warren.db");
    let mut warren = Process::start(dir.path(), &vhost.name).await;
    // Kill once intake is under way, somewhere in its first few thousand.
    let kill_below = n - 200 - (std::process::id() as usize % (n / 10));
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
        if kept.len() + left >= n {
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
        if kept.len() >= n {
            Ok(())
        } else {
            Err(format!("{} of {n} in custody", kept.len()))
        }
    })
    .await;
    drop(warren);
    let in_custody = ids_in_custody(&database).await;
    let in_broker = drain_ids(&channel, "work.dlq").await;
    let distinct: HashSet<&String> = in_custody.iter().collect();
    let lost: Vec<String> = (1..=n).map(|i| format!("k{i}")).filter(|id| !distinct.contains(id)).take(20).collect();
    assert!(lost.is_empty(), "lost: {lost:?}");
    assert_eq!(distinct.len(), n, "no stranger ids");
    let duplicates = in_custody.len() - distinct.len();
    eprintln!("{} records, {duplicates} duplicates, {} left in the broker", in_custody.len(), in_broker.len());
    assert!(duplicates <= 200, "duplicates only from one batch committed and not yet acked: {duplicates}");
    // The flag says which records are second copies, and only those: every copy after the
    // first of an id is flagged, and no first one (a message handed back uncommitted by the
    // kill comes back `redelivered` from the broker, and on 4.3 every quorum dead letter does,
    // but custody held no copy of it).
    let mut seen = HashSet::new();
    let mut wrong = Vec::new();
    for (message_id, flagged) in flags_in_custody(&database).await {
        let second = !seen.insert(message_id.clone());
        if second != flagged {
            wrong.push(format!("{message_id}: flagged {flagged}, second copy {second}"));
        }
    }
    assert!(wrong.is_empty(), "{} records flagged wrongly, first: {:?}", wrong.len(), &wrong[..wrong.len().min(10)]);
    // What the broker still has (a batch the last kill caught before its ack) is in custody too.
    assert!(in_broker.iter().all(|id| distinct.contains(id)), "nothing only in the broker at the end");
    connection.close(0, "done".into()).await.ok();
}

/// Each record's message id and whether it is flagged a possible duplicate, in intake order,
/// read from the database file itself.
async fn flags_in_custody(database: &std::path::Path) -> Vec<(String, bool)> {
    use sqlx::Row;
    let url = format!("sqlite://{}?mode=ro", database.display());
    let pool =
        sqlx::sqlite::SqlitePoolOptions::new().max_connections(1).connect(&url).await.expect("open the database");
    let rows = sqlx::query("select message_id, redelivered from custody_messages order by id")
        .fetch_all(&pool)
        .await
        .expect("read custody");
    pool.close().await;
    rows.iter().map(|r| (r.get::<Option<String>, _>(0).unwrap_or_default(), r.get::<bool, _>(1))).collect()
}

/// The records custody holds, (message id, state), read from the database file itself.
async fn records_in_custody(database: &std::path::Path) -> Vec<(String, String)> {
    use sqlx::Row;
    let url = format!("sqlite://{}?mode=ro", database.display());
    let pool =
        sqlx::sqlite::SqlitePoolOptions::new().max_connections(1).connect(&url).await.expect("open the database");
    let rows =
        sqlx::query("select message_id, state from custody_messages").fetch_all(&pool).await.expect("read custody");
    pool.close().await;
    rows.iter().map(|r| (r.get::<Option<String>, _>(0).unwrap_or_default(), r.get(1))).collect()
}

/// Issue 18, tests: SIGKILL during a replay of 20,000 records. At the kill, every id is in the
/// target queue or still in custody (held or claimed), and every record marked replayed is in
/// the target; after a restart (claimed records go back to held) a second replay brings the
/// rest, with duplicates only from the batch the kill caught between publish and mark.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_during_replay_leaves_every_record_in_custody_or_in_the_target() {
    const N: usize = 20_000;
    let vhost = TestVhost::create("custodyreplaykill").await;
    let connection = vhost.connect().await;
    let channel = vhost.channel(&connection).await;
    common::declare(&channel, "work.dlq", false).await;
    common::declare(&channel, "target", false).await;
    publish_many(&channel, "work.dlq", "r", N).await;
    let all: HashSet<String> = (1..=N).map(|i| format!("r{i}")).collect();
    let dir = tempfile::tempdir().unwrap();
    let database = dir.path().join("warren.db");
    let mut warren = Process::start(dir.path(), &vhost.name).await;
    warren.serving().await;
    wait_for("every message in custody", Duration::from_secs(120), || async {
        let kept: HashSet<String> = ids_in_custody(&database).await.into_iter().collect();
        if kept.len() >= N {
            Ok(())
        } else {
            Err(format!("{} of {N} in custody", kept.len()))
        }
    })
    .await;

    let path = format!("/api/v1/queues/local/{}/work.dlq/custody/replay", encode(&vhost.name));
    let replay_all = json!({"selection": "all", "target": {"queue": "target"}});
    let (status, started) = warren.post_json(&path, replay_all.clone()).await;
    assert_eq!(status, 202, "{started}");
    let kill_at = 500 + std::process::id() as usize % 5_000;
    wait_for("replay under way", Duration::from_secs(60), || async {
        let arrived = depth(&channel, "target").await as usize;
        if arrived >= kill_at {
            Ok(())
        } else {
            Err(format!("{arrived} arrived"))
        }
    })
    .await;
    warren.child.kill().expect("SIGKILL");
    warren.child.wait().unwrap();

    let first: Vec<String> = drain_ids(&channel, "target").await;
    let first_set: HashSet<String> = first.iter().cloned().collect();
    let records = records_in_custody(&database).await;
    let replayed: HashSet<&String> = records.iter().filter(|(_, s)| s == "replayed").map(|(id, _)| id).collect();
    let kept: HashSet<&String> = records.iter().filter(|(_, s)| s != "replayed").map(|(id, _)| id).collect();
    eprintln!(
        "killed with {} arrived, {} marked replayed, {} still in custody",
        first.len(),
        replayed.len(),
        kept.len()
    );
    assert!(first.len() < N && !replayed.is_empty(), "the kill happened mid-replay");
    let neither: Vec<&String> =
        all.iter().filter(|id| !first_set.contains(*id) && !kept.contains(id)).take(20).collect();
    assert!(neither.is_empty(), "in neither the target nor custody: {neither:?}");
    let unconfirmed: Vec<&&String> = replayed.iter().filter(|id| !first_set.contains(**id)).take(20).collect();
    assert!(unconfirmed.is_empty(), "marked replayed but not in the target: {unconfirmed:?}");

    // The next start gives claimed records back; a second replay takes the rest.
    let warren = Process::start(dir.path(), &vhost.name).await;
    let (status, started) = warren.post_json(&path, replay_all).await;
    assert_eq!(status, 202, "{started}");
    let audit_id = started["audit_id"].as_i64().unwrap();
    wait_for("the second replay done", Duration::from_secs(120), || async {
        let (_, audit) = warren.get_json("/api/v1/audit").await;
        let entry = audit.as_array().into_iter().flatten().find(|e| e["id"] == audit_id).cloned();
        match entry {
            Some(e) if e["outcome"] == "done" => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    drop(warren);
    let second = drain_ids(&channel, "target").await;
    let mut arrived = first.clone();
    arrived.extend(second);
    let distinct: HashSet<String> = arrived.iter().cloned().collect();
    assert_eq!(distinct, all, "every id in the target at the end");
    let duplicates = arrived.len() - distinct.len();
    eprintln!("{} copies, {duplicates} duplicates", arrived.len());
    assert!(duplicates <= 1_000, "duplicates only from the batch in flight at the kill: {duplicates}");
    let records = records_in_custody(&database).await;
    assert!(records.iter().all(|(_, s)| s == "replayed"), "every record replayed");
    connection.close(0, "done".into()).await.ok();
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
    // /metrics says so, and the built-in rule takes it up (firing after its minute).
    wait_for("the stop exported and alerting", Duration::from_secs(30), || async {
        let (_, metrics) = warren.get_text("/metrics").await;
        let exported = metrics
            .lines()
            .find(|l| l.starts_with("warren_queue_custody_intake_stopped{") && l.contains("queue=\"work.dlq\""));
        let (_, alerts) = warren.get_json("/api/v1/alerts").await;
        let alert = alerts
            .as_array()
            .into_iter()
            .flatten()
            .find(|a| a["rule_id"] == "builtin-custody-intake-stopped" && a["key"]["queue"] == "work.dlq");
        match (exported.and_then(|l| l.rsplit(' ').next()), alert) {
            (Some("1"), Some(_)) => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    warren.stop().await;
    connection.close(0, "done".into()).await.ok();
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
        if q["custody_held"] == N && q["ready"] == 0 && q["total"] == N {
            Ok(())
        } else {
            Err(q.to_string())
        }
    })
    .await;
    assert_eq!(listing(&warren, &vhost.name, "").await["in_custody"], true);

    let (status, released) = warren.post_json(&format!("{base}/release"), json!({})).await;
    assert_eq!(status, 202, "{released}");
    let entry = warren.audit_ended(released["audit_id"].as_i64().unwrap()).await;
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
    connection.close(0, "done".into()).await.ok();
}

/// Issue 18, must-have 4: a replay from custody is a job like a move: its page and the API
/// follow its progress, a cancel stops it between two batches, and what it did not send stays
/// held. By identity: the ids in the target are exactly the records marked replayed, and a
/// second replay brings exactly the rest, none twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_from_custody_shows_its_progress_and_a_cancel_leaves_the_rest_held() {
    const N: usize = 20_000;
    let vhost = TestVhost::create("custodycancel").await;
    let connection = vhost.connect().await;
    let channel = vhost.channel(&connection).await;
    common::declare(&channel, "work.dlq", false).await;
    common::declare(&channel, "target", false).await;
    publish_many(&channel, "work.dlq", "c", N).await;
    let all: HashSet<String> = (1..=N).map(|i| format!("c{i}")).collect();
    let warren = Warren::start(&custody_toml(&vhost.name)).await;
    wait_for("every message in custody", Duration::from_secs(120), || async {
        let q = warren.queue(&vhost.name, "work.dlq").await.ok_or("not listed")?;
        if q["custody_held"] == N {
            Ok(())
        } else {
            Err(q.to_string())
        }
    })
    .await;

    let path = format!("/api/v1/queues/local/{}/work.dlq/custody/replay", encode(&vhost.name));
    let (status, started) = warren.post_json(&path, json!({"selection": "all", "target": {"queue": "target"}})).await;
    assert_eq!(status, 202, "{started}");
    let id = started["audit_id"].as_i64().unwrap();
    assert_eq!(started["job"]["id"], id, "the job, as a move's start answers: {started}");
    let running = wait_for("the replay under way", Duration::from_secs(60), || async {
        let (_, job) = warren.get_json(&format!("/api/v1/jobs/{id}")).await;
        if job["progress"]["moved"].as_u64().unwrap_or(0) > 0 || job["state"] != "running" {
            Ok(job)
        } else {
            Err(job.to_string())
        }
    })
    .await;
    assert_eq!((&running["method"], &running["action"]), (&json!("custody"), &json!("custody replay")), "{running}");
    assert_eq!(running["progress"]["expected"], N, "{running}");
    let (status, cancelled) = warren.post_json(&format!("/api/v1/jobs/{id}/cancel"), json!({})).await;
    assert_eq!(status, 202, "cancelled while running: {cancelled}");
    let job = warren.wait_job(id).await;
    assert_eq!(job["state"], "cancelled", "{job}");
    let moved = job["progress"]["moved"].as_u64().unwrap() as usize;
    assert!(0 < moved && moved < N, "stopped part way: {job}");
    let (_, page) = warren.get_text(&format!("/jobs/{id}")).await;
    assert!(
        page.contains("replay from warren&#39;s custody") || page.contains("replay from warren's custody"),
        "{page}"
    );
    assert!(page.contains(&format!("{moved} of {N} replayed")), "{page}");
    assert!(page.contains("still held in custody"), "the report says where the rest is: {page}");

    // Exactly the records marked replayed are in the target; the rest are held, none claimed.
    let first: Vec<String> = drain_ids(&channel, "target").await;
    let first_set: HashSet<String> = first.iter().cloned().collect();
    assert_eq!((first.len(), first_set.len()), (moved, moved), "each confirmed copy once");
    let counts = listing(&warren, &vhost.name, "?limit=1").await["custody"]["counts"].clone();
    assert_eq!(
        (&counts["replayed"], &counts["held"], &counts["claimed"]),
        (&json!(moved), &json!(N - moved), &json!(0))
    );
    let entry = warren.audit_ended(id).await;
    assert_eq!((&entry["outcome"], &entry["moved"]), (&json!("cancelled"), &json!(moved)), "{entry}");

    // A second replay takes exactly the rest.
    let second_id = replay(&warren, &vhost.name, json!({"selection": "all", "target": {"queue": "target"}})).await;
    assert_eq!(warren.wait_job(second_id).await["state"], "done");
    let second: Vec<String> = drain_ids(&channel, "target").await;
    let second_set: HashSet<String> = second.iter().cloned().collect();
    assert_eq!(second.len(), N - moved, "none twice");
    assert!(first_set.is_disjoint(&second_set), "nothing replayed twice");
    let union: HashSet<String> = first_set.union(&second_set).cloned().collect();
    assert_eq!(union, all, "every id in the target once");
    warren.stop().await;
    connection.close(0, "done".into()).await.ok();
}

/// The intake is a consumer of warren's own: the roles do not count it, in the polls and in
/// the state restored at start while the broker does not answer. Counted, `work` (no consumer,
/// dead-lettering into a consumed queue) read as a wait queue; the restored state counted it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn custody_intake_is_not_a_consumer_for_roles_restored_at_start() {
    const N: usize = 5;
    let vhost = TestVhost::create("custodyroles").await;
    let connection = vhost.connect().await;
    let channel = vhost.channel(&connection).await;
    dead_letter(&vhost, &channel, "work.dlq", false, numbered(N)).await;

    let warren = Warren::start(&custody_toml(&vhost.name)).await;
    let role = |q: &Value| (q["role"].clone(), q["is_dlq"].clone());
    let (work, dlq) = wait_for("every dead letter in custody", Duration::from_secs(60), || async {
        let dlq = warren.queue(&vhost.name, "work.dlq").await.ok_or("not listed")?;
        let work = warren.queue(&vhost.name, "work").await.ok_or("work not listed")?;
        if dlq["custody_held"] == N && dlq["consumers"] == 1 {
            Ok((work, dlq))
        } else {
            Err(dlq.to_string())
        }
    })
    .await;
    assert_eq!(role(&work), (json!("work"), json!(false)), "{work}");
    assert_eq!(role(&dlq), (json!("dlq"), json!(true)), "{dlq}");

    let warren = warren.restart_unreachable().await;
    wait_for("the broker down", Duration::from_secs(30), || async {
        let (_, brokers) = warren.get_json("/api/v1/brokers").await;
        if brokers[0]["status"]["up"] == false {
            Ok(())
        } else {
            Err(brokers.to_string())
        }
    })
    .await;
    let work = warren.queue(&vhost.name, "work").await.expect("work restored");
    assert_eq!(work["stale"]["restored"], true, "{work}");
    assert_eq!(role(&work), (json!("work"), json!(false)), "restored, the intake is still not its consumer: {work}");
    let dlq = warren.queue(&vhost.name, "work.dlq").await.expect("work.dlq restored");
    assert_eq!(role(&dlq), (json!("dlq"), json!(true)), "{dlq}");
    warren.stop().await;
    connection.close(0, "done".into()).await.ok();
}

/// Declares `queue` (classic, durable) with the given `(argument, value)` pairs.
async fn declare_with(channel: &lapin::Channel, queue: &str, args: &[(&str, lapin::types::AMQPValue)]) {
    use lapin::options::QueueDeclareOptions;
    let mut table = lapin::types::FieldTable::default();
    for (key, value) in args {
        table.insert((*key).into(), value.clone());
    }
    channel
        .queue_declare(queue.into(), QueueDeclareOptions { durable: true, ..Default::default() }, table)
        .await
        .unwrap();
}

/// The message ids custody holds in state `held`, from the listing.
async fn held_ids(warren: &Warren, vhost: &str) -> HashSet<String> {
    let list = listing(warren, vhost, "?limit=1000").await;
    list["custody"]["records"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["state"] == "held")
        .map(|r| r["message_id"].as_str().unwrap().to_string())
        .collect()
}

/// Issue 29, case 1: a replay into a queue that drops its oldest messages when full (a length
/// or byte limit, overflow drop-head, the broker's default) is refused before anything is sent,
/// as a move is, unless the user accepted the risk; a target that rejects publishes when full
/// takes what fits, and every record it refused stays held. Ids compared in every case.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_into_a_target_that_drops_its_oldest_is_refused_and_loses_nothing() {
    use lapin::types::AMQPValue;
    const N: usize = 150;
    let vhost = TestVhost::create("custodylimits").await;
    let connection = vhost.connect().await;
    let channel = vhost.channel(&connection).await;
    dead_letter(&vhost, &channel, "work.dlq", false, numbered(N)).await;
    let all: HashSet<String> = (1..=N).map(|i| format!("m{i}")).collect();
    declare_with(&channel, "by.count", &[("x-max-length", AMQPValue::LongLongInt(50))]).await;
    declare_with(&channel, "by.bytes", &[("x-max-length-bytes", AMQPValue::LongLongInt(1000))]).await;
    let reject = AMQPValue::LongString("reject-publish".into());
    declare_with(&channel, "rejects", &[("x-max-length", AMQPValue::LongLongInt(50)), ("x-overflow", reject)]).await;
    let warren = Warren::start(&custody_toml(&vhost.name)).await;
    wait_for("every dead letter in custody", Duration::from_secs(60), || async {
        let q = warren.queue(&vhost.name, "work.dlq").await.ok_or("not listed")?;
        if q["custody_held"] == N {
            Ok(())
        } else {
            Err(q.to_string())
        }
    })
    .await;

    for target in ["by.count", "by.bytes"] {
        let id = replay(&warren, &vhost.name, json!({"selection": "all", "target": {"queue": target}})).await;
        let entry = warren.audit_ended(id).await;
        assert_eq!(entry["moved"], 0, "nothing sent to {target}: {entry}");
        let job = warren.wait_job(id).await;
        let reason = job["report"]["failed"][0]["reason"].as_str().unwrap_or_default().to_string();
        assert!(reason.contains("drops its oldest") && reason.contains("accept_drop_head"), "{job}");
        assert_eq!(depth(&channel, target).await, 0, "no copy in {target}");
        assert_eq!(held_ids(&warren, &vhost.name).await, all, "every record still held after {target}");
    }

    // reject-publish: the broker nacks what does not fit; those records stay held.
    let id = replay(&warren, &vhost.name, json!({"selection": "all", "target": {"queue": "rejects"}})).await;
    let entry = warren.audit_ended(id).await;
    let job = warren.wait_job(id).await;
    let in_target: HashSet<String> = drain_ids(&channel, "rejects").await.into_iter().collect();
    let held = held_ids(&warren, &vhost.name).await;
    assert_eq!(in_target.len(), 50, "the queue took what fits: {entry}");
    assert_eq!(entry["moved"], 50, "{entry}");
    assert!(in_target.is_disjoint(&held), "a record in the target is not held any more");
    assert_eq!(&in_target | &held, all, "every id in the target or held");
    let refused = job["report"]["failed"].as_array().unwrap();
    assert_eq!(refused.len(), N - 50, "{job}");
    assert!(refused.iter().all(|f| f["reason"].as_str().unwrap().contains("(nack)")), "{job}");

    // The risk accepted: the copies go, and the broker keeps the newest 50 (what the user chose).
    let body = json!({"selection": "all", "target": {"queue": "by.count"}, "accept_drop_head": true});
    let id = replay(&warren, &vhost.name, body).await;
    assert_eq!(warren.audit_ended(id).await["moved"], N - 50);
    assert_eq!(depth(&channel, "by.count").await, 50);
    warren.stop().await;
    connection.close(0, "done".into()).await.ok();
}

/// Issue 29, case 1: an edited copy into a full queue that drops its oldest is refused (it was
/// answered 200 while the broker dropped an unrelated message already there); the record stays
/// held and the queue keeps every message it had.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edited_copy_is_not_sent_to_a_queue_that_would_drop_another_message() {
    use lapin::types::AMQPValue;
    let vhost = TestVhost::create("custodyeditfull").await;
    let connection = vhost.connect().await;
    let channel = vhost.channel(&connection).await;
    dead_letter(&vhost, &channel, "work.dlq", false, numbered(3)).await;
    declare_with(&channel, "full", &[("x-max-length", AMQPValue::LongLongInt(10))]).await;
    common::publish(&channel, "full", 10, BasicProperties::default()).await;
    let before: Vec<Vec<u8>> = (0..10).map(|i| format!("message {i}").into_bytes()).collect();
    let toml = custody_toml(&vhost.name).replace("queue = \"*.dlq\"\n", "queue = \"*.dlq\"\nedit = true\n");
    let warren = Warren::start(&toml).await;
    let list = wait_for("the dead letters in custody", Duration::from_secs(60), || async {
        warren.queue(&vhost.name, "work.dlq").await.ok_or("not listed yet")?;
        let list = listing(&warren, &vhost.name, "").await;
        if list["custody"]["counts"]["held"] == 3 {
            Ok(list)
        } else {
            Err(list.to_string())
        }
    })
    .await;
    let id = list["custody"]["records"][0]["id"].as_i64().unwrap();
    let base = format!("/api/v1/queues/local/{}/work.dlq/custody", encode(&vhost.name));
    let edit = json!({"body": "fixed", "target": {"queue": "full"}});
    let (status, answer) = warren.post_json(&format!("{base}/{id}/edit"), edit).await;
    assert!((400..500).contains(&status), "refused: {status} {answer}");
    assert!(answer.to_string().contains("drops its oldest"), "says why: {answer}");
    let (_, record) = warren.get_json(&format!("{base}/{id}")).await;
    assert_eq!(record["record"]["state"], "held", "{record}");
    let mut after = Vec::new();
    while let Some(m) =
        channel.basic_get("full".into(), lapin::options::BasicGetOptions { no_ack: true }).await.unwrap()
    {
        after.push(m.delivery.data.clone());
    }
    assert_eq!(after, before, "the queue kept every message it had, and got no copy");
    warren.stop().await;
    connection.close(0, "done".into()).await.ok();
}

/// Issue 29, case 2: database files deleted under a running intake. Intake acked 4,000 more
/// messages into the deleted file and a restart found neither custody nor the broker holding
/// them. Now intake stops before the next ack, every message published after the deletion stays
/// in the broker, and the next start takes each of them in: ids compared. Deleting only the
/// write-ahead log (where the commits go) is caught too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn intake_stops_when_its_database_file_is_deleted_and_loses_nothing() {
    for (test, deleted) in
        [("custodyrm", &["warren.db", "warren.db-wal", "warren.db-shm"][..]), ("custodyrmwal", &["warren.db-wal"][..])]
    {
        let vhost = TestVhost::create(test).await;
        let connection = vhost.connect().await;
        let channel = vhost.channel(&connection).await;
        common::declare(&channel, "work.dlq", false).await;
        publish_many(&channel, "work.dlq", "before", 300).await;
        let warren = Warren::start(&custody_toml(&vhost.name)).await;
        wait_for("the first messages in custody", Duration::from_secs(60), || async {
            let q = warren.queue(&vhost.name, "work.dlq").await.ok_or("not listed")?;
            if q["custody_held"] == 300 {
                Ok(())
            } else {
                Err(q.to_string())
            }
        })
        .await;
        for file in deleted {
            std::fs::remove_file(warren.dir.path().join(file)).unwrap_or_else(|e| panic!("deleting {file}: {e}"));
        }
        const N: usize = 2_000;
        publish_many(&channel, "work.dlq", "after", N).await;
        let after: HashSet<String> = (1..=N).map(|i| format!("after{i}")).collect();
        let path = format!("/api/v1/queues/local/{}/work.dlq/custody", encode(&vhost.name));
        let list = wait_for("intake stopped", Duration::from_secs(60), || async {
            // A page may meet the deleted database too (a storage error): asked again.
            let (status, list) = warren.get_json(&path).await;
            if status == 200 && list["custody"]["intake"]["state"] == "stopped" {
                Ok(list)
            } else {
                Err(format!("{status} {}", list["custody"]["intake"]))
            }
        })
        .await;
        let reason = list["custody"]["intake"]["reason"].as_str().unwrap();
        assert!(reason.contains("deleted"), "{test}: says why: {reason}");
        // Everything published after the deletion is still in the broker (a batch delivered and
        // not acked comes back when intake's channel closes).
        wait_for("every later message in the broker", Duration::from_secs(30), || async {
            let left = depth(&channel, "work.dlq").await as usize;
            if left == N {
                Ok(())
            } else {
                Err(format!("{left} of {N}"))
            }
        })
        .await;
        let (status, _) = warren.get_json("/readyz").await;
        assert_eq!(status, 503, "{test}: /readyz says the database is the problem");

        // The next start opens a new file and takes every one of them in.
        let database = warren.dir.path().join("warren.db");
        let warren = warren.restart().await;
        warren.get_json("/healthz").await; // served once the new database is migrated

        // Every later id, not a count: records of the earlier messages that a checkpoint had
        // moved into the main file before the log was deleted are there too, and made a count
        // of N pass while intake was still taking the later ones in.
        let in_time = tokio::time::timeout(Duration::from_secs(60), async {
            loop {
                let kept: HashSet<String> = ids_in_custody(&database).await.into_iter().collect();
                if after.is_subset(&kept) {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        })
        .await;
        let kept: HashSet<String> = ids_in_custody(&database).await.into_iter().collect();
        let lost: Vec<&String> = after.difference(&kept).take(20).collect();
        assert!(lost.is_empty(), "{test}: lost {lost:?} (waited out: {})", in_time.is_err());
        warren.stop().await;
        connection.close(0, "done".into()).await.ok();
    }
}

/// Peak resident memory of a process, from `/proc/{pid}/status` (`VmHWM`), in MiB.
fn peak_mib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("the process runs");
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).expect("VmHWM");
    line.split_whitespace().nth(1).unwrap().parse::<u64>().unwrap() / 1024
}

/// Issue 29, must-have 6: six 40 MB dead letters go into custody one at a time, not all at
/// once (745 MB of memory measured before). The prefetch comes from the queue's average size,
/// so warren holds about 32 MiB of message bytes (as many whole messages as fit), or one message
/// when a message is larger; the ceiling asserted is 7 times that (what is held, and the copies
/// made while committing it: measured 4.7 times for 40 MiB messages, 5.6 for 15 MiB ones) over
/// warren's own memory. 4.x refuses messages over 16 MiB by default: 15 MiB there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn intake_of_large_messages_stays_under_its_memory_ceiling() {
    const N: usize = 6;
    let size_mib: usize = if common::broker().facts().await.major >= 4 { 15 } else { 40 };
    let size = size_mib * 1024 * 1024;
    let held_mib = (32 / size_mib).max(1) * size_mib;
    let ceiling_mib = 40 + 7 * held_mib as u64;
    let vhost = TestVhost::create("custodybig").await;
    let connection = vhost.connect().await;
    let channel = vhost.channel(&connection).await;
    common::declare(&channel, "work.dlq", false).await;
    let body = vec![b'x'; size];
    for i in 1..=N {
        let properties = BasicProperties::default().with_message_id(format!("big{i}").into()).with_delivery_mode(2);
        let confirm = channel
            .basic_publish("".into(), "work.dlq".into(), BasicPublishOptions::default(), &body, properties)
            .await
            .unwrap();
        assert!(confirm.await.unwrap().is_ack());
    }
    drop(body);
    // The broker's statistics lag behind its queue: wait until they say what the queue holds,
    // as they do for a DLQ that filled before warren looked.
    let stats = format!("/api/queues/{}/work.dlq", encode(&vhost.name));
    wait_for("the queue's statistics", Duration::from_secs(60), || async {
        let url = format!("{}{stats}", common::broker().management);
        let response = reqwest::Client::new().get(&url).basic_auth("guest", Some("guest")).send().await;
        let q: Value = response.map_err(|e| e.to_string())?.json().await.map_err(|e| e.to_string())?;
        if q["messages_ready"] == N && q["message_bytes_ready"].as_u64().unwrap_or(0) >= (N * size) as u64 {
            Ok(())
        } else {
            Err(q.to_string())
        }
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let database = dir.path().join("warren.db");
    let warren = Process::start(dir.path(), &vhost.name).await;
    warren.serving().await;
    let before = peak_mib(warren.child.id());
    wait_for("every large message in custody", Duration::from_secs(180), || async {
        let kept: HashSet<String> = ids_in_custody(&database).await.into_iter().collect();
        if kept.len() == N {
            Ok(())
        } else {
            Err(format!("{} of {N}", kept.len()))
        }
    })
    .await;
    let peak = peak_mib(warren.child.id());
    eprintln!("peak memory {before} MiB at start, {peak} MiB after taking in {N} messages of {size} bytes");
    assert!(peak <= ceiling_mib, "peak {peak} MiB, over the ceiling of {ceiling_mib} MiB");
    assert_eq!(depth(&channel, "work.dlq").await, 0);
    drop(warren);
    connection.close(0, "done".into()).await.ok();
}

/// Issue 29, must-have 5: an import was kept whatever AMQP allows: a `message_id` of 300 bytes
/// was stored as its first 44 (300 mod 256), and headers larger than a frame made a record that
/// no replay could ever publish. Both are refused at import, naming the line and the field, and
/// nothing of the import is kept; up to the limits is kept exactly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_import_past_the_amqp_limits_is_refused_naming_its_line() {
    let vhost = TestVhost::create("custodylimits").await;
    let connection = vhost.connect().await;
    let channel = vhost.channel(&connection).await;
    common::declare(&channel, "work.dlq", true).await;
    let warren = Warren::start(&custody_toml(&vhost.name)).await;
    wait_for("work.dlq listed", Duration::from_secs(30), || async {
        warren.queue(&vhost.name, "work.dlq").await.map(|_| ()).ok_or_else(|| "not yet".to_string())
    })
    .await;
    let url = warren.url(&format!("/api/v1/queues/local/{}/work.dlq/custody/import", encode(&vhost.name)));
    let import = |body: String| {
        let request = warren.http.post(url.clone()).body(body);
        async move {
            let response = request.send().await.unwrap();
            (response.status().as_u16(), response.json::<Value>().await.unwrap_or(Value::Null))
        }
    };
    let line = |id: &str, headers: Value| {
        json!({"body": "e30=", "properties": {"message_id": id, "headers": headers}}).to_string() + "\n"
    };
    let good = line("ok-1", json!({}));
    let (status, body) = import(format!("{good}{}", line(&"m".repeat(300), json!({})))).await;
    assert_eq!(status, 400, "{body}");
    let message = body["error"]["message"].as_str().unwrap_or_default();
    assert!(message.starts_with("line 2: properties.message_id: 300 bytes"), "{body}");
    let huge = line("big", json!({"x-trace": "t".repeat(131_072)}));
    let (status, body) = import(format!("{good}{good}{huge}")).await;
    assert_eq!(status, 400, "{body}");
    let message = body["error"]["message"].as_str().unwrap_or_default();
    assert!(message.starts_with("line 3: properties.headers: ") && message.contains("frame"), "{body}");
    assert_eq!(listing(&warren, &vhost.name, "").await["custody"]["counts"]["held"], 0, "nothing kept");

    let (status, body) =
        import(format!("{good}{}", line(&"m".repeat(255), json!({"x-trace": "t".repeat(130_000)})))).await;
    assert_eq!(status, 200, "{body}");
    let held = listing(&warren, &vhost.name, "").await;
    let ids: Vec<&str> =
        held["custody"]["records"].as_array().unwrap().iter().map(|r| r["message_id"].as_str().unwrap()).collect();
    assert_eq!(ids, vec!["ok-1".to_string(), "m".repeat(255)], "kept exactly");
    warren.stop().await;
    connection.close(0, "done".into()).await.ok();
}

/// The process's peak resident memory so far (VmHWM), in bytes.
fn peak_memory(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("the process's status");
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM");
    kib * 1024
}

/// Issue 29, must-have 6: a 64 MiB import peaked at 1.86 GB (every line parsed and held at once).
/// The request is held whole (it is at most 64 MiB) and its lines are checked, then kept, a
/// batch at a time: warren's peak grows by less than 128 MiB, measured on the process itself,
/// for lines of 1 KiB bodies as an export writes them and for many small lines, and every id is
/// kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_64_mib_import_stays_under_its_memory_ceiling_and_keeps_every_id() {
    const CEILING: u64 = 128 << 20;
    let vhost = TestVhost::create("custodyimportmem").await;
    let connection = vhost.connect().await;
    let channel = vhost.channel(&connection).await;
    common::declare(&channel, "work.dlq", false).await;
    for body_bytes in [1024, 16] {
        let dir = tempfile::tempdir().unwrap();
        let warren = Process::start(dir.path(), &vhost.name).await;
        warren.serving().await;
        let queue = format!("/api/v1/queues/local/{}/work.dlq", encode(&vhost.name));
        wait_for("work.dlq listed", Duration::from_secs(60), || async {
            match warren.get_json(&queue).await {
                (200, _) => Ok(()),
                other => Err(format!("{other:?}")),
            }
        })
        .await;
        // Lines as an export writes them, with a few headers.
        let body = base64::Engine::encode(&base64::engine::general_purpose::STANDARD, vec![b'x'; body_bytes]);
        let mut text = String::with_capacity(64 << 20);
        let mut n = 0;
        while text.len() < (64 << 20) - 4096 {
            n += 1;
            let line = json!({
                "exchange": "dlx", "routing_key": "work", "body": body,
                "properties": {"message_id": format!("i{n}"), "delivery_mode": 2,
                    "headers": {"x-first-death-queue": "work", "x-first-death-reason": "rejected", "x-n": n}},
            });
            text.push_str(&line.to_string());
            text.push('\n');
        }
        let before = peak_memory(warren.child.id());
        let started = std::time::Instant::now();
        let response = reqwest::Client::new()
            .post(format!("http://127.0.0.1:{}{queue}/custody/import", warren.port))
            .body(text)
            .send()
            .await
            .unwrap();
        let status = response.status().as_u16();
        let answer: Value = response.json().await.unwrap_or(Value::Null);
        let peak = peak_memory(warren.child.id());
        eprintln!(
            "import of {n} lines of {body_bytes}-byte bodies in {:?}: peak resident memory {} MiB before, {} MiB after",
            started.elapsed(),
            before >> 20,
            peak >> 20
        );
        assert_eq!(status, 200, "{answer}");
        assert_eq!(answer["imported"], n);
        assert!(peak.saturating_sub(before) < CEILING, "peak grew by {} MiB", (peak - before) >> 20);
        drop(warren);
        let kept: HashSet<String> = ids_in_custody(&dir.path().join("warren.db")).await.into_iter().collect();
        let expected: HashSet<String> = (1..=n).map(|i| format!("i{i}")).collect();
        assert!(kept == expected, "every id, once: {} kept of {n}", kept.len());
    }
    connection.close(0, "done".into()).await.ok();
}

/// Issue 29, case 1, the release path: a release replays every held record into the queue
/// itself, through the same target checks as a replay. A DLQ that drops its oldest when full
/// is refused: nothing is sent, every record stays held (ids compared), and the job says why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_into_a_dlq_that_drops_its_oldest_keeps_every_record() {
    use lapin::types::AMQPValue;
    const N: usize = 30;
    let vhost = TestVhost::create("custodyreleaselimit").await;
    let connection = vhost.connect().await;
    let channel = vhost.channel(&connection).await;
    declare_with(&channel, "work.dlq", &[("x-max-length", AMQPValue::LongLongInt(1_000))]).await;
    publish_many(&channel, "work.dlq", "rel", N).await;
    let all: HashSet<String> = (1..=N).map(|i| format!("rel{i}")).collect();
    let warren = Warren::start(&custody_toml(&vhost.name)).await;
    wait_for("every message in custody", Duration::from_secs(60), || async {
        let q = warren.queue(&vhost.name, "work.dlq").await.ok_or("not listed")?;
        if q["custody_held"] == N {
            Ok(())
        } else {
            Err(q.to_string())
        }
    })
    .await;
    let path = format!("/api/v1/queues/local/{}/work.dlq/custody/release", encode(&vhost.name));
    let (status, released) = warren.post_json(&path, json!({})).await;
    assert_eq!(status, 202, "{released}");
    let id = released["audit_id"].as_i64().unwrap();
    let entry = warren.audit_ended(id).await;
    assert_eq!(entry["moved"], 0, "{entry}");
    let job = warren.wait_job(id).await;
    assert!(job["report"]["failed"][0]["reason"].as_str().unwrap_or_default().contains("drops its oldest"), "{job}");
    assert_eq!(depth(&channel, "work.dlq").await, 0, "nothing sent back");
    assert_eq!(held_ids(&warren, &vhost.name).await, all, "every record still held");
    warren.stop().await;
    connection.close(0, "done".into()).await.ok();
}

/// Issue 31, case 8: "Take into custody" moved 582 messages out of the broker in one click, with
/// no confirmation and no audit entry, and the DLQ page then still offered the old snapshot's
/// "Requeue all" and "Purge". Start and release now ask first, saying what will happen; both
/// are audited with who and how many; while custody is on, no snapshot action is offered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn custody_start_and_release_ask_first_and_are_audited() {
    const N: usize = 12;
    let vhost = TestVhost::create("custodyask").await;
    let connection = vhost.connect().await;
    let channel = vhost.channel(&connection).await;
    dead_letter(&vhost, &channel, "work.dlq", false, numbered(N)).await;
    let warren = Warren::for_vhost(&vhost.name, 1).await;
    wait_for("work.dlq listed with its messages", Duration::from_secs(30), || async {
        match warren.queue(&vhost.name, "work.dlq").await {
            Some(q) if q["total"] == N => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    warren.snapshot(&vhost.name, "work.dlq", 50).await;
    let dlq = format!("/dlq/local/{}/work.dlq", encode(&vhost.name));
    let http = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
    let post = |path: String, fields: Vec<(&'static str, &'static str)>| {
        let request = http.post(warren.url(&path)).form(&fields);
        async move {
            let response = request.send().await.unwrap();
            (response.status().as_u16(), response.text().await.unwrap())
        }
    };

    // The button asks first, and nothing leaves the broker.
    let (status, page) = post(format!("{dlq}/custody/start"), vec![]).await;
    assert_eq!(status, 200, "{page}");
    assert!(page.contains(&format!("<strong>{N}</strong> messages leave the broker")), "{page}");
    assert!(page.contains("Intake continues"), "{page}");
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(depth(&channel, "work.dlq").await as usize, N, "asking took nothing");
    assert_eq!(listing(&warren, &vhost.name, "").await["in_custody"], false);

    let (status, _) = post(format!("{dlq}/custody/start"), vec![("confirmed", "true")]).await;
    assert_eq!(status, 303);
    wait_for("every dead letter in custody", Duration::from_secs(60), || async {
        let q = warren.queue(&vhost.name, "work.dlq").await.ok_or("not listed")?;
        if q["custody_held"] == N && q["ready"] == 0 {
            Ok(())
        } else {
            Err(q.to_string())
        }
    })
    .await;
    let (_, audit) = warren.get_json("/api/v1/audit").await;
    let start = audit.as_array().unwrap().iter().find(|e| e["action"] == "custody start").cloned();
    let start = start.unwrap_or_else(|| panic!("the start is audited: {audit}"));
    assert_eq!(start["outcome"], "done", "{start}");
    assert!(start["detail"].as_str().unwrap_or_default().contains(&format!("{N} messages in the broker")), "{start}");

    // Read by warren's snapshot before, not by an application: no record says "redelivered".
    let list = listing(&warren, &vhost.name, "").await;
    let records = list["custody"]["records"].as_array().unwrap();
    assert_eq!(records.len(), N, "{list}");
    assert!(records.iter().all(|r| r["redelivered"] == false), "{list}");

    // The old snapshot offers nothing while custody is on.
    let (_, page) = warren.get_text(&dlq).await;
    assert!(page.contains("class=\"custody-release\""), "{page}");
    for stale in ["snapshot-bar", "value=\"purge\"", "Requeue all…", "Take snapshot"] {
        assert!(!page.contains(stale), "{stale} offered while custody is on: {page}");
    }

    // Release asks first too, saying how many go back and that intake stops.
    let (status, page) = post(format!("{dlq}/custody/release"), vec![]).await;
    assert_eq!(status, 200, "{page}");
    assert!(page.contains(&format!("<strong>{N}</strong> records warren holds are replayed")), "{page}");
    assert!(page.contains("Intake stops"), "{page}");
    assert_eq!(listing(&warren, &vhost.name, "").await["in_custody"], true, "asking released nothing");
    let (status, _) = post(format!("{dlq}/custody/release"), vec![("confirmed", "true")]).await;
    assert_eq!(status, 303);
    wait_for("every record back in the queue", Duration::from_secs(30), || async {
        let left = depth(&channel, "work.dlq").await as usize;
        if left == N {
            Ok(())
        } else {
            Err(format!("{left} in the queue"))
        }
    })
    .await;
    let ids: HashSet<String> = drain_ids(&channel, "work.dlq").await.into_iter().collect();
    assert_eq!(ids, (1..=N).map(|i| format!("m{i}")).collect::<HashSet<_>>(), "each message back once");
    warren.stop().await;
    connection.close(0, "done".into()).await.ok();
}

/// With replicas, intake commits each batch under its broker's lease, fenced with the lease's
/// epoch (issue 33): an intake on a replica that lost the lease in the database, while it still
/// believes it holds it (paused, say), keeps nothing and acks nothing. Every message stays in
/// the broker, for the intake of the replica that holds the lease now.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_intake_whose_lease_was_taken_over_keeps_nothing_and_leaves_every_message() {
    use warren::dlq::custody;
    let vhost = TestVhost::create("custodyfence").await;
    let connection = vhost.connect().await;
    let channel = vhost.channel(&connection).await;
    dead_letter(&vhost, &channel, "work.dlq", false, numbered(50)).await;
    let dir = tempfile::tempdir().unwrap();
    let toml = format!(
        "database = {:?}\n[[brokers]]\nname = \"local\"\n{}vhosts_include = [{:?}]\n[[custody]]\nqueue = \"*.dlq\"\n",
        dir.path().join("warren.db").display().to_string(),
        common::broker().toml(),
        vhost.name
    );
    let state = warren::build_state(warren::config::Config::from_toml(&toml).unwrap()).await.unwrap();
    state.replica.round().await.unwrap();
    let held = state.replica.held("broker:local").expect("a lone replica holds every broker");
    // Another replica took the lease over in the database; this one has not noticed yet.
    state.store.release_lease(&held).await.unwrap();
    state.store.take_lease("broker:local", "another replica", Duration::from_secs(60)).await.unwrap().unwrap();
    assert!(state.replica.held("broker:local").is_some(), "this replica still believes it holds it");

    let cancel = tokio_util::sync::CancellationToken::new();
    let queue = std::iter::once((vhost.name.clone(), "work.dlq".to_string()));
    let rules = &state.config.custody;
    custody::start_intakes(&state.custody, rules, &Default::default(), &state.config.brokers[0], queue, &cancel);
    let stopped = wait_for("the intake to stop", Duration::from_secs(30), || async {
        match state.custody.state("local", &vhost.name, "work.dlq") {
            Some(s) if s.state == "stopped" => Ok(s),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    assert!(stopped.reason.contains("another replica"), "{}", stopped.reason);
    let counts = custody::counts_by_queue(&state.store, "local").await.unwrap();
    assert!(counts.values().all(|c| c.held == 0), "nothing kept: {counts:?}");
    let mut back = drain_ids(&channel, "work.dlq").await;
    back.sort();
    let mut all: Vec<String> = (1..=50).map(|i| format!("m{i}")).collect();
    all.sort();
    assert_eq!(back, all, "every message still in the broker, by id");
    cancel.cancel();
    connection.close(0, "done".into()).await.ok();
}
