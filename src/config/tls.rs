//! TLS to a broker: the trust store, the client certificate and the name checked for each of its
//! endpoints (management API, Prometheus, AMQP), built once when the configuration is read; and
//! every TLS failure put in words an operator can act on.
//!
//! One trust store for every client of a broker: reqwest (management, Prometheus) and lapin
//! (AMQP) are both handed the rustls configuration built here, never their own defaults (reqwest
//! would trust its bundled roots, lapin the operating system's store). The roots are the public
//! web CAs (webpki-roots, as reqwest trusted before) plus the certificates of `ca_file`: a
//! private CA is added to them, it does not replace them. Nothing here turns verification off.

use std::path::PathBuf;
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{AlertDescription, CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
use serde::{Deserialize, Serialize};

/// `[brokers.tls]` as the file gives it: settings for all three endpoints, and per endpoint
/// (`[brokers.tls.amqp]`, say) the ones that differ.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct TlsFile {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ca_file: Option<PathBuf>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client_cert_file: Option<PathBuf>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client_key_file: Option<PathBuf>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server_name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub management: Option<TlsFileEndpoint>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prometheus: Option<TlsFileEndpoint>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub amqp: Option<TlsFileEndpoint>,
}

/// The four settings of one endpoint, each optional.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct TlsFileEndpoint {
    /// PEM file of CA certificates trusted besides the public web CAs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ca_file: Option<PathBuf>,
    /// PEM certificate (chain) warren presents to a broker that asks for one (mutual TLS).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client_cert_file: Option<PathBuf>,
    /// PEM private key of `client_cert_file` (PKCS#8, PKCS#1 or SEC1).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client_key_file: Option<PathBuf>,
    /// The name the broker's certificate must carry, when it is not the URL's host.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server_name: Option<String>,
}

/// One of a broker's endpoints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoint {
    Management,
    Prometheus,
    Amqp,
}

impl Endpoint {
    pub fn key(self) -> &'static str {
        match self {
            Endpoint::Management => "management",
            Endpoint::Prometheus => "prometheus",
            Endpoint::Amqp => "amqp",
        }
    }
}

/// A setting in force for one endpoint and the key it was set under (`tls.ca_file` or
/// `tls.amqp.ca_file`), so that a message names the key to change.
#[derive(Debug, Clone, PartialEq)]
pub struct Setting<T> {
    pub key: String,
    pub value: T,
}

/// An invalid TLS setting: its key under the broker (`tls.ca_file`) and what is wrong.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{key}: {problem}")]
pub struct TlsSetupError {
    pub key: String,
    pub problem: String,
}

/// A broker's TLS, one rustls configuration per endpoint.
#[derive(Clone)]
pub struct BrokerTls {
    /// As the file gave it (`check-config` prints it back).
    pub file: TlsFile,
    pub management: EndpointTls,
    pub prometheus: EndpointTls,
    pub amqp: EndpointTls,
}

impl std::fmt::Debug for BrokerTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("BrokerTls").field(&self.file).finish()
    }
}

impl BrokerTls {
    /// Reads the files each endpoint needs; an error names the setting and the file.
    pub fn build(file: TlsFile) -> Result<BrokerTls, TlsSetupError> {
        let endpoint = |endpoint: Endpoint, own: &Option<TlsFileEndpoint>| {
            let own = own.clone().unwrap_or_default();
            let pick = |name: &str, own: Option<PathBuf>, all: &Option<PathBuf>| match own {
                Some(value) => Some(Setting { key: format!("tls.{}.{name}", endpoint.key()), value }),
                None => all.clone().map(|value| Setting { key: format!("tls.{name}"), value }),
            };
            let server_name = match own.server_name {
                Some(value) => Some(Setting { key: format!("tls.{}.server_name", endpoint.key()), value }),
                None => file.server_name.clone().map(|value| Setting { key: "tls.server_name".into(), value }),
            };
            let settings = TlsSettings {
                ca_file: pick("ca_file", own.ca_file, &file.ca_file),
                client_cert_file: pick("client_cert_file", own.client_cert_file, &file.client_cert_file),
                client_key_file: pick("client_key_file", own.client_key_file, &file.client_key_file),
                server_name,
            };
            EndpointTls::build(endpoint, settings)
        };
        Ok(BrokerTls {
            management: endpoint(Endpoint::Management, &file.management)?,
            prometheus: endpoint(Endpoint::Prometheus, &file.prometheus)?,
            amqp: endpoint(Endpoint::Amqp, &file.amqp)?,
            file,
        })
    }
}

