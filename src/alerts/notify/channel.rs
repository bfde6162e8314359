//! Where notifications go: a channel's settings, their validation, and the masked form that
//! pages, API answers and logs show instead of the URL or the password.

use std::str::FromStr;

use lettre::message::Mailbox;
use reqwest::Url;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::json;

use super::alertmanager::AlertmanagerSettings;
use super::{Notification, NotificationKind};
use crate::alerts::{FieldError, Severity};
use crate::config::{invalid, read_entry, Config, ConfigError, Secret};

/// One destination. In TOML:
///
/// ```toml
/// [[notifications]]
/// id = "ops-slack"
/// name = "Ops on Slack"
/// type = "slack"              # webhook, slack, email or alertmanager
/// url = "https://hooks.slack.com/services/T000/B000/XXXX"
/// min_severity = "warning"    # optional: only warning and critical alerts
/// ```
///
/// `Debug` shows no secret. There is deliberately no `Serialize`: an API answer uses
/// [`NotificationChannel::view`], the database [`NotificationChannel::to_storage_json`].
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct NotificationChannel {
    /// Stable identifier (letters, digits, `-`, `_`, `.`); the delivery log refers to it.
    pub id: String,
    /// What the operator sees in the dashboard.
    pub name: String,
    /// Only alerts of this severity or above; every alert when absent. Tests always go out.
    #[serde(default)]
    pub min_severity: Option<Severity>,
    // Flattened so that the TOML reads `type = "slack"` next to `url`; the variants deny
    // unknown fields, which catches typos in the outer fields too.
    #[serde(flatten)]
    pub kind: ChannelKind,
}

/// What kind of receiver, with its settings; `type` in TOML and JSON.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase", deny_unknown_fields)]
pub enum ChannelKind {
    /// Receives the JSON body documented in the module docs.
    Webhook {
        #[serde(deserialize_with = "secret")]
        url: Secret,
    },
    /// A Slack-compatible incoming webhook, whose URL is the token.
    Slack {
        #[serde(deserialize_with = "secret")]
        url: Secret,
    },
    Email(EmailSettings),
    /// Prometheus Alertmanager's API v2; see `alertmanager`.
    Alertmanager(AlertmanagerSettings),
}

/// An SMTP relay and who gets the mail.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EmailSettings {
    /// The relay's host name, without scheme or port.
    pub host: String,
    /// 587 for `starttls`, 465 for `tls`, 25 for `none` when absent.
    #[serde(default)]
    pub port: Option<u16>,
    #[serde(default)]
    pub security: SmtpSecurity,
    /// Log in with `user` and `password` (AUTH PLAIN or LOGIN, as the server offers); both or neither.
    #[serde(default)]
    pub user: Option<String>,
    #[serde(default, deserialize_with = "optional_secret")]
    pub password: Option<Secret>,
    /// The sender, `warren@example.com` or `Warren <warren@example.com>`.
    pub from: String,
    /// At least one recipient, in the same forms as `from`.
    pub to: Vec<String>,
}

/// How the SMTP connection is protected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SmtpSecurity {
    /// Plain connection upgraded with STARTTLS, which must succeed (port 587).
    #[default]
    Starttls,
    /// TLS from the first byte (port 465).
    Tls,
    /// No encryption, for a relay on the same host or network; refused with a password.
    None,
}

impl SmtpSecurity {
    pub fn as_str(self) -> &'static str {
        match self {
            SmtpSecurity::Starttls => "starttls",
            SmtpSecurity::Tls => "tls",
            SmtpSecurity::None => "none",
        }
    }
}

impl EmailSettings {
    /// The configured port, or the usual one for the security mode.
    pub fn port(&self) -> u16 {
        self.port.unwrap_or(match self.security {
            SmtpSecurity::Starttls => 587,
            SmtpSecurity::Tls => 465,
            SmtpSecurity::None => 25,
        })
    }
}

/// A channel as pages and API answers show it: no URL, no password.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct ChannelView {
    pub id: String,
    pub name: String,
    #[serde(rename = "type")]
    #[schema(value_type = String)]
    pub kind: &'static str,
    /// See [`NotificationChannel::display_target`].
    pub target: String,
    pub min_severity: Option<Severity>,
}

