//! Authentication by a trusted reverse proxy (oauth2-proxy, Authelia, a corporate SSO gateway)
//! that logs the user in and passes their name in a header. The header is believed only from the
//! configured proxy addresses: anyone else could send it too.

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

use axum::http::{HeaderMap, HeaderName};
use serde::Deserialize;

use super::{check_name, shorten, AuthError, How, Principal, Role};
use crate::config::{invalid, ConfigError, ProxyConfig};

/// A network in CIDR notation (`10.0.0.0/8`, `::1/128`); a bare address is a network of one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(try_from = "String")]
pub struct Cidr {
    network: IpAddr,
    prefix: u8,
}

impl Cidr {
    /// Whether `ip` is in this network. An IPv4 client reaching a dual-stack socket appears as
    /// `::ffff:a.b.c.d`; it is compared as the IPv4 address it is.
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.network, ip.to_canonical()) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => {
                let mask = u32::MAX.checked_shl(32 - u32::from(self.prefix)).unwrap_or(0);
                u32::from(ip) & mask == u32::from(net)
            }
            (IpAddr::V6(net), IpAddr::V6(ip)) => {
                let mask = u128::MAX.checked_shl(128 - u32::from(self.prefix)).unwrap_or(0);
                u128::from(ip) & mask == u128::from(net)
            }
            _ => false,
        }
    }
}

impl FromStr for Cidr {
    type Err = AuthError;

    fn from_str(text: &str) -> Result<Self, AuthError> {
        let invalid = |problem: &str| AuthError::InvalidCidr { text: shorten(text), problem: problem.to_string() };
        let (addr, prefix) = match text.trim().split_once('/') {
            Some((addr, prefix)) => (addr, Some(prefix)),
            None => (text.trim(), None),
        };
        let addr: IpAddr = addr.parse().map_err(|_| invalid("not an IP address"))?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            None => max,
            // Digits only: `str::parse` would also take `+8`.
            Some(p) => match p.parse::<u8>() {
                Ok(n) if n <= max && p.bytes().all(|b| b.is_ascii_digit()) => n,
                _ => return Err(invalid(&format!("the prefix length must be 0 to {max}"))),
            },
        };
        // `::ffff:10.0.0.0/104` is the IPv4 network 10.0.0.0/8 as a dual-stack socket shows it.
        let (addr, prefix) = match addr {
            IpAddr::V6(v6) if prefix >= 96 && v6.to_ipv4_mapped().is_some() => {
                (IpAddr::V4(v6.to_ipv4_mapped().expect("checked")), prefix - 96)
            }
            _ => (addr, prefix),
        };
        // `10.1.2.3/8` is refused rather than read as 10.0.0.0/8: it is more likely a typo in the
        // prefix than a network meant that way, and trusting too much is the worse mistake.
        let network = network_of(addr, prefix);
        if network != addr {
            return Err(invalid(&format!(
                "the address has bits set beyond the prefix; the network is {network}/{prefix}"
            )));
        }
        Ok(Cidr { network, prefix })
    }
}

/// The network address of `addr` with `prefix` bits.
fn network_of(addr: IpAddr, prefix: u8) -> IpAddr {
    match addr {
        IpAddr::V4(v4) => {
            let mask = u32::MAX.checked_shl(32 - u32::from(prefix)).unwrap_or(0);
            IpAddr::V4((u32::from(v4) & mask).into())
        }
        IpAddr::V6(v6) => {
            let mask = u128::MAX.checked_shl(128 - u32::from(prefix)).unwrap_or(0);
            IpAddr::V6((u128::from(v6) & mask).into())
        }
    }
}

impl TryFrom<String> for Cidr {
    type Error = AuthError;

    fn try_from(text: String) -> Result<Self, AuthError> {
        text.parse()
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.network, self.prefix)
    }
}

/// Authentication by a trusted proxy's header.
#[derive(Debug, Clone)]
pub struct ProxyAuth {
    /// The header with the user name, e.g. `X-Forwarded-User` or `Remote-User`.
    pub header: String,
    /// A header with the role (`viewer`, `operator`, `admin`); without it, or when the proxy
    /// sends none, `default_role` applies.
    pub role_header: Option<String>,
    pub default_role: Role,
    /// The proxy's addresses: the headers of anyone else are ignored.
    pub trusted: Vec<Cidr>,
}

