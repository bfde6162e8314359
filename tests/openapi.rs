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
    // `src/web/` and its wings' folders (`src/web/dlq/`, ...).
    let mut dirs = vec![std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/web")];
    let mut files = Vec::new();
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).expect("src/web") {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                files.push(path);
            }
        }
    }
    let mut routes = BTreeSet::new();
    for path in files {
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

/// The POST routes of `src/web/` whose handler reads a body (a `Json`, `Bytes` or `body`
/// argument), and those whose handler reads none, read from the source as `routes_in_source`
/// reads the routes: `.route("/api/v1/…", post(handler))` and `async fn handler(…)` in the
/// same file.
fn posts_reading_a_body() -> (BTreeSet<String>, BTreeSet<String>) {
    let (mut reading, mut not) = (BTreeSet::new(), BTreeSet::new());
    let mut dirs = vec![std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/web")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).expect("src/web") {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
                continue;
            }
            let source = std::fs::read_to_string(&path).unwrap();
            let mut rest = source.as_str();
            while let Some(at) = rest.find(".route(\"/api/v1") {
                rest = &rest[at + ".route(\"".len()..];
                let route = &rest[..rest.find('"').unwrap()];
                let call = balanced(&rest[route.len()..]);
                let Some(post) = call.find("post(") else { continue };
                let handler = balanced(&call[post + "post(".len()..]).trim();
                let signature = format!("async fn {handler}(");
                let start = source.find(&signature).unwrap_or_else(|| panic!("{signature} in {path:?}"));
                let arguments = balanced(&source[start + signature.len()..]);
                if ["Json(", "Bytes", "body:"].iter().any(|a| arguments.contains(a)) {
                    reading.insert(route.to_string());
                } else {
                    not.insert(route.to_string());
                }
            }
        }
    }
    (reading, not)
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

    // Typed: every request body and every JSON success answer is described by the type the
    // handler parses or answers, so schemathesis checks the shapes and a client knows what to
    // send. None is left as any value (one free-form by nature would be named here, with why;
    // there is none).
    const FREE_FORM: &[(&str, &str)] = &[];
    let typed = |schema: &Value| {
        ["$ref", "type", "oneOf", "anyOf", "allOf", "properties"].iter().any(|k| schema.get(k).is_some())
    };
    let (mut typed_answers, mut typed_bodies) = (0, 0);
    for (method, path) in &described {
        let free_form = FREE_FORM.contains(&(method.as_str(), path.as_str()));
        let operation = &doc["paths"][path][method.to_lowercase()];
        let mut schemas = Vec::new();
        for (status, response) in operation["responses"].as_object().unwrap() {
            if let Some(schema) =
                response["content"]["application/json"].get("schema").filter(|_| status.starts_with('2'))
            {
                schemas.push((format!("the {status} answer"), schema));
                typed_answers += 1;
            }
        }
        if let Some(content) = operation["requestBody"]["content"].as_object() {
            assert!(!content.is_empty(), "{method} {path}: a request body says its media type");
            for (media, body) in content {
                schemas.push((format!("the {media} body"), &body["schema"]));
                typed_bodies += 1;
            }
        }
        for (what, schema) in schemas {
            if free_form {
                assert!(!typed(schema), "{method} {path} is typed now: take it off FREE_FORM");
            } else {
                assert!(typed(schema), "{method} {path}: {what} has a schema, not any value: {schema}");
            }
        }
    }
    assert!(typed_answers >= 55 && typed_bodies >= 12, "{typed_answers} typed answers, {typed_bodies} typed bodies");
    // Each POST has a request body in the description exactly when its handler reads one.
    let (reading, not_reading) = posts_reading_a_body();
    assert!(reading.len() >= 10 && not_reading.len() >= 10, "{reading:?} {not_reading:?}");
    for path in &reading {
        assert_eq!(doc["paths"][path]["post"]["requestBody"]["required"], true, "POST {path} reads a body");
    }
    for path in &not_reading {
        assert!(doc["paths"][path]["post"].get("requestBody").is_none(), "POST {path} reads no body");
    }
    let import = &doc["paths"]["/api/v1/queues/{broker}/{vhost}/{queue}/custody/import"]["post"]["requestBody"];
    assert_eq!(import["content"]["application/x-ndjson"]["schema"]["type"], "string", "{import}");
    // Unknown is `null` (truthful numbers), an enum is its values, a time is RFC 3339.
    let schemas = &doc["components"]["schemas"];
    let property = |schema: &str, name: &str| -> Value {
        let s = &schemas[schema];
        let found = s["properties"][name].clone();
        if found.is_object() {
            return found;
        }
        // A flattened part: in one of `allOf`'s items.
        s["allOf"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|part| part["properties"][name].clone())
            .find(Value::is_object)
            .unwrap_or_else(|| panic!("{schema}.{name}: {s}"))
    };
    let types =
        |v: &Value| v["type"].as_array().map(|t| t.iter().map(|t| t.as_str().unwrap().to_string()).collect::<Vec<_>>());
    assert_eq!(types(&property("QueueView", "ready")), Some(vec!["integer".into(), "null".into()]));
    assert_eq!(types(&property("BrokerRates", "publish_rate")), Some(vec!["number".into(), "null".into()]));
    assert_eq!(types(&property("Node", "mem_used")), Some(vec!["integer".into(), "null".into()]));
    assert_eq!(schemas["AgeSource"]["enum"], serde_json::json!(["exact", "estimated", "unknown"]));
    assert_eq!(property("JobStatus", "started_at")["format"], "date-time");
    assert_eq!(property("QueueView", "updated_at")["format"], "date-time");
    assert_eq!(property("CustodyRecord", "received_at_rfc3339")["format"], "date-time");
    let history = &doc["components"]["schemas"]["HistoryEntry"];
    assert!(history["properties"]["rule_id"].is_object(), "{history}");
    let token = doc["components"]["schemas"]["TokenInfo"].to_string();
    assert!(token.contains("created_at_rfc3339") && token.contains("date-time"), "{token}");

    // A POST's success is the status it answers: 201 created, 202 started, else 200.
    for (path, status) in [
        ("/api/v1/alerts/rules", "201"),
        ("/api/v1/silences", "201"),
        ("/api/v1/queues/{broker}/{vhost}/{queue}/requeue", "202"),
        ("/api/v1/jobs/{id}/cancel", "202"),
        ("/api/v1/queues/{broker}/{vhost}/{queue}/purge", "200"),
    ] {
        let responses = doc["paths"][path]["post"]["responses"].as_object().unwrap();
        let successes: Vec<&String> = responses.keys().filter(|s| s.starts_with('2')).collect();
        assert_eq!(successes, [status], "POST {path}");
    }
    let rule_body = &doc["paths"]["/api/v1/alerts/rules"]["post"]["requestBody"]["content"]["application/json"];
    assert_eq!(rule_body["schema"]["$ref"], "#/components/schemas/Rule", "{rule_body}");

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
    // Custody is listed and exported by a filter over the records.
    for path in
        ["/api/v1/queues/{broker}/{vhost}/{queue}/custody", "/api/v1/queues/{broker}/{vhost}/{queue}/custody/export"]
    {
        let names = names(path);
        for filter in ["reason", "original_queue", "error_group", "header", "json_path", "regex"] {
            assert!(names.contains(&filter.to_string()), "{path}: {names:?}");
        }
    }
    // Every list takes the same paging parameters.
    for list in [
        "/api/v1/queues",
        "/api/v1/audit",
        "/api/v1/alerts/history",
        "/api/v1/notifications/deliveries",
        "/api/v1/queues/{broker}/{vhost}/{queue}/custody",
    ] {
        let names = names(list);
        assert!(names.contains(&"cursor".to_string()) && names.contains(&"limit".to_string()), "{list}: {names:?}");
    }

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
/// that none answers 5xx and that every status, content type and body conforms. The POST run
/// was meant for two that change nothing (a rule's preview and a snapshot), but schemathesis
/// takes its include filters as a union: it runs every POST (24 of them) but the import, whose
/// JSON lines it cannot generate, with bodies generated from their typed schemas, on this
/// test's broker, vhost and queues. warren runs with no user, so loopback requests are
/// anonymous administrators; `.ci/run` installs schemathesis and a missing one fails here.
///
/// The answers have something in them to check: a consumer (connections, channels, consumers),
/// a DLQ with a snapshot and a finished requeue (the snapshot, the job, the messages it moved),
/// another in custody (the listing and a record), a firing alert, dead-letter routing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schemathesis_finds_every_answer_conforming() {
    use common::dead_letters::{dead_letter, numbered};
    let vhost = TestVhost::create("schemathesis").await;
    let connection = vhost.connect().await;
    let channel = vhost.channel(&connection).await;
    declare(&channel, "orders", false).await;
    common::publish(&channel, "orders", 3, Default::default()).await;
    let consumer_channel = vhost.channel(&connection).await;
    let _consumer = consumer_channel
        .basic_consume(
            "orders".into(),
            "holder".into(),
            lapin::options::BasicConsumeOptions::default(),
            lapin::types::FieldTable::default(),
        )
        .await
        .expect("consume");
    dead_letter(&vhost, &channel, "work.dlq", false, numbered(3)).await;
    // Bound to the same fanout exchange: these three go to both DLQs.
    dead_letter(&vhost, &channel, "held.dlq", false, numbered(3)).await;
    let toml = format!(
        "[[alerts]]\nid = \"dead\"\nname = \"Dead letters\"\nmetric = \"ready\"\ncomparator = \">\"\n\
         threshold = 0\nseverity = \"info\"\n\n\
         [[brokers]]\nname = \"local\"\nvhosts_include = [{:?}]\npoll_interval_secs = 1\n\n\
         [[custody]]\nqueue = \"held.dlq\"\n",
        vhost.name
    );
    let warren = Warren::start(&toml).await;
    let queue_path = |queue: &str| format!("/api/v1/queues/local/{}/{queue}", common::encode(&vhost.name));
    wait_for("the consumer listed, three records held", Duration::from_secs(90), || async {
        let (_, consumers) = warren.get_json(&format!("{}/consumers", queue_path("orders"))).await;
        let (_, held) = warren.get_json(&format!("{}/custody", queue_path("held.dlq"))).await;
        let listed = consumers["consumers"].as_array().is_some_and(|c| !c.is_empty());
        if listed && held["custody"]["counts"]["held"] == 3 {
            Ok(())
        } else {
            Err(format!("consumers {}, custody {}", consumers["consumers"], held["custody"]["counts"]))
        }
    })
    .await;
    warren.snapshot(&vhost.name, "work.dlq", 6).await;
    let job = warren
        .run_move(
            &format!("{}/requeue", queue_path("work.dlq")),
            serde_json::json!({"selection": {"positions": [1]}, "accept_stranding": true}),
        )
        .await;
    let job_id = job["id"].as_i64().expect("a job id");
    let (_, held) = warren.get_json(&format!("{}/custody", queue_path("held.dlq"))).await;
    let record_id = held["items"][0]["id"].as_i64().expect("a held record");

    // The test's broker, vhost and queue as the path parameters of that name, so the operations
    // on them answer with data rather than 404 (schemathesis still generates the other values);
    // the DLQs, the job and the record for the operations on those.
    let config = warren.dir.path().join("schemathesis.toml");
    let parameters = format!(
        "[parameters]\n\"path.broker\" = \"local\"\n\"path.vhost\" = {vhost:?}\n\"path.queue\" = \"orders\"\n\n\
         [[operations]]\ninclude-path = \"/api/v1/queues/{{broker}}/{{vhost}}/{{queue}}/snapshot\"\n\
         parameters = {{ \"path.queue\" = \"work.dlq\" }}\n\n\
         [[operations]]\ninclude-path = \"/api/v1/queues/{{broker}}/{{vhost}}/{{queue}}/custody\"\n\
         parameters = {{ \"path.queue\" = \"held.dlq\" }}\n\n\
         [[operations]]\ninclude-path = \"/api/v1/queues/{{broker}}/{{vhost}}/{{queue}}/custody/{{id}}\"\n\
         parameters = {{ \"path.queue\" = \"held.dlq\", \"path.id\" = {record_id} }}\n\n\
         [[operations]]\ninclude-path = \"/api/v1/jobs/{{id}}\"\nparameters = {{ \"path.id\" = {job_id} }}\n\n\
         [[operations]]\ninclude-path = \"/api/v1/audit/{{id}}/messages\"\nparameters = {{ \"path.id\" = {job_id} }}\n",
        vhost = vhost.name
    );
    std::fs::write(&config, parameters).unwrap();
    let started = std::time::Instant::now();
    let said = schemathesis(&warren, &config, &["--include-method", "GET"]).await;
    eprintln!("schemathesis on the GETs took {:?}", started.elapsed());
    // The POSTs (the filters are a union: every POST and the snapshot's GET, not only the
    // preview and the snapshot), so their typed bodies and answers are checked too.
    let started = std::time::Instant::now();
    let posts = schemathesis(
        &warren,
        &config,
        &[
            "--include-method",
            "POST",
            "--include-path-regex",
            "/(alerts/rules/preview|queues/[^/]+/[^/]+/[^/]+/snapshot)$",
            // JSON lines: schemathesis has no serializer for them (tests/custody*.rs import).
            "--exclude-path-regex",
            "/custody/import$",
        ],
    )
    .await;
    let selected = posts.lines().find(|l| l.contains("selected")).unwrap_or_default().trim().to_string();
    eprintln!("schemathesis on the POSTs ({selected}) took {:?}", started.elapsed());
    // Every GET the description lists, counted from the description: a new GET joins the run.
    let (_, doc) = warren.get_json("/api/v1/openapi.json").await;
    let gets = routes_in_document(&doc).iter().filter(|(method, _)| method == "GET").count();
    assert!(said.contains(&format!("{gets} selected")), "every one of the {gets} GETs was run: {said}");

    warren.stop().await;
}

