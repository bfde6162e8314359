//! Headless Chromium drives the real pages: the queue list updates live, without a reload, and
//! the charts render.
//!
//! Needs `chromium` and `chromedriver` (Debian packages `chromium` and `chromium-driver`);
//! `.ci/run` installs them. Missing browser = failed test, never a skipped one.

mod common;

use std::time::Duration;

use common::dead_letters::{dead_letter, numbered};
use common::{declare, publish, wait_for, TestVhost, Warren};
use fantoccini::{Client, Locator};
use lapin::types::{AMQPValue, FieldTable};
use lapin::BasicProperties;

async fn cell_text(client: &Client, selector: &str) -> Result<String, String> {
    let element = client.find(Locator::Css(selector)).await.map_err(|e| format!("{selector}: {e}"))?;
    element.text().await.map_err(|e| e.to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queue_list_updates_live_without_reload() {
    let vhost = TestVhost::create("browser").await;
    let connection = vhost.connect().await;
    let channel = vhost.channel(&connection).await;
    declare(&channel, "browser-q", false).await;
    publish(&channel, "browser-q", 3, BasicProperties::default()).await;

    let warren = Warren::for_vhost(&vhost.name, 1).await;
    let (_driver, client) = common::browser::start().await;

    let list = warren.url(&format!("/queues?vhost={}", warren::broker::management::encode_segment(&vhost.name)));
    let row = r#"tr[data-queue="browser-q"] td.ready"#;
    wait_for("the queue row with 3 ready", Duration::from_secs(40), || async {
        client.goto(&list).await.map_err(|e| e.to_string())?;
        match cell_text(&client, row).await?.as_str() {
            "3" => Ok(()),
            other => Err(format!("ready shows {other:?}")),
        }
    })
    .await;

    // Mark this document: a reload would lose the mark.
    client.execute("window.__warrenMark = 42; return null;", vec![]).await.unwrap();
    publish(&channel, "browser-q", 4, BasicProperties::default()).await;
    wait_for("the row to show 7 ready without a reload", Duration::from_secs(40), || async {
        match cell_text(&client, row).await?.as_str() {
            "7" => Ok(()),
            other => Err(format!("ready shows {other:?}")),
        }
    })
    .await;
    let mark = client.execute("return window.__warrenMark === 42;", vec![]).await.unwrap();
    assert_eq!(mark, serde_json::Value::Bool(true), "the page was reloaded instead of updated in place");

    // The queue page draws its charts (uPlot adds a .uplot element per chart).
    client.find(Locator::Css(r#"tr[data-queue="browser-q"] td.name a"#)).await.unwrap().click().await.unwrap();
    wait_for("four rendered charts on the queue page", Duration::from_secs(20), || async {
        let charts = client.find_all(Locator::Css(".uplot")).await.map_err(|e| e.to_string())?;
        if charts.len() == 4 {
            Ok(())
        } else {
            Err(format!("{} charts", charts.len()))
        }
    })
    .await;
    let heading = cell_text(&client, "h1.queue-name").await.unwrap();
    assert!(heading.starts_with("browser-q"), "{heading}");

    client.close().await.unwrap();
    warren.stop().await;
    connection.close(0, "done".into()).await.ok();
}

/// Issue 19, case 1: the alerts page shows an alert that fires after it was opened, without a
/// reload.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_alerts_page_shows_a_new_alert_without_reload() {
    let vhost = TestVhost::create("browseralerts").await;
    let connection = vhost.connect().await;
    let channel = vhost.channel(&connection).await;
    declare(&channel, "work", false).await;
    let toml = format!(
        "[[alerts]]\nid = \"any\"\nname = \"Anything ready\"\nmetric = \"ready\"\ncomparator = \">\"\n\
         threshold = 0\nseverity = \"info\"\n\n[[brokers]]\nname = \"local\"\nvhosts_include = [{:?}]\n\
         poll_interval_secs = 1\n",
        vhost.name
    );
    let warren = Warren::start(&toml).await;
    let (_driver, client) = common::browser::start().await;
    client.goto(&warren.url("/alerts")).await.unwrap();
    let text = cell_text(&client, "#firing").await.unwrap();
    assert!(text.contains("Nothing is firing or pending"), "{text}");
    client.execute("window.__warrenMark = 42; return null;", vec![]).await.unwrap();
    publish(&channel, "work", 1, BasicProperties::default()).await;
    wait_for("the alert on the open page", Duration::from_secs(40), || async {
        let text = cell_text(&client, "#firing").await?;
        if text.contains("Anything ready") && text.contains("firing") {
            Ok(())
        } else {
            Err(text)
        }
    })
    .await;
    let mark = client.execute("return window.__warrenMark === 42;", vec![]).await.unwrap();
    assert_eq!(mark, serde_json::Value::Bool(true), "the page was reloaded instead of updated in place");
    client.close().await.unwrap();
    warren.stop().await;
    connection.close(0, "done".into()).await.ok();
}

/// Issue 19, item 12: every page fits a phone (390 px) and a desktop (1400 px) without the
/// document scrolling sideways; wide tables scroll inside their own box, and the navigation
/// collapses into a menu on the phone. A screenshot of every page at both widths is saved under
/// `target/screenshots/layout/` to look at.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_page_fits_a_phone_and_a_desktop_without_sideways_scrolling() {
    let vhost = TestVhost::create("layout").await;
    let connection = vhost.connect().await;
    let channel = vhost.channel(&connection).await;
    declare(&channel, "orders", false).await;
    publish(&channel, "orders", 3, BasicProperties::default()).await;
    // Dots are no line-break opportunity: only `overflow-wrap` keeps such a name from widening a page.
    let long_name = "customer-notifications.email.delivery.retry.after.smtp.timeout.eu-west-1.priority.high.v2";
    declare(&channel, long_name, false).await;
    publish(&channel, long_name, 1, BasicProperties::default()).await;
    // A retry loop: `jobs` dead-letters into `jobs.wait`, whose message TTL sends them back; a
    // message waiting there carries the timestamp of its first publish, two days ago, and the
    // queue list says "… since first published" (issue 34, case 2: that widened the list past
    // a 1400 px window and cut the sparkline off).
    let dead_letter_to = |queue: &str| {
        let mut args = FieldTable::default();
        args.insert("x-dead-letter-exchange".into(), AMQPValue::LongString("".into()));
        args.insert("x-dead-letter-routing-key".into(), AMQPValue::LongString(queue.into()));
        args
    };
    let mut wait_args = dead_letter_to("jobs");
    wait_args.insert("x-message-ttl".into(), AMQPValue::LongUInt(3_600_000));
    for (queue, args) in [("jobs", dead_letter_to("jobs.wait")), ("jobs.wait", wait_args)] {
        let durable = lapin::options::QueueDeclareOptions { durable: true, ..Default::default() };
        channel.queue_declare(queue.into(), durable, args).await.unwrap_or_else(|e| panic!("declare {queue}: {e}"));
    }
    let two_days_ago = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() - 183_600;
    publish(&channel, "jobs.wait", 2, BasicProperties::default().with_timestamp(two_days_ago)).await;
    // A dead letter with a long unbroken payload, message id and error, as real ones have.
    let mut headers = FieldTable::default();
    let error =
        format!("System.TimeoutException: {}", "the.smtp.relay.did.not.answer.within.thirty.seconds.".repeat(4));
    headers.insert("x-exception-message".into(), AMQPValue::LongString(error.into()));
    let payload = format!("{{\"token\": \"{}\"}}", "Zm9vYmFy".repeat(60)).into_bytes();
    let mut messages = numbered(2);
    messages.push(("urn:message:7f9c2b4e-0a51-4c6e-9d3b-long-message-identifier-0001".to_string(), payload, headers));
    dead_letter(&vhost, &channel, "work.dlq", false, messages.clone()).await;
    // The same dead letters in a DLQ warren keeps in custody, in a vhost of its own (issue 34,
    // case 2: the browser in custody at both widths).
    let held_vhost = TestVhost::create("layoutheld").await;
    let held_connection = held_vhost.connect().await;
    let held_channel = held_vhost.channel(&held_connection).await;
    dead_letter(&held_vhost, &held_channel, "held.dlq", false, messages).await;

    let toml = format!(
        "[[alerts]]\nid = \"ready\"\nname = \"Anything ready\"\nmetric = \"ready\"\ncomparator = \">\"\n\
         threshold = 0\nseverity = \"warning\"\n\n[[brokers]]\nname = \"local\"\nvhosts_include = [{:?}, {:?}]\n\
         poll_interval_secs = 1\n\n[[custody]]\nqueue = \"held.dlq\"\n",
        vhost.name, held_vhost.name
    );
    let warren = Warren::start(&toml).await;
    let encoded_vhost = warren::broker::management::encode_segment(&vhost.name);
    for queue in ["work.dlq", long_name] {
        wait_for(&format!("{queue} listed by warren"), Duration::from_secs(30), || async {
            warren.queue(&vhost.name, queue).await.map(|_| ()).ok_or_else(|| "not yet".to_string())
        })
        .await;
    }
    // 3.x gives the head message's timestamp; 4.x does not, and the age is then estimated.
    let exact_ages = common::broker().facts().await.major < 4;
    wait_for("jobs.wait read as a wait queue, its age since the first publish", Duration::from_secs(60), || async {
        let q = warren.queue(&vhost.name, "jobs.wait").await.ok_or("not listed")?;
        if q["role"] == "wait" && (q["age_since_first_publish"] == true || !exact_ages) {
            Ok(())
        } else {
            Err(q.to_string())
        }
    })
    .await;
    // A job (and with it an audit entry): requeue the first dead letter; then a fresh snapshot
    // for the dead-letter browser and its message page.
    warren.snapshot(&vhost.name, "work.dlq", 10).await;
    let requeue = format!("/api/v1/queues/local/{encoded_vhost}/work.dlq/requeue");
    let job = warren.run_move(&requeue, serde_json::json!({"selection": {"positions": [1]}})).await;
    let job_id = job["id"].as_i64().expect("a job id");
    warren.snapshot(&vhost.name, "work.dlq", 10).await;
    let encoded_held_vhost = warren::broker::management::encode_segment(&held_vhost.name);
    let custody = format!("/api/v1/queues/local/{encoded_held_vhost}/held.dlq/custody");
    wait_for("held.dlq's dead letters in custody", Duration::from_secs(60), || async {
        let (_, list) = warren.get_json(&custody).await;
        if list["custody"]["counts"]["held"] == 3 {
            Ok(())
        } else {
            Err(list.to_string())
        }
    })
    .await;

    // An admin, so the login page has its form and /access its tables.
    let db = warren::history::open(&warren.dir.path().join("warren.db")).await.unwrap();
    warren::auth::add_user(
        &warren::storage::sqlite::store(db.clone()),
        "ada",
        warren::auth::Role::Admin,
        "correct horse battery staple",
    )
    .await
    .unwrap();
    db.close().await;

    let (_driver, client) = common::browser::start().await;
    let shots = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/screenshots/layout");
    std::fs::create_dir_all(&shots).unwrap();
    eprintln!("screenshots in {}", shots.display());
    let widths = [Some(390), None];
    let mut problems = Vec::new();

    for width in widths {
        common::browser::emulate_phone(&client, width).await;
        client.goto(&warren.url("/login")).await.unwrap();
        problems.extend(check_layout(&client, width, "login", "/login", &[], &shots).await);
    }
    client.find(Locator::Css("input[name=name]")).await.unwrap().send_keys("ada").await.unwrap();
    client
        .find(Locator::Css("input[name=password]"))
        .await
        .unwrap()
        .send_keys("correct horse battery staple")
        .await
        .unwrap();
    client.find(Locator::Css("form.login button")).await.unwrap().click().await.unwrap();
    wait_for("the login to finish", Duration::from_secs(30), || async {
        client.find(Locator::Css("header .who")).await.map(|_| ()).map_err(|e| e.to_string())
    })
    .await;

    // Issue 34, case 2: the columns each page is read by are on screen at both widths, not
    // behind a sideways scroll (first match shown on the page, inside every box that scrolls).
    const QUEUE_LIST: &[&str] = &[
        "table.queues tbody td.name a",
        "table.queues tbody .vhost",
        "table.queues tbody td.ready",
        "table.queues tbody td.unacked",
    ];
    const TRIAGE: &[&str] = &["table.messages td.died-in", "table.messages td.reason", "table.messages td.error-text"];
    const CUSTODY_TRIAGE: &[&str] =
        &["table.custody-records td.died-in", "table.custody-records td.reason", "table.custody-records td.error-text"];
    let pages: [(&str, String, &[&str]); 18] = [
        (
            "overview",
            "/".to_string(),
            &["table.alerts td.where", "table.brokers td.ready", "table.brokers td.unacked", "table.brokers td.rates"],
        ),
        ("queues", "/queues".to_string(), QUEUE_LIST),
        ("dead-letters", "/queues?dlq=true".to_string(), QUEUE_LIST),
        ("queue", format!("/queues/local/{encoded_vhost}/orders"), &[]),
        (
            "long-queue",
            format!("/queues/local/{encoded_vhost}/{}", warren::broker::management::encode_segment(long_name)),
            &[],
        ),
        ("dlq", format!("/dlq/local/{encoded_vhost}/work.dlq"), TRIAGE),
        ("dlq-custody", format!("/dlq/local/{encoded_held_vhost}/held.dlq"), CUSTODY_TRIAGE),
        ("message", format!("/dlq/local/{encoded_vhost}/work.dlq/messages/2"), &[]),
        ("alerts", "/alerts".to_string(), &["table.alerts td.where", "form.rule-editor input[name=queue]"]),
        ("audit", "/audit".to_string(), &[]),
        ("broker", "/brokers/local".to_string(), &[]),
        ("clients", "/brokers/local/clients".to_string(), &[]),
        ("exchanges", "/brokers/local/exchanges".to_string(), &[]),
        ("nodes", "/brokers/local/nodes".to_string(), &[]),
        ("advisor", "/brokers/local/advisor".to_string(), &["article.finding h3"]),
        ("access", "/access".to_string(), &[]),
        ("job", format!("/jobs/{job_id}"), &[]),
        ("not-found", "/no-such-page".to_string(), &[]),
    ];
    // Issue 34, must-have 3: axe-core on every page, in the light theme and the dark one, finds
    // no serious or critical violation (152 of `color-contrast` before, from one amber).
    let mut accessibility = Vec::new();
    for width in widths {
        common::browser::emulate_phone(&client, width).await;
        for (name, path, must_show) in &pages {
            client.goto(&warren.url(path)).await.unwrap();
            // The queue list's last column, the depth sparkline, shows on a desktop only; the
            // wait queue's row is the one whose age is longest.
            let desktop_only: &[&str] = match (width, *name) {
                (None, "queues") => {
                    &[r#"tr[data-queue="jobs.wait"] svg.spark"#, r#"tr[data-queue="jobs.wait"] td.age"#]
                }
                _ => &[],
            };
            let must_show: Vec<&str> = must_show.iter().chain(desktop_only).copied().collect();
            problems.extend(check_layout(&client, width, name, path, &must_show, &shots).await);
            if width.is_none() {
                for v in common::browser::axe_violations(&client).await {
                    accessibility.push(format!("{name} ({path}), light: {v}"));
                }
            }
        }
    }
    client.execute("localStorage.setItem('warren.theme', 'dark'); return true;", vec![]).await.unwrap();
    for (name, path, _) in &pages {
        client.goto(&warren.url(path)).await.unwrap();
        let theme = client.execute("return document.documentElement.dataset.theme || '';", vec![]).await.unwrap();
        assert_eq!(theme, "dark", "{path}: the chosen theme applies");
        for v in common::browser::axe_violations(&client).await {
            accessibility.push(format!("{name} ({path}), dark: {v}"));
        }
    }
    std::fs::write(shots.join("1400-dark-dlq.png"), {
        client.goto(&warren.url(&format!("/dlq/local/{encoded_vhost}/work.dlq"))).await.unwrap();
        common::browser::full_page_screenshot(&client).await
    })
    .unwrap();
    client.execute("localStorage.removeItem('warren.theme'); return true;", vec![]).await.unwrap();
    // axe-core sees what it should: the old amber on white is a contrast violation.
    client.goto(&warren.url("/")).await.unwrap();
    let bad = "const p = document.createElement('p'); p.textContent = 'pending'; \
               p.style.color = '#b76e00'; p.style.background = '#fff'; document.querySelector('main').appendChild(p); return true;";
    client.execute(bad, vec![]).await.unwrap();
    let found = common::browser::axe_violations(&client).await;
    assert!(found.iter().any(|v| v.starts_with("color-contrast (serious)")), "axe-core runs: {found:?}");

    assert!(problems.is_empty(), "layout problems (screenshots in {}):\n{}", shots.display(), problems.join("\n"));
    assert!(accessibility.is_empty(), "axe-core found:\n{}", accessibility.join("\n"));

    // On the phone the links hide behind a menu that opens without JavaScript and still leads
    // everywhere; on the desktop they show as before.
    common::browser::emulate_phone(&client, Some(390)).await;
    client.goto(&warren.url("/")).await.unwrap();
    let queues_link = r#"header nav a[href="/queues"]"#;
    assert!(
        !client.find(Locator::Css(queues_link)).await.unwrap().is_displayed().await.unwrap(),
        "the phone shows the links before the menu is opened"
    );
    client.find(Locator::Css("header label.menu-button")).await.unwrap().click().await.unwrap();
    std::fs::write(shots.join("390-menu-open.png"), common::browser::full_page_screenshot(&client).await).unwrap();
    client.find(Locator::Css(queues_link)).await.unwrap().click().await.unwrap();
    wait_for("the queue list through the phone menu", Duration::from_secs(20), || async {
        let url = client.current_url().await.map_err(|e| e.to_string())?;
        if url.path() == "/queues" {
            Ok(())
        } else {
            Err(url.to_string())
        }
    })
    .await;
    common::browser::emulate_phone(&client, None).await;
    client.goto(&warren.url("/")).await.unwrap();
    assert!(
        client.find(Locator::Css(queues_link)).await.unwrap().is_displayed().await.unwrap(),
        "the desktop hides the links"
    );

    client.close().await.unwrap();
    warren.stop().await;
    connection.close(0, "done".into()).await.ok();
    held_connection.close(0, "done".into()).await.ok();
}

/// Waits for the page's charts, saves a full-page screenshot, and says what is wrong with the
/// layout: a document wider than the window (it scrolls sideways); on a phone a header taller
/// than a line or two (the navigation stack the issue complains about); one of `must_show` (the
/// columns the page is read by) not on screen; an identifier broken inside a word; a form label
/// split from its field across lines.
///
/// The window's width is the layout viewport's (`clientWidth`), not `innerWidth`: a phone zooms
/// out to show a page that is too wide, and `innerWidth` grows with it (to 1560 px on the
/// dead-letter browser before issue 19), hiding the very overflow this looks for.
async fn check_layout(
    client: &Client,
    phone: Option<u32>,
    name: &str,
    path: &str,
    must_show: &[&str],
    shots: &std::path::Path,
) -> Vec<String> {
    // Charts are drawn after their data arrives, at the width of their box: measure afterwards.
    wait_for(&format!("the charts of {path}"), Duration::from_secs(20), || async {
        let script = "return Array.from(document.querySelectorAll('[data-chart]'))\
                      .every(e => e.querySelector('.uplot') || e.textContent.startsWith('chart unavailable'));";
        match client.execute(script, vec![]).await.map_err(|e| e.to_string())? {
            serde_json::Value::Bool(true) => Ok(()),
            other => Err(other.to_string()),
        }
    })
    .await;
    let script = "const d = document.documentElement, h = document.querySelector('header.top');\
                  return [d.scrollWidth, d.clientWidth, h ? h.offsetHeight : 0];";
    let sizes = client.execute(script, vec![]).await.unwrap();
    let [document_width, window_width, header_height] =
        [0, 1, 2].map(|i| sizes[i].as_u64().unwrap_or_else(|| panic!("{path}: sizes {sizes}")));
    if let Some(width) = phone {
        assert_eq!(window_width, u64::from(width), "{path}: the phone emulation did not take");
    }
    let png = common::browser::full_page_screenshot(client).await;
    let label = phone.unwrap_or(1400);
    std::fs::write(shots.join(format!("{label}-{name}.png")), png).unwrap();
    let mut problems = Vec::new();
    if document_width > window_width {
        problems.push(format!("{name} ({path}) at {label} px: the document is {document_width} px wide"));
    }
    if phone.is_some() && header_height > 80 {
        problems.push(format!("{name} ({path}) at {label} px: the header is {header_height} px tall"));
    }
    let off_screen = client.execute(OFF_SCREEN, vec![serde_json::json!(must_show)]).await.unwrap();
    let broken = client.execute(BROKEN_INSIDE_A_WORD, vec![]).await.unwrap();
    let split = client.execute(SPLIT_LABELS, vec![]).await.unwrap();
    for (what, found) in
        [("not on screen", off_screen), ("broken inside a word", broken), ("split from its field", split)]
    {
        for item in found.as_array().unwrap_or_else(|| panic!("{path}: {found}")) {
            problems.push(format!("{name} ({path}) at {label} px: {what}: {}", item.as_str().unwrap_or_default()));
        }
    }
    problems
}

/// The selectors (`arguments[0]`) whose first shown match is not wholly inside the window and
/// inside every box around it that scrolls or clips sideways.
const OFF_SCREEN: &str = "
    const out = [];
    for (const selector of arguments[0]) {
        const shown = [...document.querySelectorAll(selector)].filter(e => e.getClientRects().length > 0);
        if (shown.length === 0) { out.push(selector + ': not shown'); continue; }
        const rect = shown[0].getBoundingClientRect();
        let left = 0, right = document.documentElement.clientWidth;
        for (let box = shown[0].parentElement; box; box = box.parentElement) {
            if (['auto', 'scroll', 'hidden', 'clip'].includes(getComputedStyle(box).overflowX)) {
                const b = box.getBoundingClientRect();
                left = Math.max(left, b.left); right = Math.min(right, b.right);
            }
        }
        if (rect.left < left - 1 || rect.right > right + 1) {
            out.push(`${selector}: ${Math.round(rect.left)}..${Math.round(rect.right)} px, the visible box is ${Math.round(left)}..${Math.round(right)}`);
        }
    }
    return out;";

/// Identifiers (`.ident`) whose text wraps to a new line after a character that is not one of
/// the separators `|ident` breaks after: a break inside a word.
const BROKEN_INSIDE_A_WORD: &str = "
    const out = [];
    for (const el of document.querySelectorAll('.ident')) {
        if (el.getClientRects().length === 0) continue;
        const walker = document.createTreeWalker(el, NodeFilter.SHOW_TEXT);
        let top = null, before = '', node;
        outer: while ((node = walker.nextNode())) {
            for (let i = 0; i < node.length; i++) {
                const range = document.createRange();
                range.setStart(node, i); range.setEnd(node, i + 1);
                const rect = range.getClientRects()[0];
                if (!rect) continue;
                if (top !== null && rect.top > top + 2 && !'.-_/:@ '.includes(before)) {
                    out.push(`${el.textContent.slice(0, 90)}: after ${JSON.stringify(el.textContent.slice(0, i))}`);
                    break outer;
                }
                top = rect.top; before = node.data[i];
            }
        }
    }
    return out;";

/// Form labels that wrap their field but are laid out in more than one box: their text ends a
/// line and the field starts the next, beside another label.
const SPLIT_LABELS: &str = "
    return [...document.querySelectorAll('form label')]
        .filter(l => l.querySelector('input:not([type=checkbox]):not([type=radio]):not([type=hidden]), select'))
        .filter(l => l.getClientRects().length > 1)
        .map(l => l.textContent.trim().slice(0, 60));";

/// Issue 19, item 14: the messages table's header has a box that ticks every message of the
/// page, and the action buttons come before the table (not below 100 rows), within a phone's
/// width.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn select_all_ticks_every_message_and_the_buttons_come_first() {
    let vhost = TestVhost::create("selectall").await;
    let connection = vhost.connect().await;
    let channel = vhost.channel(&connection).await;
    dead_letter(&vhost, &channel, "work.dlq", false, numbered(7)).await;
    let warren = Warren::for_vhost(&vhost.name, 1).await;
    wait_for("work.dlq listed by warren", Duration::from_secs(30), || async {
        warren.queue(&vhost.name, "work.dlq").await.map(|_| ()).ok_or_else(|| "not yet".to_string())
    })
    .await;
    warren.snapshot(&vhost.name, "work.dlq", 10).await;
    let (_driver, client) = common::browser::start().await;
    common::browser::emulate_phone(&client, Some(390)).await;
    let page = format!("/dlq/local/{}/work.dlq", warren::broker::management::encode_segment(&vhost.name));
    client.goto(&warren.url(&page)).await.unwrap();

    let ticked = "return Array.from(document.querySelectorAll('table.messages input[name=message]'))\
                  .map(function (b) { return b.checked; });";
    let boxes = client.execute(ticked, vec![]).await.unwrap();
    assert_eq!(boxes, serde_json::json!(vec![false; 7]), "seven message boxes, none ticked");
    client.find(Locator::Css("table.messages thead input.select-all")).await.unwrap().click().await.unwrap();
    assert_eq!(client.execute(ticked, vec![]).await.unwrap(), serde_json::json!(vec![true; 7]), "all ticked");
    client.find(Locator::Css("table.messages thead input.select-all")).await.unwrap().click().await.unwrap();
    assert_eq!(client.execute(ticked, vec![]).await.unwrap(), serde_json::json!(vec![false; 7]), "none again");

    // The buttons precede the table in the document, inside the same form, and fit 390 px.
    let order = client
        .execute(
            "var f = document.querySelector('form fieldset.actions'); \
             var t = document.querySelector('table.messages'); \
             var r = f.getBoundingClientRect(); \
             return [!!(f.compareDocumentPosition(t) & Node.DOCUMENT_POSITION_FOLLOWING), \
                     f.closest('form') === t.closest('form'), \
                     r.right <= document.documentElement.clientWidth];",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(order, serde_json::json!([true, true, true]), "buttons before the table, same form, fit 390 px");
    client.close().await.unwrap();
    warren.stop().await;
    connection.close(0, "done".into()).await.ok();
}

/// Issue 29, must-have 8: a client's long product name (warren keeps 200 characters of it) in a
/// plain cell pushed every connection's columns off the screen; it wraps inside its cell now, at
/// a desktop's width and at a phone's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_client_product_wraps_inside_its_cell() {
    use lapin::types::LongString;
    let vhost = TestVhost::create("longproduct").await;
    let product = format!("client-{}", "x".repeat(3_500));
    let properties = lapin::ConnectionProperties::default()
        .with_client_property("product".into(), LongString::from(product.as_str()))
        .with_client_property("version".into(), "1".into());
    let uri =
        format!("{}/{}", common::broker().amqp_with_guest(), warren::broker::management::encode_segment(&vhost.name));
    let connection = lapin::Connection::connect(&uri, properties).await.expect("a client connection");
    let warren = Warren::for_vhost(&vhost.name, 1).await;
    wait_for("the client's connection listed", Duration::from_secs(60), || async {
        let (_, body) = warren.get_json("/api/v1/brokers/local/connections").await;
        if body.to_string().contains("client-xxxx") {
            Ok(())
        } else {
            Err(body.to_string())
        }
    })
    .await;
    let (_driver, client) = common::browser::start().await;
    let shots = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/screenshots/layout");
    std::fs::create_dir_all(&shots).unwrap();
    let mut problems = Vec::new();
    for width in [None, Some(390)] {
        common::browser::emulate_phone(&client, width).await;
        client.goto(&warren.url("/brokers/local/clients")).await.unwrap();
        problems
            .extend(check_layout(&client, width, "clients-long-product", "/brokers/local/clients", &[], &shots).await);
    }
    assert!(problems.is_empty(), "layout problems (screenshots in {}):\n{}", shots.display(), problems.join("\n"));
    client.close().await.unwrap();
    warren.stop().await;
    connection.close(0, "done".into()).await.ok();
}

/// Issue 34, must-have 3: the journey "open a DLQ, select two messages, requeue" with the
/// keyboard alone. Enter on a message checkbox submitted "Requeue selected…" with nothing
/// selected (an Error 400 page); there was no skip link; the confirmation did not focus its
/// button. Counted in key presses.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_requeue_of_two_messages_with_the_keyboard_alone() {
    use fantoccini::key::Key;
    let vhost = TestVhost::create("keyboard").await;
    let connection = vhost.connect().await;
    let channel = vhost.channel(&connection).await;
    dead_letter(&vhost, &channel, "work.dlq", false, numbered(5)).await;
    let warren = Warren::for_vhost(&vhost.name, 1).await;
    wait_for("work.dlq listed by warren", Duration::from_secs(30), || async {
        warren.queue(&vhost.name, "work.dlq").await.map(|_| ()).ok_or_else(|| "not yet".to_string())
    })
    .await;
    warren.snapshot(&vhost.name, "work.dlq", 10).await;
    let (_driver, client) = common::browser::start().await;
    let page = format!("/dlq/local/{}/work.dlq", warren::broker::management::encode_segment(&vhost.name));
    client.goto(&warren.url(&page)).await.unwrap();
    let mut presses = 0;
    let press = |key: Key| {
        let client = client.clone();
        async move {
            let text: String = char::from(key).into();
            client.active_element().await.unwrap().send_keys(&text).await.unwrap();
        }
    };
    let focused = || async {
        client
            .execute("const e = document.activeElement; return [e.tagName, e.name || '', e.className || '', e.value || '', e.textContent.trim().slice(0, 40)];", vec![])
            .await
            .unwrap()
    };
    // The skip link first, and into the content.
    client.execute("document.body.focus(); return true;", vec![]).await.unwrap();
    client.find(Locator::Css("body")).await.unwrap().send_keys(&char::from(Key::Tab).to_string()).await.unwrap();
    presses += 1;
    assert_eq!(focused().await[2], "skip-link", "the first Tab reaches the skip link");
    press(Key::Enter).await;
    presses += 1;
    // Tab to the first message's box, then tick it and the next one with Enter.
    let mut ticked = 0;
    while ticked < 2 {
        press(Key::Tab).await;
        presses += 1;
        assert!(presses < 40, "no message box within 40 presses: {:?}", focused().await);
        let f = focused().await;
        if f[0] == "INPUT" && f[1] == "message" {
            press(Key::Enter).await;
            presses += 1;
            ticked += 1;
        }
    }
    assert_eq!(client.current_url().await.unwrap().path(), page, "Enter on a box submitted nothing");
    let chosen = client
        .execute("return Array.from(document.querySelectorAll('input[name=message]:checked')).length;", vec![])
        .await
        .unwrap();
    assert_eq!(chosen, 2, "Enter ticked two boxes");
    // Back to "Requeue selected…", which comes before the table.
    loop {
        client
            .active_element()
            .await
            .unwrap()
            .send_keys(&format!("{}{}", char::from(Key::Shift), char::from(Key::Tab)))
            .await
            .unwrap();
        presses += 1;
        assert!(presses < 80, "no requeue button: {:?}", focused().await);
        let f = focused().await;
        if f[0] == "BUTTON" && f[3] == "selected" {
            break;
        }
    }
    press(Key::Enter).await;
    presses += 1;
    // The confirmation focuses its action: Enter runs it.
    wait_for("the confirmation", Duration::from_secs(20), || async {
        let f = focused().await;
        if f[0] == "BUTTON" && f[4] == "Requeue" {
            Ok(())
        } else {
            Err(format!("{f:?}"))
        }
    })
    .await;
    press(Key::Enter).await;
    presses += 1;
    wait_for("two messages back in work", Duration::from_secs(30), || async {
        match common::dead_letters::depth(&channel, "work").await {
            2 => Ok(()),
            n => Err(format!("{n} in work")),
        }
    })
    .await;
    eprintln!("the requeue of two messages took {presses} key presses");
    assert!(presses <= 30, "{presses} key presses (69 before)");
    client.close().await.unwrap();
    warren.stop().await;
    connection.close(0, "done".into()).await.ok();
}
