//! Issue 19, must-have 2: every live page says how old its data is ("Updated 4 s ago"), ticks
//! without a reload, shows new audit entries by itself, and warns when warren stops answering.
//! Headless Chromium drives the real pages, as in `browser.rs`.
//!
//! Needs `chromium` and `chromedriver` (Debian packages `chromium` and `chromium-driver`).
//! Missing browser = failed test, never a skipped one.

mod common;

use std::time::Duration;

use common::{declare, publish, wait_for, TestVhost, Warren};
use fantoccini::{Client, Locator};
use lapin::BasicProperties;

fn encode(s: &str) -> String {
    warren::broker::management::encode_segment(s)
}

async fn text_of(client: &Client, selector: &str) -> Result<String, String> {
    let element = client.find(Locator::Css(selector)).await.map_err(|e| format!("{selector}: {e}"))?;
    element.text().await.map_err(|e| e.to_string())
}

/// The seconds of an indicator's "Updated N s ago", or what it said instead.
async fn seconds_ago(client: &Client, selector: &str) -> Result<u64, String> {
    let text = text_of(client, selector).await?;
    text.strip_prefix("Updated ")
        .and_then(|rest| rest.strip_suffix(" s ago."))
        .and_then(|n| n.parse().ok())
        .ok_or_else(|| format!("the indicator says {text:?}"))
}

/// Marks the document: a reload would lose the mark.
async fn mark(client: &Client) {
    client.execute("window.__warrenMark = 42; return null;", vec![]).await.unwrap();
}

async fn assert_not_reloaded(client: &Client) {
    let mark = client.execute("return window.__warrenMark === 42;", vec![]).await.unwrap();
    assert_eq!(mark, serde_json::Value::Bool(true), "the page was reloaded instead of updated in place");
}

/// On `url`, the indicator in `selector` says "Updated N s ago" and N changes while the page
/// stays the same document.
async fn indicator_ticks(client: &Client, url: &str, selector: &str) {
    client.goto(url).await.unwrap();
    let first = wait_for(&format!("\"Updated N s ago\" in {selector} on {url}"), Duration::from_secs(30), || async {
        seconds_ago(client, selector).await
    })
    .await;
    mark(client).await;
    wait_for(&format!("the age in {selector} to change from {first} s"), Duration::from_secs(15), || async {
        match seconds_ago(client, selector).await? {
            n if n != first => Ok(()),
            n => Err(format!("still {n} s")),
        }
    })
    .await;
    assert_not_reloaded(client).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_queue_page_and_the_overview_say_how_old_their_data_is() {
    let vhost = TestVhost::create("livefresh").await;
    let connection = vhost.connect().await;
    let channel = vhost.channel(&connection).await;
    declare(&channel, "fresh-q", false).await;
    publish(&channel, "fresh-q", 2, BasicProperties::default()).await;
    let warren = Warren::for_vhost(&vhost.name, 1).await;
    wait_for("warren to list fresh-q", Duration::from_secs(40), || async {
        warren.queue(&vhost.name, "fresh-q").await.ok_or_else(|| "not listed yet".to_string())
    })
    .await;
    let (_driver, client) = common::browser::start().await;

    let queue = warren.url(&format!("/queues/local/{}/fresh-q", encode(&vhost.name)));
    indicator_ticks(&client, &queue, "#queue-stats .freshness").await;
    indicator_ticks(&client, &warren.url("/"), "#brokers .freshness").await;
    // The indicator carries the time the data was obtained, for scripts and for the ticking.
    let updated = client
        .find(Locator::Css("#brokers .freshness"))
        .await
        .unwrap()
        .attr("data-updated")
        .await
        .unwrap()
        .expect("data-updated on the indicator");
    assert!(updated.parse::<i64>().is_ok(), "unix seconds: {updated}");

    client.close().await.unwrap();
    warren.stop().await;
    connection.close(0, "done".into()).await.ok();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_audit_page_shows_a_new_entry_without_reload() {
    let vhost = TestVhost::create("liveaudit").await;
    let connection = vhost.connect().await;
    let channel = vhost.channel(&connection).await;
    declare(&channel, "audited", false).await;
    publish(&channel, "audited", 3, BasicProperties::default()).await;
    let warren = Warren::for_vhost(&vhost.name, 1).await;
    wait_for("warren to list audited", Duration::from_secs(40), || async {
        warren.queue(&vhost.name, "audited").await.ok_or_else(|| "not listed yet".to_string())
    })
    .await;
    let (_driver, client) = common::browser::start().await;
    client.goto(&warren.url("/audit")).await.unwrap();
    let before = text_of(&client, "main").await.unwrap();
    assert!(!before.contains("purge"), "no purge yet: {before}");
    mark(&client).await;

    // A purge through the API is recorded in the audit log before it runs.
    let path = format!("/api/v1/queues/local/{}/audited/purge", encode(&vhost.name));
    let (status, answer) = warren.post_json(&path, serde_json::json!({})).await;
    assert_eq!(status, 200, "the purge runs: {answer}");
    wait_for("the purge's entry on the open audit page", Duration::from_secs(20), || async {
        let table = text_of(&client, "table.audit").await?;
        if table.contains("purge") && table.contains("audited") {
            Ok(())
        } else {
            Err(table)
        }
    })
    .await;
    assert_not_reloaded(&client).await;

    client.close().await.unwrap();
    warren.stop().await;
    connection.close(0, "done".into()).await.ok();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_page_says_when_warren_stops_answering() {
    let vhost = TestVhost::create("livestop").await;
    let warren = Warren::for_vhost(&vhost.name, 1).await;
    let (_driver, client) = common::browser::start().await;
    let list = warren.url(&format!("/queues?vhost={}", encode(&vhost.name)));
    client.goto(&list).await.unwrap();
    wait_for("a fresh indicator on the queue list", Duration::from_secs(30), || async {
        seconds_ago(&client, "#queue-table .freshness").await
    })
    .await;
    mark(&client).await;

    // The browser keeps the page; warren goes away under it.
    warren.stop().await;
    let warning = wait_for("the page to say warren is not answering", Duration::from_secs(20), || async {
        let text = text_of(&client, "#queue-table .freshness.stale[role=alert]").await?;
        if text.starts_with("warren is not answering since ") && text.contains("showing data from") {
            Ok(text)
        } else {
            Err(text)
        }
    })
    .await;
    assert!(warning.contains(" UTC"), "times as on every page: {warning}");
    assert_not_reloaded(&client).await;

    client.close().await.unwrap();
}