impl ProxyAuth {
    /// The auth wing's reading of `[auth.proxy]`: each network, the role and the header names
    /// checked, errors naming the field.
    pub fn from_config(p: &ProxyConfig) -> Result<ProxyAuth, ConfigError> {
        let mut trusted = Vec::with_capacity(p.trusted.len());
        for (i, text) in p.trusted.iter().enumerate() {
            let cidr =
                text.parse().map_err(|e: AuthError| invalid(format!("auth.proxy.trusted[{i}]"), e.to_string()))?;
            trusted.push(cidr);
        }
        let default_role = match &p.default_role {
            None => Role::Viewer,
            Some(text) => text.parse().map_err(|e: AuthError| invalid("auth.proxy.default_role", e.to_string()))?,
        };
        let proxy = ProxyAuth { header: p.header.clone(), role_header: p.role_header.clone(), default_role, trusted };
        proxy.validate().map_err(|e| invalid("auth.proxy", e.to_string()))?;
        Ok(proxy)
    }

    /// Checks what the configuration can get wrong: header names, and at least one trusted network.
    pub fn validate(&self) -> Result<(), AuthError> {
        for name in std::iter::once(&self.header).chain(&self.role_header) {
            HeaderName::from_str(name).map_err(|_| AuthError::InvalidHeader(shorten(name)))?;
        }
        if self.trusted.is_empty() {
            return Err(AuthError::NoTrustedProxy);
        }
        Ok(())
    }

    pub fn is_trusted(&self, peer: IpAddr) -> bool {
        self.trusted.iter().any(|cidr| cidr.contains(peer))
    }

    /// The principal the proxy vouches for; `None` when the peer is not a trusted proxy (the
    /// headers are then ignored), the user header is missing, repeated or not a valid name, or
    /// the role header is repeated or names no role (refused rather than guessed).
    pub fn principal(&self, peer: IpAddr, headers: &HeaderMap) -> Option<Principal> {
        if !self.is_trusted(peer) {
            return None;
        }
        let name = single_value(headers, &self.header)??;
        check_name(name).ok()?;
        let role = match &self.role_header {
            Some(header) => match single_value(headers, header)? {
                Some(text) => text.parse().ok()?,
                None => self.default_role,
            },
            None => self.default_role,
        };
        Some(Principal { name: name.to_string(), role, via: How::Proxy })
    }
}

/// A header's one value, trimmed: `Some(None)` if absent, `None` if repeated or not text.
fn single_value<'a>(headers: &'a HeaderMap, name: &str) -> Option<Option<&'a str>> {
    let mut values = headers.get_all(name).iter();
    let first = values.next();
    if values.next().is_some() {
        return None;
    }
    match first {
        None => Some(None),
        Some(value) => Some(Some(value.to_str().ok()?.trim())),
    }
}

#[cfg(test)]
mod tests {
    use axum::http::HeaderValue;

    use super::*;

    fn cidr(text: &str) -> Cidr {
        text.parse().unwrap_or_else(|e| panic!("{text}: {e}"))
    }

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    /// `[auth.proxy]` of a configuration file, as warren reads it where it starts.
    fn read(toml: &str) -> Result<ProxyAuth, ConfigError> {
        let config = crate::config::Config::from_toml(toml)?;
        ProxyAuth::from_config(config.auth.proxy.as_ref().expect("the test gives [auth.proxy]"))
    }

