//! Users, roles, CSRF, API tokens, the trusted proxy header and the bind check, against a real
//! warren (in process, its own SQLite file), a real RabbitMQ vhost, and headless Chromium.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::dead_letters::{dead_letter, depth, numbered};
use common::sessions::{add_users, client, login, Session, PASSWORD};
use common::{wait_for, TestVhost, Warren};
use fantoccini::Locator;
use serde_json::{json, Value};
use warren::auth::{self, Role};

fn encode(s: &str) -> String {
    warren::broker::management::encode_segment(s)
}

enum Auth<'a> {
    Session { session: &'a Session<'a>, csrf: Option<&'a str> },
    Token(&'a str),
    Nobody,
}

async fn post(warren: &Warren, path: &str, auth: Auth<'_>, body: Value) -> (u16, Value) {
    let mut request = client().post(warren.url(path)).json(&body);
    match auth {
        Auth::Session { session, csrf } => {
            request = request.header("cookie", &session.cookie);
            if let Some(csrf) = csrf {
                request = request.header("x-csrf-token", csrf);
            }
        }
        Auth::Token(token) => request = request.bearer_auth(token),
        Auth::Nobody => {}
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

async fn get(warren: &Warren, path: &str, session: &Session<'_>) -> (u16, Value) {
    let response = client().get(warren.url(path)).header("cookie", &session.cookie).send().await.unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

/// Every state-changing endpoint, API and pages, with the role it needs.
fn actions(vhost: &str) -> Vec<(String, Role)> {
    let q = format!("local/{}/dlq", encode(vhost));
    let mut all = vec![
        (format!("/api/v1/queues/{q}/requeue"), Role::Operator),
        (format!("/api/v1/queues/{q}/delete"), Role::Operator),
        (format!("/api/v1/queues/{q}/purge"), Role::Operator),
        (format!("/api/v1/queues/{q}/snapshot"), Role::Operator),
        (format!("/dlq/{q}/requeue"), Role::Operator),
        (format!("/dlq/{q}/snapshot"), Role::Operator),
        ("/api/v1/jobs/1/cancel".into(), Role::Operator),
        ("/jobs/1/cancel".into(), Role::Operator),
        ("/api/v1/silences".into(), Role::Operator),
        ("/api/v1/silences/1/expire".into(), Role::Operator),
        ("/alerts/silences".into(), Role::Operator),
        ("/alerts/silences/1/expire".into(), Role::Operator),
        (format!("/api/v1/queues/{q}/custody/replay"), Role::Operator),
        (format!("/dlq/{q}/custody/replay"), Role::Operator),
        ("/api/v1/brokers/local/advice/acknowledge".into(), Role::Operator),
        ("/api/v1/brokers/local/advice/unacknowledge".into(), Role::Operator),
        ("/api/v1/brokers/local/advice/apply".into(), Role::Operator),
        ("/brokers/local/advisor/acknowledge".into(), Role::Operator),
        ("/brokers/local/advisor/unacknowledge".into(), Role::Operator),
        ("/brokers/local/advisor/apply".into(), Role::Operator),
        (format!("/api/v1/queues/{q}/custody/import"), Role::Admin),
        (format!("/api/v1/queues/{q}/custody/start"), Role::Admin),
        (format!("/api/v1/queues/{q}/custody/release"), Role::Admin),
        (format!("/dlq/{q}/custody/start"), Role::Admin),
        (format!("/dlq/{q}/custody/release"), Role::Admin),
        (format!("/api/v1/queues/{q}/custody/1/delete"), Role::Admin),
        (format!("/dlq/{q}/custody/1/delete"), Role::Admin),
    ];
    for admin in [
        "/api/v1/alerts/rules",
        "/api/v1/alerts/rules/r1",
        "/api/v1/alerts/rules/r1/delete",
        "/alerts/rules",
        "/alerts/rules/r1/delete",
        "/api/v1/notifications/channels/c1/test",
        "/alerts/channels/c1/test",
        "/api/v1/users",
        "/api/v1/users/someone/delete",
        "/api/v1/users/someone/password",
        "/api/v1/tokens",
        "/api/v1/tokens/1/revoke",
        "/access/users",
        "/access/users/someone/delete",
        "/access/tokens",
        "/access/tokens/1/revoke",
    ] {
        all.push((admin.to_string(), Role::Admin));
    }
    all
}

/// Issue 18, must-have 3: a `[[custody]]` rule keeps payloads and headers from roles below
/// the one it names. A viewer reads the records' list (ids, reasons, queues) and each record's
/// page without its headers and payload, and is refused the payload, the export and the
/// filters that search payloads; an operator reads all of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn custody_payloads_are_kept_from_roles_below_the_rule() {
    let vhost = TestVhost::create("custodyroles").await;
    let connection = vhost.connect().await;
    let channel = vhost.channel(&connection).await;
    dead_letter(&vhost, &channel, "dlq", false, numbered(3)).await;
    let warren = Warren::start(&format!(
        "[[brokers]]\nname = \"local\"\nvhosts_include = [{:?}]\npoll_interval_secs = 1\n\n\
         [[custody]]\nqueue = \"dlq\"\npayloads = \"operator\"\n",
        vhost.name
    ))
    .await;
    add_users(&warren, &[("otto", Role::Operator), ("vera", Role::Viewer)]).await;
    let (otto, vera) = (login(&warren, "otto").await, login(&warren, "vera").await);
    let api = format!("/api/v1/queues/local/{}/dlq/custody", encode(&vhost.name));
    let list = wait_for("the dead letters in custody", Duration::from_secs(60), || async {
        let (_, list) = get(&warren, &api, &vera).await;
        if list["custody"]["counts"]["held"] == 3 {
            Ok(list)
        } else {
            Err(list.to_string())
        }
    })
    .await;
    assert_eq!(list["custody"]["records"][0]["message_id"], "m1", "the list is for everyone");
    let id = list["custody"]["records"][0]["id"].as_i64().unwrap();
    let page_of = |session: &Session<'_>, path: String| {
        let request = client().get(warren.url(&path)).header("cookie", session.cookie.clone());
        async move {
            let response = request.send().await.unwrap();
            (response.status().as_u16(), response.text().await.unwrap())
        }
    };
    let record_page = format!("/dlq/local/{}/dlq/custody/{id}", encode(&vhost.name));
    let (status, page) = page_of(&vera, record_page.clone()).await;
    assert_eq!(status, 200);
    let shown = |page: &str| page.contains("class=\"grid kv headers\"") || page.contains("class=\"payload\"");
    assert!(page.contains("payload-hidden") && !shown(&page), "{page}");
    let (status, record) = get(&warren, &format!("{api}/{id}"), &vera).await;
    assert_eq!(
        (status, &record["payload_hidden"], record.get("message").is_none()),
        (200, &json!(true), true),
        "{record}"
    );
    for refused in [
        format!("{record_page}/payload"),
        format!("{api}/export"),
        format!("{api}?text=n"),
        format!("{api}?regex=."),
        format!("{api}?header=x-death"),
    ] {
        let (status, body) = page_of(&vera, refused.clone()).await;
        assert_eq!(status, 403, "{refused}: {body}");
    }
    let (status, _) = page_of(&vera, format!("{api}?reason=rejected")).await;
    assert_eq!(status, 200, "filters on what the list shows are for everyone");
    let (status, page) = page_of(&vera, format!("/dlq/local/{}/dlq?text=n", encode(&vhost.name))).await;
    assert_eq!(status, 200);
    assert!(page.contains("searching them does not apply") && !page.contains("custody-export"), "{page}");

    let (status, page) = page_of(&otto, record_page.clone()).await;
    assert_eq!(status, 200);
    assert!(!page.contains("payload-hidden") && shown(&page), "{page}");
    let (status, body) = page_of(&otto, format!("{record_page}/payload")).await;
    assert_eq!((status, body.as_str()), (200, "{\"n\": 1}"));
    let (status, export) = page_of(&otto, format!("{api}/export")).await;
    assert_eq!((status, export.lines().count()), (200, 3));
    warren.stop().await;
    connection.close(0, "done".into()).await.ok();
}

/// A DLQ with 20 messages, watched by warren, with an admin, an operator and a viewer.
async fn setup(test: &str) -> (TestVhost, lapin::Connection, lapin::Channel, Warren) {
    let vhost = TestVhost::create(test).await;
    let connection = vhost.connect().await;
    let channel = vhost.channel(&connection).await;
    dead_letter(&vhost, &channel, "dlq", false, numbered(20)).await;
    let warren = Warren::for_vhost(&vhost.name, 1).await;
    add_users(&warren, &[("ada", Role::Admin), ("otto", Role::Operator), ("vera", Role::Viewer)]).await;
    let admin = login(&warren, "ada").await;
    wait_for("the DLQ listed with 20 messages", Duration::from_secs(30), || async {
        let (_, q) = get(&warren, &format!("/api/v1/queues/local/{}/dlq", encode(&vhost.name)), &admin).await;
        if q["total"] == 20 {
            Ok(())
        } else {
            Err(q.to_string())
        }
    })
    .await;
    (vhost, connection, channel, warren)
}

/// Issue 29, must-have 5: an admin deletes a held record that can never be replayed (from the
/// API or its page), recorded in the audit log with its message id; operators and viewers are
/// refused, and a record a replay has claimed is not deleted under it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_admin_deletes_a_held_record_audited_and_no_one_else_can() {
    let vhost = TestVhost::create("custodydelete").await;
    let connection = vhost.connect().await;
    let channel = vhost.channel(&connection).await;
    dead_letter(&vhost, &channel, "dlq", false, numbered(3)).await;
    let warren = Warren::start(&format!(
        "[[brokers]]\nname = \"local\"\nvhosts_include = [{:?}]\npoll_interval_secs = 1\n\n\
         [[custody]]\nqueue = \"dlq\"\n",
        vhost.name
    ))
    .await;
    add_users(&warren, &[("ada", Role::Admin), ("otto", Role::Operator), ("vera", Role::Viewer)]).await;
    let (ada, otto, vera) = (login(&warren, "ada").await, login(&warren, "otto").await, login(&warren, "vera").await);
    let api = format!("/api/v1/queues/local/{}/dlq/custody", encode(&vhost.name));
    let page = format!("/dlq/local/{}/dlq/custody", encode(&vhost.name));
    let list = wait_for("the dead letters in custody", Duration::from_secs(60), || async {
        let (_, list) = get(&warren, &api, &ada).await;
        if list["custody"]["counts"]["held"] == 3 {
            Ok(list)
        } else {
            Err(list.to_string())
        }
    })
    .await;
    let ids: Vec<i64> =
        list["custody"]["records"].as_array().unwrap().iter().map(|r| r["id"].as_i64().unwrap()).collect();
    let auth = |session| Auth::Session { session, csrf: Some(&session.csrf) };

    for session in [&otto, &vera] {
        let (status, answer) = post(&warren, &format!("{api}/{}/delete", ids[0]), auth(session), json!({})).await;
        assert_eq!(status, 403, "{answer}");
        let response = client()
            .post(warren.url(&format!("{page}/{}/delete", ids[0])))
            .header("cookie", &session.cookie)
            .form(&[("csrf_token", session.csrf.as_str())])
            .send()
            .await
            .unwrap();
        assert_eq!(response.status().as_u16(), 403);
    }
    let record_page = |session: &Session<'_>, id: i64| {
        let request = client().get(warren.url(&format!("{page}/{id}"))).header("cookie", session.cookie.clone());
        async move { request.send().await.unwrap().text().await.unwrap() }
    };
    assert!(!record_page(&otto, ids[0]).await.contains("custody-delete"), "no delete form below admin");
    assert!(record_page(&ada, ids[0]).await.contains("custody-delete"), "an admin has the form");

    let (status, answer) = post(&warren, &format!("{api}/{}/delete", ids[0]), auth(&ada), json!({})).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["deleted"], ids[0]);
    let audit_id = answer["audit_id"].as_i64().unwrap();
    let (status, _) = get(&warren, &format!("{api}/{}", ids[0]), &ada).await;
    assert_eq!(status, 404, "gone");
    let (_, audit) = get(&warren, "/api/v1/audit", &ada).await;
    let entry = audit.as_array().unwrap().iter().find(|e| e["id"] == audit_id).expect("the delete audited");
    assert_eq!(
        (&entry["action"], &entry["actor"], &entry["outcome"]),
        (&json!("custody delete"), &json!("ada"), &json!("done"))
    );
    let (_, fates) = get(&warren, &format!("/api/v1/audit/{audit_id}/messages"), &ada).await;
    assert!(fates.to_string().contains("\"m1\""), "the deleted message's id: {fates}");

    // A record a running replay has claimed stays, and the refusal is audited too.
    let db = warren::history::open(&warren.dir.path().join("warren.db")).await.unwrap();
    sqlx::query("update custody_messages set state = 'claimed', job = 'audit-999999' where id = ?")
        .bind(ids[1])
        .execute(&db)
        .await
        .unwrap();
    let (status, answer) = post(&warren, &format!("{api}/{}/delete", ids[1]), auth(&ada), json!({})).await;
    assert_eq!(status, 409, "{answer}");
    assert!(answer.to_string().contains("claimed"), "{answer}");
    let (status, _) = get(&warren, &format!("{api}/{}", ids[1]), &ada).await;
    assert_eq!(status, 200, "still there");
    db.close().await;

    // The page's form: back to the queue's page, the record gone.
    let response = client()
        .post(warren.url(&format!("{page}/{}/delete", ids[2])))
        .header("cookie", &ada.cookie)
        .form(&[("csrf_token", ada.csrf.as_str())])
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 303);
    let (status, _) = get(&warren, &format!("{api}/{}", ids[2]), &ada).await;
    assert_eq!(status, 404);
    let (_, list) = get(&warren, &api, &vera).await;
    assert_eq!(list["custody"]["counts"]["held"], 0, "{list}");
    assert_eq!(list["custody"]["counts"]["claimed"], 1, "{list}");
    warren.stop().await;
    connection.close(0, "done".into()).await.ok();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn viewers_are_refused_every_action_and_the_queue_keeps_its_messages() {
    let (vhost, connection, channel, warren) = setup("roles").await;
    let vera = login(&warren, "vera").await;
    let otto = login(&warren, "otto").await;
    let body = json!({"selection": "all", "target": {"kind": "original_queue"}});
    for (path, needed) in actions(&vhost.name) {
        let (status, answer) =
            post(&warren, &path, Auth::Session { session: &vera, csrf: Some(&vera.csrf) }, body.clone()).await;
        assert_eq!(status, 403, "a viewer on {path}: {answer}");
        if path.starts_with("/api/") {
            assert_eq!(answer["error"]["code"], "forbidden", "{path}: {answer}");
            let message = answer["error"]["message"].as_str().unwrap();
            assert!(message.contains(needed.as_str()) && message.contains("vera is a viewer"), "{message}");
        }
        if needed == Role::Admin {
            let (status, answer) =
                post(&warren, &path, Auth::Session { session: &otto, csrf: Some(&otto.csrf) }, body.clone()).await;
            assert_eq!(status, 403, "an operator on {path}: {answer}");
        }
    }
    // Reading is allowed; account lists are not.
    assert_eq!(get(&warren, "/api/v1/queues", &vera).await.0, 200);
    assert_eq!(get(&warren, "/api/v1/users", &vera).await.0, 403);
    assert_eq!(get(&warren, "/api/v1/tokens", &otto).await.0, 403);
    assert_eq!(get(&warren, "/access", &otto).await.0, 403);
    assert_eq!(depth(&channel, "dlq").await, 20, "nothing was taken off the DLQ");

    // The same with API tokens: a viewer token is refused, an operator token needs no CSRF.
    let admin = login(&warren, "ada").await;
    let admin_auth = || Auth::Session { session: &admin, csrf: Some(&admin.csrf) };
    let (status, viewer_token) =
        post(&warren, "/api/v1/tokens", admin_auth(), json!({"name": "ci-read", "role": "viewer"})).await;
    assert_eq!(status, 201, "{viewer_token}");
    let (_, operator_token) =
        post(&warren, "/api/v1/tokens", admin_auth(), json!({"name": "ops", "role": "operator"})).await;
    let purge = format!("/api/v1/queues/local/{}/dlq/purge", encode(&vhost.name));
    let (status, answer) = post(&warren, &purge, Auth::Token(viewer_token["token"].as_str().unwrap()), json!({})).await;
    assert_eq!((status, answer["error"]["code"].as_str()), (403, Some("forbidden")), "{answer}");
    assert_eq!(depth(&channel, "dlq").await, 20);
    let (status, answer) =
        post(&warren, &purge, Auth::Token(operator_token["token"].as_str().unwrap()), json!({})).await;
    assert_eq!(status, 200, "an operator token purges: {answer}");
    assert_eq!(answer["purged"], 20);

    // The audit log names who did it; a revoked token is refused, not ignored.
    let (_, audit) = get(&warren, "/api/v1/audit", &admin).await;
    let entry = audit.as_array().unwrap().iter().find(|e| e["action"] == "purge").expect("purge audited");
    assert_eq!(entry["actor"], "token:ops", "{entry}");
    let id = operator_token["id"].as_i64().unwrap();
    let (status, _) = post(&warren, &format!("/api/v1/tokens/{id}/revoke"), admin_auth(), json!({})).await;
    assert_eq!(status, 200);
    let (status, answer) =
        post(&warren, &purge, Auth::Token(operator_token["token"].as_str().unwrap()), json!({})).await;
    assert_eq!((status, answer["error"]["code"].as_str()), (401, Some("unauthenticated")), "{answer}");
    let added = client()
        .post(warren.url("/access/users"))
        .header("cookie", &admin.cookie)
        .form(&[("name", "newbie"), ("role", "viewer"), ("password", PASSWORD), ("csrf_token", admin.csrf.as_str())])
        .send()
        .await
        .unwrap();
    // Post, then redirect: a reload shows the page, not the form again (issue 34, case 5).
    let landed = |response: reqwest::Response| {
        assert_eq!(response.status().as_u16(), 303, "{response:?}");
        let location = response.headers()["location"].to_str().unwrap().to_string();
        let page = client().get(warren.url(&location)).header("cookie", &admin.cookie).send();
        async move { page.await.unwrap().text().await.unwrap() }
    };
    assert!(landed(added).await.contains("User newbie (viewer) created"));
    assert_eq!(login(&warren, "newbie").await.csrf.len(), 43);
    // Issue 34, case 5: a role can be changed on the page (and the API), audited; removing asks
    // for its box to be ticked.
    let form = |path: String, fields: Vec<(&'static str, &'static str)>| {
        let mut fields: Vec<(&str, String)> = fields.into_iter().map(|(k, v)| (k, v.to_string())).collect();
        fields.push(("csrf_token", admin.csrf.clone()));
        client().post(warren.url(&path)).header("cookie", &admin.cookie).form(&fields).send()
    };
    let changed = form("/access/users/newbie/role".into(), vec![("role", "operator")]).await.unwrap();
    assert!(landed(changed).await.contains("newbie is now operator"));
    let (_, users) = get(&warren, "/api/v1/users", &admin).await;
    assert!(users.to_string().contains(r#""name":"newbie","role":"operator""#), "{users}");
    let kept = form("/access/users/newbie/delete".into(), vec![]).await.unwrap();
    assert!(landed(kept).await.contains("User newbie was not removed: tick the box"));
    assert_eq!(login(&warren, "newbie").await.csrf.len(), 43, "still there");
    let removed = form("/access/users/newbie/delete".into(), vec![("confirmed", "true")]).await.unwrap();
    assert!(landed(removed).await.contains("User newbie removed."));
    let (_, audit) = get(&warren, "/api/v1/audit", &admin).await;
    assert!(audit.to_string().contains(r#""action":"user role""#), "{audit}");
    let (_, tokens) = get(&warren, "/api/v1/tokens", &admin).await;
    assert!(!tokens.to_string().contains(operator_token["token"].as_str().unwrap()), "tokens are never listed");

    warren.stop().await;
    connection.close(0, "done".into()).await.ok();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn state_changes_need_the_csrf_token_and_anonymous_requests_need_a_login() {
    let (vhost, connection, channel, warren) = setup("csrf").await;
    let otto = login(&warren, "otto").await;
    let purge = format!("/api/v1/queues/local/{}/dlq/purge", encode(&vhost.name));
    for csrf in [None, Some("wrong"), Some("")] {
        let (status, answer) = post(&warren, &purge, Auth::Session { session: &otto, csrf }, json!({})).await;
        assert_eq!((status, answer["error"]["code"].as_str()), (403, Some("csrf")), "token {csrf:?}: {answer}");
    }
    // A plain HTML form without the field is refused too; with it, it passes the check.
    let form = |csrf: Option<&str>| {
        let mut fields = vec![("scope", "purge".to_string()), ("confirm", "true".to_string())];
        if let Some(csrf) = csrf {
            fields.push(("csrf_token", csrf.to_string()));
        }
        client()
            .post(warren.url(&format!("/dlq/local/{}/dlq/requeue", encode(&vhost.name))))
            .header("cookie", &otto.cookie)
            .form(&fields)
            .send()
    };
    assert_eq!(form(None).await.unwrap().status().as_u16(), 403);
    assert_eq!(depth(&channel, "dlq").await, 20, "refused requests took nothing");
    let purged = form(Some(&otto.csrf)).await.unwrap();
    assert_eq!(purged.status().as_u16(), 200);
    assert!(purged.text().await.unwrap().contains("20 messages deleted"));
    assert_eq!(depth(&channel, "dlq").await, 0);

    // No credentials: the API says 401, pages redirect to the login form.
    let (status, answer) = post(&warren, &purge, Auth::Nobody, json!({})).await;
    assert_eq!((status, answer["error"]["code"].as_str()), (401, Some("unauthenticated")), "{answer}");
    let page = client().get(warren.url("/queues?sort=ready")).header("accept", "text/html").send().await.unwrap();
    assert_eq!(page.status().as_u16(), 303);
    assert_eq!(page.headers()["location"], "/login?next=/queues%3Fsort%3Dready");
    let api = client().get(warren.url("/api/v1/queues")).send().await.unwrap();
    assert_eq!(api.status().as_u16(), 401);

    // Logout ends the session on the server, not only in the browser.
    let logout = client()
        .post(warren.url("/logout"))
        .header("cookie", &otto.cookie)
        .form(&[("csrf_token", otto.csrf.as_str())])
        .send()
        .await
        .unwrap();
    assert_eq!(logout.status().as_u16(), 303);
    assert!(logout.headers()["set-cookie"].to_str().unwrap().contains("Max-Age=0"));
    assert_eq!(get(&warren, "/api/v1/me", &otto).await.0, 401, "the old cookie no longer works");
    warren.stop().await;
    connection.close(0, "done".into()).await.ok();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn password_guessing_is_throttled_and_every_login_is_audited() {
    let warren = Warren::start("[[brokers]]\nname = \"local\"\nvhosts_include = [\"warren-none\"]\n").await;
    add_users(&warren, &[("ada", Role::Admin)]).await;
    let attempt = |password: &'static str| {
        client().post(warren.url("/login")).form(&[("name", "ada"), ("password", password)]).send()
    };
    for _ in 0..auth::FREE_FAILURES {
        assert_eq!(attempt("guess").await.unwrap().status().as_u16(), 401);
    }
    let throttled = attempt(PASSWORD).await.unwrap();
    assert_eq!(throttled.status().as_u16(), 429, "even the right password waits");
    assert!(throttled.headers().contains_key("retry-after"));
    assert!(throttled.text().await.unwrap().contains("Too many failed logins"));

    let db = warren::history::open(&warren.dir.path().join("warren.db")).await.unwrap();
    let logins: Vec<(String, String, i64, i64)> =
        sqlx::query_as("select actor, outcome, attempts, throttled from audit_log where action = 'login' order by id")
            .fetch_all(&db)
            .await
            .unwrap();
    db.close().await;
    // Counted, not listed: one row per address, name and minute (two if the minute turned).
    assert!(!logins.is_empty() && logins.len() <= 2, "{logins:?}");
    assert!(logins.iter().all(|(actor, outcome, _, _)| actor == "ada" && outcome == "failed"), "{logins:?}");
    let counts = logins.iter().fold((0, 0), |(n, t), (_, _, attempts, throttled)| (n + attempts, t + throttled));
    assert_eq!(counts, (auth::FREE_FAILURES as i64 + 1, 1), "{logins:?}");

    // The failures are in the database: a restart (or another replica on it) does not grant a
    // fresh burst of guesses.
    let warren = warren.restart().await;
    let again = client().post(warren.url("/login")).form(&[("name", "ada"), ("password", PASSWORD)]).send();
    assert_eq!(again.await.unwrap().status().as_u16(), 429, "still throttled after a restart");
    warren.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trusted_proxy_header_is_believed_only_from_the_proxy() {
    let proxy = |trusted: &str| {
        format!(
            "[[brokers]]\nname = \"local\"\nvhosts_include = [\"warren-none\"]\n\
             [auth.proxy]\nheader = \"X-Forwarded-User\"\nrole_header = \"X-Forwarded-Role\"\ntrusted = [{trusted:?}]\n"
        )
    };
    let warren = Warren::start(&proxy("127.0.0.1/32")).await;
    let me = |warren: &Warren, user: Option<&str>| {
        let mut request = client().get(warren.url("/api/v1/me"));
        if let Some(user) = user {
            request = request.header("x-forwarded-user", user).header("x-forwarded-role", "operator");
        }
        async move {
            let response = request.send().await.unwrap();
            (response.status().as_u16(), response.json::<Value>().await.unwrap_or(Value::Null))
        }
    };
    let (status, answer) = me(&warren, Some("bob")).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!((answer["actor"].as_str(), answer["role"].as_str()), (Some("proxy:bob"), Some("operator")));
    assert_eq!(me(&warren, None).await.0, 401, "no header, no access: the proxy counts as authentication");
    assert_eq!(me(&warren, Some("<script>")).await.0, 401, "an invalid name is refused");
    warren.stop().await;

    let elsewhere = Warren::start(&proxy("10.1.2.0/24")).await;
    assert_eq!(me(&elsewhere, Some("bob")).await.0, 401, "the header from an untrusted address is ignored");
    elsewhere.stop().await;
}

/// A proxy user's CSRF token is signed with the installation's key, kept in the database: a form
/// opened before a restart still posts after it, as it would through another replica on the same
/// database (issue 33). Before, each process signed with a key of its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_proxy_users_csrf_token_outlives_a_restart() {
    let config = "[[brokers]]\nname = \"local\"\nvhosts_include = [\"warren-none\"]\n\
                  [auth.proxy]\nheader = \"X-Forwarded-User\"\nrole_header = \"X-Forwarded-Role\"\n\
                  trusted = [\"127.0.0.1/32\"]\n";
    let as_bob = |request: reqwest::RequestBuilder| {
        request.header("x-forwarded-user", "bob").header("x-forwarded-role", "operator")
    };
    let warren = Warren::start(config).await;
    let me: Value = as_bob(client().get(warren.url("/api/v1/me"))).send().await.unwrap().json().await.unwrap();
    let token = me["csrf_token"].as_str().expect("a CSRF token").to_string();
    let warren = warren.restart().await;
    let preview = |csrf: &str| {
        as_bob(client().post(warren.url("/api/v1/alerts/rules/preview")))
            .header("x-csrf-token", csrf)
            // A browser's request: scripts without it are not asked for the token.
            .header("sec-fetch-site", "same-origin")
            .header("content-type", "application/json")
            .body("{}")
            .send()
    };
    assert_eq!(preview("not-the-token").await.unwrap().status(), 403, "a wrong token is refused");
    let status = preview(&token).await.unwrap().status();
    assert_ne!(status, 403, "the token from before the restart is taken");
    warren.stop().await;
}

/// The real binary: on 0.0.0.0 without users it refuses to start and says what to do; after
/// `warren user add` it starts.
#[test]
fn listening_on_all_interfaces_without_authentication_refuses_to_start() {
    let binary = env!("CARGO_BIN_EXE_warren");
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("warren.db");
    let db = db.to_str().unwrap();
    let refused = Command::new(binary)
        .args(["--database", db, "--listen", "0.0.0.0:0", "--management-url", "http://127.0.0.1:9"])
        .output()
        .unwrap();
    assert!(!refused.status.success(), "it must not start");
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains("refusing to listen on 0.0.0.0") && stderr.contains("warren user add"),
        "the message says what to configure: {stderr}"
    );

    let mut add = Command::new(binary)
        .args(["--database", db, "user", "add", "ada", "--role", "admin"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    writeln!(add.stdin.take().unwrap(), "{PASSWORD}").unwrap();
    assert!(add.wait().unwrap().success(), "warren user add");

    let mut serving = Command::new(binary)
        .args(["--database", db, "--listen", "0.0.0.0:0", "--management-url", "http://127.0.0.1:9"])
        .env("RUST_LOG", "warren=info")
        .env("NO_COLOR", "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = BufReader::new(serving.stdout.take().unwrap());
    let started = stdout.lines().map_while(Result::ok).take(50).any(|line| line.contains("warren is serving"));
    serving.kill().unwrap();
    serving.wait().unwrap();
    assert!(started, "with a user it starts on 0.0.0.0");
}

/// In Chromium: the login form, a queue named with markup that never runs, htmx requests and
/// forms that carry the CSRF token, and logout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_browser_logs_in_acts_with_csrf_tokens_and_runs_no_script_from_a_queue_name() {
    let vhost = TestVhost::create("access-ui").await;
    let connection = vhost.connect().await;
    let channel = vhost.channel(&connection).await;
    let hostile = "<img src=x onerror=\"window.__pwned=1\"><script>window.__pwned=2</script>";
    common::declare(&channel, hostile, false).await;
    common::publish(&channel, hostile, 2, lapin::BasicProperties::default()).await;
    let warren = Warren::for_vhost(&vhost.name, 1).await;
    add_users(&warren, &[("ada", Role::Admin)]).await;
    let (_driver, browser) = common::browser::start().await;

    browser.goto(&warren.url("/queues")).await.unwrap();
    assert_eq!(browser.current_url().await.unwrap().path(), "/login", "the list needs a login");
    browser.find(Locator::Css("input[name=name]")).await.unwrap().send_keys("ada").await.unwrap();
    browser.find(Locator::Css("input[name=password]")).await.unwrap().send_keys(PASSWORD).await.unwrap();
    browser.find(Locator::Css("form.login button")).await.unwrap().click().await.unwrap();
    wait_for("the queue list after login", Duration::from_secs(30), || async {
        let url = browser.current_url().await.map_err(|e| e.to_string())?;
        let text = browser
            .find(Locator::Css("body"))
            .await
            .map_err(|e| e.to_string())?
            .text()
            .await
            .map_err(|e| e.to_string())?;
        if url.path() == "/queues" && text.contains(hostile) {
            Ok(())
        } else {
            Err(format!("{url}: {}", text.chars().take(200).collect::<String>()))
        }
    })
    .await;
    let header = browser.find(Locator::Css("header .who")).await.unwrap().text().await.unwrap();
    assert!(header.contains("ada") && header.contains("admin"), "{header}");
    browser.find(Locator::LinkText(hostile)).await.unwrap().click().await.unwrap();
    wait_for("the queue page", Duration::from_secs(20), || async {
        let h1 = browser.find(Locator::Css("h1.queue-name")).await.map_err(|e| e.to_string())?;
        let text = h1.text().await.map_err(|e| e.to_string())?;
        if text.starts_with(hostile) {
            Ok(())
        } else {
            Err(text)
        }
    })
    .await;
    let safe = browser.execute("return window.__pwned === undefined;", vec![]).await.unwrap();
    assert_eq!(safe, Value::Bool(true), "markup in a queue name ran");

    // The rule editor: typing runs an htmx POST (CSRF token in the header from <body
    // hx-headers>); saving is a plain form POST (CSRF token in the hidden field).
    browser.goto(&warren.url("/alerts")).await.unwrap();
    let editor = "form.rule-editor";
    for (field, value) in [("id", "browser-rule"), ("name", "Anything ready"), ("threshold", "0"), ("for_secs", "0")] {
        let input = browser.find(Locator::Css(&format!("{editor} input[name={field}]"))).await.unwrap();
        input.clear().await.unwrap();
        input.send_keys(value).await.unwrap();
    }
    wait_for("the live preview (an htmx POST) to list the queue", Duration::from_secs(20), || async {
        let preview = browser.find(Locator::Css("#preview")).await.map_err(|e| e.to_string())?;
        let text = preview.text().await.map_err(|e| e.to_string())?;
        if text.contains(hostile) {
            Ok(())
        } else {
            Err(text)
        }
    })
    .await;
    browser.find(Locator::Css(&format!("{editor} button[type=submit]"))).await.unwrap().click().await.unwrap();
    wait_for("the saved rule on the alerts page", Duration::from_secs(20), || async {
        let text = browser
            .find(Locator::Css("body"))
            .await
            .map_err(|e| e.to_string())?
            .text()
            .await
            .map_err(|e| e.to_string())?;
        if text.contains("browser-rule") && !text.contains("CSRF") {
            Ok(())
        } else {
            Err(text.chars().take(300).collect())
        }
    })
    .await;
    let db = warren::history::open(&warren.dir.path().join("warren.db")).await.unwrap();
    let saved: i64 =
        sqlx::query_scalar("select count(*) from alert_rules where id = 'browser-rule'").fetch_one(&db).await.unwrap();
    db.close().await;
    assert_eq!(saved, 1, "the form POST was accepted");
    let safe = browser.execute("return window.__pwned === undefined;", vec![]).await.unwrap();
    assert_eq!(safe, Value::Bool(true), "markup in a queue name ran in the preview");

    browser.find(Locator::Css("form.logout button")).await.unwrap().click().await.unwrap();
    wait_for("the login page after logout", Duration::from_secs(20), || async {
        let url = browser.current_url().await.map_err(|e| e.to_string())?;
        if url.path() == "/login" {
            Ok(())
        } else {
            Err(url.to_string())
        }
    })
    .await;
    browser.goto(&warren.url("/alerts")).await.unwrap();
    assert_eq!(browser.current_url().await.unwrap().path(), "/login", "logged out for real");
    browser.close().await.unwrap();
    warren.stop().await;
    connection.close(0, "done".into()).await.ok();
}

/// A password change ends the user's sessions in its own transaction; the answer once counted
/// them afterwards and said `sessions_ended: 0`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_password_change_reports_the_sessions_it_ended() {
    let warren = Warren::start("[[brokers]]\nname = \"local\"\nvhosts_include = [\"warren-none\"]\n").await;
    add_users(&warren, &[("ada", Role::Admin), ("vera", Role::Viewer)]).await;
    let ada = login(&warren, "ada").await;
    let first = login(&warren, "vera").await;
    let second = login(&warren, "vera").await;
    let (status, body) = post(
        &warren,
        "/api/v1/users/vera/password",
        Auth::Session { session: &ada, csrf: Some(&ada.csrf) },
        json!({"password": "another long password"}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["sessions_ended"], 2, "{body}");
    for session in [&first, &second] {
        assert_eq!(get(&warren, "/api/v1/me", session).await.0, 401, "vera's old sessions are gone");
    }
    assert_eq!(get(&warren, "/api/v1/me", &ada).await.0, 200, "ada's session stays");
    warren.stop().await;
}

/// Issue 19, cases 8 and 13: a refused page and a page that does not exist keep the header (who
/// is logged in, the navigation), `/dlq` leads to the dead-letter queues, there is a favicon,
/// and the API answers an unknown path in JSON.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn error_pages_keep_the_user_and_the_navigation() {
    let (_vhost, connection, _channel, warren) = setup("errorpages").await;
    let vera = login(&warren, "vera").await;
    let page = |path: &'static str| {
        let (warren, cookie) = (&warren, vera.cookie.clone());
        async move {
            let response = client()
                .get(warren.url(path))
                .header("cookie", cookie)
                .header("accept", "text/html")
                .send()
                .await
                .unwrap();
            (response.status().as_u16(), response.text().await.unwrap())
        }
    };
    // Refused: 403, with vera's name and role and the navigation.
    let (status, body) = page("/access").await;
    assert_eq!(status, 403, "{body}");
    assert!(
        body.contains("vera · viewer") && body.contains("<nav>") && body.contains("needs the admin role"),
        "{body}"
    );
    // Not there: 404 with the same, and a hint.
    let (status, body) = page("/no/such/page").await;
    assert_eq!(status, 404, "{body}");
    assert!(
        body.contains("vera · viewer") && body.contains("<nav>") && body.contains("no page at /no/such/page"),
        "{body}"
    );
    // A handler's own 404 (a broker that does not exist) keeps the header too.
    let (status, body) = page("/queues/nosuchbroker/x/y").await;
    assert_eq!(status, 404, "{body}");
    assert!(body.contains("vera · viewer"), "{body}");
    let response = client().get(warren.url("/dlq")).header("cookie", &vera.cookie).send().await.unwrap();
    assert_eq!(
        (response.status().as_u16(), response.headers()["location"].to_str().unwrap()),
        (303, "/queues?dlq=true")
    );
    let response = client().get(warren.url("/favicon.ico")).send().await.unwrap();
    assert_eq!(response.status().as_u16(), 200);
    assert_eq!(response.headers()["content-type"], "image/svg+xml");
    let (status, body) = get(&warren, "/api/v1/nothing-here", &vera).await;
    assert_eq!((status, body["error"]["code"].as_str()), (404, Some("not_found")), "{body}");
    warren.stop().await;
    connection.close(0, "done".into()).await.ok();
}

/// Issue 19, case 8: what a role cannot do is not offered on the alerts page.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_alerts_page_offers_each_role_only_what_it_may_do() {
    let (_vhost, connection, _channel, warren) = setup("alertroles").await;
    let ada = login(&warren, "ada").await;
    let rule = json!({"id": "deep", "name": "Deep", "metric": "ready", "comparator": ">", "threshold": 100,
                      "severity": "warning"});
    let (status, body) =
        post(&warren, "/api/v1/alerts/rules", Auth::Session { session: &ada, csrf: Some(&ada.csrf) }, rule).await;
    assert_eq!(status, 201, "{body}");
    let page = |name: &'static str| {
        let warren = &warren;
        async move {
            let session = login(warren, name).await;
            let response = client().get(warren.url("/alerts")).header("cookie", &session.cookie).send().await.unwrap();
            response.text().await.unwrap()
        }
    };
    let vera = page("vera").await;
    for hidden in [">Edit<", ">Delete<", "Silence rule", "End now"] {
        assert!(!vera.contains(hidden), "a viewer is not offered {hidden}: {vera}");
    }
    assert!(vera.contains("Deep"), "but reads the rule");
    let otto = page("otto").await;
    assert!(otto.contains("Silence rule") && !otto.contains(">Delete<") && !otto.contains(">Edit<"), "{otto}");
    let ada_page = page("ada").await;
    assert!(ada_page.contains("Silence rule") && ada_page.contains(">Delete<") && ada_page.contains(">Edit<"));
    warren.stop().await;
    connection.close(0, "done".into()).await.ok();
}

/// Issue 19, item 10: with no snapshot, the DLQ page offers an operator "Requeue all" and the
/// purge; a viewer is offered neither.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dlq_page_offers_the_whole_queue_actions_to_operators_only() {
    let (vhost, connection, _channel, warren) = setup("wholequeue").await;
    let path = format!("/dlq/local/{}/dlq", encode(&vhost.name));
    let page = |name: &'static str| {
        let (warren, path) = (&warren, &path);
        async move {
            let session = login(warren, name).await;
            let response = client().get(warren.url(path)).header("cookie", &session.cookie).send().await.unwrap();
            response.text().await.unwrap()
        }
    };
    let otto = page("otto").await;
    assert!(otto.contains("No snapshot yet"), "{otto}");
    assert!(otto.contains(">Requeue all…<") && otto.contains(">Purge the queue…<"), "{otto}");
    let vera = page("vera").await;
    assert!(vera.contains("No snapshot yet"), "{vera}");
    assert!(!vera.contains("Requeue all") && !vera.contains("Purge the queue"), "{vera}");
    warren.stop().await;
    connection.close(0, "done".into()).await.ok();
}
