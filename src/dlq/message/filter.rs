//! The filter over dead letters: its fields (and the form fields and query they travel in), the
//! checks that refuse one that cannot be, and what it matches, over a message's summary; the
//! same meanings as custody's SQL (`dlq::custody`).

use serde::Serialize;
use serde_json::Value;

use super::payload::payload_bytes;
use super::summary::{error_group, error_line, SnapshotMessage};
use crate::dlq::budget::{Check, Stopped};
use crate::dlq::expression::Expression;

/// A filter over dead-lettered messages: by original queue, by reason, by the application's
/// error, by text, a header's value, a value in a JSON payload, or a regular expression. Empty
/// fields match everything. Used by the browser over a snapshot, by the mover over a whole
/// queue ("requeue all matching"), and in SQL over custody (`dlq::custody`), which means the
/// same.
#[derive(Debug, Clone, Default, PartialEq, serde::Deserialize, Serialize, utoipa::ToSchema, utoipa::IntoParams)]
#[schema(as = MessageFilter)]
pub struct Filter {
    #[serde(default)]
    pub reason: Option<String>,
    #[serde(default, alias = "original")]
    pub original_queue: Option<String>,
    #[serde(default)]
    pub text: Option<String>,
    /// Part of the error the application recorded (`error_line`), case-insensitive.
    #[serde(default)]
    pub error: Option<String>,
    /// The group of the error (`error_group`: its type and its message's fingerprint), exactly:
    /// every message of one cause, whatever order number or id its text holds.
    #[serde(default)]
    pub error_group: Option<String>,
    /// A header, by its exact name: present (no `header_value`), or with part of its value,
    /// case-insensitive (a value that is not a string compares as its JSON text).
    #[serde(default)]
    pub header: Option<String>,
    #[serde(default)]
    pub header_value: Option<String>,
    /// A path into a JSON payload (`order.items[0].sku`): present (no `json_value`), or with
    /// exactly this value (a string as it is, anything else as its JSON text).
    #[serde(default)]
    pub json_path: Option<String>,
    #[serde(default)]
    pub json_value: Option<String>,
    /// A regular expression (Rust syntax; `(?i)` ignores case) over the payload and over the
    /// properties as JSON, headers included.
    #[serde(default)]
    pub regex: Option<String>,
    /// `regex`, compiled once per filter.
    #[serde(skip)]
    compiled: CompiledRegex,
}

/// A filter's compiled regular expression: built at its first use, so that `Filter` stays a
/// plain value that (de)serializes and compares by its fields.
#[derive(Debug, Clone, Default)]
struct CompiledRegex(std::sync::Arc<std::sync::OnceLock<Option<Expression>>>);

impl PartialEq for CompiledRegex {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

/// The longest value of a filter's field, in bytes: a header name or a queue name is at most
/// 255 (AMQP's short string), and a search text or expression longer than this is not one a
/// person wrote. SQLite refuses a LIKE pattern over 50,000 bytes with an error of its own.
pub const FILTER_FIELD_MAX_BYTES: usize = 4096;

/// One step of a JSON path (the store's type: custody's search hands it to SQL).
pub use crate::storage::custody::PathStep;

/// Reads `order.items[0].sku` (a leading `$.` or `$` is allowed). Keys are what lies between
/// the dots; a `"` in a key cannot be written in SQLite's path syntax, and is refused.
pub fn parse_json_path(path: &str) -> Result<Vec<PathStep>, String> {
    let path = path.trim();
    let rest = path.strip_prefix('$').unwrap_or(path);
    let rest = rest.strip_prefix('.').unwrap_or(rest);
    let mut steps = Vec::new();
    if rest.is_empty() {
        return Err("json path: name at least one key, as in order.items[0].sku".to_string());
    }
    for part in rest.split('.') {
        let (key, mut indexes) = match part.find('[') {
            Some(i) => (&part[..i], &part[i..]),
            None => (part, ""),
        };
        if key.contains('"') || key.contains(']') {
            return Err(format!("json path: {key:?} cannot be a key (no \" or ])"));
        }
        if key.is_empty() && indexes.is_empty() {
            return Err(format!("json path: an empty key in {path:?}"));
        }
        if !key.is_empty() {
            steps.push(PathStep::Key(key.to_string()));
        }
        while !indexes.is_empty() {
            let close = indexes.find(']').ok_or_else(|| format!("json path: [ without ] in {path:?}"))?;
            let index: usize = indexes[1..close]
                .parse()
                .map_err(|_| format!("json path: [{}] is not an index", &indexes[1..close]))?;
            steps.push(PathStep::Index(index));
            indexes = &indexes[close + 1..];
            if !indexes.is_empty() && !indexes.starts_with('[') {
                return Err(format!("json path: {part:?} continues after ]: separate keys with ."));
            }
        }
    }
    Ok(steps)
}

/// A JSON value as the filters compare it: a string as it is, anything else as its JSON text.
pub fn json_text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// The form fields a filter travels in (`filter_<name>`), with its query names.
const FORM_FIELDS: [&str; 10] = [
    "reason",
    "original",
    "text",
    "error",
    "error_group",
    "header",
    "header_value",
    "json_path",
    "json_value",
    "regex",
];

impl Filter {
    fn field(value: &Option<String>) -> Option<&str> {
        value.as_deref().map(str::trim).filter(|s| !s.is_empty())
    }

