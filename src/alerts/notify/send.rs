//! One attempt to deliver one notification on one channel, bounded by a timeout. Errors never
//! carry the channel's URL or password: reqwest puts the URL in its errors, so it is stripped,
//! and every message is scrubbed of the channel's secrets before anyone sees it.

use std::error::Error as _;
use std::time::Duration;

use lettre::transport::smtp::authentication::Credentials;
use lettre::transport::smtp::client::{Tls, TlsParameters};
use lettre::{AsyncSmtpTransport, AsyncTransport, Tokio1Executor};
use serde::Serialize;

use super::alertmanager::{self, AlertmanagerSettings};
use super::channel::{ChannelKind, EmailSettings, NotificationChannel, SmtpSecurity};
use super::{message, Notification};
use crate::config::Secret;

/// How long one attempt may take, connection included, unless the policy says otherwise.
pub const DEFAULT_ATTEMPT_TIMEOUT: Duration = Duration::from_secs(10);

/// How much of a failed HTTP answer's body an error quotes: enough for Slack's
/// `invalid_token` or a proxy's error line, not a whole error page.
const BODY_EXCERPT_BYTES: usize = 300;

/// A notification the receiver accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Delivered {
    /// The receiver's 2xx status; `None` for email.
    pub http_status: Option<u16>,
}

/// Why an attempt failed. The messages are safe to show and log: no URL, no password.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DeliveryError {
    /// The receiver answered, with a status other than 2xx.
    #[error("the receiver answered HTTP {status}{}", excerpt(.body))]
    Status { status: u16, body: String },
    #[error("no answer within {} s", .0.as_secs_f64())]
    Timeout(Duration),
    /// Connection refused, DNS, TLS, a reset connection.
    #[error("{0}")]
    Transport(String),
    #[error("SMTP: {message}")]
    Smtp { message: String, permanent: bool },
    /// The channel's settings cannot make a message (an address that does not parse).
    #[error("{0}")]
    Invalid(String),
}

/// The answer's body on one line, for a log table row.
fn excerpt(body: &str) -> String {
    let words: Vec<&str> = body.split_whitespace().collect();
    if words.is_empty() {
        String::new()
    } else {
        format!(": {}", words.join(" "))
    }
}

impl DeliveryError {
    pub fn http_status(&self) -> Option<u16> {
        match self {
            DeliveryError::Status { status, .. } => Some(*status),
            _ => None,
        }
    }

    /// Whether trying again cannot help: a 4xx answer says the request itself is wrong
    /// (a revoked Slack hook answers 403 or 404 for ever), except 408 and 429, which ask to
    /// come back later; an SMTP 5xx reply is final by RFC 5321.
    pub fn is_permanent(&self) -> bool {
        match self {
            DeliveryError::Status { status, .. } => (400..500).contains(status) && !matches!(status, 408 | 429),
            DeliveryError::Smtp { permanent, .. } => *permanent,
            DeliveryError::Invalid(_) => true,
            DeliveryError::Timeout(_) | DeliveryError::Transport(_) => false,
        }
    }

    fn scrubbed(self, channel: &NotificationChannel) -> DeliveryError {
        match self {
            DeliveryError::Status { status, body } => DeliveryError::Status { status, body: channel.scrub(&body) },
            DeliveryError::Transport(message) => DeliveryError::Transport(channel.scrub(&message)),
            DeliveryError::Smtp { message, permanent } => {
                DeliveryError::Smtp { message: channel.scrub(&message), permanent }
            }
            DeliveryError::Invalid(message) => DeliveryError::Invalid(channel.scrub(&message)),
            timeout @ DeliveryError::Timeout(_) => timeout,
        }
    }
}

/// Makes one attempt to deliver `n` on `channel`, giving up after `timeout`. `http` is the
/// process's shared client; email opens one SMTP connection per message.
pub async fn send(
    http: &reqwest::Client,
    channel: &NotificationChannel,
    n: &Notification,
    timeout: Duration,
) -> Result<Delivered, DeliveryError> {
    let key = n.idempotency_key(&channel.id);
    let attempt = async {
        match &channel.kind {
            ChannelKind::Webhook { url } => post_json(http, url, &message::webhook_body(n, &key), Some(&key)).await,
            // Slack ignores the header; a proxy or a compatible receiver may use it.
            ChannelKind::Slack { url } => post_json(http, url, &message::slack_body(n), Some(&key)).await,
            ChannelKind::Email(settings) => send_email(settings, n, &key, timeout).await,
            // Alertmanager needs no key: it merges an alert posted twice by its labels.
            ChannelKind::Alertmanager(am) => {
                let body = alertmanager::body(am, std::slice::from_ref(n), chrono::Utc::now());
                post_json(http, &am.alerts_url(), &body, None).await
            }
        }
    };
    let result = tokio::time::timeout(timeout, attempt).await.unwrap_or(Err(DeliveryError::Timeout(timeout)));
    result.map_err(|e| e.scrubbed(channel))
}

