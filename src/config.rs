//! warren's one typed configuration: defaults, then the TOML file, then environment, then flags.
//!
//! Every field, variable and secret form is documented in docs/configuration.md (tests/docs.rs
//! checks that it names every field). The file and the environment are merged in `sources` before the typed
//! structs are read. An invalid configuration is reported as one line naming the field and the
//! problem, and the process exits non-zero.

use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

mod sources;
pub mod tls;
pub use sources::{Environment, Source, Sources};

/// The whole configuration, loaded once at start and passed in explicitly.
#[derive(Debug, Clone)]
pub struct Config {
    /// Address the web server listens on.
    pub listen: SocketAddr,
    /// SQLite database file; created if missing. Unused when `database_url` names PostgreSQL.
    pub database: PathBuf,
    /// PostgreSQL's URL (`postgres://...`), a database several replicas can share; `None`: the
    /// SQLite file at `database`. A secret: it holds the password.
    pub database_url: Option<Secret>,
    /// Where people reach warren (behind a proxy, say): notifications link back to the alert's
    /// page with it, and its path is the prefix of every URL warren writes (`base_path`).
    /// `None`: notifications carry no link.
    pub public_url: Option<reqwest::Url>,
    /// How long history is kept at all: 1-hour roll-ups (and alert history, notification
    /// deliveries) older than this are deleted.
    pub retention: Duration,
    /// How long raw samples (every poll's changes) are kept; they also feed the FIFO age estimate.
    pub raw_retention: Duration,
    /// How long 1-minute roll-ups are kept.
    pub minute_retention: Duration,
    /// The brokers to watch, each polled by its own loop.
    pub brokers: Vec<BrokerConfig>,
    /// Alert rules declared in the file (`[[alerts]]`), read-only in the UI and the API: as the
    /// file gives them, for the alerts wing to read into its rules (`alerts::Rule::from_config`).
    pub alerts: Vec<toml::Table>,
    /// How often a firing alert is notified again; `None`: never.
    pub alert_repeat: Option<Duration>,
    /// How long a replica's lease on a piece of work lasts without renewal (`replicas`): the
    /// longest a dead replica's brokers go unpolled before another replica takes them.
    pub lease_time: Duration,
    /// Where alert notifications go (`[[notifications]]`), with each secret read from where the
    /// file or the environment names it: for the alerts wing to read into its channels
    /// (`alerts::notify::NotificationChannel::from_config`).
    pub notifications: Vec<toml::Table>,
    /// Logins, sessions and the trusted proxy (`[auth]`).
    pub auth: AuthConfig,
    /// The dead-letter queues whose messages warren takes into its own database (`[[custody]]`).
    pub custody: Vec<CustodyRule>,
}

/// Which queues warren keeps the dead letters of itself (`[[custody]]`): intake consumes them
/// into its database, where they are read, filtered and replayed without touching the broker.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CustodyRule {
    /// Broker name, vhost and queue name patterns (`*` and `?`).
    #[serde(default = "any")]
    pub broker: String,
    #[serde(default = "any")]
    pub vhost: String,
    pub queue: String,
    /// Payload and header bytes kept for the queues this rule matches, each; intake stops (the
    /// messages stay in the broker) once reached.
    #[serde(default = "default_custody_bytes")]
    pub max_bytes: u64,
    /// The least role that reads the payloads, headers and errors of the queues this rule
    /// matches, in custody and in the broker's snapshots (the pages, the export, downloads,
    /// replays, and the filters that search them); everyone who reads the DLQ page sees the
    /// list with ids, reasons and queues (`web::restricted`).
    #[serde(default)]
    pub payloads: PayloadRole,
    /// Admins may change one record's body or headers and replay it as a new copy (the
    /// original is kept, the diff goes to the audit log). Off unless set.
    #[serde(default)]
    pub edit: bool,
}

/// Who may read dead letters' payloads and headers in custody (`CustodyRule::payloads`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PayloadRole {
    #[default]
    Viewer,
    Operator,
    Admin,
}

impl PayloadRole {
    pub fn as_str(self) -> &'static str {
        match self {
            PayloadRole::Viewer => "viewer",
            PayloadRole::Operator => "operator",
            PayloadRole::Admin => "admin",
        }
    }
}

fn any() -> String {
    "*".to_string()
}

/// 1 GiB per queue: a hundred thousand 10 KiB dead letters.
pub const DEFAULT_CUSTODY_BYTES: u64 = 1 << 30;

fn default_custody_bytes() -> u64 {
    DEFAULT_CUSTODY_BYTES
}

impl CustodyRule {
    pub fn matches(&self, broker: &str, vhost: &str, queue: &str) -> bool {
        glob_match(&self.broker, broker) && glob_match(&self.vhost, vhost) && glob_match(&self.queue, queue)
    }
}

/// How people and scripts prove who they are (`[auth]`). Local users live in the database
/// (`warren user add`); this holds what the file decides.
#[derive(Debug, Clone)]
pub struct AuthConfig {
    /// A session ends this long after login, whatever happens.
    pub session_ttl: Duration,
    /// A session ends after this long without a request.
    pub session_idle: Duration,
    /// `Secure` on the session cookie: `None` decides per request (set when the request came over
    /// TLS, as a TLS-terminating proxy says in `X-Forwarded-Proto`).
    pub secure_cookie: Option<bool>,
    /// A trusted reverse proxy's user header (`[auth.proxy]`), as an alternative to local logins.
    pub proxy: Option<ProxyConfig>,
}

/// `[auth.proxy]` as the file gives it. The auth wing reads it into its own `ProxyAuth`
/// (header names, networks and the role checked) where warren starts: `warren::Wings`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProxyConfig {
    /// e.g. `X-Forwarded-User` (oauth2-proxy), `Remote-User`.
    pub header: String,
    pub role_header: Option<String>,
    /// `viewer` when absent.
    pub default_role: Option<String>,
    /// The proxy's addresses or networks (`10.0.0.5`, `10.0.0.0/24`).
    pub trusted: Vec<String>,
}

/// A session's absolute lifetime.
pub const DEFAULT_SESSION_TTL: Duration = Duration::from_secs(12 * 3600);
/// A session ends after this long without a request.
pub const DEFAULT_SESSION_IDLE: Duration = Duration::from_secs(2 * 3600);

impl Default for AuthConfig {
    fn default() -> Self {
        AuthConfig {
            session_ttl: DEFAULT_SESSION_TTL,
            session_idle: DEFAULT_SESSION_IDLE,
            secure_cookie: None,
            proxy: None,
        }
    }
}

/// One RabbitMQ broker (or cluster) to watch.
#[derive(Debug, Clone)]
pub struct BrokerConfig {
    /// Short name used in URLs and the UI; unique.
    pub name: String,
    /// Base URL of the management HTTP API, e.g. `http://127.0.0.1:15672`: the first of
    /// `management_urls`, the one asked first.
    pub management_url: reqwest::Url,
    /// Every management listener warren may ask, in order (`management_url` first, then those
    /// of `management_urls` not already named): in a cluster each node serves the whole
    /// cluster's API, so when the one that answered last does not answer (stopped, booting, in
    /// a partition), the same request goes to the next (`ManagementClient`). Never empty.
    pub management_urls: Vec<reqwest::Url>,
    pub user: String,
    pub password: Secret,
    /// AMQP URL (without credentials; `user`/`password` are used) for message actions.
    pub amqp_url: String,
    /// Glob patterns (`*`, `?`) of vhosts to watch; empty means all.
    pub vhosts_include: Vec<String>,
    /// Glob patterns of vhosts to skip; applied after `vhosts_include`.
    pub vhosts_exclude: Vec<String>,
    /// Time between two polls when the broker is healthy.
    pub poll_interval: Duration,
    /// Limit for one HTTP request to the management API.
    pub request_timeout: Duration,
    /// The broker's Prometheus plugin (`/metrics/detailed`), the cheap source of depth, consumers
    /// and head timestamps; `None` (`prometheus_url = "off"`) uses the management API only.
    /// Default: the management host, plain HTTP, port 15692.
    pub prometheus_url: Option<reqwest::Url>,
    /// Share of one broker core warren may spend on being watched (0.05 = 5%): the per-queue
    /// message stats listing, the broker's most expensive call, is spaced so that its estimated
    /// cost per second stays within what is left of this after the cheap calls.
    pub broker_cpu_budget: f64,
    /// Shortest interval of the message stats listing when the Prometheus source serves depth
    /// (default one poll interval: a small broker's listing is cheap and its rates then stay as fresh as
    /// before; the budget spaces a large one).
    pub stats_min_interval: Duration,
    /// Rates should be at least this fresh; when the budget forbids it, the broker page says so.
    pub stats_max_interval: Duration,
    /// The longest wait before an unavailable Prometheus endpoint is tried again (failed
    /// scrapes back off from one poll up to this).
    pub source_recheck: Duration,
    /// Also scrape `queue_metrics` for head timestamps every poll (about 4x the broker cost of
    /// the depth scrape); without it they come from the stats listing (see `poller`).
    pub prometheus_head_timestamps: bool,
    /// How long a consumer may hold unacked messages, with none ready and no ack, before it
    /// counts as hung: a consumer holding scheduled (ETA, delayed) messages does that by design.
    pub scheduled_hold_limit: Duration,
    /// How far back the advisor compares a dead-letter queue's depth to call it growing
    /// (`dlq-without-owner-or-retention`: "growth over days").
    pub dlq_growth_window: Duration,
    /// TLS of each endpoint (`[brokers.tls]`): the CA file added to the public web CAs, the
    /// client certificate and the name checked; read and checked when the configuration loads.
    pub tls: crate::config::tls::BrokerTls,
}

