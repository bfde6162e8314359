//! The TLS brokers `.ci/tls.sh` runs and the certificates it makes, for tests/tls.rs.
//!
//! - `WARREN_TEST_TLS_BROKER`: `3.10` (a second node of the host's RabbitMQ 3.10.8,
//!   `rabbittls@localhost`) or `4.3` (the 4.3.6 node `rabbit43tls@localhost` of
//!   `.ci/rabbitmq4.sh`). Unset, it follows `WARREN_TEST_BROKER`: `4.3` when that names a 4.3
//!   target, `3.10` otherwise.
//! - `WARREN_TLS_DIR`: the certificates (default `~/.cache/warren-tls`, as the script).
//!
//! Each node has TLS listeners (AMQPS and Prometheus with mutual TLS required, management with
//! the server certificate only) and plain ones, which only the tests' own set-up uses (vhosts,
//! messages); warren is given the TLS ones. A node that does not run is started with the
//! script (as root, ~15 s); one that cannot be started fails the test with the script's
//! reason, never skips it.

use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

use super::broker::TestBroker;

/// One TLS node. URLs have no trailing slash and no credentials (guest/guest).
#[derive(Debug, Clone)]
pub struct TlsBroker {
    /// `3.10` or `4.3`.
    pub target: String,
    /// `amqps://127.0.0.1:5687`: mutual TLS required.
    pub amqps: String,
    /// `https://127.0.0.1:15687`: server certificate only.
    pub management: String,
    /// `https://127.0.0.1:15707`: mutual TLS required.
    pub prometheus: String,
    /// The node's plain listeners, for the tests' own set-up (`TestVhost::create_on`).
    pub plain: TestBroker,
    /// Where `.ci/tls.sh` keeps the CA and certificates.
    pub certs: PathBuf,
}

impl TlsBroker {
    /// The TLS node, started if it does not run.
    pub fn get() -> &'static TlsBroker {
        static NODE: OnceLock<Result<TlsBroker, String>> = OnceLock::new();
        NODE.get_or_init(TlsBroker::start).as_ref().unwrap_or_else(|e| panic!("{e}"))
    }

    fn start() -> Result<TlsBroker, String> {
        let env = |key: &str| std::env::var(key).ok().filter(|v| !v.is_empty());
        let target = match env("WARREN_TEST_TLS_BROKER") {
            Some(t) => t,
            None if env("WARREN_TEST_BROKER").is_some_and(|b| b.starts_with("4.3")) => "4.3".to_string(),
            None => "3.10".to_string(),
        };
        // (AMQP, management, Prometheus) plain; each TLS port is 10 above.
        let (amqp, management, prometheus) = match target.as_str() {
            "3.10" => (5677, 15677, 15697),
            "4.3" => (5678, 15678, 15698),
            other => return Err(format!("WARREN_TEST_TLS_BROKER={other:?} is not 3.10 or 4.3")),
        };
        let certs = match env("WARREN_TLS_DIR") {
            Some(dir) => PathBuf::from(dir),
            None => PathBuf::from(env("HOME").unwrap_or_else(|| "/root".into())).join(".cache/warren-tls"),
        };
        let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(".ci/tls.sh");
        // Idempotent: a running node is left alone (a second or so), a missing one started.
        let output = Command::new(&script)
            .arg("start")
            .env("TLS_NODES", &target)
            .env("WARREN_TLS_DIR", &certs)
            .output()
            .map_err(|e| format!("could not run {}: {e}", script.display()))?;
        if !output.status.success() {
            return Err(format!(
                "the TLS test node {target} did not start ({} start): {}{}",
                script.display(),
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            ));
        }
        Ok(TlsBroker {
            amqps: format!("amqps://127.0.0.1:{}", amqp + 10),
            management: format!("https://127.0.0.1:{}", management + 10),
            prometheus: format!("https://127.0.0.1:{}", prometheus + 10),
            plain: TestBroker {
                target: format!("{target}-tls (plain listeners)"),
                management: format!("http://127.0.0.1:{management}"),
                amqp: format!("amqp://127.0.0.1:{amqp}"),
                prometheus: format!("http://127.0.0.1:{prometheus}"),
            },
            target,
            certs,
        })
    }

    /// A file of `.ci/tls.sh`'s (`ca.pem`, `client.key`, ...), as a TOML string.
    pub fn file(&self, name: &str) -> String {
        format!("{:?}", self.certs.join(name).display().to_string())
    }

    /// A `[[brokers]]` table named `local` watching `vhost` on this node over TLS, polled every
    /// second, followed by `tls` (lines of its `[brokers.tls]` table and sub-tables, verbatim).
    pub fn broker_toml(&self, vhost: &str, tls: &str) -> String {
        format!(
            "[[brokers]]\nname = \"local\"\nmanagement_url = {:?}\namqp_url = {:?}\nprometheus_url = {:?}\n\
             vhosts_include = [{vhost:?}]\npoll_interval_secs = 1\n{tls}",
            self.management, self.amqps, self.prometheus
        )
    }

    /// The `[brokers.tls]` table that trusts the test CA and presents warren's client certificate.
    pub fn trusted_with_client_cert(&self) -> String {
        format!(
            "[brokers.tls]\nca_file = {}\nclient_cert_file = {}\nclient_key_file = {}\n",
            self.file("ca.pem"),
            self.file("client.pem"),
            self.file("client.key")
        )
    }
}
