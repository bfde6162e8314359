//! What a dead letter says: its dead-letter headers decoded (where and why it died, how
//! often), the filter over them, and how its payload is shown. Pure: used by the browser over
//! a snapshot and by the mover over a whole queue.

use base64::Engine;
use serde::Serialize;
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use super::budget::{Check, Stopped};
pub use super::expression::Expression;
use super::framework::{self, App, AppError, Origin};
use crate::broker::management::PeekedMessage;

/// One message of a snapshot, with its dead-letter facts decoded.
#[derive(Debug, Clone, Serialize)]
pub struct SnapshotMessage {
    pub position: usize,
    /// What a selection names (`IdentityKey::token` of `identity`), so that a move takes the
    /// messages the user saw, wherever they are in the queue by then. Keyed, so that it says
    /// nothing about the content to a reader below the payload role (issue 29).
    pub fingerprint: String,
    /// Which message this is (`identity`): what the move compares with what it reads. Never
    /// shown: from a digest of the content, anyone could test a guessed payload against it.
    #[serde(skip)]
    pub identity: String,
    /// The `message_id` property, or else the id a framework's format holds (`app`).
    pub message_id: Option<String>,
    /// Where `message_id` was read, in words.
    pub message_id_from: Option<&'static str>,
    /// What a well-known framework's format says of it (task, attempt, arguments).
    pub app: Option<App>,
    /// Why the application gave up on it, where its framework recorded that in the headers.
    pub error: Option<AppError>,
    /// The queue whose dead-lettering brought it here, and why: the newest death (see
    /// `dlq::last_death_queue`), where a requeue sends it. A copy an application published into
    /// its error queue has no death: the queue its framework recorded (`app_origin`), and the
    /// reason `republished by the application`.
    pub original_queue: Option<String>,
    pub reason: Option<String>,
    /// Where the application says it came from, on a copy it republished itself.
    pub app_origin: Option<Origin>,
    /// Its deaths oldest first, one per (queue, reason) as `x-death` keeps them: the path it
    /// took (work -> wait -> work -> here), each step with how often.
    pub deaths: Vec<Death>,
    /// Where and why it died first (`x-first-death-*`): in a retry topology, a wait queue.
    pub first_death_queue: Option<String>,
    pub first_death_reason: Option<String>,
    /// Sum of the `count` of every `x-death` entry.
    pub death_count: i64,
    /// Unix seconds of the first death (`x-death` entry of the first-death queue).
    #[serde(flatten, serialize_with = "crate::times::first_death_at")]
    pub first_death_at: Option<i64>,
    pub routing_key: String,
    pub exchange: String,
    pub payload_bytes: u64,
    pub content_type: Option<String>,
    /// Quorum queues: how often it was delivered before (`x-delivery-count`).
    pub delivery_count: Option<i64>,
    /// Read at the queue's delivery limit, so not given back (the broker would have dropped
    /// it): the holding queue it is in now (`dlq::holding`).
    pub held_in: Option<String>,
    pub message: PeekedMessage,
}

/// One `x-death` entry.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Death {
    pub queue: String,
    pub reason: String,
    pub count: i64,
    /// Unix seconds of the first death for this (queue, reason).
    #[serde(flatten, serialize_with = "crate::times::time")]
    pub time: Option<i64>,
}

/// The reason of a copy an application published into an error queue itself.
pub const REPUBLISHED: &str = "republished by the application";

fn headers(m: &PeekedMessage) -> Option<&Map<String, Value>> {
    m.properties.get("headers").and_then(Value::as_object)
}

fn text(v: Option<&Value>) -> Option<String> {
    v.and_then(Value::as_str).map(str::to_string)
}

