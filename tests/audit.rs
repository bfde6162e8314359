//! The audit log under a login flood, its kinds and paging, and who may read account names in
//! it: against a real warren (in process, its own SQLite file) and, for the purge, a real
//! RabbitMQ vhost.

mod common;

use std::collections::HashSet;
use std::time::Duration;

use common::{declare, publish, wait_for, TestVhost, Warren};
use lapin::BasicProperties;
use reqwest::redirect::Policy;
use serde_json::{json, Value};
use warren::auth::{self, Role};

const PASSWORD: &str = "correct horse battery staple";

fn encode(s: &str) -> String {
    warren::broker::management::encode_segment(s)
}

/// A client that shows redirects instead of following them.
fn client() -> reqwest::Client {
    reqwest::Client::builder().redirect(Policy::none()).build().unwrap()
}

/// Opens a running warren's database beside it, once warren has migrated it (two processes
/// migrating at once collide).
async fn database(warren: &Warren) -> warren::history::Db {
    wait_for("warren to serve", Duration::from_secs(20), || async {
        match client().get(warren.url("/healthz")).send().await {
            Ok(r) if r.status().is_success() => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    warren::history::open(&warren.dir.path().join("warren.db")).await.unwrap()
}

/// Creates users as `warren user add` does.
async fn add_users(warren: &Warren, users: &[(&str, Role)]) {
    let db = database(warren).await;
    for (name, role) in users {
        auth::add_user(&db, name, *role, PASSWORD).await.unwrap();
    }
    db.close().await;
}

/// A logged-in browser session: its cookie and CSRF token.
struct Session {
    cookie: String,
    csrf: String,
}

async fn login(warren: &Warren, name: &str) -> Session {
    let response =
        client().post(warren.url("/login")).form(&[("name", name), ("password", PASSWORD)]).send().await.unwrap();
    assert_eq!(response.status().as_u16(), 303, "{name} logs in");
    let cookie = response.headers()["set-cookie"].to_str().unwrap().split(';').next().unwrap().to_string();
    let me: Value =
        client().get(warren.url("/api/v1/me")).header("cookie", &cookie).send().await.unwrap().json().await.unwrap();
    Session { cookie, csrf: me["csrf_token"].as_str().unwrap().to_string() }
}

/// A GET as `session` (or nobody): status, `Link` header, body.
async fn get(warren: &Warren, path: &str, session: Option<&Session>) -> (u16, Option<String>, String) {
    let mut request = client().get(warren.url(path)).header("accept", "text/html");
    if let Some(session) = session {
        request = request.header("cookie", &session.cookie);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let link = response.headers().get("link").map(|v| v.to_str().unwrap().to_string());
    (status, link, response.text().await.unwrap())
}

async fn get_entries(warren: &Warren, path: &str, session: Option<&Session>) -> (Vec<Value>, Option<String>) {
    let (status, link, body) = get(warren, path, session).await;
    assert_eq!(status, 200, "{path}: {body}");
    let entries: Value = serde_json::from_str(&body).unwrap_or_else(|e| panic!("{path}: {e}: {body}"));
    (entries.as_array().unwrap_or_else(|| panic!("{path}: an array: {body}")).clone(), link)
}

/// The URL of `rel` in a `Link` header.
fn link_to(link: Option<&str>, rel: &str) -> Option<String> {
    link?.split(", ").find(|l| l.ends_with(&format!("rel=\"{rel}\""))).map(|l| {
        let url = l.split(';').next().unwrap();
        url.trim_start_matches('<').trim_end_matches('>').to_string()
    })
}

/// The page's link to the next older page.
fn older_href(html: &str) -> Option<String> {
    let end = html.find("\" rel=\"next\"")?;
    let start = html[..end].rfind("href=\"")? + "href=\"".len();
    // The template escapes `&` (askama writes `&#38;`).
    Some(html[start..end].replace("&#38;", "&").replace("&amp;", "&"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_login_flood_adds_a_few_rows_and_the_purge_stays_on_the_first_page() {
    let vhost = TestVhost::create("audit-flood").await;
    let connection = vhost.connect().await;
    let channel = vhost.channel(&connection).await;
    declare(&channel, "orders", false).await;
    publish(&channel, "orders", 3, BasicProperties::default()).await;
    let warren = Warren::for_vhost(&vhost.name, 1).await;
    add_users(&warren, &[("admiral-ada", Role::Admin), ("vera", Role::Viewer)]).await;
    let ada = login(&warren, "admiral-ada").await;
    let queue = format!("/api/v1/queues/local/{}/orders", encode(&vhost.name));
    wait_for("warren to see the queue", Duration::from_secs(30), || async {
        match get(&warren, &queue, Some(&ada)).await {
            (200, _, body) => Ok(body),
            (status, _, body) => Err(format!("{status} {body}")),
        }
    })
    .await;
    let purged = client()
        .post(warren.url(&format!("{queue}/purge")))
        .header("cookie", &ada.cookie)
        .header("x-csrf-token", &ada.csrf)
        .send()
        .await
        .unwrap();
    assert_eq!(purged.status().as_u16(), 200, "{}", purged.text().await.unwrap());

    // 520 attempts without an account from one address: half at one name, half at new names.
    let mut statuses = HashSet::new();
    for i in 0..520 {
        let name = if i % 2 == 0 { "admiral-ada".to_string() } else { format!("guess-{i}") };
        let attempt = client().post(warren.url("/login")).form(&[("name", name.as_str()), ("password", "guess")]);
        statuses.insert(attempt.send().await.unwrap().status().as_u16());
    }
    assert_eq!(statuses, HashSet::from([401, 429]), "wrong passwords, then the throttle");

    let db = warren::history::open(&warren.dir.path().join("warren.db")).await.unwrap();
    let rows: i64 = sqlx::query_scalar("select count(*) from audit_log where action = 'login' and outcome != 'done'")
        .fetch_one(&db)
        .await
        .unwrap();
    // Per minute: the name tried most, five more names, one row for the rest of them.
    assert!(rows <= 2 * 7, "520 failed logins added {rows} rows");
    db.close().await;

    let (logins, _) = get_entries(&warren, "/api/v1/audit?kind=login&per_page=500", Some(&ada)).await;
    let failed: Vec<&Value> = logins.iter().filter(|e| e["outcome"] == "failed").collect();
    assert_eq!(failed.iter().map(|e| e["attempts"].as_i64().unwrap()).sum::<i64>(), 520, "{failed:?}");
    assert!(failed.iter().all(|e| e["source"] == "127.0.0.1" && e["kind"] == "login"), "{failed:?}");
    assert!(failed.iter().map(|e| e["throttled"].as_i64().unwrap()).sum::<i64>() >= 500, "{failed:?}");

    for path in ["/api/v1/audit?kind=action", "/api/v1/audit"] {
        let (first_page, _) = get_entries(&warren, path, Some(&ada)).await;
        let purge = first_page.iter().find(|e| e["action"] == "purge");
        assert!(purge.is_some_and(|p| p["moved"] == 3 && p["kind"] == "action"), "{path}: {first_page:?}");
    }
    let (actions, _) = get_entries(&warren, "/api/v1/audit?kind=action", Some(&ada)).await;
    assert!(actions.iter().all(|e| e["kind"] == "action"), "{actions:?}");
    let (status, _, page) = get(&warren, "/audit?kind=action", Some(&ada)).await;
    assert_eq!(status, 200);
    assert!(page.contains(">purge<") && !page.contains("guess-"), "the actions page shows the purge only");

    warren.stop().await;
    connection.close(0, "done").await.ok();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn account_names_in_the_audit_log_are_shown_to_admins_only() {
    let warren = Warren::start("[[brokers]]\nname = \"local\"\nvhosts_include = [\"warren-none\"]\n").await;
    add_users(&warren, &[("admiral-ada", Role::Admin), ("vera", Role::Viewer), ("otto", Role::Operator)]).await;
    let ada = login(&warren, "admiral-ada").await;
    let vera = login(&warren, "vera").await;
    let otto = login(&warren, "otto").await;
    let post = |path: &'static str, body: Value| {
        client()
            .post(warren.url(path))
            .header("cookie", &ada.cookie)
            .header("x-csrf-token", &ada.csrf)
            .json(&body)
            .send()
    };
    let added = post("/api/v1/users", json!({"name": "new-carol", "role": "viewer", "password": PASSWORD}));
    assert_eq!(added.await.unwrap().status().as_u16(), 201);
    let token = post("/api/v1/tokens", json!({"name": "ci-deploy-token", "role": "operator"}));
    assert_eq!(token.await.unwrap().status().as_u16(), 201);
    let failed = client().post(warren.url("/login")).form(&[("name", "mallory-guess"), ("password", "nope")]);
    assert_eq!(failed.send().await.unwrap().status().as_u16(), 401);

    let names = ["admiral-ada", "new-carol", "ci-deploy-token", "mallory-guess"];
    for (who, session) in [("a viewer", &vera), ("an operator", &otto)] {
        for path in
            ["/api/v1/audit", "/api/v1/audit?kind=account", "/api/v1/audit?kind=login", "/audit", "/audit?kind=account"]
        {
            let (status, _, body) = get(&warren, path, Some(session)).await;
            assert_eq!(status, 200, "{who} reads {path}");
            for name in names {
                assert!(!body.contains(name), "{who} reads {name:?} on {path}: {body}");
            }
            assert!(body.contains("(hidden)"), "{who} on {path}: {body}");
        }
        let (entries, _) = get_entries(&warren, "/api/v1/audit?kind=account", Some(session)).await;
        assert_eq!(entries.len(), 2, "{who} still sees that accounts changed");
        assert!(
            entries.iter().any(|e| e["action"] == "token add" && e["request"]["role"] == "operator"),
            "{entries:?}"
        );
    }
    // Their own name is no secret to them.
    let (logins, _) = get_entries(&warren, "/api/v1/audit?kind=login", Some(&vera)).await;
    assert!(logins.iter().any(|e| e["actor"] == "vera" && e["outcome"] == "done"), "{logins:?}");

    for path in ["/api/v1/audit", "/audit"] {
        let (status, _, body) = get(&warren, path, Some(&ada)).await;
        assert_eq!(status, 200);
        for name in names {
            assert!(body.contains(name), "the admin reads {name:?} on {path}");
        }
        assert!(!body.contains("(hidden)"), "nothing is hidden from the admin on {path}");
    }
    warren.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paging_reaches_entries_older_than_the_newest_500() {
    let warren = Warren::start("[[brokers]]\nname = \"local\"\nvhosts_include = [\"warren-none\"]\n").await;
    let db = database(&warren).await;
    for i in 0..620 {
        let queue = if i == 0 { "the-very-first".to_string() } else { format!("q{i}") };
        let entry = warren::audit::Entry {
            actor: "anonymous",
            broker: "local",
            vhost: "/",
            queue: &queue,
            action: "purge",
            request: "{}".to_string(),
        };
        let id = warren::audit::start(&db, entry).await.unwrap();
        warren::dlq::audit::finish(&db, id, "done", 1, 0, None, &[]).await.unwrap();
    }
    db.close().await;

    // The API: every entry once, newest first, following rel="next".
    let mut path = Some("/api/v1/audit?kind=action".to_string());
    let mut ids: Vec<i64> = Vec::new();
    let mut pages = 0;
    while let Some(p) = path {
        let (entries, link) = get_entries(&warren, &p, None).await;
        assert!(!entries.is_empty() && entries.len() <= 100, "{p}: {} entries", entries.len());
        ids.extend(entries.iter().map(|e| e["id"].as_i64().unwrap()));
        path = link_to(link.as_deref(), "next");
        pages += 1;
        assert!(pages <= 7, "paging ends");
    }
    assert_eq!(ids.len(), 620, "every entry is reached");
    assert!(ids.windows(2).all(|w| w[0] > w[1]), "newest first, none twice");
    let (oldest, link) = get_entries(&warren, &format!("/api/v1/audit?before={}&per_page=1", ids[619] + 1), None).await;
    assert_eq!(oldest[0]["queue"], "the-very-first");
    let newer = link_to(link.as_deref(), "prev").expect("a link back to newer entries");
    let (back, _) = get_entries(&warren, &newer, None).await;
    assert_eq!(back[0]["id"].as_i64(), Some(ids[618]), "{newer}");

    // The page: "older →" links down to the first entry.
    let mut path = Some("/audit?kind=action&per_page=500".to_string());
    let (mut found, mut pages) = (false, 0);
    while let Some(p) = path {
        let (status, _, html) = get(&warren, &p, None).await;
        assert_eq!(status, 200, "{p}");
        pages += 1;
        assert!(pages <= 2, "620 entries are two pages of 500: {p}");
        found |= html.contains("the-very-first");
        path = older_href(&html);
    }
    assert!(found, "the page reaches the oldest entry");
    warren.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_paging_and_kind_parameters_are_refused_with_400() {
    let warren = Warren::start("[[brokers]]\nname = \"local\"\nvhosts_include = [\"warren-none\"]\n").await;
    let refused = [
        ("kind=purges", "kind"),
        ("kind=Action", "kind"),
        ("per_page=0", "per_page"),
        ("per_page=501", "per_page"),
        ("per_page=-1", "per_page"),
        ("per_page=lots", "per_page"),
        ("per_page=99999999999999999999999", "per_page"),
        ("before=0", "before"),
        ("before=-5", "before"),
        ("before=abc", "before"),
        ("after=1.5", "after"),
        ("after=99999999999999999999999", "after"),
        ("before=10&after=2", "before and after"),
    ];
    for (query, field) in refused {
        let (status, _, body) = get(&warren, &format!("/api/v1/audit?{query}"), None).await;
        assert_eq!(status, 400, "{query}: {body}");
        let error: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(error["error"]["code"], "bad_request", "{query}: {body}");
        assert!(error["error"]["message"].as_str().unwrap().starts_with(field), "{query}: {body}");
        let (status, _, _) = get(&warren, &format!("/audit?{query}"), None).await;
        assert_eq!(status, 400, "the page: {query}");
    }
    for accepted in ["kind=all", "kind=login&per_page=500", "before=1", "after=99", "per_page=1", "kind="] {
        let (status, _, body) = get(&warren, &format!("/api/v1/audit?{accepted}"), None).await;
        assert_eq!(status, 200, "{accepted}: {body}");
    }
    warren.stop().await;
}