impl BrokerConfig {
    /// Whether a vhost is watched, by the include and exclude patterns.
    pub fn watches_vhost(&self, vhost: &str) -> bool {
        let included = self.vhosts_include.is_empty() || self.vhosts_include.iter().any(|p| glob_match(p, vhost));
        included && !self.vhosts_exclude.iter().any(|p| glob_match(p, vhost))
    }
}

/// A password or token: never printed by `Debug` or `Display`, so it cannot leak into logs.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Self {
        Secret(value.into())
    }
    /// The real value, for the one place that sends it to the broker.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("\"***\"")
    }
}

/// An invalid configuration: which field, and what is wrong with it.
#[derive(Debug, thiserror::Error)]
#[error("invalid configuration: {field}: {problem}")]
pub struct ConfigError {
    pub field: String,
    pub problem: String,
}

/// One entry of a list the file gives as plain tables (`[[alerts]]`, `[[notifications]]`), read
/// by the wing that owns it into its own type: errors name the field under `list[index]`, as
/// every configuration error names its field.
pub fn read_entry<T: serde::de::DeserializeOwned>(
    list: &str,
    index: usize,
    entry: &toml::Table,
) -> Result<T, ConfigError> {
    serde_path_to_error::deserialize(toml::Value::Table(entry.clone())).map_err(|e| {
        let path = e.path().to_string();
        let message = e.inner().message().lines().next().unwrap_or("invalid").to_string();
        let field = if path == "." { format!("{list}[{index}]") } else { format!("{list}[{index}].{path}") };
        invalid(field, message)
    })
}

/// The error for `field`: for the wings too, which check their parts of the configuration.
pub fn invalid(field: impl Into<String>, problem: impl Into<String>) -> ConfigError {
    ConfigError { field: field.into(), problem: problem.into() }
}

/// Values given on the command line; they win over the file and the environment.
#[derive(Debug, Default, Clone)]
pub struct Overrides {
    pub config_path: Option<PathBuf>,
    pub listen: Option<String>,
    pub database: Option<PathBuf>,
    pub database_url: Option<String>,
    pub retention_days: Option<u64>,
    pub management_url: Option<String>,
    pub user: Option<String>,
    pub password_file: Option<PathBuf>,
    pub amqp_url: Option<String>,
    pub poll_interval_secs: Option<u64>,
}

