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