/// Runs schemathesis against `warren`'s description with `config` and `filters`, checking
/// that no answer is a 5xx and every status, content type and body conforms; returns what
/// it said.
async fn schemathesis(warren: &Warren, config: &std::path::Path, filters: &[&str]) -> String {
    let base = warren.url("");
    // Run in the test's directory: schemathesis keeps a `.schemathesis/` database where it runs.
    let run = tokio::process::Command::new("schemathesis")
        .current_dir(warren.dir.path())
        // A bug of this machine's Python that hypothesis trips over, not a finding (the file says).
        .env("SCHEMATHESIS_HOOKS", concat!(env!("CARGO_MANIFEST_DIR"), "/tests/schemathesis_hooks.py"))
        .arg("--config-file")
        .arg(config)
        .args(["run", &format!("{base}/api/v1/openapi.json"), "--url", &base])
        .args(filters)
        .args([
            "--checks",
            "not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance",
        ])
        .args(["--max-examples", "15", "--workers", "2", "--generation-deterministic", "--no-color"])
        .output()
        .await
        .unwrap_or_else(|e| panic!("schemathesis (PyPI; `.ci/run` installs it): {e}"));
    let said = format!("{}{}", String::from_utf8_lossy(&run.stdout), String::from_utf8_lossy(&run.stderr));
    assert!(run.status.success(), "schemathesis {filters:?} found failures:\n{said}");
    said
}

