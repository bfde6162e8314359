//! The advisor's actions (issue 35, must-have 2) against the real broker, with an operator, a
//! viewer and an admin logged in: a finding acknowledged with a reason leaves the open list,
//! is counted apart and audited, and comes back once its evidence changes; a suggested policy
//! applied from its confirmation page is on the broker exactly as shown, audited, and the
//! finding clears; viewers are offered no form and refused every action; hostile reasons are
//! refused or escaped.

mod common;

use std::time::Duration;

use common::sessions::{add_users, login, Session};
use common::{broker, encode, management, wait_for, TestVhost, Warren};
use serde_json::{json, Value};
use warren::auth::Role;

const WAIT: Duration = Duration::from_secs(90);
const RULE: &str = "quorum-without-dlx";

/// As tests/advisor.rs: a changed policy (a fix, or new evidence) shows at the next metadata
/// listing, every 300 s on 4.x.
fn metadata_wait() -> Duration {
    if broker().target.starts_with('4') {
        Duration::from_secs(330)
    } else {
        WAIT
    }
}

async fn declared(vhost: &TestVhost, queue: &str, arguments: Value) {
    let path = format!("/api/queues/{}/{}", encode(&vhost.name), encode(queue));
    let body = json!({"durable": true, "auto_delete": false, "arguments": arguments});
    let (status, text) = management(reqwest::Method::PUT, &path, Some(body)).await;
    assert!(status == 201 || status == 204, "declare {queue}: {status} {text}");
}

async fn set_policy(vhost: &TestVhost, name: &str, body: Value) {
    let path = format!("/api/policies/{}/{}", encode(&vhost.name), encode(name));
    let (status, text) = management(reqwest::Method::PUT, &path, Some(body)).await;
    assert!(status == 201 || status == 204, "policy {name}: {status} {text}");
}

async fn policy_on_broker(vhost: &TestVhost, name: &str) -> Value {
    let path = format!("/api/policies/{}/{}", encode(&vhost.name), encode(name));
    let (status, text) = management(reqwest::Method::GET, &path, None).await;
    assert_eq!(status, 200, "{text}");
    serde_json::from_str(&text).unwrap()
}

/// warren on the vhost, polling every second, with an admin, an operator and a viewer.
async fn warren(vhost: &TestVhost) -> Warren {
    let warren = Warren::start(&format!(
        "[[brokers]]\nname = \"local\"\n{}vhosts_include = [{:?}]\npoll_interval_secs = 1\n",
        broker().toml(),
        vhost.name
    ))
    .await;
    add_users(&warren, &[("ada", Role::Admin), ("otto", Role::Operator), ("vera", Role::Viewer)]).await;
    warren
}

async fn advice(session: &Session<'_>, query: &str) -> Value {
    let (status, body) = session.get_json(&format!("/api/v1/brokers/local/advice{query}")).await;
    assert_eq!(status, 200, "{body}");
    body
}

fn finding<'a>(advice: &'a Value, queue: &str) -> Option<&'a Value> {
    advice["findings"].as_array().unwrap().iter().find(|f| f["rule"] == RULE && f["queue"] == queue)
}

/// Waits up to `wait` until the finding on `queue` satisfies `check`; returns it.
async fn finding_where(
    session: &Session<'_>,
    queue: &str,
    what: &str,
    wait: Duration,
    check: impl Fn(&Value) -> bool,
) -> Value {
    wait_for(what, wait, || async {
        let advice = advice(session, "").await;
        match finding(&advice, queue).filter(|f| check(f)) {
            Some(f) => Ok(f.clone()),
            None => Err(advice.to_string()),
        }
    })
    .await
}

/// The newest audit entry of `action`, as the admin reads it.
async fn audited(admin: &Session<'_>, action: &str) -> Value {
    let (status, audit) = admin.get_json("/api/v1/audit").await;
    assert_eq!(status, 200, "{audit}");
    audit
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["action"] == action)
        .unwrap_or_else(|| panic!("{action}: {audit}"))
        .clone()
}