    fn slot(&mut self, name: &str) -> Option<&mut Option<String>> {
        Some(match name {
            "reason" => &mut self.reason,
            "original" => &mut self.original_queue,
            "text" => &mut self.text,
            "error" => &mut self.error,
            "error_group" => &mut self.error_group,
            "header" => &mut self.header,
            "header_value" => &mut self.header_value,
            "json_path" => &mut self.json_path,
            "json_value" => &mut self.json_value,
            "regex" => &mut self.regex,
            _ => return None,
        })
    }

    /// The value of a field by its query name (`reason`, `original`, ...), or "": for forms.
    pub fn value(&self, name: &str) -> &str {
        let v = match name {
            "reason" => &self.reason,
            "original" => &self.original_queue,
            "text" => &self.text,
            "error" => &self.error,
            "error_group" => &self.error_group,
            "header" => &self.header,
            "header_value" => &self.header_value,
            "json_path" => &self.json_path,
            "json_value" => &self.json_value,
            "regex" => &self.regex,
            _ => return "",
        };
        v.as_deref().unwrap_or_default()
    }

    /// The set fields as hidden form fields (`filter_<name>`, value): what a form carries to
    /// its confirmation and back.
    pub fn form_fields(&self) -> Vec<(String, String)> {
        FORM_FIELDS
            .iter()
            .filter(|name| !self.value(name).is_empty())
            .map(|name| (format!("filter_{name}"), self.value(name).to_string()))
            .collect()
    }

    /// The set fields as a query string (`reason=...&regex=...`), for links.
    pub fn query(&self) -> String {
        const QUERY: &percent_encoding::AsciiSet =
            &percent_encoding::NON_ALPHANUMERIC.remove(b'-').remove(b'_').remove(b'.').remove(b'~');
        FORM_FIELDS
            .iter()
            .filter(|name| !self.value(name).is_empty())
            .map(|name| format!("{name}={}", percent_encoding::utf8_percent_encode(self.value(name), QUERY)))
            .collect::<Vec<_>>()
            .join("&")
    }

    /// Sets the field a form's `filter_<name>` names; false when `key` names none.
    pub fn set_form_field(&mut self, key: &str, value: String) -> bool {
        let Some(name) = key.strip_prefix("filter_") else { return false };
        match self.slot(name) {
            Some(slot) => {
                *slot = Some(value);
                self.compiled = CompiledRegex::default();
                true
            }
            None => false,
        }
    }

    /// A clear error for what cannot be a filter: a regular expression that does not compile
    /// (or is too large), a JSON path that does not parse, a value without what it is of.
    pub fn check(&self) -> Result<(), String> {
        for name in FORM_FIELDS {
            let value = self.value(name);
            if value.len() > FILTER_FIELD_MAX_BYTES {
                return Err(format!(
                    "{}: {} bytes; a filter's field is at most {FILTER_FIELD_MAX_BYTES}",
                    name.replace('_', " "),
                    value.len()
                ));
            }
            // SQLite ends a LIKE pattern and a JSON path at a NUL; an expression says \x00.
            if value.contains('\0') {
                let hint = if name == "regex" { " (write \\x00 to match one)" } else { "" };
                return Err(format!("{}: holds a NUL character{hint}", name.replace('_', " ")));
            }
        }
        if let Some(pattern) = Self::field(&self.regex) {
            Expression::compile(pattern)?;
        }
        if let Some(path) = Self::field(&self.json_path) {
            parse_json_path(path)?;
        } else if Self::field(&self.json_value).is_some() {
            return Err("json value: name the json path it is at".to_string());
        }
        if Self::field(&self.header).is_none() && Self::field(&self.header_value).is_some() {
            return Err("header value: name the header it is in".to_string());
        }
        Ok(())
    }

