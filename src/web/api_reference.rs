//! The API reference of the docs (issue 34, must-have 1): `docs/api-reference.md` introduces
//! it, and `/docs/api-reference` appends every operation and schema of the OpenAPI description
//! that `/api/v1/openapi.json` serves (`openapi::document`), as Markdown rendered like every
//! other page. Built from the same description per request, so it cannot drift from the API.

use serde_json::Value;

/// The docs page this is appended to, by its file name without `.md`.
pub const PAGE: &str = "api-reference";

/// Every operation (its parameters, request body and answers), then every schema, of `doc`.
pub fn markdown(doc: &utoipa::openapi::OpenApi) -> String {
    let doc = serde_json::to_value(doc).expect("an OpenAPI description serialises");
    let mut out = String::from("\n## Operations\n\n");
    for (path, item) in doc["paths"].as_object().into_iter().flatten() {
        for method in ["get", "post", "put", "patch", "delete"] {
            if let Some(op) = item.get(method) {
                operation(&mut out, method, path, op);
            }
        }
    }
    out.push_str("## Schemas\n\n");
    for (name, schema) in doc["components"]["schemas"].as_object().into_iter().flatten() {
        out.push_str(&format!("### {name}\n\n"));
        if let Some(text) = schema["description"].as_str() {
            out.push_str(&format!("{}\n\n", one_line(text)));
        }
        let Some(properties) = schema["properties"].as_object() else {
            out.push_str(&format!("{}.\n\n", type_of(schema)));
            continue;
        };
        let required: Vec<&str> =
            schema["required"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
        out.push_str("| field | type | required | description |\n|---|---|---|---|\n");
        for (field, property) in properties {
            let description = property["description"].as_str().map(one_line).unwrap_or_default();
            let needed = if required.contains(&field.as_str()) { "yes" } else { "no" };
            out.push_str(&format!(
                "| `{field}` | {} | {needed} | {} |\n",
                cell(&type_of(property)),
                cell(&description)
            ));
        }
        out.push('\n');
    }
    out
}

fn operation(out: &mut String, method: &str, path: &str, op: &Value) {
    out.push_str(&format!("### {} {path}\n\n", method.to_uppercase()));
    for key in ["summary", "description"] {
        if let Some(text) = op[key].as_str().filter(|t| !t.trim().is_empty()) {
            out.push_str(&format!("{}\n\n", one_line(text)));
        }
    }
    let parameters = op["parameters"].as_array().into_iter().flatten().collect::<Vec<_>>();
    if !parameters.is_empty() {
        out.push_str("| parameter | in | type | required | description |\n|---|---|---|---|---|\n");
        for p in parameters {
            let needed = if p["required"].as_bool() == Some(true) { "yes" } else { "no" };
            out.push_str(&format!(
                "| `{}` | {} | {} | {needed} | {} |\n",
                p["name"].as_str().unwrap_or_default(),
                p["in"].as_str().unwrap_or_default(),
                cell(&type_of(&p["schema"])),
                cell(&p["description"].as_str().map(one_line).unwrap_or_default()),
            ));
        }
        out.push('\n');
    }
    if let Some(content) = op["requestBody"]["content"].as_object() {
        let bodies: Vec<String> =
            content.iter().map(|(kind, c)| format!("{} as `{kind}`", type_of(&c["schema"]))).collect();
        out.push_str(&format!("Request body: {}.\n\n", bodies.join("; ")));
    }
    if let Some(responses) = op["responses"].as_object() {
        out.push_str("| answer | description | body |\n|---|---|---|\n");
        for (status, response) in responses {
            let bodies: Vec<String> = response["content"]
                .as_object()
                .into_iter()
                .flatten()
                .map(|(kind, c)| format!("{} as `{kind}`", type_of(&c["schema"])))
                .collect();
            let description = response["description"].as_str().map(one_line).unwrap_or_default();
            out.push_str(&format!("| {status} | {} | {} |\n", cell(&description), cell(&bodies.join("; "))));
        }
        out.push('\n');
    }
}

/// A schema in a few words: a named schema, a type (`integer or null`), an array of one, or
/// the values of an enum.
fn type_of(schema: &Value) -> String {
    if let Some(reference) = schema["$ref"].as_str() {
        let name = reference.rsplit('/').next().unwrap_or(reference);
        return format!("[{name}](#{})", name.to_lowercase());
    }
    if let Some(values) = schema["enum"].as_array() {
        let values: Vec<String> =
            values.iter().map(|v| format!("`{}`", v.as_str().unwrap_or(&v.to_string()))).collect();
        return format!("one of {}", values.join(", "));
    }
    for key in ["oneOf", "anyOf", "allOf"] {
        if let Some(parts) = schema[key].as_array() {
            let joiner = if key == "allOf" { " and " } else { " or " };
            return parts.iter().map(type_of).collect::<Vec<_>>().join(joiner);
        }
    }
    let kind = match &schema["type"] {
        Value::String(t) => t.clone(),
        Value::Array(types) => types.iter().filter_map(Value::as_str).collect::<Vec<_>>().join(" or "),
        _ => return "any JSON value".to_string(),
    };
    if kind.starts_with("array") {
        return format!("{kind} of {}", type_of(&schema["items"]));
    }
    match schema["format"].as_str() {
        Some(format) => format!("{kind} ({format})"),
        None => kind,
    }
}

/// A description on one line, as a table cell needs it, without the code's own links.
fn one_line(text: &str) -> String {
    without_code_links(&text.split_whitespace().collect::<Vec<_>>().join(" "))
}

/// `text` with each Markdown link whose target is not a web address (the doc comments' links
/// to Rust items, whose targets are module paths) reduced to its label: as a link it would
/// point nowhere, and outside the base path behind a proxy. (Such a path is not written here:
/// tests/layers.rs reads the paths of comments too, as rustdoc's links are imports.)
fn without_code_links(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(open) = rest.find('[') {
        let after = &rest[open + 1..];
        let link = after.find("](").and_then(|close| {
            let (label, target) = (&after[..close], &after[close + 2..]);
            let end = target.find(')')?;
            let web = target.starts_with("http://") || target.starts_with("https://");
            (!label.contains('[') && !web && !target[..end].contains(' ')).then_some((label, &target[end + 1..]))
        });
        match link {
            Some((label, next)) => {
                out.push_str(&rest[..open]);
                out.push_str(label);
                rest = next;
            }
            None => {
                out.push_str(&rest[..=open]);
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

/// Text for a table cell: a `|` would end the cell.
fn cell(text: &str) -> String {
    text.replace('|', "\\|")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_to_rust_items_are_reduced_to_their_label() {
        assert_eq!(
            one_line("see [`ReplayRequest::accept_drop_head`](super::ReplayRequest::accept_drop_head) and [x](https://a.example/b)"),
            "see `ReplayRequest::accept_drop_head` and [x](https://a.example/b)"
        );
        assert_eq!(without_code_links("[a] [b](c d) [e"), "[a] [b](c d) [e");
    }

    #[test]
    fn every_operation_of_the_description_is_listed() {
        let doc = crate::web::openapi::document();
        let text = markdown(&doc);
        let json = serde_json::to_value(&doc).unwrap();
        for (path, item) in json["paths"].as_object().unwrap() {
            for method in
                item.as_object().unwrap().keys().filter(|m| ["get", "post", "put", "delete"].contains(&m.as_str()))
            {
                let heading = format!("### {} {path}\n", method.to_uppercase());
                assert!(text.contains(&heading), "{heading} in the reference");
            }
        }
        assert!(text.contains("### Error\n"), "the error schema");
    }

    #[test]
    fn types_read_in_words() {
        let t = |v: serde_json::Value| type_of(&v);
        assert_eq!(t(serde_json::json!({"type": ["integer", "null"], "format": "int64"})), "integer or null (int64)");
        assert_eq!(t(serde_json::json!({"$ref": "#/components/schemas/Error"})), "[Error](#error)");
        assert_eq!(t(serde_json::json!({"type": "array", "items": {"type": "string"}})), "array of string");
        assert_eq!(t(serde_json::json!({"enum": ["a", "b"]})), "one of `a`, `b`");
        assert_eq!(cell("a | b"), "a \\| b");
    }
}
