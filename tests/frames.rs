//! Messages whose content header is larger than the negotiated frame_max (issue 29, case 7 and
//! must-have 5). RabbitMQ takes a header frame up to its frame_max (131,072 bytes by default) on
//! publish, then adds `x-death` when it dead-letters the message and sends the larger frame
//! unsplit. The AMQP client closed its connection on any frame over frame_max, so one such
//! message made its DLQ unreadable: snapshots never answered, "requeue all" and custody intake
//! stopped at it. Real broker, ids compared.

mod common;

use std::collections::HashSet;
use std::time::Duration;

use common::dead_letters::{dead_letter, depth, drain_ids, message_ids, numbered, Message};
use common::{wait_for, TestVhost, Warren};
use lapin::options::BasicGetOptions;
use lapin::types::{AMQPValue, FieldTable};
use lapin::Channel;
use serde_json::{json, Value};

/// RabbitMQ's default frame_max, the host broker's.
const FRAME_MAX: usize = 131_072;

fn encode(s: &str) -> String {
    warren::broker::management::encode_segment(s)
}

/// A padding text of `len` bytes that differs with `id`, so a copy is compared byte for byte.
fn padding(id: &str, len: usize) -> String {
    let unit = format!("{id}:0123456789abcdefghijklmnopqrstuvwxyz;");
    unit.repeat(len / unit.len() + 1)[..len].to_string()
}

/// A message whose content-header frame, as published, takes `frame` bytes: frame overhead (8),
/// class, weight and body size (12), property flags (2), the message id (short string), the
/// header table's length (4) and one entry `pad` holding a long string.
fn big(id: &str, frame: usize) -> Message {
    let pad = pad_len(id, frame);
    let mut headers = FieldTable::default();
    headers.insert("pad".into(), AMQPValue::LongString(padding(id, pad).into()));
    (id.to_string(), format!("{{\"id\":\"{id}\"}}").into_bytes(), headers)
}

fn pad_len(id: &str, frame: usize) -> usize {
    frame - (8 + 12 + 2 + (1 + id.len()) + 4 + (1 + 3 + 1 + 4))
}

/// The `pad` header of every message in `queue` (taken, acked), by message id.
async fn drain_pads(channel: &Channel, queue: &str) -> Vec<(String, Option<String>)> {
    let mut out = Vec::new();
    while let Some(message) = channel.basic_get(queue.into(), BasicGetOptions { no_ack: true }).await.unwrap() {
        let p = &message.delivery.properties;
        let id = p.message_id().as_ref().map(|s| s.to_string()).unwrap_or_default();
        let pad = p.headers().as_ref().and_then(|h| h.inner().get("pad").cloned()).and_then(|v| match v {
            AMQPValue::LongString(s) => Some(String::from_utf8_lossy(s.as_bytes()).into_owned()),
            _ => None,
        });
        out.push((id, pad));
    }
    out
}

async fn watching(vhost: &TestVhost, queue: &str) -> Warren {
    let warren = Warren::for_vhost(&vhost.name, 1).await;
    wait_for(&format!("{queue} listed by warren"), Duration::from_secs(30), || async {
        warren.queue(&vhost.name, queue).await.map(|_| ()).ok_or_else(|| "not yet".to_string())
    })
    .await;
    warren
}

/// `post_json` that must answer within `secs` (a snapshot that never answered was the bug).
async fn post_within(warren: &Warren, secs: u64, path: &str, body: Value) -> (u16, Value) {
    tokio::time::timeout(Duration::from_secs(secs), warren.post_json(path, body))
        .await
        .unwrap_or_else(|_| panic!("{path} answered within {secs} s"))
}

/// m1, m2, `big` (published in a 131,000-byte header frame, as in the issue; dead-lettered, it
/// arrives in 131,214 bytes), m4, `huge` (published in a frame of exactly frame_max), m6.
fn the_messages() -> Vec<Message> {
    let mut messages = numbered(2);
    messages.push(big("big", 131_000));
    messages.push((String::from("m4"), b"{\"n\": 4}".to_vec(), FieldTable::default()));
    messages.push(big("huge", FRAME_MAX));
    messages.push((String::from("m6"), b"{\"n\": 6}".to_vec(), FieldTable::default()));
    messages
}

