//! Issue 19, items 2, 3 and 15, in headless Chromium against a real warren and broker: one clock
//! (UTC or local, the user's choice, kept in the browser) for every time on a page and its
//! charts; ranges from 15 minutes to 30 days and a custom from/to; a zoom that applies to every
//! chart of the page, stays until reset and is in the URL; queues compared on one chart.

mod common;

use std::time::Duration;

use chrono::{DateTime, FixedOffset, Utc};
use common::{declare, publish, wait_for, TestVhost, Warren};
use fantoccini::{Client, Locator};
use lapin::BasicProperties;
use serde_json::{json, Value};

async fn js(client: &Client, script: &str) -> Value {
    client.execute(script, vec![]).await.unwrap_or_else(|e| panic!("{script}: {e}"))
}

async fn text(client: &Client, selector: &str) -> Result<String, String> {
    let element = client.find(Locator::Css(selector)).await.map_err(|e| format!("{selector}: {e}"))?;
    element.text().await.map_err(|e| e.to_string())
}

/// Waits until every chart of the page has drawn data.
async fn charts_drawn(client: &Client, expected: usize) {
    wait_for("the charts drawn with data", Duration::from_secs(30), || async {
        let drawn = js(
            client,
            "return (window.warrenCharts || []).filter(function (u) { return u.data[0].length > 0; }).length;",
        )
        .await;
        if drawn == json!(expected) {
            Ok(())
        } else {
            Err(format!("{drawn} of {expected} charts with data"))
        }
    })
    .await;
}

/// A queue with some history: warren polls every second.
async fn queue_with_history(test: &str) -> (TestVhost, lapin::Connection, Warren) {
    let vhost = TestVhost::create(test).await;
    let connection = vhost.connect().await;
    let channel = vhost.channel(&connection).await;
    declare(&channel, "orders", false).await;
    declare(&channel, "invoices", false).await;
    publish(&channel, "orders", 3, BasicProperties::default()).await;
    publish(&channel, "invoices", 5, BasicProperties::default()).await;
    let warren = Warren::for_vhost(&vhost.name, 1).await;
    wait_for("a few samples of the queue", Duration::from_secs(30), || async {
        let path = format!(
            "/api/v1/queues/local/{}/orders/history?range=15m",
            warren::broker::management::encode_segment(&vhost.name)
        );
        let (status, body) = warren.get_json(&path).await;
        let known = body["points"].as_array().map(|p| p.iter().filter(|p| p["ready"] == 3).count()).unwrap_or(0);
        if status == 200 && known >= 3 {
            Ok(())
        } else {
            Err(format!("{status}: {known} points with ready 3"))
        }
    })
    .await;
    (vhost, connection, warren)
}

