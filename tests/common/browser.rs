//! Headless Chromium through chromedriver, for the UI tests. Needs `chromium` and
//! `chromedriver` (Debian packages `chromium` and `chromium-driver`); `.ci/run` installs them.
//! A missing browser fails the test, never skips it.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use fantoccini::{Client, ClientBuilder};

use super::wait_for;

/// A chromedriver process on a port of its own, killed on drop.
pub struct Driver {
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

/// Starts chromedriver and a headless Chromium session.
pub async fn start() -> (Driver, Client) {
    launch(None).await
}

/// A browser whose local time zone is `tz` (a `TZ` name such as `Asia/Kolkata`), whatever the
/// machine's: Chromium takes it from the environment chromedriver passes on.
pub async fn start_in_time_zone(tz: &str) -> (Driver, Client) {
    launch(Some(tz)).await
}

async fn launch(tz: Option<&str>) -> (Driver, Client) {
    // Two TLS backends are linked (ring via reqwest and lapin, aws-lc via fantoccini's
    // hyper-rustls): pick one for fantoccini.
    // An error only means another test already installed it.
    if rustls::crypto::ring::default_provider().install_default().is_err() {
        eprintln!("rustls crypto provider was already installed");
    }
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let binary = std::env::var("CHROMEDRIVER").unwrap_or_else(|_| "chromedriver".to_string());
    let mut command = Command::new(&binary);
    if let Some(tz) = tz {
        command.env("TZ", tz);
    }
    let child = command
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

/// A Chrome DevTools Protocol command, sent through chromedriver's `goog/cdp/execute` endpoint.
#[derive(Debug)]
struct Cdp {
    command: &'static str,
    params: serde_json::Value,
}

impl fantoccini::wd::WebDriverCompatibleCommand for Cdp {
    fn endpoint(&self, base_url: &url::Url, session_id: Option<&str>) -> Result<url::Url, url::ParseError> {
        base_url.join(&format!("session/{}/goog/cdp/execute", session_id.unwrap_or_default()))
    }

    fn method_and_body(&self, _: &url::Url) -> (axum::http::Method, Option<String>) {
        let body = serde_json::json!({"cmd": self.command, "params": self.params});
        (axum::http::Method::POST, Some(body.to_string()))
    }
}

/// Runs a Chrome DevTools Protocol `command`; returns its result.
pub async fn cdp(client: &Client, command: &'static str, params: serde_json::Value) -> serde_json::Value {
    client.issue_cmd(Cdp { command, params }).await.unwrap_or_else(|e| panic!("CDP {command}: {e}"))
}

/// Lays pages out as a phone `width` CSS pixels wide would (viewport meta tag honoured), or,
/// with `None`, as the 1400 px desktop window again. Headless Chromium will not make its window
/// narrower than 500 px, so a phone needs the DevTools device emulation.
pub async fn emulate_phone(client: &Client, width: Option<u32>) {
    match width {
        Some(width) => {
            let metrics = serde_json::json!({"width": width, "height": 844, "deviceScaleFactor": 1, "mobile": true});
            cdp(client, "Emulation.setDeviceMetricsOverride", metrics).await;
        }
        None => {
            cdp(client, "Emulation.clearDeviceMetricsOverride", serde_json::json!({})).await;
        }
    }
}

/// A PNG of the whole page, not only of what fits in the window.
pub async fn full_page_screenshot(client: &Client) -> Vec<u8> {
    let size = client
        .execute("const d = document.documentElement; return [d.scrollWidth, d.scrollHeight];", vec![])
        .await
        .expect("page size");
    let (width, height) = (size[0].as_f64().unwrap_or(1.0), size[1].as_f64().unwrap_or(1.0));
    let params = serde_json::json!({
        "format": "png",
        "captureBeyondViewport": true,
        "clip": {"x": 0, "y": 0, "width": width, "height": height.min(16000.0), "scale": 1},
    });
    let shot = cdp(client, "Page.captureScreenshot", params).await;
    let data = shot["data"].as_str().expect("Page.captureScreenshot returns data");
    base64::Engine::decode(&base64::engine::general_purpose::STANDARD, data).expect("base64 PNG")
}

/// axe-core's source: `WARREN_TEST_AXE`, else where `.ci/run` installs it from the npm registry
/// (`npm install --prefix ~/.cache/warren-axe axe-core@4`). Missing, the test fails.
fn axe_source() -> String {
    let path = std::env::var("WARREN_TEST_AXE").unwrap_or_else(|_| {
        format!("{}/.cache/warren-axe/node_modules/axe-core/axe.min.js", std::env::var("HOME").unwrap_or_default())
    });
    std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!("axe-core is not at {path} ({e}): npm install --prefix ~/.cache/warren-axe axe-core@4, or set WARREN_TEST_AXE")
    })
}

/// The serious and critical accessibility violations axe-core finds on the current page (WCAG
/// 2.1 A and AA rules), one line each: rule, impact, how many elements, and the first of them.
pub async fn axe_violations(client: &Client) -> Vec<String> {
    let source = axe_source();
    client.execute(&format!("{source}\nreturn true;"), vec![]).await.expect("axe-core loads");
    let script = "const done = arguments[arguments.length - 1];\
        axe.run(document, {runOnly: {type: 'tag', values: ['wcag2a', 'wcag2aa', 'wcag21a', 'wcag21aa']}})\
          .then(r => done(r.violations.filter(v => v.impact === 'serious' || v.impact === 'critical')\
             .map(v => `${v.id} (${v.impact}) on ${v.nodes.length}: ${v.nodes[0].target.join(' ')} ${v.nodes[0].failureSummary.replace(/\\s+/g, ' ').slice(0, 240)}`)))\
          .catch(e => done(['axe failed: ' + e]));";
    let found = client.execute_async(script, vec![]).await.expect("axe-core runs");
    found.as_array().map(|a| a.iter().map(|v| v.as_str().unwrap_or_default().to_string()).collect()).unwrap_or_default()
}
