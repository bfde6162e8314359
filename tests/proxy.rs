//! Issue 36, case 2: warren behind a real nginx at `/warren/` (`public_url` ends in the path),
//! with nginx stripping the prefix and with nginx keeping it. Every URL warren writes (links,
//! assets, forms, htmx requests, chart sources, redirects, the cookie's path) carries the
//! prefix, and following them through nginx finds no 404 and no 500: once with a plain HTTP
//! client over every page it can reach, once with headless Chromium over the pages, their
//! assets, their htmx requests and their forms.
//!
//! Needs nginx (Debian's package), and Chromium with chromedriver for the browser tests;
//! `.ci/run` installs them. Missing = failed test, never a skipped one.

mod common;

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::Duration;

use common::dead_letters::{dead_letter, numbered};
use common::nginx::{free_port, Nginx, Style};
use common::{declare, publish, wait_for, TestVhost, Warren};
use fantoccini::{Client, Locator};
use lapin::BasicProperties;
use reqwest::redirect::Policy;
use serde_json::Value;

const PREFIX: &str = "/warren/";
const PASSWORD: &str = "correct horse battery staple";

/// warren with a queue, a dead-letter queue with a snapshot, a job and a firing alert (so
/// every kind of page has something to link to), an admin `ada`, and nginx in front.
struct Proxied {
    nginx: Nginx,
    warren: Warren,
    _vhost: TestVhost,
    _connection: lapin::Connection,
}

async fn proxied(test: &str, style: Style) -> Proxied {
    let vhost = TestVhost::create(test).await;
    let connection = vhost.connect().await;
    let channel = vhost.channel(&connection).await;
    declare(&channel, "orders", false).await;
    publish(&channel, "orders", 3, BasicProperties::default()).await;
    dead_letter(&vhost, &channel, "work.dlq", false, numbered(3)).await;

    let port = free_port();
    let toml = format!(
        "public_url = \"http://127.0.0.1:{port}/warren/\"\n\
         [[alerts]]\nid = \"ready\"\nname = \"Anything ready\"\nmetric = \"ready\"\ncomparator = \">\"\n\
         threshold = 0\nseverity = \"warning\"\n\n[[brokers]]\nname = \"local\"\nvhosts_include = [{:?}]\n\
         poll_interval_secs = 1\n",
        vhost.name
    );
    let warren = Warren::start(&toml).await;
    wait_for("work.dlq listed by warren", Duration::from_secs(30), || async {
        warren.queue(&vhost.name, "work.dlq").await.map(|_| ()).ok_or_else(|| "not yet".to_string())
    })
    .await;
    // Set up straight at warren, anonymous on loopback, while there are no users yet.
    warren.snapshot(&vhost.name, "work.dlq", 10).await;
    let requeue = format!("/api/v1/queues/local/{}/work.dlq/requeue", common::encode(&vhost.name));
    warren.run_move(&requeue, serde_json::json!({"selection": {"positions": [1]}})).await;
    warren.snapshot(&vhost.name, "work.dlq", 10).await;
    let db = warren::history::open(&warren.dir.path().join("warren.db")).await.unwrap();
    warren::auth::add_user(&warren::storage::sqlite::store(db.clone()), "ada", warren::auth::Role::Admin, PASSWORD)
        .await
        .unwrap();
    db.close().await;

    let nginx = Nginx::start(port, warren.addr, style).await;
    Proxied { nginx, warren, _vhost: vhost, _connection: connection }
}

fn client() -> reqwest::Client {
    reqwest::Client::builder().redirect(Policy::none()).build().unwrap()
}

/// The text of an HTML attribute value as the browser reads it.
fn unescape(value: &str) -> String {
    value
        .replace("&quot;", "\"")
        .replace("&#34;", "\"")
        .replace("&#39;", "'")
        .replace("&#x27;", "'")
        .replace("&#x2F;", "/")
        .replace("&#47;", "/")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        // askama writes `&` as `&#38;`: a browser reads it as `&`, and a crawler that does not
        // cut the URL at `#`, as the advisor's apply link (two query parameters) showed.
        .replace("&#38;", "&")
        .replace("&amp;", "&")
}

