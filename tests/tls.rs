//! TLS to a real broker (issue 30): a RabbitMQ node with TLS listeners for management,
//! Prometheus and AMQPS (`.ci/tls.sh`), its own CA and certificates, mutual TLS required on
//! AMQPS and Prometheus. Polling, dead-letter moves and custody over TLS; and each failure
//! reported as what it is, in words that name the setting to change.

mod common;

use std::io::Read;
use std::sync::Arc;
use std::time::Duration;

use common::dead_letters::{dead_letter, drain_ids, numbered};
use common::tls::TlsBroker;
use common::{declare, encode, publish, wait_for, TestVhost, Warren};
use lapin::BasicProperties;
use serde_json::json;

const PATIENCE: Duration = Duration::from_secs(30);

/// The broker's poll error as the API gives it (`GET /api/v1/brokers`), once there is one.
async fn poll_error(warren: &Warren) -> String {
    wait_for("a failed poll", PATIENCE, || async {
        let (_, brokers) = warren.get_json("/api/v1/brokers").await;
        match brokers[0]["status"]["error"].as_str() {
            Some(error) => Ok(error.to_string()),
            None => Err(brokers.to_string()),
        }
    })
    .await
}

/// Why the Prometheus endpoint is not used (`GET /api/v1/brokers/local`), once it was tried and failed.
async fn prometheus_reason(warren: &Warren) -> String {
    wait_for("the Prometheus endpoint to be found unavailable", PATIENCE, || async {
        let (_, broker) = warren.get_json("/api/v1/brokers/local").await;
        if broker["prometheus"]["available"] == false {
            Ok(broker["prometheus"]["reason"].as_str().unwrap_or_default().to_string())
        } else {
            Err(broker["prometheus"].to_string())
        }
    })
    .await
}

