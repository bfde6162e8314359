//! Hostile input from the broker and from clients, against the real broker: warren answers with
//! a clear error or handles it, keeps serving, and loses no message.

mod common;

use std::time::Duration;

use common::dead_letters::{dead_letter, depth, drain_ids, message_ids, numbered};
use common::{declare, wait_for, TestVhost, Warren};
use serde_json::{json, Value};

fn encode(s: &str) -> String {
    warren::broker::management::encode_segment(s)
}

/// Header tables nested `levels` deep, as JSON text (built as text: a `serde_json::Value` that
/// deep would recurse as deeply to serialise and drop).
fn nested_json(levels: usize) -> String {
    format!("{}{{}}{}", "{\"a\":".repeat(levels - 1), "}".repeat(levels - 1))
}

/// Publishes into `queue` through the management API, which takes headers as JSON and encodes
/// them as AMQP tables in the broker (the test's own AMQP client never builds the deep value).
async fn publish_raw(vhost: &TestVhost, queue: &str, message_id: &str, extra_headers: &str) {
    let body = format!(
        r#"{{"properties":{{"message_id":"{message_id}","headers":{{"x-first-death-queue":"work"{extra_headers}}}}},
            "routing_key":"{queue}","payload":"{{\"id\":\"{message_id}\"}}","payload_encoding":"string"}}"#
    );
    let response = reqwest::Client::new()
        .post(format!("{}/api/exchanges/{}/amq.default/publish", common::broker().management, encode(&vhost.name)))
        .basic_auth("guest", Some("guest"))
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .expect("management API");
    assert!(response.status().is_success(), "publish {message_id}: {}", response.status());
    let routed: Value = response.json().await.unwrap();
    assert_eq!(routed["routed"], true, "{message_id} routed to {queue}");
}

/// warren watching the test's vhost, once it lists `queue`.
async fn watching(vhost: &TestVhost, queue: &str) -> Warren {
    let warren = Warren::for_vhost(&vhost.name, 1).await;
    wait_for(&format!("{queue} listed by warren"), Duration::from_secs(30), || async {
        warren.queue(&vhost.name, queue).await.map(|_| ()).ok_or_else(|| "not yet".to_string())
    })
    .await;
    warren
}

async fn still_serving(warren: &Warren) {
    let (status, _) = warren.get_json("/api/v1/queues").await;
    assert_eq!(status, 200, "warren still serves");
    assert_eq!(warren.get_text("/healthz").await.0, 200);
}

/// One message whose headers nest 1,000 tables deep once overflowed the stack of the AMQP
/// client's IO thread when warren read it, and aborted the process. It is read now (the parser
/// keeps what lies past 64 levels as raw bytes), shown in the snapshot, and left in the DLQ by
/// warren's mover, which publishes no altered copy; every other message moves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_nested_1000_deep_is_snapshotted_and_left_in_place_by_moves() {
    let vhost = TestVhost::create("deep").await;
    let connection = vhost.connect().await;
    let channel = vhost.channel(&connection).await;
    dead_letter(&vhost, &channel, "work.dlq", false, numbered(3)).await;
    let deep = format!(r#","deep":{}"#, nested_json(1000));
    publish_raw(&vhost, "work.dlq", "deep", &deep).await;
    publish_raw(&vhost, "work.dlq", "m5", "").await;
    declare(&channel, "parking", false).await;
    let warren = watching(&vhost, "work.dlq").await;

    let base = format!("/api/v1/queues/local/{}/work.dlq", encode(&vhost.name));
    let (status, snapshot) = warren.post_json(&format!("{base}/snapshot"), json!({"count": 100})).await;
    assert_eq!(status, 200, "{snapshot}");
    assert_eq!(message_ids(&snapshot["messages"]), ["m1", "m2", "m3", "deep", "m5"]);
    still_serving(&warren).await;

    // Warren's own mover (a selection by position reads with basic.get).
    let job = warren
        .run_move(
            &format!("{base}/requeue"),
            json!({"selection": {"positions": [1, 2, 3, 4, 5]}, "target": {"queue": "parking"}}),
        )
        .await;
    assert_eq!(message_ids(&job["report"]["moved"]), ["m1", "m2", "m3", "m5"], "{job}");
    assert_eq!(message_ids(&job["report"]["failed"]), ["deep"], "{job}");
    let reason = job["report"]["failed"][0]["reason"].as_str().unwrap();
    assert!(reason.contains("nest deeper than 64 levels"), "{reason}");
    assert_eq!(drain_ids(&channel, "parking").await, ["m1", "m2", "m3", "m5"]);
    assert_eq!(depth(&channel, "work.dlq").await, 1, "the deep message stays in the DLQ");
    still_serving(&warren).await;

    // A whole-queue requeue to the original queue reads with a consumer.
    publish_raw(&vhost, "work.dlq", "m6", "").await;
    let job = warren.run_move(&format!("{base}/requeue"), json!({"selection": "all"})).await;
    assert_eq!(message_ids(&job["report"]["moved"]), ["m6"], "{job}");
    assert_eq!(message_ids(&job["report"]["failed"]), ["deep"], "{job}");
    assert_eq!(drain_ids(&channel, "work").await, ["m6"]);
    still_serving(&warren).await;

    // It is still there, and reads again.
    let (status, again) = warren.post_json(&format!("{base}/snapshot"), json!({})).await;
    assert_eq!(status, 200, "{again}");
    assert_eq!(message_ids(&again["messages"]), ["deep"]);
    assert_eq!(drain_ids(&channel, "work.dlq").await, ["deep"]);
    warren.stop().await;
    connection.close(0, "done".into()).await.ok();
}

