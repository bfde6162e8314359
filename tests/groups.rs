//! Issue 31, must-have 6: dead letters grouped by the cause of their error, not by its text.
//! Spring's real header layout (the listener's wrapper first, the root cause in the last
//! `Caused by:`) with an order number in every message, and dramatiq's traceback in its JSON
//! body, dead-lettered by a real broker; the snapshot's "By error", its filter and a requeue by
//! group, and custody's groups, filter and export over the same.

mod common;

use std::time::Duration;

use common::dead_letters::{dead_letter, drain_ids, Message};
use common::{wait_for, TestVhost, Warren};
use lapin::types::{AMQPValue, FieldTable};
use serde_json::{json, Value};

fn encode(s: &str) -> String {
    warren::broker::management::encode_segment(s)
}

/// The group of the Spring messages: the root cause's type, the order number set aside.
const NPE_GROUP: &str = "java.lang.NullPointerException: customer of order <n> is null";

/// A message as Spring AMQP's republishing recoverer leaves it: the wrapper's message, and a
/// stack trace whose first line is the wrapper and whose last `Caused by:` is the root cause,
/// with `order` in both.
fn spring(id: String, order: usize) -> Message {
    let mut h = FieldTable::default();
    h.insert("x-exception-message".into(), AMQPValue::LongString("Listener method 'handle' threw exception".into()));
    let trace = format!(
        "org.springframework.amqp.rabbit.support.ListenerExecutionFailedException: Listener method 'handle' threw \
         exception\n\tat org.springframework.amqp.rabbit.listener.AbstractMessageListenerContainer.wrapToListenerExecutionFailedExceptionIfNeeded(AbstractMessageListenerContainer.java:1745)\n\
         Caused by: com.shop.OrderException: order {order} failed\n\tat com.shop.Orders.handle(Orders.java:88)\n\
         Caused by: java.lang.NullPointerException: customer of order {order} is null\n\tat com.shop.Customers.of(Customers.java:17)\n\t... 12 more"
    );
    h.insert("x-exception-stacktrace".into(), AMQPValue::LongString(trace.into()));
    h.insert("x-original-exchange".into(), AMQPValue::LongString("".into()));
    h.insert("x-original-routingKey".into(), AMQPValue::LongString("work".into()));
    (id, b"{\"order\": 1}".to_vec(), h)
}

/// A dramatiq message as it dead-letters: no error header, the traceback in the body's options.
fn dramatiq(id: String, customer: usize) -> Message {
    let body = json!({
        "queue_name": "work", "actor_name": "charge", "args": [customer], "kwargs": {},
        "options": {"retries": 3, "traceback": format!(
            "Traceback (most recent call last):\n  File \"/app/tasks.py\", line 12, in charge\n    \
             customer = customers[customer_id]\nKeyError: 'customer-{customer}'\n"
        )},
        "message_id": id, "message_timestamp": 1_700_000_000_000u64,
    });
    (id, body.to_string().into_bytes(), FieldTable::default())
}

/// The "By error" table of a DLQ page (the first one on it).
fn by_error(page: &str) -> &str {
    let table = &page[page.find(">By error</th>").expect("a By error table")..];
    &table[..table.find("</table>").unwrap()]
}