/// Decodes the dead-letter headers of one message.
pub fn summarize(position: usize, identity: String, message: PeekedMessage) -> SnapshotMessage {
    let h = headers(&message);
    let deaths: Vec<&Map<String, Value>> = h
        .and_then(|h| h.get("x-death"))
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_object).collect())
        .unwrap_or_default();
    let header = |name: &str| text(h.and_then(|h| h.get(name))).filter(|s| !s.is_empty());
    // `x-death` is newest first; `x-last-death-*` exist from 3.13 (DOMAIN.md §4).
    let original_queue = header("x-last-death-queue")
        .or_else(|| deaths.first().and_then(|d| text(d.get("queue"))))
        .or_else(|| header("x-first-death-queue"))
        .filter(|s| !s.is_empty());
    let reason = header("x-last-death-reason")
        .or_else(|| deaths.first().and_then(|d| text(d.get("reason"))))
        .or_else(|| header("x-first-death-reason"));
    let error = framework::error(h);
    // The body as it is already held (borrowed; decoded only where the broker gave base64), read
    // once for a framework's envelope and, on a dramatiq message without an error header, for
    // the traceback it keeps in its body. A copy of every body here broke custody's memory
    // ceiling before.
    let (app, error) = {
        let body = payload(&message);
        let app = framework::recognise(h, &body);
        let error = match error {
            None if app.as_ref().is_some_and(|a| a.framework == "dramatiq") => framework::body_error(&body),
            error => error,
        };
        (app, error)
    };
    // Only a message the broker never dead-lettered is read for the application's origin: the
    // broker's record of a death wins over headers anyone can set.
    let app_origin = if original_queue.is_none() && reason.is_none() { framework::origin(h) } else { None };
    let (original_queue, reason) = match &app_origin {
        Some(o) => (o.queue.clone(), Some(REPUBLISHED.to_string())),
        None if original_queue.is_none() && reason.is_none() && error.is_some() => {
            (None, Some(REPUBLISHED.to_string()))
        }
        None => (original_queue, reason),
    };
    let path: Vec<Death> = deaths
        .iter()
        .rev()
        .map(|d| Death {
            queue: text(d.get("queue")).unwrap_or_default(),
            reason: text(d.get("reason")).unwrap_or_default(),
            count: d.get("count").and_then(Value::as_i64).unwrap_or(0),
            time: d.get("time").and_then(Value::as_i64),
        })
        .collect();
    let first_death_queue = header("x-first-death-queue").or_else(|| deaths.last().and_then(|d| text(d.get("queue"))));
    let first_death_reason =
        header("x-first-death-reason").or_else(|| deaths.last().and_then(|d| text(d.get("reason"))));
    let first = deaths.iter().find(|d| text(d.get("queue")) == first_death_queue).or(deaths.last());
    let (message_id, message_id_from) = match text(message.properties.get("message_id")).filter(|s| !s.is_empty()) {
        Some(id) => (Some(id), Some("the message_id property")),
        None => match app.as_ref().and_then(|a| a.id.clone().map(|id| (id, a.id_from))) {
            Some((id, from)) => (Some(id), from),
            None => (None, None),
        },
    };
    SnapshotMessage {
        position,
        fingerprint: String::new(),
        identity,
        message_id,
        message_id_from,
        app,
        error,
        app_origin,
        deaths: path,
        // The counts come with the message, so anyone who can publish chooses them: saturate.
        death_count: deaths
            .iter()
            .filter_map(|d| d.get("count").and_then(Value::as_i64))
            .fold(0i64, i64::saturating_add),
        first_death_at: first.and_then(|d| d.get("time")).and_then(Value::as_i64),
        original_queue,
        reason,
        first_death_queue,
        first_death_reason,
        routing_key: message.routing_key.clone(),
        exchange: message.exchange.clone(),
        payload_bytes: message.payload_bytes,
        content_type: text(message.properties.get("content_type")),
        delivery_count: h.and_then(|h| h.get("x-delivery-count")).and_then(Value::as_i64),
        held_in: None,
        message,
    }
}

/// Headers the broker keeps for its own bookkeeping of one queue. They are not part of which
/// message it is (`identity`: a quorum queue raises `x-delivery-count` at every read before
/// 4.3 and `x-acquired-count` at every read from 4.3 on, DOMAIN.md §10), and they must not
/// travel with a copy: `x-delivery-count` (DOMAIN.md §8) would make a consumer that reads it for
/// its own retry decisions see deliveries the copy never had. The `x-death` family stays: it is
/// the message's history, and applications read it.
pub const BROKER_BOOKKEEPING_HEADERS: &[&str] = &["x-delivery-count", "x-acquired-count"];

/// Which message this is (issue 16, must-have 1): a digest of its whole payload and of its
/// properties as the mover shows them (message id, timestamps, every header, and so its death
/// history), leaving out what the broker changes between two reads of it
/// (`BROKER_BOOKKEEPING_HEADERS`).
/// Two messages alike in all of that are alike to the user too; a selection says how many of
/// each it wants. Internal: what users see is its `IdentityKey::token`.
pub fn identity(payload: &[u8], properties: &Map<String, Value>) -> String {
    let mut properties = properties.clone();
    if let Some(Value::Object(headers)) = properties.get_mut("headers") {
        for key in BROKER_BOOKKEEPING_HEADERS {
            headers.remove(*key);
        }
        // A message first read without headers gets a table holding only the count once given back.
        if headers.is_empty() {
            properties.remove("headers");
        }
    }
    let mut digest = Sha256::new();
    digest.update((payload.len() as u64).to_be_bytes());
    digest.update(payload);
    digest.update(Value::Object(properties).to_string().as_bytes());
    digest.finalize()[..16].iter().map(|b| format!("{b:02x}")).collect()
}

