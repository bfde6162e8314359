//! Which role each action needs, and when warren may run without authentication.

use std::net::{IpAddr, SocketAddr};

use axum::http::{header, HeaderMap, Method};

use super::Role;

/// The role a request needs, by method and path (the raw path, as the router matches it: a
/// vhost `/` is `%2F` there and stays inside one segment).
///
/// | request | role |
/// | --- | --- |
/// | `GET`, `HEAD` anything | viewer |
/// | `POST /api/v1/queues/{b}/{v}/{q}/requeue`, `delete`, `purge`, `snapshot` | operator |
/// | `POST /dlq/{b}/{v}/{q}/requeue`, `snapshot` | operator |
/// | `POST /api/v1/queues/{b}/{v}/{q}/custody/replay`, `/dlq/{b}/{v}/{q}/custody/replay` | operator |
/// | `POST .../custody/import` (messages anyone could write), `start`, `release`, `{id}/delete` | admin |
/// | `POST /api/v1/jobs/{id}/cancel`, `/jobs/{id}/cancel` | operator |
/// | `POST /api/v1/silences...`, `/alerts/silences...` | operator |
/// | `POST /api/v1/brokers/{b}/advice/acknowledge`, `unacknowledge`, `apply`, and `/brokers/{b}/advisor/...` | operator |
/// | `POST /alerts/preview`, `/api/v1/alerts/rules/preview` (read-only), `/logout` | viewer |
/// | `GET /api/v1/users...`, `/api/v1/tokens...`, `/access` | admin |
/// | `POST /api/v1/alerts/rules...`, `/alerts/rules...` | admin |
/// | `POST /api/v1/notifications/...`, `/alerts/channels/...` | admin |
/// | any other `POST`, and any other method | admin |
///
/// The default is admin, so a route added without an entry here is safe, only too strict.
/// Logging in and out are not in this table: the web layer handles them before any role check.
pub fn required_role(method: &Method, path: &str) -> Role {
    if method == Method::GET || method == Method::HEAD {
        // Accounts and tokens are listed to admins only: names of accounts help a guesser.
        let accounts = ["/api/v1/users", "/api/v1/tokens", "/access"];
        if accounts.iter().any(|p| path == *p || path.strip_prefix(p).is_some_and(|rest| rest.starts_with('/'))) {
            return Role::Admin;
        }
        return Role::Viewer;
    }
    if method != Method::POST {
        return Role::Admin;
    }
    let segments: Vec<&str> = path.strip_prefix('/').unwrap_or(path).split('/').collect();
    // The router does not resolve dot segments, but whatever might one day must not turn
    // `/api/v1/silences/../../alerts/rules` into an operator's request.
    if segments.iter().any(|s| s.is_empty() || *s == "." || *s == "..") {
        return Role::Admin;
    }
    match segments.as_slice() {
        ["api", "v1", "queues", _, _, _, "requeue" | "delete" | "purge" | "snapshot"]
        | ["dlq", _, _, _, "requeue" | "snapshot"]
        | ["api", "v1", "queues", _, _, _, "custody", "replay"]
        | ["dlq", _, _, _, "custody", "replay"]
        | ["api", "v1", "jobs", _, "cancel"]
        | ["jobs", _, "cancel"]
        | ["api", "v1", "silences", ..]
        | ["alerts", "silences", ..]
        // The advisor's actions: an acknowledgement is an opinion on a finding, as a silence is
        // on an alert; applying a policy changes the broker as a purge does, and only to the
        // advisor's own suggestion (`web::brokers::advisor_actions`).
        | ["api", "v1", "brokers", _, "advice", "acknowledge" | "unacknowledge" | "apply"]
        | ["brokers", _, "advisor", "acknowledge" | "unacknowledge" | "apply"] => Role::Operator,
        ["alerts", "preview"] | ["api", "v1", "alerts", "rules", "preview"] | ["logout"] => Role::Viewer,
        // Alert rules, notification channels, and everything not listed.
        _ => Role::Admin,
    }
}

/// Refuses to serve without authentication on anything but loopback: the dashboard can purge
/// queues and delete messages. `auth_configured`: local users exist, or a trusted proxy is set up.
pub fn check_bind(listen: SocketAddr, auth_configured: bool) -> Result<(), String> {
    if auth_configured || listen.ip().to_canonical().is_loopback() {
        return Ok(());
    }
    Err(format!(
        "refusing to listen on {listen} without authentication: anyone who can reach it could requeue, \
         purge and delete messages. Either create an admin with `warren user add NAME --role admin` (then \
         restart), or configure a trusted reverse-proxy header with the proxy's addresses, or listen on \
         loopback only (listen = \"127.0.0.1:{}\")",
        listen.port()
    ))
}