/// Issue 31, case 7: 78 texts that differ by an order number are one group, by the root cause's
/// type, listing its texts; the group's filter shows those 78 and a requeue by it takes those 78
/// from the whole queue; a dramatiq traceback in the body is an error too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn order_numbers_make_one_group_by_root_cause_and_its_filter_takes_them_all() {
    let vhost = TestVhost::create("groupsnap").await;
    let connection = vhost.connect().await;
    let channel = vhost.channel(&connection).await;
    let mut messages: Vec<Message> = (0..78).map(|i| spring(format!("npe-{i}"), 1000 + i)).collect();
    messages.extend((0..3).map(|i| dramatiq(format!("dq-{i}"), 40 + i)));
    dead_letter(&vhost, &channel, "work.dlq", false, messages).await;
    let warren = Warren::for_vhost(&vhost.name, 1).await;
    wait_for("work.dlq listed with 81", Duration::from_secs(30), || async {
        let q = warren.queue(&vhost.name, "work.dlq").await.ok_or("not listed")?;
        if q["total"] == 81 {
            Ok(())
        } else {
            Err(format!("total {}", q["total"]))
        }
    })
    .await;
    let snapshot = warren.snapshot(&vhost.name, "work.dlq", 200).await;
    let messages = snapshot["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 81, "{snapshot}");
    assert_eq!(messages[0]["error"]["kind"], "java.lang.NullPointerException", "the root cause: {}", messages[0]);
    let dq = messages.iter().find(|m| m["message_id"] == "dq-1").expect("the dramatiq message");
    assert_eq!(dq["error"]["kind"], "KeyError", "the body's traceback: {dq}");
    assert_eq!(dq["error"]["message"], "'customer-41'");
    assert_eq!(dq["error"]["from"], "options.traceback in the body (dramatiq)");
    // The API groups the snapshot as the page does.
    let group = |g: &Value| (g["group"].clone(), g["messages"].clone(), g["variant_count"].clone());
    let groups: Vec<_> = snapshot["by_error"].as_array().expect("by_error").iter().map(group).collect();
    assert_eq!(
        groups,
        [
            (json!("java.lang.NullPointerException: customer of order <n> is null"), json!(78), json!(78)),
            (json!("KeyError: <q>"), json!(3), json!(3)),
        ],
        "{}",
        snapshot["by_error"]
    );
    assert_eq!(snapshot["by_error"][0]["variants"].as_array().unwrap().len(), 20, "the commonest texts");

    let page_path = format!("/dlq/local/{}/work.dlq", encode(&vhost.name));
    let (status, page) = warren.get_text(&page_path).await;
    assert_eq!(status, 200);
    let table = by_error(&page);
    assert_eq!(table.matches("class=\"error-group\"").count(), 2, "one group per cause: {table}");
    assert!(
        table.contains(
            "java.lang.NullPointerException: customer of order &#60;n&#62; is null</a></td><td class=\"num\">78<"
        ),
        "{table}"
    );
    assert!(table.contains("KeyError: &#60;q&#62;</a></td><td class=\"num\">3<"), "{table}");
    assert!(table.contains("78 texts") && table.contains("and 58 more"), "the variants, counted: {table}");
    assert!(table.contains("customer of order 1000 is null"), "a variant as recorded: {table}");
    assert!(!table.contains("ListenerExecutionFailedException"), "not the wrapper: {table}");

    // The group's link filters the snapshot to it.
    let link = format!("?error_group={}", percent(NPE_GROUP));
    assert!(table.contains(&link.replace('&', "&amp;")), "the group links to its filter: {table}");
    let (_, filtered) = warren.get_text(&format!("{page_path}{link}")).await;
    assert_eq!(filtered.matches("<tr data-position=").count(), 78, "the group's messages");
    assert!(filtered.contains("78 of 81 messages match"), "{}", by_error(&filtered));

    // A requeue by the group takes its 78 from the whole queue, and only those.
    let requeue = format!("/api/v1/queues/local/{}/work.dlq/requeue", encode(&vhost.name));
    let job = warren
        .run_move(&requeue, json!({"selection": {"matching": {"error_group": NPE_GROUP}}, "target": "original_queue"}))
        .await;
    assert_eq!(job["state"], "done", "{job}");
    let back = drain_ids(&channel, "work").await;
    assert_eq!(back.len(), 78, "{back:?}");
    assert!(back.iter().all(|id| id.starts_with("npe-")), "{back:?}");
    warren.stop().await;
    connection.close(0, "done".into()).await.ok();
}

fn percent(s: &str) -> String {
    percent_encoding::utf8_percent_encode(s, percent_encoding::NON_ALPHANUMERIC).to_string()
}