/// Times near the limits of i64 once wrapped `to - from` and built a chart grid without end
/// (the process allocated until it aborted); the smallest i64 panicked the request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn absurd_time_ranges_are_refused_and_warren_keeps_serving() {
    let vhost = TestVhost::create("ranges").await;
    let connection = vhost.connect().await;
    let channel = vhost.channel(&connection).await;
    declare(&channel, "q", false).await;
    let warren = watching(&vhost, "q").await;
    let queue = format!("local/{}/q", encode(&vhost.name));
    for query in [
        "from=9223372036854775806&to=9223372036854775807",
        "from=-9223372036854775808",
        "from=-9223372036854775808&to=9223372036854775807",
        "to=-9223372036854775808&range=30d",
        "from=0&to=253402300800",
        "from=99999999999999999999",
    ] {
        let (status, body) = warren.get_json(&format!("/api/v1/queues/{queue}/history?{query}")).await;
        assert_eq!(status, 400, "{query}: {body}");
        assert_eq!(body["error"]["code"], "bad_request", "{query}: {body}");
        let (status, _) = warren.get_text(&format!("/queues/{queue}?{query}")).await;
        assert_eq!(status, 400, "queue page, {query}");
        let (status, _) = warren.get_json(&format!("/api/v1/brokers/local/history?{query}")).await;
        assert_eq!(status, 400, "broker history, {query}");
    }
    // The widest range accepted still answers, with a bounded number of points.
    let (status, body) = warren.get_json(&format!("/api/v1/queues/{queue}/history?from=0&to=34560000")).await;
    assert_eq!(status, 200, "{body}");
    still_serving(&warren).await;
    warren.stop().await;
    connection.close(0, "done".into()).await.ok();
}

/// A publisher written out frame by frame, for messages no AMQP library would send: short
/// strings that are not UTF-8, unknown field types. Publishes one message to the default
/// exchange with `routing_key` and waits for the broker's confirm.
mod raw {
    use std::io::{Read, Write};
    use std::net::TcpStream;

    fn short(out: &mut Vec<u8>, s: &[u8]) {
        out.push(s.len() as u8);
        out.extend_from_slice(s);
    }

    fn long(out: &mut Vec<u8>, s: &[u8]) {
        out.extend_from_slice(&(s.len() as u32).to_be_bytes());
        out.extend_from_slice(s);
    }

    fn frame(stream: &mut TcpStream, kind: u8, channel: u16, payload: &[u8]) {
        let mut f = vec![kind];
        f.extend_from_slice(&channel.to_be_bytes());
        long(&mut f, payload);
        f.push(0xCE);
        stream.write_all(&f).unwrap();
    }

    fn method(stream: &mut TcpStream, channel: u16, class: u16, id: u16, args: &[u8]) {
        let mut p = class.to_be_bytes().to_vec();
        p.extend_from_slice(&id.to_be_bytes());
        p.extend_from_slice(args);
        frame(stream, 1, channel, &p);
    }