/// The key of the tokens a snapshot shows for its messages' identities. A bare digest of the
/// content would let a reader below the payload role confirm a guessed payload offline (a card
/// number from a small set, say); a token keyed with a secret of this installation says
/// nothing about the content. Kept in the database (`instance_keys`), so that a snapshot's
/// tokens survive a restart and a page opened before it still selects the same messages.
#[derive(Clone, Copy)]
pub struct IdentityKey([u8; 32]);

impl IdentityKey {
    pub fn new(key: [u8; 32]) -> IdentityKey {
        IdentityKey(key)
    }

    /// A key for this process only (tests, and until the stored one is read at start).
    pub fn random() -> IdentityKey {
        use rand::RngCore;
        let mut key = [0u8; 32];
        rand::rngs::OsRng.fill_bytes(&mut key);
        IdentityKey(key)
    }

    /// What a snapshot shows for the message with `identity`: HMAC-SHA256 under the key, 128
    /// bits in hex.
    pub fn token(&self, identity: &str) -> String {
        use hmac::Mac;
        let mut mac = hmac::Hmac::<Sha256>::new_from_slice(&self.0).expect("HMAC takes any key length");
        mac.update(identity.as_bytes());
        mac.finalize().into_bytes()[..16].iter().map(|b| format!("{b:02x}")).collect()
    }
}

impl std::fmt::Debug for IdentityKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("IdentityKey(..)")
    }
}

/// A filter over dead-lettered messages: by original queue, by reason, by the application's
/// error, by text, a header's value, a value in a JSON payload, or a regular expression. Empty
/// fields match everything. Used by the browser over a snapshot, by the mover over a whole
/// queue ("requeue all matching"), and in SQL over custody (`dlq::custody`), which means the
/// same.
#[derive(Debug, Clone, Default, PartialEq, serde::Deserialize, Serialize)]
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

/// One step of a JSON path.
#[derive(Debug, Clone, PartialEq)]
pub enum PathStep {
    Key(String),
    Index(usize),
}

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

/// The path as SQLite's JSON functions read it: `$."order"."items"[0]."sku"`.
pub fn sqlite_json_path(steps: &[PathStep]) -> String {
    let mut out = String::from("$");
    for step in steps {
        match step {
            PathStep::Key(k) => out.push_str(&format!(".\"{k}\"")),
            PathStep::Index(i) => out.push_str(&format!("[{i}]")),
        }
    }
    out
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

/// The error an application recorded on a message, as one line: `Type: message`.
pub fn error_line(m: &SnapshotMessage) -> Option<String> {
    let e = m.error.as_ref()?;
    match (&e.kind, &e.message) {
        (Some(kind), Some(message)) => Some(format!("{kind}: {message}")),
        (Some(one), None) | (None, Some(one)) => Some(one.clone()),
        (None, None) => None,
    }
}

/// The group of the error an application recorded: `framework::error_group` of its
/// `error_line`, what "By error" counts and the `error_group` filter matches.
pub fn error_group(m: &SnapshotMessage) -> Option<String> {
    error_line(m).map(|line| framework::error_group(&line))
}

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

/// The payload as bytes, borrowed where it is text (decoded where the broker had to use base64).
pub fn payload(m: &PeekedMessage) -> std::borrow::Cow<'_, [u8]> {
    if m.payload_encoding == "base64" {
        std::borrow::Cow::Owned(payload_bytes(m))
    } else {
        std::borrow::Cow::Borrowed(m.payload.as_bytes())
    }
}

/// The payload as bytes (decoding base64 where the broker had to use it).
pub fn payload_bytes(m: &PeekedMessage) -> Vec<u8> {
    if m.payload_encoding == "base64" {
        base64::engine::general_purpose::STANDARD.decode(&m.payload).unwrap_or_else(|_| m.payload.clone().into_bytes())
    } else {
        m.payload.clone().into_bytes()
    }
}