impl NotificationChannel {
    /// The channels of the file (`[[notifications]]`, secrets already read from where they are
    /// named), read where warren starts (`warren::Wings`): each checked, ids unique.
    pub fn from_config(config: &Config) -> Result<Vec<NotificationChannel>, ConfigError> {
        let mut channels: Vec<NotificationChannel> = Vec::with_capacity(config.notifications.len());
        for (i, entry) in config.notifications.iter().enumerate() {
            let channel: NotificationChannel = read_entry("notifications", i, entry)?;
            if let Some(e) = channel.validate().into_iter().next() {
                return Err(invalid(format!("notifications[{i}].{}", e.field), e.message));
            }
            if channels.iter().any(|c| c.id == channel.id) {
                return Err(invalid(format!("notifications[{i}].id"), format!("{:?} is used twice", channel.id)));
            }
            channels.push(channel);
        }
        Ok(channels)
    }

    /// `webhook`, `slack`, `email` or `alertmanager`, as written in `type`.
    pub fn type_name(&self) -> &'static str {
        match self.kind {
            ChannelKind::Webhook { .. } => "webhook",
            ChannelKind::Slack { .. } => "slack",
            ChannelKind::Email(_) => "email",
            ChannelKind::Alertmanager(_) => "alertmanager",
        }
    }

    /// Whether this channel is told about `n`: tests always, alerts from its `min_severity` up.
    pub fn wants(&self, n: &Notification) -> bool {
        n.kind == NotificationKind::Test || self.min_severity.is_none_or(|min| n.severity >= min)
    }

    /// Where the channel sends, with nothing secret: scheme and host of a URL (the path and
    /// query, where tokens live, become `…`), or the recipients and relay of an email channel.
    pub fn display_target(&self) -> String {
        match &self.kind {
            ChannelKind::Webhook { url }
            | ChannelKind::Slack { url }
            | ChannelKind::Alertmanager(AlertmanagerSettings { url, .. }) => masked_url(url.expose()),
            ChannelKind::Email(email) => {
                format!("{} via {}:{} ({})", email.to.join(", "), email.host, email.port(), email.security.as_str())
            }
        }
    }

    pub fn view(&self) -> ChannelView {
        ChannelView {
            id: self.id.clone(),
            name: self.name.clone(),
            kind: self.type_name(),
            target: self.display_target(),
            min_severity: self.min_severity,
        }
    }

    /// The channel as JSON that deserializes back to it, secrets included: for the database
    /// only, never for an API answer or a log.
    pub fn to_storage_json(&self) -> serde_json::Value {
        let mut stored = match &self.kind {
            ChannelKind::Webhook { url } => json!({"type": "webhook", "url": url.expose()}),
            ChannelKind::Slack { url } => json!({"type": "slack", "url": url.expose()}),
            ChannelKind::Email(email) => json!({
                "type": "email",
                "host": email.host,
                "port": email.port,
                "security": email.security,
                "user": email.user,
                "password": email.password.as_ref().map(Secret::expose),
                "from": email.from,
                "to": email.to,
            }),
            ChannelKind::Alertmanager(am) => json!({
                "type": "alertmanager",
                "url": am.url.expose(),
                "labels": am.labels,
                "resend_secs": am.resend_secs,
            }),
        };
        stored["id"] = json!(self.id);
        stored["name"] = json!(self.name);
        stored["min_severity"] = json!(self.min_severity);
        stored
    }

    /// `text` with every secret of this channel replaced by `…`: for error messages, which may
    /// quote a receiver's answer that echoes the request.
    pub(super) fn scrub(&self, text: &str) -> String {
        let mut secrets: Vec<String> = Vec::new();
        match &self.kind {
            ChannelKind::Webhook { url }
            | ChannelKind::Slack { url }
            | ChannelKind::Alertmanager(AlertmanagerSettings { url, .. }) => {
                let raw = url.expose();
                secrets.push(raw.to_string());
                if let Some(tail) =
                    raw.split_once("://").and_then(|(_, rest)| rest.find(['/', '?']).map(|i| &rest[i..]))
                {
                    secrets.push(tail.to_string());
                }
                if let Ok(parsed) = Url::parse(raw) {
                    secrets.push(parsed.to_string());
                    secrets.extend(parsed.query().map(str::to_string));
                    secrets.extend(parsed.password().map(str::to_string));
                    if parsed.path() != "/" {
                        secrets.push(parsed.path().to_string());
                    }
                }
            }
            ChannelKind::Email(email) => secrets.extend(email.password.as_ref().map(|p| p.expose().to_string())),
        }
        // Longest first, so that a URL is replaced whole rather than around its path.
        secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
        secrets.into_iter().filter(|s| !s.is_empty()).fold(text.to_string(), |text, secret| text.replace(&secret, "…"))
    }

    /// Every problem with the channel, by field; empty when the channel is valid. Messages never
    /// quote a URL or a password.
    pub fn validate(&self) -> Vec<FieldError> {
        let mut errors = Vec::new();
        let mut error = |field: &'static str, message: String| errors.push(FieldError { field, message });

        for e in crate::alerts::id_and_name_problems(&self.id, &self.name) {
            error(e.field, e.message);
        }

        match &self.kind {
            ChannelKind::Webhook { url } | ChannelKind::Slack { url } => {
                if let Some(problem) = url_problem(url.expose()) {
                    error("url", problem);
                }
            }
            ChannelKind::Email(email) => {
                let host = email.host.trim();
                if host.is_empty() {
                    error("host", "must name the SMTP relay".to_string());
                } else if host.contains("://") || host.contains(['/', ' ', '@']) {
                    error("host", "must be a host name alone, without scheme, user or path".to_string());
                }
                if email.port == Some(0) {
                    error("port", "must be 1 to 65535".to_string());
                }
                match (&email.user, &email.password) {
                    (Some(user), _) if user.is_empty() => error("user", "must not be empty".to_string()),
                    (Some(_), None) => error("password", "is needed with a user".to_string()),
                    (None, Some(_)) => error("user", "is needed with a password".to_string()),
                    _ => {}
                }
                if email.password.is_some() && email.security == SmtpSecurity::None {
                    error(
                        "security",
                        "must be starttls or tls with a password, which would cross the network in clear".to_string(),
                    );
                }
                if Mailbox::from_str(&email.from).is_err() {
                    error("from", format!("{:?} is not an email address", email.from));
                }
                if email.to.is_empty() {
                    error("to", "must list at least one recipient".to_string());
                }
                if let Some(bad) = email.to.iter().find(|to| Mailbox::from_str(to).is_err()) {
                    error("to", format!("{bad:?} is not an email address"));
                }
            }
            ChannelKind::Alertmanager(am) => {
                let url = url_problem(am.url.expose());
                let url_known_bad = url.is_some();
                if let Some(problem) = url {
                    error("url", problem);
                }
                for e in am.problems().into_iter().filter(|e| !(url_known_bad && e.field == "url")) {
                    error(e.field, e.message);
                }
            }
        }
        errors
    }
}