/// The settings in force for one endpoint.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TlsSettings {
    pub ca_file: Option<Setting<PathBuf>>,
    pub client_cert_file: Option<Setting<PathBuf>>,
    pub client_key_file: Option<Setting<PathBuf>>,
    pub server_name: Option<Setting<String>>,
}

/// One endpoint's TLS, ready for its clients.
#[derive(Clone)]
pub struct EndpointTls {
    pub endpoint: Endpoint,
    pub settings: TlsSettings,
    config: Arc<ClientConfig>,
}

impl EndpointTls {
    pub fn build(endpoint: Endpoint, settings: TlsSettings) -> Result<EndpointTls, TlsSetupError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut roots = RootCertStore { roots: webpki_roots::TLS_SERVER_ROOTS.to_vec() };
        if let Some(ca) = &settings.ca_file {
            for (i, cert) in read_certificates(ca)?.into_iter().enumerate() {
                roots.add(cert).map_err(|e| TlsSetupError {
                    key: ca.key.clone(),
                    problem: format!(
                        "certificate {} in {} is not a usable CA certificate: {e}",
                        i + 1,
                        ca.value.display()
                    ),
                })?;
            }
        }
        let roots = Arc::new(roots);
        let builder = ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsSetupError { key: "tls".into(), problem: e.to_string() })?;
        let builder = match &settings.server_name {
            None => builder.with_root_certificates(roots),
            Some(name) => {
                let expected = ServerName::try_from(name.value.clone()).map_err(|_| TlsSetupError {
                    key: name.key.clone(),
                    problem: format!("{:?} is not a host name or IP address", name.value),
                })?;
                let inner = WebPkiServerVerifier::builder_with_provider(roots, provider)
                    .build()
                    .map_err(|e| TlsSetupError { key: name.key.clone(), problem: e.to_string() })?;
                builder.dangerous().with_custom_certificate_verifier(Arc::new(NameChecked { inner, expected }))
            }
        };
        let config = match (&settings.client_cert_file, &settings.client_key_file) {
            (None, None) => builder.with_no_client_auth(),
            (Some(cert), None) => {
                return Err(TlsSetupError {
                    key: cert.key.clone(),
                    problem: "is set without client_key_file (the certificate's private key)".into(),
                })
            }
            (None, Some(key)) => {
                return Err(TlsSetupError {
                    key: key.key.clone(),
                    problem: "is set without client_cert_file (the certificate it belongs to)".into(),
                })
            }
            (Some(cert), Some(key)) => {
                let chain = read_certificates(cert)?;
                let private_key = read_private_key(key)?;
                builder.with_client_auth_cert(chain, private_key).map_err(|e| TlsSetupError {
                    key: key.key.clone(),
                    problem: match e {
                        rustls::Error::InconsistentKeys(_) => format!(
                            "the key in {} does not match the certificate in {} ({})",
                            key.value.display(),
                            cert.value.display(),
                            cert.key
                        ),
                        e => format!("{} with {} cannot be used: {e}", key.value.display(), cert.value.display()),
                    },
                })?
            }
        };
        Ok(EndpointTls { endpoint, settings, config: Arc::new(config) })
    }

    /// The rustls configuration (for reqwest's `use_preconfigured_tls`, which takes it by value).
    pub fn client_config(&self) -> ClientConfig {
        (*self.config).clone()
    }

    /// The same, shared (for lapin's connector).
    pub fn shared_config(&self) -> Arc<ClientConfig> {
        self.config.clone()
    }

    /// What a failed connection's TLS problem was, in words an operator can act on; `None` when
    /// `error` has no TLS failure among its causes.
    pub fn explain(&self, error: &(dyn std::error::Error + 'static)) -> Option<String> {
        find_rustls_error(error).map(|e| self.explain_rustls(e))
    }

    /// What a failure without a TLS cause of its own (a broken pipe, a reset) had to do with TLS,
    /// found by a handshake of its own with `host:port` and a read after it. In TLS 1.3 the
    /// client's handshake ends before the broker has checked the client's certificate: a
    /// broker that refuses it (or requires one) sends its alert and closes, and the client
    /// that writes first sees only the closed connection. The alert is still there to be read.
    /// `None` when the handshake and the read show no TLS failure (a read that waits is fine).
    pub async fn diagnose(&self, host: &str, port: u16) -> Option<String> {
        let config = self.config.clone();
        let (host, address) = (host.to_string(), format!("{host}:{port}"));
        let found = tokio::task::spawn_blocking(move || probe(config, &host, &address)).await.ok()??;
        Some(self.explain_rustls(&found))
    }

    fn explain_rustls(&self, error: &rustls::Error) -> String {
        let s = &self.settings;
        let endpoint = self.endpoint.key();
        let set_hint = |name: &str| format!("tls.{name} (or tls.{endpoint}.{name} for this endpoint only)");
        match error {
            rustls::Error::InvalidCertificate(problem) => match problem {
                CertificateError::UnknownIssuer | CertificateError::BadSignature => match &s.ca_file {
                    None => format!(
                        "TLS: unknown issuer: the broker's certificate is not signed by a CA warren trusts; set {} \
                         to the PEM file of the CA that signed it (warren trusts the public web CAs plus that file)",
                        set_hint("ca_file")
                    ),
                    Some(ca) => format!(
                        "TLS: unknown issuer: the broker's certificate is signed neither by a CA in {} ({}) nor by a \
                         public web CA; point {} at the CA that signed it (with its intermediate CAs)",
                        ca.value.display(),
                        ca.key,
                        ca.key
                    ),
                },
                CertificateError::Expired => {
                    "TLS: the broker's certificate has expired: renew it on the broker".to_string()
                }
                CertificateError::ExpiredContext { not_after, .. } => format!(
                    "TLS: the broker's certificate expired on {}: renew it on the broker",
                    date(*not_after)
                ),
                CertificateError::NotValidYet => {
                    "TLS: the broker's certificate is not valid yet (check the clocks)".to_string()
                }
                CertificateError::NotValidYetContext { not_before, .. } => format!(
                    "TLS: the broker's certificate is not valid before {} (check the clocks)",
                    date(*not_before)
                ),
                CertificateError::NotValidForName => self.wrong_name(None, None),
                CertificateError::NotValidForNameContext { expected, presented } => {
                    self.wrong_name(Some(expected), Some(presented))
                }
                CertificateError::Revoked => "TLS: the broker's certificate has been revoked".to_string(),
                other => format!("TLS: the broker's certificate is refused: {other:?}"),
            },
            rustls::Error::AlertReceived(alert) => self.alert(*alert),
            rustls::Error::InvalidMessage(_) => format!(
                "TLS: the {endpoint} endpoint did not answer in TLS (is it a plain listener? then use http:// or amqp://)"
            ),
            other => format!("TLS: {other}"),
        }
    }

    fn wrong_name(&self, expected: Option<&ServerName<'_>>, presented: Option<&Vec<String>>) -> String {
        let names = match presented {
            Some(names) if !names.is_empty() => {
                format!("is for {}", names.iter().map(|n| presented_name(n)).collect::<Vec<_>>().join(", "))
            }
            _ => "does not carry the name asked for".to_string(),
        };
        let asked = expected.map(|e| match e {
            ServerName::DnsName(name) => name.as_ref().to_string(),
            ServerName::IpAddress(ip) => std::net::IpAddr::from(*ip).to_string(),
            _ => format!("{e:?}"),
        });
        match &self.settings.server_name {
            Some(name) => format!(
                "TLS: wrong name: the broker's certificate {names}, not {:?}, the name set in {}; set {} to a name \
                 the certificate carries",
                name.value, name.key, name.key
            ),
            None => format!(
                "TLS: wrong name: the broker's certificate {names}, not {}; use a URL with a name it carries, or set \
                 tls.server_name (or tls.{}.server_name) to one of them",
                asked.map_or_else(|| "the URL's host".to_string(), |a| format!("{a} (the URL's host)")),
                self.endpoint.key()
            ),
        }
    }

    fn alert(&self, alert: AlertDescription) -> String {
        let endpoint = self.endpoint.key();
        let cert = &self.settings.client_cert_file;
        let required = || {
            format!(
                "TLS: client certificate required: the broker asks for a client certificate and warren has none \
                 for the {endpoint} endpoint; set tls.client_cert_file and tls.client_key_file (or under \
                 tls.{endpoint})"
            )
        };
        let refused = |why: &str| match cert {
            Some(cert) => format!(
                "TLS: client certificate refused: the broker refused {} ({}): {why}",
                cert.value.display(),
                cert.key
            ),
            None => required(),
        };
        match alert {
            AlertDescription::CertificateRequired => required(),
            AlertDescription::UnknownCA => {
                refused("it does not trust the CA that signed it (alert unknown_ca); have it signed by a CA in the broker's cacertfile")
            }
            AlertDescription::CertificateExpired => refused("it has expired (alert certificate_expired)"),
            AlertDescription::CertificateRevoked => refused("it has been revoked (alert certificate_revoked)"),
            AlertDescription::BadCertificate
            | AlertDescription::UnsupportedCertificate
            | AlertDescription::CertificateUnknown => {
                refused(&format!("the broker could not verify it (alert {alert:?})"))
            }
            AlertDescription::AccessDenied => refused("the broker verified it but denies access (alert access_denied)"),
            AlertDescription::HandshakeFailure if cert.is_none() => "TLS: the broker ended the handshake (alert \
                 handshake_failure): it may require a client certificate (client certificate required; set \
                 tls.client_cert_file and tls.client_key_file) or share no cipher suite with warren"
                .to_string(),
            other => format!("TLS: the broker ended the handshake with alert {other:?}"),
        }
    }
}