    #[test]
    fn the_proxy_section_is_read_and_checked() {
        let proxy = read(
            "[auth.proxy]\nheader = \"X-Forwarded-User\"\ndefault_role = \"operator\"\ntrusted = [\"10.0.0.0/8\", \"::1\"]\n",
        )
        .unwrap();
        assert_eq!(proxy.default_role, Role::Operator);
        assert!(proxy.is_trusted(ip("10.9.8.7")) && !proxy.is_trusted(ip("11.0.0.1")));
        assert_eq!(read("[auth.proxy]\nheader = \"X\"\ntrusted = [\"::1\"]\n").unwrap().default_role, Role::Viewer);
        for (toml, field) in [
            ("[auth.proxy]\nheader = \"X-User\"\ntrusted = []\n", "auth.proxy"),
            ("[auth.proxy]\nheader = \"X-User\"\ntrusted = [\"10.0.0.0/33\"]\n", "auth.proxy.trusted[0]"),
            ("[auth.proxy]\nheader = \"bad header\"\ntrusted = [\"10.0.0.1\"]\n", "auth.proxy"),
            (
                "[auth.proxy]\nheader = \"X-User\"\ndefault_role = \"root\"\ntrusted = [\"10.0.0.1\"]\n",
                "auth.proxy.default_role",
            ),
        ] {
            let err = read(toml).unwrap_err().to_string();
            assert!(err.starts_with("invalid configuration: ") && err.contains(field), "{toml}: {err}");
        }
    }

    #[test]
    fn ipv4_networks() {
        let ten = cidr("10.0.0.0/8");
        assert!(ten.contains(ip("10.0.0.0")));
        assert!(ten.contains(ip("10.255.255.255")));
        assert!(!ten.contains(ip("11.0.0.0")));
        assert!(!ten.contains(ip("9.255.255.255")));
        let host = cidr("127.0.0.1/32");
        assert!(host.contains(ip("127.0.0.1")));
        assert!(!host.contains(ip("127.0.0.2")));
        assert_eq!(cidr("192.168.1.7"), cidr("192.168.1.7/32"));
        let odd = cidr("172.16.0.0/12");
        assert!(odd.contains(ip("172.31.255.255")));
        assert!(!odd.contains(ip("172.32.0.0")));
        let all = cidr("0.0.0.0/0");
        assert!(all.contains(ip("203.0.113.9")));
        assert!(!all.contains(ip("::1")), "an IPv4 network holds no IPv6 address");
    }

    #[test]
    fn ipv6_networks() {
        let lo = cidr("::1/128");
        assert!(lo.contains(ip("::1")));
        assert!(!lo.contains(ip("::2")));
        assert!(!lo.contains(ip("127.0.0.1")));
        let net = cidr("2001:db8::/32");
        assert!(net.contains(ip("2001:db8:ffff::1")));
        assert!(!net.contains(ip("2001:db9::1")));
        let ula = cidr("fd00::/8");
        assert!(ula.contains(ip("fdab:cdef::1")));
        assert!(!ula.contains(ip("fe80::1")));
        assert!(cidr("::/0").contains(ip("2001:db8::1")));
        assert_eq!(cidr("fd00::1"), cidr("fd00::1/128"));
    }

    #[test]
    fn ipv4_clients_on_a_dual_stack_socket_match_ipv4_networks() {
        assert!(cidr("10.0.0.0/8").contains(ip("::ffff:10.1.2.3")));
        assert!(cidr("127.0.0.1").contains(ip("::ffff:127.0.0.1")));
        let mapped = cidr("::ffff:10.0.0.0/104");
        assert_eq!(mapped, cidr("10.0.0.0/8"));
        assert!(mapped.contains(ip("10.9.9.9")));
    }

    #[test]
    fn bad_networks_are_refused_with_a_reason() {
        for (text, reason) in [
            ("10.0.0.0/33", "prefix length must be 0 to 32"),
            ("::/129", "0 to 128"),
            ("10.0.0.0/-1", "prefix length"),
            ("10.0.0.0/+8", "prefix length"),
            ("10.0.0.0/", "prefix length"),
            ("10.0.0/8", "not an IP address"),
            ("localhost", "not an IP address"),
            ("", "not an IP address"),
            ("10.1.2.3/8", "the network is 10.0.0.0/8"),
            ("2001:db8::1/32", "the network is 2001:db8::/32"),
        ] {
            let err = text.parse::<Cidr>().expect_err(text).to_string();
            assert!(err.contains(reason), "{text}: {err}");
        }
    }