    /// The next method frame: (class, method, arguments).
    fn read_method(stream: &mut TcpStream) -> (u16, u16, Vec<u8>) {
        loop {
            let mut header = [0u8; 7];
            stream.read_exact(&mut header).unwrap();
            let size = u32::from_be_bytes(header[3..7].try_into().unwrap()) as usize;
            let mut payload = vec![0u8; size + 1];
            stream.read_exact(&mut payload).unwrap();
            if header[0] == 1 {
                let class = u16::from_be_bytes([payload[0], payload[1]]);
                let id = u16::from_be_bytes([payload[2], payload[3]]);
                return (class, id, payload[4..size].to_vec());
            }
        }
    }

    fn expect(stream: &mut TcpStream, class: u16, id: u16) -> Result<Vec<u8>, String> {
        let (c, m, args) = read_method(stream);
        if (c, m) == (class, id) {
            Ok(args)
        } else {
            let text_len = args.get(2).copied().unwrap_or(0) as usize;
            let text = String::from_utf8_lossy(args.get(3..3 + text_len).unwrap_or_default()).into_owned();
            Err(format!("expected {class}.{id}, got {c}.{m}: {text}"))
        }
    }

    /// `headers` is an encoded field table's content (without its length).
    pub fn publish(vhost: &str, routing_key: &str, message_id: &[u8], headers: &[u8]) -> Result<(), String> {
        let mut s = TcpStream::connect(crate::common::broker().amqp_addr()).unwrap();
        s.set_read_timeout(Some(std::time::Duration::from_secs(10))).unwrap();
        s.write_all(b"AMQP\x00\x00\x09\x01").unwrap();
        expect(&mut s, 10, 10)?;
        let mut start_ok = 0u32.to_be_bytes().to_vec();
        short(&mut start_ok, b"PLAIN");
        long(&mut start_ok, b"\0guest\0guest");
        short(&mut start_ok, b"en_US");
        method(&mut s, 0, 10, 11, &start_ok);
        let tune = expect(&mut s, 10, 30)?;
        let mut tune_ok = tune[0..6].to_vec();
        tune_ok.extend_from_slice(&0u16.to_be_bytes());
        method(&mut s, 0, 10, 31, &tune_ok);
        let mut open = Vec::new();
        short(&mut open, vhost.as_bytes());
        short(&mut open, b"");
        open.push(0);
        method(&mut s, 0, 10, 40, &open);
        expect(&mut s, 10, 41)?;
        method(&mut s, 1, 20, 10, &[0]);
        expect(&mut s, 20, 11)?;
        method(&mut s, 1, 85, 10, &[0]);
        expect(&mut s, 85, 11)?;
        let mut publish = 0u16.to_be_bytes().to_vec();
        short(&mut publish, b"");
        short(&mut publish, routing_key.as_bytes());
        publish.push(0);
        method(&mut s, 1, 60, 40, &publish);
        let body = b"{}";
        let mut header = 60u16.to_be_bytes().to_vec();
        header.extend_from_slice(&0u16.to_be_bytes());
        header.extend_from_slice(&(body.len() as u64).to_be_bytes());
        // Flags: headers (bit 13) and message_id (bit 7).
        header.extend_from_slice(&((1u16 << 13) | (1u16 << 7)).to_be_bytes());
        long(&mut header, headers);
        short(&mut header, message_id);
        frame(&mut s, 2, 1, &header);
        frame(&mut s, 3, 1, body);
        let confirmed = expect(&mut s, 60, 80).map(|_| ());
        method(&mut s, 0, 10, 50, &[0, 200, 0, 0, 0, 0, 0]);
        confirmed
    }

    /// A field table entry: key, type tag, encoded value.
    pub fn entry(key: &[u8], kind: u8, value: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        short(&mut out, key);
        out.push(kind);
        out.extend_from_slice(value);
        out
    }

    pub fn long_string(s: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        long(&mut out, s);
        out
    }
}