/// Checks the broker's certificate against `server_name` instead of the URL's host; everything
/// else (chain, dates, signatures) is webpki's own verification, unchanged.
#[derive(Debug)]
struct NameChecked {
    inner: Arc<WebPkiServerVerifier>,
    expected: ServerName<'static>,
}

impl ServerCertVerifier for NameChecked {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        _url_host: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        self.inner.verify_server_cert(end_entity, intermediates, &self.expected, ocsp_response, now)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

/// One handshake with `address` and one read after it, each within `PROBE_TIMEOUT`; the rustls
/// error either ended with.
fn probe(config: Arc<ClientConfig>, host: &str, address: &str) -> Option<rustls::Error> {
    use std::io::Read;
    use std::net::ToSocketAddrs;
    let name = ServerName::try_from(host.trim_start_matches('[').trim_end_matches(']').to_string()).ok()?;
    let target = address.to_socket_addrs().ok()?.next()?;
    let tcp = std::net::TcpStream::connect_timeout(&target, PROBE_TIMEOUT).ok()?;
    tcp.set_read_timeout(Some(PROBE_TIMEOUT)).ok()?;
    tcp.set_write_timeout(Some(PROBE_TIMEOUT)).ok()?;
    let connection = rustls::ClientConnection::new(config, name).ok()?;
    let mut stream = rustls::StreamOwned::new(connection, tcp);
    let mut byte = [0u8; 1];
    let error = stream.read(&mut byte).err()?;
    let found = find_rustls_error(&error).cloned();
    found
}

/// Long enough for a broker across a WAN to answer a handshake; the probe runs only after a
/// failure.
const PROBE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(3);

fn read_pem(setting: &Setting<PathBuf>) -> Result<Vec<u8>, TlsSetupError> {
    std::fs::read(&setting.value).map_err(|e| TlsSetupError {
        key: setting.key.clone(),
        problem: format!("cannot read {}: {e}", setting.value.display()),
    })
}

fn read_certificates(setting: &Setting<PathBuf>) -> Result<Vec<CertificateDer<'static>>, TlsSetupError> {
    let bytes = read_pem(setting)?;
    let not_pem = |detail: String| TlsSetupError {
        key: setting.key.clone(),
        problem: format!(
            "{} is not a PEM file of certificates (-----BEGIN CERTIFICATE-----): {detail}",
            setting.value.display()
        ),
    };
    let certs =
        CertificateDer::pem_slice_iter(&bytes).collect::<Result<Vec<_>, _>>().map_err(|e| not_pem(e.to_string()))?;
    if certs.is_empty() {
        return Err(not_pem("it holds none".into()));
    }
    Ok(certs)
}

