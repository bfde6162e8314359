//! Form bodies as the pages post them (axum's `Form`, which is `serde_urlencoded`; the requeue
//! form is read by hand because `position` repeats), and what the handlers make of them: the
//! alert editor's rule (validated, then described as a notification would be), a silence's
//! duration, the requeue / delete / purge form, the login form's `next` (the page a login
//! redirects to), and the role of a new user or token.
#![no_main]

use axum::response::Redirect;
use libfuzzer_sys::fuzz_target;
use serde::Deserialize;
use warren::alerts::AlertKey;
use warren::auth::Role;
use warren::web::input::{parse_requeue_form, safe_next, silence_hours, RuleForm};

/// The login form's fields (`web::access::login::LoginForm`): only `next` is parsed beyond a string.
#[derive(Deserialize)]
struct LoginForm {
    #[allow(dead_code)]
    name: String,
    #[allow(dead_code)]
    password: String,
    next: Option<String>,
}

/// The silence form's duration field (`web::alerts::page::SilenceForm`; its `key` is JSON, see
/// the `api_json` target).
#[derive(Deserialize)]
struct HoursField {
    hours: String,
}

/// The user and token forms' role field.
#[derive(Deserialize)]
struct RoleField {
    role: String,
}

fuzz_target!(|body: &[u8]| {
    if let Ok(form) = serde_urlencoded::from_bytes::<RuleForm>(body) {
        if let Ok(rule) = form.rule() {
            if rule.validate().is_empty() {
                rule.describe(&AlertKey::queue("local", "/", "orders"), Some(42.5));
                rule.describe(&AlertKey::broker("local"), None);
            }
        }
    }
    if let Ok(form) = serde_urlencoded::from_bytes::<HoursField>(body) {
        if let Ok(hours) = silence_hours(&form.hours) {
            // What the handler does next with an accepted duration.
            let until = chrono::Duration::try_seconds((hours * 3600.0).round() as i64)
                .and_then(|d| chrono::Utc::now().checked_add_signed(d));
            assert!(until.is_some(), "an accepted duration of {hours} hours overflows");
        }
    }
    // The requeue handler takes the body as a `String`: axum refuses one that is not UTF-8.
    if let Ok(text) = std::str::from_utf8(body) {
        let _ = parse_requeue_form(text);
    }
    if let Ok(form) = serde_urlencoded::from_bytes::<LoginForm>(body) {
        let next = safe_next(form.next.as_deref());
        stays_on_site(&next);
        let _ = Redirect::to(&next);
    }
    if let Ok(form) = serde_urlencoded::from_bytes::<RoleField>(body) {
        let _ = form.role.parse::<Role>();
    }
});

/// A login must redirect to a path of this site. Browsers drop tabs and line breaks from a URL
/// and read `\` as `/`, so what is left must start with one `/` that no `/` or `\` follows.
fn stays_on_site(next: &str) {
    let seen: String = next.chars().filter(|c| !matches!(c, '\t' | '\n' | '\r')).collect();
    let mut chars = seen.chars();
    assert_eq!(chars.next(), Some('/'), "next {next:?} is not a path");
    assert!(!matches!(chars.next(), Some('/' | '\\')), "next {next:?} leaves the site");
}