/// Issue 31, case 7, in custody: `by_error` groups every held record by cause, with its texts;
/// the group's filter runs over every record, and the export by it holds exactly those; records
/// kept before their group was stored get it at start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn custody_groups_filters_and_exports_by_cause() {
    let vhost = TestVhost::create("groupcustody").await;
    let connection = vhost.connect().await;
    let channel = vhost.channel(&connection).await;
    let mut messages: Vec<Message> = (0..30).map(|i| spring(format!("npe-{i}"), 500 + i)).collect();
    messages.extend((0..2).map(|i| dramatiq(format!("dq-{i}"), i)));
    dead_letter(&vhost, &channel, "work.dlq", false, messages).await;
    let warren = Warren::start(&format!(
        "[[brokers]]\nname = \"local\"\nvhosts_include = [{:?}]\npoll_interval_secs = 1\n\n[[custody]]\nqueue = \"*.dlq\"\n",
        vhost.name
    ))
    .await;
    let api = format!("/api/v1/queues/local/{}/work.dlq/custody", encode(&vhost.name));
    wait_for("the 32 dead letters in custody", Duration::from_secs(60), || async {
        let (_, list) = warren.get_json(&api).await;
        if list["custody"]["counts"]["held"] == 32 {
            Ok(())
        } else {
            Err(list.to_string())
        }
    })
    .await;
    let (status, list) = warren.get_json(&api).await;
    assert_eq!(status, 200);
    let groups = list["custody"]["by_error"].as_array().unwrap();
    assert_eq!(groups.len(), 2, "{list}");
    assert_eq!(groups[0]["value"], NPE_GROUP);
    assert_eq!((groups[0]["records"].as_u64(), groups[0]["variant_count"].as_u64()), (Some(30), Some(30)));
    assert_eq!(groups[0]["variants"].as_array().unwrap().len(), 20, "the commonest texts: {}", groups[0]);
    assert_eq!(groups[0]["variants"][0]["records"], 1);
    assert_eq!(groups[1]["value"], "KeyError: <q>", "the dramatiq body's traceback: {}", groups[1]);
    assert_eq!(groups[1]["records"], 2);

    let by_group = |warren: &Warren| {
        let path = format!("{api}?error_group={}", percent(NPE_GROUP));
        let warren = warren.http.get(warren.url(&path));
        async move { warren.send().await.unwrap().json::<Value>().await.unwrap() }
    };
    let list = by_group(&warren).await;
    assert_eq!(list["custody"]["matching"], 30, "{list}");
    let ids: Vec<&str> =
        list["custody"]["records"].as_array().unwrap().iter().map(|r| r["message_id"].as_str().unwrap()).collect();
    assert!(ids.len() == 30 && ids.iter().all(|id| id.starts_with("npe-")), "{ids:?}");

    let export = warren
        .http
        .get(warren.url(&format!("{api}/export?error_group={}", percent("KeyError: <q>"))))
        .send()
        .await
        .unwrap();
    assert_eq!(export.status(), 200);
    let export = export.text().await.unwrap();
    let exported: Vec<String> = export
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap()["message_id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(exported, ["dq-0", "dq-1"], "the export by group");

    // The page lists the groups with their texts.
    let (_, page) = warren.get_text(&format!("/dlq/local/{}/work.dlq", encode(&vhost.name))).await;
    let table = by_error(&page);
    assert!(table.contains("customer of order &#60;n&#62; is null</a></td><td class=\"num\">30<"), "{table}");
    assert!(table.contains("30 texts") && table.contains("and 10 more"), "{table}");

    // Records kept before the group was stored (migration 0023) have none: the filter misses
    // them until the next start fills it in.
    let db = warren::history::open(&warren.dir.path().join("warren.db")).await.unwrap();
    sqlx::query("update custody_messages set error_group = null").execute(&db).await.unwrap();
    db.close().await;
    assert_eq!(by_group(&warren).await["custody"]["matching"], 0, "the filter reads the stored group");
    let warren = warren.restart().await;
    let list = wait_for("warren to answer after its restart", Duration::from_secs(30), || async {
        let (status, list) = warren.get_json(&api).await;
        if status == 200 {
            Ok(list)
        } else {
            Err(format!("{status}"))
        }
    })
    .await;
    assert_eq!(list["custody"]["counts"]["held"], 32);
    assert_eq!(by_group(&warren).await["custody"]["matching"], 30, "filled in at start");
    warren.stop().await;
    connection.close(0, "done".into()).await.ok();
}