fn read_private_key(setting: &Setting<PathBuf>) -> Result<PrivateKeyDer<'static>, TlsSetupError> {
    let bytes = read_pem(setting)?;
    PrivateKeyDer::from_pem_slice(&bytes).map_err(|e| TlsSetupError {
        key: setting.key.clone(),
        problem: format!(
            "{} is not a PEM private key (-----BEGIN PRIVATE KEY-----, RSA or EC): {e}",
            setting.value.display()
        ),
    })
}

/// The first rustls error among `error`'s causes. `std::io::Error::source` skips the error it
/// wraps (it returns that error's source), so a wrapped error is looked at through `get_ref`.
fn find_rustls_error<'a>(error: &'a (dyn std::error::Error + 'static)) -> Option<&'a rustls::Error> {
    let mut next = Some(error);
    while let Some(cause) = next {
        if let Some(found) = cause.downcast_ref::<rustls::Error>() {
            return Some(found);
        }
        if let Some(inner) = cause.downcast_ref::<std::io::Error>().and_then(|io| io.get_ref()) {
            let inner: &(dyn std::error::Error + 'static) = inner;
            if let Some(found) = find_rustls_error(inner) {
                return Some(found);
            }
        }
        next = cause.source();
    }
    None
}

/// A name of the certificate as rustls presents it (`DnsName("localhost")`,
/// `IpAddress(127.0.0.1)`), as the operator would write it (`localhost`, `127.0.0.1`).
fn presented_name(name: &str) -> &str {
    let inner = name
        .strip_prefix("DnsName(")
        .or_else(|| name.strip_prefix("IpAddress("))
        .and_then(|rest| rest.strip_suffix(')'))
        .unwrap_or(name);
    inner.trim_matches('"')
}

fn date(t: UnixTime) -> String {
    let secs = i64::try_from(t.as_secs()).unwrap_or(i64::MAX);
    match chrono::DateTime::from_timestamp(secs, 0) {
        Some(t) => t.format("%Y-%m-%d %H:%M:%S UTC").to_string(),
        None => format!("{secs} (unix time)"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn endpoint(settings: TlsSettings) -> EndpointTls {
        let built = EndpointTls::build(Endpoint::Amqp, TlsSettings::default()).expect("no files to read");
        EndpointTls { settings, ..built }
    }

    fn setting<T>(key: &str, value: T) -> Option<Setting<T>> {
        Some(Setting { key: key.to_string(), value })
    }

    /// The rustls error is found below an `io::Error` (whose `source` skips it) and a wrapper.
    #[test]
    fn the_cause_is_found_through_io_errors() {
        #[derive(Debug, thiserror::Error)]
        #[error("connecting failed")]
        struct Wrapper(#[source] std::io::Error);
        let cause = rustls::Error::InvalidCertificate(CertificateError::UnknownIssuer);
        let error = Wrapper(std::io::Error::new(std::io::ErrorKind::InvalidData, cause));
        let said = endpoint(TlsSettings::default()).explain(&error).expect("a TLS problem");
        assert!(said.contains("unknown issuer") && said.contains("tls.amqp.ca_file"), "{said}");
        let plain = Wrapper(std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused"));
        assert_eq!(endpoint(TlsSettings::default()).explain(&plain), None);
    }

    #[test]
    fn a_wrong_name_names_the_certificates_names_and_what_was_asked() {
        let error = rustls::Error::InvalidCertificate(CertificateError::NotValidForNameContext {
            expected: ServerName::try_from("10.0.0.7").unwrap(),
            presented: vec!["DnsName(\"rabbit.prod.example\")".into(), "IpAddress(10.0.0.8)".into()],
        });
        let said = endpoint(TlsSettings::default()).explain(&error).unwrap();
        assert!(said.contains("is for rabbit.prod.example, 10.0.0.8, not 10.0.0.7 (the URL's host)"), "{said}");
        assert!(said.contains("tls.server_name"), "{said}");
    }

    #[test]
    fn alerts_about_the_client_certificate_name_it() {
        let with_cert = endpoint(TlsSettings {
            client_cert_file: setting("tls.amqp.client_cert_file", PathBuf::from("/etc/warren/w.pem")),
            ..Default::default()
        });
        for (alert, why) in [
            (AlertDescription::BadCertificate, "could not verify it"),
            (AlertDescription::UnknownCA, "does not trust the CA"),
            (AlertDescription::CertificateExpired, "expired"),
            (AlertDescription::AccessDenied, "denies access"),
        ] {
            let said = with_cert.explain(&rustls::Error::AlertReceived(alert)).unwrap();
            assert!(said.contains("client certificate refused") && said.contains("/etc/warren/w.pem"), "{said}");
            assert!(said.contains("tls.amqp.client_cert_file") && said.contains(why), "{said}");
        }
        let without = endpoint(TlsSettings::default());
        let said = without.explain(&rustls::Error::AlertReceived(AlertDescription::CertificateRequired)).unwrap();
        assert!(said.contains("client certificate required") && said.contains("tls.client_cert_file"), "{said}");
    }

    #[test]
    fn dates_read_as_utc() {
        assert_eq!(
            date(UnixTime::since_unix_epoch(std::time::Duration::from_secs(1_577_923_200))),
            "2020-01-02 00:00:00 UTC"
        );
    }
}