/// The snapshot shows every message, the large ones with their headers whole, and answers in
/// time; "requeue all" moves every other message (ids compared) and reports the two whose copy
/// would not fit a frame, which stay in the DLQ unchanged (headers compared byte for byte).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_header_larger_than_a_frame_is_read_and_requeue_all_moves_the_rest() {
    let vhost = TestVhost::create("frames").await;
    let connection = vhost.connect().await;
    let channel = vhost.channel(&connection).await;
    dead_letter(&vhost, &channel, "work.dlq", false, the_messages()).await;
    assert_eq!(depth(&channel, "work.dlq").await, 6, "every message dead-lettered");
    let warren = watching(&vhost, "work.dlq").await;
    let base = format!("/api/v1/queues/local/{}/work.dlq", encode(&vhost.name));

    let (status, snapshot) = post_within(&warren, 60, &format!("{base}/snapshot"), json!({"count": 100})).await;
    assert_eq!(status, 200, "{snapshot}");
    assert_eq!(message_ids(&snapshot["messages"]), ["m1", "m2", "big", "m4", "huge", "m6"]);
    for (position, id, frame) in [(2, "big", 131_000), (4, "huge", FRAME_MAX)] {
        let shown = &snapshot["messages"][position];
        let pad = shown["message"]["properties"]["headers"]["pad"].as_str();
        assert_eq!(pad, Some(padding(id, pad_len(id, frame)).as_str()), "{id}'s headers shown whole");
        assert_eq!(shown["deaths"][0]["queue"], "work", "the broker's x-death is read: {}", shown["deaths"]);
    }

    // A copy keeps the original's headers, x-death included, and adds warren's replay counter:
    // it is larger still, the broker would close the connection over it, so both stay.
    let job = warren.run_move(&format!("{base}/requeue"), json!({"selection": "all"})).await;
    assert_eq!(job["state"], "partial", "{job}");
    assert_eq!(message_ids(&job["report"]["moved"]), ["m1", "m2", "m4", "m6"], "{job}");
    assert_eq!(message_ids(&job["report"]["failed"]), ["big", "huge"], "{job}");
    for failed in job["report"]["failed"].as_array().unwrap() {
        let reason = failed["reason"].as_str().unwrap();
        assert!(reason.contains("frame_max of 131072 bytes") && reason.contains("stays in this queue"), "{reason}");
    }
    assert_eq!(drain_ids(&channel, "work").await, ["m1", "m2", "m4", "m6"]);

    // They are still in the DLQ, whole, and read again.
    let (status, again) = post_within(&warren, 60, &format!("{base}/snapshot"), json!({})).await;
    assert_eq!(status, 200, "{again}");
    assert_eq!(message_ids(&again["messages"]), ["big", "huge"]);
    let left = drain_pads(&channel, "work.dlq").await;
    let expected = [("big", 131_000), ("huge", FRAME_MAX)]
        .map(|(id, frame)| (id.to_string(), Some(padding(id, pad_len(id, frame)))));
    assert_eq!(left, expected, "both left whole");
    assert_eq!(warren.get_text("/healthz").await.0, 200);
    warren.stop().await;
    connection.close(0, "done".into()).await.ok();
}