fn queue_page(warren: &Warren, vhost: &str, query: &str) -> String {
    warren.url(&format!("/queues/local/{}/orders{query}", warren::broker::management::encode_segment(vhost)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_custom_range_and_a_zoom_are_in_the_url_and_apply_to_every_chart() {
    let (vhost, connection, warren) = queue_with_history("clock-zoom").await;
    let (_driver, client) = common::browser::start().await;

    // The shortest range: 15 minutes.
    client.goto(&queue_page(&warren, &vhost.name, "?range=15m")).await.unwrap();
    assert_eq!(text(&client, ".ranges a.active").await.unwrap(), "15m");
    charts_drawn(&client, 4).await;
    let spans = js(
        &client,
        "return warrenCharts.map(function (u) { return u.data[0][u.data[0].length - 1] - u.data[0][0]; });",
    )
    .await;
    for span in spans.as_array().unwrap() {
        assert!(span.as_i64().unwrap() <= 900, "a 15-minute chart spans {span} s");
    }

    // A custom window from the form (the clock is UTC by default): the URL says it.
    let now = Utc::now().timestamp();
    let (from, to) = (now - 600 - now % 60, now - now % 60 + 60);
    let field = |secs: i64| DateTime::from_timestamp(secs, 0).unwrap().format("%Y-%m-%d %H:%M").to_string();
    js(
        &client,
        &format!(
            "var f = document.querySelectorAll('form.custom-range input.when');
             f[0].value = '{}'; f[1].value = '{}'; return null;",
            field(from),
            field(to)
        ),
    )
    .await;
    client.find(Locator::Css("form.custom-range button[type=submit]")).await.unwrap().click().await.unwrap();
    wait_for("the custom window in the URL", Duration::from_secs(10), || async {
        let url = client.current_url().await.map_err(|e| e.to_string())?;
        let q: Vec<(String, String)> = url.query_pairs().map(|(k, v)| (k.into_owned(), v.into_owned())).collect();
        let has = |k: &str, v: i64| q.contains(&(k.to_string(), v.to_string()));
        if has("from", from) && has("to", to) && !q.iter().any(|(k, _)| k == "range") {
            Ok(())
        } else {
            Err(url.to_string())
        }
    })
    .await;
    let shown = text(&client, "p.window").await.unwrap();
    let utc = |secs: i64| DateTime::from_timestamp(secs, 0).unwrap().format("%Y-%m-%d %H:%M:%S UTC").to_string();
    assert!(shown.contains(&utc(from)) && shown.contains(&utc(to)), "{shown}");
    assert!(client.find(Locator::Css(".ranges a.active")).await.is_err(), "no relative range is active");
    assert!(client.find(Locator::Css("a.reset-zoom")).await.unwrap().is_displayed().await.unwrap());
    charts_drawn(&client, 4).await;

    // Drag across the first chart: every chart shows the selected window, without a reload, and
    // the URL has it.
    js(&client, "window.__mark = 7; return null;").await;
    let window = js(
        &client,
        "var u = warrenCharts[0]; var w = u.bbox.width / devicePixelRatio;
         u.setSelect({left: w * 0.5, width: w * 0.3, top: 0, height: 10});
         return [Math.floor(u.posToVal(w * 0.5, 'x')), Math.ceil(u.posToVal(w * 0.8, 'x'))];",
    )
    .await;
    let (zoom_from, zoom_to) = (window[0].as_i64().unwrap(), window[1].as_i64().unwrap());
    assert!(from < zoom_from && zoom_to < to, "{zoom_from}..{zoom_to} inside {from}..{to}");
    let zoomed = format!("from={zoom_from}&to={zoom_to}");
    wait_for("every chart zoomed to the window", Duration::from_secs(20), || async {
        let url = client.current_url().await.map_err(|e| e.to_string())?;
        let ranges = js(
            &client,
            "return warrenCharts.map(function (u) { var x = u.data[0]; return [x[0], x[x.length - 1]]; });",
        )
        .await;
        let inside = ranges.as_array().unwrap().iter().all(|r| {
            let (a, b) = (r[0].as_i64().unwrap_or(0), r[1].as_i64().unwrap_or(0));
            a >= zoom_from - 1 && b <= zoom_to + 1 && a < b
        });
        if url.as_str().contains(&zoomed) && inside && ranges.as_array().unwrap().len() == 4 {
            Ok(())
        } else {
            Err(format!("{url}: {ranges}"))
        }
    })
    .await;
    assert_eq!(js(&client, "return window.__mark;").await, json!(7), "the zoom reloaded the page");
    let shown = text(&client, "p.window").await.unwrap();
    assert!(shown.contains(&utc(zoom_from)) && shown.contains(&utc(zoom_to)), "{shown}");

    // The 10 s refresh does not undo it.
    tokio::time::sleep(Duration::from_secs(12)).await;
    let first = js(&client, "var x = warrenCharts[0].data[0]; return [x[0], x[x.length - 1]];").await;
    assert!(first[0].as_i64().unwrap() >= zoom_from - 1 && first[1].as_i64().unwrap() <= zoom_to + 1, "{first}");

    // The URL is the view: opened afresh, it shows the same window.
    let url = client.current_url().await.unwrap();
    client.goto(url.as_str()).await.unwrap();
    let shown = text(&client, "p.window").await.unwrap();
    assert!(shown.contains(&utc(zoom_from)) && shown.contains(&utc(zoom_to)), "{shown}");
    // Reset goes back to the relative range.
    client.find(Locator::Css("a.reset-zoom")).await.unwrap().click().await.unwrap();
    wait_for("the relative range after reset", Duration::from_secs(10), || async {
        let url = client.current_url().await.map_err(|e| e.to_string())?;
        if url.as_str().ends_with("range=1h") {
            Ok(())
        } else {
            Err(url.to_string())
        }
    })
    .await;

    // Issue 19, case 15: a 30-day chart of a queue with minutes of history starts where the data
    // does, and says so, rather than draw a month of nothing with a tick at the right edge.
    client.goto(&queue_page(&warren, &vhost.name, "?range=30d")).await.unwrap();
    charts_drawn(&client, 4).await;
    let first = js(&client, "return warrenCharts.map(function (u) { return u.data[0][0]; });").await;
    for t in first.as_array().unwrap() {
        assert!(t.as_i64().unwrap() > now - 3600, "a chart starts {t}, before the queue had data");
    }
    let note = text(&client, ".chart-resolution").await.unwrap();
    assert!(note.starts_with("No data before ") && note.contains("the chart starts there"), "{note}");

    // A range that is not one of the offered ones is a clear error, not an empty chart.
    let (status, body) = warren
        .get_text(&format!("/queues/local/{}/orders?range=2w", warren::broker::management::encode_segment(&vhost.name)))
        .await;
    assert_eq!(status, 400);
    assert!(body.contains("15m, 1h, 6h, 24h, 7d, 30d"), "{body}");
    // The overview's broker charts have the same picker.
    let (status, body) = warren.get_text("/?range=6h").await;
    assert_eq!(status, 200);
    assert!(body.contains(r#"href="/?range=6h" class="active">6h</a>"#), "{body}");
    let (status, _) = warren.get_text("/?range=2w").await;
    assert_eq!(status, 400);

    client.close().await.unwrap();
    warren.stop().await;
    connection.close(0, "done".into()).await.ok();
}

/// Chromium in Asia/Kolkata (UTC+05:30 all year). By default every time, on the page and on the
/// chart, is UTC on a 24-hour clock; chosen "local", all of them are +05:30 and say so, the
/// choice survives a reload, and the chart and the page agree.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_clock_for_the_page_and_its_charts_under_a_non_utc_zone() {
    let (vhost, connection, warren) = queue_with_history("clock-zone").await;
    let (_driver, client) = common::browser::start_in_time_zone("Asia/Kolkata").await;
    let kolkata = FixedOffset::east_opt(5 * 3600 + 1800).unwrap();
    client.goto(&queue_page(&warren, &vhost.name, "?range=15m")).await.unwrap();
    assert_eq!(js(&client, "return new Date(0).getTimezoneOffset();").await, json!(-330), "the browser's zone");
    charts_drawn(&client, 4).await;

    // What the chart says about its last point, and what the page says about the window's end.
    async fn chart_time(client: &Client) -> (i64, String, String, String) {
        let v = js(
            client,
            "var u = warrenCharts[0]; var i = u.data[0].length - 1; var ts = u.data[0][i];
             u.setCursor({left: u.valToPos(ts, 'x'), top: 10});
             return [ts, document.querySelector('.uplot .u-legend .u-series:first-child .u-value').textContent,
                     u.axes[0].label, u.axes[0].values(u, [ts], 0, 0, 0)[0]];",
        )
        .await;
        (
            v[0].as_i64().unwrap(),
            v[1].as_str().unwrap().to_string(),
            v[2].as_str().unwrap().to_string(),
            v[3].as_str().unwrap().to_string(),
        )
    }
    let (ts, legend, axis, tick) = chart_time(&client).await;
    let at = DateTime::from_timestamp(ts, 0).unwrap();
    assert_eq!(legend, at.format("%Y-%m-%d %H:%M:%S UTC").to_string(), "the default clock is UTC");
    assert_eq!(axis, "time (UTC)");
    // A new queue's chart spans a minute or two: ticks with seconds then.
    assert!(tick.starts_with(&at.format("%H:%M").to_string()) && !tick.contains('M'), "24-hour UTC ticks: {tick}");
    let to = text(&client, "[data-window-to]").await.unwrap();
    assert!(to.ends_with(" UTC"), "{to}");

    // Local time: the chart and the page's times (the window and the queue's "updated") move
    // together to +05:30 and name it.
    client.find(Locator::Css("header.top .clock select")).await.unwrap().select_by_value("local").await.unwrap();
    wait_for("the chart redrawn in local time", Duration::from_secs(10), || async {
        let (_, legend, axis, _) = chart_time(&client).await;
        if axis == "time (UTC+05:30)" && legend.ends_with("UTC+05:30") {
            Ok(())
        } else {
            Err(format!("{axis}: {legend}"))
        }
    })
    .await;
    let (ts, legend, _, tick) = chart_time(&client).await;
    let local = DateTime::from_timestamp(ts, 0).unwrap().with_timezone(&kolkata);
    assert_eq!(legend, local.format("%Y-%m-%d %H:%M:%S UTC+05:30").to_string());
    assert!(tick.starts_with(&local.format("%H:%M").to_string()), "{tick}");
    let times = js(
        &client,
        "return Array.prototype.map.call(document.querySelectorAll('main time[data-secs]'),
           function (t) { return [+t.dataset.secs, t.textContent]; });",
    )
    .await;
    let times = times.as_array().unwrap();
    assert!(times.len() >= 2, "the window's ends: {times:?}");
    for t in times {
        let at = DateTime::from_timestamp(t[0].as_i64().unwrap(), 0).unwrap().with_timezone(&kolkata);
        assert_eq!(t[1], json!(at.format("%Y-%m-%d %H:%M:%S UTC+05:30").to_string()));
    }
    // The custom range form reads local times now.
    let note = text(&client, ".clock-note").await.unwrap();
    // (ICU may name the zone by its older name, Asia/Calcutta.)
    assert!(note.contains("local time") && note.contains("UTC+05:30"), "{note}");

    // The choice is the browser's: a reload, and the live refresh of the numbers, keep it.
    client.refresh().await.unwrap();
    charts_drawn(&client, 4).await;
    let (_, legend, _, _) = chart_time(&client).await;
    assert!(legend.ends_with("UTC+05:30"), "{legend}");
    tokio::time::sleep(Duration::from_secs(6)).await;
    // The numbers' "updated" time (in the live fragment, swapped in since) says it too.
    let updated = js(&client, "return document.querySelector('#queue-stats .freshness').title;").await;
    assert!(updated.as_str().unwrap().ends_with("UTC+05:30"), "{updated}");
    let utc_text =
        js(&client, "return /\\d{2}:\\d{2}:\\d{2} UTC(?!\\+)/.test(document.querySelector('main').innerText);").await;
    assert_eq!(utc_text, json!(false), "a time left in UTC beside local ones");

    client.close().await.unwrap();
    warren.stop().await;
    connection.close(0, "done".into()).await.ok();
}

/// Queues ticked in the list (kept across its live refresh) open one chart per metric with a
/// line per queue.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queues_ticked_in_the_list_are_compared_on_one_chart() {
    let (vhost, connection, warren) = queue_with_history("clock-compare").await;
    let (_driver, client) = common::browser::start().await;
    let list = warren.url(&format!("/queues?vhost={}", warren::broker::management::encode_segment(&vhost.name)));
    client.goto(&list).await.unwrap();
    for name in ["orders", "invoices"] {
        let selector = format!(r#"tr[data-queue="{name}"] input.pick"#);
        wait_for("the queue's row", Duration::from_secs(20), || async {
            client
                .find(Locator::Css(&selector))
                .await
                .map_err(|e| e.to_string())?
                .click()
                .await
                .map_err(|e| e.to_string())
        })
        .await;
    }
    // The list refreshes every 5 s: the ticks survive it.
    tokio::time::sleep(Duration::from_secs(6)).await;
    let ticked = js(&client, "return document.querySelectorAll('input.pick:checked').length;").await;
    assert_eq!(ticked, json!(2));
    client.find(Locator::Css("#compare button[type=submit]")).await.unwrap().click().await.unwrap();
    wait_for("the compare page", Duration::from_secs(10), || async {
        let url = client.current_url().await.map_err(|e| e.to_string())?;
        if url.path() == "/compare" {
            Ok(())
        } else {
            Err(url.to_string())
        }
    })
    .await;
    charts_drawn(&client, 6).await;
    let ready = js(
        &client,
        "var u = warrenCharts[0]; return [u.series.slice(1).map(function (s) { return s.label; }),
           u.data[1].filter(function (v) { return v != null; }).pop(), u.data[2].filter(function (v) { return v != null; }).pop()];",
    )
    .await;
    assert_eq!(ready, json!([["orders", "invoices"], 3, 5]), "one line per queue, in the order ticked");

    // More than fit on one chart, or a queue that does not exist: a clear error.
    let many: Vec<String> = (0..9).map(|i| format!("q=/queues/local/x/q{i}")).collect();
    let (status, body) = warren.get_text(&format!("/compare?{}", many.join("&"))).await;
    assert_eq!(status, 400);
    assert!(body.contains("at most 8"), "{body}");
    let (status, _) = warren.get_text("/compare?q=/queues/local/nowhere/nothing").await;
    assert_eq!(status, 404);
    let (status, body) = warren.get_text("/compare?q=../../etc").await;
    assert_eq!(status, 400, "{body}");

    client.close().await.unwrap();
    warren.stop().await;
    connection.close(0, "done".into()).await.ok();
}
