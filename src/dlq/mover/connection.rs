//! The mover's AMQP connection: to one vhost, with the broker's credentials and its AMQP TLS;
//! names as AMQP takes them; and the error every reader and writer of a queue reports.

use std::sync::Arc;
use std::time::Duration;

use lapin::types::ShortString;
use lapin::uri::AMQPUri;
use lapin::{Connection, ConnectionProperties};

use crate::config::BrokerConfig;

#[derive(Debug, thiserror::Error)]
pub enum MoveError {
    #[error("cannot connect to the broker over AMQP: {0}")]
    Connect(String),
    #[error("AMQP error: {}", amqp_words(.0))]
    Amqp(#[from] lapin::Error),
    #[error("{0}")]
    Refused(String),
}

/// lapin's words, with what a closed channel most often means: the broker closes a channel
/// that makes a publish or read its user may not make, and the operation that meets the closed
/// channel reports only its state, while the broker's reason went to whichever call was in
/// flight (measured: either is what the job sees, by a race).
fn amqp_words(e: &lapin::Error) -> String {
    match e.kind() {
        lapin::ErrorKind::InvalidChannelState(..) => format!(
            "{e}: the broker closed the channel, most often because it refused a publish or read warren's user \
             may not make (write permission on the target's exchange, amq.default for a queue; read on the \
             source); the broker's log names the reason"
        ),
        _ => e.to_string(),
    }
}

/// `name` (a queue, exchange or routing key) as an AMQP short string, or why it cannot be one:
/// lapin's conversion panics past 255 bytes, and names come from URLs and forms.
pub fn short_name(what: &str, name: &str) -> Result<ShortString, MoveError> {
    ShortString::try_new(name)
        .map_err(|_| MoveError::Refused(format!("{what} is {} bytes long; an AMQP name holds at most 255", name.len())))
}

/// Connects to `vhost` with the broker's credentials. Over `amqps://` with the broker's AMQP
/// TLS (`tls::EndpointTls`): the same trust store as its HTTP clients, not lapin's default (the
/// operating system's store), and the client certificate when one is set.
pub async fn connect(broker: &BrokerConfig, vhost: &str) -> Result<Connection, MoveError> {
    use lapin::tcp::{AMQPUriTcpExt as _, RustlsConnector};
    let mut uri: AMQPUri = broker.amqp_url.parse().map_err(|e: String| {
        MoveError::Connect(format!("amqp_url is not valid: {}", e.replace(&broker.amqp_url, "<url>")))
    })?;
    uri.vhost = vhost.to_string();
    uri.authority.userinfo.username = broker.user.clone();
    uri.authority.userinfo.password = broker.password.expose().to_string();
    let properties = ConnectionProperties::default().with_connection_name("warren-dlq-mover".into());
    let tls = broker.tls.amqp.clone();
    let connector = Arc::new(RustlsConnector::from(tls.shared_config()));
    let runtime = lapin::runtime::default_runtime()?;
    let (host, port, amqps) =
        (uri.authority.host.clone(), uri.authority.port, uri.scheme == lapin::uri::AMQPScheme::AMQPS);
    // What lapin's own `connect_with_config` does (connect, then the TLS handshake, on the
    // runtime), with warren's rustls configuration instead of lapin's default one.
    let connected = Connection::connector(
        uri,
        runtime,
        async move |uri: AMQPUri, runtime| {
            let amqps = uri.scheme == lapin::uri::AMQPScheme::AMQPS;
            let plain = AMQPUri { scheme: lapin::uri::AMQPScheme::AMQP, ..uri.clone() };
            let stream = plain.connect_async(&runtime).await?;
            if !amqps {
                return Ok(stream);
            }
            Ok(stream.into_rustls(&connector, &uri.authority.host).await?)
        },
        properties,
    );
    let error = match tokio::time::timeout(Duration::from_secs(10), connected).await {
        Err(_) => return Err(MoveError::Connect(format!("{} timed out", broker.amqp_url))),
        Ok(Ok(connection)) => return Ok(connection),
        Ok(Err(error)) => error,
    };
    let problem = match tls.explain(&error) {
        Some(problem) => Some(problem),
        None if amqps && matches!(error.kind(), lapin::ErrorKind::IOError(_)) => tls.diagnose(&host, port).await,
        None => None,
    };
    Err(MoveError::Connect(format!("{}: {}", broker.amqp_url, problem.unwrap_or_else(|| error.to_string()))))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// lapin 4 takes names as `ShortString`, whose conversion from `&str` panics past 255
    /// bytes: a name from a URL or a form is checked instead, with a reason.
    #[test]
    fn a_name_longer_than_amqp_allows_is_refused_with_a_reason() {
        assert_eq!(short_name("the queue", &"q".repeat(255)).unwrap().as_str().len(), 255);
        let refused = short_name("the queue", &"q".repeat(256)).unwrap_err().to_string();
        assert_eq!(refused, "the queue is 256 bytes long; an AMQP name holds at most 255");
    }
}
