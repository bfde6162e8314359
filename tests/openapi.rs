//! The OpenAPI description at `/api/v1/openapi.json` (issue 36, case 8): an OpenAPI 3.1 document
//! readable without login that names every route the routers serve under `/api/v1`, real
//! answers that conform to it, and schemathesis (PyPI; `.ci/run` installs it) run against a real
//! warren watching a real vhost.

mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use common::{declare, wait_for, TestVhost, Warren};
use serde_json::Value;

/// `(METHOD, path)` of every route in the routers of `src/web/` under `/api/v1`, read from the
/// source as the compiler reads it (`.route("/api/v1/…", get(…).post(…))`), so the list the
/// description is checked against is not one more copy kept by hand.
fn routes_in_source() -> BTreeSet<(String, String)> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/web");
    let mut routes = BTreeSet::new();
    for entry in std::fs::read_dir(&dir).expect("src/web") {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "rs") {
            continue;
        }
        let source = std::fs::read_to_string(&path).unwrap();
        let mut rest = source.as_str();
        while let Some(at) = rest.find(".route(") {
            rest = &rest[at + ".route(".len()..];
            let call = balanced(rest);
            let call_trimmed = call.trim_start();
            let Some(literal) = call_trimmed.strip_prefix("\"/api/v1") else { continue };
            let route = format!("/api/v1{}", &literal[..literal.find('"').unwrap()]);
            let handlers = &call_trimmed[route.len() + 2..];
            for method in methods_at_top_level(handlers) {
                routes.insert((method, route.clone()));
            }
        }
    }
    routes
}

/// The text up to the parenthesis that closes the one just opened.
fn balanced(text: &str) -> &str {
    let mut depth = 1;
    for (i, c) in text.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => {
                depth -= 1;
                if depth == 0 {
                    return &text[..i];
                }
            }
            _ => {}
        }
    }
    text
}

/// `get(` / `post(` calls outside any other call: the route's method routers.
fn methods_at_top_level(text: &str) -> Vec<String> {
    let mut methods = Vec::new();
    let mut depth = 0;
    for (i, c) in text.char_indices() {
        match c {
            '(' => {
                if depth == 0 {
                    let before = &text[..i];
                    let name = before.rsplit(|c: char| !c.is_ascii_alphanumeric() && c != '_').next().unwrap_or("");
                    if ["get", "post", "put", "patch", "delete"].contains(&name) {
                        methods.push(name.to_uppercase());
                    }
                }
                depth += 1;
            }
            ')' => depth -= 1,
            _ => {}
        }
    }
    methods
}

fn routes_in_document(doc: &Value) -> BTreeSet<(String, String)> {
    let mut routes = BTreeSet::new();
    for (path, item) in doc["paths"].as_object().expect("paths") {
        for method in item.as_object().unwrap().keys() {
            routes.insert((method.to_uppercase(), path.clone()));
        }
    }
    routes
}

/// Every `$ref` in the document points at a schema it has.
fn check_refs(doc: &Value, node: &Value) {
    match node {
        Value::Object(map) => {
            if let Some(Value::String(target)) = map.get("$ref") {
                let name = target.strip_prefix("#/components/schemas/").unwrap_or_else(|| panic!("$ref {target}"));
                assert!(doc["components"]["schemas"][name].is_object(), "$ref {target} resolves");
            }
            map.values().for_each(|v| check_refs(doc, v));
        }
        Value::Array(items) => items.iter().for_each(|v| check_refs(doc, v)),
        _ => {}
    }
}

/// An error body as the `Error` schema says: `{"error": {"code": string, "message": string}}`.
fn check_error_body(what: &str, body: &Value) {
    assert!(body["error"]["code"].is_string(), "{what}: error.code is a string: {body}");
    assert!(body["error"]["message"].is_string(), "{what}: error.message is a string: {body}");
}