/// How to show a payload: pretty JSON, text, or a hex dump for binary.
pub fn render_payload(m: &PeekedMessage) -> (&'static str, String) {
    let bytes = payload_bytes(m);
    if let Ok(text) = std::str::from_utf8(&bytes) {
        // Valid JSON is laid out again in its own key order: `Value` would sort the keys, and
        // the order an application wrote them in is part of how people read it (issue 17, case 4).
        // Checked as a `Value`, not merely as JSON: `1e400` is JSON that no `Value` holds (the
        // fuzzer found it), and what is shown as JSON must parse as it is shown.
        if serde_json::from_str::<Value>(text).is_ok() {
            return ("json", indent_json(text));
        }
        if !text.chars().any(|c| c.is_control() && !matches!(c, '\n' | '\r' | '\t')) {
            return ("text", text.to_string());
        }
    }
    let mut dump = String::new();
    for (row, chunk) in bytes.chunks(16).enumerate() {
        let hex: Vec<String> = chunk.iter().map(|b| format!("{b:02x}")).collect();
        let ascii: String =
            chunk.iter().map(|&b| if b.is_ascii_graphic() || b == b' ' { b as char } else { '.' }).collect();
        dump.push_str(&format!("{:08x}  {:<48}  {ascii}\n", row * 16, hex.join(" ")));
    }
    ("hex", dump)
}