/// What is wrong with a webhook URL, without quoting it.
fn url_problem(url: &str) -> Option<String> {
    let Ok(parsed) = Url::parse(url) else {
        return Some("is not a URL".to_string());
    };
    if !matches!(parsed.scheme(), "http" | "https") {
        return Some("must start with http:// or https://".to_string());
    }
    if parsed.host_str().is_none_or(str::is_empty) {
        return Some("must name a host".to_string());
    }
    None
}

/// `https://hooks.slack.com/…`: scheme, host and port; anything after them (path, query,
/// fragment, user and password) is where tokens live.
fn masked_url(url: &str) -> String {
    let Ok(parsed) = Url::parse(url) else {
        return "(not a URL)".to_string();
    };
    let port = parsed.port().map(|p| format!(":{p}")).unwrap_or_default();
    let hidden = parsed.path() != "/"
        || parsed.query().is_some()
        || parsed.fragment().is_some()
        || !parsed.username().is_empty()
        || parsed.password().is_some();
    let rest = if hidden { "…" } else { "" };
    format!("{}://{}{port}/{rest}", parsed.scheme(), parsed.host_str().unwrap_or_default())
}

pub(super) fn secret<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Secret, D::Error> {
    String::deserialize(deserializer).map(Secret::new)
}

fn optional_secret<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<Secret>, D::Error> {
    Ok(Option::<String>::deserialize(deserializer)?.map(Secret::new))
}

#[cfg(test)]
mod tests {
    use super::*;

    const SLACK_URL: &str = "https://hooks.slack.com/services/T000/B000/XXXXSECRETXXXX";

    fn from_toml(text: &str) -> Result<NotificationChannel, String> {
        toml::from_str(text).map_err(|e| e.to_string())
    }

    fn slack() -> NotificationChannel {
        NotificationChannel {
            id: "ops".to_string(),
            name: "Ops".to_string(),
            min_severity: None,
            kind: ChannelKind::Slack { url: Secret::new(SLACK_URL) },
        }
    }

    fn email() -> EmailSettings {
        EmailSettings {
            host: "mail.example.com".to_string(),
            port: None,
            security: SmtpSecurity::Starttls,
            user: Some("warren".to_string()),
            password: Some(Secret::new("hunter2hunter2")),
            from: "Warren <warren@example.com>".to_string(),
            to: vec!["ops@example.com".to_string(), "oncall@example.com".to_string()],
        }
    }