    #[test]
    fn cidrs_print_and_deserialise() {
        assert_eq!(cidr("10.0.0.0/8").to_string(), "10.0.0.0/8");
        assert_eq!(cidr("::1").to_string(), "::1/128");
        let parsed: Vec<Cidr> = serde_json::from_str(r#"["10.0.0.0/8", "::1/128"]"#).unwrap();
        assert_eq!(parsed, [cidr("10.0.0.0/8"), cidr("::1/128")]);
        assert!(serde_json::from_str::<Cidr>(r#""10.0.0.1/8""#).is_err());
    }

    fn proxy() -> ProxyAuth {
        ProxyAuth {
            header: "X-Forwarded-User".into(),
            role_header: Some("X-Forwarded-Role".into()),
            default_role: Role::Viewer,
            trusted: vec![cidr("10.0.0.0/8"), cidr("::1/128")],
        }
    }

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(*name, HeaderValue::from_static(value));
        }
        map
    }

    #[test]
    fn a_trusted_proxy_names_the_user_and_role() {
        let p = proxy();
        let h = headers(&[("x-forwarded-user", " alice@example.com "), ("x-forwarded-role", "Operator")]);
        let principal = p.principal(ip("10.1.2.3"), &h).unwrap();
        assert_eq!(principal, Principal { name: "alice@example.com".into(), role: Role::Operator, via: How::Proxy });
        assert!(p.principal(ip("::1"), &h).is_some());
        assert!(p.principal(ip("::ffff:10.0.0.1"), &h).is_some());
        // No role header: the default role.
        let h = headers(&[("x-forwarded-user", "bob")]);
        assert_eq!(p.principal(ip("10.0.0.1"), &h).unwrap().role, Role::Viewer);
        // No role header configured: the role header a client sends means nothing.
        let p = ProxyAuth { role_header: None, ..proxy() };
        let h = headers(&[("x-forwarded-user", "bob"), ("x-forwarded-role", "admin")]);
        assert_eq!(p.principal(ip("10.0.0.1"), &h).unwrap().role, Role::Viewer);
    }

    #[test]
    fn headers_from_untrusted_peers_are_ignored() {
        let p = proxy();
        let h = headers(&[("x-forwarded-user", "admin"), ("x-forwarded-role", "admin")]);
        for peer in ["192.168.1.10", "127.0.0.1", "11.0.0.1", "::2", "fe80::1"] {
            assert_eq!(p.principal(ip(peer), &h), None, "{peer}");
        }
    }

    #[test]
    fn hostile_or_ambiguous_headers_are_refused() {
        let p = proxy();
        let peer = ip("10.0.0.1");
        for h in [
            headers(&[]),
            headers(&[("x-forwarded-user", "")]),
            headers(&[("x-forwarded-user", "alice"), ("x-forwarded-user", "admin")]),
            headers(&[("x-forwarded-user", "alice bob")]),
            headers(&[("x-forwarded-user", "<script>")]),
            headers(&[("x-forwarded-user", "alice"), ("x-forwarded-role", "root")]),
            headers(&[("x-forwarded-user", "alice"), ("x-forwarded-role", "viewer"), ("x-forwarded-role", "admin")]),
        ] {
            assert_eq!(p.principal(peer, &h), None, "{h:?}");
        }
        let mut h = HeaderMap::new();
        h.insert("x-forwarded-user", HeaderValue::from_bytes(b"al\xffice").unwrap());
        assert_eq!(p.principal(peer, &h), None);
    }

    #[test]
    fn configuration_is_validated() {
        assert!(proxy().validate().is_ok());
        assert!(matches!(
            ProxyAuth { header: "bad header".into(), ..proxy() }.validate(),
            Err(AuthError::InvalidHeader(_))
        ));
        assert!(matches!(
            ProxyAuth { role_header: Some("".into()), ..proxy() }.validate(),
            Err(AuthError::InvalidHeader(_))
        ));
        let err = ProxyAuth { trusted: vec![], ..proxy() }.validate().unwrap_err().to_string();
        assert!(err.contains("at least one trusted proxy address"), "{err}");
    }
}