/// RabbitMQ passes on short strings that are not UTF-8 (a `message_id` and a header key of
/// bytes `ff fe`, published frame by frame); the AMQP parser refused the whole frame and closed
/// warren's connection, so such a message made its queue unreadable. It is read now, with
/// U+FFFD in place of the bytes; moves leave it where it is rather than publish an altered copy.
/// (An unknown field type is refused by the broker itself: measured on 3.10.8, the publisher's
/// connection is closed with INTERNAL_ERROR, so none reaches a queue.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_with_bytes_that_are_not_utf8_is_read_and_left_in_place_by_moves() {
    let vhost = TestVhost::create("utf8").await;
    let connection = vhost.connect().await;
    let channel = vhost.channel(&connection).await;
    dead_letter(&vhost, &channel, "work.dlq", false, numbered(2)).await;
    let name = vhost.name.clone();
    let mut headers = raw::entry(b"x-first-death-queue", b'S', &raw::long_string(b"work"));
    headers.extend(raw::entry(b"\xffkey", b'S', &raw::long_string(b"v")));
    tokio::task::spawn_blocking(move || raw::publish(&name, "work.dlq", b"\xff\xfe-bad", &headers))
        .await
        .unwrap()
        .expect("the broker takes it");
    publish_raw(&vhost, "work.dlq", "m4", "").await;
    let warren = watching(&vhost, "work.dlq").await;
    let base = format!("/api/v1/queues/local/{}/work.dlq", encode(&vhost.name));
    let (status, snapshot) = warren.post_json(&format!("{base}/snapshot"), json!({"count": 100})).await;
    assert_eq!(status, 200, "{snapshot}");
    assert_eq!(message_ids(&snapshot["messages"]), ["m1", "m2", "\u{fffd}\u{fffd}-bad", "m4"]);

    let job = warren.run_move(&format!("{base}/requeue"), json!({"selection": "all"})).await;
    assert_eq!(message_ids(&job["report"]["moved"]), ["m1", "m2", "m4"], "{job}");
    assert_eq!(message_ids(&job["report"]["failed"]), ["\u{fffd}\u{fffd}-bad"], "{job}");
    assert!(job["report"]["failed"][0]["reason"].as_str().unwrap().contains("not UTF-8"), "{job}");
    assert_eq!(drain_ids(&channel, "work").await, ["m1", "m2", "m4"]);
    assert_eq!(depth(&channel, "work.dlq").await, 1, "it stays in the DLQ");
    still_serving(&warren).await;
    warren.stop().await;
    connection.close(0, "done".into()).await.ok();
}

/// A short string of 255 bytes that are not UTF-8 reads as 255 U+FFFD, 765 bytes: more than a
/// short string holds. amq-protocol-types 10 panics on such a `ShortString` (in lapin's IO
/// thread, so the connection died and the snapshot never answered); the patched parser cuts it
/// to 255 bytes (85 U+FFFD). It is read, shown, and left in place by moves like any other
/// replaced string.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_string_of_255_bytes_that_are_not_utf8_is_read_cut_to_fit() {
    let vhost = TestVhost::create("utf8long").await;
    let connection = vhost.connect().await;
    let channel = vhost.channel(&connection).await;
    dead_letter(&vhost, &channel, "work.dlq", false, numbered(1)).await;
    let name = vhost.name.clone();
    let mut headers = raw::entry(b"x-first-death-queue", b'S', &raw::long_string(b"work"));
    headers.extend(raw::entry(&[0xff; 255], b'S', &raw::long_string(b"v")));
    tokio::task::spawn_blocking(move || raw::publish(&name, "work.dlq", &[0xfe; 255], &headers))
        .await
        .unwrap()
        .expect("the broker takes it");
    publish_raw(&vhost, "work.dlq", "m3", "").await;
    let warren = watching(&vhost, "work.dlq").await;
    let base = format!("/api/v1/queues/local/{}/work.dlq", encode(&vhost.name));
    // Before the cut, lapin's IO thread panicked and the snapshot never answered.
    let path = format!("{base}/snapshot");
    let snapshot = warren.post_json(&path, json!({"count": 100}));
    let (status, snapshot) =
        tokio::time::timeout(Duration::from_secs(60), snapshot).await.expect("the snapshot answers within 60 s");
    assert_eq!(status, 200, "{snapshot}");
    let cut = "\u{fffd}".repeat(85);
    assert_eq!(message_ids(&snapshot["messages"]), ["m1", cut.as_str(), "m3"]);

    let job = warren.run_move(&format!("{base}/requeue"), json!({"selection": "all"})).await;
    assert_eq!(message_ids(&job["report"]["moved"]), ["m1", "m3"], "{job}");
    assert_eq!(message_ids(&job["report"]["failed"]), [cut.as_str()], "{job}");
    assert_eq!(drain_ids(&channel, "work").await, ["m1", "m3"]);
    assert_eq!(depth(&channel, "work.dlq").await, 1, "it stays in the DLQ");
    still_serving(&warren).await;
    warren.stop().await;
    connection.close(0, "done".into()).await.ok();
}