/// The broker page, as an operator reads it (HTML, quotes escaped).
async fn broker_page(warren: &Warren) -> String {
    let (status, page) = warren.get_text("/brokers/local").await;
    assert_eq!(status, 200);
    page.replace("&#34;", "\"").replace("&quot;", "\"").replace("&#39;", "'")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn polling_over_https_reads_the_queues_from_management_and_prometheus_with_the_ca_file() {
    let node = TlsBroker::get();
    let vhost = TestVhost::create_on(node.plain.clone(), "tls-poll").await;
    let connection = vhost.connect().await;
    let channel = vhost.channel(&connection).await;
    declare(&channel, "orders", false).await;
    publish(&channel, "orders", 3, BasicProperties::default()).await;

    // The URLs say 127.0.0.1; the management endpoint is checked against "localhost" instead
    // (the certificate carries both): the per-endpoint override and the name check it uses.
    let tls = format!("{}[brokers.tls.management]\nserver_name = \"localhost\"\n", node.trusted_with_client_cert());
    let warren = Warren::start(&node.broker_toml(&vhost.name, &tls)).await;
    let queue = wait_for("orders with 3 ready, polled over https", PATIENCE, || async {
        let q = warren.queue(&vhost.name, "orders").await.ok_or("not listed")?;
        if q["ready"] == 3 {
            Ok(q)
        } else {
            Err(q.to_string())
        }
    })
    .await;
    assert_eq!(queue["unacked"], 0, "{queue}");
    // The Prometheus endpoint (mutual TLS required) answered: the scrape serves depth.
    let prometheus = wait_for("the Prometheus endpoint in use over https", PATIENCE, || async {
        let (_, broker) = warren.get_json("/api/v1/brokers/local").await;
        if broker["prometheus"]["available"] == true {
            Ok(broker["prometheus"].clone())
        } else {
            Err(broker["prometheus"].to_string())
        }
    })
    .await;
    assert!(prometheus["url"].as_str().unwrap_or_default().starts_with("https://"), "{prometheus}");
    let (_, brokers) = warren.get_json("/api/v1/brokers").await;
    assert_eq!(brokers[0]["status"]["up"], true, "{brokers}");
    assert!(brokers[0]["status"]["error"].is_null(), "{brokers}");
    // The node the test meant: 3.10.8 on the host, or 4.3.6.
    let version = brokers[0]["status"]["rabbitmq_version"].as_str().unwrap_or_default();
    assert!(version.starts_with(&format!("{}.", node.target)), "{} node answers as {version}", node.target);
    warren.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_letters_are_snapshotted_and_requeued_over_amqps_with_a_client_certificate() {
    let node = TlsBroker::get();
    let vhost = TestVhost::create_on(node.plain.clone(), "tls-move").await;
    let connection = vhost.connect().await;
    let channel = vhost.channel(&connection).await;
    dead_letter(&vhost, &channel, "work.dlq", false, numbered(5)).await;

    let warren = Warren::start(&node.broker_toml(&vhost.name, &node.trusted_with_client_cert())).await;
    wait_for("work.dlq listed", PATIENCE, || async {
        warren.queue(&vhost.name, "work.dlq").await.map(|_| ()).ok_or_else(|| "not yet".to_string())
    })
    .await;
    let snapshot = warren.snapshot(&vhost.name, "work.dlq", 10).await;
    assert_eq!(snapshot["messages"].as_array().map(Vec::len), Some(5), "{snapshot}");

    let path = format!("/api/v1/queues/local/{}/work.dlq/requeue", encode(&vhost.name));
    let job = warren.run_move(&path, json!({"selection": {"positions": [2]}})).await;
    assert_eq!(job["state"], "done", "{job}");
    assert_eq!(job["report"]["moved"], json!([{"position": 2, "message_id": "m2", "to_queue": "work"}]));
    assert_eq!(drain_ids(&channel, "work").await, ["m2"]);
    assert_eq!(drain_ids(&channel, "work.dlq").await, ["m1", "m3", "m4", "m5"]);
    warren.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn custody_takes_dead_letters_in_over_amqps() {
    let node = TlsBroker::get();
    let vhost = TestVhost::create_on(node.plain.clone(), "tls-custody").await;
    let connection = vhost.connect().await;
    let channel = vhost.channel(&connection).await;
    dead_letter(&vhost, &channel, "work.dlq", false, numbered(4)).await;

    let toml =
        format!("{}[[custody]]\nqueue = \"*.dlq\"\n", node.broker_toml(&vhost.name, &node.trusted_with_client_cert()));
    let warren = Warren::start(&toml).await;
    wait_for("every dead letter in custody", Duration::from_secs(60), || async {
        let q = warren.queue(&vhost.name, "work.dlq").await.ok_or("not listed")?;
        if q["custody_held"] == 4 && q["ready"] == 0 && q["total"] == 4 {
            Ok(())
        } else {
            Err(q.to_string())
        }
    })
    .await;
    warren.stop().await;
}

/// Without `ca_file` the test CA is unknown: every poll fails, and says to set `ca_file`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_certificate_from_a_private_ca_without_ca_file_is_an_unknown_issuer() {
    let node = TlsBroker::get();
    let vhost = TestVhost::create_on(node.plain.clone(), "tls-issuer").await;
    let warren = Warren::start(&node.broker_toml(&vhost.name, "")).await;
    let error = poll_error(&warren).await;
    assert!(error.contains("unknown issuer") && error.contains("tls.ca_file"), "{error}");
    assert!(error.contains(&node.management), "names the URL: {error}");
    let page = broker_page(&warren).await;
    assert!(page.contains("unknown issuer") && page.contains("tls.ca_file"), "{page}");

    // A CA file with another CA in it: still unknown, and the file is named.
    let other = format!("[brokers.tls]\nca_file = {}\n", node.file("other-ca.pem"));
    let warren2 = Warren::start(&node.broker_toml(&vhost.name, &other)).await;
    let error = poll_error(&warren2).await;
    assert!(error.contains("unknown issuer") && error.contains("other-ca.pem"), "{error}");
    warren.stop().await;
    warren2.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_name_the_certificate_does_not_carry_is_a_wrong_name() {
    let node = TlsBroker::get();
    let vhost = TestVhost::create_on(node.plain.clone(), "tls-name").await;
    let tls = format!("{}server_name = \"rabbit.example.com\"\n", node.trusted_with_client_cert());
    let warren = Warren::start(&node.broker_toml(&vhost.name, &tls)).await;
    let error = poll_error(&warren).await;
    for said in ["wrong name", "is for localhost, 127.0.0.1,", "rabbit.example.com", "tls.server_name"] {
        assert!(error.contains(said), "{said:?} in {error}");
    }
    let page = broker_page(&warren).await;
    assert!(page.contains("wrong name") && page.contains("tls.server_name"), "{page}");
    warren.stop().await;
}

/// AMQPS and Prometheus require a client certificate: without one, each says so; with one from
/// a CA the broker does not trust, each says it was refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_that_requires_a_client_certificate_says_so_and_refuses_an_untrusted_one() {
    let node = TlsBroker::get();
    let vhost = TestVhost::create_on(node.plain.clone(), "tls-client").await;
    let connection = vhost.connect().await;
    let channel = vhost.channel(&connection).await;
    dead_letter(&vhost, &channel, "work.dlq", false, numbered(2)).await;
    let snapshot_path = format!("/api/v1/queues/local/{}/work.dlq/snapshot", encode(&vhost.name));

    let ca_only = format!("[brokers.tls]\nca_file = {}\n", node.file("ca.pem"));
    let warren = Warren::start(&node.broker_toml(&vhost.name, &ca_only)).await;
    // The management API asks for no client certificate: polling works.
    wait_for("work.dlq listed", PATIENCE, || async {
        warren.queue(&vhost.name, "work.dlq").await.map(|_| ()).ok_or_else(|| "not yet".to_string())
    })
    .await;
    let reason = prometheus_reason(&warren).await;
    assert!(reason.contains("client certificate required") && reason.contains("tls.client_cert_file"), "{reason}");
    assert!(broker_page(&warren).await.contains("client certificate required"));
    let (status, answer) = warren.post_json(&snapshot_path, json!({"confirm": "true", "count": 10})).await;
    let said = answer.to_string();
    assert!(status >= 400 && said.contains("client certificate required"), "{status} {said}");
    warren.stop().await;

    let untrusted = format!(
        "[brokers.tls]\nca_file = {}\nclient_cert_file = {}\nclient_key_file = {}\n",
        node.file("ca.pem"),
        node.file("other-client.pem"),
        node.file("other-client.key")
    );
    let warren = Warren::start(&node.broker_toml(&vhost.name, &untrusted)).await;
    let reason = prometheus_reason(&warren).await;
    assert!(reason.contains("client certificate refused") && reason.contains("other-client.pem"), "{reason}");
    let (status, answer) = warren.post_json(&snapshot_path, json!({"confirm": "true", "count": 10})).await;
    let said = answer.to_string();
    assert!(status >= 400 && said.contains("client certificate refused"), "{status} {said}");
    warren.stop().await;
    drop(channel);
}

/// A listener of the test's own serving `.ci/tls.sh`'s expired certificate (from the test CA,
/// valid 2020-01-01 to 2020-01-02): the poll error gives the date.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_broker_certificate_is_named_with_its_date() {
    let node = TlsBroker::get();
    let port = serve_tls(&node.certs.join("expired.pem"), &node.certs.join("expired.key"));
    let toml = format!(
        "[[brokers]]\nname = \"local\"\nmanagement_url = \"https://127.0.0.1:{port}\"\nprometheus_url = \"off\"\n\
         poll_interval_secs = 1\n[brokers.tls]\nca_file = {}\n",
        node.file("ca.pem")
    );
    let warren = Warren::start(&toml).await;
    let error = poll_error(&warren).await;
    assert!(error.contains("expired on 2020-01-02 00:00:00 UTC") && error.contains("renew"), "{error}");
    warren.stop().await;
}

/// Invalid TLS settings stop the start with the setting, the file and what is wrong.
#[tokio::test]
async fn tls_settings_are_checked_when_the_configuration_is_read() {
    let node = TlsBroker::get();
    let dir = tempfile::tempdir().unwrap();
    let not_pem = dir.path().join("notes.txt");
    std::fs::write(&not_pem, "this is not a certificate\n").unwrap();
    let not_pem = format!("{:?}", not_pem.display().to_string());
    let broker = "[[brokers]]\nname = \"b\"\nmanagement_url = \"https://127.0.0.1:1\"\n";
    let cases: Vec<(String, Vec<&str>)> = vec![
        (
            "[brokers.tls]\nca_file = \"/nonexistent/ca.pem\"\n".into(),
            vec!["brokers[0].tls.ca_file", "cannot read /nonexistent/ca.pem"],
        ),
        (
            format!("[brokers.tls]\nca_file = {not_pem}\n"),
            vec!["brokers[0].tls.ca_file", "notes.txt", "not a PEM file"],
        ),
        (
            format!("[brokers.tls.amqp]\nca_file = {}\n", node.file("client.key")),
            vec!["brokers[0].tls.amqp.ca_file", "client.key", "not a PEM file"],
        ),
        (
            format!(
                "[brokers.tls]\nclient_cert_file = {}\nclient_key_file = {}\n",
                node.file("client.pem"),
                node.file("server.key")
            ),
            vec!["brokers[0].tls.client_key_file", "server.key", "does not match", "client.pem"],
        ),
        (
            format!("[brokers.tls]\nclient_key_file = {not_pem}\nclient_cert_file = {}\n", node.file("client.pem")),
            vec!["brokers[0].tls.client_key_file", "not a PEM private key"],
        ),
        (
            format!("[brokers.tls]\nclient_cert_file = {}\n", node.file("client.pem")),
            vec!["brokers[0].tls.client_cert_file", "without client_key_file"],
        ),
        ("[brokers.tls]\nserver_name = \"not a name\"\n".into(), vec!["brokers[0].tls.server_name"]),
        ("[brokers.tls]\ncafile = \"x\"\n".into(), vec!["cafile"]),
        ("[brokers.tls.management]\nverify = false\n".into(), vec!["verify"]),
    ];
    for (tls, expected) in cases {
        let error = match warren::config::Config::from_toml(&format!("{broker}{tls}")) {
            Ok(_) => panic!("accepted: {tls}"),
            Err(e) => e.to_string(),
        };
        for said in expected {
            assert!(error.contains(said), "{said:?} in {error:?} for {tls}");
        }
    }

    // `check-config` prints the settings back, and they read back the same.
    let tls = format!(
        "[brokers.tls]\nca_file = {}\n[brokers.tls.amqp]\nclient_cert_file = {}\nclient_key_file = {}\nserver_name = \"localhost\"\n",
        node.file("ca.pem"),
        node.file("client.pem"),
        node.file("client.key")
    );
    let config = warren::config::Config::from_toml(&format!("{broker}{tls}")).expect("valid");
    assert_eq!(
        config.brokers[0].tls.amqp.settings.client_cert_file.as_ref().map(|s| s.key.as_str()),
        Some("tls.amqp.client_cert_file")
    );
    assert!(config.brokers[0].tls.management.settings.client_cert_file.is_none());
    let printed = config.to_toml();
    let again = warren::config::Config::from_toml(&printed).unwrap_or_else(|e| panic!("{e}\n{printed}"));
    assert_eq!(again.brokers[0].tls.file, config.brokers[0].tls.file, "{printed}");
}

/// Serves TLS with `cert` and `key` on a local port until the test process ends: each
/// connection's handshake, and nothing after it.
fn serve_tls(cert: &std::path::Path, key: &std::path::Path) -> u16 {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let chain: Vec<CertificateDer<'static>> =
        CertificateDer::pem_file_iter(cert).expect("the certificate file").map(|c| c.expect("PEM")).collect();
    let key = PrivateKeyDer::from_pem_file(key).expect("the key file");
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .expect("a server configuration");
    let config = Arc::new(config);
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let config = config.clone();
            std::thread::spawn(move || {
                let Ok(connection) = rustls::ServerConnection::new(config) else { return };
                let mut tls = rustls::StreamOwned::new(connection, stream);
                // The client refuses the certificate during the handshake, which ends the read.
                let mut buffer = [0u8; 1024];
                while matches!(tls.read(&mut buffer), Ok(n) if n > 0) {}
            });
        }
    });
    port
}