    /// The JSON path, parsed; None when none is set or it does not parse (see `check`).
    pub fn json_steps(&self) -> Option<Vec<PathStep>> {
        parse_json_path(Self::field(&self.json_path)?).ok()
    }

    /// The set regular expression, compiled (None when none is set; one that does not compile
    /// matches nothing: `check` refuses it first).
    pub fn regex(&self) -> Option<Option<&Expression>> {
        let pattern = Self::field(&self.regex)?;
        Some(self.compiled.0.get_or_init(|| Expression::compile(pattern).ok()).as_ref())
    }

    /// Texts of which every match of the set regular expression starts with one (as bytes, so
    /// also in the text it is matched against), for a cheap first look in SQL before the
    /// expression runs on a row; `None` when no such texts are known (`.*x`, say, or too many).
    pub fn regex_literals(&self) -> Option<Vec<String>> {
        use regex_syntax::hir::literal::Extractor;
        let pattern = Self::field(&self.regex)?;
        let hir = regex_syntax::ParserBuilder::new().utf8(false).build().parse(pattern).ok()?;
        let seq = Extractor::new().extract(&hir);
        let literals = seq.literals()?;
        if literals.is_empty() || literals.len() > 8 {
            return None;
        }
        literals
            .iter()
            .map(|l| String::from_utf8(l.as_bytes().to_vec()).ok().filter(|t| !t.is_empty() && !t.contains('\0')))
            .collect()
    }

    /// The trimmed header name, header value part, JSON value (for `dlq::custody`'s SQL).
    pub fn header_name(&self) -> Option<&str> {
        Self::field(&self.header)
    }
    pub fn header_part(&self) -> Option<&str> {
        Self::field(&self.header_value)
    }
    pub fn json_expected(&self) -> Option<&str> {
        Self::field(&self.json_value)
    }

    /// A filter on text in the payload or the headers alone.
    pub fn with_text(text: &str) -> Filter {
        Filter { text: Some(text.to_string()), ..Filter::default() }
    }

    /// A filter on part of the application's error alone.
    pub fn with_error(error: &str) -> Filter {
        Filter { error: Some(error.to_string()), ..Filter::default() }
    }

    /// Whether it searches payloads or headers (text, header, JSON path, regex), which some
    /// roles may not read (`CustodyRule::payloads`).
    pub fn reads_content(&self) -> bool {
        ["text", "header", "header_value", "json_path", "json_value", "regex"]
            .iter()
            .any(|f| !self.value(f).trim().is_empty())
    }

    /// Whether it searches what a role below a queue's payload role may not read: payloads,
    /// headers, or the application's error, which is read from the headers (issue 29).
    pub fn searches_content(&self) -> bool {
        self.reads_content() || ["error", "error_group"].iter().any(|f| !self.value(f).trim().is_empty())
    }

    /// The filter without what searches payloads and headers.
    pub fn without_content(&self) -> Filter {
        Filter {
            reason: self.reason.clone(),
            original_queue: self.original_queue.clone(),
            error: self.error.clone(),
            error_group: self.error_group.clone(),
            ..Filter::default()
        }
    }

    /// True when no field restricts anything.
    pub fn is_empty(&self) -> bool {
        FORM_FIELDS.iter().all(|name| self.value(name).trim().is_empty())
    }

    pub fn matches(&self, m: &SnapshotMessage) -> bool {
        self.matches_within(m, None).unwrap_or(false)
    }