/// Lays out valid JSON text with two-space indents, keys in the order they are written. Only
/// whitespace outside strings changes.
fn indent_json(text: &str) -> String {
    let mut out = String::with_capacity(text.len() * 2);
    let mut depth = 0usize;
    let (mut in_string, mut escaped) = (false, false);
    let newline = |out: &mut String, depth: usize| {
        out.push('\n');
        out.push_str(&"  ".repeat(depth));
    };
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if in_string {
            out.push(c);
            match (escaped, c) {
                (true, _) => escaped = false,
                (false, '\\') => escaped = true,
                (false, '"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match c {
            '"' => {
                in_string = true;
                out.push(c);
            }
            '{' | '[' => {
                out.push(c);
                // An empty object or array stays on one line.
                while chars.peek().is_some_and(|c| c.is_whitespace()) {
                    chars.next();
                }
                if matches!(chars.peek(), Some('}' | ']')) {
                    out.push(chars.next().expect("peeked"));
                } else {
                    depth += 1;
                    newline(&mut out, depth);
                }
            }
            '}' | ']' => {
                depth = depth.saturating_sub(1);
                newline(&mut out, depth);
                out.push(c);
            }
            ',' => {
                out.push(c);
                newline(&mut out, depth);
            }
            ':' => out.push_str(": "),
            c if c.is_whitespace() => {}
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn decodes_recorded_dead_letter_headers() {
        for (name, queue) in
            [("get-dead-lettered-classic.json", "lab.work.c"), ("get-dead-lettered-quorum.json", "lab.work.q")]
        {
            let path = format!("{}/tests/fixtures/rabbitmq-3.10.8/{name}", env!("CARGO_MANIFEST_DIR"));
            let message: PeekedMessage = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
            let s = summarize(1, String::new(), message);
            assert_eq!(s.original_queue.as_deref(), Some(queue), "{name}");
            assert_eq!(s.reason.as_deref(), Some("rejected"));
            assert_eq!(s.death_count, 1);
            assert!(s.first_death_at.is_some());
            assert_eq!(render_payload(&s.message).0, "json");
        }
    }

    #[test]
    fn json_keeps_its_key_order_and_its_strings() {
        let text = r#"{"zeta": 1, "alpha": {"b": [1, {}, []], "a": "x, {y}: \"z\""}, "empty": {}}"#;
        let laid_out = indent_json(text);
        assert_eq!(
            laid_out,
            "{\n  \"zeta\": 1,\n  \"alpha\": {\n    \"b\": [\n      1,\n      {},\n      []\n    ],\n    \
             \"a\": \"x, {y}: \\\"z\\\"\"\n  },\n  \"empty\": {}\n}"
        );
        let again: Value = serde_json::from_str(&laid_out).unwrap();
        assert_eq!(again, serde_json::from_str::<Value>(text).unwrap(), "the same JSON");
    }

    /// A crash of the `message_render` fuzz target: a number past `f64` is JSON, and was shown
    /// as JSON that does not parse back; it is text.
    #[test]
    fn json_that_no_value_holds_is_shown_as_text() {
        let m = PeekedMessage {
            payload: "[3.3E333333]".to_string(),
            payload_encoding: "string".to_string(),
            payload_bytes: 12,
            ..serde_json::from_value(serde_json::json!({})).unwrap()
        };
        assert_eq!(render_payload(&m), ("text", "[3.3E333333]".to_string()));
    }

    /// Issue 17, case 4: a Celery message has no message_id property; its id is in a header.
    #[test]
    fn a_frameworks_id_stands_in_for_a_missing_message_id() {
        let message = |properties: Value, payload: &str| PeekedMessage {
            properties: properties.as_object().unwrap().clone(),
            payload: payload.to_string(),
            payload_encoding: "string".to_string(),
            payload_bytes: payload.len() as u64,
            exchange: String::new(),
            routing_key: String::new(),
            redelivered: false,
        };
        let celery = serde_json::json!({"correlation_id": "c-1", "headers": {"id": "c-1", "task": "t.charge"}});
        let s = summarize(1, String::new(), message(celery, "[[42], {}, {}]"));
        assert_eq!((s.message_id.as_deref(), s.message_id_from), (Some("c-1"), Some("the Celery id header")));
        assert_eq!(s.app.unwrap().kind.as_deref(), Some("t.charge"));
        let own = serde_json::json!({"message_id": "m-1", "headers": {"id": "c-1", "task": "t.charge"}});
        let s = summarize(1, String::new(), message(own, "{}"));
        assert_eq!(s.message_id.as_deref(), Some("m-1"), "the property wins");
    }

    #[test]
    fn a_token_says_nothing_of_the_identity_without_the_key() {
        let id = identity(b"{\"card\": \"4111-0001\"}", &Map::new());
        let (a, b) = (IdentityKey::new([1; 32]), IdentityKey::new([2; 32]));
        assert_eq!(a.token(&id), a.token(&id), "the same key gives the same token");
        assert_ne!(a.token(&id), b.token(&id), "another key, another token");
        assert_ne!(a.token(&id), id, "not the digest itself");
        assert_eq!(a.token(&id).len(), 32);
    }

    /// A message is the same message whatever the broker's delivery and acquired counts say,
    /// and another message as soon as its payload, its id or its death history differ.
    #[test]
    fn an_identity_ignores_the_brokers_counts_only() {
        let properties = |extra: serde_json::Value| {
            let mut headers = serde_json::json!({"x-death": [{"queue": "work", "reason": "rejected", "count": 1}]});
            headers.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
            serde_json::json!({"message_id": "m1", "headers": headers}).as_object().unwrap().clone()
        };
        let first = identity(b"{}", &properties(serde_json::json!({})));
        assert_eq!(first.len(), 32);
        assert_eq!(first, identity(b"{}", &properties(serde_json::json!({"x-delivery-count": 3}))));
        assert_eq!(first, identity(b"{}", &properties(serde_json::json!({"x-acquired-count": 2}))), "4.3's count");
        assert_eq!(
            first,
            identity(b"{}", &properties(serde_json::json!({"x-acquired-count": 5, "x-delivery-count": 1})))
        );
        let bare = serde_json::json!({"message_id": "m1"}).as_object().unwrap().clone();
        let counted = serde_json::json!({"message_id": "m1", "headers": {"x-delivery-count": 1}});
        assert_eq!(
            identity(b"{}", &bare),
            identity(b"{}", counted.as_object().unwrap()),
            "no headers, then only the count"
        );
        let acquired = serde_json::json!({"message_id": "m1", "headers": {"x-acquired-count": 1}});
        assert_eq!(identity(b"{}", &bare), identity(b"{}", acquired.as_object().unwrap()), "4.3: no headers, then");
        assert_ne!(first, identity(b"{ }", &properties(serde_json::json!({}))), "payload");
        assert_ne!(first, identity(b"{}", &properties(serde_json::json!({"x-first-death-queue": "work"}))));
        let mut other_id = properties(serde_json::json!({}));
        other_id.insert("message_id".into(), "m2".into());
        assert_ne!(first, identity(b"{}", &other_id), "message id");
    }

    /// Issue 16 (6): the snapshot shows the queue it last died in (where a requeue sends it)
    /// and, apart, where it died first.
    #[test]
    fn a_retried_message_shows_the_queue_it_last_died_in() {
        let properties = serde_json::json!({"headers": {
            "x-first-death-queue": "work.wait",
            "x-first-death-reason": "expired",
            "x-death": [
                {"queue": "work", "reason": "rejected", "count": 1, "time": 1700000100},
                {"queue": "work.wait", "reason": "expired", "count": 3, "time": 1700000000}
            ]
        }});
        let m = PeekedMessage {
            exchange: String::new(),
            routing_key: "final.dlq".into(),
            redelivered: false,
            payload_bytes: 0,
            payload_encoding: "string".into(),
            payload: String::new(),
            properties: properties.as_object().unwrap().clone(),
        };
        let s = summarize(1, String::new(), m);
        assert_eq!(s.original_queue.as_deref(), Some("work"));
        assert_eq!(s.reason.as_deref(), Some("rejected"));
        assert_eq!(s.first_death_queue.as_deref(), Some("work.wait"));
        assert_eq!(s.first_death_reason.as_deref(), Some("expired"));
        assert_eq!(s.death_count, 4);
        assert_eq!(s.first_death_at, Some(1700000000));
    }

    /// A crash of the `amqp_field_table` and `message_render` fuzz targets: `x-death` counts
    /// that add up past i64 overflowed the sum.
    #[test]
    fn death_counts_past_i64_saturate() {
        let properties = serde_json::json!({"headers": {"x-death": [
            {"queue": "a", "reason": "rejected", "count": i64::MAX},
            {"queue": "b", "reason": "expired", "count": 5}
        ]}});
        let m = PeekedMessage {
            exchange: String::new(),
            routing_key: String::new(),
            redelivered: false,
            payload_bytes: 0,
            payload_encoding: "string".into(),
            payload: String::new(),
            properties: properties.as_object().unwrap().clone(),
        };
        assert_eq!(summarize(1, String::new(), m).death_count, i64::MAX);
    }

    #[test]
    fn binary_payloads_are_hex() {
        let m = PeekedMessage {
            exchange: String::new(),
            routing_key: String::new(),
            redelivered: false,
            payload_bytes: 3,
            payload_encoding: "base64".into(),
            payload: base64::engine::general_purpose::STANDARD.encode([0xff, 0x00, 0x41]),
            properties: Map::new(),
        };
        let (kind, dump) = render_payload(&m);
        assert_eq!(kind, "hex");
        assert!(dump.starts_with("00000000  ff 00 41"), "{dump}");
    }

    fn filter(fields: &[(&str, &str)]) -> Filter {
        let mut f = Filter::default();
        for (k, v) in fields {
            assert!(f.set_form_field(&format!("filter_{k}"), v.to_string()), "{k}");
        }
        f
    }

    fn peeked(headers: Value, payload: &str) -> PeekedMessage {
        let mut properties = Map::new();
        if !headers.is_null() {
            properties.insert("headers".to_string(), headers);
        }
        PeekedMessage {
            properties,
            payload: payload.to_string(),
            payload_encoding: "string".to_string(),
            payload_bytes: payload.len() as u64,
            exchange: String::new(),
            routing_key: String::new(),
            redelivered: false,
        }
    }

    /// Issue 31, case 7: a dramatiq message keeps its traceback in its body; an error header
    /// wins over it; a body that only looks like one gives nothing.
    #[test]
    fn a_dramatiq_traceback_in_the_body_is_the_error() {
        let body = serde_json::json!({"message_id": "m1", "actor_name": "charge", "args": [], "kwargs": {},
            "options": {"retries": 3, "traceback": "Traceback (most recent call last):\n  File \"a.py\", line 3\nKeyError: 'customer 42'\n"}})
        .to_string();
        let s = summarize(1, String::new(), peeked(Value::Null, &body));
        assert_eq!(error_line(&s).as_deref(), Some("KeyError: 'customer 42'"));
        assert_eq!(error_group(&s).as_deref(), Some("KeyError: <q>"));
        assert_eq!(s.reason.as_deref(), Some(REPUBLISHED), "dramatiq publishes its dead letters itself");
        let s = summarize(1, String::new(), peeked(serde_json::json!({"x-error": "header wins"}), &body));
        assert_eq!(error_line(&s).as_deref(), Some("header wins"));
        // Not dramatiq's envelope (no actor): the body is not read for an error.
        let plain = r#"{"options": {"traceback": "ValueError: x"}}"#;
        assert_eq!(summarize(1, String::new(), peeked(Value::Null, plain)).error, None);
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
        assert_eq!(sqlite_json_path(&steps), r#"$."order"."items"[0][2]."sku""#);
        assert_eq!(sqlite_json_path(&parse_json_path("[3].a").unwrap()), r#"$[3]."a""#);
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