/// Follows `next_cursor` from the first page of `list` (a path, with its filters) at `limit`
/// items a page, checking the envelope of each page, and returns every item read.
async fn read_every_page(warren: &Warren, list: &str, limit: usize) -> Vec<Value> {
    let join = if list.contains('?') { '&' } else { '?' };
    let mut cursor = String::new();
    let mut items = Vec::new();
    for _ in 0..100 {
        let (status, page) = warren.get_json(&format!("{list}{join}limit={limit}&cursor={cursor}")).await;
        assert_eq!(status, 200, "{list} at cursor {cursor:?}: {page}");
        assert_eq!(page["limit"], limit, "{list}: the page says its limit: {page}");
        let got = page["items"].as_array().unwrap_or_else(|| panic!("{list}: items is an array: {page}"));
        check_times(list, &page, &deprecated_in_docs());
        assert!(got.len() <= limit, "{list}: {} items at limit {limit}", got.len());
        items.extend(got.iter().cloned());
        match &page["next_cursor"] {
            Value::Null => return items,
            Value::String(next) => {
                assert!(got.len() == limit, "{list}: a page short of its limit has no next page: {page}");
                cursor = next.clone();
            }
            other => panic!("{list}: next_cursor is a string or null: {other}"),
        }
    }
    panic!("{list}: more than 100 pages")
}