    /// `matches`, a regular expression checking `check` as it reads (none: it reads to the end).
    pub fn matches_within(&self, m: &SnapshotMessage, check: Option<&Check>) -> Result<bool, Stopped> {
        if let Some(reason) = Self::field(&self.reason) {
            if m.reason.as_deref() != Some(reason) {
                return Ok(false);
            }
        }
        if let Some(queue) = Self::field(&self.original_queue) {
            if m.original_queue.as_deref() != Some(queue) {
                return Ok(false);
            }
        }
        if let Some(needle) = Self::field(&self.error) {
            let line = error_line(m).unwrap_or_default().to_lowercase();
            if !line.contains(&needle.to_lowercase()) {
                return Ok(false);
            }
        }
        if let Some(group) = Self::field(&self.error_group) {
            if error_group(m).as_deref() != Some(group) {
                return Ok(false);
            }
        }
        if let Some(needle) = Self::field(&self.text) {
            let needle = needle.to_lowercase();
            let headers = m.message.properties.get("headers").map(Value::to_string).unwrap_or_default();
            let payload = String::from_utf8_lossy(&payload_bytes(&m.message)).to_lowercase();
            if !payload.contains(&needle) && !headers.to_lowercase().contains(&needle) {
                return Ok(false);
            }
        }
        if let Some(name) = self.header_name() {
            let value = m.message.properties.get("headers").and_then(|h| h.get(name));
            match (value, self.header_part()) {
                (None, _) => return Ok(false),
                (Some(v), Some(part)) if !json_text(v).to_lowercase().contains(&part.to_lowercase()) => {
                    return Ok(false)
                }
                _ => {}
            }
        }
        if Self::field(&self.json_path).is_some() {
            let Some(steps) = self.json_steps() else { return Ok(false) };
            let Ok(payload) = serde_json::from_slice::<Value>(&payload_bytes(&m.message)) else { return Ok(false) };
            let found = steps.iter().try_fold(&payload, |v, step| match step {
                PathStep::Key(k) => v.get(k),
                PathStep::Index(i) => v.get(i),
            });
            match (found, self.json_expected()) {
                (None, _) => return Ok(false),
                (Some(v), Some(expected)) if json_text(v) != expected => return Ok(false),
                _ => {}
            }
        }
        if let Some(regex) = self.regex() {
            let Some(regex) = regex else { return Ok(false) };
            let properties = Value::Object(m.message.properties.clone()).to_string();
            if !regex.searcher().in_record(&payload_bytes(&m.message), properties.as_bytes(), check)? {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// The filter in words, for confirmation pages and the audit log.
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        if let Some(v) = Self::field(&self.original_queue) {
            parts.push(format!("original queue {v:?}"));
        }
        if let Some(v) = Self::field(&self.reason) {
            parts.push(format!("reason {v:?}"));
        }
        if let Some(v) = Self::field(&self.text) {
            parts.push(format!("text {v:?} in payload or headers"));
        }
        if let Some(v) = Self::field(&self.error) {
            parts.push(format!("application error containing {v:?}"));
        }
        if let Some(v) = Self::field(&self.error_group) {
            parts.push(format!("application error of the group {v:?}"));
        }
        match (self.header_name(), self.header_part()) {
            (Some(h), Some(v)) => parts.push(format!("header {h:?} containing {v:?}")),
            (Some(h), None) => parts.push(format!("header {h:?} present")),
            _ => {}
        }
        match (Self::field(&self.json_path), self.json_expected()) {
            (Some(p), Some(v)) => parts.push(format!("JSON {p} = {v:?}")),
            (Some(p), None) => parts.push(format!("JSON {p} present")),
            _ => {}
        }
        if let Some(v) = Self::field(&self.regex) {
            parts.push(format!("regex {v:?} in payload or properties"));
        }
        if parts.is_empty() {
            "every message".to_string()
        } else {
            parts.join(", ")
        }
    }
}

#[cfg(test)]
mod tests {
    use base64::Engine;

    use super::*;
    use crate::broker::management::PeekedMessage;
    use crate::dlq::message::fixtures::peeked;
    use crate::dlq::message::summary::summarize;

    #[test]
    fn a_regex_names_the_texts_its_matches_start_with_when_it_can() {
        let literals =
            |pattern: &str| Filter { regex: Some(pattern.to_string()), ..Filter::default() }.regex_literals();
        assert_eq!(literals(r#""order": 4242\b"#), Some(vec![r#""order": 4242"#.to_string()]));
        assert_eq!(literals("card (declined|refused)"), Some(vec!["card declined".into(), "card refused".into()]));
        for unknown in [".*x", "(?i)acme-eu", r"(?-u)\xff\xfe", "a?", "[0-9]+", "x\x00y"] {
            let found = literals(unknown);
            assert!(
                found.as_ref().is_none_or(|l| l.iter().all(|t| !t.is_empty() && !t.contains('\0'))),
                "{unknown}: {found:?}"
            );
        }
        assert_eq!(literals(".*x"), None);
        assert_eq!(literals(r"(?-u)\xff\xfe"), None, "not text: no LIKE can look for it");
    }

    fn filter(fields: &[(&str, &str)]) -> Filter {
        let mut f = Filter::default();
        for (k, v) in fields {
            assert!(f.set_form_field(&format!("filter_{k}"), v.to_string()), "{k}");
        }
        f
    }

    /// Issue 31, must-have 6: one group however many order numbers; the group filter takes them
    /// all, and only them, and is a content filter.
    #[test]
    fn the_error_group_filter_takes_every_variant_of_one_cause() {
        let spring = |order: u32, kind: &str| {
            let trace = format!(
                "org.springframework.amqp.rabbit.support.ListenerExecutionFailedException: Listener method threw\n\
                 Caused by: {kind}: customer of order {order} is null\n\tat a.B(B.java:1)"
            );
            summarize(1, String::new(), peeked(serde_json::json!({"x-exception-stacktrace": trace}), "{}"))
        };
        let group = error_group(&spring(1, "java.lang.NullPointerException")).unwrap();
        assert_eq!(group, "java.lang.NullPointerException: customer of order <n> is null");
        let f = filter(&[("error_group", &group)]);
        assert!((1..50).all(|n| f.matches(&spring(n, "java.lang.NullPointerException"))));
        assert!(!f.matches(&spring(1, "java.lang.IllegalStateException")));
        assert!(f.searches_content() && !f.reads_content());
        assert_eq!(
            f.query(),
            "error_group=java.lang.NullPointerException%3A%20customer%20of%20order%20%3Cn%3E%20is%20null"
        );
        assert!(f.describe().contains("group"));
    }

    /// Issue 18, must-have 3: a header's value, a path into a JSON payload, a regular
    /// expression; the same meanings as custody's SQL (tests/custody.rs checks that side).
    #[test]
    fn filters_by_header_json_path_and_regex() {
        let message = |headers: Value, payload: &[u8]| {
            let (payload, encoding) = match std::str::from_utf8(payload) {
                Ok(text) => (text.to_string(), "string"),
                Err(_) => (base64::engine::general_purpose::STANDARD.encode(payload), "base64"),
            };
            summarize(
                1,
                String::new(),
                PeekedMessage {
                    properties: serde_json::json!({"message_id": "m-1", "headers": headers})
                        .as_object()
                        .unwrap()
                        .clone(),
                    payload_bytes: payload.len() as u64,
                    payload,
                    payload_encoding: encoding.to_string(),
                    exchange: String::new(),
                    routing_key: String::new(),
                    redelivered: false,
                },
            )
        };
        let json = message(
            serde_json::json!({"x-tenant": "Acme-EU", "x-retries": 3, "x-flag": true}),
            br#"{"order": {"sku": "SKU-3", "qty": 12, "tags": ["a", "b"]}, "ok": true, "none": null}"#,
        );
        let binary = message(serde_json::json!({"x-tenant": "globex"}), &[0x80, 0xff, 0xfe, b'z']);
        let both = |f: &Filter| (f.matches(&json), f.matches(&binary));

        assert_eq!(both(&filter(&[("header", "x-tenant"), ("header_value", "acme")])), (true, false));
        assert_eq!(both(&filter(&[("header", "x-tenant")])), (true, true));
        assert_eq!(both(&filter(&[("header", "X-Tenant")])), (false, false), "names are exact");
        assert_eq!(both(&filter(&[("header", "x-retries"), ("header_value", "3")])), (true, false));
        assert_eq!(both(&filter(&[("header", "x-flag"), ("header_value", "TRUE")])), (true, false));

        assert_eq!(both(&filter(&[("json_path", "order.sku"), ("json_value", "SKU-3")])), (true, false));
        assert_eq!(both(&filter(&[("json_path", "order.sku"), ("json_value", "sku-3")])), (false, false), "exact");
        assert_eq!(both(&filter(&[("json_path", "$.order.qty"), ("json_value", "12")])), (true, false));
        assert_eq!(both(&filter(&[("json_path", "order.tags[1]"), ("json_value", "b")])), (true, false));
        assert_eq!(both(&filter(&[("json_path", "order.tags"), ("json_value", r#"["a","b"]"#)])), (true, false));
        assert_eq!(both(&filter(&[("json_path", "ok"), ("json_value", "true")])), (true, false));
        assert_eq!(both(&filter(&[("json_path", "none"), ("json_value", "null")])), (true, false));
        assert_eq!(both(&filter(&[("json_path", "none")])), (true, false), "present, though null");
        assert_eq!(both(&filter(&[("json_path", "order.missing")])), (false, false));

        assert_eq!(both(&filter(&[("regex", r"SKU-\d\b")])), (true, false));
        assert_eq!(both(&filter(&[("regex", r"(?-u)\xff\xfe")])), (false, true), "bytes, not only UTF-8");
        assert_eq!(both(&filter(&[("regex", "(?i)GLOBEX")])), (false, true), "the headers too");
        assert_eq!(
            both(&filter(&[("regex", "SKU"), ("header", "x-tenant"), ("header_value", "globex")])),
            (false, false)
        );
    }

    #[test]
    fn a_filter_that_cannot_be_is_refused_with_its_reason() {
        assert!(filter(&[("regex", "(unclosed")]).check().unwrap_err().starts_with("regex:"));
        assert!(filter(&[("regex", &"a{1000}".repeat(200))]).check().is_err(), "too large a program");
        assert!(filter(&[("json_value", "1")]).check().is_err());
        assert!(filter(&[("header_value", "x")]).check().is_err());
        for bad in ["a..b", "a[x]", "a[1", "\"q\"", "a[0]b", "$", ""] {
            assert!(parse_json_path(bad).is_err(), "{bad:?}");
        }
        let steps = parse_json_path("$.order.items[0][2].sku").unwrap();
        let key = |k: &str| PathStep::Key(k.to_string());
        assert_eq!(steps, [key("order"), key("items"), PathStep::Index(0), PathStep::Index(2), key("sku")]);
        assert_eq!(parse_json_path("[3].a").unwrap(), [PathStep::Index(3), key("a")]);
        // A regex that does not compile matches nothing where `check` was skipped.
        let bad = filter(&[("regex", "(")]);
        assert!(!bad.matches(&summarize(
            1,
            String::new(),
            PeekedMessage {
                properties: Default::default(),
                payload: "(".into(),
                payload_encoding: "string".into(),
                payload_bytes: 1,
                exchange: String::new(),
                routing_key: String::new(),
                redelivered: false,
            }
        )));
    }

    #[test]
    fn a_filter_is_bounded_before_it_reaches_sql() {
        let long = "x".repeat(50_000);
        for name in FORM_FIELDS {
            let mut f = filter(&[("header", "h"), ("json_path", "a")]);
            f.set_form_field(&format!("filter_{name}"), long.clone());
            let why = f.check().unwrap_err();
            assert!(why.contains("at most 4096"), "{name}: {why}");
        }
        assert!(filter(&[("text", &"x".repeat(FILTER_FIELD_MAX_BYTES))]).check().is_ok(), "up to the limit");
        let why = filter(&[("json_path", "a\0b")]).check().unwrap_err();
        assert_eq!(why, "json path: holds a NUL character");
        assert!(filter(&[("text", "a\0")]).check().unwrap_err().contains("NUL"));
        assert!(filter(&[("regex", "a\0")]).check().unwrap_err().contains("\\x00"));
        assert!(filter(&[("regex", r"a\x00")]).check().is_ok());
    }

    #[test]
    fn a_filter_travels_in_form_fields_and_back() {
        let f = filter(&[("reason", "rejected"), ("json_path", "a.b"), ("regex", "x+")]);
        let mut back = Filter::default();
        for (k, v) in f.form_fields() {
            assert!(back.set_form_field(&k, v));
        }
        assert_eq!(back, f);
        assert!(!back.set_form_field("filter_nonsense", "x".into()));
        assert!(!back.set_form_field("reason", "x".into()), "only filter_ fields");
        assert!(Filter::default().form_fields().is_empty() && Filter::default().is_empty());
        assert_eq!(f.query(), "reason=rejected&json_path=a.b&regex=x%2B");
        assert_eq!(f.describe(), r#"reason "rejected", JSON a.b present, regex "x+" in payload or properties"#);
    }
}