/// Large messages: a whole-queue move reads them a few at a time (as many as fit in 64 MB), and
/// neither copies awaiting confirms nor messages that could not be moved may stall the read
/// window (30 messages of 3 MB: a window of at most 21).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_messages_move_whole_in_a_small_window_and_failures_do_not_stall_it() {
    let vhost = TestVhost::create("large").await;
    let connection = vhost.connect().await;
    let channel = vhost.channel(&connection).await;
    let messages: Vec<_> = (1..=30)
        .map(|i| (format!("big{i}"), vec![b'a' + (i % 26) as u8; 3 * 1024 * 1024], Default::default()))
        .collect();
    let ids: Vec<String> = messages.iter().map(|(id, _, _)| id.clone()).collect();
    dead_letter(&vhost, &channel, "work.dlq", false, messages).await;
    let warren = watching(&vhost, "work.dlq").await;
    let path = format!("/api/v1/queues/local/{}/work.dlq/requeue", encode(&vhost.name));

    // Every copy comes back unroutable: each stays unacked in the window until the end.
    vhost.delete_queue("work").await;
    let job = warren.run_move(&path, json!({"selection": "all"})).await;
    assert_eq!(job["report"]["failed"].as_array().unwrap().len(), 30, "{}", job["report"]["failed"]);
    assert!(job["report"]["moved"].as_array().unwrap().is_empty());
    assert_eq!(depth(&channel, "work.dlq").await, 30);

    declare(&channel, "work", false).await;
    let job = warren.run_move(&path, json!({"selection": "all"})).await;
    assert_eq!(job["state"], "done", "{}", job["report"]["failed"]);
    let moved = message_ids(&job["report"]["moved"]);
    assert_eq!(moved, ids);
    assert_eq!(drain_ids(&channel, "work").await, ids, "all 30 arrived, in order");
    assert_eq!(depth(&channel, "work.dlq").await, 0);
    still_serving(&warren).await;
    warren.stop().await;
    connection.close(0, "done".into()).await.ok();
}

/// The page's text with the values of form fields left out: those go back to warren as they
/// came (a queue name in a hidden input must name the queue), so they keep every character.
fn text_outside_form_values(page: &str) -> String {
    let mut out = String::new();
    let mut rest = page;
    while let Some(at) = rest.find("value=\"") {
        out.push_str(&rest[..at]);
        rest = &rest[at + 7..];
        rest = rest.split_once('"').map_or("", |(_, after)| after);
    }
    out + rest
}