// The file's shape. Kept apart from `Config` so that the file can be partial and so that unknown
// keys are rejected with their name (`deny_unknown_fields`).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    listen: Option<String>,
    database: Option<PathBuf>,
    /// `database_url_env` and `database_url_file` are resolved to this in `sources`.
    database_url: Option<String>,
    public_url: Option<String>,
    retention_days: Option<u64>,
    raw_retention_hours: Option<u64>,
    minute_retention_days: Option<u64>,
    #[serde(default)]
    brokers: Vec<FileBroker>,
    #[serde(default)]
    alerts: Vec<toml::Table>,
    alert_repeat_secs: Option<u64>,
    lease_secs: Option<u64>,
    #[serde(default)]
    notifications: Vec<toml::Table>,
    auth: Option<FileAuth>,
    #[serde(default)]
    custody: Vec<CustodyRule>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileAuth {
    session_ttl_secs: Option<u64>,
    session_idle_secs: Option<u64>,
    secure_cookie: Option<bool>,
    proxy: Option<ProxyConfig>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileBroker {
    name: Option<String>,
    management_url: Option<String>,
    management_urls: Option<Vec<String>>,
    user: Option<String>,
    /// `password_env` and `password_file` are resolved to this in `sources`.
    password: Option<String>,
    amqp_url: Option<String>,
    vhosts_include: Option<Vec<String>>,
    vhosts_exclude: Option<Vec<String>>,
    poll_interval_secs: Option<u64>,
    request_timeout_secs: Option<u64>,
    prometheus_url: Option<String>,
    broker_cpu_budget: Option<f64>,
    stats_min_interval_secs: Option<u64>,
    stats_max_interval_secs: Option<u64>,
    source_recheck_secs: Option<u64>,
    prometheus_head_timestamps: Option<bool>,
    scheduled_hold_limit_secs: Option<u64>,
    dlq_growth_window_secs: Option<u64>,
    tls: Option<crate::config::tls::TlsFile>,
}

pub const DEFAULT_LISTEN: &str = "127.0.0.1:8080";
pub const DEFAULT_DATABASE: &str = "warren.db";
/// Hour roll-ups are small (a row per busy queue per hour): keep enough for a 30-day chart.
pub const DEFAULT_RETENTION_DAYS: u64 = 30;
/// Raw samples cost most; two days cover the 1 h and 6 h charts and most FIFO age estimates.
pub const DEFAULT_RAW_RETENTION_HOURS: u64 = 48;
/// Minute roll-ups cover the 24 h and 7 d charts.
pub const DEFAULT_MINUTE_RETENTION_DAYS: u64 = 7;
pub const DEFAULT_POLL_INTERVAL_SECS: u64 = 10;
pub const DEFAULT_BROKER_CPU_BUDGET: f64 = 0.05;
pub const DEFAULT_STATS_MAX_INTERVAL_SECS: u64 = 60;
/// A year: past it the limit means nothing (and a huge value must not overflow `Duration` math).
pub const MAX_SCHEDULED_HOLD_LIMIT_SECS: u64 = 365 * 24 * 3600;
/// An hour: Celery's countdowns and dramatiq's delays are mostly shorter; a consumer that holds
/// messages longer with nothing else to do is flagged as hung.
pub const DEFAULT_SCHEDULED_HOLD_LIMIT_SECS: u64 = 3600;
pub const DEFAULT_SOURCE_RECHECK_SECS: u64 = 300;
/// Two days: "growth over days" (issue 35). A DLQ its owner drains daily is lower than two days
/// ago; one nobody reads is higher.
pub const DEFAULT_DLQ_GROWTH_WINDOW_SECS: u64 = 2 * 24 * 3600;
/// As Alertmanager's default `repeat_interval`.
pub const DEFAULT_ALERT_REPEAT_SECS: u64 = 4 * 3600;

/// A lease of 15 s, renewed every 5 s: a dead replica's brokers are polled again within 20 s
/// (issue 33 asks for 30), and a database hiccup of a few seconds moves nothing.
pub const DEFAULT_LEASE_SECS: u64 = 15;

impl Config {
    /// Loads the configuration from `overrides.config_path` (or `WARREN_CONFIG`), the process
    /// environment and the command-line overrides.
    pub fn load(overrides: &Overrides) -> Result<Config, ConfigError> {
        Config::load_explained(overrides).map(|(config, _)| config)
    }

    /// As `load`, with where each value came from (`check-config`).
    pub fn load_explained(overrides: &Overrides) -> Result<(Config, Sources), ConfigError> {
        let env = Environment::from_process();
        let path = overrides.config_path.clone().or_else(|| env.get("WARREN_CONFIG").map(PathBuf::from));
        let text = match &path {
            Some(path) => Some(
                std::fs::read_to_string(path)
                    .map_err(|e| invalid("config", format!("cannot read {}: {e}", path.display())))?,
            ),
            None => None,
        };
        Config::from_layers(path.as_deref().zip(text.as_deref()), &env, overrides)
    }

    /// Parses a TOML document with no environment and no overrides (tests, `config check`).
    pub fn from_toml(text: &str) -> Result<Config, ConfigError> {
        let file = Some((Path::new("warren.toml"), text));
        Config::from_layers(file, &Environment::default(), &Overrides::default()).map(|(config, _)| config)
    }

    /// Layers the file (path and text), the environment and the flags, then validates.
    pub fn from_layers(
        file: Option<(&Path, &str)>,
        env: &Environment,
        overrides: &Overrides,
    ) -> Result<(Config, Sources), ConfigError> {
        let (table, mut sources) = sources::layer(file, env, true)?;
        let file: FileConfig = serde_path_to_error::deserialize(toml::Value::Table(table)).map_err(|e| {
            let path = e.path().to_string();
            let message = e.inner().message().lines().next().unwrap_or("invalid").to_string();
            invalid(if path == "." { "config".to_string() } else { path }, message)
        })?;
        let config = Config::build(file, overrides)?;
        let flags: [(&str, &'static str, bool); 4] = [
            ("listen", "--listen", overrides.listen.is_some()),
            ("database", "--database", overrides.database.is_some()),
            ("database_url", "--database-url", overrides.database_url.is_some()),
            ("retention_days", "--retention-days", overrides.retention_days.is_some()),
        ];
        let broker_flags: [(&str, &'static str, bool); 4] = [
            ("brokers[0].management_url", "--management-url", overrides.management_url.is_some()),
            ("brokers[0].user", "--user", overrides.user.is_some()),
            ("brokers[0].amqp_url", "--amqp-url", overrides.amqp_url.is_some()),
            ("brokers[0].poll_interval_secs", "--poll-interval-secs", overrides.poll_interval_secs.is_some()),
        ];
        for (path, flag, given) in flags.into_iter().chain(broker_flags) {
            if given {
                sources.set(path, Source::Flag(flag));
            }
        }
        if let Some(path) = &overrides.password_file {
            let named_by = Box::new(Source::Flag("--password-file"));
            sources.set("brokers[0].password", Source::SecretFile { path: path.clone(), named_by });
        }
        Ok((config, sources))
    }

    /// Validates the merged file and environment, with the flags over them.
    fn build(file: FileConfig, overrides: &Overrides) -> Result<Config, ConfigError> {
        let listen_text = overrides.listen.clone().or(file.listen).unwrap_or_else(|| DEFAULT_LISTEN.to_string());
        let listen: SocketAddr = listen_text
            .parse()
            .map_err(|_| invalid("listen", format!("{listen_text:?} is not an address like 127.0.0.1:8080")))?;

        let database_given = overrides.database.clone().or(file.database);
        let (database, database_url) =
            database_location(database_given, overrides.database_url.clone().or(file.database_url))?;
        let public_url = match file.public_url.filter(|u| !u.trim().is_empty()) {
            None => None,
            Some(text) => Some(parse_public_url(&text)?),
        };

        let retention_days = overrides.retention_days.or(file.retention_days).unwrap_or(DEFAULT_RETENTION_DAYS);
        if retention_days == 0 || retention_days > 3650 {
            return Err(invalid("retention_days", "must be from 1 to 3650"));
        }
        let minute_retention_days =
            file.minute_retention_days.unwrap_or(DEFAULT_MINUTE_RETENTION_DAYS.min(retention_days));
        if minute_retention_days == 0 || minute_retention_days > retention_days {
            return Err(invalid("minute_retention_days", "must be from 1 to retention_days"));
        }
        let raw_retention_hours =
            file.raw_retention_hours.unwrap_or(DEFAULT_RAW_RETENTION_HOURS.min(minute_retention_days * 24));
        // Two hours at least: the roll-up reads the value in force before each hour, and idle
        // queues write a keyframe only once an hour.
        if raw_retention_hours < 2 || raw_retention_hours > minute_retention_days * 24 {
            return Err(invalid("raw_retention_hours", "must be from 2 to minute_retention_days x 24"));
        }

        let mut file_brokers = file.brokers;
        if file_brokers.is_empty() {
            file_brokers.push(FileBroker::default());
        }
        let single = file_brokers.len() == 1;
        let mut brokers = Vec::with_capacity(file_brokers.len());
        for (index, broker) in file_brokers.into_iter().enumerate() {
            let cli = if single { Some(overrides) } else { None };
            brokers.push(build_broker(index, broker, cli)?);
        }
        if !single && overrides_touch_broker(overrides) {
            return Err(invalid(
                "brokers",
                "broker flags (--management-url, --user, ...) need exactly one broker; set the fields in the config file",
            ));
        }
        for (i, broker) in brokers.iter().enumerate() {
            if brokers[..i].iter().any(|b| b.name == broker.name) {
                return Err(invalid(format!("brokers[{i}].name"), format!("{:?} is used twice", broker.name)));
            }
        }

        let alert_repeat = match file.alert_repeat_secs.unwrap_or(DEFAULT_ALERT_REPEAT_SECS) {
            0 => None,
            secs if secs > 30 * 86_400 => {
                return Err(invalid("alert_repeat_secs", "must be at most 30 days (0: never)"))
            }
            secs => Some(Duration::from_secs(secs)),
        };
        let lease_secs = file.lease_secs.unwrap_or(DEFAULT_LEASE_SECS);
        if !(3..=300).contains(&lease_secs) {
            return Err(invalid("lease_secs", "must be from 3 to 300"));
        }
        let auth = build_auth(file.auth.unwrap_or_default())?;
        for (i, rule) in file.custody.iter().enumerate() {
            if rule.queue.trim().is_empty() || rule.queue == "*" {
                return Err(invalid(
                    format!("custody[{i}].queue"),
                    "name the dead-letter queues (a pattern such as \"*.dlq\"), not every queue",
                ));
            }
            if rule.max_bytes == 0 {
                return Err(invalid(format!("custody[{i}].max_bytes"), "must be above 0"));
            }
        }

        Ok(Config {
            listen,
            database,
            database_url,
            public_url,
            retention: Duration::from_secs(retention_days * 86_400),
            raw_retention: Duration::from_secs(raw_retention_hours * 3600),
            minute_retention: Duration::from_secs(minute_retention_days * 86_400),
            brokers,
            alerts: file.alerts,
            alert_repeat,
            lease_time: Duration::from_secs(lease_secs),
            notifications: file.notifications,
            auth,
            custody: file.custody,
        })
    }
}

impl Config {
    /// The effective configuration as a TOML file would give it (every default written out), for
    /// `warren check-config`: it reads back to the same configuration once the secrets it leaves
    /// out (listed in the comment at its top) are given again.
    pub fn to_toml(&self) -> String {
        self.render(None)
    }

    /// `to_toml` with each value's source after it as a comment (`# env WARREN_LISTEN`), and the
    /// source of each secret left out: what `warren check-config` prints.
    pub fn to_toml_explained(&self, sources: &Sources) -> String {
        self.render(Some(sources))
    }

    fn render(&self, sources: Option<&Sources>) -> String {
        use serde_json::{json, Map, Value};
        // What is left out, and the path its source is recorded under.
        let mut left_out: Vec<(String, String)> = Vec::new();
        let days = |d: Duration| d.as_secs() / 86_400;
        let mut root = Map::new();
        root.insert("listen".into(), json!(self.listen.to_string()));
        match &self.database_url {
            None => {
                root.insert("database".into(), json!(self.database.display().to_string()));
            }
            Some(_) => left_out.push(("the database URL".into(), "database_url".into())),
        }
        if let Some(url) = &self.public_url {
            root.insert("public_url".into(), json!(url.as_str()));
        }
        root.insert("retention_days".into(), json!(days(self.retention)));
        root.insert("minute_retention_days".into(), json!(days(self.minute_retention)));
        root.insert("raw_retention_hours".into(), json!(self.raw_retention.as_secs() / 3600));
        root.insert("alert_repeat_secs".into(), json!(self.alert_repeat.map_or(0, |d| d.as_secs())));
        root.insert("lease_secs".into(), json!(self.lease_time.as_secs()));
        let mut auth = Map::new();
        auth.insert("session_ttl_secs".into(), json!(self.auth.session_ttl.as_secs()));
        auth.insert("session_idle_secs".into(), json!(self.auth.session_idle.as_secs()));
        if let Some(secure) = self.auth.secure_cookie {
            auth.insert("secure_cookie".into(), json!(secure));
        }
        if let Some(proxy) = &self.auth.proxy {
            let mut p = Map::new();
            p.insert("header".into(), json!(proxy.header));
            if let Some(role_header) = &proxy.role_header {
                p.insert("role_header".into(), json!(role_header));
            }
            p.insert("default_role".into(), json!(proxy.default_role.as_deref().unwrap_or("viewer")));
            p.insert("trusted".into(), json!(proxy.trusted));
            auth.insert("proxy".into(), Value::Object(p));
        }
        root.insert("auth".into(), Value::Object(auth));
        let brokers: Vec<Value> = self
            .brokers
            .iter()
            .enumerate()
            .map(|(i, b)| {
                left_out.push((format!("the password of broker {:?}", b.name), format!("brokers[{i}].password")));
                let mut broker = json!({
                    "name": b.name,
                    "management_url": b.management_url.as_str(),
                    "management_urls": b.management_urls.iter().map(|u| u.as_str()).collect::<Vec<_>>(),
                    "user": b.user,
                    "amqp_url": b.amqp_url,
                    "vhosts_include": b.vhosts_include,
                    "vhosts_exclude": b.vhosts_exclude,
                    "poll_interval_secs": b.poll_interval.as_secs(),
                    "request_timeout_secs": b.request_timeout.as_secs(),
                    "prometheus_url": b.prometheus_url.as_ref().map_or("off", |u| u.as_str()),
                    "broker_cpu_budget": b.broker_cpu_budget,
                    "stats_min_interval_secs": b.stats_min_interval.as_secs(),
                    "stats_max_interval_secs": b.stats_max_interval.as_secs(),
                    "source_recheck_secs": b.source_recheck.as_secs(),
                    "prometheus_head_timestamps": b.prometheus_head_timestamps,
                    "scheduled_hold_limit_secs": b.scheduled_hold_limit.as_secs(),
                    "dlq_growth_window_secs": b.dlq_growth_window.as_secs(),
                });
                if b.tls.file != crate::config::tls::TlsFile::default() {
                    broker["tls"] = serde_json::to_value(&b.tls.file).unwrap_or(Value::Null);
                }
                broker
            })
            .collect();
        root.insert("brokers".into(), Value::Array(brokers));
        let custody: Vec<Value> = self
            .custody
            .iter()
            .map(|r| {
                json!({
                    "broker": r.broker, "vhost": r.vhost, "queue": r.queue, "max_bytes": r.max_bytes,
                    "payloads": r.payloads.as_str(), "edit": r.edit,
                })
            })
            .collect();
        root.insert("custody".into(), Value::Array(custody));
        // As the file gave them: the alerts wing reads them (`warren::Wings`).
        let alerts: Vec<Value> = self.alerts.iter().filter_map(|r| serde_json::to_value(r).ok()).collect();
        root.insert("alerts".into(), Value::Array(alerts));
        let mut notifications = Vec::new();
        for (i, channel) in self.notifications.iter().enumerate() {
            let mut stored = serde_json::to_value(channel).unwrap_or(Value::Null);
            let id = channel.get("id").and_then(|v| v.as_str()).unwrap_or("").to_string();
            if let Some(fields) = stored.as_object_mut() {
                for secret in ["url", "password"] {
                    if fields.remove(secret).is_some() {
                        let path = format!("notifications[{i}].{secret}");
                        left_out.push((format!("the {secret} of notification channel {id:?}"), path));
                    }
                }
            }
            notifications.push(stored);
        }
        root.insert("notifications".into(), Value::Array(notifications));
        let body = match toml::to_string(&Value::Object(root)) {
            Ok(text) => match sources {
                Some(sources) => sources::annotate(&text, sources),
                None => text,
            },
            Err(e) => format!("# the configuration could not be written as TOML: {e}\n"),
        };
        let mut out = String::from(
            "# warren's effective configuration: defaults, then the file, the environment and the flags.\n",
        );
        if let Some(sources) = sources {
            match &sources.file {
                Some(path) => {
                    out.push_str(&format!("# Each value's source follows it; \"file\" is {}.\n", path.display()))
                }
                None => out.push_str("# Each value's source follows it; no configuration file was read.\n"),
            }
        }
        if !left_out.is_empty() {
            out.push_str("# Secrets are left out; give them again (<field>, <field>_file or <field>_env) to use\n");
            out.push_str("# this as a file:\n");
            for (secret, path) in &left_out {
                match sources {
                    Some(sources) => out.push_str(&format!("# - {secret}: {}\n", sources.get(path))),
                    None => out.push_str(&format!("# - {secret}\n")),
                }
            }
        }
        out.push('\n');
        out.push_str(&body);
        out
    }
}

/// Where warren keeps its data: `database` (a SQLite file), or `database_url`: `sqlite:PATH`
/// (the same as `database = PATH`) or `postgres://...` / `postgresql://...`. Errors never
/// show the URL, which may hold a password.
fn database_location(database: Option<PathBuf>, url: Option<String>) -> Result<(PathBuf, Option<Secret>), ConfigError> {
    let url = url.filter(|u| !u.trim().is_empty());
    let sqlite = |path: PathBuf| {
        if path.as_os_str().is_empty() {
            return Err(invalid("database", "must not be empty"));
        }
        Ok((path, None))
    };
    let Some(url) = url else { return sqlite(database.unwrap_or_else(|| PathBuf::from(DEFAULT_DATABASE))) };
    if let Some(path) = url.strip_prefix("sqlite://").or_else(|| url.strip_prefix("sqlite:")) {
        if database.is_some() {
            return Err(invalid("database_url", "names a SQLite file and database is set too; give one"));
        }
        return sqlite(PathBuf::from(path));
    }
    if !(url.starts_with("postgres://") || url.starts_with("postgresql://")) {
        return Err(invalid("database_url", "must start with sqlite: (a file) or postgres:// (PostgreSQL)"));
    }
    if reqwest::Url::parse(&url).is_err() {
        return Err(invalid(
            "database_url",
            "is not a valid postgres:// URL (the value is not shown: it may hold a password)",
        ));
    }
    Ok((database.unwrap_or_else(|| PathBuf::from(DEFAULT_DATABASE)), Some(Secret::new(url))))
}

/// warren's address as people reach it: http or https, with a host, and nothing after the
/// path (a query or fragment would end up inside every link).
fn parse_public_url(text: &str) -> Result<reqwest::Url, ConfigError> {
    let url = reqwest::Url::parse(text.trim())
        .map_err(|e| invalid("public_url", format!("{text:?} is not a URL like https://warren.example.com: {e}")))?;
    if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
        return Err(invalid("public_url", format!("{text:?} must be an http or https URL with a host")));
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err(invalid("public_url", format!("{text:?} must have no query or fragment")));
    }
    Ok(url)
}

impl Config {
    /// The path warren is served under, from `public_url`: `/warren` for
    /// `https://ops.example.com/warren/`, empty when it has no path (or there is none). Every URL
    /// warren writes (links, assets, redirects, the cookie's path) starts with it, because a
    /// proxy that strips it on the way in cannot add it back into pages.
    pub fn base_path(&self) -> String {
        let path = self.public_url.as_ref().map_or("", |url| url.path());
        path.trim_end_matches('/').to_string()
    }
}

#[cfg(test)]
mod base_path_tests {
    use super::Config;

    fn base_path(public_url: &str) -> String {
        Config::from_toml(&format!("public_url = {public_url:?}")).unwrap().base_path()
    }

    #[test]
    fn the_base_path_is_public_urls_path_without_its_trailing_slash() {
        assert_eq!(base_path("https://ops.example.com/warren/"), "/warren");
        assert_eq!(base_path("https://ops.example.com/warren"), "/warren");
        assert_eq!(base_path("https://ops.example.com/tools/warren/"), "/tools/warren");
        assert_eq!(base_path("https://ops.example.com/"), "");
        assert_eq!(base_path("http://warren.example:8080"), "");
        // As the browser sends it: the URL parser percent-encodes what a path cannot hold.
        assert_eq!(base_path("https://ops.example.com/my tools/"), "/my%20tools");
        assert_eq!(Config::from_toml("").unwrap().base_path(), "");
    }
}

fn build_auth(file: FileAuth) -> Result<AuthConfig, ConfigError> {
    let secs = |field: &str, value: Option<u64>, default: Duration| -> Result<Duration, ConfigError> {
        match value {
            None => Ok(default),
            Some(s) if (60..=30 * 86_400).contains(&s) => Ok(Duration::from_secs(s)),
            Some(_) => Err(invalid(format!("auth.{field}"), "must be from 60 seconds to 30 days")),
        }
    };
    let session_ttl = secs("session_ttl_secs", file.session_ttl_secs, DEFAULT_SESSION_TTL)?;
    let session_idle = secs("session_idle_secs", file.session_idle_secs, DEFAULT_SESSION_IDLE)?;
    Ok(AuthConfig { session_ttl, session_idle, secure_cookie: file.secure_cookie, proxy: file.proxy })
}

/// The default Prometheus endpoint of a broker: the management host, plain HTTP, port 15692.
pub fn default_prometheus_url(management: &reqwest::Url) -> reqwest::Url {
    let host = management.host_str().unwrap_or("127.0.0.1");
    let host = if host.contains(':') && !host.starts_with('[') { format!("[{host}]") } else { host.to_string() };
    reqwest::Url::parse(&format!("http://{host}:15692/")).expect("a host and a port make a URL")
}

fn overrides_touch_broker(o: &Overrides) -> bool {
    o.management_url.is_some()
        || o.user.is_some()
        || o.password_file.is_some()
        || o.amqp_url.is_some()
        || o.poll_interval_secs.is_some()
}

fn parse_u64(field: &str, text: &str) -> Result<u64, ConfigError> {
    text.trim().parse().map_err(|_| invalid(field, format!("{text:?} is not a whole number")))
}

fn build_broker(index: usize, file: FileBroker, cli: Option<&Overrides>) -> Result<BrokerConfig, ConfigError> {
    let field = |name: &str| format!("brokers[{index}].{name}");
    let name = file.name.unwrap_or_else(|| "local".to_string());
    if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_') {
        return Err(invalid(
            field("name"),
            format!("{name:?} must be non-empty and use only letters, digits, '-' and '_'"),
        ));
    }
    let cli = |pick: fn(&Overrides) -> Option<String>| cli.and_then(pick);

    let url_list: Vec<String> = file.management_urls.unwrap_or_default();
    let single = cli(|o| o.management_url.clone()).or(file.management_url);
    let mut management_urls: Vec<reqwest::Url> = Vec::new();
    if let Some(text) = &single {
        management_urls.push(parse_management_url(&field("management_url"), text)?);
    }
    for (i, text) in url_list.iter().enumerate() {
        let url = parse_management_url(&field(&format!("management_urls[{i}]")), text)?;
        if !management_urls.contains(&url) {
            management_urls.push(url);
        }
    }
    if management_urls.is_empty() {
        management_urls.push(parse_management_url(&field("management_url"), "http://127.0.0.1:15672")?);
    }
    let management_url = management_urls[0].clone();

    let user = cli(|o| o.user.clone()).or(file.user).unwrap_or_else(|| "guest".to_string());

    let password = match cli(|o| o.password_file.as_ref().map(|p| p.display().to_string())) {
        Some(path) => sources::read_secret_file(&field("password_file"), Path::new(&path))?,
        None => file.password.unwrap_or_else(|| "guest".to_string()),
    };

    let amqp_url = cli(|o| o.amqp_url.clone())
        .or(file.amqp_url)
        .unwrap_or_else(|| format!("amqp://{}:5672", management_url.host_str().unwrap_or("127.0.0.1")));
    let authority = amqp_url.split("://").nth(1).unwrap_or_default().split('/').next().unwrap_or_default();
    if authority.contains('@') {
        return Err(invalid(
            field("amqp_url"),
            "put credentials in user / password_env / password_file, not in the URL",
        ));
    }
    if !(amqp_url.starts_with("amqp://") || amqp_url.starts_with("amqps://")) {
        return Err(invalid(field("amqp_url"), format!("{amqp_url:?} must start with amqp:// or amqps://")));
    }

    let poll_interval_secs = cli(|o| o.poll_interval_secs.map(|s| s.to_string()))
        .map(|text| parse_u64(&field("poll_interval_secs"), &text))
        .transpose()?
        .or(file.poll_interval_secs)
        .unwrap_or(DEFAULT_POLL_INTERVAL_SECS);
    if poll_interval_secs == 0 || poll_interval_secs > 3600 {
        return Err(invalid(field("poll_interval_secs"), "must be from 1 to 3600"));
    }
    let request_timeout_secs = file.request_timeout_secs.unwrap_or(poll_interval_secs.clamp(5, 30));
    if request_timeout_secs == 0 || request_timeout_secs > 600 {
        return Err(invalid(field("request_timeout_secs"), "must be from 1 to 600"));
    }

    let patterns = |list: Option<Vec<String>>, key: &str| -> Result<Vec<String>, ConfigError> {
        let list = list.unwrap_or_default();
        if list.iter().any(|p| p.is_empty()) {
            return Err(invalid(field(key), "patterns must not be empty strings"));
        }
        Ok(list)
    };
    let vhosts_include = patterns(file.vhosts_include, "vhosts_include")?;
    let vhosts_exclude = patterns(file.vhosts_exclude, "vhosts_exclude")?;

    let prometheus_url = match file.prometheus_url {
        Some(text) if text == "off" || text.is_empty() => None,
        Some(text) => {
            let mut url = reqwest::Url::parse(&text)
                .map_err(|e| invalid(field("prometheus_url"), format!("{text:?} is not a URL: {e}")))?;
            if !url.path().ends_with('/') {
                let path = format!("{}/", url.path());
                url.set_path(&path);
            }
            Some(url)
        }
        None => Some(default_prometheus_url(&management_url)),
    };
    let broker_cpu_budget = file.broker_cpu_budget.unwrap_or(DEFAULT_BROKER_CPU_BUDGET);
    if !(broker_cpu_budget > 0.0 && broker_cpu_budget <= 1.0) {
        return Err(invalid(field("broker_cpu_budget"), "must be above 0 and at most 1 (one core)"));
    }
    let stats_min_interval_secs = file.stats_min_interval_secs.unwrap_or(poll_interval_secs);
    let stats_max_interval_secs = file.stats_max_interval_secs.unwrap_or(DEFAULT_STATS_MAX_INTERVAL_SECS);
    if stats_min_interval_secs == 0 || stats_max_interval_secs < stats_min_interval_secs.min(60) {
        return Err(invalid(
            field("stats_min_interval_secs"),
            "must be at least 1 and not above stats_max_interval_secs",
        ));
    }
    let source_recheck_secs = file.source_recheck_secs.unwrap_or(DEFAULT_SOURCE_RECHECK_SECS).max(1);
    let tls_file = file.tls.unwrap_or_default();
    let tls = crate::config::tls::BrokerTls::build(tls_file).map_err(|e| invalid(field(&e.key), e.problem))?;

    Ok(BrokerConfig {
        name,
        management_url,
        management_urls,
        user,
        password: Secret::new(password),
        amqp_url,
        vhosts_include,
        vhosts_exclude,
        poll_interval: Duration::from_secs(poll_interval_secs),
        request_timeout: Duration::from_secs(request_timeout_secs),
        prometheus_url,
        broker_cpu_budget,
        stats_min_interval: Duration::from_secs(stats_min_interval_secs),
        stats_max_interval: Duration::from_secs(stats_max_interval_secs),
        source_recheck: Duration::from_secs(source_recheck_secs),
        prometheus_head_timestamps: file.prometheus_head_timestamps.unwrap_or(false),
        scheduled_hold_limit: Duration::from_secs(
            file.scheduled_hold_limit_secs
                .unwrap_or(DEFAULT_SCHEDULED_HOLD_LIMIT_SECS)
                .min(MAX_SCHEDULED_HOLD_LIMIT_SECS),
        ),
        dlq_growth_window: Duration::from_secs(
            file.dlq_growth_window_secs
                .unwrap_or(DEFAULT_DLQ_GROWTH_WINDOW_SECS)
                .clamp(1, MAX_SCHEDULED_HOLD_LIMIT_SECS),
        ),
        tls,
    })
}

/// A management API base URL: http or https, no credentials, and a trailing slash (joining
/// "api/..." onto a base without one replaces its last path segment).
fn parse_management_url(field: &str, text: &str) -> Result<reqwest::Url, ConfigError> {
    let mut url = reqwest::Url::parse(text).map_err(|e| invalid(field, format!("{text:?}: {e}")))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(invalid(field, "must start with http:// or https://"));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(invalid(field, "put credentials in user / password_env / password_file, not in the URL"));
    }
    if !url.path().ends_with('/') {
        let path = format!("{}/", url.path());
        url.set_path(&path);
    }
    Ok(url)
}