/// Issue 36, case 8: every list of the API pages the same way. `?cursor=&limit=` (the first
/// page with an empty cursor) answers `{"items", "next_cursor", "limit"}`; following
/// `next_cursor` reads every item once, in the list's order; the same bad values are the same
/// 400s. The deprecated parameters still answer as before (one release).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_list_pages_the_same_way() {
    use common::dead_letters::{dead_letter, numbered};
    let vhost = TestVhost::create("paging").await;
    let connection = vhost.connect().await;
    let channel = vhost.channel(&connection).await;
    dead_letter(&vhost, &channel, "work.dlq", false, numbered(5)).await;
    for name in ["q1", "q2", "q3"] {
        declare(&channel, name, false).await;
        common::publish(&channel, name, 1, Default::default()).await;
    }
    // Nothing listens on the hook: each test notification is a failed delivery, logged.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let toml = format!(
        "[[alerts]]\nid = \"any\"\nname = \"Anything ready\"\nmetric = \"ready\"\ncomparator = \">\"\n\
         threshold = 0\nseverity = \"info\"\n\n\
         [[brokers]]\nname = \"local\"\nvhosts_include = [{:?}]\npoll_interval_secs = 1\n\n\
         [[custody]]\nqueue = \"*.dlq\"\n\n\
         [[notifications]]\nid = \"hook\"\nname = \"hook\"\ntype = \"webhook\"\nurl = \"http://127.0.0.1:{closed}/h\"\n",
        vhost.name
    );
    let warren = Warren::start(&toml).await;
    let custody = format!("/api/v1/queues/local/{}/work.dlq/custody", common::encode(&vhost.name));
    for n in 0..3 {
        let until = chrono::Utc::now() + chrono::Duration::hours(1);
        let (status, body) = warren
            .post_json(
                "/api/v1/silences",
                serde_json::json!({"rule_id": "any", "until": until, "comment": format!("s{n}")}),
            )
            .await;
        assert_eq!(status, 201, "{body}");
        warren.post_json("/api/v1/notifications/channels/hook/test", serde_json::json!({})).await;
    }
    wait_for("three queues firing, five records held", Duration::from_secs(60), || async {
        let (_, history) = warren.get_json("/api/v1/alerts/history").await;
        let (_, held) = warren.get_json(&custody).await;
        let fired = history.as_array().map_or(0, |h| h.len());
        if fired >= 3 && held["custody"]["counts"]["held"] == 5 {
            Ok(())
        } else {
            Err(format!("{fired} phase changes, custody {}", held["custody"]["counts"]))
        }
    })
    .await;

    let queues = format!("/api/v1/queues?vhost={}&sort=name", common::encode(&vhost.name));
    // Each list with what names an item in it, and how many items it has at least.
    let lists = [
        (queues.as_str(), "name", 5),
        ("/api/v1/audit", "id", 3),
        ("/api/v1/alerts/history", "id", 3),
        ("/api/v1/notifications/deliveries", "id", 3),
        (custody.as_str(), "id", 5),
    ];
    for (list, key, at_least) in lists {
        let key = |item: &Value| item[key].clone();
        let all: Vec<Value> = read_every_page(&warren, list, 500).await.iter().map(key).collect();
        assert!(all.len() >= at_least, "{list}: {all:?}");
        let by_two: Vec<Value> = read_every_page(&warren, list, 2).await.iter().map(key).collect();
        // The logs grow while they are read (notifications are retried): entries newer than the
        // first reading come first, and then the same entries, in the same order.
        assert!(by_two.ends_with(&all), "{list}: two at a time reads every item once, in order: {by_two:?} {all:?}");
        let unique: std::collections::HashSet<String> = by_two.iter().map(Value::to_string).collect();
        assert_eq!(unique.len(), by_two.len(), "{list}: no item twice: {by_two:?}");
        let join = if list.contains('?') { '&' } else { '?' };
        for (bad, field) in [
            ("cursor=x", "cursor:"),
            ("cursor=-1", "cursor:"),
            ("cursor=&limit=0", "limit:"),
            ("cursor=&limit=501", "limit:"),
            ("cursor=&limit=x", "limit:"),
        ] {
            let (status, body) = warren.get_json(&format!("{list}{join}{bad}")).await;
            assert_eq!(status, 400, "{list}{join}{bad}: {body}");
            assert_eq!(body["error"]["code"], "bad_request", "{list}{join}{bad}: {body}");
            let message = body["error"]["message"].as_str().unwrap();
            assert!(message.starts_with(field), "{list}{join}{bad}: {message}");
        }
    }

    // The deprecated ways answer as they did, for one release: the bare arrays, and the
    // queue list's pages by number beside its cursor.
    for list in
        ["/api/v1/audit?per_page=2", "/api/v1/alerts/history?limit=2", "/api/v1/notifications/deliveries?limit=2"]
    {
        let (status, body) = warren.get_json(list).await;
        assert_eq!(status, 200, "{list}: {body}");
        assert_eq!(body.as_array().map(Vec::len), Some(2), "{list}: {body}");
    }
    let (_, page) = warren.get_json(&format!("{queues}&page=2&per_page=2")).await;
    // q1 q2 | q3 work | work.dlq
    assert_eq!((page["page"].as_u64(), page["per_page"].as_u64(), page["total"].as_u64()), (Some(2), Some(2), Some(5)));
    assert_eq!((page["items"][0]["name"].as_str(), page["next_cursor"].as_str()), (Some("q3"), Some("4")), "{page}");
    let (status, _) = warren.get_json(&format!("{queues}&page=2&cursor=")).await;
    assert_eq!(status, 400, "old and new paging mixed");
    let (_, old) = warren.get_json(&format!("{custody}?limit=2")).await;
    assert_eq!(
        (old["custody"]["records"].as_array().map(Vec::len), old["items"].as_array().map(Vec::len)),
        (Some(2), Some(2))
    );

    warren.stop().await;
}

