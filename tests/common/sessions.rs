//! Users and logged-in sessions against a running warren: users are created in its database as
//! `warren user add` does, and each session carries its cookie and CSRF token.

use std::time::Duration;

use reqwest::redirect::Policy;
use serde_json::Value;
use warren::auth::{self, Role};

use super::{wait_for, Warren};

pub const PASSWORD: &str = "correct horse battery staple";

/// A client that shows redirects instead of following them.
pub fn client() -> reqwest::Client {
    reqwest::Client::builder().redirect(Policy::none()).build().unwrap()
}

/// Creates users in the database of a running warren, once it has migrated it.
pub async fn add_users(warren: &Warren, users: &[(&str, Role)]) {
    wait_for("warren to serve", Duration::from_secs(20), || async {
        match client().get(warren.url("/healthz")).send().await {
            Ok(r) if r.status().is_success() => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    let db = warren::history::open(&warren.dir.path().join("warren.db")).await.unwrap();
    for (name, role) in users {
        auth::add_user(&warren::storage::sqlite::store(db.clone()), name, *role, PASSWORD).await.unwrap();
    }
    db.close().await;
}

/// A logged-in browser session: its cookie and CSRF token.
pub struct Session<'a> {
    warren: &'a Warren,
    pub cookie: String,
    pub csrf: String,
}

/// Logs `name` in through the login form, as a browser does, and checks what it is given: the
/// redirect to where it asked to go, a session cookie scripts cannot read and other sites cannot
/// send, and the user it names.
pub async fn login<'a>(warren: &'a Warren, name: &str) -> Session<'a> {
    let response = client()
        .post(warren.url("/login"))
        .form(&[("name", name), ("password", PASSWORD), ("next", "/queues")])
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 303, "{name} logs in");
    assert_eq!(response.headers()["location"], "/queues");
    let set_cookie = response.headers()["set-cookie"].to_str().unwrap().to_string();
    for attribute in ["HttpOnly", "SameSite=Strict", "Path=/"] {
        assert!(set_cookie.contains(attribute), "{set_cookie}");
    }
    let cookie = set_cookie.split(';').next().unwrap().to_string();
    let me: Value =
        client().get(warren.url("/api/v1/me")).header("cookie", &cookie).send().await.unwrap().json().await.unwrap();
    assert_eq!(me["name"], name, "{me}");
    Session { warren, cookie, csrf: me["csrf_token"].as_str().unwrap().to_string() }
}

impl Session<'_> {
    pub async fn get_text(&self, path: &str) -> (u16, String) {
        let response = client().get(self.warren.url(path)).header("cookie", &self.cookie).send().await.unwrap();
        (response.status().as_u16(), response.text().await.unwrap())
    }

    pub async fn get_json(&self, path: &str) -> (u16, Value) {
        let response = client().get(self.warren.url(path)).header("cookie", &self.cookie).send().await.unwrap();
        (response.status().as_u16(), response.json().await.unwrap_or(Value::Null))
    }

    /// A JSON POST with the CSRF header, as the API's browser clients send it.
    pub async fn post_json(&self, path: &str, body: &Value) -> (u16, Value) {
        let response = client()
            .post(self.warren.url(path))
            .header("cookie", &self.cookie)
            .header("x-csrf-token", &self.csrf)
            .json(body)
            .send()
            .await
            .unwrap();
        (response.status().as_u16(), response.json().await.unwrap_or(Value::Null))
    }

    /// A form POST with the CSRF field, as the pages send it: status, `Location`, body.
    pub async fn post_form(&self, path: &str, fields: &[(&str, &str)]) -> (u16, Option<String>, String) {
        let mut fields = fields.to_vec();
        fields.push(("csrf_token", &self.csrf));
        let response =
            client().post(self.warren.url(path)).header("cookie", &self.cookie).form(&fields).send().await.unwrap();
        let location = response.headers().get("location").map(|v| v.to_str().unwrap().to_string());
        (response.status().as_u16(), location, response.text().await.unwrap())
    }
}
