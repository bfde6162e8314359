//! Headless Chromium drives the real pages: the queue list updates live, without a reload, and
//! the charts render.
//!
//! Needs `chromium` and `chromedriver` (Debian packages `chromium` and `chromium-driver`);
//! `.ci/run` installs them. Missing browser = failed test, never a skipped one.

mod common;

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::{declare, publish, wait_for, TestVhost, Warren};
use fantoccini::{Client, ClientBuilder, Locator};
use lapin::BasicProperties;

/// A chromedriver process on a port of its own, killed on drop.
struct Driver {
    child: Child,
    port: u16,
    _profile: tempfile::TempDir,
}

impl Drop for Driver {
    fn drop(&mut self) {
        if let Err(e) = self.child.kill() {
            eprintln!("could not stop chromedriver: {e}");
        }
        let _reaped = self.child.wait();
    }
}

async fn start_browser() -> (Driver, Client) {
    // Two TLS backends are linked (ring via reqwest, aws-lc via lapin): pick one for fantoccini.
    // An error only means another test already installed it.
    if rustls::crypto::ring::default_provider().install_default().is_err() {
        eprintln!("rustls crypto provider was already installed");
    }
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let binary = std::env::var("CHROMEDRIVER").unwrap_or_else(|_| "chromedriver".to_string());
    let child = Command::new(&binary)
        .arg(format!("--port={port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {binary} (apt-get install chromium chromium-driver): {e}"));
    let profile = tempfile::tempdir().unwrap();
    let driver = Driver { child, port, _profile: profile };
    let chromium = std::env::var("CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".to_string());
    let capabilities = serde_json::json!({
        "goog:chromeOptions": {
            "binary": chromium,
            "args": [
                "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                "--no-first-run", "--disable-quic", "--window-size=1400,1000",
                format!("--user-data-dir={}", driver._profile.path().display()),
            ]
        }
    });
    let capabilities = match capabilities {
        serde_json::Value::Object(map) => map,
        _ => unreachable!(),
    };
    let url = format!("http://127.0.0.1:{}", driver.port);
    let client = wait_for("chromedriver to accept a session", Duration::from_secs(30), || {
        let (url, capabilities) = (url.clone(), capabilities.clone());
        async move {
            ClientBuilder::rustls()
                .map_err(|e| e.to_string())?
                .capabilities(capabilities)
                .connect(&url)
                .await
                .map_err(|e| e.to_string())
        }
    })
    .await;
    (driver, client)
}

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
    let (_driver, client) = start_browser().await;

    let list = warren.url(&format!("/queues?vhost={}", warren::management::encode_segment(&vhost.name)));
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
