//! Clients (issue 20, must-have 2) against the real broker: a consumer that holds unacked
//! messages is named on its queue's page and in the API, the clients page and the connections
//! API list its connection, and with the metrics collector off what the broker does not say is
//! unknown, never 0 or "running".

mod common;

use std::time::Duration;

use common::{broker, declare, encode, publish, wait_for, TestVhost, Warren};
use lapin::options::{BasicConsumeOptions, BasicQosOptions};
use lapin::types::FieldTable;
use lapin::{BasicProperties, Connection, ConnectionProperties};
use serde_json::Value;

fn nostats() -> bool {
    broker().target.ends_with("-nostats")
}

/// A worker that names its connection, takes 5 messages (prefetch 5, manual acks) and never
/// acknowledges them: the hung consumer an operator must find.
async fn hung_worker(vhost: &TestVhost, connection_name: &str, queue: &str) -> (Connection, lapin::Consumer) {
    let uri = format!("{}/{}", broker().amqp_with_guest(), encode(&vhost.name));
    let properties = ConnectionProperties::default().with_connection_name(connection_name.into());
    let connection = Connection::connect(&uri, properties).await.expect("AMQP connection to the test broker");
    let channel = connection.create_channel().await.expect("channel");
    channel.basic_qos(5, BasicQosOptions::default()).await.expect("qos");
    let consumer = channel
        .basic_consume(queue.into(), "holder".into(), BasicConsumeOptions::default(), FieldTable::default())
        .await
        .expect("consume");
    (connection, consumer)
}