/// Controls that reorder or hide text (tab and line breaks are whitespace).
fn is_control(c: char) -> bool {
    (c.is_control() && !matches!(c, '\t' | '\n' | '\r'))
        || matches!(c, '\u{61c}' | '\u{200e}' | '\u{200f}' | '\u{2028}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// Issue 29, must-have 8: a right-to-left override in a message id made `\u202eabc` read "cba",
/// and other controls hid text. Message ids, headers, queue names and client properties show
/// every control character escaped, on the DLQ page, the message page, the queue list and the
/// clients page.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn control_and_bidi_characters_from_the_broker_are_shown_escaped() {
    use lapin::types::{AMQPValue, FieldTable, LongString};
    let vhost = TestVhost::create("bidi").await;
    let connection = vhost.connect().await;
    let channel = vhost.channel(&connection).await;
    let mut headers = FieldTable::default();
    headers.insert("x-exception-message".into(), AMQPValue::LongString("fail\u{7}ed \u{2066}quietly".into()));
    dead_letter(&vhost, &channel, "dlq", false, vec![("\u{202e}abc".to_string(), b"{}".to_vec(), headers)]).await;
    let odd_queue = "orders\u{202e}lanif";
    declare(&channel, odd_queue, false).await;
    let product = format!("\u{202e}tcudorp-{}", "x".repeat(3_500));
    // Without a version lapin names itself as the product.
    let properties = lapin::ConnectionProperties::default()
        .with_client_property("product".into(), LongString::from(product.as_str()))
        .with_client_property("version".into(), "1".into());
    let uri = format!("{}/{}", common::broker().amqp_with_guest(), encode(&vhost.name));
    let client = lapin::Connection::connect(&uri, properties).await.expect("a client connection");

    let warren = watching(&vhost, odd_queue).await;
    warren.snapshot(&vhost.name, "dlq", 10).await;
    let pages = [
        (format!("/dlq/local/{}/dlq", encode(&vhost.name)), "\\u{202e}abc"),
        (format!("/dlq/local/{}/dlq/messages/1", encode(&vhost.name)), "fail\\u{7}ed \\u{2066}quietly"),
        ("/queues".to_string(), "orders\\u{202e}lanif"),
    ];
    for (path, escaped) in pages {
        let (status, page) = warren.get_text(&path).await;
        assert_eq!(status, 200, "{path}");
        assert!(page.contains(escaped), "{path} shows {escaped}:\n{page}");
        let text = text_outside_form_values(&page);
        let raw: Vec<char> = text.chars().filter(|c| is_control(*c)).collect();
        assert!(raw.is_empty(), "{path} has raw control characters {raw:?}");
    }
    // warren keeps the first 200 characters of a client's text (`broker::clients`).
    let escaped_product = format!("\\u{{202e}}tcudorp-{}", "x".repeat(191));
    wait_for("the client's connection listed", Duration::from_secs(60), || async {
        let (_, body) = warren.get_json("/api/v1/brokers/local/connections").await;
        if body.to_string().contains("tcudorp-") {
            Ok(())
        } else {
            Err(body.to_string())
        }
    })
    .await;
    let (status, page) = warren.get_text("/brokers/local/clients").await;
    assert_eq!(status, 200);
    assert!(page.contains(&format!("{escaped_product}<")), "the product escaped:\n{page}");
    assert!(!text_outside_form_values(&page).contains('\u{202e}'));
    client.close(0, "done".into()).await.ok();
    warren.stop().await;
    connection.close(0, "done".into()).await.ok();
}

/// Custody follows the mover's rule for messages warren cannot read faithfully (headers nested
/// past the parser's 64 levels, bytes that are not UTF-8 where AMQP wants text): it never acks
/// one for a copy that differs from it. The others are taken; those stay in the DLQ, readable,
/// and custody says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn custody_takes_no_message_it_cannot_keep_faithfully() {
    let vhost = TestVhost::create("deepcustody").await;
    let connection = vhost.connect().await;
    let channel = vhost.channel(&connection).await;
    dead_letter(&vhost, &channel, "work.dlq", false, numbered(3)).await;
    publish_raw(&vhost, "work.dlq", "deep", &format!(r#","deep":{}"#, nested_json(1000))).await;
    let name = vhost.name.clone();
    let mut headers = raw::entry(b"x-first-death-queue", b'S', &raw::long_string(b"work"));
    headers.extend(raw::entry(b"\xffkey", b'S', &raw::long_string(b"v")));
    tokio::task::spawn_blocking(move || raw::publish(&name, "work.dlq", b"bad-utf8", &headers))
        .await
        .unwrap()
        .expect("the broker takes it");
    publish_raw(&vhost, "work.dlq", "m6", "").await;
    let warren = Warren::start(&format!(
        "[[brokers]]\nname = \"local\"\nvhosts_include = [{:?}]\npoll_interval_secs = 1\n\n[[custody]]\nqueue = \"*.dlq\"\n",
        vhost.name
    ))
    .await;
    let api = format!("/api/v1/queues/local/{}/work.dlq/custody", encode(&vhost.name));
    let held = wait_for("the four faithful ones in custody", Duration::from_secs(60), || async {
        let (_, list) = warren.get_json(&api).await;
        match list["custody"]["counts"]["held"].as_i64() {
            Some(4) => Ok(list),
            _ => Err(list.to_string()),
        }
    })
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (_, list) = warren.get_json(&api).await;
    assert_eq!(list["custody"]["counts"]["held"], 4, "{list}");
    let ids: std::collections::BTreeSet<String> = list["custody"]["records"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["message_id"].as_str().unwrap_or_default().to_string())
        .collect();
    assert_eq!(ids, ["m1", "m2", "m3", "m6"].map(String::from).into(), "{held}");
    let intake = &list["custody"]["intake"];
    assert_eq!((&intake["state"], &intake["left_count"]), (&json!("running"), &json!(2)), "{intake}");
    let left = intake["left"].to_string();
    assert!(left.contains("nest deeper than 64 levels") && left.contains("not UTF-8"), "{left}");
    still_serving(&warren).await;
    warren.stop().await;
    // Both stay in the broker's DLQ, whole.
    let left = drain_ids(&channel, "work.dlq").await;
    assert_eq!(left.len(), 2, "{left:?}");
    assert!(left.contains(&"deep".to_string()), "{left:?}");
    connection.close(0, "done".into()).await.ok();
}

/// Issue 36, case 8: every error of the JSON API is JSON of one shape, `{"error": {"code",
/// "message"}}`, the framework's own rejections too (they came as `text/plain`, or empty for a
/// method the route does not take).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_api_error_is_json_of_one_shape() {
    let vhost = TestVhost::create("apierrors").await;
    let warren = watching_nothing(&vhost).await;
    let http = reqwest::Client::new();
    let requeue = warren.url(&format!("/api/v1/queues/local/{}/q/requeue", encode(&vhost.name)));
    let cases = [
        ("a job id that is no number", http.get(warren.url("/api/v1/jobs/abc")), 400, "bad_request"),
        ("a body without a content type", http.post(&requeue).body("{}"), 415, "unsupported_media_type"),
        (
            "a body that is not JSON",
            http.post(&requeue).header("content-type", "application/json").body("{"),
            400,
            "bad_request",
        ),
        (
            "JSON of the wrong shape",
            http.post(&requeue).header("content-type", "application/json").body(r#"{"selection": "everything"}"#),
            422,
            "invalid",
        ),
        ("a method the route does not take", http.put(warren.url("/api/v1/queues")), 405, "method_not_allowed"),
        ("no such resource", http.get(warren.url("/api/v1/nothing-here")), 404, "not_found"),
        // Last: warren answers before reading the whole body and closes the connection, which
        // this client would otherwise reuse for the next request (an IncompleteMessage error).
        (
            "a body over the limit",
            http.post(&requeue).header("content-type", "application/json").body(vec![b' '; 3 * 1024 * 1024]),
            413,
            "too_large",
        ),
    ];
    for (what, request, status, code) in cases {
        let response = request.send().await.unwrap();
        let got = response.status().as_u16();
        if got != status {
            panic!("{what}: {got} {}", response.text().await.unwrap());
        }
        let content_type = response.headers()["content-type"].to_str().unwrap().to_string();
        assert!(content_type.starts_with("application/json"), "{what}: {content_type}");
        let allow = response.headers().get("allow").is_some();
        let body: Value = response.json().await.unwrap_or_else(|e| panic!("{what}: not JSON: {e}"));
        assert_eq!(body["error"]["code"], code, "{what}: {body}");
        assert!(body["error"]["message"].as_str().is_some_and(|m| !m.is_empty()), "{what}: {body}");
        if status == 405 {
            assert!(allow, "{what}: the Allow header stays");
        }
    }
    still_serving(&warren).await;
    warren.stop().await;
}

async fn watching_nothing(vhost: &TestVhost) -> Warren {
    let warren = Warren::for_vhost(&vhost.name, 1).await;
    wait_for("warren to serve", Duration::from_secs(20), || async {
        match warren.get_text("/healthz").await.0 {
            200 => Ok(()),
            other => Err(format!("{other}")),
        }
    })
    .await;
    warren
}

/// Issue 36, case 10: query keys are percent-decoded like values, as browsers and serde's `Query`
/// read them: `%71` is `q`. The compare page compared its raw keys, so `?%71=...` asked for no
/// queue at all (400 "no queues to compare") instead of the one named.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn percent_encoded_query_keys_are_decoded() {
    let vhost = TestVhost::create("keys").await;
    let connection = vhost.connect().await;
    let channel = vhost.channel(&connection).await;
    declare(&channel, "q", false).await;
    let warren = watching(&vhost, "q").await;
    let (status, body) = warren.get_text("/compare?%71=/queues/local/nowhere/nothing").await;
    assert_eq!(status, 404, "the key %71 is q, and the queue it names does not exist: {body}");
    let page = format!("/compare?%71=/queues/local/{}/q&%72ange=1h", encode(&vhost.name));
    let (status, body) = warren.get_text(&page).await;
    assert_eq!(status, 200, "{body}");
}