/// Custody intake reads the large headers and takes every message, each held whole; a replay
/// sends the rest and keeps those whose copy would not fit a frame, with the reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn custody_intake_takes_messages_with_headers_larger_than_a_frame() {
    let vhost = TestVhost::create("framescustody").await;
    let connection = vhost.connect().await;
    let channel = vhost.channel(&connection).await;
    dead_letter(&vhost, &channel, "work.dlq", false, the_messages()).await;
    let warren = Warren::start(&format!(
        "[[brokers]]\nname = \"local\"\nvhosts_include = [{:?}]\npoll_interval_secs = 1\n\n\
         [[custody]]\nqueue = \"*.dlq\"\n",
        vhost.name
    ))
    .await;
    let path = format!("/api/v1/queues/local/{}/work.dlq/custody?limit=100", encode(&vhost.name));
    let list = wait_for("every message in custody", Duration::from_secs(60), || async {
        let (_, list) = warren.get_json(&path).await;
        if list["custody"]["counts"]["held"] == 6 {
            Ok(list)
        } else {
            Err(format!("held {}, intake {}", list["custody"]["counts"]["held"], list["custody"]["intake"]))
        }
    })
    .await;
    assert_eq!(list["custody"]["intake"]["state"], "running", "{}", list["custody"]["intake"]);
    let held: HashSet<String> = list["custody"]["records"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["message_id"].as_str().unwrap().to_string())
        .collect();
    let all: HashSet<String> = ["m1", "m2", "big", "m4", "huge", "m6"].map(String::from).into();
    assert_eq!(held, all);
    assert_eq!(depth(&channel, "work.dlq").await, 0, "taken off the broker");

    // Held whole: the export shows each large header as it was read, x-death included.
    let base = format!("/api/v1/queues/local/{}/work.dlq/custody", encode(&vhost.name));
    let (status, export) = warren.get_text(&format!("{base}/export")).await;
    assert_eq!(status, 200);
    let lines: Vec<Value> = export.lines().map(|l| serde_json::from_str(l).expect("each line is JSON")).collect();
    for (id, frame) in [("big", 131_000), ("huge", FRAME_MAX)] {
        let line = lines.iter().find(|l| l["message_id"] == id).expect(id);
        assert_eq!(
            line["properties"]["headers"]["pad"].as_str(),
            Some(padding(id, pad_len(id, frame)).as_str()),
            "{id}"
        );
        assert!(line["properties"]["headers"]["x-death"].is_array(), "{id}: {}", line["properties"]["headers"]);
    }

    // A replay publishes a record's properties as they were read, x-death included, and its
    // custody id: neither large one fits a frame then. Each fails alone (the broker would close
    // the connection over it, and the rest of the replay with it) and stays held; the rest go.
    let (status, started) = warren.post_json(&format!("{base}/replay"), json!({"selection": "all"})).await;
    assert_eq!(status, 202, "{started}");
    let audit_id = started["audit_id"].as_i64().expect("an audit id");
    let done = wait_for("the replay to end", Duration::from_secs(60), || async {
        let (_, audit) = warren.get_json("/api/v1/audit").await;
        let entry = audit.as_array().into_iter().flatten().find(|e| e["id"] == audit_id).cloned();
        match entry {
            Some(e) if e["outcome"] != "started" && e["outcome"] != "running" => Ok(e),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    assert_eq!((done["moved"].as_u64(), done["failed"].as_u64()), (Some(4), Some(2)), "{done}");
    assert!(done.to_string().contains("frame_max"), "the reason is given: {done}");
    let arrived = drain_pads(&channel, "work").await;
    let ids: HashSet<&str> = arrived.iter().map(|(id, _)| id.as_str()).collect();
    assert_eq!(ids, HashSet::from(["m1", "m2", "m4", "m6"]));
    let (_, list) = warren.get_json(&path).await;
    let held: Vec<&str> = list["custody"]["records"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["state"] == "held")
        .map(|r| r["message_id"].as_str().unwrap())
        .collect();
    assert_eq!(held, ["big", "huge"], "{list}");
    warren.stop().await;
    connection.close(0, "done".into()).await.ok();
}

/// A header larger than the client's whole receive buffer (32 frames of frame_max): the buffer
/// grows for it. The message passes through a chain of 400 queues that expire it at once
/// (`x-message-ttl: 0`), each adding an `x-death` entry, so it arrives far over frame_max; it is
/// read by warren's snapshot and by a connection that asked for frame_max 8192 (a buffer of
/// 256 KiB), between two small messages, whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_header_larger_than_the_receive_buffer_is_read_whole() {
    use lapin::options::{BasicPublishOptions, QueueDeclareOptions};
    // Each hop adds about 600 bytes with names of 250 bytes (the queue's name is in an entry
    // twice); RabbitMQ 3.10.8 took some 8 s for 400 such hops, and did not finish 1,500 hops of
    // short names in a minute, so long names it is.
    const HOPS: usize = 400;
    let hop_name = |hop: usize| format!("c{hop:04}{}", "q".repeat(245));
    let vhost = TestVhost::create("frameshops").await;
    let connection = vhost.connect().await;
    let channel = vhost.channel(&connection).await;
    let durable = QueueDeclareOptions { durable: true, ..Default::default() };
    channel.queue_declare("work.dlq".into(), durable, FieldTable::default()).await.unwrap();
    for hop in 0..HOPS {
        let next = if hop + 1 == HOPS { "work.dlq".to_string() } else { hop_name(hop + 1) };
        let mut args = FieldTable::default();
        args.insert("x-message-ttl".into(), AMQPValue::LongInt(0));
        args.insert("x-dead-letter-exchange".into(), AMQPValue::LongString("".into()));
        args.insert("x-dead-letter-routing-key".into(), AMQPValue::LongString(next.into()));
        channel.queue_declare(hop_name(hop).into(), durable, args).await.unwrap();
    }
    let mut messages = numbered(1);
    messages.push(big("long", 131_000));
    messages.push((String::from("m2"), b"{\"n\": 2}".to_vec(), FieldTable::default()));
    for (id, payload, headers) in messages {
        let properties = lapin::BasicProperties::default().with_message_id(id.into()).with_headers(headers);
        let confirm = channel
            .basic_publish("".into(), hop_name(0).into(), BasicPublishOptions::default(), &payload, properties)
            .await
            .unwrap();
        assert!(confirm.await.unwrap().is_ack());
    }
    wait_for("all three through the chain", Duration::from_secs(120), || async {
        let n = depth(&channel, "work.dlq").await;
        if n == 3 {
            Ok(())
        } else {
            Err(format!("{n} in work.dlq"))
        }
    })
    .await;

    let warren = watching(&vhost, "work.dlq").await;
    let base = format!("/api/v1/queues/local/{}/work.dlq", encode(&vhost.name));
    let (status, snapshot) = post_within(&warren, 60, &format!("{base}/snapshot"), json!({})).await;
    assert_eq!(status, 200, "{snapshot}");
    assert_eq!(message_ids(&snapshot["messages"]), ["m1", "long", "m2"]);
    let long = &snapshot["messages"][1];
    assert_eq!(long["deaths"].as_array().map(Vec::len), Some(HOPS), "one x-death entry per queue passed");
    let pad = long["message"]["properties"]["headers"]["pad"].as_str();
    assert_eq!(pad, Some(padding("long", pad_len("long", 131_000)).as_str()));
    warren.stop().await;

    let uri = format!("{}/{}?frame_max=8192", common::broker().amqp_with_guest(), encode(&vhost.name));
    let small = lapin::Connection::connect(&uri, lapin::ConnectionProperties::default()).await.unwrap();
    assert_eq!(small.configuration().frame_max(), 8192);
    let small_channel = small.create_channel().await.unwrap();
    let mut drained = Vec::new();
    let get = || async {
        let read = small_channel.basic_get("work.dlq".into(), BasicGetOptions { no_ack: true });
        tokio::time::timeout(Duration::from_secs(30), read).await.expect("a read answers within 30 s").unwrap()
    };
    while let Some(message) = get().await {
        let p = &message.delivery.properties;
        let pad = p.headers().as_ref().and_then(|h| h.inner().get("pad").cloned()).and_then(|v| match v {
            AMQPValue::LongString(s) => Some(String::from_utf8_lossy(s.as_bytes()).into_owned()),
            _ => None,
        });
        drained.push((p.message_id().as_ref().map(|s| s.to_string()).unwrap(), pad));
        if drained.len() == 2 {
            let frame = lapin::content_header_frame_size(p).unwrap();
            assert!(frame > 32 * 8192, "the header ({frame} bytes) is larger than the buffer of 32 frames");
        }
    }
    let expected = [("m1", None), ("long", Some(padding("long", pad_len("long", 131_000)))), ("m2", None)]
        .map(|(id, pad)| (id.to_string(), pad));
    assert_eq!(drained, expected);
    small.close(0, "done".into()).await.ok();
    connection.close(0, "done".into()).await.ok();
}
