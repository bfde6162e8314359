//! The broker the integration tests run against, chosen by the environment so the same suite
//! runs against the host's 3.10.8, the 4.0.5 and 4.3.6 nodes `.ci/rabbitmq4.sh` starts, or
//! anyone's own broker:
//!
//! - `WARREN_TEST_BROKER`: a known target, `3.10` (the default: 127.0.0.1 on 5672 / 15672 /
//!   15692), `4.0` (5673 / 15673 / 15693), `4.0-nostats` (5674 / 15674 / 15694, the node with
//!   `management_agent.disable_metrics_collector = true`), `4.3` (5675 / 15675 / 15695) or
//!   `4.3-nostats` (5676 / 15676 / 15696).
//! - `WARREN_TEST_AMQP_URL`, `WARREN_TEST_MANAGEMENT_URL`, `WARREN_TEST_PROMETHEUS_URL`: each
//!   replaces one endpoint of the target. Given only a management URL, AMQP and Prometheus
//!   default to its host on 5672 and 15692, as warren's own configuration does.
//!
//! URLs carry no credentials: the tests log in as `guest` / `guest`, which must be an
//! administrator reachable from here (tests create vhosts, users, policies and shovels).

use std::sync::LazyLock;

/// Where the test broker listens. URLs have no trailing slash and no credentials.
#[derive(Debug, Clone)]
pub struct TestBroker {
    /// `3.10`, `4.0`, `4.0-nostats`, `4.3`, `4.3-nostats`, or `custom` when only explicit URLs
    /// were given.
    pub target: String,
    /// Management HTTP API, e.g. `http://127.0.0.1:15672`.
    pub management: String,
    /// AMQP listener, e.g. `amqp://127.0.0.1:5672` (warren's `amqp_url`).
    pub amqp: String,
    /// Prometheus plugin, e.g. `http://127.0.0.1:15692`.
    pub prometheus: String,
}

/// The broker under test, read from the environment once. A bad setting fails every test with
/// the same message (kept as an error, so the lock is never poisoned and later tests still say why).
pub fn broker() -> &'static TestBroker {
    static BROKER: LazyLock<Result<TestBroker, String>> = LazyLock::new(TestBroker::from_env);
    BROKER.as_ref().unwrap_or_else(|e| panic!("{e}"))
}

/// (name, AMQP port, management port, Prometheus port), all on 127.0.0.1.
const TARGETS: [(&str, u16, u16, u16); 5] = [
    ("3.10", 5672, 15672, 15692),
    ("4.0", 5673, 15673, 15693),
    ("4.0-nostats", 5674, 15674, 15694),
    ("4.3", 5675, 15675, 15695),
    ("4.3-nostats", 5676, 15676, 15696),
];

impl TestBroker {
    fn from_env() -> Result<TestBroker, String> {
        let env = |key: &str| std::env::var(key).ok().filter(|v| !v.is_empty());
        let management =
            env("WARREN_TEST_MANAGEMENT_URL").map(|url| checked_url("WARREN_TEST_MANAGEMENT_URL", &url)).transpose()?;
        let mut broker = match (env("WARREN_TEST_BROKER"), management) {
            (Some(name), management) => {
                let known = TestBroker::known(&name)?;
                TestBroker { management: management.unwrap_or(known.management.clone()), ..known }
            }
            // Only a management URL: the rest on its host, like warren's own defaults.
            (None, Some(management)) => {
                let host = url_host(&management);
                TestBroker {
                    target: "custom".to_string(),
                    amqp: format!("amqp://{host}:5672"),
                    prometheus: format!("http://{host}:15692"),
                    management,
                }
            }
            (None, None) => TestBroker::known("3.10")?,
        };
        if let Some(url) = env("WARREN_TEST_AMQP_URL") {
            broker.amqp = checked_url("WARREN_TEST_AMQP_URL", &url)?;
        }
        if let Some(url) = env("WARREN_TEST_PROMETHEUS_URL") {
            broker.prometheus = checked_url("WARREN_TEST_PROMETHEUS_URL", &url)?;
        }
        Ok(broker)
    }