/// Keys that name an instant: `ts`, `at`, `time`, `from`, `to`, `until`, `since`, `as_of`,
/// `first_seen`, `last_seen`, and any ending in `_at`, `_ts`, `_since`, `_time`, `_as_of` or
/// `_unix`.
fn names_a_time(key: &str) -> bool {
    ["ts", "at", "time", "from", "to", "until", "since", "as_of", "first_seen", "last_seen"].contains(&key)
        || ["_at", "_ts", "_since", "_time", "_as_of", "_unix"].iter().any(|end| key.ends_with(end))
}

/// The unix-seconds keys docs/api.md lists as deprecated (the line that starts with
/// "Deprecated unix-seconds fields:").
fn deprecated_in_docs() -> Vec<String> {
    let docs = std::fs::read_to_string(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/api.md")).unwrap();
    let line = docs.lines().find(|l| l.starts_with("Deprecated unix-seconds fields:")).expect("docs/api.md lists them");
    line.split('`').skip(1).step_by(2).map(str::to_string).collect()
}

/// Every instant in `value` is an RFC 3339 string in UTC (`…Z`), but for the deprecated unix
/// keys, each of which has its `_rfc3339` twin beside it saying the same instant. Returns how
/// many times it checked.
fn check_times(what: &str, value: &Value, deprecated: &[String]) -> usize {
    let mut checked = 0;
    match value {
        Value::Object(map) => {
            for (key, v) in map {
                if names_a_time(key) && !v.is_null() {
                    checked += 1;
                    if let Some(secs) = v.as_i64() {
                        assert!(deprecated.contains(key), "{what}: {key} is a number ({v}), not RFC 3339: {value}");
                        let twin = map.get(&format!("{key}_rfc3339")).and_then(Value::as_str);
                        let time = twin.unwrap_or_else(|| panic!("{what}: {key} has its twin: {value}"));
                        let parsed = chrono::DateTime::parse_from_rfc3339(time).expect("RFC 3339");
                        assert_eq!(parsed.timestamp(), secs, "{what}: {key} and its twin agree: {value}");
                    } else if let Some(text) = v.as_str().filter(|_| !["from", "to"].contains(&key.as_str())) {
                        // (An alert's `from` and `to` are phases, not times.)
                        assert!(
                            chrono::DateTime::parse_from_rfc3339(text).is_ok() && text.ends_with('Z'),
                            "{what}: {key} is {text:?}, not RFC 3339 in UTC: {value}"
                        );
                    }
                }
                if key.ends_with("_rfc3339") && !v.is_null() {
                    let text = v.as_str().unwrap_or_else(|| panic!("{what}: {key} is a string: {value}"));
                    assert!(text.ends_with('Z') && chrono::DateTime::parse_from_rfc3339(text).is_ok(), "{what}: {key}");
                }
                // A message's own properties and headers are as the broker gave them (AMQP
                // timestamps are unix seconds there): message data, not the API's fields.
                if key != "properties" {
                    checked += check_times(what, v, deprecated);
                }
            }
        }
        Value::Array(items) => checked += items.iter().map(|v| check_times(what, v, deprecated)).sum::<usize>(),
        _ => {}
    }
    checked
}

/// Issue 36, case 8: one time format. No GET answer has an instant as a number but the
/// deprecated unix-seconds fields docs/api.md lists (the same list as the code's), each with
/// its RFC 3339 twin; every other instant is RFC 3339 in UTC.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_time_in_an_answer_is_rfc3339() {
    use common::dead_letters::{dead_letter, numbered};
    let mut deprecated = deprecated_in_docs();
    deprecated.sort();
    let mut in_code: Vec<String> = warren::times::DEPRECATED_UNIX_KEYS.iter().map(|k| k.to_string()).collect();
    in_code.sort();
    assert_eq!(deprecated, in_code, "docs/api.md lists the deprecated unix keys the code writes");

    let vhost = TestVhost::create("times").await;
    let connection = vhost.connect().await;
    let channel = vhost.channel(&connection).await;
    dead_letter(&vhost, &channel, "work.dlq", false, numbered(3)).await;
    let toml = format!(
        "[[alerts]]\nid = \"dead\"\nname = \"Dead letters\"\nmetric = \"ready\"\ncomparator = \">\"\n\
         threshold = 0\nseverity = \"info\"\n\n\
         [[brokers]]\nname = \"local\"\nvhosts_include = [{:?}]\npoll_interval_secs = 1\n",
        vhost.name
    );
    let warren = Warren::start(&toml).await;
    let queue = format!("/api/v1/queues/local/{}/work.dlq", common::encode(&vhost.name));
    wait_for("the DLQ's alert firing", Duration::from_secs(60), || async {
        let (_, alerts) = warren.get_json("/api/v1/alerts").await;
        if alerts.as_array().is_some_and(|a| a.iter().any(|a| a["phase"] == "firing")) {
            Ok(())
        } else {
            Err(alerts.to_string())
        }
    })
    .await;
    let (status, token) = warren.post_json("/api/v1/tokens", serde_json::json!({"name": "ci", "role": "viewer"})).await;
    assert_eq!(status, 201, "{token}");
    warren.snapshot(&vhost.name, "work.dlq", 3).await;
    let until = chrono::Utc::now() + chrono::Duration::hours(1);
    let (status, body) = warren
        .post_json("/api/v1/silences", serde_json::json!({"rule_id": "dead", "until": until, "comment": "times"}))
        .await;
    assert_eq!(status, 201, "{body}");
    let (_, audit) = warren.get_json("/api/v1/audit").await;
    let entry = audit[0]["id"].as_i64().expect("an audit entry");

    let gets = [
        "/api/v1/me".to_string(),
        "/api/v1/users".to_string(),
        "/api/v1/tokens".to_string(),
        "/api/v1/brokers".to_string(),
        "/api/v1/brokers/local".to_string(),
        "/api/v1/brokers/local/history?range=15m".to_string(),
        "/api/v1/brokers/local/nodes".to_string(),
        "/api/v1/brokers/local/connections".to_string(),
        "/api/v1/brokers/local/channels".to_string(),
        "/api/v1/brokers/local/exchanges".to_string(),
        "/api/v1/queues".to_string(),
        "/api/v1/queues?cursor=".to_string(),
        queue.clone(),
        format!("{queue}/history?range=15m"),
        format!("{queue}/history?range=7d"),
        format!("{queue}/consumers"),
        format!("{queue}/routing"),
        format!("{queue}/snapshot"),
        "/api/v1/audit".to_string(),
        "/api/v1/audit?cursor=".to_string(),
        format!("/api/v1/audit/{entry}/messages"),
        "/api/v1/alerts".to_string(),
        "/api/v1/alerts/history".to_string(),
        "/api/v1/alerts/rules".to_string(),
        "/api/v1/silences".to_string(),
        "/api/v1/notifications/channels".to_string(),
        "/api/v1/notifications/deliveries".to_string(),
    ];
    let mut checked = 0;
    for path in &gets {
        let (status, body) = warren.get_json(path).await;
        assert_eq!(status, 200, "GET {path}: {body}");
        checked += check_times(&format!("GET {path}"), &body, &deprecated);
    }
    // The node's history names the node the nodes listing gives.
    let (_, nodes) = warren.get_json("/api/v1/brokers/local/nodes").await;
    if let Some(node) = nodes["nodes"][0]["name"].as_str() {
        let path = format!("/api/v1/brokers/local/nodes/{}/history?range=15m", common::encode(node));
        let (status, body) = warren.get_json(&path).await;
        assert_eq!(status, 200, "GET {path}: {body}");
        checked += check_times(&path, &body, &deprecated);
    }
    assert!(checked > 50, "{checked} times checked");
    warren.stop().await;
}