/// The text of an HTML element or attribute value as a browser reads it.
fn unescape(html: &str) -> String {
    html.replace("&quot;", "\"")
        .replace("&#34;", "\"")
        .replace("&#39;", "'")
        .replace("&lt;", "<")
        .replace("&#60;", "<")
        .replace("&#62;", ">")
        .replace("&#38;", "&")
        .replace("&gt;", ">")
        .replace("&amp;", "&")
}

/// The value of the hidden input `name` of a page's form.
fn hidden(page: &str, name: &str) -> String {
    let marker = format!("name=\"{name}\" value=\"");
    let start = page.find(&marker).unwrap_or_else(|| panic!("no field {name}: {page}")) + marker.len();
    unescape(&page[start..start + page[start..].find('"').unwrap()])
}

fn between<'a>(page: &'a str, open: &str, close: &str) -> &'a str {
    let start = page.find(open).unwrap_or_else(|| panic!("no {open}: {page}")) + open.len();
    &page[start..start + page[start..].find(close).unwrap()]
}

#[tokio::test]
async fn a_finding_acknowledged_with_a_reason_leaves_the_open_list_and_comes_back_when_its_evidence_changes() {
    let vhost = TestVhost::create("advisor-ack").await;
    declared(&vhost, "orders", json!({"x-queue-type": "quorum"})).await;
    let warren = warren(&vhost).await;
    let (ada, otto, vera) = (login(&warren, "ada").await, login(&warren, "otto").await, login(&warren, "vera").await);
    let found = finding_where(&otto, "orders", "the finding", WAIT, |_| true).await;
    let fingerprint = found["fingerprint"].as_str().unwrap().to_string();
    assert_eq!(fingerprint.len(), 16, "{found}");
    assert!(found["acknowledgement"].is_null(), "{found}");
    let key = json!({"rule": RULE, "vhost": vhost.name, "subject": "orders"});
    let ack = |reason: &str| json!({"rule": RULE, "vhost": vhost.name, "subject": "orders", "fingerprint": fingerprint, "reason": reason});

    // A viewer sees the finding but no form, and is refused every action.
    let (status, page) = vera.get_text("/brokers/local/advisor").await;
    assert_eq!(status, 200);
    assert!(page.contains(&format!("data-rule=\"{RULE}\"")), "{page}");
    assert!(!page.contains("class=\"acknowledge\"") && !page.contains("class=\"apply-policy\""), "{page}");
    let (_, queue_page) = vera.get_text(&format!("/queues/local/{}/orders", encode(&vhost.name))).await;
    assert!(queue_page.contains("<h2>Advisor</h2>") && !queue_page.contains("class=\"acknowledge\""), "{queue_page}");
    for (path, body) in [
        ("/api/v1/brokers/local/advice/acknowledge", ack("a viewer's")),
        ("/api/v1/brokers/local/advice/unacknowledge", key.clone()),
        (
            "/api/v1/brokers/local/advice/apply",
            json!({"rule": RULE, "vhost": vhost.name, "subject": "orders", "definition": {}}),
        ),
    ] {
        let (status, answer) = vera.post_json(path, &body).await;
        assert_eq!((status, answer["error"]["code"].as_str()), (403, Some("forbidden")), "{path}: {answer}");
    }
    for path in
        ["/brokers/local/advisor/acknowledge", "/brokers/local/advisor/unacknowledge", "/brokers/local/advisor/apply"]
    {
        let (status, _, _) = vera.post_form(path, &[("rule", RULE), ("subject", "orders"), ("reason", "x")]).await;
        assert_eq!(status, 403, "{path}");
    }

    // Hostile reasons are refused with the field named; a stale fingerprint is a conflict.
    let control = "known\u{7} issue";
    for reason in ["", "   ", &"x".repeat(10 * 1024), control, "two\nlines", "esc \u{1b}[31m"] {
        let (status, answer) = otto.post_json("/api/v1/brokers/local/advice/acknowledge", &ack(reason)).await;
        assert_eq!(status, 422, "{reason:?}: {answer}");
        assert!(answer.to_string().contains("reason"), "{answer}");
    }
    let mut stale = ack("fine");
    stale["fingerprint"] = json!("0000000000000000");
    let (status, answer) = otto.post_json("/api/v1/brokers/local/advice/acknowledge", &stale).await;
    assert_eq!(status, 409, "{answer}");
    assert_eq!(advice(&otto, "?state=acknowledged").await["findings"], json!([]), "nothing was stored");

    // The operator acknowledges from the page; the reason is HTML, shown as text.
    let reason = "<script>alert(1)</script> dev only: \"dropped\" messages are fine here";
    let (status, location, body) = otto
        .post_form(
            "/brokers/local/advisor/acknowledge",
            &[
                ("rule", RULE),
                ("vhost", &vhost.name),
                ("subject", "orders"),
                ("fingerprint", &fingerprint),
                ("reason", reason),
            ],
        )
        .await;
    assert_eq!(status, 303, "{body}");
    let (_, landed) = otto.get_text(location.as_deref().unwrap()).await;
    assert!(landed.contains(&format!("Acknowledged {RULE} on orders.")), "{landed}");

    let open = advice(&otto, "?state=open").await;
    assert!(finding(&open, "orders").is_none(), "it left the open list: {open}");
    let acknowledged = advice(&otto, "?state=acknowledged").await;
    let f = finding(&acknowledged, "orders").expect("listed as acknowledged");
    let state = &f["acknowledgement"];
    assert_eq!(
        (state["by"].as_str(), state["reason"].as_str(), state["applies"].as_bool()),
        (Some("otto"), Some(reason), Some(true))
    );
    let all = advice(&otto, "").await;
    assert_eq!(all["acknowledged"], 1, "{all}");
    let count = all["counts"].as_array().unwrap().iter().find(|c| c["rule"] == RULE).unwrap();
    assert_eq!((count["findings"].as_u64(), count["acknowledged"].as_u64()), (Some(1), Some(1)), "{count}");
    let (status, _) = otto.get_json("/api/v1/brokers/local/advice?state=ignored").await;
    assert_eq!(status, 400);

    // Viewers read who acknowledged it and why, escaped, apart from the open findings.
    let (_, page) = vera.get_text("/brokers/local/advisor").await;
    let apart = between(&page, "<section class=\"acknowledged-findings\">", "</section>");
    assert!(
        apart.contains("Acknowledged</strong> by otto") && apart.contains(&format!("data-rule=\"{RULE}\"")),
        "{page}"
    );
    assert!(!page.contains("<script>alert(1)") && unescape(apart).contains(reason), "escaped: {page}");
    assert!(!between(&page, "<section class=\"open-findings\">", "</section>").contains("data-rule"), "{page}");
    assert!(!page.contains("class=\"unacknowledge\""), "no form for a viewer: {page}");
    let (_, page) = otto.get_text("/brokers/local/advisor").await;
    assert!(page.contains("class=\"unacknowledge\""), "{page}");

    // /metrics keeps counting the finding, and counts the acknowledged ones apart.
    let (_, metrics) = otto.get_text("/metrics").await;
    let labels = format!("{{broker=\"local\",rule=\"{RULE}\",severity=\"{}\"}}", f["severity"].as_str().unwrap());
    assert!(metrics.contains(&format!("warren_advisor_findings{labels} 1")), "{metrics}");
    assert!(metrics.contains(&format!("warren_advisor_findings_acknowledged{labels} 1")), "{metrics}");

    // Audited: who, when, why.
    let entry = audited(&ada, "advisor acknowledge").await;
    assert_eq!((entry["actor"].as_str(), entry["outcome"].as_str()), (Some("otto"), Some("done")), "{entry}");
    assert_eq!((entry["vhost"].as_str(), entry["queue"].as_str()), (Some(vhost.name.as_str()), Some("orders")));
    assert_eq!(
        (entry["request"]["reason"].as_str(), entry["request"]["fingerprint"].as_str()),
        (Some(reason), Some(fingerprint.as_str()))
    );
    assert!(entry["at_rfc3339"].is_string(), "{entry}");

    // The evidence changes (a delivery limit by policy): the finding is open again and says why.
    set_policy(
        &vhost,
        "limit",
        json!({"pattern": "^orders$", "definition": {"delivery-limit": 5}, "apply-to": "queues"}),
    )
    .await;
    // A policy shows at the next metadata listing: on 4.x up to 300 s away.
    let back = finding_where(&otto, "orders", "the finding to come back", metadata_wait(), |f| {
        f["acknowledgement"]["applies"] == false
    })
    .await;
    assert_ne!(back["fingerprint"], fingerprint.as_str(), "{back}");
    let open = advice(&otto, "?state=open").await;
    assert!(finding(&open, "orders").is_some(), "{open}");
    let (_, page) = vera.get_text("/brokers/local/advisor").await;
    assert!(page.contains("Came back:</strong> evidence changed since otto acknowledged it"), "{page}");
    let (_, metrics) = otto.get_text("/metrics").await;
    assert!(
        !metrics.contains(&format!(
            "warren_advisor_findings_acknowledged{{broker=\"local\",rule=\"{RULE}\",severity=\"{}\"}} 1",
            back["severity"].as_str().unwrap()
        )),
        "{metrics}"
    );

    // Taken back: gone, audited; a second time there is nothing to take back.
    let (status, answer) = otto.post_json("/api/v1/brokers/local/advice/unacknowledge", &key).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["removed"]["reason"], reason);
    let (status, _) = otto.post_json("/api/v1/brokers/local/advice/unacknowledge", &key).await;
    assert_eq!(status, 404);
    let entry = audited(&ada, "advisor unacknowledge").await;
    assert_eq!(entry["actor"], "otto", "{entry}");
    assert!(advice(&otto, "").await["findings"].as_array().unwrap().iter().all(|f| f["acknowledgement"].is_null()));
    warren.stop().await;
}