/// One attempt to re-send `alerts` (still firing) to an Alertmanager in one request, so that
/// they stay active there; see `dispatch` for when.
pub(super) async fn resend_alertmanager(
    http: &reqwest::Client,
    channel: &NotificationChannel,
    am: &AlertmanagerSettings,
    alerts: &[Notification],
    timeout: Duration,
) -> Result<Delivered, DeliveryError> {
    let body = alertmanager::body(am, alerts, chrono::Utc::now());
    let result = tokio::time::timeout(timeout, post_json(http, &am.alerts_url(), &body, None)).await;
    result.unwrap_or(Err(DeliveryError::Timeout(timeout))).map_err(|e| e.scrubbed(channel))
}

/// The header that carries [`Notification::idempotency_key`], as Stripe and the IETF draft
/// (draft-ietf-httpapi-idempotency-key-header) name it.
pub const IDEMPOTENCY_KEY_HEADER: &str = "Idempotency-Key";

async fn post_json(
    http: &reqwest::Client,
    url: &Secret,
    body: &serde_json::Value,
    idempotency_key: Option<&str>,
) -> Result<Delivered, DeliveryError> {
    let mut request = http.post(url.expose()).json(body);
    if let Some(key) = idempotency_key {
        request = request.header(IDEMPOTENCY_KEY_HEADER, key);
    }
    let mut response = request.send().await.map_err(transport_error)?;
    let status = response.status();
    if status.is_success() {
        return Ok(Delivered { http_status: Some(status.as_u16()) });
    }
    // Only the start of the body: an error page can be large, and the attempt's timeout
    // bounds the reading anyway.
    let mut body = Vec::new();
    while body.len() < BODY_EXCERPT_BYTES {
        match response.chunk().await {
            Ok(Some(chunk)) => body.extend_from_slice(&chunk),
            Ok(None) | Err(_) => break,
        }
    }
    body.truncate(BODY_EXCERPT_BYTES);
    let body = String::from_utf8_lossy(&body).into_owned();
    Err(DeliveryError::Status { status: status.as_u16(), body })
}

/// reqwest's message and its causes ("error sending request: client error (Connect): tcp
/// connect error: Connection refused"), without the URL reqwest would add.
fn transport_error(e: reqwest::Error) -> DeliveryError {
    let e = e.without_url();
    let mut message = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        message.push_str(": ");
        message.push_str(&cause.to_string());
        source = cause.source();
    }
    DeliveryError::Transport(message)
}

async fn send_email(
    settings: &EmailSettings,
    n: &Notification,
    idempotency_key: &str,
    timeout: Duration,
) -> Result<Delivered, DeliveryError> {
    let email = message::email(settings, n, idempotency_key).map_err(DeliveryError::Invalid)?;
    let tls = || TlsParameters::new(settings.host.clone()).map_err(smtp_error);
    let tls = match settings.security {
        SmtpSecurity::Starttls => Tls::Required(tls()?),
        SmtpSecurity::Tls => Tls::Wrapper(tls()?),
        SmtpSecurity::None => Tls::None,
    };
    // `builder_dangerous` only means "no TLS preset": the TLS mode is set just below.
    let mut transport = AsyncSmtpTransport::<Tokio1Executor>::builder_dangerous(&settings.host)
        .port(settings.port())
        .tls(tls)
        .timeout(Some(timeout));
    if let (Some(user), Some(password)) = (&settings.user, &settings.password) {
        transport = transport.credentials(Credentials::new(user.clone(), password.expose().to_string()));
    }
    transport.build().send(email).await.map_err(smtp_error)?;
    Ok(Delivered { http_status: None })
}

fn smtp_error(e: lettre::transport::smtp::Error) -> DeliveryError {
    DeliveryError::Smtp { message: e.to_string(), permanent: e.is_permanent() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_errors_are_final_except_timeouts_and_rate_limits() {
        let status = |status| DeliveryError::Status { status, body: String::new() };
        assert!(status(400).is_permanent());
        assert!(status(404).is_permanent());
        assert!(!status(408).is_permanent());
        assert!(!status(429).is_permanent());
        assert!(!status(500).is_permanent());
        assert!(!status(503).is_permanent());
        assert!(!DeliveryError::Timeout(DEFAULT_ATTEMPT_TIMEOUT).is_permanent());
        assert!(!DeliveryError::Transport("connection refused".to_string()).is_permanent());
        assert!(DeliveryError::Invalid("bad address".to_string()).is_permanent());
    }

    #[test]
    fn messages_quote_the_start_of_the_answer() {
        let e = DeliveryError::Status { status: 403, body: "invalid_token\n".to_string() };
        assert_eq!(e.to_string(), "the receiver answered HTTP 403: invalid_token");
        assert_eq!(e.http_status(), Some(403));
        let e = DeliveryError::Status { status: 502, body: "<html>\n  <h1>Bad gateway</h1>\n</html>".to_string() };
        assert_eq!(e.to_string(), "the receiver answered HTTP 502: <html> <h1>Bad gateway</h1> </html>");
        let e = DeliveryError::Status { status: 500, body: " \n".to_string() };
        assert_eq!(e.to_string(), "the receiver answered HTTP 500");
        assert_eq!(DeliveryError::Timeout(Duration::from_millis(1500)).to_string(), "no answer within 1.5 s");
    }
}