/// Glob match with `*` (any run) and `?` (one character), on whole strings.
pub fn glob_match(pattern: &str, text: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let t: Vec<char> = text.chars().collect();
    let (mut pi, mut ti) = (0, 0);
    let (mut star, mut mark) = (None, 0);
    while ti < t.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == t[ti]) {
            pi += 1;
            ti += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some(pi);
            mark = ti;
            pi += 1;
        } else if let Some(s) = star {
            pi = s + 1;
            mark += 1;
            ti = mark;
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == '*')
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file's text read with these variables as the whole environment.
    fn with_env(text: &str, vars: &[(&str, &str)]) -> Result<Config, ConfigError> {
        let env: Environment = vars.iter().copied().collect();
        Config::from_layers(Some((Path::new("warren.toml"), text)), &env, &Overrides::default()).map(|(c, _)| c)
    }

    /// `check-config` prints TOML that reads back to the same configuration, never a secret and
    /// never Rust's debug output (issue 19, case 16).
    #[test]
    fn check_config_prints_toml_that_reads_back_to_the_same_configuration() {
        let text = r#"
            listen = "0.0.0.0:9000"
            retention_days = 60
            [auth]
            session_idle_secs = 600
            [auth.proxy]
            header = "X-Forwarded-User"
            trusted = ["10.0.0.0/24"]
            [[brokers]]
            name = "prod"
            management_url = "https://rabbit.example:15671"
            user = "warren"
            password = "hunter2"
            vhosts_exclude = ["tmp-*"]
            prometheus_url = "off"
            [[custody]]
            queue = "*.dlq"
            payloads = "operator"
            [[alerts]]
            id = "deep"
            name = "Deep"
            metric = "ready"
            comparator = ">"
            threshold = 1000.0
            severity = "critical"
            [[notifications]]
            id = "ops"
            name = "Ops"
            type = "slack"
            url = "https://hooks.slack.com/services/T000/B000/SECRETTOKEN"
        "#;
        let config = Config::from_toml(text).unwrap();
        let printed = config.to_toml();
        assert!(!printed.contains("hunter2") && !printed.contains("SECRETTOKEN"), "{printed}");
        assert!(!printed.contains("Url {") && !printed.contains("secs:") && !printed.contains("2592000s"), "{printed}");
        assert!(printed.contains("the password of broker \"prod\""), "{printed}");
        assert!(printed.contains("the url of notification channel \"ops\""), "{printed}");
        assert!(printed.contains("retention_days = 60") && printed.contains("prometheus_url = \"off\""), "{printed}");
        // With the secrets given again, it reads back to a configuration that prints the same.
        let restored = printed.replace("user = \"warren\"", "user = \"warren\"\npassword = \"hunter2\"").replace(
            "type = \"slack\"",
            "type = \"slack\"\nurl = \"https://hooks.slack.com/services/T000/B000/SECRETTOKEN\"",
        );
        let again = Config::from_toml(&restored).unwrap_or_else(|e| panic!("{e}\n{restored}"));
        assert_eq!(again.to_toml(), printed);
        assert_eq!(again.brokers[0].password.expose(), "hunter2");
        assert_eq!(again.custody, config.custody);
        assert_eq!(again.alerts, config.alerts);
        assert_eq!(again.notifications, config.notifications);
    }

    #[test]
    fn no_config_gives_the_documented_defaults() {
        let config = Config::from_toml("").unwrap();
        assert_eq!(config.listen.to_string(), "127.0.0.1:8080");
        assert_eq!(config.database, PathBuf::from("warren.db"));
        assert_eq!(config.brokers.len(), 1);
        let broker = &config.brokers[0];
        assert_eq!(broker.management_url.as_str(), "http://127.0.0.1:15672/");
        assert_eq!((broker.user.as_str(), broker.password.expose()), ("guest", "guest"));
        assert_eq!(broker.poll_interval, Duration::from_secs(10));
        assert_eq!(broker.prometheus_url.as_ref().map(|u| u.as_str()), Some("http://127.0.0.1:15692/"));
        assert_eq!(broker.broker_cpu_budget, 0.05);
        assert_eq!(
            (broker.stats_min_interval, broker.stats_max_interval),
            (Duration::from_secs(10), Duration::from_secs(60))
        );
    }

    /// A cluster's management listeners: the list alone, beside `management_url` (which goes
    /// first), from the environment, and printed back by `check-config`.
    #[test]
    fn a_broker_may_list_several_management_urls() {
        let config = Config::from_toml(
            "[[brokers]]\nname = \"c\"\nmanagement_urls = [\"http://a:15672\", \"http://b:15672/x\"]\n",
        )
        .unwrap();
        let urls: Vec<&str> = config.brokers[0].management_urls.iter().map(|u| u.as_str()).collect();
        assert_eq!(urls, ["http://a:15672/", "http://b:15672/x/"]);
        assert_eq!(config.brokers[0].management_url.as_str(), "http://a:15672/");
        // The Prometheus default stays on the first one's host.
        assert_eq!(config.brokers[0].prometheus_url.as_ref().map(|u| u.as_str()), Some("http://a:15692/"));

        let both = Config::from_toml(
            "[[brokers]]\nmanagement_url = \"http://b:15672\"\nmanagement_urls = [\"http://a:15672\", \"http://b:15672\"]\n",
        )
        .unwrap();
        let urls: Vec<&str> = both.brokers[0].management_urls.iter().map(|u| u.as_str()).collect();
        assert_eq!(urls, ["http://b:15672/", "http://a:15672/"], "management_url first, no repeats");
        let printed = both.to_toml();
        assert!(printed.contains(r#"management_urls = ["http://b:15672/", "http://a:15672/"]"#), "{printed}");
        let again = Config::from_toml(&printed).unwrap();
        assert_eq!(again.brokers[0].management_urls, both.brokers[0].management_urls);

        let from_env =
            with_env("", &[("WARREN_BROKER_LOCAL_MANAGEMENT_URLS", "http://c:15672, http://d:15672")]).unwrap();
        let urls: Vec<&str> = from_env.brokers[0].management_urls.iter().map(|u| u.as_str()).collect();
        assert_eq!(urls, ["http://c:15672/", "http://d:15672/"]);

        let err = Config::from_toml("[[brokers]]\nmanagement_urls = [\"http://a:1\", \"ftp://b\"]\n").unwrap_err();
        assert!(err.to_string().contains("brokers[0].management_urls[1]"), "{err}");
        let err = Config::from_toml("[[brokers]]\nmanagement_urls = [\"http://u:p@a:1\"]\n").unwrap_err();
        assert!(err.to_string().contains("credentials"), "{err}");
    }

    #[test]
    fn prometheus_source_can_be_turned_off_or_moved() {
        let off = Config::from_toml("[[brokers]]\nname = \"a\"\nprometheus_url = \"off\"\n").unwrap();
        assert!(off.brokers[0].prometheus_url.is_none());
        let moved = Config::from_toml(
            "[[brokers]]\nname = \"a\"\nprometheus_url = \"http://exporter:9419\"\nbroker_cpu_budget = 0.02\n",
        )
        .unwrap();
        assert_eq!(moved.brokers[0].prometheus_url.as_ref().unwrap().as_str(), "http://exporter:9419/");
        assert_eq!(moved.brokers[0].broker_cpu_budget, 0.02);
        let err = Config::from_toml("[[brokers]]\nname = \"a\"\nbroker_cpu_budget = 0\n").unwrap_err();
        assert!(err.to_string().contains("broker_cpu_budget"), "{err}");
    }

    #[test]
    fn errors_name_the_field() {
        let err = Config::from_toml("[[brokers]]\nname = \"a\"\npoll_interval_secs = 0\n").unwrap_err();
        assert_eq!(err.to_string(), "invalid configuration: brokers[0].poll_interval_secs: must be from 1 to 3600");
        let err = Config::from_toml("[[brokers]]\nmanagement_url = \"ftp://x\"\n").unwrap_err();
        assert!(err.to_string().contains("brokers[0].management_url"), "{err}");
        let err = Config::from_toml("listen = \"nowhere\"").unwrap_err();
        assert!(err.to_string().starts_with("invalid configuration: listen:"), "{err}");
        let err = Config::from_toml("[[brokers]]\nname = \"a\"\n[[brokers]]\nname = \"a\"\n").unwrap_err();
        assert!(err.to_string().contains("brokers[1].name"), "{err}");
        let err = Config::from_toml("colour = 3").unwrap_err();
        assert!(err.to_string().contains("colour"), "{err}");
        assert!(!err.to_string().contains('\n'), "one line: {err}");
    }

    #[test]
    fn auth_section_is_validated() {
        let config = Config::from_toml("").unwrap();
        assert!(config.auth.proxy.is_none());
        assert_eq!(config.auth.session_ttl, DEFAULT_SESSION_TTL);
        let config = Config::from_toml("[auth]\nsession_idle_secs = 600\n").unwrap();
        assert_eq!(config.auth.session_idle, Duration::from_secs(600));
        // `[auth.proxy]` is read and checked by the auth wing (`auth::ProxyAuth::from_config`).
        for (toml, field) in [
            ("[auth.proxy]\nheader = \"X-User\"\n", "trusted"),
            ("[auth]\nsession_ttl_secs = 5\n", "auth.session_ttl_secs"),
            ("[auth]\npassword = \"x\"\n", "password"),
        ] {
            let err = Config::from_toml(toml).unwrap_err().to_string();
            assert!(err.contains(field), "{toml}: {err}");
        }
    }

    #[test]
    fn history_windows_have_defaults_and_limits() {
        let config = Config::from_toml("").unwrap();
        assert_eq!(config.retention, Duration::from_secs(30 * 86_400));
        assert_eq!(config.minute_retention, Duration::from_secs(7 * 86_400));
        assert_eq!(config.raw_retention, Duration::from_secs(48 * 3600));
        // Shorter retention shortens the defaults of the finer windows with it.
        let config = Config::from_toml("retention_days = 1").unwrap();
        assert_eq!((config.minute_retention.as_secs(), config.raw_retention.as_secs()), (86_400, 86_400));
        let config = Config::from_toml("raw_retention_hours = 6\nminute_retention_days = 2").unwrap();
        assert_eq!((config.minute_retention.as_secs(), config.raw_retention.as_secs()), (2 * 86_400, 6 * 3600));
        let err = Config::from_toml("retention_days = 3\nminute_retention_days = 4").unwrap_err();
        assert!(err.to_string().contains("minute_retention_days"), "{err}");
        let err = Config::from_toml("raw_retention_hours = 1").unwrap_err();
        assert!(err.to_string().contains("raw_retention_hours"), "{err}");
        let err = Config::from_toml("minute_retention_days = 1\nraw_retention_hours = 25").unwrap_err();
        assert!(err.to_string().contains("raw_retention_hours"), "{err}");
    }

    #[test]
    fn secrets_do_not_print() {
        let config = Config::from_toml("[[brokers]]\npassword = \"hunter2\"\n").unwrap();
        assert!(!format!("{config:?}").contains("hunter2"));
    }

    #[test]
    fn environment_overrides_the_file() {
        let env = [
            ("WARREN_BROKER_PROD_1_USER", "monitoring"),
            ("WARREN_BROKER_PROD_1_PASSWORD", "s3cret"),
            ("WARREN_LISTEN", "127.0.0.1:9999"),
        ];
        let config = with_env("[[brokers]]\nname = \"prod-1\"\nuser = \"a\"\n", &env).unwrap();
        assert_eq!(config.listen.port(), 9999);
        assert_eq!(config.brokers[0].user, "monitoring");
        assert_eq!(config.brokers[0].password.expose(), "s3cret");
    }

    /// The broker-wide TLS settings come from the environment too; a file it names is read and
    /// checked like one the file names.
    #[test]
    fn environment_sets_the_broker_tls() {
        let file = "[[brokers]]\nname = \"prod\"\n[brokers.tls]\nserver_name = \"a.example\"\n";
        let config = with_env(file, &[("WARREN_BROKER_PROD_TLS_SERVER_NAME", "rabbit.example")]).unwrap();
        let amqp = &config.brokers[0].tls.amqp.settings;
        assert_eq!(
            amqp.server_name.as_ref().map(|s| (s.key.as_str(), s.value.as_str())),
            Some(("tls.server_name", "rabbit.example"))
        );
        let env = [("WARREN_BROKER_PROD_TLS_CA_FILE", "/nonexistent/ca.pem")];
        let err = with_env("[[brokers]]\nname = \"prod\"\n", &env).unwrap_err().to_string();
        assert!(err.contains("brokers[0].tls.ca_file") && err.contains("cannot read /nonexistent/ca.pem"), "{err}");
    }

    /// Issue 33, must-have 1: `database_url` names PostgreSQL (a secret: from a file or a
    /// named variable too, never printed) or a SQLite file.
    #[test]
    fn database_url_names_postgres_or_a_sqlite_file() {
        let dir = tempfile::tempdir().unwrap();
        let secret = dir.path().join("db-url");
        std::fs::write(&secret, "postgres://warren:pw-in-file@db.example/warren\n").unwrap();
        let config = with_env("", &[("WARREN_DATABASE_URL_FILE", secret.to_str().unwrap())]).unwrap();
        assert_eq!(
            config.database_url.as_ref().map(Secret::expose),
            Some("postgres://warren:pw-in-file@db.example/warren")
        );
        assert!(!config.to_toml().contains("pw-in-file"), "{}", config.to_toml());

        let config = with_env("database_url_env = \"PG\"\n", &[("PG", "postgresql://h/w")]).unwrap();
        assert_eq!(config.database_url.as_ref().map(Secret::expose), Some("postgresql://h/w"));

        let config = with_env("database_url = \"sqlite:/var/lib/warren/w.db\"\n", &[]).unwrap();
        assert_eq!((config.database, config.database_url.is_none()), (PathBuf::from("/var/lib/warren/w.db"), true));
        let config = with_env("", &[]).unwrap();
        assert_eq!((config.database, config.database_url.is_none()), (PathBuf::from("warren.db"), true));

        let err = with_env("database = \"a.db\"\ndatabase_url = \"sqlite:b.db\"\n", &[]).unwrap_err().to_string();
        assert!(err.contains("database_url") && err.contains("give one"), "{err}");
        let err = with_env("database_url = \"mysql://u:hunter2@h/w\"\n", &[]).unwrap_err().to_string();
        assert!(err.contains("database_url") && err.contains("postgres://") && !err.contains("hunter2"), "{err}");
    }

    /// Issue 36, case 3: every secret takes a literal, `<field>_file` or `<field>_env`, in the
    /// file or the environment; the environment's replaces the file's whatever its form.
    #[test]
    fn secrets_come_from_files_and_named_variables() {
        let dir = tempfile::tempdir().unwrap();
        let file = |name: &str, content: &str| {
            let path = dir.path().join(name);
            std::fs::write(&path, content).unwrap();
            path.display().to_string()
        };
        let (broker_pw, hook, smtp_pw) =
            (file("broker", "b-secret\n"), file("hook", "https://hooks.example/T/FILE\n"), file("smtp", "s-secret\n"));
        let text = format!(
            "[[brokers]]\nname = \"a\"\npassword_file = {broker_pw:?}\n[[brokers]]\nname = \"b\"\npassword = \"old\"\n\
             [[notifications]]\nid = \"hook\"\nname = \"H\"\ntype = \"slack\"\nurl_file = {hook:?}\n\
             [[notifications]]\nid = \"mail\"\nname = \"M\"\ntype = \"email\"\nhost = \"smtp.example\"\nuser = \"u\"\n\
             password_env = \"SMTP_PW\"\nfrom = \"w@example.com\"\nto = [\"o@example.com\"]\n"
        );
        let env = [("SMTP_PW", "from-env"), ("B_PW", "b-env"), ("WARREN_BROKER_B_PASSWORD_ENV", "B_PW")];
        let config = with_env(&text, &env).unwrap();
        assert_eq!(config.brokers[0].password.expose(), "b-secret", "one line end trimmed");
        assert_eq!(config.brokers[1].password.expose(), "b-env", "the environment replaces the file's literal");
        let stored = |i: usize, field: &str| config.notifications[i][field].as_str().map(str::to_string);
        assert_eq!(stored(0, "url").as_deref(), Some("https://hooks.example/T/FILE"));
        assert_eq!(stored(1, "password").as_deref(), Some("from-env"));
        // The SMTP password from a file named in the environment.
        let config =
            with_env(&text, &[("SMTP_PW", "x"), ("WARREN_NOTIFICATION_MAIL_PASSWORD_FILE", &smtp_pw)]).unwrap();
        assert_eq!(config.notifications[1]["password"].as_str(), Some("s-secret"));

        // One form only; the errors name the field, the file or the variable, never a value.
        let both = format!("[[brokers]]\npassword = \"hunter2\"\npassword_file = {broker_pw:?}\n");
        let err = with_env(&both, &[]).unwrap_err().to_string();
        assert!(err.contains("brokers[0].password") && err.contains("password_file"), "{err}");
        assert!(!err.contains("hunter2") && !err.contains("b-secret"), "{err}");
        let env = [("WARREN_BROKER_LOCAL_PASSWORD", "hunter2"), ("WARREN_BROKER_LOCAL_PASSWORD_ENV", "X")];
        let err = with_env("", &env).unwrap_err().to_string();
        assert!(err.contains("WARREN_BROKER_LOCAL_PASSWORD_FILE") && !err.contains("hunter2"), "{err}");
        let err = with_env("[[brokers]]\npassword_env = \"NOT_SET\"\n", &[]).unwrap_err().to_string();
        assert!(err.contains("brokers[0].password_env") && err.contains("NOT_SET is not set"), "{err}");
        let err = with_env("[[brokers]]\npassword_file = \"/nonexistent/pw\"\n", &[]).unwrap_err().to_string();
        assert!(err.contains("brokers[0].password_file") && err.contains("/nonexistent/pw"), "{err}");
    }

    /// Every setting has a variable: nested ones by their path, brokers and channels by name,
    /// whole lists as TOML; brokers and channels can be added by name.
    #[test]
    fn every_setting_has_a_variable() {
        let env = [
            ("WARREN_ALERT_REPEAT_SECS", "0"),
            ("WARREN_AUTH_SESSION_IDLE_SECS", "600"),
            ("WARREN_AUTH_PROXY_HEADER", "X-User"),
            ("WARREN_AUTH_PROXY_TRUSTED", "10.0.0.1, 10.0.0.2"),
            ("WARREN_BROKERS", "local,prod"),
            ("WARREN_BROKER_PROD_MANAGEMENT_URL", "http://prod:15672"),
            ("WARREN_BROKER_PROD_PROMETHEUS_HEAD_TIMESTAMPS", "true"),
            ("WARREN_BROKER_PROD_BROKER_CPU_BUDGET", "0.02"),
            ("WARREN_BROKER_PROD_TLS_AMQP_SERVER_NAME", "amqp.example"),
            ("WARREN_CUSTODY", r#"[{ queue = "*.dlq", payloads = "admin" }]"#),
            ("WARREN_NOTIFICATIONS", "ops"),
            ("WARREN_NOTIFICATION_OPS_TYPE", "webhook"),
            ("WARREN_NOTIFICATION_OPS_URL", "https://hooks.example/x"),
            ("WARREN_TEST_BROKER", "3.10"),
        ];
        let config = with_env("", &env).unwrap();
        assert_eq!(config.alert_repeat, None);
        assert_eq!(config.auth.session_idle, Duration::from_secs(600));
        assert_eq!(config.auth.proxy.as_ref().map(|p| p.trusted.len()), Some(2));
        let names: Vec<&str> = config.brokers.iter().map(|b| b.name.as_str()).collect();
        assert_eq!(names, ["local", "prod"]);
        let prod = &config.brokers[1];
        assert!(prod.prometheus_head_timestamps && prod.broker_cpu_budget == 0.02);
        assert_eq!(prod.management_url.as_str(), "http://prod:15672/");
        assert_eq!(prod.tls.amqp.settings.server_name.as_ref().map(|s| s.value.as_str()), Some("amqp.example"));
        assert_eq!(config.custody[0].payloads, PayloadRole::Admin);
        let ops = &config.notifications[0];
        assert_eq!((ops["id"].as_str(), ops["type"].as_str()), (Some("ops"), Some("webhook")));

        let err = with_env("", &[("WARREN_RETENTION_DAYZ", "3")]).unwrap_err().to_string();
        assert!(err.contains("WARREN_RETENTION_DAYZ") && err.contains("did you mean WARREN_RETENTION_DAYS?"), "{err}");
        let err = with_env("", &[("WARREN_RETENTION_DAYS", "many")]).unwrap_err().to_string();
        assert!(err.contains("retention_days (WARREN_RETENTION_DAYS)"), "{err}");
        // A variable the file names for a secret is not unknown (the README's example).
        let file = "[[brokers]]\nname = \"prod\"\npassword_env = \"WARREN_PROD_PASSWORD\"\n";
        assert!(with_env(file, &[("WARREN_PROD_PASSWORD", "pw")]).is_ok());
        // Two brokers whose names give the same variables.
        let err = with_env("[[brokers]]\nname = \"a-b\"\n[[brokers]]\nname = \"a_b\"\n", &[]).unwrap_err();
        assert!(err.to_string().contains("rename one"), "{err}");
    }

    #[test]
    fn sources_say_where_each_value_came_from() {
        let env: Environment = [("WARREN_BROKER_LOCAL_USER", "monitor")].into_iter().collect();
        let overrides = Overrides { listen: Some("127.0.0.1:9999".into()), ..Overrides::default() };
        let (config, sources) =
            Config::from_layers(Some((Path::new("/etc/warren.toml"), "retention_days = 9\n")), &env, &overrides)
                .unwrap();
        assert_eq!(sources.get("listen"), &Source::Flag("--listen"));
        assert_eq!(sources.get("retention_days"), &Source::File);
        assert_eq!(sources.get("brokers[0].user"), &Source::Env("WARREN_BROKER_LOCAL_USER".into()));
        assert_eq!(sources.get("database"), &Source::Default);
        let printed = config.to_toml_explained(&sources);
        assert!(printed.contains("\"file\" is /etc/warren.toml"), "{printed}");
        assert!(printed.contains("user = \"monitor\"  # env WARREN_BROKER_LOCAL_USER"), "{printed}");
        assert!(printed.contains("the password of broker \"local\": default"), "{printed}");
        assert!(Config::from_toml(&printed).is_ok(), "comments do not stop it reading back:\n{printed}");
    }

    #[test]
    fn vhost_patterns() {
        assert!(glob_match("*", "/"));
        assert!(glob_match("team-*", "team-a"));
        assert!(!glob_match("team-?", "team-ab"));
        let mut broker = Config::from_toml("").unwrap().brokers.remove(0);
        broker.vhosts_include = vec!["prod*".into()];
        broker.vhosts_exclude = vec!["prod-test".into()];
        assert!(broker.watches_vhost("prod-eu"));
        assert!(!broker.watches_vhost("prod-test"));
        assert!(!broker.watches_vhost("/"));
    }
}