/// Whether a request may be served without authentication when none is configured. The bind
/// check alone is not enough: a reverse proxy on the same host makes remote requests arrive from
/// loopback (so forwarded requests are refused), and a web page can reach `127.0.0.1` through
/// the browser, by DNS rebinding (so the Host must be a loopback name) or by a cross-site form
/// POST (so an Origin, when sent, must be loopback too).
pub fn anonymous_allowed(peer: IpAddr, headers: &HeaderMap) -> bool {
    if !peer.to_canonical().is_loopback() {
        return false;
    }
    let forwarded = ["forwarded", "x-forwarded-for", "x-forwarded-host", "x-real-ip"];
    if forwarded.iter().any(|name| headers.contains_key(*name)) {
        return false;
    }
    let host_ok = match headers.get(header::HOST) {
        None => true,
        Some(value) => value.to_str().is_ok_and(is_loopback_authority),
    };
    let origin_ok = match headers.get(header::ORIGIN) {
        None => true,
        Some(value) => value
            .to_str()
            .ok()
            .and_then(|origin| origin.strip_prefix("http://").or_else(|| origin.strip_prefix("https://")))
            .is_some_and(is_loopback_authority),
    };
    host_ok && origin_ok
}

/// Whether `host[:port]` names this machine: `localhost`, `*.localhost` (browsers resolve those
/// to loopback themselves), or a loopback address.
fn is_loopback_authority(authority: &str) -> bool {
    let host = match authority.strip_prefix('[') {
        Some(rest) => match rest.split_once(']') {
            Some((host, port)) if port.is_empty() || port.starts_with(':') => host,
            _ => return false,
        },
        None => authority.split_once(':').map_or(authority, |(host, _)| host),
    };
    let host = host.to_ascii_lowercase();
    let host = host.strip_suffix('.').unwrap_or(&host);
    host == "localhost" || host.ends_with(".localhost") || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

#[cfg(test)]
mod tests {
    use axum::http::HeaderValue;

    use super::*;

    #[test]
    fn reading_needs_viewer() {
        for path in ["/", "/queues", "/api/v1/queues", "/dlq/b/v/q", "/api/v1/notifications/channels", "/audit"] {
            assert_eq!(required_role(&Method::GET, path), Role::Viewer, "{path}");
            assert_eq!(required_role(&Method::HEAD, path), Role::Viewer, "{path}");
        }
    }

    #[test]
    fn message_actions_and_silences_need_operator() {
        for path in [
            "/api/v1/queues/main/%2F/orders/requeue",
            "/api/v1/queues/main/%2F/orders/delete",
            "/api/v1/queues/main/%2F/orders/purge",
            "/api/v1/queues/main/prod/orders.dlq/snapshot",
            "/dlq/main/%2F/orders.dlq/requeue",
            "/dlq/main/%2F/orders.dlq/snapshot",
            "/api/v1/queues/main/%2F/orders.dlq/custody/replay",
            "/dlq/main/%2F/orders.dlq/custody/replay",
            "/api/v1/jobs/42/cancel",
            "/jobs/42/cancel",
            "/api/v1/silences",
            "/api/v1/silences/7/expire",
            "/alerts/silences",
            "/alerts/silences/7/expire",
            "/api/v1/brokers/main/advice/acknowledge",
            "/api/v1/brokers/main/advice/unacknowledge",
            "/api/v1/brokers/main/advice/apply",
            "/brokers/main/advisor/acknowledge",
            "/brokers/main/advisor/unacknowledge",
            "/brokers/main/advisor/apply",
        ] {
            assert_eq!(required_role(&Method::POST, path), Role::Operator, "{path}");
        }
    }

    #[test]
    fn previews_are_read_only() {
        assert_eq!(required_role(&Method::POST, "/alerts/preview"), Role::Viewer);
        assert_eq!(required_role(&Method::POST, "/api/v1/alerts/rules/preview"), Role::Viewer);
    }

    #[test]
    fn configuration_needs_admin() {
        for path in [
            "/api/v1/alerts/rules",
            "/api/v1/alerts/rules/high-backlog",
            "/api/v1/alerts/rules/high-backlog/delete",
            "/alerts/rules",
            "/alerts/rules/high-backlog/delete",
            "/api/v1/notifications/channels/ops/test",
            "/alerts/channels/ops/test",
            "/api/v1/brokers",
            "/api/v1/users",
            "/api/v1/tokens",
            // Imported messages are crafted ones: replayed, they would be new messages.
            "/api/v1/queues/main/%2F/orders.dlq/custody/import",
            "/api/v1/queues/main/%2F/orders.dlq/custody/start",
            "/api/v1/queues/main/%2F/orders.dlq/custody/7/edit",
            "/dlq/main/%2F/orders.dlq/custody/7/edit",
            "/api/v1/queues/main/%2F/orders.dlq/custody/7/delete",
            "/dlq/main/%2F/orders.dlq/custody/7/delete",
            "/something/new",
        ] {
            assert_eq!(required_role(&Method::POST, path), Role::Admin, "{path}");
        }
    }

    #[test]
    fn lookalike_paths_fall_to_admin() {
        for path in [
            // Too few or too many segments for a queue action.
            "/api/v1/queues/main/orders/requeue",
            "/api/v1/queues/main/%2F/orders/extra/requeue",
            "/dlq/main/orders/requeue",
            "/api/v1/queues/main/%2F/orders/requeue/",
            // A prefix is a whole segment, not a string prefix.
            "/api/v1/silencesX",
            "/alerts/silences-and-rules",
            "/alerts/preview/x",
            // Case and encoding as the router sees them.
            "/API/v1/silences",
            "/jobs/42/re%71ueue",
            "/api/v1/silences/../../alerts/rules",
            "/api/v1/silences/./x",
            "/brokers/main/advisor/apply/x",
            "/api/v1/brokers/main/advice/forget",
            "/api/v1//silences",
        ] {
            assert_eq!(required_role(&Method::POST, path), Role::Admin, "{path}");
        }
        // Other methods than GET, HEAD and POST are not used by warren: admin.
        for method in [Method::PUT, Method::DELETE, Method::PATCH, Method::OPTIONS] {
            assert_eq!(required_role(&method, "/api/v1/silences"), Role::Admin, "{method}");
        }
    }

    #[test]
    fn without_authentication_only_loopback() {
        for listen in ["127.0.0.1:8080", "127.0.0.2:80", "[::1]:8080", "[::ffff:127.0.0.1]:8080"] {
            assert_eq!(check_bind(listen.parse().unwrap(), false), Ok(()), "{listen}");
        }
        for listen in ["0.0.0.0:8080", "[::]:8080", "192.168.1.5:8080", "[2001:db8::1]:443"] {
            let err = check_bind(listen.parse().unwrap(), false).unwrap_err();
            assert!(err.contains(listen), "{err}");
            assert!(err.contains("warren user add"), "{err}");
            assert!(err.contains("trusted reverse-proxy header"), "{err}");
            assert!(check_bind(listen.parse().unwrap(), true).is_ok());
        }
        let err = check_bind("0.0.0.0:9090".parse().unwrap(), false).unwrap_err();
        assert!(err.contains("127.0.0.1:9090"), "{err}");
    }

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        pairs.iter().map(|(k, v)| (header::HeaderName::from_static(k), HeaderValue::from_static(v))).collect()
    }

    #[test]
    fn anonymous_requests_come_from_this_machine_only() {
        let lo: IpAddr = "127.0.0.1".parse().unwrap();
        for ok in [
            headers(&[]),
            headers(&[("host", "127.0.0.1:8080")]),
            headers(&[("host", "localhost:8080"), ("origin", "http://localhost:8080")]),
            headers(&[("host", "LOCALHOST")]),
            headers(&[("host", "warren.localhost:8080")]),
            headers(&[("host", "[::1]:8080"), ("origin", "http://[::1]:8080")]),
        ] {
            assert!(anonymous_allowed(lo, &ok), "{ok:?}");
        }
        assert!(anonymous_allowed("::1".parse().unwrap(), &headers(&[("host", "localhost")])));
        assert!(anonymous_allowed("::ffff:127.0.0.1".parse().unwrap(), &headers(&[])));
        assert!(!anonymous_allowed("192.0.2.1".parse().unwrap(), &headers(&[("host", "localhost")])));

        for refused in [
            // A local reverse proxy forwarding someone else.
            headers(&[("host", "localhost"), ("x-forwarded-for", "203.0.113.9")]),
            headers(&[("host", "localhost"), ("forwarded", "for=203.0.113.9")]),
            headers(&[("host", "localhost"), ("x-real-ip", "203.0.113.9")]),
            // DNS rebinding: the browser thinks it talks to evil.example.
            headers(&[("host", "evil.example:8080")]),
            headers(&[("host", "127.0.0.1.evil.example")]),
            headers(&[("host", "localhost.evil.example")]),
            headers(&[("host", "[::1]evil")]),
            // A cross-site form POST.
            headers(&[("host", "127.0.0.1:8080"), ("origin", "https://evil.example")]),
            headers(&[("host", "127.0.0.1:8080"), ("origin", "null")]),
        ] {
            assert!(!anonymous_allowed(lo, &refused), "{refused:?}");
        }
    }
}