#[tokio::test]
async fn a_consumer_holding_unacked_messages_is_named_with_its_connection() {
    let vhost = TestVhost::create("clients").await;
    let setup = vhost.connect().await;
    let channel = vhost.channel(&setup).await;
    declare(&channel, "orders", false).await;
    publish(&channel, "orders", 20, BasicProperties::default()).await;
    setup.close(200, "published".into()).await.expect("close");
    let name = format!("billing-worker-{}", rand::random::<u32>());
    let (_worker, _consumer) = hung_worker(&vhost, &name, "orders").await;
    let warren = Warren::for_vhost(&vhost.name, 1).await;
    let v = encode(&vhost.name);

    // The consumers API: the consumer, its connection by the name it gave, prefetch, ack mode,
    // and the 5 unacked messages its channel holds.
    let consumers_path = format!("/api/v1/queues/local/{v}/orders/consumers");
    let consumers = wait_for("the consumers listing to show the worker", Duration::from_secs(60), || async {
        let (status, body) = warren.get_json(&consumers_path).await;
        if status != 200 {
            return Err(format!("{status}: {body}"));
        }
        if nostats() {
            return if body["as_of"].is_i64() { Ok(body) } else { Err(body.to_string()) };
        }
        let ready = body["consumers"].as_array().is_some_and(|c| c.len() == 1 && c[0]["channel_unacked"] == 5);
        if ready {
            Ok(body)
        } else {
            Err(body.to_string())
        }
    })
    .await;
    if nostats() {
        // The broker refuses the consumers listing with the metrics collector off.
        assert!(consumers["consumers"].is_null(), "{consumers}");
        assert!(consumers["unknown_why"].as_str().unwrap().contains("400"), "{consumers}");
        assert!(consumers["holders"].is_null(), "{consumers}");
    } else {
        let c = &consumers["consumers"][0];
        assert_eq!(c["connection_name"], name.as_str(), "{c}");
        assert_eq!((c["prefetch_count"].as_u64(), c["ack_required"].as_bool()), (Some(5), Some(true)), "{c}");
        assert_eq!(c["consumer_tag"], "holder");
        assert!(c["client_host"].as_str().unwrap().starts_with("127.0.0.1:"), "{c}");
        assert_eq!(c["queue"], "orders");
        assert!(consumers["holders"][0].as_str().unwrap().starts_with(&name), "{consumers}");
        assert!(consumers["channel_unacked_note"].as_str().unwrap().contains("per channel"));
    }
    assert!(consumers["every_secs"].as_f64().unwrap() >= 1.0, "{consumers}");

    // The queue page names it too, and says how old the listing is.
    let (status, page) = warren.get_text(&format!("/queues/local/{v}/orders")).await;
    assert_eq!(status, 200);
    assert!(page.contains("<h2>Consumers</h2>"), "{page}");
    assert!(page.contains("Consumers as of "), "the listing's age is shown");
    if nostats() {
        assert!(page.contains("Consumers unknown"), "{page}");
    } else {
        let section = &page[page.find("<h2>Consumers</h2>").unwrap()..];
        assert!(section.contains(&name), "the connection's own name");
        assert!(section.contains("<td>manual</td>"), "ack mode");
        assert!(section.contains("<td class=\"num\">5</td>"), "prefetch and unacked");
        assert!(section.contains("127.0.0.1:"), "client host");
    }

    // The connections API and the clients page list the connection with its user and state.
    // Its channel count comes with the broker's next stats emission (up to 5 s after the
    // consumer's): wait for it where the broker collects stats.
    let connections = wait_for("the worker's connection listed with its channel", Duration::from_secs(30), || async {
        let (status, body) = warren.get_json("/api/v1/brokers/local/connections").await;
        let listed = body["connections"].as_array().cloned().unwrap_or_default();
        let counted = listed.iter().any(|c| c["vhost"] == vhost.name.as_str() && c["channels"] == 1);
        if status == 200 && (nostats() || counted) {
            Ok(body)
        } else {
            Err(format!("{status}: {body}"))
        }
    })
    .await;
    let listed = connections["connections"].as_array().expect("listed").clone();
    let ours: Vec<&Value> = listed.iter().filter(|c| c["vhost"] == vhost.name.as_str()).collect();
    assert_eq!(ours.len(), 1, "only the worker is connected now: {connections}");
    assert_eq!(ours[0]["user"], "guest");
    assert!(connections["as_of"].is_i64());
    let (status, page) = warren.get_text("/brokers/local/clients").await;
    assert_eq!(status, 200);
    assert!(page.contains("Connections and channels as of "), "{page}");
    if nostats() {
        // Listed without state, client properties or channels: unknown, not "running" or 0.
        assert!(ours[0]["state"].is_null() && ours[0]["connection_name"].is_null(), "{}", ours[0]);
        assert!(ours[0]["channels"].is_null() && ours[0]["recv_bytes_per_sec"].is_null());
        assert!(connections["blocked_connections"].is_null(), "{connections}");
        assert!(page.contains("Channels unknown"), "{page}");
        assert!(page.contains("<strong class=\"blocked-count\">—</strong>"), "{page}");
        let (_, channels) = warren.get_json("/api/v1/brokers/local/channels").await;
        assert!(channels["channels"].is_null() && channels["unknown_why"].is_string(), "{channels}");
    } else {
        assert_eq!(ours[0]["connection_name"], name.as_str());
        assert_eq!(ours[0]["state"], "running");
        assert_eq!(ours[0]["channels"], 1);
        assert!(page.contains(&name) && page.contains("running"), "{page}");
        let (_, channels) = warren.get_json("/api/v1/brokers/local/channels").await;
        let channel = channels["channels"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["vhost"] == vhost.name.as_str())
            .cloned()
            .expect("the worker's channel");
        assert_eq!(
            (channel["prefetch_count"].as_u64(), channel["messages_unacknowledged"].as_u64()),
            (Some(5), Some(5))
        );
        assert_eq!(channel["confirm"], false);
    }

    // Held for 30 s while 15 wait: the hung-consumer signal names the connection.
    if !nostats() {
        let queue_path = format!("/api/v1/queues/local/{v}/orders");
        let queue = wait_for("the hung-consumer signal", Duration::from_secs(90), || async {
            let (_, q) = warren.get_json(&queue_path).await;
            if q["hung_consumer_secs"].is_number() && q["hung_consumer_connections"].is_array() {
                Ok(q)
            } else {
                Err(q.to_string())
            }
        })
        .await;
        assert!(queue["hung_consumer_connections"][0].as_str().unwrap().starts_with(&name), "{queue}");
        let (_, page) = warren.get_text(&format!("/queues/local/{v}/orders")).await;
        assert!(page.contains("Hung consumer: the unacked messages are held on the channels of"), "{page}");
    }
    warren.stop().await;
}