    fn known(name: &str) -> Result<TestBroker, String> {
        let Some(&(target, amqp, management, prometheus)) = TARGETS.iter().find(|t| t.0 == name) else {
            let names: Vec<&str> = TARGETS.iter().map(|t| t.0).collect();
            return Err(format!("WARREN_TEST_BROKER={name:?} is not one of {names:?} (or set WARREN_TEST_*_URL)"));
        };
        Ok(TestBroker {
            target: target.to_string(),
            management: format!("http://127.0.0.1:{management}"),
            amqp: format!("amqp://127.0.0.1:{amqp}"),
            prometheus: format!("http://127.0.0.1:{prometheus}"),
        })
    }

    /// The AMQP URL with the guest credentials, for the tests' own clients.
    pub fn amqp_with_guest(&self) -> String {
        self.amqp.replacen("://", "://guest:guest@", 1)
    }

    /// `host:port` of the AMQP listener, for the test that writes AMQP frames itself.
    pub fn amqp_addr(&self) -> String {
        let url = reqwest::Url::parse(&self.amqp).expect("checked when read");
        format!("{}:{}", url_host(&self.amqp), url.port().unwrap_or(5672))
    }

    /// The `management_url`, `amqp_url` and `prometheus_url` lines of a `[[brokers]]` table that
    /// watches this broker.
    pub fn toml(&self) -> String {
        format!(
            "management_url = {:?}\namqp_url = {:?}\nprometheus_url = {:?}\n",
            self.management, self.amqp, self.prometheus
        )
    }
}

/// What the broker under test is, from its overview.
#[derive(Debug, Clone, Copy)]
pub struct BrokerFacts {
    /// The major version (3 or 4).
    pub major: u32,
    /// The minor version (10 of 3.10.8).
    pub minor: u32,
    /// Message stats collected (not so with `management_agent.disable_metrics_collector`).
    pub stats: bool,
}

impl TestBroker {
    /// Asks the broker's overview what it is (cheap; asked each time so a test never trusts a
    /// stale answer).
    pub async fn facts(&self) -> BrokerFacts {
        let overview: serde_json::Value = reqwest::Client::new()
            .get(format!("{}/api/overview", self.management))
            .basic_auth("guest", Some("guest"))
            .send()
            .await
            .and_then(|r| r.error_for_status())
            .expect("the test broker's overview")
            .json()
            .await
            .expect("the overview is JSON");
        let version = overview["rabbitmq_version"].as_str().expect("the overview names the version");
        let mut parts = version.split('.').map(|n| n.parse::<u32>().ok());
        let major = parts.next().flatten().expect("a numeric major version");
        let minor = parts.next().flatten().expect("a numeric minor version");
        let stats = overview["disable_stats"] != true && !overview["message_stats"].is_null();
        BrokerFacts { major, minor, stats }
    }
}

impl BrokerFacts {
    /// Whether a quorum queue counts a message given back with `basic.nack` (how warren gives
    /// back what it read) toward its delivery limit: before 4.3 it does, from 4.3 on only failed
    /// deliveries count (DOMAIN.md §10).
    pub fn hand_backs_count(&self) -> bool {
        (self.major, self.minor) < (4, 3)
    }
}

/// `url` without a trailing slash; refuses what does not parse and credentials (warren's config
/// takes them apart), naming the variable.
fn checked_url(variable: &str, url: &str) -> Result<String, String> {
    let parsed = reqwest::Url::parse(url).map_err(|e| format!("{variable}={url:?} is not a URL: {e}"))?;
    if parsed.host_str().is_none() {
        return Err(format!("{variable}={url:?} has no host"));
    }
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Err(format!("{variable} must not carry credentials: the tests log in as guest/guest"));
    }
    Ok(url.trim_end_matches('/').to_string())
}

/// The host of a checked URL (an IPv6 address in brackets).
fn url_host(url: &str) -> String {
    reqwest::Url::parse(url).expect("checked when read").host_str().expect("checked when read").to_string()
}
