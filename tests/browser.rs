//! Headless Chromium drives the real pages: the queue list updates live, without a reload, and
//! the charts render.
//!
//! Needs `chromium` and `chromedriver` (Debian packages `chromium` and `chromium-driver`);
//! `.ci/run` installs them. Missing browser = failed test, never a skipped one.

mod common;

use std::time::Duration;

use common::{declare, publish, wait_for, TestVhost, Warren};
use fantoccini::{Client, Locator};
use lapin::BasicProperties;

async fn cell_text(client: &Client, selector: &str) -> Result<String, String> {
    let element = client.find(Locator::Css(selector)).await.map_err(|e| format!("{selector}: {e}"))?;
    element.text().await.map_err(|e| e.to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queue_list_updates_live_without_reload() {
    let vhost = TestVhost::create("browser").await;
    let connection = vhost.connect().await;
    let channel = vhost.channel(&connection).await;
    declare(&channel, "browser-q", false).await;
    publish(&channel, "browser-q", 3, BasicProperties::default()).await;

    let warren = Warren::for_vhost(&vhost.name, 1).await;
    let (_driver, client) = common::browser::start().await;

    let list = warren.url(&format!("/queues?vhost={}", warren::broker::management::encode_segment(&vhost.name)));
    let row = r#"tr[data-queue="browser-q"] td.ready"#;
    wait_for("the queue row with 3 ready", Duration::from_secs(40), || async {
        client.goto(&list).await.map_err(|e| e.to_string())?;
        match cell_text(&client, row).await?.as_str() {
            "3" => Ok(()),
            other => Err(format!("ready shows {other:?}")),
        }
    })
    .await;

    // Mark this document: a reload would lose the mark.
    client.execute("window.__warrenMark = 42; return null;", vec![]).await.unwrap();
    publish(&channel, "browser-q", 4, BasicProperties::default()).await;
    wait_for("the row to show 7 ready without a reload", Duration::from_secs(40), || async {
        match cell_text(&client, row).await?.as_str() {
            "7" => Ok(()),
            other => Err(format!("ready shows {other:?}")),
        }
    })
    .await;
    let mark = client.execute("return window.__warrenMark === 42;", vec![]).await.unwrap();
    assert_eq!(mark, serde_json::Value::Bool(true), "the page was reloaded instead of updated in place");

    // The queue page draws its charts (uPlot adds a .uplot element per chart).
    client.find(Locator::Css(r#"tr[data-queue="browser-q"] td.name a"#)).await.unwrap().click().await.unwrap();
    wait_for("four rendered charts on the queue page", Duration::from_secs(20), || async {
        let charts = client.find_all(Locator::Css(".uplot")).await.map_err(|e| e.to_string())?;
        if charts.len() == 4 {
            Ok(())
        } else {
            Err(format!("{} charts", charts.len()))
        }
    })
    .await;
    let heading = cell_text(&client, "h1.queue-name").await.unwrap();
    assert!(heading.starts_with("browser-q"), "{heading}");

    client.close().await.unwrap();
    warren.stop().await;
    connection.close(0, "done").await.ok();
}