#[tokio::test]
async fn the_description_is_openapi_3_1_and_names_every_api_route() {
    let vhost = TestVhost::create("openapi").await;
    let connection = vhost.connect().await;
    let channel = vhost.channel(&connection).await;
    declare(&channel, "orders", false).await;
    let warren = Warren::for_vhost(&vhost.name, 1).await;

    // No credential: readable by the tools that read it first.
    let (status, doc) = warren.get_json("/api/v1/openapi.json").await;
    assert_eq!(status, 200, "{doc}");
    assert_eq!(doc["openapi"], "3.1.0");
    assert_eq!(doc["info"]["title"], "warren");
    assert!(doc["components"]["securitySchemes"]["token"]["scheme"] == "bearer", "{}", doc["components"]);
    check_refs(&doc, &doc);

    let served = routes_in_source();
    assert!(served.len() > 40, "the routers' /api/v1 routes were found in src/web: {served:?}");
    let described = routes_in_document(&doc);
    let missing: Vec<_> = served.difference(&described).collect();
    let extra: Vec<_> = described.difference(&served).collect();
    assert!(missing.is_empty(), "routes served but not described: {missing:?}");
    assert!(extra.is_empty(), "routes described but not served: {extra:?}");

    // Every operation says what it answers on error, with the one error body.
    for (method, path) in &described {
        let responses = &doc["paths"][path][method.to_lowercase()]["responses"];
        for status in ["400", "404", "500"] {
            assert_eq!(
                responses[status]["content"]["application/json"]["schema"]["$ref"], "#/components/schemas/Error",
                "{method} {path} {status}"
            );
        }
    }

    // The lists' query parameters, from the types the handlers parse.
    let names = |path: &str| -> Vec<String> {
        doc["paths"][path]["get"]["parameters"]
            .as_array()
            .map(|ps| {
                ps.iter().filter(|p| p["in"] == "query").map(|p| p["name"].as_str().unwrap().to_string()).collect()
            })
            .unwrap_or_default()
    };
    assert!(names("/api/v1/queues").contains(&"per_page".to_string()), "{:?}", names("/api/v1/queues"));
    assert!(names("/api/v1/audit").contains(&"before".to_string()), "{:?}", names("/api/v1/audit"));
    assert_eq!(names("/api/v1/queues/{broker}/{vhost}/{queue}/history"), ["from", "to", "range"]);

    // A sample of real answers: statuses the description lists, errors in its shape.
    wait_for("orders listed by warren", Duration::from_secs(30), || async {
        warren.queue(&vhost.name, "orders").await.map(|_| ()).ok_or_else(|| "not yet".to_string())
    })
    .await;
    let queue = format!("/api/v1/queues/local/{}/orders", common::encode(&vhost.name));
    let samples = [
        ("/api/v1/brokers".to_string(), "/api/v1/brokers"),
        ("/api/v1/brokers/local".to_string(), "/api/v1/brokers/{broker}"),
        ("/api/v1/brokers/nowhere".to_string(), "/api/v1/brokers/{broker}"),
        ("/api/v1/queues".to_string(), "/api/v1/queues"),
        ("/api/v1/queues?per_page=0".to_string(), "/api/v1/queues"),
        (queue.clone(), "/api/v1/queues/{broker}/{vhost}/{queue}"),
        (format!("{queue}/history"), "/api/v1/queues/{broker}/{vhost}/{queue}/history"),
        (format!("{queue}/history?from=x"), "/api/v1/queues/{broker}/{vhost}/{queue}/history"),
        ("/api/v1/queues/local/nowhere/nothing".to_string(), "/api/v1/queues/{broker}/{vhost}/{queue}"),
        ("/api/v1/jobs/999999".to_string(), "/api/v1/jobs/{id}"),
        ("/api/v1/jobs/x".to_string(), "/api/v1/jobs/{id}"),
        ("/api/v1/audit".to_string(), "/api/v1/audit"),
        ("/api/v1/alerts".to_string(), "/api/v1/alerts"),
        ("/api/v1/me".to_string(), "/api/v1/me"),
    ];
    for (url, path) in samples {
        let response = warren.http.get(warren.url(&url)).send().await.expect("warren answers");
        let status = response.status().as_u16();
        let content_type = response.headers()["content-type"].to_str().unwrap().to_string();
        assert!(content_type.starts_with("application/json"), "GET {url}: {content_type}");
        let body: Value = response.json().await.expect("JSON");
        let documented = &doc["paths"][path]["get"]["responses"][status.to_string()];
        assert!(documented.is_object(), "GET {url} answered {status}, which {path} does not list");
        if status >= 400 {
            check_error_body(&format!("GET {url}"), &body);
        }
    }

    warren.stop().await;
}

/// schemathesis generates requests from the description for every GET operation and checks
/// that none answers 5xx and that every status, content type and body conforms. The POSTs are
/// left out: generated bodies would requeue, purge and delete (the test vhost would survive it,
/// but the point of those checks is the shapes, which the GETs and the Rust tests of each
/// action cover). warren runs with no user, so loopback requests are anonymous administrators;
/// `.ci/run` installs schemathesis and a missing one fails here.
#[tokio::test]
async fn schemathesis_finds_every_get_conforming() {
    let vhost = TestVhost::create("schemathesis").await;
    let connection = vhost.connect().await;
    let channel = vhost.channel(&connection).await;
    declare(&channel, "orders", false).await;
    let warren = Warren::for_vhost(&vhost.name, 1).await;
    wait_for("orders listed by warren", Duration::from_secs(30), || async {
        warren.queue(&vhost.name, "orders").await.map(|_| ()).ok_or_else(|| "not yet".to_string())
    })
    .await;

    // The test's broker, vhost and queue as the path parameters of that name, so the operations
    // on them answer with data rather than 404 (schemathesis still generates the other values).
    let config = warren.dir.path().join("schemathesis.toml");
    let parameters = format!(
        "[parameters]\n\"path.broker\" = \"local\"\n\"path.vhost\" = {:?}\n\"path.queue\" = \"orders\"\n",
        vhost.name
    );
    std::fs::write(&config, parameters).unwrap();
    let base = warren.url("");
    let started = std::time::Instant::now();
    // Run in the test's directory: schemathesis keeps a `.schemathesis/` database where it runs.
    let run = tokio::process::Command::new("schemathesis")
        .current_dir(warren.dir.path())
        .arg("--config-file")
        .arg(&config)
        .args(["run", &format!("{base}/api/v1/openapi.json"), "--url", &base])
        .args(["--include-method", "GET"])
        .args([
            "--checks",
            "not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance",
        ])
        .args(["--max-examples", "15", "--workers", "2", "--generation-deterministic", "--no-color"])
        .output()
        .await
        .unwrap_or_else(|e| panic!("schemathesis (PyPI; `.ci/run` installs it): {e}"));
    let said = format!("{}{}", String::from_utf8_lossy(&run.stdout), String::from_utf8_lossy(&run.stderr));
    assert!(run.status.success(), "schemathesis found failures:\n{said}");
    eprintln!("schemathesis took {:?}", started.elapsed());

    warren.stop().await;
}
