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
        auth::add_user(&warren::storage::sqlite::store(db.clone()), name, *role, PASSWORD).await.unwrap();
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
    connection.close(0, "done".into()).await.ok();
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
            run_by: "test",
        };
        let id = warren::audit::start(&warren::storage::sqlite::store(db.clone()), entry).await.unwrap();
        warren::dlq::fates::finish(&warren::storage::sqlite::store(db.clone()), id, "done", 1, 0, None, &[])
            .await
            .unwrap();
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
        found |= html.contains(&common::ident("the-very-first"));
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

/// A webhook receiver on loopback that answers every notification with 200.
async fn webhook() -> String {
    let app = axum::Router::new().route("/hook/{token}", axum::routing::post(|| async { "ok" }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook/s3cr3t-hook", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    url
}

/// A state-changing request as `session`: a JSON body (API) or form fields (page), the CSRF
/// token in its header either way. Answers status and body.
async fn send(warren: &Warren, session: &Session, path: &str, body: Result<Value, &[(&str, &str)]>) -> (u16, String) {
    let request =
        client().post(warren.url(path)).header("cookie", &session.cookie).header("x-csrf-token", &session.csrf);
    let request = match body {
        Ok(json) => request.json(&json),
        Err(fields) => request.form(fields),
    };
    let response = request.send().await.unwrap();
    (response.status().as_u16(), response.text().await.unwrap())
}

/// The entries of kind `kind`, oldest first, as (actor, action, outcome, detail).
async fn changes(warren: &Warren, kind: &str, session: &Session) -> Vec<(String, String, String, String)> {
    let (mut entries, _) = get_entries(warren, &format!("/api/v1/audit?kind={kind}"), Some(session)).await;
    entries.reverse();
    let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
    entries.iter().map(|e| (text(&e["actor"]), text(&e["action"]), text(&e["outcome"]), text(&e["detail"]))).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rule_silence_and_test_notification_changes_are_audited_with_who_what_and_outcome() {
    let hook = webhook().await;
    // Nothing listens on port 1: the delivery fails.
    let channels = format!(
        "[[notifications]]\nid = \"hook\"\nname = \"hook\"\ntype = \"webhook\"\nurl = {hook:?}\n\
         [[notifications]]\nid = \"dead\"\nname = \"dead\"\ntype = \"webhook\"\nurl = \"http://127.0.0.1:1/hook/s3cr3t-dead\"\n"
    );
    let warren =
        Warren::start(&format!("{channels}[[brokers]]\nname = \"local\"\nvhosts_include = [\"warren-none\"]\n")).await;
    add_users(&warren, &[("admiral-ada", Role::Admin), ("vera", Role::Viewer)]).await;
    let ada = login(&warren, "admiral-ada").await;

    // Rules: created and edited through the API, created and deleted through the forms.
    let rule = json!({"id": "backlog", "name": "Queue backlog", "metric": "ready", "comparator": ">",
                      "threshold": 100, "severity": "warning"});
    assert_eq!(send(&warren, &ada, "/api/v1/alerts/rules", Ok(rule.clone())).await.0, 201);
    let mut edited = rule.clone();
    edited["threshold"] = json!(500);
    let (status, body) = send(&warren, &ada, "/api/v1/alerts/rules/backlog", Ok(edited)).await;
    assert_eq!(status, 200, "{body}");
    let form = [
        ("id", "aged"),
        ("name", "Aged"),
        ("vhost", "*"),
        ("queue", "*"),
        ("metric", "ready"),
        ("comparator", ">"),
        ("threshold", "2"),
        ("severity", "info"),
    ];
    assert_eq!(send(&warren, &ada, "/alerts/rules", Err(&form)).await.0, 303);
    // A refused change changes nothing and is not recorded.
    assert_eq!(send(&warren, &ada, "/api/v1/alerts/rules", Ok(rule)).await.0, 409);

    // Silences: set through the API and the form, ended through each.
    let until = chrono::Utc::now() + chrono::Duration::hours(1);
    let silence = json!({"rule_id": "backlog", "until": until, "comment": "deploying"});
    let (status, body) = send(&warren, &ada, "/api/v1/silences", Ok(silence)).await;
    assert_eq!(status, 201, "{body}");
    let first: Value = serde_json::from_str(&body).unwrap();
    let silence_form = [("rule_id", "aged"), ("hours", "2"), ("comment", "maintenance")];
    assert_eq!(send(&warren, &ada, "/alerts/silences", Err(&silence_form)).await.0, 303);
    let first_id = first["id"].as_i64().unwrap();
    let second_id = first_id + 1;
    assert_eq!(send(&warren, &ada, &format!("/api/v1/silences/{first_id}/expire"), Ok(json!({}))).await.0, 200);
    assert_eq!(send(&warren, &ada, &format!("/alerts/silences/{second_id}/expire"), Err(&[])).await.0, 303);
    assert_eq!(send(&warren, &ada, "/alerts/rules/aged/delete", Err(&[])).await.0, 303);

    // Test notifications: one delivered (API), one not (form).
    let (status, body) = send(&warren, &ada, "/api/v1/notifications/channels/hook/test", Ok(json!({}))).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(send(&warren, &ada, "/alerts/channels/dead/test", Err(&[])).await.0, 303);

    let entries = changes(&warren, "alerts", &ada).await;
    let seen: Vec<(&str, &str, &str)> =
        entries.iter().map(|(actor, action, outcome, _)| (actor.as_str(), action.as_str(), outcome.as_str())).collect();
    let ada_did = |action, outcome| ("admiral-ada", action, outcome);
    assert_eq!(
        seen,
        [
            ada_did("rule add", "done"),
            ada_did("rule edit", "done"),
            ada_did("rule add", "done"),
            ada_did("silence add", "done"),
            ada_did("silence add", "done"),
            ada_did("silence end", "done"),
            ada_did("silence end", "done"),
            ada_did("rule delete", "done"),
            ada_did("test notification", "done"),
            ada_did("test notification", "failed"),
        ],
        "{entries:#?}"
    );
    let details: Vec<&str> = entries.iter().map(|(_, _, _, detail)| detail.as_str()).collect();
    assert_eq!(details[0], "rule 'Queue backlog' (backlog) created: ready > 100");
    assert_eq!(details[1], "rule 'Queue backlog' (backlog) edited: threshold 100 → 500");
    assert_eq!(details[2], "rule 'Aged' (aged) created: ready > 2");
    assert!(details[3].starts_with(&format!("silence {first_id} of rule backlog until ")), "{}", details[3]);
    assert!(details[3].ends_with(": deploying"), "{}", details[3]);
    assert!(details[4].starts_with(&format!("silence {second_id} of rule aged until ")), "{}", details[4]);
    assert_eq!(details[5], format!("silence {first_id} of rule backlog ended"));
    assert_eq!(details[6], format!("silence {second_id} of rule aged ended"));
    assert_eq!(details[7], "rule 'Aged' (aged) deleted");
    assert_eq!(details[8], "sent to hook (HTTP 200)");
    assert!(details[9].starts_with("to dead not delivered: "), "{}", details[9]);

    // The page shows them under their own filter, in words, without message counts; the
    // channels' secret URL paths appear nowhere.
    let (status, _, page) = get(&warren, "/audit?kind=alerts", Some(&ada)).await;
    assert_eq!(status, 200);
    assert!(page.contains("href=\"/audit?kind=alerts\" class=\"active\""), "the filter: {page}");
    for text in ["rule &#39;Queue backlog&#39; (backlog) edited: threshold 100 → 500", "sent to hook (HTTP 200)"] {
        assert!(page.contains(text), "{text} on the page: {page}");
    }
    assert!(!page.contains("<td class=\"num\">0</td>"), "no Moved 0 Failed 0: {page}");
    let (_, _, everything) = get(&warren, "/api/v1/audit", Some(&ada)).await;
    for secret in ["s3cr3t-hook", "s3cr3t-dead"] {
        assert!(!page.contains(secret) && !everything.contains(secret), "{secret} in the audit log");
    }
    warren.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn account_changes_read_as_sentences_and_never_hold_a_password_or_token() {
    let warren = Warren::start("[[brokers]]\nname = \"local\"\nvhosts_include = [\"warren-none\"]\n").await;
    add_users(&warren, &[("admiral-ada", Role::Admin)]).await;
    let ada = login(&warren, "admiral-ada").await;
    let (first_password, second_password) = ("first-Pa55word-of-carol", "second-Pa55word-of-carol");

    let user = json!({"name": "carol", "role": "viewer", "password": first_password});
    assert_eq!(send(&warren, &ada, "/api/v1/users", Ok(user)).await.0, 201);
    let password = json!({"password": second_password});
    assert_eq!(send(&warren, &ada, "/api/v1/users/carol/password", Ok(password)).await.0, 200);
    let (status, body) = send(&warren, &ada, "/api/v1/tokens", Ok(json!({"name": "ci", "role": "operator"}))).await;
    assert_eq!(status, 201, "{body}");
    let created: Value = serde_json::from_str(&body).unwrap();
    let (token_id, token) = (created["id"].as_i64().unwrap(), created["token"].as_str().unwrap().to_string());
    // The form shows its token once, on the page it answers with.
    let (status, page) = send(&warren, &ada, "/access/tokens", Err(&[("name", "deploy"), ("role", "viewer")])).await;
    assert_eq!(status, 200, "{page}");
    let form_token = page
        .match_indices("wrn_")
        .map(|(start, _)| {
            let rest = &page[start..];
            rest.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == '-').collect::<String>()
        })
        .find(|t| t.len() == 47)
        .expect("the new token on the page");
    assert_eq!(send(&warren, &ada, &format!("/api/v1/tokens/{token_id}/revoke"), Ok(json!({}))).await.0, 200);
    let (status, _) = send(&warren, &ada, "/access/users/carol/role", Err(&[("role", "operator")])).await;
    assert_eq!(status, 303);
    assert_eq!(send(&warren, &ada, "/access/users/carol/delete", Err(&[("confirmed", "true")])).await.0, 303);

    let entries = changes(&warren, "account", &ada).await;
    assert!(entries.iter().all(|(actor, _, outcome, _)| actor == "admiral-ada" && outcome == "done"), "{entries:?}");
    let (_, _, page) = get(&warren, "/audit?kind=account", Some(&ada)).await;
    let sentences = [
        "user &#39;carol&#39; (viewer) added".to_string(),
        "password of user &#39;carol&#39; changed".to_string(),
        format!("token &#39;ci&#39; (operator) created, id {token_id}"),
        "token &#39;deploy&#39; (viewer) created".to_string(),
        format!("token {token_id} revoked"),
        "user &#39;carol&#39; made operator".to_string(),
        "user &#39;carol&#39; removed".to_string(),
    ];
    for sentence in &sentences {
        assert!(page.contains(sentence.as_str()), "{sentence} on the page: {page}");
    }
    assert!(!page.contains("<td class=\"num\">0</td>"), "no Moved 0 Failed 0: {page}");

    // Neither password nor either token is anywhere in the log: its rows as stored, the API,
    // the page. A password hash neither (argon2 hashes start `$argon2`).
    let db = database(&warren).await;
    let rows: Vec<String> = sqlx::query_scalar(&format!("select {ENTRY} from audit_log")).fetch_all(&db).await.unwrap();
    assert!(rows.len() >= 7, "{rows:?}");
    let (_, _, api) = get(&warren, "/api/v1/audit", Some(&ada)).await;
    for secret in [first_password, second_password, token.as_str(), form_token.as_str(), "$argon2"] {
        for row in &rows {
            assert!(!row.contains(secret), "{secret:?} in the row {row}");
        }
        assert!(!api.contains(secret) && !page.contains(secret), "{secret:?} in the API or on the page");
    }
    db.close().await;
    warren.stop().await;
}

/// Every column of an audit entry as one text.
const ENTRY: &str = "quote(id)||'|'||quote(at)||'|'||quote(actor)||'|'||quote(broker)||'|'||quote(vhost)||'|'||quote(queue)||'|'||quote(action)||'|'||quote(request)||'|'||quote(outcome)||'|'||quote(moved)||'|'||quote(failed)||'|'||quote(message_ids)||'|'||quote(detail)||'|'||quote(kind)||'|'||quote(source)||'|'||quote(attempts)||'|'||quote(throttled)||'|'||quote(last_at)||'|'||quote(bucket)";

/// The migration that adds the `alerts` kind rebuilds the audit table: a database of the
/// schema before it keeps every entry, with its id, and every message fate of a move.
#[tokio::test]
async fn the_audit_table_rebuild_keeps_every_entry_and_message_fate() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("warren.db");
    let options = sqlx::sqlite::SqliteConnectOptions::new().filename(&path).create_if_missing(true).foreign_keys(true);
    let old = sqlx::SqlitePool::connect_with(options).await.unwrap();
    let all = sqlx::migrate!("./migrations/sqlite");
    let before_alerts_kind = sqlx::migrate::Migrator {
        migrations: std::borrow::Cow::Owned(all.migrations.iter().filter(|m| m.version <= 16).cloned().collect()),
        ..sqlx::migrate!("./migrations/sqlite")
    };
    before_alerts_kind.run(&old).await.unwrap();
    sqlx::query(
        "insert into audit_log (id, at, kind, actor, broker, vhost, queue, action, request, outcome, moved, failed,
             message_ids, detail, source, attempts, throttled, last_at, bucket) values
         (7, 1000, 'action', 'otto', 'local', 'v', 'orders.dlq', 'requeue', '{\"target\":\"original_queue\"}', 'done',
             2, 1, '[\"m1\",\"m2\"]', null, null, 1, 0, null, null),
         (8, 1001, 'login', 'mallory', '', '', '', 'login', '{\"peer\":\"192.0.2.9\"}', 'failed',
             0, 0, '[]', 'wrong password', '192.0.2.9', 12, 3, 1059, 16),
         (9, 1002, 'account', 'ada', '', '', '', 'user add', '{\"name\":\"carol\",\"role\":\"viewer\"}', 'done',
             0, 0, '[]', null, null, 1, 0, null, null)",
    )
    .execute(&old)
    .await
    .unwrap();
    sqlx::query(
        "insert into audit_messages (audit_id, position, message_id, outcome, detail) values
         (7, 0, 'm1', 'moved', 'to orders'), (7, 1, 'm2', 'moved', 'to orders'), (7, 2, 'm3', 'failed', 'nack')",
    )
    .execute(&old)
    .await
    .unwrap();
    let read = |db: warren::history::Db| async move {
        let entries: Vec<String> =
            sqlx::query_scalar(&format!("select {ENTRY} from audit_log order by id")).fetch_all(&db).await.unwrap();
        let fates: Vec<String> = sqlx::query_scalar(
            "select quote(audit_id)||'|'||quote(position)||'|'||quote(message_id)||'|'||quote(outcome)||'|'||quote(detail) from audit_messages order by position",
        )
        .fetch_all(&db)
        .await
        .unwrap();
        (db, entries, fates)
    };
    let (old, entries, fates) = read(old).await;
    assert_eq!((entries.len(), fates.len()), (3, 3));
    old.close().await;

    let db = warren::history::open(&path).await.unwrap();
    let (db, after_entries, after_fates) = read(db).await;
    assert_eq!(after_entries, entries, "every entry as it was");
    assert_eq!(after_fates, fates, "every message fate as it was");
    let mut indexes: Vec<String> = sqlx::query_scalar(
        "select name from sqlite_master where type = 'index' and tbl_name in ('audit_log', 'audit_messages')
             and name not like 'sqlite_%'",
    )
    .fetch_all(&db)
    .await
    .unwrap();
    indexes.sort();
    // (`audit_log_unfinished` comes later, with the replicas' recovery: migration 0030.)
    assert_eq!(
        indexes,
        [
            "audit_log_at",
            "audit_log_by_kind",
            "audit_log_failed_logins",
            "audit_log_unfinished",
            "audit_messages_by_action"
        ]
    );
    // The new kind is accepted; the fates still follow their entry; ids go on from the last.
    let change = warren::audit::AlertsChange {
        actor: "ada",
        action: "rule delete",
        request: json!({"id": "backlog"}),
        outcome: "done",
        detail: "rule 'Queue backlog' (backlog) deleted".to_string(),
    };
    assert_eq!(warren::audit::alerts(&warren::storage::sqlite::store(db.clone()), change).await.unwrap(), 10);
    sqlx::query("delete from audit_log where id = 7").execute(&db).await.unwrap();
    let left: i64 = sqlx::query_scalar("select count(*) from audit_messages").fetch_one(&db).await.unwrap();
    assert_eq!(left, 0, "the fates of a deleted entry go with it, as before");
    db.close().await;
}