/// A URL warren wrote into a page, and whether a GET of it alone is meant (links, assets, htmx
/// polls, chart sources) or not (forms and `hx-post`, which need their fields: only their prefix
/// is checked here; the browser test sends some).
#[derive(Debug)]
struct Written {
    attribute: String,
    url: String,
    get: bool,
}

/// Every URL in `html`: `href`, `src`, `action`, `hx-get`, `hx-post`, `data-src`, and the
/// sources inside `data-compare`.
fn urls_in(html: &str) -> Vec<Written> {
    let attributes =
        regex::Regex::new(r#"\s(href|src|action|hx-get|hx-post|data-src|data-compare)="([^"]*)""#).unwrap();
    let mut out = Vec::new();
    for c in attributes.captures_iter(html) {
        let (attribute, value) = (c[1].to_string(), unescape(&c[2]));
        if attribute == "data-compare" {
            let sources: Value = serde_json::from_str(&value).expect("data-compare is JSON");
            for source in sources.as_array().into_iter().flatten() {
                let url = source["src"].as_str().unwrap_or_default().to_string();
                out.push(Written { attribute: "data-compare src".into(), url, get: true });
            }
            continue;
        }
        // A link within the page ("#main", the skip link) names no path at all.
        if value.starts_with('#') {
            continue;
        }
        // Links out of warren (the documentation cites other sites) are not crawled; a link to
        // warren itself with scheme and host would still fail the prefix check.
        if is_external(&value) {
            continue;
        }
        // A heading of a documentation page is the page: crawled once.
        let value = value.split('#').next().unwrap_or_default().to_string();
        let get = attribute != "hx-post" && attribute != "action";
        out.push(Written { attribute, url: value, get });
    }
    out
}

/// An absolute URL to another host than this machine's.
fn is_external(url: &str) -> bool {
    let Some(rest) = url.strip_prefix("http://").or_else(|| url.strip_prefix("https://")) else {
        return false;
    };
    let host = rest.split(['/', ':', '?', '#']).next().unwrap_or_default();
    !matches!(host, "127.0.0.1" | "localhost" | "[::1]")
}

/// A URL to crawl: under the prefix, not seen yet, and not a fifth variant of a path already
/// crawled four times (the sort and range links multiply otherwise).
fn worth_crawling(url: &str, seen: &BTreeSet<String>, per_path: &mut BTreeMap<String, usize>) -> bool {
    if seen.contains(url) || !url.starts_with(PREFIX) {
        return false;
    }
    let path = url.split('?').next().unwrap_or(url).to_string();
    let variants = per_path.entry(path).or_default();
    *variants += 1;
    *variants <= 4
}

/// Logs `ada` in through nginx by the login form; returns the session cookie.
async fn log_in(nginx: &Nginx) -> String {
    let http = client();
    let response = http
        .post(nginx.url("/warren/login"))
        .form(&[("name", "ada"), ("password", PASSWORD), ("next", "/queues")])
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 303, "the login through nginx succeeds: {:?}", response.text().await);
    assert_eq!(response.headers()["location"], "/warren/queues", "the login lands under the prefix");
    let set_cookie = response.headers()["set-cookie"].to_str().unwrap().to_string();
    assert!(set_cookie.contains("; Path=/warren;"), "the session cookie is for warren's path only: {set_cookie}");
    set_cookie.split(';').next().unwrap().to_string()
}