    fn fields(channel: &NotificationChannel) -> Vec<&'static str> {
        channel.validate().into_iter().map(|e| e.field).collect()
    }

    #[test]
    fn toml_declares_each_kind_of_channel() {
        let channel = from_toml(&format!(
            "id = \"ops\"\nname = \"Ops\"\ntype = \"slack\"\nurl = \"{SLACK_URL}\"\nmin_severity = \"warning\""
        ))
        .unwrap();
        assert_eq!(channel, NotificationChannel { min_severity: Some(Severity::Warning), ..slack() });

        let channel = from_toml(
            "id = \"mail\"\nname = \"Mail\"\ntype = \"email\"\nhost = \"mail.example.com\"\nuser = \"warren\"\n\
             password = \"hunter2hunter2\"\nfrom = \"Warren <warren@example.com>\"\n\
             to = [\"ops@example.com\", \"oncall@example.com\"]",
        )
        .unwrap();
        assert_eq!(channel.kind, ChannelKind::Email(email()));
        assert!(channel.validate().is_empty(), "{:?}", channel.validate());

        let channel =
            from_toml("id = \"hook\"\nname = \"Hook\"\ntype = \"webhook\"\nurl = \"http://10.0.0.1:9000/in\"").unwrap();
        assert!(channel.validate().is_empty());
    }

    #[test]
    fn toml_declares_an_alertmanager_with_labels_and_it_round_trips() {
        let channel = from_toml(
            "id = \"am\"\nname = \"AM\"\ntype = \"alertmanager\"\nurl = \"http://user:pw@am.example:9093\"\n\
             labels = { team = \"ops\" }",
        )
        .unwrap();
        assert!(channel.validate().is_empty(), "{:?}", channel.validate());
        assert_eq!(channel.type_name(), "alertmanager");
        assert_eq!(channel.display_target(), "http://am.example:9093/…");
        assert!(!format!("{channel:?}").contains("pw@"));
        let ChannelKind::Alertmanager(am) = &channel.kind else { panic!("{channel:?}") };
        assert_eq!((am.labels.get("team").map(String::as_str), am.resend_secs), (Some("ops"), 60));
        let back: NotificationChannel = serde_json::from_value(channel.to_storage_json()).unwrap();
        assert_eq!(back, channel);

        let bad = from_toml("id = \"am\"\nname = \"AM\"\ntype = \"alertmanager\"\nurl = \"am:9093\"").unwrap();
        assert_eq!(fields(&bad), ["url"]);
        let bad =
            from_toml("id = \"am\"\nname = \"AM\"\ntype = \"alertmanager\"\nurl = \"ftp://am/api/v2/alerts\"").unwrap();
        assert_eq!(fields(&bad), ["url"], "one error for the URL");
        let typo = from_toml("id = \"am\"\nname = \"AM\"\ntype = \"alertmanager\"\nurl = \"http://am\"\nlabel = {}");
        assert!(typo.unwrap_err().contains("label"));
    }

    #[test]
    fn toml_typos_and_unknown_types_are_refused() {
        let typo = from_toml(&format!(
            "id = \"a\"\nname = \"A\"\ntype = \"slack\"\nurl = \"{SLACK_URL}\"\nmin_severty = \"info\""
        ));
        assert!(typo.unwrap_err().contains("min_severty"));
        let kind = from_toml("id = \"a\"\nname = \"A\"\ntype = \"teams\"\nurl = \"https://example.com/\"");
        assert!(kind.unwrap_err().contains("teams"));
        let missing = from_toml("id = \"a\"\nname = \"A\"\ntype = \"webhook\"");
        assert!(missing.unwrap_err().contains("url"));
    }

    #[test]
    fn storage_json_round_trips_with_its_secrets() {
        for channel in [slack(), NotificationChannel { kind: ChannelKind::Email(email()), ..slack() }] {
            let stored = channel.to_storage_json();
            let back: NotificationChannel = serde_json::from_value(stored).unwrap();
            assert_eq!(back, channel);
        }
    }

    #[test]
    fn urls_must_be_http_with_a_host() {
        let with_url =
            |url: &str| NotificationChannel { kind: ChannelKind::Webhook { url: Secret::new(url) }, ..slack() };
        assert!(fields(&with_url("https://example.com/hook?token=abc")).is_empty());
        assert!(fields(&with_url("http://user:pw@127.0.0.1:8080/")).is_empty());
        for bad in
            ["ftp://example.com/x", "example.com/hook", "", "https://", "file:///etc/passwd", "javascript:alert(1)"]
        {
            assert_eq!(fields(&with_url(bad)), ["url"], "{bad}");
        }
        // The message never quotes the URL.
        let bad = with_url("ftp://example.com/SECRET");
        assert!(!bad.validate()[0].message.contains("SECRET"));
    }

    #[test]
    fn email_channels_need_a_relay_valid_addresses_and_safe_credentials() {
        let with = |f: fn(&mut EmailSettings)| {
            let mut settings = email();
            f(&mut settings);
            NotificationChannel { kind: ChannelKind::Email(settings), ..slack() }
        };
        assert!(fields(&with(|_| {})).is_empty());
        assert_eq!(fields(&with(|e| e.to.clear())), ["to"]);
        assert_eq!(fields(&with(|e| e.to.push("not an address".to_string()))), ["to"]);
        assert_eq!(fields(&with(|e| e.from = "warren".to_string())), ["from"]);
        assert_eq!(fields(&with(|e| e.host = "smtp://mail.example.com".to_string())), ["host"]);
        assert_eq!(fields(&with(|e| e.host = " ".to_string())), ["host"]);
        assert_eq!(fields(&with(|e| e.port = Some(0))), ["port"]);
        assert_eq!(fields(&with(|e| e.password = None)), ["password"]);
        assert_eq!(fields(&with(|e| e.user = None)), ["user"]);
        assert_eq!(fields(&with(|e| e.security = SmtpSecurity::None)), ["security"]);
        assert!(fields(&with(|e| {
            e.security = SmtpSecurity::None;
            e.user = None;
            e.password = None;
        }))
        .is_empty());
    }

    #[test]
    fn ids_and_names_are_checked_like_rules() {
        assert_eq!(fields(&NotificationChannel { id: "a b".to_string(), ..slack() }), ["id"]);
        assert_eq!(fields(&NotificationChannel { id: String::new(), ..slack() }), ["id"]);
        assert_eq!(fields(&NotificationChannel { name: "  ".to_string(), ..slack() }), ["name"]);
    }

    #[test]
    fn targets_show_scheme_and_host_only() {
        assert_eq!(slack().display_target(), "https://hooks.slack.com/…");
        let webhook =
            |url: &str| NotificationChannel { kind: ChannelKind::Webhook { url: Secret::new(url) }, ..slack() };
        assert_eq!(webhook("http://127.0.0.1:9000/").display_target(), "http://127.0.0.1:9000/");
        assert_eq!(webhook("https://example.com/?token=abc").display_target(), "https://example.com/…");
        assert_eq!(webhook("https://user:pw@example.com/").display_target(), "https://example.com/…");
        assert_eq!(webhook("nonsense").display_target(), "(not a URL)");
        let mail = NotificationChannel { kind: ChannelKind::Email(email()), ..slack() };
        assert_eq!(mail.display_target(), "ops@example.com, oncall@example.com via mail.example.com:587 (starttls)");
        let view = serde_json::to_string(&mail.view()).unwrap();
        assert!(!view.contains("hunter2"), "{view}");
    }

    #[test]
    fn debug_shows_no_secret() {
        let debug = format!("{:?}", slack());
        assert!(!debug.contains("SECRET"), "{debug}");
        let debug = format!("{:?}", NotificationChannel { kind: ChannelKind::Email(email()), ..slack() });
        assert!(!debug.contains("hunter2"), "{debug}");
    }

    #[test]
    fn scrub_removes_the_url_its_path_and_the_password() {
        let channel = slack();
        let text = format!("answer: no such hook {SLACK_URL} (path /services/T000/B000/XXXXSECRETXXXX)");
        let scrubbed = channel.scrub(&text);
        assert!(!scrubbed.contains("SECRET"), "{scrubbed}");
        assert_eq!(scrubbed, "answer: no such hook … (path …)");
        let mail = NotificationChannel { kind: ChannelKind::Email(email()), ..slack() };
        assert_eq!(mail.scrub("535 bad password hunter2hunter2"), "535 bad password …");
    }

    #[test]
    fn severity_filter_lets_tests_through() {
        let channel = NotificationChannel { min_severity: Some(Severity::Critical), ..slack() };
        let at = chrono::Utc::now();
        let mut n = Notification::test(at);
        assert!(channel.wants(&n));
        n.kind = NotificationKind::Firing;
        assert!(!channel.wants(&n));
        n.severity = Severity::Critical;
        assert!(channel.wants(&n));
    }
}