#[tokio::test]
async fn the_suggested_policy_applied_from_its_confirmation_is_set_as_shown_audited_and_clears_the_finding() {
    let vhost = TestVhost::create("advisor-apply").await;
    declared(&vhost, "orders", json!({"x-queue-type": "quorum"})).await;
    declared(&vhost, "orders.dlq", json!({"x-queue-type": "quorum", "x-message-ttl": 86_400_000})).await;
    let warren = warren(&vhost).await;
    let (ada, otto, vera) = (login(&warren, "ada").await, login(&warren, "otto").await, login(&warren, "vera").await);
    let found = finding_where(&otto, "orders", "the finding", WAIT, |_| true).await;
    let name = found["fix"]["policy"]["name"].as_str().unwrap().to_string();
    // A policy of that name exists already, for other queues: applying would replace it.
    let old = json!({"max-length": 7});
    set_policy(&vhost, &name, json!({"pattern": "^nothing$", "definition": old, "apply-to": "queues", "priority": 1}))
        .await;

    let query = format!("rule={RULE}&vhost={}&subject=orders", encode(&vhost.name));
    let (status, preview) = otto.get_json(&format!("/api/v1/brokers/local/advice/apply?{query}")).await;
    assert_eq!(status, 200, "{preview}");
    assert_eq!(
        (preview["existing"]["definition"].clone(), preview["replaces_another"].as_bool()),
        (old.clone(), Some(true))
    );

    // A viewer sees what would be set, without a form.
    let (status, page) = vera.get_text(&format!("/brokers/local/advisor/apply?{query}")).await;
    assert_eq!(status, 200, "{page}");
    assert!(!page.contains("class=\"apply-confirm\"") && page.contains("needs the operator role"), "{page}");

    // Not what the confirmation showed: refused, and the broker keeps its policy.
    let definition = preview["policy"]["definition"].clone();
    let blind = json!({"rule": RULE, "vhost": vhost.name, "subject": "orders", "definition": definition});
    let (status, answer) = otto.post_json("/api/v1/brokers/local/advice/apply", &blind).await;
    assert_eq!(status, 409, "{answer}");
    assert!(answer["error"]["message"].as_str().unwrap().contains("did not show"), "{answer}");
    let mut other = blind.clone();
    other["definition"] = json!({"dead-letter-exchange": "elsewhere"});
    other["replaces"] = old.clone();
    let (status, answer) = otto.post_json("/api/v1/brokers/local/advice/apply", &other).await;
    assert_eq!(status, 409, "a definition that is not the suggestion: {answer}");
    assert_eq!(policy_on_broker(&vhost, &name).await["definition"], old);

    // The confirmation page shows every field, and the policy it replaces.
    let (status, page) = otto.get_text(&format!("/brokers/local/advisor/apply?{query}")).await;
    assert_eq!(status, 200, "{page}");
    let shown: Value =
        serde_json::from_str(&unescape(between(&page, "<pre class=\"policy-definition\">", "</pre>"))).unwrap();
    assert_eq!(shown, definition, "{page}");
    assert!(unescape(between(&page, "data-field=\"pattern\"><code>", "</code>")) == "^orders$", "{page}");
    assert!(
        page.contains("data-field=\"priority\">100<") && page.contains("data-field=\"apply-to\">queues<"),
        "{page}"
    );
    let replaced: Value =
        serde_json::from_str(&unescape(between(&page, "<pre class=\"existing-definition\">", "</pre>"))).unwrap();
    assert_eq!(replaced, old, "{page}");
    assert!(page.contains("exists in this vhost and is replaced"), "{page}");

    // Applied from the page, with the fields it carries.
    let fields: Vec<(&str, String)> =
        ["rule", "vhost", "subject", "definition", "replaces"].iter().map(|f| (*f, hidden(&page, f))).collect();
    let fields: Vec<(&str, &str)> = fields.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let (status, location, body) = otto.post_form("/brokers/local/advisor/apply", &fields).await;
    assert_eq!(status, 303, "{body}");
    let (_, landed) = otto.get_text(location.as_deref().unwrap()).await;
    assert!(landed.contains(&format!("Policy {name} set in vhost")), "{landed}");

    // On the broker exactly as shown; audited with the exact definition; the finding clears.
    let on_broker = policy_on_broker(&vhost, &name).await;
    assert_eq!(on_broker["definition"], shown, "{on_broker}");
    assert_eq!((on_broker["pattern"].as_str(), on_broker["priority"].as_i64()), (Some("^orders$"), Some(100)));
    assert_eq!(on_broker["apply-to"], "queues");
    let entry = audited(&ada, "advisor apply policy").await;
    assert_eq!((entry["actor"].as_str(), entry["outcome"].as_str()), (Some("otto"), Some("done")), "{entry}");
    assert_eq!(entry["request"]["body"]["definition"], shown, "{entry}");
    assert_eq!(entry["request"]["replaced"]["definition"], old, "{entry}");
    wait_for("the finding to clear", metadata_wait(), || async {
        let advice = advice(&otto, "").await;
        let ran = advice["counts"].as_array().unwrap().iter().any(|c| c["rule"] == RULE && c["ran"] == true);
        if ran && finding(&advice, "orders").is_none() {
            Ok(())
        } else {
            Err(advice.to_string())
        }
    })
    .await;
    // Once cleared there is nothing to apply.
    let (status, _) = otto.get_json(&format!("/api/v1/brokers/local/advice/apply?{query}")).await;
    assert_eq!(status, 404);
    warren.stop().await;
}