async fn every_url_carries_the_prefix_and_answers(style: Style) {
    let p = proxied("proxylinks", style).await;
    let http = client();

    // Health checks answer probes straight at warren and through nginx.
    assert_eq!(http.get(p.warren.url("/healthz")).send().await.unwrap().status(), 200);
    assert_eq!(http.get(p.nginx.url("/warren/healthz")).send().await.unwrap().status(), 200);

    // Not logged in: the page sends the browser to the login form under the prefix.
    let refused =
        http.get(p.nginx.url("/warren/queues?sort=ready")).header("accept", "text/html").send().await.unwrap();
    assert_eq!(refused.status(), 303);
    assert_eq!(refused.headers()["location"], "/warren/login?next=/queues%3Fsort%3Dready");
    let htmx = http.get(p.nginx.url("/warren/queues")).header("hx-request", "true").send().await.unwrap();
    assert_eq!(htmx.headers()["hx-redirect"], "/warren/login?next=/queues");

    let mut problems: Vec<String> = Vec::new();
    let login_page = http.get(p.nginx.url("/warren/login?next=/queues")).send().await.unwrap().text().await.unwrap();
    for written in urls_in(&login_page) {
        if !written.url.starts_with(PREFIX) {
            problems.push(format!("/warren/login: {}={:?} is not under {PREFIX}", written.attribute, written.url));
        }
    }
    let cookie = log_in(&p.nginx).await;

    // Every page reachable from the overview, breadth first, bounded.
    let mut queue: VecDeque<(String, bool, String)> = VecDeque::from([("/warren/".to_string(), false, "start".into())]);
    let mut seen: BTreeSet<String> = BTreeSet::new();
    let mut per_path: BTreeMap<String, usize> = BTreeMap::new();
    let mut pages = 0;
    while let Some((url, htmx, from)) = queue.pop_front() {
        if seen.len() >= 300 {
            break;
        }
        seen.insert(url.clone());
        let mut request = http.get(p.nginx.url(&url)).header("cookie", &cookie).header("accept", "text/html");
        if htmx {
            request = request.header("hx-request", "true");
        }
        let response = request.send().await.unwrap();
        let status = response.status().as_u16();
        if status >= 400 {
            problems.push(format!("GET {url} (from {from}): {status}"));
            continue;
        }
        if (300..400).contains(&status) {
            let location = response.headers().get("location").and_then(|l| l.to_str().ok()).unwrap_or_default();
            if !location.starts_with(PREFIX) {
                problems.push(format!("GET {url} (from {from}) redirects to {location:?}, not under {PREFIX}"));
            } else if worth_crawling(location, &seen, &mut per_path) {
                queue.push_back((location.to_string(), false, url.clone()));
            }
            continue;
        }
        let is_html = response
            .headers()
            .get("content-type")
            .and_then(|t| t.to_str().ok())
            .is_some_and(|t| t.starts_with("text/html"));
        if !is_html {
            continue;
        }
        pages += 1;
        let body = response.text().await.unwrap();
        for written in urls_in(&body) {
            if !written.url.starts_with(PREFIX) {
                problems.push(format!("{url}: {}={:?} is not under {PREFIX}", written.attribute, written.url));
                continue;
            }
            if written.get && worth_crawling(&written.url, &seen, &mut per_path) {
                queue.push_back((written.url, written.attribute == "hx-get", url.clone()));
            }
        }
    }
    assert!(pages >= 15, "the crawl reached only {pages} pages: {seen:#?}");
    assert!(problems.is_empty(), "{} problems over {} URLs:\n{}", problems.len(), seen.len(), problems.join("\n"));

    // Logging out through nginx ends the session and forgets the cookie on warren's path.
    let me: Value = http
        .get(p.nginx.url("/warren/api/v1/me"))
        .header("cookie", &cookie)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let csrf = me["csrf_token"].as_str().expect("a CSRF token").to_string();
    let out = http
        .post(p.nginx.url("/warren/logout"))
        .header("cookie", &cookie)
        .form(&[("csrf_token", csrf.as_str())])
        .send()
        .await
        .unwrap();
    assert_eq!(out.status(), 303);
    assert_eq!(out.headers()["location"], "/warren/login");
    let cleared = out.headers()["set-cookie"].to_str().unwrap();
    assert!(cleared.contains("Max-Age=0") && cleared.contains("; Path=/warren;"), "{cleared}");
    p.warren.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_url_carries_the_prefix_when_nginx_strips_it() {
    every_url_carries_the_prefix_and_answers(Style::StripsPrefix).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_url_carries_the_prefix_when_nginx_keeps_it() {
    every_url_carries_the_prefix_and_answers(Style::KeepsPrefix).await;
}

// ----- Chromium -----

/// Waits until the page has made no new request for a second (the charts' JSON, htmx), at
/// most 10 s; returns every request it made as (URL, HTTP status, initiator type), status 0
/// for one that failed.
async fn requests_when_quiet(client: &Client) -> Vec<(String, u64, String)> {
    let read = "return performance.getEntriesByType('resource').map(e => [e.name, e.responseStatus, e.initiatorType]);";
    let mut last = usize::MAX;
    let mut stable = 0;
    for _ in 0..40 {
        let entries = client.execute(read, vec![]).await.unwrap();
        let count = entries.as_array().map_or(0, Vec::len);
        stable = if count == last { stable + 1 } else { 0 };
        last = count;
        if stable >= 4 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let entries = client.execute(read, vec![]).await.unwrap();
    entries
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
            (text(&e[0]), e[1].as_u64().unwrap_or(0), text(&e[2]))
        })
        .collect()
}

async fn current_path(client: &Client) -> String {
    let url = client.current_url().await.unwrap();
    match url.query() {
        Some(q) => format!("{}?{q}", url.path()),
        None => url.path().to_string(),
    }
}

async fn browser_crawl(style: Style) {
    let p = proxied("proxybrowser", style).await;
    let origin = format!("http://127.0.0.1:{}", p.nginx.port);
    let (_driver, client) = common::browser::start().await;

    // The login redirect keeps the prefix, and so does the form's landing page.
    client.goto(&p.nginx.url("/warren/queues")).await.unwrap();
    assert_eq!(current_path(&client).await, "/warren/login?next=/queues");
    client.find(Locator::Css("input[name=name]")).await.unwrap().send_keys("ada").await.unwrap();
    client.find(Locator::Css("input[name=password]")).await.unwrap().send_keys(PASSWORD).await.unwrap();
    client.find(Locator::Css("form.login button")).await.unwrap().click().await.unwrap();
    wait_for("the login to land on the queue list", Duration::from_secs(30), || async {
        match current_path(&client).await.as_str() {
            "/warren/queues" => Ok(()),
            other => Err(other.to_string()),
        }
    })
    .await;

    // Every page of the navigation and the pages they link to, breadth first, bounded: each
    // loads, and so does every asset, chart source and htmx request it makes.
    let mut problems: Vec<String> = Vec::new();
    let mut queue: VecDeque<(String, String)> = VecDeque::from([("/warren/".to_string(), "start".to_string())]);
    let mut seen: BTreeSet<String> = BTreeSet::new();
    let mut per_path: BTreeMap<String, usize> = BTreeMap::new();
    let mut htmx_requests = 0;
    while let Some((path, from)) = queue.pop_front() {
        if seen.len() >= 40 {
            break;
        }
        seen.insert(path.clone());
        client.goto(&format!("{origin}{path}")).await.unwrap();
        let status = client
            .execute("return performance.getEntriesByType('navigation')[0].responseStatus;", vec![])
            .await
            .unwrap();
        if status.as_u64().is_none_or(|s| s >= 400) {
            problems.push(format!("page {path} (from {from}): {status}"));
        }
        // Each htmx region asks for its fragment now, as its poll would, with its own headers.
        let started = client
            .execute(
                "if (typeof htmx === 'undefined') { return -1; } \
                 const regions = Array.from(document.querySelectorAll('[hx-get]')); \
                 regions.forEach(el => htmx.ajax('GET', el.getAttribute('hx-get'), {source: el, swap: 'none'})); \
                 return regions.length;",
                vec![],
            )
            .await
            .unwrap();
        if started.as_i64() == Some(-1) && !path.starts_with("/warren/api/") {
            problems.push(format!("page {path}: htmx did not load"));
        }
        for (url, status, initiator) in requests_when_quiet(&client).await {
            if initiator == "xmlhttprequest" {
                htmx_requests += 1;
            }
            if status == 0 || status >= 400 {
                problems.push(format!("page {path} requested {url}: {status}"));
            }
        }
        let links = client
            .execute("return Array.from(document.querySelectorAll('a[href]')).map(a => a.href);", vec![])
            .await
            .unwrap();
        for link in links.as_array().unwrap().iter().filter_map(Value::as_str) {
            let Some(local) = link.strip_prefix(&origin) else { continue };
            let local = local.split('#').next().unwrap_or(local).to_string();
            if !local.starts_with(PREFIX) {
                problems.push(format!("page {path} links to {local}, not under {PREFIX}"));
            } else if !local.starts_with("/warren/api/")
                // The documentation's pages are static (no script, no htmx): the contents page
                // is crawled here, the rest by the HTTP crawl and tests/docs.rs, so that they do
                // not take the places of the pages that run scripts.
                && !local.starts_with("/warren/docs/")
                && !local.contains("/download")
                && !local.contains("/export")
                && worth_crawling(&local, &seen, &mut per_path)
            {
                queue.push_back((local, path.clone()));
            }
        }
    }
    assert!(seen.len() >= 20, "the browser reached only {} pages: {seen:#?}", seen.len());
    assert!(htmx_requests > 0, "no htmx request was seen");
    assert!(problems.is_empty(), "{} problems over {} pages:\n{}", problems.len(), seen.len(), problems.join("\n"));

    // htmx posts through nginx with the CSRF header: the rule editor's live preview.
    client.goto(&p.nginx.url("/warren/alerts")).await.unwrap();
    client.find(Locator::Css("form.rule-editor input[name=id]")).await.unwrap().send_keys("deep").await.unwrap();
    client.find(Locator::Css("form.rule-editor input[name=threshold]")).await.unwrap().send_keys("0").await.unwrap();
    client.find(Locator::Css("form.rule-editor input[name=name]")).await.unwrap().send_keys("Deep").await.unwrap();
    wait_for("the rule preview's POST through nginx", Duration::from_secs(20), || async {
        let requests = requests_when_quiet(&client).await;
        let previews: Vec<_> = requests.iter().filter(|(url, _, _)| url.ends_with("/warren/alerts/preview")).collect();
        if previews.iter().any(|(_, status, kind)| *status == 200 && kind == "xmlhttprequest") {
            Ok(())
        } else {
            Err(format!("{previews:?}"))
        }
    })
    .await;
    for (url, status, _) in requests_when_quiet(&client).await {
        assert!(status != 0 && status < 400, "{url}: {status}");
    }
    let preview = client.find(Locator::Css("#preview")).await.unwrap().text().await.unwrap();
    assert!(preview.starts_with("Preview"), "{preview}");

    // A form POST with its CSRF field through nginx: an API token, shown on the page it lands on.
    client.goto(&p.nginx.url("/warren/access")).await.unwrap();
    client
        .find(Locator::Css("form.add-token input[name=name]"))
        .await
        .unwrap()
        .send_keys("through-nginx")
        .await
        .unwrap();
    client.find(Locator::Css("form.add-token button")).await.unwrap().click().await.unwrap();
    wait_for("the new token listed", Duration::from_secs(20), || async {
        let text = client.find(Locator::Css("main")).await.map_err(|e| e.to_string())?.text().await;
        let text = text.map_err(|e| e.to_string())?;
        if text.contains("through-nginx") {
            Ok(())
        } else {
            Err(text.chars().take(400).collect())
        }
    })
    .await;
    let path = current_path(&client).await;
    assert!(path.starts_with(PREFIX), "the form landed on {path}");

    // Logging out lands on the login form under the prefix, and the session is gone.
    client.find(Locator::Css("form.logout button")).await.unwrap().click().await.unwrap();
    wait_for("the login form after logging out", Duration::from_secs(20), || async {
        match current_path(&client).await.as_str() {
            "/warren/login" => Ok(()),
            other => Err(other.to_string()),
        }
    })
    .await;
    client.goto(&p.nginx.url("/warren/queues")).await.unwrap();
    assert_eq!(current_path(&client).await, "/warren/login?next=/queues", "the session ended");

    client.close().await.unwrap();
    p.warren.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chromium_crawls_every_page_through_nginx_that_strips_the_prefix() {
    browser_crawl(Style::StripsPrefix).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chromium_crawls_every_page_through_nginx_that_keeps_the_prefix() {
    browser_crawl(Style::KeepsPrefix).await;
}
