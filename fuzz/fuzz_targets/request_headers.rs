//! Request headers warren reads before anything else: the session cookie, a bearer token, the
//! CSRF token, and a trusted proxy's user and role headers. The input is header values, one per
//! line, given in turn to `Cookie`, `Authorization`, `X-CSRF-Token`, `X-Forwarded-User` and
//! `X-Forwarded-Role`; a line that is no valid header value is skipped, as hyper would refuse it.
#![no_main]

use std::net::{IpAddr, Ipv4Addr};

use axum::http::{HeaderMap, HeaderName, HeaderValue};
use libfuzzer_sys::fuzz_target;
use warren::auth::{self, ProxyAuth, Role};

const NAMES: [&str; 5] = ["cookie", "authorization", "x-csrf-token", "x-forwarded-user", "x-forwarded-role"];

fuzz_target!(|data: &[u8]| {
    let mut headers = HeaderMap::new();
    for (i, line) in data.split(|&b| b == b'\n').enumerate() {
        if let Ok(value) = HeaderValue::from_bytes(line) {
            headers.append(HeaderName::from_static(NAMES[i % NAMES.len()]), value);
        }
    }
    if let Some(cookie) = auth::session_cookie_from(&headers) {
        assert_eq!(cookie.len(), 43, "a session id is 43 characters: {cookie:?}");
    }
    auth::bearer_token(&headers);
    let given = headers.get("x-csrf-token").and_then(|v| v.to_str().ok());
    auth::csrf_ok("Ab3_-Ab3_-Ab3_-Ab3_-Ab3_-Ab3_-Ab3_-Ab3_-Ab3", given);
    let proxy = ProxyAuth {
        header: "X-Forwarded-User".to_string(),
        role_header: Some("X-Forwarded-Role".to_string()),
        default_role: Role::Viewer,
        trusted: vec!["10.0.0.0/8".parse().unwrap()],
    };
    let trusted = IpAddr::V4(Ipv4Addr::new(10, 1, 2, 3));
    proxy.principal(trusted, &headers);
    assert!(
        proxy.principal(IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1)), &headers).is_none(),
        "untrusted peers are ignored"
    );
});
